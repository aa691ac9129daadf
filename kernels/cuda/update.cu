// update.cu: x written into a state at an offset along an axis: element i
// of x (row r = i / (n * inner), where x has n along the axis and `inner`
// elements after it) goes to y[(r * L + off) * inner + i % (n * inner)],
// off = pos[0], or pos[r / per_b] with an offset per index of axis 0. An
// offset outside 0..L - n raises KERR_UPDATE in *err (the host reports it)
// and the element is not written. s.dims = {rows, n, inner, L, per_b}.
// The state's bytes are copied into y first where y is not the state.
// Defines: T (an unsigned integer of the element's size), TP, PER_ROW, I, KERR_UPDATE.
extern "C" __global__ void update_k(const T *x, const TP *pos, T *y, int *err, Shape s) {
  I n = (I)s.dims[1], inner = (I)s.dims[2], L = (I)s.dims[3], per_b = (I)s.dims[4], run = n * inner;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)s.n; i += (I)gridDim.x * blockDim.x) {
    I r = i / run;
#if PER_ROW
    long long off = (long long)pos[r / per_b];
#else
    long long off = (long long)pos[0];
#endif
    if (off < 0 || off > (long long)(L - n)) {
      atomicMax(err, KERR_UPDATE);
      continue;
    }
    y[(r * L + (I)off) * inner + i % run] = x[i];
  }
}
