/* parse.c: module-level statements of .vmasm: module, source, weights,
 * const, state, op (lowered form) and function headers. Function bodies are left
 * as token ranges for the IR builder (check.c) or the lowered-form reader
 * (lowered.c). Constants from literals are converted to their bytes here;
 * constants from weights are read once every `weights` line is known. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

typedef struct const_src {
  uint32_t line, col;        /* of the const statement */
  uint32_t aline, acol;      /* of the weights reference */
  const char *alias;
} const_src_t;
typedef RILL_VEC(const_src_t) srcvec_t;

static bool tok_is(const token_t *t, const char *word) {
  return t->kind == T_NAME && strlen(word) == t->len && memcmp(t->text, word, t->len) == 0;
}

static rill_status_t expect(asm_ctx_t *c, size_t *pos, tok_kind_t kind, const char *what) {
  const token_t *t = &c->toks[*pos];
  if (t->kind != kind) {
    char b[64];
    return asm_error_at(c, t, "expected %s, found %s", what, asm_tok_desc(t, b, sizeof b));
  }
  (*pos)++;
  return NULL;
}

static char *tok_str(asm_ctx_t *c, const token_t *t) {
  return rill__arena_strndup(&c->arena, t->text, t->len);
}

int32_t asm_find_func(const asm_ctx_t *c, const char *name, size_t len) {
  uint32_t v;
  return rill__map_get(&c->func_map, name, len, &v) ? (int32_t)v : -1;
}

int32_t asm_find_const(const asm_ctx_t *c, const char *name, size_t len) {
  uint32_t v;
  return rill__map_get(&c->const_map, name, len, &v) ? (int32_t)v : -1;
}

int32_t asm_find_state(const asm_ctx_t *c, const char *name, size_t len) {
  uint32_t v;
  return rill__map_get(&c->state_map, name, len, &v) ? (int32_t)v : -1;
}

/* A shape variable's name as a size (the variable is made on first use). */
static rill_status_t sym_name(asm_ctx_t *c, const token_t *t, int64_t *out) {
  uint32_t v;
  rill_status_t st = isa_syms_var(&c->syms, t->text, t->len, &v);
  if (!st) st = isa_syms_var_dim(&c->syms, v, out);
  return st ? rill__status_prefix(st, "%s:%u:%u: error: ", c->path, t->line, t->col) : NULL;
}

/* A size at tokens[*pos], which is left on its last token: a shape
 * variable's name, or (the lowered form's notation, isa_sym_print_lowered)
 * add(x, y, ...), mul(x, y, ...) or floordiv(x, c) over sizes and numbers. */
static rill_status_t sym_size(asm_ctx_t *c, size_t *pos, int64_t *out, int depth) {
  const token_t *t = &c->toks[*pos];
  char b[64];
  if (depth > 0 && t->kind == T_NUMBER && !t->is_float && !t->is_bool && !t->is_big) { *out = t->i; return NULL; }
  if (t->kind != T_NAME)
    return asm_error_at(c, t, "expected a size (a number, a shape variable's name, add(...), mul(...) or floordiv(x, c)), found %s", asm_tok_desc(t, b, sizeof b));
  int op = tok_is(t, "add") ? 1 : tok_is(t, "mul") ? 2 : tok_is(t, "floordiv") ? 3 : 0;
  if (!op || c->toks[*pos + 1].kind != T_LPAREN) return sym_name(c, t, out);
  if (depth > 32) return asm_error_at(c, t, "size expression nested too deeply");
  *pos += 2;
  int64_t acc = op == 1 ? 0 : 1;
  int n = 0;
  for (;;) {
    const token_t *at = &c->toks[*pos];
    int64_t x;
    RILL_TRY(sym_size(c, pos, &x, depth + 1));
    rill_status_t st = NULL;
    if (op == 1) st = isa_sym_add(&c->syms, acc, x, &acc);
    else if (op == 2) st = isa_sym_mul(&c->syms, acc, x, &acc);
    else if (n == 0) acc = x;
    else if (n == 1 && !isa_dim_is_sym(x) && x > 0) st = isa_sym_floordiv(&c->syms, acc, x, &acc);
    else return asm_error_at(c, at, "floordiv takes a size and a positive number");
    if (st) {
      rill_status_t e = asm_error_at(c, at, "%s", rill_status_message(st));
      rill_status_free(st);
      return e;
    }
    n++;
    (*pos)++;
    if (c->toks[*pos].kind == T_COMMA) { (*pos)++; continue; }
    if (c->toks[*pos].kind != T_RPAREN) return asm_error_at(c, &c->toks[*pos], "expected ',' or ')' in the size, found %s", asm_tok_desc(&c->toks[*pos], b, sizeof b));
    break;
  }
  if (op == 3 && n != 2) return asm_error_at(c, t, "floordiv takes a size and a positive number");
  *out = acc;
  return NULL;
}

/* `dim NAME in [LO, HI]`: a shape variable's range. */
static rill_status_t parse_dim(asm_ctx_t *c, size_t *pos) {
  const token_t *kw = &c->toks[(*pos)++], *nt = &c->toks[*pos];
  char b[64];
  if (nt->kind != T_NAME) return asm_error_at(c, nt, "expected a shape variable's name after 'dim', found %s", asm_tok_desc(nt, b, sizeof b));
  (*pos)++;
  if (!tok_is(&c->toks[*pos], "in")) return asm_error_at(c, &c->toks[*pos], "expected 'in [LO, HI]' after the shape variable's name");
  (*pos)++;
  RILL_TRY(expect(c, pos, T_LBRACK, "'[' before the range"));
  int64_t r[2];
  for (int i = 0; i < 2; i++) {
    const token_t *t = &c->toks[*pos];
    if (t->kind != T_NUMBER || t->is_float || t->is_bool || t->i < 0 || t->i > ((int64_t)1 << 40))
      return asm_error_at(c, t, "expected a non-negative integer bound for %.*s, found %s", (int)nt->len, nt->text, asm_tok_desc(t, b, sizeof b));
    r[i] = t->i;
    (*pos)++;
    RILL_TRY(expect(c, pos, i ? T_RBRACK : T_COMMA, i ? "']' after the range" : "',' between the bounds"));
  }
  if (r[0] > r[1]) return asm_error_at(c, kw, "dim %.*s: empty range [%lld, %lld]", (int)nt->len, nt->text, (long long)r[0], (long long)r[1]);
  uint32_t v;
  RILL_TRY(isa_syms_var(&c->syms, nt->text, nt->len, &v));
  isa_symvar_t *sv = &c->syms.vars.items[v];
  if (sv->declared) return asm_error_at(c, nt, "dim %s is declared twice (first at line %u)", sv->name, sv->line);
  sv->declared = true;
  sv->lo = r[0];
  sv->hi = r[1];
  sv->line = nt->line;
  sv->col = nt->col;
  return NULL;
}

