/* cpu_nn.c: CPU reference kernels for reductions, normalisation, linear
 * algebra, convolution and pooling. Inputs are widened to double (or
 * int64 for integer matmul) and results rounded once to the output dtype. */
#include <math.h>
#include <stdlib.h>

#include "ops.h"

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD };

static size_t nz(size_t n) { return n ? n : 1; }

static size_t numel_of(const rill_type_t *t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

/* A whole tensor widened to double; NULL on allocation failure. */
static double *widen(const void *p, const rill_type_t *t) {
  size_t n = numel_of(t);
  double *d = malloc((n ? n : 1) * sizeof(double));
  if (!d) return NULL;
  if (t->dtype == RILL_F32) {
    for (size_t i = 0; i < n; i++) d[i] = ((const float *)p)[i];
  } else {
    for (size_t i = 0; i < n; i++) d[i] = rill__load_f(p, t->dtype, i);
  }
  return d;
}

/* An f32 product's or convolution's operand, widened; in the TF32 mode
 * rounded to TF32 first, as tensor cores read it. */
static double *widen_operand(const ops_plan_t *plan, const void *p, const rill_type_t *t) {
  double *d = widen(p, t);
  if (d && plan->precision == RILL_PRECISION_TF32 && t->dtype == RILL_F32)
    for (size_t i = 0, n = numel_of(t); i < n; i++) d[i] = rill__f32_to_tf32((float)d[i]);
  return d;
}

static void narrow(void *p, const rill_type_t *t, const double *d) {
  size_t n = numel_of(t);
  if (t->dtype == RILL_F32) {
    for (size_t i = 0; i < n; i++) ((float *)p)[i] = (float)d[i];
  } else {
    for (size_t i = 0; i < n; i++) rill__store_f(p, t->dtype, i, d[i]);
  }
}

static rill_status_t oom(const char *op) {
  return rill__status(RILL_OUT_OF_MEMORY, "%s: out of host memory for the reference kernel", op);
}

/* A softmax's, layer_norm's or reduction's result element: v, or its epilogue at v rounded to the dtype. */
static double epilogue(const ops_plan_t *plan, double v) {
  return plan->epi ? ops_fused_apply(plan->epi, plan->decl->out[0].dtype, &v, 1) : v;
}

rill_status_t ops_cpu_reduce(const ops_plan_t *plan, void *const *in, void *const *out) {
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  size_t n = numel_of(x), no = numel_of(ot);
  /* Offset of each input dim in the output (0 for reduced dims). */
  int64_t ost[RILL_MAX_RANK], acc = 1;
  for (int i = x->rank - 1; i >= 0; i--) {
    if (p->axis_mask & (1u << i)) {
      ost[i] = 0;
    } else {
      ost[i] = acc;
      acc *= x->dims[i];
    }
  }
  bool fl = rill__is_float(x->dtype), ord = p->code == R_MAX || p->code == R_MIN; /* ord: compare in value order (u64) */
  double *af = NULL;
  int64_t *ai = NULL;
  if (fl) af = malloc((no ? no : 1) * sizeof(double));
  else ai = malloc((no ? no : 1) * sizeof(int64_t));
  if (!af && !ai) return oom("reduce");
  for (size_t i = 0; i < no; i++) {
    if (fl) af[i] = p->code == R_MAX ? -INFINITY : p->code == R_MIN ? INFINITY : p->code == R_PROD ? 1.0 : 0.0;
    else ai[i] = p->code == R_MAX ? INT64_MIN : p->code == R_MIN ? INT64_MAX : p->code == R_PROD ? 1 : 0;
  }
  int64_t idx[RILL_MAX_RANK] = {0}, off = 0;
  for (size_t i = 0; i < n; i++) {
    if (fl) {
      double v = rill__load_f(in[0], x->dtype, i), *a = &af[off];
      if (plan->pro) v = ops_fused_apply(plan->pro, x->dtype, &v, 1);
      if (p->code == R_MAX) *a = isnan(v) || isnan(*a) ? NAN : v > *a ? v : *a;
      else if (p->code == R_MIN) *a = isnan(v) || isnan(*a) ? NAN : v < *a ? v : *a;
      else if (p->code == R_PROD) *a *= v;
      else *a += v;
    } else {
      int64_t v = rill__ord_i(ord ? x->dtype : RILL_I64, rill__load_i(in[0], x->dtype, i)), *a = &ai[off];
      if (p->code == R_MAX) *a = v > *a ? v : *a;
      else if (p->code == R_MIN) *a = v < *a ? v : *a;
      else if (p->code == R_PROD) *a = (int64_t)((uint64_t)*a * (uint64_t)v);
      else *a = (int64_t)((uint64_t)*a + (uint64_t)v);
    }
    for (int d = x->rank - 1; d >= 0; d--) {
      off += ost[d];
      if (++idx[d] < x->dims[d]) break;
      off -= ost[d] * x->dims[d];
      idx[d] = 0;
    }
  }
  size_t count = no ? n / no : 0;
  if (no && n == 0) count = 0;
  for (size_t i = 0; i < no; i++) {
    if (fl) rill__store_f(out[0], ot->dtype, i, epilogue(plan, p->code == R_MEAN ? af[i] / (double)count : af[i]));
    else rill__store_i(out[0], ot->dtype, i, rill__ord_i(ord ? x->dtype : RILL_I64, ai[i]));
  }
  free(af);
  free(ai);
  return NULL;
}

rill_status_t ops_cpu_argmax(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *x = &plan->decl->in[0];
  size_t outer = 1, len, inner = 1;
  if (plan->p.axis < 0) {
    len = numel_of(x);
  } else {
    for (int i = 0; i < x->rank; i++) {
      if (i < plan->p.axis) outer *= (size_t)x->dims[i];
      else if (i > plan->p.axis) inner *= (size_t)x->dims[i];
    }
    len = (size_t)x->dims[plan->p.axis];
  }
  bool fl = rill__is_float(x->dtype);
  int64_t *y = out[0];
  for (size_t o = 0; o < outer; o++)
    for (size_t k = 0; k < inner; k++) {
      size_t best = 0;
      double bf = 0;
      int64_t bi = 0;
      for (size_t j = 0; j < len; j++) {
        size_t at = (o * len + j) * inner + k;
        if (fl) {
          double v = rill__load_f(in[0], x->dtype, at);
          /* NaN counts as the largest value; the first one wins. */
          if (j == 0 || (!isnan(bf) && (isnan(v) || v > bf))) { bf = v; best = j; }
        } else {
          int64_t v = rill__ord_i(x->dtype, rill__load_i(in[0], x->dtype, at));
          if (j == 0 || v > bi) { bi = v; best = j; }
        }
      }
      y[o * inner + k] = (int64_t)best;
    }
  return NULL;
}

/* Element i of softmax's input: x, or round(x * scale / divisor) (a merged
 * mul or div), or its prologue at x (merged elementwise ops) and at the
 * mask's element there (mst: its strides over x's dims, 0 where it
 * broadcasts). */
static double softmax_in(const ops_plan_t *plan, void *const *in, const int64_t *mst, size_t i) {
  const rill_type_t *x = &plan->decl->in[0];
  double v[2] = {rill__load_f(in[0], x->dtype, i), 0};
  if (plan->decl->nin > 1) {
    size_t o = 0, r = i;
    for (int d = x->rank - 1; d >= 0; d--) {
      o += (r % (size_t)x->dims[d]) * (size_t)mst[d];
      r /= (size_t)x->dims[d];
    }
    v[1] = rill__load_f(in[1], x->dtype, o);
  }
  if (plan->pro) return ops_fused_apply(plan->pro, x->dtype, v, plan->decl->nin);
  if (plan->p.scale == 1 && plan->p.divisor == 1) return v[0];
  uint64_t t;
  rill__store_f(&t, x->dtype, 0, v[0] * plan->p.scale / plan->p.divisor);
  return rill__load_f(&t, x->dtype, 0);
}

rill_status_t ops_cpu_softmax(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *x = &plan->decl->in[0];
  size_t outer = 1, inner = 1, len = x->rank ? (size_t)x->dims[plan->p.axis] : 1;
  for (int i = 0; i < x->rank; i++) {
    if (i < plan->p.axis) outer *= (size_t)x->dims[i];
    else if (i > plan->p.axis) inner *= (size_t)x->dims[i];
  }
  bool log_sm = plan->p.code == 1;
  int64_t mst[RILL_MAX_RANK] = {0};
  if (plan->decl->nin > 1) ops_broadcast_strides(&plan->decl->in[1], x, mst);
  for (size_t o = 0; o < outer; o++)
    for (size_t k = 0; k < inner; k++) {
      size_t base = o * len * inner + k;
      double m = -INFINITY, s = 0;
      for (size_t j = 0; j < len; j++) {
        double v = softmax_in(plan, in, mst, base + j * inner);
        if (v > m || isnan(v)) m = v;
      }
      if (isinf(m) && m < 0) m = 0; /* a row of -inf: exp(-inf - 0) = 0, sum 0 gives NaN as in PyTorch */
      for (size_t j = 0; j < len; j++) s += exp(softmax_in(plan, in, mst, base + j * inner) - m);
      for (size_t j = 0; j < len; j++) {
        double v = softmax_in(plan, in, mst, base + j * inner) - m;
        rill__store_f(out[0], x->dtype, base + j * inner, epilogue(plan, log_sm ? v - log(s) : exp(v) / s));
      }
    }
  return NULL;
}

rill_status_t ops_cpu_layer_norm(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  size_t inner = 1, outer = 1;
  for (int i = 0; i < x->rank; i++) {
    if (i < plan->p.axis) outer *= (size_t)x->dims[i];
    else inner *= (size_t)x->dims[i];
  }
  /* With a residual z, y first holds x + z rounded to the dtype, and is read as the input. */
  const void *src = in[0];
  if (d->nin > 3) {
    for (size_t j = 0; j < outer * inner; j++)
      rill__store_f(out[0], x->dtype, j, rill__load_f(in[0], x->dtype, j) + rill__load_f(in[3], x->dtype, j));
    src = out[0];
  }
  for (size_t o = 0; o < outer; o++) {
    size_t base = o * inner;
    double mean = 0, var = 0;
    for (size_t j = 0; j < inner; j++) mean += rill__load_f(src, x->dtype, base + j);
    mean /= (double)(inner ? inner : 1);
    for (size_t j = 0; j < inner; j++) {
      double v = rill__load_f(src, x->dtype, base + j) - mean;
      var += v * v;
    }
    var /= (double)(inner ? inner : 1);
    double r = 1.0 / sqrt(var + plan->p.eps);
    for (size_t j = 0; j < inner; j++) {
      double v = (rill__load_f(src, x->dtype, base + j) - mean) * r;
      if (d->nin > 1) v *= rill__load_f(in[1], d->in[1].dtype, j);
      if (d->nin > 2) v += rill__load_f(in[2], d->in[2].dtype, j);
      rill__store_f(out[0], x->dtype, base + j, epilogue(plan, v));
    }
  }
  return NULL;
}

rill_status_t ops_cpu_batch_norm(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *x = &plan->decl->in[0];
  size_t n = (size_t)x->dims[0], c = (size_t)x->dims[1], inner = 1;
  for (int i = 2; i < x->rank; i++) inner *= (size_t)x->dims[i];
  rill_dtype_t dt = x->dtype;
  for (size_t ch = 0; ch < c; ch++) {
    double scale = rill__load_f(in[1], dt, ch), bias = rill__load_f(in[2], dt, ch);
    double mean = rill__load_f(in[3], dt, ch), var = rill__load_f(in[4], dt, ch);
    double r = scale / sqrt(var + plan->p.eps);
    for (size_t b = 0; b < n; b++)
      for (size_t j = 0; j < inner; j++) {
        size_t at = (b * c + ch) * inner + j;
        rill__store_f(out[0], dt, at, (rill__load_f(in[0], dt, at) - mean) * r + bias);
      }
  }
  return NULL;
}

static rill_status_t matmul(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *a = &d->in[0], *b = &d->in[1], *ot = &d->out[0];
  int64_t n = a->rank >= 2 ? a->dims[a->rank - 2] : 1, k = a->dims[a->rank - 1];
  int64_t m = b->rank >= 2 ? b->dims[b->rank - 1] : 1;
  /* Batch dims of the output and each operand's batch strides (in matrices). */
  int brank = ot->rank - (a->rank >= 2) - (b->rank >= 2);
  rill_type_t bo = {ot->dtype, brank, {0}}, ba = {a->dtype, a->rank > 2 ? a->rank - 2 : 0, {0}},
              bb = {b->dtype, b->rank > 2 ? b->rank - 2 : 0, {0}};
  memcpy(bo.dims, ot->dims, sizeof(int64_t) * (size_t)brank);
  memcpy(ba.dims, a->dims, sizeof(int64_t) * (size_t)ba.rank);
  memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.rank);
  int64_t sa[RILL_MAX_RANK], sb[RILL_MAX_RANK], idx[RILL_MAX_RANK] = {0};
  ops_broadcast_strides(&ba, &bo, sa);
  ops_broadcast_strides(&bb, &bo, sb);
  size_t nb = numel_of(&bo);
  bool fl = rill__is_float(a->dtype);
  double *A = NULL, *B = NULL, *C = NULL;
  if (fl) {
    A = widen_operand(plan, in[0], a);
    B = widen_operand(plan, in[1], b);
    C = calloc(numel_of(ot) ? numel_of(ot) : 1, sizeof(double));
    if (!A || !B || !C) { free(A); free(B); free(C); return oom("matmul"); }
  }
  for (size_t bi = 0; bi < nb; bi++) {
    int64_t oa = 0, ob = 0;
    for (int i = 0; i < brank; i++) { oa += idx[i] * sa[i]; ob += idx[i] * sb[i]; }
    size_t abase = (size_t)(oa * n * k), bbase = (size_t)(ob * k * m), cbase = bi * (size_t)(n * m);
    for (int64_t i = 0; i < n; i++) {
      if (fl) {
        double *c = C + cbase + (size_t)(i * m);
        for (int64_t q = 0; q < k; q++) {
          double av = A[abase + (size_t)(i * k + q)];
          const double *br = B + bbase + (size_t)(q * m);
          for (int64_t j = 0; j < m; j++) c[j] += av * br[j];
        }
      } else {
        for (int64_t j = 0; j < m; j++) {
          uint64_t s = 0;
          for (int64_t q = 0; q < k; q++)
            s += (uint64_t)rill__load_i(in[0], a->dtype, abase + (size_t)(i * k + q)) *
                 (uint64_t)rill__load_i(in[1], b->dtype, bbase + (size_t)(q * m + j));
          rill__store_i(out[0], ot->dtype, cbase + (size_t)(i * m + j), (int64_t)s);
        }
      }
    }
    for (int i = brank - 1; i >= 0; i--) {
      if (++idx[i] < bo.dims[i]) break;
      idx[i] = 0;
    }
  }
  if (fl) narrow(out[0], ot, C);
  free(A);
  free(B);
  free(C);
  return NULL;
}

