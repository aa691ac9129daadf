/* tensor_parallel.c: --tensor-parallel=N, the rank form (docs/tensor_parallel.md).
 *
 * Every rank of a job of N runs the same module; a weight that is split is
 * a shard constant (isa_const_t: `w["t"] {shard=AXIS, ranks=N}`), of which
 * the VM gives rank r part r. The pass runs over every function of the
 * module at once (states are shared by them), before the other passes, and
 * decides per value: replicated (every rank holds all of it) or split N
 * ways along one axis. Megatron's pattern falls out of the rules:
 *
 * - seed: a linear (or matmul) of a replicated operand by a constant
 *   weight whose output features divide by N is column-parallel: its
 *   weight's rows (matmul: columns) and its bias are split, its result
 *   split along the last axis;
 * - split values flow through elementwise ops (a constant operand that is
 *   not broadcast along the axis, a bias, is split too), reshapes that
 *   keep the axis's block whole (heads: [.., H*D] -> [.., H, D] with H
 *   divisible by N), transposes, rotary, attention (q, k, v split on the
 *   head axis: grouped-query attention keeps its ratio), splits along
 *   other axes, and updates of states (the KV cache split on its head
 *   axis in every function);
 * - end: a linear (matmul) whose operand is split along the contracted
 *   axis by a constant weight is row-parallel: its weight's columns (rows)
 *   are split, an all_reduce sums the parts, and the bias is added once
 *   after it;
 * - anything else that meets a split value gathers it first (all_gather).
 *
 * The values connected by these rules (a block) are kept split when they
 * end only in row-parallel linears (an attention or MLP block), or when
 * they come from one linear and are gathered (a vocabulary-parallel head);
 * a block that fails either is made replicated again, and the analysis
 * runs once more without its seeds. Each block's outcome is a note.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

enum { R = 0, S = 1 };
enum { ROLE_NONE, ROLE_SEED, ROLE_ROW, ROLE_VOCAB };

typedef struct tp_comp {
  int32_t parent;
  bool row, exits, bad;
  bool exits_inside;     /* gathered by something other than a return */
  bool vocab;            /* a vocabulary-parallel embedding (one gather) */
  bool attn;             /* holds an attention */
  uint32_t nrows;        /* row-parallel linears */
  uint32_t groups;       /* > 1: its column-parallel weights hold that many groups (a fused projection split after) */
  uint32_t nseeds, line, col, fn;
  const char *why;       /* the first reason a split value was gathered or the block refused */
  uint32_t why_line, why_col;
} tp_comp_t;

typedef struct tp_val {
  int8_t st, ax;
  bool fresh;            /* straight from column-parallel linears (and their biases): a split may cut it in groups */
  int32_t comp;
} tp_val_t;

typedef struct tp_node {
  uint8_t role;
  bool col;              /* its split constants are column-parallel ones (grouped with their block's groups) */
  bool off;              /* a seed made replicated by an earlier round */
  const char *why;       /* off: its block's reason, at why_line:why_col */
  uint32_t why_line, why_col;
  int64_t nodiv;         /* a linear, matmul or embedding by a weight whose split size (features, vocabulary) does not divide by N: that size; 0 none */
  uint64_t gather;       /* operands to gather */
  int8_t wshard[8];      /* per operand: the axis of a constant to split, or -1 */
} tp_node_t;

typedef struct tp_fn {
  ir_func_t *f;
  tp_val_t *v;
  tp_node_t *n;
} tp_fn_t;

typedef struct tp_note {
  uint32_t line, col;
  const char *text;
} tp_note_t;

typedef struct tp {
  asm_ctx_t *c;
  RILL_VEC(tp_note_t) notes; /* said in line order at the end */
  int N;
  tp_fn_t *fns;
  size_t nf;
  RILL_VEC(tp_comp_t) comps;
  tp_val_t *state;       /* per module state: its decision (comp -2: undecided) */
  uint32_t cur_fn;
} tp_t;

static int32_t find(tp_t *t, int32_t a) {
  while (t->comps.items[a].parent != a) a = t->comps.items[a].parent = t->comps.items[t->comps.items[a].parent].parent;
  return a;
}

static void unite(tp_t *t, int32_t a, int32_t b) {
  a = find(t, a);
  b = find(t, b);
  if (a == b) return;
  tp_comp_t *x = &t->comps.items[a], *y = &t->comps.items[b];
  y->parent = a;
  x->row |= y->row;
  x->exits |= y->exits;
  x->exits_inside |= y->exits_inside;
  x->bad |= y->bad;
  x->nseeds += y->nseeds;
  x->nrows += y->nrows;
  x->attn |= y->attn;
  if (y->groups > 1 && x->groups > 1 && x->groups != y->groups) x->bad = true;
  if (y->groups > 1) x->groups = y->groups;
  if (!x->why) { x->why = y->why; x->why_line = y->why_line; x->why_col = y->why_col; }
  if (y->line && (!x->line || y->line < x->line)) { x->line = y->line; x->col = y->col; x->fn = y->fn; }
}

static rill_status_t new_comp(tp_t *t, const ir_node_t *n, int32_t *out) {
  tp_comp_t k = {.parent = (int32_t)t->comps.len, .line = n->line, .col = n->col, .fn = t->cur_fn};
  *out = k.parent;
  return RILL_VEC_PUSH(t->c->a, &t->comps, k);
}

static void note_why(tp_t *t, int32_t comp, const ir_node_t *n, const char *why) {
  tp_comp_t *k = &t->comps.items[find(t, comp)];
  if (!k->why) { k->why = why; k->why_line = n->line; k->why_col = n->col; }
}

/* A constant weight from a weights file, not yet split: its module const, or -1. */
static int32_t weight_of(const tp_t *t, const ir_func_t *f, uint32_t v) {
  const ir_value_t *x = &f->values.items[v];
  if (x->kind != V_CONST) return -1;
  const isa_const_t *k = &t->c->consts.items[x->konst];
  return k->origin == ISA_CONST_WEIGHTS && !k->shard_parts ? (int32_t)x->konst : -1;
}

static bool dim_splits(int64_t d, int N) { return !isa_dim_is_sym(d) && d > 0 && d % N == 0; }

