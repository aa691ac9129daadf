/* layout.c: channels-last layouts for f16 and bf16 convolutions, run at -O1
 * after fold and before fuse.
 *
 * Tensor-core convolutions want NHWC; cuDNN given NCHW converts to it and
 * back around every call (as much device time as the convolutions take at
 * batch 1). So a conv2d in f16 or bf16 whose weight is a constant at hand
 * becomes conv2d {layout="nhwc"} on the channels-last twin of its input,
 * with its weight transposed to [O,kh,kw,C/groups] (folded here, once), and
 * its result is that twin's layout. The layout then travels through the
 * ops that do not care: the pools (which take layout="nhwc" too),
 * elementwise ops whose operands are rank 4 (transposed alike, so that
 * broadcasting is unchanged) or single elements, and concat (its axis
 * moved). Every other use of such a value (flatten, linear, a return, a
 * call, ...) gets the value in NCHW from one transpose back, placed before
 * its first such use; a value first needed channels-last and produced in
 * NCHW (the program's input, say) gets one transpose forward. A transpose
 * whose moved dimensions are 1s except one is a reshape (a view). The
 * program's meaning is unchanged: `-O0` against `-O1` tests check it.
 * Functions with stream statements are left as written.
 */
#include <stdio.h>

#include "asm.h"

static const int64_t TO_NHWC[4] = {0, 2, 3, 1}, TO_NCHW[4] = {0, 3, 1, 2};

typedef struct lay {
  asm_ctx_t *c;
  ir_func_t *f;
  RILL_VEC(ir_node_t) out;   /* the new node list */
  int32_t *twin;             /* value -> its channels-last twin (value id), or -1 */
  bool *missing;             /* value whose NCHW form is not made yet (its op now makes the twin) */
  bool *native;              /* value whose op now makes the twin (channels-last is its own layout) */
  size_t nvals;              /* values before the pass: twins come after */
  isa_attr_t *perm_attr[2];  /* {perm=TO_NHWC}, {perm=TO_NCHW} */
} lay_t;

static rill_type_t permuted(const rill_type_t *t, const int64_t perm[4]) {
  rill_type_t o = *t;
  for (int i = 0; i < 4; i++) o.dims[i] = t->dims[perm[i]];
  return o;
}

/* Whether permuting t by perm moves data: the dims other than 1 keep their order otherwise. */
static bool moves_data(const rill_type_t *t, const int64_t perm[4]) {
  int64_t last = -1;
  for (int i = 0; i < 4; i++) {
    if (t->dims[perm[i]] == 1) continue;
    if (perm[i] < last) return true;
    last = perm[i];
  }
  return false;
}

/* A node `res = transpose(arg)` (or a reshape where no data moves) appended
 * to the new list, at the place of node `at`. */
static rill_status_t add_permute(lay_t *L, uint32_t arg, uint32_t res, bool to_nhwc, const ir_node_t *at) {
  asm_ctx_t *c = L->c;
  const rill_type_t *it = &L->f->values.items[arg].type, *ot = &L->f->values.items[res].type;
  const int64_t *perm = to_nhwc ? TO_NHWC : TO_NCHW;
  uint32_t op;
  if (moves_data(it, perm)) {
    RILL_TRY(asm_intern_op(c, "transpose", it, 1, ot, 1, L->perm_attr[to_nhwc ? 0 : 1], 1, &op));
  } else {
    isa_attr_t *a = rill__arena_alloc(&c->arena, sizeof *a);
    int64_t *dims = rill__arena_memdup(&c->arena, ot->dims, sizeof(int64_t) * 4);
    if (!a || !dims) return rill__oom();
    *a = (isa_attr_t){.name = "shape", .kind = ISA_ATTR_INTS, .count = 4, .ints = dims};
    RILL_TRY(asm_intern_op(c, "reshape", it, 1, ot, 1, a, 1, &op));
  }
  uint32_t *args = rill__arena_memdup(&c->arena, &arg, sizeof arg), *r = rill__arena_memdup(&c->arena, &res, sizeof res);
  if (!args || !r) return rill__oom();
  ir_node_t n = {.kind = N_OP, .line = at->line, .col = at->col, .target = op, .args = args, .nargs = 1, .res = r, .nres = 1};
  L->f->values.items[res].def = (int32_t)L->out.len;
  return RILL_VEC_PUSH(c->a, &L->out, n);
}

