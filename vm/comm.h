/* comm.h: communicators, the groups that run collectives.
 *
 * A communicator is a group of participants: the devices of one VM
 * (`%y0, %y1 = all_reduce(%x0, %x1)`), or the ranks of a job (one operand,
 * over a transport, vm/transport.h). It runs one collective (vm_coll_t) on
 * per-participant buffers, each ordered on its participant's stream of the
 * VM's device object: it is issued now and runs when every participant's
 * stream reaches it, as an op does; a failure is the device's sticky error
 * (and, for ranks, the job's: the others get a status, never a hang).
 *
 * Implementations:
 *   - devices of a cpu VM (host memory): the first participant's stream
 *     waits for the others, reduces in participant order 0, 1, 2, ...,
 *     and the others wait for it (comm.c);
 *   - ranks on cpu: the transport gathers every rank's operand, each rank
 *     reduces in rank order (comm.c);
 *   - GPUs (comm_nccl.c): NCCL, loaded with dlopen("libnccl.so.2"), for the
 *     VM's devices (ncclCommInitAll, group calls) and for ranks (rank 0's
 *     unique id shared through the transport, a non-blocking
 *     ncclCommInitRankConfig polled against the timeout, ncclCommAbort on
 *     failure); small all-reduces over peer-mapped memory (one kernel per
 *     device) where every pair of GPUs has P2P access.
 *
 * Reductions are in participant order, one rounding to the dtype per step
 * (f16, bf16: computed in f32, rounded each step); integers wrap; bool's sum
 * and max are a logical or, its min a logical and; avg is the sum divided
 * by N (integers: rounded toward zero).
 */
#ifndef RILL_VM_COMM_H
#define RILL_VM_COMM_H

#include "device.h"
#include "transport.h"

/* One collective, per participant: `count` elements of dtype in, and
 * out's elements as the kind gives (all_gather: count * N; reduce_scatter:
 * count / N). all_gather and reduce_scatter are along an axis: `outer` the
 * elements before it, `block` a participant's part of the rest (all_gather:
 * its operand's, count / outer; reduce_scatter: its result's). */
typedef struct vm_coll {
  int kind;                    /* OPS_COLL_ALL_REDUCE ... OPS_COLL_BROADCAST */
  int red;                     /* OPS_RED_* */
  rill_dtype_t dtype;
  size_t count, outer, block;
  int root;
  int peer;                    /* send/recv: the other rank (resolved) */
  rill_type_t type;            /* send/recv: the tensor's type, checked against the peer's */
} vm_coll_t;

typedef struct vm_comm vm_comm_t;
typedef struct vm_comm_ops {
  /* Issues op: local participant i reads in[i] and writes out[i], ordered on
   * streams[i] of the VM's device object. Takes the `keep` references (the
   * operands' objects: held until the collective has run; even on failure). */
  rill_status_t (*run)(vm_comm_t *c, const vm_coll_t *op, void *const *in, void *const *out, const int *streams, vm_obj_t *const *keep,
                       uint32_t nkeep);
  /* Ends every collective in flight with an error (the job's, for ranks). */
  void (*abort)(vm_comm_t *c, const char *why);
  void (*destroy)(vm_comm_t *c);
  /* One exchange of sends and recvs over the job's ranks (ops[i].kind
   * OPS_COLL_SEND or OPS_COLL_RECV, peer resolved), issued together: part
   * i reads (send) or writes (recv) bufs[i], ordered on streams[i]. Takes the
   * keep references as run does. NULL for the VM's devices' communicators. */
  rill_status_t (*p2p)(vm_comm_t *c, const vm_coll_t *ops, int n, void *const *bufs, const int *streams, vm_obj_t *const *keep, uint32_t nkeep);
} vm_comm_ops_t;

struct vm_comm {
  const vm_comm_ops_t *ops;
  vm_device_t *dev;            /* the VM's device object */
  int nlocal;                  /* participants in this process (devices) */
  int rank, nranks;            /* this process in the job (0 and 1 for a VM's devices) */
};

/* Participant `me`'s result of op over n operands parts[0..n), computed on
 * the host in participant order. */
void vm_coll_host(const vm_coll_t *op, int n, const void *const *parts, int me, void *out);
/* Bytes of a participant's operand and result. */
size_t vm_coll_in_bytes(const vm_coll_t *op);
size_t vm_coll_out_bytes(const vm_coll_t *op, int n);

/* A point-to-point message's header: the sender's rank and the tensor's
 * type (little-endian), which the receiver checks against its recv's. */
#define VM_P2P_HDR 80
void vm_p2p_header(const vm_coll_t *op, int from, uint8_t *out);
/* A status unless the message (n bytes, header first) that rank `me` got
 * for its recv op fits it: the peer's send of the same type. `bytes`: the
 * message holds the tensor after the header (cpu), or the header alone. */
rill_status_t vm_p2p_check(const vm_coll_t *op, int me, const uint8_t *msg, size_t n, bool bytes);

/* The devices 0..n-1 of a cpu device object. */
rill_status_t vm_comm_cpu_devices(const rill_allocator_t *a, vm_device_t *dev, int n, vm_comm_t **out);
/* The job's ranks over t, on a cpu device: one participant per process. */
rill_status_t vm_comm_cpu_ranks(const rill_allocator_t *a, vm_device_t *dev, const vm_transport_t *t, vm_comm_t **out);

/* comm_nccl.c (a cuda build): the GPUs 0..n-1 of a cuda device object; the
 * job's ranks, this process on GPU `device` of the object, with the
 * transport and a timeout for set-up and collectives. A status, with why,
 * where NCCL cannot be loaded. */
rill_status_t vm_comm_nccl_devices(const rill_allocator_t *a, vm_device_t *dev, int n, size_t oneshot_max, vm_comm_t **out);
rill_status_t vm_comm_nccl_ranks(const rill_allocator_t *a, vm_device_t *dev, int device, const vm_transport_t *t, double timeout_s, size_t oneshot_max,
                                 vm_comm_t **out);
/* The one-shot all-reduce kernel's CUDA C for dtype d and reduction red
 * (comm_nccl.c; for tests that compile it without a GPU). */
rill_status_t vm_oneshot_source(rill_dtype_t d, int red, char *buf, size_t n);

#endif
