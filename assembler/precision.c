/* precision.c: --precision=f16|bf16, an f32 function computed in half.
 *
 * Runs after fold (so batch norms are already in their convolutions'
 * weights) and before layout and fuse (so the half convolutions go
 * channels-last and the casts this pass adds fuse into their neighbours),
 * at -O0 too: the mode is what the program computes, not an optimisation.
 *
 * Ops that lose little in half (products and convolutions, which
 * accumulate in f32 on every device; data movement; pools; the
 * elementwise ops whose results stay in the operands' range, a division
 * by constants of magnitude 1 and more among them) take their
 * f32 operands in half and make half results. Every other op, or node
 * (softmax and log_softmax, the norms, reductions, exp, log, pow, div,
 * casts, calls and returns), gets its operands in f32, from one cast per
 * value, so accumulations and anything that needs f32's range stay in
 * f32, and parameters and results keep their declared f32 types; a
 * softmax, layer norm, reduction or adaptive pool whose operand is half
 * and whose readers all take half runs on the half operand (ROW_OPS). A
 * constant with its data at hand is rounded here, once (a new constant);
 * a linked one is cast at run time. An op that the registry does not
 * accept in half, or whose constant operands or float attributes hold a
 * finite value past half's range (a mask's -1e9), stays in f32, and so
 * do a written-out norm's statistics (stat_op). Functions with stream
 * statements are left as written.
 */
#include <math.h>
#include <stdio.h>

#include "asm.h"

/* Ops computed in half when their f32 operands are: the N_PRODUCTS
 * products first (accumulate in f32 on the cpu device, cuDNN and
 * cuBLASLt), then N_DATA that move or select data, then elementwise ops
 * whose results stay in the operands' range (or are bounded). */
#define N_PRODUCTS 5
#define N_DATA 16
static const char *const HALF_OPS[] = {
    "matmul", "linear", "conv2d", "conv_transpose", "attention",
    "reshape", "flatten", "transpose", "squeeze", "unsqueeze", "broadcast_to", "concat", "split", "slice", "copy",
    "pad", "gather", "where", "resize", "max_pool2d", "avg_pool2d",
    "neg", "abs", "relu", "sigmoid", "tanh", "silu", "gelu", "leaky_relu", "clip", "erf", "floor", "ceil",
    "swiglu", "geglu", "add", "sub", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
};

/* Ops whose arithmetic is f32 whether their operand is f32 or half (the
 * kernels load half into f32, accumulate in f32 and round the result
 * once): one whose operand is already half and whose every reader takes
 * its result in half runs on the half operand and makes a half result,
 * its other operands (a layer norm's gamma and beta) left in f32. The
 * same values as the f32 op and a cast after it, less the double rounding,
 * without the two casts and the f32 activations between them (a
 * transformer's norms, a squeeze-and-excitation block's pool). */
static const char *const ROW_OPS[] = {"softmax", "log_softmax", "layer_norm", "sum", "mean", "max", "min", "adaptive_avg_pool2d"};

/* HALF_OPS' index of name, or -1. */
static int half_op(const char *name) {
  for (size_t i = 0; i < RILL_ARRAY_LEN(HALF_OPS); i++)
    if (!strcmp(HALF_OPS[i], name)) return (int)i;
  return -1;
}

/* Statistics and squares: a norm written out (a group or instance norm as
 * importers write it: mean, x - mean, its square, their mean, + eps,
 * rsqrt) keeps them in f32, as a norm op does. An elementwise op that
 * reads a mean or sum (or a move of one) stays in f32 (x - mean: STAT),
 * and so does a square (mul(a, a)) and every op but a product computed
 * from one (SQUARE: a variance, its + eps): a square has twice its
 * operand's exponent, and in f16 the squares of deviations past 256 were
 * inf, the variance inf, the group 0. */
static bool stat_op(const char *name) { return !strcmp(name, "mean") || !strcmp(name, "sum"); }

enum { STAT = 1, SQUARE = 2 };

