/* onnx_sequence.c: ONNX's sequence ops, lowered at import (docs/internals.md,
 * "Sequences"). A sequence whose length is known here is a list of values
 * (ival_t.items): SequenceEmpty, SequenceConstruct, SequenceInsert and
 * SequenceErase make lists, SequenceAt and SequenceLength read them (a
 * position at run time selects among values of one type with where),
 * ConcatFromSequence concatenates them, SplitToSequence makes one of x's
 * parts (sizes known, or read back). A sequence used as a tensor or passed
 * to a subgraph is unsupported; one given as a graph input or returned is
 * its values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* a sequence of the n values v, of dtype d, bound to out */
static ival_t *seq_new(imp_t *m, const char *out, ival_t *const *v, int n, rill_dtype_t d) {
  rill_type_t t = {d, 0, {0}};
  ival_t *s = imp_new(m, out, &t);
  if (!s) return NULL;
  s->seq = true;
  if (n && !(s->items = malloc(sizeof *s->items * (size_t)n))) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < n; i++) s->items[i] = v[i];
  s->nitems = n;
  return s;
}

ival_t *imp_seq_of(imp_t *m, const char *out, ival_t *const *v, int n, rill_dtype_t d) { return seq_new(m, out, v, n, d); }

static bool need_seq(imp_t *m, ival_t *v, const char *what) {
  if (v && v->seq && !v->opt) return true;
  imp_fail(m, RILL_MALFORMED, "input '%s' must be a sequence", what);
  return false;
}

/* a position computed at run time, in [-n, n + extra): made non-negative
 * as an i64[], checked by a fault flag read back (invalid_position);
 * the values of s (and x, where given) must be of one type, as the
 * results are selected among them with where */
static ival_t *position_rt(imp_t *m, ival_t *p, ival_t *s, ival_t *x, int extra) {
  int n = s->nitems;
  for (int i = 0; i < n; i++)
    if (!rill__type_eq(&s->items[i]->t, &(x ? x : s->items[0])->t))
      return imp_unsup(m, "a position computed at run time in a sequence of values of different types (it must be a constant)");
  rill_type_t st = {RILL_I64, 0, {0}}, one = {RILL_I64, 1, {1}};
  ival_t *v = imp_reshape(m, NULL, imp_cast(m, NULL, p, RILL_I64), &st);
  ival_t *pn = imp_where(m, imp_bin(m, NULL, "lt", v, imp_scalar_int(m, RILL_I64, 0)), imp_bin(m, NULL, "add", v, imp_scalar_int(m, RILL_I64, n)), v);
  ival_t *bad = imp_bin(m, NULL, "logical_or", imp_bin(m, NULL, "lt", pn, imp_scalar_int(m, RILL_I64, 0)), imp_bin(m, NULL, "ge", pn, imp_scalar_int(m, RILL_I64, n + extra)));
  ival_t *flag = imp_bin(m, NULL, "sub", imp_scalar_int(m, RILL_I64, 0), imp_cast(m, NULL, bad, RILL_I64));
  int64_t got[1];
  if (!flag || imp_read_back_flag(m, imp_reshape(m, NULL, flag, &one), "position", got, 1, "invalid_position") != 1) return NULL;
  return pn;
}

/* a position known at import, in [-n, n + extra) (extra 1 for an insertion), made non-negative */
static bool position(imp_t *m, ival_t *p, int n, int extra, int64_t *out) {
  if (imp_numel(&p->t) != 1 || !imp_is_int(p->t.dtype)) return imp_fail(m, RILL_MALFORMED, "position must be one integer"), false;
  if (!p->data || p->sym) return imp_unsup(m, "a position computed at run time (it must be a constant)"), false;
  int64_t v = rill_element_get_int(p->t.dtype, p->data, 0);
  if (v < -n || v >= n + extra) return imp_fail(m, RILL_MALFORMED, "position %lld out of range for a sequence of %d", (long long)v, n), false;
  *out = v < 0 ? v + n : v;
  return true;
}