rill_status_t asm_parse_type(asm_ctx_t *c, size_t *pos, rill_type_t *out) {
  const token_t *t = &c->toks[*pos];
  char b[64];
  rill_dtype_t d;
  if (t->kind != T_NAME || !rill_dtype_from_name(t->text, t->len, &d))
    return asm_error_at(c, t, "expected a type such as f32[2,3], found %s", asm_tok_desc(t, b, sizeof b));
  (*pos)++;
  memset(out, 0, sizeof *out);
  out->dtype = d;
  RILL_TRY(expect(c, pos, T_LBRACK, "'[' after the dtype"));
  if (c->toks[*pos].kind == T_RBRACK) { (*pos)++; return NULL; }
  for (;;) {
    t = &c->toks[*pos];
    if (out->rank == RILL_MAX_RANK) return asm_error_at(c, t, "more than %d dimensions", RILL_MAX_RANK);
    if (t->kind == T_NUMBER && !t->is_float && !t->is_bool && !t->is_big && t->i >= 0) {
      out->dims[out->rank++] = t->i;
    } else if (t->kind == T_NAME) {
      int64_t sz;
      RILL_TRY(sym_size(c, pos, &sz, 0));
      if (sz < 0 && !isa_dim_is_sym(sz)) return asm_error_at(c, t, "the size is negative (%lld)", (long long)sz);
      out->dims[out->rank++] = sz;
    } else {
      return asm_error_at(c, t, "expected a dimension (a non-negative integer or a shape variable's name), found %s", asm_tok_desc(t, b, sizeof b));
    }
    (*pos)++;
    if (c->toks[*pos].kind == T_COMMA) { (*pos)++; continue; }
    RILL_TRY(expect(c, pos, T_RBRACK, "',' or ']' in the shape"));
    break;
  }
  size_t n;
  if (!isa_type_is_sym(out) && !rill__type_sizes(out, &n, NULL)) return asm_error_at(c, t, "tensor type too large");
  return NULL;
}

rill_status_t asm_parse_attrs(asm_ctx_t *c, size_t *pos, isa_attr_t **out, uint32_t *out_n) {
  RILL_VEC(isa_attr_t) v = {0};
  rill_status_t st = NULL;
  char b[64];
  (*pos)++; /* '{' */
  if (c->toks[*pos].kind == T_RBRACE) { (*pos)++; *out = NULL; *out_n = 0; return NULL; }
  for (;;) {
    const token_t *nt = &c->toks[*pos];
    if (nt->kind != T_NAME) { st = asm_error_at(c, nt, "expected an attribute name, found %s", asm_tok_desc(nt, b, sizeof b)); goto done; }
    (*pos)++;
    if ((st = expect(c, pos, T_EQ, "'=' after the attribute name"))) goto done;
    isa_attr_t at;
    memset(&at, 0, sizeof at);
    if (!(at.name = tok_str(c, nt))) { st = rill__oom(); goto done; }
    const token_t *t = &c->toks[*pos];
    rill_dtype_t dt;
    at.count = 1;
    if (t->kind == T_NUMBER && t->is_bool) {
      at.kind = ISA_ATTR_BOOL;
      at.ints = rill__arena_alloc(&c->arena, 8);
      if (at.ints) at.ints[0] = t->i;
      (*pos)++;
    } else if (t->kind == T_NUMBER && t->is_big) {
      st = asm_error_at(c, t, "integer %.*s out of the attribute's range (a signed 64-bit integer)", (int)t->len, t->text);
      goto done;
    } else if (t->kind == T_NUMBER) {
      at.kind = t->is_float ? ISA_ATTR_FLOAT : ISA_ATTR_INT;
      at.ints = rill__arena_alloc(&c->arena, 8);
      at.floats = rill__arena_alloc(&c->arena, 8);
      if (at.ints && at.floats) { at.ints[0] = t->i; at.floats[0] = t->f; }
      if (!t->is_float) at.floats = NULL; else at.ints = NULL;
      (*pos)++;
    } else if (t->kind == T_STRING) {
      at.kind = ISA_ATTR_STRING;
      at.str = t->str;
      (*pos)++;
    } else if (t->kind == T_NAME && rill_dtype_from_name(t->text, t->len, &dt)) {
      at.kind = ISA_ATTR_DTYPE;
      at.ints = rill__arena_alloc(&c->arena, 8);
      if (at.ints) at.ints[0] = dt;
      (*pos)++;
    } else if (t->kind == T_LBRACK) {
      (*pos)++;
      RILL_VEC(double) fv = {0};
      RILL_VEC(int64_t) iv = {0};
      bool any_float = false;
      while (c->toks[*pos].kind != T_RBRACK) {
        const token_t *e = &c->toks[*pos];
        int64_t sv;
        if (e->kind == T_NAME && !rill_dtype_from_name(e->text, e->len, &dt) && !tok_is(e, "inf") && !tok_is(e, "nan")) {
          /* a shape variable's name stands for its size */
          if (!(st = sym_size(c, pos, &sv, 0)) && !(st = RILL_VEC_PUSH(c->a, &fv, 0))) st = RILL_VEC_PUSH(c->a, &iv, sv);
        } else if (e->kind != T_NUMBER || e->is_bool) {
          st = asm_error_at(c, e, "expected a number or a shape variable's name in the list, found %s", asm_tok_desc(e, b, sizeof b));
        } else if (e->is_big) {
          st = asm_error_at(c, e, "integer %.*s out of the attribute's range (a signed 64-bit integer)", (int)e->len, e->text);
        } else {
          any_float |= e->is_float;
          if (!(st = RILL_VEC_PUSH(c->a, &fv, e->f))) st = RILL_VEC_PUSH(c->a, &iv, e->i);
        }
        if (!st) {
          (*pos)++;
          if (c->toks[*pos].kind == T_COMMA) (*pos)++;
          else if (c->toks[*pos].kind != T_RBRACK) st = expect(c, pos, T_RBRACK, "',' or ']' in the list");
        }
        if (st) { RILL_VEC_FREE(c->a, &fv); RILL_VEC_FREE(c->a, &iv); goto done; }
      }
      (*pos)++;
      at.kind = any_float ? ISA_ATTR_FLOATS : ISA_ATTR_INTS;
      at.count = (uint32_t)fv.len;
      if (any_float) at.floats = rill__arena_memdup(&c->arena, fv.items, fv.len * 8);
      else at.ints = rill__arena_memdup(&c->arena, iv.items, iv.len * 8);
      bool ok = any_float ? at.floats != NULL : at.ints != NULL;
      RILL_VEC_FREE(c->a, &fv);
      RILL_VEC_FREE(c->a, &iv);
      if (!ok) { st = rill__oom(); goto done; }
    } else {
      st = asm_error_at(c, t, "expected an attribute value (number, bool, string, dtype or list), found %s", asm_tok_desc(t, b, sizeof b));
      goto done;
    }
    if ((at.kind == ISA_ATTR_INT || at.kind == ISA_ATTR_BOOL || at.kind == ISA_ATTR_DTYPE) && !at.ints) { st = rill__oom(); goto done; }
    if (at.kind == ISA_ATTR_FLOAT && !at.floats) { st = rill__oom(); goto done; }
    if ((st = RILL_VEC_PUSH(c->a, &v, at))) goto done;
    if (c->toks[*pos].kind == T_COMMA) { (*pos)++; continue; }
    if ((st = expect(c, pos, T_RBRACE, "',' or '}' after the attribute"))) goto done;
    break;
  }
  *out = rill__arena_memdup(&c->arena, v.items, v.len * sizeof(isa_attr_t));
  *out_n = (uint32_t)v.len;
  if (!*out) st = rill__oom();
done:
  RILL_VEC_FREE(c->a, &v);
  return st;
}

