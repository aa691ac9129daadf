// batch_norm.cu: inference batch norm, (x - mean) * scale / sqrt(var + eps) + bias
// per channel (dimension 1 of s.dims[0] channels, s.dims[1] elements each).
// Defines: T, C, LD, ST, I, EPS.
extern "C" __global__ void batch_norm_k(const T *x, const T *sc, const T *bi, const T *mu, const T *va, T *y, Shape s) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)s.n; i += (I)gridDim.x * blockDim.x) {
    I c = (i / (I)s.dims[1]) % (I)s.dims[0];
    ST(y[i], (LD(x[i]) - LD(mu[c])) * (LD(sc[c]) / sqrt(LD(va[c]) + (C)EPS)) + LD(bi[c]));
  }
}
