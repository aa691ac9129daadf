/* base.c: statuses, allocation helpers, buffers, dtypes and conversions. */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* ---- statuses ---- */
static struct rill_status oom_status = {RILL_OUT_OF_MEMORY, "out of memory"};

rill_status_t rill__oom(void) { return &oom_status; }

rill_status_t rill__status_v(rill_code_t code, const char *fmt, va_list ap) {
  rill_status_t s = malloc(sizeof(*s));
  if (!s) return &oom_status;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  s->code = code;
  s->message = malloc(n > 0 ? (size_t)n + 1 : 1);
  if (!s->message) {
    free(s);
    return &oom_status;
  }
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  return s;
}

rill_status_t rill__status(rill_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rill_status_t s = rill__status_v(code, fmt, ap);
  va_end(ap);
  return s;
}

/* The public name of rill__status, for code above the API. */
rill_status_t rill_status_new(rill_code_t code, const char *fmt, ...) __attribute__((alias("rill__status")));

rill_status_t rill__status_prefix(rill_status_t status, const char *fmt, ...) {
  if (!status || status == &oom_status) return status;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  size_t a = strlen(prefix), b = strlen(status->message);
  char *m = malloc(a + b + 1);
  if (!m) return status;
  memcpy(m, prefix, a);
  memcpy(m + a, status->message, b + 1);
  free(status->message);
  status->message = m;
  return status;
}

rill_code_t rill_status_code(rill_status_t s) { return s ? s->code : RILL_OK; }
const char *rill_status_message(rill_status_t s) { return s ? s->message : "ok"; }
void rill_status_free(rill_status_t s) {
  if (!s || s == &oom_status) return;
  free(s->message);
  free(s);
}

const char *rill_code_name(rill_code_t code) {
  static const char *names[] = {"ok", "invalid argument", "not found", "i/o error",
                                "malformed input", "assembly error", "verification error",
                                "out of memory", "unavailable", "runtime error",
                                "unimplemented", "internal error"};
  return (unsigned)code < RILL_ARRAY_LEN(names) ? names[code] : "unknown";
}

/* ---- allocation ---- */
static void *sys_alloc(void *self, size_t n) { (void)self; return malloc(n); }
static void *sys_realloc(void *self, void *p, size_t n) { (void)self; return realloc(p, n); }
static void sys_free(void *self, void *p) { (void)self; free(p); }
static const rill_allocator_t system_allocator = {NULL, sys_alloc, sys_realloc, sys_free};
const rill_allocator_t *rill_allocator_system(void) { return &system_allocator; }

void *rill__calloc(const rill_allocator_t *a, size_t count, size_t size) {
  size_t n;
  if (!rill__mul_ok(count, size, &n)) return NULL;
  void *p = rill__alloc(a, n);
  if (p) memset(p, 0, n);
  return p;
}

