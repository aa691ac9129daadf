/* device_multi.c: several devices as one (the VM's `cuda:0,cuda:1,...`).
 *
 * The object holds one device per GPU, each with its own context, streams,
 * memory pool and waiter threads, and routes every call by its stream: a
 * stream number here is the device's own stream number times 64 plus the
 * device's index, so no table is consulted on the way. Memory is allocated
 * and freed on its device's streams (the VM frees a storage on the stream
 * that last used it, and a value is only used on its own device's streams:
 * a copy_device updates only its destination's). An event is one event per
 * device, made when that device first records it: a wait, on any device's
 * stream, waits for the device that recorded it last (CUDA waits across
 * devices' events). Op plans are prepared once per device: the VM's plans
 * are device 0's, and each further device has copies of them, found from
 * the plan pointer a launch receives. Copies between devices are peer copies
 * (direct where peer access could be turned on, staged by the driver
 * otherwise). A graph is captured from a stream of one device (the root,
 * device 0 for the VM's runs): every other device joins the capture
 * (capture_join), so its streams that wait for an event recorded in the
 * capture, as the VM's cross-device waits do, are captured into the same
 * graph, whose nodes then span the devices (CUDA graphs hold nodes of
 * several devices; the root's context instantiates and launches it). Each
 * device keeps the memory the graph owns on it (capture_leave), freed with
 * the graph or its executable. Conditional nodes are not captured across
 * devices (no cond_begin here): such a function is interpreted under graph
 * mode auto, which says why.
 *
 * The cpu device holds several devices in one object of its own
 * (device_cpu.c), where captures span them. (Separate cpu devices could
 * not be joined here: a cpu stream waits only for its own device's events.)
 */
#include <pthread.h>
#include <stdlib.h>

#include "device.h"

#define SHIFT 6 /* ISA_MAX_DEVICES == 1 << SHIFT */
#define DEV_OF(s) ((s) & ((1 << SHIFT) - 1))
#define LOCAL(s) ((s) >> SHIFT)
#define GLOBAL(k, s) (((s) << SHIFT) | (k))

typedef rill_status_t (*peer_fn)(vm_device_t *to, int stream, void *dst, vm_device_t *from, const void *src, size_t n);

/* Plans prepared for a set of op plans: per further device, copies. */
typedef struct plan_set {
  struct plan_set *next;
  const ops_plan_t *base;
  uint32_t n;
  ops_plan_t *copy[ISA_MAX_DEVICES]; /* [0] unused: device 0 has the VM's own */
} plan_set_t;

typedef struct multi_device {
  vm_device_t base;
  const rill_allocator_t *a;
  vm_device_t *sub[ISA_MAX_DEVICES];
  peer_fn peer;
  rill_status_t (*current)(vm_device_t *sub); /* or NULL */
  pthread_mutex_t mu;          /* plan sets */
  plan_set_t *sets;
} multi_device_t;

struct vm_event {
  vm_event_t *ev[ISA_MAX_DEVICES];
  int last;                    /* the device that recorded it last, -1: never */
};

struct vm_mark {
  int dev;
  vm_mark_t *m;
};

/* A graph over the devices: the root device's (its work on every device),
 * and the memory it owns on each other device (graphs without work). */
struct vm_graph {
  int root;
  vm_graph_t *g[ISA_MAX_DEVICES];
};
struct vm_gexec {
  int root;
  vm_gexec_t *x;
  vm_graph_t *mem[ISA_MAX_DEVICES]; /* [root] unused */
};

#define M(dv) ((multi_device_t *)(dv))

/* Device k, made the calling thread's current one first where the devices
 * ask for that (a CUDA context: kernels, libraries' handles and events
 * belong to one). Every call sets it: a thread may drive other VMs too.
 * A failure to set it shows in the call that follows. */
static vm_device_t *on(multi_device_t *d, int k) {
  if (d->current) rill_status_free(d->current(d->sub[k]));
  return d->sub[k];
}
#define SUB(d, s) on((d), DEV_OF(s))
/* The call fn on stream s's device, with its own stream number. */
#define CALL(d, s, fn, ...) ({ vm_device_t *sub_ = SUB(d, s); sub_->ops->fn(sub_, LOCAL(s), __VA_ARGS__); })

