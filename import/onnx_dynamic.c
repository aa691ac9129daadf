/* onnx_dynamic.c: sizes that depend on values computed at run time
 * (docs/internals.md, "Sizes read back at run time"). A size input that is
 * neither known at import nor a size over shape variables (a shape given
 * as a graph input, NonZero's count) is read back when the program reaches
 * it: `bind_dims(%v, n0, n1, ...)` binds fresh shape variables, bound at
 * run time, and the mapping goes on with them as sizes; the ops after it
 * are typed over them and checked at the sizes bound. Values that are not
 * sizes (Reshape's 0 and -1, Expand's 1s that keep the input's dimension)
 * are resolved with ops before the read-back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* A fresh shape variable bound at run time, as a size: n0, n1, ... or,
 * for a fault flag, the prefix and a number (bind_dims names it when it
 * refuses the flag's -1). */
static int64_t fresh_var(imp_t *m, const char *prefix) {
  char nm[64];
  do snprintf(nm, sizeof nm, "%s%d", prefix ? prefix : "n", m->nbound++);
  while (isa_syms_find_var(&m->syms, nm, strlen(nm)) >= 0);
  uint32_t v;
  int64_t d = 0;
  rill_status_t st = isa_syms_var(&m->syms, nm, strlen(nm), &v);
  if (!st) st = isa_syms_var_dim(&m->syms, v, &d);
  if (st) {
    imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
    rill_status_free(st);
    return 0;
  }
  m->syms.vars.items[v].runtime = true;
  m->syms.vars.items[v].lo = 0; /* a count read back may be 0: no comparison at import may take it for at least 1 */
  return d;
}

static int read_back(imp_t *m, ival_t *v, const char *what, int64_t *out, int max, const char *flag);
int imp_read_back(imp_t *m, ival_t *v, const char *what, int64_t *out, int max) { return read_back(m, v, what, out, max, NULL); }

bool imp_bind_var(imp_t *m, ival_t *v, int64_t var) {
  const char *nm = v ? imp_use(m, v) : NULL;
  if (!nm || m->err) return false;
  char b[64];
  sb_printf(&m->body, "  bind_dims(%%%s, %s)\n", nm, isa_sym_format(&m->syms, var, b, sizeof b));
  return true;
}

/* the same, where v's last value is a fault flag: 0, or -1 when the values
 * are not valid, bound to a variable named after `flag` (invalid_pads3) that
 * bind_dims refuses as negative, naming it */
int imp_read_back_flag(imp_t *m, ival_t *v, const char *what, int64_t *out, int max, const char *flag) { return read_back(m, v, what, out, max, flag); }

static int read_back(imp_t *m, ival_t *v, const char *what, int64_t *out, int max, const char *flag) {
  if (!v) return -1;
  if (!imp_is_int(v->t.dtype)) return imp_fail(m, RILL_MALFORMED, "input '%s' must be integers", what), -1;
  if (v->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "input '%s' must be a list", what), -1;
  if (v->t.rank == 1 && isa_dim_is_sym(v->t.dims[0])) return imp_unsup(m, "input '%s' computed at run time, of a length over shape variables", what), -1;
  int64_t k = v->t.rank ? v->t.dims[0] : 1;
  if (k > max || k > RILL_MAX_RANK - 1)
    return imp_unsup(m, "input '%s' computed at run time with %lld values (at most %d)", what, (long long)k, max < RILL_MAX_RANK - 1 ? max : RILL_MAX_RANK - 1), -1;
  if (k == 0) return 0;
  ival_t *s = imp_cast(m, NULL, v, RILL_I64);
  if (!s) return -1;
  const char *nm = imp_use(m, s);
  if (m->err) return -1;
  sb_printf(&m->body, "  bind_dims(%%%s", nm);
  for (int64_t i = 0; i < k; i++) {
    out[i] = fresh_var(m, flag && i == k - 1 ? flag : NULL);
    if (m->err) return -1;
    sb_printf(&m->body, ", %s", m->syms.vars.items[m->syms.vars.len - 1].name);
  }
  sb_printf(&m->body, ")\n");
  return (int)k;
}

/* An i64[k] value of known numbers (a graph's constant). */
static ival_t *ints_const(imp_t *m, const int64_t *v, int k) {
  rill_type_t t = {RILL_I64, 1, {k}};
  return imp_const(m, &t, v);
}

/* Reshape's shape computed at run time: its 0s (unless allowzero) take x's
 * dimension and its -1 the count left over, with ops, then the sizes are
 * read back. x's dimensions must be numbers. */
int imp_reshape_sizes(imp_t *m, ival_t *x, ival_t *shape, bool allowzero, int64_t *out) {
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "a shape computed at run time for an input with sizes over shape variables"), -1;
  if (shape->t.rank != 1 || isa_dim_is_sym(shape->t.dims[0])) return imp_fail(m, RILL_MALFORMED, "input 'shape' must be a list"), -1;
  int k = (int)shape->t.dims[0];
  if (k > RILL_MAX_RANK - 1) return imp_unsup(m, "input 'shape' computed at run time with %d values (at most %d)", k, RILL_MAX_RANK - 1), -1;
  ival_t *s = imp_cast(m, NULL, shape, RILL_I64);
  rill_type_t kt = {RILL_I64, 1, {k}};
  if (!allowzero) { /* where(s == 0, x's dims, s) */
    int64_t xd[RILL_MAX_RANK] = {0};
    for (int i = 0; i < k; i++) xd[i] = i < x->t.rank ? x->t.dims[i] : 0;
    ival_t *z = imp_bin(m, NULL, "eq", s, imp_scalar_int(m, RILL_I64, 0));
    ival_t *args[3] = {z, ints_const(m, xd, k), s};
    s = args[0] && args[1] && s ? imp_emit(m, NULL, &kt, "where", args, 3, NULL) : NULL;
  }
  /* -1: numel / the product of the others */
  ival_t *neg = imp_bin(m, NULL, "eq", s, imp_scalar_int(m, RILL_I64, -1));
  ival_t *wargs[3] = {neg, imp_scalar_int(m, RILL_I64, 1), s};
  ival_t *rest = neg && wargs[1] && s ? imp_emit(m, NULL, &kt, "where", wargs, 3, NULL) : NULL;
  rill_type_t st = {RILL_I64, 0, {0}};
  ival_t *prod = NULL;
  for (int i = 0; i < k && rest; i++) {
    ival_t *e = imp_reshape(m, NULL, imp_slice1(m, rest, 0, i, i + 1, 1), &st);
    prod = prod ? imp_bin(m, NULL, "mul", prod, e) : e;
  }
  if (!prod) prod = imp_scalar_int(m, RILL_I64, 1);
  /* a product of 0 leaves -1 undefined: divide by 1 there (the view then fails at the sizes bound) */
  ival_t *z2 = imp_bin(m, NULL, "eq", prod, imp_scalar_int(m, RILL_I64, 0));
  ival_t *pargs[3] = {z2, imp_scalar_int(m, RILL_I64, 1), prod};
  ival_t *safe = z2 && pargs[1] && prod ? imp_emit(m, NULL, &st, "where", pargs, 3, NULL) : NULL;
  /* (the language's div is a float one: exact in f64 below 2^53 elements) */
  ival_t *num = imp_scalar(m, RILL_F64, (double)imp_numel(&x->t));
  ival_t *fill = imp_cast(m, NULL, imp_bin(m, NULL, "div", num, imp_cast(m, NULL, safe, RILL_F64)), RILL_I64);
  ival_t *fargs[3] = {neg, fill, s};
  s = neg && fill && s ? imp_emit(m, NULL, &kt, "where", fargs, 3, NULL) : NULL;
  return s ? imp_read_back(m, s, "shape", out, RILL_MAX_RANK) : -1;
}

/* Expand's shape computed at run time: where x's (right-aligned) dimension
 * is a number other than 1, the result keeps it; elsewhere the size is
 * read back. */
int imp_expand_sizes(imp_t *m, ival_t *x, ival_t *shape, int64_t *out) {
  if (shape->t.rank != 1 || isa_dim_is_sym(shape->t.dims[0])) return imp_fail(m, RILL_MALFORMED, "input 'shape' must be a list"), -1;
  int k = (int)shape->t.dims[0], r = x->t.rank, n = k > r ? k : r;
  if (n > RILL_MAX_RANK - 1) return imp_unsup(m, "Expand to rank %d with a shape computed at run time (at most %d)", n, RILL_MAX_RANK - 1), -1;
  int64_t got[RILL_MAX_RANK];
  int kk = imp_read_back(m, shape, "shape", got, RILL_MAX_RANK);
  if (kk < 0) return -1;
  for (int i = 0; i < n; i++) {
    int si = i - (n - k), xi = i - (n - r);
    int64_t have = xi >= 0 ? x->t.dims[xi] : 1;
    out[i] = have != 1 || si < 0 ? have : got[si];
  }
  return n;
}

