/* pipeline_parallel.c: --pipeline-parallel=N, the rank form (docs/tensor_parallel.md, "Pipeline parallel").
 *
 * @main, a straight line of ops, is cut into N contiguous stages balanced
 * by an estimate of each op's cost (its weights' bytes plus its flops);
 * rank k of a job of N runs stage k. The batch (axis 0 of the parameters
 * whose first size is the first parameter's) is cut into M micro-batches
 * (--micro-batches, default N): stage k computes micro-batch i, sends the
 * values that cross its cut to rank k+1 and receives micro-batch i+1 from
 * rank k-1 in one exchange, so rank k works on i while rank k+1 works on
 * i-1 (GPipe's fill and drain). The last stage joins the micro-batches'
 * results (concat along their rows) and every rank returns them through a
 * broadcast from rank N-1: each rank's results equal the unsplit run's.
 *
 * The module gets @main.stage0 .. @main.stageN-1 (each @main's signature)
 * and @main.pickK functions, and @main becomes `rank()` choosing its stage
 * through `if`. Each stage's constants are marked as that rank's
 * ({stage=K, ranks=N}): a rank's VM uploads only its own. A function other
 * than @main stays whole (a note); what cannot be cut (states, streams,
 * calls, if, while, collectives, a batch that M does not divide, an op that
 * mixes the rows when M > 1) is an error at its position.
 */
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

typedef struct pp {
  asm_ctx_t *c;
  ir_func_t *main;
  const func_decl_t *fd;
  int N, M;
  int8_t *ax;         /* per value of @main: the axis holding the batch's rows, -1 none */
  int *vstage;        /* per value: the stage that makes it (-1 params, consts) */
  int *vlast;         /* per value: the last stage that uses it (N-1 for results) */
  int *nstage;        /* per node: its stage */
  int64_t B;          /* the batch's rows (0 when M is 1) */
  uint32_t *zero;     /* per result: the zero constant the stages before the last return into the broadcast, or UINT32_MAX */
} pp_t;

static rill_type_t mb_type(const pp_t *p, uint32_t v) {
  rill_type_t t = p->main->values.items[v].type;
  if (p->ax[v] >= 0) t.dims[p->ax[v]] /= p->M;
  return t;
}

/* A new function (decl with @main's signature, empty IR). */
static rill_status_t new_func(pp_t *p, ir_func_t *funcs, bool *built, size_t *nf, size_t cap, const char *name, uint32_t *out) {
  asm_ctx_t *c = p->c;
  if (*nf >= cap) return rill__status(RILL_INTERNAL, "pipeline: too many functions");
  if (asm_find_func(c, name, strlen(name)) >= 0)
    return asm_error(c, c->funcs.items[p->main->index].line, c->funcs.items[p->main->index].col, "--pipeline-parallel: the module already has a function @%s", name);
  func_decl_t d = c->funcs.items[p->main->index];
  d.name = rill__arena_strndup(&c->arena, name, strlen(name));
  if (!d.name) return rill__oom();
  uint32_t fi = (uint32_t)c->funcs.len;
  RILL_TRY(RILL_VEC_PUSH(c->a, &c->funcs, d));
  p->fd = NULL; /* (the vector may have moved: asm_pipeline_parallel takes it again) */
  RILL_TRY(rill__map_put(&c->func_map, d.name, strlen(d.name), fi));
  ir_func_t *g = &funcs[*nf];
  memset(g, 0, sizeof *g);
  g->index = fi;
  g->nstreams = 1;
  g->nparams = p->main->nparams;
  for (uint32_t i = 0; i < p->main->nparams; i++) {
    ir_value_t v = p->main->values.items[i];
    v.def = -1, v.slot = -1, v.reg = -1, v.last_use = 0, v.escapes = false;
    RILL_TRY(RILL_VEC_PUSH(c->a, &g->values, v));
  }
  built[*nf] = true;
  *out = (uint32_t)(*nf)++;
  return NULL;
}

static rill_status_t push(asm_ctx_t *c, ir_func_t *g, asm_nodes_t *out, ir_node_t n) {
  for (uint32_t r = 0; r < n.nres; r++) g->values.items[n.res[r]].def = (int32_t)out->len;
  return RILL_VEC_PUSH(c->a, out, n);
}

/* One exchange: send `ns` values to rank k+1, receive `nr` values (types rt) from rank k-1 into res. */
static rill_status_t exchange(pp_t *p, ir_func_t *g, asm_nodes_t *out, int k, const uint32_t *sv, uint32_t ns, const rill_type_t *rt,
                              const char *const *rn, uint32_t nr, uint32_t *res) {
  asm_ctx_t *c = p->c;
  if (!ns && !nr) return NULL;
  rill_type_t in[OPS_P2P_GROUP_MAX];
  int64_t v[6][OPS_P2P_GROUP_MAX], dims[OPS_P2P_GROUP_MAX * RILL_MAX_RANK];
  uint32_t nd = 0;
  for (uint32_t i = 0; i < ns; i++) in[i] = g->values.items[sv[i]].type, v[0][i] = k + 1, v[1][i] = 0;
  for (uint32_t i = 0; i < nr; i++) {
    v[2][i] = k - 1, v[3][i] = 0, v[4][i] = rt[i].dtype, v[5][i] = rt[i].rank;
    for (int d = 0; d < rt[i].rank; d++) dims[nd++] = rt[i].dims[d];
  }
  static const char *const names[7] = {"to", "to_shift", "from", "from_shift", "dtypes", "ndims", "dims"};
  const uint32_t counts[7] = {ns, ns, nr, nr, nr, nr, nd};
  isa_attr_t *attrs = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * 7);
  if (!attrs) return rill__oom();
  uint32_t na = 0;
  for (int a = 0; a < 7; a++) {
    if (!counts[a]) continue;
    int64_t *x = rill__arena_memdup(&c->arena, a == 6 ? dims : v[a], sizeof(int64_t) * counts[a]);
    if (!x) return rill__oom();
    attrs[na++] = (isa_attr_t){.name = names[a], .kind = ISA_ATTR_INTS, .count = counts[a], .ints = x};
  }
  ir_node_t n = {.kind = N_OP, .line = p->main->nodes.items[0].line, .col = p->main->nodes.items[0].col, .nargs = ns, .nres = nr};
  n.args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (ns ? ns : 1));
  n.res = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (nr ? nr : 1));
  if (!n.args || !n.res) return rill__oom();
  if (ns) memcpy(n.args, sv, sizeof(uint32_t) * ns);
  for (uint32_t i = 0; i < nr; i++) {
    RILL_TRY(asm_add_result(c, g, rn[i], &rt[i], &res[i]));
    n.res[i] = res[i];
  }
  RILL_TRY(asm_intern_op(c, "sendrecv", in, ns, rt, nr, attrs, na, &n.target));
  return push(c, g, out, n);
}

