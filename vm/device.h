/* device.h: the interface every device backend implements.
 *
 * Streams are small integers handed out by the device (acquire/release);
 * work on one stream runs in order, work on different streams may overlap.
 * Events order work across streams: a wait covers the event's most recent
 * record at the time the wait is issued (a never-recorded event is already
 * complete), as in CUDA. Allocation and release are ordered on a stream.
 * A failed kernel makes the device's error sticky: later work is skipped and
 * every later host callback receives the error, as a CUDA context does.
 * Two backends: `cpu` (device_cpu.c, each stream a worker thread with a
 * FIFO) and `cuda` (its own change, behind the same interface).
 */
#ifndef RILL_VM_DEVICE_H
#define RILL_VM_DEVICE_H

#include "../ops/ops.h"

typedef struct vm_device vm_device_t;
typedef struct vm_event vm_event_t;
typedef struct vm_mark vm_mark_t;
typedef struct vm_obj vm_obj_t;
typedef struct vm_graph vm_graph_t;
typedef struct vm_gexec vm_gexec_t;
typedef struct vm_cond vm_cond_t;

/* Runs on a device thread; must not block. `error` is NULL or the sticky
 * error (borrowed: copy what you need). */
typedef void (*vm_host_fn)(void *arg, rill_status_t error);
/* Releases objects a task kept alive (called from a device thread). */
typedef void (*vm_release_fn)(vm_obj_t *obj);

