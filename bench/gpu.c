/* gpu.c: GPU benchmarks, measured side by side in one run.
 *
 *  1. Host time per op: the VM dispatching 32 tiny ops (a straight line, two
 *     branches on two streams, fork-join diamonds) against a raw loop of
 *     cuLaunchKernel on the same device, in the same process.
 *  2. Host-wait latency: from the host callback on a device thread to the run
 *     resuming on its loop thread (median, p99), over a while loop.
 *  3. Concurrency: N runs of a small MLP in flight on one loop thread, as
 *     throughput relative to one run at a time, interpreted and in graph mode.
 *  4. Graph mode against a raw graph: the same three programs replayed by the
 *     VM (--graph=on) and as a CUDA graph captured from the raw loop's
 *     launches: host time to issue a run, a whole run (issue to results on
 *     the host), and device time per run (events around the raw launch; the
 *     trace's replay slices for the VM); then the parts of a replay's issue
 *     time on raw graphs: the launch, a graph that begins with a device
 *     copy, the launch and an event record, a copy issued before the launch;
 *     and the device time of raw graphs with a copy at their head (a memcpy
 *     or a kernel node) and of the VM's own kernels, against which
 *     the VM's device time is also given.
 *  5. A synchronous call: rill_vm_invoke of a one-op program in graph mode,
 *     call to return, against a raw graph of the VM's kernel for that op
 *     launched and waited for through an event (spinning, and sleeping on a
 *     blocking-sync event), taking turns.
 *
 *   bench_gpu [ITERATIONS [MLP.vmasm [sync]]]   (default 2000; sync: part 5 alone)
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "kernels/cuda_api.h"
#include "kernels/kcache.h"
#include "kernels/ksrc.h"
#include "ops/cuda_gen.h"
#include "rill.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return v[n / 2];
}

static void die(rill_status_t st) {
  if (!st) return;
  fprintf(stderr, "%s\n", rill_status_message(st));
  exit(1);
}

/* ---- programs of 32 tiny ops ---- */
/* n ops in a line (n <= 128); the returned text lives until the next call. */
static char *straight(int n) {
  static char s[16384];
  size_t o = (size_t)snprintf(s, sizeof s, "func @main(%%x: f32[16]) -> f32[16] {\n  %%v0 = relu(%%x)\n");
  for (int i = 1; i < n; i++) o += (size_t)snprintf(s + o, sizeof s - o, "  %%v%d = %s(%%v%d)\n", i, i % 2 ? "neg" : "relu", i - 1);
  snprintf(s + o, sizeof s - o, "  return %%v%d\n}\n", n - 1);
  return s;
}

static char *branches(void) {
  static char s[8192];
  size_t o = (size_t)snprintf(s, sizeof s, "func @main(%%x: f32[16]) -> f32[16] {\n  set_stream(1)\n  %%a0 = relu(%%x)\n");
  for (int i = 1; i < 16; i++) o += (size_t)snprintf(s + o, sizeof s - o, "  %%a%d = neg(%%a%d)\n", i, i - 1);
  o += (size_t)snprintf(s + o, sizeof s - o, "  add_event(1)\n  set_stream(0)\n  %%b0 = neg(%%x)\n");
  for (int i = 1; i < 15; i++) o += (size_t)snprintf(s + o, sizeof s - o, "  %%b%d = relu(%%b%d)\n", i, i - 1);
  snprintf(s + o, sizeof s - o, "  wait_event(1)\n  %%y = add(%%a15, %%b14)\n  return %%y\n}\n");
  return s;
}

static char *diamonds(void) {
  static char s[16384];
  size_t o = (size_t)snprintf(s, sizeof s, "func @main(%%x: f32[16]) -> f32[16] {\n");
  /* 8 diamonds of 4 ops: top (stream 0), left (stream 1), right (0), join (0) */
  for (int k = 0; k < 8; k++) {
    if (k) o += (size_t)snprintf(s + o, sizeof s - o, "  %%t%d = relu(%%d%d)\n", k, k);
    else o += (size_t)snprintf(s + o, sizeof s - o, "  %%t0 = relu(%%x)\n");
    o += (size_t)snprintf(s + o, sizeof s - o,
                          "  add_event(1)\n  set_stream(1)\n  wait_event(1)\n  %%l%d = neg(%%t%d)\n  add_event(2)\n  set_stream(0)\n"
                          "  %%r%d = relu(%%t%d)\n  wait_event(2)\n  %%d%d = add(%%l%d, %%r%d)\n",
                          k, k, k, k, k + 1, k, k);
  }
  snprintf(s + o, sizeof s - o, "  return %%d8\n}\n");
  return s;
}

/* The three programs of 32 ops, by pattern (as raw_issue numbers them). */
static const char *const PATTERNS[3] = {"straight line", "two streams", "fork-join diamonds"};
static char *program(int p) { return p == 0 ? straight(32) : p == 1 ? branches() : diamonds(); }

/* Runs per round, when `iters` are shared out over `rounds` (at least 20). */
static int per_round(int iters, int rounds) { return iters / rounds > 20 ? iters / rounds : 20; }

static rill_vm_t *vm_of(const char *src, rill_module_t **m) {
  uint8_t *b;
  size_t n;
  /* -O0: one kernel per op, as the raw loop launches them (at -O1 the chains fuse into one). */
  const rill_asm_options_t o0 = {.no_opt = true};
  die(rill_assemble(NULL, "bench.vmasm", src, strlen(src), &o0, &b, &n));
  die(rill_module_load(NULL, b, n, ".", m));
  free(b);
  rill_vm_t *vm;
  die(rill_vm_create(NULL, *m, "cuda", &vm));
  return vm;
}

