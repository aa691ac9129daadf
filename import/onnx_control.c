/* onnx_control.c: ONNX control flow onto the language's own (If, Loop,
 * Scan). A subgraph becomes a function of the module: its inputs are the
 * function's first parameters, and every value of an enclosing graph it
 * reads (not known at import) becomes a further parameter (imp_capture),
 * passed at the call. If becomes `if` over two such functions (taking the
 * captures of both); Loop without scan outputs becomes `while` over a
 * header and a body that call the subgraph's function with the iteration
 * count and the carried values; a Loop with scan outputs and a known trip
 * count, and Scan (whose length is the scan axis's size), call it once per
 * iteration and stack the slices. A condition known at import picks its
 * branch at import. Sequences and optionals are not supported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

#define SUB_MAX 64
/* at most this many calls are written for one unrolled Loop or Scan */
#define UNROLL_MAX 4096

typedef struct sub {
  char name[48];
  ival_t *params[SUB_MAX]; /* the subgraph's inputs, then its captures */
  int np, nformal;
  ival_t *outer[SUB_MAX];  /* the captured values, as the enclosing graph has them */
  int ncaps;
  ival_t *res[SUB_MAX];
  int nres;
  bool res_true[SUB_MAX];  /* a result known at import to be true (a Loop's condition) */
  int res_param[SUB_MAX];  /* a result that is input k (k), else -1 */
  sbuf_t body;
  /* lists: set by the caller (If), a sequence output is its values, results
   * in order; seqn[i] is output i's count of them (-1: a tensor), seqd its dtype */
  bool lists;
  int seqn[SUB_MAX];
  rill_dtype_t seqd[SUB_MAX];
} sub_t;

static const Onnx__GraphProto *graph_attr(imp_t *m, const Onnx__NodeProto *n, const char *name) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  if (!a || !a->g) return imp_fail(m, RILL_MALFORMED, "attribute '%s' (a graph) is missing", name);
  return a->g;
}

/* The names of the values made since value `first` (a subgraph's) hidden
 * from what follows: a graph imported again (SequenceMap's body per item
 * type, a Loop's per iteration) defines them anew; a renamed key never
 * matches a lookup, and its slot stays. */
static void hide_names(imp_t *m, int first) {
  for (int i = first; i < m->nvals && !m->err; i++) {
    ival_t *v = m->vals[i];
    if (v->scope < m->scope || !v->onnx) continue;
    size_t len = strlen(v->onnx);
    char *h = malloc(len + 2);
    if (!h) {
      imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
      return;
    }
    h[0] = '\x01';
    memcpy(h + 1, v->onnx, len + 1);
    free(v->onnx);
    v->onnx = h;
  }
}

/* Imports subgraph g (attribute `what` of the current node) as function
 * f->name, its inputs of the types `types` (n of them). */
static bool sub_import(imp_t *m, const Onnx__GraphProto *g, const char *what, const rill_type_t *types, int n, sub_t *f) {
  const Onnx__NodeProto *node = m->node;
  if ((int)g->n_input != n) return imp_fail(m, RILL_MALFORMED, "subgraph '%s' takes %zu inputs, %d given", what, g->n_input, n), false;
  if (g->n_output > SUB_MAX || n > SUB_MAX / 2) return imp_unsup(m, "subgraph '%s' with more than %d inputs or outputs", what, SUB_MAX / 2), false;
  if (g->n_sparse_initializer) return imp_unsup(m, "sparse initializers in subgraph '%s'", what), false;
  snprintf(f->name, sizeof f->name, "sub%d_%s", m->nfuncs++, what);
  sbuf_t saved_body = m->body;
  imp_capture_t *saved_caps = m->caps;
  int saved_n = m->ncaps, saved_cap = m->capcap;
  m->body = (sbuf_t){0};
  m->caps = NULL;
  m->ncaps = m->capcap = 0;
  m->scope++;
  int first = m->nvals;
  f->np = f->nres = f->ncaps = 0;
  for (size_t i = 0; i < g->n_initializer && !m->err; i++) {
    if (!g->initializer[i]->name || !*g->initializer[i]->name) imp_fail(m, RILL_MALFORMED, "subgraph '%s': initializer %zu has no name", what, i);
    else imp_initializer(m, g->initializer[i], NULL);
  }
  for (int i = 0; i < n && !m->err; i++) {
    const char *nm = g->input[i]->name;
    if (!nm || !*nm) {
      imp_fail(m, RILL_MALFORMED, "subgraph '%s': input %d has no name", what, i);
      break;
    }
    ival_t *v = imp_new(m, nm, &types[i]);
    if (!v) break;
    v->declared = true;
    f->params[f->np++] = v;
  }
  f->nformal = f->np;
  if (!m->err) imp_nodes(m, g);
  m->node = node;
  for (size_t i = 0; i < g->n_output && !m->err; i++) {
    const char *nm = g->output[i]->name;
    ival_t *v = nm ? imp_lookup(m, nm) : NULL;
    if (!v) {
      imp_fail(m, RILL_MALFORMED, "subgraph '%s': output '%.200s' is not defined", what, nm ? nm : "(unnamed)");
      break;
    }
    f->seqn[i] = -1;
    if (v->seq && f->lists && !v->opt) { /* its values, each a result */
      bool flat = f->nres + v->nitems <= SUB_MAX;
      for (int k = 0; flat && k < v->nitems; k++) flat = !v->items[k]->seq;
      if (!flat) {
        imp_unsup(m, "subgraph '%s': output '%.200s' is a sequence of sequences or of more than %d values", what, nm, SUB_MAX);
        break;
      }
      f->seqn[i] = v->nitems, f->seqd[i] = v->t.dtype;
      for (int k = 0; k < v->nitems && !m->err; k++) {
        ival_t *x = v->items[k];
        f->res_true[f->nres] = false, f->res_param[f->nres] = -1;
        bool again = false;
        for (int q = 0; q < f->nres; q++) again |= f->res[q] == x;
        if (x->data || x->declared || again) x = imp_emit_copy(m, x);
        if (x) f->res[f->nres++] = x;
      }
      continue;
    }
    if (v->seq) {
      imp_unsup(m, "subgraph '%s': output '%.200s' is a%s (sequences and optionals are lists of values at import, not values a function returns)", what, nm, v->opt ? "n optional" : " sequence");
      break;
    }
    f->res_true[i] = v->data && v->t.dtype == RILL_BOOL && imp_numel(&v->t) == 1 && *(const uint8_t *)v->data;
    f->res_param[i] = -1;
    for (int k = 0; k < f->nformal; k++)
      if (f->params[k] == v || f->params[k] == v->copy_of) f->res_param[i] = k;
    bool again = false;
    for (size_t k = 0; k < i; k++) again |= f->res[k] == v;
    /* a result is the function's own: a known value, a parameter or a repeated one is copied */
    if (v->data || v->declared || again) v = imp_emit_copy(m, v);
    if (!v) break;
    f->res[f->nres++] = v;
  }
  for (int i = 0; i < m->ncaps && !m->err; i++) {
    if (f->np == SUB_MAX) {
      imp_unsup(m, "subgraph '%s' reads more than %d values of the enclosing graphs", what, SUB_MAX - n);
      break;
    }
    f->params[f->np++] = m->caps[i].inner;
    f->outer[f->ncaps++] = m->caps[i].outer;
  }
  f->body = m->body;
  free(m->caps);
  m->body = saved_body;
  m->caps = saved_caps;
  m->ncaps = saved_n;
  m->capcap = saved_cap;
  hide_names(m, first);
  m->scope--;
  if (m->err) {
    free(f->body.p);
    f->body = (sbuf_t){0};
    return false;
  }
  return true;
}

