/* dispatch.c: interpreter dispatch cost on the CPU backend.
 *
 * Builds lowered programs of N cheap instructions of one kind (nop, move,
 * forward goto, view: a tensor over a storage, as before every op's launch)
 * and of N tiny ops (invoke, to see the cost of a launch on
 * the cpu device), runs each many times, and reports the slope between two
 * sizes: nanoseconds per instruction with the fixed cost of an invocation
 * (loop set-up, stream hand-out, final callback) taken out.
 *   bench_dispatch [N]   (default 200000)
 *   bench_dispatch pick [REPS]: the cost of picking a module's instance for
 *   the sizes of the arguments (shape variables), per invocation.
 *   bench_dispatch sync [REPS] [DEVICE]: a one-op run through rill_vm_invoke
 *   against rill_vm_invoke_async on a loop the caller keeps, taking turns
 *   (default 20001 runs each, cpu), interpreted and in graph mode.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <uv.h>

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

/* The time of one rill_vm_invoke of @main(x), in ns; its results freed. */
static double invoke_ns(rill_vm_t *vm, rill_tensor_t *x) {
  rill_tensor_t **out;
  int nout;
  double t0 = now_ns();
  rill_status_t st = rill_vm_invoke(vm, "main", &x, 1, &out, &nout);
  double t1 = now_ns();
  if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
  rill_results_free(vm, out, nout);
  return t1 - t0;
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
    double ns = invoke_ns(vm, x);
    if (r >= 0) times[r] = ns;
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

/* Picking the instance of a module with shape variables: invocations of
 * `return %x` over two parameters whose dimensions name B and S, against
 * the same function with fixed sizes; the difference of the medians is
 * what binding the variables and finding the instance cost. `cycle`
 * sizes in turn (1: the same size every time, found first; 8: each lookup
 * passes the others). */
static rill_vm_t *pick_vm(const char *src, rill_module_t **m) {
  uint8_t *bytes;
  size_t size;
  rill_vm_t *vm;
  rill_status_t st = rill_assemble(NULL, "pick.vmasm", src, strlen(src), NULL, &bytes, &size);
  if (!st) st = rill_module_load(NULL, bytes, size, ".", m);
  if (!st) st = rill_vm_create(NULL, *m, "cpu", &vm);
  if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
  free(bytes);
  return vm;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void time_pick(int cycle, int reps) {
  rill_module_t *md, *ms;
  rill_vm_t *dyn = pick_vm("dim B in [1, 64]\nfunc @main(%x: f32[B,S], %y: f32[S]) -> f32[B,S] {\n  return %x\n}\n", &md);
  rill_vm_t *fix = pick_vm("func @main(%x: f32[4,8], %y: f32[8]) -> f32[4,8] {\n  return %x\n}\n", &ms);
  rill_tensor_t *dx[8], *dy[8], *fx, *fy;
  for (int c = 0; c < cycle; c++) {
    rill_type_t tx = {RILL_F32, 2, {4 + c, 8}}, ty = {RILL_F32, 1, {8}};
    rill_tensor_create(dyn, &tx, NULL, &dx[c]);
    rill_tensor_create(dyn, &ty, NULL, &dy[c]);
  }
  rill_type_t tx = {RILL_F32, 2, {4, 8}}, ty = {RILL_F32, 1, {8}};
  rill_tensor_create(fix, &tx, NULL, &fx);
  rill_tensor_create(fix, &ty, NULL, &fy);
  double *td = malloc(sizeof(double) * (size_t)reps), *tf = malloc(sizeof(double) * (size_t)reps);
  for (int r = -cycle; r < reps; r++) {
    for (int which = 0; which < 2; which++) {
      rill_tensor_t *in[2] = {which ? fx : dx[(r + cycle) % cycle], which ? fy : dy[(r + cycle) % cycle]}, **out;
      int nout;
      double t0 = now_ns();
      rill_status_t st = rill_vm_invoke(which ? fix : dyn, "main", in, 2, &out, &nout);
      double t1 = now_ns();
      if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
      rill_results_free(which ? fix : dyn, out, nout);
      if (r >= 0) (which ? tf : td)[r] = t1 - t0;
    }
  }
  qsort(td, (size_t)reps, sizeof(double), cmp_d);
  qsort(tf, (size_t)reps, sizeof(double), cmp_d);
  printf("pick, %d size%s in turn: %.0f ns (median invocation %.0f ns with shape variables, %.0f ns without; min %.0f / %.0f)\n", cycle,
         cycle == 1 ? "" : "s", td[reps / 2] - tf[reps / 2], td[reps / 2], tf[reps / 2], td[0], tf[0]);
  free(td);
  free(tf);
  for (int c = 0; c < cycle; c++) {
    rill_tensor_release(dx[c]);
    rill_tensor_release(dy[c]);
  }
  rill_tensor_release(fx);
  rill_tensor_release(fy);
  rill_vm_destroy(dyn);
  rill_vm_destroy(fix);
  rill_module_release(md);
  rill_module_release(ms);
}

/* ---- bench_dispatch sync ---- */
static void on_done(void *user, rill_status_t st, rill_tensor_t **res, int n) {
  if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
  rill_tensor_t ***out = user;
  *out = res;
  (void)n;
}

static void time_sync(int reps, const char *device) {
  const char *src = "func @main(%x: f32[4]) -> f32[4] {\n  %y = neg(%x)\n  return %y\n}\n";
  rill_module_t *m;
  rill_vm_t *vm;
  uint8_t *bytes;
  size_t size;
  rill_status_t st = rill_assemble(NULL, "sync.vmasm", src, strlen(src), NULL, &bytes, &size);
  if (!st) st = rill_module_load(NULL, bytes, size, ".", &m);
  if (!st) st = rill_vm_create(NULL, m, device, &vm);
  if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
  free(bytes);
  rill_type_t t = {RILL_F32, 1, {4}};
  float v[4] = {1, 2, 3, 4};
  rill_tensor_t *x;
  rill_tensor_create(vm, &t, v, &x);
  uv_loop_t loop;
  uv_loop_init(&loop);
  double *ts = malloc(sizeof(double) * (size_t)reps), *ta = malloc(sizeof(double) * (size_t)reps);
  for (int mode = 0; mode < 2; mode++) {
    rill_vm_set_graph_mode(vm, NULL, mode ? RILL_GRAPH_ON : RILL_GRAPH_OFF);
    for (int r = -20; r < reps; r++) {
      double tsync = invoke_ns(vm, x);
      rill_tensor_t **out = NULL;
      double t2 = now_ns();
      if ((st = rill_vm_invoke_async(vm, &loop, "main", &x, 1, on_done, &out))) { fprintf(stderr, "%s\n", rill_status_message(st)); exit(1); }
      uv_run(&loop, UV_RUN_DEFAULT);
      double t3 = now_ns();
      rill_results_free(vm, out, 1);
      if (r >= 0) { ts[r] = tsync; ta[r] = t3 - t2; }
    }
    qsort(ts, (size_t)reps, sizeof *ts, cmp_d);
    qsort(ta, (size_t)reps, sizeof *ta, cmp_d);
    printf("%s %-11s one-op run: rill_vm_invoke median %.2f us (p10 %.2f, p90 %.2f); invoke_async on the caller's loop %.2f us (p10 %.2f, p90 %.2f); "
           "difference %+.2f us\n", device, mode ? "graph:" : "interpreted:", ts[reps / 2] / 1e3, ts[reps / 10] / 1e3, ts[reps * 9 / 10] / 1e3,
           ta[reps / 2] / 1e3, ta[reps / 10] / 1e3, ta[reps * 9 / 10] / 1e3, (ts[reps / 2] - ta[reps / 2]) / 1e3);
  }
  uv_loop_close(&loop);
  free(ts);
  free(ta);
  rill_tensor_release(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "sync")) {
    time_sync(argc > 2 ? atoi(argv[2]) : 20001, argc > 3 ? argv[3] : "cpu");
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "pick")) {
    int reps = argc > 2 ? atoi(argv[2]) : 20001;
    time_pick(1, reps);
    time_pick(8, reps);
    return 0;
  }
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
