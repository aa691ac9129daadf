/* onnx_quant.c: the quantized ops (QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul,
 * QLinearConv), lowered onto the core set's cast, arithmetic, clip,
 * matmul and conv2d, as ONNX's reference computes them: the quantized
 * values are i8 or u8 (int16, uint16, int4 and float8, which the language
 * lacks, are refused naming the dtype), rounding halves to even.
 *
 * Exactness of the integer products: a matmul of i32 operands is the core
 * set's integer matmul (wrapping, as ONNX's int32 accumulation is); a
 * convolution runs on f64, as the core set's conv2d takes floats only.
 * Each product there is of two differences of 8-bit values of one dtype
 * (|x - x_zero_point| <= 255, the same for w), so every partial sum of a
 * window of K products is an integer of magnitude at most K * 255 * 255,
 * exact in f64 whatever order the sum takes while that is below 2^53 (K
 * below 1.3e11; larger windows are refused). f32 would be exact too for K
 * up to 258 when summed directly, but cuDNN may pick FFT or Winograd
 * algorithms for f32, whose transforms round; it has none for f64. The sum
 * is rounded to even before its cast to i32, so that an algorithm that
 * rounds a little still gives the integer. A QDQ pattern (DequantizeLinear
 * -> Conv/MatMul -> QuantizeLinear) runs through these lowerings as float
 * arithmetic; one int8 cuDNN or cuBLASLt call for it (and for QLinearConv
 * and QLinearMatMul) is left to an optimisation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

static bool is_q8(rill_dtype_t d) { return d == RILL_I8 || d == RILL_U8; }
static bool fusing(const imp_t *m);
static void dq_record(imp_t *m, const Onnx__NodeProto *n, size_t len0, ival_t *x, ival_t *s, ival_t *zp, int64_t axis);

/* the dtype a quantized value may have (i8 or u8), or a clear refusal */
static bool need_q8(imp_t *m, const ival_t *v, const char *what) {
  if (is_q8(v->t.dtype)) return true;
  imp_unsup(m, "%s of dtype %s (quantized values are i8 or u8)", what, rill_dtype_name(v->t.dtype));
  return false;
}

static bool need_scale(imp_t *m, const ival_t *v, const char *what) {
  if (imp_is_float(v->t.dtype)) return true;
  imp_fail(m, RILL_MALFORMED, "%s of dtype %s (a scale is a float)", what, rill_dtype_name(v->t.dtype));
  return false;
}

static ival_t *as_scalar(imp_t *m, ival_t *v) {
  rill_type_t t = {v->t.dtype, 0, {0}};
  return imp_reshape(m, NULL, v, &t);
}

/* v (the node's scale or zero point `what`) shaped to broadcast against x:
 * one value (a scalar, or 1-D of one) per tensor; per axis a 1-D of x's
 * dims[axis] values, made x's rank with 1 elsewhere; blocked (block > 0,
 * opset 21) x's rank with ceil(dims[axis] / block) values along the axis
 * and x's dims elsewhere, gathered along the axis to x's dims */
static ival_t *fit_axis(imp_t *m, ival_t *v, const char *what, const ival_t *x, int64_t axis, int64_t block) {
  if (!v) return NULL;
  char b1[96], b2[96];
  int r = x->t.rank;
  if (block <= 0 && v->t.rank <= 1 && imp_numel(&v->t) == 1) return as_scalar(m, v);
  int64_t ax;
  if (r < 1) return imp_fail(m, RILL_MALFORMED, "%s of shape %s for a scalar input (one value expected)", what, imp_type_str(m, &v->t, b1, sizeof b1));
  if (!imp_norm_axis(m, axis, r, &ax)) return NULL;
  int64_t d = x->t.dims[ax];
  if (block <= 0) {
    if (v->t.rank != 1 || v->t.dims[0] != d)
      return imp_fail(m, RILL_MALFORMED, "%s of shape %s does not fit input %s: one value (per tensor) or one per index of axis %lld", what,
                      imp_type_str(m, &v->t, b1, sizeof b1), imp_type_str(m, &x->t, b2, sizeof b2), (long long)ax);
    rill_type_t t = {v->t.dtype, r, {0}};
    for (int i = 0; i < r; i++) t.dims[i] = i == ax ? d : 1;
    return imp_reshape(m, NULL, v, &t);
  }
  if (isa_dim_is_sym(d)) return imp_unsup(m, "block quantization along an axis over shape variables");
  bool ok = v->t.rank == r;
  for (int i = 0; ok && i < r; i++) ok = v->t.dims[i] == (i == ax ? (d + block - 1) / block : x->t.dims[i]);
  if (!ok)
    return imp_fail(m, RILL_MALFORMED, "%s of shape %s does not fit input %s with block_size=%lld along axis %lld", what,
                    imp_type_str(m, &v->t, b1, sizeof b1), imp_type_str(m, &x->t, b2, sizeof b2), (long long)block, (long long)ax);
  rill_type_t it = {RILL_I64, 1, {d}};
  int64_t *ix = malloc(sizeof(int64_t) * (size_t)(d ? d : 1));
  if (!ix) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  for (int64_t i = 0; i < d; i++) ix[i] = i / block;
  ival_t *idx = imp_const(m, &it, ix);
  free(ix);
  return imp_gather_axis(m, NULL, v, idx, ax);
}

