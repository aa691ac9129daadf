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

/* ---- the steps of elementwise.def ---- */
static inline int64_t ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? (b & 1 ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return (int64_t)r;
}

#define L(x) ((double)(x))
static double un_f(const ops_ewnode_t *n, double a) {
  double alpha = n->alpha, lo = n->lo, hi = n->hi;
  bool has_lo = n->has_lo, has_hi = n->has_hi, gelu_tanh = n->gelu_tanh;
  (void)alpha, (void)lo, (void)hi, (void)has_lo, (void)has_hi, (void)gelu_tanh;
  switch (n->code) {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) case U_##ID: return (double)(FE);
#define EW_BINARY(ID, NAME, RES, FE, IE)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
    default: return a;
  }
}

static double bin_f(const ops_ewnode_t *n, double a, double b) {
  bool gelu_tanh = n->gelu_tanh; /* geglu */
  (void)gelu_tanh;
  switch (n->code) {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE)
#define EW_BINARY(ID, NAME, RES, FE, IE) case B_##ID: return (double)(FE);
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
    default: return 0;
  }
}
#undef L

long long ops_ew_int_bound(double v, bool up) {
  v = up ? ceil(v) : floor(v);
  return v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (long long)v;
}

#define L(x) ((long long)(x))
static int64_t un_i(const ops_ewnode_t *n, long long a) {
  long long lo = n->has_lo ? ops_ew_int_bound(n->lo, true) : 0, hi = n->has_hi ? ops_ew_int_bound(n->hi, false) : 0;
  bool has_lo = n->has_lo, has_hi = n->has_hi;
  (void)lo, (void)hi, (void)has_lo, (void)has_hi;
  switch (n->code) {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) case U_##ID: return (int64_t)(IE);
#define EW_BINARY(ID, NAME, RES, FE, IE)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
    default: return a;
  }
}

static int64_t bin_i(const ops_ewnode_t *n, long long a, long long b) {
  switch (n->code) {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE)
#define EW_BINARY(ID, NAME, RES, FE, IE) case B_##ID: return (int64_t)(IE);
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
    default: return 0;
  }
}
#undef L

/* u64: the integer expressions over unsigned long long, so that order,
 * remainders and powers are unsigned ones (the other integer dtypes fit
 * int64, where they are the same). fmod's guard against INT64_MIN % -1
 * does not apply: a % b for any b but 0. clip's bounds are clamped to
 * 0..2^64-1. */
static inline uint64_t upow(uint64_t a, uint64_t b) {
  uint64_t r = 1;
  for (; b; b >>= 1, a *= a)
    if (b & 1) r *= a;
  return r;
}

unsigned long long ops_ew_uint_bound(double v, bool up) {
  v = up ? ceil(v) : floor(v);
  return isnan(v) || v <= 0 ? 0 : v >= 1.8446744073709552e19 ? UINT64_MAX : (unsigned long long)v;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wsign-compare"
#define L(x) ((unsigned long long)(x))
#define ipow upow
static uint64_t un_u(const ops_ewnode_t *n, unsigned long long a) {
  unsigned long long lo = n->has_lo ? ops_ew_uint_bound(n->lo, true) : 0, hi = n->has_hi ? ops_ew_uint_bound(n->hi, false) : 0;
  bool has_lo = n->has_lo, has_hi = n->has_hi;
  (void)lo, (void)hi, (void)has_lo, (void)has_hi;
  switch (n->code) {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) case U_##ID: return (uint64_t)(IE);
#define EW_BINARY(ID, NAME, RES, FE, IE)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
    default: return a;
  }
}

static uint64_t bin_u(const ops_ewnode_t *n, unsigned long long a, unsigned long long b) {
  if (n->code == B_FMOD) return b == 0 ? 0 : a % b;
  switch (n->code) {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE)
#define EW_BINARY(ID, NAME, RES, FE, IE) case B_##ID: return (uint64_t)(IE);
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
    default: return 0;
  }
}
#undef ipow
#undef L
#pragma GCC diagnostic pop

