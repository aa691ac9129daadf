// gemv_kn.cu: y[M,N] = a[M,K] b[K,N] (+ bias[N]; then the activation, on
// the result rounded to T) for a few rows (M <= ROWS) where b's rows are
// contiguous (linear's weight="kn": [in, out] as ONNX exporters write a
// MatMul's weight, read as it lies). A block takes 32 columns of y; its KS
// warps each sum a share of K (rows k = warp, warp + KS, ...), lane j
// reading column n0 + j of each of its rows of b (a warp reads 32
// contiguous elements a row); the warps' sums are then added in shared
// memory in warp order, so a run gives the same bits each time. a's rows
// s.st[3][0] apart, b's rows s.st[3][2] apart; y through its strides
// s.st[3][4] (rows) and s.st[3][5].
// Defines: T, C, LD, ST, ROWS, KS, HAS_BIAS, ACT (act_f).
extern "C" __global__ void gemv_kn_k(const T *a, const T *b, const T *bias, T *y, Shape s) {
  long long M = s.base[0], N = s.base[1], K = s.base[2], lda = s.st[3][0], ldb = s.st[3][2];
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  long long n = (long long)blockIdx.x * 32 + lane;
  __shared__ C part[KS][ROWS][32];
  C acc[ROWS];
#pragma unroll
  for (int m = 0; m < ROWS; m++) acc[m] = 0;
  if (n < N) {
#pragma unroll 4
    for (long long k = w; k < K; k += KS) {
      C x = LD(b[k * ldb + n]);
#pragma unroll
      for (int m = 0; m < ROWS; m++)
        if (m < M) acc[m] += LD(a[m * lda + k]) * x;
    }
  }
#pragma unroll
  for (int m = 0; m < ROWS; m++) part[w][m][lane] = acc[m];
  __syncthreads();
  if (w != 0 || n >= N) return;
#pragma unroll
  for (int m = 0; m < ROWS; m++) {
    if (m >= M) break;
    C v = 0;
    for (int j = 0; j < KS; j++) v += part[j][m][lane];
    T t;
    ST(t, HAS_BIAS ? v + LD(bias[n]) : v);
#ifdef ACT
    ST(t, act_f(LD(t)));
#endif
    ST(y[m * s.st[3][4] + n * s.st[3][5]], LD(t));
  }
}
