/* attention.c: scaled dot-product attention as ONNX exporters write it
 * becomes one `attention` op, run at -O1 after fold (so that the scale,
 * masks and head groupings made of constants are constants) and before
 * fuse (which would merge the softmax's scale and the matmuls' transposes).
 *
 * The pattern, from the last product back:
 *
 *   y = matmul(softmax(S, axis=-1), V)
 *   (or, for S in f16 or bf16, matmul(cast(softmax(cast(S) to f32)) back, V):
 *   a softmax in f32, as transformers' eager attention writes it; or
 *   matmul(cast(cast(softmax(S)) to f32) back, V), the softmax's result
 *   cast to f32 and back, an exact round trip, as ViT's export writes it)
 *   S = a chain of, outermost first: add(S', M) (an additive mask M,
 *       broadcast to S's [B,Hq,Sq,Skv]), where(C, S', fill) or where(C,
 *       fill, S') (fill a scalar constant -inf or at most the dtype's
 *       lowest number), then mul / div by scalar float constants
 *   S' = matmul(Q, KT), KT [B,Hq,D,Skv]
 *
 * Q and KT may themselves be scaled by scalar constants (q * d^-1/4 and
 * k * d^-1/4); KT is k transposed (by transpose ops, composed, or a value
 * given transposed: one transpose [0,1,3,2] is made). K and V may be
 * transformers' repeat_kv of grouped-query heads, reshape(broadcast_to(
 * unsqueeze(x))) from [B,Hkv,S,D] to [B,Hkv*G,S,D]: the op takes x. A
 * constant additive mask that is the causal triangle (0 where key j <=
 * query i + Skv - Sq, -inf or the dtype's lowest elsewhere, Sq <= Skv) and
 * a `where` on a constant condition of that triangle become causal=true;
 * a mask that adds 0 everywhere (zeros, or where(C, 0, x) with C true
 * everywhere, either broadcast to a shape variable's size: ViT's export)
 * and a where(C, S, fill) with C true everywhere are no mask at all (and
 * go with their broadcasts where nothing else reads them);
 * any other additive mask becomes the op's mask operand (reshaped to rank
 * 4), and a `where` on another condition C the mask where(C, 0, fill) (or
 * where(C, fill, 0)): S kept is S + 0, S dropped fill or S + fill, equal
 * for -inf, and for the lowest number e^(x - max) is 0 either way (a query
 * that no key is left to, which the ops give the mean of v and the op gives
 * zeros or weights by S, aside). Every value from S' to the softmax's result must be used by the next
 * step alone; anything else (another axis, a non-constant scale, a second
 * reader of the scores or weights) leaves the ops as they are. The ops that
 * made Q, K and V go where nothing else reads them.
 *
 * The op computes in a wider type than the chain's roundings, so results
 * equal -O0's within rounding. Bodies with stream statements are left as
 * written.
 */
#include <math.h>
#include <stdio.h>

#include "asm.h"

#define CHAIN_MAX 12

typedef struct amatch {
  uint32_t fin;                 /* node: the last product */
  uint32_t q, k, v;             /* values the op reads */
  bool ktrans;                  /* k := transpose(k, kperm) first */
  int64_t kperm[4];
  int32_t mask;                 /* additive mask value, or -1 */
  int32_t wcond;                /* where(C, S, fill) on a condition C that is no constant: C, or -1; */
  uint32_t wfill;               /* its fill, and whether S is kept where C is true */
  bool wkeep;
  bool causal;
  int32_t wmask;                /* Swin's shifted windows: the [1, W, ...] mask added to the scores viewed [B, W, H, Sq, Skv], or -1 */
  int64_t windows;              /* its W */
  double scale;
  uint32_t chain[CHAIN_MAX + 2], nchain; /* nodes that go: the scores' product, scales, masks, softmax */
} amatch_t;

typedef RILL_VEC(ir_node_t) nodes_t;

typedef struct actx {
  asm_ctx_t *c;
  ir_func_t *f;
  const uint32_t *nuse;
} actx_t;

/* The op node making value v where it is op `name` (any op: NULL), or -1. */
static int32_t made_by(const actx_t *A, uint32_t v, const char *name) {
  int32_t d = A->f->values.items[v].def;
  if (d < 0) return -1;
  const ir_node_t *n = &A->f->nodes.items[d];
  return n->kind == N_OP && (!name || asm_is_op(A->c, n, name)) ? d : -1;
}

/* (asm.h) */
bool asm_op_params(asm_ctx_t *c, const ir_node_t *n, ops_params_t *p) {
  const isa_opdecl_t *d = asm_decl(c, n);
  const ops_def_t *def = ops_find(d->name);
  rill_type_t out[4];
  uint32_t nout;
  if (!def || d->nout > 4) return false;
  rill_status_t st = ops_infer_sym(def, &c->syms, d->in, d->nin, d->attrs, d->nattrs, out, 4, &nout, p);
  rill_status_free(st);
  return !st;
}

static bool params_of(const actx_t *A, const ir_node_t *n, ops_params_t *p) { return asm_op_params(A->c, n, p); }

/* The float value of constant v of one element (its data at hand; any
 * rank: exporters write [1] as often as []; callers check that it leaves
 * the other operand's shape alone). */
