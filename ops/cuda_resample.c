/* cuda_resample.c: the resampling ops on the CUDA device.
 *
 *   resize   kernels/cuda/resize.cu, a thread per output element, after
 *            kernels/cuda/resize_common.h: the taps and weights the CPU
 *            reference computes, in double, so both devices agree to the
 *            last rounding of the sum.
 *   grid_sample, roi_align
 *            kernels/cuda/grid_sample.cu and roi_align.cu, a thread per
 *            output element, after kernels/cuda/grid_common.h (the taps,
 *            samples and weights of the CPU references), in double.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../kernels/cuda/grid_common.h"
#include "../kernels/cuda/resize_common.h"
#include "cuda_gen.h"

typedef struct rs_state {
  CUfunction fn;
  kshape_t sh;
} rs_state_t;

bool cuda_resample_supports(const ops_plan_t *plan) {
  ops_cpu_fn f = plan->def->cpu;
  return f == ops_cpu_resize || f == ops_cpu_grid_sample || f == ops_cpu_roi_align;
}

/* grid_sample's and roi_align's sources */
static rill_status_t sampler_source(const ops_plan_t *plan, rill_buf_t *b, const char **out_name) {
  const rill_type_t *x = &plan->decl->in[0], *s = &plan->decl->in[1], *y = &plan->decl->out[0];
  const ops_params_t *p = &plan->p;
  bool roi = plan->def->cpu == ops_cpu_roi_align;
  char lit[64];
  rill_status_t st = ksrc_def(b, "T", "%s", ksrc_ctype(x->dtype));
  if (!st) st = ksrc_io(b, "LD", "ST", x->dtype, x->dtype, "double");
  if (!st) st = ksrc_def(b, roi ? "TR" : "TG", "%s", ksrc_ctype(s->dtype));
  if (!st) st = ksrc_io(b, roi ? "LDR" : "LDG", roi ? "STR_UNUSED" : "STG_UNUSED", s->dtype, s->dtype, "double");
  if (!st) st = ksrc_def(b, "C_", "%lldLL", (long long)x->dims[1]);
  if (!st) st = ksrc_def(b, "IH", "%lldLL", (long long)x->dims[2]);
  if (!st) st = ksrc_def(b, "IW", "%lldLL", (long long)x->dims[3]);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(cuda_numel(y) > cuda_numel(x) ? cuda_numel(y) : cuda_numel(x)));
  if (roi) {
    if (!st) st = ksrc_def(b, "TB", "%s", ksrc_ctype(plan->decl->in[2].dtype));
    if (!st) st = ksrc_def(b, "NB", "%lldLL", (long long)x->dims[0]);
    if (!st) st = ksrc_def(b, "OH", "%lldLL", (long long)p->gs.oh);
    if (!st) st = ksrc_def(b, "OW", "%lldLL", (long long)p->gs.ow);
    if (!st) st = ksrc_def(b, "MAXMODE", "%d", p->gs.max);
    if (!st) st = ksrc_def(b, "SAMPLING", "%lldLL", (long long)p->gs.sampling);
    if (!st) ksrc_lit(lit, sizeof lit, p->gs.scale, "double"), st = ksrc_def(b, "SCALE", "%s", lit);
    if (!st) st = ksrc_def(b, "HALF_PIXEL", "%d", p->gs.half_pixel);
  } else {
    if (!st) st = ksrc_def(b, "HO", "%lldLL", (long long)y->dims[2]);
    if (!st) st = ksrc_def(b, "WO", "%lldLL", (long long)y->dims[3]);
    if (!st) st = ksrc_def(b, "MODE", "%d", p->gs.mode);
    if (!st) st = ksrc_def(b, "PAD", "%d", p->gs.pad);
    if (!st) st = ksrc_def(b, "ALIGN", "%d", p->gs.align);
  }
  if (!st) st = rill__buf_printf(b, "%s\n%s\n%s", rill_kernel_prelude, rill_kernel_grid_common, roi ? rill_kernel_roi_align : rill_kernel_grid_sample);
  *out_name = roi ? "roi_align_k" : "grid_sample_k";
  return st;
}

/* "{v0, v1, ...}": n doubles, exact. */
static rill_status_t doubles_def(rill_buf_t *b, const char *name, const double *v, int n) {
  char text[RILL_MAX_RANK * 32 + 4];
  size_t o = 0;
  text[o++] = '{';
  for (int i = 0; i < n; i++) {
    char lit[40];
    ksrc_lit(lit, sizeof lit, v[i], "double");
    o += (size_t)snprintf(text + o, sizeof text - o, "%s%s", i ? ", " : "", lit);
  }
  snprintf(text + o, sizeof text - o, "}");
  return ksrc_def(b, name, "%s", text);
}

/* An integer dtype's range as doubles (i64's top: the largest double below 2^63). */
static void int_range(rill_dtype_t d, double *lo, double *hi) {
  switch (d) {
    case RILL_I8: *lo = -128, *hi = 127; break;
    case RILL_U8: *lo = 0, *hi = 255; break;
    case RILL_I32: *lo = -2147483648.0, *hi = 2147483647.0; break;
    case RILL_I16: *lo = -32768, *hi = 32767; break;
    case RILL_U16: *lo = 0, *hi = 65535; break;
    case RILL_U32: *lo = 0, *hi = 4294967295.0; break;
    case RILL_U64: *lo = 0, *hi = 1.8446744073709550e19; break; /* the largest double below 2^64 */
    default: *lo = -9.2233720368547758e18, *hi = 9.2233720368547748e18; break;
  }
}