char *rill__strndup(const rill_allocator_t *a, const char *s, size_t n) {
  char *p = rill__alloc(a, n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

struct rill_arena_block {
  rill_arena_block_t *next;
  size_t used, cap;
  _Alignas(16) uint8_t data[];
};

void rill__arena_init(rill_arena_t *arena, const rill_allocator_t *allocator) {
  arena->allocator = allocator;
  arena->head = NULL;
}

void *rill__arena_alloc(rill_arena_t *arena, size_t size) {
  void *p = rill__arena_alloc_raw(arena, size);
  if (p) memset(p, 0, size ? (size + 15) & ~(size_t)15 : 16);
  return p;
}

void *rill__arena_alloc_raw(rill_arena_t *arena, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (size == 0) size = 16;
  rill_arena_block_t *b = arena->head;
  if (!b || b->cap - b->used < size) {
    size_t cap = size > 16384 ? size : 16384;
    if (cap > SIZE_MAX - sizeof(*b)) return NULL;
    b = rill__alloc(arena->allocator, sizeof(*b) + cap);
    if (!b) return NULL;
    b->cap = cap;
    b->used = 0;
    /* A block for one big object goes behind the current one, so the
     * current block keeps serving small requests. */
    if (arena->head && size > 4096) {
      b->next = arena->head->next;
      arena->head->next = b;
    } else {
      b->next = arena->head;
      arena->head = b;
    }
  }
  void *p = b->data + b->used;
  b->used += size;
  return p;
}

char *rill__arena_strndup(rill_arena_t *arena, const char *s, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *p = rill__arena_alloc_raw(arena, n + 1);
  if (p && n) memcpy(p, s, n);
  if (p) p[n] = 0;
  return p;
}

void *rill__arena_memdup(rill_arena_t *arena, const void *src, size_t n) {
  void *p = rill__arena_alloc_raw(arena, n); /* (copied over whole: not zeroed first) */
  if (p && n) memcpy(p, src, n);
  return p;
}

void rill__arena_free(rill_arena_t *arena) {
  rill_arena_block_t *b = arena->head;
  while (b) {
    rill_arena_block_t *next = b->next;
    rill__free(arena->allocator, b);
    b = next;
  }
  arena->head = NULL;
}

/* ---- buffers ---- */
void rill__buf_init(rill_buf_t *b, const rill_allocator_t *allocator) {
  b->allocator = allocator;
  b->data = NULL;
  b->len = b->cap = 0;
}

rill_status_t rill__buf_reserve(rill_buf_t *b, size_t extra) {
  if (extra > SIZE_MAX / 2 - b->len) return rill__oom();
  if (b->len + extra <= b->cap) return NULL;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra) cap *= 2;
  uint8_t *p = rill__realloc(b->allocator, b->data, cap);
  if (!p) return rill__oom();
  b->data = p;
  b->cap = cap;
  return NULL;
}

rill_status_t rill__buf_append(rill_buf_t *b, const void *p, size_t n) {
  RILL_TRY(rill__buf_reserve(b, n + 1));
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0; /* always NUL-terminated for text use */
  return NULL;
}

rill_status_t rill__buf_printf(rill_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) return rill__status(RILL_INTERNAL, "bad format");
  if ((size_t)n < sizeof small) return rill__buf_append(b, small, (size_t)n);
  RILL_TRY(rill__buf_reserve(b, (size_t)n + 1));
  va_start(ap, fmt);
  vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return NULL;
}

rill_status_t rill__buf_u32(rill_buf_t *b, uint32_t v) {
  uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  return rill__buf_append(b, x, 4);
}

rill_status_t rill__buf_u64(rill_buf_t *b, uint64_t v) {
  RILL_TRY(rill__buf_u32(b, (uint32_t)v));
  return rill__buf_u32(b, (uint32_t)(v >> 32));
}

