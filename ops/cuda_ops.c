/* cuda_ops.c: generated CUDA kernels for elementwise and data-movement ops.
 *
 * Elementwise ops become one kernel per (op, dtypes, broadcast pattern),
 * written here as CUDA C from the op's expression: operands are widened to
 * the compute type (float for f16, bf16 and f32; double for f64; long long
 * for integers), the expression applied, the result narrowed. Broadcasting
 * is index math over per-operand strides (0 on broadcast dimensions); a
 * contiguous case skips it. f16 and bf16 convert with PTX cvt instructions,
 * so the sources need no headers. Data movement (transpose, slice,
 * broadcast_to, concat, split, pad) is one strided-copy kernel with a view
 * (dims, input and output strides, base offsets) per launch, its dimensions
 * merged where they run on; within one dtype a second kernel moves runs in
 * units of 4 to 16 bytes where the pointers allow.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gen.h"

typedef struct klaunch {
  CUfunction fn;
  CUfunction fnv;       /* contiguous elementwise, strided copies: the vectorised kernel, when there is one */
  int vec;              /* its elements per access */
  kshape_t sh;
  kshape_t vsh;         /* strided copies: fnv's view, in units of vec elements */
  int in, out;          /* operand indices for multi-launch ops (concat, split) */
  double value;
} klaunch_t;

enum { K_EW, K_D2D, K_MULTI, K_PAD, K_GATHER, K_NN, K_LLM, K_RESAMPLE, K_CONVT, K_INDEX, K_SELECT, K_QUANT };

typedef struct cuda_state {
  int kind;
  kgen_args_t *ew;      /* K_EW: the launch arguments but the pointers */
  uint32_t scalar_in;   /* K_EW: operands read once (mask) */
  uint32_t nlaunch;
  klaunch_t *launch;
  size_t bytes;         /* K_D2D */
  void *nn;             /* K_NN: cuda_nn.c's state; K_LLM: cuda_llm.c's; K_RESAMPLE: cuda_resample.c's; K_CONVT: cuda_convt.c's; K_INDEX: cuda_index.c's; K_SELECT: cuda_select.c's */
  bool cudnn;
  /* concat and split of one dtype in one launch (parts_k); the launches
   * above, one per part, where a pointer is not aligned to its units */
  CUfunction parts;
  uint64_t *parts_arg;  /* struct Parts but the pointers (one a part, set per run): unit offsets, rows */
  uint32_t parts_unit;
  unsigned parts_blocks; /* parts_k's blocks a part (the grid's x; its y: the parts) */
  long long parts_units; /* the whole's units (0: nothing to move) */
} cuda_state_t;

/* The expressions of elementwise.def as CUDA C text. */
static const char *const UN_F[] = {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) #FE,
#define EW_BINARY(ID, NAME, RES, FE, IE)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
};
static const char *const UN_I[] = {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE) #IE,
#define EW_BINARY(ID, NAME, RES, FE, IE)
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
};
static const char *const BIN_F[] = {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE)
#define EW_BINARY(ID, NAME, RES, FE, IE) #FE,
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
};
static const char *const BIN_I[] = {
#define EW_UNARY(ID, NAME, ATTRS, DOM, FE, IE)
#define EW_BINARY(ID, NAME, RES, FE, IE) #IE,
#include "elementwise.def"
#undef EW_UNARY
#undef EW_BINARY
};

static void int_lit(char *buf, size_t n, long long v) {
  if (v == INT64_MIN) snprintf(buf, n, "(-9223372036854775807LL - 1)");
  else snprintf(buf, n, "%lldLL", v);
}

/* `E` rounded to dtype d, as a value of ksrc_comp(d): the node's result
 * goes through its dtype as it would through memory between two ops. */
static rill_status_t rounded(rill_buf_t *b, rill_dtype_t d, const char *E) {
  if (d == RILL_F16) return rill__buf_printf(b, "ld_f16(st_f16((float)(%s)))", E);
  if (d == RILL_BF16) return rill__buf_printf(b, "ld_bf16(st_bf16((float)(%s)))", E);
  if (d == RILL_BOOL) return rill__buf_printf(b, "(long long)((%s) != 0)", E);
  if (rill__is_float(d)) return rill__buf_printf(b, "(%s)(%s)", ksrc_comp(d), E);
  return rill__buf_printf(b, "(long long)(%s)(%s)", ksrc_ctype(d), E);
}

/* The body of the generated step(): v<j> for each node in order, from the
 * operands i<k> and earlier nodes; r<k> the nodes `outs`. */
