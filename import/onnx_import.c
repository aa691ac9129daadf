/* onnx_import.c: the graph walk. Inputs become @main's parameters,
 * initializers known values, and each node in turn is mapped by its op
 * (the table in onnx_ops.c) onto .vmasm statements (onnx_emit.c); a known
 * value is declared as a `const` from the weights file only when a
 * statement uses it, so shape subgraphs folded at import leave nothing
 * behind. Symbolic input sizes: onnx_symbolic.c. */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"
#include "onnx_ops.h"

void sb_printf(sbuf_t *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) { b->oom = true; va_end(ap); return; }
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + (size_t)n + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = true; va_end(ap); return; }
    b->p = p;
    b->cap = cap;
  }
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
  va_end(ap);
}

/* The error, once: "node 'NAME' (OP, opset N): " while a node is imported,
 * then `what` ("" or "unsupported: "), then the message. */
static void *fail_v(imp_t *m, rill_code_t code, const char *what, const char *fmt, va_list ap) __attribute__((format(printf, 4, 0)));
static void *fail_v(imp_t *m, rill_code_t code, const char *what, const char *fmt, va_list ap) {
  if (m->err) return NULL;
  char node[400] = "", msg[1024];
  if (m->node)
    snprintf(node, sizeof node, "node '%.200s' (%.100s, opset %d): ", m->node->name && *m->node->name ? m->node->name : "(unnamed)",
             m->node->op_type ? m->node->op_type : "?", m->opset);
  vsnprintf(msg, sizeof msg, fmt, ap);
  m->err = rill_status_new(code, "%s%s%s", node, what, msg);
  return NULL;
}

void *imp_fail(imp_t *m, rill_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(m, code, "", fmt, ap);
  va_end(ap);
  return NULL;
}

void *imp_unsup(imp_t *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(m, RILL_UNIMPLEMENTED, "unsupported: ", fmt, ap);
  va_end(ap);
  return NULL;
}

size_t imp_numel(const rill_type_t *t) {
  if (isa_type_is_sym(t)) return SIZE_MAX; /* never folded, never data */
  size_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->dims[i];
  return n;
}

bool imp_has_sym(const ival_t *v) { return v->sym || isa_type_is_sym(&v->t); }

static int64_t dim_op(imp_t *m, rill_status_t (*op)(isa_syms_t *, int64_t, int64_t, int64_t *), int64_t a, int64_t b) {
  int64_t r = 0;
  rill_status_t st = op(&m->syms, a, b, &r);
  if (st) {
    imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
    rill_status_free(st);
    return 0;
  }
  return r;
}
int64_t imp_dim_add(imp_t *m, int64_t a, int64_t b) { return dim_op(m, isa_sym_add, a, b); }
int64_t imp_dim_mul(imp_t *m, int64_t a, int64_t b) { return dim_op(m, isa_sym_mul, a, b); }

bool imp_type_ok(imp_t *m, const rill_type_t *t) {
  size_t n = rill_dtype_size(t->dtype);
  if (t->rank < 0 || t->rank > RILL_MAX_RANK) return imp_unsup(m, "rank %d (at most %d)", t->rank, RILL_MAX_RANK), false;
  for (int i = 0; i < t->rank; i++)
    if (!isa_dim_is_sym(t->dims[i]) && (t->dims[i] < 0 || __builtin_mul_overflow(n, (size_t)t->dims[i], &n) || n > (size_t)ONNX_MAX_BYTES))
      return imp_fail(m, RILL_MALFORMED, "a tensor of dimensions too large (or negative) for any device"), false;
  return true;
}


bool imp_is_float(rill_dtype_t d) { return d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64; }
bool imp_is_int(rill_dtype_t d) { return d != RILL_BOOL && !imp_is_float(d); }

/* ---- value tables (open addressing, grown at half full) ---- */
static const char *vt_key(const ival_t *v, bool onnx) { return onnx ? v->onnx : v->name; }

static size_t vt_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
  return (size_t)h;
}

static ival_t *vt_get(const struct vtab *t, const char *key, bool onnx) {
  if (!t->cap) return NULL;
  for (size_t i = vt_hash(key) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (!t->slot[i]) return NULL;
    if (!strcmp(vt_key(t->slot[i], onnx), key)) return t->slot[i];
  }
}

static bool vt_put(struct vtab *t, ival_t *v, bool onnx) {
  if (2 * (t->n + 1) > t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 256;
    ival_t **slot = calloc(cap, sizeof *slot);
    if (!slot) return false;
    for (size_t i = 0; i < t->cap; i++)
      if (t->slot[i]) {
        size_t j = vt_hash(vt_key(t->slot[i], onnx)) & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = t->slot[i];
      }
    free(t->slot);
    t->slot = slot;
    t->cap = cap;
  }
  size_t j = vt_hash(vt_key(v, onnx)) & (t->cap - 1);
  while (t->slot[j]) j = (j + 1) & (t->cap - 1);
  t->slot[j] = v;
  t->n++;
  return true;
}

