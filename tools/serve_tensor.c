/* serve_tensor.c: KServe v2 inference requests and responses for rill serve.
 *
 * A request is JSON ({"id", "parameters", "inputs": [{"name", "datatype",
 * "shape", "data" | "parameters": {"binary_data_size"}}], "outputs": [{"name",
 * "parameters": {"binary_data"}}]}), optionally followed by raw little-endian
 * tensor bytes (the binary tensor data extension: the JSON's length in the
 * Inference-Header-Content-Length header, each binary input's bytes in the
 * order the inputs are listed). Every input is checked against the model's
 * parameter (name, datatype, rank, fixed sizes, shape variables bound
 * consistently and inside their ranges) before it is queued, so a batch
 * never fails for one request's mistake.
 */
#include <math.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "serve.h"

static const struct {
  rill_dtype_t d;
  const char *name;
} DTYPES[] = {
    {RILL_BOOL, "BOOL"}, {RILL_I8, "INT8"}, {RILL_U8, "UINT8"},  {RILL_I32, "INT32"}, {RILL_I64, "INT64"},
    {RILL_F16, "FP16"},  {RILL_BF16, "BF16"}, {RILL_F32, "FP32"}, {RILL_F64, "FP64"},
    {RILL_I16, "INT16"}, {RILL_U16, "UINT16"}, {RILL_U32, "UINT32"}, {RILL_U64, "UINT64"},
};

const char *serve_dtype_name(rill_dtype_t d) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
    if (DTYPES[i].d == d) return DTYPES[i].name;
  return "?";
}

bool serve_dtype_from_name(const char *name, rill_dtype_t *out) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof *DTYPES; i++)
    if (!strcmp(DTYPES[i].name, name)) {
      *out = DTYPES[i].d;
      return true;
    }
  return false;
}

static bool is_float(rill_dtype_t d) { return d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64; }

