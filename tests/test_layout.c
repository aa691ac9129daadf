/* test_layout.c: the layout pass, batch norms as affines, norms in fusion.
 *
 * Property: random programs mixing convolutions that run channels-last
 * (f16, constant weights), ops that take either layout (elementwise,
 * pools, softmax, casts) and ops that take NCHW only (layer_norm over W,
 * the return) assemble at -O1 with exactly as many transposes as the
 * cheapest assignment found by trying every one (at most 14 ops that can
 * choose), and compute on the cpu device what -O0 computes. Also: a
 * ConvNeXt-like block whose explicit transposes become views, a
 * DenseNet-like pre-activation (concat, batch_norm, relu, convolution)
 * whose batch norm is one fused kernel with its relu, and elementwise
 * producers and consumers fused into layer_norm and softmax. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng % n);
}
static float frand(void) { return (float)rnd(20001) / 10000.0f - 1.0f; }

static int count(const char *hay, const char *needle) {
  int k = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) k++;
  return k;
}

/* The invokes of op `name` in a disassembly (its op entries are listed once: `op $N = name(`). */
static int invokes_of(const char *text, const char *name) {
  char pat[64];
  snprintf(pat, sizeof pat, " = %s(", name);
  int k = 0;
  for (const char *p = strstr(text, "\nop $"); p; p = strstr(p + 1, "\nop $")) {
    int idx, len = 0;
    if (sscanf(p, "\nop $%d%n", &idx, &len) != 1 || strncmp(p + len, pat, strlen(pat))) continue;
    char inv[32];
    snprintf(inv, sizeof inv, "invoke $%d,", idx);
    k += count(text, inv);
  }
  return k;
}

typedef struct buf {
  char s[32768];
  size_t n;
} buf_t;

static void put(buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
  va_end(ap);
  ck_assert(k >= 0 && (size_t)k < sizeof b->s - b->n);
  b->n += (size_t)k;
}

/* A constant's literal of `n` random values in [-scale, scale], nested as dims (rank r). */
static void put_lit(buf_t *b, const int64_t *dims, int r, float scale) {
  if (!r) {
    put(b, "%g", (double)(frand() * scale));
    return;
  }
  put(b, "[");
  for (int64_t i = 0; i < dims[0]; i++) {
    if (i) put(b, ", ");
    put_lit(b, dims + 1, r - 1, scale);
  }
  put(b, "]");
}

/* `n` values away from 0 (0.3 to 0.6, either sign; a scale of `scale`), as a flat literal. */
static void put_away(buf_t *b, int n, float scale) {
  put(b, "[");
  for (int k = 0; k < n; k++) put(b, "%s%g", k ? ", " : "", (double)(scale * (0.3f + 0.3f * (float)rnd(11) / 10.0f) * (rnd(2) ? 1.0f : -1.0f)));
  put(b, "]");
}

/* Runs src at -O0 and -O1 (nin f32 inputs of n elements, random; nout
 * f32 results of m elements) and checks -O1's within rel of -O0's. */
static void same_results(const char *src, int nin, const rill_type_t *types, size_t n, int nout, size_t m, float rel, const char *what) {
  float *in[4], *res[2][4];
  size_t bytes[4];
  ck_assert(nin <= 4 && nout <= 4);
  for (int i = 0; i < nin; i++) {
    in[i] = malloc(n * sizeof(float));
    for (size_t j = 0; j < n; j++) in[i][j] = frand();
  }
  for (int k = 0; k < nout; k++) {
    bytes[k] = m * sizeof(float);
    for (int o = 0; o < 2; o++) res[o][k] = malloc(m * sizeof(float));
  }
  for (int opt1 = 0; opt1 < 2; opt1++) run_f32(src, opt1, nin, types, (const float *const *)in, nout, res[opt1], bytes);
  for (int k = 0; k < nout; k++)
    for (size_t j = 0; j < m; j++)
      if (!(fabsf(res[1][k][j] - res[0][k][j]) <= rel * (1 + fabsf(res[0][k][j])))) {
        fprintf(stderr, "%s\n", src);
        ck_abort_msg("%s: result %d [%zu] %g at -O1, %g at -O0 (the program above)", what, k, j, (double)res[1][k][j], (double)res[0][k][j]);
      }
  for (int i = 0; i < nin; i++) free(in[i]);
  for (int k = 0; k < nout; k++)
    for (int o = 0; o < 2; o++) free(res[o][k]);
}

/* ---- random programs against the brute-force minimum ---- */
enum { NCHW_ONLY, NHWC_ONLY, EITHER };
#define MAXV 48

typedef struct prog {
  buf_t b;
  int nvals, nops;
  int producer[MAXV];           /* value -> op, or -1 (a parameter) */
  int kind[MAXV], nargs[MAXV], args[MAXV][2];
  int uses[MAXV];
  bool small[MAXV];             /* a reduction's [2,3,1,1]: no operand of the random ops */
  int either[MAXV], neither;    /* the ops that choose, by index */
  int ret[MAXV], nret;
} prog_t;

static int new_val(prog_t *p, int op) {
  p->producer[p->nvals] = op;
  p->uses[p->nvals] = 0;
  return p->nvals++;
}

static int add_op(prog_t *p, int kind, int a, int b) {
  int o = p->nops++;
  p->kind[o] = kind;
  p->nargs[o] = b >= 0 ? 2 : 1;
  p->args[o][0] = a;
  p->args[o][1] = b;
  p->uses[a]++;
  if (b >= 0) p->uses[b]++;
  if (kind == EITHER) p->either[p->neither++] = o;
  return new_val(p, o);
}

