/* trace.c: what ran where, as Chrome trace JSON (Perfetto opens it).
 *
 * While tracing is on, the interpreter appends an entry per op (host time
 * around its dispatch, and device marks just before and after it on its
 * stream), per event record and per event wait, in the order it issued
 * them. Writing waits for the device, reads the marks, and emits one track
 * per stream with a slice per op (device time), the host's dispatch on
 * track 0, and a flow arrow from the op before each record to the first op
 * after each wait for it. The same entries give the summary: each stream's
 * busy fraction and the critical path of each run.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "vm.h"

enum { T_OP, T_RECORD, T_WAIT };

typedef struct trace_entry {
  int kind;
  uint32_t run;
  int dev, shown;             /* the device's stream, its number in the program */
  const char *func, *op;      /* T_OP */
  uint32_t pc;
  double h0, h1;              /* host microseconds around the dispatch */
  vm_mark_t *m0, *m1;
  const void *event;          /* T_RECORD, T_WAIT */
} trace_entry_t;

struct vm_trace {
  pthread_mutex_t mu;
  uint32_t runs;
  RILL_VEC(trace_entry_t) e;
};

rill_status_t vm_trace_create(const rill_allocator_t *a, vm_trace_t **out) {
  vm_trace_t *t = rill__calloc(a, 1, sizeof *t);
  if (!t) return rill__oom();
  pthread_mutex_init(&t->mu, NULL);
  *out = t;
  return NULL;
}

static void clear(rill_vm_t *vm, vm_trace_t *t) {
  for (size_t i = 0; i < t->e.len; i++) {
    if (t->e.items[i].m0) vm->dev->ops->mark_free(vm->dev, t->e.items[i].m0);
    if (t->e.items[i].m1) vm->dev->ops->mark_free(vm->dev, t->e.items[i].m1);
  }
  t->e.len = 0;
}

void vm_trace_free(rill_vm_t *vm, vm_trace_t *t) {
  if (!t) return;
  clear(vm, t);
  RILL_VEC_FREE(vm->a, &t->e);
  pthread_mutex_destroy(&t->mu);
  rill__free(vm->a, t);
}

uint32_t vm_trace_run(vm_trace_t *t) {
  pthread_mutex_lock(&t->mu);
  uint32_t r = t->runs++;
  pthread_mutex_unlock(&t->mu);
  return r;
}

static rill_status_t append(rill_vm_t *vm, vm_trace_t *t, trace_entry_t e) {
  pthread_mutex_lock(&t->mu);
  rill_status_t st = RILL_VEC_PUSH(vm->a, &t->e, e);
  pthread_mutex_unlock(&t->mu);
  return st;
}

rill_status_t vm_trace_op(rill_vm_t *vm, uint32_t run, int dev, int shown, const char *func, uint32_t pc, const char *op,
                          double h0, double h1, vm_mark_t *m0, vm_mark_t *m1) {
  trace_entry_t e = {T_OP, run, dev, shown, func, op, pc, h0, h1, m0, m1, NULL};
  rill_status_t st = append(vm, vm->trace, e);
  if (st) {
    vm->dev->ops->mark_free(vm->dev, m0);
    vm->dev->ops->mark_free(vm->dev, m1);
  }
  return st;
}

rill_status_t vm_trace_event(rill_vm_t *vm, uint32_t run, bool record, int dev, int shown, const void *event) {
  trace_entry_t e = {record ? T_RECORD : T_WAIT, run, dev, shown, NULL, NULL, 0, 0, 0, NULL, NULL, event};
  return append(vm, vm->trace, e);
}

/* ---- reading the entries back ---- */
typedef struct resolved {
  size_t n;
  double *start, *end;     /* per entry (ops only), device microseconds */
  long *src;               /* per op: the op that ran before a record this op's stream waited for (or -1), latest ending */
  long *flow_from;         /* per op: for each wait bound to it, written as flows: the source op index, chained through next_flow */
  long *next_flow;         /* per flow (indexed by wait entry): the next wait bound to the same op */
  long *wait_src;          /* per wait entry: its source op, or -1 */
  long *prev;              /* per op: the op before it on its stream in the same run, or -1 */
} resolved_t;

