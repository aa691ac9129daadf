/* cpu_elementwise.c: CPU reference kernels for elementwise and data-movement ops.
 *
 * Float arithmetic happens in double and is rounded once to the result
 * dtype (so f16 and bf16 are computed at least as wide as f32); integer
 * arithmetic happens in int64 with two's-complement wrapping, as PyTorch's
 * integer tensors do.
 */
#include <math.h>
#include <stdlib.h>

#include "ops.h"

void ops_broadcast_strides(const rill_type_t *t, const rill_type_t *out, int64_t *strides) {
  int64_t s = 1;
  int off = out->rank - t->rank;
  for (int i = out->rank - 1; i >= 0; i--) {
    int j = i - off;
    if (j < 0 || t->dims[j] == 1) {
      strides[i] = 0;
    } else {
      strides[i] = s;
    }
    if (j >= 0) s *= t->dims[j];
  }
}

/* Walks the elements of `out` in row-major order, keeping an element offset
 * into each of up to three inputs. */
typedef struct iter {
  int rank, n;
  int64_t dims[RILL_MAX_RANK], idx[RILL_MAX_RANK], st[3][RILL_MAX_RANK], off[3];
} iter_t;

static void iter_init(iter_t *it, const rill_type_t *out, const rill_type_t *const *ins, int n) {
  memset(it, 0, sizeof *it);
  it->rank = out->rank;
  it->n = n;
  memcpy(it->dims, out->dims, sizeof(int64_t) * (size_t)out->rank);
  for (int k = 0; k < n; k++) ops_broadcast_strides(ins[k], out, it->st[k]);
}

static inline void iter_next(iter_t *it) {
  for (int d = it->rank - 1; d >= 0; d--) {
    for (int k = 0; k < it->n; k++) it->off[k] += it->st[k][d];
    if (++it->idx[d] < it->dims[d]) return;
    for (int k = 0; k < it->n; k++) it->off[k] -= it->st[k][d] * it->dims[d];
    it->idx[d] = 0;
  }
}

static size_t numel_of(const rill_type_t *t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

static double gelu(double x, bool tanh_approx) {
  if (tanh_approx) return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + erf(x * 0.7071067811865476));
}

static double un_f(const ops_params_t *p, double x) {
  switch (p->code) {
    case U_NEG: return -x;
    case U_ABS: return fabs(x);
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0 / sqrt(x);
    case U_RECIPROCAL: return 1.0 / x;
    case U_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case U_TANH: return tanh(x);
    case U_RELU: return isnan(x) ? x : x > 0 ? x : 0.0;
    case U_SILU: return x / (1.0 + exp(-x));
    case U_ERF: return erf(x);
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_GELU: return gelu(x, p->gelu_tanh);
    case U_LEAKY_RELU: return x >= 0 ? x : x * p->alpha;
    case U_CLIP:
      /* torch.clamp: NaN stays NaN; with min > max the result is max. */
      if (isnan(x)) return x;
      if (p->has_lo && x < p->lo) x = p->lo;
      if (p->has_hi && x > p->hi) x = p->hi;
      return x;
    default: return x;
  }
}

static int64_t un_i(const ops_params_t *p, int64_t x) {
  switch (p->code) {
    case U_NEG: return (int64_t)(0 - (uint64_t)x);
    case U_ABS: return x < 0 ? (int64_t)(0 - (uint64_t)x) : x;
    case U_RELU: return x > 0 ? x : 0;
    case U_CLIP:
      if (p->has_lo && (double)x < p->lo) x = (int64_t)ceil(p->lo);
      if (p->has_hi && (double)x > p->hi) x = (int64_t)floor(p->hi);
      return x;
    default: return x; /* floor, ceil and copies of integers are the identity */
  }
}