/* `func @NAME(PARAMS) -> (RESULTS) {BODY return ...}`; pre params come
 * before f's, post after (unused ones, an If's other branch's captures). */
static void sub_write(imp_t *m, sub_t *f, ival_t *const *pre, int npre, ival_t *const *post, int npost) {
  sbuf_t *b = &m->funcs;
  sb_printf(b, "func @%s(", f->name);
  int k = 0;
  for (int i = 0; i < npre + f->np + npost; i++) {
    ival_t *p = i < npre ? pre[i] : i < npre + f->np ? f->params[i - npre] : post[i - npre - f->np];
    sb_printf(b, "%s%%%s: ", k++ ? ", " : "", p->name);
    imp_type_text(m, b, &p->t);
  }
  sb_printf(b, ") -> (");
  for (int i = 0; i < f->nres; i++) {
    if (i) sb_printf(b, ", ");
    imp_type_text(m, b, &f->res[i]->t);
  }
  sb_printf(b, ") {\n%s  return ", f->body.len ? f->body.p : "");
  for (int i = 0; i < f->nres; i++) sb_printf(b, "%s%%%s", i ? ", " : "", f->res[i]->name);
  sb_printf(b, "\n}\n");
  free(f->body.p);
  f->body = (sbuf_t){0};
}

/* "%a, %b" of values, from the function being written */
static void names(imp_t *m, sbuf_t *b, ival_t *const *v, int n, bool lead) {
  for (int i = 0; i < n; i++) sb_printf(b, "%s%%%s", lead || i ? ", " : "", imp_use(m, v[i]));
}

/* outputs of a statement written by hand: fresh values of the types */
static bool outs_new(imp_t *m, const Onnx__NodeProto *n, ival_t **outs, ival_t *const *like, int k) {
  for (int i = 0; i < k; i++) {
    const char *o = (size_t)i < n->n_output && n->output[i] && *n->output[i] ? n->output[i] : NULL;
    if (!(outs[i] = imp_new(m, o, &like[i]->t))) return false;
    outs[i]->declared = true;
  }
  return true;
}

static void outs_text(imp_t *m, ival_t *const *outs, int k) {
  sb_printf(&m->body, "  ");
  for (int i = 0; i < k; i++) sb_printf(&m->body, "%s%%%s", i ? ", " : "", outs[i]->name);
  sb_printf(&m->body, " = ");
}

/* the captures as the current function sees them */
static bool caps_here(imp_t *m, const sub_t *f, ival_t **out) {
  for (int i = 0; i < f->ncaps; i++)
    if (!(out[i] = imp_capture(m, f->outer[i]))) return imp_fail(m, RILL_MALFORMED, "a subgraph reads a value it cannot see"), false;
  return true;
}

static bool scalar_of(imp_t *m, ival_t *v, rill_dtype_t d, const char *what, ival_t **out) {
  if (imp_numel(&v->t) != 1 || v->t.dtype != d)
    return imp_fail(m, RILL_MALFORMED, "input '%s' must be one %s", what, rill_dtype_name(d)), false;
  rill_type_t st = {d, 0, {0}};
  return (*out = imp_reshape(m, NULL, v, &st)) != NULL;
}

/* Whether d is exactly shape variable v for some v in [lo, hi) (one a
 * branch's import made: a size it reads back) */
static bool made_var(imp_t *m, int64_t d, uint32_t lo, uint32_t hi) {
  for (uint32_t v = lo; isa_dim_is_sym(d) && v < hi; v++) {
    int64_t vd;
    rill_status_t st = isa_syms_var_dim(&m->syms, v, &vd);
    if (st) return imp_fail(m, rill_status_code(st), "%s", rill_status_message(st)), rill_status_free(st), false;
    if (vd == d) return true;
  }
  return false;
}

/* Branches whose results differ in sizes that one of them reads back (a
 * count, as torchvision's batched NMS gives: an empty result where there
 * are no boxes, else the count of those kept): where the then branch's
 * size is a (a number, say) and the else branch's is a variable N it
 * reads back, the then branch binds N to a too (bind_dims) and gives its
 * result viewed at N, so both return the same type; the other way round
 * likewise. [t0, e0) and [e0, e1): the variables each branch's import made.
 * A result whose sizes differ otherwise is left as it is (the caller
 * refuses it). */
static bool unify_sizes(imp_t *m, sub_t *th, sub_t *el, uint32_t t0, uint32_t e0, uint32_t e1) {
  for (int i = 0; i < th->nres && i < el->nres && !m->err; i++) {
    rill_type_t *a = &th->res[i]->t, *b = &el->res[i]->t;
    if (rill__type_eq(a, b) || a->dtype != b->dtype || a->rank != b->rank) continue;
    rill_type_t want = *b;
    int64_t tbind[RILL_MAX_RANK][2], ebind[RILL_MAX_RANK][2]; /* (variable, size) */
    int nt = 0, ne = 0;
    bool read_back = true;
    for (int d = 0; d < a->rank && read_back; d++) {
      if (a->dims[d] == b->dims[d]) continue;
      if (made_var(m, b->dims[d], e0, e1)) tbind[nt][0] = b->dims[d], tbind[nt++][1] = a->dims[d];
      else if (made_var(m, a->dims[d], t0, e0)) ebind[ne][0] = a->dims[d], ebind[ne++][1] = b->dims[d], want.dims[d] = a->dims[d];
      else read_back = false;
    }
    if (!read_back || m->err) continue;
    sub_t *f[2] = {th, el};
    int64_t (*bind[2])[2] = {tbind, ebind};
    int nb[2] = {nt, ne};
    for (int k = 0; k < 2 && !m->err; k++) {
      if (!nb[k] && rill__type_eq(&f[k]->res[i]->t, &want)) continue;
      sbuf_t saved = m->body;
      m->body = f[k]->body;
      for (int j = 0; j < nb[k] && !m->err; j++) imp_bind_var(m, imp_dim_scalar(m, bind[k][j][1]), bind[k][j][0]);
      ival_t *v = m->err ? NULL : imp_sized_view(m, NULL, f[k]->res[i], &want);
      if (v) f[k]->res[i] = v;
      f[k]->body = m->body;
      m->body = saved;
    }
  }
  return !m->err;
}

