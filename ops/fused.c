/* fused.c: the text of a fused group (op `fused`, attribute `expr`).
 *
 *   t0 = mul(x0, x1); t1 = add(t0, f32(0.5)); t2 = clip(t1) {min=0, max=6}; return t2, t0
 *
 * Statements in order, each an elementwise op of the core set (or where)
 * over operands xK, earlier results tK and literals DTYPE(VALUE), with the
 * op's attributes in braces; `return` names the group's results. Each step
 * is typed by the op's own inference, so a group means exactly what its ops
 * one by one mean; every step has the group's shape (literals are scalars).
 * The assembler's fusion pass writes it, `rill dis` prints it as the
 * attribute's string, and the CPU evaluator and the CUDA generator read the
 * parsed program.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops.h"

void ops_ewnode_init(ops_ewnode_t *n, const ops_def_t *def, const ops_params_t *p, rill_dtype_t in0, rill_dtype_t out) {
  memset(n, 0, sizeof *n);
  n->kind = def->cpu == ops_cpu_where ? EWK_WHERE : def->cpu == ops_cpu_binary ? EWK_BINARY : EWK_UNARY;
  n->code = p->code;
  n->dom = n->kind == EWK_UNARY ? in0 : p->compute;
  n->out = out;
  for (int k = 0; k < 3; k++) n->arg[k] = -1 - k;
  n->has_lo = p->has_lo;
  n->has_hi = p->has_hi;
  n->gelu_tanh = p->gelu_tanh;
  n->alpha = p->alpha;
  n->lo = p->lo;
  n->hi = p->hi;
}

void ops_add_node(rill_dtype_t d, ops_ewnode_t *n) {
  memset(n, 0, sizeof *n);
  n->kind = EWK_BINARY;
  n->code = B_ADD;
  n->dom = n->out = d;
  for (int k = 0; k < 3; k++) n->arg[k] = -1 - k;
}

void ops_act_node(int act, rill_dtype_t d, ops_ewnode_t *n) {
  memset(n, 0, sizeof *n);
  n->kind = EWK_UNARY;
  n->code = act == OPS_ACT_RELU ? U_RELU : U_GELU;
  n->gelu_tanh = act == OPS_ACT_GELU_TANH;
  n->dom = n->out = d;
  for (int k = 0; k < 3; k++) n->arg[k] = -1 - k;
}

typedef struct parser {
  const char *s;
  size_t i;
} parser_t;

static rill_status_t perr(const parser_t *p, const char *fmt, ...) RILL_PRINTF(2, 3);
static rill_status_t perr(const parser_t *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rill_status_t st = rill__status_v(RILL_ASSEMBLY_ERROR, fmt, ap);
  va_end(ap);
  return rill__status_prefix(st, "fused: expr at character %zu: ", p->i + 1);
}

static void skip(parser_t *p) {
  while (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n') p->i++;
}

static bool eat(parser_t *p, char ch) {
  skip(p);
  if (p->s[p->i] != ch) return false;
  p->i++;
  return true;
}

/* A word: [A-Za-z_][A-Za-z0-9_]*. */
static size_t word(parser_t *p, const char **out) {
  skip(p);
  size_t j = p->i;
  if (!isalpha((unsigned char)p->s[j]) && p->s[j] != '_') return 0;
  while (isalnum((unsigned char)p->s[j]) || p->s[j] == '_') j++;
  *out = p->s + p->i;
  size_t n = j - p->i;
  p->i = j;
  return n;
}

/* A number's text: sign, digits, '.', exponent, or inf/nan. */
static size_t number(parser_t *p, const char **out, bool *is_float) {
  skip(p);
  size_t j = p->i;
  *is_float = false;
  if (p->s[j] == '-' || p->s[j] == '+') j++;
  if (!strncmp(p->s + j, "inf", 3) || !strncmp(p->s + j, "nan", 3)) {
    j += 3;
    *is_float = true;
  } else {
    size_t d = j;
    if (!isdigit((unsigned char)p->s[j]) && p->s[j] != '.') return 0;
    while (isalnum((unsigned char)p->s[j]) || p->s[j] == '.' ||
           ((p->s[j] == '-' || p->s[j] == '+') && (p->s[j - 1] == 'e' || p->s[j - 1] == 'E'))) {
      if (p->s[j] == '.' || p->s[j] == 'e' || p->s[j] == 'E') *is_float = true;
      j++;
    }
    if (j == d) return 0;
  }
  *out = p->s + p->i;
  size_t n = j - p->i;
  p->i = j;
  return n;
}

