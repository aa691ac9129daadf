/* fusegen.c: the elementwise kernel generator (one op or a fused group).
 *
 * The op layer writes the arithmetic (`body`: operands' values in, results
 * out, from ops/elementwise.def); this file writes the kernels around it.
 * `k` walks the output's elements with a grid-stride loop; an operand that
 * broadcasts is read through per-dimension strides (index arithmetic: one
 * division per dimension), the others at the element's own index. When no
 * operand needs strides, `kv` also exists: each thread moves 16 bytes of
 * the widest operand per access (a vector of W elements for every operand,
 * W = 16 / the widest element), scalars are read once, an operand that
 * is one row repeated (kgen_fused_t.row) a vector of its row at a time,
 * and a scalar loop does the tail; the launcher takes it when every pointer is aligned to its
 * vector. Both kernels share one source (one compile, one cache entry).
 */
#include <stdio.h>

#include "ksrc.h"

/* The value of a `d` element `x`, in ksrc_comp(d). */
static rill_status_t load(rill_buf_t *b, rill_dtype_t d, const char *x) {
  if (d == RILL_F16) return rill__buf_printf(b, "ld_f16(%s)", x);
  if (d == RILL_BF16) return rill__buf_printf(b, "ld_bf16(%s)", x);
  return rill__buf_printf(b, "(%s)(%s)", ksrc_comp(d), x);
}

/* `y = v` converted to a `d` element. */
static rill_status_t store(rill_buf_t *b, rill_dtype_t d, const char *y, const char *v) {
  if (d == RILL_F16) return rill__buf_printf(b, "%s = st_f16((float)(%s));\n", y, v);
  if (d == RILL_BF16) return rill__buf_printf(b, "%s = st_bf16((float)(%s));\n", y, v);
  if (d == RILL_BOOL) return rill__buf_printf(b, "%s = (unsigned char)((%s) != 0);\n", y, v);
  return rill__buf_printf(b, "%s = (%s)(%s);\n", y, ksrc_ctype(d), v);
}

/* Declares i0.. read at index expressions `at[k]` of pointers `ptr[k]`,
 * the results r0.., calls step and stores the results at `yat` of `yptr`. */
static rill_status_t element(rill_buf_t *b, const kgen_fused_t *e, const char *const *ptr, const char *const *at,
                             const char *const *yptr, const char *yat, const char *ind) {
  for (uint32_t k = 0; k < e->nin; k++) {
    char x[160];
    snprintf(x, sizeof x, "%s[%s]", ptr[k], at[k]);
    RILL_TRY(rill__buf_printf(b, "%s%s i%u = ", ind, ksrc_comp(e->in[k]), k));
    RILL_TRY(load(b, e->in[k], x));
    RILL_TRY(rill__buf_printf(b, ";\n"));
  }
  for (uint32_t k = 0; k < e->nout; k++) RILL_TRY(rill__buf_printf(b, "%s%s r%u;\n", ind, ksrc_comp(e->out[k]), k));
  RILL_TRY(rill__buf_printf(b, "%sstep(", ind));
  for (uint32_t k = 0; k < e->nin; k++) RILL_TRY(rill__buf_printf(b, "%si%u", k ? ", " : "", k));
  for (uint32_t k = 0; k < e->nout; k++) RILL_TRY(rill__buf_printf(b, ", r%u", k));
  RILL_TRY(rill__buf_printf(b, ");\n"));
  for (uint32_t k = 0; k < e->nout; k++) {
    char y[160], v[16];
    snprintf(y, sizeof y, "%s%s[%s]", ind, yptr[k], yat);
    snprintf(v, sizeof v, "r%u", k);
    RILL_TRY(store(b, e->out[k], y, v));
  }
  return NULL;
}

int kgen_fused_width(const kgen_fused_t *e) {
  size_t widest = 0;
  for (uint32_t k = 0; k < e->nin; k++)
    if (!e->scalar[k] && rill_dtype_size(e->in[k]) > widest) widest = rill_dtype_size(e->in[k]);
  for (uint32_t k = 0; k < e->nout; k++)
    if (rill_dtype_size(e->out[k]) > widest) widest = rill_dtype_size(e->out[k]);
  return widest ? (int)(16 / widest) : 0;
}