/* Values are f16[2,3,4,5] (f32 for the parameters and the results). */
static void gen(prog_t *p) {
  memset(p, 0, sizeof *p);
  p->b.n = 0;
  static const int64_t wd[4] = {3, 3, 3, 3}, sd[4] = {1, 3, 1, 1};
  for (int k = 0; k < 2; k++) {
    put(&p->b, "const %%w%d : f16[3,3,3,3] = ", k);
    put_lit(&p->b, wd, 4, 0.4f);
    put(&p->b, "\n");
  }
  put(&p->b, "const %%s : f16[1,3,1,1] = ");
  put_lit(&p->b, sd, 4, 2.0f);
  put(&p->b, "\nconst %%perm : i32[3] = [2, 0, 1]\n");
  int np = 1 + (int)rnd(2);
  put(&p->b, "func @main(");
  for (int k = 0; k < np; k++) put(&p->b, "%s%%v%d: f32[2,3,4,5]", k ? ", " : "", new_val(p, -1));
  put(&p->b, ") -> (");
  char body[16384];
  buf_t *b = &p->b;
  size_t head = b->n;
  (void)head;
  buf_t bb = {.n = 0};
  int first = p->nvals;
  for (int k = 0; k < np; k++) put(&bb, "  %%v%d = cast(%%v%d) {dtype=f16}\n", add_op(p, EITHER, k, -1), k);
  int nops = 3 + (int)rnd(8);
  for (int i = 0; i < nops && p->nvals < MAXV - 8; i++) {
    int a, c;
    do a = first + (int)rnd((uint32_t)(p->nvals - first)), c = first + (int)rnd((uint32_t)(p->nvals - first));
    while (p->small[a] || p->small[c]);
    int r = (int)rnd(14);
    if (r < 3) {
      int v = add_op(p, NHWC_ONLY, a, -1);
      put(&bb, "  %%v%d = conv2d(%%v%d, %%w%d) {padding=[1,1]}\n", v, a, (int)rnd(2));
    } else if (r == 3) {
      put(&bb, "  %%v%d = relu(%%v%d)\n", add_op(p, EITHER, a, -1), a);
    } else if (r == 4) {
      put(&bb, "  %%v%d = tanh(%%v%d)\n", add_op(p, EITHER, a, -1), a);
    } else if (r == 5) {
      int v = add_op(p, EITHER, a, c);
      put(&bb, "  %%v%d = add(%%v%d, %%v%d)\n", v, a, c);
    } else if (r == 6) {
      put(&bb, "  %%v%d = mul(%%v%d, %%s)\n", add_op(p, EITHER, a, -1), a);
    } else if (r == 7) {
      put(&bb, "  %%v%d = max_pool2d(%%v%d) {kernel=[3,3], stride=[1,1], padding=[1,1]}\n", add_op(p, EITHER, a, -1), a);
    } else if (r == 8) {
      put(&bb, "  %%v%d = softmax(%%v%d) {axis=1}\n", add_op(p, EITHER, a, -1), a);
    } else if (r == 9) {
      put(&bb, "  %%v%d = max(%%v%d) {axes=[2,3], keepdims=true}\n  %%v%d = add(%%v%d, %%v%d)\n", p->nvals, a, p->nvals + 1, a,
          p->nvals);
      int m = add_op(p, EITHER, a, -1);
      p->small[m] = true;
      add_op(p, EITHER, a, m);
    } else if (r == 10) {
      put(&bb, "  %%v%d = layer_norm(%%v%d) {axis=-1}\n", add_op(p, NCHW_ONLY, a, -1), a);
    } else if (r == 11) { /* the channels permuted */
      put(&bb, "  %%v%d = gather(%%v%d, %%perm) {axis=1}\n", add_op(p, EITHER, a, -1), a);
    } else if (r == 12) { /* a roll along W: two slices and a concat */
      int s0 = add_op(p, EITHER, a, -1), s1 = add_op(p, EITHER, a, -1);
      p->small[s0] = p->small[s1] = true;
      put(&bb, "  %%v%d = slice(%%v%d) {axes=[3], starts=[0], ends=[2]}\n  %%v%d = slice(%%v%d) {axes=[-1], starts=[2], ends=[5]}\n", s0, a, s1, a);
      put(&bb, "  %%v%d = concat(%%v%d, %%v%d) {axis=3}\n", add_op(p, EITHER, s1, s0), s1, s0);
    } else { /* the same by a split of the channels, its two parts swapped */
      int s0 = add_op(p, EITHER, a, -1), s1 = new_val(p, p->producer[s0]);
      p->small[s0] = p->small[s1] = true;
      put(&bb, "  %%v%d, %%v%d = split(%%v%d) {axis=1, sizes=[1, 2]}\n", s0, s1, a);
      put(&bb, "  %%v%d = concat(%%v%d, %%v%d) {axis=1}\n", add_op(p, EITHER, s1, s0), s1, s0);
    }
  }
  /* every value not used yet is a result: no op is dead */
  int last = p->nvals;
  for (int v = first; v < last; v++) {
    if (p->uses[v]) continue;
    int o = add_op(p, EITHER, v, -1);
    put(&bb, "  %%v%d = cast(%%v%d) {dtype=f32}\n", o, v);
    p->ret[p->nret++] = o;
  }
  (void)body;
  for (int k = 0; k < p->nret; k++) put(b, "%sf32[2,3,4,5]", k ? ", " : "");
  put(b, ") {\n%s  return ", bb.s);
  for (int k = 0; k < p->nret; k++) put(b, "%s%%v%d", k ? ", " : "", p->ret[k]);
  put(b, "\n}\n");
}

/* The transposes an assignment (bit k: the k-th choosing op's NHWC) leaves:
 * one per value whose producer and readers do not all agree. */
static int cost(const prog_t *p, unsigned bits) {
  int lab[MAXV];
  for (int o = 0; o < p->nops; o++) lab[o] = p->kind[o] == NHWC_ONLY;
  for (int k = 0; k < p->neither; k++) lab[p->either[k]] = (bits >> k) & 1;
  int total = 0;
  for (int v = 0; v < p->nvals; v++) {
    int made = p->producer[v] < 0 ? 0 : lab[p->producer[v]], differ = 0;
    for (int o = 0; o < p->nops; o++)
      for (int j = 0; j < p->nargs[o]; j++) differ |= p->args[o][j] == v && lab[o] != made;
    for (int k = 0; k < p->nret; k++) differ |= p->ret[k] == v && made != 0;
    total += differ;
  }
  return total;
}

START_TEST(random_programs_fewest_transposes) {
  int tried = 0, with_conv = 0, some = 0;
  for (int t = 0; tried < 160 && t < 2000; t++) {
    prog_t p;
    gen(&p);
    if (p.nret > 4 || p.neither > 14) continue; /* brute force over at most 2^14 */
    tried++;
    int best = 1 << 30;
    for (unsigned bits = 0; bits < (1u << p.neither); bits++) {
      int c = cost(&p, bits);
      best = c < best ? c : best;
    }
    bool conv = strstr(p.b.s, "conv2d(") != NULL;
    char *text = dis_text_opt("t.vmasm", p.b.s, false);
    int got = invokes_of(text, "transpose");
    /* without a convolution the pass leaves the program as written: no transposes */
    if (got != (conv ? best : 0)) fprintf(stderr, "%s\n%s\n", p.b.s, text);
    ck_assert_msg(got == (conv ? best : 0), "%d transposes, the minimum is %d (the program and its -O1 text above)", got, best);
    free(text);
    with_conv += conv;
    some += got > 0;
    rill_type_t types[2] = {{RILL_F32, 4, {2, 3, 4, 5}}, {RILL_F32, 4, {2, 3, 4, 5}}};
    int np = strstr(p.b.s, "%v1: f32") ? 2 : 1;
    same_results(p.b.s, np, types, 120, p.nret, 120, 3e-2f, "random program");
  }
  ck_assert_int_ge(tried, 100);
  ck_assert_int_ge(with_conv, tried / 2);
  ck_assert_int_ge(some, 10);
  printf("layout: %d random programs, %d with convolutions, %d with transposes left\n", tried, with_conv, some);
}
END_TEST

