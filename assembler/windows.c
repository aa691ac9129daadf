/* windows.c: the copies around windowed attention (Swin's) made fewer, at
 * -O1 after fold and before attention.
 *
 *   slices  a slice that keeps every element (steps 1, the operand's
 *           shape, which may be over shape variables; Swin's unpad
 *           x[:, :H, :W, :] at sizes the window divides) is a reshape: a
 *           view.
 *   qkv     a product with constant weights (matmul(x, W) with W
 *           [K, P*E], or linear(x, W [P*E, K])), its constant bias added
 *           or not, reshaped to [..., P, H, D] (P*H*D = P*E), transposed
 *           with the P axis first and the last axis last, and read only
 *           by gathers of one constant index on axis 0 (each reshaped to
 *           drop that axis: how exporters write q, k, v = qkv[0], qkv[1],
 *           qkv[2]) becomes one product per part gathered, over that
 *           part's columns of W and of the bias, reshaped to [..., H, D]
 *           and transposed by the permutation left without the P axis:
 *           Swin's queries, keys and values as BERT's are written, which
 *           the attention pass and its heads in place then take whole.
 *           The transpose and the gathers (four copies of the product)
 *           are gone; the operand is read once per part.
 *   rows    a chain of ops that only moves whole rows of the last axis (a
 *           transpose that keeps the last axis last, a reshape that keeps
 *           it, a slice of other axes, a concat on another axis; at its
 *           end also a concat on the last axis of operands of one type,
 *           each output row that many rows), each
 *           value in it read by the chain alone, from one value x, that
 *           holds a transpose of rank 5 or more or a concat (Swin's window
 *           partition, reshape -> transpose(0,1,3,2,4,5) -> reshape, its
 *           reverse, and the cyclic shift, torch.roll, that ONNX writes as
 *           slices and concats) becomes one gather of x's rows: x viewed as
 *           [R, L] (L the last axis) or, where every image of the batch
 *           (axis 0) moves alike, [B, R/B, L], gathered by a constant
 *           index (i32 where it fits) on axis 0 or 1 and viewed as the
 *           chain's result (an index of at most INDEX_MAX). A roll and a
 *           partition, five copies, are one; the patch merging's eight
 *           strided slices and concat are one; each copy reads and writes
 *           whole rows.
 *
 * Values of the chains must be read by them alone (not returned, no other
 * reader) and of sizes that are numbers, or (a batch axis left dynamic)
 * numbers at two trial bindings of the shape variables that give the same
 * chain, moving every image of the batch alike by the same rows, with
 * element counts equal as polynomials (match_rows_sym); the rewritten
 * programs compute what they computed (the -O0 against -O1 tests check
 * it, the batch a shape variable in a third of them). Bodies with
 * stream statements, and functions with states, are left as written.
 */
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

#define ROWS_MAX ((size_t)1 << 22)   /* the row ids worked out at most this many */
#define INDEX_MAX ((int64_t)1 << 20) /* a gather's index (a constant) at most this long */
#define CHAIN_NODES 64

typedef struct wctx {
  asm_ctx_t *c;
  ir_func_t *f;
  uint32_t *nuse;  /* per value: its readers (a return counts) */
  uint32_t *first, *users; /* per value v: users[first[v] .. first[v+1]) the nodes that read it (once per operand) */
  const int64_t *bind;     /* the row chains' shape variables' values (a trial binding), or NULL: sizes must be numbers */
} wctx_t;

static rill_status_t count(wctx_t *W) {
  ir_func_t *f = W->f;
  size_t V = f->values.len, total = 0;
  rill__free(W->c->a, W->nuse);
  rill__free(W->c->a, W->first);
  rill__free(W->c->a, W->users);
  W->nuse = rill__calloc(W->c->a, V + 1, sizeof(uint32_t));
  W->first = rill__calloc(W->c->a, V + 1, sizeof(uint32_t));
  for (size_t i = 0; i < f->nodes.len; i++) total += f->nodes.items[i].nargs;
  W->users = rill__calloc(W->c->a, total ? total : 1, sizeof(uint32_t));
  if (!W->nuse || !W->first || !W->users) return rill__oom();
  for (size_t i = 0; i < f->nodes.len; i++)
    for (uint32_t j = 0; j < f->nodes.items[i].nargs; j++) W->nuse[f->nodes.items[i].args[j]]++;
  for (size_t v = 0; v < V; v++) W->first[v + 1] = W->first[v] + W->nuse[v];
  uint32_t *at = rill__calloc(W->c->a, V + 1, sizeof(uint32_t));
  if (!at) return rill__oom();
  for (size_t i = 0; i < f->nodes.len; i++)
    for (uint32_t j = 0; j < f->nodes.items[i].nargs; j++) {
      uint32_t v = f->nodes.items[i].args[j];
      W->users[W->first[v] + at[v]++] = (uint32_t)i;
    }
  rill__free(W->c->a, at);
  return NULL;
}

/* The op node making value v where it is op `name` (any op: NULL), or -1. */
static int32_t made_by(const wctx_t *W, uint32_t v, const char *name) {
  int32_t d = W->f->values.items[v].def;
  if (d < 0) return -1;
  const ir_node_t *n = &W->f->nodes.items[d];
  return n->kind == N_OP && n->nres == 1 && (!name || asm_is_op(W->c, n, name)) ? d : -1;
}

/* The node that alone reads v (once), or -1. */
static int32_t sole_user(const wctx_t *W, uint32_t v) { return W->nuse[v] == 1 ? (int32_t)W->users[W->first[v]] : -1; }

static bool params_of(const wctx_t *W, const ir_node_t *n, ops_params_t *p) { return asm_op_params(W->c, n, p); }

