// fused_linear.cu: y[M,N] = pro(x)[M,K] w[N,K]^T (+ bias[N]) (+ r[M,N]) for
// a few rows (M <= ROWS), gemv.cu's way: a warp per column n of y, its lanes
// reading w's row n (contiguous) and x's rows (contiguous, K apart), sums in
// C, then across the warp; 16 bytes a load where K and the pointers allow,
// up to CHUNKS loads a lane issued before any is used. x goes through the
// prologue as it is read, rounded to T where the op it stands for rounds:
//   FPRO 0  x itself
//   FPRO 1  rms_norm: p is the norm's weight [K]; the block first sums each
//          row's squares (all of its threads over the row) for r_m = 1 /
//          sqrt(mean + EPS); the element is round(round(x r_m) p_k)
//   FPRO 2  a gated unit: p is the value (x's layout); round(gate_f(x, p))
// then, as lane m stores row m: round(v + bias), round(that + r) (HAS_RES).
// y and r are [M,N] contiguous. With FEPI (no residual; no prologue but
// rms_norm's, both halves reading x through it), the
// product's N outputs are two halves: each warp computes column n of both
// (w's rows n and n + N/2) and stores round(gate_f(round(v_n + bias_n),
// round(v_{n+N/2} + bias_{n+N/2}))), y [M,N/2] (FEPI 2: the gate the second
// half, the arguments swapped). A block is WARPS warps (WARPS columns). Each
// lane's first CHUNKS weight loads are issued before the block's passes over
// x (the sum of squares; with STAGE, x through the prologue into shared
// memory once a block, KS = K, which the warps then read instead of
// computing the prologue each: WARPS times fewer reads of x and p and
// evaluations of the gate).
// Defines: T, C, LD, ST, ROWS, CHUNKS, WARPS, HAS_BIAS, FPRO, HAS_RES, STAGE,
// KS, FEPI, EPS (FPRO 1), gate_f (FPRO 2, FEPI).
__device__ __forceinline__ C flin_pro(T xe, T pe, C r) {
#if FPRO == 1
  T t, u;
  ST(t, LD(xe) * r);
  ST(u, LD(t) * LD(pe));
  return LD(u);
#elif FPRO == 2
  T t;
  ST(t, gate_f(LD(xe), LD(pe)));
  (void)r;
  return LD(t);
#else
  (void)pe, (void)r;
  return LD(xe);
#endif
}
// The prologue's operand at row m, element k (x's own where there is none).
#if FPRO == 1
#define PAT(m, k) p[k]
#elif FPRO == 2
#define PAT(m, k) p[(m) * K + (k)]
#else
#define PAT(m, k) x[(m) * K + (k)]
#endif

#if FPRO == 1
// The norm's r of a row of K elements whose squares sum to ss.
__device__ __forceinline__ C flin_r(C ss, long long K) { return (C)1 / sqrt(ss / (C)K + (C)EPS); }
#endif

// FPRO 1: each row's r_m = 1 / sqrt(mean(x_m^2) + EPS) into rs (all of the
// block's threads over the row, then a block sum); else nothing.
__device__ __forceinline__ void flin_norm_sums(const T *x, long long M, long long K, C *rs) {
#if FPRO == 1
  __shared__ C sh[32];
  for (int m = 0; m < ROWS && m < M; m++) {
    C ss = 0;
#pragma unroll 8
    for (long long k = threadIdx.x; k < K; k += blockDim.x) {
      C v = LD(x[m * K + k]);
      ss += v * v;
    }
    C tot = block_sum(ss, sh);
    if (threadIdx.x == 0) rs[m] = flin_r(tot, K);
  }
#else
  (void)x, (void)M, (void)K, (void)rs;
#endif
}

