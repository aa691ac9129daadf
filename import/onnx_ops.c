/* onnx_ops.c: each ONNX op as core-set statements, with ONNX's attribute
 * defaults, and folded at import where all of its inputs are known and
 * small (the shape arithmetic that feeds Reshape, Expand, Slice, ...). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

/* ---- attributes ---- */
const Onnx__AttributeProto *onnx_attr_get(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
  return NULL;
}

int64_t onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  return a && a->has_i ? a->i : def;
}

double onnx_attr_f(const Onnx__NodeProto *n, const char *name, double def) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  return a && a->has_f ? a->f : def;
}

const char *onnx_attr_s(const Onnx__NodeProto *n, const char *name, const char *def, char *buf, size_t nbuf) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  if (!a || !a->has_s) return def;
  snprintf(buf, nbuf, "%.*s", (int)a->s.len, a->s.data ? (const char *)a->s.data : "");
  return buf;
}

int onnx_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  if (!a) return -1;
  int k = (int)(a->n_ints < (size_t)max ? a->n_ints : (size_t)max);
  for (int i = 0; i < k; i++) out[i] = a->ints[i];
  return a->n_ints > (size_t)max ? max + 1 : k;
}

/* ---- small helpers ---- */
#define OUT(i) ((size_t)(i) < n->n_output && n->output[i] && *n->output[i] ? n->output[i] : NULL)
#define IN(i) ((i) < nin ? in[i] : NULL)
#define NEED(i)                                                                   \
  do {                                                                            \
    if (!IN(i)) return imp_fail(m, RILL_MALFORMED, "input %d is missing", (i)), false; \
  } while (0)

static bool fold_ok(ival_t *const *v, int k) {
  for (int i = 0; i < k; i++)
    if (v[i] && (!v[i]->data || imp_numel(&v[i]->t) > ONNX_FOLD_MAX)) return false;
  return true;
}

static bool need_float(imp_t *m, const ival_t *x, const char *what) {
  if (imp_is_float(x->t.dtype)) return true;
  imp_unsup(m, "%s of dtype %s (the core set's op takes f16, bf16, f32, f64)", what, rill_dtype_name(x->t.dtype));
  return false;
}

static bool need_num(imp_t *m, const ival_t *x, const char *what) {
  if (x->t.dtype != RILL_BOOL) return true;
  imp_unsup(m, "%s of dtype bool", what);
  return false;
}

static bool norm_axis(imp_t *m, int64_t axis, int rank, int64_t *out) {
  if (axis < -rank || axis >= (rank ? rank : 1)) return imp_fail(m, RILL_MALFORMED, "axis %lld out of range for rank %d", (long long)axis, rank), false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

/* A known integer input as a list (shape, axes, pads, ...). */
static int known_ints(imp_t *m, ival_t *v, const char *what, int64_t *out, int max) {
  if (!v->data) return imp_unsup(m, "input '%s' computed at run time (it must be a constant)", what), -1;
  if (!imp_is_int(v->t.dtype)) return imp_fail(m, RILL_MALFORMED, "input '%s' must be integers", what), -1;
  size_t k = imp_numel(&v->t);
  if (v->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "input '%s' must be a list", what), -1;
  if (k > (size_t)max) return imp_unsup(m, "input '%s' of %zu values (at most %d)", what, k, max), -1;
  for (size_t i = 0; i < k; i++) out[i] = rill_element_get_int(v->t.dtype, v->data, i);
  return (int)k;
}

static ival_t *scalar_int(imp_t *m, rill_dtype_t d, int64_t v) {
  rill_type_t t = {d, 0, {0}};
  uint8_t buf[8] = {0};
  rill_element_set_int(d, buf, 0, v);
  return imp_const(m, &t, buf);
}

static ival_t *scalar(imp_t *m, rill_dtype_t d, double v) {
  if (!imp_is_float(d)) /* saturated: the cast of a double outside int64 is undefined */
    return scalar_int(m, d, isnan(v) ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v);
  rill_type_t t = {d, 0, {0}};
  uint8_t buf[8] = {0};
  rill_element_set(d, buf, 0, v);
  return imp_const(m, &t, buf);
}

static void attrs_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void attrs_fmt(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
}

static void list_str(char *buf, size_t n, const int64_t *v, int k) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int i = 0; i < k && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

static bool bcast(imp_t *m, const rill_type_t *a, const rill_type_t *b, rill_type_t *o) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  o->rank = r;
  for (int i = 0; i < r; i++) {
    int64_t da = i - (r - a->rank) >= 0 ? a->dims[i - (r - a->rank)] : 1;
    int64_t db = i - (r - b->rank) >= 0 ? b->dims[i - (r - b->rank)] : 1;
    if (da != db && da != 1 && db != 1) {
      char b1[96], b2[96];
      return imp_fail(m, RILL_MALFORMED, "shapes %s and %s do not broadcast", imp_type_str(a, b1, sizeof b1), imp_type_str(b, b2, sizeof b2)), false;
    }
    o->dims[i] = da == 1 ? db : da;
  }
  return true;
}

/* index into a (broadcast against out) for flat output index i */
static size_t bidx(const rill_type_t *a, const rill_type_t *out, size_t i) {
  size_t idx = 0, stride = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    size_t c = i % (size_t)out->dims[d];
    i /= (size_t)out->dims[d];
    int ad = d - (out->rank - a->rank);
    if (ad >= 0) {
      if (a->dims[ad] != 1) idx += c * stride;
      stride *= (size_t)a->dims[ad];
    }
  }
  return idx;
}

/* x[start:end:step] along one axis; end -1 with a negative step means "through index 0" */
static ival_t *slice1(imp_t *m, ival_t *x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  if (!x) return NULL;
  rill_type_t t = x->t;
  t.dims[axis] = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
  if (step < 0 && end < 0) end = -x->t.dims[axis] - 1;
  char a[200];
  attrs_fmt(a, sizeof a, "starts=[%lld], ends=[%lld], axes=[%lld], steps=[%lld]", (long long)start, (long long)end, (long long)axis,
            (long long)step);
  return imp_emit(m, NULL, &t, "slice", &x, 1, a);
}

static ival_t *broadcast(imp_t *m, const char *out, ival_t *x, const rill_type_t *t) {
  if (!x) return NULL;
  char l[200], a[220];
  list_str(l, sizeof l, t->dims, t->rank);
  attrs_fmt(a, sizeof a, "shape=%s", l);
  rill_type_t o = *t;
  o.dtype = x->t.dtype;
  return imp_emit(m, out, &o, "broadcast_to", &x, 1, a);
}

/* ---- elementwise ---- */
typedef struct { const char *onnx, *op; int kind; } unary_map_t;  /* kind 0 float, 1 numeric, 2 bool */
static const unary_map_t UNARY[] = {
    {"Neg", "neg", 1}, {"Abs", "abs", 1}, {"Exp", "exp", 0}, {"Log", "log", 0}, {"Sqrt", "sqrt", 0},
    {"Reciprocal", "reciprocal", 0}, {"Sigmoid", "sigmoid", 0}, {"Tanh", "tanh", 0}, {"Relu", "relu", 1},
    {"Erf", "erf", 0}, {"Sin", "sin", 0}, {"Cos", "cos", 0}, {"Floor", "floor", 1}, {"Ceil", "ceil", 1},
    {"Not", "logical_not", 2}, {NULL, NULL, 0}};

static ival_t *un(imp_t *m, const char *out, const char *op, ival_t *x, const char *attrs) {
  if (!x) return NULL;
  rill_type_t t = x->t;
  if (!strcmp(op, "logical_not")) t.dtype = RILL_BOOL;
  return imp_emit(m, out, &t, op, &x, 1, attrs);
}

static ival_t *bin(imp_t *m, const char *out, const char *op, ival_t *a, ival_t *b) {
  if (!a || !b) return NULL;
  rill_type_t t;
  if (!bcast(m, &a->t, &b->t, &t)) return NULL;
  t.dtype = a->t.dtype;
  if (!strcmp(op, "div") && !imp_is_float(t.dtype)) t.dtype = RILL_F32; /* true division */
  static const char *const cmp[] = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"};
  for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
    if (!strcmp(op, cmp[i])) t.dtype = RILL_BOOL;
  ival_t *args[2] = {a, b};
  return imp_emit(m, out, &t, op, args, 2, NULL);
}

static bool op_unary(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  const unary_map_t *u = UNARY;
  while (strcmp(u->onnx, n->op_type)) u++;
  if (u->kind == 0 && !need_float(m, in[0], "input")) return false;
  if (u->kind == 1 && !need_num(m, in[0], "input")) return false;
  if (u->kind == 2 && in[0]->t.dtype != RILL_BOOL) return imp_fail(m, RILL_MALFORMED, "input must be bool"), false;
  return un(m, OUT(0), u->op, in[0], NULL) != NULL;
}

/* host arithmetic for known values */
static double fold_f(const char *op, double a, double b) {
  if (!strcmp(op, "add")) return a + b;
  if (!strcmp(op, "sub")) return a - b;
  if (!strcmp(op, "mul")) return a * b;
  if (!strcmp(op, "div")) return a / b;
  if (!strcmp(op, "maximum")) return a > b ? a : b;
  if (!strcmp(op, "minimum")) return a < b ? a : b;
  if (!strcmp(op, "eq")) return a == b;
  if (!strcmp(op, "lt")) return a < b;
  if (!strcmp(op, "gt")) return a > b;
  if (!strcmp(op, "le")) return a <= b;
  if (!strcmp(op, "ge")) return a >= b;
  return NAN;
}

static bool fold_binary(imp_t *m, const char *out, const char *op, ival_t *a, ival_t *b) {
  rill_type_t t;
  if (!bcast(m, &a->t, &b->t, &t)) return false;
  bool cmp = strchr("elg", op[0]) && strlen(op) == 2;
  t.dtype = cmp ? RILL_BOOL : a->t.dtype;
  ival_t *v = imp_new(m, out, &t);
  if (!v) return false;
  size_t k = imp_numel(&t);
  v->data = calloc(k ? k : 1, rill_dtype_size(t.dtype));
  if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (size_t i = 0; i < k; i++) {
    size_t ia = bidx(&a->t, &t, i), ib = bidx(&b->t, &t, i);
    if (imp_is_float(a->t.dtype)) {
      double r = fold_f(op, rill_element_get(a->t.dtype, a->data, ia), rill_element_get(b->t.dtype, b->data, ib));
      if (cmp) rill_element_set_int(RILL_BOOL, v->data, i, r != 0);
      else rill_element_set(t.dtype, v->data, i, r);
    } else {
      int64_t x = rill_element_get_int(a->t.dtype, a->data, ia), y = rill_element_get_int(b->t.dtype, b->data, ib), r;
      if (!strcmp(op, "div")) {
        if (y == 0) return imp_fail(m, RILL_MALFORMED, "integer division by zero in constants"), false;
        r = x / y;
      } else if (!strcmp(op, "add")) r = (int64_t)((uint64_t)x + (uint64_t)y);
      else if (!strcmp(op, "sub")) r = (int64_t)((uint64_t)x - (uint64_t)y);
      else if (!strcmp(op, "mul")) r = (int64_t)((uint64_t)x * (uint64_t)y);
      else r = (int64_t)fold_f(op, (double)x, (double)y);
      rill_element_set_int(t.dtype, v->data, i, r);
    }
  }
  return true;
}