/* ---- constants ---- */
bool asm_int_fits(const token_t *t, rill_dtype_t d) {
  if (t->is_big) return d == RILL_U64;
  static const int64_t lo[RILL_DTYPE_COUNT] = {[RILL_I8] = INT8_MIN, [RILL_I16] = INT16_MIN, [RILL_I32] = INT32_MIN, [RILL_I64] = INT64_MIN};
  static const int64_t hi[RILL_DTYPE_COUNT] = {[RILL_I8] = INT8_MAX, [RILL_U8] = UINT8_MAX, [RILL_I16] = INT16_MAX, [RILL_U16] = UINT16_MAX,
                                               [RILL_I32] = INT32_MAX, [RILL_U32] = UINT32_MAX, [RILL_I64] = INT64_MAX, [RILL_U64] = INT64_MAX};
  return t->i >= lo[d] && t->i <= hi[d];
}

static rill_status_t store_literal(asm_ctx_t *c, const token_t *t, rill_dtype_t d, void *data, size_t i) {
  char b[64];
  if (t->kind != T_NUMBER) return asm_error_at(c, t, "expected a number, found %s", asm_tok_desc(t, b, sizeof b));
  if (d == RILL_BOOL) {
    if (!t->is_bool && (t->is_float || (t->i != 0 && t->i != 1)))
      return asm_error_at(c, t, "expected true or false for a bool constant, found '%.*s'", (int)t->len, t->text);
    ((uint8_t *)data)[i] = t->i != 0;
  } else if (rill__is_float(d)) {
    if (t->is_bool) return asm_error_at(c, t, "expected a number for a %s constant, found '%.*s'", rill_dtype_name(d), (int)t->len, t->text);
    rill__store_f(data, d, i, t->is_float ? t->f : (double)t->i);
    if (d == RILL_F16 || d == RILL_BF16 || d == RILL_F32) {
      /* Keep a nan literal's canonical bits whatever the platform's strtod gives. */
      if (isnan(t->f) && t->is_float) {
        if (d == RILL_F32) { uint32_t q = 0x7fc00000u; memcpy((uint8_t *)data + 4 * i, &q, 4); }
        else ((uint16_t *)data)[i] = d == RILL_F16 ? 0x7e00u : 0x7fc0u;
      }
    } else if (isnan(t->f) && t->is_float) {
      uint64_t q = 0x7ff8000000000000ull;
      memcpy((uint8_t *)data + 8 * i, &q, 8);
    }
  } else {
    if (t->is_float || t->is_bool)
      return asm_error_at(c, t, "expected an integer for a %s constant, found '%.*s'", rill_dtype_name(d), (int)t->len, t->text);
    if (!asm_int_fits(t, d)) return asm_error_at(c, t, "%.*s is out of range for %s", (int)t->len, t->text, rill_dtype_name(d));
    rill__store_i(data, d, i, t->is_big ? (int64_t)t->u : t->i);
  }
  return NULL;
}

/* Parses a (possibly nested) list, checking nesting against the shape. */
static rill_status_t parse_list(asm_ctx_t *c, size_t *pos, const rill_type_t *ty, int depth,
                                bool nested, void *data, size_t *count, size_t numel) {
  char b[64];
  const token_t *open = &c->toks[*pos];
  (*pos)++; /* '[' */
  int64_t items = 0;
  while (c->toks[*pos].kind != T_RBRACK) {
    const token_t *t = &c->toks[*pos];
    if (t->kind == T_LBRACK) {
      if (!nested) return asm_error_at(c, t, "mixed nesting in the list");
      if (depth + 1 >= ty->rank) return asm_error_at(c, t, "list nested deeper than the type's %d dimensions", ty->rank);
      RILL_TRY(parse_list(c, pos, ty, depth + 1, true, data, count, numel));
    } else if (t->kind == T_NUMBER) {
      if (nested && depth != ty->rank - 1) return asm_error_at(c, t, "expected a nested list at depth %d (the type has %d dimensions)", depth + 1, ty->rank);
      if (*count >= numel) return asm_error_at(c, t, "more values than the %zu the type holds", numel);
      RILL_TRY(store_literal(c, t, ty->dtype, data, (*count)++));
      (*pos)++;
    } else {
      return asm_error_at(c, t, "expected a number or '[', found %s", asm_tok_desc(t, b, sizeof b));
    }
    items++;
    if (c->toks[*pos].kind == T_COMMA) (*pos)++;
    else if (c->toks[*pos].kind != T_RBRACK) return expect(c, pos, T_RBRACK, "',' or ']' in the list");
  }
  (*pos)++;
  if (nested && ty->rank > 0 && items != ty->dims[depth])
    return asm_error_at(c, open, "list at depth %d has %lld items, the type's dimension %d is %lld", depth + 1,
                        (long long)items, depth, (long long)ty->dims[depth]);
  return NULL;
}

