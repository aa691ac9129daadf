/* cuda_quant.c: qmatmul and qconv2d on the CUDA device (docs/internals.md,
 * "Quantized products"), kernels/cuda/quant.cu.
 *
 *   qmatmul   cuBLASLt's int8 product (CUDA_R_8I operands, CUBLAS_COMPUTE_32I,
 *             an i32 D) where its rules for int8 hold: regular (column)
 *             ordering, "TN" (its A transposed, B not), leading dimensions
 *             and m, k multiples of 4, 4-byte aligned pointers (both
 *             operands are packed into the workspace, 256-byte aligned):
 *             here b 2-D, K, N and the rows of a multiples of 4, K at most
 *             2^17 (|D| below 2^31). qmm_pack_k makes the i8 operands (u8
 *             less 128; b transposed to [N, K]) and the row and column
 *             sums the zero points need, qmm_epi_k subtracts those terms
 *             and runs the epilogue. Elsewhere (a batched b, other sizes,
 *             no algorithm from the heuristics): qmatmul_k, a thread per
 *             output, exact.
 *   qconv2d   cuDNN's int8 convolution (legacy API, INT8_EXT_CONFIG: NHWC
 *             i8 x and w, i32 accumulation, an f32 y; only
 *             IMPLICIT_PRECOMP_GEMM) where: one group, channels in and out
 *             multiples of 4, symmetric padding, and a window of at most
 *             1024 products (so the sum, below 2^24, is exact in f32, and
 *             the zero-point terms stay below 2^31). qcv_pack_k writes x'
 *             and w' (u8 less 128) channels last and their channel sums;
 *             qcv_epi_k corrects for the zero points over the taps inside
 *             the input and runs the epilogue. Elsewhere, or where cuDNN
 *             refuses the call (its status NOT_SUPPORTED at run time), or
 *             with RILL_QCONV_DNN=0: qconv2d_k, a thread per output, exact.
 * RILL_QMATMUL_LT=0 keeps qmatmul on qmatmul_k (to compare the paths).
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cuda_gen.h"

typedef struct q_state {
  CUfunction fn, pack, epi;
  long long total, rows, pack_n;
  bool lt, dnn;
  /* qconv2d through cuDNN (dnn): descriptors, and the workspace's parts
   * after cuDNN's own (x', w', the f32 sums, S, W1) */
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  size_t dnn_ws, off_xp, off_wp, off_y, off_s, off_w1;
  volatile int dnn_refused;          /* cuDNN refused the call at run time: the direct kernel from then on */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  size_t lt_ws;                      /* cuBLASLt's workspace, at the start of the op's */
  size_t off_ap, off_bp, off_d, off_ra, off_cb, workspace;
  bool pack_a;
} q_state_t;

bool cuda_quant_supports(const ops_plan_t *plan) { return plan->def->cpu == ops_cpu_qmatmul || plan->def->cpu == ops_cpu_qconv2d; }

static const char *zp_ctype(const ops_plan_t *plan) {
  return plan->p.q.yzp >= 0 ? ksrc_ctype(plan->decl->in[plan->p.q.yzp].dtype) : "signed char";
}