/* v (one element of dtype d) as a scalar */
static bool scalar_like(imp_t *m, ival_t *v, rill_dtype_t d, const char *what, ival_t **out) {
  if (imp_numel(&v->t) != 1 || v->t.dtype != d) return imp_fail(m, RILL_MALFORMED, "input '%s' must be one %s", what, rill_dtype_name(d)), false;
  rill_type_t st = {d, 0, {0}};
  return (*out = imp_reshape(m, NULL, v, &st)) != NULL;
}

/* nonzero(x) into out, its count folded where x is known, else read back
 * (into *count) */
static ival_t *nonzero_counted(imp_t *m, const char *out, ival_t *x, int64_t *count) {
  rill_type_t st = {RILL_I64, 0, {0}};
  ival_t *c = imp_cast(m, NULL, imp_cast(m, NULL, x, RILL_BOOL), RILL_I64);
  ival_t *cnt = c ? imp_emit(m, NULL, &st, "sum", &c, 1, NULL) : NULL;
  if (!cnt) return NULL;
  if (cnt->data) *count = *(const int64_t *)cnt->data;
  else if (imp_read_back(m, cnt, "count", count, 1) != 1) return NULL;
  rill_type_t o = {RILL_I64, 2, {x->t.rank, *count}};
  char l[64], a[80];
  imp_list_str(m, l, sizeof l, count, 1);
  imp_attrs(a, sizeof a, "count=%s", l);
  return imp_emit(m, out, &o, "nonzero", &x, 1, a);
}

bool onnx_op_nonzero(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (x->t.rank > RILL_MAX_RANK - 1) return imp_unsup(m, "NonZero of rank %d (at most %d)", x->t.rank, RILL_MAX_RANK - 1), false;
  int64_t count;
  return nonzero_counted(m, OUT(0), x, &count) != NULL;
}

/* Range over bounds computed at run time: n = max(ceil((limit - start) /
 * delta), 0), in f64, read back; the values start + delta * [0, n) with
 * the indices as nonzero's of n trues. */
bool imp_range_dynamic(imp_t *m, const char *out, ival_t *start, ival_t *limit, ival_t *delta) {
  rill_dtype_t d = start->t.dtype;
  if (imp_numel(&start->t) != 1 || imp_numel(&limit->t) != 1 || imp_numel(&delta->t) != 1 || limit->t.dtype != d || delta->t.dtype != d)
    return imp_fail(m, RILL_MALFORMED, "start, limit and delta must be scalars of one dtype"), false;
  if (d == RILL_BOOL) return imp_fail(m, RILL_MALFORMED, "Range of bools"), false;
  rill_type_t st = {d, 0, {0}};
  ival_t *s = imp_reshape(m, NULL, start, &st), *l = imp_reshape(m, NULL, limit, &st), *dl = imp_reshape(m, NULL, delta, &st);
  ival_t *q = imp_bin(m, NULL, "div", imp_bin(m, NULL, "sub", imp_cast(m, NULL, l, RILL_F64), imp_cast(m, NULL, s, RILL_F64)),
                      imp_cast(m, NULL, dl, RILL_F64));
  ival_t *c = imp_un(m, NULL, "ceil", q, NULL);
  ival_t *cnt = imp_cast(m, NULL, imp_bin(m, NULL, "maximum", c, imp_scalar(m, RILL_F64, 0)), RILL_I64);
  if (!cnt) return false;
  int64_t nsz;
  if (cnt->data) nsz = *(const int64_t *)cnt->data;
  else if (imp_read_back(m, cnt, "the count", &nsz, 1) != 1) return false;
  ival_t *iv = imp_cast(m, NULL, imp_iota_rt(m, nsz), d);
  return imp_bin(m, out, "add", s, imp_bin(m, NULL, "mul", iv, dl)) != NULL;
}

/* NonMaxSuppression: nms gives the selected rows (padded) and their count;
 * the count is read back and the rows taken with a gather of [0, count)
 * (nonzero of that many trues). The box limit and thresholds may be
 * computed at run time; absent, they are 0 (no box) and 0. */
bool onnx_op_nms(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *b = in[0], *s = in[1];
  if (b->t.rank != 3 || s->t.rank != 3) return imp_fail(m, RILL_MALFORMED, "boxes must be [B, N, 4] and scores [B, C, N]"), false;
  static const char *const what[3] = {"max_output_boxes_per_class", "iou_threshold", "score_threshold"};
  ival_t *args[5] = {b, s, NULL, NULL, NULL};
  int na = 4;
  for (int i = 2; i < 5; i++) {
    rill_dtype_t want = i == 2 ? RILL_I64 : RILL_F32;
    ival_t *v = IN(i) && imp_numel(&IN(i)->t) ? IN(i) : NULL;
    if (v && !scalar_like(m, v, want, what[i - 2], &args[i])) return false;
    if (!v && i < 4) args[i] = i == 2 ? imp_scalar_int(m, RILL_I64, 0) : imp_scalar(m, RILL_F32, 0);
    if (v && i == 4) na = 5;
  }
  /* B * C * N rows (N a count read back before, say: sizes over shape variables) */
  rill_type_t rt = {RILL_I64, 2, {imp_dim_mul(m, imp_dim_mul(m, b->t.dims[0], s->t.dims[1]), b->t.dims[1]), 3}}, ct = {RILL_I64, 0, {0}};
  if (m->err) return false;
  ival_t *rows = imp_new(m, NULL, &rt), *cnt = imp_new(m, NULL, &ct);
  if (!rows || !cnt) return false;
  char a[64];
  imp_attrs(a, sizeof a, "center_point_box=%lld", (long long)onnx_attr_i(n, "center_point_box", 0));
  ival_t *outs[2] = {rows, cnt};
  if (!imp_emit_multi(m, outs, 2, "nms", args, na, a)) return false;
  int64_t k;
  if (cnt->data) k = *(const int64_t *)cnt->data;
  else if (imp_read_back(m, cnt, "the count", &k, 1) != 1) return false;
  rill_type_t ot = {RILL_I64, 2, {k, 3}};
  ival_t *iv = imp_iota_rt(m, k);
  ival_t *gargs[2] = {rows, iv};
  return iv && imp_emit(m, OUT(0), &ot, "gather", gargs, 2, "axis=0") != NULL;
}

/* ---- small builders over i64 scalars (each passes a NULL on) ---- */
static ival_t *i64s(imp_t *m, int64_t v) { return imp_scalar_int(m, RILL_I64, v); }

ival_t *imp_where(imp_t *m, ival_t *c, ival_t *a, ival_t *b) {
  if (!c || !a || !b) return NULL;
  rill_type_t ab, t;
  if (!imp_bcast(m, &a->t, &b->t, &ab) || !imp_bcast(m, &ab, &c->t, &t)) return NULL;
  t.dtype = a->t.dtype;
  ival_t *args[3] = {c, a, b};
  return imp_emit(m, NULL, &t, "where", args, 3, NULL);
}

/* v[i] of a 1-D value as an i64[] */
static ival_t *elem(imp_t *m, ival_t *v, int64_t i) {
  rill_type_t st = {RILL_I64, 0, {0}};
  return imp_reshape(m, NULL, imp_slice1(m, v, 0, i, i + 1, 1), &st);
}

/* the sum of all elements, i64[] */
static ival_t *total(imp_t *m, ival_t *v) {
  if (!v) return NULL;
  rill_type_t st = {v->t.dtype, 0, {0}};
  if (!v->t.rank) return v;
  return imp_emit(m, NULL, &st, "sum", &v, 1, NULL);
}

/* the i64 scalars v[0..k) as an i64[k] */
static ival_t *stack(imp_t *m, ival_t **v, int k) {
  rill_type_t one = {RILL_I64, 1, {1}}, t = {RILL_I64, 1, {k}};
  ival_t *p[RILL_MAX_RANK + 2];
  for (int i = 0; i < k; i++)
    if (!(p[i] = imp_reshape(m, NULL, v[i], &one))) return NULL;
  return k == 1 ? p[0] : imp_emit(m, NULL, &t, "concat", p, k, "axis=0");
}

