// grid_common.h: the sampling arithmetic of `grid_sample` and `roi_align`,
// computed identically by the CPU references (ops/cpu_resample.c includes
// this file) and the CUDA kernels (embedded, compiled by NVRTC before
// grid_sample.cu and roi_align.cu), in double.
//
// grid_sample: each output point's grid entry (x, y) in [-1, 1] maps to
// input coordinates (align_corners: -1 and 1 the end pixels' centres; else
// their outer edges); per axis, the taps (nearest: the coordinate rounded
// half to even; bilinear: 2; bicubic: 4, Keys' a = -0.75), a coordinate
// outside the borders first clamped (border) or reflected (reflection),
// and each tap's index padded (zeros: a zero; border: clamped; reflection:
// reflected): ONNX's reference, which follows PyTorch's grid_sampler.
// roi_align: ONNX's (and ONNX Runtime's) RoiAlign: per bin a grid of
// samples, each a bilinear interpolation whose four corners and weights
// ra_sample gives; the bin's average, or the largest weighted corner.
#ifndef RILL_GRID_COMMON_H
#define RILL_GRID_COMMON_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define GS_FN __device__ __forceinline__
#else
#include <math.h>
#define GS_FN static inline
#endif

enum { GS_NEAREST, GS_LINEAR, GS_CUBIC };
enum { GS_ZEROS, GS_BORDER, GS_REFLECTION };