/* ---- names: [A-Za-z_][A-Za-z0-9_.]*, unique in the module ---- */
static char *make_name(imp_t *m, const char *onnx) {
  char base[96];
  size_t k = 0;
  if (!onnx || !*onnx) onnx = "t";
  if (!isalpha((unsigned char)onnx[0]) && onnx[0] != '_') base[k++] = 'v';
  for (const char *p = onnx; *p && k < 80; p++) base[k++] = isalnum((unsigned char)*p) || *p == '_' || *p == '.' ? *p : '_';
  base[k] = 0;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", base);
  for (int i = 1; vt_get(&m->by_name, buf, false); i++) snprintf(buf, sizeof buf, "%s_%d", base, i);
  return strdup(buf);
}

ival_t *imp_find(imp_t *m, const char *onnx) { return vt_get(&m->by_onnx, onnx, true); }

ival_t *imp_capture(imp_t *m, ival_t *v) {
  if (!v || v->scope > m->scope) return NULL;
  if (v->scope == m->scope || v->data) return v; /* known values are module constants */
  if (v->seq) return imp_unsup(m, "a %s read by a subgraph (its function takes tensors)", v->opt ? "an optional" : "sequence");
  for (int i = 0; i < m->ncaps; i++)
    if (m->caps[i].outer == v) return m->caps[i].inner;
  if (m->ncaps == m->capcap) {
    int cap = m->capcap ? 2 * m->capcap : 8;
    imp_capture_t *p = realloc(m->caps, sizeof *p * (size_t)cap);
    if (!p) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    m->caps = p;
    m->capcap = cap;
  }
  ival_t *p = imp_new(m, NULL, &v->t);
  if (!p) return NULL;
  p->declared = true;
  m->caps[m->ncaps++] = (imp_capture_t){v, p};
  return p;
}

ival_t *imp_lookup(imp_t *m, const char *onnx) { return imp_capture(m, imp_find(m, onnx)); }

ival_t *imp_new(imp_t *m, const char *onnx, const rill_type_t *t) {
  if (m->err || !imp_type_ok(m, t)) return NULL;
  if (onnx && imp_find(m, onnx)) return imp_fail(m, RILL_MALFORMED, "value '%.200s' is defined twice", onnx);
  if (m->nvals == m->cap) {
    int cap = m->cap ? 2 * m->cap : 64;
    ival_t **p = realloc(m->vals, sizeof *p * (size_t)cap);
    if (!p) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    m->vals = p;
    m->cap = cap;
  }
  ival_t *v = calloc(1, sizeof *v);
  char tmpname[32];
  if (!onnx) snprintf(tmpname, sizeof tmpname, "_t%d", m->tmp++);
  if (v) {
    v->onnx = onnx ? strdup(onnx) : NULL;
    v->name = make_name(m, onnx ? onnx : tmpname);
  }
  if (!v || !v->name || (onnx && !v->onnx)) {
    if (v) { free(v->onnx); free(v->name); }
    free(v);
    return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  }
  v->t = *t;
  v->scope = m->scope;
  m->vals[m->nvals++] = v;
  if (!vt_put(&m->by_name, v, false) || (onnx && !vt_put(&m->by_onnx, v, true))) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  return v;
}

ival_t *imp_const(imp_t *m, const rill_type_t *t, const void *data) {
  ival_t *v = imp_new(m, NULL, t);
  if (!v) return NULL;
  size_t nb = imp_numel(t) * rill_dtype_size(t->dtype);
  v->data = malloc(nb ? nb : 1);
  if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  if (nb) memcpy(v->data, data, nb);
  return v;
}

/* a size: a number, or over shape variables as the language writes it (S, mul(S, 2)) */
static void dim_text(imp_t *m, sbuf_t *b, int64_t d) {
  if (!isa_dim_is_sym(d) || isa_sym_id(d) >= m->syms.exprs.len) { /* a number (a raw one may fall in the encoded range) */
    sb_printf(b, "%lld", (long long)d);
    return;
  }
  rill_buf_t t;
  rill__buf_init(&t, rill_allocator_system());
  if (isa_sym_print_lowered(&t, &m->syms, d)) b->oom = true;
  else sb_printf(b, "%.*s", (int)t.len, (const char *)t.data);
  rill__buf_free(&t);
}

void imp_type_text(imp_t *m, sbuf_t *b, const rill_type_t *t) {
  sb_printf(b, "%s[", rill_dtype_name(t->dtype));
  for (int i = 0; i < t->rank; i++) {
    if (i) sb_printf(b, ",");
    dim_text(m, b, t->dims[i]);
  }
  sb_printf(b, "]");
}

const char *imp_use(imp_t *m, ival_t *v) {
  if (v->seq) return imp_unsup(m, "a sequence used as a tensor (sequences are lists of values at import: they may not be returned, passed to a subgraph or read by other ops)"), "?";
  if (v->sym) return imp_unsup(m, "a value computed from symbolic sizes used as a tensor"), "?";
  if (!v->declared && v->data) {
    if (m->nweights == m->wcap) {
      int cap = m->wcap ? 2 * m->wcap : 32;
      ival_t **p = realloc(m->weights, sizeof *p * (size_t)cap);
      if (!p) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), "?";
      m->weights = p;
      m->wcap = cap;
    }
    m->weights[m->nweights++] = v;
    sb_printf(&m->consts, "const %%%s : ", v->name);
    imp_type_text(m, &m->consts, &v->t);
    sb_printf(&m->consts, " = w[\"%s\"]\n", v->name);
    v->declared = true;
  }
  return v->name;
}