/* x (an integer list input) as i64[k]: its length k, or -1 after a failure */
static int int_list(imp_t *m, ival_t *x, const char *what, ival_t **out) {
  if (!imp_is_int(x->t.dtype)) return imp_fail(m, RILL_MALFORMED, "input '%s' must be integers", what), -1;
  if (x->t.rank != 1) return imp_fail(m, RILL_MALFORMED, "input '%s' must be a list", what), -1;
  if (isa_dim_is_sym(x->t.dims[0])) return imp_unsup(m, "input '%s' computed at run time, of a length over shape variables", what), -1;
  if (x->sym && !(x = imp_sizes_tensor(m, x))) return -1; /* sizes over shape variables, counted at run time */
  *out = imp_cast(m, NULL, x, RILL_I64);
  return *out ? (int)x->t.dims[0] : -1;
}

/* [0, 1, ..., n-1] as i64[n], n a number (a constant up to ONNX_FOLD_MAX)
 * or a size read back (nonzero of n trues) */
ival_t *imp_iota_rt(imp_t *m, int64_t n) {
  if (!isa_dim_is_sym(n) && n <= ONNX_FOLD_MAX) {
    rill_type_t et = {RILL_I64, 1, {0}};
    return n ? imp_iota(m, RILL_I64, n) : imp_const(m, &et, "");
  }
  rill_type_t bt = {RILL_BOOL, 1, {n}}, it = {RILL_I64, 2, {1, n}}, vt = {RILL_I64, 1, {n}};
  ival_t *ones = imp_broadcast(m, NULL, imp_scalar_int(m, RILL_BOOL, 1), &bt);
  char l1[64], a[80];
  imp_list_str(m, l1, sizeof l1, &n, 1);
  imp_attrs(a, sizeof a, "count=%s", l1);
  ival_t *ix = ones ? imp_emit(m, NULL, &it, "nonzero", &ones, 1, a) : NULL;
  return ix ? imp_sized_view(m, NULL, ix, &vt) : NULL;
}

/* x gathered along axis at start + step * [0, n): x's type with n there */
static ival_t *take(imp_t *m, const char *out, ival_t *x, int axis, ival_t *start, ival_t *step, int64_t nsz) {
  ival_t *idx = imp_bin(m, NULL, "add", start, imp_bin(m, NULL, "mul", step, imp_iota_rt(m, nsz)));
  return imp_gather_axis(m, out, x, idx, axis);
}

/* Slice with starts, ends, axes or steps computed at run time (x's dims
 * numbers): per axis of x its start, end and step made with ops (Python's
 * slice.indices, as ONNX says), the result's sizes read back together with a
 * flag that is 0 for a valid slice and -1 for an axis out of range or given
 * twice or a step of 0 (bind_dims refuses it as a negative size), then a
 * gather of start + step * [0, n) along each axis sliced. */
bool imp_slice_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *starts, ival_t *ends, ival_t *axes, ival_t *steps) {
  int r = x->t.rank;
  if (r + 1 > RILL_MAX_RANK - 1) return imp_unsup(m, "a slice computed at run time of rank %d (at most %d)", r, RILL_MAX_RANK - 2), false;
  ival_t *s64, *e64, *a64 = NULL, *p64 = NULL;
  int k = int_list(m, starts, "starts", &s64);
  if (k < 0 || int_list(m, ends, "ends", &e64) != k || (axes && int_list(m, axes, "axes", &a64) != k) || (steps && int_list(m, steps, "steps", &p64) != k))
    return m->err ? false : (imp_fail(m, RILL_MALFORMED, "starts, ends, axes and steps differ in length"), false);
  if (k > r) return imp_fail(m, RILL_MALFORMED, "%d starts for an input of rank %d", k, r), false;
  int64_t kax[RILL_MAX_RANK];
  bool known_axes = !axes || a64->data;
  ival_t *an = NULL, *bad = i64s(m, 0), *found = i64s(m, 0);
  if (known_axes) {
    uint32_t seen = 0;
    for (int i = 0; i < k; i++) {
      kax[i] = axes ? rill_element_get_int(RILL_I64, a64->data, (size_t)i) : i;
      if (!imp_norm_axis(m, kax[i], r, &kax[i])) return false;
      if (seen & (1u << kax[i])) return imp_fail(m, RILL_MALFORMED, "an axis sliced twice"), false;
      seen |= 1u << kax[i];
    }
  } else {
    an = imp_where(m, imp_bin(m, NULL, "lt", a64, i64s(m, 0)), imp_bin(m, NULL, "add", a64, i64s(m, r)), a64);
  }
  ival_t *S[RILL_MAX_RANK], *P[RILL_MAX_RANK], *N[RILL_MAX_RANK + 1];
  int ax[RILL_MAX_RANK], ns = 0;
  for (int d = 0; d < r && !m->err; d++) {
    int64_t D = x->t.dims[d];
    ival_t *s, *e, *p, *Dv = imp_dim_scalar(m, D); /* D at run time where it is over shape variables (a count read back) */
    if (known_axes) {
      int i = 0;
      while (i < k && kax[i] != d) i++;
      if (i == k) continue;
      s = elem(m, s64, i), e = elem(m, e64, i), p = p64 ? elem(m, p64, i) : i64s(m, 1);
    } else { /* the entries naming d: none (the whole axis) or one */
      ival_t *hit = imp_cast(m, NULL, imp_bin(m, NULL, "eq", an, i64s(m, d)), RILL_I64), *cnt = total(m, hit);
      ival_t *present = imp_bin(m, NULL, "gt", cnt, i64s(m, 0));
      s = imp_where(m, present, total(m, imp_bin(m, NULL, "mul", hit, s64)), i64s(m, 0));
      e = imp_where(m, present, total(m, imp_bin(m, NULL, "mul", hit, e64)), Dv);
      p = p64 ? imp_where(m, present, total(m, imp_bin(m, NULL, "mul", hit, p64)), i64s(m, 1)) : i64s(m, 1);
      bad = imp_bin(m, NULL, "add", bad, imp_bin(m, NULL, "maximum", imp_bin(m, NULL, "sub", cnt, i64s(m, 1)), i64s(m, 0)));
      found = imp_bin(m, NULL, "add", found, cnt);
    }
    ival_t *zero = imp_bin(m, NULL, "eq", p, i64s(m, 0));
    bad = imp_bin(m, NULL, "add", bad, imp_cast(m, NULL, zero, RILL_I64));
    p = imp_where(m, zero, i64s(m, 1), p);
    ival_t *pos = imp_bin(m, NULL, "gt", p, i64s(m, 0));
    ival_t *D1 = imp_bin(m, NULL, "add", Dv, i64s(m, 1)), *Dm1 = imp_bin(m, NULL, "sub", Dv, i64s(m, 1));
    ival_t *lo = imp_where(m, pos, i64s(m, 0), i64s(m, -1)), *hi = imp_where(m, pos, Dv, Dm1);
    ival_t *v[2] = {s, e};
    for (int j = 0; j < 2; j++) { /* clamped into [-D-1, D+1] (no overflow), made non-negative, clamped into [lo, hi] */
      ival_t *c = imp_bin(m, NULL, "minimum", imp_bin(m, NULL, "maximum", v[j], imp_bin(m, NULL, "sub", i64s(m, 0), D1)), D1);
      c = imp_where(m, imp_bin(m, NULL, "lt", c, i64s(m, 0)), imp_bin(m, NULL, "add", c, Dv), c);
      v[j] = imp_bin(m, NULL, "minimum", imp_bin(m, NULL, "maximum", c, lo), hi);
    }
    /* n = max(ceil((e - s) / step), 0), in f64 (exact: |e - s| <= D + 1) */
    ival_t *q = imp_bin(m, NULL, "div", imp_cast(m, NULL, imp_bin(m, NULL, "sub", v[1], v[0]), RILL_F64), imp_cast(m, NULL, p, RILL_F64));
    N[ns] = imp_cast(m, NULL, imp_bin(m, NULL, "maximum", imp_un(m, NULL, "ceil", q, NULL), imp_scalar(m, RILL_F64, 0)), RILL_I64);
    S[ns] = v[0], P[ns] = p, ax[ns++] = d;
  }
  if (!known_axes) bad = imp_bin(m, NULL, "add", bad, imp_bin(m, NULL, "sub", i64s(m, k), found)); /* entries out of range */
  /* the flag: 0 when valid, else -1 */
  N[ns] = imp_bin(m, NULL, "sub", i64s(m, 0), imp_bin(m, NULL, "minimum", bad, i64s(m, 1)));
  if (m->err) return false;
  if (!ns) return imp_alias(m, out, x) != NULL;
  int64_t got[RILL_MAX_RANK + 1];
  ival_t *vec = stack(m, N, ns + 1);
  if (!vec) return false;
  if (vec->data) { /* known after all (folded) */
    for (int i = 0; i <= ns; i++) got[i] = rill_element_get_int(RILL_I64, vec->data, (size_t)i);
    if (got[ns]) return imp_fail(m, RILL_MALFORMED, "an axis out of range or sliced twice, or a step of 0"), false;
  } else if (imp_read_back_flag(m, vec, "the slice's sizes", got, RILL_MAX_RANK, "invalid_slice") != ns + 1) {
    return false;
  }
  ival_t *y = x;
  for (int i = 0; i < ns && y; i++) y = take(m, i == ns - 1 ? out : NULL, y, ax[i], S[i], P[i], got[i]);
  return y != NULL;
}

