/* probe.h: what the GPU probes (programs tests/gpu/run.sh runs, not tests)
 * share: device 0 with its primary context current and a kernel cache, and
 * a `die` that names the probe. Included by one file each. */
#ifndef RILL_TESTS_PROBE_H
#define RILL_TESTS_PROBE_H
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda_api.h"
#include "kernels/kcache.h"
#include "rill.h"

typedef struct probe {
  const rill_cuda_api_t *api;
  CUdevice dev;
  CUcontext ctx;
  kcache_t *kc;
} probe_t;

static const char *probe_name = "probe";

static void die(rill_status_t st) {
  if (!st) return;
  fprintf(stderr, "%s: %s\n", probe_name, rill_status_message(st));
  exit(1);
}

/* Opens device 0 for probe `name`; false, having printed why it skips, where
 * no GPU is usable or its compute capability is below min_cc (`needs` says
 * what the probe needs of it). */
static bool probe_open(probe_t *p, const char *name, int min_cc, const char *needs) {
  probe_name = name;
  rill_cuda_info_t ci;
  const char *why = NULL;
  if (!rill_cuda_info(&ci, &why)) {
    printf("skipped: %s\n", why);
    return false;
  }
  if (ci.compute_capability < min_cc) {
    printf("skipped: sm_%d has no %s\n", ci.compute_capability, needs);
    return false;
  }
  p->api = rill_cuda_api(&why);
  die(CU(p->api, cuDeviceGet, &p->dev, 0));
  die(CU(p->api, cuDevicePrimaryCtxRetain, &p->ctx, p->dev));
  die(CU(p->api, cuCtxSetCurrent, p->ctx));
  die(kcache_create(rill_allocator_system(), p->api, ci.compute_capability, &p->kc));
  return true;
}

static void probe_close(probe_t *p) {
  kcache_destroy(p->kc);
  p->api->cuDevicePrimaryCtxRelease(p->dev);
}
#endif
