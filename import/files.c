/* files.c: reading the importers' input files whole. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"

rill_status_t import_read_file(const char *path, size_t max, uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  char esc[512];
  rill_escape(path, strlen(path), esc, sizeof esc);
  FILE *f = fopen(path, "rb");
  if (!f) return rill_status_new(errno == ENOENT ? RILL_NOT_FOUND : RILL_IO_ERROR, "%s: cannot open: %s", esc, strerror(errno));
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  rill_status_t st = NULL;
  for (;;) {
    if (len + 1 >= cap) {
      if (cap > max) {
        st = rill_status_new(RILL_MALFORMED, "%s: larger than %zu bytes", esc, max);
        break;
      }
      cap = cap ? cap * 2 : 1 << 16;
      uint8_t *p = realloc(buf, cap);
      if (!p) {
        st = rill_status_new(RILL_OUT_OF_MEMORY, "%s: out of memory reading it", esc);
        break;
      }
      buf = p;
    }
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
  }
  if (!st && ferror(f)) st = rill_status_new(RILL_IO_ERROR, "%s: cannot read", esc);
  fclose(f);
  if (!st && len > max) st = rill_status_new(RILL_MALFORMED, "%s: larger than %zu bytes", esc, max);
  if (st) {
    free(buf);
    return st;
  }
  buf[len] = 0;
  *out = buf;
  *out_len = len;
  return NULL;
}