/* Axes (a64, i64[k], computed at run time) over `span` dims: hit[d] := how
 * often d is named (negative axes counted from the end); the return: the
 * count of faults (an axis out of range or named twice), i64[] */
static ival_t *axes_named(imp_t *m, ival_t *a64, int k, int span, ival_t **hit) {
  ival_t *an = imp_where(m, imp_bin(m, NULL, "lt", a64, i64s(m, 0)), imp_bin(m, NULL, "add", a64, i64s(m, span)), a64);
  ival_t *bad = i64s(m, 0), *found = i64s(m, 0);
  for (int d = 0; d < span; d++) {
    hit[d] = total(m, imp_cast(m, NULL, imp_bin(m, NULL, "eq", an, i64s(m, d)), RILL_I64));
    found = imp_bin(m, NULL, "add", found, hit[d]);
    bad = imp_bin(m, NULL, "add", bad, imp_bin(m, NULL, "maximum", imp_bin(m, NULL, "sub", hit[d], i64s(m, 1)), i64s(m, 0)));
  }
  return imp_bin(m, NULL, "add", bad, imp_bin(m, NULL, "sub", i64s(m, k), found));
}

/* The j-th of dims[0..span) not named (hit[d] 0), i64[]; 0 where there is none */
static ival_t *dim_unnamed(imp_t *m, const int64_t *dims, int span, ival_t **hit, int j) {
  ival_t *v = i64s(m, 0), *before = i64s(m, 0);
  for (int d = 0; d < span; d++) {
    ival_t *here = imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "eq", hit[d], i64s(m, 0)),
                           imp_bin(m, NULL, "eq", imp_bin(m, NULL, "sub", i64s(m, d), before), i64s(m, j)));
    v = imp_where(m, here, i64s(m, dims[d]), v);
    before = imp_bin(m, NULL, "add", before, hit[d]);
  }
  return v;
}

/* the flag read back after sizes: 0 when there are no faults, else -1 */
static ival_t *fault_flag(imp_t *m, ival_t *bad) { return imp_bin(m, NULL, "sub", i64s(m, 0), imp_bin(m, NULL, "minimum", bad, i64s(m, 1))); }

/* Squeeze's and Unsqueeze's axes computed at run time (their count is known,
 * so the result's rank is): the result's dims made with ops from x's (numbers)
 * and the axes, read back with a flag that is 0 when the axes are valid (in
 * range, none twice, squeezing only 1s) and -1 if not (bind_dims refuses it as
 * a negative size), then a view of x at those sizes. */
bool imp_squeeze_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *axes, bool squeeze) {
  int r = x->t.rank;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "axes computed at run time for an input with sizes over shape variables"), false;
  ival_t *a64;
  int k = int_list(m, axes, "axes", &a64);
  if (k < 0) return false;
  int R = squeeze ? r - k : r + k, span = squeeze ? r : R;
  if (R < 0) return imp_fail(m, RILL_MALFORMED, "%d axes for an input of rank %d", k, r), false;
  if (R + 1 > RILL_MAX_RANK - 1) return imp_unsup(m, "a result of rank %d with axes computed at run time (at most %d)", R, RILL_MAX_RANK - 2), false;
  ival_t *hit[RILL_MAX_RANK], *D[RILL_MAX_RANK + 1];
  ival_t *bad = axes_named(m, a64, k, span, hit);
  for (int d = 0; squeeze && d < r; d++)
    if (x->t.dims[d] != 1) bad = imp_bin(m, NULL, "add", bad, hit[d]);
  /* result dim j: squeeze: the j-th dim not named; unsqueeze: 1 where named,
   * else x's dim at j less the names below j */
  for (int j = 0; j < R; j++) {
    if (squeeze) {
      D[j] = dim_unnamed(m, x->t.dims, r, hit, j);
      continue;
    }
    ival_t *before = i64s(m, 0);
    for (int d = 0; d < j; d++) before = imp_bin(m, NULL, "add", before, hit[d]);
    ival_t *src = imp_bin(m, NULL, "sub", i64s(m, j), before), *xd = i64s(m, 1);
    for (int i = 0; i < r; i++) xd = imp_where(m, imp_bin(m, NULL, "eq", src, i64s(m, i)), i64s(m, x->t.dims[i]), xd);
    D[j] = imp_where(m, imp_bin(m, NULL, "gt", hit[j], i64s(m, 0)), i64s(m, 1), xd);
  }
  D[R] = fault_flag(m, bad);
  if (m->err) return false;
  ival_t *vec = stack(m, D, R + 1);
  int64_t got[RILL_MAX_RANK + 1];
  if (!vec || imp_read_back_flag(m, vec, "axes", got, RILL_MAX_RANK, "invalid_axes") != R + 1) return false;
  rill_type_t o = {x->t.dtype, R, {0}};
  for (int j = 0; j < R; j++) o.dims[j] = got[j];
  return imp_sized_view(m, out, x, &o) != NULL;
}

/* A reduction over axes computed at run time (their count k is known, so
 * the result's rank is): x's dims numbers; along each dim d that may be
 * named, y := named(d) ? op(y over d, kept and broadcast back) : y (op one
 * of sum, mean, max, min, prod, which compose dim by dim), then the first
 * element along each named dim (a gather of [0, n), n = 1 or x's dim, read
 * back with a fault flag) and, without keepdims, a view without those
 * dims (their sizes read back too). */
ival_t *imp_reduce_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *axes, const char *op, bool keep) {
  int r = x->t.rank;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "axes computed at run time for an input with sizes over shape variables");
  ival_t *a64;
  int k = int_list(m, axes, "axes", &a64);
  if (k < 0) return NULL;
  if (r + 1 > RILL_MAX_RANK - 1) return imp_unsup(m, "a reduction of rank %d over axes computed at run time (at most %d)", r, RILL_MAX_RANK - 2);
  ival_t *hit[RILL_MAX_RANK], *N[RILL_MAX_RANK + 1];
  ival_t *bad = axes_named(m, a64, k, r, hit);
  ival_t *y = x;
  for (int d = 0; d < r && y; d++) {
    ival_t *named = imp_bin(m, NULL, "gt", hit[d], i64s(m, 0));
    N[d] = imp_where(m, named, i64s(m, 1), i64s(m, x->t.dims[d]));
    if (x->t.dims[d] == 1) continue;
    if (!x->t.dims[d] && (!strcmp(op, "max") || !strcmp(op, "min"))) return imp_unsup(m, "max or min over an empty dimension");
    rill_type_t kt = y->t;
    kt.dims[d] = 1;
    char a[64];
    imp_attrs(a, sizeof a, "axes=[%d], keepdims=true", d);
    ival_t *red = imp_emit(m, NULL, &kt, op, &y, 1, a);
    y = imp_where(m, named, imp_broadcast(m, NULL, red, &y->t), y);
  }
  N[r] = fault_flag(m, bad);
  if (m->err || !y) return NULL;
  int64_t got[RILL_MAX_RANK + 1];
  ival_t *vec = stack(m, N, r + 1);
  if (!vec || imp_read_back_flag(m, vec, "axes", got, RILL_MAX_RANK, "invalid_axes") != r + 1) return NULL;
  for (int d = 0; d < r && y; d++)
    if (x->t.dims[d] != 1) y = take(m, NULL, y, d, i64s(m, 0), i64s(m, 1), got[d]);
  if (y && keep) return out ? imp_alias(m, out, y) : y;
  int R = r - k;
  if (R < 0) return imp_fail(m, RILL_MALFORMED, "%d axes for an input of rank %d", k, r);
  for (int j = 0; j < R; j++) N[j] = dim_unnamed(m, x->t.dims, r, hit, j);
  if (!R) N[R++] = i64s(m, 1); /* a result of rank 0: nothing to read back but its count, 1 */
  if (!y || m->err || !(vec = stack(m, N, R))) return NULL;
  int64_t dims[RILL_MAX_RANK];
  if (imp_read_back(m, vec, "axes", dims, RILL_MAX_RANK) != R) return NULL;
  rill_type_t o = {y->t.dtype, r - k, {0}};
  for (int j = 0; j < o.rank; j++) o.dims[j] = dims[j];
  return imp_sized_view(m, out, y, &o);
}