static bool scalar_float(const actx_t *A, uint32_t v, double *x) {
  const ir_value_t *val = &A->f->values.items[v];
  if (val->kind != V_CONST) return false;
  const isa_const_t *k = &A->c->consts.items[val->konst];
  bool one = true;
  for (int i = 0; i < k->type.rank; i++) one &= k->type.dims[i] == 1;
  if (!k->data || !one || !rill__is_float(k->type.dtype)) return false;
  *x = rill__load_f(k->data, k->type.dtype, 0);
  return true;
}

/* Node d a mul or div of a value by a scalar float constant (finite, not
 * 0), the value of the result's type: its factor and the value. */
static bool scale_step(const actx_t *A, int32_t d, double *factor, uint32_t *other) {
  if (d < 0) return false;
  const ir_node_t *n = &A->f->nodes.items[d];
  bool div = asm_is_op(A->c, n, "div");
  if ((!div && !asm_is_op(A->c, n, "mul")) || n->nargs != 2 || asm_decl(A->c, n)->nattrs) return false;
  for (int side = 0; side < (div ? 1 : 2); side++) {
    double x;
    uint32_t a = n->args[side];
    if (!scalar_float(A, n->args[1 - side], &x) || !isfinite(x) || x == 0) continue;
    if (!rill__type_eq(&A->f->values.items[a].type, &A->f->values.items[n->res[0]].type)) continue;
    *factor = div ? 1 / x : x;
    *other = a;
    return true;
  }
  return false;
}

/* Whether x is the dtype's -inf or at most its lowest finite number (a
 * masked score: e^(x - max) is 0 in every precision). */
static bool masked_value(double x, rill_dtype_t dt) {
  double lowest = dt == RILL_F16 ? -65504.0 : dt == RILL_BF16 ? -3.3895313892515355e38 : dt == RILL_F32 ? -3.4028234663852886e38 : -1.7976931348623157e308;
  return x <= lowest;
}

/* Constant value v (data at hand, numbers, leading dims 1, its last two
 * dims Sq and Skv, Sq <= Skv) as the causal triangle, key j kept where
 * j <= i + Skv - Sq: `kept` and `dropped` say what each element must be
 * (0: the number 0 or false; 1: masked_value, or true for bool). */
static bool causal_const(const actx_t *A, uint32_t v, int64_t Sq, int64_t Skv, bool boolean, bool kept_true) {
  const ir_value_t *val = &A->f->values.items[v];
  if (val->kind != V_CONST || isa_dim_is_sym(Sq) || isa_dim_is_sym(Skv) || Sq > Skv) return false;
  const isa_const_t *k = &A->c->consts.items[val->konst];
  const rill_type_t *t = &k->type;
  if (!k->data || t->rank < 2 || t->dims[t->rank - 2] != Sq || t->dims[t->rank - 1] != Skv) return false;
  for (int i = 0; i < t->rank - 2; i++)
    if (t->dims[i] != 1) return false;
  if (boolean != (t->dtype == RILL_BOOL)) return false;
  bool fill = k->origin == ISA_CONST_FILL;
  for (int64_t i = 0; i < Sq; i++)
    for (int64_t j = 0; j < Skv; j++) {
      size_t at = fill ? 0 : (size_t)(i * Skv + j);
      bool keep = j <= i + Skv - Sq;
      if (boolean) {
        bool b = ((const uint8_t *)k->data)[at] != 0;
        if (b != (keep == kept_true)) return false;
      } else {
        double x = rill__load_f(k->data, t->dtype, at);
        if (keep ? x != 0 : !masked_value(x, t->dtype)) return false;
      }
    }
  return true;
}

/* Whether value v is one number everywhere, zero (want_true false: a float
 * 0) or true (a bool, every element not 0): a constant with its data at
 * hand, or one broadcast or reshaped (`broadcast_to`, `reshape`,
 * `unsqueeze`, to a shape that may be a shape variable's, so not folded). */
static bool uniform_const(const actx_t *A, uint32_t v, bool want_true) {
  for (int hop = 0; hop < 8; hop++) {
    int32_t d = made_by(A, v, NULL);
    if (d >= 0) {
      const ir_node_t *n = &A->f->nodes.items[d];
      if (n->nargs < 1 || !(asm_is_op(A->c, n, "broadcast_to") || asm_is_op(A->c, n, "reshape") || asm_is_op(A->c, n, "unsqueeze")))
        return false;
      v = n->args[0];
      continue;
    }
    const isa_const_t *k = asm_const_of(A->c, A->f, v);
    if (!k || !k->data || (want_true ? k->type.dtype != RILL_BOOL : !rill__is_float(k->type.dtype))) return false;
    size_t n = 1, es = rill_dtype_size(k->type.dtype);
    for (int i = 0; i < k->type.rank; i++) n *= (size_t)k->type.dims[i];
    if (!n || k->size < es) return false;
    if (k->origin == ISA_CONST_FILL || k->size < n * es) n = 1; /* a fill: its one element */
    for (size_t e = 0; e < n; e++)
      if (want_true ? ((const uint8_t *)k->data)[e] == 0 : rill__load_f(k->data, k->type.dtype, e) != 0) return false;
    return true;
  }
  return false;
}

/* Whether additive mask m adds 0 everywhere: zeros (a constant, broadcast
 * or not), or where(C, 0, x) on a condition C true everywhere (ViT's export:
 * a bool mask of ones broadcast to [B,1,S,S], made a float mask). */
