/* device_cuda.c: the `cuda` device.
 *
 * The driver API through kernels/cuda_api.h (loaded with dlopen), the
 * device's primary context, non-blocking streams and events from per-device
 * pools created on first use, stream-ordered memory from the device's
 * memory pool (freed on the stream that last used it, where the VM's later
 * work is ordered after every use; small blocks are kept for the next
 * allocation of their size on that stream, which the stream's order makes as
 * safe as the pool's own reuse), host<->device copies through pinned staging buffers,
 * and host callbacks through per-stream waiter threads. Kernels report
 * run-time errors (an index out of range) through a word of mapped pinned
 * memory that host callbacks read.
 *
 * A host callback is an event recorded on the stream and queued to the
 * stream's waiter thread, which polls the event for a short while, then
 * blocks on it, and calls the callback with the stream's error, if any.
 * cuLaunchHostFunc would be simpler, but measured on an H200 a host
 * function queued behind stream-ordered frees took 75 us to 1.1 ms (median
 * 234 us) to run where an event wait took 66-94 us, and it never runs after
 * a sticky error, which a waiter reports like any other.
 *
 * Graphs are CUDA stream captures (relaxed mode, so that allocation stays
 * legal while a run is captured): a stream that waits for a captured event
 * joins the capture. Memory allocated while a stream captures comes from the
 * pool on a private side stream, which the end of the capture waits for, so
 * it is never a node of the graph; an op's workspace on a capturing stream is
 * the graph's own (the stream's would be shared with later runs), kept with
 * the graph and then with its executable.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../ops/cuda_ops.h"
#include "device.h"

#define NSTREAMS 256
#define PREP_THREADS 8 /* threads preparing plans at most (cuDNN builds plans under a lock of its own: 16 threads took twice as long a plan as 8, no sooner done) */

/* How long a waiter polls an event before it blocks on it, and polls its
 * empty queue before it sleeps: waking a sleeping waiter costs the thread
 * that queues a callback a system call and, on a virtual machine, an
 * interrupt to another processor, at the end of every run. Between the
 * spin and the block, the waiter polls every WAIT_NAP_US in short sleeps
 * (its timer slack 1 us) for up to WAIT_POLL_US: on an H200, a blocking
 * event's wake-up put 155 us on a served request's run (run FC), where a
 * poll is late by a nap at most, and the sleeps cost a few percent of one
 * processor while a run lasts. */
#define WAIT_SPIN_US 300.0
#define WAIT_NAP_US 10
#define WAIT_POLL_US 20000.0
#define QUEUE_SPIN_US 200.0

/* Freed blocks kept per stream: a pool allocation measured 1.9 us of host
 * time on an H100 (two of them were half of a small run's fixed cost), and a
 * VM allocates the same sizes run after run. At most CACHE_BLOCKS blocks of
 * at most CACHE_BLOCK_MAX bytes, CACHE_STREAM_MAX bytes in all, per stream;
 * all are given back to the pool when an allocation runs out of memory. */
#define CACHE_BLOCKS 32
#define CACHE_BLOCK_MAX ((size_t)16 << 20)
#define CACHE_STREAM_MAX ((size_t)128 << 20)
typedef struct cblock {
  CUdeviceptr p;
  size_t size;
} cblock_t;

typedef struct waiting {
  struct waiting *next;
  CUevent e;                 /* NULL: wait for the stream itself (host_callback_last) */
  rill_status_t (*issue)(void *arg); /* host_callback_last's: run first, on the waiter */
  vm_host_fn fn;
  void *arg;
} waiting_t;

typedef struct cstream {
  CUstream s;
  bool in_use;
  /* Host callbacks, in stream order; the head stays queued while it runs. */
  waiting_t *head, *tail;
  atomic_bool queued;        /* set with each callback queued; polled by the waiter before it sleeps */
  pthread_t waiter;
  bool has_waiter;
  struct cuda_device *dev;   /* for the waiter */
  pthread_cond_t more, idle;
  cudnnHandle_t dnn;         /* created when an op on this stream first needs it */
  CUdeviceptr ws;            /* workspace, grown (stream-ordered) when an op needs more */
  size_t ws_size;
  ops_vp_cache_t *vps;       /* with dnn */
  bool cap;                  /* capturing (the origin or a stream that joined) */
  CUdeviceptr cap_ws;        /* while capturing: the graph's workspace for this stream */
  size_t cap_ws_size;
  cblock_t cache[CACHE_BLOCKS]; /* freed blocks (cache_mu) */
  int ncache;
  size_t cache_bytes;
} cstream_t;

typedef struct staging {
  struct staging *next;      /* in the free list */
  struct staging *all_next;  /* in the list of every buffer */
  void *host;
  size_t size;
} staging_t;

typedef struct cuda_device {
  vm_device_t base;
  const rill_allocator_t *a;
  const rill_cuda_api_t *api;
  CUdevice dev;
  CUcontext ctx;
  CUmemoryPool pool;
  uint64_t peer_reads; /* bit k: this device reads device k's pool (vm_cuda_enable_peer) */
  int ordinal, sm, num_sms;
  bool poison;                 /* RILL_POISON: new memory is filled with 0xff (NaN for floats) */
  pthread_mutex_t mu;          /* streams, staging lists, waiter queues */
  bool stopping;               /* waiters exit once their queues are empty */
  CUevent *free_events;        /* blocking-sync events for host callbacks, reused */
  int nfree_events, cap_events;
  waiting_t *free_waiting;     /* queue entries of host callbacks that ran, reused */
  CUevent trace_base;          /* tracing: marks are timed from this event... */
  double trace_base_us;        /* ...which completed at about this host time */
  cstream_t streams[NSTREAMS];
  staging_t *free_staging;     /* returned by host callbacks, reused */
  staging_t *all_staging;      /* every staging buffer, for destroy */
  volatile int *err_host;      /* mapped pinned word kernels write */
  CUdeviceptr err_dev;
  kcache_t *cache;
  atomic_size_t graph_bytes;  /* memory that graphs own (graph_mem), for rill_vm_memory_info */
  atomic_llong prep_ns;       /* ops' preparation, summed over the preparing threads */
  ops_cuda_env_t env;
  pthread_mutex_t lib_mu;
  pthread_mutex_t cache_mu;    /* the streams' freed blocks */
  CUstream side;               /* allocations while capturing */
  struct vm_graph *capture;    /* the capture in progress (mu) */
  CUfunction set_cond;         /* conditional nodes' condition setter, compiled on first use */
  pthread_t lt_warm;           /* cuBLASLt's first query (lt_warm), joined at destroy */
  bool lt_warming;
} cuda_device_t;

/* A conditional node while its bodies are captured. */
struct vm_cond {
  CUgraphConditionalHandle h;
  CUgraph body[2];
  CUdeviceptr count;           /* a loop's runs so far (the graph's memory) */
  uint64_t max;
};

/* Sets a conditional node's condition from a byte in memory; a loop's runs
 * are counted (from 0 when `reset`), and past `max` the condition is false
 * and the device's error word says why. cudaGraphSetConditional is resolved
 * by the driver when the module loads, as printf's vprintf is. */
static const char SET_COND_SRC[] =
    "extern \"C\" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);\n"
    "extern \"C\" __global__ void rill_set_cond(unsigned long long h, const unsigned char *flag, unsigned long long *count,\n"
    "                                          unsigned long long max, int reset, int *err) {\n"
    "  unsigned v = *flag != 0;\n"
    "  if (count && reset) *count = 0;\n"
    "  else if (count && v && ++*count > max) { v = 0; atomicExch(err, 2); }\n"
    "  cudaGraphSetConditional(h, v);\n"
    "}\n";

/* A captured input copy: its node and parameters (set again with a new
 * source). A node reads device memory only: the driver ties a copy from
 * host memory to that allocation, which the caller may free and allocate
 * again at the same address between launches. A source in host memory
 * (rill_vm_host_alloc's, mapped) is copied on the launch stream before
 * each launch instead, its node disabled; one at capture is captured as a
 * copy of the destination onto itself, for a later device source. */
typedef struct ginput {
  CUgraphNode node;
  CUDA_MEMCPY3D p;
  const void *manual; /* a source in host memory, copied at each launch */
} ginput_t;
/* A captured graph, or an executable, with the device memory it owns. */
struct vm_graph {
  CUgraph g;
  CUdeviceptr *mem;
  size_t mem_bytes;          /* of mem, counted in the device's graph_bytes */
  int nmem, capmem;
  ginput_t *in;
  int nin;
};
/* An executable keeps the graph it was made from: input copies are updated
 * through that graph's nodes. */
struct vm_gexec {
  CUgraphExec x;
  CUgraph g;
  CUdeviceptr *mem;
  size_t mem_bytes;
  int nmem;
  ginput_t *in;
  int nin;
};

static rill_status_t cur(cuda_device_t *d) { return CU(d->api, cuCtxSetCurrent, d->ctx); }

