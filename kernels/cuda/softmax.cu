// softmax.cu: softmax or log_softmax along an axis. A row has s.dims[0]
// elements, s.dims[1] apart. softmax_k: a block per row. softmax_warp_k (rows
// of contiguous elements, s.dims[2] of them, no longer than 32 * WARP): a warp
// per row, the row held in registers (WARP elements a lane, read by row_load:
// 16 bytes at a time where aligned), so it is read once. Defines: T, C, LD,
// ST, LOG_SOFTMAX, WARP; PRESCALE with SCALE and DIVISOR: of x * SCALE /
// DIVISOR rounded to T (a mul or div merged into the op), as those ops would
// give it; else PRO(v): each element through the elementwise ops merged
// before the op; EPI(v): each result through those merged after it
// (prelude.cu); with MASK (x's rank), pro(v, mask) reads mk, the mask,
// at x's element broadcast.
#if PRESCALE
__device__ __forceinline__ C pre(C v) {
  T t;
  ST(t, v * SCALE / DIVISOR);
  return LD(t);
}
#define PRE(v, e) pre(v)
#elif MASK
// the mask's element at x's element e: MASK dims (s.st[0]), strides s.st[1]
__device__ __forceinline__ long long moff(long long e, const Shape &s) {
  long long o = 0;
#pragma unroll
  for (int d = MASK - 1; d >= 0; d--) {
    o += (e % s.st[0][d]) * s.st[1][d];
    e /= s.st[0][d];
  }
  return o;
}
#define PRE(v, e) pro(v, LD(mk[moff(e, s)]))
#else
#define PRE(v, e) PRO(v)
#endif
#if WARP
extern "C" __global__ void softmax_warp_k(const T *x, const T *mk, T *y, Shape s) {
  long long len = s.dims[0], row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (row >= s.dims[2]) return;  // whole warps leave together
  x += row * len;
  y += row * len;
  bool vec = row_vec<WARP, T>(len, x, y, 0, 0, 0);
  T r[WARP];
  row_load<WARP>(x, len, lane, vec, r);
  C v[WARP], m = -RILL_INF;
#pragma unroll
  for (int i = 0; i < WARP; i++) {
    long long j = row_j(i, lane, vec, RowVec<WARP, T>::V);
    v[i] = j < len ? PRE(LD(r[i]), row * len + j) : -RILL_INF;
    m = nanmax(m, v[i]);
  }
  m = warp_all<MaxOp>(m);
  if (m == -RILL_INF) m = 0;  // a row of -inf: NaN, as PyTorch gives
  C sum = 0;
#pragma unroll
  for (int i = 0; i < WARP; i++) {
    v[i] -= m;
    sum += exp(v[i]);  // 0 past len
  }
  sum = warp_all<SumOp>(sum);
#pragma unroll
  for (int i = 0; i < WARP; i++) ST(r[i], EPI(LOG_SOFTMAX ? v[i] - log(sum) : exp(v[i]) / sum));
  row_store<WARP>(y, len, lane, vec, r);
}
#else
extern "C" __global__ void softmax_k(const T *x, const T *mk, T *y, Shape s) {
  __shared__ C sh[32];
  long long len = s.dims[0], inner = s.dims[1], row = blockIdx.x;
  long long base = (row / inner) * len * inner + row % inner;
  C m = -RILL_INF;
  for (long long j = threadIdx.x; j < len; j += blockDim.x) m = nanmax(m, PRE(LD(x[base + j * inner]), base + j * inner));
  m = block_max(m, sh);
  if (m == -RILL_INF) m = 0;  // a row of -inf: every exp is 0 and the sum 0, giving NaN as PyTorch does
  C sum = 0;
  for (long long j = threadIdx.x; j < len; j += blockDim.x) sum += exp(PRE(LD(x[base + j * inner]), base + j * inner) - m);
  sum = block_sum(sum, sh);
  for (long long j = threadIdx.x; j < len; j += blockDim.x) {
    C v = PRE(LD(x[base + j * inner]), base + j * inner) - m;
    ST(y[base + j * inner], EPI(LOG_SOFTMAX ? v - log(sum) : exp(v) / sum));
  }
}
#endif
