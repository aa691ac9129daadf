/* safetensors.c: the safetensors reader (see safetensors.h). */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

static const struct { const char *name; rill_dtype_t dtype; } DTYPES[] = {
    {"F16", RILL_F16}, {"BF16", RILL_BF16}, {"F32", RILL_F32}, {"F64", RILL_F64}, {"I8", RILL_I8},
    {"U8", RILL_U8},   {"I32", RILL_I32},   {"I64", RILL_I64}, {"BOOL", RILL_BOOL}, {"I16", RILL_I16},
    {"U16", RILL_U16}, {"U32", RILL_U32},   {"U64", RILL_U64},
};

void isa_st_free(isa_st_t *st) {
  if (!st) return;
  for (size_t i = 0; i < st->count; i++) rill__free(st->a, st->tensors[i].name);
  rill__free(st->a, st->tensors);
  if (st->file.data) rill__file_close(&st->file);
  else if (!st->pieces) rill__free(st->a, (void *)st->bytes);
  rill__free(st->a, st);
}

static bool json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double v = j->valuedouble;
  if (!(v >= 0) || v > 9007199254740992.0 || v != floor(v)) return false;
  *out = (uint64_t)v;
  return true;
}

/* a tensor's name (a key of the file's header) as text safe to print */
typedef struct { char s[256]; } esc_t;
static esc_t esc(const char *name) {
  esc_t e;
  rill_escape(name, strlen(name), e.s, sizeof e.s);
  return e;
}

static rill_status_t bad(const char *what, const char *name) {
  return rill__status(RILL_MALFORMED, "malformed safetensors file: %s%s%s%s", what,
                      name ? " (tensor \"" : "", name ? esc(name).s : "", name ? "\")" : "");
}

static int by_range(const void *x, const void *y) {
  const isa_st_tensor_t *a = *(const isa_st_tensor_t *const *)x, *b = *(const isa_st_tensor_t *const *)y;
  if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
  return a->size < b->size ? -1 : a->size > b->size;
}

/* The format (and its reference library) asks that the tensors' byte ranges
 * be disjoint and cover the data section, from its first byte to its last,
 * without holes: else two constants could share bytes, or bytes go unread. */
static rill_status_t check_cover(const isa_st_t *st, uint64_t data_start) {
  if (!st->count) {
    if (st->size == data_start) return NULL;
    return rill__status(RILL_MALFORMED, "malformed safetensors file: %llu data bytes but no tensors",
                        (unsigned long long)(st->size - data_start));
  }
  const isa_st_tensor_t **o = rill__alloc(st->a, st->count * sizeof *o);
  if (!o) return rill__oom();
  for (size_t i = 0; i < st->count; i++) o[i] = &st->tensors[i];
  qsort(o, st->count, sizeof *o, by_range);
  rill_status_t s = NULL;
  uint64_t at = data_start; /* where the next tensor must begin */
  const isa_st_tensor_t *prev = NULL;
  for (size_t i = 0; !s && i < st->count; i++) {
    unsigned long long b = o[i]->offset - data_start, e = b + o[i]->size;
    if (o[i]->offset < at)
      s = rill__status(RILL_MALFORMED, "malformed safetensors file: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap",
                       esc(prev->name).s, (unsigned long long)(prev->offset - data_start),
                       (unsigned long long)(prev->offset + prev->size - data_start), esc(o[i]->name).s, b, e);
    else if (o[i]->offset > at && prev)
      s = rill__status(RILL_MALFORMED, "malformed safetensors file: a hole of %llu bytes between tensors \"%s\" (ends at %llu) and \"%s\" (begins at %llu)",
                       (unsigned long long)(o[i]->offset - at), esc(prev->name).s, (unsigned long long)(at - data_start), esc(o[i]->name).s, b);
    else if (o[i]->offset > at)
      s = rill__status(RILL_MALFORMED, "malformed safetensors file: the first %llu data bytes belong to no tensor (the first, \"%s\", begins at %llu)", b, esc(o[i]->name).s, b);
    at = o[i]->offset + o[i]->size;
    prev = o[i];
  }
  if (!s && at != st->size)
    s = rill__status(RILL_MALFORMED, "malformed safetensors file: %llu data bytes after the last tensor \"%s\" (ends at %llu) belong to no tensor",
                     (unsigned long long)(st->size - at), esc(prev->name).s, (unsigned long long)(at - data_start));
  rill__free(st->a, o);
  return s;
}