/* `{shard=AXIS, ranks=N}` after a weights reference: the constant is one
 * rank's part of the file's tensor (isa_const_t; docs/tensor_parallel.md). */
static rill_status_t parse_shard(asm_ctx_t *c, size_t *pos, isa_const_t *k) {
  const token_t *open = &c->toks[*pos];
  isa_attr_t *at;
  uint32_t na;
  RILL_TRY(asm_parse_attrs(c, pos, &at, &na));
  int64_t axis = -1, parts = -1, groups = 1, stage = -1;
  for (uint32_t i = 0; i < na; i++) {
    bool one = at[i].kind == ISA_ATTR_INT || (at[i].kind == ISA_ATTR_INTS && at[i].count == 1);
    if (!strcmp(at[i].name, "shard") && one) axis = at[i].ints[0];
    else if (!strcmp(at[i].name, "stage") && one) stage = at[i].ints[0];
    else if (!strcmp(at[i].name, "ranks") && one) parts = at[i].ints[0];
    else if (!strcmp(at[i].name, "groups") && one) groups = at[i].ints[0];
    else return asm_error_at(c, open, "a weights reference takes {shard=AXIS, ranks=N, groups=G} or {stage=K, ranks=N}, not '%s'", at[i].name);
  }
  if (stage >= 0 || (axis < 0 && parts >= 0 && groups == 1)) {
    /* a stage constant (--pipeline-parallel): only rank K uploads it */
    if (axis >= 0) return asm_error_at(c, open, "a weights reference is a shard or a stage's, not both");
    if (parts < 2 || parts > ISA_MAX_SHARD_PARTS || stage < 0 || stage >= parts)
      return asm_error_at(c, open, "{stage=K, ranks=N} needs N in 2..%d and K in 0..N-1", ISA_MAX_SHARD_PARTS);
    k->stage = (uint32_t)stage;
    k->stage_ranks = (uint32_t)parts;
    return NULL;
  }
  if (axis < 0 || axis >= k->type.rank) return asm_error_at(c, open, "shard= must be an axis of the constant's type (0..%d)", k->type.rank - 1);
  if (parts < 2 || parts > ISA_MAX_SHARD_PARTS) return asm_error_at(c, open, "ranks= must be 2..%d for a shard", ISA_MAX_SHARD_PARTS);
  if (groups < 1 || groups > ISA_MAX_SHARD_PARTS || k->type.dims[axis] % groups)
    return asm_error_at(c, open, "groups= must divide the constant's size along the axis (%lld)", (long long)k->type.dims[axis]);
  k->shard_axis = (uint32_t)axis;
  k->shard_parts = (uint32_t)parts;
  k->shard_groups = (uint32_t)groups;
  return NULL;
}

static rill_status_t parse_const(asm_ctx_t *c, size_t *pos, srcvec_t *srcs) {
  const token_t *kw = &c->toks[*pos];
  (*pos)++;
  const token_t *nt = &c->toks[*pos];
  RILL_TRY(expect(c, pos, T_VALUE, "a constant name such as %w"));
  if (asm_find_const(c, nt->text, nt->len) >= 0)
    return asm_error_at(c, nt, "constant %%%.*s is defined twice", (int)nt->len, nt->text);
  if (asm_find_state(c, nt->text, nt->len) >= 0)
    return asm_error_at(c, nt, "constant %%%.*s has the name of a state", (int)nt->len, nt->text);
  RILL_TRY(expect(c, pos, T_COLON, "':' and the constant's type"));
  isa_const_t k;
  memset(&k, 0, sizeof k);
  const_src_t src = {kw->line, kw->col, 0, 0, NULL};
  if (!(k.name = tok_str(c, nt))) return rill__oom();
  size_t type_at = *pos;
  RILL_TRY(asm_parse_type(c, pos, &k.type));
  for (size_t i = type_at; i < *pos; i++)
    if (c->toks[i].kind == T_NAME && i > type_at)
      return asm_error_at(c, &c->toks[i], "symbolic dimension '%.*s': a constant's type needs every dimension as a number",
                          (int)c->toks[i].len, c->toks[i].text);
  RILL_TRY(expect(c, pos, T_EQ, "'=' and the constant's value"));
  size_t numel, nbytes;
  rill__type_sizes(&k.type, &numel, &nbytes);
  const token_t *t = &c->toks[*pos];
  char b[64];
  if (t->kind == T_NAME && c->toks[*pos + 1].kind == T_LBRACK && c->toks[*pos + 2].kind == T_STRING) {
    k.origin = ISA_CONST_WEIGHTS;
    src.alias = tok_str(c, t);
    src.aline = t->line;
    src.acol = t->col;
    k.tensor = c->toks[*pos + 2].str;
    *pos += 3;
    RILL_TRY(expect(c, pos, T_RBRACK, "']' after the tensor name"));
    if (tok_is(&c->toks[*pos], "linked")) { k.linked = true; (*pos)++; }
    if (c->toks[*pos].kind == T_LBRACE) RILL_TRY(parse_shard(c, pos, &k));
  } else if (tok_is(t, "fill")) {
    (*pos)++;
    RILL_TRY(expect(c, pos, T_LPAREN, "'(' after fill"));
    k.origin = ISA_CONST_FILL;
    k.size = rill_dtype_size(k.type.dtype);
    uint8_t *d = rill__arena_alloc(&c->arena, 8);
    if (!d) return rill__oom();
    RILL_TRY(store_literal(c, &c->toks[*pos], k.type.dtype, d, 0));
    (*pos)++;
    RILL_TRY(expect(c, pos, T_RPAREN, "')' after the fill value"));
    k.data = d;
  } else if (t->kind == T_NUMBER || t->kind == T_LBRACK) {
    k.origin = ISA_CONST_LITERAL;
    k.size = nbytes;
    /* Each value is at least one token: a type larger than the source cannot be filled. */
    if (numel > c->ntoks) return asm_error_at(c, t, "a literal for %zu elements, but the source holds fewer values (write fill(v) to repeat one)", numel);
    uint8_t *d = rill__arena_alloc(&c->arena, nbytes);
    if (!d) return rill__oom();
    size_t count = 0;
    if (t->kind == T_NUMBER) {
      if (numel != 1) return asm_error_at(c, t, "a single value for %zu elements: write fill(%.*s) to repeat it", numel, (int)t->len, t->text);
      RILL_TRY(store_literal(c, t, k.type.dtype, d, 0));
      count = 1;
      (*pos)++;
    } else {
      bool nested = c->toks[*pos + 1].kind == T_LBRACK;
      RILL_TRY(parse_list(c, pos, &k.type, 0, nested, d, &count, numel));
      if (count != numel) return asm_error_at(c, t, "%zu values for a constant of %zu elements", count, numel);
    }
    k.data = d;
  } else {
    return asm_error_at(c, t, "expected a constant value: a number, a list, fill(v) or a weights reference w[\"name\"]; found %s", asm_tok_desc(t, b, sizeof b));
  }
  if (k.origin != ISA_CONST_WEIGHTS) isa_const_set_sum(&k, k.data);
  RILL_TRY(rill__map_put(&c->const_map, k.name, strlen(k.name), (uint32_t)c->consts.len));
  RILL_TRY(RILL_VEC_PUSH(c->a, &c->consts, k));
  return RILL_VEC_PUSH(c->a, srcs, src);
}

