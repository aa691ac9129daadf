/* sym.c: canonical size polynomials (sym.h). */
#include <stdio.h>
#include <stdlib.h>

#include "sym.h"

void isa_syms_init(isa_syms_t *s, const rill_allocator_t *a) {
  memset(s, 0, sizeof *s);
  s->a = a;
  rill__arena_init(&s->arena, a);
  rill__map_init(&s->expr_map, a);
  rill__map_init(&s->atom_map, a);
  rill__map_init(&s->var_map, a);
}

void isa_syms_free(isa_syms_t *s) {
  RILL_VEC_FREE(s->a, &s->vars);
  RILL_VEC_FREE(s->a, &s->atoms);
  RILL_VEC_FREE(s->a, &s->exprs);
  rill__map_free(&s->expr_map);
  rill__map_free(&s->atom_map);
  rill__map_free(&s->var_map);
  rill__arena_free(&s->arena);
}

rill_status_t isa_syms_copy(isa_syms_t *dst, const isa_syms_t *src) {
  for (size_t i = 0; i < src->vars.len; i++) {
    uint32_t v;
    RILL_TRY(isa_syms_var(dst, src->vars.items[i].name, strlen(src->vars.items[i].name), &v));
    isa_symvar_t *d = &dst->vars.items[v];
    const char *name = d->name;
    *d = src->vars.items[i];
    d->name = name;
  }
  for (size_t i = 0; i < src->atoms.len; i++) {
    isa_symatom_t *k = rill__arena_memdup(&dst->arena, &src->atoms.items[i], sizeof(isa_symatom_t));
    if (!k) return rill__oom();
    RILL_TRY(RILL_VEC_PUSH(dst->a, &dst->atoms, *k));
    RILL_TRY(rill__map_put(&dst->atom_map, k, sizeof *k, (uint32_t)i));
  }
  for (size_t i = 0; i < src->exprs.len; i++) {
    const isa_symexpr_t *e = &src->exprs.items[i];
    size_t bytes = sizeof(isa_symterm_t) * e->nterms;
    isa_symterm_t *terms = rill__arena_memdup(&dst->arena, e->terms, bytes);
    if (!terms) return rill__oom();
    isa_symexpr_t c = {e->nterms, terms};
    RILL_TRY(RILL_VEC_PUSH(dst->a, &dst->exprs, c));
    RILL_TRY(rill__map_put(&dst->expr_map, terms, bytes, (uint32_t)i));
  }
  return NULL;
}

int32_t isa_syms_find_var(const isa_syms_t *s, const char *name, size_t len) {
  uint32_t v;
  return rill__map_get(&s->var_map, name, len, &v) ? (int32_t)v : -1;
}

rill_status_t isa_syms_var(isa_syms_t *s, const char *name, size_t len, uint32_t *out_index) {
  int32_t i = isa_syms_find_var(s, name, len);
  if (i >= 0) { *out_index = (uint32_t)i; return NULL; }
  char *n = rill__arena_strndup(&s->arena, name, len);
  if (!n) return rill__oom();
  isa_symvar_t v = {n, 1, ISA_SYM_UNBOUNDED, false, false, 0, 0};
  RILL_TRY(RILL_VEC_PUSH(s->a, &s->vars, v));
  *out_index = (uint32_t)s->vars.len - 1;
  return rill__map_put(&s->var_map, n, len, *out_index);
}

/* ---- polynomials ---- */
typedef struct poly {
  uint32_t n;
  isa_symterm_t t[ISA_SYM_MAX_TERMS];
} poly_t;

static int term_cmp(const void *pa, const void *pb) {
  const isa_symterm_t *a = pa, *b = pb;
  if (a->natoms != b->natoms) return a->natoms < b->natoms ? -1 : 1;
  for (uint32_t i = 0; i < a->natoms; i++)
    if (a->atoms[i] != b->atoms[i]) return a->atoms[i] < b->atoms[i] ? -1 : 1;
  return 0;
}

static rill_status_t too_big(void) {
  return rill__status(RILL_ASSEMBLY_ERROR, "size expression too large (a coefficient overflows or too many terms)");
}

