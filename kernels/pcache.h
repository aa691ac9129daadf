/* pcache.h: the plan cache, library choices kept on disk in one file.
 *
 * What a library's heuristics or a timing chose for an op (a cuDNN
 * execution plan, a convolution's algorithm, cuBLASLt's algorithms) is
 * kept under a key that names it in full (device, library versions, op,
 * shape, math mode), so that a warm process asks no heuristics and times
 * nothing. The file sits beside the kernel cache, one per device kind and
 * set of library versions (its label), and is read once when the cache is
 * opened: one read instead of a file per choice.
 *
 * Format (integers little-endian):
 *   magic "RILLPC01", u32 version (1), u32 count, u32 label length, label,
 *   count x (u32 key length (1..PCACHE_MAX_KEY), u32 value length
 *   (0..PCACHE_MAX_VALUE), key (no NUL bytes), value), keys distinct,
 *   then u64 FNV-1a of every byte before it, and nothing after.
 * A file that is not exactly that (damaged, truncated, another label) is
 * ignored as a whole, with a warning (pcache_warning), and rebuilt.
 * Writes are atomic (a new file renamed over the old) and merge what
 * other processes wrote since the file was read. Thread-safe.
 *
 * This file uses no CUDA: the format is tested and fuzzed without a GPU.
 */
#ifndef RILL_KERNELS_PCACHE_H
#define RILL_KERNELS_PCACHE_H

#include "../isa/base.h"

#define PCACHE_MAX_KEY 4096
#define PCACHE_MAX_VALUE ((size_t)1 << 20)
#define PCACHE_MAX_COUNT ((uint32_t)1 << 20)

typedef struct pcache pcache_t;

/* An empty cache, or the contents of `path` (NULL: memory only) when that
 * is a well-formed file with this `label`; a damaged one leaves the cache
 * empty and sets the warning. Fails only for memory. */
rill_status_t pcache_open(const rill_allocator_t *a, const char *path, const char *label, pcache_t **out);
void pcache_close(pcache_t *c);

/* A copy of key's value (allocated with the cache's allocator, at least
 * one byte) and its size; false where there is none. */
bool pcache_get(pcache_t *c, const char *key, uint8_t **out_val, size_t *out_n);
/* Sets key's value (replacing one there); refused (RILL_INVALID_ARGUMENT)
 * for a key or value out of the format's bounds. */
rill_status_t pcache_put(pcache_t *c, const char *key, const void *val, size_t n);
/* Writes the cache to its file if anything was put since it was read,
 * first taking in the entries another process wrote there (its own
 * entries win). Best effort for the caller: a cache that cannot be
 * written is only slower. */
rill_status_t pcache_flush(pcache_t *c);
size_t pcache_count(pcache_t *c);
/* "" or why the file was ignored: "plan cache PATH ignored (REASON); rebuilding it". */
const char *pcache_warning(pcache_t *c);

/* The format as a unit: parses file bytes into c's entries (added to
 * those there), or says why they are not a well-formed file
 * (RILL_MALFORMED) and adds nothing; serialises c's entries (sorted by
 * key, so equal caches give equal bytes). */
rill_status_t pcache_parse(pcache_t *c, const uint8_t *b, size_t n);
rill_status_t pcache_serialize(pcache_t *c, uint8_t **out, size_t *out_n);

#endif