/* round(q) (halves to even) plus the zero point, saturated to d's range and cast to d */
static ival_t *saturate_cast(imp_t *m, const char *out, ival_t *q, ival_t *zp, rill_dtype_t d, bool zp_before_round) {
  rill_dtype_t c = q ? q->t.dtype : RILL_F32;
  if (zp && zp_before_round) q = imp_bin(m, NULL, "add", q, imp_cast(m, NULL, zp, c));
  q = imp_round_even(m, NULL, q);
  if (zp && !zp_before_round) q = imp_bin(m, NULL, "add", q, imp_cast(m, NULL, zp, c));
  q = imp_un(m, NULL, "clip", q, d == RILL_I8 ? "min=-128, max=127" : "min=0, max=255");
  return imp_cast(m, out, q, d);
}

/* the quantized dtype that QuantizeLinear's output_dtype (opset 21) names, or 0 */
static bool output_dtype(imp_t *m, const Onnx__NodeProto *n, rill_dtype_t *d, bool *given) {
  int64_t od = onnx_attr_i(n, "output_dtype", 0);
  *given = od != 0;
  if (!od) return true;
  if (!onnx_dtype((int32_t)od, d) || !is_q8(*d))
    return imp_unsup(m, "output_dtype %s (quantized values are i8 or u8)", onnx_dtype_name((int32_t)od)), false;
  return true;
}

bool onnx_op_quantize(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *s = in[1], *zp = IN(2);
  if (!imp_need_float(m, x, "input") || !need_scale(m, s, "y_scale")) return false;
  rill_dtype_t d = RILL_U8;
  bool given;
  if (!output_dtype(m, n, &d, &given)) return false;
  if (zp) {
    if (!need_q8(m, zp, "y_zero_point")) return false;
    if (given && zp->t.dtype != d) return imp_fail(m, RILL_MALFORMED, "output_dtype and y_zero_point's dtype %s differ", rill_dtype_name(zp->t.dtype)), false;
    d = zp->t.dtype;
  }
  /* saturate matters for float8 only: for integers the result always saturates */
  int64_t axis = onnx_attr_i(n, "axis", 1), block = onnx_attr_i(n, "block_size", 0);
  if (block < 0) return imp_fail(m, RILL_MALFORMED, "block_size %lld", (long long)block), false;
  /* x / scale in f32 (f64 for f64 input), as ONNX Runtime computes f16 and bf16 */
  rill_dtype_t c = x->t.dtype == RILL_F64 ? RILL_F64 : RILL_F32;
  ival_t *sf = imp_cast(m, NULL, fit_axis(m, s, "y_scale", x, axis, block), c);
  ival_t *zf = zp ? fit_axis(m, zp, "y_zero_point", x, axis, block) : NULL;
  if (!sf || (zp && !zf)) return false;
  ival_t *q = imp_bin(m, NULL, "div", imp_cast(m, NULL, x, c), sf);
  return saturate_cast(m, OUT(0), q, zf, d, false) != NULL;
}

bool onnx_op_dequantize(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *s = in[1], *zp = IN(2);
  if (x->t.dtype != RILL_I32 && !need_q8(m, x, "input")) return false;
  if (!need_scale(m, s, "x_scale")) return false;
  if (zp && zp->t.dtype != x->t.dtype)
    return imp_fail(m, RILL_MALFORMED, "x_zero_point of dtype %s for an input of dtype %s", rill_dtype_name(zp->t.dtype), rill_dtype_name(x->t.dtype)), false;
  int64_t axis = onnx_attr_i(n, "axis", 1), block = onnx_attr_i(n, "block_size", 0);
  if (block < 0) return imp_fail(m, RILL_MALFORMED, "block_size %lld", (long long)block), false;
  /* (x - zero point) in f32 (exact for 8-bit values), times the scale in f32, to the scale's dtype */
  rill_dtype_t c = s->t.dtype == RILL_F64 ? RILL_F64 : RILL_F32;
  size_t len0 = m->body.len;
  ival_t *sf = imp_cast(m, NULL, fit_axis(m, s, "x_scale", x, axis, block), c);
  ival_t *xf = imp_cast(m, NULL, x, c);
  if (zp) xf = imp_bin(m, NULL, "sub", xf, imp_cast(m, NULL, fit_axis(m, zp, "x_zero_point", x, axis, block), c));
  if (!imp_cast(m, OUT(0), imp_bin(m, NULL, "mul", xf, sf), s->t.dtype)) return false;
  if (fusing(m) && block == 0) dq_record(m, n, len0, x, s, zp, axis);
  return true;
}

/* DynamicQuantizeLinear: u8, the range [min(x, 0), max(x, 0)] over 0..255 */
bool onnx_op_dynamic_quantize(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (x->t.dtype != RILL_F32) return imp_unsup(m, "input of dtype %s (f32)", rill_dtype_name(x->t.dtype)), false;
  if (!isa_type_is_sym(&x->t) && imp_numel(&x->t) == 0) return imp_unsup(m, "an empty input (its range is undefined)"), false;
  ival_t *lo = x, *hi = x;
  if (x->t.rank > 0) {
    int64_t axes[RILL_MAX_RANK];
    for (int i = 0; i < x->t.rank; i++) axes[i] = i;
    char l[200], a[240];
    imp_list_str(m, l, sizeof l, axes, x->t.rank);
    imp_attrs(a, sizeof a, "axes=%s, keepdims=false", l);
    rill_type_t st = {RILL_F32, 0, {0}};
    lo = imp_emit(m, NULL, &st, "min", &x, 1, a);
    hi = imp_emit(m, NULL, &st, "max", &x, 1, a);
  }
  ival_t *zero = imp_scalar(m, RILL_F32, 0);
  lo = imp_bin(m, NULL, "minimum", lo, zero);
  hi = imp_bin(m, NULL, "maximum", hi, zero);
  ival_t *scale = imp_bin(m, OUT(1), "div", imp_bin(m, NULL, "sub", hi, lo), imp_scalar(m, RILL_F32, 255));
  /* zero point: round(clip(0 - lo / scale, 0, 255)) */
  ival_t *izp = imp_un(m, NULL, "clip", imp_bin(m, NULL, "sub", zero, imp_bin(m, NULL, "div", lo, scale)), "min=0, max=255");
  ival_t *zp = imp_cast(m, OUT(2), imp_round_even(m, NULL, izp), RILL_U8);
  return saturate_cast(m, OUT(0), imp_bin(m, NULL, "div", x, scale), zp, RILL_U8, false) != NULL;
}