/* A number's text as a float (is_float) or an integer; false when malformed. */
static bool parse_num(const char *t, size_t n, bool is_float, double *f, int64_t *i) {
  char buf[64], *end;
  if (n >= sizeof buf) return false;
  memcpy(buf, t, n);
  buf[n] = 0;
  errno = 0;
  if (is_float) *f = strtod(buf, &end);
  else *i = strtoll(buf, &end, 10);
  return *end == 0 && (is_float || errno == 0); /* a subnormal double sets ERANGE but reads exactly */
}

/* tN or xN: the index, or -1. */
static int64_t ref(parser_t *p, char kind) {
  skip(p);
  if (p->s[p->i] != kind || !isdigit((unsigned char)p->s[p->i + 1])) return -1;
  size_t j = p->i + 1;
  int64_t v = 0;
  while (isdigit((unsigned char)p->s[j]) && v < 1000000) v = v * 10 + (p->s[j++] - '0');
  if (isalnum((unsigned char)p->s[j]) || p->s[j] == '_') return -1;
  p->i = j;
  return v;
}

typedef struct prog {
  ops_fused_t *f;
  rill_type_t ty[OPS_FUSED_MAX_NODES];
  uint32_t stmt[OPS_FUSED_MAX_NODES];   /* statement k's node */
  uint32_t nstmt;
} prog_t;

static rill_status_t add_node(parser_t *p, prog_t *g, const ops_ewnode_t *n, const rill_type_t *t, uint32_t *out) {
  if (g->f->nnodes >= OPS_FUSED_MAX_NODES) return perr(p, "more than %d steps", OPS_FUSED_MAX_NODES);
  *out = g->f->nnodes;
  g->f->node[g->f->nnodes] = *n;
  g->ty[g->f->nnodes++] = *t;
  return NULL;
}

/* A literal operand DTYPE(VALUE), its dtype's name already read. */
static rill_status_t literal(parser_t *p, prog_t *g, rill_dtype_t d, uint32_t *out) {
  if (!eat(p, '(')) return perr(p, "expected '(' after the literal's dtype");
  const char *t;
  bool fl;
  size_t n = number(p, &t, &fl);
  ops_ewnode_t nd;
  memset(&nd, 0, sizeof nd);
  nd.kind = EWK_LIT;
  nd.dom = nd.out = d;
  if (!n) return perr(p, "expected a number");
  if (rill__is_float(d)) {
    if (!parse_num(t, n, true, &nd.f, NULL)) return perr(p, "bad number '%.*s'", (int)n, t);
    uint8_t b[8];
    rill__store_f(b, d, 0, nd.f);
    nd.f = rill__load_f(b, d, 0);
  } else {
    bool u = d == RILL_U64 && n < 64 && isdigit((unsigned char)t[0]); /* 0..2^64-1, held as its bits */
    if (u) {
      char buf[64], *end;
      memcpy(buf, t, n);
      buf[n] = 0;
      errno = 0;
      nd.i = (int64_t)strtoull(buf, &end, 10);
      if (fl || *end || errno) return perr(p, "expected an integer for %s, found '%.*s'", rill_dtype_name(d), (int)n, t);
    } else if (fl || !parse_num(t, n, false, NULL, &nd.i)) {
      return perr(p, "expected an integer for %s, found '%.*s'", rill_dtype_name(d), (int)n, t);
    }
    uint8_t b[8];
    rill__store_i(b, d, 0, nd.i);
    if (rill__load_i(b, d, 0) != nd.i || (d == RILL_U64 && !u)) return perr(p, "%.*s does not fit %s", (int)n, t, rill_dtype_name(d));
  }
  if (!eat(p, ')')) return perr(p, "expected ')' after the literal");
  rill_type_t ty = {d, 0, {0}};
  return add_node(p, g, &nd, &ty, out);
}

