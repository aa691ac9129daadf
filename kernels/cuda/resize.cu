// resize.cu: `resize` over x (rank R), a thread per output element: each
// axis's taps from rs_taps (resize_common.h, shared with the CPU
// reference), then the sum over the products of the axes' weights, in
// double, rounded once. s.dims: the output's dims; s.st[0]: the input's
// dims; s.st[1]: the input's row-major strides.
// Defines: T, C, LD, ST, R, MODE, COORD, NEAREST, CUBIC_A, EXCLUDE, EXTRAP
// (the extrapolation value as stored), IS_INT, LO, HI (an integer dtype's
// range), SCALES and ROI0, ROI1 (R doubles each, in braces), I; PRM 1:
// the scales and roi come from prm (R scales, R roi starts, R roi ends)
// at run time instead, else prm is null.
extern "C" __global__ void resize_k(const T *x, T *y, Shape s, const double *prm) {
#if PRM
  double sc[R], r0[R], r1[R];
  for (int a = 0; a < R; a++) sc[a] = prm[a], r0[a] = prm[R + a], r1[a] = prm[2 * R + a];
#else
  const double sc[R] = SCALES, r0[R] = ROI0, r1[R] = ROI1;
#endif
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)s.n; t += (I)gridDim.x * blockDim.x) {
    long long rem = (long long)t, idx[R][4];
    double w[R][4];
    int n[R];
    bool outside = false;
    for (int a = R - 1; a >= 0; a--) {
      long long o = rem % s.dims[a];
      rem /= s.dims[a];
      n[a] = rs_taps(o, s.st[0][a], s.dims[a], sc[a], r0[a], r1[a], MODE, COORD, NEAREST, CUBIC_A, EXCLUDE, idx[a], w[a]);
      outside |= n[a] == 0;
    }
    if (outside) {
      ST(y[t], EXTRAP);
      continue;
    }
    if (MODE == RS_NEAREST) {
      long long off = 0;
      for (int a = 0; a < R; a++) off += idx[a][0] * s.st[1][a];
      y[t] = x[off];
      continue;
    }
    int k[R];
    for (int a = 0; a < R; a++) k[a] = 0;
    double acc = 0;
    for (;;) {
      double ww = 1;
      long long off = 0;
      for (int a = 0; a < R; a++) {
        ww *= w[a][k[a]];
        off += idx[a][k[a]] * s.st[1][a];
      }
      acc += ww * (double)LD(x[off]);
      int a = R - 1;
      while (a >= 0 && ++k[a] == n[a]) k[a--] = 0;
      if (a < 0) break;
    }
    if (IS_INT) acc = rs_int(acc, LO, HI);
    ST(y[t], acc);
  }
}
