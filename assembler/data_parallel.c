/* data_parallel.c: --data-parallel=N, the rank form (docs/tensor_parallel.md).
 *
 * Every rank of a job of N runs the same module on the same arguments;
 * each function takes its rank's rows of the batch (axis 0 of each
 * parameter whose first size divides by N: rows [r B/N, (r+1) B/N), picked
 * with a gather whose index is made from rank()), computes on them, and
 * gathers each result that has those rows along their axis (all_gather,
 * in rank order), so every rank returns the results of the whole batch.
 * Which axis of a result holds the rows is found per op through the
 * registry's row rule (ops_rows, the rule graph mode's padding uses): an
 * op that mixes the rows (a reduction over them, a product contracting
 * them, a reshape that regroups them) is an error at its position; a
 * call, if, while or return takes whole values (gathered first). A
 * function that reads or updates states, schedules its own streams, or
 * whose batch is symbolic (the ranks' parts would be ceil or floor of B/N,
 * sizes known at run time only that all_gather cannot join) stays whole,
 * a note saying why; when no function splits, the first reason is the
 * error, at its position.
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

rill_status_t asm_retype_rows(asm_ctx_t *c, ir_func_t *f, ir_node_t *n, int b, int64_t rows, int parts) {
  const isa_opdecl_t *d = asm_decl(c, n);
  const char *op = d->name;
  uint32_t na = d->nattrs;
  isa_attr_t *attrs = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * (na + 1));
  if (!attrs) return rill__oom();
  if (na) memcpy(attrs, d->attrs, sizeof(isa_attr_t) * na);
  /* a size attribute that names the rows (reshape's and broadcast_to's shape) takes the part's */
  for (uint32_t k = 0; b >= 0 && parts > 1 && k < na; k++)
    if (!strcmp(attrs[k].name, "shape") && b < (int)attrs[k].count && attrs[k].ints[b] == rows) {
      int64_t *v = rill__arena_memdup(&c->arena, attrs[k].ints, sizeof(int64_t) * attrs[k].count);
      if (!v) return rill__oom();
      v[b] /= parts;
      attrs[k].ints = v;
    }
  return asm_retype(c, f, n, op, attrs, na);
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

