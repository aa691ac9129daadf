/* test_schedule.c: the automatic stream schedules.
 *
 * Property: random dataflow graphs of many widths and depths, scheduled by
 * every policy with several stream limits, assemble (the assembler verifies
 * what it writes, stream discipline included) and run on the CPU device,
 * whose streams are concurrent threads, with --check-streams on and results
 * identical bit for bit to those of one stream. Also: what the schedules
 * look like on small graphs whose best shape is known, --check-streams
 * catching a race on a shared slot, and clear errors for bad options. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <unistd.h>

#include "helpers.h"

static uint64_t rng;
static uint32_t rnd(uint32_t n) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng % n);
}

static const char *POLICIES[] = {"wavefront", "asap", "rank", "ios"};

typedef struct prog {
  char *src;
  size_t len, cap;
} prog_t;

static void put(prog_t *p, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(p->src + p->len, p->cap - p->len, fmt, ap);
    va_end(ap);
    if ((size_t)n < p->cap - p->len) {
      p->len += (size_t)n;
      return;
    }
    p->cap = p->cap * 2 + (size_t)n + 64;
    p->src = realloc(p->src, p->cap);
    ck_assert_ptr_nonnull(p->src);
  }
}

/* A random graph over f32[D,D] values: unary, binary and matmul ops, views,
 * calls, and `if` and `while` on values computed on the device (host waits),
 * elementwise chains with broadcast constants, literals, comparisons, where,
 * clip and casts through f16 (what -O1 fuses); `width` bounds how far back
 * operands reach, so small widths give deep chains and large ones wide
 * layers. With `conv`, one more result: conv2d + batch_norm + relu of the
 * first parameter (what -O1 folds), then a residual block (a convolution
 * with a bias, the add of a shortcut and a relu: one op at -O1), returned
 * last; with conv 2 in f16, two channels, the residual's shortcut a pool
 * made after its convolution, then a concat and a sum over the channels
 * (what -O1 also turns channels-last, and back for the sum); in f32 then a
 * 16-channel convolution, its sigmoid and a pool concatenated along the
 * channels (parts of 64 d^2 bytes: -O1 writes the concat in place where d
 * is even) and a 1x1 convolution over the 33 channels. Concats along axis
 * 0 of two values among the random ops are in place where d is 8 and both
 * are distinct ops' results. */
