/* device_cpu.c: the reference `cpu` device. Each stream is a worker thread
 * draining a FIFO of tasks, so a multi-stream program really runs
 * concurrently; each record of an event is a node of its own, and a wait
 * captures the node current when it is issued, so it waits for exactly that
 * record (as in CUDA) however the event is recorded again later. Memory is
 * host memory: allocation is immediate, and objects that tasks use are kept
 * alive until they ran. The device's memory is the machine's physical
 * memory: an allocation that would take the bytes it holds past that fails
 * (out of memory) at once, rather than succeeding lazily under overcommit
 * and failing, or swapping, when the memory is touched.
 *
 * Several devices (cpu:0,cpu:1,...): one object holds them all, so that an
 * event, a wait and a capture span them as they span streams. Each stream
 * belongs to one of them (stream_acquire_on), each has its own count of the
 * bytes it holds, and an allocation records its device in a header before
 * the memory, so a free on any stream counts it back to its owner.
 *
 * Graphs: while a stream captures, the tasks pushed to it are appended to the
 * capture instead of its FIFO, each with its lane (the captured stream it
 * came from) and, for a wait, the captured record it waits for; a stream that
 * waits for a captured record joins the capture as a new lane. An executable
 * holds a copy of those tasks, an event per record and a stream per lane
 * but the first; a launch pushes the copies, in capture order, onto the
 * launch stream and the lanes' streams, so the replay keeps the captured
 * streams' concurrency and every event edge, as a CUDA graph does. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "device.h"

/* K_SETCOND and K_COND exist only in graphs: a conditional node's condition
 * set from a byte in memory, and the node itself. */
enum { K_LAUNCH, K_COPY, K_RECORD, K_WAIT, K_CALLBACK, K_MARK, K_STOP, K_SETCOND, K_COND };
static const char *const KIND_NAMES[] = {"a launch", "a copy", "an event record", "an event wait", "a host callback", "a mark", "a stop"};

/* Conditions of an executable (shared by its bodies' executables): value
 * and, for loops, iterations so far. */
typedef struct cond_state {
  unsigned *val;
  uint64_t *count;
} cond_state_t;

typedef struct rec rec_t;

typedef struct task {
  struct task *next;
  int kind;
  const ops_plan_t *plan;
  vm_event_t *ev;
  rec_t *rec;           /* K_RECORD: the record it completes; K_WAIT: the record it waits for */
  vm_host_fn fn;
  void *arg;
  void *dst;
  const void *src;
  size_t n;
  uint32_t nin, nout, nkeep;
  void **ptrs;          /* nin inputs then nout outputs */
  vm_obj_t **keep;
  /* captured tasks: the lane, and for a wait the index of the captured record
   * it waits for (-1: none) */
  int lane, dep;
  int input;            /* a graph's input copy: its number + 1 (capture_input); else 0 */
  /* K_SETCOND: condition `handle` := byte at src != 0 (a loop's: counted,
   * from 0 when `reset`, at most n times); K_COND: an if (nbodies 2: the
   * second when the condition is false) or a loop over body[0]; bodies are
   * graphs in a capture, executables in a template; arg: the cond_state_t */
  int handle, nbodies;
  bool loop, reset;
  void *body[2];
} task_t;

/* One record of an event; referenced by the event (while it is the latest)
 * and by the tasks that record or wait for it. Guarded by the device lock. */
struct rec {
  int refs;
  bool done;
  uint64_t cap_id;      /* recorded in capture cap_id (0: a real record), as its task cap_index */
  int cap_index;
};

struct vm_event {
  rec_t *last;          /* the latest record issued, or NULL */
};

struct vm_mark {
  double us;
};

static void rec_drop(rec_t *r) {
  if (r && --r->refs == 0) free(r);
}

/* A capture in progress, then (ended) a graph: tasks in issue order. */
struct vm_graph {
  uint64_t id;
  int origin;           /* the stream that began it */
  task_t **tasks;
  size_t n, cap;
  int nlanes;
  int ninputs;          /* input copies (capture_input) */
  rill_status_t error;  /* the first thing that could not be captured */
  vm_graph_t *root;     /* the outermost graph (itself, or the graph a body is part of) */
  int nhandles;         /* root: conditions */
};

/* A conditional node while its bodies are captured. */
struct vm_cond {
  vm_graph_t *g;        /* the graph the node is in */
  size_t task;          /* the node's task there */
  vm_graph_t *body;     /* the body being captured */
};

/* An executable: task templates (no references kept), an event per record, a stream per lane. */
struct vm_gexec {
  task_t *tasks;
  size_t n;
  void **ptrs;          /* the tasks' operand pointers */
  vm_event_t **ev;      /* per task: its record's event (records only) */
  size_t *in;           /* per input copy: its task */
  int nin;
  int nlanes;
  int *lane_stream;     /* lane_stream[0] is the launch stream, set per launch */
  cond_state_t cs;      /* owned by the outermost executable */
  bool owns_cs;
};

typedef struct cpu_stream {
  pthread_t thread;
  bool started, in_use;
  vm_graph_t *cap;      /* capturing into this graph, as lane `lane` */
  int lane;
  task_t *head, *tail;
  pthread_cond_t cond;  /* work arrived */
  uint64_t pushed, done;
  struct cpu_device *dev;
} cpu_stream_t;

