/* cuda_nn.c: the CUDA ops beyond elementwise and data movement.
 *
 *   softmax, log_softmax, layer_norm   a block per row, block reductions
 *   sum, mean, max, min, argmax        a warp per output, shuffle reductions
 *   batch_norm, pools                  a thread per output element
 *   matmul, linear                     cuBLASLt (f16, bf16, f32, f64; bias in
 *                                      the epilogue); a generated kernel for
 *                                      integers and partly broadcast batches
 *   conv2d                             cuDNN, the algorithm chosen once per
 *                                      shape; asymmetric padding is applied
 *                                      by a copy into a padded buffer first
 * conv2d and the pools take NCHW or, with layout="nhwc", NHWC: cuDNN's NHWC
 * descriptors, and pool.cu and channel_bias.cu index channels last where
 * their source defines NHWC.
 * Accumulation is in float for f16, bf16 and f32, double for f64 and
 * long long for integers, as in the CPU reference.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gen.h"
#include "rill_config.h"
#if RILL_HAVE_NVTX_MEM
#include <pthread.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>
#endif

enum { NN_ROW, NN_LN, NN_REDUCE, NN_ARGMAX, NN_BN, NN_POOL, NN_LT, NN_MM_KERNEL, NN_GEMV, NN_CONV };
enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD };

enum { FGRAPH = 13 };
typedef struct nn_state {
  int kind;
  CUfunction fn, fn2, fn3;
  kshape_t sh, sh2, sh3;
  long long grid, threads;
  int split;                 /* reduce: warps an output (reduce_part_k, reduce_final_k), 1: reduce_k alone */
  /* cuBLASLt */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  int32_t lt_ids[16];        /* the heuristics' algorithms (ids), the candidates */
  int nlt;
  bool gemv_fits;            /* gemv.cu's kernels may run the product (a candidate) */
  bool gemv_kn;              /* gemv.cu's gemv_kn_k: b's rows contiguous (linear's weight="kn") */
  size_t out_bytes;          /* D, which cuBLASLt writes whole */
  size_t workspace;
  bool bias;
  double one_d, zero_d;
  float one_f, zero_f;
  const void *one, *zero;   /* the library's alpha and beta: double for f64, else float */
  /* cuDNN */
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnConvolutionFwdAlgo_t conv_algo;
  cudnnPoolingDescriptor_t pd;
  int pool_vec;              /* pool.cu's channels a thread (fn; fn2 takes one) */
  bool pool_warp;            /* pool.cu takes a warp per output */
  bool pool_dnn, pool_dnn_cap; /* cuDNN's pooling call (pd) rather than pool.cu: interpreted, and captured */
  cudnnBackendDescriptor_t graph[6];  /* the graph API's tensors, convolution, operation and graph */
  cudnnBackendDescriptor_t fgraph[FGRAPH]; /* the same convolution with its bias, residual and activation (fused_graph) */
  cudnnBackendDescriptor_t plan;      /* non-NULL: run through the graph API */
  size_t plan_ws;
  bool plan_fused, cplan_fused;       /* the plan adds the bias and applies the activation itself */
  bool tf32;                          /* an f32 convolution in --precision=tf32: TF32 tensor cores allowed */
  /* Captured into a graph, a launch costs the host nothing, so there the
   * choice by device time alone counts: cplan (a plan, or NULL: the legacy
   * call), where it differs from the choice above (capture_differs). */
  bool capture_differs;
  cudnnBackendDescriptor_t cplan;
  size_t cplan_ws;
  size_t padded_bytes;      /* > 0: x is first copied into a padded buffer */
  /* conv2d: the generated grouped convolution (cuda_gconv.c) where it fits;
   * it runs instead of cuDNN interpreted (gconv) and captured (gconv_cap) */
  CUfunction gconv_fn;
  kshape_t gsh;
  bool gconv, gconv_cap;
  /* matmul, linear: an activation no epilogue ran, applied in place after;
   * linear's residual z (res): cuBLASLt's C (beta 1) on NN_LT, else added by that post kernel first */
  int post_act;
  bool res;
  CUfunction act_fn, act_fnv; /* act_fnv (where there is one): act_vec elements a thread, where the result is aligned to act_vbytes */
  int act_vec, act_vbytes;
  kgen_args_t act_args;
} nn_state_t;

/* Whether the post kernel adds linear's residual z (every path but cuBLASLt's, which takes z as C). */
static inline bool post_res(const nn_state_t *s) { return s->res && s->kind != NN_LT; }


bool cuda_nn_supports(const ops_plan_t *plan) {
  ops_cpu_fn f = plan->def->cpu;
  return f == ops_cpu_softmax || f == ops_cpu_layer_norm || f == ops_cpu_reduce || f == ops_cpu_argmax ||
         f == ops_cpu_batch_norm || f == ops_cpu_pool2d || f == ops_cpu_adaptive_pool || f == ops_cpu_matmul ||
         f == ops_cpu_linear || f == ops_cpu_conv2d;
}

bool cuda_nn_uses_cudnn(const void *state) {
  const nn_state_t *s = state;
  return s->kind == NN_CONV || (s->pd && (s->pool_dnn || s->pool_dnn_cap));
}

size_t cuda_nn_workspace(const void *state) {
  const nn_state_t *s = state;
  return s->workspace + s->padded_bytes;
}

/* T, C and the load/store conversions of one dtype (TY for an output dtype). */
static rill_status_t types(rill_buf_t *b, rill_dtype_t din, rill_dtype_t dout, const char *C) {
  RILL_TRY(ksrc_def(b, "T", "%s", ksrc_ctype(din)));
  RILL_TRY(ksrc_def(b, "TY", "%s", ksrc_ctype(dout)));
  RILL_TRY(ksrc_def(b, "C", "%s", C));
  return ksrc_io(b, "LD", "ST", din, dout, C);
}

/* The start of a normalisation kernel's source: its types, and EPS in its compute type. */
static rill_status_t norm_prelude(rill_buf_t *b, rill_dtype_t dt, double eps) {
  const char *C = ksrc_comp(dt);
  char lit[64];
  ksrc_lit(lit, sizeof lit, eps, C);
  RILL_TRY(types(b, dt, dt, C));
  return ksrc_def(b, "EPS", "%s", lit);
}

/* Rows of contiguous elements (softmax's, layer_norm's), `rows` of `len`:
 * up to 1024 elements a row, a warp per row holding it in registers, WARP
 * (returned: a power of two, so that few lengths share a kernel) elements
 * a lane; longer rows, or len -1 (elements apart), a block per row (0
 * returned), which reads the row once a pass.
 * Sets the grid (256-thread blocks) and, for the warp's kernel, dims[2]. */
static int row_warp(nn_state_t *s, long long rows, long long len) {
  if (len <= 0 || len > 1024) {
    s->grid = rows;
    return 0;
  }
  int warp = 1;
  while (32LL * warp < len) warp *= 2;
  s->sh.dims[2] = rows;
  s->grid = (rows * 32 + 255) / 256;
  return warp;
}

/* A row kernel's source with the plan's prologue and epilogue (PROLOGUE
 * and pro(v), EPILOGUE and epi(v)), compiled. */
/* The kernel with the plan's merged elementwise ops around it; its n
 * functions names[i] from the one module. */
static rill_status_t build_around_n(const ops_cuda_env_t *env, const ops_plan_t *plan, rill_buf_t *b, rill_status_t st, const char *kernel,
                                    const char *const *names, CUfunction *const *fns, int n) {
  rill_dtype_t dt = plan->decl->in[0].dtype;
  rill_buf_t extra;
  rill__buf_init(&extra, env->a);
  if (!st) st = ksrc_def(b, "PROLOGUE", "%d", plan->pro != NULL);
  if (!st) st = ksrc_def(b, "EPILOGUE", "%d", plan->epi != NULL);
  if (!st && plan->pro) st = cuda_around_function(&extra, "pro", plan->pro, dt, plan->decl->nin > 1);
  if (!st && plan->epi) st = cuda_around_function(&extra, "epi", plan->epi, dt, false);
  if (!st) st = rill__buf_append(&extra, "", 1);
  if (!st) st = rill__buf_printf(b, "%s\n%s%s", rill_kernel_prelude, (const char *)extra.data, kernel);
  for (int i = 0; !st && i < n; i++) st = kcache_get(env->cache, (const char *)b->data, names[i], fns[i]);
  rill__buf_free(b);
  rill__buf_free(&extra);
  return st;
}

static rill_status_t build_around(const ops_cuda_env_t *env, const ops_plan_t *plan, rill_buf_t *b, rill_status_t st, const char *kernel,
                                  const char *name, CUfunction *fn) {
  return build_around_n(env, plan, b, st, kernel, &name, &fn, 1);
}

/* softmax / log_softmax along an axis: rows = outer * inner, each of `len` elements `inner` apart. */
static rill_status_t prep_softmax(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s) {
  const rill_type_t *x = &plan->decl->in[0];
  long long outer = 1, inner = 1, len = x->rank ? x->dims[plan->p.axis] : 1;
  for (int i = 0; i < x->rank; i++) {
    if (i < plan->p.axis) outer *= x->dims[i];
    else if (i > plan->p.axis) inner *= x->dims[i];
  }
  s->kind = NN_ROW;
  s->sh.dims[0] = len;
  s->sh.dims[1] = inner;
  int warp = row_warp(s, outer * inner, inner == 1 ? len : -1);
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = types(&b, x->dtype, x->dtype, ksrc_comp(x->dtype));
  if (!st) st = ksrc_def(&b, "WARP", "%d", warp);
  if (!st) st = ksrc_def(&b, "LOG_SOFTMAX", "%d", plan->p.code == 1);
  /* a mask (operand 2, read by the prologue): its offset from the element's
   * index through x's dims (sh.st[0]) and its strides over them (sh.st[1],
   * 0 where it broadcasts) */
  if (!st) st = ksrc_def(&b, "MASK", "%d", plan->decl->nin > 1 ? x->rank : 0);
  if (plan->decl->nin > 1) {
    int64_t mst[RILL_MAX_RANK];
    ops_broadcast_strides(&plan->decl->in[1], x, mst);
    for (int i = 0; i < x->rank; i++) {
      s->sh.st[0][i] = x->dims[i];
      s->sh.st[1][i] = mst[i];
    }
  }
  bool pre = plan->p.scale != 1 || plan->p.divisor != 1;
  if (!st) st = ksrc_def(&b, "PRESCALE", "%d", pre);
  if (!st && pre) {
    char sc[64], dv[64];
    ksrc_lit(sc, sizeof sc, plan->p.scale, ksrc_comp(x->dtype));
    ksrc_lit(dv, sizeof dv, plan->p.divisor, ksrc_comp(x->dtype));
    st = ksrc_def(&b, "SCALE", "%s", sc);
    if (!st) st = ksrc_def(&b, "DIVISOR", "%s", dv);
  }
  return build_around(env, plan, &b, st, rill_kernel_softmax, warp ? "softmax_warp_k" : "softmax_k", &s->fn);
}

static rill_status_t prep_layer_norm(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  long long outer = 1, n = 1;
  for (int i = 0; i < x->rank; i++) {
    if (i < plan->p.axis) outer *= x->dims[i];
    else n *= x->dims[i];
  }
  s->kind = NN_LN;
  s->sh.dims[0] = n;
  int warp = row_warp(s, outer, n);
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = norm_prelude(&b, x->dtype, plan->p.eps);
  if (!st) st = ksrc_def(&b, "WARP", "%d", warp);
  if (!st) st = ksrc_def(&b, "HAS_GAMMA", "%d", d->nin > 1);
  if (!st) st = ksrc_def(&b, "HAS_BETA", "%d", d->nin > 2);
  if (!st) st = ksrc_def(&b, "RESIDUAL", "%d", d->nin > 3);
  rill_dtype_t pt = d->nin > 1 ? d->in[1].dtype : x->dtype; /* gamma's and beta's (x's, or f32 for a half x) */
  if (!st) st = ksrc_def(&b, "P", "%s", ksrc_ctype(pt));
  if (!st) st = ksrc_def(&b, "MIXED", "%d", pt != x->dtype);
  if (!st) st = ksrc_io(&b, "LDP", "STP", pt, pt, ksrc_comp(x->dtype));
  return build_around(env, plan, &b, st, rill_kernel_layer_norm, warp ? "layer_norm_warp_k" : "layer_norm_k", &s->fn);
}

/* sum/mean/max/min/prod and argmax: a warp per output element. st[0]: kept
 * strides (over dims), st[1]: reduced strides, st[2]: reduced sizes. A
 * reduction of few outputs over many elements (a count of a mask, a loss)
 * splits each output over s->split warps, enough to fill the GPU, each of
 * REDUCE_SPLIT_MIN elements or more: a warp alone over millions takes tens
 * of ms. The partials go to the stream's workspace. */
#define REDUCE_SPLIT_MIN 4096
#define REDUCE_SPLIT_MAX 4096
static rill_status_t prep_reduce(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s, bool argmax) {
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  int64_t xs[RILL_MAX_RANK];
  cuda_row_strides(x, xs);
  int nk = 0, nr = 0;
  long long R = 1;
  uint32_t mask = argmax ? (plan->p.axis < 0 ? (uint32_t)((1u << x->rank) - 1) : 1u << plan->p.axis) : plan->p.axis_mask;
  for (int i = 0; i < x->rank; i++) {
    if (mask & (1u << i)) {
      s->sh.st[1][nr] = xs[i];
      s->sh.st[2][nr++] = x->dims[i];
      R *= x->dims[i];
    } else {
      s->sh.dims[nk] = x->dims[i];
      s->sh.st[0][nk++] = xs[i];
    }
  }
  s->kind = argmax ? NN_ARGMAX : NN_REDUCE;
  s->sh.n = cuda_numel(ot);
  s->sh.base[0] = R;
  s->threads = s->sh.n * 32;
  rill_dtype_t dt = x->dtype;
  bool fl = rill__is_float(dt);
  const char *C = ksrc_comp(dt);
  int code = plan->p.code;
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = types(&b, dt, argmax ? RILL_I64 : ot->dtype, C);
  if (!st) st = ksrc_def(&b, "NK", "%d", nk);
  if (!st) st = ksrc_def(&b, "NR", "%d", nr);
  if (argmax) return ksrc_build(env->cache, &b, st, rill_kernel_argmax, "argmax_k", &s->fn);
  bool sum = code == R_SUM || code == R_MEAN, mx = code == R_MAX, prod = code == R_PROD;
  /* integer products wrap as the CPU reference's (unsigned arithmetic) */
  if (!st) st = ksrc_def(&b, "INIT", "%s", sum ? "((C)0)" : prod ? "((C)1)" : fl ? (mx ? "(-RILL_INF)" : "RILL_INF")
                                                 : dt == RILL_U64 ? (mx ? "((C)0)" : "(~0ull)") : (mx ? "(-9223372036854775807ll - 1)" : "9223372036854775807ll"));
  if (!st) st = ksrc_def(&b, "COMBINE(acc, v)", "%s", sum ? "((acc) + (v))" : prod ? (fl ? "((acc) * (v))" : "((C)((unsigned long long)(acc) * (unsigned long long)(v)))")
                                                       : fl ? (mx ? "nanmax(acc, v)" : "nanmin(acc, v)") : (mx ? "((acc) > (v) ? (acc) : (v))" : "((acc) < (v) ? (acc) : (v))"));
  if (!st) st = ksrc_def(&b, "FINAL(acc, R)", "%s", code == R_MEAN ? "((acc) / (C)((R) ? (R) : 1))" : "(acc)");
  long long want = (long long)env->num_sms * 32 / (s->sh.n ? s->sh.n : 1), most = R / REDUCE_SPLIT_MIN;
  long long split = want < most ? want : most;
  s->split = split > REDUCE_SPLIT_MAX ? REDUCE_SPLIT_MAX : split > 1 ? (int)split : 1;
  s->workspace = s->split > 1 ? (size_t)s->sh.n * (size_t)s->split * 8 : 0; /* partials: C is at most 8 bytes */
  if (!st) st = ksrc_def(&b, "SPLIT", "%d", s->split);
  const char *names[] = {"reduce_k", "reduce_part_k", "reduce_final_k"};
  CUfunction *fns[] = {&s->fn, &s->fn2, &s->fn3};
  return build_around_n(env, plan, &b, st, rill_kernel_reduce, names, fns, s->split > 1 ? 3 : 1);
}