typedef struct prec {
  asm_ctx_t *c;
  bool *half_reads;          /* value (< nvals) that only op nodes computed in half read */
  uint8_t *stat;             /* value (< nvals): STAT (a stat_op's result), SQUARE (a square, or computed from one) */
  int8_t *big;               /* value (< nvals): a constant past the half dtype's range (1), not (0), not yet seen (-1) */
  ir_func_t *f;
  rill_dtype_t h;            /* f16 or bf16 */
  RILL_VEC(ir_node_t) out;   /* the new node list */
  size_t nvals;              /* values before the pass */
  bool *halved;              /* value (< nvals) that was f32 and is now half */
  int32_t *as_half;          /* value -> its half twin, or -1 */
  int32_t *as_f32;           /* halved value -> an f32 twin, or -1 */
  isa_attr_t *cast_attr[2];  /* {dtype=h}, {dtype=f32} */
} prec_t;

/* A new value of type t named after value v with `suffix`. */
static rill_status_t new_value(prec_t *P, uint32_t v, const rill_type_t *t, uint32_t *out) {
  asm_ctx_t *c = P->c;
  const ir_value_t *x = &P->f->values.items[v];
  const char *base = x->name ? x->name : "v", *suffix = t->dtype == RILL_F32 ? ".f32" : P->h == RILL_F16 ? ".f16" : ".bf16";
  size_t len = strlen(base) + strlen(suffix) + 1;
  char *name = rill__arena_alloc(&c->arena, len);
  if (!name) return rill__oom();
  snprintf(name, len, "%s%s", base, suffix);
  ir_value_t y = {.name = name, .type = *t, .kind = V_RESULT, .def = -1, .slot = -1, .reg = -1, .line = x->line, .col = x->col};
  *out = (uint32_t)P->f->values.len;
  return RILL_VEC_PUSH(c->a, &P->f->values, y);
}

/* A node `res = cast(arg) {dtype=...}` appended to the new list, at the place of node `at`. */
static rill_status_t add_cast(prec_t *P, uint32_t arg, uint32_t res, const ir_node_t *at) {
  asm_ctx_t *c = P->c;
  const rill_type_t *it = &P->f->values.items[arg].type, *ot = &P->f->values.items[res].type;
  uint32_t op;
  RILL_TRY(asm_intern_op(c, "cast", it, 1, ot, 1, P->cast_attr[ot->dtype == RILL_F32], 1, &op));
  uint32_t *args = rill__arena_memdup(&c->arena, &arg, sizeof arg), *r = rill__arena_memdup(&c->arena, &res, sizeof res);
  if (!args || !r) return rill__oom();
  ir_node_t n = {.kind = N_OP, .line = at->line, .col = at->col, .target = op, .args = args, .nargs = 1, .res = r, .nres = 1};
  P->f->values.items[res].def = (int32_t)P->out.len;
  return RILL_VEC_PUSH(c->a, &P->out, n);
}

/* A constant's elements rounded to half: a new constant (a fill stays a fill). */
static rill_status_t round_const(prec_t *P, const isa_const_t *k, uint32_t *out) {
  size_t n = 1;
  bool fill = k->origin == ISA_CONST_FILL;
  if (!fill) rill__type_sizes(&k->type, &n, NULL);
  uint16_t *data = rill__arena_alloc(&P->c->arena, 2 * (n ? n : 1));
  if (!data) return rill__oom();
  const uint8_t *src = k->data;
  if (P->h == RILL_F16)
    rill__f32_to_f16_n(src, data, n);
  else
    for (size_t i = 0; i < n; i++) {
      float x;
      memcpy(&x, src + 4 * i, 4);
      data[i] = rill__f32_to_bf16(x);
    }
  rill_type_t t = k->type;
  t.dtype = P->h;
  uint32_t konst;
  return asm_new_const(P->c, P->f, &t, (uint8_t *)data, fill, &konst, out);
}

