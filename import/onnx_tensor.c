/* onnx_tensor.c: the ONNX tensor ops: shapes, reshapes, transposes, concatenation
 * and splits, slices and gathers, Expand, Pad, Tile, Trilu, and constants */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---- shapes ---- */
bool onnx_op_shape(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  int r = in[0]->t.rank;
  int64_t s = 0, e = r;
  if (!strcmp(n->op_type, "Size")) {
    rill_type_t t = {RILL_I64, 0, {0}};
    int64_t k = 1;
    for (int d = 0; d < r; d++) k = imp_dim_mul(m, k, in[0]->t.dims[d]);
    ival_t *v = m->err ? NULL : imp_const(m, &t, &k);
    if (v) v->sym = isa_dim_is_sym(k);
    return v && imp_alias(m, OUT(0), v);
  }
  if (m->opset >= 15) {
    s = onnx_attr_i(n, "start", 0);
    e = onnx_attr_i(n, "end", r);
    if (s < 0) s += r;
    if (e < 0) e += r;
    s = s < 0 ? 0 : s > r ? r : s;
    e = e < 0 ? 0 : e > r ? r : e;
    if (e < s) e = s;
  }
  rill_type_t t = {RILL_I64, 1, {e - s}};
  ival_t *v = imp_const(m, &t, in[0]->t.dims + s);
  if (v) v->sym = isa_type_is_sym(&in[0]->t);
  return v && imp_alias(m, OUT(0), v);
}

/* Reshape's result type where sizes are over shape variables: 0 copies the
 * input's size, -1 is the element count divided exactly by the others (as
 * polynomials), and the counts must be shown equal. */
static bool reshape_sym(imp_t *m, const Onnx__NodeProto *n, ival_t *x, const int64_t *v, int k, rill_type_t *o) {
  bool allowzero = onnx_attr_i(n, "allowzero", 0) != 0;
  int minus = -1;
  int64_t known = 1, total = 1;
  o->rank = k;
  for (int d = 0; d < x->t.rank; d++) total = imp_dim_mul(m, total, x->t.dims[d]);
  for (int i = 0; i < k && !m->err; i++) {
    int64_t s = v[i];
    if (s == 0 && !allowzero) {
      if (i >= x->t.rank) return imp_fail(m, RILL_MALFORMED, "shape copies dimension %d of a rank-%d input", i, x->t.rank), false;
      s = x->t.dims[i];
    }
    if (s == -1) {
      if (minus >= 0) return imp_fail(m, RILL_MALFORMED, "shape has two -1s"), false;
      minus = i;
      continue;
    }
    if (s < 0 && !isa_dim_is_sym(s)) return imp_fail(m, RILL_MALFORMED, "negative size in shape"), false;
    known = imp_dim_mul(m, known, s);
    o->dims[i] = s;
  }
  if (m->err) return false;
  if (minus >= 0) {
    /* sizes equal on both sides cancel first ([n3+n8, 364] to [n3+n8, -1]:
     * a sum divides exactly only as a whole) */
    int64_t rest = 1, div = 1;
    bool used[RILL_MAX_RANK] = {0};
    for (int i = 0; i < k; i++) {
      if (i == minus) continue;
      int j = 0;
      while (j < x->t.rank && (used[j] || x->t.dims[j] != o->dims[i])) j++;
      if (j < x->t.rank) used[j] = true;
      else div = imp_dim_mul(m, div, o->dims[i]);
    }
    for (int j = 0; j < x->t.rank; j++)
      if (!used[j]) rest = imp_dim_mul(m, rest, x->t.dims[j]);
    if (m->err) return false;
    total = rest, known = div;
    rill_status_t st = NULL;
    if (!isa_sym_divexact(&m->syms, total, known, &o->dims[minus], &st)) {
      if (st) {
        imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
        rill_status_free(st);
        return false;
      }
      char b1[160], b2[160];
      rill_type_t kt = {x->t.dtype, 1, {known}};
      return imp_unsup(m, "a -1 in shape whose size the other sizes do not divide exactly (%s into sizes of %s elements)",
                       imp_type_str(m, &x->t, b1, sizeof b1), imp_type_str(m, &kt, b2, sizeof b2)), false;
    }
  } else if (known != total) {
    char b1[160];
    return imp_unsup(m, "a shape whose element count cannot be shown equal to the input's (%s)", imp_type_str(m, &x->t, b1, sizeof b1)), false;
  }
  return imp_type_ok(m, o);
}

bool onnx_op_reshape(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  rill_type_t o = {x->t.dtype, 0, {0}};
  const char *t = n->op_type;
  int64_t v[RILL_MAX_RANK + 1];
  if (!strcmp(t, "Reshape")) {
    int k;
    if (m->opset < 5) return imp_unsup(m, "Reshape with a shape attribute"), false;
    NEED(1);
    if (!in[1]->data && !in[1]->sym) { /* computed at run time: read back */
      if ((k = imp_reshape_sizes(m, x, in[1], onnx_attr_i(n, "allowzero", 0) != 0, v)) < 0) return false;
      o.rank = k;
      for (int i = 0; i < k; i++) o.dims[i] = v[i];
      return imp_sized_view(m, OUT(0), x, &o) != NULL;
    }
    if ((k = imp_known_dims(m, in[1], "shape", v, RILL_MAX_RANK)) < 0) return false;
    if (in[1]->sym || isa_type_is_sym(&x->t)) return reshape_sym(m, n, x, v, k, &o) && imp_reshape(m, OUT(0), x, &o) != NULL;
    bool allowzero = onnx_attr_i(n, "allowzero", 0) != 0;
    int minus = -1;
    size_t known = 1;
    o.rank = k;
    for (int i = 0; i < k; i++) {
      if (v[i] == 0 && !allowzero) {
        if (i >= x->t.rank) return imp_fail(m, RILL_MALFORMED, "shape copies dimension %d of a rank-%d input", i, x->t.rank), false;
        v[i] = x->t.dims[i];
      }
      if (v[i] == -1) {
        if (minus >= 0) return imp_fail(m, RILL_MALFORMED, "shape has two -1s"), false;
        minus = i;
        continue;
      }
      if (v[i] < 0) return imp_fail(m, RILL_MALFORMED, "negative size in shape"), false;
      if (__builtin_mul_overflow(known, (size_t)v[i], &known)) return imp_fail(m, RILL_MALFORMED, "shape too large"), false;
      o.dims[i] = v[i];
    }
    size_t total = imp_numel(&x->t);
    if (minus >= 0) {
      if (known == 0 || total % known) return imp_fail(m, RILL_MALFORMED, "shape does not fit %zu elements", total), false;
      o.dims[minus] = (int64_t)(total / known);
    } else if (known != total) {
      return imp_fail(m, RILL_MALFORMED, "shape of %zu elements for an input of %zu", known, total), false;
    }
  } else if (!strcmp(t, "Flatten")) {
    int64_t axis = onnx_attr_i(n, "axis", 1);
    if (axis < 0) axis += x->t.rank;
    if (axis < 0 || axis > x->t.rank) return imp_fail(m, RILL_MALFORMED, "axis out of range"), false;
    o.rank = 2;
    o.dims[0] = o.dims[1] = 1;
    for (int d = 0; d < x->t.rank; d++) o.dims[d < axis ? 0 : 1] = imp_dim_mul(m, o.dims[d < axis ? 0 : 1], x->t.dims[d]);
    if (m->err) return false;
  } else {
    bool sq = !strcmp(t, "Squeeze");
    int k;
    if (m->opset >= 13) {
      if (IN(1) && !in[1]->data && !in[1]->sym) return imp_squeeze_dynamic(m, OUT(0), x, in[1], sq);
      k = IN(1) ? imp_known_ints(m, in[1], "axes", v, RILL_MAX_RANK) : -1;
      if (IN(1) && k < 0) return false;
    } else {
      k = onnx_attr_ints(n, "axes", v, RILL_MAX_RANK);
    }
    if (!sq && k < 0) return imp_fail(m, RILL_MALFORMED, "missing axes"), false;
    int r = sq ? x->t.rank : x->t.rank + k;
    if (r > RILL_MAX_RANK) return imp_unsup(m, "a result of rank %d", r), false;
    uint32_t mask = 0;
    for (int i = 0; i < k; i++) {
      int64_t a;
      if (!imp_norm_axis(m, v[i], r, &a)) return false;
      if (mask & (1u << a)) return imp_fail(m, RILL_MALFORMED, "an axis given twice"), false;
      if (sq && x->t.dims[a] != 1) return imp_fail(m, RILL_MALFORMED, "squeezing dimension %lld of size %lld", (long long)a, (long long)x->t.dims[a]), false;
      mask |= 1u << a;
    }
    if (sq) {
      for (int d = 0; d < x->t.rank; d++)
        if (k < 0 ? x->t.dims[d] != 1 : !(mask & (1u << d))) o.dims[o.rank++] = x->t.dims[d];
    } else {
      int j = 0;
      for (int d = 0; d < r; d++) o.dims[o.rank++] = mask & (1u << d) ? 1 : x->t.dims[j++];
    }
  }
  if (!imp_type_ok(m, &o)) return false;
  return imp_reshape(m, OUT(0), x, &o) != NULL;
}

