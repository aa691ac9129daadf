/* devices_form.c: --parallel-form=devices (docs/tensor_parallel.md, "The
 * device form").
 *
 * --tensor-parallel=N and --data-parallel=N first write the rank form: a
 * function that every rank of a job of N runs (SPMD), with rank(), ranks(),
 * shard constants (rank r's part r) and collectives over the job's ranks.
 * This pass, after the optimising passes, turns such a function into one
 * that a single VM of N devices runs: device d plays rank d, on stream d of
 * device d. Device 0 runs the function as written (stream 0); device d > 0
 * runs a copy of each op that a collective needs on it (found backwards
 * from the collectives, so whole values that only device 0 returns are not
 * computed N times), interleaved op by op with device 0's so that every
 * device has work queued; a collective over the ranks becomes the device
 * form's N parts (`part=d, parts=N`, consecutive, part d on stream d);
 * rank() is the literal d on device d and ranks() the literal N; a
 * constant is loaded on each device that reads it (a shard constant gives
 * device d its part d: the VM's rule for a module whose functions use as
 * many devices as its shards have parts); a parameter, or a result of a
 * call, if or while (issued on device 0), that device d needs is copied
 * there (`copy {device=d}`) after an event on stream 0. The result is
 * checked by the verifier like any hand-scheduled body.
 *
 * A state that device d reads or updates is a state of its own there,
 * `NAME.devD` (a split KV cache: device d's part), which the function loads
 * on a stream of device d (bytecode 1.11: a state lives on the device it is
 * loaded on). Not here: send/recv (the pipeline's exchanges have their
 * own device form, pipeline_parallel.c), and a state read on device d in a
 * function with calls, if or while (which may change any state, on device
 * 0) are errors at their position.
 */
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

typedef struct dv {
  asm_ctx_t *c;
  ir_func_t *f;
  int N;
  size_t nv;          /* values of the function as the pass found it */
  size_t nn;          /* its nodes */
  int32_t *ver;       /* [d * nv + v]: v's value on device d, -1 none yet */
  uint8_t *need;      /* [d * nn + i]: node i runs on device d */
  uint8_t *copy;      /* [d * nv + v]: v (a parameter or a call's result) is copied to device d */
  int32_t *cval;      /* [k * N + d]: the value loading constant k on device d, -1 none */
  size_t nconsts;     /* constants cval has room for */
  int32_t *pos;       /* [d * nn + i]: where node i's copy on device d went, -1 none */
  asm_nodes_t out;
} dv_t;

static const char *const FORM = "--parallel-form=devices";

static int split_count(const asm_ctx_t *c) {
  const rill_asm_options_t *o = c->opts;
  if (!o || !o->parallel_devices) return 0;
  return o->tensor_parallel > 1 ? o->tensor_parallel : o->data_parallel > 1 ? o->data_parallel : 0;
}

/* The value of f loading module constant k on device d. */
static rill_status_t const_on(dv_t *g, uint32_t k, int d, uint32_t *out) {
  ir_func_t *f = g->f;
  if (k >= g->nconsts) { /* (a literal the pass made) */
    size_t n = g->c->consts.len > k + 1 ? g->c->consts.len : k + 1;
    int32_t *x = rill__realloc(g->c->a, g->cval, sizeof(int32_t) * (size_t)g->N * n);
    if (!x) return rill__oom();
    for (size_t q = (size_t)g->N * g->nconsts; q < (size_t)g->N * n; q++) x[q] = -1;
    g->cval = x;
    g->nconsts = n;
  }
  int32_t *slot = &g->cval[(size_t)k * g->N + d];
  if (*slot >= 0) { *out = (uint32_t)*slot; return NULL; }
  const isa_const_t *kc = &g->c->consts.items[k];
  ir_value_t v = {.name = kc->name, .type = kc->type, .kind = V_CONST, .konst = k, .def = -1, .slot = -1, .reg = -1, .device = (uint8_t)d};
  *out = (uint32_t)f->values.len;
  *slot = (int32_t)*out;
  return RILL_VEC_PUSH(g->c->a, &f->values, v);
}