/* state %NAME : TYPE [= w["tensor"] | = %CONST]: a tensor the VM keeps
 * across runs. Zeros without an initialiser; a weights reference becomes a
 * constant NAME.init (the lowered form's `= %CONST`, which `rill dis`
 * prints). Sizes are numbers: a state is made once, when the VM is. */
static rill_status_t parse_state(asm_ctx_t *c, size_t *pos, srcvec_t *srcs) {
  (*pos)++;
  const token_t *nt = &c->toks[*pos];
  RILL_TRY(expect(c, pos, T_VALUE, "a state name such as %cache"));
  if (asm_find_state(c, nt->text, nt->len) >= 0)
    return asm_error_at(c, nt, "state %%%.*s is defined twice", (int)nt->len, nt->text);
  if (asm_find_const(c, nt->text, nt->len) >= 0)
    return asm_error_at(c, nt, "state %%%.*s has the name of a constant", (int)nt->len, nt->text);
  RILL_TRY(expect(c, pos, T_COLON, "':' and the state's type"));
  isa_state_t x = {.init = ISA_NONE};
  if (!(x.name = tok_str(c, nt))) return rill__oom();
  size_t type_at = *pos;
  RILL_TRY(asm_parse_type(c, pos, &x.type));
  for (size_t i = type_at + 1; i < *pos; i++)
    if (c->toks[i].kind == T_NAME)
      return asm_error_at(c, &c->toks[i], "symbolic dimension '%.*s': a state's type needs every dimension as a number (a state is made once, when the VM is created)",
                          (int)c->toks[i].len, c->toks[i].text);
  size_t bytes;
  if (!rill__type_sizes(&x.type, NULL, &bytes)) return asm_error_at(c, nt, "state %%%s is too large", x.name);
  if (c->toks[*pos].kind == T_EQ) {
    (*pos)++;
    const token_t *t = &c->toks[*pos];
    char b[64];
    if (t->kind == T_VALUE) { /* = %CONST (the lowered form) */
      int32_t k = asm_find_const(c, t->text, t->len);
      if (k < 0) return asm_error_at(c, t, "unknown constant %%%.*s (a state starts as zeros, a weights reference w[\"name\"] or a constant)", (int)t->len, t->text);
      if (!rill__type_eq(&c->consts.items[k].type, &x.type)) {
        char b1[96], b2[96];
        return asm_error_at(c, t, "state %%%s is %s but constant %%%s is %s", x.name, rill_type_format(&x.type, b1, 96),
                            c->consts.items[k].name, rill_type_format(&c->consts.items[k].type, b2, 96));
      }
      x.init = (uint32_t)k;
      (*pos)++;
    } else if (t->kind == T_NAME && c->toks[*pos + 1].kind == T_LBRACK && c->toks[*pos + 2].kind == T_STRING) {
      /* The weights reference: a constant named NAME.init (NAME.init.2, ... where taken). */
      char name[256];
      snprintf(name, sizeof name, "%s.init", x.name);
      for (int k = 2; asm_find_const(c, name, strlen(name)) >= 0 || asm_find_state(c, name, strlen(name)) >= 0; k++)
        snprintf(name, sizeof name, "%s.init.%d", x.name, k);
      isa_const_t k;
      memset(&k, 0, sizeof k);
      k.type = x.type;
      k.origin = ISA_CONST_WEIGHTS;
      if (!(k.name = rill__arena_strndup(&c->arena, name, strlen(name))) || !(x.name = tok_str(c, nt))) return rill__oom();
      const_src_t src = {nt->line, nt->col, t->line, t->col, NULL};
      if (!(src.alias = tok_str(c, t))) return rill__oom();
      k.tensor = c->toks[*pos + 2].str;
      *pos += 3;
      RILL_TRY(expect(c, pos, T_RBRACK, "']' after the tensor name"));
      if (tok_is(&c->toks[*pos], "linked")) { k.linked = true; (*pos)++; }
      x.init = (uint32_t)c->consts.len;
      RILL_TRY(rill__map_put(&c->const_map, k.name, strlen(k.name), (uint32_t)c->consts.len));
      RILL_TRY(RILL_VEC_PUSH(c->a, &c->consts, k));
      RILL_TRY(RILL_VEC_PUSH(c->a, srcs, src));
    } else {
      return asm_error_at(c, t, "expected a state's initial value: a weights reference w[\"name\"] (or nothing, for zeros); found %s", asm_tok_desc(t, b, sizeof b));
    }
  }
  RILL_TRY(rill__map_put(&c->state_map, x.name, strlen(x.name), (uint32_t)c->states.len));
  return RILL_VEC_PUSH(c->a, &c->states, x);
}

