/* transport.h: the ranks of a job exchanging bytes.
 *
 * The seam between the job (the processes that met at a rendezvous, over
 * libuv TCP connections) and the communicators that run collectives over the
 * job's ranks: a cpu communicator reduces what the transport gathers, in rank
 * order; the cuda one shares NCCL's unique id through it; send and recv
 * carry point-to-point messages (a cpu send's bytes, a GPU send's type).
 * One transport a process; its allgathers are made from one thread at a
 * time, send and recv from any.
 */
#ifndef RILL_VM_TRANSPORT_H
#define RILL_VM_TRANSPORT_H

#include "rill.h"

typedef struct vm_transport {
  int rank;   /* this process, 0..nranks-1 */
  int nranks; /* the job's size (1: collectives are identities) */
  void *ctx;
  /* Every rank gives n bytes (the same n); out receives nranks * n bytes,
   * rank r's at offset r * n. Blocks until all have arrived; a rank that died
   * or does not answer within the job's timeout gives a status naming it. */
  rill_status_t (*allgather)(void *ctx, const void *in, size_t n, void *out);
  /* Marks the job failed from this rank (a local error): the others' calls
   * fail with a status soon after, instead of waiting for the timeout. */
  void (*abort)(void *ctx, const char *why);
  /* Point to point (send/recv over the job's ranks; NULL where the transport
   * has none). send hands n bytes to rank `peer` and returns without
   * waiting for them to be received (the bytes are copied). recv takes the
   * next message from rank `peer` into out (room for cap bytes; *out_n its
   * size), waiting for it at most the job's timeout; a larger message, a
   * peer that died, or the timeout is a status naming the peer. Messages
   * from one rank to another arrive in the order sent. */
  rill_status_t (*send)(void *ctx, int peer, const void *in, size_t n);
  rill_status_t (*recv)(void *ctx, int peer, void *out, size_t cap, size_t *out_n);
} vm_transport_t;

/* Makes the VM's collectives run over the job's ranks through t (copied;
 * t->ctx must outlive the VM): before the VM's first run, once (vm/coll.c). */
rill_status_t vm_attach_transport(rill_vm_t *vm, const vm_transport_t *t);

#endif
