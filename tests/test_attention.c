/* test_attention.c: the -O1 pass that turns scaled dot-product attention,
 * as ONNX exporters write it, into one `attention` op (assembler/
 * attention.c). Programs in the exporters' forms (BERT's padding mask,
 * GPT-2's causal `where`, Llama's repeat_kv, scales on the scores or on q
 * and k, k transposed or given transposed) are generated over random
 * shapes and dtypes; each must become one op at -O1 and give -O0's results
 * within rounding on the cpu device. Near misses must stay as written.
 * Also: the op's windows (Swin's shifted-window masks). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static uint64_t rng = 7;
static double urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static int irand(int lo, int hi) { return lo + (int)(urand() * (hi - lo + 1)); }

typedef struct buf {
  char *p;
  size_t len, cap;
} buf_t;

static void put(buf_t *b, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    ck_assert(n >= 0);
    if (b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    b->cap = 2 * (b->cap + (size_t)n + 64);
    b->p = realloc(b->p, b->cap);
    ck_assert_ptr_nonnull(b->p);
  }
}

/* What a generated program looks like. */
typedef enum { K_TRANSPOSE, K_GIVEN_T, K_HEADS } kmode_t;       /* k: transposed here; given [B,H,D,S]; [B,S,H,D] transposed by [0,2,3,1] */
typedef enum { S_DIV, S_MUL, S_QK, S_NONE } smode_t;            /* scores / sqrt(D); scores * c; q * c and k * c; none */
/* masks: none; a constant causal triangle of -inf, or of the lowest number; BERT's padding mask from an input; GPT-2's
 * where on a constant causal condition, with the padding mask too; a full mask from an input; masked_fill on a
 * condition from an input (where(m < 0.5, -inf, S)) */
typedef enum { M_NONE, M_CAUSAL_ADD, M_CAUSAL_LOWEST, M_PAD, M_WHERE, M_WHERE_PAD, M_FULL, M_FILL, M_COUNT } mmode_t;
typedef struct prog {
  int B, Hq, Hkv, Sq, Skv, D;
  rill_dtype_t dt;
  kmode_t k;
  smode_t s;
  mmode_t m;
  /* near misses */
  int axis;          /* the softmax's axis (-1: the pattern's) */
  bool param_scale;  /* the scale a parameter */
  bool scores_out;   /* the scores returned too */
  bool heads;        /* q, k and v given [B,S,H,D] (heads split from the features), the result transposed back (K_HEADS, Hkv = Hq) */
  int wide;          /* the softmax in a wider type, cast to it and back: 1 f32 (transformers' eager attention), 2 f64 (a near miss); 3 the
                        softmax in the scores' type, its result cast to f32 and back (ViT's export) */
} prog_t;

static const char *dn(rill_dtype_t d) { return rill_dtype_name(d); }

/* The lowest finite number of the dtype, as exporters' finfo.min. */
static const char *lowest(rill_dtype_t d) { return d == RILL_F16 ? "-65504" : d == RILL_BF16 ? "-3.3895313892515355e38" : "-3.4028234663852886e38"; }

/* The program's text; its parameters (all f32, cast to the dtype inside):
 * q [B,Hq,Sq,D], k, v (per kmode, Hkv heads), then m [B,Skv] (0/1) for
 * padding masks or f [Sq,Skv] for a full mask, then s [] for param_scale. */
