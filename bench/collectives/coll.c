/* coll.c: all_reduce over a VM's devices, timed (bench/collectives/run.sh).
 *
 *   bench_coll DEVICES BYTES [ONESHOT_MAX [ITERS]]
 *
 * DEVICES: e.g. cuda:0,cuda:1 (or cpu:0,cpu:1 anywhere); BYTES per device
 * (f32 elements); ONESHOT_MAX: the one-shot threshold in bytes (0: NCCL
 * only; -1: the VM's default or RILL_ALLREDUCE_ONESHOT_MAX). Two programs
 * chain K1 and K2 all-reduces (`%a0, %a1 = all_reduce(%a0, %a1)` K times
 * after one copy to each device): the time of one is the difference of
 * their medians over ITERS runs divided by K2 - K1, so the copies, the
 * call and the results' read-back cancel out. Prints one JSON line:
 * {"devices", "bytes", "oneshot_max", "us" (per all_reduce), "busbw_gbs"
 * (bytes * 2 (n-1) / n / time, as nccl-tests defines it)}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"
#include "vm/vm.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void die(rill_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_coll: %s: %s\n", what, rill_status_message(st));
  exit(1);
}

/* @main(x: f32[n]) -> f32[1]: x to each device, k all-reduces, the first element of device 0's. */
static char *program(int nd, size_t n, int k) {
  size_t cap = 4096 + (size_t)k * (size_t)nd * 64;
  char *b = malloc(cap);
  size_t o = (size_t)snprintf(b, cap, "func @main(%%x: f32[%zu]) -> f32[1] {\n  add_event(0)\n", n);
  for (int i = 1; i < nd; i++) o += (size_t)snprintf(b + o, cap - o, "  set_stream(%d, device=%d)\n  wait_event(0)\n  %%v%d_0 = copy(%%x) {device=%d}\n", i, i, i, i);
  o += (size_t)snprintf(b + o, cap - o, "  set_stream(0)\n  %%v0_0 = mul(%%x, 1.0)\n");
  for (int j = 1; j <= k; j++) {
    o += (size_t)snprintf(b + o, cap - o, "  ");
    for (int i = 0; i < nd; i++) o += (size_t)snprintf(b + o, cap - o, "%s%%v%d_%d", i ? ", " : "", i, j);
    o += (size_t)snprintf(b + o, cap - o, " = all_reduce(");
    for (int i = 0; i < nd; i++) o += (size_t)snprintf(b + o, cap - o, "%s%%v%d_%d", i ? ", " : "", i, j - 1);
    o += (size_t)snprintf(b + o, cap - o, ") {op=\"sum\"}\n");
  }
  o += (size_t)snprintf(b + o, cap - o, "  %%r = slice(%%v0_%d) {starts=[0], ends=[1]}\n  return %%r\n}\n", k);
  return b;
}

static double time_chain(const char *devices, int nd, size_t n, int k, long long oneshot, int iters) {
  char *src = program(nd, n, k);
  uint8_t *bytes;
  size_t size;
  die(rill_assemble(NULL, "coll.vmasm", src, strlen(src), NULL, &bytes, &size), "assemble");
  free(src);
  rill_module_t *m;
  die(rill_module_load(NULL, bytes, size, ".", &m), "load");
  free(bytes);
  rill_vm_t *vm;
  die(rill_vm_create(NULL, m, devices, &vm), "create");
  if (oneshot >= 0) die(vm_coll_settings(vm, -1, oneshot), "settings");
  rill_type_t t = {RILL_F32, 1, {(int64_t)n}};
  float *zeros = calloc(n, sizeof(float));
  rill_tensor_t *x, **r;
  int nr;
  die(rill_tensor_create(vm, &t, zeros, &x), "input");
  free(zeros);
  double *us = malloc(sizeof(double) * (size_t)iters);
  for (int it = -3; it < iters; it++) {
    double t0 = now_us();
    die(rill_vm_invoke(vm, "main", &x, 1, &r, &nr), "run");
    double t1 = now_us();
    rill_results_free(vm, r, nr);
    if (it >= 0) us[it] = t1 - t0;
  }
  qsort(us, (size_t)iters, sizeof *us, cmp);
  double med = us[iters / 2];
  free(us);
  rill_tensor_release(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
  return med;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_coll DEVICES BYTES [ONESHOT_MAX [ITERS]]\n");
    return 2;
  }
  const char *devices = argv[1];
  size_t bytes = strtoull(argv[2], NULL, 10), n = bytes / 4 ? bytes / 4 : 1;
  long long oneshot = argc > 3 ? atoll(argv[3]) : -1;
  int iters = argc > 4 ? atoi(argv[4]) : 20;
  int nd = 1;
  for (const char *p = devices; *p; p++) nd += *p == ',';
  /* Enough all-reduces that their time stands out from the call's. */
  int k1 = bytes >= (64u << 20) ? 2 : 10, k2 = bytes >= (64u << 20) ? 10 : 210;
  double a = time_chain(devices, nd, n, k1, oneshot, iters), b = time_chain(devices, nd, n, k2, oneshot, iters);
  double us = (b - a) / (k2 - k1);
  double busbw = (double)n * 4 * 2 * (nd - 1) / nd / (us * 1e-6) / 1e9;
  printf("{\"devices\": \"%s\", \"bytes\": %zu, \"oneshot_max\": %lld, \"us\": %.3f, \"busbw_gbs\": %.2f}\n", devices, n * 4, oneshot, us, busbw);
  return 0;
}
