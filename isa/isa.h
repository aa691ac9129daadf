/* isa.h: Rill's instruction set and module, in memory and on disk.
 *
 * An isa_module_t is the one representation of a program below the
 * assembler: the assembler builds one and the writer serialises it; the
 * reader rebuilds it from bytes; the verifier checks it; the disassembler
 * prints it as lowered .vmasm, which the assembler's lowered-form parser
 * turns back into the same module. Tables that exist only in the file
 * (strings, types) are rebuilt by the writer in one canonical order, so
 * equal modules always serialise to equal bytes.
 */
#ifndef RILL_ISA_H
#define RILL_ISA_H

#include "base.h"
#include "sym.h"

typedef enum isa_opcode {
#define OP(name, mnem, fmt, flags, sem) ISA_OP_##name,
#include "opcodes.def"
#undef OP
  ISA_OP_COUNT
} isa_opcode_t;

enum { ISA_F_TERM = 1, ISA_F_SUSPEND = 2 };

typedef struct isa_opinfo {
  const char *mnemonic;
  const char *format;
  int flags;
  const char *semantics;
} isa_opinfo_t;
extern const isa_opinfo_t isa_opinfo[ISA_OP_COUNT];

#define ISA_MAX_STREAMS 64
#define ISA_MAX_EVENTS 64
#define ISA_MAX_DEVICES 64
#define ISA_NONE 0xffffffffu

/* ---- attributes of an op entry ---- */
typedef enum isa_attr_kind {
  ISA_ATTR_INT, ISA_ATTR_FLOAT, ISA_ATTR_BOOL, ISA_ATTR_STRING, ISA_ATTR_DTYPE,
  ISA_ATTR_INTS, ISA_ATTR_FLOATS, ISA_ATTR_KIND_COUNT
} isa_attr_kind_t;

typedef struct isa_attr {
  const char *name;
  isa_attr_kind_t kind;
  uint32_t count;          /* 1 for scalars */
  int64_t *ints;           /* INT, BOOL, DTYPE, INTS */
  double *floats;          /* FLOAT, FLOATS */
  const char *str;         /* STRING */
} isa_attr_t;

typedef struct isa_opdecl {
  const char *name;
  uint32_t nattrs, nin, nout;
  isa_attr_t *attrs;
  rill_type_t *in, *out;
} isa_opdecl_t;

/* ---- constants ---- */
typedef enum isa_const_origin { ISA_CONST_LITERAL, ISA_CONST_FILL, ISA_CONST_WEIGHTS } isa_const_origin_t;

typedef struct isa_weights {
  const char *alias, *path;  /* as written in the source */
} isa_weights_t;

typedef struct isa_const {
  const char *name;
  rill_type_t type;
  isa_const_origin_t origin;
  uint32_t weights;          /* WEIGHTS: index into module weights */
  const char *tensor;        /* WEIGHTS: tensor name in the file */
  bool linked;               /* data stays in the weights file */
  uint64_t file_offset;      /* linked: byte offset of the data in the file */
  uint64_t checksum;         /* of the data: XXH64 (rill__sum64) where sum64, else FNV-1a */
  bool sum64;                /* checksum and part_sums are XXH64 (bytecode 1.12; older modules' are FNV-1a) */
  const uint8_t *data;       /* embedded data (NULL when linked and not yet resolved) */
  uint64_t size;             /* bytes of data: nbytes, or one element for FILL; a shard's: the whole tensor's */
  /* A shard (bytecode 1.9, WEIGHTS only): `type` is one rank's part of the
   * file's tensor, which is `shard_parts` parts along `shard_axis` (that
   * dimension shard_parts times longer); rank r of a job of shard_parts
   * ranks gets part r, read from the file in place (rows: one range;
   * columns: one range per leading row). part_sums[r]: the checksum of part r's
   * bytes in row-major order. data (embedded) and size are the whole
   * tensor's. shard_parts 0: not a shard. shard_groups > 1: the axis
   * holds that many equal groups (a fused q/k/v projection), each cut in
   * shard_parts; part r is part r of every group, in group order. */
  uint32_t shard_axis, shard_parts, shard_groups;
  const uint64_t *part_sums;
  /* A stage constant (bytecode 1.10, WEIGHTS only, not a shard): one stage's
   * weight under --pipeline-parallel; only rank `stage` of a job of
   * `stage_ranks` uploads it. stage_ranks 0: every rank's. */
  uint32_t stage, stage_ranks;
} isa_const_t;
#define ISA_MAX_SHARD_PARTS 1024

/* A shard's geometry: part p is `outer` chunks of `chunk` bytes, chunk k at
 * byte k * chunk * parts + p * chunk of the whole tensor. */
