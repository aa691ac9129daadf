/* verify.c: the bytecode verifier. The interpreter runs only verified
 * modules and checks nothing itself, so everything it relies on is proved
 * here: operands in range, register types, jump targets on instruction
 * starts, op signatures (through the op registry's resolver), calls and
 * returns matching signatures, no read of an undefined register, no write
 * into a read-only tensor, branch conditions read on the host only after a
 * host wait, and the stream discipline.
 *
 * Stream discipline, as a forward dataflow over basic blocks. For each
 * register the state keeps the set of streams on which its current value
 * may be read (`safe`); writing a register on stream s makes it {s}. An
 * event recorded on stream s covers every register safe on s; a wait for
 * that event on stream t adds t to each covered register. A stream's
 * `vis` set names the streams whose work so far it has seen, so a return
 * can demand that every stream that worked is joined into stream 0.
 * At merge points sets intersect (what holds on every path), the set of
 * streams that worked unites, and the current stream must agree.
 *
 * Devices: each stream belongs to one device (isa_func_devices), and each
 * register keeps the set of devices its value lives on (`dmask`: the device
 * of the stream that wrote it; every device for a constant). A read needs
 * both the stream in `safe` and the stream's device in `dmask`; only
 * copy_device reads a value of another device, ordered by events as any
 * cross-stream read. Calls are issued on device 0's streams.
 */
#include "isa.h"

#include <stdio.h>
#include <stdlib.h>

enum { F_DEF = 1, F_WR = 2, F_HOST = 4 };

typedef struct vstate {
  bool reached;
  uint8_t cur;
  uint64_t devbit;             /* the current stream's device, as a bit */
  uint64_t worked;
  uint64_t vis[ISA_MAX_STREAMS];
  uint64_t ev_vis[ISA_MAX_EVENTS];
  uint8_t *flags;
  uint64_t *safe, *evcov, *dmask;
} vstate_t;

typedef struct verifier {
  const isa_module_t *m;
  const isa_func_t *f;
  const rill_allocator_t *a;
  uint32_t fi;
  uint8_t sdev[ISA_MAX_STREAMS]; /* each stream's device */
} verifier_t;

static rill_status_t at(const verifier_t *v, uint32_t pc, const char *fmt, ...) RILL_PRINTF(3, 4);
static rill_status_t at(const verifier_t *v, uint32_t pc, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *mn = pc < v->f->ncode && v->f->code[pc] < ISA_OP_COUNT
                       ? isa_opinfo[v->f->code[pc]].mnemonic : "?";
  uint32_t line, col;
  if (v->m->source && isa_func_loc(v->f, pc, &line, &col))
    return rill__status(RILL_VERIFY_ERROR, "verification failed: @%s+%u (%s, from %s:%u:%u): %s",
                        v->f->name, pc, mn, v->m->source, line, col, msg);
  return rill__status(RILL_VERIFY_ERROR, "verification failed: @%s+%u (%s): %s", v->f->name, pc,
                      mn, msg);
}

static const char *regname(const isa_func_t *f, uint32_t r, char *buf, size_t n) {
  if (f->regs[r].name) snprintf(buf, n, "%%%s", f->regs[r].name);
  else snprintf(buf, n, "register %u", r);
  return buf;
}

/* ---- per-instruction operand and type checks ---- */
static rill_status_t check_operands(const verifier_t *v, const isa_insn_t *in) {
  const isa_func_t *f = v->f;
  const isa_module_t *m = v->m;
  for (int i = 0; i < in->noperands; i++) {
    const isa_operand_t *o = &in->operands[i];
    uint32_t x = o->value;
    switch (o->kind) {
      case 'd': case 'w':
        if (x >= f->nregs || f->regs[x].storage) return at(v, in->pc, "operand %d: not a tensor register", i + 1);
        break;
      case 'u':
        if (x >= f->nregs) return at(v, in->pc, "operand %d: register %u out of range", i + 1, x);
        break;
      case 's':
        if (x >= f->nregs || !f->regs[x].storage) return at(v, in->pc, "operand %d: not a storage register", i + 1);
        break;
      case 'k': if (x >= m->nconsts) return at(v, in->pc, "constant %u out of range", x); break;
      case 'o': if (x >= m->nops) return at(v, in->pc, "op %u out of range", x); break;
      case 'f': if (x >= m->nfuncs) return at(v, in->pc, "function %u out of range", x); break;
      case 'j': if (x >= f->ncode) return at(v, in->pc, "jump target %u out of range", x); break;
      case 'S': if (x >= f->nstreams) return at(v, in->pc, "stream %u not below the function's %u", x, f->nstreams); break;
      case 'E': if (x >= f->nevents) return at(v, in->pc, "event %u not below the function's %u", x, f->nevents); break;
      case 'V': if (x >= ISA_MAX_DEVICES) return at(v, in->pc, "device %u not below %d", x, ISA_MAX_DEVICES); break;
      case 'T': if (x >= m->nstates) return at(v, in->pc, "state %u out of range", x); break;
      case 'i': break;
      case 'U': case 'W': case 'D':
        for (uint32_t j = 0; j < x; j++) {
          uint32_t r = o->list[j];
          if (r >= f->nregs || f->regs[r].storage)
            return at(v, in->pc, "operand %d item %u: not a tensor register", i + 1, j + 1);
          if (o->kind != 'U')
            for (uint32_t k = 0; k < j; k++)
              if (o->list[k] == r) return at(v, in->pc, "register %u written twice", r);
        }
        break;
      default: return at(v, in->pc, "internal: bad format letter");
    }
  }
  return NULL;
}

