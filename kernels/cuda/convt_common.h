// convt_common.h: one output element of `conv_transpose`, computed
// identically by the CPU reference (ops/cpu_convt.c includes this file)
// and the CUDA kernel (embedded, compiled by NVRTC before
// conv_transpose.cu): the gather form of the transposed convolution, in
// double, over the group's input channels, then the kernel positions in
// row-major order.
//
// y[n, o, p] = b[o] + sum over c of o's group, kernel position k, of
//   x[n, c, i] * w[c, o mod (O/G), k], where p = i * s - pb + k * d per
//   spatial dim (i an integer in 0..in-1).
#ifndef RILL_CONVT_COMMON_H
#define RILL_CONVT_COMMON_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define CT_FN __device__ __forceinline__
#else
#define CT_FN static inline
#endif

// Geometry: nd spatial dims (1..3), channels C in and O out, G groups,
// in/k/out spatial sizes, stride, begin pad, dilation.
typedef struct ct_geom {
  int nd;
  long long C, O, G;
  long long in[3], k[3], out[3], s[3], pb[3], d[3];
} ct_geom_t;

// The value of output element (n, o, pos) as a double, before rounding;
// X(e) and W(e) read element e of x and w as double.
#define CT_SUM(g, n, o, pos, X, W, out_acc)                                                              \
  do {                                                                                                   \
    long long ipg_ = (g).C / (g).G, opg_ = (g).O / (g).G, grp_ = (o) / opg_, oo_ = (o) % opg_;          \
    long long kn_ = 1, isz_ = 1;                                                                         \
    for (int a_ = 0; a_ < (g).nd; a_++) kn_ *= (g).k[a_], isz_ *= (g).in[a_];                            \
    double acc_ = 0;                                                                                     \
    for (long long c_ = grp_ * ipg_; c_ < (grp_ + 1) * ipg_; c_++) {                                     \
      for (long long kk_ = 0; kk_ < kn_; kk_++) {                                                        \
        long long rem_ = kk_, ioff_ = 0, istr_ = 1;                                                      \
        int ok_ = 1;                                                                                     \
        for (int a_ = (g).nd - 1; a_ >= 0; a_--) {                                                       \
          long long ka_ = rem_ % (g).k[a_], num_ = (pos)[a_] + (g).pb[a_] - ka_ * (g).d[a_];             \
          rem_ /= (g).k[a_];                                                                             \
          if (num_ < 0 || num_ % (g).s[a_] || num_ / (g).s[a_] >= (g).in[a_]) { ok_ = 0; break; }        \
          ioff_ += num_ / (g).s[a_] * istr_;                                                             \
          istr_ *= (g).in[a_];                                                                           \
        }                                                                                                \
        if (ok_) acc_ += X(((n) * (g).C + c_) * isz_ + ioff_) * W((c_ * opg_ + oo_) * kn_ + kk_);        \
      }                                                                                                  \
    }                                                                                                    \
    out_acc = acc_;                                                                                      \
  } while (0)

#endif
