/* vm.h: the runtime's objects.
 *
 * A module is verified bytecode (with linked weights resolved). A VM binds
 * a module to a device: one executable plan per op-table entry and the
 * constants uploaded once. Tensors and storages are reference counted
 * (atomically: device threads drop the references their tasks held).
 * A run is one invocation: a stack of frames interpreted until it ends or
 * suspends on a host wait, resumed from a libuv loop.
 */
#ifndef RILL_VM_VM_H
#define RILL_VM_VM_H

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#define RILL_LAT_RING 8192

#include "device.h"

typedef struct vm_trace vm_trace_t;
typedef struct vm_coll_state vm_coll_state_t;
typedef struct vm_coll_group vm_coll_group_t;
typedef struct vm_gfunc vm_gfunc_t;

/* Per op-table entry: how often it ran and for how long (device time),
 * added up from device marks under prof_mu. */
typedef struct vm_op_stats {
  uint64_t calls, ns;
} vm_op_stats_t;

struct vm_prof_pending {
  uint32_t op;
  vm_mark_t *m0, *m1;
};

enum { OBJ_STORAGE = 1, OBJ_TENSOR = 2 };

struct vm_obj {
  atomic_int refs;
  uint8_t kind;
};

/* What a storage's memory is for (rill_memory_info_t). */
typedef enum vm_mem_kind { VM_MEM_BUFFERS, VM_MEM_WEIGHTS, VM_MEM_GRAPHS, VM_MEM_KINDS } vm_mem_kind_t;

typedef struct vm_storage {
  vm_obj_t hdr;
  rill_vm_t *vm;
  void *ptr;
  size_t size;
  /* The stream that last used it (at first, where it was allocated): frees
   * are ordered there. Atomic: runs on several threads may share a storage
   * (an input, a constant); the last reference goes only after every use. */
  atomic_int stream;
  uint8_t kind;              /* vm_mem_kind_t: what rill_vm_memory_info counts it as */
  bool wrapped;              /* memory the caller owns: never freed by the device */
  bool constant;             /* a module constant's: never written after upload */
  bool borrowed;             /* the module's own bytes, read in place (cpu): never freed here; holds a module reference */
  void (*user_release)(void *user); /* wrapped memory: the owner's release, if any */
  void *user;
} vm_storage_t;

static inline void vm_storage_used_on(vm_storage_t *s, int stream) {
  if (atomic_load_explicit(&s->stream, memory_order_relaxed) != stream) atomic_store_explicit(&s->stream, stream, memory_order_relaxed);
}

struct rill_tensor {
  vm_obj_t hdr;
  rill_vm_t *vm;
  rill_type_t type;
  size_t nbytes;
  vm_storage_t *storage;
  size_t offset;
  uint8_t host[64];         /* the first bytes, read to the host by a host wait (a bind_dims reads up to 8 sizes) */
};

struct rill_module {
  atomic_int refs;
  const rill_allocator_t *a;
  isa_module_t *m;
  rill_map_t func_map;
  char base_dir[4096];      /* where linked weights' paths start (shards are read at attach) */
  /* rill_module_load_file's module file, mapped (or read): the embedded
   * constants' data point into it; and per weights entry the linked file,
   * mapped where a constant needs it, which the linked constants point
   * into. Kept until the module's last reference goes; a VM holds one (the
   * cpu device's constants may be these bytes themselves, upload_const). */
  rill_file_t file;
  rill_file_t *wfiles;
  uint32_t nwfiles;
  rill_module_image_t *image; /* rill_module_load_image's: the constants point where it keeps them */
};

/* Uploads the module's shard constants, part `rank` of each (a job of
 * nranks, which must be their parts): from vm_attach_transport. */
rill_status_t vm_upload_shards(rill_vm_t *vm, int rank, int nranks);

typedef struct vm_inst vm_inst_t;
/* The variable a dimension names, or -1 where it is a number or an expression. */
int32_t vm_dim_var(const isa_syms_t *s, int64_t d);
/* Binds the shape variables of function fi from its inputs (checked: one size
 * per name, inside its range) and gives the module and plans for those sizes.
 * With out_exact, sizes may be raised to graph mode's buckets (vm_graph_pad):
 * then *out_exact is a new array of the results' types at the inputs' own
 * sizes (the caller frees it), else NULL. */
rill_status_t vm_shapes_pick(rill_vm_t *vm, uint32_t fi, rill_tensor_t *const *inputs, rill_type_t **out_exact, const isa_module_t **out_m,
                             const ops_plan_t **out_plans);
