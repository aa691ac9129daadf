/* kcache.h: run-time compiled kernels, cached.
 *
 * NVRTC compiles CUDA C to CUBIN for the device's architecture. Results are
 * kept in memory (one module per distinct source) and on disk under
 * $XDG_CACHE_HOME/rill (else ~/.cache/rill), keyed by a hash of the source,
 * the options, the NVRTC version and the architecture. Disk entries are
 * written atomically and checksummed: a damaged one is ignored and rebuilt.
 * A compile error returns the compiler's log in the status. What the
 * libraries' heuristics and timings chose (a convolution's algorithm, cuDNN
 * execution plans, cuBLASLt's algorithms) goes to the plan cache
 * (pcache.h), one file beside the kernels read once at kcache_create and
 * written by kcache_flush (kcache_choice_*, kcache_blob_*).
 */
#ifndef RILL_KERNELS_KCACHE_H
#define RILL_KERNELS_KCACHE_H

#include "cuda_api.h"
#include "pcache.h"

typedef struct kcache kcache_t;

typedef struct kcache_stats {
  long compiled, disk_hits, memory_hits;
  long choices_timed, choices_from_disk;   /* kcache_choice_put / kcache_choice_get hits */
  long plans_built, plans_from_disk;       /* library plans found by heuristics here / restored (kcache_count_plan) */
  long long load_ns;                       /* compiling and loading modules, summed over threads */
  long long dnn_ns, lt_ns;                 /* choosing cuDNN plans and cuBLASLt algorithms, summed over threads (kcache_add_ns) */
} kcache_stats_t;

rill_status_t kcache_create(const rill_allocator_t *a, const rill_cuda_api_t *api, int sm, kcache_t **out);
void kcache_destroy(kcache_t *c);
/* The function `name` of `source`, compiled once. Thread-safe: compiles of
 * different sources proceed in parallel. */
rill_status_t kcache_get(kcache_t *c, const char *source, const char *name, CUfunction *out);
kcache_stats_t kcache_stats(const kcache_t *c);

/* Choices made by timing on this device (a convolution's algorithm for a
 * shape), kept on disk beside the kernels, so that every process makes the
 * same one and a warm start times nothing. `key` names the choice in full
 * (device, library versions, op, shape); a choice is `n` bytes. Get is false
 * when there is none or its file is damaged; put is best effort. */
bool kcache_choice_get(kcache_t *c, const char *key, void *val, size_t n);
void kcache_choice_put(kcache_t *c, const char *key, const void *val, size_t n);
/* The same for values of any size (a cuDNN plan's JSON): get gives a copy
 * freed with the cache's allocator (rill__free), put is best effort. */
bool kcache_blob_get(kcache_t *c, const char *key, uint8_t **val, size_t *n);
void kcache_blob_put(kcache_t *c, const char *key, const void *val, size_t n);
/* Writes the plan cache if anything was put (after an op set is prepared, and at destroy). */
void kcache_flush(kcache_t *c);
/* "" or why the plan cache's file was ignored (damaged): a warning for the user. */
const char *kcache_warning(const kcache_t *c);
/* Counts a library plan as built by heuristics or restored from the cache, and time spent choosing. */
enum { KCACHE_DNN, KCACHE_LT };
void kcache_count_plan(kcache_t *c, bool from_disk);
void kcache_add_ns(kcache_t *c, int lib, long long ns);

#endif
