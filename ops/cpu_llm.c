/* cpu_llm.c: CPU reference kernels of the decoder ops: rms_norm, rotary,
 * attention, sample, update and emit (docs/internals.md, "Decoder ops", has their exact
 * semantics). Norms, rotations and attention compute in double and round
 * once; the sampler computes in f32 with the arithmetic of
 * kernels/cuda/llm_common.h, in the order the CUDA kernel uses, so both
 * devices choose the same token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cuda/llm_common.h"
#include "ops.h"

/* Element i of an i32 or i64 tensor. */
static int64_t int_at(const void *p, rill_dtype_t d, size_t i) { return d == RILL_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i]; }

rill_status_t ops_cpu_rms_norm(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  rill_dtype_t dt = x->dtype;
  size_t inner = 1, outer = 1;
  for (int i = 0; i < x->rank; i++) {
    if (i < plan->p.axis) outer *= (size_t)x->dims[i];
    else inner *= (size_t)x->dims[i];
  }
  for (size_t o = 0; o < outer; o++) {
    size_t base = o * inner;
    double ss = 0;
    for (size_t j = 0; j < inner; j++) {
      double v = rill__load_f(in[0], dt, base + j);
      ss += v * v;
    }
    double r = 1.0 / sqrt(ss / (double)(inner ? inner : 1) + plan->p.eps);
    for (size_t j = 0; j < inner; j++) {
      /* x * r rounded to the dtype, then times the weight (as transformers' LlamaRMSNorm) */
      rill__store_f(out[0], dt, base + j, rill__load_f(in[0], dt, base + j) * r);
      if (d->nin > 1) rill__store_f(out[0], dt, base + j, rill__load_f(out[0], dt, base + j) * rill__load_f(in[1], dt, j));
    }
  }
  return NULL;
}

rill_status_t ops_cpu_rotary(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0], *pt = &d->in[1];
  const ops_params_t *p = &plan->p;
  rill_dtype_t dt = x->dtype;
  int64_t B = x->dims[0], S = x->dims[1], H = x->dims[2], D = x->dims[3], rd = p->llm.rotary_dim, half = rd / 2;
  double *inv = malloc((size_t)half * sizeof(double));
  if (!inv) return rill__status(RILL_OUT_OF_MEMORY, "rotary: out of host memory for the reference kernel");
  for (int64_t i = 0; i < half; i++)
    inv[i] = rl_rope_inv_freq((int)i, (int)rd, p->llm.theta, p->llm.scaling, p->llm.factor, p->llm.low_freq, p->llm.high_freq, p->llm.orig_max);
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < S; s++) {
      int64_t pos = pt->rank == 0 ? int_at(in[1], pt->dtype, 0) + s : int_at(in[1], pt->dtype, (size_t)(pt->rank == 1 ? s : b * S + s));
      for (int64_t h = 0; h < H; h++) {
        size_t base = (size_t)(((b * S + s) * H + h) * D);
        for (int64_t i = rd; i < D; i++) rill__store_f(out[0], dt, base + (size_t)i, rill__load_f(in[0], dt, base + (size_t)i));
        for (int64_t i = 0; i < half; i++) {
          /* the pair: (i, i + rd/2) for neox, (2i, 2i + 1) for gptj */
          size_t j0 = base + (size_t)(p->llm.style == OPS_ROPE_NEOX ? i : 2 * i), j1 = j0 + (size_t)(p->llm.style == OPS_ROPE_NEOX ? half : 1);
          double a = (double)pos * inv[i], c = cos(a), sn = sin(a);
          double x0 = rill__load_f(in[0], dt, j0), x1 = rill__load_f(in[0], dt, j1);
          rill__store_f(out[0], dt, j0, x0 * c - x1 * sn);
          rill__store_f(out[0], dt, j1, x1 * c + x0 * sn);
        }
      }
    }
  free(inv);
  return NULL;
}

