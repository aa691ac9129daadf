/* device_cpu.c: the reference `cpu` device. Each stream is a worker thread
 * draining a FIFO of tasks, so a multi-stream program really runs
 * concurrently; each record of an event is a node of its own, and a wait
 * captures the node current when it is issued, so it waits for exactly that
 * record (as in CUDA) however the event is recorded again later. Memory is
 * host memory: allocation is immediate, and objects that tasks use are kept
 * alive until they ran. The device's memory is the machine's physical
 * memory: an allocation that would take the bytes it holds past that fails
 * (out of memory) at once, rather than succeeding lazily under overcommit
 * and failing, or swapping, when the memory is touched. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "device.h"

enum { K_LAUNCH, K_COPY, K_RECORD, K_WAIT, K_CALLBACK, K_MARK, K_STOP };

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
} task_t;

/* One record of an event; referenced by the event (while it is the latest)
 * and by the tasks that record or wait for it. Guarded by the device lock. */
struct rec {
  int refs;
  bool done;
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

typedef struct cpu_stream {
  pthread_t thread;
  bool started, in_use;
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
  atomic_size_t held;   /* bytes allocated and not yet freed */
  size_t memory;        /* the machine's physical memory */
} cpu_device_t;

#define NSTREAMS ((int)(sizeof(((cpu_device_t *)0)->streams) / sizeof(cpu_stream_t)))

static void task_free(cpu_device_t *d, task_t *t) {
  for (uint32_t i = 0; i < t->nkeep; i++) d->base.release(t->keep[i]);
  free(t);
}

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

static rill_status_t push(cpu_device_t *d, int stream, task_t *t) {
  cpu_stream_t *s = &d->streams[stream];
  pthread_mutex_lock(&d->mu);
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
  memcpy(t->ptrs, in, sizeof(void *) * nin);
  memcpy(t->ptrs + nin, out, sizeof(void *) * nout);
  t->keep = (vm_obj_t **)(t->ptrs + nin + nout);
  memcpy(t->keep, keep, sizeof(vm_obj_t *) * nkeep);
  t->nkeep = nkeep;
  return push(d, stream, t);
}

static rill_status_t cpu_copy(vm_device_t *dv, int stream, void *dst, const void *src, size_t n) {
  task_t *t = new_task(K_COPY, 0);
  if (!t) return rill__oom();
  t->dst = dst;
  t->src = src;
  t->n = n;
  return push((cpu_device_t *)dv, stream, t);
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

static rill_status_t cpu_alloc(vm_device_t *dv, int stream, size_t size, void **out) {
  cpu_device_t *d = (cpu_device_t *)dv;
  (void)stream;
  size_t held = atomic_fetch_add(&d->held, size);
  if (size > d->memory || held > d->memory - size) {
    atomic_fetch_sub(&d->held, size);
    return rill__status(RILL_OUT_OF_MEMORY, "cpu device: %zu bytes are more than the machine's memory (%zu bytes) less the %zu in use",
                        size, d->memory, held);
  }
  void *p = NULL;
  if (posix_memalign(&p, 64, size ? size : 64) != 0) {
    atomic_fetch_sub(&d->held, size);
    return rill__status(RILL_OUT_OF_MEMORY, "cpu device: cannot allocate %zu bytes", size);
  }
  *out = p;
  return NULL;
}

static void cpu_free(vm_device_t *dv, int stream, void *p, size_t size) {
  (void)stream;
  if (p) atomic_fetch_sub(&((cpu_device_t *)dv)->held, size);
  free(p);
}

static rill_status_t cpu_stream_acquire(vm_device_t *dv, int *out) {
  cpu_device_t *d = (cpu_device_t *)dv;
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < NSTREAMS; i++) {
    if (!d->streams[i].in_use) {
      d->streams[i].in_use = true;
      pthread_mutex_unlock(&d->mu);
      *out = i;
      return NULL;
    }
  }
  pthread_mutex_unlock(&d->mu);
  return rill__status(RILL_UNAVAILABLE, "cpu device: all %d streams are in use", NSTREAMS);
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

static const vm_device_ops_t CPU_OPS = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .stream_acquire = cpu_stream_acquire,
    .stream_release = cpu_stream_release,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
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
};

rill_status_t vm_device_cpu_create(const rill_allocator_t *a, vm_release_fn release, vm_device_t **out) {
  cpu_device_t *d = rill__calloc(a, 1, sizeof *d);
  if (!d) return rill__oom();
  d->a = a;
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
