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
extern "C" __global__ void channel_bias_k(const T *b, const T *z, T *y, Shape s) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < s.n; i += (long long)gridDim.x * blockDim.x) {
    T t;
    ST(t, LD(y[i]) + LD(b[CHANNEL(i)]));
#ifdef RESIDUAL
    ST(t, LD(t) + LD(z[i]));
#else
    (void)z;
#endif
#ifdef ACT
    ST(t, act_f(LD(t)));
#endif
    y[i] = t;
  }
}
