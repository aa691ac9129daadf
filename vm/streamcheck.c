/* streamcheck.c: the VM's --check-streams mode.
 *
 * As a run issues its instructions, every read and write of a buffer is
 * recorded with the stream it was issued on and that stream's position, and
 * every stream keeps a vector clock: what it is ordered after, through
 * events waited on and host waits. An access that conflicts with an earlier
 * one (at least one of them a write, on bytes of the same storage that
 * overlap: a storage holds several tensors, at their offsets, where the
 * operands of an in-place concat are its result's parts) must be ordered
 * after it: on the same stream, or through the clocks. The first pair that
 * is not fails the run, naming both instructions. Per run of bytes accessed
 * only the last write and, per stream, the last read since it are kept: an
 * earlier access on a stream is ordered before that stream's later one, so
 * checking against the latest covers it. A write ends the runs inside its
 * own: a later access that overlaps one of them overlaps the write, which
 * is ordered after every access to it (clocks are transitive).
 *
 * This works on the order of issue, so it gives the same answer on every
 * device, and finds missing events whether or not a particular run happens
 * to race.
 */
#include <stdio.h>

#include "vm.h"

#define SC_STREAMS 72 /* a run's entry stream and up to 64 more, with room */

typedef struct sc_site {
  const char *func, *op;
  uint32_t pc;
  uint32_t seq;   /* 0: none */
  int shown;      /* the stream's number in the program */
} sc_site_t;

/* Accesses to the bytes [lo, hi) of a storage. */
typedef struct sc_range {
  struct sc_range *next;
  size_t lo, hi;
  int wstream;
  sc_site_t write;
  sc_site_t reads[SC_STREAMS];
} sc_range_t;

typedef struct sc_buf {
  const void *key;
  sc_range_t *ranges;
} sc_buf_t;

typedef struct sc_event {
  const void *key;
  uint32_t snap[SC_STREAMS];
} sc_event_t;

struct vm_streamcheck {
  const rill_allocator_t *a;
  rill_arena_t arena;
  int dev[SC_STREAMS];  /* local index -> device stream */
  int n;
  uint32_t vc[SC_STREAMS][SC_STREAMS];
  rill_map_t bufs, events;
  RILL_VEC(void *) entries; /* sc_buf_t and sc_event_t, indexed by both maps */
  sc_range_t *spare;        /* ranges no longer used */
};

rill_status_t vm_sc_create(const rill_allocator_t *a, vm_streamcheck_t **out) {
  vm_streamcheck_t *s = rill__calloc(a, 1, sizeof *s);
  if (!s) return rill__oom();
  s->a = a;
  rill__arena_init(&s->arena, a);
  rill__map_init(&s->bufs, a);
  rill__map_init(&s->events, a);
  *out = s;
  return NULL;
}

void vm_sc_free(vm_streamcheck_t *s) {
  if (!s) return;
  rill__map_free(&s->bufs);
  rill__map_free(&s->events);
  RILL_VEC_FREE(s->a, &s->entries);
  rill__arena_free(&s->arena);
  rill__free(s->a, s);
}

static rill_status_t local(vm_streamcheck_t *s, int stream, int *out) {
  for (int i = 0; i < s->n; i++)
    if (s->dev[i] == stream) { *out = i; return NULL; }
  if (s->n == SC_STREAMS) return rill__status(RILL_UNAVAILABLE, "--check-streams follows at most %d streams in a run", SC_STREAMS);
  s->dev[s->n] = stream;
  *out = s->n++;
  return NULL;
}

/* The entry for `key` in `map` (made, zeroed, when new); both kinds start with their key. */
static rill_status_t find(vm_streamcheck_t *s, rill_map_t *map, const void *key, size_t size, void **out) {
  uint32_t i;
  if (rill__map_get(map, &key, sizeof key, &i)) {
    *out = s->entries.items[i];
    return NULL;
  }
  void *e = rill__arena_alloc(&s->arena, size);
  if (!e) return rill__oom();
  *(const void **)e = key;
  i = (uint32_t)s->entries.len;
  RILL_TRY(RILL_VEC_PUSH(s->a, &s->entries, e));
  RILL_TRY(rill__map_put(map, e, sizeof key, i));
  *out = e;
  return NULL;
}

/* Whether `site`, issued on local stream t, is ordered before the next
 * instruction on local stream l. */
static bool ordered(const vm_streamcheck_t *s, int t, const sc_site_t *site, int l) {
  return !site->seq || t == l || s->vc[l][t] >= site->seq;
}

