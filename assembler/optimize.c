/* optimize.c: the optimising passes, run at -O1 (the default) before the
 * stream schedule.
 *
 *   fold  an op whose operands are all constants is run at assembly time
 *         by its CPU reference kernel and its results become constants
 *         (when they are not much larger than the operands); a batch_norm
 *         whose input is a conv2d or linear (2-D) with constant weights,
 *         used by it alone, is folded into that op's weights and bias,
 *         computed in double and rounded once to the weights' dtype.
 *   fuse  maximal groups of elementwise ops (elementwise.def and where) of
 *         one shape become one op `fused` whose `expr` attribute is the
 *         group's program (ops/fused.c); scalar constants become literals
 *         in it. A group grows along the dataflow: an op joins the group of
 *         an operand's producer when it has the group's shape and no op
 *         outside the group has used the group's results since (the fused
 *         op takes the place of the group's last op, so every use outside
 *         must come after it). Results used outside the group, or returned,
 *         are its outputs; the rest never reach memory. First, a relu or
 *         gelu after a float matmul, linear or conv2d (its only use)
 *         becomes the op's `activation`, which cuBLASLt runs as an
 *         epilogue and a convolution with its bias; a layer_norm with
 *         gamma and beta whose input is an add of its type takes the add's
 *         second operand as its residual z (its operands are positional:
 *         one without them is left alone); gelu written out with erf
 *         (x * 0.5 * (1 + erf(x / sqrt 2)), as ONNX exporters write it)
 *         becomes a gelu; a softmax of a mul or div by a
 *         scalar constant takes it as its `scale` or `divisor`; and a concat of
 *         another concat's result (its only use, the same axis) takes that
 *         concat's operands. Last, a transpose that keeps the last axis
 *         last, read by one group (or elementwise op) alone or made of a
 *         group's one result, is read (written) through its permutation
 *         by that kernel: the fused op's `perms`. Before all but the
 *         stacking of linears and merge_bias, a few-row product takes the
 *         rms_norm or gated unit before it and the residual add after it
 *         (decode_fuse.c). Fusion runs before
 *         the schedule, so a group is one node on one stream, and the memory
 *         plan sees only its outputs. Bodies with stream statements are not
 *         fused (their author placed every op).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

/* (asm.h) */
const isa_const_t *asm_const_of(const asm_ctx_t *c, const ir_func_t *f, uint32_t v) {
  const ir_value_t *x = &f->values.items[v];
  if (x->kind != V_CONST) return NULL;
  const isa_const_t *k = &c->consts.items[x->konst];
  return k->data && !k->shard_parts ? k : NULL; /* a shard's data is the whole tensor's */
}

/* A constant's elements, aligned, in the arena (a fill expanded). */
static rill_status_t const_bytes(asm_ctx_t *c, const isa_const_t *k, void **out) {
  size_t n, bytes;
  rill__type_sizes(&k->type, &n, &bytes);
  uint8_t *p = rill__arena_alloc_raw(&c->arena, bytes ? bytes : 1); /* written whole below */
  if (!p) return rill__oom();
  if (k->origin == ISA_CONST_FILL) {
    size_t es = rill_dtype_size(k->type.dtype);
    for (size_t i = 0; i < n; i++) memcpy(p + i * es, k->data, es);
  } else {
    memcpy(p, k->data, bytes);
  }
  *out = p;
  return NULL;
}

/* Whether 8-byte words of `bytes` bytes may hold a NaN: lanes of 16 or 32
 * bits, their magnitudes (mag) plus `add` reaching the lane's top bit
 * (top) where they are above infinity (no carry crosses a lane); true
 * where bytes is no multiple of 8 (then every element is looked at). */
static bool maybe_nans(const uint8_t *data, size_t bytes, uint64_t mag, uint64_t add, uint64_t top) {
  uint64_t acc = 0;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t w;
    memcpy(&w, data + i, 8);
    acc |= (w & mag) + add;
  }
  return (acc & top) || bytes % 8;
}

/* NaNs in folded floats get the bits a `nan` literal has (the arithmetic
 * that made them may set the sign or a payload), so that what `rill dis`
 * prints assembles back to the same bytes. */
static void canonical_nans(const rill_type_t *t, uint8_t *data) {
  size_t n, bytes;
  rill__type_sizes(t, &n, &bytes);
  /* a NaN's magnitude bits are above infinity's: tested on the bits, with no
   * conversion (the layout pass folds every weight of a network through here:
   * a resnet50-sized f16 stack's pass took 440 ms on a 2-core machine, 100 to
   * 200 ms so), four halves or two floats a word first */
#define CANONICAL(U, INF, NAN_BITS)                                                  \
  for (size_t i = 0; i < n; i++) {                                                   \
    U u;                                                                             \
    memcpy(&u, data + sizeof u * i, sizeof u);                                       \
    if ((U)(u & (U)~((U)1 << (8 * sizeof u - 1))) > (U)(INF))                        \
      memcpy(data + sizeof u * i, &(U){(U)(NAN_BITS)}, sizeof u);                    \
  }
  switch (t->dtype) {
    case RILL_F64: CANONICAL(uint64_t, 0x7ff0000000000000ull, 0x7ff8000000000000ull); break;
    case RILL_F32:
      if (maybe_nans(data, bytes, 0x7fffffff7fffffffull, 0x007fffff007fffffull, 0x8000000080000000ull)) CANONICAL(uint32_t, 0x7f800000u, 0x7fc00000u);
      break;
    case RILL_F16:
      if (maybe_nans(data, bytes, 0x7fff7fff7fff7fffull, 0x03ff03ff03ff03ffull, 0x8000800080008000ull)) CANONICAL(uint16_t, 0x7c00u, 0x7e00u);
      break;
    case RILL_BF16:
      if (maybe_nans(data, bytes, 0x7fff7fff7fff7fffull, 0x007f007f007f007full, 0x8000800080008000ull)) CANONICAL(uint16_t, 0x7f80u, 0x7fc0u);
      break;
    default: break;
  }
#undef CANONICAL
}

/* A new module constant (fold%u) holding `data` (arena, NaNs made canonical): every
 * element, or with `fill` the one element every element equals; with out_value, a value for it in f. */
rill_status_t asm_new_const(asm_ctx_t *c, ir_func_t *f, const rill_type_t *t, uint8_t *data, bool fill, uint32_t *out_konst,
                            uint32_t *out_value) {
  rill_type_t one = {.dtype = t->dtype, .rank = 0};
  canonical_nans(fill ? &one : t, data);
  char name[32];
  do snprintf(name, sizeof name, "fold%u", c->nfolds++);
  while (asm_find_const(c, name, strlen(name)) >= 0);
  size_t bytes = rill_dtype_size(t->dtype);
  if (!fill) rill__type_sizes(t, NULL, &bytes);
  isa_const_t k;
  memset(&k, 0, sizeof k);
  if (!(k.name = rill__arena_strndup(&c->arena, name, strlen(name)))) return rill__oom();
  k.type = *t;
  k.origin = fill ? ISA_CONST_FILL : ISA_CONST_LITERAL;
  k.data = data;
  k.size = bytes;
  isa_const_set_sum(&k, data);
  uint32_t ki = (uint32_t)c->consts.len;
  RILL_TRY(RILL_VEC_PUSH(c->a, &c->consts, k));
  RILL_TRY(rill__map_put(&c->const_map, k.name, strlen(k.name), ki));
  *out_konst = ki;
  if (!out_value) return NULL;
  ir_value_t v = {.name = k.name, .type = *t, .kind = V_CONST, .konst = ki, .def = -1, .slot = -1, .reg = -1};
  *out_value = (uint32_t)f->values.len;
  return RILL_VEC_PUSH(c->a, &f->values, v);
}

/* Drops the nodes marked dead (their values must be dead or redefined). */
static rill_status_t compact(asm_ctx_t *c, ir_func_t *f, const bool *dead) {
  size_t n = f->nodes.len, kept = 0;
  ir_node_t *items = rill__calloc(c->a, n ? n : 1, sizeof(ir_node_t));
  int32_t *newpos = rill__calloc(c->a, n ? n : 1, sizeof(int32_t));
  if (!items || !newpos) {
    rill__free(c->a, items);
    rill__free(c->a, newpos);
    return rill__oom();
  }
  for (size_t i = 0; i < n; i++) {
    newpos[i] = (int32_t)kept;
    if (!dead[i]) items[kept++] = f->nodes.items[i];
  }
  for (size_t v = 0; v < f->values.len; v++) {
    ir_value_t *x = &f->values.items[v];
    if (x->def >= 0 && dead[x->def]) x->def = -1;
  }
  asm_replace_nodes(c, f, items, kept, n ? n : 1, newpos);
  rill__free(c->a, newpos);
  return NULL;
}

/* ---- fold ---- */
/* Results at most this large, or no larger than the operands, are folded;
 * operands past FOLD_MAX_IN_BYTES are left for the device. */
#define FOLD_MAX_BYTES (64u << 10)
#define FOLD_MAX_IN_BYTES ((size_t)256 << 20)

/* Runs node n on constant operands; false (and nothing changed) when it
 * cannot be folded here (a run-time error is left for the run to report). */
static rill_status_t fold_node(asm_ctx_t *c, ir_func_t *f, ir_node_t *n, bool *folded) {
  *folded = false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const ops_def_t *def = ops_find(d->name);
  if (def && def->effect) return NULL; /* its effect is the run's */
  size_t in_bytes = 0, out_bytes = 0, b;
  for (uint32_t j = 0; j < n->nargs; j++) {
    const isa_const_t *k = asm_const_of(c, f, n->args[j]);
    if (!k) return NULL;
    if (!rill__type_sizes(&k->type, NULL, &b) || b > FOLD_MAX_IN_BYTES) return NULL;
    in_bytes += b;
  }
  if (in_bytes > FOLD_MAX_IN_BYTES) return NULL;
  for (uint32_t r = 0; r < d->nout; r++) {
    /* results over shape variables (a split of a constant by a size) are the run's */
    if (!rill__type_sizes(&d->out[r], NULL, &b)) return NULL;
    out_bytes += b;
  }
  if (out_bytes > FOLD_MAX_BYTES && out_bytes > in_bytes) return NULL;
  void *in[64], *out[64];
  if (n->nargs > 64 || d->nout > 64) return NULL;
  for (uint32_t j = 0; j < n->nargs; j++) RILL_TRY(const_bytes(c, asm_const_of(c, f, n->args[j]), &in[j]));
  for (uint32_t r = 0; r < d->nout; r++) {
    rill__type_sizes(&d->out[r], NULL, &b);
    if (!(out[r] = rill__arena_alloc(&c->arena, b ? b : 1))) return rill__oom();
  }
  rill_status_t st = ops_eval(d, in, out, c->a);
  if (st) {
    bool oom = rill_status_code(st) == RILL_OUT_OF_MEMORY;
    rill_status_free(st);
    return oom ? rill__oom() : NULL;
  }
  for (uint32_t r = 0; r < n->nres; r++) {
    uint32_t k;
    RILL_TRY(asm_new_const(c, f, &d->out[r], out[r], false, &k, NULL));
    /* The result becomes that constant: uses keep the value's id. */
    ir_value_t *x = &f->values.items[n->res[r]];
    x->kind = V_CONST;
    x->konst = k;
    x->def = -1;
  }
  *folded = true;
  return NULL;
}

static double attr_float(const isa_opdecl_t *d, const char *name, double def) {
  const isa_attr_t *a = asm_attr(d, name);
  return !a ? def : a->kind == ISA_ATTR_FLOAT ? a->floats[0] : (double)a->ints[0];
}

/* batch_norm (node bi) of a conv2d / linear (node ai) with constant weights. */
static rill_status_t fold_bn(asm_ctx_t *c, ir_func_t *f, uint32_t bi, const uint32_t *nuse, bool *folded) {
  *folded = false;
  ir_node_t *bn = &f->nodes.items[bi];
  uint32_t y = bn->args[0];
  int32_t ai = f->values.items[y].def;
  if (ai < 0 || nuse[y] != 1) return NULL;
  ir_node_t *an = &f->nodes.items[ai];
  bool linear = asm_is_op(c, an, "linear");
  if (!linear && !asm_is_op(c, an, "conv2d")) return NULL;
  if (f->hand_scheduled && an->stream != bn->stream) return NULL;
  const isa_opdecl_t *ad = asm_decl(c, an), *bd = asm_decl(c, bn);
  /* A channels-last conv2d's channels are the batch norm's dim 3, not 1.
   * The batch norm comes after an activation or a residual, which do not
   * fold into the weights: bn(relu(conv)) is not relu(bn(conv)). */
  const isa_attr_t *lay = asm_attr(ad, "layout");
  if ((lay && !strcmp(lay->str, "nhwc")) || an->nargs > 3 || asm_attr(ad, "activation") || asm_attr(ad, "weight")) return NULL;
  const rill_type_t *wt = &ad->in[1];
  if (!rill__is_float(wt->dtype) || (linear && ad->out[0].rank != 2) || wt->dims[0] == 0) return NULL;
  const isa_const_t *w = asm_const_of(c, f, an->args[1]), *bias = an->nargs == 3 ? asm_const_of(c, f, an->args[2]) : NULL;
  const isa_const_t *pk[4];
  if (!w || (an->nargs == 3 && !bias)) return NULL;
  for (int k = 0; k < 4; k++)
    if (!(pk[k] = asm_const_of(c, f, bn->args[1 + k]))) return NULL;
  size_t wsize;
  if (!rill__type_sizes(wt, NULL, &wsize) || wsize > FOLD_MAX_IN_BYTES) return NULL;
  void *wd, *bd0 = NULL, *pd[4];
  RILL_TRY(const_bytes(c, w, &wd));
  if (bias) RILL_TRY(const_bytes(c, bias, &bd0));
  for (int k = 0; k < 4; k++) RILL_TRY(const_bytes(c, pk[k], &pd[k]));
  size_t numel, wbytes;
  rill__type_sizes(wt, &numel, &wbytes);
  size_t O = (size_t)wt->dims[0], per = numel / O, es = rill_dtype_size(wt->dtype);
  rill_dtype_t dt = wt->dtype, pdt = bd->in[1].dtype;
  uint8_t *wn = rill__arena_alloc(&c->arena, wbytes ? wbytes : 1), *bnw = rill__arena_alloc(&c->arena, O * es);
  if (!wn || !bnw) return rill__oom();
  double eps = attr_float(bd, "eps", 1e-5);
  for (size_t o = 0; o < O; o++) {
    /* y = (conv(x) + b - mean) / sqrt(var + eps) * scale + beta */
    double s = rill__load_f(pd[0], pdt, o) / sqrt(rill__load_f(pd[3], pdt, o) + eps);
    for (size_t j = 0; j < per; j++) rill__store_f(wn, dt, o * per + j, rill__load_f(wd, dt, o * per + j) * s);
    double b0 = bd0 ? rill__load_f(bd0, dt, o) : 0.0;
    rill__store_f(bnw, dt, o, (b0 - rill__load_f(pd[2], pdt, o)) * s + rill__load_f(pd[1], pdt, o));
  }
  rill_type_t bt = {dt, 1, {(int64_t)O}};
  uint32_t wv, bv, k;
  RILL_TRY(asm_new_const(c, f, wt, wn, false, &k, &wv));
  RILL_TRY(asm_new_const(c, f, &bt, bnw, false, &k, &bv));
  rill_type_t in[3] = {ad->in[0], *wt, bt};
  uint32_t op;
  RILL_TRY(asm_intern_op(c, ad->name, in, 3, ad->out, 1, ad->attrs, ad->nattrs, &op));
  an = &f->nodes.items[ai];
  bn = &f->nodes.items[bi];
  uint32_t *args = rill__arena_alloc(&c->arena, 3 * sizeof(uint32_t)), *res = rill__arena_alloc(&c->arena, sizeof(uint32_t));
  if (!args || !res) return rill__oom();
  args[0] = an->args[0];
  args[1] = wv;
  args[2] = bv;
  res[0] = bn->res[0];
  an->args = args;
  an->nargs = 3;
  an->target = op;
  an->res = res;
  f->values.items[bn->res[0]].def = ai;
  f->values.items[y].def = -1;
  *folded = true;
  return NULL;
}

