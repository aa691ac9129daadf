/* passes.c: the pass pipeline over a function's IR, and emission.
 *
 *   fold         (-O1) ops over constants evaluated; batch_norm after a
 *                conv2d or linear with constant weights folded into them
 *   fuse         (-O1) groups of elementwise ops become one op `fused`
 *   concat       (-O1) a concat whose operands are runs of its result's
 *                bytes, made by ops of the function, is written in place:
 *                the operands are views of its result's slot
 *   schedule     assigns each node a stream and inserts the events between
 *                streams (schedule.c); hand-scheduled bodies keep theirs
 *   liveness     uses of each value; a call, if or while result may be one
 *                of its arguments, so arguments live as long as results
 *   memory-plan  op results that do not escape share storage slots; a slot
 *                is reused only when every use of its earlier values is
 *                ordered before the new definition on every stream; where
 *                streams rarely meet, a barrier (events) frees a slot once
 *                the slots pass a bound; an in-place concat's operands and
 *                result share one slot
 *   regalloc     registers: parameters, constants, slots, then values with
 *                registers of the same type reused after their last use
 *   emit         instructions, with fork/join around multi-stream bodies
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asm.h"

typedef RILL_VEC(uint32_t) u32vec_t;

/* ---- op interning ---- */
static rill_status_t key_types(rill_buf_t *k, const rill_type_t *t, uint32_t n) {
  RILL_TRY(rill__buf_u32(k, n));
  for (uint32_t i = 0; i < n; i++) {
    RILL_TRY(rill__buf_u32(k, (uint32_t)t[i].dtype | (uint32_t)t[i].rank << 8));
    for (int d = 0; d < t[i].rank; d++) RILL_TRY(rill__buf_u64(k, (uint64_t)t[i].dims[d]));
  }
  return NULL;
}

rill_status_t asm_intern_op(asm_ctx_t *c, const char *name, const rill_type_t *in, uint32_t nin,
                            const rill_type_t *out, uint32_t nout, const isa_attr_t *attrs,
                            uint32_t nattrs, uint32_t *out_index) {
  rill_buf_t k;
  rill__buf_init(&k, c->a);
  rill_status_t st = rill__buf_append(&k, name, strlen(name) + 1);
  if (!st) st = key_types(&k, in, nin);
  if (!st) st = key_types(&k, out, nout);
  for (uint32_t i = 0; !st && i < nattrs; i++) {
    const isa_attr_t *a = &attrs[i];
    st = rill__buf_append(&k, a->name, strlen(a->name) + 1);
    if (!st) st = rill__buf_u32(&k, (uint32_t)a->kind | a->count << 8);
    for (uint32_t j = 0; !st && j < a->count; j++) {
      if (a->kind == ISA_ATTR_STRING) st = rill__buf_append(&k, a->str, strlen(a->str) + 1);
      else if (a->kind == ISA_ATTR_FLOAT || a->kind == ISA_ATTR_FLOATS) st = rill__buf_append(&k, &a->floats[j], 8);
      else st = rill__buf_u64(&k, (uint64_t)a->ints[j]);
    }
  }
  if (st) { rill__buf_free(&k); return st; }
  if (rill__map_get(&c->op_map, k.data, k.len, out_index)) { rill__buf_free(&k); return NULL; }
  uint8_t *key = rill__arena_memdup(&c->arena, k.data, k.len);
  size_t klen = k.len;
  rill__buf_free(&k);
  isa_opdecl_t d = {.name = name, .nattrs = nattrs, .nin = nin, .nout = nout};
  d.in = rill__arena_memdup(&c->arena, in, sizeof(rill_type_t) * nin);
  d.out = rill__arena_memdup(&c->arena, out, sizeof(rill_type_t) * nout);
  d.attrs = nattrs ? rill__arena_memdup(&c->arena, attrs, sizeof(isa_attr_t) * nattrs) : NULL;
  if (!key || !d.in || !d.out || (nattrs && !d.attrs)) return rill__oom();
  *out_index = (uint32_t)c->ops.len;
  RILL_TRY(rill__map_put(&c->op_map, key, klen, *out_index));
  return RILL_VEC_PUSH(c->a, &c->ops, d);
}

/* Ops whose result is the operand's bytes under another shape: emitted as
 * `alias` (a view), planned as an alias of the operand. */
static bool is_view_op(const asm_ctx_t *c, const ir_node_t *n) {
  if (n->kind != N_OP) return false;
  const char *name = c->ops.items[n->target].name;
  return !strcmp(name, "reshape") || !strcmp(name, "flatten") || !strcmp(name, "squeeze") || !strcmp(name, "unsqueeze");
}
bool asm_is_view(const asm_ctx_t *c, const ir_node_t *n) { return is_view_op(c, n); }

int32_t asm_state_root(const asm_ctx_t *c, const ir_func_t *f, uint32_t v) {
  for (;;) {
    const ir_value_t *x = &f->values.items[v];
    if (x->kind == V_STATE) return (int32_t)v;
    if (x->kind != V_RESULT || x->def < 0 || !is_view_op(c, &f->nodes.items[x->def])) return -1;
    v = f->nodes.items[x->def].args[0];
  }
}

bool asm_touches_state(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n) {
  if (n->kind == N_OP) {
    const ops_def_t *def = ops_find(asm_decl(c, n)->name);
    if (def && def->effect) return true;
  }
  for (uint32_t j = 0; j < n->nargs; j++)
    if (asm_state_root(c, f, n->args[j]) >= 0) return true;
  return false;
}

/* Whether a node's results may share their arguments' memory (an in-place
 * split's results are parts of its operand). */
static bool aliases(const asm_ctx_t *c, const ir_node_t *n) {
  return n->kind == N_CALL || n->kind == N_IF || n->kind == N_WHILE || is_view_op(c, n) || (n->in_place && asm_is_op(c, n, "split"));
}

void asm_replace_nodes(asm_ctx_t *c, ir_func_t *f, ir_node_t *items, size_t len, size_t cap, const int32_t *newpos) {
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].def >= 0) f->values.items[v].def = newpos[f->values.items[v].def];
  RILL_VEC_FREE(c->a, &f->nodes);
  f->nodes.items = items;
  f->nodes.len = len;
  f->nodes.cap = cap;
}

/* ---- schedule ---- */
static rill_status_t pass_schedule(asm_ctx_t *c, ir_func_t *f) { return asm_schedule(c, f); }