static tp_val_t get(tp_t *t, tp_fn_t *F, uint32_t v) {
  const ir_value_t *x = &F->f->values.items[v];
  if (x->kind == V_STATE) {
    tp_val_t s = t->state[x->konst];
    return s.comp == -2 ? (tp_val_t){R, 0, false, -1} : s;
  }
  return F->v[v];
}

/* Operand j of node i is gathered (its block ends there). */
static void exit_arg(tp_t *t, tp_fn_t *F, const ir_node_t *n, uint32_t i, uint32_t j, const char *why) {
  tp_val_t a = get(t, F, n->args[j]);
  if (a.st != S) return;
  F->n[i].gather |= 1ull << j;
  int32_t r = find(t, a.comp);
  t->comps.items[r].exits = true;
  t->comps.items[r].exits_inside |= n->kind != N_RETURN;
  note_why(t, r, n, why);
}

static void exit_all(tp_t *t, tp_fn_t *F, const ir_node_t *n, uint32_t i, const char *why) {
  for (uint32_t j = 0; j < n->nargs && j < 64; j++) exit_arg(t, F, n, i, j, why);
}

static bool is_name(const char *a, const char *const *list) {
  for (; *list; list++)
    if (!strcmp(a, *list)) return true;
  return false;
}

/* Node i of F: its results' decisions from its operands'. */
static rill_status_t step(tp_t *t, tp_fn_t *F, uint32_t i) {
  ir_func_t *f = F->f;
  const ir_node_t *n = &f->nodes.items[i];
  tp_node_t *tn = &F->n[i];
  tn->role = ROLE_NONE;
  tn->col = false;
  tn->gather = 0;
  tn->nodiv = 0;
  memset(tn->wshard, -1, sizeof tn->wshard);
  for (uint32_t r = 0; r < n->nres; r++) F->v[n->res[r]] = (tp_val_t){R, 0, false, -1};
  /* a state read before any update decided it stays whole */
  bool upd = n->kind == N_OP && !strcmp(asm_decl(t->c, n)->name, "update");
  for (uint32_t j = upd ? 1 : 0; j < n->nargs; j++) {
    const ir_value_t *x = &f->values.items[n->args[j]];
    if (x->kind == V_STATE && t->state[x->konst].comp == -2) t->state[x->konst] = (tp_val_t){R, 0, false, -1};
  }
  bool any = false;
  for (uint32_t j = 0; j < n->nargs; j++) any |= get(t, F, n->args[j]).st == S;
  if (n->kind != N_OP || f->hand_scheduled || n->nargs > 8) {
    exit_all(t, F, n, i, n->kind == N_RETURN ? "a result is returned whole" : n->kind == N_OP ? "hand-scheduled body" : "a call, if or while takes whole values");
    return NULL;
  }
  const isa_opdecl_t *d = asm_decl(t->c, n);
  const char *op = d->name;
  bool lin = !strcmp(op, "linear") && (n->nargs == 2 || n->nargs == 3), mm = !strcmp(op, "matmul") && n->nargs == 2;
  int N = t->N;
  /* the weight's output and contracted axes: linear's w [out, in], or [in, out] with weight="kn" as matmul's b */
  const isa_attr_t *wl = lin ? asm_attr(d, "weight") : NULL;
  int oax = lin && !(wl && !strcmp(wl->str, "kn")) ? 0 : 1, kax = 1 - oax;
  if (lin || mm) {
    const ir_value_t *x = &f->values.items[n->args[0]];
    int32_t w = weight_of(t, f, n->args[1]);
    const rill_type_t *wt = &f->values.items[n->args[1]].type;
    bool w2 = w >= 0 && wt->rank == 2 && x->type.rank >= (mm ? 2 : 1);
    int32_t b = lin && n->nargs == 3 ? weight_of(t, f, n->args[2]) : -1;
    bool bias_ok = !(lin && n->nargs == 3) || (b >= 0 && f->values.items[n->args[2]].type.rank == 1);
    tp_val_t xa = get(t, F, n->args[0]);
    bool others_r = true;
    for (uint32_t j = 1; j < n->nargs; j++) others_r &= get(t, F, n->args[j]).st == R;
    if (!any && w2 && bias_ok && !tn->off && !isa_dim_is_sym(wt->dims[oax]) && !dim_splits(wt->dims[oax], N))
      tn->nodiv = wt->dims[oax];
    if (!any && w2 && bias_ok && !tn->off && dim_splits(wt->dims[oax], N)) {
      /* column-parallel */
      tn->role = ROLE_SEED;
      tn->wshard[1] = oax;
      if (lin && n->nargs == 3) tn->wshard[2] = 0;
      int32_t k;
      RILL_TRY(new_comp(t, n, &k));
      t->comps.items[k].nseeds = 1;
      F->v[n->res[0]] = (tp_val_t){S, (int8_t)(f->values.items[n->res[0]].type.rank - 1), true, k};
      tn->col = true;
      return NULL;
    }
    if (xa.st == S && others_r && w2 && bias_ok && xa.ax == x->type.rank - 1 && dim_splits(wt->dims[kax], N)) {
      /* row-parallel: the parts' sums are all-reduced */
      tn->role = ROLE_ROW;
      tn->wshard[1] = kax;
      t->comps.items[find(t, xa.comp)].row = true;
      t->comps.items[find(t, xa.comp)].nrows++;
      return NULL;
    }
    if (any) exit_all(t, F, n, i, "a linear whose operand is split on another axis than it contracts, or by a weight that is not a constant");
    return NULL;
  }
  if (!strcmp(op, "gather") && n->nargs == 2 && !any) {
    /* vocabulary-parallel embedding: rows of a constant table picked by ids */
    const isa_attr_t *ax = asm_attr(d, "axis");
    const rill_type_t *wt = &f->values.items[n->args[0]].type, *it = &f->values.items[n->args[1]].type;
    bool table = weight_of(t, f, n->args[0]) >= 0 && (!ax || ax->ints[0] == 0) && wt->rank >= 2 && it->rank == 1 &&
                 (it->dtype == RILL_I64 || it->dtype == RILL_I32);
    if (table && !isa_dim_is_sym(wt->dims[0]) && !dim_splits(wt->dims[0], N)) tn->nodiv = wt->dims[0];
    if (table && dim_splits(wt->dims[0], N)) {
      tn->role = ROLE_VOCAB;
      tn->wshard[0] = 0;
      int32_t k;
      RILL_TRY(new_comp(t, n, &k));
      t->comps.items[k].nseeds = 1;
      t->comps.items[k].row = t->comps.items[k].vocab = true;
    }
    return NULL;
  }
  if (!any) return NULL;
  const rill_type_t *rt = n->nres ? &f->values.items[n->res[0]].type : NULL;
  static const char *const EXTRA[] = {"cast", "copy", "swiglu", "geglu", NULL};
  const ops_def_t *def = ops_find(op);
  if (n->nres == 1 && ((def && ops_is_elementwise(def)) || is_name(op, EXTRA))) {
    int ra = -1;
    int32_t comp = -1;
    bool fresh = true;
    for (uint32_t j = 0; j < n->nargs; j++) {
      tp_val_t a = get(t, F, n->args[j]);
      if (a.st != S) continue;
      fresh &= a.fresh;
      int m = a.ax + (rt->rank - f->values.items[n->args[j]].type.rank);
      if (ra >= 0 && m != ra) { exit_all(t, F, n, i, "elementwise operands split on different axes"); return NULL; }
      ra = m;
      if (comp >= 0) unite(t, comp, a.comp);
      comp = comp >= 0 ? find(t, comp) : a.comp;
    }
    if (!dim_splits(rt->dims[ra], N)) { exit_all(t, F, n, i, "a size that does not divide"); return NULL; }
    for (uint32_t j = 0; j < n->nargs; j++) {
      if (get(t, F, n->args[j]).st == S) continue;
      const rill_type_t *at = &f->values.items[n->args[j]].type;
      int aj = ra - (rt->rank - at->rank);
      if (aj < 0 || at->dims[aj] == 1) continue;
      if (weight_of(t, f, n->args[j]) >= 0 && at->dims[aj] == rt->dims[ra]) { tn->wshard[j] = (int8_t)aj; continue; }
      exit_all(t, F, n, i, "an elementwise operand that is neither split nor a constant");
      return NULL;
    }
    F->v[n->res[0]] = (tp_val_t){S, (int8_t)ra, fresh, comp};
    tn->col = fresh;
    return NULL;
  }
  tp_val_t a0 = get(t, F, n->args[0]);
  const rill_type_t *in0 = &f->values.items[n->args[0]].type;
  if (!strcmp(op, "reshape") && a0.st == S) {
    /* the dims before the axis unchanged, the axis's block whole in one dim */
    int ax = a0.ax, b = -1;
    if (dim_splits(in0->dims[ax], N) && rt->rank >= ax + 1) {
      bool same = true;
      for (int k = 0; k < ax; k++) same &= in0->dims[k] == rt->dims[k];
      if (same && dim_splits(rt->dims[ax], N)) b = ax;
    }
    if (b < 0) {
      /* which size does not divide: the dim the block would be in (heads), else the block's own */
      char why[320], tb[96];
      int64_t bad = rt->rank > ax && !dim_splits(rt->dims[ax], N) ? rt->dims[ax] : in0->dims[ax];
      snprintf(why, sizeof why, "a reshape that cuts across the split (heads or sizes not divisible): to %s, whose %lld at axis %d does not divide by %d",
               isa_sym_format_type(&t->c->syms, rt, tb, sizeof tb), (long long)bad, rt->rank > ax ? ax : 0, N);
      const char *w = rill__arena_strndup(&t->c->arena, why, strlen(why));
      exit_all(t, F, n, i, w ? w : "a reshape that cuts across the split (heads or sizes not divisible)");
      return NULL;
    }
    F->v[n->res[0]] = (tp_val_t){S, (int8_t)b, false, a0.comp};
    return NULL;
  }
  if (!strcmp(op, "transpose") && a0.st == S) {
    const isa_attr_t *p = asm_attr(d, "perm");
    for (int k = 0; p && k < (int)p->count; k++)
      if (p->ints[k] == a0.ax || p->ints[k] + rt->rank == a0.ax) { F->v[n->res[0]] = (tp_val_t){S, (int8_t)k, false, a0.comp}; return NULL; }
    exit_all(t, F, n, i, "a transpose without a perm");
    return NULL;
  }
  if (!strcmp(op, "rotary") && a0.st == S && a0.ax != in0->rank - 1 && get(t, F, n->args[1]).st == R) {
    F->v[n->res[0]] = a0;
    F->v[n->res[0]].fresh = false;
    return NULL;
  }
  if (!strcmp(op, "attention") && n->nres == 1) {
    bool ok = in0->rank == 4 && n->nargs >= 3 && !asm_attr(d, "kv_heads"); /* (packed heads: split as a whole, not by head) */
    int32_t comp = -1;
    for (uint32_t j = 0; ok && j < 3; j++) {
      tp_val_t a = get(t, F, n->args[j]);
      ok = a.st == S && a.ax == 1;
      if (ok && comp >= 0) unite(t, comp, a.comp);
      if (ok) comp = find(t, a.comp);
    }
    for (uint32_t j = 3; ok && j < n->nargs; j++) ok = get(t, F, n->args[j]).st == R && f->values.items[n->args[j]].type.rank < 4;
    if (!ok) { exit_all(t, F, n, i, "attention whose q, k and v are not all split on the head axis"); return NULL; }
    F->v[n->res[0]] = (tp_val_t){S, 1, false, comp};
    t->comps.items[find(t, comp)].attn = true;
    return NULL;
  }
  if (!strcmp(op, "split") && a0.st == S) {
    const isa_attr_t *ax = asm_attr(d, "axis");
    int64_t sa = ax ? ax->ints[0] : 0;
    if (sa < 0) sa += in0->rank;
    tp_val_t out = a0;
    out.fresh = false;
    if (sa == a0.ax) {
      /* a fused projection's equal groups: each column-parallel weight cut per group */
      const isa_attr_t *sz = asm_attr(d, "sizes");
      bool ok = a0.fresh && sz && sz->count == n->nres && n->nres > 1;
      for (uint32_t k = 0; ok && k < sz->count; k++) ok = sz->ints[k] == sz->ints[0] && dim_splits(sz->ints[k], N);
      tp_comp_t *k = &t->comps.items[find(t, a0.comp)];
      if (ok && k->groups > 1 && k->groups != n->nres) ok = false;
      if (!ok) { exit_all(t, F, n, i, "a split along the split axis into unequal or indivisible groups"); return NULL; }
      k->groups = n->nres;
    }
    for (uint32_t r = 0; r < n->nres; r++) F->v[n->res[r]] = out;
    return NULL;
  }
  if (!strcmp(op, "update") && n->nargs == 3) {
    const ir_value_t *sv = &f->values.items[n->args[0]];
    tp_val_t *s = &t->state[sv->konst], x = get(t, F, n->args[1]);
    const isa_attr_t *ax = asm_attr(d, "axis");
    int64_t ua = ax ? ax->ints[0] : 0;
    if (ua < 0) ua += in0->rank;
    if (get(t, F, n->args[2]).st == S) { exit_all(t, F, n, i, "an update at a split position"); return NULL; }
    bool init = t->c->states.items[sv->konst].init != ISA_NONE;
    if (x.st == S && s->comp == -2 && ua != x.ax && !init && dim_splits(sv->type.dims[x.ax], N)) {
      *s = x;
      return NULL;
    }
    if (x.st == S && s->st == S && s->ax == x.ax) {
      unite(t, s->comp, x.comp);
      return NULL;
    }
    if (s->st == S && x.st == R) {
      /* the state was split by another function's block: that block cannot be */
      int32_t r = find(t, s->comp);
      t->comps.items[r].bad = true;
      note_why(t, r, n, "a state that another function writes whole");
      return NULL;
    }
    exit_all(t, F, n, i, "an update of a state that cannot be split");
    return NULL;
  }
  exit_all(t, F, n, i, "an op that needs its operands whole");
  return NULL;
}

