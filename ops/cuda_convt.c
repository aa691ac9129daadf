/* cuda_convt.c: conv_transpose on the CUDA device.
 *
 *   conv_transpose   kernels/cuda/conv_transpose.cu, a thread per output
 *                    element, after kernels/cuda/convt_common.h: the
 *                    gather the CPU reference computes, in double.
 * (cuDNN's backward-data convolution, faster for large channel counts,
 * would take the symmetric-pad cases; this kernel takes every case.)
 */
#include <stdio.h>
#include <string.h>

#include "cuda_gen.h"

typedef struct ct_state {
  CUfunction fn;
  long long total;
} ct_state_t;

bool cuda_convt_supports(const ops_plan_t *plan) { return plan->def->cpu == ops_cpu_conv_transpose; }

rill_status_t cuda_convt_source(const ops_plan_t *plan, rill_buf_t *b, const char **out_name) {
  const rill_type_t *x = &plan->decl->in[0], *w = &plan->decl->in[1], *y = &plan->decl->out[0];
  const ops_params_t *p = &plan->p;
  rill_dtype_t d = x->dtype;
  rill_status_t st = ksrc_def(b, "T", "%s", ksrc_ctype(d));
  if (!st) st = ksrc_io(b, "LD", "ST", d, d, "double");
  if (!st) st = ksrc_def(b, "ND", "%d", p->ct.nd);
  if (!st) st = ksrc_def(b, "CC", "%lldLL", (long long)x->dims[1]);
  if (!st) st = ksrc_def(b, "OO", "%lldLL", (long long)y->dims[1]);
  if (!st) st = ksrc_def(b, "GG", "%lldLL", (long long)p->groups);
  for (int a = 0; a < 3 && !st; a++) {
    bool on = a < p->ct.nd;
    char n[8];
    snprintf(n, sizeof n, "IN%d", a), st = ksrc_def(b, n, "%lldLL", on ? (long long)x->dims[2 + a] : 1LL);
    if (!st) snprintf(n, sizeof n, "K%d", a), st = ksrc_def(b, n, "%lldLL", on ? (long long)w->dims[2 + a] : 1LL);
    if (!st) snprintf(n, sizeof n, "OUT%d", a), st = ksrc_def(b, n, "%lldLL", on ? (long long)y->dims[2 + a] : 1LL);
    if (!st) snprintf(n, sizeof n, "S%d", a), st = ksrc_def(b, n, "%lldLL", on ? (long long)p->ct.s[a] : 1LL);
    if (!st) snprintf(n, sizeof n, "PB%d", a), st = ksrc_def(b, n, "%lldLL", on ? (long long)p->ct.pb[a] : 0LL);
    if (!st) snprintf(n, sizeof n, "D%d", a), st = ksrc_def(b, n, "%lldLL", on ? (long long)p->ct.d[a] : 1LL);
  }
  if (!st) st = ksrc_def(b, "HAS_B", "%d", p->has_bias);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(cuda_numel(y)));
  if (!st) st = rill__buf_printf(b, "%s\n%s\n%s", rill_kernel_prelude, rill_kernel_convt_common, rill_kernel_conv_transpose);
  *out_name = "conv_transpose_k";
  return st;
}

rill_status_t cuda_convt_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out) {
  ct_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  s->total = cuda_numel(&plan->decl->out[0]);
  rill_status_t st = cuda_gen_compile(env, plan, cuda_convt_source, &s->fn);
  if (st) {
    rill__free(env->a, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_convt_release(const ops_cuda_env_t *env, void *state) { rill__free(env->a, state); }

rill_status_t cuda_convt_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  ct_state_t *s = state;
  CUdeviceptr x = (CUdeviceptr)in[0], w = (CUdeviceptr)in[1], b = plan->p.has_bias ? (CUdeviceptr)in[2] : 0, y = (CUdeviceptr)out[0];
  void *args[] = {&x, &w, &b, &y, &s->total};
  return cuda_launch(ctx, s->fn, s->total, args);
}
