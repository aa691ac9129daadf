// resize_common.h: where one output position of `resize` reads the input
// along one axis, computed identically by the CPU reference
// (ops/cpu_resample.c includes this file) and the CUDA kernel (embedded,
// compiled by NVRTC before resize.cu), in double on both.
//
// rs_taps gives the input indices an output position o of an axis reads
// (already clamped into 0..in-1, as the ONNX reference's edge padding
// does) and their weights: 1 for nearest, 2 for linear, 4 for cubic; or 0
// taps where tf_crop_and_resize maps o outside the input (the output is
// then the extrapolation value). The coordinate transforms and the
// coefficients follow ONNX's Resize (opset 19) and its reference
// implementation: the output length in the transforms is scale * in, not
// the rounded size, except half_pixel_symmetric's adjustment and
// pytorch_half_pixel's test for an output of one (the rounded size).
#ifndef RILL_RESIZE_COMMON_H
#define RILL_RESIZE_COMMON_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define RS_FN __device__ __forceinline__
#else
#include <math.h>
#include <stdbool.h>
#define RS_FN static inline
#endif

enum { RS_NEAREST, RS_LINEAR, RS_CUBIC };
enum { RS_HALF_PIXEL, RS_HALF_PIXEL_SYMMETRIC, RS_PYTORCH_HALF_PIXEL, RS_ALIGN_CORNERS, RS_ASYMMETRIC, RS_TF_CROP_AND_RESIZE, RS_TF_HALF_PIXEL_FOR_NN };
enum { RS_ROUND_PREFER_FLOOR, RS_ROUND_PREFER_CEIL, RS_FLOOR, RS_CEIL };

RS_FN int rs_taps(long long o, long long in, long long out, double scale, double roi0, double roi1, int mode, int coord,
                  int nearest, double A, int exclude, long long *idx, double *w) {
  double x = (double)o, width = scale * (double)in, xo;
  switch (coord) {
    case RS_HALF_PIXEL: xo = (x + 0.5) / scale - 0.5; break;
    case RS_HALF_PIXEL_SYMMETRIC: {
      double adj = (double)out / width, center = (double)in / 2;
      xo = center * (1 - adj) + ((x + 0.5) / scale - 0.5);
      break;
    }
    case RS_PYTORCH_HALF_PIXEL: xo = out > 1 ? (x + 0.5) / scale - 0.5 : 0; break;
    case RS_ALIGN_CORNERS: xo = width == 1 ? 0 : x * (double)(in - 1) / (width - 1); break;
    case RS_ASYMMETRIC: xo = x / scale; break;
    case RS_TF_CROP_AND_RESIZE:
      xo = width == 1 ? (roi1 - roi0) * (double)(in - 1) / 2 : x * (roi1 - roi0) * (double)(in - 1) / (width - 1);
      xo += roi0 * (double)(in - 1);
      if (xo < 0 || xo > (double)(in - 1)) return 0;
      break;
    default: xo = (x + 0.5) / scale; break; // tf_half_pixel_for_nn
  }
  // the left neighbour and the ratio in (0, 1]: an exact index counts as
  // its left neighbour's right end (the reference's choice)
  double fl = floor(xo), r;
  long long base;
  if (xo == fl) {
    base = (long long)fl - 1;
    r = 1;
  } else {
    base = (long long)fl;
    r = xo - fl;
  }
  int n;
  if (mode == RS_NEAREST) {
    bool right = r == 1 || (nearest == RS_ROUND_PREFER_FLOOR ? r > 0.5 : nearest == RS_ROUND_PREFER_CEIL ? r >= 0.5 : nearest == RS_CEIL);
    idx[0] = right ? base + 1 : base;
    w[0] = 1;
    n = 1;
  } else if (mode == RS_LINEAR) {
    idx[0] = base, idx[1] = base + 1;
    w[0] = 1 - r, w[1] = r;
    n = 2;
  } else {
    double s = 1 - r;
    idx[0] = base - 1, idx[1] = base, idx[2] = base + 1, idx[3] = base + 2;
    w[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    w[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
    w[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
    w[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
    n = 4;
  }
  if (exclude && mode != RS_NEAREST) {
    double sum = 0;
    for (int k = 0; k < n; k++) {
      if (idx[k] < 0 || idx[k] >= in) w[k] = 0;
      sum += w[k];
    }
    if (sum != 0)
      for (int k = 0; k < n; k++) w[k] /= sum;
  }
  for (int k = 0; k < n; k++) idx[k] = idx[k] < 0 ? 0 : idx[k] >= in ? in - 1 : idx[k];
  return n;
}

// An integer result: rounded half to even, saturated to [lo, hi].
RS_FN double rs_int(double v, double lo, double hi) {
  v = rint(v);
  return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

#endif
