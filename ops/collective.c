/* collective.c: the collectives' entries in the op registry.
 *
 * all_reduce, all_gather, reduce_scatter and broadcast run over N
 * participants: the job's ranks (one operand, the rank form), or the VM's
 * devices, where the assembler makes one op entry per device with `part`
 * and `parts` (spec/vmasm.md, "Devices and ranks"; docs/collectives.md).
 * Here are their types and attributes; the VM runs them through a
 * communicator (vm/comm.h). The cpu kernel is the op for one participant (a
 * copy), which is what a job of one rank runs; rank() and ranks() give 0
 * and 1 there.
 *
 * Reductions: sum, max, min, avg over every dtype; bool's sum and max are a
 * logical or, its min a logical and, its avg refused; an integer avg is the
 * sum (wrapping in the dtype) divided by N, rounded toward zero.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

#define K(x) (1u << ISA_ATTR_##x)

const ops_attr_spec_t ops_coll_reduce_attrs[] = {{"op", K(STRING)}, {"part", K(INT)}, {"parts", K(INT)}, {NULL, 0}};
const ops_attr_spec_t ops_coll_gather_attrs[] = {{"axis", K(INT)}, {"ranks", K(INT)}, {"part", K(INT)}, {"parts", K(INT)}, {NULL, 0}};
const ops_attr_spec_t ops_coll_scatter_attrs[] = {{"op", K(STRING)}, {"axis", K(INT)}, {"ranks", K(INT)}, {"part", K(INT)}, {"parts", K(INT)}, {NULL, 0}};
const ops_attr_spec_t ops_coll_bcast_attrs[] = {{"root", K(INT)}, {"part", K(INT)}, {"parts", K(INT)}, {NULL, 0}};
const ops_attr_spec_t ops_coll_send_attrs[] = {{"peer", K(INT)}, {"shift", K(INT)}, {NULL, 0}};
const ops_attr_spec_t ops_coll_recv_attrs[] = {{"peer", K(INT)}, {"shift", K(INT)}, {"dtype", K(DTYPE)}, {"shape", K(INTS)}, {NULL, 0}};
const ops_attr_spec_t ops_coll_sendrecv_attrs[] = {{"to", K(INTS)},     {"to_shift", K(INTS)}, {"from", K(INTS)}, {"from_shift", K(INTS)},
                                                   {"dtypes", K(INTS)}, {"ndims", K(INTS)},    {"dims", K(INTS)}, {NULL, 0}};

static const char *const RED_NAMES[] = {"sum", "max", "min", "avg"};

const char *ops_coll_red_name(int red) { return red >= 0 && red < 4 ? RED_NAMES[red] : "?"; }

int64_t ops_coll_participants(const ops_params_t *p) {
  if (p->coll.kind == OPS_COLL_RANK || p->coll.kind == OPS_COLL_RANKS || ops_coll_is_p2p(p->coll.kind) || p->coll.kind == OPS_COLL_SENDRECV) return 1;
  return p->coll.parts ? p->coll.parts : p->coll.ranks;
}

static rill_status_t err(const ops_infer_ctx_t *c, const char *fmt, ...) RILL_PRINTF(2, 3);
static rill_status_t err(const ops_infer_ctx_t *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return rill__status(RILL_ASSEMBLY_ERROR, "%s: %s", c->def->name, msg);
}

static const isa_attr_t *attr(const ops_infer_ctx_t *c, const char *name) { return ops_attr(c, name); }
static int64_t int_attr(const ops_infer_ctx_t *c, const char *name, int64_t def) {
  const isa_attr_t *a = attr(c, name);
  return a ? a->ints[0] : def;
}

/* send(%x) {peer=R} or {shift=K}: no result; %y = recv() {peer=R or
 * shift=K, dtype=D, shape=[...]}: a result of that type. The assembler
 * makes consecutive ones one sendrecv (below). */
