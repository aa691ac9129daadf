// pool.cu: max and average pooling, and adaptive average pooling, a thread
// per output element over planes of s.dims[0] x s.dims[1] (output s.dims[2] x
// s.dims[3]). Defines: T, TY, C, LD, ST, MODE (0 max, 1 average, 2 adaptive),
// KH, KW, SH, SW, PH, PW, INCLUDE_PAD; NHWC: channels last (s.dims[4] of
// them), so plane (n, c) starts at n*H*W*CH + c and its columns are CH apart.
extern "C" __global__ void pool_k(const T *x, TY *y, Shape s) {
  long long H = s.dims[0], W = s.dims[1], OH = s.dims[2], OW = s.dims[3];
#ifdef NHWC
  long long CH = s.dims[4];
#else
  const long long CH = 1;
#endif
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < s.n; t += (long long)gridDim.x * blockDim.x) {
    // pl: the plane n*C + c (NCHW), or the image n (NHWC, whose channel is t % CH)
    long long u = t / CH, ow = u % OW, oh = (u / OW) % OH, pl = u / OW / OH;
    const T *p = x + pl * H * W * CH + t % CH;
    if (MODE == 2) {
      long long h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH, w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
      C acc = 0;
      for (long long i = h0; i < h1; i++)
        for (long long j = w0; j < w1; j++) acc += LD(p[(i * W + j) * CH]);
      ST(y[t], acc / (C)((h1 - h0) * (w1 - w0)));
      continue;
    }
    long long hs = oh * SH - PH, ws = ow * SW - PW, he = hs + KH, we = ws + KW;
    // PyTorch's average divisor with padding counts the window clipped to the padded input.
    long long hep = he < H + PH ? he : H + PH, wep = we < W + PW ? we : W + PW;
    long long h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws, h1 = he < H ? he : H, w1 = we < W ? we : W;
    C acc = MODE == 0 ? -RILL_INF : (C)0;
    for (long long i = h0; i < h1; i++)
      for (long long j = w0; j < w1; j++) {
        C v = LD(p[(i * W + j) * CH]);
        if (MODE == 1) acc += v;
        else if ((v > acc || v != v) && acc == acc) acc = v;
      }
    if (MODE == 1) {
      long long div = INCLUDE_PAD ? (hep - hs) * (wep - ws) : (h1 - h0) * (w1 - w0);
      ST(y[t], div > 0 ? acc / (C)div : (C)RILL_NAN);
    } else {
      ST(y[t], acc);
    }
  }
}
