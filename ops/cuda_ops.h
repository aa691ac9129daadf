/* cuda_ops.h: ops on the CUDA device.
 *
 * Each op-table entry is prepared once when a VM binds its module
 * (kernels generated and compiled, library descriptors and algorithms
 * chosen) and then run on a stream with device pointers. Elementwise ops
 * become CUDA C generated from each op's expression; data movement is one
 * strided-copy kernel family; other ops use the sources in kernels/ or the
 * CUDA libraries.
 */
#ifndef RILL_OPS_CUDA_OPS_H
#define RILL_OPS_CUDA_OPS_H

#include <pthread.h>

#include "../kernels/cuda_api.h"
#include "../kernels/kcache.h"
#include "ops.h"

/* What preparation may use. */
typedef struct ops_cuda_env {
  const rill_cuda_api_t *api;
  const rill_allocator_t *a;
  kcache_t *cache;
  int sm;                    /* compute capability, e.g. 90 */
  int num_sms;
  cublasLtHandle_t lt;       /* for choosing algorithms */
  cudnnHandle_t dnn;
  pthread_mutex_t *lib_mu;   /* serialises use of dnn, and timings, when ops are prepared in parallel (cuBLASLt is thread-safe) */
  char device_name[128];     /* keys choices timed on this device (kcache_choice_*) */
} ops_cuda_env_t;

/* What a run gets: the stream and its per-stream library handles. */
/* A stream's cuDNN variant packs (the graph API's binding of a convolution's
 * x, w, y, bias and residual where its plan adds them, and workspace), by those pointers: a VM's buffers stay put from run
 * to run, so a pack is built once instead of at every launch. Used by one
 * run at a time, as its stream is. */
enum { OPS_VP_SLOTS = 256 };
typedef struct ops_vp_slot {
  CUdeviceptr x, w, y, b, z, ws;
  cudnnBackendDescriptor_t vp;
} ops_vp_slot_t;
typedef struct ops_vp_cache {
  ops_vp_slot_t slot[OPS_VP_SLOTS];
} ops_vp_cache_t;
void ops_cuda_vp_clear(const rill_cuda_api_t *api, ops_vp_cache_t *c);

typedef struct ops_cuda_ctx {
  const rill_cuda_api_t *api;
  CUstream stream;
  cublasLtHandle_t lt;
  cudnnHandle_t dnn;
  CUdeviceptr workspace;
  size_t workspace_size;
  CUdeviceptr error_word;    /* int; kernels raise run-time errors here (see RILL_KERR_*) */
  int num_sms;
  ops_vp_cache_t *vps;       /* NULL: packs are built and freed at each launch */
  bool capturing;            /* the stream is captured into a graph: choices by device time */
} ops_cuda_ctx_t;

enum { RILL_KERR_NONE = 0, RILL_KERR_INDEX = 1, RILL_KERR_LOOP = 2, RILL_KERR_LENGTH = 3 /* attention's len outside 0..Skv */,
       RILL_KERR_UPDATE = 4 /* update's offset outside the state */ };

/* Whether this op has a CUDA implementation for its types (else a reason). */
const char *ops_cuda_unsupported(const ops_plan_t *plan);
rill_status_t ops_cuda_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out_state);
rill_status_t ops_cuda_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state,
                           void *const *in, void *const *out);
void ops_cuda_release(const ops_cuda_env_t *env, void *state);
/* The CUDA C source of an elementwise op or fused group (what prepare
 * compiles; for tests that compile it without a GPU), and its vector width. */
rill_status_t ops_cuda_ew_source(const ops_plan_t *plan, const rill_allocator_t *a, rill_buf_t *out, int *out_width);
/* Device workspace bytes a run of this op needs on its stream, and whether it uses cuDNN. */
size_t ops_cuda_workspace(const void *state);
/* A prepared entry's candidates, one name a line (cuda_nn_candidates; "default" for other ops). */
rill_status_t ops_cuda_candidates(const ops_cuda_env_t *env, const ops_plan_t *plan, void *state, rill_buf_t *out);
bool ops_cuda_uses_cudnn(const void *state);

#endif
