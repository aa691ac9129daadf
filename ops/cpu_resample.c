/* cpu_resample.c: the CPU reference of `resize` (docs/internals.md,
 * "Resampling ops"). Each axis's taps (input indices and weights, from
 * kernels/cuda/resize_common.h, which the CUDA kernel shares) are computed
 * once per output position; an output element sums the products of its
 * axes' weights over the input elements they pick, in double, and rounds
 * once. nearest copies the element it picks, whatever the dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cuda/resize_common.h"
#include "ops.h"

typedef struct rs_tap {
  int n;                 /* 0: outside the input (the extrapolation value) */
  long long idx[4];
  double w[4];
} rs_tap_t;

rill_status_t ops_cpu_resize(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *xt = &plan->decl->in[0], *yt = &plan->decl->out[0];
  const ops_params_t *p = &plan->p;
  int r = xt->rank;
  rill_dtype_t dt = xt->dtype;
  size_t es = rill_dtype_size(dt), total = 0, first[RILL_MAX_RANK];
  for (int a = 0; a < r; a++) first[a] = total, total += (size_t)yt->dims[a];
  size_t ny = rill_type_numel(yt);
  if (!ny) return NULL;
  rs_tap_t *taps = malloc((total ? total : 1) * sizeof *taps);
  if (!taps) return rill__status(RILL_OUT_OF_MEMORY, "resize: out of host memory for the reference kernel");
  int64_t xs[RILL_MAX_RANK];
  for (int a = r - 1; a >= 0; a--) xs[a] = a == r - 1 ? 1 : xs[a + 1] * xt->dims[a + 1];
  for (int a = 0; a < r; a++)
    for (int64_t o = 0; o < yt->dims[a]; o++) {
      rs_tap_t *t = &taps[first[a] + (size_t)o];
      t->n = rs_taps(o, xt->dims[a], yt->dims[a], p->rs.scale[a], p->rs.roi[a], p->rs.roi[r + a], p->rs.mode, p->rs.coord,
                     p->rs.nearest, p->rs.cubic_a, p->rs.exclude, t->idx, t->w);
    }
  bool flt = dt == RILL_F16 || dt == RILL_BF16 || dt == RILL_F32 || dt == RILL_F64;
  int64_t pos[RILL_MAX_RANK] = {0};
  for (size_t e = 0; e < ny; e++) {
    const rs_tap_t *t[RILL_MAX_RANK];
    bool outside = false;
    for (int a = 0; a < r; a++) {
      t[a] = &taps[first[a] + (size_t)pos[a]];
      outside |= t[a]->n == 0;
    }
    if (outside) {
      rill__store_f(out[0], dt, e, p->rs.extrap);
    } else if (p->rs.mode == RS_NEAREST) {
      size_t off = 0;
      for (int a = 0; a < r; a++) off += (size_t)(t[a]->idx[0] * xs[a]);
      memcpy((char *)out[0] + e * es, (const char *)in[0] + off * es, es);
    } else {
      int k[RILL_MAX_RANK] = {0};
      double acc = 0;
      for (;;) {
        double w = 1;
        size_t off = 0;
        for (int a = 0; a < r; a++) {
          w *= t[a]->w[k[a]];
          off += (size_t)(t[a]->idx[k[a]] * xs[a]);
        }
        acc += w * rill__load_f(in[0], dt, off);
        int a = r - 1;
        while (a >= 0 && ++k[a] == t[a]->n) k[a--] = 0;
        if (a < 0) break;
      }
      rill__store_f(out[0], dt, e, flt ? acc : rs_int(acc, -9.2233720368547758e18, 9.2233720368547748e18));
    }
    for (int a = r - 1; a >= 0 && ++pos[a] == yt->dims[a]; a--) pos[a] = 0;
  }
  free(taps);
  return NULL;
}