/* ---- liveness ---- */
static rill_status_t pass_liveness(asm_ctx_t *c, ir_func_t *f) {
  for (size_t v = 0; v < f->values.len; v++) {
    f->values.items[v].last_use = f->values.items[v].def;
    f->values.items[v].escapes = false;
  }
  for (size_t i = f->nodes.len; i-- > 0;) {
    ir_node_t *n = &f->nodes.items[i];
    int32_t extend = (int32_t)i;
    if (n->kind == N_RETURN) {
      for (uint32_t j = 0; j < n->nargs; j++) {
        f->values.items[n->args[j]].escapes = true;
        f->values.items[n->args[j]].last_use = INT32_MAX;
      }
      continue;
    }
    bool alias = aliases(c, n);
    if (alias)
      for (uint32_t j = 0; j < n->nres; j++) {
        const ir_value_t *r = &f->values.items[n->res[j]];
        if (r->last_use > extend) extend = r->last_use;
      }
    for (uint32_t j = 0; j < n->nargs; j++) {
      ir_value_t *a = &f->values.items[n->args[j]];
      int32_t u = alias ? extend : (int32_t)i;
      if (u == INT32_MAX) a->escapes = true;
      if (u > a->last_use) a->last_use = u;
    }
  }
  return NULL;
}

/* ---- concats written in place ---- */
/* Where an operand starts in an in-place concat's result: cuBLASLt, cuDNN
 * and the 16-byte vectorised kernels want aligned pointers, and cudaMalloc
 * aligns to 256. */
#define IN_PLACE_ALIGN 256

/* Whether concat node n can be written in place, with its operands' byte
 * offsets in its result into offs: every dimension before the axis is 1
 * (so each operand is one run of the result's bytes), every size a number,
 * the result not escaping, and each operand of the result's dtype, made by
 * an op of this function (not a view of another value, not an in-place
 * concat's result), not escaping, in no other in-place concat, named once,
 * at an offset that is a multiple of IN_PLACE_ALIGN. Ops write only their
 * results, so no later op disturbs an operand's bytes. */
static bool concat_fits(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n, uint32_t *offs) {
  if (n->nres != 1) return false;
  const ir_value_t *y = &f->values.items[n->res[0]];
  if (y->escapes || isa_type_is_sym(&y->type)) return false;
  int64_t axis = asm_concat_axis(c, n);
  for (int64_t d = 0; d < axis; d++)
    if (y->type.dims[d] != 1) return false;
  size_t off = 0, bytes;
  for (uint32_t j = 0; j < n->nargs; j++) {
    const ir_value_t *x = &f->values.items[n->args[j]];
    if (x->kind != V_RESULT || x->def < 0 || x->escapes || x->host || isa_type_is_sym(&x->type) || x->type.dtype != y->type.dtype)
      return false;
    const ir_node_t *p = &f->nodes.items[x->def];
    if (p->kind != N_OP || is_view_op(c, p) || p->in_place) return false;
    for (uint32_t k = 0; k < j; k++)
      if (n->args[k] == n->args[j]) return false;
    if (off % IN_PLACE_ALIGN || off > UINT32_MAX) return false;
    offs[j] = (uint32_t)off;
    rill__type_sizes(&x->type, NULL, &bytes);
    off += bytes;
  }
  return true;
}

/* Whether split node n's results can be parts of its operand, with their
 * byte offsets in it into offs: every dimension before the axis is 1 (each
 * result is one run of the operand's bytes), every size a number, each
 * offset a multiple of IN_PLACE_ALIGN, the operand made by an op of this
 * function on device 0 (so the memory plan gives it a slot: not a view,
 * not an in-place node's value, not an in-place concat's operand) and not
 * escaping, and no result escaping. Ops write only their results, so no
 * reader of a part sees it change; the operand's slot stays held through
 * the parts' last uses (aliases). */
static bool split_fits(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n, uint32_t *offs) {
  if (n->nargs != 1) return false;
  const ir_value_t *x = &f->values.items[n->args[0]];
  if (x->kind != V_RESULT || x->def < 0 || x->escapes || x->host || x->within || isa_type_is_sym(&x->type)) return false;
  const ir_node_t *p = &f->nodes.items[x->def];
  if (p->kind != N_OP || is_view_op(c, p) || p->in_place || f->sdev[p->stream] || f->sdev[n->stream]) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  const isa_attr_t *a = asm_attr(d, "axis");
  int64_t axis = a ? a->ints[0] : 0;
  if (axis < 0) axis += x->type.rank;
  for (int64_t k = 0; k < axis; k++)
    if (x->type.dims[k] != 1) return false;
  size_t off = 0, bytes;
  for (uint32_t j = 0; j < n->nres; j++) {
    const ir_value_t *y = &f->values.items[n->res[j]];
    if (y->escapes || y->host || isa_type_is_sym(&y->type) || off % IN_PLACE_ALIGN || off > UINT32_MAX) return false;
    offs[j] = (uint32_t)off;
    rill__type_sizes(&y->type, NULL, &bytes);
    off += bytes;
  }
  return true;
}

/* -O1: each concat that concat_fits is written in place: its operands
 * become views of its result's slot (the memory plan places them), and it
 * stays a node, of no cost, so the schedule orders its result's readers
 * after every operand's producer. */
static rill_status_t pass_concat(asm_ctx_t *c, ir_func_t *f) {
  if (f->hand_scheduled) return NULL;
  RILL_TRY(pass_liveness(c, f)); /* which values escape */
  for (size_t i = 0; i < f->nodes.len; i++) {
    ir_node_t *n = &f->nodes.items[i];
    if (!asm_is_op(c, n, "concat")) continue;
    uint32_t *offs = rill__arena_alloc(&c->arena, sizeof *offs * (n->nargs ? n->nargs : 1));
    if (!offs) return rill__oom();
    if (!concat_fits(c, f, n, offs)) continue;
    n->in_place = true;
    for (uint32_t j = 0; j < n->nargs; j++) {
      f->values.items[n->args[j]].host = n->res[0] + 1;
      f->values.items[n->args[j]].offset = offs[j];
    }
  }
  /* Splits after concats: a concat's operand is not split in place. */
  for (size_t i = 0; i < f->nodes.len; i++) {
    ir_node_t *n = &f->nodes.items[i];
    if (!asm_is_op(c, n, "split")) continue;
    uint32_t *offs = rill__arena_alloc(&c->arena, sizeof *offs * (n->nres ? n->nres : 1));
    if (!offs) return rill__oom();
    if (!split_fits(c, f, n, offs)) continue;
    n->in_place = true;
    for (uint32_t j = 0; j < n->nres; j++) {
      f->values.items[n->res[j]].within = n->args[0] + 1;
      f->values.items[n->res[j]].offset = offs[j];
    }
  }
  return NULL;
}

/* ---- memory planning ---- */
/* Multi-stream bodies: happens-before between nodes by vector clocks, kept
 * as the plan walks the nodes (a barrier it inserts changes what later
 * nodes have seen). Every node but an event gets a sequence number on its
 * stream, known in advance since barriers add only events. */
