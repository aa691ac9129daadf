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
 *             add's place (r may be made after the product);
 *   glu       swiglu(g, u) or geglu(g, u) of the two equal halves of a split
 *             of such a product (no residual; no prologue, or the norm's)
 *             along its last axis, each half read by the gated unit alone:
 *             fused_linear(x, w, b?, g?) {epilogue, gate_second where g is
 *             the second half} in the unit's place, each
 *             warp of its kernel computing a column of both halves and
 *             storing the unit (a product with an epilogue takes no other
 *             fusion). The passes run rotary, norm, glu, gate, residual:
 *             a product that took a norm may take an epilogue too, and a
 *             unit that became an epilogue is no down product's prologue.
 *
 * The op is ops/registry.c's fused_linear; its CPU reference rounds where
 * the ops it replaces round, so -O0 and -O1 give the same bits on the CPU.
 *
 *   rotary    rotary(k, pos) whose result a transpose by [0,2,1,3] alone
 *             reads, which an update(kc, ., off) {axis=2} alone reads; an
 *             update(vc, transpose(v), off) {axis=2} with the same offsets
 *             (v of k's type, another state); and rotary(q, pos) with the
 *             same positions and attributes: one rotary_update(kc, vc, q,
 *             k, v, pos, off) where the later rotary stood, its results the
 *             caches written in place and q rotated. It moves the updates
 *             up to there, so nothing between may touch a state (or call),
 *             and q rotated may not be read before.
 */
#include <stdlib.h>
#include <string.h>

#include "asm.h"

/* A product's parts: operand indices of f's values (UINT32_MAX absent). */
typedef struct flin {
  uint32_t x, w, b, p, r;
  const char *pro; /* "none", "rms_norm", "swiglu", "geglu", "geglu_tanh" */
  const char *epi; /* "none", or a gated unit of the result's halves: "swiglu", "geglu", "geglu_tanh" */
  bool gate2;      /* (an epilogue's) the gate is the second half */
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
  /* (a weight="kn" linear reads w [in, out]: fused_linear's kernels read [out, in]) */
  if (!rill__is_float(x->dtype) || asm_attr(d, "activation") || asm_attr(d, "weight") || isa_type_is_sym(x) || x->rank < 1) return false;
  int64_t K = x->dims[x->rank - 1], rows = 1;
  for (int i = 0; i + 1 < x->rank; i++) rows *= x->dims[i];
  if (K < 1 || rows < 1 || rows > FLIN_MAX_ROWS) return false;
  *o = (flin_t){n->args[0], n->args[1], NONE, NONE, NONE, "none", "none", false, 1e-6};
  if (lin) {
    if (n->nargs > 3) return false; /* a residual z already (linear's fourth operand): left as it is */
    if (n->nargs > 2) o->b = n->args[2];
    return true;
  }
  const isa_attr_t *pa = asm_attr(d, "prologue"), *ea = asm_attr(d, "eps"), *ra = asm_attr(d, "residual"), *ga = asm_attr(d, "epilogue");
  if (pa) o->pro = pa->str;
  if (ga) o->epi = ga->str;
  if (strcmp(o->epi, "none")) return false; /* (nothing more joins a product with an epilogue) */
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
  isa_attr_t *at = rill__arena_alloc(&c->arena, 5 * sizeof *at);
  double *eps = rill__arena_alloc(&c->arena, sizeof *eps);
  int64_t *one = rill__arena_alloc(&c->arena, sizeof *one);
  uint32_t *av = rill__arena_memdup(&c->arena, args, na * sizeof *args);
  if (!at || !eps || !one || !av) return rill__oom();
  *eps = o->eps;
  *one = 1;
  if (strcmp(o->pro, "none")) at[nat++] = (isa_attr_t){.name = "prologue", .kind = ISA_ATTR_STRING, .count = 1, .str = o->pro};
  if (!strcmp(o->pro, "rms_norm")) at[nat++] = (isa_attr_t){.name = "eps", .kind = ISA_ATTR_FLOAT, .count = 1, .floats = eps};
  if (o->r != NONE) at[nat++] = (isa_attr_t){.name = "residual", .kind = ISA_ATTR_BOOL, .count = 1, .ints = one};
  if (strcmp(o->epi, "none")) at[nat++] = (isa_attr_t){.name = "epilogue", .kind = ISA_ATTR_STRING, .count = 1, .str = o->epi};
  if (o->gate2) at[nat++] = (isa_attr_t){.name = "gate_second", .kind = ISA_ATTR_BOOL, .count = 1, .ints = one};
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

/* swiglu(g, u) or geglu(g, u) whose g and u are the two halves of a split
 * (its last axis, equal sizes) of a small product (no residual or
 * epilogue; no prologue but the norm's) that the split alone reads, the halves read by the gated
 * unit alone: the gated unit becomes the product with it as its epilogue
 * (one kernel, each warp computing a column of each half). */
static rill_status_t fuse_glu(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  ir_node_t *gn = &f->nodes.items[i];
  bool swi = asm_is_op(c, gn, "swiglu");
  if (dead[i] || (!swi && !asm_is_op(c, gn, "geglu")) || gn->nargs != 2 || gn->nres != 1) return NULL;
  uint32_t g = gn->args[0], u = gn->args[1];
  int32_t si = f->values.items[g].def;
  if (g == u || si < 0 || f->values.items[u].def != si || dead[si] || !asm_is_op(c, &f->nodes.items[si], "split")) return NULL;
  const ir_node_t *sn = &f->nodes.items[si];
  bool gate2 = sn->nres == 2 && sn->res[0] == u && sn->res[1] == g; /* (the stacked product may hold the up half first) */
  if (sn->nres != 2 || (!gate2 && (sn->res[0] != g || sn->res[1] != u)) || nuse[g] != 1 || nuse[u] != 1 || f->values.items[g].escapes ||
      f->values.items[u].escapes)
    return NULL;
  const isa_opdecl_t *sd = asm_decl(c, sn);
  const rill_type_t *pt = &sd->in[0];
  const isa_attr_t *ax = asm_attr(sd, "axis");
  int64_t axis = ax ? ax->ints[0] : 0;
  if (pt->rank < 1 || isa_type_is_sym(pt) || (axis != -1 && axis != pt->rank - 1) || !rill__type_eq(&sd->out[0], &sd->out[1]) ||
      2 * sd->out[0].dims[pt->rank - 1] != pt->dims[pt->rank - 1])
    return NULL;
  int32_t pi = asm_sole_maker(c, f, nuse, dead, sn->args[0], NULL);
  flin_t o;
  if (pi < 0 || !small_product(c, &f->nodes.items[pi], &o) || (strcmp(o.pro, "none") && strcmp(o.pro, "rms_norm")) || o.r != NONE) return NULL;
  const isa_attr_t *ap = asm_attr(asm_decl(c, gn), "approximate");
  o.epi = swi ? "swiglu" : ap && !strcmp(ap->str, "tanh") ? "geglu_tanh" : "geglu";
  o.gate2 = gate2;
  RILL_TRY(flin_write(c, f, gn, &o));
  f->values.items[g].def = f->values.items[u].def = f->values.items[sn->args[0]].def = -1;
  dead[si] = dead[pi] = true;
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

/* Whether two op declarations carry the same attributes (in one order). */
static bool same_attrs(const isa_opdecl_t *a, const isa_opdecl_t *b) {
  if (a->nattrs != b->nattrs) return false;
  for (uint32_t k = 0; k < a->nattrs; k++) {
    const isa_attr_t *x = &a->attrs[k], *y = &b->attrs[k];
    if (strcmp(x->name, y->name) || x->kind != y->kind || x->count != y->count) return false;
    if (x->kind == ISA_ATTR_STRING && strcmp(x->str, y->str)) return false;
    if ((x->kind == ISA_ATTR_FLOAT || x->kind == ISA_ATTR_FLOATS) && memcmp(x->floats, y->floats, sizeof(double) * x->count)) return false;
    if (x->kind != ISA_ATTR_STRING && x->kind != ISA_ATTR_FLOAT && x->kind != ISA_ATTR_FLOATS && x->ints &&
        memcmp(x->ints, y->ints, sizeof(int64_t) * x->count))
      return false;
  }
  return true;
}

/* The one node reading value v (once; v not returned), or -1. */
static int32_t sole_user(const ir_func_t *f, const uint32_t *nuse, const bool *dead, uint32_t v) {
  if (nuse[v] != 1 || f->values.items[v].escapes) return -1;
  for (size_t j = 0; j < f->nodes.len; j++)
    for (uint32_t k = 0; k < f->nodes.items[j].nargs; k++)
      if (f->nodes.items[j].args[k] == v) return dead[j] ? -1 : (int32_t)j;
  return -1;
}

/* Node n: a transpose by [0,2,1,3]. */
static bool heads_swap(const asm_ctx_t *c, const ir_node_t *n) {
  if (!asm_is_op(c, n, "transpose")) return false;
  const isa_attr_t *p = asm_attr(asm_decl(c, n), "perm");
  static const int64_t want[4] = {0, 2, 1, 3};
  return p && p->count == 4 && !memcmp(p->ints, want, sizeof want);
}

/* Node n: update(state, x, off) {axis=2} of a rank-4 state. */
static bool update_axis2(const asm_ctx_t *c, const ir_node_t *n) {
  if (!asm_is_op(c, n, "update") || n->nargs != 3) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const isa_attr_t *a = asm_attr(d, "axis");
  return d->in[0].rank == 4 && a && (a->ints[0] == 2 || a->ints[0] == -2);
}

static rill_status_t fuse_rotary(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  const ir_node_t *rk = &f->nodes.items[i];
  if (!asm_is_op(c, rk, "rotary") || rk->nres != 1 || rk->nargs != 2) return NULL;
  const isa_opdecl_t *kd = asm_decl(c, rk);
  uint32_t k4 = rk->args[0], rpos = rk->args[1], kr = rk->res[0];
  int32_t ti = sole_user(f, nuse, dead, kr);
  if (ti < 0 || !heads_swap(c, &f->nodes.items[ti])) return NULL;
  int32_t uk = sole_user(f, nuse, dead, f->nodes.items[ti].res[0]);
  if (uk < 0 || !update_axis2(c, &f->nodes.items[uk]) || f->nodes.items[uk].args[1] != f->nodes.items[ti].res[0]) return NULL;
  uint32_t upos = f->nodes.items[uk].args[2];
  int32_t ks = asm_state_root(c, f, f->nodes.items[uk].args[0]);
  if (ks < 0 || f->nodes.items[uk].args[0] != (uint32_t)ks) return NULL;
  /* the value cache's update: the same offsets, v of k's type, another state */
  int32_t uv = -1, tv = -1;
  for (size_t j = 0; j < f->nodes.len && uv < 0; j++) {
    const ir_node_t *n = &f->nodes.items[j];
    if (dead[j] || (int32_t)j == uk || !update_axis2(c, n) || n->args[2] != upos) continue;
    int32_t vs = asm_state_root(c, f, n->args[0]), t = f->values.items[n->args[1]].def;
    if (vs < 0 || n->args[0] != (uint32_t)vs || f->values.items[vs].konst == f->values.items[ks].konst || t < 0 || dead[t] ||
        !heads_swap(c, &f->nodes.items[t]) || sole_user(f, nuse, dead, n->args[1]) != (int32_t)j ||
        !rill__type_eq(&f->values.items[f->nodes.items[t].args[0]].type, &kd->in[0]))
      continue;
    uv = (int32_t)j, tv = t;
  }
  if (uv < 0) return NULL;
  uint32_t v4 = f->nodes.items[tv].args[0];
  /* q's rotary: the nearest with the same positions and attributes */
  int32_t rq = -1;
  for (size_t dist = 1; dist < f->nodes.len && rq < 0; dist++)
    for (int sgn = -1; sgn <= 1 && rq < 0; sgn += 2) {
      int64_t j = (int64_t)i + sgn * (int64_t)dist;
      if (j < 0 || j >= (int64_t)f->nodes.len || dead[j]) continue;
      const ir_node_t *n = &f->nodes.items[j];
      if (!asm_is_op(c, n, "rotary") || n->nargs != 2 || n->args[1] != rpos || !same_attrs(asm_decl(c, n), kd)) continue;
      const rill_type_t *q = &asm_decl(c, n)->in[0], *k = &kd->in[0];
      if (q->dtype == k->dtype && q->dims[0] == k->dims[0] && q->dims[1] == k->dims[1] && q->dims[3] == k->dims[3]) rq = (int32_t)j;
    }
  if (rq < 0) return NULL;
  int32_t place = rq > (int32_t)i ? rq : (int32_t)i, last = uk > uv ? uk : uv;
  uint32_t qv = f->nodes.items[rq].res[0], q4 = f->nodes.items[rq].args[0], vsv = f->nodes.items[uv].args[0];
  uint32_t args[7] = {(uint32_t)ks, vsv, q4, k4, v4, rpos, upos};
  if (place >= uk || place >= uv) return NULL;
  for (int k = 0; k < 7; k++)
    if (f->values.items[args[k]].def >= place) return NULL;
  /* nothing between touches a state or calls; q rotated is read after */
  for (int32_t j = place + 1; j < last; j++) {
    const ir_node_t *n = &f->nodes.items[j];
    if (dead[j] || j == uk || j == uv || j == ti || j == tv) continue;
    if (n->kind != N_OP || asm_touches_state(c, f, n)) return NULL;
  }
  for (int32_t j = 0; j <= place; j++)
    for (uint32_t k = 0; k < f->nodes.items[j].nargs; k++)
      if (f->nodes.items[j].args[k] == qv) return NULL;
  const isa_opdecl_t *qd = asm_decl(c, &f->nodes.items[rq]);
  rill_type_t in[7], out[3];
  for (int k = 0; k < 7; k++) in[k] = f->values.items[args[k]].type;
  out[0] = in[0], out[1] = in[1], out[2] = qd->out[0];
  uint32_t op, *av = rill__arena_memdup(&c->arena, args, sizeof args), *res = rill__arena_memdup(&c->arena, &qv, sizeof qv);
  if (!av || !res) return rill__oom();
  RILL_TRY(asm_intern_op(c, "rotary_update", in, 7, out, 3, kd->attrs, kd->nattrs, &op));
  /* the caches' new versions are made where the fused op stands */
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_STATE && (f->values.items[v].def == uk || f->values.items[v].def == uv)) f->values.items[v].def = place;
  ir_node_t *pn = &f->nodes.items[place];
  uint32_t line = f->nodes.items[uk].line, col = f->nodes.items[uk].col;
  pn->target = op, pn->args = av, pn->nargs = 7, pn->res = res, pn->nres = 1;
  pn->line = line, pn->col = col; /* errors (an offset outside the cache) name the update */
  f->values.items[qv].def = place;
  f->values.items[kr].def = f->values.items[f->nodes.items[ti].res[0]].def = f->values.items[f->nodes.items[tv].res[0]].def = -1;
  dead[rq == place ? i : (size_t)rq] = dead[ti] = dead[tv] = dead[uk] = dead[uv] = true;
  return NULL;
}

/* Which of the fusions run. By default rotary, norm, glu and residual,
 * which a decode step of a 1.1B Llama on an H200 took faster with (run FG:
 * 1.124 -> 1.088 ms at context 128 with residual, 1.118 with rotary; run
 * FL: glu 1.060 -> 1.034 with the pair; run FS: norm 1.016 -> 0.960, once
 * its prologue took one trip to memory a block: element loads one behind
 * the other had made it 16% slower in FG); gate made it 11% slower (FG),
 * so it waits for a better kernel.
 * RILL_DECODE_FUSION=1 (or all) runs all five, 0 (or any value without
 * their names) none, a comma list of rotary, norm, glu, gate, residual
 * those alone; unset or empty, the default four. */
static bool fusion_on(const char *name) {
  const char *e = getenv("RILL_DECODE_FUSION");
  if (!e || !*e) return strcmp(name, "gate") != 0;
  if (!strcmp(e, "1") || !strcmp(e, "all")) return true;
  size_t n = strlen(name);
  for (const char *p = e;; p++) {
    size_t len = strcspn(p, ",");
    if (len == n && !strncmp(p, name, n)) return true;
    p += len;
    if (!*p) return false;
  }
}

rill_status_t asm_fuse_decode(asm_ctx_t *c, ir_func_t *f) {
  if (fusion_on("rotary")) RILL_TRY(asm_merge_pass(c, f, fuse_rotary));
  if (fusion_on("norm")) RILL_TRY(asm_merge_pass(c, f, fuse_norm));
  if (fusion_on("glu")) RILL_TRY(asm_merge_pass(c, f, fuse_glu));
  if (fusion_on("gate")) RILL_TRY(asm_merge_pass(c, f, fuse_gate));
  return fusion_on("residual") ? asm_merge_pass(c, f, fuse_residual) : NULL;
}