void ops_attention_geom(const isa_opdecl_t *d, const ops_params_t *p, ops_attn_geom_t *g) {
  const rill_type_t *q = &d->in[0], *k = p->llm.packed ? q : &d->in[1];
  bool bshd = p->llm.bshd;
  int h = bshd ? 2 : 1, s = bshd ? 1 : 2;
  int64_t Ht = q->dims[h]; /* q's row: packed, every head of q, k and v */
  g->B = q->dims[0], g->Sq = q->dims[s], g->D = q->dims[3], g->Skv = k->dims[s];
  g->Hkv = p->llm.packed ? p->llm.packed : k->dims[h];
  g->Hq = p->llm.packed ? Ht - 2 * g->Hkv : Ht;
  g->koff = p->llm.packed ? g->Hq * g->D : 0;
  g->voff = p->llm.packed ? (g->Hq + g->Hkv) * g->D : 0;
  int64_t Hk = p->llm.packed ? Ht : g->Hkv;
  if (bshd) {
    g->qs[0] = g->Sq * Ht * g->D, g->qs[1] = g->D, g->qs[2] = Ht * g->D;
    g->ks[0] = g->Skv * Hk * g->D, g->ks[1] = g->D, g->ks[2] = Hk * g->D;
    g->ys[0] = g->Sq * g->Hq * g->D, g->ys[1] = g->D, g->ys[2] = g->Hq * g->D;
  } else {
    g->qs[0] = g->Hq * g->Sq * g->D, g->qs[1] = g->Sq * g->D, g->qs[2] = g->D;
    g->ks[0] = g->Hkv * g->Skv * g->D, g->ks[1] = g->Skv * g->D, g->ks[2] = g->D;
    memcpy(g->ys, g->qs, sizeof g->ys);
  }
}

rill_status_t ops_cpu_attention(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  rill_dtype_t dt = d->in[0].dtype;
  ops_attn_geom_t g;
  ops_attention_geom(d, &plan->p, &g);
  int64_t B = g.B, Hq = g.Hq, Sq = g.Sq, D = g.D, Hkv = g.Hkv, Skv = g.Skv, G = Hq / Hkv;
  double *sc = malloc((size_t)(Skv ? Skv : 1) * sizeof(double)), *acc = malloc((size_t)D * sizeof(double));
  if (!sc || !acc) {
    free(sc);
    free(acc);
    return rill__status(RILL_OUT_OF_MEMORY, "attention: out of host memory for the reference kernel");
  }
  rill_status_t st = NULL;
  const void *mask = plan->p.llm.has_mask ? in[d->nin - 1] : NULL;
  size_t es = rill_dtype_size(dt);
  const void *kp = plan->p.llm.packed ? (const char *)in[0] + (size_t)g.koff * es : in[1];
  const void *vp = plan->p.llm.packed ? (const char *)in[0] + (size_t)g.voff * es : in[2];
  for (int64_t b = 0; b < B && !st; b++) {
    int64_t L = Skv;
    if (plan->p.llm.has_len) {
      L = int_at(in[3], d->in[3].dtype, d->in[3].rank ? (size_t)b : 0);
      if (L < 0 || L > Skv) {
        st = rill__status(RILL_RUNTIME_ERROR, "attention: length %lld of sequence %lld is outside 0..%lld (the cache's size)", (long long)L,
                          (long long)b, (long long)Skv);
        break;
      }
    }
    for (int64_t h = 0; h < Hq; h++) {
      size_t kvbase = (size_t)(b * g.ks[0] + (h / G) * g.ks[1]);
      for (int64_t i = 0; i < Sq; i++) {
        size_t qbase = (size_t)(b * g.qs[0] + h * g.qs[1] + i * g.qs[2]);
        /* keys 0..n-1: the first L, and with causal those at or before i + L - Sq (the queries are the last Sq of L) */
        int64_t n = L;
        if (plan->p.llm.causal && i + L - Sq + 1 < n) n = i + L - Sq + 1;
        if (n < 0) n = 0;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; j++) {
          double s = 0;
          for (int64_t e = 0; e < D; e++)
            s += rill__load_f(in[0], dt, qbase + (size_t)e) * rill__load_f(kp, dt, kvbase + (size_t)(j * g.ks[2] + e));
          sc[j] = s * plan->p.scale;
          if (mask) {
            const int64_t *md = d->in[d->nin - 1].dims;
            int64_t mb = md[0] > 1 ? (plan->p.llm.windows ? b % plan->p.llm.windows : b) : 0;
            size_t mi = (size_t)((((mb) * md[1] + (md[1] > 1 ? h : 0)) * md[2] + (md[2] > 1 ? i : 0)) * md[3] + (md[3] > 1 ? j : 0));
            sc[j] += rill__load_f(mask, dt, mi);
          }
          if (sc[j] > m) m = sc[j];
        }
        for (int64_t e = 0; e < D; e++) acc[e] = 0;
        if (m == -INFINITY) n = 0; /* the mask took every key */
        for (int64_t j = 0; j < n; j++) {
          double w = exp(sc[j] - m);
          sum += w;
          for (int64_t e = 0; e < D; e++) acc[e] += w * rill__load_f(vp, dt, kvbase + (size_t)(j * g.ks[2] + e));
        }
        /* no key attended: zeros */
        size_t ybase = (size_t)(b * g.ys[0] + h * g.ys[1] + i * g.ys[2]);
        for (int64_t e = 0; e < D; e++) rill__store_f(out[0], dt, ybase + (size_t)e, n ? acc[e] / sum : 0.0);
      }
    }
  }
  free(sc);
  free(acc);
  return st;
}