static rill_status_t analyse(tp_t *t) {
  t->comps.len = 0;
  for (size_t s = 0; s < t->c->states.len; s++) t->state[s] = (tp_val_t){R, 0, false, -2};
  for (size_t fi = 0; fi < t->nf; fi++) {
    tp_fn_t *F = &t->fns[fi];
    t->cur_fn = (uint32_t)fi;
    for (size_t v = 0; v < F->f->values.len; v++) F->v[v] = (tp_val_t){R, 0, false, -1};
    for (uint32_t i = 0; i < F->f->nodes.len; i++) RILL_TRY(step(t, F, i));
  }
  return NULL;
}

/* A block is kept when it ends only in row-parallel linears, or comes from
 * one linear and is gathered only to be returned (a head). */
static bool keep(const tp_comp_t *k) { return !k->bad && (k->row ? !k->exits : k->nseeds == 1 && !k->exits_inside); }

/* ---- rewriting ---- */
rill_status_t asm_add_result(asm_ctx_t *c, ir_func_t *f, const char *name, const rill_type_t *ty, uint32_t *out) {
  ir_value_t v = {.name = name, .type = *ty, .kind = V_RESULT, .def = -1, .slot = -1, .reg = -1};
  *out = (uint32_t)f->values.len;
  return RILL_VEC_PUSH(c->a, &f->values, v);
}

