/* job.h: the processes of one job (ranks) and the transport between them.
 *
 * rill_job_join (rill.h) meets the other ranks at a rendezvous over libuv
 * TCP handles and keeps the connections: a star through rank 0, whose
 * libuv loop runs on a thread of the job's own. This header gives the
 * communicators of the runtime what they need of it: the job's
 * vm_transport_t (allgather of bytes in rank order, abort), valid until
 * rill_job_destroy.
 */
#ifndef RILL_VM_JOB_H
#define RILL_VM_JOB_H

#include "rill.h"
#include "vm/transport.h"

/* The job's transport: ctx is the job; its calls are rill_job_allgather and
 * rill_job_abort. */
const vm_transport_t *vm_job_transport(rill_job_t *job);

#endif
