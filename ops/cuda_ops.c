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
 * (dims, input and output strides, base offsets) per launch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_gen.h"

typedef struct klaunch {
  CUfunction fn;
  CUfunction fnv;       /* contiguous elementwise: the vectorised kernel, when there is one */
  int vec;              /* its elements per access */
  kshape_t sh;
  int in, out;          /* operand indices for multi-launch ops (concat, split) */
  double value;
} klaunch_t;

enum { K_EW, K_D2D, K_MULTI, K_PAD, K_GATHER, K_NN };

typedef struct cuda_state {
  int kind;
  uint32_t nlaunch;
  klaunch_t *launch;
  size_t bytes;         /* K_D2D */
  void *nn;             /* K_NN: cuda_nn.c's state */
  bool cudnn;
} cuda_state_t;

/* The expression of an elementwise op over a, b, c (already in compute type C). */
static bool expr(char *e, size_t n, const ops_plan_t *plan, const char *C, bool fl) {
  const ops_params_t *p = &plan->p;
  char lo[64], hi[64], al[64];
  if (plan->def->cpu == ops_cpu_unary) {
    switch (p->code) {
      case U_NEG: snprintf(e, n, "-a"); break;
      case U_ABS: snprintf(e, n, fl ? "fabs(a)" : "(a < 0 ? -a : a)"); break;
      case U_EXP: snprintf(e, n, "exp(a)"); break;
      case U_LOG: snprintf(e, n, "log(a)"); break;
      case U_SQRT: snprintf(e, n, "sqrt(a)"); break;
      case U_RSQRT: snprintf(e, n, "(%s)1 / sqrt(a)", C); break;
      case U_RECIPROCAL: snprintf(e, n, "(%s)1 / a", C); break;
      case U_SIGMOID: snprintf(e, n, "(%s)1 / ((%s)1 + exp(-a))", C, C); break;
      case U_TANH: snprintf(e, n, "tanh(a)"); break;
      case U_RELU: snprintf(e, n, fl ? "(a != a ? a : a > (%s)0 ? a : (%s)0)" : "(a > 0 ? a : 0)", C, C); break;
      case U_SILU: snprintf(e, n, "a / ((%s)1 + exp(-a))", C); break;
      case U_ERF: snprintf(e, n, "erf(a)"); break;
      case U_SIN: snprintf(e, n, "sin(a)"); break;
      case U_COS: snprintf(e, n, "cos(a)"); break;
      case U_FLOOR: snprintf(e, n, fl ? "floor(a)" : "a"); break;
      case U_CEIL: snprintf(e, n, fl ? "ceil(a)" : "a"); break;
      case U_GELU:
        if (p->gelu_tanh) snprintf(e, n, "(%s)0.5 * a * ((%s)1 + tanh((%s)0.7978845608028654 * (a + (%s)0.044715 * a * a * a)))", C, C, C, C);
        else snprintf(e, n, "(%s)0.5 * a * ((%s)1 + erf(a * (%s)0.7071067811865476))", C, C, C);
        break;
      case U_LEAKY_RELU: ksrc_lit(al, sizeof al, p->alpha, C); snprintf(e, n, "(a >= (%s)0 ? a : a * %s)", C, al); break;
      case U_CLIP: {
        /* torch.clamp: NaN stays NaN; min applies first, so min > max gives max. */
        ksrc_lit(lo, sizeof lo, fl ? p->lo : ceil(p->lo), C);
        ksrc_lit(hi, sizeof hi, fl ? p->hi : floor(p->hi), C);
        char inner[160];
        if (p->has_lo) snprintf(inner, sizeof inner, "max(a, %s)", lo);
        else snprintf(inner, sizeof inner, "a");
        if (p->has_hi) snprintf(e, n, "(a != a ? a : min(%s, %s))", inner, hi);
        else snprintf(e, n, "(a != a ? a : %s)", inner);
        break;
      }
      case U_CAST: case U_COPY: snprintf(e, n, "a"); break;
      case U_LOGICAL_NOT: snprintf(e, n, "(a == (%s)0)", C); break;
      default: return false;
    }
    return true;
  }
  if (plan->def->cpu == ops_cpu_binary) {
    switch (p->code) {
      case B_ADD: snprintf(e, n, "a + b"); break;
      case B_SUB: snprintf(e, n, "a - b"); break;
      case B_MUL: snprintf(e, n, "a * b"); break;
      case B_DIV: snprintf(e, n, "a / b"); break;
      case B_POW: snprintf(e, n, fl ? "pow(a, b)" : "ipow(a, b)"); break;
      case B_MAXIMUM: snprintf(e, n, fl ? "(a != a ? a : b != b ? b : a > b ? a : b)" : "(a > b ? a : b)"); break;
      case B_MINIMUM: snprintf(e, n, fl ? "(a != a ? a : b != b ? b : a < b ? a : b)" : "(a < b ? a : b)"); break;
      case B_EQ: snprintf(e, n, "a == b"); break;
      case B_NE: snprintf(e, n, "a != b"); break;
      case B_LT: snprintf(e, n, "a < b"); break;
      case B_LE: snprintf(e, n, "a <= b"); break;
      case B_GT: snprintf(e, n, "a > b"); break;
      case B_GE: snprintf(e, n, "a >= b"); break;
      case B_LOGICAL_AND: snprintf(e, n, "(a != 0 && b != 0)"); break;
      case B_LOGICAL_OR: snprintf(e, n, "(a != 0 || b != 0)"); break;
      default: return false;
    }
    return true;
  }
  if (plan->def->cpu == ops_cpu_where) {
    snprintf(e, n, "(a != 0 ? b : c)");
    return true;
  }
  return false;
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

static rill_status_t gen_elementwise(const ops_cuda_env_t *env, const ops_plan_t *plan, klaunch_t *L) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *ot = &d->out[0];
  /* The domain the arithmetic happens in: the promoted dtype (unary ops: the input's). */
  rill_dtype_t dom = plan->def->cpu == ops_cpu_unary ? d->in[0].dtype : plan->p.compute;
  bool fl = rill__is_float(dom);
  kgen_ew_t e = {.nin = d->nin, .out = ot->dtype, .comp = ksrc_comp(dom), .cond_first = plan->def->cpu == ops_cpu_where, .rank = ot->rank};
  char ex[1024];
  if (!expr(ex, sizeof ex, plan, e.comp, fl)) return rill__status(RILL_UNIMPLEMENTED, "%s: no CUDA expression", d->name);
  e.expr = ex;
  memset(&L->sh, 0, sizeof L->sh);
  L->sh.n = e.n = cuda_numel(ot);
  e.contig = true;
  for (uint32_t k = 0; k < d->nin; k++) {
    e.in[k] = d->in[k].dtype;
    ops_broadcast_strides(&d->in[k], ot, L->sh.st[k]);
    e.contig &= d->in[k].rank == ot->rank && memcmp(d->in[k].dims, ot->dims, sizeof(int64_t) * (size_t)ot->rank) == 0;
  }
  for (int i = 0; i < ot->rank; i++) L->sh.dims[i] = ot->dims[i];
  return kgen_elementwise(env->cache, env->a, &e, &L->fn, &L->fnv, &L->vec);
}

