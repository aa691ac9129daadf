/* data_parallel.c: --data-parallel=N, the rank form (docs/tensor_parallel.md).
 *
 * Every rank of a job of N runs the same module on the same arguments;
 * each function takes its rank's rows of the batch (axis 0 of each
 * parameter whose first size divides by N, or, where none does, of each
 * whose first size is the first symbolic one), computes on them, and
 * gathers each result that has those rows along their axis, so every rank
 * returns the results of the whole batch (the two ways to deal the rows,
 * below at "the split"). Which axis of a result holds the rows is found
 * per op through the registry's row rule (ops_rows, the rule graph mode's
 * padding uses): an op that mixes the rows (a reduction over them, a
 * product contracting them, a reshape that regroups them) is an error at
 * its position; a call, if, while or return takes whole values (gathered
 * first).
 *
 * States: a state without an initial value whose first size is the batch
 * of a function that splits (a KV cache [B, ...]) is split like the batch
 * (each rank holds its rows: the state's type becomes the part's), and
 * every function that touches it must split the same batch; an update of
 * it takes this rank's rows of a whole operand. Any other state every rank
 * holds whole, and an update of it from values that hold the ranks' rows
 * (which would differ between ranks) is an error naming the state, at the
 * update. A function that schedules its own streams stays whole, a note
 * saying why; when no function splits, the first reason is the error, at
 * its position.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

void asm_note(asm_ctx_t *c, const char *fmt, ...) {
  if (!c->opts->note) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  c->opts->note(c->opts->note_user, buf);
}

isa_attr_t *asm_one_attr(asm_ctx_t *c, const char *name, isa_attr_kind_t kind, int64_t v, const char *str) {
  isa_attr_t *a = rill__arena_alloc(&c->arena, sizeof(isa_attr_t));
  int64_t *x = rill__arena_alloc(&c->arena, sizeof(int64_t));
  if (!a || !x) return NULL;
  *x = v;
  *a = (isa_attr_t){.name = name, .kind = kind, .count = 1, .ints = x, .str = str};
  return a;
}

int asm_rows_axis(asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n, const int8_t *ax, int64_t rows) {
  (void)f;
  const isa_opdecl_t *d = asm_decl(c, n);
  const ops_def_t *def = ops_find(d->name);
  if (!def || n->nargs > 16 || n->nres > 16) return -1;
  rill_type_t out[16];
  uint32_t nout;
  ops_params_t p;
  rill_status_t st = ops_infer_sym(def, &c->syms, d->in, d->nin, d->attrs, d->nattrs, out, 16, &nout, &p);
  if (st) { rill_status_free(st); return -1; }
  int in_axis[16], out_axis[16];
  for (uint32_t j = 0; j < n->nargs; j++) in_axis[j] = ax[n->args[j]];
  for (int b = 0; b < (int)d->out[0].rank; b++) {
    bool any = false;
    for (uint32_t j = 0; j < n->nres; j++) {
      out_axis[j] = b < d->out[j].rank && d->out[j].dims[b] == rows ? b : -1;
      any |= out_axis[j] >= 0;
    }
    if (any && ops_rows(def, &p, d, in_axis, out_axis)) return b;
  }
  return -1;
}

rill_status_t asm_retype_rows(asm_ctx_t *c, ir_func_t *f, ir_node_t *n, int b, int64_t rows, int64_t part) {
  const isa_opdecl_t *d = asm_decl(c, n);
  const char *op = d->name;
  uint32_t na = d->nattrs;
  isa_attr_t *attrs = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * (na + 1));
  if (!attrs) return rill__oom();
  if (na) memcpy(attrs, d->attrs, sizeof(isa_attr_t) * na);
  /* a size attribute that names the rows (reshape's and broadcast_to's shape) takes the part's */
  for (uint32_t k = 0; b >= 0 && part != rows && k < na; k++)
    if (!strcmp(attrs[k].name, "shape") && b < (int)attrs[k].count && attrs[k].ints[b] == rows) {
      int64_t *v = rill__arena_memdup(&c->arena, attrs[k].ints, sizeof(int64_t) * attrs[k].count);
      if (!v) return rill__oom();
      v[b] = part;
      attrs[k].ints = v;
    }
  return asm_retype(c, f, n, op, attrs, na);
}