static rill_status_t add_value(tp_t *t, ir_func_t *f, const char *name, const rill_type_t *ty, uint32_t *out) {
  return asm_add_result(t->c, f, name, ty, out);
}

static rill_type_t part_type(const rill_type_t *ty, int ax, int N) {
  rill_type_t r = *ty;
  r.dims[ax] /= N;
  return r;
}

/* The split constant of module const k along axis ax (made once), and its value in f. */
static rill_status_t shard_value(tp_t *t, ir_func_t *f, uint32_t k, int ax, uint32_t groups, uint32_t *out) {
  asm_ctx_t *c = t->c;
  char name[512];
  if (groups > 1) snprintf(name, sizeof name, "%s.part%dg%u", c->consts.items[k].name, ax, groups);
  else snprintf(name, sizeof name, "%s.part%d", c->consts.items[k].name, ax);
  int32_t nk = asm_find_const(c, name, strlen(name));
  if (nk < 0) {
    isa_const_t x = c->consts.items[k];
    x.type = part_type(&x.type, ax, t->N);
    x.shard_axis = (uint32_t)ax;
    x.shard_parts = (uint32_t)t->N;
    x.shard_groups = groups > 1 ? groups : 1;
    if (!(x.name = rill__arena_memdup(&c->arena, name, strlen(name) + 1))) return rill__oom();
    const weights_decl_t *wd = &c->weights.items[x.weights];
    const isa_st_tensor_t *st = wd->st ? isa_st_find(wd->st, x.tensor) : NULL;
    if (!st) return rill__status(RILL_INTERNAL, "tensor parallel: the weights of %%%s are not at hand", x.name);
    RILL_TRY(asm_shard_sums(c, &x, st->data));
    nk = (int32_t)c->consts.len;
    RILL_TRY(rill__map_put(&c->const_map, x.name, strlen(x.name), (uint32_t)nk));
    RILL_TRY(RILL_VEC_PUSH(c->a, &c->consts, x));
  }
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_CONST && f->values.items[v].konst == (uint32_t)nk) { *out = (uint32_t)v; return NULL; }
  ir_value_t v = {.name = c->consts.items[nk].name, .type = c->consts.items[nk].type, .kind = V_CONST, .konst = (uint32_t)nk,
                  .def = -1, .slot = -1, .reg = -1};
  *out = (uint32_t)f->values.len;
  return RILL_VEC_PUSH(c->a, &f->values, v);
}

static isa_attr_t *attrs_copy(tp_t *t, const isa_opdecl_t *d) {
  isa_attr_t *a = rill__arena_alloc(&t->c->arena, sizeof(isa_attr_t) * (d->nattrs + 1));
  if (a && d->nattrs) memcpy(a, d->attrs, sizeof(isa_attr_t) * d->nattrs);
  return a;
}

/* Node `n` (args, results set) with the op's declaration inferred again for its operands' types now; results typed from it. */
rill_status_t asm_retype(asm_ctx_t *c, ir_func_t *f, ir_node_t *n, const char *op, const isa_attr_t *attrs, uint32_t nattrs) {
  rill_type_t in[64], out[64];
  if (n->nargs > 64 || n->nres > 64) return rill__status(RILL_INTERNAL, "splitting: an op with too many operands");
  for (uint32_t j = 0; j < n->nargs; j++) in[j] = f->values.items[n->args[j]].type;
  uint32_t nout;
  ops_params_t p;
  rill_status_t st = ops_infer_sym(ops_find(op), &c->syms, in, n->nargs, attrs, nattrs, out, 64, &nout, &p);
  if (st) {
    rill_status_t e = asm_error(c, n->line, n->col, "%s after splitting: %s", op, rill_status_message(st));
    rill_status_free(st);
    return e;
  }
  for (uint32_t r = 0; r < n->nres && r < nout; r++)
    if (f->values.items[n->res[r]].kind != V_STATE) f->values.items[n->res[r]].type = out[r];
  return asm_intern_op(c, op, in, n->nargs, out, nout, attrs, nattrs, &n->target);
}