/* Split's sizes computed at run time (s64, i64[k]): read back with a flag
 * that is 0 when they add up to the axis (else -1, which bind_dims refuses,
 * naming invalid_split; a negative size is refused by itself), then a
 * gather of each part into parts[i] (named names[i] where given). */
bool imp_split_parts(imp_t *m, char *const *names, ival_t *x, int64_t axis, ival_t *s64, int k, ival_t **parts) {
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "split sizes computed at run time for an input with sizes over shape variables"), false;
  if (k + 1 > RILL_MAX_RANK - 1) return imp_unsup(m, "a split into %d parts with sizes computed at run time (at most %d)", k, RILL_MAX_RANK - 2), false;
  ival_t *sum = total(m, s64), *neg = total(m, imp_cast(m, NULL, imp_bin(m, NULL, "lt", s64, i64s(m, 0)), RILL_I64));
  rill_type_t one = {RILL_I64, 1, {1}};
  ival_t *bad = imp_bin(m, NULL, "add", neg, imp_cast(m, NULL, imp_bin(m, NULL, "ne", sum, i64s(m, x->t.dims[axis])), RILL_I64));
  /* the sizes read back at least 0 (the flag says why they are wrong) */
  ival_t *v[2] = {imp_bin(m, NULL, "maximum", s64, i64s(m, 0)), imp_reshape(m, NULL, fault_flag(m, bad), &one)};
  rill_type_t vt = {RILL_I64, 1, {k + 1}};
  ival_t *vec = v[0] && v[1] ? imp_emit(m, NULL, &vt, "concat", v, 2, "axis=0") : NULL;
  int64_t got[RILL_MAX_RANK + 1];
  if (!vec || imp_read_back_flag(m, vec, "split", got, RILL_MAX_RANK, "invalid_split") != k + 1) return false;
  ival_t *start = i64s(m, 0);
  for (int i = 0; i < k; i++) {
    if ((!names || names[i]) && !(parts[i] = take(m, names ? names[i] : NULL, x, (int)axis, start, i64s(m, 1), got[i]))) return false;
    start = imp_bin(m, NULL, "add", start, elem(m, s64, i));
  }
  return !m->err;
}

bool imp_split_dynamic(imp_t *m, const Onnx__NodeProto *n, ival_t *x, int64_t axis, ival_t *split) {
  int nout = (int)n->n_output;
  ival_t *s64, *parts[RILL_MAX_RANK];
  int k = int_list(m, split, "split", &s64);
  if (k < 0) return false;
  if (k != nout) return imp_fail(m, RILL_MALFORMED, "%d sizes for %d outputs", k, nout), false;
  if (k > RILL_MAX_RANK - 2) return imp_unsup(m, "a split into %d parts with sizes computed at run time (at most %d)", k, RILL_MAX_RANK - 2), false;
  char *names[RILL_MAX_RANK];
  for (int i = 0; i < k; i++) names[i] = (char *)OUT(i);
  return imp_split_parts(m, names, x, axis, s64, k, parts);
}

/* s as i64[k] (an integer list input), for imp_split_parts */
int imp_int_list(imp_t *m, ival_t *x, const char *what, ival_t **out) { return int_list(m, x, what, out); }

ival_t *imp_dim_scalar(imp_t *m, int64_t d) {
  ival_t *v = imp_size_scalar(m, RILL_I64, d);
  return v && v->sym ? imp_sizes_tensor(m, v) : v;
}

/* TopK's k computed at run time: k read back with a flag that is 0 when k
 * fits the axis (a number, or a size over shape variables: a count read
 * back), then topk {k=[K]}, K the variable it binds (not a sort of the whole
 * axis: the kernels' cost grows with k). */
bool imp_topk_dynamic(imp_t *m, const Onnx__NodeProto *n, ival_t *x, int64_t axis, ival_t *kv, const char *attrs_rest) {
  if (imp_numel(&kv->t) != 1 || !imp_is_int(kv->t.dtype) || kv->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "k must hold one integer"), false;
  int64_t D = x->t.dims[axis];
  if (!isa_dim_is_sym(D) && D < 1) return imp_unsup(m, "a TopK along an empty axis"), false;
  rill_type_t st = {RILL_I64, 0, {0}}, one = {RILL_I64, 1, {1}};
  ival_t *k = imp_reshape(m, NULL, imp_cast(m, NULL, kv, RILL_I64), &st);
  ival_t *out_of_range = imp_bin(m, NULL, "logical_or", imp_bin(m, NULL, "gt", k, imp_dim_scalar(m, D)), imp_bin(m, NULL, "lt", k, i64s(m, 0)));
  ival_t *parts[2] = {imp_reshape(m, NULL, imp_bin(m, NULL, "maximum", k, i64s(m, 0)), &one), imp_reshape(m, NULL, fault_flag(m, imp_cast(m, NULL, out_of_range, RILL_I64)), &one)};
  rill_type_t vt = {RILL_I64, 1, {2}};
  ival_t *vec = parts[0] && parts[1] ? imp_emit(m, NULL, &vt, "concat", parts, 2, "axis=0") : NULL;
  int64_t got[2];
  if (!vec || imp_read_back_flag(m, vec, "k", got, 2, "invalid_k") != 2) return false;
  rill_type_t vt2 = x->t, it;
  vt2.dims[axis] = got[0];
  it = vt2;
  it.dtype = RILL_I64;
  ival_t *outs[2] = {imp_new(m, OUT(0), &vt2), imp_new(m, OUT(1), &it)};
  char a[200], l[96];
  imp_list_str(m, l, sizeof l, &got[0], 1); /* k=[K]: a size over shape variables is written in a list */
  imp_attrs(a, sizeof a, "k=%s, axis=%lld, %s", l, (long long)axis, attrs_rest);
  return outs[0] && outs[1] && imp_emit_multi(m, outs, 2, "topk", &x, 1, a);
}

/* Pad's pads (and constant value) computed at run time: per axis the
 * result's size (its size plus both pads, which may be negative: a crop) is
 * read back with a flag that is 0 when every size is at least 0 and, for
 * reflect, every pad below the axis's size (else -1, which bind_dims refuses
 * as a negative size); then per axis a gather of the source index
 * j - begin: clamped (edge), mirrored once (reflect), or clamped with the
 * value where it falls outside (constant). */
