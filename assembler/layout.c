/* layout.c: one layout, NCHW or NHWC, for every rank-4 value of a function,
 * chosen for the whole function at once; run at -O1 after fold and before
 * fuse.
 *
 * Tensor-core convolutions want NHWC; cuDNN given NCHW converts to it and
 * back around every call. So a conv2d in f16 or bf16 whose weight is a
 * constant at hand runs as conv2d {layout="nhwc"} (its weight transposed
 * to [O,kh,kw,C/groups] here, once, and folded). Other ops take either
 * layout: the pools (layout="nhwc"), elementwise ops whose operands are
 * rank 4 (transposed alike, so that broadcasting is unchanged), single
 * elements, or of lower rank where their rank-4 form (ones prepended, as
 * broadcasting reads them) transposes for free: a constant, folded, or a
 * view (ConvNeXt's layer scale, [C,1,1]), concat, split, slice (by its
 * axes), gather, softmax and log_softmax without a mask (their axis moved), and the
 * reductions with keepdims (their axes moved; sum and mean only where the
 * reduced axes keep their order, so the sums add in the same order).
 * ShuffleNet's channel shuffle (a reshape to rank 5, a transpose, a
 * reshape back) is first made a gather of the channels (merge_shuffle),
 * so that it takes either layout too. An
 * explicit transpose by [0,2,3,1] of a value held channels-last is a view
 * of it, and one by [0,3,1,2] gives its result channels-last as a view of
 * its operand (ConvNeXt's blocks permute around their layer norm). Every
 * other op, a call, a branch and a return take NCHW.
 *
 * The cost of a choice is the number of transposes it leaves: a value made
 * in one layout and read in the other by any use takes one (made before
 * its first such use, shared by the rest), and an explicit transpose that
 * is not a view is one. Each op that can take either layout gets a binary
 * label; a value is a "not all equal" term over its producer's label and
 * its readers' labels (the fixed ones tied to the source, NCHW, or the
 * sink, NHWC); an explicit transpose adds a term of its own label. Every
 * term is submodular (a "not all equal" term is two auxiliary nodes of a
 * graph: Kolmogorov and Zabih's construction), so one minimum s-t cut
 * gives the exact minimum of this cost. A transpose that moves no data (a
 * value whose dims other than 1 keep their order) is a reshape, a view:
 * it weighs 1 where one that moves data weighs more than all views
 * together, so the count of real transposes is minimised first. Ties go
 * to NHWC. Constants' transposes are folded, free. The program's meaning
 * is unchanged: `-O0` against `-O1` tests check it. Functions with stream
 * statements are left as written.
 */
#include <stdio.h>

#include "asm.h"

static const int64_t TO_NHWC[4] = {0, 2, 3, 1}, TO_NCHW[4] = {0, 3, 1, 2};
/* NCHW axis a is axis MOVED[a] of NHWC */
static const int64_t MOVED[4] = {0, 3, 1, 2};

/* What an op takes and makes: NCHW alone; channels-last alone (a
 * convolution); either, by its label (its rank-4 operands and result
 * alike); or an explicit transpose to NHWC (its operand by its label, a
 * view when channels-last; its result NCHW) or to NCHW (its operand NCHW;
 * its result by its label, a view when channels-last). */
typedef enum role { R_NCHW, R_CONV, R_EITHER, R_TO_NHWC, R_TO_NCHW } role_t;

typedef struct lay {
  asm_ctx_t *c;
  ir_func_t *f;
  RILL_VEC(ir_node_t) out;   /* the new node list */
  size_t nvals;              /* values before the pass: new ones come after */
  int32_t *form[2];          /* value -> the value holding it in NCHW / NHWC, or -1 (not made yet) */
  uint8_t *role, *label;     /* per node */
  isa_attr_t *perm_attr[2];  /* {perm=TO_NHWC}, {perm=TO_NCHW} */
} lay_t;

static rill_type_t permuted(const rill_type_t *t, const int64_t perm[4]) {
  rill_type_t o = *t;
  for (int i = 0; i < 4; i++) o.dims[i] = t->dims[perm[i]];
  return o;
}

/* Whether permuting t by perm moves data: the dims other than 1 keep their order otherwise. */
static bool moves_data(const rill_type_t *t, const int64_t perm[4]) {
  int64_t last = -1;
  for (int i = 0; i < 4; i++) {
    if (t->dims[perm[i]] == 1) continue;
    if (perm[i] < last) return true;
    last = perm[i];
  }
  return false;
}