char *serve_error_json(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cJSON *o = cJSON_CreateObject();
  char *s = NULL;
  if (o && cJSON_AddStringToObject(o, "error", msg)) s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

void serve_req_free(serve_req_t *r) {
  if (!r) return;
  if (r->http) serve_http_drop(r->http);
  if (r->fill) serve_fill_leave(r);
  if (r->in)
    for (int i = 0; i < r->model->nparams; i++) free(r->in[i]);
  free(r->in);
  free(r->in_type);
  free(r->out_idx);
  free(r->out_binary);
  free(r->id);
  free(r);
}

/* ---- reading ---- */
typedef struct reader {
  serve_model_t *m;
  char *err;
  size_t nerr;
  size_t json_len;
  serve_lane_t *lane;
} reader_t;

static int bad(reader_t *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(reader_t *rd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rd->err, rd->nerr, fmt, ap);
  va_end(ap);
  return 400;
}

/* One JSON value into element i; false when it does not fit the dtype. */
static bool put_value(const cJSON *v, rill_dtype_t d, uint8_t *data, size_t i, char *why, size_t nwhy) {
  if (cJSON_IsBool(v)) {
    if (d != RILL_BOOL) return snprintf(why, nwhy, "true or false for a %s tensor", serve_dtype_name(d)), false;
    rill_element_set_int(d, data, i, cJSON_IsTrue(v) ? 1 : 0);
    return true;
  }
  if (!cJSON_IsNumber(v)) return snprintf(why, nwhy, "a value that is not a number"), false;
  double x = v->valuedouble;
  if (is_float(d)) {
    rill_element_set(d, data, i, x);
    return true;
  }
  static const double lo[RILL_DTYPE_COUNT] = {[RILL_I8] = -128, [RILL_U8] = 0, [RILL_I32] = -2147483648.0, [RILL_I64] = -9007199254740992.0,
                                              [RILL_BOOL] = 0, [RILL_I16] = -32768};
  static const double hi[RILL_DTYPE_COUNT] = {[RILL_I8] = 127, [RILL_U8] = 255, [RILL_I32] = 2147483647.0, [RILL_I64] = 9007199254740992.0,
                                              [RILL_BOOL] = 1, [RILL_I16] = 32767, [RILL_U16] = 65535, [RILL_U32] = 4294967295.0,
                                              [RILL_U64] = 9007199254740992.0};
  if (x != floor(x) || x < lo[d] || x > hi[d]) {
    if ((d == RILL_I64 || d == RILL_U64) && x == floor(x) && fabs(x) < 1.9e19 && x >= lo[d])
      return snprintf(why, nwhy, "%.17g, beyond 2^53 (send %s data that large as binary)", x, serve_dtype_name(d)), false;
    return snprintf(why, nwhy, "%.17g, not a %s value", x, serve_dtype_name(d)), false;
  }
  rill_element_set_int(d, data, i, (int64_t)x);
  return true;
}

/* Flattens `data` (nested arrays, row-major) into n elements of dtype d. */
static int fill(reader_t *rd, const char *input, const cJSON *v, rill_dtype_t d, uint8_t *data, size_t n, size_t *count) {
  if (cJSON_IsArray(v)) {
    for (const cJSON *c = v->child; c; c = c->next) {
      int rc = fill(rd, input, c, d, data, n, count);
      if (rc) return rc;
    }
    return 0;
  }
  if (*count >= n) return bad(rd, "input '%s': more data than its shape holds (%zu elements)", input, n);
  char why[160];
  if (!put_value(v, d, data, *count, why, sizeof why)) return bad(rd, "input '%s': element %zu: %s", input, *count, why);
  (*count)++;
  return 0;
}

static int param_index(const serve_model_t *m, const char *name) {
  for (int i = 0; i < m->nparams; i++)
    if (!strcmp(m->params[i].name, name)) return i;
  return -1;
}

static int result_index(const serve_model_t *m, const char *name) {
  for (int i = 0; i < m->nresults; i++)
    if (!strcmp(m->results[i].name, name)) return i;
  return -1;
}

static const char *type_text(const rill_type_t *t, char *buf, size_t n) {
  int at = snprintf(buf, n, "%s[", serve_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && at < (int)n; i++) at += snprintf(buf + at, n - (size_t)at, i ? ",%" PRId64 : "%" PRId64, t->dims[i]);
  if (at < (int)n) snprintf(buf + at, n - (size_t)at, "]");
  return buf;
}

/* Checks input p's shape `t` against parameter p, binding shape variables in vals. */
static int check_shape(reader_t *rd, int p, const rill_type_t *t, int64_t *vals, int *bound_by) {
  serve_model_t *m = rd->m;
  const serve_io_t *io = &m->params[p];
  char b1[160], b2[160];
  if (t->rank != io->type.rank)
    return bad(rd, "input '%s': shape %s has rank %d, the model takes %s", io->name, type_text(t, b1, sizeof b1), t->rank,
               type_text(&io->type, b2, sizeof b2));
  for (int d = 0; d < t->rank; d++) {
    int v = io->dim_var[d];
    if (v == SERVE_DIM_FIXED && t->dims[d] != io->type.dims[d])
      return bad(rd, "input '%s': shape %s, the model takes %s", io->name, type_text(t, b1, sizeof b1), type_text(&io->type, b2, sizeof b2));
    if (v < 0) continue;
    const char *vn = "?";
    int64_t lo, hi;
    rill_module_shape_var(m->module, v, &vn, &lo, &hi);
    if (t->dims[d] < lo || t->dims[d] > hi)
      return bad(rd, "input '%s': dimension %d is %s = %" PRId64 ", outside its range [%" PRId64 ", %" PRId64 "]", io->name, d, vn,
                 t->dims[d], lo, hi);
    if (bound_by[v] >= 0 && vals[v] != t->dims[d])
      return bad(rd, "input '%s': dimension %d makes %s %" PRId64 ", but input '%s' made it %" PRId64, io->name, d, vn, t->dims[d],
                 m->params[bound_by[v]].name, vals[v]);
    vals[v] = t->dims[d];
    bound_by[v] = p;
  }
  return 0;
}

/* Sizes that are expressions of the variables, once all are bound. */
static int check_exprs(reader_t *rd, const rill_type_t *types, const int64_t *vals, const int *bound_by) {
  serve_model_t *m = rd->m;
  for (int v = 0; v < m->nvars; v++)
    if (bound_by[v] < 0) return 0; /* not all bound here: the VM checks at the run */
  for (int p = 0; p < m->nparams; p++) {
    rill_type_t want;
    if (!rill_module_param_type_at(m->module, m->server->cfg.function, p, m->nvars ? vals : NULL, &want)) continue;
    for (int d = 0; d < want.rank; d++)
      if (m->params[p].dim_var[d] == SERVE_DIM_EXPR && want.dims[d] != types[p].dims[d]) {
        char b1[160], b2[160];
        return bad(rd, "input '%s': shape %s, the model takes %s at these sizes", m->params[p].name, type_text(&types[p], b1, sizeof b1),
                   type_text(&want, b2, sizeof b2));
      }
  }
  return 0;
}

static int read_shape(reader_t *rd, const char *name, const cJSON *shape, rill_type_t *t) {
  if (!cJSON_IsArray(shape)) return bad(rd, "input '%s': \"shape\" must be an array of sizes", name);
  t->rank = 0;
  for (const cJSON *c = shape->child; c; c = c->next) {
    if (t->rank == RILL_MAX_RANK) return bad(rd, "input '%s': more than %d dimensions", name, RILL_MAX_RANK);
    if (!cJSON_IsNumber(c) || c->valuedouble != floor(c->valuedouble) || c->valuedouble < 0 || c->valuedouble > 1e15)
      return bad(rd, "input '%s': \"shape\" must hold non-negative integer sizes", name);
    t->dims[t->rank++] = (int64_t)c->valuedouble;
  }
  return 0;
}

/* The tensor's bytes; false when they overflow or exceed limit. */
static bool tensor_bytes(const rill_type_t *t, size_t limit, size_t *out) {
  size_t n = rill_dtype_size(t->dtype);
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] && n > limit / (size_t)t->dims[i]) return false;
    n *= (size_t)t->dims[i];
  }
  *out = n;
  return n <= limit;
}