/* Text with $T replaced by dtype name t. */
static void subst(buf_t *b, const char *src, const char *t) {
  b->n = 0;
  for (const char *q = src; *q; q++) {
    if (q[0] == '$' && q[1] == 'T') {
      put(b, "%s", t);
      q++;
    } else {
      put(b, "%c", *q);
    }
  }
}

/* ConvNeXt's block as exporters write it: a depthwise convolution, a
 * permute to channels-last, layer_norm, two linears with a GELU, a permute
 * back, the layer scale (a [C,1,1] constant, the mul's first operand, as
 * the exporter writes `layer_scale * x`), an add of a rank-1 operand
 * (a parameter, broadcast along W) and the residual add. In f16 the convolution runs channels-last and
 * both permutes become views of it: two blocks take two transposes (the
 * input in, the result out) where -O0 has four explicit ones. */
START_TEST(convnext_block_permutes_are_views) {
  buf_t b = {.n = 0};
  static const int64_t dw[4] = {4, 1, 3, 3}, w1[2] = {8, 4}, w2[2] = {4, 8}, v4[1] = {4}, v8[1] = {8};
  const char *names[6] = {"dw", "g", "be", "W1", "b1", "W2"};
  const int64_t *dims[6] = {dw, v4, v4, w1, v8, w2};
  const int ranks[6] = {4, 1, 1, 2, 1, 2};
  for (int k = 0; k < 6; k++) {
    put(&b, "const %%%s : f16[", names[k]);
    for (int d = 0; d < ranks[k]; d++) put(&b, "%s%lld", d ? "," : "", (long long)dims[k][d]);
    put(&b, "] = ");
    if (k == 5) put_away(&b, 32, 0.5f); /* W2 and the layer scale away from 0: their products stay f16 normals, and fold */
    else put_lit(&b, dims[k], ranks[k], 0.5f);
    put(&b, "\n");
  }
  put(&b, "const %%b2 : f16[4] = ");
  put_lit(&b, v4, 1, 0.5f);
  put(&b, "\nconst %%ls : f16[4,1,1] = ");
  put_away(&b, 4, 0.5f);
  put(&b, "\nfunc @main(%%x: f32[2,4,5,6], %%c: f32[6]) -> f32[2,4,5,6] {\n  %%h0 = cast(%%x) {dtype=f16}\n  %%c16 = cast(%%c) {dtype=f16}\n");
  for (int k = 0; k < 2; k++)
    put(&b, "  %%a%d = conv2d(%%h%d, %%dw) {padding=[1,1], groups=4}\n  %%p%d = transpose(%%a%d) {perm=[0,2,3,1]}\n"
            "  %%n%d = layer_norm(%%p%d, %%g, %%be) {axis=-1}\n  %%l%d = linear(%%n%d, %%W1, %%b1)\n  %%e%d = gelu(%%l%d)\n"
            "  %%m%d = linear(%%e%d, %%W2, %%b2)\n  %%q%d = transpose(%%m%d) {perm=[0,3,1,2]}\n"
            "  %%s%d = mul(%%ls, %%q%d)\n  %%t%d = add(%%s%d, %%c16)\n  %%h%d = add(%%t%d, %%h%d)\n",
        k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k, k + 1, k, k);
  put(&b, "  %%y = cast(%%h2) {dtype=f32}\n  return %%y\n}\n");
  char *o0 = dis_text_opt("t.vmasm", b.s, true), *o1 = dis_text_opt("t.vmasm", b.s, false);
  ck_assert_int_eq(invokes_of(o0, "transpose"), 4);
  if (invokes_of(o1, "transpose") != 2) fprintf(stderr, "%s\n", o1);
  ck_assert_int_eq(invokes_of(o1, "transpose"), 2);
  ck_assert_int_eq(count(o1, "groups=4, layout=\"nhwc\""), 1);
  ck_assert_int_ge(count(o0, "mul("), 1);
  ck_assert_int_eq(count(o1, "mul("), 0); /* the layer scale is in the second linear's weight and bias */
  free(o0);
  free(o1);
  rill_type_t ty[2] = {{RILL_F32, 4, {2, 4, 5, 6}}, {RILL_F32, 1, {6}}};
  same_results(b.s, 2, ty, 240, 1, 240, 3e-2f, "convnext block");
}
END_TEST

/* A mul by a constant over the last axis after a linear (directly, or
 * through reshapes keeping the last size) folds into the linear's weight
 * and bias; near misses stay: the linear with an activation, a constant
 * over another axis, the linear's result read twice, a reshape that
 * changes the last size, and in f16 a scale of 1e-6 (ConvNeXt's initial
 * layer scale), which would make the weights no f16 numbers. f32 and f16,
 * results within rounding of -O0's. */
