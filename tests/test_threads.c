/* test_threads.c: one VM shared by threads that call rill_vm_invoke at
 * once, as a threaded server does (rill.h: "Threads"). Every result must
 * equal a run made alone, interpreted and in graph mode; CI runs this
 * suite under ThreadSanitizer too, where any data race fails it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

enum { THREADS = 8, CALLS = 300 };

/* Two streams' worth of work (the assembler spreads the branches), a
 * constant shared by every run, and a shape variable. */
static const char *PROG =
    "dim B in [1, 8]\n"
    "const %w : f32[4,4] = [0.5, -1, 2, 0.25, 1, 1, -0.5, 3, 0, 2, 1, -1, 0.75, 0.5, -2, 1]\n"
    "func @main(%x: f32[B,4], %y: f32[B,4]) -> (f32[B,4], f32[B,4]) {\n"
    "  %a = matmul(%x, %w)\n  %b = relu(%a)\n  %c = tanh(%y)\n  %d = matmul(%c, %w)\n"
    "  %e = add(%b, %d)\n  %f = mul(%e, %x)\n  %g = sigmoid(%d)\n  return %f, %g\n}\n";

typedef struct shared_case {
  rill_vm_t *vm;
  rill_tensor_t *common;          /* the same input tensor in every thread's calls */
  rill_tensor_t *own[THREADS];    /* each thread's second input (its batch size its own) */
  float *want[THREADS][2];        /* the results of a run made alone */
  size_t bytes[THREADS];
  atomic_int bad, errors;
} shared_case_t;

typedef struct worker {
  shared_case_t *c;
  int k;
} worker_t;

static void *work(void *arg) {
  worker_t *w = arg;
  shared_case_t *c = w->c;
  float *got = malloc(c->bytes[w->k]);
  for (int i = 0; i < CALLS; i++) {
    /* threads at batch 8 pass the common tensor (as both inputs) every other call */
    bool common = (i + w->k) % 2 == 0 && c->bytes[w->k] == c->bytes[0];
    rill_tensor_t *in[2] = {common ? c->common : c->own[w->k], common ? c->common : c->own[w->k]};
    rill_tensor_t **out;
    int n;
    rill_status_t st = rill_vm_invoke(c->vm, "main", in, 2, &out, &n);
    if (st) {
      c->errors++;
      rill_status_free(st);
      continue;
    }
    /* with the common tensor the results are those of thread 0's run alone */
    int ref = common ? 0 : w->k;
    for (int r = 0; r < 2; r++)
      if (rill_tensor_read(out[r], got, c->bytes[w->k]) || memcmp(got, c->want[ref][r], c->bytes[w->k])) c->bad++;
    rill_results_free(c->vm, out, n);
  }
  free(got);
  return NULL;
}

static void run_shared(const char *device, rill_graph_mode_t mode) {
  uint8_t *bytes;
  size_t size;
  ck_assert_ptr_null(asm_text(PROG, &bytes, &size));
  rill_module_t *m;
  shared_case_t c = {0};
  ck_assert_ptr_null(rill_module_load(NULL, bytes, size, ".", &m));
  free(bytes);
  ck_assert_ptr_null(rill_vm_create(NULL, m, device, &c.vm));
  uint64_t seed = 7;
  for (int k = 0; k < THREADS; k++) {
    /* thread 0's inputs are the common ones, at batch 8; the others 1..8 */
    int64_t b = k == 0 ? 8 : 1 + k % 8;
    rill_type_t t = {RILL_F32, 2, {b, 4}};
    float v[32];
    for (int i = 0; i < b * 4; i++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      v[i] = (float)((int)(seed >> 40) % 2001 - 1000) / 500.0f;
    }
    c.bytes[k] = (size_t)b * 4 * sizeof(float);
    ck_assert_ptr_null(rill_tensor_create(c.vm, &t, v, &c.own[k]));
  }
  c.common = c.own[0];
  for (int k = 0; k < THREADS; k++) { /* alone, interpreted */
    rill_tensor_t *in[2] = {c.own[k], c.own[k]}, **out;
    int n;
    ck_assert_ptr_null(rill_vm_invoke(c.vm, "main", in, 2, &out, &n));
    for (int r = 0; r < 2; r++) {
      c.want[k][r] = malloc(c.bytes[k]);
      ck_assert_ptr_null(rill_tensor_read(out[r], c.want[k][r], c.bytes[k]));
    }
    rill_results_free(c.vm, out, n);
  }
  ck_assert_ptr_null(rill_vm_set_graph_mode(c.vm, NULL, mode));
  pthread_t th[THREADS];
  worker_t w[THREADS];
  for (int k = 0; k < THREADS; k++) {
    w[k] = (worker_t){&c, k};
    ck_assert_int_eq(pthread_create(&th[k], NULL, work, &w[k]), 0);
  }
  for (int k = 0; k < THREADS; k++) pthread_join(th[k], NULL);
  ck_assert_int_eq(c.errors, 0);
  ck_assert_int_eq(c.bad, 0);
  if (mode != RILL_GRAPH_OFF) {
    rill_graph_info_t gi;
    ck_assert(rill_vm_graph_info(c.vm, "main", &gi));
    ck_assert_msg(gi.replays > 0, "graph mode replayed nothing: %s", gi.reason);
  }
  for (int k = 0; k < THREADS; k++) {
    rill_tensor_release(c.own[k]);
    free(c.want[k][0]);
    free(c.want[k][1]);
  }
  rill_vm_destroy(c.vm);
  rill_module_release(m);
}

/* On cpu always; on cuda too where a GPU is usable. */
static void run_devices(rill_graph_mode_t mode) {
  run_shared("cpu", mode);
  const char *why;
  if (rill_device_usable("cuda", &why)) run_shared("cuda", mode);
  else printf("cuda part skipped: %s\n", why);
}

START_TEST(threads_share_a_vm_interpreted) { run_devices(RILL_GRAPH_OFF); }
END_TEST

START_TEST(threads_share_a_vm_in_graph_mode) { run_devices(RILL_GRAPH_ON); }
END_TEST

int main(void) {
  Suite *s = suite_create("threads");
  add_test_case(s, threads_share_a_vm_interpreted, 300);
  add_test_case(s, threads_share_a_vm_in_graph_mode, 300);
  return run_suite(s);
}