extern "C" __global__ void flin_k(const T *x, const T *w, const T *bias, const T *p, const T *res, T *y, Shape s) {
  long long M = s.base[0], N = s.base[1], K = s.base[2], NO = FEPI ? N / 2 : N;  // NO: y's columns
  long long n = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
  int lane = threadIdx.x & 31;
  bool live = n < NO;
  const T *col = w + (live ? n : 0) * K;
#if FEPI
  const T *col2 = col + NO * K;  // the other half's row
#endif
  constexpr int V = 16 / sizeof(T);
  typedef union { uint4 q; T e[V]; } vec_t;
  unsigned long long al = (unsigned long long)x | (unsigned long long)w;
#if FPRO
  al |= (unsigned long long)p;
#endif
  bool vec = V > 1 && !(K % V) && !(al & 15);
  // The first weights in flight before the prologue's passes over x.
  vec_t wv[CHUNKS];
  warp_chunks<CHUNKS>(wv, col, (long long)lane * V, vec && live ? K : 0);
#if FEPI
  vec_t wv2[CHUNKS];
  warp_chunks<CHUNKS>(wv2, col2, (long long)lane * V, vec && live ? K : 0);
#endif
  __shared__ C rs[ROWS];
  if (threadIdx.x < ROWS) rs[threadIdx.x] = 1;  // (the norm's r_m where FPRO is 1)
#if STAGE
  // x through the prologue once a block, into shared memory (rounded to T, as
  // the prologue rounds), which the warps then read as a plain x. With 16-byte
  // loads each thread's chunks of x and of the prologue's operand are all
  // issued at once, kept in registers for the norm's sums, then staged: one
  // trip to memory before the warps start (a loop of element loads, each
  // behind the one before, took a round trip each).
  __shared__ __align__(16) T xs[ROWS * KS];
  constexpr int SCH = (ROWS * KS + 32 * WARPS * V - 1) / (32 * WARPS * V);  // a thread's chunks at most (at least 1: K < V takes no vectors)
  if (vec) {
    vec_t xc[SCH], pc[SCH];
#pragma unroll
    for (int c = 0; c < SCH; c++) {
      long long i = ((long long)c * blockDim.x + threadIdx.x) * V;
      if (i < M * KS) {
        xc[c].q = *(const uint4 *)(x + i);
        pc[c].q = *(const uint4 *)&PAT(i / KS, i % KS);
      }
    }
#if FPRO == 1
    C ss[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; m++) ss[m] = 0;
#pragma unroll
    for (int c = 0; c < SCH; c++) {
      long long i = ((long long)c * blockDim.x + threadIdx.x) * V;
      if (i >= M * KS) break;
      C t = 0;
#pragma unroll
      for (int e = 0; e < V; e++) t += LD(xc[c].e[e]) * LD(xc[c].e[e]);
#pragma unroll
      for (int m = 0; m < ROWS; m++)
        if (m == i / KS) ss[m] += t;
    }
    __shared__ C sh[32];
#pragma unroll
    for (int m = 0; m < ROWS; m++) {
      C tot = block_sum(ss[m], sh);
      if (threadIdx.x == 0) rs[m] = flin_r(tot, KS);
    }
#endif
    __syncthreads();
#pragma unroll
    for (int c = 0; c < SCH; c++) {
      long long i = ((long long)c * blockDim.x + threadIdx.x) * V;
      if (i >= M * KS) break;
      vec_t o;
#pragma unroll
      for (int e = 0; e < V; e++) ST(o.e[e], flin_pro(xc[c].e[e], pc[c].e[e], rs[i / KS]));
      *(uint4 *)(xs + i) = o.q;
    }
  } else {
    flin_norm_sums(x, M, K, rs);
    __syncthreads();
    for (long long i = threadIdx.x; i < M * K; i += blockDim.x) {
      long long m = i / K, k = i % K;
      ST(xs[i], flin_pro(x[i], PAT(m, k), rs[m]));
    }
  }
  __syncthreads();
  const T *xr = xs;
#define XV(e, pe, m) LD(e)
#else
  flin_norm_sums(x, M, K, rs);
  __syncthreads();
  const T *xr = x;
#define XV(e, pe, m) flin_pro(e, pe, rs[m])
#endif
  if (!live) return;  // whole warps leave together, after the block's passes
  C acc[ROWS];
#pragma unroll
  for (int m = 0; m < ROWS; m++) acc[m] = 0;
#if FEPI
  C acc2[ROWS];
#pragma unroll
  for (int m = 0; m < ROWS; m++) acc2[m] = 0;
#endif
  if (vec) {
    for (long long k0 = (long long)lane * V; k0 < K; k0 += 32LL * V * CHUNKS) {
      if (k0 != (long long)lane * V) warp_chunks<CHUNKS>(wv, col, k0, K);
#if FEPI
      if (k0 != (long long)lane * V) warp_chunks<CHUNKS>(wv2, col2, k0, K);
#endif
#pragma unroll
      for (int m = 0; m < ROWS; m++) {
        if (m >= M) break;
        vec_t xv[CHUNKS], pv[CHUNKS];
        warp_chunks<CHUNKS>(xv, xr + m * K, k0, K);
#if FPRO && !STAGE
        warp_chunks<CHUNKS>(pv, &PAT(m, 0), k0, K);
#else
#pragma unroll
        for (int c = 0; c < CHUNKS; c++) pv[c].q = xv[c].q;
#endif
#pragma unroll
        for (int c = 0; c < CHUNKS; c++)
#pragma unroll
          for (int e = 0; e < V; e++) {
            C xe = XV(xv[c].e[e], pv[c].e[e], m);  // (once for both halves)
            acc[m] += xe * LD(wv[c].e[e]);
#if FEPI
            acc2[m] += xe * LD(wv2[c].e[e]);
#endif
          }
      }
    }
  } else {
#pragma unroll 4
    for (long long k = lane; k < K; k += 32) {
      C wk = LD(col[k]);
#if FEPI
      C wk2 = LD(col2[k]);
#endif
#pragma unroll
      for (int m = 0; m < ROWS; m++)
        if (m < M) {
          C xe = XV(xr[m * K + k], PAT(m, k), m);
          acc[m] += xe * wk;
#if FEPI
          acc2[m] += xe * wk2;
#endif
        }
    }
  }
#pragma unroll
  for (int m = 0; m < ROWS; m++) {
    C v = warp_all<SumOp>(acc[m]);
#if FEPI
    C v2 = warp_all<SumOp>(acc2[m]);
#endif
    if (lane != m || m >= M) continue;  // lane m writes row m
    T t;
#if HAS_BIAS
    ST(t, v + LD(bias[n]));
#else
    ST(t, v);
#endif
#if FEPI
    T u;
#if HAS_BIAS
    ST(u, v2 + LD(bias[n + NO]));
#else
    ST(u, v2);
#endif
#if FEPI == 2
    ST(t, gate_f(LD(u), LD(t)));  // (the gate the second half)
#else
    ST(t, gate_f(LD(t), LD(u)));
#endif
#endif
#if HAS_RES
    ST(t, LD(t) + LD(res[m * NO + n]));
#endif
    y[m * NO + n] = t;
  }
}