/* A new value of type t named after value v with `suffix`. */
static rill_status_t new_value(lay_t *L, uint32_t v, const rill_type_t *t, const char *suffix, uint32_t *out) {
  asm_ctx_t *c = L->c;
  const char *base = L->f->values.items[v].name ? L->f->values.items[v].name : "v";
  size_t len = strlen(base) + strlen(suffix) + 1;
  char *name = rill__arena_alloc(&c->arena, len);
  if (!name) return rill__oom();
  snprintf(name, len, "%s%s", base, suffix);
  ir_value_t x = {.name = name, .type = *t, .kind = V_RESULT, .def = -1, .slot = -1, .reg = -1};
  x.line = L->f->values.items[v].line;
  x.col = L->f->values.items[v].col;
  *out = (uint32_t)L->f->values.len;
  return RILL_VEC_PUSH(c->a, &L->f->values, x);
}

/* The channels-last twin of rank-4 value v, made by a transpose before node `at` if there is none yet. */
static rill_status_t twin_of(lay_t *L, uint32_t v, const ir_node_t *at, uint32_t *out) {
  if (v < L->nvals && L->twin[v] >= 0) { *out = (uint32_t)L->twin[v]; return NULL; }
  rill_type_t t = permuted(&L->f->values.items[v].type, TO_NHWC);
  uint32_t w;
  RILL_TRY(new_value(L, v, &t, ".nhwc", &w));
  RILL_TRY(add_permute(L, v, w, true, at));
  if (v < L->nvals) L->twin[v] = (int32_t)w;
  *out = w;
  return NULL;
}

/* Value v in NCHW for node `at`: made from its twin (once) where its op now makes the twin only. */
static rill_status_t need_nchw(lay_t *L, uint32_t v, const ir_node_t *at) {
  if (v >= L->nvals || !L->missing[v]) return NULL;
  L->missing[v] = false;
  return add_permute(L, (uint32_t)L->twin[v], v, false, at);
}

/* Weights transposed at assembly at most this large (fold takes them; a
 * real network's largest is a few MiB). */
#define WEIGHT_MAX_BYTES ((size_t)64 << 20)

/* A conv2d this pass turns channels-last: f16 or bf16, no layout given, its weight a constant at hand. */
static bool conv_wanted(const asm_ctx_t *c, const ir_func_t *f, const ir_node_t *n) {
  if (!asm_is_op(c, n, "conv2d")) return false;
  const isa_opdecl_t *d = asm_decl(c, n);
  if ((d->in[0].dtype != RILL_F16 && d->in[0].dtype != RILL_BF16) || d->in[0].rank != 4 || asm_attr(d, "layout")) return false;
  const ir_value_t *w = &f->values.items[n->args[1]];
  size_t bytes;
  return w->kind == V_CONST && c->consts.items[w->konst].data && rill__type_sizes(&d->in[1], NULL, &bytes) && bytes <= WEIGHT_MAX_BYTES;
}

/* Whether value v is made channels-last (an operand that pulls its op along). */
static bool is_native(const lay_t *L, uint32_t v) { return v < L->nvals && L->native[v]; }

/* How node n takes channels-last operands: 0 it stays NCHW, 1 its first
 * operand (a pool of a value made channels-last), 2 every rank-4 operand
 * (elementwise, concat): when that takes fewer transposes now than staying
 * NCHW would. Going channels-last costs a transpose for each rank-4
 * operand that has no twin (constants' are folded, free); staying costs
 * one for each operand made channels-last whose NCHW form is not made yet.
 * (An input that a convolution also reads has a twin but is no reason.) */
