// channel_bias.cu: y += bias[channel] over NCHW, after a cuDNN convolution
// (s.dims[0] channels of s.dims[1] elements), or with NHWC over channels
// last (the channel is i % s.dims[0]). Defines: T, C, LD, ST; NHWC; with
// RESIDUAL, z[i] is added to the sum rounded to T (rounded again), as an
// add after the convolution would; with ACT, the activation act_f (written
// by the op layer from elementwise.def) is applied to the sum rounded to T,
// as an op after the convolution would.
#ifdef NHWC
#define CHANNEL(i) ((i) % s.dims[0])
#else
#define CHANNEL(i) (((i) / s.dims[1]) % s.dims[0])
#endif
// The epilogue of element i (channel c) on the convolution's sum rounded to
// T (t): b[c] added where b is given, then z[i] and the activation as above
// (grouped_conv.cu's epilogue too).
__device__ __forceinline__ T bias_epilogue(T t, const T *b, long long c, const T *z, long long i) {
  if (b) ST(t, LD(t) + LD(b[c]));
#ifdef RESIDUAL
  ST(t, LD(t) + LD(z[i]));
#else
  (void)z, (void)i;
#endif
#ifdef ACT
  ST(t, act_f(LD(t)));
#endif
  return t;
}

extern "C" __global__ void channel_bias_k(const T *b, const T *z, T *y, Shape s) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < s.n; i += (long long)gridDim.x * blockDim.x)
    y[i] = bias_epilogue(y[i], b, CHANNEL(i), z, i);
}