typedef struct cpu_device {
  vm_device_t base;
  const rill_allocator_t *a;
  pthread_mutex_t mu;   /* guards queues, events and the error */
  pthread_cond_t progress; /* any task finished */
  cpu_stream_t streams[ISA_MAX_STREAMS * 4];
  rill_status_t error;
  vm_graph_t *cap;      /* the capture in progress, if any */
  vm_graph_t *active[16]; /* it and the bodies being captured inside it */
  int nactive;
  uint64_t cap_ids;
  atomic_size_t held;   /* bytes allocated and not yet freed */
  size_t memory;        /* the machine's physical memory */
  int8_t stream_dev[ISA_MAX_STREAMS * 4]; /* the device each stream belongs to */
  atomic_size_t dev_held[ISA_MAX_DEVICES]; /* bytes each device holds */
} cpu_device_t;

/* With several devices an allocation has a header (its device) before the memory. */
#define CPU_HDR 64

#define NSTREAMS ((int)(sizeof(((cpu_device_t *)0)->streams) / sizeof(cpu_stream_t)))

static void task_free(cpu_device_t *d, task_t *t) {
  for (uint32_t i = 0; i < t->nkeep; i++) d->base.release(t->keep[i]);
  free(t);
}

static void set_cond(cpu_device_t *d, const task_t *t) {
  cond_state_t *cs = t->arg;
  unsigned v = *(const uint8_t *)t->src != 0;
  if (t->loop && t->reset) cs->count[t->handle] = 0;
  if (t->loop && !t->reset && v && ++cs->count[t->handle] > t->n) {
    v = 0;
    if (!d->error) d->error = rill__status(RILL_RUNTIME_ERROR, "loop iteration limit (%llu) exceeded in a graph", (unsigned long long)t->n);
  }
  cs->val[t->handle] = v;
}

static void run_cond(cpu_device_t *d, const task_t *t, int stream);

static void *worker(void *arg) {
  cpu_stream_t *s = arg;
  cpu_device_t *d = s->dev;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!s->head) pthread_cond_wait(&s->cond, &d->mu);
    task_t *t = s->head;
    if (t->kind == K_STOP) {
      s->head = t->next;
      free(t);
      break;
    }
    if (t->kind == K_WAIT) {
      while (t->rec && !t->rec->done) pthread_cond_wait(&d->progress, &d->mu);
    } else if (t->kind == K_RECORD) {
      t->rec->done = true;
    } else if (t->kind == K_MARK) {
      ((vm_mark_t *)t->arg)->us = rill__now_us();
    } else if (t->kind == K_SETCOND) {
      set_cond(d, t);
    } else if (t->kind == K_COND) {
      pthread_mutex_unlock(&d->mu);
      run_cond(d, t, (int)(s - d->streams));
      pthread_mutex_lock(&d->mu);
    } else if (t->kind == K_CALLBACK) {
      /* Callbacks run unlocked: they may take other locks (the loop's queue). */
      rill_status_t err = d->error;
      pthread_mutex_unlock(&d->mu);
      t->fn(t->arg, err);
      pthread_mutex_lock(&d->mu);
    } else if (!d->error) {
      pthread_mutex_unlock(&d->mu);
      rill_status_t st = NULL;
      if (t->kind == K_LAUNCH) {
        st = t->plan->def->cpu(t->plan, t->ptrs, t->ptrs + t->nin);
      } else if (t->n) {
        memcpy(t->dst, t->src, t->n);
      }
      pthread_mutex_lock(&d->mu);
      if (st && !d->error) d->error = st;
      else rill_status_free(st);
    }
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    s->done++;
    rec_drop(t->rec); /* under the device lock */
    pthread_mutex_unlock(&d->mu);
    task_free(d, t);
    pthread_mutex_lock(&d->mu);
    pthread_cond_broadcast(&d->progress);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