typedef struct vm_device_ops {
  const char *name;
  void (*destroy)(vm_device_t *d);
  rill_status_t (*stream_acquire)(vm_device_t *d, int *out);
  /* Optional, for an object with several devices (ndevices > 1): a stream of
   * device `device` (stream_acquire gives one of device 0). Allocation on a
   * stream is the stream's device's memory; events work across the devices
   * (record on one device's stream, wait on another's). */
  rill_status_t (*stream_acquire_on)(vm_device_t *d, int device, int *out);
  /* Optional: a copy of n bytes at src, memory of device src_device, into dst,
   * memory of the stream's device, ordered on the stream (a peer copy). NULL:
   * copy_d2d reaches every device's memory. */
  rill_status_t (*copy_peer)(vm_device_t *d, int stream, void *dst, int src_device, const void *src, size_t n);
  /* Optional: the bytes device `device` holds now (its memory accounting). */
  size_t (*device_held)(vm_device_t *d, int device);
  void (*stream_release)(vm_device_t *d, int stream);
  rill_status_t (*alloc)(vm_device_t *d, int stream, size_t size, void **out);
  void (*free)(vm_device_t *d, int stream, void *ptr, size_t size); /* size: as allocated */
  /* Copies ordered on the stream; host memory must stay valid until done. */
  rill_status_t (*copy_h2d)(vm_device_t *d, int stream, void *dst, const void *src, size_t n);
  rill_status_t (*copy_d2h)(vm_device_t *d, int stream, void *dst, const void *src, size_t n);
  /* Runs an op; the device owns the `keep` references (even on failure) and
   * drops them once the op has run. (Profiling times ops with marks.) */
  rill_status_t (*launch)(vm_device_t *d, int stream, const ops_plan_t *plan, void *const *in,
                          void *const *out, vm_obj_t *const *keep, uint32_t nkeep);
  rill_status_t (*event_create)(vm_device_t *d, vm_event_t **out);
  void (*event_destroy)(vm_device_t *d, vm_event_t *e);
  rill_status_t (*event_record)(vm_device_t *d, vm_event_t *e, int stream);
  rill_status_t (*stream_wait)(vm_device_t *d, int stream, vm_event_t *e);
  /* fn runs once the stream's work so far is done, or has failed: always
   * once, with the stream's error if any. */
  rill_status_t (*host_callback)(vm_device_t *d, int stream, vm_host_fn fn, void *arg);
  /* Optional: host_callback where the caller issues nothing more on the
   * stream until fn has run (a run's end): fn may then wait for whatever the
   * stream holds when it is waited for, which lets the device wait for the
   * stream itself rather than record an event when the callback is queued.
   * With `issue` (or NULL), the run's last work is issued by issue(arg) on
   * the device thread that then waits for the stream (the CUDA driver issues
   * a launch faster from the thread that saw the stream's earlier work end);
   * when issue fails nothing is waited for and fn gets its status. */
  rill_status_t (*host_callback_last)(vm_device_t *d, int stream, rill_status_t (*issue)(void *arg), vm_host_fn fn, void *arg);
  /* Blocks until the stream's work is done; returns the sticky error if any. */
  rill_status_t (*stream_sync)(vm_device_t *d, int stream);
  /* Blocks until all work on every stream is done. */
  rill_status_t (*synchronize)(vm_device_t *d);
  /* Optional: prepares op plans (kernels compiled, algorithms chosen):
   * each plan with a definition (def) and no state yet (dev NULL) gets its
   * state in plan->dev; the others are left alone. Called when a VM binds a
   * module and for each instance of a module with shape variables (a set of
   * plans per binding). A plan stays where it is and launch() may receive it
   * until unprepare; on failure every state this call made is freed again. */
  rill_status_t (*prepare)(vm_device_t *d, ops_plan_t *plans, uint32_t n);
  /* Frees the states of plans[0..n) (dev set back to NULL). The caller makes
   * sure no launch with them is being issued (their device work may still
   * be queued: states are host-side and read when a launch is issued). */
  void (*unprepare)(vm_device_t *d, ops_plan_t *plans, uint32_t n);
  /* Optional: the candidates (kernel choices) the device has for a
   * prepared plan, one name a line, appended to out; a device without it
   * has one: "default". */
  rill_status_t (*candidates)(vm_device_t *d, const ops_plan_t *plan, rill_buf_t *out);
  /* Tracing and profiling: a timestamp taken when the stream reaches this point, readable
   * (in microseconds on the host's monotonic clock, as near as the device
   * can tell) once the stream's work is done. */
  rill_status_t (*mark)(vm_device_t *d, int stream, vm_mark_t **out);
  double (*mark_us)(vm_device_t *d, vm_mark_t *m);
  void (*mark_free)(vm_device_t *d, vm_mark_t *m);
  /* Optional: run-time compiled kernels: compiled now, found on disk, found in memory. */
  void (*kernel_stats)(vm_device_t *d, rill_kernel_stats_t *out);
  /* Optional: memory the device holds beyond the VM's storages: library
   * workspaces, and memory its graphs own. */
  void (*memory)(vm_device_t *d, size_t *workspaces, size_t *graphs);
  rill_status_t (*copy_d2d)(vm_device_t *d, int stream, void *dst, const void *src, size_t n);
  /* Optional: n zeroed bytes of host memory that device 0's kernels reach
   * too (*out_host for the host, *out_dev for kernels): a VM's token
   * channel. NULL: host memory is the device's (cpu). */
  rill_status_t (*mapped_alloc)(vm_device_t *d, size_t n, void **out_host, void **out_dev);
  void (*mapped_free)(vm_device_t *d, void *host);

  /* Graphs (capture once, replay cheaply). Between capture_begin and
   * capture_end, work issued on `stream` is recorded, not run, and so is work
   * on any stream that waits for an event recorded in the capture (it joins
   * the capture and must be joined back into `stream`, through an event that
   * `stream` waits for, before the end). Allocations on a capturing stream
   * are real and immediate (they never become part of the graph); host
   * callbacks, host copies' completion and marks are not capturable. A
   * failed capture_end (unjoined work, an error on the way) still ends the
   * capture and yields no graph. */
  rill_status_t (*capture_begin)(vm_device_t *d, int stream);
  rill_status_t (*capture_end)(vm_device_t *d, int stream, vm_graph_t **out);
  size_t (*graph_nodes)(vm_device_t *d, const vm_graph_t *g);
  void (*graph_destroy)(vm_device_t *d, vm_graph_t *g);
  rill_status_t (*graph_instantiate)(vm_device_t *d, vm_graph_t *g, vm_gexec_t **out);
  /* Runs the graph's work on `stream`, after the stream's prior work and after
   * every earlier launch of the same executable. */
  rill_status_t (*graph_launch)(vm_device_t *d, vm_gexec_t *x, int stream);
  /* Gives the executable the parameters of `g`, which must have the same
   * topology as the graph it was made from; a status when it cannot (the
   * executable is then unchanged and a new one must be instantiated). Its
   * inputs (capture_input) then read from where g's copies read. */
  rill_status_t (*graph_update)(vm_device_t *d, vm_gexec_t *x, vm_graph_t *g);
  void (*gexec_destroy)(vm_device_t *d, vm_gexec_t *x);
  /* While capturing: a copy of n bytes from src into dst, as copy_d2d, whose
   * source each launch of an executable of the graph can change without a
   * new capture (gexec_set_input); the graph's inputs are numbered from 0 in
   * the order captured. */
  rill_status_t (*capture_input)(vm_device_t *d, int stream, void *dst, const void *src, size_t n);
  /* Later launches of x copy their input k from src (n bytes, as captured). */
  rill_status_t (*gexec_set_input)(vm_device_t *d, vm_gexec_t *x, int k, const void *src);
  /* Conditional nodes, while capturing (optional). cond_begin records on
   * `stream` "the condition := the byte at `flag` is not 0" and, after it, a
   * node that runs its bodies: an if (nbodies 2: the first when the
   * condition holds, else the second) or a loop (one body, run while the
   * condition holds; each run of the body ends by setting it anew from
   * cond_body_end's flag; past `max` runs the device fails with an error).
   * The stream's later work follows the node. cond_body_begin starts
   * capturing body k on a fresh stream (*out_stream); cond_body_end ends it
   * (its other streams must have joined it) and gives the stream back. */
  rill_status_t (*cond_begin)(vm_device_t *d, int stream, bool loop, int nbodies, const void *flag, uint64_t max, vm_cond_t **out);
  rill_status_t (*cond_body_begin)(vm_device_t *d, vm_cond_t *c, int k, int *out_stream);
  rill_status_t (*cond_body_end)(vm_device_t *d, vm_cond_t *c, int stream, const void *flag);
  void (*cond_free)(vm_device_t *d, vm_cond_t *c);
  /* Optional (cuda; several devices as one, device_multi.c): a capture that
   * another device of the object began may span this one's streams.
   * capture_join readies the device (a stream that waits for an event
   * recorded in the capture joins it, and its allocations and workspaces
   * are then real, the graph's memory, as in a capture of its own);
   * capture_leave ends that once the capture has ended (`failed`: streams
   * left in a dead capture are replaced) and gives the memory the graph
   * holds on this device, as a graph without work (*out, for
   * graph_destroy, or NULL), which must live as long as the graph's
   * executables. */
  rill_status_t (*capture_join)(vm_device_t *d);
  void (*capture_leave)(vm_device_t *d, bool failed, vm_graph_t **out);

  /* Optional (cuda; for NCCL and kernels of the communicators, vm/comm.h):
   * the driver's stream behind `stream` (a CUstream) and the object's
   * device it is on. */
  void *(*native_stream)(vm_device_t *d, int stream, int *out_device);
  /* Optional (cuda): device k of the object made the calling thread's
   * current, and its CUDA ordinal; with `source`, its compiled function
   * `name` (a CUfunction, from the device's kernel cache) in *out_fn. */
  rill_status_t (*native_device)(vm_device_t *d, int k, int *out_ordinal, const char *source, const char *name, void **out_fn);
} vm_device_ops_t;