rill_status_t ops_cpu_unary(const ops_plan_t *plan, void *const *in, void *const *out) {
  const ops_params_t *p = &plan->p;
  rill_dtype_t di = plan->decl->in[0].dtype, dout = plan->decl->out[0].dtype;
  size_t n = numel_of(&plan->decl->out[0]);
  const void *x = in[0];
  void *y = out[0];
  if (p->code == U_COPY) {
    memcpy(y, x, n * rill_dtype_size(dout));
  } else if (p->code == U_LOGICAL_NOT) {
    for (size_t i = 0; i < n; i++) ((uint8_t *)y)[i] = rill__load_f(x, di, i) == 0;
  } else if (p->code == U_CAST) {
    if (rill__is_float(di))
      for (size_t i = 0; i < n; i++) rill__store_f(y, dout, i, rill__load_f(x, di, i));
    else
      for (size_t i = 0; i < n; i++) rill__store_i(y, dout, i, rill__load_i(x, di, i));
  } else if (rill__is_float(di)) {
    if (di == RILL_F32) {
      const float *xf = x;
      float *yf = y;
      for (size_t i = 0; i < n; i++) yf[i] = (float)un_f(p, xf[i]);
    } else {
      for (size_t i = 0; i < n; i++) rill__store_f(y, dout, i, un_f(p, rill__load_f(x, di, i)));
    }
  } else {
    for (size_t i = 0; i < n; i++) rill__store_i(y, dout, i, un_i(p, rill__load_i(x, di, i)));
  }
  return NULL;
}

/* Comparisons and logic read the same in the float and integer domains. */
#define COMPARISONS(a, b)                        \
  case B_EQ: return (a) == (b);                  \
  case B_NE: return (a) != (b);                  \
  case B_LT: return (a) < (b);                   \
  case B_LE: return (a) <= (b);                  \
  case B_GT: return (a) > (b);                   \
  case B_GE: return (a) >= (b);                  \
  case B_LOGICAL_AND: return (a) != 0 && (b) != 0; \
  case B_LOGICAL_OR: return (a) != 0 || (b) != 0;

static double bin_f(int code, double a, double b) {
  switch (code) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return pow(a, b);
    case B_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case B_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    COMPARISONS(a, b)
    default: return 0;
  }
}

static int64_t ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return (int64_t)r;
}

static int64_t bin_i(int code, int64_t a, int64_t b) {
  switch (code) {
    case B_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case B_SUB: return (int64_t)((uint64_t)a - (uint64_t)b);
    case B_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case B_POW: return ipow(a, b);
    case B_MAXIMUM: return a > b ? a : b;
    case B_MINIMUM: return a < b ? a : b;
    COMPARISONS(a, b)
    default: return 0;
  }
}

rill_status_t ops_cpu_binary(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *ins[2] = {&d->in[0], &d->in[1]};
  const rill_type_t *ot = &d->out[0];
  rill_dtype_t da = d->in[0].dtype, db = d->in[1].dtype, dout = ot->dtype;
  int code = plan->p.code;
  size_t n = numel_of(ot);
  iter_t it;
  iter_init(&it, ot, ins, 2);
  if (rill__is_float(plan->p.compute)) {
    /* Fast path for the common f32 case. */
    if (da == RILL_F32 && db == RILL_F32 && dout == RILL_F32) {
      const float *a = in[0], *b = in[1];
      float *y = out[0];
      for (size_t i = 0; i < n; i++, iter_next(&it)) y[i] = (float)bin_f(code, a[it.off[0]], b[it.off[1]]);
      return NULL;
    }
    for (size_t i = 0; i < n; i++, iter_next(&it))
      rill__store_f(out[0], dout, i,
                    bin_f(code, rill__load_f(in[0], da, (size_t)it.off[0]), rill__load_f(in[1], db, (size_t)it.off[1])));
  } else {
    for (size_t i = 0; i < n; i++, iter_next(&it))
      rill__store_i(out[0], dout, i,
                    bin_i(code, rill__load_i(in[0], da, (size_t)it.off[0]), rill__load_i(in[1], db, (size_t)it.off[1])));
  }
  return NULL;
}