static rill_status_t linear(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0], *w = &d->in[1], *ot = &d->out[0];
  /* weight="kn": w [kin, kout], element (o, q) at q * kout + o */
  bool kn = plan->p.w_kn;
  size_t kin = (size_t)w->dims[kn ? 0 : 1], kout = (size_t)w->dims[kn ? 1 : 0], rows = kin ? numel_of(x) / kin : numel_of(ot) / (kout ? kout : 1);
  size_t so = kn ? 1 : kin, sq = kn ? kout : 1;
  bool fl = rill__is_float(x->dtype);
  if (!fl) {
    for (size_t r = 0; r < rows; r++)
      for (size_t o = 0; o < kout; o++) {
        uint64_t s = d->nin > 2 ? (uint64_t)rill__load_i(in[2], x->dtype, o) : 0;
        for (size_t q = 0; q < kin; q++)
          s += (uint64_t)rill__load_i(in[0], x->dtype, r * kin + q) * (uint64_t)rill__load_i(in[1], x->dtype, o * so + q * sq);
        rill__store_i(out[0], ot->dtype, r * kout + o, (int64_t)s);
      }
    return NULL;
  }
  /* An f32 weight is read as it lies (each element widened as it is
   * used, the same double): a model's weights are not copied per run. */
  bool wf32 = w->dtype == RILL_F32 && plan->precision != RILL_PRECISION_TF32;
  double *X = widen_operand(plan, in[0], x), *W = wf32 ? NULL : widen_operand(plan, in[1], w), *Y = malloc(nz(rows * kout) * sizeof(double));
  const float *Wf = in[1];
  double *Bv = d->nin > 2 ? widen(in[2], &d->in[2]) : NULL;
  if (!X || (!wf32 && !W) || !Y || (d->nin > 2 && !Bv)) { free(X); free(W); free(Y); free(Bv); return oom("linear"); }
