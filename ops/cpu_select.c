/* cpu_select.c: the CPU reference of ops whose result's size depends on
 * the operand's values (docs/internals.md, "Sizes read back at run time").
 *
 *   nonzero   the coordinates of the first `count` nonzero elements in
 *             row-major order, one row per dimension; columns past the
 *             last nonzero element are 0
 *   nms       each batch and class's candidates sorted (score down, index
 *             up), then the greedy walk (nms_common.h's tests)
 */
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

static int cand_order(const void *pa, const void *pb) {
  const nms_cand_t *a = pa, *b = pb;
  if (a->s != b->s) return a->s > b->s ? -1 : 1;
  return a->j < b->j ? -1 : a->j > b->j;
}

rill_status_t ops_cpu_nms(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  long long cap = d->out[0].dims[0], B = d->in[0].dims[0], C = d->in[1].dims[1], N = d->in[0].dims[1];
  bool has_thr = d->nin > 4;
  const float *boxes = in[0], *scores = in[1], iou = *(const float *)in[3], thr = has_thr ? *(const float *)in[4] : 0.0f;
  const long long mp = *(const int64_t *)in[2];
  const int center = (int)plan->p.axis;
  int64_t *rows = out[0];
  nms_cand_t *cand = malloc(sizeof *cand * (size_t)(N ? N : 1));
  if (!cand) return rill__oom();
  long long k = 0;
  for (long long b = 0; b < B; b++)
    for (long long c = 0; c < C; c++) {
      const float *s = scores + (b * C + c) * N;
      long long m = 0, start = k;
      for (long long j = 0; j < N; j++)
        if (nms_candidate(s[j], has_thr, thr)) cand[m++] = (nms_cand_t){s[j], j};
      qsort(cand, (size_t)m, sizeof *cand, cand_order);
      for (long long r = 0; r < m && k - start < mp; r++) {
        long long j = cand[r].j;
        bool keep = true;
        for (long long q = start; keep && q < k && q < cap; q++)
          if (nms_suppresses(boxes + (b * N + rows[3 * q + 2]) * 4, boxes + (b * N + j) * 4, center, iou)) keep = false;
        if (!keep) continue;
        if (k < cap) rows[3 * k] = b, rows[3 * k + 1] = c, rows[3 * k + 2] = j;
        k++;
      }
    }
  free(cand);
  if (k > cap) k = cap;
  memset(rows + 3 * k, 0, sizeof(int64_t) * (size_t)(3 * (cap - k)));
  *(int64_t *)out[1] = k;
  return NULL;
}