typedef struct { const char *onnx, *op; } binary_map_t;
static const binary_map_t BINARY[] = {
    {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"},
    {"Equal", "eq"}, {"Less", "lt"}, {"LessOrEqual", "le"}, {"Greater", "gt"}, {"GreaterOrEqual", "ge"},
    {"And", "logical_and"}, {"Or", "logical_or"}, {"Xor", "ne"}, {NULL, NULL}};

static bool op_binary(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  NEED(1);
  const binary_map_t *b = BINARY;
  while (strcmp(b->onnx, n->op_type)) b++;
  ival_t *x = in[0], *y = in[1];
  if (m->opset < 7 && onnx_attr_get(n, "axis") && onnx_attr_i(n, "broadcast", 0)) {
    /* before opset 7: B's dims line up with A's from axis on */
    int64_t axis = onnx_attr_i(n, "axis", 0);
    if (axis < 0) axis += x->t.rank;
    if (axis < 0 || axis + y->t.rank > x->t.rank) return imp_fail(m, RILL_MALFORMED, "axis out of range"), false;
    rill_type_t t = y->t;
    while (t.rank < x->t.rank - axis) t.dims[t.rank++] = 1;
    y = imp_reshape(m, NULL, y, &t);
    if (!y) return false;
  }
  bool logical = !strncmp(b->op, "logical", 7) || !strcmp(n->op_type, "Xor");
  if (logical && (x->t.dtype != RILL_BOOL || y->t.dtype != RILL_BOOL)) return imp_fail(m, RILL_MALFORMED, "operands must be bool"), false;
  if (!strcmp(b->op, "pow")) {
    if (!need_num(m, x, "base") || !need_num(m, y, "exponent")) return false;
    if (imp_is_int(x->t.dtype) && imp_is_float(y->t.dtype)) {
      /* an integer to a float power: in f64, then back (as ONNX's reference does) */
      rill_dtype_t it = x->t.dtype;
      return imp_cast(m, OUT(0), bin(m, NULL, "pow", imp_cast(m, NULL, x, RILL_F64), imp_cast(m, NULL, y, RILL_F64)), it) != NULL;
    }
    if (y->t.dtype != x->t.dtype) y = imp_cast(m, NULL, y, x->t.dtype);
    return bin(m, OUT(0), "pow", x, y) != NULL;
  }
  if (x->t.dtype != y->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of dtypes %s and %s", rill_dtype_name(x->t.dtype), rill_dtype_name(y->t.dtype)), false;
  if (!logical && strcmp(b->op, "eq") && !need_num(m, x, "operand")) return false;
  ival_t *args[2] = {x, y};
  if (fold_ok(args, 2) && strcmp(b->op, "pow") && !logical && strcmp(b->op, "ne")) return fold_binary(m, OUT(0), b->op, x, y);
  if (!strcmp(b->op, "div") && !imp_is_float(x->t.dtype)) {
    /* ONNX divides integers with truncation: true division, then the cast truncates */
    ival_t *q = bin(m, NULL, "div", x, y);
    return imp_cast(m, OUT(0), q, x->t.dtype) != NULL;
  }
  return bin(m, OUT(0), b->op, x, y) != NULL;
}

/* Max, Min, Sum, Mean: any number of operands */
static bool op_variadic(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const char *op = !strcmp(n->op_type, "Max") ? "maximum" : !strcmp(n->op_type, "Min") ? "minimum" : "add";
  if (nin < 1) return imp_fail(m, RILL_MALFORMED, "no operands"), false;
  for (int i = 0; i < nin; i++) {
    NEED(i);
    if (in[i]->t.dtype != in[0]->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of different dtypes"), false;
    if (!need_num(m, in[i], "operand")) return false;
  }
  bool mean = !strcmp(n->op_type, "Mean");
  if (mean && !need_float(m, in[0], "operand")) return false;
  ival_t *acc = in[0];
  for (int i = 1; i < nin && acc; i++) acc = bin(m, i == nin - 1 && !mean ? OUT(0) : NULL, op, acc, in[i]);
  if (!acc) return false;
  if (mean && nin > 1) return bin(m, OUT(0), "div", acc, scalar(m, acc->t.dtype, nin)) != NULL;
  if (nin == 1) return imp_alias(m, OUT(0), acc) != NULL;
  return acc != NULL;
}

static bool op_where(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  if (in[0]->t.dtype != RILL_BOOL) return imp_fail(m, RILL_MALFORMED, "condition must be bool"), false;
  if (in[1]->t.dtype != in[2]->t.dtype) return imp_fail(m, RILL_MALFORMED, "branches of different dtypes"), false;
  rill_type_t t, t2;
  if (!bcast(m, &in[0]->t, &in[1]->t, &t) || !bcast(m, &t, &in[2]->t, &t2)) return false;
  t2.dtype = in[1]->t.dtype;
  return imp_emit(m, OUT(0), &t2, "where", in, 3, NULL) != NULL;
}

static bool op_identity(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  if (!strcmp(n->op_type, "Dropout")) {
    if (OUT(1)) {
      /* the mask is all true in inference: known */
      rill_type_t t = in[0]->t;
      t.dtype = RILL_BOOL;
      size_t k = imp_numel(&t);
      if (k <= ONNX_FOLD_MAX) {
        void *ones = malloc(k ? k : 1);
        if (!ones) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
        memset(ones, 1, k);
        ival_t *v = imp_new(m, OUT(1), &t);
        if (v) v->data = ones;
        else free(ones);
      }
    }
    if (IN(2)) {
      if (!in[2]->data) return imp_unsup(m, "training_mode computed at run time"), false;
      if (rill_element_get_int(in[2]->t.dtype, in[2]->data, 0)) return imp_unsup(m, "training_mode=true"), false;
    }
  }
  return imp_alias(m, OUT(0), in[0]) != NULL;
}

static bool op_cast(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  rill_dtype_t d;
  if (!strcmp(n->op_type, "CastLike")) {
    NEED(1);
    d = in[1]->t.dtype;
  } else {
    int64_t to = onnx_attr_i(n, "to", -1);
    if (to < 0) return imp_fail(m, RILL_MALFORMED, "missing attribute 'to'"), false;
    if (!onnx_dtype((int32_t)to, &d)) return imp_unsup(m, "cast to %s", onnx_dtype_name((int32_t)to)), false;
  }
  if (in[0]->data) {
    ival_t *c = imp_cast(m, NULL, in[0], d);
    return c && imp_alias(m, OUT(0), c);
  }
  return imp_cast(m, OUT(0), in[0], d) != NULL;
}

static bool op_clip(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  if (!need_num(m, in[0], "input")) return false;
  double lo = -INFINITY, hi = INFINITY;
  bool has_lo = false, has_hi = false;
  if (m->opset < 11) {
    has_lo = onnx_attr_get(n, "min") != NULL;
    has_hi = onnx_attr_get(n, "max") != NULL;
    lo = onnx_attr_f(n, "min", lo);
    hi = onnx_attr_f(n, "max", hi);
  } else {
    for (int k = 1; k <= 2; k++) {
      if (!IN(k)) continue;
      if (!in[k]->data) {
        /* bounds computed at run time: maximum and minimum with them */
        ival_t *y = in[0];
        for (int j = 1; j <= 2 && y; j++)
          if (IN(j)) {
            if (in[j]->t.dtype != y->t.dtype) return imp_fail(m, RILL_MALFORMED, "bounds of another dtype"), false;
            bool last = j == 2 || !IN(2);
            y = bin(m, last ? OUT(0) : NULL, j == 1 ? "maximum" : "minimum", y, in[j]);
          }
        return y != NULL;
      }
      double v = rill_element_get(in[k]->t.dtype, in[k]->data, 0);
      if (k == 1) { lo = v; has_lo = true; } else { hi = v; has_hi = true; }
    }
  }
  char a[128] = "";
  if (has_lo && has_hi) attrs_fmt(a, sizeof a, "min=%.17g, max=%.17g", lo, hi);
  else if (has_lo) attrs_fmt(a, sizeof a, "min=%.17g", lo);
  else if (has_hi) attrs_fmt(a, sizeof a, "max=%.17g", hi);
  if (!has_lo && !has_hi) return imp_alias(m, OUT(0), in[0]) != NULL;
  return un(m, OUT(0), "clip", in[0], a) != NULL;
}

/* activations written as a few core ops, exactly as ONNX defines them */
static bool op_activation(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  rill_dtype_t d = x->t.dtype;
  const char *t = n->op_type, *o = OUT(0);
  if (!strcmp(t, "Sign")) {
    /* 1 above 0, -1 below, else 0 */
    if (!need_num(m, x, "input")) return false;
    ival_t *neg = bin(m, NULL, "lt", x, scalar(m, d, 0)), *pos = bin(m, NULL, "gt", x, scalar(m, d, 0));
    ival_t *a1[3] = {neg, scalar(m, d, -1), scalar(m, d, 0)};
    if (!neg || !pos || !a1[1] || !a1[2]) return false;
    ival_t *a2[3] = {pos, scalar(m, d, 1), imp_emit(m, NULL, &x->t, "where", a1, 3, NULL)};
    if (!a2[1] || !a2[2]) return false;
    return imp_emit(m, o, &x->t, "where", a2, 3, NULL) != NULL;
  }
  if (!need_float(m, x, "input")) return false;
  char a[128];
  if (!strcmp(t, "LeakyRelu")) {
    attrs_fmt(a, sizeof a, "alpha=%.9g", onnx_attr_f(n, "alpha", 0.01));
    return un(m, o, "leaky_relu", x, a) != NULL;
  }
  if (!strcmp(t, "HardSigmoid") || !strcmp(t, "HardSwish")) {
    bool swish = t[4] == 'S' && t[5] == 'w';
    double al = swish ? 1.0 / 6 : onnx_attr_f(n, "alpha", 0.2), be = swish ? 0.5 : onnx_attr_f(n, "beta", 0.5);
    ival_t *y = bin(m, NULL, "add", bin(m, NULL, "mul", x, scalar(m, d, al)), scalar(m, d, be));
    ival_t *h = un(m, swish ? NULL : o, "clip", y, "min=0, max=1");
    return swish ? bin(m, o, "mul", x, h) != NULL : h != NULL;
  }
  if (!strcmp(t, "Softsign")) return bin(m, o, "div", x, bin(m, NULL, "add", un(m, NULL, "abs", x, NULL), scalar(m, d, 1))) != NULL;
  if (!strcmp(t, "Softplus")) return un(m, o, "log", bin(m, NULL, "add", un(m, NULL, "exp", x, NULL), scalar(m, d, 1)), NULL) != NULL;
  if (!strcmp(t, "Elu") || !strcmp(t, "Selu")) {
    bool selu = t[0] == 'S';
    double al = onnx_attr_f(n, "alpha", selu ? 1.67326319217681884765625 : 1.0), ga = onnx_attr_f(n, "gamma", 1.05070102214813232421875);
    ival_t *neg = bin(m, NULL, "mul", bin(m, NULL, "sub", un(m, NULL, "exp", x, NULL), scalar(m, d, 1)), scalar(m, d, al));
    ival_t *c = bin(m, NULL, selu ? "le" : "lt", x, scalar(m, d, 0));
    ival_t *args[3] = {c, neg, x};
    if (!c || !neg) return false;
    rill_type_t tt = x->t;
    ival_t *y = imp_emit(m, selu ? NULL : o, &tt, "where", args, 3, NULL);
    return selu ? bin(m, o, "mul", y, scalar(m, d, ga)) != NULL : y != NULL;
  }
  if (!strcmp(t, "Celu")) {
    double al = onnx_attr_f(n, "alpha", 1.0);
    ival_t *e = bin(m, NULL, "mul", bin(m, NULL, "sub", un(m, NULL, "exp", bin(m, NULL, "div", x, scalar(m, d, al)), NULL), scalar(m, d, 1)), scalar(m, d, al));
    return bin(m, o, "add", un(m, NULL, "relu", x, NULL), bin(m, NULL, "minimum", e, scalar(m, d, 0))) != NULL;
  }
  if (!strcmp(t, "ThresholdedRelu")) {
    ival_t *c = bin(m, NULL, "gt", x, scalar(m, d, onnx_attr_f(n, "alpha", 1.0)));
    ival_t *args[3] = {c, x, scalar(m, d, 0)};
    if (!c || !args[2]) return false;
    return imp_emit(m, o, &x->t, "where", args, 3, NULL) != NULL;
  }
  if (!strcmp(t, "PRelu")) {
    NEED(1);
    if (in[1]->t.dtype != d) return imp_fail(m, RILL_MALFORMED, "slope of another dtype"), false;
    if (m->opset < 7 && in[1]->t.rank == 1 && x->t.rank > 2 && in[1]->t.dims[0] == x->t.dims[1] && in[1]->t.dims[0] != 1) {
      /* before opset 7 a slope of C values is per channel */
      rill_type_t st = {d, x->t.rank - 1, {0}};
      st.dims[0] = in[1]->t.dims[0];
      for (int i = 1; i < st.rank; i++) st.dims[i] = 1;
      in[1] = imp_reshape(m, NULL, in[1], &st);
      if (!in[1]) return false;
    }
    ival_t *c = bin(m, NULL, "lt", x, scalar(m, d, 0));
    ival_t *args[3] = {c, bin(m, NULL, "mul", x, in[1]), x};
    if (!c || !args[1]) return false;
    rill_type_t tt;
    if (!bcast(m, &c->t, &args[1]->t, &tt)) return false;
    tt.dtype = d;
    return imp_emit(m, o, &tt, "where", args, 3, NULL) != NULL;
  }
  if (!strcmp(t, "IsNaN")) return bin(m, o, "ne", x, x) != NULL;
  if (!strcmp(t, "Tan")) return bin(m, o, "div", un(m, NULL, "sin", x, NULL), un(m, NULL, "cos", x, NULL)) != NULL;
  if (!strcmp(t, "Sinh") || !strcmp(t, "Cosh")) {
    ival_t *e = un(m, NULL, "exp", x, NULL), *f = un(m, NULL, "exp", un(m, NULL, "neg", x, NULL), NULL);
    return bin(m, o, "mul", bin(m, NULL, t[0] == 'S' ? "sub" : "add", e, f), scalar(m, d, 0.5)) != NULL;
  }
  if (!strcmp(t, "Asinh") || !strcmp(t, "Acosh")) {
    /* log(x + sqrt(x^2 +- 1)) */
    ival_t *q = bin(m, NULL, t[1] == 's' ? "add" : "sub", bin(m, NULL, "mul", x, x), scalar(m, d, 1));
    return un(m, o, "log", bin(m, NULL, "add", x, un(m, NULL, "sqrt", q, NULL)), NULL) != NULL;
  }
  if (!strcmp(t, "Atanh")) {
    /* log((1 + x) / (1 - x)) / 2 */
    ival_t *q = bin(m, NULL, "div", bin(m, NULL, "add", scalar(m, d, 1), x), bin(m, NULL, "sub", scalar(m, d, 1), x));
    return bin(m, o, "mul", un(m, NULL, "log", q, NULL), scalar(m, d, 0.5)) != NULL;
  }
  if (!strcmp(t, "Round")) {
    /* halves to even: r = floor(x + 1/2), less 1 where x was halfway and r is
     * odd; from 2^23 (f32; 2^52 f64, 2^10 f16) on every value is whole already */
    double big = d == RILL_F64 ? 4503599627370496.0 : d == RILL_F32 ? 8388608.0 : d == RILL_F16 ? 1024.0 : 128.0;
    ival_t *r = un(m, NULL, "floor", bin(m, NULL, "add", x, scalar(m, d, 0.5)), NULL);
    ival_t *tie = bin(m, NULL, "eq", bin(m, NULL, "sub", r, x), scalar(m, d, 0.5));
    ival_t *half = un(m, NULL, "floor", bin(m, NULL, "mul", r, scalar(m, d, 0.5)), NULL);
    ival_t *odd = bin(m, NULL, "ne", bin(m, NULL, "sub", r, bin(m, NULL, "mul", half, scalar(m, d, 2))), scalar(m, d, 0));
    ival_t *a1[3] = {bin(m, NULL, "logical_and", tie, odd), bin(m, NULL, "sub", r, scalar(m, d, 1)), r};
    if (!a1[0] || !a1[1] || !r) return false;
    ival_t *a2[3] = {bin(m, NULL, "ge", un(m, NULL, "abs", x, NULL), scalar(m, d, big)), x, imp_emit(m, NULL, &x->t, "where", a1, 3, NULL)};
    if (!a2[0] || !a2[2]) return false;
    return imp_emit(m, o, &x->t, "where", a2, 3, NULL) != NULL;
  }
  if (!strcmp(t, "Shrink")) {
    /* x + bias below -lambd, x - bias above lambd, else 0 */
    double lambd = onnx_attr_f(n, "lambd", 0.5), bias = onnx_attr_f(n, "bias", 0.0);
    ival_t *lo = bin(m, NULL, "lt", x, scalar(m, d, -lambd)), *hi = bin(m, NULL, "gt", x, scalar(m, d, lambd));
    ival_t *a1[3] = {hi, bin(m, NULL, "sub", x, scalar(m, d, bias)), scalar(m, d, 0)};
    if (!a1[0] || !a1[1] || !a1[2] || !lo) return false;
    ival_t *inner = imp_emit(m, NULL, &x->t, "where", a1, 3, NULL);
    ival_t *a2[3] = {lo, bin(m, NULL, "add", x, scalar(m, d, bias)), inner};
    if (!a2[1] || !inner) return false;
    return imp_emit(m, o, &x->t, "where", a2, 3, NULL) != NULL;
  }
  if (!strcmp(t, "IsInf")) {
    bool pos = onnx_attr_i(n, "detect_positive", 1), neg = onnx_attr_i(n, "detect_negative", 1);
    ival_t *p = pos ? bin(m, neg ? NULL : o, "eq", x, scalar(m, d, INFINITY)) : NULL;
    ival_t *q = neg ? bin(m, pos ? NULL : o, "eq", x, scalar(m, d, -INFINITY)) : NULL;
    if (pos && neg) return bin(m, o, "logical_or", p, q) != NULL;
    if (pos || neg) return (p ? p : q) != NULL;
    /* neither sign: all false */
    return bin(m, o, "ne", x, x) != NULL;
  }
  return imp_unsup(m, "op type %s", t), false;
}

/* ---- reductions ---- */
static bool op_reduce(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  const char *t = n->op_type;
  const char *op = !strcmp(t, "ReduceMean") ? "mean" : !strcmp(t, "ReduceMax") ? "max" : !strcmp(t, "ReduceMin") ? "min" : "sum";
  /* L1, L2, SumSquare, LogSum, LogSumExp: a sum between ops on each side */
  const char *pre = !strcmp(t, "ReduceL1") ? "abs" : !strcmp(t, "ReduceL2") || !strcmp(t, "ReduceSumSquare") ? "square"
                    : !strcmp(t, "ReduceLogSumExp") ? "exp" : NULL;
  const char *post = !strcmp(t, "ReduceL2") ? "sqrt" : !strcmp(t, "ReduceLogSum") || !strcmp(t, "ReduceLogSumExp") ? "log" : NULL;
  if (!need_num(m, x, "input") || ((!strcmp(op, "mean") || post) && !need_float(m, x, "input"))) return false;
  int64_t axes[RILL_MAX_RANK + 1] = {0};
  int na = -1;
  if (!strcmp(t, "ReduceSum") && m->opset >= 13) {
    if (IN(1)) na = known_ints(m, in[1], "axes", axes, RILL_MAX_RANK);
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
    if (!norm_axis(m, axes[i], x->t.rank, &axes[i])) return false;
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
  list_str(l, sizeof l, axes, na);
  attrs_fmt(a, sizeof a, "axes=%s, keepdims=%s", l, keep ? "true" : "false");
  if (pre && !strcmp(pre, "square")) x = bin(m, NULL, "mul", x, x);
  else if (pre) x = un(m, NULL, pre, x, NULL);
  if (!x) return false;
  ival_t *y = x->t.rank == 0 ? imp_alias(m, post ? NULL : OUT(0), x) : imp_emit(m, post ? NULL : OUT(0), &o, op, &x, 1, a);
  return post ? un(m, OUT(0), post, y, NULL) != NULL : y != NULL;
}

static bool op_argmax(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!need_num(m, x, "input")) return false;
  bool last = onnx_attr_i(n, "select_last_index", 0) != 0;
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  bool keep = onnx_attr_i(n, "keepdims", 1) != 0;
  if (!strcmp(n->op_type, "ArgMin")) {
    if (!imp_is_float(x->t.dtype)) return imp_unsup(m, "ArgMin of integers"), false;
    x = un(m, NULL, "neg", x, NULL);
  }
  if (!x) return false;
  int64_t dim = x->t.dims[axis];
  if (dim == 0) return imp_fail(m, RILL_MALFORMED, "ArgMax over an empty dimension"), false;
  /* the last of equal values: the first of the reversed axis, counted back */
  if (last) x = slice1(m, x, axis, dim - 1, -1, -1);
  rill_type_t o = {RILL_I64, 0, {0}};
  for (int d = 0; x && d < x->t.rank; d++)
    if (d != axis) o.dims[o.rank++] = x->t.dims[d];
    else if (keep) o.dims[o.rank++] = 1;
  char a[96];
  attrs_fmt(a, sizeof a, "axis=%lld, keepdims=%s", (long long)axis, keep ? "true" : "false");
  ival_t *i = x ? imp_emit(m, last ? NULL : OUT(0), &o, "argmax", &x, 1, a) : NULL;
  return last ? bin(m, OUT(0), "sub", scalar_int(m, RILL_I64, dim - 1), i) != NULL : i != NULL;
}

static bool op_softmax(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!need_float(m, x, "input")) return false;
  const char *op = !strcmp(n->op_type, "Softmax") ? "softmax" : "log_softmax";
  int r = x->t.rank;
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", m->opset >= 13 ? -1 : 1), r, &axis)) return false;
  if (m->opset >= 13 || axis == r - 1) {
    char a[48];
    attrs_fmt(a, sizeof a, "axis=%lld", (long long)axis);
    return un(m, OUT(0), op, x, a) != NULL;
  }
  /* before opset 13: over the input seen as 2-D [prod(:axis), prod(axis:)] */
  rill_type_t t2 = {x->t.dtype, 2, {1, 1}};
  for (int d = 0; d < r; d++) t2.dims[d < axis ? 0 : 1] *= x->t.dims[d];
  ival_t *y = un(m, NULL, op, imp_reshape(m, NULL, x, &t2), "axis=1");
  return imp_reshape(m, OUT(0), y, &x->t) != NULL;
}

/* ---- normalisation ---- */
static bool op_batchnorm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  for (int i = 0; i < 5; i++) NEED(i);
  if (onnx_attr_i(n, "training_mode", 0)) return imp_unsup(m, "training_mode=1"), false;
  if (m->opset < 9 && onnx_attr_i(n, "spatial", 1) != 1) return imp_unsup(m, "spatial=0"), false;
  if (OUT(1) || OUT(2) || OUT(3) || OUT(4)) return imp_unsup(m, "the training outputs (running mean and variance)"), false;
  ival_t *x = in[0];
  if (!need_float(m, x, "input")) return false;
  if (x->t.rank < 2) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 2)", x->t.rank), false;
  for (int i = 1; i < 5; i++) {
    if (in[i]->t.rank != 1 || in[i]->t.dims[0] != x->t.dims[1])
      return imp_fail(m, RILL_MALFORMED, "input %d must have C=%lld values", i, (long long)x->t.dims[1]), false;
    if (in[i]->t.dtype != x->t.dtype) in[i] = imp_cast(m, NULL, in[i], x->t.dtype);
  }
  char a[64];
  attrs_fmt(a, sizeof a, "eps=%.9g", onnx_attr_f(n, "epsilon", 1e-5));
  return imp_emit(m, OUT(0), &x->t, "batch_norm", in, 5, a) != NULL;
}

