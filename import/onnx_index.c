/* onnx_index.c: the indexing ops: GatherND (a gather of the data's rows at
 * flat indices), ScatterND (the core set's scatter_nd), ScatterElements
 * and Scatter (scatter_nd at each index's full coordinates) and TopK (the
 * core set's topk). */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* the most index tuples whose coordinates are written out at import */
#define INDEX_MAX ((size_t)ONNX_FOLD_MAX * 16)

static ival_t *const_i64(imp_t *m, int rank, const int64_t *dims, const int64_t *v) {
  rill_type_t t = {RILL_I64, rank, {0}};
  memcpy(t.dims, dims, sizeof dims[0] * (size_t)rank);
  return imp_const(m, &t, v);
}

/* ix (i32 or i64, its last dim k) as i64 with negative entries wrapped by
 * dims[0..k) (the last dim's column j by dims[j]); known entries out of
 * range fail the import */
static ival_t *wrap_index(imp_t *m, ival_t *ix, const int64_t *dims, int k) {
  ival_t *idx = imp_cast(m, NULL, ix, RILL_I64);
  if (!idx) return NULL;
  if (idx->data) {
    size_t cnt = imp_numel(&idx->t);
    for (size_t i = 0; i < cnt; i++) {
      int64_t v = ((const int64_t *)idx->data)[i], dim = dims[i % (size_t)k];
      if (v < -dim || v >= dim) return imp_fail(m, RILL_MALFORMED, "index %lld out of range for a dimension of %lld", (long long)v, (long long)dim);
    }
  }
  int64_t kk = k;
  ival_t *dv = const_i64(m, 1, &kk, dims);
  ival_t *a3[3] = {imp_bin(m, NULL, "lt", idx, imp_scalar_int(m, RILL_I64, 0)), imp_bin(m, NULL, "add", idx, dv), idx};
  if (!a3[0] || !a3[1]) return NULL;
  return imp_emit(m, NULL, &idx->t, "where", a3, 3, NULL);
}

/* from: the first of the indices' dims that may be a shape variable (rank: none may) */
static bool index_dtype_ok(imp_t *m, const ival_t *ix, int from) {
  if (ix->t.dtype != RILL_I64 && ix->t.dtype != RILL_I32) return imp_fail(m, RILL_MALFORMED, "indices must be int32 or int64"), false;
  for (int d = from; d < ix->t.rank; d++)
    if (isa_dim_is_sym(ix->t.dims[d])) return imp_unsup(m, "indices whose shape holds shape variables"), false;
  return true;
}

/* GatherND: with b batch dims and k = the indices' last dim, each index
 * tuple names a row of data viewed as [B * P, rest] (B the batch dims'
 * product, P the next k's): row = batch * P + sum of index[j] * stride[j];
 * one gather of those rows, reshaped to indices.dims[:-1] ++ rest. The
 * indices' count may be over shape variables (NonZero's, say, without batch
 * dims), and so may data's rest. */
