/* onnx_unique.c: Unique, lowered at import onto comparisons, sums, matmul
 * and gather, with the count of distinct values read back
 * (docs/internals.md, "Sizes read back at run time"). The n rows (x's
 * elements, or its slices along the axis, each of m values) are compared
 * pairwise, so the cost is n^2 m:
 *   eq[i,j]    rows i and j equal
 *   less[i,j]  row i before row j lexicographically (the first value that
 *              differs is smaller: a prefix count of differences, by a
 *              matmul with a strict triangle, is 0 there)
 *   first[i]   no equal row before i; U = the count of firsts, read back
 *   key[i]     a first row's place: the firsts less than it (sorted) or
 *              before it (not sorted)
 * then per place u the first row whose key is u (the output's row and its
 * index), inverse[i] = the key of the first row equal to i, and counts[u]
 * = the rows whose inverse is u. */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

static ival_t *i64s(imp_t *m, int64_t v) { return imp_scalar_int(m, RILL_I64, v); }

/* the sum of v over the given axes (kept), dtype i64 or f64 as v's */
static ival_t *sum_axes(imp_t *m, ival_t *v, const int64_t *axes, int na, bool keep) {
  if (!v) return NULL;
  rill_type_t o = {v->t.dtype, 0, {0}};
  uint32_t mask = 0;
  for (int i = 0; i < na; i++) mask |= 1u << axes[i];
  for (int d = 0; d < v->t.rank; d++)
    if (!(mask & (1u << d))) o.dims[o.rank++] = v->t.dims[d];
    else if (keep) o.dims[o.rank++] = 1;
  char l[64], a[96];
  imp_list_str(m, l, sizeof l, axes, na);
  imp_attrs(a, sizeof a, "axes=%s, keepdims=%s", l, keep ? "true" : "false");
  return imp_emit(m, NULL, &o, "sum", &v, 1, a);
}

static ival_t *as_i64(imp_t *m, ival_t *b) { return imp_cast(m, NULL, b, RILL_I64); }

