// llm_common.h: arithmetic the decoder ops must compute identically in the
// CPU reference (ops/cpu_llm.c includes this file) and in the CUDA kernels
// (embedded, and compiled by NVRTC before rotary.cu and sample.cu):
// - the Philox4x32-10 counter-based generator (Salmon et al., SC'11, as
//   Random123 defines it), so one seed gives one token on either device;
// - rl_expf, an exponential over [-inf, 0] made of IEEE float additions and
//   multiplications alone (never contracted into FMAs), so the sampler's
//   weights are the same bits on both;
// - the order key of a float, for thresholds found by bisection;
// - a rotary embedding's inverse frequencies (in double), with Hugging Face's
//   linear and llama3 scalings.
#ifndef RILL_LLM_COMMON_H
#define RILL_LLM_COMMON_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define RL_FN __device__ __forceinline__
RL_FN float rl_add(float a, float b) { return __fadd_rn(a, b); }
RL_FN float rl_sub(float a, float b) { return __fsub_rn(a, b); }
RL_FN float rl_mul(float a, float b) { return __fmul_rn(a, b); }
RL_FN float rl_div(float a, float b) { return __fdiv_rn(a, b); }
RL_FN unsigned rl_f2u(float f) { return (unsigned)__float_as_int(f); }
RL_FN float rl_u2f(unsigned u) { return __int_as_float((int)u); }
#else
#include <math.h>
#include <string.h>
#define RL_FN static inline
/* volatile: the compiler may not fuse a product into a following sum (an
 * FMA rounds once where the GPU's __fmul_rn then __fadd_rn round twice). */
RL_FN float rl_add(float a, float b) { volatile float r = a + b; return r; }
RL_FN float rl_sub(float a, float b) { volatile float r = a - b; return r; }
RL_FN float rl_mul(float a, float b) { volatile float r = a * b; return r; }
RL_FN float rl_div(float a, float b) { volatile float r = a / b; return r; }
RL_FN unsigned rl_f2u(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
RL_FN float rl_u2f(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
#endif

// Philox4x32-10: c is the counter (4 words), k the key (2); the result
// replaces c. Known answer: counter 0 and key 0 give 6627e8d5 e169c58d
// bc57ac4c 9b00dbd8.
RL_FN void rl_philox(unsigned c[4], unsigned k0, unsigned k1) {
  for (int r = 0; r < 10; r++) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    unsigned long long p0 = (unsigned long long)0xD2511F53u * c[0], p1 = (unsigned long long)0xCD9E8D57u * c[2];
    unsigned hi0 = (unsigned)(p0 >> 32), lo0 = (unsigned)p0, hi1 = (unsigned)(p1 >> 32), lo1 = (unsigned)p1;
    unsigned n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
  }
}

// The sampler's uniform number in [0, 1) for row `row` at run-time counter
// `counter` with seed `seed`: counter words (row, 0, counter lo, counter hi),
// key (seed lo, seed hi); the first output's top 24 bits over 2^24.
RL_FN float rl_uniform(unsigned long long seed, unsigned long long counter, unsigned row) {
  unsigned c[4] = {row, 0u, (unsigned)counter, (unsigned)(counter >> 32)};
  rl_philox(c, (unsigned)seed, (unsigned)(seed >> 32));
  return rl_mul((float)(c[0] >> 8), 5.9604644775390625e-8f);
}

// e^x for x in [-inf, 0] (the sampler's (logit - max) / temperature): 0
// below -87 (no subnormals), else 2^n * p(r), r = x - n ln 2 in two parts
// (Cody and Waite), p the degree-6 Taylor polynomial by Horner's rule.
// Within 2 ulp of e^x; what matters is that both devices give these bits.
RL_FN float rl_expf(float x) {
  if (!(x >= -87.0f)) return 0.0f;  // also NaN
  if (x >= 0.0f) return 1.0f;
  float t = rl_mul(x, 1.44269504088896341f);
  int n = (int)floorf(rl_add(t, 0.5f));
  float fn = (float)n;
  float r = rl_sub(rl_sub(x, rl_mul(fn, 0.693145751953125f)), rl_mul(fn, 1.428606765330187e-06f));
  float p = 1.3888889e-3f;
  p = rl_add(rl_mul(p, r), 8.3333333e-3f);
  p = rl_add(rl_mul(p, r), 4.1666667e-2f);
  p = rl_add(rl_mul(p, r), 0.16666667f);
  p = rl_add(rl_mul(p, r), 0.5f);
  p = rl_add(rl_mul(p, r), 1.0f);
  p = rl_add(rl_mul(p, r), 1.0f);
  return rl_mul(p, rl_u2f((unsigned)(n + 127) << 23));
}

// A key that orders floats as numbers (-inf lowest, +inf highest); NaN gets
// 0, below every number.
RL_FN unsigned rl_key(float f) {
  if (f != f) return 0u;
  unsigned u = rl_f2u(f);
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

// A rotary embedding's inverse frequency of pair i (of rd / 2): theta^(-2i/rd),
// then scaled. scaling 1 (linear): divided by factor (positions / factor).
// scaling 2 (llama3, transformers' _compute_llama3_parameters): wavelengths
// 2 pi / f longer than orig / low are divided by factor, shorter than
// orig / high kept, and those between blended by s = (orig / wavelength -
// low) / (high - low): (1 - s) f / factor + s f.
RL_FN double rl_rope_inv_freq(int i, int rd, double theta, int scaling, double factor, double low, double high, double orig) {
  double f = 1.0 / pow(theta, (double)(2 * i) / (double)rd);
  if (scaling == 1) return f / factor;
  if (scaling == 2) {
    double wl = 2.0 * 3.14159265358979323846 / f;
    if (wl > orig / low) return f / factor;
    if (wl < orig / high) return f;
    double s = (orig / wl - low) / (high - low);
    return (1.0 - s) * f / factor + s * f;
  }
  return f;
}

#endif