typedef struct done_flag { int done; } done_flag_t;
static void on_done(void *u, rill_status_t st, rill_tensor_t **r, int n) {
  die(st);
  for (int i = 0; i < n; i++) rill_tensor_release(r[i]);
  free(r);
  ((done_flag_t *)u)->done++;
}

/* The VM side: one VM with a program of 32 tiny ops, run on a loop. */
typedef struct vm_bench {
  rill_module_t *m;
  rill_vm_t *vm;
  rill_tensor_t *in;
  uv_loop_t loop;
} vm_bench_t;

static void vm_bench_init(vm_bench_t *b, const char *src) {
  b->vm = vm_of(src, &b->m);
  rill_type_t t = {RILL_F32, 1, {16}};
  float x[16];
  for (int i = 0; i < 16; i++) x[i] = (float)i - 7.5f;
  die(rill_tensor_create(b->vm, &t, x, &b->in));
  uv_loop_init(&b->loop);
}

/* After a warm-up, the median host time to dispatch one run (everything up
 * to its final callback being queued) per op, and of a whole run. */
static double vm_bench_run(vm_bench_t *b, int iters, int nops, double *whole_out) {
  double *disp = malloc(sizeof(double) * (size_t)iters), *whole = malloc(sizeof(double) * (size_t)iters);
  for (int i = -20; i < iters; i++) {
    done_flag_t f = {0};
    double t0 = now_us();
    die(rill_vm_invoke_async(b->vm, &b->loop, "main", &b->in, 1, on_done, &f));
    double t1 = now_us();
    uv_run(&b->loop, UV_RUN_DEFAULT);
    double t2 = now_us();
    if (i >= 0) {
      disp[i] = t1 - t0;
      whole[i] = t2 - t0;
    }
  }
  double d = median(disp, iters) / nops;
  if (whole_out) *whole_out = median(whole, iters);
  free(disp);
  free(whole);
  return d;
}

static void vm_bench_fini(vm_bench_t *b) {
  uv_loop_close(&b->loop);
  rill_tensor_release(b->in);
  rill_vm_destroy(b->vm);
  rill_module_release(b->m);
}

/* Raw baselines, host time only, per op (32 launches):
 *   [0] one stream; [1] two branches of 16 on two streams joined by one
 *   event; [2] 8 fork-join diamonds, each with two event records and waits:
 *   the same launches and event calls the VM makes for those programs.
 *   Plain, each launch is one 12-byte kernel; with `vm_kernels`, the VM's
 *   own kernels for the program's ops (relu, neg and add written by the
 *   VM's generator from the expressions the VM uses, with its 1288-byte
 *   argument block and its launch shape), so that a raw graph runs what the
 *   VM's graph runs. */
enum { K_RELU, K_NEG, K_ADD };
typedef struct raw_bench {
  const rill_cuda_api_t *api;
  CUcontext ctx;
  CUstream s, s1;
  CUevent e1, e2;
  kcache_t *kc;
  CUfunction fn, copy_fn, vk[3];
  kgen_args_t va[3];
  int num_sms;
  CUdeviceptr buf, buf2;
  int n;
} raw_bench_t;

/* The VM's f32[16] kernel for op k, as its generator writes it (ops/cuda_ops.c: ew_body around elementwise.def's
 * expression), and the argument block but the pointers. */
static void vm_kernel(raw_bench_t *r, int k) {
  static const char *const expr[3] = {"(a != a ? a : a > L(0) ? a : L(0))", "-a", "a + b"};
  char body[512];
  snprintf(body, sizeof body, "  float v0;\n  {\n    typedef float C;\n    const C a = (C)(i0)%s;\n    v0 = (float)(%s);\n  }\n  r0 = v0;\n",
           k == K_ADD ? ", b = (C)(i1)" : "", expr[k]);
  kgen_fused_t e = {.nin = k == K_ADD ? 2 : 1, .nout = 1, .in = {RILL_F32, RILL_F32}, .out = {RILL_F32}, .body = body, .rank = 1,
                    .span = r->n};
  CUfunction scalar;
  int width = 0;
  die(kgen_fused(r->kc, rill_allocator_system(), &e, &scalar, &r->vk[k], &width));
  if (width != 4) die(rill__status(RILL_INTERNAL, "bench: expected the VM's 4-wide kernel, got width %d", width));
  kgen_args_t *a = &r->va[k];
  memset(a, 0, sizeof *a);
  a->n = r->n;
  a->dims[0] = r->n;
  for (uint32_t i = 0; i < e.nin; i++) a->in[i] = r->buf, a->st[i][0] = 1;
  a->out[0] = r->buf;
}