/* The copy kernel family of kernels/cuda/copy.cu for a pair of dtypes. */
static rill_status_t copy_source(rill_buf_t *b, rill_dtype_t din, rill_dtype_t dout, int rank, long long span) {
  const char *C = din == dout ? ksrc_ctype(din) : (din == RILL_F64 || dout == RILL_F64) ? "double"
                  : (rill__is_float(din) || rill__is_float(dout))                        ? "float"
                                                                                           : "long long";
  RILL_TRY(ksrc_def(b, "TIN", "%s", ksrc_ctype(din)));
  RILL_TRY(ksrc_def(b, "TOUT", "%s", ksrc_ctype(dout)));
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

rill_status_t cuda_gen_copy(const ops_cuda_env_t *env, rill_dtype_t din, rill_dtype_t dout, int rank, long long span, CUfunction *fn) {
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  return ksrc_build(env->cache, &b, copy_source(&b, din, dout, rank, span), rill_kernel_copy, "copy_k", fn);
}

rill_status_t cuda_gen_fill(const ops_cuda_env_t *env, rill_dtype_t d, double value, long long n, CUfunction *fn) {
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  char v[64];
  const char *C = ksrc_comp(d);
  ksrc_lit(v, sizeof v, value, C);
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
  if (f == ops_cpu_unary || f == ops_cpu_binary || f == ops_cpu_where || f == ops_cpu_copy || f == ops_cpu_transpose ||
      f == ops_cpu_broadcast || f == ops_cpu_concat || f == ops_cpu_split || f == ops_cpu_slice || f == ops_cpu_pad ||
      f == ops_cpu_gather || cuda_nn_supports(plan))
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
  if (f == ops_cpu_unary || f == ops_cpu_binary || f == ops_cpu_where) {
    s->kind = K_EW;
    RILL_TRY(alloc_launches(env, s, 1));
    return gen_elementwise(env, plan, &s->launch[0]);
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
    RILL_TRY(alloc_launches(env, s, 1));
    klaunch_t *L = &s->launch[0];
    const rill_type_t *x = &d->in[0];
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < x->rank; i++) {
      if (i < plan->p.axis) outer *= x->dims[i];
      else if (i > plan->p.axis) inner *= x->dims[i];
    }
    L->sh.n = cuda_numel(ot);
    L->sh.dims[0] = outer;
    L->sh.dims[1] = d->in[1].dims[0];
    L->sh.dims[2] = inner;
    L->sh.dims[3] = x->dims[plan->p.axis];
    return gen_gather(env, x->dtype, d->in[1].dtype, cuda_numel(x) > L->sh.n ? cuda_numel(x) : L->sh.n, &L->fn);
  }
  /* Strided copies: one view per launch. */
  s->kind = K_MULTI;
  int64_t xs[RILL_MAX_RANK], os[RILL_MAX_RANK];
  if (f == ops_cpu_transpose || f == ops_cpu_broadcast || f == ops_cpu_slice) {
    const rill_type_t *x = &d->in[0];
    RILL_TRY(alloc_launches(env, s, 1));
    klaunch_t *L = &s->launch[0];
    cuda_row_strides(x, xs);
    cuda_row_strides(ot, os);
    L->sh.n = cuda_numel(ot);
    for (int i = 0; i < ot->rank; i++) {
      L->sh.dims[i] = ot->dims[i];
      L->sh.st[1][i] = os[i];
    }
    if (f == ops_cpu_transpose) {
      for (int i = 0; i < ot->rank; i++) L->sh.st[0][i] = xs[plan->p.perm[i]];
    } else if (f == ops_cpu_broadcast) {
      int64_t bs[RILL_MAX_RANK];
      ops_broadcast_strides(x, ot, bs);
      for (int i = 0; i < ot->rank; i++) L->sh.st[0][i] = bs[i];
    } else {
      for (int i = 0; i < ot->rank; i++) {
        L->sh.st[0][i] = xs[i] * plan->p.steps[i];
        L->sh.base[0] += xs[i] * plan->p.starts[i];
      }
    }
    return cuda_gen_copy(env, x->dtype, ot->dtype, ot->rank ? ot->rank : 1, cuda_numel(x) > L->sh.n ? cuda_numel(x) : L->sh.n, &L->fn);
  }
  if (f == ops_cpu_concat || f == ops_cpu_split) {
    bool cat = f == ops_cpu_concat;
    uint32_t parts = cat ? d->nin : d->nout;
    const rill_type_t *whole = cat ? ot : &d->in[0];
    RILL_TRY(alloc_launches(env, s, parts));
    cuda_row_strides(whole, os);
    int64_t pos = 0;
    for (uint32_t k = 0; k < parts; k++) {
      const rill_type_t *part = cat ? &d->in[k] : &d->out[k];
      klaunch_t *L = &s->launch[k];
      L->in = cat ? (int)k : 0;
      L->out = cat ? 0 : (int)k;
      cuda_row_strides(part, xs);
      L->sh.n = cuda_numel(part);
      for (int i = 0; i < part->rank; i++) {
        L->sh.dims[i] = part->dims[i];
        L->sh.st[cat ? 0 : 1][i] = xs[i];
        L->sh.st[cat ? 1 : 0][i] = os[i];
      }
      L->sh.base[cat ? 1 : 0] = pos * os[plan->p.axis];
      pos += part->dims[plan->p.axis];
      RILL_TRY(cuda_gen_copy(env, cat ? part->dtype : whole->dtype, cat ? ot->dtype : part->dtype, part->rank, cuda_numel(whole), &L->fn));
    }
    return NULL;
  }
  if (f == ops_cpu_pad) {
    const rill_type_t *x = &d->in[0];
    s->kind = K_PAD;
    RILL_TRY(alloc_launches(env, s, 2));
    klaunch_t *fill = &s->launch[0], *L = &s->launch[1];
    fill->sh.n = cuda_numel(ot);
    RILL_TRY(cuda_gen_fill(env, ot->dtype, plan->p.value, fill->sh.n, &fill->fn));
    cuda_row_strides(x, xs);
    cuda_row_strides(ot, os);
    L->sh.n = 1;
    for (int i = 0; i < x->rank; i++) {
      int64_t pb = plan->p.pads[i], pe = plan->p.pads[RILL_MAX_RANK + i];
      int64_t cb = pb < 0 ? -pb : 0, ce = pe < 0 ? -pe : 0;
      L->sh.dims[i] = x->dims[i] - cb - ce;
      L->sh.n *= L->sh.dims[i];
      L->sh.st[0][i] = xs[i];
      L->sh.st[1][i] = os[i];
      L->sh.base[0] += cb * xs[i];
      L->sh.base[1] += (pb > 0 ? pb : 0) * os[i];
    }
    return cuda_gen_copy(env, x->dtype, ot->dtype, x->rank ? x->rank : 1, cuda_numel(x) > cuda_numel(ot) ? cuda_numel(x) : cuda_numel(ot), &L->fn);
  }
  return rill__status(RILL_UNIMPLEMENTED, "%s: no CUDA implementation", d->name);
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
  cuda_nn_release(env, s->nn);
  rill__free(env->a, s->launch);
  rill__free(env->a, s);
}

