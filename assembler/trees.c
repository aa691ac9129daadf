/* trees.c: kernel choices per size in the assembler: the lowered form's
 * `choose $N = TREE` lines, and the trees of a profile that `rill tune
 * --shapes` wrote (its "shapes" object), checked entry by entry and matched
 * to op entries by their text as `rill dis` prints it.
 *
 * A profile's tree is a flat list of nodes, node 0 the root: a split
 * {"var": NAME, "le": N, "yes": I, "no": J} or a leaf {"use": K} (an index
 * into the entry's "candidates"). The module stores it in preorder with its
 * candidates in the order the leaves first name them (isa/tree.c), so the
 * same tree always makes the same bytes.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

/* ---- lowered form: TREE := "CANDIDATE" | (le VAR N TREE TREE) ---- */
typedef struct tbuild {
  RILL_VEC(rill_tree_node_t) nodes;
  RILL_VEC(const char *) cands;
} tbuild_t;

static rill_status_t cand_index(asm_ctx_t *c, tbuild_t *t, const char *s, uint32_t *out) {
  for (size_t i = 0; i < t->cands.len; i++)
    if (strcmp(t->cands.items[i], s) == 0) return *out = (uint32_t)i, NULL;
  *out = (uint32_t)t->cands.len;
  return RILL_VEC_PUSH(c->a, &t->cands, s);
}

static rill_status_t choose_node(asm_ctx_t *c, size_t *pos, tbuild_t *t, int depth) {
  const token_t *k = &c->toks[*pos];
  char b[64];
  size_t self = t->nodes.len;
  RILL_TRY(RILL_VEC_PUSH(c->a, &t->nodes, ((rill_tree_node_t){.var = -1})));
  if (k->kind == T_STRING) {
    if (!k->str[0]) return asm_error_at(c, k, "a candidate's name must not be empty");
    (*pos)++;
    return cand_index(c, t, k->str, &t->nodes.items[self].use);
  }
  if (k->kind != T_LPAREN) return asm_error_at(c, k, "expected a candidate such as \"default\" or (le VAR N YES NO), found %s", asm_tok_desc(k, b, sizeof b));
  if (depth >= RILL_TREE_MAX_DEPTH) return asm_error_at(c, k, "the tree is deeper than %d splits", RILL_TREE_MAX_DEPTH);
  (*pos)++;
  const token_t *le = &c->toks[*pos], *v = &c->toks[*pos + 1], *n = &c->toks[*pos + 2];
  if (le->kind != T_NAME || le->len != 2 || memcmp(le->text, "le", 2) != 0) return asm_error_at(c, le, "expected 'le' after '('");
  int32_t var = v->kind == T_NAME ? isa_syms_find_var(&c->syms, v->text, v->len) : -1;
  if (var < 0) return asm_error_at(c, v, "expected a shape variable, found %s", asm_tok_desc(v, b, sizeof b));
  if (n->kind != T_NUMBER || n->is_float || n->is_bool) return asm_error_at(c, n, "expected an integer threshold, found %s", asm_tok_desc(n, b, sizeof b));
  *pos += 3;
  t->nodes.items[self].var = var;
  t->nodes.items[self].le = n->i;
  t->nodes.items[self].yes = (uint32_t)self + 1;
  RILL_TRY(choose_node(c, pos, t, depth + 1));
  t->nodes.items[self].no = (uint32_t)t->nodes.len;
  RILL_TRY(choose_node(c, pos, t, depth + 1));
  if (c->toks[*pos].kind != T_RPAREN) return asm_error_at(c, &c->toks[*pos], "expected ')' to close the split, found %s", asm_tok_desc(&c->toks[*pos], b, sizeof b));
  (*pos)++;
  return NULL;
}

rill_status_t asm_parse_choose(asm_ctx_t *c, size_t *pos) {
  const token_t *kw = &c->toks[(*pos)++], *ref = &c->toks[*pos];
  char b[64];
  int64_t op = ref->kind == T_OPREF ? asm_tok_digits(ref) : -1;
  if (op < 0 || op >= (int64_t)c->ops.len) return asm_error_at(c, ref, "expected a declared op such as $0, found %s", asm_tok_desc(ref, b, sizeof b));
  if (c->trees.len && c->trees.items[c->trees.len - 1].op >= (uint32_t)op)
    return asm_error_at(c, ref, "choose lines must name ops in ascending order, once each");
  (*pos)++;
  if (c->toks[*pos].kind != T_EQ) return asm_error_at(c, &c->toks[*pos], "expected '=' after the op, found %s", asm_tok_desc(&c->toks[*pos], b, sizeof b));
  (*pos)++;
  tbuild_t t = {0};
  rill_status_t st = choose_node(c, pos, &t, 0);
  isa_tree_t tree = {.op = (uint32_t)op, .nnodes = (uint32_t)t.nodes.len, .ncands = (uint32_t)t.cands.len};
  if (!st) {
    tree.nodes = rill__arena_memdup(&c->arena, t.nodes.items, sizeof(rill_tree_node_t) * t.nodes.len);
    tree.cands = rill__arena_memdup(&c->arena, t.cands.items, sizeof(char *) * t.cands.len);
    if (!tree.nodes || !tree.cands) st = rill__oom();
  }
  const char *why = st ? NULL : isa_tree_check(&tree, (uint32_t)c->syms.vars.len);
  if (why) st = asm_error_at(c, kw, "choose $%lld: %s", (long long)op, why);
  if (!st) st = RILL_VEC_PUSH(c->a, &c->trees, tree);
  RILL_VEC_FREE(c->a, &t.nodes);
  RILL_VEC_FREE(c->a, &t.cands);
  return st;
}