static rill_status_t push(dv_t *g, ir_node_t n) {
  for (uint32_t r = 0; r < n.nres; r++) g->f->values.items[n.res[r]].def = (int32_t)g->out.len;
  return RILL_VEC_PUSH(g->c->a, &g->out, n);
}

rill_status_t asm_event_edge(asm_ctx_t *c, asm_nodes_t *out, const ir_node_t *at, int from, int to) {
  ir_node_t add = {.kind = N_ADD_EVENT, .line = at->line, .col = at->col, .stream = from, .event = 0, .event_stream = from};
  ir_node_t wait = {.kind = N_WAIT_EVENT, .line = at->line, .col = at->col, .stream = to, .event = 0, .event_stream = to};
  RILL_TRY(RILL_VEC_PUSH(c->a, out, add));
  return RILL_VEC_PUSH(c->a, out, wait);
}

void asm_take_nodes(asm_ctx_t *c, ir_func_t *f, asm_nodes_t *out) {
  RILL_VEC_FREE(c->a, &f->nodes);
  f->nodes.items = out->items;
  f->nodes.len = out->len;
  f->nodes.cap = out->cap;
  *out = (asm_nodes_t){0};
  f->hand_scheduled = true;
}

rill_status_t asm_device_copy(asm_ctx_t *c, ir_func_t *f, asm_nodes_t *out, const ir_node_t *at, uint32_t v, int from_dev, int stream, uint32_t *out_y) {
  RILL_TRY(asm_add_result(c, f, f->values.items[v].name, &f->values.items[v].type, out_y));
  ir_node_t n = {.kind = N_OP, .line = at->line, .col = at->col, .stream = stream, .nargs = 1, .nres = 1, .from_device = 1 + from_dev};
  n.args = rill__arena_alloc(&c->arena, sizeof(uint32_t));
  n.res = rill__arena_alloc(&c->arena, sizeof(uint32_t));
  if (!n.args || !n.res) return rill__oom();
  n.args[0] = v;
  n.res[0] = *out_y;
  RILL_TRY(asm_retype(c, f, &n, "copy", NULL, 0));
  f->values.items[*out_y].def = (int32_t)out->len;
  return RILL_VEC_PUSH(c->a, out, n);
}

/* v (on device 0, made by stream 0's work so far) copied to each device that needs it. */
static rill_status_t copy_out(dv_t *g, const ir_node_t *at, uint32_t v) {
  for (int d = 1; d < g->N; d++) {
    if (!g->copy[(size_t)d * g->nv + v]) continue;
    int ds = asm_device_stream(d);
    uint32_t y;
    RILL_TRY(asm_event_edge(g->c, &g->out, at, 0, ds));
    RILL_TRY(asm_device_copy(g->c, g->f, &g->out, at, v, 0, ds, &y));
    g->ver[(size_t)d * g->nv + v] = (int32_t)y;
  }
  return NULL;
}

/* Module state si's copy for device d (d > 0): state `NAME.devD`, made once for the module. */
static rill_status_t state_for(dv_t *g, uint32_t si, int d, uint32_t *out) {
  asm_ctx_t *c = g->c;
  char name[512];
  snprintf(name, sizeof name, "%s.dev%d", c->states.items[si].name, d);
  int32_t k = asm_find_state(c, name, strlen(name));
  if (k >= 0) { *out = (uint32_t)k; return NULL; }
  isa_state_t x = c->states.items[si];
  if (!(x.name = rill__arena_strndup(&c->arena, name, strlen(name)))) return rill__oom();
  *out = (uint32_t)c->states.len;
  RILL_TRY(rill__map_put(&c->state_map, x.name, strlen(x.name), *out));
  return RILL_VEC_PUSH(c->a, &c->states, x);
}