static rill_status_t ew_body(rill_buf_t *b, const ops_ewnode_t *nodes, uint32_t nn, const uint32_t *outs, uint32_t nout) {
  for (uint32_t j = 0; j < nn; j++) {
    const ops_ewnode_t *nd = &nodes[j];
    const char *T = ksrc_comp(nd->out), *C = ksrc_comp(nd->dom);
    char l1[64], l2[64], l3[64], src[3][16];
    if (nd->kind == EWK_LIT) {
      if (rill__is_float(nd->out)) ksrc_lit(l1, sizeof l1, nd->f, T);
      else if (nd->out == RILL_U64) snprintf(l1, sizeof l1, "%lluULL", (unsigned long long)nd->i);
      else int_lit(l1, sizeof l1, nd->i);
      RILL_TRY(rill__buf_printf(b, "  const %s v%u = %s;\n", T, j, l1));
      continue;
    }
    int na = nd->kind == EWK_UNARY ? 1 : nd->kind == EWK_BINARY ? 2 : 3;
    for (int k = 0; k < na; k++) snprintf(src[k], sizeof src[k], nd->arg[k] < 0 ? "i%d" : "v%d", nd->arg[k] < 0 ? -1 - nd->arg[k] : nd->arg[k]);
    RILL_TRY(rill__buf_printf(b, "  %s v%u;\n  {\n    typedef %s C;\n", T, j, C));
    const char *E;
    bool fl = rill__is_float(nd->dom);
    if (nd->kind == EWK_WHERE) {
      RILL_TRY(rill__buf_printf(b, "    const long long a = (long long)(%s);\n    const C b = (C)(%s), c = (C)(%s);\n", src[0], src[1], src[2]));
      E = "(a != 0 ? b : c)";
    } else if (nd->kind == EWK_BINARY) {
      RILL_TRY(rill__buf_printf(b, "    const C a = (C)(%s), b = (C)(%s);\n", src[0], src[1]));
      if (nd->code == B_GEGLU) RILL_TRY(rill__buf_printf(b, "    const bool gelu_tanh = %d;\n", nd->gelu_tanh));
      E = fl ? BIN_F[nd->code] : BIN_I[nd->code];
      /* u64 (ops_ew_step's bin_u): any divisor but 0; powers unsigned */
      if (nd->dom == RILL_U64 && nd->code == B_FMOD) E = "(b == 0 ? (C)0 : a % b)";
      if (nd->dom == RILL_U64 && nd->code == B_POW) E = "upow(a, b)";
    } else {
      RILL_TRY(rill__buf_printf(b, "    const C a = (C)(%s);\n", src[0]));
      if (fl) {
        ksrc_lit(l1, sizeof l1, nd->alpha, C);
        ksrc_lit(l2, sizeof l2, nd->lo, C);
        ksrc_lit(l3, sizeof l3, nd->hi, C);
        RILL_TRY(rill__buf_printf(b, "    const C alpha = %s, lo = %s, hi = %s;\n", l1, l2, l3));
      } else if (nd->dom == RILL_U64) {
        snprintf(l2, sizeof l2, "%lluULL", nd->has_lo ? ops_ew_uint_bound(nd->lo, true) : 0ULL);
        snprintf(l3, sizeof l3, "%lluULL", nd->has_hi ? ops_ew_uint_bound(nd->hi, false) : 0ULL);
        RILL_TRY(rill__buf_printf(b, "    const C lo = %s, hi = %s;\n", l2, l3));
      } else {
        int_lit(l2, sizeof l2, nd->has_lo ? ops_ew_int_bound(nd->lo, true) : 0);
        int_lit(l3, sizeof l3, nd->has_hi ? ops_ew_int_bound(nd->hi, false) : 0);
        RILL_TRY(rill__buf_printf(b, "    const C lo = %s, hi = %s;\n", l2, l3));
      }
      RILL_TRY(rill__buf_printf(b, "    const bool has_lo = %d, has_hi = %d, gelu_tanh = %d;\n", nd->has_lo, nd->has_hi, nd->gelu_tanh));
      E = fl ? UN_F[nd->code] : UN_I[nd->code];
    }
    RILL_TRY(rill__buf_printf(b, "    v%u = ", j));
    RILL_TRY(rounded(b, nd->out, E));
    RILL_TRY(rill__buf_printf(b, ";\n  }\n"));
  }
  for (uint32_t k = 0; k < nout; k++) RILL_TRY(rill__buf_printf(b, "  r%u = v%u;\n", k, outs[k]));
  return NULL;
}

void cuda_row_strides(const rill_type_t *t, int64_t *s) {
  int64_t acc = 1;
  for (int i = t->rank - 1; i >= 0; i--) {
    s[i] = acc;
    acc *= t->dims[i];
  }
}

long long cuda_numel(const rill_type_t *t) {
  long long n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

void cuda_ew_merge_dims(kgen_fused_t *e, kgen_args_t *a) {
  int n = 0;
  for (int d = 0; d < e->rank; d++) {
    if (a->dims[d] == 1) continue; /* its index is 0: any stride */
    bool joins = n > 0;
    for (uint32_t k = 0; joins && k < e->nin; k++)
      joins = !e->bcast[k] || e->scalar[k] || a->st[k][n - 1] == a->st[k][d] * a->dims[d];
    if (joins) a->dims[n - 1] *= a->dims[d];
    else a->dims[n++] = a->dims[d];
    for (uint32_t k = 0; k < e->nin; k++) a->st[k][n - 1] = a->st[k][d];
  }
  if (n == 0) { /* every size 1 */
    a->dims[n++] = 1;
    for (uint32_t k = 0; k < e->nin; k++) a->st[k][0] = 0;
  }
  for (int d = n; d < e->rank; d++) {
    a->dims[d] = 0;
    for (uint32_t k = 0; k < e->nin; k++) a->st[k][d] = 0;
  }
  if (e->rank > 0) e->rank = n;
}

/* The generator's description of an elementwise op or fused group, and
 * the launch arguments but the pointers. `body` is the caller's buffer. */
static rill_status_t ew_describe(const ops_plan_t *plan, rill_buf_t *body, kgen_fused_t *e, kgen_args_t *args) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *ot = &d->out[0];
  if (d->nin > KGEN_MAX_IN || d->nout > KGEN_MAX_OUT) return rill__status(RILL_UNIMPLEMENTED, "%s: too many operands", d->name);
  memset(e, 0, sizeof *e);
  memset(args, 0, sizeof *args);
  if (plan->fused) {
    RILL_TRY(ew_body(body, plan->fused->node, plan->fused->nnodes, plan->fused->out, plan->fused->nout));
  } else {
    ops_ewnode_t node;
    uint32_t out0 = 0;
    ops_ewnode_of(plan, &node);
    RILL_TRY(ew_body(body, &node, 1, &out0, 1));
  }
  RILL_TRY(rill__buf_append(body, "", 1));
  e->body = (const char *)body->data;
  e->nin = d->nin;
  e->nout = d->nout;
  e->rank = ot->rank;
  args->n = e->span = cuda_numel(ot);
  for (int i = 0; i < ot->rank; i++) args->dims[i] = ot->dims[i];
  if (!ot->rank) args->dims[0] = 1;
  for (uint32_t k = 0; k < d->nout; k++) e->out[k] = d->out[k].dtype;
  for (uint32_t k = 0; k < d->nin; k++) {
    e->in[k] = d->in[k].dtype;
    ops_fused_strides(plan->fused, k, &d->in[k], ot, args->st[k]);
    e->bcast[k] = d->in[k].rank != ot->rank || memcmp(d->in[k].dims, ot->dims, sizeof(int64_t) * (size_t)ot->rank) != 0 ||
                  (plan->fused && ((plan->fused->permuted >> k) & 1));
    e->scalar[k] = cuda_numel(&d->in[k]) == 1;
    if (cuda_numel(&d->in[k]) > e->span) e->span = cuda_numel(&d->in[k]);
  }
  cuda_ew_merge_dims(e, args);
  /* Operands that are one row repeated ([1,1,1,C] over [B,H,W,C], merged to
   * [BHW, C]) keep the vector kernel where C is a multiple of its width
   * (RILL_EW_ROWS=0: the element kernel, for comparison). */
  int W = kgen_fused_width(e);
  if (!rill__env_off("RILL_EW_ROWS") && e->rank == 2 && W > 1 && args->dims[1] % W == 0)
    for (uint32_t k = 0; k < d->nin; k++) e->row[k] = e->bcast[k] && !e->scalar[k] && args->st[k][0] == 0 && args->st[k][1] == 1;
  return NULL;
}

