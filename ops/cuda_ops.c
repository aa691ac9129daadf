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

const char cuda_prelude[] =
    "typedef unsigned short f16_t;\n"
    "typedef unsigned short bf16_t;\n"
    "__device__ __forceinline__ float ld_f16(f16_t h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
    "__device__ __forceinline__ f16_t st_f16(float f) { f16_t h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "__device__ __forceinline__ float ld_bf16(bf16_t h) { return __uint_as_float(((unsigned)h) << 16); }\n"
    "__device__ __forceinline__ bf16_t st_bf16(float f) { bf16_t h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "__device__ __forceinline__ long long ipow(long long a, long long b) {\n"
    "  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;\n"
    "  unsigned long long r = 1, x = (unsigned long long)a;\n"
    "  while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }\n"
    "  return (long long)r;\n"
    "}\n"
    "struct Shape { long long n; long long dims[8]; long long st[4][8]; long long base[4]; };\n";

const char *cuda_ctype(rill_dtype_t d) {
  switch (d) {
    case RILL_F16: return "f16_t";
    case RILL_BF16: return "bf16_t";
    case RILL_F32: return "float";
    case RILL_F64: return "double";
    case RILL_I8: return "signed char";
    case RILL_U8: return "unsigned char";
    case RILL_I32: return "int";
    case RILL_I64: return "long long";
    default: return "unsigned char";
  }
}

/* The compute type for a dtype domain. */
const char *cuda_comp(rill_dtype_t d) {
  return d == RILL_F64 ? "double" : rill__is_float(d) ? "float" : "long long";
}

/* An expression loading element `at` of operand `p` of dtype d as compute type c. */
void cuda_load(char *buf, size_t n, rill_dtype_t d, const char *c, const char *p, const char *at) {
  if (d == RILL_F16) snprintf(buf, n, "(%s)ld_f16(%s[%s])", c, p, at);
  else if (d == RILL_BF16) snprintf(buf, n, "(%s)ld_bf16(%s[%s])", c, p, at);
  else snprintf(buf, n, "(%s)%s[%s]", c, p, at);
}

/* A statement storing compute value `v` to y[at] of dtype d. */
void cuda_store(char *buf, size_t n, rill_dtype_t d, const char *y, const char *at, const char *v) {
  if (d == RILL_F16) snprintf(buf, n, "%s[%s] = st_f16((float)(%s));", y, at, v);
  else if (d == RILL_BF16) snprintf(buf, n, "%s[%s] = st_bf16((float)(%s));", y, at, v);
  else if (d == RILL_BOOL) snprintf(buf, n, "%s[%s] = (%s) != 0;", y, at, v);
  else snprintf(buf, n, "%s[%s] = (%s)(%s);", y, at, cuda_ctype(d), v);
}

void cuda_lit(char *buf, size_t n, double v, const char *c) {
  if (isnan(v)) snprintf(buf, n, "((%s)__int_as_float(0x7fc00000))", c);
  else if (isinf(v)) snprintf(buf, n, "((%s)%s__int_as_float(0x7f800000))", c, v < 0 ? "-" : "");
  else snprintf(buf, n, "((%s)%.17g)", c, v);
}

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
      case U_LEAKY_RELU: cuda_lit(al, sizeof al, p->alpha, C); snprintf(e, n, "(a >= (%s)0 ? a : a * %s)", C, al); break;
      case U_CLIP: {
        /* torch.clamp: NaN stays NaN; min applies first, so min > max gives max. */
        cuda_lit(lo, sizeof lo, fl ? p->lo : ceil(p->lo), C);
        cuda_lit(hi, sizeof hi, fl ? p->hi : floor(p->hi), C);
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

/* Index type: 32-bit arithmetic when every offset fits, which is much faster. */
const char *cuda_idx_type(long long n) { return n < (1ll << 31) ? "int" : "long long"; }

static rill_status_t gen_elementwise(const ops_cuda_env_t *env, const ops_plan_t *plan, klaunch_t *L) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *ot = &d->out[0];
  bool is_where = plan->def->cpu == ops_cpu_where;
  /* The domain the arithmetic happens in: the promoted dtype (cast: the input's). */
  rill_dtype_t dom = plan->p.compute;
  if (plan->def->cpu == ops_cpu_unary) dom = d->in[0].dtype;
  bool fl = rill__is_float(dom);
  const char *C = cuda_comp(dom);
  char e[1024];
  if (!expr(e, sizeof e, plan, C, fl)) return rill__status(RILL_UNIMPLEMENTED, "%s: no CUDA expression", d->name);
  memset(&L->sh, 0, sizeof L->sh);
  L->sh.n = cuda_numel(ot);
  bool contig = true;
  for (uint32_t k = 0; k < d->nin; k++) {
    ops_broadcast_strides(&d->in[k], ot, L->sh.st[k]);
    contig &= d->in[k].rank == ot->rank && memcmp(d->in[k].dims, ot->dims, sizeof(int64_t) * (size_t)ot->rank) == 0;
  }
  for (int i = 0; i < ot->rank; i++) L->sh.dims[i] = ot->dims[i];
  const char *I = cuda_idx_type(L->sh.n);
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = rill__buf_printf(&b, "%s\nextern \"C\" __global__ void k(const void *p0, const void *p1, const void *p2, void *py, Shape s) {\n", cuda_prelude);
  static const char *names[] = {"a", "b", "c"};
  for (uint32_t k = 0; !st && k < d->nin; k++) st = rill__buf_printf(&b, "  const %s *x%u = (const %s *)p%u;\n", cuda_ctype(d->in[k].dtype), k, cuda_ctype(d->in[k].dtype), k);
  if (!st) st = rill__buf_printf(&b, "  %s *y = (%s *)py;\n  %s n = (%s)s.n;\n  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < n; i += (%s)gridDim.x * blockDim.x) {\n",
                                  cuda_ctype(ot->dtype), cuda_ctype(ot->dtype), I, I, I, I, I);
  if (!st && contig) {
    for (uint32_t k = 0; !st && k < d->nin; k++) st = rill__buf_printf(&b, "    %s o%u = i;\n", I, k);
  } else if (!st) {
    st = rill__buf_printf(&b, "    %s r = i", I);
    for (uint32_t k = 0; !st && k < d->nin; k++) st = rill__buf_printf(&b, ", o%u = 0", k);
    if (!st) st = rill__buf_printf(&b, ";\n    #pragma unroll\n    for (int dd = %d; dd >= 0; dd--) {\n      %s q = r %% (%s)s.dims[dd];\n      r /= (%s)s.dims[dd];\n", ot->rank - 1, I, I, I);
    for (uint32_t k = 0; !st && k < d->nin; k++) st = rill__buf_printf(&b, "      o%u += q * (%s)s.st[%u][dd];\n", k, I, k);
    if (!st) st = rill__buf_printf(&b, "    }\n");
  }
  for (uint32_t k = 0; !st && k < d->nin; k++) {
    char ld[128], at[16], px[16];
    snprintf(at, sizeof at, "o%u", k);
    snprintf(px, sizeof px, "x%u", k);
    /* where's condition is a bool; its values are chosen in the output's domain. */
    cuda_load(ld, sizeof ld, d->in[k].dtype, is_where && k == 0 ? "long long" : C, px, at);
    st = rill__buf_printf(&b, "    %s %s = %s;\n", is_where && k == 0 ? "long long" : C, names[k], ld);
  }
  char sv[1200];
  cuda_store(sv, sizeof sv, ot->dtype, "y", "i", e);
  if (!st) st = rill__buf_printf(&b, "    %s\n  }\n}\n", sv);
  /* Contiguous operands: a second kernel moves 16 bytes per access for the
   * widest operand (vectors of `vec` elements), with a scalar tail. */
  size_t widest = rill_dtype_size(ot->dtype);
  for (uint32_t k = 0; k < d->nin; k++)
    if (rill_dtype_size(d->in[k].dtype) > widest) widest = rill_dtype_size(d->in[k].dtype);
  L->vec = contig ? (int)(16 / widest) : 0;
  if (!st && L->vec > 1) {
    st = rill__buf_printf(&b, "template <typename T, int N> struct __align__(sizeof(T) * N) vec { T v[N]; };\n"
                              "extern \"C\" __global__ void kv(const void *p0, const void *p1, const void *p2, void *py, Shape s) {\n"
                              "  %s n = (%s)s.n, nv = n / %d;\n", I, I, L->vec);
    for (uint32_t k = 0; !st && k < d->nin; k++)
      st = rill__buf_printf(&b, "  const vec<%s, %d> *x%u = (const vec<%s, %d> *)p%u;\n", cuda_ctype(d->in[k].dtype), L->vec, k,
                            cuda_ctype(d->in[k].dtype), L->vec, k);
    if (!st) st = rill__buf_printf(&b, "  vec<%s, %d> *y = (vec<%s, %d> *)py;\n"
                                       "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < nv; i += (%s)gridDim.x * blockDim.x) {\n",
                                   cuda_ctype(ot->dtype), L->vec, cuda_ctype(ot->dtype), L->vec, I, I, I);
    for (uint32_t k = 0; !st && k < d->nin; k++)
      st = rill__buf_printf(&b, "    vec<%s, %d> v%u = x%u[i];\n", cuda_ctype(d->in[k].dtype), L->vec, k, k);
    if (!st) st = rill__buf_printf(&b, "    vec<%s, %d> w;\n    #pragma unroll\n    for (int e = 0; e < %d; e++) {\n",
                                   cuda_ctype(ot->dtype), L->vec, L->vec);
    for (uint32_t k = 0; !st && k < d->nin; k++) {
      char ld[128], px[16];
      snprintf(px, sizeof px, "v%u.v", k);
      cuda_load(ld, sizeof ld, d->in[k].dtype, is_where && k == 0 ? "long long" : C, px, "e");
      st = rill__buf_printf(&b, "      %s %s = %s;\n", is_where && k == 0 ? "long long" : C, names[k], ld);
    }
    char wv[1200];
    cuda_store(wv, sizeof wv, ot->dtype, "w.v", "e", e);
    if (!st) st = rill__buf_printf(&b, "      %s\n    }\n    y[i] = w;\n  }\n", wv);
    /* the tail, element by element */
    if (!st) st = rill__buf_printf(&b, "  const %s *t0 = (const %s *)p0;\n", cuda_ctype(d->in[0].dtype), cuda_ctype(d->in[0].dtype));
    for (uint32_t k = 1; !st && k < d->nin; k++)
      st = rill__buf_printf(&b, "  const %s *t%u = (const %s *)p%u;\n", cuda_ctype(d->in[k].dtype), k, cuda_ctype(d->in[k].dtype), k);
    if (!st) st = rill__buf_printf(&b, "  %s *ty = (%s *)py;\n  for (%s i = nv * %d + blockIdx.x * (%s)blockDim.x + threadIdx.x; i < n; i += (%s)gridDim.x * blockDim.x) {\n",
                                   cuda_ctype(ot->dtype), cuda_ctype(ot->dtype), I, L->vec, I, I);
    for (uint32_t k = 0; !st && k < d->nin; k++) {
      char ld[128], px[16];
      snprintf(px, sizeof px, "t%u", k);
      cuda_load(ld, sizeof ld, d->in[k].dtype, is_where && k == 0 ? "long long" : C, px, "i");
      st = rill__buf_printf(&b, "    %s %s = %s;\n", is_where && k == 0 ? "long long" : C, names[k], ld);
    }
    char tv[1200];
    cuda_store(tv, sizeof tv, ot->dtype, "ty", "i", e);
    if (!st) st = rill__buf_printf(&b, "    %s\n  }\n}\n", tv);
  }
  if (!st) st = kcache_get(env->cache, (const char *)b.data, "k", &L->fn);
  if (!st && L->vec > 1) st = kcache_get(env->cache, (const char *)b.data, "kv", &L->fnv);
  rill__buf_free(&b);
  return st;
}

/* y[obase + view offsets] = convert(x[ibase + view offsets]) over a view. */
rill_status_t cuda_gen_copy(const ops_cuda_env_t *env, rill_dtype_t din, rill_dtype_t dout, int rank, long long span,
                              CUfunction *fn) {
  const char *I = cuda_idx_type(span), *C = rill__is_float(din) || rill__is_float(dout) ? (din == RILL_F64 || dout == RILL_F64 ? "double" : "float") : "long long";
  char ld[128], sv[256];
  if (din == dout) {
    snprintf(ld, sizeof ld, "x[io]");
    snprintf(sv, sizeof sv, "y[oo] = v;");
    C = cuda_ctype(din);
  } else {
    cuda_load(ld, sizeof ld, din, C, "x", "io");
    cuda_store(sv, sizeof sv, dout, "y", "oo", "v");
  }
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = rill__buf_printf(&b,
      "%s\nextern \"C\" __global__ void k(const void *px, void *py, Shape s) {\n"
      "  const %s *x = (const %s *)px;\n  %s *y = (%s *)py;\n  %s n = (%s)s.n;\n"
      "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < n; i += (%s)gridDim.x * blockDim.x) {\n"
      "    %s r = i, io = (%s)s.base[0], oo = (%s)s.base[1];\n"
      "    #pragma unroll\n    for (int dd = %d; dd >= 0; dd--) {\n"
      "      %s q = r %% (%s)s.dims[dd];\n      r /= (%s)s.dims[dd];\n"
      "      io += q * (%s)s.st[0][dd];\n      oo += q * (%s)s.st[1][dd];\n    }\n"
      "    %s v = %s;\n    %s\n  }\n}\n",
      cuda_prelude, cuda_ctype(din), cuda_ctype(din), cuda_ctype(dout), cuda_ctype(dout), I, I, I, I, I, I, I, I, rank - 1, I, I, I, I, I, C, ld, sv);
  if (!st) st = kcache_get(env->cache, (const char *)b.data, "k", fn);
  rill__buf_free(&b);
  return st;
}

rill_status_t cuda_gen_fill(const ops_cuda_env_t *env, rill_dtype_t d, double value, long long n, CUfunction *fn) {
  char v[64], sv[256];
  cuda_lit(v, sizeof v, value, d == RILL_F64 ? "double" : rill__is_float(d) ? "float" : "long long");
  cuda_store(sv, sizeof sv, d, "y", "i", v);
  const char *I = cuda_idx_type(n);
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  rill_status_t st = rill__buf_printf(&b,
      "%s\nextern \"C\" __global__ void k(const void *px, void *py, Shape s) {\n  %s *y = (%s *)py;\n"
      "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < (%s)s.n; i += (%s)gridDim.x * blockDim.x) { %s }\n}\n",
      cuda_prelude, cuda_ctype(d), cuda_ctype(d), I, I, I, I, sv);
  if (!st) st = kcache_get(env->cache, (const char *)b.data, "k", fn);
  rill__buf_free(&b);
  return st;
}

static rill_status_t gen_gather(const ops_cuda_env_t *env, rill_dtype_t d, rill_dtype_t di, long long n, CUfunction *fn) {
  const char *I = cuda_idx_type(n);
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  /* dims[0] = outer, dims[1] = indices, dims[2] = inner, dims[3] = the gathered axis' size */
  rill_status_t st = rill__buf_printf(&b,
      "%s\nextern \"C\" __global__ void k(const void *px, const void *pi, void *py, int *err, Shape s) {\n"
      "  const %s *x = (const %s *)px;\n  const %s *ix = (const %s *)pi;\n  %s *y = (%s *)py;\n"
      "  %s m = (%s)s.dims[1], inner = (%s)s.dims[2], dim = (%s)s.dims[3];\n"
      "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < (%s)s.n; i += (%s)gridDim.x * blockDim.x) {\n"
      "    %s in = i %% inner, j = (i / inner) %% m, o = i / inner / m;\n"
      "    long long k = (long long)ix[j];\n"
      "    if (k < 0 || k >= dim) { atomicMax(err, %d); y[i] = 0; continue; }\n"
      "    y[i] = x[(o * dim + (%s)k) * inner + in];\n  }\n}\n",
      cuda_prelude, cuda_ctype(d), cuda_ctype(d), cuda_ctype(di), cuda_ctype(di), cuda_ctype(d), cuda_ctype(d), I, I, I, I, I, I, I, I, I, RILL_KERR_INDEX, I);
  if (!st) st = kcache_get(env->cache, (const char *)b.data, "k", fn);
  rill__buf_free(&b);
  return st;
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