static rill_status_t resolve_weights(asm_ctx_t *c, srcvec_t *srcs) {
  for (size_t i = 0; i < c->consts.len; i++) {
    isa_const_t *k = &c->consts.items[i];
    const const_src_t *s = &srcs->items[i];
    if (k->origin != ISA_CONST_WEIGHTS) continue;
    size_t w = 0;
    while (w < c->weights.len && strcmp(c->weights.items[w].alias, s->alias) != 0) w++;
    if (w == c->weights.len) return asm_error(c, s->aline, s->acol, "unknown weights alias '%s' (declare it with: weights \"FILE\" as %s)", s->alias, s->alias);
    weights_decl_t *wd = &c->weights.items[w];
    const rill_asm_options_t *o = c->opts;
    if (!wd->st && o && o->weights_path && !strcmp(o->weights_path, wd->path)) {
      /* given in memory (an import's pieces): read where they lie */
      rill_status_t st = isa_st_parse_pieces(c->a, o->weights_pieces, o->weights_lens, o->weights_npieces, &wd->st);
      if (st) {
        if (rill_status_code(st) == RILL_OUT_OF_MEMORY) return st;
        rill_status_t e = asm_error(c, wd->line, wd->col, "%s (given in memory): %s", wd->path, rill_status_message(st));
        rill_status_free(st);
        return e;
      }
      wd->in_memory = true;
    }
    if (!wd->st) {
      char full[4096];
      RILL_TRY(rill__path_join(c->dir, wd->path, full, sizeof full));
      rill_status_t st = isa_st_open(c->a, full, &wd->st);
      if (st) {
        if (rill_status_code(st) == RILL_OUT_OF_MEMORY) return st;
        rill_status_t e = asm_error(c, wd->line, wd->col, "%s", rill_status_message(st));
        rill_status_free(st);
        return e;
      }
    }
    const isa_st_tensor_t *t = isa_st_find(wd->st, k->tensor);
    if (!t) return asm_error(c, s->line, s->col, "no tensor \"%s\" in %s", k->tensor, wd->path);
    rill_type_t whole = k->type;
    if (k->shard_parts) whole.dims[k->shard_axis] *= k->shard_parts;
    if (!rill__type_eq(&t->type, &whole)) {
      char b1[96], b2[96];
      if (k->shard_parts)
        return asm_error(c, s->line, s->col, "const %%%s is declared %s, part of %u along axis %u, but tensor \"%s\" in %s is %s", k->name,
                         rill_type_format(&k->type, b1, 96), k->shard_parts, k->shard_axis, k->tensor, wd->path,
                         rill_type_format(&t->type, b2, 96));
      return asm_error(c, s->line, s->col, "const %%%s is declared %s but tensor \"%s\" in %s is %s", k->name,
                       rill_type_format(&k->type, b1, 96), k->tensor, wd->path, rill_type_format(&t->type, b2, 96));
    }
    k->size = t->size;
    k->sum64 = k->size >= ISA_SUM64_FROM;
    if (k->shard_parts) RILL_TRY(asm_shard_sums(c, k, t->data));
    k->weights = (uint32_t)w;
    /* an embedded weight's checksum is the writer's (isa_write: none for a module made in memory) */
    bool linked = k->linked || (c->opts && c->opts->link_weights);
    if (linked) k->checksum = isa_const_sum(k, t->data, t->size);
    if ((k->linked || (c->opts && c->opts->link_weights)) && wd->in_memory)
      return asm_error(c, s->line, s->col, "const %%%s: weights given in memory (%s) cannot be linked: they have no file", k->name, wd->path);
    if (k->linked || (c->opts && c->opts->link_weights)) {
      k->linked = true;
      k->file_offset = t->offset;
    } else {
      k->data = t->data;
    }
  }
  return NULL;
}

static rill_status_t parse_types_paren(asm_ctx_t *c, size_t *pos, rill_type_t **out, uint32_t *n) {
  RILL_VEC(rill_type_t) v = {0};
  rill_status_t st = expect(c, pos, T_LPAREN, "'('");
  while (!st && c->toks[*pos].kind != T_RPAREN) {
    rill_type_t t;
    if ((st = asm_parse_type(c, pos, &t)) || (st = RILL_VEC_PUSH(c->a, &v, t))) break;
    if (c->toks[*pos].kind == T_COMMA) (*pos)++;
    else if (c->toks[*pos].kind != T_RPAREN) st = expect(c, pos, T_RPAREN, "',' or ')'");
  }
  if (!st) {
    (*pos)++;
    *n = (uint32_t)v.len;
    *out = rill__arena_memdup(&c->arena, v.items, v.len * sizeof(rill_type_t));
    if (!*out) st = rill__oom();
  }
  RILL_VEC_FREE(c->a, &v);
  return st;
}

static rill_status_t parse_opdecl(asm_ctx_t *c, size_t *pos) {
  (*pos)++; /* op */
  const token_t *ref = &c->toks[*pos];
  RILL_TRY(expect(c, pos, T_OPREF, "an op number such as $0"));
  if (asm_tok_digits(ref) != (int64_t)c->ops.len)
    return asm_error_at(c, ref, "op declarations must be numbered in order: expected $%zu", c->ops.len);
  RILL_TRY(expect(c, pos, T_EQ, "'='"));
  const token_t *nt = &c->toks[*pos];
  RILL_TRY(expect(c, pos, T_NAME, "an op name"));
  isa_opdecl_t d;
  memset(&d, 0, sizeof d);
  if (!(d.name = tok_str(c, nt))) return rill__oom();
  RILL_TRY(parse_types_paren(c, pos, &d.in, &d.nin));
  RILL_TRY(expect(c, pos, T_ARROW, "'->'"));
  RILL_TRY(parse_types_paren(c, pos, &d.out, &d.nout));
  if (c->toks[*pos].kind == T_LBRACE) RILL_TRY(asm_parse_attrs(c, pos, &d.attrs, &d.nattrs));
  rill_status_t st = ops_check_decl(NULL, &c->syms, &d);
  if (st) {
    rill_status_t e = asm_error_at(c, nt, "%s", rill_status_message(st));
    rill_status_free(st);
    return e;
  }
  RILL_TRY(RILL_VEC_PUSH(c->a, &c->ops, d));
  c->nexplicit_ops = (uint32_t)c->ops.len;
  return NULL;
}