rill_status_t asm_new_op(asm_ctx_t *c, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, const char *op, const isa_attr_t *attrs,
                         uint32_t nattrs, const uint32_t *args, uint32_t nargs, uint32_t res) {
  ir_node_t n = {.kind = N_OP, .line = at->line, .col = at->col, .stream = at->stream, .nargs = nargs, .nres = 1};
  n.args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (nargs ? nargs : 1));
  n.res = rill__arena_alloc(&c->arena, sizeof(uint32_t));
  if (!n.args || !n.res) return rill__oom();
  if (nargs) memcpy(n.args, args, sizeof(uint32_t) * nargs);
  n.res[0] = res;
  RILL_TRY(asm_retype(c, f, &n, op, attrs, nattrs));
  f->values.items[res].def = (int32_t)out->len;
  return RILL_VEC_PUSH(c->a, out, n);
}

static rill_status_t new_node(tp_t *t, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, const char *op, const isa_attr_t *attrs,
                              uint32_t nattrs, const uint32_t *args, uint32_t nargs, uint32_t res) {
  return asm_new_op(t->c, f, out, at, op, attrs, nattrs, args, nargs, res);
}

static rill_status_t retype(tp_t *t, ir_func_t *f, ir_node_t *n, const char *op, const isa_attr_t *attrs, uint32_t nattrs) {
  return asm_retype(t->c, f, n, op, attrs, nattrs);
}

static isa_attr_t *int_attrs(tp_t *t, const char *n1, int64_t v1, const char *n2, int64_t v2) {
  isa_attr_t *a = rill__arena_alloc(&t->c->arena, sizeof(isa_attr_t) * 2);
  int64_t *v = rill__arena_alloc(&t->c->arena, sizeof(int64_t) * 2);
  if (!a || !v) return NULL;
  v[0] = v1;
  v[1] = v2;
  a[0] = (isa_attr_t){.name = n1, .kind = ISA_ATTR_INT, .count = 1, .ints = &v[0]};
  a[1] = (isa_attr_t){.name = n2, .kind = ISA_ATTR_INT, .count = 1, .ints = &v[1]};
  return a;
}

/* A value of f for scalar literal v of dtype d. */
rill_status_t asm_literal_value(asm_ctx_t *c, ir_func_t *f, rill_dtype_t d, double v, uint32_t *out) {
  uint8_t b[8] = {0};
  if (d == RILL_I64) { int64_t x = (int64_t)v; memcpy(b, &x, 8); }
  else if (d == RILL_I32) { int32_t x = (int32_t)v; memcpy(b, &x, 4); }
  else if (d == RILL_F64) memcpy(b, &v, 8);
  else if (d == RILL_F32) { float x = (float)v; memcpy(b, &x, 4); }
  else if (v == 0) { /* f16, bf16: zero's bits are zeros */ }
  else return rill__status(RILL_INTERNAL, "splitting: a literal of %s", rill_dtype_name(d));
  uint32_t k;
  RILL_TRY(asm_literal_const(c, d, b, &k));
  for (size_t i = 0; i < f->values.len; i++)
    if (f->values.items[i].kind == V_CONST && f->values.items[i].konst == k) { *out = (uint32_t)i; return NULL; }
  ir_value_t x = {.name = c->consts.items[k].name, .type = c->consts.items[k].type, .kind = V_CONST, .konst = k, .def = -1, .slot = -1, .reg = -1};
  *out = (uint32_t)f->values.len;
  return RILL_VEC_PUSH(c->a, &f->values, x);
}

static rill_status_t literal(tp_t *t, ir_func_t *f, rill_dtype_t d, double v, uint32_t *out) { return asm_literal_value(t->c, f, d, v, out); }

/* y = gather(table, ids) with table's rows split: rank r looks up the ids
 * in its rows [r V/N, (r+1) V/N) (others at row 0, then zeroed), and an
 * all_reduce sums the ranks' rows: each id's row comes from one rank. */