static void resolved_free(const rill_allocator_t *a, resolved_t *r) {
  rill__free(a, r->start);
  rill__free(a, r->end);
  rill__free(a, r->src);
  rill__free(a, r->flow_from);
  rill__free(a, r->next_flow);
  rill__free(a, r->wait_src);
  rill__free(a, r->prev);
}

typedef struct last_rec {
  const void *event;
  uint32_t run;
  long op;
} last_rec_t;

/* Reads every mark and binds each wait to the op that preceded the record it
 * waited for and to the first op after it on its own stream. */
static rill_status_t resolve(rill_vm_t *vm, vm_trace_t *t, resolved_t *r) {
  const rill_allocator_t *a = vm->a;
  size_t n = t->e.len ? t->e.len : 1;
  memset(r, 0, sizeof *r);
  r->n = t->e.len;
  r->start = rill__calloc(a, n, sizeof(double));
  r->end = rill__calloc(a, n, sizeof(double));
  r->src = rill__calloc(a, n, sizeof(long));
  r->flow_from = rill__calloc(a, n, sizeof(long));
  r->next_flow = rill__calloc(a, n, sizeof(long));
  r->wait_src = rill__calloc(a, n, sizeof(long));
  r->prev = rill__calloc(a, n, sizeof(long));
  RILL_VEC(last_rec_t) recs = {0};
  RILL_VEC(long) pending = {0}; /* waits not yet bound to an op */
  RILL_VEC(long) last_op = {0}; /* per device stream */
  rill_status_t st = NULL;
  if (!r->start || !r->end || !r->src || !r->flow_from || !r->next_flow || !r->wait_src || !r->prev) { st = rill__oom(); goto done; }
  for (size_t i = 0; i < t->e.len; i++) {
    const trace_entry_t *e = &t->e.items[i];
    r->src[i] = r->flow_from[i] = r->next_flow[i] = r->wait_src[i] = r->prev[i] = -1;
    while (!st && last_op.len <= (size_t)e->dev) st = RILL_VEC_PUSH(a, &last_op, -1);
    if (st) goto done;
    if (e->kind == T_OP) {
      r->start[i] = vm->dev->ops->mark_us(vm->dev, e->m0);
      r->end[i] = vm->dev->ops->mark_us(vm->dev, e->m1);
      if (r->end[i] < r->start[i]) r->end[i] = r->start[i];
      /* Waits issued on this stream since its last op bind here. */
      for (size_t k = 0; k < pending.len;) {
        long w = pending.items[k];
        if (t->e.items[w].dev != e->dev || t->e.items[w].run != e->run) { k++; continue; }
        r->next_flow[w] = r->flow_from[i];
        r->flow_from[i] = w;
        long s = r->wait_src[w];
        if (s >= 0 && (r->src[i] < 0 || r->end[s] > r->end[r->src[i]])) r->src[i] = s;
        pending.items[k] = pending.items[--pending.len];
      }
      long lp = last_op.items[e->dev];
      if (lp >= 0 && t->e.items[lp].run == e->run) r->prev[i] = lp;
      last_op.items[e->dev] = (long)i;
    } else if (e->kind == T_RECORD) {
      size_t k = 0;
      while (k < recs.len && (recs.items[k].event != e->event || recs.items[k].run != e->run)) k++;
      last_rec_t lr = {e->event, e->run, last_op.items[e->dev]};
      if (lr.op >= 0 && t->e.items[lr.op].run != e->run) lr.op = -1;
      if (k < recs.len) recs.items[k] = lr;
      else if ((st = RILL_VEC_PUSH(a, &recs, lr))) goto done;
    } else {
      for (size_t k = 0; k < recs.len; k++)
        if (recs.items[k].event == e->event && recs.items[k].run == e->run) r->wait_src[i] = recs.items[k].op;
      if ((st = RILL_VEC_PUSH(a, &pending, (long)i))) goto done;
    }
  }
done:
  RILL_VEC_FREE(a, &recs);
  RILL_VEC_FREE(a, &pending);
  RILL_VEC_FREE(a, &last_op);
  if (st) resolved_free(a, r);
  return st;
}