/* Appends t to the capture (under the device lock); takes t. */
static rill_status_t capture_task(cpu_device_t *d, cpu_stream_t *s, task_t *t) {
  vm_graph_t *g = s->cap;
  rill_status_t st = NULL;
  if (t->kind == K_CALLBACK || t->kind == K_MARK)
    st = rill__status(RILL_UNIMPLEMENTED, "cpu device: %s cannot be captured", KIND_NAMES[t->kind]);
  else if (g->n == g->cap) {
    size_t ncap = g->cap ? 2 * g->cap : 64;
    task_t **nt = realloc(g->tasks, ncap * sizeof *nt);
    if (nt) g->tasks = nt, g->cap = ncap;
    else st = rill__oom();
  }
  if (st) {
    if (!g->error) g->error = rill__status(rill_status_code(st), "%s", rill_status_message(st));
    pthread_mutex_unlock(&d->mu);
    task_free(d, t);
    return st;
  }
  t->lane = s->lane;
  t->dep = -1;
  if (t->input) t->input = ++g->ninputs;
  if (t->kind == K_RECORD) {
    rec_t *r = calloc(1, sizeof *r);
    if (!r) {
      pthread_mutex_unlock(&d->mu);
      task_free(d, t);
      return rill__oom();
    }
    /* Done as far as real waits go; captured waits take its index. */
    *r = (rec_t){1, true, g->id, (int)g->n};
    rec_drop(t->ev->last);
    t->ev->last = r;
  } else if (t->kind == K_WAIT) {
    rec_t *r = t->ev->last;
    if (r && r->cap_id == g->id) t->dep = r->cap_index;
    else if (r && r->cap_id && !g->error) /* in a body, for work outside it */
      g->error = rill__status(RILL_UNIMPLEMENTED, "cpu device: a wait inside a conditional body for an event recorded outside it");
  }
  t->ev = NULL;
  g->tasks[g->n++] = t;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static rill_status_t push(cpu_device_t *d, int stream, task_t *t) {
  cpu_stream_t *s = &d->streams[stream];
  pthread_mutex_lock(&d->mu);
  for (int i = 0; !s->cap && t->kind == K_WAIT && t->ev->last && i < d->nactive; i++)
    if (t->ev->last->cap_id == d->active[i]->id) { /* waits for captured work: joins that capture */
      s->cap = d->active[i];
      s->lane = s->cap->nlanes++;
    }
  if (s->cap) return capture_task(d, s, t);
  if (t->input) {
    pthread_mutex_unlock(&d->mu);
    task_free(d, t);
    return rill__status(RILL_INVALID_ARGUMENT, "cpu device: stream %d is not capturing", stream);
  }
  if (!s->started) {
    s->dev = d;
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, worker, s) != 0) {
      pthread_mutex_unlock(&d->mu);
      task_free(d, t);
      return rill__status(RILL_UNAVAILABLE, "cpu device: cannot start a stream thread");
    }
    s->started = true;
  }
  if (t->kind == K_RECORD) {
    /* A new record replaces the event's latest; the task keeps its own reference. */
    rec_t *r = calloc(1, sizeof *r);
    if (!r) {
      pthread_mutex_unlock(&d->mu);
      task_free(d, t);
      return rill__oom();
    }
    r->refs = 2;
    rec_drop(t->ev->last);
    t->ev->last = r;
    t->rec = r;
  } else if (t->kind == K_WAIT) {
    /* Waits for the latest record issued so far; none means no wait. */
    t->rec = t->ev->last;
    if (t->rec) t->rec->refs++;
  }
  t->next = NULL;
  if (s->tail) s->tail->next = t;
  else s->head = t;
  s->tail = t;
  s->pushed++;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static task_t *new_task(int kind, size_t extra) {
  task_t *t = calloc(1, sizeof(task_t) + extra);
  if (t) t->kind = kind;
  return t;
}

static rill_status_t cpu_launch(vm_device_t *dv, int stream, const ops_plan_t *plan, void *const *in,
                                void *const *out, vm_obj_t *const *keep, uint32_t nkeep) {
  cpu_device_t *d = (cpu_device_t *)dv;
  uint32_t nin = plan->decl->nin, nout = plan->decl->nout;
  task_t *t = new_task(K_LAUNCH, sizeof(void *) * (nin + nout) + sizeof(vm_obj_t *) * nkeep);
  if (!t) {
    for (uint32_t i = 0; i < nkeep; i++) d->base.release(keep[i]);
    return rill__oom();
  }
  t->plan = plan;
  t->nin = nin;
  t->nout = nout;
  t->ptrs = (void **)(t + 1);
  if (nin) memcpy(t->ptrs, in, sizeof(void *) * nin); /* (a send-only exchange has no outputs: out may be NULL) */
  if (nout) memcpy(t->ptrs + nin, out, sizeof(void *) * nout);
  t->keep = (vm_obj_t **)(t->ptrs + nin + nout);
  if (nkeep) memcpy(t->keep, keep, sizeof(vm_obj_t *) * nkeep);
  t->nkeep = nkeep;
  return push(d, stream, t);
}

/* A copy; `input`: a graph's input copy (numbered by the capture). */
static rill_status_t push_copy(vm_device_t *dv, int stream, void *dst, const void *src, size_t n, bool input) {
  task_t *t = new_task(K_COPY, 0);
  if (!t) return rill__oom();
  t->dst = dst;
  t->src = src;
  t->n = n;
  t->input = input;
  return push((cpu_device_t *)dv, stream, t);
}

static rill_status_t cpu_copy(vm_device_t *dv, int stream, void *dst, const void *src, size_t n) {
  return push_copy(dv, stream, dst, src, n, false);
}

static rill_status_t cpu_capture_input(vm_device_t *dv, int stream, void *dst, const void *src, size_t n) {
  return push_copy(dv, stream, dst, src, n, true);
}

static rill_status_t cpu_event_create(vm_device_t *dv, vm_event_t **out) {
  (void)dv;
  *out = calloc(1, sizeof(vm_event_t));
  return *out ? NULL : rill__oom();
}

static void cpu_event_destroy(vm_device_t *dv, vm_event_t *e) {
  cpu_device_t *d = (cpu_device_t *)dv;
  pthread_mutex_lock(&d->mu);
  rec_drop(e->last);
  pthread_mutex_unlock(&d->mu);
  free(e);
}

static rill_status_t cpu_record(vm_device_t *dv, vm_event_t *e, int stream) {
  task_t *t = new_task(K_RECORD, 0);
  if (!t) return rill__oom();
  t->ev = e;
  return push((cpu_device_t *)dv, stream, t);
}

static rill_status_t cpu_wait(vm_device_t *dv, int stream, vm_event_t *e) {
  task_t *t = new_task(K_WAIT, 0);
  if (!t) return rill__oom();
  t->ev = e;
  return push((cpu_device_t *)dv, stream, t);
}