/* x - zero point, in dtype c; zero points of another dtype than x's refused */
static ival_t *minus_zp(imp_t *m, ival_t *x, ival_t *zp, const char *what, rill_dtype_t c) {
  if (!x) return NULL;
  ival_t *xc = imp_cast(m, NULL, x, c);
  if (!zp) return xc;
  if (zp->t.dtype != x->t.dtype)
    return imp_fail(m, RILL_MALFORMED, "%s of dtype %s for an operand of dtype %s", what, rill_dtype_name(zp->t.dtype), rill_dtype_name(x->t.dtype));
  return imp_bin(m, NULL, "sub", xc, imp_cast(m, NULL, zp, c));
}

/* a per-row value of A ([M] for A's M rows, row) as [M, 1], or a per-column
 * value of B ([N]) as it is; a scalar or an N-D value broadcast as it is */
static ival_t *per_dim(imp_t *m, ival_t *v, const ival_t *x, const char *what, bool row) {
  if (!v || v->t.rank != 1 || v->t.dims[0] == 1) return v;
  char b1[96], b2[96];
  if (x->t.rank < 2 || v->t.dims[0] != x->t.dims[x->t.rank - (row ? 2 : 1)])
    return imp_fail(m, RILL_MALFORMED, "%s of shape %s does not fit %s %s: one value or one per %s", what, imp_type_str(m, &v->t, b1, sizeof b1),
                    row ? "A" : "B", imp_type_str(m, &x->t, b2, sizeof b2), row ? "row" : "column");
  rill_type_t t = {v->t.dtype, 2, {v->t.dims[0], 1}};
  return row ? imp_reshape(m, NULL, v, &t) : v;
}

/* (a - a_zp) @ (b - b_zp) in i32: the core set's integer matmul, wrapping as ONNX's int32 accumulation */
static ival_t *matmul_int(imp_t *m, const char *out, ival_t *a, ival_t *azp, ival_t *b, ival_t *bzp, const char *an, const char *bn) {
  if (!need_q8(m, a, "A") || !need_q8(m, b, "B")) return NULL;
  ival_t *ai = minus_zp(m, a, per_dim(m, azp, a, an, true), an, RILL_I32);
  ival_t *bi = minus_zp(m, b, per_dim(m, bzp, b, bn, false), bn, RILL_I32);
  return imp_matmul(m, out, ai, bi);
}

static bool one_value(const ival_t *v) { return v && v->t.rank <= 1 && imp_numel(&v->t) == 1; }
/* v is one value, or a [n] vector */
static bool one_or(const ival_t *v, int64_t n) { return one_value(v) || (v && v->t.rank == 1 && v->t.dims[0] == n); }
static ival_t *zp_operand(imp_t *m, ival_t *zp, rill_dtype_t d);
static ival_t *emit_q(imp_t *m, const char *out, const char *op, rill_type_t o, ival_t **args, int nargs, const char *attrs);
static ival_t *as_4d(imp_t *m, ival_t *x);

/* (a - a_zp) @ (b - b_zp) as one qmatmul (with scale sc and zero point yzp,
 * the result of dtype d, else i32), where its operands fit the op; false
 * (nothing written) where they do not: the lowering then runs, and refuses
 * what it refuses */
/* whether qmatmul takes (a - a_zp) @ (b - b_zp) (checked before anything is written) */
static bool matmul_fits(const imp_t *m, const ival_t *a, const ival_t *azp, const ival_t *b, const ival_t *bzp) {
  if (!fusing(m) || !is_q8(a->t.dtype) || !is_q8(b->t.dtype) || a->t.rank < 2 || b->t.rank < 2) return false;
  int ra = a->t.rank, rb = b->t.rank;
  if (isa_dim_is_sym(a->t.dims[ra - 1]) || isa_dim_is_sym(b->t.dims[rb - 1])) return false; /* K and N numbers; batch and rows may be shape variables */
  int64_t M = a->t.dims[ra - 2], N = b->t.dims[rb - 1];
  if (a->t.dims[ra - 1] != b->t.dims[rb - 2]) return false;
  return !((azp && (azp->t.dtype != a->t.dtype || !one_or(azp, M))) || (bzp && (bzp->t.dtype != b->t.dtype || !one_or(bzp, N))));
}

static bool fused_matmul(imp_t *m, const char *out, ival_t *a, ival_t *azp, ival_t *b, ival_t *bzp, ival_t *sc, ival_t *yzp, rill_dtype_t d) {
  if (!matmul_fits(m, a, azp, b, bzp)) return false;
  int ra = a->t.rank, rb = b->t.rank;
  int64_t M = a->t.dims[ra - 2], N = b->t.dims[rb - 1];
  rill_type_t ba = {a->t.dtype, ra - 2, {0}}, bb = {b->t.dtype, rb - 2, {0}}, o;
  memcpy(ba.dims, a->t.dims, sizeof(int64_t) * (size_t)(ra - 2));
  memcpy(bb.dims, b->t.dims, sizeof(int64_t) * (size_t)(rb - 2));
  if (!imp_bcast(m, &ba, &bb, &o)) return false;
  if (o.rank + 2 > RILL_MAX_RANK) return false;
  o.dims[o.rank++] = M;
  o.dims[o.rank++] = N;
  o.dtype = d;
  ival_t *args[6] = {a, b, zp_operand(m, azp, a->t.dtype), zp_operand(m, bzp, b->t.dtype), sc, yzp ? as_scalar(m, yzp) : NULL};
  return emit_q(m, out, "qmatmul", o, args, sc ? (yzp ? 6 : 5) : 4, NULL) != NULL;
}