/* Appends node `op(arg) -> res` at the place of node `at`. */
static rill_status_t add_unary(lay_t *L, uint32_t op, uint32_t arg, uint32_t res, const ir_node_t *at) {
  asm_ctx_t *c = L->c;
  uint32_t *args = rill__arena_memdup(&c->arena, &arg, sizeof arg), *r = rill__arena_memdup(&c->arena, &res, sizeof res);
  if (!args || !r) return rill__oom();
  ir_node_t n = {.kind = N_OP, .line = at->line, .col = at->col, .target = op, .args = args, .nargs = 1, .res = r, .nres = 1};
  L->f->values.items[res].def = (int32_t)L->out.len;
  return RILL_VEC_PUSH(c->a, &L->out, n);
}

/* `res = reshape(arg)` to res's type (a view) at the place of node `at`. */
static rill_status_t add_view(lay_t *L, uint32_t arg, uint32_t res, const ir_node_t *at) {
  asm_ctx_t *c = L->c;
  const rill_type_t *it = &L->f->values.items[arg].type, *ot = &L->f->values.items[res].type;
  isa_attr_t *a = rill__arena_alloc(&c->arena, sizeof *a);
  int64_t *dims = rill__arena_memdup(&c->arena, ot->dims, sizeof(int64_t) * 4);
  if (!a || !dims) return rill__oom();
  *a = (isa_attr_t){.name = "shape", .kind = ISA_ATTR_INTS, .count = 4, .ints = dims};
  uint32_t op;
  RILL_TRY(asm_intern_op(c, "reshape", it, 1, ot, 1, a, 1, &op));
  return add_unary(L, op, arg, res, at);
}

/* `res = transpose(arg)` (or a reshape where no data moves) at the place of node `at`. */
static rill_status_t add_permute(lay_t *L, uint32_t arg, uint32_t res, bool to_nhwc, const ir_node_t *at) {
  const rill_type_t *it = &L->f->values.items[arg].type, *ot = &L->f->values.items[res].type;
  const int64_t *perm = to_nhwc ? TO_NHWC : TO_NCHW;
  if (!moves_data(it, perm)) return add_view(L, arg, res, at);
  uint32_t op;
  RILL_TRY(asm_intern_op(L->c, "transpose", it, 1, ot, 1, L->perm_attr[to_nhwc ? 0 : 1], 1, &op));
  return add_unary(L, op, arg, res, at);
}

/* A new value of type t named after value v with `suffix`. */
static rill_status_t new_value(lay_t *L, uint32_t v, const rill_type_t *t, const char *suffix, uint32_t *out) {
  asm_ctx_t *c = L->c;
  const char *base = L->f->values.items[v].name ? L->f->values.items[v].name : "v";
  size_t len = strlen(base) + strlen(suffix) + 1;
  char *name = rill__arena_alloc(&c->arena, len);
  if (!name) return rill__oom();
  snprintf(name, len, "%s%s", base, suffix);
  ir_value_t x = {.name = name, .type = *t, .kind = V_RESULT, .def = -1, .slot = -1, .reg = -1};
  x.line = L->f->values.items[v].line;
  x.col = L->f->values.items[v].col;
  *out = (uint32_t)L->f->values.len;
  return RILL_VEC_PUSH(c->a, &L->f->values, x);
}

/* Value v (of the function before the pass) in layout `want` (1: NHWC) for
 * node `at`: made from its other form by one transpose, once. The NCHW form
 * keeps v's id; values not of rank 4 are themselves. */
static rill_status_t form_of(lay_t *L, uint32_t v, int want, const ir_node_t *at, uint32_t *out) {
  if (v >= L->nvals || L->f->values.items[v].type.rank != 4) { *out = v; return NULL; }
  if (L->form[want][v] >= 0) { *out = (uint32_t)L->form[want][v]; return NULL; }
  uint32_t src = (uint32_t)L->form[!want][v];
  if (want) {
    rill_type_t t = permuted(&L->f->values.items[v].type, TO_NHWC);
    uint32_t w;
    RILL_TRY(new_value(L, v, &t, ".nhwc", &w));
    RILL_TRY(add_permute(L, src, w, true, at));
    L->form[1][v] = (int32_t)w;
  } else {
    RILL_TRY(add_permute(L, src, v, false, at));
    L->form[0][v] = (int32_t)v;
  }
  *out = (uint32_t)L->form[want][v];
  return NULL;
}