/* t as the .vmasm text writes it (sizes over shape variables by their
 * names), for messages; cut to n */
const char *imp_type_str(imp_t *m, const rill_type_t *t, char *buf, size_t n) {
  sbuf_t b = {0};
  imp_type_text(m, &b, t);
  if (b.oom || !b.p) rill_type_format(t, buf, n);
  else snprintf(buf, n, "%s", b.p);
  free(b.p);
  return buf;
}

void imp_list(imp_t *m, sbuf_t *b, const int64_t *v, int n) {
  sb_printf(b, "[");
  for (int i = 0; i < n; i++) {
    if (i) sb_printf(b, ", ");
    dim_text(m, b, v[i]);
  }
  sb_printf(b, "]");
}

/* A run-time tensor of the sizes v holds (sym data), for a statement that
 * takes them as a tensor (an attention mask scaled by the length): each
 * number a constant, each size over shape variables counted at run time as
 * the sum of ones broadcast to that length (one small kernel; the language
 * reads sizes into types, not values), concatenated in v's shape. Made
 * once per value. */
ival_t *imp_sizes_tensor(imp_t *m, ival_t *v) {
  if (v->rt) return v->rt;
  size_t k = imp_numel(&v->t);
  if (k > 64) return imp_unsup(m, "%zu sizes over shape variables used as a tensor", k);
  const int64_t *d = v->data;
  ival_t *parts[64];
  rill_type_t one = {RILL_I64, 1, {1}}, all = {RILL_I64, 1, {(int64_t)k}};
  for (size_t i = 0; i < k; i++) {
    if (!isa_dim_is_sym(d[i])) {
      parts[i] = imp_const(m, &one, &d[i]);
    } else {
      rill_type_t bt = {RILL_I64, 1, {d[i]}};
      ival_t *ones = imp_broadcast(m, NULL, imp_scalar_int(m, RILL_I64, 1), &bt);
      parts[i] = ones ? imp_emit(m, NULL, &one, "sum", &ones, 1, "axes=[0], keepdims=true") : NULL;
    }
    if (!parts[i]) return NULL;
  }
  ival_t *flat = k == 1 ? parts[0] : imp_emit(m, NULL, &all, "concat", parts, (int)k, "axis=0");
  rill_type_t t = v->t;
  t.dtype = RILL_I64;
  v->rt = flat ? imp_reshape(m, NULL, flat, &t) : NULL;
  return v->rt;
}


/* ---- the model ---- */
static void imp_free(imp_t *m) {
  for (int i = 0; i < m->nvals; i++) {
    free(m->vals[i]->onnx);
    free(m->vals[i]->name);
    if (!m->vals[i]->borrowed) free(m->vals[i]->data);
    free(m->vals[i]->items);
    onnx_dq_free(m->vals[i]->dq);
    free(m->vals[i]);
  }
  free(m->vals);
  free(m->weights);
  free(m->body.p);
  free(m->consts.p);
  free(m->funcs.p);
  free(m->caps);
  free(m->skip);
  free(m->by_onnx.slot);
  free(m->by_name.slot);
  isa_syms_free(&m->syms);
  rill_status_free(m->err);
}

/* A model's constants bound the sizes it takes: a table of 512 positions
 * sliced to the sequence's length bounds the length by 512, and a range over
 * a size is a slice of a constant table that must have an end. Where a
 * mapping needs such a bound and the user gave the variable no range
 * (--shape NAME=LO..HI), the variable's range is narrowed to the sizes at
 * which the model is defined, and the module declares it (`dim S in [1,
 * 512]`: a run at another size is refused with the range, where PyTorch would
 * fail on an index). A narrower range keeps every earlier mapping's
 * conclusions true (each holds at every size in the wider one), so the
 * import goes on. Only one variable is narrowed for d, the first whose range
 * alone can bring d inside; the search is over the variable's bounds, as
 * isa_sym_bounds computes d's interval (which widens as they do). */
