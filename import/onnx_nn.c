/* onnx_nn.c: the ONNX neural-network ops: softmax and hardmax, normalisation,
 * linear algebra, convolution and pooling, losses */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---- softmax and hardmax ---- */
bool onnx_op_softmax(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  const char *op = !strcmp(n->op_type, "Softmax") ? "softmax" : "log_softmax";
  int r = x->t.rank;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", m->opset >= 13 ? -1 : 1), r, &axis)) return false;
  if (m->opset >= 13 || axis == r - 1) {
    char a[48];
    imp_attrs(a, sizeof a, "axis=%lld", (long long)axis);
    return imp_un(m, OUT(0), op, x, a) != NULL;
  }
  /* before opset 13: over the input seen as 2-D [prod(:axis), prod(axis:)] */
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "a softmax before opset 13 over sizes over shape variables"), false;
  rill_type_t t2 = {x->t.dtype, 2, {1, 1}};
  for (int d = 0; d < r; d++) t2.dims[d < axis ? 0 : 1] *= x->t.dims[d];
  ival_t *y = imp_un(m, NULL, op, imp_reshape(m, NULL, x, &t2), "axis=1");
  return imp_reshape(m, OUT(0), y, &x->t) != NULL;
}

/* Hardmax: 1 where the first largest value along the axis is, else 0 */
bool onnx_op_hardmax(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  int r = x->t.rank;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", m->opset >= 13 ? -1 : 1), r, &axis)) return false;
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
  imp_attrs(a, sizeof a, "axis=%lld, keepdims=true", (long long)axis);
  ival_t *am = imp_emit(m, NULL, &kt, "argmax", &v, 1, a);
  ival_t *hot = imp_cast(m, NULL, imp_bin(m, NULL, "eq", io, am), x->t.dtype);
  return imp_reshape(m, OUT(0), hot, &x->t) != NULL;
}


/* ---- normalisation ---- */
/* (x - mean) / sqrt(var + epsilon) over the axes attribute text `axes`
 * (keepdims, the statistics of st's shape): the node's epsilon; the mean
 * and the biased variance given back where asked. For f16 and bf16 the
 * statistics and the normalised values are computed in f32 and rounded
 * once at the end, as PyTorch's norms and ONNX's stash_type=1 do: a mean
 * rounded to half before the subtraction shifts every value of a group
 * whose mean is large beside its spread. */
static ival_t *normalise(imp_t *m, const Onnx__NodeProto *n, ival_t *x, const char *axes, const rill_type_t *st, ival_t **mean_out, ival_t **var_out) {
  rill_dtype_t dt = x ? x->t.dtype : RILL_F32, c = dt == RILL_F16 || dt == RILL_BF16 ? RILL_F32 : dt;
  rill_type_t sc = *st;
  sc.dtype = c;
  ival_t *xc = imp_cast(m, NULL, x, c);
  ival_t *mean = xc ? imp_emit(m, NULL, &sc, "mean", &xc, 1, axes) : NULL;
  ival_t *dev = imp_bin(m, NULL, "sub", xc, mean);
  ival_t *sq = imp_bin(m, NULL, "mul", dev, dev);
  ival_t *var = sq ? imp_emit(m, NULL, &sc, "mean", &sq, 1, axes) : NULL;
  ival_t *inv = imp_un(m, NULL, "rsqrt", imp_bin(m, NULL, "add", var, imp_scalar(m, c, onnx_attr_f(n, "epsilon", 1e-5))), NULL);
  if (mean_out) *mean_out = imp_cast(m, NULL, mean, dt);
  if (var_out) *var_out = imp_cast(m, NULL, var, dt);
  return imp_cast(m, NULL, imp_bin(m, NULL, "mul", dev, inv), dt);
}

/* Training mode (training_mode=1 from opset 14; before it, the running
 * statistics asked for as outputs): the batch's mean and biased variance
 * over every axis but the channels normalise, and the running statistics
 * come out as input * momentum + batch * (1 - momentum). */
static bool batchnorm_training(imp_t *m, const Onnx__NodeProto *n, ival_t **in) {
  ival_t *x = in[0];
  int r = x->t.rank;
  rill_type_t st = x->t, ct = {x->t.dtype, r - 1, {x->t.dims[1]}}, vt = {x->t.dtype, 1, {x->t.dims[1]}};
  int64_t axes[RILL_MAX_RANK];
  int na = 0;
  for (int d = 0; d < r; d++) {
    if (d != 1) axes[na++] = d, st.dims[d] = 1;
    if (d >= 2) ct.dims[d - 1] = 1;
  }
  char l[100], a[140];
  imp_list_str(m, l, sizeof l, axes, na);
  imp_attrs(a, sizeof a, "axes=%s, keepdims=true", l);
  ival_t *mean, *var;
  ival_t *y = imp_bin(m, NULL, "mul", normalise(m, n, x, a, &st, &mean, &var), imp_reshape(m, NULL, in[1], &ct));
  if (!imp_bin(m, OUT(0), "add", y, imp_reshape(m, NULL, in[2], &ct))) return false;
  double mom = onnx_attr_f(n, "momentum", 0.9);
  ival_t *stats[2] = {mean, var};
  for (int k = 0; k < 2; k++) {
    if (!OUT(1 + k)) continue;
    ival_t *run = imp_bin(m, NULL, "mul", in[3 + k], imp_scalar(m, x->t.dtype, mom));
    ival_t *cur = imp_bin(m, NULL, "mul", imp_reshape(m, NULL, stats[k], &vt), imp_scalar(m, x->t.dtype, 1 - mom));
    if (!imp_bin(m, OUT(1 + k), "add", run, cur)) return false;
  }
  return true;
}

