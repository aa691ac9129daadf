/* cpu_convt.c: the CPU reference of `conv_transpose` (docs/internals.md,
 * "Transposed convolution"): each output element gathers the input
 * elements and weights that reach it (CT_SUM of
 * kernels/cuda/convt_common.h, which the CUDA kernel shares), in double,
 * adds the bias and rounds once. */
#include "../kernels/cuda/convt_common.h"
#include "ops.h"

rill_status_t ops_cpu_conv_transpose(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0], *w = &d->in[1], *y = &d->out[0];
  const ops_params_t *p = &plan->p;
  rill_dtype_t dt = x->dtype;
  ct_geom_t g = {p->ct.nd, x->dims[1], y->dims[1], p->groups, {0}, {0}, {0}, {0}, {0}, {0}};
  long long osz = 1;
  for (int a = 0; a < g.nd; a++) {
    g.in[a] = x->dims[2 + a], g.k[a] = w->dims[2 + a], g.out[a] = y->dims[2 + a];
    g.s[a] = p->ct.s[a], g.pb[a] = p->ct.pb[a], g.d[a] = p->ct.d[a];
    osz *= g.out[a];
  }
  const void *xp = in[0], *wp = in[1];
#define X(e) rill__load_f(xp, dt, (size_t)(e))
#define W(e) rill__load_f(wp, dt, (size_t)(e))
  size_t e = 0;
  for (long long n = 0; n < y->dims[0]; n++)
    for (long long o = 0; o < g.O; o++)
      for (long long q = 0; q < osz; q++, e++) {
        long long pos[3], rem = q;
        for (int a = g.nd - 1; a >= 0; a--) pos[a] = rem % g.out[a], rem /= g.out[a];
        double v;
        CT_SUM(g, n, o, pos, X, W, v);
        if (p->has_bias) v += rill__load_f(in[2], dt, (size_t)o);
        rill__store_f(out[0], dt, e, v);
      }
#undef X
#undef W
  return NULL;
}
