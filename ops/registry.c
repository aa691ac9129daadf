/* registry.c: the op table, attribute schemas, and type/shape inference. */
#include "ops.h"

#include "../kernels/cuda/grid_common.h"
#include "../kernels/cuda/resize_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define K(x) (1u << ISA_ATTR_##x)
#define K_NUM (K(INT) | K(FLOAT))
#define K_LIST (K(INTS) | K(INT))

static rill_status_t err(const ops_infer_ctx_t *c, const char *fmt, ...) RILL_PRINTF(2, 3);
static rill_status_t err(const ops_infer_ctx_t *c, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return rill__status(RILL_ASSEMBLY_ERROR, "%s: %s", c->def->name, msg);
}

/* The size expressions of the program being checked (the assembler's), or
 * NULL where every size is a number (the VM's plans, the verifier). */
static _Thread_local isa_syms_t *cur_syms;

static const char *tfmt(const rill_type_t *t, char *buf) { return isa_sym_format_type(cur_syms, t, buf, 96); }
static const char *dfmt(int64_t d, char *buf) { return isa_sym_format(cur_syms, d, buf, 48); }

/* Size arithmetic: numbers, or symbolic sizes where the assembler checks a program with shape variables. */
static rill_status_t size_op(const ops_infer_ctx_t *c, char op, int64_t a, int64_t b, int64_t *out) {
  if (!isa_dim_is_sym(a) && !isa_dim_is_sym(b)) {
    bool ovf = op == '+' ? __builtin_add_overflow(a, b, out) : op == '-' ? __builtin_sub_overflow(a, b, out) : __builtin_mul_overflow(a, b, out);
    return ovf || isa_dim_is_sym(*out) ? err(c, "size arithmetic overflows") : NULL;
  }
  if (!cur_syms) return err(c, "symbolic size outside a program with shape variables");
  rill_status_t st = op == '+' ? isa_sym_add(cur_syms, a, b, out) : op == '-' ? isa_sym_sub(cur_syms, a, b, out) : isa_sym_mul(cur_syms, a, b, out);
  return st ? rill__status_prefix(st, "%s: ", c->def->name) : NULL;
}

rill_status_t ops_size_mul(const ops_infer_ctx_t *c, int64_t a, int64_t b, int64_t *out) { return size_op(c, '*', a, b, out); }

/* Lower and upper bound of a size (numbers are their own bounds); false when unknown. */
static bool size_bounds(int64_t d, int64_t *lo, int64_t *hi) {
  if (!isa_dim_is_sym(d)) { *lo = *hi = d; return true; }
  return cur_syms && isa_sym_bounds(cur_syms, d, lo, hi);
}

/* ---- attributes ---- */
const isa_attr_t *ops_attr(const ops_infer_ctx_t *c, const char *name) {
  for (uint32_t i = 0; i < c->nattrs; i++)
    if (strcmp(c->attrs[i].name, name) == 0) return &c->attrs[i];
  return NULL;
}

static rill_status_t get_int(const ops_infer_ctx_t *c, const char *name, int64_t def, int64_t *out) {
  const isa_attr_t *a = ops_attr(c, name);
  *out = a ? a->ints[0] : def;
  return NULL;
}

static double get_float(const ops_infer_ctx_t *c, const char *name, double def, bool *present) {
  const isa_attr_t *a = ops_attr(c, name);
  if (present) *present = a != NULL;
  if (!a) return def;
  return a->kind == ISA_ATTR_FLOAT ? a->floats[0] : (double)a->ints[0];
}

static bool get_bool(const ops_infer_ctx_t *c, const char *name, bool def) {
  const isa_attr_t *a = ops_attr(c, name);
  return a ? a->ints[0] != 0 : def;
}

/* An int list (a single int counts as a list of one); NULL when absent. */
static const isa_attr_t *get_ints(const ops_infer_ctx_t *c, const char *name) {
  return ops_attr(c, name);
}

static rill_status_t check_attrs(const ops_infer_ctx_t *c) {
  for (uint32_t i = 0; i < c->nattrs; i++) {
    const isa_attr_t *a = &c->attrs[i];
    const ops_attr_spec_t *s = c->def->attrs;
    while (s && s->name && strcmp(s->name, a->name) != 0) s++;
    if (!s || !s->name) {
      char known[256] = "";
      size_t o = 0;
      for (s = c->def->attrs; s && s->name; s++)
        o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", o ? ", " : "", s->name);
      return err(c, "unknown attribute '%s' (expected %s)", a->name, o ? known : "no attributes");
    }
    if (!(s->kinds & (1u << a->kind))) {
      const char *want = s->kinds & K(INTS) ? "a list of integers"
                         : s->kinds & K(FLOAT) ? "a number"
                         : s->kinds & K(INT)   ? "an integer"
                         : s->kinds & K(BOOL)  ? "a bool"
                         : s->kinds & K(DTYPE) ? "a dtype"
                                               : "a string";
      return err(c, "attribute '%s' expects %s, found %s", a->name, want, isa_attr_kind_name(a->kind));
    }
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(c->attrs[j].name, a->name) == 0) return err(c, "attribute '%s' given twice", a->name);
  }
  return NULL;
}

static rill_status_t norm_axis(const ops_infer_ctx_t *c, int64_t axis, int rank, int64_t *out) {
  int r = rank ? rank : 1; /* a 0-d tensor accepts axis 0 and -1, as in PyTorch */
  if (axis < -r || axis >= r) return err(c, "axis %lld out of range for rank %d (expected %d..%d)", (long long)axis, rank, -r, r - 1);
  *out = axis < 0 ? axis + r : axis;
  return NULL;
}

/* ---- dtype classes ---- */
static bool is_num(rill_dtype_t d) { return d != RILL_BOOL; }
static int cat(rill_dtype_t d) { return d == RILL_BOOL ? 0 : rill__dtypes[d].is_int ? 1 : 2; }

rill_dtype_t ops_promote(rill_dtype_t a, rill_dtype_t b) {
  if (a == b) return a;
  int ca = cat(a), cb = cat(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if ((a == RILL_F16 && b == RILL_BF16) || (a == RILL_BF16 && b == RILL_F16)) return RILL_F32;
    return rill__dtypes[a].size >= rill__dtypes[b].size ? a : b;
  }
  /* integers, as numpy (and PyTorch for u8 with i8): the wider of one
   * signedness; a signed and an unsigned one, the smallest signed type that
   * holds both (i8 with u8 is i16, i32 with u32 is i64), and f64 for u64
   * with a signed one, which no integer type holds. */
  bool sa = rill__dtypes[a].is_signed, sb = rill__dtypes[b].is_signed;
  size_t za = rill__dtypes[a].size, zb = rill__dtypes[b].size;
  if (sa == sb) return za >= zb ? a : b;
  size_t s = sa ? za : zb, u = sa ? zb : za; /* the signed one's size, the unsigned one's */
  if (s > u) return sa ? a : b;
  return u == 1 ? RILL_I16 : u == 2 ? RILL_I32 : u == 4 ? RILL_I64 : RILL_F64;
}

/* PyTorch's rule: a 0-d tensor does not raise the dtype of a dimensioned one of the same class. */
static rill_dtype_t promote_types(const rill_type_t *a, const rill_type_t *b) {
  if ((a->rank == 0) != (b->rank == 0) && cat(a->dtype) == cat(b->dtype))
    return a->rank == 0 ? b->dtype : a->dtype;
  return ops_promote(a->dtype, b->dtype);
}

static rill_status_t need_float(const ops_infer_ctx_t *c, const rill_type_t *t, const char *what) {
  char b[96];
  if (!rill__is_float(t->dtype))
    return err(c, "%s: expected a float tensor (f16, bf16, f32, f64), found %s", what, tfmt(t, b));
  return NULL;
}

static rill_status_t need_num(const ops_infer_ctx_t *c, const rill_type_t *t, const char *what) {
  char b[96];
  if (!is_num(t->dtype)) return err(c, "%s: expected a numeric tensor, found %s", what, tfmt(t, b));
  return NULL;
}

static rill_status_t broadcast(const ops_infer_ctx_t *c, const rill_type_t *a, const rill_type_t *b,
                               rill_type_t *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      char b1[96], b2[96];
      char d1[48], d2[48];
      if (isa_dim_is_sym(da) || isa_dim_is_sym(db))
        return err(c, "shapes %s and %s do not broadcast: sizes %s and %s (dimension %d) cannot be shown equal", tfmt(a, b1),
                   tfmt(b, b2), dfmt(da, d1), dfmt(db, d2), i - r);
      return err(c, "shapes %s and %s do not broadcast (dimension %d: %lld vs %lld)", tfmt(a, b1),
                 tfmt(b, b2), i - r, (long long)da, (long long)db);
    }
    out->dims[i] = da == 1 ? db : da;
  }
  return NULL;
}

/* ---- elementwise ---- */
/* gelu's and geglu's approximate="none" | "tanh". */
static rill_status_t parse_approximate(ops_infer_ctx_t *c) {
  const isa_attr_t *a = ops_attr(c, "approximate");
  if (a && strcmp(a->str, "none") != 0 && strcmp(a->str, "tanh") != 0)
    return err(c, "attribute 'approximate' expects \"none\" or \"tanh\", found \"%s\"", a->str);
  c->p->gelu_tanh = a && strcmp(a->str, "tanh") == 0;
  return NULL;
}

