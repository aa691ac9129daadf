/* ops.h: the op registry.
 *
 * Every op of the language's core set has one entry: its name, operand
 * counts, attributes (names, kinds, defaults), type and shape inference,
 * and a CPU reference kernel for every dtype it accepts (f16 and bf16
 * computed in f32 or wider and rounded). The assembler asks the registry to
 * infer result types, the verifier asks it to check an op-table entry, and
 * a VM asks it for an executable plan. Inference fills an ops_params_t with
 * the attributes parsed and normalised (negative axes resolved, defaults
 * applied), so kernels never look at attributes again.
 */
#ifndef RILL_OPS_H
#define RILL_OPS_H

#include "../isa/isa.h"
#include "../isa/sym.h"

typedef enum ops_unary {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) U_##ID,
#define EW_BINARY(ID, NAME, RES, FE, IE)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
  U_COUNT
} ops_unary_t;

typedef enum ops_binary {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE)
#define EW_BINARY(ID, NAME, RES, FE, IE) B_##ID,
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
  B_COUNT
} ops_binary_t;

/* One elementwise step: an op of elementwise.def (or where, or a literal)
 * with its dtypes and parameters, as a per-op kernel and each node of a
 * fused group run it. */
typedef enum ops_ew_kind { EWK_UNARY, EWK_BINARY, EWK_WHERE, EWK_LIT } ops_ew_kind_t;
typedef struct ops_ewnode {
  ops_ew_kind_t kind;
  int code;                          /* ops_unary_t / ops_binary_t */
  rill_dtype_t dom;                  /* the dtype the arithmetic happens in */
  rill_dtype_t out;                  /* the result's dtype */
  int32_t arg[3];                    /* fused: >= 0 a node, < 0 the input -1 - arg */
  bool has_lo, has_hi, gelu_tanh;
  double alpha, lo, hi;
  double f;                          /* EWK_LIT: the value (float dtypes) */
  int64_t i;                         /* EWK_LIT: the value (integers, bool) */
} ops_ewnode_t;

/* Computes node n at one element: operand k is element off[k] of src[k]
 * (dtype sd[k]); the result is stored as element di of dst (dtype n->out),
 * converted exactly as the op's own kernel stores it. */
void ops_ew_step(const ops_ewnode_t *n, const void *const *src, const rill_dtype_t *sd, const size_t *off, void *dst, size_t di);

/* A fused group: nodes in order (each a step over inputs and earlier
 * nodes, every one of the group's shape but literals), and the nodes that
 * are its outputs. Its text, the `expr` attribute of op `fused`:
 *   t0 = mul(x0, x1); t1 = add(t0, f32(0.5)); t2 = clip(t1) {min=0, max=6}; return t2, t0
 * (xK the K-th operand, tK the K-th statement's result, DTYPE(V) a literal). */
#define OPS_FUSED_MAX_NODES 64
#define OPS_FUSED_MAX_IN 16
#define OPS_FUSED_MAX_OUT 8
typedef struct ops_fused {
  uint32_t nnodes, nout;
  uint32_t out[OPS_FUSED_MAX_OUT];
  ops_ewnode_t node[OPS_FUSED_MAX_NODES];
  uint32_t permuted;                            /* bit k: operand k is read through perm[k] (attribute `perms`) */
  int8_t perm[OPS_FUSED_MAX_IN][RILL_MAX_RANK];
} ops_fused_t;

/* An activation applied to a matmul's, linear's or conv2d's result
 * (attribute `activation`): what -O1 merges into them from a relu or gelu
 * after; the CUDA device runs it as a cuBLASLt epilogue, with a
 * convolution's bias, or after. */
enum { OPS_ACT_NONE, OPS_ACT_RELU, OPS_ACT_GELU, OPS_ACT_GELU_TANH };