/* Value v (f32, not halved) in half for node `at`: a rounded constant, or one cast before `at`. */
static rill_status_t half_of(prec_t *P, uint32_t v, const ir_node_t *at, uint32_t *out) {
  if (P->as_half[v] >= 0) { *out = (uint32_t)P->as_half[v]; return NULL; }
  const isa_const_t *k = asm_const_of(P->c, P->f, v);
  uint32_t w;
  if (k) {
    RILL_TRY(round_const(P, k, &w));
  } else {
    rill_type_t t = P->f->values.items[v].type;
    t.dtype = P->h;
    RILL_TRY(new_value(P, v, &t, &w));
    RILL_TRY(add_cast(P, v, w, at));
  }
  P->as_half[v] = (int32_t)w;
  *out = w;
  return NULL;
}

/* Halved value v in f32 for node `at`: one cast before the first such use. */
static rill_status_t f32_of(prec_t *P, uint32_t v, const ir_node_t *at, uint32_t *out) {
  if (P->as_f32[v] >= 0) { *out = (uint32_t)P->as_f32[v]; return NULL; }
  rill_type_t t = P->f->values.items[v].type;
  t.dtype = RILL_F32;
  uint32_t w;
  RILL_TRY(new_value(P, v, &t, &w));
  RILL_TRY(add_cast(P, v, w, at));
  P->as_f32[v] = (int32_t)w;
  *out = w;
  return NULL;
}

/* Whether any of n f32 values at b (any alignment) is finite and past max
 * in magnitude: their bits compared as integers, a block of 4096 at a time
 * with no branch inside (a BERT's 110M weights: 0.13 s a value at a time). */
static bool f32_past(const uint8_t *b, size_t n, float max) {
  uint32_t lim;
  memcpy(&lim, &max, 4);
  for (size_t at = 0; at < n; at += 4096) {
    size_t end = n - at < 4096 ? n : at + 4096;
    uint32_t any = 0;
    for (size_t i = at; i < end; i++) {
      uint32_t u;
      memcpy(&u, b + 4 * i, 4);
      u &= 0x7fffffffu;
      any |= (uint32_t)(u > lim) & (uint32_t)(u < 0x7f800000u);
    }
    if (any) return true;
  }
  return false;
}

/* Whether f32 value v (a constant at hand) or a float attribute of d has a
 * finite value past the half dtype's range (a mask's -1e9, say): the op
 * then stays in f32, where that value means what it says. */
static bool out_of_range(const prec_t *P, const ir_node_t *n, const isa_opdecl_t *d) {
  double max = P->h == RILL_F16 ? 65504.0 : 3.3895313892515355e38;
  for (uint32_t j = 0; j < n->nargs; j++) {
    uint32_t v = n->args[j];
    if (v < P->nvals && P->big[v] >= 0) {
      if (P->big[v]) return true;
      continue;
    }
    const isa_const_t *k = P->f->values.items[v].type.dtype == RILL_F32 ? asm_const_of(P->c, P->f, v) : NULL;
    size_t cnt = 1;
    if (k && k->origin != ISA_CONST_FILL) rill__type_sizes(&k->type, &cnt, NULL);
    bool big = k && k->data && f32_past(k->data, cnt, (float)max);
    /* each value scanned once a pass (a BERT's 110M weights were scanned for each op that read them, twice) */
    if (v < P->nvals) P->big[v] = big;
    if (big) return true;
  }
  for (uint32_t a = 0; a < d->nattrs; a++)
    for (uint32_t i = 0; (d->attrs[a].kind == ISA_ATTR_FLOAT || d->attrs[a].kind == ISA_ATTR_FLOATS) && i < d->attrs[a].count; i++)
      if (isfinite(d->attrs[a].floats[i]) && fabs(d->attrs[a].floats[i]) > max) return true;
  return false;
}

static bool is_f32(const prec_t *P, uint32_t v) {
  return v < P->nvals && !P->halved[v] && P->f->values.items[v].type.dtype == RILL_F32;
}

