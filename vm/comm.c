/* comm.c: the host's collectives, and the cpu communicators (comm.h).
 *
 * Both cpu communicators run the collective as a task of the cpu device (a
 * launch of a plan made here, whose kernel is the collective), so it is
 * ordered on its stream, skipped after an error and captured into graphs
 * like any op. The devices' one runs on participant 0's stream after an
 * event from each other participant's stream, which then wait for its
 * event; the ranks' one gathers through the transport on its stream's
 * thread, the VM's issue order being the job's order (every rank runs the
 * same program).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "isa/sym.h"
#include "rill_config.h"

size_t vm_coll_in_bytes(const vm_coll_t *op) { return op->count * rill__dtypes[op->dtype].size; }
size_t vm_coll_out_bytes(const vm_coll_t *op, int n) {
  size_t b = vm_coll_in_bytes(op);
  if (op->kind == OPS_COLL_ALL_GATHER) return b * (size_t)n;
  if (op->kind == OPS_COLL_REDUCE_SCATTER) return b / (size_t)n;
  return b;
}

/* acc := acc RED x, elementwise over k elements (participant order: acc holds 0..i-1). */
#define RED_LOOP(T, ADD)                                                        \
  do {                                                                          \
    T *a_ = acc;                                                                \
    const T *x_ = x;                                                            \
    for (size_t j = 0; j < k; j++) {                                            \
      T u = a_[j], v = x_[j];                                                   \
      a_[j] = red == OPS_RED_MAX ? (u != u || u > v ? u : v)                    \
            : red == OPS_RED_MIN ? (u != u || u < v ? u : v) : (T)(ADD);        \
    }                                                                           \
  } while (0)

static void red_step(rill_dtype_t d, int red, void *acc, const void *x, size_t k) {
  switch (d) {
    case RILL_F32: RED_LOOP(float, u + v); break;
    case RILL_F64: RED_LOOP(double, u + v); break;
    case RILL_I8: RED_LOOP(int8_t, (uint8_t)u + (uint8_t)v); break;
    case RILL_U8: RED_LOOP(uint8_t, u + v); break;
    case RILL_I32: RED_LOOP(int32_t, (uint32_t)u + (uint32_t)v); break;
    case RILL_I64: RED_LOOP(int64_t, (uint64_t)u + (uint64_t)v); break;
    case RILL_BOOL: {
      uint8_t *a = acc;
      const uint8_t *b = x;
      for (size_t j = 0; j < k; j++) a[j] = red == OPS_RED_MIN ? (a[j] && b[j]) : (a[j] || b[j]);
      break;
    }
    case RILL_F16: case RILL_BF16: {
      uint16_t *a = acc;
      const uint16_t *b = x;
      bool h = d == RILL_F16;
      for (size_t j = 0; j < k; j++) {
        float u = h ? rill__f16_to_f32(a[j]) : rill__bf16_to_f32(a[j]), v = h ? rill__f16_to_f32(b[j]) : rill__bf16_to_f32(b[j]);
        float r = red == OPS_RED_MAX ? (u != u || u > v ? u : v) : red == OPS_RED_MIN ? (u != u || u < v ? u : v) : u + v;
        a[j] = h ? rill__f32_to_f16(r) : rill__f32_to_bf16(r);
      }
      break;
    }
    default: break;
  }
}

/* avg's last step: acc / n. */
static void avg_step(rill_dtype_t d, void *acc, size_t k, int n) {
  for (size_t j = 0; j < k; j++) {
    switch (d) {
      case RILL_F32: ((float *)acc)[j] /= (float)n; break;
      case RILL_F64: ((double *)acc)[j] /= (double)n; break;
      case RILL_I8: ((int8_t *)acc)[j] = (int8_t)(((int8_t *)acc)[j] / n); break;
      case RILL_U8: ((uint8_t *)acc)[j] = (uint8_t)(((uint8_t *)acc)[j] / n); break;
      case RILL_I32: ((int32_t *)acc)[j] /= n; break;
      case RILL_I64: ((int64_t *)acc)[j] /= n; break;
      case RILL_F16: ((uint16_t *)acc)[j] = rill__f32_to_f16(rill__f16_to_f32(((uint16_t *)acc)[j]) / (float)n); break;
      case RILL_BF16: ((uint16_t *)acc)[j] = rill__f32_to_bf16(rill__bf16_to_f32(((uint16_t *)acc)[j]) / (float)n); break;
      default: break;
    }
  }
}