void vm_shapes_free(rill_vm_t *vm);
/* bind_dims: the module and plans at the binding of *m (an instance that
 * vm_shapes_pick gave) with variable vars[i] := vals[i] (checked: at least
 * 0, inside a declared range, not one the entry's parameters bind). */
rill_status_t vm_shapes_rebind(rill_vm_t *vm, uint32_t entry, const uint32_t *vars, const int64_t *vals, int n, const isa_module_t **m,
                               const ops_plan_t **plans);
/* Sets each planned op's choice from the module's kernel choice trees at the
 * variables' values `vals` (NULL: each variable's lower bound). */
void vm_choose(const isa_module_t *m, const int64_t *vals, ops_plan_t *plans);

/* A shape variable's bucket sizes, ascending (pad.c). */
typedef struct vm_buckets {
  int64_t *sizes;
  uint32_t n;
} vm_buckets_t;

struct rill_vm {
  const rill_allocator_t *a;
  rill_module_t *module;
  vm_device_t *dev;         /* every device of the VM (dev->ndevices of them) */
  char device_name[128];
  uint8_t (*sdev)[ISA_MAX_STREAMS]; /* per function: each stream's device (isa_func_devices) */
  ops_plan_t *plans;        /* one per op-table entry (none for one with symbolic sizes) */
  vm_inst_t *insts;         /* a module with shape variables: instances per binding (shapes.c) */
  pthread_mutex_t inst_mu;
  rill_tensor_t **consts;   /* one per constant, on the device; with several devices whose
                               memory is apart (copy_peer), nconsts per device, device by device */
  uint32_t const_devs;      /* devices the constants were uploaded to: 1, or dev->ndevices */
  uint32_t shard_parts;     /* the module's shard constants are parts of this many (0: none); uploaded at attach */
  const char *split_option; /* the option that split it: "--tensor-parallel" or "--pipeline-parallel" */
  bool shards_missing;
  bool device_form;         /* the module's functions use as many devices as its shards have parts: device d holds part d */
  bool p2p_branch;          /* the module branches (if) and sends or receives: a graph would record another rank's branch */
  bool stage_only;          /* some pipeline stage's weights are not this rank's (not uploaded): no graphs */      /* shard constants not uploaded yet: a run is refused */
  rill_tensor_t **states;   /* one per module state, on its device (state_dev), kept across runs */
  uint8_t *state_dev;       /* per module state: the device it lives on (isa_state_devices) */
  ops_chan_t chan;          /* the token channel where the module emits (chan.hdr NULL otherwise) */
  bool chan_mapped;         /* chan's memory is the device's mapped_alloc (else calloc) */
  atomic_bool gen_active;   /* a generation session is running (gen.c) */
  atomic_uint_fast64_t n_runs, n_host_waits, n_graph_launches; /* rill_vm_run_counts */
  atomic_uint_fast64_t replay_host_ns; /* the host's time issuing replays (vm_run_replay), summed */
  atomic_size_t mem[VM_MEM_KINDS]; /* storages' bytes held now, per kind (rill_vm_memory_info) */
  atomic_size_t mem_all, mem_all_peak, mem_buffers_peak;
  double create_ms;
  uint64_t max_backedges;   /* loop iterations a run may take */
  uint32_t max_depth;       /* call depth a run may reach */
  vm_op_stats_t *stats;     /* per op-table entry while profiling, else NULL */
  pthread_mutex_t prof_mu;  /* launches timed by device marks, not yet read */
  RILL_VEC(struct vm_prof_pending) prof;
  pthread_mutex_t ev_mu;    /* events returned by frames, for reuse (a wait captures its record, so reuse is safe) */
  RILL_VEC(vm_event_t *) ev_pool;
  pthread_mutex_t lat_mu;   /* wake latencies while profiling: callback on a device thread -> loop */
  double *lat;              /* ring of the last RILL_LAT_RING samples, in seconds */
  uint64_t nlat;
  bool check_streams;       /* runs record their accesses and fail on an unordered pair */
  vm_trace_t *trace;        /* created when tracing is first turned on */
  bool tracing;             /* runs started now record into it */
  pthread_mutex_t graph_mu; /* graph mode: captures and the instances' state */
  vm_gfunc_t *graphs;       /* per function, or NULL until graph mode is first set */
  int graph_mode;           /* rill_graph_mode_t for functions without their own */
  int graph_sizes;          /* sizes a function keeps graphs for (graph_mu) */
  vm_buckets_t *buckets;    /* per shape variable: graph mode's bucket sizes (graph_mu), or NULL */
  vm_coll_state_t *coll;    /* collectives: the transport, communicators, settings (coll.c), or NULL */
};