/* Weights transposed at assembly at most this large (fold takes them; a
 * real network's largest is a few MiB). */
#define WEIGHT_MAX_BYTES ((size_t)64 << 20)

/* A conv2d that runs channels-last: f16 or bf16, no layout given, its weight a constant at hand. */
static bool conv_wanted(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n) {
  if (!asm_is_op(c, n, "conv2d")) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  if ((d->in[0].dtype != RILL_F16 && d->in[0].dtype != RILL_BF16) || d->in[0].rank != 4 || asm_attr(d, "layout")) return false;
  const ir_value_t *w = &f->values.items[n->args[1]];
  size_t bytes;
  return w->kind == V_CONST && c->consts.items[w->konst].data && rill__type_sizes(&d->in[1], NULL, &bytes) && bytes <= WEIGHT_MAX_BYTES;
}

static bool is_pool(const asm_ctx_t *c, const ir_node_t *n) {
  return asm_is_op(c, n, "max_pool2d") || asm_is_op(c, n, "avg_pool2d") || asm_is_op(c, n, "adaptive_avg_pool2d");
}

/* A reduction that gives the same results in either layout: keepdims (its
 * result of rank 4), axes given; a sum or mean adds in memory order, which
 * the permutation keeps unless the channels are reduced with H or W. */
static bool reduce_either(const asm_ctx_t *c, const ir_node_t *n) {
  bool sum = asm_is_op(c, n, "sum") || asm_is_op(c, n, "mean");
  if (!sum && !asm_is_op(c, n, "max") && !asm_is_op(c, n, "min")) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const isa_attr_t *ax = asm_attr(d, "axes"), *kd = asm_attr(d, "keepdims");
  if (!ax || !kd || !kd->ints[0] || d->in[0].rank != 4) return false;
  unsigned mask = 0;
  for (uint32_t k = 0; k < ax->count; k++) mask |= 1u << ((ax->ints[k] % 4 + 4) % 4);
  return !sum || !(mask & 2) || !(mask & 12);
}

/* t (rank at most 4) as rank 4, ones prepended: how it broadcasts. */
static rill_type_t padded4(const rill_type_t *t) {
  rill_type_t o = *t;
  int pad = 4 - t->rank;
  for (int k = 0; k < 4; k++) o.dims[k] = k < pad ? 1 : t->dims[k - pad];
  o.rank = 4;
  return o;
}

/* Whether attribute `perm` of transpose decl d is p. */
static bool perm_is(const isa_opdecl_t *d, const int64_t p[4]) {
  const isa_attr_t *a = asm_attr(d, "perm");
  if (!a || a->count != 4) return false;
  for (int i = 0; i < 4; i++)
    if ((a->ints[i] + 4) % 4 != p[i]) return false;
  return true;
}

static role_t role_of(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n) {
  if (n->kind != N_OP || (n->nres != 1 && !asm_is_op(c, n, "split"))) return R_NCHW;
  if (conv_wanted(c, f, n)) return R_CONV;
  const isa_opdecl_t *d = asm_decl(c, n);
  if (d->out[0].rank != 4 || d->nin == 0) return R_NCHW;
  const ops_def_t *def = ops_find(d->name);
  bool concat = asm_is_op(c, n, "concat"), elementwise = def && ops_is_elementwise(def);
  if (d->in[0].rank != 4 && !elementwise) return R_NCHW; /* (an elementwise op's first operand may broadcast) */
  if (is_pool(c, n)) return asm_attr(d, "layout") ? R_NCHW : R_EITHER;
  if (asm_is_op(c, n, "transpose")) return perm_is(d, TO_NHWC) ? R_TO_NHWC : perm_is(d, TO_NCHW) ? R_TO_NCHW : R_NCHW;
  if (((asm_is_op(c, n, "softmax") || asm_is_op(c, n, "log_softmax")) && n->nargs == 1) || reduce_either(c, n)) return R_EITHER;
  /* a slice by its axes, a split (every part of rank 4) and a gather along
   * an axis (its index is no rank-4 value): their axes moved */
  if ((asm_is_op(c, n, "slice") && n->nargs == 1 && asm_attr(d, "axes")) || (asm_is_op(c, n, "gather") && n->nargs == 2) ||
      (asm_is_op(c, n, "split") && n->nargs == 1))
    return R_EITHER;
  if (!concat && !elementwise) return R_NCHW;
  for (uint32_t j = 0; j < n->nargs; j++) {
    const rill_type_t *t = &d->in[j];
    if (t->rank == 4 || asm_single_element(t)) continue;
    /* A lower-rank operand broadcasts as its rank-4 form (ones prepended;
     * ConvNeXt's layer scale is [C,1,1]): taken where that form's NHWC
     * twin costs nothing, a constant (folded) or a view. */
    if (concat || t->rank > 4) return R_NCHW;
    rill_type_t p4 = padded4(t);
    if (f->values.items[n->args[j]].kind != V_CONST && moves_data(&p4, TO_NHWC)) return R_NCHW;
  }
  return R_EITHER;
}