void rill__buf_free(rill_buf_t *b) {
  rill__free(b->allocator, b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

rill_status_t rill__vec_grow(const rill_allocator_t *a, void **items, size_t *cap, size_t need,
                             size_t item_size) {
  if (need <= *cap) return NULL;
  size_t n = *cap ? *cap * 2 : 8, bytes;
  while (n < need) n *= 2;
  if (!rill__mul_ok(n, item_size, &bytes)) return rill__oom();
  void *p = rill__realloc(a, *items, bytes);
  if (!p) return rill__oom();
  *items = p;
  *cap = n;
  return NULL;
}

/* ---- hash map ---- */
void rill__map_init(rill_map_t *m, const rill_allocator_t *allocator) {
  memset(m, 0, sizeof *m);
  m->allocator = allocator;
}

static rill_map_slot_t *map_find(const rill_map_t *m, const void *key, size_t len, uint64_t h) {
  size_t i = (size_t)h & (m->cap - 1);
  for (;;) {
    rill_map_slot_t *s = &m->slots[i];
    if (!s->key || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)) return s;
    i = (i + 1) & (m->cap - 1);
  }
}

rill_status_t rill__map_put(rill_map_t *m, const void *key, size_t len, uint32_t value) {
  if (len > UINT32_MAX) return rill__status(RILL_INVALID_ARGUMENT, "key too long");
  if ((m->count + 1) * 2 > m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    rill_map_slot_t *slots = rill__calloc(m->allocator, cap, sizeof *slots);
    if (!slots) return rill__oom();
    rill_map_t n = {m->allocator, slots, cap, 0};
    for (size_t i = 0; i < m->cap; i++)
      if (m->slots[i].key) *map_find(&n, m->slots[i].key, m->slots[i].len, m->slots[i].hash) = m->slots[i];
    rill__free(m->allocator, m->slots);
    m->slots = slots;
    m->cap = cap;
  }
  uint64_t h = rill__fnv1a(key, len, RILL_FNV_INIT);
  rill_map_slot_t *s = map_find(m, key, len, h);
  if (!s->key) m->count++;
  s->key = key ? key : "";
  s->len = (uint32_t)len;
  s->hash = h;
  s->value = value;
  return NULL;
}

bool rill__map_get(const rill_map_t *m, const void *key, size_t len, uint32_t *out) {
  if (!m->cap) return false;
  rill_map_slot_t *s = map_find(m, key, len, rill__fnv1a(key, len, RILL_FNV_INIT));
  if (!s->key) return false;
  *out = s->value;
  return true;
}

void rill__map_free(rill_map_t *m) {
  rill__free(m->allocator, m->slots);
  m->slots = NULL;
  m->cap = m->count = 0;
}

/* ---- dtypes ---- */
const rill_dtype_info_t rill__dtypes[RILL_DTYPE_COUNT] = {
    [RILL_F16] = {"f16", 2, true, false, true},   [RILL_BF16] = {"bf16", 2, true, false, true},
    [RILL_F32] = {"f32", 4, true, false, true},   [RILL_F64] = {"f64", 8, true, false, true},
    [RILL_I8] = {"i8", 1, false, true, true},     [RILL_U8] = {"u8", 1, false, true, false},
    [RILL_I32] = {"i32", 4, false, true, true},   [RILL_I64] = {"i64", 8, false, true, true},
    [RILL_BOOL] = {"bool", 1, false, false, false},
    [RILL_I16] = {"i16", 2, false, true, true},   [RILL_U16] = {"u16", 2, false, true, false},
    [RILL_U32] = {"u32", 4, false, true, false},  [RILL_U64] = {"u64", 8, false, true, false},
};

const char *rill_dtype_name(rill_dtype_t d) {
  return (unsigned)d < RILL_DTYPE_COUNT ? rill__dtypes[d].name : "?";
}
size_t rill_dtype_size(rill_dtype_t d) {
  return (unsigned)d < RILL_DTYPE_COUNT ? rill__dtypes[d].size : 0;
}
bool rill_dtype_from_name(const char *name, size_t len, rill_dtype_t *out) {
  for (int i = 0; i < RILL_DTYPE_COUNT; i++) {
    if (strlen(rill__dtypes[i].name) == len && memcmp(rill__dtypes[i].name, name, len) == 0) {
      *out = (rill_dtype_t)i;
      return true;
    }
  }
  return false;
}

static const char *const PRECISION_NAMES[RILL_PRECISION_COUNT] = {"exact", "tf32", "f16", "bf16"};

const char *rill_precision_name(rill_precision_t p) {
  return (unsigned)p < RILL_PRECISION_COUNT ? PRECISION_NAMES[p] : NULL;
}

bool rill_precision_from_name(const char *name, rill_precision_t *out) {
  for (int i = 0; name && i < RILL_PRECISION_COUNT; i++)
    if (!strcmp(name, PRECISION_NAMES[i])) {
      *out = (rill_precision_t)i;
      return true;
    }
  return false;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

uint16_t rill__f32_to_f16(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* may carry into inf: correct */
  return (uint16_t)(sign | h);
}

static void f32_to_f16_scalar(const uint8_t *src, uint16_t *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x;
    memcpy(&x, src + 4 * i, 4);
    dst[i] = rill__f32_to_f16(x);
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* vcvtps2ph with round to nearest even: rill__f32_to_f16's bits, a NaN
 * quieted with its payload's top bits kept as it does (test_isa compares
 * the two over 2^26 patterns and every exponent's edges). */
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const uint8_t *src, uint16_t *dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps((const float *)(const void *)(src + 4 * i));
    _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  f32_to_f16_scalar(src + 4 * i, dst + i, n - i);
}
#endif

void rill__f32_to_f16_n(const void *src, uint16_t *dst, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx")) {
    f32_to_f16_f16c(src, dst, n);
    return;
  }
#endif
  f32_to_f16_scalar(src, dst, n);
}

float rill__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return u2f(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (!mant) return u2f(sign);
    float v = (float)mant * (1.0f / 16777216.0f); /* mant * 2^-24 */
    return sign ? -v : v;
  }
  return u2f(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t rill__f32_to_bf16(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

float rill__bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

float rill__f32_to_tf32(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7fffffffu) >= 0x7f800000u) return f; /* inf and NaN as they are */
  x += 0xfffu + ((x >> 13) & 1u);                  /* 13 dropped bits, to nearest even */
  return u2f(x & 0xffffe000u);
}

/* The i-th element of type T at p, wherever p points: constants are read
 * where they lie, in a model file's mapping, at any offset (a memcpy of a
 * fixed size is one load). */
#define UL(T)                                                 \
  __extension__({                                             \
    T ul_;                                                    \
    memcpy(&ul_, (const char *)p + i * sizeof(T), sizeof ul_); \
    ul_;                                                      \
  })

double rill__load_f(const void *p, rill_dtype_t d, size_t i) {
  switch (d) {
    case RILL_F16: return rill__f16_to_f32(UL(uint16_t));
    case RILL_BF16: return rill__bf16_to_f32(UL(uint16_t));
    case RILL_F32: return UL(float);
    case RILL_F64: return UL(double);
    case RILL_I8: return UL(int8_t);
    case RILL_U8: return UL(uint8_t);
    case RILL_I32: return UL(int32_t);
    case RILL_I64: return (double)UL(int64_t);
    case RILL_BOOL: return UL(uint8_t) != 0;
    case RILL_I16: return UL(int16_t);
    case RILL_U16: return UL(uint16_t);
    case RILL_U32: return UL(uint32_t);
    case RILL_U64: return (double)UL(uint64_t);
    default: return 0;
  }
}

int64_t rill__load_i(const void *p, rill_dtype_t d, size_t i) {
  switch (d) {
    case RILL_I8: return UL(int8_t);
    case RILL_U8: return UL(uint8_t);
    case RILL_I32: return UL(int32_t);
    case RILL_I64: return UL(int64_t);
    case RILL_BOOL: return UL(uint8_t) != 0;
    case RILL_I16: return UL(int16_t);
    case RILL_U16: return UL(uint16_t);
    case RILL_U32: return UL(uint32_t);
    case RILL_U64: return (int64_t)UL(uint64_t); /* the bits */
    default: {
      double v = rill__load_f(p, d, i);
      if (isnan(v)) return 0;
      if (v >= 9.2233720368547758e18) return INT64_MAX;
      if (v <= -9.2233720368547758e18) return INT64_MIN;
      return (int64_t)v;
    }
  }
}

#undef UL

static int64_t sat(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

void rill__store_f(void *p, rill_dtype_t d, size_t i, double v) {
  switch (d) {
    case RILL_F16: ((uint16_t *)p)[i] = rill__f32_to_f16((float)v); break;
    case RILL_BF16: ((uint16_t *)p)[i] = rill__f32_to_bf16((float)v); break;
    case RILL_F32: ((float *)p)[i] = (float)v; break;
    case RILL_F64: ((double *)p)[i] = v; break;
    case RILL_I8: ((int8_t *)p)[i] = (int8_t)sat(v, -128, 127); break;
    case RILL_U8: ((uint8_t *)p)[i] = (uint8_t)sat(v, 0, 255); break;
    case RILL_I32: ((int32_t *)p)[i] = (int32_t)sat(v, -2147483648.0, 2147483647.0); break;
    case RILL_I64:
      ((int64_t *)p)[i] = isnan(v) ? 0
                          : v >= 9.2233720368547758e18  ? INT64_MAX
                          : v <= -9.2233720368547758e18 ? INT64_MIN
                                                        : (int64_t)v;
      break;
    case RILL_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case RILL_I16: ((int16_t *)p)[i] = (int16_t)sat(v, -32768, 32767); break;
    case RILL_U16: ((uint16_t *)p)[i] = (uint16_t)sat(v, 0, 65535); break;
    case RILL_U32: ((uint32_t *)p)[i] = (uint32_t)sat(v, 0, 4294967295.0); break;
    case RILL_U64:
      ((uint64_t *)p)[i] = isnan(v) || v <= 0 ? 0 : v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v;
      break;
    default: break;
  }
}

void rill__store_i(void *p, rill_dtype_t d, size_t i, int64_t v) {
  switch (d) {
    /* Integer narrowing wraps, as in PyTorch and C two's complement. */
    case RILL_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)v; break;
    case RILL_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case RILL_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
    case RILL_I64: ((int64_t *)p)[i] = v; break;
    case RILL_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case RILL_I16: ((int16_t *)p)[i] = (int16_t)(uint16_t)v; break;
    case RILL_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case RILL_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case RILL_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: rill__store_f(p, d, i, (double)v); break;
  }
}

/* ---- types ---- */
bool rill__type_eq(const rill_type_t *a, const rill_type_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

bool rill__type_sizes(const rill_type_t *t, size_t *out_numel, size_t *out_bytes) {
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    /* Each dimension is bounded too, so shape arithmetic cannot overflow
     * even where another dimension is 0. */
    if (t->dims[i] < 0 || t->dims[i] > ((int64_t)1 << 48) || !rill__mul_ok(n, (size_t)t->dims[i], &n)) return false;
  }
  size_t bytes;
  if (!rill__mul_ok(n, rill__dtypes[t->dtype].size, &bytes)) return false;
  if (bytes > ((size_t)1 << 48)) return false; /* no tensor is this large */
  if (out_numel) *out_numel = n;
  if (out_bytes) *out_bytes = bytes;
  return true;
}

size_t rill_type_numel(const rill_type_t *t) {
  size_t n = 0;
  return rill__type_sizes(t, &n, NULL) ? n : 0;
}

char *rill_type_format(const rill_type_t *t, char *buf, size_t size) {
  size_t o = (size_t)snprintf(buf, size, "%s[", rill_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && o < size; i++)
    o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)t->dims[i]);
  if (o < size) snprintf(buf + o, size - o, "]");
  return buf;
}