static void raw_init(raw_bench_t *r) {
  const char *why = NULL;
  const rill_cuda_api_t *api = r->api = rill_cuda_api(&why);
  if (!api) {
    fprintf(stderr, "cuda not usable: %s\n", why);
    exit(1);
  }
  CUdevice dev;
  int major, minor;
  die(CU(api, cuDeviceGet, &dev, 0));
  die(CU(api, cuDevicePrimaryCtxRetain, &r->ctx, dev));
  die(CU(api, cuCtxSetCurrent, r->ctx));
  die(CU(api, cuStreamCreate, &r->s, CU_STREAM_NON_BLOCKING));
  die(CU(api, cuStreamCreate, &r->s1, CU_STREAM_NON_BLOCKING));
  die(CU(api, cuEventCreate, &r->e1, CU_EVENT_DISABLE_TIMING));
  die(CU(api, cuEventCreate, &r->e2, CU_EVENT_DISABLE_TIMING));
  api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  api->cuDeviceGetAttribute(&r->num_sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  die(kcache_create(rill_allocator_system(), api, major * 10 + minor, &r->kc));
  die(kcache_get(r->kc, "extern \"C\" __global__ void k(float *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] > 0 ? -x[i] : x[i]; }\n", "k", &r->fn));
  die(kcache_get(r->kc, "extern \"C\" __global__ void kcopy(const float *s, float *d, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) d[i] = s[i]; }\n", "kcopy", &r->copy_fn));
  CUmemoryPool pool;
  die(CU(api, cuDeviceGetDefaultMemPool, &pool, dev));
  die(CU(api, cuMemAllocFromPoolAsync, &r->buf, 64, pool, r->s));
  die(CU(api, cuMemAllocFromPoolAsync, &r->buf2, 64, pool, r->s));
  die(CU(api, cuStreamSynchronize, r->s));
  r->n = 16;
  for (int k = 0; k < 3; k++) vm_kernel(r, k);
}

/* Issues pattern's 32 launches, each op the program's (the VM's kernels, where `vm_kernels`). */
static void raw_issue(raw_bench_t *r, int pattern, bool vm_kernels) {
  const rill_cuda_api_t *api = r->api;
  CUstream s = r->s, s1 = r->s1;
  void *args[] = {&r->buf, &r->n};
  void *vargs[3][1] = {{&r->va[0]}, {&r->va[1]}, {&r->va[2]}};
  /* The VM launches its 4-wide kernel over n / 4 vectors in 256-thread blocks (cuda_launch). */
  unsigned vblocks = cuda_blocks(r->n / 4, r->num_sms);
#define L(st, op) die(vm_kernels ? CU(api, cuLaunchKernel, r->vk[op], vblocks, 1, 1, 256, 1, 1, 0, st, vargs[op], NULL) \
                                 : CU(api, cuLaunchKernel, r->fn, 1, 1, 1, 256, 1, 1, 0, st, args, NULL))
    if (pattern == 0) { /* straight(): relu, then neg and relu by turns */
      for (int k = 0; k < 32; k++) L(s, k % 2 ? K_NEG : K_RELU);
    } else if (pattern == 1) { /* branches() */
      L(s1, K_RELU);
      for (int k = 1; k < 16; k++) L(s1, K_NEG);
      die(CU(api, cuEventRecord, r->e1, s1));
      L(s, K_NEG);
      for (int k = 1; k < 15; k++) L(s, K_RELU);
      die(CU(api, cuStreamWaitEvent, s, r->e1, 0));
      L(s, K_ADD);
    } else { /* diamonds() */
      for (int k = 0; k < 8; k++) {
        L(s, K_RELU);
        die(CU(api, cuEventRecord, r->e1, s));
        die(CU(api, cuStreamWaitEvent, s1, r->e1, 0));
        L(s1, K_NEG);
        die(CU(api, cuEventRecord, r->e2, s1));
        L(s, K_RELU);
        die(CU(api, cuStreamWaitEvent, s, r->e2, 0));
        L(s, K_ADD);
      }
    }
#undef L
}

/* After a warm-up, the median host time per op of pattern's 32 launches. */
static double raw_run(raw_bench_t *r, int pattern, bool vm_kernels, int iters) {
  const rill_cuda_api_t *api = r->api;
  CUstream s = r->s, s1 = r->s1;
  double *t = malloc(sizeof(double) * (size_t)iters);
  for (int i = -20; i < iters; i++) {
    double t0 = now_us();
    raw_issue(r, pattern, vm_kernels);
    double t1 = now_us();
    die(CU(api, cuStreamSynchronize, s));
    die(CU(api, cuStreamSynchronize, s1));
    if (i >= 0) t[i] = t1 - t0;
  }
  double m = median(t, iters) / 32;
  free(t);
  return m;
}

static void raw_fini(raw_bench_t *r) {
  const rill_cuda_api_t *api = r->api;
  api->cuMemFreeAsync(r->buf, r->s);
  api->cuMemFreeAsync(r->buf2, r->s);
  api->cuStreamSynchronize(r->s);
  api->cuEventDestroy(r->e1);
  api->cuEventDestroy(r->e2);
  api->cuStreamDestroy(r->s);
  api->cuStreamDestroy(r->s1);
  kcache_destroy(r->kc);
}

/* The VM's host time per op against the raw loop's: ROUNDS rounds, each
 * timing the raw loop and then the VM for iters / ROUNDS runs, so that the
 * two are compared within a round and a drift of the machine's speed during
 * the benchmark (seen: the raw launch 2.9 us in one run, 4.1 in another)
 * does not count as the VM's. The overhead is the median of the rounds'
 * differences, with their range. */
