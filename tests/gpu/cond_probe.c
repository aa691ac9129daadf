/* cond_probe.c: a CUDA graph with a WHILE conditional node, made by stream
 * capture the way vm/device_cuda.c makes them (a kernel sets the condition
 * through cudaGraphSetConditional; the body is captured into the node's body
 * graph with cuStreamBeginCaptureToGraph), without the VM. With `fork` the
 * body forks a second stream and joins it, as tests/fixtures/control.vmasm's
 * loop body does; with `single` it stays on one stream. Each launch runs the
 * body 3 times over 4 floats and the result is checked on the host.
 *
 *   cond_probe fork|single [LAUNCHES]
 *
 * Not a test: tests/gpu/run.sh runs it side by side under compute-sanitizer
 * memcheck, to tell whether what the `control` fixture meets there
 * (CUDA_ERROR_ILLEGAL_ADDRESS with no access reported) needs the VM. */
#include <math.h>
#include <string.h>

#include "probe.h"

static const char src[] =
    "extern \"C\" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);\n"
    "extern \"C\" __global__ void set_cond(unsigned long long h, unsigned long long *count, int reset) {\n"
    "  if (reset) *count = 0;\n"
    "  cudaGraphSetConditional(h, (*count)++ < 3);\n"
    "}\n"
    "extern \"C\" __global__ void ftanh(const float *x, float *y) { y[threadIdx.x] = tanhf(x[threadIdx.x]); }\n"
    "extern \"C\" __global__ void fsig(const float *x, float *y) { y[threadIdx.x] = 1.0f / (1.0f + expf(-x[threadIdx.x])); }\n"
    "extern \"C\" __global__ void fadd(const float *a, const float *b, float *y) { y[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x]; }\n";

int main(int argc, char **argv) {
  bool fork = argc > 1 && strcmp(argv[1], "fork") == 0;
  int launches = argc > 2 ? atoi(argv[2]) : 30;
  probe_t pr;
  if (!probe_open(&pr, "cond_probe", 0, "")) return 0;
  const rill_cuda_api_t *api = pr.api;
  CUcontext ctx = pr.ctx;
  kcache_t *kc = pr.kc;
  CUfunction set_cond, ftanh, fsig, fadd;
  die(kcache_get(kc, src, "set_cond", &set_cond));
  die(kcache_get(kc, src, "ftanh", &ftanh));
  die(kcache_get(kc, src, "fsig", &fsig));
  die(kcache_get(kc, src, "fadd", &fadd));
  CUstream s, b0, b1;
  CUevent e0, e1;
  die(CU(api, cuStreamCreate, &s, CU_STREAM_NON_BLOCKING));
  die(CU(api, cuStreamCreate, &b0, CU_STREAM_NON_BLOCKING));
  die(CU(api, cuStreamCreate, &b1, CU_STREAM_NON_BLOCKING));
  die(CU(api, cuEventCreate, &e0, CU_EVENT_DISABLE_TIMING));
  die(CU(api, cuEventCreate, &e1, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr x, a, b, count;
  die(CU(api, cuMemAlloc, &x, 16));
  die(CU(api, cuMemAlloc, &a, 16));
  die(CU(api, cuMemAlloc, &b, 16));
  die(CU(api, cuMemAlloc, &count, 8));

  /* The graph: set_cond(reset), then WHILE { [fork] a = tanh(x) | b = sigmoid(x) [join]; x = a + b; set_cond }. */
  die(CU(api, cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUstreamCaptureStatus cs;
  CUgraph g;
  const CUgraphNode *deps;
  const CUgraphEdgeData *edges;
  size_t ndeps;
  die(CU(api, cuStreamGetCaptureInfo, s, &cs, NULL, &g, &deps, &edges, &ndeps));
  CUgraphConditionalHandle h;
  die(CU(api, cuGraphConditionalHandleCreate, &h, g, ctx, 0, 0));
  unsigned long long hv = h;
  int reset = 1, again = 0;
  void *cargs[] = {&hv, &count, &reset};
  die(CU(api, cuLaunchKernel, set_cond, 1, 1, 1, 1, 1, 1, 0, s, cargs, NULL));
  die(CU(api, cuStreamGetCaptureInfo, s, &cs, NULL, &g, &deps, &edges, &ndeps));
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h;
  p.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  p.conditional.size = 1;
  p.conditional.ctx = ctx;
  CUgraphNode node;
  die(CU(api, cuGraphAddNode, &node, g, deps, edges, ndeps, &p));
  die(CU(api, cuStreamUpdateCaptureDependencies, s, &node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
  die(CU(api, cuStreamBeginCaptureToGraph, b0, p.conditional.phGraph_out[0], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED));
  void *ta[] = {&x, &a}, *sa[] = {&x, &b}, *aa[] = {&a, &b, &x};
  CUstream side = b0;
  if (fork) {
    side = b1;
    die(CU(api, cuEventRecord, e0, b0));
    die(CU(api, cuStreamWaitEvent, b1, e0, 0));
  }
  die(CU(api, cuLaunchKernel, ftanh, 1, 1, 1, 4, 1, 1, 0, side, ta, NULL));
  if (fork) die(CU(api, cuEventRecord, e1, b1));
  die(CU(api, cuLaunchKernel, fsig, 1, 1, 1, 4, 1, 1, 0, b0, sa, NULL));
  if (fork) die(CU(api, cuStreamWaitEvent, b0, e1, 0));
  die(CU(api, cuLaunchKernel, fadd, 1, 1, 1, 4, 1, 1, 0, b0, aa, NULL));
  cargs[2] = &again;
  die(CU(api, cuLaunchKernel, set_cond, 1, 1, 1, 1, 1, 1, 0, b0, cargs, NULL));
  CUgraph body;
  die(CU(api, cuStreamEndCapture, b0, &body));
  CUgraph whole;
  die(CU(api, cuStreamEndCapture, s, &whole));
  CUgraphExec ex;
  die(CU(api, cuGraphInstantiateWithFlags, &ex, whole, 0));

  int wrong = 0;
  for (int l = 0; l < launches; l++) {
    float in[4], want[4], got[4];
    for (int i = 0; i < 4; i++) {
      in[i] = want[i] = (float)(l % 7) * 0.25f - 0.5f + 0.1f * (float)i;
      for (int k = 0; k < 3; k++) want[i] = tanhf(want[i]) + 1.0f / (1.0f + expf(-want[i]));
    }
    die(CU(api, cuMemcpyHtoDAsync, x, in, sizeof in, s));
    die(CU(api, cuGraphLaunch, ex, s));
    die(CU(api, cuMemcpyDtoHAsync, got, x, sizeof got, s));
    die(CU(api, cuStreamSynchronize, s));
    for (int i = 0; i < 4; i++) wrong += fabsf(got[i] - want[i]) > 1e-5f;
  }
  printf("cond_probe %s: %d launches, %d of %d values wrong\n", fork ? "fork" : "single", launches, wrong, 4 * launches);
  api->cuGraphExecDestroy(ex);
  api->cuGraphDestroy(whole);
  probe_close(&pr);
  return wrong != 0;
}
