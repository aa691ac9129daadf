/* device_cpu.c: the reference `cpu` device. Each stream is a worker thread
 * draining a FIFO of tasks, so a multi-stream program really runs
 * concurrently; each record of an event is a node of its own, and a wait
 * captures the node current when it is issued, so it waits for exactly that
 * record (as in CUDA) however the event is recorded again later. Memory is
 * host memory: allocation is immediate, and objects that tasks use are kept
 * alive until they ran.
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

#include "device.h"

enum { K_LAUNCH, K_COPY, K_RECORD, K_WAIT, K_CALLBACK, K_MARK, K_STOP };
static const char *const KIND_NAMES[] = {"a launch", "a copy", "an event record", "an event wait", "a host callback", "a mark", "a stop"};

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
  rill_status_t error;  /* the first thing that could not be captured */
};

/* An executable: task templates (no references kept), an event per record, a stream per lane. */
struct vm_gexec {
  task_t *tasks;
  size_t n;
  void **ptrs;          /* the tasks' operand pointers */
  vm_event_t **ev;      /* per task: its record's event (records only) */
  int nlanes;
  int *lane_stream;     /* lane_stream[0] is the launch stream, set per launch */
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
  uint64_t cap_ids;
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

/* Appends t to the capture (under the device lock); takes t. */
static rill_status_t capture_task(cpu_device_t *d, cpu_stream_t *s, task_t *t) {
  vm_graph_t *g = d->cap;
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
  }
  t->ev = NULL;
  g->tasks[g->n++] = t;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static rill_status_t push(cpu_device_t *d, int stream, task_t *t) {
  cpu_stream_t *s = &d->streams[stream];
  pthread_mutex_lock(&d->mu);
  if (d->cap && !s->cap && t->kind == K_WAIT && t->ev->last && t->ev->last->cap_id == d->cap->id) {
    s->cap = d->cap; /* waits for captured work: joins the capture */
    s->lane = d->cap->nlanes++;
  }
  if (s->cap) return capture_task(d, s, t);
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
  (void)dv;
  (void)stream;
  void *p = NULL;
  if (posix_memalign(&p, 64, size ? size : 64) != 0) return rill__status(RILL_OUT_OF_MEMORY, "cpu device: cannot allocate %zu bytes", size);
  *out = p;
  return NULL;
}

static void cpu_free(vm_device_t *dv, int stream, void *p, size_t size) {
  (void)dv;
  (void)stream;
  (void)size;
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

/* ---- graphs ---- */
static rill_status_t cpu_capture_begin(vm_device_t *dv, int stream) {
  cpu_device_t *d = (cpu_device_t *)dv;
  vm_graph_t *g = calloc(1, sizeof *g);
  if (!g) return rill__oom();
  pthread_mutex_lock(&d->mu);
  if (d->cap) {
    pthread_mutex_unlock(&d->mu);
    free(g);
    return rill__status(RILL_INVALID_ARGUMENT, "cpu device: a capture is already in progress");
  }
  g->id = ++d->cap_ids;
  g->origin = stream;
  g->nlanes = 1;
  d->cap = g;
  d->streams[stream].cap = g;
  d->streams[stream].lane = 0;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void cpu_graph_destroy(vm_device_t *dv, vm_graph_t *g) {
  cpu_device_t *d = (cpu_device_t *)dv;
  if (!g) return;
  for (size_t i = 0; i < g->n; i++) task_free(d, g->tasks[i]);
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

static rill_status_t cpu_capture_end(vm_device_t *dv, int stream, vm_graph_t **out) {
  cpu_device_t *d = (cpu_device_t *)dv;
  pthread_mutex_lock(&d->mu);
  vm_graph_t *g = d->cap;
  if (!g || g->origin != stream) {
    pthread_mutex_unlock(&d->mu);
    return rill__status(RILL_INVALID_ARGUMENT, "cpu device: stream %d is not capturing", stream);
  }
  for (int i = 0; i < NSTREAMS; i++)
    if (d->streams[i].cap == g) d->streams[i].cap = NULL;
  d->cap = NULL;
  pthread_mutex_unlock(&d->mu);
  rill_status_t st = g->error ? g->error : check_joined(g);
  if (st == g->error) g->error = NULL;
  if (st) {
    cpu_graph_destroy(dv, g);
    return rill__status_prefix(st, "capture failed: ");
  }
  *out = g;
  return NULL;
}

static size_t cpu_graph_nodes(vm_device_t *dv, const vm_graph_t *g) {
  (void)dv;
  return g->n;
}

static void cpu_gexec_destroy(vm_device_t *dv, vm_gexec_t *x) {
  if (!x) return;
  for (size_t i = 0; i < x->n; i++)
    if (x->ev && x->ev[i]) cpu_event_destroy(dv, x->ev[i]);
  for (int l = 1; x->lane_stream && l < x->nlanes; l++)
    if (x->lane_stream[l] >= 0) cpu_stream_release(dv, x->lane_stream[l]);
  free(x->ev);
  free(x->lane_stream);
  free(x->tasks);
  free(x->ptrs);
  free(x);
}

/* The task's parameters (not its references) into a template; the operand
 * pointers go to dst->ptrs (room for src's), when it has any. */
static void set_template(task_t *dst, const task_t *src) {
  void **ptrs = dst->ptrs;
  if (ptrs && src->nin + src->nout) memcpy(ptrs, src->ptrs, sizeof(void *) * (src->nin + src->nout));
  *dst = *src;
  dst->ptrs = ptrs;
  dst->next = NULL;
  dst->keep = NULL;
  dst->nkeep = 0;
  dst->rec = NULL;
  dst->ev = NULL;
}

static rill_status_t cpu_graph_instantiate(vm_device_t *dv, vm_graph_t *g, vm_gexec_t **out) {
  vm_gexec_t *x = calloc(1, sizeof *x);
  if (!x) return rill__oom();
  x->n = g->n;
  x->nlanes = g->nlanes;
  x->tasks = calloc(g->n ? g->n : 1, sizeof *x->tasks);
  x->ev = calloc(g->n ? g->n : 1, sizeof *x->ev);
  x->lane_stream = malloc(sizeof(int) * (size_t)g->nlanes);
  size_t np = 0;
  for (size_t i = 0; i < g->n; i++) np += g->tasks[i]->nin + g->tasks[i]->nout;
  x->ptrs = calloc(np ? np : 1, sizeof(void *));
  rill_status_t st = x->tasks && x->ev && x->lane_stream && x->ptrs ? NULL : rill__oom();
  for (size_t i = 0, at = 0; !st && i < g->n; at += g->tasks[i]->nin + g->tasks[i]->nout, i++) x->tasks[i].ptrs = x->ptrs + at;
  for (int l = 0; x->lane_stream && l < g->nlanes; l++) x->lane_stream[l] = -1;
  for (int l = 1; !st && l < g->nlanes; l++) st = cpu_stream_acquire(dv, &x->lane_stream[l]);
  for (size_t i = 0; !st && i < g->n; i++) {
    set_template(&x->tasks[i], g->tasks[i]);
    if (g->tasks[i]->kind == K_RECORD) st = cpu_event_create(dv, &x->ev[i]);
  }
  if (st) {
    cpu_gexec_destroy(dv, x);
    return st;
  }
  *out = x;
  return NULL;
}

static rill_status_t cpu_graph_launch(vm_device_t *dv, vm_gexec_t *x, int stream) {
  cpu_device_t *d = (cpu_device_t *)dv;
  x->lane_stream[0] = stream;
  for (size_t i = 0; i < x->n; i++) {
    const task_t *tp = &x->tasks[i];
    size_t extra = sizeof(void *) * (tp->nin + tp->nout);
    task_t *t = new_task(tp->kind, extra);
    if (!t) return rill__oom();
    t->ptrs = (void **)(t + 1);
    set_template(t, tp);
    if (tp->kind == K_RECORD) t->ev = x->ev[i];
    else if (tp->kind == K_WAIT) {
      if (tp->dep < 0) { /* waited for nothing captured: no wait */
        free(t);
        continue;
      }
      t->ev = x->ev[tp->dep];
    }
    RILL_TRY(push(d, x->lane_stream[tp->lane], t));
  }
  return NULL;
}

static rill_status_t cpu_graph_update(vm_device_t *dv, vm_gexec_t *x, vm_graph_t *g) {
  (void)dv;
  bool same = x->n == g->n && x->nlanes == g->nlanes;
  for (size_t i = 0; same && i < g->n; i++) {
    const task_t *a = &x->tasks[i], *b = g->tasks[i];
    same = a->kind == b->kind && a->plan == b->plan && a->lane == b->lane && a->dep == b->dep && a->nin == b->nin &&
           a->nout == b->nout;
  }
  if (!same) return rill__status(RILL_INVALID_ARGUMENT, "cpu device: the graph's topology differs from the executable's");
  for (size_t i = 0; i < g->n; i++) set_template(&x->tasks[i], g->tasks[i]);
  return NULL;
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
    .copy_d2d = cpu_copy,
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
};

rill_status_t vm_device_cpu_create(const rill_allocator_t *a, vm_release_fn release, vm_device_t **out) {
  cpu_device_t *d = rill__calloc(a, 1, sizeof *d);
  if (!d) return rill__oom();
  d->a = a;
  d->base.ops = &CPU_OPS;
  d->base.release = release;
  d->base.keeps_operands = true;
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->progress, NULL);
  *out = &d->base;
  return NULL;
}