bool onnx_op_batchnorm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  for (int i = 0; i < 5; i++) NEED(i);
  bool training = m->opset >= 14 ? onnx_attr_i(n, "training_mode", 0) != 0 : OUT(1) || OUT(2) || OUT(3) || OUT(4);
  if (m->opset < 9 && onnx_attr_i(n, "spatial", 1) != 1) return imp_unsup(m, "spatial=0"), false;
  if (OUT(3) || OUT(4)) return imp_unsup(m, "the saved mean and variance outputs (opsets before 14)"), false;
  if (!training && (OUT(1) || OUT(2))) return imp_fail(m, RILL_MALFORMED, "running statistics asked for outside training mode"), false;
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  if (x->t.rank < 2) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 2)", x->t.rank), false;
  for (int i = 1; i < 5; i++) {
    if (in[i]->t.rank != 1 || in[i]->t.dims[0] != x->t.dims[1])
      return imp_fail(m, RILL_MALFORMED, "input %d must have C=%lld values", i, (long long)x->t.dims[1]), false;
    if (in[i]->t.dtype != x->t.dtype) in[i] = imp_cast(m, NULL, in[i], x->t.dtype);
  }
  if (training) return batchnorm_training(m, n, in);
  char a[64];
  imp_attrs(a, sizeof a, "eps=%.9g", onnx_attr_f(n, "epsilon", 1e-5));
  return imp_emit(m, OUT(0), &x->t, "batch_norm", in, 5, a) != NULL;
}

bool onnx_op_layernorm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  int64_t axis;
  if (!imp_norm_axis(m, onnx_attr_i(n, "axis", -1), x->t.rank, &axis)) return false;
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
    imp_list_str(m, l, sizeof l, axes, (int)(x->t.rank - axis));
    imp_attrs(a, sizeof a, "axes=%s, keepdims=true", l);
    ival_t *mean = xs ? imp_emit(m, OUT(1), &st, "mean", &xs, 1, a) : NULL;
    ival_t *dev = imp_bin(m, NULL, "sub", xs, mean);
    ival_t *sq = imp_bin(m, NULL, "mul", dev, dev);
    ival_t *var = sq ? imp_emit(m, NULL, &st, "mean", &sq, 1, a) : NULL;
    ival_t *inv = imp_un(m, OUT(2), "rsqrt", imp_bin(m, NULL, "add", var, imp_scalar(m, RILL_F32, onnx_attr_f(n, "epsilon", 1e-5))), NULL);
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
      if (!imp_bcast(m, &args[k]->t, &want, &chk) || chk.rank != want.rank) return false;
      char l[200], a[220];
      imp_list_str(m, l, sizeof l, want.dims, want.rank);
      imp_attrs(a, sizeof a, "shape=%s", l);
      args[k] = imp_emit(m, NULL, &want, "broadcast_to", &args[k], 1, a);
      if (!args[k]) return false;
    }
  }
  char a[96];
  imp_attrs(a, sizeof a, "axis=%lld, eps=%.9g", (long long)axis, onnx_attr_f(n, "epsilon", 1e-5));
  return imp_emit(m, OUT(0), &x->t, "layer_norm", args, na, a) != NULL;
}

/* InstanceNormalization: per sample and channel over the spatial dims */
bool onnx_op_instancenorm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
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
  imp_list_str(m, l, sizeof l, axes, r - 2);
  imp_attrs(a, sizeof a, "axes=%s, keepdims=true", l);
  ival_t *y = imp_bin(m, NULL, "mul", normalise(m, n, x, a, &st, NULL, NULL), imp_reshape(m, NULL, in[1], &ct));
  return imp_bin(m, OUT(0), "add", y, imp_reshape(m, NULL, in[2], &ct)) != NULL;
}

/* GroupNormalization: x [N, C, *] seen as [N, G, C/G * prod(*)], each
 * group normalised over its last axis (in f32 for f16 and bf16, as
 * stash_type=1 asks), then scaled and shifted per group (opset 18: scale
 * and bias of G values) or per channel (opset 21: C values). */
bool onnx_op_groupnorm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  int r = x->t.rank;
  if (r < 2) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 2)", r), false;
  if (onnx_attr_i(n, "stash_type", 1) != 1) return imp_unsup(m, "stash_type other than float"), false;
  int64_t G = onnx_attr_i(n, "num_groups", 0), C = x->t.dims[1], S = 1;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "a GroupNormalization over sizes over shape variables"), false;
  if (G < 1 || C % G) return imp_fail(m, RILL_MALFORMED, "num_groups=%lld does not divide %lld channels", (long long)G, (long long)C), false;
  for (int d = 2; d < r; d++) S *= x->t.dims[d];
  bool per_channel = m->opset >= 21;
  int64_t want = per_channel ? C : G;
  for (int k = 1; k <= 2; k++)
    if (in[k]->t.rank != 1 || in[k]->t.dims[0] != want || in[k]->t.dtype != x->t.dtype)
      return imp_fail(m, RILL_MALFORMED, "input %d must have %lld values of the input's dtype", k, (long long)want), false;
  rill_type_t gt = {x->t.dtype, 3, {x->t.dims[0], G, C / G * S}}, st = {x->t.dtype, 3, {x->t.dims[0], G, 1}};
  ival_t *y = normalise(m, n, imp_reshape(m, NULL, x, &gt), "axes=[2], keepdims=true", &st, NULL, NULL);
  if (!per_channel) {
    rill_type_t pt = {x->t.dtype, 2, {G, 1}};
    y = imp_bin(m, NULL, "add", imp_bin(m, NULL, "mul", y, imp_reshape(m, NULL, in[1], &pt)), imp_reshape(m, NULL, in[2], &pt));
    return imp_reshape(m, OUT(0), y, &x->t) != NULL;
  }
  rill_type_t ct = {x->t.dtype, r - 1, {C}};
  for (int d = 1; d < r - 1; d++) ct.dims[d] = 1;
  y = imp_bin(m, NULL, "mul", imp_reshape(m, NULL, y, &x->t), imp_reshape(m, NULL, in[1], &ct));
  return imp_bin(m, OUT(0), "add", y, imp_reshape(m, NULL, in[2], &ct)) != NULL;
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
  if (!imp_bcast(m, &ba, &bb, o)) return false;
  if (a->rank > 1) o->dims[o->rank++] = A.dims[A.rank - 2];
  if (b->rank > 1) o->dims[o->rank++] = B.dims[B.rank - 1];
  o->dtype = a->dtype;
  return true;
}

