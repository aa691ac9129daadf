/* cpu_index.c: the CPU references of the indexing ops (docs/internals.md,
 * "Indexing ops"): scatter_nd, which copies its operand and then applies
 * each index tuple's slice of updates in order (combining in the compute
 * type and rounding at each store, as the CUDA kernel's atomics do), and
 * topk, a stable sort of each row by value (NaN the largest, equal values
 * by index). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

static rill_status_t oom(const char *op) { return rill__status(RILL_OUT_OF_MEMORY, "%s: out of host memory for the reference kernel", op); }

static bool is_flt(rill_dtype_t d) { return d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64; }

static double comb_f(int r, double a, double b) {
  switch (r) {
    case OPS_SCATTER_ADD: return a + b;
    case OPS_SCATTER_MUL: return a * b;
    case OPS_SCATTER_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case OPS_SCATTER_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    default: return b;
  }
}

static int64_t comb_i(int r, int64_t a, int64_t b) {
  switch (r) {
    case OPS_SCATTER_ADD: return (int64_t)((uint64_t)a + (uint64_t)b);
    case OPS_SCATTER_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case OPS_SCATTER_MAX: return a > b ? a : b;
    case OPS_SCATTER_MIN: return a < b ? a : b;
    default: return b;
  }
}

rill_status_t ops_cpu_scatter_nd(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *xt = &plan->decl->in[0], *it = &plan->decl->in[1];
  rill_dtype_t d = xt->dtype;
  size_t es = rill_dtype_size(d), n = rill_type_numel(xt);
  if (out[0] != in[0] && n) memcpy(out[0], in[0], n * es);
  int k = (int)it->dims[it->rank - 1];
  size_t nt = k ? rill_type_numel(it) / (size_t)k : 0, slice = 1;
  for (int a = k; a < xt->rank; a++) slice *= (size_t)xt->dims[a];
  int64_t st[RILL_MAX_RANK];
  for (int a = xt->rank - 1; a >= 0; a--) st[a] = a == xt->rank - 1 ? 1 : st[a + 1] * xt->dims[a + 1];
  int r = plan->p.ix.reduction;
  bool flt = is_flt(d);
  for (size_t t = 0; t < nt; t++) {
    int64_t off = 0;
    for (int a = 0; a < k; a++) {
      int64_t v = rill__load_i(in[1], it->dtype, t * (size_t)k + (size_t)a), dim = xt->dims[a];
      if (v < -dim || v >= dim) return rill__status(RILL_RUNTIME_ERROR, "scatter_nd: index %lld out of range for dim %d of size %lld", (long long)v, a, (long long)dim);
      off += (v < 0 ? v + dim : v) * st[a];
    }
    for (size_t e = 0; e < slice; e++) {
      size_t o = (size_t)off + e, ui = t * slice + e;
      if (r == OPS_SCATTER_NONE) memcpy((char *)out[0] + o * es, (const char *)in[2] + ui * es, es);
      else if (flt) rill__store_f(out[0], d, o, comb_f(r, rill__load_f(out[0], d, o), rill__load_f(in[2], d, ui)));
      else if (r == OPS_SCATTER_MAX || r == OPS_SCATTER_MIN) /* compared in value order (u64) */
        rill__store_i(out[0], d, o, rill__ord_i(d, comb_i(r, rill__ord_i(d, rill__load_i(out[0], d, o)), rill__ord_i(d, rill__load_i(in[2], d, ui)))));
      else rill__store_i(out[0], d, o, comb_i(r, rill__load_i(out[0], d, o), rill__load_i(in[2], d, ui)));
    }
  }
  return NULL;
}

/* Whether row element i comes before j: the larger (smaller) value, NaN the
 * largest, equal values by index. */
typedef struct tk_row {
  const double *f;
  const int64_t *i;
  bool largest;
} tk_row_t;

static bool tk_before(const tk_row_t *r, int64_t a, int64_t b) {
  int c;
  if (r->f) {
    double x = r->f[a], y = r->f[b];
    bool nx = isnan(x), ny = isnan(y);
    c = nx || ny ? (nx && ny ? 0 : nx ? 1 : -1) : x > y ? 1 : x < y ? -1 : 0;
  } else {
    c = r->i[a] > r->i[b] ? 1 : r->i[a] < r->i[b] ? -1 : 0;
  }
  if (!r->largest) c = -c;
  return c > 0 || (c == 0 && a < b);
}

/* a stable merge sort of idx[0..n) by tk_before, tmp the scratch */
static void tk_sort(const tk_row_t *r, int64_t *idx, int64_t *tmp, int64_t n) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, o = lo;
      while (i < mid && j < hi) tmp[o++] = tk_before(r, idx[j], idx[i]) ? idx[j++] : idx[i++];
      while (i < mid) tmp[o++] = idx[i++];
      while (j < hi) tmp[o++] = idx[j++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
  }
}

rill_status_t ops_cpu_topk(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *xt = &plan->decl->in[0];
  rill_dtype_t d = xt->dtype;
  int64_t ax = plan->p.axis, n = xt->dims[ax], k = plan->p.ix.k, outer = 1, inner = 1;
  for (int a = 0; a < ax; a++) outer *= xt->dims[a];
  for (int a = (int)ax + 1; a < xt->rank; a++) inner *= xt->dims[a];
  if (!k || !outer || !inner) return NULL;
  bool flt = is_flt(d);
  size_t es = rill_dtype_size(d);
  int64_t *idx = malloc((size_t)n * 2 * sizeof *idx);
  void *vals = malloc((size_t)n * 8);
  if (!idx || !vals) {
    free(idx), free(vals);
    return oom("topk");
  }
  tk_row_t r = {flt ? vals : NULL, flt ? NULL : vals, plan->p.ix.largest};
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      size_t base = (size_t)(o * n * inner + i), obase = (size_t)(o * k * inner + i);
      for (int64_t j = 0; j < n; j++) {
        idx[j] = j;
        if (flt) ((double *)vals)[j] = rill__load_f(in[0], d, base + (size_t)(j * inner));
        else ((int64_t *)vals)[j] = rill__ord_i(d, rill__load_i(in[0], d, base + (size_t)(j * inner)));
      }
      tk_sort(&r, idx, idx + n, n);
      for (int64_t j = 0; j < k; j++) {
        size_t oi = obase + (size_t)(j * inner);
        memcpy((char *)out[0] + oi * es, (const char *)in[0] + (base + (size_t)(idx[j] * inner)) * es, es);
        ((int64_t *)out[1])[oi] = idx[j];
      }
    }
  free(idx);
  free(vals);
  return NULL;
}