/* The sampler (see docs/internals.md): the CUDA kernel (kernels/cuda/sample.cu)
 * gives each of its LLM_THREADS threads one chunk of a row and sums a chunk
 * in order, then the chunks' sums in order; this does the same sums. */
#define LLM_THREADS 256

typedef struct row_view {
  const float *x;   /* the row's logits in f32 */
  const float *w;   /* the weights kept so far (0 for tokens left out) */
  int64_t V, chunk; /* chunk: elements a thread */
} row_view_t;

/* The sum over the row, chunk by chunk, of w[i] where key(x[i]) >= tau. */
static float masked_mass(const row_view_t *r, unsigned tau) {
  float total = 0;
  for (int t = 0; t < LLM_THREADS; t++) {
    float part = 0;
    for (int64_t i = t * r->chunk; i < (t + 1) * r->chunk && i < r->V; i++)
      if (rl_key(r->x[i]) >= tau) part = rl_add(part, r->w[i]);
    total = rl_add(total, part);
  }
  return total;
}

/* The largest key tau with count(key >= tau) >= k (the k-th largest key). */
static unsigned kth_key(const float *x, int64_t V, int64_t k) {
  unsigned tau = 0;
  for (int bit = 31; bit >= 0; bit--) {
    unsigned cand = tau | (1u << bit);
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++) n += rl_key(x[i]) >= cand;
    if (n >= k) tau = cand;
  }
  return tau;
}

static int64_t sample_row(const ops_params_t *p, const float *x, float *w, int64_t V, unsigned long long counter, unsigned row) {
  /* greedy: the first of the largest (NaN below every number) */
  unsigned best = rl_key(x[0]);
  int64_t arg = 0;
  for (int64_t i = 1; i < V; i++)
    if (rl_key(x[i]) > best) best = rl_key(x[i]), arg = i;
  float m = x[arg];
  if (p->llm.temperature == 0 || !(m > -INFINITY && m < INFINITY)) return arg;
  /* top-k: the keys above the k-th largest, and of the keys equal to it the first in index order, k in all */
  unsigned tau = 0;
  int64_t cut = V;
  if (p->llm.top_k > 0 && p->llm.top_k < V) {
    tau = kth_key(x, V, p->llm.top_k);
    int64_t need = p->llm.top_k;
    for (int64_t i = 0; i < V; i++) need -= rl_key(x[i]) > tau;
    for (cut = 0; need > 0; cut++) need -= rl_key(x[cut]) == tau;
  }
  float T = (float)p->llm.temperature;
  for (int64_t i = 0; i < V; i++) {
    unsigned k = rl_key(x[i]);
    w[i] = (k > tau || (k == tau && i < cut)) && x[i] == x[i] ? rl_expf(rl_div(rl_sub(x[i], m), T)) : 0.0f;
  }
  row_view_t r = {x, w, V, (V + LLM_THREADS - 1) / LLM_THREADS};
  if (p->llm.top_p < 1) {
    float want = rl_mul((float)p->llm.top_p, masked_mass(&r, 0));
    tau = 0;
    for (int bit = 31; bit >= 0; bit--) {
      unsigned cand = tau | (1u << bit);
      if (masked_mass(&r, cand) >= want) tau = cand;
    }
    for (int64_t i = 0; i < V; i++)
      if (rl_key(x[i]) < tau) w[i] = 0;
  }
  float target = rl_mul(rl_uniform(p->llm.seed, counter, row), masked_mass(&r, 0));
  /* the chunk where the running sum passes the target (else the last with weight), then the token in it */
  float acc = 0, before = 0;
  int pick = -1, last = -1;
  for (int t = 0; t < LLM_THREADS && pick < 0; t++) {
    float part = 0;
    for (int64_t i = t * r.chunk; i < (t + 1) * r.chunk && i < V; i++) part = rl_add(part, w[i]);
    if (part > 0) last = t, before = acc;
    float next = rl_add(acc, part);
    if (part > 0 && next > target) pick = t;
    else acc = next;
  }
  if (pick < 0) pick = last, acc = before;
  int64_t tok = -1;
  for (int64_t i = pick * r.chunk; i < (pick + 1) * r.chunk && i < V; i++) {
    if (!(w[i] > 0)) continue;
    tok = i;
    acc = rl_add(acc, w[i]);
    if (acc > target) break;
  }
  return tok;
}