static rill_status_t m_acquire_on(vm_device_t *dv, int k, int *out) {
  multi_device_t *d = M(dv);
  if (k < 0 || k >= dv->ndevices) return rill__status(RILL_INVALID_ARGUMENT, "no device %d (of %d)", k, dv->ndevices);
  int s;
  vm_device_t *sub = on(d, k);
  RILL_TRY(sub->ops->stream_acquire(sub, &s));
  *out = GLOBAL(k, s);
  return NULL;
}
static rill_status_t m_acquire(vm_device_t *dv, int *out) { return m_acquire_on(dv, 0, out); }
static void m_release(vm_device_t *dv, int s) {
  vm_device_t *sub = SUB(M(dv), s);
  sub->ops->stream_release(sub, LOCAL(s));
}
static rill_status_t m_alloc(vm_device_t *dv, int s, size_t n, void **out) { return CALL(M(dv), s, alloc, n, out); }
static void m_free(vm_device_t *dv, int s, void *p, size_t n) { CALL(M(dv), s, free, p, n); }
static rill_status_t m_h2d(vm_device_t *dv, int s, void *dst, const void *src, size_t n) {
  return CALL(M(dv), s, copy_h2d, dst, src, n);
}
static rill_status_t m_d2h(vm_device_t *dv, int s, void *dst, const void *src, size_t n) {
  return CALL(M(dv), s, copy_d2h, dst, src, n);
}
static rill_status_t m_d2d(vm_device_t *dv, int s, void *dst, const void *src, size_t n) {
  return CALL(M(dv), s, copy_d2d, dst, src, n);
}
static rill_status_t m_peer(vm_device_t *dv, int s, void *dst, int from, const void *src, size_t n) {
  multi_device_t *d = M(dv);
  if (from < 0 || from >= dv->ndevices) return rill__status(RILL_INVALID_ARGUMENT, "a copy from device %d (of %d)", from, dv->ndevices);
  if (from == DEV_OF(s)) return m_d2d(dv, s, dst, src, n);
  return d->peer(SUB(d, s), LOCAL(s), dst, d->sub[from], src, n);
}
/* The plan device k prepared for `plan` (one of the VM's or an instance's). */
static const ops_plan_t *plan_on(multi_device_t *d, int k, const ops_plan_t *plan) {
  if (!k) return plan;
  pthread_mutex_lock(&d->mu);
  const ops_plan_t *p = NULL;
  for (plan_set_t *ps = d->sets; ps && !p; ps = ps->next)
    if (plan >= ps->base && plan < ps->base + ps->n) p = &ps->copy[k][plan - ps->base];
  pthread_mutex_unlock(&d->mu);
  return p;
}

static rill_status_t m_launch(vm_device_t *dv, int s, const ops_plan_t *plan, void *const *in, void *const *out, vm_obj_t *const *keep,
                              uint32_t nkeep) {
  multi_device_t *d = M(dv);
  const ops_plan_t *p = plan_on(d, DEV_OF(s), plan);
  if (!p) {
    for (uint32_t i = 0; i < nkeep; i++) dv->release(keep[i]);
    return rill__status(RILL_INTERNAL, "an op plan that device %d did not prepare", DEV_OF(s));
  }
  return CALL(d, s, launch, p, in, out, keep, nkeep);
}

static void set_free(multi_device_t *d, plan_set_t *ps) {
  for (int k = 1; k < d->base.ndevices; k++) {
    if (!ps->copy[k]) continue;
    if (d->sub[k]->ops->unprepare) on(d, k)->ops->unprepare(d->sub[k], ps->copy[k], ps->n);
    rill__free(d->a, ps->copy[k]);
  }
  rill__free(d->a, ps);
}