static bool zero_mask(const actx_t *A, uint32_t m) {
  if (uniform_const(A, m, false)) return true;
  int32_t d = made_by(A, m, "where");
  if (d < 0) return false;
  const ir_node_t *n = &A->f->nodes.items[d];
  return n->nargs == 3 && uniform_const(A, n->args[1], false) && uniform_const(A, n->args[0], true);
}

/* Whether mask type m broadcasts to scores s [B,Hq,Sq,Skv] as an operand of
 * the op: rank at most 4, s's dtype, each dim (right-aligned) 1 or s's. */
static bool mask_fits(const rill_type_t *m, const rill_type_t *s) {
  if (m->dtype != s->dtype || m->rank > 4) return false;
  for (int i = 0; i < m->rank; i++) {
    int64_t d = m->dims[i], want = s->dims[4 - m->rank + i];
    if (d != 1 && d != want) return false;
  }
  return true;
}

/* Walks the scores S (the softmax's operand) back to the product of q and
 * k's transpose, filling M; false where the chain is not the pattern. */
static bool walk_scores(const actx_t *A, uint32_t s, bool seen_scale, amatch_t *M) {
  const ir_func_t *f = A->f;
  if (A->nuse[s] != 1 || M->nchain >= CHAIN_MAX) return false;
  int32_t d = made_by(A, s, NULL);
  if (d < 0) return false;
  const ir_node_t *n = &f->nodes.items[d];
  const rill_type_t *st = &f->values.items[s].type;
  double x;
  uint32_t o;
  if (asm_is_op(A->c, n, "matmul")) {
    if (n->nargs != 2 || asm_decl(A->c, n)->nattrs) return false;
    M->chain[M->nchain++] = (uint32_t)d;
    return true;
  }
  amatch_t save = *M;
  if (asm_is_op(A->c, n, "reshape") && M->wmask < 0 && !seen_scale && M->nchain + 3 <= CHAIN_MAX) {
    /* Swin's shifted windows: reshape(add(reshape(S', [B, W, H, Sq, Skv]), mask [1, W, H|1, Sq|1, Skv|1]), [B*W, H, Sq, Skv]) */
    uint32_t a5 = n->args[0];
    int32_t ad = made_by(A, a5, "add");
    const rill_type_t *t5 = &f->values.items[a5].type;
    /* (the batch B may be a size over shape variables: an export with its batch axis dynamic; W and the rest numbers) */
    int64_t bw = -1;
    if (t5->rank == 5 && !isa_dim_is_sym(t5->dims[1])) {
      rill_status_t e = isa_sym_mul(&A->c->syms, t5->dims[0], t5->dims[1], &bw);
      if (e) rill_status_free(e), bw = -1;
    }
    if (ad < 0 || A->nuse[a5] != 1 || t5->rank != 5 || st->rank != 4 || bw == -1 || bw != st->dims[0] || isa_dim_is_sym(t5->dims[2]) ||
        isa_dim_is_sym(t5->dims[3]) || isa_dim_is_sym(t5->dims[4]) || t5->dims[2] != st->dims[1] || t5->dims[3] != st->dims[2] ||
        t5->dims[4] != st->dims[3] || asm_decl(A->c, &f->nodes.items[ad])->nattrs)
      return false;
    const ir_node_t *an = &f->nodes.items[ad];
    for (int side = 0; side < 2; side++) {
      uint32_t r5 = an->args[side], m = an->args[1 - side];
      const rill_type_t *mt = &f->values.items[m].type;
      int32_t rd = made_by(A, r5, "reshape");
      if (r5 == m || rd < 0 || A->nuse[r5] != 1 || !rill__type_eq(&f->values.items[r5].type, t5) || !asm_const_of(A->c, f, m) ||
          mt->rank != 5 || mt->dtype != st->dtype || mt->dims[0] != 1 || mt->dims[1] != t5->dims[1] || t5->dims[1] < 2)
        continue;
      bool fits = true;
      for (int a = 2; a < 5; a++) fits &= mt->dims[a] == 1 || mt->dims[a] == t5->dims[a];
      uint32_t s0 = f->nodes.items[rd].args[0];
      if (!fits || !rill__type_eq(&f->values.items[s0].type, st)) continue;
      M->chain[M->nchain++] = (uint32_t)d;
      M->chain[M->nchain++] = (uint32_t)ad;
      M->chain[M->nchain++] = (uint32_t)rd;
      M->wmask = (int32_t)m;
      M->windows = t5->dims[1];
      if (walk_scores(A, s0, false, M)) return true;
      *M = save;
    }
    return false;
  }
  if (scale_step(A, d, &x, &o)) {
    M->scale *= x;
    M->chain[M->nchain++] = (uint32_t)d;
    if (walk_scores(A, o, true, M)) return true;
    *M = save;
    return false;
  }
  if (seen_scale) return false; /* a mask scaled after it was added: not the pattern */
  if (asm_is_op(A->c, n, "add") && n->nargs == 2 && !asm_decl(A->c, n)->nattrs) {
    for (int side = 0; side < 2; side++) {
      uint32_t a = n->args[side], m = n->args[1 - side];
      const rill_type_t *mt = &f->values.items[m].type;
      if (a == m || !rill__type_eq(&f->values.items[a].type, st) || !mask_fits(mt, st)) continue;
      *M = save;
      M->chain[M->nchain++] = (uint32_t)d;
      if (causal_const(A, m, st->dims[2], st->dims[3], false, false)) {
        M->causal = true;
      } else if (!zero_mask(A, m)) { /* (S + 0: no mask) */
        if (M->mask >= 0 || M->wcond >= 0) continue;
        M->mask = (int32_t)m;
      }
      if (walk_scores(A, a, false, M)) return true;
    }
    *M = save;
    return false;
  }
  if (asm_is_op(A->c, n, "where") && n->nargs == 3) {
    for (int side = 1; side < 3; side++) {
      uint32_t a = n->args[side], fill = n->args[3 - side];
      if (!rill__type_eq(&f->values.items[a].type, st) || !scalar_float(A, fill, &x) || !masked_value(x, st->dtype)) continue;
      /* where(C, S, fill) keeps where C is true; where(C, fill, S) where it is false */
      uint32_t cond = n->args[0];
      rill_type_t ct = f->values.items[cond].type;
      ct.dtype = st->dtype;
      bool causal = causal_const(A, cond, st->dims[2], st->dims[3], true, side == 1);
      bool keep_all = side == 1 && uniform_const(A, cond, true); /* where(C, S, fill) with C true everywhere: S */
      /* another condition: the additive mask where(C, 0, fill) (or where(C, fill, 0)), the op's one mask */
      if (!causal && !keep_all && (save.mask >= 0 || save.wcond >= 0 || f->values.items[cond].type.dtype != RILL_BOOL || !mask_fits(&ct, st) ||
                      f->values.items[fill].type.rank > ct.rank))
        continue; /* (a fill of higher rank would reshape the mask) */
      *M = save;
      M->chain[M->nchain++] = (uint32_t)d;
      if (causal) {
        M->causal = true;
      } else if (!keep_all) {
        M->wcond = (int32_t)cond;
        M->wfill = fill;
        M->wkeep = side == 1;
      }
      if (walk_scores(A, a, false, M)) return true;
    }
    *M = save;
  }
  return false;
}

