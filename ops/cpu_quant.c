/* cpu_quant.c: the CPU reference of the quantized products `qmatmul` and
 * `qconv2d` (docs/internals.md, "Quantized products"), in exact integer
 * arithmetic, equal bit for bit to the core-op lowerings of
 * import/onnx_quant.c that they replace:
 *
 *   sum  = the products of (x - x_zp) and (w - w_zp), summed exactly (a
 *          padded position of qconv2d contributes 0);
 *   acc  = sum as i32: wrapped (qmatmul, the integer matmul's i32) or
 *          saturated (qconv2d, whose lowering sums in f64 and casts);
 *          plus the bias, wrapping (the i32 add);
 *   then, with a scale s (its element for the output's column or channel),
 *   r = acc * s in f64, made max(r, +0) by activation="relu" (NaN kept):
 *     no zero point:       y = r, stored in the float dtype;
 *     a zero point z:      y = sat(round(r + z)), in f64 (QLinearConv,
 *                          QLinearMatMul: the zero point before rounding);
 *     and y_scale (QDQ):   t = (C)r / (C)y_scale in C, the scale's
 *                          float type (f32, or f64 for an f64 scale), then
 *                          y = sat(round(t) + z) in C (QuantizeLinear: the
 *                          zero point after rounding).
 * round() is the importer's round half to even as its core ops compute it
 * (floor(x + 0.5), a tie at an odd result taken one down, |x| beyond the
 * type's integers kept), each step rounded to the type it runs in, so the
 * results are the lowering's where x + 0.5 rounds too. No FMA: each
 * product and sum is rounded on its own, as the lowering's ops do. */
#include <math.h>

#include "ops.h"

/* The importer's round half to even (imp_round_even), in f32 or f64. */
static double round_even_as(double x, bool f32) {
  if (f32) {
    float xf = (float)x;
    float r = floorf((float)((double)xf + 0.5));
    bool tie = (float)((double)r - (double)xf) == 0.5f;
    float half = floorf((float)((double)r * 0.5));
    bool odd = (float)((double)r - (double)(float)((double)half * 2.0)) != 0.0f;
    float res = tie && odd ? (float)((double)r - 1.0) : r;
    return fabsf(xf) >= 8388608.0f ? xf : res;
  }
  double r = floor(x + 0.5);
  bool tie = r - x == 0.5;
  double half = floor(r * 0.5);
  bool odd = r - half * 2.0 != 0.0;
  double res = tie && odd ? r - 1.0 : r;
  return fabs(x) >= 4503599627370496.0 ? x : res;
}

void ops_quant_store(const ops_plan_t *plan, int32_t acc, double sc, int32_t yzp, void *y, size_t i) {
  const ops_params_t *p = &plan->p;
  rill_dtype_t d = plan->decl->out[0].dtype;
  if (p->q.scale < 0) {
    ((int32_t *)y)[i] = acc;
    return;
  }
  volatile double r = (double)acc * sc; /* volatile: never contracted into an FMA with the add below */
  if (p->act == OPS_ACT_RELU && !(r > 0) && r == r) r = 0; /* relu: +0 for 0 and below, NaN kept, as the core op */
  if (p->q.yzp < 0) {
    rill__store_f(y, d, i, r);
    return;
  }
  double v;
  if (!p->q.has_ys) {
    v = round_even_as(r + (double)yzp, false);
  } else if (plan->decl->in[p->q.scale].dtype == RILL_F64) {
    v = round_even_as(r / p->q.y_scale, false) + (double)yzp;
  } else {
    float t = (float)((double)(float)r / (double)(float)p->q.y_scale);
    v = (float)(round_even_as(t, true) + (double)yzp);
  }
  rill__store_f(y, d, i, v); /* saturates (clip, then the cast), NaN to 0 */
}

