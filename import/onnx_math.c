/* onnx_math.c: the elementwise ONNX ops (unary, binary, variadic, Where,
 * Cast, Clip, and the activations written as a few core ops) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---- elementwise ---- */
typedef struct { const char *onnx, *op; int kind; } unary_map_t;  /* kind 0 float, 1 numeric, 2 bool */
static const unary_map_t UNARY[] = {
    {"Neg", "neg", 1}, {"Abs", "abs", 1}, {"Exp", "exp", 0}, {"Log", "log", 0}, {"Sqrt", "sqrt", 0},
    {"Reciprocal", "reciprocal", 0}, {"Sigmoid", "sigmoid", 0}, {"Tanh", "tanh", 0}, {"Relu", "relu", 1},
    {"Erf", "erf", 0}, {"Sin", "sin", 0}, {"Cos", "cos", 0}, {"Asin", "asin", 0}, {"Acos", "acos", 0}, {"Atan", "atan", 0}, {"Floor", "floor", 1}, {"Ceil", "ceil", 1},
    {"Not", "logical_not", 2}, {NULL, NULL, 0}};

ival_t *imp_un(imp_t *m, const char *out, const char *op, ival_t *x, const char *attrs) {
  if (!x) return NULL;
  rill_type_t t = x->t;
  if (!strcmp(op, "logical_not")) t.dtype = RILL_BOOL;
  return imp_emit(m, out, &t, op, &x, 1, attrs);
}

ival_t *imp_bin(imp_t *m, const char *out, const char *op, ival_t *a, ival_t *b) {
  if (!a || !b) return NULL;
  rill_type_t t;
  if (!imp_bcast(m, &a->t, &b->t, &t)) return NULL;
  t.dtype = a->t.dtype;
  if (!strcmp(op, "div") && !imp_is_float(t.dtype)) t.dtype = RILL_F32; /* true division */
  static const char *const cmp[] = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"};
  for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++)
    if (!strcmp(op, cmp[i])) t.dtype = RILL_BOOL;
  ival_t *args[2] = {a, b};
  return imp_emit(m, out, &t, op, args, 2, NULL);
}

/* Gelu (opset 20): approximate "none" or "tanh", as the core set's gelu */
bool onnx_op_gelu(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  if (!imp_need_float(m, in[0], "input")) return false;
  char buf[16], a[40];
  const char *ap = onnx_attr_s(n, "approximate", "none", buf, sizeof buf);
  if (strcmp(ap, "none") && strcmp(ap, "tanh")) return imp_fail(m, RILL_MALFORMED, "approximate=\"%s\" (none or tanh)", ap), false;
  imp_attrs(a, sizeof a, "approximate=\"%s\"", ap);
  return imp_un(m, OUT(0), "gelu", in[0], a) != NULL;
}

bool onnx_op_unary(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  const unary_map_t *u = UNARY;
  while (strcmp(u->onnx, n->op_type)) u++;
  if (u->kind == 0 && !imp_need_float(m, in[0], "input")) return false;
  if (u->kind == 1 && !imp_need_num(m, in[0], "input")) return false;
  if (u->kind == 2 && in[0]->t.dtype != RILL_BOOL) return imp_fail(m, RILL_MALFORMED, "input must be bool"), false;
  return imp_un(m, OUT(0), u->op, in[0], NULL) != NULL;
}