/* x for transformers' repeat_kv of it: v = reshape(broadcast_to(unsqueeze or
 * reshape(x))), x [B,Hkv,S,D] to [B,Hkv,G,S,D] to [B,Hkv*G,S,D]; else v. */
static uint32_t repeated_kv(const actx_t *A, uint32_t v) {
  const ir_func_t *f = A->f;
  int32_t r = made_by(A, v, "reshape");
  if (r < 0) return v;
  uint32_t e = f->nodes.items[r].args[0];
  int32_t b = made_by(A, e, "broadcast_to");
  if (b < 0) return v;
  uint32_t u = f->nodes.items[b].args[0];
  int32_t s = made_by(A, u, "unsqueeze");
  if (s < 0) s = made_by(A, u, "reshape");
  if (s < 0) return v;
  uint32_t x = f->nodes.items[s].args[0];
  const rill_type_t *vt = &f->values.items[v].type, *et = &f->values.items[e].type, *ut = &f->values.items[u].type, *xt = &f->values.items[x].type;
  if (vt->rank != 4 || et->rank != 5 || ut->rank != 5 || xt->rank != 4 || xt->dtype != vt->dtype) return v;
  int64_t Hkv = xt->dims[1], G = et->dims[2];
  if (isa_dim_is_sym(Hkv) || isa_dim_is_sym(G) || vt->dims[1] != Hkv * G) return v;
  const int64_t want_u[5] = {xt->dims[0], Hkv, 1, xt->dims[2], xt->dims[3]}, want_e[5] = {xt->dims[0], Hkv, G, xt->dims[2], xt->dims[3]};
  for (int i = 0; i < 5; i++)
    if (ut->dims[i] != want_u[i] || et->dims[i] != want_e[i]) return v;
  if (vt->dims[0] != xt->dims[0] || vt->dims[2] != xt->dims[2] || vt->dims[3] != xt->dims[3]) return v;
  return x;
}

static bool identity4(const int64_t *p) { return p[0] == 0 && p[1] == 1 && p[2] == 2 && p[3] == 3; }