bool onnx_op_matmul(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  if (onnx_qdq_fuse(m, n, in, nin, false)) return true;
  if (m->err) return false;
  if (!imp_need_num(m, in[0], "input") || in[0]->t.dtype != in[1]->t.dtype) return (void)(m->err ? NULL : imp_fail(m, RILL_MALFORMED, "operands of different dtypes")), false;
  return imp_matmul(m, OUT(0), in[0], in[1]) != NULL;
}

ival_t *imp_matmul(imp_t *m, const char *out, ival_t *a, ival_t *b) {
  rill_type_t o;
  if (!a || !b || !matmul_type(m, &a->t, &b->t, &o)) return NULL;
  ival_t *args[2] = {a, b};
  return imp_emit(m, out, &o, "matmul", args, 2, NULL);
}

static ival_t *transpose2(imp_t *m, ival_t *x) {
  rill_type_t t = {x->t.dtype, 2, {x->t.dims[1], x->t.dims[0]}};
  return imp_emit(m, NULL, &t, "transpose", &x, 1, "perm=[1, 0]");
}

bool onnx_op_gemm(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *a = in[0], *b = in[1], *c = IN(2);
  if (a->t.rank != 2 || b->t.rank != 2) return imp_fail(m, RILL_MALFORMED, "A and B must be 2-D"), false;
  if (!imp_need_num(m, a, "A") || a->t.dtype != b->t.dtype || (c && c->t.dtype != a->t.dtype))
    return (void)(m->err ? NULL : imp_fail(m, RILL_MALFORMED, "operands of different dtypes")), false;
  double alpha = onnx_attr_f(n, "alpha", 1.0), beta = onnx_attr_f(n, "beta", 1.0);
  bool ta = onnx_attr_i(n, "transA", 0), tb = onnx_attr_i(n, "transB", 0);
  if (ta) a = transpose2(m, a);
  /* B known and not transposed: linear reads it as it lies (weight="kn"),
   * never transposed into a copy (unless RILL_LINEAR_KN=0: then a matmul) */
  bool kn = !tb && b->data && rill__linear_kn();
  if (!a || !b) return false;
  int64_t M = a->t.dims[0], K = a->t.dims[1], N = tb ? b->t.dims[0] : b->t.dims[1];
  if ((tb ? b->t.dims[1] : b->t.dims[0]) != K) return imp_fail(m, RILL_MALFORMED, "A and B do not multiply"), false;
  rill_type_t o = {a->t.dtype, 2, {M, N}};
  bool c_used = c && beta != 0;
  bool fused_bias = c_used && (tb || kn) && alpha == 1 && beta == 1 && c->t.rank == 1 && c->t.dims[0] == N;
  const char *last = OUT(0);
  bool tail = (alpha != 1) || (c_used && !fused_bias);
  ival_t *args[3] = {a, b, fused_bias ? c : NULL};
  ival_t *y = imp_emit(m, tail ? NULL : last, &o, tb || kn ? "linear" : "matmul", args, fused_bias ? 3 : 2, kn ? "weight=\"kn\"" : NULL);
  if (!y) return false;
  if (alpha != 1) y = imp_bin(m, c_used && !fused_bias ? NULL : last, "mul", y, imp_scalar(m, o.dtype, alpha));
  if (c_used && !fused_bias) {
    ival_t *cc = beta != 1 ? imp_bin(m, NULL, "mul", c, imp_scalar(m, o.dtype, beta)) : c;
    rill_type_t chk;
    if (!cc || !imp_bcast(m, &cc->t, &o, &chk) || chk.rank != 2 || chk.dims[0] != M || chk.dims[1] != N)
      return (void)(m->err ? NULL : imp_fail(m, RILL_MALFORMED, "C does not broadcast to [M, N]")), false;
    y = imp_bin(m, last, "add", y, cc);
  }
  return y != NULL;
}

/* ---- convolution and pooling ---- */
typedef struct window {
  int nd;                 /* spatial dims: 1, 2 or 3 */
  int64_t k[3], s[3], d[3], pb[3], pe[3];
} window_t;

/* kernel_shape, strides, dilations, pads, auto_pad for nd spatial dims of x */
/* The batch may be a size over shape variables (it is carried as it is);
 * channels and spatial sizes, which the window arithmetic reads, must be
 * numbers. */
static bool window_dims_ok(imp_t *m, const rill_type_t *x) {
  for (int d = 1; d < x->rank; d++)
    if (isa_dim_is_sym(x->dims[d])) return imp_unsup(m, "channels or spatial sizes over shape variables"), false;
  return true;
}

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
  imp_list_str(m, l, sizeof l, pads, 10);
  imp_attrs(a, sizeof a, "pads=%s, value=%s", l, value);
  return imp_emit(m, NULL, &t, "pad", &x, 1, a);
}

/* [N, C, D, H, W] -> the depth slices d0, d0 + s, ... (od of them) as [N, C*od, H, W] */
static ival_t *depth_slices(imp_t *m, ival_t *x, int64_t d0, int64_t od, int64_t s) {
  ival_t *sl = imp_slice1(m, x, 2, d0, d0 + (od - 1) * s + 1, s);
  if (!sl) return NULL;
  rill_type_t t = {x->t.dtype, 4, {x->t.dims[0], x->t.dims[1] * od, x->t.dims[3], x->t.dims[4]}};
  return imp_reshape(m, NULL, sl, &t);
}

/* A 3-D convolution as the sum over the kernel's depth of 2-D convolutions
 * of depth slices (the output depth moved into the batch) */