/* ---- text safe to print ---- */
/* The length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_len(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!k || k > n) return 0;
  if (k > 1) { /* the second byte's range rules out overlong forms, surrogates and code points past U+10FFFF */
    uint8_t lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (s[1] < lo || s[1] > hi) return 0;
  }
  for (size_t i = 2; i < k; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return k;
}

/* One character at s (at most n bytes): its bytes, and whether they are escaped. */
static size_t escape_unit(const uint8_t *s, size_t n, bool *escaped) {
  size_t k = utf8_len(s, n);
  /* C0 controls and DEL, and C1 controls (U+0080..U+009F: C2 80..C2 9F) */
  *escaped = !k || (k == 1 && (s[0] < 0x20 || s[0] == 0x7f)) || (k == 2 && s[0] == 0xc2 && s[1] < 0xa0);
  return k ? k : 1;
}

char *rill_escape(const void *s, size_t len, char *buf, size_t size) {
  static const char hex[] = "0123456789abcdef";
  const uint8_t *p = s;
  if (!size) return buf;
  size_t need = 0, o = 0;
  bool esc;
  for (size_t i = 0; i < len;) {
    size_t k = escape_unit(p + i, len - i, &esc);
    need += esc ? 4 * k : k;
    i += k;
  }
  bool cut = need + 1 > size; /* then every character leaves room for "..." */
  for (size_t i = 0; i < len;) {
    size_t k = escape_unit(p + i, len - i, &esc), width = esc ? 4 * k : k;
    if (cut && o + width + 4 > size) {
      if (o + 4 <= size) memcpy(buf + o, "...", 3), o += 3;
      break;
    }
    for (size_t j = 0; j < k; j++) {
      uint8_t c = p[i + j];
      if (esc) {
        buf[o++] = '\\';
        buf[o++] = 'x';
        buf[o++] = hex[c >> 4];
        buf[o++] = hex[c & 15];
      } else {
        buf[o++] = (char)c;
      }
    }
    i += k;
  }
  buf[o] = 0;
  return buf;
}