/* cJSON allocates with malloc; one lock-free hook pair is enough for it. */
/* bytes: owned (freed, even on failure), or, with borrowed, the caller's */
static rill_status_t parse(const rill_allocator_t *a, uint8_t *bytes, size_t size, rill_file_t *file, bool borrowed, isa_st_t **out) {
  isa_st_t *st = rill__calloc(a, 1, sizeof *st);
  if (!st) {
    if (file) rill__file_close(file);
    else if (!borrowed) rill__free(a, bytes);
    return rill__oom();
  }
  st->a = a;
  st->pieces = borrowed;
  if (file) {
    st->file = *file;
    bytes = (uint8_t *)file->data;
    size = file->size;
  }
  st->bytes = bytes;
  st->size = size;
  rill_status_t s = NULL;
  cJSON *root = NULL;
  if (size < 8) { s = bad("shorter than its 8-byte header length", NULL); goto done; }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | bytes[i];
  if (hlen > size - 8) { s = bad("header length runs past the end of the file", NULL); goto done; }
  if (hlen > (100u << 20)) { s = bad("header larger than 100 MiB", NULL); goto done; }
  root = cJSON_ParseWithLength((const char *)bytes + 8, (size_t)hlen);
  if (!root) {
    s = cJSON_GetErrorPtr() == NULL ? rill__oom() : bad("header is not valid JSON", NULL);
    goto done;
  }
  if (!cJSON_IsObject(root)) { s = bad("header is not a JSON object", NULL); goto done; }
  size_t n = 0;
  for (cJSON *e = root->child; e; e = e->next) n++;
  st->tensors = rill__calloc(a, n ? n : 1, sizeof(isa_st_tensor_t));
  if (!st->tensors) { s = rill__oom(); goto done; }
  uint64_t data_start = 8 + hlen, data_size = size - data_start;
  for (cJSON *e = root->child; e; e = e->next) {
    const char *name = e->string ? e->string : "";
    if (strcmp(name, "__metadata__") == 0) continue;
    if (!cJSON_IsObject(e)) { s = bad("entry is not an object", name); goto done; }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2) {
      s = bad("entry lacks dtype, shape or data_offsets", name);
      goto done;
    }
    isa_st_tensor_t *t = &st->tensors[st->count];
    size_t k = 0;
    for (; k < RILL_ARRAY_LEN(DTYPES); k++)
      if (strcmp(dt->valuestring, DTYPES[k].name) == 0) break;
    if (k == RILL_ARRAY_LEN(DTYPES)) { s = bad("unsupported dtype", name); goto done; }
    t->type.dtype = DTYPES[k].dtype;
    int rank = cJSON_GetArraySize(sh);
    if (rank > RILL_MAX_RANK) { s = bad("rank above 8", name); goto done; }
    t->type.rank = rank;
    for (int d = 0; d < rank; d++) {
      uint64_t v;
      if (!json_uint(cJSON_GetArrayItem(sh, d), &v)) { s = bad("shape entry is not a non-negative integer", name); goto done; }
      t->type.dims[d] = (int64_t)v;
    }
    uint64_t b, en;
    if (!json_uint(cJSON_GetArrayItem(off, 0), &b) || !json_uint(cJSON_GetArrayItem(off, 1), &en) || b > en || en > data_size) {
      s = bad("data_offsets out of range", name);
      goto done;
    }
    size_t bytes_needed;
    if (!rill__type_sizes(&t->type, NULL, &bytes_needed) || bytes_needed != en - b) {
      s = bad("data size does not match dtype and shape", name);
      goto done;
    }
    t->offset = data_start + b;
    t->size = en - b;
    t->data = st->pieces ? NULL : bytes + t->offset;
    if (!(t->name = rill__strndup(a, name, strlen(name)))) { s = rill__oom(); goto done; }
    st->count++;
  }
  s = check_cover(st, data_start);
done:
  cJSON_Delete(root);
  if (s) { isa_st_free(st); return s; }
  *out = st;
  return NULL;
}

rill_status_t isa_st_parse(const rill_allocator_t *a, uint8_t *bytes, size_t size, isa_st_t **out) {
  return parse(a, bytes, size, NULL, false, out);
}

rill_status_t isa_st_parse_pieces(const rill_allocator_t *a, const void *const *ptr, const size_t *len, size_t n, isa_st_t **out) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (len[i] > SIZE_MAX - total) return bad("pieces larger than memory", NULL);
    total += len[i];
  }
  if (!n || len[0] < 8) return bad("shorter than its 8-byte header length", NULL);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | ((const uint8_t *)ptr[0])[i];
  if (hlen > len[0] - 8) return bad("the first piece does not hold the header", NULL);
  /* the header parsed as a file's (only its bytes are read: the size is the whole's) */
  isa_st_t *st;
  RILL_TRY(parse(a, (uint8_t *)ptr[0], total, NULL, true, &st));
  st->bytes = NULL;
  size_t p = 0, start = 0; /* piece p begins at file offset start */
  bool *done = rill__calloc(a, st->count ? st->count : 1, sizeof *done);
  if (!done) {
    isa_st_free(st);
    return rill__oom();
  }
  /* the tensors in file order (check_cover made them disjoint and whole) */
  for (size_t k = 0; k < st->count; k++) {
    isa_st_tensor_t *t = NULL;
    size_t ti = 0;
    for (size_t i = 0; i < st->count; i++)
      if (!done[i] && (!t || st->tensors[i].offset < t->offset)) t = &st->tensors[ti = i];
    done[ti] = true;
    if (!t->size) { /* no bytes: any piece's address */
      t->data = ptr[0];
      continue;
    }
    while (p < n && start + len[p] <= t->offset) start += len[p++];
    if (p == n || t->offset + t->size > start + len[p]) {
      rill__free(a, done);
      rill_status_t s = bad("a tensor's bytes span two pieces", t->name);
      isa_st_free(st);
      return s;
    }
    t->data = (const uint8_t *)ptr[p] + (t->offset - start);
  }
  rill__free(a, done);
  *out = st;
  return NULL;
}

rill_status_t isa_st_open(const rill_allocator_t *a, const char *path, isa_st_t **out) {
  rill_file_t f;
  RILL_TRY(rill__file_open(a, path, &f));
  rill_status_t s = parse(a, NULL, 0, &f, false, out);
  return s ? rill__status_prefix(s, "%s: ", path) : NULL;
}

const isa_st_tensor_t *isa_st_find(const isa_st_t *st, const char *name) {
  for (size_t i = 0; i < st->count; i++)
    if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
  return NULL;
}