void vm_coll_host(const vm_coll_t *op, int n, const void *const *parts, int me, void *out) {
  size_t es = rill__dtypes[op->dtype].size, bytes = op->count * es;
  switch (op->kind) {
    case OPS_COLL_BROADCAST: memmove(out, parts[op->root], bytes); return;
    case OPS_COLL_ALL_GATHER: {
      size_t blk = op->block * es;
      for (size_t o = 0; o < op->outer; o++)
        for (int i = 0; i < n; i++)
          memcpy((uint8_t *)out + (o * (size_t)n + (size_t)i) * blk, (const uint8_t *)parts[i] + o * blk, blk);
      return;
    }
    case OPS_COLL_REDUCE_SCATTER: {
      size_t blk = op->block * es;
      for (size_t o = 0; o < op->outer; o++) {
        size_t src = (o * (size_t)n + (size_t)me) * blk;
        uint8_t *acc = (uint8_t *)out + o * blk;
        memcpy(acc, (const uint8_t *)parts[0] + src, blk);
        for (int i = 1; i < n; i++) red_step(op->dtype, op->red, acc, (const uint8_t *)parts[i] + src, op->block);
        if (op->red == OPS_RED_AVG) avg_step(op->dtype, acc, op->block, n);
      }
      return;
    }
    default: /* all_reduce */
      if (out != parts[0]) memmove(out, parts[0], bytes);
      for (int i = 1; i < n; i++) red_step(op->dtype, op->red, out, parts[i], op->count);
      if (op->red == OPS_RED_AVG) avg_step(op->dtype, out, op->count, n);
      return;
  }
}

/* ---- a collective as a cpu task ---- */

/* A plan the cpu device launches: its kernel is the collective. One per
 * distinct collective a communicator has run, kept as long as it (a graph
 * replays its tasks). */
typedef struct task_plan {
  ops_plan_t plan;             /* first: the kernel finds the rest from it */
  ops_def_t def;
  isa_opdecl_t decl;
  vm_coll_t op;
  vm_comm_t *comm;
  struct task_plan *next;
} task_plan_t;

typedef struct cpu_comm {
  vm_comm_t base;
  const rill_allocator_t *a;
  pthread_mutex_t mu;          /* plans, events, issue order; the transport (ranks) */
  task_plan_t *plans;
  vm_event_t *ev[ISA_MAX_DEVICES];
  vm_event_t *pev[OPS_P2P_GROUP_MAX]; /* ranks: an exchange's streams joined */
  const vm_transport_t *t;     /* ranks: the job's transport */
  void *scratch;               /* ranks: the gathered operands */
  size_t scratch_size;
  pthread_mutex_t run_mu;      /* ranks: one collective at a time */
} cpu_comm_t;

static rill_status_t devices_kernel(const ops_plan_t *plan, void *const *in, void *const *out) {
  const task_plan_t *tp = (const task_plan_t *)plan;
  int n = tp->comm->nlocal;
  if (tp->op.kind == OPS_COLL_ALL_REDUCE) {
    vm_coll_host(&tp->op, n, (const void *const *)in, 0, out[0]);
    for (int i = 1; i < n; i++) memcpy(out[i], out[0], vm_coll_in_bytes(&tp->op));
    return NULL;
  }
  for (int i = 0; i < n; i++) vm_coll_host(&tp->op, n, (const void *const *)in, i, out[i]);
  return NULL;
}