static void poly_of(const isa_syms_t *s, int64_t d, poly_t *p) {
  memset(p, 0, offsetof(poly_t, t));
  if (isa_dim_is_sym(d)) {
    const isa_symexpr_t *e = &s->exprs.items[isa_sym_id(d)];
    p->n = e->nterms;
    memcpy(p->t, e->terms, sizeof(isa_symterm_t) * e->nterms);
  } else if (d != 0) {
    p->n = 1;
    memset(&p->t[0], 0, sizeof p->t[0]);
    p->t[0].coef = d;
  }
}

/* Sorts, merges, interns; the encoded size. */
static rill_status_t poly_intern(isa_syms_t *s, poly_t *p, int64_t *out) {
  qsort(p->t, p->n, sizeof(isa_symterm_t), term_cmp);
  uint32_t k = 0;
  for (uint32_t i = 0; i < p->n; i++) {
    if (k > 0 && term_cmp(&p->t[k - 1], &p->t[i]) == 0) {
      if (__builtin_add_overflow(p->t[k - 1].coef, p->t[i].coef, &p->t[k - 1].coef)) return too_big();
    } else {
      p->t[k++] = p->t[i];
    }
    if (k > 0 && p->t[k - 1].coef == 0) k--;
  }
  p->n = k;
  /* zero the unused atom slots so that the bytes are a key */
  for (uint32_t i = 0; i < k; i++)
    memset(p->t[i].atoms + p->t[i].natoms, 0, sizeof(uint32_t) * (ISA_SYM_MAX_DEG - p->t[i].natoms));
  if (k == 0) { *out = 0; return NULL; }
  if (k == 1 && p->t[0].natoms == 0) {
    if (isa_dim_is_sym(p->t[0].coef)) return too_big();
    *out = p->t[0].coef;
    return NULL;
  }
  size_t bytes = sizeof(isa_symterm_t) * k;
  uint32_t id;
  if (!rill__map_get(&s->expr_map, p->t, bytes, &id)) {
    if (s->exprs.len >= ISA_SYM_MAX_IDS) return too_big();
    isa_symterm_t *terms = rill__arena_memdup(&s->arena, p->t, bytes);
    if (!terms) return rill__oom();
    isa_symexpr_t e = {k, terms};
    RILL_TRY(RILL_VEC_PUSH(s->a, &s->exprs, e));
    id = (uint32_t)s->exprs.len - 1;
    RILL_TRY(rill__map_put(&s->expr_map, terms, bytes, id));
  }
  *out = ISA_SYM_BASE + (int64_t)id;
  return NULL;
}

static rill_status_t atom_dim(isa_syms_t *s, const isa_symatom_t *a, int64_t *out) {
  isa_symatom_t key;
  memset(&key, 0, sizeof key);
  key.is_div = a->is_div;
  key.var = a->var;
  key.num = a->num;
  key.div = a->div;
  uint32_t id;
  if (!rill__map_get(&s->atom_map, &key, sizeof key, &id)) {
    isa_symatom_t *k = rill__arena_memdup(&s->arena, &key, sizeof key);
    if (!k) return rill__oom();
    RILL_TRY(RILL_VEC_PUSH(s->a, &s->atoms, key));
    id = (uint32_t)s->atoms.len - 1;
    RILL_TRY(rill__map_put(&s->atom_map, k, sizeof key, id));
  }
  poly_t p;
  memset(&p, 0, offsetof(poly_t, t));
  p.n = 1;
  memset(&p.t[0], 0, sizeof p.t[0]);
  p.t[0].coef = 1;
  p.t[0].natoms = 1;
  p.t[0].atoms[0] = id;
  return poly_intern(s, &p, out);
}

rill_status_t isa_syms_var_dim(isa_syms_t *s, uint32_t index, int64_t *out) {
  isa_symatom_t a = {false, index, 0, 0};
  return atom_dim(s, &a, out);
}

rill_status_t isa_sym_add(isa_syms_t *s, int64_t a, int64_t b, int64_t *out) {
  if (!isa_dim_is_sym(a) && !isa_dim_is_sym(b)) {
    if (__builtin_add_overflow(a, b, out) || isa_dim_is_sym(*out)) return too_big();
    return NULL;
  }
  poly_t pa, pb;
  poly_of(s, a, &pa);
  poly_of(s, b, &pb);
  if (pa.n + pb.n > RILL_ARRAY_LEN(pa.t)) return too_big();
  memcpy(pa.t + pa.n, pb.t, sizeof(isa_symterm_t) * pb.n);
  pa.n += pb.n;
  return poly_intern(s, &pa, out);
}