enum { MAX_ATTRS = 4 };

static rill_status_t attrs(parser_t *p, isa_attr_t *at, int64_t *iv, double *fv, char (*sv)[32], uint32_t *n) {
  *n = 0;
  if (!eat(p, '{')) return NULL;
  do {
    if (*n >= MAX_ATTRS) return perr(p, "too many attributes");
    const char *nm;
    size_t nl = word(p, &nm);
    if (!nl || nl >= 32) return perr(p, "expected an attribute name");
    if (!eat(p, '=')) return perr(p, "expected '=' after the attribute name");
    isa_attr_t *a = &at[*n];
    memset(a, 0, sizeof *a);
    memcpy(sv[2 * *n], nm, nl);
    sv[2 * *n][nl] = 0;
    a->name = sv[2 * *n];
    a->count = 1;
    a->ints = &iv[*n];
    a->floats = &fv[*n];
    skip(p);
    const char *t;
    bool fl;
    size_t tl;
    rill_dtype_t d;
    if ((tl = number(p, &t, &fl))) {
      a->kind = fl ? ISA_ATTR_FLOAT : ISA_ATTR_INT;
      if (!parse_num(t, tl, fl, &fv[*n], &iv[*n])) return perr(p, "bad number '%.*s'", (int)tl, t);
    } else if ((tl = word(p, &t))) {
      if (tl >= 32) return perr(p, "attribute value too long");
      if (rill_dtype_from_name(t, tl, &d)) {
        a->kind = ISA_ATTR_DTYPE;
        iv[*n] = d;
      } else {
        a->kind = ISA_ATTR_STRING;
        memcpy(sv[2 * *n + 1], t, tl);
        sv[2 * *n + 1][tl] = 0;
        a->str = sv[2 * *n + 1];
      }
    } else {
      return perr(p, "expected an attribute value");
    }
    (*n)++;
  } while (eat(p, ','));
  if (!eat(p, '}')) return perr(p, "expected '}' after the attributes");
  return NULL;
}

static rill_status_t statement(parser_t *p, prog_t *g, const rill_type_t *in, uint32_t nin) {
  int64_t k = ref(p, 't');
  if (k != (int64_t)g->nstmt) return perr(p, "expected t%u, the next statement's result", g->nstmt);
  if (g->nstmt >= OPS_FUSED_MAX_NODES) return perr(p, "more than %d steps", OPS_FUSED_MAX_NODES);
  if (!eat(p, '=')) return perr(p, "expected '='");
  const char *nm;
  size_t nl = word(p, &nm);
  char name[32];
  if (!nl || nl >= sizeof name) return perr(p, "expected an op name");
  memcpy(name, nm, nl);
  name[nl] = 0;
  const ops_def_t *def = ops_find(name);
  if (!def || !ops_is_elementwise(def)) return perr(p, "'%s' is not an elementwise op", name);
  if (!eat(p, '(')) return perr(p, "expected '(' after %s", name);
  int32_t args[3];
  rill_type_t at[3];
  uint32_t na = 0;
  do {
    if (na >= 3) return perr(p, "too many operands for %s", name);
    int64_t r;
    const char *w;
    size_t wl;
    rill_dtype_t d;
    if ((r = ref(p, 'x')) >= 0) {
      if (r >= nin) return perr(p, "x%lld: the group has %u operands", (long long)r, nin);
      args[na] = (int32_t)(-1 - r);
      at[na] = in[r];
    } else if ((r = ref(p, 't')) >= 0) {
      if (r >= g->nstmt) return perr(p, "t%lld is not defined yet", (long long)r);
      args[na] = (int32_t)g->stmt[r];
      at[na] = g->ty[g->stmt[r]];
    } else if ((wl = word(p, &w)) && rill_dtype_from_name(w, wl, &d)) {
      uint32_t li;
      RILL_TRY(literal(p, g, d, &li));
      args[na] = (int32_t)li;
      at[na] = g->ty[li];
    } else {
      return perr(p, "expected an operand (xN, tN or DTYPE(VALUE))");
    }
    na++;
  } while (eat(p, ','));
  if (!eat(p, ')')) return perr(p, "expected ')' after the operands");
  isa_attr_t as[MAX_ATTRS];
  int64_t iv[MAX_ATTRS];
  double fv[MAX_ATTRS];
  char sv[2 * MAX_ATTRS][32];
  uint32_t nat;
  RILL_TRY(attrs(p, as, iv, fv, sv, &nat));
  ops_params_t params;
  rill_type_t rt;
  uint32_t nout;
  RILL_TRY(ops_infer(def, at, na, as, nat, &rt, 1, &nout, &params));
  ops_ewnode_t nd;
  ops_ewnode_init(&nd, def, &params, at[0].dtype, rt.dtype);
  for (uint32_t j = 0; j < na; j++) nd.arg[j] = args[j];
  uint32_t id;
  RILL_TRY(add_node(p, g, &nd, &rt, &id));
  g->stmt[g->nstmt++] = id;
  return NULL;
}