bool onnx_op_if(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *c;
  if (!scalar_of(m, in[0], RILL_BOOL, "cond", &c)) return false;
  const Onnx__GraphProto *gt = graph_attr(m, n, "then_branch"), *ge = gt ? graph_attr(m, n, "else_branch") : NULL;
  if (!ge) return false;
  if (gt->n_output != n->n_output || ge->n_output != n->n_output)
    return imp_fail(m, RILL_MALFORMED, "the branches give %zu and %zu outputs, the node %zu", gt->n_output, ge->n_output, n->n_output), false;
  if (c->data) { /* known at import: the branch taken, written here */
    const Onnx__GraphProto *g = *(const uint8_t *)c->data ? gt : ge;
    for (size_t i = 0; i < g->n_initializer && !m->err; i++) imp_initializer(m, g->initializer[i], NULL);
    if (m->err || !imp_nodes(m, g)) return false;
    for (size_t i = 0; i < g->n_output; i++) {
      ival_t *v = g->output[i]->name ? imp_lookup(m, g->output[i]->name) : NULL;
      if (!v) return imp_fail(m, RILL_MALFORMED, "branch output '%.200s' is not defined", g->output[i]->name ? g->output[i]->name : "(unnamed)"), false;
      if (OUT(i) && !imp_alias(m, OUT(i), v)) return false;
    }
    return true;
  }
  sub_t *ts = calloc(2, sizeof(sub_t));
  if (!ts) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  sub_t *th = &ts[0], *el = &ts[1];
  th->lists = el->lists = true; /* a sequence output is its values, results of their own */
  uint32_t t0 = (uint32_t)m->syms.vars.len, e0 = 0;
  bool ok = sub_import(m, gt, "then", NULL, 0, th) && ((e0 = (uint32_t)m->syms.vars.len), sub_import(m, ge, "else", NULL, 0, el)), lists = false;
  ok = ok && unify_sizes(m, th, el, t0, e0, (uint32_t)m->syms.vars.len);
  char b1[96], b2[96];
  for (size_t i = 0; ok && i < n->n_output; i++) {
    lists |= th->seqn[i] >= 0;
    if (th->seqn[i] != el->seqn[i]) {
      imp_unsup(m, "the branches give output %zu as %s of %d values and %s of %d (they must agree)", i, th->seqn[i] < 0 ? "a tensor" : "a sequence",
                th->seqn[i] < 0 ? 1 : th->seqn[i], el->seqn[i] < 0 ? "a tensor" : "a sequence", el->seqn[i] < 0 ? 1 : el->seqn[i]);
      ok = false;
    }
  }
  for (int i = 0; ok && i < th->nres; i++)
    if (!rill__type_eq(&th->res[i]->t, &el->res[i]->t)) {
      sbuf_t x = {0}, y = {0};
      imp_type_text(m, &x, &th->res[i]->t);
      imp_type_text(m, &y, &el->res[i]->t);
      snprintf(b1, sizeof b1, "%s", x.p ? x.p : "?");
      snprintf(b2, sizeof b2, "%s", y.p ? y.p : "?");
      free(x.p);
      free(y.p);
      imp_unsup(m, "the branches give output %d as %s and %s (they must agree)", i, b1, b2);
      ok = false;
    }
  ival_t *args[2 * SUB_MAX], *outs[SUB_MAX];
  ok = ok && caps_here(m, th, args) && caps_here(m, el, args + th->ncaps);
  /* each branch takes both's captures: its own, and the other's unused */
  ival_t *tpost[SUB_MAX], *epre[SUB_MAX];
  for (int i = 0; ok && i < el->ncaps; i++) ok = (tpost[i] = imp_new(m, NULL, &el->outer[i]->t)) != NULL;
  for (int i = 0; ok && i < th->ncaps; i++) ok = (epre[i] = imp_new(m, NULL, &th->outer[i]->t)) != NULL;
  if (ok) {
    sub_write(m, th, NULL, 0, tpost, el->ncaps);
    sub_write(m, el, epre, th->ncaps, NULL, 0);
    if (!lists) ok = outs_new(m, n, outs, th->res, th->nres);
    for (int i = 0; lists && ok && i < th->nres; i++) /* bound to the outputs below */
      if ((ok = (outs[i] = imp_new(m, NULL, &th->res[i]->t)) != NULL)) outs[i]->declared = true;
  }
  if (ok) {
    outs_text(m, outs, th->nres);
    sb_printf(&m->body, "if(%%%s, @%s, @%s", imp_use(m, c), th->name, el->name);
    names(m, &m->body, args, th->ncaps + el->ncaps, true);
    sb_printf(&m->body, ")\n");
  }
  for (size_t i = 0, k = 0; lists && ok && i < n->n_output; i++) { /* a sequence of its values' results */
    if (th->seqn[i] < 0) ok = !OUT(i) || imp_alias(m, OUT(i), outs[k]) != NULL, k++;
    else ok = imp_seq_of(m, OUT(i), outs + k, th->seqn[i], th->seqd[i]) != NULL, k += (size_t)th->seqn[i];
  }
  free(th->body.p);
  free(el->body.p);
  free(ts);
  return ok && !m->err;
}

/* `%o... = while(@loopN_cond, @loopN_body, init...)` over the state
 * (i, M, cond, v..., scan buffers..., captures...), init its first
 * values: the header is i < M and cond; the body calls f with (i, cond,
 * v..., captures...), writes row i of each scan buffer (scatter_nd) and
 * counts. The carried values and the buffers are the node's outputs. */