void vm_obj_release(vm_obj_t *o);
/* A stream for state i's copies: `stream` (device 0's) where the state is
 * device 0's, else one of its device acquired into *held (the caller
 * releases it; -1 when none; a held one is released first). */
rill_status_t vm_state_stream(rill_vm_t *vm, int stream, uint32_t i, int *held, int *out);

static inline vm_obj_t *vm_obj_retain(vm_obj_t *o) {
  if (o) atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
  return o;
}
static inline void *vm_tensor_data(const rill_tensor_t *t) {
  return (uint8_t *)t->storage->ptr + t->offset;
}
/* A storage of `size` bytes on the device, ordered on `stream`, counted as `kind`. */
rill_status_t vm_storage_new(rill_vm_t *vm, int stream, size_t size, vm_mem_kind_t kind, vm_storage_t **out);
rill_status_t vm_tensor_new(rill_vm_t *vm, const rill_type_t *type, vm_storage_t *storage,
                            size_t offset, rill_tensor_t **out);

void vm_record_wake_latency(rill_vm_t *vm, double seconds);
/* Every state back to its first contents (zeros, or its init constant's),
 * on `stream`, waited for. */
rill_status_t vm_states_init(rill_vm_t *vm, int stream);
/* Whether function fi's code, or a function it calls, loads a state. */
bool vm_func_uses_states(const isa_module_t *m, uint32_t fi);
/* Profiling: a launch of op-table entry `op` between marks m0 and m1 (taken
 * over, even on failure); read into the stats once the device is idle. */
rill_status_t vm_prof_add(rill_vm_t *vm, uint32_t op, vm_mark_t *m0, vm_mark_t *m1);

/* --check-streams (streamcheck.c): one per run. `stream` is the device's
 * stream; an access is to `bytes` bytes of `storage` from `offset`;
 * `shown` (its number in the program), `what` (the buffer) and func/pc/op
 * (the instruction) are for the report. */
typedef struct vm_streamcheck vm_streamcheck_t;
rill_status_t vm_sc_create(const rill_allocator_t *a, vm_streamcheck_t **out);
void vm_sc_free(vm_streamcheck_t *s);
rill_status_t vm_sc_access(vm_streamcheck_t *s, int stream, int shown, const void *storage, size_t offset, size_t bytes,
                           bool write, const char *what, const char *func, uint32_t pc, const char *op);
void vm_sc_fresh(vm_streamcheck_t *s, const void *storage);
rill_status_t vm_sc_record(vm_streamcheck_t *s, const void *event, int stream);
rill_status_t vm_sc_wait(vm_streamcheck_t *s, const void *event, int stream);
rill_status_t vm_sc_host_wait(vm_streamcheck_t *s, int stream);

/* Tracing (trace.c). */
rill_status_t vm_trace_create(const rill_allocator_t *a, vm_trace_t **out);
void vm_trace_free(rill_vm_t *vm, vm_trace_t *t);
uint32_t vm_trace_run(vm_trace_t *t);
rill_status_t vm_trace_op(rill_vm_t *vm, uint32_t run, int dev, int shown, const char *func, uint32_t pc, const char *op,
                          double h0, double h1, vm_mark_t *m0, vm_mark_t *m1);
rill_status_t vm_trace_event(rill_vm_t *vm, uint32_t run, bool record, int dev, int shown, const void *event);
rill_status_t vm_trace_write(rill_vm_t *vm, const char *path);
rill_status_t vm_trace_summary(rill_vm_t *vm, rill_trace_summary_t *out);

/* coll.c: an invoke of a collective (ops_collective) on `stream` of device
 * `dev`, the operands' references taken over (keep); *group gathers the
 * parts of a collective over the VM's devices (the run's, freed with
 * vm_coll_group_free). */
rill_status_t vm_coll_invoke(rill_vm_t *vm, vm_coll_group_t **group, int stream, int dev, const ops_plan_t *plan, void *const *in,
                             void *const *out, vm_obj_t *const *keep, uint32_t nkeep);
bool vm_coll_pending(const vm_coll_group_t *g);
void vm_coll_group_free(rill_vm_t *vm, vm_coll_group_t *g);
void vm_coll_free(rill_vm_t *vm);
/* A run failed on a VM of a job of several ranks: the job is aborted (the
 * others' collectives end with a status at once, not at the timeout; this
 * rank's, waiting for the others, end too). */