typedef struct ops_params {
  int code;                          /* ops_unary_t / ops_binary_t / reduction kind */
  rill_dtype_t compute;              /* dtype the arithmetic happens in (after promotion) */
  /* axes (reductions), normalised and sorted; mask of reduced dims */
  int naxes;
  int64_t axes[RILL_MAX_RANK];
  uint32_t axis_mask;
  bool keepdims;
  int64_t axis;                      /* softmax, argmax (-1: all), concat, split, gather, layer_norm */
  /* conv / pool */
  int64_t stride[2], pad[4], dilation[2], kernel[2], groups;
  bool ceil_mode, count_include_pad, has_bias;
  bool has_residual;                 /* conv2d(x, w, b, z): z, of y's type, added before the activation */
  bool nhwc;                         /* conv2d and the pools: layout="nhwc", channels last (x [N,H,W,C], conv2d's w [O,kh,kw,C/groups]) */
  int act;                           /* matmul, linear, conv2d: OPS_ACT_* */
  bool w_kn;                         /* linear: weight="kn", w [in, out] (default "nk": [out, in]) */
  double scale, divisor;             /* softmax, log_softmax: of round(x * scale / divisor) (1 when absent) */
  /* elementwise scalars */
  double alpha, eps, lo, hi;
  bool has_lo, has_hi, gelu_tanh;
  /* shape ops */
  int64_t perm[RILL_MAX_RANK];        /* transpose */
  /* matmul: perm_a, perm_b, perm_y (the identity when absent); any given */
  int64_t mm_perm[3][RILL_MAX_RANK];
  bool mm_permuted;
  int64_t starts[RILL_MAX_RANK], steps[RILL_MAX_RANK]; /* slice, per dim */
  int64_t pads[2 * RILL_MAX_RANK];                     /* pad: begin0.., end0.. */
  double value;
  const int64_t *sizes;              /* split sizes (points into the op's attributes) */
  uint32_t nsizes;
  /* decoder ops (ops/cpu_llm.c): rms_norm takes eps and axis above, attention scale */
  struct {
    int style;                       /* rotary: OPS_ROPE_NEOX, OPS_ROPE_GPTJ */
    int scaling;                     /* rotary: OPS_ROPE_NONE, OPS_ROPE_LINEAR, OPS_ROPE_LLAMA3 */
    int64_t rotary_dim;
    double theta, factor, low_freq, high_freq, orig_max;
    bool causal, has_len, has_mask;  /* attention (the mask is its last operand) */
    int64_t windows;                 /* attention {windows=W}: batch b reads mask[b % W] (Swin's shifted windows); 0: mask[b] */
    bool bshd;                       /* attention: layout="bshd" (q, k, v and y [B,S,H,D]) */
    int64_t packed;                  /* attention {kv_heads=N}: q, k, v packed in operand 0 [B,S,Hq+2N,D]: N; 0 where separate */
    double temperature, top_p;       /* sample */
    int64_t top_k;
    uint64_t seed;
    /* fused_linear: OPS_FLIN_* (its prologue), whether it adds a residual
     * operand; eps (rms_norm's) above, gelu_tanh for geglu_tanh */
    int flin_pro;
    bool flin_res;
    int flin_epi;                    /* OPS_FLIN_SWIGLU or _GEGLU: the gated unit of the result's halves, or OPS_FLIN_NONE */
    bool flin_gate2;                 /* and the gate is the second half */
  } llm;
  /* resize (ops/cpu_resample.c): RS_* of kernels/cuda/resize_common.h; scale per
   * axis; roi starts (roi[0..rank)) then ends (roi[rank..2 rank)); prm: they
   * come at run time from the second operand (f64[3 rank]: scales, roi
   * starts, roi ends) instead */
  struct {
    int mode, coord, nearest;
    bool exclude, prm;
    double cubic_a, extrap;
    double scale[RILL_MAX_RANK], roi[2 * RILL_MAX_RANK];
  } rs;
  /* conv_transpose (ops/cpu_convt.c): nd spatial dims, per dim stride, pads (begin, end), dilation, output_padding */
  struct {
    int nd;
    int64_t s[3], pb[3], pe[3], d[3], op[3];
  } ct;
  /* grid_sample and roi_align (ops/cpu_resample.c): GS_* of kernels/cuda/grid_common.h
   * (mode, padding); roi_align's max mode, output size, samples per bin, scale, half_pixel */
  struct {
    int mode, pad;
    bool align, max, half_pixel;
    int64_t oh, ow, sampling;
    double scale;
  } gs;
  /* indexing ops (ops/cpu_index.c): topk's k and order; scatter_nd's
   * reduction (OPS_SCATTER_*) */
  struct {
    int64_t k;
    bool largest;
    int reduction;
  } ix;
  /* collectives (ops/collective.c): OPS_COLL_*, the reduction (OPS_RED_*,
   * also in code), the root, the participants the types were made for (the
   * job's ranks, `ranks`; 0: any), and the device form's part and parts (a
   * collective over the VM's devices is one op entry per device, part
   * 0..parts-1; parts 0: over the job's ranks) */
  struct {
    int kind, red;
    int64_t root, ranks, part, parts;
    /* send/recv: the peer rank (`peer=R`), or the offset from this rank
     * modulo the job's size (`shift=K`: relative) */
    int64_t peer;
    bool relative;
  } coll;
  /* qmatmul and qconv2d (ops/cpu_quant.c): the indices of the operands
   * after the zero points (-1 where absent): the i32 bias, the float
   * scale, the output's zero point; y_scale (has_ys: given), which the
   * requantization divides by in the scale's float type */
  struct {
    int bias, scale, yzp;
    bool has_ys;
    double y_scale;
  } q;
} ops_params_t;

