/* rows.c: which ops keep the rows of a shape variable apart.
 *
 * Graph mode may run a call at a larger size of a shape variable (a
 * bucket) and keep the first rows of each result: that is exact where every
 * result row depends only on the same row of the inputs. ops_rows answers
 * that for one op: an op that mixes rows along the variable's axis (a
 * reduction or softmax over it, a product contracting it, a convolution or
 * pool over it, a concat, slice, pad or gather along it) or moves them
 * (a reshape that regroups them) does not keep them apart, and neither
 * does a gather whose index has them (a padded row's index may be out of
 * range). An op not named here is taken not to. The caller checks that each
 * result's size there is the variable itself (a slice or pad that changes
 * it fails that first).
 */
#include "ops.h"

/* Index i with perm[i] == s (a stored axis's place in the permuted order), or -1. */
static int perm_place(const int64_t *perm, int rank, int s) {
  for (int i = 0; i < rank; i++)
    if (perm[i] == s) return i;
  return -1;
}

/* matmul: the result axis the rows of operand k (stored axis s) land on, or -1 where they are contracted. */
static int matmul_axis(const ops_params_t *p, const isa_opdecl_t *d, int k, int s) {
  int ra = d->in[0].rank, rb = d->in[1].rank, ro = d->out[0].rank, r = k ? rb : ra;
  int L = perm_place(p->mm_perm[k], r, s), bo = ro - (ra >= 2) - (rb >= 2), lo;
  if (L < 0 || r == 1) return -1;
  if (k == 0) {
    if (L == ra - 1) return -1;                       /* K */
    lo = L == ra - 2 ? bo : L + bo - (ra - 2);        /* M, or a batch axis */
  } else {
    if (L == rb - 2) return -1;                       /* K */
    lo = L == rb - 1 ? ro - 1 : L + bo - (rb - 2);
  }
  return perm_place(p->mm_perm[2], ro, lo);
}

/* The product of dims [0, n) when each is a number, else -1. */
static int64_t prefix(const rill_type_t *t, int n) {
  int64_t x = 1;
  for (int i = 0; i < n; i++) {
    if (isa_dim_is_sym(t->dims[i])) return -1;
    x *= t->dims[i];
  }
  return x;
}

/* Where input i's rows (axis a) land in result j, or -2 where the op mixes them. */
static int land(const ops_def_t *def, const ops_params_t *p, const isa_opdecl_t *d, uint32_t i, int a, uint32_t j) {
  const char *n = def->name;
  int ri = d->in[i].rank, ro = d->out[j].rank;
  if (ops_is_elementwise(def) || !strcmp(n, "fused") || !strcmp(n, "broadcast_to")) return a + ro - ri;
  if (def->cpu == ops_cpu_reduce) {
    if (p->axis_mask & (1u << a)) return -2;
    int below = 0;
    for (int k = 0; k < a; k++) below += (p->axis_mask >> k) & 1;
    return p->keepdims ? a : a - below;
  }
  if (!strcmp(n, "argmax")) return p->axis < 0 || p->axis == a ? -2 : p->keepdims || a < p->axis ? a : a - 1;
  if (def->cpu == ops_cpu_softmax) return p->axis == a + ro - ri ? -2 : a + ro - ri; /* (a mask aligns from the right) */
  if (!strcmp(n, "layer_norm") || !strcmp(n, "rms_norm")) return (i == 0 || i == 3) && a < p->axis ? a : -2;
  /* rotary: x's batch, sequence and head axes; the positions' ([S] or [B,S]) land on x's */
  if (!strcmp(n, "rotary")) return i == 0 ? (a < 3 ? a : -2) : d->in[1].rank == 2 ? a : a + 1;
  /* attention and sample: the batch axis alone (a padded row's length is 0 or an earlier call's, both in range) */
  if (!strcmp(n, "attention") || !strcmp(n, "sample")) return a == 0 ? 0 : -2;
  if (!strcmp(n, "batch_norm")) return i == 0 && a != 1 ? a : -2;
  if (!strcmp(n, "linear")) return (i == 0 || i == 3) && a < ri - 1 ? a : -2; /* x's rows, and the residual z's (y's) */
  if (!strcmp(n, "matmul")) {
    int o = matmul_axis(p, d, (int)i, a);
    return o < 0 ? -2 : o;
  }
  /* qmatmul: a's batch axes and rows, b's batch axes and columns, and the
   * per-row and per-column operands with them; qconv2d: the batch axis */
  if (def->cpu == ops_cpu_qmatmul) {
    if (i == 0) return a == ri - 1 ? -2 : a + ro - ri;
    if (i == 1) return a == ri - 2 ? -2 : a + ro - ri;
    if (i == 2) return ro - 2;
    if (i == 3 || (int)i == p->q.bias) return ro - 1;
    if ((int)i == p->q.scale) return a + ro - ri;
    return -2;
  }
  if (def->cpu == ops_cpu_qconv2d) return i == 0 && a == 0 ? 0 : -2;
  /* convolutions and pools: the batch axis alone (NCHW and NHWC alike) */
  if (!strcmp(n, "conv2d") || def->cpu == ops_cpu_pool2d || def->cpu == ops_cpu_adaptive_pool) return (i == 0 || i == 3) && a == 0 ? 0 : -2;
  if (!strcmp(n, "transpose")) return perm_place(p->perm, ro, a);
  if (def->cpu == ops_cpu_copy) {
    /* reshape, flatten, squeeze, unsqueeze: the rows stay whole where the
     * dims before them hold as many elements on both sides (numbers) */
    int64_t pin = prefix(&d->in[0], a);
    for (int c = 0; pin >= 0 && c < ro; c++)
      if (d->out[0].dims[c] == d->in[0].dims[a] && prefix(&d->out[0], c) == pin) return c;
    return -2;
  }
  if (!strcmp(n, "concat") || !strcmp(n, "split")) return p->axis == a ? -2 : a;
  if (!strcmp(n, "slice")) return p->starts[a] == 0 && p->steps[a] == 1 ? a : -2;
  if (!strcmp(n, "pad")) return p->pads[a] == 0 && p->pads[RILL_MAX_RANK + a] == 0 ? a : -2;
  /* An index with the rows is refused: a padded row's index (zero, or an
   * earlier call's) may be out of range, which fails the run. */
  if (!strcmp(n, "gather")) return i == 0 && a != p->axis ? a : -2;
  return -2;
}

bool ops_rows(const ops_def_t *def, const ops_params_t *p, const isa_opdecl_t *d, const int *in_axis, const int *out_axis) {
  for (uint32_t i = 0; i < d->nin; i++) {
    if (in_axis[i] < 0) continue;
    for (uint32_t j = 0; j < d->nout; j++) {
      int o = land(def, p, d, i, in_axis[i], j);
      if (o < 0 || o != out_axis[j]) return false;
    }
  }
  return true;
}
