// pool.cu: max and average pooling, and adaptive average pooling, a thread
// per output element over planes of s.dims[0] x s.dims[1] (output s.dims[2] x
// s.dims[3]). Defines: T, TY, C, LD, ST, MODE (0 max, 1 average, 2 adaptive),
// KH, KW, SH, SW, PH, PW, INCLUDE_PAD, UNROLL, I (the index type); NHWC: channels
// last (s.dims[4] of them), so plane (n, c) starts at n*H*W*CH + c and its
// columns are CH apart, and a thread takes VEC channels side by side (x and y
// aligned to VEC elements; VEC 1 otherwise). WARP (adaptive pooling only): a
// warp per output.
template <typename E, int N> struct __align__(sizeof(E) * N) pvec { E v[N]; };
#if UNROLL
#define WINDOW_LOOP _Pragma("unroll")
#else
#define WINDOW_LOOP _Pragma("unroll 1")
#endif
extern "C" __global__ void pool_k(const T *x, TY *y, Shape s) {
  I H = (I)s.dims[0], W = (I)s.dims[1], OH = (I)s.dims[2], OW = (I)s.dims[3];
#ifdef NHWC
  I CH = (I)s.dims[4] / VEC;  // groups of VEC channels
#else
  const I CH = 1;
#endif
  typedef pvec<T, VEC> VX;
  typedef pvec<TY, VEC> VY;
#ifdef WARP
  // Adaptive pooling with large windows: a warp per output, its lanes taking
  // the window's elements 32 apart, then summed across the warp.
  int lane = threadIdx.x & 31;
  for (I t = (blockIdx.x * (I)blockDim.x + threadIdx.x) >> 5; t < (I)s.n / VEC; t += ((I)gridDim.x * blockDim.x) >> 5) {
#else
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)s.n / VEC; t += (I)gridDim.x * blockDim.x) {
#endif
    // pl: the plane n*C + c (NCHW), or the image n (NHWC, whose channel group is t % CH)
    I u = t / CH, ow = u % OW, oh = (u / OW) % OH, pl = u / OW / OH;
    const VX *p = (const VX *)x + pl * H * W * CH + t % CH;
    C acc[VEC];
    VY o;
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = MODE == 0 ? -RILL_INF : (C)0;
    if (MODE == 2) {
      // (oh + 1) * H may pass I's range where x and y do not: the bounds in 64 bits
      I h0 = (I)((long long)oh * H / OH), h1 = (I)(((long long)oh * H + H + OH - 1) / OH);
      I w0 = (I)((long long)ow * W / OW), w1 = (I)(((long long)ow * W + W + OW - 1) / OW);
      I ww = w1 - w0, area = (h1 - h0) * ww;
#ifdef WARP
      for (I k = lane; k < area; k += 32) {
#else
      for (I k = 0; k < area; k++) {
#endif
        VX v = p[((h0 + k / ww) * W + w0 + k % ww) * CH];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[e] += LD(v.v[e]);
      }
#ifdef WARP
#pragma unroll
      for (int e = 0; e < VEC; e++)
        for (int d = 16; d > 0; d >>= 1) acc[e] += __shfl_down_sync(0xffffffffu, acc[e], d);
      if (lane) continue;
#endif
#pragma unroll
      for (int e = 0; e < VEC; e++) ST(o.v[e], acc[e] / (C)area);
      ((VY *)y)[t] = o;
      continue;
    }
    I hs = oh * SH - PH, ws = ow * SW - PW, he = hs + KH, we = ws + KW;
    // PyTorch's average divisor with padding counts the window clipped to the padded input.
    I hep = he < H + PH ? he : H + PH, wep = we < W + PW ? we : W + PW;
    I h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws, h1 = he < H ? he : H, w1 = we < W ? we : W;
    // The window unrolled where small (KH and KW are constants: UNROLL), its
    // loads independent of each other.
    WINDOW_LOOP
    for (int di = 0; di < KH; di++) {
      I i = hs + di;
      if (i < 0 || i >= H) continue;
      WINDOW_LOOP
      for (int dj = 0; dj < KW; dj++) {
        I j = ws + dj;
        if (j < 0 || j >= W) continue;
        VX v = p[(i * W + j) * CH];
#pragma unroll
        for (int e = 0; e < VEC; e++) {
          C a = LD(v.v[e]);
          if (MODE == 1) acc[e] += a;
          else if ((a > acc[e] || a != a) && acc[e] == acc[e]) acc[e] = a;
        }
      }
    }
    I div = INCLUDE_PAD ? (hep - hs) * (wep - ws) : (h1 - h0) * (w1 - w0);
#pragma unroll
    for (int e = 0; e < VEC; e++) ST(o.v[e], MODE != 1 ? acc[e] : div > 0 ? acc[e] / (C)div : (C)RILL_NAN);
    ((VY *)y)[t] = o;
  }
}
