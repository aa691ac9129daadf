/* onnx_read.c: ONNX tensors (inline typed fields, raw bytes, external
 * data files) into host buffers, and the safetensors file of the weights. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "onnx_int.h"

/* ONNX TensorProto.DataType to the language's dtypes. */
bool onnx_dtype(int32_t e, rill_dtype_t *out) {
  switch (e) {
    case 1: *out = RILL_F32; return true;
    case 2: *out = RILL_U8; return true;
    case 3: *out = RILL_I8; return true;
    case 4: *out = RILL_U16; return true;
    case 5: *out = RILL_I16; return true;
    case 6: *out = RILL_I32; return true;
    case 7: *out = RILL_I64; return true;
    case 9: *out = RILL_BOOL; return true;
    case 10: *out = RILL_F16; return true;
    case 11: *out = RILL_F64; return true;
    case 12: *out = RILL_U32; return true;
    case 13: *out = RILL_U64; return true;
    case 16: *out = RILL_BF16; return true;
    default: return false;
  }
}

const char *onnx_dtype_name(int32_t e) {
  static const char *const names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING",
                                      "BOOL", "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16",
                                      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4", "INT4", "FLOAT4E2M1"};
  return e >= 0 && e < (int32_t)(sizeof names / sizeof names[0]) ? names[e] : "an unknown data type";
}

static const char *tname(const Onnx__TensorProto *tp) { return tp->name && *tp->name ? tp->name : "(unnamed)"; }

/* External data: location (relative to the model's folder, no escaping it),
 * offset and length keys. */
static rill_status_t read_external(const Onnx__TensorProto *tp, const char *base_dir, size_t want, void *dst) {
  const char *loc = NULL;
  long long off = 0, len = -1;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[i];
    if (!e->key || !e->value) continue;
    char *end;
    if (!strcmp(e->key, "location")) loc = e->value;
    else if (!strcmp(e->key, "offset")) { off = strtoll(e->value, &end, 10); if (*end || off < 0) off = -1; }
    else if (!strcmp(e->key, "length")) { len = strtoll(e->value, &end, 10); if (*end || len < 0) len = -2; }
  }
  if (!loc || !*loc) return rill_status_new(RILL_MALFORMED, "tensor '%s': external data without a location", tname(tp));
  if (off < 0 || len == -2) return rill_status_new(RILL_MALFORMED, "tensor '%s': bad external data offset or length", tname(tp));
  if (loc[0] == '/' || strstr(loc, ".."))
    return rill_status_new(RILL_MALFORMED, "tensor '%s': external data location '%s' must be a path inside the model's folder", tname(tp), loc);
  if (!base_dir) return rill_status_new(RILL_MALFORMED, "tensor '%s': external data '%s' but no folder to find it in", tname(tp), loc);
  if (len >= 0 && (size_t)len != want)
    return rill_status_new(RILL_MALFORMED, "tensor '%s': external data length %lld, expected %zu bytes for its shape", tname(tp), len, want);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", base_dir, loc);
  FILE *f = fopen(path, "rb");
  if (!f) return rill_status_new(RILL_IO_ERROR, "tensor '%s': cannot open external data %s: %s", tname(tp), path, strerror(errno));
  bool ok = fseeko(f, (off_t)off, SEEK_SET) == 0 && fread(dst, 1, want, f) == want;
  fclose(f);
  if (!ok) return rill_status_new(RILL_MALFORMED, "tensor '%s': external data %s ends before offset %lld + %zu bytes", tname(tp), path, off, want);
  return NULL;
}

