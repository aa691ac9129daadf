/* dispatch.c: interpreter dispatch cost on the CPU backend.
 *
 * Builds lowered programs of N cheap instructions of one kind (nop, move,
 * forward goto, view: a tensor over a storage, as before every op's launch)
 * and of N tiny ops (invoke, to see the cost of a launch on
 * the cpu device), runs each many times, and reports the slope between two
 * sizes: nanoseconds per instruction with the fixed cost of an invocation
 * (loop set-up, stream hand-out, final callback) taken out.
 *   bench_dispatch [N]   (default 200000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static char *program(const char *kind, long n) {
  size_t cap = (size_t)n * 48 + 4096, len = 0;
  char *s = malloc(cap);
  len += (size_t)snprintf(s + len, cap - len, "op $0 = neg(f32[]) -> (f32[])\n"
                          "func @main(%%x: f32[]) -> (f32[]) lowered(streams=1, events=0) {\n  reg %%a : f32[]\n  reg %%b : f32[]\n"
                          "  reg %%v : f32[]\n  reg %%s : storage(64)\n  alloc_storage %%s\n"
                          "  alloc_tensor %%a\n  move %%b, %%x\n");
  for (long i = 0; i < n; i++) {
    if (!strcmp(kind, "nop")) len += (size_t)snprintf(s + len, cap - len, "  nop\n");
    else if (!strcmp(kind, "move")) len += (size_t)snprintf(s + len, cap - len, i & 1 ? "  move %%b, %%x\n" : "  move %%b, %%a\n");
    else if (!strcmp(kind, "view")) len += (size_t)snprintf(s + len, cap - len, "  view %%v, %%s, 0\n");
    else if (!strcmp(kind, "goto")) len += (size_t)snprintf(s + len, cap - len, "  goto L%ld\nL%ld:\n", i, i);
    else len += (size_t)snprintf(s + len, cap - len, "  invoke $0, (%%x), (%%a)\n");
  }
  snprintf(s + len, cap - len, "  return (%%b)\n}\n");
  return s;
}

/* Median time of one invocation, in ns. */
static double time_program(const char *kind, long n, int reps) {
  char *src = program(kind, n);
  uint8_t *bytes;
  size_t size;
  const rill_asm_options_t o0 = {.no_opt = true}; /* dispatch of every op, none fused */
  rill_status_t st = rill_assemble(NULL, "bench.vmasm", src, strlen(src), &o0, &bytes, &size);
  if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
  rill_module_t *m;
  rill_vm_t *vm;
  if ((st = rill_module_load(NULL, bytes, size, ".", &m)) || (st = rill_vm_create(NULL, m, "cpu", &vm))) {
    fprintf(stderr, "%s\n", rill_status_message(st));
    exit(1);
  }
  rill_type_t t = {RILL_F32, 0, {0}};
  float one = 1;
  rill_tensor_t *x;
  rill_tensor_create(vm, &t, &one, &x);
  double *times = malloc(sizeof(double) * (size_t)reps);
  for (int r = -2; r < reps; r++) {
    rill_tensor_t **out;
    int nout;
    double t0 = now_ns();
    if ((st = rill_vm_invoke(vm, "main", &x, 1, &out, &nout))) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
    double t1 = now_ns();
    rill_results_free(vm, out, nout);
    if (r >= 0) times[r] = t1 - t0;
  }
  for (int i = 1; i < reps; i++)
    for (int j = i; j > 0 && times[j] < times[j - 1]; j--) { double tmp = times[j]; times[j] = times[j - 1]; times[j - 1] = tmp; }
  double med = times[reps / 2];
  free(times);
  rill_tensor_release(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
  free(bytes);
  free(src);
  return med;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  const char *kinds[] = {"nop", "move", "goto", "view", "invoke"};
  printf("instruction   ns/instruction (slope between %ld and %ld instructions, median of 21 runs)\n", n / 10, n);
  for (int k = 0; k < 5; k++) {
    long big = k == 4 ? n / 10 : n, small = big / 10;
    double tb = time_program(kinds[k], big, 21), ts = time_program(kinds[k], small, 21);
    printf("%-12s  %8.2f\n", kinds[k], (tb - ts) / (double)(big - small));
  }
  double empty = time_program("nop", 0, 51);
  printf("fixed cost of one synchronous invocation: %.1f us\n", empty / 1000);
  return 0;
}