static char *random_program(uint32_t nops, uint32_t width, uint32_t nparams, uint32_t d, int conv) {
  static const char *un[] = {"tanh", "sigmoid", "relu", "neg", "sin", "gelu"};
  static const char *bin[] = {"add", "sub", "mul", "maximum"};
  prog_t p = {0};
  put(&p, "func @helper(%%a: f32[%u,%u], %%b: f32[%u,%u]) -> f32[%u,%u] {\n  %%c = mul(%%a, 0.5)\n  %%e = add(%%c, %%b)\n  return %%e\n}\n",
      d, d, d, d, d, d);
  put(&p, "func @up(%%a: f32[%u,%u]) -> f32[%u,%u] {\n  %%b = add(%%a, 1.0)\n  return %%b\n}\n"
          "func @down(%%a: f32[%u,%u]) -> f32[%u,%u] {\n  %%b = tanh(%%a)\n  return %%b\n}\n"
          "func @more(%%i: f32[], %%a: f32[%u,%u]) -> bool[] {\n  %%k = lt(%%i, 3.0)\n  return %%k\n}\n"
          "func @step(%%i: f32[], %%a: f32[%u,%u]) -> (f32[], f32[%u,%u]) {\n  %%j = add(%%i, 1.0)\n  %%b = sin(%%a)\n"
          "  return %%j, %%b\n}\nconst %%zero : f32[] = fill(0)\n",
      d, d, d, d, d, d, d, d, d, d, d, d, d, d);
  put(&p, "const %%row : f32[%u] = fill(0.25)\nconst %%col : f32[%u,1] = fill(-0.5)\n", d, d);
  put(&p, "const %%kw : f32[16,1,3,3] = [");
  for (int k = 0; k < 144; k++) put(&p, "%s%g", k ? ", " : "", (double)((k * 7) % 13 - 6) / 8.0);
  put(&p, "]\nconst %%kv : f32[1,33,1,1] = [");
  for (int k = 0; k < 33; k++) put(&p, "%s%g", k ? ", " : "", (double)((k * 5) % 11 - 5) / 4.0);
  put(&p, "]\n");
  put(&p, "const %%cw : f32[1,1,3,3] = [[[[0.1, -0.2, 0.3], [0.5, 1, -0.5], [0.25, 0.125, -0.75]]]]\n"
          "const %%bs : f32[1] = [1.5]\nconst %%bb : f32[1] = [-0.1]\nconst %%bm : f32[1] = [0.2]\nconst %%bv : f32[1] = [0.7]\n");
  put(&p, "const %%hw : f16[2,1,3,3] = [[[[0.1, -0.2, 0.3], [0.5, 1, -0.5], [0.25, 0.125, -0.75]]], [[[-0.5, 0.25, 0], [1, 0.5, 0.125], [0.75, -1, 0.5]]]]\n"
          "const %%hs : f16[2] = [1.5, 0.75]\nconst %%hb : f16[2] = [-0.1, 0.2]\nconst %%hm : f16[2] = [0.2, -0.3]\nconst %%hv : f16[2] = [0.7, 1.2]\n"
          "const %%hw2 : f16[2,2,1,1] = [[[[0.5]], [[-0.25]]], [[[0.75]], [[0.5]]]]\nconst %%hb2 : f16[2] = [0.125, -0.25]\nconst %%cb2 : f32[1] = [0.25]\n");
  put(&p, "func @main(");
  for (uint32_t i = 0; i < nparams; i++) put(&p, "%s%%p%u: f32[%u,%u]", i ? ", " : "", i, d, d);
  uint32_t nres = 1 + rnd(3);
  put(&p, ") -> (");
  for (uint32_t i = 0; i < nres + (conv != 0); i++) put(&p, "%sf32[%u,%u]", i ? ", " : "", d, d);
  put(&p, ") {\n");
  uint32_t nv = nparams;
  char name[32];
#define VAL(k) ((k) < nparams ? (snprintf(name, sizeof name, "p%u", (k)), name) : (snprintf(name, sizeof name, "v%u", (k) - nparams), name))
  for (uint32_t i = 0; i < nops; i++, nv++) {
    uint32_t lo = nv > width ? nv - width : 0;
    uint32_t a = lo + rnd(nv - lo), b = lo + rnd(nv - lo);
    char an[32], bn[32];
    snprintf(an, sizeof an, "%s", VAL(a));
    snprintf(bn, sizeof bn, "%s", VAL(b));
    switch (rnd(17)) {
      case 16: /* a concat along axis 0, then the rows across both halves: in place where d is 8 (256-byte halves) and
                  both are ops' results, named once, not returned */
        put(&p, "  %%j%u = concat(%%%s, %%%s) {axis=0}\n  %%v%u = slice(%%j%u) {starts=[%u], ends=[%u], axes=[0]}\n", i, an, bn, i, i,
            d / 2, d / 2 + d);
        break;
      case 12: /* a chain with broadcast constants and a literal */
        put(&p, "  %%e%u = mul(%%%s, %%row)\n  %%f%u = add(%%e%u, %%col)\n  %%g%u = clip(%%f%u) {min=-2, max=2}\n"
                "  %%h%u = mul(%%g%u, 0.75)\n  %%v%u = sub(%%h%u, %%%s)\n", i, an, i, i, i, i, i, i, i, i, bn);
        break;
      case 13: /* comparisons, where and a cast through f16 */
        put(&p, "  %%c%u = gt(%%%s, %%%s)\n  %%h%u = cast(%%%s) {dtype=f16}\n  %%m%u = mul(%%h%u, 0.5)\n"
                "  %%f%u = cast(%%m%u) {dtype=f32}\n  %%v%u = where(%%c%u, %%f%u, %%%s)\n", i, an, bn, i, an, i, i, i, i, i, i, i, bn);
        break;
      case 14: /* a unary chain */
        put(&p, "  %%e%u = sigmoid(%%%s)\n  %%f%u = mul(%%e%u, %%e%u)\n  %%v%u = add(%%f%u, 1.5)\n", i, an, i, i, i, i, i);
        break;
      case 15: /* several results of one group used apart */
        put(&p, "  %%e%u = tanh(%%%s)\n  %%f%u = neg(%%e%u)\n  %%g%u = matmul(%%e%u, %%%s)\n  %%v%u = maximum(%%f%u, %%g%u)\n", i, an, i,
            i, i, i, bn, i, i, i);
        break;
      case 0: case 1: case 2: put(&p, "  %%v%u = %s(%%%s)\n", i, un[rnd(6)], an); break;
      case 3: put(&p, "  %%v%u = matmul(%%%s, %%%s)\n", i, an, bn); break;
      case 4: put(&p, "  %%v%u = call @helper(%%%s, %%%s)\n", i, an, bn); break;
      case 5: /* a view and back: aliases in the memory plan */
        put(&p, "  %%r%u = reshape(%%%s) {shape=[%u]}\n  %%w%u = tanh(%%r%u)\n  %%x%u = reshape(%%w%u) {shape=[%u,%u]}\n"
                "  %%v%u = add(%%x%u, %%%s)\n", i, an, d * d, i, i, i, i, d, d, i, i, bn);
        break;
      case 10: /* if on a value computed on the device: a host wait */
        put(&p, "  %%s%u = sum(%%%s)\n  %%k%u = gt(%%s%u, 0.0)\n  %%v%u = if(%%k%u, @up, @down, %%%s)\n", i, an, i, i, i, i, bn);
        break;
      case 11: /* a while loop: host waits each iteration */
        put(&p, "  %%t%u = tanh(%%%s)\n  %%n%u, %%v%u = while(@more, @step, %%zero, %%t%u)\n", i, an, i, i, i);
        break;
      default: put(&p, "  %%v%u = %s(%%%s, %%%s)\n", i, bin[rnd(4)], an, bn); break;
    }
  }
#undef VAL
  if (conv == 1)
    put(&p, "  %%cx = reshape(%%p0) {shape=[1,1,%u,%u]}\n  %%cc = conv2d(%%cx, %%cw) {padding=[1,1]}\n"
            "  %%cn = batch_norm(%%cc, %%bs, %%bb, %%bm, %%bv) {eps=0.001}\n  %%cr = relu(%%cn)\n"
            "  %%cd = conv2d(%%cr, %%cw, %%cb2) {padding=[1,1]}\n  %%cs = add(%%cd, %%cx)\n  %%cq = relu(%%cs)\n"
            "  %%qk = conv2d(%%cq, %%kw) {padding=[1,1]}\n  %%qs = sigmoid(%%qk)\n"
            "  %%qp = max_pool2d(%%cq) {kernel=[3,3], stride=[1,1], padding=[1,1]}\n  %%qj = concat(%%qk, %%qs, %%qp) {axis=1}\n"
            "  %%qv = conv2d(%%qj, %%kv)\n  %%qu = add(%%qv, %%qp)\n  %%cy = reshape(%%qu) {shape=[%u,%u]}\n",
        d, d, d, d);
  if (conv == 2)
    put(&p, "  %%cx = reshape(%%p0) {shape=[1,1,%u,%u]}\n  %%hx = cast(%%cx) {dtype=f16}\n  %%hc = conv2d(%%hx, %%hw) {padding=[1,1]}\n"
            "  %%hn = batch_norm(%%hc, %%hs, %%hb, %%hm, %%hv) {eps=0.001}\n  %%hr = relu(%%hn)\n"
            "  %%hd = conv2d(%%hr, %%hw2, %%hb2)\n"
            "  %%hp = max_pool2d(%%hr) {kernel=[3,3], stride=[1,1], padding=[1,1]}\n  %%he = add(%%hd, %%hp)\n  %%ha = relu(%%he)\n"
            "  %%hk = concat(%%ha, %%hr) {axis=1}\n  %%hm2 = mul(%%hk, 0.5)\n  %%hz = sum(%%hm2) {axes=[1]}\n"
            "  %%hf = cast(%%hz) {dtype=f32}\n  %%cy = reshape(%%hf) {shape=[%u,%u]}\n",
        d, d, d, d);
  put(&p, "  return ");
  for (uint32_t i = 0; i < nres; i++) put(&p, "%s%%v%u", i ? ", " : "", nops - 1 - rnd(nops < 4 ? nops : 4));
  put(&p, "%s\n}\n", conv ? ", %cy" : "");
  return p.src;
}

