/* asm.h: the assembler's internals.
 *
 * .vmasm text is lexed into one token array, parsed into module-level
 * declarations and per-function statement lists, checked (names, types,
 * shapes, the stream discipline of hand-scheduled bodies) into a per-
 * function IR of nodes and values, run through the pass pipeline (stream
 * schedule, memory planning, register allocation, emission) and collected
 * into an isa_module_t, which the writer serialises. Functions written in
 * lowered form (docs/lowered.md) skip the passes: their instructions are
 * taken as written. The first error stops everything and is reported as
 * FILE:LINE:COL: error: MESSAGE.
 */
#ifndef RILL_ASM_H
#define RILL_ASM_H

#include "../isa/isa.h"
#include "../isa/safetensors.h"
#include "../isa/sym.h"
#include "../ops/ops.h"

/* ---- tokens ---- */
typedef enum tok_kind {
  T_EOF, T_NEWLINE, T_NAME, T_VALUE /* %x */, T_FUNC /* @f */, T_OPREF /* $3 */, T_NUMBER,
  T_STRING, T_LPAREN, T_RPAREN, T_LBRACK, T_RBRACK, T_LBRACE, T_RBRACE, T_COMMA, T_COLON,
  T_EQ, T_ARROW
} tok_kind_t;

typedef struct token {
  tok_kind_t kind;
  uint32_t line, col;
  const char *text;   /* into the source; for VALUE/FUNC/OPREF without the sigil */
  uint32_t len;
  /* numbers */
  bool is_float, is_bool;
  bool is_big;        /* an integer above INT64_MAX (a u64 literal): i is INT64_MAX, u the value */
  int64_t i;
  uint64_t u;
  double f;
  /* strings: decoded, NUL-terminated (arena) */
  char *str;
} token_t;

/* ---- IR ---- */
/* V_STATE: one version of a module state in a function: the first (def -1)
 * as the function finds it, each later one made by the node `def` (an
 * update of that state, or a call, if or while, which may change any
 * state); versions of one state share one register, loaded at entry. */
typedef enum val_kind { V_PARAM, V_CONST, V_RESULT, V_STATE } val_kind_t;

typedef struct ir_value {
  const char *name;
  rill_type_t type;
  val_kind_t kind;
  uint32_t line, col;
  uint32_t konst;          /* V_CONST: module const index; V_STATE: module state index */
  int32_t prev;            /* V_STATE: the version this one replaces (-1: the first) */
  int32_t def;             /* defining node, -1 for params and consts */
  int32_t last_use;        /* node index of the last use (aliases included); INT32_MAX when it escapes */
  bool escapes;            /* returned from the function */
  int32_t slot;            /* memory plan: storage slot, -1 for none */
  int32_t reg;             /* register */
  uint32_t host;           /* an in-place concat's operand: 1 + the concat's result, whose slot holds it at byte `offset`; 0: none */
  uint32_t offset;
  uint32_t within;         /* an in-place split's result: 1 + the split's operand, whose slot holds it at byte `offset`; 0: none */
  uint8_t device;          /* V_CONST: the device whose copy the register loads (the device form; 0 otherwise) */
} ir_value_t;

typedef enum node_kind {
  N_OP, N_CALL, N_IF, N_WHILE, N_RETURN, N_SET_STREAM, N_ADD_EVENT, N_WAIT_EVENT,
  N_BIND                   /* bind_dims(%v, N...): args[0] the sizes; dims the variables (bool[0, N...]) */
} node_kind_t;

typedef struct ir_node {
  node_kind_t kind;
  uint32_t line, col;
  uint32_t target;         /* N_OP: op table index; N_CALL: function; N_IF: then; N_WHILE: cond */
  uint32_t target2;        /* N_IF: else; N_WHILE: body */
  uint32_t *args, nargs;   /* value ids */
  uint32_t *res, nres;     /* value ids */
  int stream;              /* the stream the node is issued on */
  int event, event_stream; /* N_ADD_EVENT / N_WAIT_EVENT */
  int from_device;         /* N_OP: a copy {device=D}: 1 + the device its operand lives on (copy_device); else 0 */
  bool in_place;           /* a concat whose operands' producers write its result, or a split whose results are parts of its operand: it emits only views */
  rill_type_t dims;        /* N_BIND: bool[0, the variables...] */
} ir_node_t;

