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
// Defines: T, C, LD, ST, ROWS, CHUNKS, HAS_BIAS, ACT (act_f).
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
    T t;
    ST(t, HAS_BIAS ? v + LD(bias[n]) : v);
#ifdef ACT
    ST(t, act_f(LD(t)));
#endif
    ST(y[m * s.st[3][4] + n * s.st[3][5]], LD(t));
  }
}
