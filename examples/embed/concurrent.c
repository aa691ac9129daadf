/* concurrent.c: embedding Rill. One thread and one libuv loop drive N
 * invocations of a module at once; each finishes in its own callback.
 *
 *   concurrent [MODULE.vmasm] [DEVICE] [N] [ROUNDS]
 *     (defaults: examples/mlp/mlp.vmasm, cuda if usable else cpu, 8, 50)
 *
 * Every result is checked against a synchronous run of the same input, and
 * the throughput of N runs in flight is compared with one at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include <rill.h>

typedef struct job {
  rill_vm_t *vm;
  uv_loop_t *loop;
  rill_tensor_t *input;
  float *want;          /* the first result of a synchronous run */
  size_t nbytes;
  int rounds_left, mismatches;
  const char *error;
} job_t;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void start(job_t *j);

static void done(void *user, rill_status_t st, rill_tensor_t **results, int n) {
  job_t *j = user;
  if (st) {
    fprintf(stderr, "a run failed: %s\n", rill_status_message(st));
    j->error = "failed";
    rill_status_free(st);
    return;
  }
  float *got = malloc(j->nbytes);
  if (!got || rill_tensor_read(results[0], got, j->nbytes) || memcmp(got, j->want, j->nbytes) != 0) j->mismatches++;
  free(got);
  rill_results_free(j->vm, results, n);
  if (--j->rounds_left > 0) start(j); /* keep this job's run in flight */
}

static void start(job_t *j) {
  rill_status_t st = rill_vm_invoke_async(j->vm, j->loop, "main", &j->input, 1, done, j);
  if (st) {
    fprintf(stderr, "cannot start a run: %s\n", rill_status_message(st));
    j->error = "start";
    rill_status_free(st);
  }
}

/* Runs `n` jobs of `rounds` runs each, all on one loop; returns seconds. */
static double run_jobs(job_t *jobs, int n, int rounds, uv_loop_t *loop) {
  double t0 = now();
  for (int i = 0; i < n; i++) {
    jobs[i].rounds_left = rounds;
    jobs[i].loop = loop;
    start(&jobs[i]);
  }
  uv_run(loop, UV_RUN_DEFAULT);
  return now() - t0;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "examples/mlp/mlp.vmasm";
  const char *device = argc > 2 ? argv[2] : rill_device_usable("cuda", NULL) ? "cuda" : "cpu";
  int n = argc > 3 ? atoi(argv[3]) : 8, rounds = argc > 4 ? atoi(argv[4]) : 50;
  if (n < 1 || n > 1024 || rounds < 1) {
    fprintf(stderr, "usage: concurrent [MODULE.vmasm] [DEVICE] [N 1..1024] [ROUNDS]\n");
    return 2;
  }
  uint8_t *bytes;
  size_t size;
  rill_module_t *m;
  rill_vm_t *vm;
  rill_status_t st = rill_assemble_file(NULL, path, NULL, &bytes, &size);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else snprintf(dir, sizeof dir, ".");
  if (!st) st = rill_module_load(NULL, bytes, size, dir, &m);
  if (!st) st = rill_vm_create(NULL, m, device, &vm);
  if (st) {
    fprintf(stderr, "%s\n", rill_status_message(st));
    return 2;
  }
  free(bytes);
  rill_type_t t;
  rill_module_param_type(m, "main", 0, &t, NULL);
  size_t numel = rill_type_numel(&t);
  if (t.dtype != RILL_F32) {
    fprintf(stderr, "this example feeds f32 inputs\n");
    return 2;
  }
  job_t *jobs = calloc((size_t)n, sizeof *jobs);
  float *x = malloc(numel * sizeof(float));
  for (int i = 0; i < n; i++) {
    for (size_t k = 0; k < numel; k++) x[k] = (float)((i * 31 + (int)k * 7) % 17) / 8.0f - 1.0f;
    jobs[i].vm = vm;
    if ((st = rill_tensor_create(vm, &t, x, &jobs[i].input))) {
      fprintf(stderr, "%s\n", rill_status_message(st));
      return 1;
    }
    rill_tensor_t **res;
    int nres;
    if ((st = rill_vm_invoke(vm, "main", &jobs[i].input, 1, &res, &nres))) {
      fprintf(stderr, "%s\n", rill_status_message(st));
      return 1;
    }
    jobs[i].nbytes = rill_tensor_nbytes(res[0]);
    jobs[i].want = malloc(jobs[i].nbytes);
    rill_tensor_read(res[0], jobs[i].want, jobs[i].nbytes);
    rill_results_free(vm, res, nres);
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  double one = run_jobs(jobs, 1, rounds * n, &loop);   /* the same number of runs, one at a time */
  double many = run_jobs(jobs, n, rounds, &loop);
  int bad = 0, failed = 0;
  for (int i = 0; i < n; i++) {
    bad += jobs[i].mismatches;
    failed += jobs[i].error != NULL;
  }
  printf("%s on %s: %d runs one at a time: %.1f runs/s; %d in flight on one loop: %.1f runs/s (%.2fx); %d mismatches, %d failures\n",
         path, device, rounds * n, rounds * n / one, n, rounds * n / many, one / many, bad, failed);
  uv_loop_close(&loop);
  for (int i = 0; i < n; i++) {
    rill_tensor_release(jobs[i].input);
    free(jobs[i].want);
  }
  free(jobs);
  free(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
  return bad || failed ? 1 : 0;
}