/* conv(x - x_zp, w - w_zp) [+ bias] as one qconv2d (1-D or 2-D; scale sc
 * and zero point yzp as fused_matmul's) where its operands fit the op */
/* whether qconv2d takes conv(x - x_zp, w - w_zp) (checked before anything is written) */
static bool conv_fits(const imp_t *m, const ival_t *x, const ival_t *xzp, const ival_t *w, const ival_t *wzp) {
  if (!fusing(m) || !is_q8(x->t.dtype) || !is_q8(w->t.dtype) || (x->t.rank != 3 && x->t.rank != 4) || w->t.rank != x->t.rank) return false;
  if (isa_type_is_sym(&w->t)) return false;
  if ((xzp && (xzp->t.dtype != x->t.dtype || !one_value(xzp))) || (wzp && (wzp->t.dtype != w->t.dtype || !one_or(wzp, w->t.dims[0])))) return false;
  /* the lowering's bound on a window's products (its f64 sums exact) */
  double k = 255.0 * 255.0;
  for (int i = 1; i < w->t.rank; i++) k *= (double)w->t.dims[i];
  return k < 9007199254740992.0;
}

static bool fused_conv(imp_t *m, const Onnx__NodeProto *n, const char *out, ival_t *x, ival_t *xzp, ival_t *w, ival_t *wzp, ival_t *bias, ival_t *sc,
                       ival_t *yzp, rill_dtype_t d) {
  if (!conv_fits(m, x, xzp, w, wzp)) return false;
  char a[320];
  rill_type_t o;
  if (imp_conv2d_window(m, n, &x->t, &w->t, a, sizeof a, &o) != x->t.rank - 2) return false;
  o.dtype = d;
  ival_t *args[7] = {as_4d(m, x), as_4d(m, w), zp_operand(m, xzp, x->t.dtype), zp_operand(m, wzp, w->t.dtype)};
  int na = 4;
  if (bias) args[na++] = bias;
  if (sc) args[na++] = sc;
  if (sc && yzp) args[na++] = as_scalar(m, yzp);
  return emit_q(m, out, "qconv2d", o, args, na, a) != NULL;
}

bool onnx_op_matmul_integer(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  if (fused_matmul(m, OUT(0), in[0], IN(2), in[1], IN(3), NULL, NULL, RILL_I32)) return true;
  if (m->err) return false;
  return matmul_int(m, OUT(0), in[0], IN(2), in[1], IN(3), "a_zero_point", "b_zero_point") != NULL;
}

/* conv(x - x_zp, w - w_zp) in i32 (the file's header says why f64 is exact) */
static ival_t *conv_int(imp_t *m, const Onnx__NodeProto *n, ival_t *x, ival_t *xzp, ival_t *w, ival_t *wzp) {
  if (!need_q8(m, x, "x") || !need_q8(m, w, "w")) return NULL;
  if (w->t.rank < 3) return imp_fail(m, RILL_MALFORMED, "weight of rank %d", w->t.rank);
  if (xzp && imp_numel(&xzp->t) != 1) return imp_unsup(m, "x_zero_point of more than one value (per tensor only)");
  double k = 255.0 * 255.0;
  for (int i = 1; i < w->t.rank; i++) {
    if (isa_dim_is_sym(w->t.dims[i])) return imp_unsup(m, "a weight over shape variables");
    k *= (double)w->t.dims[i];
  }
  if (k >= 9007199254740992.0) return imp_unsup(m, "a window of more than 2^53 / 255^2 products (its sums would not be exact)");
  if (xzp) xzp = as_scalar(m, xzp);
  if (wzp && !(wzp->t.rank <= 1 && imp_numel(&wzp->t) == 1)) {
    char b1[96], b2[96];
    if (wzp->t.rank != 1 || wzp->t.dims[0] != w->t.dims[0])
      return imp_fail(m, RILL_MALFORMED, "w_zero_point of shape %s does not fit weight %s: one value or one per output channel",
                      imp_type_str(m, &wzp->t, b1, sizeof b1), imp_type_str(m, &w->t, b2, sizeof b2));
    rill_type_t t = {wzp->t.dtype, w->t.rank, {w->t.dims[0]}};
    for (int i = 1; i < t.rank; i++) t.dims[i] = 1;
    wzp = imp_reshape(m, NULL, wzp, &t);
  } else if (wzp) {
    wzp = as_scalar(m, wzp);
  }
  ival_t *xc = minus_zp(m, x, xzp, "x_zero_point", RILL_F64), *wc = minus_zp(m, w, wzp, "w_zero_point", RILL_F64);
  return imp_cast(m, NULL, imp_round_even(m, NULL, imp_conv(m, n, NULL, xc, wc, NULL)), RILL_I32);
}

bool onnx_op_conv_integer(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  if (fused_conv(m, n, OUT(0), in[0], IN(2), in[1], IN(3), NULL, NULL, NULL, RILL_I32)) return true;
  if (m->err) return false;
  return imp_alias(m, OUT(0), conv_int(m, n, in[0], IN(2), in[1], IN(3))) != NULL;
}

