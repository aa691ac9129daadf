/* rill.h: the public interface of Rill, a bytecode virtual machine for
 * deep-learning tensor programs.
 *
 * Everything an embedder needs: statuses (errors are values), allocators
 * (every create call takes one, so tests can inject failures), the
 * assembler (.vmasm text to .vmbc bytes), modules (loaded and verified
 * bytecode), VMs (a module bound to a device), tensors, and invocation,
 * synchronous or on a libuv loop. All handles are opaque and reference
 * counted or create/destroy paired; outputs are `out_` parameters.
 */
#ifndef RILL_H
#define RILL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_VERSION_MAJOR 0
#define RILL_VERSION_MINOR 1
#define RILL_VERSION_PATCH 0
#define RILL_VERSION_STRING "0.1.0"
/* Bytecode format: a reader accepts the same major and any minor up to its own. */
#define RILL_BYTECODE_MAJOR 1
#define RILL_BYTECODE_MINOR 12

/* ---- Status ------------------------------------------------------------ */
typedef enum rill_code {
  RILL_OK = 0,
  RILL_INVALID_ARGUMENT,  /* bad option, bad input value, wrong type */
  RILL_NOT_FOUND,         /* missing file, function, op */
  RILL_IO_ERROR,          /* reading or writing a file failed */
  RILL_MALFORMED,         /* a file (.vmbc, .npy, safetensors) is not well formed */
  RILL_ASSEMBLY_ERROR,    /* .vmasm source rejected */
  RILL_VERIFY_ERROR,      /* bytecode rejected by the verifier */
  RILL_OUT_OF_MEMORY,
  RILL_UNAVAILABLE,       /* device or library not usable here */
  RILL_RUNTIME_ERROR,     /* an op or device failed while running */
  RILL_UNIMPLEMENTED,
  RILL_INTERNAL,
} rill_code_t;

/* NULL means success; anything else must be passed to rill_status_free. */
typedef struct rill_status *rill_status_t;

rill_code_t rill_status_code(rill_status_t status);
/* The whole message, including its position prefix when it has one. */
const char *rill_status_message(rill_status_t status);
const char *rill_code_name(rill_code_t code);
void rill_status_free(rill_status_t status);
/* A new status with a printf-style message, for code built on this API
 * (importers, tools) that reports errors the same way. */
