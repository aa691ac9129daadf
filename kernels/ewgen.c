/* ewgen.c: the elementwise kernel generator.
 *
 * One kernel per (expression, dtypes, layout): operands are widened to the
 * compute type, the op's expression applied, the result narrowed. Any
 * layout goes through index math over per-operand strides (0 on broadcast
 * dimensions, passed in Shape.st); when every operand has the output's shape
 * a second kernel moves 16 bytes per access for the widest operand, with a
 * scalar tail. Both live in one source, so one compile serves both.
 */
#include <stdio.h>

#include "ksrc.h"

/* `(c)x[at]` widened from dtype d. */
static void load(char *buf, size_t n, rill_dtype_t d, const char *c, const char *p, const char *at) {
  if (d == RILL_F16) snprintf(buf, n, "(%s)ld_f16(%s[%s])", c, p, at);
  else if (d == RILL_BF16) snprintf(buf, n, "(%s)ld_bf16(%s[%s])", c, p, at);
  else snprintf(buf, n, "(%s)%s[%s]", c, p, at);
}

/* `y[at] = narrowed(v);` for dtype d. */
static void store(char *buf, size_t n, rill_dtype_t d, const char *y, const char *at, const char *v) {
  if (d == RILL_F16) snprintf(buf, n, "%s[%s] = st_f16((float)(%s));", y, at, v);
  else if (d == RILL_BF16) snprintf(buf, n, "%s[%s] = st_bf16((float)(%s));", y, at, v);
  else if (d == RILL_BOOL) snprintf(buf, n, "%s[%s] = (%s) != 0;", y, at, v);
  else snprintf(buf, n, "%s[%s] = (%s)(%s);", y, at, ksrc_ctype(d), v);
}

static const char *NAMES[] = {"a", "b", "c"};

static const char *type_of(const kgen_ew_t *e, uint32_t k) { return e->cond_first && k == 0 ? "long long" : e->comp; }

/* The operands read at index `at` from pointers named `prefix0..`. */
static rill_status_t reads(rill_buf_t *b, const kgen_ew_t *e, const char *prefix, const char *at, const char *indent) {
  for (uint32_t k = 0; k < e->nin; k++) {
    char ld[160], px[16];
    snprintf(px, sizeof px, "%s%u", prefix, k);
    load(ld, sizeof ld, e->in[k], type_of(e, k), px, at);
    RILL_TRY(rill__buf_printf(b, "%s%s %s = %s;\n", indent, type_of(e, k), NAMES[k], ld));
  }
  return NULL;
}