/* Micro-batch m's rows of parameter i into g (a gather at `at`): *out. */
static rill_status_t mb_rows(pp_t *p, ir_func_t *g, asm_nodes_t *out, const ir_node_t *at, uint32_t i, int m, uint32_t *res) {
  asm_ctx_t *c = p->c;
  int64_t part = p->B / p->M;
  rill_type_t it = {RILL_I64, 1, {part}}, pt = mb_type(p, i);
  int64_t *iota = rill__arena_alloc(&c->arena, sizeof(int64_t) * (size_t)part);
  isa_attr_t *ga = asm_one_attr(c, "axis", ISA_ATTR_INT, 0, NULL);
  uint32_t kk, iv;
  if (!iota || !ga) return rill__oom();
  for (int64_t r = 0; r < part; r++) iota[r] = m * part + r;
  RILL_TRY(asm_new_const(c, g, &it, (uint8_t *)iota, false, &kk, &iv));
  RILL_TRY(asm_add_result(c, g, p->main->values.items[i].name, &pt, res));
  uint32_t a2[2] = {i, iv};
  return asm_new_op(c, g, out, at, "gather", ga, 1, a2, 2, *res);
}

/* @main's op node i for one micro-batch into g on `stream`, its operands
 * args (g's values), its new results recorded in s (the micro-batch's
 * values of @main). */
static rill_status_t stage_op(pp_t *p, ir_func_t *g, asm_nodes_t *out, size_t i, uint32_t *args, int stream, uint32_t *s) {
  const ir_func_t *f = p->main;
  ir_node_t n = f->nodes.items[i];
  uint32_t *res = rill__arena_alloc(&p->c->arena, sizeof(uint32_t) * (n.nres ? n.nres : 1));
  if (!res) return rill__oom();
  for (uint32_t r = 0; r < n.nres; r++) {
    rill_type_t t = mb_type(p, n.res[r]);
    RILL_TRY(asm_add_result(p->c, g, f->values.items[n.res[r]].name, &t, &res[r]));
    s[n.res[r]] = res[r];
  }
  int b = -1;
  for (uint32_t r = 0; r < n.nres; r++)
    if (p->ax[n.res[r]] >= 0) b = p->ax[n.res[r]];
  n.args = args, n.res = res, n.stream = stream;
  RILL_TRY(asm_retype_rows(p->c, g, &n, b, p->B, p->B / p->M));
  return push(p->c, g, out, n);
}

/* Result v of @main joined from its micro-batches (sub: [m * nv + v]) along its rows: *out. */
static rill_status_t join_rows(pp_t *p, ir_func_t *g, asm_nodes_t *out, const ir_node_t *at, uint32_t v, const uint32_t *sub, uint32_t *res) {
  const ir_value_t *x = &p->main->values.items[v];
  uint32_t parts[64];
  for (int m = 0; m < p->M; m++) parts[m] = sub[(size_t)m * p->main->values.len + v];
  isa_attr_t *ca = asm_one_attr(p->c, "axis", ISA_ATTR_INT, p->ax[v], NULL);
  if (!ca) return rill__oom();
  RILL_TRY(asm_add_result(p->c, g, x->name, &x->type, res));
  return asm_new_op(p->c, g, out, at, "concat", ca, 1, parts, (uint32_t)p->M, *res);
}

/* The values that cross the cut before stage k (made before it, used at or after it), in value order. */
static uint32_t crossing(const pp_t *p, int k, uint32_t *out) {
  uint32_t n = 0;
  for (size_t v = 0; v < p->main->values.len; v++)
    if (p->vstage[v] >= 0 && p->vstage[v] < k && p->vlast[v] >= k) out[n++] = (uint32_t)v;
  return n;
}

