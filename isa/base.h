/* base.h: the small shared kit every layer of Rill builds on.
 *
 * Statuses with positions, allocation through the embedder's allocator
 * (with an arena for objects that die together), growable buffers, dtype
 * facts and half-precision conversions. It sits at the bottom of the layer
 * list so that isa, kernels, ops, assembler and vm can all use it.
 */
#ifndef RILL_ISA_BASE_H
#define RILL_ISA_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rill.h"

#define RILL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define RILL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define RILL_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- statuses ---- */
struct rill_status {
  rill_code_t code;
  char *message;
};

rill_status_t rill__status(rill_code_t code, const char *fmt, ...) RILL_PRINTF(2, 3);
rill_status_t rill__status_v(rill_code_t code, const char *fmt, va_list ap) RILL_PRINTF(2, 0);
/* The shared out-of-memory status: needs no allocation, freeing it is a no-op. */
rill_status_t rill__oom(void);
/* Prepends "PREFIX" to a status's message (e.g. a file name); returns it. */
rill_status_t rill__status_prefix(rill_status_t status, const char *fmt, ...) RILL_PRINTF(2, 3);

#define RILL_TRY(expr)                      \
  do {                                      \
    rill_status_t rill__s = (expr);         \
    if (RILL_UNLIKELY(rill__s)) return rill__s; \
  } while (0)

/* ---- allocation ---- */
static inline void *rill__alloc(const rill_allocator_t *a, size_t n) {
  return a->alloc(a->self, n ? n : 1);
}
static inline void *rill__realloc(const rill_allocator_t *a, void *p, size_t n) {
  return a->realloc(a->self, p, n ? n : 1);
}
static inline void rill__free(const rill_allocator_t *a, void *p) {
  if (p) a->free(a->self, p);
}
void *rill__calloc(const rill_allocator_t *a, size_t count, size_t size);
char *rill__strndup(const rill_allocator_t *a, const char *s, size_t n);
/* count * size without overflow; false when it would overflow. */
static inline bool rill__mul_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* An arena: many allocations freed at once. Blocks come from the allocator. */
typedef struct rill_arena_block rill_arena_block_t;
typedef struct rill_arena {
  const rill_allocator_t *allocator;
  rill_arena_block_t *head;
} rill_arena_t;
void rill__arena_init(rill_arena_t *arena, const rill_allocator_t *allocator);
void *rill__arena_alloc(rill_arena_t *arena, size_t size); /* zeroed, 16-aligned */
/* The same, not zeroed: for bytes the caller writes whole at once (a weight
 * transposed), where zeroing first would touch every fresh page twice. */
void *rill__arena_alloc_raw(rill_arena_t *arena, size_t size);
char *rill__arena_strndup(rill_arena_t *arena, const char *s, size_t n);
void *rill__arena_memdup(rill_arena_t *arena, const void *p, size_t n);
void rill__arena_free(rill_arena_t *arena);

/* A growable byte buffer. */
typedef struct rill_buf {
  const rill_allocator_t *allocator;
  uint8_t *data;
  size_t len, cap;
} rill_buf_t;
void rill__buf_init(rill_buf_t *b, const rill_allocator_t *allocator);
rill_status_t rill__buf_reserve(rill_buf_t *b, size_t extra);
rill_status_t rill__buf_append(rill_buf_t *b, const void *p, size_t n);
rill_status_t rill__buf_printf(rill_buf_t *b, const char *fmt, ...) RILL_PRINTF(2, 3);
rill_status_t rill__buf_u32(rill_buf_t *b, uint32_t v);
rill_status_t rill__buf_u64(rill_buf_t *b, uint64_t v);
void rill__buf_free(rill_buf_t *b);

/* A growable array of fixed-size items, for code that builds lists. */
#define RILL_VEC(T) struct { T *items; size_t len, cap; }
rill_status_t rill__vec_grow(const rill_allocator_t *a, void **items, size_t *cap,
                             size_t need, size_t item_size);