typedef struct { const char *onnx, *op; } binary_map_t;
static const binary_map_t BINARY[] = {
    {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"},
    {"Equal", "eq"}, {"Less", "lt"}, {"LessOrEqual", "le"}, {"Greater", "gt"}, {"GreaterOrEqual", "ge"},
    {"And", "logical_and"}, {"Or", "logical_or"}, {"Xor", "ne"}, {NULL, NULL}};

bool onnx_op_binary(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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
    if (!imp_need_num(m, x, "base") || !imp_need_num(m, y, "exponent")) return false;
    if (imp_is_int(x->t.dtype) && imp_is_float(y->t.dtype)) {
      /* an integer to a float power: in f64, then back (as ONNX's reference does) */
      rill_dtype_t it = x->t.dtype;
      return imp_cast(m, OUT(0), imp_bin(m, NULL, "pow", imp_cast(m, NULL, x, RILL_F64), imp_cast(m, NULL, y, RILL_F64)), it) != NULL;
    }
    if (y->t.dtype != x->t.dtype) y = imp_cast(m, NULL, y, x->t.dtype);
    return imp_bin(m, OUT(0), "pow", x, y) != NULL;
  }
  if (x->t.dtype != y->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of dtypes %s and %s", rill_dtype_name(x->t.dtype), rill_dtype_name(y->t.dtype)), false;
  if (!logical && strcmp(b->op, "eq") && !imp_need_num(m, x, "operand")) return false;
  if ((x->sym || y->sym) && x->data && y->data) return imp_sym_binary(m, OUT(0), b->op, x, y) != NULL; /* arithmetic of sizes */
  if (!strcmp(b->op, "div") && !imp_is_float(x->t.dtype)) {
    /* ONNX divides integers with truncation: true division in f64 (exact
     * below 2^53, where shape arithmetic lives), then the cast truncates */
    ival_t *q = imp_bin(m, NULL, "div", imp_cast(m, NULL, x, RILL_F64), imp_cast(m, NULL, y, RILL_F64));
    return imp_cast(m, OUT(0), q, x->t.dtype) != NULL;
  }
  return imp_bin(m, OUT(0), b->op, x, y) != NULL;
}

/* Mod: fmod=1 is the core set's fmod (C's fmod for floats, % for integers:
 * the dividend's sign). fmod=0, integers only (as ONNX requires), exactly:
 * the quotient as an f64 division (exact below 2^53) rounded down (the
 * divisor's sign, as Python's %), then a - q * b in i64, whose wrapping
 * arithmetic gives the remainder right whatever the product. */
bool onnx_op_mod(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *y = in[1];
  if (x->t.dtype != y->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of dtypes %s and %s", rill_dtype_name(x->t.dtype), rill_dtype_name(y->t.dtype)), false;
  bool trunc = onnx_attr_i(n, "fmod", 0) != 0;
  /* fmod=1: C's fmod (floats) and % (integers), the sign of the dividend;
   * unsigned integers have no sign, so both are % (exact, u64 too) */
  rill_dtype_t d = x->t.dtype;
  bool uns = d == RILL_U8 || d == RILL_U16 || d == RILL_U32 || d == RILL_U64;
  if ((trunc && (imp_is_float(d) || imp_is_int(d))) || uns) return imp_bin(m, OUT(0), "fmod", x, y) != NULL;
  if (imp_is_float(x->t.dtype)) return imp_fail(m, RILL_MALFORMED, "Mod of floats needs fmod=1"), false;
  if (!imp_is_int(x->t.dtype)) return imp_fail(m, RILL_MALFORMED, "operands of dtype %s", rill_dtype_name(x->t.dtype)), false;
  ival_t *q = imp_bin(m, NULL, "div", imp_cast(m, NULL, x, RILL_F64), imp_cast(m, NULL, y, RILL_F64));
  if (!trunc) q = imp_un(m, NULL, "floor", q, NULL);
  ival_t *xi = imp_cast(m, NULL, x, RILL_I64), *yi = imp_cast(m, NULL, y, RILL_I64);
  ival_t *r = imp_bin(m, NULL, "sub", xi, imp_bin(m, NULL, "mul", imp_cast(m, NULL, q, RILL_I64), yi));
  return imp_cast(m, OUT(0), r, x->t.dtype) != NULL;
}

/* CumSum: the product with a triangular matrix of ones, U[i, j] = i <= j
 * (i < j exclusive; i >= j and i > j reversed), the axis moved last and
 * back: the same sums (in a matmul's order); integers through f64, exact
 * below 2^53. */
/* the cumulative sum of x along ax (a number), in x's dtype, into out */
static ival_t *cumsum_along(imp_t *m, const char *out, ival_t *x, int64_t ax, bool excl, bool rev) {
  int r = x->t.rank;
  rill_dtype_t c = imp_is_float(x->t.dtype) ? x->t.dtype : RILL_F64;
  int64_t len = x->t.dims[ax];
  rill_type_t ct = {RILL_I64, 2, {len, 1}}, rt = {RILL_I64, 2, {1, len}};
  ival_t *i = imp_reshape(m, NULL, imp_iota(m, RILL_I64, len), &ct), *j = imp_reshape(m, NULL, imp_iota(m, RILL_I64, len), &rt);
  ival_t *u = imp_cast(m, NULL, imp_bin(m, NULL, rev ? (excl ? "gt" : "ge") : (excl ? "lt" : "le"), i, j), c);
  /* the axis last */
  int64_t perm[RILL_MAX_RANK], inv[RILL_MAX_RANK];
  int q = 0;
  for (int d = 0; d < r; d++)
    if (d != ax) perm[q++] = d;
  perm[q] = ax;
  for (int d = 0; d < r; d++) inv[perm[d]] = d;
  char l[120], a[140];
  ival_t *xt = imp_cast(m, NULL, x, c);
  rill_type_t tt = x->t;
  tt.dtype = c;
  for (int d = 0; d < r; d++) tt.dims[d] = x->t.dims[perm[d]];
  if (xt && ax != r - 1) {
    imp_list_str(m, l, sizeof l, perm, r);
    imp_attrs(a, sizeof a, "perm=%s", l);
    xt = imp_emit(m, NULL, &tt, "transpose", &xt, 1, a);
  }
  ival_t *args[2] = {xt, u};
  ival_t *y = xt && u ? imp_emit(m, NULL, &tt, "matmul", args, 2, NULL) : NULL;
  if (y && ax != r - 1) {
    rill_type_t bt = x->t;
    bt.dtype = c;
    imp_list_str(m, l, sizeof l, inv, r);
    imp_attrs(a, sizeof a, "perm=%s", l);
    y = imp_emit(m, NULL, &bt, "transpose", &y, 1, a);
  }
  return imp_cast(m, out, y, x->t.dtype);
}

bool onnx_op_cumsum(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0];
  int64_t ax;
  int r = x->t.rank;
  /* ONNX's CumSum takes no bool, but PyTorch's exporter writes one for
   * torch.cumsum of a mask (transformers' packed-sequence check), which
   * PyTorch sums as int64: so here */
  if (x->t.dtype == RILL_BOOL) x = imp_cast(m, NULL, x, RILL_I64);
  if (!x || !imp_need_num(m, x, "input")) return false;
  if (r < 1) return imp_fail(m, RILL_MALFORMED, "input of rank 0"), false;
  bool excl = onnx_attr_i(n, "exclusive", 0) != 0, rev = onnx_attr_i(n, "reverse", 0) != 0;
  if (!in[1]->data && !in[1]->sym) {
    /* the axis computed at run time: one of x's r axes, so the sum along each
     * and a where picking one; the axis is checked by a gather from [0, r)
     * (a run-time error out of range) */
    if (imp_numel(&in[1]->t) != 1 || !imp_is_int(in[1]->t.dtype) || in[1]->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "axis must hold one integer"), false;
    rill_type_t one = {RILL_I64, 1, {1}}, st = {RILL_I64, 0, {0}};
    ival_t *a = imp_reshape(m, NULL, imp_cast(m, NULL, in[1], RILL_I64), &one);
    a = imp_where(m, imp_bin(m, NULL, "lt", a, imp_scalar_int(m, RILL_I64, 0)), imp_bin(m, NULL, "add", a, imp_scalar_int(m, RILL_I64, r)), a);
    ival_t *gargs[2] = {imp_iota(m, RILL_I64, r), a};
    ival_t *chk = a && gargs[0] ? imp_reshape(m, NULL, imp_emit(m, NULL, &one, "gather", gargs, 2, "axis=0"), &st) : NULL;
    ival_t *y = NULL;
    for (int d = r - 1; d >= 0 && chk; d--) {
      ival_t *c = cumsum_along(m, NULL, x, d, excl, rev);
      ival_t *wargs[3] = {imp_bin(m, NULL, "eq", chk, imp_scalar_int(m, RILL_I64, d)), c, y ? y : c};
      y = c && wargs[0] ? imp_emit(m, d ? NULL : OUT(0), &x->t, "where", wargs, 3, NULL) : NULL;
    }
    return y != NULL;
  }
  int k = imp_known_ints(m, in[1], "axis", &ax, 1);
  if (k < 0) return false;
  if (k != 1) return imp_fail(m, RILL_MALFORMED, "axis must hold one value"), false;
  if (!imp_norm_axis(m, ax, r, &ax)) return false;
  return cumsum_along(m, OUT(0), x, ax, excl, rev) != NULL;
}

/* Max, Min, Sum, Mean: any number of operands */
bool onnx_op_variadic(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  const char *op = !strcmp(n->op_type, "Max") ? "maximum" : !strcmp(n->op_type, "Min") ? "minimum" : "add";
  if (nin < 1) return imp_fail(m, RILL_MALFORMED, "no operands"), false;
  for (int i = 0; i < nin; i++) {
    NEED(i);
    if (in[i]->t.dtype != in[0]->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of different dtypes"), false;
    if (!imp_need_num(m, in[i], "operand")) return false;
  }
  bool mean = !strcmp(n->op_type, "Mean");
  if (mean && !imp_need_float(m, in[0], "operand")) return false;
  ival_t *acc = in[0];
  for (int i = 1; i < nin && acc; i++) acc = imp_bin(m, i == nin - 1 && !mean ? OUT(0) : NULL, op, acc, in[i]);
  if (!acc) return false;
  if (mean && nin > 1) return imp_bin(m, OUT(0), "div", acc, imp_scalar(m, acc->t.dtype, nin)) != NULL;
  if (nin == 1) return imp_alias(m, OUT(0), acc) != NULL;
  return acc != NULL;
}

bool onnx_op_where(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  if (in[0]->t.dtype != RILL_BOOL) return imp_fail(m, RILL_MALFORMED, "condition must be bool"), false;
  if (in[1]->t.dtype != in[2]->t.dtype) return imp_fail(m, RILL_MALFORMED, "branches of different dtypes"), false;
  rill_type_t t, t2;
  if (!imp_bcast(m, &in[0]->t, &in[1]->t, &t) || !imp_bcast(m, &t, &in[2]->t, &t2)) return false;
  t2.dtype = in[1]->t.dtype;
  return imp_emit(m, OUT(0), &t2, "where", in, 3, NULL) != NULL;
}

bool onnx_op_identity(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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
      /* training: y = x * mask / (1 - ratio) with a random mask, which is
       * not generated; with ratio 0 the mask is all true and y = x exactly */
      ival_t *t = in[2], *ratio = IN(1);
      if (imp_numel(&t->t) != 1 || (ratio && imp_numel(&ratio->t) != 1)) return imp_fail(m, RILL_MALFORMED, "ratio and training_mode must be one value each"), false;
      bool zero = ratio && ratio->data && rill_element_get(ratio->t.dtype, ratio->data, 0) == 0;
      bool on = t->data && rill_element_get_int(t->t.dtype, t->data, 0);
      if (on && ratio && ratio->data && !zero) return imp_unsup(m, "training_mode=true with a ratio other than 0 (a random mask is not generated)"), false;
      if (on && !ratio) return imp_unsup(m, "training_mode=true with the default ratio 0.5 (a random mask is not generated)"), false;
      if ((!t->data || on) && !zero) {
        /* training_mode or the ratio computed at run time: y = x (and the
         * mask all true) exactly where it does not train or the ratio is
         * 0; elsewhere the run stops at a flag read back, unsupported (a
         * random mask is not generated) */
        ival_t *tr = t->data ? imp_scalar_int(m, RILL_BOOL, 1) : imp_bin(m, NULL, "ne", t, imp_scalar_int(m, t->t.dtype, 0));
        ival_t *rz = !ratio || ratio->data ? imp_scalar_int(m, RILL_BOOL, 1) : imp_bin(m, NULL, "ne", ratio, imp_scalar(m, ratio->t.dtype, 0));
        ival_t *bad = imp_bin(m, NULL, "logical_and", tr, rz);
        rill_type_t ft = {RILL_I64, 1, {1}};
        ival_t *flag = imp_reshape(m, NULL, imp_where(m, bad, imp_scalar_int(m, RILL_I64, -1), imp_scalar_int(m, RILL_I64, 0)), &ft);
        int64_t got[1];
        if (!flag || imp_read_back_flag(m, flag, "training_mode", got, 1, "unsupported_dropout_training") != 1) return false;
      }
    }
  }
  return imp_alias(m, OUT(0), in[0]) != NULL;
}