static rill_status_t check_types(const verifier_t *v, const isa_insn_t *in) {
  const isa_func_t *f = v->f;
  const isa_module_t *m = v->m;
  const isa_operand_t *o = in->operands;
  char b1[64], b2[64];
  switch (in->op) {
    case ISA_OP_VIEW: {
      const isa_reg_t *d = &f->regs[o[0].value], *s = &f->regs[o[1].value];
      size_t bytes;
      if (isa_type_is_sym(&d->type)) {
        /* the storage must hold the largest size the ranges allow */
        if (!isa_sym_type_max_bytes(&m->syms, &d->type, &bytes))
          return at(v, in->pc, "view of a type with an unbounded size (allocate it per run)");
      } else {
        rill__type_sizes(&d->type, NULL, &bytes);
      }
      if (o[2].value % rill_dtype_size(d->type.dtype))
        return at(v, in->pc, "offset %u not aligned to %s", o[2].value, rill_dtype_name(d->type.dtype));
      if (o[2].value > s->storage_size || bytes > s->storage_size - o[2].value)
        return at(v, in->pc, "view of %zu bytes at offset %u exceeds storage of %llu bytes", bytes,
                  o[2].value, (unsigned long long)s->storage_size);
      break;
    }
    case ISA_OP_LOAD_CONST:
      if (!rill__type_eq(&f->regs[o[0].value].type, &m->consts[o[1].value].type))
        return at(v, in->pc, "constant %%%s has type %s, register has %s", m->consts[o[1].value].name,
                  rill_type_format(&m->consts[o[1].value].type, b1, 64),
                  rill_type_format(&f->regs[o[0].value].type, b2, 64));
      break;
    case ISA_OP_LOAD_STATE:
      if (!rill__type_eq(&f->regs[o[0].value].type, &m->states[o[1].value].type))
        return at(v, in->pc, "state %%%s has type %s, register has %s", m->states[o[1].value].name,
                  rill_type_format(&m->states[o[1].value].type, b1, 64),
                  rill_type_format(&f->regs[o[0].value].type, b2, 64));
      break;
    case ISA_OP_MOVE: {
      const isa_reg_t *d = &f->regs[o[0].value], *s = &f->regs[o[1].value];
      if (d->storage || s->storage || !rill__type_eq(&d->type, &s->type))
        return at(v, in->pc, "move between registers of different types");
      break;
    }
    case ISA_OP_ALIAS: {
      const isa_reg_t *d = &f->regs[o[0].value], *s = &f->regs[o[1].value];
      int64_t nd, ns;
      if (s->storage) return at(v, in->pc, "alias of a storage register");
      rill_status_t st = isa_sym_numel((isa_syms_t *)&m->syms, &d->type, &nd);
      if (!st) st = isa_sym_numel((isa_syms_t *)&m->syms, &s->type, &ns);
      if (st) return st;
      /* (a count over sizes bound at run time is checked when the alias is made) */
      if (d->type.dtype != s->type.dtype || (nd != ns && !isa_sym_runtime(&m->syms, nd) && !isa_sym_runtime(&m->syms, ns)))
        return at(v, in->pc, "alias %s of %s: the dtype and element count must match", rill_type_format(&d->type, b1, 64),
                  rill_type_format(&s->type, b2, 64));
      break;
    }
    case ISA_OP_INVOKE: {
      const isa_opdecl_t *od = &m->ops[o[0].value];
      if (o[1].value != od->nin || o[2].value != od->nout)
        return at(v, in->pc, "op %s takes %u inputs and %u outputs, got %u and %u", od->name,
                  od->nin, od->nout, o[1].value, o[2].value);
      for (uint32_t j = 0; j < od->nin; j++)
        if (!rill__type_eq(&f->regs[o[1].list[j]].type, &od->in[j]))
          return at(v, in->pc, "op %s input %u: want %s, register has %s", od->name, j + 1,
                    rill_type_format(&od->in[j], b1, 64), rill_type_format(&f->regs[o[1].list[j]].type, b2, 64));
      for (uint32_t j = 0; j < od->nout; j++)
        if (!rill__type_eq(&f->regs[o[2].list[j]].type, &od->out[j]))
          return at(v, in->pc, "op %s output %u: want %s, register has %s", od->name, j + 1,
                    rill_type_format(&od->out[j], b1, 64), rill_type_format(&f->regs[o[2].list[j]].type, b2, 64));
      break;
    }
    case ISA_OP_CALL: {
      const isa_func_t *g = &m->funcs[o[0].value];
      if (o[1].value != g->nparams || o[2].value != g->nresults)
        return at(v, in->pc, "@%s takes %u arguments and returns %u results, got %u and %u", g->name,
                  g->nparams, g->nresults, o[1].value, o[2].value);
      for (uint32_t j = 0; j < g->nparams; j++)
        if (j >= g->nregs || !rill__type_eq(&f->regs[o[1].list[j]].type, &g->regs[j].type))
          return at(v, in->pc, "@%s argument %u has the wrong type", g->name, j + 1);
      for (uint32_t j = 0; j < g->nresults; j++)
        if (!rill__type_eq(&f->regs[o[2].list[j]].type, &g->results[j]))
          return at(v, in->pc, "@%s result %u has the wrong type", g->name, j + 1);
      break;
    }
    case ISA_OP_RETURN:
      if (o[0].value != f->nresults) return at(v, in->pc, "returns %u values, the function declares %u", o[0].value, f->nresults);
      for (uint32_t j = 0; j < f->nresults; j++)
        if (!rill__type_eq(&f->regs[o[0].list[j]].type, &f->results[j]))
          return at(v, in->pc, "result %u has the wrong type", j + 1);
      break;
    case ISA_OP_HOST_WAIT:
      if (f->regs[o[0].value].storage) return at(v, in->pc, "host wait on a storage register");
      break;
    case ISA_OP_BIND_DIMS: {
      /* The names: bool[0, v1..vk], each vi a variable; the sizes: i64[k] or i64[] (k = 1), read just before. */
      const rill_type_t *d = &f->regs[o[0].value].type, *s = &f->regs[o[1].value].type;
      int k = d->rank - 1;
      if (d->dtype != RILL_BOOL || k < 1 || d->dims[0] != 0)
        return at(v, in->pc, "bind_dims names its variables as bool[0, v1, ...], register has %s", isa_sym_format_type(&m->syms, d, b1, 64));
      for (int j = 1; j <= k; j++) {
        const isa_symexpr_t *e = isa_dim_is_sym(d->dims[j]) && isa_sym_id(d->dims[j]) < m->syms.exprs.len ? &m->syms.exprs.items[isa_sym_id(d->dims[j])] : NULL;
        if (!e || e->nterms != 1 || e->terms[0].coef != 1 || e->terms[0].natoms != 1 || e->terms[0].atoms[0] >= m->syms.atoms.len ||
            m->syms.atoms.items[e->terms[0].atoms[0]].is_div)
          return at(v, in->pc, "bind_dims: dimension %d of %s is not a shape variable", j, isa_sym_format_type(&m->syms, d, b1, 64));
        for (int q = 1; q < j; q++)
          if (d->dims[q] == d->dims[j]) return at(v, in->pc, "bind_dims binds %s twice", isa_sym_format(&m->syms, d->dims[j], b1, 64));
      }
      if (s->dtype != RILL_I64 || s->rank > 1 || (s->rank == 0 && k != 1) || (s->rank == 1 && s->dims[0] != k))
        return at(v, in->pc, "bind_dims binds %d variable%s from %s: want i64[%d]%s", k, k == 1 ? "" : "s",
                  isa_sym_format_type(&m->syms, s, b2, 64), k, k == 1 ? " or i64[]" : "");
      break;
    }
    case ISA_OP_COPY_DEVICE: {
      const isa_reg_t *d = &f->regs[o[0].value], *s = &f->regs[o[1].value];
      if (s->storage || !rill__type_eq(&d->type, &s->type)) return at(v, in->pc, "copy between registers of different types");
      break;
    }
    case ISA_OP_BR_IF: {
      const isa_reg_t *c = &f->regs[o[0].value];
      if (c->storage || c->type.dtype != RILL_BOOL || c->type.rank != 0)
        return at(v, in->pc, "branch condition must be bool[]");
      break;
    }
    default: break;
  }
  return NULL;
}