/* State version v (a V_STATE value) on device d: the same version of the device's own state. */
static rill_status_t state_on(dv_t *g, uint32_t v, int d, uint32_t *out) {
  ir_func_t *f = g->f;
  int32_t *slot = &g->ver[(size_t)d * g->nv + v];
  if (*slot >= 0) { *out = (uint32_t)*slot; return NULL; }
  ir_value_t x = f->values.items[v];
  uint32_t si, prev = 0;
  if (x.prev >= 0) RILL_TRY(state_on(g, (uint32_t)x.prev, d, &prev));
  RILL_TRY(state_for(g, x.konst, d, &si));
  x.konst = si;
  x.name = g->c->states.items[si].name;
  x.prev = x.prev >= 0 ? (int32_t)prev : -1;
  x.device = (uint8_t)d;
  x.slot = -1, x.reg = -1;
  *out = (uint32_t)f->values.len;
  g->ver[(size_t)d * g->nv + v] = (int32_t)*out;
  return RILL_VEC_PUSH(g->c->a, &f->values, x);
}

/* Operand v of a node on device d: its value there. */
static rill_status_t arg_on(dv_t *g, const ir_node_t *n, uint32_t v, int d, uint32_t *out) {
  ir_func_t *f = g->f;
  if (v < g->nv && g->ver[(size_t)d * g->nv + v] >= 0) { *out = (uint32_t)g->ver[(size_t)d * g->nv + v]; return NULL; }
  const ir_value_t *x = &f->values.items[v];
  if (x->kind == V_CONST) return const_on(g, x->konst, d, out);
  if (x->kind == V_STATE && d > 0 && v < g->nv) return state_on(g, v, d, out);
  if (d == 0) { *out = v; return NULL; }
  return asm_error(g->c, n->line, n->col, "internal: %s: %%%s is not on device %d", FORM, x->name ? x->name : "?", d);
}

/* One op node of the rank form on device d (d > 0: a copy with new results). */
static rill_status_t op_on(dv_t *g, const ir_node_t *src, int d) {
  ir_func_t *f = g->f;
  asm_ctx_t *c = g->c;
  const isa_opdecl_t *decl = asm_decl(c, src);
  const ops_def_t *def = ops_find(decl->name);
  int coll = def ? ops_collective(def) : OPS_COLL_NONE;
  if (coll == OPS_COLL_RANK || coll == OPS_COLL_RANKS) {
    uint32_t lit;
    RILL_TRY(asm_literal_value(c, f, RILL_I64, coll == OPS_COLL_RANK ? d : g->N, &lit));
    const ir_value_t *x = &f->values.items[lit];
    RILL_TRY(const_on(g, x->konst, d, &lit));
    g->ver[(size_t)d * g->nv + src->res[0]] = (int32_t)lit;
    return NULL;
  }
  ir_node_t n = *src;
  n.stream = asm_device_stream(d);
  n.args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n.nargs ? n.nargs : 1));
  n.res = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (n.nres ? n.nres : 1));
  if (!n.args || !n.res) return rill__oom();
  for (uint32_t j = 0; j < n.nargs; j++) RILL_TRY(arg_on(g, src, src->args[j], d, &n.args[j]));
  for (uint32_t r = 0; r < n.nres; r++) {
    if (d == 0) n.res[r] = src->res[r];
    else RILL_TRY(asm_add_result(c, f, f->values.items[src->res[r]].name, &f->values.items[src->res[r]].type, &n.res[r]));
    g->ver[(size_t)d * g->nv + src->res[r]] = (int32_t)n.res[r];
  }
  if (coll != OPS_COLL_NONE) {
    /* the device form's part d of N: the rank form's attributes but `ranks` */
    isa_attr_t *a = rill__arena_alloc(&c->arena, sizeof(isa_attr_t) * (decl->nattrs + 2));
    if (!a) return rill__oom();
    uint32_t na = 0;
    for (uint32_t k = 0; k < decl->nattrs; k++)
      if (strcmp(decl->attrs[k].name, "ranks") != 0) a[na++] = decl->attrs[k];
    isa_attr_t *part = asm_one_attr(c, "part", ISA_ATTR_INT, d, NULL), *parts = asm_one_attr(c, "parts", ISA_ATTR_INT, g->N, NULL);
    if (!part || !parts) return rill__oom();
    a[na++] = *part;
    a[na++] = *parts;
    const char *name = decl->name;
    RILL_TRY(asm_retype(c, f, &n, name, a, na));
  }
  g->pos[(size_t)d * g->nn + (size_t)(src - f->nodes.items)] = (int32_t)g->out.len;
  return push(g, n);
}

