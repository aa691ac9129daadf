// pool.cu: max and average pooling, and adaptive average pooling, a thread
// per output element over planes of s.dims[0] x s.dims[1] (output s.dims[2] x
// s.dims[3]). Defines: T, TY, C, LD, ST, MODE (0 max, 1 average, 2 adaptive),
// KH, KW, SH, SW, PH, PW, INCLUDE_PAD, I (the index type); NHWC: channels
// last (s.dims[4] of them), so plane (n, c) starts at n*H*W*CH + c and its
// columns are CH apart, and a thread takes VEC channels side by side (x and y
// aligned to VEC elements; VEC 1 otherwise).
template <typename E, int N> struct __align__(sizeof(E) * N) pvec { E v[N]; };
extern "C" __global__ void pool_k(const T *x, TY *y, Shape s) {
  I H = (I)s.dims[0], W = (I)s.dims[1], OH = (I)s.dims[2], OW = (I)s.dims[3];
#ifdef NHWC
  I CH = (I)s.dims[4] / VEC;  // groups of VEC channels
#else
  const I CH = 1;
#endif
  typedef pvec<T, VEC> VX;
  typedef pvec<TY, VEC> VY;
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)s.n / VEC; t += (I)gridDim.x * blockDim.x) {
    // pl: the plane n*C + c (NCHW), or the image n (NHWC, whose channel group is t % CH)
    I u = t / CH, ow = u % OW, oh = (u / OW) % OH, pl = u / OW / OH;
    const VX *p = (const VX *)x + pl * H * W * CH + t % CH;
    C acc[VEC];
    VY o;
    if (MODE == 2) {
      I h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH, w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
#pragma unroll
      for (int e = 0; e < VEC; e++) acc[e] = 0;
      for (I i = h0; i < h1; i++)
        for (I j = w0; j < w1; j++) {
          VX v = p[(i * W + j) * CH];
#pragma unroll
          for (int e = 0; e < VEC; e++) acc[e] += LD(v.v[e]);
        }
#pragma unroll
      for (int e = 0; e < VEC; e++) ST(o.v[e], acc[e] / (C)((h1 - h0) * (w1 - w0)));
      ((VY *)y)[t] = o;
      continue;
    }
    I hs = oh * SH - PH, ws = ow * SW - PW, he = hs + KH, we = ws + KW;
    // PyTorch's average divisor with padding counts the window clipped to the padded input.
    I hep = he < H + PH ? he : H + PH, wep = we < W + PW ? we : W + PW;
    I h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws, h1 = he < H ? he : H, w1 = we < W ? we : W;
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = MODE == 0 ? -RILL_INF : (C)0;
    for (I i = h0; i < h1; i++)
      for (I j = w0; j < w1; j++) {
        VX v = p[(i * W + j) * CH];
#pragma unroll
        for (int e = 0; e < VEC; e++) {
          C a = LD(v.v[e]);
          if (MODE == 1) acc[e] += a;
          else if ((a > acc[e] || a != a) && acc[e] == acc[e]) acc[e] = a;
        }
      }
    I div = INCLUDE_PAD ? (hep - hs) * (wep - ws) : (h1 - h0) * (w1 - w0);
#pragma unroll
    for (int e = 0; e < VEC; e++) ST(o.v[e], MODE != 1 ? acc[e] : div > 0 ? acc[e] / (C)div : (C)RILL_NAN);
    ((VY *)y)[t] = o;
  }
}