/* Whether n divides by a constant at hand whose every element is at least
 * 1 in magnitude (GELU's x / sqrt(2)): the quotient stays in the
 * dividend's range, so the op is computed in half like a product. */
static bool div_in_range(const prec_t *P, const ir_node_t *n, const isa_opdecl_t *d) {
  if (strcmp(d->name, "div") || n->nargs != 2 || d->in[1].dtype != RILL_F32) return false;
  const isa_const_t *k = asm_const_of(P->c, P->f, n->args[1]);
  size_t cnt = 1;
  if (!k) return false;
  if (k->origin != ISA_CONST_FILL) rill__type_sizes(&k->type, &cnt, NULL);
  for (size_t i = 0; i < cnt; i++) {
    double x = rill__load_f(k->data, RILL_F32, i);
    if (!(fabs(x) >= 1) || !isfinite(x)) return false;
  }
  return true;
}

/* Op d's entry with operands `in` and results `want` (d's counts and
 * attributes), where the registry accepts those operands and gives those
 * results' dtypes: *ok and *out_op; else *ok stays false. */
static rill_status_t intern_accepted(prec_t *P, const isa_opdecl_t *d, const rill_type_t *in, const rill_type_t *want, bool *ok,
                                     uint32_t *out_op) {
  asm_ctx_t *c = P->c;
  const ops_def_t *def = ops_find(d->name);
  rill_type_t got[64];
  uint32_t got_n = 0;
  ops_params_t p;
  if (!def) return NULL;
  rill_status_t st = ops_infer_sym(def, &c->syms, in, d->nin, d->attrs, d->nattrs, got, 64, &got_n, &p);
  if (st) {
    bool oom = rill_status_code(st) == RILL_OUT_OF_MEMORY;
    rill_status_free(st);
    return oom ? rill__oom() : NULL;
  }
  if (got_n != d->nout) return NULL;
  for (uint32_t r = 0; r < d->nout; r++)
    if (got[r].dtype != want[r].dtype) return NULL;
  RILL_TRY(asm_intern_op(c, d->name, in, d->nin, want, d->nout, d->attrs, d->nattrs, out_op));
  *ok = true;
  return NULL;
}

/* Whether op node n takes f32 operands or makes f32 results, and the
 * registry accepts it with those in half: then *out_op is that entry. */
static rill_status_t half_entry(prec_t *P, const ir_node_t *n, bool *ok, uint32_t *out_op) {
  *ok = false;
  asm_ctx_t *c = P->c;
  const isa_opdecl_t *d = asm_decl(c, n);
  int k = half_op(d->name);
  if (!(k >= 0 || div_in_range(P, n, d)) || n->nargs != d->nin || n->nres != d->nout || d->nin > 64 || d->nout > 64 || out_of_range(P, n, d)) return NULL;
  for (uint32_t j = 0; (k < 0 || k >= N_PRODUCTS + N_DATA) && j < n->nargs; j++)
    if (n->args[j] < P->nvals && (P->stat[n->args[j]] & STAT)) return NULL;
  for (uint32_t r = 0; r < n->nres; r++)
    if (n->res[r] < P->nvals && (P->stat[n->res[r]] & SQUARE)) return NULL;
  rill_type_t in[64], want[64];
  bool any = false;
  for (uint32_t j = 0; j < d->nin; j++) {
    in[j] = d->in[j];
    if (in[j].dtype == RILL_F32) in[j].dtype = P->h, any = true;
  }
  for (uint32_t r = 0; r < d->nout; r++) {
    want[r] = d->out[r];
    if (want[r].dtype == RILL_F32) want[r].dtype = P->h, any = true;
  }
  if (!any) return NULL;
  return intern_accepted(P, d, in, want, ok, out_op);
}

/* Whether op node n is one of ROW_OPS (its one f32 result read in half
 * alone: half_reads) as far as can be told before its operand's dtype is
 * known. */
