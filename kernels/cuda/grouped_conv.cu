// grouped_conv.cu: a grouped 2-D convolution (depthwise: one input channel a
// group) computed directly, a thread an output element: the sum over the
// group's CG input channels and the KH x KW taps (dilated DH, DW, strided
// SH, SW; taps in the padding PH, PW read nothing) in C, over NCHW (x
// [N,CI,H,W], w [CO,CG,KH,KW]) or, with NHWC, channels last (x [N,H,W,CI],
// w [CO,KH,KW,CG]); y likewise. Consecutive threads take consecutive
// outputs along y's last dim (NHWC: channels, so that the loads of x and w
// coalesce). The epilogue is channel_bias.cu's bias_epilogue (its source
// comes first): the sum rounded to T; with HAS_BIAS the bias added and
// rounded, with RESIDUAL z[i] added and rounded, with ACT act_f applied (as
// the ops after the convolution would).
// Defines: T, C, LD, ST, I (the index type); G_ and CI, H, W, CO, OH, OW,
// CG, OG (output channels a group), KH, KW, SH, SW, DH, DW, PH, PW (the
// prefix keeps them off the prelude's names); NHWC, HAS_BIAS, RESIDUAL, ACT.
extern "C" __global__ void __launch_bounds__(256) grouped_conv_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                                                                 const T *__restrict__ z, T *__restrict__ y, Shape s) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)s.n; i += (I)gridDim.x * blockDim.x) {
#ifdef NHWC
    const I k = i % G_CO, ow = (i / G_CO) % G_OW, oh = (i / (G_CO * G_OW)) % G_OH, n = i / ((I)G_CO * G_OW * G_OH);
#else
    const I ow = i % G_OW, oh = (i / G_OW) % G_OH, k = (i / ((I)G_OW * G_OH)) % G_CO, n = i / ((I)G_OW * G_OH * G_CO);
#endif
    const I c0 = (k / G_OG) * G_CG, ih0 = oh * G_SH - G_PH, iw0 = ow * G_SW - G_PW;
    C acc = 0;
#pragma unroll
    for (int u = 0; u < G_KH; u++) {
      const I ih = ih0 + u * G_DH;
      if (ih < 0 || ih >= G_H) continue;
#pragma unroll
      for (int v = 0; v < G_KW; v++) {
        const I iw = iw0 + v * G_DW;
        if (iw < 0 || iw >= G_W) continue;
#pragma unroll 4
        for (int c = 0; c < G_CG; c++) {
#ifdef NHWC
          acc += LD(x[((n * G_H + ih) * G_W + iw) * G_CI + c0 + c]) * LD(w[((k * G_KH + u) * G_KW + v) * G_CG + c]);
#else
          acc += LD(x[((n * G_CI + c0 + c) * G_H + ih) * G_W + iw]) * LD(w[((k * G_CG + c) * G_KH + u) * G_KW + v]);
#endif
        }
      }
    }
    T t;
    ST(t, acc);
#ifdef HAS_BIAS
    y[i] = bias_epilogue(t, b, k, z, i);
#else
    y[i] = bias_epilogue(t, NULL, k, z, i);
#endif
  }
}

#ifdef DW_T
// dw_k: depthwise over channels last (one input and one output channel a
// group), a thread DW_T outputs along a row of one channel: each tap row's
// inputs are loaded once for the DW_T outputs, (DW_T - 1) * SW + (KW - 1) *
// DW + 1 of them instead of DW_T * KW, and the row's KW weights once. The
// direct kernel above loads every tap of every output (convnext's 7 x 7
// at batch 32: 98 loads an output). Consecutive threads take consecutive
// channels (coalesced). s.n: threads' items, N * OH * ceil(OW / DW_T) * CO.
#define DW_XW ((DW_T - 1) * G_SW + (G_KW - 1) * G_DW + 1)
extern "C" __global__ void __launch_bounds__(256) dw_k(const T *__restrict__ x, const T *__restrict__ w, const T *__restrict__ b,
                                                       const T *__restrict__ z, T *__restrict__ y, Shape s) {
  const I TW = (G_OW + DW_T - 1) / DW_T;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)s.n; i += (I)gridDim.x * blockDim.x) {
    const I k = i % G_CO, tw = (i / G_CO) % TW, oh = (i / (G_CO * TW)) % G_OH, n = i / ((I)G_CO * TW * G_OH);
    const I ow0 = tw * DW_T, ih0 = oh * G_SH - G_PH, iw0 = ow0 * G_SW - G_PW;
    C acc[DW_T];
#pragma unroll
    for (int t = 0; t < DW_T; t++) acc[t] = 0;
#pragma unroll
    for (int u = 0; u < G_KH; u++) {
      const I ih = ih0 + u * G_DH;
      if (ih < 0 || ih >= G_H) continue;
      const T *xrow = x + ((n * G_H + ih) * G_W) * G_CI + k;
      C xr[DW_XW];
#pragma unroll
      for (int j = 0; j < DW_XW; j++) {
        const I iw = iw0 + j;
        xr[j] = iw >= 0 && iw < G_W ? LD(xrow[iw * G_CI]) : (C)0;
      }
#pragma unroll
      for (int v = 0; v < G_KW; v++) {
        const C wv = LD(w[(k * G_KH + u) * G_KW + v]);
#pragma unroll
        for (int t = 0; t < DW_T; t++) acc[t] += xr[t * G_SW + v * G_DW] * wv;
      }
    }
#pragma unroll
    for (int t = 0; t < DW_T; t++) {
      if (ow0 + t >= G_OW) break;
      const I o = ((n * G_OH + oh) * G_OW + ow0 + t) * G_CO + k;
      T r;
      ST(r, acc[t]);
#ifdef HAS_BIAS
      y[o] = bias_epilogue(r, b, k, z, o);
#else
      y[o] = bias_epilogue(r, NULL, k, z, o);
#endif
    }
  }
}
#endif