/* The defines every kernel of quant.cu takes. */
static rill_status_t common_defs(const ops_plan_t *plan, rill_buf_t *b) {
  const isa_opdecl_t *d = plan->decl;
  const ops_params_t *p = &plan->p;
  rill_dtype_t yd = d->out[0].dtype, sd = p->q.scale >= 0 ? d->in[p->q.scale].dtype : RILL_F32;
  int kind = p->q.scale < 0 ? 0 : p->q.yzp < 0 ? 1 : 2;
  rill_status_t st = ksrc_def(b, "TX", "%s", ksrc_ctype(d->in[0].dtype));
  if (!st) st = ksrc_def(b, "TW", "%s", ksrc_ctype(d->in[1].dtype));
  if (!st) st = ksrc_def(b, "TS", "%s", ksrc_ctype(sd));
  if (!st) st = ksrc_io(b, "LDS", "STS", sd, sd, "double");
  if (!st) st = ksrc_def(b, "TZ", "%s", zp_ctype(plan));
  if (!st) st = ksrc_def(b, "TY", "%s", ksrc_ctype(yd));
  if (!st) st = ksrc_io(b, "LDY", "STY", yd, yd, "double");
  if (!st) st = ksrc_def(b, "OUT_KIND", "%d", kind);
  if (!st) st = ksrc_def(b, "QMIN", "%d", yd == RILL_I8 ? -128 : 0);
  if (!st) st = ksrc_def(b, "QMAX", "%d", yd == RILL_I8 ? 127 : 255);
  if (!st) st = ksrc_def(b, "RELU", "%d", p->act == OPS_ACT_RELU);
  if (!st) st = ksrc_def(b, "HAS_SCALE", "%d", p->q.scale >= 0);
  if (!st) st = ksrc_def(b, "HAS_YZP", "%d", p->q.yzp >= 0);
  if (!st) st = ksrc_def(b, "HAS_YS", "%d", p->q.has_ys);
  if (!st) st = ksrc_def(b, "YS", "%.17g", p->q.has_ys ? p->q.y_scale : 1.0);
  if (!st) st = ksrc_def(b, "SC_F64", "%d", sd == RILL_F64);
  if (!st) st = ksrc_def(b, "BIAS", "%d", p->q.bias >= 0);
  return st;
}

static bool per(const rill_type_t *t) { return t->rank == 1 && t->dims[0] != 1; }

/* qmatmul's sizes and its scale's strides over [M, N] */
static rill_status_t mm_defs(const ops_plan_t *plan, rill_buf_t *b) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *a = &d->in[0], *w = &d->in[1], *y = &d->out[0];
  int64_t M = y->dims[y->rank - 2], N = y->dims[y->rank - 1], K = a->dims[a->rank - 1], rs = 0, cs = 0;
  if (plan->p.q.scale >= 0) {
    const rill_type_t *s = &d->in[plan->p.q.scale];
    if (s->rank == 2) rs = s->dims[0] == 1 ? 0 : s->dims[1], cs = s->dims[1] == 1 ? 0 : 1;
    else if (s->rank == 1 && s->dims[0] != 1) cs = 1;
  }
  rill_status_t st = ksrc_def(b, "MM", "%lldLL", (long long)M);
  if (!st) st = ksrc_def(b, "NN", "%lldLL", (long long)N);
  if (!st) st = ksrc_def(b, "KK", "%lldLL", (long long)K);
  if (!st) st = ksrc_def(b, "ZA_PER", "%d", per(&d->in[2]));
  if (!st) st = ksrc_def(b, "ZB_PER", "%d", per(&d->in[3]));
  if (!st) st = ksrc_def(b, "SC_RS", "%lldLL", (long long)rs);
  if (!st) st = ksrc_def(b, "SC_CS", "%lldLL", (long long)cs);
  (void)w;
  return st;
}

/* qmatmul_k's batch: the result's batch dims, a's and b's matrix strides over them (0 where they broadcast) */
static rill_status_t mm_batch(const ops_plan_t *plan, rill_buf_t *b) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *a = &d->in[0], *w = &d->in[1], *y = &d->out[0];
  int nb = y->rank - 2;
  rill_type_t yb = {y->dtype, nb, {0}}, ab = {a->dtype, a->rank - 2, {0}}, bb = {w->dtype, w->rank - 2, {0}};
  for (int i = 0; i < nb; i++) yb.dims[i] = y->dims[i];
  for (int i = 0; i < ab.rank; i++) ab.dims[i] = a->dims[i];
  for (int i = 0; i < bb.rank; i++) bb.dims[i] = w->dims[i];
  int64_t as[RILL_MAX_RANK] = {0}, bs[RILL_MAX_RANK] = {0};
  ops_broadcast_strides(&ab, &yb, as);
  ops_broadcast_strides(&bb, &yb, bs);
  RILL_TRY(ksrc_def(b, "NBD", "%d", nb));
  const char *names[3] = {"QBD", "QBA", "QBB"};
  for (int k = 0; k < 3; k++) {
    RILL_TRY(rill__buf_printf(b, "__device__ const long long %s[] = {", names[k]));
    for (int i = 0; i < (nb ? nb : 1); i++)
      RILL_TRY(rill__buf_printf(b, "%s%lldLL", i ? ", " : "", nb ? (long long)(k == 0 ? yb.dims[i] : k == 1 ? as[i] : bs[i]) : 1LL));
    RILL_TRY(rill__buf_printf(b, "};\n"));
  }
  return NULL;
}