/* The layout node i (role r, label t) takes its operands in (operand j;
 * j < 0: the layout it makes its result in). */
static int port(role_t r, int t, int j) {
  switch (r) {
    case R_CONV: return 1;
    case R_EITHER: return t;
    case R_TO_NHWC: return j >= 0 ? t : 0;
    case R_TO_NCHW: return j >= 0 ? 0 : t;
    default: return 0;
  }
}

/* ---- the minimum cut (Dinic) ---- */
typedef struct fedge {
  int32_t to, next;
  int64_t cap;
} fedge_t;

typedef struct flow {
  const rill_allocator_t *a;
  RILL_VEC(fedge_t) e;
  int32_t *head, *level, *it, *queue;
  int32_t n;
} flow_t;

#define CAP_INF (INT64_MAX / 4)

static rill_status_t flow_edge(flow_t *g, int32_t u, int32_t v, int64_t cap) {
  if (u == v || cap <= 0) return NULL;
  fedge_t f = {v, g->head[u], cap}, b = {u, g->head[v], 0};
  RILL_TRY(RILL_VEC_PUSH(g->a, &g->e, f));
  g->head[u] = (int32_t)g->e.len - 1;
  RILL_TRY(RILL_VEC_PUSH(g->a, &g->e, b));
  g->head[v] = (int32_t)g->e.len - 1;
  return NULL;
}

/* Levels from node s over edges with room left; whether t was reached. */
static bool flow_bfs(flow_t *g, int32_t s, int32_t t) {
  for (int32_t i = 0; i < g->n; i++) g->level[i] = -1;
  int32_t qh = 0, qt = 0;
  g->level[s] = 0;
  g->queue[qt++] = s;
  while (qh < qt) {
    int32_t u = g->queue[qh++];
    for (int32_t k = g->head[u]; k >= 0; k = g->e.items[k].next) {
      fedge_t *e = &g->e.items[k];
      if (e->cap > 0 && g->level[e->to] < 0) {
        g->level[e->to] = g->level[u] + 1;
        g->queue[qt++] = e->to;
      }
    }
  }
  return t < 0 || g->level[t] >= 0;
}

static int64_t flow_dfs(flow_t *g, int32_t u, int32_t t, int64_t f) {
  if (u == t) return f;
  for (; g->it[u] >= 0; g->it[u] = g->e.items[g->it[u]].next) {
    fedge_t *e = &g->e.items[g->it[u]];
    if (e->cap <= 0 || g->level[e->to] != g->level[u] + 1) continue;
    int64_t d = flow_dfs(g, e->to, t, f < e->cap ? f : e->cap);
    if (d > 0) {
      g->e.items[g->it[u]].cap -= d;
      g->e.items[g->it[u] ^ 1].cap += d;
      return d;
    }
  }
  return 0;
}

/* ---- the pass ---- */
enum { SRC = 0, SNK = 1 };

/* The cut's graph node of node i's port for operand j (or its result). */
static int32_t port_node(const lay_t *L, const int32_t *gid, size_t i, int j) {
  role_t r = (role_t)L->role[i];
  if (r == R_NCHW || r == R_CONV) return port(r, 0, j) ? SNK : SRC;
  int p0 = port(r, 0, j), p1 = port(r, 1, j);
  return p0 == p1 ? (p0 ? SNK : SRC) : gid[i];
}