static bool split_to_sequence(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  ival_t *x = in[0];
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  int64_t len = x->t.dims[axis];
  if (isa_dim_is_sym(len)) return imp_unsup(m, "a split of a dimension over shape variables"), false;
  ival_t *parts[64];
  int k = 0;
  if (IN(1) && IN(1)->t.rank == 1 && !in[1]->data) { /* sizes at run time: read back */
    ival_t *s64;
    if ((k = imp_int_list(m, in[1], "split", &s64)) < 0) return false;
    if (!imp_split_parts(m, NULL, x, axis, s64, k, parts)) return false;
    return seq_new(m, OUT(0), parts, k, x->t.dtype) != NULL;
  }
  int64_t sizes[64], part = 1;
  bool keep = true;
  if (IN(1)) {
    if (!in[1]->data || in[1]->sym) return imp_unsup(m, "split computed at run time (it must be a constant)"), false;
    if (!imp_is_int(in[1]->t.dtype) || in[1]->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "split must be an integer or a list"), false;
    if (in[1]->t.rank == 1) {
      if ((k = imp_known_ints(m, in[1], "split", sizes, 64)) < 0) return false;
    } else {
      part = rill_element_get_int(in[1]->t.dtype, in[1]->data, 0);
      if (part < 1) return imp_fail(m, RILL_MALFORMED, "split %lld (at least 1)", (long long)part), false;
    }
  } else {
    keep = onnx_attr_i(n, "keepdims", 1) != 0;
  }
  if (!k) /* parts of `part`, the last one smaller */
    for (int64_t s = 0; s < len; s += part) {
      if (k == 64) return imp_unsup(m, "a sequence of more than 64 parts"), false;
      sizes[k++] = s + part <= len ? part : len - s;
    }
  int64_t start = 0;
  for (int i = 0; i < k; i++) {
    if (sizes[i] < 0 || start + sizes[i] > len) return imp_fail(m, RILL_MALFORMED, "split sizes past the axis's %lld", (long long)len), false;
    if (!sizes[i]) return imp_unsup(m, "an empty part"), false;
    parts[i] = imp_slice1(m, x, axis, start, start + sizes[i], 1);
    if (parts[i] && !keep) { /* size-1 parts without the axis */
      rill_type_t t = parts[i]->t;
      for (int d = (int)axis; d < t.rank - 1; d++) t.dims[d] = t.dims[d + 1];
      t.rank--;
      parts[i] = imp_reshape(m, NULL, parts[i], &t);
    }
    if (!parts[i]) return false;
    start += sizes[i];
  }
  if (start != len) return imp_fail(m, RILL_MALFORMED, "split sizes add up to %lld, not %lld", (long long)start, (long long)len), false;
  return seq_new(m, OUT(0), parts, k, x->t.dtype) != NULL;
}