rill_status_t isa_sym_mul(isa_syms_t *s, int64_t a, int64_t b, int64_t *out) {
  if (!isa_dim_is_sym(a) && !isa_dim_is_sym(b)) {
    if (__builtin_mul_overflow(a, b, out) || isa_dim_is_sym(*out)) return too_big();
    return NULL;
  }
  poly_t pa, pb, r;
  poly_of(s, a, &pa);
  poly_of(s, b, &pb);
  if (pa.n * pb.n > RILL_ARRAY_LEN(r.t)) return too_big();
  r.n = 0;
  for (uint32_t i = 0; i < pa.n; i++)
    for (uint32_t j = 0; j < pb.n; j++) {
      const isa_symterm_t *x = &pa.t[i], *y = &pb.t[j];
      isa_symterm_t *t = &r.t[r.n++];
      memset(t, 0, sizeof *t);
      if (x->natoms + y->natoms > ISA_SYM_MAX_DEG || __builtin_mul_overflow(x->coef, y->coef, &t->coef)) return too_big();
      /* merge two sorted atom lists */
      uint32_t p = 0, q = 0;
      while (p < x->natoms || q < y->natoms)
        t->atoms[t->natoms++] = q >= y->natoms || (p < x->natoms && x->atoms[p] <= y->atoms[q]) ? x->atoms[p++] : y->atoms[q++];
    }
  return poly_intern(s, &r, out);
}

rill_status_t isa_sym_sub(isa_syms_t *s, int64_t a, int64_t b, int64_t *out) {
  int64_t nb;
  RILL_TRY(isa_sym_mul(s, b, -1, &nb));
  return isa_sym_add(s, a, nb, out);
}

static int64_t floordiv_i(int64_t a, int64_t c) {
  int64_t q = a / c;
  return (a % c != 0 && (a < 0) != (c < 0)) ? q - 1 : q;
}

rill_status_t isa_sym_floordiv(isa_syms_t *s, int64_t a, int64_t c, int64_t *out) {
  if (c <= 0) return rill__status(RILL_ASSEMBLY_ERROR, "division of a size by %lld", (long long)c);
  if (!isa_dim_is_sym(a)) { *out = floordiv_i(a, c); return NULL; }
  if (c == 1) { *out = a; return NULL; }
  poly_t p;
  poly_of(s, a, &p);
  bool exact = true;
  for (uint32_t i = 0; i < p.n; i++) exact = exact && p.t[i].coef % c == 0;
  if (exact) {
    for (uint32_t i = 0; i < p.n; i++) p.t[i].coef /= c;
    return poly_intern(s, &p, out);
  }
  isa_symatom_t at = {true, 0, a, c};
  return atom_dim(s, &at, out);
}

bool isa_sym_divexact(isa_syms_t *s, int64_t a, int64_t b, int64_t *out, rill_status_t *out_err) {
  *out_err = NULL;
  poly_t pa, pb;
  poly_of(s, a, &pa);
  poly_of(s, b, &pb);
  if (pb.n != 1) return false;
  const isa_symterm_t *d = &pb.t[0];
  for (uint32_t i = 0; i < pa.n; i++) {
    isa_symterm_t *t = &pa.t[i];
    if (t->coef % d->coef) return false;
    /* remove d's atoms (a sub-multiset) from t's */
    uint32_t k = 0, q = 0;
    isa_symterm_t r = *t;
    r.natoms = 0;
    for (uint32_t p = 0; p < t->natoms; p++) {
      if (q < d->natoms && t->atoms[p] == d->atoms[q]) { q++; continue; }
      r.atoms[r.natoms++] = t->atoms[p];
    }
    (void)k;
    if (q != d->natoms) return false;
    r.coef = t->coef / d->coef;
    *t = r;
  }
  *out_err = poly_intern(s, &pa, out);
  return *out_err == NULL;
}

/* ---- canonical tables ---- */
typedef struct canon {
  const isa_syms_t *s;
  char **key;                /* per expression, reachable ones */
  uint32_t *depth;
  char **akey;               /* per atom, reachable ones */
} canon_t;

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static char *atom_key(canon_t *k, uint32_t a, int depth);