/* Each node's label: the minimum cut of the cost the header describes. */
static rill_status_t solve(lay_t *L) {
  asm_ctx_t *c = L->c;
  ir_func_t *f = L->f;
  size_t N = f->nodes.len, V = L->nvals;
  int32_t *gid = rill__calloc(c->a, N ? N : 1, sizeof(int32_t));
  flow_t g = {.a = c->a};
  if (!gid) return rill__oom();
  int32_t n = 2;
  for (size_t i = 0; i < N; i++) gid[i] = L->role[i] == R_EITHER || L->role[i] == R_TO_NHWC || L->role[i] == R_TO_NCHW ? n++ : -1;
  int32_t hyper = n;
  n += 2 * (int32_t)V;
  g.n = n;
  g.head = rill__calloc(c->a, (size_t)n, sizeof(int32_t));
  g.level = rill__calloc(c->a, (size_t)n, sizeof(int32_t));
  g.it = rill__calloc(c->a, (size_t)n, sizeof(int32_t));
  g.queue = rill__calloc(c->a, (size_t)n, sizeof(int32_t));
  rill_status_t st = g.head && g.level && g.it && g.queue ? NULL : rill__oom();
  for (int32_t k = 0; !st && k < n; k++) g.head[k] = -1;
  const int64_t big = (int64_t)V + 2; /* a transpose that moves data outweighs every view */
  /* Explicit transposes: one unless a view (label 1). */
  for (size_t i = 0; !st && i < N; i++) {
    if (L->role[i] != R_TO_NHWC && L->role[i] != R_TO_NCHW) continue;
    const ir_node_t *nd = &f->nodes.items[i];
    bool moves = moves_data(&f->values.items[nd->args[0]].type, L->role[i] == R_TO_NHWC ? TO_NHWC : TO_NCHW);
    st = flow_edge(&g, gid[i], SNK, moves ? big : 1);
  }
  /* Values: producer and readers all alike, or one transpose. */
  for (size_t i = 0; !st && i < N; i++) {
    const ir_node_t *nd = &f->nodes.items[i];
    for (uint32_t j = 0; !st && j < nd->nargs; j++) {
      uint32_t v = nd->args[j];
      const ir_value_t *x = &f->values.items[v];
      if (v >= V || x->type.rank != 4 || x->kind == V_CONST) continue;
      if (L->role[i] == R_CONV && j != 0 && j != 3) continue;
      int32_t a = hyper + 2 * (int32_t)v, b = a + 1;
      int64_t w = moves_data(&x->type, TO_NHWC) ? big : 1;
      if (g.head[a] < 0) { /* first use: the producer's port, once */
        int32_t p = x->def >= 0 ? port_node(L, gid, (size_t)x->def, -1) : SRC;
        st = flow_edge(&g, SRC, a, w);
        if (!st) st = flow_edge(&g, b, SNK, w);
        if (!st) st = flow_edge(&g, a, p, CAP_INF);
        if (!st) st = flow_edge(&g, p, b, CAP_INF);
      }
      int32_t q = port_node(L, gid, i, (int)j);
      if (!st) st = flow_edge(&g, a, q, CAP_INF);
      if (!st) st = flow_edge(&g, q, b, CAP_INF);
    }
  }
  while (!st && flow_bfs(&g, SRC, SNK)) {
    for (int32_t k = 0; k < n; k++) g.it[k] = g.head[k];
    while (flow_dfs(&g, SRC, SNK, CAP_INF) > 0) {}
  }
  if (!st) {
    /* NCHW: what the source still reaches; ties go to NHWC. */
    flow_bfs(&g, SRC, -1);
    for (size_t i = 0; i < N; i++)
      L->label[i] = gid[i] >= 0 ? g.level[gid[i]] < 0 : L->role[i] == R_CONV;
  }
  RILL_VEC_FREE(c->a, &g.e);
  rill__free(c->a, g.head);
  rill__free(c->a, g.level);
  rill__free(c->a, g.it);
  rill__free(c->a, g.queue);
  rill__free(c->a, gid);
  return st;
}