rill_status_t onnx_tensor_read(const Onnx__TensorProto *tp, const char *base_dir, const onnx_raw_t *raw, rill_type_t *t, void **out_data,
                               bool *out_borrowed) {
  *out_data = NULL;
  if (out_borrowed) *out_borrowed = false;
  if (!tp->has_data_type || !onnx_dtype(tp->data_type, &t->dtype))
    return rill_status_new(RILL_UNIMPLEMENTED, "tensor '%s': data type %s is not supported", tname(tp),
                           onnx_dtype_name(tp->has_data_type ? tp->data_type : 0));
  if (tp->segment) return rill_status_new(RILL_UNIMPLEMENTED, "tensor '%s': segmented tensors are not supported", tname(tp));
  if (tp->n_dims > RILL_MAX_RANK) return rill_status_new(RILL_UNIMPLEMENTED, "tensor '%s': rank %zu, at most %d supported", tname(tp), tp->n_dims, RILL_MAX_RANK);
  t->rank = (int)tp->n_dims;
  size_t numel = 1, es = rill_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++) {
    if (tp->dims[i] < 0) return rill_status_new(RILL_MALFORMED, "tensor '%s': negative dimension %lld", tname(tp), (long long)tp->dims[i]);
    t->dims[i] = tp->dims[i];
    if (__builtin_mul_overflow(numel, (size_t)tp->dims[i], &numel) || numel * es > (size_t)ONNX_MAX_BYTES)
      return rill_status_new(RILL_MALFORMED, "tensor '%s': dimensions too large", tname(tp));
  }
  size_t nbytes = numel * es;
  bool external = tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  if (raw && raw->set && !external) {
    /* raw_data left in the model's bytes: used where it lies (a bool's bytes
     * must be 0 or 1 there, else it is copied below) */
    if (raw->len != nbytes)
      return rill_status_new(RILL_MALFORMED, "tensor '%s': %zu bytes of data, expected %zu for its shape", tname(tp), raw->len, nbytes);
    bool ok = true;
    if (t->dtype == RILL_BOOL)
      for (size_t i = 0; i < nbytes && ok; i++) ok = raw->data[i] <= 1;
    if (ok && out_borrowed) {
      *out_data = (void *)raw->data;
      *out_borrowed = true;
      return NULL;
    }
  }
  bool raw_left = raw && raw->set && !external;
  /* Typed fields: float_data (f32), double_data (f64), int64_data (i64),
   * uint64_data (u32, u64), int32_data (i32, and the narrow types, f16/bf16
   * as their bits). The
   * data's length is checked against the shape before anything is allocated. */
  size_t have;
  switch (t->dtype) {
    case RILL_F32: have = tp->n_float_data; break;
    case RILL_F64: have = tp->n_double_data; break;
    case RILL_I64: have = tp->n_int64_data; break;
    case RILL_U32: case RILL_U64: have = tp->n_uint64_data; break;
    default: have = tp->n_int32_data; break;
  }
  if (!external && !raw_left && tp->has_raw_data && tp->raw_data.len != nbytes)
    return rill_status_new(RILL_MALFORMED, "tensor '%s': %zu bytes of data, expected %zu for its shape", tname(tp), tp->raw_data.len, nbytes);
  if (!external && !raw_left && !tp->has_raw_data && have != numel)
    return rill_status_new(RILL_MALFORMED, "tensor '%s': %zu values, expected %zu for its shape", tname(tp), have, numel);
  uint8_t *d = malloc(nbytes ? nbytes : 1);
  if (!d) return rill_status_new(RILL_OUT_OF_MEMORY, "tensor '%s': out of memory for %zu bytes", tname(tp), nbytes);
  rill_status_t st = NULL;
  if (external) {
    st = read_external(tp, base_dir, nbytes, d);
  } else if (raw_left) {
    if (nbytes) memcpy(d, raw->data, nbytes);
  } else if (tp->has_raw_data) {
    if (nbytes) memcpy(d, tp->raw_data.data, nbytes);
  } else {
    {
      for (size_t i = 0; i < numel; i++) {
        switch (t->dtype) {
          case RILL_F32: memcpy(d + 4 * i, &tp->float_data[i], 4); break;
          case RILL_F64: memcpy(d + 8 * i, &tp->double_data[i], 8); break;
          case RILL_I64: memcpy(d + 8 * i, &tp->int64_data[i], 8); break;
          case RILL_I32: memcpy(d + 4 * i, &tp->int32_data[i], 4); break;
          case RILL_F16: case RILL_BF16: {
            uint16_t h = (uint16_t)tp->int32_data[i];
            memcpy(d + 2 * i, &h, 2);
            break;
          }
          case RILL_BOOL: d[i] = tp->int32_data[i] != 0; break;
          case RILL_U32: case RILL_U64: rill_element_set_int(t->dtype, d, i, (int64_t)tp->uint64_data[i]); break;
          case RILL_I16: case RILL_U16: rill_element_set_int(t->dtype, d, i, tp->int32_data[i]); break;
          default: d[i] = (uint8_t)tp->int32_data[i]; break;
        }
      }
    }
  }
  if (!st && t->dtype == RILL_BOOL)
    for (size_t i = 0; i < nbytes; i++) d[i] = d[i] != 0;
  if (st) free(d);
  else *out_data = d;
  return st;
}