rill_status_t cuda_act_function(rill_buf_t *b, int act, rill_dtype_t d) {
  ops_ewnode_t nd;
  ops_act_node(act, d, &nd);
  const char *C = ksrc_comp(d);
  return rill__buf_printf(b, "#define ACT 1\n#define L(x) ((C)(x))\n__device__ __forceinline__ %s act_f(%s a) {\n"
                             "  const bool gelu_tanh = %d;\n  (void)gelu_tanh;\n  return (%s)(%s);\n}\n",
                          C, C, nd.gelu_tanh, C, UN_F[nd.code]);
}

rill_status_t cuda_gate_function(rill_buf_t *b, bool geglu, bool gelu_tanh, rill_dtype_t d) {
  const char *C = ksrc_comp(d);
  return rill__buf_printf(b, "#define L(x) ((C)(x))\n__device__ __forceinline__ %s gate_f(%s a, %s b) {\n"
                             "  const bool gelu_tanh = %d;\n  (void)gelu_tanh;\n  return (%s)(%s);\n}\n",
                          C, C, C, gelu_tanh, C, BIN_F[geglu ? B_GEGLU : B_SWIGLU]);
}

rill_status_t cuda_around_function(rill_buf_t *b, const char *name, const ops_fused_t *fp, rill_dtype_t d, bool mask) {
  const char *C = ksrc_comp(d);
  /* the body's steps typedef their own C */
  RILL_TRY(rill__buf_printf(b, "#undef C\n#define L(x) ((C)(x))\n__device__ __forceinline__ void %s_step(%s i0, ", name, C));
  if (mask) RILL_TRY(rill__buf_printf(b, "%s i1, ", C));
  RILL_TRY(rill__buf_printf(b, "%s &r0) {\n", C));
  RILL_TRY(ew_body(b, fp->node, fp->nnodes, fp->out, 1));
  return rill__buf_printf(b, "}\n#undef L\n#define C %s\n__device__ __forceinline__ C %s(C v%s) {\n  T t;\n  ST(t, v);\n  C r;\n  %s_step(LD(t), %sr);\n"
                             "  return r;\n}\n",
                          C, name, mask ? ", C m" : "", name, mask ? "m, " : "");
}

rill_status_t cuda_gen_activation(const ops_cuda_env_t *env, rill_dtype_t d, int act, bool residual, long long n, CUfunction *fn, CUfunction *fnv,
                                  int *vec, kgen_args_t *args) {
  /* y + z (rounded, as an add would), then the activation: x0 the result, x1 z */
  ops_ewnode_t node[2];
  uint32_t nn = 0;
  if (residual) ops_add_node(d, &node[nn++]);
  if (act) {
    ops_act_node(act, d, &node[nn]);
    if (residual) node[nn].arg[0] = 0;
    nn++;
  }
  uint32_t last = nn - 1;
  rill_buf_t body;
  rill__buf_init(&body, env->a);
  rill_status_t st = nn ? ew_body(&body, node, nn, &last, 1) : rill__status(RILL_INTERNAL, "an epilogue kernel of nothing");
  if (!st) st = rill__buf_append(&body, "", 1);
  /* In place over a contiguous result (z contiguous too): the scalar kernel
   * and the vectorised one (16 bytes a thread), which runs where the result
   * (and z) is aligned to it. */
  kgen_fused_t e = {.nin = residual ? 2 : 1, .nout = 1, .in = {d, d}, .out = {d}, .rank = 1, .span = n};
  memset(args, 0, sizeof *args);
  args->n = n;
  args->dims[0] = n;
  args->st[0][0] = args->st[1][0] = 1;
  *fnv = NULL;
  *vec = 0;
  if (!st) {
    e.body = (const char *)body.data;
    st = kgen_fused(env->cache, env->a, &e, fn, fnv, vec);
  }
  rill__buf_free(&body);
  return st;
}

rill_status_t ops_cuda_ew_source(const ops_plan_t *plan, const rill_allocator_t *a, rill_buf_t *out, int *out_width) {
  rill_buf_t body;
  rill__buf_init(&body, a);
  kgen_fused_t e;
  kgen_args_t args;
  rill_status_t st = ew_describe(plan, &body, &e, &args);
  if (!st) st = kgen_fused_source(&e, out, out_width);
  rill__buf_free(&body);
  return st;
}

static rill_status_t gen_elementwise(const ops_cuda_env_t *env, const ops_plan_t *plan, cuda_state_t *s) {
  rill_buf_t body;
  rill__buf_init(&body, env->a);
  kgen_fused_t e;
  klaunch_t *L = &s->launch[0];
  if (!(s->ew = rill__calloc(env->a, 1, sizeof *s->ew))) return rill__oom();
  rill_status_t st = ew_describe(plan, &body, &e, s->ew);
  if (!st) st = kgen_fused(env->cache, env->a, &e, &L->fn, &L->fnv, &L->vec);
  for (uint32_t k = 0; !st && k < e.nin; k++) s->scalar_in |= (uint32_t)e.scalar[k] << k;
  rill__buf_free(&body);
  return st;
}

