/* test_llm.c: the decoder ops' CPU kernels (rms_norm, rotary, swiglu,
 * geglu, attention, sample, gather as an embedding lookup) against
 * references written here in double precision in their textbook form
 * (transformers' formulation where it has one), never the kernels' own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/cuda/llm_common.h"

static const rill_dtype_t FLOATS[] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64};
/* Relative tolerance, scaled by (1 + |want|): a few roundings of the dtype. */
static double tol(rill_dtype_t d) { return d == RILL_F16 ? 4e-3 : d == RILL_BF16 ? 3e-2 : d == RILL_F32 ? 2e-6 : 1e-12; }

static uint64_t rng = 1;
static double urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static void fill(double *v, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * urand();
}
/* The values as stored in dtype d (the reference starts from what the kernel reads). */
static void quantise(double *v, size_t n, rill_dtype_t d) {
  uint64_t t;
  for (size_t i = 0; i < n; i++) {
    rill_element_set(d, &t, 0, v[i]);
    v[i] = rill_element_get(d, &t, 0);
  }
}

static void expect_close(const op_io_t *o, const double *want, size_t n, double rel, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(at_f(o, i) - want[i]) <= rel * (1 + fabs(want[i])), "%s: element %zu: got %.9g, want %.9g", what, i, at_f(o, i), want[i]);
}

static void expect_error(const char *op, const op_io_t *in, uint32_t nin, const isa_attr_t *attrs, uint32_t nattrs, const char *needle) {
  op_io_t y[2] = {{{0}, NULL}, {{0}, NULL}};
  uint32_t n = 0;
  rill_status_t st = run_op(op, in, nin, attrs, nattrs, y, 1, &n);
  ck_assert_msg(st && strstr(rill_status_message(st), needle), "%s: want an error with '%s', got %s", op, needle, st ? rill_status_message(st) : "success");
  ck_assert_int_eq(rill_status_code(st), RILL_ASSEMBLY_ERROR);
  rill_status_free(st);
}

START_TEST(philox_and_expf) {
  /* Random123's known answers for Philox4x32-10 */
  unsigned c[4] = {0, 0, 0, 0};
  rl_philox(c, 0, 0);
  ck_assert(c[0] == 0x6627e8d5u && c[1] == 0xe169c58du && c[2] == 0xbc57ac4cu && c[3] == 0x9b00dbd8u);
  unsigned f[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  rl_philox(f, 0xffffffffu, 0xffffffffu);
  ck_assert(f[0] == 0x408f276du && f[1] == 0x41c83b0eu && f[2] == 0xa20bc7c6u && f[3] == 0x6d5451fdu);
  unsigned pi[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
  rl_philox(pi, 0xa4093822u, 0x299f31d0u);
  ck_assert(pi[0] == 0xd16cfe09u && pi[1] == 0x94fdccebu && pi[2] == 0x5001e420u && pi[3] == 0x24126ea1u);
  /* uniform numbers: in [0, 1), mean 1/2, variance 1/12 */
  double s = 0, s2 = 0;
  for (unsigned i = 0; i < 20000; i++) {
    double u = rl_uniform(7, i, 3);
    ck_assert(u >= 0 && u < 1);
    s += u;
    s2 += u * u;
  }
  ck_assert(fabs(s / 20000 - 0.5) < 0.01 && fabs(s2 / 20000 - s * s / 4e8 - 1.0 / 12) < 0.005);
  /* e^x over [-87, 0] within 4 ulp; 0 below and for -inf */
  for (int i = 0; i <= 100000; i++) {
    float x = (float)(-87.0 * i / 100000);
    double want = exp((double)x);
    ck_assert_msg(fabs(rl_expf(x) - want) <= 4 * 1.2e-7 * want, "rl_expf(%.9g) = %.9g, want %.9g", x, rl_expf(x), want);
  }
  ck_assert(rl_expf(-88) == 0 && rl_expf(-INFINITY) == 0 && rl_expf(0) == 1);
  /* keys order floats */
  float v[] = {-INFINITY, -3.5f, -0.0f, 1e-30f, 2.0f, INFINITY};
  for (int i = 0; i + 1 < 6; i++) ck_assert(rl_key(v[i]) < rl_key(v[i + 1]));
  ck_assert(rl_key(NAN) == 0 && rl_key(-INFINITY) > 0);
}
END_TEST

START_TEST(rms_norm_values) {
  enum { R = 3, N = 40 };
  double x[R * N], w[N], want[R * N];
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = FLOATS[k];
    fill(x, R * N, -2, 2);
    fill(w, N, 0.5, 1.5);
    quantise(x, R * N, d);
    quantise(w, N, d);
    for (int with_w = 0; with_w < 2; with_w++) {
      for (int r = 0; r < R; r++) {
        double ss = 0;
        for (int j = 0; j < N; j++) ss += x[r * N + j] * x[r * N + j];
        for (int j = 0; j < N; j++) want[r * N + j] = x[r * N + j] / sqrt(ss / N + 1e-5) * (with_w ? w[j] : 1);
      }
      op_io_t in[2] = {tensor_f(T(d, 2, R, N), x), tensor_f(T(d, 1, N), w)}, y;
      isa_attr_t eps = attr_float("eps", 1e-5);
      uint32_t n;
      ck_assert(!run_op("rms_norm", in, 1 + (uint32_t)with_w, &eps, 1, &y, 1, &n));
      ck_assert(y.type.dtype == d && y.type.rank == 2);
      expect_close(&y, want, R * N, 2 * tol(d), "rms_norm");
      op_io_free(&y, 1);
      op_io_free(in, 2);
    }
  }
  /* over the last two dims, the default eps (1e-6) */
  double x2[2 * 2 * 3];
  fill(x2, 12, -1, 1);
  op_io_t in = tensor_f(T(RILL_F64, 3, 2, 2, 3), x2), y;
  isa_attr_t ax = attr_int("axis", 1);
  uint32_t n;
  ck_assert(!run_op("rms_norm", &in, 1, &ax, 1, &y, 1, &n));
  for (int r = 0; r < 2; r++) {
    double ss = 0;
    for (int j = 0; j < 6; j++) ss += x2[r * 6 + j] * x2[r * 6 + j];
    for (int j = 0; j < 6; j++) want[r * 6 + j] = x2[r * 6 + j] / sqrt(ss / 6 + 1e-6);
  }
  expect_close(&y, want, 12, 1e-12, "rms_norm axis 1");
  op_io_free(&y, 1);
  /* bad input */
  op_io_t bw[2] = {in, tensor_f(T(RILL_F64, 1, 2), NULL)};
  expect_error("rms_norm", bw, 2, NULL, 0, "weight: expected f64[3]");
  op_io_t bi = tensor_f(T(RILL_I32, 1, 4), NULL);
  expect_error("rms_norm", &bi, 1, NULL, 0, "expected a float tensor");
  op_io_free(&bi, 1);
  op_io_free(bw, 2);
}
END_TEST

static double silu(double a) { return a / (1 + exp(-a)); }
static double gelu(double a, bool t) {
  return t ? 0.5 * a * (1 + tanh(sqrt(2 / M_PI) * (a + 0.044715 * a * a * a))) : 0.5 * a * (1 + erf(a / sqrt(2)));
}

START_TEST(gated_units) {
  enum { N = 33 };
  double g[N], u[N], want[N];
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = FLOATS[k];
    fill(g, N, -4, 4);
    fill(u, N, -2, 2);
    quantise(g, N, d);
    quantise(u, N, d);
    for (int op = 0; op < 3; op++) {
      for (int i = 0; i < N; i++) want[i] = (op == 0 ? silu(g[i]) : gelu(g[i], op == 2)) * u[i];
      op_io_t in[2] = {tensor_f(T(d, 2, 3, 11), g), tensor_f(T(d, 2, 3, 11), u)}, y;
      isa_attr_t ap = {"approximate", ISA_ATTR_STRING, 1, NULL, NULL, "tanh"};
      uint32_t n;
      ck_assert(!run_op(op == 0 ? "swiglu" : "geglu", in, 2, &ap, op == 2, &y, 1, &n));
      expect_close(&y, want, N, tol(d), op == 0 ? "swiglu" : "geglu");
      op_io_free(&y, 1);
      op_io_free(in, 2);
    }
  }
  op_io_t bi[2] = {tensor_f(T(RILL_I32, 1, 4), NULL), tensor_f(T(RILL_I32, 1, 4), NULL)};
  expect_error("swiglu", bi, 2, NULL, 0, "gate: expected a float tensor");
  isa_attr_t ap = {"approximate", ISA_ATTR_STRING, 1, NULL, NULL, "sigmoid"};
  op_io_t bf[2] = {tensor_f(T(RILL_F32, 1, 4), NULL), tensor_f(T(RILL_F32, 1, 4), NULL)};
  expect_error("geglu", bf, 2, &ap, 1, "expects \"none\" or \"tanh\"");
  expect_error("swiglu", bf, 2, &ap, 1, "unknown attribute 'approximate'");
  op_io_free(bi, 2);
  op_io_free(bf, 2);
}
END_TEST