rill_status_t asm_pass_devices(asm_ctx_t *c, ir_func_t *f) {
  int N = split_count(c);
  if (N <= 1) return NULL;
  const func_decl_t *fd = &c->funcs.items[f->index];
  /* only functions that the split made collective take the device form */
  bool any = false;
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (n->kind != N_OP) continue;
    const ops_def_t *def = ops_find(asm_decl(c, n)->name);
    int coll = def ? ops_collective(def) : OPS_COLL_NONE;
    if (coll == OPS_COLL_NONE) continue;
    if (ops_coll_is_p2p(coll) || coll == OPS_COLL_SENDRECV)
      return asm_error(c, n->line, n->col, "%s: %s (a send or receive between ranks) has no device form here", FORM, asm_decl(c, n)->name);
    any = true;
  }
  if (!any) return NULL;
  if (f->hand_scheduled)
    return asm_error(c, fd->line, fd->col, "%s: @%s schedules its own streams; the device form puts device d's part on stream d", FORM, fd->name);
  if (N > ISA_MAX_DEVICES || N > ISA_MAX_STREAMS)
    return asm_error(c, fd->line, fd->col, "%s: %d devices (a VM holds at most %d)", FORM, N, ISA_MAX_DEVICES);
  dv_t g = {.c = c, .f = f, .N = N, .nv = f->values.len, .nn = f->nodes.len, .nconsts = c->consts.len};
  rill_status_t st = NULL;
  g.ver = rill__alloc(c->a, sizeof(int32_t) * (size_t)N * (g.nv ? g.nv : 1));
  g.need = rill__calloc(c->a, (size_t)N * (g.nn ? g.nn : 1), 1);
  g.copy = rill__calloc(c->a, (size_t)N * (g.nv ? g.nv : 1), 1);
  g.cval = rill__alloc(c->a, sizeof(int32_t) * (size_t)N * (g.nconsts ? g.nconsts : 1));
  g.pos = rill__alloc(c->a, sizeof(int32_t) * (size_t)N * (g.nn ? g.nn : 1));
  if (!g.ver || !g.need || !g.copy || !g.cval || !g.pos) { st = rill__oom(); goto done; }
  for (size_t k = 0; k < (size_t)N * g.nn; k++) g.pos[k] = -1;
  for (size_t k = 0; k < (size_t)N * g.nv; k++) g.ver[k] = -1;
  const ir_node_t *calls = NULL;
  for (size_t i = 0; i < f->nodes.len && !calls; i++)
    if (f->nodes.items[i].kind == N_CALL || f->nodes.items[i].kind == N_IF || f->nodes.items[i].kind == N_WHILE) calls = &f->nodes.items[i];
  for (size_t k = 0; k < (size_t)N * g.nconsts; k++) g.cval[k] = -1;
  for (size_t v = 0; v < g.nv; v++)
    if (f->values.items[v].kind == V_CONST && g.cval[(size_t)f->values.items[v].konst * N] < 0) g.cval[(size_t)f->values.items[v].konst * N] = (int32_t)v;
  /* Backwards: what each device d > 0 runs (the collectives, and what they need there). */
  for (size_t i = g.nn; i-- > 0;) {
    const ir_node_t *n = &f->nodes.items[i];
    if (n->kind != N_OP) continue;
    const ops_def_t *def = ops_find(asm_decl(c, n)->name);
    bool coll = def && ops_collective(def) != OPS_COLL_NONE && ops_collective(def) != OPS_COLL_RANK && ops_collective(def) != OPS_COLL_RANKS;
    coll |= asm_is_op(c, n, "update"); /* every device keeps its state as every rank does */
    for (int d = 1; d < N; d++) {
      if (coll) g.need[(size_t)d * g.nn + i] = 1;
      if (!g.need[(size_t)d * g.nn + i]) continue;
      for (uint32_t j = 0; j < n->nargs; j++) {
        const ir_value_t *x = &f->values.items[n->args[j]];
        if (x->kind == V_CONST) continue;
        if (x->kind == V_STATE) {
          /* device d keeps a state of its own (`NAME.devD`): a split KV cache its part, a whole one its copy */
          if (calls) {
            st = asm_error(c, calls->line, calls->col, "%s: @%s has a %s and reads state %%%s on device %d: a call, if or while (issued on device 0) may change any state, "
                           "which the devices' own states would not see; move the state's use into a function without them", FORM, fd->name,
                           calls->kind == N_CALL ? "call" : calls->kind == N_IF ? "if" : "while", x->name ? x->name : "?", d);
            goto done;
          }
          continue;
        }
        if (x->def >= 0 && f->nodes.items[x->def].kind == N_OP) g.need[(size_t)d * g.nn + (size_t)x->def] = 1;
        else g.copy[(size_t)d * g.nv + n->args[j]] = 1;
      }
      /* a state version's updates before this read run on d too */
      for (uint32_t j = 0; j < n->nargs; j++) {
        const ir_value_t *x = &f->values.items[n->args[j]];
        for (; x->kind == V_STATE && x->def >= 0; x = x->prev >= 0 ? &f->values.items[x->prev] : NULL) {
          if (f->nodes.items[x->def].kind == N_OP) g.need[(size_t)d * g.nn + (size_t)x->def] = 1;
          if (x->prev < 0) break;
        }
      }
    }
  }
  for (size_t v = 0; v < g.nv; v++) g.ver[v] = (int32_t)v;
  /* Forwards: parameters copied out first, then each node on device 0 and its copies. */
  {
    ir_node_t entry = {.line = fd->line, .col = fd->col};
    for (size_t v = 0; !st && v < g.nv; v++)
      if (f->values.items[v].kind == V_PARAM) st = copy_out(&g, &entry, (uint32_t)v);
  }
  for (size_t i = 0; !st && i < g.nn; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (n->kind == N_OP) {
      for (int d = 0; !st && d < N; d++)
        if (d == 0 || g.need[(size_t)d * g.nn + i]) st = op_on(&g, n, d);
      continue;
    }
    ir_node_t m = *n;
    m.stream = 0;
    m.args = rill__arena_alloc(&c->arena, sizeof(uint32_t) * (m.nargs ? m.nargs : 1));
    if (!m.args) { st = rill__oom(); break; }
    for (uint32_t j = 0; !st && j < m.nargs; j++) st = arg_on(&g, n, n->args[j], 0, &m.args[j]);
    g.pos[i] = (int32_t)g.out.len;
    if (!st) st = push(&g, m);
    for (uint32_t r = 0; !st && r < n->nres; r++) st = copy_out(&g, n, n->res[r]);
  }
  if (st) goto done;
  /* state versions made by an update (not a node's result): their node's new position */
  for (size_t v = 0; v < f->values.len; v++) {
    ir_value_t *x = &f->values.items[v];
    if (x->kind == V_STATE && x->def >= 0 && (size_t)x->def < g.nn) x->def = g.pos[(size_t)x->device * g.nn + (size_t)x->def];
  }
  asm_take_nodes(c, f, &g.out);
  f->nstreams = N > 1 ? (uint32_t)asm_device_stream(1) + 1 : 1;
  for (int d = 1; d < N; d++) f->sdev[asm_device_stream(d)] = (uint8_t)d;
  f->events_used |= 1;
done:
  RILL_VEC_FREE(c->a, &g.out);
  rill__free(c->a, g.ver);
  rill__free(c->a, g.need);
  rill__free(c->a, g.copy);
  rill__free(c->a, g.cval);
  rill__free(c->a, g.pos);
  return st;
}
