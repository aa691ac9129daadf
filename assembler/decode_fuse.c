/* decode_fuse.c: -O1's fusions around a decode step's products, run by
 * asm_pass_fuse after the linears that share an operand are stacked.
 *
 * A product of a few rows (a decode step at batch 1 to FLIN_MAX_ROWS: one
 * pass over the weights, which the GPU's gemv kernel reads once) is cheap
 * to read its operand through a little arithmetic and to add a residual as
 * it stores, and each op around it is a kernel launch and a trip through
 * memory of its own. So, where the product is a float linear without an
 * activation whose x has at most FLIN_MAX_ROWS rows (numbers, no shape
 * variable):
 *
 *   norm      rms_norm(a, g) over the last axis, whose result only such
 *             products read (as their x): each becomes
 *             fused_linear(a, w, b?, g) {prologue="rms_norm", eps}, which
 *             computes the row's sum of squares itself (a norm read by
 *             anything else stays, and so do its products);
 *   gate      swiglu(g, u) or geglu(g, u) of one type (no broadcast), read
 *             by the product alone: fused_linear(g, w, b?, u) {prologue};
 *   residual  add(product, r), the product read by the add alone, r of the
 *             result's type: fused_linear(..., r) {residual=true} in the
 *             add's place (r may be made after the product).
 *
 * The op is ops/registry.c's fused_linear; its CPU reference rounds where
 * the ops it replaces round, so -O0 and -O1 give the same bits on the CPU.
 */
#include "asm.h"

/* The rows a fused product may have: ops/cuda_llm.c's gemv kernel's. */
#define FLIN_MAX_ROWS 4

/* A product's parts: operand indices of f's values (UINT32_MAX absent). */
typedef struct flin {
  uint32_t x, w, b, p, r;
  const char *pro; /* "none", "rms_norm", "swiglu", "geglu", "geglu_tanh" */
  double eps;
} flin_t;

#define NONE UINT32_MAX

/* Whether node n is a product these fusions take (above), and its parts. */
static bool small_product(const asm_ctx_t *c, const ir_node_t *n, flin_t *o) {
  if (n->kind != N_OP || n->nres != 1) return false;
  bool lin = asm_is_op(c, n, "linear"), fl = asm_is_op(c, n, "fused_linear");
  if (!lin && !fl) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const rill_type_t *x = &d->in[0];
  if (!rill__is_float(x->dtype) || asm_attr(d, "activation") || isa_type_is_sym(x) || x->rank < 1) return false;
  int64_t K = x->dims[x->rank - 1], rows = 1;
  for (int i = 0; i + 1 < x->rank; i++) rows *= x->dims[i];
  if (K < 1 || rows < 1 || rows > FLIN_MAX_ROWS) return false;
  *o = (flin_t){n->args[0], n->args[1], NONE, NONE, NONE, "none", 1e-6};
  if (lin) {
    if (n->nargs > 2) o->b = n->args[2];
    return true;
  }
  const isa_attr_t *pa = asm_attr(d, "prologue"), *ea = asm_attr(d, "eps"), *ra = asm_attr(d, "residual");
  if (pa) o->pro = pa->str;
  if (ea) o->eps = ea->kind == ISA_ATTR_FLOAT ? ea->floats[0] : (double)ea->ints[0];
  bool res = ra && ra->ints[0], pro = strcmp(o->pro, "none") != 0;
  uint32_t k = 2, need = 2 + pro + res;
  if (n->nargs == need + 1) o->b = n->args[k++];
  if (pro) o->p = n->args[k++];
  if (res) o->r = n->args[k];
  return true;
}

/* Node n becomes fused_linear over parts o (its result as it was). */
static rill_status_t flin_write(asm_ctx_t *c, ir_func_t *f, ir_node_t *n, const flin_t *o) {
  uint32_t args[5], na = 0, nat = 0;
  args[na++] = o->x;
  args[na++] = o->w;
  if (o->b != NONE) args[na++] = o->b;
  if (o->p != NONE) args[na++] = o->p;
  if (o->r != NONE) args[na++] = o->r;
  rill_type_t in[5];
  for (uint32_t k = 0; k < na; k++) in[k] = f->values.items[args[k]].type;
  isa_attr_t *at = rill__arena_alloc(&c->arena, 3 * sizeof *at);
  double *eps = rill__arena_alloc(&c->arena, sizeof *eps);
  int64_t *one = rill__arena_alloc(&c->arena, sizeof *one);
  uint32_t *av = rill__arena_memdup(&c->arena, args, na * sizeof *args);
  if (!at || !eps || !one || !av) return rill__oom();
  *eps = o->eps;
  *one = 1;
  if (strcmp(o->pro, "none")) at[nat++] = (isa_attr_t){.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = o->pro};
  if (!strcmp(o->pro, "rms_norm")) at[nat++] = (isa_attr_t){.name = "eps", .kind = ISA_ATTR_FLOAT, .count = 1, .floats = eps};
  if (o->r != NONE) at[nat++] = (isa_attr_t){.name = "residual", .kind = ISA_ATTR_BOOL, .count = 1, .ints = one};
  rill_type_t out = f->values.items[n->res[0]].type;
  uint32_t op;
  RILL_TRY(asm_intern_op(c, "fused_linear", in, na, &out, 1, at, nat, &op));
  n->target = op;
  n->args = av;
  n->nargs = na;
  return NULL;
}

