/* module_io.c: the .vmbc file format, its writer and its reader.
 *
 * Layout (all integers little-endian):
 *   magic    "\x89RVM\r\n\x1a\n"   (the high byte and CR/LF/^Z catch text-mode damage)
 *   u16 major, u16 minor, u32 section count
 *   sections: u32 id, u32 zero, u64 length, payload; ids strictly increasing
 *     1 strings  u32 n, then n x (u32 len, bytes)
 *     2 types    u32 n, then n x (u8 dtype, u8 rank, u16 0, i64 dims[rank])
 *     3 module   u32 name, u32 source                       (string or NONE);
 *                minor 5 and up: u32 precision (rill_precision_t)
 *     4 weights  u32 n, then n x (u32 alias, u32 path)
 *     5 consts   u32 n, then n x (u32 name, u32 type, u8 origin, u8 linked, u16 0,
 *                u32 weights, u32 tensor, u64 size, u64 data offset, u64 file offset,
 *                u64 checksum); flags bit 0x200 (minor 9 and up): a shard, followed
 *                by u32 axis, u32 parts, u32 groups, parts x u64 part checksum (isa_const_t);
 *                flags bit 0x400 (minor 10 and up): a stage constant, followed by
 *                u32 stage, u32 ranks (only that rank uploads it); flags bit 0x800
 *                (minor 12 and up): the checksum and part checksums are XXH64
 *                (rill__sum64), else FNV-1a
 *     6 ops      u32 n, then n x (u32 name, u32 nattrs, attrs, u32 nin, types,
 *                u32 nout, types); attr: u32 name, u32 kind, u32 count, payload
 *                (i64 or f64 bits per value; STRING: u32 string)
 *     7 funcs    u32 n, then n x (u32 name, u32 nparams, u32 nresults, types,
 *                u32 nregs, regs (u32 type or NONE for storage, u64 storage size,
 *                u32 name), u32 nstreams, u32 nevents, u32 ncode, code words)
 *     8 debug    per function: u32 nlocs, nlocs x (u32 pc, u32 line, u32 col)
 *     9 data     constant bytes, each at a 64-byte aligned offset
 *    10 shapes   (minor 2 and up) u32 nvars, nvars x (u32 name, i64 lo, i64 hi,
 *                u32 flags: 1 declared, 2 bound at run time (1.5)); u32 natoms, natoms x (u32 is_div, u32 var,
 *                i64 num, i64 div); u32 nexprs, nexprs x (u32 nterms, nterms x
 *                (i64 coef, u32 natoms, natoms x u32 atom)). A dimension or an
 *                integer attribute value ISA_SYM_BASE + k is expression k
 *                (isa/sym.h); a division's numerator is an expression made
 *                before every expression that uses the division.
 *    11 trees    (minor 3 and up, written only where there are trees; a module
 *                without them is written as 1.2) u32 n (> 0), n x (u32 op,
 *                strictly increasing; u32 ncands, ncands x u32 string; u32
 *                nnodes, nnodes x (u32 var or NONE for a leaf, u32 use, i64 le,
 *                u32 yes, u32 no)): an op's kernel choice per size (isa_tree_t;
 *                isa_tree_check says what a well-formed tree is).
 *    12 states   (minor 6 and up, written only where there are states or bind_dims; a
 *                module without them is written as before) u32 n (> 0),
 *                n x (u32 name, u32 type, u32 init constant or NONE for zeros)
 */
#include "isa.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

static const uint8_t MAGIC[8] = {0x89, 'R', 'V', 'M', '\r', '\n', 0x1a, '\n'};
enum { SEC_STRINGS = 1, SEC_TYPES, SEC_MODULE, SEC_WEIGHTS, SEC_CONSTS, SEC_OPS, SEC_FUNCS,
       SEC_DEBUG, SEC_DATA, SEC_SHAPES, SEC_TREES, SEC_STATES, SEC_COUNT };

const isa_opinfo_t isa_opinfo[ISA_OP_COUNT] = {
#define OP(name, mnem, fmt, flags, sem) {mnem, fmt, flags, sem},
#include "opcodes.def"
#undef OP
};

void isa_shard_geometry(const isa_const_t *c, size_t *out_outer, size_t *out_chunk) {
  size_t outer = 1, chunk = rill_dtype_size(c->type.dtype), g = c->shard_groups > 1 ? c->shard_groups : 1;
  for (int d = 0; d < c->type.rank; d++) {
    if (d < (int)c->shard_axis) outer *= (size_t)c->type.dims[d];
    else chunk *= (size_t)c->type.dims[d];
  }
  *out_outer = outer * g; /* each group's part is a chunk of its own */
  *out_chunk = chunk / g;
}

uint64_t isa_const_sum(const isa_const_t *c, const void *p, size_t n) {
  return c->sum64 ? rill__sum64(p, n) : rill__fnv1a(p, n, RILL_FNV_INIT);
}

void isa_const_set_sum(isa_const_t *c, const void *data) {
  c->sum64 = c->size >= ISA_SUM64_FROM;
  c->checksum = isa_const_sum(c, data, c->size);
}

void isa_shard_copy(const isa_const_t *c, const uint8_t *whole, uint32_t p, uint8_t *out) {
  size_t outer, chunk;
  isa_shard_geometry(c, &outer, &chunk);
  for (size_t k = 0; k < outer; k++) memcpy(out + k * chunk, whole + (k * c->shard_parts + p) * chunk, chunk);
}

rill_status_t isa_module_create(const rill_allocator_t *a, isa_module_t **out) {
  isa_module_t *m = rill__calloc(a, 1, sizeof(*m));
  if (!m) return rill__oom();
  rill__arena_init(&m->arena, a);
  isa_syms_init(&m->syms, a);
  *out = m;
  return NULL;
}

void isa_module_free(isa_module_t *m) {
  if (!m) return;
  const rill_allocator_t *a = m->arena.allocator;
  isa_syms_free(&m->syms);
  rill__arena_free(&m->arena);
  rill__free(a, m);
}

bool isa_decode(const uint32_t *code, uint32_t ncode, uint32_t pc, isa_insn_t *out,
                const char **out_why) {
  if (pc >= ncode) { *out_why = "instruction past the end of the code"; return false; }
  uint32_t w = code[pc];
  if (w >= ISA_OP_COUNT) { *out_why = "unknown opcode"; return false; }
  out->op = (isa_opcode_t)w;
  out->pc = pc;
  out->noperands = 0;
  uint32_t p = pc + 1;
  for (const char *f = isa_opinfo[w].format; *f; f++) {
    isa_operand_t *o = &out->operands[out->noperands++];
    o->kind = *f;
    o->list = NULL;
    if (p >= ncode) { *out_why = "instruction truncated"; return false; }
    o->value = code[p++];
    if (*f == 'U' || *f == 'W' || *f == 'D') {
      if (o->value > ncode - p) { *out_why = "register list runs past the end of the code"; return false; }
      o->list = code + p;
      p += o->value;
    }
  }
  out->len = p - pc;
  return true;
}

bool isa_func_loc(const isa_func_t *f, uint32_t pc, uint32_t *out_line, uint32_t *out_col) {
  bool found = false;
  for (uint32_t i = 0; i < f->nlocs && f->locs[i].pc <= pc; i++) {
    *out_line = f->locs[i].line;
    *out_col = f->locs[i].col;
    found = true;
  }
  return found;
}

/* ================= writer ================= */

/* Interning tables for the writer: open addressing over indices. */
typedef struct intern {
  const rill_allocator_t *a;
  uint32_t *slots, nslots;   /* ISA_NONE = empty; else index into keys */
  const void **keys;
  uint32_t n, cap;
  bool is_type;
} intern_t;

