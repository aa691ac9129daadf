/* kcache.c: NVRTC compilation with a memory and a disk cache. */
#include "kcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A source's module, or (module NULL) NVRTC's refusal of it with the
 * status's message: a thread that waited for its compile, or asks later,
 * fails with it instead of compiling it again, one after another. */
typedef struct kentry {
  uint64_t key;
  char *source;
  CUmodule module;
  char *refused;
} kentry_t;

/* A source being compiled or loaded by a thread (on that thread's stack):
 * another thread asking for it waits for it instead of compiling it again
 * (BERT has 12 attention ops of one source: 8 preparing threads taking
 * ops in turn could each have compiled it, a second's work). */
typedef struct kpending {
  uint64_t key;
  const char *source;
  struct kpending *next;
} kpending_t;

struct kcache {
  const rill_allocator_t *a;
  const rill_cuda_api_t *api;
  int sm;
  pthread_mutex_t mu;
  pthread_cond_t done;    /* a pending compile ended */
  kpending_t *pending;
  RILL_VEC(kentry_t) entries;
  char dir[4096];         /* "" when there is no usable disk cache */
  kcache_stats_t stats;
  pcache_t *plans;        /* library choices (memory only without a disk cache) */
};

static const char MAGIC[8] = "RILLKC01";

rill_status_t kcache_create(const rill_allocator_t *a, const rill_cuda_api_t *api, int sm, kcache_t **out) {
  kcache_t *c = rill__calloc(a, 1, sizeof *c);
  if (!c) return rill__oom();
  c->a = a;
  c->api = api;
  c->sm = sm;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->done, NULL);
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0] == '/') snprintf(c->dir, sizeof c->dir, "%s/rill", xdg);
  else if (home && home[0] == '/') snprintf(c->dir, sizeof c->dir, "%s/.cache/rill", home);
  if (c->dir[0]) {
    char parent[4096];
    rill__dirname(c->dir, parent, sizeof parent);
    mkdir(parent, 0755);
    if (mkdir(c->dir, 0755) != 0 && errno != EEXIST) c->dir[0] = 0;
  }
  /* One plan file per architecture and set of library versions (keys name the device and op in full). */
  char label[256], path[4200];
  snprintf(label, sizeof label, "rill plans sm_%d cudnn %zu cublasLt %zu nvrtc %d.%d", sm, api->cudnn_version, api->cublaslt_version,
           api->nvrtc_major, api->nvrtc_minor);
  snprintf(path, sizeof path, "%s/plans-%016llx.rpc", c->dir, (unsigned long long)rill__fnv1a(label, strlen(label), RILL_FNV_INIT));
  rill_status_t st = pcache_open(a, c->dir[0] ? path : NULL, label, &c->plans);
  if (st) {
    kcache_destroy(c);
    return st;
  }
  *out = c;
  return NULL;
}

void kcache_destroy(kcache_t *c) {
  if (!c) return;
  if (c->plans) {
    kcache_flush(c);
    pcache_close(c->plans);
  }
  for (size_t i = 0; i < c->entries.len; i++) {
    if (c->entries.items[i].module) c->api->cuModuleUnload(c->entries.items[i].module);
    rill__free(c->a, c->entries.items[i].source);
    rill__free(c->a, c->entries.items[i].refused);
  }
  RILL_VEC_FREE(c->a, &c->entries);
  pthread_cond_destroy(&c->done);
  pthread_mutex_destroy(&c->mu);
  rill__free(c->a, c);
}

kcache_stats_t kcache_stats(const kcache_t *c) {
  pthread_mutex_lock((pthread_mutex_t *)&c->mu);
  kcache_stats_t s = c->stats;
  pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
  return s;
}

#define OPTS_FMT "--gpu-architecture=sm_%d"

static uint64_t key_of(const kcache_t *c, const char *source) {
  char opts[64];
  snprintf(opts, sizeof opts, OPTS_FMT, c->sm);
  uint64_t h = rill__fnv1a(source, strlen(source), RILL_FNV_INIT);
  h = rill__fnv1a(opts, strlen(opts), h);
  int v[3] = {c->api->nvrtc_major, c->api->nvrtc_minor, c->sm};
  return rill__fnv1a(v, sizeof v, h);
}