static bool loop_while(imp_t *m, const Onnx__NodeProto *n, sub_t *f, ival_t **init, int nv, int nscan) {
  int ns = 3 + nv + nscan + f->ncaps;
  int id = m->nfuncs++;
  sbuf_t *b = &m->funcs, sig = {0};
  for (int i = 0; i < ns; i++) {
    sb_printf(&sig, "%s%%s%d: ", i ? ", " : "", i);
    imp_type_text(m, &sig, &init[i]->t);
  }
  sb_printf(b, "func @loop%d_cond(%s) -> bool[] {\n  %%a = lt(%%s0, %%s1)\n  %%b = logical_and(%%a, %%s2)\n  return %%b\n}\n", id, sig.p ? sig.p : "");
  sb_printf(b, "func @loop%d_body(%s) -> (", id, sig.p ? sig.p : "");
  for (int i = 0; i < ns; i++) {
    if (i) sb_printf(b, ", ");
    imp_type_text(m, b, &init[i]->t);
  }
  sb_printf(b, ") {\n  %%c");
  for (int i = 0; i < nv; i++) sb_printf(b, ", %%v%d", i);
  for (int k = 0; k < nscan; k++) sb_printf(b, ", %%u%d", k);
  sb_printf(b, " = call @%s(%%s0, %%s2", f->name);
  for (int i = 0; i < nv; i++) sb_printf(b, ", %%s%d", 3 + i);
  for (int i = 0; i < f->ncaps; i++) sb_printf(b, ", %%s%d", 3 + nv + nscan + i);
  sb_printf(b, ")\n");
  if (nscan) sb_printf(b, "  %%ix = reshape(%%s0) {shape=[1, 1]}\n");
  for (int k = 0; k < nscan; k++) {
    const rill_type_t *st = &f->res[1 + nv + k]->t;
    sb_printf(b, "  %%r%d = reshape(%%u%d) {shape=[1", k, k);
    for (int d = 0; d < st->rank; d++) sb_printf(b, ", %lld", (long long)st->dims[d]);
    sb_printf(b, "]}\n  %%w%d = scatter_nd(%%s%d, %%ix, %%r%d) {reduction=\"none\"}\n", k, 3 + nv + k, k);
  }
  sb_printf(b, "  %%i = add(%%s0, 1)\n  return %%i, %%s1, %%c");
  for (int i = 0; i < nv; i++) sb_printf(b, ", %%v%d", i);
  for (int k = 0; k < nscan; k++) sb_printf(b, ", %%w%d", k);
  for (int i = 0; i < f->ncaps; i++) sb_printf(b, ", %%s%d", 3 + nv + nscan + i);
  sb_printf(b, "\n}\n");
  free(sig.p);
  ival_t *st[SUB_MAX + 3] = {0};
  for (int i = 0; i < ns; i++) {
    const char *o = i >= 3 && i < 3 + nv + nscan ? OUT(i - 3) : NULL;
    if (!(st[i] = imp_new(m, o, &init[i]->t))) return false;
    st[i]->declared = true;
  }
  outs_text(m, st, ns);
  sb_printf(&m->body, "while(@loop%d_cond, @loop%d_body", id, id);
  names(m, &m->body, init, ns, true);
  sb_printf(&m->body, ")\n");
  return !m->err;
}

/* A Loop with scan outputs whose trip count (or first condition) is
 * computed at run time, its body keeping the condition it is given (or
 * true): the count T = cond ? max(M, 0) : 0 is read back, each scan
 * output is a buffer [T, ...] of zeros carried through a `while` whose
 * body calls the subgraph's function and writes row i of each buffer
 * (scatter_nd). f is written; caps are its captures. */
static bool loop_scan_rt(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nv, int nscan, sub_t *f, ival_t *maxv, ival_t *c0, ival_t **caps) {
  rill_type_t one = {RILL_I64, 1, {1}};
  ival_t *tv = imp_bin(m, NULL, "maximum", maxv, imp_scalar_int(m, RILL_I64, 0));
  if (c0) tv = imp_where(m, c0, tv, imp_scalar_int(m, RILL_I64, 0));
  int64_t T;
  if (!tv || imp_read_back(m, imp_reshape(m, NULL, tv, &one), "M", &T, 1) != 1) return false;
  int ns = 3 + nv + nscan + f->ncaps;
  if (ns > SUB_MAX + 3) return imp_unsup(m, "a Loop carrying more than %d values", SUB_MAX), false;
  ival_t *init[SUB_MAX + 3];
  init[0] = imp_scalar_int(m, RILL_I64, 0);
  init[1] = imp_reshape(m, NULL, tv, &(rill_type_t){RILL_I64, 0, {0}});
  init[2] = imp_scalar_int(m, RILL_BOOL, 1);
  for (int i = 0; i < nv; i++) init[3 + i] = in[2 + i];
  for (int k = 0; k < nscan; k++) {
    rill_type_t st = f->res[1 + nv + k]->t, bt = st;
    if (isa_type_is_sym(&st) || st.rank >= RILL_MAX_RANK)
      return imp_unsup(m, "a scan output of sizes over shape variables or of rank %d (a number each, rank at most %d)", st.rank, RILL_MAX_RANK - 1), false;
    bt.rank = st.rank + 1;
    bt.dims[0] = T;
    for (int d = 0; d < st.rank; d++) bt.dims[d + 1] = st.dims[d];
    init[3 + nv + k] = imp_broadcast(m, NULL, imp_scalar(m, st.dtype, 0), &bt);
  }
  for (int i = 0; i < f->ncaps; i++) init[3 + nv + nscan + i] = caps[i];
  for (int i = 0; i < ns; i++)
    if (!init[i]) return false;
  return loop_while(m, n, f, init, nv, nscan);
}

/* whether graph g's nodes read a sequence or an optional of the graphs
 * around it by name */
static bool reads_list(imp_t *m, const Onnx__GraphProto *g) {
  for (size_t i = 0; i < g->n_node; i++)
    for (size_t k = 0; k < g->node[i]->n_input; k++) {
      const char *nm = g->node[i]->input[k];
      ival_t *v = nm && *nm ? imp_find(m, nm) : NULL;
      if (v && v->seq) return true;
    }
  return false;
}

/* A Loop that carries or reads sequences or optionals (lists at import,
 * which a function cannot take or return), with a trip count known at
 * import: the body's nodes imported in place once per iteration, its
 * inputs bound to the iteration count (known), the condition and the
 * carried values, its names hidden after each (as sub_import hides a
 * subgraph's); the condition must be known at import at every iteration.
 * Scan outputs (tensors) are stacked as the unrolled Loop's are. */