/* Where each input's values are in the request: a JSON "data" value, or
 * bytes of the binary data. */
typedef struct src {
  const cJSON *data;
  size_t at, nbytes, numel;
  bool given, binary;
} src_t;

/* The inputs: checked first (names, datatypes, shapes, sizes), then placed
 * (in a batch's staging memory where serve_fill_reserve gives room, else
 * in the request's own), then decoded there. */
static int read_inputs(reader_t *rd, const cJSON *inputs, serve_req_t *r, const uint8_t *bin, size_t nbin) {
  serve_model_t *m = rd->m;
  if (!cJSON_IsArray(inputs)) return bad(rd, "the request needs \"inputs\", an array");
  int64_t vals[64];
  int bound_by[64];
  for (int v = 0; v < m->nvars && v < 64; v++) vals[v] = m->var_lo[v], bound_by[v] = -1;
  src_t *src = calloc((size_t)m->nparams + 1, sizeof *src);
  if (!src) return bad(rd, "out of memory");
  int rc = 0;
  size_t at = 0;
  for (const cJSON *in = inputs->child; in && !rc; in = in->next) {
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(in, "name");
    if (!cJSON_IsString(jn)) {
      rc = bad(rd, "each input needs a \"name\" string");
      break;
    }
    const char *name = jn->valuestring;
    int p = param_index(m, name);
    if (p < 0) {
      char names[512] = "";
      for (int i = 0, k = 0; i < m->nparams; i++) k += snprintf(names + k, sizeof names - (size_t)k, "%s'%s'", i ? ", " : "", m->params[i].name);
      rc = bad(rd, "unknown input '%.100s': model '%s' takes %s", name, m->name, names);
      break;
    }
    if (src[p].given) {
      rc = bad(rd, "input '%s' is given twice", name);
      break;
    }
    src[p].given = true;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(in, "datatype");
    rill_dtype_t d = RILL_F32;
    if (!cJSON_IsString(dt)) rc = bad(rd, "input '%s' needs a \"datatype\" string", name);
    else if (!serve_dtype_from_name(dt->valuestring, &d)) rc = bad(rd, "input '%s': unknown datatype '%.40s'", name, dt->valuestring);
    else if (d != m->params[p].type.dtype)
      rc = bad(rd, "input '%s': datatype %s, the model takes %s", name, dt->valuestring, serve_dtype_name(m->params[p].type.dtype));
    if (rc) break;
    rill_type_t *t = &r->in_type[p];
    t->dtype = d;
    rc = read_shape(rd, name, cJSON_GetObjectItemCaseSensitive(in, "shape"), t);
    if (!rc) rc = check_shape(rd, p, t, vals, bound_by);
    if (rc) break;
    size_t nbytes, numel = rill_type_numel(t);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(in, "parameters");
    const cJSON *bsize = params ? cJSON_GetObjectItemCaseSensitive(params, "binary_data_size") : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(in, "data");
    /* no more memory than the body can fill: a byte per binary byte, a character per JSON value */
    if (!tensor_bytes(t, SIZE_MAX / 2, &nbytes)) {
      rc = bad(rd, "input '%s': shape %s is too large", name, type_text(t, (char[160]){0}, 160));
      break;
    }
    if (bsize) {
      if (data) rc = bad(rd, "input '%s' has both \"data\" and binary_data_size", name);
      else if (!cJSON_IsNumber(bsize) || bsize->valuedouble != (double)nbytes)
        rc = bad(rd, "input '%s': binary_data_size must be %zu for %s", name, nbytes, type_text(t, (char[160]){0}, 160));
      else if (nbin - at < nbytes)
        rc = bad(rd, "input '%s': binary data ends after %zu of its %zu bytes", name, nbin - at, nbytes);
      if (rc) break;
      src[p] = (src_t){.at = at, .nbytes = nbytes, .numel = numel, .given = true, .binary = true};
      at += nbytes;
    } else {
      if (numel > rd->json_len) rc = bad(rd, "input '%s': shape %s holds more values than the request carries", name, type_text(t, (char[160]){0}, 160));
      else if (!data) rc = bad(rd, "input '%s' has neither \"data\" nor binary_data_size", name);
      if (rc) break;
      src[p] = (src_t){.data = data, .nbytes = nbytes, .numel = numel, .given = true};
    }
  }
  for (int p = 0; !rc && p < m->nparams; p++)
    if (!src[p].given) {
      char b[160];
      rc = bad(rd, "missing input '%s' (%s)", m->params[p].name, type_text(&m->params[p].type, b, sizeof b));
    }
  if (!rc && at != nbin) rc = bad(rd, "%zu bytes of binary data after the JSON, the inputs' binary_data_size add up to %zu", nbin, at);
  if (!rc) {
    r->rows = m->batch_var >= 0 ? vals[m->batch_var] : 1;
    rc = check_exprs(rd, r->in_type, vals, bound_by);
  }
  /* placed: in a batch's staging (r->fill), or each input in its own memory */
  uint8_t *dst[64];
  bool placed = !rc && m->nparams <= 64 && serve_fill_reserve(m, r, dst, rd->lane);
  for (int p = 0; !rc && p < m->nparams; p++) {
    if (placed) continue;
    if (!(r->in[p] = malloc(src[p].nbytes ? src[p].nbytes : 1))) rc = bad(rd, "input '%s': out of memory", m->params[p].name);
  }
  for (int p = 0; !rc && p < m->nparams; p++) {
    uint8_t *to = placed ? dst[p] : r->in[p];
    if (src[p].binary) {
      memcpy(to, bin + src[p].at, src[p].nbytes);
      continue;
    }
    size_t count = 0;
    const char *name = m->params[p].name;
    if ((rc = fill(rd, name, src[p].data, r->in_type[p].dtype, to, src[p].numel, &count))) break;
    if (count != src[p].numel)
      rc = bad(rd, "input '%s': %zu values for shape %s (%zu elements)", name, count, type_text(&r->in_type[p], (char[160]){0}, 160), src[p].numel);
  }
  if (placed) serve_fill_placed(r, rc == 0);
  free(src);
  return rc;
}