static ival_t *conv3d(imp_t *m, const char *out, ival_t *x, ival_t *w, ival_t *b, const window_t *win, int64_t group,
                      const rill_type_t *o) {
  int64_t N = x->t.dims[0], C = x->t.dims[1], O = w->t.dims[0], CG = w->t.dims[1], KD = w->t.dims[2], KH = w->t.dims[3], KW = w->t.dims[4];
  int64_t OD = o->dims[2], OH = o->dims[3], OW = o->dims[4];
  ival_t *xp = pad_depth(m, x, win->pb[0], win->pe[0], "0");
  if (!xp) return NULL;
  ival_t *acc = NULL;
  char a[256];
  imp_attrs(a, sizeof a, "stride=[%lld, %lld], padding=[%lld, %lld, %lld, %lld], dilation=[%lld, %lld], groups=%lld",
            (long long)win->s[1], (long long)win->s[2], (long long)win->pb[1], (long long)win->pb[2], (long long)win->pe[1],
            (long long)win->pe[2], (long long)win->d[1], (long long)win->d[2], (long long)group);
  rill_type_t wt = {w->t.dtype, 4, {O, CG, KH, KW}}, y4 = {x->t.dtype, 4, {N * OD, O, OH, OW}};
  for (int64_t kd = 0; kd < KD; kd++) {
    int64_t d0 = kd * win->d[0];
    ival_t *sl = imp_slice1(m, xp, 2, d0, d0 + (OD - 1) * win->s[0] + 1, win->s[0]);
    rill_type_t tt = {x->t.dtype, 5, {N, OD, C, xp->t.dims[3], xp->t.dims[4]}};
    ival_t *tr = sl ? imp_emit(m, NULL, &tt, "transpose", &sl, 1, "perm=[0, 2, 1, 3, 4]") : NULL;
    rill_type_t t4 = {x->t.dtype, 4, {N * OD, C, tt.dims[3], tt.dims[4]}};
    ival_t *x4 = imp_reshape(m, NULL, tr, &t4);
    /* the kernel's depth slab (folded where the weights are known) */
    ival_t *wk = imp_reshape(m, NULL, imp_slice1(m, w, 2, kd, kd + 1, 1), &wt);
    ival_t *args[3] = {x4, wk, b};
    ival_t *y = x4 && wk ? imp_emit(m, NULL, &y4, "conv2d", args, b && kd == 0 ? 3 : 2, a) : NULL;
    acc = acc ? imp_bin(m, NULL, "add", acc, y) : y;
    if (!acc) return NULL;
  }
  rill_type_t t5 = {x->t.dtype, 5, {N, OD, O, OH, OW}};
  ival_t *r5 = imp_reshape(m, NULL, acc, &t5);
  return r5 ? imp_emit(m, out, o, "transpose", &r5, 1, "perm=[0, 2, 1, 3, 4]") : NULL;
}

bool onnx_op_conv(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  if (onnx_qdq_fuse(m, n, in, nin, true)) return true;
  if (m->err) return false;
  return imp_conv(m, n, OUT(0), in[0], in[1], IN(2)) != NULL;
}

ival_t *imp_conv(imp_t *m, const Onnx__NodeProto *n, const char *out, ival_t *x, ival_t *w, ival_t *b) {
  if (!x || !w) return NULL;
  if (x->t.rank < 3 || x->t.rank > 5) return imp_unsup(m, "a %d-D convolution (1-D, 2-D and 3-D are supported)", x->t.rank - 2), NULL;
  if (!imp_need_float(m, x, "input") || !window_dims_ok(m, &x->t) || !window_dims_ok(m, &w->t)) return NULL;
  if (isa_dim_is_sym(w->t.dims[0]) || (x->t.rank == 5 && isa_dim_is_sym(x->t.dims[0])))
    return imp_unsup(m, "a 3-D convolution over a batch over shape variables"), NULL;
  if (w->t.rank != x->t.rank || w->t.dtype != x->t.dtype) return imp_fail(m, RILL_MALFORMED, "weight of another rank or dtype"), NULL;
  int64_t group = onnx_attr_i(n, "group", 1);
  window_t win;
  if (!window_of(m, n, &x->t, w->t.dims + 2, &win)) return NULL;
  int nd = win.nd;
  if (group < 1 || x->t.dims[1] != w->t.dims[1] * group || w->t.dims[0] % group)
    return imp_fail(m, RILL_MALFORMED, "weight does not fit the input with group=%lld", (long long)group), NULL;
  if (b && (b->t.rank != 1 || b->t.dims[0] != w->t.dims[0] || b->t.dtype != x->t.dtype)) return imp_fail(m, RILL_MALFORMED, "bias of the wrong shape"), NULL;
  rill_type_t o = x->t;
  o.dims[1] = w->t.dims[0];
  for (int i = 0; i < nd; i++) {
    o.dims[2 + i] = out_len(x->t.dims[2 + i], win.pb[i], win.pe[i], win.k[i], win.s[i], win.d[i], false);
    if (o.dims[2 + i] < 1) return imp_fail(m, RILL_MALFORMED, "the kernel does not fit the padded input"), NULL;
  }
  if (nd == 3) return conv3d(m, out, x, w, b, &win, group, &o);
  window_2d(&win);
  ival_t *args[3] = {as_2d(m, x), as_2d(m, w), b};
  char a[256];
  imp_attrs(a, sizeof a, "stride=[%lld, %lld], padding=[%lld, %lld, %lld, %lld], dilation=[%lld, %lld], groups=%lld",
            (long long)win.s[0], (long long)win.s[1], (long long)win.pb[0], (long long)win.pb[1], (long long)win.pe[0],
            (long long)win.pe[1], (long long)win.d[0], (long long)win.d[1], (long long)group);
  if (nd == 2) return imp_emit(m, out, &o, "conv2d", args, b ? 3 : 2, a);
  rill_type_t o4 = {o.dtype, 4, {o.dims[0], o.dims[1], 1, o.dims[2]}};
  ival_t *y = imp_emit(m, NULL, &o4, "conv2d", args, b ? 3 : 2, a);
  return imp_reshape(m, out, y, &o);
}