/* Stage k's function body into g. */
static rill_status_t build_stage(pp_t *p, ir_func_t *g, int k) {
  asm_ctx_t *c = p->c;
  ir_func_t *f = p->main;
  size_t nv = f->values.len;
  const int M = p->M, N = p->N;
  uint32_t *sub = rill__alloc(c->a, sizeof(uint32_t) * nv * (size_t)M);
  uint32_t *cin = rill__alloc(c->a, sizeof(uint32_t) * (nv ? nv : 1)), *cout = rill__alloc(c->a, sizeof(uint32_t) * (nv ? nv : 1));
  uint32_t *konst = rill__alloc(c->a, sizeof(uint32_t) * (nv ? nv : 1));
  rill_type_t *rt = rill__alloc(c->a, sizeof(rill_type_t) * (nv ? nv : 1));
  const char **rn = rill__alloc(c->a, sizeof(char *) * (nv ? nv : 1));
  asm_nodes_t out = {0};
  rill_status_t st = sub && cin && cout && konst && rt && rn ? NULL : rill__oom();
  if (st) goto done;
  memset(konst, 0xff, sizeof(uint32_t) * nv);
  uint32_t nin = k > 0 ? crossing(p, k, cin) : 0, nout = k < N - 1 ? crossing(p, k + 1, cout) : 0;
  if (nin > OPS_P2P_GROUP_MAX || nout > OPS_P2P_GROUP_MAX) {
    st = asm_error(c, f->nodes.items[0].line, f->nodes.items[0].col, "--pipeline-parallel=%d: %u values cross the cut before stage %d (at most %d)", N,
                   nin > nout ? nin : nout, nin > nout ? k : k + 1, OPS_P2P_GROUP_MAX);
    goto done;
  }
  for (uint32_t i = 0; i < nin; i++) rt[i] = mb_type(p, cin[i]), rn[i] = f->values.items[cin[i]].name;
  ir_node_t at = f->nodes.items[0];
  at.stream = 0;
  /* parameters and constants, per micro-batch */
  for (int m = 0; !st && m < M; m++) {
    uint32_t *s = sub + (size_t)m * nv;
    for (size_t v = 0; !st && v < nv; v++) {
      const ir_value_t *x = &f->values.items[v];
      s[v] = UINT32_MAX;
      if (x->kind == V_PARAM) {
        s[v] = (uint32_t)v;
      }
    }
  }
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    if (p->ax[i] < 0 || p->vlast[i] < k) continue;
    /* are this stage's ops users of it? only then take its micro-batches */
    bool used = false;
    for (size_t n = 0; n < f->nodes.len && !used; n++) {
      const ir_node_t *x = &f->nodes.items[n];
      if (x->kind != N_OP || p->nstage[n] != k) continue;
      for (uint32_t j = 0; j < x->nargs; j++) used |= x->args[j] == i;
    }
    if (k == N - 1)
      for (uint32_t j = 0; j < f->nodes.items[f->nodes.len - 1].nargs; j++) used |= f->nodes.items[f->nodes.len - 1].args[j] == i;
    if (!used) continue;
    for (int m = 0; !st && m < M; m++) st = mb_rows(p, g, &out, &at, i, m, &sub[(size_t)m * nv + i]);
  }
  if (st) goto done;
  uint32_t got[OPS_P2P_GROUP_MAX], snd[OPS_P2P_GROUP_MAX];
  if (nin && (st = exchange(p, g, &out, k, NULL, 0, rt, rn, nin, got))) goto done;
  for (int m = 0; m < M; m++) {
    uint32_t *s = sub + (size_t)m * nv;
    for (uint32_t i = 0; i < nin; i++) s[cin[i]] = got[i];
    for (size_t i = 0; !st && i < f->nodes.len; i++) {
      ir_node_t n = f->nodes.items[i];
      if (n.kind != N_OP || p->nstage[i] != k) continue;
      uint32_t *args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n.nargs ? n.nargs : 1));
      if (!args) { st = rill__oom(); break; }
      for (uint32_t j = 0; !st && j < n.nargs; j++) {
        uint32_t a = n.args[j];
        if (f->values.items[a].kind == V_CONST && konst[a] == UINT32_MAX) {
          /* a constant this stage uses (only these are its rank's) */
          ir_value_t y = f->values.items[a];
          y.def = -1, y.slot = -1, y.reg = -1, y.last_use = 0, y.escapes = false;
          konst[a] = (uint32_t)g->values.len;
          st = RILL_VEC_PUSH(c->a, &g->values, y);
        }
        args[j] = f->values.items[a].kind == V_CONST ? konst[a] : s[a];
      }
      if (!st) st = stage_op(p, g, &out, i, args, 0, s);
    }
    if (st) break;
    /* this micro-batch's values to the next stage, the next micro-batch's from the one before */
    for (uint32_t i = 0; i < nout; i++) snd[i] = s[cout[i]];
    if ((st = exchange(p, g, &out, k, snd, nout, rt, rn, m + 1 < M ? nin : 0, got))) break;
  }
  if (st) goto done;
  /* the results: the last stage's joined along the rows; the others' a zero fill; every rank's from rank N-1 */
  const ir_node_t *ret = &f->nodes.items[f->nodes.len - 1];
  uint32_t *rv = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (ret->nargs ? ret->nargs : 1));
  if (!rv) { st = rill__oom(); goto done; }
  for (uint32_t j = 0; !st && j < ret->nargs; j++) {
    uint32_t v = ret->args[j], x;
    const rill_type_t *t = &f->values.items[v].type;
    if (k < N - 1 && p->zero[j] != UINT32_MAX) {
      /* the zeros another stage made for this result */
      ir_value_t y = {.name = c->consts.items[p->zero[j]].name, .type = *t, .kind = V_CONST, .konst = p->zero[j], .def = -1, .slot = -1, .reg = -1};
      x = (uint32_t)g->values.len;
      st = RILL_VEC_PUSH(c->a, &g->values, y);
    } else if (k < N - 1) {
      size_t es = rill_dtype_size(t->dtype);
      uint8_t *zero = rill__arena_alloc(&c->arena, es > 8 ? es : 8);
      if (!zero) { st = rill__oom(); break; }
      memset(zero, 0, es > 8 ? es : 8);
      st = asm_new_const(c, g, t, zero, true, &p->zero[j], &x);
    } else if (p->ax[v] >= 0 && M > 1) {
      st = join_rows(p, g, &out, &at, v, sub, &x);
    } else if (f->values.items[v].kind == V_CONST) {
      ir_value_t y = f->values.items[v];
      y.def = -1, y.slot = -1, y.reg = -1, y.last_use = 0, y.escapes = false;
      x = (uint32_t)g->values.len;
      st = RILL_VEC_PUSH(c->a, &g->values, y);
    } else {
      x = sub[v];
    }
    if (st) break;
    isa_attr_t *ba = asm_one_attr(c, "root", ISA_ATTR_INT, N - 1, NULL);
    if (!ba) { st = rill__oom(); break; }
    if (!(st = asm_add_result(c, g, f->values.items[v].name, t, &rv[j]))) st = asm_new_op(c, g, &out, &at, "broadcast", ba, 1, &x, 1, rv[j]);
  }
  if (st) goto done;
  ir_node_t r = {.kind = N_RETURN, .line = ret->line, .col = ret->col, .args = rv, .nargs = ret->nargs};
  if ((st = RILL_VEC_PUSH(c->a, &out, r))) goto done;
  g->nodes.items = out.items, g->nodes.len = out.len, g->nodes.cap = out.cap;
  out = (asm_nodes_t){0};
done:
  RILL_VEC_FREE(c->a, &out);
  rill__free(c->a, sub);
  rill__free(c->a, cin);
  rill__free(c->a, cout);
  rill__free(c->a, konst);
  rill__free(c->a, rt);
  rill__free(c->a, rn);
  return st;
}