bool onnx_op_transpose(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int r = x->t.rank;
  int64_t perm[RILL_MAX_RANK + 1];
  int k = onnx_attr_ints(n, "perm", perm, RILL_MAX_RANK);
  if (k < 0) {
    k = r;
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  }
  if (k != r) return imp_fail(m, RILL_MALFORMED, "perm of %d values for rank %d", k, r), false;
  uint32_t seen = 0;
  rill_type_t o = x->t;
  for (int i = 0; i < r; i++) {
    if (perm[i] < 0 || perm[i] >= r || (seen & (1u << perm[i]))) return imp_fail(m, RILL_MALFORMED, "perm is not a permutation"), false;
    seen |= 1u << perm[i];
    o.dims[i] = x->t.dims[perm[i]];
  }
  char l[120], a[140];
  imp_list_str(m, l, sizeof l, perm, r);
  imp_attrs(a, sizeof a, "perm=%s", l);
  if (r == 0) return imp_alias(m, OUT(0), x) != NULL;
  return imp_emit(m, OUT(0), &o, "transpose", &x, 1, a) != NULL;
}

bool onnx_op_concat(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  if (nin < 1) return imp_fail(m, RILL_MALFORMED, "no operands"), false;
  for (int i = 0; i < nin; i++) NEED(i);
  ival_t *x = in[0];
  if (!onnx_attr_get(n, "axis")) return imp_fail(m, RILL_MALFORMED, "missing attribute axis"), false;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  rill_type_t o = x->t;
  o.dims[axis] = 0;
  ival_t *args[ONNX_MAX_INPUTS];
  int na = 0;
  for (int i = 0; i < nin; i++) {
    if (in[i]->t.rank != x->t.rank || in[i]->t.dtype != x->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of different ranks or dtypes"), false;
    for (int d = 0; d < o.rank; d++)
      if (d != axis && in[i]->t.dims[d] != x->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "operands differ outside the axis"), false;
    o.dims[axis] = imp_dim_add(m, o.dims[axis], in[i]->t.dims[axis]);
    if (in[i]->t.dims[axis] != 0) args[na++] = in[i];
  }
  if (na == 1) return imp_alias(m, OUT(0), args[0]) != NULL;
  if (na == 0) return imp_unsup(m, "a concatenation of empty tensors"), false;
  char a[48];
  imp_attrs(a, sizeof a, "axis=%lld", (long long)axis);
  return imp_emit(m, OUT(0), &o, "concat", args, na, a) != NULL;
}

bool onnx_op_split(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  int nout = (int)n->n_output;
  if (nout < 1 || nout > 64) return imp_unsup(m, "%d outputs", nout), false;
  int64_t sizes[65];
  int k = -1;
  if (m->opset >= 13) {
    if (IN(1) && !in[1]->data && !in[1]->sym && imp_numel(&in[1]->t)) return imp_split_dynamic(m, n, x, axis, in[1]);
    if (IN(1) && (k = imp_known_ints(m, in[1], "split", sizes, 64)) < 0) return false;
  } else {
    k = onnx_attr_ints(n, "split", sizes, 64);
  }
  int64_t len = x->t.dims[axis];
  if (isa_dim_is_sym(len)) return imp_unsup(m, "a split of a dimension over shape variables"), false;
  if (k < 0 && onnx_attr_get(n, "num_outputs")) {
    /* opset 18: parts of ceil(len / num_outputs), the last one smaller */
    int64_t no = onnx_attr_i(n, "num_outputs", 0);
    if (no != nout) return imp_fail(m, RILL_MALFORMED, "num_outputs=%lld for %d outputs", (long long)no, nout), false;
    int64_t part = (len + no - 1) / no;
    if (part * (no - 1) >= len) return imp_unsup(m, "a split into an empty part"), false;
    k = nout;
    for (int i = 0; i < k; i++) sizes[i] = i < k - 1 ? part : len - part * (k - 1);
  }
  if (k < 0) {
    if (len % nout) return imp_fail(m, RILL_MALFORMED, "dimension of %lld does not split into %d equal parts", (long long)len, nout), false;
    k = nout;
    for (int i = 0; i < k; i++) sizes[i] = len / nout;
  }
  if (k != nout) return imp_fail(m, RILL_MALFORMED, "%d sizes for %d outputs", k, nout), false;
  int64_t sum = 0;
  for (int i = 0; i < k; i++) {
    if (sizes[i] < 0) return imp_fail(m, RILL_MALFORMED, "negative split size"), false;
    if (sizes[i] == 0) return imp_unsup(m, "a split into an empty part"), false;
    sum += sizes[i];
  }
  if (sum != len) return imp_fail(m, RILL_MALFORMED, "split sizes add up to %lld, not %lld", (long long)sum, (long long)len), false;
  if (nout == 1) return imp_alias(m, OUT(0), x) != NULL;
  ival_t *outs[64];
  for (int i = 0; i < nout; i++) {
    rill_type_t t = x->t;
    t.dims[axis] = sizes[i];
    if (!(outs[i] = imp_new(m, OUT(i), &t))) return false;
  }
  char l[600], a[700];
  imp_list_str(m, l, sizeof l, sizes, k);
  imp_attrs(a, sizeof a, "axis=%lld, sizes=%s", (long long)axis, l);
  return imp_emit_multi(m, outs, nout, "split", &x, 1, a);
}

/* x[s:e] along axis a where the bounds are sizes over shape variables or
 * numbers (a negative one counts from the end, one of INT32_MAX or more is
 * the end): the middle part of a split into [s, e - s, D - e] (a slice's
 * bounds are numbers; a split's sizes may be sizes), parts that are 0 left
 * out, the middle at least min_len and the others at least 0 at every size
 * in the variables' ranges. 1 done, 0 failed, -1 not shown (no error set,
 * the ranges put back as they were). */
static int slice_split(imp_t *m, const char *out, ival_t *x, int64_t a, int64_t s, int64_t e, int64_t min_len) {
  int64_t dim = x->t.dims[a];
  if (!isa_dim_is_sym(e) && e >= INT32_MAX) e = dim;
  if (s == 0 && e == dim) return imp_alias(m, out, x) != NULL;
  imp_ranges_t before; /* the ranges a failed fit narrowed are put back */
  imp_ranges_save(m, &before);
  int64_t *b[2] = {&s, &e};
  for (int i = 0; i < 2; i++)
    if (!isa_dim_is_sym(*b[i]) && *b[i] < 0) {
      if (*b[i] == INT64_MIN || !imp_sym_fit(m, dim, -*b[i], INT64_MAX)) return imp_ranges_restore(m, &before), -1;
      *b[i] = imp_dim_add(m, dim, *b[i]);
    }
  int64_t parts[3] = {s, imp_dim_add(m, e, imp_dim_mul(m, s, -1)), imp_dim_add(m, dim, imp_dim_mul(m, e, -1))};
  if (m->err) return 0;
  int64_t sizes[3];
  int np = 0, mid = 0;
  for (int q = 0; q < 3; q++) {
    if (q != 1 && parts[q] == 0) continue;
    if (!imp_sym_fit(m, parts[q], q == 1 ? min_len : 0, INT64_MAX)) return imp_ranges_restore(m, &before), -1;
    if (q == 1) mid = np;
    sizes[np++] = parts[q];
  }
  if (np == 1) return imp_alias(m, out, x) != NULL;
  ival_t *outs[3] = {0};
  for (int q = 0; q < np; q++) {
    rill_type_t tq = x->t;
    tq.dims[a] = sizes[q];
    if (!(outs[q] = imp_new(m, q == mid ? out : NULL, &tq))) return 0;
  }
  sbuf_t at = {0};
  sb_printf(&at, "axis=%lld, sizes=", (long long)a);
  imp_list(m, &at, sizes, np);
  bool ok = !at.oom && imp_emit_multi(m, outs, np, "split", &x, 1, at.p);
  if (at.oom) imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  free(at.p);
  return ok;
}

/* A slice of one axis whose bounds are sizes over shape variables, as
 * torchvision splits the proposals per image (x[n3 : n3 + n8] of an axis of
 * n3 + n8): slice_split's, each part at least 0. 1 done, 0 failed, -1 not
 * this case (no error set). */
static int slice_sym(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  ival_t *x = in[0];
  int64_t s, e, a = 0, step = 1;
  if (IN(3) && (in[3]->sym || imp_numel(&in[3]->t) != 1)) return -1;
  if (IN(4) && (in[4]->sym || imp_numel(&in[4]->t) != 1)) return -1;
  if (imp_numel(&in[1]->t) != 1 || imp_numel(&in[2]->t) != 1) return -1;
  if ((in[1]->sym ? imp_known_dims(m, in[1], "starts", &s, 1) : imp_known_ints(m, in[1], "starts", &s, 1)) != 1 ||
      (in[2]->sym ? imp_known_dims(m, in[2], "ends", &e, 1) : imp_known_ints(m, in[2], "ends", &e, 1)) != 1 ||
      (IN(3) && imp_known_ints(m, in[3], "axes", &a, 1) != 1) || (IN(4) && imp_known_ints(m, in[4], "steps", &step, 1) != 1))
    return m->err ? 0 : -1;
  if (step != 1) return -1;
  if (!imp_norm_axis(m, a, x->t.rank, &a)) return 0;
  return slice_split(m, OUT(0), x, a, s, e, 0);
}

/* A slice of one axis of a numbered size up to a size over shape variables
 * (position_ids[:, :seq]): a gather of start + [0, 1, ..., end - start - 1],
 * where the variables' ranges keep the end inside the axis (a slice's bounds
 * are numbers; the indices are made at run time, imp_iota). */
static bool slice_to_size(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  ival_t *x = in[0];
  int64_t s, e, a = 0, step = 1, lo, hi;
  if (imp_known_ints(m, in[1], "starts", &s, 1) != 1 || imp_known_dims(m, in[2], "ends", &e, 1) != 1 ||
      (IN(3) && imp_known_ints(m, in[3], "axes", &a, 1) != 1) || (IN(4) && imp_known_ints(m, in[4], "steps", &step, 1) != 1))
    return m->err ? false : (imp_unsup(m, "a slice of several axes to sizes over shape variables"), false);
  if (!imp_norm_axis(m, a, x->t.rank, &a)) return false;
  int64_t dim = x->t.dims[a];
  /* over a size read back (a count: keep[:n]): a split where its parts can
   * be shown not negative, else the slice's sizes computed at run time */
  if (isa_sym_runtime(&m->syms, e) || isa_sym_runtime(&m->syms, dim)) {
    int r = slice_sym(m, n, in, nin);
    return r >= 0 ? r == 1 : imp_slice_dynamic(m, OUT(0), x, in[1], in[2], IN(3), IN(4));
  }
  if (isa_dim_is_sym(dim) || step != 1 || s < 0 || s > dim || !imp_sym_fit(m, e, s + 1, dim) || !isa_sym_bounds(&m->syms, e, &lo, &hi))
    return imp_unsup(m, "a slice to a size over shape variables other than from a start up, inside the axis at every size in the variables' ranges (give them one: --shape NAME=LO..HI)"), false;
  int64_t len = imp_dim_add(m, e, -s);
  ival_t *idx = imp_bin(m, NULL, "add", imp_iota(m, RILL_I64, len), imp_scalar_int(m, RILL_I64, s));
  return imp_gather_axis(m, OUT(0), x, idx, a) != NULL;
}

bool onnx_op_slice(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int r = x->t.rank;
  int64_t st[RILL_MAX_RANK + 1], en[RILL_MAX_RANK + 1], ax[RILL_MAX_RANK + 1], sp[RILL_MAX_RANK + 1];
  int ks, ke, ka = -1, kp = -1;
  if (m->opset < 10) {
    ks = onnx_attr_ints(n, "starts", st, RILL_MAX_RANK);
    ke = onnx_attr_ints(n, "ends", en, RILL_MAX_RANK);
    ka = onnx_attr_ints(n, "axes", ax, RILL_MAX_RANK);
    if (ks < 0 || ke < 0) return imp_fail(m, RILL_MALFORMED, "missing starts or ends"), false;
  } else {
    NEED(1); NEED(2);
    if (in[2]->sym && !in[1]->sym && (!IN(3) || !in[3]->sym) && (!IN(4) || !in[4]->sym)) return slice_to_size(m, n, in, nin);
    if (in[1]->sym && (!IN(3) || !in[3]->sym) && (!IN(4) || !in[4]->sym)) {
      int done = slice_sym(m, n, in, nin); /* else read back: the bounds as tensors */
      if (done >= 0) return done == 1;
      ival_t *b[2] = {imp_sizes_tensor(m, in[1]), in[2]->sym ? imp_sizes_tensor(m, in[2]) : in[2]};
      return b[0] && b[1] && imp_slice_dynamic(m, OUT(0), x, b[0], b[1], IN(3), IN(4));
    }
    bool rt = false; /* a value computed at run time (not a size over shape variables) */
    for (int i = 1; i < 5; i++) rt |= IN(i) && !in[i]->data;
    if (rt) return imp_slice_dynamic(m, OUT(0), x, in[1], in[2], IN(3), IN(4));
    if ((ks = imp_known_ints(m, in[1], "starts", st, RILL_MAX_RANK)) < 0 || (ke = imp_known_ints(m, in[2], "ends", en, RILL_MAX_RANK)) < 0) return false;
    if (IN(3) && (ka = imp_known_ints(m, in[3], "axes", ax, RILL_MAX_RANK)) < 0) return false;
    if (IN(4) && (kp = imp_known_ints(m, in[4], "steps", sp, RILL_MAX_RANK)) < 0) return false;
  }
  if (ka < 0) { ka = ks; for (int i = 0; i < ka; i++) ax[i] = i; }
  if (kp < 0) { kp = ks; for (int i = 0; i < kp; i++) sp[i] = 1; }
  if (ks != ke || ks != ka || ks != kp) return imp_fail(m, RILL_MALFORMED, "starts, ends, axes and steps differ in length"), false;
  rill_type_t o = x->t;
  uint32_t seen = 0;
  for (int i = 0; i < ks; i++) {
    int64_t a;
    if (!imp_norm_axis(m, ax[i], r, &a)) return false;
    if (seen & (1u << a)) return imp_fail(m, RILL_MALFORMED, "an axis sliced twice"), false;
    seen |= 1u << a;
    int64_t dim = x->t.dims[a], s = st[i], e = en[i], step = sp[i];
    if (step == 0) return imp_fail(m, RILL_MALFORMED, "a step of 0"), false;
    if (isa_dim_is_sym(dim)) {
      /* over a size over shape variables D, numbered bounds inside D's
       * smallest size, from the front or (negative) the back, or an end past
       * the axis (x[1:], x[:-1], x[-3:]): slice_split's, the slice not
       * empty; over a count read back only x[s:], the others read back too
       * (a count's range is not narrowed) */
      bool rtd = isa_sym_runtime(&m->syms, dim);
      int done = ks == 1 && step == 1 && !(rtd && (s < 0 || e < INT32_MAX)) ? slice_split(m, OUT(0), x, a, s, e, 1) : -1;
      if (done >= 0) return done == 1;
      /* any other: its sizes computed at run time and read back (the first k of a count read back, say) */
      rill_type_t lt = {RILL_I64, 1, {ks}};
      ival_t *c[4] = {imp_const(m, &lt, st), imp_const(m, &lt, en), imp_const(m, &lt, ax), imp_const(m, &lt, sp)};
      return c[0] && c[1] && c[2] && c[3] && imp_slice_dynamic(m, OUT(0), x, c[0], c[1], c[2], c[3]);
    }
    /* clamp into [-(dim+1), dim+1]: the same slice, and printable */
    s = s < -dim - 1 ? -dim - 1 : s > dim + 1 ? dim + 1 : s;
    e = e < -dim - 1 ? -dim - 1 : e > dim + 1 ? dim + 1 : e;
    st[i] = s; en[i] = e; ax[i] = a;
    /* Python's slice.indices() */
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = s < 0 ? 0 : s > dim ? dim : s;
      e = e < 0 ? 0 : e > dim ? dim : e;
      o.dims[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = s < 0 ? -1 : s > dim - 1 ? dim - 1 : s;
      e = e < 0 ? -1 : e > dim - 1 ? dim - 1 : e;
      o.dims[a] = s > e ? (s - e - step - 1) / -step : 0;
    }
  }
  for (int d = 0; d < r; d++)
    if (o.dims[d] == 0) {
      /* an empty result is known whatever x holds (Swin's window masks slice
       * empty ranges of constants at some sizes) */
      rill_type_t t = o;
      return imp_alias(m, OUT(0), imp_const(m, &t, "")) != NULL;
    }
  char l1[200], l2[200], l3[200], l4[200], a[900];
  imp_list_str(m, l1, sizeof l1, st, ks);
  imp_list_str(m, l2, sizeof l2, en, ks);
  imp_list_str(m, l3, sizeof l3, ax, ks);
  imp_list_str(m, l4, sizeof l4, sp, ks);
  imp_attrs(a, sizeof a, "starts=%s, ends=%s, axes=%s, steps=%s", l1, l2, l3, l4);
  if (ks == 0) return imp_alias(m, OUT(0), x) != NULL;
  return imp_emit(m, OUT(0), &o, "slice", &x, 1, a) != NULL;
}

/* Indices wrapped as ONNX says (a negative one counts from the end of a
 * dimension of `dim`, a number or a size over shape variables): where(idx <
 * 0, idx + dim, idx), of idx's type. */
ival_t *imp_wrap_index(imp_t *m, ival_t *idx, int64_t dim) {
  if (!idx) return NULL;
  ival_t *neg = imp_bin(m, NULL, "lt", idx, imp_scalar(m, idx->t.dtype, 0));
  ival_t *a3[3] = {neg, imp_bin(m, NULL, "add", idx, imp_size_scalar(m, idx->t.dtype, dim)), idx};
  if (!neg || !a3[1]) return NULL;
  return imp_emit(m, NULL, &idx->t, "where", a3, 3, NULL);
}

/* gather with a 1-D index, reshaped to the result's type o */
static bool gather_flat(imp_t *m, const Onnx__NodeProto *n, ival_t *x, ival_t *idx, int64_t axis, const rill_type_t *o) {
  if (!idx) return false;
  return imp_reshape(m, OUT(0), imp_gather_axis(m, NULL, x, idx, axis), o) != NULL;
}

bool onnx_op_gather(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *ix = in[1];
  if (x->t.rank < 1) return imp_fail(m, RILL_MALFORMED, "gather from a 0-d tensor"), false;
  if (ix->t.dtype != RILL_I64 && ix->t.dtype != RILL_I32) return imp_fail(m, RILL_MALFORMED, "indices must be int32 or int64"), false;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  int64_t dim = x->t.dims[axis];
  rill_type_t o = {x->t.dtype, 0, {0}};
  for (int d = 0; d < axis; d++) o.dims[o.rank++] = x->t.dims[d];
  for (int d = 0; d < ix->t.rank; d++) o.dims[o.rank++] = ix->t.dims[d];
  for (int d = (int)axis + 1; d < x->t.rank; d++) o.dims[o.rank++] = x->t.dims[d];
  if (o.rank > RILL_MAX_RANK) return imp_unsup(m, "a result of rank %d", o.rank), false;
  size_t ni = imp_numel(&ix->t);
  if (ni == 0) return imp_unsup(m, "empty indices"), false;
  if (isa_dim_is_sym(dim) && ix->data && !ix->sym) {
    /* known indices into a dimension over shape variables (the last token,
     * x[:, -1]): each a size (dim + i where negative), inside the dimension
     * at every size the ranges allow (narrowed where the user gave none) */
    int64_t *idx = malloc(ni * sizeof *idx);
    if (!idx) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
    bool any = false;
    for (size_t i = 0; i < ni && !m->err; i++) {
      int64_t v = rill_element_get_int(ix->t.dtype, ix->data, i);
      idx[i] = v < 0 ? imp_dim_add(m, dim, v) : v;
      if (!m->err && !(v < 0 ? imp_sym_fit(m, idx[i], 0, INT64_MAX) : imp_sym_fit(m, dim, v + 1, INT64_MAX)))
        imp_unsup(m, "index %lld of a dimension over shape variables that their ranges do not keep inside it", (long long)v);
      any |= isa_dim_is_sym(idx[i]);
    }
    rill_type_t it = {RILL_I64, 1, {(int64_t)ni}};
    ival_t *iv = m->err ? NULL : imp_const(m, &it, idx);
    free(idx);
    if (iv) iv->sym = any;
    return iv && gather_flat(m, n, x, iv, axis, &o);
  }
  if (ix->data) {
    /* known indices: checked and made non-negative here */
    int64_t *idx = malloc(ni * sizeof *idx);
    if (!idx) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
    for (size_t i = 0; i < ni; i++) {
      idx[i] = rill_element_get_int(ix->t.dtype, ix->data, i);
      if (idx[i] < -dim || idx[i] >= dim) {
        long long bad = (long long)idx[i];
        free(idx);
        return imp_fail(m, RILL_MALFORMED, "index %lld out of range for a dimension of %lld", bad, (long long)dim), false;
      }
      if (idx[i] < 0) idx[i] += dim;
    }
    rill_type_t it = {RILL_I64, 1, {(int64_t)ni}};
    bool ok = gather_flat(m, n, x, imp_const(m, &it, idx), axis, &o);
    free(idx);
    return ok;
  }
  /* indices at run time: negative ones wrap, as ONNX says */
  rill_type_t it = {ix->t.dtype, 1, {1}};
  for (int d = 0; d < ix->t.rank; d++) it.dims[0] = imp_dim_mul(m, it.dims[0], ix->t.dims[d]);
  ival_t *flat = imp_reshape(m, NULL, ix, &it);
  if (isa_dim_is_sym(dim)) flat = imp_cast(m, NULL, flat, RILL_I64);
  if (!flat) return false;
  return gather_flat(m, n, x, imp_wrap_index(m, flat, dim), axis, &o);
}

/* GatherElements over sizes over shape variables: the same flat indices,
 * the other coordinates' part made at run time from ranges (imp_iota) times
 * the strides (sizes, made tensors where the statement is written) */
static ival_t *gather_elements_sym(imp_t *m, const char *out, ival_t *x, ival_t *ix, int64_t axis) {
  int r = x->t.rank;
  int64_t stride[RILL_MAX_RANK], cnt = 1;
  stride[r - 1] = 1;
  for (int d = r - 2; d >= 0; d--) stride[d] = imp_dim_mul(m, stride[d + 1], x->t.dims[d + 1]);
  for (int d = 0; d < r; d++) cnt = imp_dim_mul(m, cnt, ix->t.dims[d]);
  int64_t total = imp_dim_mul(m, stride[0], x->t.dims[0]);
  if (m->err) return NULL;
  ival_t *flat = imp_bin(m, NULL, "mul", imp_wrap_index(m, imp_cast(m, NULL, ix, RILL_I64), x->t.dims[axis]), imp_size_scalar(m, RILL_I64, stride[axis]));
  for (int d = 0; d < r && flat; d++) {
    if (d == axis || ix->t.dims[d] == 1) continue;
    rill_type_t ct = {RILL_I64, r, {0}};
    for (int k = 0; k < r; k++) ct.dims[k] = k == d ? ix->t.dims[d] : 1;
    ival_t *coord = imp_reshape(m, NULL, imp_iota(m, RILL_I64, ix->t.dims[d]), &ct);
    flat = imp_bin(m, NULL, "add", flat, imp_bin(m, NULL, "mul", coord, imp_size_scalar(m, RILL_I64, stride[d])));
  }
  rill_type_t ft = {RILL_I64, 1, {cnt}}, xt = {x->t.dtype, 1, {total}}, gt = {x->t.dtype, 1, {cnt}}, o = ix->t;
  ival_t *args[2] = {imp_reshape(m, NULL, x, &xt), imp_reshape(m, NULL, flat, &ft)};
  if (!args[0] || !args[1]) return NULL;
  o.dtype = x->t.dtype;
  return imp_reshape(m, out, imp_emit(m, NULL, &gt, "gather", args, 2, "axis=0"), &o);
}

/* GatherElements: a gather from the flattened data at flat indices, the
 * index along the axis (wrapped where negative) times its stride plus the
 * other coordinates' part (known here) */
ival_t *imp_gather_axis(imp_t *m, const char *out, ival_t *x, ival_t *ix, int64_t axis) {
  if (!x || !ix) return NULL;
  rill_type_t o = x->t;
  o.dims[axis] = ix->t.dims[0];
  char at[48];
  imp_attrs(at, sizeof at, "axis=%lld", (long long)axis);
  ival_t *args[2] = {x, ix};
  return imp_emit(m, out, &o, "gather", args, 2, at);
}

ival_t *imp_gather_elements(imp_t *m, const char *out, ival_t *x, ival_t *ix, int64_t axis) {
  if (!x || !ix) return NULL;
  int r = x->t.rank;
  if (ix->t.dtype != RILL_I64 && ix->t.dtype != RILL_I32) return imp_fail(m, RILL_MALFORMED, "indices must be int32 or int64");
  if (ix->t.rank != r || r < 1) return imp_fail(m, RILL_MALFORMED, "indices of another rank");
  for (int d = 0; d < r; d++)
    if (d != axis && ix->t.dims[d] > x->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "indices larger than the data off the axis");
  if (isa_type_is_sym(&ix->t) || isa_type_is_sym(&x->t)) return gather_elements_sym(m, out, x, ix, axis);
  size_t cnt = imp_numel(&ix->t), total = imp_numel(&x->t);
  if (!cnt || !total) return imp_unsup(m, "empty data or indices");
  if (cnt > (size_t)ONNX_FOLD_MAX * 16) return imp_unsup(m, "%zu indices (at most %d)", cnt, ONNX_FOLD_MAX * 16);
  int64_t stride[RILL_MAX_RANK], dim = x->t.dims[axis];
  stride[r - 1] = 1;
  for (int d = r - 2; d >= 0; d--) stride[d] = stride[d + 1] * x->t.dims[d + 1];
  int64_t *base = malloc(cnt * sizeof *base);
  if (!base) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  for (size_t i = 0; i < cnt; i++) {
    size_t q = i;
    int64_t b = 0;
    for (int d = r - 1; d >= 0; d--) {
      int64_t c = (int64_t)(q % (size_t)ix->t.dims[d]);
      q /= (size_t)ix->t.dims[d];
      if (d != axis) b += c * stride[d];
    }
    base[i] = b;
  }
  rill_type_t ft = {RILL_I64, 1, {(int64_t)cnt}}, xt = {x->t.dtype, 1, {(int64_t)total}};
  ival_t *bv = imp_const(m, &ft, base);
  free(base);
  ival_t *idx = imp_cast(m, NULL, imp_reshape(m, NULL, ix, &(rill_type_t){ix->t.dtype, 1, {(int64_t)cnt}}), RILL_I64);
  if (!bv || !idx) return NULL;
  if (idx->data) {
    for (size_t i = 0; i < cnt; i++) {
      int64_t v = rill_element_get_int(RILL_I64, idx->data, i);
      if (v < -dim || v >= dim) return imp_fail(m, RILL_MALFORMED, "index %lld out of range for a dimension of %lld", (long long)v, (long long)dim);
    }
  }
  ival_t *wrapped = imp_wrap_index(m, idx, dim);
  ival_t *flat = imp_bin(m, NULL, "add", imp_bin(m, NULL, "mul", wrapped, imp_scalar_int(m, RILL_I64, stride[axis])), bv);
  ival_t *args[2] = {imp_reshape(m, NULL, x, &xt), flat};
  if (!args[0] || !flat) return NULL;
  rill_type_t gt = {x->t.dtype, 1, {(int64_t)cnt}}, o = ix->t;
  o.dtype = x->t.dtype;
  return imp_reshape(m, out, imp_emit(m, NULL, &gt, "gather", args, 2, "axis=0"), &o);
}

bool onnx_op_gather_elements(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", 0), in[0]->t.rank, &axis)) return false;
  return imp_gather_elements(m, OUT(0), in[0], in[1], axis) != NULL;
}

bool onnx_op_expand(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0];
  int64_t v[RILL_MAX_RANK + 1];
  int k = !in[1]->data && !in[1]->sym ? imp_expand_sizes(m, x, in[1], v) : imp_known_dims(m, in[1], "shape", v, RILL_MAX_RANK);
  if (k < 0) return false;
  rill_type_t s = {x->t.dtype, k, {0}}, o;
  for (int i = 0; i < k; i++) s.dims[i] = v[i];
  if (!imp_bcast(m, &x->t, &s, &o)) return false;
  o.dtype = x->t.dtype;
  if (!imp_type_ok(m, &o)) return false;
  bool same = o.rank == x->t.rank;
  for (int i = 0; same && i < o.rank; i++) same = o.dims[i] == x->t.dims[i];
  if (same) return imp_alias(m, OUT(0), x) != NULL;
  char l[200], a[220];
  imp_list_str(m, l, sizeof l, o.dims, o.rank);
  imp_attrs(a, sizeof a, "shape=%s", l);
  return imp_emit(m, OUT(0), &o, "broadcast_to", &x, 1, a) != NULL;
}