static rill_status_t vocab_gather(tp_t *t, ir_func_t *f, asm_nodes_t *out, ir_node_t *n, isa_attr_t *attrs, uint32_t nattrs) {
  uint32_t table = n->args[0], ids = n->args[1], y = n->res[0];
  rill_dtype_t idt = f->values.items[ids].type.dtype, dt = f->values.items[y].type.dtype;
  int64_t part = f->values.items[table].type.dims[0];
  rill_type_t scalar = {RILL_I64, 0, {0}}, it = f->values.items[ids].type, bt = it, yt = f->values.items[y].type;
  bt.dtype = RILL_BOOL;
  uint32_t r, lo, local, ge0, ltv, inr, idx, e, inr2, masked, v0, vp, z;
#define TP_VAL(var, ty) RILL_TRY(add_value(t, f, f->values.items[y].name, &(ty), &(var)))
#define TP_NODE(op, at, nat, res, ...) do { const uint32_t a_[] = {__VA_ARGS__}; \
    RILL_TRY(new_node(t, f, out, n, op, at, nat, a_, (uint32_t)(sizeof a_ / sizeof a_[0]), res)); } while (0)
  TP_VAL(r, scalar);
  RILL_TRY(new_node(t, f, out, n, "rank", NULL, 0, NULL, 0, r));
  TP_VAL(lo, scalar);
  RILL_TRY(literal(t, f, RILL_I64, (double)part, &vp));
  TP_NODE("mul", NULL, 0, lo, r, vp);
  if (idt != RILL_I64) {
    rill_type_t ct = {idt, 0, {0}};
    uint32_t lc;
    TP_VAL(lc, ct);
    isa_attr_t *ca = rill__arena_alloc(&t->c->arena, sizeof(isa_attr_t));
    int64_t *cv = rill__arena_alloc(&t->c->arena, sizeof(int64_t));
    if (!ca || !cv) return rill__oom();
    *cv = idt;
    *ca = (isa_attr_t){.name = "dtype", .kind = ISA_ATTR_DTYPE, .count = 1, .ints = cv};
    TP_NODE("cast", ca, 1, lc, lo);
    lo = lc;
  }
  TP_VAL(local, it);
  TP_NODE("sub", NULL, 0, local, ids, lo);
  RILL_TRY(literal(t, f, idt, 0, &v0));
  RILL_TRY(literal(t, f, idt, (double)part, &vp));
  TP_VAL(ge0, bt);
  TP_NODE("ge", NULL, 0, ge0, local, v0);
  TP_VAL(ltv, bt);
  TP_NODE("lt", NULL, 0, ltv, local, vp);
  TP_VAL(inr, bt);
  TP_NODE("logical_and", NULL, 0, inr, ge0, ltv);
  TP_VAL(idx, it);
  TP_NODE("where", NULL, 0, idx, inr, local, v0);
  TP_VAL(e, yt);
  TP_NODE("gather", attrs, nattrs, e, table, idx);
  rill_type_t bt2 = yt;
  bt2.dtype = RILL_BOOL;
  for (int k = 1; k < bt2.rank; k++) bt2.dims[k] = 1;
  TP_VAL(inr2, bt2);
  isa_attr_t *ua = rill__arena_alloc(&t->c->arena, sizeof(isa_attr_t));
  int64_t *uv = rill__arena_alloc(&t->c->arena, sizeof(int64_t) * (size_t)(yt.rank > 1 ? yt.rank - 1 : 1));
  if (!ua || !uv) return rill__oom();
  for (int k = 1; k < yt.rank; k++) uv[k - 1] = k;
  *ua = (isa_attr_t){.name = "axes", .kind = ISA_ATTR_INTS, .count = (uint32_t)(yt.rank - 1), .ints = uv};
  TP_NODE("unsqueeze", ua, 1, inr2, inr);
  RILL_TRY(literal(t, f, dt, 0, &z));
  TP_VAL(masked, yt);
  TP_NODE("where", NULL, 0, masked, inr2, e, z);
  isa_attr_t *sum = rill__arena_alloc(&t->c->arena, sizeof(isa_attr_t));
  if (!sum) return rill__oom();
  *sum = (isa_attr_t){.name = "op", .kind = ISA_ATTR_STRING, .count = 1, .str = "sum"};
  TP_NODE("all_reduce", sum, 1, y, masked);
#undef TP_VAL
#undef TP_NODE
  return NULL;
}

