/* cuda_select.c: ops whose result's size depends on the operand's values,
 * on the CUDA device.
 *
 *   nonzero   kernels/cuda/nonzero.cu: one block scanning the nonzero
 *             flags chunk by chunk (the places are a prefix count)
 */
#include <stdio.h>
#include <string.h>

#include "cuda_gen.h"

typedef struct sel_state {
  CUfunction fn;
  long long numel, count;
} sel_state_t;

bool cuda_select_supports(const ops_plan_t *plan) { return plan->def->cpu == ops_cpu_nonzero; }

rill_status_t cuda_select_source(const ops_plan_t *plan, rill_buf_t *b, const char **out_name) {
  const rill_type_t *x = &plan->decl->in[0];
  rill_status_t st = ksrc_def(b, "T", "%s", ksrc_ctype(x->dtype));
  if (!st) st = ksrc_io(b, "LD", "ST", x->dtype, x->dtype, "double");
  if (!st) st = ksrc_def(b, "RANK", "%d", x->rank);
  char dims[RILL_MAX_RANK * 24 + 4] = "1LL";
  for (int a = 0, o = 0; a < x->rank; a++) o += snprintf(dims + o, sizeof dims - (size_t)o, "%s%lldLL", a ? "," : "", (long long)x->dims[a]);
  if (!st) st = ksrc_def(b, "DIMS", "%s", dims);
  if (!st) st = rill__buf_printf(b, "%s\n%s", rill_kernel_prelude, rill_kernel_nonzero);
  *out_name = "nonzero_k";
  return st;
}

rill_status_t cuda_select_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out) {
  sel_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  s->numel = cuda_numel(&plan->decl->in[0]);
  s->count = plan->decl->out[0].dims[1];
  rill_status_t st = cuda_gen_compile(env, plan, cuda_select_source, &s->fn);
  if (st) {
    rill__free(env->a, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_select_release(const ops_cuda_env_t *env, void *state) { rill__free(env->a, state); }

rill_status_t cuda_select_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  (void)plan;
  sel_state_t *s = state;
  CUdeviceptr x = (CUdeviceptr)in[0], y = (CUdeviceptr)out[0];
  void *args[] = {&x, &y, &s->numel, &s->count};
  return CU(ctx->api, cuLaunchKernel, s->fn, 1, 1, 1, 1024, 1, 1, 0, ctx->stream, args, NULL);
}