static bool numbers(const rill_type_t *t) { return !isa_type_is_sym(t); }

/* Type t's sizes as numbers: its own, or over shape variables at W->bind; false where one is not a number then. */
static bool sizes(const wctx_t *W, const rill_type_t *t, int64_t *out) {
  for (int a = 0; a < t->rank; a++) {
    out[a] = t->dims[a];
    if (isa_dim_is_sym(t->dims[a]) && (!W->bind || !isa_sym_eval(&W->c->syms, t->dims[a], W->bind, &out[a]))) return false;
  }
  return true;
}

/* An attribute of ints (arena). */
static isa_attr_t *ints_attr(asm_ctx_t *c, const char *name, const int64_t *v, int n) {
  isa_attr_t *a = rill__arena_alloc(&c->arena, sizeof *a);
  int64_t *p = rill__arena_memdup(&c->arena, v, sizeof *v * (size_t)(n ? n : 1));
  if (!a || !p) return NULL;
  *a = (isa_attr_t){.name = name, .kind = ISA_ATTR_INTS, .count = (uint32_t)n, .ints = p};
  return a;
}

static rill_status_t new_value(wctx_t *W, uint32_t v, const rill_type_t *t, const char *suffix, uint32_t *out) {
  return asm_value_like(W->c, W->f, v, t, suffix, out);
}

/* *out := reshape(x) to type t, appended at node `at` (x itself where it has that shape). */
static rill_status_t add_reshape(wctx_t *W, asm_nodes_t *out, const ir_node_t *at, uint32_t x, const rill_type_t *t, uint32_t res) {
  isa_attr_t *a = ints_attr(W->c, "shape", t->dims, t->rank);
  if (!a) return rill__oom();
  return asm_new_op(W->c, W->f, out, at, "reshape", a, 1, &x, 1, res);
}

/* The body becomes `out` (taken); every value's definition is where out has it. */
static rill_status_t install(wctx_t *W, asm_nodes_t *out) {
  int32_t *ident = rill__calloc(W->c->a, out->len ? out->len : 1, sizeof(int32_t));
  if (!ident) return rill__oom();
  for (size_t i = 0; i < out->len; i++) ident[i] = (int32_t)i;
  asm_replace_nodes(W->c, W->f, out->items, out->len, out->cap, ident);
  out->items = NULL;
  out->len = out->cap = 0;
  rill__free(W->c->a, ident);
  return NULL;
}

/* ---- slices that keep everything ---- */
static rill_status_t whole_slices(wctx_t *W) {
  ir_func_t *f = W->f;
  for (size_t i = 0; i < f->nodes.len; i++) {
    ir_node_t *n = &f->nodes.items[i];
    if (!asm_is_op(W->c, n, "slice") || asm_touches_state(W->c, f, n)) continue;
    const isa_opdecl_t *d = asm_decl(W->c, n);
    /* steps of 1 and the operand's sizes: each axis's run starts at 0
     * (sizes over shape variables too: a batch axis left dynamic) */
    const isa_attr_t *sp = asm_attr(d, "steps");
    bool whole = rill__type_eq(&d->in[0], &d->out[0]);
    for (uint32_t k = 0; whole && sp && k < sp->count; k++) whole = sp->ints[k] == 1;
    if (!whole) continue;
    rill_type_t t = d->in[0];
    isa_attr_t *a = ints_attr(W->c, "shape", t.dims, t.rank);
    if (!a) return rill__oom();
    RILL_TRY(asm_intern_op(W->c, "reshape", &t, 1, &t, 1, a, 1, &f->nodes.items[i].target));
  }
  return NULL;
}

/* ---- q, k and v split from one product ---- */

/* Constant value v's bytes, every element (a fill expanded), in the arena; NULL where not at hand. */
static uint8_t *const_elems(wctx_t *W, uint32_t v) {
  const isa_const_t *k = asm_const_of(W->c, W->f, v);
  if (!k || !numbers(&k->type)) return NULL;
  size_t n, bytes, es = rill_dtype_size(k->type.dtype);
  rill__type_sizes(&k->type, &n, &bytes);
  uint8_t *p = rill__arena_alloc_raw(&W->c->arena, bytes ? bytes : 1);
  if (!p) return NULL;
  if (k->origin == ISA_CONST_FILL)
    for (size_t i = 0; i < n; i++) memcpy(p + i * es, k->data, es);
  else
    memcpy(p, k->data, bytes);
  return p;
}

/* The part index of a gather of a constant of one element, or -1. */
static int64_t part_index(wctx_t *W, const ir_node_t *g, int64_t parts) {
  ops_params_t p;
  if (!params_of(W, g, &p) || p.axis != 0) return -1;
  const isa_const_t *k = asm_const_of(W->c, W->f, g->args[1]);
  if (!k || k->type.rank != 1 || k->type.dims[0] != 1) return -1;
  int64_t i = k->type.dtype == RILL_I64 ? *(const int64_t *)k->data : *(const int32_t *)k->data;
  if (i < 0) i += parts;
  return i >= 0 && i < parts ? i : -1;
}

typedef struct qkv {
  int32_t prod, add, reshape, trans;     /* nodes */
  bool linear;                           /* linear(x, W [P*E, K]) rather than matmul(x, W [K, P*E]) */
  int bias_side;                         /* the add's operand that is the bias (0 or 1) */
  int64_t parts, E;
  int32_t gather[8], view[8];            /* per reader of the transpose: its gather and the reshape after it */
  int64_t which[8];
  int n;
} qkv_t;