/* A batch_norm left after fold_bn (after a concat, a pre-activation, a
 * shared convolution) whose statistics are constants at hand: its
 * per-channel affine y = x * s + t, s = scale / sqrt(var + eps) and
 * t = bias - mean * s computed in double and rounded once to x's dtype,
 * as mul and add of [1,C,1,..] constants, which fuse with the elementwise
 * ops around them (batch norm + relu: one kernel) and take either layout. */
static bool bn_affine_fits(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n) {
  if (!asm_is_op(c, n, "batch_norm")) return false;
  const rill_type_t *x = &asm_decl(c, n)->in[0];
  if (!rill__is_float(x->dtype) || x->rank < 2 || x->rank > RILL_MAX_RANK || isa_dim_is_sym(x->dims[1])) return false;
  for (int k = 1; k < 5; k++)
    if (!asm_const_of(c, f, n->args[k])) return false;
  return true;
}

/* Node n (bn_affine_fits) as its two ops appended to `out`. */
typedef RILL_VEC(ir_node_t) node_vec_t;

static rill_status_t bn_affine(asm_ctx_t *c, ir_func_t *f, const ir_node_t *n, node_vec_t *out) {
  const isa_opdecl_t *d = asm_decl(c, n);
  rill_type_t xt = d->in[0];
  rill_dtype_t dt = xt.dtype;
  double eps = attr_float(d, "eps", 1e-5);
  size_t C = (size_t)xt.dims[1], es = rill_dtype_size(dt);
  void *pd[4];
  for (int k = 0; k < 4; k++) RILL_TRY(const_bytes(c, asm_const_of(c, f, n->args[1 + k]), &pd[k]));
  uint8_t *sd = rill__arena_alloc(&c->arena, C * es + 1), *td = rill__arena_alloc(&c->arena, C * es + 1);
  if (!sd || !td) return rill__oom();
  for (size_t ch = 0; ch < C; ch++) {
    double s = rill__load_f(pd[0], dt, ch) / sqrt(rill__load_f(pd[3], dt, ch) + eps);
    rill__store_f(sd, dt, ch, s);
    rill__store_f(td, dt, ch, rill__load_f(pd[1], dt, ch) - rill__load_f(pd[2], dt, ch) * s);
  }
  rill_type_t ct = {dt, xt.rank, {1}};
  for (int k = 0; k < xt.rank; k++) ct.dims[k] = k == 1 ? (int64_t)C : 1;
  uint32_t sv, tv, k, mv, mul, add;
  RILL_TRY(asm_new_const(c, f, &ct, sd, false, &k, &sv));
  RILL_TRY(asm_new_const(c, f, &ct, td, false, &k, &tv));
  const ir_value_t *y = &f->values.items[n->res[0]];
  ir_value_t m = {.name = y->name, .type = xt, .kind = V_RESULT, .line = y->line, .col = y->col, .def = -1, .slot = -1, .reg = -1};
  mv = (uint32_t)f->values.len;
  RILL_TRY(RILL_VEC_PUSH(c->a, &f->values, m));
  rill_type_t in[2] = {xt, ct};
  RILL_TRY(asm_intern_op(c, "mul", in, 2, &xt, 1, NULL, 0, &mul));
  RILL_TRY(asm_intern_op(c, "add", in, 2, &xt, 1, NULL, 0, &add));
  uint32_t *a1 = rill__arena_alloc(&c->arena, 2 * sizeof *a1), *a2 = rill__arena_alloc(&c->arena, 2 * sizeof *a2),
           *r1 = rill__arena_memdup(&c->arena, &mv, sizeof mv);
  if (!a1 || !a2 || !r1) return rill__oom();
  a1[0] = n->args[0], a1[1] = sv, a2[0] = mv, a2[1] = tv;
  ir_node_t n1 = *n, n2 = *n;
  n1.target = mul, n1.args = a1, n1.nargs = 2, n1.res = r1, n1.nres = 1;
  n2.target = add, n2.args = a2, n2.nargs = 2;
  f->values.items[mv].def = (int32_t)out->len;
  RILL_TRY(RILL_VEC_PUSH(c->a, out, n1));
  f->values.items[n->res[0]].def = (int32_t)out->len;
  return RILL_VEC_PUSH(c->a, out, n2);
}

static rill_status_t count_uses(asm_ctx_t *c, const ir_func_t *f, uint32_t **out);

/* The conv2d node that alone reads batch norm node bi's result, as its
 * input, where the affine folds into it exactly: no padding (a padded zero
 * is not s 0 + t), NCHW, its weight (and bias) constants at hand of the
 * batch norm's dtype; else -1. */
static int32_t bn_conv_after(const asm_ctx_t *c, const ir_func_t *f, size_t bi, const uint32_t *nuse) {
  const ir_node_t *bn = &f->nodes.items[bi];
  uint32_t y = bn->res[0];
  if (nuse[y] != 1 || asm_decl(c, bn)->in[0].rank != 4) return -1;
  for (size_t k = bi + 1; k < f->nodes.len; k++) {
    const ir_node_t *n = &f->nodes.items[k];
    bool reads = false;
    for (uint32_t j = 0; j < n->nargs; j++) reads |= n->args[j] == y;
    if (!reads) continue;
    if (!asm_is_op(c, n, "conv2d") || n->args[0] != y || n->nargs > 3) return -1;
    const isa_opdecl_t *d = asm_decl(c, n);
    const isa_attr_t *pad = asm_attr(d, "padding");
    for (uint32_t q = 0; pad && q < pad->count; q++)
      if (pad->ints[q]) return -1;
    if (asm_attr(d, "layout") || d->in[1].dtype != d->in[0].dtype || !asm_const_of(c, f, n->args[1]) || (n->nargs == 3 && !asm_const_of(c, f, n->args[2])))
      return -1;
    return (int32_t)k;
  }
  return -1;
}

/* Batch norm node bi folded into the input of conv2d node ki (bn_conv_after):
 * conv(x s + t, w, b) = conv(x, w s, b + sum(w t)) over each output's
 * window (no padding: every tap reads a real input), in double, rounded
 * once to the weights' dtype. */
static rill_status_t bn_into_conv(asm_ctx_t *c, ir_func_t *f, size_t bi, size_t ki) {
  const ir_node_t *bn = &f->nodes.items[bi], *cn = &f->nodes.items[ki];
  const isa_opdecl_t *bd = asm_decl(c, bn), *cd = asm_decl(c, cn);
  rill_dtype_t dt = cd->in[1].dtype;
  double eps = attr_float(bd, "eps", 1e-5);
  const isa_attr_t *ga = asm_attr(cd, "groups");
  int64_t G = ga ? ga->ints[0] : 1, O = cd->in[1].dims[0], Cg = cd->in[1].dims[1], K = cd->in[1].dims[2] * cd->in[1].dims[3];
  void *pd[4], *wd, *b0 = NULL;
  for (int k = 0; k < 4; k++) RILL_TRY(const_bytes(c, asm_const_of(c, f, bn->args[1 + k]), &pd[k]));
  RILL_TRY(const_bytes(c, asm_const_of(c, f, cn->args[1]), &wd));
  if (cn->nargs == 3) RILL_TRY(const_bytes(c, asm_const_of(c, f, cn->args[2]), &b0));
  size_t wbytes;
  rill__type_sizes(&cd->in[1], NULL, &wbytes);
  uint8_t *wn = rill__arena_alloc(&c->arena, wbytes + 1), *bnw = rill__arena_alloc(&c->arena, (size_t)O * rill_dtype_size(dt) + 1);
  if (!wn || !bnw) return rill__oom();
  for (int64_t o = 0; o < O; o++) {
    double acc = b0 ? rill__load_f(b0, dt, (size_t)o) : 0.0;
    for (int64_t cl = 0; cl < Cg; cl++) {
      size_t ch = (size_t)((o / (O / G)) * Cg + cl);
      double s = rill__load_f(pd[0], dt, ch) / sqrt(rill__load_f(pd[3], dt, ch) + eps);
      double t = rill__load_f(pd[1], dt, ch) - rill__load_f(pd[2], dt, ch) * s;
      for (int64_t q = 0; q < K; q++) {
        size_t at = (size_t)((o * Cg + cl) * K + q);
        double w = rill__load_f(wd, dt, at);
        rill__store_f(wn, dt, at, w * s);
        acc += w * t;
      }
    }
    rill__store_f(bnw, dt, (size_t)o, acc);
  }
  rill_type_t bt = {dt, 1, {O}}, in[3] = {bd->in[0], cd->in[1], bt};
  uint32_t wv, bv, k, op;
  RILL_TRY(asm_new_const(c, f, &cd->in[1], wn, false, &k, &wv));
  RILL_TRY(asm_new_const(c, f, &bt, bnw, false, &k, &bv));
  RILL_TRY(asm_intern_op(c, "conv2d", in, 3, asm_decl(c, &f->nodes.items[ki])->out, 1, asm_decl(c, &f->nodes.items[ki])->attrs,
                         asm_decl(c, &f->nodes.items[ki])->nattrs, &op));
  uint32_t *args = rill__arena_alloc(&c->arena, 3 * sizeof *args);
  if (!args) return rill__oom();
  args[0] = f->nodes.items[bi].args[0], args[1] = wv, args[2] = bv;
  ir_node_t *m = &f->nodes.items[ki];
  m->args = args;
  m->nargs = 3;
  m->target = op;
  f->values.items[f->nodes.items[bi].res[0]].def = -1;
  return NULL;
}

/* Every batch_norm that bn_affine_fits folds into the convolution after it
 * where that is exact (bn_conv_after), else becomes its affine (not in
 * bodies with stream statements, whose author placed every op). */
static rill_status_t bn_affines(asm_ctx_t *c, ir_func_t *f) {
  bool any = false;
  for (size_t i = 0; i < f->nodes.len && !any; i++) any = bn_affine_fits(c, f, &f->nodes.items[i]);
  if (!any || f->hand_scheduled) return NULL;
  node_vec_t out = {0};
  size_t n = f->nodes.len;
  int32_t *ident = NULL;
  uint32_t *nuse = NULL;
  rill_status_t st = count_uses(c, f, &nuse);
  for (size_t i = 0; !st && i < n; i++) {
    ir_node_t node = f->nodes.items[i];
    if (bn_affine_fits(c, f, &node)) {
      int32_t k = bn_conv_after(c, f, i, nuse);
      st = k >= 0 ? bn_into_conv(c, f, i, (size_t)k) : bn_affine(c, f, &node, &out);
      continue;
    }
    for (uint32_t r = 0; r < node.nres; r++) f->values.items[node.res[r]].def = (int32_t)out.len;
    st = RILL_VEC_PUSH(c->a, &out, node);
  }
  if (!st && !(ident = rill__calloc(c->a, out.len ? out.len : 1, sizeof(int32_t)))) st = rill__oom();
  if (!st) {
    /* the defs set here are new positions already */
    for (size_t i = 0; i < out.len; i++) ident[i] = (int32_t)i;
    asm_replace_nodes(c, f, out.items, out.len, out.cap, ident);
    out.items = NULL;
  }
  rill__free(c->a, ident);
  rill__free(c->a, nuse);
  RILL_VEC_FREE(c->a, &out);
  return st;
}

/* ---- linears that share an operand ---- */
/* The byte alignment a merged product's parts keep (the split of its result
 * is then written in place: pass_concat's IN_PLACE_ALIGN). */
#define PARTS_ALIGN 256

/* Whether node n is a linear this pass merges: no bias, no attribute, a
 * constant weight held in the module (not linked), f16/bf16/f32/f64. */
static bool parallel_linear(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n) {
  if (!asm_is_op(c, n, "linear") || n->nargs != 2 || n->nres != 1 || asm_touches_state(c, f, n)) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const rill_type_t *xt = &d->in[0], *wt = &d->in[1];
  return !d->nattrs && rill__is_float(xt->dtype) && wt->rank == 2 && !isa_type_is_sym(wt) && asm_const_of(c, f, n->args[1]);
}

/* The stacked weights of the group whose weights are consts konst[0..m)
 * ([rows, K] each, or [rows]: biases; with `cols`, [K, cols] each stacked
 * along the last axis: weight="kn"), as a value of f: made once a module
 * (a decoder's prompt and step functions share them, and their parts are
 * then used by no one: -O1 prunes them). */
static rill_status_t stacked_weights(asm_ctx_t *c, ir_func_t *f, const uint32_t *konst, size_t m, const rill_type_t *mt,
                                     const uint32_t *wvals, bool cols, uint32_t *out) {
  uint32_t ki, *key = rill__arena_alloc(&c->arena, (m + 1) * sizeof *key);
  if (!key) return rill__oom();
  memcpy(key, konst, m * sizeof *key);
  key[m] = UINT32_MAX; /* (a marker: the same constants stacked along the last axis) */
  size_t klen = (m + cols) * sizeof *key;
  if (!rill__map_get(&c->stack_map, key, klen, &ki)) {
    size_t es = rill_dtype_size(mt->dtype), n, bytes, at = 0;
    size_t R = cols ? (size_t)mt->dims[0] : 1, W = cols ? (size_t)mt->dims[1] : 0; /* cols: R rows of W elements */
    rill__type_sizes(mt, &n, &bytes);
    uint8_t *wd = rill__arena_alloc(&c->arena, bytes ? bytes : 1);
    if (!wd) return rill__oom();
    for (size_t q = 0; q < m; q++) {
      const isa_const_t *k = asm_const_of(c, f, wvals[q]);
      const void *bd = k->data; /* (read in place: a copy of each first would double the work) */
      size_t kb;
      rill__type_sizes(&k->type, NULL, &kb);
      if (k->origin == ISA_CONST_FILL) {
        void *full;
        RILL_TRY(const_bytes(c, k, &full));
        bd = full;
      }
      size_t run = kb / R; /* a member's bytes in each of the R rows */
      for (size_t r = 0; r < R; r++) memcpy(wd + r * W * es + at, (const uint8_t *)bd + r * run, run);
      at += run;
    }
    return asm_new_const(c, f, mt, wd, false, &ki, out) ? rill__oom() : rill__map_put(&c->stack_map, key, klen, ki);
  }
  const isa_const_t *k = &c->consts.items[ki];
  ir_value_t v = {.name = k->name, .type = k->type, .kind = V_CONST, .konst = ki, .def = -1, .slot = -1, .reg = -1};
  *out = (uint32_t)f->values.len;
  return RILL_VEC_PUSH(c->a, &f->values, v);
}

