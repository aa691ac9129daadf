/* disasm.c: prints a module as lowered .vmasm (docs/lowered.md).
 *
 * Every field of the module appears in the text, so the assembler's
 * lowered-form parser rebuilds the same module and the writer emits the
 * same bytes. Instruction operands are printed by their format letters
 * from opcodes.def.
 */
#include "isa.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The size expressions of the module being printed (isa_disassemble). */
static _Thread_local const isa_syms_t *print_syms;
/* With these, sizes are printed as their values (isa_print_opdecl_at); print_bad: one did not evaluate. */
static _Thread_local const int64_t *print_vals;
static _Thread_local bool print_bad;

static rill_status_t print_size(rill_buf_t *b, int64_t d) {
  if (isa_dim_is_sym(d) && print_syms && print_vals) {
    int64_t x = -1;
    if (!isa_sym_eval(print_syms, d, print_vals, &x)) print_bad = true;
    return rill__buf_printf(b, "%lld", (long long)x);
  }
  if (isa_dim_is_sym(d) && print_syms) return isa_sym_print_lowered(b, print_syms, d);
  return rill__buf_printf(b, "%lld", (long long)d);
}

rill_status_t isa_print_type(rill_buf_t *b, const rill_type_t *t) {
  RILL_TRY(rill__buf_printf(b, "%s[", rill_dtype_name(t->dtype)));
  for (int i = 0; i < t->rank; i++) {
    if (i) RILL_TRY(rill__buf_append(b, ",", 1));
    RILL_TRY(print_size(b, t->dims[i]));
  }
  return rill__buf_append(b, "]", 1);
}

rill_status_t isa_print_string(rill_buf_t *b, const char *s) {
  RILL_TRY(rill__buf_append(b, "\"", 1));
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') RILL_TRY(rill__buf_printf(b, "\\%c", *s));
    else if (*s == '\n') RILL_TRY(rill__buf_append(b, "\\n", 2));
    else RILL_TRY(rill__buf_append(b, s, 1));
  }
  return rill__buf_append(b, "\"", 1);
}

const char *isa_attr_kind_name(isa_attr_kind_t k) {
  static const char *n[] = {"int", "float", "bool", "string", "dtype", "int list", "float list"};
  return (unsigned)k < RILL_ARRAY_LEN(n) ? n[k] : "?";
}

static rill_status_t print_float(rill_buf_t *b, double v, bool f32) {
  char buf[64];
  rill__format_double(buf, sizeof buf, v, f32);
  return rill__buf_printf(b, "%s", buf);
}

rill_status_t isa_print_attrs(rill_buf_t *b, const isa_attr_t *attrs, uint32_t n) {
  if (!n) return NULL;
  RILL_TRY(rill__buf_append(b, " {", 2));
  for (uint32_t i = 0; i < n; i++) {
    const isa_attr_t *at = &attrs[i];
    RILL_TRY(rill__buf_printf(b, "%s%s=", i ? ", " : "", at->name));
    switch (at->kind) {
      case ISA_ATTR_INT: RILL_TRY(rill__buf_printf(b, "%lld", (long long)at->ints[0])); break;
      case ISA_ATTR_FLOAT: RILL_TRY(print_float(b, at->floats[0], false)); break;
      case ISA_ATTR_BOOL: RILL_TRY(rill__buf_printf(b, "%s", at->ints[0] ? "true" : "false")); break;
      case ISA_ATTR_STRING: RILL_TRY(isa_print_string(b, at->str)); break;
      case ISA_ATTR_DTYPE: RILL_TRY(rill__buf_printf(b, "%s", rill_dtype_name((rill_dtype_t)at->ints[0]))); break;
      case ISA_ATTR_INTS: case ISA_ATTR_FLOATS:
        RILL_TRY(rill__buf_append(b, "[", 1));
        for (uint32_t j = 0; j < at->count; j++) {
          if (j) RILL_TRY(rill__buf_append(b, ", ", 2));
          if (at->kind == ISA_ATTR_INTS) RILL_TRY(print_size(b, at->ints[j]));
          else RILL_TRY(print_float(b, at->floats[j], false));
        }
        RILL_TRY(rill__buf_append(b, "]", 1));
        break;
      default: break;
    }
  }
  return rill__buf_append(b, "}", 1);
}