bool onnx_op_gather_nd(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *ix = in[1];
  int r = x->t.rank, q = ix->t.rank;
  int64_t b = onnx_attr_i(n, "batch_dims", 0);
  if (q < 1 || r < 1) return imp_fail(m, RILL_MALFORMED, "data and indices need rank at least 1"), false;
  if (!index_dtype_ok(m, ix, b > 0 ? 0 : q - 1)) return false;
  int64_t k = ix->t.dims[q - 1];
  if (b < 0 || b >= q || b >= r) return imp_fail(m, RILL_MALFORMED, "batch_dims=%lld for ranks %d and %d", (long long)b, r, q), false;
  if (k < 1 || b + k > r) return imp_fail(m, RILL_MALFORMED, "index tuples of %lld values for data of rank %d past %lld batch dims", (long long)k, r, (long long)b), false;
  for (int d = 0; d < b + k; d++)
    if (isa_dim_is_sym(x->t.dims[d])) return imp_unsup(m, "data whose indexed dims hold shape variables"), false;
  for (int d = 0; d < b; d++)
    if (ix->t.dims[d] != x->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "the batch dims of data and indices differ"), false;
  rill_type_t o = {x->t.dtype, 0, {0}};
  for (int d = 0; d < q - 1; d++) o.dims[o.rank++] = ix->t.dims[d];
  if (o.rank + r - b - k > RILL_MAX_RANK) return imp_unsup(m, "a result of rank %lld", (long long)(o.rank + r - b - k)), false;
  for (int d = (int)(b + k); d < r; d++) o.dims[o.rank++] = x->t.dims[d];
  int64_t cnt = 1;
  for (int d = 0; d < q - 1 && cnt; d++) cnt = imp_dim_mul(m, cnt, ix->t.dims[d]);
  if (m->err) return false;
  if (!cnt) return imp_unsup(m, "empty indices"), false;
  for (int d = 0; d < r; d++)
    if (!x->t.dims[d]) return imp_unsup(m, "empty data"), false;
  int64_t B = 1, P = 1, st[RILL_MAX_RANK];
  for (int d = 0; d < b; d++) B *= x->t.dims[d];
  for (int j = (int)k - 1; j >= 0; j--) st[j] = P, P *= x->t.dims[b + j];
  ival_t *w = wrap_index(m, ix, x->t.dims + b, (int)k);
  ival_t *flat = imp_bin(m, NULL, "mul", w, const_i64(m, 1, &k, st));
  if (!flat) return false;
  rill_type_t ft = {RILL_I64, q - 1, {0}};
  memcpy(ft.dims, ix->t.dims, sizeof ft.dims[0] * (size_t)(q - 1));
  char a[64];
  imp_attrs(a, sizeof a, "axes=[%d], keepdims=false", q - 1);
  flat = imp_emit(m, NULL, &ft, "sum", &flat, 1, a);
  if (b > 0) {
    /* the batch's first row: [ix.dims[:b], 1, ...] */
    int64_t bd[RILL_MAX_RANK], *off = malloc((size_t)B * sizeof *off);
    if (!off) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
    for (int64_t i = 0; i < B; i++) off[i] = i * P;
    for (int d = 0; d < q - 1; d++) bd[d] = d < b ? ix->t.dims[d] : 1;
    flat = imp_bin(m, NULL, "add", flat, const_i64(m, q - 1, bd, off));
    free(off);
  }
  rill_type_t f1 = {RILL_I64, 1, {cnt}}, xt = {x->t.dtype, 1, {B * P}}, gt = {x->t.dtype, 1, {cnt}};
  for (int d = (int)(b + k); d < r; d++) xt.dims[xt.rank] = gt.dims[gt.rank] = x->t.dims[d], xt.rank++, gt.rank++;
  ival_t *args[2] = {imp_reshape(m, NULL, x, &xt), imp_reshape(m, NULL, flat, &f1)};
  return imp_reshape(m, OUT(0), imp_emit(m, NULL, &gt, "gather", args, 2, "axis=0"), &o) != NULL;
}

static bool reduction_attr(imp_t *m, const Onnx__NodeProto *n, char *out, size_t nout) {
  char buf[32];
  snprintf(out, nout, "%s", onnx_attr_s(n, "reduction", "none", buf, sizeof buf));
  if (strcmp(out, "none") && strcmp(out, "add") && strcmp(out, "mul") && strcmp(out, "max") && strcmp(out, "min"))
    return imp_fail(m, RILL_MALFORMED, "reduction must be none, add, mul, max or min"), false;
  return true;
}

static bool emit_scatter(imp_t *m, const Onnx__NodeProto *n, ival_t *x, ival_t *ix, ival_t *u, const char *red) {
  char a[64];
  imp_attrs(a, sizeof a, "reduction=\"%s\"", red);
  if (x->t.dtype == RILL_BOOL && strcmp(red, "none")) return imp_fail(m, RILL_MALFORMED, "a reduction over bool"), false;
  ival_t *args[3] = {x, ix, u};
  return imp_emit(m, OUT(0), &x->t, "scatter_nd", args, 3, a) != NULL;
}

bool onnx_op_scatter_nd(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  ival_t *x = in[0], *ix = in[1], *u = in[2];
  char red[32];
  if (!index_dtype_ok(m, ix, 0) || !reduction_attr(m, n, red, sizeof red)) return false;
  int q = ix->t.rank;
  if (q < 1 || ix->t.dims[q - 1] < 1 || ix->t.dims[q - 1] > x->t.rank) return imp_fail(m, RILL_MALFORMED, "indices of shape that does not fit the data"), false;
  if (u->t.dtype != x->t.dtype) return imp_fail(m, RILL_MALFORMED, "updates of another dtype"), false;
  if (ix->data) {
    ival_t *w = wrap_index(m, ix, x->t.dims, (int)ix->t.dims[q - 1]);
    if (!w) return false;
  }
  return emit_scatter(m, n, x, ix, u, red);
}

/* ScatterElements over sizes over shape variables (a count read back): the
 * coordinates made at run time, each dimension's position an iota broadcast
 * over the indices' shape, the axis's column the index wrapped by the axis's
 * size; scatter_nd checks them against the data. */
