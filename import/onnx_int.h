/* onnx_int.h: the importer's inner pieces, shared by the graph walk
 * (onnx_import.c), the op mappings (onnx_ops.c and the files by op family
 * that its table names) and the tensor reader
 * (onnx_read.c). Values are ONNX names bound to a .vmasm name, a static
 * type and, where known at import, their data (initializers, Constant
 * nodes and what folds from them). */
#ifndef RILL_IMPORT_ONNX_INT_H
#define RILL_IMPORT_ONNX_INT_H

#include <stdio.h>

#include "isa/sym.h"
#include "onnx.h"
#include "onnx.pb-c.h"

/* Largest tensor the importer will describe: beyond it a dimension is "huge". */
#define ONNX_MAX_BYTES ((int64_t)1 << 36)
/* Known values up to this many elements are folded at import. */
#define ONNX_FOLD_MAX 65536
/* the most inputs a node may have (Concat's, say: an SSD head's 90) */
#define ONNX_MAX_INPUTS 256
/* The newest opset of the default domain read: 18 moved the reductions'
 * axes and Pad's axes to inputs and added Split's num_outputs, 19 to 22
 * changed types the language lacks (float8, int4, strings) and added Gelu;
 * the ops whose meaning changed check m->opset. */
#define ONNX_MAX_OPSET 22

typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf_t;
void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An initializer's raw_data left in the model's bytes: read there, not
 * copied (onnx_strip). */
typedef struct onnx_raw {
  const uint8_t *data;
  size_t len;
  bool set;
} onnx_raw_t;

/* The safetensors file of the weights as pieces: its header, then each
 * tensor's bytes where they are (owned ones freed with the parts; the others
 * in the model file's mapping, which the parts hold). */
struct onnx_parts {
  uint8_t *head;  /* the 8-byte header length and the JSON header */
  size_t head_len;
  int n;
  const void **ptr;
  size_t *len;
  void **owned;
  int nowned;
  void *map;  /* the model file's mapping (munmap), or NULL */
  size_t map_len;
};

typedef struct ival {
  char *onnx;            /* ONNX name */
  char *name;            /* .vmasm name, without % */
  rill_type_t t;
  void *data;            /* known data (numel * dtype size), or NULL */
  bool sym;              /* data (i64) holds sizes over shape variables (isa/sym.h): a shape, never a tensor */
  bool declared;         /* a const statement or parameter names it */
  struct ival *rt;       /* sym: the run-time tensor of its sizes, once made */
  struct ival *copy_of;  /* a copy (Identity) of this value, or NULL */
  int scope;             /* the function it is a value of: 0 @main, 1 and up the subgraphs being imported, innermost last */
  bool seq;              /* an ONNX sequence of known length (onnx_sequence.c): items, t's dtype theirs */
  struct ival **items;   /* its values */
  int nitems;
  bool opt;              /* an ONNX optional: seq too, of 0 or 1 values (a tensor or a sequence) */
  bool param;            /* a parameter of @main */
  bool borrowed;         /* data points into the model's bytes (an initializer's raw data, onnx_strip): read only, not freed */
  struct imp_dq *dq;     /* a DequantizeLinear result (onnx_quant.c): its operands, and its statements where held back */
} ival_t;

/* an enclosing graph's value that a subgraph's function takes as a parameter */
typedef struct imp_capture { ival_t *outer, *inner; } imp_capture_t;

typedef struct imp {
  ival_t **vals;
  int nvals, cap;
  sbuf_t body, consts;
  /* hash tables of the values by ONNX name and by .vmasm name */
  struct vtab { ival_t **slot; size_t cap, n; } by_onnx, by_name;
  /* weights: the values written to the safetensors file, in order */
  ival_t **weights;
  int nweights, wcap;
  int opset;
  const Onnx__NodeProto *node;  /* the node being imported, for messages */
  const char *base_dir;
  const onnx_options_t *opt;
  int tmp;
  int scope;                    /* the function being written (ival_t.scope) */
  imp_capture_t *caps;          /* its captures */
  int ncaps, capcap;
  sbuf_t funcs;                 /* the subgraphs' functions */
  int nfuncs;
  int nbound;                   /* shape variables made for sizes read back at run time (n0, n1, ...) */
  /* symbolic import: an input's dim_param is a shape variable of syms, and
   * sizes computed from it are polynomials there (dims and sym data) */
  bool symbolic;
  isa_syms_t syms;
  uint64_t user_ranged;  /* the variables (by index) whose range --shape NAME=LO..HI gave */
  /* the raw data of the main graph's initializers that onnx_strip left in
   * the model's bytes, by initializer index (nraw of them) */
  const onnx_raw_t *raw;
  size_t nraw;
  bool keep_parts;       /* the weights as onnx_parts_t, not one buffer (onnx_result_t.parts) */
  const Onnx__GraphProto *graph;  /* the graph whose nodes are being imported */
  /* nodes a fusion has imported with an earlier one (onnx_qdq_fuse: the
   * QuantizeLinear after a product), skipped when their turn comes */
  const Onnx__NodeProto **skip;
  int nskip, skipcap;
  rill_status_t err;
} imp_t;

