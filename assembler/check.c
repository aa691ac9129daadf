/* check.c: a surface function body to IR, checked.
 *
 * Each line is one statement. Names resolve to the function's own values
 * first, then to module constants; a name defined later in the body is a
 * use before definition. Op results come from the registry's inference;
 * calls, if and while are checked against their functions' signatures.
 * In a body with stream statements, every use of a value on a stream other
 * than its producer's must be ordered by an add_event/wait_event pair, and
 * a value is used only on its own device (its producer's stream's; device 0
 * for parameters, every device for constants) unless `copy(%x) {device=D}`,
 * issued on a stream of device D, moves it there.
 *
 * States: a state's name reads its current version (asm.h, V_STATE);
 * `update(%s, %x, %pos)` makes the next one, and so does a call, if or
 * while (a function may update any state). A view of a state made before
 * an update and used after it, a state passed to a function or returned,
 * and an update of anything but a state are errors. In a hand-scheduled
 * body an update must also follow, by events, every earlier read of the
 * state on other streams and its last write.
 */
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

typedef RILL_VEC(const token_t *) tokptrs_t;

typedef struct stmt {
  const token_t *first, *head;
  tokptrs_t res, args;
  isa_attr_t *attrs;
  uint32_t nattrs;
} stmt_t;

typedef struct bctx {
  asm_ctx_t *c;
  ir_func_t *f;
  const func_decl_t *fd;
  rill_map_t names;      /* value name -> value id */
  rill_map_t later;      /* every name the body defines -> line */
  /* stream check (hand-scheduled bodies) */
  RILL_VEC(uint64_t) safe;
  RILL_VEC(uint64_t) evcov;
  RILL_VEC(int32_t) def_stream;
  RILL_VEC(int32_t) def_dev;   /* -1: on every device (a constant) */
  int cur, curdev;
  /* the exchange being read (consecutive sends and recvs: one sendrecv node at the last) */
  int p2p_part, p2p_parts;
  uint32_t p2p_nsend, p2p_nrecv;
  uint32_t p2p_args[OPS_P2P_GROUP_MAX];
  rill_type_t p2p_in[OPS_P2P_GROUP_MAX], p2p_out[OPS_P2P_GROUP_MAX];
  const token_t *p2p_res[OPS_P2P_GROUP_MAX];
  int64_t p2p_to[2][OPS_P2P_GROUP_MAX], p2p_from[2][OPS_P2P_GROUP_MAX]; /* peer or shift; relative */
  uint32_t sdev_line[ISA_MAX_STREAMS]; /* where each stream was first used (0: not yet) */
  int8_t dev_stream[ISA_MAX_DEVICES];  /* 1 + the stream each device was last given by set_stream (0: none yet) */
  /* states: per module state its current version here (-1: not read yet),
   * its writes so far (the epoch) and the line of the last */
  int32_t *st_cur;
  uint32_t *st_epoch, *st_line;
  RILL_VEC(int32_t) vstate;    /* per value: the state it is or views, or -1 */
  RILL_VEC(uint32_t) vepoch;   /* per value: that state's epoch when it was made */
  /* hand-scheduled bodies: per state and stream t, the streams ordered
   * after its last read on t (rd_any: the streams that read it since its last write) */
  uint64_t *rd_safe, *rd_evcov, *rd_any;
  uint32_t *rd_line;
} bctx_t;

static bool is_word(const token_t *t, const char *w) {
  return t->kind == T_NAME && strlen(w) == t->len && memcmp(t->text, w, t->len) == 0;
}

static rill_status_t add_value(bctx_t *b, ir_value_t v, uint32_t *out) {
  ir_func_t *f = b->f;
  v.slot = -1;
  v.reg = -1;
  *out = (uint32_t)f->values.len;
  RILL_TRY(RILL_VEC_PUSH(b->c->a, &f->values, v));
  RILL_TRY(RILL_VEC_PUSH(b->c->a, &b->safe, v.kind == V_RESULT ? 1ull << b->cur : ~0ull));
  RILL_TRY(RILL_VEC_PUSH(b->c->a, &b->evcov, 0));
  RILL_TRY(RILL_VEC_PUSH(b->c->a, &b->def_dev, v.kind == V_RESULT ? b->curdev : v.kind == V_PARAM ? 0 : -1));
  RILL_TRY(RILL_VEC_PUSH(b->c->a, &b->vstate, -1));
  RILL_TRY(RILL_VEC_PUSH(b->c->a, &b->vepoch, 0));
  return RILL_VEC_PUSH(b->c->a, &b->def_stream, v.kind == V_RESULT ? b->cur : -1);
}

/* A new version of state si, made on the current stream by node `def` (-1: the first, as the function finds it, ordered on stream 0). */
static rill_status_t state_version(bctx_t *b, uint32_t si, int32_t def, uint32_t *out) {
  const isa_state_t *x = &b->c->states.items[si];
  ir_value_t v = {.name = x->name, .type = x->type, .kind = V_STATE, .konst = si, .prev = b->st_cur[si], .def = def};
  RILL_TRY(add_value(b, v, out));
  b->safe.items[*out] = def < 0 ? ~0ull : 1ull << b->cur; /* (as a parameter: the fork orders it on every stream) */
  b->def_stream.items[*out] = def < 0 ? 0 : b->cur;
  b->def_dev.items[*out] = 0;
  b->vstate.items[*out] = (int32_t)si;
  b->vepoch.items[*out] = b->st_epoch[si];
  b->st_cur[si] = (int32_t)*out;
  return NULL;
}

static rill_status_t state_value(bctx_t *b, uint32_t si, uint32_t *out) {
  if (b->st_cur[si] < 0) return state_version(b, si, -1, out);
  *out = (uint32_t)b->st_cur[si];
  return NULL;
}

/* A read of value v (at t): a view of a state made before its last update is
 * refused; in a hand-scheduled body the read is recorded on the current stream. */
static rill_status_t state_read(bctx_t *b, const token_t *t, uint32_t v) {
  int32_t si = b->vstate.items[v];
  if (si < 0) return NULL;
  const ir_value_t *x = &b->f->values.items[v];
  const char *sname = b->c->states.items[si].name;
  if (x->kind != V_STATE && b->vepoch.items[v] != b->st_epoch[si])
    return asm_error_at(b->c, t, "%%%s is a view of state %%%s as it was before the update on line %u: use it before the update, or copy it (copy(%%%s)) before",
                        x->name, sname, b->st_line[si], sname);
  if (!b->rd_safe) return NULL;
  size_t k = (size_t)si * ISA_MAX_STREAMS + (size_t)b->cur;
  b->rd_any[si] |= 1ull << b->cur;
  b->rd_safe[k] = 1ull << b->cur;
  b->rd_evcov[k] = 0;
  b->rd_line[k] = t->line;
  return NULL;
}

/* A write of state si on the current stream (at t, by `what`): in a
 * hand-scheduled body it must follow its last write and every read since
 * on other streams. */
static rill_status_t state_write_check(bctx_t *b, const token_t *t, uint32_t si, const char *what) {
  if (!b->rd_safe) return NULL;
  const char *sname = b->c->states.items[si].name;
  int32_t cv = b->st_cur[si];
  if (cv >= 0 && !(b->safe.items[cv] & (1ull << b->cur)))
    return asm_error_at(b->c, t, "state %%%s is written on stream %d and %s on stream %d without an event: add_event on stream %d after the write and wait_event on stream %d before this",
                        sname, b->def_stream.items[cv], what, b->cur, b->def_stream.items[cv], b->cur);
  for (int s = 0; s < ISA_MAX_STREAMS; s++) {
    size_t k = (size_t)si * ISA_MAX_STREAMS + (size_t)s;
    if (s == b->cur || !(b->rd_any[si] & (1ull << s)) || (b->rd_safe[k] & (1ull << b->cur))) continue;
    return asm_error_at(b->c, t, "state %%%s is read on stream %d (line %u) and %s on stream %d without an event: add_event on stream %d after the read and wait_event on stream %d before this",
                        sname, s, b->rd_line[k], what, b->cur, s, b->cur);
  }
  return NULL;
}

/* Node `node` (at t) wrote state si: the next version, later reads see it. */
static rill_status_t state_written(bctx_t *b, const token_t *t, uint32_t si, uint32_t node) {
  uint32_t v;
  RILL_TRY(state_version(b, si, (int32_t)node, &v));
  b->st_epoch[si]++;
  b->st_line[si] = t->line;
  if (b->rd_any) b->rd_any[si] = 0;
  return NULL;
}