/* rms_norm(a, g) over the last axis whose every use is a small product's
 * x (no prologue yet): the norm goes into each of them. */
static rill_status_t fuse_norm(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *rn = &f->nodes.items[i];
  if (!asm_is_op(c, rn, "rms_norm") || rn->nargs != 2 || rn->nres != 1) return NULL;
  const isa_opdecl_t *rd = asm_decl(c, rn);
  const rill_type_t *xt = &rd->in[0];
  const isa_attr_t *ax = asm_attr(rd, "axis"), *ea = asm_attr(rd, "eps");
  int64_t axis = ax ? ax->ints[0] : -1;
  if (!rill__is_float(xt->dtype) || xt->rank < 1 || (axis != -1 && axis != xt->rank - 1)) return NULL;
  uint32_t v = rn->res[0], found = 0;
  if (f->values.items[v].escapes || !nuse[v]) return NULL;
  for (size_t j = i + 1; j < f->nodes.len; j++) {
    const ir_node_t *n = &f->nodes.items[j];
    uint32_t here = 0;
    for (uint32_t k = 0; k < n->nargs; k++) here += n->args[k] == v;
    if (!here) continue;
    flin_t o;
    if (dead[j] || here != 1 || !small_product(c, n, &o) || o.x != v || strcmp(o.pro, "none")) return NULL;
    found++;
  }
  if (found != nuse[v]) return NULL;
  double eps = !ea ? 1e-6 : ea->kind == ISA_ATTR_FLOAT ? ea->floats[0] : (double)ea->ints[0];
  uint32_t a = rn->args[0], g = rn->args[1];
  for (size_t j = i + 1; j < f->nodes.len; j++) {
    ir_node_t *n = &f->nodes.items[j];
    flin_t o;
    if (dead[j] || !small_product(c, n, &o) || o.x != v) continue;
    o.x = a, o.p = g, o.pro = "rms_norm", o.eps = eps;
    RILL_TRY(flin_write(c, f, n, &o));
  }
  f->values.items[v].def = -1;
  dead[i] = true;
  return NULL;
}

/* A small product (no prologue yet) of swiglu(g, u) or geglu(g, u), the
 * gated unit read by it alone, g, u and its result of one type. */
static rill_status_t fuse_gate(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  flin_t o;
  if (!small_product(c, &f->nodes.items[i], &o) || strcmp(o.pro, "none")) return NULL;
  int32_t mi = asm_sole_maker(c, f, nuse, dead, o.x, NULL);
  if (mi < 0) return NULL;
  const ir_node_t *gn = &f->nodes.items[mi];
  bool swi = asm_is_op(c, gn, "swiglu");
  if ((!swi && !asm_is_op(c, gn, "geglu")) || gn->nargs != 2) return NULL;
  const rill_type_t *t = &f->values.items[o.x].type;
  if (!rill__type_eq(&f->values.items[gn->args[0]].type, t) || !rill__type_eq(&f->values.items[gn->args[1]].type, t)) return NULL;
  const isa_attr_t *ap = asm_attr(asm_decl(c, gn), "approximate");
  uint32_t v = o.x;
  o.pro = swi ? "swiglu" : ap && !strcmp(ap->str, "tanh") ? "geglu_tanh" : "geglu";
  o.x = gn->args[0];
  o.p = gn->args[1];
  RILL_TRY(flin_write(c, f, &f->nodes.items[i], &o));
  f->values.items[v].def = -1;
  dead[mi] = true;
  return NULL;
}

/* add(product, r), the small product (no residual yet) read by the add
 * alone, r and the sum of the product's type: the add becomes the product
 * with r as its residual. */
static rill_status_t fuse_residual(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *an = &f->nodes.items[i];
  if (!asm_is_op(c, an, "add") || an->nargs != 2 || an->nres != 1) return NULL;
  for (int side = 0; side < 2; side++) {
    uint32_t m = an->args[side], z = an->args[1 - side];
    int32_t mi = m == z ? -1 : asm_sole_maker(c, f, nuse, dead, m, NULL);
    flin_t o;
    if (mi < 0 || !small_product(c, &f->nodes.items[mi], &o) || o.r != NONE) continue;
    const rill_type_t *t = &f->values.items[m].type;
    if (!rill__type_eq(&f->values.items[z].type, t) || !rill__type_eq(&f->values.items[an->res[0]].type, t)) continue;
    o.r = z;
    RILL_TRY(flin_write(c, f, an, &o));
    an = &f->nodes.items[i];
    an->line = f->nodes.items[mi].line; /* errors name the product */
    an->col = f->nodes.items[mi].col;
    f->values.items[m].def = -1;
    dead[mi] = true;
    return NULL;
  }
  return NULL;
}

rill_status_t asm_fuse_decode(asm_ctx_t *c, ir_func_t *f) {
  RILL_TRY(asm_merge_pass(c, f, fuse_norm));
  RILL_TRY(asm_merge_pass(c, f, fuse_gate));
  return asm_merge_pass(c, f, fuse_residual);
}