static void per_op_overhead(raw_bench_t *r, int iters) {
  enum { ROUNDS = 10 };
  int n = per_round(iters, ROUNDS);
  for (int p = 0; p < 3; p++) {
    vm_bench_t b;
    vm_bench_init(&b, program(p));
    double raw[ROUNDS], vm[ROUNDS], diff[ROUNDS], whole = 0;
    for (int k = 0; k < ROUNDS; k++) {
      raw[k] = raw_run(r, p, false, n);
      vm[k] = vm_bench_run(&b, n, 32, &whole);
      diff[k] = vm[k] - raw[k];
    }
    vm_bench_fini(&b);
    double dm = median(diff, ROUNDS), lo = diff[0], hi = diff[ROUNDS - 1]; /* median() sorted diff */
    printf("%-20s raw %5.2f us/op, VM %5.2f us/op: the VM adds %+.2f us/op (median of %d paired rounds, range %+.2f to %+.2f); "
           "whole run %.1f us\n", PATTERNS[p], median(raw, ROUNDS), median(vm, ROUNDS), dm, ROUNDS, lo, hi, whole);
  }
  /* What of that is the run's fixed cost (set-up, stream hand-out, the final
   * callback) and what each op's: straight lines of 8 and 128 ops, paired. */
  vm_bench_t b8, b128;
  vm_bench_init(&b8, straight(8));
  vm_bench_init(&b128, straight(128));
  double slope[ROUNDS], fixed[ROUNDS], raw[ROUNDS];
  for (int k = 0; k < ROUNDS; k++) {
    raw[k] = raw_run(r, 0, false, n);
    double t8 = vm_bench_run(&b8, n, 1, NULL), t128 = vm_bench_run(&b128, n, 1, NULL);
    slope[k] = (t128 - t8) / 120 - raw[k];
    fixed[k] = t8 - 8 * (slope[k] + raw[k]);
  }
  vm_bench_fini(&b8);
  vm_bench_fini(&b128);
  printf("straight lines of 8 and 128 ops: each op costs the VM %+.2f us over raw (%.2f us/op), and a run %.1f us besides "
         "(medians of %d paired rounds)\n", median(slope, ROUNDS), median(raw, ROUNDS), median(fixed, ROUNDS), ROUNDS);
  printf("raw launch of the VM's kernels (a 1288-byte argument block): %.2f us/op, of the plain kernel (12 bytes) %.2f\n",
         raw_run(r, 0, true, iters), raw_run(r, 0, false, iters));
}

static void wake_latency(int runs) {
  const char *src = "func @c(%i: f32[], %v: f32[16]) -> bool[] {\n  %k = lt(%i, 50.0)\n  return %k\n}\n"
                    "func @b(%i: f32[], %v: f32[16]) -> (f32[], f32[16]) {\n  %j = add(%i, 1.0)\n  %w = neg(%v)\n  return %j, %w\n}\n"
                    "func @main(%v: f32[16]) -> f32[16] {\n  %z = sub(%v, %v)\n  %i = sum(%z)\n  %a, %r = while(@c, @b, %i, %v)\n  return %r\n}\n";
  rill_module_t *m;
  rill_vm_t *vm = vm_of(src, &m);
  rill_type_t t = {RILL_F32, 1, {16}};
  float x[16] = {0};
  rill_tensor_t *in, **r;
  int n;
  die(rill_tensor_create(vm, &t, x, &in));
  die(rill_vm_invoke(vm, "main", &in, 1, &r, &n));
  rill_results_free(vm, r, n);
  die(rill_vm_set_profiling(vm, true));
  double t0 = now_us();
  for (int i = 0; i < runs; i++) {
    die(rill_vm_invoke(vm, "main", &in, 1, &r, &n));
    rill_results_free(vm, r, n);
  }
  double per_iter = (now_us() - t0) / runs / 51;
  double med, p99;
  uint64_t cnt;
  if (rill_vm_wake_latency(vm, &med, &p99, &cnt))
    printf("host-wait latency       median %6.1f us, p99 %6.1f us over %llu waits; a while-loop iteration costs %.1f us end to end\n",
           med, p99, (unsigned long long)cnt, per_iter);
  rill_tensor_release(in);
  rill_vm_destroy(vm);
  rill_module_release(m);
}

/* Memory-bound elementwise ops on 2^24 elements: achieved bandwidth, counting
 * each input read once and the output written once. */
static void bandwidth(void) {
  const char *dts[] = {"f32", "f16", "bf16"};
  for (int k = 0; k < 3; k++) {
    char src[512];
    snprintf(src, sizeof src, "func @main(%%a: %s[16777216], %%b: %s[16777216]) -> %s[16777216] {\n  %%y = add(%%a, %%b)\n  return %%y\n}\n",
             dts[k], dts[k], dts[k]);
    rill_module_t *m;
    rill_vm_t *vm = vm_of(src, &m);
    rill_type_t t;
    rill_module_param_type(m, "main", 0, &t, NULL);
    size_t bytes = rill_type_numel(&t) * rill_dtype_size(t.dtype);
    void *host = calloc(bytes, 1);
    for (size_t i = 0; i < rill_type_numel(&t); i++) rill_element_set(t.dtype, host, i, (double)(i % 1000) / 7.0 - 50);
    rill_tensor_t *in[2], **r;
    int n;
    die(rill_tensor_create(vm, &t, host, &in[0]));
    die(rill_tensor_create(vm, &t, host, &in[1]));
    double ts[50];
    for (int i = -5; i < 50; i++) {
      double t0 = now_us();
      die(rill_vm_invoke(vm, "main", in, 2, &r, &n));
      double t1 = now_us();
      rill_results_free(vm, r, n);
      if (i >= 0) ts[i] = t1 - t0;
    }
    double med = median(ts, 50), lo = ts[0], hi = ts[0];
    for (int i = 1; i < 50; i++) lo = ts[i] < lo ? ts[i] : lo, hi = ts[i] > hi ? ts[i] : hi;
    printf("add %-4s 2^24 elements   %8.1f us per run, %7.0f GB/s (3 x %zu MB moved, whole-run time; min %.1f, max %.1f)\n",
           dts[k], med, 3.0 * (double)bytes / (med * 1e-6) / 1e9, bytes >> 20, lo, hi);
    free(host);
    rill_tensor_release(in[0]);
    rill_tensor_release(in[1]);
    rill_vm_destroy(vm);
    rill_module_release(m);
  }
}

/* ---- graph mode against a raw CUDA graph of the same launches ---- */
/* Medians per run, and the mean device time (the VM's trace gives a mean:
 * the VM's device time is compared mean to mean). */