rill_status_t ops_fused_parse(const char *text, const rill_type_t *in, uint32_t nin, ops_fused_t *out, rill_type_t *out_types) {
  prog_t gp;
  prog_t *g = &gp;
  memset(g, 0, sizeof *g);
  memset(out, 0, sizeof *out);
  g->f = out;
  parser_t p = {text, 0};
  rill_status_t st = NULL;
  const char *w;
  size_t wl;
  for (;;) {
    size_t save = p.i;
    if ((wl = word(&p, &w)) == 6 && !memcmp(w, "return", 6)) break;
    p.i = save;
    if ((st = statement(&p, g, in, nin))) goto done;
    if (!eat(&p, ';')) { st = perr(&p, "expected ';' or the end"); goto done; }
  }
  if (!g->nstmt) { st = perr(&p, "no statements"); goto done; }
  do {
    int64_t r = ref(&p, 't');
    if (r < 0 || r >= g->nstmt) { st = perr(&p, "expected a result tN of a statement"); goto done; }
    if (out->nout >= OPS_FUSED_MAX_OUT) { st = perr(&p, "more than %d results", OPS_FUSED_MAX_OUT); goto done; }
    out_types[out->nout] = g->ty[g->stmt[r]];
    out->out[out->nout++] = g->stmt[r];
  } while (eat(&p, ','));
  skip(&p);
  if (text[p.i]) { st = perr(&p, "unexpected text after the results"); goto done; }
  /* Every step has the group's shape: the first result's. */
  const rill_type_t *sh = &out_types[0];
  for (uint32_t j = 0; j < out->nnodes; j++) {
    const rill_type_t *t = &g->ty[j];
    if (out->node[j].kind == EWK_LIT) continue;
    if (t->rank != sh->rank || memcmp(t->dims, sh->dims, sizeof(int64_t) * (size_t)t->rank)) {
      char b1[96], b2[96];
      st = rill__status(RILL_ASSEMBLY_ERROR, "fused: a step has shape %s, the group's shape is %s", rill_type_format(t, b1, 96),
                        rill_type_format(sh, b2, 96));
      goto done;
    }
  }
done:
  return st;
}

rill_status_t ops_fused_parse_group(const char *text, const isa_attr_t *perms, const rill_type_t *in, uint32_t nin, ops_fused_t *out,
                                    rill_type_t *out_types) {
  rill_type_t eff[OPS_FUSED_MAX_IN];
  int8_t perm[OPS_FUSED_MAX_IN][RILL_MAX_RANK];
  uint32_t permuted = 0, at = 0;
  if (nin > OPS_FUSED_MAX_IN) return rill__status(RILL_ASSEMBLY_ERROR, "fused: %u operands, at most %d", nin, OPS_FUSED_MAX_IN);
  for (uint32_t k = 0; k < nin; k++) {
    eff[k] = in[k];
    for (int i = 0; i < in[k].rank; i++) perm[k][i] = (int8_t)i;
    if (!perms) continue;
    if ((perms->kind != ISA_ATTR_INTS && perms->kind != ISA_ATTR_INT) || at + (uint32_t)in[k].rank > perms->count)
      return rill__status(RILL_ASSEMBLY_ERROR, "fused: perms has %u values, the operands' ranks add up to more", perms->count);
    unsigned seen = 0;
    for (int i = 0; i < in[k].rank; i++) {
      int64_t a = perms->ints[at + (uint32_t)i];
      if (a < 0 || a >= in[k].rank || (seen >> a) & 1)
        return rill__status(RILL_ASSEMBLY_ERROR, "fused: perms of operand %u is not a permutation of its %d axes", k, in[k].rank);
      seen |= 1u << a;
      perm[k][i] = (int8_t)a;
      eff[k].dims[i] = in[k].dims[a];
      if (a != i) permuted |= 1u << k;
    }
    at += (uint32_t)in[k].rank;
  }
  if (perms && at != perms->count)
    return rill__status(RILL_ASSEMBLY_ERROR, "fused: perms has %u values, the operands' ranks add up to %u", perms->count, at);
  RILL_TRY(ops_fused_parse(text, eff, nin, out, out_types));
  out->permuted = permuted;
  memcpy(out->perm, perm, sizeof perm);
  return NULL;
}