START_TEST(scale_into_linear) {
  static const char *const cases[] = {
      "%l = linear(%x, %W, %b)\n  %y = mul(%l, %cn)", /* folds */
      "%l = linear(%x, %W, %b)\n  %r = reshape(%l) {shape=[6,4]}\n  %q = reshape(%r) {shape=[2,3,4]}\n  %y = mul(%cs, %q)",
      "%l = linear(%x, %W)\n  %y = mul(%cn, %l)",
      "%l = linear(%x, %W, %b) {activation=\"relu\"}\n  %y = mul(%l, %cn)", /* stays */
      "%l = linear(%x, %W, %b)\n  %y = mul(%l, %cm)",
      "%l = linear(%x, %W, %b)\n  %m = mul(%l, %cn)\n  %y = add(%m, %l)",
      "%l = linear(%x, %W, %b)\n  %r = reshape(%l) {shape=[2,2,6]}\n  %m = mul(%r, %c6)\n  %y = reshape(%m) {shape=[2,3,4]}",
      "%l = linear(%x, %W, %b)\n  %y = mul(%l, %tiny)", /* folds in f32, stays in f16 */
  };
  static const char *const dts[2] = {"f32", "f16"};
  for (int dt = 0; dt < 2; dt++)
    for (int k = 0; k < 8; k++) {
      buf_t b = {.n = 0};
      put(&b, "const %%W : %s[4,5] = ", dts[dt]);
      put_away(&b, 20, 1.0f);
      put(&b, "\nconst %%b : %s[4] = ", dts[dt]);
      put_away(&b, 4, 1.0f);
      put(&b, "\nconst %%cn : %s[4] = ", dts[dt]);
      put_away(&b, 4, 3.0f);
      put(&b, "\nconst %%cs : %s[] = 0.75\nconst %%tiny : %s[4] = fill(1e-6)\nconst %%cm : %s[1,3,1] = ", dts[dt], dts[dt], dts[dt]);
      put_away(&b, 3, 3.0f);
      put(&b, "\nconst %%c6 : %s[6] = ", dts[dt]);
      put_away(&b, 6, 3.0f);
      put(&b, "\nfunc @main(%%p: f32[2,3,5]) -> f32[2,3,4] {\n  %%x = cast(%%p) {dtype=%s}\n  %s\n  %%z = cast(%%y) {dtype=f32}\n  return %%z\n}\n",
          dts[dt], cases[k]);
      char *o1 = dis_text_opt("t.vmasm", b.s, false);
      bool folds = k < 3 || (k == 7 && dt == 0);
      if ((count(o1, "mul(") == 0) != folds) fprintf(stderr, "%s\n%s\n", b.s, o1);
      ck_assert_msg((count(o1, "mul(") == 0) == folds, "case %d (%s): the mul %s", k, dts[dt], folds ? "stayed" : "was folded");
      free(o1);
      rill_type_t ty[1] = {{RILL_F32, 3, {2, 3, 5}}};
      same_results(b.s, 1, ty, 30, 1, 24, dt ? 2e-2f : 1e-5f, "scale into linear");
    }
}
END_TEST

/* ShuffleNet's blocks: the input split along the channels (two slices,
 * then a split),
 * one half through convolutions, a concat, then the channel shuffle
 * (reshape to [B,g,C/g,H,W], transpose [0,2,1,3,4], reshape back). At -O1
 * the shuffle is a gather of the channels and the slices, concat and
 * gathers run channels-last with the convolutions: one transpose in and
 * one out, where -O0 has the two rank-5 transposes. A shuffle whose
 * rank-5 transpose is also returned stays as written. Results within
 * rounding of -O0's (g = 2, then 4). */
START_TEST(shufflenet_blocks_channels_last) {
  for (int keep = 0; keep < 2; keep++) {
    buf_t b = {.n = 0};
    static const int64_t pw[4] = {4, 4, 1, 1}, dw[4] = {4, 1, 3, 3};
    put(&b, "const %%pw : f16[4,4,1,1] = ");
    put_lit(&b, pw, 4, 0.5f);
    put(&b, "\nconst %%dw : f16[4,1,3,3] = ");
    put_lit(&b, dw, 4, 0.5f);
    put(&b, "\nfunc @main(%%x: f32[2,8,5,6]) -> (f32[2,8,5,6]%s) {\n  %%h0 = cast(%%x) {dtype=f16}\n", keep ? ", f16[2,2,4,5,6]" : "");
    for (int k = 0; k < 2; k++) {
      int g = k ? 4 : 2;
      if (k) put(&b, "  %%l%d, %%r%d = split(%%h%d) {axis=1, sizes=[4, 4]}\n", k, k, k);
      else put(&b, "  %%l%d = slice(%%h%d) {axes=[1], starts=[0], ends=[4]}\n  %%r%d = slice(%%h%d) {axes=[1], starts=[4], ends=[8]}\n", k, k, k, k);
      put(&b, "  %%a%d = conv2d(%%r%d, %%pw)\n  %%b%d = relu(%%a%d)\n  %%d%d = conv2d(%%b%d, %%dw) {padding=[1,1], groups=4}\n"
              "  %%c%d = concat(%%l%d, %%d%d) {axis=1}\n  %%v%d = reshape(%%c%d) {shape=[2,%d,%d,5,6]}\n"
              "  %%t%d = transpose(%%v%d) {perm=[0,2,1,3,4]}\n  %%h%d = reshape(%%t%d) {shape=[2,8,5,6]}\n",
          k, k, k, k, k, k, k, k, k, k, k, g, 8 / g, k, k, k + 1, k);
    }
    put(&b, "  %%y = cast(%%h2) {dtype=f32}\n  return %%y%s\n}\n", keep ? ", %t1" : "");
    char *o0 = dis_text_opt("t.vmasm", b.s, true), *o1 = dis_text_opt("t.vmasm", b.s, false);
    ck_assert_int_eq(invokes_of(o0, "transpose"), 2);
    if (invokes_of(o1, "gather") != 2 - keep || invokes_of(o1, "transpose") != 2 + keep) fprintf(stderr, "%s\n", o1);
    ck_assert_int_eq(invokes_of(o1, "gather"), 2 - keep);
    ck_assert_int_eq(invokes_of(o1, "transpose"), 2 + keep); /* in and out; with keep, the shuffle's own too */
    ck_assert_int_eq(count(o1, "{axes=[3], starts=[0], ends=[4]}"), 1);
    ck_assert_int_eq(count(o1, "{axis=3, sizes=[4, 4]}"), 1);
    free(o0);
    free(o1);
    if (!keep) {
      rill_type_t ty[1] = {{RILL_F32, 4, {2, 8, 5, 6}}};
      same_results(b.s, 1, ty, 480, 1, 480, 3e-2f, "shufflenet blocks");
    }
  }
}
END_TEST

/* DenseNet's pre-activation: concat, batch_norm, relu, 1x1 convolution.
 * The batch norm cannot fold into a convolution (none is before it): it
 * becomes its per-channel affine, fused with the relu into one kernel
 * (`rill dis` shows the group); results within rounding of -O0's, in f32
 * and f16 (where the convolutions, the concat and the group run
 * channels-last: one transpose in, one out). A batch norm then a
 * convolution with zero padding would fold into the convolution's input
 * exactly only without the relu between (relu(s x + t) is not linear) and
 * without padding (the padded zeros are not s 0 + t): here it does not. */