/* The concats main's disassembly invokes (invokes of op entries that are concats). */
static int concat_invokes(const char *text, const char *main_text) {
  int n = 0;
  for (const char *q = text; (q = strstr(q, "\nop $")) && q < main_text; q++) {
    char *end;
    long op = strtol(q + 5, &end, 10);
    if (strncmp(end, " = concat(", 10)) continue;
    char inv[48];
    int len = snprintf(inv, sizeof inv, "  invoke $%ld,", op);
    for (const char *r = main_text; (r = strstr(r, inv)); r += len) n++;
  }
  return n;
}

typedef struct outputs {
  int n;
  size_t nbytes[4];
  void *data[4];
} outputs_t;

static void outputs_free(outputs_t *o) {
  for (int i = 0; i < o->n; i++) free(o->data[i]);
}

/* Assembles with the options (asserting success) and loads the module;
 * *main_text is @main's disassembly onwards (free *text), *nstreams its stream count. */
static rill_module_t *assemble_with(const char *src, const rill_asm_options_t *opt, char **text, const char **main_text,
                                    uint32_t *nstreams) {
  uint8_t *bytes;
  size_t size, tlen;
  rill_status_t st = rill_assemble(NULL, "t.vmasm", src, strlen(src), opt, &bytes, &size);
  ck_assert_msg(!st, "%s\npolicy %s, %d streams:\n%s", st ? rill_status_message(st) : "", opt ? opt->schedule : "none",
                opt ? opt->max_streams : 0, src);
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, bytes, size, ".", &m));
  free(bytes);
  ck_assert(!rill_module_disassemble(m, text, &tlen));
  *main_text = strstr(*text, "func @main(");
  ck_assert_ptr_nonnull(*main_text);
  const char *sp = strstr(*main_text, "streams=");
  ck_assert_ptr_nonnull(sp);
  *nstreams = (uint32_t)atoi(sp + 8);
  return m;
}

/* Assembles with the options, runs @main on the CPU and keeps the results.
 * Captured: @main in graph mode (RILL_GRAPH_ON), invoked first with other
 * inputs (the warm-up run, then the capture), and the results kept are a
 * replay's with `inputs`, so a graph that kept its first inputs fails.
 * Returns main's stream count. */