typedef struct ir_func {
  uint32_t index;          /* into the module's functions */
  RILL_VEC(ir_node_t) nodes;
  RILL_VEC(ir_value_t) values;
  uint32_t nparams;
  bool hand_scheduled;     /* the body has stream statements */
  uint32_t nstreams;       /* 1 + the largest stream used */
  uint8_t sdev[ISA_MAX_STREAMS]; /* each stream's device (set_stream(S, device=D)) */
  uint64_t events_used;    /* mask of event numbers the body names */
  uint32_t nslots;
  uint64_t *slot_size;
  uint32_t cond_reg_base;  /* registers for while conditions come after values */
} ir_func_t;

/* ---- the assembler's state ---- */
typedef struct asm_ctx asm_ctx_t;

/* A pass runs over one function's IR. Policies (stream schedules, fusion)
 * plug in as further passes. */
typedef struct asm_pass {
  const char *name;
  rill_status_t (*run)(asm_ctx_t *ctx, ir_func_t *f);
  bool optimising;         /* runs at -O1 only (options' no_opt turns it off) */
} asm_pass_t;

typedef struct func_decl {
  const char *name;
  uint32_t line, col;
  uint32_t nparams, nresults;
  const char **param_names;
  uint32_t *param_line, *param_col;
  rill_type_t *param_types, *results;
  size_t body_start, body_end;  /* token range of the body (inside the braces) */
  bool lowered;
  uint32_t nstreams, nevents;   /* lowered header */
} func_decl_t;

typedef struct weights_decl {
  const char *alias, *path;
  uint32_t line, col;
  isa_st_t *st;                 /* opened on first use */
  bool in_memory;               /* st is rill_asm_options_t's pieces, not a file */
} weights_decl_t;

struct asm_ctx {
  const rill_allocator_t *a;
  rill_arena_t arena;           /* the AST and IR; the module has its own */
  const char *path;             /* source path for diagnostics */
  char dir[4096];               /* folder of the source, for weights paths */
  const char *src;
  size_t src_len;
  token_t *toks;
  size_t ntoks;
  const rill_asm_options_t *opts;
  isa_module_t *m;
  RILL_VEC(func_decl_t) funcs;
  RILL_VEC(weights_decl_t) weights;
  RILL_VEC(isa_const_t) consts;
  RILL_VEC(isa_state_t) states;     /* module `state` declarations */
  RILL_VEC(isa_opdecl_t) ops;
  uint32_t nexplicit_ops;       /* ops declared with `op $N = ...` */
  const char *module_name, *source_name;
  isa_syms_t syms;                  /* shape variables and size expressions */
  rill_map_t const_map, func_map;   /* names to indices */
  rill_map_t state_map;             /* state names to indices */
  rill_map_t lit_map;               /* literal constant bytes to const index */
  rill_map_t op_map;                /* serialised op decl to op index */
  rill_map_t stack_map;             /* merged linears: their weights' const indices to the stacked weights' const */
  uint32_t nlits;
  uint32_t nfolds;                  /* constants made by folding (fold%u) */
  bool has_emit;                    /* some function emits or runs a collective: calls, emits and collectives keep their order */
  bool has_bind;                    /* some function binds sizes (bind_dims): calls, if and while order what follows them as bind_dims does */
  /* ios profile (schedule.c), loaded on first use: op text -> index into prof_us/prof_two_us */
  bool prof_loaded;
  rill_map_t prof_map;
  double *prof_us, *prof_two_us;
  const char *prof_best;     /* the profile's measured best policy, or NULL */
  rill_precision_t precision;       /* the module's: the options' or a `precision` statement's */
  bool has_precision;
  /* kernel choices per size: `choose` lines of lowered text, or the profile's trees (trees.c) */
  RILL_VEC(isa_tree_t) trees;
};

/* An op node's declaration (in the op table, which interning may move:
 * hold no pointer to it across asm_intern_op), whether a node is op
 * `name`, and a declaration's attribute `name` (NULL where absent). */
