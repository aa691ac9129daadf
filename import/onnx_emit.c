/* onnx_emit.c: the statements the importer writes. A statement whose
 * operands are all known values is folded instead: sizes over shape
 * variables by their own arithmetic (imp_sym_binary, moves of encoded
 * sizes), numbers by the cpu device's kernels (the core set's reference);
 * the rest is written as .vmasm text, its operands declared on first use. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"
#include "onnx_ops.h"

void imp_emit_head(imp_t *m, ival_t *const *outs, int nouts, const char *op, ival_t *const *args_in, int nargs, const char *attrs) {
  ival_t *args[ONNX_MAX_INPUTS];
  if (nargs > ONNX_MAX_INPUTS) {
    imp_unsup(m, "%d operands", nargs);
    return;
  }
  for (int i = 0; i < nargs; i++)
    if (!(args[i] = args_in[i]->sym ? imp_sizes_tensor(m, args_in[i]) : args_in[i])) return;
  sb_printf(&m->body, "  ");
  for (int i = 0; i < nouts; i++) sb_printf(&m->body, "%s%%%s", i ? ", " : "", outs[i]->name);
  sb_printf(&m->body, " = %s(", op);
  for (int i = 0; i < nargs; i++) {
    const char *nm = imp_use(m, args[i]);
    sb_printf(&m->body, "%s%%%s", i ? ", " : "", nm);
  }
  sb_printf(&m->body, ")");
  if (attrs && *attrs) sb_printf(&m->body, " {%s}", attrs);
  sb_printf(&m->body, "\n");
  for (int i = 0; i < nouts; i++) outs[i]->declared = true;
}

/* The one folding mechanism: a statement whose operands are all known (and
 * small) is computed now by the op's CPU reference kernel, through
 * rill_op_eval (what -O1 folds with), whatever the op; its results become
 * known values and no statement is written. 1 folded, 0 not (the statement
 * is written: a kernel's run-time error is then the run's to report), -1 a
 * failure. */
/* ---- sizes over shape variables as values (a Shape and what is computed from it) ---- */
/* index into a (broadcast against out) for flat output index i */
static size_t bcast_index(const rill_type_t *a, const rill_type_t *out, size_t i) {
  size_t idx = 0, stride = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    size_t c = i % (size_t)out->dims[d];
    i /= (size_t)out->dims[d];
    int ad = d - (out->rank - a->rank);
    if (ad >= 0) {
      if (a->dims[ad] != 1) idx += c * stride;
      stride *= (size_t)a->dims[ad];
    }
  }
  return idx;
}

/* The sign of a size a - b where the variables' ranges decide it: -1, 0, 1,
 * or 2 when they do not. */
static int sym_sign(imp_t *m, int64_t a, int64_t b) {
  if (a == b) return 0;
  int64_t d, lo, hi;
  rill_status_t st = isa_sym_sub(&m->syms, a, b, &d);
  if (st) {
    rill_status_free(st);
    return 2;
  }
  if (!isa_dim_is_sym(d)) return d > 0 ? 1 : d < 0 ? -1 : 0;
  if (!isa_sym_bounds(&m->syms, d, &lo, &hi)) return 2;
  return lo > 0 ? 1 : hi < 0 ? -1 : 2;
}