/* ---- the profile's trees ---- */
typedef struct pctx {
  asm_ctx_t *c;
  isa_module_t *m;           /* the module read back: its variables and op text */
  const char *path;
  int entry;                 /* 1-based, for messages */
  const char *op;
  const cJSON *nodes, *cands;
  uint8_t *seen;
  uint32_t *cmap;            /* profile candidate -> module candidate, or UINT32_MAX */
  tbuild_t t;
} pctx_t;

static rill_status_t bad(const pctx_t *p, const char *fmt, ...) RILL_PRINTF(2, 3);
static rill_status_t bad(const pctx_t *p, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p->entry) return rill__status(RILL_INVALID_ARGUMENT, "profile %s: shapes.ops entry %d (%.200s): %s", p->path, p->entry, p->op ? p->op : "?", msg);
  return rill__status(RILL_INVALID_ARGUMENT, "profile %s: shapes: %s", p->path, msg);
}

static bool json_int(const cJSON *j, int64_t lo, int64_t hi, int64_t *out) {
  if (!cJSON_IsNumber(j)) return false;
  double d = j->valuedouble;
  if (!(d >= (double)lo && d <= (double)hi) || d != (double)(int64_t)d) return false;
  *out = (int64_t)d;
  return true;
}

static rill_status_t pnode(pctx_t *p, int64_t i, int depth) {
  int n = cJSON_GetArraySize(p->nodes);
  if (i < 0 || i >= n) return bad(p, "tree node %lld does not exist (the tree has %d)", (long long)i, n);
  if (p->seen[i]) return bad(p, "tree node %lld is reached twice (a cycle or a shared node)", (long long)i);
  p->seen[i] = 1;
  const cJSON *x = cJSON_GetArrayItem(p->nodes, (int)i);
  const cJSON *use = cJSON_GetObjectItemCaseSensitive(x, "use"), *var = cJSON_GetObjectItemCaseSensitive(x, "var"),
              *le = cJSON_GetObjectItemCaseSensitive(x, "le"), *yes = cJSON_GetObjectItemCaseSensitive(x, "yes"),
              *no = cJSON_GetObjectItemCaseSensitive(x, "no");
  size_t self = p->t.nodes.len;
  RILL_TRY(RILL_VEC_PUSH(p->c->a, &p->t.nodes, ((rill_tree_node_t){.var = -1})));
  int64_t k, y, z, thr;
  if (!cJSON_IsObject(x)) return bad(p, "tree node %lld is not an object", (long long)i);
  if (use) {
    int nc = cJSON_GetArraySize(p->cands);
    if (var || le || yes || no) return bad(p, "tree node %lld has \"use\" and a split's fields", (long long)i);
    if (!json_int(use, INT32_MIN, INT32_MAX, &k) || k < 0 || k >= nc)
      return bad(p, "tree node %lld uses candidate %s, but the entry has %d (\"candidates\")", (long long)i, cJSON_IsNumber(use) ? "out of range" : "that is not an index", nc);
    if (p->cmap[k] == UINT32_MAX) {
      p->cmap[k] = (uint32_t)p->t.cands.len;
      RILL_TRY(RILL_VEC_PUSH(p->c->a, &p->t.cands, cJSON_GetArrayItem(p->cands, (int)k)->valuestring));
    }
    p->t.nodes.items[self].use = p->cmap[k];
    return NULL;
  }
  if (!cJSON_IsString(var) || !json_int(le, INT64_MIN / 2, INT64_MAX / 2, &thr) || !json_int(yes, 0, INT32_MAX, &y) || !json_int(no, 0, INT32_MAX, &z))
    return bad(p, "tree node %lld needs \"use\" (a candidate's index), or \"var\" (a shape variable's name), \"le\" (an integer), \"yes\" and \"no\" (node indices)", (long long)i);
  int32_t v = isa_syms_find_var(&p->m->syms, var->valuestring, strlen(var->valuestring));
  if (v < 0) return bad(p, "tree node %lld splits on \"%.64s\", which is not a shape variable of the module", (long long)i, var->valuestring);
  if (depth >= RILL_TREE_MAX_DEPTH) return bad(p, "the tree is deeper than %d splits (at node %lld)", RILL_TREE_MAX_DEPTH, (long long)i);
  p->t.nodes.items[self].var = v;
  p->t.nodes.items[self].le = thr;
  p->t.nodes.items[self].yes = (uint32_t)self + 1;
  RILL_TRY(pnode(p, y, depth + 1));
  p->t.nodes.items[self].no = (uint32_t)p->t.nodes.len;
  return pnode(p, z, depth + 1);
}