enum { OPS_COLL_NONE, OPS_COLL_ALL_REDUCE, OPS_COLL_ALL_GATHER, OPS_COLL_REDUCE_SCATTER, OPS_COLL_BROADCAST, OPS_COLL_RANK, OPS_COLL_RANKS, OPS_COLL_SEND, OPS_COLL_RECV, OPS_COLL_SENDRECV };
/* send and recv: point-to-point over the job's ranks (docs/collectives.md),
 * the statements; the assembler makes each run of consecutive ones one
 * sendrecv (the op in a module). */
#define OPS_P2P_GROUP_MAX 64 /* sends and recvs in one exchange */
static inline bool ops_coll_is_p2p(int kind) { return kind == OPS_COLL_SEND || kind == OPS_COLL_RECV; }
enum { OPS_RED_SUM, OPS_RED_MAX, OPS_RED_MIN, OPS_RED_AVG };

enum { OPS_ROPE_NEOX, OPS_ROPE_GPTJ };
/* fused_linear's prologue: none, rms_norm (with its weight), swiglu or geglu (with the value); its epilogue: none, swiglu or geglu (of the product's halves) */
enum { OPS_FLIN_NONE, OPS_FLIN_RMS, OPS_FLIN_SWIGLU, OPS_FLIN_GEGLU };
enum { OPS_SCATTER_NONE, OPS_SCATTER_ADD, OPS_SCATTER_MUL, OPS_SCATTER_MAX, OPS_SCATTER_MIN };
enum { OPS_ROPE_NONE, OPS_ROPE_LINEAR, OPS_ROPE_LLAMA3 };

struct ops_def;

/* A VM's token channel (op emit; docs/internals.md, "Generation"): a ring
 * of `cap` records of 1 + width i64 each (the count n, then n values),
 * after a header, in memory that the host and the device both reach
 * (pinned and mapped on cuda). The device writes records and the head; the
 * host reads them and writes cancel and muted. */
typedef struct ops_chan_hdr {
  uint64_t head;                     /* records published */
  uint32_t cancel;                   /* the host asks the program to stop: emit gives false */
  uint32_t muted;                    /* a graph's warm-up: emit publishes nothing */
} ops_chan_hdr_t;
typedef struct ops_chan {
  ops_chan_hdr_t *hdr;               /* host addresses */
  int64_t *ring;
  void *dev_hdr, *dev_ring;          /* the same memory as the device addresses it */
  uint64_t cap;
  uint32_t width;
} ops_chan_t;
#define OPS_CHAN_RECORDS 4096
#define OPS_EMIT_MAX 4096          /* values an emit may publish */

/* An op ready to run: its definition, declaration (types, attributes) and parameters. */
typedef struct ops_plan {
  const struct ops_def *def;
  const isa_opdecl_t *decl;
  ops_params_t p;
  ops_fused_t *fused;                /* op `fused`: its program (ops_plan_fini frees it) */
  ops_fused_t *pro, *epi;            /* a prologue and an epilogue (ops_fused_apply), or NULL (ops_plan_fini frees them) */
  const rill_allocator_t *a;
  void *dev;                         /* the device's state for this plan: set by its prepare, freed by its unprepare
                                      * (NULL on devices without one), so a launch finds it in O(1) whichever
                                      * set of plans (the VM's, an instance's per binding) the plan is from */
  /* The candidate the module's kernel choice tree picked at these sizes (a
   * name the device knows, e.g. "cudnn.engine:12"), or NULL: the device's
   * usual choice. A device falls back to that where the candidate is not
   * usable. Set after ops_plan_init (vm_choose); owned by the module. */
  const char *choice;
  /* The module's precision mode (set with the choice): with TF32, f32
   * matmul, linear and conv2d round their operands to TF32 (the cpu
   * device) or run on TF32 tensor cores (cuda). */
  rill_precision_t precision;
  const ops_chan_t *chan;            /* the VM's token channel (emit), or NULL (folding, no VM) */
} ops_plan_t;