static bool match_qkv(wctx_t *W, size_t i, qkv_t *Q) {
  ir_func_t *f = W->f;
  asm_ctx_t *c = W->c;
  const ir_node_t *n = &f->nodes.items[i];
  memset(Q, 0, sizeof *Q);
  Q->prod = (int32_t)i;
  Q->add = -1;
  Q->linear = asm_is_op(c, n, "linear");
  if ((!Q->linear && !asm_is_op(c, n, "matmul")) || n->nres != 1 || asm_decl(c, n)->nattrs || asm_touches_state(c, f, n)) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const rill_type_t *wt = &d->in[1], *yt = &d->out[0];
  if (wt->rank != 2 || yt->rank < 2 || isa_dim_is_sym(yt->dims[yt->rank - 1]) || !rill__is_float(yt->dtype) || !asm_const_of(c, f, n->args[1])) return false;
  if (Q->linear && n->nargs != 2) return false; /* (a linear's bias: taken where it is an add) */
  uint32_t y = n->res[0];
  int32_t u = sole_user(W, y);
  if (u >= 0 && asm_is_op(c, &f->nodes.items[u], "add") && !asm_decl(c, &f->nodes.items[u])->nattrs) {
    const ir_node_t *a = &f->nodes.items[u];
    int side = a->args[0] == y ? 1 : 0;
    const rill_type_t *bt = &f->values.items[a->args[side]].type;
    if (a->args[1 - side] != y || bt->rank != 1 || bt->dims[0] != yt->dims[yt->rank - 1] || !asm_const_of(c, f, a->args[side]) ||
        !rill__type_eq(&f->values.items[a->res[0]].type, yt))
      return false;
    Q->add = u;
    Q->bias_side = side;
    y = a->res[0];
    u = sole_user(W, y);
  }
  if (u < 0 || !asm_is_op(c, &f->nodes.items[u], "reshape")) return false;
  Q->reshape = u;
  const rill_type_t *rt = &f->values.items[f->nodes.items[u].res[0]].type;
  int r = yt->rank; /* the part axis of the reshape */
  if (rt->rank != r + 2) return false;
  for (int a = 0; a < r - 1; a++)
    if (rt->dims[a] != yt->dims[a]) return false;
  Q->parts = rt->dims[r - 1];
  if (isa_dim_is_sym(rt->dims[r]) || isa_dim_is_sym(rt->dims[r + 1]) || Q->parts < 2 || Q->parts > 8 || yt->dims[r - 1] % Q->parts) return false;
  Q->E = yt->dims[r - 1] / Q->parts;
  int32_t t = sole_user(W, f->nodes.items[u].res[0]);
  if (t < 0 || !asm_is_op(c, &f->nodes.items[t], "transpose")) return false;
  Q->trans = t;
  ops_params_t tp;
  if (!params_of(W, &f->nodes.items[t], &tp) || tp.perm[0] != r - 1 || tp.perm[r + 1] != r + 1) return false;
  uint32_t tv = f->nodes.items[t].res[0];
  const rill_type_t *tt = &f->values.items[tv].type;
  if (W->nuse[tv] < 1 || W->nuse[tv] > 8) return false;
  bool seen[8] = {false};
  for (uint32_t k = W->first[tv]; k < W->first[tv + 1]; k++) {
    const ir_node_t *g = &f->nodes.items[W->users[k]];
    if (!asm_is_op(c, g, "gather") || g->args[0] != tv || g->args[1] == tv) return false;
    int64_t p = part_index(W, g, Q->parts);
    int32_t v = sole_user(W, g->res[0]);
    if (p < 0 || seen[p] || v < 0 || !asm_is_op(c, &f->nodes.items[v], "reshape")) return false;
    const rill_type_t *vt = &f->values.items[f->nodes.items[v].res[0]].type;
    if (vt->rank != tt->rank - 1) return false;
    for (int a = 0; a < vt->rank; a++)
      if (vt->dims[a] != tt->dims[a + 1]) return false;
    seen[p] = true;
    Q->gather[Q->n] = (int32_t)W->users[k];
    Q->view[Q->n] = v;
    Q->which[Q->n++] = p;
  }
  return Q->n > 0;
}

/* Part p of the weights (columns p*E.. of a matmul's [K, P*E], rows of a
 * linear's [P*E, K]) or of the bias [P*E], as a constant value. */
static rill_status_t part_const(wctx_t *W, uint32_t v, bool rows, int64_t p, int64_t E, uint32_t *out) {
  const rill_type_t *t = &W->f->values.items[v].type;
  uint8_t *src = const_elems(W, v);
  if (!src) return rill__oom();
  size_t es = rill_dtype_size(t->dtype);
  rill_type_t pt = *t;
  int64_t R = t->rank == 2 ? t->dims[0] : 1, Cn = t->dims[t->rank - 1];
  if (rows) pt.dims[0] = E;
  else pt.dims[pt.rank - 1] = E;
  size_t bytes;
  rill__type_sizes(&pt, NULL, &bytes);
  uint8_t *dst = rill__arena_alloc_raw(&W->c->arena, bytes ? bytes : 1);
  if (!dst) return rill__oom();
  if (rows) memcpy(dst, src + (size_t)(p * E * Cn) * es, bytes);
  else
    for (int64_t r = 0; r < R; r++) memcpy(dst + (size_t)(r * E) * es, src + (size_t)(r * Cn + p * E) * es, (size_t)E * es);
  uint32_t k;
  return asm_new_const(W->c, W->f, &pt, dst, false, &k, out);
}