/* ---- the split ----
 *
 * A batch of B rows over N ranks. When B is a number that divides by N,
 * rank r takes the block [r B/N, (r+1) B/N), and all_gather in rank order
 * gives the rows back in order. Otherwise (a symbolic B: the ranks' shares,
 * ceil(B/N) or floor(B/N) rows, are known at run time only, and all_gather
 * joins equal parts) every rank takes P = ceil(B/N) rows, dealt round
 * robin: the batch padded with zero rows to N*P, viewed as [P, N, ...],
 * rank r takes column r (rows r, r+N, r+2N, ...: ranks r < B mod N hold
 * ceil(B/N) rows of the batch, the others floor(B/N) and one zero row; a
 * batch smaller than N leaves N-B ranks a zero row only). Gathering undoes
 * it: all_gather's [N, P, ...] transposed to [P, N, ...], its N*P rows
 * cropped to B. A row is computed by the same ops on every rank as in the
 * unsplit run, so the results are equal bit for bit; the zero rows are
 * computed and dropped (an op whose rows are independent cannot let them
 * reach another row). */

typedef struct dp {
  asm_ctx_t *c;
  int N;
  uint8_t *ssplit;     /* per module state: 1 split like the batch (axis 0) */
  int64_t *batch;      /* per function: its batch (the rows it splits), 0 none */
  bool *dealt;         /* per function: its batch does not divide by N, or is symbolic: dealt round robin */
} dp_t;

static bool even(int64_t rows, int N) { return !isa_dim_is_sym(rows) && rows % N == 0; }

/* One rank's part of a batch of `rows`. */
static rill_status_t part_of(asm_ctx_t *c, int64_t rows, int N, int64_t *out) {
  if (even(rows, N)) { *out = rows / N; return NULL; }
  int64_t t;
  RILL_TRY(isa_sym_add(&c->syms, rows, N - 1, &t));
  return isa_sym_floordiv(&c->syms, t, N, out);
}

static isa_attr_t *ints_attr(asm_ctx_t *c, const char *name, const int64_t *v, uint32_t n) {
  isa_attr_t *a = rill__arena_alloc(&c->arena, sizeof(isa_attr_t));
  int64_t *x = rill__arena_alloc(&c->arena, sizeof(int64_t) * (n ? n : 1));
  if (!a || !x) return NULL;
  if (n) memcpy(x, v, sizeof(int64_t) * n);
  *a = (isa_attr_t){.name = name, .kind = ISA_ATTR_INTS, .count = n, .ints = x};
  return a;
}

/* *out := op(x) {name=v} with one integer-list attribute, named after x, typed by inference. */
static rill_status_t op1(asm_ctx_t *c, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, const char *op, const char *name, const int64_t *v,
                         uint32_t n, uint32_t x, const char *vname, uint32_t *res) {
  isa_attr_t *a = name ? ints_attr(c, name, v, n) : NULL;
  if (name && !a) return rill__oom();
  rill_type_t any = f->values.items[x].type;
  RILL_TRY(asm_add_result(c, f, vname, &any, res));
  return asm_new_op(c, f, out, at, op, a, a ? 1 : 0, &x, 1, *res);
}

/* The prologue's values that the cut of a value needs: rank(), and [rank()] for the second rule. */
typedef struct dp_rank {
  uint32_t rank, rank1;
  bool have1;
} dp_rank_t;