/* A call, if or while (node `node`, at t) may update every state. */
static rill_status_t states_written_by_call(bctx_t *b, const token_t *t, uint32_t node) {
  for (uint32_t si = 0; si < b->c->states.len; si++) RILL_TRY(state_write_check(b, t, si, "may be updated by this call"));
  for (uint32_t si = 0; si < b->c->states.len; si++) RILL_TRY(state_written(b, t, si, node));
  return NULL;
}

static rill_status_t const_value(bctx_t *b, uint32_t k, uint32_t *out) {
  asm_ctx_t *c = b->c;
  const char *name = c->consts.items[k].name;
  if (rill__map_get(&b->names, name, strlen(name), out)) return NULL;
  ir_value_t v = {.name = name, .type = c->consts.items[k].type, .kind = V_CONST, .konst = k, .def = -1};
  RILL_TRY(add_value(b, v, out));
  return rill__map_put(&b->names, name, strlen(name), *out);
}

static rill_status_t lookup(bctx_t *b, const token_t *t, uint32_t *out) {
  asm_ctx_t *c = b->c;
  if (rill__map_get(&b->names, t->text, t->len, out)) return NULL;
  uint32_t line;
  if (rill__map_get(&b->later, t->text, t->len, &line))
    return asm_error_at(c, t, "%%%.*s is used before its definition on line %u", (int)t->len, t->text, line);
  int32_t si = asm_find_state(c, t->text, t->len);
  if (si >= 0) return state_value(b, (uint32_t)si, out);
  int32_t k = asm_find_const(c, t->text, t->len);
  if (k >= 0) return const_value(b, (uint32_t)k, out);
  return asm_error_at(c, t, "unknown value %%%.*s", (int)t->len, t->text);
}

rill_status_t asm_literal_const(asm_ctx_t *c, rill_dtype_t d, const uint8_t value[8], uint32_t *out) {
  /* The key is the dtype then the value's bytes. */
  uint8_t bytes[9];
  bytes[0] = (uint8_t)d;
  memcpy(bytes + 1, value, 8);
  size_t klen = 1 + rill_dtype_size(d);
  if (rill__map_get(&c->lit_map, bytes, klen, out)) return NULL;
  char name[32];
  do snprintf(name, sizeof name, "lit%u", c->nlits++);
  while (asm_find_const(c, name, strlen(name)) >= 0);
  isa_const_t kc;
  memset(&kc, 0, sizeof kc);
  kc.name = rill__arena_strndup(&c->arena, name, strlen(name));
  uint8_t *key = rill__arena_memdup(&c->arena, bytes, klen);
  uint8_t *data = rill__arena_memdup(&c->arena, value, 8);
  if (!kc.name || !key || !data) return rill__oom();
  kc.type = (rill_type_t){d, 0, {0}};
  kc.origin = ISA_CONST_LITERAL;
  kc.data = data;
  kc.size = rill_dtype_size(d);
  isa_const_set_sum(&kc, kc.data);
  uint32_t k = (uint32_t)c->consts.len;
  RILL_TRY(RILL_VEC_PUSH(c->a, &c->consts, kc));
  RILL_TRY(rill__map_put(&c->const_map, kc.name, strlen(kc.name), k));
  RILL_TRY(rill__map_put(&c->lit_map, key, klen, k));
  *out = k;
  return NULL;
}

/* A scalar literal operand becomes a constant of the given dtype. */
static rill_status_t literal_value(bctx_t *b, const token_t *t, rill_dtype_t d, uint32_t *out) {
  asm_ctx_t *c = b->c;
  /* The key is the dtype then the value's bytes; the value is built aligned. */
  union { int64_t i; double f; uint8_t b[8]; } val = {0};
  if (t->is_bool && d != RILL_BOOL)
    return asm_error_at(c, t, "literal %.*s does not fit the other operand's dtype %s", (int)t->len, t->text, rill_dtype_name(d));
  if (d == RILL_BOOL) {
    if (!t->is_bool && (t->is_float || (t->i != 0 && t->i != 1)))
      return asm_error_at(c, t, "literal %.*s is not a bool (the other operand is bool)", (int)t->len, t->text);
    val.b[0] = t->i != 0;
  } else if (rill__is_float(d)) {
    rill__store_f(val.b, d, 0, t->is_float ? t->f : (double)t->i);
  } else {
    if (t->is_float) return asm_error_at(c, t, "literal %.*s is not an integer (the other operand is %s)", (int)t->len, t->text, rill_dtype_name(d));
    if (!asm_int_fits(t, d)) return asm_error_at(c, t, "literal %.*s is out of range for %s", (int)t->len, t->text, rill_dtype_name(d));
    rill__store_i(val.b, d, 0, t->is_big ? (int64_t)t->u : t->i);
  }
  uint32_t k;
  RILL_TRY(asm_literal_const(c, d, val.b, &k));
  return const_value(b, k, out);
}

/* ---- statement parsing ---- */
/* names: bare names are operands too (bind_dims' shape variables). */
static rill_status_t parse_args(asm_ctx_t *c, size_t *pos, tokptrs_t *args, bool names) {
  char buf[64];
  if (c->toks[*pos].kind != T_LPAREN)
    return asm_error_at(c, &c->toks[*pos], "expected '(' and the operands, found %s", asm_tok_desc(&c->toks[*pos], buf, sizeof buf));
  (*pos)++;
  while (c->toks[*pos].kind != T_RPAREN) {
    const token_t *t = &c->toks[*pos];
    if (t->kind == T_NAME && t[1].kind == T_EQ) { /* NAME=VALUE (set_stream's device=D): both tokens */
      RILL_TRY(RILL_VEC_PUSH(c->a, args, t));
      *pos += 2;
      t = &c->toks[*pos];
      if (t->kind != T_NUMBER) return asm_error_at(c, t, "expected a number after '%.*s=', found %s", (int)t[-2].len, t[-2].text, asm_tok_desc(t, buf, sizeof buf));
    } else if (t->kind != T_VALUE && t->kind != T_NUMBER && t->kind != T_FUNC && !(names && t->kind == T_NAME))
      return asm_error_at(c, t, "expected an operand (%%value or number), found %s", asm_tok_desc(t, buf, sizeof buf));
    RILL_TRY(RILL_VEC_PUSH(c->a, args, t));
    (*pos)++;
    if (c->toks[*pos].kind == T_COMMA) (*pos)++;
    else if (c->toks[*pos].kind != T_RPAREN)
      return asm_error_at(c, &c->toks[*pos], "expected ',' or ')' after the operand, found %s", asm_tok_desc(&c->toks[*pos], buf, sizeof buf));
  }
  (*pos)++;
  return NULL;
}

static rill_status_t parse_stmt(asm_ctx_t *c, size_t *pos, stmt_t *s) {
  char buf[64];
  s->first = &c->toks[*pos];
  if (c->toks[*pos].kind == T_VALUE) {
    for (;;) {
      const token_t *t = &c->toks[*pos];
      if (t->kind != T_VALUE) return asm_error_at(c, t, "expected a result name, found %s", asm_tok_desc(t, buf, sizeof buf));
      RILL_TRY(RILL_VEC_PUSH(c->a, &s->res, t));
      (*pos)++;
      if (c->toks[*pos].kind == T_COMMA) { (*pos)++; continue; }
      if (c->toks[*pos].kind != T_EQ)
        return asm_error_at(c, &c->toks[*pos], "expected '=' after the result names, found %s", asm_tok_desc(&c->toks[*pos], buf, sizeof buf));
      (*pos)++;
      break;
    }
  }
  s->head = &c->toks[*pos];
  if (s->head->kind != T_NAME)
    return asm_error_at(c, s->head, "expected an op, call, if, while or return, found %s", asm_tok_desc(s->head, buf, sizeof buf));
  (*pos)++;
  if (is_word(s->head, "return") && !s->res.len) {
    bool paren = c->toks[*pos].kind == T_LPAREN;
    if (paren) return parse_args(c, pos, &s->args, false);
    while (c->toks[*pos].kind != T_NEWLINE) {
      RILL_TRY(RILL_VEC_PUSH(c->a, &s->args, &c->toks[*pos]));
      (*pos)++;
      if (c->toks[*pos].kind == T_COMMA) (*pos)++;
      else if (c->toks[*pos].kind != T_NEWLINE)
        return asm_error_at(c, &c->toks[*pos], "expected ',' or the end of the line, found %s", asm_tok_desc(&c->toks[*pos], buf, sizeof buf));
    }
    return NULL;
  }
  if (is_word(s->head, "call")) {
    const token_t *fn = &c->toks[*pos];
    if (fn->kind != T_FUNC) return asm_error_at(c, fn, "expected a function such as @f after call, found %s", asm_tok_desc(fn, buf, sizeof buf));
    RILL_TRY(RILL_VEC_PUSH(c->a, &s->args, fn));
    (*pos)++;
  }
  RILL_TRY(parse_args(c, pos, &s->args, is_word(s->head, "bind_dims")));
  if (c->toks[*pos].kind == T_LBRACE) RILL_TRY(asm_parse_attrs(c, pos, &s->attrs, &s->nattrs));
  return NULL;
}