rill_status_t kgen_elementwise(kcache_t *cache, const rill_allocator_t *a, const kgen_ew_t *e, CUfunction *out_scalar,
                               CUfunction *out_vec, int *out_width) {
  const char *I = ksrc_idx(e->n), *TY = ksrc_ctype(e->out);
  rill_buf_t b;
  rill__buf_init(&b, a);
  rill_status_t st = rill__buf_printf(&b, "%s\nextern \"C\" __global__ void k(const void *p0, const void *p1, const void *p2, void *py, Shape s) {\n",
                                      rill_kernel_prelude);
  for (uint32_t k = 0; !st && k < e->nin; k++)
    st = rill__buf_printf(&b, "  const %s *x%u = (const %s *)p%u;\n", ksrc_ctype(e->in[k]), k, ksrc_ctype(e->in[k]), k);
  if (!st) st = rill__buf_printf(&b, "  %s *y = (%s *)py;\n  %s n = (%s)s.n;\n  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < n; i += (%s)gridDim.x * blockDim.x) {\n",
                                  TY, TY, I, I, I, I, I);
  if (!st && e->contig) {
    for (uint32_t k = 0; !st && k < e->nin; k++) st = rill__buf_printf(&b, "    %s o%u = i;\n", I, k);
  } else if (!st) {
    st = rill__buf_printf(&b, "    %s r = i", I);
    for (uint32_t k = 0; !st && k < e->nin; k++) st = rill__buf_printf(&b, ", o%u = 0", k);
    if (!st) st = rill__buf_printf(&b, ";\n#pragma unroll\n    for (int dd = %d; dd >= 0; dd--) {\n      %s q = r %% (%s)s.dims[dd];\n      r /= (%s)s.dims[dd];\n",
                                    e->rank - 1, I, I, I);
    for (uint32_t k = 0; !st && k < e->nin; k++) st = rill__buf_printf(&b, "      o%u += q * (%s)s.st[%u][dd];\n", k, I, k);
    if (!st) st = rill__buf_printf(&b, "    }\n");
  }
  for (uint32_t k = 0; !st && k < e->nin; k++) {
    char ld[160], px[16], at[16];
    snprintf(px, sizeof px, "x%u", k);
    snprintf(at, sizeof at, "o%u", k);
    load(ld, sizeof ld, e->in[k], type_of(e, k), px, at);
    st = rill__buf_printf(&b, "    %s %s = %s;\n", type_of(e, k), NAMES[k], ld);
  }
  char sv[1400];
  store(sv, sizeof sv, e->out, "y", "i", e->expr);
  if (!st) st = rill__buf_printf(&b, "    %s\n  }\n}\n", sv);
  size_t widest = rill_dtype_size(e->out);
  for (uint32_t k = 0; k < e->nin; k++)
    if (rill_dtype_size(e->in[k]) > widest) widest = rill_dtype_size(e->in[k]);
  int vec = e->contig ? (int)(16 / widest) : 0;
  if (!st && vec > 1) {
    st = rill__buf_printf(&b, "template <typename T, int N> struct __align__(sizeof(T) * N) vec { T v[N]; };\n"
                              "extern \"C\" __global__ void kv(const void *p0, const void *p1, const void *p2, void *py, Shape s) {\n"
                              "  %s n = (%s)s.n, nv = n / %d;\n", I, I, vec);
    for (uint32_t k = 0; !st && k < e->nin; k++)
      st = rill__buf_printf(&b, "  const vec<%s, %d> *x%u = (const vec<%s, %d> *)p%u;\n  const %s *t%u = (const %s *)p%u;\n",
                            ksrc_ctype(e->in[k]), vec, k, ksrc_ctype(e->in[k]), vec, k, ksrc_ctype(e->in[k]), k, ksrc_ctype(e->in[k]), k);
    if (!st) st = rill__buf_printf(&b, "  vec<%s, %d> *y = (vec<%s, %d> *)py;\n  %s *ty = (%s *)py;\n"
                                       "  for (%s i = blockIdx.x * (%s)blockDim.x + threadIdx.x; i < nv; i += (%s)gridDim.x * blockDim.x) {\n",
                                   TY, vec, TY, vec, TY, TY, I, I, I);
    for (uint32_t k = 0; !st && k < e->nin; k++) st = rill__buf_printf(&b, "    vec<%s, %d> v%u = x%u[i];\n", ksrc_ctype(e->in[k]), vec, k, k);
    if (!st) st = rill__buf_printf(&b, "    vec<%s, %d> w;\n#pragma unroll\n    for (int e = 0; e < %d; e++) {\n", TY, vec, vec);
    for (uint32_t k = 0; !st && k < e->nin; k++) {
      char ld[160], px[16];
      snprintf(px, sizeof px, "v%u.v", k);
      load(ld, sizeof ld, e->in[k], type_of(e, k), px, "e");
      st = rill__buf_printf(&b, "      %s %s = %s;\n", type_of(e, k), NAMES[k], ld);
    }
    char wv[1400], tv[1400];
    store(wv, sizeof wv, e->out, "w.v", "e", e->expr);
    store(tv, sizeof tv, e->out, "ty", "i", e->expr);
    if (!st) st = rill__buf_printf(&b, "      %s\n    }\n    y[i] = w;\n  }\n"
                                       "  for (%s i = nv * %d + blockIdx.x * (%s)blockDim.x + threadIdx.x; i < n; i += (%s)gridDim.x * blockDim.x) {\n",
                                   wv, I, vec, I, I);
    if (!st) st = reads(&b, e, "t", "i", "    ");
    if (!st) st = rill__buf_printf(&b, "    %s\n  }\n}\n", tv);
  }
  if (!st) st = kcache_get(cache, (const char *)b.data, "k", out_scalar);
  if (!st && vec > 1) st = kcache_get(cache, (const char *)b.data, "kv", out_vec);
  *out_width = vec > 1 ? vec : 0;
  rill__buf_free(&b);
  return st;
}
