/* npy.c: reading and writing numpy .npy files (format versions 1 to 3).
 * Read: either byte order and either element order, as numpy writes them
 * ('<f4' or '>f4'; 'fortran_order' True for column-major arrays), converted
 * to Rill's layout: little-endian, row-major. Written: little-endian, C
 * order. bf16, which numpy lacks, is read from and written as 2-byte void
 * ('|V2'), the way ml_dtypes stores it. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "../isa/base.h"

/* descr without its byte-order character: kind and size. */
static const struct { const char *descr; rill_dtype_t d; } DESCRS[] = {
    {"f2", RILL_F16}, {"f4", RILL_F32}, {"f8", RILL_F64}, {"i1", RILL_I8}, {"u1", RILL_U8},
    {"i4", RILL_I32}, {"i8", RILL_I64}, {"b1", RILL_BOOL}, {"V2", RILL_BF16}, {"i2", RILL_I16},
    {"u2", RILL_U16}, {"u4", RILL_U32}, {"u8", RILL_U64},
};

static rill_status_t bad(const char *why) { return rill__status(RILL_MALFORMED, "malformed .npy file: %s", why); }

/* Finds 'key': in the header dict and returns a pointer just past the colon. */
static const char *find_key(const char *h, size_t n, const char *key) {
  size_t k = strlen(key);
  for (size_t i = 0; i + k + 2 <= n; i++) {
    if ((h[i] == '\'' || h[i] == '"') && memcmp(h + i + 1, key, k) == 0 && h[i + 1 + k] == h[i]) {
      const char *p = h + i + k + 2;
      while (p < h + n && isspace((unsigned char)*p)) p++;
      if (p < h + n && *p == ':') return p + 1;
    }
  }
  return NULL;
}

/* Column-major src (first index fastest) into row-major dst: walks src in
 * order, keeping the element's index and its offset in dst. */
static void to_row_major(const rill_type_t *t, const uint8_t *src, uint8_t *dst) {
  size_t es = rill_dtype_size(t->dtype), numel = rill_type_numel(t), stride[RILL_MAX_RANK];
  int64_t idx[RILL_MAX_RANK] = {0};
  size_t s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    stride[i] = s;
    s *= (size_t)t->dims[i];
  }
  size_t off = 0; /* in elements, in dst */
  for (size_t n = 0; n < numel; n++) {
    memcpy(dst + off * es, src + n * es, es);
    for (int i = 0; i < t->rank; i++) {
      off += stride[i];
      if (++idx[i] < t->dims[i]) break;
      off -= stride[i] * (size_t)t->dims[i];
      idx[i] = 0;
    }
  }
}

/* Big-endian elements of `es` bytes to little-endian, in place. */
static void swap_bytes(uint8_t *d, size_t nbytes, size_t es) {
  for (size_t o = 0; o + es <= nbytes; o += es)
    for (size_t i = 0; i < es / 2; i++) {
      uint8_t c = d[o + i];
      d[o + i] = d[o + es - 1 - i];
      d[o + es - 1 - i] = c;
    }
}