/* A program with linear layers and swiglu: -O1 fuses the swiglu with the
 * add after it, and gives what -O0 gives. */
START_TEST(gated_units_fuse) {
  const char *src = "func @main(%x: f32[2,8], %wg: f32[16,8], %wu: f32[16,8], %r: f32[2,16]) -> f32[2,16] {\n"
                    "  %g = linear(%x, %wg)\n  %u = linear(%x, %wu)\n  %h = swiglu(%g, %u)\n  %y = add(%h, %r)\n  %z = mul(%y, 0.5)\n  return %z\n}\n";
  uint8_t *b;
  size_t sz;
  ck_assert(!asm_text(src, &b, &sz));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, sz, ".", &m));
  free(b);
  char *text = NULL;
  size_t tl;
  ck_assert(!rill_module_disassemble(m, &text, &tl));
  ck_assert_msg(strstr(text, "fused(") && strstr(text, "swiglu(x") && !strstr(text, "= swiglu(f32"), "%s", text);
  free(text);
  /* the values */
  float x[16], wg[128], wu[128], r[32];
  for (int i = 0; i < 128; i++) wg[i] = (float)(urand() * 2 - 1), wu[i] = (float)(urand() * 2 - 1);
  for (int i = 0; i < 16; i++) x[i] = (float)(urand() * 2 - 1);
  for (int i = 0; i < 32; i++) r[i] = (float)(urand() * 2 - 1);
  rill_type_t tx = T(RILL_F32, 2, 2, 8), tw = T(RILL_F32, 2, 16, 8), tr = T(RILL_F32, 2, 2, 16);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  rill_tensor_t *in[4], **out;
  int nout;
  ck_assert(!rill_tensor_create(vm, &tx, x, &in[0]) && !rill_tensor_create(vm, &tw, wg, &in[1]) && !rill_tensor_create(vm, &tw, wu, &in[2]) &&
            !rill_tensor_create(vm, &tr, r, &in[3]));
  ck_assert(!rill_vm_invoke(vm, "main", in, 4, &out, &nout));
  float y[32];
  ck_assert(!rill_tensor_read(out[0], y, sizeof y));
  for (int i = 0; i < 2; i++)
    for (int o = 0; o < 16; o++) {
      double gs = 0, us = 0;
      for (int k = 0; k < 8; k++) gs += x[i * 8 + k] * wg[o * 8 + k], us += x[i * 8 + k] * wu[o * 8 + k];
      double want = (silu(gs) * us + r[i * 16 + o]) * 0.5;
      ck_assert_msg(fabs(y[i * 16 + o] - want) < 1e-5 * (1 + fabs(want)), "%d %d: %g vs %g", i, o, y[i * 16 + o], want);
    }
  rill_results_free(vm, out, nout);
  for (int i = 0; i < 4; i++) rill_tensor_release(in[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* fused_linear (-O1's decode products): rms_norm, swiglu and geglu_tanh
 * before, a bias and a residual after, at 5 rows (the op takes any), in
 * every float dtype, against the textbook forms; then its errors. */
START_TEST(fused_linear_values) {
  enum { R = 5, K = 24, N = 7 };
  double x[R * K], u[R * K], g[K], w[N * K], b[N], r[R * N], want[R * N];
  for (size_t q = 0; q < 4; q++) {
    rill_dtype_t d = FLOATS[q];
    fill(x, R * K, -2, 2), fill(u, R * K, -2, 2), fill(g, K, 0.5, 1.5), fill(w, N * K, -0.5, 0.5), fill(b, N, -1, 1), fill(r, R * N, -1, 1);
    quantise(x, R * K, d), quantise(u, R * K, d), quantise(g, K, d), quantise(w, N * K, d), quantise(b, N, d), quantise(r, R * N, d);
    for (int form = 0; form < 3; form++) { /* rms_norm with bias and residual; swiglu alone; geglu_tanh with the residual */
      for (int i = 0; i < R; i++) {
        double ss = 0, xn[K];
        for (int k = 0; k < K; k++) ss += x[i * K + k] * x[i * K + k];
        for (int k = 0; k < K; k++)
          xn[k] = form == 0 ? x[i * K + k] / sqrt(ss / K + 1e-5) * g[k] : form == 1 ? silu(x[i * K + k]) * u[i * K + k] : gelu(x[i * K + k], true) * u[i * K + k];
        for (int o = 0; o < N; o++) {
          double acc = form == 0 ? b[o] : 0;
          for (int k = 0; k < K; k++) acc += xn[k] * w[o * K + k];
          want[i * N + o] = acc + (form != 1 ? r[i * N + o] : 0);
        }
      }
      op_io_t in[5] = {tensor_f(T(d, 2, R, K), x), tensor_f(T(d, 2, N, K), w)}, y;
      uint32_t nin = 2, n, na = 0;
      isa_attr_t at[3];
      if (form == 0) {
        in[nin++] = tensor_f(T(d, 1, N), b);
        in[nin++] = tensor_f(T(d, 1, K), g);
        at[na++] = (isa_attr_t){.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = "rms_norm"};
        at[na++] = attr_float("eps", 1e-5);
      } else {
        in[nin++] = tensor_f(T(d, 2, R, K), u);
        at[na++] = (isa_attr_t){.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = form == 1 ? "swiglu" : "geglu_tanh"};
      }
      if (form != 1) {
        in[nin++] = tensor_f(T(d, 2, R, N), r);
        at[na++] = attr_bool("residual", true);
      }
      ck_assert(!run_op("fused_linear", in, nin, at, na, &y, 1, &n));
      ck_assert(y.type.dtype == d && y.type.rank == 2 && y.type.dims[1] == N);
      /* the prologue's rounding carried through K products */
      expect_close(&y, want, R * N, 8 * tol(d), form == 0 ? "fused_linear rms_norm" : form == 1 ? "fused_linear swiglu" : "fused_linear geglu_tanh");
      op_io_free(&y, 1);
      op_io_free(in, nin);
    }
  }
  /* the epilogue: the gated unit of the product's halves (y [R, N2]), the gate the first half or the second, a bias or none,
   * x read through rms_norm's prologue or not */
  enum { N2 = 6 };
  double w2[2 * N2 * K], b2[2 * N2], want2[R * N2];
  for (size_t q = 0; q < 4; q++) {
    rill_dtype_t d = FLOATS[q];
    fill(x, R * K, -2, 2), fill(w2, 2 * N2 * K, -0.5, 0.5), fill(b2, 2 * N2, -1, 1), fill(g, K, 0.5, 1.5);
    quantise(x, R * K, d), quantise(w2, 2 * N2 * K, d), quantise(b2, 2 * N2, d), quantise(g, K, d);
    static const char *const epis[] = {"swiglu", "geglu", "geglu_tanh"};
    for (int v = 0; v < 12; v++) {
      int e = v / 4, second = v / 2 % 2, norm = v % 2;
      bool bias = (e + second) % 2;
      for (int i = 0; i < R; i++) {
        double ss = 0, xn[K];
        for (int k = 0; k < K; k++) ss += x[i * K + k] * x[i * K + k];
        for (int k = 0; k < K; k++) xn[k] = norm ? x[i * K + k] / sqrt(ss / K + 1e-6) * g[k] : x[i * K + k];
        for (int o = 0; o < N2; o++) {
          double h[2];
          for (int half = 0; half < 2; half++) {
            int row = half * N2 + o;
            double acc = bias ? b2[row] : 0;
            for (int k = 0; k < K; k++) acc += xn[k] * w2[row * K + k];
            h[half] = acc;
          }
          double gt = h[second], up = h[1 - second];
          want2[i * N2 + o] = (e == 0 ? silu(gt) : gelu(gt, e == 2)) * up;
        }
      }
      op_io_t in[4] = {tensor_f(T(d, 2, R, K), x), tensor_f(T(d, 2, 2 * N2, K), w2)}, y;
      uint32_t nin = 2, n, na = 0;
      if (bias) in[nin++] = tensor_f(T(d, 1, 2 * N2), b2);
      isa_attr_t at[3];
      if (norm) {
        in[nin++] = tensor_f(T(d, 1, K), g);
        at[na++] = (isa_attr_t){.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = "rms_norm"};
      }
      at[na++] = (isa_attr_t){.name = "epilogue", .kind = ISA_ATTR_STRING, .count = 1, .str = epis[e]};
      if (second) at[na++] = attr_bool("gate_second", true);
      ck_assert(!run_op("fused_linear", in, nin, at, na, &y, 1, &n));
      ck_assert(y.type.dtype == d && y.type.rank == 2 && y.type.dims[0] == R && y.type.dims[1] == N2);
      char what[80];
      snprintf(what, sizeof what, "fused_linear epilogue %s%s%s%s", epis[e], second ? ", gate second" : "", bias ? ", bias" : "", norm ? ", rms_norm" : "");
      expect_close(&y, want2, R * N2, 8 * tol(d), what);
      op_io_free(&y, 1);
      op_io_free(in, nin);
    }
  }
  /* bad input */
  op_io_t bi[4] = {tensor_f(T(RILL_F32, 2, 2, 8), NULL), tensor_f(T(RILL_F32, 2, 3, 8), NULL), tensor_f(T(RILL_F32, 1, 8), NULL),
                   tensor_f(T(RILL_F32, 2, 2, 4), NULL)};
  isa_attr_t rms = {.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = "rms_norm"}, bad = rms, res = attr_bool("residual", true),
             eps = attr_float("eps", 1e-5), two[2] = {rms, res};
  bad.str = "layer_norm";
  expect_error("fused_linear", bi, 2, &rms, 1, "expected 3 operands (x, w, the norm's weight) or 4 with a bias after w, found 2");
  expect_error("fused_linear", bi, 3, two, 2, "expected 4 operands (x, w, the norm's weight, the residual) or 5 with a bias after w, found 3");
  expect_error("fused_linear", bi, 2, &bad, 1, "attribute 'prologue' expects \"none\", \"rms_norm\", \"swiglu\", \"geglu\" or \"geglu_tanh\"");
  expect_error("fused_linear", bi, 2, &eps, 1, "eps needs prologue=\"rms_norm\"");
  expect_error("fused_linear", bi, 4, two, 2, "the residual: expected f32[2,3] (the result's type), found f32[2,4]");
  op_io_t sw[3] = {bi[0], bi[1], bi[2]};
  isa_attr_t swi = {.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = "swiglu"};
  expect_error("fused_linear", sw, 3, &swi, 1, "the value: expected f32[2,8] (the gate's type), found f32[8]");
  isa_attr_t epi = {.name = "epilogue", .kind = ISA_ATTR_STRING, .count = 1, .str = "swiglu"}, epi_rms = epi, g2 = attr_bool("gate_second", true),
             er[2] = {epi, res}, ep[2] = {rms, epi};
  epi_rms.str = "rms_norm";
  expect_error("fused_linear", bi, 2, &epi, 1, "epilogue: the weight's 3 outputs do not split in halves");
  expect_error("fused_linear", bi, 2, &epi_rms, 1, "attribute 'epilogue' expects \"none\", \"swiglu\", \"geglu\" or \"geglu_tanh\"");
  expect_error("fused_linear", bi, 2, &g2, 1, "gate_second needs an epilogue");
  isa_attr_t es[2] = {swi, epi};
  expect_error("fused_linear", bi, 3, er, 2, "an epilogue goes with no residual, and with no prologue but rms_norm");
  expect_error("fused_linear", sw, 3, es, 2, "an epilogue goes with no residual, and with no prologue but rms_norm");
  expect_error("fused_linear", bi, 3, ep, 2, "epilogue: the weight's 3 outputs do not split in halves");
  op_io_free(bi, 4);
}
END_TEST

/* rotary_update equals rotary of q and k and the two updates it replaces
 * (themselves checked against the textbook in rotary_values and
 * test_state): offsets per row, then a scalar start with gptj; an offset
 * past the cache is a run-time error that writes nothing. */
START_TEST(rotary_update_values) {
  enum { B = 2, S = 2, Hq = 4, Hkv = 2, D = 16, L = 8 };
  double q[B * S * Hq * D], k[B * S * Hkv * D], v[B * S * Hkv * D], kc[B * Hkv * L * D], vc[B * Hkv * L * D];
  for (size_t t = 0; t < 4; t++) {
    rill_dtype_t d = FLOATS[t];
    fill(q, B * S * Hq * D, -1, 1), fill(k, B * S * Hkv * D, -1, 1), fill(v, B * S * Hkv * D, -1, 1);
    fill(kc, B * Hkv * L * D, -1, 1), fill(vc, B * Hkv * L * D, -1, 1);
    for (int form = 0; form < 2; form++) {
      double up[2] = {3, 6}, rp[4] = {3, 4, 6, 7};
      rill_type_t ct = T(d, 4, B, Hkv, L, D), kt = T(d, 4, B, S, Hkv, D), ut = form ? T(RILL_I64, 0) : T(RILL_I64, 1, B),
                  rt = form ? T(RILL_I32, 0) : T(RILL_I64, 2, B, S);
      op_io_t in[7] = {tensor_f(ct, kc), tensor_f(ct, vc), tensor_f(T(d, 4, B, S, Hq, D), q), tensor_f(kt, k), tensor_f(kt, v), tensor_f(rt, rp),
                       tensor_f(ut, up)},
              y[3], a, bk, bv, kr, ktr, vtr;
      isa_attr_t at[2] = {{.name = "style", .kind = ISA_ATTR_STRING, .count = 1, .str = form ? "gptj" : "neox"}, attr_int("rotary_dim", form ? 8 : 16)},
                 perm = attr_ints("perm", 4, (const int64_t[]){0, 2, 1, 3}), axis = attr_int("axis", 2);
      uint32_t n;
      ck_assert(!run_op("rotary_update", in, 7, at, 2, y, 3, &n));
      ck_assert_int_eq(n, 3);
      /* the ops it stands for */
      op_io_t rq[2] = {in[2], in[5]}, rk[2] = {in[3], in[5]}, tv = in[4];
      ck_assert(!run_op("rotary", rq, 2, at, 2, &a, 1, &n) && !run_op("rotary", rk, 2, at, 2, &kr, 1, &n));
      ck_assert(!run_op("transpose", &kr, 1, &perm, 1, &ktr, 1, &n) && !run_op("transpose", &tv, 1, &perm, 1, &vtr, 1, &n));
      op_io_t uk[3] = {in[0], ktr, in[6]}, uv[3] = {in[1], vtr, in[6]};
      ck_assert(!run_op("update", uk, 3, &axis, 1, &bk, 1, &n) && !run_op("update", uv, 3, &axis, 1, &bv, 1, &n));
      const op_io_t *got[3] = {&y[0], &y[1], &y[2]}, *ref[3] = {&bk, &bv, &a};
      for (int j = 0; j < 3; j++) {
        size_t m = rill_type_numel(&ref[j]->type);
        ck_assert(rill__type_eq(&got[j]->type, &ref[j]->type));
        for (size_t i = 0; i < m; i++) ck_assert_msg(at_f(got[j], i) == at_f(ref[j], i), "result %d element %zu: %g vs %g", j, i, at_f(got[j], i), at_f(ref[j], i));
      }
      op_io_free(y, 3);
      op_io_free(&a, 1), op_io_free(&kr, 1), op_io_free(&ktr, 1), op_io_free(&vtr, 1), op_io_free(&bk, 1), op_io_free(&bv, 1);
      if (form) {
        /* an offset past the cache: update's run-time error */
        double far = 7;
        op_io_free(&in[6], 1);
        in[6] = tensor_f(ut, &far);
        rill_status_t st = run_op("rotary_update", in, 7, at, 2, y, 3, &n);
        ck_assert_msg(st && rill_status_code(st) == RILL_RUNTIME_ERROR && strstr(rill_status_message(st), "update: offset 7 with 2 along axis 2 is outside"),
                      "%s", st ? rill_status_message(st) : "success");
        rill_status_free(st);
        op_io_free(y, 3); /* (made before the kernel ran) */
      }
      op_io_free(in, 7);
    }
  }
}
END_TEST

/* transformers' formulation: inv_freq, cos/sin per position, q * cos + rotate(q) * sin. */
typedef struct rope_cfg {
  bool gptj;
  int rd;
  double theta;
  int scaling; /* 0 none, 1 linear, 2 llama3 */
  double factor, low, high, orig;
} rope_cfg_t;

static double ref_inv_freq(const rope_cfg_t *c, int i) {
  double f = 1.0 / pow(c->theta, 2.0 * i / c->rd);
  if (c->scaling == 1) return f / c->factor;
  if (c->scaling == 2) {
    /* _compute_llama3_parameters, written as there */
    double wavelen = 2 * M_PI / f, low_wl = c->orig / c->low, high_wl = c->orig / c->high;
    double llama = wavelen > low_wl ? f / c->factor : f;
    double smooth = (c->orig / wavelen - c->low) / (c->high - c->low);
    double smoothed = (1 - smooth) * llama / c->factor + smooth * llama;
    bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
    return medium ? smoothed : llama;
  }
  return f;
}

static void ref_rope(const rope_cfg_t *c, const double *x, int D, double pos, double *y) {
  int h = c->rd / 2;
  for (int j = 0; j < D; j++) y[j] = x[j];
  for (int j = 0; j < c->rd; j++) {
    /* cos and sin of the frequency at j: cat(freqs, freqs) (neox) or repeat_interleave(freqs, 2) (gptj) */
    int fi = c->gptj ? j / 2 : j % h;
    double a = pos * ref_inv_freq(c, fi);
    double rot = c->gptj ? (j % 2 ? x[j - 1] : -x[j + 1]) : (j < h ? -x[j + h] : x[j - h]);
    y[j] = x[j] * cos(a) + rot * sin(a);
  }
}

START_TEST(rotary_values) {
  enum { B = 2, S = 3, H = 2, D = 16 };
  double x[B * S * H * D], want[B * S * H * D];
  rope_cfg_t cfgs[] = {
      {false, 16, 10000, 0, 1, 0, 0, 0},   {true, 16, 10000, 0, 1, 0, 0, 0},    {false, 8, 10000, 0, 1, 0, 0, 0},
      {true, 6, 500000, 0, 1, 0, 0, 0},    {false, 16, 10000, 1, 4, 0, 0, 0},   {false, 16, 500000, 2, 8, 1, 4, 64},
      {true, 16, 10000, 2, 32, 1.5, 3, 20},
  };
  for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
    const rope_cfg_t *c = &cfgs[ci];
    for (int pm = 0; pm < 3; pm++)
      for (size_t k = 0; k < 4; k++) {
        rill_dtype_t d = FLOATS[k];
        fill(x, sizeof x / sizeof *x, -2, 2);
        quantise(x, sizeof x / sizeof *x, d);
        /* positions: a start (decode continuing at 37), per token, per sequence and token */
        double pstart = 37, ps[S] = {5, 0, 900}, pbs[B * S] = {0, 1, 2, 100, 101, 4000};
        op_io_t in[2] = {tensor_f(T(d, 4, B, S, H, D), x),
                         pm == 0 ? tensor_f(T(RILL_I64, 0), &pstart) : pm == 1 ? tensor_f(T(RILL_I32, 1, S), ps) : tensor_f(T(RILL_I64, 2, B, S), pbs)},
                y;
        for (int b = 0; b < B; b++)
          for (int s = 0; s < S; s++)
            for (int h = 0; h < H; h++) {
              double pos = pm == 0 ? pstart + s : pm == 1 ? ps[s] : pbs[b * S + s];
              size_t o = (size_t)(((b * S + s) * H + h) * D);
              ref_rope(c, x + o, D, pos, want + o);
            }
        isa_attr_t at[8];
        uint32_t na = 0;
        at[na++] = (isa_attr_t){"style", ISA_ATTR_STRING, 1, NULL, NULL, c->gptj ? "gptj" : "neox"};
        if (c->rd != D) at[na++] = attr_int("rotary_dim", c->rd);
        if (c->theta != 10000) at[na++] = attr_float("theta", c->theta);
        if (c->scaling) {
          at[na++] = (isa_attr_t){"scaling", ISA_ATTR_STRING, 1, NULL, NULL, c->scaling == 1 ? "linear" : "llama3"};
          at[na++] = attr_float("factor", c->factor);
        }
        if (c->scaling == 2) {
          at[na++] = attr_float("low_freq_factor", c->low);
          at[na++] = attr_float("high_freq_factor", c->high);
          at[na++] = attr_float("original_max_position", c->orig);
        }
        uint32_t n;
        rill_status_t st = run_op("rotary", in, 2, at, na, &y, 1, &n);
        ck_assert_msg(!st, "%s", rill_status_message(st));
        char what[96];
        snprintf(what, sizeof what, "rotary config %zu positions %d %s", ci, pm, rill_dtype_name(d));
        expect_close(&y, want, sizeof x / sizeof *x, 2 * tol(d), what);
        op_io_free(&y, 1);
        op_io_free(in, 2);
      }
  }
  /* llama3's three bands all occur in config 5: some pairs divided by 8, some kept, some blended */
  int bands[3] = {0};
  for (int i = 0; i < 8; i++) {
    double f = 1.0 / pow(500000, 2.0 * i / 16), g = ref_inv_freq(&cfgs[5], i);
    bands[fabs(g - f / 8) < 1e-15 * f ? 0 : fabs(g - f) < 1e-15 * f ? 1 : 2]++;
    ck_assert(fabs(g - rl_rope_inv_freq(i, 16, 500000, 2, 8, 1, 4, 64)) <= 1e-15 * f);
  }
  ck_assert_msg(bands[0] && bands[1] && bands[2], "bands %d %d %d", bands[0], bands[1], bands[2]);
  /* bad input */
  op_io_t bx[2] = {tensor_f(T(RILL_F32, 4, 1, 2, 1, 8), NULL), tensor_f(T(RILL_I64, 1, 3), NULL)};
  expect_error("rotary", bx, 2, NULL, 0, "positions: expected an i32 or i64 tensor of shape [] (the first position), [2] or [1,2]");
  op_io_t bp[2] = {bx[0], tensor_f(T(RILL_F32, 0), NULL)};
  expect_error("rotary", bp, 2, NULL, 0, "positions: expected");
  op_io_t ok[2] = {bx[0], tensor_f(T(RILL_I32, 0), NULL)};
  isa_attr_t odd = attr_int("rotary_dim", 5), big = attr_int("rotary_dim", 10), sty = {"style", ISA_ATTR_STRING, 1, NULL, NULL, "half"};
  isa_attr_t fac = attr_float("factor", 2), sc = {"scaling", ISA_ATTR_STRING, 1, NULL, NULL, "yarn"};
  expect_error("rotary", ok, 2, &odd, 1, "rotary_dim must be even and in 2..8");
  expect_error("rotary", ok, 2, &big, 1, "rotary_dim must be even and in 2..8");
  expect_error("rotary", ok, 2, &sty, 1, "attribute 'style' expects \"neox\" or \"gptj\", found \"half\"");
  expect_error("rotary", ok, 2, &sc, 1, "attribute 'scaling' expects \"none\", \"linear\" or \"llama3\", found \"yarn\"");
  expect_error("rotary", ok, 2, &fac, 1, "factor needs scaling=");
  isa_attr_t lin[2] = {{"scaling", ISA_ATTR_STRING, 1, NULL, NULL, "linear"}, attr_float("low_freq_factor", 2)};
  expect_error("rotary", ok, 2, lin, 2, "low_freq_factor, high_freq_factor and original_max_position need scaling=\"llama3\"");
  op_io_t r3[2] = {tensor_f(T(RILL_F32, 3, 2, 1, 8), NULL), ok[1]};
  expect_error("rotary", r3, 2, NULL, 0, "expected rank 4 [B,S,H,D]");
  op_io_free(bx, 2);
  op_io_free(&bp[1], 1);
  op_io_free(&ok[1], 1);
  op_io_free(r3, 1);
}
END_TEST

/* Attention as transformers' eager path computes it: k and v repeated per
 * group (repeat_kv), scores q k^T * scale, a mask of -inf (positions at or
 * past len, and with causal those after the query's own position, the
 * queries being the last Sq of the len positions), softmax, times v; a row
 * with nothing to attend gives zeros. */
static void ref_attention(const double *q, const double *k, const double *v, int B, int Hq, int Hkv, int Sq, int Skv, int D, const int *len,
                          bool causal, double scale, double *y) {
  int G = Hq / Hkv;
  double *sc = malloc(sizeof(double) * (size_t)Skv);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++) {
      const double *kk = k + (size_t)((b * Hkv + h / G) * Skv * D), *vv = v + (size_t)((b * Hkv + h / G) * Skv * D);
      for (int i = 0; i < Sq; i++) {
        const double *qq = q + (size_t)(((b * Hq + h) * Sq + i) * D);
        double m = -INFINITY;
        for (int j = 0; j < Skv; j++) {
          bool masked = j >= len[b] || (causal && j > i + len[b] - Sq);
          double s = 0;
          for (int e = 0; e < D; e++) s += qq[e] * kk[j * D + e];
          sc[j] = masked ? -INFINITY : s * scale;
          m = fmax(m, sc[j]);
        }
        double z = 0;
        for (int j = 0; j < Skv; j++) z += m == -INFINITY ? 0 : exp(sc[j] - m);
        double *yy = y + (size_t)(((b * Hq + h) * Sq + i) * D);
        for (int e = 0; e < D; e++) {
          double o = 0;
          for (int j = 0; j < Skv; j++) o += m == -INFINITY ? 0 : exp(sc[j] - m) / z * vv[j * D + e];
          yy[e] = o;
        }
      }
    }
  free(sc);
}

/* attention's additive mask, broadcast from [B|1, Hq|1, Sq|1, Skv|1]:
 * against scores + mask written out (-inf and large negative entries, a
 * row masked whole gives zeros), with and without causal and a length. */
START_TEST(attention_mask) {
  const int B = 2, Hq = 4, Hkv = 2, Sq = 3, Skv = 6, D = 5, G = Hq / Hkv;
  static const int shapes[4][4] = {{2, 1, 1, 6}, {1, 4, 3, 6}, {2, 4, 3, 1}, {1, 1, 3, 6}};
  size_t nq = (size_t)(B * Hq * Sq * D), nk = (size_t)(B * Hkv * Skv * D);
  double q[120], k[120], v[120], m[144], want[120];
  for (int si = 0; si < 4; si++)
    for (size_t kd = 0; kd < 4; kd++) {
      rill_dtype_t d = FLOATS[kd];
      const int *ms = shapes[si];
      size_t nm = (size_t)(ms[0] * ms[1] * ms[2] * ms[3]);
      fill(q, nq, -1, 1);
      fill(k, nk, -1, 1);
      fill(v, nk, -1, 1);
      fill(m, nm, -2, 2);
      for (size_t i = 0; i < nm; i++)
        if (urand() < 0.3) m[i] = i % 2 ? -INFINITY : -1e4;
      if (si == 1) for (int j = 0; j < Skv; j++) m[j] = -INFINITY; /* row (0, 0, 0) masked whole */
      quantise(q, nq, d);
      quantise(k, nk, d);
      quantise(v, nk, d);
      quantise(m, nm, d);
      bool causal = si == 3;
      int L = si == 2 ? Skv - 1 : Skv;
      for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++)
          for (int i = 0; i < Sq; i++) {
            double sc[6], mx = -INFINITY, z = 0;
            for (int j = 0; j < Skv; j++) {
              double s = 0;
              for (int e = 0; e < D; e++) s += q[((b * Hq + h) * Sq + i) * D + e] * k[((b * Hkv + h / G) * Skv + j) * D + e];
              int mi = (((ms[0] > 1 ? b : 0) * ms[1] + (ms[1] > 1 ? h : 0)) * ms[2] + (ms[2] > 1 ? i : 0)) * ms[3] + (ms[3] > 1 ? j : 0);
              sc[j] = j >= L || (causal && j > i + L - Sq) ? -INFINITY : s * 0.4 + m[mi];
              mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < Skv; j++) z += mx == -INFINITY ? 0 : exp(sc[j] - mx);
            for (int e = 0; e < D; e++) {
              double o = 0;
              for (int j = 0; j < Skv; j++) o += mx == -INFINITY ? 0 : exp(sc[j] - mx) / z * v[((b * Hkv + h / G) * Skv + j) * D + e];
              want[((b * Hq + h) * Sq + i) * D + e] = o;
            }
          }
      double lv = L;
      op_io_t in[5] = {tensor_f(T(d, 4, B, Hq, Sq, D), q), tensor_f(T(d, 4, B, Hkv, Skv, D), k), tensor_f(T(d, 4, B, Hkv, Skv, D), v),
                       tensor_f(T(RILL_I32, 0), &lv), tensor_f(T(d, 4, ms[0], ms[1], ms[2], ms[3]), m)},
              y;
      bool with_len = si == 2;
      if (!with_len) {
        op_io_t t = in[3];
        in[3] = in[4];
        in[4] = t;
      }
      isa_attr_t at[2] = {attr_float("scale", 0.4), attr_bool("causal", causal)};
      uint32_t n;
      rill_status_t st = run_op("attention", in, with_len ? 5 : 4, at, 2, &y, 1, &n);
      ck_assert_msg(!st, "%s", rill_status_message(st));
      char what[96];
      snprintf(what, sizeof what, "attention mask %d %s", si, rill_dtype_name(d));
      expect_close(&y, want, nq, 2 * tol(d), what);
      if (si == 1) for (int e = 0; e < D; e++) ck_assert(at_f(&y, (size_t)e) == 0);
      op_io_free(&y, 1);
      op_io_free(in, 5);
    }
}
END_TEST

