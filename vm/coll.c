/* coll.c: the VM's collectives (the interpreter's side of comm.h).
 *
 * An invoke of a collective (ops_collective) comes here instead of the
 * device's launch. The rank form (parts 0) runs over the job's ranks: a
 * copy for a job of one rank, else the rank communicator of the stream's
 * device (made on first use). The device form comes as `parts` consecutive
 * invokes, part i on a stream of device i (the assembler emits them so);
 * they gather in the run's group and the last one issues the collective on
 * the communicator of the VM's devices 0..parts-1 (made on first use).
 * rank() and ranks() copy from two i64 per device, uploaded on first use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "vm.h"

struct vm_coll_group {
  const ops_plan_t *plan0;
  int parts, got;
  void *in[ISA_MAX_DEVICES], *out[ISA_MAX_DEVICES];
  int streams[ISA_MAX_DEVICES];
  vm_obj_t *keep[4 * ISA_MAX_DEVICES];
  uint32_t nkeep;
};

struct vm_coll_state {
  pthread_mutex_t mu;
  vm_transport_t t;
  bool have_t;
  double timeout_s;
  size_t oneshot_max;
  vm_comm_t *devs[ISA_MAX_DEVICES + 1]; /* by participants */
  vm_comm_t *ranks[ISA_MAX_DEVICES];    /* by device */
  int64_t vals[2];                      /* rank, ranks */
  void *vals_dev[ISA_MAX_DEVICES];      /* on each device */
};

#define VM_COLL_TIMEOUT_S 300.0
#define VM_ONESHOT_MAX ((size_t)256 << 10)

static pthread_mutex_t state_mu = PTHREAD_MUTEX_INITIALIZER; /* a VM's state made once, whichever thread runs first */

static rill_status_t state(rill_vm_t *vm, vm_coll_state_t **out) {
  vm_coll_state_t *have = __atomic_load_n(&vm->coll, __ATOMIC_ACQUIRE);
  if (have) {
    *out = have;
    return NULL;
  }
  pthread_mutex_lock(&state_mu);
  if (!vm->coll) {
    vm_coll_state_t *s = rill__calloc(vm->a, 1, sizeof *s);
    if (!s) {
      pthread_mutex_unlock(&state_mu);
      return rill__oom();
    }
    pthread_mutex_init(&s->mu, NULL);
    s->timeout_s = VM_COLL_TIMEOUT_S;
    s->oneshot_max = VM_ONESHOT_MAX;
    const char *e = getenv("RILL_ALLREDUCE_ONESHOT_MAX");
    if (e && *e) s->oneshot_max = (size_t)strtoull(e, NULL, 10);
    e = getenv("RILL_COLLECTIVE_TIMEOUT");
    if (e && *e && atof(e) > 0) s->timeout_s = atof(e);
    s->vals[1] = 1;
    __atomic_store_n(&vm->coll, s, __ATOMIC_RELEASE);
  }
  *out = vm->coll;
  pthread_mutex_unlock(&state_mu);
  return NULL;
}

static rill_status_t ranks_comm(rill_vm_t *vm, vm_coll_state_t *s, int dev, vm_comm_t **out);

rill_status_t vm_attach_transport(rill_vm_t *vm, const vm_transport_t *t) {
  if (!t || t->nranks < 1 || t->rank < 0 || t->rank >= t->nranks || (t->nranks > 1 && (!t->allgather || !t->abort)))
    return rill__status(RILL_INVALID_ARGUMENT, "a transport with rank %d of %d ranks", t ? t->rank : -1, t ? t->nranks : 0);
  vm_coll_state_t *s;
  RILL_TRY(state(vm, &s));
  if (vm->shards_missing) RILL_TRY(vm_upload_shards(vm, t->rank, t->nranks));
  pthread_mutex_lock(&s->mu);
  bool used = s->have_t || s->vals_dev[0];
  for (int i = 0; i < ISA_MAX_DEVICES; i++) used |= s->ranks[i] != NULL || s->vals_dev[i] != NULL;
  if (!used) {
    s->t = *t;
    s->have_t = true;
    s->vals[0] = t->rank;
    s->vals[1] = t->nranks;
  }
  pthread_mutex_unlock(&s->mu);
  if (used) return rill__status(RILL_INVALID_ARGUMENT, "a transport is attached before the VM's first collective, once");
  /* Device 0's communicator now, with every rank attaching (set-up errors
   * at start, not inside a run or a capture); others' on first use. */
  vm_comm_t *c;
  return t->nranks > 1 ? ranks_comm(vm, s, 0, &c) : NULL;
}