/* ---- misc ---- */
uint64_t rill__fnv1a(const void *p, size_t n, uint64_t h) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

#define SUM_P1 0x9e3779b185ebca87ull
#define SUM_P2 0xc2b2ae3d27d4eb4full
#define SUM_P3 0x165667b19e3779f9ull
#define SUM_P4 0x85ebca77c2b2ae63ull
#define SUM_P5 0x27d4eb2f165667c5ull
static inline uint64_t sum_rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }
static inline uint64_t sum_round(uint64_t acc, uint64_t w) { return sum_rotl(acc + w * SUM_P2, 31) * SUM_P1; }
static inline uint64_t sum_word(const uint8_t *b) { /* little-endian, any alignment */
  uint64_t w;
  memcpy(&w, b, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  w = __builtin_bswap64(w);
#endif
  return w;
}

uint64_t rill__sum64(const void *p, size_t n) {
  const uint8_t *b = p, *end = b + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = SUM_P1 + SUM_P2, v2 = SUM_P2, v3 = 0, v4 = 0 - SUM_P1;
    for (; end - b >= 32; b += 32) {
      v1 = sum_round(v1, sum_word(b));
      v2 = sum_round(v2, sum_word(b + 8));
      v3 = sum_round(v3, sum_word(b + 16));
      v4 = sum_round(v4, sum_word(b + 24));
    }
    h = sum_rotl(v1, 1) + sum_rotl(v2, 7) + sum_rotl(v3, 12) + sum_rotl(v4, 18);
    uint64_t v[4] = {v1, v2, v3, v4};
    for (int i = 0; i < 4; i++) h = (h ^ sum_round(0, v[i])) * SUM_P1 + SUM_P4;
  } else {
    h = SUM_P5;
  }
  h += (uint64_t)n;
  for (; end - b >= 8; b += 8) h = sum_rotl(h ^ sum_round(0, sum_word(b)), 27) * SUM_P1 + SUM_P4;
  if (end - b >= 4) {
    uint32_t w;
    memcpy(&w, b, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap32(w);
#endif
    h = sum_rotl(h ^ (uint64_t)w * SUM_P1, 23) * SUM_P2 + SUM_P3;
    b += 4;
  }
  for (; b < end; b++) h = sum_rotl(h ^ (*b * SUM_P5), 11) * SUM_P1;
  h ^= h >> 33;
  h *= SUM_P2;
  h ^= h >> 29;
  h *= SUM_P3;
  return h ^ h >> 32;
}

rill_status_t rill__read_file(const rill_allocator_t *a, const char *path, uint8_t **out,
                              size_t *out_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return rill__status(errno == ENOENT ? RILL_NOT_FOUND : RILL_IO_ERROR, "%s: %s", path,
                        strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return rill__status(RILL_IO_ERROR, "%s: not a regular file", path);
  }
  size_t size = (size_t)st.st_size;
  uint8_t *data = rill__alloc(a, size + 1);
  if (!data) {
    close(fd);
    return rill__oom();
  }
  size_t got = 0;
  while (got < size) {
    ssize_t r = read(fd, data + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      int e = errno;
      close(fd);
      rill__free(a, data);
      return rill__status(RILL_IO_ERROR, "%s: read failed: %s", path, r ? strerror(e) : "short read");
    }
    got += (size_t)r;
  }
  close(fd);
  data[size] = 0;
  *out = data;
  *out_size = size;
  return NULL;
}

rill_status_t rill__file_open(const rill_allocator_t *a, const char *path, rill_file_t *out) {
  memset(out, 0, sizeof *out);
  out->a = a;
  out->fd = -1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return rill__status(errno == ENOENT ? RILL_NOT_FOUND : RILL_IO_ERROR, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size >= RILL_MAP_FROM && (uint64_t)sb.st_size <= SIZE_MAX) {
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map != MAP_FAILED) {
      out->map = map;
      out->data = map;
      out->size = size;
      out->fd = fd;
      rill_status_t st = rill__file_check(out, path); /* truncated between fstat and mmap: an error, not SIGBUS later */
      if (st) rill__file_close(out);
      return st;
    }
  }
  close(fd);
  RILL_TRY(rill__read_file(a, path, &out->buf, &out->size));
  out->data = out->buf;
  return NULL;
}

