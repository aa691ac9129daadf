/* pcache.c: the plan cache's file format and store (pcache.h). */
#include "pcache.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const uint8_t MAGIC[8] = {'R', 'I', 'L', 'L', 'P', 'C', '0', '1'};
enum { VERSION = 1 };

typedef struct pentry {
  char *key;
  uint8_t *val;
  size_t n;
} pentry_t;

struct pcache {
  const rill_allocator_t *a;
  pthread_mutex_t mu;
  char *path, *label;
  RILL_VEC(pentry_t) entries;
  rill_map_t index;          /* key -> entry */
  bool dirty;
  char warning[512];
};

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static char *dup_str(const rill_allocator_t *a, const char *s) { return s ? rill__strndup(a, s, strlen(s)) : NULL; }

rill_status_t pcache_open(const rill_allocator_t *a, const char *path, const char *label, pcache_t **out) {
  pcache_t *c = rill__calloc(a, 1, sizeof *c);
  if (!c) return rill__oom();
  c->a = a;
  pthread_mutex_init(&c->mu, NULL);
  rill__map_init(&c->index, a);
  c->path = dup_str(a, path);
  c->label = dup_str(a, label ? label : "");
  if ((path && !c->path) || !c->label) {
    pcache_close(c);
    return rill__oom();
  }
  uint8_t *b = NULL;
  size_t n = 0;
  rill_status_t st = path ? rill__read_file(a, path, &b, &n) : NULL;
  if (st) {
    /* absent (or unreadable): an empty cache, made on the first flush */
    rill_status_free(st);
    b = NULL;
  }
  if (b) {
    st = pcache_parse(c, b, n);
    rill__free(a, b);
    if (st && rill_status_code(st) == RILL_OUT_OF_MEMORY) {
      rill_status_free(st);
      pcache_close(c);
      return rill__oom();
    }
    if (st) {
      char p[256];
      snprintf(c->warning, sizeof c->warning, "plan cache %s ignored (%s); rebuilding it", rill_escape(path, strlen(path), p, sizeof p),
               rill_status_message(st));
      rill_status_free(st);
      c->dirty = true; /* rewritten whole at the next flush */
    }
  }
  *out = c;
  return NULL;
}

static void entries_free(const rill_allocator_t *a, pentry_t *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    rill__free(a, e[i].key);
    rill__free(a, e[i].val);
  }
}

void pcache_close(pcache_t *c) {
  if (!c) return;
  entries_free(c->a, c->entries.items, c->entries.len);
  RILL_VEC_FREE(c->a, &c->entries);
  rill__map_free(&c->index);
  pthread_mutex_destroy(&c->mu);
  rill__free(c->a, c->path);
  rill__free(c->a, c->label);
  rill__free(c->a, c);
}

static bool key_ok(const char *key, size_t kl) { return kl >= 1 && kl <= PCACHE_MAX_KEY && !memchr(key, 0, kl); }

/* Sets key (kl bytes) to a copy of val; the caller holds mu. */
static rill_status_t put_locked(pcache_t *c, const char *key, size_t kl, const void *val, size_t n) {
  uint8_t *v = rill__alloc(c->a, n ? n : 1);
  if (!v) return rill__oom();
  if (n) memcpy(v, val, n);
  uint32_t at;
  if (rill__map_get(&c->index, key, kl, &at)) {
    rill__free(c->a, c->entries.items[at].val);
    c->entries.items[at].val = v;
    c->entries.items[at].n = n;
    return NULL;
  }
  pentry_t e = {rill__strndup(c->a, key, kl), v, n};
  rill_status_t st = e.key ? RILL_VEC_PUSH(c->a, &c->entries, e) : rill__oom();
  if (!st) st = rill__map_put(&c->index, e.key, kl, (uint32_t)(c->entries.len - 1));
  if (st) {
    if (c->entries.len && c->entries.items[c->entries.len - 1].key == e.key) c->entries.len--;
    rill__free(c->a, e.key);
    rill__free(c->a, v);
  }
  return st;
}