#define WEL(i) (wf32 ? (double)Wf[i] : W[i])
  /* The weight read once whatever the rows (a row of w, or of w^T, used by
   * every row of x while it is in the cache): each sum still adds its
   * products in the order of q, so the rows come out as one at a time would. */
  if (kn) {
    for (size_t i = 0; i < rows * kout; i++) Y[i] = Bv ? Bv[i % kout] : 0;
    for (size_t q = 0; q < kin; q++)
      for (size_t r = 0; r < rows; r++) {
        double *yr = Y + r * kout;
        const double xv = X[r * kin + q];
        if (wf32) {
          const float *wq = Wf + q * kout;
          for (size_t o = 0; o < kout; o++) yr[o] += xv * (double)wq[o];
        } else {
          const double *wq = W + q * kout;
          for (size_t o = 0; o < kout; o++) yr[o] += xv * wq[o];
        }
      }
  } else {
    for (size_t o = 0; o < kout; o++)
      for (size_t r = 0; r < rows; r++) {
        double s = Bv ? Bv[o] : 0;
        const double *xr = X + r * kin;
        for (size_t q = 0; q < kin; q++) s += xr[q] * WEL(o * kin + q);
        Y[r * kout + o] = s;
      }
  }
#undef WEL
  narrow(out[0], ot, Y);
  free(X); free(W); free(Y); free(Bv);
  return NULL;
}