/* The text of expression id, terms and factors sorted by text (memoised). */
static char *expr_key(canon_t *k, uint32_t id, int depth) {
  if (k->key[id]) return k->key[id];
  if (depth > 64) return NULL;
  const isa_symexpr_t *e = &k->s->exprs.items[id];
  char *terms[ISA_SYM_MAX_TERMS];
  size_t total = 1;
  uint32_t dmax = 0;
  for (uint32_t t = 0; t < e->nterms; t++) {
    char *f[ISA_SYM_MAX_DEG];
    size_t n = 32;
    for (uint32_t j = 0; j < e->terms[t].natoms; j++) {
      if (!(f[j] = atom_key(k, e->terms[t].atoms[j], depth))) return NULL;
      n += strlen(f[j]) + 1;
      const isa_symatom_t *at = &k->s->atoms.items[e->terms[t].atoms[j]];
      if (at->is_div && k->depth[isa_sym_id(at->num)] + 1 > dmax) dmax = k->depth[isa_sym_id(at->num)] + 1;
    }
    qsort(f, e->terms[t].natoms, sizeof(char *), str_cmp);
    if (!(terms[t] = malloc(n))) return NULL;
    size_t o = (size_t)snprintf(terms[t], n, "%lld", (long long)e->terms[t].coef);
    for (uint32_t j = 0; j < e->terms[t].natoms; j++) o += (size_t)snprintf(terms[t] + o, n - o, "*%s", f[j]);
    total += o + 1;
  }
  qsort(terms, e->nterms, sizeof(char *), str_cmp);
  char *r = malloc(total);
  size_t o = 0;
  for (uint32_t t = 0; t < e->nterms; t++) {
    if (r) o += (size_t)snprintf(r + o, total - o, "%s%s", t ? "+" : "", terms[t]);
    free(terms[t]);
  }
  if (r && !e->nterms) r[0] = 0;
  k->key[id] = r;
  k->depth[id] = dmax;
  return r;
}

static char *atom_key(canon_t *k, uint32_t a, int depth) {
  if (k->akey[a]) return k->akey[a];
  const isa_symatom_t *at = &k->s->atoms.items[a];
  if (!at->is_div) {
    k->akey[a] = strdup(k->s->vars.items[at->var].name);
  } else {
    char *num = expr_key(k, isa_sym_id(at->num), depth + 1);
    if (!num) return NULL;
    size_t n = strlen(num) + 48;
    if ((k->akey[a] = malloc(n))) snprintf(k->akey[a], n, "(%s)//%lld", num, (long long)at->div);
  }
  return k->akey[a];
}

static _Thread_local const canon_t *sort_ctx;
static int expr_order(const void *pa, const void *pb) {
  uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
  if (sort_ctx->depth[a] != sort_ctx->depth[b]) return sort_ctx->depth[a] < sort_ctx->depth[b] ? -1 : 1;
  return strcmp(sort_ctx->key[a], sort_ctx->key[b]);
}
static int atom_order(const void *pa, const void *pb) {
  return strcmp(sort_ctx->akey[*(const uint32_t *)pa], sort_ctx->akey[*(const uint32_t *)pb]);
}
static int var_order(const void *pa, const void *pb) {
  return strcmp(sort_ctx->s->vars.items[*(const uint32_t *)pa].name, sort_ctx->s->vars.items[*(const uint32_t *)pb].name);
}