/* ---- the device form (--parallel-form=devices): one @main over N devices ----
 *
 * Stage k runs on device k, its ops on stream 64-k (device 0's on stream
 * 0: asm_device_stream); what stage k reads from elsewhere (a value of an
 * earlier stage, a parameter's micro-batch from device 0) is copied to
 * device k on a stream of its own, 64-(N-1)-k, after an event on the
 * producer's stream, and stream k
 * waits for the copies by an event. Micro-batch i is issued to every
 * stage in turn, then i+1: stage k computes i while stage k+1 computes
 * i-1 and device k+1's copy stream brings i in. The results (joined along
 * their rows on the last stage's device) are copied to device 0. */
typedef struct ppd {
  pp_t *p;
  ir_func_t *g;
  asm_nodes_t out;
  uint32_t *sub;      /* [m * nv + v]: micro-batch m of value v where it was made, UINT32_MAX none */
  uint32_t *loc;      /* [(k * M + m) * nv + v]: its copy on device k */
  uint32_t *kval;     /* [konst * N + k]: constant konst's value loaded on device k */
  size_t nk;          /* constants kval has room for */
} ppd_t;

static int pd_maker(const pp_t *p, uint32_t v) { return p->vstage[v] >= 0 ? p->vstage[v] : 0; }
static int pd_stream(const pp_t *p, int k) { (void)p; return asm_device_stream(k); }
static int pd_copy_stream(const pp_t *p, int k) { return k ? ISA_MAX_STREAMS - (p->N - 1) - k : 0; }

static rill_status_t pd_event(ppd_t *d, const ir_node_t *at, int from, int to) { return asm_event_edge(d->p->c, &d->out, at, from, to); }

static rill_status_t pd_const(ppd_t *d, uint32_t k, int dev, uint32_t *out) {
  asm_ctx_t *c = d->p->c;
  int N = d->p->N;
  if (k >= d->nk) {
    size_t n = c->consts.len > k + 1 ? c->consts.len : k + 1;
    uint32_t *x = rill__realloc(c->a, d->kval, sizeof(uint32_t) * (size_t)N * n);
    if (!x) return rill__oom();
    for (size_t q = (size_t)N * d->nk; q < (size_t)N * n; q++) x[q] = UINT32_MAX;
    d->kval = x, d->nk = n;
  }
  uint32_t *slot = &d->kval[(size_t)k * N + dev];
  if (*slot == UINT32_MAX) {
    const isa_const_t *kc = &c->consts.items[k];
    ir_value_t v = {.name = kc->name, .type = kc->type, .kind = V_CONST, .konst = k, .def = -1, .slot = -1, .reg = -1, .device = (uint8_t)dev};
    *slot = (uint32_t)d->g->values.len;
    RILL_TRY(RILL_VEC_PUSH(c->a, &d->g->values, v));
  }
  *out = *slot;
  return NULL;
}

/* Copies into device k (its copy stream) of the values `want` (micro-batch m) made on other devices; then stream k waits for them. */
static rill_status_t pd_copy_in(ppd_t *d, const ir_node_t *at, int k, int m, const uint32_t *want, uint32_t nw) {
  pp_t *p = d->p;
  asm_ctx_t *c = p->c;
  size_t nv = p->main->values.len;
  if (!nw) return NULL;
  int cs = pd_copy_stream(p, k);
  for (int j = 0; j < p->N; j++) {
    bool any = false;
    for (uint32_t w = 0; w < nw; w++) any |= pd_maker(p, want[w]) == j;
    if (!any) continue;
    RILL_TRY(pd_event(d, at, pd_stream(p, j), cs));
    for (uint32_t w = 0; w < nw; w++) {
      uint32_t v = want[w];
      if (pd_maker(p, v) != j) continue;
      uint32_t y;
      RILL_TRY(asm_device_copy(c, d->g, &d->out, at, d->sub[(size_t)m * nv + v], j, cs, &y));
      d->loc[((size_t)k * p->M + m) * nv + v] = y;
    }
  }
  return pd_event(d, at, cs, pd_stream(p, k));
}