/* matmul, linear, conv2d: the activation, after the result is rounded to
 * its dtype, as a relu or gelu op after it would compute. */
static rill_status_t with_act(const ops_plan_t *plan, void *const *out, rill_status_t st) {
  if (st || plan->p.act == OPS_ACT_NONE) return st;
  const rill_type_t *ot = &plan->decl->out[0];
  ops_ewnode_t nd;
  ops_act_node(plan->p.act, ot->dtype, &nd);
  size_t n = numel_of(ot);
  const void *src[1] = {out[0]};
  for (size_t i = 0; i < n; i++) ops_ew_step(&nd, src, &ot->dtype, &i, out[0], i);
  return NULL;
}

void ops_matmul_views(const ops_plan_t *plan, rill_type_t t[3], int64_t st[3][RILL_MAX_RANK]) {
  const isa_opdecl_t *d = plan->decl;
  const int64_t (*perm)[RILL_MAX_RANK] = plan->p.mm_perm;
  for (int j = 0; j < 3; j++) {
    const rill_type_t *x = j < 2 ? &d->in[j] : &d->out[0];
    int64_t xs[RILL_MAX_RANK], acc = 1;
    for (int i = x->rank - 1; i >= 0; i--) {
      xs[i] = acc;
      acc *= x->dims[i];
    }
    t[j] = *x;
    for (int i = 0; i < x->rank; i++) {
      if (j < 2) {
        t[j].dims[i] = x->dims[perm[j][i]];
        st[j][i] = xs[perm[j][i]];
      } else { /* y = transpose(p, perm_y): p's axis perm_y[i] is y's axis i */
        t[j].dims[perm[j][i]] = x->dims[i];
        st[j][perm[j][i]] = xs[i];
      }
    }
  }
}

