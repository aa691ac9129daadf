// topk.cu: `topk`, a thread per element of each row (N along the axis,
// rows of stride INNER): its rank, the count of the row's elements before
// it (larger, or smaller when not LARGEST; NaN the largest; equal values
// by index), as the CPU reference's stable sort orders them; an element of
// rank below K writes its value and index there. O(N) per thread, stopping
// once the rank reaches K.
// Defines: T, C, LD, N, INNER, K, LARGEST, I.
__device__ __forceinline__ int tk_cmp(C x, C y) {
  bool nx = x != x, ny = y != y;
  if (nx || ny) return nx && ny ? 0 : nx ? 1 : -1;
  return x > y ? 1 : x < y ? -1 : 0;
}

extern "C" __global__ void topk_k(const T *x, T *y, long long *yi, long long total) {
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)total; t += (I)gridDim.x * blockDim.x) {
    long long in = (long long)t % INNER, i = (long long)t / INNER % N, o = (long long)t / INNER / N;
    const T *row = x + o * N * INNER + in;
    C v = LD(row[i * INNER]);
    long long r = 0;
    for (long long j = 0; j < N && r < K; j++) {
      int c = tk_cmp(LD(row[j * INNER]), v);
      if (!LARGEST) c = -c;
      r += c > 0 || (c == 0 && j < i);
    }
    if (r < K) {
      long long oi = (o * K + r) * INNER + in;
      y[oi] = row[i * INNER];
      yi[oi] = i;
    }
  }
}