static uint64_t key_hash(const intern_t *t, const void *k) {
  if (t->is_type) {
    const rill_type_t *ty = k;
    uint64_t h = rill__fnv1a(&ty->dtype, sizeof ty->dtype, RILL_FNV_INIT);
    h = rill__fnv1a(&ty->rank, sizeof ty->rank, h);
    return rill__fnv1a(ty->dims, sizeof(int64_t) * (size_t)ty->rank, h);
  }
  return rill__fnv1a(k, strlen(k), RILL_FNV_INIT);
}

static bool key_eq(const intern_t *t, const void *a, const void *b) {
  return t->is_type ? rill__type_eq(a, b) : strcmp(a, b) == 0;
}

static rill_status_t intern_grow(intern_t *t) {
  uint32_t nslots = t->nslots ? t->nslots * 2 : 64;
  uint32_t *slots = rill__alloc(t->a, sizeof(uint32_t) * nslots);
  if (!slots) return rill__oom();
  memset(slots, 0xff, sizeof(uint32_t) * nslots);
  for (uint32_t i = 0; i < t->n; i++) {
    uint32_t s = (uint32_t)key_hash(t, t->keys[i]) & (nslots - 1);
    while (slots[s] != ISA_NONE) s = (s + 1) & (nslots - 1);
    slots[s] = i;
  }
  rill__free(t->a, t->slots);
  t->slots = slots;
  t->nslots = nslots;
  return NULL;
}

static rill_status_t intern(intern_t *t, const void *key, uint32_t *out) {
  if (!key) { *out = ISA_NONE; return NULL; }
  if ((t->n + 1) * 2 > t->nslots) RILL_TRY(intern_grow(t));
  uint32_t s = (uint32_t)key_hash(t, key) & (t->nslots - 1);
  while (t->slots[s] != ISA_NONE) {
    if (key_eq(t, t->keys[t->slots[s]], key)) { *out = t->slots[s]; return NULL; }
    s = (s + 1) & (t->nslots - 1);
  }
  if (t->n == t->cap) {
    size_t cap = t->cap;
    RILL_TRY(rill__vec_grow(t->a, (void **)&t->keys, &cap, t->n + 1, sizeof(void *)));
    t->cap = (uint32_t)cap;
  }
  t->keys[t->n] = key;
  t->slots[s] = t->n;
  *out = t->n++;
  return NULL;
}

static void intern_free(intern_t *t) {
  rill__free(t->a, t->slots);
  rill__free(t->a, t->keys);
}

typedef struct writer {
  intern_t strings, types;
  rill_buf_t sec[SEC_COUNT];
  const uint32_t *smap;      /* size expressions: the module's ids to the file's */
  rill_arena_t arena;        /* types with renumbered sizes */
} writer_t;

static int64_t w_size(const writer_t *w, int64_t d) {
  return isa_dim_is_sym(d) && w->smap ? ISA_SYM_BASE + (int64_t)w->smap[isa_sym_id(d)] : d;
}

#define W_TRY(x) do { if ((st = (x))) goto done; } while (0)

static rill_status_t w_str(writer_t *w, rill_buf_t *b, const char *s) {
  uint32_t i;
  RILL_TRY(intern(&w->strings, s, &i));
  return rill__buf_u32(b, i);
}

static rill_status_t w_type(writer_t *w, rill_buf_t *b, const rill_type_t *t) {
  uint32_t i;
  if (t && isa_type_is_sym(t)) {
    rill_type_t *c = rill__arena_memdup(&w->arena, t, sizeof *t);
    if (!c) return rill__oom();
    for (int d = 0; d < c->rank; d++) c->dims[d] = w_size(w, c->dims[d]);
    t = c;
  }
  RILL_TRY(intern(&w->types, t, &i));
  return rill__buf_u32(b, i);
}

static rill_status_t w_attr(writer_t *w, rill_buf_t *b, const isa_attr_t *at) {
  RILL_TRY(w_str(w, b, at->name));
  RILL_TRY(rill__buf_u32(b, (uint32_t)at->kind));
  RILL_TRY(rill__buf_u32(b, at->count));
  for (uint32_t i = 0; i < at->count; i++) {
    switch (at->kind) {
      case ISA_ATTR_STRING: RILL_TRY(w_str(w, b, at->str)); break;
      case ISA_ATTR_FLOAT: case ISA_ATTR_FLOATS: {
        uint64_t bits;
        memcpy(&bits, &at->floats[i], 8);
        RILL_TRY(rill__buf_u64(b, bits));
        break;
      }
      default: RILL_TRY(rill__buf_u64(b, (uint64_t)w_size(w, at->ints[i]))); break;
    }
  }
  return NULL;
}

static rill_status_t w_func(writer_t *w, rill_buf_t *b, rill_buf_t *dbg, const isa_func_t *f) {
  RILL_TRY(w_str(w, b, f->name));
  RILL_TRY(rill__buf_u32(b, f->nparams));
  RILL_TRY(rill__buf_u32(b, f->nresults));
  for (uint32_t i = 0; i < f->nresults; i++) RILL_TRY(w_type(w, b, &f->results[i]));
  RILL_TRY(rill__buf_u32(b, f->nregs));
  for (uint32_t i = 0; i < f->nregs; i++) {
    const isa_reg_t *r = &f->regs[i];
    if (r->storage) RILL_TRY(rill__buf_u32(b, ISA_NONE));
    else RILL_TRY(w_type(w, b, &r->type));
    RILL_TRY(rill__buf_u64(b, r->storage ? r->storage_size : 0));
    RILL_TRY(w_str(w, b, r->name));
  }
  RILL_TRY(rill__buf_u32(b, f->nstreams));
  RILL_TRY(rill__buf_u32(b, f->nevents));
  RILL_TRY(rill__buf_u32(b, f->ncode));
  for (uint32_t i = 0; i < f->ncode; i++) RILL_TRY(rill__buf_u32(b, f->code[i]));
  RILL_TRY(rill__buf_u32(dbg, f->nlocs));
  for (uint32_t i = 0; i < f->nlocs; i++) {
    RILL_TRY(rill__buf_u32(dbg, f->locs[i].pc));
    RILL_TRY(rill__buf_u32(dbg, f->locs[i].line));
    RILL_TRY(rill__buf_u32(dbg, f->locs[i].col));
  }
  return NULL;
}

/* The module's bytes as pieces in file order: `head` (the header and the
 * sections before the data, then the data section's header and padding),
 * each embedded constant's padding and bytes where they lie (never copied),
 * then `tail` (the sections after the data). */
typedef struct pieces {
  rill_buf_t head, tail;
  RILL_VEC(struct iovec) iov;
  RILL_VEC(const uint8_t *) data; /* per embedded constant, its bytes (an image's) */
  size_t size;
} pieces_t;

static void pieces_free(const rill_allocator_t *a, pieces_t *p) {
  rill__buf_free(&p->head);
  rill__buf_free(&p->tail);
  RILL_VEC_FREE(a, &p->iov);
  RILL_VEC_FREE(a, &p->data);
}

/* The checksums of the embedded constants, computed here from their data
 * (the assembler leaves a weight's to the writer: a module made in memory
 * needs none), on up to 8 threads taking the constants in turn. */
typedef struct sum_job {
  const isa_module_t *m;
  uint64_t *sums;
  atomic_uint next;
} sum_job_t;

static void *sum_worker(void *p) {
  sum_job_t *j = p;
  for (uint32_t i; (i = atomic_fetch_add(&j->next, 1)) < j->m->nconsts;) {
    const isa_const_t *c = &j->m->consts[i];
    j->sums[i] = c->linked || !c->data ? c->checksum : isa_const_sum(c, c->data, c->size);
  }
  return NULL;
}