/* errors: the first one sticks; every call returns NULL for convenience */
void *imp_fail(imp_t *m, rill_code_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "unsupported" naming the current node, op type and opset */
void *imp_unsup(imp_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* values */
ival_t *imp_new(imp_t *m, const char *onnx, const rill_type_t *t);   /* a fresh value (temporary when onnx is NULL) */
ival_t *imp_find(imp_t *m, const char *onnx);
ival_t *imp_const(imp_t *m, const rill_type_t *t, const void *data); /* a known temporary */
const char *imp_use(imp_t *m, ival_t *v);                             /* its name, declaring a const on first use */
size_t imp_numel(const rill_type_t *t);
bool imp_type_ok(imp_t *m, const rill_type_t *t);                     /* size limits */
const char *imp_type_str(imp_t *m, const rill_type_t *t, char *buf, size_t n);
bool imp_is_float(rill_dtype_t d);
bool imp_is_int(rill_dtype_t d);

/* v as seen from the function being written: an enclosing graph's value
 * (not known at import) becomes a parameter of it, once (imp_capture_t);
 * a value of a subgraph already written is not seen (NULL) */
ival_t *imp_capture(imp_t *m, ival_t *v);
ival_t *imp_lookup(imp_t *m, const char *onnx);
/* the nodes of a graph (main or a subgraph), in order */
bool imp_nodes(imp_t *m, const Onnx__GraphProto *g);
/* a graph input's type (dims from --shape or symbolic dimensions) */
bool imp_input_type(imp_t *m, const Onnx__ValueInfoProto *vi, rill_type_t *t);
bool imp_tensor_input_type(imp_t *m, const char *nm, const Onnx__TypeProto__Tensor *tt, int elem, rill_type_t *t);
/* the size --shape NAME=N gives (not a range or a whole shape), else -1 */
int64_t imp_shape_option(imp_t *m, const char *name);
/* a type as .vmasm writes it, sizes over shape variables by name */
void imp_type_text(imp_t *m, sbuf_t *b, const rill_type_t *t);
/* a known initializer of a graph as a value */
bool imp_initializer(imp_t *m, const Onnx__TensorProto *tp, const onnx_raw_t *raw);
/* emits `%OUT = OP(ARGS) {ATTRS}`; attrs may be NULL */
ival_t *imp_emit(imp_t *m, const char *onnx_out, const rill_type_t *t, const char *op, ival_t *const *args, int nargs,
                 const char *attrs);
/* emits with several results */
bool imp_emit_multi(imp_t *m, ival_t **outs, int nouts, const char *op, ival_t *const *args, int nargs, const char *attrs);
/* reshape to type t (same numel), a no-op when the dims are the same */
ival_t *imp_reshape(imp_t *m, const char *onnx_out, ival_t *x, const rill_type_t *t);
ival_t *imp_cast(imp_t *m, const char *onnx_out, ival_t *x, rill_dtype_t d);
/* a reshape of x (not known) to t's dims, always written: sizes bound at run time may be in them */
ival_t *imp_sized_view(imp_t *m, const char *onnx_out, ival_t *x, const rill_type_t *t);
/* a copy of x, written even where x is known (a function's result of its own) */
ival_t *imp_emit_copy(imp_t *m, ival_t *x);
/* binds an ONNX output name to an existing value (Identity and the like) */
ival_t *imp_alias(imp_t *m, const char *onnx_out, ival_t *x);
void imp_list(imp_t *m, sbuf_t *b, const int64_t *v, int n);  /* "[a, b, c]", sizes over shape variables as the language writes them */
/* size arithmetic over numbers and symbolic sizes (the result, or 0 after a failure) */
int64_t imp_dim_add(imp_t *m, int64_t a, int64_t b);
int64_t imp_dim_mul(imp_t *m, int64_t a, int64_t b);
bool imp_has_sym(const ival_t *v);  /* a symbolic type or symbolic data */
/* v's sizes (sym data) as a tensor made at run time (once per value) */
ival_t *imp_sizes_tensor(imp_t *m, ival_t *v);
/* True when lo_min <= d <= hi_max at every size in the shape variables'
 * ranges, after narrowing the range of one variable that d depends on where
 * the user gave it none (imp_sym_fit in onnx_import.c says why). */
bool imp_sym_fit(imp_t *m, int64_t d, int64_t lo_min, int64_t hi_max);
/* The variables' ranges as imp_sym_fit may narrow them (the first 64), kept
 * to be put back where a mapping that narrowed some takes another way. */
typedef struct imp_ranges {
  size_t n;
  int64_t lo[64], hi[64];
  bool declared[64];
} imp_ranges_t;
void imp_ranges_save(imp_t *m, imp_ranges_t *r);
void imp_ranges_restore(imp_t *m, const imp_ranges_t *r);
/* op (add, sub, mul, div truncating, maximum, minimum, or a comparison) of
 * two known i64 values that may hold sizes over shape variables; a
 * comparison that the variables' ranges do not decide is unsupported */
ival_t *imp_sym_binary(imp_t *m, const char *out, const char *op, ival_t *a, ival_t *b);

/* tensors (onnx_read.c) */
bool onnx_dtype(int32_t elem_type, rill_dtype_t *out);
const char *onnx_dtype_name(int32_t elem_type);
/* Reads a TensorProto's data into a new buffer (malloc); its type into *t.
 * With raw (its raw_data, left in the model's bytes by onnx_strip), the data
 * is that, not copied, and *out_borrowed is set (NULL: always copied). */
rill_status_t onnx_tensor_read(const Onnx__TensorProto *tp, const char *base_dir, const onnx_raw_t *raw, rill_type_t *t, void **out_data,
                               bool *out_borrowed);
/* The model's bytes with the raw_data of the main graph's initializers of
 * at least min_len bytes left out, for protobuf-c to parse without copying
 * them; raw[i] says where initializer i's data is. False where the bytes
 * are not a model this walk reads (then parse them whole: protobuf-c gives
 * the error). */
bool onnx_strip(const uint8_t *data, size_t size, size_t min_len, uint8_t **out, size_t *out_len, onnx_raw_t **raw, size_t *nraw);
/* onnx_emit.c: a statement's head (its results, op, operands), the operands declared first */
void imp_emit_head(imp_t *m, ival_t *const *outs, int nouts, const char *op, ival_t *const *args_in, int nargs, const char *attrs);
/* --shape NAME=N's N (-1: none), and NAME=LO..HI's range */
int64_t imp_opt_shape(const onnx_options_t *o, const char *name);
bool imp_opt_range(const onnx_options_t *o, const char *name, int64_t *lo, int64_t *hi);
/* One import with every input dimension concrete (or a refusal naming the
 * symbolic one); symbolic: sizes over shape variables kept as polynomials. */
rill_status_t imp_import_once(const Onnx__ModelProto *model, const char *base_dir, const onnx_options_t *options, bool symbolic,
                              const onnx_raw_t *raw, size_t nraw, bool keep_parts, onnx_result_t *out);
/* onnx_symbolic.c: the model's symbolic input dimensions that no --shape
 * binds, and the import at probe sizes with the texts merged */
#define SYM_MAX 8
typedef struct symdim {
  const char *name;
  bool ranged;
  int64_t lo, hi, p[3];
} symdim_t;
rill_status_t imp_find_symbolic(const Onnx__ModelProto *model, const onnx_options_t *o, symdim_t *out, int *n);
rill_status_t imp_import_symbolic(const Onnx__ModelProto *model, const char *base_dir, const onnx_options_t *options, const symdim_t *sd,
                                  int nsym, const onnx_raw_t *raw, size_t nraw, onnx_result_t *out);
/* onnx_import_bytes, with keep_parts leaving the weights as pieces
 * (out->parts) that may point into data, which must outlive the result. */
rill_status_t onnx__import(const uint8_t *data, size_t size, const char *base_dir, const onnx_options_t *options, bool keep_parts,
                           onnx_result_t *out);
/* The safetensors file of the weights as pieces pointing at their data. */
rill_status_t onnx_safetensors_parts(ival_t *const *w, int n, struct onnx_parts **out);
/* The safetensors bytes of the weights (malloc). */
rill_status_t onnx_safetensors(ival_t *const *w, int n, uint8_t **out, size_t *out_len);
/* The pieces as one buffer (malloc). */
rill_status_t onnx_parts_join(const struct onnx_parts *p, uint8_t **out, size_t *out_len);
void onnx_parts_free(struct onnx_parts *p);

/* frees a DequantizeLinear record (onnx_quant.c) */
void onnx_dq_free(struct imp_dq *dq);

/* op mappings (the table in onnx_ops.c): NULL when there is none for this op type */
typedef bool (*onnx_op_fn)(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin);
onnx_op_fn onnx_op_find(const char *op_type);
/* Whether the op's mapping takes sizes over shape variables (in types and
 * in known values); the others are given numbers only. */
bool onnx_op_symbolic(const char *op_type);
/* The first attribute of the node that its op's mapping does not know, or NULL. */
const char *onnx_op_unknown_attr(const char *op_type, const Onnx__NodeProto *n);
/* attribute helpers over the current node */
const Onnx__AttributeProto *onnx_attr_get(const Onnx__NodeProto *n, const char *name);
int64_t onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def);
double onnx_attr_f(const Onnx__NodeProto *n, const char *name, double def);
const char *onnx_attr_s(const Onnx__NodeProto *n, const char *name, const char *def, char *buf, size_t nbuf);
int onnx_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max); /* -1 when absent */

#endif