bool imp_sym_fit(imp_t *m, int64_t d, int64_t lo_min, int64_t hi_max) {
  int64_t lo, hi;
  if (!isa_dim_is_sym(d)) return d >= lo_min && d <= hi_max;
  if (!isa_sym_bounds(&m->syms, d, &lo, &hi)) return false;
  if (lo >= lo_min && hi <= hi_max) return true;
  for (size_t i = 0; i < m->syms.vars.len && i < 64; i++) {
    if (m->user_ranged & ((uint64_t)1 << i)) continue;
    isa_symvar_t *v = &m->syms.vars.items[i];
    int64_t vlo = v->lo, vhi = v->hi, cap = (int64_t)1 << 40;
    /* the largest upper end that keeps d <= hi_max, then the smallest lower end that keeps d >= lo_min */
    int64_t a = vlo, b = vhi < cap ? vhi : cap;
    v->hi = a;
    if (!isa_sym_bounds(&m->syms, d, &lo, &hi) || hi > hi_max) {
      v->hi = vhi;
      continue;
    }
    while (a < b) { /* invariant: hi(d) <= hi_max at v->hi = a */
      int64_t mid = a + (b - a + 1) / 2;
      v->hi = mid;
      if (isa_sym_bounds(&m->syms, d, &lo, &hi) && hi <= hi_max) a = mid;
      else b = mid - 1;
    }
    v->hi = a;
    int64_t c = v->lo, e = v->hi;
    v->lo = e;
    if (!isa_sym_bounds(&m->syms, d, &lo, &hi) || lo < lo_min) {
      v->lo = vlo, v->hi = vhi;
      continue;
    }
    while (c < e) { /* invariant: lo(d) >= lo_min at v->lo = e */
      int64_t mid = c + (e - c) / 2;
      v->lo = mid;
      if (isa_sym_bounds(&m->syms, d, &lo, &hi) && lo >= lo_min) e = mid;
      else c = mid + 1;
    }
    v->lo = e;
    if (isa_sym_bounds(&m->syms, d, &lo, &hi) && lo >= lo_min && hi <= hi_max) {
      v->declared = true;
      return true;
    }
    v->lo = vlo, v->hi = vhi;
  }
  return false;
}

void imp_ranges_save(imp_t *m, imp_ranges_t *r) {
  r->n = m->syms.vars.len < 64 ? m->syms.vars.len : 64;
  for (size_t i = 0; i < r->n; i++) {
    const isa_symvar_t *v = &m->syms.vars.items[i];
    r->lo[i] = v->lo, r->hi[i] = v->hi, r->declared[i] = v->declared;
  }
}

void imp_ranges_restore(imp_t *m, const imp_ranges_t *r) {
  for (size_t i = 0; i < r->n && i < m->syms.vars.len; i++) {
    isa_symvar_t *v = &m->syms.vars.items[i];
    v->lo = r->lo[i], v->hi = r->hi[i], v->declared = r->declared[i];
  }
}

int64_t imp_opt_shape(const onnx_options_t *o, const char *name) {
  for (int i = 0; o && i < o->nshapes; i++)
    if (!strcmp(o->shape_names[i], name) && o->shape_values[i] >= 0) return o->shape_values[i];
  return -1; /* none, or a range only: symbolic */
}

int64_t imp_shape_option(imp_t *m, const char *name) { return imp_opt_shape(m->opt, name); }

bool imp_opt_range(const onnx_options_t *o, const char *name, int64_t *lo, int64_t *hi) {
  for (int i = 0; o && i < o->nshapes; i++)
    if (!strcmp(o->shape_names[i], name) && o->shape_values[i] < 0 && !o->shape_whole[i]) {
      *lo = o->shape_lo[i];
      *hi = o->shape_hi[i];
      return true;
    }
  return false;
}

/* v's tensors appended to *out (a tensor itself; a sequence's or an
 * optional's values, nested lists flattened, in order) */
static bool flatten(imp_t *m, ival_t *v, ival_t ***out, int *n) {
  if (v->seq) {
    for (int i = 0; i < v->nitems; i++)
      if (!flatten(m, v->items[i], out, n)) return false;
    return true;
  }
  ival_t **p = realloc(*out, sizeof *p * (size_t)(*n + 1));
  if (!p) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  *out = p;
  p[(*n)++] = v;
  return true;
}

bool imp_input_type(imp_t *m, const Onnx__ValueInfoProto *vi, rill_type_t *t) {
  const char *nm = vi->name ? vi->name : "(unnamed)";
  if (!vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !vi->type->tensor_type)
    return imp_unsup(m, "graph input '%.200s' is not a tensor", nm), false;
  return imp_tensor_input_type(m, nm, vi->type->tensor_type, -1, t);
}

/* elem >= 0: item elem of a sequence input, whose symbolic dimension P is
 * the shape variable P_elem (the items' sizes may differ) */