static rill_status_t emit_qkv(wctx_t *W, asm_nodes_t *out, const qkv_t *Q) {
  ir_func_t *f = W->f;
  asm_ctx_t *c = W->c;
  const ir_node_t at = f->nodes.items[Q->prod];
  const rill_type_t yt = asm_decl(c, &at)->out[0], rt = f->values.items[f->nodes.items[Q->reshape].res[0]].type;
  int r = yt.rank;
  ops_params_t tp;
  if (!params_of(W, &f->nodes.items[Q->trans], &tp)) return rill__status(RILL_INTERNAL, "windows: a transpose lost its parameters");
  int64_t perm[RILL_MAX_RANK];
  for (int a = 1; a < r + 2; a++) perm[a - 1] = tp.perm[a] > r - 1 ? tp.perm[a] - 1 : tp.perm[a];
  isa_attr_t *pa = ints_attr(c, "perm", perm, r + 1);
  if (!pa) return rill__oom();
  for (int k = 0; k < Q->n; k++) {
    uint32_t x = at.args[0], w, mm, args[2];
    RILL_TRY(part_const(W, at.args[1], Q->linear, Q->which[k], Q->E, &w));
    rill_type_t pt = yt;
    pt.dims[r - 1] = Q->E;
    char suf[16];
    snprintf(suf, sizeof suf, ".part%lld", (long long)Q->which[k]);
    RILL_TRY(new_value(W, at.res[0], &pt, suf, &mm));
    args[0] = x, args[1] = w;
    RILL_TRY(asm_new_op(c, f, out, &at, asm_decl(c, &at)->name, NULL, 0, args, 2, mm));
    uint32_t y = mm;
    if (Q->add >= 0) {
      const ir_node_t *an = &f->nodes.items[Q->add];
      uint32_t b, s;
      RILL_TRY(part_const(W, an->args[Q->bias_side], false, Q->which[k], Q->E, &b));
      RILL_TRY(new_value(W, an->res[0], &pt, suf, &s));
      args[Q->bias_side] = b, args[1 - Q->bias_side] = mm;
      RILL_TRY(asm_new_op(c, f, out, an, "add", NULL, 0, args, 2, s));
      y = s;
    }
    rill_type_t ht = yt; /* [..., H, D] */
    ht.rank = r + 1;
    ht.dims[r - 1] = rt.dims[r];
    ht.dims[r] = rt.dims[r + 1];
    uint32_t h;
    RILL_TRY(new_value(W, f->nodes.items[Q->reshape].res[0], &ht, suf, &h));
    RILL_TRY(add_reshape(W, out, &f->nodes.items[Q->reshape], y, &ht, h));
    uint32_t fin = f->nodes.items[Q->view[k]].res[0];
    rill_type_t want = f->values.items[fin].type;
    RILL_TRY(asm_new_op(c, f, out, &f->nodes.items[Q->trans], "transpose", pa, 1, &h, 1, fin));
    if (!rill__type_eq(&f->values.items[fin].type, &want)) return rill__status(RILL_INTERNAL, "windows: a part of the product changed its type");
  }
  return NULL;
}

static rill_status_t split_qkv(wctx_t *W) {
  ir_func_t *f = W->f;
  size_t N = f->nodes.len;
  RILL_TRY(count(W));
  int32_t *which = rill__calloc(W->c->a, N ? N : 1, sizeof(int32_t)); /* 1 + match at its product; -1 a node that goes */
  RILL_VEC(qkv_t) ms = {0};
  asm_nodes_t out = {0};
  rill_status_t st = which ? NULL : rill__oom();
  for (size_t i = 0; !st && i < N; i++) {
    qkv_t Q;
    if (which[i] || !match_qkv(W, i, &Q)) continue;
    st = RILL_VEC_PUSH(W->c->a, &ms, Q);
    which[i] = (int32_t)ms.len;
    if (Q.add >= 0) which[Q.add] = -1;
    which[Q.reshape] = which[Q.trans] = -1;
    for (int k = 0; k < Q.n; k++) which[Q.gather[k]] = which[Q.view[k]] = -1;
  }
  /* the nodes that go first lose their results' definitions (the gathers'
   * views are defined again where their parts are made) */
  for (size_t i = 0; !st && i < N; i++)
    for (uint32_t r = 0; which[i] && r < f->nodes.items[i].nres; r++) f->values.items[f->nodes.items[i].res[r]].def = -1;
  for (size_t i = 0; !st && ms.len && i < N; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (which[i] > 0) {
      st = emit_qkv(W, &out, &ms.items[which[i] - 1]);
    } else if (which[i] < 0) {
      continue;
    } else {
      for (uint32_t r = 0; r < n->nres; r++) f->values.items[n->res[r]].def = (int32_t)out.len;
      st = RILL_VEC_PUSH(W->c->a, &out, *n);
    }
  }
  if (!st && ms.len) st = install(W, &out);
  RILL_VEC_FREE(W->c->a, &out);
  RILL_VEC_FREE(W->c->a, &ms);
  rill__free(W->c->a, which);
  return st;
}

/* ---- chains of ops that move whole rows ---- */

/* Row ids: for each row (every index but the last axis's) of a value, the
 * row of x it holds. */
typedef struct rows {
  int rank;
  int64_t dims[RILL_MAX_RANK];
  int64_t *id;
  size_t n;
} rows_t;

typedef struct chain {
  uint32_t nodes[CHAIN_NODES];
  int nn;
  int32_t src;             /* x, or -1 not met yet */
  uint32_t leaf[8];        /* values that must be leaves (read outside the chain) */
  int nleaf;
  bool moves;              /* a transpose of rank 5 or more, or a concat */
  size_t budget;
  /* the gather (gather_shape): no row moves (a view), or x as [B, Rb, L]
   * gathered to [B, Rf, L] (B may be over shape variables) */
  bool same;
  int64_t B, Rb, Rf;
} chain_t;

static bool forced_leaf(const chain_t *C, uint32_t v) {
  for (int k = 0; k < C->nleaf; k++)
    if (C->leaf[k] == v) return true;
  return false;
}