static bool loop_inline(imp_t *m, const Onnx__NodeProto *n, const Onnx__GraphProto *g, ival_t **in, int nv, ival_t *maxv, ival_t *c0) {
  if (!maxv || !maxv->data) return imp_unsup(m, "a Loop carrying or reading sequences or optionals whose trip count is computed at run time"), false;
  if (c0 && !c0->data) return imp_unsup(m, "a Loop carrying or reading sequences or optionals whose condition is computed at run time"), false;
  if ((int)g->n_input != nv + 2) return imp_fail(m, RILL_MALFORMED, "subgraph 'body' takes %zu inputs, %d given", g->n_input, nv + 2), false;
  int nscan = (int)g->n_output - 1 - nv;
  if (nscan < 0 || (size_t)(nv + nscan) != n->n_output) return imp_fail(m, RILL_MALFORMED, "the body gives %zu outputs for %d carried values and the node %zu", g->n_output, nv, n->n_output), false;
  int64_t trips = *(const int64_t *)maxv->data;
  bool go = !c0 || *(const uint8_t *)c0->data;
  ival_t *cur[SUB_MAX], **scans = NULL;
  for (int i = 0; i < nv; i++) cur[i] = in[2 + i];
  int64_t t = 0;
  for (; go && t < trips && !m->err; t++) {
    if (t == UNROLL_MAX) return free(scans), imp_unsup(m, "a Loop carrying or reading sequences or optionals over more than %d iterations", UNROLL_MAX), false;
    if (nscan) {
      ival_t **p = realloc(scans, sizeof *p * (size_t)((t + 1) * nscan));
      if (!p) return free(scans), imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
      scans = p;
    }
    int first = m->nvals;
    ival_t *bind[SUB_MAX + 2] = {imp_scalar_int(m, RILL_I64, t), imp_scalar_int(m, RILL_BOOL, 1)};
    for (int i = 0; i < nv; i++) bind[2 + i] = cur[i];
    for (int j = 0; j < nv + 2 && !m->err; j++)
      if (g->input[j]->name && *g->input[j]->name) imp_alias(m, g->input[j]->name, bind[j]);
    for (size_t i = 0; i < g->n_initializer && !m->err; i++) imp_initializer(m, g->initializer[i], NULL);
    if (m->err || !imp_nodes(m, g)) break;
    m->node = n;
    ival_t *r[SUB_MAX * 2];
    for (size_t k = 0; k < g->n_output && !m->err; k++) {
      const char *nm = g->output[k]->name;
      if (!(r[k] = nm ? imp_find(m, nm) : NULL)) imp_fail(m, RILL_MALFORMED, "subgraph 'body': output '%.200s' is not defined", nm ? nm : "(unnamed)");
    }
    if (m->err) break;
    if (!r[0]->data || r[0]->t.dtype != RILL_BOOL || imp_numel(&r[0]->t) != 1) {
      imp_unsup(m, "a Loop carrying or reading sequences or optionals whose body's condition is computed at run time");
      break;
    }
    go = *(const uint8_t *)r[0]->data;
    for (int i = 0; i < nv; i++) cur[i] = r[1 + i];
    for (int k = 0; k < nscan; k++) {
      if (r[1 + nv + k]->seq) {
        imp_unsup(m, "a scan output that is a sequence");
        break;
      }
      scans[t * nscan + k] = r[1 + nv + k];
    }
    hide_names(m, first);
  }
  m->node = n;
  for (int i = 0; i < nv && !m->err; i++)
    if (OUT(i)) imp_alias(m, OUT(i), cur[i]);
  if (nscan && !t && !m->err) imp_unsup(m, "a Loop with scan outputs and no iteration (their types are not known)");
  for (int k = 0; k < nscan && !m->err; k++) {
    ival_t *parts[UNROLL_MAX];
    rill_type_t one = scans[k]->t;
    if (one.rank >= RILL_MAX_RANK) {
      imp_unsup(m, "a scan output of rank %d (at most %d)", one.rank, RILL_MAX_RANK - 1);
      break;
    }
    for (int d = one.rank; d > 0; d--) one.dims[d] = one.dims[d - 1];
    one.dims[0] = 1;
    one.rank++;
    for (int64_t q = 0; q < t; q++) {
      if (!rill__type_eq(&scans[q * nscan + k]->t, &scans[k]->t)) {
        imp_unsup(m, "a scan output whose type changes between iterations");
        break;
      }
      parts[q] = imp_reshape(m, NULL, scans[q * nscan + k], &one);
    }
    rill_type_t all = one;
    all.dims[0] = t;
    if (!m->err) t == 1 ? imp_alias(m, OUT(nv + k), parts[0]) : imp_emit(m, OUT(nv + k), &all, "concat", parts, (int)t, "axis=0");
  }
  free(scans);
  return !m->err;
}

/* Loop(M, cond, v...): body(i, cond, v...) -> (cond, v..., scans...). */
bool onnx_op_loop(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const Onnx__GraphProto *g = graph_attr(m, n, "body");
  if (!g) return false;
  int nv = nin - 2;
  if (nv < 0) return imp_fail(m, RILL_MALFORMED, "Loop takes M, cond and the carried values"), false;
  if (nv + 2 > SUB_MAX / 2) return imp_unsup(m, "a Loop carrying more than %d values", SUB_MAX / 2 - 2), false;
  for (int i = 0; i < nv; i++) NEED(2 + i);
  ival_t *maxv = NULL, *c0 = NULL;
  if (IN(0) && !scalar_of(m, in[0], RILL_I64, "M", &maxv)) return false;
  if (IN(1) && !scalar_of(m, in[1], RILL_BOOL, "cond", &c0)) return false;
  bool lists = reads_list(m, g);
  for (int i = 0; i < nv; i++) lists |= in[2 + i]->seq;
  if (lists) return loop_inline(m, n, g, in, nv, maxv, c0);
  rill_type_t types[SUB_MAX];
  types[0] = (rill_type_t){RILL_I64, 0, {0}};
  types[1] = (rill_type_t){RILL_BOOL, 0, {0}};
  for (int i = 0; i < nv; i++) types[2 + i] = in[2 + i]->t;
  sub_t *f = calloc(1, sizeof *f);
  if (!f) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  bool ok = sub_import(m, g, "body", types, nv + 2, f);
  int nscan = f->nres - 1 - nv;
  if (ok && nscan < 0) ok = (imp_fail(m, RILL_MALFORMED, "the body gives %d outputs for %d carried values", f->nres, nv), false);
  if (ok && (size_t)(nv + nscan) != n->n_output)
    ok = (imp_fail(m, RILL_MALFORMED, "the node has %zu outputs, the body %d carried and %d scanned", n->n_output, nv, nscan), false);
  if (ok && (f->res[0]->t.dtype != RILL_BOOL || f->res[0]->t.rank != 0))
    ok = (imp_fail(m, RILL_MALFORMED, "the body's condition must be one bool"), false);
  for (int i = 0; ok && i < nv; i++)
    if (!rill__type_eq(&f->res[1 + i]->t, &in[2 + i]->t))
      ok = (imp_unsup(m, "carried value %d changes its type in the body (it must keep it)", i), false);
  ival_t *caps[SUB_MAX];
  ok = ok && caps_here(m, f, caps);
  if (!ok) {
    free(f->body.p);
    free(f);
    return false;
  }
  sub_write(m, f, NULL, 0, NULL, 0);
  if (nscan == 0) {
    /* while over (i, M, cond, v..., captures...) */
    int ns = 3 + nv + f->ncaps;
    ival_t *init[SUB_MAX + 3];
    init[0] = imp_scalar_int(m, RILL_I64, 0);
    init[1] = maxv ? maxv : imp_scalar_int(m, RILL_I64, INT64_MAX);
    init[2] = c0 ? c0 : imp_scalar_int(m, RILL_BOOL, 1);
    for (int i = 0; i < nv; i++) init[3 + i] = in[2 + i];
    for (int i = 0; i < f->ncaps; i++) init[3 + nv + i] = caps[i];
    for (int i = 0; i < ns; i++)
      if (!init[i]) goto fail;
    bool done = loop_while(m, n, f, init, nv, 0);
    free(f);
    return done;
  }
  /* scan outputs: a trip count known at import, a condition that stays true; a call per iteration */
  if (maxv && (!maxv->data || (c0 && !c0->data)) && (f->res_true[0] || f->res_param[0] == 1)) {
    bool done = loop_scan_rt(m, n, in, nv, nscan, f, maxv, c0, caps);
    free(f);
    return done;
  }
  if (!maxv) {
    imp_unsup(m, "a Loop with scan outputs and no trip count (its scan outputs' length would be the run's)");
    goto fail;
  }
  if ((c0 && !(c0->data && *(const uint8_t *)c0->data)) || !(f->res_true[0] || f->res_param[0] == 1) || !maxv->data) {
    imp_unsup(m, "a Loop with scan outputs whose condition may end it early");
    goto fail;
  }
  int64_t trips = *(const int64_t *)maxv->data;
  if (trips <= 0 || trips > UNROLL_MAX) {
    imp_unsup(m, "a Loop with scan outputs over %lld iterations (1 to %d)", (long long)trips, UNROLL_MAX);
    goto fail;
  }
  ival_t *cur[SUB_MAX], **scans = calloc((size_t)(trips * nscan), sizeof(ival_t *));
  if (!scans) {
    imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    goto fail;
  }
  for (int i = 0; i < nv; i++) cur[i] = in[2 + i];
  ival_t *tr = imp_scalar_int(m, RILL_BOOL, 1);
  for (int64_t t = 0; t < trips && !m->err; t++) {
    ival_t *r[SUB_MAX];
    for (int i = 0; i < f->nres && !m->err; i++) {
      r[i] = imp_new(m, NULL, &f->res[i]->t);
      if (r[i]) r[i]->declared = true;
    }
    if (m->err) break;
    ival_t *it = imp_scalar_int(m, RILL_I64, t);
    if (!it) break;
    outs_text(m, r, f->nres);
    sb_printf(&m->body, "call @%s(%%%s, %%%s", f->name, imp_use(m, it), imp_use(m, tr));
    names(m, &m->body, cur, nv, true);
    names(m, &m->body, caps, f->ncaps, true);
    sb_printf(&m->body, ")\n");
    for (int i = 0; i < nv; i++) cur[i] = r[1 + i];
    for (int k = 0; k < nscan; k++) scans[t * nscan + k] = r[1 + nv + k];
  }
  for (int i = 0; i < nv && !m->err; i++)
    if (OUT(i)) imp_alias(m, OUT(i), cur[i]);
  for (int k = 0; k < nscan && !m->err; k++) {
    ival_t *parts[UNROLL_MAX];
    rill_type_t st = f->res[1 + nv + k]->t, one = st;
    if (st.rank >= RILL_MAX_RANK) {
      imp_unsup(m, "a scan output of rank %d (at most %d)", st.rank, RILL_MAX_RANK - 1);
      break;
    }
    one.rank = st.rank + 1;
    one.dims[0] = 1;
    for (int d = 0; d < st.rank; d++) one.dims[d + 1] = st.dims[d];
    for (int64_t t = 0; t < trips; t++) parts[t] = imp_reshape(m, NULL, scans[t * nscan + k], &one);
    rill_type_t all = one;
    all.dims[0] = trips;
    ival_t *o = NULL;
    if (trips == 1) o = imp_alias(m, OUT(nv + k), parts[0]);
    else o = imp_emit(m, OUT(nv + k), &all, "concat", parts, (int)trips, "axis=0");
    if (!o) break;
  }
  free(scans);
  free(f);
  return !m->err;
fail:
  free(f);
  return false;
}

