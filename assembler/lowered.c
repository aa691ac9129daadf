/* lowered.c: function bodies in lowered form (docs/lowered.md), the text
 * that `rill dis` prints. Each line is a register declaration
 * (`reg %x : f32[4]` or `reg %s : storage(256)`), a source position
 * (`loc LINE COL`), a label (`L12:`) or an instruction: a mnemonic from
 * opcodes.def and its operands in the order of its format letters. The
 * instructions are encoded as written; the verifier judges them. */
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>

#include "asm.h"

static bool is_word(const token_t *t, const char *w) {
  return t->kind == T_NAME && strlen(w) == t->len && memcmp(t->text, w, t->len) == 0;
}

typedef struct fixup {
  size_t word;
  const token_t *label;
} fixup_t;

typedef struct lctx {
  asm_ctx_t *c;
  RILL_VEC(isa_reg_t) regs;
  RILL_VEC(uint32_t) code;
  RILL_VEC(isa_loc_t) locs;
  RILL_VEC(fixup_t) fixups;
  rill_map_t regmap, labels;
} lctx_t;

static rill_status_t reg_operand(lctx_t *l, size_t *pos, uint32_t *out) {
  asm_ctx_t *c = l->c;
  const token_t *t = &c->toks[*pos];
  char b[64];
  if (t->kind != T_VALUE) return asm_error_at(c, t, "expected a register such as %%x, found %s", asm_tok_desc(t, b, sizeof b));
  if (!rill__map_get(&l->regmap, t->text, t->len, out))
    return asm_error_at(c, t, "unknown register %%%.*s (declare it with reg)", (int)t->len, t->text);
  (*pos)++;
  return NULL;
}

static rill_status_t u32_operand(lctx_t *l, size_t *pos, uint32_t *out) {
  const token_t *t = &l->c->toks[*pos];
  if (t->kind != T_NUMBER || t->is_float || t->is_bool || t->i < 0 || t->i > UINT32_MAX)
    return asm_error_at(l->c, t, "expected an unsigned 32-bit number, found '%.*s'", (int)t->len, t->text);
  *out = (uint32_t)t->i;
  (*pos)++;
  return NULL;
}

static rill_status_t instruction(lctx_t *l, size_t *pos, isa_opcode_t op) {
  asm_ctx_t *c = l->c;
  RILL_TRY(RILL_VEC_PUSH(c->a, &l->code, (uint32_t)op));
  const char *fmt = isa_opinfo[op].format;
  char b[64];
  for (int i = 0; fmt[i]; i++) {
    if (i) {
      if (c->toks[*pos].kind != T_COMMA) return asm_error_at(c, &c->toks[*pos], "expected ',' before the next operand, found %s", asm_tok_desc(&c->toks[*pos], b, sizeof b));
      (*pos)++;
    }
    const token_t *t = &c->toks[*pos];
    uint32_t v = 0;
    switch (fmt[i]) {
      case 'd': case 'u': case 'w': case 's': RILL_TRY(reg_operand(l, pos, &v)); break;
      case 'i': case 'S': case 'E': case 'V': RILL_TRY(u32_operand(l, pos, &v)); break;
      case 'k': {
        int32_t k = t->kind == T_VALUE ? asm_find_const(c, t->text, t->len) : -1;
        if (k < 0) return asm_error_at(c, t, "expected a constant such as %%w, found %s", asm_tok_desc(t, b, sizeof b));
        v = (uint32_t)k;
        (*pos)++;
        break;
      }
      case 'T': {
        int32_t k = t->kind == T_VALUE ? asm_find_state(c, t->text, t->len) : -1;
        if (k < 0) return asm_error_at(c, t, "expected a state such as %%cache, found %s", asm_tok_desc(t, b, sizeof b));
        v = (uint32_t)k;
        (*pos)++;
        break;
      }
      case 'o': {
        int64_t n = t->kind == T_OPREF ? asm_tok_digits(t) : -1;
        if (n < 0 || n >= (int64_t)c->nexplicit_ops) return asm_error_at(c, t, "expected a declared op such as $0, found %s", asm_tok_desc(t, b, sizeof b));
        v = (uint32_t)n;
        (*pos)++;
        break;
      }
      case 'f': {
        int32_t k = t->kind == T_FUNC ? asm_find_func(c, t->text, t->len) : -1;
        if (k < 0) return asm_error_at(c, t, "expected a function such as @f, found %s", asm_tok_desc(t, b, sizeof b));
        v = (uint32_t)k;
        (*pos)++;
        break;
      }
      case 'j':
        if (t->kind != T_NAME) return asm_error_at(c, t, "expected a label, found %s", asm_tok_desc(t, b, sizeof b));
        RILL_TRY(RILL_VEC_PUSH(c->a, &l->fixups, ((fixup_t){l->code.len, t})));
        (*pos)++;
        break;
      case 'U': case 'W': case 'D': {
        if (t->kind != T_LPAREN) return asm_error_at(c, t, "expected '(' and a register list, found %s", asm_tok_desc(t, b, sizeof b));
        (*pos)++;
        size_t count_at = l->code.len;
        RILL_TRY(RILL_VEC_PUSH(c->a, &l->code, 0));
        while (c->toks[*pos].kind != T_RPAREN) {
          uint32_t r;
          RILL_TRY(reg_operand(l, pos, &r));
          RILL_TRY(RILL_VEC_PUSH(c->a, &l->code, r));
          l->code.items[count_at]++;
          if (c->toks[*pos].kind == T_COMMA) (*pos)++;
          else if (c->toks[*pos].kind != T_RPAREN) return asm_error_at(c, &c->toks[*pos], "expected ',' or ')' in the register list");
        }
        (*pos)++;
        continue;
      }
    }
    RILL_TRY(RILL_VEC_PUSH(c->a, &l->code, v));
  }
  return NULL;
}