static char *gen(const prog_t *P, int *nparams, rill_type_t *types) {
  buf_t b = {0};
  int B = P->B, Hq = P->Hq, Hkv = P->Hkv, Sq = P->Sq, Skv = P->Skv, D = P->D, G = Hq / Hkv;
  const char *t = dn(P->dt);
  int n = 0;
  types[n++] = P->heads ? T(RILL_F32, 4, B, Sq, Hq, D) : T(RILL_F32, 4, B, Hq, Sq, D);
  /* keys given transposed or by tokens have every query head (the values may be grouped) */
  if (P->k == K_GIVEN_T) types[n++] = T(RILL_F32, 4, B, Hq, D, Skv);
  else if (P->k == K_HEADS) types[n++] = T(RILL_F32, 4, B, Skv, Hq, D);
  else types[n++] = T(RILL_F32, 4, B, Hkv, Skv, D);
  types[n++] = P->heads ? T(RILL_F32, 4, B, Skv, Hkv, D) : T(RILL_F32, 4, B, Hkv, Skv, D);
  bool pad = P->m == M_PAD || P->m == M_WHERE_PAD || P->m == M_FILL, full = P->m == M_FULL;
  if (pad) types[n++] = T(RILL_F32, 2, B, Skv);
  if (full) types[n++] = T(RILL_F32, 2, Sq, Skv);
  if (P->param_scale) types[n++] = T(RILL_F32, 0);
  *nparams = n;
  if (P->m == M_CAUSAL_ADD || P->m == M_CAUSAL_LOWEST) {
    put(&b, "const %%tri : %s[%d,%d] = [", t, Sq, Skv);
    for (int i = 0; i < Sq; i++) {
      put(&b, "%s[", i ? ", " : "");
      for (int j = 0; j < Skv; j++) put(&b, "%s%s", j ? ", " : "", j <= i + Skv - Sq ? "0" : P->m == M_CAUSAL_ADD ? "-inf" : lowest(P->dt));
      put(&b, "]");
    }
    put(&b, "]\n");
  }
  if (P->m == M_WHERE || P->m == M_WHERE_PAD) {
    put(&b, "const %%keep : bool[1,1,%d,%d] = [[[", Sq, Skv);
    for (int i = 0; i < Sq; i++) {
      put(&b, "%s[", i ? ", " : "");
      for (int j = 0; j < Skv; j++) put(&b, "%s%s", j ? ", " : "", j <= i + Skv - Sq ? "true" : "false");
      put(&b, "]");
    }
    put(&b, "]]]\n");
  }
  if (P->s == S_MUL && !P->param_scale) put(&b, "const %%c : %s[1,1,1,1] = [[[[%.17g]]]]\n", t, 1 / sqrt((double)D));
  put(&b, "func @main(");
  const char *pn[5] = {"q0", "k0", "v0", pad || full ? "m0" : "s0", "s0"};
  for (int i = 0; i < n; i++) {
    put(&b, "%s%%%s: f32[", i ? ", " : "", pn[i]);
    for (int d = 0; d < types[i].rank; d++) put(&b, "%s%lld", d ? "," : "", (long long)types[i].dims[d]);
    put(&b, "]");
  }
  if (P->heads) put(&b, ") -> (f32[%d,%d,%d,%d]", B, Sq, Hq, D);
  else put(&b, ") -> (f32[%d,%d,%d,%d]", B, Hq, Sq, D);
  if (P->scores_out) put(&b, ", f32[%d,%d,%d,%d]", B, Hq, Sq, Skv);
  put(&b, ") {\n");
  /* the operands in the dtype */
  for (int i = 0; i < n; i++) put(&b, "  %%%c = cast(%%%s) {dtype=%s}\n", pn[i][0], pn[i], t);
  /* repeat_kv for grouped heads (k as [B,Hkv,Skv,D] only) */
  const char *kk = "k", *vv = "v";
  if (G > 1) {
    const char *kv[2] = {"k", "v"};
    for (int j = P->k == K_TRANSPOSE ? 0 : 1; j < 2; j++) {
      put(&b, "  %%%su = unsqueeze(%%%s) {axes=[2]}\n", kv[j], kv[j]);
      put(&b, "  %%%se = broadcast_to(%%%su) {shape=[%d,%d,%d,%d,%d]}\n", kv[j], kv[j], B, Hkv, G, Skv, D);
      put(&b, "  %%%sr = reshape(%%%se) {shape=[%d,%d,%d,%d]}\n", kv[j], kv[j], B, Hq, Skv, D);
    }
    if (P->k == K_TRANSPOSE) kk = "kr";
    vv = "vr";
  }
  /* scale on q and k */
  const char *qq = "q";
  if (P->heads) { /* the heads moved before the positions, as exporters do after splitting them */
    put(&b, "  %%qx = transpose(%%q) {perm=[0,2,1,3]}\n  %%vx = transpose(%%%s) {perm=[0,2,1,3]}\n", vv);
    qq = "qx";
    vv = "vx";
  }
  double c = 1 / sqrt((double)D);
  if (P->s == S_QK) {
    put(&b, "  %%qs = mul(%%q, %.17g)\n  %%ks = mul(%%%s, %.17g)\n", sqrt(c), kk, sqrt(c));
    qq = "qs";
    kk = "ks";
  }
  /* k transposed */
  if (P->k == K_TRANSPOSE) put(&b, "  %%kt = transpose(%%%s) {perm=[0,1,3,2]}\n", kk);
  else if (P->k == K_HEADS) put(&b, "  %%kt = transpose(%%%s) {perm=[0,2,3,1]}\n", kk);
  else put(&b, "  %%kt = mul(%%%s, 1)\n", kk); /* given transposed (a scaling by one keeps the names one form) */
  put(&b, "  %%sc = matmul(%%%s, %%kt)\n", qq);
  const char *cur = "sc";
  if (P->param_scale) put(&b, "  %%ss = mul(%%sc, %%s)\n"), cur = "ss";
  else if (P->s == S_DIV) put(&b, "  %%ss = div(%%sc, %.17g)\n", sqrt((double)D)), cur = "ss";
  else if (P->s == S_MUL) put(&b, "  %%ss = mul(%%sc, %%c)\n"), cur = "ss"; /* a constant of shape [1,1,1,1], as exporters write them too */
  if (P->m == M_CAUSAL_ADD || P->m == M_CAUSAL_LOWEST) put(&b, "  %%ma = add(%%%s, %%tri)\n", cur), cur = "ma";
  if (P->m == M_WHERE || P->m == M_WHERE_PAD) put(&b, "  %%mw = where(%%keep, %%%s, %s)\n", cur, lowest(P->dt)), cur = "mw";
  if (P->m == M_FILL) {
    /* masked_fill(m == 0, -inf): the condition from an input, [B,1,1,Skv] */
    put(&b, "  %%c1 = lt(%%m, 0.5)\n  %%c2 = reshape(%%c1) {shape=[%d,1,1,%d]}\n  %%mf = where(%%c2, -inf, %%%s)\n", B, Skv, cur);
    cur = "mf";
  } else if (pad) {
    /* BERT: (1 - mask) * -10000, [B,1,1,Skv] */
    put(&b, "  %%m1 = reshape(%%m) {shape=[%d,1,1,%d]}\n  %%m2 = sub(1, %%m1)\n  %%m3 = mul(%%m2, -10000)\n", B, Skv);
    put(&b, "  %%mp = add(%%%s, %%m3)\n", cur);
    cur = "mp";
  }
  if (full) put(&b, "  %%mf = add(%%m, %%%s)\n", cur), cur = "mf";
  if (P->wide == 3) {
    put(&b, "  %%pn = softmax(%%%s) {axis=%d}\n  %%pw = cast(%%pn) {dtype=f32}\n  %%p = cast(%%pw) {dtype=%s}\n", cur, P->axis, t);
  } else if (P->wide) {
    const char *w = P->wide == 2 ? "f64" : "f32";
    put(&b, "  %%sw = cast(%%%s) {dtype=%s}\n  %%pw = softmax(%%sw) {axis=%d}\n  %%p = cast(%%pw) {dtype=%s}\n", cur, w, P->axis, t);
  } else {
    put(&b, "  %%p = softmax(%%%s) {axis=%d}\n", cur, P->axis);
  }
  put(&b, "  %%o = matmul(%%p, %%%s)\n", vv);
  if (P->heads) put(&b, "  %%ob = transpose(%%o) {perm=[0,2,1,3]}\n  %%y = cast(%%ob) {dtype=f32}\n");
  else put(&b, "  %%y = cast(%%o) {dtype=f32}\n");
  if (P->scores_out) put(&b, "  %%z = cast(%%sc) {dtype=f32}\n  return %%y, %%z\n}\n");
  else put(&b, "  return %%y\n}\n");
  return b.p;
}