typedef struct clocks {
  uint32_t S;
  uint32_t *seq;    /* per node */
  uint32_t *vc;     /* S x S: what each stream has seen of each, so far */
  uint32_t *ev;     /* ISA_MAX_EVENTS x S: the clock each event carries */
} clocks_t;

static void clocks_step(clocks_t *k, const ir_node_t *n, uint32_t i) {
  uint32_t S = k->S, s = (uint32_t)n->stream;
  if (n->kind == N_ADD_EVENT) {
    memcpy(&k->ev[(size_t)n->event * S], &k->vc[(size_t)n->event_stream * S], 4 * S);
  } else if (n->kind == N_WAIT_EVENT) {
    uint32_t *mine = &k->vc[(size_t)n->event_stream * S];
    const uint32_t *e = &k->ev[(size_t)n->event * S];
    for (uint32_t t = 0; t < S; t++) if (e[t] > mine[t]) mine[t] = e[t];
  } else {
    k->vc[(size_t)s * S + s] = k->seq[i];
  }
}

/* Events named across the gap before node i (recorded before it, waited
 * for at or after it), found by one cursor per event moving forward. */
typedef struct ev_live {
  u32vec_t iv[ISA_MAX_EVENTS];          /* per event: pairs (first gap, last gap) */
  size_t at[ISA_MAX_EVENTS];
} ev_live_t;

static rill_status_t ev_live_build(asm_ctx_t *c, const ir_func_t *f, ev_live_t *L) {
  int64_t rec[ISA_MAX_EVENTS];
  for (int e = 0; e < ISA_MAX_EVENTS; e++) rec[e] = -1;
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (n->kind == N_ADD_EVENT) rec[n->event] = (int64_t)i;
    if (n->kind != N_WAIT_EVENT || rec[n->event] < 0) continue;
    u32vec_t *v = &L->iv[n->event];
    uint32_t lo = (uint32_t)rec[n->event] + 1, hi = (uint32_t)i;
    if (v->len && v->items[v->len - 2] == lo) v->items[v->len - 1] = hi;
    else if (RILL_VEC_PUSH(c->a, v, lo) || RILL_VEC_PUSH(c->a, v, hi)) return rill__oom();
  }
  return NULL;
}

/* An event free across the gap before node i (queried in increasing i), or -1. */
static int ev_free_at(ev_live_t *L, uint32_t i) {
  for (int e = 0; e < ISA_MAX_EVENTS - 1; e++) { /* the last stays free for the fork and join */
    while (L->at[e] < L->iv[e].len && L->iv[e].items[L->at[e] + 1] < i) L->at[e] += 2;
    if (L->at[e] >= L->iv[e].len || L->iv[e].items[L->at[e]] > i) return e;
  }
  return -1;
}

/* The memory plan's state. */
typedef struct plan {
  asm_ctx_t *c;
  ir_func_t *f;
  bool multi;
  uint32_t S;
  clocks_t k;
  u32vec_t *uses;                          /* multi-stream: per value, nodes that use it */
  RILL_VEC(uint64_t) size;
  RILL_VEC(int32_t) busy_until;            /* single stream: last use of the slot's values */
  RILL_VEC(uint32_t) last;                 /* multi-stream: per slot and stream, the last access's sequence number */
  /* in-place concats, per concat (group): */
  int32_t *group;                          /* per value: its group where it is an in-place concat's result */
  uint32_t *made;                          /* the operands made so far */
  int32_t *first;                          /* single stream: the first operand's node */
  uint32_t *low;                           /* multi-stream: per stream, the least any operand's node has seen of it */
} plan_t;

/* A symbolic value whose largest size is over this is allocated per run, at
 * the size of the run: a range as wide as a model allows (a sequence of up
 * to 65535 tokens) would make a slot for [S, S] of 32 GiB. */
#define PLAN_SYM_SLOT_MAX ((size_t)1 << 30)

/* The bytes a slot must hold for value v (a symbolic size takes its range's
 * largest), rounded up to 64; false where the size has no bound, or too
 * large a one (the value is allocated per run: alloc_tensor). */
static bool value_bytes(const plan_t *p, uint32_t v, size_t *bytes) {
  const rill_type_t *t = &p->f->values.items[v].type;
  if (isa_type_is_sym(t)) {
    if (!isa_sym_type_max_bytes(&p->c->syms, t, bytes) || *bytes > PLAN_SYM_SLOT_MAX) return false;
  } else {
    rill__type_sizes(t, NULL, bytes);
  }
  *bytes = (*bytes + 63) & ~(size_t)63;
  return true;
}

/* Best fit: whether slot sl suits `bytes` better than slot best (-1: none
 * yet): the smallest slot that holds it, else the largest one (it grows). */
static bool better_fit(const plan_t *p, int32_t best, size_t sl, size_t bytes) {
  if (best < 0) return true;
  uint64_t bs = p->size.items[best], ss = p->size.items[sl];
  bool fits_s = ss >= bytes, fits_b = bs >= bytes;
  return (fits_s && (!fits_b || ss < bs)) || (!fits_s && !fits_b && ss > bs);
}

/* Slot *best (a new one where it is -1) grown to hold `bytes`. */
static rill_status_t slot_take(plan_t *p, int32_t *best, size_t bytes) {
  if (*best < 0) {
    *best = (int32_t)p->size.len;
    RILL_TRY(RILL_VEC_PUSH(p->c->a, &p->size, 0));
    RILL_TRY(RILL_VEC_PUSH(p->c->a, &p->busy_until, -1));
    for (uint32_t t = 0; p->multi && t < p->S; t++) RILL_TRY(RILL_VEC_PUSH(p->c->a, &p->last, 0));
  }
  if (p->size.items[*best] < bytes) p->size.items[*best] = bytes;
  return NULL;
}

/* Value v in slot sl, placed at node i: the slot is busy through v's last
 * use and node i (values of the same op never share); with several
 * streams, v's definition and uses (through aliases too) become the slot's
 * latest accesses. */
static void slot_hold(plan_t *p, int32_t sl, uint32_t v, uint32_t i) {
  ir_value_t *x = &p->f->values.items[v];
  int32_t *busy = &p->busy_until.items[sl];
  if (x->last_use > *busy) *busy = x->last_use;
  if (*busy < (int32_t)i) *busy = (int32_t)i;
  x->slot = sl;
  if (!p->multi) return;
  uint32_t *lb = &p->last.items[(size_t)sl * p->S];
  uint32_t d = (uint32_t)x->def, ds = (uint32_t)p->f->nodes.items[d].stream;
  if (p->k.seq[d] > lb[ds]) lb[ds] = p->k.seq[d];
  for (size_t q = 0; q < p->uses[v].len; q++) {
    uint32_t u = p->uses[v].items[q], us = (uint32_t)p->f->nodes.items[u].stream;
    if (p->k.seq[u] > lb[us]) lb[us] = p->k.seq[u];
  }
}