ival_t *imp_sym_binary(imp_t *m, const char *out, const char *op, ival_t *a, ival_t *b) {
  if (!a || !b) return NULL;
  if (!a->data || !b->data || a->t.dtype != RILL_I64 || b->t.dtype != RILL_I64 || isa_type_is_sym(&a->t) || isa_type_is_sym(&b->t))
    return imp_unsup(m, "%s of sizes over shape variables with a tensor computed at run time", op);
  for (int j = 0; j < 2; j++) {
    const ival_t *v = j ? b : a;
    for (size_t i = 0; !v->sym && i < imp_numel(&v->t); i++)
      if (isa_dim_is_sym(((const int64_t *)v->data)[i]))
        return imp_unsup(m, "%s of sizes over shape variables with a number below -2^63 + 2^31", op);
  }
  rill_type_t t;
  int r = a->t.rank > b->t.rank ? a->t.rank : b->t.rank;
  t.rank = r;
  for (int i = 0; i < r; i++) {
    int64_t da = i - (r - a->t.rank) >= 0 ? a->t.dims[i - (r - a->t.rank)] : 1, db = i - (r - b->t.rank) >= 0 ? b->t.dims[i - (r - b->t.rank)] : 1;
    if (da != db && da != 1 && db != 1) return imp_fail(m, RILL_MALFORMED, "shapes of sizes do not broadcast");
    t.dims[i] = da == 1 ? db : da;
  }
  bool cmp = !strcmp(op, "eq") || !strcmp(op, "ne") || !strcmp(op, "lt") || !strcmp(op, "le") || !strcmp(op, "gt") || !strcmp(op, "ge");
  t.dtype = cmp ? RILL_BOOL : RILL_I64;
  size_t k = imp_numel(&t);
  if (k > ONNX_FOLD_MAX) return imp_unsup(m, "%zu sizes over shape variables", k);
  int64_t *v = calloc(k ? k : 1, 8);
  if (!v) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  bool any = false;
  for (size_t i = 0; i < k && !m->err; i++) {
    int64_t x = ((const int64_t *)a->data)[bcast_index(&a->t, &t, i)], y = ((const int64_t *)b->data)[bcast_index(&b->t, &t, i)], z = 0;
    rill_status_t st = NULL;
    int s = 2;
    if (!strcmp(op, "add")) st = isa_sym_add(&m->syms, x, y, &z);
    else if (!strcmp(op, "sub")) st = isa_sym_sub(&m->syms, x, y, &z);
    else if (!strcmp(op, "mul")) st = isa_sym_mul(&m->syms, x, y, &z);
    else if (!strcmp(op, "div")) {
      /* truncation, as ONNX divides integers: exact division, or floor of a
       * size (never negative) by a positive number */
      int64_t lo, hi;
      if (!isa_dim_is_sym(x) && !isa_dim_is_sym(y)) {
        if (!y) return free(v), imp_fail(m, RILL_MALFORMED, "integer division by zero in sizes");
        z = x / y;
      } else if (!isa_sym_divexact(&m->syms, x, y, &z, &st) && !st) {
        if (isa_dim_is_sym(y) || y <= 0 || !isa_sym_bounds(&m->syms, x, &lo, &hi) || lo < 0)
          return free(v), imp_unsup(m, "a division of sizes over shape variables that does not divide exactly");
        st = isa_sym_floordiv(&m->syms, x, y, &z);
      }
    } else {
      s = sym_sign(m, x, y);
      if (s == 2) return free(v), imp_unsup(m, "a comparison of sizes over shape variables that their ranges do not decide");
      z = !strcmp(op, "eq") ? s == 0 : !strcmp(op, "ne") ? s != 0 : !strcmp(op, "lt") ? s < 0 : !strcmp(op, "le") ? s <= 0
          : !strcmp(op, "gt") ? s > 0 : !strcmp(op, "ge") ? s >= 0 : !strcmp(op, "maximum") ? (s >= 0 ? x : y)
          : !strcmp(op, "minimum") ? (s <= 0 ? x : y) : (free(v), imp_unsup(m, "%s of sizes over shape variables", op), 0);
      if (m->err) return NULL;
    }
    if (st) {
      imp_fail(m, rill_status_code(st), "%s", rill_status_message(st));
      rill_status_free(st);
      break;
    }
    v[i] = z;
    any |= isa_dim_is_sym(z);
  }
  if (m->err) return free(v), NULL;
  ival_t *o = imp_new(m, out, &t);
  if (!o) return free(v), NULL;
  if (cmp) {
    uint8_t *bv = (uint8_t *)v; /* in place: each byte written after its word was read */
    for (size_t i = 0; i < k; i++) bv[i] = v[i] != 0;
  }
  o->data = v;
  o->sym = any;
  return o;
}

/* Statements over sizes: those that only move or select elements (any i64
 * holds a size exactly) run on the encoded sizes by their kernels; the
 * arithmetic and comparisons go through the polynomials. 1 done, 0 not
 * (the statement is then written, and using sizes as a tensor is refused),
 * -1 a failure. */
