// copy.cu: y[obase + view offsets] = x[ibase + view offsets] over a view of
// RANK dimensions (s.dims; input strides s.st[0], output strides s.st[1];
// bases s.base[0], s.base[1]), converting between dtypes when they differ.
// transpose, slice, broadcast_to, concat, split and pad are all this kernel.
// Defines: TIN, TOUT, C, LD, ST, RANK, I (and VALUE for fill_k).
#ifndef VALUE
#define VALUE 0
#endif
extern "C" __global__ void copy_k(const TIN *x, TOUT *y, Shape s) {
  I n = (I)s.n;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    I r = i, io = (I)s.base[0], oo = (I)s.base[1];
#pragma unroll
    for (int d = RANK - 1; d >= 0; d--) {
      I q = r % (I)s.dims[d];
      r /= (I)s.dims[d];
      io += q * (I)s.st[0][d];
      oo += q * (I)s.st[1][d];
    }
    ST(y[oo], LD(x[io]));
  }
}
// fill_k: y[i] = VALUE for s.n elements (the border of pad, a padded convolution input).
extern "C" __global__ void fill_k(const TIN *unused, TOUT *y, Shape s) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)s.n; i += (I)gridDim.x * blockDim.x) ST(y[i], (C)VALUE);
}