static rill_status_t const_sums(const isa_module_t *m, const rill_allocator_t *a, uint64_t **out) {
  uint64_t *sums = rill__calloc(a, m->nconsts ? m->nconsts : 1, sizeof *sums);
  if (!sums) return rill__oom();
  sum_job_t j = {.m = m, .sums = sums};
  atomic_init(&j.next, 0);
  uint64_t big = 0;
  for (uint32_t i = 0; i < m->nconsts; i++)
    if (!m->consts[i].linked) big += m->consts[i].size;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int nt = big < ((uint64_t)16 << 20) || ncpu < 2 ? 0 : ncpu > 8 ? 7 : (int)ncpu - 1;
  pthread_t th[8];
  int started = 0;
  for (int t = 0; t < nt; t++)
    if (pthread_create(&th[started], NULL, sum_worker, &j) == 0) started++;
  sum_worker(&j);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  *out = sums;
  return NULL;
}

/* image: the data section's length counts its padding only (the data stays out, isa_write_image) */
static rill_status_t layout(const isa_module_t *m, const rill_allocator_t *a, bool image, pieces_t *out) {
  static const uint8_t zeros[64];
  writer_t w;
  memset(&w, 0, sizeof w);
  w.strings.a = w.types.a = a;
  w.types.is_type = true;
  for (int i = 0; i < SEC_COUNT; i++) rill__buf_init(&w.sec[i], a);
  rill_buf_t file;
  rill__buf_init(&file, a);
  rill__buf_init(&out->head, a);
  rill__buf_init(&out->tail, a);
  memset(&out->iov, 0, sizeof out->iov);
  memset(&out->data, 0, sizeof out->data);
  out->size = 0;
  rill_status_t st = NULL;
  size_t data_len = 0; /* the data section's bytes after its padding */
  uint64_t *sums = NULL; /* per constant, its checksum as written */

  unsigned minor = isa_module_minor(m);
  /* The size expressions the module uses, numbered canonically. */
  rill__arena_init(&w.arena, a);
  isa_syms_t canon;
  isa_syms_init(&canon, a);
  uint32_t *smap = NULL;
  RILL_VEC(int64_t) roots = {0};
#define ROOT_TYPE(t) for (int d_ = 0; !st && d_ < (t)->rank; d_++) if (isa_dim_is_sym((t)->dims[d_])) st = RILL_VEC_PUSH(a, &roots, (t)->dims[d_])
  for (uint32_t i = 0; !st && i < m->nops; i++) {
    const isa_opdecl_t *o = &m->ops[i];
    for (uint32_t j = 0; j < o->nattrs; j++)
      for (uint32_t k = 0; !st && o->attrs[j].kind == ISA_ATTR_INTS && k < o->attrs[j].count; k++)
        if (isa_dim_is_sym(o->attrs[j].ints[k])) st = RILL_VEC_PUSH(a, &roots, o->attrs[j].ints[k]);
    for (uint32_t j = 0; j < o->nin; j++) ROOT_TYPE(&o->in[j]);
    for (uint32_t j = 0; j < o->nout; j++) ROOT_TYPE(&o->out[j]);
  }
  for (uint32_t i = 0; !st && i < m->nfuncs; i++) {
    const isa_func_t *f = &m->funcs[i];
    for (uint32_t j = 0; j < f->nresults; j++) ROOT_TYPE(&f->results[j]);
    for (uint32_t j = 0; j < f->nregs; j++) if (!f->regs[j].storage) ROOT_TYPE(&f->regs[j].type);
  }
#undef ROOT_TYPE
  /* every variable is kept (a declared one may be unused) */
  if (!st) st = isa_syms_canonical(&m->syms, roots.items, roots.len, &canon, &smap);
  RILL_VEC_FREE(a, &roots);
  w.smap = smap;
  if (st) goto done;

  if (!image) W_TRY(const_sums(m, a, &sums));
  rill_buf_t *b = &w.sec[SEC_MODULE];
  W_TRY(w_str(&w, b, m->name));
  W_TRY(w_str(&w, b, m->source));
  /* A module in the exact mode is written as before, for older readers,
   * unless its states or bind_dims make it 1.6 or later, which hold the
   * field whatever the mode. */
  if (minor >= 5) W_TRY(rill__buf_u32(b, m->precision));

  b = &w.sec[SEC_WEIGHTS];
  W_TRY(rill__buf_u32(b, m->nweights));
  for (uint32_t i = 0; i < m->nweights; i++) {
    W_TRY(w_str(&w, b, m->weights[i].alias));
    W_TRY(w_str(&w, b, m->weights[i].path));
  }

  b = &w.sec[SEC_CONSTS];
  W_TRY(rill__buf_u32(b, m->nconsts));
  for (uint32_t i = 0; i < m->nconsts; i++) {
    const isa_const_t *c = &m->consts[i];
    W_TRY(w_str(&w, b, c->name));
    W_TRY(w_type(&w, b, &c->type));
    W_TRY(rill__buf_u32(b, (uint32_t)c->origin | (c->linked ? 0x100u : 0) | (c->shard_parts ? 0x200u : 0) | (c->stage_ranks ? 0x400u : 0) | (c->sum64 ? 0x800u : 0)));
    W_TRY(rill__buf_u32(b, c->origin == ISA_CONST_WEIGHTS ? c->weights : ISA_NONE));
    W_TRY(w_str(&w, b, c->tensor));
    W_TRY(rill__buf_u64(b, c->size));
    uint64_t off = 0;
    if (!c->linked) {
      size_t pad = (64 - data_len % 64) % 64;
      if (pad) W_TRY(RILL_VEC_PUSH(a, &out->iov, ((struct iovec){(void *)zeros, pad})));
      off = data_len + pad;
      if (c->size) W_TRY(RILL_VEC_PUSH(a, &out->iov, ((struct iovec){(void *)c->data, c->size})));
      if (image) W_TRY(RILL_VEC_PUSH(a, &out->data, c->data));
      data_len = off + c->size;
    }
    W_TRY(rill__buf_u64(b, off));
    W_TRY(rill__buf_u64(b, c->file_offset));
    /* an image's: a linked constant's own (checked against its file at load), a stage
     * constant's (checked as its rank copies it), none for the others */
    W_TRY(rill__buf_u64(b, sums ? sums[i] : c->linked ? c->checksum : c->stage_ranks && c->data ? isa_const_sum(c, c->data, c->size) : 0));
    if (c->shard_parts) {
      W_TRY(rill__buf_u32(b, c->shard_axis));
      W_TRY(rill__buf_u32(b, c->shard_parts));
      W_TRY(rill__buf_u32(b, c->shard_groups > 1 ? c->shard_groups : 1));
      for (uint32_t p = 0; p < c->shard_parts; p++) W_TRY(rill__buf_u64(b, c->part_sums[p]));
    }
    if (c->stage_ranks) {
      W_TRY(rill__buf_u32(b, c->stage));
      W_TRY(rill__buf_u32(b, c->stage_ranks));
    }
  }

  b = &w.sec[SEC_OPS];
  W_TRY(rill__buf_u32(b, m->nops));
  for (uint32_t i = 0; i < m->nops; i++) {
    const isa_opdecl_t *o = &m->ops[i];
    W_TRY(w_str(&w, b, o->name));
    W_TRY(rill__buf_u32(b, o->nattrs));
    for (uint32_t j = 0; j < o->nattrs; j++) W_TRY(w_attr(&w, b, &o->attrs[j]));
    W_TRY(rill__buf_u32(b, o->nin));
    for (uint32_t j = 0; j < o->nin; j++) W_TRY(w_type(&w, b, &o->in[j]));
    W_TRY(rill__buf_u32(b, o->nout));
    for (uint32_t j = 0; j < o->nout; j++) W_TRY(w_type(&w, b, &o->out[j]));
  }

  b = &w.sec[SEC_FUNCS];
  W_TRY(rill__buf_u32(b, m->nfuncs));
  for (uint32_t i = 0; i < m->nfuncs; i++) W_TRY(w_func(&w, b, &w.sec[SEC_DEBUG], &m->funcs[i]));

  b = &w.sec[SEC_SHAPES];
  const isa_syms_t *sy = &canon;
  W_TRY(rill__buf_u32(b, (uint32_t)sy->vars.len));
  for (size_t i = 0; i < sy->vars.len; i++) {
    W_TRY(w_str(&w, b, sy->vars.items[i].name));
    W_TRY(rill__buf_u64(b, (uint64_t)sy->vars.items[i].lo));
    W_TRY(rill__buf_u64(b, (uint64_t)sy->vars.items[i].hi));
    /* bit 0 declared, bit 1 bound at run time (1.5) */
    W_TRY(rill__buf_u32(b, (uint32_t)sy->vars.items[i].declared | (uint32_t)sy->vars.items[i].runtime << 1));
  }
  W_TRY(rill__buf_u32(b, (uint32_t)sy->atoms.len));
  for (size_t i = 0; i < sy->atoms.len; i++) {
    const isa_symatom_t *at = &sy->atoms.items[i];
    W_TRY(rill__buf_u32(b, at->is_div));
    W_TRY(rill__buf_u32(b, at->var));
    W_TRY(rill__buf_u64(b, (uint64_t)at->num));
    W_TRY(rill__buf_u64(b, (uint64_t)at->div));
  }
  W_TRY(rill__buf_u32(b, (uint32_t)sy->exprs.len));
  for (size_t i = 0; i < sy->exprs.len; i++) {
    const isa_symexpr_t *e = &sy->exprs.items[i];
    W_TRY(rill__buf_u32(b, e->nterms));
    for (uint32_t t = 0; t < e->nterms; t++) {
      W_TRY(rill__buf_u64(b, (uint64_t)e->terms[t].coef));
      W_TRY(rill__buf_u32(b, e->terms[t].natoms));
      for (uint32_t k = 0; k < e->terms[t].natoms; k++) W_TRY(rill__buf_u32(b, e->terms[t].atoms[k]));
    }
  }

  b = &w.sec[SEC_TREES];
  if (minor >= 3) W_TRY(rill__buf_u32(b, m->ntrees));
  for (uint32_t i = 0; i < m->ntrees; i++) {
    const isa_tree_t *t = &m->trees[i];
    W_TRY(rill__buf_u32(b, t->op));
    W_TRY(rill__buf_u32(b, t->ncands));
    for (uint32_t k = 0; k < t->ncands; k++) W_TRY(w_str(&w, b, t->cands[k]));
    W_TRY(rill__buf_u32(b, t->nnodes));
    for (uint32_t k = 0; k < t->nnodes; k++) {
      const rill_tree_node_t *x = &t->nodes[k];
      /* the variable's index in the canonical order the shapes section has
       * (one that names no variable is written as it is, for the reader to refuse) */
      int32_t v = x->var;
      if (x->var >= 0 && (size_t)x->var < m->syms.vars.len) {
        const char *name = m->syms.vars.items[x->var].name;
        v = isa_syms_find_var(sy, name, strlen(name));
      }
      W_TRY(rill__buf_u32(b, v < 0 ? ISA_NONE : (uint32_t)v));
      W_TRY(rill__buf_u32(b, x->use));
      W_TRY(rill__buf_u64(b, (uint64_t)x->le));
      W_TRY(rill__buf_u32(b, x->yes));
      W_TRY(rill__buf_u32(b, x->no));
    }
  }

  b = &w.sec[SEC_STATES];
  if (minor >= 6) W_TRY(rill__buf_u32(b, m->nstates));
  for (uint32_t i = 0; i < m->nstates; i++) {
    W_TRY(w_str(&w, b, m->states[i].name));
    W_TRY(w_type(&w, b, &m->states[i].type));
    W_TRY(rill__buf_u32(b, m->states[i].init));
  }

  b = &w.sec[SEC_STRINGS];
  W_TRY(rill__buf_u32(b, w.strings.n));
  for (uint32_t i = 0; i < w.strings.n; i++) {
    size_t n = strlen(w.strings.keys[i]);
    W_TRY(rill__buf_u32(b, (uint32_t)n));
    W_TRY(rill__buf_append(b, w.strings.keys[i], n));
  }
  b = &w.sec[SEC_TYPES];
  W_TRY(rill__buf_u32(b, w.types.n));
  for (uint32_t i = 0; i < w.types.n; i++) {
    const rill_type_t *t = w.types.keys[i];
    uint8_t hdr[4] = {(uint8_t)t->dtype, (uint8_t)t->rank, 0, 0};
    W_TRY(rill__buf_append(b, hdr, 4));
    for (int d = 0; d < t->rank; d++) W_TRY(rill__buf_u64(b, (uint64_t)t->dims[d]));
  }

  W_TRY(rill__buf_append(&file, MAGIC, 8));
  /* The lowest version that holds the module, which older readers read:
   * 1.2 without trees, 1.3 with them, 1.4 with the devices' instructions,
   * 1.5 with a precision other than exact, 1.6 with states, 1.7 with
   * bind_dims, 1.8 with the dtypes i16, u16, u32, u64 (isa_module_minor). */
  int nsec = minor >= 6 ? SEC_STATES : minor >= 3 ? SEC_TREES : SEC_SHAPES;
  uint8_t ver[4] = {RILL_BYTECODE_MAJOR, 0, (uint8_t)minor, 0};
  W_TRY(rill__buf_append(&file, ver, 4));
  W_TRY(rill__buf_u32(&file, (uint32_t)nsec));
  for (int s = 1; s <= nsec; s++) {
    rill_buf_t *to = s <= SEC_DATA ? &file : &out->tail;
    W_TRY(rill__buf_u32(to, (uint32_t)s));
    W_TRY(rill__buf_u32(to, 0));
    /* Pad the data section's start to 64 bytes so constants stay aligned in the file. */
    if (s == SEC_DATA) {
      size_t start = file.len + 8;
      size_t pad = (64 - start % 64) % 64;
      W_TRY(rill__buf_u64(&file, (image ? 0 : data_len) + pad));
      W_TRY(rill__buf_append(&file, zeros, pad));
      /* Offsets in the consts section are relative to the section's payload start,
       * which now begins with `pad` zero bytes: the reader skips them the same way. */
    } else {
      W_TRY(rill__buf_u64(to, w.sec[s].len));
      W_TRY(rill__buf_append(to, w.sec[s].data, w.sec[s].len));
    }
  }
  out->head = file;
  rill__buf_init(&file, a);
  out->size = out->head.len + data_len + out->tail.len;
done:
  rill__free(a, sums);
  free(smap);
  isa_syms_free(&canon);
  rill__arena_free(&w.arena);
  rill__buf_free(&file);
  for (int i = 0; i < SEC_COUNT; i++) rill__buf_free(&w.sec[i]);
  intern_free(&w.strings);
  intern_free(&w.types);
  if (st) pieces_free(a, out);
  return st;
}