/* CPU kernel: inputs and outputs are host pointers to contiguous data of the
 * decl's types. Returns NULL or a runtime error (e.g. an index out of range). */
typedef rill_status_t (*ops_cpu_fn)(const ops_plan_t *plan, void *const *in, void *const *out);

typedef struct ops_attr_spec {
  const char *name;
  uint32_t kinds;                    /* mask of 1 << isa_attr_kind_t accepted */
} ops_attr_spec_t;

typedef struct ops_infer_ctx {
  const struct ops_def *def;
  const rill_type_t *in;
  uint32_t nin;
  const isa_attr_t *attrs;
  uint32_t nattrs;
  rill_type_t *out;                  /* room for max_out results */
  uint32_t nout, max_out;
  ops_params_t *p;
} ops_infer_ctx_t;

typedef struct ops_def {
  const char *name;
  int min_in, max_in;                /* max_in -1: any number */
  int code;
  const ops_attr_spec_t *attrs;      /* terminated by a NULL name */
  rill_status_t (*infer)(ops_infer_ctx_t *c);
  ops_cpu_fn cpu;
  bool elementwise_operand_literals; /* scalar literals allowed as operands */
  /* The op does more than compute its results from its operands (update
   * writes a state, emit publishes tokens): never folded at assembly, never
   * dropped, kept in order with the other effects by the schedule. */
  bool effect;
} ops_def_t;

const ops_def_t *ops_find(const char *name);
/* Visit every op, for documentation and tests. */
const ops_def_t *ops_at(size_t i);

/* Infers result types. `out` must have room for `max_out` types. Errors are
 * plain messages (the caller adds the position): RILL_ASSEMBLY_ERROR. */
rill_status_t ops_infer(const ops_def_t *def, const rill_type_t *in, uint32_t nin,
                        const isa_attr_t *attrs, uint32_t nattrs, rill_type_t *out,
                        uint32_t max_out, uint32_t *out_nout, ops_params_t *params);

/* ops_infer for a program whose sizes may be symbolic (isa/sym.h): size
 * arithmetic goes through `syms`, and two sizes that cannot be shown equal
 * are an error naming both. */
rill_status_t ops_infer_sym(const ops_def_t *def, isa_syms_t *syms, const rill_type_t *in, uint32_t nin,
                            const isa_attr_t *attrs, uint32_t nattrs, rill_type_t *out,
                            uint32_t max_out, uint32_t *out_nout, ops_params_t *params);

/* Whether an op-table entry has symbolic sizes (types or attributes). */
bool ops_decl_is_sym(const isa_opdecl_t *decl);

/* Whether op-table entry d (symbolic types; its parameters p) keeps a
 * shape variable's rows apart (ops/rows.c): in_axis[i] is the axis of
 * operand i whose size is the variable (-1: none of its sizes names it),
 * out_axis[j] that of result j; true when each result row depends only on
 * the same row of the operands that have one (padding the variable to a
 * larger size then leaves the first rows of the results as they were). */
bool ops_rows(const ops_def_t *def, const ops_params_t *p, const isa_opdecl_t *d, const int *in_axis, const int *out_axis);

/* Checks an op-table entry against the registry (for the verifier). */
rill_status_t ops_check_decl(void *self, isa_syms_t *syms, const isa_opdecl_t *decl);
extern const isa_op_resolver_t ops_resolver;

/* Builds a plan for a verified decl; `a` allocates what it keeps (NULL: the
 * system allocator); ops_plan_fini frees it. */
rill_status_t ops_plan_init(ops_plan_t *plan, const isa_opdecl_t *decl, const rill_allocator_t *a);
void ops_plan_fini(ops_plan_t *plan);
/* Runs a decl (concrete sizes) on host data with its CPU reference kernel:
 * constant folding, the assembler's at -O1 and the importers' (through
 * rill_op_eval). in and out point to contiguous data of the decl's types.
 * A run-time error (an index out of range) is returned as it is. */
rill_status_t ops_eval(const isa_opdecl_t *decl, void *const *in, void *const *out, const rill_allocator_t *a);

