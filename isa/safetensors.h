/* safetensors.h: a bounds-checked reader of safetensors files.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON mapping each
 * tensor name to {dtype, shape, data_offsets: [begin, end]} (offsets into
 * the bytes after the header), then the data. Every offset, size and shape
 * is checked before use, and the tensors' ranges must cover the data
 * without overlaps or holes; a bad file is RILL_MALFORMED with the reason
 * and the tensors' names.
 */
#ifndef RILL_ISA_SAFETENSORS_H
#define RILL_ISA_SAFETENSORS_H

#include "base.h"

typedef struct isa_st_tensor {
  char *name;
  rill_type_t type;
  uint64_t offset, size;     /* offset from the start of the file */
  const uint8_t *data;       /* its bytes (the file's at offset, or the piece holding them) */
} isa_st_tensor_t;

typedef struct isa_st {
  const rill_allocator_t *a;
  const uint8_t *bytes;      /* the whole file (NULL for isa_st_parse_pieces') */
  size_t size;
  rill_file_t file;          /* isa_st_open's: the file mapped (or read), which bytes points into */
  bool pieces;               /* isa_st_parse_pieces': the bytes borrowed */
  isa_st_tensor_t *tensors;
  size_t count;
} isa_st_t;

/* Parses a file's bytes (taking ownership of `bytes`, even on failure). */
rill_status_t isa_st_parse(const rill_allocator_t *a, uint8_t *bytes, size_t size, isa_st_t **out);
/* A file given as pieces in memory, in order (what the file would hold
 * joined): piece 0 the 8-byte header length and the header, then the data;
 * each tensor's bytes must lie in one piece. The pieces are borrowed (they
 * must outlive st); nothing is copied. */
rill_status_t isa_st_parse_pieces(const rill_allocator_t *a, const void *const *ptr, const size_t *len, size_t n, isa_st_t **out);
/* Opens a file mapped (rill__file_open: large files are not copied; read
 * its note on truncation), parsed and checked; the tensors' bytes are
 * st->bytes + offset while st lives. */
rill_status_t isa_st_open(const rill_allocator_t *a, const char *path, isa_st_t **out);
const isa_st_tensor_t *isa_st_find(const isa_st_t *st, const char *name);
void isa_st_free(isa_st_t *st);

#endif