START_TEST(densenet_batch_norm_relu_one_kernel) {
  static const int64_t w1[4] = {4, 4, 3, 3}, w2[4] = {6, 8, 1, 1}, v8[1] = {8};
  for (int half = 0; half < 2; half++) {
    buf_t t = {.n = 0}, b;
    const char *names[6] = {"w1", "w2", "s", "o", "m", "v"};
    const int64_t *dims[6] = {w1, w2, v8, v8, v8, v8};
    for (int k = 0; k < 6; k++) {
      put(&t, "const %%%s : $T[", names[k]);
      for (int d = 0; d < (k < 2 ? 4 : 1); d++) put(&t, "%s%lld", d ? "," : "", (long long)dims[k][d]);
      put(&t, "] = ");
      if (k == 5) { /* variances, positive */
        put(&t, "[");
        for (int i = 0; i < 8; i++) put(&t, "%s%g", i ? ", " : "", 0.25 + 0.5 * (1 + frand()));
        put(&t, "]");
      } else {
        put_lit(&t, dims[k], k < 2 ? 4 : 1, k < 2 ? 0.4f : 1.5f);
      }
      put(&t, "\n");
    }
    put(&t, "func @main(%%x: f32[2,4,5,5]) -> f32[2,6,5,5] {\n%s  %%a = conv2d(%%h, %%w1) {padding=[1,1]}\n"
            "  %%c = concat(%%h, %%a) {axis=1}\n  %%n = batch_norm(%%c, %%s, %%o, %%m, %%v)\n  %%r = relu(%%n)\n"
            "  %%y = conv2d(%%r, %%w2)\n%s  return %%z\n}\n",
        half ? "  %h = cast(%x) {dtype=$T}\n" : "  %h = relu(%x)\n", half ? "  %z = cast(%y) {dtype=f32}\n" : "  %z = relu(%y)\n");
    subst(&b, t.s, half ? "f16" : "f32");
    char *o1 = dis_text_opt("t.vmasm", b.s, false);
    ck_assert_msg(!strstr(o1, "batch_norm(") && strstr(o1, "t0 = mul(x0, x1); t1 = add(t0, x2); t2 = relu(t1); return t2"), "%s", o1);
    ck_assert_int_eq(invokes_of(o1, "fused"), 1);
    ck_assert_int_eq(invokes_of(o1, "transpose"), half ? 2 : 0);
    free(o1);
    rill_type_t ty = {RILL_F32, 4, {2, 4, 5, 5}};
    same_results(b.s, 1, &ty, 200, 1, 300, half ? 3e-2f : 1e-5f, half ? "densenet f16" : "densenet f32");
  }
}
END_TEST

/* Elementwise ops before a softmax and after a layer_norm or softmax join
 * them: GELU and a scale after a layer norm become its epilogue, a soft
 * cap (tanh, then an add of a constant) before a softmax its prologue and
 * a scale after it its epilogue, attention's scale and a broadcast mask
 * before a softmax its prologue (the mask its second operand), a square
 * before a mean and epsilon and rsqrt after it its prologue and epilogue;
 * `rill dis` shows the programs; the cpu device gives -O0's results bit
 * for bit (each step rounded as its op was), in f32 and f16. An op whose
 * operand is used twice and a comparison stay outside. */
START_TEST(norms_take_elementwise_ops) {
  for (int half = 0; half < 2; half++) {
    const char *src0 = "const %g : $T[16] = fill(1.5)\nconst %b : $T[16] = fill(-0.25)\n"
                       "func @main(%x: f32[3,16], %m: f32[3,16]) -> (f32[3,16], f32[3,16], f32[3,16]) {\n"
                       "  %h = cast(%x) {dtype=$T}\n  %hm = cast(%m) {dtype=$T}\n"
                       "  %n = layer_norm(%h, %g, %b) {axis=-1}\n  %e = gelu(%n)\n  %s = mul(%e, 0.5)\n"
                       "  %t = tanh(%h)\n  %u = add(%t, 0.5)\n  %p = softmax(%u)\n  %q = mul(%p, 3)\n"
                       "  %hb = slice(%hm) {starts=[0], ends=[1], axes=[0]}\n  %d = div(%h, 8)\n  %k = add(%d, %hb)\n  %r = softmax(%k)\n  %w = add(%r, %r)\n"
                       "  %y0 = cast(%s) {dtype=f32}\n  %y1 = cast(%q) {dtype=f32}\n  %y2 = cast(%w) {dtype=f32}\n"
                       "  return %y0, %y1, %y2\n}\n";
    buf_t b;
    subst(&b, src0, half ? "f16" : "f32");
    const char *T = half ? "f16" : "f32";
    char *o0 = dis_text_opt("t.vmasm", b.s, true), *o1 = dis_text_opt("t.vmasm", b.s, false);
    char want[3][160];
    /* (in f32 the cast to f32 after them joins too) */
    snprintf(want[0], sizeof want[0], "{axis=-1, epilogue=\"t0 = gelu(x0); t1 = mul(t0, %s(0.5)); ", T);
    snprintf(want[1], sizeof want[1], "{prologue=\"t0 = tanh(x0); t1 = add(t0, %s(0.5)); return t1\", epilogue=\"t0 = mul(x0, %s(3", T, T);
    snprintf(want[2], sizeof want[2], "softmax(%s[3,16], %s[1,16]) -> (%s[3,16]) {prologue=\"t0 = div(x0, %s(8", T, T, T, T);
    ck_assert_msg(strstr(o1, "); t1 = add(t0, x1); return t1\"}"), "%s", o1);
    for (int k = 0; k < 3; k++)
      if (!strstr(o1, want[k])) {
        fprintf(stderr, "%s\n", o1);
        ck_abort_msg("no %s", want[k]);
      }
    /* the add of a result to itself stays */
    ck_assert_int_eq(invokes_of(o1, "softmax"), 2);
    ck_assert_int_eq(invokes_of(o1, "gelu") + invokes_of(o1, "tanh") + invokes_of(o1, "mul") + invokes_of(o1, "div"), 0);
    ck_assert_int_lt(count(o1, "invoke "), count(o0, "invoke ") - 4);
    free(o0);
    free(o1);
    rill_type_t ty[2] = {{RILL_F32, 2, {3, 16}}, {RILL_F32, 2, {3, 16}}};
    same_results(b.s, 2, ty, 48, 3, 48, 0.0f, half ? "norms f16" : "norms f32");
  }
  /* reductions: a square before a mean and epsilon and rsqrt after it (an
   * RMS norm's denominator), a max of a relu, bit for bit */
  for (int half = 0; half < 2; half++) {
    buf_t b;
    subst(&b, "func @main(%x: f32[3,16]) -> (f32[3,1], f32[1,16]) {\n  %h = cast(%x) {dtype=$T}\n  %q = mul(%h, %h)\n"
              "  %m = mean(%q) {axes=[1], keepdims=true}\n  %e = add(%m, 1e-5)\n  %r = rsqrt(%e)\n  %a = relu(%h)\n"
              "  %x2 = max(%a) {axes=[0], keepdims=true}\n  %y0 = cast(%r) {dtype=f32}\n  %y1 = cast(%x2) {dtype=f32}\n  return %y0, %y1\n}\n",
          half ? "f16" : "f32");
    char *o1 = dis_text_opt("t.vmasm", b.s, false);
    char want[2][160];
    snprintf(want[0], sizeof want[0], "{axes=[1], keepdims=true, prologue=\"t0 = mul(x0, x0); return t0\", epilogue=\"t0 = add(x0, %s(1",
             half ? "f16" : "f32");
    ck_assert_msg(strstr(o1, "); t1 = rsqrt(t0);"), "%s", o1);
    snprintf(want[1], sizeof want[1], "{axes=[0], keepdims=true, prologue=\"t0 = relu(x0); return t0\"");
    for (int k = 0; k < 2; k++)
      if (!strstr(o1, want[k])) {
        fprintf(stderr, "%s\n", o1);
        ck_abort_msg("no %s", want[k]);
      }
    free(o1);
    float *in = malloc(48 * sizeof(float)), *res[2][2];
    size_t bytes[2] = {3 * 4, 16 * 4};
    for (int j = 0; j < 48; j++) in[j] = frand();
    rill_type_t ty = {RILL_F32, 2, {3, 16}};
    for (int o = 0; o < 2; o++) {
      for (int k = 0; k < 2; k++) res[o][k] = malloc(bytes[k]);
      run_f32(b.s, o, 1, &ty, (const float *const *)&in, 2, res[o], bytes);
    }
    for (int k = 0; k < 2; k++) ck_assert(!memcmp(res[0][k], res[1][k], bytes[k]));
    for (int o = 0; o < 2; o++)
      for (int k = 0; k < 2; k++) free(res[o][k]);
    free(in);
  }
  /* a bad prologue or epilogue: at assembly, naming the op */
  expect_asm_error("func @main(%x: f32[3,16]) -> f32[3,16] {\n  %p = softmax(%x) {prologue=\"t0 = frob(x0); return t0\"}\n  return %p\n}\n", 2,
                   "'frob' is not an elementwise op");
  expect_asm_error("func @main(%x: f32[3,16]) -> f32[3,16] {\n  %p = layer_norm(%x) {epilogue=\"t0 = gt(x0, f32(1)); return t0\"}\n  return %p\n}\n",
                   2, "expected one result of f32");
  expect_asm_error("func @main(%x: f32[3,16]) -> f32[3,16] {\n  %p = softmax(%x) {scale=2.0, prologue=\"t0 = neg(x0); return t0\"}\n  return %p\n}\n",
                   2, "a prologue with a scale or divisor");
  expect_asm_error("func @main(%x: f32[3,16], %m: f32[2,16]) -> f32[3,16] {\n  %p = softmax(%x, %m) {prologue=\"t0 = add(x0, x1); return t0\"}\n"
                   "  return %p\n}\n", 2, "operand 2: expected a prologue and f32 that broadcasts to f32[3,16], found f32[2,16]");
  expect_asm_error("func @main(%x: f32[3,16], %m: f32[1,16]) -> f32[3,16] {\n  %p = softmax(%x, %m)\n  return %p\n}\n", 2,
                   "operand 2: expected a prologue");
  expect_asm_error("func @main(%x: i32[3,16]) -> i64[3] {\n  %p = sum(%x) {axes=[1], prologue=\"t0 = neg(x0); return t0\"}\n  return %p\n}\n", 2,
                   "a prologue or epilogue needs a float operand");
}
END_TEST