rill_status_t ops_cpu_where(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *ins[3] = {&d->in[0], &d->in[1], &d->in[2]};
  const rill_type_t *ot = &d->out[0];
  size_t n = numel_of(ot);
  iter_t it;
  iter_init(&it, ot, ins, 3);
  bool fl = rill__is_float(ot->dtype);
  for (size_t i = 0; i < n; i++, iter_next(&it)) {
    int k = ((const uint8_t *)in[0])[it.off[0]] ? 1 : 2;
    if (fl) rill__store_f(out[0], ot->dtype, i, rill__load_f(in[k], d->in[k].dtype, (size_t)it.off[k]));
    else rill__store_i(out[0], ot->dtype, i, rill__load_i(in[k], d->in[k].dtype, (size_t)it.off[k]));
  }
  return NULL;
}

rill_status_t ops_cpu_copy(const ops_plan_t *plan, void *const *in, void *const *out) {
  size_t bytes;
  rill__type_sizes(&plan->decl->out[0], NULL, &bytes);
  if (bytes) memcpy(out[0], in[0], bytes);
  return NULL;
}

rill_status_t ops_cpu_broadcast(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *ot = &plan->decl->out[0];
  const rill_type_t *ins[1] = {&plan->decl->in[0]};
  size_t n = numel_of(ot), es = rill_dtype_size(ot->dtype);
  iter_t it;
  iter_init(&it, ot, ins, 1);
  for (size_t i = 0; i < n; i++, iter_next(&it))
    memcpy((uint8_t *)out[0] + i * es, (const uint8_t *)in[0] + (size_t)it.off[0] * es, es);
  return NULL;
}

static void row_strides(const rill_type_t *t, int64_t *s) {
  int64_t acc = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= t->dims[i];
  }
}

rill_status_t ops_cpu_transpose(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  int64_t xs[RILL_MAX_RANK];
  row_strides(x, xs);
  /* View the input through the permutation: output dim i walks input dim perm[i]. */
  rill_type_t view = *ot;
  iter_t it;
  memset(&it, 0, sizeof it);
  it.rank = ot->rank;
  it.n = 1;
  memcpy(it.dims, view.dims, sizeof(int64_t) * (size_t)ot->rank);
  for (int i = 0; i < ot->rank; i++) it.st[0][i] = xs[plan->p.perm[i]];
  size_t n = numel_of(ot), es = rill_dtype_size(ot->dtype);
  for (size_t i = 0; i < n; i++, iter_next(&it))
    memcpy((uint8_t *)out[0] + i * es, (const uint8_t *)in[0] + (size_t)it.off[0] * es, es);
  return NULL;
}

/* Copies n elements converting dtypes when they differ. */
static void convert(void *dst, rill_dtype_t dd, size_t doff, const void *src, rill_dtype_t sd,
                    size_t soff, size_t n) {
  if (dd == sd) {
    size_t es = rill_dtype_size(dd);
    memcpy((uint8_t *)dst + doff * es, (const uint8_t *)src + soff * es, n * es);
  } else if (rill__is_float(sd) || rill__is_float(dd)) {
    for (size_t i = 0; i < n; i++) rill__store_f(dst, dd, doff + i, rill__load_f(src, sd, soff + i));
  } else {
    for (size_t i = 0; i < n; i++) rill__store_i(dst, dd, doff + i, rill__load_i(src, sd, soff + i));
  }
}

static void outer_inner(const rill_type_t *t, int64_t axis, size_t *outer, size_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < t->rank; i++) {
    if (i < axis) *outer *= (size_t)t->dims[i];
    else if (i > axis) *inner *= (size_t)t->dims[i];
  }
}