/* ---- dataflow ---- */
typedef struct vctx {
  verifier_t *v;
  uint32_t nregs;
  vstate_t cur;
} vctx_t;

static rill_status_t state_alloc(const rill_allocator_t *a, vstate_t *s, uint32_t nregs) {
  memset(s, 0, sizeof *s);
  s->flags = rill__calloc(a, nregs ? nregs : 1, 1);
  s->safe = rill__calloc(a, nregs ? nregs : 1, 8);
  s->evcov = rill__calloc(a, nregs ? nregs : 1, 8);
  s->dmask = rill__calloc(a, nregs ? nregs : 1, 8);
  if (!s->flags || !s->safe || !s->evcov || !s->dmask) return rill__oom();
  return NULL;
}
static void state_free(const rill_allocator_t *a, vstate_t *s) {
  rill__free(a, s->flags);
  rill__free(a, s->safe);
  rill__free(a, s->evcov);
  rill__free(a, s->dmask);
}
static void state_copy(vstate_t *d, const vstate_t *s, uint32_t nregs) {
  uint8_t *fl = d->flags;
  uint64_t *sa = d->safe, *ev = d->evcov, *dm = d->dmask;
  *d = *s;
  d->flags = fl; d->safe = sa; d->evcov = ev; d->dmask = dm;
  memcpy(fl, s->flags, nregs);
  memcpy(sa, s->safe, 8 * (size_t)nregs);
  memcpy(ev, s->evcov, 8 * (size_t)nregs);
  memcpy(dm, s->dmask, 8 * (size_t)nregs);
}
/* d := d meet s; returns whether d changed, or -1 if the streams disagree. */
static int state_meet(vstate_t *d, const vstate_t *s, uint32_t nregs) {
  if (d->cur != s->cur) return -1;
  bool changed = false;
#define MEET(x, op) do { __typeof__(x) n_ = (x) op; if (n_ != (x)) { (x) = n_; changed = true; } } while (0)
  MEET(d->worked, | s->worked);
  for (int i = 0; i < ISA_MAX_STREAMS; i++) MEET(d->vis[i], & s->vis[i]);
  for (int i = 0; i < ISA_MAX_EVENTS; i++) MEET(d->ev_vis[i], & s->ev_vis[i]);
  for (uint32_t r = 0; r < nregs; r++) {
    MEET(d->flags[r], & s->flags[r]);
    MEET(d->safe[r], & s->safe[r]);
    MEET(d->evcov[r], & s->evcov[r]);
    MEET(d->dmask[r], & s->dmask[r]);
  }
#undef MEET
  return changed;
}