static bool op_layernorm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0];
  if (!need_float(m, x, "input")) return false;
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", -1), x->t.rank, &axis)) return false;
  if (OUT(1) || OUT(2)) {
    /* Mean and InvStdDev = 1 / sqrt(Var + epsilon), over axis.., in stash_type (f32) */
    if (onnx_attr_i(n, "stash_type", 1) != 1) return imp_unsup(m, "stash_type other than float"), false;
    ival_t *xs = imp_cast(m, NULL, x, RILL_F32);
    int64_t axes[RILL_MAX_RANK];
    rill_type_t st = {RILL_F32, x->t.rank, {0}};
    for (int d = 0; d < x->t.rank; d++) {
      st.dims[d] = d < axis ? x->t.dims[d] : 1;
      if (d >= axis) axes[d - axis] = d;
    }
    char l[100], a[140];
    list_str(l, sizeof l, axes, (int)(x->t.rank - axis));
    attrs_fmt(a, sizeof a, "axes=%s, keepdims=true", l);
    ival_t *mean = xs ? imp_emit(m, OUT(1), &st, "mean", &xs, 1, a) : NULL;
    ival_t *dev = bin(m, NULL, "sub", xs, mean);
    ival_t *sq = bin(m, NULL, "mul", dev, dev);
    ival_t *var = sq ? imp_emit(m, NULL, &st, "mean", &sq, 1, a) : NULL;
    ival_t *inv = un(m, OUT(2), "rsqrt", bin(m, NULL, "add", var, scalar(m, RILL_F32, onnx_attr_f(n, "epsilon", 1e-5))), NULL);
    if (!inv) return false;
  }
  ival_t *args[3] = {x, in[1], IN(2)};
  int na = IN(2) ? 3 : 2;
  for (int k = 1; k < na; k++) {
    bool ok = args[k]->t.rank == x->t.rank - axis && args[k]->t.dtype == x->t.dtype;
    for (int d = 0; ok && d < args[k]->t.rank; d++) ok = args[k]->t.dims[d] == x->t.dims[axis + d];
    if (!ok) {
      rill_type_t want = {x->t.dtype, (int)(x->t.rank - axis), {0}};
      for (int d = 0; d < want.rank; d++) want.dims[d] = x->t.dims[axis + d];
      if (args[k]->t.dtype != x->t.dtype) return imp_unsup(m, "scale or bias of another dtype"), false;
      rill_type_t chk;
      if (!bcast(m, &args[k]->t, &want, &chk) || chk.rank != want.rank) return false;
      char l[200], a[220];
      list_str(l, sizeof l, want.dims, want.rank);
      attrs_fmt(a, sizeof a, "shape=%s", l);
      args[k] = imp_emit(m, NULL, &want, "broadcast_to", &args[k], 1, a);
      if (!args[k]) return false;
    }
  }
  char a[96];
  attrs_fmt(a, sizeof a, "axis=%lld, eps=%.9g", (long long)axis, onnx_attr_f(n, "epsilon", 1e-5));
  return imp_emit(m, OUT(0), &x->t, "layer_norm", args, na, a) != NULL;
}

