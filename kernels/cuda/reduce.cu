// reduce.cu: sum, mean, max, min or prod, a warp per output element (or
// SPLIT warps, below). The output
// walks the kept dimensions (s.dims, strides s.st[0], NK of them); each
// output reduces R = s.base[0] elements over the reduced dimensions (sizes
// s.st[2], strides s.st[1], NR of them).
// PRO(v): each element through the elementwise ops merged before the op;
// EPI(v): each result through those merged after it (prelude.cu).
// Defines: T, TY, C, LD, ST, NK, NR, INIT, COMBINE(acc, v), FINAL(acc, R),
// PROLOGUE, EPILOGUE.
extern "C" __global__ void reduce_k(const T *x, TY *y, Shape s) {
  long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (w >= s.n) return;  // whole warps leave together
  long long R = s.base[0], r = w, off = 0;
#pragma unroll
  for (int d = NK - 1; d >= 0; d--) { long long q = r % s.dims[d]; r /= s.dims[d]; off += q * s.st[0][d]; }
  C acc = INIT;
  for (long long j = lane; j < R; j += 32) {
    long long rr = j, o = off;
#pragma unroll
    for (int d = NR - 1; d >= 0; d--) { long long q = rr % s.st[2][d]; rr /= s.st[2][d]; o += q * s.st[1][d]; }
    C v = PRO(LD(x[o]));
    acc = COMBINE(acc, v);
  }
  for (int o = 16; o > 0; o >>= 1) {
    C v = __shfl_down_sync(0xffffffffu, acc, o);
    if (lane + o < 32) acc = COMBINE(acc, v);
  }
  if (lane == 0) ST(y[w], EPI(FINAL(acc, R)));
}

// Few outputs over many elements: SPLIT warps an output. reduce_part_k
// leaves each warp's partial (before FINAL) in part [n, SPLIT];
// reduce_final_k combines an output's SPLIT partials, a warp an output.
// Defines (both): SPLIT.
__device__ __forceinline__ C reduce_warp(C acc) {
  for (int o = 16; o > 0; o >>= 1) {
    C v = __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) + o < 32) acc = COMBINE(acc, v);
  }
  return acc;
}

extern "C" __global__ void reduce_part_k(const T *x, C *part, Shape s) {
  long long g = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (g >= s.n * SPLIT) return;  // whole warps leave together
  long long w = g / SPLIT, sp = g % SPLIT, R = s.base[0], r = w, off = 0;
#pragma unroll
  for (int d = NK - 1; d >= 0; d--) { long long q = r % s.dims[d]; r /= s.dims[d]; off += q * s.st[0][d]; }
  long long chunk = (R + SPLIT - 1) / SPLIT, j1 = (sp + 1) * chunk < R ? (sp + 1) * chunk : R;
  C acc = INIT;
  for (long long j = sp * chunk + lane; j < j1; j += 32) {
    long long rr = j, o = off;
#pragma unroll
    for (int d = NR - 1; d >= 0; d--) { long long q = rr % s.st[2][d]; rr /= s.st[2][d]; o += q * s.st[1][d]; }
    C v = PRO(LD(x[o]));
    acc = COMBINE(acc, v);
  }
  acc = reduce_warp(acc);
  if (lane == 0) part[g] = acc;
}

extern "C" __global__ void reduce_final_k(const C *part, TY *y, Shape s) {
  long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (w >= s.n) return;
  C acc = INIT;
  for (int j = lane; j < SPLIT; j += 32) acc = COMBINE(acc, part[w * SPLIT + j]);
  acc = reduce_warp(acc);
  if (lane == 0) ST(y[w], EPI(FINAL(acc, s.base[0])));
}
