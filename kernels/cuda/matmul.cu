// matmul.cu: y[M,N] = a[M,K] b[K,N] plus an optional bias, a thread per
// output, every operand through strides (a permuted matmul's, linear's
// weight read as [K,N]): s.dims holds the output's NBD batch dimensions,
// s.st[0], s.st[1] and s.st[2] a's, b's and y's strides over them in
// elements, s.st[3] the strides of a's rows and columns, b's, then y's. For
// integers and layouts cuBLASLt cannot describe.
// Defines: T, C, LD, ST, NBD, HAS_BIAS.
extern "C" __global__ void matmul_k(const T *a, const T *b, const T *bias, T *y, Shape s) {
  long long M = s.base[0], N = s.base[1], K = s.base[2];
  const long long *r = s.st[3];
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < s.n; t += (long long)gridDim.x * blockDim.x) {
    long long j = t % N, i = (t / N) % M, bt = t / N / M, ao = 0, bo = 0, yo = 0;
    for (int d = NBD - 1; d >= 0; d--) {
      long long q = bt % s.dims[d];
      bt /= s.dims[d];
      ao += q * s.st[0][d];
      bo += q * s.st[1][d];
      yo += q * s.st[2][d];
    }
    ao += i * r[0];
    bo += j * r[3];
    C acc = HAS_BIAS ? LD(bias[j]) : (C)0;
    for (long long q = 0; q < K; q++) acc += LD(a[ao + q * r[1]]) * LD(b[bo + q * r[2]]);
    ST(y[yo + i * r[4] + j * r[5]], acc);
  }
}