/* The copy kernel family of kernels/cuda/copy.cu for a pair of dtypes; with
 * a unit (4, 8 or 16 bytes; din == dout), moving that many bytes a thread
 * as raw bits. */
static rill_status_t copy_source(rill_buf_t *b, rill_dtype_t din, rill_dtype_t dout, int unit, int rank, long long span) {
  const char *C = unit == 16 ? "u128" : unit == 8 ? "unsigned long long" : unit == 4 ? "unsigned"
                  : din == dout                                   ? ksrc_ctype(din)
                  : (din == RILL_F64 || dout == RILL_F64)         ? "double"
                  : (rill__is_float(din) || rill__is_float(dout)) ? "float"
                                                                  : "long long";
  RILL_TRY(ksrc_def(b, "TIN", "%s", unit ? C : ksrc_ctype(din)));
  RILL_TRY(ksrc_def(b, "TOUT", "%s", unit ? C : ksrc_ctype(dout)));
  RILL_TRY(ksrc_def(b, "C", "%s", C));
  RILL_TRY(ksrc_def(b, "RANK", "%d", rank));
  RILL_TRY(ksrc_def(b, "I", "%s", ksrc_idx(span)));
  if (din == dout) {
    /* same dtype: bits move unchanged */
    RILL_TRY(rill__buf_printf(b, "#define LD(v) (v)\n#define ST(p, v) ((p) = (v))\n"));
    return NULL;
  }
  return ksrc_io(b, "LD", "ST", din, dout, C);
}

/* PARTS_MAX parts at most in one launch of parts_k (its argument is a pointer
 * and an offset a part: densenet201's last concats have 49); the largest
 * unit (16 bytes or less) dividing every part's row. A row of blocks a part,
 * as many as its largest part wants, at most 16 an SM over all parts. */
#define PARTS_MAX 64
static rill_status_t gen_parts(const ops_cuda_env_t *env, const ops_plan_t *plan, cuda_state_t *s, bool cat,
                               const rill_type_t *whole) {
  const isa_opdecl_t *d = plan->decl;
  uint32_t np = cat ? d->nin : d->nout;
  const rill_type_t *part = cat ? d->in : d->out;
  int axis = (int)plan->p.axis;
  if (np < 2 || np > PARTS_MAX) return NULL;
  for (uint32_t k = 0; k < np; k++)
    if (part[k].dtype != whole->dtype) return NULL;
  long long rows = 1, inner = rill_dtype_size(whole->dtype);
  for (int i = 0; i < whole->rank; i++) {
    if (i < axis) rows *= whole->dims[i];
    else if (i > axis) inner *= whole->dims[i];
  }
  uint32_t unit = 16;
  for (uint32_t k = 0; k < np; k++) {
    long long b = part[k].dims[axis] * inner;
    while (unit > 1 && b % unit) unit /= 2;
  }
  if (!(s->parts_arg = rill__calloc(env->a, 2 * np + 2, 8))) return rill__oom();
  int64_t *off = (int64_t *)&s->parts_arg[np];
  for (uint32_t k = 0; k < np; k++) off[k + 1] = off[k] + part[k].dims[axis] * inner / unit;
  off[np + 1] = rows;
  s->parts_unit = unit;
  s->parts_units = rows * off[np];
  long long most = 0, cap = (long long)env->num_sms * 16 / np;
  for (uint32_t k = 0; k < np; k++)
    if (off[k + 1] - off[k] > most) most = off[k + 1] - off[k];
  most = (rows * most + 255) / 256;
  if (most > cap) most = cap;
  s->parts_blocks = (unsigned)(most > 0 ? most : 1);
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = ksrc_def(&b, "PARTS", "%u", np);
  if (!st) st = ksrc_def(&b, "UB", "%u", unit);
  if (!st) st = ksrc_def(&b, "SPLIT", "%d", !cat);
  if (!st) st = ksrc_def(&b, "I", "%s", ksrc_idx(rows * off[np]));
  return ksrc_build(env->cache, &b, st, rill_kernel_copy, "parts_k", &s->parts);
}

rill_status_t cuda_gen_copy(const ops_cuda_env_t *env, rill_dtype_t din, rill_dtype_t dout, int rank, long long span, CUfunction *fn) {
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  return ksrc_build(env->cache, &b, copy_source(&b, din, dout, 0, rank, span), rill_kernel_copy, "copy_k", fn);
}

/* A launch of a strided copy before it is compiled: its view (simplified),
 * the dtypes, the kernel's rank and the span (the largest element offset +
 * 1 either side reaches, for the index type); vec > 1 where a second kernel
 * moves units of vec elements over vsh, the view in those units. */
typedef struct copy_view {
  kshape_t sh, vsh;
  rill_dtype_t din, dout;
  int rank, vec, in, out;
  long long span;
} copy_view_t;

/* Drops the dimensions of size 1 and merges neighbours whose strides run on
 * across them on both sides (a slice of rows of channels is rows of one
 * run): fewer divisions an element, and the runs vectorise. Dimensions of
 * size 0 stay (n stays 0). Returns the rank left, at least 1. */
static int copy_simplify(kshape_t *sh, int rank) {
  int r = 0;
  for (int i = 0; i < rank; i++) {
    int64_t n = sh->dims[i];
    if (n == 1) continue;
    if (r && sh->st[0][r - 1] == sh->st[0][i] * n && sh->st[1][r - 1] == sh->st[1][i] * n) {
      sh->dims[r - 1] *= n;
    } else {
      sh->dims[r] = n;
      r++;
    }
    sh->st[0][r - 1] = sh->st[0][i];
    sh->st[1][r - 1] = sh->st[1][i];
  }
  if (!r) { /* every dimension 1: one element */
    sh->dims[0] = 1;
    sh->st[0][0] = sh->st[1][0] = 0;
    r = 1;
  }
  for (int i = r; i < RILL_MAX_RANK; i++) sh->dims[i] = sh->st[0][i] = sh->st[1][i] = 0;
  return r;
}