/* *xs := this rank's rows (axis 0, `rows` of them) of whole value v. */
static rill_status_t take_rows(dp_t *g, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, dp_rank_t *rk, uint32_t v, int64_t rows, uint32_t *xs) {
  asm_ctx_t *c = g->c;
  int N = g->N;
  const char *name = f->values.items[v].name;
  rill_type_t t = f->values.items[v].type, scalar = {RILL_I64, 0, {0}};
  int64_t part;
  RILL_TRY(part_of(c, rows, N, &part));
  if (even(rows, N)) {
    rill_type_t it = {RILL_I64, 1, {part}}, pt = t;
    pt.dims[0] = part;
    int64_t *iota = rill__arena_alloc(&c->arena, sizeof(int64_t) * (size_t)part);
    uint32_t kk, iv, pv, base, idx;
    if (!iota) return rill__oom();
    for (int64_t k = 0; k < part; k++) iota[k] = k;
    RILL_TRY(asm_new_const(c, f, &it, (uint8_t *)iota, false, &kk, &iv));
    RILL_TRY(asm_literal_value(c, f, RILL_I64, (double)part, &pv));
    RILL_TRY(asm_add_result(c, f, "base", &scalar, &base));
    uint32_t a1[2] = {rk->rank, pv};
    RILL_TRY(asm_new_op(c, f, out, at, "mul", NULL, 0, a1, 2, base));
    RILL_TRY(asm_add_result(c, f, "rows", &it, &idx));
    uint32_t a2[2] = {base, iv};
    RILL_TRY(asm_new_op(c, f, out, at, "add", NULL, 0, a2, 2, idx));
    isa_attr_t *ga = asm_one_attr(c, "axis", ISA_ATTR_INT, 0, NULL);
    if (!ga) return rill__oom();
    RILL_TRY(asm_add_result(c, f, name, &pt, xs));
    uint32_t a3[2] = {v, idx};
    return asm_new_op(c, f, out, at, "gather", ga, 1, a3, 2, *xs);
  }
  if (t.rank + 1 > RILL_MAX_RANK)
    return asm_error(c, at->line, at->col, "--data-parallel=%d: %%%s has %d dimensions; dealing its rows out takes one more, and %d is the most", N, name ? name : "?",
                     t.rank, RILL_MAX_RANK);
  if (!rk->have1) {
    int64_t one = 1;
    RILL_TRY(op1(c, f, out, at, "reshape", "shape", &one, 1, rk->rank, "rank", &rk->rank1));
    rk->have1 = true;
  }
  int64_t np, padn, pads[2 * RILL_MAX_RANK] = {0}, shape[RILL_MAX_RANK];
  RILL_TRY(isa_sym_mul(&c->syms, part, N, &np));
  RILL_TRY(isa_sym_sub(&c->syms, np, rows, &padn));
  pads[t.rank] = padn;
  uint32_t xp, x3, xg;
  RILL_TRY(op1(c, f, out, at, "pad", "pads", pads, 2 * (uint32_t)t.rank, v, name, &xp));
  shape[0] = part, shape[1] = N;
  for (int d = 1; d < t.rank; d++) shape[d + 1] = t.dims[d];
  RILL_TRY(op1(c, f, out, at, "reshape", "shape", shape, (uint32_t)t.rank + 1, xp, name, &x3));
  isa_attr_t *ga = asm_one_attr(c, "axis", ISA_ATTR_INT, 1, NULL);
  if (!ga) return rill__oom();
  rill_type_t any = t;
  RILL_TRY(asm_add_result(c, f, name, &any, &xg));
  uint32_t a[2] = {x3, rk->rank1};
  RILL_TRY(asm_new_op(c, f, out, at, "gather", ga, 1, a, 2, xg));
  shape[1] = part;
  return op1(c, f, out, at, "reshape", "shape", shape + 1, (uint32_t)t.rank, xg, name, xs);
}