bool onnx_op_pad(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  char buf[32];
  const char *mode = onnx_attr_s(n, "mode", "constant", buf, sizeof buf);
  bool reflect = !strcmp(mode, "reflect"), edge = !strcmp(mode, "edge");
  if (strcmp(mode, "constant") && !reflect && !edge) return imp_unsup(m, "mode=\"%s\" (constant, reflect and edge are supported)", mode), false;
  int64_t p[2 * RILL_MAX_RANK + 1];
  int k;
  double value = 0;
  if (m->opset < 11) {
    k = onnx_attr_ints(n, "pads", p, 2 * RILL_MAX_RANK);
    value = onnx_attr_f(n, "value", 0);
  } else {
    NEED(1);
    if ((!in[1]->data && !in[1]->sym) || (IN(2) && !in[2]->data && !in[2]->sym)) { /* computed at run time */
      if (IN(3)) return imp_unsup(m, "pads or constant_value computed at run time with axes"), false;
      if (in[1]->data) { /* known pads, a value at run time: the same path */
        ival_t *pv = imp_cast(m, NULL, in[1], RILL_I64);
        return pv && imp_pad_dynamic(m, OUT(0), x, pv, IN(2), mode);
      }
      return imp_pad_dynamic(m, OUT(0), x, in[1], IN(2), mode);
    }
    if ((k = imp_known_ints(m, in[1], "pads", p, 2 * RILL_MAX_RANK)) < 0) return false;
    if (IN(2)) {
      if (!in[2]->data) return imp_unsup(m, "constant_value computed at run time"), false;
      value = rill_element_get(in[2]->t.dtype, in[2]->data, 0);
    }
    if (IN(3)) {
      /* opset 18: pads for the listed axes only, the others unpadded */
      int64_t ax[RILL_MAX_RANK + 1], full[2 * RILL_MAX_RANK] = {0};
      int na = imp_known_ints(m, in[3], "axes", ax, RILL_MAX_RANK);
      if (na < 0) return false;
      if (k != 2 * na) return imp_fail(m, RILL_MALFORMED, "pads of %d values for %d axes", k, na), false;
      uint32_t seen = 0;
      for (int i = 0; i < na; i++) {
        int64_t a;
        if (!imp_norm_axis(m, ax[i], x->t.rank, &a)) return false;
        if (seen & (1u << a)) return imp_fail(m, RILL_MALFORMED, "an axis padded twice"), false;
        seen |= 1u << a;
        full[a] = p[i];
        full[x->t.rank + a] = p[na + i];
      }
      k = 2 * x->t.rank;
      memcpy(p, full, sizeof(int64_t) * (size_t)k);
    }
  }
  if (k != 2 * x->t.rank) return imp_fail(m, RILL_MALFORMED, "pads of %d values for rank %d", k, x->t.rank), false;
  rill_type_t o = x->t;
  bool any = false;
  for (int d = 0; d < x->t.rank; d++) {
    if (p[d] < 0 || p[x->t.rank + d] < 0) return imp_unsup(m, "negative pads"), false;
    o.dims[d] += p[d] + p[x->t.rank + d];
    any |= p[d] || p[x->t.rank + d];
  }
  if (!imp_type_ok(m, &o)) return false;
  if (!any) return imp_alias(m, OUT(0), x) != NULL;
  if (reflect || edge) {
    /* per padded axis: the mirrored or repeated border slices around it */
    ival_t *cur = x;
    int r = x->t.rank, last = -1;
    for (int d = 0; d < r; d++)
      if (p[d] || p[r + d]) last = d;
    for (int d = 0; d < r && cur; d++) {
      int64_t pb = p[d], pe = p[r + d], dim = cur->t.dims[d];
      if (!pb && !pe) continue;
      if (dim == 0 || (reflect && (pb >= dim || pe >= dim))) return imp_unsup(m, "reflect or edge pads of %lld and %lld on a dimension of %lld", (long long)pb, (long long)pe, (long long)dim), false;
      ival_t *parts[3];
      int np = 0;
      for (int side = 0; side < 2; side++) {
        int64_t w = side ? pe : pb;
        if (!w) {
          if (side == 0) parts[np++] = cur;
          continue;
        }
        ival_t *part;
        if (reflect) part = side ? imp_slice1(m, cur, d, dim - 2, dim - 2 - w, -1) : imp_slice1(m, cur, d, w, 0, -1);
        else {
          rill_type_t bt = cur->t;
          bt.dims[d] = w;
          part = imp_broadcast(m, NULL, imp_slice1(m, cur, d, side ? dim - 1 : 0, side ? dim : 1, 1), &bt);
        }
        parts[np++] = part;
        if (side == 0) parts[np++] = cur;
      }
      rill_type_t ct = cur->t;
      ct.dims[d] += pb + pe;
      char a[48];
      imp_attrs(a, sizeof a, "axis=%d", d);
      cur = imp_emit(m, d == last ? OUT(0) : NULL, &ct, "concat", parts, np, a);
    }
    return cur != NULL;
  }
  char l[300], a[400];
  imp_list_str(m, l, sizeof l, p, k);
  imp_attrs(a, sizeof a, "pads=%s, value=%.17g", l, value);
  return imp_emit(m, OUT(0), &o, "pad", &x, 1, a) != NULL;
}