rill_status_t ops_cpu_concat(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *ot = &d->out[0];
  size_t outer, inner;
  outer_inner(ot, plan->p.axis, &outer, &inner);
  size_t orow = (size_t)ot->dims[plan->p.axis] * inner;
  size_t pos = 0;
  for (uint32_t k = 0; k < d->nin; k++) {
    size_t row = (size_t)d->in[k].dims[plan->p.axis] * inner;
    for (size_t o = 0; o < outer; o++) convert(out[0], ot->dtype, o * orow + pos, in[k], d->in[k].dtype, o * row, row);
    pos += row;
  }
  return NULL;
}

rill_status_t ops_cpu_split(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  size_t outer, inner;
  outer_inner(x, plan->p.axis, &outer, &inner);
  size_t xrow = (size_t)x->dims[plan->p.axis] * inner, es = rill_dtype_size(x->dtype), pos = 0;
  for (uint32_t k = 0; k < d->nout; k++) {
    size_t row = (size_t)plan->p.sizes[k] * inner;
    for (size_t o = 0; o < outer; o++)
      memcpy((uint8_t *)out[k] + o * row * es, (const uint8_t *)in[0] + (o * xrow + pos) * es, row * es);
    pos += row;
  }
  return NULL;
}

rill_status_t ops_cpu_slice(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  int64_t xs[RILL_MAX_RANK];
  row_strides(x, xs);
  iter_t it;
  memset(&it, 0, sizeof it);
  it.rank = ot->rank;
  it.n = 1;
  memcpy(it.dims, ot->dims, sizeof(int64_t) * (size_t)ot->rank);
  int64_t base = 0;
  for (int i = 0; i < ot->rank; i++) {
    it.st[0][i] = xs[i] * plan->p.steps[i];
    base += xs[i] * plan->p.starts[i];
  }
  it.off[0] = base;
  size_t n = numel_of(ot), es = rill_dtype_size(ot->dtype);
  for (size_t i = 0; i < n; i++, iter_next(&it))
    memcpy((uint8_t *)out[0] + i * es, (const uint8_t *)in[0] + (size_t)it.off[0] * es, es);
  return NULL;
}

rill_status_t ops_cpu_pad(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  int64_t xs[RILL_MAX_RANK], idx[RILL_MAX_RANK] = {0};
  row_strides(x, xs);
  size_t n = numel_of(ot), es = rill_dtype_size(ot->dtype);
  uint8_t fill[8];
  rill__store_f(fill, ot->dtype, 0, plan->p.value);
  for (size_t i = 0; i < n; i++) {
    int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < ot->rank; d++) {
      int64_t s = idx[d] - plan->p.pads[d];
      if (s < 0 || s >= x->dims[d]) { inside = false; break; }
      off += s * xs[d];
    }
    memcpy((uint8_t *)out[0] + i * es, inside ? (const uint8_t *)in[0] + (size_t)off * es : fill, es);
    for (int d = ot->rank - 1; d >= 0; d--) {
      if (++idx[d] < ot->dims[d]) break;
      idx[d] = 0;
    }
  }
  return NULL;
}

rill_status_t ops_cpu_gather(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  size_t outer, inner;
  outer_inner(x, plan->p.axis, &outer, &inner);
  int64_t dim = x->dims[plan->p.axis], nidx = d->in[1].dims[0];
  size_t es = rill_dtype_size(x->dtype);
  for (int64_t j = 0; j < nidx; j++) {
    int64_t k = rill__load_i(in[1], d->in[1].dtype, (size_t)j);
    if (k < 0 || k >= dim)
      return rill__status(RILL_RUNTIME_ERROR, "gather: index %lld at position %lld is out of range for a dimension of size %lld",
                          (long long)k, (long long)j, (long long)dim);
  }
  for (size_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < nidx; j++) {
      int64_t k = rill__load_i(in[1], d->in[1].dtype, (size_t)j);
      memcpy((uint8_t *)out[0] + ((o * (size_t)nidx + (size_t)j) * inner) * es,
             (const uint8_t *)in[0] + ((o * (size_t)dim + (size_t)k) * inner) * es, inner * es);
    }
  return NULL;
}