static rill_status_t infer_p2p(ops_infer_ctx_t *c, int kind) {
  ops_params_t *p = c->p;
  const isa_attr_t *peer = attr(c, "peer"), *shift = attr(c, "shift");
  if (!peer == !shift)
    return err(c, "needs one of peer=R (a rank) or shift=K (the rank K after this one, modulo the job's size), %s", peer ? "found both" : "found neither");
  p->coll.relative = shift != NULL;
  p->coll.peer = peer ? peer->ints[0] : shift->ints[0];
  if (peer && p->coll.peer < 0) return err(c, "peer=%lld: expected a rank 0 or more", (long long)p->coll.peer);
  if (p->coll.peer < -(1 << 20) || p->coll.peer > (1 << 20)) return err(c, "%s=%lld is beyond any job's size", peer ? "peer" : "shift", (long long)p->coll.peer);
  p->coll.ranks = 1;
  if (kind == OPS_COLL_SEND) {
    c->nout = 0;
    return NULL;
  }
  const isa_attr_t *dt = attr(c, "dtype"), *shape = attr(c, "shape");
  if (!dt || !shape) return err(c, "needs the type it receives: dtype=D and shape=[...] (shape=[] for a scalar)");
  if (shape->count > RILL_MAX_RANK) return err(c, "shape has %u dims, at most %d", shape->count, RILL_MAX_RANK);
  rill_type_t *o = &c->out[0];
  *o = (rill_type_t){(rill_dtype_t)dt->ints[0], (int)shape->count, {0}};
  for (uint32_t i = 0; i < shape->count; i++) {
    if (shape->ints[i] < 0) return err(c, "shape[%u] = %lld: expected a size 0 or more", i, (long long)shape->ints[i]);
    o->dims[i] = shape->ints[i];
  }
  c->nout = 1;
  return NULL;
}

/* sendrecv(x0, ..) -> (y0, ..): an exchange, the sends' operands and the
 * recvs' results. to=[...] and to_shift=[...] (1: to is a shift) per
 * operand, from=[...] and from_shift=[...] per result, whose types are
 * dtypes=[...], ndims=[...] and dims=[...] (every result's, in turn). An
 * absent list is empty. */
static rill_status_t infer_sendrecv(ops_infer_ctx_t *c) {
  static const char *const names[] = {"to", "to_shift", "from", "from_shift", "dtypes", "ndims", "dims"};
  const isa_attr_t *a[7];
  uint32_t n[7];
  for (int i = 0; i < 7; i++) {
    a[i] = attr(c, names[i]);
    n[i] = a[i] ? a[i]->count : 0;
  }
  uint32_t nr = n[2];
  if (n[0] != c->nin || n[1] != c->nin) return err(c, "to and to_shift: expected one each per operand (%u), found %u and %u", c->nin, n[0], n[1]);
  if (n[3] != nr || n[4] != nr || n[5] != nr) return err(c, "from_shift, dtypes and ndims: expected one each per result (%u)", nr);
  if (nr > c->max_out || nr > OPS_P2P_GROUP_MAX || c->nin + nr > OPS_P2P_GROUP_MAX)
    return err(c, "%u sends and %u recvs: one exchange has at most %d", c->nin, nr, OPS_P2P_GROUP_MAX);
  for (uint32_t i = 0; i < c->nin; i++)
    if ((a[1]->ints[i] != 0 && a[1]->ints[i] != 1) || (!a[1]->ints[i] && a[0]->ints[i] < 0)) return err(c, "to[%u]: expected a rank, or a shift", i);
  uint32_t at = 0;
  for (uint32_t i = 0; i < nr; i++) {
    int64_t d = a[4]->ints[i], k = a[5]->ints[i];
    if ((a[3]->ints[i] != 0 && a[3]->ints[i] != 1) || (!a[3]->ints[i] && a[2]->ints[i] < 0)) return err(c, "from[%u]: expected a rank, or a shift", i);
    if (d < 0 || d >= RILL_DTYPE_COUNT || k < 0 || k > RILL_MAX_RANK || at + (uint32_t)k > n[6]) return err(c, "result %u: a type out of range", i);
    c->out[i] = (rill_type_t){(rill_dtype_t)d, (int)k, {0}};
    for (int64_t j = 0; j < k; j++) {
      if (a[6]->ints[at] < 0) return err(c, "result %u: a size below 0", i);
      c->out[i].dims[j] = a[6]->ints[at++];
    }
  }
  if (at != n[6]) return err(c, "dims: %u sizes for results of %u dims in all", n[6], at);
  c->nout = nr;
  return NULL;
}