void isa_shard_geometry(const isa_const_t *c, size_t *out_outer, size_t *out_chunk);
/* The checksum of n bytes at p by c's algorithm (c->sum64: XXH64, else FNV-1a). */
uint64_t isa_const_sum(const isa_const_t *c, const void *p, size_t n);
/* Constants of at least this many bytes (c->size) get XXH64 checksums, and
 * make their module 1.12; smaller ones keep FNV-1a, where its speed does not
 * matter, so modules of small constants keep their bytes and older readers
 * read them. */
#define ISA_SUM64_FROM 4096
/* Sets c->sum64 by c->size and c->checksum of c->size bytes at data. */
void isa_const_set_sum(isa_const_t *c, const void *data);
/* Copies part p of the whole tensor `whole` into out (the slice's bytes). */
void isa_shard_copy(const isa_const_t *c, const uint8_t *whole, uint32_t p, uint8_t *out);

/* ---- states (bytecode 1.6) ---- */
/* A tensor the VM keeps across runs (a KV cache): made when the VM is
 * created, zeros or a copy of constant `init`'s bytes, on device 0. */
typedef struct isa_state {
  const char *name;
  rill_type_t type;          /* static sizes */
  uint32_t init;             /* a constant of the same type, or ISA_NONE: zeros */
} isa_state_t;
#define ISA_MAX_STATES 65536

/* ---- functions ---- */
typedef struct isa_reg {
  rill_type_t type;          /* for tensors */
  bool storage;
  uint64_t storage_size;     /* for storages */
  const char *name;          /* debug name, may be NULL */
} isa_reg_t;

typedef struct isa_loc {
  uint32_t pc, line, col;
} isa_loc_t;

typedef struct isa_func {
  const char *name;
  uint32_t nparams, nresults; /* parameters are registers 0..nparams-1 */
  rill_type_t *results;
  uint32_t nregs;
  isa_reg_t *regs;
  uint32_t nstreams, nevents;
  uint32_t ncode;
  uint32_t *code;
  uint32_t nlocs;
  isa_loc_t *locs;            /* sorted by pc; a loc covers instructions up to the next */
} isa_func_t;

/* ---- kernel choices per size (bytecode 1.3) ---- */
/* Op-table entry `op`'s decision tree over the shape variables (the nodes
 * in preorder, as rill_tree_node_t says); a leaf's `use` indexes `cands`,
 * the candidates' names (as the device knows them), listed in the order
 * the leaves first name them, each named by some leaf. */
typedef struct isa_tree {
  uint32_t op;
  uint32_t nnodes, ncands;
  rill_tree_node_t *nodes;
  const char **cands;
} isa_tree_t;
/* Why the tree is not well formed (its structure, against nvars variables), or NULL. */
const char *isa_tree_check(const isa_tree_t *t, uint32_t nvars);
/* The candidate's name the tree picks for the variables' values. */
static inline const char *isa_tree_choose(const isa_tree_t *t, const int64_t *vals) { return t->cands[rill_tree_eval(t->nodes, vals)]; }

typedef struct isa_module {
  rill_arena_t arena;         /* owns everything below */
  const char *name;           /* optional */
  const char *source;         /* source file name for diagnostics, optional */
  uint32_t nweights, nconsts, nops, nfuncs;
  isa_weights_t *weights;
  isa_const_t *consts;
  isa_opdecl_t *ops;
  isa_func_t *funcs;
  isa_syms_t syms;            /* shape variables and the sizes built from them */
  uint32_t ntrees;            /* kernel choices per size, by ascending op */
  isa_tree_t *trees;
  uint32_t precision;         /* rill_precision_t (minor 5 and up; exact before) */
  uint32_t nstates;           /* states (bytecode 1.6) */
  isa_state_t *states;
} isa_module_t;

rill_status_t isa_module_create(const rill_allocator_t *a, isa_module_t **out);
void isa_module_free(isa_module_t *m);

/* ---- decoding ---- */
typedef struct isa_operand {
  char kind;                  /* the format letter */
  uint32_t value;             /* scalar operands; list count for lists */
  const uint32_t *list;       /* list operands */
} isa_operand_t;

#define ISA_MAX_OPERANDS 4
typedef struct isa_insn {
  isa_opcode_t op;
  uint32_t pc, len;           /* word offset and length in words */
  int noperands;
  isa_operand_t operands[ISA_MAX_OPERANDS];
} isa_insn_t;

/* Decodes the instruction at pc; false (with a reason) when it is not well formed. */
bool isa_decode(const uint32_t *code, uint32_t ncode, uint32_t pc, isa_insn_t *out,
                const char **out_why);

/* ---- file format ---- */
/* Serialises a module. The bytes are allocated with `a`. */
rill_status_t isa_write(const isa_module_t *m, const rill_allocator_t *a, uint8_t **out,
                        size_t *out_size);
/* Writes a module to a file atomically (a temporary file beside it renamed
 * over it), the constants' bytes written from where they lie (writev: no
 * buffer holding them all); the same bytes as isa_write. */