/* Whether node i (a matmul) ends the pattern; M filled where it does. */
static bool match_at(const actx_t *A, uint32_t i, amatch_t *M) {
  const ir_func_t *f = A->f;
  const ir_node_t *fin = &f->nodes.items[i];
  if (!asm_is_op(A->c, fin, "matmul") || fin->nargs != 2 || asm_decl(A->c, fin)->nattrs) return false;
  memset(M, 0, sizeof *M);
  M->fin = i;
  M->mask = M->wcond = M->wmask = -1;
  M->scale = 1;
  uint32_t p = fin->args[0];
  /* a softmax in f32 between casts from and back to f16 or bf16 (softmax(x, dtype=float32).to(x.dtype)) */
  rill_dtype_t dt = f->values.items[p].type.dtype;
  int32_t back = made_by(A, p, "cast");
  if (back >= 0) {
    if ((dt != RILL_F16 && dt != RILL_BF16) || A->nuse[p] != 1) return false;
    p = f->nodes.items[back].args[0];
    if (f->values.items[p].type.dtype != RILL_F32) return false;
    /* the weights in dt cast to f32 and back (ViT's export): an exact round
     * trip, the softmax's own dtype dt */
    int32_t trip = made_by(A, p, "cast");
    if (trip >= 0 && A->nuse[p] == 1 && f->values.items[f->nodes.items[trip].args[0]].type.dtype == dt) {
      p = f->nodes.items[trip].args[0];
      M->chain[M->nchain++] = (uint32_t)back;
      M->chain[M->nchain++] = (uint32_t)trip;
      back = -1;
    }
  }
  int32_t si = made_by(A, p, "softmax");
  if (si < 0 || A->nuse[p] != 1) return false;
  const ir_node_t *sn = &f->nodes.items[si];
  const isa_opdecl_t *sd = asm_decl(A->c, sn);
  ops_params_t sp;
  if (sd->nattrs > 1 || (sd->nattrs && strcmp(sd->attrs[0].name, "axis")) || sd->out[0].rank != 4 || !params_of(A, sn, &sp) || sp.axis != 3)
    return false;
  M->chain[M->nchain++] = (uint32_t)si;
  uint32_t s = sn->args[0];
  if (back >= 0) {
    int32_t up = made_by(A, s, "cast");
    if (up < 0 || A->nuse[s] != 1 || f->values.items[f->nodes.items[up].args[0]].type.dtype != dt) return false;
    M->chain[M->nchain++] = (uint32_t)back;
    M->chain[M->nchain++] = (uint32_t)up;
    s = f->nodes.items[up].args[0];
  }
  if (!walk_scores(A, s, false, M)) return false;
  if (M->wmask >= 0) {
    /* the other mask joins the windows' (a constant, the same for every window of the batch) */
    if (M->wcond >= 0) return false;
    if (M->mask >= 0) {
      const rill_type_t *bt = &f->values.items[M->mask].type;
      if (!asm_const_of(A->c, f, (uint32_t)M->mask) || (bt->rank == 4 && bt->dims[0] != 1)) return false;
    }
  }
  const ir_node_t *mm = &f->nodes.items[M->chain[M->nchain - 1]];
  const rill_type_t *qt = &f->values.items[mm->args[0]].type, *ktt = &f->values.items[mm->args[1]].type, *vt = &f->values.items[fin->args[1]].type;
  if (qt->rank != 4 || ktt->rank != 4 || vt->rank != 4 || !rill__is_float(qt->dtype)) return false;
  /* no broadcasting between the heads of q, k and v */
  for (int d = 0; d < 2; d++)
    if (ktt->dims[d] != qt->dims[d] || vt->dims[d] != qt->dims[d]) return false;
  if (vt->dims[3] != qt->dims[3] || vt->dims[2] != ktt->dims[3]) return false;
  /* q: scales taken */
  uint32_t q = mm->args[0], o;
  double x;
  for (int step = 0; step < 4 && scale_step(A, made_by(A, q, NULL), &x, &o); step++) M->scale *= x, q = o;
  /* k: transposes composed and scales taken until k stands as is */
  uint32_t k = mm->args[1];
  int64_t perm[4] = {0, 1, 3, 2};
  for (int step = 0; step < 8; step++) {
    int32_t d = made_by(A, k, NULL);
    ops_params_t tp;
    if (scale_step(A, d, &x, &o)) {
      M->scale *= x;
      k = o;
    } else if (!identity4(perm) && d >= 0 && asm_is_op(A->c, &f->nodes.items[d], "transpose") && f->values.items[f->nodes.items[d].args[0]].type.rank == 4 &&
               params_of(A, &f->nodes.items[d], &tp)) {
      int64_t r[4];
      for (int a = 0; a < 4; a++) r[a] = tp.perm[perm[a]];
      memcpy(perm, r, sizeof r);
      k = f->nodes.items[d].args[0];
    } else {
      break;
    }
  }
  M->ktrans = !identity4(perm);
  memcpy(M->kperm, perm, sizeof perm);
  uint32_t v = fin->args[1], kr = M->ktrans ? k : repeated_kv(A, k), vr = repeated_kv(A, v);
  /* k's heads (as transposed) and v's must stay one count */
  if (f->values.items[kr].type.dims[M->ktrans ? perm[1] : 1] == f->values.items[vr].type.dims[1]) k = kr, v = vr;
  M->q = q;
  M->k = k;
  M->v = v;
  return isfinite(M->scale) && M->scale != 0;
}

/* (asm.h) */
rill_status_t asm_value_like(asm_ctx_t *c, ir_func_t *f, uint32_t v, const rill_type_t *t, const char *suffix, uint32_t *out) {
  const char *base = f->values.items[v].name ? f->values.items[v].name : "v";
  size_t len = strlen(base) + strlen(suffix) + 1;
  char *name = rill__arena_alloc(&c->arena, len);
  if (!name) return rill__oom();
  snprintf(name, len, "%s%s", base, suffix);
  ir_value_t x = {.name = name, .type = *t, .kind = V_RESULT, .def = -1, .slot = -1, .reg = -1};
  x.line = f->values.items[v].line;
  x.col = f->values.items[v].col;
  *out = (uint32_t)f->values.len;
  return RILL_VEC_PUSH(c->a, &f->values, x);
}

static rill_status_t add_value(actx_t *A, uint32_t v, const rill_type_t *t, const char *suffix, uint32_t *out) {
  return asm_value_like(A->c, A->f, v, t, suffix, out);
}

