// quant.cu: `qmatmul` and `qconv2d` (docs/internals.md, "Quantized
// products"), exactly as their CPU reference (ops/cpu_quant.c) computes
// them: integer sums, then the epilogue, each float step rounded on its own
// (the _rn intrinsics: never contracted into an FMA).
//   qmatmul_k, qconv2d_k   a thread per output element, the sum in long long
//   qmm_pack_k             cuBLASLt's operands: a' = a - SHIFT_A (rows of
//                          [ROWS, KK], only when PACK_A) and b' = b - SHIFT_B
//                          transposed to [NN, KK] (i8; SHIFT 128 for u8), with
//                          the row sums of a' and the column sums of b'
//   qmm_epi_k              the epilogue after cuBLASLt's D = a' b' (i32):
//                          sum(a - za)(b - zb) = D - zb' ra - za' cb + K za' zb'
//                          (za' = za - SHIFT_A, zb' = zb - SHIFT_B), modulo 2^32
// Defines: TX, TW (the operands' C types), TS and LDS (the scale's), TZ (the
// output zero point's), TY and STY (the result's), OUT_KIND (0 i32, 1 float,
// 2 i8/u8 with QMIN, QMAX), RELU, HAS_SCALE, HAS_YZP, HAS_YS and YS, SC_F64, BIAS,
// MM, NN, KK, ZA_PER, ZB_PER, and per kernel: qmatmul_k NBD with QBD, QBA,
// QBB (the batch dims, a's and b's matrix strides over them), SC_RS, SC_CS;
// qconv2d_k CC, HH, WW, OO, CG, KH, KW, OH, OW, SH, SW, PT, PL, DH, DW, GG,
// SC_PER; qmm_pack_k ROWS, PACK_A, SHIFT_A, SHIFT_B; qmm_epi_k ROWS, SHIFT_A,
// SHIFT_B.

// The importer's round half to even (ops/cpu_quant.c's round_even_as).
__device__ __forceinline__ double qround_d(double x) {
  double r = floor(__dadd_rn(x, 0.5));
  bool tie = __dsub_rn(r, x) == 0.5;
  double half = floor(__dmul_rn(r, 0.5));
  bool odd = __dsub_rn(r, __dmul_rn(half, 2.0)) != 0.0;
  double res = tie && odd ? __dsub_rn(r, 1.0) : r;
  return fabs(x) >= 4503599627370496.0 ? x : res;
}
__device__ __forceinline__ float qround_f(float x) {
  float r = floorf(__fadd_rn(x, 0.5f));
  bool tie = __fsub_rn(r, x) == 0.5f;
  float half = floorf(__fmul_rn(r, 0.5f));
  bool odd = __fsub_rn(r, __fmul_rn(half, 2.0f)) != 0.0f;
  float res = tie && odd ? __fsub_rn(r, 1.0f) : r;
  return fabsf(x) >= 8388608.0f ? x : res;
}

// The taps of qconv2d's output (oh, ow) that fall inside the input: the
// statements given, with kh, kw, ih and iw set.
#define Q_TAPS(...)                                   \
  for (long long kh = 0; kh < KH; kh++) {             \
    long long ih = oh * SH - PT + kh * DH;            \
    if (ih < 0 || ih >= HH) continue;                 \
    for (long long kw = 0; kw < KW; kw++) {           \
      long long iw = ow * SW - PL + kw * DW;          \
      if (iw < 0 || iw >= WW) continue;               \
      __VA_ARGS__                                     \
    }                                                 \
  }

// The epilogue at one output element (ops_quant_store).
__device__ __forceinline__ void qstore(TY *y, long long i, int acc, double sc, int yzp) {
#if !HAS_SCALE
  y[i] = acc;
#else
  double r = __dmul_rn((double)acc, sc);
#if RELU
  if (!(r > 0.0) && r == r) r = 0.0;
#endif
#if OUT_KIND == 1
  STY(y[i], r);
#else
  double v;
#if !HAS_YS
  v = qround_d(__dadd_rn(r, (double)yzp));
#elif SC_F64
  v = __dadd_rn(qround_d(__ddiv_rn(r, (double)YS)), (double)yzp);
#else
  v = (double)__fadd_rn(qround_f(__fdiv_rn((float)r, (float)YS)), (float)yzp);
#endif
  // saturated as rill__store_f: NaN to 0
  y[i] = (TY)(v != v ? 0.0 : v <= (double)QMIN ? (double)QMIN : v >= (double)QMAX ? (double)QMAX : v);
#endif
#endif
}