typedef struct graph_fig {
  double issue_us, whole_us, device_us, device_mean_us;
} graph_fig_t;

/* How a raw graph begins: with nothing, a 64-byte device copy (a memcpy node, as the VM's graphs take their
 * inputs), or the same copy made by a kernel. */
enum { HEAD_NONE, HEAD_COPY, HEAD_COPY_KERNEL };
/* A raw graph of pattern p's launches (raw_issue; the second stream joins the capture through an event, as the
 * VM's do), beginning with `head`. */
static CUgraphExec raw_exec(raw_bench_t *r, int p, bool vm_kernels, int head) {
  const rill_cuda_api_t *api = r->api;
  CUgraph g;
  CUgraphExec x;
  die(CU(api, cuStreamBeginCapture, r->s, CU_STREAM_CAPTURE_MODE_RELAXED));
  if (head == HEAD_COPY) die(CU(api, cuMemcpyDtoDAsync, r->buf, r->buf2, 64, r->s));
  if (head == HEAD_COPY_KERNEL) {
    void *args[] = {&r->buf2, &r->buf, &r->n};
    die(CU(api, cuLaunchKernel, r->copy_fn, 1, 1, 1, 32, 1, 1, 0, r->s, args, NULL));
  }
  die(CU(api, cuEventRecord, r->e2, r->s));
  die(CU(api, cuStreamWaitEvent, r->s1, r->e2, 0));
  raw_issue(r, p, vm_kernels);
  die(CU(api, cuEventRecord, r->e2, r->s1));
  die(CU(api, cuStreamWaitEvent, r->s, r->e2, 0));
  die(CU(api, cuStreamEndCapture, r->s, &g));
  die(CU(api, cuGraphInstantiateWithFlags, &x, g, 0));
  api->cuGraphDestroy(g);
  return x;
}

/* The raw loop's launches for `pattern` (raw_issue), captured once after
 * `head` (raw_exec) and replayed, waited for by spinning or (`sleep`) on a
 * blocking-sync event. */
static graph_fig_t raw_graph(raw_bench_t *r, int pattern, bool vm_kernels, int head, int iters, bool sleep) {
  const rill_cuda_api_t *api = r->api;
  CUgraphExec x = raw_exec(r, pattern, vm_kernels, head);
  CUevent e0, e1;
  die(CU(api, cuEventCreate, &e0, CU_EVENT_DEFAULT));
  die(CU(api, cuEventCreate, &e1, sleep ? CU_EVENT_BLOCKING_SYNC : CU_EVENT_DEFAULT));
  double *issue = malloc(sizeof(double) * (size_t)iters), *whole = malloc(sizeof(double) * (size_t)iters),
         *dev = malloc(sizeof(double) * (size_t)iters);
  for (int i = -20; i < iters; i++) {
    die(CU(api, cuEventRecord, e0, r->s));
    double t0 = now_us();
    die(CU(api, cuGraphLaunch, x, r->s));
    double t1 = now_us();
    die(CU(api, cuEventRecord, e1, r->s));
    die(CU(api, cuEventSynchronize, e1));
    double t2 = now_us();
    float ms = 0;
    die(CU(api, cuEventElapsedTime, &ms, e0, e1));
    if (i >= 0) issue[i] = t1 - t0, whole[i] = t2 - t0, dev[i] = ms * 1e3;
  }
  double sum = 0;
  for (int i = 0; i < iters; i++) sum += dev[i];
  graph_fig_t f = {median(issue, iters), median(whole, iters), median(dev, iters), sum / iters};
  free(issue);
  free(whole);
  free(dev);
  api->cuEventDestroy(e0);
  api->cuEventDestroy(e1);
  api->cuGraphExecDestroy(x);
  return f;
}

/* The VM replaying the same program in graph mode; device time from the
 * trace's replay slices (a mark before and after the launch). */
static graph_fig_t vm_graph(vm_bench_t *b, int iters) {
  die(rill_vm_set_graph_mode(b->vm, NULL, RILL_GRAPH_ON));
  graph_fig_t f;
  f.issue_us = vm_bench_run(b, iters, 1, &f.whole_us);
  die(rill_vm_set_tracing(b->vm, true));
  vm_bench_run(b, iters, 1, NULL);
  die(rill_vm_set_tracing(b->vm, false));
  rill_trace_summary_t sum;
  die(rill_vm_trace_summary(b->vm, &sum));
  f.device_mean_us = sum.span_us; /* its trace gives a mean only */
  return f;
}

/* Where a replay's host time goes, on raw graphs of the straight line:
 * issue times of the launch alone, of a graph that begins with a 64-byte
 * device copy (how the VM's graphs take their inputs), of the launch
 * followed by an event record (a callback's), and of a copy issued before
 * the launch (how replays took inputs before), the launch preceded by
 * setting the context (as a run's stream hand-out does), and the launch
 * after the thread slept on a blocking-sync event (as a loop thread sleeps
 * in epoll between runs; the others spin in cuStreamSynchronize), and the
 * launch after another thread saw the last run end (polling the stream, as
 * a device thread sees a run's end for the loop thread). Medians over ROUNDS
 * rounds of each round's median, the variants taking turns. */
typedef struct poller {
  const rill_cuda_api_t *api;
  CUcontext ctx;
  CUstream s;
  atomic_int go, done; /* go: 1 poll the stream, -1 exit */
} poller_t;