static int read_outputs(reader_t *rd, const cJSON *outputs, serve_req_t *r, bool all_binary) {
  serve_model_t *m = rd->m;
  int n = 0;
  if (outputs && !cJSON_IsArray(outputs)) return bad(rd, "\"outputs\" must be an array");
  int asked = outputs ? cJSON_GetArraySize(outputs) : 0;
  int cap = asked ? asked : m->nresults;
  if (!(r->out_idx = calloc((size_t)cap + 1, sizeof *r->out_idx)) || !(r->out_binary = calloc((size_t)cap + 1, sizeof *r->out_binary)))
    return bad(rd, "out of memory");
  if (!asked) {
    for (int k = 0; k < m->nresults; k++) r->out_idx[k] = k, r->out_binary[k] = all_binary;
    r->nout = m->nresults;
    return 0;
  }
  for (const cJSON *o = outputs->child; o; o = o->next) {
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(jn)) return bad(rd, "each output needs a \"name\" string");
    int k = result_index(m, jn->valuestring);
    if (k < 0) return bad(rd, "unknown output '%.100s' of model '%s'", jn->valuestring, m->name);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    const cJSON *b = params ? cJSON_GetObjectItemCaseSensitive(params, "binary_data") : NULL;
    if (b && !cJSON_IsBool(b)) return bad(rd, "output '%s': binary_data must be true or false", jn->valuestring);
    r->out_idx[n] = k;
    r->out_binary[n] = b ? cJSON_IsTrue(b) : all_binary;
    n++;
  }
  r->nout = n;
  return 0;
}

