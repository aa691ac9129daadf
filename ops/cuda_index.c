/* cuda_index.c: the indexing ops on the CUDA device.
 *
 *   scatter_nd   a device-to-device copy of the operand, then
 *                kernels/cuda/scatter_nd.cu, a thread per update element
 *                (atomic compare-and-swap loops for the reductions)
 *   topk         kernels/cuda/topk.cu, the order of the CPU reference's
 *                stable sort: rows up to TOPK_SHORT long, a thread per
 *                element (its rank in its row); longer ones (up to
 *                TOPK_LIST_MAX taken), a radix select of the K-th element
 *                a byte a pass, then the K listed and ranked among
 *                themselves, in the stream's workspace
 */
#include <stdio.h>
#include <string.h>

#include "cuda_gen.h"

typedef struct ix_state {
  CUfunction fn;
  long long total;  /* threads: update elements (scatter_nd), input elements (topk) */
  size_t bytes;     /* scatter_nd: the operand's bytes */
  /* topk by radix select: its kernels, rows, passes and workspace (the rows' state and bins, zeroed per run, then the lists) */
  CUfunction hist, pick, select, rank;
  long long rows, n, k;
  int passes;
  size_t zeroed, workspace;
} ix_state_t;

/* topk: rows longer than this take the radix select (a thread per element
 * costs O(N) each, and the K largest scan the whole row: seconds for
 * detection heads' millions of scores); K up to TOPK_LIST_MAX, whose
 * ranking among themselves costs O(K) each */
#define TOPK_SHORT 2048
#define TOPK_LIST_MAX 16384
#define TOPK_ROW_BYTES 32 /* topk.cu's tk_row_t: a row's key so far and counts */

static bool topk_select(const ops_plan_t *plan) {
  const rill_type_t *x = &plan->decl->in[0];
  int64_t n = x->dims[plan->p.axis], k = plan->p.ix.k;
  return n > TOPK_SHORT && n < INT32_MAX && k > 0 && k <= TOPK_LIST_MAX;
}

static int bits_of(long long v) {
  int b = 0;
  while (v > 0) b++, v >>= 1;
  return b;
}

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
    bool sgn = d == RILL_I8 || d == RILL_I16 || d == RILL_I32 || d == RILL_I64;
    long long n = x->dims[ax];
    if (!st) st = ksrc_def(b, "KEY_BITS", "%d", (int)rill_dtype_size(d) * 8);
    if (!st) st = ksrc_def(b, "IDX_BITS", "%d", bits_of(n - 1));
    if (!st) st = ksrc_def(b, "TK_FLOAT", "%d", flt);
    if (!st) st = ksrc_def(b, "TK_SIGNED", "%d", sgn);
    if (!st) st = ksrc_def(b, "ROWS", "%lldLL", n ? (long long)(cuda_numel(x) / n) : 0LL);
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
  rill_status_t st = NULL;
  if (topk && topk_select(plan)) {
    /* a pass a byte of the key: the value's bytes, then the index's */
    s->n = x->dims[plan->p.axis], s->k = plan->p.ix.k, s->rows = cuda_numel(x) / s->n;
    s->passes = (int)rill_dtype_size(x->dtype) + (bits_of(s->n - 1) + 7) / 8;
    s->zeroed = (size_t)s->rows * (TOPK_ROW_BYTES + 256 * sizeof(int));
    s->workspace = s->zeroed + (size_t)s->rows * (size_t)s->k * sizeof(int);
    const char *names[] = {NULL, "topk_hist_k", "topk_pick_k", "topk_select_k", "topk_rank_k"};
    CUfunction *fns[] = {&s->fn, &s->hist, &s->pick, &s->select, &s->rank};
    st = cuda_gen_compile_n(env, plan, cuda_index_source, names, fns, 5);
  } else {
    st = cuda_gen_compile(env, plan, cuda_index_source, &s->fn);
  }
  if (st) {
    rill__free(env->a, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_index_release(const ops_cuda_env_t *env, void *state) { rill__free(env->a, state); }

size_t cuda_index_workspace(const void *state) { return ((const ix_state_t *)state)->workspace; }

static unsigned grid_dim(long long n, long long cap) { return (unsigned)(n < 1 ? 1 : n < cap ? n : cap); }

/* topk by radix select: the rows' state and bins zeroed, a byte of the K-th key a pass, then the K listed and ranked */
static rill_status_t topk_by_select(const ops_cuda_ctx_t *ctx, ix_state_t *s, CUdeviceptr x, CUdeviceptr y, CUdeviceptr yi) {
  if (ctx->workspace_size < s->workspace) return rill_status_new(RILL_INTERNAL, "topk: the stream's workspace is smaller than the op asked");
  CUdeviceptr ws = ctx->workspace;
  RILL_TRY(CU(ctx->api, cuMemsetD8Async, ws, 0, s->zeroed, ctx->stream));
  unsigned gx = grid_dim((s->n + 255) / 256, 1024), gy = grid_dim(s->rows, 65535);
  for (int p = 0; p < s->passes; p++) {
    void *hargs[] = {&x, &ws, &p}, *pargs[] = {&ws, &p};
    RILL_TRY(CU(ctx->api, cuLaunchKernel, s->hist, gx, gy, 1, 256, 1, 1, 0, ctx->stream, hargs, NULL));
    RILL_TRY(CU(ctx->api, cuLaunchKernel, s->pick, gy, 1, 1, 256, 1, 1, 0, ctx->stream, pargs, NULL));
  }
  void *sargs[] = {&x, &ws}, *rargs[] = {&x, &y, &yi, &ws};
  RILL_TRY(CU(ctx->api, cuLaunchKernel, s->select, gx, gy, 1, 256, 1, 1, 0, ctx->stream, sargs, NULL));
  return CU(ctx->api, cuLaunchKernel, s->rank, grid_dim((s->k + 255) / 256, 1024), gy, 1, 256, 1, 1, 0, ctx->stream, rargs, NULL);
}

rill_status_t cuda_index_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  ix_state_t *s = state;
  if (plan->def->cpu == ops_cpu_topk) {
    if (!plan->p.ix.k) return NULL;
    CUdeviceptr x = (CUdeviceptr)in[0], y = (CUdeviceptr)out[0], yi = (CUdeviceptr)out[1];
    if (s->workspace) return topk_by_select(ctx, s, x, y, yi);
    void *args[] = {&x, &y, &yi, &s->total};
    return cuda_launch(ctx, s->fn, s->total, args);
  }
  if (s->bytes && in[0] != out[0]) RILL_TRY(CU(ctx->api, cuMemcpyDtoDAsync, (CUdeviceptr)out[0], (CUdeviceptr)in[0], s->bytes, ctx->stream));
  CUdeviceptr ix = (CUdeviceptr)in[1], u = (CUdeviceptr)in[2], y = (CUdeviceptr)out[0], err = ctx->error_word;
  void *args[] = {&ix, &u, &y, &err, &s->total};
  return cuda_launch(ctx, s->fn, s->total, args);
}