/* matmul with perm_a, perm_b or perm_y: the operands transposed into
 * scratch, the product of those, transposed into y. */
static rill_status_t matmul_permuted(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const int64_t (*perm)[RILL_MAX_RANK] = plan->p.mm_perm;
  rill_type_t t[3];
  int64_t strides[3][RILL_MAX_RANK];
  ops_matmul_views(plan, t, strides);
  void *buf[3];
  bool ok = true;
  for (int j = 0; j < 3; j++) ok &= (buf[j] = malloc(numel_of(&t[j]) * rill_dtype_size(t[j].dtype) + 1)) != NULL;
  rill_status_t st = ok ? NULL : oom("matmul");
  if (!st) {
    ops_permute(in[0], &d->in[0], perm[0], buf[0]);
    ops_permute(in[1], &d->in[1], perm[1], buf[1]);
    isa_opdecl_t pd = *d;
    pd.in = t;
    pd.out = &t[2];
    ops_plan_t pp = *plan;
    pp.decl = &pd;
    void *pin[2] = {buf[0], buf[1]}, *pout[1] = {buf[2]};
    st = matmul(&pp, pin, pout);
    if (!st) ops_permute(buf[2], &t[2], perm[2], out[0]);
  }
  for (int j = 0; j < 3; j++) free(buf[j]);
  return st;
}