static rill_status_t cpu_callback(vm_device_t *dv, int stream, vm_host_fn fn, void *arg) {
  task_t *t = new_task(K_CALLBACK, 0);
  if (!t) return rill__oom();
  t->fn = fn;
  t->arg = arg;
  return push((cpu_device_t *)dv, stream, t);
}

static rill_status_t cpu_mark(vm_device_t *dv, int stream, vm_mark_t **out) {
  vm_mark_t *m = calloc(1, sizeof *m);
  task_t *t = m ? new_task(K_MARK, 0) : NULL;
  if (!t) {
    free(m);
    return rill__oom();
  }
  t->arg = m;
  rill_status_t st = push((cpu_device_t *)dv, stream, t);
  if (st) {
    free(m);
    return st;
  }
  *out = m;
  return NULL;
}

static double cpu_mark_us(vm_device_t *dv, vm_mark_t *m) {
  (void)dv;
  return m->us;
}

static void cpu_mark_free(vm_device_t *dv, vm_mark_t *m) {
  (void)dv;
  free(m);
}

static rill_status_t copy_error(cpu_device_t *d) {
  if (!d->error) return NULL;
  return rill__status(rill_status_code(d->error), "%s", rill_status_message(d->error));
}

static rill_status_t cpu_sync(vm_device_t *dv, int stream) {
  cpu_device_t *d = (cpu_device_t *)dv;
  cpu_stream_t *s = &d->streams[stream];
  pthread_mutex_lock(&d->mu);
  uint64_t target = s->pushed;
  while (s->done < target) pthread_cond_wait(&d->progress, &d->mu);
  rill_status_t st = copy_error(d);
  pthread_mutex_unlock(&d->mu);
  return st;
}

static rill_status_t cpu_synchronize(vm_device_t *dv) {
  cpu_device_t *d = (cpu_device_t *)dv;
  for (int i = 0; i < NSTREAMS; i++) {
    if (!d->streams[i].started) continue;
    rill_status_t st = cpu_sync(dv, i);
    if (st) return st;
  }
  return NULL;
}

#define CPU_HUGE ((size_t)2 << 20)
#define CPU_HUGE_FROM ((size_t)4 << 20)
static rill_status_t cpu_alloc(vm_device_t *dv, int stream, size_t size, void **out) {
  cpu_device_t *d = (cpu_device_t *)dv;
  size_t hdr = dv->ndevices > 1 ? CPU_HDR : 0;
  if (size > SIZE_MAX - CPU_HDR) return rill__status(RILL_OUT_OF_MEMORY, "cpu device: %zu bytes are more than any allocation", size);
  size_t held = atomic_fetch_add(&d->held, size);
  if (size > d->memory || held > d->memory - size) {
    atomic_fetch_sub(&d->held, size);
    return rill__status(RILL_OUT_OF_MEMORY, "cpu device: %zu bytes are more than the machine's memory (%zu bytes) less the %zu in use",
                        size, d->memory, held);
  }
  void *p = NULL;
  if (size + hdr >= CPU_HUGE_FROM) {
    /* Large buffers (weights copied in, big activations) in 2 MiB pages
     * where the kernel has them: a fresh page's first touch is the cost of
     * filling such a buffer (a fault per 4 KiB page otherwise: twice the
     * time for 440 MB of weights on a virtual machine) */
    size_t len = (size + hdr + CPU_HUGE - 1) / CPU_HUGE * CPU_HUGE;
    uint8_t *m = mmap(NULL, len + CPU_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      uint8_t *al = (uint8_t *)(((uintptr_t)m + CPU_HUGE - 1) & ~(uintptr_t)(CPU_HUGE - 1));
      if (al > m) munmap(m, (size_t)(al - m));
      size_t tail = (size_t)(m + len + CPU_HUGE - (al + len));
      if (tail) munmap(al + len, tail);
      madvise(al, len, MADV_HUGEPAGE);
      p = al;
    } else {
      atomic_fetch_sub(&d->held, size);
      return rill__status(RILL_OUT_OF_MEMORY, "cpu device: cannot allocate %zu bytes", size);
    }
  } else if (posix_memalign(&p, 64, size || hdr ? size + hdr : 64) != 0) {
    atomic_fetch_sub(&d->held, size);
    return rill__status(RILL_OUT_OF_MEMORY, "cpu device: cannot allocate %zu bytes", size);
  }
  if (hdr) {
    int dev = d->stream_dev[stream];
    *(int *)p = dev;
    atomic_fetch_add(&d->dev_held[dev], size);
    p = (uint8_t *)p + hdr;
  }
  *out = p;
  return NULL;
}

static void cpu_free(vm_device_t *dv, int stream, void *p, size_t size) {
  (void)stream;
  cpu_device_t *d = (cpu_device_t *)dv;
  if (!p) return;
  atomic_fetch_sub(&d->held, size);
  size_t hdr = dv->ndevices > 1 ? CPU_HDR : 0;
  if (hdr) {
    p = (uint8_t *)p - CPU_HDR;
    atomic_fetch_sub(&d->dev_held[*(int *)p], size);
  }
  /* (cpu_alloc's large buffers are mappings of whole 2 MiB pages) */
  if (size + hdr >= CPU_HUGE_FROM) munmap(p, (size + hdr + CPU_HUGE - 1) / CPU_HUGE * CPU_HUGE);
  else free(p);
}