rill_status_t isa_syms_canonical(const isa_syms_t *s, const int64_t *roots, size_t nroots, isa_syms_t *out,
                                 uint32_t **out_map) {
  size_t ne = s->exprs.len, na = s->atoms.len, nv = s->vars.len;
  canon_t k = {s, calloc(ne + 1, sizeof(char *)), calloc(ne + 1, 4), calloc(na + 1, sizeof(char *))};
  uint32_t *map = malloc(4 * (ne + 1)), *amap = malloc(4 * (na + 1)), *vmap = malloc(4 * (nv + 1));
  uint32_t *eorder = malloc(4 * (ne + 1)), *aorder = malloc(4 * (na + 1)), *vorder = malloc(4 * (nv + 1));
  rill_status_t st = k.key && k.depth && k.akey && map && amap && vmap && eorder && aorder && vorder ? NULL : rill__oom();
  size_t nre = 0, nra = 0;
  for (size_t i = 0; !st && i < ne; i++) map[i] = UINT32_MAX;
  for (size_t i = 0; !st && i < na; i++) amap[i] = UINT32_MAX;
  /* reachable expressions (through divisions' numerators) and atoms */
  for (size_t r = 0; !st && r < nroots; r++) {
    if (!isa_dim_is_sym(roots[r]) || map[isa_sym_id(roots[r])] != UINT32_MAX) continue;
    if (isa_sym_id(roots[r]) >= ne) { st = rill__status(RILL_MALFORMED, "unknown size expression"); break; }
    /* an explicit stack: the expression ids still to look at */
    RILL_VEC(uint32_t) stack = {0};
    st = RILL_VEC_PUSH(s->a, &stack, isa_sym_id(roots[r]));
    while (!st && stack.len) {
      uint32_t id = stack.items[--stack.len];
      if (map[id] != UINT32_MAX) continue;
      map[id] = 0;
      eorder[nre++] = id;
      const isa_symexpr_t *e = &s->exprs.items[id];
      for (uint32_t t = 0; !st && t < e->nterms; t++)
        for (uint32_t j = 0; !st && j < e->terms[t].natoms; j++) {
          uint32_t a = e->terms[t].atoms[j];
          if (amap[a] == UINT32_MAX) { amap[a] = 0; aorder[nra++] = a; }
          if (s->atoms.items[a].is_div) st = RILL_VEC_PUSH(s->a, &stack, isa_sym_id(s->atoms.items[a].num));
        }
    }
    RILL_VEC_FREE(s->a, &stack);
  }
  for (size_t i = 0; !st && i < nre; i++)
    if (!expr_key(&k, eorder[i], 0)) st = rill__oom();
  for (size_t i = 0; !st && i < nra; i++)
    if (!atom_key(&k, aorder[i], 0)) st = rill__oom();
  if (!st) {
    sort_ctx = &k;
    qsort(eorder, nre, 4, expr_order);
    qsort(aorder, nra, 4, atom_order);
    for (size_t i = 0; i < nv; i++) vorder[i] = (uint32_t)i;
    qsort(vorder, nv, 4, var_order);
    sort_ctx = NULL;
  }
  for (size_t i = 0; !st && i < nre; i++) map[eorder[i]] = (uint32_t)i;
  for (size_t i = 0; !st && i < nra; i++) amap[aorder[i]] = (uint32_t)i;
  /* variables: the declared ones and those the reachable expressions name */
  for (size_t i = 0; !st && i < nv; i++) vmap[i] = s->vars.items[i].declared ? 0 : UINT32_MAX;
  for (size_t i = 0; !st && i < nra; i++)
    if (!s->atoms.items[aorder[i]].is_div) vmap[s->atoms.items[aorder[i]].var] = 0;
  for (size_t i = 0; !st && i < nv; i++) {
    const isa_symvar_t *v = &s->vars.items[vorder[i]];
    uint32_t idx;
    if (vmap[vorder[i]] == UINT32_MAX) continue;
    if (!(st = isa_syms_var(out, v->name, strlen(v->name), &idx))) {
      const char *name = out->vars.items[idx].name;
      out->vars.items[idx] = *v;
      out->vars.items[idx].name = name;
      vmap[vorder[i]] = idx;
    }
  }
  for (size_t i = 0; !st && i < nra; i++) {
    isa_symatom_t at = s->atoms.items[aorder[i]];
    if (at.is_div) at.num = ISA_SYM_BASE + (int64_t)map[isa_sym_id(at.num)];
    else at.var = vmap[at.var];
    isa_symatom_t *key = rill__arena_memdup(&out->arena, &at, sizeof at);
    if (!key) st = rill__oom();
    if (!st) st = RILL_VEC_PUSH(out->a, &out->atoms, at);
    if (!st) st = rill__map_put(&out->atom_map, key, sizeof at, (uint32_t)i);
  }
  for (size_t i = 0; !st && i < nre; i++) {
    const isa_symexpr_t *e = &s->exprs.items[eorder[i]];
    isa_symterm_t *terms = rill__arena_alloc(&out->arena, sizeof(isa_symterm_t) * (e->nterms ? e->nterms : 1));
    if (!terms) { st = rill__oom(); break; }
    for (uint32_t t = 0; t < e->nterms; t++) {
      terms[t] = e->terms[t];
      for (uint32_t j = 0; j < terms[t].natoms; j++) terms[t].atoms[j] = amap[terms[t].atoms[j]];
      /* factors sorted by their new numbers */
      for (uint32_t j = 1; j < terms[t].natoms; j++)
        for (uint32_t q = j; q > 0 && terms[t].atoms[q - 1] > terms[t].atoms[q]; q--) {
          uint32_t x = terms[t].atoms[q]; terms[t].atoms[q] = terms[t].atoms[q - 1]; terms[t].atoms[q - 1] = x;
        }
      memset(terms[t].atoms + terms[t].natoms, 0, sizeof(uint32_t) * (ISA_SYM_MAX_DEG - terms[t].natoms));
    }
    qsort(terms, e->nterms, sizeof(isa_symterm_t), term_cmp);
    isa_symexpr_t c = {e->nterms, terms};
    st = RILL_VEC_PUSH(out->a, &out->exprs, c);
    if (!st) st = rill__map_put(&out->expr_map, terms, sizeof(isa_symterm_t) * e->nterms, (uint32_t)i);
  }
  for (size_t i = 0; k.key && i < ne; i++) free(k.key[i]);
  for (size_t i = 0; k.akey && i < na; i++) free(k.akey[i]);
  free(k.key);
  free(k.depth);
  free(k.akey);
  free(amap);
  free(vmap);
  free(eorder);
  free(aorder);
  free(vorder);
  if (st) { free(map); return st; }
  *out_map = map;
  return NULL;
}