rill_status_t isa_write(const isa_module_t *m, const rill_allocator_t *a, uint8_t **out,
                        size_t *out_size) {
  pieces_t p;
  RILL_TRY(layout(m, a, false, &p));
  uint8_t *b = rill__alloc(a, p.size ? p.size : 1);
  if (!b) {
    pieces_free(a, &p);
    return rill__oom();
  }
  size_t at = 0;
  memcpy(b, p.head.data, p.head.len);
  at += p.head.len;
  for (size_t i = 0; i < p.iov.len; i++) {
    memcpy(b + at, p.iov.items[i].iov_base, p.iov.items[i].iov_len);
    at += p.iov.items[i].iov_len;
  }
  memcpy(b + at, p.tail.data, p.tail.len);
  *out = b;
  *out_size = p.size;
  pieces_free(a, &p);
  return NULL;
}

rill_status_t isa_write_file(const isa_module_t *m, const rill_allocator_t *a, const char *path, size_t *out_size) {
  pieces_t p;
  RILL_TRY(layout(m, a, false, &p));
  /* the head, the constants, the tail: one iovec list */
  rill_status_t st = RILL_VEC_PUSH(a, &p.iov, ((struct iovec){0, 0}));
  if (!st) {
    memmove(p.iov.items + 1, p.iov.items, (p.iov.len - 1) * sizeof(struct iovec));
    p.iov.items[0] = (struct iovec){p.head.data, p.head.len};
    st = RILL_VEC_PUSH(a, &p.iov, ((struct iovec){p.tail.data, p.tail.len}));
  }
  if (!st) st = rill__write_file_atomic_iov(path, p.iov.items, p.iov.len);
  if (!st && out_size) *out_size = p.size;
  pieces_free(a, &p);
  return st;
}