START_TEST(attention_values) {
  /* GQA ratios 1, 2, 4; decode (Sq = 1) and prompts (Sq > 1), causal and
   * not; no length, one length, a length per sequence (below capacity) */
  typedef struct { int B, Hq, Hkv, Sq, Skv, D; bool causal; int lmode; } acase_t;
  static const acase_t cases[] = {
      {1, 2, 2, 1, 7, 8, false, 0},  {2, 4, 2, 1, 9, 8, true, 2},  {2, 8, 2, 1, 16, 16, false, 1}, {1, 4, 1, 5, 5, 8, true, 0},
      {2, 4, 2, 4, 12, 8, true, 2},  {2, 4, 4, 3, 10, 4, false, 2}, {1, 8, 2, 6, 6, 8, false, 0},  {2, 2, 1, 3, 11, 8, true, 1},
      {1, 4, 1, 8, 8, 16, true, 0},  {2, 4, 2, 5, 6, 8, true, 2},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const acase_t *c = &cases[ci];
    size_t nq = (size_t)(c->B * c->Hq * c->Sq * c->D), nk = (size_t)(c->B * c->Hkv * c->Skv * c->D);
    double *q = malloc(nq * sizeof(double)), *k = malloc(nk * sizeof(double)), *v = malloc(nk * sizeof(double)), *want = malloc(nq * sizeof(double));
    /* lengths: the capacity, or below it (run-time len < Skv), at least Sq for causal prompts */
    int len[2] = {c->Skv, c->Skv};
    double lv[2];
    if (c->lmode == 1) len[0] = len[1] = c->Skv - 2;
    if (c->lmode == 2) len[0] = c->Skv - 3, len[1] = c->Skv;
    if (len[0] < c->Sq) len[0] = c->Sq;
    lv[0] = len[0];
    lv[1] = len[1];
    for (size_t kd = 0; kd < 4; kd++) {
      rill_dtype_t d = FLOATS[kd];
      fill(q, nq, -1, 1);
      fill(k, nk, -1, 1);
      fill(v, nk, -1, 1);
      quantise(q, nq, d);
      quantise(k, nk, d);
      quantise(v, nk, d);
      double scale = ci % 3 == 2 ? 0.3 : 1 / sqrt(c->D);
      ref_attention(q, k, v, c->B, c->Hq, c->Hkv, c->Sq, c->Skv, c->D, len, c->causal, scale, want);
      op_io_t in[4] = {tensor_f(T(d, 4, c->B, c->Hq, c->Sq, c->D), q), tensor_f(T(d, 4, c->B, c->Hkv, c->Skv, c->D), k),
                       tensor_f(T(d, 4, c->B, c->Hkv, c->Skv, c->D), v),
                       c->lmode == 2 ? tensor_f(T(kd & 1 ? RILL_I32 : RILL_I64, 1, c->B), lv) : tensor_f(T(kd & 1 ? RILL_I64 : RILL_I32, 0), lv)},
              y;
      isa_attr_t at[2] = {attr_bool("causal", c->causal), attr_float("scale", 0.3)};
      uint32_t n;
      rill_status_t st = run_op("attention", in, c->lmode ? 4 : 3, at, ci % 3 == 2 ? 2 : 1, &y, 1, &n);
      ck_assert_msg(!st, "%s", rill_status_message(st));
      char what[96];
      snprintf(what, sizeof what, "attention case %zu %s", ci, rill_dtype_name(d));
      expect_close(&y, want, nq, 2 * tol(d), what);
      op_io_free(&y, 1);
      op_io_free(in, 4);
    }
    free(q);
    free(k);
    free(v);
    free(want);
  }
  /* a causal prompt longer than the length: its first rows see nothing and are zeros */
  double q[8], kv[16], l = 1;
  fill(q, 8, -1, 1);
  fill(kv, 16, -1, 1);
  op_io_t in[4] = {tensor_f(T(RILL_F32, 4, 1, 1, 4, 2), q), tensor_f(T(RILL_F32, 4, 1, 1, 8, 2), kv), tensor_f(T(RILL_F32, 4, 1, 1, 8, 2), kv),
                   tensor_f(T(RILL_I64, 0), &l)},
          y;
  isa_attr_t causal = attr_bool("causal", true);
  uint32_t n;
  ck_assert(!run_op("attention", in, 4, &causal, 1, &y, 1, &n));
  for (int i = 0; i < 6; i++) ck_assert(at_f(&y, (size_t)i) == 0);
  ck_assert(fabs(at_f(&y, 6) - (float)kv[0]) < 1e-6 && fabs(at_f(&y, 7) - (float)kv[1]) < 1e-6);
  op_io_free(&y, 1);
  /* a length past the cache is a run-time error */
  double big = 9;
  op_io_t lb = tensor_f(T(RILL_I64, 0), &big);
  op_io_t in2[4] = {in[0], in[1], in[2], lb};
  rill_status_t st = run_op("attention", in2, 4, NULL, 0, &y, 1, &n);
  ck_assert(st && rill_status_code(st) == RILL_RUNTIME_ERROR && strstr(rill_status_message(st), "length 9 of sequence 0 is outside 0..8"));
  rill_status_free(st);
  op_io_free(&y, 1);
  /* bad input */
  op_io_t h3[3] = {tensor_f(T(RILL_F32, 4, 1, 3, 4, 2), NULL), in[1], in[2]};
  op_io_t h4[3] = {in[0], tensor_f(T(RILL_F32, 4, 1, 1, 8, 4), NULL), tensor_f(T(RILL_F32, 4, 1, 1, 8, 4), NULL)};
  h3[1] = tensor_f(T(RILL_F32, 4, 1, 2, 8, 2), NULL);
  h3[2] = tensor_f(T(RILL_F32, 4, 1, 2, 8, 2), NULL);
  expect_error("attention", h3, 3, NULL, 0, "q's heads (3) must be a multiple of k's (2)");
  expect_error("attention", h4, 3, NULL, 0, "k: expected the batch and head size of q");
  op_io_t mix[3] = {in[0], in[1], h4[1]};
  expect_error("attention", mix, 3, NULL, 0, "k and v: expected one type");
  op_io_t bl = tensor_f(T(RILL_I64, 1, 3), NULL), bf = tensor_f(T(RILL_F32, 0), NULL);
  op_io_t l1[4] = {in[0], in[1], in[2], bl}, l2[4] = {in[0], in[1], in[2], bf};
  expect_error("attention", l1, 4, NULL, 0, "len: expected an i32 or i64 tensor of shape [] or [1]");
  expect_error("attention", l2, 4, NULL, 0, "mask: expected f32 [B|1, Hq|1, Sq|1, Skv|1]"); /* a float fourth operand is a mask */
  op_io_t r3[3] = {tensor_f(T(RILL_F32, 3, 1, 4, 2), NULL), in[1], in[2]};
  expect_error("attention", r3, 3, NULL, 0, "expected rank 4");
  op_io_free(in, 4);
  op_io_free(&lb, 1);
  op_io_free(h3, 3);
  op_io_free(&h4[1], 2);
  op_io_free(&bl, 1);
  op_io_free(&bf, 1);
  op_io_free(r3, 1);
}
END_TEST