/* Scan (opset 9 and up): body(states..., slices...) -> (states..., slices...),
 * a call per step along the scan axis; the output slices stacked. */
/* Scan of opset 8: sequence_lens (optional; all of them the full length
 * where given, known), then states [B, ...] and scan inputs [B, T, ...]
 * with a batch axis; the body (states..., slices...) -> (states...,
 * slices...) sees neither axis. A call per batch row and step (reversed
 * inputs by `directions`); the final states stacked over the batch, the
 * scan outputs over the steps and then the batch. */
static bool scan8(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const Onnx__GraphProto *g = graph_attr(m, n, "body");
  if (!g) return false;
  int64_t nsi = onnx_attr_i(n, "num_scan_inputs", -1);
  int nst = nin - 1 - (int)nsi;
  if (nsi < 1 || nst < 0) return imp_fail(m, RILL_MALFORMED, "num_scan_inputs must be 1 to the %d inputs after sequence_lens", nin - 1), false;
  if (nin > SUB_MAX / 2) return imp_unsup(m, "a Scan of more than %d inputs", SUB_MAX / 2), false;
  for (int i = 1; i < nin; i++) NEED(i);
  int64_t dir[SUB_MAX] = {0};
  if (onnx_attr_ints(n, "directions", dir, SUB_MAX) >= 0 && onnx_attr_ints(n, "directions", dir, SUB_MAX) != nsi)
    return imp_fail(m, RILL_MALFORMED, "directions needs one per scan input"), false;
  ival_t *x0 = in[1 + nst];
  if (x0->t.rank < 2 || isa_type_is_sym(&x0->t)) return imp_fail(m, RILL_MALFORMED, "scan inputs must be [batch, steps, ...] (numbers)"), false;
  int64_t B = x0->t.dims[0], T = x0->t.dims[1];
  if (IN(0)) { /* sequence_lens: the full length each */
    ival_t *sl = in[0];
    if (!sl->data || !imp_is_int(sl->t.dtype)) return imp_unsup(m, "sequence_lens computed at run time"), false;
    for (size_t i = 0; i < imp_numel(&sl->t); i++)
      if (rill_element_get_int(sl->t.dtype, sl->data, i) != T) return imp_unsup(m, "sequence_lens shorter than the scan inputs"), false;
  }
  if (B < 1 || T < 1 || B * T > UNROLL_MAX) return imp_unsup(m, "a Scan of %lld rows of %lld steps (1 to %d calls)", (long long)B, (long long)T, UNROLL_MAX), false;
  rill_type_t types[SUB_MAX];
  for (int i = 0; i < nin - 1; i++) {
    rill_type_t t = in[1 + i]->t;
    int drop = i < nst ? 1 : 2;
    if (t.rank < drop || t.dims[0] != B || (i >= nst && t.dims[1] != T)) return imp_fail(m, RILL_MALFORMED, "input %d is not [%lld%s, ...]", i + 1, (long long)B, i < nst ? "" : ", steps"), false;
    types[i] = (rill_type_t){t.dtype, t.rank - drop, {0}};
    for (int d = 0; d < t.rank - drop; d++) types[i].dims[d] = t.dims[d + drop];
  }
  sub_t *f = calloc(1, sizeof *f);
  if (!f) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  ival_t *caps[SUB_MAX];
  bool ok = sub_import(m, g, "body", types, nin - 1, f);
  int nso = f->nres - nst;
  if (ok && (nso < 0 || (size_t)f->nres != n->n_output)) ok = (imp_fail(m, RILL_MALFORMED, "the body gives %d outputs, the node %zu", f->nres, n->n_output), false);
  for (int i = 0; ok && i < nst; i++)
    if (!rill__type_eq(&f->res[i]->t, &types[i])) ok = (imp_unsup(m, "state %d changes its type in the body (it must keep it)", i), false);
  ok = ok && caps_here(m, f, caps);
  ival_t **outs = ok ? calloc((size_t)(B * T * (nso ? nso : 1) + B * (nst ? nst : 1)), sizeof(ival_t *)) : NULL;
  if (ok && !outs) ok = (imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false);
  if (!ok) {
    free(f->body.p);
    free(f);
    return false;
  }
  ival_t **fin = outs + B * T * (nso ? nso : 1);
  sub_write(m, f, NULL, 0, NULL, 0);
  for (int64_t b = 0; b < B && !m->err; b++) {
    ival_t *cur[SUB_MAX];
    for (int i = 0; i < nst; i++) cur[i] = imp_reshape(m, NULL, imp_slice1(m, in[1 + i], 0, b, b + 1, 1), &types[i]);
    for (int64_t t = 0; t < T && !m->err; t++) {
      ival_t *sl[SUB_MAX], *r[SUB_MAX];
      for (int j = 0; j < nsi; j++) {
        int64_t at = dir[j] ? T - 1 - t : t;
        sl[j] = imp_reshape(m, NULL, imp_slice1(m, imp_slice1(m, in[1 + nst + j], 0, b, b + 1, 1), 1, at, at + 1, 1), &types[nst + j]);
      }
      for (int i = 0; i < f->nres && !m->err; i++)
        if ((r[i] = imp_new(m, NULL, &f->res[i]->t))) r[i]->declared = true;
      if (m->err) break;
      outs_text(m, r, f->nres);
      sb_printf(&m->body, "call @%s(", f->name);
      names(m, &m->body, cur, nst, false);
      names(m, &m->body, sl, (int)nsi, nst > 0);
      names(m, &m->body, caps, f->ncaps, true);
      sb_printf(&m->body, ")\n");
      for (int i = 0; i < nst; i++) cur[i] = r[i];
      for (int k = 0; k < nso; k++) outs[(b * T + t) * nso + k] = r[nst + k];
    }
    for (int i = 0; i < nst; i++) fin[b * nst + i] = cur[i];
  }
  /* stacked: a new first axis (steps, then the batch) */
  for (int k = 0; k < nst + nso && !m->err; k++) {
    bool st = k < nst;
    rill_type_t e = f->res[k]->t, one = e, all;
    int add = st ? 1 : 2;
    if (e.rank + add > RILL_MAX_RANK) {
      imp_unsup(m, "an output of rank %d (at most %d)", e.rank + add, RILL_MAX_RANK);
      break;
    }
    one.rank = e.rank + add;
    for (int d = 0; d < e.rank; d++) one.dims[d + add] = e.dims[d];
    one.dims[0] = 1;
    if (!st) one.dims[1] = 1;
    ival_t *rows[UNROLL_MAX];
    for (int64_t b = 0; b < B && !m->err; b++) {
      if (st) {
        rows[b] = imp_reshape(m, NULL, fin[b * nst + k], &one);
        continue;
      }
      ival_t *steps[UNROLL_MAX];
      for (int64_t t = 0; t < T; t++) steps[t] = imp_reshape(m, NULL, outs[(b * T + t) * nso + (k - nst)], &one);
      all = one;
      all.dims[1] = T;
      rows[b] = T == 1 ? steps[0] : imp_emit(m, NULL, &all, "concat", steps, (int)T, "axis=1");
    }
    all = one;
    if (!st) all.dims[1] = T;
    all.dims[0] = B;
    if (!m->err) B == 1 ? imp_alias(m, OUT(k), rows[0]) : imp_emit(m, OUT(k), &all, "concat", rows, (int)B, "axis=0");
  }
  free(outs);
  free(f);
  return !m->err;
}