void ops_ew_step(const ops_ewnode_t *n, const void *const *src, const rill_dtype_t *sd, const size_t *off, void *dst, size_t di) {
  switch (n->kind) {
    case EWK_LIT:
      if (rill__is_float(n->out)) rill__store_f(dst, n->out, di, n->f);
      else rill__store_i(dst, n->out, di, n->i);
      return;
    case EWK_WHERE: {
      int k = ((const uint8_t *)src[0])[off[0]] ? 1 : 2;
      if (rill__is_float(n->out)) rill__store_f(dst, n->out, di, rill__load_f(src[k], sd[k], off[k]));
      else rill__store_i(dst, n->out, di, rill__load_i(src[k], sd[k], off[k]));
      return;
    }
    case EWK_BINARY:
      if (rill__is_float(n->dom))
        rill__store_f(dst, n->out, di, bin_f(n, rill__load_f(src[0], sd[0], off[0]), rill__load_f(src[1], sd[1], off[1])));
      else if (n->dom == RILL_U64)
        rill__store_i(dst, n->out, di, (int64_t)bin_u(n, (uint64_t)rill__load_i(src[0], sd[0], off[0]), (uint64_t)rill__load_i(src[1], sd[1], off[1])));
      else
        rill__store_i(dst, n->out, di, bin_i(n, rill__load_i(src[0], sd[0], off[0]), rill__load_i(src[1], sd[1], off[1])));
      return;
    case EWK_UNARY:
      if (n->code == U_LOGICAL_NOT) {
        ((uint8_t *)dst)[di] = rill__load_f(src[0], sd[0], off[0]) == 0;
      } else if (n->code == U_CAST || n->code == U_COPY) {
        /* through double where either side is a float (u64 above 2^63 converts as its value) */
        if (rill__is_float(sd[0]) || rill__is_float(n->out)) rill__store_f(dst, n->out, di, rill__load_f(src[0], sd[0], off[0]));
        else rill__store_i(dst, n->out, di, rill__load_i(src[0], sd[0], off[0]));
      } else if (rill__is_float(n->dom)) {
        rill__store_f(dst, n->out, di, un_f(n, rill__load_f(src[0], sd[0], off[0])));
      } else if (n->dom == RILL_U64) {
        rill__store_i(dst, n->out, di, (int64_t)un_u(n, (uint64_t)rill__load_i(src[0], sd[0], off[0])));
      } else {
        rill__store_i(dst, n->out, di, un_i(n, rill__load_i(src[0], sd[0], off[0])));
      }
      return;
  }
}

void ops_ewnode_of(const ops_plan_t *plan, ops_ewnode_t *n) {
  ops_ewnode_init(n, plan->def, &plan->p, plan->decl->in[0].dtype, plan->decl->out[0].dtype);
}

/* unary, binary, where: one step per element, operands broadcast. */
static rill_status_t cpu_ew(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *ins[3];
  rill_dtype_t sd[3];
  for (uint32_t k = 0; k < d->nin; k++) {
    ins[k] = &d->in[k];
    sd[k] = d->in[k].dtype;
  }
  const rill_type_t *ot = &d->out[0];
  if (plan->def->cpu == ops_cpu_unary && plan->p.code == U_COPY) return ops_cpu_copy(plan, in, out);
  ops_ewnode_t node;
  ops_ewnode_of(plan, &node);
  size_t n = numel_of(ot);
  iter_t it;
  iter_init(&it, ot, ins, (int)d->nin);
  bool f32 = node.dom == RILL_F32 && ot->dtype == RILL_F32 && node.kind != EWK_WHERE;
  for (uint32_t k = 0; k < d->nin; k++) f32 &= sd[k] == RILL_F32;
  if (f32 && node.kind == EWK_UNARY && node.code != U_CAST && node.code != U_COPY) {
    /* The common f32 case without the per-element dtype dispatch (the same bits). */
    const float *x = in[0];
    float *y = out[0];
    for (size_t i = 0; i < n; i++) y[i] = (float)un_f(&node, x[i]);
    return NULL;
  }
  if (f32 && node.kind == EWK_BINARY) {
    const float *a = in[0], *b = in[1];
    float *y = out[0];
    for (size_t i = 0; i < n; i++, iter_next(&it)) y[i] = (float)bin_f(&node, a[it.off[0]], b[it.off[1]]);
    return NULL;
  }
  for (size_t i = 0; i < n; i++, iter_next(&it)) {
    size_t off[3] = {(size_t)it.off[0], (size_t)it.off[1], (size_t)it.off[2]};
    ops_ew_step(&node, (const void *const *)in, sd, off, out[0], i);
  }
  return NULL;
}

rill_status_t ops_cpu_unary(const ops_plan_t *plan, void *const *in, void *const *out) { return cpu_ew(plan, in, out); }
rill_status_t ops_cpu_binary(const ops_plan_t *plan, void *const *in, void *const *out) { return cpu_ew(plan, in, out); }
rill_status_t ops_cpu_where(const ops_plan_t *plan, void *const *in, void *const *out) { return cpu_ew(plan, in, out); }

/* Every node of fp at one element, in order, into tmp: operand k is
 * element off[k] of in[k] (dtype ind[k]); each node's value rounded to its
 * dtype, as the ops one by one would. */