/* ---- checks ---- */
/* Types for messages, symbolic sizes by name (the syms of the assembler being run). */
static _Thread_local const isa_syms_t *tfmt_syms;
#define tfmt(t, b) isa_sym_format_type(tfmt_syms, (t), (b), 96)

/* from_device: the use is a copy to the current device of a value on that device. */
static rill_status_t use_from(bctx_t *b, const token_t *t, uint32_t v, int from_device) {
  RILL_TRY(state_read(b, t, v));
  if (!b->f->hand_scheduled) return NULL;
  int dev = b->def_dev.items[v], want = from_device >= 0 ? from_device : b->curdev;
  const char *name = b->f->values.items[v].name;
  if (dev >= 0 && dev != want) {
    if (from_device >= 0)
      return asm_error_at(b->c, t, "%%%s lives on device %d, not device %d: copy(%%%s) copies from the device its operand lives on", name, dev, from_device, name);
    if (b->def_stream.items[v] < 0)
      return asm_error_at(b->c, t, "%%%s lives on device %d (a parameter) and is used on device %d (stream %d) without a copy: %%y = copy(%%%s) {device=%d} on a stream of device %d, then use %%y",
                          name, dev, want, b->cur, name, want, want);
    return asm_error_at(b->c, t, "%%%s lives on device %d (made on stream %d) and is used on device %d (stream %d) without a copy: %%y = copy(%%%s) {device=%d} on a stream of device %d, ordered after it by an event, then use %%y",
                        name, dev, b->def_stream.items[v], want, b->cur, name, want, want);
  }
  if (b->safe.items[v] & (1ull << b->cur)) return NULL;
  if (from_device >= 0 && from_device != b->curdev)
    return asm_error_at(b->c, t, "%%%s is produced on stream %d (device %d) and copied to device %d on stream %d without an event: add_event on stream %d after it and wait_event on stream %d before this copy",
                        name, b->def_stream.items[v], from_device, b->curdev, b->cur, b->def_stream.items[v], b->cur);
  return asm_error_at(b->c, t, "%%%s is produced on stream %d and used on stream %d without an event: add_event on stream %d after it and wait_event on stream %d before this use",
                      b->f->values.items[v].name, b->def_stream.items[v], b->cur, b->def_stream.items[v], b->cur);
}
static rill_status_t use(bctx_t *b, const token_t *t, uint32_t v) { return use_from(b, t, v, -1); }

static rill_status_t value_arg(bctx_t *b, const token_t *t, uint32_t *out) {
  char buf[64];
  if (t->kind != T_VALUE) return asm_error_at(b->c, t, "expected a %%value here, found %s", asm_tok_desc(t, buf, sizeof buf));
  RILL_TRY(lookup(b, t, out));
  return use(b, t, *out);
}

static rill_status_t define_results(bctx_t *b, const stmt_t *s, const rill_type_t *types, uint32_t n,
                                    uint32_t node, uint32_t **out) {
  asm_ctx_t *c = b->c;
  *out = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n ? n : 1));
  if (!*out) return rill__oom();
  for (uint32_t i = 0; i < n; i++) {
    const token_t *t = s->res.items[i];
    uint32_t prev;
    if (asm_find_state(c, t->text, t->len) >= 0)
      return asm_error_at(c, t, "%%%.*s is a state: it changes only by update(%%%.*s, ...); give this value another name", (int)t->len, t->text,
                          (int)t->len, t->text);
    if (rill__map_get(&b->names, t->text, t->len, &prev)) {
      const ir_value_t *pv = &b->f->values.items[prev];
      return asm_error_at(c, t, "%%%.*s is defined twice (first on line %u)", (int)t->len, t->text, pv->line);
    }
    ir_value_t v = {.type = types[i], .kind = V_RESULT, .line = t->line, .col = t->col, .def = (int32_t)node};
    if (!(v.name = rill__arena_strndup(&c->arena, t->text, t->len))) return rill__oom();
    RILL_TRY(add_value(b, v, &(*out)[i]));
    RILL_TRY(rill__map_put(&b->names, v.name, t->len, (*out)[i]));
  }
  return NULL;
}

static rill_status_t check_count(bctx_t *b, const stmt_t *s, uint32_t want, const char *what) {
  if (s->res.len != want)
    return asm_error_at(b->c, s->first, "%s gives %u result%s, %zu name%s given", what, want, want == 1 ? "" : "s",
                        s->res.len, s->res.len == 1 ? "" : "s");
  return NULL;
}

static rill_status_t func_arg(bctx_t *b, const token_t *t, const func_decl_t **out, uint32_t *idx) {
  char buf[64];
  if (t->kind != T_FUNC) return asm_error_at(b->c, t, "expected a function such as @f, found %s", asm_tok_desc(t, buf, sizeof buf));
  int32_t k = asm_find_func(b->c, t->text, t->len);
  if (k < 0) return asm_error_at(b->c, t, "unknown function @%.*s", (int)t->len, t->text);
  *out = &b->c->funcs.items[k];
  *idx = (uint32_t)k;
  return NULL;
}

/* Checks that argument values match a function's parameter types. */
static rill_status_t check_params(bctx_t *b, const token_t *at, const func_decl_t *g, const uint32_t *args,
                                  uint32_t n, const char *role) {
  char b1[96], b2[96];
  if (n != g->nparams)
    return asm_error_at(b->c, at, "%s @%s takes %u argument%s, %u given", role, g->name, g->nparams, g->nparams == 1 ? "" : "s", n);
  for (uint32_t i = 0; i < n; i++) {
    const rill_type_t *t = &b->f->values.items[args[i]].type;
    if (!rill__type_eq(t, &g->param_types[i]))
      return asm_error_at(b->c, at, "%s @%s argument %u (%%%s): expected %s, found %s", role, g->name, i + 1,
                          g->param_names[i], tfmt(&g->param_types[i], b1), tfmt(t, b2));
  }
  return NULL;
}

static rill_status_t push_node(bctx_t *b, ir_node_t n) {
  n.stream = b->cur;
  if (b->curdev && (n.kind == N_CALL || n.kind == N_IF || n.kind == N_WHILE || n.kind == N_BIND))
    return asm_error(b->c, n.line, n.col, "calls, if and while are issued on device 0's streams (and bind_dims); stream %d is on device %d", b->cur, b->curdev);
  return RILL_VEC_PUSH(b->c->a, &b->f->nodes, n);
}

static rill_status_t int_arg(bctx_t *b, const token_t *t, int64_t lo, int64_t hi, const char *what, int *out);

/* copy(%x) {device=D}: checks D (the current stream's device) and takes the
 * attribute out of the statement; *from_device becomes nonzero. */
static rill_status_t device_copy(bctx_t *b, stmt_t *s, int *from_device) {
  for (uint32_t i = 0; i < s->nattrs; i++) {
    const isa_attr_t *a = &s->attrs[i];
    if (strcmp(a->name, "device") != 0) continue;
    if (a->kind != ISA_ATTR_INT || a->ints[0] < 0 || a->ints[0] >= ISA_MAX_DEVICES)
      return asm_error_at(b->c, s->head, "copy's device must be a device number 0..%d", ISA_MAX_DEVICES - 1);
    if (a->ints[0] != b->curdev)
      return asm_error_at(b->c, s->head, "copy(...) {device=%lld} is issued on a stream of device %lld; the current stream %d is on device %d",
                          (long long)a->ints[0], (long long)a->ints[0], b->cur, b->curdev);
    s->attrs[i] = s->attrs[--s->nattrs];
    *from_device = 1;
    return NULL;
  }
  return NULL;
}