/* Checked but never fault-injected, returning whether it succeeded: for
 * cleanups, which must not be skipped. */
static bool quiet(rill_status_t st) {
  bool ok = st == NULL;
  rill_status_free(st);
  return ok;
}

static bool set_ctx(cuda_device_t *d) { return d->ctx && quiet(CU_NOINJECT(d->api, cuCtxSetCurrent, d->ctx)); }

static rill_status_t kernel_error(cuda_device_t *d) {
  int e = d->err_host ? *d->err_host : 0;
  if (e == RILL_KERR_INDEX) return rill__status(RILL_RUNTIME_ERROR, "an index was out of range on the device (gather)");
  if (e == RILL_KERR_LOOP) return rill__status(RILL_RUNTIME_ERROR, "loop iteration limit exceeded in a graph");
  if (e == RILL_KERR_LENGTH) return rill__status(RILL_RUNTIME_ERROR, "attention: a length was outside 0..the cache's size on the device");
  if (e == RILL_KERR_UPDATE) return rill__status(RILL_RUNTIME_ERROR, "update: an offset was outside the state on the device (rows in range were written)");
  if (e) return rill__status(RILL_RUNTIME_ERROR, "a kernel reported error %d", e);
  return NULL;
}

static rill_status_t ensure_stream(cuda_device_t *d, int i) {
  if (d->streams[i].s) return NULL;
  return CU(d->api, cuStreamCreate, &d->streams[i].s, CU_STREAM_NON_BLOCKING);
}

static rill_status_t c_stream_acquire(vm_device_t *dv, int *out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < NSTREAMS; i++) {
    if (d->streams[i].in_use) continue;
    rill_status_t st = ensure_stream(d, i);
    if (!st) d->streams[i].in_use = true;
    pthread_mutex_unlock(&d->mu);
    *out = i;
    return st;
  }
  pthread_mutex_unlock(&d->mu);
  return rill__status(RILL_UNAVAILABLE, "cuda device: all %d streams are in use", NSTREAMS);
}

static void c_stream_release(vm_device_t *dv, int stream) {
  cuda_device_t *d = (cuda_device_t *)dv;
  pthread_mutex_lock(&d->mu);
  d->streams[stream].in_use = false;
  pthread_mutex_unlock(&d->mu);
}

/* A kept block of exactly this size on this stream, or 0. */
static CUdeviceptr cache_take(cuda_device_t *d, int stream, size_t size) {
  cstream_t *s = &d->streams[stream];
  CUdeviceptr p = 0;
  pthread_mutex_lock(&d->cache_mu);
  for (int i = s->ncache - 1; i >= 0; i--)
    if (s->cache[i].size == size) {
      p = s->cache[i].p;
      s->cache[i] = s->cache[--s->ncache];
      s->cache_bytes -= size;
      break;
    }
  pthread_mutex_unlock(&d->cache_mu);
  return p;
}

/* Every kept block back to the pool, each on its stream. */
static void cache_flush(cuda_device_t *d) {
  pthread_mutex_lock(&d->cache_mu);
  for (int i = 0; i < NSTREAMS; i++) {
    cstream_t *s = &d->streams[i];
    while (s->ncache) quiet(CU_NOINJECT(d->api, cuMemFreeAsync, s->cache[--s->ncache].p, s->s));
    s->cache_bytes = 0;
  }
  pthread_mutex_unlock(&d->cache_mu);
}

static rill_status_t c_alloc(vm_device_t *dv, int stream, size_t size, void **out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  if (!size) size = 1;
  /* A capturing stream's allocation must not become a node of its graph. */
  CUstream on = d->streams[stream].cap ? d->side : d->streams[stream].s;
  CUdeviceptr p = d->streams[stream].cap ? 0 : cache_take(d, stream, size);
  rill_status_t st = NULL;
  if (!p) {
    st = CU(d->api, cuMemAllocFromPoolAsync, &p, size, d->pool, on);
    if (st && rill_status_code(st) == RILL_OUT_OF_MEMORY) {
      rill_status_free(st);
      cache_flush(d);
      st = CU(d->api, cuMemAllocFromPoolAsync, &p, size, d->pool, on);
    }
    if (st) return rill__status_prefix(st, "allocating %zu bytes of device memory: ", size);
  }
  /* Tests poison new memory, so an output a kernel fails to write cannot pass. */
  if (d->poison && (st = CU(d->api, cuMemsetD8Async, p, 0xff, size, on))) {
    quiet(CU_NOINJECT(d->api, cuMemFreeAsync, p, on));
    return st;
  }
  *out = (void *)p;
  return NULL;
}

/* Frees and destroys are raw calls: a cleanup has nothing to report and must
 * not be skipped by an injected fault. */
static void c_free(vm_device_t *dv, int stream, void *p, size_t size) {
  cuda_device_t *d = (cuda_device_t *)dv;
  cstream_t *s = &d->streams[stream];
  if (!size) size = 1;
  pthread_mutex_lock(&d->cache_mu);
  bool kept = size <= CACHE_BLOCK_MAX && s->ncache < CACHE_BLOCKS && s->cache_bytes + size <= CACHE_STREAM_MAX;
  if (kept) {
    s->cache[s->ncache++] = (cblock_t){(CUdeviceptr)p, size};
    s->cache_bytes += size;
  }
  pthread_mutex_unlock(&d->cache_mu);
  if (!kept && set_ctx(d)) quiet(CU_NOINJECT(d->api, cuMemFreeAsync, (CUdeviceptr)p, s->s));
}

/* ---- host callbacks ---- */
/* The pool of blocking-sync events (d->mu held): one to reuse, or NULL. */
static CUevent event_take(cuda_device_t *d) { return d->nfree_events ? d->free_events[--d->nfree_events] : NULL; }

/* Back to the pool where the wait on it succeeded and there is room; else destroyed (d->mu held). */
static void event_give(cuda_device_t *d, CUevent e, bool ok) {
  if (ok && d->nfree_events < d->cap_events) d->free_events[d->nfree_events++] = e;
  else d->api->cuEventDestroy(e);
}

/* Raw calls from here on the waiter threads: an injected fault there would
 * land on whichever call happened to be counted, not on the one a test aims at.
 * poll_ready polls event e (or, where e is NULL, stream cs) until it is ready or
 * WAIT_POLL_US pass: a spin, then naps. */
static CUresult poll_ready(cuda_device_t *d, CUevent e, CUstream cs) {
  double t0 = rill__now_us(), t;
  CUresult r;
  while ((r = e ? d->api->cuEventQuery(e) : d->api->cuStreamQuery(cs)) == CUDA_ERROR_NOT_READY && (t = rill__now_us() - t0) < WAIT_POLL_US) {
    if (t < WAIT_SPIN_US) sched_yield();
    else nanosleep(&(struct timespec){0, WAIT_NAP_US * 1000}, NULL);
  }
  return r;
}

static CUresult wait_event(cuda_device_t *d, CUevent e) {
  CUresult r = poll_ready(d, e, NULL);
  return r == CUDA_ERROR_NOT_READY ? d->api->cuEventSynchronize(e) : r;
}

/* A run's end (host_callback_last): nothing more of the run is queued on the
 * stream, so its own completion is the run's. Polled like an event; past the
 * polls, an event recorded now (from this thread) is blocked on instead. */
static CUresult wait_stream(cuda_device_t *d, cstream_t *s) {
  CUresult r = poll_ready(d, NULL, s->s);
  if (r != CUDA_ERROR_NOT_READY) return r;
  pthread_mutex_lock(&d->mu);
  CUevent e = event_take(d);
  pthread_mutex_unlock(&d->mu);
  if (!e && (r = d->api->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC)) != CUDA_SUCCESS) return r;
  r = d->api->cuEventRecord(e, s->s);
  if (r == CUDA_SUCCESS) r = d->api->cuEventSynchronize(e);
  pthread_mutex_lock(&d->mu);
  event_give(d, e, r == CUDA_SUCCESS);
  pthread_mutex_unlock(&d->mu);
  return r;
}