/* The caller prefixes the instruction's place (@f+pc). */
static rill_status_t race(const sc_site_t *now, bool now_writes, const sc_site_t *then, bool then_wrote, const char *what) {
  return rill__status(RILL_RUNTIME_ERROR,
                      "--check-streams: %s on stream %d %s %s, which @%s+%u (%s) on stream %d %s, and no event orders the two",
                      now->op, now->shown, now_writes ? "writes" : "reads", what, then->func, then->pc, then->op, then->shown,
                      then_wrote ? "wrote" : "read");
}

/* Range r of storage b, with no accesses yet. */
static rill_status_t range_new(vm_streamcheck_t *s, sc_buf_t *b, size_t lo, size_t hi, sc_range_t **out) {
  sc_range_t *r = s->spare;
  if (r) s->spare = r->next;
  else if (!(r = rill__arena_alloc(&s->arena, sizeof *r))) return rill__oom();
  memset(r, 0, sizeof *r);
  r->lo = lo;
  r->hi = hi;
  r->next = b->ranges;
  b->ranges = r;
  *out = r;
  return NULL;
}

/* Moves the ranges of b that lie inside [lo, hi) to the spares. */
static void ranges_drop(vm_streamcheck_t *s, sc_buf_t *b, size_t lo, size_t hi) {
  for (sc_range_t **pp = &b->ranges; *pp;) {
    sc_range_t *r = *pp;
    if (r->lo < lo || r->hi > hi) {
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    r->next = s->spare;
    s->spare = r;
  }
}

rill_status_t vm_sc_access(vm_streamcheck_t *s, int stream, int shown, const void *storage, size_t offset, size_t bytes,
                           bool write, const char *what, const char *func, uint32_t pc, const char *op) {
  int l = 0;
  RILL_TRY(local(s, stream, &l));
  if (!bytes) return NULL; /* no bytes to race on */
  sc_buf_t *b;
  RILL_TRY(find(s, &s->bufs, storage, sizeof *b, (void **)&b));
  size_t lo = offset, hi = offset + bytes;
  sc_site_t now = {func, op, pc, s->vc[l][l] + 1, shown};
  sc_range_t *same = NULL;
  for (sc_range_t *r = b->ranges; r; r = r->next) {
    if (r->hi <= lo || hi <= r->lo) continue;
    if (r->lo == lo && r->hi == hi) same = r;
    if (!ordered(s, r->wstream, &r->write, l)) return race(&now, write, &r->write, true, what);
    for (int t = 0; write && t < s->n; t++)
      if (!ordered(s, t, &r->reads[t], l)) return race(&now, true, &r->reads[t], false, what);
  }
  if (write) {
    ranges_drop(s, b, lo, hi);
    RILL_TRY(range_new(s, b, lo, hi, &same));
    same->write = now;
    same->wstream = l;
  } else {
    if (!same) RILL_TRY(range_new(s, b, lo, hi, &same));
    same->reads[l] = now;
  }
  s->vc[l][l]++;
  return NULL;
}

void vm_sc_fresh(vm_streamcheck_t *s, const void *storage) {
  uint32_t i;
  if (!rill__map_get(&s->bufs, &storage, sizeof storage, &i)) return;
  ranges_drop(s, s->entries.items[i], 0, SIZE_MAX);
}

rill_status_t vm_sc_record(vm_streamcheck_t *s, const void *event, int stream) {
  int l = 0;
  RILL_TRY(local(s, stream, &l));
  sc_event_t *e;
  RILL_TRY(find(s, &s->events, event, sizeof *e, (void **)&e));
  memcpy(e->snap, s->vc[l], sizeof e->snap);
  return NULL;
}

rill_status_t vm_sc_wait(vm_streamcheck_t *s, const void *event, int stream) {
  int l = 0;
  RILL_TRY(local(s, stream, &l));
  sc_event_t *e;
  RILL_TRY(find(s, &s->events, event, sizeof *e, (void **)&e));
  for (int t = 0; t < SC_STREAMS; t++)
    if (e->snap[t] > s->vc[l][t]) s->vc[l][t] = e->snap[t];
  return NULL;
}

/* The host waited for everything issued on `stream` so far: every stream's
 * later work is ordered after it. */
rill_status_t vm_sc_host_wait(vm_streamcheck_t *s, int stream) {
  int l = 0;
  RILL_TRY(local(s, stream, &l));
  for (int u = 0; u < s->n; u++)
    for (int t = 0; t < SC_STREAMS; t++)
      if (s->vc[l][t] > s->vc[u][t]) s->vc[u][t] = s->vc[l][t];
  return NULL;
}