/* InstanceNormalization: per sample and channel over the spatial dims */
static bool op_instancenorm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  ival_t *x = in[0];
  if (!need_float(m, x, "input")) return false;
  int r = x->t.rank;
  if (r < 3) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 3)", r), false;
  rill_type_t ct = {x->t.dtype, r - 1, {x->t.dims[1]}}, st = x->t;
  for (int d = 1; d < r - 1; d++) ct.dims[d] = 1;
  int64_t axes[RILL_MAX_RANK];
  for (int d = 2; d < r; d++) {
    axes[d - 2] = d;
    st.dims[d] = 1;
  }
  for (int k = 1; k <= 2; k++)
    if (in[k]->t.rank != 1 || in[k]->t.dims[0] != x->t.dims[1] || in[k]->t.dtype != x->t.dtype)
      return imp_fail(m, RILL_MALFORMED, "input %d must have C=%lld values", k, (long long)x->t.dims[1]), false;
  char l[100], a[140];
  list_str(l, sizeof l, axes, r - 2);
  attrs_fmt(a, sizeof a, "axes=%s, keepdims=true", l);
  ival_t *mean = imp_emit(m, NULL, &st, "mean", &x, 1, a);
  ival_t *dev = bin(m, NULL, "sub", x, mean);
  ival_t *sq = bin(m, NULL, "mul", dev, dev);
  ival_t *var = sq ? imp_emit(m, NULL, &st, "mean", &sq, 1, a) : NULL;
  ival_t *inv = un(m, NULL, "rsqrt", bin(m, NULL, "add", var, scalar(m, x->t.dtype, onnx_attr_f(n, "epsilon", 1e-5))), NULL);
  ival_t *y = bin(m, NULL, "mul", bin(m, NULL, "mul", dev, inv), imp_reshape(m, NULL, in[1], &ct));
  return bin(m, OUT(0), "add", y, imp_reshape(m, NULL, in[2], &ct)) != NULL;
}

/* ---- linear algebra ---- */
static bool matmul_type(imp_t *m, const rill_type_t *a, const rill_type_t *b, rill_type_t *o) {
  if (a->rank < 1 || b->rank < 1) return imp_fail(m, RILL_MALFORMED, "MatMul of a 0-d tensor"), false;
  rill_type_t A = *a, B = *b;
  if (A.rank == 1) { A.rank = 2; A.dims[1] = A.dims[0]; A.dims[0] = 1; }
  if (B.rank == 1) { B.rank = 2; B.dims[1] = 1; }
  if (A.dims[A.rank - 1] != B.dims[B.rank - 2]) return imp_fail(m, RILL_MALFORMED, "MatMul inner dimensions differ"), false;
  rill_type_t ba = A, bb = B;
  ba.rank -= 2;
  bb.rank -= 2;
  if (!bcast(m, &ba, &bb, o)) return false;
  if (a->rank > 1) o->dims[o->rank++] = A.dims[A.rank - 2];
  if (b->rank > 1) o->dims[o->rank++] = B.dims[B.rank - 1];
  o->dtype = a->dtype;
  return true;
}

static bool op_matmul(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  if (!need_num(m, in[0], "input") || in[0]->t.dtype != in[1]->t.dtype) return (void)(m->err ? NULL : imp_fail(m, RILL_MALFORMED, "operands of different dtypes")), false;
  rill_type_t o;
  if (!matmul_type(m, &in[0]->t, &in[1]->t, &o)) return false;
  return imp_emit(m, OUT(0), &o, "matmul", in, 2, NULL) != NULL;
}

static ival_t *transpose2(imp_t *m, ival_t *x) {
  rill_type_t t = {x->t.dtype, 2, {x->t.dims[1], x->t.dims[0]}};
  if (x->data) {
    ival_t *v = imp_new(m, NULL, &t);
    if (!v) return NULL;
    size_t es = rill_dtype_size(t.dtype), r = (size_t)x->t.dims[0], c = (size_t)x->t.dims[1];
    v->data = malloc(r * c * es + 1);
    if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i < r; i++)
      for (size_t j = 0; j < c; j++) memcpy((char *)v->data + (j * r + i) * es, (char *)x->data + (i * c + j) * es, es);
    return v;
  }
  return imp_emit(m, NULL, &t, "transpose", &x, 1, "perm=[1, 0]");
}

static bool op_gemm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *a = in[0], *b = in[1], *c = IN(2);
  if (a->t.rank != 2 || b->t.rank != 2) return imp_fail(m, RILL_MALFORMED, "A and B must be 2-D"), false;
  if (!need_num(m, a, "A") || a->t.dtype != b->t.dtype || (c && c->t.dtype != a->t.dtype))
    return (void)(m->err ? NULL : imp_fail(m, RILL_MALFORMED, "operands of different dtypes")), false;
  double alpha = onnx_attr_f(n, "alpha", 1.0), beta = onnx_attr_f(n, "beta", 1.0);
  bool ta = onnx_attr_i(n, "transA", 0), tb = onnx_attr_i(n, "transB", 0);
  if (ta) a = transpose2(m, a);
  /* B known and not transposed: transpose it here, so the product is linear's x w^T */
  if (!tb && b->data) {
    b = transpose2(m, b);
    tb = true;
  }
  if (!a || !b) return false;
  int64_t M = a->t.dims[0], K = a->t.dims[1], N = tb ? b->t.dims[0] : b->t.dims[1];
  if ((tb ? b->t.dims[1] : b->t.dims[0]) != K) return imp_fail(m, RILL_MALFORMED, "A and B do not multiply"), false;
  rill_type_t o = {a->t.dtype, 2, {M, N}};
  bool c_used = c && beta != 0;
  bool fused_bias = c_used && tb && alpha == 1 && beta == 1 && c->t.rank == 1 && c->t.dims[0] == N;
  const char *last = OUT(0);
  bool tail = (alpha != 1) || (c_used && !fused_bias);
  ival_t *args[3] = {a, b, fused_bias ? c : NULL};
  ival_t *y = imp_emit(m, tail ? NULL : last, &o, tb ? "linear" : "matmul", args, fused_bias ? 3 : 2, NULL);
  if (!y) return false;
  if (alpha != 1) y = bin(m, c_used && !fused_bias ? NULL : last, "mul", y, scalar(m, o.dtype, alpha));
  if (c_used && !fused_bias) {
    ival_t *cc = beta != 1 ? bin(m, NULL, "mul", c, scalar(m, o.dtype, beta)) : c;
    rill_type_t chk;
    if (!cc || !bcast(m, &cc->t, &o, &chk) || chk.rank != 2 || chk.dims[0] != M || chk.dims[1] != N)
      return (void)(m->err ? NULL : imp_fail(m, RILL_MALFORMED, "C does not broadcast to [M, N]")), false;
    y = bin(m, last, "add", y, cc);
  }
  return y != NULL;
}

/* ---- convolution and pooling ---- */
typedef struct window {
  int nd;                 /* spatial dims: 1, 2 or 3 */
  int64_t k[3], s[3], d[3], pb[3], pe[3];
} window_t;

/* kernel_shape, strides, dilations, pads, auto_pad for nd spatial dims of x */
static bool window_of(imp_t *m, const Onnx__NodeProto *n, const rill_type_t *x, const int64_t *kernel, window_t *w) {
  int nd = x->rank - 2;
  w->nd = nd;
  int64_t v[8];
  int c;
  for (int i = 0; i < nd; i++) {
    w->k[i] = kernel[i];
    w->s[i] = w->d[i] = 1;
    w->pb[i] = w->pe[i] = 0;
  }
  if ((c = onnx_attr_ints(n, "kernel_shape", v, 8)) >= 0) {
    if (c != nd) return imp_fail(m, RILL_MALFORMED, "kernel_shape of %d values for %d spatial dims", c, nd), false;
    for (int i = 0; i < nd; i++)
      if (kernel[i] && v[i] != kernel[i]) return imp_fail(m, RILL_MALFORMED, "kernel_shape does not match the weight"), false;
      else w->k[i] = v[i];
  }
  if ((c = onnx_attr_ints(n, "strides", v, 8)) >= 0) {
    if (c != nd) return imp_fail(m, RILL_MALFORMED, "strides of %d values for %d spatial dims", c, nd), false;
    for (int i = 0; i < nd; i++) w->s[i] = v[i];
  }
  if ((c = onnx_attr_ints(n, "dilations", v, 8)) >= 0) {
    if (c != nd) return imp_fail(m, RILL_MALFORMED, "dilations of %d values for %d spatial dims", c, nd), false;
    for (int i = 0; i < nd; i++) w->d[i] = v[i];
  }
  for (int i = 0; i < nd; i++)
    if (w->k[i] < 1 || w->s[i] < 1 || w->d[i] < 1 || w->k[i] > (1 << 30) || w->s[i] > (1 << 30) || w->d[i] > (1 << 30))
      return imp_fail(m, RILL_MALFORMED, "kernel, strides and dilations must be 1..2^30"), false;
  char buf[32];
  const char *ap = onnx_attr_s(n, "auto_pad", "NOTSET", buf, sizeof buf);
  if (!strcmp(ap, "NOTSET")) {
    if ((c = onnx_attr_ints(n, "pads", v, 8)) >= 0) {
      if (c != 2 * nd) return imp_fail(m, RILL_MALFORMED, "pads of %d values for %d spatial dims", c, nd), false;
      for (int i = 0; i < nd; i++) {
        w->pb[i] = v[i];
        w->pe[i] = v[nd + i];
        if (w->pb[i] < 0 || w->pe[i] < 0 || w->pb[i] > (1 << 30) || w->pe[i] > (1 << 30)) return imp_unsup(m, "negative or huge pads"), false;
      }
    }
  } else if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
    for (int i = 0; i < nd; i++) {
      int64_t in = x->dims[2 + i], out = (in + w->s[i] - 1) / w->s[i];
      int64_t total = (out - 1) * w->s[i] + (w->k[i] - 1) * w->d[i] + 1 - in;
      if (total < 0) total = 0;
      w->pb[i] = ap[5] == 'U' ? total / 2 : total - total / 2;
      w->pe[i] = total - w->pb[i];
    }
  } else if (strcmp(ap, "VALID")) {
    return imp_unsup(m, "auto_pad=\"%s\"", ap), false;
  }
  return true;
}

/* A 1-D window as 2-D with a height of 1 */
static void window_2d(window_t *w) {
  if (w->nd == 2) return;
  w->k[1] = w->k[0]; w->s[1] = w->s[0]; w->d[1] = w->d[0]; w->pb[1] = w->pb[0]; w->pe[1] = w->pe[0];
  w->k[0] = w->s[0] = w->d[0] = 1;
  w->pb[0] = w->pe[0] = 0;
}

static ival_t *as_2d(imp_t *m, ival_t *x) {
  if (!x || x->t.rank != 3) return x;
  rill_type_t t = {x->t.dtype, 4, {x->t.dims[0], x->t.dims[1], 1, x->t.dims[2]}};
  return imp_reshape(m, NULL, x, &t);
}

static int64_t out_len(int64_t in, int64_t pb, int64_t pe, int64_t k, int64_t s, int64_t d, bool ceil_mode) {
  int64_t span = d * (k - 1) + 1, num = in + pb + pe - span;
  if (num < 0) return -1;
  int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + pb) o--;
  return o;
}

/* x with its depth (dim 2) padded by pb and pe of `value`, or x */
static ival_t *pad_depth(imp_t *m, ival_t *x, int64_t pb, int64_t pe, const char *value) {
  if (!x || (!pb && !pe)) return x;
  int64_t pads[10] = {0};
  pads[2] = pb;
  pads[5 + 2] = pe;
  rill_type_t t = x->t;
  t.dims[2] += pb + pe;
  char l[160], a[200];
  list_str(l, sizeof l, pads, 10);
  attrs_fmt(a, sizeof a, "pads=%s, value=%s", l, value);
  return imp_emit(m, NULL, &t, "pad", &x, 1, a);
}

/* [N, C, D, H, W] -> the depth slices d0, d0 + s, ... (od of them) as [N, C*od, H, W] */
static ival_t *depth_slices(imp_t *m, ival_t *x, int64_t d0, int64_t od, int64_t s) {
  ival_t *sl = slice1(m, x, 2, d0, d0 + (od - 1) * s + 1, s);
  if (!sl) return NULL;
  rill_type_t t = {x->t.dtype, 4, {x->t.dims[0], x->t.dims[1] * od, x->t.dims[3], x->t.dims[4]}};
  return imp_reshape(m, NULL, sl, &t);
}

/* A 3-D convolution as the sum over the kernel's depth of 2-D convolutions
 * of depth slices (the output depth moved into the batch) */