static inline const isa_opdecl_t *asm_decl(const asm_ctx_t *c, const ir_node_t *n) { return &c->ops.items[n->target]; }
/* Whether type t holds one element (every dim 1): the same in any layout or order. */
static inline bool asm_single_element(const rill_type_t *t) {
  for (int k = 0; k < t->rank; k++)
    if (t->dims[k] != 1) return false;
  return true;
}
static inline bool asm_is_op(const asm_ctx_t *c, const ir_node_t *n, const char *name) {
  return n->kind == N_OP && !strcmp(asm_decl(c, n)->name, name);
}
static inline const isa_attr_t *asm_attr(const isa_opdecl_t *d, const char *name) {
  for (uint32_t i = 0; i < d->nattrs; i++)
    if (!strcmp(d->attrs[i].name, name)) return &d->attrs[i];
  return NULL;
}

/* Whether node n is a view op (its result an alias of its operand). */
bool asm_is_view(const asm_ctx_t *c, const ir_node_t *n);
/* The state value v reads (a version, or a view of one), as a value id, or -1. */
int32_t asm_state_root(const asm_ctx_t *c, const ir_func_t *f, uint32_t v);
/* Whether node n reads a state (an operand is a version or a view of one)
 * or is an effect (update, emit): the optimising rewrites leave it alone,
 * so that no read moves across the update that follows it. */
bool asm_touches_state(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n);

/* The axis of a concat node, counted from the front. */
static inline int64_t asm_concat_axis(const asm_ctx_t *c, const ir_node_t *n) {
  const isa_opdecl_t *d = asm_decl(c, n);
  const isa_attr_t *a = asm_attr(d, "axis");
  int64_t axis = a ? a->ints[0] : 0;
  return axis < 0 ? axis + (int64_t)d->out[0].rank : axis;
}

/* Diagnostics: FILE:LINE:COL: error: MESSAGE (RILL_ASSEMBLY_ERROR). */
rill_status_t asm_error(const asm_ctx_t *c, uint32_t line, uint32_t col, const char *fmt, ...) RILL_PRINTF(4, 5);
rill_status_t asm_error_at(const asm_ctx_t *c, const token_t *t, const char *fmt, ...) RILL_PRINTF(3, 4);

rill_status_t asm_lex(asm_ctx_t *c);
/* The value of an all-digits token (e.g. $12), or -1 when it has other characters or is too long. */
int64_t asm_tok_digits(const token_t *t);
const char *asm_tok_desc(const token_t *t, char *buf, size_t n);
/* Whether integer token t is a value of integer dtype d. */
bool asm_int_fits(const token_t *t, rill_dtype_t d);

/* Module-level parse: declarations, function headers and body token ranges. */
rill_status_t asm_parse_module(asm_ctx_t *c);
/* Parses a type at tokens[*pos]. */
rill_status_t asm_parse_type(asm_ctx_t *c, size_t *pos, rill_type_t *out);
/* Parses `{name=value, ...}` at tokens[*pos] into an attribute array. */
rill_status_t asm_parse_attrs(asm_ctx_t *c, size_t *pos, isa_attr_t **out, uint32_t *out_n);

/* The module constant (lit%u) of scalar literal `value` (8 bytes, the
 * dtype's bytes first, the rest 0) of dtype d, made once per dtype and value. */
rill_status_t asm_literal_const(asm_ctx_t *c, rill_dtype_t d, const uint8_t value[8], uint32_t *out);
int32_t asm_find_func(const asm_ctx_t *c, const char *name, size_t len);
int32_t asm_find_const(const asm_ctx_t *c, const char *name, size_t len);
int32_t asm_find_state(const asm_ctx_t *c, const char *name, size_t len);

/* A surface function body: statements to IR, checked. */
rill_status_t asm_build_ir(asm_ctx_t *c, uint32_t fi, ir_func_t *f);
/* The pass pipeline for one function, ending with emission into c->m. */
rill_status_t asm_run_passes(asm_ctx_t *c, ir_func_t *f, isa_func_t *out);
/* The stream schedule of a body without stream statements (the policy in the options). */
rill_status_t asm_schedule(asm_ctx_t *c, ir_func_t *f);
/* Makes `items` (len, cap; taken over) the function's node list, where node i
 * of the old list is newpos[i] of the new one, and moves value definitions. */
void asm_replace_nodes(asm_ctx_t *c, ir_func_t *f, ir_node_t *items, size_t len, size_t cap, const int32_t *newpos);
/* A lowered function body, taken as written. */
rill_status_t asm_build_lowered(asm_ctx_t *c, uint32_t fi, isa_func_t *out);