/* A batch norm whose result only an unpadded convolution reads folds into
 * that convolution's weights and bias (exact up to rounding: every tap of
 * the window reads a real input), grouped or not, with a bias or without;
 * with padding it stays an affine (a padded zero is not s 0 + t), and so
 * where a relu is between them. Results within f32 rounding of -O0's. */
START_TEST(batch_norm_into_following_conv) {
  static const int64_t w[4] = {6, 2, 3, 3}, v4[1] = {4}, b6[1] = {6};
  buf_t t = {.n = 0};
  const char *names[6] = {"w", "s", "o", "m", "v", "b"};
  const int64_t *dims[6] = {w, v4, v4, v4, v4, b6};
  for (int k = 0; k < 6; k++) {
    int r = k == 0 ? 4 : 1;
    put(&t, "const %%%s : f32[", names[k]);
    for (int d = 0; d < r; d++) put(&t, "%s%lld", d ? "," : "", (long long)dims[k][d]);
    put(&t, "] = ");
    if (k == 4) put(&t, "[0.5, 1.25, 2, 0.75]");
    else put_lit(&t, dims[k], r, k == 0 ? 0.5f : 1.5f);
    put(&t, "\n");
  }
  put(&t, "func @main(%%x: f32[2,4,6,6]) -> (f32[2,6,4,4], f32[2,6,4,4], f32[2,6,6,6], f32[2,6,4,4]) {\n"
          "  %%n = batch_norm(%%x, %%s, %%o, %%m, %%v)\n  %%a = conv2d(%%n, %%w, %%b) {groups=2}\n"
          "  %%n2 = batch_norm(%%x, %%s, %%o, %%m, %%v) {eps=0.01}\n  %%c = conv2d(%%n2, %%w) {groups=2, stride=[1,1]}\n"
          "  %%n3 = batch_norm(%%x, %%s, %%o, %%m, %%v)\n  %%d = conv2d(%%n3, %%w) {groups=2, padding=[1,1]}\n"
          "  %%n4 = batch_norm(%%x, %%s, %%o, %%m, %%v)\n  %%r = relu(%%n4)\n  %%e = conv2d(%%r, %%w, %%b) {groups=2}\n"
          "  return %%a, %%c, %%d, %%e\n}\n");
  char *o1 = dis_text_opt("t.vmasm", t.s, false);
  /* %a and %c: folded (a bias each); %d and %e: the affine stays, fused (with the relu for %e) */
  ck_assert_msg(count(o1, "conv2d(f32[2,4,6,6], f32[6,2,3,3], f32[6]) -> (f32[2,6,4,4]) {groups=2}") == 1, "%s", o1);
  ck_assert_msg(count(o1, "conv2d(f32[2,4,6,6], f32[6,2,3,3], f32[6]) -> (f32[2,6,4,4]) {groups=2, stride=[1, 1]}") == 1, "%s", o1);
  ck_assert_int_eq(invokes_of(o1, "fused"), 2);
  ck_assert_int_eq(invokes_of(o1, "batch_norm"), 0);
  free(o1);
  rill_type_t ty = {RILL_F32, 4, {2, 4, 6, 6}};
  float *in = malloc(288 * sizeof(float)), *res[2][4];
  size_t bytes[4] = {192 * 4, 192 * 4, 432 * 4, 192 * 4};
  for (int j = 0; j < 288; j++) in[j] = frand();
  for (int o = 0; o < 2; o++) {
    for (int k = 0; k < 4; k++) res[o][k] = malloc(bytes[k]);
    run_f32(t.s, o, 1, &ty, (const float *const *)&in, 4, res[o], bytes);
  }
  for (int k = 0; k < 4; k++)
    for (size_t j = 0; j < bytes[k] / 4; j++)
      ck_assert_msg(fabsf(res[1][k][j] - res[0][k][j]) <= 1e-5f * (1 + fabsf(res[0][k][j])), "result %d [%zu]: %g vs %g", k, j,
                    (double)res[1][k][j], (double)res[0][k][j]);
  for (int o = 0; o < 2; o++)
    for (int k = 0; k < 4; k++) free(res[o][k]);
  free(in);
}
END_TEST