bool imp_pad_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *pads, ival_t *value, const char *mode) {
  int r = x->t.rank;
  ival_t *p64;
  int k = int_list(m, pads, "pads", &p64);
  if (k < 0) return false;
  if (k != 2 * r) return imp_fail(m, RILL_MALFORMED, "pads of %d values for rank %d", k, r), false;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "pads computed at run time for an input with sizes over shape variables"), false;
  if (r + 1 > RILL_MAX_RANK - 1) return imp_unsup(m, "pads computed at run time of rank %d (at most %d)", r, RILL_MAX_RANK - 2), false;
  bool reflect = !strcmp(mode, "reflect"), constant = !strcmp(mode, "constant");
  ival_t *N[RILL_MAX_RANK + 1], *B[RILL_MAX_RANK], *bad = i64s(m, 0);
  for (int d = 0; d < r; d++) {
    int64_t D = x->t.dims[d];
    if (!D) return imp_unsup(m, "pads computed at run time around an empty dimension"), false;
    ival_t *b = elem(m, p64, d), *e = elem(m, p64, r + d);
    N[d] = imp_bin(m, NULL, "add", imp_bin(m, NULL, "add", b, e), i64s(m, D));
    B[d] = b;
    bad = imp_bin(m, NULL, "add", bad, imp_cast(m, NULL, imp_bin(m, NULL, "lt", N[d], i64s(m, 0)), RILL_I64));
    if (reflect)
      bad = imp_bin(m, NULL, "add", bad, imp_cast(m, NULL, imp_bin(m, NULL, "logical_or", imp_bin(m, NULL, "ge", b, i64s(m, D)), imp_bin(m, NULL, "ge", e, i64s(m, D))), RILL_I64));
  }
  N[r] = fault_flag(m, bad);
  for (int d = 0; d < r; d++) N[d] = imp_bin(m, NULL, "maximum", N[d], i64s(m, 0)); /* at least 0: the flag says why not */
  ival_t *vec = stack(m, N, r + 1);
  int64_t got[RILL_MAX_RANK + 1];
  if (!vec || imp_read_back_flag(m, vec, "pads", got, RILL_MAX_RANK, "invalid_pads") != r + 1) return false;
  ival_t *val = NULL;
  if (constant) {
    rill_type_t vs = {x->t.dtype, 0, {0}};
    val = value && imp_numel(&value->t) ? imp_reshape(m, NULL, imp_cast(m, NULL, value, x->t.dtype), &vs) : imp_scalar(m, x->t.dtype, 0);
    if (value && imp_numel(&value->t) > 1) return imp_fail(m, RILL_MALFORMED, "constant_value must be one value"), false;
  }
  ival_t *y = x;
  for (int d = 0; d < r && y; d++) {
    int64_t D = x->t.dims[d];
    ival_t *i = imp_bin(m, NULL, "sub", imp_iota_rt(m, got[d]), B[d]); /* the source index */
    ival_t *inside = constant ? imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "ge", i, i64s(m, 0)), imp_bin(m, NULL, "lt", i, i64s(m, D))) : NULL;
    if (reflect) {
      i = imp_where(m, imp_bin(m, NULL, "lt", i, i64s(m, 0)), imp_bin(m, NULL, "sub", i64s(m, 0), i), i);
      i = imp_where(m, imp_bin(m, NULL, "ge", i, i64s(m, D)), imp_bin(m, NULL, "sub", i64s(m, 2 * (D - 1)), i), i);
    }
    i = imp_bin(m, NULL, "minimum", imp_bin(m, NULL, "maximum", i, i64s(m, 0)), i64s(m, D - 1));
    rill_type_t o = y->t;
    o.dims[d] = got[d];
    char at[48];
    imp_attrs(at, sizeof at, "axis=%d", d);
    ival_t *gargs[2] = {y, i};
    ival_t *g = i ? imp_emit(m, NULL, &o, "gather", gargs, 2, at) : NULL;
    if (constant && g) { /* the value outside: the mask along d */
      rill_type_t mt = {RILL_BOOL, r, {0}};
      for (int j = 0; j < r; j++) mt.dims[j] = j == d ? got[d] : 1;
      g = imp_where(m, imp_sized_view(m, NULL, inside, &mt), g, val);
    }
    y = g;
  }
  return y && imp_alias(m, out, y) != NULL;
}

/* Compress: the indices of condition's trues (nonzero, its count read back
 * unless known), gathered along the axis (x flattened without one; a true
 * past the axis's end is a gather's run-time error). */
bool onnx_op_compress(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *c = in[1];
  if (c->t.rank != 1 || isa_dim_is_sym(c->t.dims[0])) return imp_fail(m, RILL_MALFORMED, "condition must be a 1-D list"), false;
  const Onnx__AttributeProto *aa = onnx_attr_get(n, "axis");
  int64_t axis = 0;
  if (!aa) {
    rill_type_t ft = {x->t.dtype, 1, {imp_numel(&x->t)}};
    if (isa_type_is_sym(&x->t)) return imp_unsup(m, "Compress without an axis of an input with sizes over shape variables"), false;
    x = imp_reshape(m, NULL, x, &ft);
  } else if (!imp_norm_axis(m, aa->i, x->t.rank, &axis)) {
    return false;
  }
  if (!x) return false;
  int64_t k = 0;
  ival_t *ix = nonzero_counted(m, NULL, c, &k);
  rill_type_t vt = {RILL_I64, 1, {k}};
  ival_t *iv = ix ? (ix->data ? imp_reshape(m, NULL, ix, &vt) : imp_sized_view(m, NULL, ix, &vt)) : NULL;
  return imp_gather_axis(m, OUT(0), x, iv, axis) != NULL;
}

/* A size given as one integer (a float truncated): known (at least lo), or
 * read back (with a flag bound to `flag` refusing one below lo, where lo is
 * above 0) into *out (a number or a shape variable); *v gets it as an i64[]
 * value. False after a failure. */
static bool size_input(imp_t *m, ival_t *in, const char *what, int64_t lo, const char *flag, ival_t **v, int64_t *out) {
  rill_type_t st = {RILL_I64, 0, {0}}, one = {RILL_I64, 1, {1}};
  ival_t *s = *v = imp_reshape(m, NULL, imp_cast(m, NULL, in, RILL_I64), &st);
  if (!s) return false;
  int64_t got[2];
  if (s->data) {
    *out = *(const int64_t *)s->data;
    if (*out < lo) return imp_fail(m, RILL_MALFORMED, "%s %lld (at least %lld)", what, (long long)*out, (long long)lo), false;
    return true;
  }
  if (lo <= 0) return imp_read_back(m, imp_reshape(m, NULL, s, &one), what, out, 1) == 1;
  ival_t *parts[2] = {imp_reshape(m, NULL, imp_bin(m, NULL, "maximum", s, i64s(m, 0)), &one),
                      imp_reshape(m, NULL, fault_flag(m, imp_cast(m, NULL, imp_bin(m, NULL, "lt", s, i64s(m, lo)), RILL_I64)), &one)};
  rill_type_t vt = {RILL_I64, 1, {2}};
  ival_t *vec = parts[0] && parts[1] ? imp_emit(m, NULL, &vt, "concat", parts, 2, "axis=0") : NULL;
  if (!vec || imp_read_back_flag(m, vec, what, got, 2, flag) != 2) return false;
  *out = got[0];
  return true;
}

/* OneHot: where(wrap(indices)[..., None] == [0, depth), on, off), the new
 * axis then moved into place; depth known, or read back (a fault flag when
 * below 1). wrap: a negative index counts from depth; outside [-depth, depth)
 * a row of off values. */
bool onnx_op_onehot(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  ival_t *ix = in[0], *dp = in[1], *vals = in[2];
  if (!imp_need_num(m, ix, "indices") || !imp_need_num(m, dp, "depth")) return false;
  if (imp_numel(&dp->t) != 1 || dp->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "depth must be one value"), false;
  if (vals->t.rank != 1 || vals->t.dims[0] != 2) return imp_fail(m, RILL_MALFORMED, "values must be [off, on]"), false;
  int r = ix->t.rank;
  if (r + 1 > RILL_MAX_RANK) return imp_unsup(m, "a result of rank %d", r + 1), false;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", -1), r + 1, &axis)) return false;
  /* depth: a float truncated (as ONNX's reference casts it) */
  ival_t *d;
  int64_t depth;
  if (!size_input(m, dp, "depth", 1, "invalid_depth", &d, &depth)) return false;
  ival_t *i64 = imp_cast(m, NULL, ix, RILL_I64); /* a float index truncated */
  i64 = imp_where(m, imp_bin(m, NULL, "lt", i64, i64s(m, 0)), imp_bin(m, NULL, "add", i64, d), i64);
  rill_type_t et = ix->t;
  et.dtype = RILL_I64;
  et.dims[et.rank++] = 1;
  ival_t *e = i64 ? imp_reshape(m, NULL, i64, &et) : NULL;
  ival_t *hot = imp_bin(m, NULL, "eq", e, imp_iota_rt(m, depth));
  rill_type_t vs = {vals->t.dtype, 0, {0}};
  ival_t *off = imp_reshape(m, NULL, imp_slice1(m, vals, 0, 0, 1, 1), &vs), *on = imp_reshape(m, NULL, imp_slice1(m, vals, 0, 1, 2, 1), &vs);
  ival_t *y = imp_where(m, hot, on, off);
  if (!y) return false;
  if (axis == r) return imp_alias(m, OUT(0), y) != NULL;
  int64_t perm[RILL_MAX_RANK];
  rill_type_t o = y->t;
  for (int j = 0, q = 0; j <= r; j++) perm[j] = j == axis ? r : q++;
  for (int j = 0; j <= r; j++) o.dims[j] = y->t.dims[perm[j]];
  char l[120], a[140];
  imp_list_str(m, l, sizeof l, perm, r + 1);
  imp_attrs(a, sizeof a, "perm=%s", l);
  return imp_emit(m, OUT(0), &o, "transpose", &y, 1, a) != NULL;
}

/* HannWindow, HammingWindow, BlackmanWindow (opset 17): over n = [0, size)
 * (size known, or read back), a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N),
 * N = size (periodic) or size - 1, in f64 cast to output_datatype (ONNX's
 * reference writes Hann's as sin(pi n / N)^2, the same function). */