/* The constant behind value v with its data at hand (not linked), or NULL. */
const isa_const_t *asm_const_of(const asm_ctx_t *c, const ir_func_t *f, uint32_t v);
/* A new module constant (fold%u) of type t holding `data` (arena; NaNs made
 * canonical): every element, or with `fill` the one element all equal; with
 * out_value, a value of f for it. */
rill_status_t asm_new_const(asm_ctx_t *c, ir_func_t *f, const rill_type_t *t, uint8_t *data, bool fill, uint32_t *out_konst,
                            uint32_t *out_value);

/* --precision=f16|bf16 (precision.c): an f32 function computed in half. */
rill_status_t asm_pass_precision(asm_ctx_t *c, ir_func_t *f);

/* Optimising passes (optimize.c): constants and batch norms folded;
 * elementwise groups fused into one op `fused`. */
rill_status_t asm_pass_fold(asm_ctx_t *c, ir_func_t *f);
rill_status_t asm_pass_fuse(asm_ctx_t *c, ir_func_t *f);
rill_status_t asm_pass_layout(asm_ctx_t *c, ir_func_t *f);
/* The rewrite machinery of optimize.c's merges: merge_pass runs `merge` at
 * each node i in order (nodes that touch a state are left alone), which
 * marks in `dead` the nodes it merged away (nuse: the uses as they were
 * before the pass), then drops them; sole_maker is the node that makes
 * value v where it is an op `name` (any: NULL) still in place whose result
 * only this use reads (once, not returned), or -1. */
typedef rill_status_t (*asm_merge_fn)(asm_ctx_t *c, ir_func_t *f, size_t i, const uint32_t *nuse, bool *dead);
rill_status_t asm_merge_pass(asm_ctx_t *c, ir_func_t *f, asm_merge_fn merge);
int32_t asm_sole_maker(const asm_ctx_t *c, const ir_func_t *f, const uint32_t *nuse, const bool *dead, uint32_t v, const char *name);
/* decode_fuse.c: a few-row product's rms_norm or gated unit before it and
 * residual add after it become one fused_linear (run by asm_pass_fuse). */
rill_status_t asm_fuse_decode(asm_ctx_t *c, ir_func_t *f);
/* Op node n's parameters (ops_infer's, of its declaration); false where
 * they cannot be had (attention.c). */
bool asm_op_params(asm_ctx_t *c, const ir_node_t *n, ops_params_t *p);
/* A new result value of f of type t named after value v with `suffix`, at v's place in the source (attention.c). */
rill_status_t asm_value_like(asm_ctx_t *c, ir_func_t *f, uint32_t v, const rill_type_t *t, const char *suffix, uint32_t *out);
/* windows.c: Swin's q/k/v split from one product becomes one product per
 * part; chains that only move rows (window partitions, their reverse,
 * torch.roll's slices and concats) become one gather; slices that keep
 * everything become views. */
rill_status_t asm_pass_windows(asm_ctx_t *c, ir_func_t *f);
/* attention.c: matmul-scale-(mask)-softmax-matmul subgraphs become one `attention` op. */
rill_status_t asm_pass_attention(asm_ctx_t *c, ir_func_t *f);

/* --tensor-parallel=N (tensor_parallel.c): every built function at once
 * (built[i]: funcs[i] is an IR), before their passes. */
rill_status_t asm_tensor_parallel(asm_ctx_t *c, ir_func_t *funcs, const bool *built, size_t nf);
/* --data-parallel=N (data_parallel.c): every built function at once. */
rill_status_t asm_data_parallel(asm_ctx_t *c, ir_func_t *funcs, const bool *built, size_t nf);
/* The axis of op node n's results that holds the batch's `rows` (ax: per value
 * of f, -1 none), found by the registry's row rule; -1 when none does. */
int asm_rows_axis(asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n, const int8_t *ax, int64_t rows);
/* --pipeline-parallel=N (pipeline_parallel.c): @main cut into N stages, one a
 * rank; adds functions (funcs and built have room for cap, *nf grows). */
rill_status_t asm_pipeline_parallel(asm_ctx_t *c, ir_func_t *funcs, bool *built, size_t *nf, size_t cap);
/* Rewriting helpers the splitting passes share (tensor_parallel.c). */
typedef RILL_VEC(ir_node_t) asm_nodes_t;
/* --parallel-form=devices (devices_form.c): a function split for N ranks
 * (rank(), collectives over the ranks) as one VM's N devices: device d runs
 * rank d's part on stream d; a pass after the optimising ones. */
