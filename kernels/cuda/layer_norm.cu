// layer_norm.cu: normalises rows of s.dims[0] contiguous elements, a block per
// row, then scales by gamma and shifts by beta when given. With RESIDUAL, the
// row is x + z rounded to T (as an add before it would): the first pass
// writes it to y, which the later passes read (each thread its own elements).
// Defines: T, C, LD, ST, EPS, HAS_GAMMA, HAS_BETA, RESIDUAL.
extern "C" __global__ void layer_norm_k(const T *x, const T *g, const T *b, const T *z, T *y, Shape s) {
  __shared__ C sh[32];
  long long n = s.dims[0], base = blockIdx.x * n;
  C sum = 0;
#if RESIDUAL
  for (long long j = threadIdx.x; j < n; j += blockDim.x) {
    ST(y[base + j], LD(x[base + j]) + LD(z[base + j]));
    sum += LD(y[base + j]);
  }
  x = y;
#else
  for (long long j = threadIdx.x; j < n; j += blockDim.x) sum += LD(x[base + j]);
#endif
  C mean = block_sum(sum, sh) / (C)(n ? n : 1);
  C var = 0;
  for (long long j = threadIdx.x; j < n; j += blockDim.x) {
    C v = LD(x[base + j]) - mean;
    var += v * v;
  }
  var = block_sum(var, sh) / (C)(n ? n : 1);
  C r = (C)1 / sqrt(var + (C)EPS);
  for (long long j = threadIdx.x; j < n; j += blockDim.x) {
    C v = (LD(x[base + j]) - mean) * r;
    if (HAS_GAMMA) v *= LD(g[j]);
    if (HAS_BETA) v += LD(b[j]);
    ST(y[base + j], v);
  }
}