bool onnx_op_cast(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
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

bool onnx_op_clip(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  if (!imp_need_num(m, in[0], "input")) return false;
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
            y = imp_bin(m, last ? OUT(0) : NULL, j == 1 ? "maximum" : "minimum", y, in[j]);
          }
        return y != NULL;
      }
      double v = rill_element_get(in[k]->t.dtype, in[k]->data, 0);
      if (k == 1) { lo = v; has_lo = true; } else { hi = v; has_hi = true; }
    }
  }
  char a[128] = "";
  if (has_lo && has_hi) imp_attrs(a, sizeof a, "min=%.17g, max=%.17g", lo, hi);
  else if (has_lo) imp_attrs(a, sizeof a, "min=%.17g", lo);
  else if (has_hi) imp_attrs(a, sizeof a, "max=%.17g", hi);
  if (!has_lo && !has_hi) return imp_alias(m, OUT(0), in[0]) != NULL;
  return imp_un(m, OUT(0), "clip", in[0], a) != NULL;
}

/* round halves to even (ONNX's Round, and the rounding of the quantizing
 * ops), exactly: r = floor(x + 1/2), less 1 where x was halfway and r is
 * odd; from 2^23 (f32; 2^52 f64, 2^10 f16, 2^7 bf16) on every value is
 * whole already (and x + 1/2 could round) */