/* Whether linear node b joins a's group: the same operand, weights of one
 * dtype and width. */
static bool same_linear(const asm_ctx_t *c, const ir_node_t *a, const ir_node_t *b) {
  const isa_opdecl_t *da = asm_decl(c, a), *db = asm_decl(c, b);
  return a->args[0] == b->args[0] && da->in[1].dtype == db->in[1].dtype && da->in[1].dims[1] == db->in[1].dims[1];
}

/* -O1, before the other merges: linears that read the same operand with
 * constant weights (a decoder's query, key and value projections; its gate
 * and up projections) become one linear over the weights stacked, whose
 * result a split gives back as the parts: one pass over the operand and
 * one launch where there were several, the product's width what keeps a
 * GPU's memory busy. Where the operand is one row (a decode step) the
 * parts are views of the result (pass_concat), else the split copies them.
 * Each part but the last a multiple of PARTS_ALIGN bytes wide; the stacked
 * weights at most FOLD_MAX_IN_BYTES. The merged linear and the split stand
 * where the group's first linear stood (every member's operand is made
 * before it). */
static rill_status_t merge_parallel_linears(asm_ctx_t *c, ir_func_t *f) {
  size_t n = f->nodes.len;
  if (f->hand_scheduled || !n) return NULL;
  int32_t *group = rill__calloc(c->a, n, sizeof *group); /* 1 + the group's first node; 0: none */
  if (!group) return rill__oom();
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    const ir_node_t *a = &f->nodes.items[i];
    if (group[i] || !parallel_linear(c, f, a)) continue;
    const isa_opdecl_t *da = asm_decl(c, a);
    size_t es = rill_dtype_size(da->in[1].dtype), K = (size_t)da->in[1].dims[1], rows = (size_t)da->in[1].dims[0], members = 1;
    bool aligned = rows * es % PARTS_ALIGN == 0;
    for (size_t j = i + 1; j < n && aligned; j++) {
      const ir_node_t *b = &f->nodes.items[j];
      if (group[j] || !parallel_linear(c, f, b) || !same_linear(c, a, b)) continue;
      size_t br = (size_t)asm_decl(c, b)->in[1].dims[0];
      if ((rows + br) * K * es > FOLD_MAX_IN_BYTES) break;
      group[j] = (int32_t)i + 1;
      rows += br;
      members++;
      aligned = br * es % PARTS_ALIGN == 0;
    }
    if (members < 2) {
      for (size_t j = i + 1; j < n; j++)
        if (group[j] == (int32_t)i + 1) group[j] = 0;
      continue;
    }
    group[i] = (int32_t)i + 1;
    any = true;
  }
  rill_status_t st = NULL;
  node_vec_t out = {0};
  int32_t *newpos = NULL;
  size_t nv = f->values.len; /* the values before the pass */
  if (any && !(newpos = rill__calloc(c->a, n, sizeof *newpos))) st = rill__oom();
  for (size_t i = 0; any && !st && i < n; i++) {
    ir_node_t node = f->nodes.items[i];
    if (group[i] && group[i] != (int32_t)i + 1) continue; /* merged into its group's first */
    if (!group[i]) {
      newpos[i] = (int32_t)out.len;
      st = RILL_VEC_PUSH(c->a, &out, node);
      continue;
    }
    /* The group: its weights stacked, one linear, one split. */
    const isa_opdecl_t *d = asm_decl(c, &node);
    rill_type_t xt = d->in[0], wt = d->in[1], yt = d->out[0];
    size_t K = (size_t)wt.dims[1], rows = 0, m = 0;
    for (size_t j = i; j < n; j++)
      if (group[j] == (int32_t)i + 1) rows += (size_t)asm_decl(c, &f->nodes.items[j])->in[1].dims[0], m++;
    uint32_t *res = rill__arena_alloc(&c->arena, m * sizeof *res), *args = rill__arena_alloc(&c->arena, 2 * sizeof *args),
             *sargs = rill__arena_alloc(&c->arena, sizeof *sargs), *konst = rill__arena_alloc(&c->arena, m * sizeof *konst),
             *wvals = rill__arena_alloc(&c->arena, m * sizeof *wvals);
    int64_t *sizes = rill__arena_alloc(&c->arena, m * sizeof *sizes);
    if (!res || !args || !sargs || !sizes || !konst || !wvals) {
      st = rill__oom();
      break;
    }
    for (size_t j = i, k = 0; j < n; j++) {
      if (group[j] != (int32_t)i + 1) continue;
      const ir_node_t *b = &f->nodes.items[j];
      sizes[k] = asm_decl(c, b)->in[1].dims[0];
      wvals[k] = b->args[1];
      konst[k] = f->values.items[b->args[1]].konst;
      res[k++] = b->res[0];
    }
    rill_type_t mt = {wt.dtype, 2, {(int64_t)rows, (int64_t)K}}, ht = yt;
    ht.dims[ht.rank - 1] = (int64_t)rows;
    uint32_t wv, lin, split;
    if ((st = stacked_weights(c, f, konst, m, &mt, wvals, false, &wv))) break;
    const ir_value_t *y0 = &f->values.items[node.res[0]];
    ir_value_t h = {.name = y0->name, .type = ht, .kind = V_RESULT, .line = y0->line, .col = y0->col, .def = -1, .slot = -1, .reg = -1};
    uint32_t hv = (uint32_t)f->values.len;
    if ((st = RILL_VEC_PUSH(c->a, &f->values, h))) break;
    rill_type_t in[2] = {xt, mt}, *outs = rill__arena_alloc(&c->arena, m * sizeof *outs);
    if (!outs) {
      st = rill__oom();
      break;
    }
    for (size_t q = 0; q < m; q++) outs[q] = f->values.items[res[q]].type;
    int64_t axis = ht.rank - 1;
    isa_attr_t sa[2] = {{.name = "axis", .kind = ISA_ATTR_INT, .count = 1, .ints = rill__arena_memdup(&c->arena, &axis, sizeof axis)},
                        {.name = "sizes", .kind = ISA_ATTR_INTS, .count = (uint32_t)m, .ints = sizes}};
    if (!sa[0].ints) {
      st = rill__oom();
      break;
    }
    if ((st = asm_intern_op(c, "linear", in, 2, &ht, 1, NULL, 0, &lin)) || (st = asm_intern_op(c, "split", &ht, 1, outs, (uint32_t)m, sa, 2, &split)))
      break;
    args[0] = node.args[0], args[1] = wv, sargs[0] = hv;
    uint32_t *hres = rill__arena_memdup(&c->arena, &hv, sizeof hv);
    if (!hres) {
      st = rill__oom();
      break;
    }
    ir_node_t ln = node, sn = node;
    ln.target = lin, ln.args = args, ln.nargs = 2, ln.res = hres, ln.nres = 1;
    sn.target = split, sn.args = sargs, sn.nargs = 1, sn.res = res, sn.nres = (uint32_t)m;
    newpos[i] = (int32_t)out.len;
    if ((st = RILL_VEC_PUSH(c->a, &out, ln))) break;
    for (size_t j = i + 1; j < n; j++)
      if (group[j] == (int32_t)i + 1) newpos[j] = (int32_t)out.len;
    st = RILL_VEC_PUSH(c->a, &out, sn);
  }
  if (!st && any) {
    /* Every value made by a node (a state's version by its update too)
     * where that node went; then each node's results, the split's parts
     * and the merged products, where their nodes stand. */
    for (size_t v = 0; v < nv; v++)
      if (f->values.items[v].def >= 0) f->values.items[v].def = newpos[f->values.items[v].def];
    for (size_t p = 0; p < out.len; p++)
      for (uint32_t r = 0; r < out.items[p].nres; r++) f->values.items[out.items[p].res[r]].def = (int32_t)p;
    for (size_t p = 0; p < out.len; p++) newpos[p] = (int32_t)p;
    asm_replace_nodes(c, f, out.items, out.len, out.cap, newpos);
    out.items = NULL;
  }
  rill__free(c->a, newpos);
  rill__free(c->a, group);
  RILL_VEC_FREE(c->a, &out);
  return st;
}

static rill_status_t count_uses(asm_ctx_t *c, const ir_func_t *f, uint32_t **out) {
  uint32_t *nuse = rill__calloc(c->a, f->values.len ? f->values.len : 1, sizeof(uint32_t));
  if (!nuse) return rill__oom();
  for (size_t i = 0; i < f->nodes.len; i++)
    for (uint32_t j = 0; j < f->nodes.items[i].nargs; j++) nuse[f->nodes.items[i].args[j]]++;
  *out = nuse;
  return NULL;
}

rill_status_t asm_pass_fold(asm_ctx_t *c, ir_func_t *f) {
  uint32_t *nuse = NULL;
  bool *dead = rill__calloc(c->a, f->nodes.len ? f->nodes.len : 1, sizeof(bool));
  rill_status_t st = dead ? count_uses(c, f, &nuse) : rill__oom();
  bool any = false;
  for (size_t i = 0; !st && i < f->nodes.len; i++) {
    ir_node_t *n = &f->nodes.items[i];
    if (n->kind != N_OP) continue;
    bool done = false;
    st = fold_node(c, f, n, &done);
    if (!st && !done && asm_is_op(c, n, "batch_norm")) st = fold_bn(c, f, (uint32_t)i, nuse, &done);
    if (done) dead[i] = any = true;
  }
  if (!st && any) st = compact(c, f, dead);
  if (!st) st = bn_affines(c, f);
  rill__free(c->a, nuse);
  rill__free(c->a, dead);
  return st;
}

/* ---- fuse ---- */
typedef struct group {
  int32_t parent;            /* union-find */
  bool sealed;               /* an op outside has used its results: it takes no more ops */
  uint32_t nodes;
} group_t;

static int32_t find(group_t *g, int32_t x) {
  while (g[x].parent != x) x = g[x].parent = g[g[x].parent].parent;
  return x;
}

static bool same_shape(const rill_type_t *a, const rill_type_t *b) {
  return a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
}

/* A scalar constant with its data: a literal of the group. */
static const isa_const_t *scalar_const(const asm_ctx_t *c, const ir_func_t *f, uint32_t v) {
  const isa_const_t *k = asm_const_of(c, f, v);
  return k && k->type.rank == 0 ? k : NULL;
}

/* Replaces the members of one group (node indices, in order) by one fused
 * node at the last member's place; leaves everything as it was when the
 * group exceeds the fused op's limits. */
static rill_status_t emit_group(asm_ctx_t *c, ir_func_t *f, const uint32_t *mem, uint32_t nm, const int32_t *gof, int32_t gid,
                                const uint32_t *nuse, bool *dead, bool *fused) {
  *fused = false;
  uint32_t in[OPS_FUSED_MAX_IN], out[OPS_FUSED_MAX_OUT], nin = 0, nout = 0, nlit = 0;
  rill_status_t st = NULL;
  /* Operands from outside, and results used outside (or returned). */
  for (uint32_t m = 0; m < nm; m++) {
    const ir_node_t *n = &f->nodes.items[mem[m]];
    for (uint32_t j = 0; j < n->nargs; j++) {
      uint32_t v = n->args[j];
      int32_t d = f->values.items[v].def;
      if (d >= 0 && gof[d] == gid) continue;
      if (scalar_const(c, f, v)) { nlit++; continue; }
      uint32_t k = 0;
      while (k < nin && in[k] != v) k++;
      if (k < nin) continue;
      if (nin == OPS_FUSED_MAX_IN) return NULL;
      in[nin++] = v;
    }
    uint32_t r = n->res[0], inside = 0;
    for (uint32_t q = m + 1; q < nm; q++)
      for (uint32_t j = 0; j < f->nodes.items[mem[q]].nargs; j++) inside += f->nodes.items[mem[q]].args[j] == r;
    if (nuse[r] > inside || m == nm - 1) {
      if (nout == OPS_FUSED_MAX_OUT) return NULL;
      out[nout++] = r;
    }
  }
  if (nm + nlit > OPS_FUSED_MAX_NODES || !nin) return NULL;
  rill_buf_t b;
  rill__buf_init(&b, c->a);
  for (uint32_t m = 0; !st && m < nm; m++) {
    const ir_node_t *n = &f->nodes.items[mem[m]];
    const isa_opdecl_t *d = asm_decl(c, n);
    char args[3][64];
    const char *ap[3];
    for (uint32_t j = 0; j < n->nargs && j < 3; j++) {
      uint32_t v = n->args[j];
      int32_t dn = f->values.items[v].def;
      const isa_const_t *k;
      ap[j] = args[j];
      if (dn >= 0 && gof[dn] == gid) {
        uint32_t q = 0;
        while (mem[q] != (uint32_t)dn) q++;
        snprintf(args[j], sizeof args[j], "t%u", q);
      } else if ((k = scalar_const(c, f, v))) {
        rill_buf_t lb;
        rill__buf_init(&lb, c->a);
        st = ops_fused_print_lit(&lb, k->type.dtype, k->data);
        if (!st) st = rill__buf_append(&lb, "", 1);
        if (!st) snprintf(args[j], sizeof args[j], "%s", (const char *)lb.data);
        rill__buf_free(&lb);
      } else {
        uint32_t q = 0;
        while (in[q] != v) q++;
        snprintf(args[j], sizeof args[j], "x%u", q);
      }
    }
    if (!st && m) st = rill__buf_append(&b, "; ", 2);
    if (!st) st = ops_fused_print_step(&b, m, d->name, d->attrs, d->nattrs, ap, n->nargs);
  }
  for (uint32_t o = 0; !st && o < nout; o++) {
    uint32_t q = 0;
    while (f->nodes.items[mem[q]].res[0] != out[o]) q++;
    st = rill__buf_printf(&b, "%st%u", o ? ", " : "; return ", q);
  }
  char *expr = NULL;
  if (!st && !(expr = rill__arena_strndup(&c->arena, (const char *)b.data, b.len))) st = rill__oom();
  rill__buf_free(&b);
  if (st) return st;
  rill_type_t it[OPS_FUSED_MAX_IN], ot[OPS_FUSED_MAX_OUT];
  for (uint32_t k = 0; k < nin; k++) it[k] = f->values.items[in[k]].type;
  for (uint32_t k = 0; k < nout; k++) ot[k] = f->values.items[out[k]].type;
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at);
  uint32_t *args = rill__arena_memdup(&c->arena, in, sizeof(uint32_t) * nin), *res = rill__arena_memdup(&c->arena, out, sizeof(uint32_t) * nout);
  if (!at || !args || !res) return rill__oom();
  at->name = "expr";
  at->kind = ISA_ATTR_STRING;
  at->count = 1;
  at->str = expr;
  uint32_t op;
  RILL_TRY(asm_intern_op(c, "fused", it, nin, ot, nout, at, 1, &op));
  uint32_t last = mem[nm - 1];
  for (uint32_t m = 0; m + 1 < nm; m++) dead[mem[m]] = true;
  for (uint32_t m = 0; m < nm; m++) f->values.items[f->nodes.items[mem[m]].res[0]].def = -1;
  ir_node_t *n = &f->nodes.items[last];
  n->target = op;
  n->args = args;
  n->nargs = nin;
  n->res = res;
  n->nres = nout;
  for (uint32_t o = 0; o < nout; o++) f->values.items[out[o]].def = (int32_t)last;
  *fused = true;
  return NULL;
}