/* Within one dtype, where the innermost dimension is a run on both sides:
 * the widest unit of 16, 8 or 4 bytes (more than an element) dividing that
 * run, every other stride and both bases, so that every unit lies whole
 * within the run; v->vec its elements and v->vsh the view in units. */
static void copy_vectorise(copy_view_t *v) {
  const kshape_t *sh = &v->sh;
  int r = v->rank;
  int64_t es = (int64_t)rill_dtype_size(v->din);
  if (v->din != v->dout || sh->st[0][r - 1] != 1 || sh->st[1][r - 1] != 1) return;
  for (int64_t u = 16; u >= 4 && u > es; u /= 2) {
    bool fits = sh->dims[r - 1] * es % u == 0 && sh->base[0] * es % u == 0 && sh->base[1] * es % u == 0;
    for (int i = 0; i < r - 1; i++) fits &= sh->st[0][i] * es % u == 0 && sh->st[1][i] * es % u == 0;
    if (!fits) continue;
    int64_t vec = u / es;
    v->vec = (int)vec;
    v->vsh = *sh;
    v->vsh.n = sh->n / vec;
    v->vsh.dims[r - 1] = sh->dims[r - 1] / vec;
    for (int i = 0; i < r - 1; i++) {
      v->vsh.st[0][i] = sh->st[0][i] / vec;
      v->vsh.st[1][i] = sh->st[1][i] / vec;
    }
    v->vsh.base[0] = sh->base[0] / vec;
    v->vsh.base[1] = sh->base[1] / vec;
    return;
  }
}

/* Launches of the strided-copy path: one for transpose, broadcast_to, slice
 * and pad (its copy, after the fill), one a part for concat and split. */
uint32_t cuda_copy_launches(const ops_plan_t *plan) {
  ops_cpu_fn f = plan->def->cpu;
  if (f == ops_cpu_transpose || f == ops_cpu_broadcast || f == ops_cpu_slice || f == ops_cpu_pad) return 1;
  if (f == ops_cpu_concat) return plan->decl->nin;
  if (f == ops_cpu_split) return plan->decl->nout;
  return 0;
}

/* Launch k's view (k < cuda_copy_launches(plan)). */
static void copy_view(const ops_plan_t *plan, uint32_t k, copy_view_t *v) {
  const isa_opdecl_t *d = plan->decl;
  ops_cpu_fn f = plan->def->cpu;
  const rill_type_t *x = &d->in[0], *ot = &d->out[0];
  int64_t xs[RILL_MAX_RANK], os[RILL_MAX_RANK];
  kshape_t *sh = &v->sh;
  memset(v, 0, sizeof *v);
  v->din = x->dtype;
  v->dout = ot->dtype;
  if (f == ops_cpu_concat || f == ops_cpu_split) {
    bool cat = f == ops_cpu_concat;
    const rill_type_t *whole = cat ? ot : x, *part = cat ? &d->in[k] : &d->out[k];
    v->in = cat ? (int)k : 0;
    v->out = cat ? 0 : (int)k;
    v->din = cat ? part->dtype : whole->dtype;
    v->dout = cat ? ot->dtype : part->dtype;
    v->rank = part->rank;
    v->span = cuda_numel(whole);
    cuda_row_strides(whole, os);
    cuda_row_strides(part, xs);
    int64_t pos = 0;
    for (uint32_t j = 0; j < k; j++) pos += (cat ? &d->in[j] : &d->out[j])->dims[plan->p.axis];
    sh->n = cuda_numel(part);
    for (int i = 0; i < part->rank; i++) {
      sh->dims[i] = part->dims[i];
      sh->st[cat ? 0 : 1][i] = xs[i];
      sh->st[cat ? 1 : 0][i] = os[i];
    }
    sh->base[cat ? 1 : 0] = pos * os[plan->p.axis];
  } else if (f == ops_cpu_pad) {
    cuda_row_strides(x, xs);
    cuda_row_strides(ot, os);
    v->rank = x->rank;
    v->span = cuda_numel(x) > cuda_numel(ot) ? cuda_numel(x) : cuda_numel(ot);
    sh->n = 1;
    for (int i = 0; i < x->rank; i++) {
      int64_t pb = plan->p.pads[i], pe = plan->p.pads[RILL_MAX_RANK + i];
      int64_t cb = pb < 0 ? -pb : 0, ce = pe < 0 ? -pe : 0;
      sh->dims[i] = x->dims[i] - cb - ce;
      sh->n *= sh->dims[i];
      sh->st[0][i] = xs[i];
      sh->st[1][i] = os[i];
      sh->base[0] += cb * xs[i];
      sh->base[1] += (pb > 0 ? pb : 0) * os[i];
    }
  } else {
    cuda_row_strides(x, xs);
    cuda_row_strides(ot, os);
    v->rank = ot->rank;
    sh->n = cuda_numel(ot);
    v->span = cuda_numel(x) > sh->n ? cuda_numel(x) : sh->n;
    for (int i = 0; i < ot->rank; i++) {
      sh->dims[i] = ot->dims[i];
      sh->st[1][i] = os[i];
    }
    if (f == ops_cpu_transpose) {
      for (int i = 0; i < ot->rank; i++) sh->st[0][i] = xs[plan->p.perm[i]];
    } else if (f == ops_cpu_broadcast) {
      int64_t bs[RILL_MAX_RANK];
      ops_broadcast_strides(x, ot, bs);
      for (int i = 0; i < ot->rank; i++) sh->st[0][i] = bs[i];
    } else {
      for (int i = 0; i < ot->rank; i++) {
        sh->st[0][i] = xs[i] * plan->p.steps[i];
        sh->base[0] += xs[i] * plan->p.starts[i];
      }
    }
  }
  v->rank = copy_simplify(sh, v->rank);
  copy_vectorise(v);
}