int serve_parse_infer(serve_model_t *m, const char *body, size_t len, size_t json_len, serve_req_t **out, char *err, size_t nerr,
                      serve_lane_t *lane) {
  reader_t rd = {m, err, nerr, json_len, lane};
  *out = NULL;
  if (json_len > len) return bad(&rd, "Inference-Header-Content-Length %zu is more than the body's %zu bytes", json_len, len);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, json_len, &end, false);
  if (!root) {
    size_t at = end && end >= body && end <= body + json_len ? (size_t)(end - body) : 0;
    return bad(&rd, "the request is not JSON (at byte %zu)", at);
  }
  while (end && end < body + json_len && strchr(" \t\r\n", *end) && *end) end++;
  if (end && end < body + json_len) {
    cJSON_Delete(root);
    return bad(&rd, "%zu bytes after the JSON (binary data needs Inference-Header-Content-Length)", (size_t)(body + json_len - end));
  }
  serve_req_t *r = calloc(1, sizeof *r);
  int rc = 0;
  if (!r || !(r->in = calloc((size_t)m->nparams + 1, sizeof *r->in)) ||
      !(r->in_type = calloc((size_t)m->nparams + 1, sizeof *r->in_type))) {
    rc = bad(&rd, "out of memory");
    goto done;
  }
  r->model = m;
  if (!cJSON_IsObject(root)) {
    rc = bad(&rd, "the request must be a JSON object");
    goto done;
  }
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
  if (id && !cJSON_IsString(id)) {
    rc = bad(&rd, "\"id\" must be a string");
    goto done;
  }
  if (id && !(r->id = strdup(id->valuestring))) {
    rc = bad(&rd, "out of memory");
    goto done;
  }
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "parameters");
  if (params && !cJSON_IsObject(params)) {
    rc = bad(&rd, "\"parameters\" must be an object");
    goto done;
  }
  const cJSON *bo = params ? cJSON_GetObjectItemCaseSensitive(params, "binary_data_output") : NULL;
  if (bo && !cJSON_IsBool(bo)) {
    rc = bad(&rd, "binary_data_output must be true or false");
    goto done;
  }
  /* Triton's "timeout": microseconds, a deadline sooner than the server's */
  const cJSON *to = params ? cJSON_GetObjectItemCaseSensitive(params, "timeout") : NULL;
  if (to && (!cJSON_IsNumber(to) || to->valuedouble < 0 || to->valuedouble != floor(to->valuedouble))) {
    rc = bad(&rd, "timeout must be a whole number of microseconds");
    goto done;
  }
  r->timeout_s = to ? to->valuedouble / 1e6 : -1;
  rc = read_inputs(&rd, cJSON_GetObjectItemCaseSensitive(root, "inputs"), r, (const uint8_t *)body + json_len, len - json_len);
  if (!rc) rc = read_outputs(&rd, cJSON_GetObjectItemCaseSensitive(root, "outputs"), r, bo && cJSON_IsTrue(bo));