/* Operand v of an in-place concat, made at node i, which has seen `seen`
 * of each stream. Once the concat's operands are all made, its result takes
 * a slot that was free before every one of their nodes (the best fit, else
 * a new slot; no barrier), and the slot holds them all, each at its offset,
 * through the last use of any of them and of the result. Values placed
 * meanwhile took other slots: the slot was not free before the first
 * operand's node for them. */
static rill_status_t place_operand(plan_t *p, uint32_t v, uint32_t i, const uint32_t *seen) {
  ir_func_t *f = p->f;
  uint32_t y = f->values.items[v].host - 1, S = p->S;
  int32_t g = p->group[y];
  uint32_t *low = p->multi ? &p->low[(size_t)g * S] : NULL;
  if (p->made[g]++ == 0) {
    p->first[g] = (int32_t)i;
    for (uint32_t t = 0; low && t < S; t++) low[t] = UINT32_MAX;
  }
  for (uint32_t t = 0; low && t < S; t++)
    if (seen[t] < low[t]) low[t] = seen[t];
  const ir_node_t *cn = &f->nodes.items[f->values.items[y].def];
  if (p->made[g] < cn->nargs) return NULL;
  size_t bytes;
  value_bytes(p, y, &bytes);
  int32_t best = -1;
  for (size_t sl = 0; sl < p->size.len; sl++) {
    bool free_slot = true;
    if (!low) free_slot = p->busy_until.items[sl] < p->first[g];
    for (uint32_t t = 0; low && t < S; t++) free_slot = free_slot && low[t] >= p->last.items[sl * S + t];
    if (free_slot && better_fit(p, best, sl, bytes)) best = (int32_t)sl;
  }
  RILL_TRY(slot_take(p, &best, bytes));
  for (uint32_t j = 0; j < cn->nargs; j++) slot_hold(p, best, cn->args[j], i);
  slot_hold(p, best, y, i);
  return NULL;
}

/* Slots per stream at most this many times the values live at once (in
 * program order) before the plan adds a barrier instead of a slot. */
#define SLOT_FACTOR 4