/* A write on the current stream: the value lives on its device (a constant, safe everywhere, on every device). */
static void define(vstate_t *s, uint32_t r, uint8_t flags, uint64_t safe) {
  s->flags[r] = flags;
  s->safe[r] = safe;
  s->evcov[r] = 0;
  s->dmask[r] = safe == ~0ull ? ~0ull : flags ? s->devbit : 0;
}
static unsigned first_device(uint64_t mask) { return mask ? (unsigned)__builtin_ctzll(mask) : 0; }
static void work(vstate_t *s, unsigned stream) {
  s->worked |= 1ull << stream;
  for (int t = 0; t < ISA_MAX_STREAMS; t++)
    if ((unsigned)t != stream) s->vis[t] &= ~(1ull << stream);
}

static rill_status_t need_read(vctx_t *c, uint32_t pc, uint32_t r, unsigned stream) {
  char b[80];
  if (!(c->cur.flags[r] & F_DEF))
    return at(c->v, pc, "%s read before it is defined on every path", regname(c->v->f, r, b, sizeof b));
  unsigned dev = c->v->sdev[stream];
  if (!(c->cur.dmask[r] & (1ull << dev)))
    return at(c->v, pc, "%s lives on device %u and is used on device %u (stream %u) without a copy_device",
              regname(c->v->f, r, b, sizeof b), first_device(c->cur.dmask[r]), dev, stream);
  if (!(c->cur.safe[r] & (1ull << stream)))
    return at(c->v, pc, "%s used on stream %u without an event ordering it after its write",
              regname(c->v->f, r, b, sizeof b), stream);
  return NULL;
}

static rill_status_t transfer(vctx_t *c, const isa_insn_t *in) {
  vstate_t *s = &c->cur;
  const isa_operand_t *o = in->operands;
  unsigned cur = s->cur;
  uint64_t bit = 1ull << cur;
  char b[80];
  s->devbit = 1ull << c->v->sdev[cur];
  switch (in->op) {
    case ISA_OP_NOP: case ISA_OP_GOTO: break;
    case ISA_OP_ALLOC_STORAGE: define(s, o[0].value, F_DEF | F_WR, bit); work(s, cur); break;
    case ISA_OP_VIEW:
      if (!(s->flags[o[1].value] & F_DEF)) return at(c->v, in->pc, "view of an unallocated storage");
      define(s, o[0].value, F_DEF | F_WR, s->safe[o[1].value]);
      s->evcov[o[0].value] = s->evcov[o[1].value];
      s->dmask[o[0].value] = s->dmask[o[1].value];
      break;
    case ISA_OP_ALLOC_TENSOR: define(s, o[0].value, F_DEF | F_WR, bit); work(s, cur); break;
    case ISA_OP_RELEASE:
      if (!(s->flags[o[0].value] & F_DEF))
        return at(c->v, in->pc, "release of undefined %s", regname(c->v->f, o[0].value, b, sizeof b));
      define(s, o[0].value, 0, 0);
      break;
    case ISA_OP_LOAD_CONST: define(s, o[0].value, F_DEF, ~0ull); break;
    case ISA_OP_LOAD_STATE:
      /* A state lives on the device it is loaded on (isa_state_devices: one
       * device in every function); its last writes (earlier runs, callees)
       * are ordered on stream 0, which the fork orders the others after. */
      define(s, o[0].value, F_DEF | F_WR, bit);
      break;
    case ISA_OP_MOVE: case ISA_OP_ALIAS: {
      uint32_t d = o[0].value, u = o[1].value;
      if (!(s->flags[u] & F_DEF))
        return at(c->v, in->pc, "%s read before it is defined on every path", regname(c->v->f, u, b, sizeof b));
      /* An alias is a new tensor object: it has no host copy of its own. */
      s->flags[d] = in->op == ISA_OP_ALIAS ? (uint8_t)(s->flags[u] & ~F_HOST) : s->flags[u];
      s->safe[d] = s->safe[u];
      s->evcov[d] = s->evcov[u];
      s->dmask[d] = s->dmask[u];
      break;
    }
    case ISA_OP_INVOKE:
      for (uint32_t j = 0; j < o[1].value; j++) RILL_TRY(need_read(c, in->pc, o[1].list[j], cur));
      for (uint32_t j = 0; j < o[2].value; j++) {
        uint32_t r = o[2].list[j];
        if (!(s->flags[r] & F_WR))
          return at(c->v, in->pc, "output %s is not a writable tensor", regname(c->v->f, r, b, sizeof b));
        RILL_TRY(need_read(c, in->pc, r, cur)); /* its memory must be ready on this stream */
      }
      for (uint32_t j = 0; j < o[2].value; j++) define(s, o[2].list[j], F_DEF | F_WR, bit);
      work(s, cur);
      break;
    case ISA_OP_CALL:
      if (c->v->sdev[cur]) return at(c->v, in->pc, "a call on stream %u of device %u (calls are issued on device 0's streams)", cur, c->v->sdev[cur]);
      for (uint32_t j = 0; j < o[1].value; j++) RILL_TRY(need_read(c, in->pc, o[1].list[j], cur));
      /* Results may be the callee's constants or arguments: read-only here. */
      for (uint32_t j = 0; j < o[2].value; j++) define(s, o[2].list[j], F_DEF, bit);
      work(s, cur);
      break;
    case ISA_OP_RETURN:
      for (uint32_t j = 0; j < o[0].value; j++) RILL_TRY(need_read(c, in->pc, o[0].list[j], 0));
      for (unsigned t = 1; t < ISA_MAX_STREAMS; t++)
        if ((s->worked & (1ull << t)) && !(s->vis[0] & (1ull << t)))
          return at(c->v, in->pc, "stream %u's work is not joined into stream 0 before return", t);
      break;
    case ISA_OP_HOST_WAIT:
      RILL_TRY(need_read(c, in->pc, o[0].value, cur));
      s->flags[o[0].value] |= F_HOST;
      break;
    case ISA_OP_BIND_DIMS:
      if (!(s->flags[o[1].value] & F_HOST))
        return at(c->v, in->pc, "bind_dims on %s without a host wait for it", regname(c->v->f, o[1].value, b, sizeof b));
      define(s, o[0].value, F_DEF | F_WR, bit);
      work(s, cur);
      break;
    case ISA_OP_BR_IF:
      if (!(s->flags[o[0].value] & F_HOST))
        return at(c->v, in->pc, "branch on %s without a host wait for it",
                  regname(c->v->f, o[0].value, b, sizeof b));
      break;
    case ISA_OP_CUDA_SET_STREAM: s->cur = (uint8_t)o[0].value; break;
    case ISA_OP_CUDA_SET_DEVICE_STREAM: s->cur = (uint8_t)o[1].value; break;
    case ISA_OP_COPY_DEVICE: {
      uint32_t d = o[0].value, u = o[1].value, from = o[2].value;
      if (!(s->flags[d] & F_WR)) return at(c->v, in->pc, "output %s is not a writable tensor", regname(c->v->f, d, b, sizeof b));
      RILL_TRY(need_read(c, in->pc, d, cur));
      if (!(s->flags[u] & F_DEF))
        return at(c->v, in->pc, "%s read before it is defined on every path", regname(c->v->f, u, b, sizeof b));
      if (!(s->dmask[u] & (1ull << from)))
        return at(c->v, in->pc, "copy_device from device %u of %s, which lives on device %u", from, regname(c->v->f, u, b, sizeof b),
                  first_device(s->dmask[u]));
      if (!(s->safe[u] & bit))
        return at(c->v, in->pc, "%s (device %u) copied on stream %u (device %u) without an event ordering it after its write",
                  regname(c->v->f, u, b, sizeof b), from, cur, c->v->sdev[cur]);
      define(s, d, F_DEF | F_WR, bit);
      work(s, cur);
      break;
    }
    case ISA_OP_CUDA_ADD_EVENT: {
      uint32_t e = o[0].value, st = o[1].value;
      uint64_t sb = 1ull << st, eb = 1ull << e;
      s->ev_vis[e] = s->vis[st] | sb;
      for (uint32_t r = 0; r < c->nregs; r++) {
        if (s->safe[r] & sb) s->evcov[r] |= eb;
        else s->evcov[r] &= ~eb;
      }
      break;
    }
    case ISA_OP_CUDA_WAIT_EVENT: {
      uint32_t e = o[0].value, st = o[1].value;
      uint64_t eb = 1ull << e;
      s->vis[st] |= s->ev_vis[e];
      for (uint32_t r = 0; r < c->nregs; r++)
        if (s->evcov[r] & eb) s->safe[r] |= 1ull << st;
      break;
    }
    default: return at(c->v, in->pc, "internal: unhandled opcode");
  }
  return NULL;
}