/* ---- the model's bytes without its weights' raw data ----
 * protobuf-c copies every bytes field it parses; for a model of hundreds of
 * megabytes that copy (and the fresh memory it touches) is most of an
 * import. The walk below copies the message around the main graph's large
 * raw_data fields, re-encoding the lengths of the graph and its
 * initializers, and notes where each left-out field lies. */
typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
  bool oom;
} wbuf_t;
static void wb_put(wbuf_t *b, const void *d, size_t n) {
  if (b->oom) return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, d, n);
  b->len += n;
}
static void wb_varint(wbuf_t *b, uint64_t v) {
  uint8_t t[10];
  int n = 0;
  do {
    t[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  wb_put(b, t, (size_t)n);
}
static const uint8_t *rd_varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int s = 0; s < 64 && p < end; s += 7) {
    uint8_t c = *p++;
    *v |= (uint64_t)(c & 0x7f) << s;
    if (!(c & 0x80)) return p;
  }
  return NULL;
}

typedef struct strip {
  const uint8_t *base;
  size_t min_len;
  onnx_raw_t *raw;
  size_t nraw, cap;
  bool bad;
} strip_t;

/* level 0: ModelProto (graph = 7), 1: GraphProto (initializer = 5), 2: TensorProto (raw_data = 9) */
static void strip_msg(strip_t *s, int level, const uint8_t *p, const uint8_t *end, wbuf_t *out) {
  while (p < end && !s->bad) {
    const uint8_t *field = p;
    uint64_t key, len = 0;
    if (!(p = rd_varint(p, end, &key))) break;
    uint64_t num = key >> 3, wt = key & 7;
    switch (wt) {
      case 0: {
        uint64_t v;
        p = rd_varint(p, end, &v);
        break;
      }
      case 1: p = (size_t)(end - p) >= 8 ? p + 8 : NULL; break;
      case 5: p = (size_t)(end - p) >= 4 ? p + 4 : NULL; break;
      case 2:
        if ((p = rd_varint(p, end, &len)) && len > (uint64_t)(end - p)) p = NULL;
        break;
      default: p = NULL; break; /* groups: not in onnx.proto */
    }
    if (!p) break;
    const uint8_t *body = p;
    if (wt == 2) p += len;
    bool sub = wt == 2 && ((level == 0 && num == 7) || (level == 1 && num == 5));
    if (sub) {
      if (level == 1) { /* a new initializer */
        if (s->nraw == s->cap) {
          size_t cap = s->cap ? 2 * s->cap : 64;
          onnx_raw_t *r = realloc(s->raw, cap * sizeof *r);
          if (!r) {
            s->bad = true;
            break;
          }
          s->raw = r;
          s->cap = cap;
        }
        s->raw[s->nraw++] = (onnx_raw_t){0};
      }
      wbuf_t inner = {0};
      strip_msg(s, level + 1, body, body + len, &inner);
      if (inner.oom) s->bad = true;
      wb_varint(out, key);
      wb_varint(out, inner.len);
      wb_put(out, inner.p, inner.len);
      free(inner.p);
    } else if (level == 2 && num == 9 && wt == 2) {
      onnx_raw_t *r = &s->raw[s->nraw - 1];
      if (len >= s->min_len) {
        *r = (onnx_raw_t){.data = body, .len = (size_t)len, .set = true};
      } else { /* a later raw_data field replaces an earlier one */
        r->set = false;
        wb_put(out, field, (size_t)(p - field));
      }
    } else {
      wb_put(out, field, (size_t)(p - field));
    }
  }
  if (p != end) s->bad = true;
}

bool onnx_strip(const uint8_t *data, size_t size, size_t min_len, uint8_t **out, size_t *out_len, onnx_raw_t **raw, size_t *nraw) {
  *out = NULL;
  *raw = NULL;
  *out_len = *nraw = 0;
  strip_t s = {.base = data, .min_len = min_len};
  wbuf_t b = {0};
  strip_msg(&s, 0, data, data + size, &b);
  size_t left = 0;
  for (size_t i = 0; i < s.nraw; i++) left += s.raw[i].set;
  if (s.bad || b.oom || !left) {
    free(b.p);
    free(s.raw);
    return false;
  }
  *out = b.p;
  *out_len = b.len;
  *raw = s.raw;
  *nraw = s.nraw;
  return true;
}