static void *waiter_main(void *arg) {
  cstream_t *s = arg;
  cuda_device_t *d = s->dev;
  bool ctx_ok = d->api->cuCtxSetCurrent(d->ctx) == CUDA_SUCCESS;
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* naps of WAIT_NAP_US, not the default slack's 50 us more */
  pthread_mutex_lock(&d->mu);
  for (;;) {
    if (!s->head && !d->stopping) {
      atomic_store_explicit(&s->queued, false, memory_order_relaxed);
      pthread_mutex_unlock(&d->mu);
      double t0 = rill__now_us();
      while (!atomic_load_explicit(&s->queued, memory_order_relaxed) && rill__now_us() - t0 < QUEUE_SPIN_US) sched_yield();
      pthread_mutex_lock(&d->mu);
    }
    while (!s->head && !d->stopping) pthread_cond_wait(&s->more, &d->mu);
    if (!s->head) break;
    waiting_t *h = s->head;
    pthread_mutex_unlock(&d->mu);
    rill_status_t err = ctx_ok && h->issue ? h->issue(h->arg) : NULL;
    CUresult r = err ? CUDA_SUCCESS : !ctx_ok ? CUDA_ERROR_INVALID_CONTEXT : h->e ? wait_event(d, h->e) : wait_stream(d, s);
    if (!err) err = r == CUDA_SUCCESS ? kernel_error(d) : rill__cu_check(r, "cuEventSynchronize", __FILE__, __LINE__);
    h->fn(h->arg, err);
    rill_status_free(err);
    pthread_mutex_lock(&d->mu);
    if (h->e) event_give(d, h->e, r == CUDA_SUCCESS);
    s->head = h->next;
    if (!s->head) {
      s->tail = NULL;
      pthread_cond_broadcast(&s->idle);
    }
    h->next = d->free_waiting;
    d->free_waiting = h;
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* Starts the stream's waiter thread if it has none (d->mu held). */
static rill_status_t waiter_start(cuda_device_t *d, int stream) {
  cstream_t *s = &d->streams[stream];
  if (s->has_waiter) return NULL;
  pthread_cond_init(&s->more, NULL);
  pthread_cond_init(&s->idle, NULL);
  s->dev = d;
  if (pthread_create(&s->waiter, NULL, waiter_main, s) == 0) {
    s->has_waiter = true;
    return NULL;
  }
  pthread_cond_destroy(&s->more);
  pthread_cond_destroy(&s->idle);
  return rill__status(RILL_UNAVAILABLE, "cuda device: cannot start a thread to wait for stream %d", stream);
}

/* Queues fn(arg, error) to run on the stream's waiter once the stream's work
 * so far is done (recorded in an event now), or, `last`, once the stream is
 * done when the waiter gets to it (no event: nothing more of the caller's is
 * queued there; one lock, as this is every run's end). Called with the
 * context current. */
static rill_status_t queue_callback(cuda_device_t *d, int stream, bool last, rill_status_t (*issue)(void *), vm_host_fn fn,
                                    void *arg) {
  cstream_t *s = &d->streams[stream];
  CUevent e = NULL;
  pthread_mutex_lock(&d->mu);
  rill_status_t st = waiter_start(d, stream);
  if (!st && !last) {
    e = event_take(d);
    pthread_mutex_unlock(&d->mu);
    if (!e) st = CU(d->api, cuEventCreate, &e, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC);
    if (!st) st = CU(d->api, cuEventRecord, e, s->s);
    pthread_mutex_lock(&d->mu);
  }
  waiting_t *h = NULL;
  if (!st && (h = d->free_waiting)) d->free_waiting = h->next;
  else if (!st && !(h = malloc(sizeof *h))) st = rill__oom();
  if (st) {
    if (e) event_give(d, e, false);
    pthread_mutex_unlock(&d->mu);
    return st;
  }
  *h = (waiting_t){NULL, e, issue, fn, arg};
  if (s->tail) s->tail->next = h;
  else s->head = h;
  s->tail = h;
  atomic_store_explicit(&s->queued, true, memory_order_relaxed);
  pthread_cond_signal(&s->more);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* Waits until every callback queued on the stream has run. */
static void wait_callbacks(cuda_device_t *d, cstream_t *s) {
  pthread_mutex_lock(&d->mu);
  while (s->head) pthread_cond_wait(&s->idle, &d->mu);
  pthread_mutex_unlock(&d->mu);
}

/* ---- pinned staging ---- */
static void staging_put(cuda_device_t *d, staging_t *s) {
  pthread_mutex_lock(&d->mu);
  s->next = d->free_staging;
  d->free_staging = s;
  pthread_mutex_unlock(&d->mu);
}

static rill_status_t staging_get(cuda_device_t *d, size_t n, staging_t **out) {
  pthread_mutex_lock(&d->mu);
  staging_t **best = NULL;
  for (staging_t **p = &d->free_staging; *p; p = &(*p)->next)
    if ((*p)->size >= n && (!best || (*p)->size < (*best)->size)) best = p;
  if (best) {
    *out = *best;
    *best = (*best)->next;
    pthread_mutex_unlock(&d->mu);
    return NULL;
  }
  pthread_mutex_unlock(&d->mu);
  staging_t *s = rill__calloc(d->a, 1, sizeof *s);
  if (!s) return rill__oom();
  /* sizes to the power of 2 up to 8 MiB, so that a buffer serves the next copies of other sizes */
  s->size = 4096;
  while (s->size < n && s->size < ((size_t)8 << 20)) s->size *= 2;
  if (s->size < n) s->size = n;
  rill_status_t st = CU(d->api, cuMemHostAlloc, &s->host, s->size, 0);
  if (st) {
    rill__free(d->a, s);
    return st;
  }
  pthread_mutex_lock(&d->mu);
  s->all_next = d->all_staging;
  d->all_staging = s;
  pthread_mutex_unlock(&d->mu);
  *out = s;
  return NULL;
}

typedef struct copy_back {
  cuda_device_t *d;
  staging_t *s;
  void *dst;
  size_t n;
} copy_back_t;

/* Host callback: no CUDA calls here, only host memory and a lock. After an
 * error the copy may not have happened: dst is left alone. */
static void staging_done(void *arg, rill_status_t err) {
  copy_back_t *c = arg;
  if (c->dst && !err) memcpy(c->dst, c->s->host, c->n);
  staging_put(c->d, c->s);
  free(c);
}

/* Queues a copy through a staging buffer; the buffer returns to the pool from
 * a host callback once the copy is done (and, for d2h, its bytes are in dst). */
static rill_status_t staged_copy(cuda_device_t *d, int stream, void *dst, const void *src, size_t n, bool to_device) {
  if (!n) return NULL;
  RILL_TRY(cur(d));
  staging_t *s = NULL;
  RILL_TRY(staging_get(d, n, &s));
  copy_back_t *c = malloc(sizeof *c);
  if (!c) {
    staging_put(d, s);
    return rill__oom();
  }
  *c = (copy_back_t){d, s, to_device ? NULL : dst, n};
  CUstream cs = d->streams[stream].s;
  rill_status_t st;
  if (to_device) {
    memcpy(s->host, src, n);
    st = CU(d->api, cuMemcpyHtoDAsync, (CUdeviceptr)dst, s->host, n, cs);
  } else {
    st = CU(d->api, cuMemcpyDtoHAsync, s->host, (CUdeviceptr)src, n, cs);
  }
  if (!st) st = queue_callback(d, stream, false, NULL, staging_done, c);
  if (st) {
    d->api->cuStreamSynchronize(cs); /* the copy may be queued: let it finish before the buffer is reused */
    c->dst = NULL;
    staging_done(c, NULL);
  }
  return st;
}

static rill_status_t c_copy_h2d(vm_device_t *dv, int stream, void *dst, const void *src, size_t n) {
  return staged_copy((cuda_device_t *)dv, stream, dst, src, n, true);
}

static rill_status_t c_copy_d2h(vm_device_t *dv, int stream, void *dst, const void *src, size_t n) {
  return staged_copy((cuda_device_t *)dv, stream, dst, src, n, false);
}

/* ---- launches ---- */
typedef struct prep_work {
  cuda_device_t *d;
  ops_plan_t *plans;
  const uint32_t *todo; /* the plans to prepare, by index */
  uint32_t ntodo;
  atomic_uint next;     /* the next of todo to take */
  atomic_bool failed;   /* a thread failed: the others stop */
} prep_work_t;

typedef struct prep_job {
  prep_work_t *w;
  rill_status_t st;
} prep_job_t;

/* Takes plans in turn until none is left: their costs differ by 100x (a
 * cuDNN plan against an elementwise kernel from the cache), so a fixed
 * share a thread would leave threads idle. */
static void *prep_thread(void *arg) {
  prep_job_t *j = arg;
  prep_work_t *w = j->w;
  cuda_device_t *d = w->d;
  j->st = cur(d);
  double t0 = rill__now_us();
  for (uint32_t k; !j->st && !atomic_load(&w->failed) && (k = atomic_fetch_add(&w->next, 1)) < w->ntodo;) {
    ops_plan_t *p = &w->plans[w->todo[k]];
    j->st = ops_cuda_prepare(&d->env, p, &p->dev);
  }
  if (j->st) atomic_store(&w->failed, true);
  atomic_fetch_add(&d->prep_ns, (long long)((rill__now_us() - t0) * 1e3));
  return NULL;
}

/* The candidates of a prepared plan (rill_vm_op_candidates). */
static rill_status_t c_candidates(vm_device_t *dv, const ops_plan_t *plan, rill_buf_t *out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (!plan->dev) return rill__buf_append(out, "default\n", 8);
  RILL_TRY(cur(d));
  return ops_cuda_candidates(&d->env, plan, plan->dev, out);
}

/* Each plan is prepared once (its state kept in the plan, so that the sets
 * of plans of a module's instances, one per binding of its shape variables,
 * never share a state); kernels compile in parallel. */
static rill_status_t c_prepare(vm_device_t *dv, ops_plan_t *plans, uint32_t n) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  uint32_t *todo = rill__calloc(d->a, n ? n : 1, sizeof(uint32_t));
  if (!todo) return rill__oom();
  uint32_t count = 0;
  /* (Collectives run through a communicator, vm/coll.c: nothing to prepare.) */
  for (uint32_t i = 0; i < n; i++)
    if (plans[i].def && !plans[i].dev && ops_collective(plans[i].def) == OPS_COLL_NONE) todo[count++] = i;
  /* A thread a core, up to PREP_THREADS: a warm start's cuDNN plans (15 to
   * 30 ms each, restored from the plan cache) are most of its first run. */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  uint32_t nt = ncpu < 1 ? 1 : ncpu > PREP_THREADS ? PREP_THREADS : (uint32_t)ncpu;
  if (nt > count) nt = count;
  prep_work_t w = {.d = d, .plans = plans, .todo = todo, .ntodo = count};
  atomic_init(&w.next, 0);
  atomic_init(&w.failed, false);
  prep_job_t jobs[PREP_THREADS];
  pthread_t th[PREP_THREADS];
  bool started[PREP_THREADS] = {false};
  for (uint32_t t = 0; t < nt; t++) {
    jobs[t] = (prep_job_t){&w, NULL};
    /* A thread that cannot start leaves its plans to the others. */
    started[t] = t > 0 && pthread_create(&th[t], NULL, prep_thread, &jobs[t]) == 0;
  }
  if (nt) prep_thread(&jobs[0]);
  rill_status_t st = NULL;
  for (uint32_t t = 0; t < nt; t++) {
    if (started[t]) pthread_join(th[t], NULL);
    if (jobs[t].st && !st) st = jobs[t].st;
    else rill_status_free(jobs[t].st);
  }
  for (uint32_t k = 0; st && k < count; k++)
    if (plans[todo[k]].dev) {
      ops_cuda_release(&d->env, plans[todo[k]].dev);
      plans[todo[k]].dev = NULL;
    }
  rill__free(d->a, todo);
  /* what the ops chose goes to disk now, so that the next process finds it */
  if (count) kcache_flush(d->cache);
  return st;
}

static void c_unprepare(vm_device_t *dv, ops_plan_t *plans, uint32_t n) {
  cuda_device_t *d = (cuda_device_t *)dv;
  for (uint32_t i = 0; i < n; i++)
    if (plans[i].dev) {
      ops_cuda_release(&d->env, plans[i].dev);
      plans[i].dev = NULL;
    }
}

/* Memory the capture's graph owns: allocated on the side stream. */
static rill_status_t graph_mem(cuda_device_t *d, struct vm_graph *g, size_t size, CUdeviceptr *out) {
  if (g->nmem == g->capmem) {
    int ncap = g->capmem ? 2 * g->capmem : 8;
    CUdeviceptr *m = rill__realloc(d->a, g->mem, sizeof *m * (size_t)ncap);
    if (!m) return rill__oom();
    g->mem = m;
    g->capmem = ncap;
  }
  RILL_TRY(CU(d->api, cuMemAllocFromPoolAsync, out, size, d->pool, d->side));
  g->mem[g->nmem++] = *out;
  g->mem_bytes += size;
  atomic_fetch_add(&d->graph_bytes, size);
  return NULL;
}

static rill_status_t capture_workspace(cuda_device_t *d, cstream_t *s, size_t need) {
  RILL_TRY(graph_mem(d, d->capture, need, &s->cap_ws));
  s->cap_ws_size = need;
  return NULL;
}

static rill_status_t c_launch(vm_device_t *dv, int stream, const ops_plan_t *plan, void *const *in, void *const *out,
                              vm_obj_t *const *keep, uint32_t nkeep) {
  cuda_device_t *d = (cuda_device_t *)dv;
  for (uint32_t i = 0; i < nkeep; i++) d->base.release(keep[i]);
  cstream_t *s = &d->streams[stream];
  void *state = plan->dev;
  if (ops_cuda_uses_cudnn(state) && !s->dnn) {
    RILL_TRY(CUDNN(d->api, cudnnCreate, &s->dnn));
    RILL_TRY(CUDNN(d->api, cudnnSetStream, s->dnn, (cudaStream_t)s->s));
  }
  if (ops_cuda_uses_cudnn(state) && !s->vps) s->vps = rill__calloc(d->a, 1, sizeof *s->vps); /* NULL: no cache */
  size_t need = ops_cuda_workspace(state);
  if (s->cap) {
    if (need > s->cap_ws_size) RILL_TRY(capture_workspace(d, s, need));
  } else if (need > s->ws_size) {
    if (s->ws) RILL_TRY(CU(d->api, cuMemFreeAsync, s->ws, s->s));
    s->ws = 0;
    s->ws_size = 0;
    RILL_TRY(CU(d->api, cuMemAllocFromPoolAsync, &s->ws, need, d->pool, s->s));
    s->ws_size = need;
  }
  CUdeviceptr ws = s->cap ? s->cap_ws : s->ws;
  size_t ws_size = s->cap ? s->cap_ws_size : s->ws_size;
  ops_cuda_ctx_t ctx = {d->api, s->s, d->env.lt, s->dnn, ws, ws_size, d->err_dev, d->num_sms, s->vps, s->cap};
  return ops_cuda_run(&ctx, plan, state, in, out);
}

/* ---- events, callbacks, sync ---- */
static rill_status_t c_event_create(vm_device_t *dv, vm_event_t **out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  CUevent e;
  RILL_TRY(CU(d->api, cuEventCreate, &e, CU_EVENT_DISABLE_TIMING));
  *out = (vm_event_t *)e;
  return NULL;
}

static void c_event_destroy(vm_device_t *dv, vm_event_t *e) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (set_ctx(d)) quiet(CU_NOINJECT(d->api, cuEventDestroy, (CUevent)e));
}

static rill_status_t c_event_record(vm_device_t *dv, vm_event_t *e, int stream) {
  cuda_device_t *d = (cuda_device_t *)dv;
  return CU(d->api, cuEventRecord, (CUevent)e, d->streams[stream].s);
}

static rill_status_t c_stream_wait(vm_device_t *dv, int stream, vm_event_t *e) {
  cuda_device_t *d = (cuda_device_t *)dv;
  cstream_t *s = &d->streams[stream];
  RILL_TRY(CU(d->api, cuStreamWaitEvent, s->s, (CUevent)e, 0));
  if (d->capture && !s->cap) { /* a wait for a captured event joins the capture */
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    RILL_TRY(CU(d->api, cuStreamIsCapturing, s->s, &cs));
    s->cap = cs == CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  return NULL;
}

/* ---- trace marks: timing events, measured from a base event that the host
 * waited for when tracing began, so device times line up with host times to
 * within that wait's wake-up ---- */
struct vm_mark {
  CUevent e;
};

static rill_status_t c_mark(vm_device_t *dv, int stream, vm_mark_t **out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  rill_status_t st = NULL;
  pthread_mutex_lock(&d->mu);
  if (!d->trace_base) {
    CUevent b = NULL;
    st = CU(d->api, cuEventCreate, &b, CU_EVENT_DEFAULT);
    if (!st) st = CU(d->api, cuEventRecord, b, d->streams[stream].s);
    if (!st) st = CU(d->api, cuEventSynchronize, b);
    if (!st) {
      d->trace_base = b;
      d->trace_base_us = rill__now_us();
    } else if (b) {
      quiet(CU_NOINJECT(d->api, cuEventDestroy, b));
    }
  }
  pthread_mutex_unlock(&d->mu);
  if (st) return st;
  vm_mark_t *m = malloc(sizeof *m);
  if (!m) return rill__oom();
  if ((st = CU(d->api, cuEventCreate, &m->e, CU_EVENT_DEFAULT))) {
    free(m);
    return st;
  }
  if ((st = CU(d->api, cuEventRecord, m->e, d->streams[stream].s))) {
    quiet(CU_NOINJECT(d->api, cuEventDestroy, m->e));
    free(m);
    return st;
  }
  *out = m;
  return NULL;
}

/* -1 when the time cannot be read (the work failed). */
static double c_mark_us(vm_device_t *dv, vm_mark_t *m) {
  cuda_device_t *d = (cuda_device_t *)dv;
  float ms = 0;
  if (!set_ctx(d) || d->api->cuEventElapsedTime(&ms, d->trace_base, m->e) != CUDA_SUCCESS) return -1;
  return d->trace_base_us + (double)ms * 1e3;
}

static void c_mark_free(vm_device_t *dv, vm_mark_t *m) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (set_ctx(d)) quiet(CU_NOINJECT(d->api, cuEventDestroy, m->e));
  free(m);
}

static rill_status_t c_host_callback(vm_device_t *dv, int stream, vm_host_fn fn, void *arg) {
  return queue_callback((cuda_device_t *)dv, stream, false, NULL, fn, arg);
}

static rill_status_t c_host_callback_last(vm_device_t *dv, int stream, rill_status_t (*issue)(void *), vm_host_fn fn, void *arg) {
  return queue_callback((cuda_device_t *)dv, stream, true, issue, fn, arg);
}

/* A failed sync still drains the stream before it returns: queued host
 * callbacks (copies back into the caller's memory) must not outlive the call.
 * The waiters run them whether or not the work succeeded. */
static void drain(cuda_device_t *d, cstream_t *s) {
  if (set_ctx(d)) quiet(CU_NOINJECT(d->api, cuStreamSynchronize, s->s));
  wait_callbacks(d, s);
}

static rill_status_t c_stream_sync(vm_device_t *dv, int stream) {
  cuda_device_t *d = (cuda_device_t *)dv;
  cstream_t *s = &d->streams[stream];
  rill_status_t st = cur(d);
  if (!st) st = CU(d->api, cuStreamSynchronize, s->s);
  if (st) drain(d, s);
  else wait_callbacks(d, s);
  return st ? st : kernel_error(d);
}

static rill_status_t c_synchronize(vm_device_t *dv) {
  cuda_device_t *d = (cuda_device_t *)dv;
  rill_status_t st = cur(d);
  for (int i = 0; i < NSTREAMS; i++)
    if (d->streams[i].s && !st) st = CU(d->api, cuStreamSynchronize, d->streams[i].s);
  for (int i = 0; i < NSTREAMS; i++)
    if (d->streams[i].s) drain(d, &d->streams[i]);
  return st ? st : kernel_error(d);
}

static void c_destroy(vm_device_t *dv) {
  cuda_device_t *d = (cuda_device_t *)dv;
  /* Raw calls: tearing down must not be interrupted by injected faults. */
  bool ok = set_ctx(d);
  for (int i = 0; ok && i < NSTREAMS; i++)
    if (d->streams[i].s) quiet(CU_NOINJECT(d->api, cuStreamSynchronize, d->streams[i].s));
  pthread_mutex_lock(&d->mu);
  d->stopping = true;
  for (int i = 0; i < NSTREAMS; i++)
    if (d->streams[i].has_waiter) pthread_cond_signal(&d->streams[i].more);
  pthread_mutex_unlock(&d->mu);
  for (int i = 0; i < NSTREAMS; i++) {
    cstream_t *s = &d->streams[i];
    if (!s->has_waiter) continue;
    pthread_join(s->waiter, NULL);
    pthread_cond_destroy(&s->more);
    pthread_cond_destroy(&s->idle);
  }
  while (d->free_waiting) {
    waiting_t *h = d->free_waiting;
    d->free_waiting = h->next;
    free(h);
  }
  for (int i = 0; ok && i < d->nfree_events; i++) d->api->cuEventDestroy(d->free_events[i]);
  if (ok && d->trace_base) d->api->cuEventDestroy(d->trace_base);
  rill__free(d->a, d->free_events);
  kcache_destroy(d->cache);
  for (int i = 0; i < NSTREAMS; i++) { /* host memory: freed whatever the context's state */
    ops_cuda_vp_clear(d->api, d->streams[i].vps);
    rill__free(d->a, d->streams[i].vps);
  }
  if (ok) cache_flush(d);
  for (int i = 0; ok && i < NSTREAMS; i++) {
    cstream_t *s = &d->streams[i];
    if (s->dnn) d->api->cudnnDestroy(s->dnn);
    if (s->ws) d->api->cuMemFreeAsync(s->ws, s->s);
    if (s->s) {
      d->api->cuStreamSynchronize(s->s);
      d->api->cuStreamDestroy(s->s);
    }
  }
  if (ok && d->side) {
    d->api->cuStreamSynchronize(d->side);
    d->api->cuStreamDestroy(d->side);
  }
  pthread_mutex_destroy(&d->lib_mu);
  pthread_mutex_destroy(&d->cache_mu);
  if (d->lt_warming) pthread_join(d->lt_warm, NULL);
  if (ok && d->env.lt) d->api->cublasLtDestroy(d->env.lt);
  if (ok && d->env.dnn) d->api->cudnnDestroy(d->env.dnn);
  for (staging_t *s = d->all_staging, *next; s; s = next) {
    next = s->all_next;
    if (ok) d->api->cuMemFreeHost(s->host);
    rill__free(d->a, s);
  }
  if (ok && d->err_host) d->api->cuMemFreeHost((void *)d->err_host);
  if (d->ctx) d->api->cuDevicePrimaryCtxRelease(d->dev);
  pthread_mutex_destroy(&d->mu);
  rill__free(d->a, d);
}

static void c_kernel_stats(vm_device_t *dv, rill_kernel_stats_t *out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  kcache_stats_t s = kcache_stats(d->cache);
  double kernels_ms = (double)s.load_ns * 1e-6, prep_ms = (double)atomic_load(&d->prep_ns) * 1e-6;
  *out = (rill_kernel_stats_t){s.compiled, s.disk_hits, s.memory_hits, s.choices_timed, s.choices_from_disk, kernels_ms,
                               prep_ms > kernels_ms ? prep_ms - kernels_ms : 0, (double)s.dnn_ns * 1e-6, (double)s.lt_ns * 1e-6,
                               s.plans_built, s.plans_from_disk, ""};
  snprintf(out->cache_warning, sizeof out->cache_warning, "%s", kcache_warning(d->cache));
}

/* Workspaces held by the streams (a capture's are the graph's) and memory graphs own. */
static void c_memory(vm_device_t *dv, size_t *workspaces, size_t *graphs) {
  cuda_device_t *d = (cuda_device_t *)dv;
  *workspaces = 0;
  for (int i = 0; i < NSTREAMS; i++) *workspaces += d->streams[i].ws_size;
  *graphs = atomic_load(&d->graph_bytes);
}

/* ---- graphs ---- */
static void graph_mem_free(cuda_device_t *d, CUdeviceptr *mem, int n, size_t bytes) {
  atomic_fetch_sub(&d->graph_bytes, bytes);
  bool ok = set_ctx(d);
  for (int i = 0; ok && i < n; i++) quiet(CU_NOINJECT(d->api, cuMemFreeAsync, mem[i], d->side));
}

/* A capture's bookkeeping on this device: begun on `stream`, or (stream -1)
 * joined, another device of the object having begun it (capture_join). */
static rill_status_t capture_open(cuda_device_t *d, int stream) {
  RILL_TRY(cur(d));
  struct vm_graph *g = rill__calloc(d->a, 1, sizeof *g);
  if (!g) return rill__oom();
  rill_status_t st = NULL;
  pthread_mutex_lock(&d->mu);
  if (d->capture) st = rill__status(RILL_INVALID_ARGUMENT, "cuda device: a capture is already in progress");
  if (!st && !d->side) st = CU(d->api, cuStreamCreate, &d->side, CU_STREAM_NON_BLOCKING);
  if (!st && stream >= 0) st = CU(d->api, cuStreamBeginCapture, d->streams[stream].s, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (!st) {
    d->capture = g;
    if (stream >= 0) d->streams[stream].cap = true;
  }
  pthread_mutex_unlock(&d->mu);
  if (st) rill__free(d->a, g);
  return st;
}

static rill_status_t c_capture_begin(vm_device_t *dv, int stream) { return capture_open((cuda_device_t *)dv, stream); }

static void c_graph_destroy(vm_device_t *dv, vm_graph_t *g) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (!g) return;
  if (g->g && set_ctx(d)) quiet(CU_NOINJECT(d->api, cuGraphDestroy, g->g));
  graph_mem_free(d, g->mem, g->nmem, g->mem_bytes);
  rill__free(d->a, g->mem);
  rill__free(d->a, g->in);
  rill__free(d->a, g);
}

/* After a failed capture, a stream that joined it and was not joined back
 * stays in the dead capture (every later call on it fails): such a stream
 * is replaced by a new one. Raw calls: this is a cleanup. */
static void unstick(cuda_device_t *d, int i) {
  cstream_t *s = &d->streams[i];
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  if (!s->s || d->api->cuStreamIsCapturing(s->s, &cs) != CUDA_SUCCESS || cs == CU_STREAM_CAPTURE_STATUS_NONE) return;
  CUstream fresh = NULL;
  if (d->api->cuStreamCreate(&fresh, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return;
  d->api->cuStreamDestroy(s->s);
  s->s = fresh;
  if (s->dnn) d->api->cudnnSetStream(s->dnn, (cudaStream_t)fresh);
}

static rill_status_t c_capture_end(vm_device_t *dv, int stream, vm_graph_t **out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  struct vm_graph *g = d->capture;
  if (!g || !d->streams[stream].cap) return rill__status(RILL_INVALID_ARGUMENT, "cuda device: stream %d is not capturing", stream);
  rill_status_t st = cur(d);
  /* Raw: the capture must end whatever happens, or the stream stays unusable. */
  CUgraph cg = NULL;
  CUresult r = st ? CUDA_ERROR_INVALID_CONTEXT : d->api->cuStreamEndCapture(d->streams[stream].s, &cg);
  if (!st && r != CUDA_SUCCESS) st = rill__cu_check(r, "cuStreamEndCapture", __FILE__, __LINE__);
  /* A failed injected check still leaves the capture ended: the fault is
   * injected after the real call. */
  if (!st && cg && rill__cuda_inject()) st = rill__cu_check(CUDA_ERROR_UNKNOWN, "cuStreamEndCapture (injected)", __FILE__, __LINE__);
  pthread_mutex_lock(&d->mu);
  d->capture = NULL;
  for (int i = 0; i < NSTREAMS; i++) {
    if (d->streams[i].cap && (st || r != CUDA_SUCCESS)) unstick(d, i);
    d->streams[i].cap = false;
    d->streams[i].cap_ws = 0;
    d->streams[i].cap_ws_size = 0;
  }
  pthread_mutex_unlock(&d->mu);
  /* The graph's memory is ready before anything can launch it. */
  if (!st) st = CU(d->api, cuStreamSynchronize, d->side);
  g->g = cg;
  if (st) {
    c_graph_destroy(dv, g);
    return rill__status_prefix(st, "capture failed: ");
  }
  *out = g;
  return NULL;
}

static rill_status_t c_capture_join(vm_device_t *dv) { return capture_open((cuda_device_t *)dv, -1); }

static void c_capture_leave(vm_device_t *dv, bool failed, vm_graph_t **out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  *out = NULL;
  bool ok = set_ctx(d);
  pthread_mutex_lock(&d->mu);
  struct vm_graph *g = d->capture;
  d->capture = NULL;
  for (int i = 0; i < NSTREAMS; i++) {
    if (ok && d->streams[i].cap && failed) unstick(d, i);
    d->streams[i].cap = false;
    d->streams[i].cap_ws = 0;
    d->streams[i].cap_ws_size = 0;
  }
  pthread_mutex_unlock(&d->mu);
  if (!g) return;
  /* The graph's memory is ready before anything can launch it. */
  if (ok && !failed) failed = d->api->cuStreamSynchronize(d->side) != CUDA_SUCCESS;
  if (failed) {
    c_graph_destroy(dv, g);
    return;
  }
  *out = g;
}

static size_t c_graph_nodes(vm_device_t *dv, const vm_graph_t *g) {
  cuda_device_t *d = (cuda_device_t *)dv;
  size_t n = 0;
  if (g->g && set_ctx(d)) quiet(CU_NOINJECT(d->api, cuGraphGetNodes, g->g, NULL, &n));
  return n;
}

static void c_gexec_destroy(vm_device_t *dv, vm_gexec_t *x);

/* The executable takes over the graph's memory and, where it has input
 * copies, the graph itself (g is left without it). */
static rill_status_t c_graph_instantiate(vm_device_t *dv, vm_graph_t *g, vm_gexec_t **out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  struct vm_gexec *x = rill__calloc(d->a, 1, sizeof *x);
  if (!x) return rill__oom();
  rill_status_t st = CU(d->api, cuGraphInstantiateWithFlags, &x->x, g->g, 0);
  if (st) {
    rill__free(d->a, x);
    return st;
  }
  x->mem = g->mem;
  x->nmem = g->nmem;
  x->mem_bytes = g->mem_bytes;
  g->mem = NULL;
  g->nmem = g->capmem = 0;
  g->mem_bytes = 0;
  if (g->nin) {
    x->g = g->g;
    x->in = g->in;
    x->nin = g->nin;
    g->g = NULL;
    g->in = NULL;
    g->nin = 0;
  }
  for (int k = 0; !st && k < x->nin; k++)
    if (x->in[k].manual) st = CU(d->api, cuGraphNodeSetEnabled, x->x, x->in[k].node, 0);
  if (st) {
    c_gexec_destroy(dv, x);
    return st;
  }
  *out = x;
  return NULL;
}

/* The capture stream s is in: its graph and the nodes its next work will
 * depend on; `what` names the caller in the error where s is not capturing. */
static rill_status_t capture_deps(cuda_device_t *d, CUstream s, const char *what, CUgraph *g, const CUgraphNode **deps,
                                  const CUgraphEdgeData **edges, size_t *ndeps) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  RILL_TRY(CU(d->api, cuStreamGetCaptureInfo, s, &cs, NULL, g, deps, edges, ndeps));
  if (cs != CU_STREAM_CAPTURE_STATUS_ACTIVE) return rill__status(RILL_INVALID_ARGUMENT, "cuda device: %s outside a capture", what);
  return NULL;
}

/* Whether p is host memory (pinned, mapped into the device's space). */
static rill_status_t is_host_memory(cuda_device_t *d, const void *p, bool *out) {
  unsigned type = 0;
  RILL_TRY(CU(d->api, cuPointerGetAttribute, &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)p));
  *out = type == CU_MEMORYTYPE_HOST;
  return NULL;
}

static rill_status_t c_capture_input(vm_device_t *dv, int stream, void *dst, const void *src, size_t n) {
  cuda_device_t *d = (cuda_device_t *)dv;
  struct vm_graph *g = d->capture;
  CUstream s = d->streams[stream].s;
  if (!g || !d->streams[stream].cap) return rill__status(RILL_INVALID_ARGUMENT, "cuda device: stream %d is not capturing", stream);
  if (!n) return rill__status(RILL_INVALID_ARGUMENT, "cuda device: an input copy of 0 bytes");
  ginput_t *in = rill__realloc(d->a, g->in, sizeof *in * (size_t)(g->nin + 1));
  if (!in) return rill__oom();
  g->in = in;
  bool host;
  RILL_TRY(is_host_memory(d, src, &host));
  RILL_TRY(CU(d->api, cuMemcpyDtoDAsync, (CUdeviceptr)dst, (CUdeviceptr)(host ? dst : src), n, s));
  /* The copy is the stream's one capture dependency now: its node. */
  CUgraph cg;
  const CUgraphNode *deps = NULL;
  const CUgraphEdgeData *edges = NULL;
  size_t ndeps = 0;
  RILL_TRY(capture_deps(d, s, "an input copy", &cg, &deps, &edges, &ndeps));
  if (ndeps != 1) return rill__status(RILL_INTERNAL, "cuda device: a captured input copy left %zu capture dependencies", ndeps);
  ginput_t *k = &g->in[g->nin];
  memset(k, 0, sizeof *k);
  k->node = deps[0];
  RILL_TRY(CU(d->api, cuGraphMemcpyNodeGetParams, k->node, &k->p));
  if (host) k->manual = src;
  g->nin++;
  return NULL;
}

static rill_status_t c_gexec_set_input(vm_device_t *dv, vm_gexec_t *x, int k, const void *src) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (k < 0 || k >= x->nin) return rill__status(RILL_INVALID_ARGUMENT, "cuda device: the graph has no input %d", k);
  ginput_t *in = &x->in[k];
  bool host;
  RILL_TRY(is_host_memory(d, src, &host));
  if (host) {
    if (!in->manual) RILL_TRY(CU(d->api, cuGraphNodeSetEnabled, x->x, in->node, 0));
    in->manual = src;
    return NULL;
  }
  CUDA_MEMCPY3D p = in->p;
  if (p.srcMemoryType != CU_MEMORYTYPE_DEVICE && p.srcMemoryType != CU_MEMORYTYPE_UNIFIED)
    return rill__status(RILL_INTERNAL, "cuda device: graph input %d was captured reading memory of type %d", k, (int)p.srcMemoryType);
  p.srcDevice = (CUdeviceptr)src;
  RILL_TRY(CU(d->api, cuGraphExecMemcpyNodeSetParams, x->x, in->node, &p, d->ctx));
  if (in->manual) RILL_TRY(CU(d->api, cuGraphNodeSetEnabled, x->x, in->node, 1));
  in->manual = NULL;
  return NULL;
}