bool pcache_get(pcache_t *c, const char *key, uint8_t **out_val, size_t *out_n) {
  pthread_mutex_lock(&c->mu);
  uint32_t at;
  bool ok = rill__map_get(&c->index, key, strlen(key), &at);
  uint8_t *v = NULL;
  if (ok) {
    const pentry_t *e = &c->entries.items[at];
    if ((v = rill__alloc(c->a, e->n ? e->n : 1))) {
      if (e->n) memcpy(v, e->val, e->n);
      *out_n = e->n;
    }
    ok = v != NULL;
  }
  pthread_mutex_unlock(&c->mu);
  *out_val = v;
  return ok;
}

rill_status_t pcache_put(pcache_t *c, const char *key, const void *val, size_t n) {
  size_t kl = strlen(key);
  if (!key_ok(key, kl) || n > PCACHE_MAX_VALUE)
    return rill__status(RILL_INVALID_ARGUMENT, "plan cache: a key of %zu bytes or a value of %zu is out of bounds", kl, n);
  pthread_mutex_lock(&c->mu);
  rill_status_t st = put_locked(c, key, kl, val, n);
  if (!st) c->dirty = true;
  pthread_mutex_unlock(&c->mu);
  return st;
}

size_t pcache_count(pcache_t *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->entries.len;
  pthread_mutex_unlock(&c->mu);
  return n;
}

const char *pcache_warning(pcache_t *c) { return c->warning; }

/* The entries of a well-formed file, checked whole before any is taken:
 * *out_n entries of b (key and value pointers into b), or why not. */
typedef struct rec {
  const char *key;
  const uint8_t *val;
  uint32_t kl, n;
} rec_t;

static rill_status_t bad(const char *why, uint32_t i) {
  if (i == UINT32_MAX) return rill__status(RILL_MALFORMED, "%s", why);
  return rill__status(RILL_MALFORMED, "entry %u: %s", i, why);
}

static rill_status_t scan(pcache_t *c, const uint8_t *b, size_t n, rec_t **out, uint32_t *out_n) {
  *out = NULL;
  *out_n = 0;
  if (n < 28 || memcmp(b, MAGIC, 8) != 0) return bad(n < 8 || memcmp(b, MAGIC, 8) ? "not a plan cache file (bad magic bytes)" : "truncated", UINT32_MAX);
  if (rd32(b + 8) != VERSION) return bad("another format version", UINT32_MAX);
  if (rill__fnv1a(b, n - 8, RILL_FNV_INIT) != rd64(b + n - 8)) return bad("checksum mismatch (damaged or truncated)", UINT32_MAX);
  uint32_t count = rd32(b + 12), ll = rd32(b + 16);
  size_t end = n - 8, at = 20;
  if (count > PCACHE_MAX_COUNT) return bad("too many entries", UINT32_MAX);
  if (ll > end - at) return bad("label runs past the end", UINT32_MAX);
  if (ll != strlen(c->label) || memcmp(b + at, c->label, ll) != 0) return bad("made for another device or library versions", UINT32_MAX);
  at += ll;
  /* every entry takes at least 9 bytes: a bound on the count before allocating */
  if (count > (end - at) / 9) return bad("more entries than the file holds", UINT32_MAX);
  rec_t *r = rill__calloc(c->a, count ? count : 1, sizeof *r);
  if (!r) return rill__oom();
  rill_map_t seen;
  rill__map_init(&seen, c->a);
  rill_status_t st = NULL;
  for (uint32_t i = 0; !st && i < count; i++) {
    if (end - at < 8) { st = bad("truncated", i); break; }
    uint32_t kl = rd32(b + at), vl = rd32(b + at + 4);
    at += 8;
    if (kl < 1 || kl > PCACHE_MAX_KEY || vl > PCACHE_MAX_VALUE) { st = bad("a key or value length out of bounds", i); break; }
    if ((size_t)kl + vl > end - at) { st = bad("runs past the end", i); break; }
    r[i] = (rec_t){(const char *)b + at, b + at + kl, kl, vl};
    if (!key_ok(r[i].key, kl)) { st = bad("a NUL byte in the key", i); break; }
    uint32_t dup;
    if (rill__map_get(&seen, r[i].key, kl, &dup)) { st = bad("the key of an earlier entry", i); break; }
    st = rill__map_put(&seen, r[i].key, kl, i);
    at += (size_t)kl + vl;
  }
  if (!st && at != end) st = bad("bytes after the last entry", UINT32_MAX);
  rill__map_free(&seen);
  if (st) {
    rill__free(c->a, r);
    return st;
  }
  *out = r;
  *out_n = count;
  return NULL;
}