rill_status_t ops_cpu_matmul(const ops_plan_t *plan, void *const *in, void *const *out) {
  return with_act(plan, out, plan->p.mm_permuted ? matmul_permuted(plan, in, out) : matmul(plan, in, out));
}
/* conv2d(x, w, b, z) and linear(x, w, b, z): the product and its bias
 * rounded to the dtype, then z added as an add after it would (rounded
 * again; integers wrap), then the activation. */
static rill_status_t residual(const ops_plan_t *plan, void *const *in, void *const *out, rill_status_t st) {
  if (st || !plan->p.has_residual) return st;
  /* the add op's own step (integers wrap, floats round once from double) */
  const rill_type_t *ot = &plan->decl->out[0];
  ops_ewnode_t add;
  ops_add_node(ot->dtype, &add);
  const void *src[2] = {out[0], in[3]};
  const rill_dtype_t sd[2] = {ot->dtype, ot->dtype};
  for (size_t i = 0, n = numel_of(ot); i < n; i++) ops_ew_step(&add, src, sd, (const size_t[]){i, i}, out[0], i);
  return NULL;
}
rill_status_t ops_cpu_linear(const ops_plan_t *plan, void *const *in, void *const *out) {
  return with_act(plan, out, residual(plan, in, out, linear(plan, in, out)));
}

static rill_status_t conv2d(const ops_plan_t *plan, void *const *in, void *const *out);
rill_status_t ops_cpu_conv2d(const ops_plan_t *plan, void *const *in, void *const *out) {
  return with_act(plan, out, residual(plan, in, out, conv2d(plan, in, out)));
}

static rill_status_t conv2d(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &d->in[0], *w = &d->in[1], *ot = &d->out[0];
  /* dims of x, w and y: channels, height, width (NCHW or, with nhwc, NHWC) */
  const int dc = p->nhwc ? 3 : 1, dh = p->nhwc ? 1 : 2, dw = p->nhwc ? 2 : 3;
  int64_t N = x->dims[0], C = x->dims[dc], H = x->dims[dh], W = x->dims[dw];
  int64_t O = w->dims[0], CG = w->dims[dc], KH = w->dims[dh], KW = w->dims[dw];
  int64_t OH = ot->dims[dh], OW = ot->dims[dw], G = p->groups, OG = O / G;
  /* element strides of channel, row and column */
  int64_t xsc = p->nhwc ? 1 : H * W, xsh = p->nhwc ? W * C : W, xsw = p->nhwc ? C : 1;
  int64_t wsc = p->nhwc ? 1 : KH * KW, wsh = p->nhwc ? KW * CG : KW, wsw = p->nhwc ? CG : 1;
  double *X = widen_operand(plan, in[0], x), *Wt = widen_operand(plan, in[1], w), *Y = malloc((numel_of(ot) ? numel_of(ot) : 1) * sizeof(double));
  double *Bv = p->has_bias ? widen(in[2], &d->in[2]) : NULL;
  if (!X || !Wt || !Y || (p->has_bias && !Bv)) { free(X); free(Wt); free(Y); free(Bv); return oom("conv2d"); }
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++) {
      int64_t g = o / OG;
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double s = Bv ? Bv[o] : 0;
          for (int64_t c = 0; c < CG; c++) {
            const double *xc = X + n * C * H * W + (g * CG + c) * xsc;
            const double *wc = Wt + o * CG * KH * KW + c * wsc;
            for (int64_t i = 0; i < KH; i++) {
              int64_t h = oh * p->stride[0] - p->pad[0] + i * p->dilation[0];
              if (h < 0 || h >= H) continue;
              for (int64_t j = 0; j < KW; j++) {
                int64_t ww = ow * p->stride[1] - p->pad[1] + j * p->dilation[1];
                if (ww < 0 || ww >= W) continue;
                s += xc[h * xsh + ww * xsw] * wc[i * wsh + j * wsw];
              }
            }
          }
          Y[p->nhwc ? ((n * OH + oh) * OW + ow) * O + o : ((n * O + o) * OH + oh) * OW + ow] = s;
        }
    }
  narrow(out[0], ot, Y);
  free(X); free(Wt); free(Y); free(Bv);
  return NULL;
}