void vm_coll_failed(rill_vm_t *vm, const char *why);
/* Settings: the timeout of a rank communicator's set-up and collectives
 * (seconds; default 300, RILL_COLLECTIVE_TIMEOUT) and the largest
 * all-reduce (bytes per GPU) run one-shot over peer memory (default 256 KiB,
 * RILL_ALLREDUCE_ONESHOT_MAX; 0: never). A value < 0 (<= 0 for the timeout)
 * keeps the setting. Before the first collective. */
rill_status_t vm_coll_settings(rill_vm_t *vm, double timeout_s, int64_t oneshot_max);

/* interp.c */
/* wait_here: the caller runs `loop` until the run ends (rill_vm_invoke),
 * so a graph replay is waited for on its stream by the caller's thread,
 * with no host callback and no wake-up through the loop. */
rill_status_t vm_run_start(rill_vm_t *vm, uv_loop_t *loop, const char *function,
                           rill_tensor_t *const *inputs, int ninputs, rill_tensor_t *const *outs, int nouts, bool wait_here,
                           rill_invoke_cb cb, void *user);

/* Graph mode (graph.c): a function's run captured once per input signature
 * (per size, for a module with shape variables) and replayed. An instance
 * is one executable with the memory it reads and writes: its own input
 * tensors (the graph begins by copying the caller's in: a replay only tells
 * the executable where they are when that changed), every storage the
 * captured run allocated (the static memory plan's slots), and its result
 * tensors. Every instance but the last hands those result tensors to the
 * caller without a copy, and stays out of use until the caller lets them go
 * (their reference counts, and their storages', are back to `base`); the
 * last (the fourth, or the last made before one ran out of memory) copies
 * its results out into new tensors, as padded runs do. A replay picks an
 * instance no run has in flight where it can (a replay ended on the host
 * has ended on the device: nothing to wait for); once no further instance
 * will be made, replays that copy out record the instance's `done` event,
 * and a run that must share an instance still in flight waits for it.
 * Several instances let concurrent runs overlap. (An event record node in
 * the graph would save that record, but on an H100 with CUDA 13 the host
 * saw such an event complete before the launch had reached it.) */
#define VM_GRAPH_INSTANCES 4
/* Sizes (bindings of the shape variables) a function keeps graphs for,
 * unless rill_vm_set_graph_sizes says otherwise. */
#define VM_GRAPH_SIZES 8
typedef struct vm_gsize vm_gsize_t;
typedef struct vm_ginst {
  vm_gsize_t *gs;              /* the size it was captured at */
  vm_graph_t *graph;           /* from the capture until instantiated */
  vm_gexec_t *exec;
  rill_tensor_t **params, **results;
  uint32_t nparams, nresults;
  const void **src;            /* per parameter: where its input copy reads (graph_mu) */
  rill_tensor_t **stage;       /* per parameter, for padded runs: the caller's rows, then zeros (or NULL) */
  RILL_VEC(vm_obj_t *) keep;   /* storages the captured run allocated */
  struct {
    int tensor, storage;       /* its references, and its storage's (a caller's view holds the storage) */
  } *base;                     /* per result, while no caller holds it */
  vm_event_t *done;
  bool record_done;            /* this replay records `done` (the size is full; graph_mu) */
  bool done_valid;             /* `done` was recorded by the instance's last replay (graph_mu) */
  int last_stream;             /* of the last replay (its work orders the next one on that stream) */
  int inflight;                /* replays not yet ended (graph_mu) */
} vm_ginst_t;

/* A function's graphs at one size: the instances captured with one set of
 * op plans (the VM's, or an instance's per binding of the shape variables,
 * whose plans pointer is the key). A size dropped as least recently used
 * while a replay of it is in flight goes once its last replay ends. */
struct vm_gsize {
  vm_gsize_t *next;            /* in the function's list, most recently used first */
  const ops_plan_t *key;
  uint32_t fi;                 /* the function */
  const isa_module_t *m;       /* the module as run at this size, and its plans */
  const ops_plan_t *plans;
  vm_ginst_t *inst[VM_GRAPH_INSTANCES];
  int ninst;
  bool full;                   /* no further instance will be made (VM_GRAPH_INSTANCES, or one ran out of memory) */
  uint32_t next_inst;
  int inflight;                /* replays of its instances not yet ended */
  bool dropped;
};