rill_status_t kgen_fused_source(const kgen_fused_t *e, rill_buf_t *b, int *out_width) {
  const char *I = ksrc_idx(e->span);
  bool any_bcast = false, no_kv = false; /* (an operand read as a repeated row keeps kv) */
  for (uint32_t k = 0; k < e->nin; k++) {
    any_bcast |= e->bcast[k] && !e->scalar[k];
    no_kv |= e->bcast[k] && !e->scalar[k] && !e->row[k];
  }
  int W = no_kv ? 0 : kgen_fused_width(e);
  *out_width = W > 1 ? W : 0;
  RILL_TRY(rill__buf_printf(b, "%s\n#define L(x) ((C)(x))\n"
                               "struct Args { const void *in[%d]; void *out[%d]; long long n; long long dims[8]; long long st[%d][8]; };\n"
                               "template <typename T, int N> struct __align__(sizeof(T) * N) vec { T v[N]; };\n"
                               "__device__ __forceinline__ void step(",
                            rill_kernel_prelude, KGEN_MAX_IN, KGEN_MAX_OUT, KGEN_MAX_IN));
  for (uint32_t k = 0; k < e->nin; k++) RILL_TRY(rill__buf_printf(b, "%s%s i%u", k ? ", " : "", ksrc_comp(e->in[k]), k));
  for (uint32_t k = 0; k < e->nout; k++) RILL_TRY(rill__buf_printf(b, ", %s &r%u", ksrc_comp(e->out[k]), k));
  RILL_TRY(rill__buf_printf(b, ") {\n%s}\n", e->body));
  /* k: any layout */
  char ptr[KGEN_MAX_IN][64], at[KGEN_MAX_IN][16], yptr[KGEN_MAX_OUT][64];
  const char *pp[KGEN_MAX_IN], *ap[KGEN_MAX_IN], *yp[KGEN_MAX_OUT];
  for (uint32_t k = 0; k < e->nin; k++) {
    snprintf(ptr[k], sizeof ptr[k], "((const %s *)p.in[%u])", ksrc_ctype(e->in[k]), k);
    snprintf(at[k], sizeof at[k], e->scalar[k] ? "0" : e->bcast[k] ? "o%u" : "i", k);
    pp[k] = ptr[k];
    ap[k] = at[k];
  }
  for (uint32_t k = 0; k < e->nout; k++) {
    snprintf(yptr[k], sizeof yptr[k], "((%s *)p.out[%u])", ksrc_ctype(e->out[k]), k);
    yp[k] = yptr[k];
  }
  RILL_TRY(rill__buf_printf(b, "extern \"C\" __global__ void k(const Args p) {\n  const %s n = (%s)p.n;\n"
                               "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < n; i += (%s)gridDim.x * blockDim.x) {\n",
                            I, I, I, I, I));
  if (any_bcast) {
    RILL_TRY(rill__buf_printf(b, "    %s r = i", I));
    for (uint32_t k = 0; k < e->nin; k++)
      if (e->bcast[k] && !e->scalar[k]) RILL_TRY(rill__buf_printf(b, ", o%u = 0", k));
    RILL_TRY(rill__buf_printf(b, ";\n#pragma unroll\n    for (int dd = %d; dd >= 0; dd--) {\n      %s q = r %% (%s)p.dims[dd];\n      r /= (%s)p.dims[dd];\n",
                              (e->rank ? e->rank : 1) - 1, I, I, I));
    for (uint32_t k = 0; k < e->nin; k++)
      if (e->bcast[k] && !e->scalar[k]) RILL_TRY(rill__buf_printf(b, "      o%u += q * (%s)p.st[%u][dd];\n", k, I, k));
    RILL_TRY(rill__buf_printf(b, "    }\n"));
  }
  RILL_TRY(element(b, e, pp, ap, yp, "i", "    "));
  RILL_TRY(rill__buf_printf(b, "  }\n}\n"));
  if (W <= 1) return NULL;
  /* kv: vectors of W elements; scalars read once; a scalar tail */
  RILL_TRY(rill__buf_printf(b, "extern \"C\" __global__ void kv(const Args p) {\n  const %s n = (%s)p.n, nv = n / %d;\n", I, I, W));
  char vptr[KGEN_MAX_IN][64], vat[KGEN_MAX_IN][16], wptr[KGEN_MAX_OUT][64];
  for (uint32_t k = 0; k < e->nin; k++) {
    if (e->scalar[k]) {
      RILL_TRY(rill__buf_printf(b, "  const %s s%u = ((const %s *)p.in[%u])[0];\n", ksrc_ctype(e->in[k]), k, ksrc_ctype(e->in[k]), k));
      snprintf(vptr[k], sizeof vptr[k], "(&s%u)", k);
      snprintf(vat[k], sizeof vat[k], "0");
    } else {
      snprintf(vptr[k], sizeof vptr[k], "v%u.v", k);
      snprintf(vat[k], sizeof vat[k], "e");
      if (e->row[k]) RILL_TRY(rill__buf_printf(b, "  const %s rv%u = (%s)p.dims[1] / %d;\n", I, k, I, W));
    }
    pp[k] = vptr[k];
    ap[k] = vat[k];
  }
  for (uint32_t k = 0; k < e->nout; k++) {
    snprintf(wptr[k], sizeof wptr[k], "w%u.v", k);
    yp[k] = wptr[k];
  }
  RILL_TRY(rill__buf_printf(b, "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < nv; i += (%s)gridDim.x * blockDim.x) {\n", I, I, I));
  for (uint32_t k = 0; k < e->nin; k++) {
    if (e->scalar[k]) continue;
    char vi[32] = "i";
    if (e->row[k]) snprintf(vi, sizeof vi, "i %% rv%u", k); /* the row's vector: one division a vector */
    RILL_TRY(rill__buf_printf(b, "    const vec<%s, %d> v%u = ((const vec<%s, %d> *)p.in[%u])[%s];\n", ksrc_ctype(e->in[k]), W, k,
                              ksrc_ctype(e->in[k]), W, k, vi));
  }
  for (uint32_t k = 0; k < e->nout; k++) RILL_TRY(rill__buf_printf(b, "    vec<%s, %d> w%u;\n", ksrc_ctype(e->out[k]), W, k));
  RILL_TRY(rill__buf_printf(b, "#pragma unroll\n    for (int e = 0; e < %d; e++) {\n", W));
  RILL_TRY(element(b, e, pp, ap, yp, "e", "      "));
  RILL_TRY(rill__buf_printf(b, "    }\n"));
  for (uint32_t k = 0; k < e->nout; k++)
    RILL_TRY(rill__buf_printf(b, "    ((vec<%s, %d> *)p.out[%u])[i] = w%u;\n", ksrc_ctype(e->out[k]), W, k, k));
  RILL_TRY(rill__buf_printf(b, "  }\n  for (%s i = nv * %d + blockIdx.x * (%s)blockDim.x + threadIdx.x; i < n; i += (%s)gridDim.x * blockDim.x) {\n",
                            I, W, I, I));
  char tat[KGEN_MAX_IN][32];
  for (uint32_t k = 0; k < e->nin; k++) {
    pp[k] = ptr[k];
    snprintf(tat[k], sizeof tat[k], e->scalar[k] ? "0" : e->row[k] ? "i %% (%s)p.dims[1]" : "i", I);
    ap[k] = tat[k];
  }
  for (uint32_t k = 0; k < e->nout; k++) yp[k] = yptr[k];
  RILL_TRY(element(b, e, pp, ap, yp, "i", "    "));
  return rill__buf_printf(b, "  }\n}\n");
}

rill_status_t kgen_fused(kcache_t *cache, const rill_allocator_t *a, const kgen_fused_t *e, CUfunction *out_scalar,
                         CUfunction *out_vec, int *out_width) {
  rill_buf_t b;
  rill__buf_init(&b, a);
  rill_status_t st = kgen_fused_source(e, &b, out_width);
  if (!st) st = rill__buf_append(&b, "", 1);
  if (!st) st = kcache_get(cache, (const char *)b.data, "k", out_scalar);
  if (!st && *out_width > 1) st = kcache_get(cache, (const char *)b.data, "kv", out_vec);
  rill__buf_free(&b);
  return st;
}
