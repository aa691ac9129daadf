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
} isa_st_tensor_t;

typedef struct isa_st {
  const rill_allocator_t *a;
  const uint8_t *bytes;      /* the whole file */
  size_t size;
  rill_file_t file;          /* isa_st_open's: the file mapped (or read), which bytes points into */
  isa_st_tensor_t *tensors;
  size_t count;
} isa_st_t;

/* Parses a file's bytes (taking ownership of `bytes`, even on failure). */
rill_status_t isa_st_parse(const rill_allocator_t *a, uint8_t *bytes, size_t size, isa_st_t **out);
/* Opens a file mapped (rill__file_open: large files are not copied; read
 * its note on truncation), parsed and checked; the tensors' bytes are
 * st->bytes + offset while st lives. */
rill_status_t isa_st_open(const rill_allocator_t *a, const char *path, isa_st_t **out);
const isa_st_tensor_t *isa_st_find(const isa_st_t *st, const char *name);
void isa_st_free(isa_st_t *st);

#endif