/* A collective over the VM's devices, `%y0, %y1 = all_reduce(%x0, %x1)`:
 * operand i lives on device i and result i is made there. It becomes one op
 * node per device, part i of `parts` on a stream of device i (the stream
 * `streams=[...]` names, else the one set_stream last gave the device),
 * consecutive, which the VM runs as one collective (docs/collectives.md).
 * Each part is checked as a use on its stream, so an operand on the wrong
 * device or not ordered by an event is an error naming both. */
static rill_status_t do_device_collective(bctx_t *b, stmt_t *s, const ops_def_t *def, const char *name) {
  asm_ctx_t *c = b->c;
  uint32_t k = (uint32_t)s->args.len;
  if (k > ISA_MAX_DEVICES) return asm_error_at(c, s->head, "%s over %u devices: at most %d", name, k, ISA_MAX_DEVICES);
  if (s->res.len != k)
    return asm_error_at(c, s->first, "%s over %u devices gives %u results (one per device), %zu named", name, k, k, s->res.len);
  int streams[ISA_MAX_DEVICES];
  const isa_attr_t *given = NULL;
  uint32_t na = 0;
  isa_attr_t *attrs = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * (s->nattrs + 2));
  int64_t *nums = rill__arena_alloc(&c->arena, sizeof(int64_t) * 2 * k);
  if (!attrs || !nums) return rill__oom();
  for (uint32_t i = 0; i < s->nattrs; i++) {
    if (strcmp(s->attrs[i].name, "streams") == 0) given = &s->attrs[i];
    else if (strcmp(s->attrs[i].name, "part") == 0 || strcmp(s->attrs[i].name, "parts") == 0)
      return asm_error_at(c, s->head, "%s: part and parts are the assembler's (one op entry per device); give one operand per device", name);
    else attrs[na++] = s->attrs[i];
  }
  if (given && (given->kind != ISA_ATTR_INTS || given->count != k))
    return asm_error_at(c, s->head, "%s: streams=[...] names one stream per device, %u of them", name, k);
  for (uint32_t i = 0; i < k; i++) {
    if (given) {
      int64_t st = given->ints[i];
      if (st < 0 || st >= ISA_MAX_STREAMS || !b->sdev_line[st] || b->f->sdev[st] != i)
        return asm_error_at(c, s->head, "%s: streams[%u] = %lld is not a stream of device %u (set_stream(S, device=%u) names one first)", name, i,
                            (long long)st, i, i);
      streams[i] = (int)st;
    } else if (b->curdev == (int)i) {
      streams[i] = b->cur;
    } else if (b->dev_stream[i]) {
      streams[i] = b->dev_stream[i] - 1;
    } else if (i == 0) {
      streams[i] = 0;
    } else {
      return asm_error_at(c, s->head, "%s over %u devices runs on a stream of each: device %u has none yet (set_stream(S, device=%u) before, or streams=[...])",
                          name, k, i, i);
    }
  }
  int saved = b->cur, saved_dev = b->curdev;
  rill_type_t first;
  for (uint32_t i = 0; i < k; i++) {
    const token_t *t = s->args.items[i];
    b->cur = streams[i];
    b->curdev = (int)i;
    uint32_t *args = rill__arena_alloc(&c->arena, sizeof(uint32_t));
    if (!args) return rill__oom();
    if (t->kind == T_NUMBER) return asm_error_at(c, t, "operand %u of %s must be a %%value", i + 1, name);
    RILL_TRY(value_arg(b, t, &args[0]));
    rill_type_t in = b->f->values.items[args[0]].type;
    char b1[96], b2[96];
    if (i == 0) first = in;
    else if (!rill__type_eq(&in, &first))
      return asm_error_at(c, t, "%s: operand %u is %s and operand 1 %s; every device gives the same type", name, i + 1, tfmt(&in, b1), tfmt(&first, b2));
    nums[2 * i] = i;
    nums[2 * i + 1] = k;
    isa_attr_t *pa = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * (na + 2));
    if (!pa) return rill__oom();
    memcpy(pa, attrs, sizeof(isa_attr_t) * na);
    pa[na] = (isa_attr_t){.name = "part", .kind = ISA_ATTR_INT, .count = 1, .ints = &nums[2 * i]};
    pa[na + 1] = (isa_attr_t){.name = "parts", .kind = ISA_ATTR_INT, .count = 1, .ints = &nums[2 * i + 1]};
    rill_type_t out[1];
    uint32_t nout;
    ops_params_t p;
    rill_status_t st = ops_infer_sym(def, &c->syms, &in, 1, pa, na + 2, out, 1, &nout, &p);
    if (st) {
      rill_status_t e = asm_error_at(c, s->head, "%s", rill_status_message(st));
      rill_status_free(st);
      return e;
    }
    ir_node_t node = {.kind = N_OP, .line = s->head->line, .col = s->head->col, .args = args, .nargs = 1, .nres = 1};
    RILL_TRY(asm_intern_op(c, def->name, &in, 1, out, 1, pa, na + 2, &node.target));
    stmt_t one = *s;
    one.res.items = &s->res.items[i];
    one.res.len = 1;
    RILL_TRY(define_results(b, &one, out, 1, (uint32_t)b->f->nodes.len, &node.res));
    RILL_TRY(push_node(b, node));
  }
  b->cur = saved;
  b->curdev = saved_dev;
  return NULL;
}

/* INTS attribute `name` of n values (none when n is 0: absent means empty). */
static rill_status_t ints_attr(asm_ctx_t *c, isa_attr_t *a, uint32_t *na, const char *name, const int64_t *v, uint32_t n) {
  if (!n) return NULL;
  int64_t *copy = rill__arena_alloc(&c->arena, sizeof(int64_t) * n);
  if (!copy) return rill__oom();
  memcpy(copy, v, sizeof(int64_t) * n);
  a[(*na)++] = (isa_attr_t){.name = name, .kind = ISA_ATTR_INTS, .count = n, .ints = copy};
  return NULL;
}

/* A send or recv, part b->p2p_part of the exchange of b->p2p_parts
 * consecutive ones (counted when its first was read): checked as its own
 * op (send, recv), kept; the last makes the exchange one node of the op
 * sendrecv (sends' operands, recvs' results), which the VM issues at once,
 * sends first (docs/collectives.md, "Point to point"). */