static bool scatter_elements_sym(imp_t *m, const Onnx__NodeProto *n, ival_t *x, ival_t *ix, ival_t *u, int64_t axis, const char *red) {
  int r = x->t.rank;
  int64_t cnt = 1;
  for (int d = 0; d < r && cnt; d++) cnt = imp_dim_mul(m, cnt, ix->t.dims[d]);
  if (m->err) return false;
  if (!cnt) return imp_alias(m, OUT(0), x) != NULL;
  rill_type_t col = {RILL_I64, 2, {cnt, 1}}, it = ix->t;
  it.dtype = RILL_I64;
  ival_t *cols[RILL_MAX_RANK];
  for (int d = 0; d < r && !m->err; d++) {
    ival_t *c;
    if (d == axis) {
      c = imp_wrap_index(m, imp_cast(m, NULL, ix, RILL_I64), x->t.dims[axis]);
    } else {
      rill_type_t at = {RILL_I64, r, {0}};
      for (int j = 0; j < r; j++) at.dims[j] = j == d ? ix->t.dims[d] : 1;
      c = imp_broadcast(m, NULL, imp_reshape(m, NULL, imp_iota_rt(m, ix->t.dims[d]), &at), &it);
    }
    cols[d] = c ? imp_reshape(m, NULL, c, &col) : NULL;
  }
  if (m->err) return false;
  rill_type_t ct = {RILL_I64, 2, {cnt, r}}, ut = {u->t.dtype, 1, {cnt}};
  ival_t *coords = r == 1 ? cols[0] : imp_emit(m, NULL, &ct, "concat", cols, r, "axis=1");
  ival_t *u1 = imp_reshape(m, NULL, u, &ut);
  return coords && u1 && emit_scatter(m, n, x, coords, u1, red);
}

/* ScatterElements (and Scatter): scatter_nd at coordinates [cnt, rank]
 * whose column `axis` is the wrapped index and the others the index's own
 * position (known here; made at run time over sizes over shape variables) */
bool onnx_op_scatter_elements(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  ival_t *x = in[0], *ix = in[1], *u = in[2];
  char red[32];
  if (!index_dtype_ok(m, ix, ix->t.rank) || !reduction_attr(m, n, red, sizeof red)) return false;
  int r = x->t.rank;
  int64_t axis;
  if (r < 1 || !imp_norm_axis(m, onnx_attr_i(n, "axis", 0), r, &axis)) return r < 1 ? imp_fail(m, RILL_MALFORMED, "data of rank 0"), false : false;
  if (ix->t.rank != r || u->t.rank != r || u->t.dtype != x->t.dtype) return imp_fail(m, RILL_MALFORMED, "indices and updates must have the data's rank (and updates its dtype)"), false;
  bool sym = isa_type_is_sym(&x->t) || isa_type_is_sym(&ix->t);
  for (int d = 0; d < r; d++) {
    if (u->t.dims[d] != ix->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "updates of another shape than the indices"), false;
    if (!sym && d != axis && ix->t.dims[d] > x->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "indices larger than the data off the axis"), false;
  }
  if (sym) return scatter_elements_sym(m, n, x, ix, u, axis, red);
  size_t cnt = imp_numel(&ix->t);
  if (!cnt) return imp_alias(m, OUT(0), x) != NULL;
  if (cnt > INDEX_MAX) return imp_unsup(m, "%zu indices (at most %zu)", cnt, INDEX_MAX), false;
  int64_t *base = malloc(cnt * (size_t)r * sizeof *base), onehot[RILL_MAX_RANK] = {0};
  if (!base) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (size_t i = 0; i < cnt; i++) {
    size_t rem = i;
    for (int d = r - 1; d >= 0; d--) {
      base[i * (size_t)r + (size_t)d] = d == axis ? 0 : (int64_t)(rem % (size_t)ix->t.dims[d]);
      rem /= (size_t)ix->t.dims[d];
    }
  }
  onehot[axis] = 1;
  int64_t bd[2] = {(int64_t)cnt, r}, rr = r;
  rill_type_t ct = {ix->t.dtype, 2, {(int64_t)cnt, 1}}, ut = {u->t.dtype, 1, {(int64_t)cnt}};
  ival_t *w = wrap_index(m, imp_reshape(m, NULL, ix, &ct), &x->t.dims[axis], 1);
  ival_t *coords = imp_bin(m, NULL, "add", const_i64(m, 2, bd, base), imp_bin(m, NULL, "mul", w, const_i64(m, 1, &rr, onehot)));
  free(base);
  ival_t *u1 = imp_reshape(m, NULL, u, &ut);
  return coords && u1 && emit_scatter(m, n, x, coords, u1, red);
}