static int count(const char *hay, const char *needle) {
  int k = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) k++;
  return k;
}

static char *dis(const char *src, bool opt1) {
  uint8_t *mb;
  size_t mn;
  rill_asm_options_t o = {.no_opt = !opt1};
  rill_status_t st = rill_assemble(NULL, "t.vmasm", src, strlen(src), &o, &mb, &mn);
  ck_assert_msg(!st, "%s\n%s", rill_status_message(st), src);
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, mb, mn, ".", &m));
  free(mb);
  char *text;
  size_t len;
  ck_assert(!rill_module_disassemble(m, &text, &len));
  rill_module_release(m);
  return text;
}

/* Runs @main at -O0 or -O1 on the cpu device; its results' floats into out. */
static void run(const char *src, bool opt1, int nin, const rill_type_t *types, float *const *in, int nout, float **out, size_t *nel) {
  uint8_t *mb;
  size_t mn;
  rill_asm_options_t o = {.no_opt = !opt1};
  ck_assert(!rill_assemble(NULL, "t.vmasm", src, strlen(src), &o, &mb, &mn));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, mb, mn, ".", &m));
  free(mb);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  rill_tensor_t *x[8], **r;
  int nr;
  for (int i = 0; i < nin; i++) ck_assert(!rill_tensor_create(vm, &types[i], in[i], &x[i]));
  rill_status_t st = rill_vm_invoke(vm, "main", x, nin, &r, &nr);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert_int_eq(nr, nout);
  for (int k = 0; k < nout; k++) {
    const rill_type_t *t = rill_tensor_type(r[k]);
    size_t n = 1;
    for (int d = 0; d < t->rank; d++) n *= (size_t)t->dims[d];
    out[k] = malloc(n * sizeof(float));
    nel[k] = n;
    ck_assert(!rill_tensor_read(r[k], out[k], n * sizeof(float)));
  }
  rill_results_free(vm, r, nr);
  for (int i = 0; i < nin; i++) rill_tensor_release(x[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
}

static double tol(rill_dtype_t d) { return d == RILL_F16 ? 1.5e-2 : d == RILL_BF16 ? 8e-2 : 2e-5; }

/* Generates P, checks what -O1 makes of it (one attention op, or, for a
 * near miss, the ops as written) and that both levels agree. */
static void check_prog(const prog_t *P, bool fused) {
  rill_type_t types[6];
  int nin;
  char *src = gen(P, &nin, types);
  char *t1 = dis(src, true);
  char what[160];
  snprintf(what, sizeof what, "B%d Hq%d Hkv%d Sq%d Skv%d D%d %s k%d s%d m%d wide%d", P->B, P->Hq, P->Hkv, P->Sq, P->Skv, P->D, dn(P->dt), P->k, P->s,
           P->m, P->wide);
  if (fused) {
    ck_assert_msg(count(t1, " attention(") == 1 && !strstr(t1, "softmax(") && !strstr(t1, "matmul("), "%s: not one attention op:\n%s\n%s", what, src, t1);
    bool causal = P->m == M_CAUSAL_ADD || P->m == M_CAUSAL_LOWEST || P->m == M_WHERE || P->m == M_WHERE_PAD;
    ck_assert_msg(!causal == !strstr(t1, "causal=true"), "%s: causal\n%s", what, t1);
    /* grouped heads: k and v keep Hkv heads */
    if (P->Hq != P->Hkv && P->k == K_TRANSPOSE) ck_assert_msg(!strstr(t1, "broadcast_to("), "%s: repeat_kv kept\n%s", what, t1);
    /* heads split from the features: read and written in place, no transpose left */
    if (P->heads) ck_assert_msg(count(t1, "layout=\"bshd\"") == 1 && !strstr(t1, " transpose("), "%s: heads transposed\n%s", what, t1);
    else ck_assert_msg(!strstr(t1, "bshd"), "%s: bshd without the heads' transposes\n%s", what, t1);
  } else {
    ck_assert_msg(!strstr(t1, " attention(") && strstr(t1, "softmax("), "%s: a near miss became attention:\n%s\n%s", what, src, t1);
  }
  float *in[6];
  for (int i = 0; i < nin; i++) {
    size_t n = 1;
    for (int d = 0; d < types[i].rank; d++) n *= (size_t)types[i].dims[d];
    in[i] = malloc((n ? n : 1) * sizeof(float));
    bool mask01 = i == 3 && (P->m == M_PAD || P->m == M_WHERE_PAD || P->m == M_FILL);
    for (size_t e = 0; e < n; e++) in[i][e] = mask01 ? (urand() < 0.7 || e % (size_t)P->Skv == 0) : (float)(2 * urand() - 1);
    if (types[i].rank == 0) in[i][0] = 0.3f;
  }
  float *r[2][2];
  size_t nel[2][2];
  int nout = P->scores_out ? 2 : 1;
  for (int o = 0; o < 2; o++) run(src, o, nin, types, in, nout, r[o], nel[o]);
  for (int k = 0; k < nout; k++)
    for (size_t e = 0; e < nel[0][k]; e++)
      ck_assert_msg((isnan(r[1][k][e]) && isnan(r[0][k][e])) || fabsf(r[1][k][e] - r[0][k][e]) <= tol(P->dt) * (1 + fabsf(r[0][k][e])),
                    "%s: result %d [%zu]: -O1 %g, -O0 %g", what, k, e,
                    r[1][k][e], r[0][k][e]);
  for (int o = 0; o < 2; o++)
    for (int k = 0; k < nout; k++) free(r[o][k]);
  for (int i = 0; i < nin; i++) free(in[i]);
  free(t1);
  free(src);
}

static prog_t random_prog(void) {
  static const rill_dtype_t dts[] = {RILL_F32, RILL_F16, RILL_BF16};
  prog_t P = {0};
  P.B = irand(1, 2);
  P.Hkv = irand(1, 3);
  P.Hq = P.Hkv * (int[]){1, 1, 2, 4}[irand(0, 3)];
  P.Skv = irand(1, 9);
  P.Sq = irand(1, P.Skv);
  P.D = irand(1, 12);
  P.dt = dts[irand(0, 2)];
  P.k = (kmode_t)irand(0, 2);
  P.s = (smode_t)irand(0, 3);
  P.m = (mmode_t)irand(0, M_COUNT - 1);
  P.axis = irand(0, 1) ? -1 : 3;
  if (P.k != K_TRANSPOSE && irand(0, 1)) P.Hkv = P.Hq; /* transposed keys given with all heads, values grouped or not */
  return P;
}

START_TEST(exporter_patterns) {
  /* each form at least once, then random ones */
  for (int k = 0; k < 3; k++)
    for (int s = 0; s < 4; s++)
      for (int m = 0; m < M_COUNT; m++) {
        prog_t P = {2, 4, 2, 3, 5, 8, (rill_dtype_t[]){RILL_F32, RILL_F16, RILL_BF16}[(k + s + m) % 3], (kmode_t)k, (smode_t)s, (mmode_t)m, -1, false, false, false, 0};
        check_prog(&P, true);
      }
  for (int i = 0; i < 150; i++) {
    prog_t P = random_prog();
    check_prog(&P, true);
  }
  /* heads split from the features (BERT, GPT-2, ViT as exported): every scale and mask form but a scale on q and k */
  for (int i = 0; i < 60; i++) {
    prog_t P = random_prog();
    P.heads = true;
    P.k = K_HEADS;
    P.Hkv = P.Hq;
    if (P.s == S_QK) P.s = S_DIV;
    check_prog(&P, true);
  }
  /* the softmax in f32 between casts, in f16 and bf16 (transformers' eager attention), or its result cast to f32 and back (ViT),
   * heads split or not */
  for (int i = 0; i < 40; i++) {
    prog_t P = random_prog();
    P.dt = i % 2 ? RILL_F16 : RILL_BF16;
    P.wide = i % 4 == 3 ? 3 : 1;
    if (i % 3 == 0) {
      P.heads = true;
      P.k = K_HEADS;
      P.Hkv = P.Hq;
      if (P.s == S_QK) P.s = S_DIV;
    }
    check_prog(&P, true);
  }
}
END_TEST

START_TEST(near_misses) {
  for (int i = 0; i < 24; i++) {
    prog_t P = random_prog();
    /* the softmax over another axis; a scale that is not a constant; the scores read twice */
    if (i % 3 == 0) P.axis = 2;
    if (i % 3 == 1) P.param_scale = true;
    if (i % 3 == 2) P.scores_out = true;
    check_prog(&P, false);
  }
  /* the softmax in f64 between casts: wider than the op computes */
  for (int i = 0; i < 6; i++) {
    prog_t P = random_prog();
    P.dt = i % 2 ? RILL_F16 : RILL_BF16;
    P.wide = 2;
    check_prog(&P, false);
  }
}
END_TEST

/* The mask operand: the op with a mask equals the ops it stands for, -O0
 * and -O1 of one program; the op's errors name what was expected. */
START_TEST(mask_operand) {
  const char *src = "func @main(%q: f32[2,2,3,4], %k: f32[2,1,5,4], %v: f32[2,1,5,4], %m: f32[2,1,1,5]) -> f32[2,2,3,4] {\n"
                    "  %y = attention(%q, %k, %v, %m) {scale=0.5}\n  return %y\n}\n";
  char *t = dis(src, false);
  ck_assert(strstr(t, "attention(f32[2,2,3,4], f32[2,1,5,4], f32[2,1,5,4], f32[2,1,1,5])"));
  free(t);
  static const char *const bad[2][2] = {{"f32[2,1,2,5]", "mask: expected f32 [B|1, Hq|1, Sq|1, Skv|1]"}, {"f16[2,1,1,5]", "mask: expected"}};
  for (int i = 0; i < 2; i++) {
    char b[512];
    snprintf(b, sizeof b, "func @main(%%q: f32[2,2,3,4], %%k: f32[2,1,5,4], %%v: f32[2,1,5,4], %%m: %s) -> f32[2,2,3,4] {\n"
             "  %%y = attention(%%q, %%k, %%v, %%m)\n  return %%y\n}\n", bad[i][0]);
    expect_asm_error(b, 2, bad[i][1]);
  }
  /* a mask and a length: the mask comes last */
  const char *both = "func @main(%q: f32[2,2,3,4], %k: f32[2,1,5,4], %v: f32[2,1,5,4], %m: f32[1,1,3,5], %n: i64[]) -> f32[2,2,3,4] {\n"
                     "  %y = attention(%q, %k, %v, %n, %m) {causal=true}\n  return %y\n}\n";
  t = dis(both, false);
  ck_assert(strstr(t, "attention(f32[2,2,3,4], f32[2,1,5,4], f32[2,1,5,4], i64[], f32[1,1,3,5]) -> (f32[2,2,3,4]) {causal=true}"));
  free(t);
}
END_TEST

/* Masks that add 0 everywhere, built at run time over a shape variable's
 * batch (so folding leaves them): a bool constant of ones broadcast and
 * made a float mask by where(C, 0, lowest) (ViT's export), zeros broadcast,
 * and where(C, S, lowest) on the scores: no mask operand at -O1, the where
 * and broadcasts gone, -O0's results; a condition with one false (the
 * last form) stays a mask. */
START_TEST(uniform_masks) {
  static const char *const form[4] = {
      "  %c = broadcast_to(%keep) {shape=[B,1,3,5]}\n  %m = where(%c, %zero, %low)\n  %a = add(%t, %m)\n",
      "  %m0 = broadcast_to(%z1) {shape=[B,1,1,5]}\n  %a = add(%m0, %t)\n",
      "  %c = broadcast_to(%keep) {shape=[B,1,3,5]}\n  %a = where(%c, %t, %low)\n",
      "  %c = broadcast_to(%part) {shape=[B,1,3,5]}\n  %m = where(%c, %zero, %low)\n  %a = add(%t, %m)\n",
  };
  for (int f = 0; f < 4; f++) {
    char src[2048];
    snprintf(src, sizeof src,
             "const %%keep : bool[1,1,3,5] = fill(true)\nconst %%part : bool[1,1,3,5] = [[[[true, true, false, true, true], "
             "[true, true, true, true, true], [true, true, true, true, true]]]]\nconst %%zero : f32[] = 0\n"
             "const %%low : f32[] = -3.4028234663852886e38\nconst %%z1 : f32[1,1,1,1] = fill(0)\n"
             "func @main(%%q: f32[B,2,3,4], %%k: f32[B,2,5,4], %%v: f32[B,2,5,4]) -> f32[B,2,3,4] {\n"
             "  %%kt = transpose(%%k) {perm=[0,1,3,2]}\n  %%s = matmul(%%q, %%kt)\n  %%t = div(%%s, 2)\n%s"
             "  %%p = softmax(%%a) {axis=-1}\n  %%y = matmul(%%p, %%v)\n  return %%y\n}\n",
             form[f]);
    char *t1 = dis(src, true);
    ck_assert_msg(count(t1, " attention(") == 1 && !strstr(t1, "softmax("), "%d: not one attention op:\n%s\n%s", f, src, t1);
    if (f < 3) ck_assert_msg(!strstr(t1, "where(") && !strstr(t1, "broadcast_to(") && !strstr(t1, " add("), "%d: a mask kept:\n%s", f, t1);
    else ck_assert_msg(strstr(t1, "where("), "%d: the mask went:\n%s", f, t1);
    free(t1);
    const rill_type_t types[3] = {T(RILL_F32, 4, 2, 2, 3, 4), T(RILL_F32, 4, 2, 2, 5, 4), T(RILL_F32, 4, 2, 2, 5, 4)};
    float q[48], k[80], v[80], *in[3] = {q, k, v}, *r[2][1];
    size_t nel[2][1];
    for (int i = 0; i < 48; i++) q[i] = (float)(2 * urand() - 1);
    for (int i = 0; i < 80; i++) k[i] = (float)(2 * urand() - 1), v[i] = (float)(2 * urand() - 1);
    for (int o = 0; o < 2; o++) run(src, o, 3, types, in, 1, r[o], nel[o]);
    ck_assert_uint_eq(nel[0][0], 48);
    for (size_t e = 0; e < 48; e++)
      ck_assert_msg(fabsf(r[1][0][e] - r[0][0][e]) <= 2e-5f * (1 + fabsf(r[0][0][e])), "%d [%zu]: -O1 %g, -O0 %g", f, e, r[1][0][e], r[0][0][e]);
    free(r[0][0]);
    free(r[1][0]);
  }
}
END_TEST

/* A literal of n values in [-scale, scale] (or -100 at random places: a window's mask), nested as dims. */
static void put_lit(buf_t *b, const int *dims, int r, double scale, bool mask) {
  if (!r) {
    put(b, "%g", mask ? (urand() < 0.3 ? -100.0 : 0.0) : (2 * urand() - 1) * scale);
    return;
  }
  put(b, "[");
  for (int i = 0; i < dims[0]; i++) {
    if (i) put(b, ", ");
    put_lit(b, dims + 1, r - 1, scale, mask);
  }
  put(b, "]");
}

/* windows=W: batch b reads mask[b % W]; equal to the mask broadcast over
 * the batch's images; Swin's shifted windows as exported (the scores
 * viewed [B, W, H, S, S] plus a [1, W, 1, S, S] constant, a relative
 * position bias [1, H, S, S] before) become one op with the two masks
 * folded into one [W, H, S, S] at -O1, with -O0's results; the op's errors. */
START_TEST(windows_mask) {
  enum { B = 2, W = 3, H = 2, S = 4, D = 8 };
  const rill_type_t qt = {RILL_F32, 4, {B * W, H, S, D}}, mt = {RILL_F32, 4, {W, H, S, S}};
  float q[B * W * H * S * D], k[B * W * H * S * D], v[B * W * H * S * D], m[W * H * S * S], y1[B * W * H * S * D], y2[B * W * H * S * D];
  for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = (float)(2 * urand() - 1), k[i] = (float)(2 * urand() - 1), v[i] = (float)(2 * urand() - 1);
  for (size_t i = 0; i < sizeof m / sizeof *m; i++) m[i] = urand() < 0.3 ? -100.0f : (float)(urand() - 0.5);
  const rill_type_t types[4] = {qt, qt, qt, mt};
  const float *in[4] = {q, k, v, m};
  float *o1[1] = {y1}, *o2[1] = {y2};
  const size_t bytes[1] = {sizeof y1};
  const char *win = "func @main(%q: f32[6,2,4,8], %k: f32[6,2,4,8], %v: f32[6,2,4,8], %m: f32[3,2,4,4]) -> f32[6,2,4,8] {\n"
                    "  %y = attention(%q, %k, %v, %m) {windows=3}\n  return %y\n}\n";
  const char *full = "func @main(%q: f32[6,2,4,8], %k: f32[6,2,4,8], %v: f32[6,2,4,8], %m: f32[3,2,4,4]) -> f32[6,2,4,8] {\n"
                     "  %a = reshape(%m) {shape=[1,3,2,4,4]}\n  %b = broadcast_to(%a) {shape=[2,3,2,4,4]}\n"
                     "  %c = reshape(%b) {shape=[6,2,4,4]}\n  %y = attention(%q, %k, %v, %c)\n  return %y\n}\n";
  run_f32(win, false, 4, types, in, 1, o1, bytes);
  run_f32(full, false, 4, types, in, 1, o2, bytes);
  for (size_t i = 0; i < sizeof y1 / sizeof *y1; i++) ck_assert_msg(fabsf(y1[i] - y2[i]) <= 1e-6f, "at %zu: %g, %g", i, (double)y1[i], (double)y2[i]);
  /* the window matters: mask[b / 2] differs */
  const char *bad_first = "func @main(%q: f32[6,2,4,8], %k: f32[6,2,4,8], %v: f32[6,2,4,8], %m: f32[3,2,4,4]) -> f32[6,2,4,8] {\n"
                          "  %a = reshape(%m) {shape=[3,1,2,4,4]}\n  %b = broadcast_to(%a) {shape=[3,2,2,4,4]}\n"
                          "  %c = reshape(%b) {shape=[6,2,4,4]}\n  %y = attention(%q, %k, %v, %c)\n  return %y\n}\n";
  run_f32(bad_first, false, 4, types, in, 1, o2, bytes);
  bool differs = false;
  for (size_t i = 0; i < sizeof y1 / sizeof *y1; i++) differs |= fabsf(y1[i] - y2[i]) > 1e-4f;
  ck_assert(differs);
  /* Swin's shifted windows as exported */
  buf_t consts = {0}, b = {0}; /* the relative position bias and the windows' mask, both programs' */
  put(&consts, "const %%bias : f32[1,2,4,4] = ");
  put_lit(&consts, (const int[]){1, H, S, S}, 4, 1.0, false);
  put(&consts, "\nconst %%wmask : f32[1,3,1,4,4] = ");
  put_lit(&consts, (const int[]){1, W, 1, S, S}, 5, 0, true);
  put(&b, "%s\nfunc @main(%%q: f32[6,2,4,8], %%k: f32[6,2,4,8], %%v: f32[6,2,4,8], %%m: f32[3,2,4,4]) -> f32[6,2,4,8] {\n"
          "  %%qs = mul(%%q, 0.35)\n  %%kt = transpose(%%k) {perm=[0,1,3,2]}\n  %%s = matmul(%%qs, %%kt)\n  %%sb = add(%%s, %%bias)\n"
          "  %%s5 = reshape(%%sb) {shape=[2,3,2,4,4]}\n  %%sm = add(%%s5, %%wmask)\n  %%s4 = reshape(%%sm) {shape=[6,2,4,4]}\n"
          "  %%p = softmax(%%s4) {axis=-1}\n  %%y = matmul(%%p, %%v)\n  return %%y\n}\n", consts.p);
  char *t = dis(b.p, true);
  ck_assert_msg(strstr(t, "attention(f32[6,2,4,8], f32[6,2,4,8], f32[6,2,4,8], f32[3,2,4,4]) -> (f32[6,2,4,8]) {scale=0.34999") && strstr(t, "windows=3}"), "%s", t);
  ck_assert(!strstr(t, "= softmax("));
  free(t);
  run_f32(b.p, false, 4, types, in, 1, o1, bytes);
  run_f32(b.p, true, 4, types, in, 1, o2, bytes);
  for (size_t i = 0; i < sizeof y1 / sizeof *y1; i++) ck_assert_msg(fabsf(y1[i] - y2[i]) <= 1e-5f, "at %zu: %g, %g", i, (double)y1[i], (double)y2[i]);
  free(b.p);
  /* the same with the batch a shape variable (an export with its batch axis dynamic: [n*3, ...] through -1) */
  buf_t bs = {0};
  put(&bs, "%s\nfunc @main(%%q5: f32[n,3,2,4,8], %%k5: f32[n,3,2,4,8], %%v5: f32[n,3,2,4,8]) -> f32[n,3,2,4,8] {\n"
           "  %%q = reshape(%%q5) {shape=[-1,2,4,8]}\n  %%k = reshape(%%k5) {shape=[-1,2,4,8]}\n  %%v = reshape(%%v5) {shape=[-1,2,4,8]}\n"
           "  %%qs = mul(%%q, 0.35)\n  %%kt = transpose(%%k) {perm=[0,1,3,2]}\n  %%s = matmul(%%qs, %%kt)\n  %%sb = add(%%s, %%bias)\n"
           "  %%s5 = reshape(%%sb) {shape=[n,3,2,4,4]}\n  %%sm = add(%%s5, %%wmask)\n  %%s4 = reshape(%%sm) {shape=[-1,2,4,4]}\n"
           "  %%p = softmax(%%s4) {axis=-1}\n  %%o = matmul(%%p, %%v)\n  %%y = reshape(%%o) {shape=[n,3,2,4,8]}\n  return %%y\n}\n",
      consts.p);
  t = dis(bs.p, true);
  ck_assert_msg(strstr(t, "windows=3}") && !strstr(t, "= softmax("), "%s", t);
  free(t);
  const rill_type_t t5 = {RILL_F32, 5, {B, W, H, S, D}}, types5[3] = {t5, t5, t5};
  run_f32(bs.p, false, 3, types5, in, 1, o1, bytes);
  run_f32(bs.p, true, 3, types5, in, 1, o2, bytes);
  for (size_t i = 0; i < sizeof y1 / sizeof *y1; i++) ck_assert_msg(fabsf(y1[i] - y2[i]) <= 1e-5f, "at %zu: %g, %g", i, (double)y1[i], (double)y2[i]);
  free(bs.p);
  free(consts.p);
  /* errors: no mask, a batch W does not divide, a mask of other windows */
  static const char *const bad[3][2] = {
      {"%y = attention(%q, %k, %v) {windows=3}", "windows=3: expected a mask of 3 windows"},
      {"%y = attention(%q, %k, %v, %m) {windows=4}", "windows=4: expected a mask of 4 windows"},
      {"%c = slice(%m) {starts=[0], ends=[2], axes=[0]}\n  %y = attention(%q, %k, %v, %c) {windows=3}", "windows=3"}};
  for (int i = 0; i < 3; i++) {
    char src[512];
    snprintf(src, sizeof src, "func @main(%%q: f32[6,2,4,8], %%k: f32[6,2,4,8], %%v: f32[6,2,4,8], %%m: f32[3,2,4,4]) -> f32[6,2,4,8] {\n"
             "  %s\n  return %%y\n}\n", bad[i][0]);
    expect_asm_error(src, i == 2 ? 3 : 2, bad[i][1]);
  }
}
END_TEST

/* A projection's constants: weights [N,E] ([E,N] with kn) and a bias [N] named %wNAME and %bNAME. */
static void put_proj(buf_t *b, const char *name, const char *t, int N, int E, bool bias, bool kn) {
  int dims[2] = {kn ? E : N, kn ? N : E};
  put(b, "const %%w%s : %s[%d,%d] = ", name, t, dims[0], dims[1]);
  put_lit(b, dims, 2, 0.5, false);
  put(b, "\n");
  if (!bias) return;
  put(b, "const %%b%s : %s[%d] = ", name, t, N);
  put_lit(b, &N, 1, 0.5, false);
  put(b, "\n");
}

/* q, k and v the heads of three products of one operand (BERT's and ViT's
 * exports), or of one product split in three (GPT-2's): at -O1 one product
 * (the weights stacked) and one attention over the packed heads
 * (kv_heads), -O0's results within rounding; a product read by another op
 * too, or k's heads from another operand, keeps the three. The packed op
 * itself against q, k and v split from its operand: equal bit for bit (one
 * order of arithmetic), grouped heads and masks too; its errors. */
START_TEST(packed_projections) {
  static const rill_dtype_t dts[] = {RILL_F32, RILL_F16, RILL_BF16};
  for (int it = 0; it < 40; it++) {
    int B = irand(1, 2), S = irand(1, 7), H = irand(1, 3), D = 2 * irand(1, 4), E = irand(2, 9), N = H * D;
    rill_dtype_t dt = dts[irand(0, 2)];
    const char *t = dn(dt);
    bool bias = irand(0, 1), split = irand(0, 1), pad = irand(0, 1), causal = !pad && irand(0, 1), kn = irand(0, 1); /* kn: ONNX's MatMul */
    const char *wa = kn ? " {weight=\"kn\"}" : "";
    int miss = it % 5 == 4 ? irand(1, 2) : 0; /* 1: q's product read twice; 2: k from another operand (split: k's part first) */
    buf_t b = {0};
    if (split) put_proj(&b, "", t, 3 * N, E, bias, kn);
    else put_proj(&b, "q", t, N, E, bias, kn), put_proj(&b, "k", t, N, E, bias, kn), put_proj(&b, "v", t, N, E, bias, kn);
    if (causal) {
      put(&b, "const %%tri : %s[%d,%d] = [", t, S, S);
      for (int i = 0; i < S; i++) {
        put(&b, "%s[", i ? ", " : "");
        for (int j = 0; j < S; j++) put(&b, "%s%s", j ? ", " : "", j <= i ? "0" : "-inf");
        put(&b, "]");
      }
      put(&b, "]\n");
    }
    put(&b, "func @main(%%x0: f32[%d,%d,%d], %%z0: f32[%d,%d,%d]%s", B, S, E, B, S, E, pad ? "" : ") -> (f32[");
    if (pad) put(&b, ", %%m0: f32[%d,%d]) -> (f32[", B, S);
    put(&b, "%d,%d,%d]) {\n  %%x = cast(%%x0) {dtype=%s}\n  %%z = cast(%%z0) {dtype=%s}\n", B, S, miss == 1 ? N + N : N, t, t);
    const char *part[3] = {"q", "k", "v"};
    if (split) /* (a near miss: k's part first) */
      put(&b, "  %%h = linear(%%x, %%w%s)%s\n  %s = split(%%h) {axis=-1, sizes=[%d,%d,%d]}\n", bias ? ", %b" : "", wa, miss == 2 ? "%k0, %q0, %v0" : "%q0, %k0, %v0", N, N, N);
    for (int j = 0; j < 3; j++) {
      if (!split) put(&b, "  %%%s0 = linear(%%%s, %%w%s%s%s)%s\n", part[j], miss == 2 && j == 1 ? "z" : "x", part[j], bias ? ", %b" : "", bias ? part[j] : "", wa);
      put(&b, "  %%%s1 = reshape(%%%s0) {shape=[%d,%d,%d,%d]}\n  %%%s = transpose(%%%s1) {perm=[0,2,1,3]}\n", part[j], part[j], B, S, H, D, part[j], part[j]);
    }
    put(&b, "  %%kt = transpose(%%k) {perm=[0,1,3,2]}\n  %%sc = matmul(%%q, %%kt)\n  %%ss = div(%%sc, %.17g)\n", sqrt((double)D));
    const char *cur = "ss";
    if (causal) put(&b, "  %%sm = add(%%ss, %%tri)\n"), cur = "sm";
    if (pad) {
      put(&b, "  %%m = cast(%%m0) {dtype=%s}\n  %%m1 = reshape(%%m) {shape=[%d,1,1,%d]}\n  %%m2 = sub(1, %%m1)\n  %%m3 = mul(%%m2, -10000)\n", t, B, S);
      put(&b, "  %%sm = add(%%ss, %%m3)\n"), cur = "sm";
    }
    put(&b, "  %%p = softmax(%%%s) {axis=-1}\n  %%o = matmul(%%p, %%v)\n  %%ob = transpose(%%o) {perm=[0,2,1,3]}\n", cur);
    put(&b, "  %%y0 = reshape(%%ob) {shape=[%d,%d,%d]}\n", B, S, N);
    if (miss == 1) put(&b, "  %%y1 = concat(%%y0, %%q0) {axis=-1}\n  %%y = cast(%%y1) {dtype=f32}\n");
    else put(&b, "  %%y = cast(%%y0) {dtype=f32}\n");
    put(&b, "  return %%y\n}\n");
    char *t1 = dis(b.p, true);
    char what[128];
    snprintf(what, sizeof what, "B%d S%d H%d D%d E%d %s bias%d split%d pad%d causal%d miss%d kn%d", B, S, H, D, E, t, bias, split, pad, causal, miss, kn);
    if (miss) {
      ck_assert_msg(!strstr(t1, "kv_heads="), "%s: packed\n%s", what, t1);
    } else {
      ck_assert_msg(count(t1, " attention(") == 1 && strstr(t1, "kv_heads=") && count(t1, " linear(") == 1 && !strstr(t1, " split("),
                    "%s: not one product and a packed attention\n%s\n%s", what, b.p, t1);
      ck_assert_msg(!causal == !strstr(t1, "causal=true"), "%s: causal\n%s", what, t1);
    }
    free(t1);
    rill_type_t types[3] = {T(RILL_F32, 3, B, S, E), T(RILL_F32, 3, B, S, E), T(RILL_F32, 2, B, S)};
    float *in[3], *r[2];
    size_t n = (size_t)(B * S * E), ny = (size_t)(B * S * (miss == 1 ? 2 * N : N)), bytes = ny * sizeof(float);
    for (int i = 0; i < 3; i++) {
      in[i] = malloc(n * sizeof(float));
      for (size_t e = 0; e < n; e++) in[i][e] = i == 2 ? (float)(urand() < 0.7 || e % (size_t)S == 0) : (float)(2 * urand() - 1);
    }
    for (int o = 0; o < 2; o++) {
      r[o] = malloc(bytes);
      run_f32(b.p, o, pad ? 3 : 2, types, (const float *const *)in, 1, &r[o], &bytes);
    }
    for (size_t e = 0; e < ny; e++)
      ck_assert_msg(fabsf(r[1][e] - r[0][e]) <= tol(dt) * (1 + fabsf(r[0][e])), "%s: [%zu]: -O1 %g, -O0 %g", what, e, (double)r[1][e], (double)r[0][e]);
    for (int i = 0; i < 3; i++) free(in[i]);
    free(r[0]);
    free(r[1]);
    free(b.p);
  }
  /* the op: packed against split, grouped heads, a mask, causal */
  for (int it = 0; it < 12; it++) {
    int B = irand(1, 2), S = irand(1, 9), Hkv = irand(1, 2), Hq = Hkv * irand(1, 3), D = irand(1, 6), Ht = Hq + 2 * Hkv;
    bool mask = irand(0, 1), causal = irand(0, 1);
    char attrs[96], src[2][768];
    snprintf(attrs, sizeof attrs, "layout=\"bshd\", scale=0.4%s", causal ? ", causal=true" : "");
#define HEAD "func @main(%%x: f32[%d,%d,%d,%d], %%m: f32[%d,1,%d,%d]) -> (f32[%d,%d,%d,%d]) {\n"
    int k = snprintf(src[0], sizeof src[0], HEAD, B, S, Ht, D, B, S, S, B, S, Hq, D);
    snprintf(src[0] + k, sizeof src[0] - (size_t)k, "  %%q, %%k, %%v = split(%%x) {axis=2, sizes=[%d,%d,%d]}\n  %%y = attention(%%q, %%k, %%v%s) {%s}\n  return %%y\n}\n",
             Hq, Hkv, Hkv, mask ? ", %m" : "", attrs);
    k = snprintf(src[1], sizeof src[1], HEAD, B, S, Ht, D, B, S, S, B, S, Hq, D);
#undef HEAD
    snprintf(src[1] + k, sizeof src[1] - (size_t)k, "  %%y = attention(%%x%s) {%s, kv_heads=%d}\n  return %%y\n}\n", mask ? ", %m" : "", attrs, Hkv);
    rill_type_t types[2] = {T(RILL_F32, 4, B, S, Ht, D), T(RILL_F32, 4, B, 1, S, S)};
    size_t nx = (size_t)(B * S * Ht * D), nm = (size_t)(B * S * S), ny = (size_t)(B * S * Hq * D), bytes = ny * sizeof(float);
    float *in[2] = {malloc(nx * sizeof(float)), malloc(nm * sizeof(float))}, *r[2] = {malloc(bytes), malloc(bytes)};
    for (size_t e = 0; e < nx; e++) in[0][e] = (float)(2 * urand() - 1);
    for (size_t e = 0; e < nm; e++) in[1][e] = urand() < 0.3 ? -1e4f : (float)urand();
    for (int o = 0; o < 2; o++) run_f32(src[o], false, 2, types, (const float *const *)in, 1, &r[o], &bytes);
    ck_assert_msg(!memcmp(r[0], r[1], bytes), "packed B%d S%d Hq%d Hkv%d D%d mask%d causal%d: not the split's results", B, S, Hq, Hkv, D, mask, causal);
    for (int i = 0; i < 2; i++) free(in[i]), free(r[i]);
  }
  /* errors */
  static const char *const bad[5][2] = {
      {"%y = attention(%x) {kv_heads=1}", "with layout=\"bshd\""},
      {"%y = attention(%x) {layout=\"bshd\", kv_heads=2}", "Hq a multiple of kv_heads=2"},
      {"%y = attention(%x, %m, %m) {layout=\"bshd\", kv_heads=1}", "found 3 operands"},
      {"%y = attention(%x) {layout=\"bshd\"}", "expected q, k and v"},
      {"%y = attention(%x, %l) {layout=\"bshd\", kv_heads=1}", "a mask of qkv's dtype, found i32[]"}};
  for (int i = 0; i < 5; i++) {
    char src[512];
    snprintf(src, sizeof src, "func @main(%%x: f32[2,5,4,3], %%m: f32[2,1,1,5], %%l: i32[]) -> f32[2,5,2,3] {\n  %s\n  return %%y\n}\n", bad[i][0]);
    expect_asm_error(src, 2, bad[i][1]);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("attention");
  add_test_case(s, windows_mask, 60);
  add_test_case(s, exporter_patterns, 300);
  add_test_case(s, near_misses, 120);
  add_test_case(s, mask_operand, 60);
  add_test_case(s, uniform_masks, 60);
  add_test_case(s, packed_projections, 120);
  return run_suite(s);
}