/* The node that makes value v, where it is an op `name` (any op: NULL)
 * still in place whose result only this use reads (once, not returned), or -1. */
static int32_t sole_maker(const asm_ctx_t *c, const ir_func_t *f, const uint32_t *nuse, const bool *dead, uint32_t v, const char *name) {
  int32_t m = f->values.items[v].def;
  bool ok = m >= 0 && !dead[m] && nuse[v] == 1 && !f->values.items[v].escapes && f->nodes.items[m].kind == N_OP &&
            (!name || asm_is_op(c, &f->nodes.items[m], name)) && !asm_touches_state(c, f, &f->nodes.items[m]);
  return ok ? m : -1;
}

/* One rewrite of node i (merge_pass): it marks in `dead` the nodes it
 * merged away; nuse counts the uses as they were before the pass. */
typedef rill_status_t (*merge_fn)(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead);

/* Runs `merge` at each node in order, then drops the nodes it merged away. */
static rill_status_t merge_pass(asm_ctx_t *c, ir_func_t *f, merge_fn merge) {
  uint32_t *nuse = NULL;
  bool *dead = rill__calloc(c->a, f->nodes.len ? f->nodes.len : 1, sizeof(bool)), any = false;
  rill_status_t st = dead ? count_uses(c, f, &nuse) : rill__oom();
  /* (a node that reads a state stays where it is: asm_touches_state) */
  for (size_t i = 0; !st && i < f->nodes.len; i++)
    if (!asm_touches_state(c, f, &f->nodes.items[i])) st = merge(c, f, i, nuse, dead);
  for (size_t i = 0; !st && i < f->nodes.len; i++) any |= dead[i];
  if (!st && any) st = compact(c, f, dead);
  rill__free(c->a, nuse);
  rill__free(c->a, dead);
  return st;
}

int32_t asm_sole_maker(const asm_ctx_t *c, const ir_func_t *f, const uint32_t *nuse, const bool *dead, uint32_t v, const char *name) {
  return sole_maker(c, f, nuse, dead, v, name);
}
rill_status_t asm_merge_pass(asm_ctx_t *c, ir_func_t *f, asm_merge_fn merge) { return merge_pass(c, f, merge); }

/* Node mi, whose result v node i alone read, makes node i's result in
 * its place (rewritten by the caller); node i goes. */
static void take_over(ir_func_t *f, int32_t mi, size_t i, uint32_t v, bool *dead) {
  f->nodes.items[mi].res = f->nodes.items[i].res;
  f->values.items[f->nodes.items[i].res[0]].def = mi;
  f->values.items[v].def = -1;
  dead[i] = true;
}

/* Op d (its operands and results) with attribute `a` added, interned. */
static rill_status_t intern_with_attr(asm_ctx_t *c, const isa_opdecl_t *d, isa_attr_t a, uint32_t *op) {
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (d->nattrs + 1));
  if (!at) return rill__oom();
  if (d->nattrs) memcpy(at, d->attrs, sizeof *at * d->nattrs);
  at[d->nattrs] = a;
  return asm_intern_op(c, d->name, d->in, d->nin, d->out, 1, at, d->nattrs + 1, op);
}

/* Op d (three operands: conv2d, linear or layer_norm with its bias) with a fourth,
 * the residual z of type t, interned. */
static rill_status_t intern_with_residual(asm_ctx_t *c, const isa_opdecl_t *d, const rill_type_t *t, uint32_t *op) {
  rill_type_t in[4] = {d->in[0], d->in[1], d->in[2], *t};
  return asm_intern_op(c, d->name, in, 4, d->out, 1, d->attrs, d->nattrs, op);
}

/* A relu or gelu whose operand is a float matmul, linear or conv2d's result,
 * used by it alone, becomes that op's `activation` (a cuBLASLt epilogue on
 * cuda; after a convolution, applied with its bias in one pass). */
static rill_status_t merge_activation(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *an = &f->nodes.items[i];
  bool relu = asm_is_op(c, an, "relu"), gelu = asm_is_op(c, an, "gelu");
  if (!relu && !gelu) return NULL;
  uint32_t v = an->args[0];
  int32_t mi = sole_maker(c, f, nuse, dead, v, NULL);
  if (mi < 0) return NULL;
  ir_node_t *mn = &f->nodes.items[mi];
  if (!asm_is_op(c, mn, "matmul") && !asm_is_op(c, mn, "linear") && !asm_is_op(c, mn, "conv2d")) return NULL;
  const isa_opdecl_t *md = asm_decl(c, mn), *ad = asm_decl(c, an);
  if (asm_attr(md, "activation") || !rill__is_float(md->out[0].dtype)) return NULL;
  const char *act = "relu";
  if (gelu) {
    act = "gelu";
    const isa_attr_t *ap = asm_attr(ad, "approximate");
    if (ap && !strcmp(ap->str, "tanh")) act = "gelu_tanh";
  }
  uint32_t op;
  RILL_TRY(intern_with_attr(c, md, (isa_attr_t){.name = "activation", .kind = ISA_ATTR_STRING, .count = 1, .str = act}, &op));
  f->nodes.items[mi].target = op;
  take_over(f, mi, i, v, dead);
  return NULL;
}

/* Whether v is a float scalar constant equal to `want` rounded to its dtype. */
static bool scalar_is(const asm_ctx_t *c, const ir_func_t *f, uint32_t v, double want) {
  const isa_const_t *k = scalar_const(c, f, v);
  if (!k || !rill__is_float(k->type.dtype)) return false;
  uint8_t r[8];
  rill__store_f(r, k->type.dtype, 0, want);
  return rill__load_f(k->data, k->type.dtype, 0) == rill__load_f(r, k->type.dtype, 0);
}

/* Node n's two operands as (a, b) where b satisfies `is`: 0 when neither
 * does; with `sides` 1, only the second operand may (div's divisor). */
static bool split_scalar(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n, int sides, double want, uint32_t *a) {
  if (n->nargs != 2) return false;
  for (int s = 0; s < sides; s++)
    if (scalar_is(c, f, n->args[1 - s], want)) {
      *a = n->args[s];
      return true;
    }
  return false;
}

/* Value v as 1 + erf(x / sqrt(2)) (or x * (1/sqrt(2))), each step used by
 * the next alone, of type t: its x, and the three nodes in `nodes`. */
static bool erf_term(const asm_ctx_t *c, const ir_func_t *f, const uint32_t *nuse, const bool *dead, uint32_t v, const rill_type_t *t,
                     uint32_t *x, int32_t *nodes) {
  int32_t ai = sole_maker(c, f, nuse, dead, v, "add"), ei = -1, di = -1;
  uint32_t e, d;
  if (ai < 0 || !rill__type_eq(&f->values.items[v].type, t) || !split_scalar(c, f, &f->nodes.items[ai], 2, 1.0, &e) ||
      (ei = sole_maker(c, f, nuse, dead, e, "erf")) < 0)
    return false;
  d = f->nodes.items[ei].args[0];
  if ((di = sole_maker(c, f, nuse, dead, d, NULL)) < 0) return false;
  const ir_node_t *dn = &f->nodes.items[di];
  bool ok = asm_is_op(c, dn, "div") ? split_scalar(c, f, dn, 1, M_SQRT2, x)
                                     : asm_is_op(c, dn, "mul") && split_scalar(c, f, dn, 2, M_SQRT1_2, x);
  if (!ok || !rill__type_eq(&f->values.items[*x].type, t)) return false;
  nodes[0] = ai, nodes[1] = ei, nodes[2] = di;
  return true;
}

/* GELU written out, x * 0.5 * (1 + erf(x / sqrt(2))) in either grouping
 * (mul(mul(x, 1 + erf(..)), 0.5), as ONNX exporters before opset 20 write
 * it, or mul(mul(x, 0.5), 1 + erf(..))), each step used by the next alone
 * and all of x's float type: becomes gelu(x), one op that merges into the
 * linear before it as its activation (the imported encoder issues the op
 * calls its torch.fx conversion does). gelu rounds once where the chain
 * rounded at each step. */
static rill_status_t merge_gelu(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *tn = &f->nodes.items[i];
  if (!asm_is_op(c, tn, "mul") || tn->nargs != 2 || tn->nres != 1) return NULL;
  const rill_type_t *t = &f->values.items[tn->res[0]].type;
  if (!rill__is_float(t->dtype)) return NULL;
  int32_t nodes[4];
  uint32_t x = 0, y;
  bool found = false;
  for (int s = 0; s < 2 && !found; s++) {
    uint32_t p = tn->args[s], q = tn->args[1 - s];
    int32_t mi = sole_maker(c, f, nuse, dead, p, "mul");
    if (mi < 0 || !rill__type_eq(&f->values.items[p].type, t)) continue;
    const ir_node_t *mn = &f->nodes.items[mi];
    if (scalar_is(c, f, q, 0.5)) { /* mul(mul(x, 1 + erf), 0.5) */
      for (int u = 0; u < 2 && !found; u++)
        if ((found = mn->nargs == 2 && erf_term(c, f, nuse, dead, mn->args[1 - u], t, &y, nodes) && y == mn->args[u])) x = y;
    } else { /* mul(mul(x, 0.5), 1 + erf) */
      found = split_scalar(c, f, mn, 2, 0.5, &x) && erf_term(c, f, nuse, dead, q, t, &y, nodes) && y == x;
    }
    nodes[3] = mi;
  }
  if (!found) return NULL;
  uint32_t op, *args = rill__arena_alloc(&c->arena, sizeof *args);
  if (!args) return rill__oom();
  RILL_TRY(asm_intern_op(c, "gelu", t, 1, t, 1, NULL, 0, &op));
  tn = &f->nodes.items[i];
  args[0] = x;
  tn->args = args;
  tn->nargs = 1;
  tn->target = op;
  for (int k = 0; k < 4; k++) {
    const ir_node_t *n = &f->nodes.items[nodes[k]];
    f->values.items[n->res[0]].def = -1;
    dead[nodes[k]] = true;
  }
  return NULL;
}

/* add(matmul(x, W), b), W a float constant [K,N] at hand and b a vector
 * [N] (a constant, or made before the matmul), the product used by the add
 * alone: becomes linear(x, W, b) {weight="kn"} (unless RILL_LINEAR_KN=0:
 * rill__linear_kn; then W transposed, as for few rows), W read as it lies (what
 * ONNX exporters write for a linear layer: MatMul then Add; no transposed
 * copy of the weights at assembly), so that the bias is the cuBLASLt
 * epilogue's instead of a kernel of its own, and an activation after it
 * can merge too. A product of at most FLIN_MAX_ROWS rows (numbers: a
 * decode step's) becomes linear(x, W^T, b) instead, W transposed here,
 * since the decode fusions' fused_linear reads [N, K] (decode_fuse.c). */
/* out[N, K] := in[K, N] of es-byte elements, in 32 x 32 tiles so that both
 * sides stay in the cache (a row-by-row loop misses on every write of a
 * 768 x 3072 f32 weight). */
static void transpose2d(uint8_t *out, const void *in_, size_t K, size_t N, size_t es) {
  const uint8_t *in = in_;
  enum { T = 32 };
  for (size_t k0 = 0; k0 < K; k0 += T)
    for (size_t n0 = 0; n0 < N; n0 += T) {
      size_t k1 = k0 + T < K ? k0 + T : K, n1 = n0 + T < N ? n0 + T : N;
      for (size_t n = n0; n < n1; n++)
        for (size_t k = k0; k < k1; k++) memcpy(out + (n * K + k) * es, in + (k * N + n) * es, es);
    }
}

static bool few_rows(const rill_type_t *x) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < x->rank; d++) {
    if (isa_dim_is_sym(x->dims[d])) return false;
    rows *= x->dims[d];
  }
  return rows <= FLIN_MAX_ROWS;
}

static rill_status_t merge_bias(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *an = &f->nodes.items[i];
  if (!asm_is_op(c, an, "add") || an->nargs != 2) return NULL;
  for (int side = 0; side < 2; side++) {
    uint32_t m = an->args[side], b = an->args[1 - side];
    int32_t mi = sole_maker(c, f, nuse, dead, m, "matmul"), bi = f->values.items[b].def;
    if (mi < 0) continue;
    ir_node_t *mn = &f->nodes.items[mi];
    const isa_opdecl_t *md = asm_decl(c, mn);
    const rill_type_t *xt = &md->in[0], *wt = &md->in[1], *bt = &f->values.items[b].type, *ot = &asm_decl(c, an)->out[0];
    const isa_const_t *w = asm_const_of(c, f, mn->args[1]);
    bool fits = w && md->nattrs == 0 && rill__is_float(xt->dtype) && xt->rank >= 2 && wt->rank == 2 && bt->rank == 1 &&
                bt->dtype == xt->dtype && bt->dims[0] == wt->dims[1] && !isa_dim_is_sym(wt->dims[0]) && !isa_dim_is_sym(wt->dims[1]) &&
                rill__type_eq(ot, &md->out[0]) && bi < mi;
    if (!fits) continue;
    uint32_t wv = mn->args[1], op;
    rill_type_t in[3] = {*xt, *wt, *bt};
    size_t wbytes;
    bool kn = rill__linear_kn();
    if ((few_rows(xt) || !kn) && rill__type_sizes(wt, NULL, &wbytes) && wbytes <= FOLD_MAX_IN_BYTES) {
      /* read where it lies (the weights file's mapping): the transpose copies
       * element by element, so alignment does not matter; a fill expanded */
      const void *wd = w->data;
      if (w->origin == ISA_CONST_FILL) {
        void *wf;
        RILL_TRY(const_bytes(c, w, &wf));
        wd = wf;
      }
      size_t K = (size_t)wt->dims[0], N = (size_t)wt->dims[1];
      /* written whole below: not zeroed first (each fresh page touched once) */
      uint8_t *td = rill__arena_alloc_raw(&c->arena, wbytes ? wbytes : 1);
      if (!td) return rill__oom();
      transpose2d(td, wd, K, N, rill_dtype_size(wt->dtype));
      in[1] = (rill_type_t){wt->dtype, 2, {(int64_t)N, (int64_t)K}};
      uint32_t k;
      RILL_TRY(asm_new_const(c, f, &in[1], td, false, &k, &wv));
      RILL_TRY(asm_intern_op(c, "linear", in, 3, ot, 1, NULL, 0, &op));
    } else if (!kn) {
      continue;
    } else {
      isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at);
      if (!at) return rill__oom();
      *at = (isa_attr_t){.name = "weight", .kind = ISA_ATTR_STRING, .count = 1, .str = "kn"};
      RILL_TRY(asm_intern_op(c, "linear", in, 3, ot, 1, at, 1, &op));
    }
    uint32_t *args = rill__arena_alloc(&c->arena, 3 * sizeof(uint32_t));
    if (!args) return rill__oom();
    mn = &f->nodes.items[mi];
    args[0] = mn->args[0];
    args[1] = wv;
    args[2] = b;
    mn->args = args;
    mn->nargs = 3;
    mn->target = op;
    take_over(f, mi, i, m, dead);
    return NULL;
  }
  return NULL;
}

