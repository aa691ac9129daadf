/* test_devices.c: several devices in one VM (cpu:0..3): programs over
 * devices against the same program on one device, interpreted and as
 * graphs; the assembler's and the verifier's device rules; the module
 * format's version for them; each cpu device's memory accounting; a
 * device's start in the background (rill_device_start). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "rill_config.h"
#include "isa/isa.h"
#include "vm/vm.h"

static const char *DEV4 = "cpu:0,cpu:1,cpu:2,cpu:3";

static rill_module_t *load_file(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", fixtures_dir(), name);
  uint8_t *b;
  size_t n;
  rill_status_t st = rill_assemble_file(NULL, path, NULL, &b, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  rill_module_t *m;
  st = rill_module_load(NULL, b, n, fixtures_dir(), &m);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  free(b);
  return m;
}

static rill_tensor_t *input(rill_vm_t *vm, uint32_t seed) {
  rill_type_t t = T(RILL_F32, 2, 4, 8);
  float v[32];
  for (int i = 0; i < 32; i++) v[i] = (float)(((i * 37 + (int)seed * 11) % 29) - 14) / 7.0f;
  rill_tensor_t *x;
  ck_assert(!rill_tensor_create(vm, &t, v, &x));
  return x;
}

static void run(rill_vm_t *vm, const char *fn, uint32_t seed, float out[32]) {
  rill_tensor_t *x = input(vm, seed), **r;
  int nr;
  rill_status_t st = rill_vm_invoke(vm, fn, &x, 1, &r, &nr);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert_int_eq(nr, 1);
  ck_assert(!rill_tensor_read(r[0], out, sizeof(float) * 32));
  rill_tensor_release(r[0]);
  free(r);
  rill_tensor_release(x);
}

START_TEST(four_devices_equal_one) {
  /* The fixture's @main spreads the work over four devices with copies and
   * events between them; @single is the same program on device 0. */
  rill_module_t *m = load_file("devices.vmasm");
  rill_vm_t *vm;
  rill_status_t st = rill_vm_create(NULL, m, DEV4, &vm);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert_int_eq(vm->dev->ndevices, 4);
  for (uint32_t seed = 0; seed < 4; seed++) {
    float a[32], b[32];
    run(vm, "main", seed, a);
    run(vm, "single", seed, b);
    ck_assert(!memcmp(a, b, sizeof a));
  }
  /* Graph mode: the capture spans the four devices' streams, and replays
   * give the interpreted results. */
  float want[32], got[32];
  ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
  for (uint32_t seed = 0; seed < 6; seed++) {
    run(vm, "single", seed, want);
    run(vm, "main", seed, got);
    ck_assert(!memcmp(want, got, sizeof got));
  }
  rill_graph_info_t gi;
  ck_assert(rill_vm_graph_info(vm, "main", &gi));
  ck_assert_int_ge(gi.instances, 1);
  ck_assert_uint_ge(gi.replays, 1);
  ck_assert_str_eq(gi.reason, "");
  /* The stream check at run time sees the cross-device copies ordered. */
  rill_vm_set_check_streams(vm, true);
  ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_OFF));
  run(vm, "main", 1, got);
  run(vm, "single", 1, want);
  ck_assert(!memcmp(want, got, sizeof got));
  rill_vm_destroy(vm);
  /* A VM with fewer devices than the module names is refused at create. */
  st = rill_vm_create(NULL, m, "cpu:0,cpu:1", &vm);
  ck_assert(st && strstr(rill_status_message(st), "@main uses device 3, and the VM has 2 devices (cpu:0,cpu:1)"));
  rill_status_free(st);
  st = rill_vm_create(NULL, m, "cpu", &vm);
  ck_assert(st && strstr(rill_status_message(st), "uses device 3"));
  rill_status_free(st);
  rill_module_release(m);
}
END_TEST

/* Program over two devices: device 0 scales, device 1 runs a relu, device 0 adds. */
static const char TWO[] =
    "func @main(%x: f32[4,8]) -> f32[4,8] {\n  %a = mul(%x, 3.0)\n  add_event(0)\n  set_stream(1, device=1)\n  wait_event(0)\n"
    "  %b = copy(%a) {device=1}\n  %r = relu(%b)\n  add_event(1)\n  set_stream(0)\n  wait_event(1)\n  %back = copy(%r) {device=0}\n"
    "  %y = add(%back, %x)\n  return %y\n}\n";