/* DepthToSpace, SpaceToDepth: a reshape, a transpose and a reshape */
bool onnx_op_depth_space(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (x->t.rank != 4) return imp_fail(m, RILL_MALFORMED, "input of rank %d (4 expected)", x->t.rank), false;
  int64_t b = onnx_attr_i(n, "blocksize", 0), N = x->t.dims[0], C = x->t.dims[1], H = x->t.dims[2], W = x->t.dims[3];
  if (b < 1 || b > 4096) return imp_fail(m, RILL_MALFORMED, "blocksize %lld", (long long)b), false;
  char buf[16];
  bool to_space = !strcmp(n->op_type, "DepthToSpace"), crd = !strcmp(onnx_attr_s(n, "mode", "DCR", buf, sizeof buf), "CRD");
  rill_type_t t6 = {x->t.dtype, 6, {0}}, o = x->t;
  int64_t perm[6];
  if (to_space) {
    if (C % (b * b)) return imp_fail(m, RILL_MALFORMED, "channels %lld not divisible by blocksize^2", (long long)C), false;
    int64_t c = C / (b * b);
    int64_t d6[6] = {N, b, b, c, H, W}, d6c[6] = {N, c, b, b, H, W};
    int64_t p6[6] = {0, 3, 4, 1, 5, 2}, p6c[6] = {0, 1, 4, 2, 5, 3};
    memcpy(t6.dims, crd ? d6c : d6, sizeof d6);
    memcpy(perm, crd ? p6c : p6, sizeof perm);
    o.dims[1] = c; o.dims[2] = H * b; o.dims[3] = W * b;
  } else {
    if (H % b || W % b) return imp_fail(m, RILL_MALFORMED, "spatial dims not divisible by blocksize"), false;
    int64_t d6[6] = {N, C, H / b, b, W / b, b}, p6[6] = {0, 3, 5, 1, 2, 4};
    memcpy(t6.dims, d6, sizeof d6);
    memcpy(perm, p6, sizeof perm);
    o.dims[1] = C * b * b; o.dims[2] = H / b; o.dims[3] = W / b;
  }
  ival_t *r = imp_reshape(m, NULL, x, &t6);
  rill_type_t tt = t6;
  for (int i = 0; i < 6; i++) tt.dims[i] = t6.dims[perm[i]];
  char l[100], a[120];
  imp_list_str(m, l, sizeof l, perm, 6);
  imp_attrs(a, sizeof a, "perm=%s", l);
  ival_t *tr = r ? imp_emit(m, NULL, &tt, "transpose", &r, 1, a) : NULL;
  return imp_reshape(m, OUT(0), tr, &o) != NULL;
}