/* Takes a file's entries: all of them (replacing), or with keep_mine only keys not there. */
static rill_status_t take(pcache_t *c, const uint8_t *b, size_t n, bool keep_mine) {
  rec_t *r;
  uint32_t count;
  RILL_TRY(scan(c, b, n, &r, &count));
  rill_status_t st = NULL;
  pthread_mutex_lock(&c->mu);
  for (uint32_t i = 0; !st && i < count; i++) {
    uint32_t at;
    if (keep_mine && rill__map_get(&c->index, r[i].key, r[i].kl, &at)) continue;
    st = put_locked(c, r[i].key, r[i].kl, r[i].val, r[i].n);
  }
  pthread_mutex_unlock(&c->mu);
  rill__free(c->a, r);
  return st;
}

rill_status_t pcache_parse(pcache_t *c, const uint8_t *b, size_t n) { return take(c, b, n, false); }

static int cmp_entry(const void *x, const void *y) { return strcmp(((const pentry_t *)x)->key, ((const pentry_t *)y)->key); }

static rill_status_t put32(rill_buf_t *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  return rill__buf_append(b, x, 4);
}

rill_status_t pcache_serialize(pcache_t *c, uint8_t **out, size_t *out_n) {
  pthread_mutex_lock(&c->mu);
  size_t count = c->entries.len;
  pentry_t *sorted = rill__alloc(c->a, sizeof(pentry_t) * (count ? count : 1));
  rill_status_t st = sorted ? NULL : rill__oom();
  if (sorted && count) memcpy(sorted, c->entries.items, sizeof(pentry_t) * count);
  rill_buf_t b;
  rill__buf_init(&b, c->a);
  if (!st) {
    qsort(sorted, count, sizeof *sorted, cmp_entry);
    size_t ll = strlen(c->label);
    st = rill__buf_append(&b, MAGIC, 8);
    if (!st) st = put32(&b, VERSION);
    if (!st) st = put32(&b, (uint32_t)count);
    if (!st) st = put32(&b, (uint32_t)ll);
    if (!st) st = rill__buf_append(&b, c->label, ll);
    for (size_t i = 0; !st && i < count; i++) {
      size_t kl = strlen(sorted[i].key);
      st = put32(&b, (uint32_t)kl);
      if (!st) st = put32(&b, (uint32_t)sorted[i].n);
      if (!st) st = rill__buf_append(&b, sorted[i].key, kl);
      if (!st && sorted[i].n) st = rill__buf_append(&b, sorted[i].val, sorted[i].n);
    }
  }
  pthread_mutex_unlock(&c->mu);
  rill__free(c->a, sorted);
  if (!st) {
    uint64_t h = rill__fnv1a(b.data, b.len, RILL_FNV_INIT);
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(h >> (8 * i));
    st = rill__buf_append(&b, x, 8);
  }
  if (st) {
    rill__buf_free(&b);
    return st;
  }
  *out = b.data;
  *out_n = b.len;
  return NULL;
}

rill_status_t pcache_flush(pcache_t *c) {
  pthread_mutex_lock(&c->mu);
  bool dirty = c->dirty;
  pthread_mutex_unlock(&c->mu);
  if (!c->path || !dirty) return NULL;
  /* what other processes wrote since: taken where this one has nothing (a damaged file is replaced) */
  uint8_t *b;
  size_t n;
  rill_status_t st = rill__read_file(c->a, c->path, &b, &n);
  if (!st) {
    st = take(c, b, n, true);
    rill__free(c->a, b);
    if (st && rill_status_code(st) == RILL_OUT_OF_MEMORY) return st;
  }
  rill_status_free(st);
  RILL_TRY(pcache_serialize(c, &b, &n));
  st = rill__write_file_atomic(c->path, b, n);
  rill__free(c->a, b);
  if (!st) {
    pthread_mutex_lock(&c->mu);
    c->dirty = false;
    pthread_mutex_unlock(&c->mu);
  }
  return st;
}