static rill_vm_t *vm_of(const uint8_t *b, size_t n, const char *device, rill_module_t **m) {
  ck_assert(!rill_module_load(NULL, b, n, ".", m));
  rill_vm_t *vm;
  rill_status_t st = rill_vm_create(NULL, *m, device, &vm);
  ck_assert_msg(!st, "%s: %s", device, rill_status_message(st));
  return vm;
}

static void near(const float *a, const float *b, int n) {
  for (int i = 0; i < n; i++) ck_assert_msg(fabsf(a[i] - b[i]) <= 1e-5f + 1e-5f * fabsf(b[i]), "element %d: %g against %g", i, a[i], b[i]);
}

START_TEST(gpus) {
  /* Several GPUs against the cpu devices (skipped below two GPUs). */
  rill_cuda_info_t ci;
  const char *why = NULL;
  if (!rill_cuda_info(&ci, &why) || ci.device_count < 2) {
    printf("several-GPU tests skipped: %s\n", why ? why : "fewer than two GPUs");
    return;
  }
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text(TWO, &b, &n));
  rill_module_t *mc, *mg, *mr;
  rill_vm_t *cpu = vm_of(b, n, "cpu:0,cpu:1", &mc), *gpu = vm_of(b, n, "cuda:0,cuda:1", &mg), *rev = vm_of(b, n, "cuda:1,cuda:0", &mr);
  for (uint32_t seed = 0; seed < 3; seed++) {
    float want[32], got[32];
    run(cpu, "main", seed, want);
    run(gpu, "main", seed, got);
    near(got, want, 32);
    run(rev, "main", seed, got);
    near(got, want, 32);
  }
  /* Graph mode over both GPUs: one graph whose nodes span them (device 1's
   * stream joins the capture through the event it waits for), replayed with
   * fresh inputs, against the cpu devices. */
  float want[32], got[32];
  for (int k = 0; k < 2; k++) {
    rill_vm_t *vm = k ? rev : gpu;
    ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
    for (uint32_t seed = 5; seed < 9; seed++) {
      run(cpu, "main", seed, want);
      run(vm, "main", seed, got);
      near(got, want, 32);
    }
    rill_graph_info_t gi;
    ck_assert(rill_vm_graph_info(vm, "main", &gi));
    ck_assert_msg(gi.replays >= 2 && !gi.reason[0], "replays %llu: %s", (unsigned long long)gi.replays, gi.reason);
  }
  rill_vm_destroy(rev);
  rill_vm_destroy(gpu);
  rill_vm_destroy(cpu);
  rill_module_release(mr);
  rill_module_release(mg);
  rill_module_release(mc);
  free(b);
  if (ci.device_count >= 4) { /* the fixture's four devices */
    rill_module_t *m = load_file("devices.vmasm");
    rill_vm_t *vm;
    rill_status_t st = rill_vm_create(NULL, m, "cuda:0,cuda:1,cuda:2,cuda:3", &vm);
    ck_assert_msg(!st, "%s", rill_status_message(st));
    run(vm, "main", 1, got);
    run(vm, "single", 1, want);
    near(got, want, 32);
    rill_vm_destroy(vm);
    rill_module_release(m);
  }
}
END_TEST