/* *res := the whole batch of part value p (rows on axis b; `whole` its unsplit type), in order on every rank. */
static rill_status_t join_rows(dp_t *g, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, uint32_t p, const rill_type_t *whole, int b, int64_t rows,
                               uint32_t *res) {
  asm_ctx_t *c = g->c;
  int N = g->N;
  const char *name = f->values.items[p].name;
  isa_attr_t *ga = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * 2);
  int64_t *gv = rill__arena_alloc(&c->arena, sizeof(int64_t) * 2);
  if (!ga || !gv) return rill__oom();
  gv[0] = b;
  gv[1] = N;
  ga[0] = (isa_attr_t){.name = "axis", .kind = ISA_ATTR_INT, .count = 1, .ints = &gv[0]};
  ga[1] = (isa_attr_t){.name = "ranks", .kind = ISA_ATTR_INT, .count = 1, .ints = &gv[1]};
  rill_type_t t = *whole;
  if (even(rows, N)) {
    RILL_TRY(asm_add_result(c, f, name, &t, res));
    return asm_new_op(c, f, out, at, "all_gather", ga, 2, &p, 1, *res);
  }
  if (t.rank + 1 > RILL_MAX_RANK)
    return asm_error(c, at->line, at->col, "--data-parallel=%d: %%%s has %d dimensions; gathering its rows dealt out takes one more, and %d is the most", N,
                     name ? name : "?", t.rank, RILL_MAX_RANK);
  int64_t part, np;
  RILL_TRY(part_of(c, rows, N, &part));
  RILL_TRY(isa_sym_mul(&c->syms, part, N, &np));
  uint32_t g1, g2, g3, g4;
  RILL_TRY(asm_add_result(c, f, name, &t, &g1));
  RILL_TRY(asm_new_op(c, f, out, at, "all_gather", ga, 2, &p, 1, g1));
  int64_t shape[RILL_MAX_RANK], perm[RILL_MAX_RANK], pads[2 * RILL_MAX_RANK] = {0};
  for (int d = 0, k = 0; d < t.rank; d++) {
    if (d == b) shape[k++] = N, shape[k++] = part;
    else shape[k++] = t.dims[d];
  }
  RILL_TRY(op1(c, f, out, at, "reshape", "shape", shape, (uint32_t)t.rank + 1, g1, name, &g2));
  for (int d = 0; d <= t.rank; d++) perm[d] = d == b ? b + 1 : d == b + 1 ? b : d;
  RILL_TRY(op1(c, f, out, at, "transpose", "perm", perm, (uint32_t)t.rank + 1, g2, name, &g3));
  for (int d = 0; d < t.rank; d++) shape[d] = d == b ? np : t.dims[d];
  RILL_TRY(op1(c, f, out, at, "reshape", "shape", shape, (uint32_t)t.rank, g3, name, &g4));
  RILL_TRY(isa_sym_sub(&c->syms, rows, np, &pads[t.rank + b]));
  return op1(c, f, out, at, "pad", "pads", pads, 2 * (uint32_t)t.rank, g4, name, res);
}

/* Why a function stays whole, where, for the error when none splits. */
typedef struct dp_why {
  char text[600];
  uint32_t line, col;
} dp_why_t;

static void whole(asm_ctx_t *c, dp_why_t *w, uint32_t line, uint32_t col, const char *fn, const char *why) {
  asm_note(c, "%s:%u:%u: note: data parallel: @%s stays whole (%s)", c->path, line, col, fn, why);
  if (!w->line) snprintf(w->text, sizeof w->text, "@%s: %s", fn, why), w->line = line, w->col = col;
}

/* Whether parameter i of f is one that f splits (its first size the batch). */
static bool splits_param(const dp_t *g, size_t fi, const ir_func_t *f, uint32_t i) {
  const rill_type_t *t = &f->values.items[i].type;
  if (!g->batch[fi] || t->rank < 1) return false;
  if (g->dealt[fi]) return t->dims[0] == g->batch[fi];
  return !isa_dim_is_sym(t->dims[0]) && t->dims[0] > 0 && t->dims[0] % g->N == 0;
}

/* Function fi's batch (0: none, stays whole): the first size of its first parameter that has an axis
 * (as pipeline parallel's micro-batches take it). A number that divides by N is cut in blocks, in every
 * parameter whose first size divides by N; any other size (a symbolic one, or a number N does not divide)
 * is dealt round robin, in the parameters whose first size is that one. */
static void find_batch(dp_t *g, size_t fi, const ir_func_t *f) {
  g->batch[fi] = 0;
  g->dealt[fi] = false;
  if (f->hand_scheduled) return;
  for (uint32_t i = 0; i < f->nparams && !g->batch[fi]; i++) {
    const rill_type_t *t = &f->values.items[i].type;
    if (t->rank < 1 || !(isa_dim_is_sym(t->dims[0]) || t->dims[0] > 0)) continue;
    g->batch[fi] = t->dims[0];
    g->dealt[fi] = !even(t->dims[0], g->N);
  }
}

static bool is_update(asm_ctx_t *c, const ir_node_t *n) { return n->kind == N_OP && asm_is_op(c, n, "update"); }