static rill_status_t build_devices(pp_t *p, ir_func_t *g) {
  asm_ctx_t *c = p->c;
  ir_func_t *f = p->main;
  size_t nv = f->values.len;
  const int M = p->M, N = p->N;
  ppd_t d = {.p = p, .g = g, .nk = c->consts.len};
  d.sub = rill__alloc(c->a, sizeof(uint32_t) * nv * (size_t)M);
  d.loc = rill__alloc(c->a, sizeof(uint32_t) * nv * (size_t)M * (size_t)N);
  d.kval = rill__alloc(c->a, sizeof(uint32_t) * (d.nk ? d.nk : 1) * (size_t)N);
  uint32_t *want = rill__alloc(c->a, sizeof(uint32_t) * (nv ? nv : 1));
  rill_status_t st = d.sub && d.loc && d.kval && want ? NULL : rill__oom();
  if (st) goto done;
  memset(d.sub, 0xff, sizeof(uint32_t) * nv * (size_t)M);
  memset(d.loc, 0xff, sizeof(uint32_t) * nv * (size_t)M * (size_t)N);
  memset(d.kval, 0xff, sizeof(uint32_t) * d.nk * (size_t)N);
  ir_node_t at = f->nodes.items[0];
  at.stream = 0;
  /* the parameters' micro-batches, on device 0 */
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    for (int m = 0; m < M; m++) d.sub[(size_t)m * nv + i] = i;
    if (p->ax[i] < 0 || M == 1) continue;
    for (int m = 0; !st && m < M; m++) st = mb_rows(p, g, &d.out, &at, i, m, &d.sub[(size_t)m * nv + i]);
  }
  for (int m = 0; !st && m < M; m++) {
    uint32_t *s = d.sub + (size_t)m * nv;
    for (int k = 0; !st && k < N; k++) {
      uint32_t *l = d.loc + ((size_t)k * M + m) * nv;
      /* what stage k reads from other devices */
      uint32_t nw = 0;
      const ir_node_t *first = NULL;
      for (size_t i = 0; i < f->nodes.len; i++) {
        const ir_node_t *n = &f->nodes.items[i];
        if (n->kind != N_OP || p->nstage[i] != k) continue;
        if (!first) first = n;
        for (uint32_t j = 0; j < n->nargs; j++) {
          uint32_t a = n->args[j];
          if (f->values.items[a].kind == V_CONST || pd_maker(p, a) == k || l[a] != UINT32_MAX) continue;
          bool dup = false;
          for (uint32_t w = 0; w < nw; w++) dup |= want[w] == a;
          if (!dup) want[nw++] = a;
        }
      }
      if (!first) continue;
      ir_node_t here = *first;
      if ((st = pd_copy_in(&d, &here, k, m, want, nw))) break;
      for (size_t i = 0; !st && i < f->nodes.len; i++) {
        ir_node_t n = f->nodes.items[i];
        if (n.kind != N_OP || p->nstage[i] != k) continue;
        uint32_t *args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n.nargs ? n.nargs : 1));
        if (!args) { st = rill__oom(); break; }
        for (uint32_t j = 0; !st && j < n.nargs; j++) {
          uint32_t a = n.args[j];
          if (f->values.items[a].kind == V_CONST) st = pd_const(&d, f->values.items[a].konst, k, &args[j]);
          else args[j] = pd_maker(p, a) == k ? s[a] : l[a];
        }
        if (!st) st = stage_op(p, g, &d.out, i, args, pd_stream(p, k), s);
      }
    }
  }
  if (st) goto done;
  /* the results: joined on their maker's device, then copied to device 0 */
  const ir_node_t *ret = &f->nodes.items[f->nodes.len - 1];
  uint32_t *rv = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (ret->nargs ? ret->nargs : 1));
  if (!rv) { st = rill__oom(); goto done; }
  for (uint32_t j = 0; !st && j < ret->nargs; j++) {
    uint32_t v = ret->args[j], x;
    int k = pd_maker(p, v);
    ir_node_t rat = *ret;
    rat.kind = N_OP, rat.stream = pd_stream(p, k);
    if (f->values.items[v].kind == V_CONST) {
      st = pd_const(&d, f->values.items[v].konst, 0, &rv[j]);
      continue;
    }
    if (p->ax[v] >= 0 && M > 1) {
      st = join_rows(p, g, &d.out, &rat, v, d.sub, &x);
    } else {
      x = d.sub[v];
    }
    if (st || !k) { rv[j] = x; continue; }
    if ((st = pd_event(&d, ret, pd_stream(p, k), 0))) break;
    st = asm_device_copy(c, g, &d.out, ret, x, k, 0, &rv[j]);
  }
  if (st) goto done;
  ir_node_t r = {.kind = N_RETURN, .line = ret->line, .col = ret->col, .args = rv, .nargs = ret->nargs};
  if ((st = RILL_VEC_PUSH(c->a, &d.out, r))) goto done;
  asm_take_nodes(c, g, &d.out);
  g->nstreams = ISA_MAX_STREAMS;
  for (int k = 1; k < N; k++) g->sdev[pd_stream(p, k)] = (uint8_t)k, g->sdev[pd_copy_stream(p, k)] = (uint8_t)k;
  g->events_used |= 1;
done:
  RILL_VEC_FREE(c->a, &d.out);
  rill__free(c->a, d.sub);
  rill__free(c->a, d.loc);
  rill__free(c->a, d.kval);
  rill__free(c->a, want);
  return st;
}

/* g's body: `if (rank() == k) stage k else next` with @main's parameters, returning its results. */
static rill_status_t build_pick(pp_t *p, ir_func_t *g, int k, uint32_t then_fn, uint32_t else_fn, uint32_t line, uint32_t col) {
  asm_ctx_t *c = p->c;
  asm_nodes_t out = {0};
  ir_node_t at = {.kind = N_OP, .line = line, .col = col};
  rill_type_t scalar = {RILL_I64, 0, {0}}, b = {RILL_BOOL, 0, {0}};
  uint32_t r, kv, cv;
  rill_status_t st = asm_add_result(c, g, "rank", &scalar, &r);
  if (!st) st = asm_new_op(c, g, &out, &at, "rank", NULL, 0, NULL, 0, r);
  if (!st) st = asm_literal_value(c, g, RILL_I64, k, &kv);
  if (!st) st = asm_add_result(c, g, "is_stage", &b, &cv);
  uint32_t a2[2] = {r, kv};
  if (!st) st = asm_new_op(c, g, &out, &at, "eq", NULL, 0, a2, 2, cv);
  const ir_node_t *ret = &p->main->nodes.items[p->main->nodes.len - 1];
  uint32_t nres = ret->nargs, np = g->nparams;
  ir_node_t n = {.kind = N_IF, .line = line, .col = col, .target = then_fn, .target2 = else_fn, .nargs = np + 1, .nres = nres};
  n.args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (np + 1));
  n.res = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (nres ? nres : 1));
  if (!st && (!n.args || !n.res)) st = rill__oom();
  if (!st) {
    n.args[0] = cv;
    for (uint32_t i = 0; i < np; i++) n.args[1 + i] = i;
  }
  for (uint32_t j = 0; !st && j < nres; j++) st = asm_add_result(c, g, p->main->values.items[ret->args[j]].name, &p->main->values.items[ret->args[j]].type, &n.res[j]);
  if (!st) st = push(c, g, &out, n);
  ir_node_t rn = {.kind = N_RETURN, .line = ret->line, .col = ret->col, .args = n.res, .nargs = nres};
  if (!st) st = RILL_VEC_PUSH(c->a, &out, rn);
  if (st) {
    RILL_VEC_FREE(c->a, &out);
    return st;
  }
  g->nodes.items = out.items, g->nodes.len = out.len, g->nodes.cap = out.cap;
  return NULL;
}