/* The defines of a view's element kernel, or (vec) of its vector kernel. */
static rill_status_t copy_view_source(rill_buf_t *b, const copy_view_t *v, bool vec) {
  if (!vec) return copy_source(b, v->din, v->dout, 0, v->rank, v->span);
  return copy_source(b, v->din, v->dout, v->vec * (int)rill_dtype_size(v->din), v->rank, (v->span + v->vec - 1) / v->vec);
}

rill_status_t cuda_copy_source(const ops_plan_t *plan, uint32_t k, bool vec, rill_buf_t *out, int *out_unit) {
  copy_view_t v;
  copy_view(plan, k, &v);
  *out_unit = vec ? v.vec * (int)rill_dtype_size(v.din) : (int)rill_dtype_size(v.din);
  if (!*out_unit) return NULL;
  RILL_TRY(copy_view_source(out, &v, vec));
  return rill__buf_printf(out, "%s\n%s", rill_kernel_prelude, rill_kernel_copy);
}

/* Compiles launch k of a strided copy into L: its element kernel and, where
 * the view vectorises, the vector kernel. */
static rill_status_t gen_copy(const ops_cuda_env_t *env, const ops_plan_t *plan, uint32_t k, klaunch_t *L) {
  copy_view_t v;
  copy_view(plan, k, &v);
  L->sh = v.sh;
  L->vsh = v.vsh;
  L->vec = v.vec;
  L->in = v.in;
  L->out = v.out;
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  RILL_TRY(ksrc_build(env->cache, &b, copy_view_source(&b, &v, false), rill_kernel_copy, "copy_k", &L->fn));
  if (v.vec < 2) return NULL;
  rill__buf_init(&b, env->a);
  return ksrc_build(env->cache, &b, copy_view_source(&b, &v, true), rill_kernel_copy, "copy_k", &L->fnv);
}

/* A strided copy's launch: the vector kernel where both pointers are
 * aligned to its unit (tensors may be views at any offset), else the
 * element kernel; es the size of x's elements. */
static rill_status_t copy_launch(const ops_cuda_ctx_t *ctx, klaunch_t *L, CUdeviceptr x, CUdeviceptr y, size_t es) {
  CUdeviceptr unit = (CUdeviceptr)L->vec * es;
  if (L->vec > 1 && x % unit == 0 && y % unit == 0) {
    void *vargs[] = {&x, &y, &L->vsh};
    return cuda_launch(ctx, L->fnv, L->vsh.n, vargs);
  }
  void *args[] = {&x, &y, &L->sh};
  return cuda_launch(ctx, L->fn, L->sh.n, args);
}

rill_status_t cuda_gen_fill(const ops_cuda_env_t *env, rill_dtype_t d, double value, long long n, CUfunction *fn) {
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  char v[64];
  const char *C = ksrc_comp(d);
  ksrc_lit(v, sizeof v, value, C);
  if (!rill__is_float(d)) { /* the value as the cpu stores it (saturated, NaN 0), as an integer literal */
    uint8_t e[8] = {0};
    rill__store_f(e, d, 0, value);
    long long iv = rill__load_i(e, d, 0);
    if (d == RILL_U64) snprintf(v, sizeof v, "%lluULL", (unsigned long long)iv);
    else int_lit(v, sizeof v, iv);
  }
  rill_status_t st = ksrc_def(&b, "TIN", "%s", ksrc_ctype(d));
  if (!st) st = ksrc_def(&b, "TOUT", "%s", ksrc_ctype(d));
  if (!st) st = ksrc_def(&b, "C", "%s", C);
  if (!st) st = ksrc_def(&b, "RANK", "1");
  if (!st) st = ksrc_def(&b, "I", "%s", ksrc_idx(n));
  if (!st) st = ksrc_def(&b, "VALUE", "%s", v);
  if (!st) st = ksrc_io(&b, "LD", "ST", d, d, C);
  return ksrc_build(env->cache, &b, st, rill_kernel_copy, "fill_k", fn);
}

static rill_status_t gen_gather(const ops_cuda_env_t *env, rill_dtype_t d, rill_dtype_t di, long long n, CUfunction *fn) {
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = ksrc_def(&b, "T", "%s", ksrc_ctype(d));
  if (!st) st = ksrc_def(&b, "TI", "%s", ksrc_ctype(di));
  if (!st) st = ksrc_def(&b, "I", "%s", ksrc_idx(n));
  return ksrc_build(env->cache, &b, st, rill_kernel_gather, "gather_k", fn);
}

const char *ops_cuda_unsupported(const ops_plan_t *plan) {
  ops_cpu_fn f = plan->def->cpu;
  if (f == ops_cpu_unary || f == ops_cpu_binary || f == ops_cpu_where || f == ops_cpu_fused || f == ops_cpu_copy || f == ops_cpu_transpose ||
      f == ops_cpu_broadcast || f == ops_cpu_concat || f == ops_cpu_split || f == ops_cpu_slice || f == ops_cpu_pad ||
      f == ops_cpu_gather || cuda_nn_supports(plan) || cuda_llm_supports(plan) || cuda_resample_supports(plan) || cuda_convt_supports(plan) ||
      cuda_index_supports(plan) || cuda_select_supports(plan) || cuda_quant_supports(plan))
    return NULL;
  return "this op has no CUDA implementation";
}

static rill_status_t alloc_launches(const ops_cuda_env_t *env, cuda_state_t *s, uint32_t n) {
  s->nlaunch = n;
  s->launch = rill__calloc(env->a, n ? n : 1, sizeof(klaunch_t));
  return s->launch ? NULL : rill__oom();
}