static bool func_devices(const isa_func_t *f, uint8_t out[ISA_MAX_STREAMS], uint32_t *out_ndevices, const char **out_why, uint32_t *out_pc) {
  bool named[ISA_MAX_STREAMS] = {false};
  uint32_t n = 1;
  memset(out, 0, ISA_MAX_STREAMS);
  isa_insn_t in;
  for (uint32_t pc = 0; pc < f->ncode; pc += in.len) {
    if (!isa_decode(f->code, f->ncode, pc, &in, out_why)) { *out_pc = pc; return false; }
    if (in.op != ISA_OP_CUDA_SET_DEVICE_STREAM) continue;
    uint32_t d = in.operands[0].value, s = in.operands[1].value;
    *out_pc = pc;
    if (d >= ISA_MAX_DEVICES || s >= ISA_MAX_STREAMS) { *out_why = "device or stream out of range"; return false; }
    if (s == 0 && d != 0) { *out_why = "stream 0 (the stream the function was called on) is on device 0"; return false; }
    if (named[s] && out[s] != d) { *out_why = "a stream is given two devices"; return false; }
    named[s] = true;
    out[s] = (uint8_t)d;
    if (d + 1 > n) n = d + 1;
  }
  *out_ndevices = n;
  return true;
}

bool isa_func_devices(const isa_func_t *f, uint8_t out[ISA_MAX_STREAMS], uint32_t *out_ndevices, const char **out_why) {
  uint32_t pc;
  return func_devices(f, out, out_ndevices, out_why, &pc);
}