/* Checks one "shapes.ops" entry; on success *out holds its tree (in m's arena). */
static rill_status_t pentry(pctx_t *p, const cJSON *e, int nsamples, isa_tree_t *out) {
  const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op"), *us = cJSON_GetObjectItemCaseSensitive(e, "us");
  p->op = cJSON_IsString(op) ? op->valuestring : NULL;
  p->cands = cJSON_GetObjectItemCaseSensitive(e, "candidates");
  p->nodes = cJSON_GetObjectItemCaseSensitive(e, "tree");
  if (!p->op) return bad(p, "needs \"op\" (the op entry's text)");
  int nc = cJSON_GetArraySize(p->cands), nn = cJSON_GetArraySize(p->nodes);
  if (!cJSON_IsArray(p->cands) || nc < 1) return bad(p, "needs \"candidates\" (a list of names)");
  for (int i = 0; i < nc; i++) {
    const cJSON *s = cJSON_GetArrayItem(p->cands, i);
    if (!cJSON_IsString(s) || !s->valuestring[0]) return bad(p, "candidate %d is not a name", i);
    for (int j = 0; j < i; j++)
      if (strcmp(s->valuestring, cJSON_GetArrayItem(p->cands, j)->valuestring) == 0) return bad(p, "candidate \"%.64s\" is named twice", s->valuestring);
  }
  if (!cJSON_IsArray(us) || cJSON_GetArraySize(us) != nsamples) return bad(p, "needs \"us\" (a row of times per sample, %d rows)", nsamples);
  for (int s = 0; s < nsamples; s++) {
    const cJSON *row = cJSON_GetArrayItem(us, s), *x;
    if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != nc) return bad(p, "\"us\" row %d needs a time (or null) for each of the %d candidates", s, nc);
    cJSON_ArrayForEach(x, row) if (!cJSON_IsNull(x) && !(cJSON_IsNumber(x) && x->valuedouble >= 0))
      return bad(p, "\"us\" row %d holds something other than a non-negative time or null", s);
  }
  if (!cJSON_IsArray(p->nodes) || nn < 1) return bad(p, "needs \"tree\" (a list of nodes, node 0 the root)");
  rill_status_t st = NULL;
  p->seen = calloc((size_t)nn, 1);
  p->cmap = malloc(sizeof(uint32_t) * (size_t)nc);
  memset(&p->t, 0, sizeof p->t);
  if (!p->seen || !p->cmap) st = rill__oom();
  for (int i = 0; !st && i < nc; i++) p->cmap[i] = UINT32_MAX;
  if (!st) st = pnode(p, 0, 0);
  for (int i = 0; !st && i < nn; i++)
    if (!p->seen[i]) st = bad(p, "tree node %d is not reached from node 0", i);
  if (!st) {
    out->nnodes = (uint32_t)p->t.nodes.len;
    out->ncands = (uint32_t)p->t.cands.len;
    out->nodes = rill__arena_memdup(&p->m->arena, p->t.nodes.items, sizeof(rill_tree_node_t) * p->t.nodes.len);
    out->cands = rill__arena_alloc(&p->m->arena, sizeof(char *) * p->t.cands.len);
    if (!out->nodes || !out->cands) st = rill__oom();
    for (size_t i = 0; !st && i < p->t.cands.len; i++)
      if (!(out->cands[i] = rill__arena_strndup(&p->m->arena, p->t.cands.items[i], strlen(p->t.cands.items[i])))) st = rill__oom();
  }
  const char *why = st ? NULL : isa_tree_check(out, (uint32_t)p->m->syms.vars.len);
  if (why) st = bad(p, "%s", why);
  free(p->seen);
  free(p->cmap);
  RILL_VEC_FREE(p->c->a, &p->t.nodes);
  RILL_VEC_FREE(p->c->a, &p->t.cands);
  return st;
}