/* The shortest text that reads back to the same element bits. */
static rill_status_t print_elem(rill_buf_t *b, rill_dtype_t d, const void *data, size_t i) {
  char buf[64];
  switch (d) {
    case RILL_F32: return print_float(b, ((const float *)data)[i], true);
    case RILL_F64: return print_float(b, ((const double *)data)[i], false);
    case RILL_F16: case RILL_BF16: {
      uint16_t bits = ((const uint16_t *)data)[i];
      float v = d == RILL_F16 ? rill__f16_to_f32(bits) : rill__bf16_to_f32(bits);
      if (isnan(v) || isinf(v)) return print_float(b, v, true);
      for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        float back = (float)strtod(buf, NULL);
        uint16_t bb = d == RILL_F16 ? rill__f32_to_f16(back) : rill__f32_to_bf16(back);
        if (bb == bits) break;
      }
      if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
      return rill__buf_printf(b, "%s", buf);
    }
    case RILL_BOOL: return rill__buf_printf(b, "%s", ((const uint8_t *)data)[i] ? "true" : "false");
    case RILL_U64: return rill__buf_printf(b, "%llu", (unsigned long long)((const uint64_t *)data)[i]);
    default: return rill__buf_printf(b, "%lld", (long long)rill__load_i(data, d, i));
  }
}

static rill_status_t print_nested(rill_buf_t *b, const rill_type_t *t, const void *data, int dim,
                                  size_t *idx) {
  if (dim == t->rank) return print_elem(b, t->dtype, data, (*idx)++);
  RILL_TRY(rill__buf_append(b, "[", 1));
  for (int64_t i = 0; i < t->dims[dim]; i++) {
    if (i) RILL_TRY(rill__buf_append(b, ", ", 2));
    RILL_TRY(print_nested(b, t, data, dim + 1, idx));
  }
  return rill__buf_append(b, "]", 1);
}

static bool valid_name(const char *s) {
  if (!s || !*s) return false;
  bool digits = true;
  for (const char *p = s; *p; p++) if (!isdigit((unsigned char)*p)) digits = false;
  if (digits) return true;
  if (!isalpha((unsigned char)s[0]) && s[0] != '_') return false;
  for (const char *p = s; *p; p++)
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.') return false;
  return true;
}

/* Register names for printing: the module's own when valid and unique. */
typedef struct names {
  char **n;
  uint32_t count;
  const rill_allocator_t *a;
} names_t;

static void names_free(names_t *ns) {
  for (uint32_t i = 0; i < ns->count; i++) rill__free(ns->a, ns->n[i]);
  rill__free(ns->a, ns->n);
}

static bool name_taken(const names_t *ns, uint32_t upto, const char *s) {
  for (uint32_t i = 0; i < upto; i++) if (strcmp(ns->n[i], s) == 0) return true;
  return false;
}

static rill_status_t make_names(const rill_allocator_t *a, const isa_func_t *f, names_t *ns) {
  ns->a = a;
  ns->count = 0;
  ns->n = rill__calloc(a, f->nregs ? f->nregs : 1, sizeof(char *));
  if (!ns->n) return rill__oom();
  for (uint32_t i = 0; i < f->nregs; i++) {
    char buf[64];
    const char *want = f->regs[i].name;
    /* Quadratic uniqueness checks are fine for printing; huge functions fall back to numbers. */
    bool ok = valid_name(want) && (f->nregs > 20000 || !name_taken(ns, i, want));
    if (!ok) {
      snprintf(buf, sizeof buf, "r%u", i);
      for (int k = 1; f->nregs <= 20000 && name_taken(ns, i, buf); k++) snprintf(buf, sizeof buf, "r%u_%d", i, k);
      want = buf;
    }
    if (!(ns->n[i] = rill__strndup(a, want, strlen(want)))) return rill__oom();
    ns->count++;
  }
  return NULL;
}