static rill_status_t do_p2p(bctx_t *b, stmt_t *s, const ops_def_t *def, const char *name) {
  asm_ctx_t *c = b->c;
  bool send = def->code == OPS_COLL_SEND;
  if (b->p2p_part >= b->p2p_parts || (send && s->res.len) || (!send && s->res.len != 1))
    return asm_error_at(c, s->first, "%s: expected send(%%x) {peer=R} (no result) or %%y = recv() {peer=R, dtype=D, shape=[...]} (one result)", name);
  if (b->p2p_parts > OPS_P2P_GROUP_MAX)
    return asm_error_at(c, s->head, "%d consecutive sends and recvs: one exchange has at most %d (put another statement between them)", b->p2p_parts,
                        OPS_P2P_GROUP_MAX);
  if (b->p2p_part == 0) b->p2p_nsend = b->p2p_nrecv = 0;
  rill_type_t in[1], out[1];
  uint32_t arg = 0, nin = 0, nout;
  if (send && s->args.len == 1) {
    const token_t *t = s->args.items[0];
    char buf[64];
    if (t->kind != T_VALUE) return asm_error_at(c, t, "operand 1 of send must be a %%value, found %s", asm_tok_desc(t, buf, sizeof buf));
    for (uint32_t i = 0; i < b->p2p_nrecv; i++)
      if (b->p2p_res[i]->len == t->len && memcmp(b->p2p_res[i]->text, t->text, t->len) == 0)
        return asm_error_at(c, t, "%%%.*s is received in the exchange that sends it (consecutive sends and recvs are issued together, sends first): "
                            "put another statement between the recv and this send", (int)t->len, t->text);
    RILL_TRY(value_arg(b, t, &arg));
    in[0] = b->f->values.items[arg].type;
    nin = 1;
  } else if (s->args.len) {
    return asm_error_at(c, s->head, "%s takes %s, %zu operand%s given", name, send ? "one operand" : "no operand", s->args.len, s->args.len == 1 ? "" : "s");
  }
  ops_params_t p;
  rill_status_t st = ops_infer_sym(def, &c->syms, in, nin, s->attrs, s->nattrs, out, 1, &nout, &p);
  if (st) {
    rill_status_t e = asm_error_at(c, s->head, "%s", rill_status_message(st));
    rill_status_free(st);
    return e;
  }
  if (send) {
    uint32_t k = b->p2p_nsend++;
    b->p2p_args[k] = arg;
    b->p2p_in[k] = in[0];
    b->p2p_to[0][k] = p.coll.peer;
    b->p2p_to[1][k] = p.coll.relative;
  } else {
    uint32_t k = b->p2p_nrecv++;
    b->p2p_out[k] = out[0];
    b->p2p_res[k] = s->res.items[0];
    b->p2p_from[0][k] = p.coll.peer;
    b->p2p_from[1][k] = p.coll.relative;
  }
  if (++b->p2p_part < b->p2p_parts) return NULL;
  /* the exchange: one node */
  uint32_t ns = b->p2p_nsend, nr = b->p2p_nrecv, na = 0, ndims = 0;
  isa_attr_t *attrs = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * 7);
  uint32_t *args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (ns ? ns : 1));
  const token_t **res = rill__arena_alloc(&c->arena, sizeof(token_t *) * (nr ? nr : 1));
  if (!attrs || !args || !res) return rill__oom();
  memcpy(args, b->p2p_args, sizeof(uint32_t) * ns);
  memcpy(res, b->p2p_res, sizeof(token_t *) * nr);
  int64_t dt[OPS_P2P_GROUP_MAX], nd[OPS_P2P_GROUP_MAX], dims[OPS_P2P_GROUP_MAX * RILL_MAX_RANK];
  for (uint32_t i = 0; i < nr; i++) {
    dt[i] = b->p2p_out[i].dtype;
    nd[i] = b->p2p_out[i].rank;
    for (int d = 0; d < b->p2p_out[i].rank; d++) dims[ndims++] = b->p2p_out[i].dims[d];
  }
  RILL_TRY(ints_attr(c, attrs, &na, "to", b->p2p_to[0], ns));
  RILL_TRY(ints_attr(c, attrs, &na, "to_shift", b->p2p_to[1], ns));
  RILL_TRY(ints_attr(c, attrs, &na, "from", b->p2p_from[0], nr));
  RILL_TRY(ints_attr(c, attrs, &na, "from_shift", b->p2p_from[1], nr));
  RILL_TRY(ints_attr(c, attrs, &na, "dtypes", dt, nr));
  RILL_TRY(ints_attr(c, attrs, &na, "ndims", nd, nr));
  RILL_TRY(ints_attr(c, attrs, &na, "dims", dims, ndims));
  const ops_def_t *sr = ops_find("sendrecv");
  rill_type_t got[OPS_P2P_GROUP_MAX];
  st = ops_infer_sym(sr, &c->syms, b->p2p_in, ns, attrs, na, got, OPS_P2P_GROUP_MAX, &nout, &p);
  if (st) {
    rill_status_t e = asm_error_at(c, s->head, "internal: %s", rill_status_message(st));
    rill_status_free(st);
    return e;
  }
  ir_node_t node = {.kind = N_OP, .line = s->head->line, .col = s->head->col, .args = args, .nargs = ns, .nres = nr};
  RILL_TRY(asm_intern_op(c, "sendrecv", b->p2p_in, ns, b->p2p_out, nr, attrs, na, &node.target));
  stmt_t all = *s;
  all.res.items = res;
  all.res.len = nr;
  RILL_TRY(define_results(b, &all, b->p2p_out, nr, (uint32_t)b->f->nodes.len, &node.res));
  return push_node(b, node);
}

/* Whether the statement at token `pos` is a send or a recv (`send(...)`, `%y = recv(...)`). */
static bool p2p_stmt_at(const asm_ctx_t *c, size_t pos, size_t end) {
  const token_t *t = &c->toks[pos];
  if (is_word(t, "send")) return true;
  return pos + 2 < end && t->kind == T_VALUE && t[1].kind == T_EQ && (is_word(&t[2], "recv") || is_word(&t[2], "send"));
}

/* The sends and recvs in a row from the statement at `pos` (0 when it is neither). */
static int p2p_run_at(const asm_ctx_t *c, size_t pos, size_t end) {
  int n = 0;
  while (pos < end) {
    while (pos < end && c->toks[pos].kind == T_NEWLINE) pos++;
    if (pos >= end || !p2p_stmt_at(c, pos, end)) break;
    n++;
    while (pos < end && c->toks[pos].kind != T_NEWLINE && c->toks[pos].kind != T_EOF) pos++;
  }
  return n;
}

static rill_status_t do_op(bctx_t *b, stmt_t *s) {
  asm_ctx_t *c = b->c;
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)(s->head->len < 60 ? s->head->len : 60), s->head->text);
  const ops_def_t *def = ops_find(name);
  if (!def) return asm_error_at(c, s->head, "unknown op '%s'", name);
  bool p2p = ops_coll_is_p2p(ops_collective(def));
  if (ops_collective(def) == OPS_COLL_SENDRECV)
    return asm_error_at(c, s->head, "sendrecv is the assembler's (consecutive sends and recvs become one): write send(%%x) {peer=R} and %%y = recv() {...}");
  if (!s->res.len && !p2p) return asm_error_at(c, s->head, "the result of %s needs a name (%%x = %s(...))", name, name);
  if (ops_collective(def) && !p2p && (s->args.len > 1 || s->res.len > 1)) return do_device_collective(b, s, def, name);
  if (p2p) return do_p2p(b, s, def, name);
  int from_device = 0; /* copy {device=D}: 1 + the device of its operand */
  if (strcmp(name, "copy") == 0) RILL_TRY(device_copy(b, s, &from_device));
  uint32_t n = (uint32_t)s->args.len;
  uint32_t *args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n ? n : 1));
  rill_type_t *in = rill__arena_alloc(&c->arena, sizeof(rill_type_t) * (n ? n : 1));
  if (!args || !in) return rill__oom();
  /* Values first, so literals can take the dtype of the other operand. */
  for (uint32_t i = 0; i < n; i++) {
    const token_t *t = s->args.items[i];
    if (t->kind == T_NUMBER) continue;
    if (from_device) {
      RILL_TRY(lookup(b, t, &args[i]));
      RILL_TRY(use_from(b, t, args[i], b->def_dev.items[args[i]] < 0 ? b->curdev : b->def_dev.items[args[i]]));
    } else {
      RILL_TRY(value_arg(b, t, &args[i]));
    }
    in[i] = b->f->values.items[args[i]].type;
    if (from_device && b->def_dev.items[args[i]] >= 0) from_device = 1 + b->def_dev.items[args[i]];
  }
  for (uint32_t i = 0; i < n; i++) {
    const token_t *t = s->args.items[i];
    if (t->kind != T_NUMBER) continue;
    if (!def->elementwise_operand_literals || (strcmp(name, "where") == 0 && i == 0))
      return asm_error_at(c, t, "operand %u of %s must be a %%value: literals are allowed only as elementwise operands", i + 1, name);
    int other = strcmp(name, "where") == 0 ? (i == 1 ? 2 : 1) : (i == 0 ? 1 : 0);
    if (other >= (int)n || s->args.items[other]->kind == T_NUMBER)
      return asm_error_at(c, t, "%s needs a %%value beside the literal to give it a dtype", name);
    RILL_TRY(literal_value(b, t, in[other].dtype, &args[i]));
    in[i] = b->f->values.items[args[i]].type;
  }
  rill_type_t out[64];
  uint32_t nout;
  ops_params_t p;
  uint32_t max_out = s->res.len < 64 ? (uint32_t)s->res.len : 64;
  rill_status_t st = ops_infer_sym(def, &c->syms, in, n, s->attrs, s->nattrs, out, max_out, &nout, &p);
  if (st) {
    rill_status_t e = asm_error_at(c, s->head, "%s", rill_status_message(st));
    rill_status_free(st);
    return e;
  }
  RILL_TRY(check_count(b, s, nout, name));
  ir_node_t node = {.kind = N_OP, .line = s->head->line, .col = s->head->col, .args = args, .nargs = n, .nres = nout};
  /* A copy within one device is an op copy like any other. */
  if (from_device && from_device - 1 != b->curdev) node.from_device = from_device;
  RILL_TRY(asm_intern_op(c, def->name, in, n, out, nout, s->attrs, s->nattrs, &node.target));
  RILL_TRY(define_results(b, s, out, nout, (uint32_t)b->f->nodes.len, &node.res));
  /* A view of a state (or of a view of one) reads its bytes wherever it is used. */
  if (nout == 1 && n == 1 && asm_is_view(c, &node) && b->vstate.items[args[0]] >= 0) {
    int32_t si = b->vstate.items[args[0]];
    b->vstate.items[node.res[0]] = si;
    b->vepoch.items[node.res[0]] = b->f->values.items[args[0]].kind == V_STATE ? b->st_epoch[si] : b->vepoch.items[args[0]];
  }
  return push_node(b, node);
}