bool onnx_op_unique(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "Unique of an input with sizes over shape variables"), false;
  if (!imp_need_num(m, x, "input")) return false;
  bool sorted = onnx_attr_i(n, "sorted", 1) != 0;
  const Onnx__AttributeProto *aa = onnx_attr_get(n, "axis");
  int r = x->t.rank;
  int64_t axis = 0, N, M = 1;
  ival_t *rows; /* [N, M] */
  int64_t perm[RILL_MAX_RANK];
  rill_type_t moved = x->t;
  if (!aa) {
    N = (int64_t)imp_numel(&x->t);
    rill_type_t t = {x->t.dtype, 2, {N, 1}};
    rows = imp_reshape(m, NULL, x, &t);
  } else {
    if (!imp_norm_axis(m, aa->i, r, &axis)) return false;
    N = x->t.dims[axis];
    /* the axis first, the rest flattened */
    for (int d = 0, q = 1; d < r; d++)
      if (d != axis) perm[q++] = d;
    perm[0] = axis;
    for (int d = 0; d < r; d++) moved.dims[d] = x->t.dims[perm[d]];
    for (int d = 1; d < r; d++) M *= moved.dims[d];
    ival_t *tr = x;
    if (axis) {
      char l[120], a[140];
      imp_list_str(m, l, sizeof l, perm, r);
      imp_attrs(a, sizeof a, "perm=%s", l);
      tr = imp_emit(m, NULL, &moved, "transpose", &x, 1, a);
    }
    rill_type_t t = {x->t.dtype, 2, {N, M}};
    rows = tr ? imp_reshape(m, NULL, tr, &t) : NULL;
  }
  if (!rows) return false;
  if (N < 1 || M < 1) return imp_unsup(m, "Unique of an empty input"), false;
  if ((double)N * (double)N * (double)M > 1 << 24) return imp_unsup(m, "Unique over %lld rows of %lld (its pairwise comparison is limited to 2^24 values)", (long long)N, (long long)M), false;
  rill_type_t ti = {x->t.dtype, 3, {N, 1, M}}, tj = {x->t.dtype, 3, {1, N, M}};
  ival_t *xi = imp_reshape(m, NULL, rows, &ti), *xj = imp_reshape(m, NULL, rows, &tj);
  ival_t *ne = imp_cast(m, NULL, imp_bin(m, NULL, "ne", xi, xj), RILL_F64); /* [N, N, M] */
  int64_t ax2[1] = {2};
  ival_t *eq = imp_bin(m, NULL, "eq", sum_axes(m, ne, ax2, 1, false), imp_scalar(m, RILL_F64, 0)); /* [N, N] */
  ival_t *less;
  if (M == 1) {
    rill_type_t t2i = {x->t.dtype, 2, {N, 1}}, t2j = {x->t.dtype, 2, {1, N}};
    less = imp_bin(m, NULL, "lt", imp_reshape(m, NULL, rows, &t2i), imp_reshape(m, NULL, rows, &t2j));
  } else {
    /* differences before k: ne @ strict upper triangle [M, M] */
    double *tri = calloc((size_t)(M * M), sizeof *tri);
    if (!tri) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
    for (int64_t a = 0; a < M; a++)
      for (int64_t b = a + 1; b < M; b++) tri[a * M + b] = 1;
    rill_type_t tt = {RILL_F64, 2, {M, M}};
    ival_t *tv = imp_const(m, &tt, tri);
    free(tri);
    rill_type_t flat = {RILL_F64, 2, {N * N, M}}, back = {RILL_F64, 3, {N, N, M}};
    ival_t *margs[2] = {imp_reshape(m, NULL, ne, &flat), tv};
    rill_type_t pt = {RILL_F64, 2, {N * N, M}};
    ival_t *pre = margs[0] && tv ? imp_reshape(m, NULL, imp_emit(m, NULL, &pt, "matmul", margs, 2, NULL), &back) : NULL;
    ival_t *at = imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "eq", pre, imp_scalar(m, RILL_F64, 0)), imp_bin(m, NULL, "lt", xi, xj));
    less = imp_bin(m, NULL, "gt", sum_axes(m, imp_cast(m, NULL, at, RILL_F64), ax2, 1, false), imp_scalar(m, RILL_F64, 0));
  }
  if (!less || !eq) return false;
  /* first[i]: no equal row j < i */
  rill_type_t ci = {RILL_I64, 2, {N, 1}}, cj = {RILL_I64, 2, {1, N}};
  ival_t *ii = imp_reshape(m, NULL, imp_iota(m, RILL_I64, N), &ci), *jj = imp_reshape(m, NULL, imp_iota(m, RILL_I64, N), &cj);
  int64_t ax1[1] = {1};
  ival_t *dup = sum_axes(m, as_i64(m, imp_bin(m, NULL, "logical_and", eq, imp_bin(m, NULL, "lt", jj, ii))), ax1, 1, false); /* [N] */
  ival_t *first = imp_bin(m, NULL, "eq", dup, i64s(m, 0));
  ival_t *fi = as_i64(m, first);
  rill_type_t st = {RILL_I64, 0, {0}}, one = {RILL_I64, 1, {1}};
  ival_t *cnt = fi ? imp_emit(m, NULL, &st, "sum", &fi, 1, NULL) : NULL;
  if (!cnt) return false;
  int64_t U;
  if (cnt->data) U = *(const int64_t *)cnt->data;
  else if (imp_read_back(m, imp_reshape(m, NULL, cnt, &one), "the count of distinct values", &U, 1) != 1) return false;
  /* key[i] over first rows j: sorted, those less than i; else those before i */
  rill_type_t fj = {RILL_I64, 2, {1, N}};
  ival_t *fjv = imp_reshape(m, NULL, fi, &fj);
  ival_t *before = sorted ? as_i64(m, imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "eq", fjv, i64s(m, 1)), imp_emit(m, NULL, &(rill_type_t){RILL_BOOL, 2, {N, N}}, "transpose", &less, 1, "perm=[1, 0]")))
                          : imp_bin(m, NULL, "mul", fjv, as_i64(m, imp_bin(m, NULL, "lt", jj, ii)));
  ival_t *key = sum_axes(m, before, ax1, 1, false); /* [N] */
  /* inverse[i] = key of the first row equal to i */
  rill_type_t kj = {RILL_I64, 2, {1, N}};
  ival_t *rep = imp_bin(m, NULL, "mul", as_i64(m, eq), fjv); /* [N, N]: j the first row equal to i */
  ival_t *inv = sum_axes(m, imp_bin(m, NULL, "mul", rep, imp_reshape(m, NULL, key, &kj)), ax1, 1, false);
  /* per place u: the first row with key u */
  rill_type_t uc = {RILL_I64, 2, {U, 1}}, ur = {RILL_I64, 2, {1, N}};
  ival_t *u = imp_sized_view(m, NULL, imp_iota_rt(m, U), &uc);
  ival_t *sel = imp_bin(m, NULL, "mul", as_i64(m, imp_bin(m, NULL, "eq", imp_reshape(m, NULL, key, &ur), u)), fjv); /* [U, N] */
  ival_t *idx = sum_axes(m, imp_bin(m, NULL, "mul", sel, jj), ax1, 1, false); /* [U] */
  ival_t *counts = sum_axes(m, as_i64(m, imp_bin(m, NULL, "eq", imp_reshape(m, NULL, inv, &ur), u)), ax1, 1, false);
  if (!idx || !counts || !inv) return false;
  /* Y: the rows at idx, x's shape again */
  rill_type_t yt = {x->t.dtype, 2, {U, M}};
  ival_t *gargs[2] = {rows, idx};
  ival_t *y = imp_emit(m, NULL, &yt, "gather", gargs, 2, "axis=0");
  if (!y) return false;
  if (!aa) {
    rill_type_t o = {x->t.dtype, 1, {U}};
    y = imp_sized_view(m, OUT(0), y, &o);
  } else {
    rill_type_t mt = moved;
    mt.dims[0] = U;
    y = imp_sized_view(m, axis ? NULL : OUT(0), y, &mt);
    if (y && axis) {
      int64_t inv_perm[RILL_MAX_RANK];
      for (int d = 0; d < r; d++) inv_perm[perm[d]] = d;
      rill_type_t o = x->t;
      o.dims[axis] = U;
      char l[120], a[140];
      imp_list_str(m, l, sizeof l, inv_perm, r);
      imp_attrs(a, sizeof a, "perm=%s", l);
      y = imp_emit(m, OUT(0), &o, "transpose", &y, 1, a);
    }
  }
  if (!y) return false;
  if (OUT(1) && !imp_alias(m, OUT(1), idx)) return false;
  if (OUT(2) && !imp_alias(m, OUT(2), inv)) return false;
  if (OUT(3) && !imp_alias(m, OUT(3), counts)) return false;
  return true;
}