static rill_status_t print_reglist(rill_buf_t *b, const names_t *ns, const isa_operand_t *o) {
  RILL_TRY(rill__buf_append(b, "(", 1));
  for (uint32_t j = 0; j < o->value; j++)
    RILL_TRY(rill__buf_printf(b, "%s%%%s", j ? ", " : "", ns->n[o->list[j]]));
  return rill__buf_append(b, ")", 1);
}

static rill_status_t print_func(rill_buf_t *b, const isa_module_t *m, const isa_func_t *f,
                                const rill_allocator_t *a) {
  names_t ns;
  rill_status_t st = make_names(a, f, &ns);
  uint8_t *target = NULL;
  if (st) goto done;
  target = rill__calloc(a, f->ncode ? f->ncode : 1, 1);
  if (!target) { st = rill__oom(); goto done; }

#define P(x) do { if ((st = (x))) goto done; } while (0)
  P(rill__buf_printf(b, "\nfunc @%s(", f->name));
  for (uint32_t i = 0; i < f->nparams; i++) {
    P(rill__buf_printf(b, "%s%%%s: ", i ? ", " : "", ns.n[i]));
    P(isa_print_type(b, &f->regs[i].type));
  }
  P(rill__buf_append(b, ") -> (", 6));
  for (uint32_t i = 0; i < f->nresults; i++) {
    if (i) P(rill__buf_append(b, ", ", 2));
    P(isa_print_type(b, &f->results[i]));
  }
  P(rill__buf_printf(b, ") lowered(streams=%u, events=%u) {\n", f->nstreams, f->nevents));
  for (uint32_t i = f->nparams; i < f->nregs; i++) {
    if (f->regs[i].storage) {
      P(rill__buf_printf(b, "  reg %%%s : storage(%llu)\n", ns.n[i], (unsigned long long)f->regs[i].storage_size));
    } else {
      P(rill__buf_printf(b, "  reg %%%s : ", ns.n[i]));
      P(isa_print_type(b, &f->regs[i].type));
      P(rill__buf_append(b, "\n", 1));
    }
  }
  isa_insn_t in;
  const char *why;
  for (uint32_t pc = 0; pc < f->ncode; pc += in.len) {
    if (!isa_decode(f->code, f->ncode, pc, &in, &why)) break;
    for (int i = 0; i < in.noperands; i++)
      if (in.operands[i].kind == 'j' && in.operands[i].value < f->ncode) target[in.operands[i].value] = 1;
  }
  uint32_t li = 0;
  for (uint32_t pc = 0; pc < f->ncode; pc += in.len) {
    if (!isa_decode(f->code, f->ncode, pc, &in, &why)) {
      P(rill__status(RILL_MALFORMED, "@%s+%u: %s", f->name, pc, why));
    }
    if (target[pc]) P(rill__buf_printf(b, "L%u:\n", pc));
    while (li < f->nlocs && f->locs[li].pc < pc) li++;
    if (li < f->nlocs && f->locs[li].pc == pc)
      P(rill__buf_printf(b, "  loc %u %u\n", f->locs[li].line, f->locs[li].col));
    P(rill__buf_printf(b, "  %s", isa_opinfo[in.op].mnemonic));
    for (int i = 0; i < in.noperands; i++) {
      const isa_operand_t *o = &in.operands[i];
      P(rill__buf_append(b, i ? ", " : " ", i ? 2 : 1));
      switch (o->kind) {
        case 'd': case 'u': case 'w': case 's': P(rill__buf_printf(b, "%%%s", ns.n[o->value])); break;
        case 'k': P(rill__buf_printf(b, "%%%s", m->consts[o->value].name)); break;
        case 'T': P(rill__buf_printf(b, "%%%s", m->states[o->value].name)); break;
        case 'o': P(rill__buf_printf(b, "$%u", o->value)); break;
        case 'f': P(rill__buf_printf(b, "@%s", m->funcs[o->value].name)); break;
        case 'j': P(rill__buf_printf(b, "L%u", o->value)); break;
        case 'U': case 'W': case 'D': P(print_reglist(b, &ns, o)); break;
        default: P(rill__buf_printf(b, "%u", o->value)); break;
      }
    }
    P(rill__buf_append(b, "\n", 1));
  }
  P(rill__buf_append(b, "}\n", 2));
#undef P
done:
  rill__free(a, target);
  names_free(&ns);
  return st;
}

