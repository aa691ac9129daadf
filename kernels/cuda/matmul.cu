// matmul.cu: y[M,N] = a[M,K] b[K,N] (b[N,K] transposed for LINEAR) plus an
// optional bias, a thread per output, batches by index math: s.dims holds the
// output's NBD batch dimensions, s.st[0] and s.st[1] the operands' batch
// strides in elements. For integers and batches cuBLASLt cannot describe.
// Defines: T, C, LD, ST, NBD, LINEAR, HAS_BIAS.
extern "C" __global__ void matmul_k(const T *a, const T *b, const T *bias, T *y, Shape s) {
  long long M = s.base[0], N = s.base[1], K = s.base[2];
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < s.n; t += (long long)gridDim.x * blockDim.x) {
    long long j = t % N, i = (t / N) % M, bt = t / N / M, ao = 0, bo = 0;
    for (int d = NBD - 1; d >= 0; d--) { long long q = bt % s.dims[d]; bt /= s.dims[d]; ao += q * s.st[0][d]; bo += q * s.st[1][d]; }
    C acc = HAS_BIAS ? LD(bias[j]) : (C)0;
    for (long long q = 0; q < K; q++) acc += LD(a[ao + i * K + q]) * LD(b[LINEAR ? bo + j * K + q : bo + q * N + j]);
    ST(y[t], acc);
  }
}
