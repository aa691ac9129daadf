/* cuda_gconv.c: the generated kernel for grouped and depthwise conv2d
 * (kernels/cuda/grouped_conv.cu), a candidate beside cuDNN's algorithms and
 * engines. cuDNN's grouped convolutions are slow where a group has few
 * channels: convnext_tiny's depthwise 7x7 at batch 32 in f16 took 408 us a
 * call on an H100, 9.0 of the model's 13.9 ms. The kernel takes every
 * kernel size, stride, dilation, padding (asymmetric too: no padded copy)
 * and channel multiplier, both layouts and every float dtype, accumulating
 * in f32 (f64 for f64), with the bias, the residual and the activation in
 * its epilogue, rounded as channel_bias.cu rounds them; depthwise over
 * channels last, a thread several outputs of a row (dw_k). cuda_nn.c times it
 * against cuDNN's choice (or takes it where a kernel choice tree names
 * "kernel.gconv") and runs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gen.h"

bool cuda_gconv_fits(const ops_plan_t *plan) {
  const isa_opdecl_t *d = plan->decl;
  if (plan->def->cpu != ops_cpu_conv2d || d->in[0].rank != 4 || !rill__is_float(d->in[0].dtype) || plan->p.groups < 2) return false;
  long long C = d->in[0].dims[plan->p.nhwc ? 3 : 1];
  return C / plan->p.groups <= CUDA_GCONV_MAX_CG && cuda_numel(&d->out[0]) > 0;
}

/* Depthwise over channels last (each group one input and one output
 * channel) runs dw_k, a thread DW_T outputs along a row: 8 where that
 * leaves enough threads to fill an H100 (DW_MIN_ITEMS: 132 SMs' 2,048 a
 * quarter over), else 4, else 1 (batch 1's last stages); 0 where dw_k
 * does not apply. RILL_DW_TILE=N takes N (1 to 16). */
#define DW_MIN_ITEMS (132LL * 2048 / 4)
static int dw_tile(const ops_plan_t *plan) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0], *y = &d->out[0];
  if (!plan->p.nhwc || x->dims[3] != plan->p.groups || y->dims[3] != plan->p.groups) return 0;
  const char *force = getenv("RILL_DW_TILE"); /* the tests' partial and full tiles on small shapes */
  if (force && atoi(force) >= 1 && atoi(force) <= 16) return atoi(force);
  long long rows = y->dims[0] * y->dims[1] * y->dims[3], ow = y->dims[2];
  for (int t = 8; t > 1; t /= 2)
    if (ow >= t && rows * ((ow + t - 1) / t) >= DW_MIN_ITEMS) return t;
  return 1;
}

long long cuda_gconv_items(const ops_plan_t *plan) {
  const rill_type_t *y = &plan->decl->out[0];
  int t = dw_tile(plan);
  return t ? y->dims[0] * y->dims[1] * ((y->dims[2] + t - 1) / t) * y->dims[3] : cuda_numel(y);
}

rill_status_t cuda_gconv_source(const ops_plan_t *plan, rill_buf_t *b, const char **out_name) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0], *w = &d->in[1], *y = &d->out[0];
  const ops_params_t *p = &plan->p;
  rill_dtype_t dt = x->dtype;
  bool nhwc = p->nhwc;
  /* N, C, H, W of x and y in either layout; the weight's taps */
  const int c = nhwc ? 3 : 1, h = nhwc ? 1 : 2, wd = nhwc ? 2 : 3;
  long long span = cuda_numel(x) > cuda_numel(y) ? cuda_numel(x) : cuda_numel(y);
  const char *C = ksrc_comp(dt);
  rill_status_t st = ksrc_def(b, "T", "%s", ksrc_ctype(dt));
  if (!st) st = ksrc_def(b, "C", "%s", C);
  if (!st) st = ksrc_io(b, "LD", "ST", dt, dt, C);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(span));
  const struct { const char *n; long long v; } defs[] = {
      {"G_CI", x->dims[c]}, {"G_H", x->dims[h]}, {"G_W", x->dims[wd]}, {"G_CO", y->dims[c]}, {"G_OH", y->dims[h]}, {"G_OW", y->dims[wd]},
      {"G_CG", x->dims[c] / p->groups}, {"G_OG", y->dims[c] / p->groups}, {"G_KH", w->dims[nhwc ? 1 : 2]}, {"G_KW", w->dims[nhwc ? 2 : 3]},
      {"G_SH", p->stride[0]}, {"G_SW", p->stride[1]}, {"G_DH", p->dilation[0]}, {"G_DW", p->dilation[1]}, {"G_PH", p->pad[0]}, {"G_PW", p->pad[1]},
  };
  for (size_t i = 0; !st && i < sizeof defs / sizeof *defs; i++) st = ksrc_def(b, defs[i].n, "%lld", defs[i].v);
  if (!st && p->has_bias) st = ksrc_def(b, "HAS_BIAS", "1");
  if (!st && p->has_residual) st = ksrc_def(b, "RESIDUAL", "1");
  if (!st && p->act) st = cuda_act_function(b, p->act, dt);
  if (!st && nhwc) st = ksrc_def(b, "NHWC", "1");
  int t = dw_tile(plan);
  if (!st && t) st = ksrc_def(b, "DW_T", "%d", t);
  if (!st) st = rill__buf_printf(b, "%s\n%s\n%s", rill_kernel_prelude, rill_kernel_channel_bias, rill_kernel_grouped_conv);
  *out_name = t ? "dw_k" : "grouped_conv_k";
  return st;
}