/* an i32 accumulator times a_scale * b_scale / y_scale (in the scales'
 * dtype), in f64, plus the zero point, rounded and saturated (as ONNX's
 * reference: the zero point added before rounding) */
static ival_t *requantize(imp_t *m, const char *out, ival_t *acc, ival_t *s1, ival_t *s2, ival_t *ys, ival_t *yzp, rill_dtype_t d) {
  if (!acc || !s1 || !s2 || !ys) return NULL;
  if (s1->t.dtype != s2->t.dtype || ys->t.dtype != s1->t.dtype) return imp_fail(m, RILL_MALFORMED, "scales of different dtypes");
  ival_t *sc = imp_bin(m, NULL, "div", imp_bin(m, NULL, "mul", s1, s2), ys);
  ival_t *q = imp_bin(m, NULL, "mul", imp_cast(m, NULL, acc, RILL_F64), imp_cast(m, NULL, sc, RILL_F64));
  return saturate_cast(m, out, q, yzp, d, true);
}

static bool scalar_of(imp_t *m, ival_t *v, const char *what) {
  if (!v || (v->t.rank <= 1 && imp_numel(&v->t) == 1)) return true;
  char b1[96];
  imp_fail(m, RILL_MALFORMED, "%s of shape %s (one value expected)", what, imp_type_str(m, &v->t, b1, sizeof b1));
  return false;
}

/* the output's dtype: y_zero_point's (i8 or u8) */
static bool out_dtype(imp_t *m, ival_t *yzp, rill_dtype_t *d) {
  if (!yzp) return true;
  if (!need_q8(m, yzp, "y_zero_point")) return false;
  *d = yzp->t.dtype;
  return true;
}

bool onnx_op_qlinear_matmul(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(3); NEED(4); NEED(6);
  ival_t *a = in[0], *b = in[3], *yzp = IN(7);
  rill_dtype_t d = a->t.dtype;
  if (!need_scale(m, in[1], "a_scale") || !need_scale(m, in[4], "b_scale") || !need_scale(m, in[6], "y_scale")) return false;
  if (!scalar_of(m, in[6], "y_scale") || !scalar_of(m, yzp, "y_zero_point") || !out_dtype(m, yzp, &d)) return false;
  if (matmul_fits(m, a, IN(2), b, IN(5)) && in[1]->t.dtype == in[4]->t.dtype && in[6]->t.dtype == in[1]->t.dtype &&
      one_or(in[1], a->t.dims[a->t.rank - 2]) && one_or(in[4], b->t.dims[b->t.rank - 1])) {
    /* the lowering's scale (sa * sb / ys, in the scales' dtype), one qmatmul */
    ival_t *sa = per_dim(m, in[1], a, "a_scale", true), *sb = per_dim(m, in[4], b, "b_scale", false);
    if (sa && one_value(sa)) sa = as_scalar(m, sa);
    if (sb && one_value(sb)) sb = as_scalar(m, sb);
    ival_t *sc = sa && sb ? imp_bin(m, NULL, "div", imp_bin(m, NULL, "mul", sa, sb), as_scalar(m, in[6])) : NULL;
    if (sc && fused_matmul(m, OUT(0), a, IN(2), b, IN(5), sc, yzp ? yzp : imp_scalar_int(m, d, 0), d)) return true;
    if (m->err) return false;
  }
  ival_t *acc = matmul_int(m, NULL, a, IN(2), b, IN(5), "a_zero_point", "b_zero_point");
  ival_t *sa = per_dim(m, in[1], a, "a_scale", true), *sb = per_dim(m, in[4], b, "b_scale", false);
  if (!acc || !sa || !sb) return false;
  if (sa->t.rank <= 1 && imp_numel(&sa->t) == 1) sa = as_scalar(m, sa);
  if (sb->t.rank <= 1 && imp_numel(&sb->t) == 1) sb = as_scalar(m, sb);
  return requantize(m, OUT(0), acc, sa, sb, as_scalar(m, in[6]), yzp ? as_scalar(m, yzp) : NULL, d) != NULL;
}