static rill_status_t prep_batch_norm(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s) {
  const rill_type_t *x = &plan->decl->in[0];
  long long inner = 1;
  for (int i = 2; i < x->rank; i++) inner *= x->dims[i];
  s->kind = NN_BN;
  s->sh.n = cuda_numel(x);
  s->sh.dims[0] = x->dims[1];
  s->sh.dims[1] = inner;
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = norm_prelude(&b, x->dtype, plan->p.eps);
  if (!st) st = ksrc_def(&b, "I", "%s", ksrc_idx(s->sh.n));
  return ksrc_build(env->cache, &b, st, rill_kernel_batch_norm, "batch_norm_k", &s->fn);
}

static cudnnDataType_t dnn_dt(rill_dtype_t d);

/* A 4-d tensor's dims in the order cuDNN's descriptors take them, N, C, H,
 * W, whatever its layout in memory: with nhwc the type is [N,H,W,C] (and
 * conv2d's weight [K,R,S,C] gives [K,C,R,S]). */
static void nchw_dims(const int64_t d[4], bool nhwc, int64_t out[4]) {
  out[0] = d[0];
  out[1] = d[nhwc ? 3 : 1];
  out[2] = d[nhwc ? 1 : 2];
  out[3] = d[nhwc ? 2 : 3];
}

/* A 4-d tensor descriptor: dims N, C, H, W (nchw_dims), laid out NCHW or, with nhwc, NHWC. */
static rill_status_t dnn_tensor(const rill_cuda_api_t *api, cudnnTensorDescriptor_t *t, rill_dtype_t dt, const int64_t dims[4], bool nhwc) {
  RILL_TRY(CUDNN(api, cudnnCreateTensorDescriptor, t));
  return CUDNN(api, cudnnSetTensor4dDescriptor, *t, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, dnn_dt(dt), (int)dims[0], (int)dims[1],
               (int)dims[2], (int)dims[3]);
}

/* cuDNN pooling where its output size and divisor equal PyTorch's: rank 4
 * and no window added by ceil_mode (then no window hangs past the padding).
 * Sets s->pd (and the tensor descriptors) where it applies. */
static rill_status_t prep_dnn_pool(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s) {
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  if (x->rank != 4 || (x->dtype != RILL_F32 && x->dtype != RILL_F16)) return NULL;
  int h = p->nhwc ? 1 : 2;
  for (int i = 0; i < 2; i++)
    if (ot->dims[h + i] != (x->dims[h + i] + 2 * p->pad[i] - p->kernel[i]) / p->stride[i] + 1) return NULL;
  const rill_cuda_api_t *api = env->api;
  rill_dtype_t dt = x->dtype;
  cudnnPoolingMode_t mode = p->code == 1 ? (p->count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING)
                                         : CUDNN_POOLING_MAX_DETERMINISTIC;
  int64_t xl[4], yl[4];
  nchw_dims(x->dims, p->nhwc, xl);
  nchw_dims(ot->dims, p->nhwc, yl);
  RILL_TRY(dnn_tensor(api, &s->xd, dt, xl, p->nhwc));
  RILL_TRY(dnn_tensor(api, &s->yd, dt, yl, p->nhwc));
  RILL_TRY(CUDNN(api, cudnnCreatePoolingDescriptor, &s->pd));
  return CUDNN(api, cudnnSetPooling2dDescriptor, s->pd, mode, CUDNN_PROPAGATE_NAN, (int)p->kernel[0], (int)p->kernel[1],
               (int)p->pad[0], (int)p->pad[1], (int)p->stride[0], (int)p->stride[1]);
}

/* Whether pool.cu takes a warp per output: adaptive pooling whose windows
 * hold 16 elements or more (a global pool's one window was a thread's
 * serial sum: 10 us of resnet50's 387, f16, H100, run AI). */
static bool pool_warp(const ops_plan_t *plan, bool adaptive) {
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  int h = plan->p.nhwc ? 1 : x->rank - 2;
  return adaptive && ot->dims[h] && ot->dims[h + 1] && (x->dims[h] / ot->dims[h]) * (x->dims[h + 1] / ot->dims[h + 1]) >= 16;
}

/* Threads of a pool.cu launch with vec channels a thread. */
static long long pool_threads(const nn_state_t *s, int vec) { return s->sh.n / vec * (s->pool_warp ? 32 : 1); }

/* pool.cu for the op, with vec channels a thread. */
static rill_status_t gen_pool(const ops_cuda_env_t *env, const ops_plan_t *plan, bool adaptive, int vec, CUfunction *fn) {
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  long long span = cuda_numel(x) > cuda_numel(ot) ? cuda_numel(x) : cuda_numel(ot);
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = types(&b, x->dtype, ot->dtype, ksrc_comp(x->dtype));
  if (!st && p->nhwc) st = ksrc_def(&b, "NHWC", "1");
  if (!st) st = ksrc_def(&b, "VEC", "%d", vec);
  if (!st) st = ksrc_def(&b, "I", "%s", ksrc_idx(span));
  if (!st) st = ksrc_def(&b, "MODE", "%d", adaptive ? 2 : p->code == 1 ? 1 : 0);
  if (!st) st = ksrc_def(&b, "KH", "%lld", adaptive ? 1 : (long long)p->kernel[0]);
  if (!st) st = ksrc_def(&b, "KW", "%lld", adaptive ? 1 : (long long)p->kernel[1]);
  if (!st) st = ksrc_def(&b, "SH", "%lld", adaptive ? 1 : (long long)p->stride[0]);
  if (!st) st = ksrc_def(&b, "SW", "%lld", adaptive ? 1 : (long long)p->stride[1]);
  if (!st) st = ksrc_def(&b, "PH", "%lld", adaptive ? 0 : (long long)p->pad[0]);
  if (!st) st = ksrc_def(&b, "PW", "%lld", adaptive ? 0 : (long long)p->pad[1]);
  if (!st) st = ksrc_def(&b, "INCLUDE_PAD", "%d", adaptive || p->count_include_pad);
  if (!st) st = ksrc_def(&b, "UNROLL", "%d", !adaptive && p->kernel[0] * p->kernel[1] <= 64);
  if (!st && pool_warp(plan, adaptive)) st = ksrc_def(&b, "WARP", "1");
  return ksrc_build(env->cache, &b, st, rill_kernel_pool, "pool_k", fn);
}

static double pool_us(const ops_cuda_env_t *env, const nn_state_t *s, CUdeviceptr x, CUdeviceptr y, bool dnn, bool dev);
static bool scratch_buf(const rill_cuda_api_t *api, CUdeviceptr *b, size_t n);

/* Pooling: pool.cu, channels last with up to 16 bytes of channels a thread
 * (fn; fn2 a channel a thread, for pointers not aligned to them), and
 * cuDNN's call where it applies. Where both do, each is timed on scratch
 * buffers, by host and device time (interpreted runs) and by device time
 * alone (captured ones), and the choice kept in the disk cache as the
 * convolution's is: cuDNN's NHWC pooling kernel took 78 us of inception_v3's
 * 757 (f16, batch 1, H100, run AH). A kernel choice tree may name
 * "cudnn.pool" or "kernel.pool"; RILL_CUDNN_POOL=1 takes cuDNN wherever it
 * applies and =0 never (to test each on every shape). */
static rill_status_t prep_pool(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s, bool adaptive) {
  const ops_params_t *p = &plan->p;
  const rill_type_t *x = &plan->decl->in[0], *ot = &plan->decl->out[0];
  const rill_cuda_api_t *api = env->api;
  int h = p->nhwc ? 1 : x->rank - 2;
  s->kind = NN_POOL;
  s->sh.n = cuda_numel(ot);
  s->sh.dims[0] = x->dims[h];
  s->sh.dims[1] = x->dims[h + 1];
  s->sh.dims[2] = ot->dims[h];
  s->sh.dims[3] = ot->dims[h + 1];
  if (p->nhwc) s->sh.dims[4] = x->dims[3]; /* the channels, interleaved */
  size_t es = rill_dtype_size(x->dtype), eo = rill_dtype_size(ot->dtype);
  int vec = 1;
  while (p->nhwc && vec < 8 && (size_t)vec * 2 * (es > eo ? es : eo) <= 16 && x->dims[3] % (vec * 2) == 0) vec *= 2;
  s->pool_vec = vec;
  s->pool_warp = pool_warp(plan, adaptive);
  RILL_TRY(gen_pool(env, plan, adaptive, vec, &s->fn));
  if (vec > 1) RILL_TRY(gen_pool(env, plan, adaptive, 1, &s->fn2));
  const char *force = getenv("RILL_CUDNN_POOL"), *ch = plan->choice;
  if (adaptive || (force && !strcmp(force, "0")) || (ch && !strcmp(ch, "kernel.pool"))) return NULL;
  RILL_TRY(prep_dnn_pool(env, plan, s));
  if (!s->pd) return NULL;
  if ((force && !strcmp(force, "1")) || (ch && !strcmp(ch, "cudnn.pool"))) {
    s->pool_dnn = s->pool_dnn_cap = true;
    return NULL;
  }
  int64_t xl[4], yl[4];
  nchw_dims(x->dims, p->nhwc, xl);
  nchw_dims(ot->dims, p->nhwc, yl);
  char key[256];
  snprintf(key, sizeof key, "pool2d 2 %s cudnn %zu %s x %lldx%lldx%lldx%lld y %lldx%lldx%lldx%lld kernel %lld %lld stride %lld %lld pad %lld %lld "
           "mode %d%s%s", env->device_name, api->cudnn_version, rill_dtype_name(x->dtype), (long long)xl[0], (long long)xl[1], (long long)xl[2],
           (long long)xl[3], (long long)yl[0], (long long)yl[1], (long long)yl[2], (long long)yl[3], (long long)p->kernel[0], (long long)p->kernel[1],
           (long long)p->stride[0], (long long)p->stride[1], (long long)p->pad[0], (long long)p->pad[1], (int)p->code,
           p->count_include_pad ? " include_pad" : "", p->nhwc ? " nhwc" : "");
  /* cuDNN (1) or the kernel (0): by host and device time, and by device
   * time alone. The key's number goes up when pool.cu's variants change. */
  int32_t choice[2];
  if (kcache_choice_get(env->cache, key, choice, sizeof choice) && (choice[0] & ~1) == 0 && (choice[1] & ~1) == 0) {
    s->pool_dnn = choice[0];
    s->pool_dnn_cap = choice[1];
    return NULL;
  }
  CUdeviceptr sx = 0, sy = 0;
  pthread_mutex_lock(env->lib_mu);
  bool have = cuda_numel(x) && cuda_numel(ot) && scratch_buf(api, &sx, (size_t)cuda_numel(x) * es) &&
              scratch_buf(api, &sy, (size_t)cuda_numel(ot) * eo);
  rill_status_t st = NULL;
  if (have) {
    s->pool_dnn = pool_us(env, s, sx, sy, true, false) < pool_us(env, s, sx, sy, false, false);
    s->pool_dnn_cap = pool_us(env, s, sx, sy, true, true) < pool_us(env, s, sx, sy, false, true);
    st = CU(api, cuStreamSynchronize, NULL);
  }
  if (sx) api->cuMemFree(sx);
  if (sy) api->cuMemFree(sy);
  pthread_mutex_unlock(env->lib_mu);
  if (!st && have) {
    int32_t got[2] = {s->pool_dnn, s->pool_dnn_cap};
    kcache_choice_put(env->cache, key, got, sizeof got);
  }
  return st;
}

/* ---- matmul and linear ---- */
static cudaDataType_t cuda_dt(rill_dtype_t d) {
  return d == RILL_F16 ? CUDA_R_16F : d == RILL_BF16 ? CUDA_R_16BF : d == RILL_F64 ? CUDA_R_64F : CUDA_R_32F;
}

/* A product's operands and result as index math: per operand (0: a, 1:
 * b, 2: y) its logical type and element strides (ops_matmul_views; linear's
 * a and w contiguous, w read as [K,N]), M, N, K, and the output's batch
 * dims (nbd of them). */
typedef struct {
  rill_type_t t[3];
  int64_t st[3][RILL_MAX_RANK];
  long long M, N, K;
  int nbd;
} mm_view_t;

static void mm_view(const ops_plan_t *plan, bool linear, mm_view_t *v) {
  const isa_opdecl_t *d = plan->decl;
  if (linear) {
    /* w [N, K] read as [K, N] (columns contiguous), or with weight="kn" [K, N] as it lies (rows contiguous) */
    const rill_type_t *a = &d->in[0], *w = &d->in[1];
    bool kn = plan->p.w_kn;
    v->K = w->dims[kn ? 0 : 1];
    v->N = w->dims[kn ? 1 : 0];
    v->M = v->K ? cuda_numel(a) / v->K : cuda_numel(&d->out[0]) / (v->N ? v->N : 1);
    v->nbd = 0;
    v->t[0] = (rill_type_t){a->dtype, 2, {v->M, v->K}};
    v->t[1] = (rill_type_t){a->dtype, 2, {v->K, v->N}};
    v->t[2] = (rill_type_t){a->dtype, 2, {v->M, v->N}};
    int64_t st[3][2] = {{v->K, 1}, {kn ? v->N : 1, kn ? 1 : v->K}, {v->N, 1}};
    for (int j = 0; j < 3; j++) memcpy(v->st[j], st[j], sizeof st[j]);
    return;
  }
  ops_matmul_views(plan, v->t, v->st);
  const rill_type_t *a = &v->t[0], *b = &v->t[1];
  v->K = a->dims[a->rank - 1];
  v->M = a->rank >= 2 ? a->dims[a->rank - 2] : 1;
  v->N = b->rank >= 2 ? b->dims[b->rank - 1] : 1;
  v->nbd = v->t[2].rank - (a->rank >= 2) - (b->rank >= 2);
}

/* Operand j's element stride along the output's batch dim i (0 where it broadcasts). */
static int64_t batch_step(const mm_view_t *v, int j, int i) {
  const rill_type_t *t = &v->t[j];
  int rb = j == 2 ? v->nbd : t->rank >= 2 ? t->rank - 2 : 0, d = i - (v->nbd - rb);
  return d < 0 || t->dims[d] == 1 ? 0 : v->st[j][d];
}

/* Operand j's strides of rows and columns: a [M,K], b [K,N], y [M,N]; a
 * rank-1 operand lacks one (0). */
static void mm_rc(const mm_view_t *v, int j, int64_t *rs, int64_t *cs) {
  int r = v->t[j].rank;
  bool rows = j == 1 || v->t[0].rank >= 2, cols = j == 0 || v->t[1].rank >= 2;
  *rs = rows ? v->st[j][r - 1 - cols] : 0;
  *cs = cols ? v->st[j][r - 1] : 0;
}

/* A product's sizes as matmul.cu and gemv.cu take them: base[0..2] M, N,
 * K; dims the output's batch dims, st[0..2] a's, b's and y's strides over
 * them; st[3]: the strides of a's rows and columns, b's, then y's. */
static void mm_shape(nn_state_t *s, const mm_view_t *v) {
  s->sh.base[0] = v->M;
  s->sh.base[1] = v->N;
  s->sh.base[2] = v->K;
  for (int i = 0; i < v->nbd; i++) {
    s->sh.dims[i] = v->t[2].dims[i];
    for (int j = 0; j < 3; j++) s->sh.st[j][i] = batch_step(v, j, i);
  }
  for (int j = 0; j < 3; j++) mm_rc(v, j, &s->sh.st[3][2 * j], &s->sh.st[3][2 * j + 1]);
}

