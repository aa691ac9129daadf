/* cuda_index.c: the indexing ops on the CUDA device.
 *
 *   scatter_nd   a device-to-device copy of the operand, then
 *                kernels/cuda/scatter_nd.cu, a thread per update element
 *                (atomic compare-and-swap loops for the reductions)
 *   topk         kernels/cuda/topk.cu, a thread per element: its rank in
 *                its row, the order of the CPU reference's stable sort
 */
#include <stdio.h>
#include <string.h>

#include "cuda_gen.h"

typedef struct ix_state {
  CUfunction fn;
  long long total;  /* threads: update elements (scatter_nd), input elements (topk) */
  size_t bytes;     /* scatter_nd: the operand's bytes */
} ix_state_t;

bool cuda_index_supports(const ops_plan_t *plan) { return plan->def->cpu == ops_cpu_scatter_nd || plan->def->cpu == ops_cpu_topk; }

static rill_status_t longs_def(rill_buf_t *b, const char *name, const int64_t *v, int n) {
  char text[RILL_MAX_RANK * 24 + 4];
  size_t o = 0;
  text[o++] = '{';
  for (int i = 0; i < n; i++) o += (size_t)snprintf(text + o, sizeof text - o, "%s%lldLL", i ? ", " : "", (long long)v[i]);
  snprintf(text + o, sizeof text - o, "}");
  return ksrc_def(b, name, "%s", text);
}

rill_status_t cuda_index_source(const ops_plan_t *plan, rill_buf_t *b, const char **out_name) {
  const rill_type_t *x = &plan->decl->in[0];
  rill_dtype_t d = x->dtype;
  bool flt = rill__is_float(d);
  const char *C = flt ? "double" : ksrc_comp(d); /* u64: unsigned order */
  rill_status_t st = ksrc_def(b, "T", "%s", ksrc_ctype(d));
  if (!st) st = ksrc_def(b, "C", "%s", C);
  if (!st) st = ksrc_io(b, "LD", "ST", d, d, C);
  if (plan->def->cpu == ops_cpu_topk) {
    int64_t ax = plan->p.axis, inner = 1;
    for (int a = (int)ax + 1; a < x->rank; a++) inner *= x->dims[a];
    if (!st) st = ksrc_def(b, "N", "%lldLL", (long long)x->dims[ax]);
    if (!st) st = ksrc_def(b, "INNER", "%lldLL", (long long)inner);
    if (!st) st = ksrc_def(b, "K", "%lldLL", (long long)plan->p.ix.k);
    if (!st) st = ksrc_def(b, "LARGEST", "%d", plan->p.ix.largest);
    if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(cuda_numel(x)));
    if (!st) st = rill__buf_printf(b, "%s\n%s", rill_kernel_prelude, rill_kernel_topk);
    *out_name = "topk_k";
    return st;
  }
  const rill_type_t *it = &plan->decl->in[1], *ut = &plan->decl->in[2];
  int k = (int)it->dims[it->rank - 1];
  int64_t strides[RILL_MAX_RANK], slice = 1;
  cuda_row_strides(x, strides);
  for (int a = k; a < x->rank; a++) slice *= x->dims[a];
  if (!st) st = ksrc_def(b, "TI", "%s", ksrc_ctype(it->dtype));
  if (!st) st = ksrc_def(b, "IS_INT", "%d", !flt);
  if (!st) st = ksrc_def(b, "K", "%d", k);
  if (!st) st = ksrc_def(b, "SLICE", "%lldLL", (long long)slice);
  if (!st) st = ksrc_def(b, "RED", "%d", plan->p.ix.reduction);
  if (!st) st = longs_def(b, "DIMS", x->dims, k);
  if (!st) st = longs_def(b, "STRIDES", strides, k);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(cuda_numel(ut) > cuda_numel(x) ? cuda_numel(ut) : cuda_numel(x)));
  if (!st) st = rill__buf_printf(b, "%s\n%s", rill_kernel_prelude, rill_kernel_scatter_nd);
  *out_name = "scatter_nd_k";
  return st;
}

rill_status_t cuda_index_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out) {
  ix_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  const rill_type_t *x = &plan->decl->in[0];
  bool topk = plan->def->cpu == ops_cpu_topk;
  s->total = cuda_numel(topk ? x : &plan->decl->in[2]);
  s->bytes = (size_t)cuda_numel(x) * rill_dtype_size(x->dtype);
  rill_status_t st = cuda_gen_compile(env, plan, cuda_index_source, &s->fn);
  if (st) {
    rill__free(env->a, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_index_release(const ops_cuda_env_t *env, void *state) { rill__free(env->a, state); }

rill_status_t cuda_index_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  ix_state_t *s = state;
  if (plan->def->cpu == ops_cpu_topk) {
    if (!plan->p.ix.k) return NULL;
    CUdeviceptr x = (CUdeviceptr)in[0], y = (CUdeviceptr)out[0], yi = (CUdeviceptr)out[1];
    void *args[] = {&x, &y, &yi, &s->total};
    return cuda_launch(ctx, s->fn, s->total, args);
  }
  if (s->bytes && in[0] != out[0]) RILL_TRY(CU(ctx->api, cuMemcpyDtoDAsync, (CUdeviceptr)out[0], (CUdeviceptr)in[0], s->bytes, ctx->stream));
  CUdeviceptr ix = (CUdeviceptr)in[1], u = (CUdeviceptr)in[2], y = (CUdeviceptr)out[0], err = ctx->error_word;
  void *args[] = {&ix, &u, &y, &err, &s->total};
  return cuda_launch(ctx, s->fn, s->total, args);
}