int imp_conv2d_window(imp_t *m, const Onnx__NodeProto *n, const rill_type_t *x, const rill_type_t *w, char *a, size_t na, rill_type_t *o) {
  if (x->rank < 3 || x->rank > 5 || w->rank != x->rank || !window_dims_ok(m, x) || !window_dims_ok(m, w)) return m->err ? 0 : x->rank - 2;
  int64_t group = onnx_attr_i(n, "group", 1);
  window_t win;
  if (!window_of(m, n, x, w->dims + 2, &win)) return 0;
  int nd = win.nd;
  if (group < 1 || x->dims[1] != w->dims[1] * group || w->dims[0] % group)
    return imp_fail(m, RILL_MALFORMED, "weight does not fit the input with group=%lld", (long long)group), 0;
  *o = *x;
  o->dims[1] = w->dims[0];
  for (int i = 0; i < nd; i++) {
    o->dims[2 + i] = out_len(x->dims[2 + i], win.pb[i], win.pe[i], win.k[i], win.s[i], win.d[i], false);
    if (o->dims[2 + i] < 1) return imp_fail(m, RILL_MALFORMED, "the kernel does not fit the padded input"), 0;
  }
  if (nd == 3) return 3;
  window_2d(&win);
  imp_attrs(a, na, "stride=[%lld, %lld], padding=[%lld, %lld, %lld, %lld], dilation=[%lld, %lld], groups=%lld", (long long)win.s[0],
            (long long)win.s[1], (long long)win.pb[0], (long long)win.pb[1], (long long)win.pe[0], (long long)win.pe[1], (long long)win.d[0],
            (long long)win.d[1], (long long)group);
  return nd;
}

/* ConvTranspose onto conv_transpose: pads from `pads`, or from `auto_pad`
 * or `output_shape` (total = stride * (in - 1) + output_padding +
 * (k - 1) * dilation + 1 - out, split as ONNX's reference splits it, a
 * negative end pad lengthening the output as output_padding does) */
bool onnx_op_conv_transpose(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *w = in[1], *b = IN(2);
  int r = x->t.rank, nd = r - 2;
  if (nd < 1 || nd > 3) return imp_unsup(m, "a %d-D transposed convolution (1-D, 2-D and 3-D are supported)", nd), false;
  if (!imp_need_float(m, x, "input") || !window_dims_ok(m, &x->t) || !window_dims_ok(m, &w->t) || isa_dim_is_sym(w->t.dims[0])) return false;
  if (w->t.rank != r || w->t.dtype != x->t.dtype) return imp_fail(m, RILL_MALFORMED, "weight of another rank or dtype"), false;
  int64_t group = onnx_attr_i(n, "group", 1), k[3], s[3], d[3], op[3], pads[6], os[3];
  for (int i = 0; i < nd; i++) k[i] = w->t.dims[2 + i], s[i] = d[i] = 1, op[i] = 0, pads[i] = pads[nd + i] = 0;
  int64_t v[8];
  int c;
  if ((c = onnx_attr_ints(n, "kernel_shape", v, 8)) >= 0) {
    if (c != nd) return imp_fail(m, RILL_MALFORMED, "kernel_shape needs %d values", nd), false;
    for (int i = 0; i < nd; i++)
      if (v[i] != k[i]) return imp_fail(m, RILL_MALFORMED, "kernel_shape differs from the weight's"), false;
  }
  const struct { const char *name; int64_t *out; int want; int64_t lo; } lists[4] = {
      {"strides", s, nd, 1}, {"dilations", d, nd, 1}, {"output_padding", op, nd, 0}, {"pads", pads, 2 * nd, -((int64_t)1 << 30)}};
  for (int l = 0; l < 4; l++) {
    if ((c = onnx_attr_ints(n, lists[l].name, v, 8)) < 0) continue;
    if (c != lists[l].want) return imp_fail(m, RILL_MALFORMED, "%s needs %d values, found %d", lists[l].name, lists[l].want, c), false;
    for (int i = 0; i < c; i++) {
      if (v[i] < lists[l].lo || v[i] > ((int64_t)1 << 30)) return imp_fail(m, RILL_MALFORMED, "%s holds %lld, out of range", lists[l].name, (long long)v[i]), false;
      lists[l].out[i] = v[i];
    }
  }
  char ap[32], buf[32];
  snprintf(ap, sizeof ap, "%s", onnx_attr_s(n, "auto_pad", "NOTSET", buf, sizeof buf));
  bool upper = !strcmp(ap, "SAME_UPPER"), same = upper || !strcmp(ap, "SAME_LOWER");
  if (!same && strcmp(ap, "NOTSET") && strcmp(ap, "VALID")) return imp_fail(m, RILL_MALFORMED, "unknown auto_pad (NOTSET, SAME_UPPER, SAME_LOWER or VALID)"), false;
  int nos = onnx_attr_ints(n, "output_shape", v, 8);
  if (nos >= 0) {
    /* output_shape may name every dim or the spatial ones */
    if (nos != nd && nos != r) return imp_fail(m, RILL_MALFORMED, "output_shape needs %d values", nd), false;
    for (int i = 0; i < nd; i++) os[i] = v[nos == r ? 2 + i : i];
  }
  if (same || nos >= 0) {
    for (int i = 0; i < nd; i++) {
      int64_t out = nos >= 0 ? os[i] : x->t.dims[2 + i] * s[i];
      int64_t total = s[i] * (x->t.dims[2 + i] - 1) + op[i] + (k[i] - 1) * d[i] + 1 - out;
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2); /* floor division */
      pads[i] = upper ? half : total - half;
      pads[nd + i] = upper ? total - half : half;
    }
  }
  if (group < 1 || x->t.dims[1] != w->t.dims[0] || x->t.dims[1] % group)
    return imp_fail(m, RILL_MALFORMED, "weight does not fit the input with group=%lld", (long long)group), false;
  if (b && (b->t.rank != 1 || b->t.dims[0] != w->t.dims[1] * group || b->t.dtype != x->t.dtype)) return imp_fail(m, RILL_MALFORMED, "bias of the wrong shape"), false;
  rill_type_t o = x->t;
  o.dims[1] = w->t.dims[1] * group;
  for (int i = 0; i < nd; i++) {
    o.dims[2 + i] = (x->t.dims[2 + i] - 1) * s[i] - pads[i] - pads[nd + i] + d[i] * (k[i] - 1) + op[i] + 1;
    if (o.dims[2 + i] < 1) return imp_fail(m, RILL_MALFORMED, "the output would be empty"), false;
  }
  char ls[100], lp[160], lo[100], ld[100], a[560];
  imp_list_str(m, ls, sizeof ls, s, nd);
  imp_list_str(m, lp, sizeof lp, pads, 2 * nd);
  imp_list_str(m, lo, sizeof lo, op, nd);
  imp_list_str(m, ld, sizeof ld, d, nd);
  imp_attrs(a, sizeof a, "stride=%s, padding=%s, output_padding=%s, dilation=%s, groups=%lld", ls, lp, lo, ld, (long long)group);
  ival_t *args[3] = {x, w, b};
  return imp_emit(m, OUT(0), &o, "conv_transpose", args, b ? 3 : 2, a) != NULL;
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
  imp_attrs(a, sizeof a, "kernel=[%lld, %lld], stride=[%lld, %lld], padding=[%lld, %lld], ceil_mode=false%s", (long long)w->k[1],
            (long long)w->k[2], (long long)w->s[1], (long long)w->s[2], (long long)w->pb[1], (long long)w->pb[2],
            maxp ? "" : ", count_include_pad=true");
  rill_type_t y4 = {x->t.dtype, 4, {o->dims[0], o->dims[1] * OD, o->dims[3], o->dims[4]}};
  ival_t *acc = NULL;
  for (int64_t kd = 0; kd < w->k[0]; kd++) {
    ival_t *x4 = depth_slices(m, xp, kd * w->d[0], OD, w->s[0]);
    ival_t *y = x4 ? imp_emit(m, NULL, &y4, maxp ? "max_pool2d" : "avg_pool2d", &x4, 1, a) : NULL;
    acc = acc ? imp_bin(m, NULL, maxp ? "maximum" : "add", acc, y) : y;
    if (!acc) return false;
  }
  if (!maxp && w->k[0] > 1) acc = imp_bin(m, NULL, "div", acc, imp_scalar(m, x->t.dtype, (double)w->k[0]));
  return imp_reshape(m, OUT(0), acc, o) != NULL;
}