ival_t *imp_round_even(imp_t *m, const char *o, ival_t *x) {
  if (!x || !imp_need_float(m, x, "input")) return NULL;
  rill_dtype_t d = x->t.dtype;
  double big = d == RILL_F64 ? 4503599627370496.0 : d == RILL_F32 ? 8388608.0 : d == RILL_F16 ? 1024.0 : 128.0;
  ival_t *r = imp_un(m, NULL, "floor", imp_bin(m, NULL, "add", x, imp_scalar(m, d, 0.5)), NULL);
  ival_t *tie = imp_bin(m, NULL, "eq", imp_bin(m, NULL, "sub", r, x), imp_scalar(m, d, 0.5));
  ival_t *half = imp_un(m, NULL, "floor", imp_bin(m, NULL, "mul", r, imp_scalar(m, d, 0.5)), NULL);
  ival_t *odd = imp_bin(m, NULL, "ne", imp_bin(m, NULL, "sub", r, imp_bin(m, NULL, "mul", half, imp_scalar(m, d, 2))), imp_scalar(m, d, 0));
  ival_t *a1[3] = {imp_bin(m, NULL, "logical_and", tie, odd), imp_bin(m, NULL, "sub", r, imp_scalar(m, d, 1)), r};
  if (!a1[0] || !a1[1] || !r) return NULL;
  ival_t *a2[3] = {imp_bin(m, NULL, "ge", imp_un(m, NULL, "abs", x, NULL), imp_scalar(m, d, big)), x, imp_emit(m, NULL, &x->t, "where", a1, 3, NULL)};
  if (!a2[0] || !a2[2]) return NULL;
  return imp_emit(m, o, &x->t, "where", a2, 3, NULL);
}