#ifdef QMATMUL
extern "C" __global__ void qmatmul_k(const TX *a, const TW *b, const TX *za, const TW *zb, const int *bias, const TS *s, const TZ *yz, TY *y,
                                     long long total) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {
    long long n = t % NN, m = (t / NN) % MM, bi = t / ((long long)MM * NN), ao = 0, bo = 0;
    for (int d = NBD - 1; d >= 0; d--) {
      long long ix = bi % QBD[d];
      bi /= QBD[d];
      ao += ix * QBA[d];
      bo += ix * QBB[d];
    }
    ao *= (long long)MM * KK;
    bo *= (long long)KK * NN;
    long long zav = (long long)za[ZA_PER ? m : 0], zbv = (long long)zb[ZB_PER ? n : 0], sum = 0;
    for (long long k = 0; k < KK; k++) sum += ((long long)a[ao + m * KK + k] - zav) * ((long long)b[bo + k * NN + n] - zbv);
    unsigned acc = (unsigned)sum;
    if (BIAS) acc += (unsigned)bias[n];
    double sc = HAS_SCALE ? (double)LDS(s[m * SC_RS + n * SC_CS]) : 0.0;
    qstore(y, t, (int)acc, sc, HAS_YZP ? (int)yz[0] : 0);
  }
}
#endif

#ifdef QCONV
extern "C" __global__ void qconv2d_k(const TX *x, const TW *w, const TX *xz, const TW *wz, const int *bias, const TS *s, const TZ *yz, TY *y,
                                     long long total) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {
    long long ow = t % OW, oh = (t / OW) % OH, o = (t / ((long long)OW * OH)) % OO, n = t / ((long long)OW * OH * OO);
    long long g = o / (OO / GG), xzv = (long long)xz[0], wzv = (long long)wz[ZB_PER ? o : 0], sum = 0;
    for (long long c = 0; c < CG; c++) {
      Q_TAPS(sum += ((long long)x[((n * CC + g * CG + c) * HH + ih) * WW + iw] - xzv) * ((long long)w[((o * CG + c) * KH + kh) * KW + kw] - wzv);)
    }
    int acc = sum > 2147483647LL ? 2147483647 : sum < -2147483648LL ? (int)-2147483648LL : (int)sum;
    if (BIAS) acc = (int)((unsigned)acc + (unsigned)bias[o]);
    double sc = HAS_SCALE ? (double)LDS(s[SC_PER ? o : 0]) : 0.0;
    qstore(y, t, acc, sc, HAS_YZP ? (int)yz[0] : 0);
  }
}
#endif

#ifdef QPACK
extern "C" __global__ void qmm_pack_k(const TX *a, const TW *b, signed char *ap, signed char *bp, int *ra, int *cb) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < (long long)ROWS + NN; t += (long long)gridDim.x * blockDim.x) {
    int sum = 0;
    if (t < ROWS) {
      for (long long k = 0; k < KK; k++) {
        int v = (int)a[t * KK + k] - SHIFT_A;
        if (PACK_A) ap[t * KK + k] = (signed char)v;
        sum += v;
      }
      ra[t] = sum;
    } else {
      long long n = t - ROWS;
      for (long long k = 0; k < KK; k++) {
        int v = (int)b[k * NN + n] - SHIFT_B;
        bp[n * KK + k] = (signed char)v;
        sum += v;
      }
      cb[n] = sum;
    }
  }
}
#endif