/* update(%state, %x, %pos) {axis=N}: no result; the state's next version. */
static rill_status_t do_update(bctx_t *b, stmt_t *s) {
  asm_ctx_t *c = b->c;
  char buf[64];
  if (s->res.len) return asm_error_at(c, s->first, "update has no result: it writes the state in place (update(%%state, %%x, %%pos) {axis=N})");
  if (s->args.len != 3) return asm_error_at(c, s->head, "update takes (%%state, %%x, %%pos), %zu operand%s given", s->args.len, s->args.len == 1 ? "" : "s");
  const token_t *tt = s->args.items[0];
  if (tt->kind != T_VALUE) return asm_error_at(c, tt, "expected a state such as %%cache, found %s", asm_tok_desc(tt, buf, sizeof buf));
  int32_t si = asm_find_state(c, tt->text, tt->len);
  if (si < 0)
    return asm_error_at(c, tt, "only states can be updated: %%%.*s is not a state (declare one at module level: state %%%.*s : TYPE)", (int)tt->len,
                        tt->text, (int)tt->len, tt->text);
  if (b->curdev) return asm_error_at(c, s->head, "states live on device 0: update on stream %d of device %d", b->cur, b->curdev);
  uint32_t *args = rill__arena_alloc(&c->arena, 3 * sizeof(uint32_t));
  rill_type_t in[3], out[1];
  if (!args) return rill__oom();
  RILL_TRY(state_value(b, (uint32_t)si, &args[0]));
  for (int i = 1; i < 3; i++) {
    const token_t *t = s->args.items[i];
    if (t->kind != T_VALUE) return asm_error_at(c, t, "operand %d of update must be a %%value, found %s", i + 1, asm_tok_desc(t, buf, sizeof buf));
    RILL_TRY(value_arg(b, t, &args[i]));
    if (b->vstate.items[args[i]] == si)
      return asm_error_at(c, t, "%%%.*s reads state %%%s, which this update writes: copy it first (copy(%%%s))", (int)t->len, t->text,
                          c->states.items[si].name, c->states.items[si].name);
  }
  RILL_TRY(state_write_check(b, tt, (uint32_t)si, "updated"));
  for (int i = 0; i < 3; i++) in[i] = b->f->values.items[args[i]].type;
  uint32_t nout;
  ops_params_t p;
  rill_status_t st = ops_infer_sym(ops_find("update"), &c->syms, in, 3, s->attrs, s->nattrs, out, 1, &nout, &p);
  if (st) {
    rill_status_t e = asm_error_at(c, s->head, "%s", rill_status_message(st));
    rill_status_free(st);
    return e;
  }
  ir_node_t node = {.kind = N_OP, .line = s->head->line, .col = s->head->col, .args = args, .nargs = 3};
  RILL_TRY(asm_intern_op(c, "update", in, 3, out, 1, s->attrs, s->nattrs, &node.target));
  uint32_t at = (uint32_t)b->f->nodes.len;
  RILL_TRY(push_node(b, node));
  return state_written(b, tt, (uint32_t)si, at);
}

/* Arguments of a call, if or while: never a state or a view of one (the
 * callee could return it, and the caller then see later updates through it). */
static rill_status_t values_of(bctx_t *b, const stmt_t *s, size_t from, uint32_t **out, uint32_t *n) {
  *n = (uint32_t)(s->args.len - from);
  *out = rill__arena_alloc(&b->c->arena, sizeof(uint32_t) * (*n ? *n : 1));
  if (!*out) return rill__oom();
  for (uint32_t i = 0; i < *n; i++) {
    const token_t *t = s->args.items[from + i];
    RILL_TRY(value_arg(b, t, &(*out)[i]));
    int32_t si = b->vstate.items[(*out)[i]];
    if (si >= 0)
      return asm_error_at(b->c, t, "%%%.*s is state %%%s (or a view of it), which is not passed to functions: they read states by name (or pass copy(%%%s))",
                          (int)t->len, t->text, b->c->states.items[si].name, b->c->states.items[si].name);
  }
  return NULL;
}

static rill_status_t check_results(bctx_t *b, const token_t *at, const func_decl_t *g, const rill_type_t *want,
                                   uint32_t nwant, const char *role) {
  char b1[96], b2[96];
  if (g->nresults != nwant)
    return asm_error_at(b->c, at, "%s @%s returns %u value%s, expected %u", role, g->name, g->nresults, g->nresults == 1 ? "" : "s", nwant);
  for (uint32_t i = 0; i < nwant; i++)
    if (!rill__type_eq(&g->results[i], &want[i]))
      return asm_error_at(b->c, at, "%s @%s result %u: expected %s, found %s", role, g->name, i + 1, tfmt(&want[i], b1), tfmt(&g->results[i], b2));
  return NULL;
}

static rill_status_t do_call(bctx_t *b, const stmt_t *s) {
  const func_decl_t *g;
  ir_node_t node = {.kind = N_CALL, .line = s->head->line, .col = s->head->col};
  RILL_TRY(func_arg(b, s->args.items[0], &g, &node.target));
  RILL_TRY(values_of(b, s, 1, &node.args, &node.nargs));
  RILL_TRY(check_params(b, s->args.items[0], g, node.args, node.nargs, "call of"));
  RILL_TRY(check_count(b, s, g->nresults, "the call"));
  node.nres = g->nresults;
  uint32_t at = (uint32_t)b->f->nodes.len;
  RILL_TRY(define_results(b, s, g->results, g->nresults, at, &node.res));
  RILL_TRY(push_node(b, node));
  return states_written_by_call(b, s->head, at);
}

static rill_status_t do_if(bctx_t *b, const stmt_t *s) {
  asm_ctx_t *c = b->c;
  char b1[96];
  if (s->args.len < 3) return asm_error_at(c, s->head, "if takes (%%cond, @then, @else, ARGS...)");
  uint32_t cond;
  RILL_TRY(value_arg(b, s->args.items[0], &cond));
  const rill_type_t *ct = &b->f->values.items[cond].type;
  if (ct->dtype != RILL_BOOL || ct->rank != 0)
    return asm_error_at(c, s->args.items[0], "the condition of if must be bool[], found %s", tfmt(ct, b1));
  const func_decl_t *gt, *ge;
  ir_node_t node = {.kind = N_IF, .line = s->head->line, .col = s->head->col};
  RILL_TRY(func_arg(b, s->args.items[1], &gt, &node.target));
  RILL_TRY(func_arg(b, s->args.items[2], &ge, &node.target2));
  uint32_t *vals, nvals;
  RILL_TRY(values_of(b, s, 3, &vals, &nvals));
  RILL_TRY(check_params(b, s->args.items[1], gt, vals, nvals, "then-branch"));
  RILL_TRY(check_params(b, s->args.items[2], ge, vals, nvals, "else-branch"));
  RILL_TRY(check_results(b, s->args.items[2], ge, gt->results, gt->nresults, "else-branch (against @then)"));
  RILL_TRY(check_count(b, s, gt->nresults, "the if"));
  /* args[0] is the condition, the rest are passed to the branch. */
  node.nargs = nvals + 1;
  node.args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * node.nargs);
  if (!node.args) return rill__oom();
  node.args[0] = cond;
  memcpy(node.args + 1, vals, sizeof(uint32_t) * nvals);
  node.nres = gt->nresults;
  uint32_t at = (uint32_t)b->f->nodes.len;
  RILL_TRY(define_results(b, s, gt->results, gt->nresults, at, &node.res));
  RILL_TRY(push_node(b, node));
  return states_written_by_call(b, s->head, at);
}

