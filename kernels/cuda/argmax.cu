// argmax.cu: the index of the largest element along the reduced dimensions
// (as reduce.cu), a warp per output. NaN counts as the largest; ties go to
// the first index, as in PyTorch. Defines: T, C, LD, NK, NR.
__device__ __forceinline__ bool better(C v, long long vi, C best, long long bi) {
  if (bi < 0) return true;
  if (best != best) return v != v && vi < bi;  // NaN already: only an earlier NaN wins
  if (v != v || v > best) return true;
  return v == best && vi < bi;
}
extern "C" __global__ void argmax_k(const T *x, long long *y, Shape s) {
  long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (w >= s.n) return;
  long long R = s.base[0], r = w, off = 0;
#pragma unroll
  for (int d = NK - 1; d >= 0; d--) { long long q = r % s.dims[d]; r /= s.dims[d]; off += q * s.st[0][d]; }
  C best = 0;
  long long bi = -1;
  for (long long j = lane; j < R; j += 32) {
    long long rr = j, o = off;
#pragma unroll
    for (int d = NR - 1; d >= 0; d--) { long long q = rr % s.st[2][d]; rr /= s.st[2][d]; o += q * s.st[1][d]; }
    C v = LD(x[o]);
    if (better(v, j, best, bi)) { best = v; bi = j; }
  }
  for (int o = 16; o > 0; o >>= 1) {
    C v = __shfl_down_sync(0xffffffffu, best, o);
    long long vi = __shfl_down_sync(0xffffffffu, bi, o);
    if (lane + o < 32 && vi >= 0 && better(v, vi, best, bi)) { best = v; bi = vi; }
  }
  if (lane == 0) y[w] = bi;
}