static rill_status_t pass_memory_plan(asm_ctx_t *c, ir_func_t *f) {
  plan_t p = {.c = c, .f = f, .multi = f->nstreams > 1, .S = f->nstreams};
  bool multi = p.multi;
  uint32_t S = f->nstreams;
  size_t N = f->nodes.len;
  clocks_t *k = &p.k;
  k->S = S;
  ev_live_t *L = NULL;
  rill_status_t st = NULL;
  RILL_VEC(ir_node_t) out = {0};           /* multi-stream: the nodes with any barriers added */
  int32_t *newpos = NULL;
  uint32_t cap = UINT32_MAX;               /* multi-stream: slots beyond which barriers replace new slots */
  bool barriers = false;
  uint32_t ngroups = 0;
  for (size_t i = 0; i < N; i++) ngroups += f->nodes.items[i].in_place;
  if (ngroups) {
    p.group = rill__calloc(c->a, f->values.len, sizeof *p.group);
    p.made = rill__calloc(c->a, ngroups, sizeof *p.made);
    p.first = rill__calloc(c->a, ngroups, sizeof *p.first);
    p.low = multi ? rill__calloc(c->a, (size_t)ngroups * S, sizeof *p.low) : NULL;
    if (!p.group || !p.made || !p.first || (multi && !p.low)) {
      st = rill__oom();
      goto done;
    }
    for (size_t i = 0, g = 0; i < N; i++)
      if (f->nodes.items[i].in_place) p.group[f->nodes.items[i].res[0]] = (int32_t)g++;
  }
  if (multi) {
    k->seq = rill__calloc(c->a, N ? N : 1, 4);
    k->vc = rill__calloc(c->a, (size_t)S * S, 4);
    k->ev = rill__calloc(c->a, (size_t)ISA_MAX_EVENTS * S, 4);
    uint32_t *count = rill__calloc(c->a, S, 4);
    int32_t *delta = rill__calloc(c->a, N + 2, 4);
    newpos = rill__calloc(c->a, N ? N : 1, 4);
    L = rill__calloc(c->a, 1, sizeof *L);
    p.uses = rill__calloc(c->a, f->values.len ? f->values.len : 1, sizeof(u32vec_t));
    if (!k->seq || !k->vc || !k->ev || !count || !delta || !newpos || !L || !p.uses) {
      rill__free(c->a, count);
      rill__free(c->a, delta);
      st = rill__oom();
      goto done;
    }
    for (size_t i = 0; i < N; i++) {
      const ir_node_t *n = &f->nodes.items[i];
      if (n->kind != N_ADD_EVENT && n->kind != N_WAIT_EVENT) k->seq[i] = ++count[n->stream];
    }
    /* The most values live at once in program order: what one stream would need. */
    for (size_t v = 0; v < f->values.len; v++) {
      const ir_value_t *x = &f->values.items[v];
      if (x->def < 0 || x->escapes || f->nodes.items[x->def].kind != N_OP || is_view_op(c, &f->nodes.items[x->def])) continue;
      delta[x->def]++;
      delta[(x->last_use > x->def ? x->last_use : x->def) + 1]--;
    }
    int32_t live = 0, most = 0;
    for (size_t i = 0; i <= N; i++) {
      live += delta[i];
      if (live > most) most = live;
    }
    rill__free(c->a, count);
    rill__free(c->a, delta);
    barriers = !f->hand_scheduled;
    cap = (uint32_t)most * SLOT_FACTOR + S;
    if ((st = ev_live_build(c, f, L))) goto done;
    /* Direct uses, then alias uses (results of calls stand for their arguments), backwards. */
    for (size_t i = N; i-- > 0;) {
      const ir_node_t *n = &f->nodes.items[i];
      for (uint32_t j = 0; j < n->nargs; j++) {
        u32vec_t *u = &p.uses[n->args[j]];
        if ((st = RILL_VEC_PUSH(c->a, u, (uint32_t)i))) goto done;
        if (aliases(c, n))
          for (uint32_t r = 0; r < n->nres; r++)
            for (size_t q = 0; q < p.uses[n->res[r]].len; q++)
              if ((st = RILL_VEC_PUSH(c->a, u, p.uses[n->res[r]].items[q]))) goto done;
      }
    }
  }
  for (size_t i = 0; i < N; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    const uint32_t *seen = multi ? &k->vc[(size_t)n->stream * S] : NULL; /* what node i's stream has seen */
    /* (An in-place concat's result is placed with its operands.) */
    if (n->kind == N_OP && !is_view_op(c, n) && !n->in_place)
      for (uint32_t r = 0; r < n->nres; r++) {
        ir_value_t *v = &f->values.items[n->res[r]];
        if (v->escapes) continue;
        if (f->sdev[n->stream]) continue; /* slots are device 0's: a value of another device is allocated on its stream */
        if (v->host) {
          if ((st = place_operand(&p, n->res[r], (uint32_t)i, seen))) goto done;
          continue;
        }
        size_t bytes;
        if (!value_bytes(&p, n->res[r], &bytes)) continue;
        int32_t best = -1, near = -1;
        uint32_t near_blocked = UINT32_MAX;
        for (size_t sl = 0; sl < p.size.len; sl++) {
          bool free_slot = true;
          if (!multi) {
            free_slot = p.busy_until.items[sl] < (int32_t)i;
          } else {
            /* Every access to the slot so far, on every stream, is ordered before node i. */
            uint32_t blocked = 0;
            for (uint32_t t = 0; t < S; t++)
              if (seen[t] < p.last.items[sl * S + t]) blocked++;
            free_slot = blocked == 0;
            /* For a barrier, the slot that the fewest other streams hold,
             * among those whose every access has been issued (a barrier
             * cannot cover a use still to come, nor one by node i). */
            bool issued = p.last.items[sl * S + (uint32_t)n->stream] < k->seq[i];
            for (uint32_t t = 0; issued && t < S; t++) issued = p.last.items[sl * S + t] <= k->vc[(size_t)t * S + t];
            if (blocked && issued && blocked < near_blocked) {
              near = (int32_t)sl;
              near_blocked = blocked;
            }
          }
          if (free_slot && better_fit(&p, best, sl, bytes)) best = (int32_t)sl;
        }
        int e;
        if (best < 0 && barriers && near >= 0 && p.size.len >= cap && (e = ev_free_at(L, (uint32_t)i)) >= 0) {
          /* A barrier: each stream that still holds the slot records an
           * event now, and node i's stream waits for them; its memory is
           * then free, bounding memory where streams rarely meet. */
          for (uint32_t t = 0; t < S; t++) {
            if (seen[t] >= p.last.items[(size_t)near * S + t]) continue;
            ir_node_t an = {.kind = N_ADD_EVENT, .line = n->line, .col = n->col, .stream = (int)t, .event = e, .event_stream = (int)t};
            ir_node_t wn = {.kind = N_WAIT_EVENT, .line = n->line, .col = n->col, .stream = n->stream, .event = e, .event_stream = n->stream};
            if ((st = RILL_VEC_PUSH(c->a, &out, an)) || (st = RILL_VEC_PUSH(c->a, &out, wn))) goto done;
            clocks_step(k, &an, 0);
            clocks_step(k, &wn, 0);
          }
          f->events_used |= 1ull << e;
          best = near;
        }
        if ((st = slot_take(&p, &best, bytes))) goto done;
        slot_hold(&p, best, n->res[r], (uint32_t)i);
      }
    if (multi) {
      newpos[i] = (int32_t)out.len;
      if ((st = RILL_VEC_PUSH(c->a, &out, *n))) goto done;
      clocks_step(k, n, (uint32_t)i);
    }
  }
  if (multi && out.len != N) {
    /* Barriers were added: node indices move. */
    for (size_t v = 0; v < f->values.len; v++) {
      ir_value_t *x = &f->values.items[v];
      if (x->last_use >= 0 && x->last_use != INT32_MAX) x->last_use = newpos[x->last_use];
    }
    asm_replace_nodes(c, f, out.items, out.len, out.cap, newpos);
    out.items = NULL;
  }
  f->nslots = (uint32_t)p.size.len;
  f->slot_size = rill__arena_memdup(&c->arena, p.size.items, 8 * p.size.len);
  if (p.size.len && !f->slot_size) st = rill__oom();
done:
  if (p.uses) {
    for (size_t v = 0; v < f->values.len; v++) RILL_VEC_FREE(c->a, &p.uses[v]);
    rill__free(c->a, p.uses);
  }
  if (L) {
    for (int e = 0; e < ISA_MAX_EVENTS; e++) RILL_VEC_FREE(c->a, &L->iv[e]);
    rill__free(c->a, L);
  }
  RILL_VEC_FREE(c->a, &out);
  RILL_VEC_FREE(c->a, &p.last);
  RILL_VEC_FREE(c->a, &p.size);
  RILL_VEC_FREE(c->a, &p.busy_until);
  rill__free(c->a, newpos);
  rill__free(c->a, k->seq);
  rill__free(c->a, k->vc);
  rill__free(c->a, k->ev);
  rill__free(c->a, p.group);
  rill__free(c->a, p.made);
  rill__free(c->a, p.first);
  rill__free(c->a, p.low);
  return st;
}

static const asm_pass_t PASSES[] = {
    {"fold", asm_pass_fold, true},
    {"windows", asm_pass_windows, true},
    {"attention", asm_pass_attention, true},
    {"precision", asm_pass_precision, false},
    {"layout", asm_pass_layout, true},
    {"fuse", asm_pass_fuse, true},
    {"devices", asm_pass_devices, false},
    {"concat", pass_concat, true},
    {"schedule", pass_schedule, false},
    {"liveness", pass_liveness, false},
    {"memory-plan", pass_memory_plan, false},
};

/* ---- register allocation and emission ---- */
typedef struct emitter {
  asm_ctx_t *c;
  ir_func_t *f;
  isa_func_t *out;
  RILL_VEC(isa_reg_t) regs;
  RILL_VEC(uint32_t) code;
  RILL_VEC(isa_loc_t) locs;
  rill_map_t reg_names;
  int cur;
  int32_t *state_reg;      /* per module state: its register here, or -1 */
} emitter_t;

static rill_status_t new_reg(emitter_t *e, isa_reg_t r, const char *base, uint32_t *out) {
  /* Register names are unique in a function, so the lowered form can name them. */
  char buf[256];
  const char *name = base;
  uint32_t dummy;
  for (int k = 1; rill__map_get(&e->reg_names, name, strlen(name), &dummy); k++) {
    snprintf(buf, sizeof buf, "%.200s.%d", base, k);
    name = buf;
  }
  if (name == buf && !(name = rill__arena_strndup(&e->c->arena, buf, strlen(buf)))) return rill__oom();
  r.name = name;
  *out = (uint32_t)e->regs.len;
  RILL_TRY(rill__map_put(&e->reg_names, name, strlen(name), *out));
  return RILL_VEC_PUSH(e->c->a, &e->regs, r);
}