rill_status_t rill__file_check(const rill_file_t *f, const char *path) {
  struct stat sb;
  if (f->fd < 0) return NULL;
  if (fstat(f->fd, &sb) != 0) return rill__status(RILL_IO_ERROR, "%s: %s", path, strerror(errno));
  if ((uint64_t)sb.st_size < f->size)
    return rill__status(RILL_IO_ERROR, "%s: the file shrank from %zu to %llu bytes while being read (another process truncated it)", path, f->size,
                        (unsigned long long)sb.st_size);
  return NULL;
}

void rill__file_close(rill_file_t *f) {
  if (f->map) munmap(f->map, f->size);
  if (f->fd >= 0) close(f->fd);
  rill__free(f->a, f->buf);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

double rill__now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

/* ---- start-up timings ---- */
/* One table for the process: parts in the order first added, each a sum
 * of milliseconds and a count. Off, adding costs one relaxed load. */
enum { TIMINGS_MAX = 96 };
static atomic_bool timings_on;
static pthread_mutex_t timings_mu = PTHREAD_MUTEX_INITIALIZER;
static rill_timing_t timings[TIMINGS_MAX];
static int ntimings;

bool rill__timings_on(void) { return atomic_load_explicit(&timings_on, memory_order_relaxed); }
bool rill_timings_recording(void) { return rill__timings_on(); }
void rill__timing_add(const char *name, double ms) { rill_timing_add(name, ms); }

static _Thread_local bool timings_background;
void rill__timings_background(bool on) { timings_background = on; }

void rill_timing_add(const char *name, double ms) {
  if (!rill__timings_on()) return;
  char full[sizeof timings[0].name];
  if (timings_background) {
    snprintf(full, sizeof full, "background/%s", name);
    name = full;
  }
  pthread_mutex_lock(&timings_mu);
  int i = 0;
  while (i < ntimings && strcmp(timings[i].name, name)) i++;
  if (i == ntimings && ntimings < TIMINGS_MAX) {
    snprintf(timings[i].name, sizeof timings[i].name, "%s", name);
    timings[i].ms = 0;
    timings[i].count = 0;
    ntimings++;
  }
  if (i < ntimings) {
    timings[i].ms += ms;
    timings[i].count++;
  }
  pthread_mutex_unlock(&timings_mu);
}

void rill_timings_record(bool on) { atomic_store(&timings_on, on); }

void rill_timings_reset(void) {
  pthread_mutex_lock(&timings_mu);
  ntimings = 0;
  pthread_mutex_unlock(&timings_mu);
}

int rill_timings(rill_timing_t *out, int max) {
  pthread_mutex_lock(&timings_mu);
  int n = ntimings;
  for (int i = 0; out && i < n && i < max; i++) out[i] = timings[i];
  pthread_mutex_unlock(&timings_mu);
  return n;
}

rill_status_t rill__write_file_atomic(const char *path, const void *data, size_t size) {
  struct iovec v = {(void *)data, size};
  return rill__write_file_atomic_iov(path, &v, 1);
}

rill_status_t rill__write_file_atomic_iov(const char *path, const struct iovec *iov, size_t n) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return rill__status(RILL_INVALID_ARGUMENT, "%s: path too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return rill__status(RILL_IO_ERROR, "%s: cannot write: %s", path, strerror(errno));
  /* piece i from byte `off`; writev takes at most IOV_MAX pieces a call and may write part of them */
  size_t i = 0, off = 0;
  struct iovec batch[64];
  while (i < n) {
    int k = 0;
    for (size_t j = i; j < n && k < 64; j++, k++) {
      batch[k].iov_base = (uint8_t *)iov[j].iov_base + (j == i ? off : 0);
      batch[k].iov_len = iov[j].iov_len - (j == i ? off : 0);
    }
    ssize_t w = writev(fd, batch, k);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 || (w == 0 && batch[0].iov_len)) {
      int e = w < 0 ? errno : EIO;
      close(fd);
      unlink(tmp);
      return rill__status(RILL_IO_ERROR, "%s: write failed: %s", path, strerror(e));
    }
    size_t left = (size_t)w;
    while (i < n && left >= iov[i].iov_len - off) {
      left -= iov[i].iov_len - off;
      i++;
      off = 0;
    }
    off += left;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return rill__status(RILL_IO_ERROR, "%s: cannot write: %s", path, strerror(e));
  }
  return NULL;
}