static rill_status_t cpu_stream_acquire_on(vm_device_t *dv, int dev, int *out) {
  cpu_device_t *d = (cpu_device_t *)dv;
  if (dev < 0 || dev >= dv->ndevices) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: no device %d (of %d)", dev, dv->ndevices);
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < NSTREAMS; i++) {
    if (!d->streams[i].in_use) {
      d->streams[i].in_use = true;
      d->stream_dev[i] = (int8_t)dev;
      pthread_mutex_unlock(&d->mu);
      *out = i;
      return NULL;
    }
  }
  pthread_mutex_unlock(&d->mu);
  return rill__status(RILL_UNAVAILABLE, "cpu device: all %d streams are in use", NSTREAMS);
}

static rill_status_t cpu_stream_acquire(vm_device_t *dv, int *out) { return cpu_stream_acquire_on(dv, 0, out); }

static size_t cpu_device_held(vm_device_t *dv, int dev) {
  return dev >= 0 && dev < dv->ndevices ? atomic_load(&((cpu_device_t *)dv)->dev_held[dev]) : 0;
}

static void cpu_stream_release(vm_device_t *dv, int stream) {
  cpu_device_t *d = (cpu_device_t *)dv;
  pthread_mutex_lock(&d->mu);
  d->streams[stream].in_use = false;
  pthread_mutex_unlock(&d->mu);
}

static void cpu_destroy(vm_device_t *dv) {
  cpu_device_t *d = (cpu_device_t *)dv;
  for (int i = 0; i < NSTREAMS; i++) {
    cpu_stream_t *s = &d->streams[i];
    if (!s->started) continue;
    task_t *t = new_task(K_STOP, 0);
    if (t) push(d, i, t); /* a stop that cannot be allocated leaks the thread, never memory in use */
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
  }
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->progress);
  rill_status_free(d->error);
  rill__free(d->a, d);
}

/* ---- graphs ---- */
static vm_graph_t *graph_new(cpu_device_t *d, int stream, vm_graph_t *root) {
  vm_graph_t *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->id = ++d->cap_ids;
  g->origin = stream;
  g->nlanes = 1;
  g->root = root ? root : g;
  return g;
}

static rill_status_t cpu_capture_begin(vm_device_t *dv, int stream) {
  cpu_device_t *d = (cpu_device_t *)dv;
  pthread_mutex_lock(&d->mu);
  vm_graph_t *g = d->cap ? NULL : graph_new(d, stream, NULL);
  if (!g) {
    pthread_mutex_unlock(&d->mu);
    return d->cap ? rill__status(RILL_INVALID_ARGUMENT, "cpu device: a capture is already in progress") : rill__oom();
  }
  d->cap = d->active[0] = g;
  d->nactive = 1;
  d->streams[stream].cap = g;
  d->streams[stream].lane = 0;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void cpu_graph_destroy(vm_device_t *dv, vm_graph_t *g) {
  cpu_device_t *d = (cpu_device_t *)dv;
  if (!g) return;
  for (size_t i = 0; i < g->n; i++) {
    if (g->tasks[i]->kind == K_COND)
      for (int k = 0; k < 2; k++) cpu_graph_destroy(dv, g->tasks[i]->body[k]);
    task_free(d, g->tasks[i]);
  }
  free(g->tasks);
  rill_status_free(g->error);
  free(g);
}

/* Every lane but the first must end with a record that lane 0 waits for later. */
static rill_status_t check_joined(const vm_graph_t *g) {
  for (int lane = 1; lane < g->nlanes; lane++) {
    ptrdiff_t last = -1;
    for (size_t i = 0; i < g->n; i++)
      if (g->tasks[i]->lane == lane) last = (ptrdiff_t)i;
    bool joined = false;
    for (size_t i = (size_t)last + 1; last >= 0 && g->tasks[last]->kind == K_RECORD && !joined && i < g->n; i++)
      joined = g->tasks[i]->lane == 0 && g->tasks[i]->kind == K_WAIT && g->tasks[i]->dep == last;
    if (!joined) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: captured work on a joined stream (lane %d) is not joined back before the capture ends", lane);
  }
  return NULL;
}

/* Ends the capture of g (the root or a body): its streams stop capturing. */
static rill_status_t end_capture(cpu_device_t *d, vm_graph_t *g) {
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < NSTREAMS; i++)
    if (d->streams[i].cap == g) d->streams[i].cap = NULL;
  int k = 0;
  for (int i = 0; i < d->nactive; i++)
    if (d->active[i] != g) d->active[k++] = d->active[i];
  d->nactive = k;
  pthread_mutex_unlock(&d->mu);
  rill_status_t st = g->error ? g->error : check_joined(g);
  if (st == g->error) g->error = NULL;
  return st;
}

static rill_status_t cpu_capture_end(vm_device_t *dv, int stream, vm_graph_t **out) {
  cpu_device_t *d = (cpu_device_t *)dv;
  pthread_mutex_lock(&d->mu);
  vm_graph_t *g = d->cap;
  bool ok = g && g->origin == stream;
  if (ok) {
    /* Bodies still being captured (a failed run) end with it. */
    for (int i = 0; i < NSTREAMS; i++)
      if (d->streams[i].cap) d->streams[i].cap = NULL;
    d->cap = NULL;
    d->nactive = 0;
  }
  pthread_mutex_unlock(&d->mu);
  if (!ok) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: stream %d is not capturing", stream);
  rill_status_t st = end_capture(d, g);
  if (st) {
    cpu_graph_destroy(dv, g);
    return rill__status_prefix(st, "capture failed: ");
  }
  *out = g;
  return NULL;
}