/* MaxPool's Indices (1-D and 2-D): the flat index (n, c, h, w in row-major
 * order, or h + w * H with storage_order=1) of the first window position,
 * in row-major order, whose value is the window's largest y: the kernel
 * positions from last to first, each a strided slice of x (padded with
 * -inf) compared with y and the position's indices (known here) taken
 * where equal. */
static bool pool_indices(imp_t *m, const Onnx__NodeProto *n, ival_t *x, ival_t *y) {
  if (!x || !y) return false;
  int64_t zero[3] = {0, 0, 0};
  window_t w;
  if (!window_of(m, n, &x->t, zero, &w)) return false;
  window_2d(&w);
  ival_t *x4 = as_2d(m, x), *y4 = as_2d(m, y);
  if (!x4 || !y4) return false;
  int64_t N = x4->t.dims[0], C = x4->t.dims[1], H = x4->t.dims[2], W = x4->t.dims[3], OH = y4->t.dims[2], OW = y4->t.dims[3];
  if (isa_dim_is_sym(N)) return imp_unsup(m, "the Indices output with a batch over shape variables"), false;
  if ((size_t)(N * C) > ONNX_FOLD_MAX * 16 || (size_t)(OH * OW) > ONNX_FOLD_MAX * 16) return imp_unsup(m, "the Indices output of so large a pooling"), false;
  bool col = onnx_attr_i(n, "storage_order", 0) != 0;
  int64_t pe[2];
  for (int i = 0; i < 2; i++) {
    int64_t need = (i ? OW : OH) - 1;
    pe[i] = need * w.s[i] + w.d[i] * (w.k[i] - 1) + 1 - (i ? W : H) - w.pb[i];
    if (pe[i] < 0) pe[i] = 0;
  }
  if (w.pb[0] || w.pb[1] || pe[0] || pe[1]) {
    rill_type_t pt = x4->t;
    int64_t pads[8] = {0, 0, w.pb[0], w.pb[1], 0, 0, pe[0], pe[1]};
    pt.dims[2] += w.pb[0] + pe[0];
    pt.dims[3] += w.pb[1] + pe[1];
    char l[160], a[200];
    imp_list_str(m, l, sizeof l, pads, 8);
    imp_attrs(a, sizeof a, "pads=%s, value=-inf", l);
    x4 = imp_emit(m, NULL, &pt, "pad", &x4, 1, a);
  }
  int64_t *off = malloc((size_t)(N * C) * sizeof *off), *pos = malloc((size_t)(OH * OW) * sizeof *pos);
  if (!off || !pos) {
    free(off), free(pos);
    return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  }
  for (int64_t i = 0; i < N * C; i++) off[i] = i * H * W;
  rill_type_t ot = {RILL_I64, 4, {N, C, 1, 1}}, pt = {RILL_I64, 4, {1, 1, OH, OW}}, it = {RILL_I64, 4, {N, C, OH, OW}};
  ival_t *ncoff = imp_const(m, &ot, off), *acc = NULL;
  free(off);
  for (int64_t p = w.k[0] * w.k[1] - 1; p >= 0 && x4 && ncoff; p--) {
    int64_t i = p / w.k[1], j = p % w.k[1];
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t h = oh * w.s[0] - w.pb[0] + i * w.d[0], c = ow * w.s[1] - w.pb[1] + j * w.d[1];
        pos[oh * OW + ow] = col ? h + c * H : h * W + c;
      }
    ival_t *idx = imp_bin(m, NULL, "add", imp_const(m, &pt, pos), ncoff);
    if (!acc) {
      acc = idx;
      continue;
    }
    int64_t r0 = i * w.d[0], c0 = j * w.d[1];
    ival_t *sl = imp_slice1(m, imp_slice1(m, x4, 2, r0, r0 + (OH - 1) * w.s[0] + 1, w.s[0]), 3, c0, c0 + (OW - 1) * w.s[1] + 1, w.s[1]);
    ival_t *a3[3] = {imp_bin(m, NULL, "eq", sl, y4), idx, acc};
    acc = a3[0] && idx ? imp_emit(m, NULL, &it, "where", a3, 3, NULL) : NULL;
  }
  free(pos);
  rill_type_t o = y->t;
  o.dtype = RILL_I64;
  return imp_reshape(m, OUT(1), acc, &o) != NULL;
}