START_TEST(device_lists) {
  const char *why;
  ck_assert(rill_device_usable("cpu:0", &why));
  ck_assert(rill_device_usable("cpu:0,cpu:1,cpu:2,cpu:3", &why));
  const char *bad[][2] = {
      {"cpu:1", "in order"}, {"cpu:0,cpu:0", "in order"}, {"cpu:0,cuda:1", "all cpu or all cuda"},
      {"cpu,cpu", "with their numbers"}, {"cpu:0,", "unknown device"}, {"cpu:x", "unknown device"}, {"gpu:0", "unknown device"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    why = NULL;
    ck_assert_msg(!rill_device_usable(bad[i][0], &why), "%s accepted", bad[i][0]);
    ck_assert_msg(why && strstr(why, bad[i][1]), "%s: %s", bad[i][0], why ? why : "(null)");
  }
}
END_TEST

START_TEST(assembly_errors) {
  const char *head = "func @main(%x: f32[4]) -> f32[4] {\n  %a = relu(%x)\n";
  char src[1024];
  /* a use on another device without a copy */
  snprintf(src, sizeof src, "%s  add_event(0)\n  set_stream(1, device=1)\n  wait_event(0)\n  %%c = mul(%%a, 2.0)\n  set_stream(0)\n  return %%a\n}\n", head);
  expect_asm_error(src, 6, "%a lives on device 0 (made on stream 0) and is used on device 1 (stream 1) without a copy");
  /* a copy without the event that orders it */
  snprintf(src, sizeof src, "%s  set_stream(1, device=1)\n  %%b = copy(%%a) {device=1}\n  add_event(1)\n  set_stream(0)\n  wait_event(1)\n"
           "  %%d = copy(%%b) {device=0}\n  return %%d\n}\n", head);
  expect_asm_error(src, 4, "%a is produced on stream 0 (device 0) and copied to device 1 on stream 1 without an event");
  /* a parameter is on device 0 */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  %b = relu(%x)\n  set_stream(0)\n  return %x\n}\n", 3,
                   "%x lives on device 0 (a parameter) and is used on device 1 (stream 1) without a copy");
  /* results are on device 0 */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  %b = copy(%x) {device=1}\n  add_event(0)\n  set_stream(0)\n"
                   "  wait_event(0)\n  return %b\n}\n", 7, "%b lives on device 1 (made on stream 1); results are on device 0");
  /* a stream keeps its device; stream 0 is device 0's */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  set_stream(1, device=2)\n  return %x\n}\n", 3,
                   "stream 1 is on device 1 (from line 2)");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  add_event(0, 1)\n  set_stream(1, device=2)\n  return %x\n}\n", 3,
                   "stream 1 is on device 0 (from line 2)");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(0, device=1)\n  return %x\n}\n", 2, "stream 0 is the stream the function was called on");
  /* a copy is issued on its target device's stream */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  %b = copy(%x) {device=2}\n  set_stream(0)\n  return %x\n}\n", 3,
                   "copy(...) {device=2} is issued on a stream of device 2; the current stream 1 is on device 1");
  /* malformed forms */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, dev=1)\n  return %x\n}\n", 2, "set_stream takes device=D");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=64)\n  return %x\n}\n", 2, "expected a device number 0..63");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=%x)\n  return %x\n}\n", 2, "expected a number after 'device='");
  expect_asm_error("func @f(%x: f32[4]) -> f32[4] {\n  return %x\n}\nfunc @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n"
                   "  %b = copy(%x) {device=1}\n  %y = call @f(%b)\n  set_stream(0)\n  return %x\n}\n", 7, "calls, if and while are issued on device 0's streams");
}
END_TEST

/* The words of function 0's nth (from 0) instruction with opcode op. */
static uint32_t *find_insn(isa_module_t *m, isa_opcode_t op, int nth) {
  isa_func_t *f = &m->funcs[0];
  isa_insn_t in;
  const char *why;
  for (uint32_t pc = 0; pc < f->ncode && isa_decode(f->code, f->ncode, pc, &in, &why); pc += in.len)
    if (in.op == op && !nth--) return f->code + pc;
  ck_abort_msg("no %s", isa_opinfo[op].mnemonic);
  return NULL;
}