rill_status_t vm_coll_settings(rill_vm_t *vm, double timeout_s, int64_t oneshot_max) {
  vm_coll_state_t *s;
  RILL_TRY(state(vm, &s));
  if (timeout_s > 0) s->timeout_s = timeout_s;
  if (oneshot_max >= 0) s->oneshot_max = (size_t)oneshot_max;
  return NULL;
}

void vm_coll_free(rill_vm_t *vm) {
  vm_coll_state_t *s = vm->coll;
  if (!s) return;
  vm_device_t *d = vm->dev;
  rill_status_free(d->ops->synchronize(d));
  for (int i = 0; i <= ISA_MAX_DEVICES; i++)
    if (s->devs[i]) s->devs[i]->ops->destroy(s->devs[i]);
  for (int i = 0; i < ISA_MAX_DEVICES; i++) {
    if (s->ranks[i]) s->ranks[i]->ops->destroy(s->ranks[i]);
    if (!s->vals_dev[i]) continue;
    int st;
    rill_status_t e = i ? d->ops->stream_acquire_on(d, i, &st) : d->ops->stream_acquire(d, &st);
    if (!e) {
      d->ops->free(d, st, s->vals_dev[i], sizeof s->vals);
      rill_status_free(d->ops->stream_sync(d, st));
      d->ops->stream_release(d, st);
    }
    rill_status_free(e);
  }
  pthread_mutex_destroy(&s->mu);
  rill__free(vm->a, s);
  vm->coll = NULL;
}

void vm_coll_failed(rill_vm_t *vm, const char *why) {
  vm_coll_state_t *s = __atomic_load_n(&vm->coll, __ATOMIC_ACQUIRE);
  if (!s || !s->have_t || s->t.nranks < 2) return;
  char msg[320];
  snprintf(msg, sizeof msg, "a run on rank %d failed: %s", s->t.rank, why);
  pthread_mutex_lock(&s->mu);
  bool any = false;
  for (int i = 0; i < ISA_MAX_DEVICES; i++)
    if (s->ranks[i]) {
      s->ranks[i]->ops->abort(s->ranks[i], msg);
      any = true;
    }
  pthread_mutex_unlock(&s->mu);
  if (!any) s->t.abort(s->t.ctx, msg);
}

void vm_coll_group_free(rill_vm_t *vm, vm_coll_group_t *g) {
  if (!g) return;
  for (uint32_t i = 0; i < g->nkeep; i++) vm_obj_release(g->keep[i]);
  rill__free(vm->a, g);
}

bool vm_coll_pending(const vm_coll_group_t *g) { return g && g->got; }

static void release_all(vm_obj_t *const *keep, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) vm_obj_release(keep[i]);
}

static void coll_of(const ops_plan_t *plan, int n, vm_coll_t *op) {
  const rill_type_t *x = &plan->decl->in[0];
  memset(op, 0, sizeof *op);
  op->kind = plan->p.coll.kind;
  op->red = plan->p.coll.red;
  op->dtype = x->dtype;
  op->count = (size_t)rill_type_numel(x);
  op->root = (int)plan->p.coll.root;
  op->outer = 1;
  if (op->kind == OPS_COLL_ALL_GATHER || op->kind == OPS_COLL_REDUCE_SCATTER) {
    for (int64_t i = 0; i < plan->p.axis; i++) op->outer *= (size_t)x->dims[i];
    op->block = op->count / (op->outer ? op->outer : 1);
    if (op->kind == OPS_COLL_REDUCE_SCATTER) op->block /= (size_t)n;
  }
}

static bool is_cpu(const vm_device_t *d) { return strcmp(d->ops->name, "cpu") == 0; }

static rill_status_t devices_comm(rill_vm_t *vm, vm_coll_state_t *s, int n, vm_comm_t **out) {
  pthread_mutex_lock(&s->mu);
  rill_status_t st = NULL;
  if (!s->devs[n]) {
    if (is_cpu(vm->dev)) st = vm_comm_cpu_devices(vm->a, vm->dev, n, &s->devs[n]);
    else st = vm_comm_nccl_devices(vm->a, vm->dev, n, s->oneshot_max, &s->devs[n]);
  }
  *out = s->devs[n];
  pthread_mutex_unlock(&s->mu);
  return st;
}