/* activations written as a few core ops, exactly as ONNX defines them */
bool onnx_op_activation(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  rill_dtype_t d = x->t.dtype;
  const char *t = n->op_type, *o = OUT(0);
  if (!strcmp(t, "Sign")) {
    /* 1 above 0, -1 below, else 0 */
    if (!imp_need_num(m, x, "input")) return false;
    ival_t *neg = imp_bin(m, NULL, "lt", x, imp_scalar(m, d, 0)), *pos = imp_bin(m, NULL, "gt", x, imp_scalar(m, d, 0));
    ival_t *a1[3] = {neg, imp_scalar(m, d, -1), imp_scalar(m, d, 0)};
    if (!neg || !pos || !a1[1] || !a1[2]) return false;
    ival_t *a2[3] = {pos, imp_scalar(m, d, 1), imp_emit(m, NULL, &x->t, "where", a1, 3, NULL)};
    if (!a2[1] || !a2[2]) return false;
    return imp_emit(m, o, &x->t, "where", a2, 3, NULL) != NULL;
  }
  if (!imp_need_float(m, x, "input")) return false;
  char a[128];
  if (!strcmp(t, "LeakyRelu")) {
    imp_attrs(a, sizeof a, "alpha=%.9g", onnx_attr_f(n, "alpha", 0.01));
    return imp_un(m, o, "leaky_relu", x, a) != NULL;
  }
  if (!strcmp(t, "HardSigmoid") || !strcmp(t, "HardSwish")) {
    bool swish = t[4] == 'S' && t[5] == 'w';
    double al = swish ? 1.0 / 6 : onnx_attr_f(n, "alpha", 0.2), be = swish ? 0.5 : onnx_attr_f(n, "beta", 0.5);
    ival_t *y = imp_bin(m, NULL, "add", imp_bin(m, NULL, "mul", x, imp_scalar(m, d, al)), imp_scalar(m, d, be));
    ival_t *h = imp_un(m, swish ? NULL : o, "clip", y, "min=0, max=1");
    return swish ? imp_bin(m, o, "mul", x, h) != NULL : h != NULL;
  }
  if (!strcmp(t, "Softsign")) return imp_bin(m, o, "div", x, imp_bin(m, NULL, "add", imp_un(m, NULL, "abs", x, NULL), imp_scalar(m, d, 1))) != NULL;
  if (!strcmp(t, "Softplus")) return imp_un(m, o, "log", imp_bin(m, NULL, "add", imp_un(m, NULL, "exp", x, NULL), imp_scalar(m, d, 1)), NULL) != NULL;
  if (!strcmp(t, "Elu") || !strcmp(t, "Selu")) {
    bool selu = t[0] == 'S';
    double al = onnx_attr_f(n, "alpha", selu ? 1.67326319217681884765625 : 1.0), ga = onnx_attr_f(n, "gamma", 1.05070102214813232421875);
    ival_t *neg = imp_bin(m, NULL, "mul", imp_bin(m, NULL, "sub", imp_un(m, NULL, "exp", x, NULL), imp_scalar(m, d, 1)), imp_scalar(m, d, al));
    ival_t *c = imp_bin(m, NULL, selu ? "le" : "lt", x, imp_scalar(m, d, 0));
    ival_t *args[3] = {c, neg, x};
    if (!c || !neg) return false;
    rill_type_t tt = x->t;
    ival_t *y = imp_emit(m, selu ? NULL : o, &tt, "where", args, 3, NULL);
    return selu ? imp_bin(m, o, "mul", y, imp_scalar(m, d, ga)) != NULL : y != NULL;
  }
  if (!strcmp(t, "Celu")) {
    double al = onnx_attr_f(n, "alpha", 1.0);
    ival_t *e = imp_bin(m, NULL, "mul", imp_bin(m, NULL, "sub", imp_un(m, NULL, "exp", imp_bin(m, NULL, "div", x, imp_scalar(m, d, al)), NULL), imp_scalar(m, d, 1)), imp_scalar(m, d, al));
    return imp_bin(m, o, "add", imp_un(m, NULL, "relu", x, NULL), imp_bin(m, NULL, "minimum", e, imp_scalar(m, d, 0))) != NULL;
  }
  if (!strcmp(t, "ThresholdedRelu")) {
    ival_t *c = imp_bin(m, NULL, "gt", x, imp_scalar(m, d, onnx_attr_f(n, "alpha", 1.0)));
    ival_t *args[3] = {c, x, imp_scalar(m, d, 0)};
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
    ival_t *c = imp_bin(m, NULL, "lt", x, imp_scalar(m, d, 0));
    ival_t *args[3] = {c, imp_bin(m, NULL, "mul", x, in[1]), x};
    if (!c || !args[1]) return false;
    rill_type_t tt;
    if (!imp_bcast(m, &c->t, &args[1]->t, &tt)) return false;
    tt.dtype = d;
    return imp_emit(m, o, &tt, "where", args, 3, NULL) != NULL;
  }
  if (!strcmp(t, "IsNaN")) return imp_bin(m, o, "ne", x, x) != NULL;
  if (!strcmp(t, "Tan")) return imp_bin(m, o, "div", imp_un(m, NULL, "sin", x, NULL), imp_un(m, NULL, "cos", x, NULL)) != NULL;
  if (!strcmp(t, "Sinh") || !strcmp(t, "Cosh")) {
    ival_t *e = imp_un(m, NULL, "exp", x, NULL), *f = imp_un(m, NULL, "exp", imp_un(m, NULL, "neg", x, NULL), NULL);
    return imp_bin(m, o, "mul", imp_bin(m, NULL, t[0] == 'S' ? "sub" : "add", e, f), imp_scalar(m, d, 0.5)) != NULL;
  }
  if (!strcmp(t, "Asinh") || !strcmp(t, "Acosh")) {
    /* log(x + sqrt(x^2 +- 1)) */
    ival_t *q = imp_bin(m, NULL, t[1] == 's' ? "add" : "sub", imp_bin(m, NULL, "mul", x, x), imp_scalar(m, d, 1));
    return imp_un(m, o, "log", imp_bin(m, NULL, "add", x, imp_un(m, NULL, "sqrt", q, NULL)), NULL) != NULL;
  }
  if (!strcmp(t, "Atanh")) {
    /* log((1 + x) / (1 - x)) / 2 */
    ival_t *q = imp_bin(m, NULL, "div", imp_bin(m, NULL, "add", imp_scalar(m, d, 1), x), imp_bin(m, NULL, "sub", imp_scalar(m, d, 1), x));
    return imp_bin(m, o, "mul", imp_un(m, NULL, "log", q, NULL), imp_scalar(m, d, 0.5)) != NULL;
  }
  if (!strcmp(t, "Round")) return imp_round_even(m, o, x) != NULL;
  if (!strcmp(t, "Shrink")) {
    /* x + bias below -lambd, x - bias above lambd, else 0 */
    double lambd = onnx_attr_f(n, "lambd", 0.5), bias = onnx_attr_f(n, "bias", 0.0);
    ival_t *lo = imp_bin(m, NULL, "lt", x, imp_scalar(m, d, -lambd)), *hi = imp_bin(m, NULL, "gt", x, imp_scalar(m, d, lambd));
    ival_t *a1[3] = {hi, imp_bin(m, NULL, "sub", x, imp_scalar(m, d, bias)), imp_scalar(m, d, 0)};
    if (!a1[0] || !a1[1] || !a1[2] || !lo) return false;
    ival_t *inner = imp_emit(m, NULL, &x->t, "where", a1, 3, NULL);
    ival_t *a2[3] = {lo, imp_bin(m, NULL, "add", x, imp_scalar(m, d, bias)), inner};
    if (!a2[1] || !inner) return false;
    return imp_emit(m, o, &x->t, "where", a2, 3, NULL) != NULL;
  }
  if (!strcmp(t, "IsInf")) {
    bool pos = onnx_attr_i(n, "detect_positive", 1), neg = onnx_attr_i(n, "detect_negative", 1);
    ival_t *p = pos ? imp_bin(m, neg ? NULL : o, "eq", x, imp_scalar(m, d, INFINITY)) : NULL;
    ival_t *q = neg ? imp_bin(m, pos ? NULL : o, "eq", x, imp_scalar(m, d, -INFINITY)) : NULL;
    if (pos && neg) return imp_bin(m, o, "logical_or", p, q) != NULL;
    if (pos || neg) return (p ? p : q) != NULL;
    /* neither sign: all false */
    return imp_bin(m, o, "ne", x, x) != NULL;
  }
  return imp_unsup(m, "op type %s", t), false;
}