#ifdef QEPI
extern "C" __global__ void qmm_epi_k(const int *D, const int *ra, const int *cb, const TX *za, const TW *zb, const int *bias, const TS *s,
                                     const TZ *yz, TY *y, long long total) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {
    long long n = t % NN, r = t / NN, m = r % MM;
    unsigned zav = (unsigned)((int)za[ZA_PER ? m : 0] - SHIFT_A), zbv = (unsigned)((int)zb[ZB_PER ? n : 0] - SHIFT_B);
    unsigned acc = (unsigned)D[t] - zbv * (unsigned)ra[r] - zav * (unsigned)cb[n] + (unsigned)KK * zav * zbv;
    if (BIAS) acc += (unsigned)bias[n];
    double sc = HAS_SCALE ? (double)LDS(s[m * SC_RS + n * SC_CS]) : 0.0;
    qstore(y, t, (int)acc, sc, HAS_YZP ? (int)yz[0] : 0);
  }
}
#endif

// qconv2d through cuDNN's int8 convolution (NHWC i8 x' and w', an f32 y of
// the exact sum of x' w', below 2^24): qcv_pack_k writes x' = x - SHIFT_A as
// [N,H,W,C], w' = w - SHIFT_B as [O,KH,KW,C], the channel sums of x' per
// position (S) and of w' per tap (W1); qcv_epi_k makes acc = D - wz' xs -
// xz' ws + xz' wz' C nv over the taps inside the input (xs, ws their sums of
// S and W1, nv their count; xz' = xz - SHIFT_A, wz' = wz - SHIFT_B) and runs
// the epilogue. Defines as qconv2d_k's, and SHIFT_A, SHIFT_B.
#ifdef QCPACK
extern "C" __global__ void qcv_pack_k(const TX *x, const TW *w, signed char *xp, signed char *wp, int *S, int *W1) {
  const long long XN = (long long)NB * HH * WW * CC, WN = (long long)OO * KH * KW * CC, SN = (long long)NB * HH * WW, TN = (long long)OO * KH * KW;
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < XN + WN + SN + TN; t += (long long)gridDim.x * blockDim.x) {
    if (t < XN) {
      long long c = t % CC, iw = (t / CC) % WW, ih = (t / (CC * WW)) % HH, n = t / (CC * WW * HH);
      xp[t] = (signed char)((int)x[((n * CC + c) * HH + ih) * WW + iw] - SHIFT_A);
    } else if (t < XN + WN) {
      long long u = t - XN, c = u % CC, kw = (u / CC) % KW, kh = (u / (CC * KW)) % KH, o = u / (CC * KW * KH);
      wp[u] = (signed char)((int)w[((o * CC + c) * KH + kh) * KW + kw] - SHIFT_B);
    } else if (t < XN + WN + SN) {
      long long u = t - XN - WN, p = u % (HH * WW), n = u / (HH * WW);
      int sum = 0;
      for (long long c = 0; c < CC; c++) sum += (int)x[(n * CC + c) * HH * WW + p] - SHIFT_A;
      S[u] = sum;
    } else {
      long long u = t - XN - WN - SN, k = u % (KH * KW), o = u / (KH * KW);
      int sum = 0;
      for (long long c = 0; c < CC; c++) sum += (int)w[(o * CC + c) * KH * KW + k] - SHIFT_B;
      W1[u] = sum;
    }
  }
}
#endif

#ifdef QCEPI
extern "C" __global__ void qcv_epi_k(const float *D, const int *S, const int *W1, const TX *xz, const TW *wz, const int *bias, const TS *s,
                                     const TZ *yz, TY *y, long long total) {
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {
    long long ow = t % OW, oh = (t / OW) % OH, o = (t / ((long long)OW * OH)) % OO, n = t / ((long long)OW * OH * OO);
    int xs = 0, ws = 0, nv = 0;
    Q_TAPS(xs += S[(n * HH + ih) * WW + iw]; ws += W1[(o * KH + kh) * KW + kw]; nv++;)
    unsigned xzv = (unsigned)((int)xz[0] - SHIFT_A), wzv = (unsigned)((int)wz[ZB_PER ? o : 0] - SHIFT_B);
    unsigned acc = (unsigned)(int)D[((n * OH + oh) * OW + ow) * OO + o] - wzv * (unsigned)xs - xzv * (unsigned)ws + xzv * wzv * (unsigned)(CC * nv);
    if (BIAS) acc += (unsigned)bias[o];
    double sc = HAS_SCALE ? (double)LDS(s[SC_PER ? o : 0]) : 0.0;
    qstore(y, t, (int)acc, sc, HAS_YZP ? (int)yz[0] : 0);
  }
}
#endif