static rill_status_t infer_unary(ops_infer_ctx_t *c) {
  const rill_type_t *t = &c->in[0];
  ops_params_t *p = c->p;
  p->code = c->def->code;
  c->out[0] = *t;
  p->compute = t->dtype;
  enum { EW_FLOAT, EW_NUM, EW_ANY };
  static const int domain[] = {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) DOM,
#define EW_BINARY(ID, NAME, RES, FE, IE)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
  };
  if (domain[p->code] == EW_FLOAT) RILL_TRY(need_float(c, t, "operand"));
  if (domain[p->code] == EW_NUM) RILL_TRY(need_num(c, t, "operand"));
  switch (p->code) {
    case U_CLIP:
      p->lo = get_float(c, "min", 0, &p->has_lo);
      p->hi = get_float(c, "max", 0, &p->has_hi);
      break;
    case U_CAST: {
      const isa_attr_t *a = ops_attr(c, "dtype");
      if (!a) return err(c, "missing attribute 'dtype'");
      c->out[0].dtype = (rill_dtype_t)a->ints[0];
      break;
    }
    case U_LOGICAL_NOT: c->out[0].dtype = RILL_BOOL; break;
    case U_GELU: RILL_TRY(parse_approximate(c)); break;
    case U_LEAKY_RELU: p->alpha = get_float(c, "alpha", 0.01, NULL); break;
    default: break;
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_binary(ops_infer_ctx_t *c) {
  const rill_type_t *a = &c->in[0], *b = &c->in[1];
  ops_params_t *p = c->p;
  p->code = c->def->code;
  rill_dtype_t d = promote_types(a, b);
  p->compute = d;
  RILL_TRY(broadcast(c, a, b, &c->out[0]));
  enum { EW_SAME, EW_BOOL };
  static const int result[] = {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE)
#define EW_BINARY(ID, NAME, RES, FE, IE) RES,
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
  };
  if (p->code == B_SWIGLU || p->code == B_GEGLU) {
    /* gated linear units: float operands only */
    RILL_TRY(need_float(c, a, "gate"));
    RILL_TRY(need_float(c, b, "value"));
    if (p->code == B_GEGLU) RILL_TRY(parse_approximate(c));
  }
  if (result[p->code] == EW_BOOL) {
    c->out[0].dtype = RILL_BOOL;
  } else {
    RILL_TRY(need_num(c, a, "first operand"));
    RILL_TRY(need_num(c, b, "second operand"));
    /* True division: integers divide as f32, as torch.div does. */
    if (p->code == B_DIV && !rill__is_float(d)) d = p->compute = RILL_F32;
    c->out[0].dtype = d;
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_where(ops_infer_ctx_t *c) {
  char b1[96];
  if (c->in[0].dtype != RILL_BOOL) return err(c, "condition: expected a bool tensor, found %s", tfmt(&c->in[0], b1));
  rill_type_t t;
  RILL_TRY(broadcast(c, &c->in[0], &c->in[1], &t));
  RILL_TRY(broadcast(c, &t, &c->in[2], &c->out[0]));
  c->out[0].dtype = c->p->compute = promote_types(&c->in[1], &c->in[2]);
  c->nout = 1;
  return NULL;
}

/* ---- reductions ---- */
enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD };

static rill_status_t parse_axes(ops_infer_ctx_t *c, const rill_type_t *t) {
  ops_params_t *p = c->p;
  const isa_attr_t *a = get_ints(c, "axes");
  p->axis_mask = 0;
  if (!a) {
    p->axis_mask = t->rank ? (uint32_t)((1u << t->rank) - 1) : 0;
  } else {
    for (uint32_t i = 0; i < a->count; i++) {
      int64_t ax = 0;
      RILL_TRY(norm_axis(c, a->ints[i], t->rank, &ax));
      if (t->rank == 0) continue;
      if (p->axis_mask & (1u << ax)) return err(c, "axis %lld given twice", (long long)a->ints[i]);
      p->axis_mask |= 1u << ax;
    }
  }
  p->naxes = 0;
  for (int i = 0; i < t->rank; i++)
    if (p->axis_mask & (1u << i)) p->axes[p->naxes++] = i;
  p->keepdims = get_bool(c, "keepdims", false);
  rill_type_t *o = &c->out[0];
  o->dtype = t->dtype;
  o->rank = 0;
  for (int i = 0; i < t->rank; i++) {
    if (!(p->axis_mask & (1u << i))) o->dims[o->rank++] = t->dims[i];
    else if (p->keepdims) o->dims[o->rank++] = 1;
  }
  return NULL;
}

/* Attribute `name` of a softmax, layer_norm or reduction, a prologue or
 * epilogue (ops_fused_apply), where given: n operands of types t (a
 * softmax's prologue reads its mask as x1) and one result of t[0]'s dtype. */
static rill_status_t check_around(ops_infer_ctx_t *c, const char *name, const rill_type_t *t, uint32_t n) {
  const isa_attr_t *a = ops_attr(c, name);
  if (!a) return NULL;
  ops_fused_t f;
  rill_type_t ft[OPS_FUSED_MAX_OUT];
  RILL_TRY(rill__status_prefix(ops_fused_parse(a->str, t, n, &f, ft), "%s: ", name));
  if (f.nout != 1 || ft[0].dtype != t->dtype) return err(c, "%s: expected one result of %s", name, rill_dtype_name(t->dtype));
  return NULL;
}

static rill_status_t infer_reduce(ops_infer_ctx_t *c) {
  const rill_type_t *t = &c->in[0];
  ops_params_t *p = c->p;
  p->code = c->def->code;
  RILL_TRY(parse_axes(c, t));
  if (p->code == R_MEAN) RILL_TRY(need_float(c, t, "operand"));
  /* integers sum in i64 (u64 in u64, the same bits: numpy's rule for unsigned sums) */
  if ((p->code == R_SUM || p->code == R_PROD) && !rill__is_float(t->dtype)) c->out[0].dtype = t->dtype == RILL_U64 ? RILL_U64 : RILL_I64;
  if ((ops_attr(c, "prologue") || ops_attr(c, "epilogue")) && !rill__is_float(t->dtype))
    return err(c, "a prologue or epilogue needs a float operand");
  RILL_TRY(check_around(c, "prologue", t, 1));
  RILL_TRY(check_around(c, "epilogue", &c->out[0], 1));
  if (p->code == R_MAX || p->code == R_MIN) {
    for (int i = 0; i < p->naxes; i++)
      if (t->dims[p->axes[i]] == 0) return err(c, "cannot reduce the empty dimension %lld", (long long)p->axes[i]);
    if (t->rank == 0 || p->naxes == 0) { /* nothing */ }
  }
  p->compute = t->dtype;
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_argmax(ops_infer_ctx_t *c) {
  const rill_type_t *t = &c->in[0];
  ops_params_t *p = c->p;
  RILL_TRY(need_num(c, t, "operand"));
  const isa_attr_t *a = ops_attr(c, "axis");
  p->keepdims = get_bool(c, "keepdims", false);
  rill_type_t *o = &c->out[0];
  o->dtype = RILL_I64;
  size_t numel = 1;
  if (!isa_type_is_sym(t)) rill__type_sizes(t, &numel, NULL);
  else for (int i = 0; i < t->rank; i++) numel *= t->dims[i] == 0 ? 0 : 1;
  if (!a) {
    if (numel == 0) return err(c, "argmax of an empty tensor");
    p->axis = -1;
    o->rank = p->keepdims ? t->rank : 0;
    for (int i = 0; i < o->rank; i++) o->dims[i] = 1;
  } else {
    RILL_TRY(norm_axis(c, a->ints[0], t->rank, &p->axis));
    if (t->rank == 0) {
      p->axis = -1;
      o->rank = 0;
    } else {
      if (t->dims[p->axis] == 0) return err(c, "argmax over the empty dimension %lld", (long long)p->axis);
      o->rank = 0;
      for (int i = 0; i < t->rank; i++) {
        if (i != p->axis) o->dims[o->rank++] = t->dims[i];
        else if (p->keepdims) o->dims[o->rank++] = 1;
      }
    }
  }
  c->nout = 1;
  return NULL;
}

/* nonzero(x) {count=[N]}: i64[rank, N], the coordinates of x's first N
 * nonzero elements in row-major order (columns past the last one are 0);
 * N is usually a shape variable bound from the count (bind_dims). */
static rill_status_t infer_nonzero(ops_infer_ctx_t *c) {
  const rill_type_t *t = &c->in[0];
  const isa_attr_t *a = ops_attr(c, "count");
  if (!a || a->count != 1) return err(c, "nonzero needs count=[N], one size");
  if (!isa_dim_is_sym(a->ints[0]) && a->ints[0] < 0) return err(c, "nonzero's count %lld is negative", (long long)a->ints[0]);
  if (!isa_dim_is_sym(a->ints[0]) && !isa_type_is_sym(t)) {
    size_t numel;
    rill__type_sizes(t, &numel, NULL);
    if ((uint64_t)a->ints[0] > numel) return err(c, "nonzero's count %lld exceeds the operand's %zu elements", (long long)a->ints[0], numel);
  }
  c->out[0] = (rill_type_t){RILL_I64, 2, {t->rank, a->ints[0]}};
  c->nout = 1;
  return NULL;
}

/* nms(boxes [B, N, 4], scores [B, C, N], max_per_class i64, iou_threshold
 * f32, score_threshold? f32) {center_point_box} -> (i64[B*C*N, 3], i64[]):
 * the rows NonMaxSuppression selects, 0 past their count, and the count
 * (bind_dims and a gather take the rows). */
static rill_status_t infer_nms(ops_infer_ctx_t *c) {
  const rill_type_t *b = &c->in[0], *s = &c->in[1];
  if (b->dtype != RILL_F32 || s->dtype != RILL_F32) return err(c, "boxes and scores must be f32");
  if (b->rank != 3 || s->rank != 3 || b->dims[2] != 4 || s->dims[0] != b->dims[0] || s->dims[2] != b->dims[1])
    return err(c, "boxes must be [B, N, 4] and scores [B, C, N]");
  static const rill_dtype_t want[3] = {RILL_I64, RILL_F32, RILL_F32};
  static const char *const what[3] = {"max_per_class", "iou_threshold", "score_threshold"};
  for (uint32_t i = 2; i < c->nin; i++)
    if (c->in[i].dtype != want[i - 2] || c->in[i].rank != 0) return err(c, "%s must be %s[]", what[i - 2], rill_dtype_name(want[i - 2]));
  int64_t cpb;
  RILL_TRY(get_int(c, "center_point_box", 0, &cpb));
  if (cpb != 0 && cpb != 1) return err(c, "center_point_box must be 0 or 1");
  c->p->axis = cpb;
  int64_t bc, rows; /* B * C * N, sizes over shape variables too (a count read back before) */
  RILL_TRY(size_op(c, '*', b->dims[0], s->dims[1], &bc));
  RILL_TRY(size_op(c, '*', bc, b->dims[1], &rows));
  c->out[0] = (rill_type_t){RILL_I64, 2, {rows, 3}};
  c->out[1] = (rill_type_t){RILL_I64, 0, {0}};
  c->nout = 2;
  return NULL;
}

/* ---- normalisation ---- */
static rill_status_t infer_softmax(ops_infer_ctx_t *c) {
  RILL_TRY(need_float(c, &c->in[0], "operand"));
  int64_t axis;
  RILL_TRY(get_int(c, "axis", -1, &axis));
  RILL_TRY(norm_axis(c, axis, c->in[0].rank, &c->p->axis));
  /* `scale` and `divisor` (ours, as `activation` is: -O1 merges a mul or div
   * by a scalar constant before the softmax): the softmax of x * scale /
   * divisor, rounded to the dtype as those ops would */
  c->p->scale = get_float(c, "scale", 1, NULL);
  c->p->divisor = get_float(c, "divisor", 1, NULL);
  if (c->nin == 2) {
    /* a mask, read by the prologue as x1: x's dtype, broadcast to x's shape */
    const rill_type_t *x = &c->in[0], *m = &c->in[1];
    char b1[96], b2[96];
    bool fits = m->dtype == x->dtype && m->rank <= x->rank && ops_attr(c, "prologue");
    for (int i = 1; fits && i <= m->rank; i++) fits = m->dims[m->rank - i] == 1 || m->dims[m->rank - i] == x->dims[x->rank - i];
    if (!fits) return err(c, "operand 2: expected a prologue and %s that broadcasts to %s, found %s", rill_dtype_name(x->dtype), tfmt(x, b1), tfmt(m, b2));
  }
  RILL_TRY(check_around(c, "prologue", c->in, c->nin));
  RILL_TRY(check_around(c, "epilogue", &c->in[0], 1));
  if (ops_attr(c, "prologue") && (c->p->scale != 1 || c->p->divisor != 1)) return err(c, "a prologue with a scale or divisor");
  c->p->code = c->def->code;
  c->out[0] = c->in[0];
  c->nout = 1;
  return NULL;
}

/* layer_norm's and rms_norm's input: a float x, `axis` (normalising dims
 * axis..end) and `eps`; the normalised shape into norm. */
static rill_status_t norm_input(ops_infer_ctx_t *c, double eps, rill_type_t *norm) {
  const rill_type_t *x = &c->in[0];
  RILL_TRY(need_float(c, x, "input"));
  int64_t axis;
  RILL_TRY(get_int(c, "axis", -1, &axis));
  if (x->rank == 0) return err(c, "input must have at least one dimension");
  RILL_TRY(norm_axis(c, axis, x->rank, &c->p->axis));
  c->p->eps = get_float(c, "eps", eps, NULL);
  *norm = (rill_type_t){x->dtype, x->rank - (int)c->p->axis, {0}};
  for (int i = 0; i < norm->rank; i++) norm->dims[i] = x->dims[c->p->axis + i];
  return NULL;
}

static rill_status_t infer_layer_norm(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96], b2[96];
  rill_type_t norm;
  RILL_TRY(norm_input(c, 1e-5, &norm));
  /* gamma and beta in x's dtype, or both f32 for an f16 or bf16 x (an f32
   * program run in half keeps its norms' parameters: --precision=f16) */
  if (c->nin > 1 && c->in[1].dtype == RILL_F32 && (x->dtype == RILL_F16 || x->dtype == RILL_BF16)) norm.dtype = RILL_F32;
  for (uint32_t i = 1; i < c->nin && i < 3; i++)
    if (!rill__type_eq(&c->in[i], &norm))
      return err(c, "%s: expected %s (the normalised shape), found %s", i == 1 ? "gamma" : "beta",
                 tfmt(&norm, b1), tfmt(&c->in[i], b2));
  /* A fourth operand z is added to x first (rounded to x's dtype, as an
   * add before it would): -O1 merges add(a, z) into the layer_norm after it. */
  if (c->nin > 3 && !rill__type_eq(&c->in[3], x))
    return err(c, "residual: expected %s (the input's type), found %s", tfmt(x, b1), tfmt(&c->in[3], b2));
  RILL_TRY(check_around(c, "epilogue", x, 1));
  c->out[0] = *x;
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_batch_norm(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96], b2[96];
  RILL_TRY(need_float(c, x, "input"));
  if (x->rank < 2) return err(c, "input: expected rank 2 or more (N, C, ...), found %s", tfmt(x, b1));
  rill_type_t ch = {x->dtype, 1, {x->dims[1]}};
  static const char *names[] = {"", "scale", "bias", "mean", "var"};
  for (int i = 1; i < 5; i++)
    if (!rill__type_eq(&c->in[i], &ch))
      return err(c, "%s: expected %s, found %s", names[i], tfmt(&ch, b1), tfmt(&c->in[i], b2));
  c->p->eps = get_float(c, "eps", 1e-5, NULL);
  c->out[0] = *x;
  c->nout = 1;
  return NULL;
}

/* ---- linear algebra ---- */
/* activation="relu" | "gelu" | "gelu_tanh" (float results only). */
static rill_status_t parse_act(ops_infer_ctx_t *c, const rill_type_t *t) {
  const isa_attr_t *a = ops_attr(c, "activation");
  c->p->act = OPS_ACT_NONE;
  if (!a) return NULL;
  if (!strcmp(a->str, "relu")) c->p->act = OPS_ACT_RELU;
  else if (!strcmp(a->str, "gelu")) c->p->act = OPS_ACT_GELU;
  else if (!strcmp(a->str, "gelu_tanh")) c->p->act = OPS_ACT_GELU_TANH;
  else return err(c, "attribute 'activation' expects \"relu\", \"gelu\" or \"gelu_tanh\", found \"%s\"", a->str);
  return need_float(c, t, "an activation's operand");
}

/* layout="nchw" (the default) or "nhwc": channels last, for rank 4 only. */
static rill_status_t parse_layout(ops_infer_ctx_t *c, const rill_type_t *x) {
  const isa_attr_t *a = ops_attr(c, "layout");
  c->p->nhwc = false;
  if (!a || !strcmp(a->str, "nchw")) return NULL;
  if (strcmp(a->str, "nhwc")) return err(c, "attribute 'layout' expects \"nchw\" or \"nhwc\", found \"%s\"", a->str);
  if (x->rank != 4) return err(c, "layout \"nhwc\" needs an input of rank 4, found rank %d", x->rank);
  c->p->nhwc = true;
  return NULL;
}

/* Integer-list attribute `name` as a permutation of rank axes (negative
 * axes count from the end) into perm; absent: the identity. */
static rill_status_t parse_perm(ops_infer_ctx_t *c, const char *name, int rank, int64_t *perm) {
  const isa_attr_t *a = get_ints(c, name);
  for (int i = 0; i < rank; i++) perm[i] = i;
  if (!a) return NULL;
  if ((int)a->count != rank) return err(c, "%s has %u entries, its operand has rank %d", name, a->count, rank);
  uint32_t seen = 0;
  for (int i = 0; i < rank; i++) {
    int64_t ax = 0;
    RILL_TRY(norm_axis(c, a->ints[i], rank, &ax));
    if (seen & (1u << ax)) return err(c, "%s is not a permutation (axis %lld repeats)", name, (long long)ax);
    seen |= 1u << ax;
    perm[i] = ax;
  }
  return NULL;
}

/* t's dims permuted: dims[i] of the result are t's dims[perm[i]]. */
static rill_type_t permuted(const rill_type_t *t, const int64_t *perm) {
  rill_type_t o = *t;
  for (int i = 0; i < t->rank; i++) o.dims[i] = t->dims[perm[i]];
  return o;
}

/* matmul(a, b) {perm_a, perm_b, perm_y} (ours, like `activation`: -O1
 * merges the transposes around a product into it) is
 * transpose(matmul(transpose(a, perm_a), transpose(b, perm_b)), perm_y):
 * the operands read, and the result written, through the permutations. */
static rill_status_t infer_matmul(ops_infer_ctx_t *c) {
  rill_type_t pa, pb;
  RILL_TRY(parse_perm(c, "perm_a", c->in[0].rank, c->p->mm_perm[0]));
  RILL_TRY(parse_perm(c, "perm_b", c->in[1].rank, c->p->mm_perm[1]));
  pa = permuted(&c->in[0], c->p->mm_perm[0]);
  pb = permuted(&c->in[1], c->p->mm_perm[1]);
  const rill_type_t *a = &pa, *b = &pb;
  char b1[96], b2[96];
  RILL_TRY(need_num(c, a, "first operand"));
  RILL_TRY(parse_act(c, a));
  if (a->dtype != b->dtype) return err(c, "operands must have the same dtype, found %s and %s", tfmt(a, b1), tfmt(b, b2));
  if (a->rank < 1 || b->rank < 1) return err(c, "operands must have at least one dimension, found %s and %s", tfmt(a, b1), tfmt(b, b2));
  int64_t k1 = a->dims[a->rank - 1];
  int64_t k2 = b->rank == 1 ? b->dims[0] : b->dims[b->rank - 2];
  char d1[48], d2[48];
  if (k1 != k2) return err(c, "inner dimensions differ: %s @ %s (%s vs %s%s)", tfmt(a, b1), tfmt(b, b2), dfmt(k1, d1), dfmt(k2, d2),
                           isa_dim_is_sym(k1) || isa_dim_is_sym(k2) ? ": cannot be shown equal" : "");
  rill_type_t ba = {a->dtype, a->rank > 2 ? a->rank - 2 : 0, {0}}, bb = {b->dtype, b->rank > 2 ? b->rank - 2 : 0, {0}};
  memcpy(ba.dims, a->dims, sizeof(int64_t) * (size_t)ba.rank);
  memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.rank);
  rill_type_t *o = &c->out[0];
  RILL_TRY(broadcast(c, &ba, &bb, o));
  if (a->rank >= 2) o->dims[o->rank++] = a->dims[a->rank - 2];
  if (b->rank >= 2) o->dims[o->rank++] = b->dims[b->rank - 1];
  if (o->rank > RILL_MAX_RANK) return err(c, "result rank above %d", RILL_MAX_RANK);
  o->dtype = a->dtype;
  RILL_TRY(parse_perm(c, "perm_y", o->rank, c->p->mm_perm[2]));
  *o = permuted(o, c->p->mm_perm[2]);
  c->p->mm_permuted = ops_attr(c, "perm_a") || ops_attr(c, "perm_b") || ops_attr(c, "perm_y");
  c->nout = 1;
  return NULL;
}

/* weight="nk" (the default: w [out, in], F.linear's) or "kn" (w [in, out],
 * as ONNX exporters write a MatMul's weight: read as it lies, not
 * transposed at assembly). */
static rill_status_t infer_linear(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *w = &c->in[1];
  char b1[96], b2[96];
  RILL_TRY(need_num(c, x, "input"));
  RILL_TRY(parse_act(c, x));
  const isa_attr_t *wa = ops_attr(c, "weight");
  if (wa && strcmp(wa->str, "nk") && strcmp(wa->str, "kn")) return err(c, "attribute 'weight' expects \"nk\" or \"kn\", found \"%s\"", wa->str);
  bool kn = c->p->w_kn = wa && !strcmp(wa->str, "kn");
  if (x->rank < 1) return err(c, "input must have at least one dimension");
  if (w->rank != 2 || w->dtype != x->dtype || w->dims[kn ? 0 : 1] != x->dims[x->rank - 1])
    return err(c, kn ? "weight: expected %s[%s,out], found %s" : "weight: expected %s[out,%s], found %s", rill_dtype_name(x->dtype),
               dfmt(x->dims[x->rank - 1], b2), tfmt(w, b1));
  int64_t nout = w->dims[kn ? 1 : 0];
  if (c->nin >= 3) {
    rill_type_t bt = {x->dtype, 1, {nout}};
    if (!rill__type_eq(&c->in[2], &bt)) return err(c, "bias: expected %s, found %s", tfmt(&bt, b1), tfmt(&c->in[2], b2));
  }
  c->p->has_bias = c->nin >= 3;
  c->out[0] = *x;
  c->out[0].dims[x->rank - 1] = nout;
  c->nout = 1;
  /* linear(x, w, b, z): z, of y's type, added (ours, like conv2d's: what -O1 makes of an add after the product) */
  c->p->has_residual = c->nin == 4;
  if (c->nin == 4 && !rill__type_eq(&c->in[3], &c->out[0]))
    return err(c, "residual: expected %s, found %s", tfmt(&c->out[0], b1), tfmt(&c->in[3], b2));
  return NULL;
}

/* pair attribute: absent -> def, one value -> both, two values */
/* Kernel sizes, strides, dilations and paddings: far beyond any real
 * window, small enough that window arithmetic cannot overflow. */
#define WINDOW_MAX ((int64_t)1 << 30)

static rill_status_t get_pair(ops_infer_ctx_t *c, const char *name, int64_t def, int64_t lo,
                              int64_t out[2], bool *present) {
  const isa_attr_t *a = get_ints(c, name);
  if (present) *present = a != NULL;
  if (!a) { out[0] = out[1] = def; return NULL; }
  if (a->count != 1 && a->count != 2) return err(c, "attribute '%s' expects 2 values, found %u", name, a->count);
  out[0] = a->ints[0];
  out[1] = a->ints[a->count - 1];
  if (out[0] < lo || out[1] < lo) return err(c, "attribute '%s' values must be at least %lld", name, (long long)lo);
  if (out[0] > WINDOW_MAX || out[1] > WINDOW_MAX) return err(c, "attribute '%s' values must be at most %lld", name, (long long)WINDOW_MAX);
  return NULL;
}

