/* cudnn_fusion_probe.c: can cuDNN run a convolution with its bias and relu
 * fused (what a conv2d with a bias and activation="relu" is after -O1), at
 * the shapes of batch-1 CNNs in f16 channels-last, and how fast against the
 * convolution alone? Rill today runs the convolution, then channel_bias.cu
 * for the bias and relu: 165 of 975 us of kernel time per inception_v3 f16
 * run, 110 of 478 for resnet50 (bench/RESULTS.md, run AA).
 *
 * For each shape it builds two operation graphs of cuDNN's graph API: the
 * convolution alone (x, w -> y), and convolution -> add bias ([1,K,1,1]) ->
 * relu, the intermediates virtual float tensors. For each it reads
 * heuristics mode A's engine configurations, notes which compile at run
 * time (CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION), makes execution plans of
 * up to PRECOMPILED engines that do not and RUNTIME of those that do
 * (timing the plan's finalisation, where run-time compilation happens), and
 * times each plan's execution with events (the best of 3 rounds of 20
 * calls). The fastest fused plan's output is checked against the fastest
 * convolution's, with the bias and relu applied on the host in float. A
 * second line per shape times the legacy API's
 * cudnnConvolutionBiasActivationForward against cudnnConvolutionForward.
 * Prints one line per shape and graph; exits 1 when a fused result is
 * wrong, 0 otherwise (also when no engine fuses: that is the answer).
 * Skips with a message where no GPU or no cuDNN is usable.
 *
 *   build/tests/cudnn_fusion_probe [RUNTIME]   (RUNTIME: run-time compiled engines tried per graph, 2) */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa/base.h"
#include "kernels/cuda_api.h"
#include "rill.h"

typedef cudnnBackendDescriptor_t bdesc_t;
enum { UID_X = 1, UID_W, UID_B, UID_Y, UID_T1, UID_T2 };
enum { CANDIDATES = 48, PRECOMPILED = 6 };

static const rill_cuda_api_t *api;
static cudnnHandle_t dnn;

typedef struct shape { const char *what; int64_t n, c, h, w, k, r, pad, stride; } shape_t;
static const shape_t SHAPES[] = {
    {"inception stem 3x3", 1, 32, 147, 147, 64, 3, 1, 1},
    {"inception 1x1 35x35", 1, 192, 35, 35, 64, 1, 0, 1},
    {"inception 1x1 17x17", 1, 768, 17, 17, 192, 1, 0, 1},
    {"resnet 3x3 56x56", 1, 64, 56, 56, 64, 3, 1, 1},
    {"resnet 1x1 56x56", 1, 256, 56, 56, 64, 1, 0, 1},
    {"resnet 1x1 14x14", 1, 1024, 14, 14, 256, 1, 0, 1},
    {"resnet 3x3 7x7", 1, 512, 7, 7, 512, 3, 1, 1},
    {"resnet 3x3 s2 28x28", 1, 128, 56, 56, 128, 3, 1, 2},
};

static bool bset(bdesc_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, int64_t count, const void *v) {
  return api->cudnnBackendSetAttribute(d, n, t, count, v) == CUDNN_STATUS_SUCCESS;
}

static bdesc_t bmake(cudnnBackendDescriptorType_t type) {
  bdesc_t d = NULL;
  return api->cudnnBackendCreateDescriptor(type, &d) == CUDNN_STATUS_SUCCESS ? d : NULL;
}

/* Every descriptor made for one graph, freed together. */
typedef struct bag { bdesc_t d[32]; int n; } bag_t;
static bdesc_t keep(bag_t *b, bdesc_t d) {
  if (d && b->n < 32) b->d[b->n++] = d;
  return d;
}
static void bag_free(bag_t *b) {
  while (b->n) api->cudnnBackendDestroyDescriptor(b->d[--b->n]);
}