static uint32_t run_mode(const char *src, const rill_asm_options_t *opt, const float *inputs, uint32_t nparams,
                         uint32_t d, bool captured, outputs_t *out) {
  char *text;
  const char *body;
  uint32_t nstreams;
  rill_module_t *m = assemble_with(src, opt, &text, &body, &nstreams);
  free(text);
  rill_status_t st;
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  /* Every buffer access checked against the streams' order too: a schedule
   * or memory plan that lets two streams touch a slot unordered fails here
   * even when the threads happen not to race. */
  rill_vm_set_check_streams(vm, true);
  rill_tensor_t *in[8];
  rill_type_t t = T(RILL_F32, 2, (int64_t)d, (int64_t)d);
  rill_tensor_t **r;
  int n;
  if (captured) {
    ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
    float *other = malloc(sizeof(float) * nparams * d * d);
    for (uint32_t i = 0; i < nparams * d * d; i++) other[i] = 0.5f - inputs[i];
    for (int k = 0; k < 2; k++) {
      for (uint32_t i = 0; i < nparams; i++) ck_assert(!rill_tensor_create(vm, &t, other + (size_t)i * d * d, &in[i]));
      st = rill_vm_invoke(vm, "main", in, (int)nparams, &r, &n);
      ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
      rill_results_free(vm, r, n);
      for (uint32_t i = 0; i < nparams; i++) rill_tensor_release(in[i]);
    }
    free(other);
  }
  for (uint32_t i = 0; i < nparams; i++) ck_assert(!rill_tensor_create(vm, &t, inputs + (size_t)i * d * d, &in[i]));
  st = rill_vm_invoke(vm, "main", in, (int)nparams, &r, &n);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  if (captured) {
    rill_graph_info_t gi;
    ck_assert(rill_vm_graph_info(vm, "main", &gi));
    ck_assert_msg(gi.instances == 1 && gi.replays >= 1, "not replayed (%d instances, %llu replays): %s", gi.instances,
                  (unsigned long long)gi.replays, gi.reason);
  }
  out->n = n;
  for (int i = 0; i < n; i++) {
    out->nbytes[i] = rill_tensor_nbytes(r[i]);
    out->data[i] = malloc(out->nbytes[i]);
    ck_assert(!rill_tensor_read(r[i], out->data[i], out->nbytes[i]));
  }
  rill_results_free(vm, r, n);
  for (uint32_t i = 0; i < nparams; i++) rill_tensor_release(in[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
  return nstreams;
}

static uint32_t run_with(const char *src, const rill_asm_options_t *opt, const float *inputs, uint32_t nparams,
                         uint32_t d, outputs_t *out) {
  return run_mode(src, opt, inputs, nparams, d, false, out);
}

static const rill_asm_options_t ONE_STREAM = {.schedule = "none", .no_opt = true};

/* Results at -O1 against -O0: fusion and constant folding run the same
 * steps with the same rounding on the CPU, so they are equal bit for bit;
 * a folded batch norm rounds its weights once, so the conv result (the
 * last with `conv`) is compared within f32 rounding, or f16's (conv 2). */
static void check_opt_results(const outputs_t *got, const outputs_t *want, int conv, const char *policy, const char *src) {
  ck_assert_int_eq(got->n, want->n);
  for (int i = 0; i < got->n; i++) {
    ck_assert_uint_eq(got->nbytes[i], want->nbytes[i]);
    if (!(conv && i == got->n - 1)) {
      ck_assert_msg(!memcmp(got->data[i], want->data[i], want->nbytes[i]), "-O1 result %d differs from -O0 under %s:\n%s", i, policy, src);
      continue;
    }
    const float *a = got->data[i], *b = want->data[i];
    float tol = conv == 2 ? 2e-2f : 1e-5f;
    for (size_t k = 0; k < want->nbytes[i] / 4; k++)
      ck_assert_msg(fabsf(a[k] - b[k]) <= tol * (1 + fabsf(b[k])), "-O1 conv result [%zu]: %g vs %g under %s:\n%s", k, a[k], b[k], policy, src);
  }
}

START_TEST(random_graphs_match_one_stream) {
  int programs = 0, multi = 0, replayed = 0, fused = 0, folded = 0, channels_last = 0, in_place = 0, in_place_random = 0;
  for (int k = 0; k < 240; k++) {
    uint32_t nops = 1 + rnd(k < 120 ? 24 : 120), width = 1 + rnd(16), nparams = 1 + rnd(3), d = 2 + rnd(7);
    int conv = rnd(3) == 0 ? 1 + (int)rnd(2) : 0;
    char *src = random_program(nops, width, nparams, d, conv);
    float *inputs = malloc(sizeof(float) * nparams * d * d);
    for (uint32_t i = 0; i < nparams * d * d; i++) inputs[i] = (float)rnd(2001) / 1000.0f - 1.0f;
    outputs_t want = {0};
    ck_assert_uint_eq(run_with(src, &ONE_STREAM, inputs, nparams, d, &want), 1);
    /* Every policy at -O0 and -O1 interpreted, and every other program's
     * schedules also captured and replayed (the same graph of tasks and
     * event edges). */
    bool capture = k % 2 == 0;
    for (size_t p = 0; p < sizeof POLICIES / sizeof *POLICIES; p++)
      for (int o1 = 0; o1 < 2; o1++) {
        rill_asm_options_t opt = {.schedule = POLICIES[p], .max_streams = (int)(1 + rnd(8)), .no_opt = !o1};
        for (int c = 0; c <= (int)capture; c++) {
          outputs_t got = {0};
          uint32_t ns = run_mode(src, &opt, inputs, nparams, d, c, &got);
          ck_assert_uint_le(ns, (uint32_t)opt.max_streams);
          multi += ns > 1 && !o1 && !c;
          replayed += c && ns > 1;
          if (o1) {
            check_opt_results(&got, &want, conv, c ? "a replay" : POLICIES[p], src);
          } else {
            ck_assert_int_eq(got.n, want.n);
            for (int i = 0; i < got.n; i++) {
              ck_assert_uint_eq(got.nbytes[i], want.nbytes[i]);
              ck_assert_msg(!memcmp(got.data[i], want.data[i], want.nbytes[i]), "result %d differs under %s (%d streams%s):\n%s",
                            i, POLICIES[p], opt.max_streams, c ? ", replayed" : "", src);
            }
          }
          outputs_free(&got);
        }
      }
    /* What -O1 did to the program. */
    char *text;
    const char *body;
    uint32_t ns;
    rill_asm_options_t o1 = {.schedule = "none"};
    rill_module_t *m = assemble_with(src, &o1, &text, &body, &ns);
    int groups = 0; /* @helper's mul and add are one */
    for (const char *q = text; (q = strstr(q, "= fused(")); q++) groups++;
    fused += groups > 1;
    folded += conv && !strstr(text, "batch_norm");
    ck_assert_msg(!conv || !strstr(text, "batch_norm"), "batch_norm not folded:\n%s", text);
    /* the residual block: one conv2d with the shortcut as its fourth operand and the relu as its activation */
    ck_assert_msg(conv != 1 || strstr(text, "f32[1], f32[1,1,"), "f32 residual not merged:\n%.3000s", text);
    ck_assert_msg(conv != 2 || strstr(text, "f16[2], f16[1,"), "f16 residual not merged:\n%.3000s", text);
    /* f16: the convolution and the pool channels-last; one channel goes in
     * by a reshape (no data moves), four come back by one transpose (before the sum). */
    if (conv == 2) {
      int lay = 0, tr = 0;
      for (const char *q = text; (q = strstr(q, "layout=\"nhwc\"")); q++) lay++;
      for (const char *q = text; (q = strstr(q, "= transpose(")); q++) tr++;
      ck_assert_msg(lay == 3 && tr == 1, "f16 convs and pool: %d channels-last ops, %d transposes:\n%s", lay, tr, text);
      channels_last++;
    }
    /* Concats written in place: the f32 block's where d is even (and no other left out of the count below). */
    int concats = 0, left = concat_invokes(text, body);
    for (const char *q = src; (q = strstr(q, "= concat(")); q++) concats++;
    if (conv == 1) {
      bool kept = strstr(text, "= concat(f32[1,16,") != NULL;
      ck_assert_msg(kept == (d % 2 == 1), "f32 block's concat (d = %u) %s:\n%s", d, kept ? "kept" : "in place", text);
      in_place += !kept;
      concats -= !kept;
    }
    ck_assert_int_le(left, concats);
    in_place_random += concats - left;
    free(text);
    rill_module_release(m);
    outputs_free(&want);
    free(inputs);
    free(src);
    programs++;
  }
  printf("schedules: %d random programs x %zu policies at -O0 and -O1, %d schedules used several streams, %d replayed; "
         "-O1 fused groups of @main in %d programs, folded %d batch norms, made %d f16 convolutions channels-last and wrote "
         "%d f32 blocks' concats and %d other concats in place\n", programs,
         sizeof POLICIES / sizeof *POLICIES, multi, replayed, fused, folded, channels_last, in_place, in_place_random);
  /* The property means little unless many schedules really were parallel, and -O1 really changed programs. */
  ck_assert_int_gt(multi, programs);
  ck_assert_int_gt(replayed, programs / 2);
  ck_assert_int_gt(fused, programs / 2);
  ck_assert_int_gt(folded, 0);
  ck_assert_int_gt(in_place, 0);
}
END_TEST

/* Counts an instruction's lines in main's disassembly. */
static int count_in_main(const char *src, const char *policy, int max_streams, const char *what, uint32_t *nstreams) {
  rill_asm_options_t opt = {.schedule = policy, .max_streams = max_streams, .no_opt = true};
  char *text;
  const char *body;
  rill_module_t *m = assemble_with(src, &opt, &text, &body, nstreams);
  int n = 0;
  for (const char *q = body; (q = strstr(q, what)); q += strlen(what)) n++;
  free(text);
  rill_module_release(m);
  return n;
}

START_TEST(known_shapes) {
  /* Two independent chains joined at the end: every policy uses two
   * streams, one event across (plus the fork and join), and a straight
   * line stays on one stream. */
  const char *two = "func @main(%x: f32[8,8]) -> f32[8,8] {\n  %a = tanh(%x)\n  %b = exp(%a)\n  %c = sigmoid(%x)\n  %d = relu(%c)\n"
                    "  %e = add(%b, %d)\n  return %e\n}\n";
  const char *line = "func @main(%x: f32[8,8]) -> f32[8,8] {\n  %a = tanh(%x)\n  %b = exp(%a)\n  %c = sigmoid(%b)\n  return %c\n}\n";
  for (size_t p = 0; p < sizeof POLICIES / sizeof *POLICIES; p++) {
    uint32_t ns;
    /* one cross-stream edge: one record and one wait, plus the fork's record and the join's record per stream */
    int waits = count_in_main(two, POLICIES[p], 4, "cuda_wait_event", &ns);
    ck_assert_uint_eq(ns, 2);
    ck_assert_int_eq(waits, 1 + 1 + 1); /* fork, the edge, join */
    ck_assert_int_eq(count_in_main(line, POLICIES[p], 4, "cuda_wait_event", &ns), 0);
    ck_assert_uint_eq(ns, 1);
    /* max-streams=1 means one stream whatever the policy */
    ck_assert_int_eq(count_in_main(two, POLICIES[p], 1, "cuda_set_stream", &ns), 0);
    ck_assert_uint_eq(ns, 1);
  }
  /* No options: the default policy, rank (the best measured on the models,
   * bench/RESULTS.md), four streams at most. */
  uint8_t *b1, *b2;
  size_t n1, n2;
  const rill_asm_options_t rank = {.schedule = "rank"};
  ck_assert(!rill_assemble(NULL, "t.vmasm", two, strlen(two), NULL, &b1, &n1));
  ck_assert(!rill_assemble(NULL, "t.vmasm", two, strlen(two), &rank, &b2, &n2));
  ck_assert(n1 == n2 && memcmp(b1, b2, n1) == 0);
  free(b1);
  free(b2);
  /* A fan of eight independent ops under a limit of three streams. */
  const char *fan = "func @main(%x: f32[8,8]) -> f32[8,8] {\n  %a = tanh(%x)\n  %b = exp(%x)\n  %c = sigmoid(%x)\n  %d = relu(%x)\n"
                    "  %e = neg(%x)\n  %f = sin(%x)\n  %g = cos(%x)\n  %h = abs(%x)\n  %i = add(%a, %b)\n  %j = add(%c, %d)\n"
                    "  %k = add(%e, %f)\n  %l = add(%g, %h)\n  %m = add(%i, %j)\n  %n = add(%k, %l)\n  %o = add(%m, %n)\n  return %o\n}\n";
  for (size_t p = 0; p < sizeof POLICIES / sizeof *POLICIES; p++) {
    uint32_t ns;
    count_in_main(fan, POLICIES[p], 3, "invoke", &ns);
    ck_assert_msg(ns >= 2 && ns <= 3, "%s used %u streams", POLICIES[p], ns);
  }
}
END_TEST

/* Four interleaved chains (op i reads ops i - 4 and, for some ops, i - 7),
 * the assembler benchmark's pathological case: most streams seldom wait for
 * each other, so without barriers a slot read on one stream was never
 * provably free for another (56 slots at 400 ops under wavefront, 2,506 at
 * 20,000, where one stream needs 7). Slots stay within the memory plan's
 * bound (4 x one stream's + the streams), and results match one stream with
 * every access checked against the streams' order. */
static char *interleaved(uint32_t n) {
  prog_t p = {0};
  put(&p, "func @helper(%%a: f32[8,8]) -> f32[8,8] {\n  %%b = tanh(%%a)\n  return %%b\n}\n"
          "func @main(%%x: f32[8,8]) -> f32[8,8] {\n  %%v0 = relu(%%x)\n");
  static const char *const op[8] = {"add", "mul", "sigmoid", "sub", "call @helper", "maximum", "neg", "transpose"};
  for (uint32_t i = 1; i < n; i++) {
    uint32_t a = i >= 4 ? i - 4 : 0, b = i > 7 ? i - 7 : 0, k = i % 8;
    if (k == 0 || k == 3 || k == 5) put(&p, "  %%v%u = %s(%%v%u, %%v%u)\n", i, op[k], a, b);
    else if (k == 1) put(&p, "  %%v%u = mul(%%v%u, 0.5)\n", i, a);
    else if (k == 7) put(&p, "  %%v%u = transpose(%%v%u) {perm=[1, 0]}\n", i, a);
    else put(&p, "  %%v%u = %s(%%v%u)\n", i, op[k], a);
  }
  put(&p, "  return %%v%u\n}\n", n - 1);
  return p.src;
}

START_TEST(slots_stay_bounded) {
  char *src = interleaved(400);
  uint32_t ns;
  int one = count_in_main(src, "none", 1, "alloc_storage", &ns);
  float inputs[64];
  for (int i = 0; i < 64; i++) inputs[i] = (float)rnd(2001) / 1000.0f - 1.0f;
  outputs_t want = {0};
  run_with(src, &ONE_STREAM, inputs, 1, 8, &want);
  for (size_t p = 0; p < sizeof POLICIES / sizeof *POLICIES; p++) {
    int slots = count_in_main(src, POLICIES[p], 4, "alloc_storage", &ns);
    ck_assert_uint_eq(ns, 4);
    ck_assert_msg(slots <= 4 * one + 4, "%s: %d slots where one stream needs %d", POLICIES[p], slots, one);
    rill_asm_options_t opt = {.schedule = POLICIES[p], .max_streams = 4, .no_opt = true};
    outputs_t got = {0};
    run_with(src, &opt, inputs, 1, 8, &got);
    ck_assert_int_eq(got.n, 1);
    ck_assert_msg(!memcmp(got.data[0], want.data[0], want.nbytes[0]), "result differs under %s", POLICIES[p]);
    outputs_free(&got);
  }
  outputs_free(&want);
  free(src);
}
END_TEST

/* Lowered form, so the program is taken as written: stream 1 writes %a into
 * the slot, stream 0 then writes %b into the same slot with no event between
 * them (or, with `fixed`, after waiting for stream 1). */
static const char *slot_race(bool fixed) {
  return fixed ? "op $0 = tanh(f32[16]) -> (f32[16])\nop $1 = sigmoid(f32[16]) -> (f32[16])\nop $2 = add(f32[16], f32[16]) -> (f32[16])\n"
                 "func @main(%x: f32[16]) -> (f32[16]) lowered(streams=2, events=2) {\n  reg %a : f32[16]\n  reg %b : f32[16]\n"
                 "  reg %c : f32[16]\n  reg %slot : storage(64)\n  alloc_storage %slot\n  cuda_add_event 1, 0\n  cuda_wait_event 1, 1\n"
                 "  cuda_set_stream 1\n  view %a, %slot, 0\n  invoke $0, (%x), (%a)\n  cuda_add_event 0, 1\n  cuda_set_stream 0\n"
                 "  alloc_tensor %c\n  invoke $2, (%x, %x), (%c)\n  cuda_wait_event 0, 0\n  view %b, %slot, 0\n  invoke $1, (%x), (%b)\n"
                 "  invoke $2, (%b, %c), (%c)\n  return (%c)\n}\n"
               : "op $0 = tanh(f32[16]) -> (f32[16])\nop $1 = sigmoid(f32[16]) -> (f32[16])\nop $2 = add(f32[16], f32[16]) -> (f32[16])\n"
                 "func @main(%x: f32[16]) -> (f32[16]) lowered(streams=2, events=2) {\n  reg %a : f32[16]\n  reg %b : f32[16]\n"
                 "  reg %c : f32[16]\n  reg %slot : storage(64)\n  alloc_storage %slot\n  cuda_add_event 1, 0\n  cuda_wait_event 1, 1\n"
                 "  cuda_set_stream 1\n  view %a, %slot, 0\n  invoke $0, (%x), (%a)\n  cuda_add_event 0, 1\n  cuda_set_stream 0\n"
                 "  alloc_tensor %c\n  invoke $2, (%x, %x), (%c)\n  view %b, %slot, 0\n  invoke $1, (%x), (%b)\n"
                 "  cuda_wait_event 0, 0\n  invoke $2, (%b, %c), (%c)\n  return (%c)\n}\n";
}

/* Lowered form: streams 1 and 0 write the two halves of a slot at once
 * (%a at 0, %b at 64 bytes: no bytes in common), then stream 0 reads the
 * whole slot as %y before it waits for stream 1 (or, with `fixed`, after). */
static const char *halves_race(bool fixed) {
  static char src[2][1024];
  char *s = src[fixed];
  snprintf(s, sizeof src[0],
           "op $0 = tanh(f32[16]) -> (f32[16])\nop $1 = sigmoid(f32[16]) -> (f32[16])\nop $2 = neg(f32[32]) -> (f32[32])\n"
           "func @main(%%x: f32[16]) -> (f32[32]) lowered(streams=2, events=2) {\n  reg %%a : f32[16]\n  reg %%b : f32[16]\n"
           "  reg %%y : f32[32]\n  reg %%z : f32[32]\n  reg %%slot : storage(128)\n  alloc_storage %%slot\n  cuda_add_event 1, 0\n"
           "  cuda_wait_event 1, 1\n  cuda_set_stream 1\n  view %%a, %%slot, 0\n  invoke $0, (%%x), (%%a)\n  cuda_add_event 0, 1\n"
           "  cuda_set_stream 0\n  view %%b, %%slot, 64\n  invoke $1, (%%x), (%%b)\n%s  view %%y, %%slot, 0\n  alloc_tensor %%z\n"
           "  invoke $2, (%%y), (%%z)\n%s  return (%%z)\n}\n",
           fixed ? "  cuda_wait_event 0, 0\n" : "", fixed ? "" : "  cuda_wait_event 0, 0\n");
  return s;
}

static rill_status_t run_checked(const char *src, bool check) {
  uint8_t *bytes;
  size_t size;
  rill_status_t st = rill_assemble(NULL, "race.vmasm", src, strlen(src), NULL, &bytes, &size);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, bytes, size, ".", &m));
  free(bytes);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  rill_vm_set_check_streams(vm, check);
  rill_type_t t = T(RILL_F32, 1, (int64_t)16);
  float x[16] = {0};
  rill_tensor_t *in, **r = NULL;
  int n = 0;
  ck_assert(!rill_tensor_create(vm, &t, x, &in));
  st = rill_vm_invoke(vm, "main", &in, 1, &r, &n);
  if (!st) rill_results_free(vm, r, n);
  rill_tensor_release(in);
  rill_vm_destroy(vm);
  rill_module_release(m);
  return st;
}

