/* onnx_reduce.c: the ONNX reductions (ReduceSum and its kin, ArgMax, ArgMin) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---- reductions ---- */
bool onnx_op_reduce(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  const char *t = n->op_type;
  const char *op = !strcmp(t, "ReduceMean") ? "mean" : !strcmp(t, "ReduceMax") ? "max" : !strcmp(t, "ReduceMin") ? "min"
                   : !strcmp(t, "ReduceProd") ? "prod" : "sum";
  /* L1, L2, SumSquare, LogSum, LogSumExp: a sum between ops on each side */
  const char *pre = !strcmp(t, "ReduceL1") ? "abs" : !strcmp(t, "ReduceL2") || !strcmp(t, "ReduceSumSquare") ? "square"
                    : !strcmp(t, "ReduceLogSumExp") ? "exp" : NULL;
  const char *post = !strcmp(t, "ReduceL2") ? "sqrt" : !strcmp(t, "ReduceLogSum") || !strcmp(t, "ReduceLogSumExp") ? "log" : NULL;
  if (!imp_need_num(m, x, "input") || ((!strcmp(op, "mean") || post) && !imp_need_float(m, x, "input"))) return false;
  int64_t axes[RILL_MAX_RANK + 1] = {0};
  int na = -1;
  /* axes as an input: ReduceSum from opset 13, every reduction from 18 */
  if ((!strcmp(t, "ReduceSum") && m->opset >= 13) || m->opset >= 18) {
    if (IN(1) && !in[1]->data && !in[1]->sym && imp_numel(&in[1]->t)) { /* computed at run time */
      bool keep = onnx_attr_i(n, "keepdims", 1) != 0, wide = !strcmp(op, "prod") && !imp_is_float(x->t.dtype) && x->t.dtype != RILL_I64;
      if (pre && !strcmp(pre, "square")) x = imp_bin(m, NULL, "mul", x, x);
      else if (pre) x = imp_un(m, NULL, pre, x, NULL);
      rill_dtype_t dt = x ? x->t.dtype : RILL_F32;
      if (wide) x = imp_cast(m, NULL, x, RILL_I64); /* an integer product in i64 (wrapping), cast back */
      ival_t *y = x ? imp_reduce_dynamic(m, post || wide ? NULL : OUT(0), x, in[1], op, keep) : NULL;
      if (!y || (!post && !wide)) return y != NULL;
      return wide ? imp_cast(m, OUT(0), y, dt) != NULL : imp_un(m, OUT(0), post, y, NULL) != NULL;
    }
    if (IN(1) && !in[1]->data && !in[1]->sym) na = 0; /* an empty list */
    else if (IN(1)) na = imp_known_ints(m, in[1], "axes", axes, RILL_MAX_RANK);
    if (IN(1) && na < 0) return false;
  } else {
    na = onnx_attr_ints(n, "axes", axes, RILL_MAX_RANK);
  }
  bool keep = onnx_attr_i(n, "keepdims", 1) != 0;
  if (na <= 0 && onnx_attr_i(n, "noop_with_empty_axes", 0) && !pre && !post) return imp_alias(m, OUT(0), x) != NULL;
  if (na <= 0 && onnx_attr_i(n, "noop_with_empty_axes", 0)) return imp_unsup(m, "noop_with_empty_axes with %s", t), false;
  uint32_t mask = 0;
  if (na <= 0) {
    na = x->t.rank;
    for (int i = 0; i < na; i++) axes[i] = i;
  }
  for (int i = 0; i < na; i++) {
    if (!imp_norm_axis(m, axes[i], x->t.rank, &axes[i])) return false;
    mask |= 1u << axes[i];
  }
  rill_type_t o = {x->t.dtype, 0, {0}};
  for (int d = 0; d < x->t.rank; d++) {
    if (mask & (1u << d)) {
      if (x->t.dims[d] == 0 && (!strcmp(op, "max") || !strcmp(op, "min"))) return imp_unsup(m, "max or min over an empty dimension"), false;
      if (keep) o.dims[o.rank++] = 1;
    } else {
      o.dims[o.rank++] = x->t.dims[d];
    }
  }
  char a[256], l[200];
  imp_list_str(m, l, sizeof l, axes, na);
  imp_attrs(a, sizeof a, "axes=%s, keepdims=%s", l, keep ? "true" : "false");
  if (pre && !strcmp(pre, "square")) x = imp_bin(m, NULL, "mul", x, x);
  else if (pre) x = imp_un(m, NULL, pre, x, NULL);
  if (!x) return false;
  /* an integer product is i64 (wrapping; u64 in u64), cast back to the input's dtype */
  bool icast = !strcmp(op, "prod") && !imp_is_float(x->t.dtype) && x->t.dtype != RILL_I64 && x->t.dtype != RILL_U64 && x->t.rank > 0;
  if (icast) o.dtype = RILL_I64;
  ival_t *y = x->t.rank == 0 ? imp_alias(m, post || icast ? NULL : OUT(0), x) : imp_emit(m, post || icast ? NULL : OUT(0), &o, op, &x, 1, a);
  if (icast) return imp_cast(m, OUT(0), y, x->t.dtype) != NULL;
  return post ? imp_un(m, OUT(0), post, y, NULL) != NULL : y != NULL;
}

bool onnx_op_argmax(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!imp_need_num(m, x, "input")) return false;
  bool last = onnx_attr_i(n, "select_last_index", 0) != 0;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  bool keep = onnx_attr_i(n, "keepdims", 1) != 0;
  if (!strcmp(n->op_type, "ArgMin")) {
    if (!imp_is_float(x->t.dtype)) return imp_unsup(m, "ArgMin of integers"), false;
    x = imp_un(m, NULL, "neg", x, NULL);
  }
  if (!x) return false;
  int64_t dim = x->t.dims[axis];
  if (dim == 0) return imp_fail(m, RILL_MALFORMED, "ArgMax over an empty dimension"), false;
  if (last && isa_dim_is_sym(dim)) return imp_unsup(m, "select_last_index over a dimension over shape variables"), false;
  /* the last of equal values: the first of the reversed axis, counted back */
  if (last) x = imp_slice1(m, x, axis, dim - 1, -1, -1);
  rill_type_t o = {RILL_I64, 0, {0}};
  for (int d = 0; x && d < x->t.rank; d++)
    if (d != axis) o.dims[o.rank++] = x->t.dims[d];
    else if (keep) o.dims[o.rank++] = 1;
  char a[96];
  imp_attrs(a, sizeof a, "axis=%lld, keepdims=%s", (long long)axis, keep ? "true" : "false");
  ival_t *i = x ? imp_emit(m, last ? NULL : OUT(0), &o, "argmax", &x, 1, a) : NULL;
  return last ? imp_bin(m, OUT(0), "sub", imp_scalar_int(m, RILL_I64, dim - 1), i) != NULL : i != NULL;
}