rill_status_t ops_cpu_sample(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  int64_t B = x->dims[0], V = x->dims[1];
  unsigned long long counter = d->nin > 1 ? (unsigned long long)int_at(in[1], d->in[1].dtype, 0) : 0;
  float *row = malloc((size_t)V * 2 * sizeof(float));
  if (!row) return rill__status(RILL_OUT_OF_MEMORY, "sample: out of host memory for the reference kernel");
  for (int64_t b = 0; b < B; b++) {
    for (int64_t i = 0; i < V; i++) row[i] = (float)rill__load_f(in[0], x->dtype, (size_t)(b * V + i));
    ((int64_t *)out[0])[b] = sample_row(&plan->p, row, row + V, V, counter, (unsigned)b);
  }
  free(row);
  return NULL;
}

void ops_update_geom(const ops_plan_t *plan, ops_update_geom_t *g) {
  const rill_type_t *st = &plan->decl->in[0], *x = &plan->decl->in[1];
  int64_t ax = plan->p.axis;
  g->rows = g->inner = g->per_b = 1;
  for (int i = 0; i < st->rank; i++) {
    if (i < ax) g->rows *= (size_t)st->dims[i];
    if (i > ax) g->inner *= (size_t)st->dims[i];
    if (i > 0 && i < ax) g->per_b *= (size_t)st->dims[i];
  }
  g->L = st->dims[ax];
  g->n = x->dims[ax];
  g->per_row = plan->decl->in[2].rank == 1;
}

/* out := in[0] with x (in[1]) at offset pos (in[2]) along the axis: every
 * offset is checked before anything is written. */
rill_status_t ops_cpu_update(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  ops_update_geom_t g;
  ops_update_geom(plan, &g);
  size_t es = rill_dtype_size(d->in[0].dtype);
  size_t nb = d->in[2].rank == 1 ? (size_t)d->in[2].dims[0] : 1;
  for (size_t b = 0; b < nb; b++) {
    int64_t off = int_at(in[2], d->in[2].dtype, b);
    if (off < 0 || off > g.L - g.n)
      return rill__status(RILL_RUNTIME_ERROR, "update: offset %lld%s with %lld along axis %lld is outside the state's 0..%lld",
                          (long long)off, g.per_row ? " (of a row)" : "", (long long)g.n, (long long)plan->p.axis, (long long)g.L);
  }
  if (out[0] != in[0]) memcpy(out[0], in[0], g.rows * (size_t)g.L * g.inner * es);
  size_t run = (size_t)g.n * g.inner * es;
  for (size_t r = 0; r < g.rows; r++) {
    int64_t off = int_at(in[2], d->in[2].dtype, g.per_row ? r / g.per_b : 0);
    memcpy((char *)out[0] + (r * (size_t)g.L + (size_t)off) * g.inner * es, (const char *)in[1] + r * run, run);
  }
  return NULL;
}

/* One record into the VM's channel: the values, then the head (release, so
 * a reader that sees the head sees the record); go := not cancelled. Runs
 * that emit take turns on a VM: one writer. Without a channel (folding) it
 * publishes nothing. */
