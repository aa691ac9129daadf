/* ksrc.c: kernel sources (see ksrc.h). */
#include "ksrc.h"

#include <math.h>
#include <stdio.h>

const char *ksrc_ctype(rill_dtype_t d) {
  switch (d) {
    case RILL_F16: return "f16_t";
    case RILL_BF16: return "bf16_t";
    case RILL_F32: return "float";
    case RILL_F64: return "double";
    case RILL_I8: return "signed char";
    case RILL_U8: return "unsigned char";
    case RILL_I32: return "int";
    case RILL_I64: return "long long";
    case RILL_I16: return "short";
    case RILL_U16: return "unsigned short";
    case RILL_U32: return "unsigned int";
    case RILL_U64: return "unsigned long long";
    default: return "unsigned char";
  }
}

/* Integers compute in long long, where every one but u64 fits; u64 in
 * unsigned long long (its order, division and conversions). */
const char *ksrc_comp(rill_dtype_t d) {
  return d == RILL_F64 ? "double" : rill__is_float(d) ? "float" : d == RILL_U64 ? "unsigned long long" : "long long";
}

/* Headroom for grid-stride loops: a thread's index passes n by up to one
 * launch's threads (cuda_blocks: at most 16 blocks of 256 an SM) before the
 * loop ends, and must not wrap. */
const char *ksrc_idx(long long n) { return n + (1ll << 24) < (1ll << 31) ? "int" : "long long"; }

void ksrc_lit(char *buf, size_t n, double v, const char *c) {
  if (isnan(v)) snprintf(buf, n, "((%s)RILL_NAN)", c);
  else if (isinf(v)) snprintf(buf, n, "((%s)%sRILL_INF)", c, v < 0 ? "-" : "");
  else snprintf(buf, n, "((%s)%.17g)", c, v);
}

rill_status_t ksrc_def(rill_buf_t *b, const char *name, const char *fmt, ...) {
  char v[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v, sizeof v, fmt, ap);
  va_end(ap);
  return rill__buf_printf(b, "#define %s %s\n", name, v);
}

rill_status_t ksrc_io(rill_buf_t *b, const char *ld, const char *st, rill_dtype_t din, rill_dtype_t dout, const char *c) {
  if (din == RILL_F16) RILL_TRY(rill__buf_printf(b, "#define %s(v) ((%s)ld_f16(v))\n", ld, c));
  else if (din == RILL_BF16) RILL_TRY(rill__buf_printf(b, "#define %s(v) ((%s)ld_bf16(v))\n", ld, c));
  else RILL_TRY(rill__buf_printf(b, "#define %s(v) ((%s)(v))\n", ld, c));
  if (dout == RILL_F16) return rill__buf_printf(b, "#define %s(p, v) ((p) = st_f16((float)(v)))\n", st);
  if (dout == RILL_BF16) return rill__buf_printf(b, "#define %s(p, v) ((p) = st_bf16((float)(v)))\n", st);
  if (dout == RILL_BOOL) return rill__buf_printf(b, "#define %s(p, v) ((p) = ((v) != 0))\n", st);
  return rill__buf_printf(b, "#define %s(p, v) ((p) = (%s)(v))\n", st, ksrc_ctype(dout));
}

rill_status_t ksrc_build(kcache_t *cache, rill_buf_t *b, rill_status_t st, const char *kernel, const char *name, CUfunction *out) {
  return ksrc_build_with(cache, b, st, "", kernel, name, out);
}

rill_status_t ksrc_build_with(kcache_t *cache, rill_buf_t *b, rill_status_t st, const char *extra, const char *kernel, const char *name,
                              CUfunction *out) {
  if (!st) st = rill__buf_printf(b, "%s\n%s%s", rill_kernel_prelude, extra, kernel);
  if (!st) st = kcache_get(cache, (const char *)b->data, name, out);
  rill__buf_free(b);
  return st;
}