static int kernel_fold(imp_t *m, ival_t *const *outs, int nouts, const char *op, ival_t *const *args, int nargs, const char *attrs,
                       bool sizes_ok);
static int fold_sym(imp_t *m, ival_t *const *outs, int nouts, const char *op, ival_t *const *args, int nargs, const char *attrs) {
  static const char *const moves[] = {"gather", "slice", "concat", "reshape", "broadcast_to", "copy", "transpose", "split", "where", NULL};
  for (int i = 0; moves[i]; i++)
    if (!strcmp(op, moves[i])) {
      for (int j = 0; j < nargs; j++)
        if (args[j]->sym && args[j]->t.dtype != RILL_I64) return 0;
      for (int j = 0; j < nouts; j++)
        if (outs[j]->t.dtype != RILL_I64) return 0;
      int f = kernel_fold(m, outs, nouts, op, args, nargs, attrs, true);
      for (int j = 0; f > 0 && j < nouts; j++)
        for (size_t e = 0; e < imp_numel(&outs[j]->t); e++) outs[j]->sym |= isa_dim_is_sym(((const int64_t *)outs[j]->data)[e]);
      return f;
    }
  if (nargs != 2 || nouts != 1) return 0;
  if (!args[0]->data || !args[1]->data) return 0; /* with a run-time tensor: written, the sizes made a tensor */
  ival_t *r = imp_sym_binary(m, NULL, op, args[0], args[1]);
  if (!r) return -1;
  /* the result moves into the statement's output */
  outs[0]->data = r->data;
  outs[0]->sym = r->sym;
  r->data = NULL;
  r->sym = false;
  return 1;
}

/* sizes_ok: operands holding sizes are run as plain i64 (fold_sym's moves) */
static int kernel_fold(imp_t *m, ival_t *const *outs, int nouts, const char *op, ival_t *const *args, int nargs, const char *attrs,
                       bool sizes_ok) {
  if (nargs < 1 || nargs > ONNX_MAX_INPUTS || nouts > 64) return 0;
  for (int i = 0; i < nargs; i++)
    if (args[i]->sym && !sizes_ok) return fold_sym(m, outs, nouts, op, args, nargs, attrs);
  rill_type_t it[ONNX_MAX_INPUTS], ot[64];
  const void *in[ONNX_MAX_INPUTS];
  void *res[64];
  for (int i = 0; i < nargs; i++) {
    if (!args[i]->data || imp_numel(&args[i]->t) > ONNX_FOLD_MAX) return 0;
    it[i] = args[i]->t;
    in[i] = args[i]->data;
  }
  for (int i = 0; i < nouts; i++)
    if (imp_numel(&outs[i]->t) > ONNX_FOLD_MAX) return 0;
  int n = 0;
  rill_status_t st = rill_op_eval(op, attrs, it, in, nargs, ot, res, nouts, &n);
  if (st) {
    bool oom = rill_status_code(st) == RILL_OUT_OF_MEMORY;
    rill_status_free(st);
    return oom ? (imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), -1) : 0;
  }
  bool same = n == nouts;
  for (int i = 0; same && i < n; i++) {
    same = ot[i].dtype == outs[i]->t.dtype && ot[i].rank == outs[i]->t.rank;
    for (int d = 0; same && d < ot[i].rank; d++) same = ot[i].dims[d] == outs[i]->t.dims[d];
  }
  for (int i = 0; i < n; i++) {
    if (same) outs[i]->data = res[i];
    else free(res[i]);
  }
  return same; /* else the types differ from the importer's: written, for the assembler to report */
}

static int fold(imp_t *m, ival_t *const *outs, int nouts, const char *op, ival_t *const *args, int nargs, const char *attrs) {
  return kernel_fold(m, outs, nouts, op, args, nargs, attrs, false);
}