bool onnx_op_qlinear_conv(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(3); NEED(4); NEED(6);
  ival_t *x = in[0], *w = in[3], *yzp = IN(7), *bias = IN(8);
  rill_dtype_t d = x->t.dtype;
  if (!need_scale(m, in[1], "x_scale") || !need_scale(m, in[4], "w_scale") || !need_scale(m, in[6], "y_scale")) return false;
  if (!scalar_of(m, in[1], "x_scale") || !scalar_of(m, in[6], "y_scale") || !scalar_of(m, yzp, "y_zero_point") || !out_dtype(m, yzp, &d))
    return false;
  if (conv_fits(m, x, IN(2), w, IN(5)) && one_or(in[4], w->t.dims[0]) && in[4]->t.dtype == in[1]->t.dtype && in[6]->t.dtype == in[1]->t.dtype &&
      (!bias || (bias->t.dtype == RILL_I32 && bias->t.rank == 1 && bias->t.dims[0] == w->t.dims[0]))) {
    /* the lowering's scale per output channel (sx * sw / ys, in the scales' dtype), one qconv2d */
    ival_t *ws = one_value(in[4]) ? as_scalar(m, in[4]) : in[4];
    ival_t *sc = imp_bin(m, NULL, "div", imp_bin(m, NULL, "mul", as_scalar(m, in[1]), ws), as_scalar(m, in[6]));
    if (sc && fused_conv(m, n, OUT(0), x, IN(2), w, IN(5), bias, sc, yzp ? yzp : imp_scalar_int(m, d, 0), d)) return true;
    if (m->err) return false;
  }
  ival_t *acc = conv_int(m, n, x, IN(2), w, IN(5));
  if (!acc) return false;
  /* per output channel: [M] as [M, 1, ...] against the output [N, M, ...] */
  rill_type_t ct = {RILL_F32, acc->t.rank - 1, {w->t.dims[0]}};
  for (int i = 1; i < ct.rank; i++) ct.dims[i] = 1;
  char b1[96], b2[96];
  if (bias) {
    if (bias->t.dtype != RILL_I32 || bias->t.rank != 1 || bias->t.dims[0] != w->t.dims[0])
      return imp_fail(m, RILL_MALFORMED, "bias %s does not fit weight %s (i32, one per output channel)", imp_type_str(m, &bias->t, b1, sizeof b1),
                      imp_type_str(m, &w->t, b2, sizeof b2)), false;
    ct.dtype = RILL_I32;
    acc = imp_bin(m, NULL, "add", acc, imp_reshape(m, NULL, bias, &ct));
  }
  ival_t *ws = in[4];
  if (ws->t.rank <= 1 && imp_numel(&ws->t) == 1) ws = as_scalar(m, ws);
  else if (ws->t.rank == 1 && ws->t.dims[0] == w->t.dims[0]) {
    ct.dtype = ws->t.dtype;
    ws = imp_reshape(m, NULL, ws, &ct);
  } else {
    return imp_fail(m, RILL_MALFORMED, "w_scale of shape %s does not fit weight %s: one value or one per output channel", imp_type_str(m, &ws->t, b1, sizeof b1),
                    imp_type_str(m, &w->t, b2, sizeof b2)), false;
  }
  return requantize(m, OUT(0), acc, as_scalar(m, in[1]), ws, as_scalar(m, in[6]), yzp ? as_scalar(m, yzp) : NULL, d) != NULL;
}

/* ---- one qmatmul or qconv2d (docs/internals.md, "Quantized products") ----
 * Unless the import is -O0's (onnx_options_t.unfused_quant), MatMulInteger,
 * ConvInteger, QLinearMatMul and QLinearConv become one qmatmul or qconv2d,
 * bit for bit the lowerings above (ops/cpu_quant.c computes what they
 * compute), and so does the QDQ pattern
 *
 *   y = Conv(DequantizeLinear(x), DequantizeLinear(w)[, DequantizeLinear(b)])
 *   y = MatMul(DequantizeLinear(a), DequantizeLinear(b))
 *   [then QuantizeLinear(y), y's only reader]
 *
 * with x (a) per tensor, w per output channel (axis 0) or per tensor, b of
 * MatMul per column (axis 1 of a 2-D b) or per tensor, f32 scales known at
 * import, a bias of i32 values whose scale is x's times w's (as f32, the
 * quantizers' rule) and zero point 0. The op sums the integers exactly and
 * scales once where the float pattern rounds each product and partial sum,
 * so the two agree exactly where the float arithmetic is exact (scales
 * that are powers of two, sums below 2^24) and within one quantization step
 * elsewhere. A DequantizeLinear whose result only products read holds its
 * statements back (imp_dq_t.text) until a product that does not fuse
 * writes them. */
typedef struct imp_dq {
  ival_t *x, *s, *zp; /* DequantizeLinear's operands (zp NULL: absent) */
  int64_t axis;       /* normalised against x's rank */
  char *text;         /* its statements, held back; NULL once written */
} imp_dq_t;

void onnx_dq_free(imp_dq_t *dq) {
  if (!dq) return;
  free(dq->text);
  free(dq);
}

void onnx_dq_release(imp_t *m, ival_t *v) {
  if (!v || !v->dq || !v->dq->text) return;
  sb_printf(&m->body, "%s", v->dq->text);
  free(v->dq->text);
  v->dq->text = NULL;
}

/* The fusion is on unless RILL_QUANT_FUSION=0 (or -O0), which keeps the lowerings above. */
static bool fusion_on(void) { return !rill__env_off("RILL_QUANT_FUSION"); }

static bool fusing(const imp_t *m) { return !(m->opt && m->opt->unfused_quant) && m->graph && fusion_on(); }

/* How often the graph's nodes read value `name` (-1: unknown, where a
 * graph output names it or a node holds subgraphs, which may read it
 * unseen), the first reader, and whether every read is a product's operand
 * (Conv's x, w or bias, MatMul's a or b). */
static int readers(const imp_t *m, const char *name, const Onnx__NodeProto **first, bool *products_only) {
  const Onnx__GraphProto *g = m->graph;
  int nread = 0;
  *first = NULL;
  *products_only = true;
  for (size_t i = 0; i < g->n_output; i++)
    if (g->output[i]->name && !strcmp(g->output[i]->name, name)) return -1;
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *n = g->node[i];
    for (size_t a = 0; a < n->n_attribute; a++)
      if (n->attribute[a]->g || n->attribute[a]->n_graphs) return -1;
    bool conv = n->op_type && !strcmp(n->op_type, "Conv"), mm = n->op_type && !strcmp(n->op_type, "MatMul");
    for (size_t k = 0; k < n->n_input; k++)
      if (n->input[k] && !strcmp(n->input[k], name)) {
        *products_only &= ((conv && k <= 2) || (mm && k <= 1)) && !(n->domain && *n->domain);
        if (!nread++) *first = n;
      }
  }
  return nread;
}

static bool read_by_products_only(const imp_t *m, const char *name) {
  const Onnx__NodeProto *first;
  bool po;
  return readers(m, name, &first, &po) > 0 && po;
}

/* The node that alone reads value `name`, once, or NULL. */
static const Onnx__NodeProto *sole_reader(const imp_t *m, const char *name) {
  const Onnx__NodeProto *first;
  bool po;
  return readers(m, name, &first, &po) == 1 ? first : NULL;
}