/* An estimate of op node n's cost: its flops (a product's 2 per multiply-add, else one per result element) plus the bytes of its constants. */
static double op_cost(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n) {
  const isa_opdecl_t *d = asm_decl(c, n);
  double out = 0, w = 0;
  for (uint32_t r = 0; r < n->nres; r++) {
    double e = 1;
    const rill_type_t *t = &f->values.items[n->res[r]].type;
    for (int i = 0; i < t->rank; i++) e *= isa_dim_is_sym(t->dims[i]) ? 1 : (double)t->dims[i];
    out += e;
  }
  if ((!strcmp(d->name, "linear") || !strcmp(d->name, "matmul")) && n->nargs >= 1) {
    const rill_type_t *x = &f->values.items[n->args[0]].type;
    double kd = x->rank && !isa_dim_is_sym(x->dims[x->rank - 1]) ? (double)x->dims[x->rank - 1] : 1;
    out *= 2 * kd;
  }
  for (uint32_t j = 0; j < n->nargs; j++) {
    const ir_value_t *v = &f->values.items[n->args[j]];
    if (v->kind != V_CONST) continue;
    size_t numel, nbytes;
    rill__type_sizes(&v->type, &numel, &nbytes);
    w += (double)nbytes;
  }
  return out + w;
}

static rill_status_t check_main(pp_t *p) {
  asm_ctx_t *c = p->c;
  ir_func_t *f = p->main;
  const func_decl_t *fd = p->fd;
  const int N = p->N;
  if (f->hand_scheduled)
    return asm_error(c, fd->line, fd->col, "--pipeline-parallel=%d: @main schedules its own streams (set_stream): it cannot be cut into stages", N);
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    for (uint32_t j = 0; j < n->nargs + n->nres; j++) {
      const ir_value_t *v = &f->values.items[j < n->nargs ? n->args[j] : n->res[j - n->nargs]];
      if (v->kind == V_STATE)
        return asm_error(c, n->line, n->col, "--pipeline-parallel=%d: @main reads or updates state %%%s: it cannot be cut into stages", N,
                         c->states.items[v->konst].name);
    }
  }
  uint32_t nops = 0;
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (n->kind == N_RETURN) {
      if (i + 1 != f->nodes.len) return asm_error(c, n->line, n->col, "--pipeline-parallel=%d: a return before the end of @main", N);
      continue;
    }
    if (n->kind != N_OP)
      return asm_error(c, n->line, n->col, "--pipeline-parallel=%d: @main must be a straight line of ops to be cut into stages (%s here)", N,
                       n->kind == N_CALL ? "a call" : n->kind == N_IF ? "an if" : n->kind == N_WHILE ? "a while" : "a stream statement");
    const ops_def_t *def = ops_find(asm_decl(c, n)->name);
    if (def && ops_collective(def) != OPS_COLL_NONE)
      return asm_error(c, n->line, n->col, "--pipeline-parallel=%d: @main has a collective (%s) of its own: it cannot be cut into stages", N, asm_decl(c, n)->name);
    if (!strcmp(asm_decl(c, n)->name, "emit"))
      return asm_error(c, n->line, n->col, "--pipeline-parallel=%d: @main emits values: it cannot be cut into stages", N);
    nops++;
  }
  if (!f->nodes.len || f->nodes.items[f->nodes.len - 1].kind != N_RETURN) return asm_error(c, fd->line, fd->col, "--pipeline-parallel=%d: @main has no return", N);
  if (nops < (uint32_t)N)
    return asm_error(c, fd->line, fd->col, "--pipeline-parallel=%d: @main has %u op%s, fewer than the %d stages", N, nops, nops == 1 ? "" : "s", N);
  return NULL;
}

/* Which axis of each value holds the batch's rows (M > 1). */
static rill_status_t find_rows(pp_t *p) {
  asm_ctx_t *c = p->c;
  ir_func_t *f = p->main;
  const func_decl_t *fd = p->fd;
  int64_t *rows = rill__calloc(c->a, f->values.len ? f->values.len : 1, sizeof(int64_t));
  if (!rows) return rill__oom();
  rill_status_t st = NULL;
  for (uint32_t i = 0; i < f->nparams && !p->B; i++) {
    const rill_type_t *t = &f->values.items[i].type;
    if (t->rank < 1) continue;
    if (isa_dim_is_sym(t->dims[0])) {
      st = asm_error(c, fd->param_line[i], fd->param_col[i], "--micro-batches=%d: the batch of %%%s has a symbolic size: it is not cut into micro-batches (give --micro-batches=1)",
                     p->M, fd->param_names[i]);
      goto done;
    }
    p->B = t->dims[0];
    if (p->B % p->M) {
      st = asm_error(c, fd->param_line[i], fd->param_col[i], "--micro-batches=%d: the batch of %%%s (%lld rows) does not divide into %d micro-batches", p->M,
                     fd->param_names[i], (long long)p->B, p->M);
      goto done;
    }
  }
  if (!p->B) {
    st = asm_error(c, fd->line, fd->col, "--micro-batches=%d: @main has no parameter with a batch axis (axis 0) to cut", p->M);
    goto done;
  }
  for (uint32_t i = 0; i < f->nparams; i++) {
    const rill_type_t *t = &f->values.items[i].type;
    if (t->rank >= 1 && t->dims[0] == p->B) p->ax[i] = 0, rows[i] = p->B;
  }
  for (size_t i = 0; !st && i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (n->kind != N_OP) continue;
    bool any = false;
    for (uint32_t j = 0; j < n->nargs; j++) any |= p->ax[n->args[j]] >= 0;
    if (!any) continue;
    int b = asm_rows_axis(c, f, n, p->ax, p->B);
    if (b < 0) {
      st = asm_error(c, n->line, n->col, "--micro-batches=%d: %s mixes the rows of the batch (%lld rows), which the micro-batches cut (give --micro-batches=1)", p->M,
                     asm_decl(c, n)->name, (long long)p->B);
      break;
    }
    for (uint32_t r = 0; r < n->nres; r++) {
      const rill_type_t *t = &f->values.items[n->res[r]].type;
      if (b < t->rank && t->dims[b] == p->B) p->ax[n->res[r]] = (int8_t)b;
    }
  }
done:
  rill__free(c->a, rows);
  return st;
}