/* Whether node n only moves rows of its operands (whole runs of the last
 * axis); at the chain's end (top) a concat on the last axis of operands of
 * one type too (each output row n rows of the operands' length). */
static bool row_op(const wctx_t *W, const ir_node_t *n, bool top, ops_params_t *p) {
  asm_ctx_t *c = W->c;
  if (n->kind != N_OP || n->nres != 1 || asm_touches_state(c, W->f, n)) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const rill_type_t *it = &d->in[0], *ot = &d->out[0];
  bool reshape = asm_is_op(c, n, "reshape"), trans = asm_is_op(c, n, "transpose"), slice = asm_is_op(c, n, "slice"), cat = asm_is_op(c, n, "concat");
  int64_t id[RILL_MAX_RANK], od[RILL_MAX_RANK];
  if (!sizes(W, it, id) || !sizes(W, ot, od) || it->rank < 1 || isa_dim_is_sym(it->dims[it->rank - 1])) return false;
  if (top && cat && it->rank == ot->rank && params_of(W, n, p) && p->axis == ot->rank - 1) {
    /* a concat of rows of one length on the last axis (Swin's patch merging), the chain's end: rows of its operands' length */
    for (uint32_t j = 1; j < d->nin; j++)
      if (!rill__type_eq(&d->in[j], it)) return false;
    return it->dims[it->rank - 1] >= 1;
  }
  if (ot->rank < 1 || it->dims[it->rank - 1] != ot->dims[ot->rank - 1] || ot->dims[ot->rank - 1] < 1) return false;
  if (!reshape && !trans && !slice && !cat) return false;
  if (!params_of(W, n, p)) return false;
  /* a slice's starts are known on axes of numbers alone */
  const isa_attr_t *ax = slice ? asm_attr(d, "axes") : NULL;
  const isa_attr_t *st = slice ? asm_attr(d, "starts") : NULL;
  for (uint32_t k = 0; slice && st && k < st->count; k++) {
    int64_t a = ax ? ax->ints[k] : (int64_t)k;
    if (a < 0) a += it->rank;
    if (a < 0 || a >= it->rank || isa_dim_is_sym(it->dims[a])) return false;
  }
  if (trans) return p->perm[it->rank - 1] == it->rank - 1;
  if (slice) return p->starts[it->rank - 1] == 0 && p->steps[it->rank - 1] == 1;
  if (cat) return p->axis != ot->rank - 1;
  return true;
}

static rill_status_t rows_new(const asm_ctx_t *c, rows_t *R, const int64_t *dims, int rank) {
  R->rank = rank - 1;
  R->n = 1;
  for (int a = 0; a < R->rank; a++) R->dims[a] = dims[a], R->n *= (size_t)dims[a];
  R->id = rill__calloc(c->a, R->n ? R->n : 1, sizeof(int64_t));
  return R->id ? NULL : rill__oom();
}

/* The row ids of value v; false (with *R freed) where the chain is not one. */
static rill_status_t rows_of(wctx_t *W, chain_t *C, uint32_t v, bool top, int depth, rows_t *R, bool *ok) {
  asm_ctx_t *c = W->c;
  ir_func_t *f = W->f;
  const rill_type_t *vt = &f->values.items[v].type;
  *ok = false;
  R->id = NULL;
  int64_t vd[RILL_MAX_RANK];
  if (depth > 32 || vt->rank < 1 || !sizes(W, vt, vd)) return NULL;
  size_t rows = 1;
  for (int a = 0; a < vt->rank - 1; a++) rows *= (size_t)vd[a];
  if (rows > ROWS_MAX) return NULL; /* (a concat on the last axis at the end: its parts times as many) */
  int32_t d = made_by(W, v, NULL);
  ops_params_t p;
  bool inner = d >= 0 && (top || !forced_leaf(C, v)) && row_op(W, &f->nodes.items[d], top, &p);
  if (!inner) { /* a leaf: x's own rows */
    if (C->src >= 0 && C->src != (int32_t)v) return NULL;
    C->src = (int32_t)v;
    RILL_TRY(rows_new(c, R, vd, vt->rank));
    for (size_t i = 0; i < R->n; i++) R->id[i] = (int64_t)i;
    *ok = true;
    return NULL;
  }
  if (C->nn >= CHAIN_NODES) return NULL;
  bool seen = false;
  for (int k = 0; k < C->nn; k++) seen |= C->nodes[k] == (uint32_t)d;
  if (!seen) C->nodes[C->nn++] = (uint32_t)d;
  const ir_node_t n = f->nodes.items[d];
  const rill_type_t *it = &f->values.items[n.args[0]].type;
  if (asm_is_op(c, &n, "concat")) {
    rows_t parts[8];
    if (n.nargs > 8) return NULL;
    C->moves = true;
    rill_status_t st = NULL;
    uint32_t got = 0;
    for (; got < n.nargs && !st; got++) {
      bool k;
      st = rows_of(W, C, n.args[got], false, depth + 1, &parts[got], &k);
      if (!st && !k) break;
    }
    bool all = !st && got == n.nargs;
    if (all && p.axis == vt->rank - 1) { /* on the last axis (the end): output row o is the operands' rows o, one after another */
      R->rank = vt->rank; /* [.., parts] */
      R->n = 1;
      for (int a = 0; a < R->rank; a++) R->dims[a] = a < R->rank - 1 ? vd[a] : (int64_t)n.nargs, R->n *= (size_t)R->dims[a];
      if (!(R->id = rill__calloc(c->a, R->n ? R->n : 1, sizeof(int64_t)))) st = rill__oom();
      for (size_t o = 0; !st && o < R->n / n.nargs; o++)
        for (uint32_t j = 0; j < n.nargs; j++) R->id[o * n.nargs + j] = parts[j].id[o];
      *ok = !st;
      all = false;
    }
    if (all) st = rows_new(c, R, vd, vt->rank);
    if (all && !st) {
      /* each operand's rows, laid out along the axis */
      int64_t ax = p.axis, outer = 1, inner_n = 1;
      for (int a = 0; a < ax; a++) outer *= R->dims[a];
      for (int a = (int)ax + 1; a < R->rank; a++) inner_n *= R->dims[a];
      size_t at = 0;
      for (int64_t o = 0; o < outer; o++)
        for (uint32_t j = 0; j < n.nargs; j++) {
          size_t run = (size_t)(parts[j].dims[ax] * inner_n);
          memcpy(R->id + at, parts[j].id + (size_t)o * run, run * sizeof(int64_t));
          at += run;
        }
      *ok = true;
    }
    for (uint32_t j = 0; j < got && j < n.nargs; j++) rill__free(c->a, parts[j].id);
    return st;
  }
  rows_t X;
  bool k;
  RILL_TRY(rows_of(W, C, n.args[0], false, depth + 1, &X, &k));
  if (!k) return NULL;
  rill_status_t st = rows_new(c, R, vd, vt->rank);
  if (!st && asm_is_op(c, &n, "reshape")) {
    memcpy(R->id, X.id, R->n * sizeof(int64_t)); /* the rows keep their order */
    *ok = true;
  } else if (!st) {
    /* transpose and slice: out row (i_0, ...) reads in row (src_0, ...) */
    bool trans = asm_is_op(c, &n, "transpose");
    int r = R->rank;
    if (trans && it->rank >= 5)
      for (int a = 0, last = -1; a < r; a++) { /* (axes of size 1 moving past others move nothing) */
        if (X.dims[p.perm[a]] == 1) continue;
        if (p.perm[a] < last) C->moves = true;
        last = (int)p.perm[a];
      }
    int64_t idx[RILL_MAX_RANK] = {0}, stride[RILL_MAX_RANK];
    for (int64_t a = r - 1, s = 1; a >= 0; a--) stride[a] = s, s *= X.dims[a];
    for (size_t o = 0; o < R->n; o++) {
      int64_t at = 0;
      for (int a = 0; a < r; a++) {
        if (trans) at += idx[a] * stride[p.perm[a]];
        else at += (p.starts[a] + idx[a] * p.steps[a]) * stride[a];
      }
      R->id[o] = X.id[at];
      for (int a = r - 1; a >= 0; a--) {
        if (++idx[a] < R->dims[a]) break;
        idx[a] = 0;
      }
    }
    *ok = true;
  }
  rill__free(c->a, X.id);
  if (!*ok) {
    rill__free(c->a, R->id);
    R->id = NULL;
  }
  return st;
}

