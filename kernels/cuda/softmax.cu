// softmax.cu: softmax or log_softmax along an axis, a block per row. A row
// has s.dims[0] elements, s.dims[1] apart. Defines: T, C, LD, ST, LOG_SOFTMAX;
// PRESCALE with SCALE and DIVISOR: of x * SCALE / DIVISOR rounded to T (a mul
// or div merged into the op), as those ops would give it.
#if PRESCALE
__device__ __forceinline__ C pre(C v) {
  T t;
  ST(t, v * SCALE / DIVISOR);
  return LD(t);
}
#define PRE(v) pre(v)
#else
#define PRE(v) (v)
#endif
extern "C" __global__ void softmax_k(const T *x, T *y, Shape s) {
  __shared__ C sh[32];
  long long len = s.dims[0], inner = s.dims[1], row = blockIdx.x;
  long long base = (row / inner) * len * inner + row % inner;
  C m = -RILL_INF;
  for (long long j = threadIdx.x; j < len; j += blockDim.x) m = nanmax(m, PRE(LD(x[base + j * inner])));
  m = block_max(m, sh);
  if (m == -RILL_INF) m = 0;  // a row of -inf: every exp is 0 and the sum 0, giving NaN as PyTorch does
  C sum = 0;
  for (long long j = threadIdx.x; j < len; j += blockDim.x) sum += exp(PRE(LD(x[base + j * inner])) - m);
  sum = block_sum(sum, sh);
  for (long long j = threadIdx.x; j < len; j += blockDim.x) {
    C v = PRE(LD(x[base + j * inner])) - m;
    ST(y[base + j * inner], LOG_SOFTMAX ? v - log(sum) : exp(v) / sum);
  }
}