/* The generated kernel: a thread per output, batches by index math (mm_shape). */
static rill_status_t prep_mm_kernel(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s, const mm_view_t *v, bool linear) {
  const isa_opdecl_t *d = plan->decl;
  rill_dtype_t dt = d->in[0].dtype;
  s->kind = NN_MM_KERNEL;
  s->post_act = plan->p.act;
  s->sh.n = cuda_numel(&d->out[0]);
  mm_shape(s, v);
  bool has_bias = linear && plan->p.has_bias;
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = types(&b, dt, dt, ksrc_comp(dt));
  if (!st) st = ksrc_def(&b, "NBD", "%d", v->nbd);
  if (!st) st = ksrc_def(&b, "HAS_BIAS", "%d", has_bias);
  return ksrc_build(env->cache, &b, st, rill_kernel_matmul, "matmul_k", &s->fn);
}

/* A product of a few rows (M <= GEMV_ROWS; batch 1) whose a rows and b
 * columns are contiguous (linear's weight): gemv.cu, a warp per column of y,
 * reading b once. cuBLASLt's tiled kernels take 3-5x the time of reading b
 * there (the encoder at length 1: its 72 products 330 us a run on an H100). */
/* Where b's rows are contiguous instead (linear's weight="kn", [K, N] as
 * ONNX exporters write it): gemv.cu's gemv_kn_k, a block per 32 columns of y, its
 * GEMV_KN_WARPS warps each summing a share of K, lanes reading b's rows
 * (32 contiguous elements a warp), the shares added in shared memory. */
enum { GEMV_ROWS = 4, GEMV_WARPS = 4 /* a block's: more blocks than SMs at N = 768 */, GEMV_KN_WARPS = 16 };
static bool gemv_fits(const mm_view_t *v, rill_dtype_t dt, long long batch, bool linear, bool *kn) {
  int64_t ars, acs, brs, bcs;
  mm_rc(v, 0, &ars, &acs);
  mm_rc(v, 1, &brs, &bcs);
  *kn = linear && brs != 1 && v->K != 1; /* (a matmul's row-major b stays cuBLASLt's) */
  return rill__is_float(dt) && batch == 1 && v->M >= 1 && v->M <= GEMV_ROWS && v->N > 0 && v->K > 0 && (acs == 1 || v->K == 1) &&
         (brs == 1 || v->K == 1 || (*kn && bcs == 1));
}

static rill_status_t prep_gemv(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s, const mm_view_t *v, bool linear) {
  rill_dtype_t dt = plan->decl->in[0].dtype;
  int rows = 1;
  while (rows < v->M) rows *= 2;
  s->kind = NN_GEMV;
  /* the activation in the kernel; with a residual, after it (z first) */
  int act = s->res ? OPS_ACT_NONE : plan->p.act;
  s->post_act = s->res ? plan->p.act : OPS_ACT_NONE;
  mm_shape(s, v);
  if (s->gemv_kn) {
    s->grid = (v->N + 31) / 32;
    rill_buf_t b;
    rill__buf_init(&b, env->a);
    rill_status_t st = types(&b, dt, dt, ksrc_comp(dt));
    if (!st) st = ksrc_def(&b, "ROWS", "%d", rows);
    if (!st) st = ksrc_def(&b, "KS", "%d", (int)GEMV_KN_WARPS);
    if (!st) st = ksrc_def(&b, "HAS_BIAS", "%d", linear && plan->p.has_bias);
    if (!st && act) st = cuda_act_function(&b, act, dt);
    return ksrc_build(env->cache, &b, st, rill_kernel_gemv, "gemv_kn_k", &s->fn);
  }
  s->grid = (v->N + GEMV_WARPS - 1) / GEMV_WARPS;
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = types(&b, dt, dt, ksrc_comp(dt));
  long long chunk = 32 * (16 / (long long)rill_dtype_size(dt));
  if (!st) st = ksrc_def(&b, "ROWS", "%d", rows);
  long long chunks = (v->K + chunk - 1) / chunk;
  if (!st) st = ksrc_def(&b, "CHUNKS", "%lld", chunks < 16 ? chunks : 16);
  if (!st) st = ksrc_def(&b, "HAS_BIAS", "%d", linear && plan->p.has_bias);
  if (!st && act) st = cuda_act_function(&b, act, dt);
  return ksrc_build(env->cache, &b, st, rill_kernel_gemv, "gemv_k", &s->fn);
}