static rill_status_t do_while(bctx_t *b, const stmt_t *s) {
  asm_ctx_t *c = b->c;
  char b1[96];
  if (s->args.len < 2) return asm_error_at(c, s->head, "while takes (@cond, @body, INIT...)");
  const func_decl_t *gc, *gb;
  ir_node_t node = {.kind = N_WHILE, .line = s->head->line, .col = s->head->col};
  RILL_TRY(func_arg(b, s->args.items[0], &gc, &node.target));
  RILL_TRY(func_arg(b, s->args.items[1], &gb, &node.target2));
  RILL_TRY(values_of(b, s, 2, &node.args, &node.nargs));
  RILL_TRY(check_params(b, s->args.items[0], gc, node.args, node.nargs, "condition"));
  RILL_TRY(check_params(b, s->args.items[1], gb, node.args, node.nargs, "body"));
  if (gc->nresults != 1 || gc->results[0].dtype != RILL_BOOL || gc->results[0].rank != 0)
    return asm_error_at(c, s->args.items[0], "condition @%s must return one bool[]%s%s", gc->name,
                        gc->nresults ? ", found " : "", gc->nresults ? tfmt(&gc->results[0], b1) : "");
  rill_type_t *state = rill__arena_alloc(&c->arena, sizeof(rill_type_t) * (node.nargs ? node.nargs : 1));
  if (!state) return rill__oom();
  for (uint32_t i = 0; i < node.nargs; i++) state[i] = b->f->values.items[node.args[i]].type;
  RILL_TRY(check_results(b, s->args.items[1], gb, state, node.nargs, "body"));
  RILL_TRY(check_count(b, s, node.nargs, "the while"));
  node.nres = node.nargs;
  uint32_t at = (uint32_t)b->f->nodes.len;
  RILL_TRY(define_results(b, s, state, node.nargs, at, &node.res));
  RILL_TRY(push_node(b, node));
  return states_written_by_call(b, s->head, at);
}

/* bind_dims(%v, N, ...): the sizes in %v (i64[] for one name, i64[k] for
 * k) bind the shape variables N... for the rest of the run (a host wait). */
static rill_status_t do_bind(bctx_t *b, const stmt_t *s) {
  asm_ctx_t *c = b->c;
  char b1[96];
  if (s->res.len) return asm_error_at(c, s->first, "bind_dims has no result");
  if (s->nattrs) return asm_error_at(c, s->head, "bind_dims takes no attributes");
  size_t k = s->args.len ? s->args.len - 1 : 0;
  if (k < 1 || k > RILL_MAX_RANK - 1)
    return asm_error_at(c, s->head, "bind_dims takes (%%sizes, NAME...) with 1 to %d names", RILL_MAX_RANK - 1);
  ir_node_t node = {.kind = N_BIND, .line = s->head->line, .col = s->head->col, .nargs = 1};
  if (!(node.args = rill__arena_alloc(&c->arena, sizeof(uint32_t)))) return rill__oom();
  RILL_TRY(value_arg(b, s->args.items[0], &node.args[0]));
  const rill_type_t *t = &b->f->values.items[node.args[0]].type;
  if (t->dtype != RILL_I64 || t->rank > 1 || (t->rank == 0 && k != 1) || (t->rank == 1 && t->dims[0] != (int64_t)k))
    return asm_error_at(c, s->args.items[0], "bind_dims binds %zu name%s from %s: want i64[%zu]%s", k, k == 1 ? "" : "s", tfmt(t, b1), k,
                        k == 1 ? " or i64[]" : "");
  node.dims = (rill_type_t){RILL_BOOL, (int)k + 1, {0}};
  for (size_t i = 0; i < k; i++) {
    const token_t *nt = s->args.items[1 + i];
    if (nt->kind != T_NAME) return asm_error_at(c, nt, "expected a shape variable's name, found %s", asm_tok_desc(nt, b1, sizeof b1));
    uint32_t v;
    RILL_TRY(isa_syms_var(&c->syms, nt->text, nt->len, &v));
    RILL_TRY(isa_syms_var_dim(&c->syms, v, &node.dims.dims[1 + i]));
    for (size_t q = 0; q < i; q++)
      if (node.dims.dims[1 + q] == node.dims.dims[1 + i]) return asm_error_at(c, nt, "bind_dims binds %.*s twice", (int)nt->len, nt->text);
  }
  return push_node(b, node);
}

static rill_status_t int_arg(bctx_t *b, const token_t *t, int64_t lo, int64_t hi, const char *what, int *out) {
  if (t->kind != T_NUMBER || t->is_float || t->is_bool || t->i < lo || t->i > hi)
    return asm_error_at(b->c, t, "expected %s number %lld..%lld, found '%.*s'", what, (long long)lo, (long long)hi, (int)t->len, t->text);
  *out = (int)t->i;
  return NULL;
}

/* Stream s is used at t: on device `dev`, or (-1) on the device it has (0 for a new one). */
static rill_status_t stream_device(bctx_t *b, const token_t *t, int s, int dev) {
  uint8_t *sd = &b->f->sdev[s];
  if (dev < 0 || (b->sdev_line[s] && *sd == dev) || (!b->sdev_line[s] && dev == 0)) {
    if (!b->sdev_line[s]) b->sdev_line[s] = t->line;
    return NULL;
  }
  if (s == 0) return asm_error_at(b->c, t, "stream 0 is the stream the function was called on, on device 0; use another stream for device %d", dev);
  if (b->sdev_line[s])
    return asm_error_at(b->c, t, "stream %d is on device %d (from line %u): a stream belongs to one device throughout the function", s, *sd, b->sdev_line[s]);
  *sd = (uint8_t)dev;
  b->sdev_line[s] = t->line;
  return NULL;
}

static rill_status_t do_stream_stmt(bctx_t *b, const stmt_t *s) {
  asm_ctx_t *c = b->c;
  ir_node_t node = {.line = s->head->line, .col = s->head->col};
  if (s->res.len) return asm_error_at(c, s->first, "%.*s has no result", (int)s->head->len, s->head->text);
  if (is_word(s->head, "set_stream")) {
    int dev = -1;
    bool named = s->args.len == 3 && s->args.items[1]->kind == T_NAME;
    if (named && !is_word(s->args.items[1], "device"))
      return asm_error_at(c, s->args.items[1], "set_stream takes device=D, not '%.*s'", (int)s->args.items[1]->len, s->args.items[1]->text);
    if (s->args.len != 1 && !named) return asm_error_at(c, s->head, "set_stream takes a stream number, and device=D");
    node.kind = N_SET_STREAM;
    RILL_TRY(int_arg(b, s->args.items[0], 0, ISA_MAX_STREAMS - 1, "a stream", &node.stream));
    if (named) RILL_TRY(int_arg(b, s->args.items[2], 0, ISA_MAX_DEVICES - 1, "a device", &dev));
    RILL_TRY(stream_device(b, s->args.items[named ? 2 : 0], node.stream, dev));
    b->cur = node.stream;
    b->curdev = b->f->sdev[node.stream];
    b->dev_stream[b->curdev] = (int8_t)(1 + b->cur);
    if ((uint32_t)b->cur + 1 > b->f->nstreams) b->f->nstreams = (uint32_t)b->cur + 1;
    return RILL_VEC_PUSH(c->a, &b->f->nodes, node);
  }
  bool add = is_word(s->head, "add_event");
  if (s->args.len < 1 || s->args.len > 2) return asm_error_at(c, s->head, "%s takes (EVENT) or (EVENT, STREAM)", add ? "add_event" : "wait_event");
  node.kind = add ? N_ADD_EVENT : N_WAIT_EVENT;
  RILL_TRY(int_arg(b, s->args.items[0], 0, ISA_MAX_EVENTS - 1, "an event", &node.event));
  node.event_stream = b->cur;
  if (s->args.len == 2) RILL_TRY(int_arg(b, s->args.items[1], 0, ISA_MAX_STREAMS - 1, "a stream", &node.event_stream));
  if (s->args.len == 2) RILL_TRY(stream_device(b, s->args.items[1], node.event_stream, -1));
  if ((uint32_t)node.event_stream + 1 > b->f->nstreams) b->f->nstreams = (uint32_t)node.event_stream + 1;
  b->f->events_used |= 1ull << node.event;
  uint64_t sb = 1ull << node.event_stream, eb = 1ull << node.event;
  for (size_t v = 0; v < b->f->values.len; v++) {
    if (add) {
      if (b->safe.items[v] & sb) b->evcov.items[v] |= eb;
      else b->evcov.items[v] &= ~eb;
    } else if (b->evcov.items[v] & eb) {
      b->safe.items[v] |= sb;
    }
  }
  for (size_t k = 0; b->rd_safe && k < c->states.len * ISA_MAX_STREAMS; k++) {
    if (add) {
      if (b->rd_safe[k] & sb) b->rd_evcov[k] |= eb;
      else b->rd_evcov[k] &= ~eb;
    } else if (b->rd_evcov[k] & eb) {
      b->rd_safe[k] |= sb;
    }
  }
  node.stream = b->cur;
  return RILL_VEC_PUSH(c->a, &b->f->nodes, node);
}