void rill__dirname(const char *path, char *buf, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(buf, size, ".");
  } else if (slash == path) {
    snprintf(buf, size, "/");
  } else {
    snprintf(buf, size, "%.*s", (int)(slash - path), path);
  }
}

rill_status_t rill__path_join(const char *dir, const char *rel, char *buf, size_t size) {
  int n = rel[0] == '/' || !dir || !dir[0] ? snprintf(buf, size, "%s", rel)
                                            : snprintf(buf, size, "%s/%s", dir, rel);
  if (n < 0 || (size_t)n >= size) return rill__status(RILL_INVALID_ARGUMENT, "path too long: %s", rel);
  return NULL;
}

void rill__format_double(char *buf, size_t size, double v, bool as_f32) {
  if (isnan(v)) { snprintf(buf, size, "nan"); return; }
  if (isinf(v)) { snprintf(buf, size, v < 0 ? "-inf" : "inf"); return; }
  /* The fewest digits that read back: more digits never read back worse (a
   * p-digit decimal is also a (p+1)-digit one), so a binary search finds it. */
  int lo = 1, hi = as_f32 ? 9 : 17;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    snprintf(buf, size, "%.*g", mid, v);
    double back = strtod(buf, NULL);
    if (as_f32 ? (float)back == (float)v : back == v) hi = mid;
    else lo = mid + 1;
  }
  snprintf(buf, size, "%.*g", lo, v);
  /* Keep a float looking like a float when it has no '.', 'e' or "inf". */
  if (!strpbrk(buf, ".eEn")) {
    size_t n = strlen(buf);
    if (n + 2 < size) memcpy(buf + n, ".0", 3);
  }
}

double rill_element_get(rill_dtype_t d, const void *p, size_t i) { return rill__load_f(p, d, i); }
int64_t rill_element_get_int(rill_dtype_t d, const void *p, size_t i) { return rill__load_i(p, d, i); }
void rill_element_set(rill_dtype_t d, void *p, size_t i, double v) { rill__store_f(p, d, i, v); }
void rill_element_set_int(rill_dtype_t d, void *p, size_t i, int64_t v) { rill__store_i(p, d, i, v); }

bool rill__env_on(const char *name) {
  const char *e = getenv(name);
  return e && !strcmp(e, "1");
}

bool rill__env_off(const char *name) {
  const char *e = getenv(name);
  return e && !strcmp(e, "0");
}

bool rill__linear_kn(void) { return !rill__env_off("RILL_LINEAR_KN"); }