/* Tile: [1,d0,1,d1,..] broadcast to [r0,d0,r1,d1,..], then merged */
bool onnx_op_tile(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0];
  int r = x->t.rank;
  int64_t rep[RILL_MAX_RANK + 1];
  bool later = !in[1]->data && !in[1]->sym; /* repeats computed at run time: read back */
  if (later && in[1]->t.rank == 1 && in[1]->t.dims[0] != r) return imp_fail(m, RILL_MALFORMED, "%lld repeats for rank %d", (long long)in[1]->t.dims[0], r), false;
  /* repeats may be sizes over shape variables (a Shape's batch), and x's
   * sizes too: the result's sizes are their products */
  int k = later ? imp_read_back(m, in[1], "repeats", rep, RILL_MAX_RANK)
          : in[1]->sym ? imp_known_dims(m, in[1], "repeats", rep, RILL_MAX_RANK) : imp_known_ints(m, in[1], "repeats", rep, RILL_MAX_RANK);
  if (k < 0) return false;
  if (k != r) return imp_fail(m, RILL_MALFORMED, "%d repeats for rank %d", k, r), false;
  if (2 * r > RILL_MAX_RANK) return imp_unsup(m, "Tile of rank %d (at most %d)", r, RILL_MAX_RANK / 2), false;
  rill_type_t a = {x->t.dtype, 2 * r, {0}}, bt = a, o = x->t;
  for (int i = 0; i < r; i++) {
    bool num = !later && !isa_dim_is_sym(rep[i]);
    if (num && rep[i] < 0) return imp_fail(m, RILL_MALFORMED, "negative repeats"), false;
    if (num && rep[i] == 0) return imp_unsup(m, "a repeat of 0 (an empty result)"), false;
    a.dims[2 * i] = 1; a.dims[2 * i + 1] = x->t.dims[i];
    bt.dims[2 * i] = rep[i]; bt.dims[2 * i + 1] = x->t.dims[i];
    o.dims[i] = imp_dim_mul(m, rep[i], x->t.dims[i]);
  }
  if (!imp_type_ok(m, &o)) return false;
  return imp_reshape(m, OUT(0), imp_broadcast(m, NULL, imp_reshape(m, NULL, x, &a), &bt), &o) != NULL;
}