struct vm_gfunc {
  int mode;                    /* rill_graph_mode_t, or -1: the VM's */
  bool failed;                 /* could not be captured: `reason` says why */
  char reason[256];
  vm_gsize_t *sizes;           /* most recently used first */
  vm_gsize_t *dying;           /* dropped with replays in flight */
  int nsizes;
  int inflight;                /* replays of any size not yet ended */
  size_t nodes;
  double capture_ms, instantiate_ms;
  uint64_t replays, captures, sizes_dropped;
  int8_t *rows;                /* per shape variable: 1 its rows stay apart (padding allowed), 2 no parameter has them, -1 not, 0 not yet checked (pad.c) */
  char pad_why[160];           /* why a variable could not be padded */
  uint64_t padded;             /* runs padded to a bucket */
  uint64_t copied_out;         /* replays that copied their results out */
};

/* The graph mode function gf runs in (its own, else the VM's). */
static inline int vm_graph_mode(const rill_vm_t *vm, const vm_gfunc_t *gf) { return gf->mode >= 0 ? gf->mode : vm->graph_mode; }

/* Whether function fi of module m keeps shape variable v's rows apart
 * (pad.c): ROWS_OK, ROWS_UNUSED where no parameter has them (nothing to
 * pad), or ROWS_NOT with the reason in `why`. m must be verified. */
enum { ROWS_NOT = -1, ROWS_OK = 1, ROWS_UNUSED = 2 };
int vm_rows_check(const isa_module_t *m, uint32_t fi, uint32_t v, char *why, size_t nwhy);
/* Buckets (pad.c): raises each variable of vals (a binding for function fi)
 * that has buckets to its smallest bucket at or above it, where fi runs in
 * graph mode and keeps that variable's rows apart; true when any moved. */
bool vm_graph_pad(rill_vm_t *vm, uint32_t fi, int64_t *vals);
/* The inputs at f's (padded) parameter types: copies, zeros after the rows given; *out has f->nparams tensors. */
rill_status_t vm_pad_inputs(rill_vm_t *vm, const isa_func_t *f, rill_tensor_t *const *inputs, rill_tensor_t ***out);
void vm_pad_release(rill_vm_t *vm, rill_tensor_t **t, uint32_t n);
/* Fills n tensors t with zeros, then, with src, each with src's bytes
 * (a prefix: src[i] is no larger than t[i]); one stream, waited for. An
 * instance's stage is zeroed so that rows past a run's are never stale. */
rill_status_t vm_pad_fill(rill_vm_t *vm, rill_tensor_t *const *t, rill_tensor_t *const *src, uint32_t n);
void vm_buckets_free(rill_vm_t *vm);

/* The instance a run of function fi replays, or *out NULL to interpret it
 * (graph mode off, auto and the function cannot be captured, or every
 * instance's results held by callers). m and plans: the module and plans
 * the run would interpret (the VM's, or its instance's for the bound sizes).
 * Captures on first use of a size (after a warm-up run with `inputs`); in mode on, a function that cannot be captured
 * is an error. *out_zero_copy: the replay hands out the instance's own
 * result tensors (never for a padded run, whose results are cut). padded: m and plans are a bucket's, larger than the inputs
 * (the warm-up runs on padded copies of them). With *out set, graph_mu is
 * held: vm_run_replay, which must follow, lets it go once it has issued. */
rill_status_t vm_graph_pick(rill_vm_t *vm, uint32_t fi, const isa_module_t *m, const ops_plan_t *plans, rill_tensor_t *const *inputs,
                            bool padded, vm_ginst_t **out, bool *out_zero_copy);
void vm_graph_ended(rill_vm_t *vm, vm_ginst_t *gi);
void vm_graph_free(rill_vm_t *vm);
/* interp.c: the runs graph mode needs, each to completion on a private loop. */
rill_status_t vm_run_sync(rill_vm_t *vm, uint32_t fi, const isa_module_t *m, const ops_plan_t *plans, rill_tensor_t *const *inputs,
                          vm_ginst_t *capture);
/* exact: a padded run's result types (their first rows are copied out), or
 * NULL; outs: the caller's tensors the results are copied into, or NULL. Called with graph_mu held (vm_graph_pick); returns with it free. */
rill_status_t vm_run_replay(rill_vm_t *vm, uv_loop_t *loop, uint32_t fi, vm_ginst_t *gi, bool zero_copy,
                            rill_tensor_t *const *inputs, const rill_type_t *exact, rill_tensor_t *const *outs, bool wait_here,
                            rill_invoke_cb cb, void *user);

#endif