bool onnx_op_sequence(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const char *t = n->op_type;
  if (!strcmp(t, "SequenceEmpty")) {
    rill_dtype_t d;
    if (!onnx_dtype((int32_t)onnx_attr_i(n, "dtype", 1), &d)) return imp_unsup(m, "dtype %lld", (long long)onnx_attr_i(n, "dtype", 1)), false;
    return seq_new(m, OUT(0), NULL, 0, d) != NULL;
  }
  if (!strcmp(t, "SequenceConstruct")) {
    if (nin < 1) return imp_fail(m, RILL_MALFORMED, "no inputs"), false;
    for (int i = 0; i < nin; i++) {
      NEED(i);
      if (in[i]->seq || in[i]->t.dtype != in[0]->t.dtype) return imp_fail(m, RILL_MALFORMED, "inputs of different dtypes"), false;
    }
    return seq_new(m, OUT(0), in, nin, in[0]->t.dtype) != NULL;
  }
  if (!strcmp(t, "SplitToSequence")) {
    NEED(0);
    return split_to_sequence(m, n, in, nin);
  }
  NEED(0);
  ival_t *s = in[0];
  if (!need_seq(m, s, "input_sequence")) return false;
  int len = s->nitems;
  if (!strcmp(t, "SequenceLength")) return imp_alias(m, OUT(0), imp_scalar_int(m, RILL_I64, len)) != NULL;
  bool rt = IN(1) && !in[1]->data && imp_numel(&in[1]->t) == 1 && imp_is_int(in[1]->t.dtype);
  if (!strcmp(t, "SequenceAt")) {
    NEED(1);
    int64_t p;
    if (rt && len) { /* s[p] selected at run time */
      ival_t *pn = position_rt(m, in[1], s, NULL, 0), *v = pn ? s->items[len - 1] : NULL;
      for (int i = len - 2; v && i >= 0; i--) v = imp_where(m, imp_bin(m, NULL, "eq", pn, imp_scalar_int(m, RILL_I64, i)), s->items[i], v);
      return v && imp_alias(m, OUT(0), v) != NULL;
    }
    return position(m, in[1], len, 0, &p) && imp_alias(m, OUT(0), s->items[p]) != NULL;
  }
  ival_t *v[65];
  if (len > 64) return imp_unsup(m, "a sequence of more than 64 values"), false;
  if (!strcmp(t, "SequenceInsert")) {
    NEED(1);
    if (in[1]->seq || in[1]->t.dtype != s->t.dtype) return imp_fail(m, RILL_MALFORMED, "a tensor of the sequence's dtype must be inserted"), false;
    int64_t p = len;
    if (IN(2) && !in[2]->data && imp_numel(&in[2]->t) == 1 && imp_is_int(in[2]->t.dtype)) {
      /* at run time: value i is x where i = p, else s[i - 1] past p, s[i] before it */
      ival_t *pn = position_rt(m, in[2], s, in[1], 1);
      for (int i = 0; pn && i <= len; i++) {
        ival_t *other = i == len ? s->items[len - 1] : i == 0 ? s->items[0]
                                 : imp_where(m, imp_bin(m, NULL, "lt", pn, imp_scalar_int(m, RILL_I64, i)), s->items[i - 1], s->items[i]);
        if (!(v[i] = imp_where(m, imp_bin(m, NULL, "eq", pn, imp_scalar_int(m, RILL_I64, i)), in[1], other))) return false;
      }
      return pn && seq_new(m, OUT(0), v, len + 1, s->t.dtype) != NULL;
    }
    if (IN(2) && !position(m, in[2], len, 1, &p)) return false;
    for (int i = 0, j = 0; i <= len; i++) v[i] = i == p ? in[1] : s->items[j++];
    return seq_new(m, OUT(0), v, len + 1, s->t.dtype) != NULL;
  }
  if (!strcmp(t, "SequenceErase")) {
    if (!len) return imp_fail(m, RILL_MALFORMED, "erasing from an empty sequence"), false;
    int64_t p = len - 1;
    if (rt) { /* at run time: value i is s[i + 1] from p on, else s[i] */
      ival_t *pn = position_rt(m, in[1], s, NULL, 0);
      for (int i = 0; pn && i < len - 1; i++)
        if (!(v[i] = imp_where(m, imp_bin(m, NULL, "le", pn, imp_scalar_int(m, RILL_I64, i)), s->items[i + 1], s->items[i]))) return false;
      return pn && seq_new(m, OUT(0), v, len - 1, s->t.dtype) != NULL;
    }
    if (IN(1) && !position(m, in[1], len, 0, &p)) return false;
    for (int i = 0, j = 0; i < len; i++)
      if (i != p) v[j++] = s->items[i];
    return seq_new(m, OUT(0), v, len - 1, s->t.dtype) != NULL;
  }
  /* ConcatFromSequence: with new_axis, each value gets the axis first */
  if (!len) return imp_fail(m, RILL_MALFORMED, "concatenating an empty sequence"), false;
  bool na = onnx_attr_i(n, "new_axis", 0) != 0;
  int r = s->items[0]->t.rank + na;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", 0), r, &axis)) return false;
  for (int i = 0; i < len; i++) {
    v[i] = s->items[i];
    if (na) {
      rill_type_t u = v[i]->t;
      if (u.rank + 1 > RILL_MAX_RANK) return imp_unsup(m, "a result of rank %d", u.rank + 1), false;
      for (int d = u.rank; d > axis; d--) u.dims[d] = u.dims[d - 1];
      u.dims[axis] = 1;
      u.rank++;
      if (!(v[i] = imp_reshape(m, NULL, v[i], &u))) return false;
    }
  }
  if (len == 1) return imp_alias(m, OUT(0), v[0]) != NULL;
  return onnx_op_concat(m, n, v, len);
}

/* A graph input that is a sequence or an optional (ty), named nm: its
 * values are parameters of @main. A sequence's length is given by the
 * option nm=K (--shape), its values named nm[0], nm[1], ... (sanitised);
 * an optional holds a value with nm=1 (named nm[0]) and none with nm=0.
 * A value that is a tensor is of the element type, its whole shape given
 * by nm[i]=[D1,...] or a symbolic dimension P of it the shape variable
 * P_i (the values' sizes may differ); an optional's value that is a
 * sequence is given the same way, nested. */