typedef struct freelist {
  rill_type_t type;
  u32vec_t regs;
} freelist_t;

static rill_status_t regalloc(emitter_t *e) {
  ir_func_t *f = e->f;
  asm_ctx_t *c = e->c;
  rill_status_t st = NULL;
  RILL_VEC(freelist_t) free = {0};
  u32vec_t *dying = rill__calloc(c->a, f->nodes.len + 1, sizeof(u32vec_t)); /* values whose last use is node i */
  if (!dying) return rill__oom();
  for (size_t v = 0; v < f->values.len; v++) {
    ir_value_t *x = &f->values.items[v];
    if (x->kind == V_RESULT || x->kind == V_STATE || (x->kind == V_CONST && x->last_use < 0 && !x->escapes)) continue;
    isa_reg_t r = {.type = x->type};
    uint32_t id;
    if ((st = new_reg(e, r, x->name, &id))) goto done;
    x->reg = (int32_t)id;
  }
  /* (after the parameters, registers 0..) States: one register per state that some node reads or updates,
   * every version of it in that register. */
  for (size_t i = 0; i < f->nodes.len; i++)
    for (uint32_t j = 0; j < f->nodes.items[i].nargs; j++) {
      ir_value_t *x = &f->values.items[f->nodes.items[i].args[j]];
      if (x->kind != V_STATE || e->state_reg[x->konst] >= 0) continue;
      uint32_t id;
      if ((st = new_reg(e, (isa_reg_t){.type = x->type}, x->name, &id))) goto done;
      e->state_reg[x->konst] = (int32_t)id;
    }
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_STATE) f->values.items[v].reg = e->state_reg[f->values.items[v].konst];
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    for (uint32_t j = 0; j < n->nres; j++) {
      ir_value_t *x = &f->values.items[n->res[j]];
      size_t k = 0;
      while (k < free.len && !rill__type_eq(&free.items[k].type, &x->type)) k++;
      if (k < free.len && free.items[k].regs.len) {
        x->reg = (int32_t)free.items[k].regs.items[--free.items[k].regs.len];
      } else {
        uint32_t id;
        if ((st = new_reg(e, (isa_reg_t){.type = x->type}, x->name, &id))) goto done;
        x->reg = (int32_t)id;
      }
      int32_t last = x->last_use < (int32_t)i ? (int32_t)i : x->last_use;
      if (!x->escapes && last != INT32_MAX && (st = RILL_VEC_PUSH(c->a, &dying[last], n->res[j]))) goto done;
    }
    for (size_t q = 0; q < dying[i].len; q++) {
      const ir_value_t *x = &f->values.items[dying[i].items[q]];
      size_t k = 0;
      while (k < free.len && !rill__type_eq(&free.items[k].type, &x->type)) k++;
      if (k == free.len) {
        freelist_t fl = {x->type, {0}};
        if ((st = RILL_VEC_PUSH(c->a, &free, fl))) goto done;
      }
      if ((st = RILL_VEC_PUSH(c->a, &free.items[k].regs, (uint32_t)x->reg))) goto done;
    }
  }
done:
  for (size_t i = 0; i <= f->nodes.len; i++) RILL_VEC_FREE(c->a, &dying[i]);
  rill__free(c->a, dying);
  for (size_t k = 0; k < free.len; k++) RILL_VEC_FREE(c->a, &free.items[k].regs);
  RILL_VEC_FREE(c->a, &free);
  return st;
}

static rill_status_t w(emitter_t *e, uint32_t word) { return RILL_VEC_PUSH(e->c->a, &e->code, word); }

static rill_status_t loc(emitter_t *e, uint32_t line, uint32_t col) {
  uint32_t pc = (uint32_t)e->code.len;
  if (e->locs.len) {
    isa_loc_t *last = &e->locs.items[e->locs.len - 1];
    if (last->line == line && last->col == col) return NULL;
    if (last->pc == pc) { last->line = line; last->col = col; return NULL; }
  }
  return RILL_VEC_PUSH(e->c->a, &e->locs, ((isa_loc_t){pc, line, col}));
}

static rill_status_t wlist(emitter_t *e, const uint32_t *vals, uint32_t n, uint32_t first_extra) {
  (void)first_extra;
  RILL_TRY(w(e, n));
  for (uint32_t i = 0; i < n; i++) RILL_TRY(w(e, (uint32_t)e->f->values.items[vals[i]].reg));
  return NULL;
}

/* A stream of a device but 0 is named with its device (a 1.4 module); one
 * of device 0 as before, so that one-device modules keep their bytes. */
static rill_status_t set_stream(emitter_t *e, int s) {
  if (e->cur == s) return NULL;
  e->cur = s;
  if (e->f->sdev[s]) {
    RILL_TRY(w(e, ISA_OP_CUDA_SET_DEVICE_STREAM));
    RILL_TRY(w(e, e->f->sdev[s]));
  } else {
    RILL_TRY(w(e, ISA_OP_CUDA_SET_STREAM));
  }
  return w(e, (uint32_t)s);
}

static rill_status_t emit_call(emitter_t *e, uint32_t fn, const uint32_t *args, uint32_t nargs,
                               const uint32_t *res, uint32_t nres) {
  RILL_TRY(w(e, ISA_OP_CALL));
  RILL_TRY(w(e, fn));
  RILL_TRY(wlist(e, args, nargs, 0));
  return wlist(e, res, nres, 0);
}