static rill_status_t c_graph_launch(vm_device_t *dv, vm_gexec_t *x, int stream) {
  cuda_device_t *d = (cuda_device_t *)dv;
  CUstream s = d->streams[stream].s;
  for (int k = 0; k < x->nin; k++)
    if (x->in[k].manual)
      RILL_TRY(CU(d->api, cuMemcpyDtoDAsync, x->in[k].p.dstDevice, (CUdeviceptr)x->in[k].manual, x->in[k].p.WidthInBytes, s));
  return CU(d->api, cuGraphLaunch, x->x, s);
}

/* The caller makes sure no launch of x is in flight (its old memory goes). */
static rill_status_t c_graph_update(vm_device_t *dv, vm_gexec_t *x, vm_graph_t *g) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  CUgraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  rill_status_t st = CU(d->api, cuGraphExecUpdate, x->x, g->g, &info);
  if (st) return rill__status_prefix(st, "graph update (result %d): ", (int)info.result);
  graph_mem_free(d, x->mem, x->nmem, x->mem_bytes);
  rill__free(d->a, x->mem);
  x->mem = g->mem;
  x->nmem = g->nmem;
  x->mem_bytes = g->mem_bytes;
  g->mem = NULL;
  g->nmem = g->capmem = 0;
  g->mem_bytes = 0;
  return NULL;
}