static int follows(const lay_t *L, const ir_node_t *n) {
  const asm_ctx_t *c = L->c;
  if (n->kind != N_OP || n->nres != 1) return 0;
  const isa_opdecl_t *d = asm_decl(c, n);
  if (asm_is_op(c, n, "max_pool2d") || asm_is_op(c, n, "avg_pool2d") || asm_is_op(c, n, "adaptive_avg_pool2d"))
    return d->in[0].rank == 4 && !asm_attr(d, "layout") && is_native(L, n->args[0]) ? 1 : 0;
  bool concat = asm_is_op(c, n, "concat");
  const ops_def_t *def = ops_find(d->name);
  if (!concat && !(def && ops_is_elementwise(def))) return 0;
  if (d->out[0].rank != 4) return 0;
  int go = 0, stay = 0;
  for (uint32_t j = 0; j < n->nargs; j++) {
    const rill_type_t *t = &d->in[j];
    uint32_t v = n->args[j];
    bool single = true; /* one element: the same in either layout */
    for (int k = 0; k < t->rank; k++) single &= t->dims[k] == 1;
    if (t->rank != 4 && (concat || !single)) return 0;
    if (t->rank != 4) continue;
    bool twin = v < L->nvals && L->twin[v] >= 0;
    go += !twin && L->f->values.items[v].kind != V_CONST;
    stay += v < L->nvals && L->missing[v];
  }
  return go < stay ? 2 : 0;
}

/* Node n rewritten to channels-last: its rank-4 operands' twins, attributes `at`, result the twin of its result. */
static rill_status_t emit_nhwc(lay_t *L, const ir_node_t *n, uint32_t *args, const isa_attr_t *at, uint32_t nat) {
  asm_ctx_t *c = L->c;
  ir_func_t *f = L->f;
  const isa_opdecl_t *d = asm_decl(c, n);
  rill_type_t *in = rill__arena_alloc(&c->arena, sizeof *in * (n->nargs ? n->nargs : 1));
  if (!in) return rill__oom();
  for (uint32_t j = 0; j < n->nargs; j++) in[j] = f->values.items[args[j]].type;
  uint32_t r = n->res[0], rt;
  rill_type_t ot = permuted(&d->out[0], TO_NHWC);
  RILL_TRY(new_value(L, r, &ot, ".nhwc", &rt));
  uint32_t op;
  RILL_TRY(asm_intern_op(c, d->name, in, n->nargs, &ot, 1, at, nat, &op));
  uint32_t *res = rill__arena_memdup(&c->arena, &rt, sizeof rt);
  if (!res) return rill__oom();
  ir_node_t m = *n;
  m.target = op;
  m.args = args;
  m.res = res;
  f->values.items[rt].def = (int32_t)L->out.len;
  f->values.items[r].def = -1;
  L->twin[r] = (int32_t)rt;
  L->missing[r] = L->native[r] = true;
  return RILL_VEC_PUSH(c->a, &L->out, m);
}