static size_t cpu_graph_nodes(vm_device_t *dv, const vm_graph_t *g) {
  size_t n = g->n;
  for (size_t i = 0; i < g->n; i++)
    for (int k = 0; g->tasks[i]->kind == K_COND && k < 2; k++)
      if (g->tasks[i]->body[k]) n += cpu_graph_nodes(dv, g->tasks[i]->body[k]);
  return n;
}

static void cpu_gexec_destroy(vm_device_t *dv, vm_gexec_t *x) {
  if (!x) return;
  for (size_t i = 0; i < x->n; i++) {
    if (x->ev && x->ev[i]) cpu_event_destroy(dv, x->ev[i]);
    if (x->tasks && x->tasks[i].kind == K_COND)
      for (int k = 0; k < 2; k++) cpu_gexec_destroy(dv, x->tasks[i].body[k]);
  }
  for (int l = 1; x->lane_stream && l < x->nlanes; l++)
    if (x->lane_stream[l] >= 0) cpu_stream_release(dv, x->lane_stream[l]);
  if (x->owns_cs) {
    free(x->cs.val);
    free(x->cs.count);
  }
  free(x->ev);
  free(x->in);
  free(x->lane_stream);
  free(x->tasks);
  free(x->ptrs);
  free(x);
}

/* The task's parameters (not its references) into a template; the operand
 * pointers go to dst->ptrs (room for src's), when it has any. */
static void set_template(task_t *dst, const task_t *src) {
  void **ptrs = dst->ptrs;
  void *body[2] = {dst->body[0], dst->body[1]};
  void *arg = dst->arg;
  if (ptrs && src->nin + src->nout) memcpy(ptrs, src->ptrs, sizeof(void *) * (src->nin + src->nout));
  *dst = *src;
  dst->ptrs = ptrs;
  dst->next = NULL;
  dst->keep = NULL;
  dst->nkeep = 0;
  dst->rec = NULL;
  dst->ev = NULL;
  if (src->kind == K_COND || src->kind == K_SETCOND) { /* executables' bodies and conditions stay */
    dst->body[0] = body[0], dst->body[1] = body[1];
    dst->arg = arg;
  }
}

static rill_status_t instantiate(vm_device_t *dv, vm_graph_t *g, const cond_state_t *cs, vm_gexec_t **out) {
  vm_gexec_t *x = calloc(1, sizeof *x);
  if (!x) return rill__oom();
  x->n = g->n;
  x->nlanes = g->nlanes;
  x->tasks = calloc(g->n ? g->n : 1, sizeof *x->tasks);
  x->ev = calloc(g->n ? g->n : 1, sizeof *x->ev);
  x->lane_stream = malloc(sizeof(int) * (size_t)g->nlanes);
  x->in = calloc(g->ninputs ? (size_t)g->ninputs : 1, sizeof *x->in);
  size_t np = 0;
  for (size_t i = 0; i < g->n; i++) np += g->tasks[i]->nin + g->tasks[i]->nout;
  x->ptrs = calloc(np ? np : 1, sizeof(void *));
  rill_status_t st = x->tasks && x->ev && x->lane_stream && x->ptrs && x->in ? NULL : rill__oom();
  if (!st && !cs) {
    int nh = g->nhandles ? g->nhandles : 1;
    x->owns_cs = true;
    x->cs.val = calloc((size_t)nh, sizeof(unsigned));
    x->cs.count = calloc((size_t)nh, sizeof(uint64_t));
    if (!x->cs.val || !x->cs.count) st = rill__oom();
  } else if (!st) {
    x->cs = *cs;
  }
  for (size_t i = 0, at = 0; !st && i < g->n; at += g->tasks[i]->nin + g->tasks[i]->nout, i++) x->tasks[i].ptrs = x->ptrs + at;
  for (int l = 0; x->lane_stream && l < g->nlanes; l++) x->lane_stream[l] = -1;
  for (int l = 1; !st && l < g->nlanes; l++) st = cpu_stream_acquire(dv, &x->lane_stream[l]);
  for (size_t i = 0; !st && i < g->n; i++) {
    const task_t *t = g->tasks[i];
    set_template(&x->tasks[i], t);
    if (t->input) x->in[x->nin++] = i;
    if (t->kind == K_RECORD) st = cpu_event_create(dv, &x->ev[i]);
    if (t->kind == K_SETCOND || t->kind == K_COND) x->tasks[i].arg = &x->cs;
    for (int k = 0; !st && t->kind == K_COND && k < t->nbodies; k++)
      st = instantiate(dv, t->body[k], &x->cs, (vm_gexec_t **)&x->tasks[i].body[k]);
  }
  if (st) {
    cpu_gexec_destroy(dv, x);
    return st;
  }
  *out = x;
  return NULL;
}

static rill_status_t cpu_graph_instantiate(vm_device_t *dv, vm_graph_t *g, vm_gexec_t **out) {
  return instantiate(dv, g, NULL, out);
}

/* A copy of template i of x, to push: records and waits get x's events. NULL
 * with *st NULL: nothing to push (a wait for nothing captured). */