/* The activation step (relu or gelu) over dtype d. */
void ops_act_node(int act, rill_dtype_t d, ops_ewnode_t *out);
/* The step add(x0, x1) over dtype d, as the add op computes it (a residual z added after a product). */
void ops_add_node(rill_dtype_t d, ops_ewnode_t *out);
/* An integer clip bound: ceil(min) (up) or floor(max), saturated to int64. */
long long ops_ew_int_bound(double v, bool up);
/* The same for u64 operands: clamped to 0..2^64-1. */
unsigned long long ops_ew_uint_bound(double v, bool up);
/* The step of a unary, binary or where op: from its parameters and the
 * dtypes of its first operand and its result, or from its plan. */
void ops_ewnode_init(ops_ewnode_t *n, const ops_def_t *def, const ops_params_t *p, rill_dtype_t in0, rill_dtype_t out);
void ops_ewnode_of(const ops_plan_t *plan, ops_ewnode_t *out);
/* Whether an op is a step a fused group can hold (elementwise.def, where). */
bool ops_is_elementwise(const ops_def_t *def);

/* Parses a fused group's text over operands of types `in`: the program and
 * its result types (room for OPS_FUSED_MAX_OUT). Errors are plain messages
 * (RILL_ASSEMBLY_ERROR). */
rill_status_t ops_fused_parse(const char *text, const rill_type_t *in, uint32_t nin, ops_fused_t *out,
                              rill_type_t *out_types);
/* A fused op's group: its `expr` over operands of types `in`, each read
 * through its part of `perms` where given (attribute `perms`: for each
 * operand in order, a permutation of its rank's axes, as `transpose`'s
 * `perm`; the steps see operand k as transpose(xk, perm)). */
rill_status_t ops_fused_parse_group(const char *text, const isa_attr_t *perms, const rill_type_t *in, uint32_t nin, ops_fused_t *out,
                                    rill_type_t *out_types);
/* Strides (in elements) that read operand k, stored as type t, at each
 * element of the group's result of type `out`: broadcast and permuted. */
void ops_fused_strides(const ops_fused_t *fp, uint32_t k, const rill_type_t *t, const rill_type_t *out, int64_t *strides);
/* Appends one statement, `tINDEX = NAME(ARGS) {ATTRS}`, whose operands are
 * already printed; attributes as the op's declaration has them. */
rill_status_t ops_fused_print_step(rill_buf_t *b, uint32_t index, const char *name, const isa_attr_t *attrs, uint32_t nattrs,
                                   const char *const *args, uint32_t nargs);
/* Appends a literal operand: DTYPE(VALUE), exact. */
rill_status_t ops_fused_print_lit(rill_buf_t *b, rill_dtype_t d, const void *value);

/* A prologue or epilogue (the `prologue` of softmax, log_softmax and the
 * reductions, their and layer_norm's `epilogue`: a fused group's text over
 * one operand x0 of the op's dtype, and a softmax's mask x1, one result of
 * that dtype; -O1 merges elementwise ops into the op): fp at the n values
 * v rounded to dtype d, each step rounded as its op would. */
double ops_fused_apply(const ops_fused_t *fp, rill_dtype_t d, const double *v, uint32_t n);

/* Promotion of two dtypes as PyTorch does for tensors of the same rank class. */
rill_dtype_t ops_promote(rill_dtype_t a, rill_dtype_t b);

/* Attribute lookup helpers for inference code. */
const isa_attr_t *ops_attr(const ops_infer_ctx_t *c, const char *name);
/* a * b for sizes that may be symbolic (in a program with shape variables), as an inference error on overflow. */
rill_status_t ops_size_mul(const ops_infer_ctx_t *c, int64_t a, int64_t b, int64_t *out);

/* ---- collectives (ops/collective.c) ---- */
extern const ops_attr_spec_t ops_coll_reduce_attrs[], ops_coll_gather_attrs[], ops_coll_scatter_attrs[], ops_coll_bcast_attrs[],
    ops_coll_send_attrs[], ops_coll_recv_attrs[], ops_coll_sendrecv_attrs[];
rill_status_t ops_infer_collective(ops_infer_ctx_t *c);
/* A collective's kind (its `code`, OPS_COLL_*), or OPS_COLL_NONE: the VM
 * runs these through a communicator; their cpu kernel is the op for one
 * participant. */
static inline int ops_collective(const struct ops_def *def) { return def->infer == ops_infer_collective ? def->code : OPS_COLL_NONE; }
/* The op for one participant: a copy (rank() 0, ranks() 1). */
rill_status_t ops_cpu_collective(const ops_plan_t *p, void *const *in, void *const *out);
/* The participants N a collective's types are made for (its `parts`, else
 * its `ranks`; 1 for rank() and ranks()), and the reduction's name. */