static rill_status_t ranks_kernel(const ops_plan_t *plan, void *const *in, void *const *out) {
  const task_plan_t *tp = (const task_plan_t *)plan;
  cpu_comm_t *c = (cpu_comm_t *)tp->comm;
  const vm_transport_t *t = c->t;
  int n = t->nranks;
  size_t bytes = vm_coll_in_bytes(&tp->op);
  pthread_mutex_lock(&c->run_mu);
  rill_status_t st = NULL;
  if (c->scratch_size < bytes * (size_t)n) {
    void *p = rill__alloc(c->a, bytes * (size_t)n);
    if (!p) {
      st = rill__oom();
      t->abort(t->ctx, "out of memory for a collective's operands");
      goto done;
    }
    rill__free(c->a, c->scratch);
    c->scratch = p;
    c->scratch_size = bytes * (size_t)n;
  }
  if ((st = t->allgather(t->ctx, in[0], bytes, c->scratch))) {
    st = rill__status_prefix(st, "%s over %d ranks (rank %d): ", tp->decl.name, n, t->rank);
    goto done;
  }
  const void *parts[1 << 10];
  const void **pp = n <= (int)RILL_ARRAY_LEN(parts) ? parts : rill__alloc(c->a, sizeof(void *) * (size_t)n);
  if (!pp) {
    st = rill__oom();
    goto done;
  }
  for (int i = 0; i < n; i++) pp[i] = (const uint8_t *)c->scratch + (size_t)i * bytes;
  vm_coll_host(&tp->op, n, pp, t->rank, out[0]);
  if (pp != parts) rill__free(c->a, pp);
done:
  pthread_mutex_unlock(&c->run_mu);
  return st;
}

static const char *const KIND_NAMES[] = {"", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "rank", "ranks", "send", "recv"};

/* The task plan for op (made on first use; c->mu held). */
static rill_status_t task_plan(cpu_comm_t *c, const vm_coll_t *op, ops_cpu_fn kernel, int nio, task_plan_t **out) {
  for (task_plan_t *p = c->plans; p; p = p->next)
    if (memcmp(&p->op, op, sizeof *op) == 0) { *out = p; return NULL; }
  task_plan_t *p = rill__calloc(c->a, 1, sizeof *p);
  if (!p) return rill__oom();
  p->op = *op;
  p->comm = &c->base;
  p->def.name = KIND_NAMES[op->kind];
  p->def.cpu = kernel;
  p->decl.name = p->def.name;
  p->decl.nin = p->decl.nout = (uint32_t)nio;
  if (op->kind == OPS_COLL_SEND) p->decl.nout = 0;
  if (op->kind == OPS_COLL_RECV) p->decl.nin = 0;
  p->plan.def = &p->def;
  p->plan.decl = &p->decl;
  p->plan.a = c->a;
  p->next = c->plans;
  c->plans = p;
  *out = p;
  return NULL;
}

static void release_keep(vm_device_t *d, vm_obj_t *const *keep, uint32_t nkeep) {
  for (uint32_t i = 0; i < nkeep; i++) d->release(keep[i]);
}

/* ---- point to point ---- */
#define P2P_MAGIC 0x50325052u /* "RP2P" */

static void le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t rd32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}

void vm_p2p_header(const vm_coll_t *op, int from, uint8_t *out) {
  memset(out, 0, VM_P2P_HDR);
  le32(out, P2P_MAGIC);
  le32(out + 4, (uint32_t)op->type.dtype);
  le32(out + 8, (uint32_t)op->type.rank);
  le32(out + 12, (uint32_t)from);
  for (int i = 0; i < op->type.rank && i < RILL_MAX_RANK; i++) {
    uint64_t d = (uint64_t)op->type.dims[i];
    le32(out + 16 + 8 * i, (uint32_t)d);
    le32(out + 20 + 8 * i, (uint32_t)(d >> 32));
  }
}