/* ---- evaluation ---- */
/* Saturating arithmetic for bounds: an unbounded variable's INT64_MAX stays the largest value. */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_mul_overflow(a, b, &r)) return r;
  return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
}
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return a < 0 ? INT64_MIN : INT64_MAX;
}

static bool eval_rec(const isa_syms_t *s, int64_t d, const int64_t *lo, const int64_t *hi, int64_t *out_lo, int64_t *out_hi, int depth);

static bool atom_bounds(const isa_syms_t *s, uint32_t a, const int64_t *lo, const int64_t *hi, int64_t *out_lo, int64_t *out_hi, int depth) {
  const isa_symatom_t *at = &s->atoms.items[a];
  if (!at->is_div) {
    *out_lo = lo[at->var];
    *out_hi = hi[at->var];
    return true;
  }
  int64_t nl, nh;
  if (!eval_rec(s, at->num, lo, hi, &nl, &nh, depth + 1)) return false;
  *out_lo = floordiv_i(nl, at->div);
  *out_hi = floordiv_i(nh, at->div);
  return true;
}

/* Interval arithmetic; atoms are taken as non-negative (sizes). */
static bool eval_rec(const isa_syms_t *s, int64_t d, const int64_t *lo, const int64_t *hi, int64_t *out_lo, int64_t *out_hi, int depth) {
  if (depth > 64) return false;
  if (!isa_dim_is_sym(d)) { *out_lo = *out_hi = d; return true; }
  uint32_t id = isa_sym_id(d);
  if (id >= s->exprs.len) return false;
  const isa_symexpr_t *e = &s->exprs.items[id];
  int64_t sl = 0, sh = 0;
  for (uint32_t i = 0; i < e->nterms; i++) {
    const isa_symterm_t *t = &e->terms[i];
    int64_t ml = 1, mh = 1;
    for (uint32_t j = 0; j < t->natoms; j++) {
      int64_t al, ah;
      if (t->atoms[j] >= s->atoms.len || !atom_bounds(s, t->atoms[j], lo, hi, &al, &ah, depth)) return false;
      if (al < 0) al = 0;
      if (ah < 0) ah = 0;
      ml = sat_mul(ml, al);
      mh = sat_mul(mh, ah);
    }
    int64_t a = sat_mul(t->coef, ml), b = sat_mul(t->coef, mh);
    if (t->coef < 0) { int64_t x = a; a = b; b = x; }
    sl = sat_add(sl, a);
    sh = sat_add(sh, b);
  }
  *out_lo = sl;
  *out_hi = sh;
  return true;
}

