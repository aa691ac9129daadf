// reduce.cu: sum, mean, max or min, a warp per output element. The output
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
