// prelude.cu: included first in every kernel Rill compiles at run time.
// f16 and bf16 travel as 16-bit integers and convert with PTX cvt, so no
// header is needed; Shape is the block of sizes and strides kernels take.
typedef unsigned short f16_t;
typedef unsigned short bf16_t;
__device__ __forceinline__ float ld_f16(f16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ f16_t st_f16(float f) { f16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float ld_bf16(bf16_t h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ bf16_t st_bf16(float f) { bf16_t h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ long long ipow(long long a, long long b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  unsigned long long r = 1, x = (unsigned long long)a;
  while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }
  return (long long)r;
}
__device__ __forceinline__ unsigned long long upow(unsigned long long a, unsigned long long b) {
  unsigned long long r = 1;
  for (; b; b >>= 1, a *= a) if (b & 1) r *= a;
  return r;
}
#define RILL_INF __int_as_float(0x7f800000)
#define RILL_NAN __int_as_float(0x7fc00000)
struct Shape { long long n; long long dims[8]; long long st[4][8]; long long base[4]; };
template <typename V> __device__ __forceinline__ V nanmax(V a, V b) { return a != a ? a : b != b ? b : a > b ? a : b; }
template <typename V> __device__ __forceinline__ V nanmin(V a, V b) { return a != a ? a : b != b ? b : a < b ? a : b; }
// Reductions over a block of up to 1024 threads; sh holds 32 values. (Template
// parameters are V: kernels define C, their compute type, as a macro.) Op
// combines two values; lanes past the block's warps start from Op::idle(sh).
struct SumOp {
  template <typename V> __device__ static V f(V a, V b) { return a + b; }
  template <typename V> __device__ static V idle(const V *) { return (V)0; }
};
struct MaxOp {
  template <typename V> __device__ static V f(V a, V b) { return nanmax(a, b); }
  template <typename V> __device__ static V idle(const V *sh) { return sh[0]; }
};
template <typename Op, typename V> __device__ V block_reduce(V v, V *sh) {
  for (int o = 16; o > 0; o >>= 1) v = Op::f(v, __shfl_down_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < (blockDim.x >> 5) ? sh[threadIdx.x] : Op::idle(sh);
    for (int o = 16; o > 0; o >>= 1) v = Op::f(v, __shfl_down_sync(0xffffffffu, v, o));
    __syncwarp();
    if (threadIdx.x == 0) sh[0] = v;
  }
  __syncthreads();
  V r = sh[0];
  __syncthreads();
  return r;
}
template <typename V> __device__ V block_sum(V v, V *sh) { return block_reduce<SumOp>(v, sh); }
template <typename V> __device__ V block_max(V v, V *sh) { return block_reduce<MaxOp>(v, sh); }
// The same over a warp, every lane getting the result.
template <typename Op, typename V> __device__ __forceinline__ V warp_all(V v) {
  for (int o = 16; o > 0; o >>= 1) v = Op::f(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// WC_N 16-byte loads of a lane from wc_row at elements wc_k0, wc_k0 + 32 V, ...
// (V = 16 / sizeof(WC_E); zeros from wc_len on) into wc_dst[c].q (names kept
// apart from the kernels' defines), all issued before any is
// used: a warp's pass over a product's row (gemv.cu, fused_linear.cu).
template <int WC_N, typename WC_U, typename WC_E>
__device__ __forceinline__ void warp_chunks(WC_U *wc_dst, const WC_E *wc_row, long long wc_k0, long long wc_len) {
#pragma unroll
  for (int wc_c = 0; wc_c < WC_N; wc_c++) {
    long long wc_k = wc_k0 + 32LL * (long long)(16 / sizeof(WC_E)) * wc_c;
    wc_dst[wc_c].q = wc_k < wc_len ? *(const uint4 *)(wc_row + wc_k) : make_uint4(0, 0, 0, 0);
  }
}
// A row of n elements held by a warp, W (a power of two) a lane: with vec,
// lane l's element i is at ((i / V) * 32 + l) * V + i % V, V of them in one
// 16-byte load (V = 16 / sizeof(E)); else at l + 32 * i. row_vec says whether
// the row's pointers allow it (16-byte aligned, n a multiple of V, W >= V).
// row_load reads the lane's elements (0 past n), every load issued before
// any is used; row_store writes them back.
template <int W, typename E> struct RowVec {
  static constexpr int V = 16 / sizeof(E) < W ? 16 / (int)sizeof(E) : W;
  static constexpr bool ok = V * sizeof(E) == 16;
};
template <int W, typename E> __device__ __forceinline__ bool row_vec(long long n, const void *p0, const void *p1, const void *p2, const void *p3, const void *p4) {
  if (!RowVec<W, E>::ok || n % RowVec<W, E>::V) return false;
  unsigned long long a = (unsigned long long)p0 | (unsigned long long)p1 | (unsigned long long)p2 | (unsigned long long)p3 | (unsigned long long)p4;
  return !(a & 15);
}
__device__ __forceinline__ long long row_j(int i, int lane, bool vec, int v) { return vec ? ((long long)(i / v) * 32 + lane) * v + i % v : lane + 32LL * i; }
template <int W, bool STORE, typename E> __device__ __forceinline__ void row_io(E *p, long long n, int lane, bool vec, E *r) {
  constexpr int V = RowVec<W, E>::V;
  if (RowVec<W, E>::ok && vec) {
#pragma unroll
    for (int c = 0; c < W / V; c++) {
      long long j = row_j(c * V, lane, true, V);
      union { uint4 q; E e[V]; } u;
      if (STORE) {
#pragma unroll
        for (int k = 0; k < V; k++) u.e[k] = r[c * V + k];
        if (j < n) *(uint4 *)(p + j) = u.q;
      } else {
        u.q = j < n ? *(const uint4 *)(p + j) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int k = 0; k < V; k++) r[c * V + k] = u.e[k];
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < W; i++) {
    long long j = row_j(i, lane, false, V);
    if (STORE) {
      if (j < n) p[j] = r[i];
    } else {
      r[i] = j < n ? p[j] : (E)0;
    }
  }
}
template <int W, typename E> __device__ __forceinline__ void row_load(const E *p, long long n, int lane, bool vec, E *r) { row_io<W, false>(const_cast<E *>(p), n, lane, vec, r); }
template <int W, typename E> __device__ __forceinline__ void row_store(E *p, long long n, int lane, bool vec, E *r) { row_io<W, true>(p, n, lane, vec, r); }
// A row or reduction kernel's prologue and epilogue (softmax.cu, layer_norm.cu,
// reduce.cu): with PROLOGUE (EPILOGUE) defined to 1, pro(v) (epi(v)), the
// elementwise ops merged before (after) the op, written by the op layer
// (cuda_around_function) after this prelude; else the value itself.
#if PROLOGUE
#define PRO(v) pro(v)
#else
#define PRO(v) (v)
#endif
#if EPILOGUE
#define EPI(v) epi(v)
#else
#define EPI(v) (v)
#endif