rill_status_t asm_run_passes(asm_ctx_t *c, ir_func_t *f, isa_func_t *out) {
  for (size_t i = 0; i < RILL_ARRAY_LEN(PASSES); i++) {
    if (PASSES[i].optimising && c->opts && c->opts->no_opt) continue;
    double t0 = rill__now_us();
    rill_status_t st = PASSES[i].run(c, f);
    if (rill__timings_on()) {
      char name[48];
      snprintf(name, sizeof name, "assembly/%s", PASSES[i].name);
      rill__timing_since(name, t0);
    }
    if (st) {
      if (rill_status_code(st) == RILL_ASSEMBLY_ERROR || rill_status_code(st) == RILL_OUT_OF_MEMORY) return st;
      const func_decl_t *fd = &c->funcs.items[f->index];
      rill_status_t e = asm_error(c, fd->line, fd->col, "pass %s: %s", PASSES[i].name, rill_status_message(st));
      rill_status_free(st);
      return e;
    }
  }
  const func_decl_t *fd = &c->funcs.items[f->index];
  double te = rill__now_us();
  emitter_t e = {.c = c, .f = f, .out = out};
  rill__map_init(&e.reg_names, c->a);
  rill_status_t st = NULL;
  if (c->states.len && !(e.state_reg = rill__calloc(c->a, c->states.len, sizeof(int32_t)))) st = rill__oom();
  for (size_t k = 0; !st && k < c->states.len; k++) e.state_reg[k] = -1;
  if (!st) st = regalloc(&e);
  uint32_t slot_base = (uint32_t)e.regs.len;
  /* Slot storages after the values' registers would interleave names; they come last. */
  for (uint32_t s = 0; !st && s < f->nslots; s++) {
    char name[32];
    snprintf(name, sizeof name, "slot%u", s);
    char *nm = rill__arena_strndup(&c->arena, name, strlen(name));
    uint32_t id;
    if (!nm) st = rill__oom();
    else st = new_reg(&e, (isa_reg_t){.storage = true, .storage_size = f->slot_size[s]}, nm, &id);
    if (!st && s == 0) slot_base = id;
  }
  /* Free events for fork and join. */
  int fj_event = -1;
  if (!st && f->nstreams > 1) {
    for (int ev = 0; ev < ISA_MAX_EVENTS && fj_event < 0; ev++)
      if (!(f->events_used & (1ull << ev))) fj_event = ev;
    if (fj_event < 0) st = asm_error(c, fd->line, fd->col, "@%s uses all %d events: none is left for the fork and join", fd->name, ISA_MAX_EVENTS);
  }
  /* The streams the body names (the device form numbers its devices' streams from 63 down): only they fork and join. */
  uint64_t used = 1;
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (n->stream >= 0 && n->stream < ISA_MAX_STREAMS) used |= 1ull << n->stream;
    if ((n->kind == N_ADD_EVENT || n->kind == N_WAIT_EVENT) && n->event_stream >= 0 && n->event_stream < ISA_MAX_STREAMS) used |= 1ull << n->event_stream;
  }
  for (uint32_t s = 1; s < f->nstreams && s < ISA_MAX_STREAMS; s++)
    if (f->sdev[s]) used |= 1ull << s;
  int max_event = -1;
  for (int ev = 0; ev < ISA_MAX_EVENTS; ev++)
    if (f->events_used & (1ull << ev)) max_event = ev;
  if (fj_event > max_event) max_event = fj_event;

