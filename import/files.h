/* files.h: reading the importers' input files whole (models, configs). */
#ifndef RILL_IMPORT_FILES_H
#define RILL_IMPORT_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "rill.h"

/* The whole file into a malloc'd buffer with a NUL after its `*out_len`
 * bytes. A file that cannot be opened is RILL_IO_ERROR (RILL_NOT_FOUND
 * where it is absent) and one larger than `max` bytes RILL_MALFORMED, each
 * naming the path (escaped). */
rill_status_t import_read_file(const char *path, size_t max, uint8_t **out, size_t *out_len);

#endif