START_TEST(check_streams) {
  /* The verifier orders values, not the storage they share: this runs. */
  ck_assert_ptr_null(run_checked(slot_race(false), false));
  rill_status_t st = run_checked(slot_race(false), true);
  ck_assert_ptr_nonnull(st);
  const char *msg = rill_status_message(st);
  ck_assert_msg(strstr(msg, "sigmoid on stream 0 writes %b") && strstr(msg, "(tanh) on stream 1 wrote") &&
                    strstr(msg, "no event orders"), "%s", msg);
  rill_status_free(st);
  /* With the wait before the second write, no report. */
  ck_assert_ptr_null(run_checked(slot_race(true), true));
  /* Accesses race only where their bytes meet: the halves' writes do not
   * (an in-place concat's operands), the read of the whole after one of
   * them with no event does. */
  st = run_checked(halves_race(false), true);
  ck_assert_ptr_nonnull(st);
  msg = rill_status_message(st);
  ck_assert_msg(strstr(msg, "neg on stream 0 reads %y") && strstr(msg, "(tanh) on stream 1 wrote"), "%s", msg);
  rill_status_free(st);
  ck_assert_ptr_null(run_checked(halves_race(true), true));
}
END_TEST

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(fread(b, 1, (size_t)n, f), n);
  b[n] = 0;
  fclose(f);
  return b;
}