bool onnx_op_pool(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  bool maxp = !strcmp(n->op_type, "MaxPool");
  if (maxp && OUT(1)) {
    /* the values through this mapping, then the indices from them */
    if (x->t.rank == 5) return imp_unsup(m, "the Indices output of 3-D max pooling"), false;
    if (!imp_is_float(x->t.dtype) && x->t.dtype != RILL_U8 && x->t.dtype != RILL_I8 && x->t.dtype != RILL_I32) return imp_need_float(m, x, "input");
    char name[64];
    snprintf(name, sizeof name, "_pool%d", m->tmp++);
    char *outs[2] = {OUT(0) ? n->output[0] : name, NULL};
    Onnx__NodeProto inner = *n;
    inner.output = outs;
    inner.n_output = 1;
    if (!onnx_op_pool(m, &inner, in, nin)) return false;
    rill_dtype_t fd = imp_is_float(x->t.dtype) ? x->t.dtype : x->t.dtype == RILL_I32 ? RILL_F64 : RILL_F32;
    return pool_indices(m, n, imp_cast(m, NULL, x, fd), imp_cast(m, NULL, imp_find(m, outs[0]), fd));
  }
  if (x->t.rank < 3 || x->t.rank > 5) return imp_unsup(m, "%d-D pooling (1-D, 2-D and 3-D are supported)", x->t.rank - 2), false;
  if (!window_dims_ok(m, &x->t)) return false;
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
    if (!onnx_op_pool(m, &inner, args, 1)) return false;
    return imp_cast(m, OUT(0), imp_find(m, name), it) != NULL;
  }
  if (!imp_need_float(m, x, "input")) return false;
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
    imp_list_str(m, l, sizeof l, pads, 8);
    imp_attrs(a, sizeof a, "pads=%s, value=%s", l, maxp ? "-inf" : "0");
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
        ival_t *sl = imp_slice1(m, imp_slice1(m, x4, 2, r0, r0 + (o4.dims[2] - 1) * w.s[0] + 1, w.s[0]), 3, c0, c0 + (o4.dims[3] - 1) * w.s[1] + 1, w.s[1]);
        bool last = i == w.k[0] - 1 && j == w.k[1] - 1;
        acc = acc ? imp_bin(m, last && nd == 2 ? OUT(0) : NULL, "maximum", acc, sl) : sl;
        if (!acc) return false;
      }
    if (w.k[0] * w.k[1] == 1) acc = imp_alias(m, nd == 2 ? OUT(0) : NULL, acc);
    return nd == 2 ? acc != NULL : imp_reshape(m, OUT(0), acc, &o) != NULL;
  }
  char a[256];
  imp_attrs(a, sizeof a, "kernel=[%lld, %lld], stride=[%lld, %lld], padding=[%lld, %lld], ceil_mode=%s%s", (long long)w.k[0],
            (long long)w.k[1], (long long)w.s[0], (long long)w.s[1], (long long)w.pb[0], (long long)w.pb[1], ceil_mode ? "true" : "false",
            maxp ? "" : cip ? ", count_include_pad=true" : ", count_include_pad=false");
  ival_t *y = imp_emit(m, nd == 2 && !scale ? OUT(0) : NULL, &o4, maxp ? "max_pool2d" : "avg_pool2d", &x4, 1, a);
  if (scale) y = imp_bin(m, nd == 2 ? OUT(0) : NULL, "mul", y, scale);
  return nd == 2 ? y != NULL : imp_reshape(m, OUT(0), y, &o) != NULL;
}

bool onnx_op_global_pool(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  if (x->t.rank < 3) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 3)", x->t.rank), false;
  rill_type_t o = x->t;
  for (int d = 2; d < o.rank; d++) o.dims[d] = 1;
  bool avg = !strcmp(n->op_type, "GlobalAveragePool");
  if (avg && x->t.rank == 4) return imp_emit(m, OUT(0), &o, "adaptive_avg_pool2d", &x, 1, "output=[1, 1]") != NULL;
  int64_t axes[RILL_MAX_RANK] = {0};
  for (int d = 2; d < x->t.rank; d++) axes[d - 2] = d;
  char l[100], a[140];
  imp_list_str(m, l, sizeof l, axes, x->t.rank - 2);
  imp_attrs(a, sizeof a, "axes=%s, keepdims=true", l);
  return imp_emit(m, OUT(0), &o, avg ? "mean" : "max", &x, 1, a) != NULL;
}

/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (the latter on
 * log_softmax over the classes): -input[n, t, d...] * weight[t], 0 where the
 * target is ignore_index; reduced by none, sum, or mean (the sum over the
 * sum of the weights that counted) */