/* Node n into the new list, channels-last where it can be. */
static rill_status_t place(lay_t *L, const ir_node_t *n) {
  asm_ctx_t *c = L->c;
  ir_func_t *f = L->f;
  bool conv = n->kind == N_OP && conv_wanted(c, f, n);
  int how = conv ? 0 : follows(L, n);
  if (!conv && !how) {
    for (uint32_t j = 0; j < n->nargs; j++) RILL_TRY(need_nchw(L, n->args[j], n));
    ir_node_t m = *n;
    for (uint32_t j = 0; j < n->nres; j++) f->values.items[n->res[j]].def = (int32_t)L->out.len;
    return RILL_VEC_PUSH(c->a, &L->out, m);
  }
  /* The decl lives in the op table, which interning the transposes below may
   * move: what is needed of it is copied first (its types are in the arena). */
  const rill_type_t *din = asm_decl(c, n)->in;
  uint32_t nat = asm_decl(c, n)->nattrs;
  uint32_t *args = rill__arena_memdup(&c->arena, n->args, sizeof(uint32_t) * (n->nargs ? n->nargs : 1));
  isa_attr_t *at = rill__arena_alloc(&c->arena, sizeof *at * (nat + 1));
  if (!args || !at) return rill__oom();
  if (nat) memcpy(at, asm_decl(c, n)->attrs, sizeof *at * nat);
  if (conv || how == 1) {
    RILL_TRY(twin_of(L, n->args[0], n, &args[0]));
    if (conv) RILL_TRY(twin_of(L, n->args[1], n, &args[1])); /* a constant: folded after */
    if (conv && n->nargs == 4) RILL_TRY(twin_of(L, n->args[3], n, &args[3])); /* the residual, of the output's layout */
    for (uint32_t j = 2; j < n->nargs && j < 3; j++) RILL_TRY(need_nchw(L, n->args[j], n));
    at[nat++] = (isa_attr_t){.name = "layout", .kind = ISA_ATTR_STRING, .count = 1, .str = "nhwc"};
  } else {
    for (uint32_t j = 0; j < n->nargs; j++)
      if (din[j].rank == 4) RILL_TRY(twin_of(L, n->args[j], n, &args[j]));
    for (uint32_t k = 0; k < nat; k++) {
      if (strcmp(at[k].name, "axis") || at[k].kind != ISA_ATTR_INT) continue;
      /* NCHW axis a is at position 0, 3, 1, 2 in NHWC */
      int64_t a = at[k].ints[0] < 0 ? at[k].ints[0] + 4 : at[k].ints[0];
      static const int64_t moved[4] = {0, 3, 1, 2};
      int64_t *v = rill__arena_alloc(&c->arena, sizeof *v);
      if (!v) return rill__oom();
      *v = a >= 0 && a < 4 ? moved[a] : at[k].ints[0];
      at[k].ints = v;
    }
  }
  return emit_nhwc(L, n, args, at, nat);
}

rill_status_t asm_pass_layout(asm_ctx_t *c, ir_func_t *f) {
  if (f->hand_scheduled) return NULL;
  /* (a transposed twin of a state's value would miss its updates) */
  for (size_t v = 0; v < f->values.len; v++)
    if (f->values.items[v].kind == V_STATE) return NULL;
  bool any = false;
  for (size_t i = 0; i < f->nodes.len && !any; i++) any = conv_wanted(c, f, &f->nodes.items[i]);
  if (!any) return NULL;
  lay_t L = {.c = c, .f = f, .nvals = f->values.len};
  size_t n = f->nodes.len;
  L.twin = rill__calloc(c->a, L.nvals ? L.nvals : 1, sizeof(int32_t));
  L.missing = rill__calloc(c->a, L.nvals ? L.nvals : 1, sizeof(bool));
  L.native = rill__calloc(c->a, L.nvals ? L.nvals : 1, sizeof(bool));
  rill_status_t st = L.twin && L.missing && L.native ? NULL : rill__oom();
  for (size_t v = 0; !st && v < L.nvals; v++) L.twin[v] = -1;
  for (int k = 0; !st && k < 2; k++) {
    int64_t *p = rill__arena_memdup(&c->arena, k ? TO_NCHW : TO_NHWC, sizeof TO_NHWC);
    if (!p || !(L.perm_attr[k] = rill__arena_alloc(&c->arena, sizeof(isa_attr_t)))) st = rill__oom();
    else *L.perm_attr[k] = (isa_attr_t){.name = "perm", .kind = ISA_ATTR_INTS, .count = 4, .ints = p};
  }
  for (size_t i = 0; !st && i < n; i++) {
    ir_node_t node = f->nodes.items[i];
    st = place(&L, &node);
  }
  if (!st) {
    /* asm_replace_nodes maps defs through newpos: the defs set here are new positions already. */
    int32_t *ident = rill__calloc(c->a, L.out.len ? L.out.len : 1, sizeof(int32_t));
    if (!ident) st = rill__oom();
    for (size_t i = 0; ident && i < L.out.len; i++) ident[i] = (int32_t)i;
    if (ident) {
      asm_replace_nodes(c, f, L.out.items, L.out.len, L.out.cap, ident);
      L.out.items = NULL;
    }
    rill__free(c->a, ident);
  }
  RILL_VEC_FREE(c->a, &L.out);
  rill__free(c->a, L.twin);
  rill__free(c->a, L.missing);
  rill__free(c->a, L.native);
  /* The weights' transposes become constants. */
  return st ? st : asm_pass_fold(c, f);
}