static size_t numel(const rill_type_t *t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

/* Element k of a one-value-or-[n] operand, as an integer. */
static int64_t at_i(const rill_type_t *t, const void *v, int64_t k) { return rill__load_i(v, t->dtype, numel(t) == 1 ? 0 : (size_t)k); }

rill_status_t ops_cpu_qmatmul(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const ops_params_t *p = &plan->p;
  const rill_type_t *at = &d->in[0], *bt = &d->in[1], *yt = &d->out[0];
  int r = yt->rank;
  int64_t M = yt->dims[r - 2], N = yt->dims[r - 1], K = at->dims[at->rank - 1];
  /* batch strides (in matrices) of a and b over the result's batch dims, 0 where they broadcast */
  rill_type_t yb = {yt->dtype, r - 2, {0}}, ab = {at->dtype, at->rank - 2, {0}}, bb = {bt->dtype, bt->rank - 2, {0}};
  for (int i = 0; i < r - 2; i++) yb.dims[i] = yt->dims[i];
  for (int i = 0; i < ab.rank; i++) ab.dims[i] = at->dims[i];
  for (int i = 0; i < bb.rank; i++) bb.dims[i] = bt->dims[i];
  int64_t as[RILL_MAX_RANK], bs[RILL_MAX_RANK];
  ops_broadcast_strides(&ab, &yb, as);
  ops_broadcast_strides(&bb, &yb, bs);
  size_t nb = numel(&yb);
  const rill_type_t *st = p->q.scale >= 0 ? &d->in[p->q.scale] : NULL;
  int32_t yzp = p->q.yzp >= 0 ? (int32_t)rill__load_i(in[p->q.yzp], d->in[p->q.yzp].dtype, 0) : 0;
  for (size_t bi = 0; bi < nb; bi++) {
    int64_t ao = 0, bo = 0;
    size_t rem = bi;
    for (int i = r - 3; i >= 0; i--) {
      int64_t ix = (int64_t)(rem % (size_t)yb.dims[i]);
      rem /= (size_t)yb.dims[i];
      ao += ix * as[i];
      bo += ix * bs[i];
    }
    ao *= M * K;
    bo *= K * N;
    for (int64_t m = 0; m < M; m++) {
      int64_t za = at_i(&d->in[2], in[2], m);
      for (int64_t n = 0; n < N; n++) {
        int64_t zb = at_i(&d->in[3], in[3], n), s = 0;
        for (int64_t k = 0; k < K; k++)
          s += (rill__load_i(in[0], at->dtype, (size_t)(ao + m * K + k)) - za) * (rill__load_i(in[1], bt->dtype, (size_t)(bo + k * N + n)) - zb);
        uint32_t acc = (uint32_t)s;
        if (p->q.bias >= 0) acc += (uint32_t)((const int32_t *)in[p->q.bias])[n];
        double sc = 0;
        if (st) {
          /* the scale broadcast to [M, N] */
          size_t si = 0;
          if (st->rank == 2) si = (size_t)((st->dims[0] == 1 ? 0 : m) * st->dims[1] + (st->dims[1] == 1 ? 0 : n));
          else if (st->rank == 1 && st->dims[0] != 1) si = (size_t)n;
          sc = rill__load_f(in[p->q.scale], st->dtype, si);
        }
        ops_quant_store(plan, (int32_t)acc, sc, yzp, out[0], bi * (size_t)(M * N) + (size_t)(m * N + n));
      }
    }
  }
  return NULL;
}

rill_status_t ops_cpu_qconv2d(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const ops_params_t *p = &plan->p;
  const rill_type_t *xt = &d->in[0], *wt = &d->in[1], *yt = &d->out[0];
  int64_t N = xt->dims[0], C = xt->dims[1], H = xt->dims[2], W = xt->dims[3];
  int64_t O = wt->dims[0], CG = wt->dims[1], KH = wt->dims[2], KW = wt->dims[3];
  int64_t OH = yt->dims[2], OW = yt->dims[3], OG = O / p->groups;
  int64_t xz = rill__load_i(in[2], xt->dtype, 0);
  const rill_type_t *st = p->q.scale >= 0 ? &d->in[p->q.scale] : NULL;
  int32_t yzp = p->q.yzp >= 0 ? (int32_t)rill__load_i(in[p->q.yzp], d->in[p->q.yzp].dtype, 0) : 0;
  size_t i = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < O; o++) {
      int64_t g = o / OG, wz = at_i(&d->in[3], in[3], o);
      double sc = st ? rill__load_f(in[p->q.scale], st->dtype, numel(st) == 1 ? 0 : (size_t)o) : 0;
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++, i++) {
          int64_t s = 0;
          for (int64_t c = 0; c < CG; c++)
            for (int64_t kh = 0; kh < KH; kh++) {
              int64_t ih = oh * p->stride[0] - p->pad[0] + kh * p->dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; kw++) {
                int64_t iw = ow * p->stride[1] - p->pad[1] + kw * p->dilation[1];
                if (iw < 0 || iw >= W) continue;
                int64_t xv = rill__load_i(in[0], xt->dtype, (size_t)(((n * C + g * CG + c) * H + ih) * W + iw));
                int64_t wv = rill__load_i(in[1], wt->dtype, (size_t)(((o * CG + c) * KH + kh) * KW + kw));
                s += (xv - xz) * (wv - wz);
              }
            }
          int32_t acc = s > INT32_MAX ? INT32_MAX : s < INT32_MIN ? INT32_MIN : (int32_t)s;
          if (p->q.bias >= 0) acc = (int32_t)((uint32_t)acc + (uint32_t)((const int32_t *)in[p->q.bias])[o]);
          ops_quant_store(plan, acc, sc, yzp, out[0], i);
        }
    }
  return NULL;
}