void ops_fused_strides(const ops_fused_t *fp, uint32_t k, const rill_type_t *t, const rill_type_t *out, int64_t *strides) {
  if (!fp || !((fp->permuted >> k) & 1)) {
    ops_broadcast_strides(t, out, strides);
    return;
  }
  int64_t cs[RILL_MAX_RANK], s = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    cs[i] = s;
    s *= t->dims[i];
  }
  int off = out->rank - t->rank;
  for (int i = 0; i < out->rank; i++) {
    int j = i - off;
    strides[i] = j < 0 || t->dims[fp->perm[k][j]] == 1 ? 0 : cs[fp->perm[k][j]];
  }
}

rill_status_t ops_fused_print_lit(rill_buf_t *b, rill_dtype_t d, const void *bytes) {
  /* The literal's bytes may sit at any offset of an attribute blob. */
  uint64_t value[2] = {0};
  memcpy(value, bytes, rill_dtype_size(d) <= sizeof value ? rill_dtype_size(d) : sizeof value);
  if (rill__is_float(d)) {
    /* The shortest text that reads back to the same value (f16 and bf16 values are floats). */
    char t[64];
    rill__format_double(t, sizeof t, rill__load_f(value, d, 0), d != RILL_F64);
    return rill__buf_printf(b, "%s(%s)", rill_dtype_name(d), t);
  }
  if (d == RILL_U64) return rill__buf_printf(b, "u64(%llu)", (unsigned long long)value[0]);
  return rill__buf_printf(b, "%s(%lld)", rill_dtype_name(d), (long long)rill__load_i(value, d, 0));
}

rill_status_t ops_fused_print_step(rill_buf_t *b, uint32_t index, const char *name, const isa_attr_t *attrs, uint32_t nattrs,
                                   const char *const *args, uint32_t nargs) {
  RILL_TRY(rill__buf_printf(b, "t%u = %s(", index, name));
  for (uint32_t k = 0; k < nargs; k++) RILL_TRY(rill__buf_printf(b, "%s%s", k ? ", " : "", args[k]));
  RILL_TRY(rill__buf_printf(b, ")"));
  for (uint32_t k = 0; k < nattrs; k++) {
    const isa_attr_t *a = &attrs[k];
    RILL_TRY(rill__buf_printf(b, "%s%s=", k ? ", " : " {", a->name));
    switch (a->kind) {
      case ISA_ATTR_INT: RILL_TRY(rill__buf_printf(b, "%lld", (long long)a->ints[0])); break;
      case ISA_ATTR_FLOAT: {
        /* Reads back as a float: with a point or an exponent. */
        char v[64];
        rill__format_double(v, sizeof v, a->floats[0], false);
        RILL_TRY(rill__buf_printf(b, "%s", v));
        break;
      }
      case ISA_ATTR_DTYPE: RILL_TRY(rill__buf_printf(b, "%s", rill_dtype_name((rill_dtype_t)a->ints[0]))); break;
      case ISA_ATTR_STRING: RILL_TRY(rill__buf_printf(b, "%s", a->str)); break;
      default: return rill__status(RILL_INVALID_ARGUMENT, "fused: attribute %s of %s cannot be written", a->name, name);
    }
  }
  return nattrs ? rill__buf_printf(b, "}") : NULL;
}