/* Trilu: the input where a mask of the last two dims (known here) holds, else 0 */
/* [0, 1, ..., n-1] in dtype d: a constant, or, for n a size over shape
 * variables whose ranges bound it, a constant one longer than its largest
 * value split to n (a slice's bounds are numbers; split's sizes may be sizes) */
ival_t *imp_iota(imp_t *m, rill_dtype_t d, int64_t n) {
  int64_t lo, hi;
  if (!isa_dim_is_sym(n)) {
    if (n < 1 || n > ONNX_FOLD_MAX) return imp_unsup(m, "a range of %lld values", (long long)n);
    rill_type_t t = {d, 1, {n}};
    void *v = calloc((size_t)n, rill_dtype_size(d));
    if (!v) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++) rill_element_set_int(d, v, (size_t)i, i);
    ival_t *c = imp_const(m, &t, v);
    free(v);
    return c;
  }
  if (!imp_sym_fit(m, n, 1, ONNX_FOLD_MAX - 1) || !isa_sym_bounds(&m->syms, n, &lo, &hi))
    return imp_unsup(m, "a range over a shape variable without a bound below %d (give it one: --shape NAME=LO..HI)", ONNX_FOLD_MAX);
  rill_type_t ct = {d, 1, {hi + 1}};
  void *v = calloc((size_t)hi + 1, rill_dtype_size(d));
  if (!v) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  for (int64_t i = 0; i <= hi; i++) rill_element_set_int(d, v, (size_t)i, i);
  ival_t *all = imp_const(m, &ct, v);
  free(v);
  int64_t sizes[2] = {n, imp_dim_add(m, hi + 1, imp_dim_mul(m, n, -1))};
  rill_type_t t0 = {d, 1, {sizes[0]}}, t1 = {d, 1, {sizes[1]}};
  ival_t *outs[2] = {all ? imp_new(m, NULL, &t0) : NULL, all ? imp_new(m, NULL, &t1) : NULL};
  char l[200], a[260];
  imp_list_str(m, l, sizeof l, sizes, 2);
  imp_attrs(a, sizeof a, "axis=0, sizes=%s", l);
  return outs[0] && outs[1] && imp_emit_multi(m, outs, 2, "split", &all, 1, a) ? outs[0] : NULL;
}

