/* cuda_select.c: ops whose result's size depends on the operand's values,
 * on the CUDA device.
 *
 *   nonzero   kernels/cuda/nonzero.cu: one block scanning the nonzero
 *             flags chunk by chunk (the places are a prefix count)
 *   nms       kernels/cuda/nms.cu: each candidate's place in the order
 *             counted over the grid, then one block's greedy walk, every
 *             kept box tested at once (the CPU reference's tests and order,
 *             nms_common.h); its lists in the stream's workspace
 */
#include <stdio.h>
#include <string.h>

#include "cuda_gen.h"

typedef struct sel_state {
  CUfunction fn, fn2;                      /* nms: rank, greedy */
  long long numel, count;                  /* nonzero */
  long long B, C, N, cap;                  /* nms */
  size_t workspace;                        /* nms: counts [B*C], order [B*C, N], kept [N] (ints) */
} sel_state_t;

bool cuda_select_supports(const ops_plan_t *plan) { return plan->def->cpu == ops_cpu_nonzero || plan->def->cpu == ops_cpu_nms; }

rill_status_t cuda_select_source(const ops_plan_t *plan, rill_buf_t *b, const char **out_name) {
  const rill_type_t *x = &plan->decl->in[0];
  if (plan->def->cpu == ops_cpu_nms) {
    rill_status_t st = ksrc_def(b, "NMS_FN", "__device__");
    if (!st) st = ksrc_def(b, "CENTER", "%d", (int)plan->p.axis);
    if (!st) st = ksrc_def(b, "HAS_THR", "%d", plan->decl->nin > 4);
    if (!st) st = rill__buf_printf(b, "%s\n%s\n%s", rill_kernel_prelude, rill_kernel_nms_common, rill_kernel_nms);
    *out_name = "nms_rank_k";
    return st;
  }
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
  const isa_opdecl_t *d = plan->decl;
  s->numel = cuda_numel(&d->in[0]);
  s->count = d->out[0].dims[1];
  rill_status_t st = NULL;
  if (plan->def->cpu == ops_cpu_nms) {
    s->B = d->in[0].dims[0], s->N = d->in[0].dims[1], s->C = d->in[1].dims[1];
    s->cap = d->out[0].dims[0];
    long long P = s->B * s->C;
    if (s->N > INT32_MAX || P > (long long)(SIZE_MAX / 4 / 2) / (s->N + 1))
      st = rill_status_new(RILL_UNIMPLEMENTED, "nms over %lld boxes in %lld batch-class pairs (too many for the cuda kernel's lists)", s->N, P);
    s->workspace = (size_t)(P + P * s->N + s->N) * sizeof(int);
  }
  /* nms takes its second kernel from the same module */
  const char *names[] = {NULL, "nms_greedy_k"};
  CUfunction *fns[] = {&s->fn, &s->fn2};
  if (!st) st = cuda_gen_compile_n(env, plan, cuda_select_source, names, fns, plan->def->cpu == ops_cpu_nms ? 2 : 1);
  if (st) {
    rill__free(env->a, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_select_release(const ops_cuda_env_t *env, void *state) { rill__free(env->a, state); }

size_t cuda_select_workspace(const void *state) { return ((const sel_state_t *)state)->workspace; }

rill_status_t cuda_select_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  sel_state_t *s = state;
  if (plan->def->cpu == ops_cpu_nms) {
    CUdeviceptr bx = (CUdeviceptr)in[0], sc = (CUdeviceptr)in[1], mp = (CUdeviceptr)in[2], iou = (CUdeviceptr)in[3];
    CUdeviceptr thr = plan->decl->nin > 4 ? (CUdeviceptr)in[4] : 0, rows = (CUdeviceptr)out[0], cnt = (CUdeviceptr)out[1];
    long long P = s->B * s->C;
    CUdeviceptr ws = ctx->workspace;
    if (ctx->workspace_size < s->workspace) return rill_status_new(RILL_INTERNAL, "nms: the stream's workspace is smaller than the op asked");
    RILL_TRY(CU(ctx->api, cuMemsetD8Async, ws, 0, (size_t)P * sizeof(int), ctx->stream));
    if (s->N > 0 && P > 0) {
      unsigned gx = (unsigned)((s->N + 255) / 256 < 1024 ? (s->N + 255) / 256 : 1024), gy = (unsigned)(P < 65535 ? P : 65535);
      void *rargs[] = {&sc, &thr, &ws, &P, &s->N};
      RILL_TRY(CU(ctx->api, cuLaunchKernel, s->fn, gx, gy, 1, 256, 1, 1, 0, ctx->stream, rargs, NULL));
    }
    void *args[] = {&bx, &mp, &iou, &ws, &rows, &cnt, &s->B, &s->C, &s->N, &s->cap};
    return CU(ctx->api, cuLaunchKernel, s->fn2, 1, 1, 1, 1024, 1, 1, 0, ctx->stream, args, NULL);
  }
  CUdeviceptr x = (CUdeviceptr)in[0], y = (CUdeviceptr)out[0];
  void *args[] = {&x, &y, &s->numel, &s->count};
  return CU(ctx->api, cuLaunchKernel, s->fn, 1, 1, 1, 1024, 1, 1, 0, ctx->stream, args, NULL);
}