/* Whether a scaled weight x keeps its precision in dtype d: finite, and 0 or
 * at least d's smallest normal (ConvNeXt's layer scale starts at 1e-6,
 * and 1e-6 times a weight of 0.02 is no f16 number). */
static bool scaled_keeps(double x, rill_dtype_t d) {
  double tiny = d == RILL_F16 ? 0x1p-14 : d == RILL_F64 ? 0x1p-1022 : 0x1p-126;
  return isfinite(x) && (x == 0 || fabs(x) >= tiny);
}

/* mul(y, c) where c is a constant that scales the last axis alone (every
 * other size 1: ConvNeXt's layer scale after its second linear, read
 * channels-last) or every element alike, and y a linear's result, directly
 * or through reshapes that keep the last size (each step read by the next
 * alone): c folds into the linear's constant weight and bias,
 * W'[n,:] = c[n] W[n,:] and b'[n] = c[n] b[n], each rounded once to the
 * dtype as a folded batch norm's are, where every one stays a normal
 * number of the dtype (else the mul stays); the mul's result is then made by the
 * last step. The broadcast operand leaves the elementwise group after it,
 * which can then move 16 bytes a thread (a broadcast operand made the
 * group index every element by division). A linear with an activation or
 * a "kn" weight stays as written. */
static rill_status_t merge_scale_linear(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *mn = &f->nodes.items[i];
  if (!asm_is_op(c, mn, "mul") || mn->nargs != 2) return NULL;
  const rill_type_t ot = asm_decl(c, mn)->out[0];
  if (!rill__is_float(ot.dtype) || ot.rank < 1 || isa_dim_is_sym(ot.dims[ot.rank - 1])) return NULL;
  int64_t N = ot.dims[ot.rank - 1];
  for (int side = 0; side < 2; side++) {
    uint32_t v = mn->args[1 - side];
    const isa_const_t *sk = asm_const_of(c, f, mn->args[side]);
    const rill_type_t *ct = &f->values.items[mn->args[side]].type;
    if (!sk || ct->dtype != ot.dtype || ct->rank > ot.rank || !rill__type_eq(&f->values.items[v].type, &ot)) continue;
    bool lastonly = true;
    for (int d = 0; d < ct->rank; d++) lastonly &= ct->dims[d] == 1 || (d == ct->rank - 1 && ct->dims[d] == N);
    if (!lastonly) continue;
    /* down the reshapes that keep the last size to the linear */
    int32_t at = asm_sole_maker(c, f, nuse, dead, v, NULL), last = at;
    while (at >= 0 && asm_is_op(c, &f->nodes.items[at], "reshape") && f->nodes.items[at].nargs == 1) {
      const rill_type_t *it = &asm_decl(c, &f->nodes.items[at])->in[0];
      if (it->rank < 1 || it->dims[it->rank - 1] != N) break;
      at = asm_sole_maker(c, f, nuse, dead, f->nodes.items[at].args[0], NULL);
    }
    if (at < 0 || !asm_is_op(c, &f->nodes.items[at], "linear")) continue;
    ir_node_t *ln = &f->nodes.items[at];
    const isa_opdecl_t *ld = asm_decl(c, ln);
    const isa_const_t *wk = asm_const_of(c, f, ln->args[1]), *bk = ln->nargs > 2 ? asm_const_of(c, f, ln->args[2]) : NULL;
    const rill_type_t wt = ld->in[1];
    /* (a residual z, linear's fourth operand, would need the scale too) */
    if (ld->nattrs || ln->nargs > 3 || !wk || (ln->nargs > 2 && !bk) || wt.dtype != ot.dtype || wt.rank != 2 || wt.dims[0] != N || isa_dim_is_sym(wt.dims[1]))
      continue;
    size_t K = (size_t)wt.dims[1], wbytes;
    if (!rill__type_sizes(&wt, NULL, &wbytes) || wbytes > FOLD_MAX_IN_BYTES) continue;
    void *cd, *wd, *bd = NULL;
    RILL_TRY(const_bytes(c, sk, &cd));
    RILL_TRY(const_bytes(c, wk, &wd));
    if (bk) RILL_TRY(const_bytes(c, bk, &bd));
    const rill_type_t bt = bk ? ld->in[2] : wt;
    uint8_t *nw = rill__arena_alloc_raw(&c->arena, wbytes ? wbytes : 1);
    uint8_t *nb = bk ? rill__arena_alloc_raw(&c->arena, rill_dtype_size(bt.dtype) * (size_t)N) : NULL;
    if (!nw || (bk && !nb)) return rill__oom();
    bool per = ct->rank > 0 && ct->dims[ct->rank - 1] == N && N != 1, keeps = true;
    for (size_t n = 0; n < (size_t)N && keeps; n++) {
      double s = rill__load_f(cd, ot.dtype, per ? n : 0);
      for (size_t k = 0; k <= K && keeps; k++) { /* the row's weights, then its bias */
        if (k == K && !bk) break;
        double x = s * (k < K ? rill__load_f(wd, ot.dtype, n * K + k) : rill__load_f(bd, bt.dtype, n));
        keeps = scaled_keeps(x, k < K ? ot.dtype : bt.dtype);
        if (k < K) rill__store_f(nw, ot.dtype, n * K + k, x);
        else rill__store_f(nb, bt.dtype, n, x);
      }
    }
    if (!keeps) continue;
    uint32_t konst, wv, bv = 0, *args = rill__arena_alloc(&c->arena, sizeof *args * ln->nargs);
    if (!args) return rill__oom();
    RILL_TRY(asm_new_const(c, f, &wt, nw, false, &konst, &wv));
    if (bk) RILL_TRY(asm_new_const(c, f, &bt, nb, false, &konst, &bv));
    ln = &f->nodes.items[at];
    args[0] = ln->args[0], args[1] = wv;
    if (bk) args[2] = bv;
    ln->args = args;
    take_over(f, last, i, v, dead);
    return NULL;
  }
  return NULL;
}

/* Whether value v is read by one layer_norm with gamma and beta alone, of
 * v's type: the norm takes the add that made v as its residual instead (a
 * post-norm transformer, BERT: the norm adds z in its first pass, where a
 * product of a few rows in gemv.cu would need a kernel of its own for z). */
static bool norm_takes(const asm_ctx_t *c, const ir_func_t *f, const uint32_t *nuse, uint32_t v) {
  /* An f32 program run in half (--precision=f16|bf16) promises its sums in
   * f32: the product's epilogue adds z before its one rounding, where the
   * norm would add it to the product rounded to half (two roundings; BERT's
   * error grew from 1.9x autocast's to 2.2x) */
  if (c->precision == RILL_PRECISION_F16 || c->precision == RILL_PRECISION_BF16) return false;
  if (nuse[v] != 1 || f->values.items[v].escapes) return false;
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    for (uint32_t j = 0; j < n->nargs; j++)
      if (n->args[j] == v) return asm_is_op(c, n, "layer_norm") && n->nargs == 3 && j == 0;
  }
  return false;
}

/* add(conv2d(x, w, b), z), the convolution's result used by the add alone,
 * not activated, and z of its type: becomes conv2d(x, w, b, z) in the
 * add's place (z may be made after the convolution, as a residual block's
 * shortcut is), so that the residual rides the convolution's epilogue
 * (cuDNN's fused plan, or the bias kernel's pass) and a relu after the add
 * merges into it too. The same for a float linear(x, w, b): linear(x, w,
 * b, z), z cuBLASLt's C (beta 1): a pre-norm transformer's residual adds
 * (ViT, GPT-2) cost no kernel of their own; a sum that a layer_norm alone
 * reads is left to merge_norm_residual. */
static rill_status_t merge_residual(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *an = &f->nodes.items[i];
  if (!asm_is_op(c, an, "add") || an->nargs != 2) return NULL;
  for (int side = 0; side < 2; side++) {
    uint32_t m = an->args[side], z = an->args[1 - side];
    if (m == z) continue;
    int32_t mi = sole_maker(c, f, nuse, dead, m, "conv2d");
    if (mi < 0) {
      /* a float linear; a sum a layer_norm alone reads is merge_norm_residual's */
      mi = sole_maker(c, f, nuse, dead, m, "linear");
      if (mi >= 0 && (!rill__is_float(f->values.items[m].type.dtype) || norm_takes(c, f, nuse, an->res[0]))) mi = -1;
    }
    if (mi < 0) continue;
    const isa_opdecl_t *md = asm_decl(c, &f->nodes.items[mi]);
    if (md->nin != 3 || asm_attr(md, "activation") || !rill__type_eq(&f->values.items[z].type, &md->out[0]) ||
        !rill__type_eq(&asm_decl(c, an)->out[0], &md->out[0]))
      continue;
    uint32_t op, *args = rill__arena_alloc(&c->arena, 4 * sizeof(uint32_t));
    if (!args) return rill__oom();
    RILL_TRY(intern_with_residual(c, md, &md->out[0], &op));
    an = &f->nodes.items[i];
    const ir_node_t *mn = &f->nodes.items[mi];
    memcpy(args, mn->args, 3 * sizeof(uint32_t));
    args[3] = z;
    an->args = args;
    an->nargs = 4;
    an->target = op;
    an->line = mn->line; /* errors name the convolution */
    an->col = mn->col;
    f->values.items[m].def = -1;
    dead[mi] = true;
    return NULL;
  }
  return NULL;
}

/* layer_norm(add(a, z), g, b), the sum used by the layer_norm alone and a,
 * z and the sum of one type (no broadcasting, no activation): becomes
 * layer_norm(a, g, b, z), which adds z in its first pass over the row
 * (a transformer's residual connection before its norm: one kernel and one
 * pass over the activations less). */
static rill_status_t merge_norm_residual(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *ln = &f->nodes.items[i];
  if (!asm_is_op(c, ln, "layer_norm") || ln->nargs != 3) return NULL;
  uint32_t v = ln->args[0];
  int32_t ai = sole_maker(c, f, nuse, dead, v, "add");
  if (ai < 0) return NULL;
  const ir_node_t *an = &f->nodes.items[ai];
  const isa_opdecl_t *ad = asm_decl(c, an), *ld = asm_decl(c, ln);
  const rill_type_t *t = &f->values.items[v].type;
  if (an->nargs != 2 || ad->nattrs || !rill__type_eq(&f->values.items[an->args[0]].type, t) ||
      !rill__type_eq(&f->values.items[an->args[1]].type, t))
    return NULL;
  uint32_t op, *args = rill__arena_alloc(&c->arena, 4 * sizeof(uint32_t));
  if (!args) return rill__oom();
  RILL_TRY(intern_with_residual(c, ld, t, &op));
  ln = &f->nodes.items[i];
  an = &f->nodes.items[ai];
  args[0] = an->args[0];
  args[1] = ln->args[1];
  args[2] = ln->args[2];
  args[3] = an->args[1];
  ln->args = args;
  ln->nargs = 4;
  ln->target = op;
  f->values.items[v].def = -1;
  dead[ai] = true;
  return NULL;
}

/* softmax(div(a, c)) or softmax(mul(a, c)) (log_softmax too), c a scalar
 * constant and a of the quotient's type, the quotient used by the softmax
 * alone: becomes softmax(a) {divisor=c} (or {scale=c}), which scales each
 * element as it reads it, rounded as the op was (attention's scores divided
 * by the square root of the head size: one kernel and one pass less). */
static rill_status_t merge_softmax_scale(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *sn = &f->nodes.items[i];
  if (!asm_is_op(c, sn, "softmax") && !asm_is_op(c, sn, "log_softmax")) return NULL;
  const isa_opdecl_t *sd = asm_decl(c, sn);
  if (asm_attr(sd, "scale") || asm_attr(sd, "divisor")) return NULL;
  uint32_t v = sn->args[0];
  int32_t mi = sole_maker(c, f, nuse, dead, v, NULL);
  if (mi < 0) return NULL;
  const ir_node_t *mn = &f->nodes.items[mi];
  bool div = asm_is_op(c, mn, "div");
  if ((!div && !asm_is_op(c, mn, "mul")) || mn->nargs != 2 || asm_decl(c, mn)->nattrs) return NULL;
  for (int side = 0; side < (div ? 1 : 2); side++) {
    uint32_t a = mn->args[side];
    const isa_const_t *k = scalar_const(c, f, mn->args[1 - side]);
    if (!k || !rill__is_float(k->type.dtype) || !rill__type_eq(&f->values.items[a].type, &f->values.items[v].type)) continue;
    double cv = rill__load_f(k->data, k->type.dtype, 0);
    if (!isfinite(cv) || cv == 0) continue; /* (attributes stay ordinary numbers) */
    double *val = rill__arena_alloc(&c->arena, sizeof *val);
    uint32_t op, *args = rill__arena_alloc(&c->arena, sizeof *args);
    if (!val || !args) return rill__oom();
    *val = cv;
    RILL_TRY(intern_with_attr(c, sd, (isa_attr_t){.name = div ? "divisor" : "scale", .kind = ISA_ATTR_FLOAT, .count = 1, .floats = val}, &op));
    sn = &f->nodes.items[i];
    args[0] = a;
    sn->args = args;
    sn->target = op;
    f->values.items[v].def = -1;
    dead[mi] = true;
    return NULL;
  }
  return NULL;
}

/* Op d with attribute `a` set (replaced where d has it, else added), interned. */
static rill_status_t intern_set_attr(asm_ctx_t *c, const isa_opdecl_t *d, isa_attr_t a, uint32_t *op) {
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (d->nattrs + 1));
  if (!at) return rill__oom();
  uint32_t n = 0;
  for (uint32_t k = 0; k < d->nattrs; k++)
    if (strcmp(d->attrs[k].name, a.name)) at[n++] = d->attrs[k];
  at[n++] = a;
  return asm_intern_op(c, d->name, d->in, d->nin, d->out, 1, at, n, op);
}

/* The most steps a prologue or epilogue takes (literals included). */
#define AROUND_MAX_STEPS 24

/* Whether a value of type m broadcasts to type t of its dtype (a softmax's mask). */
static bool broadcasts_to(const rill_type_t *m, const rill_type_t *t) {
  bool fits = m->dtype == t->dtype && m->rank <= t->rank;
  for (int i = 1; fits && i <= m->rank; i++) fits = m->dims[m->rank - i] == 1 || m->dims[m->rank - i] == t->dims[t->rank - i];
  return fits;
}

/* Node n, an elementwise op whose operands are value v (where it reads
 * `x`, once or more), scalar constants and, with ext, one more value that
 * broadcasts to v's type (*ext, or the first found, set; read as x1: a
 * softmax's mask), as statement `index` of a program into b;
 * false (b untouched) where it is not such an op or its result is not of
 * v's type. */