#define E(x) do { if ((st = (x))) goto done; } while (0)
  if (st) goto done;
  E(loc(&e, fd->line, fd->col));
  for (uint32_t s = 0; s < f->nslots; s++) { E(w(&e, ISA_OP_ALLOC_STORAGE)); E(w(&e, slot_base + s)); }
  for (size_t v = 0; v < f->values.len; v++) {
    const ir_value_t *x = &f->values.items[v];
    if (x->kind != V_CONST || x->device || (x->last_use < 0 && !x->escapes)) continue; /* folded away */
    E(w(&e, ISA_OP_LOAD_CONST)); E(w(&e, (uint32_t)x->reg)); E(w(&e, x->konst));
  }
  /* On stream 0 before the fork: the other streams see them after it. */
  uint8_t *state_dev = c->states.len ? rill__arena_alloc(&c->arena, c->states.len) : NULL;
  if (c->states.len && !state_dev) E(rill__oom());
  if (state_dev) memset(state_dev, 0, c->states.len);
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_STATE) state_dev[f->values.items[v].konst] = f->values.items[v].device;
  for (uint32_t k = 0; k < c->states.len; k++)
    if (e.state_reg[k] >= 0 && !state_dev[k]) { E(w(&e, ISA_OP_LOAD_STATE)); E(w(&e, (uint32_t)e.state_reg[k])); E(w(&e, k)); }
  /* The device form's constants and states of device d > 0 are loaded on a
   * stream of device d (a constant's load takes the copy of the current
   * stream's device; a state lives on the device it is loaded on). */
  for (uint32_t d = 1; d < ISA_MAX_DEVICES; d++) {
    int ds = -1;
    for (uint32_t s = 1; s < f->nstreams && ds < 0; s++)
      if (f->sdev[s] == d) ds = (int)s;
    for (size_t v = 0; ds >= 0 && v < f->values.len; v++) {
      const ir_value_t *x = &f->values.items[v];
      if (x->kind != V_CONST || x->device != d || (x->last_use < 0 && !x->escapes)) continue;
      E(set_stream(&e, ds));
      E(w(&e, ISA_OP_LOAD_CONST)); E(w(&e, (uint32_t)x->reg)); E(w(&e, x->konst));
    }
    for (uint32_t k = 0; ds >= 0 && k < c->states.len; k++) {
      if (e.state_reg[k] < 0 || state_dev[k] != d) continue;
      E(set_stream(&e, ds));
      E(w(&e, ISA_OP_LOAD_STATE)); E(w(&e, (uint32_t)e.state_reg[k])); E(w(&e, k));
    }
  }
  if (f->nstreams > 1) {
    E(w(&e, ISA_OP_CUDA_ADD_EVENT)); E(w(&e, (uint32_t)fj_event)); E(w(&e, 0));
    for (uint32_t s = 1; s < f->nstreams; s++)
      if (used >> s & 1) { E(w(&e, ISA_OP_CUDA_WAIT_EVENT)); E(w(&e, (uint32_t)fj_event)); E(w(&e, s)); }
  }
  uint32_t cond_reg = 0;
  bool have_cond = false;
  for (size_t i = 0; i < f->nodes.len; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    E(loc(&e, n->line, n->col));
    switch (n->kind) {
      case N_SET_STREAM: E(set_stream(&e, n->stream)); break;
      case N_ADD_EVENT: case N_WAIT_EVENT:
        E(w(&e, n->kind == N_ADD_EVENT ? ISA_OP_CUDA_ADD_EVENT : ISA_OP_CUDA_WAIT_EVENT));
        E(w(&e, (uint32_t)n->event)); E(w(&e, (uint32_t)n->event_stream));
        break;
      case N_OP:
        if (!n->in_place) E(set_stream(&e, n->stream)); /* (a view is no work on a stream) */
        if (is_view_op(c, n)) {
          E(w(&e, ISA_OP_ALIAS)); E(w(&e, (uint32_t)f->values.items[n->res[0]].reg)); E(w(&e, (uint32_t)f->values.items[n->args[0]].reg));
          break;
        }
        /* An in-place concat's result is its slot, which its operands' producers wrote; an operand is its part of it.
         * An in-place split's results are parts of its operand's slot. */
        for (uint32_t r = 0; r < n->nres; r++) {
          const ir_value_t *x = &f->values.items[n->res[r]];
          if (x->within) {
            const ir_value_t *o = &f->values.items[x->within - 1];
            if (o->slot < 0) {
              st = asm_error(c, n->line, n->col, "internal: an in-place split whose operand has no slot");
              goto done;
            }
            E(w(&e, ISA_OP_VIEW)); E(w(&e, (uint32_t)x->reg)); E(w(&e, slot_base + (uint32_t)o->slot)); E(w(&e, x->offset));
          } else if (x->slot >= 0) {
            E(w(&e, ISA_OP_VIEW)); E(w(&e, (uint32_t)x->reg)); E(w(&e, slot_base + (uint32_t)x->slot)); E(w(&e, x->host ? x->offset : 0));
          } else if (n->in_place) {
            st = asm_error(c, n->line, n->col, "internal: an in-place concat without a slot");
            goto done;
          } else {
            E(w(&e, ISA_OP_ALLOC_TENSOR)); E(w(&e, (uint32_t)x->reg));
          }
        }
        if (n->in_place) break;
        if (n->from_device) {
          E(w(&e, ISA_OP_COPY_DEVICE)); E(w(&e, (uint32_t)f->values.items[n->res[0]].reg));
          E(w(&e, (uint32_t)f->values.items[n->args[0]].reg)); E(w(&e, (uint32_t)n->from_device - 1));
          break;
        }
        E(w(&e, ISA_OP_INVOKE)); E(w(&e, n->target));
        E(wlist(&e, n->args, n->nargs, 0));
        if (!n->nres && asm_is_op(c, n, "update")) { /* into the state's own register: in place */
          E(w(&e, 1)); E(w(&e, (uint32_t)f->values.items[n->args[0]].reg));
        } else if (n->nres == 1 && asm_is_op(c, n, "rotary_update")) { /* -O1's (decode_fuse.c): the caches in place, then q */
          E(w(&e, 3)); E(w(&e, (uint32_t)f->values.items[n->args[0]].reg)); E(w(&e, (uint32_t)f->values.items[n->args[1]].reg));
          E(w(&e, (uint32_t)f->values.items[n->res[0]].reg));
        } else {
          E(wlist(&e, n->res, n->nres, 0));
        }
        break;
      case N_CALL:
        E(set_stream(&e, n->stream));
        E(emit_call(&e, n->target, n->args, n->nargs, n->res, n->nres));
        break;
      case N_IF: {
        E(set_stream(&e, n->stream));
        uint32_t cr = (uint32_t)f->values.items[n->args[0]].reg;
        E(w(&e, ISA_OP_HOST_WAIT)); E(w(&e, cr));
        E(w(&e, ISA_OP_BR_IF)); E(w(&e, cr));
        size_t pt = e.code.len, pe = e.code.len + 1;
        E(w(&e, 0)); E(w(&e, 0));
        e.code.items[pt] = (uint32_t)e.code.len;
        E(emit_call(&e, n->target, n->args + 1, n->nargs - 1, n->res, n->nres));
        E(w(&e, ISA_OP_GOTO));
        size_t pend = e.code.len;
        E(w(&e, 0));
        e.code.items[pe] = (uint32_t)e.code.len;
        E(emit_call(&e, n->target2, n->args + 1, n->nargs - 1, n->res, n->nres));
        e.code.items[pend] = (uint32_t)e.code.len;
        break;
      }
      case N_BIND: {
        E(set_stream(&e, n->stream));
        uint32_t vr = (uint32_t)f->values.items[n->args[0]].reg, nr;
        E(new_reg(&e, (isa_reg_t){.type = n->dims}, "dims", &nr));
        E(w(&e, ISA_OP_HOST_WAIT)); E(w(&e, vr));
        E(w(&e, ISA_OP_BIND_DIMS)); E(w(&e, nr)); E(w(&e, vr));
        break;
      }
      case N_WHILE: {
        E(set_stream(&e, n->stream));
        if (!have_cond) {
          E(new_reg(&e, (isa_reg_t){.type = {RILL_BOOL, 0, {0}}}, "cond", &cond_reg));
          have_cond = true;
        }
        for (uint32_t j = 0; j < n->nargs; j++) {
          E(w(&e, ISA_OP_MOVE)); E(w(&e, (uint32_t)f->values.items[n->res[j]].reg));
          E(w(&e, (uint32_t)f->values.items[n->args[j]].reg));
        }
        uint32_t top = (uint32_t)e.code.len;
        E(w(&e, ISA_OP_CALL)); E(w(&e, n->target)); E(wlist(&e, n->res, n->nres, 0));
        E(w(&e, 1)); E(w(&e, cond_reg));
        E(w(&e, ISA_OP_HOST_WAIT)); E(w(&e, cond_reg));
        E(w(&e, ISA_OP_BR_IF)); E(w(&e, cond_reg));
        size_t pb = e.code.len;
        E(w(&e, 0)); E(w(&e, 0));
        e.code.items[pb] = (uint32_t)e.code.len;
        E(emit_call(&e, n->target2, n->res, n->nres, n->res, n->nres));
        E(w(&e, ISA_OP_GOTO)); E(w(&e, top));
        e.code.items[pb + 1] = (uint32_t)e.code.len;
        break;
      }
      case N_RETURN:
        if (f->nstreams > 1) {
          for (uint32_t s = 1; s < f->nstreams; s++) {
            if (!(used >> s & 1)) continue;
            E(w(&e, ISA_OP_CUDA_ADD_EVENT)); E(w(&e, (uint32_t)fj_event)); E(w(&e, s));
            E(w(&e, ISA_OP_CUDA_WAIT_EVENT)); E(w(&e, (uint32_t)fj_event)); E(w(&e, 0));
          }
          E(set_stream(&e, 0));
        }
        E(w(&e, ISA_OP_RETURN)); E(wlist(&e, n->args, n->nargs, 0));
        break;
    }
  }
  out->name = fd->name;
  out->nparams = fd->nparams;
  out->nresults = fd->nresults;
  out->results = fd->results;
  out->nregs = (uint32_t)e.regs.len;
  out->regs = rill__arena_memdup(&c->arena, e.regs.items, sizeof(isa_reg_t) * e.regs.len);
  out->nstreams = f->nstreams;
  out->nevents = (uint32_t)(max_event + 1);
  out->ncode = (uint32_t)e.code.len;
  out->code = rill__arena_memdup(&c->arena, e.code.items, 4 * e.code.len);
  out->nlocs = (uint32_t)e.locs.len;
  out->locs = rill__arena_memdup(&c->arena, e.locs.items, sizeof(isa_loc_t) * e.locs.len);
  if ((e.regs.len && !out->regs) || !out->code || (e.locs.len && !out->locs)) st = rill__oom();
#undef E
done:
  rill__free(c->a, e.state_reg);
  RILL_VEC_FREE(c->a, &e.regs);
  RILL_VEC_FREE(c->a, &e.code);
  RILL_VEC_FREE(c->a, &e.locs);
  rill__map_free(&e.reg_names);
  rill__timing_since("assembly/emit", te);
  return st;
}