static rill_status_t out_size(ops_infer_ctx_t *c, int64_t in, int64_t pad, int64_t k, int64_t stride,
                              int64_t dil, bool ceil_mode, int64_t *out) {
  if (isa_dim_is_sym(k)) return err(c, "the window's size must be a number, found %s", dfmt(k, (char[48]){0}));
  int64_t span = dil * (k - 1) + 1, num;
  if (isa_dim_is_sym(in)) {
    /* o = (in + pad - span) // stride + 1, for every size in the range */
    int64_t lo, hi;
    if (ceil_mode) return err(c, "ceil_mode over the symbolic size %s is not supported", dfmt(in, (char[48]){0}));
    RILL_TRY(size_op(c, '+', in, pad - span, &num));
    if (size_bounds(num, &lo, &hi) && lo < 0)
      return err(c, "window of %lld does not fit the padded input of %s at its smallest", (long long)span, dfmt(in, (char[48]){0}));
    if (!cur_syms) return err(c, "symbolic size outside a program with shape variables");
    RILL_TRY(isa_sym_floordiv(cur_syms, num, stride, &num));
    return size_op(c, '+', num, 1, out);
  }
  num = in + pad - span;
  if (num < 0) return err(c, "window of %lld does not fit the padded input of %lld", (long long)span, (long long)(in + pad));
  int64_t o = (ceil_mode ? (num + stride - 1) / stride : num / stride) + 1;
  /* PyTorch: the last window must start inside the input or its left padding. */
  if (ceil_mode && (o - 1) * stride >= in + pad / 2) o--;
  *out = o;
  return NULL;
}

/* conv2d's and qconv2d's `padding`: [h,w] (or one value) or [top,left,bottom,right], into p->pad */
static rill_status_t conv_padding(ops_infer_ctx_t *c, ops_params_t *p) {
  const isa_attr_t *pa = get_ints(c, "padding");
  if (!pa) { memset(p->pad, 0, sizeof p->pad); }
  else if (pa->count == 2 || pa->count == 1) { p->pad[0] = p->pad[2] = pa->ints[0]; p->pad[1] = p->pad[3] = pa->ints[pa->count - 1]; }
  else if (pa->count == 4) { for (int i = 0; i < 4; i++) p->pad[i] = pa->ints[i]; }
  else return err(c, "attribute 'padding' expects [h,w] or [top,left,bottom,right], found %u values", pa->count);
  for (int i = 0; i < 4; i++)
    if (p->pad[i] < 0 || p->pad[i] > WINDOW_MAX) return err(c, "padding must be 0..%lld", (long long)WINDOW_MAX);
  return NULL;
}

static rill_status_t infer_conv2d(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *w = &c->in[1];
  ops_params_t *p = c->p;
  char b1[96], b2[96];
  RILL_TRY(need_float(c, x, "input"));
  RILL_TRY(parse_act(c, x));
  if (x->rank != 4) return err(c, "input: expected rank 4 (NCHW), found %s", tfmt(x, b1));
  RILL_TRY(parse_layout(c, x));
  /* dims of x and w: channels (C), height (H), width (W) */
  const int C = p->nhwc ? 3 : 1, H = p->nhwc ? 1 : 2, W = p->nhwc ? 2 : 3;
  if (w->rank != 4 || w->dtype != x->dtype)
    return err(c, "weight: expected %s[O,%s], found %s", rill_dtype_name(x->dtype), p->nhwc ? "kh,kw,I" : "I,kh,kw", tfmt(w, b1));
  RILL_TRY(get_int(c, "groups", 1, &p->groups));
  if (p->groups < 1) return err(c, "groups must be at least 1");
  int64_t in_ch;
  if (__builtin_mul_overflow(w->dims[C], p->groups, &in_ch) || in_ch != x->dims[C] || w->dims[0] % p->groups)
    return err(c, "weight %s does not fit input %s with groups=%lld (expected in-channels %lld, out-channels divisible by %lld)",
               tfmt(w, b1), tfmt(x, b2), (long long)p->groups, (long long)(x->dims[C] / p->groups), (long long)p->groups);
  if (c->nin >= 3) {
    rill_type_t bt = {x->dtype, 1, {w->dims[0]}};
    if (!rill__type_eq(&c->in[2], &bt)) return err(c, "bias: expected %s, found %s", tfmt(&bt, b1), tfmt(&c->in[2], b2));
  }
  p->has_bias = c->nin >= 3;
  p->has_residual = c->nin == 4;
  RILL_TRY(get_pair(c, "stride", 1, 1, p->stride, NULL));
  RILL_TRY(get_pair(c, "dilation", 1, 1, p->dilation, NULL));
  RILL_TRY(conv_padding(c, p));
  rill_type_t *o = &c->out[0];
  *o = *x;
  o->dims[C] = w->dims[0];
  RILL_TRY(out_size(c, x->dims[H], p->pad[0] + p->pad[2], w->dims[H], p->stride[0], p->dilation[0], false, &o->dims[H]));
  RILL_TRY(out_size(c, x->dims[W], p->pad[1] + p->pad[3], w->dims[W], p->stride[1], p->dilation[1], false, &o->dims[W]));
  /* the residual z, added to the convolution and its bias before the activation */
  if (c->nin == 4 && !rill__type_eq(&c->in[3], o)) return err(c, "residual: expected %s (the output's type), found %s", tfmt(o, b1), tfmt(&c->in[3], b2));
  c->nout = 1;
  return NULL;
}

/* ---- quantized products (docs/internals.md, "Quantized products") ----
 * qmatmul(a, b, a_zp, b_zp[, bias][, scale[, y_zp]]) and
 * qconv2d(x, w, x_zp, w_zp[, bias][, scale[, y_zp]]): i8/u8 operands less
 * their zero points, multiplied and summed exactly in integers, then the
 * optional operands, told apart by dtype: an i32 bias (one per output
 * column or channel) added to the sum, a float scale that dequantizes it
 * (the result, dtype= a float, default the scale's), and an i8/u8 zero
 * point that requantizes it (the result of its dtype). */
static bool is_q8(rill_dtype_t d) { return d == RILL_I8 || d == RILL_U8; }

/* v is one value (rank 0, or every dim 1) or, where n >= 0, a [n] vector */
static bool one_or_vec(const rill_type_t *v, int64_t n) {
  bool one = v->rank <= 2;
  for (int i = 0; i < v->rank; i++) one &= v->dims[i] == 1;
  return one || (n >= 0 && v->rank == 1 && v->dims[0] == n);
}

/* The operands after the zero points (from index 4): bias, scale, y_zp;
 * `what` names the per-column (qmatmul) or per-channel (qconv2d) size n. */
static rill_status_t quant_tail(ops_infer_ctx_t *c, int64_t n, const char *what, rill_dtype_t *out) {
  ops_params_t *p = c->p;
  char b1[96];
  p->q.bias = p->q.scale = p->q.yzp = -1;
  uint32_t k = 4;
  if (k < c->nin && c->in[k].dtype == RILL_I32) {
    if (c->in[k].rank != 1 || c->in[k].dims[0] != n) return err(c, "bias: expected i32[%lld] (one per %s), found %s", (long long)n, what, tfmt(&c->in[k], b1));
    p->q.bias = (int)k++;
  }
  if (k < c->nin && rill__is_float(c->in[k].dtype)) p->q.scale = (int)k++;
  if (k < c->nin && is_q8(c->in[k].dtype) && p->q.scale >= 0) {
    if (!one_or_vec(&c->in[k], -1)) return err(c, "y_zp: expected one value, found %s", tfmt(&c->in[k], b1));
    p->q.yzp = (int)k++;
  }
  if (k < c->nin)
    return err(c, "operand %u: expected an i32 bias, then a float scale, then an i8 or u8 zero point (in that order), found %s", k + 1, tfmt(&c->in[k], b1));
  bool has_ys;
  p->q.y_scale = get_float(c, "y_scale", 0, &has_ys);
  p->q.has_ys = has_ys;
  if (has_ys && (p->q.yzp < 0 || !isfinite(p->q.y_scale) || p->q.y_scale == 0))
    return err(c, "attribute 'y_scale' needs a zero point operand and a finite, non-zero value");
  /* activation="relu": on the dequantized value acc * scale, before the requantization */
  const isa_attr_t *act = ops_attr(c, "activation");
  p->act = OPS_ACT_NONE;
  if (act && (strcmp(act->str, "relu") || p->q.scale < 0))
    return err(c, "attribute 'activation' expects \"relu\" (after a scale operand), found \"%s\"%s", act->str, p->q.scale < 0 ? " without a scale" : "");
  if (act) p->act = OPS_ACT_RELU;
  const isa_attr_t *dt = ops_attr(c, "dtype");
  if (dt && (p->q.scale < 0 || p->q.yzp >= 0 || !rill__is_float((rill_dtype_t)dt->ints[0])))
    return err(c, "attribute 'dtype' is the dequantized result's float dtype (a scale operand and no zero point after it)");
  *out = p->q.yzp >= 0 ? c->in[p->q.yzp].dtype : p->q.scale >= 0 ? (dt ? (rill_dtype_t)dt->ints[0] : c->in[p->q.scale].dtype) : RILL_I32;
  return NULL;
}

static rill_status_t quant_operands(ops_infer_ctx_t *c, const char *x, const char *w) {
  char b1[96], b2[96];
  if (!is_q8(c->in[0].dtype) || !is_q8(c->in[1].dtype))
    return err(c, "%s and %s: expected i8 or u8 tensors, found %s and %s", x, w, tfmt(&c->in[0], b1), tfmt(&c->in[1], b2));
  for (int k = 0; k < 2; k++)
    if (c->in[2 + k].dtype != c->in[k].dtype)
      return err(c, "%s's zero point: expected %s (its operand's dtype), found %s", k ? w : x, rill_dtype_name(c->in[k].dtype), tfmt(&c->in[2 + k], b1));
  return NULL;
}