rill_status_t ops_infer_collective(ops_infer_ctx_t *c) {
  ops_params_t *p = c->p;
  int kind = c->def->code;
  p->coll.kind = kind;
  if (kind == OPS_COLL_RANK || kind == OPS_COLL_RANKS) {
    c->out[0] = (rill_type_t){RILL_I64, 0, {0}};
    c->nout = 1;
    return NULL;
  }
  if (ops_coll_is_p2p(kind)) return infer_p2p(c, kind);
  if (kind == OPS_COLL_SENDRECV) return infer_sendrecv(c);
  const rill_type_t *x = &c->in[0];
  char b1[96];
  p->coll.parts = int_attr(c, "parts", 0);
  p->coll.part = int_attr(c, "part", 0);
  if (p->coll.parts < 0 || p->coll.parts > ISA_MAX_DEVICES)
    return err(c, "parts=%lld: expected 1..%d devices", (long long)p->coll.parts, ISA_MAX_DEVICES);
  if (p->coll.parts ? p->coll.part < 0 || p->coll.part >= p->coll.parts : attr(c, "part") != NULL)
    return err(c, "part=%lld: expected 0..parts-1 with parts=N (the device form)", (long long)p->coll.part);
  p->coll.ranks = int_attr(c, "ranks", 1);
  if (p->coll.ranks < 1 || p->coll.ranks > (1 << 20)) return err(c, "ranks=%lld: expected a job size of 1 or more", (long long)p->coll.ranks);
  if (p->coll.parts && attr(c, "ranks"))
    return err(c, "ranks=N is for the form over the job's ranks; over the VM's devices the participants are the operands");
  int64_t n = ops_coll_participants(p);
  const isa_attr_t *op = attr(c, "op");
  p->coll.red = OPS_RED_SUM;
  if (op) {
    int r = 0;
    while (r < 4 && strcmp(op->str, RED_NAMES[r]) != 0) r++;
    if (r == 4) return err(c, "op=\"%s\": expected \"sum\", \"max\", \"min\" or \"avg\"", op->str);
    p->coll.red = r;
  }
  p->code = p->coll.red;
  if ((kind == OPS_COLL_ALL_REDUCE || kind == OPS_COLL_REDUCE_SCATTER) && x->dtype == RILL_BOOL && p->coll.red == OPS_RED_AVG)
    return err(c, "op=\"avg\" of bool is not defined (sum and max are a logical or, min a logical and), found %s", isa_sym_format_type(NULL, x, b1, 96));
  c->out[0] = *x;
  c->nout = 1;
  if (kind == OPS_COLL_BROADCAST) {
    p->coll.root = int_attr(c, "root", 0);
    if (p->coll.root < 0 || (p->coll.parts && p->coll.root >= p->coll.parts))
      return err(c, "root=%lld: expected a participant 0..%lld", (long long)p->coll.root, (long long)(p->coll.parts ? p->coll.parts - 1 : 0));
  }
  if (kind == OPS_COLL_ALL_GATHER || kind == OPS_COLL_REDUCE_SCATTER) {
    int64_t axis = int_attr(c, "axis", 0);
    int r = x->rank;
    if (r == 0) return err(c, "needs an operand with an axis, found %s", isa_sym_format_type(NULL, x, b1, 96));
    if (axis < -r || axis >= r) return err(c, "axis %lld out of range for rank %d (expected %d..%d)", (long long)axis, r, -r, r - 1);
    p->axis = axis < 0 ? axis + r : axis;
    int64_t d = x->dims[p->axis];
    /* a symbolic size gathers (what --data-parallel writes for a symbolic batch: every rank holds the
     * same size, bound at run time); a reduce_scatter of one would have to divide at every size */
    if (isa_dim_is_sym(d) && kind == OPS_COLL_ALL_GATHER) return ops_size_mul(c, d, n, &c->out[0].dims[p->axis]);
    if (isa_dim_is_sym(d)) return err(c, "axis %lld has a symbolic size; expected a number", (long long)p->axis);
    if (kind == OPS_COLL_ALL_GATHER) {
      if (__builtin_mul_overflow(d, n, &c->out[0].dims[p->axis])) return err(c, "size arithmetic overflows");
    } else {
      if (d % n)
        return err(c, "axis %lld has size %lld, which %lld participants do not divide", (long long)p->axis, (long long)d, (long long)n);
      c->out[0].dims[p->axis] = d / n;
    }
  }
  return NULL;
}

rill_status_t ops_cpu_collective(const ops_plan_t *plan, void *const *in, void *const *out) {
  const ops_params_t *p = &plan->p;
  if (p->coll.kind == OPS_COLL_RANK || p->coll.kind == OPS_COLL_RANKS) {
    int64_t v = p->coll.kind == OPS_COLL_RANKS;
    memcpy(out[0], &v, sizeof v);
    return NULL;
  }
  if (ops_coll_is_p2p(p->coll.kind) || p->coll.kind == OPS_COLL_SENDRECV)
    return rill__status(RILL_RUNTIME_ERROR, "%s runs between the ranks of a job, through the VM's communicator", plan->decl->name);
  if (ops_coll_participants(p) != 1)
    return rill__status(RILL_RUNTIME_ERROR, "%s for %lld participants run by one", plan->decl->name, (long long)ops_coll_participants(p));
  size_t bytes;
  rill__type_sizes(&plan->decl->in[0], NULL, &bytes);
  memmove(out[0], in[0], bytes);
  return NULL;
}