static bool row_candidate(const prec_t *P, const ir_node_t *n) {
  const isa_opdecl_t *d = asm_decl(P->c, n);
  bool row = false;
  for (size_t i = 0; i < RILL_ARRAY_LEN(ROW_OPS); i++) row |= !strcmp(ROW_OPS[i], d->name);
  return row && n->nargs == d->nin && n->nargs >= 1 && d->nin <= 8 && n->nres == 1 && d->nout == 1 && n->res[0] < P->nvals &&
         P->half_reads[n->res[0]] && d->out[0].dtype == RILL_F32 && !out_of_range(P, n, d);
}

/* Whether op node n is a row_candidate on a halved operand 0 and the
 * registry accepts it so: then *out_op is that entry (operand 0 and the
 * result in half, the other operands f32 as they were). */
static rill_status_t row_entry(prec_t *P, const ir_node_t *n, bool *ok, uint32_t *out_op) {
  *ok = false;
  asm_ctx_t *c = P->c;
  const isa_opdecl_t *d = asm_decl(c, n);
  if (!row_candidate(P, n) || n->args[0] >= P->nvals || !P->halved[n->args[0]]) return NULL;
  rill_type_t in[8], out = d->out[0];
  memcpy(in, d->in, sizeof *in * d->nin);
  in[0].dtype = out.dtype = P->h;
  return intern_accepted(P, d, in, &out, ok, out_op);
}

/* P->stat from the nodes as written, in order: STAT on stat_op results
 * and what ops that move or select data make of them; SQUARE on squares
 * and on what ops other than products compute from them, reductions
 * included (a variance, a reshape of squares before their mean). */
static void find_stats(prec_t *P) {
  for (size_t i = 0; i < P->f->nodes.len; i++) {
    const ir_node_t *n = &P->f->nodes.items[i];
    if (n->kind != N_OP) continue;
    const isa_opdecl_t *d = asm_decl(P->c, n);
    int k = half_op(d->name);
    bool stat = stat_op(d->name), reduce = stat || !strcmp(d->name, "max") || !strcmp(d->name, "min");
    bool data = k >= N_PRODUCTS && k < N_PRODUCTS + N_DATA, keeps = k >= N_PRODUCTS || reduce || (k < 0 && div_in_range(P, n, d));
    uint8_t f = stat ? STAT : 0;
    if (!strcmp(d->name, "mul") && n->nargs == 2 && n->args[0] == n->args[1]) f |= SQUARE;
    for (uint32_t j = 0; j < n->nargs; j++) {
      uint8_t a = n->args[j] < P->nvals ? P->stat[n->args[j]] : 0;
      if (data) f |= a & STAT;
      if (keeps) f |= a & SQUARE;
    }
    for (uint32_t r = 0; r < n->nres; r++)
      if (n->res[r] < P->nvals) P->stat[n->res[r]] |= f;
  }
}

/* P->half_reads: the values read only by op nodes half_entry takes in
 * half, or as operand 0 by row candidates (a layer norm before a softmax):
 * nodes from the last, so that a node's readers are settled before it.
 * A row candidate whose operand is halved then always runs in half (a
 * halved operand past 0 is cast to f32 for it), so no reader that counted
 * on a half operand finds an f32 one. */
static rill_status_t find_half_reads(prec_t *P) {
  for (size_t v = 0; v < P->nvals; v++) P->half_reads[v] = true;
  for (size_t i = P->f->nodes.len; i-- > 0;) {
    const ir_node_t *n = &P->f->nodes.items[i];
    bool half = false, row = n->kind == N_OP && row_candidate(P, n);
    uint32_t op;
    if (n->kind == N_OP && !row) RILL_TRY(half_entry(P, n, &half, &op));
    for (uint32_t j = 0; !half && j < n->nargs; j++)
      if (n->args[j] < P->nvals && !(row && j == 0)) P->half_reads[n->args[j]] = false;
  }
  return NULL;
}