/* ================= reader ================= */

typedef struct rd {
  const uint8_t *p, *end;
  const char *sec;   /* section name for messages */
  bool bad;
} rd_t;

static uint32_t rd_u32(rd_t *r) {
  if (r->bad || r->end - r->p < 4) { r->bad = true; return 0; }
  uint32_t v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 |
               (uint32_t)r->p[3] << 24;
  r->p += 4;
  return v;
}
static uint64_t rd_u64(rd_t *r) {
  uint64_t lo = rd_u32(r);
  return lo | (uint64_t)rd_u32(r) << 32;
}
/* A count of items each at least `min_size` bytes: bounded by what remains. */
static uint32_t rd_count(rd_t *r, size_t min_size) {
  uint32_t n = rd_u32(r);
  if (!r->bad && (size_t)(r->end - r->p) / min_size < n) r->bad = true;
  return r->bad ? 0 : n;
}

typedef struct reader {
  isa_module_t *m;
  uint32_t nstrings, ntypes;
  const char **strings;
  rill_type_t *types;
  const uint8_t *data;
  size_t data_size;
  unsigned minor;
  const rill_module_image_t *img; /* an image: the embedded constants' data its pointers, in order */
  size_t next_data;
} reader_t;

static rill_status_t malformed(const char *sec, const char *what) {
  return rill__status(RILL_MALFORMED, "malformed module: %s section: %s", sec, what);
}

static bool rd_str(reader_t *R, rd_t *r, const char **out, bool optional) {
  uint32_t i = rd_u32(r);
  if (r->bad) return false;
  if (i == ISA_NONE && optional) { *out = NULL; return true; }
  if (i >= R->nstrings) return false;
  *out = R->strings[i];
  return true;
}

static bool rd_type(reader_t *R, rd_t *r, rill_type_t *out) {
  uint32_t i = rd_u32(r);
  if (r->bad || i >= R->ntypes) return false;
  *out = R->types[i];
  return true;
}

#define R_CHECK(cond, what) do { if (r->bad || !(cond)) return malformed(r->sec, what); } while (0)
#define R_ALLOC(ptr, n) do { \
    size_t bytes_; \
    if (!rill__mul_ok((n), sizeof(*(ptr)), &bytes_) || !((ptr) = rill__arena_alloc(&m->arena, bytes_))) \
      return rill__oom(); } while (0)

static rill_status_t read_strings(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  R->nstrings = rd_count(r, 4);
  R_CHECK(1, "bad count");
  R_ALLOC(R->strings, R->nstrings);
  for (uint32_t i = 0; i < R->nstrings; i++) {
    uint32_t n = rd_u32(r);
    R_CHECK((size_t)(r->end - r->p) >= n, "string runs past the section");
    R_CHECK(memchr(r->p, 0, n) == NULL, "string holds a NUL byte");
    if (!(R->strings[i] = rill__arena_strndup(&m->arena, (const char *)r->p, n))) return rill__oom();
    r->p += n;
  }
  return NULL;
}

static rill_status_t read_types(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  R->ntypes = rd_count(r, 4);
  R_CHECK(1, "bad count");
  R_ALLOC(R->types, R->ntypes);
  for (uint32_t i = 0; i < R->ntypes; i++) {
    R_CHECK(r->end - r->p >= 4, "truncated type");
    rill_type_t *t = &R->types[i];
    uint8_t dt = r->p[0], rank = r->p[1];
    R_CHECK(dt < RILL_DTYPE_COUNT && (dt < RILL_I16 || R->minor >= 8), "unknown dtype (i16, u16, u32 and u64 are bytecode 1.8)");
    R_CHECK(rank <= RILL_MAX_RANK, "rank above 8");
    R_CHECK(r->p[2] == 0 && r->p[3] == 0, "nonzero padding");
    r->p += 4;
    t->dtype = (rill_dtype_t)dt;
    t->rank = rank;
    for (int d = 0; d < rank; d++) {
      t->dims[d] = (int64_t)rd_u64(r);
      R_CHECK(t->dims[d] >= 0 || (isa_dim_is_sym(t->dims[d]) && isa_sym_id(t->dims[d]) < m->syms.exprs.len),
              "negative dimension or unknown size expression");
    }
    R_CHECK(isa_type_is_sym(t) || rill__type_sizes(t, NULL, NULL), "tensor size overflows");
  }
  return NULL;
}

static rill_status_t read_shapes(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  isa_syms_t *s = &m->syms;
  uint32_t n = rd_count(r, 24);
  R_CHECK(1, "bad variable count");
  for (uint32_t i = 0; i < n; i++) {
    uint32_t name = rd_u32(r), v;
    int64_t lo = (int64_t)rd_u64(r), hi = (int64_t)rd_u64(r);
    uint32_t declared = rd_u32(r);
    R_CHECK(name < R->nstrings, "variable name is not a string");
    R_CHECK(isa_syms_find_var(s, R->strings[name], strlen(R->strings[name])) < 0, "variable named twice");
    R_CHECK(lo >= 0 && lo <= hi && declared <= (R->minor >= 7 ? 3u : 1u), "bad variable range");
    RILL_TRY(isa_syms_var(s, R->strings[name], strlen(R->strings[name]), &v));
    s->vars.items[v].lo = lo;
    s->vars.items[v].hi = hi;
    s->vars.items[v].declared = declared & 1;
    s->vars.items[v].runtime = declared >> 1;
  }
  uint32_t na = rd_count(r, 24);
  R_CHECK(1, "bad atom count");
  for (uint32_t i = 0; i < na; i++) {
    isa_symatom_t at;
    memset(&at, 0, sizeof at);
    uint32_t is_div = rd_u32(r);
    at.var = rd_u32(r);
    at.num = (int64_t)rd_u64(r);
    at.div = (int64_t)rd_u64(r);
    at.is_div = is_div == 1;
    R_CHECK(is_div <= 1, "bad atom kind");
    R_CHECK(at.is_div ? isa_dim_is_sym(at.num) && at.div > 1 && at.var == 0 : at.var < n && at.num == 0 && at.div == 0, "bad atom");
    isa_symatom_t *key = rill__arena_memdup(&s->arena, &at, sizeof at);
    if (!key) return rill__oom();
    RILL_TRY(RILL_VEC_PUSH(m->arena.allocator, &s->atoms, at));
    RILL_TRY(rill__map_put(&s->atom_map, key, sizeof at, i));
  }
  uint32_t ne = rd_count(r, 4);
  R_CHECK(1, "bad expression count");
  for (uint32_t i = 0; i < ne; i++) {
    uint32_t nt = rd_count(r, 12);
    R_CHECK(nt > 0 && nt <= ISA_SYM_MAX_TERMS, "bad term count");
    isa_symterm_t *terms;
    R_ALLOC(terms, nt);
    for (uint32_t t = 0; t < nt; t++) {
      memset(&terms[t], 0, sizeof terms[t]);
      terms[t].coef = (int64_t)rd_u64(r);
      terms[t].natoms = rd_u32(r);
      R_CHECK(terms[t].natoms <= ISA_SYM_MAX_DEG, "term of too high a degree");
      for (uint32_t k = 0; k < terms[t].natoms; k++) {
        uint32_t a = terms[t].atoms[k] = rd_u32(r);
        R_CHECK(a < na, "unknown atom");
        /* a division's numerator comes before the expressions using it: no cycles */
        R_CHECK(!s->atoms.items[a].is_div || isa_sym_id(s->atoms.items[a].num) < i, "division by a later expression");
      }
    }
    isa_symexpr_t e = {nt, terms};
    RILL_TRY(RILL_VEC_PUSH(m->arena.allocator, &s->exprs, e));
    RILL_TRY(rill__map_put(&s->expr_map, terms, sizeof(isa_symterm_t) * nt, i));
  }
  return NULL;
}