/* TopK: k from the input (opset 10 on) or the attribute, known at import */
bool onnx_op_topk(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int64_t k, axis;
  if (m->opset >= 10) {
    NEED(1);
    if (!in[1]->data && !in[1]->sym) { /* computed at run time */
      if (!imp_need_num(m, x, "input")) return false;
      if (x->t.rank < 1) return imp_fail(m, RILL_MALFORMED, "input of rank 0"), false;
      if (!imp_norm_axis(m, onnx_attr_i(n, "axis", -1), x->t.rank, &axis)) return false;
      return imp_topk_dynamic(m, n, x, axis, in[1], onnx_attr_i(n, "largest", 1) ? "largest=true" : "largest=false");
    }
    int c = imp_known_ints(m, in[1], "k", &k, 1);
    if (c < 0) return false;
    if (c != 1) return imp_fail(m, RILL_MALFORMED, "k must hold one value"), false;
  } else {
    k = onnx_attr_i(n, "k", -1);
  }
  if (!imp_need_num(m, x, "input")) return false;
  if (x->t.rank < 1) return imp_fail(m, RILL_MALFORMED, "input of rank 0"), false;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", -1), x->t.rank, &axis)) return false;
  /* along an axis over shape variables (a count read back): k checked against it when it is bound */
  if (k < 0 || (!isa_dim_is_sym(x->t.dims[axis]) && k > x->t.dims[axis])) return imp_fail(m, RILL_MALFORMED, "k=%lld for an axis of %lld", (long long)k, (long long)x->t.dims[axis]), false;
  if (k == 0) return imp_unsup(m, "k=0 (an empty result)"), false;
  rill_type_t vt = x->t, it;
  vt.dims[axis] = k;
  it = vt;
  it.dtype = RILL_I64;
  ival_t *outs[2] = {imp_new(m, OUT(0), &vt), imp_new(m, OUT(1), &it)};
  char a[96];
  /* sorted=0 leaves the order open: sorted is one */
  imp_attrs(a, sizeof a, "k=%lld, axis=%lld, largest=%s", (long long)k, (long long)axis, onnx_attr_i(n, "largest", 1) ? "true" : "false");
  return outs[0] && outs[1] && imp_emit_multi(m, outs, 2, "topk", &x, 1, a);
}

/* MaxUnpool: zeros of the output's shape (its spatial sizes (in - 1) *
 * stride + kernel - pads, or output_shape, known or read back) with X's
 * values scattered at MaxPool's flat indices, which are positions in the
 * default shape (scatter_nd over the flattened output: an index outside it
 * is a run-time error) */