static rill_status_t rewrite(tp_t *t, tp_fn_t *F) {
  ir_func_t *f = F->f;
  asm_ctx_t *c = t->c;
  size_t nold = f->nodes.len;
  int32_t *newpos = rill__calloc(c->a, nold ? nold : 1, sizeof(int32_t));
  if (!newpos) return rill__oom();
  asm_nodes_t out = {0};
  rill_status_t st = NULL;
  size_t norig = f->values.len;
  int32_t *olddef = rill__calloc(c->a, norig ? norig : 1, sizeof(int32_t));
  if (!olddef) { rill__free(c->a, newpos); return rill__oom(); }
  for (size_t v = 0; v < norig; v++) olddef[v] = f->values.items[v].def;
  /* split values' and states' new types */
  for (size_t v = 0; v < f->values.len; v++) {
    ir_value_t *x = &f->values.items[v];
    tp_val_t s = x->kind == V_STATE ? t->state[x->konst] : F->v[v];
    if (s.st == S) x->type = part_type(&x->type, s.ax, t->N);
  }
  for (size_t i = 0; !st && i < nold; i++) {
    ir_node_t n = f->nodes.items[i];
    tp_node_t *tn = &F->n[i];
    bool touched = tn->gather || tn->role;
    for (uint32_t j = 0; j < n.nargs && j < 8; j++) touched |= tn->wshard[j] >= 0;
    for (uint32_t j = 0; j < n.nargs; j++) touched |= get(t, F, n.args[j]).st == S;
    for (uint32_t r = 0; r < n.nres; r++) touched |= F->v[n.res[r]].st == S;
    if (!touched) {
      newpos[i] = (int32_t)out.len;
      if ((st = RILL_VEC_PUSH(c->a, &out, n))) break;
      continue;
    }
    uint32_t *args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n.nargs ? n.nargs : 1));
    if (!args) { st = rill__oom(); break; }
    memcpy(args, n.args, sizeof(uint32_t) * n.nargs);
    n.args = args;
    for (uint32_t j = 0; !st && j < n.nargs; j++) {
      if (j < 64 && (tn->gather >> j & 1)) {
        tp_val_t a = get(t, F, args[j]);
        rill_type_t whole = f->values.items[args[j]].type;
        whole.dims[a.ax] *= t->N;
        uint32_t g;
        isa_attr_t *at = int_attrs(t, "axis", a.ax, "ranks", t->N);
        if (!at) { st = rill__oom(); break; }
        if (!(st = add_value(t, f, f->values.items[args[j]].name, &whole, &g))) st = new_node(t, f, &out, &n, "all_gather", at, 2, &args[j], 1, g);
        args[j] = g;
      } else if (j < 8 && tn->wshard[j] >= 0) {
        uint32_t groups = 1;
        if (tn->col && n.nres && F->v[n.res[0]].st == S) groups = t->comps.items[find(t, F->v[n.res[0]].comp)].groups;
        st = shard_value(t, f, f->values.items[args[j]].konst, tn->wshard[j], groups, &args[j]);
      }
    }
    if (st) break;
    if (n.kind != N_OP) {
      newpos[i] = (int32_t)out.len;
      st = RILL_VEC_PUSH(c->a, &out, n);
      continue;
    }
    const isa_opdecl_t *d = asm_decl(c, &n);
    const char *op = d->name;
    uint32_t nattrs = d->nattrs;
    isa_attr_t *attrs = attrs_copy(t, d);
    if (!attrs) { st = rill__oom(); break; }
    if (!strcmp(op, "reshape") && F->v[n.res[0]].st == S) {
      int b = F->v[n.res[0]].ax;
      for (uint32_t k = 0; k < nattrs; k++)
        if (!strcmp(attrs[k].name, "shape") && b < (int)attrs[k].count && attrs[k].ints[b] > 0) {
          int64_t *v = rill__arena_memdup(&c->arena, attrs[k].ints, sizeof(int64_t) * attrs[k].count);
          if (!v) { st = rill__oom(); break; }
          v[b] /= t->N;
          attrs[k].ints = v;
        }
      if (st) break;
    }
    if (!strcmp(op, "split") && get(t, F, n.args[0]).st == S) {
      const isa_attr_t *ax = asm_attr(d, "axis");
      int64_t sa = ax ? ax->ints[0] : 0;
      if (sa < 0) sa += f->values.items[n.args[0]].type.rank;
      for (uint32_t k = 0; sa == get(t, F, n.args[0]).ax && k < nattrs; k++)
        if (!strcmp(attrs[k].name, "sizes")) {
          int64_t *v = rill__arena_memdup(&c->arena, attrs[k].ints, sizeof(int64_t) * attrs[k].count);
          if (!v) { st = rill__oom(); break; }
          for (uint32_t q = 0; q < attrs[k].count; q++) v[q] /= t->N;
          attrs[k].ints = v;
        }
      if (st) break;
    }
    if (tn->role == ROLE_VOCAB) {
      if ((st = vocab_gather(t, f, &out, &n, attrs, nattrs))) break;
      newpos[i] = (int32_t)out.len - 1;
      continue;
    }
    if (tn->role == ROLE_ROW) {
      /* y := all_reduce(x W_r^T) (+ b once) */
      uint32_t y = n.res[0], bias = n.nargs == 3 ? args[2] : UINT32_MAX, yp, yr;
      const rill_type_t yt = f->values.items[y].type;
      if (n.nargs == 3) n.nargs = 2;
      uint32_t *res = rill__arena_alloc(&c->arena, sizeof(uint32_t));
      if (!res || (st = add_value(t, f, f->values.items[y].name, &yt, &yp))) { st = st ? st : rill__oom(); break; }
      res[0] = yp;
      n.res = res;
      if ((st = retype(t, f, &n, op, attrs, nattrs))) break;
      f->values.items[yp].def = (int32_t)out.len;
      if ((st = RILL_VEC_PUSH(c->a, &out, n))) break;
      if (bias != UINT32_MAX && (st = add_value(t, f, f->values.items[y].name, &yt, &yr))) break;
      isa_attr_t *sum = rill__arena_alloc(&c->arena, sizeof(isa_attr_t));
      if (!sum) { st = rill__oom(); break; }
      *sum = (isa_attr_t){.name = "op", .kind = ISA_ATTR_STRING, .count = 1, .str = "sum"};
      if ((st = new_node(t, f, &out, &n, "all_reduce", sum, 1, &yp, 1, bias != UINT32_MAX ? yr : y))) break;
      if (bias != UINT32_MAX) {
        uint32_t ab[2] = {yr, bias};
        if ((st = new_node(t, f, &out, &n, "add", NULL, 0, ab, 2, y))) break;
      }
      newpos[i] = (int32_t)out.len - 1;
      continue;
    }
    if ((st = retype(t, f, &n, op, attrs, nattrs))) break;
    newpos[i] = (int32_t)out.len;
    st = RILL_VEC_PUSH(c->a, &out, n);
  }
  /* values made here have their new positions; the others are moved */
  for (size_t v = 0; !st && v < norig; v++)
    if (olddef[v] >= 0) f->values.items[v].def = newpos[olddef[v]];
  rill__free(c->a, olddef);
  rill__free(c->a, newpos);
  if (st) { RILL_VEC_FREE(c->a, &out); return st; }
  RILL_VEC_FREE(c->a, &f->nodes);
  f->nodes.items = out.items;
  f->nodes.len = out.len;
  f->nodes.cap = out.cap;
  return NULL;
}

rill_status_t asm_shard_sums(asm_ctx_t *c, isa_const_t *k, const uint8_t *whole) {
  size_t numel, nbytes;
  rill__type_sizes(&k->type, &numel, &nbytes);
  uint64_t *sums = rill__arena_alloc(&c->arena, sizeof(uint64_t) * k->shard_parts);
  uint8_t *part = rill__alloc(c->a, nbytes ? nbytes : 1);
  if (!sums || !part) { rill__free(c->a, part); return rill__oom(); }
  for (uint32_t p = 0; p < k->shard_parts; p++) {
    isa_shard_copy(k, whole, p, part);
    sums[p] = isa_const_sum(k, part, nbytes);
  }
  rill__free(c->a, part);
  k->part_sums = sums;
  return NULL;
}

static void report(tp_t *t, uint32_t line, uint32_t col, const char *fmt, ...) RILL_PRINTF(4, 5);
static void report(tp_t *t, uint32_t line, uint32_t col, const char *fmt, ...) {
  const rill_asm_options_t *o = t->c->opts;
  if (!o || !o->note) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  tp_note_t n = {line, col, rill__arena_memdup(&t->c->arena, buf, strlen(buf) + 1)};
  if (n.text) rill_status_free(RILL_VEC_PUSH(t->c->a, &t->notes, n));
}

static int note_order(const void *a, const void *b) {
  const tp_note_t *x = a, *y = b;
  return x->line != y->line ? (x->line < y->line ? -1 : 1) : x->col < y->col ? -1 : x->col > y->col;
}