static rill_status_t split_function(dp_t *g, size_t fi, ir_func_t *f, bool *out_split, dp_why_t *w) {
  asm_ctx_t *c = g->c;
  int N = g->N;
  const func_decl_t *fd = &c->funcs.items[f->index];
  *out_split = false;
  if (f->hand_scheduled) {
    whole(c, w, fd->line, fd->col, fd->name, "it schedules its own streams");
    return NULL;
  }
  size_t norig = f->values.len, nold = f->nodes.len;
  int8_t *ax = rill__alloc(c->a, norig ? norig : 1);
  int64_t *rows = rill__calloc(c->a, norig ? norig : 1, sizeof(int64_t));
  uint64_t *gather = rill__calloc(c->a, nold ? nold : 1, sizeof(uint64_t)), *cut = rill__calloc(c->a, nold ? nold : 1, sizeof(uint64_t));
  int32_t *newpos = rill__calloc(c->a, nold ? nold : 1, sizeof(int32_t)), *olddef = rill__calloc(c->a, norig ? norig : 1, sizeof(int32_t));
  uint32_t *sub = rill__calloc(c->a, norig ? norig : 1, sizeof(uint32_t));
  rill_type_t *otype = rill__calloc(c->a, norig ? norig : 1, sizeof(rill_type_t));
  asm_nodes_t out = {0};
  rill_status_t st = ax && rows && gather && cut && newpos && olddef && sub && otype ? NULL : rill__oom();
  if (st) goto done;
  memset(ax, -1, norig);
  uint32_t nsplit = 0;
  for (uint32_t i = 0; i < f->nparams; i++)
    if (splits_param(g, fi, f, i)) ax[i] = 0, rows[i] = f->values.items[i].type.dims[0], nsplit++;
  if (!nsplit) {
    whole(c, w, fd->line, fd->col, fd->name, "no parameter has a batch axis (axis 0)");
    goto done;
  }
  /* a state split like the batch holds its rows on axis 0 */
  for (size_t v = 0; v < norig; v++) {
    const ir_value_t *x = &f->values.items[v];
    if (x->kind == V_STATE && g->ssplit[x->konst]) ax[v] = 0, rows[v] = x->type.dims[0];
  }
  /* which axis of each value holds the rows */
  for (size_t i = 0; !st && i < nold; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    int64_t r = 0;
    for (uint32_t j = 0; j < n->nargs; j++)
      if (ax[n->args[j]] >= 0) r = rows[n->args[j]];
    if (is_update(c, n)) {
      /* update(%state, %x, %pos): a split state takes this rank's rows of x
       * (and of a per-row pos); a state every rank holds whole must be
       * written alike on every rank, so from whole values only */
      uint32_t sv = n->args[0];
      const ir_value_t *s = &f->values.items[sv];
      const isa_state_t *xs = &c->states.items[s->konst];
      char tb[96];
      isa_sym_format_type(&c->syms, &xs->type, tb, sizeof tb);
      if (!g->ssplit[s->konst]) {
        for (uint32_t j = 1; j < 3 && !st; j++)
          if (ax[n->args[j]] >= 0)
            st = asm_error(c, n->line, n->col,
                           "--data-parallel=%d: this update writes %%%s, which holds each rank's part of the batch's rows, into state %%%s (%s), which "
                           "every rank holds whole (%s): the ranks' copies would differ; write it from values every rank has whole, or give the state the "
                           "batch as its first size",
                           N, f->values.items[n->args[j]].name ? f->values.items[n->args[j]].name : "?", xs->name, tb,
                           xs->init != ISA_NONE ? "it has an initial value" : "its first size is not the batch of a function that splits");
        continue;
      }
      const isa_opdecl_t *d = asm_decl(c, n);
      int64_t uax = 0;
      for (uint32_t k = 0; k < d->nattrs; k++)
        if (!strcmp(d->attrs[k].name, "axis")) uax = d->attrs[k].ints[0];
      if (uax < 0) uax += xs->type.rank;
      r = rows[sv];
      if (uax == 0) {
        st = asm_error(c, n->line, n->col, "--data-parallel=%d: this update writes state %%%s (%s) along axis 0, the batch's rows, which each rank holds a part of",
                       N, xs->name, tb);
        break;
      }
      for (uint32_t j = 1; j < 3 && !st; j++) {
        uint32_t a = n->args[j];
        const rill_type_t *at = &f->values.items[a].type;
        if (ax[a] >= 0 && (ax[a] != 0 || rows[a] != r))
          st = asm_error(c, n->line, n->col, "--data-parallel=%d: this update of state %%%s (%s) writes %%%s, whose rows of the batch are not on its axis 0", N,
                         xs->name, tb, f->values.items[a].name ? f->values.items[a].name : "?");
        else if (ax[a] < 0 && at->rank >= 1 && at->dims[0] == r)
          cut[i] |= 1ull << j; /* a whole value: this rank's rows of it */
      }
      continue; /* (the state's next version, whose node this is, holds its rows like every version) */
    }
    if (!r) continue;
    if (n->kind != N_OP) {
      for (uint32_t j = 0; j < n->nargs && j < 64; j++)
        if (ax[n->args[j]] >= 0) gather[i] |= 1ull << j;
      continue;
    }
    for (uint32_t j = 0; j < n->nargs; j++)
      if (ax[n->args[j]] >= 0 && rows[n->args[j]] != r) {
        char b1[48], b2[48];
        st = asm_error(c, n->line, n->col, "--data-parallel=%d: %s takes batches of %s and %s rows", N, asm_decl(c, n)->name,
                       isa_sym_format(&c->syms, r, b1, sizeof b1), isa_sym_format(&c->syms, rows[n->args[j]], b2, sizeof b2));
      }
    if (st) break;
    int b = asm_rows_axis(c, f, n, ax, r);
    if (b < 0) {
      char b1[48];
      st = asm_error(c, n->line, n->col, "--data-parallel=%d: %s mixes the rows of the batch (%s rows), which each rank holds a part of", N,
                     asm_decl(c, n)->name, isa_sym_format(&c->syms, r, b1, sizeof b1));
      break;
    }
    for (uint32_t j = 0; j < n->nres; j++)
      if (b < f->values.items[n->res[j]].type.rank && f->values.items[n->res[j]].type.dims[b] == r) ax[n->res[j]] = (int8_t)b, rows[n->res[j]] = r;
  }
  if (st) goto done;
  for (size_t v = 0; v < norig; v++) olddef[v] = f->values.items[v].def, sub[v] = (uint32_t)v, otype[v] = f->values.items[v].type;
  /* a split state's versions take the part's type (their nodes keep them) */
  for (size_t v = 0; !st && v < norig; v++) {
    ir_value_t *x = &f->values.items[v];
    if (x->kind == V_STATE && g->ssplit[x->konst]) st = part_of(c, x->type.dims[0], N, &x->type.dims[0]);
  }
  if (st) goto done;
  /* the prologue: each split parameter's rows of this rank */
  const ir_node_t *first = nold ? &f->nodes.items[0] : NULL;
  ir_node_t at = {.kind = N_OP, .line = fd->line, .col = fd->col, .stream = first ? first->stream : 0};
  rill_type_t scalar = {RILL_I64, 0, {0}};
  dp_rank_t rk = {0};
  if ((st = asm_add_result(c, f, "rank", &scalar, &rk.rank)) || (st = asm_new_op(c, f, &out, &at, "rank", NULL, 0, NULL, 0, rk.rank))) goto done;
  for (uint32_t i = 0; !st && i < f->nparams; i++)
    if (ax[i] >= 0) st = take_rows(g, f, &out, &at, &rk, i, rows[i], &sub[i]);
  for (size_t i = 0; !st && i < nold; i++) {
    ir_node_t n = f->nodes.items[i];
    bool touched = gather[i] != 0 || cut[i] != 0;
    for (uint32_t j = 0; j < n.nargs; j++) touched |= ax[n.args[j]] >= 0;
    if (!touched) {
      newpos[i] = (int32_t)out.len;
      st = RILL_VEC_PUSH(c->a, &out, n);
      continue;
    }
    uint32_t *args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n.nargs ? n.nargs : 1));
    if (!args) { st = rill__oom(); break; }
    for (uint32_t j = 0; j < n.nargs; j++) args[j] = sub[n.args[j]];
    for (uint32_t j = 0; !st && j < n.nargs && j < 64; j++) {
      uint32_t v = n.args[j];
      if (gather[i] >> j & 1) st = join_rows(g, f, &out, &n, args[j], &otype[v], ax[v], rows[v], &args[j]);
      else if (cut[i] >> j & 1) st = take_rows(g, f, &out, &n, &rk, args[j], rows[n.args[0]], &args[j]);
    }
    if (st) break;
    n.args = args;
    if (n.kind == N_OP) {
      int b = -1;
      for (uint32_t r = 0; r < n.nres; r++)
        if (ax[n.res[r]] >= 0) b = ax[n.res[r]];
      int64_t part = 0, r0 = n.nres ? rows[n.res[0]] : 0;
      if (b >= 0 && (st = part_of(c, r0, N, &part))) break;
      st = asm_retype_rows(c, f, &n, b, r0, b >= 0 ? part : r0);
    }
    newpos[i] = (int32_t)out.len;
    if (!st) st = RILL_VEC_PUSH(c->a, &out, n);
  }
  for (size_t v = 0; !st && v < norig; v++)
    if (olddef[v] >= 0) f->values.items[v].def = newpos[olddef[v]];
  if (!st) {
    RILL_VEC_FREE(c->a, &f->nodes);
    f->nodes.items = out.items;
    f->nodes.len = out.len;
    f->nodes.cap = out.cap;
    out = (asm_nodes_t){0};
    *out_split = true;
    char b1[48];
    int64_t B = g->batch[fi];
    isa_sym_format(&c->syms, B, b1, sizeof b1);
    if (g->dealt[fi] && isa_dim_is_sym(B))
      asm_note(c, "%s:%u:%u: note: data parallel: @%s split %d ways (the batch, %s rows, dealt round robin: each rank takes ceil(%s/%d) or floor(%s/%d) of them, "
                  "padded with a zero row to ceil(%s/%d); results gathered)",
               c->path, fd->line, fd->col, fd->name, N, b1, b1, N, b1, N, b1, N);
    else if (g->dealt[fi]) {
      long long m = B % N, q = B / N;
      char who[64], part[64];
      if (m == 1) snprintf(who, sizeof who, "rank 0 takes");
      else snprintf(who, sizeof who, "ranks 0..%lld take", m - 1);
      if (q) snprintf(part, sizeof part, "the others %lld", q);
      else snprintf(part, sizeof part, "the others none (a zero row only)");
      asm_note(c, "%s:%u:%u: note: data parallel: @%s split %d ways (the batch, %lld rows, does not divide by %d: dealt round robin, %s %lld row%s, %s, "
                  "every rank computing %lld (the short ones a zero row more); results gathered)",
               c->path, fd->line, fd->col, fd->name, N, (long long)B, N, who, q + 1, q + 1 == 1 ? "" : "s", part, (q + (m > 0)));
    }
    else
      asm_note(c, "%s:%u:%u: note: data parallel: @%s split %d ways (each rank takes its rows of the batch; results gathered)", c->path, fd->line, fd->col,
               fd->name, N);
  }