static rill_status_t split_function(asm_ctx_t *c, ir_func_t *f, int N, bool *out_split, dp_why_t *w) {
  const func_decl_t *fd = &c->funcs.items[f->index];
  *out_split = false;
  char why[512];
  if (f->hand_scheduled) {
    whole(c, w, fd->line, fd->col, fd->name, "it schedules its own streams");
    return NULL;
  }
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_STATE) {
      const isa_state_t *x = &c->states.items[f->values.items[v].konst];
      char tb[96];
      snprintf(why, sizeof why, "it reads or updates state %%%s (%s), which every rank holds whole: its rows of the batch would have to be "
               "split alike in every function that touches it, which data parallel does not do; --tensor-parallel splits a KV cache by heads",
               x->name, isa_sym_format_type(&c->syms, &x->type, tb, sizeof tb));
      whole(c, w, f->values.items[v].line ? f->values.items[v].line : fd->line, f->values.items[v].line ? f->values.items[v].col : fd->col, fd->name, why);
      return NULL;
    }
  size_t norig = f->values.len, nold = f->nodes.len;
  int8_t *ax = rill__alloc(c->a, norig ? norig : 1);
  int64_t *rows = rill__calloc(c->a, norig ? norig : 1, sizeof(int64_t));
  uint64_t *gather = rill__calloc(c->a, nold ? nold : 1, sizeof(uint64_t));
  int32_t *newpos = rill__calloc(c->a, nold ? nold : 1, sizeof(int32_t)), *olddef = rill__calloc(c->a, norig ? norig : 1, sizeof(int32_t));
  uint32_t *sub = rill__calloc(c->a, norig ? norig : 1, sizeof(uint32_t));
  asm_nodes_t out = {0};
  rill_status_t st = ax && rows && gather && newpos && olddef && sub ? NULL : rill__oom();
  if (st) goto done;
  memset(ax, -1, norig);
  uint32_t nsplit = 0;
  for (uint32_t i = 0; i < f->nparams; i++) {
    const rill_type_t *t = &f->values.items[i].type;
    if (t->rank >= 1 && !isa_dim_is_sym(t->dims[0]) && t->dims[0] > 0 && t->dims[0] % N == 0) ax[i] = 0, rows[i] = t->dims[0], nsplit++;
  }
  if (!nsplit) {
    /* a symbolic batch: the ranks' parts would differ in size (ceil and floor of B/N), known at run time only */
    for (uint32_t i = 0; i < f->nparams; i++) {
      const rill_type_t *t = &f->values.items[i].type;
      if (t->rank < 1 || !isa_dim_is_sym(t->dims[0])) continue;
      char dn[64];
      isa_sym_format(&c->syms, t->dims[0], dn, sizeof dn);
      snprintf(why, sizeof why, "the batch of %%%s is symbolic (%s): %d ranks would take ceil(%s/%d) or floor(%s/%d) rows, sizes that differ between "
               "ranks and are known at run time only, and all_gather joins equal parts; give the batch a size that divides by %d",
               fd->param_names[i], dn, N, dn, N, dn, N, N);
      whole(c, w, fd->param_line[i], fd->param_col[i], fd->name, why);
      goto done;
    }
    for (uint32_t i = 0; i < f->nparams; i++) {
      const rill_type_t *t = &f->values.items[i].type;
      if (t->rank < 1) continue;
      snprintf(why, sizeof why, "the batch of %%%s, %lld rows, does not divide by %d", fd->param_names[i], (long long)t->dims[0], N);
      whole(c, w, fd->param_line[i], fd->param_col[i], fd->name, why);
      goto done;
    }
    whole(c, w, fd->line, fd->col, fd->name, "no parameter has a batch axis (axis 0)");
    goto done;
  }
  /* which axis of each value holds the rows */
  for (size_t i = 0; !st && i < nold; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    int64_t r = 0;
    for (uint32_t j = 0; j < n->nargs; j++)
      if (ax[n->args[j]] >= 0) r = rows[n->args[j]];
    if (!r) continue;
    if (n->kind != N_OP) {
      for (uint32_t j = 0; j < n->nargs && j < 64; j++)
        if (ax[n->args[j]] >= 0) gather[i] |= 1ull << j;
      continue;
    }
    for (uint32_t j = 0; j < n->nargs; j++)
      if (ax[n->args[j]] >= 0 && rows[n->args[j]] != r)
        st = asm_error(c, n->line, n->col, "--data-parallel=%d: %s takes batches of %lld and %lld rows", N, asm_decl(c, n)->name, (long long)r,
                       (long long)rows[n->args[j]]);
    if (st) break;
    int b = asm_rows_axis(c, f, n, ax, r);
    if (b < 0) {
      st = asm_error(c, n->line, n->col, "--data-parallel=%d: %s mixes the rows of the batch (%lld rows), which each rank holds a part of", N,
                     asm_decl(c, n)->name, (long long)r);
      break;
    }
    for (uint32_t j = 0; j < n->nres; j++)
      if (b < f->values.items[n->res[j]].type.rank && f->values.items[n->res[j]].type.dims[b] == r) ax[n->res[j]] = (int8_t)b, rows[n->res[j]] = r;
  }
  if (st) goto done;
  for (size_t v = 0; v < norig; v++) olddef[v] = f->values.items[v].def, sub[v] = (uint32_t)v;
  /* the prologue: each split parameter's rows of this rank */
  const ir_node_t *first = nold ? &f->nodes.items[0] : NULL;
  ir_node_t at = {.kind = N_OP, .line = fd->line, .col = fd->col, .stream = first ? first->stream : 0};
  rill_type_t scalar = {RILL_I64, 0, {0}};
  uint32_t rank_v;
  if ((st = asm_add_result(c, f, "rank", &scalar, &rank_v)) || (st = asm_new_op(c, f, &out, &at, "rank", NULL, 0, NULL, 0, rank_v))) goto done;
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    if (ax[i] < 0) continue;
    int64_t part = rows[i] / N;
    rill_type_t it = {RILL_I64, 1, {part}}, pt = f->values.items[i].type;
    pt.dims[0] = part;
    int64_t *iota = rill__arena_alloc(&c->arena, sizeof(int64_t) * (size_t)part);
    uint32_t kk, iv, pv, base, idx, xs;
    if (!iota) { st = rill__oom(); break; }
    for (int64_t k = 0; k < part; k++) iota[k] = k;
    if ((st = asm_new_const(c, f, &it, (uint8_t *)iota, false, &kk, &iv)) || (st = asm_literal_value(c, f, RILL_I64, (double)part, &pv))) break;
    if ((st = asm_add_result(c, f, "base", &scalar, &base))) break;
    uint32_t a1[2] = {rank_v, pv};
    if ((st = asm_new_op(c, f, &out, &at, "mul", NULL, 0, a1, 2, base))) break;
    if ((st = asm_add_result(c, f, "rows", &it, &idx))) break;
    uint32_t a2[2] = {base, iv};
    if ((st = asm_new_op(c, f, &out, &at, "add", NULL, 0, a2, 2, idx))) break;
    isa_attr_t *g = asm_one_attr(c, "axis", ISA_ATTR_INT, 0, NULL);
    if (!g) { st = rill__oom(); break; }
    if ((st = asm_add_result(c, f, f->values.items[i].name, &pt, &xs))) break;
    uint32_t a3[2] = {i, idx};
    if ((st = asm_new_op(c, f, &out, &at, "gather", g, 1, a3, 2, xs))) break;
    sub[i] = xs;
  }
  for (size_t i = 0; !st && i < nold; i++) {
    ir_node_t n = f->nodes.items[i];
    bool touched = gather[i] != 0;
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
      if (!(gather[i] >> j & 1)) continue;
      uint32_t v = n.args[j], g;
      isa_attr_t *ga = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * 2);
      int64_t *gv = rill__arena_alloc(&c->arena, sizeof(int64_t) * 2);
      if (!ga || !gv) { st = rill__oom(); break; }
      gv[0] = ax[v];
      gv[1] = N;
      ga[0] = (isa_attr_t){.name = "axis", .kind = ISA_ATTR_INT, .count = 1, .ints = &gv[0]};
      ga[1] = (isa_attr_t){.name = "ranks", .kind = ISA_ATTR_INT, .count = 1, .ints = &gv[1]};
      rill_type_t whole = f->values.items[v].type;
      if (!(st = asm_add_result(c, f, f->values.items[v].name, &whole, &g))) st = asm_new_op(c, f, &out, &n, "all_gather", ga, 2, &args[j], 1, g);
      args[j] = g;
    }
    if (st) break;
    n.args = args;
    if (n.kind == N_OP) {
      int b = -1;
      for (uint32_t r = 0; r < n.nres; r++)
        if (ax[n.res[r]] >= 0) b = ax[n.res[r]];
      st = asm_retype_rows(c, f, &n, b, n.nres ? rows[n.res[0]] : 0, N);
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
    asm_note(c, "%s:%u:%u: note: data parallel: @%s split %d ways (each rank takes its rows of the batch; results gathered)", c->path, fd->line, fd->col,
         fd->name, N);
  }
done:
  RILL_VEC_FREE(c->a, &out);
  rill__free(c->a, ax);
  rill__free(c->a, rows);
  rill__free(c->a, gather);
  rill__free(c->a, newpos);
  rill__free(c->a, olddef);
  rill__free(c->a, sub);
  return st;
}

rill_status_t asm_data_parallel(asm_ctx_t *c, ir_func_t *funcs, const bool *built, size_t nf) {
  int N = c->opts->data_parallel, n = 0;
  dp_why_t w = {.line = 0};
  for (size_t i = 0; i < nf; i++) {
    if (!built[i]) continue;
    bool split;
    RILL_TRY(split_function(c, &funcs[i], N, &split, &w));
    n += split;
  }
  if (!n)
    return asm_error(c, w.line ? w.line : 1, w.line ? w.col : 1, "--data-parallel=%d: no function can be split (a parameter whose first size, the batch, divides by %d)%s%s", N, N,
                     w.line ? ": " : "", w.line ? w.text : "");
  return NULL;
}