static const char *BRANCHES =
    "func @mix(%a: f32[16,16], %b: f32[16,16]) -> f32[16,16] {\n  %c = mul(%a, 0.5)\n  %d = add(%c, %b)\n  return %d\n}\n"
    "func @main(%x: f32[16,16], %w: f32[16,16]) -> (f32[16,16], f32[16,16]) {\n  %a = matmul(%x, %w)\n  %b = tanh(%x)\n"
    "  %c = sigmoid(%x)\n  %d = exp(%b)\n  %e = mul(%c, %d)\n  %f = matmul(%a, %w)\n  %g = call @mix(%e, %f)\n"
    "  %h = relu(%g)\n  %i = neg(%c)\n  return %h, %i\n}\n";

/* BRANCHES scheduled by rank on three streams, on a cpu VM with its inputs. */
typedef struct branches {
  rill_module_t *m;
  rill_vm_t *vm;
  rill_tensor_t *in[2];
} branches_t;

static void branches_open(branches_t *b) {
  rill_asm_options_t opt = {.schedule = "rank", .max_streams = 3, .no_opt = true};
  char *text;
  const char *body;
  uint32_t nstreams;
  b->m = assemble_with(BRANCHES, &opt, &text, &body, &nstreams);
  free(text);
  ck_assert_uint_eq(nstreams, 3);
  ck_assert(!rill_vm_create(NULL, b->m, "cpu", &b->vm));
  rill_type_t t = T(RILL_F32, 2, (int64_t)16, (int64_t)16);
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = (float)(i % 17) / 17.0f - 0.5f;
  ck_assert(!rill_tensor_create(b->vm, &t, x, &b->in[0]));
  ck_assert(!rill_tensor_create(b->vm, &t, x, &b->in[1]));
}

