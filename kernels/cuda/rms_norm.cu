// rms_norm.cu: a block per row of s.dims[0] contiguous elements: r = 1 /
// sqrt(mean(x^2) + EPS); y = round(x * r) * w (x * r rounded to T first, as
// the CPU reference and transformers' LlamaRMSNorm do), or x * r without w.
// With NPT > 0 (n at most NPT * blockDim.x), a thread keeps its elements in
// registers between the two passes, so the row is read from memory once.
// Defines: T, C, LD, ST, EPS, HAS_W, NPT.
extern "C" __global__ void rms_norm_k(const T *x, const T *w, T *y, Shape s) {
  __shared__ C sh[32];
  long long n = s.dims[0], base = (long long)blockIdx.x * n;
  C ss = 0;
#if NPT
  C xv[NPT];
#pragma unroll
  for (int i = 0; i < NPT; i++) {
    long long j = threadIdx.x + (long long)i * blockDim.x;
    xv[i] = j < n ? LD(x[base + j]) : (C)0;
  }
#pragma unroll
  for (int i = 0; i < NPT; i++) ss += xv[i] * xv[i];
#else
  for (long long j = threadIdx.x; j < n; j += blockDim.x) {
    C v = LD(x[base + j]);
    ss += v * v;
  }
#endif
  C r = (C)1 / sqrt(block_sum(ss, sh) / (C)(n ? n : 1) + (C)EPS);
#if NPT
#pragma unroll
  for (int i = 0; i < NPT; i++) {
    long long j = threadIdx.x + (long long)i * blockDim.x;
    if (j >= n) break;
    C v = xv[i];
#else
  for (long long j = threadIdx.x; j < n; j += blockDim.x) {
    C v = LD(x[base + j]);
#endif
    T t;
    ST(t, v * r);
#if HAS_W
    ST(y[base + j], LD(t) * LD(w[j]));
#else
    y[base + j] = t;
#endif
  }
}
