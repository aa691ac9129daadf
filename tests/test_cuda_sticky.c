/* test_cuda_sticky.c: a run that faults on the GPU (a wrapped device pointer
 * that is not mapped) ends with CUDA's error instead of hanging, whether it
 * was invoked synchronously or on a loop with other runs waiting, and the VM
 * can still be destroyed. A sticky CUDA error spoils the process's context,
 * so this lives apart from the other GPU tests and runs in its own process.
 * Without a usable GPU it says why and skips. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "helpers.h"

typedef struct outcome {
  rill_vm_t *vm;
  int calls;
  rill_code_t code;
  char msg[512];
} outcome_t;

static void on_done(void *user, rill_status_t st, rill_tensor_t **results, int n) {
  outcome_t *o = user;
  o->calls++;
  o->code = rill_status_code(st);
  snprintf(o->msg, sizeof o->msg, "%s", st ? rill_status_message(st) : "");
  rill_results_free(o->vm, results, n);
  rill_status_free(st);
}

static bool names_the_fault(const char *msg) {
  return strstr(msg, "illegal") || strstr(msg, "ILLEGAL") || strstr(msg, "CUDA_ERROR");
}

START_TEST(fault_ends_runs) {
  const char *why = NULL;
  if (!rill_device_usable("cuda", &why)) {
    printf("GPU tests skipped: %s\n", why);
    return;
  }
  /* A loop of host waits around the faulting op, so the fault lands while
   * runs wait for the device. */
  const char *src = "func @c(%i: f32[], %v: f32[4096]) -> bool[] {\n  %k = lt(%i, 50.0)\n  return %k\n}\n"
                    "func @b(%i: f32[], %v: f32[4096]) -> (f32[], f32[4096]) {\n  %j = add(%i, 1.0)\n  %w = mul(%v, 1.5)\n"
                    "  return %j, %w\n}\n"
                    "func @main(%i: f32[], %v: f32[4096], %bad: f32[4096]) -> f32[4096] {\n"
                    "  %a, %r = while(@c, @b, %i, %v)\n  %y = add(%r, %bad)\n  return %y\n}\n";
  uint8_t *bytes;
  size_t size;
  ck_assert(!asm_text(src, &bytes, &size));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, bytes, size, ".", &m));
  free(bytes);
  rill_vm_t *vm;
  rill_status_t st = rill_vm_create(NULL, m, "cuda", &vm);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");

  rill_type_t ti, tv;
  ck_assert(rill_module_param_type(m, "main", 0, &ti, NULL));
  ck_assert(rill_module_param_type(m, "main", 1, &tv, NULL));
  float zero = 0, *v = calloc(4096, sizeof(float));
  rill_tensor_t *in[3];
  ck_assert(!rill_tensor_create(vm, &ti, &zero, &in[0]));
  ck_assert(!rill_tensor_create(vm, &tv, v, &in[1]));
  /* Far below any allocation the driver hands out, and aligned for vector loads. */
  ck_assert(!rill_tensor_wrap(vm, &tv, (void *)(uintptr_t)0x100000, NULL, NULL, &in[2]));

  /* Two runs in flight on one loop: both must end, each with an error. */
  uv_loop_t loop;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  outcome_t o[2] = {{.vm = vm}, {.vm = vm}};
  for (int k = 0; k < 2; k++) ck_assert(!rill_vm_invoke_async(vm, &loop, "main", in, 3, on_done, &o[k]));
  uv_run(&loop, UV_RUN_DEFAULT);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(o[k].calls, 1);
    ck_assert_int_ne(o[k].code, RILL_OK);
    ck_assert_msg(names_the_fault(o[k].msg), "run %d: %s", k, o[k].msg);
  }

  /* The synchronous path on the spoilt context fails too, without hanging. */
  rill_tensor_t **r = NULL;
  int n = 0;
  st = rill_vm_invoke(vm, "main", in, 3, &r, &n);
  ck_assert_msg(st != NULL, "a run on a failed context succeeded");
  rill_status_free(st);

  for (int k = 0; k < 3; k++) rill_tensor_release(in[k]);
  free(v);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

int main(void) { return run_one_test("cuda-sticky", fault_ends_runs, 120); }