/* Transposes that keep the last axis last, read or written by one
 * elementwise kernel: a transpose read by an add alone becomes the add's
 * operand read through its permutation (`perms`), a transpose of a
 * group's one result becomes the group computed in the transposed order
 * (its operand of its rank read through the permutation, a broadcast
 * one along the last axis and a scalar as they are), and one read by two
 * ops (an add and a sum) or one that moves the last axis stays. Results equal -O0's (the same arithmetic). */
START_TEST(transposes_into_elementwise_kernels) {
  const char *src =
      "func @main(%x: f32[2,3,4,5], %y: f32[2,4,3,5], %b: f32[5]) -> (f32[2,4,3,5], f32[2,3,4,5], f32[2,3,5,4], f32[2,4,3,5]) {\n"
      "  %t = transpose(%x) {perm=[0,2,1,3]}\n"
      "  %a = add(%t, %y)\n"
      "  %m = mul(%a, %b)\n"
      "  %s = sigmoid(%y)\n"
      "  %q = mul(%s, %b)\n"
      "  %h = add(%q, 0.5)\n"
      "  %u = transpose(%h) {perm=[0,2,1,3]}\n"
      "  %v = transpose(%x) {perm=[0,1,3,2]}\n"
      "  %z = relu(%v)\n"
      "  %w = transpose(%x) {perm=[0,2,1,3]}\n"
      "  %n = sum(%w) {axes=[3], keepdims=true}\n"
      "  %k = add(%w, %n)\n"
      "  return %m, %u, %z, %k\n"
      "}\n";
  char *o0 = dis_text_opt("t.vmasm", src, true), *o1 = dis_text_opt("t.vmasm", src, false);
  ck_assert_int_eq(invokes_of(o0, "transpose"), 4);
  if (invokes_of(o1, "transpose") != 2) fprintf(stderr, "%s\n", o1);
  /* left: the one that moves the last axis, and the one two ops read */
  ck_assert_int_eq(invokes_of(o1, "transpose"), 2);
  ck_assert_msg(count(o1, "perms=[") == 2 && count(o1, "perms=[0, 2, 1, 3, 0, 1, 2, 3, 0]") == 1 && count(o1, "perms=[0, 2, 1, 3, 0]") == 1,
                "%s", o1);
  free(o0);
  free(o1);
  rill_type_t ty[3] = {{RILL_F32, 4, {2, 3, 4, 5}}, {RILL_F32, 4, {2, 4, 3, 5}}, {RILL_F32, 1, {5}}};
  same_results(src, 3, ty, 120, 4, 120, 1e-6f, "transposes in elementwise kernels");
}
END_TEST

/* Property (assembler/windows.c): random chains over an image [B,H,W,C]
 * of window partitions (reshape, transpose(0,1,3,2,4,5), reshape to
 * [B*nW, ws*ws, C]), their reverses, cyclic shifts (torch.roll as ONNX
 * writes it: two slices and a concat per axis), transposes of H and W, and
 * linears over the last axis (a matmul with a constant [C,C] weight),
 * returned: at -O1 each run of row moves between two linears that holds a
 * partition, reverse or shift that moves rows is one gather (no
 * transpose, slice or concat left of it; a run of swaps alone keeps a
 * transpose), and the results equal -O0's. A third of the programs take
 * the batch as a shape variable (as an exporter with a dynamic batch axis
 * writes them: -1 in the windows' reshape), the same counts asserted, run
 * at 1 to 3 images. */