static rill_status_t layout(const ops_cuda_env_t *env, cublasLtMatrixLayout_t *l, rill_dtype_t d, long long rows, long long cols,
                            long long ld, long long batch, long long stride) {
  RILL_TRY(CUBLAS(env->api, cublasLtMatrixLayoutCreate, l, cuda_dt(d), (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t bc = (int32_t)batch;
    RILL_TRY(CUBLAS(env->api, cublasLtMatrixLayoutSetAttribute, *l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
    RILL_TRY(CUBLAS(env->api, cublasLtMatrixLayoutSetAttribute, *l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return NULL;
}

/* A matrix [R, C] at strides (sr, sc) as cuBLASLt reads one: row-major
 * (sc 1, leading dimension sr >= C) 0, column-major (sr 1, ld sc >= R) 1,
 * neither -1. An axis of size 1 takes any stride. */
static int mat_form(long long R, long long C, int64_t sr, int64_t sc, int64_t *ld) {
  if (sc == 1 || C == 1) {
    *ld = R == 1 ? C : sr;
    if (*ld >= C) return 0;
  }
  if (sr == 1 || R == 1) {
    *ld = C == 1 ? R : sc;
    if (*ld >= R) return 1;
  }
  return -1;
}

/* Operand j's stride from one matrix of the batch to the next, its batch
 * axes of size above 1 walked as one (false where they cannot be), 0
 * where it has none. */
static bool batch_stride(const mm_view_t *v, int j, int64_t *out) {
  int64_t want = -1;
  *out = 0;
  for (int i = v->nbd - 1; i >= 0; i--) {
    if (v->t[2].dims[i] == 1) continue;
    int64_t st = batch_step(v, j, i);
    if (want >= 0 && st != want) return false;
    if (want < 0) *out = st;
    want = st * v->t[2].dims[i];
  }
  return true;
}

/* The plan cache's entry for a product: the epilogue the heuristics took
 * (the activation's, or the plain one with the activation after) and their
 * results. A result is checked again by cuBLASLt (cublasLtMatmulAlgoCheck)
 * before it may be taken, in order until one passes that the product can
 * use (lt_usable), and the one of id want_id (a kernel choice tree's)
 * wherever it stands: a result that fails is dropped, and where none that
 * the product can use is left *found is 0 (the heuristics are asked). The
 * rest stay unchecked (checked[i] false), candidates for `rill tune`
 * alone, checked when one is named. cuBLASLt's calls take no lock of ours:
 * the library is thread-safe with one handle (cuBLAS's guide, "Thread
 * Safety"), and its heuristics time nothing. (A warm start's time here is
 * the library's first query in the process, which every thread waits
 * for, whether each product checks 16 results or 1: the device makes
 * that query as it is made, device_cuda.c lt_warm.) On a hit the epilogue
 * is set on s->desc as the heuristics left it. */
#define LT_WORKSPACE_MAX ((size_t)32 << 20) /* what the heuristics are told an algorithm may take */
typedef struct lt_entry {
  int32_t ep, found;
  cublasLtMatmulHeuristicResult_t res[16];
} lt_entry_t;

static bool lt_usable(const ops_cuda_env_t *env, const nn_state_t *s, const cublasLtMatmulAlgo_t *a, int32_t *id);

static rill_status_t lt_cached(const ops_cuda_env_t *env, nn_state_t *s, const char *key, cublasLtEpilogue_t plain, int act, int want_id,
                               cublasLtEpilogue_t *ep, cublasLtMatmulHeuristicResult_t *res, bool *checked, int *found) {
  *found = 0;
  uint8_t *b;
  size_t n;
  if (!kcache_blob_get(env->cache, key, &b, &n)) return NULL;
  lt_entry_t e;
  bool ok = n >= 8 && n <= sizeof e;
  if (ok) {
    memset(&e, 0, sizeof e);
    memcpy(&e, b, n);
    ok = e.found >= 1 && e.found <= 16 && n == 8 + (size_t)e.found * sizeof e.res[0] && (e.ep == (int32_t)*ep || e.ep == (int32_t)plain);
  }
  rill__free(env->a, b);
  if (!ok) return NULL;
  if (e.ep != (int32_t)*ep) {
    /* the heuristics had no algorithm with the activation's epilogue: the plain one, the activation after */
    *ep = plain;
    s->post_act = act;
    RILL_TRY(CUBLAS(env->api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, ep, sizeof *ep));
  }
  bool usable_found = false, any_usable = false, want_found = want_id < 0;
  for (int i = 0; i < e.found; i++) {
    int32_t id;
    bool usable = lt_usable(env, s, &e.res[i].algo, &id);
    any_usable |= usable;
    checked[*found] = (usable && !usable_found) || (!want_found && id == want_id);
    if (checked[*found]) {
      cublasLtMatmulHeuristicResult_t chk;
      memset(&chk, 0, sizeof chk);
      cublasStatus_t cs = env->api->cublasLtMatmulAlgoCheck(env->lt, s->desc, s->la, s->lb, s->lc, s->lc, &e.res[i].algo, &chk);
      if (cs != CUBLAS_STATUS_SUCCESS || chk.state != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > LT_WORKSPACE_MAX) continue;
      usable_found |= usable;
      want_found |= id == want_id;
      e.res[i].workspaceSize = chk.workspaceSize;
    }
    res[(*found)++] = e.res[i];
  }
  /* those the product can use all failed: the heuristics are asked (where
   * it can use none, as the heuristics left it: the product's own kernel) */
  if (any_usable && !usable_found) *found = 0;
  /* none left: the heuristics are asked (from the plain epilogue where the entry had it; the activation stays after) */
  if (*found) kcache_count_plan(env->cache, true);
  return NULL;
}

static void lt_keep(const ops_cuda_env_t *env, const char *key, cublasLtEpilogue_t ep, const cublasLtMatmulHeuristicResult_t *res, int found) {
  lt_entry_t e;
  memset(&e, 0, sizeof e);
  e.ep = (int32_t)ep;
  e.found = found < 16 ? found : 16;
  memcpy(e.res, res, sizeof e.res[0] * (size_t)e.found);
  kcache_blob_put(env->cache, key, &e, 8 + sizeof e.res[0] * (size_t)e.found);
  kcache_count_plan(env->cache, false);
}

/* Whether a heuristics result can run this product (its id in *id): with
 * linear's residual, one that takes C apart from D (out of place), an
 * algorithm's capability the heuristics do not ask about. */
static bool lt_usable(const ops_cuda_env_t *env, const nn_state_t *s, const cublasLtMatmulAlgo_t *a, int32_t *id) {
  size_t got = 0;
  int32_t oop = 0;
  *id = -1;
  if (env->api->cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, id, sizeof *id, &got) != CUBLAS_STATUS_SUCCESS) return false;
  return !s->res ||
         (env->api->cublasLtMatmulAlgoCapGetAttribute(a, CUBLASLT_ALGO_CAP_OUT_OF_PLACE_RESULT_SUPPORT, &oop, sizeof oop, &got) == CUBLAS_STATUS_SUCCESS &&
          oop);
}

static rill_status_t prep_matmul(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s) {
  const isa_opdecl_t *d = plan->decl;
  bool linear = plan->def->cpu == ops_cpu_linear;
  s->res = linear && plan->p.has_residual; /* on NN_LT: D = A B + C (z, beta 1) + bias, then the activation */
  const rill_type_t *ot = &d->out[0];
  rill_dtype_t dt = d->in[0].dtype;
  mm_view_t v;
  mm_view(plan, linear, &v);
  long long M = v.M, N = v.N, K = v.K, batch = 1;
  for (int i = 0; i < v.nbd; i++) batch *= v.t[2].dims[i];
  /* cuBLASLt batches with one stride per operand (0: one matrix for all),
   * each matrix row- or column-major, the result row-major. */
  int64_t bs[3], ld[3];
  long long R[3] = {M, K, M}, Cn[3] = {K, N, N};
  int form[3];
  bool simple = true;
  for (int j = 0; j < 3; j++) {
    int64_t rs, cs;
    mm_rc(&v, j, &rs, &cs);
    form[j] = mat_form(R[j], Cn[j], rs, cs, &ld[j]);
    simple &= batch_stride(&v, j, &bs[j]) && form[j] >= 0;
  }
  simple &= form[2] == 0;
  /* The kernel choice tree's candidate: gemv.cu, the generated kernel, or a
   * cuBLASLt algorithm by id (below); without one, gemv.cu where it fits. */
  const char *ch = plan->choice;
  s->gemv_fits = gemv_fits(&v, dt, batch, linear, &s->gemv_kn);
  bool gemv = s->gemv_fits && (!ch || strcmp(ch, "kernel.gemv") == 0);
  if (!rill__is_float(dt) || !simple || M == 0 || N == 0 || K == 0 || (ch && strcmp(ch, "kernel.matmul") == 0))
    return gemv ? prep_gemv(env, plan, s, &v, linear) : prep_mm_kernel(env, plan, s, &v, linear);
  int want_id = -1;
  char end;
  if (!ch || sscanf(ch, "cublaslt:%d%c", &want_id, &end) != 1) want_id = -1;
  s->kind = NN_LT;
  s->bias = linear && plan->p.has_bias;
  /* --precision=tf32: f32 products on TF32 tensor cores (operands rounded to 10 mantissa bits, f32 accumulation) */
  bool tf32 = dt == RILL_F32 && plan->precision == RILL_PRECISION_TF32;
  cublasComputeType_t ct = dt == RILL_F64 ? CUBLAS_COMPUTE_64F : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  RILL_TRY(CUBLAS(env->api, cublasLtMatmulDescCreate, &s->desc, ct, dt == RILL_F64 ? CUDA_R_64F : CUDA_R_32F));
  /* Row-major C[M,N] = A B is column-major C^T[N,M] = B^T A^T: the first
   * operand is b, read as B^T (row-major b) or transposed (column-major b,
   * linear's weight), the second a likewise. */
  cublasOperation_t tb = form[1] ? CUBLAS_OP_T : CUBLAS_OP_N, ta = form[0] ? CUBLAS_OP_T : CUBLAS_OP_N;
  RILL_TRY(CUBLAS(env->api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tb, sizeof tb));
  RILL_TRY(CUBLAS(env->api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_TRANSB, &ta, sizeof ta));
  /* The activation in the epilogue where cuBLASLt has it (relu; gelu with
   * the tanh approximation, not for f64: its gelu is not f64-exact, 21 of 640
   * results a few ulps off on an H100), else after (see below). */
  int act = plan->p.act;
  cublasLtEpilogue_t plain = s->bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, ep = plain;
  if (act == OPS_ACT_RELU) ep = s->bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (act == OPS_ACT_GELU_TANH && dt != RILL_F64) ep = s->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  s->post_act = ep == plain ? act : OPS_ACT_NONE;
  RILL_TRY(CUBLAS(env->api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
  RILL_TRY(form[1] ? layout(env, &s->la, dt, K, N, ld[1], batch, bs[1]) : layout(env, &s->la, dt, N, K, ld[1], batch, bs[1]));
  RILL_TRY(form[0] ? layout(env, &s->lb, dt, M, K, ld[0], batch, bs[0]) : layout(env, &s->lb, dt, K, M, ld[0], batch, bs[0]));
  RILL_TRY(layout(env, &s->lc, dt, N, M, ld[2], batch, bs[2]));
  /* The heuristics' answer for this product (its descriptors in full) from the plan cache, else asked and kept. */
  char key[512];
  snprintf(key, sizeof key, "cublaslt %s %zu %s ct %d M %lld N %lld K %lld batch %lld forms %d %d ld %lld %lld %lld bs %lld %lld %lld ep %d%s",
           env->device_name, env->api->cublaslt_version, rill_dtype_name(dt), (int)ct, M, N, K, batch, form[0], form[1], (long long)ld[0],
           (long long)ld[1], (long long)ld[2], (long long)bs[0], (long long)bs[1], (long long)bs[2], (int)ep, s->res ? " res" : "");
  cublasLtMatmulHeuristicResult_t res[16];
  bool checked[16];
  int found = 0;
  double t0 = rill__now_us();
  rill_status_t st = lt_cached(env, s, key, plain, act, want_id, &ep, res, checked, &found);
  cublasLtMatmulPreference_t pref = NULL;
  size_t ws = LT_WORKSPACE_MAX;
  if (!st && !found) {
    for (int i = 0; i < 16; i++) checked[i] = true; /* the heuristics' own answers */
    st = CUBLAS(env->api, cublasLtMatmulPreferenceCreate, &pref);
    if (!st) st = CUBLAS(env->api, cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  }
  for (int tries = 0; !st && pref && !found && tries < 2; tries++) {
    if (tries) {
      /* No algorithm with the activation's epilogue: the plain one, the activation after. */
      if (ep == plain) break;
      ep = plain;
      s->post_act = act;
      st = CUBLAS(env->api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
      if (st) break;
    }
    st = CUBLAS(env->api, cublasLtMatmulAlgoGetHeuristic, env->lt, s->desc, s->la, s->lb, s->lc, s->lc, pref, 16, res, &found);
    if (st && ep != plain && rill_status_code(st) != RILL_OUT_OF_MEMORY) {
      /* an epilogue this cuBLASLt refuses for these types (not supported): as none found */
      rill_status_free(st);
      st = NULL;
      found = 0;
    }
  }
  if (pref) {
    env->api->cublasLtMatmulPreferenceDestroy(pref);
    if (!st && found) lt_keep(env, key, ep, res, found);
  }
  kcache_add_ns(env->cache, KCACHE_LT, (long long)((rill__now_us() - t0) * 1e3));
  RILL_TRY(st);
  if (!found) return gemv ? prep_gemv(env, plan, s, &v, linear) : prep_mm_kernel(env, plan, s, &v, linear);
  /* The heuristics' first, unless the kernel choice tree names another
   * that is among them at these sizes; every one's id is a candidate. */
  int k = -1;
  bool picked = false;
  s->nlt = 0;
  for (int i = 0; i < found && i < 16; i++) {
    int32_t id;
    if (!lt_usable(env, s, &res[i].algo, &id)) continue;
    if (checked[i] && (k < 0 || (want_id >= 0 && id == want_id && !picked))) {
      picked = want_id >= 0 && id == want_id;
      k = i;
    }
    s->lt_ids[s->nlt++] = id;
  }
  if (k < 0) return gemv ? prep_gemv(env, plan, s, &v, linear) : prep_mm_kernel(env, plan, s, &v, linear); /* none takes z out of place */
  s->algo = res[k].algo;
  s->workspace = res[k].workspaceSize;
  s->out_bytes = (size_t)cuda_numel(ot) * rill_dtype_size(dt);
  /* cuBLASLt's algorithms stay the candidates that `rill tune` times */
  if (gemv) {
    s->workspace = 0;
    return prep_gemv(env, plan, s, &v, linear);
  }
  return NULL;
}

/* compute-sanitizer's initcheck does not see the stores of the Tensor
 * Memory Accelerator, which cuBLASLt's Hopper kernels write D with (f16
 * linear, 5x64 by 128x64 on an H100: algorithm 66, tile 8x64, cluster 4x1x1,
 * reported as 1,280 uninitialised bytes on the read-back, though with every
 * allocation poisoned beforehand the output read back is the same bytes).
 * So after each call the D range cuBLASLt is bound to write is marked
 * initialised, in stream order, through NVTX's memory API; bytes outside it
 * stay checked. Without a tool attached NVTX's calls do nothing. */
#if RILL_HAVE_NVTX_MEM
static nvtxDomainHandle_t nvtx_domain;
static void nvtx_init(void) { nvtx_domain = nvtxDomainCreateA("rill"); }
#endif

static void mark_written(const ops_cuda_ctx_t *ctx, CUdeviceptr p, size_t bytes) {
#if RILL_HAVE_NVTX_MEM
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, nvtx_init);
  nvtxMemVirtualRangeDesc_t r = {bytes, (const void *)p};
  nvtxMemMarkInitializedBatch_t b = {NVTX_EXT_COMPATID_MEM, sizeof b, NVTX_MEM_TYPE_VIRTUAL_ADDRESS, 1, sizeof r, &r};
  nvtxMemCudaMarkInitialized(nvtx_domain, (cudaStream_t)ctx->stream, 0, &b);
#else
  (void)ctx, (void)p, (void)bytes;
#endif
}

/* ---- conv2d ---- */
static cudnnDataType_t dnn_dt(rill_dtype_t d) {
  return d == RILL_F16 ? CUDNN_DATA_HALF : d == RILL_BF16 ? CUDNN_DATA_BFLOAT16 : d == RILL_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

#define CONV_WORKSPACE_MAX ((size_t)256 << 20)

/* Scratch buffers of a convolution's sizes (zeros), to time candidates on. */
typedef struct conv_scratch {
  CUdeviceptr x, w, y, b, z, ws;
  size_t ws_size;
} conv_scratch_t;

static void scratch_free(const rill_cuda_api_t *api, conv_scratch_t *sc) {
  CUdeviceptr *b[6] = {&sc->x, &sc->w, &sc->y, &sc->b, &sc->z, &sc->ws};
  for (int i = 0; i < 6; i++)
    if (*b[i]) api->cuMemFree(*b[i]);
  *sc = (conv_scratch_t){0};
}

static bool scratch_buf(const rill_cuda_api_t *api, CUdeviceptr *b, size_t n) {
  return !n || (api->cuMemAlloc(b, n) == CUDA_SUCCESS && api->cuMemsetD8(*b, 0, n) == CUDA_SUCCESS);
}

/* The workspace grows to what a candidate needs; false when it cannot. */
static bool scratch_ws(const rill_cuda_api_t *api, conv_scratch_t *sc, size_t n) {
  if (n <= sc->ws_size) return true;
  if (sc->ws) api->cuMemFree(sc->ws);
  sc->ws = 0;
  sc->ws_size = 0;
  if (!scratch_buf(api, &sc->ws, n)) return false;
  sc->ws_size = n;
  return true;
}

/* A convolution's scratch buffers (zeros) of xn, wn, yn elements of es
 * bytes, a bias of bn, a residual of yn where `residual`, and a workspace
 * of ws bytes; false when one cannot be had. */
static bool scratch_conv(const rill_cuda_api_t *api, conv_scratch_t *sc, size_t es, size_t xn, size_t wn, size_t yn, size_t bn, bool residual,
                         size_t ws) {
  return scratch_buf(api, &sc->x, xn * es) && scratch_buf(api, &sc->w, wn * es) && scratch_buf(api, &sc->y, yn * es) &&
         scratch_buf(api, &sc->b, bn * es) && (!residual || scratch_buf(api, &sc->z, yn * es)) && scratch_ws(api, sc, ws);
}

/* ---- cuDNN's graph API: an execution plan built once per shape. Each call
 * then only binds pointers (a variant pack) and runs the plan; the legacy
 * cudnnConvolutionForward costs about 80-100 us of host time a call in cuDNN
 * 9 (measured on an H100: host dispatch of inception_v3's convolutions),
 * which bounds batch-1 latency. Anything the graph API refuses leaves the
 * legacy path in place. ---- */
enum { UID_X = 1, UID_W, UID_Y, UID_B, UID_Z, UID_T1, UID_T2, UID_T3 };
/* The heuristics' list is read this far, and at most GRAPH_TIMED of the
 * engines that keep the op's arithmetic are timed: for f32 the list's head
 * is mostly TF32 tensor-core engines, which do not. */
#define GRAPH_CANDIDATES 48
#define GRAPH_TIMED 8
typedef cudnnBackendDescriptor_t bdesc_t;

static bool bset(const rill_cuda_api_t *api, bdesc_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t count,
                 const void *v) {
  return api->cudnnBackendSetAttribute(d, n, t, count, v) == CUDNN_STATUS_SUCCESS;
}

static bdesc_t bmake(const rill_cuda_api_t *api, cudnnBackendDescriptorType_t type) {
  bdesc_t d = NULL;
  return api->cudnnBackendCreateDescriptor(type, &d) == CUDNN_STATUS_SUCCESS ? d : NULL;
}

static void bfree(const rill_cuda_api_t *api, bdesc_t d) {
  if (d) api->cudnnBackendDestroyDescriptor(d);
}

/* dims N, C, H, W (or K, C, R, S), laid out NCHW or, with nhwc, NHWC (KRSC):
 * the channels' stride 1; virt: an intermediate of a fused graph, never in memory. */
static bdesc_t btensor(const rill_cuda_api_t *api, int64_t uid, cudnnDataType_t dt, const int64_t dims[4], bool nhwc, bool virt) {
  int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}, align = 16;
  if (nhwc) {
    strides[1] = 1;
    strides[2] = dims[3] * dims[1];
    strides[3] = dims[1];
  }
  bdesc_t d = bmake(api, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  if (d && bset(api, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) &&
      bset(api, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims) &&
      bset(api, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides) &&
      bset(api, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) &&
      bset(api, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) &&
      (!virt || bset(api, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt)) && api->cudnnBackendFinalize(d) == CUDNN_STATUS_SUCCESS)
    return d;
  bfree(api, d);
  return NULL;
}

/* The variant pack binding x, w, y, the bias b and residual z where a fused
 * plan reads them (else 0) and the workspace; NULL when cuDNN refuses. */
static bdesc_t variant_pack(const rill_cuda_api_t *api, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, CUdeviceptr b, CUdeviceptr z, CUdeviceptr ws) {
  void *ptrs[5] = {(void *)x, (void *)w, (void *)y, (void *)b, (void *)z}, *wsp = (void *)ws;
  int64_t uids[5] = {UID_X, UID_W, UID_Y, UID_B, UID_Z}, n = z ? 5 : b ? 4 : 3;
  bdesc_t vp = bmake(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  if (vp && bset(api, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs) &&
      bset(api, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids) &&
      bset(api, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp) && api->cudnnBackendFinalize(vp) == CUDNN_STATUS_SUCCESS)
    return vp;
  bfree(api, vp);
  return NULL;
}

/* The variant pack for a launch: the stream's cached one for these pointers,
 * or a new one (kept in the cache when there is one). Built through the
 * CUDNN() wrapper, as every launch-time call is (messages, fault injection). */
static rill_status_t launch_pack(const ops_cuda_ctx_t *ctx, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, CUdeviceptr b, CUdeviceptr z,
                                 bdesc_t *out) {
  const rill_cuda_api_t *api = ctx->api;
  ops_vp_slot_t *e = NULL;
  if (ctx->vps) {
    e = &ctx->vps->slot[((x >> 8) ^ (w >> 4) ^ (y >> 6) ^ (y >> 16) ^ (b >> 10) ^ (z >> 12)) % OPS_VP_SLOTS];
    if (e->vp && e->x == x && e->w == w && e->y == y && e->b == b && e->z == z && e->ws == ctx->workspace) {
      *out = e->vp;
      return NULL;
    }
    if (e->vp) api->cudnnBackendDestroyDescriptor(e->vp);
    e->vp = NULL;
  }
  bdesc_t vp;
  RILL_TRY(CUDNN(api, cudnnBackendCreateDescriptor, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
  void *ptrs[5] = {(void *)x, (void *)w, (void *)y, (void *)b, (void *)z}, *wsp = (void *)ctx->workspace;
  static const int64_t uids[5] = {UID_X, UID_W, UID_Y, UID_B, UID_Z};
  int64_t n = z ? 5 : b ? 4 : 3;
  rill_status_t st = CUDNN(api, cudnnBackendSetAttribute, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  if (!st) st = CUDNN(api, cudnnBackendSetAttribute, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  if (!st) st = CUDNN(api, cudnnBackendSetAttribute, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp);
  if (!st) st = CUDNN(api, cudnnBackendFinalize, vp);
  if (st) {
    api->cudnnBackendDestroyDescriptor(vp);
    return st;
  }
  if (e) {
    e->x = x, e->w = w, e->y = y, e->b = b, e->z = z, e->ws = ctx->workspace;
    e->vp = vp;
  }
  *out = vp;
  return NULL;
}

void ops_cuda_vp_clear(const rill_cuda_api_t *api, ops_vp_cache_t *c) {
  for (int i = 0; c && i < OPS_VP_SLOTS; i++) {
    if (c->slot[i].vp) api->cudnnBackendDestroyDescriptor(c->slot[i].vp);
    c->slot[i].vp = NULL;
  }
}

/* One call to time on scratch buffers: a kernel (fn, with its args), a
 * graph plan (with its variant pack), or else the legacy convolution. */
typedef struct trial {
  const nn_state_t *s;
  const conv_scratch_t *sc;
  bdesc_t plan, vp;
  size_t ws;
  CUfunction fn;
  void **args;
  unsigned blocks;
  CUdeviceptr px, py;  /* cuDNN's pooling call on these (with s->pd), when set */
} trial_t;

static bool trial_run(const ops_cuda_env_t *env, const trial_t *t, CUstream st) {
  const rill_cuda_api_t *api = env->api;
  const nn_state_t *s = t->s;
  const conv_scratch_t *sc = t->sc;
  if (t->fn) return api->cuLaunchKernel(t->fn, t->blocks, 1, 1, 256, 1, 1, 0, st, t->args, NULL) == CUDA_SUCCESS;
  if (t->px) return api->cudnnPoolingForward(env->dnn, s->pd, s->one, s->xd, (const void *)t->px, s->zero, s->yd, (void *)t->py) == CUDNN_STATUS_SUCCESS;
  if (t->plan) return api->cudnnBackendExecute(env->dnn, t->plan, t->vp) == CUDNN_STATUS_SUCCESS;
  return api->cudnnConvolutionForward(env->dnn, s->one, s->xd, (const void *)sc->x, s->wd, (const void *)sc->w, s->cd, s->conv_algo,
                                      (void *)sc->ws, t->ws, s->zero, s->yd, (void *)sc->y) == CUDNN_STATUS_SUCCESS;
}

/* Host and device time together of one call: after a warm-up, the best of
 * a few rounds of calls back to back (the mean of a round); INFINITY when it
 * fails. The shared handle works on the legacy default stream (NULL), which
 * is what is synchronised. (Not cuCtxSynchronize: from CUDA 13
 * cuGetProcAddress gives its _v2, which takes the context.) */
static double trial_wall_us(const ops_cuda_env_t *env, const trial_t *t) {
  enum { RUNS = 5, ROUNDS = 3 };
  bool ok = true;
  double best = INFINITY, t0 = 0;
  for (int r = 0; ok && r <= ROUNDS * RUNS; r++) {
    if (r % RUNS == 1) t0 = rill__now_us();
    ok = trial_run(env, t, NULL);
    if (ok && r % RUNS == 0) {
      /* r = 0: the warm-up; else the end of a round */
      ok = env->api->cuStreamSynchronize(NULL) == CUDA_SUCCESS;
      double us = (rill__now_us() - t0) / RUNS;
      if (ok && r && us < best) best = us;
    }
  }
  return ok ? best : INFINITY;
}

/* The same call's device time, for launches captured into graphs: RUNS
 * calls captured into a CUDA graph on a stream of its own and replayed (best
 * of ROUNDS, events around each replay), so that no host time shows between
 * them; calls back to back on the NULL stream where capture fails. Timed
 * without capture, a small convolution's "device" time was its host cost
 * (cudnnBackendExecute, about 6 us, against kernels of 1 to 3 us). */
static double trial_dev_us(const ops_cuda_env_t *env, const trial_t *t) {
  const rill_cuda_api_t *api = env->api;
  enum { RUNS = 10, ROUNDS = 3 };
  CUstream st = NULL;
  CUgraph g = NULL;
  CUgraphExec ge = NULL;
  CUevent e0 = NULL, e1 = NULL;
  /* the private stream is not ordered after the NULL stream's work (the scratch buffers' set-up) */
  bool ok = api->cuStreamSynchronize(NULL) == CUDA_SUCCESS && api->cuEventCreate(&e0, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
            api->cuEventCreate(&e1, CU_EVENT_DEFAULT) == CUDA_SUCCESS;
  bool captured = ok && api->cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                  api->cudnnSetStream(env->dnn, (cudaStream_t)st) == CUDNN_STATUS_SUCCESS && trial_run(env, t, st) &&
                  api->cuStreamSynchronize(st) == CUDA_SUCCESS && api->cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS;
  if (captured) {
    for (int k = 0; captured && k < RUNS; k++) captured = trial_run(env, t, st);
    captured = api->cuStreamEndCapture(st, &g) == CUDA_SUCCESS && captured && g &&
               api->cuGraphInstantiateWithFlags(&ge, g, 0) == CUDA_SUCCESS;
  }
  api->cudnnSetStream(env->dnn, NULL);
  double best = INFINITY;
  for (int r = 0; ok && r <= ROUNDS; r++) {
    CUstream on = captured ? st : NULL;
    ok = api->cuEventRecord(e0, on) == CUDA_SUCCESS;
    if (captured) ok = ok && api->cuGraphLaunch(ge, st) == CUDA_SUCCESS;
    for (int k = 0; !captured && ok && k < RUNS; k++) ok = trial_run(env, t, NULL);
    float ms = 0;
    ok = ok && api->cuEventRecord(e1, on) == CUDA_SUCCESS && api->cuEventSynchronize(e1) == CUDA_SUCCESS &&
         api->cuEventElapsedTime(&ms, e0, e1) == CUDA_SUCCESS;
    if (ok && r && ms * 1e3 / RUNS < best) best = ms * 1e3 / RUNS; /* r = 0: the warm-up */
  }
  if (ge) api->cuGraphExecDestroy(ge);
  if (g) api->cuGraphDestroy(g);
  if (st) api->cuStreamSynchronize(st), api->cuStreamDestroy(st);
  if (e0) api->cuEventDestroy(e0);
  if (e1) api->cuEventDestroy(e1);
  return ok ? best : INFINITY;
}

/* A call's time: host and device time together (dev false, for
 * interpreted runs) or device time alone (dev true, for captured ones). */
static double trial_us(const ops_cuda_env_t *env, const trial_t *t, bool dev) { return dev ? trial_dev_us(env, t) : trial_wall_us(env, t); }

/* A kernel's time a call (as trial_us) over `threads` threads. */
static double kernel_us(const ops_cuda_env_t *env, const nn_state_t *s, CUfunction fn, void **args, long long threads, bool dev) {
  trial_t t = {.s = s, .fn = fn, .args = args, .blocks = cuda_blocks(threads, env->num_sms)};
  return trial_us(env, &t, dev);
}

/* A convolution candidate's time a call (as trial_us); plan NULL: the
 * legacy call. A fused plan also binds the bias, and the residual where
 * there is one (sc->z). */
static double conv_us(const ops_cuda_env_t *env, const nn_state_t *s, const conv_scratch_t *sc, bdesc_t plan, size_t ws, bool fused, bool dev) {
  trial_t t = {.s = s, .sc = sc, .plan = plan, .ws = ws};
  if (plan && !(t.vp = variant_pack(env->api, sc->x, sc->w, sc->y, fused ? sc->b : 0, fused ? sc->z : 0, sc->ws))) return INFINITY;
  double us = trial_us(env, &t, dev);
  bfree(env->api, t.vp);
  return us;
}

/* A pooling candidate's time a call on scratch x and y (as trial_us):
 * cuDNN's call, or pool.cu with its channels a thread. */
static double pool_us(const ops_cuda_env_t *env, const nn_state_t *s, CUdeviceptr x, CUdeviceptr y, bool dnn, bool dev) {
  void *args[] = {&x, &y, (void *)&s->sh};
  if (!dnn) return kernel_us(env, s, s->fn, args, pool_threads(s, s->pool_vec), dev);
  trial_t t = {.s = s, .px = x, .py = y};
  return trial_us(env, &t, dev);
}

/* The arithmetic a convolution's engines must keep: f64, and f32 in the
 * exact mode, strictly (no tensor cores, no down-converted inputs); f32 in
 * --precision=tf32 on TF32 tensor cores but no lower; f16 and bf16 any
 * tensor-core engine. */
enum { MATH_HALF, MATH_STRICT, MATH_TF32 };
static int math_of(const nn_state_t *s, rill_dtype_t dt) {
  return dt == RILL_F64 || (dt == RILL_F32 && !s->tf32) ? MATH_STRICT : dt == RILL_F32 ? MATH_TF32 : MATH_HALF;
}

/* Whether an engine keeps the op's arithmetic (math_of), accumulates in
 * more than half precision, and compiles nothing at run time (seconds of
 * cold start). */
static bool engine_fits(const rill_cuda_api_t *api, bdesc_t cfg, int math) {
  bdesc_t eng = bmake(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0, nn = 0, nb = 0;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  bool ok = eng && api->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn,
                                          notes) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb,
                                          beh) == CUDNN_STATUS_SUCCESS;
  for (int64_t i = 0; ok && i < nn; i++)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION || (math == MATH_STRICT && notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) ||
        (math != MATH_HALF && notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
      ok = false;
  for (int64_t i = 0; ok && i < nb; i++)
    if (beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) ok = false;
  bfree(api, eng);
  return ok;
}

/* The convolution operation y = conv(x, w) with the convolution descriptor cd (alpha 1, beta 0). */
static bdesc_t conv_op(const rill_cuda_api_t *api, const nn_state_t *s, rill_dtype_t dt, bdesc_t x, bdesc_t w, bdesc_t y, bdesc_t cd) {
  cudnnBackendAttributeType_t st = dt == RILL_F64 ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  bdesc_t op = bmake(api, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  if (op && bset(api, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) &&
      bset(api, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) &&
      bset(api, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) &&
      bset(api, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd) &&
      bset(api, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, st, 1, s->one) &&
      bset(api, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, st, 1, s->zero) && api->cudnnBackendFinalize(op) == CUDNN_STATUS_SUCCESS)
    return op;
  bfree(api, op);
  return NULL;
}

/* The graph and its parts live as long as the op's state. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* the handle attributes: still how a graph meets its device */
static bdesc_t conv_build(const ops_cuda_env_t *env, nn_state_t *s, rill_dtype_t dt, const int64_t xd[4], const int64_t wd[4],
                          const int64_t yd[4], const ops_params_t *p) {
  const rill_cuda_api_t *api = env->api;
  cudnnDataType_t ddt = dnn_dt(dt), cdt = dt == RILL_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t two = 2, dil[2] = {p->dilation[0], p->dilation[1]}, str[2] = {p->stride[0], p->stride[1]};
  int64_t pre[2] = {p->pad[0], p->pad[1]}, post[2] = {p->pad[2], p->pad[3]};
  bdesc_t *g = s->graph;
  g[0] = btensor(api, UID_X, ddt, xd, p->nhwc, false);
  g[1] = btensor(api, UID_W, ddt, wd, p->nhwc, false);
  g[2] = btensor(api, UID_Y, ddt, yd, p->nhwc, false);
  if (!g[0] || !g[1] || !g[2]) return NULL;
  g[3] = bmake(api, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  if (!g[3] || !bset(api, g[3], CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &cdt) ||
      !bset(api, g[3], CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
      !bset(api, g[3], CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two) ||
      !bset(api, g[3], CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
      !bset(api, g[3], CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str) ||
      !bset(api, g[3], CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pre) ||
      !bset(api, g[3], CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, post) || api->cudnnBackendFinalize(g[3]) != CUDNN_STATUS_SUCCESS)
    return NULL;
  if (!(g[4] = conv_op(api, s, dt, g[0], g[1], g[2], g[3]))) return NULL;
  g[5] = bmake(api, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (!g[5] || !bset(api, g[5], CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g[4]) ||
      !bset(api, g[5], CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &env->dnn) || api->cudnnBackendFinalize(g[5]) != CUDNN_STATUS_SUCCESS)
    return NULL;
  return g[5];
}

/* Descriptors of a graph that could not be built, freed (so that it can be tried again without a leak). */
static bdesc_t built(const rill_cuda_api_t *api, bdesc_t graph, bdesc_t *d, int n) {
  for (int i = 0; !graph && i < n; i++) {
    bfree(api, d[i]);
    d[i] = NULL;
  }
  return graph;
}

/* The convolution's operation graph, made once (NULL where cuDNN refuses it). */
static bdesc_t conv_graph(const ops_cuda_env_t *env, nn_state_t *s, rill_dtype_t dt, const int64_t xd[4], const int64_t wd[4], const int64_t yd[4],
                          const ops_params_t *p) {
  return s->graph[5] ? s->graph[5] : built(env->api, conv_build(env, s, dt, xd, wd, yd, p), s->graph, 6);
}

/* The activations a fused graph can apply, as cuDNN's pointwise modes (0: none). */
static cudnnPointwiseMode_t fused_act(int act) {
  return act == OPS_ACT_RELU ? CUDNN_POINTWISE_RELU_FWD : act == OPS_ACT_GELU ? CUDNN_POINTWISE_GELU_FWD
       : act == OPS_ACT_GELU_TANH ? CUDNN_POINTWISE_GELU_APPROX_TANH_FWD : (cudnnPointwiseMode_t)0;
}

/* A pointwise operation of a fused graph: y = mode(x) or y = x mode b, in float (double for f64). */
static bdesc_t pointwise(const rill_cuda_api_t *api, bdesc_t *pw, bdesc_t *op, cudnnPointwiseMode_t mode, cudnnDataType_t prec, bdesc_t x, bdesc_t b,
                         bdesc_t y) {
  if (!(*pw = bmake(api, CUDNN_BACKEND_POINTWISE_DESCRIPTOR)) || !bset(api, *pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
      !bset(api, *pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) || api->cudnnBackendFinalize(*pw) != CUDNN_STATUS_SUCCESS)
    return NULL;
  if (!(*op = bmake(api, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)) ||
      !bset(api, *op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, pw) ||
      !bset(api, *op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
      (b && !bset(api, *op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b)) ||
      !bset(api, *op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) || api->cudnnBackendFinalize(*op) != CUDNN_STATUS_SUCCESS)
    return NULL;
  return *op;
}

/* The convolution with its bias (and residual) added and its activation
 * applied in one operation graph: conv -> t1 -> add b -> (t2 -> add z) ->
 * (t3 -> activation) -> y, the intermediates virtual tensors in float
 * (double for f64), so the sum is rounded once, at y. Reuses conv_graph's
 * x, w, y and convolution (built first); its own descriptors live in
 * s->fgraph as long as the op's state. NULL where cuDNN refuses it
 * (whether an engine runs it is the heuristics' answer). */
static bdesc_t fused_build(const ops_cuda_env_t *env, nn_state_t *s, rill_dtype_t dt, const int64_t xd[4], const int64_t wd[4], const int64_t yd[4],
                           const ops_params_t *p) {
  const rill_cuda_api_t *api = env->api;
  if (!conv_graph(env, s, dt, xd, wd, yd, p)) return NULL;
  bdesc_t *g = s->graph, *f = s->fgraph;
  cudnnDataType_t prec = dt == RILL_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnPointwiseMode_t act = fused_act(p->act);
  int64_t bd[4] = {1, yd[1], 1, 1};
  /* f: 0 t1, 1 t2, 2 t3, 3 b, 4 z, 5 conv, 6..11 the pointwise descriptors and operations, 12 the graph */
  bool res = p->has_residual, last_add_b = !res && !act, last_add_z = res && !act;
  if (!(f[0] = btensor(api, UID_T1, prec, yd, p->nhwc, true)) || !(f[3] = btensor(api, UID_B, dnn_dt(dt), bd, p->nhwc, false)) ||
      (!last_add_b && !(f[1] = btensor(api, UID_T2, prec, yd, p->nhwc, true))) ||
      (res && !(f[4] = btensor(api, UID_Z, dnn_dt(dt), yd, p->nhwc, false))) ||
      (res && act && !(f[2] = btensor(api, UID_T3, prec, yd, p->nhwc, true))) || !(f[5] = conv_op(api, s, dt, g[0], g[1], f[0], g[3])))
    return NULL;
  bdesc_t ops[4] = {f[5]}, cur = last_add_b ? g[2] : f[1];
  int nops = 1;
  if (!(ops[nops++] = pointwise(api, &f[6], &f[7], CUDNN_POINTWISE_ADD, prec, f[0], f[3], cur))) return NULL;
  if (res) {
    bdesc_t next = last_add_z ? g[2] : f[2];
    if (!(ops[nops++] = pointwise(api, &f[8], &f[9], CUDNN_POINTWISE_ADD, prec, cur, f[4], next))) return NULL;
    cur = next;
  }
  if (act && !(ops[nops++] = pointwise(api, &f[10], &f[11], act, prec, cur, NULL, g[2]))) return NULL;
  f[12] = bmake(api, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (!f[12] || !bset(api, f[12], CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops) ||
      !bset(api, f[12], CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &env->dnn) || api->cudnnBackendFinalize(f[12]) != CUDNN_STATUS_SUCCESS)
    return NULL;
  return f[12];
}

static bdesc_t fused_graph(const ops_cuda_env_t *env, nn_state_t *s, rill_dtype_t dt, const int64_t xd[4], const int64_t wd[4], const int64_t yd[4],
                           const ops_params_t *p) {
  return s->fgraph[12] ? s->fgraph[12] : built(env->api, fused_build(env, s, dt, xd, wd, yd, p), s->fgraph, FGRAPH);
}

/* Whether the op's bias, residual and activation can go into the convolution's plan on `path` (conv_path: not the legacy call, not unfused). */
static bool fusable(const ops_params_t *p, char path) {
  return path != 'L' && path != 'U' && p->has_bias && (!p->act || fused_act(p->act));
}

/* The heuristics' (mode A) engine configurations for an operation graph:
 * *heur and up to GRAPH_CANDIDATES configurations in cfg (freed by the
 * caller, made or not), *n of them filled. */
static bool heur_list(const rill_cuda_api_t *api, bdesc_t graph, bdesc_t *heur, bdesc_t cfg[GRAPH_CANDIDATES], int64_t *n) {
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  *heur = bmake(api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  bool ok = *heur && bset(api, *heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) &&
            bset(api, *heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) && api->cudnnBackendFinalize(*heur) == CUDNN_STATUS_SUCCESS;
  for (int i = 0; ok && i < GRAPH_CANDIDATES; i++) ok = (cfg[i] = bmake(api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)) != NULL;
  return ok && api->cudnnBackendGetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, GRAPH_CANDIDATES, n, cfg) ==
                   CUDNN_STATUS_SUCCESS;
}

/* An execution plan for an engine configuration with its workspace size in
 * *ws, or NULL where it cannot be made or wants more than CONV_WORKSPACE_MAX. */
static bdesc_t exec_plan(const ops_cuda_env_t *env, bdesc_t cfg, int64_t *ws) {
  const rill_cuda_api_t *api = env->api;
  bdesc_t plan = bmake(api, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  int64_t got = 0;
  if (!plan || !bset(api, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &env->dnn) ||
      !bset(api, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) ||
      api->cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS ||
      api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, ws) != CUDNN_STATUS_SUCCESS ||
      *ws < 0 || (size_t)*ws > CONV_WORKSPACE_MAX) {
    bfree(api, plan);
    return NULL;
  }
  return plan;
}

/* The fastest plan of the heuristics' first candidates for `graph`, if it
 * beats *best_us (host and device time together; s->plan and s->plan_ws are
 * set then, and *best_us lowered), and by device time alone against
 * *best_dev (s->cplan, for captures; *out_dev the candidate); fused: the
 * graph adds the bias and applies the activation (s->plan_fused,
 * s->cplan_fused). With want >= -1, candidates `want` and `*out_dev` are
 * taken untimed (choices from the disk cache). Returns the candidate taken
 * by *best_us, -1 for none (and *out_dev -1 where none beat *best_dev). */
static int conv_plan(const ops_cuda_env_t *env, nn_state_t *s, conv_scratch_t *sc, bdesc_t graph, double *best_us, double *best_dev, int math,
                     bool fused, int want, int *out_dev) {
  bool timed = want < -1;
  const rill_cuda_api_t *api = env->api;
  bdesc_t heur = NULL, cfg[GRAPH_CANDIDATES] = {0};
  int64_t n = 0;
  int taken = -1;
  bool ok = heur_list(api, graph, &heur, cfg, &n);
  kcache_count_plan(env->cache, false);
  double untimed = -INFINITY;
  int want_dev = timed ? -2 : *out_dev;
  *out_dev = -1;
  int tried = 0;
  for (int64_t i = 0; ok && i < n && i < GRAPH_CANDIDATES && tried < GRAPH_TIMED; i++) {
    if ((!timed && i != want && i != want_dev) || !engine_fits(api, cfg[i], math)) continue;
    tried += timed;
    int64_t ws = 0;
    bdesc_t plan = exec_plan(env, cfg[i], &ws);
    if (!plan || (timed && !scratch_ws(api, sc, (size_t)ws))) {
      bfree(api, plan);
      continue;
    }
    double t = timed ? conv_us(env, s, sc, plan, (size_t)ws, fused, false) : i == want ? untimed : INFINITY;
    double td = timed ? conv_us(env, s, sc, plan, (size_t)ws, fused, true) : i == want_dev ? untimed : INFINITY;
    bool kept = false;
    if (t < *best_us) {
      *best_us = t;
      if (s->plan != s->cplan) bfree(api, s->plan);
      s->plan = plan;
      s->plan_ws = (size_t)ws;
      s->plan_fused = fused;
      taken = (int)i;
      kept = true;
    }
    if (td < *best_dev) {
      *best_dev = td;
      if (s->cplan && s->cplan != s->plan) bfree(api, s->cplan); /* unless interpreted launches use it too */
      s->cplan = plan;
      s->cplan_ws = (size_t)ws;
      s->cplan_fused = fused;
      *out_dev = (int)i;
      kept = true;
    }
    if (!kept) bfree(api, plan);
  }
  for (int i = 0; i < GRAPH_CANDIDATES; i++) bfree(api, cfg[i]);
  bfree(api, heur);
  return taken;
}
#pragma GCC diagnostic pop

/* An engine configuration's engine's global index (stable across sizes, unlike its rank in the heuristics' list). */
static bool engine_gid(const rill_cuda_api_t *api, bdesc_t cfg, int64_t *gid) {
  bdesc_t eng = bmake(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0, got = 0;
  bool ok = eng && api->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, gid) == CUDNN_STATUS_SUCCESS && got == 1;
  bfree(api, eng);
  return ok;
}

/* The graph's engines that keep the op's arithmetic and make a plan with at
 * most CONV_WORKSPACE_MAX of workspace, in the heuristics' order: each
 * named once in `names` ("PREFIX:GID", PREFIX cudnn.engine or cudnn.fused), or, with want >= 0, the first
 * of engine `want` kept in *out_plan (NULL when none). */
static rill_status_t engines(const ops_cuda_env_t *env, bdesc_t graph, int math, int64_t want, bdesc_t *out_plan, size_t *out_ws,
                             const char *prefix, rill_buf_t *names) {
  const rill_cuda_api_t *api = env->api;
  bdesc_t heur = NULL, cfg[GRAPH_CANDIDATES] = {0};
  int64_t n = 0, seen[GRAPH_CANDIDATES];
  int nseen = 0;
  rill_status_t st = NULL;
  if (out_plan) *out_plan = NULL;
  bool ok = heur_list(api, graph, &heur, cfg, &n);
  for (int64_t i = 0; ok && !st && i < n && i < GRAPH_CANDIDATES && !(out_plan && *out_plan); i++) {
    int64_t gid = -1;
    if (!engine_gid(api, cfg[i], &gid) || (want >= 0 && gid != want) || !engine_fits(api, cfg[i], math)) continue;
    bool dup = false;
    for (int j = 0; j < nseen; j++) dup |= seen[j] == gid;
    if (dup) continue;
    int64_t ws = 0;
    bdesc_t plan = exec_plan(env, cfg[i], &ws);
    if (!plan) continue;
    seen[nseen++] = gid;
    if (names) st = rill__buf_printf(names, "%s:%lld\n", prefix, (long long)gid);
    if (out_plan && !st) {
      *out_plan = plan;
      *out_ws = (size_t)ws;
    } else {
      bfree(api, plan);
    }
  }
  for (int i = 0; i < GRAPH_CANDIDATES; i++) bfree(api, cfg[i]);
  bfree(api, heur);
  return st;
}

/* The convolution paths the environment asks for: 'L' the legacy call
 * alone (RILL_CUDNN_LEGACY=1), 'G' the fastest plan even where the legacy
 * call is faster (RILL_CUDNN_GRAPH=1), 'F' a fused plan wherever one exists
 * (RILL_CUDNN_FUSED=1), 'U' never fused (RILL_CUDNN_FUSED=0), 'A' by time. */
static char conv_path(void) {
  const char *legacy = getenv("RILL_CUDNN_LEGACY"), *force = getenv("RILL_CUDNN_GRAPH"), *fuse = getenv("RILL_CUDNN_FUSED");
  return legacy && !strcmp(legacy, "1") ? 'L' : force && !strcmp(force, "1") ? 'G' : fuse && !strcmp(fuse, "1") ? 'F' : fuse && !strcmp(fuse, "0") ? 'U' : 'A';
}

/* The candidate the kernel choice tree named (plan->choice), where it is
 * usable at this shape; true when taken (nothing timed, nothing cached),
 * false for the usual choice. The caller holds lib_mu. */
static bool conv_forced(const ops_cuda_env_t *env, nn_state_t *s, rill_dtype_t dt, const int64_t xd[4], const int64_t wd[4],
                        const int64_t yd[4], const ops_params_t *p, char path, const char *choice) {
  bool graph_ok = path != 'L';
  const rill_cuda_api_t *api = env->api;
  int algo;
  long long gid;
  char end;
  if (sscanf(choice, "cudnn.legacy:%d%c", &algo, &end) == 1) {
    size_t ws = 0;
    if (algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT ||
        api->cudnnGetConvolutionForwardWorkspaceSize(env->dnn, s->xd, s->wd, s->cd, s->yd, (cudnnConvolutionFwdAlgo_t)algo, &ws) != CUDNN_STATUS_SUCCESS ||
        ws > CONV_WORKSPACE_MAX)
      return false;
    s->conv_algo = (cudnnConvolutionFwdAlgo_t)algo;
    s->workspace = ws;
    s->capture_differs = false;
    return true;
  }
  bool fused = sscanf(choice, "cudnn.fused:%lld%c", &gid, &end) == 1;
  if ((!fused && sscanf(choice, "cudnn.engine:%lld%c", &gid, &end) != 1) || gid < 0 || !graph_ok || (fused && !fusable(p, path)))
    return false;
  bdesc_t graph = fused ? fused_graph(env, s, dt, xd, wd, yd, p) : conv_graph(env, s, dt, xd, wd, yd, p), plan = NULL;
  size_t ws = 0;
  rill_status_t st = graph ? engines(env, graph, math_of(s, dt), gid, &plan, &ws, NULL, NULL) : NULL;
  rill_status_free(st);
  if (!plan) return false;
  s->plan = s->cplan = plan;
  s->plan_ws = s->cplan_ws = ws;
  s->plan_fused = s->cplan_fused = fused;
  s->workspace = 0;
  s->capture_differs = false;
  return true;
}

/* The bias kernel's time a call on the scratch buffers (with or without
 * its host time, as conv_us), added to an unfused candidate's to compare it
 * with a fused plan; INFINITY where it fails. */
static double bias_us(const ops_cuda_env_t *env, nn_state_t *s, conv_scratch_t *sc, bool dev) {
  void *args[] = {&sc->b, &sc->z, &sc->y, &s->sh};
  return kernel_us(env, s, s->fn, args, s->sh.n, dev);
}

/* ---- execution plans in the plan cache ----
 * A convolution's chosen plans (s->plan, and s->cplan for captures) are
 * kept as cuDNN's own serialisation of an execution plan (its JSON), so
 * that a warm process makes them again without building the operation
 * graph or asking the heuristics. Entry: u8 flags (PLAN_*), then for each
 * plan present u32 length and its JSON. */
enum { PLAN_HAS = 1, PLAN_FUSED = 2, CPLAN_HAS = 4, CPLAN_FUSED = 8, CPLAN_SAME = 16 };
#define PLAN_JSON_MAX ((int64_t)256 << 10)

/* Appends a plan's JSON with its length; false where cuDNN gives none. */
static bool plan_json(const ops_cuda_env_t *env, bdesc_t plan, rill_buf_t *b) {
  const rill_cuda_api_t *api = env->api;
  int64_t n = 0;
  if (api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, NULL) != CUDNN_STATUS_SUCCESS ||
      n <= 0 || n > PLAN_JSON_MAX)
    return false;
  char *j = rill__alloc(env->a, (size_t)n);
  int64_t got = 0;
  bool ok = j && api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &got, j) == CUDNN_STATUS_SUCCESS &&
            got > 0 && got <= n;
  while (ok && got > 0 && j[got - 1] == 0) got--; /* the text alone (plan_from_json tries it with a NUL too) */
  ok = ok && got > 0;
  if (ok) {
    rill_status_t st = rill__buf_u32(b, (uint32_t)got);
    if (!st) st = rill__buf_append(b, j, (size_t)got);
    ok = !st;
    rill_status_free(st);
  }
  rill__free(env->a, j);
  return ok;
}

/* An execution plan made again from its JSON (n bytes of text, then a NUL
 * where `nul`) on the device's handle, with its workspace size; NULL where
 * cuDNN refuses it. */
static bdesc_t plan_from_text(const ops_cuda_env_t *env, const char *j, uint32_t n, bool nul, size_t *ws) {
  const rill_cuda_api_t *api = env->api;
  bdesc_t plan = bmake(api, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  int64_t got = 0, w = -1;
  if (!plan || !bset(api, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &env->dnn) ||
      !bset(api, plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, (int64_t)n + nul, j) ||
      api->cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS ||
      api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &w) != CUDNN_STATUS_SUCCESS ||
      w < 0 || (size_t)w > CONV_WORKSPACE_MAX) {
    bfree(api, plan);
    return NULL;
  }
  *ws = (size_t)w;
  return plan;
}

/* The same from the text as kept, without and then with a closing NUL (cuDNN's count of its own JSON may include one). */
static bdesc_t plan_from_json(const ops_cuda_env_t *env, const uint8_t *j, uint32_t n, size_t *ws) {
  char *t = rill__alloc(env->a, (size_t)n + 1);
  if (!t) return NULL;
  memcpy(t, j, n);
  t[n] = 0;
  bdesc_t plan = plan_from_text(env, t, n, false, ws);
  if (!plan) plan = plan_from_text(env, t, n, true, ws);
  rill__free(env->a, t);
  return plan;
}

/* Keeps s->plan and s->cplan under key (nothing where there is none, or one has no JSON). */
static void plans_keep(const ops_cuda_env_t *env, const nn_state_t *s, const char *key) {
  if (!s->plan && !s->cplan) return;
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  uint8_t flags = (uint8_t)((s->plan ? PLAN_HAS : 0) | (s->plan_fused ? PLAN_FUSED : 0) | (s->cplan ? CPLAN_HAS : 0) |
                            (s->cplan_fused ? CPLAN_FUSED : 0) | (s->cplan && s->cplan == s->plan ? CPLAN_SAME : 0));
  rill_status_t st = rill__buf_append(&b, &flags, 1);
  bool ok = !st && (!s->plan || plan_json(env, s->plan, &b)) && (!s->cplan || s->cplan == s->plan || plan_json(env, s->cplan, &b));
  rill_status_free(st);
  char k[600];
  snprintf(k, sizeof k, "%s plans", key);
  if (ok) kcache_blob_put(env->cache, k, b.data, b.len);
  rill__buf_free(&b);
}

/* s->plan and s->cplan made from what plans_keep kept under key, where
 * that agrees with the cached choice (plan present where choice names a
 * graph candidate, cplan where it names one by device time) and cuDNN
 * takes every JSON; false (nothing set) otherwise. */
static bool plans_restore(const ops_cuda_env_t *env, nn_state_t *s, const char *key, const int32_t choice[5]) {
  char k[600];
  snprintf(k, sizeof k, "%s plans", key);
  uint8_t *b;
  size_t n;
  if (!kcache_blob_get(env->cache, k, &b, &n)) return false;
  bdesc_t made[2] = {NULL, NULL};
  size_t ws[2] = {0, 0};
  uint8_t flags = n ? b[0] : 0;
  bool want_plan = choice[1] >= 0 || choice[3] >= 0, want_cplan = choice[2] >= 0 || choice[4] >= 0;
  bool ok = n >= 1 && !!(flags & PLAN_HAS) == want_plan && !!(flags & CPLAN_HAS) == want_cplan &&
            (!(flags & CPLAN_SAME) || (flags & (PLAN_HAS | CPLAN_HAS)) == (PLAN_HAS | CPLAN_HAS));
  size_t at = 1;
  for (int i = 0; ok && i < 2; i++) {
    if (!(flags & (i ? CPLAN_HAS : PLAN_HAS)) || (i && (flags & CPLAN_SAME))) continue;
    uint32_t len = 0;
    ok = n - at >= 4;
    if (ok) memcpy(&len, b + at, 4), at += 4;
    ok = ok && len > 0 && len <= n - at && (made[i] = plan_from_json(env, b + at, len, &ws[i])) != NULL;
    at += len;
  }
  ok = ok && at == n;
  rill__free(env->a, b);
  if (!ok) {
    for (int i = 0; i < 2; i++) bfree(env->api, made[i]);
    return false;
  }
  s->plan = made[0];
  s->plan_ws = ws[0];
  s->plan_fused = (flags & PLAN_FUSED) != 0;
  s->cplan = flags & CPLAN_SAME ? made[0] : made[1];
  s->cplan_ws = flags & CPLAN_SAME ? ws[0] : ws[1];
  s->cplan_fused = (flags & CPLAN_FUSED) != 0;
  for (int i = 0; i < 2; i++)
    if (made[i]) kcache_count_plan(env->cache, true);
  return true;
}

/* The start of a convolution's disk cache key (the device, cuDNN's
 * version, the dtype, the descriptors' dims, pads, strides, dilations and
 * groups) into key; its length. */
static int conv_key(char *key, size_t n, const ops_cuda_env_t *env, rill_dtype_t dt, const int64_t xd[4], const int64_t wd[4], const int64_t yd[4],
                    const ops_params_t *p) {
  int k = snprintf(key, n, "conv2d 4 %s cudnn %zu %s x %lldx%lldx%lldx%lld w %lldx%lldx%lldx%lld y %lldx%lldx%lldx%lld pad %lld %lld %lld %lld "
                   "stride %lld %lld dilation %lld %lld groups %lld", env->device_name, env->api->cudnn_version, rill_dtype_name(dt),
                   (long long)xd[0], (long long)xd[1], (long long)xd[2], (long long)xd[3], (long long)wd[0], (long long)wd[1], (long long)wd[2],
                   (long long)wd[3], (long long)yd[0], (long long)yd[1], (long long)yd[2], (long long)yd[3], (long long)p->pad[0], (long long)p->pad[1],
                   (long long)p->pad[2], (long long)p->pad[3], (long long)p->stride[0], (long long)p->stride[1], (long long)p->dilation[0],
                   (long long)p->dilation[1], (long long)p->groups);
  return k < 0 ? 0 : k >= (int)n ? (int)n - 1 : k;
}

/* The convolution's algorithm, chosen once per shape and device. cuDNN
 * times its legacy algorithms on scratch buffers of the op's sizes (zeros)
 * and the fastest that needs at most CONV_WORKSPACE_MAX of workspace wins
 * (with cuDNN's heuristics alone inception_v3 f32 took 8.3 ms, timed 6.9 ms,
 * in two runs on an H100, where runs vary a lot). Then, where the padding is
 * symmetric, plans of the graph API for the same convolution are timed
 * against it, host time included, and the fastest is kept; and again by
 * device time alone (trial_dev_us), for launches captured into graphs, where
 * the host's cost is gone. Where the op has a bias (and an activation cuDNN
 * offers), plans of the fused graph (fused_graph) are timed the same way
 * against the best so far plus the bias kernel's time, and one that is faster
 * replaces both calls. The choice goes
 * to the disk cache (kcache_choice_*): timings vary from process to process,
 * and without it two processes could run the same model with different
 * algorithms (resnet50 f32 on an H100: one 3x3 shape took 89 us a call in
 * one process, 173 in another). Where the scratch memory cannot be had, the
 * heuristics decide (and nothing is kept). RILL_CUDNN_LEGACY=1 keeps the
 * legacy call; RILL_CUDNN_GRAPH=1 takes the fastest plan even where the
 * legacy call is faster, RILL_CUDNN_FUSED=1 the fastest fused plan
 * wherever one exists and RILL_CUDNN_FUSED=0 none (to compare the paths and
 * to test each on every shape). The caller holds lib_mu (the search uses the shared handle). */
static rill_status_t conv_algo(const ops_cuda_env_t *env, nn_state_t *s, rill_dtype_t dt, const int64_t xd[4], const int64_t wd[4],
                               const int64_t yd[4], const ops_params_t *p, bool graph_ok, const char *tree_choice) {
  const rill_cuda_api_t *api = env->api;
  char path = conv_path();
  int math = math_of(s, dt);
  if (!graph_ok) path = 'L';
  bool fuse_ok = fusable(p, path);
  /* A kernel choice tree's candidate goes first; where it is not usable here, the usual choice. */
  if (tree_choice && conv_forced(env, s, dt, xd, wd, yd, p, path, tree_choice)) return NULL;
  /* The dims are N, C, H, W in either layout: an NHWC convolution's key has
   * " nhwc"; one whose bias and activation may be fused " bias ACT" (ACT the
   * OPS_ACT_ number; else just 0); one with a residual ends in " residual". */
  char key[512];
  int kl = conv_key(key, sizeof key, env, dt, xd, wd, yd, p);
  snprintf(key + kl, sizeof key - (size_t)kl, " path %c%s%s%d%s%s", path, p->nhwc ? " nhwc" : "", fuse_ok ? " bias " : "", fuse_ok ? p->act : 0,
           p->has_residual ? " residual" : "", s->tf32 ? " tf32" : "");
  /* the legacy algorithm; the graph API candidate or -1; the same by device
   * time alone; the fused graph's candidates by both (-1: none faster) */
  int32_t choice[5];
  bool cached = kcache_choice_get(env->cache, key, choice, sizeof choice) && choice[0] >= 0 && choice[0] < CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  for (int i = 1; cached && i < 5; i++) cached = choice[i] >= -1 && choice[i] < GRAPH_CANDIDATES;
  if (cached) {
    s->conv_algo = (cudnnConvolutionFwdAlgo_t)choice[0];
    rill_status_t st = CUDNN(api, cudnnGetConvolutionForwardWorkspaceSize, env->dnn, s->xd, s->wd, s->cd, s->yd, s->conv_algo, &s->workspace);
    if (!st) {
      /* the plans as kept (no graph, no heuristics), else made again from the candidates' numbers */
      if (path == 'L' || !plans_restore(env, s, key, choice)) {
        double none = INFINITY, none_dev = INFINITY;
        int dev = choice[2];
        bdesc_t graph = (choice[1] >= 0 || choice[2] >= 0) && path != 'L' ? conv_graph(env, s, dt, xd, wd, yd, p) : NULL;
        if (graph) conv_plan(env, s, NULL, graph, &none, &none_dev, math, false, choice[1], &dev);
        none = none_dev = INFINITY, dev = choice[4];
        bdesc_t fgraph = (choice[3] >= 0 || choice[4] >= 0) && fuse_ok ? fused_graph(env, s, dt, xd, wd, yd, p) : NULL;
        if (fgraph) conv_plan(env, s, NULL, fgraph, &none, &none_dev, math, true, choice[3], &dev);
        plans_keep(env, s, key);
      }
      s->capture_differs = s->cplan != s->plan || s->cplan_fused != s->plan_fused;
      return NULL;
    }
    rill_status_free(st); /* not usable after all: choose again */
  }
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  RILL_TRY(CUDNN(api, cudnnGetConvolutionForwardAlgorithm_v7, env->dnn, s->xd, s->wd, s->cd, s->yd,
                 CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
  size_t ws = 0;
  int k = -1;
  for (int i = 0; i < n; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > CONV_WORKSPACE_MAX) continue;
    if (k < 0) k = i;
    if (perf[i].memory > ws) ws = perf[i].memory;
  }
  if (k < 0) return rill__status(RILL_UNIMPLEMENTED, "cuDNN has no algorithm for this convolution");
  s->conv_algo = perf[k].algo;
  size_t es = rill_dtype_size(dt);
  conv_scratch_t sc = {0};
  bool have = scratch_conv(api, &sc, es, (size_t)(xd[0] * xd[1] * xd[2] * xd[3]), (size_t)(wd[0] * wd[1] * wd[2] * wd[3]),
                           (size_t)(yd[0] * yd[1] * yd[2] * yd[3]), (size_t)yd[1], p->has_residual, ws);
  rill_status_t st = NULL;
  if (have) {
    int m = 0;
    st = CUDNN(api, cudnnFindConvolutionForwardAlgorithmEx, env->dnn, s->xd, (const void *)sc.x, s->wd, (const void *)sc.w, s->cd,
               s->yd, (void *)sc.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &m, perf, (void *)sc.ws, ws);
    /* Sorted by time; failures and over-large workspaces last. */
    for (int i = 0; !st && i < m; i++)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws) {
        s->conv_algo = perf[i].algo;
        break;
      }
  }
  /* s->workspace: the legacy algorithm's (a plan's may raise it). */
  if (!st) st = CUDNN(api, cudnnGetConvolutionForwardWorkspaceSize, env->dnn, s->xd, s->wd, s->cd, s->yd, s->conv_algo, &s->workspace);
  bool timing = !st && have && path != 'L';
  bdesc_t graph = timing ? conv_graph(env, s, dt, xd, wd, yd, p) : NULL;
  int taken = -1, taken_dev = -1, ftaken = -1, ftaken_dev = -1;
  double best = INFINITY, best_dev = INFINITY;
  if (graph && path != 'G') {
    best = conv_us(env, s, &sc, NULL, s->workspace, false, false);
    best_dev = conv_us(env, s, &sc, NULL, s->workspace, false, true);
  }
  if (graph) taken = conv_plan(env, s, &sc, graph, &best, &best_dev, math, false, -2, &taken_dev);
  bdesc_t fgraph = timing && fuse_ok ? fused_graph(env, s, dt, xd, wd, yd, p) : NULL;
  if (fgraph) {
    /* the best unfused call and the bias kernel after it, against one fused call */
    if (path == 'F') {
      best = best_dev = INFINITY;
    } else {
      best += bias_us(env, s, &sc, false);
      best_dev += bias_us(env, s, &sc, true);
    }
    ftaken = conv_plan(env, s, &sc, fgraph, &best, &best_dev, math, true, -2, &ftaken_dev);
    if (ftaken >= 0) taken = -1; /* a fused plan replaced the unfused one */
    if (ftaken_dev >= 0) taken_dev = -1;
  }
  s->capture_differs = s->cplan != s->plan || s->cplan_fused != s->plan_fused;
  if (!st && have) st = CU(api, cuStreamSynchronize, NULL); /* a candidate that faulted the context shows here */
  scratch_free(api, &sc);
  if (!st && have) {
    int32_t got[5] = {(int32_t)s->conv_algo, taken, taken_dev, ftaken, ftaken_dev};
    kcache_choice_put(env->cache, key, got, sizeof got);
    plans_keep(env, s, key);
  }
  return st;
}

/* Whether the generated grouped convolution (s->gconv_fn) runs instead of
 * cuDNN's choice, interpreted and captured: each timed on scratch buffers
 * against that choice (the plan or the legacy call, and the bias kernel
 * after it where the plan does not fuse it), with host time and by device
 * time alone, as conv_algo times; kept in the disk cache beside cuDNN's
 * choice. RILL_CONV_GEN=1 takes the kernel wherever it fits and
 * RILL_CONV_GEN=0 never (to compare the paths, and so that the GPU tests
 * run every shape through each). The caller holds lib_mu. */
static rill_status_t gconv_choose(const ops_cuda_env_t *env, nn_state_t *s, const ops_plan_t *plan, const int64_t xd[4], const int64_t wd[4],
                                  const int64_t yd[4]) {
  const char *force = getenv("RILL_CONV_GEN");
  if (force && !strcmp(force, "1")) s->gconv = s->gconv_cap = true;
  if (force && (!strcmp(force, "1") || !strcmp(force, "0"))) return NULL;
  const rill_cuda_api_t *api = env->api;
  const ops_params_t *p = &plan->p;
  rill_dtype_t dt = plan->decl->in[0].dtype;
  char key[512];
  int kl = conv_key(key, sizeof key, env, dt, xd, wd, yd, p);
  snprintf(key + kl, sizeof key - (size_t)kl, " gconv%s bias %d residual %d act %d", p->nhwc ? " nhwc" : "", p->has_bias, p->has_residual, p->act);
  int32_t got[2];
  if (kcache_choice_get(env->cache, key, got, sizeof got) && got[0] >= 0 && got[0] <= 1 && got[1] >= 0 && got[1] <= 1) {
    s->gconv = got[0];
    s->gconv_cap = got[1];
    return NULL;
  }
  size_t es = rill_dtype_size(dt), ws = s->workspace;
  if (s->plan_ws > ws) ws = s->plan_ws;
  if (s->cplan_ws > ws) ws = s->cplan_ws;
  const rill_type_t *x = &plan->decl->in[0], *w = &plan->decl->in[1], *y = &plan->decl->out[0];
  conv_scratch_t sc = {0};
  bool have = scratch_conv(api, &sc, es, (size_t)cuda_numel(x), (size_t)cuda_numel(w), (size_t)cuda_numel(y), (size_t)yd[1], p->has_residual, ws);
  if (have) {
    void *args[] = {&sc.x, &sc.w, &sc.b, &sc.z, &sc.y, &s->gsh};
    for (int dev = 0; dev < 2; dev++) {
      bool cap = dev && s->capture_differs, fused = cap ? s->cplan_fused : s->plan_fused;
      bdesc_t use = cap ? s->cplan : s->plan;
      double dnn = conv_us(env, s, &sc, use, use ? (cap ? s->cplan_ws : s->plan_ws) : s->workspace, fused, dev);
      if (p->has_bias && !fused) dnn += bias_us(env, s, &sc, dev);
      bool gen = kernel_us(env, s, s->gconv_fn, args, s->gsh.n, dev) < dnn;
      if (dev) s->gconv_cap = gen;
      else s->gconv = gen;
    }
  }
  rill_status_t st = have ? CU(api, cuStreamSynchronize, NULL) : NULL;
  scratch_free(api, &sc);
  if (!st && have) kcache_choice_put(env->cache, key, (int32_t[]){s->gconv, s->gconv_cap}, 2 * sizeof(int32_t));
  return st;
}

static rill_status_t prep_conv(const ops_cuda_env_t *env, const ops_plan_t *plan, nn_state_t *s) {
  const ops_params_t *p = &plan->p;
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0], *w = &d->in[1], *ot = &d->out[0];
  const rill_cuda_api_t *api = env->api;
  rill_dtype_t dt = x->dtype;
  s->kind = NN_CONV;
  /* cuDNN pads symmetrically; other padding goes into a padded copy of x first. */
  bool sym = p->pad[0] == p->pad[2] && p->pad[1] == p->pad[3], nhwc = p->nhwc;
  const int dh = nhwc ? 1 : 2, dw = nhwc ? 2 : 3; /* x's height and width */
  long long H = x->dims[dh], W = x->dims[dw];
  int ph = (int)p->pad[0], pw = (int)p->pad[1];
  if (!sym) {
    rill_type_t px = *x;
    px.dims[dh] = H + p->pad[0] + p->pad[2];
    px.dims[dw] = W + p->pad[1] + p->pad[3];
    s->padded_bytes = ((size_t)cuda_numel(&px) * rill_dtype_size(dt) + 255) & ~(size_t)255;
    s->sh2.n = cuda_numel(&px);
    RILL_TRY(cuda_gen_fill(env, dt, 0, s->sh2.n, &s->fn2));
    int64_t xs[RILL_MAX_RANK], os[RILL_MAX_RANK];
    cuda_row_strides(x, xs);
    cuda_row_strides(&px, os);
    s->sh3.n = cuda_numel(x);
    for (int i = 0; i < 4; i++) {
      s->sh3.dims[i] = x->dims[i];
      s->sh3.st[0][i] = xs[i];
      s->sh3.st[1][i] = os[i];
    }
    s->sh3.base[1] = p->pad[0] * os[dh] + p->pad[1] * os[dw];
    RILL_TRY(cuda_gen_copy(env, dt, dt, 4, s->sh2.n, &s->fn3));
    H = px.dims[dh];
    W = px.dims[dw];
    ph = pw = 0;
  }
  /* the descriptors' dims: x (padded) N, C, H, W; w K, C/groups, R, S; y N, K, OH, OW */
  int64_t xdims[4], wdims[4], ydims[4];
  nchw_dims(x->dims, nhwc, xdims);
  xdims[2] = H;
  xdims[3] = W;
  nchw_dims(w->dims, nhwc, wdims);
  nchw_dims(ot->dims, nhwc, ydims);
  RILL_TRY(dnn_tensor(api, &s->xd, dt, xdims, nhwc));
  RILL_TRY(dnn_tensor(api, &s->yd, dt, ydims, nhwc));
  RILL_TRY(CUDNN(api, cudnnCreateFilterDescriptor, &s->wd));
  RILL_TRY(CUDNN(api, cudnnCreateConvolutionDescriptor, &s->cd));
  /* NHWC for a filter is KRSC, conv2d's nhwc weight [O,kh,kw,C/groups] */
  RILL_TRY(CUDNN(api, cudnnSetFilter4dDescriptor, s->wd, dnn_dt(dt), nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, (int)wdims[0], (int)wdims[1],
                 (int)wdims[2], (int)wdims[3]));
  RILL_TRY(CUDNN(api, cudnnSetConvolution2dDescriptor, s->cd, ph, pw, (int)p->stride[0], (int)p->stride[1], (int)p->dilation[0],
                 (int)p->dilation[1], CUDNN_CROSS_CORRELATION, dt == RILL_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
  RILL_TRY(CUDNN(api, cudnnSetConvolutionGroupCount, s->cd, (int)p->groups));
  /* Tensor cores for f16 and bf16, and f32 in --precision=tf32 (TF32); else plain FMA for f32 so results match float arithmetic. */
  s->tf32 = dt == RILL_F32 && plan->precision == RILL_PRECISION_TF32;
  RILL_TRY(CUDNN(api, cudnnSetConvolutionMathType, s->cd, dt == RILL_F16 || dt == RILL_BF16 || s->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  rill_status_t st = NULL;
  if (plan->p.has_bias) {
    /* y += b[channel], unless the chosen plan adds it (the kernel is timed in the choice) */
    s->sh.n = cuda_numel(ot);
    s->sh.dims[0] = ydims[1];
    s->sh.dims[1] = ydims[2] * ydims[3];
    rill_buf_t b;
    rill__buf_init(&b, env->a);
    st = types(&b, dt, dt, ksrc_comp(dt));
    if (!st && nhwc) st = ksrc_def(&b, "NHWC", "1"); /* the channel is the index's last dim */
    if (!st && plan->p.has_residual) st = ksrc_def(&b, "RESIDUAL", "1");
    /* the activation in the same pass */
    if (!st && plan->p.act) st = cuda_act_function(&b, plan->p.act, dt);
    RILL_TRY(ksrc_build(env->cache, &b, st, rill_kernel_channel_bias, "channel_bias_k", &s->fn));
  } else {
    s->post_act = plan->p.act;
  }
  /* The generated grouped convolution: taken untimed where the kernel
   * choice tree names it, else timed against cuDNN's choice (where no tree
   * names another candidate). */
  bool gfits = cuda_gconv_fits(plan);
  if (gfits) {
    s->gsh.n = cuda_gconv_items(plan);
    RILL_TRY(cuda_gen_compile(env, plan, cuda_gconv_source, &s->gconv_fn));
    if (plan->choice && !strcmp(plan->choice, "kernel.gconv")) {
      s->gconv = s->gconv_cap = true;
      return NULL;
    }
  }
  double t0 = rill__now_us();
  pthread_mutex_lock(env->lib_mu);
  st = conv_algo(env, s, dt, xdims, wdims, ydims, p, sym, plan->choice);
  if (!st && gfits && !plan->choice) st = gconv_choose(env, s, plan, xdims, wdims, ydims);
  pthread_mutex_unlock(env->lib_mu);
  kcache_add_ns(env->cache, KCACHE_DNN, (long long)((rill__now_us() - t0) * 1e3));
  RILL_TRY(st);
  if (s->plan_ws > s->workspace) s->workspace = s->plan_ws;
  if (s->cplan_ws > s->workspace) s->workspace = s->cplan_ws;
  s->workspace = (s->workspace + 255) & ~(size_t)255;
  return NULL;
}

rill_status_t cuda_nn_candidates(const ops_cuda_env_t *env, const ops_plan_t *plan, void *state, rill_buf_t *out) {
  nn_state_t *s = state;
  const rill_cuda_api_t *api = env->api;
  if (s->kind == NN_LT || s->kind == NN_MM_KERNEL || s->kind == NN_GEMV) {
    /* cuBLASLt's algorithms where it was set up, gemv.cu where it fits, the generated kernel */
    for (int i = 0; i < s->nlt; i++) {
      bool dup = false;
      for (int j = 0; j < i; j++) dup |= s->lt_ids[j] == s->lt_ids[i];
      if (!dup) RILL_TRY(rill__buf_printf(out, "cublaslt:%d\n", (int)s->lt_ids[i]));
    }
    if (s->gemv_fits) RILL_TRY(rill__buf_append(out, "kernel.gemv\n", 12));
    return rill__buf_append(out, "kernel.matmul\n", 14);
  }
  if (s->kind == NN_POOL && s->pd) return rill__buf_append(out, "cudnn.pool\nkernel.pool\n", 23);
  if (s->kind != NN_CONV) return rill__buf_append(out, "default\n", 8);
  const ops_params_t *p = &plan->p;
  const isa_opdecl_t *d = plan->decl;
  rill_dtype_t dt = d->in[0].dtype;
  bool sym = p->pad[0] == p->pad[2] && p->pad[1] == p->pad[3];
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int n = 0;
  uint32_t named = 0;
  pthread_mutex_lock(env->lib_mu);
  rill_status_t st = CUDNN(api, cudnnGetConvolutionForwardAlgorithm_v7, env->dnn, s->xd, s->wd, s->cd, s->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf);
  for (int i = 0; !st && i < n; i++) {
    int a = (int)perf[i].algo;
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > CONV_WORKSPACE_MAX || a < 0 || a >= 32 || (named >> a & 1)) continue;
    named |= 1u << a;
    st = rill__buf_printf(out, "cudnn.legacy:%d\n", a);
  }
  if (!st && sym) {
    int64_t xdims[4], wdims[4], ydims[4];
    nchw_dims(d->in[0].dims, p->nhwc, xdims);
    nchw_dims(d->in[1].dims, p->nhwc, wdims);
    nchw_dims(d->out[0].dims, p->nhwc, ydims);
    bdesc_t graph = conv_graph(env, s, dt, xdims, wdims, ydims, p);
    if (graph) st = engines(env, graph, math_of(s, dt), -1, NULL, NULL, "cudnn.engine", out);
    bdesc_t fgraph = !st && fusable(p, conv_path()) ? fused_graph(env, s, dt, xdims, wdims, ydims, p) : NULL;
    if (fgraph) st = engines(env, fgraph, math_of(s, dt), -1, NULL, NULL, "cudnn.fused", out);
  }
  if (!st && cuda_gconv_fits(plan)) st = rill__buf_append(out, "kernel.gconv\n", 13);
  pthread_mutex_unlock(env->lib_mu);
  return st;
}

rill_status_t cuda_nn_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out) {
  nn_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  s->one_d = s->one_f = 1;
  bool f64 = plan->decl->nin && plan->decl->in[0].dtype == RILL_F64;
  s->one = f64 ? (const void *)&s->one_d : (const void *)&s->one_f;
  s->zero = f64 ? (const void *)&s->zero_d : (const void *)&s->zero_f;
  ops_cpu_fn f = plan->def->cpu;
  rill_status_t st;
  if (f == ops_cpu_softmax) st = prep_softmax(env, plan, s);
  else if (f == ops_cpu_layer_norm) st = prep_layer_norm(env, plan, s);
  else if (f == ops_cpu_reduce) st = prep_reduce(env, plan, s, false);
  else if (f == ops_cpu_argmax) st = prep_reduce(env, plan, s, true);
  else if (f == ops_cpu_batch_norm) st = prep_batch_norm(env, plan, s);
  else if (f == ops_cpu_pool2d) st = prep_pool(env, plan, s, false);
  else if (f == ops_cpu_adaptive_pool) st = prep_pool(env, plan, s, true);
  else if (f == ops_cpu_matmul || f == ops_cpu_linear || f == ops_cpu_conv2d) {
    st = f == ops_cpu_conv2d ? prep_conv(env, plan, s) : prep_matmul(env, plan, s);
    if (!st && (s->post_act || post_res(s))) {
      rill_dtype_t dt = plan->decl->out[0].dtype;
      st = cuda_gen_activation(env, dt, s->post_act, post_res(s), cuda_numel(&plan->decl->out[0]), &s->act_fn, &s->act_fnv, &s->act_vec,
                               &s->act_args);
      s->act_vbytes = s->act_vec * (int)rill_dtype_size(dt);
    }
  }
  else st = rill__status(RILL_UNIMPLEMENTED, "no CUDA implementation");
  if (st) {
    cuda_nn_release(env, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_nn_release(const ops_cuda_env_t *env, void *state) {
  nn_state_t *s = state;
  if (!s) return;
  const rill_cuda_api_t *api = env->api;
  if (s->desc) api->cublasLtMatmulDescDestroy(s->desc);
  if (s->la) api->cublasLtMatrixLayoutDestroy(s->la);
  if (s->lb) api->cublasLtMatrixLayoutDestroy(s->lb);
  if (s->lc) api->cublasLtMatrixLayoutDestroy(s->lc);
  if (s->xd) api->cudnnDestroyTensorDescriptor(s->xd);
  if (s->yd) api->cudnnDestroyTensorDescriptor(s->yd);
  if (s->wd) api->cudnnDestroyFilterDescriptor(s->wd);
  if (s->cd) api->cudnnDestroyConvolutionDescriptor(s->cd);
  if (s->pd) api->cudnnDestroyPoolingDescriptor(s->pd);
  if (s->plan) api->cudnnBackendDestroyDescriptor(s->plan);
  if (s->cplan && s->cplan != s->plan) api->cudnnBackendDestroyDescriptor(s->cplan);
  for (int i = 0; i < 6; i++) bfree(api, s->graph[i]);
  for (int i = 0; i < FGRAPH; i++) bfree(api, s->fgraph[i]);
  rill__free(env->a, s);
}

static rill_status_t block_launch(const ops_cuda_ctx_t *ctx, CUfunction fn, long long blocks, void **args) {
  if (blocks <= 0) return NULL;
  return CU(ctx->api, cuLaunchKernel, fn, (unsigned)blocks, 1, 1, 256, 1, 1, 0, ctx->stream, args, NULL);
}

/* The residual and the activation no epilogue ran, in place on the result (z: linear's fourth operand). */
static rill_status_t post_act(const ops_cuda_ctx_t *ctx, const nn_state_t *s, CUdeviceptr y, CUdeviceptr z) {
  bool res = post_res(s);
  if (!s->post_act && !res) return NULL;
  kgen_args_t args = s->act_args;
  args.in[0] = args.out[0] = y;
  args.in[1] = res ? z : 0;
  void *params[] = {&args};
  if (s->act_fnv && y % (CUdeviceptr)s->act_vbytes == 0 && (!res || z % (CUdeviceptr)s->act_vbytes == 0))
    return cuda_launch(ctx, s->act_fnv, (args.n + s->act_vec - 1) / s->act_vec, params);
  return cuda_launch(ctx, s->act_fn, args.n, params);
}

rill_status_t cuda_nn_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  nn_state_t *s = state;
  const rill_cuda_api_t *api = ctx->api;
  const isa_opdecl_t *d = plan->decl;
  CUdeviceptr p[6] = {0}, y = (CUdeviceptr)out[0];
  for (uint32_t k = 0; k < d->nin && k < 5; k++) p[k] = (CUdeviceptr)in[k];
  switch (s->kind) {
    case NN_ROW: { /* softmax: x, its mask (x where there is none), y */
      void *args[] = {&p[0], &p[plan->decl->nin > 1 ? 1 : 0], &y, &s->sh};
      return block_launch(ctx, s->fn, s->grid, args);
    }
    case NN_LN: {
      void *args[] = {&p[0], &p[1], &p[2], &p[3], &y, &s->sh};
      return block_launch(ctx, s->fn, s->grid, args);
    }
    case NN_REDUCE: case NN_ARGMAX: {
      if (s->split > 1) { /* the partials, then an output's combined */
        if (ctx->workspace_size < s->workspace) return rill_status_new(RILL_INTERNAL, "reduce: the stream's workspace is smaller than the op asked");
        CUdeviceptr part = ctx->workspace;
        void *pargs[] = {&p[0], &part, &s->sh}, *fargs[] = {&part, &y, &s->sh};
        RILL_TRY(block_launch(ctx, s->fn2, (s->threads * s->split + 255) / 256, pargs));
        return block_launch(ctx, s->fn3, (s->threads + 255) / 256, fargs);
      }
      void *args[] = {&p[0], &y, &s->sh};
      return block_launch(ctx, s->fn, (s->threads + 255) / 256, args);
    }
    case NN_BN: {
      void *args[] = {&p[0], &p[1], &p[2], &p[3], &p[4], &y, &s->sh};
      return cuda_launch(ctx, s->fn, s->sh.n, args);
    }
    case NN_POOL: {
      if (ctx->capturing ? s->pool_dnn_cap : s->pool_dnn)
        return CUDNN(api, cudnnPoolingForward, ctx->dnn, s->pd, s->one, s->xd, (const void *)p[0], s->zero, s->yd, (void *)y);
      void *args[] = {&p[0], &y, &s->sh};
      size_t align = (size_t)s->pool_vec * rill_dtype_size(plan->decl->out[0].dtype);
      if (s->pool_vec > 1 && !(p[0] % ((size_t)s->pool_vec * rill_dtype_size(plan->decl->in[0].dtype))) && !(y % align))
        return cuda_launch(ctx, s->fn, pool_threads(s, s->pool_vec), args);
      return cuda_launch(ctx, s->pool_vec > 1 ? s->fn2 : s->fn, pool_threads(s, 1), args);
    }
    case NN_GEMV: {
      void *args[] = {&p[0], &p[1], &p[2], &y, &s->sh};
      RILL_TRY(CU(api, cuLaunchKernel, s->fn, (unsigned)s->grid, 1, 1, 32 * (s->gemv_kn ? GEMV_KN_WARPS : GEMV_WARPS), 1, 1, 0, ctx->stream,
                  args, NULL));
      return post_act(ctx, s, y, p[3]);
    }
    case NN_MM_KERNEL: {
      void *args[] = {&p[0], &p[1], &p[2], &y, &s->sh};
      RILL_TRY(cuda_launch(ctx, s->fn, s->sh.n, args));
      return post_act(ctx, s, y, p[3]);
    }
    case NN_LT: {
      if (s->bias) {
        const void *bp = (const void *)p[2];
        RILL_TRY(CUBLAS(api, cublasLtMatmulDescSetAttribute, s->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp));
      }
      /* C: linear's residual z with beta 1, else y with beta 0 */
      RILL_TRY(CUBLAS(api, cublasLtMatmul, ctx->lt, s->desc, s->one, (const void *)p[1], s->la, (const void *)p[0], s->lb, s->res ? s->one : s->zero,
                      (const void *)(s->res ? p[3] : y), s->lc, (void *)y, s->lc, &s->algo, (void *)ctx->workspace, s->workspace,
                      (cudaStream_t)ctx->stream));
      mark_written(ctx, y, s->out_bytes);
      return post_act(ctx, s, y, p[3]);
    }
    case NN_CONV: {
      if (ctx->capturing ? s->gconv_cap : s->gconv) {
        /* the generated kernel: the bias, the residual and the activation in it */
        CUdeviceptr b = plan->p.has_bias ? p[2] : 0, z = plan->p.has_residual ? p[3] : 0;
        void *args[] = {&p[0], &p[1], &b, &z, &y, &s->gsh};
        return cuda_launch(ctx, s->gconv_fn, s->gsh.n, args);
      }
      CUdeviceptr x = p[0];
      if (s->padded_bytes) {
        CUdeviceptr padded = ctx->workspace + s->workspace, none = 0;
        void *fargs[] = {&none, &padded, &s->sh2};
        RILL_TRY(cuda_launch(ctx, s->fn2, s->sh2.n, fargs));
        void *cargs[] = {&p[0], &padded, &s->sh3};
        RILL_TRY(cuda_launch(ctx, s->fn3, s->sh3.n, cargs));
        x = padded;
      }
      bool cap = ctx->capturing && s->capture_differs, fused = cap ? s->cplan_fused : s->plan_fused;
      cudnnBackendDescriptor_t use = cap ? s->cplan : s->plan;
      CUdeviceptr b = fused ? p[2] : 0, z = fused ? p[3] : 0;
      if (use && !((x | p[1] | y | b | z) & 15)) { /* the plan assumes 16-byte alignment */
        cudnnBackendDescriptor_t vp;
        RILL_TRY(launch_pack(ctx, x, p[1], y, b, z, &vp));
        rill_status_t st = CUDNN(api, cudnnBackendExecute, ctx->dnn, use, vp);
        if (!ctx->vps) api->cudnnBackendDestroyDescriptor(vp);
        RILL_TRY(st);
        if (fused) return NULL; /* the bias and the activation are in y */
      } else {
        RILL_TRY(CUDNN(api, cudnnConvolutionForward, ctx->dnn, s->one, s->xd, (const void *)x, s->wd, (const void *)p[1], s->cd,
                       s->conv_algo, (void *)ctx->workspace, s->workspace, s->zero, s->yd, (void *)y));
      }
      if (plan->p.has_bias) {
        void *args[] = {&p[2], &p[3], &y, &s->sh}; /* p[3]: the residual, or 0 */
        RILL_TRY(cuda_launch(ctx, s->fn, s->sh.n, args));
      }
      return post_act(ctx, s, y, p[3]);
    }
    default: return rill__status(RILL_INTERNAL, "bad CUDA op state");
  }
}