/* The gather's shape for row ids R of x into fin: whether no row moves
 * (*same: a view), else x as [B, Rb, L] (B 1: [Rb, L]) and the index's
 * length Rf: every image of the batch moved alike is gathered on axis 1
 * (the batch: axis 0 of x or of the result, where there are more rows;
 * *which says which, -1 neither). Sizes at W->bind. */
static void gather_shape(const wctx_t *W, uint32_t x, uint32_t fin, const rows_t *R, bool *same, int64_t *B, int64_t *Rb, int64_t *Rf,
                         int *which) {
  const rill_type_t *xt = &W->f->values.items[x].type, *ft = &W->f->values.items[fin].type;
  int64_t xd[RILL_MAX_RANK], fd[RILL_MAX_RANK];
  *same = false, *B = 1, *Rb = 0, *Rf = 0, *which = -1;
  if (!sizes(W, xt, xd) || !sizes(W, ft, fd)) return;
  int64_t Rx = 1, Rn = (int64_t)R->n;
  for (int a = 0; a < xt->rank - 1; a++) Rx *= xd[a];
  *same = Rn == Rx;
  for (int64_t r = 0; *same && r < Rn; r++) *same = R->id[r] == r;
  *Rb = Rx, *Rf = Rn;
  const int64_t cand[2] = {xt->rank >= 3 ? xd[0] : 1, ft->rank >= 3 ? fd[0] : 1};
  bool batch = false;
  for (int k = 0; k < 2 && !batch; k++) {
    int64_t b = cand[k];
    batch = b > 1 && Rn % b == 0 && Rx % b == 0;
    int64_t rb = batch ? Rx / b : 1, rf = batch ? Rn / b : 1;
    for (int64_t r = 0; batch && r < Rn; r++) batch = R->id[r] / rb == r / rf && R->id[r] % rb == R->id[r % rf] % rb;
    if (batch) *B = b, *Rb = rb, *Rf = rf, *which = k;
  }
}

/* Whether the row ops that make v (walking back) hold a transpose of rank
 * 5 or more or a concat: the chains worth their row ids. */
static bool has_mover(const wctx_t *W, uint32_t v, int depth) {
  int32_t d = made_by(W, v, NULL);
  ops_params_t p;
  if (d < 0 || depth > 32 || !row_op(W, &W->f->nodes.items[d], depth == 0, &p)) return false;
  const ir_node_t *n = &W->f->nodes.items[d];
  if (asm_is_op(W->c, n, "concat") || (asm_is_op(W->c, n, "transpose") && asm_decl(W->c, n)->in[0].rank >= 5)) return true;
  return has_mover(W, n->args[0], depth + 1);
}