static task_t *task_of(vm_gexec_t *x, size_t i, rill_status_t *st) {
  const task_t *tp = &x->tasks[i];
  size_t extra = sizeof(void *) * (tp->nin + tp->nout);
  *st = NULL;
  if (tp->kind == K_WAIT && tp->dep < 0) return NULL;
  task_t *t = new_task(tp->kind, extra);
  if (!t) {
    *st = rill__oom();
    return NULL;
  }
  t->ptrs = (void **)(t + 1);
  set_template(t, tp);
  t->body[0] = tp->body[0], t->body[1] = tp->body[1];
  t->arg = tp->arg;
  t->input = 0;
  if (tp->kind == K_RECORD) t->ev = x->ev[i];
  else if (tp->kind == K_WAIT) t->ev = x->ev[tp->dep];
  return t;
}

static rill_status_t cpu_gexec_set_input(vm_device_t *dv, vm_gexec_t *x, int k, const void *src) {
  (void)dv;
  if (k < 0 || k >= x->nin) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: the graph has no input %d", k);
  x->tasks[x->in[k]].src = src;
  return NULL;
}

static rill_status_t cpu_graph_launch(vm_device_t *dv, vm_gexec_t *x, int stream) {
  cpu_device_t *d = (cpu_device_t *)dv;
  x->lane_stream[0] = stream;
  for (size_t i = 0; i < x->n; i++) {
    rill_status_t st;
    task_t *t = task_of(x, i, &st);
    if (st) return st;
    if (t) RILL_TRY(push(d, x->lane_stream[x->tasks[i].lane], t));
  }
  return NULL;
}

/* A task of a body's first lane, run here and now (the thread that runs the
 * conditional node stands for that lane's stream). */
static void run_inline(cpu_device_t *d, task_t *t) {
  pthread_mutex_lock(&d->mu);
  if (t->kind == K_WAIT) {
    rec_t *r = t->ev->last;
    while (r && !r->done) pthread_cond_wait(&d->progress, &d->mu);
  } else if (t->kind == K_RECORD) {
    rec_t *r = calloc(1, sizeof *r);
    if (r) {
      *r = (rec_t){1, true, 0, 0};
      rec_drop(t->ev->last);
      t->ev->last = r;
    } else if (!d->error) {
      d->error = rill__oom();
    }
  } else if (t->kind == K_SETCOND) {
    set_cond(d, t);
  } else if (t->kind == K_COND) {
    pthread_mutex_unlock(&d->mu);
    run_cond(d, t, -1);
    pthread_mutex_lock(&d->mu);
  } else if (!d->error) {
    pthread_mutex_unlock(&d->mu);
    rill_status_t st = NULL;
    if (t->kind == K_LAUNCH) st = t->plan->def->cpu(t->plan, t->ptrs, t->ptrs + t->nin);
    else if (t->n) memcpy(t->dst, t->src, t->n);
    pthread_mutex_lock(&d->mu);
    if (st && !d->error) d->error = st;
    else rill_status_free(st);
  }
  pthread_cond_broadcast(&d->progress);
  pthread_mutex_unlock(&d->mu);
  free(t);
}

/* A conditional node: its body's first lane runs on this thread, the others
 * on the body executable's lane streams, in capture order. */
static void run_cond(cpu_device_t *d, const task_t *t, int stream) {
  (void)stream;
  cond_state_t *cs = t->arg;
  for (;;) {
    pthread_mutex_lock(&d->mu);
    bool failed = d->error != NULL;
    unsigned v = cs->val[t->handle];
    pthread_mutex_unlock(&d->mu);
    int k = v ? 0 : !t->loop && t->nbodies > 1 ? 1 : -1;
    if (k < 0 || failed) return;
    vm_gexec_t *x = t->body[k];
    for (size_t i = 0; i < x->n; i++) {
      rill_status_t st;
      task_t *c = task_of(x, i, &st);
      if (!st && c && x->tasks[i].lane == 0) run_inline(d, c);
      else if (!st && c) st = push(d, x->lane_stream[x->tasks[i].lane], c);
      if (st) {
        pthread_mutex_lock(&d->mu);
        if (!d->error) d->error = st;
        else rill_status_free(st);
        pthread_mutex_unlock(&d->mu);
        return;
      }
    }
    if (!t->loop) return;
  }
}

static rill_status_t cpu_graph_update(vm_device_t *dv, vm_gexec_t *x, vm_graph_t *g) {
  (void)dv;
  bool same = x->n == g->n && x->nlanes == g->nlanes;
  for (size_t i = 0; same && i < g->n; i++) {
    const task_t *a = &x->tasks[i], *b = g->tasks[i];
    same = a->kind == b->kind && a->plan == b->plan && a->lane == b->lane && a->dep == b->dep && a->nin == b->nin &&
           a->nout == b->nout && b->kind != K_COND && b->kind != K_SETCOND;
  }
  if (!same) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: the graph's topology differs from the executable's (or it has conditional nodes)");
  for (size_t i = 0; i < g->n; i++) set_template(&x->tasks[i], g->tasks[i]);
  return NULL;
}

/* ---- conditional nodes, while capturing ---- */
static rill_status_t push_setcond(cpu_device_t *d, int stream, int handle, const void *flag, bool loop, bool reset, uint64_t max) {
  task_t *t = new_task(K_SETCOND, 0);
  if (!t) return rill__oom();
  t->handle = handle;
  t->src = flag;
  t->loop = loop;
  t->reset = reset;
  t->n = max;
  return push(d, stream, t);
}