START_TEST(format_and_verifier) {
  char path[4096];
  snprintf(path, sizeof path, "%s/devices.vmasm", fixtures_dir());
  uint8_t *b;
  size_t n;
  ck_assert(!rill_assemble_file(NULL, path, NULL, &b, &n));
  /* A module with the devices' instructions is 1.4; one without is written as before. */
  ck_assert_int_eq(b[10], 4);
  uint8_t *b1;
  size_t n1;
  ck_assert(!asm_text("func @main(%x: f32[2]) -> f32[2] {\n  set_stream(1)\n  %y = relu(%x)\n  add_event(0)\n  set_stream(0)\n"
                      "  wait_event(0)\n  return %y\n}\n", &b1, &n1));
  ck_assert_int_eq(b1[10], 2);
  free(b1);
  /* Every truncation fails cleanly; every byte flipped is refused, or loads and disassembles. */
  check_damaged_module(b, n, (const uint8_t[]){0x41}, 1);
  /* The verifier checks every device operand. */
  struct {
    isa_opcode_t op;
    int nth, word;
    uint32_t value;
    const char *want;
  } damage[] = {
      {ISA_OP_COPY_DEVICE, 0, 3, 70, "device 70 not below 64"},
      {ISA_OP_COPY_DEVICE, 0, 3, 2, "copy_device from device 2 of %s, which lives on device 0"},
      {ISA_OP_CUDA_SET_DEVICE_STREAM, 0, 1, 70, "device 70 not below 64"},
      {ISA_OP_CUDA_SET_DEVICE_STREAM, 1, 2, 1, "a stream is given two devices"},
      {ISA_OP_CUDA_SET_DEVICE_STREAM, 0, 2, 0, "stream 0 (the stream the function was called on) is on device 0"},
      {ISA_OP_CUDA_SET_DEVICE_STREAM, 0, 1, 2, "copy_device from device 1 of %s1, which lives on device 2"},
  };
  for (size_t i = 0; i < sizeof damage / sizeof damage[0]; i++) {
    isa_module_t *m;
    ck_assert(!isa_read(rill_allocator_system(), b, n, &m));
    ck_assert(!isa_verify(m, &ops_resolver));
    find_insn(m, damage[i].op, damage[i].nth)[damage[i].word] = damage[i].value;
    rill_status_t st = isa_verify(m, &ops_resolver);
    ck_assert_msg(st && strstr(rill_status_message(st), damage[i].want), "case %zu: %s", i, st ? rill_status_message(st) : "accepted");
    ck_assert_int_eq(rill_status_code(st), RILL_VERIFY_ERROR);
    rill_status_free(st);
    isa_module_free(m);
  }
  /* In lowered text too: a read of another device's value, and a call on a stream of device 1. */
  const char *lowered[][2] = {
      {"op $0 = relu(f32[2]) -> (f32[2])\nfunc @main(%x: f32[2]) -> (f32[2]) lowered(streams=2, events=1) {\n  reg %y : f32[2]\n"
       "  cuda_add_event 0, 0\n  cuda_set_device_stream 1, 1\n  cuda_wait_event 0, 1\n  alloc_tensor %y\n  invoke $0, (%x), (%y)\n"
       "  cuda_add_event 0, 1\n  cuda_set_stream 0\n  cuda_wait_event 0, 0\n  return (%x)\n}\n",
       "%x lives on device 0 and is used on device 1 (stream 1) without a copy_device"},
      {"func @f(%x: f32[2]) -> (f32[2]) lowered(streams=1, events=0) {\n  return (%x)\n}\n"
       "func @main(%x: f32[2]) -> (f32[2]) lowered(streams=2, events=0) {\n  reg %y : f32[2]\n  cuda_set_device_stream 1, 1\n"
       "  call @f, (%x), (%y)\n  cuda_set_stream 0\n  return (%x)\n}\n",
       "a call on stream 1 of device 1"},
  };
  for (size_t i = 0; i < sizeof lowered / sizeof lowered[0]; i++) {
    uint8_t *lb = NULL;
    size_t ln;
    rill_status_t st = asm_text(lowered[i][0], &lb, &ln);
    ck_assert_msg(st && strstr(rill_status_message(st), lowered[i][1]), "%zu: %s", i, st ? rill_status_message(st) : "accepted");
    rill_status_free(st);
    free(lb);
  }
  /* A copy's source must be ordered before it: drop the wait that does. */
  isa_module_t *m;
  ck_assert(!isa_read(rill_allocator_system(), b, n, &m));
  uint32_t *w = find_insn(m, ISA_OP_CUDA_SET_DEVICE_STREAM, 0);
  w[3] = ISA_OP_NOP; w[4] = ISA_OP_NOP; w[5] = ISA_OP_NOP; /* the wait_event 0, 1 after it */
  ck_assert_int_eq(w[0], ISA_OP_CUDA_SET_DEVICE_STREAM);
  rill_status_t st = isa_verify(m, &ops_resolver);
  ck_assert_msg(st && strstr(rill_status_message(st), "%s (device 0) copied on stream 1 (device 1) without an event"), "%s",
                st ? rill_status_message(st) : "accepted");
  rill_status_free(st);
  isa_module_free(m);
  free(b);
}
END_TEST

START_TEST(cpu_memory_per_device) {
  vm_device_t *d;
  ck_assert(!vm_device_cpu_create_n(rill_allocator_system(), 3, NULL, &d));
  int s0, s2;
  ck_assert(!d->ops->stream_acquire(d, &s0));
  ck_assert(!d->ops->stream_acquire_on(d, 2, &s2));
  void *p;
  ck_assert(!d->ops->alloc(d, s2, 1000, &p));
  ck_assert_uint_eq(d->ops->device_held(d, 2), 1000);
  ck_assert_uint_eq(d->ops->device_held(d, 0), 0);
  /* freed on another device's stream, it is counted back to its own */
  d->ops->free(d, s0, p, 1000);
  ck_assert_uint_eq(d->ops->device_held(d, 2), 0);
  int s;
  rill_status_t st = d->ops->stream_acquire_on(d, 3, &s);
  ck_assert(st && strstr(rill_status_message(st), "no device 3"));
  rill_status_free(st);
  d->ops->stream_release(d, s0);
  d->ops->stream_release(d, s2);
  d->ops->destroy(d);
}
END_TEST