/* Node i as the end of a chain: C and the row ids where it is one worth a gather. */
static rill_status_t match_rows(wctx_t *W, const bool *taken, size_t i, chain_t *C, rows_t *R, bool *ok) {
  ir_func_t *f = W->f;
  *ok = false;
  R->id = NULL;
  ops_params_t p;
  if (!row_op(W, &f->nodes.items[i], true, &p)) return NULL;
  uint32_t top = f->nodes.items[i].res[0];
  if (!has_mover(W, top, 0)) return NULL;
  memset(C, 0, sizeof *C);
  for (int round = 0; round < 8; round++) {
    C->nn = 0;
    C->src = -1;
    C->moves = false;
    bool k;
    RILL_TRY(rows_of(W, C, top, true, 0, R, &k));
    if (!k) return NULL;
    /* every value the chain makes but its end is read by the chain alone */
    uint32_t bad = UINT32_MAX;
    for (int a = 0; a < C->nn && bad == UINT32_MAX; a++) {
      uint32_t v = f->nodes.items[C->nodes[a]].res[0];
      if (taken[C->nodes[a]]) {
        bad = v;
        break;
      }
      if (v == top) continue;
      for (uint32_t u = W->first[v]; u < W->first[v + 1]; u++) {
        bool in = false;
        for (int b = 0; b < C->nn; b++) in |= W->users[u] == C->nodes[b];
        if (!in) bad = v;
      }
    }
    if (bad == UINT32_MAX) {
      *ok = C->moves && C->src >= 0 && R->n <= ROWS_MAX && R->n > 0;
      if (*ok) { /* an index of at most INDEX_MAX (a view needs none) */
        int which;
        gather_shape(W, (uint32_t)C->src, top, R, &C->same, &C->B, &C->Rb, &C->Rf, &which);
        *ok = C->same || (C->Rf > 0 && C->Rf <= INDEX_MAX);
        /* over shape variables: every image alike (a batch of the variables' size), or no row moved */
        if (W->bind && !C->same) *ok = *ok && which >= 0 && isa_dim_is_sym(f->values.items[which ? top : (uint32_t)C->src].type.dims[0]);
        if (W->bind && *ok && !C->same) C->B = f->values.items[which ? top : (uint32_t)C->src].type.dims[0];
      }
      if (!*ok) {
        rill__free(W->c->a, R->id);
        R->id = NULL;
      }
      return NULL;
    }
    rill__free(W->c->a, R->id);
    R->id = NULL;
    if (bad == top || C->nleaf >= 8) return NULL;
    C->leaf[C->nleaf++] = bad;
  }
  return NULL;
}

/* t's elements as a size over the shape variables; -1 where it cannot be made. */
static int64_t elements(wctx_t *W, const rill_type_t *t) {
  int64_t have = 1;
  rill_status_t st = NULL;
  for (int a = 0; !st && a < t->rank; a++) st = isa_sym_mul(&W->c->syms, have, t->dims[a], &have);
  rill_status_free(st);
  return st ? -1 : have;
}

/* Whether t holds B x Rr rows of L whatever the shape variables' values (equal as polynomials). */
static bool rows_are(wctx_t *W, const rill_type_t *t, int64_t B, int64_t Rr, int64_t L) {
  int64_t want;
  rill_status_t st = isa_sym_mul(&W->c->syms, B, Rr * L, &want);
  rill_status_free(st);
  return !st && elements(W, t) == want;
}

/* Node i as the end of a chain over shape variables: matched at two trial
 * bindings (every variable 2, then 3) to the same chain that moves every
 * image of a batch (axis 0 of x or of the result, a size over the
 * variables) alike, by the same rows at both (or moves no row at both),
 * and x's rows and the result's B x Rb and B x Rf whatever the values: a
 * dynamic batch (Swin exported with its batch axis dynamic). */
static rill_status_t match_rows_sym(wctx_t *W, const bool *taken, size_t i, const int64_t *const bind[2], chain_t *C, rows_t *R, bool *ok) {
  chain_t C2;
  rows_t R2 = {0};
  bool ok2 = false;
  W->bind = bind[0];
  rill_status_t st = match_rows(W, taken, i, C, R, ok);
  if (!st && *ok) {
    W->bind = bind[1];
    st = match_rows(W, taken, i, &C2, &R2, &ok2);
  }
  W->bind = NULL;
  bool good = !st && *ok && ok2 && C2.nn == C->nn && C2.src == C->src && C2.same == C->same &&
              !memcmp(C2.nodes, C->nodes, sizeof C->nodes[0] * (size_t)C->nn);
  const rill_type_t *xt = good ? &W->f->values.items[C->src].type : NULL, *ft = good ? &W->f->values.items[W->f->nodes.items[i].res[0]].type : NULL;
  if (good && C->same) good = elements(W, xt) != -1 && elements(W, xt) == elements(W, ft);
  if (good && !C->same) {
    int64_t L = xt->dims[xt->rank - 1];
    good = C2.B == C->B && C2.Rb == C->Rb && C2.Rf == C->Rf && rows_are(W, xt, C->B, C->Rb, L) && rows_are(W, ft, C->B, C->Rf, L);
    for (int64_t r = 0; good && r < C->Rf; r++) good = R->id[r] % C->Rb == R2.id[r] % C->Rb;
  }
  rill__free(W->c->a, R2.id);
  if (!good && *ok) {
    rill__free(W->c->a, R->id);
    R->id = NULL;
  }
  *ok = good;
  return st;
}