/* A node res = name(args) {attrs} of result type t (named after args[0]
 * with `suffix`), made at the place of node `at` into *out_res. */
static rill_status_t add_node(actx_t *A, nodes_t *out, const char *name, const uint32_t *args, uint32_t nargs, const rill_type_t *t,
                              const isa_attr_t *attrs, uint32_t nattrs, const char *suffix, const ir_node_t *at, uint32_t *out_res) {
  uint32_t op, res;
  rill_type_t in[3];
  for (uint32_t j = 0; j < nargs; j++) in[j] = A->f->values.items[args[j]].type;
  isa_attr_t *a = nattrs ? rill__arena_memdup(&A->c->arena, attrs, nattrs * sizeof *attrs) : NULL;
  uint32_t *ap = rill__arena_memdup(&A->c->arena, args, nargs * sizeof *args);
  if ((nattrs && !a) || !ap) return rill__oom();
  RILL_TRY(add_value(A, args[0], t, suffix, &res));
  RILL_TRY(asm_intern_op(A->c, name, in, nargs, t, 1, a, nattrs, &op));
  uint32_t *r = rill__arena_memdup(&A->c->arena, &res, sizeof res);
  if (!r) return rill__oom();
  ir_node_t n = {.kind = N_OP, .line = at->line, .col = at->col, .target = op, .args = ap, .nargs = nargs, .res = r, .nres = 1};
  A->f->values.items[res].def = (int32_t)out->len;
  *out_res = res;
  return RILL_VEC_PUSH(A->c->a, out, n);
}

/* The mask operand's type as written (before the reshape to rank 4): the
 * additive mask's, or the condition's shape in the scores' dtype; false
 * where there is none. */
static bool mask_type(const actx_t *A, const amatch_t *M, rill_type_t *t) {
  const ir_func_t *f = A->f;
  if (M->mask >= 0) *t = f->values.items[M->mask].type;
  else if (M->wcond >= 0) *t = f->values.items[M->wcond].type, t->dtype = f->values.items[M->q].type.dtype;
  return M->mask >= 0 || M->wcond >= 0;
}

/* The windows' mask operand of match M: [W, H|1, Sq|1, Skv|1], the
 * windows' mask with the other mask (where there is one) added. */
static rill_type_t windows_type(const actx_t *A, const amatch_t *M) {
  const rill_type_t *wt = &A->f->values.items[M->wmask].type;
  rill_type_t t = {wt->dtype, 4, {M->windows, wt->dims[2], wt->dims[3], wt->dims[4]}};
  if (M->mask >= 0) {
    const rill_type_t *bt = &A->f->values.items[M->mask].type;
    for (int a = 1; a < 4; a++) {
      int r = bt->rank - 4 + a;
      if (r >= 0 && bt->dims[r] > t.dims[a]) t.dims[a] = bt->dims[r];
    }
  }
  return t;
}

/* The element of constant k at index idx[0..4) of a 4-D space its dims
 * broadcast to (right-aligned; an axis of size 1 reads index 0). */
static double bcast_at(const isa_const_t *k, const int64_t *idx) {
  size_t at = 0;
  if (k->origin == ISA_CONST_FILL) return rill__load_f(k->data, k->type.dtype, 0);
  for (int r = 0; r < k->type.rank; r++) {
    int a = 4 - k->type.rank + r;
    at = at * (size_t)k->type.dims[r] + (size_t)(a >= 0 && k->type.dims[r] > 1 ? idx[a] : 0);
  }
  return rill__load_f(k->data, k->type.dtype, at);
}

/* The windows' mask of match M made a constant of type *t (windows_type). */
static rill_status_t windows_mask(actx_t *A, const amatch_t *M, const rill_type_t *t, uint32_t *out) {
  const isa_const_t *wk = asm_const_of(A->c, A->f, (uint32_t)M->wmask), *bk = M->mask >= 0 ? asm_const_of(A->c, A->f, (uint32_t)M->mask) : NULL;
  size_t n, bytes;
  rill__type_sizes(t, &n, &bytes);
  uint8_t *data = rill__arena_alloc_raw(&A->c->arena, bytes ? bytes : 1);
  if (!wk || (M->mask >= 0 && !bk) || !data) return wk ? rill__oom() : rill__status(RILL_INTERNAL, "attention: a windows' mask not at hand");
  /* the windows' mask [1, W, H|1, Sq|1, Skv|1] read as [W, H|1, Sq|1, Skv|1] */
  isa_const_t w4 = *wk;
  w4.type.rank = 4;
  for (int a = 0; a < 4; a++) w4.type.dims[a] = wk->type.dims[a + 1];
  int64_t idx[4];
  size_t i = 0;
  for (idx[0] = 0; idx[0] < t->dims[0]; idx[0]++)
    for (idx[1] = 0; idx[1] < t->dims[1]; idx[1]++)
      for (idx[2] = 0; idx[2] < t->dims[2]; idx[2]++)
        for (idx[3] = 0; idx[3] < t->dims[3]; idx[3]++) {
          int64_t b[4] = {0, idx[1], idx[2], idx[3]};
          double v = bcast_at(&w4, idx) + (bk ? bcast_at(bk, b) : 0);
          rill__store_f(data, t->dtype, i++, v);
        }
  uint32_t k;
  return asm_new_const(A->c, A->f, t, data, false, &k, out);
}