/* DequantizeLinear's result v: its operands kept for onnx_qdq_fuse, and its
 * statements (the body from len0 on) held back where only products read it */
static void dq_record(imp_t *m, const Onnx__NodeProto *n, size_t len0, ival_t *x, ival_t *s, ival_t *zp, int64_t axis) {
  ival_t *v = OUT(0) ? imp_find(m, OUT(0)) : NULL;
  if (!v || v->dq || (!is_q8(x->t.dtype) && x->t.dtype != RILL_I32)) return;
  if (s->t.dtype != RILL_F32 || !s->data || v->t.dtype != RILL_F32) return;
  int64_t ax = 0;
  if (x->t.rank && (axis < -x->t.rank || axis >= x->t.rank)) return;
  if (x->t.rank) ax = axis < 0 ? axis + x->t.rank : axis;
  imp_dq_t *dq = calloc(1, sizeof *dq);
  if (!dq) return;
  *dq = (imp_dq_t){x, s, zp, ax, NULL};
  v->dq = dq;
  if (m->body.len > len0 && !m->body.oom && read_by_products_only(m, OUT(0))) {
    dq->text = strndup(m->body.p + len0, m->body.len - len0);
    if (!dq->text) return;
    m->body.len = len0;
    m->body.p[len0] = 0;
  }
}

/* A zero point as the op takes it: one value as a scalar (or [n] as it
 * is); absent, a 0 of dtype d */
static ival_t *zp_operand(imp_t *m, ival_t *zp, rill_dtype_t d) {
  if (!zp) return imp_scalar_int(m, d, 0);
  return one_value(zp) ? as_scalar(m, zp) : zp;
}

/* A 3-D (1-D convolution's) x or w as 4-D with a height of 1 */
static ival_t *as_4d(imp_t *m, ival_t *x) {
  if (!x || x->t.rank != 3) return x;
  rill_type_t t = {x->t.dtype, 4, {x->t.dims[0], x->t.dims[1], 1, x->t.dims[2]}};
  return imp_reshape(m, NULL, x, &t);
}

/* emits op (qconv2d over 1-D as 2-D, out type o) into `out` */
static ival_t *emit_q(imp_t *m, const char *out, const char *op, rill_type_t o, ival_t **args, int nargs, const char *attrs) {
  for (int k = 0; k < nargs; k++)
    if (!args[k]) return NULL;
  if (!strcmp(op, "qconv2d") && o.rank == 3) {
    rill_type_t o4 = {o.dtype, 4, {o.dims[0], o.dims[1], 1, o.dims[2]}};
    return imp_reshape(m, out, imp_emit(m, NULL, &o4, op, args, nargs, attrs), &o);
  }
  return imp_emit(m, out, &o, op, args, nargs, attrs);
}

/* The QuantizeLinear that alone reads y (output `name`, f32) where
 * qconv2d or qmatmul can take it: its y_scale (known, one value, f32),
 * zero point (or NULL) and output dtype; NULL where there is none. */
static const Onnx__NodeProto *trailing_q(imp_t *m, const char *name, float *ys, ival_t **yzp, rill_dtype_t *d) {
  const Onnx__NodeProto *q = sole_reader(m, name);
  if (!q || !q->op_type || strcmp(q->op_type, "QuantizeLinear") || (q->domain && *q->domain) || q->n_input < 2 || q->n_output != 1) return NULL;
  if (strcmp(q->input[0], name) || !q->output[0] || !*q->output[0] || onnx_op_unknown_attr("QuantizeLinear", q) || onnx_attr_i(q, "block_size", 0))
    return NULL;
  ival_t *s = imp_lookup(m, q->input[1]), *z = q->n_input > 2 && q->input[2] && *q->input[2] ? imp_lookup(m, q->input[2]) : NULL;
  if (!s || !s->data || s->t.dtype != RILL_F32 || !one_value(s) || (q->n_input > 2 && q->input[2] && *q->input[2] && !z)) return NULL;
  *ys = *(const float *)s->data;
  if (!isfinite(*ys) || *ys == 0) return NULL;
  *d = RILL_U8;
  int64_t od = onnx_attr_i(q, "output_dtype", 0);
  if (od && (!onnx_dtype((int32_t)od, d) || !is_q8(*d))) return NULL;
  if (z && (!one_value(z) || !is_q8(z->t.dtype) || (od && z->t.dtype != *d))) return NULL;
  if (z) *d = z->t.dtype;
  *yzp = z;
  return q;
}

/* The f32 products sx * sw[k] (n of them, a [n] vector or one value) as a scale operand */
static ival_t *scale_product(imp_t *m, int64_t n, bool vec, const float *prod) {
  rill_type_t t = {RILL_F32, vec ? 1 : 0, {n}};
  return imp_const(m, &t, prod);
}

/* Conv's bias b (DequantizeLinear of i32 [O], scale prod, zero point 0) as qconv2d's i32 bias, or NULL where it is not that */
static ival_t *qdq_bias(ival_t *b, int64_t O, const float *prod) {
  imp_dq_t *d = b ? b->dq : NULL;
  if (!d || d->x->t.dtype != RILL_I32 || d->x->t.rank != 1 || d->x->t.dims[0] != O || !one_or(d->s, O)) return NULL;
  for (int64_t k = 0; k < O; k++) {
    float s = ((const float *)d->s->data)[one_value(d->s) ? 0 : k];
    if (memcmp(&s, &prod[k], sizeof s)) return NULL;
  }
  if (d->zp) {
    if (!d->zp->data || d->zp->t.dtype != RILL_I32) return NULL;
    for (size_t k = 0; k < imp_numel(&d->zp->t); k++)
      if (((const int32_t *)d->zp->data)[k]) return NULL;
  }
  return d->x;
}