/* A pool's input and output planes (one per batch and channel): the offset
 * of plane `pl`'s first element and the strides of its rows and columns. */
typedef struct { size_t planes, C; bool nhwc; } planes_t;
static void plane_at(const planes_t *pp, size_t pl, int64_t H, int64_t W, size_t *base, size_t *sh, size_t *sw) {
  if (!pp->nhwc) { *base = pl * (size_t)(H * W); *sh = (size_t)W; *sw = 1; return; }
  *base = (pl / pp->C) * (size_t)(H * W) * pp->C + pl % pp->C;
  *sh = (size_t)W * pp->C;
  *sw = pp->C;
}

rill_status_t ops_cpu_pool2d(const ops_plan_t *plan, void *const *in, void *const *out) {
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  int h = p->nhwc ? 1 : x->rank - 2;
  int64_t H = x->dims[h], W = x->dims[h + 1], OH = ot->dims[h], OW = ot->dims[h + 1];
  planes_t pp = {H * W != 0 ? numel_of(x) / (size_t)(H * W) : numel_of(ot) / nz((size_t)(OH * OW)), p->nhwc ? (size_t)x->dims[3] : 1, p->nhwc};
  bool avg = p->code == 1;
  for (size_t pl = 0; pl < pp.planes; pl++) {
    size_t xb, xh, xw, yb, yh, yw;
    plane_at(&pp, pl, H, W, &xb, &xh, &xw);
    plane_at(&pp, pl, OH, OW, &yb, &yh, &yw);
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t hs = oh * p->stride[0] - p->pad[0], ws = ow * p->stride[1] - p->pad[1];
        int64_t he = hs + p->kernel[0], we = ws + p->kernel[1];
        /* PyTorch's divisor with count_include_pad counts the window clipped to the padded input. */
        int64_t hep = he < H + p->pad[0] ? he : H + p->pad[0], wep = we < W + p->pad[1] ? we : W + p->pad[1];
        int64_t pool = (hep - hs) * (wep - ws);
        int64_t h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws, h1 = he < H ? he : H, w1 = we < W ? we : W;
        double acc = avg ? 0 : -INFINITY;
        for (int64_t i = h0; i < h1; i++)
          for (int64_t j = w0; j < w1; j++) {
            double v = rill__load_f(in[0], x->dtype, xb + (size_t)i * xh + (size_t)j * xw);
            if (avg) acc += v;
            else if (v > acc || isnan(v)) acc = isnan(acc) ? acc : v;
          }
        if (avg) {
          int64_t div = p->count_include_pad ? pool : (h1 - h0) * (w1 - w0);
          acc = div > 0 ? acc / (double)div : NAN;
        }
        rill__store_f(out[0], ot->dtype, yb + (size_t)oh * yh + (size_t)ow * yw, acc);
      }
  }
  return NULL;
}

rill_status_t ops_cpu_adaptive_pool(const ops_plan_t *plan, void *const *in, void *const *out) {
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  int h = p->nhwc ? 1 : x->rank - 2;
  int64_t H = x->dims[h], W = x->dims[h + 1], OH = ot->dims[h], OW = ot->dims[h + 1];
  planes_t pp = {numel_of(x) / (size_t)(H * W), p->nhwc ? (size_t)x->dims[3] : 1, p->nhwc};
  for (size_t pl = 0; pl < pp.planes; pl++) {
    size_t xb, xh, xw, yb, yh, yw;
    plane_at(&pp, pl, H, W, &xb, &xh, &xw);
    plane_at(&pp, pl, OH, OW, &yb, &yh, &yw);
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
        int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
        double s = 0;
        for (int64_t i = h0; i < h1; i++)
          for (int64_t j = w0; j < w1; j++) s += rill__load_f(in[0], x->dtype, xb + (size_t)i * xh + (size_t)j * xw);
        rill__store_f(out[0], ot->dtype, yb + (size_t)oh * yh + (size_t)ow * yw, s / (double)((h1 - h0) * (w1 - w0)));
      }
  }
  return NULL;
}