static rill_status_t profile_trees(asm_ctx_t *c, const cJSON *shapes, const char *path, isa_module_t *m) {
  pctx_t p = {.c = c, .m = m, .path = path};
  const cJSON *vars = cJSON_GetObjectItemCaseSensitive(shapes, "vars"), *samples = cJSON_GetObjectItemCaseSensitive(shapes, "samples"),
              *ops = cJSON_GetObjectItemCaseSensitive(shapes, "ops"), *x;
  if (!cJSON_IsObject(shapes) || !cJSON_IsArray(vars) || !cJSON_IsArray(samples) || !cJSON_IsArray(ops))
    return bad(&p, "needs \"vars\", \"samples\" and \"ops\" lists");
  int nv = cJSON_GetArraySize(vars), ns = cJSON_GetArraySize(samples);
  cJSON_ArrayForEach(x, vars) {
    if (!cJSON_IsString(x)) return bad(&p, "\"vars\" holds something other than a name");
    if (isa_syms_find_var(&m->syms, x->valuestring, strlen(x->valuestring)) < 0)
      return bad(&p, "\"vars\" names \"%.64s\", which is not a shape variable of the module", x->valuestring);
  }
  int s = 0;
  cJSON_ArrayForEach(x, samples) {
    const cJSON *v;
    int64_t k;
    if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != nv) return bad(&p, "sample %d needs a size for each of the %d \"vars\"", s, nv);
    cJSON_ArrayForEach(v, x) if (!json_int(v, 0, INT64_MAX / 2, &k)) return bad(&p, "sample %d holds something other than a size", s);
    s++;
  }
  /* Every entry is checked; those whose text is an op entry's give its tree. */
  int n = cJSON_GetArraySize(ops);
  isa_tree_t *byop = rill__arena_alloc(&m->arena, sizeof(isa_tree_t) * (m->nops ? m->nops : 1));
  char **text = calloc(m->nops ? m->nops : 1, sizeof(char *));
  rill_status_t st = byop && text ? NULL : rill__oom();
  for (uint32_t i = 0; !st && i < m->nops; i++) {
    rill_buf_t b;
    rill__buf_init(&b, c->a);
    st = isa_print_opdecl_at(&b, m, &m->ops[i], NULL);
    if (!st) st = rill__buf_append(&b, "", 1);
    if (!st) text[i] = (char *)b.data;
    else rill__buf_free(&b);
    byop[i].nnodes = 0;
  }
  for (int e = 0; !st && e < n; e++) {
    p.entry = e + 1;
    isa_tree_t t = {0};
    st = pentry(&p, cJSON_GetArrayItem(ops, e), ns, &t);
    for (uint32_t i = 0; !st && i < m->nops; i++)
      if (strcmp(text[i], p.op) == 0) {
        if (byop[i].nnodes) st = bad(&p, "a second tree for op entry $%u", i);
        t.op = i;
        byop[i] = t;
      }
  }
  /* The profile's trees, and lowered `choose` lines for other entries. */
  uint32_t nt = 0;
  for (uint32_t i = 0; !st && i < m->nops; i++) {
    bool have = byop[i].nnodes > 0;
    for (uint32_t k = 0; !have && k < m->ntrees; k++)
      if (m->trees[k].op == i) byop[i] = m->trees[k], have = true;
    if (have) byop[nt++] = byop[i];
  }
  if (!st) {
    m->ntrees = nt;
    m->trees = byop;
  }
  for (uint32_t i = 0; i < m->nops && text; i++) free(text[i]);
  free(text);
  return st;
}

rill_status_t asm_profile_trees(asm_ctx_t *c, uint8_t **bytes, size_t *size) {
  const char *path = c->opts && c->opts->profile ? c->opts->profile : NULL;
  if (!path) return NULL;
  uint8_t *pb;
  size_t pn;
  RILL_TRY(rill__status_prefix(rill__read_file(c->a, path, &pb, &pn), "profile: "));
  cJSON *root = cJSON_ParseWithLength((const char *)pb, pn);
  const char *at = root ? NULL : cJSON_GetErrorPtr();
  long off = at && at >= (const char *)pb && at <= (const char *)pb + pn ? (long)(at - (const char *)pb) : 0;
  rill__free(c->a, pb);
  if (!root) return rill__status(RILL_INVALID_ARGUMENT, "profile %s: not JSON (near byte %ld)", path, off);
  const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(root, "shapes");
  rill_status_t st = NULL;
  if (shapes) {
    isa_module_t *m = NULL;
    uint8_t *out = NULL;
    size_t out_size = 0;
    st = isa_read(c->a, *bytes, *size, &m);
    if (!st) st = profile_trees(c, shapes, path, m);
    if (!st) st = isa_verify(m, &ops_resolver);
    if (!st) st = isa_write(m, c->a, &out, &out_size);
    if (!st) {
      rill__free(c->a, *bytes);
      *bytes = out;
      *size = out_size;
    }
    isa_module_free(m);
  }
  cJSON_Delete(root);
  return st;
}