static void *poller_main(void *arg) {
  poller_t *p = arg;
  p->api->cuCtxSetCurrent(p->ctx);
  for (;;) {
    int g;
    while (!(g = atomic_load(&p->go))) sched_yield();
    if (g < 0) return NULL;
    atomic_store(&p->go, 0);
    while (p->api->cuStreamQuery(p->s) == CUDA_ERROR_NOT_READY) sched_yield();
    atomic_store(&p->done, 1);
  }
}

static void graph_parts(raw_bench_t *r, int iters) {
  enum { ROUNDS = 5, V = 7 };
  static const char *const names[V] = {"launch", "copy node + launch", "launch + event record", "copy + launch",
                                       "context set + launch", "launch after a blocking wait",
                                       "launch after another thread saw the last run end"};
  poller_t pl = {.api = r->api, .ctx = r->ctx, .s = r->s};
  pthread_t th;
  if (pthread_create(&th, NULL, poller_main, &pl) != 0) die(rill__status(RILL_UNAVAILABLE, "bench: no thread"));
  const rill_cuda_api_t *api = r->api;
  CUgraphExec x[2] = {raw_exec(r, 0, false, HEAD_NONE), raw_exec(r, 0, false, HEAD_COPY)};
  CUevent e, sleep_e;
  die(CU(api, cuEventCreate, &e, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
  die(CU(api, cuEventCreate, &sleep_e, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
  int n = per_round(iters, ROUNDS);
  double *t = malloc(sizeof(double) * (size_t)n), med[V][ROUNDS];
  for (int k = 0; k < ROUNDS; k++)
    for (int v = 0; v < V; v++) {
      for (int i = -10; i < n; i++) {
        double t0 = now_us();
        if (v == 3) die(CU(api, cuMemcpyDtoDAsync, r->buf, r->buf2, 64, r->s));
        if (v == 4) die(CU(api, cuCtxSetCurrent, r->ctx));
        die(CU(api, cuGraphLaunch, x[v == 1], r->s));
        if (v == 2) die(CU(api, cuEventRecord, e, r->s));
        double t1 = now_us();
        if (v == 5) {
          die(CU(api, cuEventRecord, sleep_e, r->s));
          die(CU(api, cuEventSynchronize, sleep_e));
        }
        if (v == 6) {
          atomic_store(&pl.done, 0);
          atomic_store(&pl.go, 1);
          while (!atomic_load(&pl.done)) sched_yield();
        } else {
          die(CU(api, cuStreamSynchronize, r->s));
        }
        if (i >= 0) t[i] = t1 - t0;
      }
      med[v][k] = median(t, n);
    }
  atomic_store(&pl.go, -1);
  pthread_join(th, NULL);
  printf("replay parts (straight line, issue time, medians of %d rounds):", ROUNDS);
  for (int v = 0; v < V; v++) printf(" %s %.2f us%s", names[v], median(med[v], ROUNDS), v + 1 < V ? ";" : "\n");
  free(t);
  api->cuEventDestroy(e);
  api->cuEventDestroy(sleep_e);
  for (int c = 0; c < 2; c++) api->cuGraphExecDestroy(x[c]);
}

/* What the input copy node costs the device: each pattern's raw graph with
 * nothing at its head, with a 64-byte copy node, and with the same copy made
 * by a kernel node; then the raw graph of the VM's own kernels (its
 * generated kernels with their 1288-byte argument block, where the plain one
 * takes 12 bytes), without and with the copy node (raw_graph's device time),
 * taking turns; medians of ROUNDS rounds. */
static void copy_node_device_time(raw_bench_t *r, int iters) {
  enum { ROUNDS = 5, V = 5 };
  static const int head[V] = {HEAD_NONE, HEAD_COPY, HEAD_COPY_KERNEL, HEAD_NONE, HEAD_COPY};
  int n = per_round(iters, ROUNDS);
  printf("copy node and the VM's kernels, device time (raw graphs, medians of %d rounds):", ROUNDS);
  for (int p = 0; p < 3; p++) {
    double med[V][ROUNDS], m[V];
    for (int k = 0; k < ROUNDS; k++)
      for (int c = 0; c < V; c++) med[c][k] = raw_graph(r, p, c >= 3, head[c], n, false).device_us;
    for (int c = 0; c < V; c++) m[c] = median(med[c], ROUNDS);
    printf(" %s %.1f us, with the copy %.3fx, with a copy kernel %.3fx, the VM's kernels %.3fx, they and the copy "
           "%.3fx%s",
           PATTERNS[p], m[0], m[1] / m[0], m[2] / m[0], m[3] / m[0], m[4] / m[0], p < 2 ? ";" : "\n");
  }
}

/* The median of v[0..n) and its range: "+M us (range +LO..+HI)", or of `ratios` "Mx (range LO..HI)" (sorts v). */
static const char *mrange(char *buf, size_t size, bool ratios, double *v, int n) {
  double m = median(v, n);
  if (ratios) snprintf(buf, size, "%.3fx (range %.3f..%.3f)", m, v[0], v[n - 1]);
  else snprintf(buf, size, "%+.2f us (range %+.2f..%+.2f)", m, v[0], v[n - 1]);
  return buf;
}

/* Per program, ROUNDS rounds, the variants taking turns: the raw graph of the
 * plain kernel (waited for by spinning, and on a blocking-sync event, as a
 * loop thread sleeps), of the VM's own kernels (without and with the input
 * copy node the VM's graph has, the latter also waited for sleeping) and the
 * VM replaying; each figure the median of the rounds with their range. The
 * VM's device time per run is the trace's mean, so its ratios are of means
 * (a mean takes in the slow runs that a median leaves out). */
static void graph_vs_raw(raw_bench_t *r, int iters) {
  enum { ROUNDS = 5 };
  int n = per_round(iters, ROUNDS);
  for (int p = 0; p < 3; p++) {
    vm_bench_t b;
    vm_bench_init(&b, program(p));
    double ri[ROUNDS], rw[ROUNDS], vi[ROUNDS], vw[ROUNDS], vd[ROUNDS], di[ROUNDS], ds[ROUNDS], dsame[ROUNDS], dw[ROUNDS],
        xsame[ROUNDS], xcopy[ROUNDS], xplain[ROUNDS], xlike[ROUNDS], xslept[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
      graph_fig_t raw = raw_graph(r, p, false, HEAD_NONE, n, false), slept = raw_graph(r, p, false, HEAD_NONE, n, true),
                  same = raw_graph(r, p, true, HEAD_NONE, n, false), copy = raw_graph(r, p, true, HEAD_COPY, n, false),
                  like = raw_graph(r, p, true, HEAD_COPY, n, true), vm = vm_graph(&b, n);
      ri[k] = raw.issue_us, rw[k] = raw.whole_us, vi[k] = vm.issue_us, vw[k] = vm.whole_us, vd[k] = vm.device_mean_us;
      di[k] = vm.issue_us - raw.issue_us;
      ds[k] = vm.issue_us - slept.issue_us;
      dsame[k] = vm.issue_us - same.issue_us;
      dw[k] = vm.whole_us - raw.whole_us;
      xsame[k] = vm.device_mean_us / same.device_mean_us;
      xcopy[k] = vm.device_mean_us / copy.device_mean_us;
      xplain[k] = vm.device_mean_us / raw.device_mean_us;
      xlike[k] = vm.device_mean_us / like.device_mean_us;
      xslept[k] = slept.device_us / raw.device_us;
    }
    rill_graph_info_t gi;
    rill_vm_graph_info(b.vm, "main", &gi);
    vm_bench_fini(&b);
    char b1[96], b2[96], b3[96], b4[96], b5[96], b6[96], b7[96], b8[96];
    printf("graph %-19s raw graph: issue %.2f us, whole run %.1f us | VM graph (%zu nodes): issue %.2f us, whole run %.1f us (%+.1f), "
           "device %.1f us (mean) | VM issue over the raw graph's: spinning %s, sleeping %s, the VM's kernels spinning %s | VM device "
           "time over the raw graph of the VM's kernels %s, with its copy node %s, that one waited for sleeping %s, of the plain kernel %s | "
           "the plain raw graph's device time (medians) waited for sleeping over spinning %s\n",
           PATTERNS[p], median(ri, ROUNDS), median(rw, ROUNDS), gi.nodes, median(vi, ROUNDS), median(vw, ROUNDS), median(dw, ROUNDS),
           median(vd, ROUNDS), mrange(b1, 96, false, di, ROUNDS), mrange(b2, 96, false, ds, ROUNDS),
           mrange(b3, 96, false, dsame, ROUNDS), mrange(b4, 96, true, xsame, ROUNDS), mrange(b5, 96, true, xcopy, ROUNDS),
           mrange(b7, 96, true, xlike, ROUNDS), mrange(b6, 96, true, xplain, ROUNDS), mrange(b8, 96, true, xslept, ROUNDS));
  }
}

typedef struct job {
  rill_vm_t *vm;
  uv_loop_t *loop;
  rill_tensor_t *in;
  int left;
} job_t;

/* CPU time of the calling thread: what the loop thread spends per run,
 * against the wall time per run, tells whether it is what limits the rate. */
static double thread_cpu_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void next(job_t *j);
static void job_done(void *u, rill_status_t st, rill_tensor_t **r, int n) {
  die(st);
  job_t *j = u;
  for (int i = 0; i < n; i++) rill_tensor_release(r[i]);
  free(r);
  if (--j->left > 0) next(j);
}
static void next(job_t *j) { die(rill_vm_invoke_async(j->vm, j->loop, "main", &j->in, 1, job_done, j)); }

static void concurrency(const char *mlp_path, rill_graph_mode_t mode, double *base_io) {
  uint8_t *b;
  size_t sz;
  rill_module_t *m;
  rill_vm_t *vm;
  die(rill_assemble_file(NULL, mlp_path, NULL, &b, &sz));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", mlp_path);
  *strrchr(dir, '/') = 0;
  die(rill_module_load(NULL, b, sz, dir, &m));
  free(b);
  die(rill_vm_create(NULL, m, "cuda", &vm));
  die(rill_vm_set_graph_mode(vm, NULL, mode));
  rill_type_t t;
  rill_module_param_type(m, "main", 0, &t, NULL);
  size_t numel = rill_type_numel(&t);
  float *x = calloc(numel, sizeof(float));
  uv_loop_t loop;
  uv_loop_init(&loop);
  job_t jobs[32];
  for (int i = 0; i < 32; i++) {
    jobs[i] = (job_t){vm, &loop, NULL, 0};
    die(rill_tensor_create(vm, &t, x, &jobs[i].in));
  }
  const int total = 12800; /* 0.1-0.5 s a row; with 3200 (rows of 25-110 ms) N=4 ranged 3.66x-4.45x over three processes (run BE) */
  /* Ratios are to the interpreted N=1 rate (the first call's). */
  double base = *base_io;
  int ns[] = {1, 2, 4, 8, 16, 32};
  printf("concurrency (small MLP, %d runs per row, %s):", total, mode == RILL_GRAPH_OFF ? "interpreted" : "graph mode");
  for (int k = 0; k < 6; k++) {
    int n = ns[k];
    for (int w = 0; w < 2; w++) { /* the first pass warms up */
      double t0 = now_us(), c0 = thread_cpu_us();
      for (int i = 0; i < n; i++) {
        jobs[i].left = total / n;
        next(&jobs[i]);
      }
      uv_run(&loop, UV_RUN_DEFAULT);
      double rate = total / ((now_us() - t0) / 1e6), busy = (thread_cpu_us() - c0) / total;
      if (w == 1) {
        if (n == 1 && base == 0) base = *base_io = rate;
        printf("  N=%d %.0f runs/s (%.2fx, loop thread %.1f us/run)", n, rate, rate / base, busy);
      }
    }
  }
  printf("\n");
  for (int i = 0; i < 32; i++) rill_tensor_release(jobs[i].in);
  uv_loop_close(&loop);
  free(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
}

static void sync_call(raw_bench_t *r, int iters) {
  const rill_cuda_api_t *api = r->api;
  vm_bench_t b;
  vm_bench_init(&b, "func @main(%x: f32[16]) -> f32[16] {\n  %y = relu(%x)\n  return %y\n}\n");
  die(rill_vm_set_graph_mode(b.vm, NULL, RILL_GRAPH_ON));
  /* x: the VM's kernel alone; xc: after a copy of the input, as the VM's graph begins */
  CUgraphExec x, xc;
  void *vargs[] = {&r->va[K_RELU]};
  for (int copy = 0; copy < 2; copy++) {
    CUgraph g;
    die(CU(api, cuStreamBeginCapture, r->s, CU_STREAM_CAPTURE_MODE_RELAXED));
    if (copy) die(CU(api, cuMemcpyDtoDAsync, r->buf, r->buf2, 64, r->s));
    die(CU(api, cuLaunchKernel, r->vk[K_RELU], cuda_blocks(r->n / 4, r->num_sms), 1, 1, 256, 1, 1, 0, r->s, vargs, NULL));
    die(CU(api, cuStreamEndCapture, r->s, &g));
    die(CU(api, cuGraphInstantiateWithFlags, copy ? &xc : &x, g, 0));
    api->cuGraphDestroy(g);
  }
  CUevent spin, sleep;
  die(CU(api, cuEventCreate, &spin, CU_EVENT_DISABLE_TIMING));
  die(CU(api, cuEventCreate, &sleep, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC));
  double *tv = malloc(sizeof(double) * (size_t)iters), *ts = malloc(sizeof(double) * (size_t)iters),
         *tl = malloc(sizeof(double) * (size_t)iters), *tc = malloc(sizeof(double) * (size_t)iters);
  for (int i = -20; i < iters; i++) {
    rill_tensor_t **out;
    int n;
    double t0 = now_us();
    die(rill_vm_invoke(b.vm, "main", &b.in, 1, &out, &n));
    double t1 = now_us();
    rill_results_free(b.vm, out, n);
    double t2 = now_us();
    die(CU(api, cuGraphLaunch, x, r->s));
    die(CU(api, cuEventRecord, spin, r->s));
    die(CU(api, cuEventSynchronize, spin));
    double t3 = now_us();
    die(CU(api, cuGraphLaunch, x, r->s));
    die(CU(api, cuEventRecord, sleep, r->s));
    die(CU(api, cuEventSynchronize, sleep));
    double t4 = now_us();
    die(CU(api, cuGraphLaunch, xc, r->s));
    die(CU(api, cuEventRecord, spin, r->s));
    die(CU(api, cuEventSynchronize, spin));
    double t5 = now_us();
    if (i >= 0) tv[i] = t1 - t0, ts[i] = t3 - t2, tl[i] = t4 - t3, tc[i] = t5 - t4;
  }
  double v = median(tv, iters), sp = median(ts, iters), sl = median(tl, iters), sc = median(tc, iters);
  printf("synchronous call (one-op graph, %d calls): rill_vm_invoke %.2f us; raw graph launch + event wait %.2f us spinning, "
         "%.2f us sleeping, %.2f us spinning with the input copy at its head as the VM's graph has; rill_vm_invoke minus raw "
         "%+.2f us (spinning), %+.2f us (sleeping), %+.2f us (spinning, with the copy)\n",
         iters, v, sp, sl, sc, v - sp, v - sl, v - sc);
  free(tv);
  free(ts);
  free(tl);
  free(tc);
  api->cuGraphExecDestroy(xc);
  api->cuEventDestroy(spin);
  api->cuEventDestroy(sleep);
  api->cuGraphExecDestroy(x);
  vm_bench_fini(&b);
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 2000;
  const char *mlp = argc > 2 ? argv[2] : "examples/mlp/mlp.vmasm";
  rill_cuda_info_t ci;
  const char *why;
  if (!rill_cuda_info(&ci, &why)) {
    printf("skipped: %s\n", why);
    return 0;
  }
  printf("device: %s (sm_%d), driver %d.%d\n", ci.device_name, ci.compute_capability, ci.driver_version / 1000, ci.driver_version % 1000 / 10);
  raw_bench_t raw;
  raw_init(&raw);
  if (argc > 3 && !strcmp(argv[3], "sync")) {
    sync_call(&raw, iters);
    raw_fini(&raw);
    return 0;
  }
  per_op_overhead(&raw, iters);
  raw_fini(&raw);
  raw_init(&raw);
  graph_vs_raw(&raw, iters);
  graph_parts(&raw, iters);
  copy_node_device_time(&raw, iters);
  sync_call(&raw, iters);
  raw_fini(&raw);
  wake_latency(20);
  bandwidth();
  double base = 0;
  concurrency(mlp, RILL_GRAPH_OFF, &base);
  concurrency(mlp, RILL_GRAPH_ON, &base);
  return 0;
}
