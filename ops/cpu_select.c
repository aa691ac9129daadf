/* cpu_select.c: the CPU reference of ops whose result's size depends on
 * the operand's values (docs/internals.md, "Sizes read back at run time").
 *
 *   nonzero   the coordinates of the first `count` nonzero elements in
 *             row-major order, one row per dimension; columns past the
 *             last nonzero element are 0
 */
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

rill_status_t ops_cpu_nms(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  long long cap = d->out[0].dims[0];
  bool thr = d->nin > 4;
  long long k = nms_run(in[0], in[1], d->in[0].dims[0], d->in[1].dims[1], d->in[0].dims[1], *(const int64_t *)in[2], (int)plan->p.axis,
                        *(const float *)in[3], thr, thr ? *(const float *)in[4] : 0.0f, out[0], cap);
  if (k > cap) k = cap;
  memset((int64_t *)out[0] + 3 * k, 0, sizeof(int64_t) * (size_t)(3 * (cap - k)));
  *(int64_t *)out[1] = k;
  return NULL;
}