/* Looking up token embeddings is gather along axis 0 (table [V, H], ids 1-D), at decode's shapes. */
START_TEST(embedding_lookup) {
  enum { V = 50, H = 6 };
  double tab[V * H];
  fill(tab, V * H, -1, 1);
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = FLOATS[k];
    double ids[4] = {49, 0, 7, 7};
    for (int n_ids = 1; n_ids <= 4; n_ids += 3) {
      op_io_t in[2] = {tensor_f(T(d, 2, V, H), tab), tensor_f(T(k & 1 ? RILL_I32 : RILL_I64, 1, n_ids), ids)}, y;
      uint32_t n;
      ck_assert(!run_op("gather", in, 2, NULL, 0, &y, 1, &n));
      ck_assert(y.type.rank == 2 && y.type.dims[0] == n_ids && y.type.dims[1] == H);
      for (int t = 0; t < n_ids; t++)
        for (int j = 0; j < H; j++) ck_assert(at_f(&y, (size_t)(t * H + j)) == at_f(&in[0], (size_t)(ids[t] * H + j)));
      op_io_free(&y, 1);
      op_io_free(in, 2);
    }
  }
}
END_TEST

static int64_t sample1(const double *logits, int B, int V, rill_dtype_t d, double temp, int64_t top_k, double top_p, int64_t seed, int64_t counter,
                       int64_t *out) {
  op_io_t in[2] = {tensor_f(T(d, 2, B, V), logits), tensor_f(T(RILL_I64, 0), (double[]){(double)counter})}, y;
  /* attributes over locals: many calls would fill the helpers' pools */
  isa_attr_t at[4] = {{"temperature", ISA_ATTR_FLOAT, 1, NULL, &temp, NULL}, {"top_k", ISA_ATTR_INT, 1, &top_k, NULL, NULL},
                      {"top_p", ISA_ATTR_FLOAT, 1, NULL, &top_p, NULL}, {"seed", ISA_ATTR_INT, 1, &seed, NULL, NULL}};
  uint32_t n;
  rill_status_t st = run_op("sample", in, 2, at, 4, &y, 1, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert(y.type.dtype == RILL_I64 && y.type.rank == 1 && y.type.dims[0] == B);
  for (int b = 0; b < B; b++) out[b] = ((int64_t *)y.data)[b];
  op_io_free(&y, 1);
  op_io_free(in, 2);
  return out[0];
}

START_TEST(sample_greedy_and_seeds) {
  enum { B = 3, V = 1000 };
  double lg[B * V];
  int64_t t1[B], t2[B];
  for (int round = 0; round < 20; round++) {
    fill(lg, B * V, -5, 5);
    if (round == 1) lg[17] = lg[600] = 9; /* a tie: the lower index wins */
    for (size_t k = 0; k < 4; k++) {
      rill_dtype_t d = FLOATS[k];
      double q[B * V];
      memcpy(q, lg, sizeof q);
      quantise(q, B * V, d);
      int64_t arg[B];
      for (int b = 0; b < B; b++) {
        arg[b] = 0;
        for (int i = 1; i < V; i++)
          if (q[b * V + i] > q[b * V + arg[b]]) arg[b] = i;
      }
      if (round == 1) ck_assert(arg[0] == 17);
      /* temperature 0 is argmax; top_k=1 is too, whatever the seed */
      sample1(q, B, V, d, 0, 0, 1, round, round, t1);
      for (int b = 0; b < B; b++) ck_assert_int_eq(t1[b], arg[b]);
      sample1(q, B, V, d, 0.8, 1, 1, round, 5 * round, t1);
      for (int b = 0; b < B; b++) ck_assert_int_eq(t1[b], arg[b]);
      /* the same seed and counter give the same tokens */
      sample1(q, B, V, d, 1.0, 50, 0.9, 1234, round, t1);
      sample1(q, B, V, d, 1.0, 50, 0.9, 1234, round, t2);
      for (int b = 0; b < B; b++) ck_assert_int_eq(t1[b], t2[b]);
    }
  }
  /* counters and seeds change the draws: of 200 counters, many tokens */
  fill(lg, V, -1, 1);
  int seen[V] = {0}, distinct = 0;
  for (int c = 0; c < 200; c++) {
    int64_t t[1];
    sample1(lg, 1, V, RILL_F32, 1, 0, 1, 99, c, t);
    ck_assert(t[0] >= 0 && t[0] < V);
    distinct += !seen[t[0]]++;
  }
  ck_assert_int_gt(distinct, 100);
  /* no counter operand: counter 0 */
  op_io_t x = tensor_f(T(RILL_F32, 2, 1, V), lg), y;
  isa_attr_t sd = attr_int("seed", 99);
  uint32_t n;
  ck_assert(!run_op("sample", &x, 1, &sd, 1, &y, 1, &n));
  int64_t t0[1];
  sample1(lg, 1, V, RILL_F32, 1, 0, 1, 99, 0, t0);
  ck_assert_int_eq(((int64_t *)y.data)[0], t0[0]);
  op_io_free(&y, 1);
  /* bad input */
  isa_attr_t bad[] = {attr_float("temperature", -1), attr_float("top_p", 0), attr_float("top_p", 1.5), attr_int("top_k", -2), attr_float("temperature", 1e-50)};
  const char *why[] = {"temperature must be", "top_p must be in (0, 1]", "top_p must be in (0, 1]", "top_k must be at least 0", "is 0 in f32"};
  for (int i = 0; i < 5; i++) expect_error("sample", &x, 1, &bad[i], 1, why[i]);
  op_io_t v1 = tensor_f(T(RILL_F32, 1, V), NULL), ci[2] = {x, tensor_f(T(RILL_F32, 0), NULL)}, cr[2] = {x, tensor_f(T(RILL_I64, 1, 1), NULL)};
  expect_error("sample", &v1, 1, NULL, 0, "logits: expected rank 2 [B,V]");
  expect_error("sample", ci, 2, NULL, 0, "counter: expected an i32[] or i64[] scalar");
  expect_error("sample", cr, 2, NULL, 0, "counter: expected");
  op_io_free(&x, 1);
  op_io_free(&v1, 1);
  op_io_free(&ci[1], 1);
  op_io_free(&cr[1], 1);
}
END_TEST

/* Frequencies over many counters approach the distribution the attributes define. */
static void freqs(const double *lg, int V, double temp, int64_t top_k, double top_p, int draws, double *f) {
  for (int i = 0; i < V; i++) f[i] = 0;
  for (int c = 0; c < draws; c++) {
    int64_t t[1];
    sample1(lg, 1, V, RILL_F32, temp, top_k, top_p, 2026, c, t);
    f[t[0]] += 1.0 / draws;
  }
}

START_TEST(sample_distribution) {
  enum { V = 6, N = 20000 };
  /* probabilities 0.4, 0.25, 0.15, 0.1, 0.06, 0.04 */
  const double p[V] = {0.4, 0.25, 0.15, 0.1, 0.06, 0.04};
  double lg[V], f[V], want[V];
  for (int i = 0; i < V; i++) lg[i] = log(p[i]) + 3;
  /* plain: the softmax; tolerance 4 standard deviations */
  freqs(lg, V, 1, 0, 1, N, f);
  for (int i = 0; i < V; i++) ck_assert_msg(fabs(f[i] - p[i]) < 4 * sqrt(p[i] / N), "token %d: %g vs %g", i, f[i], p[i]);
  /* temperature 0.5: p^2 normalised */
  double z = 0;
  for (int i = 0; i < V; i++) z += p[i] * p[i];
  freqs(lg, V, 0.5, 0, 1, N, f);
  for (int i = 0; i < V; i++) ck_assert_msg(fabs(f[i] - p[i] * p[i] / z) < 4 * sqrt(p[i] * p[i] / z / N) + 1e-9, "T=0.5 token %d", i);
  /* top_k=3: the three largest renormalised */
  freqs(lg, V, 1, 3, 1, N, f);
  for (int i = 0; i < V; i++) {
    want[i] = i < 3 ? p[i] / 0.8 : 0;
    ck_assert_msg(fabs(f[i] - want[i]) < 4 * sqrt(want[i] / N) + 1e-9, "top_k token %d: %g vs %g", i, f[i], want[i]);
  }
  /* top_p=0.7: the smallest set of largest tokens with mass >= 0.7: 0.4 + 0.25 + 0.15 */
  freqs(lg, V, 1, 0, 0.7, N, f);
  for (int i = 0; i < V; i++) ck_assert_msg(fabs(f[i] - want[i]) < 4 * sqrt(want[i] / N) + 1e-9, "top_p token %d: %g vs %g", i, f[i], want[i]);
  /* top_p=0.65 after top_k=5: 0.65 of the five's mass (0.96) is 0.624, which the two largest (0.65) reach */
  freqs(lg, V, 1, 5, 0.65, N, f);
  for (int i = 0; i < V; i++) {
    want[i] = i < 2 ? p[i] / 0.65 : 0;
    ck_assert_msg(fabs(f[i] - want[i]) < 4 * sqrt(want[i] / N) + 1e-9, "top_k+top_p token %d: %g vs %g", i, f[i], want[i]);
  }
  /* top-k keeps k tokens: of those tied at the boundary, the first in index order */
  double tie[V] = {1, 2, 1, 1, 0, 2};
  freqs(tie, V, 1, 3, 1, 4000, f);
  ck_assert(f[0] > 0.05 && f[1] > 0.2 && f[5] > 0.2 && f[2] == 0 && f[3] == 0 && f[4] == 0);
  /* ties at the top-p boundary are all kept: 0.5 of the mass is tokens 1 and 5 together */
  freqs(tie, V, 1, 0, 0.3, 4000, f);
  ck_assert(f[1] > 0.4 && f[5] > 0.4 && f[0] == 0);
  /* -inf logits are never drawn; +inf gives the greedy choice */
  double inf[V] = {-INFINITY, 0, -INFINITY, 0, -INFINITY, -INFINITY};
  freqs(inf, V, 1, 0, 1, 2000, f);
  ck_assert(f[0] == 0 && f[2] == 0 && f[1] > 0.4 && f[3] > 0.4);
  inf[4] = INFINITY;
  freqs(inf, V, 1, 0, 1, 100, f);
  ck_assert(f[4] > 0.999);
}
END_TEST

int main(void) {
  Suite *s = suite_create("llm");
  add_test_case(s, philox_and_expf, 60);
  add_test_case(s, rms_norm_values, 60);
  add_test_case(s, gated_units, 60);
  add_test_case(s, gated_units_fuse, 60);
  add_test_case(s, fused_linear_values, 60);
  add_test_case(s, rotary_update_values, 60);
  add_test_case(s, rotary_values, 60);
  add_test_case(s, attention_values, 120);
  add_test_case(s, attention_mask, 60);
  add_test_case(s, embedding_lookup, 60);
  add_test_case(s, sample_greedy_and_seeds, 120);
  add_test_case(s, sample_distribution, 300);
  return run_suite(s);
}