static rill_status_t read_module(reader_t *R, rd_t *r) {
  R_CHECK(rd_str(R, r, &R->m->name, true), "bad name");
  R_CHECK(rd_str(R, r, &R->m->source, true), "bad source name");
  if (R->minor >= 5) {
    R->m->precision = rd_u32(r);
    R_CHECK(R->m->precision < RILL_PRECISION_COUNT && (R->m->precision > 0 || R->minor > 5),
            "bad precision (a 1.5 module is one in a mode other than exact)");
  }
  return NULL;
}

static rill_status_t read_weights(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  m->nweights = rd_count(r, 8);
  R_CHECK(1, "bad count");
  R_ALLOC(m->weights, m->nweights);
  for (uint32_t i = 0; i < m->nweights; i++) {
    R_CHECK(rd_str(R, r, &m->weights[i].alias, false), "bad alias");
    R_CHECK(rd_str(R, r, &m->weights[i].path, false), "bad path");
  }
  return NULL;
}

static rill_status_t read_consts(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  m->nconsts = rd_count(r, 52);
  R_CHECK(1, "bad count");
  R_ALLOC(m->consts, m->nconsts);
  for (uint32_t i = 0; i < m->nconsts; i++) {
    isa_const_t *c = &m->consts[i];
    R_CHECK(rd_str(R, r, &c->name, false), "bad name");
    R_CHECK(rd_type(R, r, &c->type), "bad type");
    uint32_t flags = rd_u32(r);
    R_CHECK(!(flags & 0x800) || R->minor >= 12, "an XXH64 checksum needs bytecode 1.12");
    R_CHECK((flags & ~(R->minor >= 12 ? 0xfffu : R->minor >= 10 ? 0x7ffu : R->minor >= 9 ? 0x3ffu : 0x1ffu)) == 0 && (flags & 0xff) <= ISA_CONST_WEIGHTS, "bad origin");
    c->origin = (isa_const_origin_t)(flags & 0xff);
    c->linked = flags & 0x100;
    c->sum64 = flags & 0x800;
    c->weights = rd_u32(r);
    R_CHECK(rd_str(R, r, &c->tensor, true), "bad tensor name");
    c->size = rd_u64(r);
    uint64_t off = rd_u64(r);
    c->file_offset = rd_u64(r);
    c->checksum = rd_u64(r);
    R_CHECK(1, "truncated constant");
    size_t numel, nbytes;
    rill__type_sizes(&c->type, &numel, &nbytes);
    if (flags & 0x200) {
      c->shard_axis = rd_u32(r);
      c->shard_parts = rd_u32(r);
      c->shard_groups = rd_u32(r);
      R_CHECK(1, "truncated shard");
      R_CHECK(c->origin == ISA_CONST_WEIGHTS && c->shard_parts >= 2 && c->shard_parts <= ISA_MAX_SHARD_PARTS &&
                  c->shard_axis < (uint32_t)c->type.rank && c->shard_groups >= 1 && c->shard_groups <= ISA_MAX_SHARD_PARTS &&
                  c->type.dims[c->shard_axis] % c->shard_groups == 0, "bad shard");
      uint64_t *sums;
      R_ALLOC(sums, c->shard_parts);
      for (uint32_t p = 0; p < c->shard_parts; p++) sums[p] = rd_u64(r);
      R_CHECK(1, "truncated shard checksums");
      c->part_sums = sums;
      R_CHECK(nbytes <= SIZE_MAX / c->shard_parts, "shard too large");
      nbytes *= c->shard_parts;
    }
    c->stage = c->stage_ranks = 0; /* (the arena does not zero) */
    if (flags & 0x400) {
      c->stage = rd_u32(r);
      c->stage_ranks = rd_u32(r);
      R_CHECK(1, "truncated stage");
      R_CHECK(c->origin == ISA_CONST_WEIGHTS && !c->shard_parts && c->stage_ranks >= 2 && c->stage_ranks <= ISA_MAX_SHARD_PARTS &&
                  c->stage < c->stage_ranks, "bad stage constant");
    }
    if (c->origin == ISA_CONST_WEIGHTS) {
      R_CHECK(c->weights < m->nweights && c->tensor, "weights reference out of range");
      R_CHECK(c->size == nbytes, "size does not match the type");
    } else {
      R_CHECK(c->weights == ISA_NONE && !c->tensor && !c->linked, "literal with weights fields");
      R_CHECK(c->size == (c->origin == ISA_CONST_FILL ? rill_dtype_size(c->type.dtype) : nbytes),
              "size does not match the type");
    }
    if (!c->linked && R->img) {
      R_CHECK(R->next_data < R->img->ndata, "more embedded constants than the image's data");
      c->data = R->img->data[R->next_data++];
    } else if (!c->linked) {
      R_CHECK(c->file_offset == 0, "embedded constant with a file offset");
      R_CHECK(off % 64 == 0, "constant data not aligned to 64 bytes");
      R_CHECK(off <= R->data_size && c->size <= R->data_size - off, "data out of range");
      c->data = R->data + off; /* (its checksum checked below, with the others', on threads) */
    } else {
      R_CHECK(off == 0, "linked constant with a data offset");
    }
  }
  return NULL;
}

static rill_status_t read_attr(reader_t *R, rd_t *r, isa_attr_t *at) {
  isa_module_t *m = R->m;
  R_CHECK(rd_str(R, r, &at->name, false), "bad attribute name");
  uint32_t kind = rd_u32(r);
  R_CHECK(kind < ISA_ATTR_KIND_COUNT, "bad attribute kind");
  at->kind = (isa_attr_kind_t)kind;
  bool list = kind == ISA_ATTR_INTS || kind == ISA_ATTR_FLOATS;
  at->count = rd_count(r, kind == ISA_ATTR_STRING ? 4 : 8);
  R_CHECK(list || at->count == 1, "scalar attribute with a count other than 1");
  R_CHECK(at->count <= 1024, "attribute list too long");
  if (kind == ISA_ATTR_STRING) {
    R_CHECK(rd_str(R, r, &at->str, false), "bad attribute string");
  } else if (kind == ISA_ATTR_FLOAT || kind == ISA_ATTR_FLOATS) {
    R_ALLOC(at->floats, at->count);
    for (uint32_t i = 0; i < at->count; i++) {
      uint64_t bits = rd_u64(r);
      memcpy(&at->floats[i], &bits, 8);
    }
  } else {
    R_ALLOC(at->ints, at->count);
    for (uint32_t i = 0; i < at->count; i++) {
      at->ints[i] = (int64_t)rd_u64(r);
      /* a size in a list (reshape's shape, split's sizes) names an expression of the shapes section */
      R_CHECK(!isa_dim_is_sym(at->ints[i]) || isa_sym_id(at->ints[i]) < m->syms.exprs.len, "attribute names an unknown size expression");
    }
    R_CHECK(kind != ISA_ATTR_BOOL || (uint64_t)at->ints[0] <= 1, "bool attribute not 0 or 1");
    R_CHECK(kind != ISA_ATTR_DTYPE || (uint64_t)at->ints[0] < (R->minor >= 8 ? RILL_DTYPE_COUNT : RILL_I16), "bad dtype attribute");
  }
  R_CHECK(1, "truncated attribute");
  return NULL;
}