rill_status_t cuda_quant_source(const ops_plan_t *plan, int which, rill_buf_t *b, const char **out_name) {
  const isa_opdecl_t *d = plan->decl;
  bool mm = plan->def->cpu == ops_cpu_qmatmul;
  rill_status_t st = common_defs(plan, b);
  if (mm) {
    if (!st) st = mm_defs(plan, b);
    const rill_type_t *y = &d->out[0];
    long long rows = cuda_numel(y) / (y->dims[y->rank - 1] ? y->dims[y->rank - 1] : 1);
    if (which == 0) {
      if (!st) st = ksrc_def(b, "QMATMUL", "1");
      if (!st) st = mm_batch(plan, b);
      *out_name = "qmatmul_k";
    } else {
      if (!st) st = ksrc_def(b, which == 1 ? "QPACK" : "QEPI", "1");
      if (!st) st = ksrc_def(b, "ROWS", "%lldLL", rows);
      if (!st) st = ksrc_def(b, "PACK_A", "1");
      if (!st) st = ksrc_def(b, "SHIFT_A", "%d", d->in[0].dtype == RILL_U8 ? 128 : 0);
      if (!st) st = ksrc_def(b, "SHIFT_B", "%d", d->in[1].dtype == RILL_U8 ? 128 : 0);
      *out_name = which == 1 ? "qmm_pack_k" : "qmm_epi_k";
    }
  } else {
    const rill_type_t *x = &d->in[0], *w = &d->in[1], *y = &d->out[0];
    const ops_params_t *p = &plan->p;
    const struct { const char *n; long long v; } defs[] = {
        {"CC", x->dims[1]},   {"HH", x->dims[2]},    {"WW", x->dims[3]},    {"OO", w->dims[0]},        {"CG", w->dims[1]},
        {"KH", w->dims[2]},   {"KW", w->dims[3]},    {"OH", y->dims[2]},    {"OW", y->dims[3]},        {"SH", p->stride[0]},
        {"SW", p->stride[1]}, {"PT", p->pad[0]},     {"PL", p->pad[1]},     {"DH", p->dilation[0]},    {"DW", p->dilation[1]},
        {"GG", p->groups},    {"ZB_PER", per(&d->in[3])}, {"SC_PER", p->q.scale >= 0 && per(&d->in[p->q.scale])}};
    for (size_t i = 0; !st && i < sizeof defs / sizeof *defs; i++) st = ksrc_def(b, defs[i].n, "%lldLL", defs[i].v);
    if (!st) st = ksrc_def(b, "NB", "%lldLL", (long long)x->dims[0]);
    if (!st) st = ksrc_def(b, "SHIFT_A", "%d", x->dtype == RILL_U8 ? 128 : 0);
    if (!st) st = ksrc_def(b, "SHIFT_B", "%d", w->dtype == RILL_U8 ? 128 : 0);
    if (!st) st = ksrc_def(b, which == 0 ? "QCONV" : which == 1 ? "QCPACK" : "QCEPI", "1");
    *out_name = which == 0 ? "qconv2d_k" : which == 1 ? "qcv_pack_k" : "qcv_epi_k";
  }
  if (!st) st = rill__buf_printf(b, "%s\n%s", rill_kernel_prelude, rill_kernel_quant);
  return st;
}