static void branches_run(branches_t *b, int runs) {
  for (int k = 0; k < runs; k++) {
    rill_tensor_t **r;
    int n;
    ck_assert(!rill_vm_invoke(b->vm, "main", b->in, 2, &r, &n));
    rill_results_free(b->vm, r, n);
  }
}

static void branches_close(branches_t *b) {
  rill_tensor_release(b->in[0]);
  rill_tensor_release(b->in[1]);
  rill_vm_destroy(b->vm);
  rill_module_release(b->m);
}

START_TEST(traces) {
  branches_t br;
  branches_open(&br);
  rill_vm_t *vm = br.vm;
  rill_status_t st = rill_vm_trace_write(vm, "never.json"); /* not tracing */
  ck_assert_ptr_nonnull(st);
  rill_status_free(st);
  ck_assert(!rill_vm_set_tracing(vm, true));
  const int runs = 3;
  branches_run(&br, runs);
  rill_trace_summary_t sum;
  ck_assert(!rill_vm_trace_summary(vm, &sum));
  ck_assert_uint_eq(sum.runs, (uint32_t)runs);
  ck_assert_uint_eq(sum.ops, (uint64_t)runs * 10); /* 8 ops in main, 2 in @mix */
  ck_assert_int_eq(sum.nstreams, 3);
  for (int k = 0; k < sum.nstreams; k++) ck_assert(sum.busy[k] >= 0 && sum.busy[k] <= 1.0001);
  ck_assert(sum.critical_ops >= 1 && sum.critical_ops <= 10);
  ck_assert(sum.critical_us >= 0 && sum.critical_us <= sum.span_us * 1.0001 + 1e-3);

  char path[] = "/tmp/rill-trace-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  ck_assert(!rill_vm_trace_write(vm, path));
  char *json = slurp(path);
  ck_assert_ptr_nonnull(json);
  cJSON *root = cJSON_Parse(json);
  ck_assert_ptr_nonnull(root);
  const cJSON *ev = cJSON_GetObjectItem(root, "traceEvents"), *e;
  ck_assert(cJSON_IsArray(ev));
  int ops = 0, dispatch = 0, names = 0, starts = 0, finishes = 0;
  double last_end[8] = {0};
  cJSON_ArrayForEach(e, ev) {
    const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
    int tid = cJSON_GetObjectItem(e, "tid")->valueint;
    if (!strcmp(ph, "M")) { names++; continue; }
    double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
    if (!strcmp(ph, "X")) {
      double dur = cJSON_GetObjectItem(e, "dur")->valuedouble;
      ck_assert(dur >= 0 && ts >= 0);
      if (!strcmp(cJSON_GetObjectItem(e, "cat")->valuestring, "dispatch")) { dispatch++; continue; }
      ops++;
      ck_assert(tid >= 1 && tid < 8);
      /* A stream runs one op at a time, in issue order. */
      ck_assert_msg(ts >= last_end[tid] - 1e-3, "ops overlap on track %d", tid);
      last_end[tid] = ts + dur;
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      /* The arrow's end (the op after a wait) is no earlier than its start
       * (the op before the record): the wait held. */
      int id = cJSON_GetObjectItem(e, "id")->valueint;
      if (ph[0] == 's') {
        starts++;
        const cJSON *g;
        cJSON_ArrayForEach(g, ev) {
          const cJSON *gp = cJSON_GetObjectItem(g, "ph"), *gi = cJSON_GetObjectItem(g, "id");
          if (gp && gi && !strcmp(gp->valuestring, "f") && gi->valueint == id)
            ck_assert(cJSON_GetObjectItem(g, "ts")->valuedouble >= ts - 1e-3);
        }
      } else {
        finishes++;
      }
    }
  }
  ck_assert_int_eq(ops, runs * 10);
  ck_assert_int_eq(dispatch, runs * 10);
  ck_assert_int_eq(names, 1 + 3);
  ck_assert_int_gt(starts, 0);
  ck_assert_int_eq(starts, finishes);
  cJSON_Delete(root);
  free(json);
  /* Written: the records are gone; a bad path fails whole. */
  ck_assert(!rill_vm_trace_summary(vm, &sum));
  ck_assert_uint_eq(sum.ops, 0);
  st = rill_vm_trace_write(vm, "/nonexistent-dir/t.json");
  ck_assert_ptr_nonnull(st);
  ck_assert_ptr_nonnull(strstr(rill_status_message(st), "/nonexistent-dir/t.json"));
  rill_status_free(st);
  unlink(path);
  branches_close(&br);
}
END_TEST

