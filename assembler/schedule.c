/* schedule.c: automatic stream schedules for bodies without stream
 * statements.
 *
 * A policy assigns each node of the function's dataflow graph a stream;
 * then one shared step orders the nodes (by level: a node comes after every
 * node it depends on) and inserts the synchronisation: an event recorded
 * after a producer whose result a node on another stream needs, and a wait
 * before that node, unless an earlier wait already orders the two (tracked
 * with vector clocks). Events whose waits have all been issued are reused.
 * Correctness rests on that step alone; the policies only decide where work
 * goes. The assembler verifies the module it writes, schedule included.
 *
 *   none       one stream
 *   wavefront  waves of ready nodes, each extended into a chain up to a node
 *              with several consumers (or one that joins); a wave's chains
 *              on separate streams
 *   asap       heavy edges (at most one into and one out of each node, to
 *              the successor with the longest path after it) form chains; a
 *              chain reuses a stream whose last chain provably finished
 *              before it starts; other edges are synchronised by events
 *   rank       each node ranked by the longest path after it; walking in
 *              order, an unassigned node takes a stream that provably
 *              finished before it (preferring one that last ran the same
 *              op), or a new one, and its highest ranked unassigned
 *              successors follow on that stream
 *   ios        IOS's dynamic programming: the graph in windows of up to 10
 *              nodes (cut early at joins), each split into the sequence of
 *              stages with the least latency, a stage's connected groups
 *              running concurrently on streams; latency from each op's time
 *              and how much of the GPU it fills, measured by `rill tune`
 *              (the profile option) or else from the cost model below
 *
 * Path lengths use a cost model of each node's time (a launch, bytes moved
 * at 2 TB/s, multiply-adds at 40 TFLOP/s). "Provably finished" is a bounded
 * search for a path of dependencies; where the bound is hit, the answer is
 * no, which is only ever slower, never wrong.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

#define DEFAULT_MAX_STREAMS 4
/* Without --schedule and without a profile's "best": the policy measured
 * best over the models in bench/RESULTS.md. */
#define DEFAULT_POLICY "rank"
#define REACH_BUDGET 4096

typedef struct sched {
  asm_ctx_t *c;
  ir_func_t *f;
  uint32_t n;              /* nodes before the return */
  uint32_t *pred_off, *preds, *succ_off, *succs;
  double *cost, *after;    /* a node's cost; the longest path from it to the end, itself included */
  uint32_t *level;
  int *stream;
  uint32_t max_streams;
  uint32_t *mark, gen;     /* reachability search */
  uint32_t *stack;
} sched_t;

/* The policies (schedule.c's head comment says how each decides); none has no pass. */
static rill_status_t policy_wavefront(sched_t *s);
static rill_status_t policy_asap(sched_t *s);
static rill_status_t policy_rank(sched_t *s);
static rill_status_t policy_ios(sched_t *s);
static const struct {
  const char *name;
  rill_status_t (*run)(sched_t *s);
} POLICIES[] = {
    {"none", NULL},
    {"wavefront", policy_wavefront},
    {"asap", policy_asap},
    {"rank", policy_rank},
    {"ios", policy_ios},
};

/* The policy called `name`, or -1. */
static int policy_find(const char *name) {
  for (size_t i = 0; i < RILL_ARRAY_LEN(POLICIES); i++)
    if (!strcmp(name, POLICIES[i].name)) return (int)i;
  return -1;
}