/* Cuts the op nodes into N contiguous stages of about equal cost: stage k ends where the running cost first reaches (k+1)/N of the whole. */
static void partition(pp_t *p, double *cost_out) {
  ir_func_t *f = p->main;
  size_t nn = f->nodes.len;
  double total = 0;
  uint32_t nops = 0;
  for (size_t i = 0; i + 1 < nn; i++) total += op_cost(p->c, f, &f->nodes.items[i]), nops++;
  int k = 0;
  double acc = 0;
  uint32_t seen = 0, in_stage = 0;
  for (int s = 0; s < p->N; s++) cost_out[s] = 0;
  for (size_t i = 0; i + 1 < nn; i++) {
    double w = op_cost(p->c, f, &f->nodes.items[i]);
    /* move on when this stage has its share and has an op, or when the ops left are just enough for the stages left */
    uint32_t left = nops - seen;
    if (k < p->N - 1 && in_stage > 0 && (acc + w / 2 > total * (k + 1) / p->N || left <= (uint32_t)(p->N - 1 - k))) k++, in_stage = 0;
    p->nstage[i] = k;
    cost_out[k] += w;
    acc += w;
    seen++, in_stage++;
  }
  p->nstage[nn - 1] = p->N - 1;
}

/* The device form's @main in place of the one given, its stages' weights marked, the notes. */
static rill_status_t main_devices(pp_t *p, const double *cost, uint32_t line, uint32_t col) {
  asm_ctx_t *c = p->c;
  ir_func_t *f = p->main, nm;
  const int N = p->N;
  if (2 * N - 1 > ISA_MAX_STREAMS)
    return asm_error(c, p->fd->line, p->fd->col, "--pipeline-parallel=%d --parallel-form=devices: %d stages need %d streams (a compute and a copy stream a device), more than %d",
                     N, N, 2 * N - 1, ISA_MAX_STREAMS);
  memset(&nm, 0, sizeof nm);
  nm.index = f->index;
  nm.nparams = f->nparams;
  rill_status_t st = NULL;
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    ir_value_t v = f->values.items[i];
    v.def = -1, v.slot = -1, v.reg = -1, v.last_use = 0, v.escapes = false;
    st = RILL_VEC_PUSH(c->a, &nm.values, v);
  }
  if (!st) st = build_devices(p, &nm);
  if (st) {
    RILL_VEC_FREE(c->a, &nm.nodes);
    RILL_VEC_FREE(c->a, &nm.values);
    return st;
  }
  /* a weight that one device loads is that stage's: only its device holds it */
  for (size_t v = 0; v < nm.values.len; v++) {
    const ir_value_t *x = &nm.values.items[v];
    if (x->kind != V_CONST) continue;
    isa_const_t *kk = &c->consts.items[x->konst];
    if (kk->origin != ISA_CONST_WEIGHTS || kk->shard_parts) continue;
    kk->stage_ranks = kk->stage_ranks && (kk->stage != x->device || kk->stage_ranks != (uint32_t)N) ? UINT32_MAX : (uint32_t)N;
    kk->stage = x->device;
  }
  for (size_t i = 0; i < c->consts.len; i++)
    if (c->consts.items[i].stage_ranks == UINT32_MAX) c->consts.items[i].stage_ranks = 0, c->consts.items[i].stage = 0;
  size_t nn = f->nodes.len;
  for (int k = 0; k < N; k++) {
    const ir_node_t *first = NULL, *last = NULL;
    uint32_t nops = 0, nk = 0;
    for (size_t i = 0; i + 1 < nn; i++)
      if (p->nstage[i] == k) {
        if (!first) first = &f->nodes.items[i];
        last = &f->nodes.items[i], nops++;
      }
    for (size_t v = 0; v < nm.values.len; v++)
      nk += nm.values.items[v].kind == V_CONST && nm.values.items[v].device == k && c->consts.items[nm.values.items[v].konst].stage_ranks;
    asm_note(c, "%s:%u:%u: note: pipeline parallel: stage %d (device %d, stream %d): %u op%s to line %u, %u weight%s, cost %.3g", c->path, first->line, first->col,
             k, k, asm_device_stream(k), nops, nops == 1 ? "" : "s", last->line, nk, nk == 1 ? "" : "s", cost[k]);
  }
  RILL_VEC_FREE(c->a, &f->nodes);
  RILL_VEC_FREE(c->a, &f->values);
  *f = nm;
  asm_note(c, "%s:%u:%u: note: pipeline parallel: @main cut into %d stages on %d devices, %d micro-batch%s (copies into device k on stream %d-k)", c->path,
           line, col, N, N, p->M, p->M == 1 ? "" : "es", ISA_MAX_STREAMS - (N - 1));
  return NULL;
}