static rill_status_t convert_node(prec_t *P, ir_node_t n) {
  asm_ctx_t *c = P->c;
  bool half = false, row = false;
  uint32_t op = 0;
  if (n.kind == N_OP) RILL_TRY(row_entry(P, &n, &row, &op));
  if (n.kind == N_OP && !row) RILL_TRY(half_entry(P, &n, &half, &op));
  uint32_t *args = n.nargs ? rill__arena_memdup(&c->arena, n.args, sizeof(uint32_t) * n.nargs) : NULL;
  if (n.nargs && !args) return rill__oom();
  for (uint32_t j = 0; j < n.nargs; j++) {
    uint32_t v = n.args[j];
    if (row) {
      if (j > 0 && v < P->nvals && P->halved[v]) RILL_TRY(f32_of(P, v, &n, &args[j]));
    } else if (half && is_f32(P, v)) RILL_TRY(half_of(P, v, &n, &args[j]));
    else if (!half && v < P->nvals && P->halved[v]) RILL_TRY(f32_of(P, v, &n, &args[j]));
  }
  n.args = args;
  if (half || row) {
    n.target = op;
    for (uint32_t r = 0; r < n.nres; r++) {
      ir_value_t *x = &P->f->values.items[n.res[r]];
      if (x->type.dtype != RILL_F32) continue;
      x->type.dtype = P->h;
      P->halved[n.res[r]] = true;
    }
  }
  for (uint32_t r = 0; r < n.nres; r++) P->f->values.items[n.res[r]].def = (int32_t)P->out.len;
  return RILL_VEC_PUSH(c->a, &P->out, n);
}

rill_status_t asm_pass_precision(asm_ctx_t *c, ir_func_t *f) {
  if ((c->precision != RILL_PRECISION_F16 && c->precision != RILL_PRECISION_BF16) || f->hand_scheduled) return NULL;
  prec_t P = {.c = c, .f = f, .h = c->precision == RILL_PRECISION_F16 ? RILL_F16 : RILL_BF16, .nvals = f->values.len};
  size_t nv = P.nvals ? P.nvals : 1;
  P.halved = rill__calloc(c->a, nv, sizeof(bool));
  P.as_half = rill__calloc(c->a, nv, sizeof(int32_t));
  P.as_f32 = rill__calloc(c->a, nv, sizeof(int32_t));
  P.half_reads = rill__calloc(c->a, nv, sizeof(bool));
  P.stat = rill__calloc(c->a, nv, 1);
  P.big = rill__alloc(c->a, nv);
  int64_t *dt = rill__arena_alloc(&c->arena, 2 * sizeof(int64_t));
  isa_attr_t *ca = rill__arena_alloc(&c->arena, 2 * sizeof(isa_attr_t));
  rill_status_t st = P.halved && P.as_half && P.as_f32 && P.half_reads && P.stat && P.big && dt && ca ? NULL : rill__oom();
  if (P.big) memset(P.big, -1, nv);
  if (!st) {
    dt[0] = P.h;
    dt[1] = RILL_F32;
    for (int i = 0; i < 2; i++) {
      ca[i] = (isa_attr_t){.name = "dtype", .kind = ISA_ATTR_DTYPE, .count = 1, .ints = &dt[i]};
      P.cast_attr[i] = &ca[i];
    }
    for (size_t v = 0; v < P.nvals; v++) P.as_half[v] = P.as_f32[v] = -1;
    find_stats(&P);
    st = find_half_reads(&P);
  }
  /* nodes in order, each after the casts made for it; definitions are set as they go */
  for (size_t i = 0; !st && i < f->nodes.len; i++) st = convert_node(&P, f->nodes.items[i]);
  if (!st) {
    RILL_VEC_FREE(c->a, &f->nodes);
    f->nodes.items = P.out.items;
    f->nodes.len = P.out.len;
    f->nodes.cap = P.out.cap;
    P.out.items = NULL;
  }
  RILL_VEC_FREE(c->a, &P.out);
  rill__free(c->a, P.halved);
  rill__free(c->a, P.as_half);
  rill__free(c->a, P.as_f32);
  rill__free(c->a, P.half_reads);
  rill__free(c->a, P.stat);
  rill__free(c->a, P.big);
  return st;
}