static rill_status_t around_step(asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n, uint32_t v, const char *x, uint32_t *ext,
                                 uint32_t index, rill_buf_t *b, bool *ok) {
  *ok = false;
  const ops_def_t *def = n->kind == N_OP ? ops_find(asm_decl(c, n)->name) : NULL;
  if (!def || !ops_is_elementwise(def) || n->nres != 1 || n->nargs > 3 ||
      !rill__type_eq(&f->values.items[n->res[0]].type, &f->values.items[v].type))
    return NULL;
  char lits[3][64];
  const char *ap[3];
  bool seen = false;
  for (uint32_t j = 0; j < n->nargs; j++) {
    const isa_const_t *k = scalar_const(c, f, n->args[j]);
    if (n->args[j] == v) { /* (twice: a square) */
      ap[j] = x;
      seen = true;
      continue;
    }
    if (!k && ext && (*ext == UINT32_MAX || *ext == n->args[j]) && broadcasts_to(&f->values.items[n->args[j]].type, &f->values.items[v].type)) {
      *ext = n->args[j];
      ap[j] = "x1";
      continue;
    }
    if (!k) return NULL;
    rill_buf_t lb;
    rill__buf_init(&lb, c->a);
    rill_status_t st = ops_fused_print_lit(&lb, k->type.dtype, k->data);
    if (!st) st = rill__buf_append(&lb, "", 1);
    if (!st) snprintf(lits[j], sizeof lits[j], "%s", (const char *)lb.data);
    rill__buf_free(&lb);
    RILL_TRY(st);
    ap[j] = lits[j];
  }
  if (!seen) return NULL;
  const isa_opdecl_t *d = asm_decl(c, n);
  RILL_TRY(ops_fused_print_step(b, index, d->name, d->attrs, d->nattrs, ap, n->nargs));
  *ok = true;
  return NULL;
}

/* Whether node n takes an epilogue (layer_norm, softmax, log_softmax, and
 * sum, mean, max and min) and, but layer_norm, a prologue. */
static bool takes_around(const asm_ctx_t *c, const ir_node_t *n) {
  static const char *const names[] = {"layer_norm", "softmax", "log_softmax", "sum", "mean", "max", "min"};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++)
    if (asm_is_op(c, n, names[k])) return true;
  return false;
}

/* The steps of program text t ("...; return tK"): K + 1; 0 for none. */
static uint32_t around_steps(const char *t) {
  const char *r = t ? strstr(t, "return t") : NULL;
  return r ? (uint32_t)strtoul(r + 8, NULL, 10) + 1 : 0;
}

/* op(v, scalar constants), an elementwise op whose operand v is the result
 * of an op that takes_around, used by it alone, of v's type: becomes the
 * next step of that op's `epilogue` (a fused group's text over x0, its
 * result), applied as each result is stored (GELU after a layer norm; the
 * add of epsilon and the rsqrt after a mean of squares: one kernel, one
 * pass over the data less). */
static rill_status_t merge_epilogue(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *n = &f->nodes.items[i];
  for (uint32_t j = 0; j < n->nargs && j < 3; j++) {
    uint32_t v = n->args[j];
    int32_t mi = sole_maker(c, f, nuse, dead, v, NULL);
    if (mi < 0) continue;
    const ir_node_t *mn = &f->nodes.items[mi];
    if (!takes_around(c, mn)) continue;
    const isa_opdecl_t *md = asm_decl(c, mn);
    const isa_attr_t *e = asm_attr(md, "epilogue");
    uint32_t k = around_steps(e ? e->str : NULL);
    if (!rill__is_float(md->out[0].dtype) || k >= AROUND_MAX_STEPS) continue;
    rill_buf_t b;
    rill__buf_init(&b, c->a);
    char x[16];
    snprintf(x, sizeof x, k ? "t%u" : "x0", k - 1);
    rill_status_t st = NULL;
    if (e) st = rill__buf_append(&b, e->str, (size_t)(strstr(e->str, "; return") - e->str));
    if (!st && e) st = rill__buf_append(&b, "; ", 2);
    bool ok = false;
    if (!st) st = around_step(c, f, n, v, x, NULL, k, &b, &ok);
    if (!st && ok) st = rill__buf_printf(&b, "; return t%u", k);
    char *text = NULL;
    if (!st && ok && !(text = rill__arena_strndup(&c->arena, (const char *)b.data, b.len))) st = rill__oom();
    rill__buf_free(&b);
    RILL_TRY(st);
    if (!ok) return NULL;
    uint32_t op;
    RILL_TRY(intern_set_attr(c, md, (isa_attr_t){.name = "epilogue", .kind = ISA_ATTR_STRING, .count = 1, .str = text}, &op));
    f->nodes.items[mi].target = op;
    take_over(f, mi, i, v, dead);
    return NULL;
  }
  return NULL;
}

/* softmax(op_k(...op_1(a))) (log_softmax, sum, mean, max, min too), a
 * chain of elementwise ops over one value of a's type and scalar
 * constants, each result used by the next alone, the op without a scale,
 * divisor or prologue: becomes softmax(a) {prologue="..."}, which computes
 * the chain as it reads each element (a soft cap, tanh(x / c) * c, before
 * attention's softmax; the square before a mean of squares). */
static rill_status_t merge_prologue(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *sn = &f->nodes.items[i];
  if (!takes_around(c, sn) || asm_is_op(c, sn, "layer_norm")) return NULL;
  const isa_opdecl_t *sd = asm_decl(c, sn);
  if (asm_attr(sd, "scale") || asm_attr(sd, "divisor") || asm_attr(sd, "prologue") || !rill__is_float(sd->in[0].dtype)) return NULL;
  /* the chain, from the softmax back; a softmax's mask (one value that
   * broadcasts to the input) becomes its second operand */
  bool soft = !asm_is_op(c, sn, "sum") && !asm_is_op(c, sn, "mean") && !asm_is_op(c, sn, "max") && !asm_is_op(c, sn, "min");
  int32_t chain[AROUND_MAX_STEPS];
  uint32_t from[AROUND_MAX_STEPS], nc = 0, v = sn->args[0], ext = UINT32_MAX;
  rill_buf_t probe;
  rill__buf_init(&probe, c->a);
  rill_status_t st = NULL;
  while (!st && nc < AROUND_MAX_STEPS / 2) {
    int32_t mi = sole_maker(c, f, nuse, dead, v, NULL);
    if (mi < 0) break;
    const ir_node_t *mn = &f->nodes.items[mi];
    bool ok = false;
    for (uint32_t j = 0; !st && !ok && j < mn->nargs; j++) {
      uint32_t a = mn->args[j], e = ext;
      if (!rill__type_eq(&f->values.items[a].type, &sd->in[0]) || a == ext) continue;
      probe.len = 0;
      st = around_step(c, f, mn, a, "x0", soft ? &e : NULL, 0, &probe, &ok);
      if (ok) from[nc] = a, ext = e;
    }
    if (!ok) break;
    chain[nc++] = mi;
    v = from[nc - 1];
  }
  rill__buf_free(&probe);
  RILL_TRY(st);
  if (!nc) return NULL;
  rill_buf_t b;
  rill__buf_init(&b, c->a);
  for (uint32_t q = 0; !st && q < nc; q++) {
    uint32_t k = nc - 1 - q; /* the chain's first op first */
    char x[16];
    snprintf(x, sizeof x, q ? "t%u" : "x0", q - 1);
    bool ok = false;
    if (q) st = rill__buf_append(&b, "; ", 2);
    if (!st) st = around_step(c, f, &f->nodes.items[chain[k]], from[k], x, soft ? &ext : NULL, q, &b, &ok);
  }
  if (!st) st = rill__buf_printf(&b, "; return t%u", nc - 1);
  char *text = NULL;
  if (!st && !(text = rill__arena_strndup(&c->arena, (const char *)b.data, b.len))) st = rill__oom();
  rill__buf_free(&b);
  RILL_TRY(st);
  uint32_t op, *args = rill__arena_alloc(&c->arena, 2 * sizeof *args), nin = ext == UINT32_MAX ? 1 : 2;
  rill_type_t *in = rill__arena_alloc(&c->arena, 2 * sizeof *in);
  if (!args || !in) return rill__oom();
  args[0] = from[nc - 1];
  args[1] = ext;
  in[0] = sd->in[0];
  in[1] = nin > 1 ? f->values.items[ext].type : sd->in[0];
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (sd->nattrs + 1));
  if (!at) return rill__oom();
  if (sd->nattrs) memcpy(at, sd->attrs, sizeof *at * sd->nattrs);
  at[sd->nattrs] = (isa_attr_t){.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = text};
  RILL_TRY(asm_intern_op(c, sd->name, in, nin, sd->out, 1, at, sd->nattrs + 1, &op));
  sn = &f->nodes.items[i];
  sn->target = op;
  sn->args = args;
  sn->nargs = nin;
  for (uint32_t q = 0; q < nc; q++) {
    f->values.items[f->nodes.items[chain[q]].res[0]].def = -1;
    dead[chain[q]] = true;
  }
  return NULL;
}

/* The concat node behind operand v of a concat along `axis` that can give
 * its operands to it (v used there alone, not returned), or -1. */
static int32_t inner_concat(const asm_ctx_t *c, const ir_func_t *f, const uint32_t *nuse, const bool *dead, uint32_t v, int64_t axis) {
  int32_t m = sole_maker(c, f, nuse, dead, v, "concat");
  return m >= 0 && asm_concat_axis(c, &f->nodes.items[m]) == axis ? m : -1;
}

/* A concat whose operand is another concat's result along the same axis,
 * used by it alone, takes that concat's operands in its place: one copy
 * of the data instead of two (nested concatenations, as Inception's
 * blocks write them). */
static rill_status_t merge_concat(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  if (!asm_is_op(c, &f->nodes.items[i], "concat")) return NULL;
  int64_t axis = asm_concat_axis(c, &f->nodes.items[i]);
  uint32_t total = 0;
  bool merge = false;
  for (uint32_t j = 0; j < f->nodes.items[i].nargs; j++) {
    int32_t m = inner_concat(c, f, nuse, dead, f->nodes.items[i].args[j], axis);
    total += m >= 0 ? f->nodes.items[m].nargs : 1;
    merge |= m >= 0;
  }
  if (!merge) return NULL;
  uint32_t *args = rill__arena_alloc(&c->arena, sizeof *args * total);
  rill_type_t *in = rill__arena_alloc(&c->arena, sizeof *in * total);
  if (!args || !in) return rill__oom();
  ir_node_t *n = &f->nodes.items[i];
  uint32_t k = 0;
  for (uint32_t j = 0; j < n->nargs; j++) {
    uint32_t v = n->args[j];
    int32_t m = inner_concat(c, f, nuse, dead, v, axis);
    if (m >= 0) {
      for (uint32_t q = 0; q < f->nodes.items[m].nargs; q++) args[k++] = f->nodes.items[m].args[q];
      dead[m] = true;
      f->values.items[v].def = -1;
    } else {
      args[k++] = v;
    }
  }
  for (uint32_t j = 0; j < total; j++) in[j] = f->values.items[args[j]].type;
  const isa_opdecl_t *d = asm_decl(c, n);
  uint32_t op;
  RILL_TRY(asm_intern_op(c, d->name, in, total, d->out, 1, d->attrs, d->nattrs, &op));
  n = &f->nodes.items[i];
  n->target = op;
  n->args = args;
  n->nargs = total;
  return NULL;
}

/* The permutation of transpose or matmul attribute `name` (rank r) into
 * perm, axes counted from the front; false where it is absent. */
static bool perm_of(const isa_opdecl_t *d, const char *name, int r, int64_t *perm) {
  const isa_attr_t *a = asm_attr(d, name);
  if (!a || (int)a->count != r) return false;
  for (int i = 0; i < r; i++) perm[i] = a->ints[i] < 0 ? a->ints[i] + r : a->ints[i];
  return true;
}

/* transpose(transpose(x, p), q), the inner used by the outer alone:
 * transpose(x, r) with r[i] = p[q[i]] (one copy; attention's keys are
 * split into heads, then transposed for the scores). */
static rill_status_t merge_transposes(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *tn = &f->nodes.items[i];
  if (!asm_is_op(c, tn, "transpose")) return NULL;
  int32_t mi = sole_maker(c, f, nuse, dead, tn->args[0], "transpose");
  if (mi < 0) return NULL;
  const isa_opdecl_t *od = asm_decl(c, tn), *id = asm_decl(c, &f->nodes.items[mi]);
  int r = od->in[0].rank;
  int64_t p[RILL_MAX_RANK], q[RILL_MAX_RANK];
  if (!perm_of(id, "perm", r, p) || !perm_of(od, "perm", r, q)) return NULL;
  int64_t *rp = rill__arena_alloc(&c->arena, sizeof *rp * (size_t)(r ? r : 1));
  if (!rp) return rill__oom();
  for (int k = 0; k < r; k++) rp[k] = p[q[k]];
  isa_attr_t a = {.name = "perm", .kind = ISA_ATTR_INTS, .count = (uint32_t)r, .ints = rp};
  uint32_t op;
  RILL_TRY(asm_intern_op(c, "transpose", id->in, 1, od->out, 1, &a, 1, &op));
  tn = &f->nodes.items[i];
  tn->target = op;
  uint32_t v = tn->args[0];
  tn->args = f->nodes.items[mi].args;
  f->values.items[v].def = -1;
  dead[mi] = true;
  return NULL;
}

/* transpose(x, p) where the axes it moves past one another all have size 1
 * (the axes of other sizes keep their order): the same bytes in the same
 * order, so a reshape (a view, no copy). A decode step's heads transposed
 * around attention at one query position are such. */
static rill_status_t transpose_as_view(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  (void)nuse, (void)dead;
  ir_node_t *tn = &f->nodes.items[i];
  if (!asm_is_op(c, tn, "transpose")) return NULL;
  const isa_opdecl_t *d = asm_decl(c, tn);
  const rill_type_t *it = &d->in[0], *ot = &d->out[0];
  int r = it->rank;
  int64_t p[RILL_MAX_RANK];
  if (!perm_of(d, "perm", r, p)) return NULL;
  int64_t last = -1;
  for (int k = 0; k < r; k++) {
    if (p[k] < 0 || p[k] >= r) return NULL;
    if (!isa_dim_is_sym(it->dims[p[k]]) && it->dims[p[k]] == 1) continue;
    if (p[k] < last) return NULL;
    last = p[k];
  }
  isa_attr_t *a = rill__arena_alloc(&c->arena, sizeof *a);
  int64_t *dims = rill__arena_memdup(&c->arena, ot->dims, sizeof(int64_t) * (size_t)(r ? r : 1));
  if (!a || !dims) return rill__oom();
  *a = (isa_attr_t){.name = "shape", .kind = ISA_ATTR_INTS, .count = (uint32_t)r, .ints = dims};
  uint32_t op;
  RILL_TRY(asm_intern_op(c, "reshape", it, 1, ot, 1, a, 1, &op));
  f->nodes.items[i].target = op;
  return NULL;
}

/* Whether cuBLASLt reads a product's operand stored as type t through
 * permutation perm as one strided batch of matrices, whatever sizes the
 * shape variables take: the stored tensor's last axis is one of the
 * matrix's two (a row-major or a column-major matrix, its leading
 * dimension the other's stride), and the batch axes of a size other than 1
 * lie in the stored tensor in the product's order, one after another
 * (stored axes of size 1 between them aside), so that one stride walks
 * them all (cuda_nn.c's batch_stride): swin's keys [windows, heads, tokens,
 * dim] read transposed. With y, the product's result written through it:
 * its last axis must stay last (a row-major result). */