static rill_status_t infer_qmatmul(ops_infer_ctx_t *c) {
  const rill_type_t *a = &c->in[0], *b = &c->in[1];
  char b1[96], b2[96];
  RILL_TRY(quant_operands(c, "a", "b"));
  if (a->rank < 2 || b->rank < 2) return err(c, "operands must have at least two dimensions, found %s and %s", tfmt(a, b1), tfmt(b, b2));
  int64_t M = a->dims[a->rank - 2], K = a->dims[a->rank - 1], N = b->dims[b->rank - 1];
  if (b->dims[b->rank - 2] != K) return err(c, "inner dimensions differ: %s @ %s", tfmt(a, b1), tfmt(b, b2));
  if (!one_or_vec(&c->in[2], M)) return err(c, "a_zp: expected one value or one per row of a (%s), found %s", tfmt(a, b1), tfmt(&c->in[2], b2));
  if (!one_or_vec(&c->in[3], N)) return err(c, "b_zp: expected one value or one per column of b (%s), found %s", tfmt(b, b1), tfmt(&c->in[3], b2));
  rill_type_t ba = {a->dtype, a->rank - 2, {0}}, bb = {b->dtype, b->rank - 2, {0}};
  memcpy(ba.dims, a->dims, sizeof(int64_t) * (size_t)ba.rank);
  memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.rank);
  rill_type_t *o = &c->out[0];
  RILL_TRY(broadcast(c, &ba, &bb, o));
  o->dims[o->rank++] = M;
  o->dims[o->rank++] = N;
  if (o->rank > RILL_MAX_RANK) return err(c, "result rank above %d", RILL_MAX_RANK);
  RILL_TRY(quant_tail(c, N, "column of b", &o->dtype));
  if (c->p->q.scale >= 0) {
    /* the scale broadcasts to [M, N]: one value, [N], [M, 1] or [M, N] */
    const rill_type_t *s = &c->in[c->p->q.scale];
    bool ok = s->rank <= 2;
    for (int i = 0; ok && i < s->rank; i++) ok = s->dims[i] == 1 || s->dims[i] == (i == s->rank - 1 ? N : M);
    if (!ok) return err(c, "scale: expected one value, [N], [M,1] or [M,N] of the result [M,N] = [%s,%s], found %s", dfmt(M, b1), dfmt(N, b2), tfmt(s, (char[96]){0}));
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_qconv2d(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *w = &c->in[1];
  ops_params_t *p = c->p;
  char b1[96], b2[96];
  RILL_TRY(quant_operands(c, "x", "w"));
  if (x->rank != 4 || w->rank != 4) return err(c, "x and w: expected rank 4 (NCHW, OIHW), found %s and %s", tfmt(x, b1), tfmt(w, b2));
  RILL_TRY(get_int(c, "groups", 1, &p->groups));
  int64_t in_ch;
  if (p->groups < 1 || __builtin_mul_overflow(w->dims[1], p->groups, &in_ch) || in_ch != x->dims[1] || w->dims[0] % p->groups)
    return err(c, "weight %s does not fit input %s with groups=%lld", tfmt(w, b1), tfmt(x, b2), (long long)p->groups);
  if (!one_or_vec(&c->in[2], -1)) return err(c, "x_zp: expected one value, found %s", tfmt(&c->in[2], b1));
  if (!one_or_vec(&c->in[3], w->dims[0])) return err(c, "w_zp: expected one value or one per output channel, found %s", tfmt(&c->in[3], b1));
  RILL_TRY(get_pair(c, "stride", 1, 1, p->stride, NULL));
  RILL_TRY(get_pair(c, "dilation", 1, 1, p->dilation, NULL));
  RILL_TRY(conv_padding(c, p));
  rill_type_t *o = &c->out[0];
  *o = *x;
  o->dims[1] = w->dims[0];
  RILL_TRY(out_size(c, x->dims[2], p->pad[0] + p->pad[2], w->dims[2], p->stride[0], p->dilation[0], false, &o->dims[2]));
  RILL_TRY(out_size(c, x->dims[3], p->pad[1] + p->pad[3], w->dims[3], p->stride[1], p->dilation[1], false, &o->dims[3]));
  RILL_TRY(quant_tail(c, w->dims[0], "output channel", &o->dtype));
  if (p->q.scale >= 0 && !one_or_vec(&c->in[p->q.scale], w->dims[0]))
    return err(c, "scale: expected one value or one per output channel, found %s", tfmt(&c->in[p->q.scale], b1));
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_pool(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  ops_params_t *p = c->p;
  char b1[96];
  RILL_TRY(need_float(c, x, "input"));
  if (x->rank != 4 && x->rank != 3) return err(c, "input: expected rank 4 (NCHW) or 3 (CHW), found %s", tfmt(x, b1));
  RILL_TRY(parse_layout(c, x));
  bool has_kernel;
  RILL_TRY(get_pair(c, "kernel", 1, 1, p->kernel, &has_kernel));
  if (!has_kernel) return err(c, "missing attribute 'kernel'");
  bool has_stride;
  RILL_TRY(get_pair(c, "stride", 1, 1, p->stride, &has_stride));
  if (!has_stride) { p->stride[0] = p->kernel[0]; p->stride[1] = p->kernel[1]; }
  int64_t pad[2];
  RILL_TRY(get_pair(c, "padding", 0, 0, pad, NULL));
  if (pad[0] * 2 > p->kernel[0] || pad[1] * 2 > p->kernel[1])
    return err(c, "padding [%lld,%lld] must be at most half the kernel [%lld,%lld]", (long long)pad[0],
               (long long)pad[1], (long long)p->kernel[0], (long long)p->kernel[1]);
  p->pad[0] = p->pad[2] = pad[0];
  p->pad[1] = p->pad[3] = pad[1];
  p->ceil_mode = get_bool(c, "ceil_mode", false);
  p->count_include_pad = get_bool(c, "count_include_pad", true);
  p->dilation[0] = p->dilation[1] = 1;
  p->code = c->def->code;
  rill_type_t *o = &c->out[0];
  *o = *x;
  int h = p->nhwc ? 1 : x->rank - 2;
  RILL_TRY(out_size(c, x->dims[h], 2 * pad[0], p->kernel[0], p->stride[0], 1, p->ceil_mode, &o->dims[h]));
  RILL_TRY(out_size(c, x->dims[h + 1], 2 * pad[1], p->kernel[1], p->stride[1], 1, p->ceil_mode, &o->dims[h + 1]));
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_adaptive(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96];
  RILL_TRY(need_float(c, x, "input"));
  if (x->rank != 4 && x->rank != 3) return err(c, "input: expected rank 4 (NCHW) or 3 (CHW), found %s", tfmt(x, b1));
  int64_t o2[2];
  bool has;
  RILL_TRY(get_pair(c, "output", 1, 1, o2, &has));
  if (!has) return err(c, "missing attribute 'output'");
  RILL_TRY(parse_layout(c, x));
  int h = c->p->nhwc ? 1 : x->rank - 2;
  if (x->dims[h] == 0 || x->dims[h + 1] == 0) return err(c, "input has an empty spatial dimension");
  c->out[0] = *x;
  c->out[0].dims[h] = o2[0];
  c->out[0].dims[h + 1] = o2[1];
  c->nout = 1;
  return NULL;
}

/* ---- shape ops ---- */
/* reshape: the -1 is the input's element count divided by the others'
 * product, exactly (as polynomials where sizes are symbolic). */
static rill_status_t infer_reshape(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  const isa_attr_t *a = get_ints(c, "shape");
  char b1[96], d1[48], d2[48];
  if (!a) return err(c, "missing attribute 'shape'");
  if (a->count > RILL_MAX_RANK) return err(c, "shape has more than %d dimensions", RILL_MAX_RANK);
  int64_t numel = 1, known = 1;
  for (int i = 0; i < x->rank; i++) RILL_TRY(size_op(c, '*', numel, x->dims[i], &numel));
  rill_type_t *o = &c->out[0];
  o->dtype = x->dtype;
  o->rank = (int)a->count;
  int infer = -1;
  for (uint32_t i = 0; i < a->count; i++) {
    int64_t d = a->ints[i];
    if (d == -1) {
      if (infer >= 0) return err(c, "shape has more than one -1");
      infer = (int)i;
      continue;
    }
    if (d < 0 && !isa_dim_is_sym(d)) return err(c, "shape has the negative dimension %lld", (long long)d);
    if (size_op(c, '*', known, d, &known)) return err(c, "shape too large");
    o->dims[i] = d;
  }
  bool sym = isa_dim_is_sym(numel) || isa_dim_is_sym(known);
  if (infer >= 0 && !sym) {
    if (known == 0 || numel % known) return err(c, "cannot reshape %s (%lld elements) with -1 into a multiple of %lld", tfmt(x, b1), (long long)numel, (long long)known);
    o->dims[infer] = numel / known;
  } else if (infer >= 0) {
    rill_status_t st = NULL;
    if (known == 0 || !cur_syms || !isa_sym_divexact(cur_syms, numel, known, &o->dims[infer], &st)) {
      if (st) return st;
      return err(c, "cannot reshape %s (%s elements) with -1: %s does not divide it exactly", tfmt(x, b1), dfmt(numel, d1), dfmt(known, d2));
    }
  } else if (known != numel && !isa_sym_runtime(cur_syms, known) && !isa_sym_runtime(cur_syms, numel)) {
    /* (over sizes bound at run time: checked at the sizes bound) */
    return err(c, "cannot reshape %s (%s elements) into %s elements%s", tfmt(x, b1), dfmt(numel, d1), dfmt(known, d2),
               sym ? ": the sizes cannot be shown equal" : "");
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_flatten(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  int64_t s, e;
  RILL_TRY(get_int(c, "start", 1, &s));
  RILL_TRY(get_int(c, "end", -1, &e));
  rill_type_t *o = &c->out[0];
  o->dtype = x->dtype;
  if (x->rank == 0) {
    RILL_TRY(norm_axis(c, s, 0, &s));
    RILL_TRY(norm_axis(c, e, 0, &e));
    o->rank = 1;
    o->dims[0] = 1;
  } else {
    RILL_TRY(norm_axis(c, s, x->rank, &s));
    RILL_TRY(norm_axis(c, e, x->rank, &e));
    if (s > e) return err(c, "start %lld comes after end %lld", (long long)s, (long long)e);
    o->rank = 0;
    for (int i = 0; i < x->rank; i++) {
      if (i <= s || i > e) o->dims[o->rank++] = x->dims[i];
      else RILL_TRY(size_op(c, '*', o->dims[o->rank - 1], x->dims[i], &o->dims[o->rank - 1]));
    }
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_transpose(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  if (!get_ints(c, "perm")) return err(c, "missing attribute 'perm'");
  RILL_TRY(parse_perm(c, "perm", x->rank, c->p->perm));
  c->out[0] = permuted(x, c->p->perm);
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_squeeze(ops_infer_ctx_t *c) {
  rill_type_t t = c->in[0];
  const isa_attr_t *a = get_ints(c, "axes");
  bool un = c->def->code == 1;
  if (!a && un) return err(c, "missing attribute 'axes'");
  if (!a) {
    int r = 0;
    for (int i = 0; i < t.rank; i++) if (t.dims[i] != 1) t.dims[r++] = t.dims[i];
    t.rank = r;
  } else {
    for (uint32_t i = 0; i < a->count; i++) {
      int64_t ax = 0;
      if (un) {
        if (t.rank >= RILL_MAX_RANK) return err(c, "result rank above %d", RILL_MAX_RANK);
        RILL_TRY(norm_axis(c, a->ints[i], t.rank + 1, &ax));
        memmove(&t.dims[ax + 1], &t.dims[ax], sizeof(int64_t) * (size_t)(t.rank - ax));
        t.dims[ax] = 1;
        t.rank++;
      } else {
        RILL_TRY(norm_axis(c, a->ints[i], t.rank, &ax));
        if (t.rank == 0 || t.dims[ax] != 1) continue; /* PyTorch: squeezing a dim not of size 1 does nothing */
        memmove(&t.dims[ax], &t.dims[ax + 1], sizeof(int64_t) * (size_t)(t.rank - ax - 1));
        t.rank--;
      }
    }
  }
  c->out[0] = t;
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_broadcast_to(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  const isa_attr_t *a = get_ints(c, "shape");
  char b1[96];
  if (!a) return err(c, "missing attribute 'shape'");
  if ((int)a->count < x->rank || a->count > RILL_MAX_RANK)
    return err(c, "cannot broadcast %s to %u dimensions", tfmt(x, b1), a->count);
  rill_type_t *o = &c->out[0];
  o->dtype = x->dtype;
  o->rank = (int)a->count;
  int off = o->rank - x->rank;
  for (int i = 0; i < o->rank; i++) {
    int64_t want = a->ints[i], have = i >= off ? x->dims[i - off] : 1;
    if (want == -1) {
      if (i < off) return err(c, "-1 is only allowed for existing dimensions");
      want = have;
    }
    char d1[48], d2[48];
    if (want < 0 && !isa_dim_is_sym(want)) return err(c, "shape has the negative dimension %lld", (long long)want);
    if (have != want && have != 1 && !isa_sym_runtime(cur_syms, have) && !isa_sym_runtime(cur_syms, want))
      return err(c, "cannot broadcast %s to the given shape (dimension %d: %s to %s%s)", tfmt(x, b1), i, dfmt(have, d1), dfmt(want, d2),
                 isa_dim_is_sym(have) || isa_dim_is_sym(want) ? ", sizes that cannot be shown equal" : "");
    o->dims[i] = want;
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_concat(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96], b2[96];
  int64_t axis;
  RILL_TRY(get_int(c, "axis", 0, &axis));
  if (x->rank == 0) return err(c, "cannot concatenate 0-d tensors");
  RILL_TRY(norm_axis(c, axis, x->rank, &c->p->axis));
  rill_type_t *o = &c->out[0];
  *o = *x;
  for (uint32_t i = 1; i < c->nin; i++) {
    const rill_type_t *y = &c->in[i];
    bool ok = y->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++) ok = d == c->p->axis || y->dims[d] == x->dims[d];
    if (!ok) return err(c, "operand %u %s does not match %s except along axis %lld", i + 1, tfmt(y, b1), tfmt(x, b2), (long long)c->p->axis);
    RILL_TRY(size_op(c, '+', o->dims[c->p->axis], y->dims[c->p->axis], &o->dims[c->p->axis]));
    o->dtype = ops_promote(o->dtype, y->dtype);
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_split(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96];
  int64_t axis;
  RILL_TRY(get_int(c, "axis", 0, &axis));
  if (x->rank == 0) return err(c, "cannot split a 0-d tensor");
  RILL_TRY(norm_axis(c, axis, x->rank, &c->p->axis));
  const isa_attr_t *a = get_ints(c, "sizes");
  if (!a || a->count == 0) return err(c, "missing attribute 'sizes'");
  if (a->count > c->max_out) return err(c, "produces %u results, %u names given", a->count, c->max_out);
  int64_t total = 0, dim = x->dims[c->p->axis];
  bool sym = isa_dim_is_sym(dim);
  for (uint32_t i = 0; i < a->count; i++) sym = sym || isa_dim_is_sym(a->ints[i]);
  for (uint32_t i = 0; i < a->count; i++) {
    if (a->ints[i] < 0 && !isa_dim_is_sym(a->ints[i])) return err(c, "sizes has the negative size %lld", (long long)a->ints[i]);
    if (!sym && a->ints[i] > dim - total)
      return err(c, "sizes add up to more than %s has along axis %lld", tfmt(x, b1), (long long)c->p->axis);
    RILL_TRY(size_op(c, '+', total, a->ints[i], &total));
    c->out[i] = *x;
    c->out[i].dims[c->p->axis] = a->ints[i];
  }
  char d1[48], d2[48];
  if (total != dim)
    return err(c, "sizes add up to %s, %s has %s along axis %lld%s", dfmt(total, d1), tfmt(x, b1), dfmt(dim, d2),
               (long long)c->p->axis, sym ? " (the sizes cannot be shown equal)" : "");
  c->p->sizes = a->ints;
  c->p->nsizes = a->count;
  c->nout = a->count;
  return NULL;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* A slice of a symbolic size: the start and end must each be known to lie
 * in the range for every size the variables can take (a number below the
 * smallest size, counted from either end, or an end past the largest). */
static rill_status_t slice_sym(ops_infer_ctx_t *c, int64_t len, int64_t s, int64_t e, int64_t step, int64_t *out) {
  int64_t lo, hi;
  char d1[48];
  if (step < 0) return err(c, "a negative step over the symbolic size %s is not supported", dfmt(len, d1));
  if (!size_bounds(len, &lo, &hi)) hi = INT64_MAX;
  if (s >= 0 && s <= lo) { /* s */ }
  else if (s < 0 && s >= -lo) RILL_TRY(size_op(c, '+', len, s, &s));
  else return err(c, "start %lld is not inside %s for every size of its range", (long long)s, dfmt(len, d1));
  if (e >= hi) e = len;
  else if (e >= 0 && e <= lo) { /* e */ }
  else if (e < 0 && e >= -lo) RILL_TRY(size_op(c, '+', len, e, &e));
  else return err(c, "end %lld is not inside %s for every size of its range", (long long)e, dfmt(len, d1));
  int64_t n, nlo, nhi;
  RILL_TRY(size_op(c, '-', e, s, &n));
  if (!size_bounds(n, &nlo, &nhi) || nlo < 0) return err(c, "the slice of %s may be empty or reversed at some size", dfmt(len, d1));
  RILL_TRY(size_op(c, '+', n, step - 1, &n));
  if (!isa_dim_is_sym(n)) { *out = n / step; return NULL; }
  return isa_sym_floordiv(cur_syms, n, step, out);
}

static rill_status_t infer_slice(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  ops_params_t *p = c->p;
  const isa_attr_t *st = get_ints(c, "starts"), *en = get_ints(c, "ends"), *ax = get_ints(c, "axes"),
                   *sp = get_ints(c, "steps");
  if (!st || !en) return err(c, "missing attribute '%s'", st ? "ends" : "starts");
  uint32_t n = st->count;
  if (en->count != n || (ax && ax->count != n) || (sp && sp->count != n))
    return err(c, "starts, ends, axes and steps must have the same length");
  if (!ax && n > (uint32_t)x->rank) return err(c, "%u starts for a tensor of rank %d", n, x->rank);
  rill_type_t *o = &c->out[0];
  *o = *x;
  for (int d = 0; d < x->rank; d++) { p->starts[d] = 0; p->steps[d] = 1; }
  uint32_t seen = 0;
  for (uint32_t i = 0; i < n; i++) {
    int64_t d = i;
    if (ax) RILL_TRY(norm_axis(c, ax->ints[i], x->rank, &d));
    if (x->rank == 0) return err(c, "cannot slice a 0-d tensor");
    if (seen & (1u << d)) return err(c, "axis %lld sliced twice", (long long)d);
    seen |= 1u << d;
    int64_t len = x->dims[d], step = sp ? sp->ints[i] : 1;
    if (step == 0) return err(c, "step must not be zero");
    if (isa_dim_is_sym(len)) {
      RILL_TRY(slice_sym(c, len, st->ints[i], en->ints[i], step, &o->dims[d]));
      continue;
    }
    if (step == INT64_MIN) step = -INT64_MAX;
    /* Python's slice.indices() */
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? len : len - 1;
    int64_t s = st->ints[i], e = en->ints[i];
    s = s < 0 ? clamp64(s < -len ? lo : s + len, lo, hi) : clamp64(s, lo, hi);
    e = e < 0 ? clamp64(e < -len ? lo : e + len, lo, hi) : clamp64(e, lo, hi);
    int64_t cnt = step > 0 ? (e > s ? (e - s - 1) / step + 1 : 0) : (s > e ? (s - e - 1) / -step + 1 : 0);
    p->starts[d] = s;
    p->steps[d] = step;
    o->dims[d] = cnt;
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_pad(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  const isa_attr_t *a = get_ints(c, "pads");
  if (!a) return err(c, "missing attribute 'pads'");
  if ((int)a->count != 2 * x->rank) return err(c, "pads has %u values, expected %d (begin and end for each dimension)", a->count, 2 * x->rank);
  c->p->value = get_float(c, "value", 0, NULL);
  rill_type_t *o = &c->out[0];
  *o = *x;
  for (int d = 0; d < x->rank; d++) {
    int64_t b = a->ints[d], e = a->ints[x->rank + d];
    if (b > ((int64_t)1 << 48) || e > ((int64_t)1 << 48)) return err(c, "pads of dimension %d are too large", d);
    if (isa_dim_is_sym(b) || isa_dim_is_sym(e)) {
      /* a symbolic amount (a shape variable's name, or what --data-parallel
       * writes to round a symbolic batch up to a multiple of the ranks, and
       * crop it back): the padded size is the sum, which must not be
       * negative at any size; the instance for the sizes bound gets numbers */
      int64_t lo, hi;
      char d1[48];
      c->p->pads[d] = b;
      c->p->pads[RILL_MAX_RANK + d] = e;
      RILL_TRY(size_op(c, '+', x->dims[d], b, &o->dims[d]));
      RILL_TRY(size_op(c, '+', o->dims[d], e, &o->dims[d]));
      if (!size_bounds(o->dims[d], &lo, &hi) || lo < 0) return err(c, "pads may crop dimension %d (size %s) below zero", d, dfmt(x->dims[d], d1));
      continue;
    }
    if (isa_dim_is_sym(x->dims[d])) {
      int64_t lo, hi;
      char d1[48];
      c->p->pads[d] = b;
      c->p->pads[RILL_MAX_RANK + d] = e;
      RILL_TRY(size_op(c, '+', x->dims[d], b + e, &o->dims[d]));
      if ((b < 0 || e < 0) && (!size_bounds(o->dims[d], &lo, &hi) || lo < 0)) return err(c, "pads may crop dimension %d (size %s) below zero", d, dfmt(x->dims[d], d1));
      continue;
    }
    if (b < -x->dims[d] || e < -x->dims[d] || x->dims[d] + b + e < 0)
      return err(c, "pads crop dimension %d (size %lld) below zero", d, (long long)x->dims[d]);
    c->p->pads[d] = b;
    c->p->pads[RILL_MAX_RANK + d] = e;
    o->dims[d] = x->dims[d] + b + e;
  }
  c->nout = 1;
  return NULL;
}

static rill_status_t infer_gather(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *idx = &c->in[1];
  char b1[96];
  if (idx->rank != 1 || (idx->dtype != RILL_I32 && idx->dtype != RILL_I64))
    return err(c, "index: expected a 1-D i32 or i64 tensor, found %s", tfmt(idx, b1));
  int64_t axis;
  RILL_TRY(get_int(c, "axis", 0, &axis));
  if (x->rank == 0) return err(c, "cannot gather from a 0-d tensor");
  RILL_TRY(norm_axis(c, axis, x->rank, &c->p->axis));
  c->out[0] = *x;
  c->out[0].dims[c->p->axis] = idx->dims[0];
  c->nout = 1;
  return NULL;
}

/* ---- decoder ops (cpu_llm.c; docs/internals.md, "Decoder ops") ---- */
/* rms_norm(x, weight?) {axis=-1, eps=1e-6}: y = round(x / sqrt(mean(x^2) + eps)) * weight. */
static rill_status_t infer_rms_norm(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96], b2[96];
  rill_type_t norm;
  RILL_TRY(norm_input(c, 1e-6, &norm));
  if (!(c->p->eps >= 0)) return err(c, "eps must be at least 0, found %g", c->p->eps);
  if (c->nin > 1 && !rill__type_eq(&c->in[1], &norm))
    return err(c, "weight: expected %s (the normalised shape), found %s", tfmt(&norm, b1), tfmt(&c->in[1], b2));
  c->out[0] = *x;
  c->nout = 1;
  return NULL;
}

/* A run-time integer operand: i32 or i64 of one of the ranks allowed. */
static bool int_operand(const rill_type_t *t) { return t->dtype == RILL_I32 || t->dtype == RILL_I64; }

/* A string attribute that must be one of `names` (NULL-terminated): its index, or def when absent. */
static rill_status_t get_choice(ops_infer_ctx_t *c, const char *name, const char *const *names, int def, int *out) {
  const isa_attr_t *a = ops_attr(c, name);
  *out = def;
  if (!a) return NULL;
  char want[160] = "";
  size_t o = 0;
  for (int i = 0; names[i]; i++) {
    if (!strcmp(a->str, names[i])) {
      *out = i;
      return NULL;
    }
    o += (size_t)snprintf(want + o, sizeof want - o, "%s\"%s\"", i ? (names[i + 1] ? ", " : " or ") : "", names[i]);
  }
  return err(c, "attribute '%s' expects %s, found \"%s\"", name, want, a->str);
}

/* fused_linear(x, w, b?, p?, r?) {prologue="none", eps=1e-6, residual=false, epilogue="none"}:
 * linear(prologue(x, p), w, b), then + r (what -O1 writes for a decode
 * step's products: assembler/decode_fuse.c). p: rms_norm's weight [K]
 * (x normalised over its last axis), or swiglu's and geglu's value (x's
 * type, x the gate); r of the result's type. The bias is there when the
 * operands are one more than the prologue and residual take. With an
 * epilogue (swiglu, geglu, geglu_tanh; no residual, no prologue but rms_norm), the
 * product's N outputs split in halves, the first the gate (the second with
 * gate_second=true): the result is the gated unit of the two, N / 2 wide. */
static rill_status_t infer_fused_linear(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *w = &c->in[1];
  ops_params_t *p = c->p;
  char b1[96], b2[96];
  static const char *const pros[] = {"none", "rms_norm", "swiglu", "geglu", "geglu_tanh", NULL};
  int pro;
  RILL_TRY(get_choice(c, "prologue", pros, 0, &pro));
  p->gelu_tanh = pro == 4;
  p->llm.flin_pro = pro == 4 ? OPS_FLIN_GEGLU : pro;
  p->llm.flin_res = get_bool(c, "residual", false);
  static const char *const epis[] = {"none", "swiglu", "geglu", "geglu_tanh", NULL};
  int epi;
  RILL_TRY(get_choice(c, "epilogue", epis, 0, &epi));
  if (epi && ((pro && pro != OPS_FLIN_RMS) || p->llm.flin_res)) return err(c, "an epilogue goes with no residual, and with no prologue but rms_norm");
  if (epi) p->gelu_tanh = epi == 3;
  p->llm.flin_epi = !epi ? OPS_FLIN_NONE : epi == 1 ? OPS_FLIN_SWIGLU : OPS_FLIN_GEGLU;
  p->llm.flin_gate2 = get_bool(c, "gate_second", false);
  if (p->llm.flin_gate2 && !epi) return err(c, "gate_second needs an epilogue");
  bool has_eps;
  p->eps = get_float(c, "eps", 1e-6, &has_eps);
  if (has_eps && pro != OPS_FLIN_RMS) return err(c, "eps needs prologue=\"rms_norm\"");
  if (!(p->eps >= 0) || isinf(p->eps)) return err(c, "eps must be a finite number at least 0, found %g", p->eps);
  uint32_t need = 2 + (pro != 0) + p->llm.flin_res;
  if (c->nin != need && c->nin != need + 1)
    return err(c, "expected %u operands (x, w%s%s) or %u with a bias after w, found %u", need, pro == OPS_FLIN_RMS ? ", the norm's weight" : pro ? ", the value" : "",
               p->llm.flin_res ? ", the residual" : "", need + 1, c->nin);
  p->has_bias = c->nin == need + 1;
  RILL_TRY(need_float(c, x, "input"));
  if (x->rank < 1) return err(c, "input must have at least one dimension");
  if (w->rank != 2 || w->dtype != x->dtype || w->dims[1] != x->dims[x->rank - 1])
    return err(c, "weight: expected %s[out,%s], found %s", rill_dtype_name(x->dtype), dfmt(x->dims[x->rank - 1], b2), tfmt(w, b1));
  uint32_t k = 2;
  if (p->has_bias) {
    rill_type_t bt = {x->dtype, 1, {w->dims[0]}};
    if (!rill__type_eq(&c->in[k], &bt)) return err(c, "bias: expected %s, found %s", tfmt(&bt, b1), tfmt(&c->in[k], b2));
    k++;
  }
  if (pro == OPS_FLIN_RMS) {
    rill_type_t gt = {x->dtype, 1, {x->dims[x->rank - 1]}};
    if (!rill__type_eq(&c->in[k], &gt)) return err(c, "the norm's weight: expected %s, found %s", tfmt(&gt, b1), tfmt(&c->in[k], b2));
    k++;
  } else if (pro) {
    if (!rill__type_eq(&c->in[k], x)) return err(c, "the value: expected %s (the gate's type), found %s", tfmt(x, b1), tfmt(&c->in[k], b2));
    k++;
  }
  if (epi && isa_dim_is_sym(w->dims[0])) return err(c, "epilogue: the weight's outputs must be a number, found %s", dfmt(w->dims[0], b1));
  if (epi && w->dims[0] % 2) return err(c, "epilogue: the weight's %s outputs do not split in halves", dfmt(w->dims[0], b1));
  c->out[0] = *x;
  c->out[0].dims[x->rank - 1] = epi ? w->dims[0] / 2 : w->dims[0];
  if (p->llm.flin_res && !rill__type_eq(&c->in[k], &c->out[0]))
    return err(c, "the residual: expected %s (the result's type), found %s", tfmt(&c->out[0], b1), tfmt(&c->in[k], b2));
  c->nout = 1;
  return NULL;
}

/* rotary(x [B,S,H,D], pos) {style, theta, rotary_dim, scaling, factor, low_freq_factor, high_freq_factor,
 * original_max_position}: pos i32/i64 [] (the first position; token s is at pos + s), [S] or [B,S]. */
static rill_status_t infer_rotary(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *pos = &c->in[1];
  ops_params_t *p = c->p;
  char b1[96], b2[96];
  RILL_TRY(need_float(c, x, "input"));
  if (x->rank != 4) return err(c, "input: expected rank 4 [B,S,H,D], found %s", tfmt(x, b1));
  int64_t D = x->dims[3];
  if (isa_dim_is_sym(D)) return err(c, "the head size D must be a number, found %s", dfmt(D, b1));
  bool pos_ok = int_operand(pos) && (pos->rank == 0 || (pos->rank == 1 && pos->dims[0] == x->dims[1]) ||
                                      (pos->rank == 2 && pos->dims[0] == x->dims[0] && pos->dims[1] == x->dims[1]));
  if (!pos_ok)
    return err(c, "positions: expected an i32 or i64 tensor of shape [] (the first position), [%s] or [%s,%s], found %s",
               dfmt(x->dims[1], b1), dfmt(x->dims[0], b2), dfmt(x->dims[1], (char[48]){0}), tfmt(pos, (char[96]){0}));
  static const char *const styles[] = {"neox", "gptj", NULL}, *const scalings[] = {"none", "linear", "llama3", NULL};
  RILL_TRY(get_choice(c, "style", styles, OPS_ROPE_NEOX, &p->llm.style));
  RILL_TRY(get_choice(c, "scaling", scalings, OPS_ROPE_NONE, &p->llm.scaling));
  RILL_TRY(get_int(c, "rotary_dim", D, &p->llm.rotary_dim));
  if (p->llm.rotary_dim < 2 || p->llm.rotary_dim > D || p->llm.rotary_dim % 2)
    return err(c, "rotary_dim must be even and in 2..%lld (the head size), found %lld", (long long)D, (long long)p->llm.rotary_dim);
  p->llm.theta = get_float(c, "theta", 10000, NULL);
  if (!(p->llm.theta > 1) || isinf(p->llm.theta)) return err(c, "theta must be a finite number above 1, found %g", p->llm.theta);
  bool has_factor;
  p->llm.factor = get_float(c, "factor", p->llm.scaling == OPS_ROPE_LLAMA3 ? 8 : 1, &has_factor);
  p->llm.low_freq = get_float(c, "low_freq_factor", 1, NULL);
  p->llm.high_freq = get_float(c, "high_freq_factor", 4, NULL);
  p->llm.orig_max = get_float(c, "original_max_position", 8192, NULL);
  if (p->llm.scaling == OPS_ROPE_NONE && has_factor) return err(c, "factor needs scaling=\"linear\" or \"llama3\"");
  if (p->llm.scaling != OPS_ROPE_LLAMA3 && (ops_attr(c, "low_freq_factor") || ops_attr(c, "high_freq_factor") || ops_attr(c, "original_max_position")))
    return err(c, "low_freq_factor, high_freq_factor and original_max_position need scaling=\"llama3\"");
  if (!(p->llm.factor > 0) || isinf(p->llm.factor)) return err(c, "factor must be a finite number above 0, found %g", p->llm.factor);
  if (p->llm.scaling == OPS_ROPE_LLAMA3 &&
      !(p->llm.low_freq > 0 && p->llm.high_freq > p->llm.low_freq && p->llm.orig_max > 0 && !isinf(p->llm.high_freq) && !isinf(p->llm.orig_max)))
    return err(c, "llama3 scaling needs 0 < low_freq_factor < high_freq_factor and original_max_position above 0 (finite)");
  c->out[0] = *x;
  c->nout = 1;
  return NULL;
}

/* attention(q [B,Hq,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,D], len?, mask?) {scale=1/sqrt(D), causal=false, layout="bhsd"}:
 * len i32/i64 [] or [B], the cache positions attended (the first len);
 * mask, of q's dtype, [B|1, Hq|1, Sq|1, Skv|1], added to the scaled scores
 * (told from len by its dtype: integers are a length, floats a mask).
 * layout="bshd": q, k, v and the result [B,S,H,D] (heads split from the
 * features, not transposed); the mask as above.
 * attention(qkv [B,S,Hq+2*N,D], mask?) {kv_heads=N, layout="bshd"}: q, k
 * and v packed along the heads of one operand (one product's result: its
 * first Hq heads q, the next N k, the last N v), self-attention, no len. */
static rill_status_t infer_attention(ops_infer_ctx_t *c) {
  ops_params_t *p = c->p;
  char b1[96], b2[96], b3[96];
  const isa_attr_t *la = ops_attr(c, "layout");
  if (la && strcmp(la->str, "bhsd") != 0 && strcmp(la->str, "bshd") != 0)
    return err(c, "attribute 'layout' expects \"bhsd\" or \"bshd\", found \"%s\"", la->str);
  bool bshd = p->llm.bshd = la && !strcmp(la->str, "bshd");
  RILL_TRY(get_int(c, "kv_heads", 0, &p->llm.packed));
  rill_type_t qp, kp;
  const rill_type_t *q = &c->in[0], *k, *v;
  uint32_t nqkv = 3;
  if (ops_attr(c, "kv_heads")) {
    const rill_type_t *x = &c->in[0];
    int64_t N = p->llm.packed, Ht = x->rank == 4 ? x->dims[2] : 0;
    if (!bshd || c->nin > 2)
      return err(c, "kv_heads: expected attention(qkv [B,S,Hq+2*kv_heads,D], mask?) with layout=\"bshd\", found %u operand%s%s", c->nin,
                 c->nin == 1 ? "" : "s", bshd ? "" : " and layout \"bhsd\"");
    RILL_TRY(need_float(c, x, "qkv"));
    if (x->rank != 4 || isa_dim_is_sym(Ht) || N < 1 || Ht - 2 * N < N || (Ht - 2 * N) % N)
      return err(c, "qkv: expected [B,S,Hq+2*%lld,D] with Hq a multiple of kv_heads=%lld, found %s", (long long)N, (long long)N, tfmt(x, b1));
    qp = kp = *x;
    qp.dims[2] = Ht - 2 * N;
    kp.dims[2] = N;
    q = &qp;
    nqkv = 1;
  } else if (c->nin < 3) {
    return err(c, "expected q, k and v (or one packed operand with kv_heads=N), found %u operand%s", c->nin, c->nin == 1 ? "" : "s");
  }
  k = nqkv == 1 ? &kp : &c->in[1];
  v = nqkv == 1 ? &kp : &c->in[2];
  const char *form = bshd ? "[B,S,H,D]" : "[B,H,S,D]";
  int hx = bshd ? 2 : 1, sx = bshd ? 1 : 2;
  RILL_TRY(need_float(c, q, "q"));
  if (q->rank != 4 || k->rank != 4 || v->rank != 4)
    return err(c, "q, k and v: expected rank 4 (%s), found %s, %s and %s", form, tfmt(q, b1), tfmt(k, b2), tfmt(v, b3));
  if (k->dtype != q->dtype || !rill__type_eq(k, v))
    return err(c, "k and v: expected one type, of q's dtype and %s, found %s and %s (q %s)", bshd ? "[B,Skv,Hkv,D]" : "[B,Hkv,Skv,D]", tfmt(k, b1),
               tfmt(v, b2), tfmt(q, b3));
  if (k->dims[0] != q->dims[0] || k->dims[3] != q->dims[3])
    return err(c, "k: expected the batch and head size of q %s, found %s", tfmt(q, b1), tfmt(k, b2));
  int64_t hq = q->dims[hx], hkv = k->dims[hx], D = q->dims[3];
  if (isa_dim_is_sym(hq) || isa_dim_is_sym(hkv) || isa_dim_is_sym(D))
    return err(c, "head counts and the head size must be numbers, found %s and %s", tfmt(q, b1), tfmt(k, b2));
  if (hkv < 1 || D < 1 || hq % hkv) return err(c, "q's heads (%lld) must be a multiple of k's (%lld), head size at least 1", (long long)hq, (long long)hkv);
  p->llm.has_mask = c->nin > nqkv && rill__is_float(c->in[c->nin - 1].dtype);
  p->llm.has_len = c->nin > nqkv + p->llm.has_mask;
  if (nqkv == 1 && p->llm.has_len) return err(c, "kv_heads: the second operand is a mask of qkv's dtype, found %s", tfmt(&c->in[1], b1));
  if (p->llm.has_len) {
    const rill_type_t *l = &c->in[3];
    if (!int_operand(l) || !(l->rank == 0 || (l->rank == 1 && l->dims[0] == q->dims[0])))
      return err(c, "len: expected an i32 or i64 tensor of shape [] or [%s], found %s", dfmt(q->dims[0], b1), tfmt(l, b2));
  }
  RILL_TRY(get_int(c, "windows", 0, &p->llm.windows));
  if (p->llm.windows) {
    /* a batch of images times W windows, window b % W of each reading mask[b % W] */
    int64_t W = p->llm.windows;
    /* (a batch over shape variables: W must divide it as a polynomial, whatever their values) */
    int64_t per;
    rill_status_t dst = NULL;
    bool divides = W >= 1 && (isa_dim_is_sym(q->dims[0]) ? cur_syms && isa_sym_divexact(cur_syms, q->dims[0], W, &per, &dst) : q->dims[0] % W == 0);
    RILL_TRY(dst);
    if (!p->llm.has_mask || !divides || c->in[c->nin - 1].dims[0] != W)
      return err(c, "windows=%lld: expected a mask of %lld windows [W, Hq|1, Sq|1, Skv|1] and a batch that W divides, found q %s%s%s",
                 (long long)W, (long long)W, tfmt(q, b1), p->llm.has_mask ? ", mask " : " and no mask",
                 p->llm.has_mask ? tfmt(&c->in[c->nin - 1], b2) : "");
  }
  if (p->llm.has_mask) {
    const rill_type_t *m = &c->in[c->nin - 1];
    const int64_t full[4] = {p->llm.windows ? p->llm.windows : q->dims[0], hq, q->dims[sx], k->dims[sx]};
    bool ok = m->dtype == q->dtype && m->rank == 4;
    for (int i = 0; ok && i < 4; i++) ok = m->dims[i] == 1 || m->dims[i] == full[i];
    if (!ok)
      return err(c, "mask: expected %s [%s, Hq|1, Sq|1, Skv|1] (q %s, k %s), found %s", rill_dtype_name(q->dtype), p->llm.windows ? "W" : "B|1", tfmt(q, b1), tfmt(k, b2),
                 tfmt(m, b3));
  }
  p->scale = get_float(c, "scale", 1.0 / sqrt((double)D), NULL);
  if (!isfinite(p->scale)) return err(c, "scale must be finite, found %g", p->scale);
  p->llm.causal = get_bool(c, "causal", false);
  c->out[0] = *q;
  c->nout = 1;
  return NULL;
}

/* sample(logits [B,V], counter?) {temperature=1, top_k=0, top_p=1, seed=0} -> i64 [B]; counter i32/i64 []. */
static rill_status_t infer_sample(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  ops_params_t *p = c->p;
  char b1[96];
  RILL_TRY(need_float(c, x, "logits"));
  if (x->rank != 2) return err(c, "logits: expected rank 2 [B,V], found %s", tfmt(x, b1));
  if (isa_dim_is_sym(x->dims[1]) || x->dims[1] < 1 || x->dims[1] > INT32_MAX)
    return err(c, "the vocabulary size must be a number in 1..2^31-1, found %s", dfmt(x->dims[1], b1));
  if (c->nin > 1 && (!int_operand(&c->in[1]) || c->in[1].rank != 0))
    return err(c, "counter: expected an i32[] or i64[] scalar, found %s", tfmt(&c->in[1], b1));
  p->llm.temperature = get_float(c, "temperature", 1, NULL);
  p->llm.top_p = get_float(c, "top_p", 1, NULL);
  RILL_TRY(get_int(c, "top_k", 0, &p->llm.top_k));
  int64_t seed;
  RILL_TRY(get_int(c, "seed", 0, &seed));
  p->llm.seed = (uint64_t)seed;
  if (!(p->llm.temperature >= 0) || !isfinite((float)p->llm.temperature))
    return err(c, "temperature must be a finite number of at least 0 (0: greedy), found %g", p->llm.temperature);
  if (p->llm.temperature > 0 && (float)p->llm.temperature == 0)
    return err(c, "temperature %g is 0 in f32: write 0 for greedy", p->llm.temperature);
  if (!(p->llm.top_p > 0 && p->llm.top_p <= 1)) return err(c, "top_p must be in (0, 1], found %g", p->llm.top_p);
  if (p->llm.top_k < 0) return err(c, "top_k must be at least 0 (0: every token), found %lld", (long long)p->llm.top_k);
  c->out[0] = (rill_type_t){RILL_I64, 1, {x->dims[0]}};
  c->nout = 1;
  return NULL;
}

/* ---- resampling ops (cpu_resample.c; docs/internals.md, "Resampling ops") ---- */
/* A float list attribute (numbers of either kind) of exactly n values; false when absent. */
static rill_status_t get_floats(ops_infer_ctx_t *c, const char *name, int n, double *out, bool *present) {
  const isa_attr_t *a = ops_attr(c, name);
  *present = a != NULL;
  if (!a) return NULL;
  if ((int)a->count != n) return err(c, "attribute '%s' needs %d values, found %u", name, n, a->count);
  for (int i = 0; i < n; i++) out[i] = a->kind == ISA_ATTR_FLOATS || a->kind == ISA_ATTR_FLOAT ? a->floats[i] : (double)a->ints[i];
  return NULL;
}

/* resize(x, params?) {sizes, scales?, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
 * extrapolation_value, roi?}: y of dims `sizes`, of x's dtype. params (f64[3 rank]: the scales, roi starts and roi ends,
 * computed at run time) stand for the scales and roi attributes; then, and where sizes are given without scales,
 * sizes may be shape variables (bound at run time: the scale is the sizes' ratio at the sizes bound). */
static rill_status_t infer_resize(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  ops_params_t *p = c->p;
  int r = x->rank;
  char b1[96], b2[48];
  if (r < 1) return err(c, "input: expected rank 1 or more, found %s", tfmt(x, b1));
  const isa_attr_t *sz = ops_attr(c, "sizes");
  if (!sz || (int)sz->count != r) return err(c, "attribute 'sizes' (the result's dims) needs %d values (the rank of %s)", r, tfmt(x, b1));
  static const char *const modes[] = {"nearest", "linear", "cubic", NULL};
  static const char *const coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                                       "tf_crop_and_resize", "tf_half_pixel_for_nn", NULL};
  static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", NULL};
  RILL_TRY(get_choice(c, "mode", modes, RS_NEAREST, &p->rs.mode));
  RILL_TRY(get_choice(c, "coordinate_transformation_mode", coords, RS_HALF_PIXEL, &p->rs.coord));
  RILL_TRY(get_choice(c, "nearest_mode", nearests, RS_ROUND_PREFER_FLOOR, &p->rs.nearest));
  p->rs.cubic_a = get_float(c, "cubic_coeff_a", -0.75, NULL);
  p->rs.exclude = get_bool(c, "exclude_outside", false);
  p->rs.extrap = get_float(c, "extrapolation_value", 0, NULL);
  if (!isfinite(p->rs.cubic_a)) return err(c, "cubic_coeff_a must be finite, found %g", p->rs.cubic_a);
  if (x->dtype == RILL_BOOL && p->rs.mode != RS_NEAREST) return err(c, "mode \"%s\" takes a numeric input, found %s", modes[p->rs.mode], tfmt(x, b1));
  bool has_scales, has_roi;
  RILL_TRY(get_floats(c, "scales", r, p->rs.scale, &has_scales));
  RILL_TRY(get_floats(c, "roi", 2 * r, p->rs.roi, &has_roi));
  if (has_roi && p->rs.coord != RS_TF_CROP_AND_RESIZE) return err(c, "attribute 'roi' needs coordinate_transformation_mode=\"tf_crop_and_resize\"");
  p->rs.prm = c->nin > 1;
  if (p->rs.prm) {
    const rill_type_t *q = &c->in[1];
    if (q->dtype != RILL_F64 || q->rank != 1 || q->dims[0] != 3 * r)
      return err(c, "params: expected f64[%d] (the scales, roi starts and roi ends), found %s", 3 * r, tfmt(q, b1));
    if (has_scales || has_roi) return err(c, "params stand for the attributes 'scales' and 'roi': give one or the other");
  }
  c->out[0] = *x;
  for (int a = 0; a < r; a++) {
    int64_t in = x->dims[a], o = sz->ints[a];
    if (p->rs.prm) {
      if (!isa_dim_is_sym(o) && o < 0) return err(c, "axis %d: sizes must not be negative, found %lld", a, (long long)o);
      c->out[0].dims[a] = o;
      continue;
    }
    if (isa_dim_is_sym(o) || isa_dim_is_sym(in)) {
      if (has_scales && (o != in || p->rs.scale[a] != 1))
        return err(c, "axis %d: a size over shape variables (%s) with scales must stay as it is (scale 1)", a, dfmt(isa_dim_is_sym(o) ? o : in, b2));
      p->rs.scale[a] = 1; /* sizes alone: their ratio at the sizes bound */
    } else {
      if (o < 1 || in < 1) return err(c, "axis %d: sizes must be at least 1, found %lld from %lld", a, (long long)o, (long long)in);
      if (!has_scales) p->rs.scale[a] = (double)o / (double)in;
    }
    if (!(p->rs.scale[a] > 0) || isinf(p->rs.scale[a])) return err(c, "axis %d: scale must be a finite number above 0, found %g", a, p->rs.scale[a]);
    if (!has_roi) p->rs.roi[a] = 0, p->rs.roi[r + a] = 1;
    if (!isfinite(p->rs.roi[a]) || !isfinite(p->rs.roi[r + a])) return err(c, "axis %d: roi must be finite", a);
    c->out[0].dims[a] = o;
  }
  c->nout = 1;
  return NULL;
}

/* conv_transpose(x [N,C,*in], w [C,O/groups,*k], b? [O]) {stride, padding=[begin.., end..], output_padding, dilation, groups}:
 * y [N,O,*out], out = (in - 1) * stride - begin - end + dilation * (k - 1) + output_padding + 1 (docs/internals.md, "Transposed convolution"). */
static rill_status_t get_spatial(ops_infer_ctx_t *c, const char *name, int nd, int64_t def, int64_t lo, int64_t *out) {
  const isa_attr_t *a = ops_attr(c, name);
  for (int i = 0; i < nd; i++) out[i] = def;
  if (!a) return NULL;
  if ((int)a->count != nd && a->count != 1) return err(c, "attribute '%s' needs %d values (one per spatial dim), found %u", name, nd, a->count);
  for (int i = 0; i < nd; i++) {
    out[i] = a->ints[a->count == 1 ? 0 : i];
    if (out[i] < lo || out[i] > WINDOW_MAX) return err(c, "attribute '%s' must hold values in %lld..%lld, found %lld", name, (long long)lo, (long long)WINDOW_MAX, (long long)out[i]);
  }
  return NULL;
}

static rill_status_t infer_conv_transpose(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *w = &c->in[1];
  ops_params_t *p = c->p;
  char b1[96], b2[96];
  RILL_TRY(need_float(c, x, "input"));
  int nd = x->rank - 2;
  if (nd < 1 || nd > 3) return err(c, "input: expected rank 3, 4 or 5 ([N,C,*spatial]), found %s", tfmt(x, b1));
  if (w->rank != x->rank || w->dtype != x->dtype) return err(c, "weight: expected %s[C,O/groups,*kernel] of rank %d, found %s", rill_dtype_name(x->dtype), x->rank, tfmt(w, b1));
  for (int i = 1; i < x->rank; i++)
    if (isa_dim_is_sym(x->dims[i]) || isa_dim_is_sym(w->dims[i - 1]) || (i == x->rank - 1 && isa_dim_is_sym(w->dims[i])))
      return err(c, "channels, spatial sizes and the kernel must be numbers (the batch may be a shape variable), found %s and %s", tfmt(x, b1), tfmt(w, b2));
  RILL_TRY(get_int(c, "groups", 1, &p->groups));
  if (p->groups < 1 || w->dims[0] != x->dims[1] || x->dims[1] % p->groups)
    return err(c, "weight %s does not fit input %s with groups=%lld (expected [C,...] with C divisible by groups)", tfmt(w, b1), tfmt(x, b2), (long long)p->groups);
  int64_t O;
  if (__builtin_mul_overflow(w->dims[1], p->groups, &O)) return err(c, "size arithmetic overflows");
  if (c->nin >= 3) {
    rill_type_t bt = {x->dtype, 1, {O}};
    if (!rill__type_eq(&c->in[2], &bt)) return err(c, "bias: expected %s, found %s", tfmt(&bt, b1), tfmt(&c->in[2], b2));
  }
  p->has_bias = c->nin >= 3;
  p->ct.nd = nd;
  RILL_TRY(get_spatial(c, "stride", nd, 1, 1, p->ct.s));
  RILL_TRY(get_spatial(c, "dilation", nd, 1, 1, p->ct.d));
  RILL_TRY(get_spatial(c, "output_padding", nd, 0, 0, p->ct.op));
  const isa_attr_t *pa = ops_attr(c, "padding");
  for (int i = 0; i < nd; i++) p->ct.pb[i] = p->ct.pe[i] = 0;
  if (pa && (int)pa->count != 2 * nd) return err(c, "attribute 'padding' needs %d values (begins, then ends), found %u", 2 * nd, pa->count);
  for (int i = 0; pa && i < nd; i++) {
    p->ct.pb[i] = pa->ints[i], p->ct.pe[i] = pa->ints[nd + i];
    if (llabs(p->ct.pb[i]) > WINDOW_MAX || llabs(p->ct.pe[i]) > WINDOW_MAX) return err(c, "padding must be within -%lld..%lld", (long long)WINDOW_MAX, (long long)WINDOW_MAX);
  }
  rill_type_t *o = &c->out[0];
  *o = *x;
  o->dims[1] = O;
  for (int i = 0; i < nd; i++) {
    int64_t in = x->dims[2 + i], k = w->dims[2 + i];
    if (in < 1 || k < 1) return err(c, "spatial sizes and the kernel must be at least 1, found %s and %s", tfmt(x, b1), tfmt(w, b2));
    if ((double)(in - 1) * (double)p->ct.s[i] + (double)p->ct.d[i] * (double)(k - 1) > 1e15) return err(c, "size arithmetic overflows");
    int64_t len = (in - 1) * p->ct.s[i] - p->ct.pb[i] - p->ct.pe[i] + p->ct.d[i] * (k - 1) + p->ct.op[i] + 1;
    if (len < 1) return err(c, "spatial dim %d: the output would have %lld elements (at least 1)", i, (long long)len);
    o->dims[2 + i] = len;
  }
  c->nout = 1;
  return NULL;
}

/* grid_sample(x [N,C,H,W], grid [N,HO,WO,2] (x, y in [-1, 1])) {mode="bilinear", padding_mode="zeros",
 * align_corners=false}: y [N,C,HO,WO] (docs/internals.md, "Resampling ops"). */
static rill_status_t infer_grid_sample(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *g = &c->in[1];
  char b1[96], b2[96];
  RILL_TRY(need_float(c, x, "input"));
  RILL_TRY(need_float(c, g, "grid"));
  if (x->rank != 4) return err(c, "input: expected rank 4 ([N,C,H,W]), found %s", tfmt(x, b1));
  if (g->rank != 4 || g->dims[0] != x->dims[0] || g->dims[3] != 2) return err(c, "grid: expected [N,HO,WO,2] with the input's N, found %s for %s", tfmt(g, b1), tfmt(x, b2));
  for (int i = 1; i < 4; i++)
    if (isa_dim_is_sym(x->dims[i])) return err(c, "channels and spatial sizes must be numbers, found %s", tfmt(x, b1));
  if (x->dims[2] < 1 || x->dims[3] < 1) return err(c, "input: an empty image, %s", tfmt(x, b1));
  static const char *const modes[] = {"nearest", "bilinear", "bicubic", NULL}, *const pads[] = {"zeros", "border", "reflection", NULL};
  RILL_TRY(get_choice(c, "mode", modes, GS_LINEAR, &c->p->gs.mode));
  RILL_TRY(get_choice(c, "padding_mode", pads, GS_ZEROS, &c->p->gs.pad));
  c->p->gs.align = get_bool(c, "align_corners", false);
  c->out[0] = (rill_type_t){x->dtype, 4, {x->dims[0], x->dims[1], g->dims[1], g->dims[2]}};
  c->nout = 1;
  return NULL;
}

/* update(state, x, pos) {axis}: state with x written at offset pos along
 * axis (in place where the result is the state's own register). x has the
 * state's dtype and dims but along axis, where it has at most as many; pos
 * is i32/i64 [] (every row) or [state's dim 0] (one per index of axis 0,
 * axis > 0). Offsets are checked when it runs. */
static rill_status_t infer_update(ops_infer_ctx_t *c) {
  const rill_type_t *st = &c->in[0], *x = &c->in[1], *pos = &c->in[2];
  char b1[96], b2[96];
  const isa_attr_t *a = ops_attr(c, "axis");
  if (!a) return err(c, "needs the attribute axis (the dim the offset counts along)");
  if (st->rank == 0) return err(c, "the state must have rank 1 or more, found %s", tfmt(st, b1));
  if (isa_type_is_sym(st)) return err(c, "the state's sizes must be numbers, found %s", tfmt(st, b1));
  RILL_TRY(norm_axis(c, a->ints[0], st->rank, &c->p->axis));
  int64_t ax = c->p->axis;
  bool per_row = pos->rank == 1;
  if (!int_operand(pos) || !(pos->rank == 0 || (per_row && pos->dims[0] == st->dims[0])))
    return err(c, "pos: expected an i32 or i64 tensor of shape [] or [%lld] (one offset per index of axis 0), found %s", (long long)st->dims[0], tfmt(pos, b1));
  if (per_row && ax == 0) return err(c, "pos of shape [%lld] (an offset per index of axis 0) needs an axis above 0", (long long)st->dims[0]);
  bool shape_ok = x->dtype == st->dtype && x->rank == st->rank;
  for (int d = 0; shape_ok && d < st->rank; d++)
    if (d != ax) shape_ok = x->dims[d] == st->dims[d];
  if (!shape_ok)
    return err(c, "x: expected the state's dtype and dims %s except along axis %lld, found %s", tfmt(st, b1), (long long)ax, tfmt(x, b2));
  if (!isa_dim_is_sym(x->dims[ax]) && x->dims[ax] > st->dims[ax])
    return err(c, "x has %lld along axis %lld, more than the state's %lld", (long long)x->dims[ax], (long long)ax, (long long)st->dims[ax]);
  c->out[0] = *st;
  c->nout = 1;
  return NULL;
}

/* rotary_update(kc, vc, q, k, v, rpos, upos) {rotary's attributes}: results
 * kc', vc', qr with qr = rotary(q, rpos), kc' = update(kc, transpose(rotary(k,
 * rpos), [0,2,1,3]), upos) {axis=2} and vc' the same of v unrotated (what -O1
 * writes for a decode step's rotations and cache writes: assembler/decode_fuse.c,
 * which emits kc' and vc' into the states themselves). q [B,S,Hq,D], k and v
 * [B,S,Hkv,D], kc and vc [B,Hkv,T,D]; rpos as rotary's, upos as update's. */
static rill_status_t infer_rotary_update(ops_infer_ctx_t *c) {
  const rill_type_t *kc = &c->in[0], *vc = &c->in[1], *q = &c->in[2], *k = &c->in[3], *v = &c->in[4];
  char b1[96], b2[96];
  if (c->max_out < 3) return err(c, "has three results: the key cache, the value cache and q rotated");
  rill_type_t rin[2] = {*k, c->in[5]}, rout[1];
  ops_infer_ctx_t rc = *c;
  rc.in = rin, rc.nin = 2, rc.out = rout, rc.max_out = 1, rc.nout = 0;
  RILL_TRY(infer_rotary(&rc));
  rin[0] = *q;
  RILL_TRY(infer_rotary(&rc));
  if (!rill__type_eq(k, v)) return err(c, "k and v: expected one type, found %s and %s", tfmt(k, b1), tfmt(v, b2));
  if (q->dtype != k->dtype || q->dims[0] != k->dims[0] || q->dims[1] != k->dims[1] || q->dims[3] != k->dims[3])
    return err(c, "q and k: expected one dtype, batch, length and head size, found %s and %s", tfmt(q, b1), tfmt(k, b2));
  int64_t two = 2;
  isa_attr_t ax = {.name = "axis", .kind = ISA_ATTR_INT, .count = 1, .ints = &two};
  rill_type_t kt = *k, uin[3], uout[1];
  kt.dims[1] = k->dims[2];
  kt.dims[2] = k->dims[1];
  ops_params_t up;
  for (int j = 0; j < 2; j++) {
    uin[0] = c->in[j], uin[1] = kt, uin[2] = c->in[6];
    memset(&up, 0, sizeof up);
    ops_infer_ctx_t uc = {c->def, uin, 3, &ax, 1, uout, 0, 1, &up};
    RILL_TRY(infer_update(&uc));
  }
  c->p->axis = 2;
  c->out[0] = *kc;
  c->out[1] = *vc;
  c->out[2] = *q;
  c->nout = 3;
  return NULL;
}

/* roi_align(x [N,C,H,W], rois [R,4] (x1, y1, x2, y2), batch [R] i32/i64) {output_height=1, output_width=1,
 * sampling_ratio=0, spatial_scale=1, mode="avg", coordinate_transformation_mode="half_pixel"}: y [R,C,OH,OW]. */
static rill_status_t infer_roi_align(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *r = &c->in[1], *b = &c->in[2];
  char b1[96], b2[96];
  ops_params_t *p = c->p;
  RILL_TRY(need_float(c, x, "input"));
  RILL_TRY(need_float(c, r, "rois"));
  if (x->rank != 4) return err(c, "input: expected rank 4 ([N,C,H,W]), found %s", tfmt(x, b1));
  for (int i = 1; i < 4; i++)
    if (isa_dim_is_sym(x->dims[i])) return err(c, "channels and spatial sizes must be numbers, found %s", tfmt(x, b1));
  if (x->dims[2] < 1 || x->dims[3] < 1) return err(c, "input: an empty image, %s", tfmt(x, b1));
  if (r->rank != 2 || r->dims[1] != 4) return err(c, "rois: expected [R,4], found %s", tfmt(r, b1));
  if (!int_operand(b) || b->rank != 1 || b->dims[0] != r->dims[0]) return err(c, "batch indices: expected i32 or i64 [R] for rois %s, found %s", tfmt(r, b1), tfmt(b, b2));
  RILL_TRY(get_int(c, "output_height", 1, &p->gs.oh));
  RILL_TRY(get_int(c, "output_width", 1, &p->gs.ow));
  RILL_TRY(get_int(c, "sampling_ratio", 0, &p->gs.sampling));
  if (p->gs.oh < 1 || p->gs.ow < 1 || p->gs.oh > WINDOW_MAX || p->gs.ow > WINDOW_MAX) return err(c, "output_height and output_width must be in 1..%lld", (long long)WINDOW_MAX);
  if (p->gs.sampling < 0 || p->gs.sampling > 4096) return err(c, "sampling_ratio must be in 0..4096, found %lld", (long long)p->gs.sampling);
  bool has;
  p->gs.scale = get_float(c, "spatial_scale", 1.0, &has);
  if (!(p->gs.scale > 0) || !isfinite(p->gs.scale)) return err(c, "spatial_scale must be positive and finite");
  static const char *const modes[] = {"avg", "max", NULL}, *const coords[] = {"output_half_pixel", "half_pixel", NULL};
  int mode, coord;
  RILL_TRY(get_choice(c, "mode", modes, 0, &mode));
  RILL_TRY(get_choice(c, "coordinate_transformation_mode", coords, 1, &coord));
  p->gs.max = mode == 1, p->gs.half_pixel = coord == 1;
  c->out[0] = (rill_type_t){x->dtype, 4, {r->dims[0], x->dims[1], p->gs.oh, p->gs.ow}};
  c->nout = 1;
  return NULL;
}

/* ---- indexing ops (cpu_index.c; docs/internals.md, "Indexing ops") ---- */
/* scatter_nd(x, idx [.., k] i32/i64, u [idx.dims[:-1] ++ x.dims[k:]]) {reduction="none"}:
 * y = x, then for each index tuple t in order, the slice y[idx[t]] := u[t]
 * (none) or y[idx[t]] op u[t] (add, mul, max, min); negative indices count
 * from the end; an index out of range is a run-time error. */
static rill_status_t infer_scatter_nd(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
  char b1[96], b2[96];
  if (!int_operand(ix) || ix->rank < 1) return err(c, "indices: expected an i32 or i64 tensor of rank at least 1, found %s", tfmt(ix, b1));
  int64_t k = ix->dims[ix->rank - 1];
  if (isa_dim_is_sym(k) || k < 1 || k > x->rank) return err(c, "indices: the last dim must be a number in 1..%d (the operand's rank), found %s", x->rank, tfmt(ix, b1));
  rill_type_t want = {x->dtype, ix->rank - 1 + x->rank - (int)k, {0}};
  if (want.rank > RILL_MAX_RANK) return err(c, "updates would have rank %d (at most %d)", want.rank, RILL_MAX_RANK);
  for (int i = 0; i < ix->rank - 1; i++) want.dims[i] = ix->dims[i];
  for (int i = (int)k; i < x->rank; i++) want.dims[ix->rank - 1 + i - (int)k] = x->dims[i];
  if (!rill__type_eq(u, &want)) return err(c, "updates: expected %s, found %s", tfmt(&want, b1), tfmt(u, b2));
  static const char *const names[] = {"none", "add", "mul", "max", "min", NULL};
  RILL_TRY(get_choice(c, "reduction", names, OPS_SCATTER_NONE, &c->p->ix.reduction));
  if (c->p->ix.reduction != OPS_SCATTER_NONE && x->dtype == RILL_BOOL) return err(c, "a reduction over bool");
  c->out[0] = *x;
  c->nout = 1;
  return NULL;
}

/* topk(x) {k, axis=-1, largest=true}: the k largest (smallest) elements
 * along axis, in order (equal values by index, NaN the largest), and their
 * i64 indices. */
static rill_status_t infer_topk(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96];
  RILL_TRY(need_num(c, x, "operand"));
  if (x->rank < 1) return err(c, "operand: expected rank at least 1, found %s", tfmt(x, b1));
  int64_t axis, k;
  RILL_TRY(get_int(c, "axis", -1, &axis));
  RILL_TRY(norm_axis(c, axis, x->rank, &c->p->axis));
  if (!ops_attr(c, "k")) return err(c, "attribute 'k' is required");
  if (ops_attr(c, "k")->count != 1) return err(c, "attribute 'k' must be one size");
  RILL_TRY(get_int(c, "k", 0, &k));
  int64_t n = x->dims[c->p->axis];
  /* k over shape variables (a k read back at run time): checked against the axis once both are numbers */
  if ((!isa_dim_is_sym(k) && k < 0) || (!isa_dim_is_sym(k) && !isa_dim_is_sym(n) && k > n)) return err(c, "k=%lld: expected 0 up to the axis's size, in %s", (long long)k, tfmt(x, b1));
  if (c->max_out < 2) return err(c, "produces 2 results (values, indices), %u names given", c->max_out);
  c->p->ix.k = k;
  c->p->ix.largest = get_bool(c, "largest", true);
  c->out[0] = *x;
  c->out[0].dims[c->p->axis] = k;
  c->out[1] = c->out[0];
  c->out[1].dtype = RILL_I64;
  c->nout = 2;
  return NULL;
}

/* emit(tokens) -> bool[]: publishes tokens (i32 or i64, numbers for sizes,
 * at most OPS_EMIT_MAX) as one record of the VM's token channel; false when
 * the host has cancelled (a generation loop's condition). */
static rill_status_t infer_emit(ops_infer_ctx_t *c) {
  const rill_type_t *x = &c->in[0];
  char b1[96];
  if (!int_operand(x) || isa_type_is_sym(x) || rill_type_numel(x) > OPS_EMIT_MAX)
    return err(c, "tokens: expected an i32 or i64 tensor of sizes that are numbers, at most %d values, found %s", OPS_EMIT_MAX, tfmt(x, b1));
  c->out[0] = (rill_type_t){RILL_BOOL, 0, {0}};
  c->nout = 1;
  return NULL;
}

/* ---- fused groups (fused.c) ---- */
static rill_status_t infer_fused(ops_infer_ctx_t *c) {
  const isa_attr_t *e = ops_attr(c, "expr");
  if (!e) return err(c, "missing attribute 'expr'");
  ops_fused_t f;
  rill_type_t out[OPS_FUSED_MAX_OUT];
  RILL_TRY(ops_fused_parse_group(e->str, ops_attr(c, "perms"), c->in, c->nin, &f, out));
  if (f.nout > c->max_out) return err(c, "%u results, room for %u", f.nout, c->max_out);
  memcpy(c->out, out, sizeof(rill_type_t) * f.nout);
  c->nout = f.nout;
  return NULL;
}

/* ---- the table ---- */
static const ops_attr_spec_t A_NONE[] = {{NULL, 0}};
static const ops_attr_spec_t A_GELU[] = {{"approximate", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_LEAKY[] = {{"alpha", K_NUM}, {NULL, 0}};
static const ops_attr_spec_t A_CLIP[] = {{"min", K_NUM}, {"max", K_NUM}, {NULL, 0}};
static const ops_attr_spec_t A_CAST[] = {{"dtype", K(DTYPE)}, {NULL, 0}};
static const ops_attr_spec_t A_REDUCE[] = {{"axes", K_LIST}, {"keepdims", K(BOOL)}, {"prologue", K(STRING)}, {"epilogue", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_ARGMAX[] = {{"axis", K(INT)}, {"keepdims", K(BOOL)}, {NULL, 0}};
static const ops_attr_spec_t A_AXIS[] = {{"axis", K(INT)}, {NULL, 0}};
static const ops_attr_spec_t A_SOFTMAX[] = {{"axis", K(INT)}, {"scale", K_NUM}, {"divisor", K_NUM}, {"prologue", K(STRING)},
                                           {"epilogue", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_LN[] = {{"axis", K(INT)}, {"eps", K_NUM}, {"epilogue", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_BN[] = {{"eps", K_NUM}, {NULL, 0}};
static const ops_attr_spec_t A_CONV[] = {{"stride", K_LIST}, {"padding", K_LIST}, {"dilation", K_LIST}, {"groups", K(INT)}, {"activation", K(STRING)}, {"layout", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_MAXPOOL[] = {{"kernel", K_LIST}, {"stride", K_LIST}, {"padding", K_LIST}, {"ceil_mode", K(BOOL)}, {"layout", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_AVGPOOL[] = {{"kernel", K_LIST}, {"stride", K_LIST}, {"padding", K_LIST}, {"ceil_mode", K(BOOL)}, {"count_include_pad", K(BOOL)}, {"layout", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_ADAPTIVE[] = {{"output", K_LIST}, {"layout", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_SHAPE[] = {{"shape", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_FLATTEN[] = {{"start", K(INT)}, {"end", K(INT)}, {NULL, 0}};
static const ops_attr_spec_t A_PERM[] = {{"perm", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_AXES[] = {{"axes", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_SPLIT[] = {{"axis", K(INT)}, {"sizes", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_SLICE[] = {{"starts", K_LIST}, {"ends", K_LIST}, {"axes", K_LIST}, {"steps", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_PAD[] = {{"pads", K_LIST}, {"value", K_NUM}, {NULL, 0}};

#define UN(n, c, a) {n, 1, 1, c, a, infer_unary, ops_cpu_unary, false, false}
#define BIN(n, c) {n, 2, 2, c, c == B_GEGLU ? A_GELU : A_NONE, infer_binary, ops_cpu_binary, true, false}

static const ops_attr_spec_t A_LINEAR[] = {{"activation", K(STRING)}, {"weight", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_MATMUL[] = {{"activation", K(STRING)}, {"perm_a", K_LIST}, {"perm_b", K_LIST}, {"perm_y", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_FUSED[] = {{"expr", K(STRING)}, {"perms", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_RMS[] = {{"axis", K(INT)}, {"eps", K_NUM}, {NULL, 0}};
static const ops_attr_spec_t A_ROTARY[] = {{"style", K(STRING)}, {"theta", K_NUM}, {"rotary_dim", K(INT)}, {"scaling", K(STRING)}, {"factor", K_NUM},
                                           {"low_freq_factor", K_NUM}, {"high_freq_factor", K_NUM}, {"original_max_position", K_NUM}, {NULL, 0}};
static const ops_attr_spec_t A_ATTENTION[] = {{"scale", K_NUM}, {"causal", K(BOOL)}, {"layout", K(STRING)}, {"windows", K(INT)}, {"kv_heads", K(INT)}, {NULL, 0}};
static const ops_attr_spec_t A_RESIZE[] = {{"sizes", K_LIST}, {"scales", K_LIST | K(FLOATS) | K(FLOAT)}, {"mode", K(STRING)},
                                           {"coordinate_transformation_mode", K(STRING)}, {"nearest_mode", K(STRING)}, {"cubic_coeff_a", K_NUM},
                                           {"exclude_outside", K(BOOL)}, {"extrapolation_value", K_NUM}, {"roi", K_LIST | K(FLOATS) | K(FLOAT)}, {NULL, 0}};
static const ops_attr_spec_t A_QMATMUL[] = {{"y_scale", K_NUM}, {"dtype", K(DTYPE)}, {"activation", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_QCONV[] = {{"stride", K_LIST}, {"padding", K_LIST}, {"dilation", K_LIST}, {"groups", K(INT)}, {"y_scale", K_NUM}, {"dtype", K(DTYPE)},
                                          {"activation", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_CONVT[] = {{"stride", K_LIST}, {"padding", K_LIST}, {"output_padding", K_LIST}, {"dilation", K_LIST}, {"groups", K(INT)}, {NULL, 0}};
static const ops_attr_spec_t A_GRID[] = {{"mode", K(STRING)}, {"padding_mode", K(STRING)}, {"align_corners", K(BOOL)}, {NULL, 0}};
static const ops_attr_spec_t A_ROI[] = {{"output_height", K(INT)}, {"output_width", K(INT)}, {"sampling_ratio", K(INT)}, {"spatial_scale", K_NUM},
                                        {"mode", K(STRING)}, {"coordinate_transformation_mode", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_SCATTER[] = {{"reduction", K(STRING)}, {NULL, 0}};
static const ops_attr_spec_t A_TOPK[] = {{"k", K_LIST}, /* k=[K]: a size over shape variables (read back) */ {"axis", K(INT)}, {"largest", K(BOOL)}, {NULL, 0}};
static const ops_attr_spec_t A_FLIN[] = {{"prologue", K(STRING)}, {"eps", K_NUM}, {"residual", K(BOOL)}, {"epilogue", K(STRING)}, {"gate_second", K(BOOL)}, {NULL, 0}};
static const ops_attr_spec_t A_UPDATE[] = {{"axis", K(INT)}, {NULL, 0}};
static const ops_attr_spec_t A_NONZERO[] = {{"count", K_LIST}, {NULL, 0}};
static const ops_attr_spec_t A_NMS[] = {{"center_point_box", K(INT)}, {NULL, 0}};
static const ops_attr_spec_t A_SAMPLE[] = {{"temperature", K_NUM}, {"top_k", K(INT)}, {"top_p", K_NUM}, {"seed", K(INT)}, {NULL, 0}};

static const ops_def_t OPS[] = {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) UN(NAME, U_##ID, ATTRS),
#define EW_BINARY(ID, NAME, RES, FE, IE) BIN(NAME, B_##ID),
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
    {"where", 3, 3, 0, A_NONE, infer_where, ops_cpu_where, true, false},
    {"sum", 1, 1, R_SUM, A_REDUCE, infer_reduce, ops_cpu_reduce, false, false},
    {"mean", 1, 1, R_MEAN, A_REDUCE, infer_reduce, ops_cpu_reduce, false, false},
    {"max", 1, 1, R_MAX, A_REDUCE, infer_reduce, ops_cpu_reduce, false, false},
    {"min", 1, 1, R_MIN, A_REDUCE, infer_reduce, ops_cpu_reduce, false, false},
    {"prod", 1, 1, R_PROD, A_REDUCE, infer_reduce, ops_cpu_reduce, false, false},
    {"argmax", 1, 1, 0, A_ARGMAX, infer_argmax, ops_cpu_argmax, false, false},
    {"softmax", 1, 2, 0, A_SOFTMAX, infer_softmax, ops_cpu_softmax, false, false},
    {"log_softmax", 1, 2, 1, A_SOFTMAX, infer_softmax, ops_cpu_softmax, false, false},
    {"layer_norm", 1, 4, 0, A_LN, infer_layer_norm, ops_cpu_layer_norm, false, false},
    {"batch_norm", 5, 5, 0, A_BN, infer_batch_norm, ops_cpu_batch_norm, false, false},
    {"matmul", 2, 2, 0, A_MATMUL, infer_matmul, ops_cpu_matmul, false, false},
    {"linear", 2, 4, 0, A_LINEAR, infer_linear, ops_cpu_linear, false, false},
    {"conv2d", 2, 4, 0, A_CONV, infer_conv2d, ops_cpu_conv2d, false, false},
    {"qmatmul", 4, 7, 0, A_QMATMUL, infer_qmatmul, ops_cpu_qmatmul, false, false},
    {"qconv2d", 4, 7, 0, A_QCONV, infer_qconv2d, ops_cpu_qconv2d, false, false},
    {"max_pool2d", 1, 1, 0, A_MAXPOOL, infer_pool, ops_cpu_pool2d, false, false},
    {"avg_pool2d", 1, 1, 1, A_AVGPOOL, infer_pool, ops_cpu_pool2d, false, false},
    {"adaptive_avg_pool2d", 1, 1, 0, A_ADAPTIVE, infer_adaptive, ops_cpu_adaptive_pool, false, false},
    {"reshape", 1, 1, 0, A_SHAPE, infer_reshape, ops_cpu_copy, false, false},
    {"flatten", 1, 1, 0, A_FLATTEN, infer_flatten, ops_cpu_copy, false, false},
    {"transpose", 1, 1, 0, A_PERM, infer_transpose, ops_cpu_transpose, false, false},
    {"squeeze", 1, 1, 0, A_AXES, infer_squeeze, ops_cpu_copy, false, false},
    {"unsqueeze", 1, 1, 1, A_AXES, infer_squeeze, ops_cpu_copy, false, false},
    {"broadcast_to", 1, 1, 0, A_SHAPE, infer_broadcast_to, ops_cpu_broadcast, false, false},
    {"concat", 1, -1, 0, A_AXIS, infer_concat, ops_cpu_concat, false, false},
    {"split", 1, 1, 0, A_SPLIT, infer_split, ops_cpu_split, false, false},
    {"slice", 1, 1, 0, A_SLICE, infer_slice, ops_cpu_slice, false, false},
    {"pad", 1, 1, 0, A_PAD, infer_pad, ops_cpu_pad, false, false},
    {"gather", 2, 2, 0, A_AXIS, infer_gather, ops_cpu_gather, false, false},
    {"fused", 1, OPS_FUSED_MAX_IN, 0, A_FUSED, infer_fused, ops_cpu_fused, false, false},
    {"rms_norm", 1, 2, 0, A_RMS, infer_rms_norm, ops_cpu_rms_norm, false, false},
    {"rotary", 2, 2, 0, A_ROTARY, infer_rotary, ops_cpu_rotary, false, false},
    {"fused_linear", 2, 5, 0, A_FLIN, infer_fused_linear, ops_cpu_fused_linear, false, false},
    {"attention", 1, 5, 0, A_ATTENTION, infer_attention, ops_cpu_attention, false, false},
    {"sample", 1, 2, 0, A_SAMPLE, infer_sample, ops_cpu_sample, false, false},
    {"update", 3, 3, 0, A_UPDATE, infer_update, ops_cpu_update, false, true},
    {"rotary_update", 7, 7, 0, A_ROTARY, infer_rotary_update, ops_cpu_rotary_update, false, true},
    {"emit", 1, 1, 0, A_NONE, infer_emit, ops_cpu_emit, false, true},
    {"resize", 1, 2, 0, A_RESIZE, infer_resize, ops_cpu_resize, false, false},
    {"conv_transpose", 2, 3, 0, A_CONVT, infer_conv_transpose, ops_cpu_conv_transpose, false, false},
    {"grid_sample", 2, 2, 0, A_GRID, infer_grid_sample, ops_cpu_grid_sample, false, false},
    {"roi_align", 3, 3, 0, A_ROI, infer_roi_align, ops_cpu_roi_align, false, false},
    {"scatter_nd", 3, 3, 0, A_SCATTER, infer_scatter_nd, ops_cpu_scatter_nd, false, false},
    {"topk", 1, 1, 0, A_TOPK, infer_topk, ops_cpu_topk, false, false},
    {"nonzero", 1, 1, 0, A_NONZERO, infer_nonzero, ops_cpu_nonzero, false, false},
    {"nms", 4, 5, 0, A_NMS, infer_nms, ops_cpu_nms, false, false},
    {"all_reduce", 1, 1, OPS_COLL_ALL_REDUCE, ops_coll_reduce_attrs, ops_infer_collective, ops_cpu_collective, false, true},
    {"all_gather", 1, 1, OPS_COLL_ALL_GATHER, ops_coll_gather_attrs, ops_infer_collective, ops_cpu_collective, false, true},
    {"reduce_scatter", 1, 1, OPS_COLL_REDUCE_SCATTER, ops_coll_scatter_attrs, ops_infer_collective, ops_cpu_collective, false, true},
    {"broadcast", 1, 1, OPS_COLL_BROADCAST, ops_coll_bcast_attrs, ops_infer_collective, ops_cpu_collective, false, true},
    {"rank", 0, 0, OPS_COLL_RANK, A_NONE, ops_infer_collective, ops_cpu_collective, false, true},
    {"ranks", 0, 0, OPS_COLL_RANKS, A_NONE, ops_infer_collective, ops_cpu_collective, false, true},
    {"send", 1, 1, OPS_COLL_SEND, ops_coll_send_attrs, ops_infer_collective, ops_cpu_collective, false, true},
    {"recv", 0, 0, OPS_COLL_RECV, ops_coll_recv_attrs, ops_infer_collective, ops_cpu_collective, false, true},
    {"sendrecv", 0, OPS_P2P_GROUP_MAX, OPS_COLL_SENDRECV, ops_coll_sendrecv_attrs, ops_infer_collective, ops_cpu_collective, false, true},
};

bool ops_is_elementwise(const ops_def_t *def) {
  return def->cpu == ops_cpu_unary || def->cpu == ops_cpu_binary || def->cpu == ops_cpu_where;
}

const ops_def_t *ops_find(const char *name) {
  for (size_t i = 0; i < RILL_ARRAY_LEN(OPS); i++)
    if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
  return NULL;
}

const ops_def_t *ops_at(size_t i) { return i < RILL_ARRAY_LEN(OPS) ? &OPS[i] : NULL; }

/* Attributes where a shape variable's name may stand for its size. */
static bool sym_attr_ok(const ops_def_t *def, const char *name) {
  return (strcmp(name, "shape") == 0 && (strcmp(def->name, "reshape") == 0 || strcmp(def->name, "broadcast_to") == 0)) ||
         (strcmp(name, "sizes") == 0 && (strcmp(def->name, "split") == 0 || strcmp(def->name, "resize") == 0)) ||
         (strcmp(name, "count") == 0 && strcmp(def->name, "nonzero") == 0) || (strcmp(name, "pads") == 0 && strcmp(def->name, "pad") == 0) ||
         (strcmp(name, "k") == 0 && strcmp(def->name, "topk") == 0);
}

rill_status_t ops_infer_sym(const ops_def_t *def, isa_syms_t *syms, const rill_type_t *in, uint32_t nin,
                            const isa_attr_t *attrs, uint32_t nattrs, rill_type_t *out,
                            uint32_t max_out, uint32_t *out_nout, ops_params_t *params) {
  isa_syms_t *saved = cur_syms;
  cur_syms = syms;
  rill_status_t st = ops_infer(def, in, nin, attrs, nattrs, out, max_out, out_nout, params);
  cur_syms = saved;
  return st;
}

rill_status_t ops_infer(const ops_def_t *def, const rill_type_t *in, uint32_t nin,
                        const isa_attr_t *attrs, uint32_t nattrs, rill_type_t *out,
                        uint32_t max_out, uint32_t *out_nout, ops_params_t *params) {
  memset(params, 0, sizeof *params);
  ops_infer_ctx_t c = {def, in, nin, attrs, nattrs, out, 0, max_out, params};
  if ((int)nin < def->min_in || (def->max_in >= 0 && (int)nin > def->max_in)) {
    if (def->min_in == def->max_in) return err(&c, "expected %d operands, found %u", def->min_in, nin);
    if (def->max_in < 0) return err(&c, "expected at least %d operands, found %u", def->min_in, nin);
    return err(&c, "expected %d to %d operands, found %u", def->min_in, def->max_in, nin);
  }
  RILL_TRY(check_attrs(&c));
  for (uint32_t i = 0; i < nattrs; i++)
    for (uint32_t j = 0; attrs[i].kind == ISA_ATTR_INTS && j < attrs[i].count; j++)
      if (isa_dim_is_sym(attrs[i].ints[j]) && !sym_attr_ok(def, attrs[i].name))
        return err(&c, "attribute '%s' takes numbers only (a shape variable's name may stand in reshape's and broadcast_to's shape, split's and resize's sizes, nonzero's count, pad's pads and topk's k)", attrs[i].name);
  if (max_out < 1) return err(&c, "no result");
  RILL_TRY(def->infer(&c));
  for (uint32_t i = 0; i < c.nout; i++) {
    size_t n;
    if (out[i].rank > RILL_MAX_RANK || (!isa_type_is_sym(&out[i]) && !rill__type_sizes(&out[i], &n, NULL)))
      return err(&c, "result %u is too large", i + 1);
  }
  *out_nout = c.nout;
  return NULL;
}

/* Attribute `name` (a prologue or epilogue, checked by the op's inference)
 * of the plan's op, over n operands of types t, parsed into *out. */
static rill_status_t parse_around(ops_plan_t *plan, const char *name, const rill_type_t *t, uint32_t n, ops_fused_t **out) {
  const isa_opdecl_t *d = plan->decl;
  const isa_attr_t *a = ops_attr(&(ops_infer_ctx_t){.attrs = d->attrs, .nattrs = d->nattrs}, name);
  if (!a) return NULL;
  rill_type_t ft[OPS_FUSED_MAX_OUT];
  if (!(*out = rill__alloc(plan->a, sizeof **out))) return rill__oom();
  return ops_fused_parse(a->str, t, n, *out, ft);
}

rill_status_t ops_plan_init(ops_plan_t *plan, const isa_opdecl_t *decl, const rill_allocator_t *a) {
  memset(plan, 0, sizeof *plan);
  plan->a = a ? a : rill_allocator_system();
  const ops_def_t *def = ops_find(decl->name);
  if (!def) return rill__status(RILL_NOT_FOUND, "unknown op '%s'", decl->name);
  rill_type_t out[64];
  uint32_t nout;
  uint32_t max_out = decl->nout < 64 ? decl->nout : 64;
  RILL_TRY(ops_infer(def, decl->in, decl->nin, decl->attrs, decl->nattrs, out, max_out ? max_out : 1, &nout, &plan->p));
  if (nout != decl->nout) return rill__status(RILL_VERIFY_ERROR, "%s: declares %u results, the op gives %u", decl->name, decl->nout, nout);
  for (uint32_t i = 0; i < nout; i++) {
    if (!rill__type_eq(&out[i], &decl->out[i])) {
      char b1[96], b2[96];
      return rill__status(RILL_VERIFY_ERROR, "%s: result %u declared %s, the op gives %s", decl->name, i + 1,
                          rill_type_format(&decl->out[i], b1, 96), rill_type_format(&out[i], b2, 96));
    }
  }
  plan->def = def;
  plan->decl = decl;
  if (def->cpu == ops_cpu_softmax || def->cpu == ops_cpu_layer_norm || def->cpu == ops_cpu_reduce) {
    rill_status_t st = parse_around(plan, "prologue", decl->in, decl->nin, &plan->pro);
    if (!st) st = parse_around(plan, "epilogue", &decl->out[0], 1, &plan->epi);
    if (st) {
      ops_plan_fini(plan);
      return st;
    }
  }
  if (def->cpu == ops_cpu_fused) {
    rill_type_t ft[OPS_FUSED_MAX_OUT];
    if (!(plan->fused = rill__alloc(plan->a, sizeof *plan->fused))) return rill__oom();
    ops_infer_ctx_t ac = {.attrs = decl->attrs, .nattrs = decl->nattrs};
    rill_status_t st = ops_fused_parse_group(ops_attr(&ac, "expr")->str, ops_attr(&ac, "perms"), decl->in, decl->nin, plan->fused, ft);
    if (st) {
      ops_plan_fini(plan);
      return st;
    }
  }
  return NULL;
}

void ops_plan_fini(ops_plan_t *plan) {
  if (plan->fused) rill__free(plan->a, plan->fused);
  if (plan->pro) rill__free(plan->a, plan->pro);
  if (plan->epi) rill__free(plan->a, plan->epi);
  plan->fused = plan->pro = plan->epi = NULL;
}

rill_status_t ops_eval(const isa_opdecl_t *decl, void *const *in, void *const *out, const rill_allocator_t *a) {
  ops_plan_t plan;
  RILL_TRY(ops_plan_init(&plan, decl, a));
  rill_status_t st = plan.def->cpu(&plan, in, out);
  ops_plan_fini(&plan);
  return st;
}

bool ops_decl_is_sym(const isa_opdecl_t *d) {
  for (uint32_t i = 0; i < d->nin; i++) if (isa_type_is_sym(&d->in[i])) return true;
  for (uint32_t i = 0; i < d->nout; i++) if (isa_type_is_sym(&d->out[i])) return true;
  for (uint32_t i = 0; i < d->nattrs; i++)
    for (uint32_t j = 0; d->attrs[i].kind == ISA_ATTR_INTS && j < d->attrs[i].count; j++)
      if (isa_dim_is_sym(d->attrs[i].ints[j])) return true;
  return false;
}

rill_status_t ops_check_decl(void *self, isa_syms_t *syms, const isa_opdecl_t *decl) {
  (void)self;
  if (ops_decl_is_sym(decl)) {
    /* Plans for symbolic sizes are made per binding (vm); here the signature only. */
    const ops_def_t *def = ops_find(decl->name);
    if (!def) return rill__status(RILL_NOT_FOUND, "unknown op '%s'", decl->name);
    rill_type_t out[64];
    uint32_t nout;
    ops_params_t p;
    uint32_t max_out = decl->nout < 64 ? decl->nout : 64;
    RILL_TRY(ops_infer_sym(def, syms, decl->in, decl->nin, decl->attrs, decl->nattrs, out, max_out ? max_out : 1, &nout, &p));
    if (nout != decl->nout) return rill__status(RILL_VERIFY_ERROR, "%s: declares %u results, the op gives %u", decl->name, decl->nout, nout);
    for (uint32_t i = 0; i < nout; i++)
      if (!rill__type_eq(&out[i], &decl->out[i])) {
        char b1[96], b2[96];
        return rill__status(RILL_VERIFY_ERROR, "%s: result %u declared %s, the op gives %s", decl->name, i + 1,
                            isa_sym_format_type(syms, &decl->out[i], b1, 96), isa_sym_format_type(syms, &out[i], b2, 96));
      }
    return NULL;
  }
  ops_plan_t plan;
  rill_status_t st = ops_plan_init(&plan, decl, NULL);
  ops_plan_fini(&plan);
  return st;
}

const isa_op_resolver_t ops_resolver = {NULL, ops_check_decl};