ival_t *imp_emit(imp_t *m, const char *onnx_out, const rill_type_t *t, const char *op, ival_t *const *args, int nargs,
                 const char *attrs) {
  for (int i = 0; i < nargs; i++)
    if (!args[i]) return NULL;
  ival_t *o = imp_new(m, onnx_out, t);
  if (!o) return NULL;
  int f = fold(m, &o, 1, op, args, nargs, attrs);
  if (f < 0) return NULL;
  if (!f) imp_emit_head(m, &o, 1, op, args, nargs, attrs);
  return o;
}

bool imp_emit_multi(imp_t *m, ival_t **outs, int nouts, const char *op, ival_t *const *args, int nargs, const char *attrs) {
  if (m->err) return false;
  int f = fold(m, outs, nouts, op, args, nargs, attrs);
  if (f < 0) return false;
  if (!f) imp_emit_head(m, outs, nouts, op, args, nargs, attrs);
  return true;
}

ival_t *imp_emit_copy(imp_t *m, ival_t *x) {
  ival_t *c = imp_new(m, NULL, &x->t);
  if (c) imp_emit_head(m, &c, 1, "copy", &x, 1, NULL);
  return c;
}

ival_t *imp_alias(imp_t *m, const char *onnx_out, ival_t *x) {
  if (!x) return NULL;
  if (x->seq) { /* a sequence: the same list of values */
    ival_t *v = imp_new(m, onnx_out, &x->t);
    if (!v) return NULL;
    if (x->nitems && !(v->items = malloc(sizeof *v->items * (size_t)x->nitems))) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < x->nitems; i++) v->items[i] = x->items[i];
    v->nitems = x->nitems;
    v->seq = true;
    v->opt = x->opt;
    return v;
  }
  if (x->data) {
    ival_t *v = imp_new(m, onnx_out, &x->t);
    if (!v) return NULL;
    size_t nb = imp_numel(&x->t) * rill_dtype_size(x->t.dtype);
    v->data = malloc(nb ? nb : 1);
    if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    if (nb) memcpy(v->data, x->data, nb);
    v->sym = x->sym;
    return v;
  }
  ival_t *c = imp_emit(m, onnx_out, &x->t, "copy", &x, 1, NULL);
  if (c) c->copy_of = x->copy_of ? x->copy_of : x;
  return c;
}

ival_t *imp_reshape(imp_t *m, const char *onnx_out, ival_t *x, const rill_type_t *t) {
  if (!x) return NULL;
  rill_type_t nt = *t;
  nt.dtype = x->t.dtype;
  if (x->data) {
    ival_t *v = onnx_out ? imp_new(m, onnx_out, &nt) : imp_const(m, &nt, x->data);
    if (v && onnx_out) {
      size_t nb = imp_numel(&nt) * rill_dtype_size(nt.dtype);
      v->data = malloc(nb ? nb : 1);
      if (!v->data) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
      if (nb) memcpy(v->data, x->data, nb);
    }
    if (v) v->sym = x->sym;
    return v;
  }
  bool same = nt.rank == x->t.rank;
  for (int i = 0; same && i < nt.rank; i++) same = nt.dims[i] == x->t.dims[i];
  if (same && !onnx_out) return x;
  if (same) return imp_emit(m, onnx_out, &nt, "copy", &x, 1, NULL);
  return imp_sized_view(m, onnx_out, x, &nt);
}

ival_t *imp_sized_view(imp_t *m, const char *onnx_out, ival_t *x, const rill_type_t *t) {
  rill_type_t nt = *t;
  nt.dtype = x->t.dtype;
  sbuf_t a = {0};
  sb_printf(&a, "shape=");
  imp_list(m, &a, nt.dims, nt.rank);
  ival_t *r = a.oom ? imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory") : imp_emit(m, onnx_out, &nt, "reshape", &x, 1, a.p);
  free(a.p);
  return r;
}

ival_t *imp_cast(imp_t *m, const char *onnx_out, ival_t *x, rill_dtype_t d) {
  if (!x) return NULL;
  if (x->t.dtype == d) return onnx_out ? imp_alias(m, onnx_out, x) : x;
  rill_type_t t = x->t;
  t.dtype = d;
  char attrs[32];
  snprintf(attrs, sizeof attrs, "dtype=%s", rill_dtype_name(d));
  return imp_emit(m, onnx_out, &t, "cast", &x, 1, attrs);
}
