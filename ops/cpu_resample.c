/* cpu_resample.c: the CPU references of `resize`, `grid_sample` and
 * `roi_align` (docs/internals.md, "Resampling ops"). resize: each axis's
 * taps (input indices and weights, from kernels/cuda/resize_common.h,
 * which the CUDA kernel shares) are computed
 * once per output position; an output element sums the products of its
 * axes' weights over the input elements they pick, in double, and rounds
 * once. nearest copies the element it picks, whatever the dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cuda/grid_common.h"
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
  /* scales and roi: the attributes', or the params operand's (f64[3 r]) */
  const double *prm = p->rs.prm ? (const double *)in[1] : NULL;
  for (int a = 0; a < r; a++)
    for (int64_t o = 0; o < yt->dims[a]; o++) {
      rs_tap_t *t = &taps[first[a] + (size_t)o];
      t->n = rs_taps(o, xt->dims[a], yt->dims[a], prm ? prm[a] : p->rs.scale[a], prm ? prm[r + a] : p->rs.roi[a], prm ? prm[2 * r + a] : p->rs.roi[r + a],
                     p->rs.mode, p->rs.coord, p->rs.nearest, p->rs.cubic_a, p->rs.exclude, t->idx, t->w);
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
      rill__store_f(out[0], dt, e, flt ? acc : dt == RILL_U64 ? rs_int(acc, 0, 1.8446744073709550e19) : rs_int(acc, -9.2233720368547758e18, 9.2233720368547748e18));
    }
    for (int a = r - 1; a >= 0 && ++pos[a] == yt->dims[a]; a--) pos[a] = 0;
  }
  free(taps);
  return NULL;
}

/* grid_sample: each output point's taps per axis (gs_taps, shared with the
 * CUDA kernel), the sum of the products in double, rounded once */
rill_status_t ops_cpu_grid_sample(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *xt = &plan->decl->in[0], *gt = &plan->decl->in[1], *yt = &plan->decl->out[0];
  const ops_params_t *p = &plan->p;
  int64_t C = xt->dims[1], H = xt->dims[2], W = xt->dims[3], HO = yt->dims[2], WO = yt->dims[3];
  size_t ny = rill_type_numel(yt);
  for (size_t t = 0; t < ny; t++) {
    int64_t ow = (int64_t)t % WO, oh = (int64_t)t / WO % HO, c = (int64_t)t / WO / HO % C, n = (int64_t)t / WO / HO / C;
    size_t g = (size_t)(((n * HO + oh) * WO + ow) * 2);
    long long ix[4], iy[4];
    double wx[4], wy[4], acc = 0;
    int nx = gs_taps(rill__load_f(in[1], gt->dtype, g), W, p->gs.mode, p->gs.pad, p->gs.align, ix, wx);
    int nyt = gs_taps(rill__load_f(in[1], gt->dtype, g + 1), H, p->gs.mode, p->gs.pad, p->gs.align, iy, wy);
    size_t img = (size_t)((n * C + c) * H * W);
    for (int i = 0; i < nyt; i++)
      for (int j = 0; j < nx; j++)
        if (iy[i] >= 0 && ix[j] >= 0) acc += wy[i] * wx[j] * rill__load_f(in[0], xt->dtype, img + (size_t)(iy[i] * W + ix[j]));
    rill__store_f(out[0], yt->dtype, t, acc);
  }
  return NULL;
}

/* roi_align: per output element the roi's geometry (ra_geom) and its bin
 * (RA_BIN), as the CUDA kernel computes them */
rill_status_t ops_cpu_roi_align(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *xt = &plan->decl->in[0], *rt = &plan->decl->in[1], *bt = &plan->decl->in[2], *yt = &plan->decl->out[0];
  const ops_params_t *p = &plan->p;
  int64_t NB = xt->dims[0], C = xt->dims[1], H = xt->dims[2], W = xt->dims[3], OH = p->gs.oh, OW = p->gs.ow;
  size_t ny = rill_type_numel(yt);
  for (size_t t = 0; t < ny; t++) {
    int64_t pw = (int64_t)t % OW, ph = (int64_t)t / OW % OH, c = (int64_t)t / OW / OH % C, r = (int64_t)t / OW / OH / C;
    int64_t b = rill__load_i(in[2], bt->dtype, (size_t)r);
    if (b < 0 || b >= NB) return rill__status(RILL_RUNTIME_ERROR, "roi_align: batch index %lld of roi %lld is out of range for a batch of %lld", (long long)b, (long long)r, (long long)NB);
    double roi[4], start[2], bin[2], acc;
    long long grid[2];
    for (int k = 0; k < 4; k++) roi[k] = rill__load_f(in[1], rt->dtype, (size_t)(r * 4 + k));
    ra_geom(roi, p->gs.scale, p->gs.half_pixel, OH, OW, p->gs.sampling, start, bin, grid);
    size_t img = (size_t)((b * C + c) * H * W);
#define X(e) rill__load_f(in[0], xt->dtype, img + (size_t)(e))
    RA_BIN(start, bin, grid, ph, pw, H, W, p->gs.max, X, acc);
#undef X
    rill__store_f(out[0], yt->dtype, t, acc);
  }
  return NULL;
}