static rill_status_t src0(const ops_plan_t *p, rill_buf_t *b, const char **n) { return cuda_quant_source(p, 0, b, n); }
static rill_status_t src1(const ops_plan_t *p, rill_buf_t *b, const char **n) { return cuda_quant_source(p, 1, b, n); }
static rill_status_t src2(const ops_plan_t *p, rill_buf_t *b, const char **n) { return cuda_quant_source(p, 2, b, n); }

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* cuBLASLt's int8 product for qmatmul where its rules hold (the file's
 * header); false (s->lt unset) where they do not or no algorithm comes */
static rill_status_t prep_lt(const ops_cuda_env_t *env, const ops_plan_t *plan, q_state_t *s) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *a = &d->in[0], *w = &d->in[1], *y = &d->out[0];
  long long N = y->dims[y->rank - 1], K = a->dims[a->rank - 1], rows = N ? cuda_numel(y) / N : 0;
  const char *e = getenv("RILL_QMATMUL_LT");
  if ((e && !strcmp(e, "0")) || !env->lt || w->rank != 2 || rows <= 0 || N <= 0 || K <= 0 || K % 4 || N % 4 || rows % 4 || K > (1 << 17) || rows > INT32_MAX ||
      N > INT32_MAX)
    return NULL;
  const rill_cuda_api_t *api = env->api;
  RILL_TRY(CUBLAS(api, cublasLtMatmulDescCreate, &s->desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
  /* row-major D[rows, N] = a' b' is column-major D^T = b'^T a'^T: cuBLASLt's A is b' stored [N, K] (K x N, read transposed), its B is a' [rows, K] */
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  RILL_TRY(CUBLAS(api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  RILL_TRY(CUBLAS(api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  RILL_TRY(CUBLAS(api, cublasLtMatrixLayoutCreate, &s->la, CUDA_R_8I, (uint64_t)K, (uint64_t)N, K));
  RILL_TRY(CUBLAS(api, cublasLtMatrixLayoutCreate, &s->lb, CUDA_R_8I, (uint64_t)K, (uint64_t)rows, K));
  RILL_TRY(CUBLAS(api, cublasLtMatrixLayoutCreate, &s->lc, CUDA_R_32I, (uint64_t)N, (uint64_t)rows, N));
  cublasLtMatmulPreference_t pref;
  size_t ws = (size_t)32 << 20;
  RILL_TRY(CUBLAS(api, cublasLtMatmulPreferenceCreate, &pref));
  rill_status_t st = CUBLAS(api, cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t res[1];
  int found = 0;
  if (!st) {
    cublasStatus_t cs = api->cublasLtMatmulAlgoGetHeuristic(env->lt, s->desc, s->la, s->lb, s->lc, s->lc, pref, 1, res, &found); /* (thread-safe: cuda_nn.c) */
    if (cs != CUBLAS_STATUS_SUCCESS) found = 0; /* these types or sizes refused: the generated kernel */
  }
  api->cublasLtMatmulPreferenceDestroy(pref);
  RILL_TRY(st);
  if (!found) return NULL;
  s->lt = true;
  s->algo = res[0].algo;
  s->lt_ws = up256(res[0].workspaceSize);
  s->rows = rows;
  /* a is copied even where it is i8 already: cuBLASLt wants its pointer 4-byte aligned, which a view's need not be */
  s->pack_a = true;
  size_t o = s->lt_ws;
  s->off_ap = o, o += s->pack_a ? up256((size_t)(rows * K)) : 0;
  s->off_bp = o, o += up256((size_t)(N * K));
  s->off_d = o, o += up256((size_t)(rows * N) * 4);
  s->off_ra = o, o += up256((size_t)rows * 4);
  s->off_cb = o, o += up256((size_t)N * 4);
  s->workspace = o;
  RILL_TRY(cuda_gen_compile(env, plan, src1, &s->pack));
  return cuda_gen_compile(env, plan, src2, &s->epi);
}

/* cuDNN's int8 convolution for qconv2d where it applies (the file's header); s->dnn unset where it does not */
static rill_status_t prep_dnn(const ops_cuda_env_t *env, const ops_plan_t *plan, q_state_t *s) {
  const isa_opdecl_t *d = plan->decl;
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &d->in[0], *w = &d->in[1], *y = &d->out[0];
  long long N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], O = w->dims[0], KH = w->dims[2], KW = w->dims[3];
  const char *e = getenv("RILL_QCONV_DNN");
  if ((e && !strcmp(e, "0")) || !env->dnn || p->groups != 1 || C % 4 || O % 4 || C * KH * KW > 1024 || p->pad[0] != p->pad[2] ||
      p->pad[1] != p->pad[3] || cuda_numel(x) > INT32_MAX || cuda_numel(y) > INT32_MAX || s->total == 0)
    return NULL;
  const rill_cuda_api_t *api = env->api;
  RILL_TRY(CUDNN(api, cudnnCreateTensorDescriptor, &s->xd));
  RILL_TRY(CUDNN(api, cudnnCreateTensorDescriptor, &s->yd));
  RILL_TRY(CUDNN(api, cudnnCreateFilterDescriptor, &s->wd));
  RILL_TRY(CUDNN(api, cudnnCreateConvolutionDescriptor, &s->cd));
  RILL_TRY(CUDNN(api, cudnnSetTensor4dDescriptor, s->xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_INT8, (int)N, (int)C, (int)H, (int)W));
  RILL_TRY(CUDNN(api, cudnnSetFilter4dDescriptor, s->wd, CUDNN_DATA_INT8, CUDNN_TENSOR_NHWC, (int)O, (int)C, (int)KH, (int)KW));
  RILL_TRY(CUDNN(api, cudnnSetTensor4dDescriptor, s->yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)N, (int)O, (int)y->dims[2], (int)y->dims[3]));
  RILL_TRY(CUDNN(api, cudnnSetConvolution2dDescriptor, s->cd, (int)p->pad[0], (int)p->pad[1], (int)p->stride[0], (int)p->stride[1], (int)p->dilation[0],
                 (int)p->dilation[1], CUDNN_CROSS_CORRELATION, CUDNN_DATA_INT32));
  size_t ws = 0;
  pthread_mutex_lock(env->lib_mu);
  cudnnStatus_t cs = api->cudnnGetConvolutionForwardWorkspaceSize(env->dnn, s->xd, s->wd, s->cd, s->yd, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, &ws);
  pthread_mutex_unlock(env->lib_mu);
  if (cs != CUDNN_STATUS_SUCCESS) return NULL; /* this configuration refused: the direct kernel */
  s->dnn = true;
  s->dnn_ws = up256(ws);
  size_t o = s->dnn_ws;
  s->off_xp = o, o += up256((size_t)cuda_numel(x));
  s->off_wp = o, o += up256((size_t)cuda_numel(w));
  s->off_y = o, o += up256((size_t)cuda_numel(y) * 4);
  s->off_s = o, o += up256((size_t)(N * H * W) * 4);
  s->off_w1 = o, o += up256((size_t)(O * KH * KW) * 4);
  s->workspace = o;
  s->pack_n = cuda_numel(x) + cuda_numel(w) + N * H * W + O * KH * KW;
  RILL_TRY(cuda_gen_compile(env, plan, src1, &s->pack));
  return cuda_gen_compile(env, plan, src2, &s->epi);
}

bool cuda_quant_uses_cudnn(const void *state) { return ((const q_state_t *)state)->dnn; }

void cuda_quant_release(const ops_cuda_env_t *env, void *state) {
  q_state_t *s = state;
  if (!s) return;
  const rill_cuda_api_t *api = env->api;
  if (s->xd) api->cudnnDestroyTensorDescriptor(s->xd);
  if (s->yd) api->cudnnDestroyTensorDescriptor(s->yd);
  if (s->wd) api->cudnnDestroyFilterDescriptor(s->wd);
  if (s->cd) api->cudnnDestroyConvolutionDescriptor(s->cd);
  if (s->desc) api->cublasLtMatmulDescDestroy(s->desc);
  if (s->la) api->cublasLtMatrixLayoutDestroy(s->la);
  if (s->lb) api->cublasLtMatrixLayoutDestroy(s->lb);
  if (s->lc) api->cublasLtMatrixLayoutDestroy(s->lc);
  rill__free(env->a, s);
}

rill_status_t cuda_quant_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out) {
  q_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  s->total = cuda_numel(&plan->decl->out[0]);
  rill_status_t st = plan->def->cpu == ops_cpu_qmatmul ? prep_lt(env, plan, s) : prep_dnn(env, plan, s);
  /* the direct kernel: the path where no library applies, and cuDNN's fallback */
  if (!st && !s->lt) st = cuda_gen_compile(env, plan, src0, &s->fn);
  if (st) {
    cuda_quant_release(env, s);
    return st;
  }
  *out = s;
  return NULL;
}

size_t cuda_quant_workspace(const void *state) { return ((const q_state_t *)state)->workspace; }

rill_status_t cuda_quant_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  q_state_t *s = state;
  const ops_params_t *p = &plan->p;
  CUdeviceptr x = (CUdeviceptr)in[0], w = (CUdeviceptr)in[1], xz = (CUdeviceptr)in[2], wz = (CUdeviceptr)in[3], y = (CUdeviceptr)out[0];
  CUdeviceptr bias = p->q.bias >= 0 ? (CUdeviceptr)in[p->q.bias] : 0, sc = p->q.scale >= 0 ? (CUdeviceptr)in[p->q.scale] : 0;
  CUdeviceptr yz = p->q.yzp >= 0 ? (CUdeviceptr)in[p->q.yzp] : 0;
  if (s->dnn && !s->dnn_refused && ctx->dnn) {
    CUdeviceptr ws = ctx->workspace, xp = ws + s->off_xp, wp = ws + s->off_wp, yf = ws + s->off_y, S = ws + s->off_s, W1 = ws + s->off_w1;
    void *pargs[] = {&x, &w, &xp, &wp, &S, &W1};
    RILL_TRY(cuda_launch(ctx, s->pack, s->pack_n, pargs));
    float one = 1, zero = 0;
    cudnnStatus_t cs = ctx->api->cudnnConvolutionForward(ctx->dnn, &one, s->xd, (const void *)xp, s->wd, (const void *)wp, s->cd,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, (void *)ws, s->dnn_ws, &zero, s->yd, (void *)yf);
    if (cs == CUDNN_STATUS_SUCCESS) {
      void *eargs[] = {&yf, &S, &W1, &xz, &wz, &bias, &sc, &yz, &y, &s->total};
      return cuda_launch(ctx, s->epi, s->total, eargs);
    }
    if (cs != CUDNN_STATUS_NOT_SUPPORTED && cs != CUDNN_STATUS_BAD_PARAM) return rill__cudnn_check(cs, "cudnnConvolutionForward", __FILE__, __LINE__);
    s->dnn_refused = 1; /* this cuDNN or GPU has no such int8 convolution: the direct kernel from now on */
  }
  if (!s->lt) {
    void *args[] = {&x, &w, &xz, &wz, &bias, &sc, &yz, &y, &s->total};
    return cuda_launch(ctx, s->fn, s->total, args);
  }
  CUdeviceptr ws = ctx->workspace, ap = s->pack_a ? ws + s->off_ap : x, bp = ws + s->off_bp, dd = ws + s->off_d, ra = ws + s->off_ra,
              cb = ws + s->off_cb;
  void *pargs[] = {&x, &w, &ap, &bp, &ra, &cb};
  const isa_opdecl_t *d = plan->decl;
  long long N = d->out[0].dims[d->out[0].rank - 1];
  RILL_TRY(cuda_launch(ctx, s->pack, s->rows + N, pargs));
  int32_t one = 1, zero = 0;
  RILL_TRY(CUBLAS(ctx->api, cublasLtMatmul, ctx->lt, s->desc, &one, (const void *)bp, s->la, (const void *)ap, s->lb, &zero, (const void *)dd, s->lc,
                  (void *)dd, s->lc, &s->algo, (void *)ws, s->lt_ws, (cudaStream_t)ctx->stream));
  void *eargs[] = {&dd, &ra, &cb, &xz, &wz, &bias, &sc, &yz, &y, &s->total};
  return cuda_launch(ctx, s->epi, s->total, eargs);
}