rill_status_t ops_cpu_emit(const ops_plan_t *plan, void *const *in, void *const *out) {
  const ops_chan_t *ch = plan->chan;
  uint8_t *go = out[0];
  *go = 1;
  if (!ch) return NULL;
  ops_chan_hdr_t *h = ch->hdr;
  const rill_type_t *x = &plan->decl->in[0];
  size_t n = rill_type_numel(x);
  if (!__atomic_load_n(&h->muted, __ATOMIC_ACQUIRE)) {
    uint64_t at = __atomic_load_n(&h->head, __ATOMIC_RELAXED);
    int64_t *rec = ch->ring + (at % ch->cap) * (1 + (uint64_t)ch->width);
    rec[0] = (int64_t)n;
    for (size_t i = 0; i < n; i++) rec[1 + i] = int_at(in[0], x->dtype, i);
    __atomic_store_n(&h->head, at + 1, __ATOMIC_RELEASE);
  }
  *go = !__atomic_load_n(&h->cancel, __ATOMIC_ACQUIRE);
  return NULL;
}

void ops_flin_args(const ops_plan_t *plan, ops_flin_args_t *a) {
  int k = 2;
  a->bias = plan->p.has_bias ? k++ : -1;
  a->pro = plan->p.llm.flin_pro ? k++ : -1;
  a->res = plan->p.llm.flin_res ? k : -1;
}

/* fused_linear: the prologue into a scratch copy of x, rounded as the op it
 * stands for rounds (rms_norm: x * r, then times the weight; swiglu and
 * geglu: once), linear's reference over it, then the residual added to the
 * rounded product and rounded again (as an add after it): the same bits as
 * the ops unfused. */
rill_status_t ops_cpu_fused_linear(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  rill_dtype_t dt = x->dtype;
  ops_flin_args_t ar;
  ops_flin_args(plan, &ar);
  size_t n = rill_type_numel(x), K = (size_t)x->dims[x->rank - 1], rows = K ? n / K : 0;
  void *xs = NULL;
  if (ar.pro >= 0) {
    if (!(xs = malloc(n * rill_dtype_size(dt) + 1))) return rill__status(RILL_OUT_OF_MEMORY, "fused_linear: out of host memory for the reference kernel");
    if (plan->p.llm.flin_pro == OPS_FLIN_RMS) {
      for (size_t o = 0; o < rows; o++) {
        double ss = 0;
        for (size_t j = 0; j < K; j++) {
          double v = rill__load_f(in[0], dt, o * K + j);
          ss += v * v;
        }
        double r = 1.0 / sqrt(ss / (double)K + plan->p.eps);
        for (size_t j = 0; j < K; j++) {
          rill__store_f(xs, dt, o * K + j, rill__load_f(in[0], dt, o * K + j) * r);
          rill__store_f(xs, dt, o * K + j, rill__load_f(xs, dt, o * K + j) * rill__load_f(in[ar.pro], dt, j));
        }
      }
    } else {
      ops_ewnode_t nd;
      ops_params_t pp = {.code = plan->p.llm.flin_pro == OPS_FLIN_SWIGLU ? B_SWIGLU : B_GEGLU, .compute = dt, .gelu_tanh = plan->p.gelu_tanh};
      ops_ewnode_init(&nd, ops_find(plan->p.llm.flin_pro == OPS_FLIN_SWIGLU ? "swiglu" : "geglu"), &pp, dt, dt);
      const void *src[2] = {in[0], in[ar.pro]};
      rill_dtype_t sd[2] = {dt, dt};
      for (size_t i = 0; i < n; i++) ops_ew_step(&nd, src, sd, (size_t[2]){i, i}, xs, i);
    }
  }
  /* linear(x', w, b?) by its own reference (with an epilogue, into a scratch [rows, N]) */
  int epi = plan->p.llm.flin_epi;
  size_t N = (size_t)d->in[1].dims[0];
  void *ys = NULL;
  if (epi && !(ys = malloc(rows * N * rill_dtype_size(dt) + 1))) {
    free(xs);
    return rill__status(RILL_OUT_OF_MEMORY, "fused_linear: out of host memory for the reference kernel");
  }
  rill_type_t lt[4] = {*x, d->in[1], ar.bias >= 0 ? d->in[ar.bias] : d->in[1], *x};
  lt[3].dims[x->rank - 1] = (int64_t)N;
  isa_opdecl_t ld = *d;
  ld.name = "linear";
  ld.in = lt;
  ld.nin = ar.bias >= 0 ? 3 : 2;
  if (epi) ld.out = &lt[3];
  ld.attrs = NULL;
  ld.nattrs = 0;
  ops_plan_t lp = *plan;
  lp.decl = &ld;
  lp.def = ops_find("linear");
  lp.p.act = OPS_ACT_NONE;
  void *lin[3] = {xs ? xs : in[0], in[1], ar.bias >= 0 ? in[ar.bias] : NULL}, *lout[1] = {ys};
  rill_status_t st = ops_cpu_linear(&lp, lin, epi ? lout : out);
  free(xs);
  if (!st && epi) {
    /* the gated unit of the halves, by swiglu's or geglu's own step (as a split and the op would) */
    ops_ewnode_t nd;
    ops_params_t pp = {.code = epi == OPS_FLIN_SWIGLU ? B_SWIGLU : B_GEGLU, .compute = dt, .gelu_tanh = plan->p.gelu_tanh};
    ops_ewnode_init(&nd, ops_find(epi == OPS_FLIN_SWIGLU ? "swiglu" : "geglu"), &pp, dt, dt);
    const void *src[2] = {ys, ys};
    rill_dtype_t sd[2] = {dt, dt};
    size_t I = N / 2;
    for (size_t o = 0; o < rows; o++)
      for (size_t j = 0; j < I; j++) {
        size_t a = o * N + j, b = o * N + I + j;
        ops_ew_step(&nd, src, sd, plan->p.llm.flin_gate2 ? (size_t[2]){b, a} : (size_t[2]){a, b}, out[0], o * I + j);
      }
  }
  free(ys);
  if (st || ar.res < 0) return st;
  const rill_type_t *ot = &d->out[0];
  for (size_t i = 0, m = rill_type_numel(ot); i < m; i++)
    rill__store_f(out[0], dt, i, rill__load_f(out[0], dt, i) + rill__load_f(in[ar.res], dt, i));
  return NULL;
}