bool onnx_op_maxunpool(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *ix = in[1];
  int r = x->t.rank, nd = r - 2;
  if (nd < 1 || nd > 3) return imp_fail(m, RILL_MALFORMED, "input of rank %d ([N, C, 1 to 3 spatial dims])", r), false;
  if (ix->t.rank != r || !imp_is_int(ix->t.dtype))
    return imp_fail(m, RILL_MALFORMED, "indices must be integers of the input's shape"), false;
  for (int d = 0; d < r; d++)
    if (ix->t.dims[d] != x->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "indices must be integers of the input's shape"), false;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "MaxUnpool of an input with sizes over shape variables"), false;
  int64_t k[3], s[3] = {1, 1, 1}, p[6] = {0};
  if (onnx_attr_ints(n, "kernel_shape", k, 3) != nd) return imp_fail(m, RILL_MALFORMED, "kernel_shape needs %d values", nd), false;
  if (onnx_attr_get(n, "strides") && onnx_attr_ints(n, "strides", s, 3) != nd) return imp_fail(m, RILL_MALFORMED, "strides needs %d values", nd), false;
  if (onnx_attr_get(n, "pads") && onnx_attr_ints(n, "pads", p, 6) != 2 * nd) return imp_fail(m, RILL_MALFORMED, "pads needs %d values", 2 * nd), false;
  rill_type_t o = x->t;
  for (int i = 0; i < nd; i++) {
    o.dims[2 + i] = (x->t.dims[2 + i] - 1) * s[i] + k[i] - p[i] - p[nd + i];
    if (k[i] < 1 || s[i] < 1 || o.dims[2 + i] < 1) return imp_fail(m, RILL_MALFORMED, "kernel, strides and pads give an output of %lld along spatial dim %d", (long long)o.dims[2 + i], i), false;
  }
  ival_t *flat = imp_reshape(m, NULL, imp_cast(m, NULL, ix, RILL_I64), &(rill_type_t){RILL_I64, 1, {(int64_t)imp_numel(&x->t)}});
  if (IN(2) && imp_numel(&in[2]->t)) {
    /* output_shape (known, or read back with a flag that is -1 where it is
     * smaller than the default): the indices are positions in the default
     * shape, placed at the same coordinates of the larger output */
    ival_t *os = imp_cast(m, NULL, in[2], RILL_I64);
    if (!os || os->t.rank != 1 || os->t.dims[0] != r) return imp_fail(m, RILL_MALFORMED, "output_shape must be %d integers", r), false;
    rill_type_t dt = {RILL_I64, 1, {r}}, one = {RILL_I64, 1, {1}}, vt = {RILL_I64, 1, {r + 1}};
    ival_t *small = imp_cast(m, NULL, imp_bin(m, NULL, "lt", os, imp_const(m, &dt, o.dims)), RILL_I64);
    ival_t *bad = small ? imp_emit(m, NULL, &(rill_type_t){RILL_I64, 0, {0}}, "sum", &small, 1, NULL) : NULL;
    ival_t *flag = imp_bin(m, NULL, "sub", imp_scalar_int(m, RILL_I64, 0), imp_bin(m, NULL, "minimum", bad, imp_scalar_int(m, RILL_I64, 1)));
    ival_t *cargs[2] = {os, imp_reshape(m, NULL, flag, &one)};
    ival_t *vec = cargs[1] ? imp_emit(m, NULL, &vt, "concat", cargs, 2, "axis=0") : NULL;
    int64_t v[RILL_MAX_RANK + 1];
    if (!vec) return false;
    if (vec->data) {
      for (int d = 0; d <= r; d++) v[d] = rill_element_get_int(RILL_I64, vec->data, (size_t)d);
      if (v[r] < 0) return imp_fail(m, RILL_MALFORMED, "output_shape smaller than the default output"), false;
    } else if (imp_read_back_flag(m, vec, "output_shape", v, RILL_MAX_RANK, "invalid_output_shape") != r + 1) {
      return false;
    }
    /* flat index in the default shape -> coordinates -> flat index in the output (in f64: exact below 2^53) */
    ival_t *f = imp_cast(m, NULL, flat, RILL_F64), *acc = imp_scalar(m, RILL_F64, 0);
    int64_t stride = 1;
    ival_t *ostride = imp_scalar(m, RILL_F64, 1);
    for (int d = r - 1; d >= 0; d--) {
      ival_t *q = imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", f, imp_scalar(m, RILL_F64, (double)stride)), NULL);
      ival_t *c = imp_bin(m, NULL, "sub", q, imp_bin(m, NULL, "mul", imp_scalar(m, RILL_F64, (double)o.dims[d]),
                                                   imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", q, imp_scalar(m, RILL_F64, (double)o.dims[d])), NULL)));
      acc = imp_bin(m, NULL, "add", acc, imp_bin(m, NULL, "mul", c, ostride));
      stride *= o.dims[d];
      ival_t *od = imp_reshape(m, NULL, imp_slice1(m, os, 0, d, d + 1, 1), &(rill_type_t){RILL_I64, 0, {0}});
      ostride = imp_bin(m, NULL, "mul", ostride, imp_cast(m, NULL, od, RILL_F64));
    }
    flat = imp_cast(m, NULL, acc, RILL_I64);
    for (int d = 0; d < r; d++) o.dims[d] = v[d];
  }
  int64_t total = 1, K = (int64_t)imp_numel(&x->t);
  for (int d = 0; d < r; d++) total = imp_dim_mul(m, total, o.dims[d]);
  if (m->err || !imp_type_ok(m, &o)) return false;
  rill_type_t zt = {x->t.dtype, 1, {total}}, it = {RILL_I64, 2, {K, 1}}, ut = {x->t.dtype, 1, {K}};
  ival_t *args[3] = {imp_broadcast(m, NULL, imp_scalar(m, x->t.dtype, 0), &zt), imp_reshape(m, NULL, flat, &it), imp_reshape(m, NULL, x, &ut)};
  ival_t *y = args[0] && args[1] && args[2] ? imp_emit(m, NULL, &zt, "scatter_nd", args, 3, NULL) : NULL;
  return y && imp_sized_view(m, OUT(0), y, &o) != NULL;
}