bool imp_tensor_input_type(imp_t *m, const char *nm, const Onnx__TypeProto__Tensor *tt, int elem, rill_type_t *t) {
  if (!tt->has_elem_type || !onnx_dtype(tt->elem_type, &t->dtype))
    return imp_unsup(m, "graph input '%.200s': data type %s", nm, onnx_dtype_name(tt->has_elem_type ? tt->elem_type : 0)), false;
  const onnx_options_t *o = m->opt;
  for (int k = 0; o && k < o->nshapes; k++)
    if (o->shape_whole[k] && !strcmp(o->shape_names[k], nm)) { /* the whole shape given */
      t->rank = o->shape_whole[k] - 1;
      if (tt->shape && (int)tt->shape->n_dim != t->rank)
        return imp_fail(m, RILL_INVALID_ARGUMENT, "--shape %.200s: rank %d, the model's input has rank %zu", nm, t->rank, tt->shape->n_dim), false;
      for (int d = 0; d < t->rank; d++) {
        t->dims[d] = o->shape_dims[k][d];
        const Onnx__TensorShapeProto__Dimension *md = tt->shape ? tt->shape->dim[d] : NULL;
        if (md && md->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && md->dim_value != t->dims[d])
          return imp_fail(m, RILL_INVALID_ARGUMENT, "--shape %.200s: dimension %d is %lld, the model's %lld", nm, d, (long long)t->dims[d], (long long)md->dim_value), false;
      }
      return imp_type_ok(m, t);
    }
  if (!tt->shape) return imp_unsup(m, "graph input '%.200s' has no shape (give --shape '%.200s=[D1,D2,...]')", nm, nm), false;
  if (tt->shape->n_dim > RILL_MAX_RANK) return imp_unsup(m, "graph input '%.200s' of rank %zu (at most %d)", nm, tt->shape->n_dim, RILL_MAX_RANK), false;
  t->rank = (int)tt->shape->n_dim;
  for (int i = 0; i < t->rank; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      t->dims[i] = d->dim_value;
    } else {
      const char *p = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param ? d->dim_param : "";
      int64_t v = *p ? imp_opt_shape(m->opt, p) : -1;
      if (v < 0 && elem < 0) v = imp_opt_shape(m->opt, nm);
      char pe[160];
      if (*p && elem >= 0) snprintf(pe, sizeof pe, "%.100s_%d", p, elem), p = pe;
      if (v < 0 && *p && m->symbolic) {
        /* the shape variable NAME, with the range --shape NAME=LO..HI gives */
        uint32_t var;
        rill_status_t st = isa_syms_var(&m->syms, p, strlen(p), &var);
        if (!st) st = isa_syms_var_dim(&m->syms, var, &v);
        if (st) {
          imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
          rill_status_free(st);
          return false;
        }
        int64_t lo, hi;
        if (imp_opt_range(m->opt, p, &lo, &hi)) {
          isa_symvar_t *sv = &m->syms.vars.items[var];
          sv->lo = lo, sv->hi = hi, sv->declared = true;
          if (var < 64) m->user_ranged |= (uint64_t)1 << var;
        }
        t->dims[i] = v;
        continue;
      }
      if (v < 0) {
        if (*p) return imp_unsup(m, "graph input '%.200s' has symbolic dimension '%.100s' (give --shape %.100s=N)", nm, p, p), false;
        return imp_unsup(m, "graph input '%.200s' has unknown dimension %d (give --shape %.200s=N)", nm, i, nm), false;
      }
      t->dims[i] = v;
    }
    if (t->dims[i] < 0) return imp_fail(m, RILL_MALFORMED, "graph input '%.200s': negative dimension", nm), false;
  }
  return imp_type_ok(m, t);
}

bool imp_initializer(imp_t *m, const Onnx__TensorProto *tp, const onnx_raw_t *raw) {
  rill_type_t t;
  void *data;
  bool borrowed;
  rill_status_t st = onnx_tensor_read(tp, m->base_dir, raw, &t, &data, &borrowed);
  if (st) {
    imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
    rill_status_free(st);
    return false;
  }
  if (imp_find(m, tp->name)) {
    if (!borrowed) free(data);
    return imp_fail(m, RILL_MALFORMED, "initializer '%.200s' is defined twice", tp->name), false;
  }
  ival_t *v = imp_new(m, tp->name, &t);
  if (!v) {
    if (!borrowed) free(data);
    return false;
  }
  v->data = data;
  v->borrowed = borrowed;
  return true;
}

/* The nodes of graph g, in order: ONNX lists them sorted, so an input not
 * yet defined is missing or on a cycle. An input from an enclosing graph
 * (a subgraph's) is taken through imp_lookup. False after a failure. */
static bool skipped(const imp_t *m, const Onnx__NodeProto *n) {
  for (int i = 0; i < m->nskip; i++)
    if (m->skip[i] == n) return true;
  return false;
}