bool onnx_op_scan(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  if (m->opset < 9) return scan8(m, n, in, nin);
  const Onnx__GraphProto *g = graph_attr(m, n, "body");
  if (!g) return false;
  int64_t nscan_in = onnx_attr_i(n, "num_scan_inputs", -1);
  if (nscan_in < 1 || nscan_in > nin) return imp_fail(m, RILL_MALFORMED, "num_scan_inputs must be 1 to the %d inputs", nin), false;
  int nst = nin - (int)nscan_in, nsi = (int)nscan_in;
  if (nin > SUB_MAX / 2) return imp_unsup(m, "a Scan of more than %d inputs", SUB_MAX / 2), false;
  for (int i = 0; i < nin; i++) NEED(i);
  int64_t iax[SUB_MAX] = {0}, idir[SUB_MAX] = {0}, oax[SUB_MAX] = {0}, odir[SUB_MAX] = {0};
  if (onnx_attr_ints(n, "scan_input_axes", iax, SUB_MAX) >= 0 && onnx_attr_ints(n, "scan_input_axes", iax, SUB_MAX) != nsi)
    return imp_fail(m, RILL_MALFORMED, "scan_input_axes needs one axis per scan input"), false;
  if (onnx_attr_ints(n, "scan_input_directions", idir, SUB_MAX) >= 0 && onnx_attr_ints(n, "scan_input_directions", idir, SUB_MAX) != nsi)
    return imp_fail(m, RILL_MALFORMED, "scan_input_directions needs one per scan input"), false;
  int64_t len = -1;
  rill_type_t types[SUB_MAX];
  for (int i = 0; i < nst; i++) types[i] = in[i]->t;
  for (int j = 0; j < nsi; j++) {
    ival_t *x = in[nst + j];
    if (!imp_norm_axis(m, iax[j], x->t.rank, &iax[j])) return false;
    int64_t l = x->t.dims[iax[j]];
    if (isa_dim_is_sym(l)) return imp_unsup(m, "a Scan over a length over shape variables"), false;
    if (len >= 0 && l != len) return imp_fail(m, RILL_MALFORMED, "scan inputs of lengths %lld and %lld", (long long)len, (long long)l), false;
    len = l;
    rill_type_t s = x->t;
    s.rank--;
    for (int d = (int)iax[j]; d < s.rank; d++) s.dims[d] = x->t.dims[d + 1];
    types[nst + j] = s;
  }
  if (len <= 0 || len > UNROLL_MAX) return imp_unsup(m, "a Scan of %lld steps (1 to %d)", (long long)len, UNROLL_MAX), false;
  sub_t *f = calloc(1, sizeof *f);
  if (!f) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  ival_t *caps[SUB_MAX], *cur[SUB_MAX], **outs = NULL;
  bool ok = sub_import(m, g, "body", types, nin, f);
  int nso = f->nres - nst;
  if (ok && (nso < 0 || (size_t)f->nres != n->n_output)) ok = (imp_fail(m, RILL_MALFORMED, "the body gives %d outputs, the node %zu", f->nres, n->n_output), false);
  for (int i = 0; ok && i < nst; i++)
    if (!rill__type_eq(&f->res[i]->t, &in[i]->t)) ok = (imp_unsup(m, "state %d changes its type in the body (it must keep it)", i), false);
  if (ok && onnx_attr_ints(n, "scan_output_axes", oax, SUB_MAX) >= 0 && onnx_attr_ints(n, "scan_output_axes", oax, SUB_MAX) != nso)
    ok = (imp_fail(m, RILL_MALFORMED, "scan_output_axes needs one axis per scan output"), false);
  if (ok && onnx_attr_ints(n, "scan_output_directions", odir, SUB_MAX) >= 0 && onnx_attr_ints(n, "scan_output_directions", odir, SUB_MAX) != nso)
    ok = (imp_fail(m, RILL_MALFORMED, "scan_output_directions needs one per scan output"), false);
  ok = ok && caps_here(m, f, caps);
  if (ok && !(outs = calloc((size_t)(len * (nso ? nso : 1)), sizeof(ival_t *)))) ok = (imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false);
  if (!ok) {
    free(f->body.p);
    free(f);
    return false;
  }
  sub_write(m, f, NULL, 0, NULL, 0);
  for (int i = 0; i < nst; i++) cur[i] = in[i];
  for (int64_t t = 0; t < len && !m->err; t++) {
    ival_t *sl[SUB_MAX], *r[SUB_MAX];
    for (int j = 0; j < nsi; j++) {
      ival_t *x = in[nst + j];
      int64_t at = idir[j] ? len - 1 - t : t;
      sl[j] = imp_reshape(m, NULL, imp_slice1(m, x, iax[j], at, at + 1, 1), &types[nst + j]);
    }
    for (int i = 0; i < f->nres && !m->err; i++) {
      r[i] = imp_new(m, NULL, &f->res[i]->t);
      if (r[i]) r[i]->declared = true;
    }
    if (m->err) break;
    outs_text(m, r, f->nres);
    sb_printf(&m->body, "call @%s(", f->name);
    names(m, &m->body, cur, nst, false);
    names(m, &m->body, sl, nsi, nst > 0);
    names(m, &m->body, caps, f->ncaps, true);
    sb_printf(&m->body, ")\n");
    for (int i = 0; i < nst; i++) cur[i] = r[i];
    for (int k = 0; k < nso; k++) outs[t * nso + k] = r[nst + k];
  }
  for (int i = 0; i < nst && !m->err; i++)
    if (OUT(i)) imp_alias(m, OUT(i), cur[i]);
  for (int k = 0; k < nso && !m->err; k++) {
    rill_type_t st = f->res[nst + k]->t, one = st;
    if (st.rank >= RILL_MAX_RANK) {
      imp_unsup(m, "a scan output of rank %d (at most %d)", st.rank, RILL_MAX_RANK - 1);
      break;
    }
    int64_t ax;
    if (!imp_norm_axis(m, oax[k], st.rank + 1, &ax)) break;
    one.rank = st.rank + 1;
    for (int d = 0, s = 0; d < one.rank; d++) one.dims[d] = d == ax ? 1 : st.dims[s++];
    ival_t *parts[UNROLL_MAX];
    for (int64_t t = 0; t < len; t++) parts[t] = imp_reshape(m, NULL, outs[(odir[k] ? len - 1 - t : t) * nso + k], &one);
    rill_type_t all = one;
    all.dims[ax] = len;
    char a[32];
    snprintf(a, sizeof a, "axis=%lld", (long long)ax);
    if (len == 1) imp_alias(m, OUT(nst + k), parts[0]);
    else imp_emit(m, OUT(nst + k), &all, "concat", parts, (int)len, a);
  }
  free(outs);
  free(f);
  return !m->err;
}