int64_t ops_coll_participants(const ops_params_t *p);
const char *ops_coll_red_name(int red);

/* ---- CPU kernels (ops/cpu_*.c) ---- */
rill_status_t ops_cpu_unary(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_binary(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_where(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_reduce(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_argmax(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_softmax(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_layer_norm(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_batch_norm(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_matmul(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_linear(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_conv2d(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_pool2d(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_adaptive_pool(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_copy(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_transpose(const ops_plan_t *p, void *const *in, void *const *out);
/* A matmul's operands and product as it computes them (before perm_y),
 * t[0], t[1] and t[2], each with its element strides in the tensor stored
 * (the operands, the result) as st[0], st[1] and st[2]. */
void ops_matmul_views(const ops_plan_t *plan, rill_type_t t[3], int64_t st[3][RILL_MAX_RANK]);
/* y = x (of type xt) transposed: y's dims[i] are x's dims[perm[i]]. */
void ops_permute(const void *x, const rill_type_t *xt, const int64_t *perm, void *y);
rill_status_t ops_cpu_broadcast(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_concat(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_split(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_slice(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_pad(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_gather(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_fused(const ops_plan_t *p, void *const *in, void *const *out);
/* decoder ops (cpu_llm.c) */
rill_status_t ops_cpu_rms_norm(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_rotary(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_attention(const ops_plan_t *p, void *const *in, void *const *out);
/* attention's sizes, and the element strides over (batch, head, position)
 * of q (qs), of k and v (ks) and of the result (ys), in the layout the op
 * was given (bhsd: [B,H,S,D], the default; bshd: [B,S,H,D]; packed, q, k
 * and v heads of operand 0 [B,S,Hq+2Hkv,D], k's and v's first elements
 * koff and voff past q's, where they are 0 otherwise); the head's elements
 * are contiguous in all. */
typedef struct ops_attn_geom {
  int64_t B, Hq, Hkv, Sq, Skv, D;
  int64_t qs[3], ks[3], ys[3];
  int64_t koff, voff;
} ops_attn_geom_t;
void ops_attention_geom(const isa_opdecl_t *d, const ops_params_t *p, ops_attn_geom_t *g);
rill_status_t ops_cpu_sample(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_update(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_emit(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_rotary_update(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_fused_linear(const ops_plan_t *p, void *const *in, void *const *out);
/* fused_linear's operands by role: indices into its operands, -1 where absent. */
typedef struct ops_flin_args {
  int bias, pro, res;
} ops_flin_args_t;
void ops_flin_args(const ops_plan_t *p, ops_flin_args_t *a);
/* update's geometry: rows (the dims before the axis), the axis's size in
 * the state (L) and in x (n), the elements after it (inner), and rows per
 * index of axis 0 (per_b: a [B] offset's index is row / per_b). */
typedef struct ops_update_geom {
  size_t rows, inner, per_b;
  int64_t L, n;
  bool per_row;
} ops_update_geom_t;
void ops_update_geom(const ops_plan_t *p, ops_update_geom_t *g);
/* resampling ops (cpu_resample.c) */
rill_status_t ops_cpu_resize(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_grid_sample(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_roi_align(const ops_plan_t *p, void *const *in, void *const *out);
/* conv_transpose (cpu_convt.c) */
rill_status_t ops_cpu_conv_transpose(const ops_plan_t *p, void *const *in, void *const *out);
/* quantized products (cpu_quant.c) */
rill_status_t ops_cpu_qmatmul(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_qconv2d(const ops_plan_t *p, void *const *in, void *const *out);
/* Their epilogue at one output element: the accumulator (the sum less the
 * zero points' terms, with the bias) to the result, stored as element i
 * of y (the decl's result dtype); sc the element's scale (unused without
 * one). The CUDA kernels compute the same in kernels/cuda/quant_common.h. */
void ops_quant_store(const ops_plan_t *p, int32_t acc, double sc, int32_t yzp, void *y, size_t i);
/* indexing ops (cpu_index.c) */
rill_status_t ops_cpu_scatter_nd(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_topk(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_nonzero(const ops_plan_t *p, void *const *in, void *const *out);
rill_status_t ops_cpu_nms(const ops_plan_t *p, void *const *in, void *const *out);

/* Strides (in elements) of a row-major type, with 0 for broadcast dims when
 * the type is aligned right against an output of rank `rank`. */
void ops_broadcast_strides(const rill_type_t *t, const rill_type_t *out, int64_t *strides);

#endif