rill_status_t asm_pipeline_parallel(asm_ctx_t *c, ir_func_t *funcs, bool *built, size_t *nf, size_t cap) {
  const int N = c->opts->pipeline_parallel, M = c->opts->micro_batches > 0 ? c->opts->micro_batches : N;
  size_t n0 = *nf;
  int32_t mi = asm_find_func(c, "main", 4);
  if (mi < 0 || !built[mi]) return asm_error(c, 1, 1, "--pipeline-parallel=%d: the module has no @main (written as ops) to cut into stages", N);
  for (size_t i = 0; i < n0; i++)
    if ((int32_t)i != mi)
      asm_note(c, "%s:%u:%u: note: pipeline parallel: @%s stays whole (only @main is cut into stages)", c->path, c->funcs.items[i].line, c->funcs.items[i].col,
           c->funcs.items[i].name);
  if (M > 64) return asm_error(c, 1, 1, "--micro-batches=%d: at most 64", M);
  pp_t p = {.c = c, .main = &funcs[mi], .fd = &c->funcs.items[mi], .N = N, .M = M};
  ir_func_t *f = p.main;
  size_t nv = f->values.len, nn = f->nodes.len;
  p.ax = rill__alloc(c->a, nv ? nv : 1);
  p.vstage = rill__alloc(c->a, sizeof(int) * (nv ? nv : 1));
  p.vlast = rill__alloc(c->a, sizeof(int) * (nv ? nv : 1));
  p.nstage = rill__alloc(c->a, sizeof(int) * (nn ? nn : 1));
  double *cost = rill__alloc(c->a, sizeof(double) * (size_t)N);
  uint32_t *fi = rill__alloc(c->a, sizeof(uint32_t) * ((size_t)N * 2 + nv));
  uint32_t nres = nn ? f->nodes.items[nn - 1].nargs : 0;
  p.zero = rill__alloc(c->a, sizeof(uint32_t) * (nres ? nres : 1));
  rill_status_t st = p.ax && p.vstage && p.vlast && p.nstage && cost && fi && p.zero ? NULL : rill__oom();
  if (p.zero) memset(p.zero, 0xff, sizeof(uint32_t) * (nres ? nres : 1));
  if (!st) st = check_main(&p);
  if (st) goto done;
  uint32_t line = p.fd->line, col = p.fd->col;
  memset(p.ax, -1, nv ? nv : 1);
  if (M > 1 && (st = find_rows(&p))) goto done;
  partition(&p, cost);
  for (size_t v = 0; v < nv; v++) p.vstage[v] = -1, p.vlast[v] = -1;
  for (size_t i = 0; i < nn; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    for (uint32_t r = 0; r < n->nres; r++) p.vstage[n->res[r]] = p.nstage[i];
    for (uint32_t j = 0; j < n->nargs; j++)
      if (p.vlast[n->args[j]] < p.nstage[i]) p.vlast[n->args[j]] = p.nstage[i];
  }
  if (c->opts->parallel_devices) {
    st = main_devices(&p, cost, line, col);
    goto done;
  }
  /* the functions: stages, then the picks (@main.pick1 .. N-2; @main picks stage 0) */
  for (int k = 0; !st && k < N; k++) {
    char name[64];
    snprintf(name, sizeof name, "main.stage%d", k);
    st = new_func(&p, funcs, built, nf, cap, name, &fi[k]);
    f = p.main = &funcs[mi];
  }
  for (int k = 1; !st && k + 1 < N; k++) {
    char name[64];
    snprintf(name, sizeof name, "main.pick%d", k);
    st = new_func(&p, funcs, built, nf, cap, name, &fi[N + k]);
  }
  p.fd = &c->funcs.items[mi];
  for (int k = 0; !st && k < N; k++) st = build_stage(&p, &funcs[fi[k]], k);
  for (int k = 1; !st && k + 1 < N; k++)
    st = build_pick(&p, &funcs[fi[N + k]], k, funcs[fi[k]].index, k + 2 < N ? funcs[fi[N + k + 1]].index : funcs[fi[N - 1]].index, line, col);
  if (st) goto done;
  /* @main: pick stage 0 or the rest */
  ir_func_t nm;
  memset(&nm, 0, sizeof nm);
  nm.index = f->index;
  nm.nstreams = 1;
  nm.nparams = f->nparams;
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    ir_value_t v = f->values.items[i];
    v.def = -1, v.slot = -1, v.reg = -1, v.last_use = 0, v.escapes = false;
    st = RILL_VEC_PUSH(c->a, &nm.values, v);
  }
  if (!st) st = build_pick(&p, &nm, 0, funcs[fi[0]].index, N > 2 ? funcs[fi[N + 1]].index : funcs[fi[1]].index, line, col);
  if (st) {
    RILL_VEC_FREE(c->a, &nm.nodes);
    RILL_VEC_FREE(c->a, &nm.values);
    goto done;
  }
  for (int k = 0; k < N; k++) {
    /* each stage's weights are its rank's: uploaded by that rank only */
    ir_func_t *g = &funcs[fi[k]];
    for (size_t v = 0; v < g->values.len; v++) {
      ir_value_t *x = &g->values.items[v];
      if (x->kind != V_CONST) continue;
      isa_const_t *kk = &c->consts.items[x->konst];
      if (kk->origin != ISA_CONST_WEIGHTS || kk->shard_parts) continue;
      kk->stage_ranks = kk->stage_ranks && (kk->stage != (uint32_t)k || kk->stage_ranks != (uint32_t)N) ? UINT32_MAX : (uint32_t)N;
      kk->stage = (uint32_t)k;
    }
  }
  for (size_t i = 0; i < c->consts.len; i++)
    if (c->consts.items[i].stage_ranks == UINT32_MAX) c->consts.items[i].stage_ranks = 0, c->consts.items[i].stage = 0; /* used by several stages: every rank's */
  for (int k = 0; k < N; k++) {
    const ir_node_t *first = NULL, *last = NULL;
    uint32_t nops = 0, nk = 0, nx = k + 1 < N ? crossing(&p, k + 1, fi + N) : 0; /* (fi's second half is free by now) */
    for (size_t i = 0; i + 1 < nn; i++)
      if (p.nstage[i] == k) {
        if (!first) first = &f->nodes.items[i];
        last = &f->nodes.items[i], nops++;
      }
    for (size_t v = 0; v < funcs[fi[k]].values.len; v++)
      nk += funcs[fi[k]].values.items[v].kind == V_CONST && c->consts.items[funcs[fi[k]].values.items[v].konst].stage_ranks;
    char sends[160] = "";
    if (nx == 1) snprintf(sends, sizeof sends, ", sends %%%s on", f->values.items[fi[N]].name);
    else if (nx > 1) snprintf(sends, sizeof sends, ", sends %u values on", nx);
    asm_note(c, "%s:%u:%u: note: pipeline parallel: stage %d (rank %d): %u op%s to line %u, %u weight%s, cost %.3g%s", c->path, first->line, first->col, k, k, nops,
         nops == 1 ? "" : "s", last->line, nk, nk == 1 ? "" : "s", cost[k], sends);
  }
  RILL_VEC_FREE(c->a, &f->nodes);
  RILL_VEC_FREE(c->a, &f->values);
  *f = nm;
  asm_note(c, "%s:%u:%u: note: pipeline parallel: @main cut into %d stages, %d micro-batch%s", c->path, line, col, N, M, M == 1 ? "" : "es");
done:
  rill__free(c->a, p.ax);
  rill__free(c->a, p.vstage);
  rill__free(c->a, p.vlast);
  rill__free(c->a, p.nstage);
  rill__free(c->a, cost);
  rill__free(c->a, fi);
  rill__free(c->a, p.zero);
  return st;
}