static rill_status_t cpu_cond_begin(vm_device_t *dv, int stream, bool loop, int nbodies, const void *flag, uint64_t max,
                                    vm_cond_t **out) {
  cpu_device_t *d = (cpu_device_t *)dv;
  vm_graph_t *g = d->streams[stream].cap;
  if (!g) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: a conditional node outside a capture");
  vm_cond_t *c = calloc(1, sizeof *c);
  task_t *t = new_task(K_COND, 0);
  if (!c || !t) {
    free(c);
    free(t);
    return rill__oom();
  }
  pthread_mutex_lock(&d->mu);
  t->handle = g->root->nhandles++;
  pthread_mutex_unlock(&d->mu);
  t->loop = loop;
  t->nbodies = nbodies;
  rill_status_t st = push_setcond(d, stream, t->handle, flag, loop, true, max);
  if (st) {
    free(c);
    free(t);
    return st;
  }
  c->g = g;
  c->task = g->n;
  st = push(d, stream, t);
  if (st) {
    free(c);
    return st;
  }
  *out = c;
  return NULL;
}

static rill_status_t cpu_cond_body_begin(vm_device_t *dv, vm_cond_t *c, int k, int *out_stream) {
  cpu_device_t *d = (cpu_device_t *)dv;
  int bs;
  RILL_TRY(cpu_stream_acquire(dv, &bs));
  pthread_mutex_lock(&d->mu);
  vm_graph_t *b = d->nactive < 16 ? graph_new(d, bs, c->g->root) : NULL;
  if (b) {
    c->g->tasks[c->task]->body[k] = b;
    c->body = b;
    d->active[d->nactive++] = b;
    d->streams[bs].cap = b;
    d->streams[bs].lane = 0;
  }
  pthread_mutex_unlock(&d->mu);
  if (!b) {
    cpu_stream_release(dv, bs);
    return rill__status(RILL_OUT_OF_MEMORY, "cpu device: too many nested conditional bodies");
  }
  *out_stream = bs;
  return NULL;
}

static rill_status_t cpu_cond_body_end(vm_device_t *dv, vm_cond_t *c, int stream, const void *flag) {
  cpu_device_t *d = (cpu_device_t *)dv;
  const task_t *node = c->g->tasks[c->task];
  rill_status_t st = flag ? push_setcond(d, stream, node->handle, flag, true, false, 0) : NULL;
  if (!st) {
    /* The limit is the node's: the entry's set-condition task holds it. */
    vm_graph_t *b = c->body;
    if (flag && b->n) b->tasks[b->n - 1]->n = c->g->tasks[c->task - 1]->n;
  }
  rill_status_t st2 = end_capture(d, c->body);
  cpu_stream_release(dv, stream);
  c->body = NULL;
  if (st) rill_status_free(st2);
  return st ? st : st2;
}

static void cpu_cond_free(vm_device_t *dv, vm_cond_t *c) {
  (void)dv;
  free(c);
}

static const vm_device_ops_t CPU_OPS = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .stream_acquire = cpu_stream_acquire,
    .stream_acquire_on = cpu_stream_acquire_on,
    .device_held = cpu_device_held,
    .stream_release = cpu_stream_release,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .copy_d2d = cpu_copy,
    .capture_input = cpu_capture_input,
    .gexec_set_input = cpu_gexec_set_input,
    .launch = cpu_launch,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_record,
    .stream_wait = cpu_wait,
    .host_callback = cpu_callback,
    .mark = cpu_mark,
    .mark_us = cpu_mark_us,
    .mark_free = cpu_mark_free,
    .stream_sync = cpu_sync,
    .synchronize = cpu_synchronize,
    .capture_begin = cpu_capture_begin,
    .capture_end = cpu_capture_end,
    .graph_nodes = cpu_graph_nodes,
    .graph_destroy = cpu_graph_destroy,
    .graph_instantiate = cpu_graph_instantiate,
    .graph_launch = cpu_graph_launch,
    .graph_update = cpu_graph_update,
    .gexec_destroy = cpu_gexec_destroy,
    .cond_begin = cpu_cond_begin,
    .cond_body_begin = cpu_cond_body_begin,
    .cond_body_end = cpu_cond_body_end,
    .cond_free = cpu_cond_free,
};

rill_status_t vm_device_cpu_create(const rill_allocator_t *a, vm_release_fn release, vm_device_t **out) {
  return vm_device_cpu_create_n(a, 1, release, out);
}

rill_status_t vm_device_cpu_create_n(const rill_allocator_t *a, int ndevices, vm_release_fn release, vm_device_t **out) {
  if (ndevices < 1 || ndevices > ISA_MAX_DEVICES) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: %d devices (1..%d)", ndevices, ISA_MAX_DEVICES);
  cpu_device_t *d = rill__calloc(a, 1, sizeof *d);
  if (!d) return rill__oom();
  d->a = a;
  d->base.ndevices = ndevices;
  for (int i = 0; i < ISA_MAX_DEVICES; i++) atomic_init(&d->dev_held[i], 0);
  d->base.ops = &CPU_OPS;
  d->base.release = release;
  d->base.keeps_operands = true;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  d->memory = pages > 0 && page > 0 && (size_t)pages <= SIZE_MAX / (size_t)page ? (size_t)pages * (size_t)page : SIZE_MAX;
  atomic_init(&d->held, 0);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->progress, NULL);
  *out = &d->base;
  return NULL;
}