static bool qdq_fuse(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin, bool conv) {
  ival_t *X = IN(0), *W = IN(1), *B = conv ? IN(2) : NULL;
  if (!X || !W || !X->dq || !W->dq || (B && !B->dq) || nin > (conv ? 3 : 2)) return false;
  imp_dq_t *dx = X->dq, *dw = W->dq;
  ival_t *x = dx->x, *w = dw->x;
  if (!is_q8(x->t.dtype) || !is_q8(w->t.dtype) || !one_value(dx->s) || (dx->zp && !one_value(dx->zp))) return false;
  if (isa_type_is_sym(&w->t)) return false; /* weights are numbers; x's batch (and a matmul's rows) may be shape variables */
  char a[384];
  rill_type_t o;
  int64_t C; /* the output's channels (conv) or columns (matmul) */
  if (conv) {
    if (x->t.rank != 3 && x->t.rank != 4) return false;
    int nd = imp_conv2d_window(m, n, &x->t, &w->t, a, sizeof a, &o);
    if (nd != x->t.rank - 2) return false;
    C = w->t.dims[0];
    if (!one_or(dw->s, C) || (!one_value(dw->s) && dw->axis != 0)) return false;
  } else {
    if (x->t.rank < 2 || w->t.rank < 2) return false;
    int ra = x->t.rank, rb = w->t.rank;
    if (x->t.dims[ra - 1] != w->t.dims[rb - 2]) return false;
    C = w->t.dims[rb - 1];
    if (!one_value(dw->s) && (rb != 2 || dw->axis != 1 || !one_or(dw->s, C))) return false;
    rill_type_t ba = {x->t.dtype, ra - 2, {0}}, bb = {x->t.dtype, rb - 2, {0}};
    memcpy(ba.dims, x->t.dims, sizeof(int64_t) * (size_t)(ra - 2));
    memcpy(bb.dims, w->t.dims, sizeof(int64_t) * (size_t)(rb - 2));
    if (!imp_bcast(m, &ba, &bb, &o)) return false;
    o.dims[o.rank++] = x->t.dims[ra - 2];
    o.dims[o.rank++] = C;
    if (o.rank > RILL_MAX_RANK) return false;
    a[0] = 0;
  }
  bool vec = !one_value(dw->s);
  if (dw->zp && (dw->zp->t.dtype != w->t.dtype || !(one_value(dw->zp) || (vec && one_or(dw->zp, C))))) return false;
  if (dx->zp && dx->zp->t.dtype != x->t.dtype) return false;
  float *prod = malloc(sizeof(float) * (size_t)(C ? C : 1));
  if (!prod) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  int64_t np = vec ? C : 1;
  float a0 = *(const float *)dx->s->data;
  for (int64_t k = 0; k < (B ? C : np); k++) prod[k] = (float)((double)a0 * (double)((const float *)dw->s->data)[vec ? k : 0]);
  ival_t *bias = B ? qdq_bias(B, C, prod) : NULL;
  if (B && !bias) {
    free(prod);
    return false;
  }
  /* a Relu that alone reads the product (activation="relu"), then a QuantizeLinear that alone reads that */
  const Onnx__NodeProto *rl = sole_reader(m, OUT(0));
  if (rl && (!rl->op_type || strcmp(rl->op_type, "Relu") || (rl->domain && *rl->domain) || rl->n_input != 1 || rl->n_output != 1 || !rl->output[0] ||
             !*rl->output[0] || rl->n_attribute))
    rl = NULL;
  const char *y = rl ? rl->output[0] : OUT(0);
  float ys = 1;
  ival_t *yzp = NULL;
  rill_dtype_t d = RILL_F32;
  const Onnx__NodeProto *q = trailing_q(m, y, &ys, &yzp, &d);
  /* every check done: the op */
  ival_t *args[7] = {conv ? as_4d(m, x) : x, conv ? as_4d(m, w) : w, zp_operand(m, dx->zp, x->t.dtype), zp_operand(m, dw->zp, w->t.dtype)};
  int na = 4;
  if (bias) args[na++] = bias;
  args[na++] = scale_product(m, np, vec, prod);
  free(prod);
  size_t l = strlen(a);
  if (rl) l += (size_t)snprintf(a + l, sizeof a - l, "%sactivation=\"relu\"", l ? ", " : "");
  if (q) {
    args[na++] = zp_operand(m, yzp, d);
    snprintf(a + l, sizeof a - l, "%sy_scale=%.17g", l ? ", " : "", (double)ys);
  }
  o.dtype = d;
  if (!emit_q(m, q ? q->output[0] : y, conv ? "qconv2d" : "qmatmul", o, args, na, a[0] ? a : NULL)) return false;
  const Onnx__NodeProto *done[2] = {rl, q};
  for (int k = 0; k < 2; k++) {
    if (!done[k]) continue;
    if (m->nskip == m->skipcap) {
      int cap = m->skipcap ? 2 * m->skipcap : 16;
      const Onnx__NodeProto **p = realloc(m->skip, sizeof *p * (size_t)cap);
      if (!p) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
      m->skip = p;
      m->skipcap = cap;
    }
    m->skip[m->nskip++] = done[k];
  }
  return true;
}

bool onnx_qdq_fuse(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin, bool conv) {
  bool ok = fusing(m) && qdq_fuse(m, n, in, nin, conv);
  if (ok || m->err) return ok;
  for (int k = 0; k < nin; k++) onnx_dq_release(m, in[k]);
  return false;
}