bool onnx_op_nll(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *t = in[1], *w = IN(2);
  bool sce = !strcmp(n->op_type, "SoftmaxCrossEntropyLoss");
  if (!imp_need_float(m, x, "input")) return false;
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
    x = imp_un(m, OUT(1), "log_softmax", x, "axis=1");
    if (!x) return false;
  }
  ival_t *ti = imp_cast(m, NULL, t, RILL_I64);
  /* ignored targets point at class 0 (any class in range), weighed 0 */
  bool has_ignore = onnx_attr_get(n, "ignore_index") != NULL;
  ival_t *valid = has_ignore ? imp_bin(m, NULL, "ne", ti, imp_scalar_int(m, RILL_I64, onnx_attr_i(n, "ignore_index", 0))) : NULL;
  if (has_ignore) {
    ival_t *a3[3] = {valid, ti, imp_scalar(m, RILL_I64, 0)};
    if (!valid || !a3[2]) return false;
    ti = imp_emit(m, NULL, &ti->t, "where", a3, 3, NULL);
  }
  if (!ti) return false;
  rill_type_t t1 = {RILL_I64, r, {0}};
  for (int k = 0; k < r; k++) t1.dims[k] = k == 1 ? 1 : x->t.dims[k];
  rill_type_t lt = t->t;
  lt.dtype = d;
  ival_t *picked = imp_reshape(m, NULL, imp_gather_elements(m, NULL, x, imp_reshape(m, NULL, ti, &t1), 1), &lt);
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
    wt = wt ? imp_bin(m, NULL, "mul", wt, vf) : vf;
    if (!wt) return false;
  }
  ival_t *loss = imp_un(m, NULL, "neg", picked, NULL);
  if (wt) loss = imp_bin(m, NULL, "mul", loss, wt);
  if (!loss) return false;
  if (!strcmp(red, "none")) return imp_alias(m, OUT(0), loss) != NULL;
  rill_type_t st = {d, 0, {0}};
  ival_t *sum = imp_emit(m, strcmp(red, "sum") ? NULL : OUT(0), &st, "sum", &loss, 1, NULL);
  if (!strcmp(red, "sum")) return sum != NULL;
  ival_t *den = wt ? imp_emit(m, NULL, &st, "sum", &wt, 1, NULL) : imp_scalar(m, d, (double)imp_numel(&t->t));
  return imp_bin(m, OUT(0), "div", sum, den) != NULL;
}

/* LRN: x / (bias + alpha / size * s)^beta, s the sum of squares over the
 * channels c - floor((size-1)/2) .. c + ceil((size-1)/2) (zeros past the
 * ends): the squares padded along the channels and `size` slices added */
bool onnx_op_lrn(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  int r = x->t.rank;
  int64_t size = onnx_attr_i(n, "size", 0), C = r >= 2 ? x->t.dims[1] : 0;
  if (r < 3) return imp_fail(m, RILL_MALFORMED, "input of rank %d (at least 3: [N, C, ...])", r), false;
  if (size < 1 || size > 4096) return imp_fail(m, RILL_MALFORMED, "size %lld (1 to 4096)", (long long)size), false;
  if (isa_dim_is_sym(C)) return imp_unsup(m, "LRN over channels that are a shape variable"), false;
  double alpha = onnx_attr_f(n, "alpha", 1e-4), beta = onnx_attr_f(n, "beta", 0.75), bias = onnx_attr_f(n, "bias", 1.0);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo, pads[2 * RILL_MAX_RANK] = {0};
  pads[1] = lo, pads[r + 1] = hi;
  ival_t *sq = imp_bin(m, NULL, "mul", x, x);
  rill_type_t pt = x->t;
  pt.dims[1] = C + size - 1;
  char l[300], a[400];
  imp_list_str(m, l, sizeof l, pads, 2 * r);
  imp_attrs(a, sizeof a, "pads=%s, value=0", l);
  ival_t *p = sq ? imp_emit(m, NULL, &pt, "pad", &sq, 1, a) : NULL, *s = NULL;
  for (int64_t k = 0; k < size && p; k++) {
    ival_t *part = imp_slice1(m, p, 1, k, k + C, 1);
    s = s ? imp_bin(m, NULL, "add", s, part) : part;
  }
  ival_t *d = imp_bin(m, NULL, "add", imp_scalar(m, x->t.dtype, bias), imp_bin(m, NULL, "mul", imp_scalar(m, x->t.dtype, alpha / (double)size), s));
  return imp_bin(m, OUT(0), "div", x, imp_bin(m, NULL, "pow", d, imp_scalar(m, x->t.dtype, beta))) != NULL;
}

/* MeanVarianceNormalization, as ONNX's function body: (x - mean) /
 * (sqrt(mean(x^2) - mean^2) + 1e-9) over `axes` (0, 2, 3 by default) */
bool onnx_op_mvn(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  int64_t axes[RILL_MAX_RANK + 1] = {0, 2, 3};
  int na = onnx_attr_ints(n, "axes", axes, RILL_MAX_RANK);
  if (na < 0) na = 3;
  if (na > RILL_MAX_RANK) return imp_fail(m, RILL_MALFORMED, "too many axes"), false;
  rill_type_t o = x->t;
  for (int i = 0; i < na; i++) {
    if (!imp_norm_axis(m, axes[i], x->t.rank, &axes[i])) return false;
    o.dims[axes[i]] = 1;
  }
  char l[200], a[256];
  imp_list_str(m, l, sizeof l, axes, na);
  imp_attrs(a, sizeof a, "axes=%s, keepdims=true", l);
  ival_t *mean = imp_emit(m, NULL, &o, "mean", &x, 1, a), *sq = imp_bin(m, NULL, "mul", x, x);
  ival_t *msq = sq ? imp_emit(m, NULL, &o, "mean", &sq, 1, a) : NULL;
  ival_t *sd = imp_un(m, NULL, "sqrt", imp_bin(m, NULL, "sub", msq, imp_bin(m, NULL, "mul", mean, mean)), NULL);
  return imp_bin(m, OUT(0), "div", imp_bin(m, NULL, "sub", x, mean), imp_bin(m, NULL, "add", sd, imp_scalar(m, x->t.dtype, 1e-9))) != NULL;
}