START_TEST(random_row_chains_one_gather) {
  int with_moves = 0, gathers = 0, removed = 0;
  for (int iter = 0; iter < 60; iter++) {
    buf_t *b = calloc(1, sizeof *b);
    ck_assert_ptr_nonnull(b);
    bool sym = iter % 3 == 2;
    int ws = 2 + (int)rnd(2), B = 1 + (int)rnd(sym ? 3 : 2), H = ws * (1 + (int)rnd(3)), Wd = ws * (1 + (int)rnd(3)), C = 2 + (int)rnd(5);
    int n = B * H * Wd * C, steps = 2 + (int)rnd(6), still = 0, moved = 0, v = 0;
    bool windows = false, seg_moves = false;
    int seg_swaps = 0;
    unsigned merges = 0; /* the steps that merged patches (their weights [4C,C]) */
    const int64_t wdims[2] = {C, C};
    char bs[16]; /* the batch as the program writes it */
    snprintf(bs, sizeof bs, sym ? "n" : "%d", B);
    put(b, "func @main(%%x: f32[%s,%d,%d,%d]) -> f32[RESULT] {\n  %%v0 = reshape(%%x) {shape=[%s,%d,%d,%d]}\n", bs, H, Wd, C, bs, H, Wd, C);
    int h = H, w = Wd; /* the image form's sizes (a transpose swaps them) */
    for (int k = 0; k < steps; k++) {
      int op = (int)rnd(4);
      if (windows) {
        if (op < 2) { /* reverse */
          put(b, "  %%v%d = reshape(%%v%d) {shape=[%s,%d,%d,%d,%d,%d]}\n", v + 1, v, bs, h / ws, w / ws, ws, ws, C);
          put(b, "  %%v%d = transpose(%%v%d) {perm=[0,1,3,2,4,5]}\n", v + 2, v + 1);
          put(b, "  %%v%d = reshape(%%v%d) {shape=[%s,%d,%d,%d]}\n", v + 3, v + 2, bs, h, w, C);
          v += 3, windows = false, seg_moves |= w / ws > 1; /* (one window a row moves nothing) */
        } else { /* a linear */
          put(b, "  %%v%d = matmul(%%v%d, %%w%d)\n", v + 1, v, k);
          v++, moved += seg_moves, still += seg_moves ? 0 : seg_swaps, seg_moves = false, seg_swaps = 0;
        }
        continue;
      }
      if (op == 0 && h % ws == 0 && w % ws == 0) { /* partition */
        put(b, "  %%v%d = reshape(%%v%d) {shape=[%s,%d,%d,%d,%d,%d]}\n", v + 1, v, bs, h / ws, ws, w / ws, ws, C);
        put(b, "  %%v%d = transpose(%%v%d) {perm=[0,1,3,2,4,5]}\n", v + 2, v + 1);
        put(b, "  %%v%d = reshape(%%v%d) {shape=[%d,%d,%d]}\n", v + 3, v + 2, sym ? -1 : B * (h / ws) * (w / ws), ws * ws, C);
        v += 3, windows = true, seg_moves |= w / ws > 1;
      } else if (op == 1) { /* roll along H or W */
        int ax = 1 + (int)rnd(2), len = ax == 1 ? h : w, sh = 1 + (int)rnd((uint32_t)(len > 1 ? len - 1 : 1));
        if (len < 2) continue;
        put(b, "  %%v%d = slice(%%v%d) {starts=[%d], ends=[%d], axes=[%d]}\n", v + 1, v, sh, len, ax);
        put(b, "  %%v%d = slice(%%v%d) {starts=[0], ends=[%d], axes=[%d]}\n", v + 2, v, sh, ax);
        put(b, "  %%v%d = concat(%%v%d, %%v%d) {axis=%d}\n", v + 3, v + 1, v + 2, ax);
        v += 3, seg_moves = true;
      } else if (op == 2 && h % 2 == 0 && w % 2 == 0 && rnd(2)) { /* Swin's patch merging: four strided slices, concatenated along C, a linear */
        for (int q = 0; q < 4; q++) {
          put(b, "  %%a%d_%d = slice(%%v%d) {starts=[%d], ends=[%d], axes=[1], steps=[2]}\n", k, q, v, q & 1, h, 1);
          put(b, "  %%b%d_%d = slice(%%a%d_%d) {starts=[%d], ends=[%d], axes=[2], steps=[2]}\n", k, q, k, q, q >> 1, w);
        }
        put(b, "  %%c%d = concat(%%b%d_0, %%b%d_1, %%b%d_2, %%b%d_3) {axis=3}\n", k, k, k, k, k);
        put(b, "  %%v%d = matmul(%%c%d, %%m%d)\n", v + 1, k, k);
        v++, moved++, seg_moves = false, seg_swaps = 0; /* (one gather with the run before it) */
        h /= 2, w /= 2, merges |= 1u << k;
      } else if (op == 2) { /* H and W swapped */
        put(b, "  %%v%d = transpose(%%v%d) {perm=[0,2,1,3]}\n", v + 1, v);
        int t = h;
        h = w, w = t, v++, seg_swaps++;
      } else { /* a linear */
        put(b, "  %%v%d = matmul(%%v%d, %%w%d)\n", v + 1, v, k);
        v++, moved += seg_moves, still += seg_moves ? 0 : seg_swaps, seg_moves = false, seg_swaps = 0;
      }
    }
    moved += seg_moves, still += seg_moves ? 0 : seg_swaps;
    int m = B * h * w * C; /* (merges quarter the image) */
    if (sym) put(b, "  %%y = reshape(%%v%d) {shape=[n,%d,%d]}\n  return %%y\n}\n", v, m / C / B, C);
    else put(b, "  %%y = reshape(%%v%d) {shape=[%d,%d]}\n  return %%y\n}\n", v, m / C, C);
    /* the weights, as constants before the function */
    buf_t *full = calloc(1, sizeof *full);
    ck_assert_ptr_nonnull(full);
    const int64_t mdims[2] = {4 * C, C};
    for (int k = 0; k < steps; k++) {
      put(full, "const %%w%d : f32[%d,%d] = ", k, C, C);
      put_lit(full, wdims, 2, 0.5f);
      put(full, "\n");
      if (!(merges >> k & 1)) continue;
      put(full, "const %%m%d : f32[%d,%d] = ", k, 4 * C, C);
      put_lit(full, mdims, 2, 0.25f);
      put(full, "\n");
    }
    const char *res = strstr(b->s, "RESULT");
    if (sym) put(full, "%.*sn,%d,%d%s", (int)(res - b->s), b->s, m / C / B, C, res + 6);
    else put(full, "%.*s%d,%d%s", (int)(res - b->s), b->s, m / C, C, res + 6);
    char *o0 = dis_text_opt("t.vmasm", full->s, true), *o1 = dis_text_opt("t.vmasm", full->s, false);
    int t1 = invokes_of(o1, "transpose"), g1 = invokes_of(o1, "gather");
    /* a run with no partition, reverse or shift that moves rows keeps its swaps of H and W (a transpose each at most) */
    if (t1 > still || invokes_of(o1, "concat") || invokes_of(o1, "slice") || g1 > moved) {
      fprintf(stderr, "%s\n%s\n", full->s, o1);
      ck_abort_msg("iteration %d: %d transposes (at most %d), %d gathers (at most %d)", iter, t1, still, g1, moved);
    }
    if (moved) ck_assert_int_ge(invokes_of(o0, "transpose") + invokes_of(o0, "concat"), 1);
    with_moves += moved > 0, gathers += g1;
    removed += invokes_of(o0, "transpose") + invokes_of(o0, "concat") + invokes_of(o0, "slice") - t1;
    free(o0);
    free(o1);
    rill_type_t ty[1] = {{RILL_F32, 4, {B, H, Wd, C}}};
    same_results(full->s, 1, ty, (size_t)n, 1, (size_t)m, 1e-5f, "row chains");
    free(b);
    free(full);
  }
  fprintf(stderr, "row chains: 60 random programs (20 with a dynamic batch), %d with rows moved; %d transposes, slices and concats gone, %d gathers\n",
          with_moves, removed, gathers);
  ck_assert_int_ge(with_moves, 20);
}
END_TEST

int main(void) {
  Suite *s = suite_create("layout");
  TCase *t = tcase_create("layout");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, random_programs_fewest_transposes);
  tcase_add_test(t, convnext_block_permutes_are_views);
  tcase_add_test(t, shufflenet_blocks_channels_last);
  tcase_add_test(t, scale_into_linear);
  tcase_add_test(t, densenet_batch_norm_relu_one_kernel);
  tcase_add_test(t, norms_take_elementwise_ops);
  tcase_add_test(t, batch_norm_into_following_conv);
  tcase_add_test(t, transposes_into_elementwise_kernels);
  tcase_add_test(t, random_row_chains_one_gather);
  suite_add_tcase(s, t);
  return run_suite(s);
}