bool isa_state_devices(const isa_module_t *m, uint8_t *out, uint32_t *out_state, const char **out_why) {
  if (!m->nstates) return true;
  uint8_t *seen = calloc(m->nstates, 1);
  if (!seen) { *out_state = 0; *out_why = "out of memory"; return false; }
  memset(out, 0, m->nstates);
  bool ok = true;
  for (uint32_t i = 0; ok && i < m->nfuncs; i++) {
    const isa_func_t *f = &m->funcs[i];
    uint8_t sdev[ISA_MAX_STREAMS];
    uint32_t nd, pc;
    *out_state = 0;
    const char *why;
    if (!func_devices(f, sdev, &nd, &why, &pc)) continue; /* (the function's own check says why) */
    unsigned cur = 0;
    isa_insn_t in;
    for (pc = 0; ok && pc < f->ncode; pc += in.len) {
      if (!isa_decode(f->code, f->ncode, pc, &in, &why)) break;
      if (in.op == ISA_OP_CUDA_SET_STREAM && in.operands[0].value < ISA_MAX_STREAMS) cur = in.operands[0].value;
      if (in.op == ISA_OP_CUDA_SET_DEVICE_STREAM && in.operands[1].value < ISA_MAX_STREAMS) cur = in.operands[1].value;
      if (in.op != ISA_OP_LOAD_STATE || in.operands[1].value >= m->nstates) continue;
      uint32_t k = in.operands[1].value;
      if (seen[k] && out[k] != sdev[cur]) {
        *out_state = k;
        *out_why = "loaded on two devices (a state lives on one device)";
        ok = false;
      }
      seen[k] = 1;
      out[k] = sdev[cur];
    }
  }
  free(seen);
  return ok;
}

/* What a module's code holds that older versions lack. */
static void scan_ops(const isa_module_t *m, bool *out_bind, bool *out_devices) {
  *out_bind = *out_devices = false;
  for (uint32_t i = 0; i < m->nfuncs; i++) {
    const isa_func_t *f = &m->funcs[i];
    isa_insn_t in;
    const char *why;
    for (uint32_t pc = 0; pc < f->ncode && isa_decode(f->code, f->ncode, pc, &in, &why); pc += in.len) {
      if (in.op == ISA_OP_BIND_DIMS) *out_bind = true;
      if (in.op == ISA_OP_CUDA_SET_DEVICE_STREAM || in.op == ISA_OP_COPY_DEVICE) *out_devices = true;
    }
  }
}

/* Whether m names a dtype of bytecode 1.8 (i16 u16 u32 u64) anywhere. */
static bool uses_new_dtypes(const isa_module_t *m) {
#define NEW_DT(d) ((unsigned)(d) >= RILL_I16)
  for (uint32_t i = 0; i < m->nconsts; i++)
    if (NEW_DT(m->consts[i].type.dtype)) return true;
  for (uint32_t i = 0; i < m->nstates; i++)
    if (NEW_DT(m->states[i].type.dtype)) return true;
  for (uint32_t i = 0; i < m->nops; i++) {
    const isa_opdecl_t *o = &m->ops[i];
    for (uint32_t j = 0; j < o->nin; j++)
      if (NEW_DT(o->in[j].dtype)) return true;
    for (uint32_t j = 0; j < o->nout; j++)
      if (NEW_DT(o->out[j].dtype)) return true;
    for (uint32_t j = 0; j < o->nattrs; j++)
      if (o->attrs[j].kind == ISA_ATTR_DTYPE && NEW_DT(o->attrs[j].ints[0])) return true;
  }
  for (uint32_t i = 0; i < m->nfuncs; i++) {
    const isa_func_t *f = &m->funcs[i];
    for (uint32_t r = 0; r < f->nregs; r++)
      if (!f->regs[r].storage && NEW_DT(f->regs[r].type.dtype)) return true;
    for (uint32_t r = 0; r < f->nresults; r++)
      if (NEW_DT(f->results[r].dtype)) return true;
  }
  return false;
#undef NEW_DT
}

unsigned isa_module_minor(const isa_module_t *m) {
  for (uint32_t i = 0; i < m->nconsts; i++)
    if (m->consts[i].sum64) return 12;
  bool bind, devices;
  scan_ops(m, &bind, &devices);
  if (m->nstates && devices && m->nstates <= ISA_MAX_STATES) {
    uint8_t dev[ISA_MAX_STATES];
    uint32_t k;
    const char *why;
    if (isa_state_devices(m, dev, &k, &why))
      for (uint32_t i = 0; i < m->nstates; i++)
        if (dev[i]) return 11;
  }
  for (uint32_t i = 0; i < m->nconsts; i++)
    if (m->consts[i].stage_ranks) return 10;
  for (uint32_t i = 0; i < m->nconsts; i++)
    if (m->consts[i].shard_parts) return 9;
  if (uses_new_dtypes(m)) return 8;
  return bind ? 7 : m->nstates ? 6 : m->precision ? 5 : devices ? 4 : m->ntrees ? 3 : 2;
}

bool isa_module_uses_devices(const isa_module_t *m) {
  bool bind, devices;
  scan_ops(m, &bind, &devices);
  return devices;
}