/* The op's operand types for match M (k transposed, the mask at rank 4),
 * its attributes, and whether the registry takes them with the last
 * product's result type (it refuses head counts it cannot take). */
static rill_status_t op_decl(actx_t *A, const amatch_t *M, rill_type_t *in, uint32_t *nin, isa_attr_t *at, uint32_t *nat, bool *ok) {
  const ir_func_t *f = A->f;
  const rill_type_t *k = &f->values.items[M->k].type;
  in[0] = f->values.items[M->q].type;
  in[1] = *k;
  for (int a = 0; M->ktrans && a < 4; a++) in[1].dims[a] = k->dims[M->kperm[a]];
  in[2] = f->values.items[M->v].type;
  *nin = 3;
  rill_type_t mt;
  if (M->wmask >= 0) {
    in[3] = windows_type(A, M);
    (*nin)++;
  } else if (mask_type(A, M, &mt)) {
    in[3] = (rill_type_t){mt.dtype, 4, {1, 1, 1, 1}};
    for (int r = 0; r < mt.rank; r++) in[3].dims[4 - mt.rank + r] = mt.dims[r];
    (*nin)++;
  }
  double *sv = rill__arena_alloc(&A->c->arena, sizeof *sv);
  int64_t *cv = rill__arena_alloc(&A->c->arena, sizeof *cv), *wv = rill__arena_alloc(&A->c->arena, sizeof *wv);
  if (!sv || !cv || !wv) return rill__oom();
  *sv = M->scale;
  *cv = 1;
  *wv = M->windows;
  at[0] = (isa_attr_t){.name = "scale", .kind = ISA_ATTR_FLOAT, .count = 1, .floats = sv};
  *nat = 1;
  if (M->causal) at[(*nat)++] = (isa_attr_t){.name = "causal", .kind = ISA_ATTR_BOOL, .count = 1, .ints = cv};
  if (M->wmask >= 0) at[(*nat)++] = (isa_attr_t){.name = "windows", .kind = ISA_ATTR_INT, .count = 1, .ints = wv};
  rill_type_t out[1];
  uint32_t nout;
  ops_params_t p;
  rill_status_t st = ops_infer_sym(ops_find("attention"), &A->c->syms, in, *nin, at, *nat, out, 1, &nout, &p);
  *ok = !st && rill__type_eq(&out[0], &f->values.items[f->nodes.items[M->fin].res[0]].type);
  rill_status_free(st);
  return NULL;
}

/* The ops of match M into the list: k's transpose and the mask's reshape
 * where needed, then the op (in the last product's place). */
static rill_status_t emit_match(actx_t *A, nodes_t *out, const amatch_t *M) {
  ir_func_t *f = A->f;
  const ir_node_t fin = f->nodes.items[M->fin];
  rill_type_t in[4];
  isa_attr_t *at = rill__arena_alloc(&A->c->arena, 3 * sizeof *at);
  uint32_t args[4] = {M->q, M->k, M->v, (uint32_t)M->mask}, nin, nat, op;
  bool ok;
  if (!at) return rill__oom();
  RILL_TRY(op_decl(A, M, in, &nin, at, &nat, &ok));
  if (!ok) return rill__status(RILL_INTERNAL, "attention: a matched pattern the op refuses");
  if (M->ktrans) {
    int64_t *pv = rill__arena_memdup(&A->c->arena, M->kperm, 4 * sizeof(int64_t));
    if (!pv) return rill__oom();
    isa_attr_t perm = {.name = "perm", .kind = ISA_ATTR_INTS, .count = 4, .ints = pv};
    RILL_TRY(add_node(A, out, "transpose", &M->k, 1, &in[1], &perm, 1, ".keys", &fin, &args[1]));
  }
  rill_type_t mt;
  if (M->wmask >= 0) RILL_TRY(windows_mask(A, M, &in[3], &args[3]));
  if (M->wcond >= 0) {
    /* where(C, S, fill) = S + where(C, 0, fill); where(C, fill, S) = S + where(C, fill, 0) */
    uint8_t zero[8] = {0};
    uint32_t k, zv = (uint32_t)f->values.len;
    RILL_TRY(asm_literal_const(A->c, in[0].dtype, zero, &k));
    ir_value_t z = {.name = A->c->consts.items[k].name, .type = A->c->consts.items[k].type, .kind = V_CONST, .konst = k, .def = -1, .slot = -1, .reg = -1};
    RILL_TRY(RILL_VEC_PUSH(A->c->a, &f->values, z));
    uint32_t wargs[3] = {(uint32_t)M->wcond, M->wkeep ? zv : M->wfill, M->wkeep ? M->wfill : zv};
    mask_type(A, M, &mt);
    RILL_TRY(add_node(A, out, "where", wargs, 3, &mt, NULL, 0, ".mask", &fin, &args[3]));
  }
  mask_type(A, M, &mt);
  if ((M->mask >= 0 || M->wcond >= 0) && M->wmask < 0 && mt.rank < 4) {
    int64_t *dims = rill__arena_memdup(&A->c->arena, in[3].dims, 4 * sizeof(int64_t));
    if (!dims) return rill__oom();
    isa_attr_t shape = {.name = "shape", .kind = ISA_ATTR_INTS, .count = 4, .ints = dims};
    uint32_t m = args[3];
    RILL_TRY(add_node(A, out, "reshape", &m, 1, &in[3], &shape, 1, ".mask4", &fin, &args[3]));
  }
  RILL_TRY(asm_intern_op(A->c, "attention", in, nin, &f->values.items[fin.res[0]].type, 1, at, nat, &op));
  ir_node_t n = fin;
  n.target = op;
  if (!(n.args = rill__arena_memdup(&A->c->arena, args, nin * sizeof *args))) return rill__oom();
  n.nargs = nin;
  f->values.items[fin.res[0]].def = (int32_t)out->len;
  return RILL_VEC_PUSH(A->c->a, out, n);
}