static rill_status_t parse_func(asm_ctx_t *c, size_t *pos) {
  (*pos)++; /* func */
  const token_t *nt = &c->toks[*pos];
  RILL_TRY(expect(c, pos, T_FUNC, "a function name such as @main"));
  if (asm_find_func(c, nt->text, nt->len) >= 0)
    return asm_error_at(c, nt, "function @%.*s is defined twice", (int)nt->len, nt->text);
  func_decl_t f;
  memset(&f, 0, sizeof f);
  f.line = nt->line;
  f.col = nt->col;
  if (!(f.name = tok_str(c, nt))) return rill__oom();
  RILL_TRY(expect(c, pos, T_LPAREN, "'(' and the parameters"));
  RILL_VEC(rill_type_t) types = {0};
  RILL_VEC(const char *) names = {0};
  RILL_VEC(uint32_t) lines = {0}, cols = {0};
  rill_status_t st = NULL;
  char b[64];
  while (c->toks[*pos].kind != T_RPAREN) {
    const token_t *pt = &c->toks[*pos];
    if ((st = expect(c, pos, T_VALUE, "a parameter such as %x: f32[4]"))) goto done;
    for (size_t i = 0; i < names.len; i++)
      if (strlen(names.items[i]) == pt->len && memcmp(names.items[i], pt->text, pt->len) == 0) {
        st = asm_error_at(c, pt, "parameter %%%.*s is named twice", (int)pt->len, pt->text);
        goto done;
      }
    rill_type_t t;
    const char *nm = tok_str(c, pt);
    if (!nm) { st = rill__oom(); goto done; }
    if ((st = expect(c, pos, T_COLON, "':' and the parameter's type")) || (st = asm_parse_type(c, pos, &t)) ||
        (st = RILL_VEC_PUSH(c->a, &types, t)) || (st = RILL_VEC_PUSH(c->a, &names, nm)) ||
        (st = RILL_VEC_PUSH(c->a, &lines, pt->line)) || (st = RILL_VEC_PUSH(c->a, &cols, pt->col)))
      goto done;
    if (c->toks[*pos].kind == T_COMMA) (*pos)++;
    else if (c->toks[*pos].kind != T_RPAREN && (st = expect(c, pos, T_RPAREN, "',' or ')' after the parameter"))) goto done;
  }
  (*pos)++;
  f.nparams = (uint32_t)types.len;
  f.param_types = rill__arena_memdup(&c->arena, types.items, types.len * sizeof(rill_type_t));
  f.param_names = rill__arena_memdup(&c->arena, names.items, names.len * sizeof(char *));
  f.param_line = rill__arena_memdup(&c->arena, lines.items, lines.len * 4);
  f.param_col = rill__arena_memdup(&c->arena, cols.items, cols.len * 4);
  if (!f.param_types || !f.param_names || !f.param_line || !f.param_col) { st = rill__oom(); goto done; }
  if ((st = expect(c, pos, T_ARROW, "'->' and the result types"))) goto done;
  if (c->toks[*pos].kind == T_LPAREN) {
    if ((st = parse_types_paren(c, pos, &f.results, &f.nresults))) goto done;
  } else {
    f.results = rill__arena_alloc(&c->arena, sizeof(rill_type_t));
    if (!f.results) { st = rill__oom(); goto done; }
    if ((st = asm_parse_type(c, pos, f.results))) goto done;
    f.nresults = 1;
  }
  if (tok_is(&c->toks[*pos], "lowered")) {
    (*pos)++;
    f.lowered = true;
    isa_attr_t *attrs;
    uint32_t n;
    if ((st = expect(c, pos, T_LPAREN, "'(' after lowered"))) goto done;
    (*pos)--;
    /* lowered(streams=N, events=M): reuse the attribute parser on a parenthesised list. */
    c->toks[*pos].kind = T_LBRACE;
    size_t close = *pos;
    while (c->toks[close].kind != T_RPAREN && c->toks[close].kind != T_NEWLINE) close++;
    if (c->toks[close].kind != T_RPAREN) { st = asm_error_at(c, &c->toks[close], "expected ')' to close lowered(...)"); goto done; }
    c->toks[close].kind = T_RBRACE;
    if ((st = asm_parse_attrs(c, pos, &attrs, &n))) goto done;
    f.nstreams = 1;
    for (uint32_t i = 0; i < n; i++) {
      bool s = strcmp(attrs[i].name, "streams") == 0, e = strcmp(attrs[i].name, "events") == 0;
      if ((!s && !e) || attrs[i].kind != ISA_ATTR_INT || attrs[i].ints[0] < (s ? 1 : 0) || attrs[i].ints[0] > 64) {
        st = asm_error_at(c, nt, "lowered(...) takes streams=1..64 and events=0..64");
        goto done;
      }
      if (s) f.nstreams = (uint32_t)attrs[i].ints[0];
      else f.nevents = (uint32_t)attrs[i].ints[0];
    }
  }
  if ((st = expect(c, pos, T_LBRACE, "'{' to open the function body")) ||
      (st = expect(c, pos, T_NEWLINE, "a new line after '{'")))
    goto done;
  f.body_start = *pos;
  int depth = 1;
  for (;; (*pos)++) {
    const token_t *t = &c->toks[*pos];
    if (t->kind == T_EOF) { st = asm_error(c, f.line, f.col, "function @%s has no closing '}'", f.name); goto done; }
    if (t->kind == T_LBRACE) depth++;
    if (t->kind == T_RBRACE && --depth == 0) break;
  }
  f.body_end = *pos;
  (*pos)++;
  if (c->toks[*pos].kind != T_NEWLINE)
    st = asm_error_at(c, &c->toks[*pos], "expected the end of the line after '}', found %s", asm_tok_desc(&c->toks[*pos], b, sizeof b));
  else if (!(st = rill__map_put(&c->func_map, f.name, strlen(f.name), (uint32_t)c->funcs.len)))
    st = RILL_VEC_PUSH(c->a, &c->funcs, f);
done:
  RILL_VEC_FREE(c->a, &types);
  RILL_VEC_FREE(c->a, &names);
  RILL_VEC_FREE(c->a, &lines);
  RILL_VEC_FREE(c->a, &cols);
  return st;
}

/* `precision MODE`: the mode the module was assembled in (as `rill dis`
 * prints it). A surface function is converted to it as --precision would;
 * the option and the statement must agree where both are given. */