bool imp_nodes(imp_t *m, const Onnx__GraphProto *g) {
  const Onnx__NodeProto *outer = m->node;
  const Onnx__GraphProto *outer_g = m->graph;
  m->graph = g;
  for (size_t i = 0; i < g->n_node && !m->err; i++) {
    const Onnx__NodeProto *n = g->node[i];
    if (skipped(m, n)) continue; /* imported with an earlier node (onnx_qdq_fuse) */
    m->node = n;
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) {
      imp_unsup(m, "op domain '%.100s'", n->domain);
      break;
    }
    if (!n->op_type) {
      imp_fail(m, RILL_MALFORMED, "node without an op type");
      break;
    }
    ival_t *in[ONNX_MAX_INPUTS] = {0};
    if (n->n_input > ONNX_MAX_INPUTS) {
      imp_unsup(m, "%zu inputs (at most %d)", n->n_input, ONNX_MAX_INPUTS);
      break;
    }
    for (size_t k = 0; k < n->n_input && !m->err; k++) {
      if (!n->input[k] || !*n->input[k]) continue; /* an optional input left out */
      in[k] = imp_lookup(m, n->input[k]);
      if (!in[k]) {
        bool later = false;
        for (size_t j = i + 1; j < g->n_node && !later; j++)
          for (size_t o = 0; o < g->node[j]->n_output; o++)
            if (g->node[j]->output[o] && !strcmp(g->node[j]->output[o], n->input[k])) later = true;
        imp_fail(m, RILL_MALFORMED, "input '%.200s' %s", n->input[k],
                 later ? "is produced by a later node (the graph has a cycle or is not sorted)" : "is not defined by any node, initializer or graph input");
      }
    }
    for (size_t k = 0; k < n->n_output && !m->err; k++)
      if (n->output[k] && *n->output[k] && imp_find(m, n->output[k])) imp_fail(m, RILL_MALFORMED, "value '%.200s' is defined twice", n->output[k]);
    if (m->err) break;
    onnx_op_fn fn = onnx_op_find(n->op_type);
    if (!fn) {
      imp_unsup(m, "op type %.100s", n->op_type);
      break;
    }
    const char *unknown = onnx_op_unknown_attr(n->op_type, n);
    if (unknown) {
      imp_unsup(m, "attribute '%.100s'", unknown);
      break;
    }
    bool seqop = onnx_op_find(n->op_type) == onnx_op_sequence || fn == onnx_op_sequence_map || fn == onnx_op_optional || fn == onnx_op_loop || !strcmp(n->op_type, "Identity");
    for (size_t k = 0; k < n->n_input && !seqop && !m->err; k++)
      if (in[k] && in[k]->seq) imp_unsup(m, "input '%.200s', %s, read by an op that takes tensors", n->input[k], in[k]->opt ? "an optional" : "a sequence");
    if (m->err) break;
    if (!onnx_op_symbolic(n->op_type)) {
      /* a mapping that works on numbers only: not given sizes over shape
       * variables (the inputs', or sizes read back at run time) */
      bool sym = false;
      for (size_t k = 0; k < n->n_input; k++) sym |= in[k] && imp_has_sym(in[k]);
      if (sym) {
        imp_unsup(m, "symbolic sizes (an input depends on a shape variable)");
        break;
      }
    }
    if (!fn(m, n, in, (int)n->n_input) && !m->err) imp_fail(m, RILL_INTERNAL, "mapping failed");
    /* every output that a later node or the graph reads must now be bound */
    for (size_t k = 0; k < n->n_output && !m->err; k++)
      if (n->output[k] && *n->output[k] && !imp_find(m, n->output[k])) {
        bool used = false;
        for (size_t j = i + 1; j < g->n_node && !used; j++)
          for (size_t q = 0; q < g->node[j]->n_input && !skipped(m, g->node[j]); q++)
            if (g->node[j]->input[q] && !strcmp(g->node[j]->input[q], n->output[k])) used = true;
        for (size_t q = 0; q < g->n_output && !used; q++)
          if (g->output[q]->name && !strcmp(g->output[q]->name, n->output[k])) used = true;
        if (used) imp_unsup(m, "output %zu ('%.200s')", k, n->output[k]);
      }
  }
  if (!m->err) m->node = outer;
  m->graph = outer_g;
  return !m->err;
}