rill_status_t vm_p2p_check(const vm_coll_t *op, int me, const uint8_t *msg, size_t n, bool bytes) {
  if (n < VM_P2P_HDR || rd32(msg) != P2P_MAGIC)
    return rill__status(RILL_RUNTIME_ERROR, "recv on rank %d from rank %d: the message (%zu bytes) is not a send's", me, op->peer, n);
  rill_type_t t = {(rill_dtype_t)rd32(msg + 4), (int)rd32(msg + 8), {0}};
  bool same = t.dtype == op->type.dtype && t.rank == op->type.rank && t.rank <= RILL_MAX_RANK && (unsigned)t.dtype < RILL_DTYPE_COUNT;
  for (int i = 0; same && i < t.rank; i++) {
    t.dims[i] = (int64_t)((uint64_t)rd32(msg + 16 + 8 * i) | (uint64_t)rd32(msg + 20 + 8 * i) << 32);
    same = t.dims[i] == op->type.dims[i];
  }
  char want[96], got[96] = "a type this build does not know";
  if (!same) {
    if (t.rank <= RILL_MAX_RANK && (unsigned)t.dtype < RILL_DTYPE_COUNT) {
      for (int i = 0; i < t.rank; i++) t.dims[i] = (int64_t)((uint64_t)rd32(msg + 16 + 8 * i) | (uint64_t)rd32(msg + 20 + 8 * i) << 32);
      isa_sym_format_type(NULL, &t, got, sizeof got);
    }
    return rill__status(RILL_RUNTIME_ERROR,
                        "recv on rank %d from rank %d expects %s, and rank %d sent %s (a rank's k-th send to a peer meets the peer's k-th recv from it)",
                        me, op->peer, isa_sym_format_type(NULL, &op->type, want, sizeof want), op->peer, got);
  }
  if (bytes && n != VM_P2P_HDR + vm_coll_in_bytes(op))
    return rill__status(RILL_RUNTIME_ERROR, "recv on rank %d from rank %d: %zu bytes for %s", me, op->peer, n - VM_P2P_HDR,
                        isa_sym_format_type(NULL, &op->type, want, sizeof want));
  return NULL;
}

/* A send or recv as a task on its stream: the send hands header and bytes
 * to the transport (which does not wait for the receiver), the recv waits
 * for the next message from its peer and checks it. */
static rill_status_t p2p_kernel(const ops_plan_t *plan, void *const *in, void *const *out) {
  const task_plan_t *tp = (const task_plan_t *)plan;
  cpu_comm_t *c = (cpu_comm_t *)tp->comm;
  const vm_transport_t *t = c->t;
  const vm_coll_t *op = &tp->op;
  size_t bytes = vm_coll_in_bytes(op), n = VM_P2P_HDR + bytes;
  uint8_t *msg = rill__alloc(c->a, n);
  if (!msg) return rill__oom();
  rill_status_t st;
  if (op->kind == OPS_COLL_SEND) {
    vm_p2p_header(op, t->rank, msg);
    if (bytes) memcpy(msg + VM_P2P_HDR, in[0], bytes);
    st = t->send(t->ctx, op->peer, msg, n);
    if (st) st = rill__status_prefix(st, "send from rank %d to rank %d: ", t->rank, op->peer);
  } else {
    size_t got = 0;
    st = t->recv(t->ctx, op->peer, msg, n, &got);
    if (st) st = rill__status_prefix(st, "recv on rank %d from rank %d: ", t->rank, op->peer);
    if (!st) st = vm_p2p_check(op, t->rank, msg, got, true);
    if (!st && bytes) memcpy(out[0], msg + VM_P2P_HDR, bytes);
  }
  rill__free(c->a, msg);
  return st;
}