static rill_status_t m_prepare(vm_device_t *dv, ops_plan_t *plans, uint32_t n) {
  multi_device_t *d = M(dv);
  plan_set_t *ps = rill__calloc(d->a, 1, sizeof *ps);
  if (!ps) return rill__oom();
  ps->base = plans;
  ps->n = n;
  rill_status_t st = d->sub[0]->ops->prepare ? on(d, 0)->ops->prepare(d->sub[0], plans, n) : NULL;
  for (int k = 1; !st && k < dv->ndevices; k++) {
    if (!(ps->copy[k] = rill__calloc(d->a, n ? n : 1, sizeof(ops_plan_t)))) { st = rill__oom(); break; }
    /* The same plans with no device state: those device 0 prepared, and
     * those it left alone (a plan of another set keeps its state there). */
    for (uint32_t i = 0; i < n; i++) {
      ps->copy[k][i] = plans[i];
      ps->copy[k][i].dev = NULL;
    }
    if (d->sub[k]->ops->prepare) st = on(d, k)->ops->prepare(d->sub[k], ps->copy[k], n);
    if (st) {
      rill__free(d->a, ps->copy[k]);
      ps->copy[k] = NULL;
    }
  }
  if (st) {
    if (d->sub[0]->ops->unprepare) d->sub[0]->ops->unprepare(d->sub[0], plans, n);
    set_free(d, ps);
    return st;
  }
  pthread_mutex_lock(&d->mu);
  ps->next = d->sets;
  d->sets = ps;
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

static void m_unprepare(vm_device_t *dv, ops_plan_t *plans, uint32_t n) {
  multi_device_t *d = M(dv);
  if (d->sub[0]->ops->unprepare) on(d, 0)->ops->unprepare(d->sub[0], plans, n);
  pthread_mutex_lock(&d->mu);
  plan_set_t **pp = &d->sets;
  while (*pp && (*pp)->base != plans) pp = &(*pp)->next;
  plan_set_t *ps = *pp;
  if (ps) *pp = ps->next;
  pthread_mutex_unlock(&d->mu);
  if (ps) set_free(d, ps);
}

static rill_status_t m_event_create(vm_device_t *dv, vm_event_t **out) {
  multi_device_t *d = M(dv);
  vm_event_t *e = rill__calloc(d->a, 1, sizeof *e);
  if (!e) return rill__oom();
  e->last = -1;
  *out = e;
  return NULL;
}
static void m_event_destroy(vm_device_t *dv, vm_event_t *e) {
  multi_device_t *d = M(dv);
  for (int k = 0; k < dv->ndevices; k++)
    if (e->ev[k]) on(d, k)->ops->event_destroy(d->sub[k], e->ev[k]);
  rill__free(d->a, e);
}
static rill_status_t m_record(vm_device_t *dv, vm_event_t *e, int s) {
  multi_device_t *d = M(dv);
  int k = DEV_OF(s);
  vm_device_t *sub = on(d, k);
  if (!e->ev[k]) RILL_TRY(sub->ops->event_create(sub, &e->ev[k]));
  RILL_TRY(sub->ops->event_record(sub, e->ev[k], LOCAL(s)));
  e->last = k;
  return NULL;
}
static rill_status_t m_wait(vm_device_t *dv, int s, vm_event_t *e) {
  if (e->last < 0) return NULL; /* never recorded: complete */
  return CALL(M(dv), s, stream_wait, e->ev[e->last]);
}

static rill_status_t m_callback(vm_device_t *dv, int s, vm_host_fn fn, void *arg) {
  return CALL(M(dv), s, host_callback, fn, arg);
}
static rill_status_t m_callback_last(vm_device_t *dv, int s, rill_status_t (*issue)(void *), vm_host_fn fn, void *arg) {
  vm_device_t *sub = SUB(M(dv), s);
  if (!sub->ops->host_callback_last) {
    rill_status_t st = issue ? issue(arg) : NULL;
    if (st) {
      fn(arg, st);
      rill_status_free(st);
      return NULL;
    }
    return sub->ops->host_callback(sub, LOCAL(s), fn, arg);
  }
  return sub->ops->host_callback_last(sub, LOCAL(s), issue, fn, arg);
}
static rill_status_t m_sync(vm_device_t *dv, int s) {
  vm_device_t *sub = SUB(M(dv), s);
  return sub->ops->stream_sync(sub, LOCAL(s));
}
static rill_status_t m_synchronize(vm_device_t *dv) {
  rill_status_t first = NULL;
  for (int k = 0; k < dv->ndevices; k++) {
    rill_status_t st = M(dv)->sub[k]->ops->synchronize(M(dv)->sub[k]);
    if (st && !first) first = st;
    else rill_status_free(st);
  }
  return first;
}

static rill_status_t m_candidates(vm_device_t *dv, const ops_plan_t *plan, rill_buf_t *out) {
  vm_device_t *s0 = M(dv)->sub[0];
  if (!s0->ops->candidates) return rill__buf_printf(out, "default\n");
  return s0->ops->candidates(s0, plan, out);
}

static rill_status_t m_mark(vm_device_t *dv, int s, vm_mark_t **out) {
  multi_device_t *d = M(dv);
  vm_mark_t *m = rill__calloc(d->a, 1, sizeof *m);
  if (!m) return rill__oom();
  m->dev = DEV_OF(s);
  rill_status_t st = CALL(d, s, mark, &m->m);
  if (st) {
    rill__free(d->a, m);
    return st;
  }
  *out = m;
  return NULL;
}
static double m_mark_us(vm_device_t *dv, vm_mark_t *m) { return M(dv)->sub[m->dev]->ops->mark_us(M(dv)->sub[m->dev], m->m); }
static void m_mark_free(vm_device_t *dv, vm_mark_t *m) {
  M(dv)->sub[m->dev]->ops->mark_free(M(dv)->sub[m->dev], m->m);
  rill__free(M(dv)->a, m);
}

/* A token channel is GPU 0's (states and emits live on device 0). */
static rill_status_t m_mapped_alloc(vm_device_t *dv, size_t n, void **out_host, void **out_dev) {
  vm_device_t *s0 = M(dv)->sub[0];
  if (s0->ops->mapped_alloc) return s0->ops->mapped_alloc(s0, n, out_host, out_dev);
  if (!(*out_host = calloc(1, n))) return rill__oom();
  *out_dev = *out_host;
  return NULL;
}
static void m_mapped_free(vm_device_t *dv, void *host) {
  vm_device_t *s0 = M(dv)->sub[0];
  if (s0->ops->mapped_free) s0->ops->mapped_free(s0, host);
  else free(host);
}
static void m_kernel_stats(vm_device_t *dv, rill_kernel_stats_t *out) {
  vm_device_t *s0 = M(dv)->sub[0];
  if (s0->ops->kernel_stats) s0->ops->kernel_stats(s0, out);
}
static void m_memory(vm_device_t *dv, size_t *ws, size_t *graphs) {
  *ws = *graphs = 0;
  for (int k = 0; k < dv->ndevices; k++) {
    vm_device_t *s = M(dv)->sub[k];
    size_t w = 0, g = 0;
    if (s->ops->memory) s->ops->memory(s, &w, &g);
    *ws += w;
    *graphs += g;
  }
}

/* Every device but the root joins the capture the root's stream s begins. */
static rill_status_t m_capture_begin(vm_device_t *dv, int s) {
  multi_device_t *d = M(dv);
  int root = DEV_OF(s);
  for (int k = 0; k < dv->ndevices; k++)
    if (k != root && (!d->sub[k]->ops->capture_join || !d->sub[k]->ops->capture_leave))
      return rill__status(RILL_UNIMPLEMENTED, "graphs over %d %s devices are not captured: runs are interpreted", dv->ndevices, d->sub[k]->ops->name);
  vm_device_t *rs = SUB(d, s);
  RILL_TRY(rs->ops->capture_begin(rs, LOCAL(s)));
  rill_status_t st = NULL;
  uint64_t joined = 0;
  for (int k = 0; !st && k < dv->ndevices; k++) {
    if (k == root) continue;
    st = on(d, k)->ops->capture_join(d->sub[k]);
    if (!st) joined |= (uint64_t)1 << k;
  }
  if (!st) return NULL;
  for (int k = 0; k < dv->ndevices; k++) {
    vm_graph_t *none;
    if (joined & ((uint64_t)1 << k)) on(d, k)->ops->capture_leave(d->sub[k], true, &none);
  }
  vm_graph_t *g = NULL;
  rill_status_free(CALL(d, s, capture_end, &g));
  if (g) SUB(d, s)->ops->graph_destroy(SUB(d, s), g);
  return st;
}

static void m_graph_destroy(vm_device_t *dv, vm_graph_t *g) {
  if (!g) return;
  for (int k = 0; k < dv->ndevices; k++)
    if (g->g[k]) on(M(dv), k)->ops->graph_destroy(M(dv)->sub[k], g->g[k]);
  rill__free(M(dv)->a, g);
}

static rill_status_t m_capture_end(vm_device_t *dv, int s, vm_graph_t **out) {
  multi_device_t *d = M(dv);
  int root = DEV_OF(s);
  vm_graph_t *rg = NULL;
  rill_status_t st = CALL(d, s, capture_end, &rg);
  struct vm_graph *g = rill__calloc(d->a, 1, sizeof *g);
  if (!st && !g) st = rill__oom();
  for (int k = 0; k < dv->ndevices; k++) {
    vm_graph_t *mem = NULL;
    if (k != root) on(d, k)->ops->capture_leave(d->sub[k], st != NULL, &mem);
    if (g) g->g[k] = mem;
  }
  if (g) {
    g->root = root;
    g->g[root] = rg;
  }
  if (st) {
    if (g) m_graph_destroy(dv, g);
    else if (rg) on(d, root)->ops->graph_destroy(d->sub[root], rg);
    return st;
  }
  *out = g;
  return NULL;
}

static size_t m_graph_nodes(vm_device_t *dv, const vm_graph_t *g) {
  vm_device_t *sub = on(M(dv), g->root);
  return sub->ops->graph_nodes(sub, g->g[g->root]);
}

/* The executable takes the memory the graph holds on the other devices. */
static rill_status_t m_graph_instantiate(vm_device_t *dv, vm_graph_t *g, vm_gexec_t **out) {
  multi_device_t *d = M(dv);
  struct vm_gexec *x = rill__calloc(d->a, 1, sizeof *x);
  if (!x) return rill__oom();
  vm_device_t *sub = on(d, g->root);
  rill_status_t st = sub->ops->graph_instantiate(sub, g->g[g->root], &x->x);
  if (st) {
    rill__free(d->a, x);
    return st;
  }
  x->root = g->root;
  for (int k = 0; k < dv->ndevices; k++)
    if (k != g->root) {
      x->mem[k] = g->g[k];
      g->g[k] = NULL;
    }
  *out = x;
  return NULL;
}

static rill_status_t m_graph_launch(vm_device_t *dv, vm_gexec_t *x, int s) {
  multi_device_t *d = M(dv);
  if (DEV_OF(s) != x->root)
    return rill__status(RILL_INTERNAL, "a graph captured on device %d launched on a stream of device %d", x->root, DEV_OF(s));
  vm_device_t *sub = SUB(d, s);
  return sub->ops->graph_launch(sub, x->x, LOCAL(s));
}

static rill_status_t m_graph_update(vm_device_t *dv, vm_gexec_t *x, vm_graph_t *g) {
  multi_device_t *d = M(dv);
  if (g->root != x->root) return rill__status(RILL_INVALID_ARGUMENT, "a graph of another root device");
  vm_device_t *sub = on(d, x->root);
  RILL_TRY(sub->ops->graph_update(sub, x->x, g->g[g->root]));
  for (int k = 0; k < dv->ndevices; k++) /* no launch of x is in flight: its old memory goes */
    if (k != x->root) {
      if (x->mem[k]) on(d, k)->ops->graph_destroy(d->sub[k], x->mem[k]);
      x->mem[k] = g->g[k];
      g->g[k] = NULL;
    }
  return NULL;
}

static void m_gexec_destroy(vm_device_t *dv, vm_gexec_t *x) {
  multi_device_t *d = M(dv);
  if (!x) return;
  on(d, x->root)->ops->gexec_destroy(d->sub[x->root], x->x);
  for (int k = 0; k < dv->ndevices; k++)
    if (x->mem[k]) on(d, k)->ops->graph_destroy(d->sub[k], x->mem[k]);
  rill__free(d->a, x);
}

static rill_status_t m_capture_input(vm_device_t *dv, int s, void *dst, const void *src, size_t n) {
  return CALL(M(dv), s, capture_input, dst, src, n);
}
static rill_status_t m_gexec_set_input(vm_device_t *dv, vm_gexec_t *x, int k, const void *src) {
  vm_device_t *sub = on(M(dv), x->root);
  return sub->ops->gexec_set_input(sub, x->x, k, src);
}

static void m_destroy(vm_device_t *dv) {
  multi_device_t *d = M(dv);
  while (d->sets) {
    plan_set_t *ps = d->sets;
    d->sets = ps->next;
    set_free(d, ps);
  }
  for (int k = 0; k < dv->ndevices; k++)
    if (d->sub[k]) d->sub[k]->ops->destroy(d->sub[k]);
  pthread_mutex_destroy(&d->mu);
  rill__free(d->a, d);
}

static void *m_native_stream(vm_device_t *dv, int s, int *out_device) {
  vm_device_t *sub = M(dv)->sub[DEV_OF(s)];
  int unused;
  *out_device = DEV_OF(s);
  return sub->ops->native_stream ? sub->ops->native_stream(sub, LOCAL(s), &unused) : NULL;
}
static rill_status_t m_native_device(vm_device_t *dv, int k, int *out_ordinal, const char *source, const char *name, void **out_fn) {
  if (k < 0 || k >= dv->ndevices) return rill__status(RILL_INVALID_ARGUMENT, "no device %d (of %d)", k, dv->ndevices);
  vm_device_t *sub = on(M(dv), k);
  if (!sub->ops->native_device) return rill__status(RILL_UNAVAILABLE, "device %d has no native device", k);
  return sub->ops->native_device(sub, 0, out_ordinal, source, name, out_fn);
}

static const vm_device_ops_t MULTI_OPS = {
    .name = "multi",
    .destroy = m_destroy,
    .stream_acquire = m_acquire,
    .stream_acquire_on = m_acquire_on,
    .copy_peer = m_peer,
    .stream_release = m_release,
    .alloc = m_alloc,
    .free = m_free,
    .copy_h2d = m_h2d,
    .copy_d2h = m_d2h,
    .copy_d2d = m_d2d,
    .mapped_alloc = m_mapped_alloc,
    .mapped_free = m_mapped_free,
    .launch = m_launch,
    .event_create = m_event_create,
    .event_destroy = m_event_destroy,
    .event_record = m_record,
    .stream_wait = m_wait,
    .host_callback = m_callback,
    .host_callback_last = m_callback_last,
    .stream_sync = m_sync,
    .synchronize = m_synchronize,
    .prepare = m_prepare,
    .unprepare = m_unprepare,
    .candidates = m_candidates,
    .mark = m_mark,
    .mark_us = m_mark_us,
    .mark_free = m_mark_free,
    .kernel_stats = m_kernel_stats,
    .memory = m_memory,
    .capture_begin = m_capture_begin,
    .capture_end = m_capture_end,
    .graph_nodes = m_graph_nodes,
    .graph_destroy = m_graph_destroy,
    .graph_instantiate = m_graph_instantiate,
    .graph_launch = m_graph_launch,
    .graph_update = m_graph_update,
    .gexec_destroy = m_gexec_destroy,
    .capture_input = m_capture_input,
    .gexec_set_input = m_gexec_set_input,
    .native_stream = m_native_stream,
    .native_device = m_native_device,
};

/* Takes the devices over (destroyed with it, or here on failure). */
static rill_status_t multi_create(const rill_allocator_t *a, vm_device_t **subs, int n, peer_fn peer, vm_release_fn release,
                                  vm_device_t **out) {
  multi_device_t *d = n >= 2 && n <= ISA_MAX_DEVICES ? rill__calloc(a, 1, sizeof *d) : NULL;
  if (!d) {
    for (int k = 0; k < n; k++)
      if (subs[k]) subs[k]->ops->destroy(subs[k]);
    return n >= 2 && n <= ISA_MAX_DEVICES ? rill__oom() : rill__status(RILL_INVALID_ARGUMENT, "%d devices (2..%d)", n, ISA_MAX_DEVICES);
  }
  d->a = a;
  d->base.ops = &MULTI_OPS;
  d->base.release = release;
  d->base.keeps_operands = subs[0]->keeps_operands;
  d->base.ndevices = n;
  d->peer = peer;
  pthread_mutex_init(&d->mu, NULL);
  for (int k = 0; k < n; k++) d->sub[k] = subs[k];
  *out = &d->base;
  return NULL;
}

rill_status_t vm_device_cuda_create_n(const rill_allocator_t *a, const int *ordinals, int n, vm_release_fn release, vm_device_t **out) {
  vm_device_t *subs[ISA_MAX_DEVICES] = {NULL};
  if (n < 2 || n > ISA_MAX_DEVICES) return rill__status(RILL_INVALID_ARGUMENT, "%d devices (2..%d)", n, ISA_MAX_DEVICES);
  rill_status_t st = NULL;
  for (int k = 0; k < n && !st; k++) st = vm_device_cuda_create(a, ordinals[k], release, &subs[k]);
  if (st) {
    for (int k = 0; k < n; k++)
      if (subs[k]) subs[k]->ops->destroy(subs[k]);
    return st;
  }
  /* Peer access both ways between every pair that allows it; copies
   * between the others are staged. */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) vm_cuda_enable_peer(subs[i], subs[j]);
  rill_status_t st2 = multi_create(a, subs, n, vm_cuda_copy_peer, release, out);
  if (!st2) M(*out)->current = vm_cuda_make_current;
  return st2;
}
