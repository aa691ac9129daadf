/* cpu_select.c: the CPU reference of ops whose result's size depends on
 * the operand's values (docs/internals.md, "Sizes read back at run time").
 *
 *   nonzero   the coordinates of the first `count` nonzero elements in
 *             row-major order, one row per dimension; columns past the
 *             last nonzero element are 0
 *   nms       each batch and class's candidates sorted (score down, index
 *             up), then the greedy walk (nms_common.h's tests) against the
 *             kept boxes that overlap the candidate along x
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cuda/nms_common.h"
#include "ops.h"

rill_status_t ops_cpu_nonzero(const ops_plan_t *plan, void *const *in, void *const *out) {
  const rill_type_t *x = &plan->decl->in[0];
  int64_t count = plan->decl->out[0].dims[1], *y = out[0];
  size_t numel;
  rill__type_sizes(x, &numel, NULL);
  memset(y, 0, sizeof(int64_t) * (size_t)x->rank * (size_t)count);
  int64_t k = 0;
  for (size_t i = 0; i < numel && k < count; i++) {
    if (rill__load_f(in[0], x->dtype, i) == 0.0) continue;
    size_t rem = i;
    for (int d = x->rank - 1; d >= 0; d--) {
      y[(size_t)d * (size_t)count + (size_t)k] = (int64_t)(rem % (size_t)x->dims[d]);
      rem /= (size_t)x->dims[d];
    }
    k++;
  }
  return NULL;
}

typedef struct { float s; long long j; } nms_cand_t;
typedef struct { float x1, x2; long long j; } nms_kept_t;

static int cand_order(const void *pa, const void *pb) {
  const nms_cand_t *a = pa, *b = pb;
  if (a->s != b->s) return a->s > b->s ? -1 : 1;
  return a->j < b->j ? -1 : a->j > b->j;
}

/* The kept boxes of one batch and class that can suppress: those of finite
 * corners and positive area in x1 order (`idx`, the widest `maxw` wide),
 * the rest (`other`) tested one by one. A kept box suppresses only a box it
 * overlaps (nms_suppresses: no intersection, no suppression), so a candidate
 * is tested only against those whose x1 lies within maxw before its own x1
 * and before its x2: the same answer as testing every one (with a score
 * threshold of 0 and torchvision's class offsets, thousands are kept, most
 * far apart). */
typedef struct {
  nms_kept_t *idx;
  long long n, nother, *other;
  float maxw;
} nms_index_t;

/* The first kept box whose x1 is at least v (past v too where past_equal). */
static long long kept_from(const nms_index_t *x, float v, bool past_equal) {
  long long a = 0, b = x->n;
  while (a < b) {
    long long mid = a + (b - a) / 2;
    if (x->idx[mid].x1 < v || (past_equal && x->idx[mid].x1 == v)) a = mid + 1;
    else b = mid;
  }
  return a;
}

static bool nms_suppressed(const nms_index_t *x, const float *bx, const float *cand, int center, float iou) {
  float y1, x1, y2, x2;
  nms_corners(cand, center, &y1, &x1, &y2, &x2);
  float area = (y2 - y1) * (x2 - x1);
  if (!(area > 0)) return false; /* no area, or NaN: nms_suppresses never holds */
  for (long long q = 0; q < x->nother; q++)
    if (nms_suppresses(bx + x->other[q] * 4, cand, center, iou)) return true;
  float lo = isfinite(x1) ? x1 - x->maxw - (fabsf(x1) + x->maxw) * 1e-5f : -INFINITY;
  for (long long q = kept_from(x, lo, false); q < x->n && x->idx[q].x1 < x2; q++)
    if (x->idx[q].x2 > x1 && nms_suppresses(bx + x->idx[q].j * 4, cand, center, iou)) return true;
  return false;
}

static void nms_keep(nms_index_t *x, const float *box, long long j, int center) {
  float y1, x1, y2, x2;
  nms_corners(box, center, &y1, &x1, &y2, &x2);
  if (!(isfinite(y1) && isfinite(x1) && isfinite(y2) && isfinite(x2) && (y2 - y1) * (x2 - x1) > 0)) {
    x->other[x->nother++] = j;
    return;
  }
  long long a = kept_from(x, x1, true);
  memmove(x->idx + a + 1, x->idx + a, sizeof *x->idx * (size_t)(x->n - a));
  x->idx[a] = (nms_kept_t){x1, x2, j};
  x->n++;
  if (x2 - x1 > x->maxw) x->maxw = x2 - x1;
}

rill_status_t ops_cpu_nms(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  long long cap = d->out[0].dims[0], B = d->in[0].dims[0], C = d->in[1].dims[1], N = d->in[0].dims[1];
  bool has_thr = d->nin > 4;
  const float *boxes = in[0], *scores = in[1], iou = *(const float *)in[3], thr = has_thr ? *(const float *)in[4] : 0.0f;
  const long long mp = *(const int64_t *)in[2];
  const int center = (int)plan->p.axis;
  int64_t *rows = out[0];
  size_t n1 = (size_t)(N ? N : 1);
  nms_cand_t *cand = malloc(sizeof *cand * n1);
  nms_index_t x = {malloc(sizeof *x.idx * n1), 0, 0, malloc(sizeof *x.other * n1), 0};
  if (!cand || !x.idx || !x.other) {
    free(cand), free(x.idx), free(x.other);
    return rill__oom();
  }
  long long k = 0;
  for (long long b = 0; b < B; b++)
    for (long long c = 0; c < C; c++) {
      const float *s = scores + (b * C + c) * N, *bx = boxes + b * N * 4;
      long long m = 0, start = k;
      for (long long j = 0; j < N; j++)
        if (nms_candidate(s[j], has_thr, thr)) cand[m++] = (nms_cand_t){s[j], j};
      qsort(cand, (size_t)m, sizeof *cand, cand_order);
      x.n = x.nother = 0, x.maxw = 0;
      for (long long r = 0; r < m && k - start < mp; r++) {
        long long j = cand[r].j;
        if (nms_suppressed(&x, bx, bx + j * 4, center, iou)) continue;
        if (k < cap) {
          rows[3 * k] = b, rows[3 * k + 1] = c, rows[3 * k + 2] = j;
          nms_keep(&x, bx + j * 4, j, center); /* (the reference tests only the rows it keeps, those below cap) */
        }
        k++;
      }
    }
  free(cand), free(x.idx), free(x.other);
  if (k > cap) k = cap;
  memset(rows + 3 * k, 0, sizeof(int64_t) * (size_t)(3 * (cap - k)));
  *(int64_t *)out[1] = k;
  return NULL;
}