rill_status_t asm_tensor_parallel(asm_ctx_t *c, ir_func_t *funcs, const bool *built, size_t nf) {
  int N = c->opts->tensor_parallel;
  tp_t t = {.c = c, .N = N, .nf = nf};
  rill_status_t st = NULL;
  t.fns = rill__calloc(c->a, nf ? nf : 1, sizeof(tp_fn_t));
  t.state = rill__calloc(c->a, c->states.len ? c->states.len : 1, sizeof(tp_val_t));
  if (!t.fns || !t.state) st = rill__oom();
  for (size_t i = 0; !st && i < nf; i++) {
    if (!built[i]) continue;
    tp_fn_t *F = &t.fns[i];
    F->f = &funcs[i];
    F->v = rill__calloc(c->a, F->f->values.len + 1, sizeof(tp_val_t));
    F->n = rill__calloc(c->a, F->f->nodes.len + 1, sizeof(tp_node_t));
    if (!F->v || !F->n) st = rill__oom();
  }
  /* lowered functions are taken as written: analyse only the built ones */
  size_t nb = 0;
  for (size_t i = 0; i < nf; i++)
    if (built[i]) t.fns[nb++] = t.fns[i];
  t.nf = nb;
  for (int round = 0; !st && round < 64; round++) {
    if ((st = analyse(&t))) break;
    bool changed = false;
    for (size_t fi = 0; fi < t.nf; fi++) {
      tp_fn_t *F = &t.fns[fi];
      for (uint32_t i = 0; i < F->f->nodes.len; i++) {
        const ir_node_t *n = &F->f->nodes.items[i];
        if (F->n[i].role != ROLE_SEED) continue;
        const tp_comp_t *k = &t.comps.items[find(&t, F->v[n->res[0]].comp)];
        if (keep(k)) continue;
        F->n[i].off = changed = true;
        F->n[i].why = k->why ? k->why : k->row ? "its block also ends in ops that need whole values" : "its values go to other linears too";
        F->n[i].why_line = k->why_line;
        F->n[i].why_col = k->why_col;
      }
    }
    if (!changed) break;
  }
  /* notes: one a block, and the error when nothing could be split */
  int kept = 0;
  const char *why = NULL;
  uint32_t why_line = 0, why_col = 1;
  for (size_t i = 0; !st && i < t.comps.len; i++) {
    if (find(&t, (int32_t)i) != (int32_t)i) continue;
    const tp_comp_t *k = &t.comps.items[i];
    if (!k->nseeds) continue;
    kept++;
    if (k->vocab) {
      report(&t, k->line, k->col, "%s:%u:%u: note: tensor parallel: vocabulary-parallel embedding split %d ways (each rank's rows, summed by all_reduce)", c->path,
             k->line, k->col, N);
      continue;
    }
    if (k->row)
      report(&t, k->line, k->col, "%s:%u:%u: note: tensor parallel: %s block split %d ways (%u column-parallel linear%s, %u row-parallel summed by all_reduce)",
             c->path, k->line, k->col, k->attn ? "attention" : "MLP", N, k->nseeds, k->nseeds == 1 ? "" : "s", k->nrows);
    else
      report(&t, k->line, k->col, "%s:%u:%u: note: tensor parallel: vocabulary-parallel head split %d ways (its logits gathered)", c->path, k->line,
             k->col, N);
  }
  /* the blocks made replicated: the seeds turned off, with the reason of their last round */
  for (size_t fi = 0; !st && fi < t.nf; fi++) {
    tp_fn_t *F = &t.fns[fi];
    for (uint32_t i = 0; i < F->f->nodes.len; i++)
      if (F->n[i].off) {
        const ir_node_t *n = &F->f->nodes.items[i];
        report(&t, n->line, n->col, "%s:%u:%u: note: tensor parallel: this linear stays replicated: %s (line %u)", c->path, n->line, n->col, F->n[i].why,
               F->n[i].why_line);
        if (!why) { why = F->n[i].why; why_line = F->n[i].why_line; why_col = F->n[i].why_col ? F->n[i].why_col : 1; }
      }
  }
  /* linears and embeddings whose size to split does not divide */
  const ir_node_t *nodiv = NULL;
  int64_t nodiv_size = 0;
  for (size_t fi = 0; !st && fi < t.nf; fi++) {
    tp_fn_t *F = &t.fns[fi];
    for (uint32_t i = 0; i < F->f->nodes.len; i++) {
      if (!F->n[i].nodiv) continue;
      const ir_node_t *n = &F->f->nodes.items[i];
      bool emb = asm_is_op(c, n, "gather");
      const ir_value_t *w = &F->f->values.items[n->args[emb ? 0 : 1]];
      report(&t, n->line, n->col, "%s:%u:%u: note: tensor parallel: this %s stays whole: its %s, %lld (%s of %%%s), %s not divide by %d", c->path, n->line, n->col,
             emb ? "embedding" : asm_decl(c, n)->name, emb ? "vocabulary" : "output features", (long long)F->n[i].nodiv, emb || asm_is_op(c, n, "linear") ? "rows" : "columns",
             w->name ? w->name : "?", emb ? "does" : "do", N);
      if (!nodiv) nodiv = n, nodiv_size = F->n[i].nodiv;
    }
  }
  if (!st && !kept && !why && nodiv)
    st = asm_error(c, nodiv->line, nodiv->col, "--tensor-parallel=%d: nothing in the program can be split %d ways (the %s of this %s, %lld, %s not divide by %d; heads or sizes must divide by %d)",
                   N, N, asm_is_op(c, nodiv, "gather") ? "vocabulary" : "output features", asm_is_op(c, nodiv, "gather") ? "embedding" : asm_decl(c, nodiv)->name,
                   (long long)nodiv_size, asm_is_op(c, nodiv, "gather") ? "does" : "do", N, N);
  if (!st && !kept) {
    st = why ? asm_error(c, why_line, why_col, "--tensor-parallel=%d: nothing in the program can be split %d ways (%s; heads or sizes must divide by %d)", N, N,
                         why, N)
             : asm_error(c, 1, 1, "--tensor-parallel=%d: the program has no linear, matmul or embedding by a constant weight from a weights file to split "
                                  "(weights written inline, as an .onnx model assembled in memory has them, are not split: rill import it first)", N);
  }
  for (size_t fi = 0; !st && fi < t.nf; fi++) st = rewrite(&t, &t.fns[fi]);
  for (size_t s = 0; !st && s < c->states.len; s++)
    if (t.state[s].st == S && t.state[s].comp >= 0) c->states.items[s].type = part_type(&c->states.items[s].type, t.state[s].ax, N);
  for (size_t i = 0; i < t.nf; i++) {
    rill__free(c->a, t.fns[i].v);
    rill__free(c->a, t.fns[i].n);
  }
  if (t.notes.len) qsort(t.notes.items, t.notes.len, sizeof(tp_note_t), note_order);
  for (size_t i = 0; i < t.notes.len; i++) c->opts->note(c->opts->note_user, t.notes.items[i].text);
  RILL_VEC_FREE(c->a, &t.notes);
  RILL_VEC_FREE(c->a, &t.comps);
  rill__free(c->a, t.fns);
  rill__free(c->a, t.state);
  return st;
}