/* Reads a cached CUBIN; NULL when absent or damaged. */
static uint8_t *disk_read(kcache_t *c, uint64_t key, size_t *size) {
  if (!c->dir[0]) return NULL;
  char path[4200];
  snprintf(path, sizeof path, "%s/%016llx.cubin", c->dir, (unsigned long long)key);
  uint8_t *b;
  size_t n;
  rill_status_t st = rill__read_file(c->a, path, &b, &n);
  if (st) {
    rill_status_free(st);
    return NULL;
  }
  uint64_t k, len, sum;
  if (n < 32 || memcmp(b, MAGIC, 8) != 0) goto bad;
  memcpy(&k, b + 8, 8);
  memcpy(&len, b + 16, 8);
  memcpy(&sum, b + 24, 8);
  if (k != key || len != n - 32 || rill__fnv1a(b + 32, len, RILL_FNV_INIT) != sum) goto bad;
  memmove(b, b + 32, len);
  *size = len;
  return b;
bad:
  rill__free(c->a, b);
  return NULL;
}

static void disk_write(kcache_t *c, uint64_t key, const void *cubin, size_t n) {
  if (!c->dir[0]) return;
  uint8_t *b = rill__alloc(c->a, n + 32);
  if (!b) return;
  uint64_t len = n, sum = rill__fnv1a(cubin, n, RILL_FNV_INIT);
  memcpy(b, MAGIC, 8);
  memcpy(b + 8, &key, 8);
  memcpy(b + 16, &len, 8);
  memcpy(b + 24, &sum, 8);
  memcpy(b + 32, cubin, n);
  char path[4200];
  snprintf(path, sizeof path, "%s/%016llx.cubin", c->dir, (unsigned long long)key);
  rill_status_free(rill__write_file_atomic(path, b, n + 32)); /* a cache that cannot be written is only slower */
  rill__free(c->a, b);
}

/* *refused: NVRTC compiled the source and refused it (the status holds its log), not some other failure. */
static rill_status_t compile(kcache_t *c, const char *source, uint8_t **out, size_t *size, bool *refused) {
  const rill_cuda_api_t *api = c->api;
  nvrtcProgram prog;
  RILL_TRY(NVRTC(api, nvrtcCreateProgram, &prog, source, "rill_kernel.cu", 0, NULL, NULL));
  char arch[64];
  snprintf(arch, sizeof arch, OPTS_FMT, c->sm);
  const char *opts[] = {arch, "--std=c++17", "-default-device", "--use_fast_math=false"};
  nvrtcResult r = api->nvrtcCompileProgram(prog, 3, opts);
  rill_status_t st = NULL;
  if (r != NVRTC_SUCCESS) {
    size_t ln = 0;
    api->nvrtcGetProgramLogSize(prog, &ln);
    char *log = rill__alloc(c->a, ln + 1);
    if (log) {
      log[0] = 0;
      api->nvrtcGetProgramLog(prog, log);
      st = rill__status(RILL_RUNTIME_ERROR, "NVRTC could not compile a generated kernel: %s; compiler log:\n%s", api->nvrtcGetErrorString(r), log);
      *refused = r == NVRTC_ERROR_COMPILATION && rill_status_code(st) == RILL_RUNTIME_ERROR;
      rill__free(c->a, log);
    } else {
      st = rill__oom();
    }
  }
  if (!st) st = NVRTC(api, nvrtcGetCUBINSize, prog, size);
  if (!st && !(*out = rill__alloc(c->a, *size))) st = rill__oom();
  if (!st && (st = NVRTC(api, nvrtcGetCUBIN, prog, (char *)*out))) rill__free(c->a, *out);
  api->nvrtcDestroyProgram(&prog);
  return st;
}

static const kentry_t *find(const kcache_t *c, uint64_t key, const char *source) {
  for (size_t i = 0; i < c->entries.len; i++)
    if (c->entries.items[i].key == key && strcmp(c->entries.items[i].source, source) == 0) return &c->entries.items[i];
  return NULL;
}

/* Thread-safe; compiles outside the lock, so several threads compile different
 * sources at once, and a source two threads ask for compiles once. */