static rill_status_t devices_run(vm_comm_t *cm, const vm_coll_t *op, void *const *in, void *const *out, const int *streams,
                                 vm_obj_t *const *keep, uint32_t nkeep) {
  cpu_comm_t *c = (cpu_comm_t *)cm;
  vm_device_t *d = cm->dev;
  const vm_device_ops_t *D = d->ops;
  int n = cm->nlocal;
  void *ptrs[2 * ISA_MAX_DEVICES];
  memcpy(ptrs, in, sizeof(void *) * (size_t)n);
  memcpy(ptrs + n, out, sizeof(void *) * (size_t)n);
  pthread_mutex_lock(&c->mu);
  task_plan_t *tp;
  rill_status_t st = task_plan(c, op, devices_kernel, n, &tp);
  for (int i = 0; !st && i < n; i++)
    if (!c->ev[i]) st = D->event_create(d, &c->ev[i]);
  for (int i = 1; !st && i < n; i++) {
    st = D->event_record(d, c->ev[i], streams[i]);
    if (!st) st = D->stream_wait(d, streams[0], c->ev[i]);
  }
  if (st) {
    pthread_mutex_unlock(&c->mu);
    release_keep(d, keep, nkeep);
    return st;
  }
  st = D->launch(d, streams[0], &tp->plan, ptrs, ptrs + n, keep, nkeep);
  if (!st) st = D->event_record(d, c->ev[0], streams[0]);
  for (int i = 1; !st && i < n; i++) st = D->stream_wait(d, streams[i], c->ev[0]);
  pthread_mutex_unlock(&c->mu);
  return st;
}

static rill_status_t ranks_run(vm_comm_t *cm, const vm_coll_t *op, void *const *in, void *const *out, const int *streams,
                               vm_obj_t *const *keep, uint32_t nkeep) {
  cpu_comm_t *c = (cpu_comm_t *)cm;
  pthread_mutex_lock(&c->mu);
  task_plan_t *tp;
  rill_status_t st = task_plan(c, op, ranks_kernel, 1, &tp);
  pthread_mutex_unlock(&c->mu);
  if (st) {
    release_keep(cm->dev, keep, nkeep);
    return st;
  }
  return cm->dev->ops->launch(cm->dev, streams[0], &tp->plan, in, out, keep, nkeep);
}

/* The exchange on streams[0], after an event from every other stream of
 * its parts (which then wait for its end): the sends first, so that a ring
 * (every rank sending to the next, receiving from the one before) meets. */
static rill_status_t ranks_p2p(vm_comm_t *cm, const vm_coll_t *ops, int n, void *const *bufs, const int *streams, vm_obj_t *const *keep,
                               uint32_t nkeep) {
  cpu_comm_t *c = (cpu_comm_t *)cm;
  vm_device_t *d = cm->dev;
  const vm_device_ops_t *D = d->ops;
  rill_status_t st = c->t->send && c->t->recv ? NULL : rill__status(RILL_UNAVAILABLE, "send/recv: the job's transport has no point-to-point calls");
  task_plan_t *tp[OPS_P2P_GROUP_MAX];
  pthread_mutex_lock(&c->mu);
  for (int i = 0; !st && i < n; i++) st = task_plan(c, &ops[i], p2p_kernel, 1, &tp[i]);
  for (int i = 0; !st && i < n; i++)
    if (!c->pev[i]) st = D->event_create(d, &c->pev[i]);
  for (int i = 1; !st && i < n; i++) {
    bool seen = streams[i] == streams[0];
    for (int k = 1; k < i && !seen; k++) seen = streams[k] == streams[i];
    if (seen) continue;
    if (!st) st = D->event_record(d, c->pev[i], streams[i]);
    if (!st) st = D->stream_wait(d, streams[0], c->pev[i]);
  }
  int last = -1;
  for (int pass = 0; !st && pass < 2; pass++)
    for (int i = 0; i < n; i++)
      if ((ops[i].kind == OPS_COLL_SEND) == (pass == 0)) last = i;
  for (int pass = 0; !st && pass < 2; pass++)
    for (int i = 0; !st && i < n; i++) {
      if ((ops[i].kind == OPS_COLL_SEND) != (pass == 0)) continue;
      void *none = NULL;
      bool send = ops[i].kind == OPS_COLL_SEND;
      st = D->launch(d, streams[0], &tp[i]->plan, send ? &bufs[i] : &none, send ? &none : &bufs[i], i == last ? keep : NULL, i == last ? nkeep : 0);
      if (i == last) nkeep = 0; /* (launch took them, even failing) */
    }
  bool joined = false;
  for (int i = 1; !st && i < n; i++) {
    bool seen = streams[i] == streams[0];
    for (int k = 1; k < i && !seen; k++) seen = streams[k] == streams[i];
    if (seen) continue;
    if (!joined) st = D->event_record(d, c->pev[0], streams[0]);
    joined = true;
    if (!st) st = D->stream_wait(d, streams[i], c->pev[0]);
  }
  pthread_mutex_unlock(&c->mu);
  release_keep(d, keep, nkeep);
  return st;
}