bool onnx_op_window(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *sz = in[0];
  if (imp_numel(&sz->t) != 1 || !imp_is_int(sz->t.dtype) || sz->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "size must be one integer"), false;
  rill_dtype_t od;
  if (!onnx_dtype((int32_t)onnx_attr_i(n, "output_datatype", 1), &od) || od == RILL_BOOL) return imp_unsup(m, "output_datatype %lld", (long long)onnx_attr_i(n, "output_datatype", 1)), false;
  const char *t = n->op_type;
  double a0 = 0.5, a1 = 0.5, a2 = 0;
  if (!strcmp(t, "HammingWindow")) a0 = 25.0 / 46, a1 = 1 - a0;
  else if (!strcmp(t, "BlackmanWindow")) a0 = 0.42, a1 = 0.5, a2 = 0.08;
  ival_t *s;
  int64_t size;
  if (!size_input(m, sz, "size", 0, NULL, &s, &size)) return false;
  ival_t *N = imp_cast(m, NULL, onnx_attr_i(n, "periodic", 1) ? s : imp_bin(m, NULL, "sub", s, i64s(m, 1)), RILL_F64);
  ival_t *x = imp_bin(m, NULL, "div", imp_bin(m, NULL, "mul", imp_cast(m, NULL, imp_iota_rt(m, size), RILL_F64), imp_scalar(m, RILL_F64, 2 * M_PI)), N);
  ival_t *w = imp_bin(m, NULL, "sub", imp_scalar(m, RILL_F64, a0), imp_bin(m, NULL, "mul", imp_scalar(m, RILL_F64, a1), imp_un(m, NULL, "cos", x, NULL)));
  if (a2) w = imp_bin(m, NULL, "add", w, imp_bin(m, NULL, "mul", imp_scalar(m, RILL_F64, a2), imp_un(m, NULL, "cos", imp_bin(m, NULL, "mul", x, imp_scalar(m, RILL_F64, 2)), NULL)));
  return imp_cast(m, OUT(0), w, od) != NULL;
}

/* ReverseSequence: along the time axis each batch row's first len entries
 * reversed: a GatherElements of where(t < len, len - 1 - t, t); the lengths
 * checked by a gather from [0, T] (a run-time error outside it). */
bool onnx_op_reverse_sequence(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *len = in[1];
  int r = x->t.rank;
  int64_t ta = onnx_attr_i(n, "time_axis", 0), ba = onnx_attr_i(n, "batch_axis", 1);
  if (r < 2 || !((ta == 0 && ba == 1) || (ta == 1 && ba == 0))) return imp_fail(m, RILL_MALFORMED, "time_axis and batch_axis must be 0 and 1 (either way) of a rank of 2 or more"), false;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "ReverseSequence of an input with sizes over shape variables"), false;
  int64_t T = x->t.dims[ta], B = x->t.dims[ba];
  if (len->t.rank != 1 || len->t.dims[0] != B || !imp_is_int(len->t.dtype)) return imp_fail(m, RILL_MALFORMED, "sequence_lens must be [%lld] integers", (long long)B), false;
  if (!T || !B) return imp_alias(m, OUT(0), x) != NULL;
  ival_t *gargs[2] = {imp_iota(m, RILL_I64, T + 1), imp_cast(m, NULL, len, RILL_I64)};
  rill_type_t bt = {RILL_I64, 1, {B}};
  ival_t *l = gargs[0] && gargs[1] ? imp_emit(m, NULL, &bt, "gather", gargs, 2, "axis=0") : NULL;
  /* t and len as [T, B] or [B, T] */
  rill_type_t tt = {RILL_I64, 2, {1, 1}}, lt = {RILL_I64, 2, {1, 1}}, it = {RILL_I64, r, {0}};
  tt.dims[ta] = T, lt.dims[ba] = B;
  ival_t *t = imp_reshape(m, NULL, imp_iota(m, RILL_I64, T), &tt), *lv = imp_reshape(m, NULL, l, &lt);
  ival_t *idx = imp_where(m, imp_bin(m, NULL, "lt", t, lv), imp_bin(m, NULL, "sub", imp_bin(m, NULL, "sub", lv, i64s(m, 1)), t), t);
  for (int d = 0; d < r; d++) it.dims[d] = d < 2 ? (d == ta ? T : B) : 1;
  ival_t *full = idx ? imp_reshape(m, NULL, idx, &it) : NULL;
  it = x->t;
  it.dtype = RILL_I64;
  full = imp_broadcast(m, NULL, full, &it);
  return full && imp_gather_elements(m, OUT(0), x, full, ta) != NULL;
}

/* STFT (opset 17) of a signal [B, L, 1 or 2]: frame f the samples
 * [f S, f S + N), times the window, then each frame's DFT (imp_dft;
 * onesided, the default, the first N / 2 + 1 bins, for real signals):
 * [B, F, K, 2] with F = (L - N) / S + 1 rounded down. S (frame_step) and N
 * known or read back (a fault flag where S < 1, N < 1 or N > L); N is the
 * window's length where one is given (a frame_length given too must equal
 * it), else frame_length. The frames: a gather along the signal's axis of
 * f S + j, [F, N]. */