static bool runtime_rec(const isa_syms_t *s, int64_t d, int depth) {
  if (!isa_dim_is_sym(d) || depth > 8 || isa_sym_id(d) >= s->exprs.len) return false;
  const isa_symexpr_t *e = &s->exprs.items[isa_sym_id(d)];
  for (uint32_t t = 0; t < e->nterms; t++)
    for (uint32_t j = 0; j < e->terms[t].natoms; j++) {
      if (e->terms[t].atoms[j] >= s->atoms.len) continue;
      const isa_symatom_t *a = &s->atoms.items[e->terms[t].atoms[j]];
      if (a->is_div ? runtime_rec(s, a->num, depth + 1) : a->var < s->vars.len && s->vars.items[a->var].runtime) return true;
    }
  return false;
}

bool isa_sym_runtime(const isa_syms_t *s, int64_t d) { return s && runtime_rec(s, d, 0); }

bool isa_sym_bounds(const isa_syms_t *s, int64_t d, int64_t *out_lo, int64_t *out_hi) {
  size_t n = s->vars.len ? s->vars.len : 1;
  int64_t *lo = malloc(sizeof(int64_t) * n), *hi = malloc(sizeof(int64_t) * n);
  bool ok = lo && hi;
  for (size_t i = 0; ok && i < s->vars.len; i++) {
    lo[i] = s->vars.items[i].lo;
    hi[i] = s->vars.items[i].hi;
    /* an unbounded variable makes every product with it overflow */
  }
  ok = ok && eval_rec(s, d, lo, hi, out_lo, out_hi, 0);
  free(lo);
  free(hi);
  return ok;
}

bool isa_sym_eval(const isa_syms_t *s, int64_t d, const int64_t *vals, int64_t *out) {
  int64_t hi;
  return eval_rec(s, d, vals, vals, out, &hi, 0) && *out >= 0 && *out == hi && *out < INT64_MAX;
}

bool isa_sym_eval_signed(const isa_syms_t *s, int64_t d, const int64_t *vals, int64_t *out) {
  int64_t hi;
  return eval_rec(s, d, vals, vals, out, &hi, 0) && *out == hi && *out < INT64_MAX && *out > INT64_MIN;
}

/* ---- text ---- */
static size_t fmt_rec(const isa_syms_t *s, int64_t d, char *buf, size_t size, int depth);

static size_t put(char *buf, size_t size, size_t o, const char *fmt, ...) RILL_PRINTF(4, 5);
static size_t put(char *buf, size_t size, size_t o, const char *fmt, ...) {
  if (o >= size) return o;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + o, size - o, fmt, ap);
  va_end(ap);
  return n < 0 ? o : o + (size_t)n;
}

static size_t fmt_rec(const isa_syms_t *s, int64_t d, char *buf, size_t size, int depth) {
  size_t o = 0;
  if (!isa_dim_is_sym(d)) return put(buf, size, 0, "%lld", (long long)d);
  uint32_t id = isa_sym_id(d);
  if (depth > 8 || id >= s->exprs.len) return put(buf, size, 0, "?");
  const isa_symexpr_t *e = &s->exprs.items[id];
  /* highest degree first reads naturally: B*20+3 */
  for (uint32_t k = e->nterms; k-- > 0;) {
    const isa_symterm_t *t = &e->terms[k];
    int64_t c = t->coef;
    if (k + 1 != e->nterms) o = put(buf, size, o, c < 0 ? "-" : "+");
    else if (c < 0) o = put(buf, size, o, "-");
    uint64_t ac = c < 0 ? (uint64_t)0 - (uint64_t)c : (uint64_t)c;
    bool first = true;
    for (uint32_t j = 0; j < t->natoms; j++) {
      const isa_symatom_t *at = t->atoms[j] < s->atoms.len ? &s->atoms.items[t->atoms[j]] : NULL;
      if (!first) o = put(buf, size, o, "*");
      first = false;
      if (!at) o = put(buf, size, o, "?");
      else if (!at->is_div) o = put(buf, size, o, "%s", s->vars.items[at->var].name);
      else {
        bool wrap = t->natoms > 1 || ac != 1;
        o = put(buf, size, o, wrap ? "((" : "(");
        if (o < size) o += fmt_rec(s, at->num, buf + o, size - o, depth + 1);
        o = put(buf, size, o, wrap ? ")//%lld)" : ")//%lld", (long long)at->div);
      }
    }
    if (first) o = put(buf, size, o, "%llu", (unsigned long long)ac);
    else if (ac != 1) o = put(buf, size, o, "*%llu", (unsigned long long)ac);
  }
  return o;
}