/* Profiling times each launch with device marks, alone or with tracing on. */
START_TEST(profiling) {
  branches_t br;
  branches_open(&br);
  rill_vm_t *vm = br.vm;
  for (int traced = 0; traced < 2; traced++) {
    ck_assert(!rill_vm_set_profiling(vm, true));
    ck_assert(!rill_vm_set_tracing(vm, traced));
    branches_run(&br, 4);
    uint64_t calls = 0, matmuls = 0;
    for (int i = 0; i < rill_vm_op_count(vm); i++) {
      rill_op_stats_t os;
      ck_assert(rill_vm_op_stats(vm, i, &os));
      calls += os.calls;
      if (!strcmp(os.name, "matmul")) matmuls += os.calls;
      ck_assert(os.seconds >= 0 && (os.calls == 0 || os.seconds > 0));
    }
    ck_assert_uint_eq(calls, 4 * 10);  /* 10 launches a run */
    ck_assert_uint_eq(matmuls, 4 * 2);
    if (traced) {
      rill_trace_summary_t sum;
      ck_assert(!rill_vm_trace_summary(vm, &sum));
      ck_assert_uint_eq(sum.ops, 4 * 10);
    }
    ck_assert(!rill_vm_set_profiling(vm, false)); /* and the counts start again */
  }
  branches_close(&br);
}
END_TEST

/* The seeds' case: two independent convolutions. With a profile where two
 * at once take twice as long as one (each fills the GPU), ios keeps them on
 * one stream; where two take no longer than one, on two. */
START_TEST(ios_follows_the_profile) {
  /* Joined by an add, and both returned (no op after them). */
  const char *srcs[2] = {
      "func @main(%x: f32[1,64,15,15], %w1: f32[64,64,3,3], %w2: f32[64,64,3,3]) -> f32[1,64,13,13] {\n"
      "  %a = conv2d(%x, %w1)\n  %b = conv2d(%x, %w2)\n  %c = add(%a, %b)\n  return %c\n}\n",
      "func @main(%x: f32[1,64,15,15], %w1: f32[64,64,3,3], %w2: f32[64,64,3,3]) -> (f32[1,64,13,13], f32[1,64,13,13]) {\n"
      "  %a = conv2d(%x, %w1)\n  %b = conv2d(%x, %w2)\n  return %a, %b\n}\n"};
  const char *src = srcs[_i];
  char *text;
  const char *body;
  uint32_t ns;
  rill_asm_options_t model = {.schedule = "ios"};
  rill_module_t *m = assemble_with(src, &model, &text, &body, &ns);
  rill_module_release(m);
  ck_assert_uint_eq(ns, 2); /* the cost model alone: two streams */
  const char *conv = strstr(text, "op $0 = conv2d");
  ck_assert_ptr_nonnull(conv);
  conv += strlen("op $0 = ");
  int len = (int)(strchr(conv, '\n') - conv);
  char path[] = "/tmp/rill-profile-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  const double two[2] = {200, 100};
  const uint32_t want[2] = {1, 2};
  for (int k = 0; k < 2; k++) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"device\": \"test\", \"ops\": [{\"op\": \"%.*s\", \"us\": 100, \"two_us\": %g}]}\n", len, conv, two[k]);
    fclose(f);
    rill_asm_options_t opt = {.schedule = "ios", .profile = path};
    char *t2;
    rill_module_t *m2 = assemble_with(src, &opt, &t2, &body, &ns);
    ck_assert_msg(ns == want[k], "program %d, two at once in %g us: %u streams", _i, two[k], ns);
    free(t2);
    rill_module_release(m2);
  }
  unlink(path);
  free(text);
}
END_TEST

START_TEST(bad_options) {
  const char *src = "func @main(%x: f32[2]) -> f32[2] {\n  %a = tanh(%x)\n  return %a\n}\n";
  uint8_t *bytes = NULL;
  size_t size;
  rill_asm_options_t opt = {.schedule = "fastest"};
  rill_status_t st = rill_assemble(NULL, "t.vmasm", src, strlen(src), &opt, &bytes, &size);
  ck_assert_ptr_nonnull(st);
  ck_assert_ptr_nonnull(strstr(rill_status_message(st), "unknown schedule policy 'fastest'"));
  ck_assert_ptr_nonnull(strstr(rill_status_message(st), "wavefront"));
  rill_status_free(st);
  opt = (rill_asm_options_t){.schedule = "rank", .max_streams = 65};
  st = rill_assemble(NULL, "t.vmasm", src, strlen(src), &opt, &bytes, &size);
  ck_assert_ptr_nonnull(st);
  ck_assert_ptr_nonnull(strstr(rill_status_message(st), "--max-streams"));
  rill_status_free(st);
}
END_TEST

int main(void) {
  rng = (uint64_t)time(NULL) | 1;
  printf("random seed %llu\n", (unsigned long long)rng);
  Suite *s = suite_create("schedule");
  TCase *t = tcase_create("schedule");
  tcase_set_timeout(t, 600);
  tcase_add_test(t, random_graphs_match_one_stream);
  tcase_add_test(t, known_shapes);
  tcase_add_test(t, slots_stay_bounded);
  tcase_add_test(t, check_streams);
  tcase_add_test(t, traces);
  tcase_add_loop_test(t, ios_follows_the_profile, 0, 2);
  tcase_add_test(t, profiling);
  tcase_add_test(t, bad_options);
  suite_add_tcase(s, t);
  return run_suite(s);
}