static rill_status_t verify_func(verifier_t *v) {
  const isa_func_t *f = v->f;
  const rill_allocator_t *a = v->a;
  for (uint32_t i = 0; i < f->nparams; i++)
    if (f->regs[i].storage) return rill__status(RILL_VERIFY_ERROR, "verification failed: @%s: parameter %u is a storage register", f->name, i + 1);
  if (f->ncode == 0) return rill__status(RILL_VERIFY_ERROR, "verification failed: @%s has no code", f->name);
  if (f->nstreams < 1 || f->nstreams > ISA_MAX_STREAMS || f->nevents > ISA_MAX_EVENTS)
    return rill__status(RILL_VERIFY_ERROR, "verification failed: @%s uses %u streams and %u events (streams 1..%d, events 0..%d)",
                        f->name, f->nstreams, f->nevents, ISA_MAX_STREAMS, ISA_MAX_EVENTS);

  rill_status_t st = NULL;
  uint8_t *start = rill__calloc(a, f->ncode, 1);   /* 1: instruction start, 2: block leader */
  uint32_t *block_of = rill__calloc(a, f->ncode, 4);
  vstate_t *states = NULL;
  uint32_t *work_list = NULL, nblocks = 0;
  uint32_t *leaders = NULL;
  uint8_t *queued = NULL;
  vctx_t c = {.v = v, .nregs = f->nregs};
  bool cur_alloc = false;
  if (!start || !block_of) { st = rill__oom(); goto done; }

  /* Pass 1: decode, check operands and types, mark starts and leaders. */
  isa_insn_t in;
  const char *why;
  uint32_t last_pc = 0;
  start[0] |= 2;
  for (uint32_t pc = 0; pc < f->ncode; pc += in.len) {
    if (!isa_decode(f->code, f->ncode, pc, &in, &why)) { st = at(v, pc, "%s", why); goto done; }
    start[pc] |= 1;
    last_pc = pc;
    if ((st = check_operands(v, &in)) || (st = check_types(v, &in))) goto done;
    for (int i = 0; i < in.noperands; i++)
      if (in.operands[i].kind == 'j') start[in.operands[i].value] |= 2;
    if ((isa_opinfo[in.op].flags & ISA_F_TERM) && pc + in.len < f->ncode) start[pc + in.len] |= 2;
  }
  {
    uint32_t ndev, bad;
    if (!func_devices(f, v->sdev, &ndev, &why, &bad)) { st = at(v, bad, "%s", why); goto done; }
  }
  {
    isa_insn_t last;
    isa_decode(f->code, f->ncode, last_pc, &last, &why);
    if (!(isa_opinfo[last.op].flags & ISA_F_TERM)) { st = at(v, last_pc, "code falls off the end of the function"); goto done; }
  }
  for (uint32_t pc = 0; pc < f->ncode; pc++) {
    if ((start[pc] & 2) && !(start[pc] & 1)) {
      st = rill__status(RILL_VERIFY_ERROR, "verification failed: @%s: jump target %u is not an instruction start", f->name, pc);
      goto done;
    }
    if (start[pc] & 2) nblocks++;
  }
  /* Bound the verifier's own memory: one state per block. */
  if ((uint64_t)nblocks * ((uint64_t)f->nregs * 17 + 1024) > ((uint64_t)1 << 31)) {
    st = rill__status(RILL_VERIFY_ERROR, "verification failed: @%s is too large to verify (%u blocks, %u registers)", f->name, nblocks, f->nregs);
    goto done;
  }
  states = rill__calloc(a, nblocks, sizeof(vstate_t));
  leaders = rill__calloc(a, nblocks, 4);
  work_list = rill__calloc(a, nblocks, 4);
  queued = rill__calloc(a, nblocks, 1);
  if (!states || !leaders || !work_list || !queued) { st = rill__oom(); goto done; }
  for (uint32_t pc = 0, b = 0; pc < f->ncode; pc++)
    if (start[pc] & 2) { leaders[b] = pc; block_of[pc] = b++; }
  for (uint32_t b = 0; b < nblocks; b++)
    if ((st = state_alloc(a, &states[b], f->nregs))) goto done;
  cur_alloc = true; /* freed even when its allocation fails halfway */
  if ((st = state_alloc(a, &c.cur, f->nregs))) goto done;

  /* Entry: parameters are defined, read-only, and ordered on stream 0. */
  vstate_t *s0 = &states[0];
  s0->reached = true;
  s0->devbit = 1; /* parameters live on device 0 */
  for (int i = 0; i < ISA_MAX_STREAMS; i++) s0->vis[i] = ~0ull;
  for (uint32_t i = 0; i < f->nparams; i++) define(s0, i, F_DEF, 1);
  uint32_t nwork = 0;
  work_list[nwork++] = 0;
  queued[0] = 1;
  uint64_t steps = 0;
  while (nwork) {
    uint32_t b = work_list[--nwork];
    queued[b] = 0;
    state_copy(&c.cur, &states[b], f->nregs);
    uint32_t pc = leaders[b];
    for (;;) {
      isa_decode(f->code, f->ncode, pc, &in, &why);
      if ((st = transfer(&c, &in))) goto done;
      if (++steps > ((uint64_t)1 << 26)) {
        st = rill__status(RILL_VERIFY_ERROR, "verification failed: @%s: dataflow did not settle", f->name);
        goto done;
      }
      uint32_t succ[2], nsucc = 0;
      if (in.op == ISA_OP_GOTO) succ[nsucc++] = in.operands[0].value;
      else if (in.op == ISA_OP_BR_IF) { succ[nsucc++] = in.operands[1].value; succ[nsucc++] = in.operands[2].value; }
      else if (in.op != ISA_OP_RETURN && pc + in.len < f->ncode && (start[pc + in.len] & 2)) succ[nsucc++] = pc + in.len;
      else if (in.op != ISA_OP_RETURN) { pc += in.len; continue; }
      for (uint32_t k = 0; k < nsucc; k++) {
        uint32_t sb = block_of[succ[k]];
        int changed;
        if (!states[sb].reached) {
          state_copy(&states[sb], &c.cur, f->nregs);
          states[sb].reached = true;
          changed = 1;
        } else {
          changed = state_meet(&states[sb], &c.cur, f->nregs);
          if (changed < 0) { st = at(v, succ[k], "paths reach this point on different current streams"); goto done; }
        }
        if (changed && !queued[sb]) { queued[sb] = 1; work_list[nwork++] = sb; }
      }
      break;
    }
  }
  /* No endless loops: every reachable block must be able to reach a return.
   * A program may still loop for as long as its data says, but damaged jump
   * targets cannot trap a run with no way out. */
  memset(queued, 0, nblocks); /* reused: 1 = can reach a return */
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t b = nblocks; b-- > 0;) {
      if (queued[b]) continue;
      uint32_t pc = leaders[b];
      for (;;) {
        isa_decode(f->code, f->ncode, pc, &in, &why);
        bool last = (isa_opinfo[in.op].flags & ISA_F_TERM) || pc + in.len >= f->ncode || (start[pc + in.len] & 2);
        if (!last) { pc += in.len; continue; }
        bool ok = in.op == ISA_OP_RETURN;
        if (in.op == ISA_OP_GOTO) ok = queued[block_of[in.operands[0].value]];
        else if (in.op == ISA_OP_BR_IF) ok = queued[block_of[in.operands[1].value]] || queued[block_of[in.operands[2].value]];
        else if (in.op != ISA_OP_RETURN) ok = queued[block_of[pc + in.len]];
        if (ok) { queued[b] = 1; changed = true; }
        break;
      }
    }
  }
  for (uint32_t b = 0; b < nblocks; b++)
    if (states[b].reached && !queued[b]) { st = at(v, leaders[b], "no path from here reaches a return (an endless loop)"); goto done; }