/* A tensor of logical dims N, C, H, W laid out channels-last. */
static bdesc_t tensor(bag_t *b, int64_t uid, cudnnDataType_t dt, const int64_t d[4], bool virt) {
  int64_t st[4] = {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]}, align = 16;
  bdesc_t t = keep(b, bmake(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
  bool ok = t && bset(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) && bset(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, d) &&
            bset(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st) && bset(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) &&
            bset(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align) &&
            (!virt || bset(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &(bool){true})) &&
            api->cudnnBackendFinalize(t) == CUDNN_STATUS_SUCCESS;
  return ok ? t : NULL;
}

static bdesc_t pointwise(bag_t *b, cudnnPointwiseMode_t mode, bdesc_t x, bdesc_t bias, bdesc_t y) {
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  bdesc_t pw = keep(b, bmake(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  if (!pw || !bset(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
      !bset(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) || api->cudnnBackendFinalize(pw) != CUDNN_STATUS_SUCCESS)
    return NULL;
  bdesc_t op = keep(b, bmake(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR));
  bool ok = op && bset(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw) &&
            bset(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) &&
            (!bias || bset(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bias)) &&
            bset(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) && api->cudnnBackendFinalize(op) == CUDNN_STATUS_SUCCESS;
  return ok ? op : NULL;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* the handle attribute: still how a graph meets its device */
/* The operation graph: the convolution alone, or with bias and relu. */
static bdesc_t graph(bag_t *b, const shape_t *s, bool fused) {
  int64_t oh = (s->h + 2 * s->pad - s->r) / s->stride + 1, ow = (s->w + 2 * s->pad - s->r) / s->stride + 1;
  int64_t xd[4] = {s->n, s->c, s->h, s->w}, wd[4] = {s->k, s->c, s->r, s->r}, yd[4] = {s->n, s->k, oh, ow}, bd[4] = {1, s->k, 1, 1};
  bdesc_t x = tensor(b, UID_X, CUDNN_DATA_HALF, xd, false), w = tensor(b, UID_W, CUDNN_DATA_HALF, wd, false);
  bdesc_t y = tensor(b, UID_Y, CUDNN_DATA_HALF, yd, false);
  bdesc_t t1 = fused ? tensor(b, UID_T1, CUDNN_DATA_FLOAT, yd, true) : y;
  bdesc_t t2 = fused ? tensor(b, UID_T2, CUDNN_DATA_FLOAT, yd, true) : NULL, bias = fused ? tensor(b, UID_B, CUDNN_DATA_HALF, bd, false) : NULL;
  if (!x || !w || !y || !t1 || (fused && (!t2 || !bias))) return NULL;
  cudnnDataType_t cdt = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t two = 2, one2[2] = {1, 1}, str[2] = {s->stride, s->stride}, pad[2] = {s->pad, s->pad};
  bdesc_t cd = keep(b, bmake(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR));
  if (!cd || !bset(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &cdt) ||
      !bset(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
      !bset(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two) ||
      !bset(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2) ||
      !bset(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str) ||
      !bset(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
      !bset(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) || api->cudnnBackendFinalize(cd) != CUDNN_STATUS_SUCCESS)
    return NULL;
  float alpha = 1, beta = 0;
  bdesc_t conv = keep(b, bmake(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR));
  if (!conv || !bset(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
      !bset(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) ||
      !bset(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t1) ||
      !bset(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd) ||
      !bset(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha) ||
      !bset(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta) ||
      api->cudnnBackendFinalize(conv) != CUDNN_STATUS_SUCCESS)
    return NULL;
  bdesc_t ops[3] = {conv, NULL, NULL};
  int64_t nops = 1;
  if (fused) {
    if (!(ops[1] = pointwise(b, CUDNN_POINTWISE_ADD, t1, bias, t2)) || !(ops[2] = pointwise(b, CUDNN_POINTWISE_RELU_FWD, t2, NULL, y))) return NULL;
    nops = 3;
  }
  bdesc_t g = keep(b, bmake(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR));
  if (!g || !bset(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops) ||
      !bset(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn) || api->cudnnBackendFinalize(g) != CUDNN_STATUS_SUCCESS)
    return NULL;
  return g;
}
#pragma GCC diagnostic pop

/* The engine behind a configuration: its global index and whether it compiles at run time. */
static bool engine_of(bdesc_t cfg, int64_t *gid, bool *rtc) {
  bdesc_t eng = bmake(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0, nb = 0;
  cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  bool ok = eng && api->cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, gid) == CUDNN_STATUS_SUCCESS &&
            api->cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, beh) ==
                CUDNN_STATUS_SUCCESS;
  *rtc = false;
  for (int64_t i = 0; ok && i < nb; i++) *rtc |= beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  if (eng) api->cudnnBackendDestroyDescriptor(eng);
  return ok;
}

typedef struct bufs { CUdeviceptr x, w, b, y, ws; size_t ws_size; } bufs_t;

/* Device us per call of a plan (best of 3 rounds of 20 calls), or INFINITY. */
static double time_plan(bdesc_t plan, int64_t ws, bufs_t *m, bool fused) {
  if ((size_t)ws > m->ws_size) {
    if (m->ws) api->cuMemFree(m->ws);
    m->ws = 0;
    m->ws_size = 0;
    if (api->cuMemAlloc(&m->ws, (size_t)ws) != CUDA_SUCCESS) return INFINITY;
    m->ws_size = (size_t)ws;
  }
  void *ptrs[4] = {(void *)m->x, (void *)m->w, (void *)m->y, (void *)m->b}, *wsp = (void *)m->ws;
  int64_t uids[4] = {UID_X, UID_W, UID_Y, UID_B};
  bdesc_t vp = bmake(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  bool ok = vp && bset(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, fused ? 4 : 3, ptrs) &&
            bset(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, fused ? 4 : 3, uids) &&
            bset(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp) && api->cudnnBackendFinalize(vp) == CUDNN_STATUS_SUCCESS;
  CUevent e0 = NULL, e1 = NULL;
  ok = ok && api->cuEventCreate(&e0, CU_EVENT_DEFAULT) == CUDA_SUCCESS && api->cuEventCreate(&e1, CU_EVENT_DEFAULT) == CUDA_SUCCESS;
  double best = INFINITY;
  for (int r = 0; ok && r <= 3; r++) {
    ok = api->cuEventRecord(e0, NULL) == CUDA_SUCCESS;
    for (int k = 0; ok && k < 20; k++) ok = api->cudnnBackendExecute(dnn, plan, vp) == CUDNN_STATUS_SUCCESS;
    float ms = 0;
    ok = ok && api->cuEventRecord(e1, NULL) == CUDA_SUCCESS && api->cuEventSynchronize(e1) == CUDA_SUCCESS &&
         api->cuEventElapsedTime(&ms, e0, e1) == CUDA_SUCCESS;
    if (ok && r && ms * 1e3 / 20 < best) best = ms * 1e3 / 20; /* r = 0: the warm-up */
  }
  if (e0) api->cuEventDestroy(e0);
  if (e1) api->cuEventDestroy(e1);
  if (vp) api->cudnnBackendDestroyDescriptor(vp);
  return ok ? best : INFINITY;
}

typedef struct result { int listed, rtc_listed, made, rtc_made; double best, best_rtc, finalize_ms_rtc; int64_t gid, gid_rtc; bdesc_t plan; } result_t;

/* Heuristics mode A's configurations for graph g: plans made and timed; the fastest plan kept in r->plan. */
static void survey(bdesc_t g, bufs_t *m, bool fused, int runtime, result_t *r) {
  memset(r, 0, sizeof *r);
  r->best = r->best_rtc = INFINITY;
  r->gid = r->gid_rtc = -1;
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  bdesc_t heur = bmake(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), cfg[CANDIDATES] = {0};
  int64_t n = 0;
  bool ok = heur && bset(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g) &&
            bset(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) && api->cudnnBackendFinalize(heur) == CUDNN_STATUS_SUCCESS;
  for (int i = 0; ok && i < CANDIDATES; i++) ok = (cfg[i] = bmake(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)) != NULL;
  if (ok) ok = api->cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, CANDIDATES, &n, cfg) == CUDNN_STATUS_SUCCESS;
  for (int64_t i = 0; ok && i < n; i++) {
    int64_t gid;
    bool rtc;
    if (!engine_of(cfg[i], &gid, &rtc)) continue;
    r->listed++;
    r->rtc_listed += rtc;
    if (rtc ? r->rtc_made >= runtime : r->made - r->rtc_made >= PRECOMPILED) continue;
    double t0 = rill__now_us();
    bdesc_t plan = bmake(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    int64_t ws = 0, got = 0;
    bool made = plan && bset(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn) &&
                bset(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]) &&
                api->cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
                api->cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws) == CUDNN_STATUS_SUCCESS;
    double fin_ms = (rill__now_us() - t0) / 1e3;
    double us = made ? time_plan(plan, ws, m, fused) : INFINITY;
    if (made) {
      r->made++;
      r->rtc_made += rtc;
    }
    bool better = rtc ? us < r->best_rtc : us < r->best;
    if (better && rtc) {
      r->best_rtc = us, r->gid_rtc = gid, r->finalize_ms_rtc = fin_ms;
    } else if (better) {
      r->best = us, r->gid = gid;
    }
    /* the fastest plan of all is kept for the check */
    if (made && us < INFINITY && us <= fmin(r->best, r->best_rtc)) {
      if (r->plan) api->cudnnBackendDestroyDescriptor(r->plan);
      r->plan = plan;
    } else if (plan) {
      api->cudnnBackendDestroyDescriptor(plan);
    }
  }
  for (int i = 0; i < CANDIDATES; i++)
    if (cfg[i]) api->cudnnBackendDestroyDescriptor(cfg[i]);
  if (heur) api->cudnnBackendDestroyDescriptor(heur);
}

/* The legacy API's cudnnConvolutionBiasActivationForward (relu needs the
 * IMPLICIT_PRECOMP_GEMM algorithm), next to cudnnConvolutionForward with the
 * same algorithm: device us per call, or INFINITY where cuDNN refuses. Looked
 * up here, not in the API table, so that a cuDNN without it only changes this line. */
typedef cudnnStatus_t (*cba_fn)(cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *, const cudnnFilterDescriptor_t,
                                const void *, const cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, void *, size_t, const void *,
                                const cudnnTensorDescriptor_t, const void *, const cudnnTensorDescriptor_t, const void *,
                                const cudnnActivationDescriptor_t, const cudnnTensorDescriptor_t, void *);
static void legacy(const shape_t *s, bufs_t *m, double *conv_us, double *fused_us) {
  *conv_us = *fused_us = INFINITY;
  cba_fn cba = (cba_fn)dlsym(api->libcudnn, "cudnnConvolutionBiasActivationForward");
  cudnnStatus_t (*mk_act)(cudnnActivationDescriptor_t *) = (cudnnStatus_t(*)(cudnnActivationDescriptor_t *))dlsym(api->libcudnn, "cudnnCreateActivationDescriptor");
  cudnnStatus_t (*set_act)(cudnnActivationDescriptor_t, cudnnActivationMode_t, cudnnNanPropagation_t, double) =
      (cudnnStatus_t(*)(cudnnActivationDescriptor_t, cudnnActivationMode_t, cudnnNanPropagation_t, double))dlsym(api->libcudnn, "cudnnSetActivationDescriptor");
  cudnnStatus_t (*rm_act)(cudnnActivationDescriptor_t) = (cudnnStatus_t(*)(cudnnActivationDescriptor_t))dlsym(api->libcudnn, "cudnnDestroyActivationDescriptor");
  if (!cba || !mk_act || !set_act || !rm_act) {
    printf("%-22s legacy API: cudnnConvolutionBiasActivationForward not found\n", s->what);
    return;
  }
  int oh = (int)((s->h + 2 * s->pad - s->r) / s->stride + 1), ow = (int)((s->w + 2 * s->pad - s->r) / s->stride + 1);
  cudnnTensorDescriptor_t xd = NULL, yd = NULL, bd = NULL;
  cudnnFilterDescriptor_t wd = NULL;
  cudnnConvolutionDescriptor_t cd = NULL;
  cudnnActivationDescriptor_t ad = NULL;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  size_t ws = 0;
  bool ok = api->cudnnCreateTensorDescriptor(&xd) == 0 && api->cudnnCreateTensorDescriptor(&yd) == 0 && api->cudnnCreateTensorDescriptor(&bd) == 0 &&
            api->cudnnCreateFilterDescriptor(&wd) == 0 && api->cudnnCreateConvolutionDescriptor(&cd) == 0 && mk_act(&ad) == 0 &&
            api->cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, (int)s->n, (int)s->c, (int)s->h, (int)s->w) == 0 &&
            api->cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, (int)s->n, (int)s->k, oh, ow) == 0 &&
            api->cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, 1, (int)s->k, 1, 1) == 0 &&
            api->cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, (int)s->k, (int)s->c, (int)s->r, (int)s->r) == 0 &&
            api->cudnnSetConvolution2dDescriptor(cd, (int)s->pad, (int)s->pad, (int)s->stride, (int)s->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                 CUDNN_DATA_FLOAT) == 0 &&
            api->cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH) == 0 && set_act(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0) == 0 &&
            api->cudnnGetConvolutionForwardWorkspaceSize(dnn, xd, wd, cd, yd, algo, &ws) == 0;
  if (ok && ws > m->ws_size) {
    if (m->ws) api->cuMemFree(m->ws);
    m->ws = 0;
    m->ws_size = 0;
    ok = api->cuMemAlloc(&m->ws, ws) == CUDA_SUCCESS;
    if (ok) m->ws_size = ws;
  }
  CUevent e0 = NULL, e1 = NULL;
  ok = ok && api->cuEventCreate(&e0, CU_EVENT_DEFAULT) == CUDA_SUCCESS && api->cuEventCreate(&e1, CU_EVENT_DEFAULT) == CUDA_SUCCESS;
  float one = 1, zero = 0;
  for (int fused = 0; ok && fused < 2; fused++) {
    double best = INFINITY;
    bool good = true;
    for (int r = 0; good && r <= 3; r++) {
      good = api->cuEventRecord(e0, NULL) == CUDA_SUCCESS;
      for (int k = 0; good && k < 20; k++)
        good = (fused ? cba(dnn, &one, xd, (void *)m->x, wd, (void *)m->w, cd, algo, (void *)m->ws, ws, &zero, yd, (void *)m->y, bd, (void *)m->b, ad, yd,
                            (void *)m->y)
                      : api->cudnnConvolutionForward(dnn, &one, xd, (void *)m->x, wd, (void *)m->w, cd, algo, (void *)m->ws, ws, &zero, yd, (void *)m->y)) ==
               CUDNN_STATUS_SUCCESS;
      float ms = 0;
      good = good && api->cuEventRecord(e1, NULL) == CUDA_SUCCESS && api->cuEventSynchronize(e1) == CUDA_SUCCESS && api->cuEventElapsedTime(&ms, e0, e1) == CUDA_SUCCESS;
      if (good && r && ms * 1e3 / 20 < best) best = ms * 1e3 / 20;
    }
    *(fused ? fused_us : conv_us) = good ? best : INFINITY;
  }
  printf("%-22s legacy API, IMPLICIT_PRECOMP_GEMM: conv %.1f us, conv+bias+relu (ConvolutionBiasActivationForward) %.1f us%s\n", s->what, *conv_us,
         *fused_us, ok ? "" : " (descriptors refused)");
  if (e0) api->cuEventDestroy(e0);
  if (e1) api->cuEventDestroy(e1);
  if (xd) api->cudnnDestroyTensorDescriptor(xd);
  if (yd) api->cudnnDestroyTensorDescriptor(yd);
  if (bd) api->cudnnDestroyTensorDescriptor(bd);
  if (wd) api->cudnnDestroyFilterDescriptor(wd);
  if (cd) api->cudnnDestroyConvolutionDescriptor(cd);
  if (ad) rm_act(ad);
}

static bool upload(CUdeviceptr *d, const uint16_t *h, size_t n) {
  return api->cuMemAlloc(d, n * 2) == CUDA_SUCCESS && api->cuMemcpyHtoDAsync(*d, h, n * 2, NULL) == CUDA_SUCCESS &&
         api->cuStreamSynchronize(NULL) == CUDA_SUCCESS;
}

int main(int argc, char **argv) {
  int runtime = argc > 1 ? atoi(argv[1]) : 2;
  rill_cuda_info_t ci;
  const char *why = NULL;
  if (!rill_cuda_info(&ci, &why)) {
    printf("cudnn_fusion_probe skipped: %s\n", why);
    return 0;
  }
  if (!(api = rill_cuda_api(&why)) || !api->cudnnCreate) {
    printf("cudnn_fusion_probe skipped: %s\n", why ? why : "cuDNN is not loaded");
    return 0;
  }
  CUdevice dev;
  CUcontext ctx;
  if (api->cuDeviceGet(&dev, 0) != CUDA_SUCCESS || api->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
      api->cuCtxSetCurrent(ctx) != CUDA_SUCCESS || api->cudnnCreate(&dnn) != CUDNN_STATUS_SUCCESS) {
    printf("cudnn_fusion_probe: cannot set up the device and cuDNN\n");
    return 1;
  }
  int wrong = 0;
  srand(1);
  for (size_t si = 0; si < sizeof SHAPES / sizeof *SHAPES; si++) {
    const shape_t *s = &SHAPES[si];
    int64_t oh = (s->h + 2 * s->pad - s->r) / s->stride + 1, ow = (s->w + 2 * s->pad - s->r) / s->stride + 1;
    size_t nx = (size_t)(s->n * s->h * s->w * s->c), nw = (size_t)(s->k * s->r * s->r * s->c), ny = (size_t)(s->n * oh * ow * s->k);
    uint16_t *hx = malloc(nx * 2), *hw = malloc(nw * 2), *hb = malloc((size_t)s->k * 2), *hy = malloc(ny * 2), *hc = malloc(ny * 2);
    if (!hx || !hw || !hb || !hy || !hc) return 1;
    float scale = 1.0f / sqrtf((float)(s->c * s->r * s->r));
    for (size_t i = 0; i < nx; i++) hx[i] = rill__f32_to_f16((float)rand() / RAND_MAX * 2 - 1);
    for (size_t i = 0; i < nw; i++) hw[i] = rill__f32_to_f16(((float)rand() / RAND_MAX * 2 - 1) * scale * 2);
    for (int64_t i = 0; i < s->k; i++) hb[i] = rill__f32_to_f16((float)rand() / RAND_MAX - 0.5f);
    bufs_t m = {0};
    if (!upload(&m.x, hx, nx) || !upload(&m.w, hw, nw) || !upload(&m.b, hb, (size_t)s->k) || api->cuMemAlloc(&m.y, ny * 2) != CUDA_SUCCESS) {
      printf("%s: cannot allocate\n", s->what);
      return 1;
    }
    result_t r[2];
    for (int fused = 0; fused < 2; fused++) {
      bag_t b = {.n = 0};
      bdesc_t g = graph(&b, s, fused);
      if (!g) {
        printf("%-22s %-15s cuDNN refused the operation graph\n", s->what, fused ? "conv+bias+relu" : "conv");
        r[fused] = (result_t){.best = INFINITY, .best_rtc = INFINITY};
        bag_free(&b);
        continue;
      }
      survey(g, &m, fused, runtime, &r[fused]);
      const result_t *q = &r[fused];
      printf("%-22s %-15s %2d engines listed (%d compile at run time), %d plans made; precompiled best %.1f us (engine %lld)",
             s->what, fused ? "conv+bias+relu" : "conv", q->listed, q->rtc_listed, q->made, q->best, (long long)q->gid);
      if (q->gid_rtc >= 0) printf("; run-time compiled best %.1f us (engine %lld, plan made in %.0f ms)", q->best_rtc, (long long)q->gid_rtc, q->finalize_ms_rtc);
      printf("\n");
      /* The fastest plan's output: the convolution's kept for the check, the fused one checked against it. */
      if (q->plan) {
        time_plan(q->plan, 0, &m, fused); /* its last call's output stays in y */
        if (api->cuMemcpyDtoHAsync(fused ? hy : hc, m.y, ny * 2, NULL) != CUDA_SUCCESS || api->cuStreamSynchronize(NULL) != CUDA_SUCCESS) return 1;
        api->cudnnBackendDestroyDescriptor(q->plan);
      }
      bag_free(&b);
    }
    double lc, lf;
    legacy(s, &m, &lc, &lf);
    if (r[0].plan && r[1].plan) {
      double worst = 0, top = 0;
      for (size_t i = 0; i < ny; i++) {
        float want = rill__f16_to_f32(hc[i]) + rill__f16_to_f32(hb[i % (size_t)s->k]);
        want = want > 0 ? want : 0;
        double d = fabs((double)rill__f16_to_f32(hy[i]) - want);
        worst = d > worst ? d : worst;
        top = fabs(want) > top ? fabs(want) : top;
      }
      /* two f16 roundings (the convolution's output, then the sum) against one */
      bool ok = worst <= 4e-3 * (top > 1 ? top : 1);
      wrong += !ok;
      printf("%-22s fused against conv then bias and relu: max |diff| %.3g of max %.3g: %s\n", s->what, worst, top, ok ? "ok" : "WRONG");
    }
    api->cuMemFree(m.x), api->cuMemFree(m.w), api->cuMemFree(m.b), api->cuMemFree(m.y);
    if (m.ws) api->cuMemFree(m.ws);
    free(hx), free(hw), free(hb), free(hy), free(hc);
  }
  api->cudnnDestroy(dnn);
  api->cuDevicePrimaryCtxRelease(dev);
  return wrong != 0;
}