rill_status_t cuda_launch(const ops_cuda_ctx_t *ctx, CUfunction fn, long long n, void **args) {
  if (n <= 0) return NULL;
  long long blocks = (n + 255) / 256, cap = (long long)ctx->num_sms * 16;
  if (blocks > cap) blocks = cap;
  return CU(ctx->api, cuLaunchKernel, fn, (unsigned)blocks, 1, 1, 256, 1, 1, 0, ctx->stream, args, NULL);
}

rill_status_t ops_cuda_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in,
                           void *const *out) {
  cuda_state_t *s = state;
  const isa_opdecl_t *d = plan->decl;
  switch (s->kind) {
    case K_NN: return cuda_nn_run(ctx, plan, s->nn, in, out);
    case K_EW: {
      klaunch_t *L = &s->launch[0];
      CUdeviceptr p[3] = {0, 0, 0}, y = (CUdeviceptr)out[0];
      for (uint32_t k = 0; k < d->nin; k++) p[k] = (CUdeviceptr)in[k];
      void *args[] = {&p[0], &p[1], &p[2], &y, &L->sh};
      if (L->vec > 1) {
        /* Vector accesses need every operand aligned to its vector's size. */
        bool aligned = (y % ((CUdeviceptr)L->vec * rill_dtype_size(d->out[0].dtype))) == 0;
        for (uint32_t k = 0; k < d->nin; k++) aligned &= (p[k] % ((CUdeviceptr)L->vec * rill_dtype_size(d->in[k].dtype))) == 0;
        if (aligned) return cuda_launch(ctx, L->fnv, (L->sh.n + L->vec - 1) / L->vec, args);
      }
      return cuda_launch(ctx, L->fn, L->sh.n, args);
    }
    case K_D2D:
      if (!s->bytes || in[0] == out[0]) return NULL;
      return CU(ctx->api, cuMemcpyDtoDAsync, (CUdeviceptr)out[0], (CUdeviceptr)in[0], s->bytes, ctx->stream);
    case K_GATHER: {
      klaunch_t *L = &s->launch[0];
      CUdeviceptr x = (CUdeviceptr)in[0], ix = (CUdeviceptr)in[1], y = (CUdeviceptr)out[0], err = ctx->error_word;
      void *args[] = {&x, &ix, &y, &err, &L->sh};
      return cuda_launch(ctx, L->fn, L->sh.n, args);
    }
    case K_PAD: {
      CUdeviceptr x = (CUdeviceptr)in[0], y = (CUdeviceptr)out[0], none = 0;
      void *fargs[] = {&none, &y, &s->launch[0].sh};
      RILL_TRY(cuda_launch(ctx, s->launch[0].fn, s->launch[0].sh.n, fargs));
      void *args[] = {&x, &y, &s->launch[1].sh};
      return cuda_launch(ctx, s->launch[1].fn, s->launch[1].sh.n, args);
    }
    default:
      for (uint32_t k = 0; k < s->nlaunch; k++) {
        klaunch_t *L = &s->launch[k];
        CUdeviceptr x = (CUdeviceptr)in[L->in], y = (CUdeviceptr)out[L->out];
        void *args[] = {&x, &y, &L->sh};
        RILL_TRY(cuda_launch(ctx, L->fn, L->sh.n, args));
      }
      return NULL;
  }
}

size_t ops_cuda_workspace(const void *state) {
  const cuda_state_t *s = state;
  return s->kind == K_NN ? cuda_nn_workspace(s->nn) : 0;
}

bool ops_cuda_uses_cudnn(const void *state) { return ((const cuda_state_t *)state)->cudnn; }