done:
  cJSON_Delete(root);
  if (rc) serve_req_free(r);
  else *out = r;
  return rc;
}

/* ---- writing ---- */
typedef struct text {
  char *p;
  size_t len, cap;
  bool oom;
} text_t;

/* Room for n more bytes (and a terminating zero); false when out of memory. */
static bool reserve(text_t *t, size_t n) {
  if (t->oom) return false;
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    while (cap < t->len + n + 1) cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p) {
      t->oom = true;
      return false;
    }
    t->p = p;
    t->cap = cap;
  }
  return true;
}

static void put(text_t *t, const char *s, size_t n) {
  if (!reserve(t, n)) return;
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = 0;
}

/* The elements of a tensor as a flat JSON array. */
static void data_json(text_t *t, rill_dtype_t d, const uint8_t *data, size_t n) {
  put(t, "[", 1);
  char b[40];
  for (size_t i = 0; i < n && !t->oom; i++) {
    int k;
    if (d == RILL_BOOL) k = snprintf(b, sizeof b, "%s", rill_element_get_int(d, data, i) ? "true" : "false");
    else if (d == RILL_U64) k = snprintf(b, sizeof b, "%" PRIu64, (uint64_t)rill_element_get_int(d, data, i));
    else if (!is_float(d)) k = snprintf(b, sizeof b, "%" PRId64, rill_element_get_int(d, data, i));
    else {
      double x = rill_element_get(d, data, i);
      /* digits enough to read back the same value of the dtype */
      if (isnan(x)) k = snprintf(b, sizeof b, "NaN");
      else if (isinf(x)) k = snprintf(b, sizeof b, x > 0 ? "Infinity" : "-Infinity");
      else k = snprintf(b, sizeof b, d == RILL_F64 ? "%.17g" : d == RILL_F32 ? "%.9g" : "%.5g", x);
    }
    if (i) put(t, ",", 1);
    put(t, b, (size_t)k);
  }
  put(t, "]", 1);
}

static cJSON *shape_json(const rill_type_t *t) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < t->rank; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)t->dims[i]));
  return a;
}

/* Result k's rows of r (from `row` on, r->rows of them where the model
 * batches) and their type. */
static const uint8_t *out_rows(const serve_model_t *m, const serve_req_t *r, uint8_t *const *results, const rill_type_t *rtype, int64_t row,
                               int k, rill_type_t *ty) {
  *ty = rtype[k];
  const uint8_t *data = results[k];
  if (m->batch_var >= 0 && ty->rank > 0) {
    size_t row_bytes = rill_type_numel(ty) / (size_t)(ty->dims[0] ? ty->dims[0] : 1) * rill_dtype_size(ty->dtype);
    data += (size_t)row * row_bytes;
    ty->dims[0] = r->rows;
  }
  return data;
}

/* Written as text straight into the body (no JSON tree: this runs for
 * every answer, on the main loop for batches): the JSON, then each binary
 * output's bytes after it. Names are the model's (letters, digits, "._-")
 * and output_N; the request's id is escaped by cJSON. */