done:
  if (cur_alloc) state_free(a, &c.cur);
  if (states)
    for (uint32_t b = 0; b < nblocks; b++) state_free(a, &states[b]);
  rill__free(a, states);
  rill__free(a, leaders);
  rill__free(a, work_list);
  rill__free(a, queued);
  rill__free(a, start);
  rill__free(a, block_of);
  return st;
}

const char *isa_states_check(const isa_module_t *m, uint32_t *out_state) {
  if (m->nstates > ISA_MAX_STATES) { *out_state = 0; return "too many states"; }
  for (uint32_t i = 0; i < m->nstates; i++) {
    const isa_state_t *x = &m->states[i];
    *out_state = i;
    if (!x->name || !*x->name) return "a state without a name";
    if (isa_type_is_sym(&x->type)) return "a state's type has a symbolic size (states have static sizes)";
    size_t bytes;
    if (!rill__type_sizes(&x->type, NULL, &bytes)) return "a state's size overflows";
    if (x->init != ISA_NONE) {
      if (x->init >= m->nconsts) return "init constant out of range";
      if (!rill__type_eq(&m->consts[x->init].type, &x->type)) return "init constant of another type";
    }
    for (uint32_t j = 0; j < i; j++)
      if (!strcmp(m->states[j].name, x->name)) return "defined twice";
    for (uint32_t j = 0; j < m->nconsts; j++)
      if (!strcmp(m->consts[j].name, x->name)) return "a constant has its name";
  }
  return NULL;
}

rill_status_t isa_verify(const isa_module_t *m, const isa_op_resolver_t *resolver) {
  if (m->precision >= RILL_PRECISION_COUNT)
    return rill__status(RILL_VERIFY_ERROR, "verification failed: precision mode %u is not one of exact, tf32, f16, bf16", m->precision);
  {
    uint32_t si;
    const char *why = isa_states_check(m, &si);
    if (why) return rill__status(RILL_VERIFY_ERROR, "verification failed: state %u (%%%s): %s", si,
                                 si < m->nstates && m->states[si].name ? m->states[si].name : "?", why);
    uint8_t dev[ISA_MAX_STATES];
    if (!isa_state_devices(m, dev, &si, &why))
      return rill__status(RILL_VERIFY_ERROR, "verification failed: state %u (%%%s): %s", si,
                          si < m->nstates && m->states[si].name ? m->states[si].name : "?", why);
  }
  for (uint32_t i = 0; i < m->nfuncs; i++)
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(m->funcs[i].name, m->funcs[j].name) == 0)
        return rill__status(RILL_VERIFY_ERROR, "verification failed: function @%s defined twice", m->funcs[i].name);
  for (uint32_t i = 0; i < m->nconsts; i++)
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(m->consts[i].name, m->consts[j].name) == 0)
        return rill__status(RILL_VERIFY_ERROR, "verification failed: constant %%%s defined twice", m->consts[i].name);
  for (uint32_t i = 0; i < m->nops; i++) {
    rill_status_t st = resolver->check(resolver->self, (isa_syms_t *)&m->syms, &m->ops[i]);
    if (st) return rill__status_prefix(st, "verification failed: op table entry %u (%s): ", i, m->ops[i].name);
  }
  /* Kernel choices: one tree per op entry, each well formed over the module's variables. */
  for (uint32_t i = 0; i < m->ntrees; i++) {
    const isa_tree_t *t = &m->trees[i];
    if (t->op >= m->nops || (i && t->op <= m->trees[i - 1].op))
      return rill__status(RILL_VERIFY_ERROR, "verification failed: kernel choice tree %u names op entry %u, out of range or out of order", i, t->op);
    const char *why = isa_tree_check(t, (uint32_t)m->syms.vars.len);
    if (why) return rill__status(RILL_VERIFY_ERROR, "verification failed: kernel choice tree for op entry %u (%s): %s", t->op, m->ops[t->op].name, why);
  }
  for (uint32_t i = 0; i < m->nfuncs; i++) {
    verifier_t v = {m, &m->funcs[i], m->arena.allocator, i, {0}};
    RILL_TRY(verify_func(&v));
  }
  return NULL;
}