static bool conv3d(imp_t *m, const Onnx__NodeProto *n, ival_t *x, ival_t *w, ival_t *b, const window_t *win, int64_t group,
                   const rill_type_t *o) {
  int64_t N = x->t.dims[0], C = x->t.dims[1], O = w->t.dims[0], CG = w->t.dims[1], KD = w->t.dims[2], KH = w->t.dims[3], KW = w->t.dims[4];
  int64_t OD = o->dims[2], OH = o->dims[3], OW = o->dims[4];
  ival_t *xp = pad_depth(m, x, win->pb[0], win->pe[0], "0");
  if (!xp) return false;
  ival_t *acc = NULL;
  char a[256];
  attrs_fmt(a, sizeof a, "stride=[%lld, %lld], padding=[%lld, %lld, %lld, %lld], dilation=[%lld, %lld], groups=%lld",
            (long long)win->s[1], (long long)win->s[2], (long long)win->pb[1], (long long)win->pb[2], (long long)win->pe[1],
            (long long)win->pe[2], (long long)win->d[1], (long long)win->d[2], (long long)group);
  rill_type_t wt = {w->t.dtype, 4, {O, CG, KH, KW}}, y4 = {x->t.dtype, 4, {N * OD, O, OH, OW}};
  for (int64_t kd = 0; kd < KD; kd++) {
    int64_t d0 = kd * win->d[0];
    ival_t *sl = slice1(m, xp, 2, d0, d0 + (OD - 1) * win->s[0] + 1, win->s[0]);
    rill_type_t tt = {x->t.dtype, 5, {N, OD, C, xp->t.dims[3], xp->t.dims[4]}};
    ival_t *tr = sl ? imp_emit(m, NULL, &tt, "transpose", &sl, 1, "perm=[0, 2, 1, 3, 4]") : NULL;
    rill_type_t t4 = {x->t.dtype, 4, {N * OD, C, tt.dims[3], tt.dims[4]}};
    ival_t *x4 = imp_reshape(m, NULL, tr, &t4);
    ival_t *wk;
    if (w->data) {
      /* the kernel's depth slab, cut here */
      size_t es = rill_dtype_size(w->t.dtype), slab = (size_t)(KH * KW) * es;
      uint8_t *buf = malloc((size_t)(O * CG) * slab + 1);
      if (!buf) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
      for (int64_t q = 0; q < O * CG; q++) memcpy(buf + (size_t)q * slab, (uint8_t *)w->data + ((size_t)(q * KD + kd)) * slab, slab);
      wk = imp_const(m, &wt, buf);
      free(buf);
    } else {
      wk = imp_reshape(m, NULL, slice1(m, w, 2, kd, kd + 1, 1), &wt);
    }
    ival_t *args[3] = {x4, wk, b};
    ival_t *y = x4 && wk ? imp_emit(m, NULL, &y4, "conv2d", args, b && kd == 0 ? 3 : 2, a) : NULL;
    acc = acc ? bin(m, NULL, "add", acc, y) : y;
    if (!acc) return false;
  }
  rill_type_t t5 = {x->t.dtype, 5, {N, OD, O, OH, OW}};
  ival_t *r5 = imp_reshape(m, NULL, acc, &t5);
  return r5 && imp_emit(m, OUT(0), o, "transpose", &r5, 1, "perm=[0, 2, 1, 3, 4]") != NULL;
}

static bool op_conv(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *w = in[1], *b = IN(2);
  if (x->t.rank < 3 || x->t.rank > 5) return imp_unsup(m, "a %d-D convolution (1-D, 2-D and 3-D are supported)", x->t.rank - 2), false;
  if (!need_float(m, x, "input")) return false;
  if (w->t.rank != x->t.rank || w->t.dtype != x->t.dtype) return imp_fail(m, RILL_MALFORMED, "weight of another rank or dtype"), false;
  int64_t group = onnx_attr_i(n, "group", 1);
  window_t win;
  if (!window_of(m, n, &x->t, w->t.dims + 2, &win)) return false;
  int nd = win.nd;
  if (group < 1 || x->t.dims[1] != w->t.dims[1] * group || w->t.dims[0] % group)
    return imp_fail(m, RILL_MALFORMED, "weight does not fit the input with group=%lld", (long long)group), false;
  if (b && (b->t.rank != 1 || b->t.dims[0] != w->t.dims[0] || b->t.dtype != x->t.dtype)) return imp_fail(m, RILL_MALFORMED, "bias of the wrong shape"), false;
  rill_type_t o = x->t;
  o.dims[1] = w->t.dims[0];
  for (int i = 0; i < nd; i++) {
    o.dims[2 + i] = out_len(x->t.dims[2 + i], win.pb[i], win.pe[i], win.k[i], win.s[i], win.d[i], false);
    if (o.dims[2 + i] < 1) return imp_fail(m, RILL_MALFORMED, "the kernel does not fit the padded input"), false;
  }
  if (nd == 3) return conv3d(m, n, x, w, b, &win, group, &o);
  window_2d(&win);
  ival_t *args[3] = {as_2d(m, x), as_2d(m, w), b};
  char a[256];
  attrs_fmt(a, sizeof a, "stride=[%lld, %lld], padding=[%lld, %lld, %lld, %lld], dilation=[%lld, %lld], groups=%lld",
            (long long)win.s[0], (long long)win.s[1], (long long)win.pb[0], (long long)win.pb[1], (long long)win.pe[0],
            (long long)win.pe[1], (long long)win.d[0], (long long)win.d[1], (long long)group);
  if (nd == 2) return imp_emit(m, OUT(0), &o, "conv2d", args, b ? 3 : 2, a) != NULL;
  rill_type_t o4 = {o.dtype, 4, {o.dims[0], o.dims[1], 1, o.dims[2]}};
  ival_t *y = imp_emit(m, NULL, &o4, "conv2d", args, b ? 3 : 2, a);
  return imp_reshape(m, OUT(0), y, &o) != NULL;
}

/* 3-D pooling as 2-D pooling of depth slices (the output depth moved into
 * the channels), combined over the kernel's depth: the largest, or the mean
 * (where every window's divisor is the whole window: no pads, or pads counted) */
static bool pool3d(imp_t *m, const Onnx__NodeProto *n, ival_t *x, const window_t *w, bool maxp, bool cip, bool ceil_mode,
                   const rill_type_t *o) {
  bool padded = false;
  for (int i = 0; i < 3; i++) padded |= w->pb[i] || w->pe[i];
  if (ceil_mode) return imp_unsup(m, "3-D pooling with ceil_mode=1"), false;
  if (!maxp && padded && !cip) return imp_unsup(m, "3-D average pooling with pads and count_include_pad=0"), false;
  for (int i = 1; i < 3; i++)
    if (w->d[i] != 1 || w->pb[i] != w->pe[i] || 2 * w->pb[i] > w->k[i]) return imp_unsup(m, "3-D pooling with dilations or asymmetric or large pads"), false;
  int64_t OD = o->dims[2];
  ival_t *xp = pad_depth(m, x, w->pb[0], w->pe[0], maxp ? "-inf" : "0");
  if (!xp) return false;
  char a[256];
  attrs_fmt(a, sizeof a, "kernel=[%lld, %lld], stride=[%lld, %lld], padding=[%lld, %lld], ceil_mode=false%s", (long long)w->k[1],
            (long long)w->k[2], (long long)w->s[1], (long long)w->s[2], (long long)w->pb[1], (long long)w->pb[2],
            maxp ? "" : ", count_include_pad=true");
  rill_type_t y4 = {x->t.dtype, 4, {o->dims[0], o->dims[1] * OD, o->dims[3], o->dims[4]}};
  ival_t *acc = NULL;
  for (int64_t kd = 0; kd < w->k[0]; kd++) {
    ival_t *x4 = depth_slices(m, xp, kd * w->d[0], OD, w->s[0]);
    ival_t *y = x4 ? imp_emit(m, NULL, &y4, maxp ? "max_pool2d" : "avg_pool2d", &x4, 1, a) : NULL;
    acc = acc ? bin(m, NULL, maxp ? "maximum" : "add", acc, y) : y;
    if (!acc) return false;
  }
  if (!maxp && w->k[0] > 1) acc = bin(m, NULL, "div", acc, scalar(m, x->t.dtype, (double)w->k[0]));
  return imp_reshape(m, OUT(0), acc, o) != NULL;
}

static bool op_pool(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  bool maxp = !strcmp(n->op_type, "MaxPool");
  if (x->t.rank < 3 || x->t.rank > 5) return imp_unsup(m, "%d-D pooling (1-D, 2-D and 3-D are supported)", x->t.rank - 2), false;
  if (maxp && (x->t.dtype == RILL_U8 || x->t.dtype == RILL_I8 || x->t.dtype == RILL_I32)) {
    /* small integers pooled in a float type that holds them all exactly */
    rill_dtype_t it = x->t.dtype;
    ival_t *xf = imp_cast(m, NULL, x, it == RILL_I32 ? RILL_F64 : RILL_F32);
    if (!xf) return false;
    ival_t *args[1] = {xf};
    char *outs[2] = {NULL, NULL};
    char name[64];
    snprintf(name, sizeof name, "_pool%d", m->tmp++);
    outs[0] = name;
    Onnx__NodeProto inner = *n;
    inner.output = outs;
    inner.n_output = 1;
    if (!op_pool(m, &inner, args, 1)) return false;
    return imp_cast(m, OUT(0), imp_find(m, name), it) != NULL;
  }
  if (!need_float(m, x, "input")) return false;
  if (OUT(1)) return imp_unsup(m, "the Indices output"), false;
  int64_t zero[3] = {0, 0, 0};
  if (onnx_attr_get(n, "kernel_shape") == NULL) return imp_fail(m, RILL_MALFORMED, "missing attribute kernel_shape"), false;
  window_t w;
  if (!window_of(m, n, &x->t, zero, &w)) return false;
  int nd = w.nd;
  bool dilated = false;
  for (int i = 0; i < nd; i++) dilated |= w.d[i] != 1;
  if (dilated && !maxp) return imp_unsup(m, "dilations other than 1 in average pooling"), false;
  bool ceil_mode = onnx_attr_i(n, "ceil_mode", 0) != 0;
  bool cip = onnx_attr_i(n, "count_include_pad", 0) != 0;
  rill_type_t o = x->t;
  for (int i = 0; i < nd; i++) {
    o.dims[2 + i] = out_len(x->t.dims[2 + i], w.pb[i], w.pe[i], w.k[i], w.s[i], w.d[i], ceil_mode);
    if (o.dims[2 + i] < 1) return imp_fail(m, RILL_MALFORMED, "the window does not fit the padded input"), false;
  }
  /* ceil_mode that adds no window (stride 1, or sizes that divide) is floor's:
   * the pads then stay in the pool instead of an explicit pad */
  bool adds = false;
  for (int i = 0; ceil_mode && i < nd; i++) adds |= o.dims[2 + i] != out_len(x->t.dims[2 + i], w.pb[i], w.pe[i], w.k[i], w.s[i], w.d[i], false);
  ceil_mode = adds;
  if (nd == 3) return pool3d(m, n, x, &w, maxp, cip, ceil_mode, &o);
  window_2d(&w);
  ival_t *x4 = as_2d(m, x);
  if (!x4) return false;
  rill_type_t o4 = o;
  if (nd == 1) o4 = (rill_type_t){o.dtype, 4, {o.dims[0], o.dims[1], 1, o.dims[2]}};
  bool sym = w.pb[0] == w.pe[0] && w.pb[1] == w.pe[1] && 2 * w.pb[0] <= w.k[0] && 2 * w.pb[1] <= w.k[1];
  /* an average over the window clipped to the input, with pads the core
   * set's pooling does not take: the padded sum (an average that counts the
   * zeros, times the window) over the count, known here */
  ival_t *scale = NULL;
  if (!maxp && !cip && (!sym || dilated)) {
    if (ceil_mode) return imp_unsup(m, "asymmetric or large pads with ceil_mode=1"), false;
    rill_type_t ct = {o.dtype, 4, {1, 1, o4.dims[2], o4.dims[3]}};
    size_t cells = (size_t)(ct.dims[2] * ct.dims[3]);
    void *fd = malloc(cells * rill_dtype_size(o.dtype));
    if (!fd) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
    int64_t H = x4->t.dims[2], W = x4->t.dims[3];
    for (int64_t oh = 0; oh < ct.dims[2]; oh++)
      for (int64_t ow = 0; ow < ct.dims[3]; ow++) {
        int64_t h0 = oh * w.s[0] - w.pb[0], w0 = ow * w.s[1] - w.pb[1], h1 = h0 + w.k[0], w1 = w0 + w.k[1];
        int64_t rows = (h1 < H ? h1 : H) - (h0 > 0 ? h0 : 0), cols = (w1 < W ? w1 : W) - (w0 > 0 ? w0 : 0);
        rill_element_set(o.dtype, fd, (size_t)(oh * ct.dims[3] + ow), rows > 0 && cols > 0 ? (double)(w.k[0] * w.k[1]) / (double)(rows * cols) : NAN);
      }
    scale = imp_const(m, &ct, fd);
    free(fd);
    if (!scale) return false;
    cip = true;
  }
  if (!sym || dilated || (ceil_mode && (w.pb[0] || w.pb[1]))) {
    /* explicit padding: -inf for max (never chosen), 0 for an average that counts it */
    if (ceil_mode && !maxp) return imp_unsup(m, "asymmetric or large pads with ceil_mode=1"), false;
    if (ceil_mode) {
      /* max pooling rounding up: the end padded (with -inf) just far enough
       * for the last window, then the output sizes of rounding down are
       * ceil_mode's (out_len above: a window starts inside the input or the
       * begin padding, so never sees -inf alone) */
      for (int i = 0; i < 2; i++) {
        w.pe[i] = (o4.dims[2 + i] - 1) * w.s[i] + w.d[i] * (w.k[i] - 1) + 1 - x4->t.dims[2 + i] - w.pb[i];
        if (w.pe[i] < 0) return imp_unsup(m, "ceil_mode=1 with a window past the input's end"), false;
      }
      ceil_mode = false;
    }
    rill_type_t pt = x4->t;
    int64_t pads[8] = {0, 0, w.pb[0], w.pb[1], 0, 0, w.pe[0], w.pe[1]};
    pt.dims[2] += w.pb[0] + w.pe[0];
    pt.dims[3] += w.pb[1] + w.pe[1];
    char l[160], a[200];
    list_str(l, sizeof l, pads, 8);
    attrs_fmt(a, sizeof a, "pads=%s, value=%s", l, maxp ? "-inf" : "0");
    if (w.pb[0] || w.pb[1] || w.pe[0] || w.pe[1]) x4 = imp_emit(m, NULL, &pt, "pad", &x4, 1, a);
    w.pb[0] = w.pb[1] = w.pe[0] = w.pe[1] = 0;
  }
  if (!x4) return false;
  if (dilated) {
    /* the largest of the strided slices, one per kernel position */
    ival_t *acc = NULL;
    for (int64_t i = 0; i < w.k[0]; i++)
      for (int64_t j = 0; j < w.k[1]; j++) {
        int64_t r0 = i * w.d[0], c0 = j * w.d[1];
        ival_t *sl = slice1(m, slice1(m, x4, 2, r0, r0 + (o4.dims[2] - 1) * w.s[0] + 1, w.s[0]), 3, c0, c0 + (o4.dims[3] - 1) * w.s[1] + 1, w.s[1]);
        bool last = i == w.k[0] - 1 && j == w.k[1] - 1;
        acc = acc ? bin(m, last && nd == 2 ? OUT(0) : NULL, "maximum", acc, sl) : sl;
        if (!acc) return false;
      }
    if (w.k[0] * w.k[1] == 1) acc = imp_alias(m, nd == 2 ? OUT(0) : NULL, acc);
    return nd == 2 ? acc != NULL : imp_reshape(m, OUT(0), acc, &o) != NULL;
  }
  char a[256];
  attrs_fmt(a, sizeof a, "kernel=[%lld, %lld], stride=[%lld, %lld], padding=[%lld, %lld], ceil_mode=%s%s", (long long)w.k[0],
            (long long)w.k[1], (long long)w.s[0], (long long)w.s[1], (long long)w.pb[0], (long long)w.pb[1], ceil_mode ? "true" : "false",
            maxp ? "" : cip ? ", count_include_pad=true" : ", count_include_pad=false");
  ival_t *y = imp_emit(m, nd == 2 && !scale ? OUT(0) : NULL, &o4, maxp ? "max_pool2d" : "avg_pool2d", &x4, 1, a);
  if (scale) y = bin(m, nd == 2 ? OUT(0) : NULL, "mul", y, scale);
  return nd == 2 ? y != NULL : imp_reshape(m, OUT(0), y, &o) != NULL;
}