/* ---- summary ---- */
static rill_status_t summarise(const rill_allocator_t *a, const vm_trace_t *t, const resolved_t *r, rill_trace_summary_t *s) {
  memset(s, 0, sizeof *s);
  double busy[RILL_TRACE_MAX_STREAMS] = {0};
  int devs[RILL_TRACE_MAX_STREAMS];
  uint32_t runs = 0;
  double span = 0, crit = 0;
  uint64_t crit_ops = 0;
  /* Per run: its first start, and the op that ended last. */
  double *first = rill__calloc(a, t->runs ? t->runs : 1, sizeof(double));
  long *tail = rill__calloc(a, t->runs ? t->runs : 1, sizeof(long));
  if (!first || !tail) {
    rill__free(a, first);
    rill__free(a, tail);
    return rill__oom();
  }
  for (uint32_t run = 0; run < t->runs; run++) {
    first[run] = INFINITY;
    tail[run] = -1;
  }
  for (size_t i = 0; i < t->e.len; i++) {
    const trace_entry_t *e = &t->e.items[i];
    if (e->kind != T_OP) continue;
    s->ops++;
    int k = 0;
    while (k < s->nstreams && devs[k] != e->dev) k++;
    if (k == s->nstreams && s->nstreams < RILL_TRACE_MAX_STREAMS) {
      devs[k] = e->dev;
      s->stream[k] = e->shown;
      s->nstreams++;
    }
    if (k < s->nstreams) busy[k] += r->end[i] - r->start[i];
    if (r->start[i] < first[e->run]) first[e->run] = r->start[i];
    if (tail[e->run] < 0 || r->end[i] > r->end[tail[e->run]]) tail[e->run] = (long)i;
  }
  for (uint32_t run = 0; run < t->runs; run++) {
    if (tail[run] < 0) continue;
    runs++;
    span += r->end[tail[run]] - first[run];
    /* Back from the op that ended last: through whichever ran before it (on
     * its stream, or before a record it waited for) ended later. */
    for (long i = tail[run]; i >= 0;) {
      crit += r->end[i] - r->start[i];
      crit_ops++;
      long prev = r->prev[i], s2 = r->src[i];
      if (s2 >= 0 && (prev < 0 || r->end[s2] > r->end[prev])) prev = s2;
      i = prev;
    }
  }
  s->runs = runs;
  if (runs) {
    s->span_us = span / runs;
    s->critical_us = crit / runs;
    s->critical_ops = (double)crit_ops / runs;
  }
  for (int k = 0; k < s->nstreams; k++) s->busy[k] = span > 0 ? busy[k] / span : 0;
  rill__free(a, first);
  rill__free(a, tail);
  return NULL;
}

rill_status_t vm_trace_summary(rill_vm_t *vm, rill_trace_summary_t *out) {
  vm_trace_t *t = vm->trace;
  RILL_TRY(vm->dev->ops->synchronize(vm->dev));
  pthread_mutex_lock(&t->mu);
  resolved_t r;
  rill_status_t st = resolve(vm, t, &r);
  if (!st) {
    st = summarise(vm->a, t, &r, out);
    resolved_free(vm->a, &r);
  }
  pthread_mutex_unlock(&t->mu);
  return st;
}

/* ---- Chrome trace JSON ---- */
static cJSON *slice(const char *name, const char *cat, double ts, double dur, int tid, const char *at, uint32_t run) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "name", name);
  cJSON_AddStringToObject(o, "cat", cat);
  cJSON_AddStringToObject(o, "ph", "X");
  cJSON_AddNumberToObject(o, "ts", ts);
  cJSON_AddNumberToObject(o, "dur", dur);
  cJSON_AddNumberToObject(o, "pid", 1);
  cJSON_AddNumberToObject(o, "tid", tid);
  cJSON *args = cJSON_AddObjectToObject(o, "args");
  if (args) {
    cJSON_AddStringToObject(args, "at", at);
    cJSON_AddNumberToObject(args, "run", run);
  }
  return o;
}

