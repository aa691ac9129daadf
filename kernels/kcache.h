/* kcache.h: run-time compiled kernels, cached.
 *
 * NVRTC compiles CUDA C to CUBIN for the device's architecture. Results are
 * kept in memory (one module per distinct source) and on disk under
 * $XDG_CACHE_HOME/rill (else ~/.cache/rill), keyed by a hash of the source,
 * the options, the NVRTC version and the architecture. Disk entries are
 * written atomically and checksummed: a damaged one is ignored and rebuilt.
 * A compile error returns the compiler's log in the status.
 */
#ifndef RILL_KERNELS_KCACHE_H
#define RILL_KERNELS_KCACHE_H

#include "cuda_api.h"

typedef struct kcache kcache_t;

typedef struct kcache_stats {
  long compiled, disk_hits, memory_hits;
} kcache_stats_t;

rill_status_t kcache_create(const rill_allocator_t *a, const rill_cuda_api_t *api, int sm, kcache_t **out);
void kcache_destroy(kcache_t *c);
/* The function `name` of `source`, compiled once. Thread-safe: compiles of
 * different sources proceed in parallel. */
rill_status_t kcache_get(kcache_t *c, const char *source, const char *name, CUfunction *out);
kcache_stats_t kcache_stats(const kcache_t *c);

#endif
