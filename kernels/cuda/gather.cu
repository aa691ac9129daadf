// gather.cu: index_select along an axis: y[o, j, i] = x[o, idx[j], i] with
// s.dims = {outer, indices, inner, axis size}. An index out of range raises
// RILL_KERR_INDEX in *err (read by the host) and writes 0. Rows of a
// multiple of 8 bytes are also moved as T = unsigned long long (inner
// counted in 8-byte words): the same bytes, a quarter of the threads for
// f16.
// Defines: T, TI, I.
extern "C" __global__ void gather_k(const T *x, const TI *ix, T *y, int *err, Shape s) {
  I m = (I)s.dims[1], inner = (I)s.dims[2], dim = (I)s.dims[3];
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)s.n; i += (I)gridDim.x * blockDim.x) {
    I in = i % inner, j = (i / inner) % m, o = i / inner / m;
    long long k = (long long)ix[j];
    if (k < 0 || k >= dim) {
      atomicMax(err, 1);
      y[i] = 0;
      continue;
    }
    y[i] = x[(o * dim + (I)k) * inner + in];
  }
}