static cJSON *flow(const char *ph, long id, double ts, int tid) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "name", "event");
  cJSON_AddStringToObject(o, "cat", "event");
  cJSON_AddStringToObject(o, "ph", ph);
  cJSON_AddNumberToObject(o, "id", (double)id);
  cJSON_AddNumberToObject(o, "ts", ts);
  cJSON_AddNumberToObject(o, "pid", 1);
  cJSON_AddNumberToObject(o, "tid", tid);
  if (ph[0] == 'f') cJSON_AddStringToObject(o, "bp", "e");
  return o;
}

static cJSON *thread_name(int tid, const char *name) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "name", "thread_name");
  cJSON_AddStringToObject(o, "ph", "M");
  cJSON_AddNumberToObject(o, "pid", 1);
  cJSON_AddNumberToObject(o, "tid", tid);
  cJSON *args = cJSON_AddObjectToObject(o, "args");
  if (args) cJSON_AddStringToObject(args, "name", name);
  return o;
}

static bool add(cJSON *arr, cJSON *o) { return o && cJSON_AddItemToArray(arr, o); }

static rill_status_t build_json(const vm_trace_t *t, const resolved_t *r, char **out) {
  cJSON *root = cJSON_CreateObject(), *ev = root ? cJSON_AddArrayToObject(root, "traceEvents") : NULL;
  bool ok = ev && cJSON_AddStringToObject(root, "displayTimeUnit", "ns");
  double t0 = INFINITY;
  for (size_t i = 0; i < t->e.len; i++)
    if (t->e.items[i].kind == T_OP) {
      if (r->start[i] < t0) t0 = r->start[i];
      if (t->e.items[i].h0 < t0) t0 = t->e.items[i].h0;
    }
  ok = ok && add(ev, thread_name(0, "host (dispatch)"));
  RILL_VEC(int) named = {0};
  for (size_t i = 0; ok && i < t->e.len; i++) {
    const trace_entry_t *e = &t->e.items[i];
    if (e->kind != T_OP) continue;
    char at[160], nm[48];
    snprintf(at, sizeof at, "@%s+%u", e->func, e->pc);
    bool seen = false;
    for (size_t k = 0; k < named.len; k++) seen |= named.items[k] == e->dev;
    if (!seen) {
      snprintf(nm, sizeof nm, "stream %d (device stream %d)", e->shown, e->dev);
      ok = add(ev, thread_name(1 + e->dev, nm)) && !RILL_VEC_PUSH(rill_allocator_system(), &named, e->dev);
    }
    ok = ok && add(ev, slice(e->op, "op", r->start[i] - t0, r->end[i] - r->start[i], 1 + e->dev, at, e->run));
    ok = ok && add(ev, slice(e->op, "dispatch", e->h0 - t0, e->h1 - e->h0, 0, at, e->run));
    /* Arrows into this op from the ops before the records it waited for. */
    for (long w = r->flow_from[i]; ok && w >= 0; w = r->next_flow[w]) {
      long s = r->wait_src[w];
      if (s < 0) continue;
      double sd = r->end[s] - r->start[s], ts = r->end[s] - t0 - (sd > 0.002 ? 0.001 : sd / 2);
      double dd = r->end[i] - r->start[i], tf = r->start[i] - t0 + (dd > 0.002 ? 0.001 : dd / 2);
      ok = add(ev, flow("s", w, ts, 1 + t->e.items[s].dev)) && add(ev, flow("f", w, tf, 1 + e->dev));
    }
  }
  RILL_VEC_FREE(rill_allocator_system(), &named);
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  if (!text) return rill__oom();
  *out = text;
  return NULL;
}

rill_status_t vm_trace_write(rill_vm_t *vm, const char *path) {
  vm_trace_t *t = vm->trace;
  RILL_TRY(vm->dev->ops->synchronize(vm->dev));
  pthread_mutex_lock(&t->mu);
  resolved_t r;
  rill_status_t st = resolve(vm, t, &r);
  char *text = NULL;
  if (!st) {
    st = build_json(t, &r, &text);
    resolved_free(vm->a, &r);
  }
  if (!st) st = rill__write_file_atomic(path, text, strlen(text));
  cJSON_free(text);
  if (!st) {
    clear(vm, t);
    t->runs = 0;
  }
  pthread_mutex_unlock(&t->mu);
  return st;
}