static rill_status_t build(lctx_t *l, const func_decl_t *fd, isa_func_t *out) {
  asm_ctx_t *c = l->c;
  char b[64];
  for (uint32_t i = 0; i < fd->nparams; i++) {
    isa_reg_t r = {.type = fd->param_types[i], .name = fd->param_names[i]};
    RILL_TRY(rill__map_put(&l->regmap, r.name, strlen(r.name), (uint32_t)l->regs.len));
    RILL_TRY(RILL_VEC_PUSH(c->a, &l->regs, r));
  }
  bool code_started = false;
  for (size_t pos = fd->body_start; pos < fd->body_end;) {
    const token_t *t = &c->toks[pos];
    if (t->kind == T_NEWLINE) { pos++; continue; }
    if (is_word(t, "reg")) {
      if (code_started) return asm_error_at(c, t, "register declarations must come before the instructions");
      pos++;
      const token_t *nt = &c->toks[pos];
      if (nt->kind != T_VALUE) return asm_error_at(c, nt, "expected a register name such as %%x");
      uint32_t dummy;
      if (rill__map_get(&l->regmap, nt->text, nt->len, &dummy)) return asm_error_at(c, nt, "register %%%.*s declared twice", (int)nt->len, nt->text);
      pos++;
      if (c->toks[pos].kind != T_COLON) return asm_error_at(c, &c->toks[pos], "expected ':' and the register's type");
      pos++;
      isa_reg_t r = {0};
      if (!(r.name = rill__arena_strndup(&c->arena, nt->text, nt->len))) return rill__oom();
      if (is_word(&c->toks[pos], "storage")) {
        r.storage = true;
        pos++;
        uint32_t hi = 0, lo = 0;
        if (c->toks[pos].kind != T_LPAREN) return asm_error_at(c, &c->toks[pos], "expected '(' and the storage size");
        pos++;
        const token_t *st = &c->toks[pos];
        if (st->kind != T_NUMBER || st->is_float || st->i < 0 || st->i > ((int64_t)1 << 48))
          return asm_error_at(c, st, "expected a storage size in bytes");
        r.storage_size = (uint64_t)st->i;
        (void)hi; (void)lo;
        pos++;
        if (c->toks[pos].kind != T_RPAREN) return asm_error_at(c, &c->toks[pos], "expected ')' after the storage size");
        pos++;
      } else {
        RILL_TRY(asm_parse_type(c, &pos, &r.type));
      }
      RILL_TRY(rill__map_put(&l->regmap, r.name, nt->len, (uint32_t)l->regs.len));
      RILL_TRY(RILL_VEC_PUSH(c->a, &l->regs, r));
    } else if (is_word(t, "loc")) {
      pos++;
      uint32_t line, col;
      RILL_TRY(u32_operand(l, &pos, &line));
      RILL_TRY(u32_operand(l, &pos, &col));
      uint32_t pc = (uint32_t)l->code.len;
      if (l->locs.len && l->locs.items[l->locs.len - 1].pc == pc) return asm_error_at(c, t, "two locations for one instruction");
      RILL_TRY(RILL_VEC_PUSH(c->a, &l->locs, ((isa_loc_t){pc, line, col})));
    } else if (t->kind == T_NAME && c->toks[pos + 1].kind == T_COLON) {
      uint32_t dummy;
      if (rill__map_get(&l->labels, t->text, t->len, &dummy)) return asm_error_at(c, t, "label %.*s defined twice", (int)t->len, t->text);
      RILL_TRY(rill__map_put(&l->labels, t->text, t->len, (uint32_t)l->code.len));
      pos += 2;
      continue;
    } else if (t->kind == T_NAME) {
      int op = 0;
      while (op < ISA_OP_COUNT && !is_word(t, isa_opinfo[op].mnemonic)) op++;
      if (op == ISA_OP_COUNT) return asm_error_at(c, t, "unknown instruction '%.*s'", (int)t->len, t->text);
      code_started = true;
      pos++;
      RILL_TRY(instruction(l, &pos, (isa_opcode_t)op));
    } else {
      return asm_error_at(c, t, "expected an instruction, reg, loc or a label, found %s", asm_tok_desc(t, b, sizeof b));
    }
    if (c->toks[pos].kind != T_NEWLINE) return asm_error_at(c, &c->toks[pos], "expected the end of the line, found %s", asm_tok_desc(&c->toks[pos], b, sizeof b));
  }
  for (size_t i = 0; i < l->fixups.len; i++) {
    const token_t *lt = l->fixups.items[i].label;
    uint32_t pc;
    if (!rill__map_get(&l->labels, lt->text, lt->len, &pc)) return asm_error_at(c, lt, "unknown label %.*s", (int)lt->len, lt->text);
    l->code.items[l->fixups.items[i].word] = pc;
  }
  if (l->locs.len && l->locs.items[l->locs.len - 1].pc >= l->code.len)
    return asm_error(c, fd->line, fd->col, "a location after the last instruction of @%s", fd->name);
  out->name = fd->name;
  out->nparams = fd->nparams;
  out->nresults = fd->nresults;
  out->results = fd->results;
  out->nregs = (uint32_t)l->regs.len;
  out->regs = rill__arena_memdup(&c->arena, l->regs.items, sizeof(isa_reg_t) * l->regs.len);
  out->nstreams = fd->nstreams;
  out->nevents = fd->nevents;
  out->ncode = (uint32_t)l->code.len;
  out->code = rill__arena_memdup(&c->arena, l->code.items, 4 * l->code.len);
  out->nlocs = (uint32_t)l->locs.len;
  out->locs = rill__arena_memdup(&c->arena, l->locs.items, sizeof(isa_loc_t) * l->locs.len);
  if ((l->regs.len && !out->regs) || (l->code.len && !out->code) || (l->locs.len && !out->locs)) return rill__oom();
  return NULL;
}

rill_status_t asm_build_lowered(asm_ctx_t *c, uint32_t fi, isa_func_t *out) {
  lctx_t l = {.c = c};
  rill__map_init(&l.regmap, c->a);
  rill__map_init(&l.labels, c->a);
  rill_status_t st = build(&l, &c->funcs.items[fi], out);
  RILL_VEC_FREE(c->a, &l.regs);
  RILL_VEC_FREE(c->a, &l.code);
  RILL_VEC_FREE(c->a, &l.locs);
  RILL_VEC_FREE(c->a, &l.fixups);
  rill__map_free(&l.regmap);
  rill__map_free(&l.labels);
  return st;
}