rill_status_t cuda_resample_source(const ops_plan_t *plan, rill_buf_t *b, const char **out_name) {
  if (plan->def->cpu != ops_cpu_resize) return sampler_source(plan, b, out_name);
  const rill_type_t *x = &plan->decl->in[0], *y = &plan->decl->out[0];
  const ops_params_t *p = &plan->p;
  rill_dtype_t d = x->dtype;
  bool is_int = !(d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64);
  double lo = 0, hi = 1, ext = p->rs.extrap;
  if (is_int && d != RILL_BOOL) int_range(d, &lo, &hi), ext = rs_int(trunc(ext), lo, hi);
  if (d == RILL_BOOL) ext = ext != 0;
  char lit[64];
  rill_status_t st = ksrc_def(b, "T", "%s", ksrc_ctype(d));
  if (!st) st = ksrc_def(b, "C", "double");
  if (!st) st = ksrc_io(b, "LD", "ST", d, d, "double");
  if (!st) st = ksrc_def(b, "R", "%d", x->rank);
  if (!st) st = ksrc_def(b, "MODE", "%d", p->rs.mode);
  if (!st) st = ksrc_def(b, "COORD", "%d", p->rs.coord);
  if (!st) st = ksrc_def(b, "NEAREST", "%d", p->rs.nearest);
  if (!st) ksrc_lit(lit, sizeof lit, p->rs.cubic_a, "double"), st = ksrc_def(b, "CUBIC_A", "%s", lit);
  if (!st) st = ksrc_def(b, "EXCLUDE", "%d", p->rs.exclude);
  if (!st) ksrc_lit(lit, sizeof lit, ext, "double"), st = ksrc_def(b, "EXTRAP", "%s", lit);
  if (!st) st = ksrc_def(b, "IS_INT", "%d", is_int);
  if (!st) ksrc_lit(lit, sizeof lit, lo, "double"), st = ksrc_def(b, "LO", "%s", lit);
  if (!st) ksrc_lit(lit, sizeof lit, hi, "double"), st = ksrc_def(b, "HI", "%s", lit);
  if (!st) st = ksrc_def(b, "PRM", "%d", p->rs.prm);
  if (!st) st = doubles_def(b, "SCALES", p->rs.scale, x->rank);
  if (!st) st = doubles_def(b, "ROI0", p->rs.roi, x->rank);
  if (!st) st = doubles_def(b, "ROI1", p->rs.roi + x->rank, x->rank);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(cuda_numel(y) > cuda_numel(x) ? cuda_numel(y) : cuda_numel(x)));
  if (!st) st = rill__buf_printf(b, "%s\n%s\n%s", rill_kernel_prelude, rill_kernel_resize_common, rill_kernel_resize);
  *out_name = "resize_k";
  return st;
}

rill_status_t cuda_gen_compile_n(const ops_cuda_env_t *env, const ops_plan_t *plan, cuda_source_fn source, const char *const *names,
                                 CUfunction *const *fns, int n) {
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  const char *name;
  rill_status_t st = source(plan, &b, &name);
  if (!st) st = rill__buf_append(&b, "", 1);
  for (int i = 0; !st && i < n; i++) st = kcache_get(env->cache, (const char *)b.data, names[i] ? names[i] : name, fns[i]);
  rill__buf_free(&b);
  return st;
}

rill_status_t cuda_gen_compile(const ops_cuda_env_t *env, const ops_plan_t *plan, cuda_source_fn source, CUfunction *fn) {
  const char *own = NULL;
  return cuda_gen_compile_n(env, plan, source, &own, &fn, 1);
}

rill_status_t cuda_resample_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out) {
  const rill_type_t *x = &plan->decl->in[0], *y = &plan->decl->out[0];
  rs_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  s->sh.n = cuda_numel(y);
  for (int a = 0; a < x->rank; a++) s->sh.dims[a] = y->dims[a], s->sh.st[0][a] = x->dims[a];
  cuda_row_strides(x, s->sh.st[1]);
  rill_status_t st = cuda_gen_compile(env, plan, cuda_resample_source, &s->fn);
  if (st) {
    rill__free(env->a, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_resample_release(const ops_cuda_env_t *env, void *state) { rill__free(env->a, state); }

rill_status_t cuda_resample_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  rs_state_t *s = state;
  CUdeviceptr x = (CUdeviceptr)in[0], y = (CUdeviceptr)out[0];
  long long total = s->sh.n;
  if (plan->def->cpu == ops_cpu_grid_sample) {
    CUdeviceptr g = (CUdeviceptr)in[1];
    void *args[] = {&x, &g, &y, &total};
    return cuda_launch(ctx, s->fn, total, args);
  }
  if (plan->def->cpu == ops_cpu_roi_align) {
    CUdeviceptr r = (CUdeviceptr)in[1], bi = (CUdeviceptr)in[2], err = ctx->error_word;
    void *args[] = {&x, &r, &bi, &y, &err, &total};
    return cuda_launch(ctx, s->fn, total, args);
  }
  CUdeviceptr prm = plan->p.rs.prm ? (CUdeviceptr)in[1] : 0; /* the scales and roi at run time, or none */
  void *args[] = {&x, &y, &s->sh, &prm};
  return cuda_launch(ctx, s->fn, s->sh.n, args);
}