static bool op_global_pool(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!need_float(m, x, "input")) return false;
  if (x->t.rank < 3) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 3)", x->t.rank), false;
  rill_type_t o = x->t;
  for (int d = 2; d < o.rank; d++) o.dims[d] = 1;
  bool avg = !strcmp(n->op_type, "GlobalAveragePool");
  if (avg && x->t.rank == 4) return imp_emit(m, OUT(0), &o, "adaptive_avg_pool2d", &x, 1, "output=[1, 1]") != NULL;
  int64_t axes[RILL_MAX_RANK] = {0};
  for (int d = 2; d < x->t.rank; d++) axes[d - 2] = d;
  char l[100], a[140];
  list_str(l, sizeof l, axes, x->t.rank - 2);
  attrs_fmt(a, sizeof a, "axes=%s, keepdims=true", l);
  return imp_emit(m, OUT(0), &o, avg ? "mean" : "max", &x, 1, a) != NULL;
}

/* ---- shapes ---- */
static bool op_shape(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  int r = in[0]->t.rank;
  int64_t s = 0, e = r;
  if (!strcmp(n->op_type, "Size")) {
    rill_type_t t = {RILL_I64, 0, {0}};
    int64_t k = (int64_t)imp_numel(&in[0]->t);
    ival_t *v = imp_const(m, &t, &k);
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
  return v && imp_alias(m, OUT(0), v);
}

static bool op_reshape(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  rill_type_t o = {x->t.dtype, 0, {0}};
  const char *t = n->op_type;
  int64_t v[RILL_MAX_RANK + 1];
  if (!strcmp(t, "Reshape")) {
    int k;
    if (m->opset < 5) return imp_unsup(m, "Reshape with a shape attribute"), false;
    NEED(1);
    if ((k = known_ints(m, in[1], "shape", v, RILL_MAX_RANK)) < 0) return false;
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
    for (int d = 0; d < x->t.rank; d++) o.dims[d < axis ? 0 : 1] *= x->t.dims[d];
  } else {
    bool sq = !strcmp(t, "Squeeze");
    int k;
    if (m->opset >= 13) {
      k = IN(1) ? known_ints(m, in[1], "axes", v, RILL_MAX_RANK) : -1;
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
      if (!norm_axis(m, v[i], r, &a)) return false;
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

/* host gather/slice/concat/transpose over known data, by element index */
static bool known_copy(imp_t *m, const char *out, const rill_type_t *t, ival_t *x, size_t (*src)(const void *ctx, size_t i), const void *ctx) {
  ival_t *v = imp_new(m, out, t);
  if (!v) return false;
  size_t k = imp_numel(t), es = rill_dtype_size(t->dtype);
  v->data = malloc(k * es + 1);
  if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (size_t i = 0; i < k; i++) memcpy((char *)v->data + i * es, (char *)x->data + src(ctx, i) * es, es);
  return true;
}

typedef struct { const rill_type_t *x, *o; int64_t start[RILL_MAX_RANK], step[RILL_MAX_RANK]; const int64_t *perm; } walk_t;
static size_t slice_src(const void *c, size_t i) {
  const walk_t *w = c;
  size_t idx = 0, stride = 1;
  for (int d = w->o->rank - 1; d >= 0; d--) {
    size_t q = i % (size_t)w->o->dims[d];
    i /= (size_t)w->o->dims[d];
    idx += (size_t)(w->start[d] + (int64_t)q * w->step[d]) * stride;
    stride *= (size_t)w->x->dims[d];
  }
  return idx;
}

static bool op_transpose(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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
  list_str(l, sizeof l, perm, r);
  attrs_fmt(a, sizeof a, "perm=%s", l);
  if (r == 0) return imp_alias(m, OUT(0), x) != NULL;
  return imp_emit(m, OUT(0), &o, "transpose", &x, 1, a) != NULL;
}

static bool op_concat(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  if (nin < 1) return imp_fail(m, RILL_MALFORMED, "no operands"), false;
  for (int i = 0; i < nin; i++) NEED(i);
  ival_t *x = in[0];
  if (!onnx_attr_get(n, "axis")) return imp_fail(m, RILL_MALFORMED, "missing attribute axis"), false;
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  rill_type_t o = x->t;
  o.dims[axis] = 0;
  ival_t *args[64];
  int na = 0;
  for (int i = 0; i < nin; i++) {
    if (in[i]->t.rank != x->t.rank || in[i]->t.dtype != x->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of different ranks or dtypes"), false;
    for (int d = 0; d < o.rank; d++)
      if (d != axis && in[i]->t.dims[d] != x->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "operands differ outside the axis"), false;
    o.dims[axis] += in[i]->t.dims[axis];
    if (in[i]->t.dims[axis] > 0) args[na++] = in[i];
  }
  if (fold_ok(in, nin)) {
    ival_t *v = imp_new(m, OUT(0), &o);
    if (!v) return false;
    size_t es = rill_dtype_size(o.dtype), outer = 1, inner = es;
    for (int d = 0; d < axis; d++) outer *= (size_t)o.dims[d];
    for (int d = (int)axis + 1; d < o.rank; d++) inner *= (size_t)o.dims[d];
    v->data = malloc(imp_numel(&o) * es + 1);
    if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
    char *p = v->data;
    for (size_t q = 0; q < outer; q++)
      for (int i = 0; i < nin; i++) {
        size_t chunk = (size_t)in[i]->t.dims[axis] * inner;
        memcpy(p, (char *)in[i]->data + q * chunk, chunk);
        p += chunk;
      }
    return true;
  }
  if (na == 1) return imp_alias(m, OUT(0), args[0]) != NULL;
  if (na == 0) return imp_unsup(m, "a concatenation of empty tensors"), false;
  char a[48];
  attrs_fmt(a, sizeof a, "axis=%lld", (long long)axis);
  return imp_emit(m, OUT(0), &o, "concat", args, na, a) != NULL;
}

static bool op_split(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  int nout = (int)n->n_output;
  if (nout < 1 || nout > 64) return imp_unsup(m, "%d outputs", nout), false;
  int64_t sizes[65];
  int k = -1;
  if (m->opset >= 13) {
    if (IN(1) && (k = known_ints(m, in[1], "split", sizes, 64)) < 0) return false;
  } else {
    k = onnx_attr_ints(n, "split", sizes, 64);
  }
  int64_t len = x->t.dims[axis];
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
  list_str(l, sizeof l, sizes, k);
  attrs_fmt(a, sizeof a, "axis=%lld, sizes=%s", (long long)axis, l);
  return imp_emit_multi(m, outs, nout, "split", &x, 1, a);
}

static bool op_slice(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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
    if ((ks = known_ints(m, in[1], "starts", st, RILL_MAX_RANK)) < 0 || (ke = known_ints(m, in[2], "ends", en, RILL_MAX_RANK)) < 0) return false;
    if (IN(3) && (ka = known_ints(m, in[3], "axes", ax, RILL_MAX_RANK)) < 0) return false;
    if (IN(4) && (kp = known_ints(m, in[4], "steps", sp, RILL_MAX_RANK)) < 0) return false;
  }
  if (ka < 0) { ka = ks; for (int i = 0; i < ka; i++) ax[i] = i; }
  if (kp < 0) { kp = ks; for (int i = 0; i < kp; i++) sp[i] = 1; }
  if (ks != ke || ks != ka || ks != kp) return imp_fail(m, RILL_MALFORMED, "starts, ends, axes and steps differ in length"), false;
  walk_t w = {&x->t, NULL, {0}, {0}, NULL};
  rill_type_t o = x->t;
  for (int d = 0; d < r; d++) { w.start[d] = 0; w.step[d] = 1; }
  uint32_t seen = 0;
  for (int i = 0; i < ks; i++) {
    int64_t a;
    if (!norm_axis(m, ax[i], r, &a)) return false;
    if (seen & (1u << a)) return imp_fail(m, RILL_MALFORMED, "an axis sliced twice"), false;
    seen |= 1u << a;
    int64_t dim = x->t.dims[a], s = st[i], e = en[i], step = sp[i];
    if (step == 0) return imp_fail(m, RILL_MALFORMED, "a step of 0"), false;
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
    w.start[a] = s;
    w.step[a] = step;
  }
  for (int d = 0; d < r; d++)
    if (o.dims[d] == 0) return imp_unsup(m, "a slice with an empty result"), false;
  w.o = &o;
  if (fold_ok(&x, 1)) return known_copy(m, OUT(0), &o, x, slice_src, &w);
  char l1[200], l2[200], l3[200], l4[200], a[900];
  list_str(l1, sizeof l1, st, ks);
  list_str(l2, sizeof l2, en, ks);
  list_str(l3, sizeof l3, ax, ks);
  list_str(l4, sizeof l4, sp, ks);
  attrs_fmt(a, sizeof a, "starts=%s, ends=%s, axes=%s, steps=%s", l1, l2, l3, l4);
  if (ks == 0) return imp_alias(m, OUT(0), x) != NULL;
  return imp_emit(m, OUT(0), &o, "slice", &x, 1, a) != NULL;
}

typedef struct { const rill_type_t *x, *o; int64_t axis; const int64_t *idx; int ir; } gather_t;
static size_t gather_src(const void *c, size_t i) {
  const gather_t *g = c;
  /* output dims: x[:axis] + idx dims + x[axis+1:] */
  size_t inner = 1, nidx = 1;
  for (int d = (int)g->axis + 1; d < g->x->rank; d++) inner *= (size_t)g->x->dims[d];
  for (int d = 0; d < g->ir; d++) nidx *= (size_t)g->o->dims[g->axis + d];
  size_t in_i = i % inner, rest = i / inner, j = rest % nidx, outer = rest / nidx;
  return (outer * (size_t)g->x->dims[g->axis] + (size_t)g->idx[j]) * inner + in_i;
}

/* gather with a 1-D index, reshaped to the result's type o */
static bool gather_flat(imp_t *m, const Onnx__NodeProto *n, ival_t *x, ival_t *idx, int64_t axis, const rill_type_t *o) {
  if (!idx) return false;
  rill_type_t go = x->t;
  go.dims[axis] = idx->t.dims[0];
  char a[48];
  attrs_fmt(a, sizeof a, "axis=%lld", (long long)axis);
  ival_t *args[2] = {x, idx};
  return imp_reshape(m, OUT(0), imp_emit(m, NULL, &go, "gather", args, 2, a), o) != NULL;
}

static bool op_gather(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *ix = in[1];
  if (x->t.rank < 1) return imp_fail(m, RILL_MALFORMED, "gather from a 0-d tensor"), false;
  if (ix->t.dtype != RILL_I64 && ix->t.dtype != RILL_I32) return imp_fail(m, RILL_MALFORMED, "indices must be int32 or int64"), false;
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", 0), x->t.rank, &axis)) return false;
  int64_t dim = x->t.dims[axis];
  rill_type_t o = {x->t.dtype, 0, {0}};
  for (int d = 0; d < axis; d++) o.dims[o.rank++] = x->t.dims[d];
  for (int d = 0; d < ix->t.rank; d++) o.dims[o.rank++] = ix->t.dims[d];
  for (int d = (int)axis + 1; d < x->t.rank; d++) o.dims[o.rank++] = x->t.dims[d];
  if (o.rank > RILL_MAX_RANK) return imp_unsup(m, "a result of rank %d", o.rank), false;
  size_t ni = imp_numel(&ix->t);
  if (ni == 0) return imp_unsup(m, "empty indices"), false;
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
    bool ok;
    if (fold_ok(&x, 1)) {
      gather_t g = {&x->t, &o, axis, idx, ix->t.rank};
      ok = known_copy(m, OUT(0), &o, x, gather_src, &g);
    } else {
      rill_type_t it = {RILL_I64, 1, {(int64_t)ni}};
      ok = gather_flat(m, n, x, imp_const(m, &it, idx), axis, &o);
    }
    free(idx);
    return ok;
  }
  /* indices at run time: negative ones wrap, as ONNX says */
  rill_type_t it = {ix->t.dtype, 1, {(int64_t)ni}};
  ival_t *flat = imp_reshape(m, NULL, ix, &it);
  ival_t *neg = bin(m, NULL, "lt", flat, scalar(m, ix->t.dtype, 0));
  ival_t *args3[3] = {neg, bin(m, NULL, "add", flat, scalar_int(m, ix->t.dtype, dim)), flat};
  if (!neg || !args3[1]) return false;
  return gather_flat(m, n, x, imp_emit(m, NULL, &it, "where", args3, 3, NULL), axis, &o);
}

/* GatherElements: a gather from the flattened data at flat indices, the
 * index along the axis (wrapped where negative) times its stride plus the
 * other coordinates' part (known here) */
static ival_t *gather_elements(imp_t *m, const char *out, ival_t *x, ival_t *ix, int64_t axis) {
  if (!x || !ix) return NULL;
  int r = x->t.rank;
  if (ix->t.dtype != RILL_I64 && ix->t.dtype != RILL_I32) return imp_fail(m, RILL_MALFORMED, "indices must be int32 or int64");
  if (ix->t.rank != r || r < 1) return imp_fail(m, RILL_MALFORMED, "indices of another rank");
  for (int d = 0; d < r; d++)
    if (d != axis && ix->t.dims[d] > x->t.dims[d]) return imp_fail(m, RILL_MALFORMED, "indices larger than the data off the axis");
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
  ival_t *neg = bin(m, NULL, "lt", idx, scalar(m, RILL_I64, 0));
  ival_t *a3[3] = {neg, bin(m, NULL, "add", idx, scalar_int(m, RILL_I64, dim)), idx};
  if (!neg || !a3[1]) return NULL;
  ival_t *wrapped = imp_emit(m, NULL, &ft, "where", a3, 3, NULL);
  ival_t *flat = bin(m, NULL, "add", bin(m, NULL, "mul", wrapped, scalar_int(m, RILL_I64, stride[axis])), bv);
  ival_t *args[2] = {imp_reshape(m, NULL, x, &xt), flat};
  if (!args[0] || !flat) return NULL;
  rill_type_t gt = {x->t.dtype, 1, {(int64_t)cnt}}, o = ix->t;
  o.dtype = x->t.dtype;
  return imp_reshape(m, out, imp_emit(m, NULL, &gt, "gather", args, 2, "axis=0"), &o);
}

static bool op_gather_elements(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", 0), in[0]->t.rank, &axis)) return false;
  return gather_elements(m, OUT(0), in[0], in[1], axis) != NULL;
}

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (the latter on
 * log_softmax over the classes): -input[n, t, d...] * weight[t], 0 where the
 * target is ignore_index; reduced by none, sum, or mean (the sum over the
 * sum of the weights that counted) */
static bool op_nll(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *t = in[1], *w = IN(2);
  bool sce = !strcmp(n->op_type, "SoftmaxCrossEntropyLoss");
  if (!need_float(m, x, "input")) return false;
  int r = x->t.rank;
  if (r < 2 || t->t.rank != r - 1) return imp_fail(m, RILL_MALFORMED, "input (N, C, ...) and target (N, ...) of ranks %d and %d", r, t->t.rank), false;
  for (int d = 0; d < t->t.rank; d++)
    if (t->t.dims[d] != x->t.dims[d ? d + 1 : 0]) return imp_fail(m, RILL_MALFORMED, "target does not fit the input"), false;
  if (t->t.dtype != RILL_I64 && t->t.dtype != RILL_I32) return imp_fail(m, RILL_MALFORMED, "target must be int32 or int64"), false;
  if (w && (w->t.rank != 1 || w->t.dims[0] != x->t.dims[1] || w->t.dtype != x->t.dtype)) return imp_fail(m, RILL_MALFORMED, "weight must have C values"), false;
  char buf[16];
  const char *red = onnx_attr_s(n, "reduction", "mean", buf, sizeof buf);
  if (strcmp(red, "none") && strcmp(red, "sum") && strcmp(red, "mean")) return imp_unsup(m, "reduction=\"%s\"", red), false;
  rill_dtype_t d = x->t.dtype;
  if (sce) {
    x = un(m, OUT(1), "log_softmax", x, "axis=1");
    if (!x) return false;
  }
  ival_t *ti = imp_cast(m, NULL, t, RILL_I64);
  /* ignored targets point at class 0 (any class in range), weighed 0 */
  bool has_ignore = onnx_attr_get(n, "ignore_index") != NULL;
  ival_t *valid = has_ignore ? bin(m, NULL, "ne", ti, scalar_int(m, RILL_I64, onnx_attr_i(n, "ignore_index", 0))) : NULL;
  if (has_ignore) {
    ival_t *a3[3] = {valid, ti, scalar(m, RILL_I64, 0)};
    if (!valid || !a3[2]) return false;
    ti = imp_emit(m, NULL, &ti->t, "where", a3, 3, NULL);
  }
  if (!ti) return false;
  rill_type_t t1 = {RILL_I64, r, {0}};
  for (int k = 0; k < r; k++) t1.dims[k] = k == 1 ? 1 : x->t.dims[k];
  rill_type_t lt = t->t;
  lt.dtype = d;
  ival_t *picked = imp_reshape(m, NULL, gather_elements(m, NULL, x, imp_reshape(m, NULL, ti, &t1), 1), &lt);
  if (!picked) return false;
  ival_t *wt = NULL;
  if (w) {
    rill_type_t ft = {RILL_I64, 1, {(int64_t)imp_numel(&ti->t)}};
    ival_t *args[2] = {w, imp_reshape(m, NULL, ti, &ft)};
    rill_type_t gt = {d, 1, {ft.dims[0]}};
    ival_t *g = args[1] ? imp_emit(m, NULL, &gt, "gather", args, 2, "axis=0") : NULL;
    wt = imp_reshape(m, NULL, g, &lt);
    if (!wt) return false;
  }
  if (valid) {
    ival_t *vf = imp_cast(m, NULL, valid, d);
    wt = wt ? bin(m, NULL, "mul", wt, vf) : vf;
    if (!wt) return false;
  }
  ival_t *loss = un(m, NULL, "neg", picked, NULL);
  if (wt) loss = bin(m, NULL, "mul", loss, wt);
  if (!loss) return false;
  if (!strcmp(red, "none")) return imp_alias(m, OUT(0), loss) != NULL;
  rill_type_t st = {d, 0, {0}};
  ival_t *sum = imp_emit(m, strcmp(red, "sum") ? NULL : OUT(0), &st, "sum", &loss, 1, NULL);
  if (!strcmp(red, "sum")) return sum != NULL;
  ival_t *den = wt ? imp_emit(m, NULL, &st, "sum", &wt, 1, NULL) : scalar(m, d, (double)imp_numel(&t->t));
  return bin(m, OUT(0), "div", sum, den) != NULL;
}

static bool op_expand(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0];
  int64_t v[RILL_MAX_RANK + 1];
  int k = known_ints(m, in[1], "shape", v, RILL_MAX_RANK);
  if (k < 0) return false;
  rill_type_t s = {x->t.dtype, k, {0}}, o;
  for (int i = 0; i < k; i++) s.dims[i] = v[i];
  if (!bcast(m, &x->t, &s, &o)) return false;
  o.dtype = x->t.dtype;
  if (!imp_type_ok(m, &o)) return false;
  bool same = o.rank == x->t.rank;
  for (int i = 0; same && i < o.rank; i++) same = o.dims[i] == x->t.dims[i];
  if (same) return imp_alias(m, OUT(0), x) != NULL;
  char l[200], a[220];
  list_str(l, sizeof l, o.dims, o.rank);
  attrs_fmt(a, sizeof a, "shape=%s", l);
  return imp_emit(m, OUT(0), &o, "broadcast_to", &x, 1, a) != NULL;
}

static bool op_pad(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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
    if ((k = known_ints(m, in[1], "pads", p, 2 * RILL_MAX_RANK)) < 0) return false;
    if (IN(2)) {
      if (!in[2]->data) return imp_unsup(m, "constant_value computed at run time"), false;
      value = rill_element_get(in[2]->t.dtype, in[2]->data, 0);
    }
    if (IN(3)) return imp_unsup(m, "the axes input"), false;
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
        if (reflect) part = side ? slice1(m, cur, d, dim - 2, dim - 2 - w, -1) : slice1(m, cur, d, w, 0, -1);
        else {
          rill_type_t bt = cur->t;
          bt.dims[d] = w;
          part = broadcast(m, NULL, slice1(m, cur, d, side ? dim - 1 : 0, side ? dim : 1, 1), &bt);
        }
        parts[np++] = part;
        if (side == 0) parts[np++] = cur;
      }
      rill_type_t ct = cur->t;
      ct.dims[d] += pb + pe;
      char a[48];
      attrs_fmt(a, sizeof a, "axis=%d", d);
      cur = imp_emit(m, d == last ? OUT(0) : NULL, &ct, "concat", parts, np, a);
    }
    return cur != NULL;
  }
  char l[300], a[400];
  list_str(l, sizeof l, p, k);
  attrs_fmt(a, sizeof a, "pads=%s, value=%.17g", l, value);
  return imp_emit(m, OUT(0), &o, "pad", &x, 1, a) != NULL;
}