/* Bernoulli and the Random ops: refused, naming the node (the importer's
 * message gives its name and op type): a module computes the same results
 * at every run, and these draw new numbers each time. */
bool onnx_op_random(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  (void)n, (void)in, (void)nin;
  return imp_unsup(m, "random numbers are not generated (a module's results are the same at every run): "
                      "replace the node with an input or a constant"), false;
}

/* BitShift of the unsigned dtypes, exact, a shift of the dtype's width or
 * more giving 0 (as numpy's):
 * LEFT: x * 2^min(y, 64) in the dtype's own integers (wrapping, as the
 *   narrowing of integers does; 2^64 wraps to 0).
 * RIGHT of u8, u16, u32: floor(x / 2^min(y, 64)) in f64, where every value
 *   and power of 2 is exact. RIGHT of u64 (past f64's 53 bits): x split as
 *   hi + lo, lo = x mod 2^32, each exact in f64 (hi is a multiple of 2^32
 *   below 2^64); floor(x / 2^y) = floor(hi / 2^y) + floor(lo / 2^y), since
 *   hi / 2^y is whole for y <= 32 and lo / 2^y below 1 past it; the two
 *   parts are added back in u64. */
bool onnx_op_bitshift(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *y = in[1];
  char buf[16];
  const char *dir = onnx_attr_s(n, "direction", "", buf, sizeof buf);
  bool left = !strcmp(dir, "LEFT");
  if (!left && strcmp(dir, "RIGHT")) return imp_fail(m, RILL_MALFORMED, "direction must be LEFT or RIGHT"), false;
  if (x->t.dtype != y->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of different dtypes"), false;
  rill_dtype_t d = x->t.dtype;
  if (d != RILL_U8 && d != RILL_U16 && d != RILL_U32 && d != RILL_U64)
    return imp_unsup(m, "BitShift of dtype %s (ONNX allows u8, u16, u32, u64)", rill_dtype_name(d)), false;
  ival_t *yc = imp_bin(m, NULL, "minimum", y, imp_scalar(m, d, 64));
  if (left) return imp_bin(m, OUT(0), "mul", x, imp_bin(m, NULL, "pow", imp_scalar(m, d, 2), yc)) != NULL;
  ival_t *p = imp_bin(m, NULL, "pow", imp_scalar(m, RILL_F64, 2), imp_cast(m, NULL, yc, RILL_F64));
  if (d != RILL_U64) return imp_cast(m, OUT(0), imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", imp_cast(m, NULL, x, RILL_F64), p), NULL), d) != NULL;
  ival_t *lo = imp_bin(m, NULL, "fmod", x, imp_scalar(m, d, 4294967296.0));
  ival_t *hi = imp_bin(m, NULL, "sub", x, lo);
  ival_t *ph = imp_cast(m, NULL, imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", imp_cast(m, NULL, hi, RILL_F64), p), NULL), d);
  ival_t *pl = imp_cast(m, NULL, imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", imp_cast(m, NULL, lo, RILL_F64), p), NULL), d);
  return imp_bin(m, OUT(0), "add", ph, pl) != NULL;
}