static rill_status_t ranks_comm(rill_vm_t *vm, vm_coll_state_t *s, int dev, vm_comm_t **out) {
  pthread_mutex_lock(&s->mu);
  rill_status_t st = NULL;
  if (!s->ranks[dev]) {
    if (is_cpu(vm->dev)) st = vm_comm_cpu_ranks(vm->a, vm->dev, &s->t, &s->ranks[dev]);
    else st = vm_comm_nccl_ranks(vm->a, vm->dev, dev, &s->t, s->timeout_s, s->oneshot_max, &s->ranks[dev]);
    if (st && s->t.abort) s->t.abort(s->t.ctx, rill_status_message(st));
  }
  *out = s->ranks[dev];
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* rank() and ranks(): the two values on device dev, uploaded on a stream of its own the first time. */
static rill_status_t rank_values(rill_vm_t *vm, vm_coll_state_t *s, int dev, void **out) {
  pthread_mutex_lock(&s->mu);
  rill_status_t st = NULL;
  if (!s->vals_dev[dev]) {
    vm_device_t *d = vm->dev;
    int h;
    st = dev ? d->ops->stream_acquire_on(d, dev, &h) : d->ops->stream_acquire(d, &h);
    if (!st) {
      void *p = NULL;
      st = d->ops->alloc(d, h, sizeof s->vals, &p);
      if (!st) st = d->ops->copy_h2d(d, h, p, s->vals, sizeof s->vals);
      if (!st) st = d->ops->stream_sync(d, h);
      if (!st) s->vals_dev[dev] = p;
      else if (p) d->ops->free(d, h, p, sizeof s->vals);
      d->ops->stream_release(d, h);
    }
  }
  *out = s->vals_dev[dev];
  pthread_mutex_unlock(&s->mu);
  return st;
}

/* An exchange (sendrecv: the sends' operands in, the recvs' results out):
 * its peers resolved in the job and checked, issued at once on the rank
 * communicator of the stream's device. */
static rill_status_t p2p_invoke(rill_vm_t *vm, vm_coll_state_t *s, int stream, int dev, const ops_plan_t *plan, void *const *in, void *const *out,
                                vm_obj_t *const *keep, uint32_t nkeep) {
  const isa_opdecl_t *d = plan->decl;
  const isa_attr_t *to = NULL, *to_shift = NULL, *from = NULL, *from_shift = NULL;
  for (uint32_t i = 0; i < d->nattrs; i++) {
    const isa_attr_t *a = &d->attrs[i];
    if (!strcmp(a->name, "to")) to = a;
    else if (!strcmp(a->name, "to_shift")) to_shift = a;
    else if (!strcmp(a->name, "from")) from = a;
    else if (!strcmp(a->name, "from_shift")) from_shift = a;
  }
  int n = s->have_t ? s->t.nranks : 1, me = s->have_t ? s->t.rank : 0, k = (int)(d->nin + d->nout);
  vm_coll_t ops[OPS_P2P_GROUP_MAX];
  void *bufs[OPS_P2P_GROUP_MAX];
  int streams[OPS_P2P_GROUP_MAX];
  rill_status_t st = NULL;
  for (int i = 0; !st && i < k; i++) {
    bool send = i < (int)d->nin;
    uint32_t j = send ? (uint32_t)i : (uint32_t)i - d->nin;
    int64_t v = send ? to->ints[j] : from->ints[j];
    bool rel = send ? to_shift->ints[j] : from_shift->ints[j];
    const char *name = send ? "send" : "recv";
    int64_t peer = rel ? ((me + v) % n + n) % n : v;
    if (!rel && peer >= n)
      st = rill__status(RILL_RUNTIME_ERROR, "%s {peer=%lld} on rank %d: rank %lld is out of the job's ranks 0..%d", name, (long long)peer, me, (long long)peer,
                        n - 1);
    else if (peer == me && rel)
      st = rill__status(RILL_RUNTIME_ERROR, "%s {shift=%lld} on rank %d of a job of %d rank%s is rank %d itself: a rank does not send to or receive from itself",
                        name, (long long)v, me, n, n == 1 ? "" : "s", me);
    else if (peer == me)
      st = rill__status(RILL_RUNTIME_ERROR, "%s {peer=%lld} on rank %d: a rank does not send to or receive from itself", name, (long long)peer, me);
    vm_coll_t *op = &ops[i];
    memset(op, 0, sizeof *op);
    op->kind = send ? OPS_COLL_SEND : OPS_COLL_RECV;
    op->type = send ? d->in[j] : d->out[j];
    op->dtype = op->type.dtype;
    op->count = (size_t)rill_type_numel(&op->type);
    op->outer = 1;
    op->peer = (int)peer;
    bufs[i] = send ? in[j] : out[j];
    streams[i] = stream;
  }
  vm_comm_t *c = NULL;
  if (!st && k) st = ranks_comm(vm, s, dev, &c);
  if (!st && k && !c->ops->p2p) st = rill__status(RILL_UNAVAILABLE, "send/recv: the %s communicator has no point-to-point", vm->dev->ops->name);
  if (st || !k) {
    release_all(keep, nkeep);
    return st;
  }
  return c->ops->p2p(c, ops, k, bufs, streams, keep, nkeep);
}

rill_status_t vm_coll_invoke(rill_vm_t *vm, vm_coll_group_t **pg, int stream, int dev, const ops_plan_t *plan, void *const *in,
                             void *const *out, vm_obj_t *const *keep, uint32_t nkeep) {
  vm_device_t *d = vm->dev;
  const ops_params_t *p = &plan->p;
  vm_coll_state_t *s;
  rill_status_t st = state(vm, &s);
  if (st) {
    release_all(keep, nkeep);
    return st;
  }
  int kind = p->coll.kind;
  if (kind == OPS_COLL_RANK || kind == OPS_COLL_RANKS) {
    release_all(keep, nkeep); /* (the copy is ordered on the stream; frees are too) */
    void *vals;
    RILL_TRY(rank_values(vm, s, dev, &vals));
    return d->ops->copy_d2d(d, stream, out[0], (uint8_t *)vals + (kind == OPS_COLL_RANKS ? 8 : 0), 8);
  }
  if (kind == OPS_COLL_SENDRECV) return p2p_invoke(vm, s, stream, dev, plan, in, out, keep, nkeep);
  if (ops_coll_is_p2p(kind)) {
    release_all(keep, nkeep);
    return rill__status(RILL_RUNTIME_ERROR, "%s in a module: the assembler makes sends and recvs sendrecv", plan->decl->name);
  }
  if (!p->coll.parts) {
    int n = s->have_t ? s->t.nranks : 1;
    if ((kind == OPS_COLL_ALL_GATHER || kind == OPS_COLL_REDUCE_SCATTER) && p->coll.ranks != n) {
      release_all(keep, nkeep);
      return rill__status(RILL_RUNTIME_ERROR, "%s {ranks=%lld} runs in a job of %d rank%s: its types are made for ranks=%lld", plan->decl->name,
                          (long long)p->coll.ranks, n, n == 1 ? "" : "s", (long long)p->coll.ranks);
    }
    vm_coll_t op;
    coll_of(plan, n, &op);
    if (n == 1) {
      release_all(keep, nkeep);
      return d->ops->copy_d2d(d, stream, out[0], in[0], vm_coll_in_bytes(&op));
    }
    vm_comm_t *c;
    if ((st = ranks_comm(vm, s, dev, &c))) {
      release_all(keep, nkeep);
      return st;
    }
    return c->ops->run(c, &op, in, out, &stream, keep, nkeep);
  }
  /* The device form: part `part` of `parts`, in order. */
  vm_coll_group_t *g = *pg;
  if (!g && !(g = *pg = rill__calloc(vm->a, 1, sizeof *g))) {
    release_all(keep, nkeep);
    return rill__oom();
  }
  int part = (int)p->coll.part, parts = (int)p->coll.parts;
  bool fits = part == g->got && dev == part && (part == 0 || (g->parts == parts && g->plan0->def == plan->def && g->plan0->p.coll.red == p->coll.red));
  if (!fits) {
    release_all(keep, nkeep);
    return rill__status(RILL_RUNTIME_ERROR, "%s part %d of %d (on device %d) where part %d of the collective before was due", plan->decl->name, part, parts,
                        dev, g->got);
  }
  if (part == 0) {
    g->plan0 = plan;
    g->parts = parts;
  }
  g->in[part] = in[0];
  g->out[part] = out[0];
  g->streams[part] = stream;
  for (uint32_t i = 0; i < nkeep; i++) g->keep[g->nkeep++] = keep[i];
  if (++g->got < parts) return NULL;
  g->got = 0;
  vm_coll_t op;
  coll_of(g->plan0, parts, &op);
  uint32_t nk = g->nkeep;
  g->nkeep = 0;
  vm_comm_t *c;
  if ((st = devices_comm(vm, s, parts, &c))) {
    release_all(g->keep, nk);
    return st;
  }
  return c->ops->run(c, &op, g->in, g->out, g->streams, g->keep, nk);
}