static rill_status_t read_types_list(reader_t *R, rd_t *r, uint32_t *n, rill_type_t **out) {
  isa_module_t *m = R->m;
  *n = rd_count(r, 4);
  R_CHECK(*n <= 4096, "too many operands");
  R_ALLOC(*out, *n);
  for (uint32_t i = 0; i < *n; i++) R_CHECK(rd_type(R, r, &(*out)[i]), "bad type");
  return NULL;
}

static rill_status_t read_ops(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  m->nops = rd_count(r, 12);
  R_CHECK(1, "bad count");
  R_ALLOC(m->ops, m->nops);
  for (uint32_t i = 0; i < m->nops; i++) {
    isa_opdecl_t *o = &m->ops[i];
    R_CHECK(rd_str(R, r, &o->name, false), "bad op name");
    o->nattrs = rd_count(r, 12);
    R_CHECK(o->nattrs <= 64, "too many attributes");
    R_ALLOC(o->attrs, o->nattrs);
    for (uint32_t j = 0; j < o->nattrs; j++) RILL_TRY(read_attr(R, r, &o->attrs[j]));
    RILL_TRY(read_types_list(R, r, &o->nin, &o->in));
    RILL_TRY(read_types_list(R, r, &o->nout, &o->out));
  }
  return NULL;
}

static rill_status_t read_trees(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  m->ntrees = rd_count(r, 36);
  /* (A 1.4 module, written for its devices' instructions, may have none.) */
  R_CHECK(m->ntrees > 0 || R->minor >= 4, "bad count (a module without trees is written as 1.2)");
  R_ALLOC(m->trees, m->ntrees);
  for (uint32_t i = 0; i < m->ntrees; i++) {
    isa_tree_t *t = &m->trees[i];
    t->op = rd_u32(r);
    R_CHECK(t->op < m->nops, "a tree for an unknown op");
    R_CHECK(i == 0 || t->op > m->trees[i - 1].op, "trees out of order or two for one op");
    t->ncands = rd_count(r, 4);
    R_CHECK(t->ncands > 0 && t->ncands <= 1024, "bad candidate count");
    R_ALLOC(t->cands, t->ncands);
    for (uint32_t k = 0; k < t->ncands; k++) R_CHECK(rd_str(R, r, &t->cands[k], false), "bad candidate name");
    t->nnodes = rd_count(r, 24);
    R_CHECK(t->nnodes > 0 && t->nnodes <= 1024, "bad node count");
    R_ALLOC(t->nodes, t->nnodes);
    for (uint32_t k = 0; k < t->nnodes; k++) {
      rill_tree_node_t *x = &t->nodes[k];
      uint32_t var = rd_u32(r);
      x->var = var == ISA_NONE ? -1 : var > INT32_MAX ? INT32_MAX : (int32_t)var;
      x->use = rd_u32(r);
      x->le = (int64_t)rd_u64(r);
      x->yes = rd_u32(r);
      x->no = rd_u32(r);
    }
    R_CHECK(1, "truncated tree");
    const char *why = isa_tree_check(t, (uint32_t)m->syms.vars.len);
    if (why) return rill__status(RILL_MALFORMED, "malformed module: trees section: tree %u (op %u): %s", i, t->op, why);
  }
  return NULL;
}

static rill_status_t read_states(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  m->nstates = rd_count(r, 12);
  R_CHECK(m->nstates > 0 || R->minor >= 7, "bad count (a module without states is written as 1.5 or older, or 1.7)");
  R_CHECK(m->nstates <= ISA_MAX_STATES, "too many states");
  R_ALLOC(m->states, m->nstates);
  for (uint32_t i = 0; i < m->nstates; i++) {
    isa_state_t *x = &m->states[i];
    R_CHECK(rd_str(R, r, &x->name, false), "bad state name");
    R_CHECK(rd_type(R, r, &x->type), "bad state type");
    x->init = rd_u32(r);
    R_CHECK(1, "truncated state");
  }
  uint32_t bad;
  const char *why = isa_states_check(m, &bad);
  if (why) {
    char name[160];
    const char *nm = m->states[bad].name ? m->states[bad].name : "?";
    rill_escape(nm, strlen(nm), name, sizeof name);
    return rill__status(RILL_MALFORMED, "malformed module: states section: state %u (%%%s): %s", bad, name, why);
  }
  return NULL;
}

static rill_status_t read_funcs(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  m->nfuncs = rd_count(r, 28);
  R_CHECK(1, "bad count");
  R_ALLOC(m->funcs, m->nfuncs);
  for (uint32_t i = 0; i < m->nfuncs; i++) {
    isa_func_t *f = &m->funcs[i];
    R_CHECK(rd_str(R, r, &f->name, false), "bad function name");
    f->nparams = rd_u32(r);
    RILL_TRY(read_types_list(R, r, &f->nresults, &f->results));
    f->nregs = rd_count(r, 16);
    R_CHECK(f->nparams <= f->nregs, "more parameters than registers");
    R_ALLOC(f->regs, f->nregs);
    for (uint32_t j = 0; j < f->nregs; j++) {
      isa_reg_t *g = &f->regs[j];
      uint32_t t = rd_u32(r);
      g->storage_size = rd_u64(r);
      if (t == ISA_NONE) {
        g->storage = true;
        R_CHECK(g->storage_size <= ((uint64_t)1 << 48), "storage too large");
      } else {
        R_CHECK(t < R->ntypes && g->storage_size == 0, "bad register type");
        g->type = R->types[t];
      }
      R_CHECK(rd_str(R, r, &g->name, true), "bad register name");
    }
    f->nstreams = rd_u32(r);
    f->nevents = rd_u32(r);
    R_CHECK(f->nstreams >= 1 && f->nstreams <= ISA_MAX_STREAMS, "stream count not in 1..64");
    R_CHECK(f->nevents <= ISA_MAX_EVENTS, "event count above 64");
    f->ncode = rd_count(r, 4);
    R_CHECK(1, "truncated function");
    R_ALLOC(f->code, f->ncode);
    for (uint32_t j = 0; j < f->ncode; j++) f->code[j] = rd_u32(r);
  }
  return NULL;
}

static rill_status_t read_debug(reader_t *R, rd_t *r) {
  isa_module_t *m = R->m;
  for (uint32_t i = 0; i < m->nfuncs; i++) {
    isa_func_t *f = &m->funcs[i];
    f->nlocs = rd_count(r, 12);
    R_CHECK(1, "truncated");
    R_ALLOC(f->locs, f->nlocs);
    for (uint32_t j = 0; j < f->nlocs; j++) {
      f->locs[j].pc = rd_u32(r);
      f->locs[j].line = rd_u32(r);
      f->locs[j].col = rd_u32(r);
      R_CHECK(j == 0 || f->locs[j].pc > f->locs[j - 1].pc, "locations out of order");
      R_CHECK(f->locs[j].pc < f->ncode, "location past the code");
    }
  }
  R_CHECK(r->p == r->end, "trailing bytes");
  return NULL;
}

static rill_status_t read_module_bytes(const rill_allocator_t *a, const uint8_t *bytes, size_t size, bool in_place,
                                       const rill_module_image_t *img, isa_module_t **out);

rill_status_t isa_read(const rill_allocator_t *a, const uint8_t *bytes, size_t size,
                       isa_module_t **out) {
  return read_module_bytes(a, bytes, size, false, NULL, out);
}

rill_status_t isa_read_in_place(const rill_allocator_t *a, const uint8_t *bytes, size_t size, isa_module_t **out) {
  return read_module_bytes(a, bytes, size, true, NULL, out);
}