rill_status_t rill_npy_parse(const rill_allocator_t *a, const uint8_t *bytes, size_t size, rill_type_t *out_type,
                             void **out_data, size_t *out_size) {
  if (!a) a = rill_allocator_system();
  if (size < 10 || memcmp(bytes, "\x93NUMPY", 6) != 0) return bad("no \\x93NUMPY magic");
  unsigned major = bytes[6];
  size_t hlen, hstart;
  if (major == 1) { hlen = bytes[8] | (size_t)bytes[9] << 8; hstart = 10; }
  else if (major == 2 || major == 3) {
    if (size < 12) return bad("truncated header");
    hlen = bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 | (size_t)bytes[11] << 24;
    hstart = 12;
  } else return bad("unknown format version");
  if (hlen > size - hstart) return bad("header runs past the end of the file");
  const char *h = (const char *)bytes + hstart;
  const char *p = find_key(h, hlen, "descr"), *end = h + hlen;
  if (!p) return bad("header has no 'descr'");
  while (p < end && isspace((unsigned char)*p)) p++;
  if (p >= end || (*p != '\'' && *p != '"')) return bad("'descr' is not a string");
  char q = *p++;
  const char *ds = p;
  while (p < end && *p != q) p++;
  if (p >= end) return bad("unterminated 'descr'");
  size_t dl = (size_t)(p - ds);
  rill_type_t t;
  memset(&t, 0, sizeof t);
  /* '<' little-endian, '>' big-endian, '|' no order (one byte, or void). */
  char order = dl ? ds[0] : 0;
  size_t k = 0;
  if (order == '<' || order == '>' || order == '|')
    for (; k < RILL_ARRAY_LEN(DESCRS); k++)
      if (strlen(DESCRS[k].descr) == dl - 1 && memcmp(DESCRS[k].descr, ds + 1, dl - 1) == 0) break;
  if (k == RILL_ARRAY_LEN(DESCRS) || order == 0 || (order != '<' && order != '>' && order != '|') ||
      (order == '|' && rill_dtype_size(DESCRS[k].d) > 1 && DESCRS[k].d != RILL_BF16))
  {
    char e[80];
    return rill__status(RILL_MALFORMED, "malformed .npy file: dtype '%s' is not one of the language's", rill_escape(ds, dl < 16 ? dl : 16, e, sizeof e));
  }
  t.dtype = DESCRS[k].d;
  /* Void has no byte order: numpy never swaps it. */
  bool swap = order == '>' && t.dtype != RILL_BF16;
  p = find_key(h, hlen, "fortran_order");
  if (!p) return bad("header has no 'fortran_order'");
  while (p < end && isspace((unsigned char)*p)) p++;
  bool fortran = end - p >= 4 && memcmp(p, "True", 4) == 0;
  if (!fortran && (end - p < 5 || memcmp(p, "False", 5) != 0)) return bad("'fortran_order' is not True or False");
  p = find_key(h, hlen, "shape");
  if (!p) return bad("header has no 'shape'");
  while (p < end && isspace((unsigned char)*p)) p++;
  if (p >= end || *p != '(') return bad("'shape' is not a tuple");
  p++;
  for (;;) {
    while (p < end && isspace((unsigned char)*p)) p++;
    if (p < end && *p == ')') break;
    if (p >= end || !isdigit((unsigned char)*p)) return bad("'shape' holds something other than integers");
    if (t.rank == RILL_MAX_RANK) return bad("more than 8 dimensions");
    uint64_t v = 0;
    while (p < end && isdigit((unsigned char)*p)) {
      if (v > (UINT64_MAX - 9) / 10) return bad("dimension too large");
      v = v * 10 + (uint64_t)(*p++ - '0');
    }
    if (p < end && *p == 'L') p++;
    if (v > ((uint64_t)1 << 48)) return bad("dimension too large");
    t.dims[t.rank++] = (int64_t)v;
    while (p < end && isspace((unsigned char)*p)) p++;
    if (p < end && *p == ',') p++;
    else if (p >= end || *p != ')') return bad("malformed 'shape'");
  }
  size_t nbytes;
  if (!rill__type_sizes(&t, NULL, &nbytes)) return bad("data too large");
  size_t have = size - hstart - hlen;
  if (have != nbytes)
    return rill__status(RILL_MALFORMED, "malformed .npy file: %zu data bytes, the header's dtype and shape need %zu", have, nbytes);
  void *data = rill__alloc(a, nbytes);
  if (!data) return rill__oom();
  const uint8_t *src = bytes + hstart + hlen;
  if (fortran && t.rank > 1) to_row_major(&t, src, data);
  else if (nbytes) memcpy(data, src, nbytes);
  if (swap) swap_bytes(data, nbytes, rill_dtype_size(t.dtype));
  *out_type = t;
  *out_data = data;
  *out_size = nbytes;
  return NULL;
}

rill_status_t rill_npy_read(const rill_allocator_t *a, const char *path, rill_type_t *out_type, void **out_data,
                            size_t *out_size) {
  if (!a) a = rill_allocator_system();
  uint8_t *bytes;
  size_t size;
  RILL_TRY(rill__read_file(a, path, &bytes, &size));
  rill_status_t st = rill_npy_parse(a, bytes, size, out_type, out_data, out_size);
  rill__free(a, bytes);
  return st ? rill__status_prefix(st, "%s: ", path) : NULL;
}

rill_status_t rill_npy_write(const char *path, const rill_type_t *t, const void *data) {
  const char *kind = NULL;
  for (size_t k = 0; k < RILL_ARRAY_LEN(DESCRS); k++)
    if (DESCRS[k].d == t->dtype) { kind = DESCRS[k].descr; break; }
  char descr[4];
  snprintf(descr, sizeof descr, "%c%s", rill_dtype_size(t->dtype) > 1 && t->dtype != RILL_BF16 ? '<' : '|', kind);
  char shape[256] = "";
  size_t o = 0;
  for (int i = 0; i < t->rank; i++) o += (size_t)snprintf(shape + o, sizeof shape - o, "%lld,%s", (long long)t->dims[i], i + 1 < t->rank ? " " : "");
  if (t->rank > 1) shape[o - 1] = 0; /* "(2, 3)" but "(3,)" */
  char header[512];
  int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
  size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
  size_t hlen = (size_t)n + pad + 1, nbytes;
  rill__type_sizes(t, NULL, &nbytes);
  uint8_t *buf = malloc(10 + hlen + nbytes);
  if (!buf) return rill__oom();
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (uint8_t)hlen;
  buf[9] = (uint8_t)(hlen >> 8);
  memcpy(buf + 10, header, (size_t)n);
  memset(buf + 10 + n, ' ', pad);
  buf[10 + hlen - 1] = '\n';
  if (nbytes) memcpy(buf + 10 + hlen, data, nbytes);
  rill_status_t st = rill__write_file_atomic(path, buf, 10 + hlen + nbytes);
  free(buf);
  return st;
}