/* ---- safetensors ---- */
static rill_status_t write_safetensors(ival_t *const *w, int n, struct onnx_parts **out);
static const char *st_dtype(rill_dtype_t d) {
  static const char *const n[RILL_DTYPE_COUNT] = {"F16", "BF16", "F32", "F64", "I8", "U8", "I32", "I64", "BOOL", "I16", "U16", "U32", "U64"};
  return n[d];
}

/* The tensors go in order of falling element size, so that, after a header
 * padded to 8 bytes, every tensor's data is aligned to its element (the
 * format allows no gaps to align them otherwise). */
rill_status_t onnx_safetensors_parts(ival_t *const *w_in, int n, struct onnx_parts **out) {
  *out = NULL;
  ival_t **w = malloc(sizeof *w * (size_t)(n ? n : 1));
  if (!w) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory writing the weights");
  int k = 0;
  for (size_t es = 8; es >= 1; es /= 2)
    for (int i = 0; i < n; i++)
      if (rill_dtype_size(w_in[i]->t.dtype) == es) w[k++] = w_in[i];
  rill_status_t st = k == n ? NULL : rill_status_new(RILL_INTERNAL, "a weight of an element size not 1, 2, 4 or 8");
  if (!st) st = write_safetensors(w, n, out);
  free(w);
  return st;
}

rill_status_t onnx_parts_join(const struct onnx_parts *p, uint8_t **out, size_t *out_len) {
  size_t total = p->head_len;
  for (int i = 0; i < p->n; i++) total += p->len[i];
  uint8_t *b = malloc(total ? total : 1);
  if (!b) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory for %zu bytes of weights", total);
  memcpy(b, p->head, p->head_len);
  size_t pos = p->head_len;
  for (int i = 0; i < p->n; i++) {
    if (p->len[i]) memcpy(b + pos, p->ptr[i], p->len[i]);
    pos += p->len[i];
  }
  *out = b;
  *out_len = total;
  return NULL;
}

void onnx_parts_free(struct onnx_parts *p) {
  if (!p) return;
  for (int i = 0; i < p->nowned; i++) free(p->owned[i]);
  free(p->owned);
  free(p->ptr);
  free(p->len);
  free(p->head);
  if (p->map) munmap(p->map, p->map_len);
  free(p);
}

rill_status_t onnx_safetensors(ival_t *const *w, int n, uint8_t **out, size_t *out_len) {
  struct onnx_parts *p;
  rill_status_t st = onnx_safetensors_parts(w, n, &p);
  if (st) return st;
  st = onnx_parts_join(p, out, out_len);
  onnx_parts_free(p);
  return st;
}

static rill_status_t write_safetensors(ival_t *const *w, int n, struct onnx_parts **out) {
  sbuf_t h = {0};
  size_t off = 0;
  sb_printf(&h, "{");
  for (int i = 0; i < n; i++) {
    size_t nb = imp_numel(&w[i]->t) * rill_dtype_size(w[i]->t.dtype);
    sb_printf(&h, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", w[i]->name, st_dtype(w[i]->t.dtype));
    for (int k = 0; k < w[i]->t.rank; k++) sb_printf(&h, "%s%lld", k ? "," : "", (long long)w[i]->t.dims[k]);
    sb_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + nb);
    off += nb;
  }
  sb_printf(&h, "}");
  while (!h.oom && h.len % 8) sb_printf(&h, " ");
  if (h.oom) {
    free(h.p);
    return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory writing the weights");
  }
  struct onnx_parts *p = calloc(1, sizeof *p);
  uint8_t *b = malloc(8 + h.len);
  if (p) {
    p->ptr = malloc(sizeof *p->ptr * (size_t)(n ? n : 1));
    p->len = malloc(sizeof *p->len * (size_t)(n ? n : 1));
  }
  if (!p || !b || !p->ptr || !p->len) {
    free(h.p);
    free(b);
    onnx_parts_free(p);
    return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory writing the weights");
  }
  uint64_t hl = h.len;
  for (int k = 0; k < 8; k++) b[k] = (uint8_t)(hl >> (8 * k));
  memcpy(b + 8, h.p, h.len);
  free(h.p);
  p->head = b;
  p->head_len = 8 + h.len;
  p->n = n;
  for (int i = 0; i < n; i++) {
    p->ptr[i] = w[i]->data;
    p->len[i] = imp_numel(&w[i]->t) * rill_dtype_size(w[i]->t.dtype);
  }
  *out = p;
  return NULL;
}