rill_status_t asm_pass_attention(asm_ctx_t *c, ir_func_t *f) {
  if (f->hand_scheduled || !ops_find("attention")) return NULL;
  size_t N = f->nodes.len;
  uint32_t *nuse = rill__calloc(c->a, f->values.len ? f->values.len : 1, sizeof(uint32_t));
  int32_t *which = rill__calloc(c->a, N ? N : 1, sizeof(int32_t)); /* node -> 1 + its match (last product), -1 a node that goes */
  RILL_VEC(amatch_t) ms = {0};
  nodes_t out = {0};
  rill_status_t st = nuse && which ? NULL : rill__oom();
  for (size_t i = 0; !st && i < N; i++)
    for (uint32_t j = 0; j < f->nodes.items[i].nargs; j++) nuse[f->nodes.items[i].args[j]]++;
  actx_t A = {c, f, nuse};
  for (size_t i = 0; !st && i < N; i++) {
    amatch_t M;
    if (which[i] || !match_at(&A, (uint32_t)i, &M)) continue;
    /* The op's declaration is checked before anything changes. */
    rill_type_t in[4];
    isa_attr_t at[3];
    uint32_t nin, nat;
    bool fits;
    if ((st = op_decl(&A, &M, in, &nin, at, &nat, &fits))) break;
    bool taken = false;
    for (uint32_t k = 0; k < M.nchain; k++) taken |= which[M.chain[k]] != 0;
    if (!fits || taken) continue;
    for (uint32_t k = 0; k < M.nchain; k++) which[M.chain[k]] = -1;
    st = RILL_VEC_PUSH(c->a, &ms, M);
    which[i] = (int32_t)ms.len;
  }
  if (st || !ms.len) goto done;
  for (size_t i = 0; !st && i < N; i++) {
    const ir_node_t *n = &f->nodes.items[i];
    if (which[i] > 0) {
      st = emit_match(&A, &out, &ms.items[which[i] - 1]);
    } else if (which[i] < 0) {
      for (uint32_t r = 0; r < n->nres; r++) f->values.items[n->res[r]].def = -1;
    } else {
      for (uint32_t r = 0; r < n->nres; r++) f->values.items[n->res[r]].def = (int32_t)out.len;
      st = RILL_VEC_PUSH(c->a, &out, *n);
    }
  }
  if (st) goto done;
  /* The ops that made q, k, v and a mask of zeros for the pattern alone go:
   * walking back, an op none of whose results is read now (the uses of the
   * ops after it counted) is dropped; reshapes, transposes, broadcasts,
   * scalings and wheres only, so that nothing with an effect is. */
  {
    uint32_t *uses = rill__calloc(c->a, f->values.len ? f->values.len : 1, sizeof(uint32_t));
    bool *drop = rill__calloc(c->a, out.len ? out.len : 1, sizeof(bool));
    if (!uses || !drop) st = rill__oom();
    for (size_t i = out.len; !st && i-- > 0;) {
      const ir_node_t *n = &out.items[i];
      static const char *const pure[] = {"reshape", "unsqueeze", "broadcast_to", "transpose", "mul", "div", "where"};
      bool may = n->kind == N_OP && n->nres == 1 && !uses[n->res[0]];
      bool is_pure = false;
      for (size_t k = 0; may && k < sizeof pure / sizeof *pure; k++) is_pure |= asm_is_op(c, n, pure[k]);
      if (may && is_pure) {
        drop[i] = true;
        f->values.items[n->res[0]].def = -1;
        continue;
      }
      for (uint32_t j = 0; j < n->nargs; j++) uses[n->args[j]]++;
    }
    size_t kept = 0;
    for (size_t i = 0; !st && i < out.len; i++) {
      if (drop[i]) continue;
      out.items[kept] = out.items[i];
      for (uint32_t r = 0; r < out.items[kept].nres; r++) f->values.items[out.items[kept].res[r]].def = (int32_t)kept;
      kept++;
    }
    if (!st) out.len = kept;
    rill__free(c->a, uses);
    rill__free(c->a, drop);
  }
  if (!st) {
    /* asm_replace_nodes maps defs through newpos: the defs set here are new positions already. */
    int32_t *ident = rill__calloc(c->a, out.len ? out.len : 1, sizeof(int32_t));
    if (!ident) st = rill__oom();
    for (size_t i = 0; ident && i < out.len; i++) ident[i] = (int32_t)i;
    if (ident) {
      asm_replace_nodes(c, f, out.items, out.len, out.cap, ident);
      out.items = NULL;
    }
    rill__free(c->a, ident);
  }
done:
  RILL_VEC_FREE(c->a, &out);
  RILL_VEC_FREE(c->a, &ms);
  rill__free(c->a, nuse);
  rill__free(c->a, which);
  return st;
}