#define RILL_VEC_PUSH(a, v, x)                                                               \
  ((v)->len < (v)->cap || !rill__vec_grow((a), (void **)&(v)->items, &(v)->cap, (v)->len + 1, \
                                          sizeof(*(v)->items))                               \
       ? ((v)->items[(v)->len++] = (x), (rill_status_t)NULL)                                 \
       : rill__oom())
#define RILL_VEC_FREE(a, v) (rill__free((a), (v)->items), (v)->items = NULL, (v)->len = (v)->cap = 0)

/* A hash map from byte strings (borrowed, must outlive the map) to u32. */
typedef struct rill_map_slot {
  const char *key;
  uint32_t len, value;
  uint64_t hash;
} rill_map_slot_t;
typedef struct rill_map {
  const rill_allocator_t *allocator;
  rill_map_slot_t *slots;
  size_t cap, count;
} rill_map_t;
void rill__map_init(rill_map_t *m, const rill_allocator_t *allocator);
/* Inserts or replaces. */
rill_status_t rill__map_put(rill_map_t *m, const void *key, size_t len, uint32_t value);
bool rill__map_get(const rill_map_t *m, const void *key, size_t len, uint32_t *out);
void rill__map_free(rill_map_t *m);

/* ---- dtypes ---- */
typedef struct rill_dtype_info {
  const char *name;
  uint8_t size;
  bool is_float, is_int, is_signed;
} rill_dtype_info_t;
extern const rill_dtype_info_t rill__dtypes[RILL_DTYPE_COUNT];

static inline bool rill__is_float(rill_dtype_t d) { return rill__dtypes[d].is_float; }

uint16_t rill__f32_to_f16(float f);
/* n f32 values at src (any alignment) to f16 at dst, each as
 * rill__f32_to_f16 gives it (the same bits, NaNs included), 8 at a time
 * by the F16C instruction where the CPU has it. */
void rill__f32_to_f16_n(const void *src, uint16_t *dst, size_t n);
float rill__f16_to_f32(uint16_t h);
uint16_t rill__f32_to_bf16(float f);
float rill__bf16_to_f32(uint16_t h);
/* f rounded to TF32 (10 stored mantissa bits, to nearest even), as an f32: what
 * TF32 tensor cores read of an f32 operand. */
float rill__f32_to_tf32(float f);

/* Reads element i of a buffer of dtype d as a double / int64 (bool: 0 or 1;
 * u64 as its bits, so integer arithmetic wraps alike in every dtype). */
double rill__load_f(const void *p, rill_dtype_t d, size_t i);
int64_t rill__load_i(const void *p, rill_dtype_t d, size_t i);
/* An integer value as rill__load_i gives it, mapped so that int64 order is
 * the value's order: u64 with its top bit flipped (its own inverse). Every
 * other dtype fits int64 as it is. */
static inline int64_t rill__ord_i(rill_dtype_t d, int64_t v) {
  return d == RILL_U64 ? (int64_t)((uint64_t)v ^ 0x8000000000000000u) : v;
}
/* Stores with the language's conversion rules (float to int truncates toward
 * zero, saturating at the type's range; anything to bool is != 0). */
void rill__store_f(void *p, rill_dtype_t d, size_t i, double v);
void rill__store_i(void *p, rill_dtype_t d, size_t i, int64_t v);

/* ---- types ---- */
bool rill__type_eq(const rill_type_t *a, const rill_type_t *b);
/* numel and bytes, false on overflow (dims are validated non-negative). */
bool rill__type_sizes(const rill_type_t *t, size_t *out_numel, size_t *out_bytes);

/* ---- misc ---- */
uint64_t rill__fnv1a(const void *p, size_t n, uint64_t h);
#define RILL_FNV_INIT 0xcbf29ce484222325ull
/* The checksum of constant data from bytecode 1.12: XXH64 with seed 0 (four
 * lanes of 8-byte words a step; the published algorithm, so any xxHash
 * library checks a module's constants), several GB/s where FNV-1a, a byte
 * a step, does about 1. It catches damage and changed files, not forgery. */
