// gemv.cu: y[M,N] = a[M,K] b[K,N] (+ bias[N]; then the activation, on the
// result rounded to T) for a few rows (M <= ROWS): a warp per column n of y,
// its lanes reading b's column n (K contiguous elements, s.st[3][3] apart
// from column to column: linear's weight rows) and a's rows (contiguous,
// s.st[3][0] apart); sums in C, then across the warp. Where K, the strides
// and the pointers allow, 16 bytes a load, up to CHUNKS loads a lane at once
// (K / (32 * 16 bytes) rounded up, at most 16; the kernel is built per
// CHUNKS), all issued before any is used: a product of one row is a read of
// b, as fast as the memory's latency allows. Else an element a load. y
// through its strides s.st[3][4] (rows) and s.st[3][5].
// Defines: T, C, LD, ST, ROWS, CHUNKS, HAS_BIAS, ACT (act_f); with KS
// defined, gemv_kn_k below instead.

// y[m, n] := v (+ bias[n]; then the activation, on the result rounded to T)
__device__ __forceinline__ void gemv_put(T *y, const T *bias, const Shape &s, long long m, long long n, C v) {
  T t;
  ST(t, HAS_BIAS ? v + LD(bias[n]) : v);
#ifdef ACT
  ST(t, act_f(LD(t)));
#endif
  ST(y[m * s.st[3][4] + n * s.st[3][5]], LD(t));
}

#ifndef KS
extern "C" __global__ void gemv_k(const T *a, const T *b, const T *bias, T *y, Shape s) {
  long long M = s.base[0], N = s.base[1], K = s.base[2], lda = s.st[3][0], ldb = s.st[3][3];
  long long n = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (n >= N) return;  // whole warps leave together
  const T *col = b + n * ldb;
  C acc[ROWS];
#pragma unroll
  for (int m = 0; m < ROWS; m++) acc[m] = 0;
  constexpr int V = 16 / sizeof(T);
  if (V > 1 && !(K % V) && !(ldb % V) && !(lda % V) && !(((unsigned long long)a | (unsigned long long)b) & 15)) {
    typedef union { uint4 q; T e[V]; } vec_t;
    for (long long k0 = (long long)lane * V; k0 < K; k0 += 32LL * V * CHUNKS) {
      vec_t w[CHUNKS];
      warp_chunks<CHUNKS>(w, col, k0, K);
#pragma unroll
      for (int m = 0; m < ROWS; m++) {
        if (m >= M) break;
        vec_t x[CHUNKS];
        warp_chunks<CHUNKS>(x, a + m * lda, k0, K);
#pragma unroll
        for (int c = 0; c < CHUNKS; c++)
#pragma unroll
          for (int e = 0; e < V; e++) acc[m] += LD(x[c].e[e]) * LD(w[c].e[e]);
      }
    }
  } else {
#pragma unroll 4
    for (long long k = lane; k < K; k += 32) {
      C w = LD(col[k]);
#pragma unroll
      for (int m = 0; m < ROWS; m++)
        if (m < M) acc[m] += LD(a[m * lda + k]) * w;
    }
  }
#pragma unroll
  for (int m = 0; m < ROWS; m++) {
    C v = warp_all<SumOp>(acc[m]);
    if (lane != m || m >= M) continue;  // lane m writes row m
    gemv_put(y, bias, s, m, n, v);
  }
}
#else
// gemv_kn_k (KS defined): y[M,N] = a[M,K] b[K,N] (+ bias[N]; then the activation, on
// the result rounded to T) for a few rows (M <= ROWS) where b's rows are
// contiguous (linear's weight="kn": [in, out] as ONNX exporters write a
// MatMul's weight, read as it lies). A block takes 32 columns of y; its KS
// warps each sum a share of K (rows k = warp, warp + KS, ...), lane j
// reading column n0 + j of each of its rows of b (a warp reads 32
// contiguous elements a row); the warps' sums are then added in shared
// memory in warp order, so a run gives the same bits each time. a's rows
// s.st[3][0] apart, b's rows s.st[3][2] apart; y through its strides
// s.st[3][4] (rows) and s.st[3][5].
// (gemv_put as gemv_k's.)
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
    gemv_put(y, bias, s, m, n, v);
  }
}
#endif