rill_status_t isa_print_opdecl(rill_buf_t *b, const isa_opdecl_t *o) {
  RILL_TRY(rill__buf_printf(b, "%s(", o->name));
  for (uint32_t j = 0; j < o->nin; j++) {
    if (j) RILL_TRY(rill__buf_append(b, ", ", 2));
    RILL_TRY(isa_print_type(b, &o->in[j]));
  }
  RILL_TRY(rill__buf_append(b, ") -> (", 6));
  for (uint32_t j = 0; j < o->nout; j++) {
    if (j) RILL_TRY(rill__buf_append(b, ", ", 2));
    RILL_TRY(isa_print_type(b, &o->out[j]));
  }
  RILL_TRY(rill__buf_append(b, ")", 1));
  return isa_print_attrs(b, o->attrs, o->nattrs);
}

static rill_status_t disassemble(const isa_module_t *m, rill_buf_t *b);

rill_status_t isa_print_opdecl_at(rill_buf_t *b, const isa_module_t *m, const isa_opdecl_t *o, const int64_t *vals) {
  print_syms = &m->syms;
  print_vals = vals;
  print_bad = false;
  rill_status_t st = isa_print_opdecl(b, o);
  if (!st && print_bad) st = rill__status(RILL_INVALID_ARGUMENT, "op %s: a size is negative or overflows at the given sizes", o->name);
  print_syms = NULL;
  print_vals = NULL;
  return st;
}

/* A kernel choice tree in prefix form: "CANDIDATE" or (le VAR N YES NO). */
static rill_status_t print_tree(rill_buf_t *b, const isa_module_t *m, const isa_tree_t *t, uint32_t i) {
  const rill_tree_node_t *x = &t->nodes[i];
  if (x->var < 0) return isa_print_string(b, t->cands[x->use]);
  RILL_TRY(rill__buf_printf(b, "(le %s %lld ", m->syms.vars.items[x->var].name, (long long)x->le));
  RILL_TRY(print_tree(b, m, t, x->yes));
  RILL_TRY(rill__buf_append(b, " ", 1));
  RILL_TRY(print_tree(b, m, t, x->no));
  return rill__buf_append(b, ")", 1);
}

rill_status_t isa_disassemble(const isa_module_t *m, rill_buf_t *b) {
  RILL_TRY(rill__buf_printf(b, "# lowered form, bytecode %d.%d\n", RILL_BYTECODE_MAJOR, RILL_BYTECODE_MINOR));
  print_syms = &m->syms;
  rill_status_t st = disassemble(m, b);
  print_syms = NULL;
  return st;
}