static bool strided_batch(const rill_type_t *t, const int64_t *perm, bool y) {
  int r = t->rank, last = -1;
  if (r < 2 || !rill__is_float(t->dtype)) return false;
  if (y ? perm[r - 1] != r - 1 : perm[r - 1] != r - 1 && perm[r - 2] != r - 1) return false;
  /* the stored axis k's size: the result's axis perm[k] (y), else t's */
  int64_t stored[RILL_MAX_RANK];
  for (int k = 0; k < r; k++) stored[k] = t->dims[y ? perm[k] : k];
  for (int i = 0; i < r - 2; i++) {
    int place = -1;
    for (int k = 0; k < r; k++)
      if (y ? perm[k] == i : k == perm[i]) place = k;
    if (!isa_dim_is_sym(stored[place]) && stored[place] == 1) continue;
    if (last >= 0) {
      if (place < last) return false;
      for (int k = last + 1; k < place; k++)
        if (isa_dim_is_sym(stored[k]) || stored[k] != 1) return false;
    }
    last = place;
  }
  return true;
}

/* Op d, a matmul, with operands of types in, result of type out, and
 * permutation attribute `name` (rank r) added, interned. */
static rill_status_t intern_permuted(asm_ctx_t *c, const isa_opdecl_t *d, const rill_type_t *in, const rill_type_t *out, const char *name,
                                     const int64_t *perm, int r, uint32_t *op) {
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (d->nattrs + 1));
  int64_t *pv = rill__arena_alloc(&c->arena, sizeof *pv * (size_t)r);
  if (!at || !pv) return rill__oom();
  if (d->nattrs) memcpy(at, d->attrs, sizeof *at * d->nattrs);
  memcpy(pv, perm, sizeof *pv * (size_t)r);
  at[d->nattrs] = (isa_attr_t){.name = name, .kind = ISA_ATTR_INTS, .count = (uint32_t)r, .ints = pv};
  return asm_intern_op(c, d->name, in, d->nin, out, 1, at, d->nattrs + 1, op);
}

/* A float matmul reads a transposed operand through the transpose's
 * permutation (perm_a, perm_b), and a transpose of its result (used by it
 * alone) becomes its perm_y, where cuBLASLt takes the operands and result
 * as strided batches (strided_batch): attention's heads split, keys
 * transposed and heads merged, five copies a layer, cost nothing then. */
static rill_status_t merge_matmul_transposes(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *n = &f->nodes.items[i];
  int64_t perm[RILL_MAX_RANK];
  if (asm_is_op(c, n, "transpose")) {
    int32_t mi = sole_maker(c, f, nuse, dead, n->args[0], "matmul");
    if (mi < 0) return NULL;
    const isa_opdecl_t *md = asm_decl(c, &f->nodes.items[mi]), *td = asm_decl(c, n);
    int r = md->out[0].rank;
    uint32_t op;
    if (asm_attr(md, "perm_y") || !perm_of(td, "perm", r, perm) || !strided_batch(&md->out[0], perm, true)) return NULL;
    RILL_TRY(intern_permuted(c, md, md->in, td->out, "perm_y", perm, r, &op));
    f->nodes.items[mi].target = op;
    take_over(f, mi, i, n->args[0], dead);
    return NULL;
  }
  if (!asm_is_op(c, n, "matmul")) return NULL;
  static const char *const names[2] = {"perm_a", "perm_b"};
  for (int j = 0; j < 2; j++) {
    n = &f->nodes.items[i];
    const isa_opdecl_t *md = asm_decl(c, n);
    uint32_t v = n->args[j];
    int32_t ti = sole_maker(c, f, nuse, dead, v, "transpose");
    if (ti < 0 || asm_attr(md, names[j])) continue;
    const isa_opdecl_t *td = asm_decl(c, &f->nodes.items[ti]);
    int r = td->in[0].rank;
    if (!perm_of(td, "perm", r, perm) || !strided_batch(&td->in[0], perm, false)) continue;
    rill_type_t in[2] = {md->in[0], md->in[1]};
    in[j] = td->in[0];
    uint32_t op, *args = rill__arena_alloc(&c->arena, 2 * sizeof *args);
    if (!args) return rill__oom();
    RILL_TRY(intern_permuted(c, md, in, md->out, names[j], perm, r, &op));
    n = &f->nodes.items[i];
    args[0] = n->args[0];
    args[1] = n->args[1];
    args[j] = f->nodes.items[ti].args[0];
    n->args = args;
    n->target = op;
    f->values.items[v].def = -1;
    dead[ti] = true;
  }
  return NULL;
}

/* Whether node n is a transpose by [0,2,1,3] (rank 4): heads and positions swapped. */
static bool heads_swap(const asm_ctx_t *c, const ir_node_t *n) {
  static const int64_t swap[4] = {0, 2, 1, 3};
  int64_t p[RILL_MAX_RANK];
  return asm_is_op(c, n, "transpose") && perm_of(asm_decl(c, n), "perm", 4, p) && !memcmp(p, swap, sizeof swap);
}

/* Attention's heads as exporters split them: q, k and v each a transpose
 * by [0,2,1,3] of [B,S,H,D] (read by the attention alone) and the result
 * transposed back by [0,2,1,3] (its only use): the attention reads and
 * writes [B,S,H,D] itself (layout="bshd", the kernels stepping over the
 * heads by strides) and the four copies are gone. */
static rill_status_t attention_heads_in_place(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *n = &f->nodes.items[i];
  if (!heads_swap(c, n)) return NULL;
  int32_t mi = sole_maker(c, f, nuse, dead, n->args[0], "attention");
  if (mi < 0) return NULL;
  const isa_opdecl_t *ad = asm_decl(c, &f->nodes.items[mi]);
  if (asm_attr(ad, "layout")) return NULL;
  int32_t ti[3];
  for (int j = 0; j < 3; j++) {
    ti[j] = sole_maker(c, f, nuse, dead, f->nodes.items[mi].args[j], "transpose");
    if (ti[j] < 0 || !heads_swap(c, &f->nodes.items[ti[j]])) return NULL;
  }
  rill_type_t in[5];
  uint32_t nin = ad->nin, nat = ad->nattrs;
  memcpy(in, ad->in, sizeof *in * nin);
  for (int j = 0; j < 3; j++) in[j] = asm_decl(c, &f->nodes.items[ti[j]])->in[0];
  rill_type_t out = asm_decl(c, n)->out[0];
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (nat + 1));
  uint32_t *args = rill__arena_memdup(&c->arena, f->nodes.items[mi].args, sizeof *args * nin);
  if (!at || !args) return rill__oom();
  if (nat) memcpy(at, ad->attrs, sizeof *at * nat);
  at[nat] = (isa_attr_t){.name = "layout", .kind = ISA_ATTR_STRING, .count = 1, .str = "bshd"};
  uint32_t op;
  RILL_TRY(asm_intern_op(c, "attention", in, nin, &out, 1, at, nat + 1, &op));
  for (int j = 0; j < 3; j++) {
    f->values.items[args[j]].def = -1;
    args[j] = f->nodes.items[ti[j]].args[0];
    dead[ti[j]] = true;
  }
  ir_node_t *m = &f->nodes.items[mi];
  m->target = op;
  m->args = args;
  take_over(f, mi, i, f->nodes.items[i].args[0], dead);
  return NULL;
}

/* Packed attention: q, k and v as one operand, where they are the heads
 * of one product's result. The value behind attention operand v: a
 * reshape [B,S,N] -> [B,S,H,D] read by the attention alone, of x (*from)
 * made by node *maker (-1: none). */
static bool packed_part(const asm_ctx_t *c, const ir_func_t *f, const uint32_t *nuse, const bool *dead, uint32_t v, int32_t *reshape,
                        uint32_t *from, int32_t *maker) {
  int32_t r = sole_maker(c, f, nuse, dead, v, "reshape");
  if (r < 0) return false;
  const isa_opdecl_t *d = asm_decl(c, &f->nodes.items[r]);
  const rill_type_t *x = &d->in[0], *y = &d->out[0];
  if (x->rank != 3 || y->rank != 4 || x->dims[0] != y->dims[0] || x->dims[1] != y->dims[1] || x->dims[2] != y->dims[2] * y->dims[3]) return false;
  *reshape = r;
  *from = f->nodes.items[r].args[0];
  *maker = nuse[*from] == 1 && !f->values.items[*from].escapes ? f->values.items[*from].def : -1;
  return true;
}

/* Whether linear d takes its weight [K,N] (weight="kn", as ONNX's MatMul gives it). */
static bool weight_kn(const isa_opdecl_t *d) {
  const isa_attr_t *w = asm_attr(d, "weight");
  return w && !strcmp(w->str, "kn");
}

/* Whether linear nodes l[0..3) read one operand with constant weights of
 * one dtype and width, constant biases alike (all or none), nothing else,
 * and their results nothing but the reshapes. */
static bool packed_linears(const asm_ctx_t *c, const ir_func_t *f, const bool *dead, const int32_t *l) {
  if (l[0] < 0) return false;
  const ir_node_t *n0 = &f->nodes.items[l[0]];
  const isa_opdecl_t *d0 = asm_decl(c, n0);
  bool kn = weight_kn(d0);
  for (int j = 0; j < 3; j++) {
    if (l[j] < 0 || dead[l[j]]) return false;
    const ir_node_t *n = &f->nodes.items[l[j]];
    const isa_opdecl_t *d = asm_decl(c, n);
    /* no attribute but weight="kn", on all or none; K (the weight's kn ? first : second dim) the same */
    if (!asm_is_op(c, n, "linear") || weight_kn(d) != kn || d->nattrs != (kn ? 1u : 0u) || n->nargs != n0->nargs || n->nargs > 3 ||
        n->args[0] != n0->args[0] || asm_touches_state(c, f, n) || d->in[1].dtype != d0->in[1].dtype || d->in[1].rank != 2 ||
        d->in[1].dims[!kn] != d0->in[1].dims[!kn] || !asm_const_of(c, f, n->args[1]))
      return false;
    if (n->nargs == 3 && (d->in[2].rank != 1 || d->in[2].dtype != d0->in[2].dtype || !asm_const_of(c, f, n->args[2]))) return false;
  }
  return true;
}

/* A self-attention in [B,S,H,D] (layout="bshd", q, k and v of one length,
 * no len) whose q, k and v are the heads of three products of one operand
 * with constant weights (BERT's, ViT's exports: linear, reshape; each read
 * by the next alone), or the three parts, in that order, of a split of one
 * value on its last axis (GPT-2's fused projection): one product over the
 * weights stacked (or the split's operand) reshaped to [B,S,Hq+2Hkv,D] is
 * the attention's one operand (kv_heads=Hkv); the kernel reads the heads
 * of each where they lie. Two launches and the split's copies are gone. */
static rill_status_t attention_packed(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *n = &f->nodes.items[i];
  if (!asm_is_op(c, n, "attention") || n->nres != 1) return NULL;
  const isa_opdecl_t A = *asm_decl(c, n), *ad = &A; /* (a copy: interning grows the table) */
  const isa_attr_t *lay = asm_attr(ad, "layout");
  if (!lay || strcmp(lay->str, "bshd") || asm_attr(ad, "kv_heads") || n->nargs < 3 || n->nargs > 4 ||
      (n->nargs == 4 && !rill__is_float(ad->in[3].dtype)) || ad->in[0].dims[1] != ad->in[1].dims[1])
    return NULL;
  int32_t r[3], m[3];
  uint32_t from[3];
  for (int j = 0; j < 3; j++)
    if (!packed_part(c, f, nuse, dead, n->args[j], &r[j], &from[j], &m[j])) return NULL;
  int64_t Hq = ad->in[0].dims[2], Hkv = ad->in[1].dims[2], D = ad->in[0].dims[3], Ht = Hq + 2 * Hkv;
  const rill_type_t *xt = &asm_decl(c, &f->nodes.items[r[0]])->in[0];
  rill_type_t ht = {xt->dtype, 3, {xt->dims[0], xt->dims[1], Ht * D}}, h4 = {xt->dtype, 4, {xt->dims[0], xt->dims[1], Ht, D}};
  /* the op as it will be, checked before anything changes */
  int64_t *dims = rill__arena_memdup(&c->arena, h4.dims, 4 * sizeof(int64_t)), *kv = rill__arena_memdup(&c->arena, &Hkv, sizeof Hkv);
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (ad->nattrs + 1));
  if (!dims || !kv || !at) return rill__oom();
  memcpy(at, ad->attrs, sizeof *at * ad->nattrs);
  at[ad->nattrs] = (isa_attr_t){.name = "kv_heads", .kind = ISA_ATTR_INT, .count = 1, .ints = kv};
  rill_type_t ain[2] = {h4, n->nargs == 4 ? ad->in[3] : h4}, aout;
  uint32_t nout;
  ops_params_t prm;
  rill_status_t ist = ops_infer_sym(ops_find("attention"), &c->syms, ain, n->nargs - 2, at, ad->nattrs + 1, &aout, 1, &nout, &prm);
  bool fits = !ist && rill__type_eq(&aout, &ad->out[0]);
  rill_status_free(ist);
  if (!fits) return NULL;
  uint32_t h;
  int32_t split = m[0];
  bool by_split = split >= 0 && m[1] == split && m[2] == split && asm_is_op(c, &f->nodes.items[split], "split") && !dead[split];
  if (by_split) {
    /* the split's three results, q's, k's and v's in order, on the last axis */
    const ir_node_t *sn = &f->nodes.items[split];
    const isa_opdecl_t *sd = asm_decl(c, sn);
    const isa_attr_t *ax = asm_attr(sd, "axis");
    int64_t axis = ax ? ax->ints[0] : 0;
    if (sn->nres != 3 || sd->in[0].rank != 3 || (axis != 2 && axis != -1) || sn->res[0] != from[0] || sn->res[1] != from[1] || sn->res[2] != from[2])
      return NULL;
    h = sn->args[0];
    if (!rill__type_eq(&sd->in[0], &ht)) return NULL;
    dead[split] = true;
  } else {
    if (!packed_linears(c, f, dead, m)) return NULL;
    /* the weights (and biases) stacked: one product where there were three */
    const ir_node_t *l0 = &f->nodes.items[m[0]];
    const isa_opdecl_t D0 = *asm_decl(c, l0), *d0 = &D0;
    bool bias = l0->nargs == 3;
    uint32_t wk[3], wv[3], bk[3], bv[3], args[3] = {l0->args[0]};
    for (int j = 0; j < 3; j++) {
      const ir_node_t *l = &f->nodes.items[m[j]];
      wv[j] = l->args[1], wk[j] = f->values.items[wv[j]].konst;
      if (bias) bv[j] = l->args[2], bk[j] = f->values.items[bv[j]].konst;
    }
    bool kn = weight_kn(d0);
    size_t K = (size_t)d0->in[1].dims[!kn];
    if ((size_t)(Ht * D) * K * rill_dtype_size(d0->in[1].dtype) > FOLD_MAX_IN_BYTES) return NULL;
    rill_type_t wt = {d0->in[1].dtype, 2, {kn ? (int64_t)K : Ht * D, kn ? Ht * D : (int64_t)K}}, bt = {bias ? d0->in[2].dtype : RILL_F32, 1, {Ht * D}};
    RILL_TRY(stacked_weights(c, f, wk, 3, &wt, wv, kn, &args[1]));
    if (bias) RILL_TRY(stacked_weights(c, f, bk, 3, &bt, bv, false, &args[2]));
    rill_type_t in[3] = {d0->in[0], wt, bt};
    uint32_t op, *ap = rill__arena_memdup(&c->arena, args, sizeof args), *res = rill__arena_alloc(&c->arena, sizeof *res);
    if (!ap || !res) return rill__oom();
    RILL_TRY(asm_value_like(c, f, from[0], &ht, ".qkv", &h));
    RILL_TRY(asm_intern_op(c, "linear", in, l0->nargs, &ht, 1, d0->attrs, d0->nattrs, &op));
    ir_node_t *l = &f->nodes.items[m[0]];
    l->target = op, l->args = ap, l->nargs = bias ? 3 : 2, *res = h, l->res = res;
    f->values.items[h].def = m[0];
    f->values.items[from[0]].def = -1;
    for (int j = 1; j < 3; j++) dead[m[j]] = true, f->values.items[from[j]].def = -1;
  }
  /* h viewed [B,S,Ht,D] at q's reshape, read by the attention (its mask kept) */
  uint32_t *ra = rill__arena_alloc(&c->arena, sizeof *ra), *aa = rill__arena_alloc(&c->arena, 2 * sizeof *aa), rop, aop, hv4;
  if (!ra || !aa) return rill__oom();
  isa_attr_t shape = {.name = "shape", .kind = ISA_ATTR_INTS, .count = 4, .ints = dims};
  RILL_TRY(asm_intern_op(c, "reshape", &ht, 1, &h4, 1, &shape, 1, &rop));
  RILL_TRY(asm_value_like(c, f, h, &h4, "4", &hv4));
  RILL_TRY(asm_intern_op(c, "attention", ain, n->nargs - 2, ad->out, 1, at, ad->nattrs + 1, &aop));
  ir_node_t *rq = &f->nodes.items[r[0]];
  *ra = h, rq->args = ra, rq->target = rop;
  uint32_t *rres = rill__arena_memdup(&c->arena, &hv4, sizeof hv4);
  if (!rres) return rill__oom();
  f->values.items[rq->res[0]].def = -1;
  rq->res = rres;
  f->values.items[hv4].def = r[0];
  for (int j = 1; j < 3; j++) dead[r[j]] = true, f->values.items[f->nodes.items[r[j]].res[0]].def = -1;
  n = &f->nodes.items[i];
  aa[0] = hv4;
  if (n->nargs == 4) aa[1] = n->args[3];
  n->args = aa, n->nargs -= 2, n->target = aop;
  return NULL;
}