static rill_status_t import_model(imp_t *m, const Onnx__ModelProto *model, onnx_result_t *out) {
  const Onnx__GraphProto *g = model->graph;
  if (!g) return rill_status_new(RILL_MALFORMED, "not an ONNX model: no graph");
  m->opset = -1;
  for (size_t i = 0; i < model->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = model->opset_import[i];
    if (!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx")) m->opset = o->has_version ? (int)o->version : -1;
  }
  if (m->opset < 0 && model->n_opset_import)
    return rill_status_new(RILL_UNIMPLEMENTED, "only ops of domain '%.100s' (not the default domain)",
                           model->opset_import[0]->domain ? model->opset_import[0]->domain : "");
  if (m->opset < 0) return rill_status_new(RILL_MALFORMED, "not an ONNX model: no opset of the default domain");
  /* 7 to 22 are the opsets the mappings follow; older models are read where
   * their ops mean the same (legacy attributes are checked per op). Of the
   * changes after 17: the reductions' axes and Pad's axes became inputs and
   * Split took num_outputs (18), Cast took saturate (19, float8 only),
   * GridSample's modes were renamed and Gelu came (20), GroupNormalization's
   * scale and bias went per channel (21); the rest widened dtypes the reader
   * checks itself (ONNX_MAX_OPSET). */
  if (m->opset < 1 || m->opset > ONNX_MAX_OPSET)
    return rill_status_new(RILL_UNIMPLEMENTED, "opset %d of the default domain (1 to %d are supported)", m->opset, ONNX_MAX_OPSET);
  if (g->n_sparse_initializer) return rill_status_new(RILL_UNIMPLEMENTED, "sparse initializers are not supported");
  /* initializers: known values */
  for (size_t i = 0; i < g->n_initializer && !m->err; i++) {
    const Onnx__TensorProto *tp = g->initializer[i];
    if (!tp->name || !*tp->name) return rill_status_new(RILL_MALFORMED, "initializer %zu has no name", i);
    if (!imp_initializer(m, tp, i < m->nraw ? &m->raw[i] : NULL)) break;
  }
  /* inputs that are not initializers: parameters */
  sbuf_t sig = {0};
  sb_printf(&sig, "func @main(");
  int np = 0;
  for (size_t i = 0; i < g->n_input && !m->err; i++) {
    const Onnx__ValueInfoProto *vi = g->input[i];
    if (!vi->name || !*vi->name) {
      imp_fail(m, RILL_MALFORMED, "graph input %zu has no name", i);
      break;
    }
    if (imp_find(m, vi->name)) continue;
    if (vi->type && (vi->type->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE || vi->type->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE)) {
      /* a sequence of a length given, an optional given present or not:
       * its values are parameters */
      ival_t *s = imp_list_input(m, vi->name, vi->type), **vals = NULL;
      int nv = 0;
      if (!s || !flatten(m, s, &vals, &nv)) break;
      for (int k = 0; k < nv; k++, np++) {
        sb_printf(&sig, "%s%%%s: ", np ? ", " : "", vals[k]->name);
        imp_type_text(m, &sig, &vals[k]->t);
      }
      free(vals);
      continue;
    }
    rill_type_t t;
    if (!imp_input_type(m, vi, &t)) break;
    ival_t *v = imp_new(m, vi->name, &t);
    if (!v) break;
    v->declared = v->param = true;
    sb_printf(&sig, "%s%%%s: ", np ? ", " : "", v->name);
    imp_type_text(m, &sig, &t);
    np++;
  }
  imp_nodes(m, g);
  m->node = NULL;
  /* outputs */
  sbuf_t ret = {0};
  if (!m->err && g->n_output == 0) imp_fail(m, RILL_MALFORMED, "the graph has no outputs");
  sb_printf(&sig, ") -> (");
  sb_printf(&ret, "  return ");
  /* the results: each output's tensor, or a sequence's or an optional's
   * values (in order, nested lists flattened); a result that is a
   * parameter, a constant or another result gets a copy of its own,
   * written even where the value is known (a result is made by the
   * program) */
  int nres = 0, nleaf = 0;
  ival_t **leaf = NULL;
  for (size_t i = 0; i < g->n_output && !m->err; i++) {
    const char *nm = g->output[i]->name;
    ival_t *v = nm ? imp_find(m, nm) : NULL;
    if (!v) {
      imp_fail(m, RILL_MALFORMED, "graph output '%.200s' is not defined", nm ? nm : "(unnamed)");
      break;
    }
    if (!flatten(m, v, &leaf, &nleaf)) break;
  }
  for (int i = 0; i < nleaf && !m->err; i++) {
    ival_t *v = leaf[i];
    bool again = false;
    for (int k = 0; k < i; k++) again |= leaf[k] == v;
    if (v->data || again || v->param) {
      ival_t *c = imp_new(m, NULL, &v->t);
      if (c) imp_emit_head(m, &c, 1, "copy", &v, 1, NULL);
      if (!(v = c)) break;
    }
    sb_printf(&sig, "%s", nres ? ", " : "");
    imp_type_text(m, &sig, &v->t);
    sb_printf(&ret, "%s%%%s", nres ? ", " : "", v->name);
    nres++;
  }
  free(leaf);
  sb_printf(&sig, ") {\n");
  sb_printf(&ret, "\n}\n");
  rill_status_t st = NULL;
  if (!m->err && (sig.oom || ret.oom || m->body.oom || m->consts.oom || m->funcs.oom)) imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  if (!m->err) {
    sbuf_t text = {0};
    const char *wf = m->opt && m->opt->weights_file ? m->opt->weights_file : "weights.safetensors";
    /* the producer's name escaped: a newline in it would end the comment */
    char producer[256] = "";
    if (model->producer_name) rill_escape(model->producer_name, strlen(model->producer_name), producer, sizeof producer);
    sb_printf(&text, "# imported from ONNX (opset %d%s%s)\n", m->opset, *producer ? ", produced by " : "", producer);
    sb_printf(&text, "weights \"%s\" as w\n", wf);
    for (size_t i = 0; i < m->syms.vars.len; i++) {
      const isa_symvar_t *sv = &m->syms.vars.items[i];
      if (sv->declared) sb_printf(&text, "dim %s in [%lld, %lld]\n", sv->name, (long long)sv->lo, (long long)sv->hi);
    }
    if (m->consts.len) sb_printf(&text, "%s", m->consts.p);
    if (m->funcs.len) sb_printf(&text, "%s", m->funcs.p);
    sb_printf(&text, "%s%s%s", sig.p, m->body.len ? m->body.p : "", ret.p);
    if (text.oom) {
      free(text.p);
      imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    } else {
      if (m->keep_parts) {
        /* the pieces keep the weights' data: taken from the values */
        st = onnx_safetensors_parts(m->weights, m->nweights, &out->parts);
        if (!st && !(out->parts->owned = calloc((size_t)(m->nweights ? m->nweights : 1), sizeof(void *)))) {
          onnx_parts_free(out->parts);
          out->parts = NULL;
          st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
        }
        for (int i = 0; !st && i < m->nweights; i++)
          if (!m->weights[i]->borrowed) {
            out->parts->owned[out->parts->nowned++] = m->weights[i]->data;
            m->weights[i]->data = NULL;
          }
      } else {
        st = onnx_safetensors(m->weights, m->nweights, &out->weights, &out->weights_len);
      }
      if (st) free(text.p);
      else {
        out->vmasm = text.p;
        out->vmasm_len = text.len;
        out->ninputs = np;
        out->noutputs = nres;
      }
    }
  }
  free(sig.p);
  free(ret.p);
  if (m->err) {
    st = m->err;
    m->err = NULL;
  }
  return st;
}

bool onnx_result_write_weights(const onnx_result_t *r, FILE *f) {
  if (!r->parts) return fwrite(r->weights, 1, r->weights_len, f) == r->weights_len;
  const struct onnx_parts *p = r->parts;
  bool ok = fwrite(p->head, 1, p->head_len, f) == p->head_len;
  for (int i = 0; ok && i < p->n; i++) ok = fwrite(p->ptr[i], 1, p->len[i], f) == p->len[i];
  return ok;
}

bool onnx_available(const char **out_why) {
  if (out_why) *out_why = NULL;
  return true;
}

/* One import with every input dimension concrete (or a refusal naming the
 * symbolic one). */
rill_status_t imp_import_once(const Onnx__ModelProto *model, const char *base_dir, const onnx_options_t *options,
                                 bool symbolic, const onnx_raw_t *raw, size_t nraw, bool keep_parts, onnx_result_t *out) {
  memset(out, 0, sizeof *out);
  imp_t m = {0};
  m.raw = raw;
  m.nraw = nraw;
  m.keep_parts = keep_parts;
  m.base_dir = base_dir;
  m.opt = options;
  m.symbolic = symbolic;
  isa_syms_init(&m.syms, rill_allocator_system());
  rill_status_t st = import_model(&m, model, out);
  imp_free(&m);
  return st;
}


/* The messages name what the model holds (node names, op types, value names,
 * attribute strings, file locations): escaped before they leave, so a name
 * with control bytes never reaches a terminal raw. Escaping the importer's
 * own text changes nothing. */
static rill_status_t safe_status(rill_status_t st) {
  if (!st || rill_status_code(st) == RILL_OUT_OF_MEMORY) return st;
  const char *msg = rill_status_message(st);
  size_t n = strlen(msg);
  char *esc = malloc(4 * n + 1);
  if (!esc) return st;
  rill_status_t e = rill_status_new(rill_status_code(st), "%s", rill_escape(msg, n, esc, 4 * n + 1));
  free(esc);
  if (!e) return st;
  rill_status_free(st);
  return e;
}

/* Imports model bytes; with keep_parts the weights stay pieces (out->parts)
 * that point into data, which must then outlive the result. */
rill_status_t onnx__import(const uint8_t *data, size_t size, const char *base_dir, const onnx_options_t *options, bool keep_parts,
                           onnx_result_t *out) {
  memset(out, 0, sizeof *out);
  /* the initializers' raw data larger than any value folded at import
   * (ONNX_FOLD_MAX elements) stays in the model's bytes: read as bytes only */
  uint8_t *skel;
  size_t skel_len, nraw;
  onnx_raw_t *raw;
  const uint8_t *pb = data;
  size_t npb = size;
  if (onnx_strip(data, size, (size_t)ONNX_FOLD_MAX * 8, &skel, &skel_len, &raw, &nraw)) pb = skel, npb = skel_len;
  Onnx__ModelProto *model = onnx__model_proto__unpack(NULL, npb, pb);
  free(skel);
  if (!model) {
    free(raw);
    return rill_status_new(RILL_MALFORMED, "not an ONNX model (the protobuf message does not parse)");
  }
  symdim_t sd[SYM_MAX];
  int nsym = 0;
  rill_status_t st = imp_find_symbolic(model, options, sd, &nsym);
  if (!st && nsym) {
    /* sizes over shape variables, computed as polynomials; where a mapping
     * cannot take them, the model is imported at probe sizes and the texts
     * merged (import_symbolic) */
    st = imp_import_once(model, base_dir, options, true, raw, nraw, keep_parts, out);
    if (st && rill_status_code(st) != RILL_OUT_OF_MEMORY) {
      rill_status_t sym = st;
      st = imp_import_symbolic(model, base_dir, options, sd, nsym, raw, nraw, out);
      if (st && rill_status_code(st) != RILL_OUT_OF_MEMORY) {
        /* both ways failed: the symbolic import's reason names the node that stopped it */
        rill_status_t both = rill_status_new(rill_status_code(sym), "%s; imported at probe sizes instead: %s", rill_status_message(sym),
                                             rill_status_message(st));
        if (both) {
          rill_status_free(st);
          st = both;
        }
      }
      rill_status_free(sym);
    }
  } else if (!st) {
    st = imp_import_once(model, base_dir, options, false, raw, nraw, keep_parts, out);
  }
  onnx__model_proto__free_unpacked(model, NULL);
  free(raw);
  return safe_status(st);
}

rill_status_t onnx_import_bytes(const uint8_t *data, size_t size, const char *base_dir, const onnx_options_t *options,
                                onnx_result_t *out) {
  return onnx__import(data, size, base_dir, options, false, out);
}

void onnx_result_free(onnx_result_t *r) {
  free(r->vmasm);
  free(r->weights);
  onnx_parts_free(r->parts);
  memset(r, 0, sizeof *r);
}