struct vm_device {
  const vm_device_ops_t *ops;
  vm_release_fn release;
  /* true: the device keeps launch operands alive itself (cpu); false: the VM
   * keeps them until its run has ended (cuda, where per-launch bookkeeping
   * on the host would cost more than the launch). */
  bool keeps_operands;
  /* The devices this object drives (cpu:0,cpu:1 or cuda:0,cuda:1), numbered
   * from 0 as the VM numbers them; 1 for one. */
  int ndevices;
};

rill_status_t vm_device_cpu_create(const rill_allocator_t *a, vm_release_fn release, vm_device_t **out);
/* ndevices cpu devices in one object (cpu:0,...,cpu:N-1). */
rill_status_t vm_device_cpu_create_n(const rill_allocator_t *a, int ndevices, vm_release_fn release, vm_device_t **out);
/* ordinal: the GPU's number (cuda:N). */
rill_status_t vm_device_cuda_create(const rill_allocator_t *a, int ordinal, vm_release_fn release, vm_device_t **out);
/* GPUs ordinals[0..n) in one object, numbered 0..n-1 as listed (device_multi.c). */
rill_status_t vm_device_cuda_create_n(const rill_allocator_t *a, const int *ordinals, int n, vm_release_fn release, vm_device_t **out);
/* For device_multi.c: peer access from `to`'s context to `from`'s memory,
 * where the GPUs allow it (false where not); a copy of n bytes from src, on
 * `from`, into dst, on `to`, ordered on `to`'s stream. */
bool vm_cuda_enable_peer(vm_device_t *to, vm_device_t *from);
/* Makes d's context the calling thread's current one. */
rill_status_t vm_cuda_make_current(vm_device_t *d);
rill_status_t vm_cuda_copy_peer(vm_device_t *to, int stream, void *dst, vm_device_t *from, const void *src, size_t n);
/* NULL when CUDA can be used; else why not. */
const char *vm_cuda_unusable(void);
/* rill_device_start's cuda half (device_cuda_start.c): a thread per GPU of
 * ords[0..n) (ordinals under ISA_MAX_DEVICES) not started yet that loads
 * the CUDA libraries and retains the GPU's primary context. */
void vm_cuda_start(const int *ords, int n);
/* Waits for GPU ordinal's start, where one runs ("vm/device/wait for the start"). */
void vm_cuda_start_wait(int ordinal);
/* Ends GPU ordinal's start, where there is one: joins its thread and
 * releases its retain of the primary context (call it after the device
 * retained its own, so the context lives on). */
void vm_cuda_start_end(int ordinal);

#endif