uint64_t rill__sum64(const void *p, size_t n);

/* Reads a whole file; *out must be freed with the allocator. */
rill_status_t rill__read_file(const rill_allocator_t *a, const char *path, uint8_t **out,
                              size_t *out_size);
/* A file's bytes, read only: mapped (mmap, private, populated) where it is
 * a regular file of at least RILL_MAP_FROM bytes, else read whole. A
 * mapping is not a copy: a weights file of hundreds of MB is read where the
 * page cache holds it, never copied into fresh memory (which costs about a
 * second per 440 MB on a virtual machine that faults each page in). The
 * risk of a mapping: if another process truncates the file while it is
 * mapped, touching the pages past the new end raises SIGBUS. The size is
 * checked again after mapping (a truncation before then is an error, not a
 * crash); one during the run is the caller's to avoid, as for SQLite's and
 * LMDB's mappings: replace such files by renaming a new one over them (what
 * rill's own writers do), which leaves the mapped inode whole.
 * rill__file_check says whether the file still has its size. */
typedef struct rill_file {
  const uint8_t *data;
  size_t size;
  void *map;                 /* the mapping, or NULL where read into buf */
  uint8_t *buf;
  const rill_allocator_t *a;
  int fd;                    /* kept open while mapped, for rill__file_check; -1 otherwise */
} rill_file_t;
#define RILL_MAP_FROM ((size_t)1 << 20)
rill_status_t rill__file_open(const rill_allocator_t *a, const char *path, rill_file_t *out);
/* NULL while the file still has the size it was mapped with. */
rill_status_t rill__file_check(const rill_file_t *f, const char *path);
void rill__file_close(rill_file_t *f);
/* Writes a file atomically (temp file in the same folder, then rename). */
rill_status_t rill__write_file_atomic(const char *path, const void *data, size_t size);
/* The same of n pieces, written in order (writev). */
struct iovec;
rill_status_t rill__write_file_atomic_iov(const char *path, const struct iovec *iov, size_t n);
/* The monotonic clock, in microseconds. */
double rill__now_us(void);
/* Start-up timings (rill_timings_record): whether recording is on (one
 * relaxed atomic load), and `ms` added to part `name` ("assembly",
 * "assembly/fold": a part of a part after the slash); nothing when off.
 * Any thread may add. */
bool rill__timings_on(void);
void rill__timing_add(const char *name, double ms);
/* The milliseconds since t0_us (rill__now_us) added to `name`. */
static inline void rill__timing_since(const char *name, double t0_us) {
  if (rill__timings_on()) rill__timing_add(name, (rill__now_us() - t0_us) * 1e-3);
}
/* On: the calling thread's parts are a background start's, added under
 * "background/" (a device's start beside the foreground's work: a part
 * that overlaps the others, rill.h "Start-up timings"). */
void rill__timings_background(bool on);
/* Whether products read an exporter's [in, out] weight as it lies
 * (linear {weight="kn"}: assembler/optimize.c's merge_bias, the ONNX
 * importer's Gemm): yes unless RILL_LINEAR_KN=0, which transposes the
 * weight instead (or leaves the product a matmul), as before that layout's
 * kernels existed. */
bool rill__linear_kn(void);
/* Whether environment variable `name` is "1" (the switches of paths not yet on by default). */
bool rill__env_on(const char *name);
/* Whether environment variable `name` is "0" (the switches that turn a default path off). */
bool rill__env_off(const char *name);
/* Folder part of a path ("." when none), into buf. */
void rill__dirname(const char *path, char *buf, size_t size);
/* Joins dir and a relative path (an absolute path is returned as is). */
rill_status_t rill__path_join(const char *dir, const char *rel, char *buf, size_t size);

/* Shortest decimal text that reads back to the same value, for f64 or f32. */
void rill__format_double(char *buf, size_t size, double v, bool as_f32);

#endif