/* Trilu over sizes over shape variables, or with k computed at run time
 * (kv, an i64[] value; else the number k): the mask compares column and
 * row indices made at run time */
static bool trilu_sym(imp_t *m, const Onnx__NodeProto *n, ival_t *x, int64_t k, ival_t *kv, bool upper) {
  int r = x->t.rank;
  int64_t rows = x->t.dims[r - 2], cols = x->t.dims[r - 1];
  if (!rows || !cols) return imp_alias(m, OUT(0), x) != NULL; /* empty: nothing to mask */
  rill_type_t rt = {RILL_I64, 2, {rows, 1}}, ct = {RILL_I64, 2, {1, cols}};
  ival_t *i = imp_reshape(m, NULL, imp_iota(m, RILL_I64, rows), &rt), *j = imp_reshape(m, NULL, imp_iota(m, RILL_I64, cols), &ct);
  ival_t *mask = imp_bin(m, NULL, upper ? "ge" : "le", imp_bin(m, NULL, "sub", j, i), kv ? kv : imp_scalar_int(m, RILL_I64, k));
  ival_t *args[3] = {mask, x, imp_scalar(m, x->t.dtype, 0)};
  if (!mask || !args[2]) return false;
  return imp_emit(m, OUT(0), &x->t, "where", args, 3, NULL) != NULL;
}

bool onnx_op_trilu(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int r = x->t.rank;
  if (r < 2) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 2)", r), false;
  int64_t k = 0;
  bool upper = onnx_attr_i(n, "upper", 1) != 0;
  if (IN(1)) {
    if (imp_numel(&in[1]->t) != 1 || !imp_is_int(in[1]->t.dtype)) return imp_fail(m, RILL_MALFORMED, "input 'k' must be one integer"), false;
    if (in[1]->sym) return imp_unsup(m, "input 'k' depends on a shape variable"), false;
    if (!in[1]->data) { /* k at run time: an operand of the mask's comparison */
      rill_type_t st = {RILL_I64, 0, {0}};
      ival_t *kv = imp_reshape(m, NULL, imp_cast(m, NULL, in[1], RILL_I64), &st);
      return kv && trilu_sym(m, n, x, 0, kv, upper);
    }
    k = rill_element_get_int(in[1]->t.dtype, in[1]->data, 0);
  }
  int64_t rows = x->t.dims[r - 2], cols = x->t.dims[r - 1];
  if (isa_dim_is_sym(rows) || isa_dim_is_sym(cols)) return trilu_sym(m, n, x, k, NULL, upper);
  if (rows * cols > ONNX_FOLD_MAX * 16) return imp_unsup(m, "a Trilu mask of %lld elements", (long long)(rows * cols)), false;
  if (rows * cols == 0) return imp_unsup(m, "an empty input"), false;
  rill_type_t mt = {RILL_BOOL, 2, {rows, cols}};
  uint8_t *mask = malloc((size_t)(rows * cols));
  if (!mask) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) mask[i * cols + j] = upper ? j - i >= k : j - i <= k;
  ival_t *mv = imp_const(m, &mt, mask);
  free(mask);
  ival_t *args[3] = {mv, x, imp_scalar(m, x->t.dtype, 0)};
  if (!mv || !args[2]) return false;
  return imp_emit(m, OUT(0), &x->t, "where", args, 3, NULL) != NULL;
}