/* SequenceMap(s, extra...): the body once per item of s (an extra input
 * that is a sequence gives its item too, one of a tensor itself); each
 * output a sequence of the body's results. A function per distinct list
 * of item types (the items' sizes may differ), a call per item. */
bool onnx_op_sequence_map(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const Onnx__GraphProto *g = graph_attr(m, n, "body");
  if (!g) return false;
  if (nin < 1 || nin > SUB_MAX / 2) return imp_fail(m, RILL_MALFORMED, "SequenceMap takes a sequence and at most %d more inputs", SUB_MAX / 2 - 1), false;
  for (int i = 0; i < nin; i++) NEED(i);
  if (!in[0]->seq || in[0]->opt) return imp_fail(m, RILL_MALFORMED, "input 'input_sequence' must be a sequence"), false;
  int len = in[0]->nitems, nout = (int)n->n_output;
  for (int j = 1; j < nin; j++)
    if (in[j]->opt) return imp_unsup(m, "an optional passed to SequenceMap's body"), false;
    else if (in[j]->seq && in[j]->nitems != len) return imp_fail(m, RILL_MALFORMED, "sequences of %d and %d values", len, in[j]->nitems), false;
  if (nout < 1 || nout > SUB_MAX || (size_t)nout != g->n_output)
    return imp_fail(m, RILL_MALFORMED, "the node has %d outputs, the body %zu", nout, g->n_output), false;
  ival_t **res = calloc((size_t)(len * nout + 1), sizeof *res);
  sub_t *f = calloc(1, sizeof *f);
  rill_type_t types[SUB_MAX], prev[SUB_MAX];
  ival_t *caps[SUB_MAX];
  bool ok = res && f, have = false;
  if (!ok) imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; ok && i < len; i++) {
    bool same = have;
    for (int j = 0; j < nin; j++) {
      types[j] = in[j]->seq ? in[j]->items[i]->t : in[j]->t;
      same = same && rill__type_eq(&types[j], &prev[j]);
    }
    if (!same) { /* a function for these types */
      ok = sub_import(m, g, "body", types, nin, f) && caps_here(m, f, caps);
      if (!ok) {
        free(f->body.p);
        break;
      }
      sub_write(m, f, NULL, 0, NULL, 0);
      memcpy(prev, types, sizeof(rill_type_t) * (size_t)nin);
      have = true;
    }
    ival_t *args[SUB_MAX], *r[SUB_MAX];
    for (int j = 0; j < nin; j++) args[j] = in[j]->seq ? in[j]->items[i] : in[j];
    for (int k = 0; ok && k < nout; k++) {
      ok = (r[k] = imp_new(m, NULL, &f->res[k]->t)) != NULL;
      if (ok) r[k]->declared = true;
    }
    if (!ok) break;
    outs_text(m, r, nout);
    sb_printf(&m->body, "call @%s(", f->name);
    names(m, &m->body, args, nin, false);
    names(m, &m->body, caps, f->ncaps, true);
    sb_printf(&m->body, ")\n");
    for (int k = 0; k < nout; k++) res[k * len + i] = r[k];
  }
  for (int k = 0; ok && k < nout; k++) {
    /* the dtype: the body's result's, or (no items) its output's declared one */
    rill_dtype_t d = RILL_F32;
    const Onnx__TypeProto *ty = g->output[k]->type;
    if (len) d = res[k * len]->t.dtype;
    else if (!ty || ty->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !ty->tensor_type || !onnx_dtype(ty->tensor_type->elem_type, &d))
      ok = (imp_unsup(m, "an empty sequence mapped by a body whose output %d has no tensor type", k), false);
    ok = ok && imp_seq_of(m, OUT(k), res + k * len, len, d) != NULL;
  }
  free(res);
  free(f);
  return ok && !m->err;
}