static rill_status_t print_lowered(rill_buf_t *b, const isa_syms_t *s, int64_t d, int depth) {
  if (!isa_dim_is_sym(d)) return rill__buf_printf(b, "%lld", (long long)d);
  uint32_t id = isa_sym_id(d);
  if (depth > 64 || id >= s->exprs.len) return rill__status(RILL_MALFORMED, "size expression %u is unknown or too deep", id);
  const isa_symexpr_t *e = &s->exprs.items[id];
  if (e->nterms > 1) RILL_TRY(rill__buf_append(b, "add(", 4));
  for (uint32_t k = 0; k < e->nterms; k++) {
    const isa_symterm_t *t = &e->terms[k];
    uint32_t nf = t->natoms + (t->coef != 1 || t->natoms == 0);
    if (k) RILL_TRY(rill__buf_append(b, ", ", 2));
    if (nf > 1) RILL_TRY(rill__buf_append(b, "mul(", 4));
    bool first = true;
    if (t->coef != 1 || t->natoms == 0) {
      RILL_TRY(rill__buf_printf(b, "%lld", (long long)t->coef));
      first = false;
    }
    for (uint32_t j = 0; j < t->natoms; j++) {
      if (!first) RILL_TRY(rill__buf_append(b, ", ", 2));
      first = false;
      if (t->atoms[j] >= s->atoms.len) return rill__status(RILL_MALFORMED, "unknown atom %u", t->atoms[j]);
      const isa_symatom_t *at = &s->atoms.items[t->atoms[j]];
      if (!at->is_div) {
        if (at->var >= s->vars.len) return rill__status(RILL_MALFORMED, "unknown shape variable %u", at->var);
        RILL_TRY(rill__buf_printf(b, "%s", s->vars.items[at->var].name));
      } else {
        RILL_TRY(rill__buf_append(b, "floordiv(", 9));
        RILL_TRY(print_lowered(b, s, at->num, depth + 1));
        RILL_TRY(rill__buf_printf(b, ", %lld)", (long long)at->div));
      }
    }
    if (nf > 1) RILL_TRY(rill__buf_append(b, ")", 1));
  }
  if (e->nterms > 1) RILL_TRY(rill__buf_append(b, ")", 1));
  return NULL;
}

rill_status_t isa_sym_print_lowered(rill_buf_t *b, const isa_syms_t *s, int64_t d) { return print_lowered(b, s, d, 0); }

char *isa_sym_format(const isa_syms_t *s, int64_t d, char *buf, size_t size) {
  if (!size) return buf;
  buf[0] = 0;
  fmt_rec(s, d, buf, size, 0);
  buf[size - 1] = 0;
  return buf;
}

char *isa_sym_format_type(const isa_syms_t *s, const rill_type_t *t, char *buf, size_t size) {
  if (!size) return buf;
  size_t o = put(buf, size, 0, "%s[", rill_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && o < size; i++) {
    if (i) o = put(buf, size, o, ",");
    if (o < size) {
      if (s) isa_sym_format(s, t->dims[i], buf + o, size - o);
      else snprintf(buf + o, size - o, "%lld", (long long)t->dims[i]);
      o += strlen(buf + o);
    }
  }
  put(buf, size, o, "]");
  buf[size - 1] = 0;
  return buf;
}

bool isa_type_is_sym(const rill_type_t *t) {
  for (int i = 0; i < t->rank; i++)
    if (isa_dim_is_sym(t->dims[i])) return true;
  return false;
}

rill_status_t isa_sym_numel(isa_syms_t *s, const rill_type_t *t, int64_t *out) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) RILL_TRY(isa_sym_mul(s, n, t->dims[i], &n));
  *out = n;
  return NULL;
}

bool isa_sym_type_max_bytes(const isa_syms_t *s, const rill_type_t *t, size_t *out) {
  rill_type_t c = *t;
  for (int i = 0; i < t->rank; i++) {
    int64_t lo, hi;
    if (!isa_sym_bounds(s, t->dims[i], &lo, &hi) || hi > ((int64_t)1 << 48)) return false;
    c.dims[i] = hi < 0 ? 0 : hi;
  }
  return rill__type_sizes(&c, NULL, out);
}
