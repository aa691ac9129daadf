// layer_norm.cu: normalises rows of s.dims[0] contiguous elements, then
// scales by gamma and shifts by beta when given. With RESIDUAL, the row is
// x + z rounded to T (as an add before it would). layer_norm_k: a block per
// row; with RESIDUAL its first pass writes the row to y, which the later
// passes read (each thread its own elements). layer_norm_warp_k (rows no
// longer than 32 * WARP, s.dims[2] of them): a warp per row, held in
// registers (WARP elements a lane, read by row_load: 16 bytes at a time
// where aligned), so it is read once, every load issued before any is used.
// EPI(v): each result through the elementwise ops merged after the op
// (prelude.cu). gamma and beta are P, T or f32 (an f32 program run in half,
// --precision=f16: its norms' parameters stay f32), read by LDP; with
// MIXED (P is not T) the warp kernel reads them an element at a time, at
// the places of the row's elements in the lane.
// Defines: T, C, LD, ST, P, LDP, MIXED, EPS, HAS_GAMMA, HAS_BETA, RESIDUAL,
// WARP, EPILOGUE.
#ifndef P
#define P T
#define LDP(v) LD(v)
#define MIXED 0
#endif
#if WARP
extern "C" __global__ void layer_norm_warp_k(const T *x, const P *g, const P *b, const T *z, T *y, Shape s) {
  long long n = s.dims[0], row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  int lane = threadIdx.x & 31;
  if (row >= s.dims[2]) return;  // whole warps leave together
  long long base = row * n;
  bool vec = row_vec<WARP, T>(n, x, g, b, z, y);
  T r[WARP];
  C v[WARP], sum = 0;
  row_load<WARP>(x + base, n, lane, vec, r);
#if RESIDUAL
  T q[WARP];
  row_load<WARP>(z + base, n, lane, vec, q);
#endif
#pragma unroll
  for (int i = 0; i < WARP; i++) {
#if RESIDUAL
    ST(r[i], LD(r[i]) + LD(q[i]));
#endif
    v[i] = LD(r[i]);  // 0 past n
    sum += v[i];
  }
  C mean = warp_all<SumOp>(sum) / (C)(n ? n : 1), var = 0;
#pragma unroll
  for (int i = 0; i < WARP; i++) {
    v[i] -= mean;
    if (row_j(i, lane, vec, RowVec<WARP, T>::V) < n) var += v[i] * v[i];
  }
  C rs = (C)1 / sqrt(warp_all<SumOp>(var) / (C)(n ? n : 1) + (C)EPS);
#if MIXED
#pragma unroll
  for (int i = 0; i < WARP; i++) {
    long long j = row_j(i, lane, vec, RowVec<WARP, T>::V);
    C o = v[i] * rs;
#if HAS_GAMMA
    o *= j < n ? LDP(g[j]) : (C)0;
#endif
#if HAS_BETA
    o += j < n ? LDP(b[j]) : (C)0;
#endif
    ST(r[i], EPI(o));
  }
#else
#if HAS_GAMMA
  row_load<WARP>(g, n, lane, vec, r);
#endif
#if HAS_BETA
  T h[WARP];
  row_load<WARP>(b, n, lane, vec, h);
#endif
#pragma unroll
  for (int i = 0; i < WARP; i++) {
    C o = v[i] * rs;
#if HAS_GAMMA
    o *= LD(r[i]);
#endif
#if HAS_BETA
    o += LD(h[i]);
#endif
    ST(r[i], EPI(o));
  }
#endif
  row_store<WARP>(y + base, n, lane, vec, r);
}
#else
extern "C" __global__ void layer_norm_k(const T *x, const P *g, const P *b, const T *z, T *y, Shape s) {
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
    if (HAS_GAMMA) v *= LDP(g[j]);
    if (HAS_BETA) v += LDP(b[j]);
    ST(y[base + j], EPI(v));
  }
}
#endif