/* rotary_update: the updates first (each checks its offsets before it
 * writes), by update's reference over k rotated and v, both transposed to
 * the caches' [B,H,S,D]; then q rotated. The same bits as the ops. */
rill_status_t ops_cpu_rotary_update(const ops_plan_t *plan, void *const *in, void *const *out) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *q = &d->in[2], *k = &d->in[3];
  size_t n = rill_type_numel(k), es = rill_dtype_size(k->dtype);
  void *kr = malloc(n * es + 1), *kt = malloc(n * es + 1);
  if (!kr || !kt) {
    free(kr);
    free(kt);
    return rill__status(RILL_OUT_OF_MEMORY, "rotary_update: out of host memory for the reference kernel");
  }
  rill_type_t rt[2] = {*k, d->in[5]}, rq[2] = {*q, d->in[5]}, tt = *k;
  tt.dims[1] = k->dims[2];
  tt.dims[2] = k->dims[1];
  isa_opdecl_t rd = *d, ud = *d;
  rd.name = "rotary", rd.in = rt, rd.nin = 2, rd.out = &rt[0], rd.nout = 1;
  rill_type_t ut[3] = {d->in[0], tt, d->in[6]};
  ud.name = "update", ud.in = ut, ud.nin = 3, ud.out = &ut[0], ud.nout = 1, ud.attrs = NULL, ud.nattrs = 0;
  ops_plan_t rp = *plan, upl = *plan;
  rp.decl = &rd, rp.def = ops_find("rotary");
  upl.decl = &ud, upl.def = ops_find("update");
  static const int64_t perm[4] = {0, 2, 1, 3};
  rill_status_t st = ops_cpu_rotary(&rp, (void *[]){in[3], in[5]}, (void *[]){kr});
  if (!st) {
    ops_permute(kr, k, perm, kt);
    st = ops_cpu_update(&upl, (void *[]){in[0], kt, in[6]}, (void *[]){out[0]});
  }
  if (!st) {
    ops_permute(in[4], k, perm, kt);
    ut[0] = d->in[1];
    st = ops_cpu_update(&upl, (void *[]){in[1], kt, in[6]}, (void *[]){out[1]});
  }
  if (!st) {
    rd.in = rq, rd.out = &rq[0];
    st = ops_cpu_rotary(&rp, (void *[]){in[2], in[5]}, (void *[]){out[2]});
  }
  free(kr);
  free(kt);
  return st;
}