/* DepthToSpace, SpaceToDepth: a reshape, a transpose and a reshape */
static bool op_depth_space(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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
  list_str(l, sizeof l, perm, 6);
  attrs_fmt(a, sizeof a, "perm=%s", l);
  ival_t *tr = r ? imp_emit(m, NULL, &tt, "transpose", &r, 1, a) : NULL;
  return imp_reshape(m, OUT(0), tr, &o) != NULL;
}

/* Tile: [1,d0,1,d1,..] broadcast to [r0,d0,r1,d1,..], then merged */
static bool op_tile(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0];
  int r = x->t.rank;
  int64_t rep[RILL_MAX_RANK + 1];
  int k = known_ints(m, in[1], "repeats", rep, RILL_MAX_RANK);
  if (k < 0) return false;
  if (k != r) return imp_fail(m, RILL_MALFORMED, "%d repeats for rank %d", k, r), false;
  if (2 * r > RILL_MAX_RANK) return imp_unsup(m, "Tile of rank %d (at most %d)", r, RILL_MAX_RANK / 2), false;
  rill_type_t a = {x->t.dtype, 2 * r, {0}}, bt = a, o = x->t;
  for (int i = 0; i < r; i++) {
    if (rep[i] < 0) return imp_fail(m, RILL_MALFORMED, "negative repeats"), false;
    if (rep[i] == 0) return imp_unsup(m, "a repeat of 0 (an empty result)"), false;
    a.dims[2 * i] = 1; a.dims[2 * i + 1] = x->t.dims[i];
    bt.dims[2 * i] = rep[i]; bt.dims[2 * i + 1] = x->t.dims[i];
    o.dims[i] = rep[i] * x->t.dims[i];
  }
  if (!imp_type_ok(m, &o)) return false;
  return imp_reshape(m, OUT(0), broadcast(m, NULL, imp_reshape(m, NULL, x, &a), &bt), &o) != NULL;
}