static rill_status_t prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, cuda_state_t *s) {
  const isa_opdecl_t *d = plan->decl;
  ops_cpu_fn f = plan->def->cpu;
  const rill_type_t *ot = &d->out[0];
  if (f == ops_cpu_unary || f == ops_cpu_binary || f == ops_cpu_where || f == ops_cpu_fused) {
    s->kind = K_EW;
    RILL_TRY(alloc_launches(env, s, 1));
    return gen_elementwise(env, plan, s);
  }
  if (cuda_resample_supports(plan)) {
    s->kind = K_RESAMPLE;
    return cuda_resample_prepare(env, plan, &s->nn);
  }
  if (cuda_convt_supports(plan)) {
    s->kind = K_CONVT;
    return cuda_convt_prepare(env, plan, &s->nn);
  }
  if (cuda_quant_supports(plan)) {
    s->kind = K_QUANT;
    RILL_TRY(cuda_quant_prepare(env, plan, &s->nn));
    s->cudnn = cuda_quant_uses_cudnn(s->nn);
    return NULL;
  }
  if (cuda_index_supports(plan)) {
    s->kind = K_INDEX;
    return cuda_index_prepare(env, plan, &s->nn);
  }
  if (cuda_select_supports(plan)) {
    s->kind = K_SELECT;
    return cuda_select_prepare(env, plan, &s->nn);
  }
  if (cuda_llm_supports(plan)) {
    s->kind = K_LLM;
    return cuda_llm_prepare(env, plan, &s->nn);
  }
  if (cuda_nn_supports(plan)) {
    s->kind = K_NN;
    RILL_TRY(cuda_nn_prepare(env, plan, &s->nn));
    s->cudnn = cuda_nn_uses_cudnn(s->nn);
    return NULL;
  }
  if (f == ops_cpu_copy) {
    s->kind = K_D2D;
    rill__type_sizes(ot, NULL, &s->bytes);
    return NULL;
  }
  if (f == ops_cpu_gather) {
    s->kind = K_GATHER;
    const rill_type_t *x = &d->in[0];
    int64_t outer = 1, inner = 1, es = (int64_t)rill_dtype_size(x->dtype);
    for (int i = 0; i < x->rank; i++) {
      if (i < plan->p.axis) outer *= x->dims[i];
      else if (i > plan->p.axis) inner *= x->dims[i];
    }
    /* rows of a multiple of 8 bytes (Swin's windows gathered by rows of
     * channels): a second kernel moves them 8 bytes a thread, as u64 */
    bool wide = es < 8 && inner * es % 8 == 0;
    RILL_TRY(alloc_launches(env, s, wide ? 2 : 1));
    klaunch_t *L = &s->launch[0];
    L->sh.n = cuda_numel(ot);
    L->sh.dims[0] = outer;
    L->sh.dims[1] = d->in[1].dims[0];
    L->sh.dims[2] = inner;
    L->sh.dims[3] = x->dims[plan->p.axis];
    long long most = cuda_numel(x) > L->sh.n ? cuda_numel(x) : L->sh.n;
    RILL_TRY(gen_gather(env, x->dtype, d->in[1].dtype, most, &L->fn));
    if (!wide) return NULL;
    klaunch_t *V = &s->launch[1];
    V->vec = (int)(8 / es);
    V->sh = L->sh;
    V->sh.n = L->sh.n / V->vec;
    V->sh.dims[2] = inner / V->vec;
    return gen_gather(env, RILL_U64, d->in[1].dtype, most, &V->fn);
  }
  /* Strided copies: one view per launch (pad's after its fill). */
  s->kind = K_MULTI;
  uint32_t n = cuda_copy_launches(plan);
  if (!n) return rill__status(RILL_UNIMPLEMENTED, "%s: no CUDA implementation", d->name);
  if (f == ops_cpu_pad) {
    s->kind = K_PAD;
    RILL_TRY(alloc_launches(env, s, 2));
    klaunch_t *fill = &s->launch[0];
    fill->sh.n = cuda_numel(ot);
    RILL_TRY(cuda_gen_fill(env, ot->dtype, plan->p.value, fill->sh.n, &fill->fn));
    return gen_copy(env, plan, 0, &s->launch[1]);
  }
  RILL_TRY(alloc_launches(env, s, n));
  for (uint32_t k = 0; k < n; k++) RILL_TRY(gen_copy(env, plan, k, &s->launch[k]));
  if (f == ops_cpu_concat || f == ops_cpu_split) return gen_parts(env, plan, s, f == ops_cpu_concat, f == ops_cpu_concat ? ot : &d->in[0]);
  return NULL;
}

rill_status_t ops_cuda_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out_state) {
  const char *why = ops_cuda_unsupported(plan);
  if (why) return rill__status(RILL_UNIMPLEMENTED, "op %s on the cuda device: %s", plan->decl->name, why);
  cuda_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  rill_status_t st = prepare(env, plan, s);
  if (st) {
    ops_cuda_release(env, s);
    return rill__status_prefix(st, "preparing %s for the cuda device: ", plan->decl->name);
  }
  *out_state = s;
  return NULL;
}

void ops_cuda_release(const ops_cuda_env_t *env, void *state) {
  cuda_state_t *s = state;
  if (!s) return;
  if (s->kind == K_LLM) cuda_llm_release(env, s->nn);
  else if (s->kind == K_RESAMPLE) cuda_resample_release(env, s->nn);
  else if (s->kind == K_CONVT) cuda_convt_release(env, s->nn);
  else if (s->kind == K_INDEX) cuda_index_release(env, s->nn);
  else if (s->kind == K_SELECT) cuda_select_release(env, s->nn);
  else if (s->kind == K_QUANT) cuda_quant_release(env, s->nn);
  else cuda_nn_release(env, s->nn);
  rill__free(env->a, s->ew);
  rill__free(env->a, s->launch);
  rill__free(env->a, s->parts_arg);
  rill__free(env->a, s);
}

unsigned cuda_blocks(long long n, int num_sms) {
  long long blocks = (n + 255) / 256, cap = (long long)num_sms * 16;
  return (unsigned)(blocks < cap ? blocks : cap);
}