bool onnx_op_stft(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *win = IN(2), *fl = IN(3);
  if (!imp_need_float(m, x, "signal")) return false;
  if (x->t.rank != 3 || isa_type_is_sym(&x->t) || (x->t.dims[2] != 1 && x->t.dims[2] != 2))
    return imp_fail(m, RILL_MALFORMED, "signal must be [batch, length, 1 or 2] (sizes that are numbers)"), false;
  bool onesided = onnx_attr_i(n, "onesided", 1) != 0;
  if (onesided && x->t.dims[2] == 2) return imp_unsup(m, "a onesided STFT of a complex signal (onesided is for real ones)"), false;
  rill_dtype_t dt = x->t.dtype;
  int64_t L = x->t.dims[1], S, N, F, got[2];
  ival_t *sv, *nv;
  rill_type_t one = {RILL_I64, 1, {1}};
  if (!size_input(m, in[1], "frame_step", 1, "invalid_frame_step", &sv, &S)) return false;
  if (win) {
    if (win->t.rank != 1 || isa_dim_is_sym(win->t.dims[0]) || !imp_need_float(m, win, "window"))
      return imp_fail(m, RILL_MALFORMED, "window must be a list of floats (of a length that is a number)"), false;
    N = win->t.dims[0];
    nv = i64s(m, N);
    if (fl) { /* it must equal the window's length */
      ival_t *fv;
      int64_t fn;
      if (!size_input(m, fl, "frame_length", 1, "invalid_frame_length", &fv, &fn)) return false;
      if (!isa_dim_is_sym(fn) && fn != N) return imp_fail(m, RILL_MALFORMED, "frame_length %lld, the window's length %lld", (long long)fn, (long long)N), false;
      ival_t *flag = isa_dim_is_sym(fn) ? fault_flag(m, imp_cast(m, NULL, imp_bin(m, NULL, "ne", fv, nv), RILL_I64)) : NULL;
      if (flag && imp_read_back_flag(m, imp_reshape(m, NULL, flag, &one), "frame_length", got, 1, "invalid_frame_length") != 1) return false;
    }
  } else if (fl) {
    if (!size_input(m, fl, "frame_length", 1, "invalid_frame_length", &nv, &N)) return false;
  } else {
    return imp_fail(m, RILL_MALFORMED, "STFT needs a window or a frame_length"), false;
  }
  if (!isa_dim_is_sym(N) && !isa_dim_is_sym(S)) {
    if (N > L) return imp_fail(m, RILL_MALFORMED, "frame_length %lld past the signal's %lld", (long long)N, (long long)L), false;
    F = (L - N) / S + 1;
  } else { /* read back, with a flag where N > L */
    ival_t *lf = imp_scalar(m, RILL_F64, (double)L), *nf = imp_cast(m, NULL, nv, RILL_F64);
    ival_t *fv = imp_bin(m, NULL, "add", imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", imp_bin(m, NULL, "sub", lf, nf), imp_cast(m, NULL, sv, RILL_F64)), NULL), imp_scalar(m, RILL_F64, 1));
    ival_t *parts[2] = {imp_reshape(m, NULL, imp_cast(m, NULL, imp_bin(m, NULL, "maximum", fv, imp_scalar(m, RILL_F64, 0)), RILL_I64), &one),
                        imp_reshape(m, NULL, fault_flag(m, imp_cast(m, NULL, imp_bin(m, NULL, "gt", nv, i64s(m, L)), RILL_I64)), &one)};
    rill_type_t vt = {RILL_I64, 1, {2}};
    ival_t *vec = parts[0] && parts[1] ? imp_emit(m, NULL, &vt, "concat", parts, 2, "axis=0") : NULL;
    if (!vec || imp_read_back_flag(m, vec, "frame_length", got, 2, "invalid_frame_length") != 2) return false;
    F = got[0];
  }
  rill_type_t ft = {RILL_I64, 2, {F, 1}}, jt = {RILL_I64, 2, {1, N}};
  ival_t *idx = imp_bin(m, NULL, "add", imp_bin(m, NULL, "mul", imp_reshape(m, NULL, imp_iota_rt(m, F), &ft), sv), imp_reshape(m, NULL, imp_iota_rt(m, N), &jt));
  int64_t FN = imp_dim_mul(m, F, N);
  rill_type_t flat = {RILL_I64, 1, {FN}}, g1 = {dt, 3, {x->t.dims[0], FN, x->t.dims[2]}}, gt = {dt, 4, {x->t.dims[0], F, N, x->t.dims[2]}};
  ival_t *gargs[2] = {x, imp_reshape(m, NULL, idx, &flat)};
  ival_t *fr = gargs[1] ? imp_reshape(m, NULL, imp_emit(m, NULL, &g1, "gather", gargs, 2, "axis=1"), &gt) : NULL;
  if (fr && win) {
    rill_type_t wt = {dt, 4, {1, 1, N, 1}};
    fr = imp_bin(m, NULL, "mul", fr, imp_reshape(m, NULL, imp_cast(m, NULL, win, dt), &wt));
  }
  return fr && imp_dft(m, OUT(0), fr, 2, false, onesided, nv) != NULL;
}

/* MelWeightMatrix (opset 17), as ONNX's reference computes it: M =
 * num_mel_bins and S = dft_length / 2 + 1 rows (known, or read back; a
 * fault flag below 1); over k in [0, M + 2) the bins
 * b_k = floor((dft_length + 1) hz(mel(low) + k step) / sample_rate), with
 * step = (mel(high) - mel(low)) / (M + 2), mel(f) = 2595 log10(1 + f / 700)
 * and hz its inverse; column i the triangle of l, c, h = b_i, b_i+1, b_i+2:
 * (j - l) / (c - l) on [l, c] (1 at c where l = c), then (h - j) / (h - c)
 * on [c, h). In f64, cast to output_datatype. */
bool onnx_op_mel(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  for (int i = 0; i < 5; i++) {
    NEED(i);
    if (imp_numel(&in[i]->t) != 1 || in[i]->t.rank > 1 || (i < 3 ? !imp_is_int(in[i]->t.dtype) : !imp_is_float(in[i]->t.dtype)))
      return imp_fail(m, RILL_MALFORMED, "input %d must be one %s", i, i < 3 ? "integer" : "float"), false;
  }
  rill_dtype_t od;
  if (!onnx_dtype((int32_t)onnx_attr_i(n, "output_datatype", 1), &od) || od == RILL_BOOL)
    return imp_unsup(m, "output_datatype %lld", (long long)onnx_attr_i(n, "output_datatype", 1)), false;
  ival_t *mv, *dv;
  int64_t M, D, S, got[1];
  if (!size_input(m, in[0], "num_mel_bins", 1, "invalid_num_mel_bins", &mv, &M) || !size_input(m, in[1], "dft_length", 1, "invalid_dft_length", &dv, &D))
    return false;
  rill_type_t st = {RILL_F64, 0, {0}}, one = {RILL_I64, 1, {1}};
  ival_t *df = imp_cast(m, NULL, dv, RILL_F64);
  if (!isa_dim_is_sym(D)) S = D / 2 + 1;
  else if (imp_read_back(m, imp_reshape(m, NULL, imp_cast(m, NULL, imp_bin(m, NULL, "add", imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", df, imp_scalar(m, RILL_F64, 2)), NULL), imp_scalar(m, RILL_F64, 1)), RILL_I64), &one),
                           "dft_length", got, 1) == 1) S = got[0];
  else return false;
  ival_t *sr = imp_reshape(m, NULL, imp_cast(m, NULL, in[2], RILL_F64), &st), *lo = imp_reshape(m, NULL, imp_cast(m, NULL, in[3], RILL_F64), &st),
         *hi = imp_reshape(m, NULL, imp_cast(m, NULL, in[4], RILL_F64), &st);
  ival_t *c700 = imp_scalar(m, RILL_F64, 700), *c2595 = imp_scalar(m, RILL_F64, 2595), *ln10 = imp_scalar(m, RILL_F64, log(10.0)), *f1 = imp_scalar(m, RILL_F64, 1);
  ival_t *lm = imp_bin(m, NULL, "mul", c2595, imp_bin(m, NULL, "div", imp_un(m, NULL, "log", imp_bin(m, NULL, "add", f1, imp_bin(m, NULL, "div", lo, c700)), NULL), ln10));
  ival_t *hm = imp_bin(m, NULL, "mul", c2595, imp_bin(m, NULL, "div", imp_un(m, NULL, "log", imp_bin(m, NULL, "add", f1, imp_bin(m, NULL, "div", hi, c700)), NULL), ln10));
  ival_t *m2 = imp_bin(m, NULL, "add", imp_cast(m, NULL, mv, RILL_F64), imp_scalar(m, RILL_F64, 2));
  ival_t *step = imp_bin(m, NULL, "div", imp_bin(m, NULL, "sub", hm, lm), m2);
  int64_t K = imp_dim_add(m, M, 2);
  ival_t *k = imp_cast(m, NULL, imp_iota_rt(m, K), RILL_F64);
  ival_t *mel = imp_bin(m, NULL, "add", imp_bin(m, NULL, "mul", k, step), lm);
  ival_t *hz = imp_bin(m, NULL, "mul", c700, imp_bin(m, NULL, "sub", imp_bin(m, NULL, "pow", imp_scalar(m, RILL_F64, 10), imp_bin(m, NULL, "div", mel, c2595)), f1));
  ival_t *b = imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", imp_bin(m, NULL, "mul", imp_bin(m, NULL, "add", df, f1), hz), sr), NULL);
  /* l, c, h: b at i, i + 1, i + 2, as [1, M] */
  ival_t *lch[3], *iv = imp_iota_rt(m, M);
  rill_type_t gt = {RILL_F64, 1, {M}}, rt = {RILL_F64, 2, {1, M}}, jt = {RILL_I64, 2, {S, 1}};
  for (int q = 0; q < 3; q++) {
    ival_t *gargs[2] = {b, q ? imp_bin(m, NULL, "add", iv, i64s(m, q)) : iv};
    lch[q] = b && gargs[1] ? imp_reshape(m, NULL, imp_emit(m, NULL, &gt, "gather", gargs, 2, "axis=0"), &rt) : NULL;
  }
  ival_t *l = lch[0], *c = lch[1], *h = lch[2], *f0 = imp_scalar(m, RILL_F64, 0);
  ival_t *j = imp_cast(m, NULL, imp_reshape(m, NULL, imp_iota_rt(m, S), &jt), RILL_F64);
  ival_t *cl = imp_bin(m, NULL, "sub", c, l), *hc = imp_bin(m, NULL, "sub", h, c);
  ival_t *rise_in = imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "ge", j, l), imp_bin(m, NULL, "le", j, c)), imp_bin(m, NULL, "gt", cl, f0));
  ival_t *rise = imp_bin(m, NULL, "div", imp_bin(m, NULL, "sub", j, l), imp_where(m, imp_bin(m, NULL, "gt", cl, f0), cl, f1));
  ival_t *peak = imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "eq", j, c), imp_bin(m, NULL, "eq", cl, f0));
  ival_t *fall_in = imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "ge", j, c), imp_bin(m, NULL, "lt", j, h)), imp_bin(m, NULL, "gt", hc, f0));
  ival_t *fall = imp_bin(m, NULL, "div", imp_bin(m, NULL, "sub", h, j), imp_where(m, imp_bin(m, NULL, "gt", hc, f0), hc, f1));
  ival_t *w = imp_where(m, fall_in, fall, imp_where(m, rise_in, rise, imp_where(m, peak, f1, imp_bin(m, NULL, "mul", j, f0))));
  /* (j * 0: the zeros at [S, M], where the other branches broadcast to) */
  return w && imp_cast(m, OUT(0), w, od) != NULL;
}