rill_status_t asm_pass_devices(asm_ctx_t *c, ir_func_t *f);
/* The device form's stream for device d: 0 for device 0, else 64 - d
 * (numbered from the top, so that they meet no stream number of a device-0
 * function that calls it: a stream number keeps one device in a run). */
static inline int asm_device_stream(int d) { return d ? ISA_MAX_STREAMS - d : 0; }
/* add_event(0) on stream `from`, then wait_event(0) on stream `to`, appended
 * to out (event 0 is free again at once: the wait follows its record). */
rill_status_t asm_event_edge(asm_ctx_t *c, asm_nodes_t *out, const ir_node_t *at, int from, int to);
/* *out_y := copy(v) {device=the device of `stream`}, issued on `stream`, v living on device from_dev; appended to out. */
rill_status_t asm_device_copy(asm_ctx_t *c, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, uint32_t v, int from_dev, int stream, uint32_t *out_y);
/* f's body becomes *out (taken: *out is left empty; the old body freed),
 * scheduled by hand: the splitting passes' streams and events are final. */
void asm_take_nodes(asm_ctx_t *c, ir_func_t *f, asm_nodes_t *out);
/* A new result value of f (no definition yet). */
rill_status_t asm_add_result(asm_ctx_t *c, ir_func_t *f, const char *name, const rill_type_t *ty, uint32_t *out);
/* Node n's op declaration inferred again from its operands' types now and attrs; its results typed from it. */
rill_status_t asm_retype(asm_ctx_t *c, ir_func_t *f, ir_node_t *n, const char *op, const isa_attr_t *attrs, uint32_t nattrs);
/* Appends op node `op`(args) -> res to out (position, stream of `at`), typed; res's definition set to it. */
rill_status_t asm_new_op(asm_ctx_t *c, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, const char *op, const isa_attr_t *attrs,
                         uint32_t nattrs, const uint32_t *args, uint32_t nargs, uint32_t res);
/* Node n's op re-inferred from its operands' types now (asm_retype), a `shape`
 * attribute whose axis b is the batch's `rows` taking `part` there (b -1: none;
 * both may be symbolic sizes). */
rill_status_t asm_retype_rows(asm_ctx_t *c, ir_func_t *f, ir_node_t *n, int b, int64_t rows, int64_t part);
/* Passes the note (FILE:LINE:COL: note: ...) to the options' note callback, if any (data_parallel.c). */
void asm_note(asm_ctx_t *c, const char *fmt, ...) RILL_PRINTF(2, 3);
/* One attribute `name` (arena): an integer v, or a string str. */
isa_attr_t *asm_one_attr(asm_ctx_t *c, const char *name, isa_attr_kind_t kind, int64_t v, const char *str);
/* A value of f for the scalar literal v of dtype d. */
rill_status_t asm_literal_value(asm_ctx_t *c, ir_func_t *f, rill_dtype_t d, double v, uint32_t *out);
/* A shard constant's part checksums from the whole tensor's bytes. */
rill_status_t asm_shard_sums(asm_ctx_t *c, isa_const_t *k, const uint8_t *whole);

/* `choose $N = TREE` (lowered form): op entry N's kernel choice tree. */
rill_status_t asm_parse_choose(asm_ctx_t *c, size_t *pos);
/* With a profile from `rill tune --shapes`: the module's trees from it
 * (written, read back and printed, so op entries match `rill dis` text). */
rill_status_t asm_profile_trees(asm_ctx_t *c, uint8_t **bytes, size_t *size);

/* Interns an op declaration in the module's op table. */
rill_status_t asm_intern_op(asm_ctx_t *c, const char *name, const rill_type_t *in, uint32_t nin,
                            const rill_type_t *out, uint32_t nout, const isa_attr_t *attrs,
                            uint32_t nattrs, uint32_t *out_index);

/* The rows a fused product may have (decode_fuse.c): ops/cuda_llm.c's gemv
 * kernel's. merge_bias gives such a product its weight transposed ([N, K],
 * which that kernel reads), any other its weight as it lies. */
#define FLIN_MAX_ROWS 4

#endif