/* ---- transposes read or written by elementwise kernels ---- */

/* Whether permutation p (rank r) keeps the last axis last: a kernel that
 * reads through it reads runs of the last axis, whole. */
static bool keeps_last(const int64_t *p, int r) { return r >= 1 && p[r - 1] == r - 1; }

/* Node n (a fused group, or one elementwise op made a group of one) as a
 * fused op over operands `args` (types `in`, permutations `perm`, each of
 * its operand's rank) with result type `out`: interned into *op. */
static rill_status_t intern_group(asm_ctx_t *c, const ir_node_t *n, const rill_type_t *in, uint32_t nin,
                                  int64_t (*perm)[RILL_MAX_RANK], const rill_type_t *out, uint32_t nout, uint32_t *op) {
  const isa_opdecl_t *d = asm_decl(c, n);
  const char *expr = NULL;
  if (!strcmp(d->name, "fused")) {
    expr = asm_attr(d, "expr")->str;
  } else {
    rill_buf_t b;
    rill__buf_init(&b, c->a);
    char names[3][8];
    const char *ap[3];
    for (uint32_t j = 0; j < n->nargs && j < 3; j++) {
      snprintf(names[j], sizeof names[j], "x%u", j);
      ap[j] = names[j];
    }
    rill_status_t st = ops_fused_print_step(&b, 0, d->name, d->attrs, d->nattrs, ap, n->nargs);
    if (!st) st = rill__buf_printf(&b, "; return t0");
    if (!st && !(expr = rill__arena_strndup(&c->arena, (const char *)b.data, b.len))) st = rill__oom();
    rill__buf_free(&b);
    RILL_TRY(st);
  }
  uint32_t total = 0;
  for (uint32_t k = 0; k < nin; k++) total += (uint32_t)in[k].rank;
  isa_attr_t *at = rill__arena_alloc(&c->arena, 2 * sizeof *at);
  int64_t *pv = rill__arena_alloc(&c->arena, sizeof *pv * (total ? total : 1));
  if (!at || !pv) return rill__oom();
  for (uint32_t k = 0, q = 0; k < nin; k++)
    for (int i = 0; i < in[k].rank; i++) pv[q++] = perm[k][i];
  at[0] = (isa_attr_t){.name = "expr", .kind = ISA_ATTR_STRING, .count = 1, .str = expr};
  at[1] = (isa_attr_t){.name = "perms", .kind = ISA_ATTR_INTS, .count = total, .ints = pv};
  return asm_intern_op(c, "fused", in, nin, out, nout, at, total ? 2 : 1, op);
}

/* A fused group's or elementwise op's operands' permutations so far (the
 * identity where it has none). */
static void group_perms(const asm_ctx_t *c, const ir_node_t *n, int64_t (*perm)[RILL_MAX_RANK]) {
  const isa_opdecl_t *d = asm_decl(c, n);
  const isa_attr_t *pa = !strcmp(d->name, "fused") ? asm_attr(d, "perms") : NULL;
  for (uint32_t k = 0, q = 0; k < d->nin; k++)
    for (int i = 0; i < d->in[k].rank; i++) perm[k][i] = pa ? pa->ints[q++] : i;
}

/* Whether node n is a fused group or an elementwise op with one result. */
static bool group_like(const asm_ctx_t *c, const ir_node_t *n) {
  if (n->kind != N_OP || n->nres != 1) return false;
  const ops_def_t *def = ops_find(asm_decl(c, n)->name);
  return def && (ops_is_elementwise(def) || def->cpu == ops_cpu_fused) && n->nargs <= OPS_FUSED_MAX_IN;
}

/* A transpose that keeps the last axis last, whose result a fused group
 * (or one elementwise op) alone reads, is read through its permutation by
 * that group's kernel; a transpose of such a group's one result, its only
 * use, becomes the group computed in the transposed order (every operand
 * of its rank read through the permutation; one of lower rank, which
 * broadcasts along the leading axes, where the permutation leaves its
 * axes in place). The copy is gone either way. */
static rill_status_t absorb_transposes(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *n = &f->nodes.items[i];
  int64_t perm[OPS_FUSED_MAX_IN][RILL_MAX_RANK], p[RILL_MAX_RANK];
  if (asm_is_op(c, n, "transpose")) { /* the result side */
    int32_t mi = sole_maker(c, f, nuse, dead, n->args[0], NULL);
    if (mi < 0 || !group_like(c, &f->nodes.items[mi])) return NULL;
    const isa_opdecl_t *td = asm_decl(c, n), *md = asm_decl(c, &f->nodes.items[mi]);
    int r = td->in[0].rank;
    if (!perm_of(td, "perm", r, p) || !keeps_last(p, r)) return NULL;
    group_perms(c, &f->nodes.items[mi], perm);
    rill_type_t in[OPS_FUSED_MAX_IN], out = td->out[0];
    for (uint32_t k = 0; k < md->nin; k++) {
      in[k] = md->in[k];
      if (asm_single_element(&in[k])) continue;
      if (in[k].rank > r) return NULL;
      if (in[k].rank < r) { /* broadcast along the leading axes: the same where p moves none of its own */
        for (int e = r - in[k].rank; e < r; e++)
          if (p[e] != e) return NULL;
        continue;
      }
      int64_t q[RILL_MAX_RANK];
      for (int e = 0; e < r; e++) q[e] = perm[k][p[e]];
      memcpy(perm[k], q, sizeof q);
    }
    uint32_t op;
    RILL_TRY(intern_group(c, &f->nodes.items[mi], in, md->nin, perm, &out, 1, &op));
    f->nodes.items[mi].target = op;
    take_over(f, mi, i, n->args[0], dead);
    return NULL;
  }
  if (!group_like(c, n)) return NULL;
  const isa_opdecl_t *d = asm_decl(c, n);
  uint32_t nin = d->nin;
  rill_type_t in[OPS_FUSED_MAX_IN], out = d->out[0];
  memcpy(in, d->in, sizeof *in * nin);
  group_perms(c, n, perm);
  uint32_t *args = NULL;
  bool any = false;
  for (uint32_t j = 0; j < nin; j++) {
    int32_t ti = sole_maker(c, f, nuse, dead, f->nodes.items[i].args[j], "transpose");
    if (ti < 0) continue;
    const isa_opdecl_t *td = asm_decl(c, &f->nodes.items[ti]);
    int r = td->in[0].rank;
    if (!perm_of(td, "perm", r, p) || !keeps_last(p, r) || r != in[j].rank) continue;
    if (!args && !(args = rill__arena_memdup(&c->arena, f->nodes.items[i].args, sizeof *args * nin))) return rill__oom();
    int64_t q[RILL_MAX_RANK];
    for (int e = 0; e < r; e++) q[e] = p[perm[j][e]];
    memcpy(perm[j], q, sizeof q);
    in[j] = td->in[0];
    f->values.items[args[j]].def = -1;
    args[j] = f->nodes.items[ti].args[0];
    dead[ti] = true;
    any = true;
  }
  if (!any) return NULL;
  uint32_t op;
  RILL_TRY(intern_group(c, &f->nodes.items[i], in, nin, perm, &out, 1, &op));
  n = &f->nodes.items[i];
  n->target = op;
  n->args = args;
  return NULL;
}

rill_status_t asm_pass_fuse(asm_ctx_t *c, ir_func_t *f) {
  if (f->hand_scheduled) return NULL;
  RILL_TRY(merge_parallel_linears(c, f));
  RILL_TRY(merge_pass(c, f, merge_bias));
  RILL_TRY(merge_pass(c, f, merge_scale_linear));
  RILL_TRY(asm_fuse_decode(c, f));
  RILL_TRY(merge_pass(c, f, merge_residual));
  RILL_TRY(merge_pass(c, f, merge_norm_residual));
  RILL_TRY(merge_pass(c, f, merge_softmax_scale));
  RILL_TRY(merge_pass(c, f, merge_gelu));
  RILL_TRY(merge_pass(c, f, merge_activation));
  RILL_TRY(merge_pass(c, f, merge_prologue));
  RILL_TRY(merge_pass(c, f, merge_epilogue));
  RILL_TRY(merge_pass(c, f, merge_concat));
  RILL_TRY(merge_pass(c, f, merge_transposes));
  RILL_TRY(merge_pass(c, f, merge_matmul_transposes));
  RILL_TRY(merge_pass(c, f, attention_heads_in_place));
  RILL_TRY(merge_pass(c, f, attention_packed));
  RILL_TRY(merge_pass(c, f, transpose_as_view));
  size_t N = f->nodes.len;
  uint32_t *nuse = NULL, *mem = NULL;
  int32_t *gof = rill__calloc(c->a, N ? N : 1, sizeof(int32_t));
  group_t *g = rill__calloc(c->a, N ? N : 1, sizeof(group_t));
  bool *dead = rill__calloc(c->a, N ? N : 1, sizeof(bool));
  mem = rill__calloc(c->a, N ? N : 1, sizeof(uint32_t));
  rill_status_t st = gof && g && dead && mem ? count_uses(c, f, &nuse) : rill__oom();
  for (size_t i = 0; !st && i < N; i++) {
    ir_node_t *n = &f->nodes.items[i];
    gof[i] = -1;
    g[i] = (group_t){(int32_t)i, false, 0};
    const ops_def_t *def = n->kind == N_OP ? ops_find(asm_decl(c, n)->name) : NULL;
    const rill_type_t *t = n->nres == 1 ? &f->values.items[n->res[0]].type : NULL;
    if (def && ops_is_elementwise(def) && n->nres == 1 && !asm_touches_state(c, f, n)) {
      /* Join (and merge) the open groups of producers of this shape (a
       * group stands at its last op: a read of a state could move past an update). */
      int32_t mine = -1;
      for (uint32_t j = 0; j < n->nargs; j++) {
        int32_t d = f->values.items[n->args[j]].def;
        if (d < 0 || gof[d] < 0) continue;
        int32_t h = find(g, gof[d]);
        if (g[h].sealed || !same_shape(&f->values.items[n->args[j]].type, t) || h == mine) continue;
        if (mine < 0) {
          mine = h;
        } else if (g[mine].nodes + g[h].nodes < OPS_FUSED_MAX_NODES / 2) {
          g[h].parent = mine;
          g[mine].nodes += g[h].nodes;
        }
      }
      if (mine >= 0 && g[mine].nodes + 1 >= OPS_FUSED_MAX_NODES / 2) mine = -1;
      if (mine < 0) mine = (int32_t)i;
      gof[i] = mine;
      g[mine].nodes++;
    }
    /* Producers' groups this node does not belong to are used from outside now. */
    int32_t own = gof[i] >= 0 ? find(g, gof[i]) : -1;
    for (uint32_t j = 0; j < n->nargs; j++) {
      int32_t d = f->values.items[n->args[j]].def;
      if (d < 0 || gof[d] < 0) continue;
      int32_t h = find(g, gof[d]);
      if (h != own) g[h].sealed = true;
    }
  }
  for (size_t i = 0; !st && i < N; i++)
    if (gof[i] >= 0) gof[i] = find(g, gof[i]);
  /* Each group with two or more ops, its members in order (linked from
   * the root through `next`, reusing `mem`'s room after the lists). */
  bool any = false;
  int32_t *head = NULL, *tail = NULL, *next = NULL;
  if (!st && (!(head = rill__calloc(c->a, N ? N : 1, sizeof(int32_t))) || !(tail = rill__calloc(c->a, N ? N : 1, sizeof(int32_t))) ||
              !(next = rill__calloc(c->a, N ? N : 1, sizeof(int32_t)))))
    st = rill__oom();
  for (size_t i = 0; !st && i < N; i++) head[i] = tail[i] = next[i] = -1;
  for (size_t i = 0; !st && i < N; i++) {
    int32_t r = gof[i];
    if (r < 0) continue;
    if (tail[r] < 0) head[r] = (int32_t)i;
    else next[tail[r]] = (int32_t)i;
    tail[r] = (int32_t)i;
  }
  for (size_t r = 0; !st && r < N; r++) {
    if (g[r].parent != (int32_t)r || g[r].nodes < 2 || head[r] < 0) continue;
    uint32_t nm = 0;
    for (int32_t k = head[r]; k >= 0; k = next[k]) mem[nm++] = (uint32_t)k;
    bool done = false;
    if (nm >= 2) st = emit_group(c, f, mem, nm, gof, (int32_t)r, nuse, dead, &done);
    any |= done;
  }
  rill__free(c->a, head);
  rill__free(c->a, tail);
  rill__free(c->a, next);
  if (!st && any) st = compact(c, f, dead);
  rill__free(c->a, nuse);
  rill__free(c->a, mem);
  rill__free(c->a, gof);
  rill__free(c->a, g);
  rill__free(c->a, dead);
  if (!st) st = merge_pass(c, f, absorb_transposes);
  return st;
}