rill_status_t isa_read_image(const rill_allocator_t *a, const rill_module_image_t *img, isa_module_t **out) {
  return read_module_bytes(a, img->bytes, img->size, true, img, out);
}

rill_status_t isa_write_image(const isa_module_t *m, const rill_allocator_t *a, rill_module_image_t **out) {
  pieces_t p;
  RILL_TRY(layout(m, a, true, &p));
  rill_module_image_t *img = rill__calloc(a, 1, sizeof *img);
  uint8_t *b = rill__alloc(a, p.head.len + p.tail.len);
  if (!img || !b) {
    rill__free(a, img);
    rill__free(a, b);
    pieces_free(a, &p);
    return rill__oom();
  }
  memcpy(b, p.head.data, p.head.len);
  if (p.tail.len) memcpy(b + p.head.len, p.tail.data, p.tail.len);
  img->a = a;
  img->bytes = b;
  img->size = p.head.len + p.tail.len;
  img->data = p.data.items; /* (taken from the pieces) */
  img->ndata = p.data.len;
  memset(&p.data, 0, sizeof p.data);
  pieces_free(a, &p);
  *out = img;
  return NULL;
}

static rill_status_t read_module_bytes(const rill_allocator_t *a, const uint8_t *bytes, size_t size, bool in_place,
                                       const rill_module_image_t *img, isa_module_t **out) {
  if (size < 16 || memcmp(bytes, MAGIC, 8) != 0) {
    if (size >= 4 && memcmp(bytes + 1, "RVM", 3) == 0)
      return rill__status(RILL_MALFORMED, "not a Rill module: the file was damaged by a text-mode transfer");
    return rill__status(RILL_MALFORMED, "not a Rill module (bad magic bytes)");
  }
  unsigned major = bytes[8] | bytes[9] << 8, minor = bytes[10] | bytes[11] << 8;
  if (major != RILL_BYTECODE_MAJOR || minor > RILL_BYTECODE_MINOR)
    return rill__status(RILL_MALFORMED, "module format version %u.%u; this reader reads %d.0 to %d.%d",
                        major, minor, RILL_BYTECODE_MAJOR, RILL_BYTECODE_MAJOR, RILL_BYTECODE_MINOR);
  rd_t hdr = {bytes + 12, bytes + size, "header", false};
  uint32_t nsec = rd_u32(&hdr);
  /* Minor 1 has no shapes section, minor 2 no trees section, minor 5 no states section. */
  uint32_t want = minor >= 6 ? SEC_STATES : minor >= 3 ? SEC_TREES : minor >= 2 ? SEC_SHAPES : SEC_SHAPES - 1;
  if (nsec != want) return rill__status(RILL_MALFORMED, "malformed module: %u sections, want %u", nsec, want);

  /* Find every section first: types and strings are needed before the rest. */
  rd_t sec[SEC_COUNT];
  static const char *names[SEC_COUNT] = {"", "strings", "types", "module", "weights", "consts",
                                         "ops", "funcs", "debug", "data", "shapes", "trees", "states"};
  for (uint32_t s = 1; s < SEC_COUNT; s++) {
    if (s > want) { sec[s] = (rd_t){hdr.p, hdr.p, names[s], false}; continue; }
    uint32_t id = rd_u32(&hdr), zero = rd_u32(&hdr);
    uint64_t len = rd_u64(&hdr);
    if (hdr.bad || id != s || zero != 0 || len > (uint64_t)(hdr.end - hdr.p))
      return rill__status(RILL_MALFORMED, "malformed module: section %u (%s) header is bad or truncated", s, names[s]);
    sec[s] = (rd_t){hdr.p, hdr.p + len, names[s], false};
    hdr.p += len;
  }
  if (hdr.p != hdr.end) return rill__status(RILL_MALFORMED, "malformed module: trailing bytes after the last section");

  isa_module_t *m;
  RILL_TRY(isa_module_create(a, &m));
  reader_t R = {.m = m, .minor = minor, .img = img};
  /* The data section starts with zero padding up to a 64-byte file offset. */
  size_t start = (size_t)(sec[SEC_DATA].p - bytes), pad = (64 - start % 64) % 64;
  rill_status_t st = NULL;
  if ((size_t)(sec[SEC_DATA].end - sec[SEC_DATA].p) < pad) {
    st = malformed("data", "missing alignment padding");
  } else {
    /* A private copy of the data, so the module does not borrow the caller's
     * bytes; or, in place, the caller's bytes (a mapped file the module keeps). */
    R.data_size = (size_t)(sec[SEC_DATA].end - sec[SEC_DATA].p) - pad;
    R.data = in_place ? sec[SEC_DATA].p + pad : rill__arena_memdup(&m->arena, sec[SEC_DATA].p + pad, R.data_size);
    if (!R.data) st = rill__oom();
  }
  if (!st) st = read_strings(&R, &sec[SEC_STRINGS]);
  if (!st && want >= SEC_SHAPES) st = read_shapes(&R, &sec[SEC_SHAPES]);
  if (!st) st = read_types(&R, &sec[SEC_TYPES]);
  if (!st) st = read_module(&R, &sec[SEC_MODULE]);
  if (!st) st = read_weights(&R, &sec[SEC_WEIGHTS]);
  if (!st) st = read_consts(&R, &sec[SEC_CONSTS]);
  if (!st && !img) {
    /* every embedded constant's data against its checksum (const_sums gives a linked one's own) */
    uint64_t *sums = NULL;
    st = const_sums(m, a, &sums);
    for (uint32_t i = 0; !st && i < m->nconsts; i++)
      if (sums[i] != m->consts[i].checksum) st = rill__status(RILL_MALFORMED, "malformed module: consts section: checksum mismatch (constant %u)", i);
    if (sums) rill__free(a, sums);
  }
  if (!st) st = read_ops(&R, &sec[SEC_OPS]);
  if (!st) st = read_funcs(&R, &sec[SEC_FUNCS]);
  if (!st) st = read_debug(&R, &sec[SEC_DEBUG]);
  if (!st && want >= SEC_TREES) st = read_trees(&R, &sec[SEC_TREES]);
  if (!st && want >= SEC_STATES) st = read_states(&R, &sec[SEC_STATES]);
  for (int s = SEC_STRINGS; !st && s < SEC_COUNT; s++) {
    if (s != SEC_DEBUG && s != SEC_DATA && sec[s].p != sec[s].end) st = malformed(names[s], "trailing bytes");
  }
  if (!st && minor < 11 && m->nstates && m->nstates <= ISA_MAX_STATES) {
    /* a state on a device but 0 is bytecode 1.11 */
    uint8_t dev[ISA_MAX_STATES];
    uint32_t k;
    const char *why;
    if (isa_state_devices(m, dev, &k, &why))
      for (uint32_t i = 0; !st && i < m->nstates; i++)
        if (dev[i]) st = rill__status(RILL_MALFORMED, "malformed module: state %u is loaded on device %u (states on devices but 0 are bytecode 1.11)", i, dev[i]);
  }
  if (st) {
    isa_module_free(m);
    return st;
  }
  *out = m;
  return NULL;
}

rill_status_t rill_module_image_keep(rill_module_image_t *img, void (*release)(void *ctx), void *ctx) {
  if (img->nkeep == (int)RILL_ARRAY_LEN(img->keep)) return rill__status(RILL_OUT_OF_MEMORY, "a module image keeps at most %d things alive", img->nkeep);
  img->keep[img->nkeep].release = release;
  img->keep[img->nkeep++].ctx = ctx;
  return NULL;
}

void rill_module_image_free(rill_module_image_t *img) {
  if (!img) return;
  for (int i = img->nkeep - 1; i >= 0; i--) img->keep[i].release(img->keep[i].ctx);
  rill__free(img->a, img->bytes);
  rill__free(img->a, (void *)img->data);
  rill__free(img->a, img);
}