static void fused_element(const ops_fused_t *fp, const void *const *in, const rill_dtype_t *ind, const size_t *off, uint64_t *tmp) {
  for (uint32_t j = 0; j < fp->nnodes; j++) {
    const ops_ewnode_t *nd = &fp->node[j];
    const void *src[3];
    rill_dtype_t sd[3];
    size_t so[3] = {0, 0, 0};
    int na = nd->kind == EWK_LIT ? 0 : nd->kind == EWK_UNARY ? 1 : nd->kind == EWK_BINARY ? 2 : 3;
    for (int k = 0; k < na; k++) {
      int32_t a = nd->arg[k];
      if (a >= 0) {
        src[k] = &tmp[a];
        sd[k] = fp->node[a].out;
      } else {
        src[k] = in[-1 - a];
        sd[k] = ind[-1 - a];
        so[k] = off[-1 - a];
      }
    }
    ops_ew_step(nd, src, sd, so, &tmp[j], 0);
  }
}

double ops_fused_apply(const ops_fused_t *fp, rill_dtype_t d, const double *v, uint32_t n) {
  uint64_t x[2] = {0, 0}, tmp[OPS_FUSED_MAX_NODES];
  size_t off[2] = {0, 0};
  rill_dtype_t ds[2] = {d, d};
  const void *in[2] = {&x[0], &x[1]};
  for (uint32_t k = 0; k < n && k < 2; k++) rill__store_f(&x[k], d, 0, v[k]);
  fused_element(fp, in, ds, off, tmp);
  return rill__load_f(&tmp[fp->out[0]], fp->node[fp->out[0]].out, 0);
}

/* A fused group: every node at each element of the group's shape. */
rill_status_t ops_cpu_fused(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const ops_fused_t *fp = plan->fused;
  const rill_type_t *ot = &d->out[0];
  size_t n = numel_of(ot);
  int64_t st[OPS_FUSED_MAX_IN][RILL_MAX_RANK], idx[RILL_MAX_RANK] = {0};
  size_t off[OPS_FUSED_MAX_IN] = {0};
  rill_dtype_t ind[OPS_FUSED_MAX_IN];
  for (uint32_t k = 0; k < d->nin; k++) {
    ops_fused_strides(fp, k, &d->in[k], ot, st[k]);
    ind[k] = d->in[k].dtype;
  }
  uint64_t tmp[OPS_FUSED_MAX_NODES];
  for (size_t i = 0; i < n; i++) {
    fused_element(fp, (const void *const *)in, ind, off, tmp);
    for (uint32_t o = 0; o < fp->nout; o++) {
      size_t es = rill_dtype_size(d->out[o].dtype);
      memcpy((uint8_t *)out[o] + i * es, &tmp[fp->out[o]], es);
    }
    for (int dd = ot->rank - 1; dd >= 0; dd--) {
      for (uint32_t k = 0; k < d->nin; k++) off[k] += (size_t)st[k][dd];
      if (++idx[dd] < ot->dims[dd]) break;
      for (uint32_t k = 0; k < d->nin; k++) off[k] -= (size_t)(st[k][dd] * ot->dims[dd]);
      idx[dd] = 0;
    }
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

/* One row of the permuted output: n elements of size es, the input read
 * every `st` elements from x (a loop per element size, so that each move
 * is one load and one store; memcpy of a constant size, so any alignment). */
#define PERMUTE_ROW(E) \
  for (int64_t j = 0; j < n; j++) memcpy(y + (size_t)j * (E), x + (size_t)(j * st) * (E), (E))
static void permute_row(uint8_t *y, const uint8_t *x, int64_t n, int64_t st, size_t es) {
  switch (es) {
  case 1: PERMUTE_ROW(1); break;
  case 2: PERMUTE_ROW(2); break;
  case 4: PERMUTE_ROW(4); break;
  case 8: PERMUTE_ROW(8); break;
  default: PERMUTE_ROW(es);
  }
}
#undef PERMUTE_ROW

void ops_permute(const void *x, const rill_type_t *xt, const int64_t *perm, void *y) {
  int64_t xs[RILL_MAX_RANK];
  row_strides(xt, xs);
  size_t n = numel_of(xt), es = rill_dtype_size(xt->dtype);
  if (!n) return;
  if (xt->rank == 0) {
    memcpy(y, x, es);
    return;
  }
  /* View the input through the permutation: output dim i walks input dim
   * perm[i]; rows along the last output dim, the iterator over the rest. */
  int r = xt->rank;
  int64_t row = xt->dims[perm[r - 1]], st = xs[perm[r - 1]];
  iter_t it;
  memset(&it, 0, sizeof it);
  it.rank = r - 1;
  it.n = 1;
  for (int i = 0; i < r - 1; i++) {
    it.dims[i] = xt->dims[perm[i]];
    it.st[0][i] = xs[perm[i]];
  }
  for (size_t i = 0; i < n; i += (size_t)row, iter_next(&it))
    permute_row((uint8_t *)y + i * es, (const uint8_t *)x + (size_t)it.off[0] * es, row, st, es);
}

rill_status_t ops_cpu_transpose(const ops_plan_t *plan, void *const *in, void *const *out) {
  ops_permute(in[0], &plan->decl->in[0], plan->p.perm, out[0]);
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