static rill_status_t do_return(bctx_t *b, const stmt_t *s) {
  asm_ctx_t *c = b->c;
  const func_decl_t *fd = b->fd;
  char b1[96], b2[96];
  ir_node_t node = {.kind = N_RETURN, .line = s->head->line, .col = s->head->col};
  node.nargs = (uint32_t)s->args.len;
  node.args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (node.nargs ? node.nargs : 1));
  if (!node.args) return rill__oom();
  int saved = b->cur, saved_dev = b->curdev;
  b->cur = 0; /* the assembler joins every stream into stream 0 before return */
  b->curdev = 0;
  bool hand = b->f->hand_scheduled;
  b->f->hand_scheduled = false;
  for (uint32_t i = 0; i < node.nargs; i++) {
    rill_status_t st = value_arg(b, s->args.items[i], &node.args[i]);
    if (st) { b->f->hand_scheduled = hand; return st; }
  }
  b->f->hand_scheduled = hand;
  b->cur = saved;
  b->curdev = saved_dev;
  for (uint32_t i = 0; i < node.nargs; i++) {
    int dev = b->def_dev.items[node.args[i]];
    const char *name = b->f->values.items[node.args[i]].name;
    int32_t si = b->vstate.items[node.args[i]];
    if (si >= 0)
      return asm_error_at(c, s->args.items[i], "%%%s is state %%%s (or a view of it), which is not returned: return a copy (copy(%%%s))", name,
                          c->states.items[si].name, c->states.items[si].name);
    if (dev > 0)
      return asm_error_at(c, s->args.items[i], "%%%s lives on device %d (made on stream %d); results are on device 0: copy(%%%s) {device=0} on a stream of device 0 first",
                          name, dev, b->def_stream.items[node.args[i]], name);
  }
  if (node.nargs != fd->nresults)
    return asm_error_at(c, s->head, "@%s returns %u value%s, %u given", fd->name, fd->nresults, fd->nresults == 1 ? "" : "s", node.nargs);
  for (uint32_t i = 0; i < node.nargs; i++) {
    const rill_type_t *t = &b->f->values.items[node.args[i]].type;
    if (!rill__type_eq(t, &fd->results[i]))
      return asm_error_at(c, s->args.items[i], "result %u of @%s: expected %s, found %s", i + 1, fd->name,
                          tfmt(&fd->results[i], b1), tfmt(t, b2));
  }
  return push_node(b, node);
}

rill_status_t asm_build_ir(asm_ctx_t *c, uint32_t fi, ir_func_t *f) {
  const func_decl_t *fd = &c->funcs.items[fi];
  bctx_t b = {.c = c, .f = f, .fd = fd, .dev_stream = {1}};
  tfmt_syms = &c->syms;
  rill__map_init(&b.names, c->a);
  rill__map_init(&b.later, c->a);
  memset(f, 0, sizeof *f);
  f->index = fi;
  f->nstreams = 1;
  rill_status_t st = NULL;
  size_t ns = c->states.len;
  if (ns && (!(b.st_cur = rill__calloc(c->a, ns, sizeof(int32_t))) || !(b.st_epoch = rill__calloc(c->a, ns, sizeof(uint32_t))) ||
             !(b.st_line = rill__calloc(c->a, ns, sizeof(uint32_t))))) {
    st = rill__oom();
    goto done;
  }
  for (size_t i = 0; i < ns; i++) b.st_cur[i] = -1;
  stmt_t s;
  memset(&s, 0, sizeof s);
  /* Pass 1: every name the body defines, and whether it has stream statements. */
  for (size_t pos = fd->body_start; pos < fd->body_end; pos++) {
    const token_t *t = &c->toks[pos];
    if (pos > fd->body_start && c->toks[pos - 1].kind != T_NEWLINE) continue;
    if (is_word(t, "set_stream") || is_word(t, "add_event") || is_word(t, "wait_event")) f->hand_scheduled = true;
    while (t->kind == T_VALUE) {
      uint32_t line;
      if (!rill__map_get(&b.later, t->text, t->len, &line) && (st = rill__map_put(&b.later, t->text, t->len, t->line))) goto done;
      if (t[1].kind != T_COMMA) break;
      t += 2;
    }
  }
  if (ns && f->hand_scheduled &&
      (!(b.rd_safe = rill__calloc(c->a, ns * ISA_MAX_STREAMS, 8)) || !(b.rd_evcov = rill__calloc(c->a, ns * ISA_MAX_STREAMS, 8)) ||
       !(b.rd_any = rill__calloc(c->a, ns, 8)) || !(b.rd_line = rill__calloc(c->a, ns * ISA_MAX_STREAMS, 4)))) {
    st = rill__oom();
    goto done;
  }
  for (uint32_t i = 0; i < fd->nparams; i++) {
    ir_value_t v = {.name = fd->param_names[i], .type = fd->param_types[i], .kind = V_PARAM,
                    .line = fd->param_line[i], .col = fd->param_col[i], .def = -1};
    uint32_t id, dup;
    if (rill__map_get(&b.names, v.name, strlen(v.name), &dup)) continue;
    if (asm_find_state(c, v.name, strlen(v.name)) >= 0) {
      st = asm_error(c, v.line, v.col, "parameter %%%s has the name of a state", v.name);
      goto done;
    }
    if ((st = add_value(&b, v, &id)) || (st = rill__map_put(&b.names, v.name, strlen(v.name), id))) goto done;
  }
  f->nparams = fd->nparams;
  bool returned = false;
  size_t pos = fd->body_start;
  while (pos < fd->body_end) {
    if (c->toks[pos].kind == T_NEWLINE) { pos++; continue; }
    char buf[64];
    if (returned) { st = asm_error_at(c, &c->toks[pos], "statement after return"); goto done; }
    s.res.len = s.args.len = 0;
    s.attrs = NULL;
    s.nattrs = 0;
    if (b.p2p_part >= b.p2p_parts) { /* a new exchange starts here (or none) */
      b.p2p_part = 0;
      b.p2p_parts = p2p_run_at(c, pos, fd->body_end);
    }
    if ((st = parse_stmt(c, &pos, &s))) goto done;
    if (c->toks[pos].kind != T_NEWLINE) {
      st = asm_error_at(c, &c->toks[pos], "expected the end of the statement, found %s", asm_tok_desc(&c->toks[pos], buf, sizeof buf));
      goto done;
    }
    if (!s.res.len && is_word(s.head, "return")) { st = do_return(&b, &s); returned = true; }
    else if (is_word(s.head, "call")) st = do_call(&b, &s);
    else if (is_word(s.head, "if")) st = do_if(&b, &s);
    else if (is_word(s.head, "while")) st = do_while(&b, &s);
    else if (is_word(s.head, "update")) st = do_update(&b, &s);
    else if (is_word(s.head, "bind_dims")) st = do_bind(&b, &s);
    else if (is_word(s.head, "set_stream") || is_word(s.head, "add_event") || is_word(s.head, "wait_event")) st = do_stream_stmt(&b, &s);
    else st = do_op(&b, &s);
    if (st) goto done;
  }
  if (!returned) st = asm_error(c, c->toks[fd->body_end].line, c->toks[fd->body_end].col, "@%s ends without return", fd->name);
done:
  RILL_VEC_FREE(c->a, &s.res);
  RILL_VEC_FREE(c->a, &s.args);
  RILL_VEC_FREE(c->a, &b.safe);
  RILL_VEC_FREE(c->a, &b.evcov);
  RILL_VEC_FREE(c->a, &b.def_stream);
  RILL_VEC_FREE(c->a, &b.def_dev);
  RILL_VEC_FREE(c->a, &b.vstate);
  RILL_VEC_FREE(c->a, &b.vepoch);
  rill__free(c->a, b.st_cur);
  rill__free(c->a, b.st_epoch);
  rill__free(c->a, b.st_line);
  rill__free(c->a, b.rd_safe);
  rill__free(c->a, b.rd_evcov);
  rill__free(c->a, b.rd_any);
  rill__free(c->a, b.rd_line);
  rill__map_free(&b.names);
  rill__map_free(&b.later);
  return st;
}