static void cpu_abort(vm_comm_t *cm, const char *why) {
  cpu_comm_t *c = (cpu_comm_t *)cm;
  if (c->t) c->t->abort(c->t->ctx, why);
}

static void cpu_destroy(vm_comm_t *cm) {
  cpu_comm_t *c = (cpu_comm_t *)cm;
  for (int i = 0; i < ISA_MAX_DEVICES; i++)
    if (c->ev[i]) cm->dev->ops->event_destroy(cm->dev, c->ev[i]);
  for (int i = 0; i < OPS_P2P_GROUP_MAX; i++)
    if (c->pev[i]) cm->dev->ops->event_destroy(cm->dev, c->pev[i]);
  while (c->plans) {
    task_plan_t *p = c->plans;
    c->plans = p->next;
    rill__free(c->a, p);
  }
  rill__free(c->a, c->scratch);
  pthread_mutex_destroy(&c->mu);
  pthread_mutex_destroy(&c->run_mu);
  rill__free(c->a, c);
}

static const vm_comm_ops_t DEVICES_OPS = {devices_run, cpu_abort, cpu_destroy, NULL};
static const vm_comm_ops_t RANKS_OPS = {ranks_run, cpu_abort, cpu_destroy, ranks_p2p};

static rill_status_t cpu_comm_new(const rill_allocator_t *a, vm_device_t *dev, const vm_comm_ops_t *ops, cpu_comm_t **out) {
  cpu_comm_t *c = rill__calloc(a, 1, sizeof *c);
  if (!c) return rill__oom();
  c->a = a;
  c->base.ops = ops;
  c->base.dev = dev;
  c->base.nlocal = 1;
  c->base.nranks = 1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->run_mu, NULL);
  *out = c;
  return NULL;
}

rill_status_t vm_comm_cpu_devices(const rill_allocator_t *a, vm_device_t *dev, int n, vm_comm_t **out) {
  if (n < 1 || n > dev->ndevices) return rill__status(RILL_INVALID_ARGUMENT, "a collective over %d devices in a VM of %d", n, dev->ndevices);
  cpu_comm_t *c;
  RILL_TRY(cpu_comm_new(a, dev, &DEVICES_OPS, &c));
  c->base.nlocal = n;
  *out = &c->base;
  return NULL;
}

rill_status_t vm_comm_cpu_ranks(const rill_allocator_t *a, vm_device_t *dev, const vm_transport_t *t, vm_comm_t **out) {
  cpu_comm_t *c;
  RILL_TRY(cpu_comm_new(a, dev, &RANKS_OPS, &c));
  c->t = t;
  c->base.rank = t->rank;
  c->base.nranks = t->nranks;
  *out = &c->base;
  return NULL;
}

#if !RILL_HAVE_CUDA
rill_status_t vm_comm_nccl_devices(const rill_allocator_t *a, vm_device_t *dev, int n, size_t oneshot_max, vm_comm_t **out) {
  (void)a; (void)dev; (void)n; (void)oneshot_max; (void)out;
  return rill__status(RILL_UNAVAILABLE, "collectives over GPUs need a build with CUDA (NCCL)");
}
rill_status_t vm_comm_nccl_ranks(const rill_allocator_t *a, vm_device_t *dev, int device, const vm_transport_t *t, double timeout_s, size_t oneshot_max, vm_comm_t **out) {
  (void)a; (void)dev; (void)device; (void)t; (void)timeout_s; (void)oneshot_max; (void)out;
  return rill__status(RILL_UNAVAILABLE, "collectives over GPUs need a build with CUDA (NCCL)");
}
#endif