static rill_status_t parse_precision(asm_ctx_t *c, size_t *pos) {
  const token_t *t = &c->toks[*pos];
  if (c->has_precision) return asm_error_at(c, t, "'precision' is given twice");
  (*pos)++;
  const token_t *v = &c->toks[*pos];
  char name[16] = "";
  if (v->kind == T_NAME && v->len < sizeof name) memcpy(name, v->text, v->len);
  rill_precision_t p;
  if (v->kind != T_NAME || !rill_precision_from_name(name, &p)) {
    char b[64];
    return asm_error_at(c, v, "expected a precision mode (exact, tf32, f16 or bf16), found %s", asm_tok_desc(v, b, sizeof b));
  }
  rill_precision_t want = c->opts ? c->opts->precision : RILL_PRECISION_EXACT;
  if (want != RILL_PRECISION_EXACT && want != p)
    return asm_error_at(c, v, "the source says precision %s, the options %s", rill_precision_name(p), rill_precision_name(want));
  (*pos)++;
  c->has_precision = true;
  c->precision = p;
  return NULL;
}

/* The shape variables bind_dims binds, marked before anything is checked
 * (sizes over them are checked when they are bound): the names of
 * `bind_dims(%v, N, ...)`, and in lowered form those of the register that
 * `bind_dims %names, %v` names (`reg %names : bool[0, N, ...]`). */
static rill_status_t mark_runtime_vars(asm_ctx_t *c) {
  for (size_t i = 0; c->toks[i].kind != T_EOF; i++) {
    if (!tok_is(&c->toks[i], "bind_dims")) continue;
    c->has_bind = true;
    const token_t *t = &c->toks[i + 1];
    if (t->kind == T_LPAREN) { /* bind_dims(%v, N, ...) */
      for (t++; t->kind != T_EOF && t->kind != T_NEWLINE && t->kind != T_RPAREN; t++) {
        uint32_t v;
        if (t->kind != T_NAME) continue;
        RILL_TRY(isa_syms_var(&c->syms, t->text, t->len, &v));
        c->syms.vars.items[v].runtime = true;
      }
    } else if (t->kind == T_VALUE) { /* lowered: the register's declaration, earlier in the body */
      for (size_t j = i; j-- > 0 && !(c->toks[j].kind == T_FUNC && j > 0 && tok_is(&c->toks[j - 1], "func"));) {
        const token_t *r = &c->toks[j];
        if (r->kind != T_VALUE || r->len != t->len || memcmp(r->text, t->text, t->len) || j == 0 || !tok_is(&c->toks[j - 1], "reg")) continue;
        for (const token_t *q = r + 1; q->kind != T_EOF && q->kind != T_NEWLINE; q++) {
          uint32_t v;
          if (q->kind != T_NAME || (q[-1].kind != T_COMMA && q[-1].kind != T_LBRACK)) continue;
          RILL_TRY(isa_syms_var(&c->syms, q->text, q->len, &v));
          c->syms.vars.items[v].runtime = true;
        }
        break;
      }
    }
  }
  return NULL;
}

rill_status_t asm_parse_module(asm_ctx_t *c) {
  size_t pos = 0;
  srcvec_t srcs = {0};
  rill_status_t st = mark_runtime_vars(c);
  if (st) return st;
  char b[64];
  bool first = true;
  while (!st && c->toks[pos].kind != T_EOF) {
    const token_t *t = &c->toks[pos];
    if (t->kind == T_NEWLINE) { pos++; continue; }
    if (tok_is(t, "module")) {
      if (!first) { st = asm_error_at(c, t, "'module' must be the first statement"); break; }
      pos++;
      if (c->toks[pos].kind != T_STRING) { st = expect(c, &pos, T_STRING, "the module's name as a string"); break; }
      c->module_name = c->toks[pos++].str;
    } else if (tok_is(t, "source")) {
      pos++;
      if (c->toks[pos].kind != T_STRING) { st = expect(c, &pos, T_STRING, "the source file name as a string"); break; }
      c->source_name = c->toks[pos++].str;
    } else if (tok_is(t, "precision")) {
      st = parse_precision(c, &pos);
    } else if (tok_is(t, "weights")) {
      pos++;
      weights_decl_t w = {0};
      w.line = t->line;
      w.col = t->col;
      if (c->toks[pos].kind != T_STRING) { st = expect(c, &pos, T_STRING, "the weights file path as a string"); break; }
      w.path = c->toks[pos++].str;
      if (!tok_is(&c->toks[pos], "as")) { st = asm_error_at(c, &c->toks[pos], "expected 'as' and an alias after the weights path"); break; }
      pos++;
      const token_t *al = &c->toks[pos];
      if ((st = expect(c, &pos, T_NAME, "an alias name"))) break;
      if (!(w.alias = tok_str(c, al))) { st = rill__oom(); break; }
      for (size_t i = 0; i < c->weights.len; i++)
        if (strcmp(c->weights.items[i].alias, w.alias) == 0) st = asm_error_at(c, al, "weights alias '%s' is defined twice", w.alias);
      if (!st) st = RILL_VEC_PUSH(c->a, &c->weights, w);
    } else if (tok_is(t, "const")) {
      st = parse_const(c, &pos, &srcs);
    } else if (tok_is(t, "state")) {
      st = parse_state(c, &pos, &srcs);
    } else if (tok_is(t, "dim")) {
      st = parse_dim(c, &pos);
    } else if (tok_is(t, "op")) {
      if (c->ops.len != c->nexplicit_ops) { st = asm_error_at(c, t, "op declarations must come before functions"); break; }
      st = parse_opdecl(c, &pos);
    } else if (tok_is(t, "choose")) {
      st = asm_parse_choose(c, &pos);
    } else if (tok_is(t, "func")) {
      st = parse_func(c, &pos);
    } else {
      st = asm_error_at(c, t, "expected a statement (module, weights, const, state, dim or func), found %s", asm_tok_desc(t, b, sizeof b));
    }
    if (!st && c->toks[pos].kind != T_NEWLINE && c->toks[pos].kind != T_EOF)
      st = asm_error_at(c, &c->toks[pos], "expected the end of the line, found %s", asm_tok_desc(&c->toks[pos], b, sizeof b));
    first = false;
  }
  if (!st) st = resolve_weights(c, &srcs);
  RILL_VEC_FREE(c->a, &srcs);
  return st;
}