done:
  RILL_VEC_FREE(c->a, &out);
  rill__free(c->a, ax);
  rill__free(c->a, rows);
  rill__free(c->a, gather);
  rill__free(c->a, cut);
  rill__free(c->a, newpos);
  rill__free(c->a, olddef);
  rill__free(c->a, sub);
  rill__free(c->a, otype);
  return st;
}

/* Which states are split like the batch: a state without an initial value
 * whose first size is the batch of a function that splits and touches it;
 * then every function that touches it must split that batch too. */
static rill_status_t states_split(dp_t *g, ir_func_t *funcs, const bool *built, size_t nf) {
  asm_ctx_t *c = g->c;
  int32_t *from = rill__alloc(c->a, sizeof(int32_t) * (c->states.len ? c->states.len : 1));
  if (!from) return rill__oom();
  for (size_t s = 0; s < c->states.len; s++) from[s] = -1;
  for (size_t i = 0; i < nf; i++) {
    if (!built[i] || !g->batch[i] || isa_dim_is_sym(g->batch[i])) continue;
    for (size_t v = 0; v < funcs[i].values.len; v++) {
      const ir_value_t *x = &funcs[i].values.items[v];
      if (x->kind != V_STATE || g->ssplit[x->konst]) continue;
      const isa_state_t *s = &c->states.items[x->konst];
      if (s->init == ISA_NONE && s->type.rank >= 1 && s->type.dims[0] == g->batch[i]) g->ssplit[x->konst] = 1, from[x->konst] = (int32_t)i;
    }
  }
  rill_status_t st = NULL;
  uint8_t *told = rill__calloc(c->a, c->states.len ? c->states.len : 1, 1);
  if (!told) st = rill__oom();
  for (size_t i = 0; !st && i < nf; i++) {
    if (!built[i] || !g->batch[i]) continue;
    const func_decl_t *fd = &c->funcs.items[funcs[i].index];
    for (size_t v = 0; v < funcs[i].values.len; v++) {
      const ir_value_t *x = &funcs[i].values.items[v];
      if (x->kind != V_STATE || told[x->konst]) continue;
      told[x->konst] = 1;
      const isa_state_t *s = &c->states.items[x->konst];
      char tb[96], b1[48];
      isa_sym_format_type(&c->syms, &s->type, tb, sizeof tb);
      if (g->ssplit[x->konst])
        asm_note(c, "%s:%u:%u: note: data parallel: state %%%s (%s) split like the batch of @%s (each rank holds its %lld rows)", c->path, fd->line, fd->col, s->name,
                 tb, fd->name, (long long)(s->type.dims[0] / g->N));
      else
        asm_note(c, "%s:%u:%u: note: data parallel: state %%%s (%s) stays whole on every rank (%s %s), written alike from whole values", c->path, fd->line, fd->col,
                 s->name, tb, s->init != ISA_NONE ? "it has an initial value; the batch is" : "its first size is not the batch,",
                 isa_sym_format(&c->syms, g->batch[i], b1, sizeof b1));
    }
  }
  rill__free(c->a, told);
  for (size_t i = 0; !st && i < nf; i++) {
    if (!built[i]) continue;
    const func_decl_t *fd = &c->funcs.items[funcs[i].index];
    for (size_t v = 0; !st && v < funcs[i].values.len; v++) {
      const ir_value_t *x = &funcs[i].values.items[v];
      if (x->kind != V_STATE || !g->ssplit[x->konst]) continue;
      const isa_state_t *s = &c->states.items[x->konst];
      if (g->batch[i] == s->type.dims[0]) continue;
      char tb[96], why[160];
      const func_decl_t *fo = &c->funcs.items[funcs[from[x->konst]].index];
      if (funcs[i].hand_scheduled) snprintf(why, sizeof why, "schedules its own streams");
      else if (isa_dim_is_sym(g->batch[i])) snprintf(why, sizeof why, "has a symbolic batch");
      else snprintf(why, sizeof why, "has no parameter with a batch of %lld rows", (long long)s->type.dims[0]);
      st = asm_error(c, x->line ? x->line : fd->line, x->line ? x->col : fd->col,
                     "--data-parallel=%d: state %%%s (%s) is split like the batch (its first size is the batch of @%s), and @%s, which reads or updates "
                     "it, %s: every function that touches a split state must split the same batch",
                     g->N, s->name, isa_sym_format_type(&c->syms, &s->type, tb, sizeof tb), fo->name, fd->name, why);
    }
  }
  rill__free(c->a, from);
  return st;
}