/* Node n rewritten channels-last: operands `args`, attributes `at`, its results the NHWC forms of its results. */
static rill_status_t emit_nhwc(lay_t *L, const ir_node_t *n, uint32_t *args, const isa_attr_t *at, uint32_t nat) {
  asm_ctx_t *c = L->c;
  ir_func_t *f = L->f;
  rill_type_t *in = rill__arena_alloc(&c->arena, sizeof *in * (n->nargs ? n->nargs : 1));
  rill_type_t *ot = rill__arena_alloc(&c->arena, sizeof *ot * n->nres);
  uint32_t *res = rill__arena_alloc(&c->arena, sizeof *res * n->nres);
  if (!in || !ot || !res) return rill__oom();
  for (uint32_t j = 0; j < n->nargs; j++) in[j] = f->values.items[args[j]].type;
  for (uint32_t k = 0; k < n->nres; k++) {
    ot[k] = permuted(&f->values.items[n->res[k]].type, TO_NHWC);
    RILL_TRY(new_value(L, n->res[k], &ot[k], ".nhwc", &res[k]));
  }
  uint32_t op;
  RILL_TRY(asm_intern_op(c, asm_decl(c, n)->name, in, n->nargs, ot, n->nres, at, nat, &op));
  ir_node_t m = *n;
  m.target = op;
  m.args = args;
  m.res = res;
  for (uint32_t k = 0; k < n->nres; k++) {
    uint32_t r = n->res[k];
    f->values.items[res[k]].def = (int32_t)L->out.len;
    f->values.items[r].def = -1;
    L->form[1][r] = (int32_t)res[k];
    L->form[0][r] = -1;
  }
  return RILL_VEC_PUSH(c->a, &L->out, m);
}

/* Node i (n) into the new list in its layout. */
static rill_status_t place(lay_t *L, size_t i, const ir_node_t *n) {
  asm_ctx_t *c = L->c;
  ir_func_t *f = L->f;
  role_t r = (role_t)L->role[i];
  int t = L->label[i];
  uint32_t *args = rill__arena_memdup(&c->arena, n->args, sizeof(uint32_t) * (n->nargs ? n->nargs : 1));
  if (!args) return rill__oom();
  if (r == R_CONV || (r == R_EITHER && t)) {
    /* The decl lives in the op table, which interning the transposes below
     * may move: what is needed of it is copied first. */
    uint32_t nat = asm_decl(c, n)->nattrs;
    isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (nat + 1));
    if (!at) return rill__oom();
    if (nat) memcpy(at, asm_decl(c, n)->attrs, sizeof *at * nat);
    bool layout = r == R_CONV || is_pool(c, n);
    for (uint32_t j = 0; j < n->nargs; j++) {
      if ((r == R_CONV && j == 2) || (j == 1 && asm_is_op(c, n, "gather"))) continue; /* the bias; the gather's index */
      const rill_type_t *ty = &f->values.items[n->args[j]].type;
      if (r == R_EITHER && ty->rank < 4 && !asm_single_element(ty)) { /* its rank-4 form, permuted: folded or a view */
        uint32_t v = n->args[j], p, w;
        rill_type_t p4 = padded4(ty), nh = permuted(&p4, TO_NHWC);
        RILL_TRY(new_value(L, v, &p4, ".r4", &p));
        RILL_TRY(add_view(L, v, p, n));
        RILL_TRY(new_value(L, v, &nh, ".nhwc", &w));
        RILL_TRY(add_permute(L, p, w, true, n));
        args[j] = w;
        continue;
      }
      RILL_TRY(form_of(L, n->args[j], 1, n, &args[j])); /* a convolution's weight: a constant, folded after */
    }
    for (uint32_t k = 0; k < nat; k++) {
      bool one = !strcmp(at[k].name, "axis") && at[k].kind == ISA_ATTR_INT, many = !strcmp(at[k].name, "axes") && at[k].kind == ISA_ATTR_INTS;
      if (!one && !many) continue;
      int64_t *v = rill__arena_alloc(&c->arena, sizeof *v * at[k].count);
      if (!v) return rill__oom();
      for (uint32_t q = 0; q < at[k].count; q++) v[q] = MOVED[(at[k].ints[q] % 4 + 4) % 4];
      at[k].ints = v;
    }
    if (layout) at[nat++] = (isa_attr_t){.name = "layout", .kind = ISA_ATTR_STRING, .count = 1, .str = "nhwc"};
    if (asm_is_op(c, n, "softmax") || asm_is_op(c, n, "log_softmax")) {
      bool has = false;
      for (uint32_t k = 0; k < nat; k++) has |= !strcmp(at[k].name, "axis");
      int64_t *v = has ? NULL : rill__arena_memdup(&c->arena, &MOVED[3], sizeof *v); /* the default, -1 */
      if (!has && !v) return rill__oom();
      if (!has) at[nat++] = (isa_attr_t){.name = "axis", .kind = ISA_ATTR_INT, .count = 1, .ints = v};
    }
    return emit_nhwc(L, n, args, at, nat);
  }
  if (r == R_TO_NHWC && t) { /* the operand's NHWC form is the result */
    uint32_t x;
    RILL_TRY(form_of(L, n->args[0], 1, n, &x));
    L->form[0][n->res[0]] = (int32_t)n->res[0];
    return add_view(L, x, n->res[0], n);
  }
  if (r == R_TO_NCHW && t) { /* the operand is the result's NHWC form */
    uint32_t x, y = n->res[0], yt;
    RILL_TRY(form_of(L, n->args[0], 0, n, &x));
    rill_type_t ot = permuted(&f->values.items[y].type, TO_NHWC);
    RILL_TRY(new_value(L, y, &ot, ".nhwc", &yt));
    f->values.items[y].def = -1;
    L->form[1][y] = (int32_t)yt;
    L->form[0][y] = -1;
    return add_view(L, x, yt, n);
  }
  for (uint32_t j = 0; j < n->nargs; j++) RILL_TRY(form_of(L, n->args[j], 0, n, &args[j]));
  ir_node_t m = *n;
  m.args = args;
  for (uint32_t j = 0; j < n->nres; j++) {
    f->values.items[n->res[j]].def = (int32_t)L->out.len;
    if (n->res[j] < L->nvals) L->form[0][n->res[j]] = (int32_t)n->res[j];
  }
  return RILL_VEC_PUSH(c->a, &L->out, m);
}

