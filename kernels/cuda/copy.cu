// copy.cu: y[obase + view offsets] = x[ibase + view offsets] over a view of
// RANK dimensions (s.dims; input strides s.st[0], output strides s.st[1];
// bases s.base[0], s.base[1]), converting between dtypes when they differ.
// transpose, slice, broadcast_to, concat, split and pad are all this kernel;
// where both sides run on in whole units of 4 to 16 bytes, TIN and TOUT are
// those units (u128 for 16) and one thread moves one.
// Defines: TIN, TOUT, C, LD, ST, RANK, I, and VALUE for fill_k (in place of
// copy_k); or, for parts_k alone, PARTS (the number of parts), UB (bytes per
// unit), SPLIT, I.
struct __align__(16) u128 { unsigned long long a, b; };
#ifdef PARTS
// parts_k: a concat of PARTS parts of one dtype (or, with SPLIT, a split
// into them) in one launch. The tensors are rows (the dims before the axis)
// of units of UB bytes: the whole's row holds each part's row in turn, part k
// from unit s.off[k] to s.off[k + 1]. Row y of the grid's blocks takes part
// y, read (written, SPLIT) contiguously; one thread moves one unit.
#if UB == 16
typedef u128 U;
#elif UB == 8
typedef unsigned long long U;
#elif UB == 4
typedef unsigned U;
#elif UB == 2
typedef unsigned short U;
#else
typedef unsigned char U;
#endif
struct Parts { U *p[PARTS]; long long off[PARTS + 1]; long long rows; };
extern "C" __global__ void parts_k(U *whole, Parts s) {
  // the block's part, chosen once without indexing s by a variable (which
  // would copy s to local memory)
  U *p = s.p[0];
  I lo = 0, hi = (I)s.off[1];
#pragma unroll
  for (int j = 1; j < PARTS; j++)
    if (blockIdx.y == j) {
      p = s.p[j];
      lo = (I)s.off[j];
      hi = (I)s.off[j + 1];
    }
  const I w = (I)s.off[PARTS], pw = hi - lo, n = (I)s.rows * pw;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    const I row = i / pw, at = row * w + lo + (i - row * pw);
#if SPLIT
    p[i] = whole[at];
#else
    whole[at] = p[i];
#endif
  }
}
#elif !defined(VALUE)
extern "C" __global__ void copy_k(const TIN *x, TOUT *y, Shape s) {
  I n = (I)s.n;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
    I r = i, io = (I)s.base[0], oo = (I)s.base[1];
#pragma unroll
    for (int d = RANK - 1; d > 0; d--) {
      I q = r % (I)s.dims[d];
      r /= (I)s.dims[d];
      io += q * (I)s.st[0][d];
      oo += q * (I)s.st[1][d];
    }
    // i < s.n, the product of the dims: what is left is below s.dims[0]
    io += r * (I)s.st[0][0];
    oo += r * (I)s.st[1][0];
    ST(y[oo], LD(x[io]));
  }
}
#else
// fill_k: y[i] = VALUE for s.n elements (the border of pad, a padded convolution input).
extern "C" __global__ void fill_k(const TIN *unused, TOUT *y, Shape s) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)s.n; i += (I)gridDim.x * blockDim.x) ST(y[i], (C)VALUE);
}
#endif