rill_status_t asm_data_parallel(asm_ctx_t *c, ir_func_t *funcs, const bool *built, size_t nf) {
  int N = c->opts->data_parallel, n = 0;
  dp_why_t w = {.line = 0};
  dp_t g = {.c = c, .N = N};
  g.ssplit = rill__calloc(c->a, c->states.len ? c->states.len : 1, 1);
  g.batch = rill__calloc(c->a, nf ? nf : 1, sizeof(int64_t));
  g.dealt = rill__calloc(c->a, nf ? nf : 1, sizeof(bool));
  rill_status_t st = g.ssplit && g.batch && g.dealt ? NULL : rill__oom();
  for (size_t i = 0; !st && i < nf; i++)
    if (built[i]) find_batch(&g, i, &funcs[i]);
  if (!st) st = states_split(&g, funcs, built, nf);
  for (size_t i = 0; !st && i < nf; i++) {
    if (!built[i]) continue;
    bool split;
    st = split_function(&g, i, &funcs[i], &split, &w);
    n += split;
  }
  /* a split state's module type: one rank's part */
  for (size_t s = 0; !st && s < c->states.len; s++)
    if (g.ssplit[s]) st = part_of(c, c->states.items[s].type.dims[0], N, &c->states.items[s].type.dims[0]);
  if (!st && !n)
    st = asm_error(c, w.line ? w.line : 1, w.line ? w.col : 1, "--data-parallel=%d: no function can be split (a parameter whose first size, the batch, divides by %d, or is symbolic)%s%s",
                   N, N, w.line ? ": " : "", w.line ? w.text : "");
  rill__free(c->a, g.ssplit);
  rill__free(c->a, g.batch);
  rill__free(c->a, g.dealt);
  return st;
}