static rill_status_t disassemble(const isa_module_t *m, rill_buf_t *b) {
  const rill_allocator_t *a = b->allocator;
  if (m->name) {
    RILL_TRY(rill__buf_append(b, "module ", 7));
    RILL_TRY(isa_print_string(b, m->name));
    RILL_TRY(rill__buf_append(b, "\n", 1));
  }
  if (m->source) {
    RILL_TRY(rill__buf_append(b, "source ", 7));
    RILL_TRY(isa_print_string(b, m->source));
    RILL_TRY(rill__buf_append(b, "\n", 1));
  }
  if (m->precision) RILL_TRY(rill__buf_printf(b, "precision %s\n", rill_precision_name((rill_precision_t)m->precision)));
  for (uint32_t i = 0; i < m->nweights; i++) {
    RILL_TRY(rill__buf_append(b, "weights ", 8));
    RILL_TRY(isa_print_string(b, m->weights[i].path));
    RILL_TRY(rill__buf_printf(b, " as %s\n", m->weights[i].alias));
  }
  for (size_t i = 0; i < m->syms.vars.len; i++) {
    const isa_symvar_t *v = &m->syms.vars.items[i];
    if (v->declared) RILL_TRY(rill__buf_printf(b, "dim %s in [%lld, %lld]\n", v->name, (long long)v->lo, (long long)v->hi));
  }
  for (uint32_t i = 0; i < m->nconsts; i++) {
    const isa_const_t *c = &m->consts[i];
    RILL_TRY(rill__buf_printf(b, "const %%%s : ", c->name));
    RILL_TRY(isa_print_type(b, &c->type));
    RILL_TRY(rill__buf_append(b, " = ", 3));
    if (c->origin == ISA_CONST_WEIGHTS) {
      RILL_TRY(rill__buf_printf(b, "%s[", m->weights[c->weights].alias));
      RILL_TRY(isa_print_string(b, c->tensor));
      RILL_TRY(rill__buf_append(b, c->linked ? "] linked" : "]", c->linked ? 8 : 1));
      if (c->shard_parts && c->shard_groups > 1)
        RILL_TRY(rill__buf_printf(b, " {shard=%u, ranks=%u, groups=%u}", c->shard_axis, c->shard_parts, c->shard_groups));
      else if (c->shard_parts) RILL_TRY(rill__buf_printf(b, " {shard=%u, ranks=%u}", c->shard_axis, c->shard_parts));
      else if (c->stage_ranks) RILL_TRY(rill__buf_printf(b, " {stage=%u, ranks=%u}", c->stage, c->stage_ranks));
    } else if (c->origin == ISA_CONST_FILL) {
      RILL_TRY(rill__buf_append(b, "fill(", 5));
      RILL_TRY(print_elem(b, c->type.dtype, c->data, 0));
      RILL_TRY(rill__buf_append(b, ")", 1));
    } else {
      size_t idx = 0;
      RILL_TRY(print_nested(b, &c->type, c->data, 0, &idx));
    }
    RILL_TRY(rill__buf_append(b, "\n", 1));
  }
  /* States as the surface writes them: zeros, or `= %CONST` (a weights
   * reference in the source became that constant). */
  for (uint32_t i = 0; i < m->nstates; i++) {
    const isa_state_t *x = &m->states[i];
    RILL_TRY(rill__buf_printf(b, "state %%%s : ", x->name));
    RILL_TRY(isa_print_type(b, &x->type));
    if (x->init != ISA_NONE) RILL_TRY(rill__buf_printf(b, " = %%%s", m->consts[x->init].name));
    RILL_TRY(rill__buf_append(b, "\n", 1));
  }
  for (uint32_t i = 0; i < m->nops; i++) {
    RILL_TRY(rill__buf_printf(b, "op $%u = ", i));
    RILL_TRY(isa_print_opdecl(b, &m->ops[i]));
    RILL_TRY(rill__buf_append(b, "\n", 1));
  }
  for (uint32_t i = 0; i < m->ntrees; i++) {
    RILL_TRY(rill__buf_printf(b, "choose $%u = ", m->trees[i].op));
    RILL_TRY(print_tree(b, m, &m->trees[i], 0));
    RILL_TRY(rill__buf_append(b, "\n", 1));
  }
  for (uint32_t i = 0; i < m->nfuncs; i++) RILL_TRY(print_func(b, m, &m->funcs[i], a));
  return NULL;
}