/* A channel shuffle as torchvision writes it (reshape [B,C,H,W] to
 * [B,g,C/g,H,W], transpose [0,2,1,3,4], reshape back), each step read by
 * the next alone, is a permutation of the channels: node i (the last
 * reshape) becomes gather(x, idx) {axis=1}, idx[k] = (k % g) * (C/g) + k / g,
 * which either layout takes (channels-last, a gather along the last axis)
 * where the rank-5 transpose would hold its neighbours in NCHW. */
static rill_status_t merge_shuffle(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead) {
  const ir_node_t *rn = &f->nodes.items[i];
  if (!asm_is_op(c, rn, "reshape") || rn->nargs != 1 || asm_decl(c, rn)->out[0].rank != 4) return NULL;
  int32_t ti = asm_sole_maker(c, f, nuse, dead, rn->args[0], "transpose");
  if (ti < 0) return NULL;
  const isa_opdecl_t *td = asm_decl(c, &f->nodes.items[ti]);
  const isa_attr_t *pa = asm_attr(td, "perm");
  static const int64_t SWAP12[5] = {0, 2, 1, 3, 4};
  if (td->in[0].rank != 5 || !pa || pa->count != 5) return NULL;
  for (int k = 0; k < 5; k++)
    if ((pa->ints[k] + 5) % 5 != SWAP12[k]) return NULL;
  int32_t si = asm_sole_maker(c, f, nuse, dead, f->nodes.items[ti].args[0], "reshape");
  if (si < 0 || f->nodes.items[si].nargs != 1) return NULL;
  const isa_opdecl_t *sd = asm_decl(c, &f->nodes.items[si]);
  rill_type_t x = sd->in[0], y = asm_decl(c, rn)->out[0];
  const rill_type_t *v5 = &sd->out[0];
  int64_t g = v5->dims[1], q = v5->dims[2], C = x.dims[1];
  if (x.rank != 4 || !rill__type_eq(&x, &y) || v5->dims[0] != x.dims[0] || v5->dims[3] != x.dims[2] || v5->dims[4] != x.dims[3]) return NULL;
  if (g < 1 || q < 1 || C != g * q || C > INT32_MAX) return NULL; /* (sizes over shape variables are negative ids) */
  rill_type_t it = {RILL_I32, 1, {C}};
  int32_t *idx = rill__arena_alloc_raw(&c->arena, sizeof *idx * (size_t)C);
  uint32_t *args = rill__arena_alloc(&c->arena, sizeof *args * 2);
  isa_attr_t *aa = rill__arena_alloc(&c->arena, sizeof *aa);
  int64_t *one = rill__arena_memdup(&c->arena, &(int64_t){1}, sizeof(int64_t));
  if (!idx || !args || !aa || !one) return rill__oom();
  for (int64_t k = 0; k < C; k++) idx[k] = (int32_t)((k % g) * q + k / g);
  uint32_t konst, iv, op;
  RILL_TRY(asm_new_const(c, f, &it, (uint8_t *)idx, false, &konst, &iv));
  *aa = (isa_attr_t){.name = "axis", .kind = ISA_ATTR_INT, .count = 1, .ints = one};
  rill_type_t in[2] = {x, it};
  RILL_TRY(asm_intern_op(c, "gather", in, 2, &y, 1, aa, 1, &op));
  args[0] = f->nodes.items[si].args[0], args[1] = iv;
  ir_node_t *n = &f->nodes.items[i]; /* (asm_new_const may have moved the values, not the nodes) */
  n->target = op;
  n->args = args;
  n->nargs = 2;
  f->values.items[f->nodes.items[si].res[0]].def = -1;
  f->values.items[f->nodes.items[ti].res[0]].def = -1;
  dead[si] = dead[ti] = true;
  return NULL;
}