/* Hardmax: 1 where the first largest value along the axis is, else 0 */
static bool op_hardmax(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!need_float(m, x, "input")) return false;
  int r = x->t.rank;
  int64_t axis;
  if (!norm_axis(m, onnx_attr_i(n, "axis", m->opset >= 13 ? -1 : 1), r, &axis)) return false;
  ival_t *v = x;
  if (m->opset < 13 && axis != r - 1) {
    rill_type_t t2 = {x->t.dtype, 2, {1, 1}};
    for (int d = 0; d < r; d++) t2.dims[d < axis ? 0 : 1] *= x->t.dims[d];
    v = imp_reshape(m, NULL, x, &t2);
    axis = 1;
  }
  if (!v) return false;
  int64_t dim = v->t.dims[axis];
  if (dim == 0 || dim > ONNX_FOLD_MAX) return imp_unsup(m, "Hardmax over %lld values", (long long)dim), false;
  rill_type_t it = {RILL_I64, v->t.rank, {0}}, kt = it;
  for (int d = 0; d < v->t.rank; d++) {
    it.dims[d] = d == axis ? dim : 1;
    kt.dims[d] = d == axis ? 1 : v->t.dims[d];
  }
  int64_t *iota = malloc((size_t)dim * sizeof *iota);
  if (!iota) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (int64_t i = 0; i < dim; i++) iota[i] = i;
  ival_t *io = imp_const(m, &it, iota);
  free(iota);
  char a[96];
  attrs_fmt(a, sizeof a, "axis=%lld, keepdims=true", (long long)axis);
  ival_t *am = imp_emit(m, NULL, &kt, "argmax", &v, 1, a);
  ival_t *hot = imp_cast(m, NULL, bin(m, NULL, "eq", io, am), x->t.dtype);
  return imp_reshape(m, OUT(0), hot, &x->t) != NULL;
}


/* Trilu: the input where a mask of the last two dims (known here) holds, else 0 */
static bool op_trilu(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int r = x->t.rank;
  if (r < 2) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 2)", r), false;
  int64_t k = 0;
  if (IN(1)) {
    if (!in[1]->data) return imp_unsup(m, "input 'k' computed at run time (it must be a constant)"), false;
    k = rill_element_get_int(in[1]->t.dtype, in[1]->data, 0);
  }
  bool upper = onnx_attr_i(n, "upper", 1) != 0;
  int64_t rows = x->t.dims[r - 2], cols = x->t.dims[r - 1];
  if (rows * cols > ONNX_FOLD_MAX * 16) return imp_unsup(m, "a Trilu mask of %lld elements", (long long)(rows * cols)), false;
  if (rows * cols == 0) return imp_unsup(m, "an empty input"), false;
  rill_type_t mt = {RILL_BOOL, 2, {rows, cols}};
  uint8_t *mask = malloc((size_t)(rows * cols));
  if (!mask) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) mask[i * cols + j] = upper ? j - i >= k : j - i <= k;
  ival_t *mv = imp_const(m, &mt, mask);
  free(mask);
  ival_t *args[3] = {mv, x, scalar(m, x->t.dtype, 0)};
  if (!mv || !args[2]) return false;
  return imp_emit(m, OUT(0), &x->t, "where", args, 3, NULL) != NULL;
}

/* EyeLike: known at import from the input's shape */
static bool op_eyelike(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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
static bool op_constant(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const Onnx__AttributeProto *a;
  rill_type_t t = {RILL_F32, 0, {0}};
  void *data = NULL;
  if ((a = onnx_attr_get(n, "value")) && a->t) {
    rill_status_t st = onnx_tensor_read(a->t, m->base_dir, &t, &data);
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

static bool op_constant_of_shape(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  int64_t v[RILL_MAX_RANK + 1];
  int k = known_ints(m, in[0], "input", v, RILL_MAX_RANK);
  if (k < 0) return false;
  rill_type_t t = {RILL_F32, k, {0}};
  for (int i = 0; i < k; i++) t.dims[i] = v[i];
  uint8_t fill[8] = {0};
  const Onnx__AttributeProto *a = onnx_attr_get(n, "value");
  if (a && a->t) {
    rill_type_t vt;
    void *d;
    rill_status_t st = onnx_tensor_read(a->t, m->base_dir, &vt, &d);
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
  ival_t *o = imp_new(m, OUT(0), &t);
  if (!o) return false;
  size_t cnt = imp_numel(&t), es = rill_dtype_size(t.dtype);
  o->data = malloc(cnt * es + 1);
  if (!o->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  for (size_t i = 0; i < cnt; i++) memcpy((char *)o->data + i * es, fill, es);
  return true;
}

static bool op_range(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  if (!fold_ok(in, 3)) return imp_unsup(m, "start, limit or delta computed at run time"), false;
  rill_dtype_t d = in[0]->t.dtype;
  double s = rill_element_get(d, in[0]->data, 0), l = rill_element_get(d, in[1]->data, 0), dl = rill_element_get(d, in[2]->data, 0);
  if (dl == 0) return imp_fail(m, RILL_MALFORMED, "delta of 0"), false;
  double cnt = ceil((l - s) / dl);
  if (cnt < 0) cnt = 0;
  if (cnt > ONNX_FOLD_MAX) return imp_unsup(m, "a range of more than %d values", ONNX_FOLD_MAX), false;
  if (cnt == 0) return imp_unsup(m, "an empty range"), false;
  rill_type_t t = {d, 1, {(int64_t)cnt}};
  ival_t *o = imp_new(m, OUT(0), &t);
  if (!o) return false;
  o->data = malloc((size_t)cnt * rill_dtype_size(d) + 1);
  if (!o->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  int64_t si = imp_is_float(d) ? 0 : rill_element_get_int(d, in[0]->data, 0), di = imp_is_float(d) ? 0 : rill_element_get_int(d, in[2]->data, 0);
  for (int64_t i = 0; i < (int64_t)cnt; i++) {
    if (imp_is_float(d)) rill_element_set(d, o->data, (size_t)i, s + (double)i * dl);
    else rill_element_set_int(d, o->data, (size_t)i, (int64_t)((uint64_t)si + (uint64_t)i * (uint64_t)di));
  }
  return true;
}

/* ---- the table ---- */
/* Each op with the attributes its mapping reads (or may ignore: dropout's
 * ratio and seed, batch norm's momentum, max pooling's storage order without
 * indices); any other attribute is unsupported. consumed_inputs and is_test,
 * hints of the first opsets, are accepted everywhere. */
typedef struct { const char *name; onnx_op_fn fn; const char *attrs; } op_entry_t;
#define BIN_ATTRS "broadcast axis"
static const op_entry_t OPS[] = {
    {"Neg", op_unary, ""}, {"Abs", op_unary, ""}, {"Exp", op_unary, ""}, {"Log", op_unary, ""}, {"Sqrt", op_unary, ""},
    {"Reciprocal", op_unary, ""}, {"Sigmoid", op_unary, ""}, {"Tanh", op_unary, ""}, {"Relu", op_unary, ""}, {"Erf", op_unary, ""},
    {"Sin", op_unary, ""}, {"Cos", op_unary, ""}, {"Floor", op_unary, ""}, {"Ceil", op_unary, ""}, {"Not", op_unary, ""},
    {"Add", op_binary, BIN_ATTRS}, {"Sub", op_binary, BIN_ATTRS}, {"Mul", op_binary, BIN_ATTRS}, {"Div", op_binary, BIN_ATTRS},
    {"Pow", op_binary, BIN_ATTRS}, {"Equal", op_binary, BIN_ATTRS}, {"Less", op_binary, BIN_ATTRS}, {"LessOrEqual", op_binary, ""},
    {"Greater", op_binary, BIN_ATTRS}, {"GreaterOrEqual", op_binary, ""}, {"And", op_binary, BIN_ATTRS},
    {"Or", op_binary, BIN_ATTRS}, {"Xor", op_binary, BIN_ATTRS},
    {"Max", op_variadic, ""}, {"Min", op_variadic, ""}, {"Sum", op_variadic, ""}, {"Mean", op_variadic, ""},
    {"Where", op_where, ""}, {"Identity", op_identity, ""}, {"Dropout", op_identity, "ratio seed"}, {"Cast", op_cast, "to"},
    {"CastLike", op_cast, ""}, {"Clip", op_clip, "min max"}, {"LeakyRelu", op_activation, "alpha"},
    {"HardSigmoid", op_activation, "alpha beta"}, {"HardSwish", op_activation, ""}, {"Softsign", op_activation, ""},
    {"Softplus", op_activation, ""}, {"Elu", op_activation, "alpha"}, {"Selu", op_activation, "alpha gamma"},
    {"Celu", op_activation, "alpha"}, {"ThresholdedRelu", op_activation, "alpha"}, {"PRelu", op_activation, ""},
    {"IsNaN", op_activation, ""}, {"Sign", op_activation, ""}, {"Shrink", op_activation, "bias lambd"}, {"Tan", op_activation, ""},
    {"Sinh", op_activation, ""}, {"Cosh", op_activation, ""}, {"Asinh", op_activation, ""}, {"Acosh", op_activation, ""},
    {"Atanh", op_activation, ""}, {"Round", op_activation, ""}, {"Trilu", op_trilu, "upper"}, {"EyeLike", op_eyelike, "dtype k"}, {"IsInf", op_activation, "detect_negative detect_positive"},
    {"ReduceSum", op_reduce, "axes keepdims noop_with_empty_axes"}, {"ReduceMean", op_reduce, "axes keepdims"},
    {"ReduceMax", op_reduce, "axes keepdims"}, {"ReduceMin", op_reduce, "axes keepdims"}, {"ReduceL1", op_reduce, "axes keepdims"},
    {"ReduceL2", op_reduce, "axes keepdims"}, {"ReduceSumSquare", op_reduce, "axes keepdims"},
    {"ReduceLogSum", op_reduce, "axes keepdims"}, {"ReduceLogSumExp", op_reduce, "axes keepdims"},
    {"DepthToSpace", op_depth_space, "blocksize mode"}, {"SpaceToDepth", op_depth_space, "blocksize"}, {"Tile", op_tile, ""},
    {"Hardmax", op_hardmax, "axis"},
    {"ArgMax", op_argmax, "axis keepdims select_last_index"}, {"ArgMin", op_argmax, "axis keepdims select_last_index"},
    {"Softmax", op_softmax, "axis"}, {"LogSoftmax", op_softmax, "axis"},
    {"BatchNormalization", op_batchnorm, "epsilon momentum spatial training_mode"},
    {"LayerNormalization", op_layernorm, "axis epsilon stash_type"}, {"InstanceNormalization", op_instancenorm, "epsilon"},
    {"MatMul", op_matmul, ""}, {"Gemm", op_gemm, "alpha beta transA transB broadcast"},
    {"Conv", op_conv, "auto_pad dilations group kernel_shape pads strides"},
    {"MaxPool", op_pool, "auto_pad ceil_mode dilations kernel_shape pads storage_order strides"},
    {"AveragePool", op_pool, "auto_pad ceil_mode count_include_pad dilations kernel_shape pads strides"},
    {"GlobalAveragePool", op_global_pool, ""}, {"GlobalMaxPool", op_global_pool, ""},
    {"Shape", op_shape, "start end"}, {"Size", op_shape, ""}, {"Reshape", op_reshape, "allowzero"}, {"Flatten", op_reshape, "axis"},
    {"Squeeze", op_reshape, "axes"}, {"Unsqueeze", op_reshape, "axes"}, {"Transpose", op_transpose, "perm"},
    {"Concat", op_concat, "axis"}, {"Split", op_split, "axis split"}, {"Slice", op_slice, "starts ends axes"},
    {"Gather", op_gather, "axis"}, {"GatherElements", op_gather_elements, "axis"},
    {"NegativeLogLikelihoodLoss", op_nll, "ignore_index reduction"}, {"SoftmaxCrossEntropyLoss", op_nll, "ignore_index reduction"}, {"Expand", op_expand, ""}, {"Pad", op_pad, "mode pads value"},
    {"Constant", op_constant, "value value_float value_floats value_int value_ints"}, {"ConstantOfShape", op_constant_of_shape, "value"},
    {"Range", op_range, ""},
    {NULL, NULL, NULL}};

static bool word_in(const char *list, const char *w) {
  size_t n = strlen(w);
  if (!n) return false;
  for (const char *p = list; (p = strstr(p, w)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
  return false;
}

const char *onnx_op_unknown_attr(const char *op_type, const Onnx__NodeProto *n) {
  for (const op_entry_t *e = OPS; e->name; e++)
    if (!strcmp(e->name, op_type)) {
      for (size_t i = 0; i < n->n_attribute; i++) {
        const char *a = n->attribute[i]->name ? n->attribute[i]->name : "";
        if (!word_in(e->attrs, a) && strcmp(a, "consumed_inputs") && strcmp(a, "is_test")) return a;
      }
      return NULL;
    }
  return NULL;
}

onnx_op_fn onnx_op_find(const char *op_type) {
  for (const op_entry_t *e = OPS; e->name; e++)
    if (!strcmp(e->name, op_type)) return e->fn;
  return NULL;
}