rill_status_t cuda_launch(const ops_cuda_ctx_t *ctx, CUfunction fn, long long n, void **args) {
  if (n <= 0) return NULL;
  return CU(ctx->api, cuLaunchKernel, fn, cuda_blocks(n, ctx->num_sms), 1, 1, 256, 1, 1, 0, ctx->stream, args, NULL);
}

rill_status_t ops_cuda_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in,
                           void *const *out) {
  cuda_state_t *s = state;
  const isa_opdecl_t *d = plan->decl;
  switch (s->kind) {
    case K_NN: return cuda_nn_run(ctx, plan, s->nn, in, out);
    case K_LLM: return cuda_llm_run(ctx, plan, s->nn, in, out);
    case K_RESAMPLE: return cuda_resample_run(ctx, plan, s->nn, in, out);
    case K_CONVT: return cuda_convt_run(ctx, plan, s->nn, in, out);
    case K_INDEX: return cuda_index_run(ctx, plan, s->nn, in, out);
    case K_SELECT: return cuda_select_run(ctx, plan, s->nn, in, out);
    case K_QUANT: return cuda_quant_run(ctx, plan, s->nn, in, out);
    case K_EW: {
      klaunch_t *L = &s->launch[0];
      kgen_args_t args = *s->ew;
      for (uint32_t k = 0; k < d->nin; k++) args.in[k] = (CUdeviceptr)in[k];
      for (uint32_t k = 0; k < d->nout; k++) args.out[k] = (CUdeviceptr)out[k];
      void *params[] = {&args};
      if (L->vec > 1) {
        /* Vector accesses need every operand read per element aligned to its vector's size. */
        bool aligned = true;
        for (uint32_t k = 0; k < d->nout; k++) aligned &= args.out[k] % ((CUdeviceptr)L->vec * rill_dtype_size(d->out[k].dtype)) == 0;
        for (uint32_t k = 0; k < d->nin; k++)
          aligned &= (s->scalar_in >> k & 1) || args.in[k] % ((CUdeviceptr)L->vec * rill_dtype_size(d->in[k].dtype)) == 0;
        if (aligned) return cuda_launch(ctx, L->fnv, (args.n + L->vec - 1) / L->vec, params);
      }
      return cuda_launch(ctx, L->fn, args.n, params);
    }
    case K_D2D:
      if (!s->bytes || in[0] == out[0]) return NULL;
      return CU(ctx->api, cuMemcpyDtoDAsync, (CUdeviceptr)out[0], (CUdeviceptr)in[0], s->bytes, ctx->stream);
    case K_GATHER: {
      klaunch_t *L = &s->launch[0];
      CUdeviceptr x = (CUdeviceptr)in[0], ix = (CUdeviceptr)in[1], y = (CUdeviceptr)out[0], err = ctx->error_word;
      if (s->nlaunch > 1 && x % 8 == 0 && y % 8 == 0) { /* the rows as u64 */
        klaunch_t *V = &s->launch[1];
        void *vargs[] = {&x, &ix, &y, &err, &V->sh};
        return cuda_launch(ctx, V->fn, V->sh.n, vargs);
      }
      void *args[] = {&x, &ix, &y, &err, &L->sh};
      return cuda_launch(ctx, L->fn, L->sh.n, args);
    }
    case K_PAD: {
      CUdeviceptr x = (CUdeviceptr)in[0], y = (CUdeviceptr)out[0], none = 0;
      void *fargs[] = {&none, &y, &s->launch[0].sh};
      RILL_TRY(cuda_launch(ctx, s->launch[0].fn, s->launch[0].sh.n, fargs));
      return copy_launch(ctx, &s->launch[1], x, y, rill_dtype_size(d->in[0].dtype));
    }
    default:
      if (s->parts) {
        bool cat = plan->def->cpu == ops_cpu_concat;
        uint32_t np = cat ? d->nin : d->nout;
        uint64_t arg[2 * PARTS_MAX + 2];
        CUdeviceptr whole = (CUdeviceptr)(cat ? out[0] : in[0]);
        bool aligned = whole % s->parts_unit == 0;
        memcpy(arg, s->parts_arg, 8 * (2 * np + 2));
        for (uint32_t k = 0; k < np; k++) {
          arg[k] = (uint64_t)(uintptr_t)(cat ? in[k] : out[k]);
          aligned &= arg[k] % s->parts_unit == 0;
        }
        void *args[] = {&whole, arg};
        if (aligned && !s->parts_units) return NULL;
        if (aligned) return CU(ctx->api, cuLaunchKernel, s->parts, s->parts_blocks, np, 1, 256, 1, 1, 0, ctx->stream, args, NULL);
      }
      for (uint32_t k = 0; k < s->nlaunch; k++) {
        klaunch_t *L = &s->launch[k];
        RILL_TRY(copy_launch(ctx, L, (CUdeviceptr)in[L->in], (CUdeviceptr)out[L->out], rill_dtype_size(d->in[L->in].dtype)));
      }
      return NULL;
  }
}

size_t ops_cuda_workspace(const void *state) {
  const cuda_state_t *s = state;
  return s->kind == K_NN ? cuda_nn_workspace(s->nn) : s->kind == K_LLM ? cuda_llm_workspace(s->nn) : s->kind == K_QUANT ? cuda_quant_workspace(s->nn)
         : s->kind == K_SELECT ? cuda_select_workspace(s->nn) : s->kind == K_INDEX ? cuda_index_workspace(s->nn) : 0;
}

rill_status_t ops_cuda_candidates(const ops_cuda_env_t *env, const ops_plan_t *plan, void *state, rill_buf_t *out) {
  cuda_state_t *s = state;
  if (s && s->kind == K_NN) return cuda_nn_candidates(env, plan, s->nn, out);
  return rill__buf_append(out, "default\n", 8);
}

bool ops_cuda_uses_cudnn(const void *state) { return ((const cuda_state_t *)state)->cudnn; }
