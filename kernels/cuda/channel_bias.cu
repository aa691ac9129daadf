// channel_bias.cu: y += bias[channel] over NCHW, after a cuDNN convolution
// (s.dims[0] channels of s.dims[1] elements). Defines: T, C, LD, ST; with
// ACT, the activation act_f (written by the op layer from elementwise.def)
// is applied to the sum rounded to T, as an op after the convolution would.
extern "C" __global__ void channel_bias_k(const T *b, T *y, Shape s) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < s.n; i += (long long)gridDim.x * blockDim.x) {
#ifdef ACT
    T t;
    ST(t, LD(y[i]) + LD(b[(i / s.dims[1]) % s.dims[0]]));
    ST(y[i], act_f(LD(t)));
#else
    ST(y[i], LD(y[i]) + LD(b[(i / s.dims[1]) % s.dims[0]]));
#endif
  }
}