ival_t *imp_list_input(imp_t *m, const char *nm, const Onnx__TypeProto *ty) {
  bool opt = ty->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
  const Onnx__TypeProto *et = opt ? (ty->optional_type ? ty->optional_type->elem_type : NULL) : (ty->sequence_type ? ty->sequence_type->elem_type : NULL);
  const char *what = opt ? "an optional" : "a sequence";
  if (!et) return imp_fail(m, RILL_MALFORMED, "graph input '%.200s': %s without an element type", nm, what);
  bool tensor = et->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && et->tensor_type;
  if (!tensor && !(opt && et->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE))
    return imp_unsup(m, "graph input '%.200s' is %s of values that are not tensors%s", nm, what, opt ? " or sequences" : "");
  int64_t k = imp_shape_option(m, nm);
  if (k < 0 && opt) return imp_unsup(m, "graph input '%.200s' is an optional: say whether it holds a value (--shape %.200s=1, or =0)", nm, nm);
  if (k < 0) return imp_unsup(m, "graph input '%.200s' is a sequence: give its length (--shape %.200s=K; its items become parameters)", nm, nm);
  if (opt && k > 1) return imp_fail(m, RILL_INVALID_ARGUMENT, "--shape %.200s=%lld: an optional holds 0 or 1 values", nm, (long long)k);
  if (k > 64) return imp_unsup(m, "graph input '%.200s' is a sequence of %lld values (at most 64)", nm, (long long)k);
  rill_dtype_t d = RILL_F32;
  const Onnx__TypeProto__Tensor *tt = tensor ? et->tensor_type : NULL;
  if (!tensor && et->sequence_type && et->sequence_type->elem_type && et->sequence_type->elem_type->tensor_type)
    tt = et->sequence_type->elem_type->tensor_type; /* for the dtype */
  if (tt && (!tt->has_elem_type || !onnx_dtype(tt->elem_type, &d)))
    return imp_unsup(m, "graph input '%.200s': %s of data type %s", nm, what, onnx_dtype_name(tt->has_elem_type ? tt->elem_type : 0));
  ival_t *items[64];
  for (int i = 0; i < k; i++) {
    char inm[256];
    snprintf(inm, sizeof inm, "%.200s[%d]", nm, i);
    if (tensor) {
      rill_type_t t;
      if (!imp_tensor_input_type(m, inm, tt, i, &t) || !(items[i] = imp_new(m, inm, &t))) return NULL;
      items[i]->declared = items[i]->param = true;
    } else if (!(items[i] = imp_list_input(m, inm, et))) {
      return NULL;
    }
  }
  ival_t *s = seq_new(m, nm, items, (int)k, d);
  if (s) s->opt = opt;
  return s;
}

/* Optional(x) holds x, Optional() none (of the attribute type's dtype);
 * OptionalHasElement: whether it holds one, known here; OptionalGetElement:
 * its value (refused when it holds none). From opset 18 both take a
 * tensor or a sequence as well (holding itself), and HasElement an absent
 * input (none). */
bool onnx_op_optional(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const char *t = n->op_type;
  if (!strcmp(t, "Optional")) {
    if (IN(0)) {
      ival_t *s = seq_new(m, OUT(0), in, 1, in[0]->t.dtype);
      if (s) s->opt = true;
      return s != NULL;
    }
    const Onnx__AttributeProto *a = onnx_attr_get(n, "type");
    const Onnx__TypeProto *ty = a ? a->tp : NULL;
    if (ty && ty->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && ty->sequence_type) ty = ty->sequence_type->elem_type;
    rill_dtype_t d;
    if (!ty || ty->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !ty->tensor_type || !onnx_dtype(ty->tensor_type->elem_type, &d))
      return imp_fail(m, RILL_MALFORMED, "an empty Optional needs the attribute 'type' (a tensor or a sequence of tensors)"), false;
    ival_t *s = seq_new(m, OUT(0), NULL, 0, d);
    if (s) s->opt = true;
    return s != NULL;
  }
  ival_t *x = IN(0);
  bool has = x && (!x->opt || x->nitems);
  if (!strcmp(t, "OptionalHasElement")) {
    if (!x && m->opset < 18) return imp_fail(m, RILL_MALFORMED, "OptionalHasElement needs its input before opset 18"), false;
    if (x && !x->opt && m->opset < 18) return imp_fail(m, RILL_MALFORMED, "input must be an optional (a tensor or a sequence from opset 18)"), false;
    return imp_alias(m, OUT(0), imp_scalar_int(m, RILL_BOOL, has)) != NULL;
  }
  NEED(0);
  if (!x->opt && m->opset < 18) return imp_fail(m, RILL_MALFORMED, "input must be an optional (a tensor or a sequence from opset 18)"), false;
  if (!has) return imp_fail(m, RILL_MALFORMED, "OptionalGetElement of an optional that holds no value"), false;
  return imp_alias(m, OUT(0), x->opt ? x->items[0] : x) != NULL;
}