int serve_build_response(serve_model_t *m, serve_req_t *r, uint8_t *const *results, const rill_type_t *rtype, int64_t row, char **out,
                         size_t *out_len, size_t *out_json_len) {
  text_t t = {0};
  /* one allocation where the outputs are binary: the JSON's names and shapes, then their bytes */
  size_t guess = 512 + (r->id ? 2 * strlen(r->id) : 0);
  for (int j = 0; j < r->nout; j++) {
    rill_type_t ty;
    out_rows(m, r, results, rtype, row, r->out_idx[j], &ty);
    guess += 256 + (r->out_binary[j] ? rill_type_numel(&ty) * rill_dtype_size(ty.dtype) : 0);
  }
  reserve(&t, guess);
  char b[256];
  int k0 = snprintf(b, sizeof b, "{\"model_name\":\"%s\",\"model_version\":\"1\"", m->name);
  put(&t, b, (size_t)k0);
  if (r->id) {
    cJSON *id = cJSON_CreateString(r->id);
    char *q = id ? cJSON_PrintUnformatted(id) : NULL;
    cJSON_Delete(id);
    if (!q) t.oom = true;
    put(&t, ",\"id\":", 6);
    if (q) put(&t, q, strlen(q));
    free(q);
  }
  put(&t, ",\"outputs\":[", 12);
  size_t nbin = 0;
  for (int j = 0; j < r->nout; j++) {
    int k = r->out_idx[j];
    rill_type_t ty;
    const uint8_t *data = out_rows(m, r, results, rtype, row, k, &ty);
    size_t n = rill_type_numel(&ty), nbytes = n * rill_dtype_size(ty.dtype);
    int at = snprintf(b, sizeof b, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", j ? "," : "", m->results[k].name,
                      serve_dtype_name(ty.dtype));
    for (int d = 0; d < ty.rank && at < (int)sizeof b - 24; d++) at += snprintf(b + at, sizeof b - (size_t)at, d ? ",%" PRId64 : "%" PRId64, ty.dims[d]);
    put(&t, b, (size_t)at);
    if (r->out_binary[j]) {
      at = snprintf(b, sizeof b, "],\"parameters\":{\"binary_data_size\":%zu}}", nbytes);
      put(&t, b, (size_t)at);
      nbin += nbytes;
    } else {
      put(&t, "],\"data\":", 9);
      data_json(&t, ty.dtype, data, n);
      put(&t, "}", 1);
    }
  }
  put(&t, "]}", 2);
  size_t jl = t.len;
  if (!t.oom && nbin) { /* the binary outputs after the JSON, in order */
    for (int j = 0; j < r->nout; j++) {
      if (!r->out_binary[j]) continue;
      int k = r->out_idx[j];
      rill_type_t ty;
      const uint8_t *data = out_rows(m, r, results, rtype, row, k, &ty);
      put(&t, (const char *)data, rill_type_numel(&ty) * rill_dtype_size(ty.dtype));
    }
  }
  if (t.oom) {
    free(t.p);
    return 500;
  }
  *out = t.p;
  *out_len = t.len;
  *out_json_len = jl;
  return 200;
}

static cJSON *ios_json(const serve_io_t *io, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    if (!o) break;
    cJSON_AddItemToArray(a, o);
    cJSON_AddStringToObject(o, "name", io[i].name);
    cJSON_AddStringToObject(o, "datatype", serve_dtype_name(io[i].type.dtype));
    cJSON_AddItemToObject(o, "shape", shape_json(&io[i].type));
  }
  return a;
}

char *serve_model_metadata(const serve_model_t *m) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  cJSON_AddStringToObject(root, "name", m->name);
  cJSON *v = cJSON_AddArrayToObject(root, "versions");
  if (v) cJSON_AddItemToArray(v, cJSON_CreateString("1"));
  cJSON_AddStringToObject(root, "platform", "rill");
  cJSON_AddItemToObject(root, "inputs", ios_json(m->params, m->nparams));
  cJSON_AddItemToObject(root, "outputs", ios_json(m->results, m->nresults));
  cJSON *p = cJSON_AddObjectToObject(root, "parameters");
  if (p) {
    cJSON_AddNumberToObject(p, "max_batch_size", m->batch_var >= 0 ? (double)m->max_batch : 0);
    cJSON_AddStringToObject(p, "device", m->server->cfg.device);
  }
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}

/* Triton's repository index: every model, its version and state. */
char *serve_repository_index(const serve_t *s) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < s->nmodels; i++) {
    cJSON *o = cJSON_CreateObject();
    if (!o) break;
    cJSON_AddItemToArray(a, o);
    cJSON_AddStringToObject(o, "name", s->models[i]->name);
    cJSON_AddStringToObject(o, "version", "1");
    cJSON_AddStringToObject(o, "state", s->draining ? "UNAVAILABLE" : "READY");
  }
  char *text = a ? cJSON_PrintUnformatted(a) : NULL;
  cJSON_Delete(a);
  return text;
}