rill_status_t isa_write_file(const isa_module_t *m, const rill_allocator_t *a, const char *path, size_t *out_size);
/* Parses bytes into a module; every read is length checked. Constant data
 * is copied into the module. Linked constants are left with data NULL. */
rill_status_t isa_read(const rill_allocator_t *a, const uint8_t *bytes, size_t size,
                       isa_module_t **out);
/* The same, the constants' data left where they lie in `bytes` (checked
 * there), which must outlive the module: a module file the caller mapped. */
rill_status_t isa_read_in_place(const rill_allocator_t *a, const uint8_t *bytes, size_t size, isa_module_t **out);

/* A module made in memory (rill_module_image_t, rill.h): the module's bytes
 * but the embedded constants' data (the data section holds only its
 * alignment padding), and per embedded constant, in order, a pointer to
 * its bytes where the assembler has them; plus what those bytes live in,
 * released with the image (or the module made from it). No checksum is
 * computed or checked: the bytes never left the process. */
struct rill_module_image {
  const rill_allocator_t *a;
  uint8_t *bytes;
  size_t size;
  const uint8_t **data;
  size_t ndata;
  struct { void (*release)(void *); void *ctx; } keep[8];
  int nkeep;
  char dir[4096]; /* the source's folder: linked weights' paths start there */
};
rill_status_t isa_write_image(const isa_module_t *m, const rill_allocator_t *a, rill_module_image_t **out);
/* Parses an image as isa_read does its bytes, each embedded constant's
 * data the image's pointer. */
rill_status_t isa_read_image(const rill_allocator_t *a, const rill_module_image_t *img, isa_module_t **out);

/* ---- verifier ---- */
/* The verifier asks the op registry (a layer above) through this interface. */
typedef struct isa_op_resolver {
  void *self;
  /* NULL when the op decl names a known op whose signature holds. */
  /* syms: the module's size expressions (appended to where a check makes new ones). */
  rill_status_t (*check)(void *self, isa_syms_t *syms, const isa_opdecl_t *decl);
} isa_op_resolver_t;

rill_status_t isa_verify(const isa_module_t *m, const isa_op_resolver_t *resolver);

/* The device of each of f's streams (out[s]; device 0 where no
 * cuda_set_device_stream names s) and 1 + the largest device named
 * (*out_ndevices). False, with a reason, where two instructions give one
 * stream different devices or stream 0 a device but 0. f's code must decode. */
bool isa_func_devices(const isa_func_t *f, uint8_t out[ISA_MAX_STREAMS], uint32_t *out_ndevices, const char **out_why);
/* Whether any function uses the devices' instructions (a 1.4 module). */
bool isa_module_uses_devices(const isa_module_t *m);
/* The device each state lives on (out[i], for m->nstates): the device of
 * the stream its load_state instructions are issued on (device 0 where no
 * function loads it; bytecode 1.11 lets it be another, the device form of
 * a split: docs/tensor_parallel.md). False, with the state and a reason,
 * where two functions load one state on different devices or code does not
 * decode. */
bool isa_state_devices(const isa_module_t *m, uint8_t *out, uint32_t *out_state, const char **out_why);
/* Why the module's state declarations are not well formed (names, static
 * types, init constants of the same type), or NULL. */
const char *isa_states_check(const isa_module_t *m, uint32_t *out_state);
/* The lowest bytecode minor version that holds m: 11 with a state on a
 * device but 0, 10 with stage constants, 9 with shards, 8 with a dtype of 1.8
 * (i16, u16, u32, u64) anywhere, 7 with bind_dims, 6 with
 * states, 5 with a precision other than exact, 4 with the devices'
 * instructions, else 2 (3 with trees). */
unsigned isa_module_minor(const isa_module_t *m);

/* ---- disassembler ---- */
/* Lowered .vmasm text of the module (NUL-terminated in out->data). */
rill_status_t isa_disassemble(const isa_module_t *m, rill_buf_t *out);

/* Helpers shared by the disassembler and the assembler's printers. */
rill_status_t isa_print_type(rill_buf_t *b, const rill_type_t *t);
rill_status_t isa_print_string(rill_buf_t *b, const char *s);
rill_status_t isa_print_attrs(rill_buf_t *b, const isa_attr_t *attrs, uint32_t n);
/* An op declaration as the lowered form writes it after `op $N = `: name(types) -> (types) {attrs}. */
rill_status_t isa_print_opdecl(rill_buf_t *b, const isa_opdecl_t *o);
/* The same with the module's sizes: as `rill dis` prints them, or with vals
 * (one per shape variable) their values. */
rill_status_t isa_print_opdecl_at(rill_buf_t *b, const isa_module_t *m, const isa_opdecl_t *o, const int64_t *vals);
const char *isa_attr_kind_name(isa_attr_kind_t k);

/* Where an instruction came from in the source, if the module knows. */
bool isa_func_loc(const isa_func_t *f, uint32_t pc, uint32_t *out_line, uint32_t *out_col);

#endif