rill_status_t kcache_get(kcache_t *c, const char *source, const char *name, CUfunction *out) {
  uint64_t key = key_of(c, source);
  pthread_mutex_lock(&c->mu);
  const kentry_t *have;
  for (;;) {
    if ((have = find(c, key, source))) break;
    const kpending_t *p = c->pending;
    while (p && !(p->key == key && strcmp(p->source, source) == 0)) p = p->next;
    if (!p) break;
    pthread_cond_wait(&c->done, &c->mu); /* then found, or that thread failed and this one tries */
  }
  if (have) {
    CUmodule mod = have->module;
    rill_status_t st = mod ? NULL : rill__status(RILL_RUNTIME_ERROR, "%s", have->refused);
    if (mod) c->stats.memory_hits++;
    pthread_mutex_unlock(&c->mu);
    return st ? st : CU(c->api, cuModuleGetFunction, out, mod, name);
  }
  kpending_t me = {key, source, c->pending};
  c->pending = &me;
  pthread_mutex_unlock(&c->mu);
  size_t n = 0;
  rill_status_t st = NULL;
  bool from_disk = false, refused = false;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint8_t *cubin = disk_read(c, key, &n);
  if (cubin) from_disk = true;
  else if (!(st = compile(c, source, &cubin, &n, &refused))) disk_write(c, key, cubin, n);
  kentry_t e = {key, NULL, NULL, NULL};
  if (!st) st = CU(c->api, cuModuleLoadData, &e.module, cubin);
  rill__free(c->a, cubin);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* kept: the module, or NVRTC's refusal (another failure is not: the next thread tries again) */
  bool keep = !st || refused;
  if (keep && !(e.source = rill__strndup(c->a, source, strlen(source)))) keep = false;
  if (keep && st && !(e.refused = rill__strndup(c->a, rill_status_message(st), strlen(rill_status_message(st))))) keep = false;
  pthread_mutex_lock(&c->mu);
  c->stats.load_ns += (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
  kpending_t **pp = &c->pending;
  while (*pp != &me) pp = &(*pp)->next;
  *pp = me.next;
  rill_status_t kept = keep ? RILL_VEC_PUSH(c->a, &c->entries, e) : NULL;
  bool owned = keep && !kept; /* the entry holds e's module and copies */
  if (owned && !st) c->stats.disk_hits += from_disk, c->stats.compiled += !from_disk;
  pthread_cond_broadcast(&c->done);
  pthread_mutex_unlock(&c->mu);
  if (!owned) {
    if (e.module) c->api->cuModuleUnload(e.module);
    rill__free(c->a, e.source);
    rill__free(c->a, e.refused);
    if (!st) st = kept ? kept : rill__oom();
  }
  return st ? st : CU(c->api, cuModuleGetFunction, out, e.module, name);
}

bool kcache_blob_get(kcache_t *c, const char *key, uint8_t **val, size_t *n) { return pcache_get(c->plans, key, val, n); }

void kcache_blob_put(kcache_t *c, const char *key, const void *val, size_t n) {
  rill_status_free(pcache_put(c->plans, key, val, n)); /* only slower without it */
}

bool kcache_choice_get(kcache_t *c, const char *key, void *val, size_t n) {
  uint8_t *b;
  size_t size;
  if (!pcache_get(c->plans, key, &b, &size)) return false;
  bool ok = size == n;
  if (ok) {
    memcpy(val, b, n);
    pthread_mutex_lock(&c->mu);
    c->stats.choices_from_disk++;
    pthread_mutex_unlock(&c->mu);
  }
  rill__free(c->a, b);
  return ok;
}

void kcache_choice_put(kcache_t *c, const char *key, const void *val, size_t n) {
  pthread_mutex_lock(&c->mu);
  c->stats.choices_timed++;
  pthread_mutex_unlock(&c->mu);
  kcache_blob_put(c, key, val, n);
}

void kcache_flush(kcache_t *c) { rill_status_free(pcache_flush(c->plans)); }

const char *kcache_warning(const kcache_t *c) { return pcache_warning(c->plans); }

void kcache_count_plan(kcache_t *c, bool from_disk) {
  pthread_mutex_lock(&c->mu);
  if (from_disk) c->stats.plans_from_disk++;
  else c->stats.plans_built++;
  pthread_mutex_unlock(&c->mu);
}

void kcache_add_ns(kcache_t *c, int lib, long long ns) {
  pthread_mutex_lock(&c->mu);
  if (lib == KCACHE_DNN) c->stats.dnn_ns += ns;
  else c->stats.lt_ns += ns;
  pthread_mutex_unlock(&c->mu);
}