rill_status_t asm_pass_layout(asm_ctx_t *c, ir_func_t *f) {
  if (f->hand_scheduled) return NULL;
  /* (a transposed twin of a state's value would miss its updates) */
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_STATE) return NULL;
  bool any = false;
  for (size_t i = 0; i < f->nodes.len && !any; i++) any = conv_wanted(c, f, &f->nodes.items[i]);
  if (!any) return NULL;
  RILL_TRY(asm_merge_pass(c, f, merge_shuffle));
  lay_t L = {.c = c, .f = f, .nvals = f->values.len};
  size_t n = f->nodes.len;
  for (int k = 0; k < 2; k++) L.form[k] = rill__calloc(c->a, L.nvals ? L.nvals : 1, sizeof(int32_t));
  L.role = rill__calloc(c->a, n ? n : 1, 1);
  L.label = rill__calloc(c->a, n ? n : 1, 1);
  rill_status_t st = L.form[0] && L.form[1] && L.role && L.label ? NULL : rill__oom();
  for (size_t v = 0; !st && v < L.nvals; v++) {
    /* parameters and constants are NCHW; results are made by their nodes */
    L.form[0][v] = f->values.items[v].kind == V_RESULT ? -1 : (int32_t)v;
    L.form[1][v] = -1;
  }
  for (int k = 0; !st && k < 2; k++) {
    int64_t *p = rill__arena_memdup(&c->arena, k ? TO_NCHW : TO_NHWC, sizeof TO_NHWC);
    if (!p || !(L.perm_attr[k] = rill__arena_alloc(&c->arena, sizeof(isa_attr_t)))) st = rill__oom();
    else *L.perm_attr[k] = (isa_attr_t){.name = "perm", .kind = ISA_ATTR_INTS, .count = 4, .ints = p};
  }
  for (size_t i = 0; !st && i < n; i++) L.role[i] = (uint8_t)role_of(c, f, &f->nodes.items[i]);
  if (!st) st = solve(&L);
  for (size_t i = 0; !st && i < n; i++) {
    ir_node_t node = f->nodes.items[i];
    st = place(&L, i, &node);
  }
  if (!st) {
    /* asm_replace_nodes maps defs through newpos: the defs set here are new positions already. */
    int32_t *ident = rill__calloc(c->a, L.out.len ? L.out.len : 1, sizeof(int32_t));
    if (!ident) st = rill__oom();
    for (size_t i = 0; ident && i < L.out.len; i++) ident[i] = (int32_t)i;
    if (ident) {
      asm_replace_nodes(c, f, L.out.items, L.out.len, L.out.cap, ident);
      L.out.items = NULL;
    }
    rill__free(c->a, ident);
  }
  RILL_VEC_FREE(c->a, &L.out);
  for (int k = 0; k < 2; k++) rill__free(c->a, L.form[k]);
  rill__free(c->a, L.role);
  rill__free(c->a, L.label);
  /* The weights' transposes become constants. */
  return st ? st : asm_pass_fold(c, f);
}