/* The gather that replaces chain C (ending at node `at`, row ids R). */
static rill_status_t emit_rows(wctx_t *W, asm_nodes_t *out, const ir_node_t *at, const chain_t *C, const rows_t *R) {
  asm_ctx_t *c = W->c;
  ir_func_t *f = W->f;
  uint32_t x = (uint32_t)C->src, fin = at->res[0];
  const rill_type_t xt = f->values.items[x].type, ft = f->values.items[fin].type;
  int64_t L = xt.dims[xt.rank - 1], B = C->B, Rb = C->Rb, Rf = C->Rf;
  if (C->same) return add_reshape(W, out, at, x, &ft, fin); /* the rows stay where they are: a view */
  bool batch = B != 1;
  bool i32 = Rb < INT32_MAX;
  rill_type_t it = {i32 ? RILL_I32 : RILL_I64, 1, {Rf}};
  uint8_t *data = rill__arena_alloc_raw(&c->arena, (size_t)Rf * (i32 ? 4 : 8));
  if (!data) return rill__oom();
  for (int64_t r = 0; r < Rf; r++) {
    int64_t v = R->id[r] % Rb;
    if (i32) ((int32_t *)data)[r] = (int32_t)v;
    else ((int64_t *)data)[r] = v;
  }
  uint32_t k, idx, xv, g;
  RILL_TRY(asm_new_const(c, f, &it, data, false, &k, &idx));
  rill_type_t vt = {xt.dtype, batch ? 3 : 2, {0}}, gt = vt;
  if (batch) vt.dims[0] = B, vt.dims[1] = Rb, vt.dims[2] = L;
  else vt.dims[0] = Rb, vt.dims[1] = L;
  gt = vt;
  gt.dims[batch ? 1 : 0] = Rf;
  RILL_TRY(new_value(W, x, &vt, ".rows", &xv));
  RILL_TRY(add_reshape(W, out, at, x, &vt, xv));
  RILL_TRY(new_value(W, fin, &gt, ".gathered", &g));
  int64_t axis = batch ? 1 : 0;
  isa_attr_t *aa = rill__arena_alloc(&c->arena, sizeof *aa);
  int64_t *av = rill__arena_memdup(&c->arena, &axis, sizeof axis);
  if (!aa || !av) return rill__oom();
  *aa = (isa_attr_t){.name = "axis", .kind = ISA_ATTR_INT, .count = 1, .ints = av};
  uint32_t args[2] = {xv, idx};
  RILL_TRY(asm_new_op(c, f, out, at, "gather", aa, 1, args, 2, g));
  RILL_TRY(add_reshape(W, out, at, g, &ft, fin));
  return rill__type_eq(&f->values.items[fin].type, &ft) ? NULL : rill__status(RILL_INTERNAL, "windows: a gather of rows changed its type");
}

static rill_status_t gather_rows(wctx_t *W) {
  ir_func_t *f = W->f;
  size_t N = f->nodes.len;
  RILL_TRY(count(W));
  bool *taken = rill__calloc(W->c->a, N ? N : 1, sizeof(bool));
  int32_t *which = rill__calloc(W->c->a, N ? N : 1, sizeof(int32_t)); /* 1 + chain ending here; -1 a node that goes */
  RILL_VEC(chain_t) cs = {0};
  RILL_VEC(rows_t) rs = {0};
  asm_nodes_t out = {0};
  /* the trial bindings of chains over shape variables: every variable 2, then 3 */
  size_t nv = W->c->syms.vars.len;
  int64_t *b2 = rill__calloc(W->c->a, nv ? nv : 1, sizeof(int64_t)), *b3 = rill__calloc(W->c->a, nv ? nv : 1, sizeof(int64_t));
  const int64_t *const bind[2] = {b2, b3};
  for (size_t k = 0; b2 && b3 && k < nv; k++) b2[k] = 2, b3[k] = 3;
  rill_status_t st = taken && which && b2 && b3 ? NULL : rill__oom();
  for (size_t i = N; !st && i-- > 0;) {
    chain_t C;
    rows_t R;
    bool ok;
    if (taken[i] || (st = match_rows(W, taken, i, &C, &R, &ok))) continue;
    if (!ok && nv && (st = match_rows_sym(W, taken, i, bind, &C, &R, &ok))) continue;
    if (!ok) continue;
    if ((st = RILL_VEC_PUSH(W->c->a, &cs, C)) || (st = RILL_VEC_PUSH(W->c->a, &rs, R))) {
      rill__free(W->c->a, R.id);
      break;
    }
    for (int k = 0; k < C.nn; k++) taken[C.nodes[k]] = true, which[C.nodes[k]] = -1;
    which[i] = (int32_t)cs.len;
  }
  for (size_t i = 0; !st && cs.len && i < N; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (which[i] > 0) {
      f->values.items[n->res[0]].def = -1;
      st = emit_rows(W, &out, n, &cs.items[which[i] - 1], &rs.items[which[i] - 1]);
    } else if (which[i] < 0) {
      f->values.items[n->res[0]].def = -1;
    } else {
      for (uint32_t r = 0; r < n->nres; r++) f->values.items[n->res[r]].def = (int32_t)out.len;
      st = RILL_VEC_PUSH(W->c->a, &out, *n);
    }
  }
  if (!st && cs.len) st = install(W, &out);
  for (size_t k = 0; k < rs.len; k++) rill__free(W->c->a, rs.items[k].id);
  RILL_VEC_FREE(W->c->a, &out);
  RILL_VEC_FREE(W->c->a, &cs);
  RILL_VEC_FREE(W->c->a, &rs);
  rill__free(W->c->a, which);
  rill__free(W->c->a, taken);
  rill__free(W->c->a, b2);
  rill__free(W->c->a, b3);
  return st;
}

rill_status_t asm_pass_windows(asm_ctx_t *c, ir_func_t *f) {
  if (f->hand_scheduled) return NULL;
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_STATE) return NULL;
  wctx_t W = {.c = c, .f = f};
  rill_status_t st = whole_slices(&W);
  if (!st) st = split_qkv(&W);
  if (!st) st = gather_rows(&W);
  rill__free(c->a, W.nuse);
  rill__free(c->a, W.first);
  rill__free(c->a, W.users);
  return st;
}