GS_FN double gs_reflect(double x, double lo, double hi) {
  double rng = hi - lo;
  if (!(rng > 0)) return lo;
  if (x < lo) {
    double dx = lo - x;
    long long n = (long long)(dx / rng);
    double r = dx - (double)n * rng;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    double dx = x - hi;
    long long n = (long long)(dx / rng);
    double r = dx - (double)n * rng;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

// the element a tap at integer position i of a size-d axis reads, or -1 (a zero)
GS_FN long long gs_pixel(long long i, long long d, int pad, double lo, double hi) {
  if (pad == GS_ZEROS) return i >= 0 && i < d ? i : -1;
  if (pad == GS_REFLECTION) i = (long long)gs_reflect((double)i, lo, hi);
  return i < 0 ? 0 : i > d - 1 ? d - 1 : i;
}

// One axis's taps for grid coordinate g over an axis of d elements: their
// count, elements idx (-1: a zero) and weights w.
GS_FN int gs_taps(double g, long long d, int mode, int pad, int align, long long *idx, double *w) {
  double lo = align ? 0.0 : -0.5, hi = align ? (double)d - 1 : (double)d - 0.5;
  double x = align ? (g + 1) / 2.0 * (double)(d - 1) : ((g + 1) * (double)d - 1) / 2.0;
  if (x != x) {
    idx[0] = -1, w[0] = 0;
    return 1;
  }
  // far outside: a position no tap of the axis reaches (and no overflow)
  if (x < -4.0 * (double)d - 8) x = -4.0 * (double)d - 8;
  if (x > 4.0 * (double)d + 8) x = 4.0 * (double)d + 8;
  if (mode == GS_NEAREST) x = rint(x);
  if (x < lo || x > hi) {
    if (pad == GS_BORDER) x = x < 0 ? 0 : x > (double)(d - 1) ? (double)(d - 1) : x;
    else if (pad == GS_REFLECTION) x = gs_reflect(x, lo, hi);
  }
  if (mode == GS_NEAREST) {
    idx[0] = gs_pixel((long long)x, d, pad, lo, hi), w[0] = 1;
    return 1;
  }
  double f = floor(x), t = x - f;
  long long x0 = (long long)f;
  if (mode == GS_LINEAR) {
    idx[0] = gs_pixel(x0, d, pad, lo, hi), w[0] = 1 - t;
    idx[1] = gs_pixel(x0 + 1, d, pad, lo, hi), w[1] = t;
    return 2;
  }
  const double a = -0.75;
  double u = t + 1, v = 1 - t, z = 2 - t;
  w[0] = ((a * u - 5 * a) * u + 8 * a) * u - 4 * a;
  w[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  w[2] = ((a + 2) * v - (a + 3)) * v * v + 1;
  w[3] = ((a * z - 5 * a) * z + 8 * a) * z - 4 * a;
  for (int k = 0; k < 4; k++) idx[k] = gs_pixel(x0 - 1 + k, d, pad, lo, hi);
  return 4;
}

// A roi's start, bin size and samples per bin on each axis (h, then w).
// roi: x1, y1, x2, y2 as doubles.
GS_FN void ra_geom(const double *roi, double scale, int half_pixel, long long oh, long long ow, long long sampling, double *start,
                   double *bin, long long *grid) {
  double off = half_pixel ? 0.5 : 0.0;
  double sw = roi[0] * scale - off, sh = roi[1] * scale - off, ew = roi[2] * scale - off, eh = roi[3] * scale - off;
  double rh = eh - sh, rw = ew - sw;
  if (!half_pixel) {
    rh = rh > 1.0 ? rh : 1.0;
    rw = rw > 1.0 ? rw : 1.0;
  }
  start[0] = sh, start[1] = sw;
  bin[0] = rh / (double)oh, bin[1] = rw / (double)ow;
  // samples per bin: at most 2^20 (a roi far larger than the image)
  double gh = sampling > 0 ? (double)sampling : ceil(rh / (double)oh), gw = sampling > 0 ? (double)sampling : ceil(rw / (double)ow);
  grid[0] = gh > 0 ? (gh < 1048576 ? (long long)gh : 1048576) : 0;
  grid[1] = gw > 0 ? (gw < 1048576 ? (long long)gw : 1048576) : 0;
}

// The bilinear sample at (y, x) of an nh x nw image: four elements (offsets
// into the image) and weights, all 0 outside [-1, nh] x [-1, nw].
GS_FN void ra_sample(double y, double x, long long nh, long long nw, long long *pos, double *w) {
  if (y < -1.0 || y > (double)nh || x < -1.0 || x > (double)nw || y != y || x != x) {
    for (int k = 0; k < 4; k++) pos[k] = 0, w[k] = 0;
    return;
  }
  y = y > 0 ? y : 0;
  x = x > 0 ? x : 0;
  long long yl = (long long)y, xl = (long long)x, yh, xh;
  if (yl >= nh - 1) yh = yl = nh - 1, y = (double)yl;
  else yh = yl + 1;
  if (xl >= nw - 1) xh = xl = nw - 1, x = (double)xl;
  else xh = xl + 1;
  double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;
  pos[0] = yl * nw + xl, pos[1] = yl * nw + xh, pos[2] = yh * nw + xl, pos[3] = yh * nw + xh;
  w[0] = hy * hx, w[1] = hy * lx, w[2] = ly * hx, w[3] = ly * lx;
}

// The value of roi_align's bin (ph, pw) of an nh x nw image, from the
// roi's geometry (ra_geom), as a double in out: the samples' mean, or with
// maxmode the largest weighted corner; X(e) reads image element e as double.
#define RA_BIN(start, bin, grid, ph, pw, nh, nw, maxmode, X, out)                                                  \
  do {                                                                                                           \
    double acc_ = 0;                                                                                             \
    int first_ = 1;                                                                                              \
    for (long long iy_ = 0; iy_ < (grid)[0]; iy_++) {                                                            \
      double yy_ = (start)[0] + (double)(ph) * (bin)[0] + ((double)iy_ + 0.5) * (bin)[0] / (double)(grid)[0];    \
      for (long long ix_ = 0; ix_ < (grid)[1]; ix_++) {                                                          \
        double xx_ = (start)[1] + (double)(pw) * (bin)[1] + ((double)ix_ + 0.5) * (bin)[1] / (double)(grid)[1];  \
        long long pos_[4];                                                                                       \
        double w_[4];                                                                                            \
        ra_sample(yy_, xx_, nh, nw, pos_, w_);                                                                   \
        if (maxmode) {                                                                                           \
          double v_ = w_[0] * X(pos_[0]);                                                                        \
          for (int k_ = 1; k_ < 4; k_++) v_ = fmax(v_, w_[k_] * X(pos_[k_]));                                   \
          acc_ = first_ ? v_ : fmax(acc_, v_);                                                                   \
          first_ = 0;                                                                                            \
        } else {                                                                                                 \
          for (int k_ = 0; k_ < 4; k_++) acc_ += w_[k_] * X(pos_[k_]);                                           \
        }                                                                                                        \
      }                                                                                                          \
    }                                                                                                            \
    long long cnt_ = (grid)[0] * (grid)[1];                                                                      \
    out = (maxmode) ? acc_ : acc_ / (double)(cnt_ > 1 ? cnt_ : 1);                                               \
  } while (0)

#endif