static void c_gexec_destroy(vm_device_t *dv, vm_gexec_t *x) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (!x) return;
  if (set_ctx(d)) {
    quiet(CU_NOINJECT(d->api, cuGraphExecDestroy, x->x));
    if (x->g) quiet(CU_NOINJECT(d->api, cuGraphDestroy, x->g));
  }
  graph_mem_free(d, x->mem, x->nmem, x->mem_bytes);
  rill__free(d->a, x->mem);
  rill__free(d->a, x->in);
  rill__free(d->a, x);
}

static rill_status_t c_copy_d2d(vm_device_t *dv, int stream, void *dst, const void *src, size_t n) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (!n) return NULL;
  return CU(d->api, cuMemcpyDtoDAsync, (CUdeviceptr)dst, (CUdeviceptr)src, n, d->streams[stream].s);
}

static rill_status_t c_mapped_alloc(vm_device_t *dv, size_t n, void **out_host, void **out_dev) {
  cuda_device_t *d = (cuda_device_t *)dv;
  RILL_TRY(cur(d));
  void *h = NULL;
  CUdeviceptr p = 0;
  RILL_TRY(CU(d->api, cuMemHostAlloc, &h, n, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  rill_status_t st = CU(d->api, cuMemHostGetDevicePointer, &p, h, 0);
  if (st) {
    d->api->cuMemFreeHost(h);
    return st;
  }
  memset(h, 0, n);
  *out_host = h;
  *out_dev = (void *)p;
  return NULL;
}
static void c_mapped_free(vm_device_t *dv, void *host) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (host && set_ctx(d)) d->api->cuMemFreeHost(host);
}

/* ---- conditional nodes ---- */
static rill_status_t launch_set_cond(cuda_device_t *d, CUstream s, struct vm_cond *c, const void *flag, int reset) {
  CUdeviceptr f = (CUdeviceptr)flag, cnt = c->count, err = d->err_dev;
  unsigned long long h = c->h, max = c->max;
  void *args[] = {&h, &f, &cnt, &max, &reset, &err};
  return CU(d->api, cuLaunchKernel, d->set_cond, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
}

static rill_status_t c_cond_begin(vm_device_t *dv, int stream, bool loop, int nbodies, const void *flag, uint64_t max,
                                  vm_cond_t **out) {
  cuda_device_t *d = (cuda_device_t *)dv;
  CUstream s = d->streams[stream].s;
  RILL_TRY(cur(d));
  if (!d->set_cond) RILL_TRY(kcache_get(d->cache, SET_COND_SRC, "rill_set_cond", &d->set_cond));
  struct vm_cond *c = rill__calloc(d->a, 1, sizeof *c);
  if (!c) return rill__oom();
  c->max = max;
  CUgraph g = NULL;
  const CUgraphNode *deps = NULL;
  const CUgraphEdgeData *edges = NULL;
  size_t ndeps = 0;
  rill_status_t st = capture_deps(d, s, "a conditional node", &g, &deps, &edges, &ndeps);
  if (!st) st = CU(d->api, cuGraphConditionalHandleCreate, &c->h, g, d->ctx, 0, 0);
  if (!st && loop) st = graph_mem(d, d->capture, sizeof(uint64_t), &c->count);
  if (!st) st = launch_set_cond(d, s, c, flag, 1);
  if (!st) st = capture_deps(d, s, "a conditional node", &g, &deps, &edges, &ndeps);
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = c->h;
  p.conditional.type = loop ? CU_GRAPH_COND_TYPE_WHILE : CU_GRAPH_COND_TYPE_IF;
  p.conditional.size = (unsigned)nbodies;
  p.conditional.ctx = d->ctx;
  CUgraphNode node = NULL;
  if (!st) st = CU(d->api, cuGraphAddNode, &node, g, deps, edges, ndeps, &p);
  if (!st) st = CU(d->api, cuStreamUpdateCaptureDependencies, s, &node, NULL, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
  if (st) {
    rill__free(d->a, c);
    return st;
  }
  for (int k = 0; k < nbodies && k < 2; k++) c->body[k] = p.conditional.phGraph_out[k];
  *out = c;
  return NULL;
}

static rill_status_t c_cond_body_begin(vm_device_t *dv, vm_cond_t *c, int k, int *out_stream) {
  cuda_device_t *d = (cuda_device_t *)dv;
  int bs;
  RILL_TRY(c_stream_acquire(dv, &bs));
  rill_status_t st = CU(d->api, cuStreamBeginCaptureToGraph, d->streams[bs].s, c->body[k], NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (st) {
    c_stream_release(dv, bs);
    return st;
  }
  d->streams[bs].cap = true;
  *out_stream = bs;
  return NULL;
}

static rill_status_t c_cond_body_end(vm_device_t *dv, vm_cond_t *c, int stream, const void *flag) {
  cuda_device_t *d = (cuda_device_t *)dv;
  CUstream s = d->streams[stream].s;
  rill_status_t st = flag ? launch_set_cond(d, s, c, flag, 0) : NULL;
  /* Raw: the body's capture must end whatever happened. */
  CUgraph g = NULL;
  CUresult r = d->api->cuStreamEndCapture(s, &g);
  if (!st && r != CUDA_SUCCESS) st = rill__cu_check(r, "cuStreamEndCapture", __FILE__, __LINE__);
  d->streams[stream].cap = false;
  c_stream_release(dv, stream);
  return st;
}

static void c_cond_free(vm_device_t *dv, vm_cond_t *c) {
  cuda_device_t *d = (cuda_device_t *)dv;
  rill__free(d->a, c);
}

static void *c_native_stream(vm_device_t *dv, int stream, int *out_device) {
  *out_device = 0;
  return ((cuda_device_t *)dv)->streams[stream].s;
}

static rill_status_t c_native_device(vm_device_t *dv, int k, int *out_ordinal, const char *source, const char *name, void **out_fn) {
  cuda_device_t *d = (cuda_device_t *)dv;
  if (k != 0) return rill__status(RILL_INVALID_ARGUMENT, "no device %d (of 1)", k);
  RILL_TRY(cur(d));
  *out_ordinal = d->ordinal;
  if (!source) return NULL;
  CUfunction f;
  RILL_TRY(kcache_get(d->cache, source, name, &f));
  *out_fn = f;
  return NULL;
}

static const vm_device_ops_t CUDA_OPS = {
    .name = "cuda",
    .destroy = c_destroy,
    .stream_acquire = c_stream_acquire,
    .stream_release = c_stream_release,
    .alloc = c_alloc,
    .free = c_free,
    .copy_h2d = c_copy_h2d,
    .copy_d2h = c_copy_d2h,
    .launch = c_launch,
    .event_create = c_event_create,
    .event_destroy = c_event_destroy,
    .event_record = c_event_record,
    .stream_wait = c_stream_wait,
    .host_callback = c_host_callback,
    .host_callback_last = c_host_callback_last,
    .mark = c_mark,
    .mark_us = c_mark_us,
    .mark_free = c_mark_free,
    .stream_sync = c_stream_sync,
    .synchronize = c_synchronize,
    .prepare = c_prepare,
    .unprepare = c_unprepare,
    .candidates = c_candidates,
    .kernel_stats = c_kernel_stats,
    .memory = c_memory,
    .copy_d2d = c_copy_d2d,
    .mapped_alloc = c_mapped_alloc,
    .mapped_free = c_mapped_free,
    .capture_begin = c_capture_begin,
    .capture_join = c_capture_join,
    .capture_leave = c_capture_leave,
    .capture_end = c_capture_end,
    .graph_nodes = c_graph_nodes,
    .graph_destroy = c_graph_destroy,
    .graph_instantiate = c_graph_instantiate,
    .graph_launch = c_graph_launch,
    .capture_input = c_capture_input,
    .gexec_set_input = c_gexec_set_input,
    .graph_update = c_graph_update,
    .gexec_destroy = c_gexec_destroy,
    .cond_begin = c_cond_begin,
    .cond_body_begin = c_cond_body_begin,
    .cond_body_end = c_cond_body_end,
    .cond_free = c_cond_free,
    .native_stream = c_native_stream,
    .native_device = c_native_device,
};

/* The first call in the process loads the CUDA libraries (the driver and
 * cuInit, NVRTC, cuBLASLt, cuDNN; kernels/cuda_api.c), a part of the
 * start-up of its own, "cuda libraries"; a call while a background start
 * loads them waits for it. */
const char *vm_cuda_unusable(void) {
  const char *why = NULL;
  return rill_cuda_api(&why) ? NULL : why;
}

static rill_status_t device_create(const rill_allocator_t *a, int ordinal, vm_release_fn release, vm_device_t **out);

/* A device's context, streams and handles: "vm/device" of the start-up.
 * A background start of the GPU (rill_device_start) is waited for first,
 * and its retain of the primary context let go only after the device's
 * own: the context is made once, not destroyed and made again. */
rill_status_t vm_device_cuda_create(const rill_allocator_t *a, int ordinal, vm_release_fn release, vm_device_t **out) {
  double t0 = rill__now_us();
  vm_cuda_start_wait(ordinal);
  rill_status_t st = device_create(a, ordinal, release, out);
  vm_cuda_start_end(ordinal);
  rill__timing_add("vm/device", (rill__now_us() - t0) / 1e3);
  return st;
}

/* cuBLASLt's first heuristics query in a process is slow, and every thread
 * that asks waits for it (BERT f16's warm start: 460 to 634 ms of its 8
 * preparing threads, summed, whether they made 48 queries and checks or
 * 768; prepare 95 to 130 ms; runs EW and EX), which the first run's
 * preparation waited for. One query of a small product is made on a
 * thread of the device's own as it is made, beside the weights' upload.
 * Raw calls (no CU): fault injection counts the VM's calls alone; a
 * failure here only leaves the first query to the preparation. */
static void lt_warm_query(cuda_device_t *d) {
  const rill_cuda_api_t *api = d->api;
  if (api->cuCtxSetCurrent(d->ctx) != CUDA_SUCCESS) return;
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t l = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  if (api->cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
      api->cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, 64, 64, 64) == CUBLAS_STATUS_SUCCESS &&
      api->cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS)
    api->cublasLtMatmulAlgoGetHeuristic(d->env.lt, desc, l, l, l, l, pref, 1, &res, &found);
  if (pref) api->cublasLtMatmulPreferenceDestroy(pref);
  if (l) api->cublasLtMatrixLayoutDestroy(l);
  if (desc) api->cublasLtMatmulDescDestroy(desc);
}

/* Warm-up threads running: a process that exits without destroying its
 * device waits for them at exit (up to 2 s, so that a child of fork that
 * inherited a count never hangs), before the libraries' own exit handlers
 * (registered before ours, so run after) tear cuBLASLt down under them. */
static pthread_mutex_t warm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t warm_cv = PTHREAD_COND_INITIALIZER;
static int warm_running;

static void warm_wait(void) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  pthread_mutex_lock(&warm_mu);
  while (warm_running > 0 && pthread_cond_timedwait(&warm_cv, &warm_mu, &until) == 0) {
  }
  pthread_mutex_unlock(&warm_mu);
}

static void warm_register(void) { atexit(warm_wait); }

static void *lt_warm(void *arg) {
  lt_warm_query(arg);
  pthread_mutex_lock(&warm_mu);
  warm_running--;
  pthread_cond_broadcast(&warm_cv);
  pthread_mutex_unlock(&warm_mu);
  return NULL;
}

static rill_status_t device_create(const rill_allocator_t *a, int ordinal, vm_release_fn release, vm_device_t **out) {
  const char *why = NULL;
  const rill_cuda_api_t *api = rill_cuda_api(&why);
  if (!api) return rill__status(RILL_UNAVAILABLE, "cuda is not usable: %s", why);
  int count = 0;
  api->cuDeviceGetCount(&count);
  if (ordinal < 0 || ordinal >= count) return rill__status(RILL_UNAVAILABLE, "cuda:%d does not exist (%d GPU%s)", ordinal, count, count == 1 ? "" : "s");
  cuda_device_t *d = rill__calloc(a, 1, sizeof *d);
  if (!d) return rill__oom();
  d->a = a;
  d->api = api;
  d->ordinal = ordinal;
  d->base.ops = &CUDA_OPS;
  d->base.release = release;
  d->base.keeps_operands = false;
  d->base.ndevices = 1;
  d->poison = getenv("RILL_POISON") != NULL;
  pthread_mutex_init(&d->mu, NULL);
  pthread_mutex_init(&d->lib_mu, NULL);
  pthread_mutex_init(&d->cache_mu, NULL);
  double t0 = rill__now_us();
  rill_status_t st = CU(api, cuDeviceGet, &d->dev, ordinal);
  if (!st) st = CU(api, cuDevicePrimaryCtxRetain, &d->ctx, d->dev);
  if (!st) st = cur(d);
  rill__timing_since("vm/device/context", t0);
  int major = 0, minor = 0;
  if (!st) st = CU(api, cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
  if (!st) st = CU(api, cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
  if (!st) st = CU(api, cuDeviceGetAttribute, &d->num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
  d->sm = major * 10 + minor;
  if (!st) st = CU(api, cuDeviceGetDefaultMemPool, &d->pool, d->dev);
  if (!st) {
    /* Keep freed memory in the pool: runs allocate the same sizes again. */
    cuuint64_t keep = UINT64_MAX;
    st = CU(api, cuMemPoolSetAttribute, d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
  }
  void *eh = NULL;
  if (!st) st = CU(api, cuMemHostAlloc, &eh, 64, CU_MEMHOSTALLOC_DEVICEMAP);
  if (!st) {
    d->err_host = eh;
    *d->err_host = 0;
    st = CU(api, cuMemHostGetDevicePointer, &d->err_dev, eh, 0);
  }
  if (!st) st = kcache_create(a, api, d->sm, &d->cache);
  if (!st && !(d->free_events = rill__calloc(a, 64, sizeof(CUevent)))) st = rill__oom();
  d->cap_events = 64;
  d->env = (ops_cuda_env_t){api, a, d->cache, d->sm, d->num_sms, NULL, NULL, &d->lib_mu, ""};
  if (!st) st = CU(api, cuDeviceGetName, d->env.device_name, sizeof d->env.device_name, d->dev);
  t0 = rill__now_us();
  if (!st) st = CUBLAS(api, cublasLtCreate, &d->env.lt);
  rill__timing_since("vm/device/cuBLASLt handle", t0);
  t0 = rill__now_us();
  if (!st) st = CUDNN(api, cudnnCreate, &d->env.dnn);
  rill__timing_since("vm/device/cuDNN handle", t0);
  if (st) {
    c_destroy(&d->base);
    return st;
  }
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, warm_register);
  pthread_mutex_lock(&warm_mu);
  d->lt_warming = pthread_create(&d->lt_warm, NULL, lt_warm, d) == 0; /* (none: the first run's query pays) */
  warm_running += d->lt_warming;
  pthread_mutex_unlock(&warm_mu);
  *out = &d->base;
  return NULL;
}

/* ---- several GPUs (device_multi.c) ---- */
rill_status_t vm_cuda_make_current(vm_device_t *d) { return cur((cuda_device_t *)d); }

/* peer_reads' bit for device d (ordinals past 63 have none: copies to them are staged). */
static uint64_t peer_bit(CUdevice d) { return d >= 0 && d < 64 ? 1ull << d : 0; }

bool vm_cuda_enable_peer(vm_device_t *to, vm_device_t *from) {
  cuda_device_t *a = (cuda_device_t *)to, *b = (cuda_device_t *)from;
  int can = 0;
  if (!quiet(CU_NOINJECT(a->api, cuDeviceCanAccessPeer, &can, a->dev, b->dev)) || !can || !set_ctx(a)) return false;
  CUresult r = a->api->cuCtxEnablePeerAccess(b->ctx, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return false;
  /* Values live in b's memory pool, which peer access to b's context does
   * not open: the pool grants a's device access of its own. */
  CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = a->dev}, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (a->api->cuMemPoolSetAccess(b->pool, &acc, 1) == CUDA_SUCCESS) a->peer_reads |= peer_bit(b->dev);
  return true;
}

rill_status_t vm_cuda_copy_peer(vm_device_t *to, int stream, void *dst, vm_device_t *from, const void *src, size_t n) {
  cuda_device_t *a = (cuda_device_t *)to, *b = (cuda_device_t *)from;
  if (!n) return NULL;
  RILL_TRY(cur(a));
  /* Where a reads b's pool (P2P over NVLink or PCIe), a unified-address
   * copy: stream capture records it as a memcpy node of a graph over both
   * devices. Otherwise cuMemcpyPeerAsync, which the driver stages through
   * host memory, and which capture refuses (such a graph fails to capture
   * and the function runs interpreted, saying why). */
  if (a->peer_reads & peer_bit(b->dev))
    return CU(a->api, cuMemcpyAsync, (CUdeviceptr)dst, (CUdeviceptr)src, n, a->streams[stream].s);
  return CU(a->api, cuMemcpyPeerAsync, (CUdeviceptr)dst, a->ctx, (CUdeviceptr)src, b->ctx, n, a->streams[stream].s);
}