rill_status_t rill_status_new(rill_code_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes `len` bytes of s into buf (NUL-terminated, `size` bytes with the
 * NUL) as text safe to print: control characters (C0, DEL and C1) and bytes
 * that are not valid UTF-8 become \xNN, valid UTF-8 passes through (so
 * escaping twice changes nothing more). What does not fit is cut at a
 * character and ends with "...". Names and strings read from files (models,
 * .vmasm sources, .npy headers, safetensors keys) pass through it before
 * any message holds them. Returns buf. */
char *rill_escape(const void *s, size_t len, char *buf, size_t size);

/* ---- Allocator ----------------------------------------------------------- */
/* alloc returns NULL on failure; realloc(NULL, n) allocates; free(NULL) is a no-op.
 * Implementations must be thread-safe: device worker threads free memory. */
typedef struct rill_allocator {
  void *self;
  void *(*alloc)(void *self, size_t size);
  void *(*realloc)(void *self, void *ptr, size_t size);
  void (*free)(void *self, void *ptr);
} rill_allocator_t;

/* The C library's malloc, realloc and free. */
const rill_allocator_t *rill_allocator_system(void);

/* ---- Types ---------------------------------------------------------------- */
typedef enum rill_dtype {
  RILL_F16 = 0, RILL_BF16, RILL_F32, RILL_F64,
  RILL_I8, RILL_U8, RILL_I32, RILL_I64, RILL_BOOL,
  /* Appended in bytecode 1.8 (a module using them is written as 1.8);
   * the values above are in older modules and never change. */
  RILL_I16, RILL_U16, RILL_U32, RILL_U64,
  RILL_DTYPE_COUNT
} rill_dtype_t;

#define RILL_MAX_RANK 8

const char *rill_dtype_name(rill_dtype_t dtype);
size_t rill_dtype_size(rill_dtype_t dtype);
/* Returns false when the name is not a dtype of the language. */
bool rill_dtype_from_name(const char *name, size_t len, rill_dtype_t *out_dtype);

/* ---- Assembler ------------------------------------------------------------ */
/* How f32 arithmetic is carried out (`--precision`), chosen at assembly and
 * recorded in the module. EXACT computes each dtype as written. TF32 lets
 * f32 convolutions and matmuls round their operands to TF32 (10-bit
 * mantissa) on tensor cores; the cpu device rounds them the same way. F16
 * and BF16 run an f32 program in half precision: weights rounded at
 * assembly, activations in half, while accumulation, softmax, norms,
 * reductions, exp, log and pow stay in f32 and parameters and results keep
 * their declared types. */
typedef enum rill_precision {
  RILL_PRECISION_EXACT = 0, RILL_PRECISION_TF32, RILL_PRECISION_F16, RILL_PRECISION_BF16,
  RILL_PRECISION_COUNT
} rill_precision_t;

/* "exact", "tf32", "f16", "bf16"; NULL for a value out of range. */
const char *rill_precision_name(rill_precision_t precision);
/* Returns false when the name is not a precision mode. */
bool rill_precision_from_name(const char *name, rill_precision_t *out_precision);

typedef struct rill_asm_options {
  const char *schedule;      /* stream schedule policy; NULL for the default */
  int max_streams;           /* 0 for the default */
  bool link_weights;         /* store references to weight files, not their data */
  const char *profile;       /* ios: op timings measured by `rill tune` (JSON), or NULL for the cost model */
  bool no_opt;               /* -O0: no optimising passes (constant and batch-norm folding, fusion) */
  rill_precision_t precision; /* EXACT (0) by default */
  int tensor_parallel;       /* N > 1: split for a job of N ranks (docs/tensor_parallel.md); 0 or 1: not */
  int data_parallel;         /* N > 1: each of a job's N ranks computes its part of the batch, results gathered */
  int pipeline_parallel;     /* N > 1: @main cut into N stages, rank k running stage k (docs/tensor_parallel.md) */
  int micro_batches;         /* with pipeline_parallel: the batch cut into this many micro-batches; 0: N */
  /* With tensor_parallel or data_parallel N > 1: the device form (one VM of
   * N devices, one process: --parallel-form=devices) instead of the rank
   * form (a job of N ranks). */
  bool parallel_devices;
  /* Called with each note the assembler has (a FILE:LINE:COL: note: line;
   * --tensor-parallel says per block what it split), or NULL. */
  void (*note)(void *user, const char *line);
  void *note_user;
  /* Where set, the module is written to this file (atomically: a temporary
   * file beside it renamed over it), each constant's bytes from where they
   * lie (a weights file is mapped, not read), and rill_assemble sets
   * *out_bytes to NULL and *out_size to the file's size: no buffer holds the
   * whole module. NULL: the module's bytes in *out_bytes. */
  const char *output_file;
  /* A weights file given in memory: a `weights "PATH" as w` whose PATH (as
   * written) equals weights_path reads the safetensors file these pieces
   * make joined in order (piece 0: the 8-byte header length and the
   * header; each tensor's bytes within one piece), where they lie, instead
   * of a file. They must outlive rill_assemble; such weights cannot be
   * linked. What `rill asm MODEL.onnx` gives the assembler: the importer's
   * header and the tensors in the model file's mapping, never written to a
   * scratch file. NULL: every weights file is read from its path. */
  const char *weights_path;
  const void *const *weights_pieces;
  const size_t *weights_lens;
  size_t weights_npieces;
  /* Where set (and output_file is not), the module is made in memory as
   * *output_image, for rill_module_load_image, and *out_bytes is NULL: no
   * module bytes hold the constants, none is written or checksummed; they
   * stay where the assembler has them (a weights file's mapping, the
   * pieces above, what it folded), which the image keeps (the pieces: see
   * rill_module_image_keep). What `rill run MODEL.onnx` does. */
  struct rill_module_image **output_image;
} rill_asm_options_t;

/* Assembles .vmasm source into module bytes. `path` names the source in
 * diagnostics and anchors relative weight paths. On success *out_bytes is
 * allocated with `allocator` and must be freed with it. */
rill_status_t rill_assemble(const rill_allocator_t *allocator, const char *path,
                            const char *source, size_t source_len,
                            const rill_asm_options_t *options,
                            uint8_t **out_bytes, size_t *out_size);
/* Reads and assembles a file. */
rill_status_t rill_assemble_file(const rill_allocator_t *allocator, const char *path,
                                 const rill_asm_options_t *options,
                                 uint8_t **out_bytes, size_t *out_size);

/* ---- Modules -------------------------------------------------------------- */
typedef struct rill_module rill_module_t;

/* Parses and verifies module bytes (copied). `base_dir` resolves linked
 * weight files; NULL means the current directory. */
rill_status_t rill_module_load(const rill_allocator_t *allocator, const uint8_t *bytes,
                               size_t size, const char *base_dir, rill_module_t **out_module);
rill_status_t rill_module_load_file(const rill_allocator_t *allocator, const char *path,
                                    rill_module_t **out_module);
/* A module assembled in memory (rill_asm_options_t.output_image): loaded
 * with no copy of its constants and no checksum (they never left the
 * process). The load takes the image, on failure too. */
typedef struct rill_module_image rill_module_image_t;
rill_status_t rill_module_load_image(const rill_allocator_t *allocator, rill_module_image_t *image, rill_module_t **out_module);
/* release(ctx) is called when the image, or the module loaded from it,
 * goes: for what the constants point into that the caller owns (the
 * weights pieces given to rill_assemble). At most 8 a image. */
rill_status_t rill_module_image_keep(rill_module_image_t *image, void (*release)(void *ctx), void *ctx);
void rill_module_image_free(rill_module_image_t *image);
void rill_module_retain(rill_module_t *module);
void rill_module_release(rill_module_t *module);
/* The precision mode the module was assembled with. */
rill_precision_t rill_module_precision(const rill_module_t *module);
/* The module as lowered .vmasm text (NUL-terminated, freed with the allocator). */
rill_status_t rill_module_disassemble(const rill_module_t *module, char **out_text,
                                      size_t *out_len);

typedef struct rill_type {
  rill_dtype_t dtype;
  int rank;
  int64_t dims[RILL_MAX_RANK];
} rill_type_t;

/* Signature of a function by name; false when there is none. A dimension
 * that is a shape variable (or an expression of them) reads as -1: its size
 * is bound by the arguments at call time. */
bool rill_module_function(const rill_module_t *module, const char *name, int *out_nparams,
                          int *out_nresults);
bool rill_module_param_type(const rill_module_t *module, const char *function, int index,
                            rill_type_t *out_type, const char **out_name);
bool rill_module_result_type(const rill_module_t *module, const char *function, int index,
                             rill_type_t *out_type);
/* A parameter's type with its shape variables bound to vals (one value per
 * variable, in rill_module_shape_var's order; NULL for a module without
 * them); false when there is no such parameter or a size is negative or
 * overflows at those values. */
bool rill_module_param_type_at(const rill_module_t *module, const char *function, int index, const int64_t *vals,
                               rill_type_t *out_type);

/* ---- Devices and VMs ------------------------------------------------------ */
typedef struct rill_vm rill_vm_t;
typedef struct rill_tensor rill_tensor_t;

/* device: "cpu", "cuda" or "cuda:N". */
rill_status_t rill_vm_create(const rill_allocator_t *allocator, rill_module_t *module,
                             const char *device, rill_vm_t **out_vm);
void rill_vm_destroy(rill_vm_t *vm);
/* Whether a device could be created here; on false, *out_why says why (static text). */
bool rill_device_usable(const char *device, const char **out_why);
/* Begins making `device` ready in the background, so that a later
 * rill_vm_create on it starts sooner: call it first, then do host-only
 * work (load or assemble the module) while it runs. For cuda devices
 * ("cuda", "cuda:N", "cuda:0,cuda:1"), one thread per GPU loads the CUDA
 * libraries (the driver and cuInit, NVRTC, cuBLASLt, cuDNN: once per
 * process) and retains the GPU's primary context; rill_vm_create (and
 * rill_device_usable, for the libraries) waits for it and takes the
 * context over. For cpu devices, and NULL (cpu, as for rill_vm_create),
 * it does nothing. Idempotent: a GPU already started (and not yet taken
 * over by a VM) is not started again. Thread-safe. It returns false, with
 * *out_why (static text), only when `device` names no device (what
 * rill_device_usable would say); whether a well-formed device is usable
 * is learned later from rill_device_usable or rill_vm_create, never from
 * this call. A start that no VM takes over is joined and its context
 * released at exit (atexit), so a program may start a device and never
 * use it. Only the process that called it has the start: a child of
 * fork starts nothing of its own after the parent has. Timings: the
 * threads' parts under "background" (see "Start-up timings"). */
bool rill_device_start(const char *device, const char **out_why);

/* Threads. A module is read-only once loaded: any number of VMs and
 * threads may share it. On one VM, these calls may run at the same time
 * from any threads: rill_vm_invoke, rill_vm_invoke_async (each loop driven
 * by one thread at a time, as libuv requires), rill_tensor_create,
 * rill_tensor_read, rill_tensor_release, rill_results_free and the
 * module queries; runs may share input tensors and results. A threaded
 * server calls rill_vm_invoke from its threads on one VM. The calls that
 * change how a VM runs (rill_vm_set_*) and those that read its figures
 * (rill_vm_graph_info, rill_vm_op_stats, rill_vm_memory_info, traces) are
 * made while no run is in flight; rill_vm_destroy after the last run ended
 * and every tensor of the VM was released. tests/test_threads.c holds this
 * under ThreadSanitizer. */

/* Runs `function` to completion. inputs bind to parameters in order; on
 * success *out_results holds *out_nresults new references (the array is
 * freed with the VM's allocator, each tensor with rill_tensor_release). */
rill_status_t rill_vm_invoke(rill_vm_t *vm, const char *function, rill_tensor_t *const *inputs,
                             int ninputs, rill_tensor_t ***out_results, int *out_nresults);
/* (It waits on a libuv loop of the calling thread's own, made at its first
 * call and closed when the thread ends, so a synchronous call costs what an
 * asynchronous one on a loop the caller keeps does.) */

/* Asynchronous invocation on a libuv loop (uv_loop_t *loop). The callback
 * runs on the loop thread once the run ends; it owns status and results
 * (release each tensor and free the array with rill_results_free). */
typedef void (*rill_invoke_cb)(void *user, rill_status_t status, rill_tensor_t **results,
                               int nresults);
rill_status_t rill_vm_invoke_async(rill_vm_t *vm, void *loop, const char *function,
                                   rill_tensor_t *const *inputs, int ninputs,
                                   rill_invoke_cb callback, void *user);
void rill_results_free(rill_vm_t *vm, rill_tensor_t **results, int nresults);
/* As rill_vm_invoke_async, with each result copied into outputs[i] (one a
 * result, each of the result's type at the run's sizes: for a run padded
 * to a graph bucket, its own sizes), on the run's stream before its end:
 * the callback's results are new references to outputs, already written.
 * Over host memory from rill_vm_host_alloc, a run's results reach the host
 * in the run's own copy, with no read after the callback (what rill serve
 * does for a batch). A result of the wrong type is RILL_INVALID_ARGUMENT,
 * given to the callback where it is known only as the run goes. The
 * outputs must not be read or written until the callback (the run holds
 * references to them; the array is the caller's). */
rill_status_t rill_vm_invoke_async_into(rill_vm_t *vm, void *loop, const char *function, rill_tensor_t *const *inputs,
                                        int ninputs, rill_tensor_t *const *outputs, int noutputs, rill_invoke_cb callback,
                                        void *user);

/* Graph mode: a function's run is captured once (after a warm-up run) and
 * replayed: the device then launches the whole run, every stream of its
 * schedule included, as one graph (a CUDA graph on cuda; a recorded task
 * graph on cpu), so the host's cost per op disappears. Inputs are copied
 * into the graph's own buffers on the run's stream and results copied out
 * into new tensors the caller owns, so results are the same as interpreted
 * runs'. Up to four instances per function (and size) let concurrent runs
 * overlap.
 * An if or a while becomes a conditional node (its condition set on the
 * device), so no run of a graph waits on the host. RILL_GRAPH_AUTO
 * interprets a function that cannot be captured (a branch that is neither,
 * in hand-written lowered code) and says why in rill_vm_graph_info;
 * RILL_GRAPH_ON makes that an error of the invocation.
 * `function` NULL sets the VM's mode (functions without one of their own);
 * the default is RILL_GRAPH_OFF. Applies to runs started from now on. */
typedef enum rill_graph_mode { RILL_GRAPH_OFF = 0, RILL_GRAPH_AUTO, RILL_GRAPH_ON } rill_graph_mode_t;
rill_status_t rill_vm_set_graph_mode(rill_vm_t *vm, const char *function, rill_graph_mode_t mode);
/* States (a module's `state` declarations: a KV cache) are the VM's own,
 * made when it is created and kept across runs. This puts every one back to
 * its first contents (zeros, or its initial value), with no run in flight. */
rill_status_t rill_vm_reset_states(rill_vm_t *vm);
/* What runs have cost the host so far: runs started (rill_vm_invoke and
 * friends), host round trips (host waits: an `if` or `while` condition read
 * on the host, one per loop iteration when interpreted; none in a replayed
 * graph, whose conditions are the device's), graph launches (one per
 * replay: a whole `generate` in graph mode is one) and the host's time
 * issuing those replays (inputs bound, the launch, the results' copies
 * issued; not the wait for the device), in ns. */
typedef struct rill_run_counts {
  uint64_t runs, host_waits, graph_launches;
  uint64_t replay_host_ns;
} rill_run_counts_t;
void rill_vm_run_counts(rill_vm_t *vm, rill_run_counts_t *out);

/* ---- Generation ----------------------------------------------------------- */
/* A session runs a function that emits tokens (`%go = emit(%tokens)` in its
 * decode loop) on a thread of its own, as rill_vm_invoke would (graph mode
 * included: a whole `generate` can be one launch), while the caller takes
 * each record as the device publishes it: the values one emit wrote (a
 * token per sequence of the batch), `step` counting records from 0. The
 * records travel through the VM's token channel, a ring of 4096 records in
 * host memory the device writes (pinned and mapped on cuda), so they reach
 * the host with no host wait in the loop; a reader that falls 4096 records
 * behind gets an error, not wrong tokens. Cancel makes the program's next
 * emit return false, which its loop condition reads, in a graph too; the
 * run then ends as the program does. One session at a time per VM, and no
 * other run that uses its states while it runs. */
typedef struct rill_gen rill_gen_t;
typedef void (*rill_gen_record_cb)(void *user, uint64_t step, const int64_t *values, int n);
rill_status_t rill_gen_start(rill_vm_t *vm, const char *function, rill_tensor_t *const *inputs, int ninputs, rill_gen_t **out);
/* Calls cb (on this thread) for each record published since the last
 * call, without waiting; *out_done: the run has ended and every record was
 * taken. */
rill_status_t rill_gen_poll(rill_gen_t *g, rill_gen_record_cb cb, void *user, bool *out_done);
/* Calls cb for each record as it comes until the run ends, then gives the
 * run's status and (out_results non-NULL) its results, which the caller
 * frees with rill_results_free. */
rill_status_t rill_gen_wait(rill_gen_t *g, rill_gen_record_cb cb, void *user, rill_tensor_t ***out_results, int *out_nresults);
/* Asks the program to stop: its next emit returns false. Any thread. */
void rill_gen_cancel(rill_gen_t *g);
/* What the session cost so far: records taken, host round trips (host
 * waits) and graph launches of the VM since it began, runs started, and
 * the time from the start to the first record taken (-1: none yet). */
typedef struct rill_gen_info {
  uint64_t records, host_waits, graph_launches, runs;
  double first_record_ms;
  bool finished;
} rill_gen_info_t;
void rill_gen_info(rill_gen_t *g, rill_gen_info_t *out);
/* Cancels a session still running, waits for its run to end, and frees it. */
void rill_gen_destroy(rill_gen_t *g);
typedef struct rill_graph_info {
  rill_graph_mode_t mode;
  int instances;             /* captured and instantiated, of the sizes kept */
  size_t nodes;              /* in the graph (device nodes: kernels, copies, event edges) */
  double capture_ms, instantiate_ms; /* of the last instance made */
  uint64_t replays;          /* runs that replayed an instance */
  char reason[256];          /* why the function could not be captured, or "" */
  int sizes;                 /* sizes (bindings of the shape variables) with graphs kept; 1 without shape variables */
  uint64_t captures;         /* instances captured so far, dropped ones included */
  uint64_t sizes_dropped;    /* sizes whose graphs were dropped as least recently used */
  uint64_t padded;           /* runs padded to a bucket (rill_vm_set_graph_buckets) */
  char pad_reason[160];      /* why a variable with buckets could not be padded, or "" */
  uint64_t copied_out;       /* replays whose results were copied out of the graph (the last instance's, padded runs') */
} rill_graph_info_t;
/* False when there is no such function. */
bool rill_vm_graph_info(rill_vm_t *vm, const char *function, rill_graph_info_t *out);
/* A module with shape variables gets graphs per size: each binding of the
 * variables is captured on its first run in graph mode and replayed at that
 * size after. A function keeps graphs for at most `max_sizes` sizes
 * (default 8): a run at a new size beyond that drops the least recently
 * used size's graphs and the device memory they own (once no replay of them
 * is in flight), and a later run at that size captures it again. Lowering
 * the bound drops sizes at once. */
rill_status_t rill_vm_set_graph_sizes(rill_vm_t *vm, int max_sizes);
/* Buckets: a run in graph mode whose size for shape variable `dim` is below
 * one of `sizes` (ascending, inside dim's range) runs as the graph of the
 * smallest such size, its inputs padded and its results cut to the run's
 * own sizes, so that one graph serves every size up to it. A function is
 * padded only where each result row depends on the same row of the inputs
 * alone (no reduction, softmax, product or window over that dimension;
 * each parameter and result holding its rows as one run of bytes, the
 * dimensions before it 1), checked over its code on first use; else it runs
 * each size exactly, and rill_vm_graph_info's pad_reason says why. Results
 * equal the exact size's within the kernels' rounding (a bucket's size may
 * choose other kernels; on cpu, bit for bit). nsizes 0 clears dim's
 * buckets. Sizes at or above the largest bucket run exactly. */
rill_status_t rill_vm_set_graph_buckets(rill_vm_t *vm, const char *dim, const int64_t *sizes, int nsizes);

/* Profiling: with it on, each op's calls and device time are counted per
 * op-table entry (an op with one set of types and attributes). */
typedef struct rill_op_stats {
  const char *name;        /* the op, e.g. "conv2d" */
  rill_type_t output;      /* its first result's type (-1 for a size that depends on shape variables) */
  uint64_t calls;
  double seconds;
} rill_op_stats_t;
rill_status_t rill_vm_set_profiling(rill_vm_t *vm, bool on);
/* Debug mode for runs started from now on: every read and write of a buffer
 * is recorded with its stream, and a run fails at the first two accesses
 * (one a write) that no event or host wait orders, naming both
 * instructions. Costs time on the host; results are unchanged. */
void rill_vm_set_check_streams(rill_vm_t *vm, bool on);

/* Tracing: while on, runs record each op's dispatch on the host and its
 * time on its stream (device timestamps), and the events between streams.
 * rill_vm_trace_write waits for the device and writes what was recorded
 * since the last write as Chrome trace JSON (Perfetto, chrome://tracing):
 * track 0 the host's dispatch, one track per stream with a slice per op,
 * and an arrow from the op before each event record to the first op after
 * each wait for it. The file is written whole or not at all. */
rill_status_t rill_vm_set_tracing(rill_vm_t *vm, bool on);
rill_status_t rill_vm_trace_write(rill_vm_t *vm, const char *path);
#define RILL_TRACE_MAX_STREAMS 64
typedef struct rill_trace_summary {
  uint32_t runs;
  uint64_t ops;
  int nstreams;                           /* streams that ran ops */
  int stream[RILL_TRACE_MAX_STREAMS];     /* their numbers in the program */
  double busy[RILL_TRACE_MAX_STREAMS];    /* fraction of the runs' time each ran an op */
  double span_us;                         /* a run's first op start to last op end, mean */
  double critical_us, critical_ops;       /* the critical path of a run (device time, ops), mean */
} rill_trace_summary_t;
/* From what was recorded since the last write (waits for the device). */
rill_status_t rill_vm_trace_summary(rill_vm_t *vm, rill_trace_summary_t *out);
int rill_vm_op_count(const rill_vm_t *vm);
/* While profiling: the time from a host callback on a device thread (the
 * device reached a host wait or the end of a run) to the run resuming on its
 * loop thread. False when nothing was recorded. */
bool rill_vm_wake_latency(rill_vm_t *vm, double *out_median_us, double *out_p99_us, uint64_t *out_count);
/* Waits for the device, then fills *out for op-table entry i; false when out of range. */
bool rill_vm_op_stats(rill_vm_t *vm, int i, rill_op_stats_t *out);

/* Kernels compiled at run time for this VM's device (NVRTC on cuda): how many
 * were compiled, found in the disk cache, found in memory; and choices made by
 * timing (a convolution's algorithm per shape): how many were timed here and
 * how many were found in the disk cache. False on devices that compile
 * nothing (cpu). */
typedef struct rill_kernel_stats {
  long compiled, disk_hits, memory_hits;
  long choices_timed, choices_from_disk;
  /* Time the device spent preparing ops (at rill_vm_create and for each new
   * size), summed over its preparing threads, which work in parallel:
   * compiling kernels or loading them from the cache, and the rest (library
   * plans chosen: cuDNN engines, cuBLASLt algorithms, choices timed). */
  double kernels_ms, plans_ms;
  /* Of plans_ms, choosing cuDNN plans and algorithms (heuristics, timing)
   * and cuBLASLt algorithms (heuristics). Library plans (cuDNN execution
   * plans, cuBLASLt algorithm lists) found by the libraries' heuristics in
   * this process, and restored from the plan cache on disk (beside the
   * kernels), which a warm start takes them all from. */
  double cudnn_ms, cublaslt_ms;
  long plans_built, plans_from_disk;
  /* "" or why the plan cache's file was ignored (damaged, truncated): it is
   * rebuilt; a warning to show the user. */
  char cache_warning[320];
} rill_kernel_stats_t;
bool rill_vm_kernel_stats(rill_vm_t *vm, rill_kernel_stats_t *out);

/* Device memory the VM holds, in bytes (on cpu, host memory for the same
 * things). Tensors wrapped with rill_tensor_wrap are the caller's and not
 * counted. */
typedef struct rill_memory_info {
  size_t weights;      /* the module's constants */
  size_t buffers;      /* runs' buffers (planned intermediates, values of a size known only at run time) and
                          tensors not yet released (results, rill_tensor_create's) */
  size_t buffers_peak; /* the most `buffers` reached: a run's peak, or runs' in flight together */
  size_t graphs;       /* graph instances: their buffers and the memory their graphs own */
  size_t workspaces;   /* library workspaces (cuDNN, cuBLASLt) the device holds */
  size_t total;        /* all of the above, now */
  size_t peak;         /* the most weights, buffers and graphs' buffers took at once, with the workspaces
                          and graph-owned memory held now: the figure to size a device by */
  double create_ms;    /* how long rill_vm_create took (device opened, constants uploaded, ops prepared) */
} rill_memory_info_t;
void rill_vm_memory_info(rill_vm_t *vm, rill_memory_info_t *out);

/* ---- Kernel choices per size ---------------------------------------------- */
/* For a module with shape variables, `rill tune --shapes` measures each
 * op's candidates (the cuDNN engines, cuBLASLt algorithms or kernel variants
 * the device would time; "default" where a device has one way only) at
 * sample sizes and fits a small decision tree per op over the variables
 * (the DietCode seed); `rill asm --profile` embeds the trees and, when a
 * binding makes an instance, each op's tree picks its candidate.
 * A tree is an array of nodes in preorder, node 0 the root: a split sends a
 * binding whose variable `var` is <= `le` to node `yes` (the next node), else
 * to `no`; a leaf names candidate `use`. */
typedef struct rill_tree_node {
  int32_t var;       /* the shape variable's index in the module; -1: a leaf */
  uint32_t use;      /* leaf: the candidate's index */
  int64_t le;        /* split: the threshold */
  uint32_t yes, no;  /* split: the nodes for var <= le and var > le */
} rill_tree_node_t;
#define RILL_TREE_MAX_DEPTH 8   /* splits on a path from the root, at most */
/* The candidate the tree picks for the variables' values `vals`. */
uint32_t rill_tree_eval(const rill_tree_node_t *nodes, const int64_t *vals);
/* Fits a tree to measurements: `samples` holds nsamples bindings of nvars
 * values each, `us` nsamples rows of ncands times (NaN or negative: the
 * candidate is not usable there). A leaf takes the candidate usable at most
 * of its samples, then the one with the least total time, then the lowest
 * index; a node splits (variables in order, then thresholds in ascending
 * order, the first best kept) where the two leaves below make fewer samples
 * unusable or take less than 99% of its time, down to max_depth splits
 * (1..RILL_TREE_MAX_DEPTH). `out` has room for 2^(max_depth+1)-1 nodes. */
rill_status_t rill_tree_fit(const int64_t *samples, uint32_t nsamples, uint32_t nvars, const double *us, uint32_t ncands,
                            int max_depth, rill_tree_node_t *out, uint32_t *out_n);
/* The module's shape variables: how many, and each one's name and range. */
int rill_module_shape_var_count(const rill_module_t *module);
bool rill_module_shape_var(const rill_module_t *module, int index, const char **out_name, int64_t *out_lo, int64_t *out_hi);
/* Op-table entries: how many; entry i as lowered text (what follows
 * `op $i = ` in `rill dis`), with its sizes evaluated at `vals` (one per
 * shape variable) or, with vals NULL, as written; *out_symbolic says
 * whether any size depends on a shape variable. Freed with free(). */
int rill_module_op_count(const rill_module_t *module);
rill_status_t rill_module_op_text(const rill_module_t *module, int op, const int64_t *vals, char **out_text, bool *out_symbolic);
/* The candidates the VM's device has for op-table entry `op` at its sizes,
 * one name a line (freed with free()); "default" where it has one way. */
rill_status_t rill_vm_op_candidates(rill_vm_t *vm, int op, char **out_list);

/* ---- Tensors -------------------------------------------------------------- */
/* A new tensor on the VM's device holding a copy of `data` (numel * dtype size bytes). */
rill_status_t rill_tensor_create(rill_vm_t *vm, const rill_type_t *type, const void *data,
                                 rill_tensor_t **out_tensor);
/* A tensor over memory the caller owns on the VM's device (a CUDA device
 * pointer on cuda, host memory on cpu), without a copy. `release(user)` runs
 * when the last reference goes (it may be NULL), and not at all when the
 * wrap fails. The memory must stay valid
 * until then and must not be written while a run that uses it is in flight. */
rill_status_t rill_tensor_wrap(rill_vm_t *vm, const rill_type_t *type, void *device_ptr,
                               void (*release)(void *user), void *user, rill_tensor_t **out_tensor);
/* Host memory the VM's device reads and writes directly, n bytes, zeroed:
 * pinned and mapped into the device's address space on cuda (the device
 * pointer in *out_dev, the host's in *out_host), ordinary memory on cpu
 * (the two the same). A tensor wrapped over *out_dev (rill_tensor_wrap) is
 * an input a graph's input copy reads straight from the host, with no
 * upload of its own and no wait on the caller's thread, and a run's copy
 * into one lands in host memory: what a server that decodes requests into
 * buffers of its own (rill serve) needs for one asynchronous copy per
 * batch. Ops that read such a tensor in place (interpreted runs) read it
 * over the bus. Freed with rill_vm_host_free (the host pointer), after
 * every run that uses it ended and before the VM is destroyed. */
rill_status_t rill_vm_host_alloc(rill_vm_t *vm, size_t n, void **out_host, void **out_dev);
void rill_vm_host_free(rill_vm_t *vm, void *host);
/* The tensor's data on its device. */
void *rill_tensor_device_pointer(const rill_tensor_t *tensor);
void rill_tensor_retain(rill_tensor_t *tensor);
void rill_tensor_release(rill_tensor_t *tensor);
const rill_type_t *rill_tensor_type(const rill_tensor_t *tensor);
size_t rill_tensor_nbytes(const rill_tensor_t *tensor);
/* Copies the tensor's contents to host memory (size must be the tensor's nbytes). */
rill_status_t rill_tensor_read(rill_tensor_t *tensor, void *dst, size_t size);

size_t rill_type_numel(const rill_type_t *type);
/* Element i of a buffer of `dtype`, widened (bool: 0 or 1), and stored with
 * the language's conversions (f16/bf16 round to nearest even). The _int
 * forms carry u64 as its bits (two's complement: 2^64 - 1 is -1), as the
 * language's integer casts wrap. */
double rill_element_get(rill_dtype_t dtype, const void *data, size_t index);
int64_t rill_element_get_int(rill_dtype_t dtype, const void *data, size_t index);
void rill_element_set(rill_dtype_t dtype, void *data, size_t index, double value);
void rill_element_set_int(rill_dtype_t dtype, void *data, size_t index, int64_t value);
/* Writes e.g. "f32[2,3]" into buf; returns buf. */
char *rill_type_format(const rill_type_t *type, char *buf, size_t size);
/* Runs one op of the core set on host data with its CPU reference kernel,
 * as -O1's constant folding does (for importers computing what is known
 * before a program runs): `attrs` its attributes as a statement writes them
 * inside the braces ("axis=0, keepdims=true"; NULL or "" for none), operand
 * i of type in_types[i] (concrete sizes) at in[i]. The results' types go to
 * out_types and their data to out[i] (calloc'd: free with free()), at most
 * max_out of them; *out_n how many. A bad attribute or operand type is a
 * RILL_ASSEMBLY_ERROR, and a run-time error (an index out of range) the
 * kernel's own status. */
rill_status_t rill_op_eval(const char *op, const char *attrs, const rill_type_t *in_types, const void *const *in, int nin,
                           rill_type_t *out_types, void **out, int max_out, int *out_n);

/* ---- DLPack --------------------------------------------------------------- */
/* Tensors shared with other libraries (PyTorch, CuPy, JAX, your own CUDA
 * code) without a copy, through DLPack's managed tensors (dlpack.h, from
 * libdlpack-dev). Where rill was built without dlpack.h these return
 * RILL_UNAVAILABLE.
 *
 * Import: a tensor over the managed tensor's memory (data + byte_offset).
 * The memory must be the VM's device's: kDLCPU or kDLCUDAHost for cpu;
 * kDLCUDA with the VM's GPU number, or kDLCUDAManaged, for cuda and cuda:N.
 * It must be compact row-major (strides NULL, or those of a contiguous
 * array; a dimension of size 1 may have any stride), of a dtype of the
 * language with one lane (bool: kDLBool, 8 bits). Anything else is
 * RILL_INVALID_ARGUMENT saying why. On success Rill owns `managed`: its
 * deleter runs exactly once, when the tensor's last reference goes (on any
 * thread). On failure nothing is kept and the deleter is not called. The
 * producer's writes to the memory must be complete before a run uses it. */
struct DLManagedTensor;
struct DLManagedTensorVersioned;
rill_status_t rill_tensor_from_dlpack(rill_vm_t *vm, struct DLManagedTensor *managed,
                                      rill_tensor_t **out_tensor);
/* DLPack 1.x's versioned tensor: the same, for major version 1 (read-only
 * tensors are refused, as a result may alias an input); RILL_UNAVAILABLE
 * where rill was built with a dlpack.h older than 1.0. */
rill_status_t rill_tensor_from_dlpack_versioned(rill_vm_t *vm,
                                                struct DLManagedTensorVersioned *managed,
                                                rill_tensor_t **out_tensor);
/* Export: a new managed tensor over the tensor's memory (no copy): the VM's
 * device (kDLCPU, or kDLCUDA and the GPU number), row-major strides, data
 * NULL when empty. It holds a reference to the tensor and owns its shape
 * and strides; its deleter drops the reference and frees it. Call the
 * deleter (or let the consumer call it) before destroying the VM. */
rill_status_t rill_tensor_to_dlpack(rill_tensor_t *tensor, struct DLManagedTensor **out_managed);
rill_status_t rill_tensor_to_dlpack_versioned(rill_tensor_t *tensor,
                                              struct DLManagedTensorVersioned **out_managed);

/* ---- .npy files ------------------------------------------------------------ */
/* Reads a numpy .npy file (any dtype of the language, in either byte order
 * and C or Fortran order, as numpy writes them) into a new host buffer
 * allocated with `allocator`, row-major and little-endian. */
rill_status_t rill_npy_read(const rill_allocator_t *allocator, const char *path,
                            rill_type_t *out_type, void **out_data, size_t *out_size);
rill_status_t rill_npy_parse(const rill_allocator_t *allocator, const uint8_t *bytes,
                             size_t size, rill_type_t *out_type, void **out_data,
                             size_t *out_size);
/* Writes atomically (C order, little-endian): a failure leaves no file behind. */
rill_status_t rill_npy_write(const char *path, const rill_type_t *type, const void *data);

/* ---- Jobs: ranks (SPMD) ----------------------------------------------------- */
/* A job is N processes (ranks 0..N-1) running the same module. They meet at a
 * rendezvous over TCP: rank 0 listens at host:port, the others connect
 * (retrying until the set-up timeout, as rank 0 may start later), and each
 * says its rank, the job's size and its module's hash (rill_module_hash).
 * Rank 0 answers once every rank has arrived: the job forms, or every rank
 * fails (RILL_INVALID_ARGUMENT) with one message naming the ranks and what
 * differed (module, job size, a rank given twice or out of range). A set-up
 * that does not complete within the timeout fails (RILL_UNAVAILABLE) naming
 * the ranks that did not arrive. Afterwards the connections carry the job's
 * collectives (a star through rank 0). A rank that dies (its connection
 * closes without leaving), stops answering (a call not answered within the
 * collective timeout) or aborts makes the other ranks' pending and later
 * calls fail (RILL_RUNTIME_ERROR) naming it, never wait forever. A job of
 * one rank needs no address and no network. */
typedef struct rill_job rill_job_t;
typedef struct rill_job_options {
  int rank, nranks;
  const char *host;             /* rank 0's address: a name or an IP literal (rank 0 listens on it) */
  int port;                     /* 1..65535 */
  uint64_t module_hash;         /* of what this rank runs; ranks must agree */
  double setup_timeout_s;       /* <= 0: 300 */
  double collective_timeout_s;  /* <= 0: 300 */
} rill_job_options_t;
/* Meets the other ranks; blocks until the job forms or fails. */
rill_status_t rill_job_join(const rill_allocator_t *allocator, const rill_job_options_t *options, rill_job_t **out_job);
int rill_job_rank(const rill_job_t *job);
int rill_job_ranks(const rill_job_t *job);
/* Every rank gives n bytes (the same n); out receives nranks * n bytes, rank
 * r's at offset r * n. Blocks until all have arrived or the job fails. One
 * call at a time per job (from any thread); n = 0 is a barrier. */
rill_status_t rill_job_allgather(rill_job_t *job, const void *in, size_t n, void *out);
/* Fails the job from this rank ("rank R aborted the job: why"): this rank's
 * and the others' pending and later calls fail soon. Any thread. */
void rill_job_abort(rill_job_t *job, const char *why);
/* Leaves the job (saying so: the others tell a rank that finished from one
 * that died), closes its connections and frees it. Waits at most a few
 * seconds for what it still has to send. */
void rill_job_destroy(rill_job_t *job);
/* A hash (FNV-1a, 64 bits) of the module's bytes as rill asm writes them:
 * the same module gives the same hash on every machine. */
rill_status_t rill_module_hash(const rill_module_t *module, uint64_t *out_hash);

/* ---- Start-up timings ------------------------------------------------------------ */
/* Where a process's start-up goes (`rill ... --timings`, RILL_TIMINGS=1):
 * with recording on, the library adds the wall time of each part it runs
 * to one table for the process, by name: "import" (its "import/map" of the
 * model file), "assembly" (its passes, "assembly/fold" ..., and with
 * --tensor-parallel "assembly/tensor split"), "module write", "module
 * load", "cuda libraries" (the first use of cuda: the driver's cuInit,
 * NVRTC, cuBLASLt and cuDNN loaded), "wait for the cuda libraries" (a
 * thread that needed them while a background start loaded them), "vm"
 * (its "vm/device" per device: a context, streams and handles, and
 * "vm/device/wait for the start" of rill_device_start; "vm/weights"; and
 * on cuda "vm/kernels", "vm/cudnn plans", "vm/cublaslt heuristics", summed
 * over the preparing threads), "capture". The commands add their own
 * ("job join", "first run", "teardown"). A name with a slash is a part of
 * the part before it; the parts without one do not overlap, but for
 * "threads" (the preparing threads' sums, `rill` adds) and "background": a
 * device's start (rill_device_start), its parts recorded by its threads
 * ("background/cuda libraries", "background/context"), which run beside
 * the caller's own work. Off by default (then each part costs one atomic
 * load). */
typedef struct rill_timing {
  char name[48];
  double ms;                 /* summed over every time the part ran */
  long count;                /* how many times it ran */
} rill_timing_t;
void rill_timings_record(bool on);
bool rill_timings_recording(void);
void rill_timings_reset(void);
/* Adds ms to part `name` (at most 47 bytes; at most 96 parts, later new
 * names are dropped) where recording is on; any thread may. */
void rill_timing_add(const char *name, double ms);
/* Copies up to max parts, in the order each was first recorded; returns how many there are. */
int rill_timings(rill_timing_t *out, int max);

/* ---- Versions ------------------------------------------------------------------ */
const char *rill_version_string(void);

typedef struct rill_cuda_info {
  int driver_version;        /* e.g. 13000 */
  int nvrtc_major, nvrtc_minor;
  size_t cublaslt_version, cudnn_version;
  int device_count;
  char device_name[128];     /* of cuda:0 */
  int compute_capability;    /* of cuda:0, e.g. 90 */
} rill_cuda_info_t;
/* The CUDA libraries found; false (with *out_why) when CUDA is unusable. */
bool rill_cuda_info(rill_cuda_info_t *out, const char **out_why);

#ifdef __cplusplus
}
#endif
#endif /* RILL_H */
