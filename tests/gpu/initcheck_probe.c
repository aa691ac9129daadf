/* initcheck_probe.c: does compute-sanitizer's initcheck see stores made by
 * cp.async.bulk (the Tensor Memory Accelerator's copies from shared to
 * global memory, which cuBLASLt's Hopper kernels write their output with)?
 * Two kernels write the same 1 KiB buffer, one with plain stores and one
 * with a bulk copy; each buffer is copied back and checked. Run it under
 * `compute-sanitizer --tool initcheck` (tests/gpu/run.sh does): reports
 * after "bulk" while its values are right mean the tool does not see those
 * stores, which is why ops/cuda_nn.c marks cuBLASLt's outputs written
 * (mark_written). Needs sm_90 or later; prints why it skips otherwise. */
#include "probe.h"

static const char src[] =
    "extern \"C\" __global__ void plain(float *out) { out[threadIdx.x] = threadIdx.x; }\n"
    "extern \"C\" __global__ void bulk(float *out) {\n"
    "  __shared__ __align__(128) float s[256];\n"
    "  s[threadIdx.x] = threadIdx.x;\n"
    "  asm volatile(\"fence.proxy.async.shared::cta;\");\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0) {\n"
    "    unsigned sa = (unsigned)__cvta_generic_to_shared(s);\n"
    "    asm volatile(\"cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\" :: \"l\"(out), \"r\"(sa), \"r\"(1024) : \"memory\");\n"
    "    asm volatile(\"cp.async.bulk.commit_group;\");\n"
    "    asm volatile(\"cp.async.bulk.wait_group 0;\" ::: \"memory\");\n"
    "  }\n"
    "}\n";

int main(void) {
  probe_t pr;
  if (!probe_open(&pr, "initcheck_probe", 90, "cp.async.bulk")) return 0;
  const rill_cuda_api_t *api = pr.api;
  kcache_t *kc = pr.kc;
  int bad_total = 0;
  for (int k = 0; k < 2; k++) {
    const char *name = k ? "bulk" : "plain";
    CUfunction f;
    CUdeviceptr out;
    die(kcache_get(kc, src, name, &f));
    die(CU(api, cuMemAlloc, &out, 1024));
    void *args[] = {&out};
    die(CU(api, cuLaunchKernel, f, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    die(CU(api, cuStreamSynchronize, NULL));
    float h[256];
    die(CU(api, cuMemcpyDtoHAsync, h, out, sizeof h, NULL));
    die(CU(api, cuStreamSynchronize, NULL));
    int bad = 0;
    for (int i = 0; i < 256; i++) bad += h[i] != (float)i;
    printf("%s: %d of 256 values wrong\n", name, bad);
    fflush(stdout);
    bad_total += bad;
    die(CU(api, cuMemFree, out));
  }
  probe_close(&pr);
  return bad_total != 0;
}