/* A part's count in the start-up timings (0: not recorded). */
static long timing_count(const char *name) {
  rill_timing_t t[96];
  int n = rill_timings(t, 96);
  for (int i = 0; i < n && i < 96; i++)
    if (!strcmp(t[i].name, name)) return t[i].count;
  return 0;
}

/* rill_device_start: cpu devices and NULL start nothing and succeed; a
 * malformed device is refused with rill_device_usable's reason; a cuda
 * device starts once however often asked (one thread, one "background"
 * part). Without a usable GPU the device is said unusable as before (the
 * check ends the start: nothing left running, no hang); with one, the VM
 * waits for the start, takes its context over and runs. */
START_TEST(device_start) {
  const char *why = "unset";
  ck_assert(rill_device_start("cpu", &why) && !why);
  ck_assert(rill_device_start("cpu:0,cpu:1", &why) && !why);
  ck_assert(rill_device_start(NULL, &why) && !why);
  ck_assert(!rill_device_start("tpu", &why) && why && strstr(why, "unknown device"));
  ck_assert(!rill_device_start("cpu:0,cuda:1", &why) && why && strstr(why, "all cpu or all cuda"));
  ck_assert(!rill_device_start("cuda:0,cuda:0", NULL));
  rill_timings_reset();
  rill_timings_record(true);
  why = "unset";
  ck_assert(rill_device_start("cuda", &why) && !why);
  ck_assert(rill_device_start("cuda:0", NULL)); /* started already: nothing more */
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text("func @main(%x: f32[4,8]) -> f32[4,8] {\n  %y = relu(%x)\n  return %y\n}\n", &b, &n));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  rill_vm_t *vm = NULL;
  if (!rill_device_usable("cuda", &why)) {
    printf("device_start: cuda unusable (%s): its start ended, the VM refused\n", why);
    rill_status_t st = rill_vm_create(NULL, m, "cuda", &vm);
    ck_assert(st && rill_status_code(st) == RILL_UNAVAILABLE && strstr(rill_status_message(st), "device cuda: "));
    rill_status_free(st);
  } else {
    rill_status_t st = rill_vm_create(NULL, m, "cuda", &vm);
    ck_assert_msg(!st, "%s", rill_status_message(st));
    ck_assert_int_eq(timing_count("vm/device/wait for the start"), 1);
    ck_assert_int_eq(timing_count("background/context"), 1);
    rill_module_t *cm;
    rill_vm_t *cpu = vm_of(b, n, "cpu", &cm);
    float want[32], got[32];
    run(cpu, "main", 3, want);
    run(vm, "main", 3, got);
    near(got, want, 32);
    rill_vm_destroy(cpu);
    rill_module_release(cm);
    rill_vm_destroy(vm);
  }
  ck_assert_int_eq(timing_count("background"), RILL_HAVE_CUDA ? 1 : 0);
  rill_timings_record(false);
  rill_timings_reset();
  rill_module_release(m);
  free(b);
}
END_TEST

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

/* A process that starts cuda devices and exits at once, with no VM made:
 * the start is joined and released at exit, so the exit is clean (status
 * 0, no leak under LeakSanitizer) and prompt. (Not under ThreadSanitizer,
 * which refuses threads in a child forked from threads.) */
START_TEST(device_start_then_exit) {
#ifdef UNDER_TSAN
  printf("device_start_then_exit: skipped under ThreadSanitizer\n");
#else
  fflush(NULL);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    bool ok = rill_device_start("cuda:0,cuda:1", NULL) && rill_device_start("cuda", NULL);
    exit(ok ? 0 : 3);
  }
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < 6000 && !(got = waitpid(pid, &status, WNOHANG)); i++) nanosleep(&(struct timespec){0, 10000000}, NULL);
  if (!got) kill(pid, SIGKILL), waitpid(pid, &status, 0);
  ck_assert_msg(got == pid, "the process did not exit within 60 s");
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
#endif
}
END_TEST

int main(void) {
  Suite *s = suite_create("devices");
  add_test_case(s, four_devices_equal_one, 120);
  add_test_case(s, device_lists, 30);
  add_test_case(s, gpus, 300);
  add_test_case(s, assembly_errors, 30);
  add_test_case(s, format_and_verifier, 60);
  add_test_case(s, cpu_memory_per_device, 30);
  add_test_case(s, device_start, 300);
  add_test_case(s, device_start_then_exit, 90);
  return run_suite(s);
}