/* EyeLike: known at import from the input's shape */
bool onnx_op_eyelike(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  rill_type_t t = in[0]->t;
  if (t.rank != 2) return imp_fail(m, RILL_MALFORMED, "input of rank %d (2 expected)", t.rank), false;
  int64_t dt = onnx_attr_i(n, "dtype", -1);
  if (dt >= 0 && !onnx_dtype((int32_t)dt, &t.dtype)) return imp_unsup(m, "dtype %s", onnx_dtype_name((int32_t)dt)), false;
  int64_t k = onnx_attr_i(n, "k", 0);
  ival_t *v = imp_new(m, OUT(0), &t);
  if (!v) return false;
  size_t cnt = imp_numel(&t);
  v->data = calloc(cnt ? cnt : 1, rill_dtype_size(t.dtype));
  if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (int64_t i = 0; i < t.dims[0]; i++)
    if (i + k >= 0 && i + k < t.dims[1]) {
      size_t at = (size_t)(i * t.dims[1] + i + k);
      if (imp_is_float(t.dtype)) rill_element_set(t.dtype, v->data, at, 1.0);
      else rill_element_set_int(t.dtype, v->data, at, 1);
    }
  return true;
}

/* ---- constants ---- */
bool onnx_op_constant(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const Onnx__AttributeProto *a;
  rill_type_t t = {RILL_F32, 0, {0}};
  void *data = NULL;
  if ((a = onnx_attr_get(n, "value")) && a->t) {
    rill_status_t st = onnx_tensor_read(a->t, m->base_dir, NULL, &t, &data, NULL);
    if (st) {
      imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
      rill_status_free(st);
      return false;
    }
  } else if ((a = onnx_attr_get(n, "value_float")) && a->has_f) {
    data = malloc(4);
    if (data) memcpy(data, &a->f, 4);
  } else if ((a = onnx_attr_get(n, "value_int")) && a->has_i) {
    t.dtype = RILL_I64;
    data = malloc(8);
    if (data) memcpy(data, &a->i, 8);
  } else if ((a = onnx_attr_get(n, "value_floats"))) {
    t.rank = 1;
    t.dims[0] = (int64_t)a->n_floats;
    data = malloc(4 * a->n_floats + 1);
    if (data && a->n_floats) memcpy(data, a->floats, 4 * a->n_floats);
  } else if ((a = onnx_attr_get(n, "value_ints"))) {
    t.dtype = RILL_I64;
    t.rank = 1;
    t.dims[0] = (int64_t)a->n_ints;
    data = malloc(8 * a->n_ints + 1);
    if (data && a->n_ints) memcpy(data, a->ints, 8 * a->n_ints);
  } else {
    return imp_unsup(m, "a Constant other than value, value_float(s) or value_int(s)"), false;
  }
  if (!data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  ival_t *v = imp_new(m, OUT(0), &t);
  if (!v) {
    free(data);
    return false;
  }
  v->data = data;
  return true;
}

bool onnx_op_constant_of_shape(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  int64_t v[RILL_MAX_RANK + 1];
  int k = !in[0]->data && !in[0]->sym ? imp_read_back(m, in[0], "input", v, RILL_MAX_RANK) : imp_known_dims(m, in[0], "input", v, RILL_MAX_RANK);
  if (k < 0) return false;
  rill_type_t t = {RILL_F32, k, {0}};
  for (int i = 0; i < k; i++) t.dims[i] = v[i];
  uint8_t fill[8] = {0};
  const Onnx__AttributeProto *a = onnx_attr_get(n, "value");
  if (a && a->t) {
    rill_type_t vt;
    void *d;
    rill_status_t st = onnx_tensor_read(a->t, m->base_dir, NULL, &vt, &d, NULL);
    if (st) {
      imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
      rill_status_free(st);
      return false;
    }
    if (imp_numel(&vt) != 1) {
      free(d);
      return imp_fail(m, RILL_MALFORMED, "value must hold one element"), false;
    }
    t.dtype = vt.dtype;
    memcpy(fill, d, rill_dtype_size(vt.dtype));
    free(d);
  }
  if (!imp_type_ok(m, &t)) return false;
  if (isa_type_is_sym(&t)) {
    /* sizes over shape variables: the value broadcast at run time */
    rill_type_t one = {t.dtype, 0, {0}};
    return imp_broadcast(m, OUT(0), imp_const(m, &one, fill), &t) != NULL;
  }
  ival_t *o = imp_new(m, OUT(0), &t);
  if (!o) return false;
  size_t cnt = imp_numel(&t), es = rill_dtype_size(t.dtype);
  o->data = malloc(cnt * es + 1);
  if (!o->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (size_t i = 0; i < cnt; i++) memcpy((char *)o->data + i * es, fill, es);
  return true;
}

/* Range to a size over shape variables: start + delta * [0, 1, ..., n-1]
 * with n = ceil((limit - start) / delta) as a polynomial (delta > 0) */
static bool range_sym(imp_t *m, const Onnx__NodeProto *n, ival_t **in) {
  for (int i = 0; i < 3; i++)
    if (!in[i]->data || in[i]->t.dtype != RILL_I64 || imp_numel(&in[i]->t) != 1)
      return imp_unsup(m, "a Range over sizes over shape variables with a bound computed at run time"), false;
  int64_t s = ((const int64_t *)in[0]->data)[0], l = ((const int64_t *)in[1]->data)[0], dl = ((const int64_t *)in[2]->data)[0];
  if (in[0]->sym || in[2]->sym || s < -((int64_t)1 << 40) || s > ((int64_t)1 << 40) || dl <= 0 || dl > ((int64_t)1 << 40))
    return imp_unsup(m, "a Range over sizes over shape variables other than from a number up, by a positive step"), false;
  if (!in[1]->sym && isa_dim_is_sym(l)) return imp_fail(m, RILL_MALFORMED, "limit %lld out of range", (long long)l), false;
  int64_t num = imp_dim_add(m, l, dl - 1 - s), lo, hi, cnt;
  if (m->err) return false;
  if (!imp_sym_fit(m, num, dl, INT64_MAX) || !isa_sym_bounds(&m->syms, num, &lo, &hi))
    return imp_unsup(m, "a Range over sizes over shape variables other than from a number up, by a positive step, never empty"), false;
  rill_status_t st = isa_sym_floordiv(&m->syms, num, dl, &cnt);
  if (st) {
    imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
    rill_status_free(st);
    return false;
  }
  ival_t *iota = imp_iota(m, RILL_I64, cnt);
  if (dl != 1) iota = imp_bin(m, NULL, "mul", iota, imp_scalar_int(m, RILL_I64, dl));
  return imp_bin(m, OUT(0), "add", iota, imp_scalar_int(m, RILL_I64, s)) != NULL;
}

bool onnx_op_range(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  if (in[0]->sym || in[1]->sym || in[2]->sym) return range_sym(m, n, in);
  if (!in[0]->data || !in[1]->data || !in[2]->data) return imp_range_dynamic(m, OUT(0), in[0], in[1], in[2]);
  rill_dtype_t d = in[0]->t.dtype;
  if (imp_numel(&in[0]->t) != 1 || imp_numel(&in[1]->t) != 1 || imp_numel(&in[2]->t) != 1 || in[1]->t.dtype != d || in[2]->t.dtype != d)
    return imp_fail(m, RILL_MALFORMED, "start, limit and delta must be scalars of one dtype"), false;
  /* the count is a size, worked here; the values start + i * delta are the kernels' */
  double s = rill_element_get(d, in[0]->data, 0), l = rill_element_get(d, in[1]->data, 0), dl = rill_element_get(d, in[2]->data, 0);
  if (dl == 0) return imp_fail(m, RILL_MALFORMED, "delta of 0"), false;
  double cnt = ceil((l - s) / dl);
  if (cnt < 0) cnt = 0;
  if (cnt > ONNX_FOLD_MAX) return imp_unsup(m, "a range of more than %d values", ONNX_FOLD_MAX), false;
  if (cnt == 0) return imp_unsup(m, "an empty range"), false;
  rill_type_t st = {d, 0, {0}};
  ival_t *iv = imp_iota(m, d, (int64_t)cnt);
  ival_t *start = imp_reshape(m, NULL, in[0], &st), *delta = imp_reshape(m, NULL, in[2], &st);
  return imp_bin(m, OUT(0), "add", start, imp_bin(m, NULL, "mul", iv, delta)) != NULL;
}