/* "LEAD NAME TAIL (this assembler has: every policy)". */
static rill_status_t policy_unknown(const char *lead, const char *name, const char *tail) {
  char names[128] = "";
  for (size_t i = 0; i < RILL_ARRAY_LEN(POLICIES); i++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", POLICIES[i].name);
  return rill__status(RILL_INVALID_ARGUMENT, "%s%s%s (this assembler has: %s)", lead, name, tail, names);
}

/* ---- the graph ---- */
static double node_cost(const asm_ctx_t *c, const ir_node_t *n) {
  if (n->kind != N_OP) return 20.0; /* calls, if, while: unknown, assume several ops */
  if (n->in_place) return 0;        /* a concat its operands' producers wrote: no work */
  const isa_opdecl_t *d = asm_decl(c, n);
  double bytes = 0, numel_out = 0;
  for (uint32_t i = 0; i < d->nin; i++) bytes += (double)rill_type_numel(&d->in[i]) * (double)rill_dtype_size(d->in[i].dtype);
  for (uint32_t i = 0; i < d->nout; i++) {
    numel_out += (double)rill_type_numel(&d->out[i]);
    bytes += (double)rill_type_numel(&d->out[i]) * (double)rill_dtype_size(d->out[i].dtype);
  }
  double macs = numel_out;
  if ((!strcmp(d->name, "matmul") || !strcmp(d->name, "linear")) && d->nin >= 1 && d->in[0].rank >= 1)
    macs = numel_out * (double)d->in[0].dims[d->in[0].rank - 1];
  else if (!strcmp(d->name, "conv2d") && d->nin >= 2 && d->in[1].rank == 4)
    macs = numel_out * (double)(d->in[1].dims[1] * d->in[1].dims[2] * d->in[1].dims[3]);
  return 2.5 + bytes / 2e6 + 2.0 * macs / 4e7;
}

/* Orderings that no value carries (docs/internals.md, "States"): an update
 * of a state (or a call, if or while, which may update any) after every
 * read of the version it replaces, and after the node that made that
 * version; emits (and calls, which may emit) in program order. Each pair
 * (from, to) has from < to: the rewrites before the schedule never move a
 * read of a state past an update (asm_touches_state), which is checked. */
typedef struct order_edge {
  uint32_t from, to;
} order_edge_t;
typedef RILL_VEC(order_edge_t) order_edges_t;

static int edge_cmp(const void *a, const void *b) {
  const order_edge_t *x = a, *y = b;
  return x->to != y->to ? (x->to < y->to ? -1 : 1) : (x->from < y->from ? -1 : x->from > y->from);
}

static rill_status_t order_edges(sched_t *s, order_edges_t *out) {
  asm_ctx_t *c = s->c;
  ir_func_t *f = s->f;
  uint32_t n = s->n;
  size_t nv = f->values.len;
  rill_status_t st = NULL;
  int32_t *root = rill__calloc(c->a, nv ? nv : 1, sizeof(int32_t));
  uint32_t *nread = rill__calloc(c->a, nv + 1, sizeof(uint32_t)), *readers = NULL, *fill = NULL;
  if (!root || !nread) st = rill__oom();
  for (size_t v = 0; !st && v < nv; v++) root[v] = asm_state_root(c, f, (uint32_t)v);
  /* The readers of each version, bucketed by version. */
  for (int round = 0; !st && round < 2; round++) {
    for (uint32_t i = 0; i < n; i++) {
      const ir_node_t *nd = &f->nodes.items[i];
      for (uint32_t j = 0; j < nd->nargs; j++) {
        int32_t r = root[nd->args[j]];
        if (r < 0) continue;
        if (!round) nread[r + 1]++;
        else readers[nread[r] + fill[r]++] = i;
      }
    }
    if (!round) {
      for (size_t v = 0; v < nv; v++) nread[v + 1] += nread[v];
      readers = rill__calloc(c->a, nread[nv] ? nread[nv] : 1, sizeof(uint32_t));
      fill = rill__calloc(c->a, nv ? nv : 1, sizeof(uint32_t));
      if (!readers || !fill) st = rill__oom();
    }
  }
  for (size_t v = 0; !st && v < nv; v++) {
    const ir_value_t *x = &f->values.items[v];
    if (x->kind != V_STATE || x->def < 0 || x->prev < 0 || (uint32_t)x->def >= n) continue;
    uint32_t w = (uint32_t)x->def;
    int32_t pd = f->values.items[x->prev].def;
    if (pd >= 0 && (uint32_t)pd != w) {
      if ((uint32_t)pd > w) st = rill__status(RILL_INTERNAL, "internal: state %s's versions out of order", x->name);
      else st = RILL_VEC_PUSH(c->a, out, ((order_edge_t){(uint32_t)pd, w}));
    }
    for (uint32_t k = nread[x->prev]; !st && k < nread[x->prev + 1]; k++) {
      uint32_t r = readers[k];
      if (r == w) continue;
      if (r > w) {
        const ir_node_t *rn = &f->nodes.items[r];
        st = asm_error(c, rn->line, rn->col, "internal: a read of state %%%s was moved past its update on line %u", x->name, f->nodes.items[w].line);
      } else {
        st = RILL_VEC_PUSH(c->a, out, ((order_edge_t){r, w}));
      }
    }
  }
  /* Emits and collectives, and the calls that may run them, in program order. */
  int32_t last = -1;
  for (uint32_t i = 0; !st && c->has_emit && i < n; i++) {
    const ir_node_t *nd = &f->nodes.items[i];
    bool fx = nd->kind == N_CALL || nd->kind == N_IF || nd->kind == N_WHILE || asm_is_op(c, nd, "emit") ||
              (nd->kind == N_OP && ops_collective(ops_find(asm_decl(c, nd)->name)) != OPS_COLL_NONE);
    if (!fx) continue;
    if (last >= 0) st = RILL_VEC_PUSH(c->a, out, ((order_edge_t){(uint32_t)last, i}));
    last = (int32_t)i;
  }
  if (!st && out->len) qsort(out->items, out->len, sizeof(order_edge_t), edge_cmp);
  rill__free(c->a, root);
  rill__free(c->a, nread);
  rill__free(c->a, readers);
  rill__free(c->a, fill);
  return st;
}

static rill_status_t build_graph(sched_t *s) {
  asm_ctx_t *c = s->c;
  ir_func_t *f = s->f;
  uint32_t n = s->n;
  order_edges_t ex = {0};
  RILL_TRY(order_edges(s, &ex));
  size_t ek = 0;
  s->pred_off = rill__calloc(c->a, n + 1, 4);
  s->succ_off = rill__calloc(c->a, n + 1, 4);
  s->cost = rill__calloc(c->a, n ? n : 1, sizeof(double));
  s->after = rill__calloc(c->a, n ? n : 1, sizeof(double));
  s->level = rill__calloc(c->a, n ? n : 1, 4);
  s->stream = rill__calloc(c->a, n ? n : 1, sizeof(int));
  s->mark = rill__calloc(c->a, n ? n : 1, 4);
  s->stack = rill__calloc(c->a, n ? n : 1, 4);
  uint32_t *seen = rill__calloc(c->a, n ? n : 1, 4);
  if (!s->pred_off || !s->succ_off || !s->cost || !s->after || !s->level || !s->stream || !s->mark || !s->stack || !seen) {
    rill__free(c->a, seen);
    RILL_VEC_FREE(c->a, &ex);
    return rill__oom();
  }
  /* Two rounds: count the distinct producers of each node, then fill. */
  for (int round = 0; round < 2; round++) {
    for (uint32_t i = 0; i < n; i++) seen[i] = UINT32_MAX;
    uint32_t *fill = round ? rill__calloc(c->a, n ? n : 1, 4) : NULL;
    if (round && !fill) {
      rill__free(c->a, seen);
      RILL_VEC_FREE(c->a, &ex);
      return rill__oom();
    }
    ek = 0;
    int32_t bind = -1; /* the last bind_dims: every later node may take its sizes */
    for (uint32_t i = 0; i < n; i++) {
      const ir_node_t *nd = &f->nodes.items[i];
      uint32_t first_extra = nd->nargs;
      while (ek < ex.len && ex.items[ek].to < i) ek++;
      uint32_t nextra = 0;
      while (ek + nextra < ex.len && ex.items[ek + nextra].to == i) nextra++;
      for (uint32_t j = 0; j <= nd->nargs + nextra; j++) {
        int32_t d = j < first_extra ? f->values.items[nd->args[j]].def
                    : j < first_extra + nextra ? (int32_t)ex.items[ek + (j - first_extra)].from : bind;
        if (d < 0 || seen[d] == i) continue;
        seen[d] = i;
        if (!round) {
          s->pred_off[i + 1]++;
          s->succ_off[d + 1]++;
        } else {
          s->preds[s->pred_off[i] + fill[i]++] = (uint32_t)d;
          s->succs[s->succ_off[d] + s->mark[d]++] = i;
        }
      }
      /* a call, if or while may bind sizes in the function it runs (an If's branch reading a count back) */
      if (nd->kind == N_BIND || (c->has_bind && (nd->kind == N_CALL || nd->kind == N_IF || nd->kind == N_WHILE))) bind = (int32_t)i;
    }
    if (!round) {
      for (uint32_t i = 0; i < n; i++) {
        s->pred_off[i + 1] += s->pred_off[i];
        s->succ_off[i + 1] += s->succ_off[i];
      }
      s->preds = rill__calloc(c->a, s->pred_off[n] ? s->pred_off[n] : 1, 4);
      s->succs = rill__calloc(c->a, s->succ_off[n] ? s->succ_off[n] : 1, 4);
      if (!s->preds || !s->succs) {
        rill__free(c->a, seen);
        RILL_VEC_FREE(c->a, &ex);
        return rill__oom();
      }
    } else {
      rill__free(c->a, fill);
    }
  }
  rill__free(c->a, seen);
  RILL_VEC_FREE(c->a, &ex);
  for (uint32_t i = 0; i < n; i++) {
    s->mark[i] = 0;
    s->cost[i] = node_cost(c, &f->nodes.items[i]);
    for (uint32_t k = s->pred_off[i]; k < s->pred_off[i + 1]; k++)
      if (s->level[s->preds[k]] + 1 > s->level[i]) s->level[i] = s->level[s->preds[k]] + 1;
  }
  for (uint32_t i = n; i-- > 0;) {
    double best = 0;
    for (uint32_t k = s->succ_off[i]; k < s->succ_off[i + 1]; k++)
      if (s->after[s->succs[k]] > best) best = s->after[s->succs[k]];
    s->after[i] = s->cost[i] + best;
  }
  return NULL;
}

/* Whether node a is an ancestor of node b (program order is topological, so
 * nothing before a can lead back to it). False when the search runs past its
 * budget. */
static bool reaches(sched_t *s, uint32_t a, uint32_t b) {
  if (a == b) return true;
  if (a > b) return false;
  if (++s->gen == 0) {
    memset(s->mark, 0, sizeof(uint32_t) * s->n);
    s->gen = 1;
  }
  uint32_t top = 0, visited = 0;
  s->stack[top++] = b;
  s->mark[b] = s->gen;
  while (top) {
    uint32_t v = s->stack[--top];
    if (++visited > REACH_BUDGET) return false;
    for (uint32_t k = s->pred_off[v]; k < s->pred_off[v + 1]; k++) {
      uint32_t p = s->preds[k];
      if (p == a) return true;
      if (p < a || s->mark[p] == s->gen) continue;
      s->mark[p] = s->gen;
      s->stack[top++] = p;
    }
  }
  return false;
}

/* ---- policies ---- */
static rill_status_t policy_wavefront(sched_t *s) {
  uint32_t n = s->n;
  uint32_t *pending = rill__calloc(s->c->a, n ? n : 1, 4), *wave = rill__calloc(s->c->a, n ? n : 1, 4);
  uint32_t *next = rill__calloc(s->c->a, n ? n : 1, 4);
  if (!pending || !wave || !next) {
    rill__free(s->c->a, pending); rill__free(s->c->a, wave); rill__free(s->c->a, next);
    return rill__oom();
  }
  uint32_t nw = 0;
  for (uint32_t i = 0; i < n; i++) {
    s->stream[i] = -1;
    pending[i] = s->pred_off[i + 1] - s->pred_off[i];
    if (!pending[i]) wave[nw++] = i;
  }
  while (nw) {
    /* The heaviest chain of the wave goes first, so it gets stream 0. */
    for (uint32_t a = 1; a < nw; a++)
      for (uint32_t b = a; b > 0 && s->after[wave[b]] > s->after[wave[b - 1]]; b--) {
        uint32_t t = wave[b]; wave[b] = wave[b - 1]; wave[b - 1] = t;
      }
    uint32_t nn = 0;
    for (uint32_t k = 0; k < nw; k++) {
      int st = (int)(k % s->max_streams);
      uint32_t v = wave[k];
      for (;;) {
        s->stream[v] = st;
        uint32_t ns = s->succ_off[v + 1] - s->succ_off[v];
        uint32_t only = ns == 1 ? s->succs[s->succ_off[v]] : UINT32_MAX;
        /* Extend through a single consumer that depends on nothing else. */
        if (only != UINT32_MAX && s->pred_off[only + 1] - s->pred_off[only] == 1) {
          pending[only] = 0;
          v = only;
          continue;
        }
        for (uint32_t q = s->succ_off[v]; q < s->succ_off[v + 1]; q++)
          if (--pending[s->succs[q]] == 0) next[nn++] = s->succs[q];
        break;
      }
    }
    uint32_t *t = wave; wave = next; next = t;
    nw = nn;
  }
  rill__free(s->c->a, pending); rill__free(s->c->a, wave); rill__free(s->c->a, next);
  return NULL;
}

/* A stream for a chain or node starting at `head`: one whose last node
 * provably finished before it (preferring the last node's op to match
 * `like`'s), else an unused one, else the one whose last node comes first. */
static int pick_stream(sched_t *s, const int64_t *tail, uint32_t head, const ir_node_t *like) {
  int best = -1, same = -1, fresh = -1, oldest = 0;
  for (uint32_t t = 0; t < s->max_streams; t++) {
    if (tail[t] < 0) {
      if (fresh < 0) fresh = (int)t;
      continue;
    }
    if (tail[t] < tail[oldest] || tail[oldest] < 0) oldest = (int)t;
    if (!reaches(s, (uint32_t)tail[t], head)) continue;
    const ir_node_t *tn = &s->f->nodes.items[tail[t]];
    if (like && same < 0 && tn->kind == like->kind && tn->target == like->target) same = (int)t;
    if (best < 0) best = (int)t;
  }
  if (same >= 0) return same;
  if (best >= 0) return best;
  if (fresh >= 0) return fresh;
  return oldest;
}

static rill_status_t policy_asap(sched_t *s) {
  uint32_t n = s->n;
  uint32_t *heavy_out = rill__calloc(s->c->a, n ? n : 1, 4);
  bool *heavy_in = rill__calloc(s->c->a, n ? n : 1, 1);
  int64_t tail[ISA_MAX_STREAMS];
  if (!heavy_out || !heavy_in) {
    rill__free(s->c->a, heavy_out); rill__free(s->c->a, heavy_in);
    return rill__oom();
  }
  for (uint32_t i = 0; i < n; i++) {
    heavy_out[i] = UINT32_MAX;
    uint32_t pick = UINT32_MAX;
    for (uint32_t k = s->succ_off[i]; k < s->succ_off[i + 1]; k++) {
      uint32_t v = s->succs[k];
      if (!heavy_in[v] && (pick == UINT32_MAX || s->after[v] > s->after[pick])) pick = v;
    }
    if (pick != UINT32_MAX) {
      heavy_out[i] = pick;
      heavy_in[pick] = true;
    }
  }
  for (uint32_t t = 0; t < ISA_MAX_STREAMS; t++) tail[t] = -1;
  /* Chains in the order of their heads; a chain's last node becomes its stream's tail. */
  for (uint32_t h = 0; h < n; h++) {
    if (heavy_in[h]) continue;
    int st = pick_stream(s, tail, h, NULL);
    uint32_t v = h;
    for (;;) {
      s->stream[v] = st;
      if (heavy_out[v] == UINT32_MAX) break;
      v = heavy_out[v];
    }
    tail[st] = v;
  }
  rill__free(s->c->a, heavy_out);
  rill__free(s->c->a, heavy_in);
  return NULL;
}

static rill_status_t policy_rank(sched_t *s) {
  int64_t tail[ISA_MAX_STREAMS];
  for (uint32_t t = 0; t < ISA_MAX_STREAMS; t++) tail[t] = -1;
  for (uint32_t i = 0; i < s->n; i++) s->stream[i] = -1;
  for (uint32_t i = 0; i < s->n; i++) {
    if (s->stream[i] >= 0) continue;
    int st = pick_stream(s, tail, i, &s->f->nodes.items[i]);
    uint32_t v = i;
    for (;;) {
      s->stream[v] = st;
      if ((int64_t)v > tail[st]) tail[st] = v;
      uint32_t pick = UINT32_MAX;
      for (uint32_t k = s->succ_off[v]; k < s->succ_off[v + 1]; k++) {
        uint32_t w = s->succs[k];
        if (s->stream[w] < 0 && (pick == UINT32_MAX || s->after[w] > s->after[pick])) pick = w;
      }
      if (pick == UINT32_MAX) break;
      v = pick;
    }
  }
  return NULL;
}

/* ---- ios ---- */
/* The fraction of the GPU one op can fill on its own: its output elements
 * against an H100/H200's resident threads (132 SMs x 2048). */
static double node_util(const asm_ctx_t *c, const ir_node_t *n) {
  if (n->kind != N_OP) return 1.0;
  const isa_opdecl_t *d = asm_decl(c, n);
  double numel = 0;
  for (uint32_t i = 0; i < d->nout; i++) numel += (double)rill_type_numel(&d->out[i]);
  double u = numel / (132.0 * 2048.0);
  return u < 0.05 ? 0.05 : u > 1 ? 1 : u;
}

/* The profile `rill tune` writes: {"device": ..., "ops": [{"op": TEXT, "us":
 * time alone, "two_us": two copies on two streams at once}], "schedules":
 * [...], "best": POLICY}, TEXT as the lowered form writes an op declaration;
 * "best" (optional) is the policy measured fastest on the whole program. */
static rill_status_t load_profile(asm_ctx_t *c) {
  if (c->prof_loaded || !c->opts || !c->opts->profile) return NULL;
  c->prof_loaded = true;
  const char *path = c->opts->profile;
  uint8_t *bytes;
  size_t n;
  RILL_TRY(rill__status_prefix(rill__read_file(c->a, path, &bytes, &n), "profile: "));
  cJSON *root = cJSON_ParseWithLength((const char *)bytes, n);
  const char *at = root ? NULL : cJSON_GetErrorPtr();
  long off = at && at >= (const char *)bytes && at <= (const char *)bytes + n ? (long)(at - (const char *)bytes) : 0;
  rill__free(c->a, bytes);
  rill_status_t st = NULL;
  const cJSON *ops = root ? cJSON_GetObjectItemCaseSensitive(root, "ops") : NULL, *e;
  if (!root) {
    st = rill__status(RILL_INVALID_ARGUMENT, "profile %s: not JSON (near byte %ld)", path, off);
    goto done;
  }
  if (!cJSON_IsArray(ops)) {
    st = rill__status(RILL_INVALID_ARGUMENT, "profile %s: not a profile from rill tune (no \"ops\" list)", path);
    goto done;
  }
  int count = cJSON_GetArraySize(ops), i = 0;
  c->prof_us = rill__calloc(c->a, (size_t)count + 1, sizeof(double));
  c->prof_two_us = rill__calloc(c->a, (size_t)count + 1, sizeof(double));
  if (!c->prof_us || !c->prof_two_us) { st = rill__oom(); goto done; }
  cJSON_ArrayForEach(e, ops) {
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op"), *us = cJSON_GetObjectItemCaseSensitive(e, "us"),
                *two = cJSON_GetObjectItemCaseSensitive(e, "two_us");
    if (!cJSON_IsString(op) || !cJSON_IsNumber(us) || !cJSON_IsNumber(two) || !(us->valuedouble >= 0) || !(two->valuedouble >= 0)) {
      st = rill__status(RILL_INVALID_ARGUMENT, "profile %s: entry %d needs \"op\" (text), \"us\" and \"two_us\" (non-negative numbers)", path, i + 1);
      goto done;
    }
    char *key = rill__arena_strndup(&c->arena, op->valuestring, strlen(op->valuestring));
    if (!key) { st = rill__oom(); goto done; }
    c->prof_us[i] = us->valuedouble;
    c->prof_two_us[i] = two->valuedouble;
    if ((st = rill__map_put(&c->prof_map, key, strlen(key), (uint32_t)i))) goto done;
    i++;
  }
  const cJSON *best = cJSON_GetObjectItemCaseSensitive(root, "best");
  int k = cJSON_IsString(best) ? policy_find(best->valuestring) : -1;
  if (k >= 0) {
    c->prof_best = POLICIES[k].name;
  } else if (best) {
    st = policy_unknown("profile ", path, ": \"best\" names no schedule policy");
  }
done:
  cJSON_Delete(root);
  return st;
}

/* A node's measured time and GPU share from the profile; false when it has none. */
static bool profiled(asm_ctx_t *c, const ir_node_t *n, double *us, double *util) {
  if (n->kind != N_OP || n->in_place || !c->prof_us) return false;
  rill_buf_t b;
  rill__buf_init(&b, c->a);
  uint32_t i;
  bool found = !isa_print_opdecl(&b, &c->ops.items[n->target]) && rill__map_get(&c->prof_map, b.data, b.len, &i);
  rill__buf_free(&b);
  if (!found) return false;
  double one = c->prof_us[i], two = c->prof_two_us[i];
  *us = one;
  /* Two copies at once: 2x one time means each fills the GPU, 1x none of it. */
  double u = one > 0 ? (two - one) / one : 1;
  *util = u < 0.05 ? 0.05 : u > 1 ? 1 : u;
  return true;
}

#define IOS_WINDOW 10
#define IOS_SYNC_US 2.0

typedef struct ios_win {
  sched_t *s;
  uint32_t base, k;
  uint32_t pm[IOS_WINDOW], adj[IOS_WINDOW];  /* predecessors, neighbours, inside the window */
  double cost[IOS_WINDOW], util[IOS_WINDOW];
  double lat[1 << IOS_WINDOW];               /* per stage (subset); <0: not yet computed */
} ios_win_t;

/* The connected part of stage t's subgraph that holds the nodes in `seed`. */
static uint32_t component(const ios_win_t *w, uint32_t t, uint32_t seed) {
  uint32_t comp = seed, grow = seed;
  do {
    comp = grow;
    for (uint32_t b = comp; b; b &= b - 1) grow |= w->adj[__builtin_ctz(b)] & t;
  } while (grow != comp);
  return comp;
}

/* A stage's groups are the connected parts of its subgraph, each run in
 * order on one stream. Its latency under the cost model: the longest group,
 * or the whole stage's work squeezed onto one GPU if that is longer, plus a
 * synchronisation per extra stream. */
static double stage_latency(ios_win_t *w, uint32_t t) {
  if (w->lat[t] >= 0) return w->lat[t];
  int groups = 0;
  double longest = 0, work = 0;
  for (uint32_t left = t; left;) {
    uint32_t comp = component(w, t, left & -left);
    double sum = 0;
    for (uint32_t b = comp; b; b &= b - 1) {
      int i = __builtin_ctz(b);
      sum += w->cost[i];
      work += w->cost[i] * w->util[i];
    }
    if (sum > longest) longest = sum;
    groups++;
    left &= ~comp;
  }
  double l = (longest > work ? longest : work) + IOS_SYNC_US * (groups - 1);
  if ((uint32_t)groups > w->s->max_streams) l = INFINITY;
  return w->lat[t] = l;
}

static bool is_downset(const ios_win_t *w, uint32_t d) {
  for (uint32_t b = d; b; b &= b - 1)
    if (w->pm[__builtin_ctz(b)] & ~d) return false;
  return true;
}

/* Dynamic programming over the window's downsets: the best sequence of
 * stages that runs it, as in IOS; each stage's groups then get streams, the
 * heaviest stream 0. */
static rill_status_t ios_window(ios_win_t *w) {
  sched_t *s = w->s;
  uint32_t full = (1u << w->k) - 1;
  static const double UNSET = -1;
  double *best = rill__calloc(s->c->a, (size_t)full + 1, sizeof(double));
  uint32_t *choice = rill__calloc(s->c->a, (size_t)full + 1, 4);
  if (!best || !choice) {
    rill__free(s->c->a, best);
    rill__free(s->c->a, choice);
    return rill__oom();
  }
  for (uint32_t t = 0; t <= full; t++) w->lat[t] = UNSET;
  for (uint32_t d = 1; d <= full; d++) {
    best[d] = INFINITY;
    if (!is_downset(w, d)) continue;
    /* The last stage t: d without it must be a downset too. */
    for (uint32_t t = d; t; t = (t - 1) & d) {
      uint32_t rest = d & ~t;
      if (rest && best[rest] == INFINITY) continue; /* not a downset, or not reachable */
      double v = (rest ? best[rest] : 0) + stage_latency(w, t);
      if (v < best[d]) {
        best[d] = v;
        choice[d] = t;
      }
    }
  }
  for (uint32_t d = full; d;) {
    uint32_t t = choice[d];
    /* Groups of the stage, heaviest first, on streams 0, 1, ... */
    uint32_t comps[IOS_WINDOW];
    double sums[IOS_WINDOW];
    int g = 0;
    for (uint32_t left = t; left;) {
      uint32_t comp = component(w, t, left & -left);
      double sum = 0;
      for (uint32_t b = comp; b; b &= b - 1) sum += w->cost[__builtin_ctz(b)];
      int j = g++;
      while (j > 0 && sums[j - 1] < sum) { comps[j] = comps[j - 1]; sums[j] = sums[j - 1]; j--; }
      comps[j] = comp;
      sums[j] = sum;
      left &= ~comp;
    }
    for (int j = 0; j < g; j++)
      for (uint32_t b = comps[j]; b; b &= b - 1) s->stream[w->base + __builtin_ctz(b)] = j;
    d &= ~t;
  }
  rill__free(s->c->a, best);
  rill__free(s->c->a, choice);
  return NULL;
}

/* Windows of up to IOS_WINDOW nodes in program order, ended early where no
 * edge leaves the window but from its last node (the join of a block). */
static rill_status_t policy_ios(sched_t *s) {
  RILL_TRY(load_profile(s->c));
  ios_win_t *w = rill__calloc(s->c->a, 1, sizeof *w);
  if (!w) return rill__oom();
  w->s = s;
  rill_status_t st = NULL;
  for (uint32_t a = 0; !st && a < s->n;) {
    uint32_t b = a, reach = a;
    while (b < s->n && b - a < IOS_WINDOW) {
      /* A node no other node reads is a result of the function: it is
       * needed at the end, so no cut after it. */
      if (s->succ_off[b] == s->succ_off[b + 1]) reach = s->n;
      for (uint32_t q = s->succ_off[b]; q < s->succ_off[b + 1]; q++)
        if (s->succs[q] > reach) reach = s->succs[q];
      b++;
      if (reach < b) break; /* everything so far is consumed inside: a cut */
    }
    w->base = a;
    w->k = b - a;
    for (uint32_t i = 0; i < w->k; i++) {
      uint32_t v = a + i;
      w->pm[i] = w->adj[i] = 0;
      if (!profiled(s->c, &s->f->nodes.items[v], &w->cost[i], &w->util[i])) {
        w->cost[i] = s->cost[v];
        w->util[i] = node_util(s->c, &s->f->nodes.items[v]);
      }
    }
    for (uint32_t i = 0; i < w->k; i++) {
      uint32_t v = a + i;
      for (uint32_t q = s->pred_off[v]; q < s->pred_off[v + 1]; q++) {
        uint32_t p = s->preds[q];
        if (p >= a && p < b) {
          w->pm[i] |= 1u << (p - a);
          w->adj[i] |= 1u << (p - a);
          w->adj[p - a] |= 1u << i;
        }
      }
    }
    st = ios_window(w);
    a = b;
  }
  rill__free(s->c->a, w);
  return st;
}

/* ---- ordering and synchronisation ---- */
typedef struct wait_ref {
  uint32_t producer, before;  /* a wait for producer's event, issued just before node `before` */
} wait_ref_t;

static rill_status_t order_nodes(sched_t *s, uint32_t *order) {
  /* A counting sort by level keeps program order within a level. */
  uint32_t maxl = 0;
  for (uint32_t i = 0; i < s->n; i++) if (s->level[i] > maxl) maxl = s->level[i];
  uint32_t *count = rill__calloc(s->c->a, (size_t)maxl + 2, 4);
  if (!count) return rill__oom();
  for (uint32_t i = 0; i < s->n; i++) count[s->level[i] + 1]++;
  for (uint32_t l = 0; l <= maxl; l++) count[l + 1] += count[l];
  for (uint32_t i = 0; i < s->n; i++) order[count[s->level[i]]++] = i;
  rill__free(s->c->a, count);
  return NULL;
}

/* Rewrites the node list in `order` with the events the streams need.
 * Returns false in *ok when more events would be live at once than a
 * function has (the caller then falls back to one stream). */
static rill_status_t synchronise(sched_t *s, const uint32_t *order, bool *ok) {
  asm_ctx_t *c = s->c;
  ir_func_t *f = s->f;
  uint32_t n = s->n, S = 0;
  for (uint32_t i = 0; i < n; i++) if ((uint32_t)s->stream[i] + 1 > S) S = (uint32_t)s->stream[i] + 1;
  rill_status_t st = NULL;
  uint32_t *seq = rill__calloc(c->a, n ? n : 1, 4), *vc = rill__calloc(c->a, (size_t)S * S, 4);
  uint32_t *cnt = rill__calloc(c->a, S, 4), *snap_of = rill__calloc(c->a, n ? n : 1, 4);
  uint32_t *waits_left = rill__calloc(c->a, n ? n : 1, 4);
  int *ev = rill__calloc(c->a, n ? n : 1, sizeof(int));
  RILL_VEC(uint32_t) snaps = {0};
  RILL_VEC(wait_ref_t) waits = {0};
  RILL_VEC(ir_node_t) out = {0};
  int32_t *newpos = rill__calloc(c->a, f->nodes.len ? f->nodes.len : 1, 4);
  *ok = true;
  if (!seq || !vc || !cnt || !snap_of || !waits_left || !ev || !newpos) { st = rill__oom(); goto done; }
  /* Round one: which waits are needed, with vector clocks. Every producer
   * with a consumer on another stream has its clock snapshotted after it. */
  for (uint32_t k = 0; k < n; k++) {
    uint32_t u = order[k], su = (uint32_t)s->stream[u];
    uint32_t *mine = &vc[(size_t)su * S];
    for (uint32_t q = s->pred_off[u]; q < s->pred_off[u + 1]; q++) {
      uint32_t p = s->preds[q], sp = (uint32_t)s->stream[p];
      if (sp == su || mine[sp] >= seq[p]) continue;
      const uint32_t *snap = &snaps.items[(size_t)snap_of[p] * S];
      for (uint32_t t = 0; t < S; t++) if (snap[t] > mine[t]) mine[t] = snap[t];
      waits_left[p]++;
      if ((st = RILL_VEC_PUSH(c->a, &waits, ((wait_ref_t){p, u})))) goto done;
    }
    seq[u] = mine[su] = ++cnt[su];
    bool cross = false;
    for (uint32_t q = s->succ_off[u]; q < s->succ_off[u + 1]; q++) cross |= s->stream[s->succs[q]] != s->stream[u];
    if (cross) {
      snap_of[u] = (uint32_t)(snaps.len / S);
      for (uint32_t t = 0; t < S; t++)
        if ((st = RILL_VEC_PUSH(c->a, &snaps, mine[t]))) goto done;
    }
  }
  /* Round two: the node list, with events only where a wait needs one. */
  uint64_t in_use = 0, used = 0;
  size_t wi = 0;
  const ir_node_t *ret = &f->nodes.items[n];
  for (uint32_t k = 0; k < n; k++) {
    uint32_t u = order[k];
    const ir_node_t *nu = &f->nodes.items[u];
    for (; wi < waits.len && waits.items[wi].before == u; wi++) {
      uint32_t p = waits.items[wi].producer;
      ir_node_t wn = {.kind = N_WAIT_EVENT, .line = nu->line, .col = nu->col, .stream = s->stream[u],
                      .event = ev[p], .event_stream = s->stream[u]};
      if ((st = RILL_VEC_PUSH(c->a, &out, wn))) goto done;
      if (--waits_left[p] == 0) in_use &= ~(1ull << ev[p]);
    }
    newpos[u] = (int32_t)out.len;
    ir_node_t copy = *nu;
    copy.stream = s->stream[u];
    if ((st = RILL_VEC_PUSH(c->a, &out, copy))) goto done;
    if (waits_left[u]) {
      /* One event is left free for the fork and join the emitter adds. */
      int e = 0;
      while (e < ISA_MAX_EVENTS - 1 && (in_use >> e & 1)) e++;
      if (e == ISA_MAX_EVENTS - 1) { *ok = false; goto done; }
      in_use |= 1ull << e;
      used |= 1ull << e;
      ev[u] = e;
      ir_node_t an = {.kind = N_ADD_EVENT, .line = nu->line, .col = nu->col, .stream = s->stream[u],
                      .event = e, .event_stream = s->stream[u]};
      if ((st = RILL_VEC_PUSH(c->a, &out, an))) goto done;
    }
  }
  newpos[n] = (int32_t)out.len;
  if ((st = RILL_VEC_PUSH(c->a, &out, *ret))) goto done;
  out.items[out.len - 1].stream = 0;
  asm_replace_nodes(c, f, out.items, out.len, out.cap, newpos);
  out.items = NULL;
  f->nstreams = S;
  f->events_used = used;
done:
  rill__free(c->a, seq); rill__free(c->a, vc); rill__free(c->a, cnt); rill__free(c->a, snap_of);
  rill__free(c->a, waits_left); rill__free(c->a, ev); rill__free(c->a, newpos);
  RILL_VEC_FREE(c->a, &snaps);
  RILL_VEC_FREE(c->a, &waits);
  RILL_VEC_FREE(c->a, &out);
  return st;
}

/* Numbers streams by first use in `order`, so the first node runs on the
 * invoking stream and only used streams count. */
static void compact_streams(sched_t *s, const uint32_t *order) {
  int map[ISA_MAX_STREAMS];
  int next = 0;
  for (int t = 0; t < ISA_MAX_STREAMS; t++) map[t] = -1;
  for (uint32_t k = 0; k < s->n; k++) {
    int *m = &map[s->stream[order[k]]];
    if (*m < 0) *m = next++;
  }
  for (uint32_t i = 0; i < s->n; i++) s->stream[i] = map[s->stream[i]];
}

static void one_stream(ir_func_t *f) {
  for (size_t i = 0; i < f->nodes.len; i++) f->nodes.items[i].stream = 0;
  f->nstreams = 1;
}

rill_status_t asm_schedule(asm_ctx_t *c, ir_func_t *f) {
  if (f->hand_scheduled) return NULL;
  const char *policy = c->opts && c->opts->schedule ? c->opts->schedule : NULL;
  if (!policy && c->opts && c->opts->profile) {
    /* No policy asked for: the one the profile measured best. */
    RILL_TRY(load_profile(c));
    policy = c->prof_best;
  }
  if (!policy) policy = DEFAULT_POLICY;
  int k = policy_find(policy);
  if (k < 0) return policy_unknown("unknown schedule policy '", policy, "'");
  rill_status_t (*run)(sched_t *) = POLICIES[k].run;
  uint32_t maxs = c->opts && c->opts->max_streams ? (uint32_t)c->opts->max_streams : DEFAULT_MAX_STREAMS;
  one_stream(f);
  if (!run || maxs < 2 || f->nodes.len < 3) return NULL;
  sched_t s = {.c = c, .f = f, .n = (uint32_t)f->nodes.len - 1, .max_streams = maxs};
  uint32_t *order = rill__calloc(c->a, s.n ? s.n : 1, 4);
  rill_status_t st = order ? build_graph(&s) : rill__oom();
  if (!st) st = run(&s);
  if (!st) st = order_nodes(&s, order);
  bool ok = true;
  if (!st) {
    compact_streams(&s, order);
    st = synchronise(&s, order, &ok);
  }
  if (!st && !ok) one_stream(f);
  rill__free(c->a, order);
  rill__free(c->a, s.pred_off); rill__free(c->a, s.preds); rill__free(c->a, s.succ_off); rill__free(c->a, s.succs);
  rill__free(c->a, s.cost); rill__free(c->a, s.after); rill__free(c->a, s.level); rill__free(c->a, s.stream);
  rill__free(c->a, s.mark); rill__free(c->a, s.stack);
  return st;
}
