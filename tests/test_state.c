/* test_state.c: states (module `state` declarations) and `update`: their
 * first contents, updates at offsets (one for every row and one per index
 * of axis 0, out of range an error), persistence across runs and per VM,
 * graph mode, the stream check around updates at assembly and at run time,
 * every schedule policy, the bytecode section (round trips, damage), the
 * assembler's errors, and a cache split like the batch by --data-parallel
 * (the device form on 2, 3 and 8 cpu devices) across runs. On the cpu device and, where a GPU is usable, cuda. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

static const char *devices[2];
static int ndevices;

static void pick_devices(void) {
  if (!ndevices) ndevices = test_devices("test_state", devices);
}

static rill_module_t *load_src_opts(const char *path, const char *src, const rill_asm_options_t *o) {
  uint8_t *b;
  size_t n;
  rill_status_t st = rill_assemble(NULL, path, src, strlen(src), o, &b, &n);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_module_t *m;
  st = rill_module_load(NULL, b, n, ".", &m);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  free(b);
  return m;
}
static rill_module_t *load_src(const char *src) { return load_src_opts("t.vmasm", src, NULL); }

static rill_vm_t *vm_on(rill_module_t *m, const char *dev) {
  rill_vm_t *vm;
  rill_status_t st = rill_vm_create(NULL, m, dev, &vm);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  return vm;
}

static rill_tensor_t *tens(rill_vm_t *vm, rill_type_t t, const double *vals) {
  size_t n = rill_type_numel(&t);
  uint8_t *buf = calloc(n * rill_dtype_size(t.dtype) + 1, 1);
  for (size_t i = 0; i < n; i++) rill_element_set(t.dtype, buf, i, vals[i]);
  rill_tensor_t *x;
  ck_assert(!rill_tensor_create(vm, &t, buf, &x));
  free(buf);
  return x;
}

/* Runs fn (results read as doubles into out, result 0 only); the status. */
static rill_status_t call(rill_vm_t *vm, const char *fn, rill_tensor_t **in, int nin, double *out, size_t nout) {
  rill_tensor_t **res;
  int nres;
  rill_status_t st = rill_vm_invoke(vm, fn, in, nin, &res, &nres);
  if (st) return st;
  if (nres && out) {
    const rill_type_t *t = rill_tensor_type(res[0]);
    size_t bytes = rill_tensor_nbytes(res[0]);
    uint8_t *buf = malloc(bytes + 1);
    ck_assert(!rill_tensor_read(res[0], buf, bytes));
    ck_assert_uint_eq(rill_type_numel(t), nout);
    for (size_t i = 0; i < nout; i++) out[i] = rill_element_get(t->dtype, buf, i);
    free(buf);
  }
  rill_results_free(vm, res, nres);
  return NULL;
}

static void release_all(rill_tensor_t **t, int n) {
  for (int i = 0; i < n; i++) rill_tensor_release(t[i]);
}

/* A cpu VM running src under --check-streams, and @main's inputs x = 1..4, p = 0. */
static rill_vm_t *checked_vm(const char *src, rill_module_t **m, rill_tensor_t **in) {
  *m = load_src(src);
  rill_vm_t *vm = vm_on(*m, "cpu");
  rill_vm_set_check_streams(vm, true);
  in[0] = tens(vm, T(RILL_F32, 1, 4), (double[]){1, 2, 3, 4});
  in[1] = tens(vm, T(RILL_I64, 0), (double[]){0});
  return vm;
}

/* ---- first contents ---- */
static void write_safetensors(const char *path) {
  float v[6] = {1.5f, -2, 3, 4.25f, 5, -6};
  const char *hdr = "{\"init\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
  uint64_t len = strlen(hdr);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert(fwrite(&len, 8, 1, f) == 1 && fwrite(hdr, len, 1, f) == 1 && fwrite(v, sizeof v, 1, f) == 1);
  fclose(f);
}

static const char *INIT_SRC =
    "weights \"w.safetensors\" as w\n"
    "const %seven : i32[4] = fill(7)\n"
    "state %z : f32[2,3]\n"
    "state %w : f32[2,3] = w[\"init\"]\n"
    "state %f : i32[4] = %seven\n"
    "func @main() -> (f32[2,3], f32[2,3], i32[4]) {\n"
    "  %a = copy(%z)\n"
    "  %b = copy(%w)\n"
    "  %c = copy(%f)\n"
    "  return %a, %b, %c\n"
    "}\n";

START_TEST(init_zeros_and_weights) {
  pick_devices();
  char dir[] = "/tmp/rill_state_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char wpath[256], spath[256];
  snprintf(wpath, sizeof wpath, "%s/w.safetensors", dir);
  snprintf(spath, sizeof spath, "%s/p.vmasm", dir);
  write_safetensors(wpath);
  const double want_w[6] = {1.5, -2, 3, 4.25, 5, -6};
  for (int opt = 0; opt < 2; opt++) {
    rill_asm_options_t o = {0};
    o.no_opt = opt == 0;
    rill_module_t *m = load_src_opts(spath, INIT_SRC, &o);
    for (int d = 0; d < ndevices; d++) {
      rill_vm_t *vm = vm_on(m, devices[d]);
      rill_tensor_t **res;
      int nres;
      rill_status_t st = rill_vm_invoke(vm, "main", NULL, 0, &res, &nres);
      ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
      ck_assert_int_eq(nres, 3);
      float a[6], b[6];
      int32_t c[4];
      ck_assert(!rill_tensor_read(res[0], a, sizeof a));
      ck_assert(!rill_tensor_read(res[1], b, sizeof b));
      ck_assert(!rill_tensor_read(res[2], c, sizeof c));
      for (int i = 0; i < 6; i++) {
        ck_assert_float_eq(a[i], 0);
        ck_assert_float_eq(b[i], (float)want_w[i]);
      }
      for (int i = 0; i < 4; i++) ck_assert_int_eq(c[i], 7);
      rill_results_free(vm, res, nres);
      rill_vm_destroy(vm);
    }
    /* The weights-initialised state prints as a constant and `= %CONST`, which reassembles to the same bytes. */
    char *txt;
    size_t tl;
    ck_assert(!rill_module_disassemble(m, &txt, &tl));
    ck_assert_ptr_nonnull(strstr(txt, "state %w : f32[2,3] = %w.init"));
    ck_assert_ptr_nonnull(strstr(txt, "const %w.init : f32[2,3] = w[\"init\"]"));
    ck_assert_ptr_nonnull(strstr(txt, "state %z : f32[2,3]\n"));
    ck_assert_ptr_nonnull(strstr(txt, "# lowered form, bytecode 1."));
    uint8_t *b1, *b2;
    size_t n1, n2;
    ck_assert(!rill_assemble(NULL, spath, INIT_SRC, strlen(INIT_SRC), &o, &b1, &n1));
    rill_status_t st = rill_assemble(NULL, spath, txt, tl, NULL, &b2, &n2);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    ck_assert_uint_eq(n1, n2);
    ck_assert(!memcmp(b1, b2, n1));
    ck_assert_int_eq(b1[10], 6); /* minor version 6: states */
    free(b1);
    free(b2);
    free(txt);
    rill_module_release(m);
  }
  unlink(wpath);
  rmdir(dir);
}
END_TEST

/* ---- updates at offsets ---- */
/* A cache [2,5,3] written along axis 1 by x [2,2,3]: pos [] or [2]. */
static const char *UPD_SRC =
    "state %c : f32[2,5,3]\n"
    "func @put(%x: f32[2,2,3], %p: i64[]) -> f32[2,5,3] {\n"
    "  update(%c, %x, %p) {axis=1}\n"
    "  %r = copy(%c)\n"
    "  return %r\n"
    "}\n"
    "func @put_rows(%x: f32[2,2,3], %p: i32[2]) -> f32[2,5,3] {\n"
    "  update(%c, %x, %p) {axis=-2}\n"
    "  %r = copy(%c)\n"
    "  return %r\n"
    "}\n"
    "func @read() -> f32[2,5,3] {\n"
    "  %r = copy(%c)\n"
    "  return %r\n"
    "}\n";

/* ref := ref with x at pos[b] along axis 1 for row b (pos0 >= 0: every row). */
static void ref_put(double *ref, const double *x, const long *pos) {
  for (int b = 0; b < 2; b++)
    for (int t = 0; t < 2; t++)
      for (int k = 0; k < 3; k++) ref[(b * 5 + pos[b] + t) * 3 + k] = x[(b * 2 + t) * 3 + k];
}

START_TEST(update_offsets) {
  pick_devices();
  rill_module_t *m = load_src(UPD_SRC);
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *vm = vm_on(m, devices[d]);
    double ref[30] = {0}, got[30], x[12];
    int step = 0;
    /* every row at 0, at 3 (the last place two fit), then rows apart */
    const long every[][2] = {{0, 0}, {3, 3}};
    for (int k = 0; k < 2; k++, step++) {
      for (int i = 0; i < 12; i++) x[i] = 100 * (step + 1) + i;
      rill_tensor_t *in[2] = {tens(vm, T(RILL_F32, 3, 2, 2, 3), x), tens(vm, T(RILL_I64, 0), (double[]){(double)every[k][0]})};
      rill_status_t st = call(vm, "put", in, 2, got, 30);
      ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
      ref_put(ref, x, every[k]);
      for (int i = 0; i < 30; i++) ck_assert_msg(got[i] == ref[i], "%s put %d: element %d %g, want %g", devices[d], k, i, got[i], ref[i]);
      release_all(in, 2);
    }
    const long rows[][2] = {{1, 3}, {2, 0}};
    for (int k = 0; k < 2; k++, step++) {
      for (int i = 0; i < 12; i++) x[i] = 100 * (step + 1) + i;
      rill_tensor_t *in[2] = {tens(vm, T(RILL_F32, 3, 2, 2, 3), x), tens(vm, T(RILL_I32, 1, 2), (double[]){(double)rows[k][0], (double)rows[k][1]})};
      rill_status_t st = call(vm, "put_rows", in, 2, got, 30);
      ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
      ref_put(ref, x, rows[k]);
      for (int i = 0; i < 30; i++) ck_assert_msg(got[i] == ref[i], "%s put_rows %d: element %d %g, want %g", devices[d], k, i, got[i], ref[i]);
      release_all(in, 2);
    }
    /* Out of range: past the end, negative, one row of two: a run-time error
     * (which, like any kernel's, ends that VM's device). */
    for (int k = 0; k < 3; k++) {
      rill_vm_t *ev = vm_on(m, devices[d]);
      for (int i = 0; i < 12; i++) x[i] = -1;
      rill_tensor_t *in[2] = {tens(ev, T(RILL_F32, 3, 2, 2, 3), x), NULL};
      rill_status_t st;
      if (k < 2) {
        in[1] = tens(ev, T(RILL_I64, 0), (double[]){k == 0 ? 4 : -1});
        st = call(ev, "put", in, 2, NULL, 0);
      } else {
        in[1] = tens(ev, T(RILL_I32, 1, 2), (double[]){0, 4});
        st = call(ev, "put_rows", in, 2, NULL, 0);
      }
      ck_assert_msg(st != NULL, "%s: offset case %d ran", devices[d], k);
      ck_assert_int_eq(rill_status_code(st), RILL_RUNTIME_ERROR);
      ck_assert_msg(strstr(rill_status_message(st), "update") != NULL, "%s", rill_status_message(st));
      if (!strcmp(devices[d], "cpu")) ck_assert_msg(strstr(rill_status_message(st), "outside the state's 0..5") != NULL, "%s", rill_status_message(st));
      rill_status_free(st);
      release_all(in, 2);
      rill_vm_destroy(ev);
    }
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}
END_TEST

/* The CPU kernel in place checks every offset before it writes any row. */
START_TEST(update_kernel_no_partial_write) {
  rill_type_t it[3] = {T(RILL_F32, 2, 2, 4), T(RILL_F32, 2, 2, 2), T(RILL_I64, 1, 2)}, ot[1];
  isa_attr_t at = attr_int("axis", 1);
  ops_plan_t plan;
  uint32_t nout;
  const ops_def_t *def = ops_find("update");
  ck_assert(!ops_infer(def, it, 3, &at, 1, ot, 1, &nout, &plan.p));
  isa_opdecl_t decl = {"update", 1, 3, 1, &at, it, ot};
  plan.def = def;
  plan.decl = &decl;
  float state[8] = {0}, x[4] = {1, 2, 3, 4};
  int64_t pos[2] = {1, 3};
  void *in[3] = {state, x, pos}, *out[1] = {state};
  rill_status_t st = def->cpu(&plan, in, out);
  ck_assert_msg(st && strstr(rill_status_message(st), "offset 3 (of a row) with 2 along axis 1 is outside the state's 0..4"), "%s",
                st ? rill_status_message(st) : "ran");
  rill_status_free(st);
  for (int i = 0; i < 8; i++) ck_assert_float_eq(state[i], 0);
  pos[1] = 2;
  ck_assert(!def->cpu(&plan, in, out));
  const float want[8] = {0, 1, 2, 0, 0, 0, 3, 4};
  for (int i = 0; i < 8; i++) ck_assert_float_eq(state[i], want[i]);
}
END_TEST

/* ---- across runs, per VM, graph mode ---- */
static const char *COUNT_SRC =
    "state %n : i64[1]\n"
    "const %zero : i64[] = 0\n"
    "func @step() -> i64[1] {\n"
    "  %v = add(%n, 1)\n"
    "  update(%n, %v, %zero) {axis=0}\n"
    "  %r = copy(%n)\n"
    "  return %r\n"
    "}\n";

START_TEST(persists_across_runs_per_vm) {
  pick_devices();
  rill_module_t *m = load_src(COUNT_SRC);
  for (int d = 0; d < ndevices; d++) {
    for (int graph = 0; graph < 2; graph++) {
      rill_vm_t *a = vm_on(m, devices[d]), *b = vm_on(m, devices[d]);
      if (graph) {
        ck_assert(!rill_vm_set_graph_mode(a, NULL, RILL_GRAPH_ON));
        ck_assert(!rill_vm_set_graph_mode(b, NULL, RILL_GRAPH_ON));
      }
      double got;
      for (int k = 1; k <= 4; k++) {
        rill_status_t st = call(a, "step", NULL, 0, &got, 1);
        ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
        ck_assert_msg(got == k, "%s graph=%d: run %d counted %g", devices[d], graph, k, got);
      }
      ck_assert(!call(b, "step", NULL, 0, &got, 1));
      ck_assert_msg(got == 1, "a second VM shares the first one's state (%g)", got);
      if (graph) {
        rill_graph_info_t gi;
        ck_assert(rill_vm_graph_info(a, "step", &gi));
        ck_assert_int_ge(gi.instances, 1);
        ck_assert_uint_ge(gi.replays, 4);
      }
      /* Back to the first contents. */
      ck_assert(!rill_vm_reset_states(a));
      ck_assert(!call(a, "step", NULL, 0, &got, 1));
      ck_assert_msg(got == 1, "after reset: %g", got);
      rill_vm_destroy(a);
      rill_vm_destroy(b);
    }
  }
  rill_module_release(m);
}
END_TEST

/* ---- data parallel: a decode step's cache split like the batch, across runs ---- */
/* %k [B=4, positions, dim] is split like the batch (docs/tensor_parallel.md,
 * "Data parallel"); %n is not batch-shaped, so every device holds it whole and
 * writes it alike. Each run writes one position of every row and reads all
 * the positions written so far. */
static const char *DP_STEP_SRC =
    "state %k : f32[4, 5, 8]\n"
    "state %n : f32[1]\n"
    "const %c : f32[8] = [0.5, -1, 0.25, 2, -0.75, 1.5, -0.125, 1]\n"
    "const %zero : i64[] = 0\n"
    "func @step(%x: f32[4, 8], %pos: i64[]) -> f32[4, 8] {\n"
    "  %h = mul(%x, %c)\n"
    "  %h3 = reshape(%h) {shape=[4, 1, 8]}\n"
    "  update(%k, %h3, %pos) {axis=1}\n"
    "  %s = sum(%k) {axes=[1]}\n"
    "  %n1 = add(%n, 1)\n"
    "  update(%n, %n1, %zero) {axis=0}\n"
    "  %t = tanh(%s)\n"
    "  %y = add(%t, %n)\n"
    "  return %y\n"
    "}\n";

/* Five runs of @step on vm, each run's result the next one's x; the results (5 x 32) in out. */
static void dp_steps(rill_vm_t *vm, double *out) {
  double x[32];
  for (int i = 0; i < 32; i++) x[i] = (i % 7) * 0.25 - 0.75;
  for (int r = 0; r < 5; r++) {
    rill_tensor_t *in[2] = {tens(vm, T(RILL_F32, 2, 4, 8), x), tens(vm, T(RILL_I64, 0), (double[]){r})};
    rill_status_t st = call(vm, "step", in, 2, out + 32 * r, 32);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    release_all(in, 2);
    memcpy(x, out + 32 * r, sizeof x);
  }
}

START_TEST(data_parallel_cache_across_runs) {
  rill_module_t *one = load_src(DP_STEP_SRC);
  rill_vm_t *vm = vm_on(one, "cpu");
  double want[5 * 32], got[5 * 32];
  dp_steps(vm, want);
  rill_vm_destroy(vm);
  rill_module_release(one);
  /* 2 devices (blocks of 2 rows), 3 (dealt round robin: 2, 1 and 1 row), 8 (4 of them a zero row only) */
  static const char *devs[] = {"cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2", "cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5,cpu:6,cpu:7"};
  static const int ns[] = {2, 3, 8};
  for (int k = 0; k < 3; k++) {
    rill_asm_options_t o = {.data_parallel = ns[k], .parallel_devices = true};
    rill_module_t *m = load_src_opts("dp.vmasm", DP_STEP_SRC, &o);
    /* split: the module's step uses every device (one device is refused) */
    rill_vm_t *alone;
    rill_status_t st = rill_vm_create(NULL, m, "cpu", &alone);
    ck_assert_msg(st && strstr(rill_status_message(st), "and the VM has 1 device"), "%s", st ? rill_status_message(st) : "one device took it");
    rill_status_free(st);
    for (int graph = 0; graph < 2; graph++) {
      vm = vm_on(m, devs[k]);
      if (graph) ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
      dp_steps(vm, got);
      for (int i = 0; i < 5 * 32; i++)
        ck_assert_msg(memcmp(&got[i], &want[i], sizeof(double)) == 0, "%d devices, graph=%d: run %d element %d: %.9g, one device %.9g", ns[k], graph, i / 32,
                      i % 32, got[i], want[i]);
      /* back to the first contents: the same runs again */
      ck_assert(!rill_vm_reset_states(vm));
      dp_steps(vm, got);
      ck_assert(memcmp(got, want, sizeof got) == 0);
      rill_vm_destroy(vm);
    }
    rill_module_release(m);
  }
}
END_TEST

/* ---- the stream check ---- */
START_TEST(stream_check_updates) {
  /* An update on stream 0 after a read on stream 1 with no event between. */
  expect_asm_error("state %s : f32[4]\n"
                   "func @main(%x: f32[4], %p: i64[]) -> f32[4] {\n"
                   "  set_stream(1)\n"
                   "  %a = add(%s, %x)\n"
                   "  set_stream(0)\n"
                   "  update(%s, %x, %p) {axis=0}\n"
                   "  return %x\n"
                   "}\n",
                   6, "state %s is read on stream 1 (line 4) and updated on stream 0 without an event");
  /* A read on stream 0 of what an update on stream 1 wrote. */
  expect_asm_error("state %s : f32[4]\n"
                   "func @main(%x: f32[4], %p: i64[]) -> f32[4] {\n"
                   "  set_stream(1)\n"
                   "  update(%s, %x, %p) {axis=0}\n"
                   "  set_stream(0)\n"
                   "  %a = add(%s, %x)\n"
                   "  return %a\n"
                   "}\n",
                   6, "%s is produced on stream 1 and used on stream 0 without an event");
  /* Two updates on two streams. */
  expect_asm_error("state %s : f32[4]\n"
                   "func @main(%x: f32[4], %p: i64[]) -> f32[4] {\n"
                   "  set_stream(1)\n"
                   "  update(%s, %x, %p) {axis=0}\n"
                   "  set_stream(0)\n"
                   "  update(%s, %x, %p) {axis=0}\n"
                   "  return %x\n"
                   "}\n",
                   6, "state %s is written on stream 1 and updated on stream 0 without an event");
  /* A call may update the state: after a read on another stream it needs the event too. */
  expect_asm_error("state %s : f32[4]\n"
                   "func @g() -> f32[4] {\n"
                   "  %c = copy(%s)\n"
                   "  return %c\n"
                   "}\n"
                   "func @main(%x: f32[4]) -> f32[4] {\n"
                   "  set_stream(1)\n"
                   "  %a = add(%s, %x)\n"
                   "  set_stream(0)\n"
                   "  %b = call @g()\n"
                   "  return %b\n"
                   "}\n",
                   10, "state %s is read on stream 1 (line 8) and may be updated by this call on stream 0 without an event");
  /* With the events it assembles, and runs clean under --check-streams. */
  const char *ok = "state %s : f32[4]\n"
                   "func @main(%x: f32[4], %p: i64[]) -> f32[4] {\n"
                   "  set_stream(1)\n"
                   "  %a = add(%s, %x)\n"
                   "  add_event(0)\n"
                   "  set_stream(0)\n"
                   "  wait_event(0)\n"
                   "  update(%s, %x, %p) {axis=0}\n"
                   "  add_event(1)\n"
                   "  set_stream(1)\n"
                   "  wait_event(1)\n"
                   "  %b = add(%s, %a)\n"
                   "  add_event(2)\n"
                   "  set_stream(0)\n"
                   "  wait_event(2)\n"
                   "  return %b\n"
                   "}\n";
  rill_module_t *m;
  rill_tensor_t *in[2];
  rill_vm_t *vm = checked_vm(ok, &m, in);
  double got[4];
  for (int run = 0; run < 2; run++) {
    rill_status_t st = call(vm, "main", in, 2, got, 4);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    /* b = (s_after + (s_before + x)); s_after = x */
    for (int i = 0; i < 4; i++) ck_assert_msg(got[i] == (i + 1) * (run ? 3 : 2), "run %d element %d: %g", run, i, got[i]);
  }
  release_all(in, 2);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* The lowered form skips the assembler's check; the verifier does not see a
 * write after a read on another stream, and --check-streams does. */
START_TEST(run_time_stream_check) {
  const char *src = "state %s : f32[4]\n"
                    "op $0 = add(f32[4], f32[4]) -> (f32[4])\n"
                    "op $1 = update(f32[4], f32[4], i64[]) -> (f32[4]) {axis=0}\n"
                    "func @main(%x: f32[4], %p: i64[]) -> (f32[4]) lowered(streams=2, events=1) {\n"
                    "  reg %st : f32[4]\n"
                    "  reg %a : f32[4]\n"
                    "  load_state %st, %s\n"
                    "  cuda_add_event 0, 0\n"
                    "  cuda_wait_event 0, 1\n"
                    "  cuda_set_stream 1\n"
                    "  alloc_tensor %a\n"
                    "  invoke $0, (%st, %x), (%a)\n"
                    "  cuda_set_stream 0\n"
                    "  invoke $1, (%st, %x, %p), (%st)\n"
                    "  cuda_add_event 0, 1\n"
                    "  cuda_wait_event 0, 0\n"
                    "  return (%a)\n"
                    "}\n";
  rill_module_t *m;
  rill_tensor_t *in[2];
  rill_vm_t *vm = checked_vm(src, &m, in);
  rill_status_t st = call(vm, "main", in, 2, NULL, 0);
  ck_assert_msg(st != NULL, "an unordered read and update ran clean");
  ck_assert_msg(strstr(rill_status_message(st), "update") && strstr(rill_status_message(st), "%st"), "%s", rill_status_message(st));
  rill_status_free(st);
  release_all(in, 2);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ---- every schedule policy keeps reads and updates in order ---- */
static const char *SCHED_MAIN =
    "state %c : f32[4,8]\n"
    "state %k : f32[4,8]\n"
    "const %c0 : i64[] = 0\n"
    "const %c3 : i64[] = 3\n"
    "const %c5 : i64[] = 5\n"
    "func @bump(%x: f32[4,1]) -> f32[4,1] {\n"
    "  %q = slice(%k) {starts=[0,2], ends=[4,3]}\n"
    "  %y = add(%q, %x)\n"
    "  update(%k, %y, %c5) {axis=1}\n"
    "  return %y\n"
    "}\n"
    "func @main(%x: f32[4,8], %p: i64[]) -> (f32[4,8], f32[4,8]) {\n"
    "  %a = mul(%c, %x)\n"
    "  %v = reshape(%c) {shape=[32]}\n"
    "  %b = sin(%x)\n"
    "  %d = exp(%b)\n"
    "  %e = add(%c, %d)\n"
    "  %s = sum(%v)\n"
    "  %col = slice(%e) {starts=[0,1], ends=[4,2]}\n"
    "  update(%c, %col, %p) {axis=1}\n"
    "  %f = mul(%c, %a)\n"
    "  %g = tanh(%f)\n"
    "  %h = slice(%g) {starts=[0,0], ends=[4,1]}\n"
    "  %hh = add(%h, %s)\n"
    "  %kk = mul(%k, %x)\n"
    "  update(%k, %hh, %c3) {axis=1}\n"
    "  %r = call @bump(%hh)\n"
    "  %m = mul(%k, 0.5)\n"
    "  %t = add(%kk, %m)\n"
    "  update(%c, %r, %c0) {axis=1}\n"
    "  %o = add(%c, %t)\n"
    "  %w = copy(%k)\n"
    "  return %o, %w\n"
    "}\n";

START_TEST(schedules_keep_state_order) {
  const char *policies[] = {"none", "wavefront", "asap", "rank", "ios"};
  double want[2][2][64];
  int nrun = 3;
  for (int opt = 0; opt < 2; opt++)
    for (size_t pi = 0; pi < sizeof policies / sizeof *policies; pi++)
      for (int ms = 1; ms <= 4; ms += 3) {
        rill_asm_options_t o = {0};
        o.schedule = policies[pi];
        o.max_streams = ms;
        o.no_opt = opt == 0;
        rill_module_t *m = load_src_opts("t.vmasm", SCHED_MAIN, &o);
        rill_vm_t *vm = vm_on(m, "cpu");
        rill_vm_set_check_streams(vm, true);
        double x[32];
        for (int i = 0; i < 32; i++) x[i] = 0.1 * (i % 7) - 0.3;
        for (int run = 0; run < nrun; run++) {
          rill_tensor_t *in[2] = {tens(vm, T(RILL_F32, 2, 4, 8), x), tens(vm, T(RILL_I64, 0), (double[]){run + 1})};
          rill_tensor_t **res;
          int nres;
          rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &res, &nres);
          ck_assert_msg(!st, "%s/%d -O%d: %s", policies[pi], ms, opt, st ? rill_status_message(st) : "");
          for (int r = 0; r < 2; r++) {
            float v[32];
            ck_assert(!rill_tensor_read(res[r], v, sizeof v));
            for (int i = 0; i < 32; i++) {
              if (pi == 0 && ms == 1 && run < 2) want[run][r][i] = v[i];
              else if (run < 2)
                ck_assert_msg(fabs(v[i] - want[run][r][i]) <= 1e-6 * (1 + fabs(want[run][r][i])),
                              "%s/%d -O%d run %d result %d element %d: %g, want %g", policies[pi], ms, opt, run, r, i, v[i], want[run][r][i]);
            }
          }
          rill_results_free(vm, res, nres);
          release_all(in, 2);
        }
        rill_vm_destroy(vm);
        rill_module_release(m);
      }
}
END_TEST

/* ---- the bytecode ---- */
START_TEST(bytecode_states_section) {
  const char *src = "const %one : f32[2] = fill(1)\n"
                    "state %a : f32[2] = %one\n"
                    "state %b : i32[3]\n"
                    "func @main(%x: f32[2], %p: i64[]) -> f32[2] {\n"
                    "  update(%a, %x, %p) {axis=0}\n"
                    "  %r = copy(%a)\n"
                    "  return %r\n"
                    "}\n";
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text(src, &b, &n));
  ck_assert_int_eq(b[10], 6);
  /* every truncation refused, every flipped byte refused or loading and printing */
  const uint8_t masks[] = {0x01, 0x80, 0xff};
  check_damaged_module(b, n, masks, 3);
  free(b);
  /* A module without states keeps its version. */
  ck_assert(!asm_text("func @main(%x: f32[2]) -> f32[2] {\n  return %x\n}\n", &b, &n));
  ck_assert_int_lt(b[10], 6);
  free(b);
  /* The lowered form's state lines: a state of a constant of another type, and unknown names. */
  expect_asm_error("const %one : f32[2] = fill(1)\nstate %a : f32[3] = %one\n", 2, "state %a is f32[3] but constant %one is f32[2]");
  expect_asm_error("state %a : f32[3] = %nope\n", 1, "unknown constant %nope");
  expect_asm_error("state %a : f32[3]\n"
                   "func @main() -> f32[3] lowered(streams=1, events=0) {\n"
                   "  reg %r : f32[3]\n"
                   "  load_state %r, %b\n"
                   "  return (%r)\n"
                   "}\n",
                   4, "expected a state such as %cache, found '%b'");
  /* load_state into a register of another type is a verification error. */
  uint8_t *bb;
  size_t nn;
  rill_status_t st = asm_text("state %a : f32[3]\n"
                              "func @main() -> f32[2] lowered(streams=1, events=0) {\n"
                              "  reg %r : f32[2]\n"
                              "  load_state %r, %a\n"
                              "  return (%r)\n"
                              "}\n",
                              &bb, &nn);
  ck_assert_msg(st && strstr(rill_status_message(st), "state %a has type f32[3], register has f32[2]"), "%s", st ? rill_status_message(st) : "ok");
  rill_status_free(st);
}
END_TEST

/* ---- the assembler's errors ---- */
START_TEST(parse_errors) {
  expect_asm_error("dim T in [1, 8]\nstate %k : f32[2,T]\n", 2, "symbolic dimension 'T': a state's type needs every dimension as a number");
  expect_asm_error("state %k : f32[2]\nstate %k : f32[2]\n", 2, "state %k is defined twice");
  expect_asm_error("const %k : f32[2] = fill(0)\nstate %k : f32[2]\n", 2, "state %k has the name of a constant");
  expect_asm_error("state %k : f32[2]\nconst %k : f32[2] = fill(0)\n", 2, "constant %k has the name of a state");
  expect_asm_error("state %k : f32[2] = 3\n", 1, "expected a state's initial value");
  expect_asm_error("state k : f32[2]\n", 1, "expected a state name such as %cache");
  expect_asm_error("state %k f32[2]\n", 1, "expected ':' and the state's type");
  const char *head = "state %k : f32[2,6,4]\nfunc @main(%x: f32[2,1,4], %p: i64[], %q: i64[2]) -> f32[2,6,4] {\n";
  char src[2048];
#define BODY(body) (snprintf(src, sizeof src, "%s%s  %%r = copy(%%k)\n  return %%r\n}\n", head, body), src)
  expect_asm_error(BODY("  update(%x, %x, %p) {axis=1}\n"), 3, "only states can be updated: %x is not a state");
  expect_asm_error(BODY("  %y = update(%k, %x, %p) {axis=1}\n"), 3, "update has no result");
  expect_asm_error(BODY("  update(%k, %x) {axis=1}\n"), 3, "update takes (%state, %x, %pos), 2 operands given");
  expect_asm_error(BODY("  update(%k, %x, %p)\n"), 3, "update: needs the attribute axis");
  expect_asm_error(BODY("  update(%k, %x, %p) {axis=2}\n"), 3, "x: expected the state's dtype and dims");
  expect_asm_error(BODY("  update(%k, %x, %q) {axis=0}\n"), 3, "needs an axis above 0");
  expect_asm_error(BODY("  update(%k, %x, %x) {axis=1}\n"), 3, "pos: expected an i32 or i64 tensor of shape [] or [2]");
  expect_asm_error(BODY("  update(%k, %x, 0) {axis=1}\n"), 3, "operand 3 of update must be a %value");
  expect_asm_error(BODY("  %s = reshape(%k) {shape=[2,6,4]}\n  update(%k, %s, %p) {axis=1}\n"), 4, "reads state %k, which this update writes");
  expect_asm_error(BODY("  %v = reshape(%k) {shape=[48]}\n  update(%k, %x, %p) {axis=1}\n  %w = neg(%v)\n"), 5,
                   "%v is a view of state %k as it was before the update on line 4");
  expect_asm_error(BODY("  %k = neg(%x)\n"), 3, "%k is a state: it changes only by update");
  expect_asm_error("state %k : f32[2]\nfunc @main(%k: f32[2]) -> f32[2] {\n  return %k\n}\n", 2, "parameter %k has the name of a state");
  expect_asm_error("state %k : f32[2]\nfunc @main() -> f32[2] {\n  return %k\n}\n", 3, "%k is state %k (or a view of it), which is not returned");
  expect_asm_error("state %k : f32[2]\nfunc @f(%a: f32[2]) -> f32[2] {\n  return %a\n}\nfunc @main() -> f32[2] {\n  %r = call @f(%k)\n  return %r\n}\n", 6,
                   "%k is state %k (or a view of it), which is not passed to functions");
  /* A view made before a call that may update the state, used after it. */
  expect_asm_error("state %k : f32[2]\nfunc @f() -> f32[2] {\n  %c = copy(%k)\n  return %c\n}\n"
                   "func @main() -> f32[2] {\n  %v = reshape(%k) {shape=[2,1]}\n  %r = call @f()\n  %w = reshape(%v) {shape=[2]}\n  %o = add(%w, %r)\n  return %o\n}\n",
                   9, "%v is a view of state %k as it was before the update on line 8");
#undef BODY
}
END_TEST

/* ---- a decode loop: prefill, then generate in a while ---- */
/* A one-layer toy decoder (embedding, K/V caches, attention over the
 * cache up to each sequence's length, an output projection, sampling with
 * Philox, end tokens 10 and 6): a batch of 2 whose prompts have lengths 4
 * and 2. @generate runs the decode step in a while until n tokens or every
 * sequence has ended, emits each step's tokens (-1 for a sequence that has
 * ended) and keeps them in a state. */
static char *decoder_src(void) {
  static char src[16384];
  char emb[4096] = "", wout[4096] = "";
  uint64_t r = 99;
  for (int k = 0; k < 2; k++) {
    char *b = k ? wout : emb;
    size_t o = 0;
    o += (size_t)snprintf(b + o, 4096 - o, "[");
    for (int v = 0; v < 11; v++) {
      o += (size_t)snprintf(b + o, 4096 - o, "%s[", v ? ", " : "");
      for (int d = 0; d < 8; d++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        o += (size_t)snprintf(b + o, 4096 - o, "%s%.3f", d ? ", " : "", ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 3);
      }
      o += (size_t)snprintf(b + o, 4096 - o, "]");
    }
    snprintf(b + o, 4096 - o, "]");
  }
  snprintf(src, sizeof src,
           "const %%emb : f32[11,8] = %s\n"
           "const %%wout : f32[11,8] = %s\n"
           "const %%eos : i64[2] = [10, 6]\n"
           "const %%none : i64[2] = fill(-1)\n"
           "const %%z32 : i32[] = 0\n"
           "const %%i0 : i64[] = 0\n"
           "const %%nodone : bool[2] = fill(false)\n"
           "const %%yes : bool[] = true\n"
           "state %%kc : f32[2,1,16,8]\n"
           "state %%vc : f32[2,1,16,8]\n"
           "state %%toks : i64[2,16]\n"
           "func @prefill(%%ids: i64[2,4]) -> i64[2,4] {\n"
           "  %%flat = reshape(%%ids) {shape=[8]}\n"
           "  %%e = gather(%%emb, %%flat) {axis=0}\n"
           "  %%k = reshape(%%e) {shape=[2,1,4,8]}\n"
           "  update(%%kc, %%k, %%z32) {axis=2}\n"
           "  %%v = mul(%%k, 0.5)\n"
           "  update(%%vc, %%v, %%z32) {axis=2}\n"
           "  %%r = copy(%%ids)\n"
           "  return %%r\n"
           "}\n"
           "func @cond(%%tok: i64[2], %%pos: i32[2], %%step: i64[], %%n: i64[], %%done: bool[2], %%go: bool[]) -> bool[] {\n"
           "  %%more = lt(%%step, %%n)\n"
           "  %%di = cast(%%done) {dtype=i32}\n"
           "  %%dmin = min(%%di)\n"
           "  %%all = eq(%%dmin, 1)\n"
           "  %%notall = logical_not(%%all)\n"
           "  %%c1 = logical_and(%%more, %%notall)\n"
           "  %%c = logical_and(%%c1, %%go)\n"
           "  return %%c\n"
           "}\n"
           "func @body(%%tok: i64[2], %%pos: i32[2], %%step: i64[], %%n: i64[], %%done: bool[2], %%go: bool[]) -> (i64[2], i32[2], i64[], i64[], bool[2], bool[]) {\n"
           "  %%e = gather(%%emb, %%tok) {axis=0}\n"
           "  %%k = reshape(%%e) {shape=[2,1,1,8]}\n"
           "  update(%%kc, %%k, %%pos) {axis=2}\n"
           "  %%v = mul(%%k, 0.5)\n"
           "  update(%%vc, %%v, %%pos) {axis=2}\n"
           "  %%len = add(%%pos, 1)\n"
           "  %%a = attention(%%k, %%kc, %%vc, %%len)\n"
           "  %%h = reshape(%%a) {shape=[2,8]}\n"
           "  %%h2 = add(%%h, %%e)\n"
           "  %%logits = linear(%%h2, %%wout)\n"
           "  %%nx = sample(%%logits, %%step) {temperature=0.9, top_k=6, seed=42}\n"
           "  %%nx2 = reshape(%%nx) {shape=[2,1]}\n"
           "  %%m = eq(%%nx2, %%eos)\n"
           "  %%mi = cast(%%m) {dtype=i32}\n"
           "  %%anyi = max(%%mi) {axes=[1]}\n"
           "  %%hit = gt(%%anyi, 0)\n"
           "  %%out = where(%%done, %%none, %%nx)\n"
           "  %%done2 = logical_or(%%done, %%hit)\n"
           "  %%o2 = reshape(%%out) {shape=[2,1]}\n"
           "  update(%%toks, %%o2, %%step) {axis=1}\n"
           "  %%go2 = emit(%%out)\n"
           "  %%pos2 = add(%%pos, 1)\n"
           "  %%step2 = add(%%step, 1)\n"
           "  return %%nx, %%pos2, %%step2, %%n, %%done2, %%go2\n"
           "}\n"
           "func @generate(%%tok0: i64[2], %%lens: i32[2], %%n: i64[]) -> (i64[2,16], i64[]) {\n"
           "  %%t, %%p, %%s, %%nn, %%d, %%g = while(@cond, @body, %%tok0, %%lens, %%i0, %%n, %%nodone, %%yes)\n"
           "  %%all = copy(%%toks)\n"
           "  return %%all, %%s\n"
           "}\n"
           "const %%zero : i64[] = 0\n"
           "func @ccond(%%i: i64[], %%n: i64[], %%go: bool[]) -> bool[] {\n"
           "  %%m = lt(%%i, %%n)\n"
           "  %%c = logical_and(%%m, %%go)\n"
           "  return %%c\n"
           "}\n"
           "func @cbody(%%i: i64[], %%n: i64[], %%go: bool[]) -> (i64[], i64[], bool[]) {\n"
           "  %%r = reshape(%%i) {shape=[1]}\n"
           "  %%g = emit(%%r)\n"
           "  %%i2 = add(%%i, 1)\n"
           "  return %%i2, %%n, %%g\n"
           "}\n"
           "func @count(%%n: i64[]) -> i64[] {\n"
           "  %%i, %%nn, %%g = while(@ccond, @cbody, %%zero, %%n, %%yes)\n"
           "  return %%i\n"
           "}\n",
           emb, wout);
  return src;
}

/* Prefill (prompts of lengths 4 and 2, padded) then generate n tokens:
 * the tokens kept [2,16], the steps taken; the VM's counts of the generate call. */
static int64_t generate(rill_vm_t *vm, int64_t n, int64_t toks[32], rill_run_counts_t *cost) {
  ck_assert(!rill_vm_reset_states(vm));
  rill_tensor_t *ids = tens(vm, T(RILL_I64, 2, 2, 4), (double[]){1, 7, 2, 9, 4, 8, 0, 0});
  ck_assert(!call(vm, "prefill", &ids, 1, NULL, 0));
  rill_tensor_t *in[3] = {tens(vm, T(RILL_I64, 1, 2), (double[]){9, 8}), tens(vm, T(RILL_I32, 1, 2), (double[]){4, 2}),
                          tens(vm, T(RILL_I64, 0), (double[]){(double)n})};
  rill_run_counts_t c0, c1;
  rill_vm_run_counts(vm, &c0);
  rill_tensor_t **res;
  int nres;
  rill_status_t st = rill_vm_invoke(vm, "generate", in, 3, &res, &nres);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_vm_run_counts(vm, &c1);
  cost->runs = c1.runs - c0.runs;
  cost->host_waits = c1.host_waits - c0.host_waits;
  cost->graph_launches = c1.graph_launches - c0.graph_launches;
  cost->replay_host_ns = c1.replay_host_ns - c0.replay_host_ns;
  int64_t steps;
  ck_assert(!rill_tensor_read(res[0], toks, 32 * sizeof(int64_t)));
  ck_assert(!rill_tensor_read(res[1], &steps, sizeof steps));
  rill_results_free(vm, res, nres);
  release_all(in, 3);
  rill_tensor_release(ids);
  return steps;
}

/* The tokens of `steps` steps are what the loop's rules allow: in the
 * vocabulary until a sequence's end token, -1 after it; fewer than n steps
 * only when both have ended. */
static void check_tokens(const int64_t *toks, int64_t steps, int64_t n) {
  ck_assert_int_ge(steps, 1);
  ck_assert_int_le(steps, n);
  bool ended_all = true;
  for (int b = 0; b < 2; b++) {
    bool ended = false;
    for (int64_t s = 0; s < steps; s++) {
      int64_t t = toks[b * 16 + s];
      if (ended) ck_assert_msg(t == -1, "sequence %d step %lld after its end: %lld", b, (long long)s, (long long)t);
      else ck_assert_msg(t >= 0 && t < 11, "sequence %d step %lld: %lld", b, (long long)s, (long long)t);
      if (t == 10 || t == 6) ended = true;
    }
    ended_all &= ended;
  }
  if (steps < n) ck_assert_msg(ended_all, "stopped after %lld of %lld steps with a sequence going", (long long)steps, (long long)n);
}

START_TEST(decode_loop_graph_equals_interpreted) {
  pick_devices();
  rill_module_t *m = load_src(decoder_src());
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *a = vm_on(m, devices[d]), *g = vm_on(m, devices[d]);
    ck_assert(!rill_vm_set_graph_mode(g, NULL, RILL_GRAPH_ON));
    for (int64_t n = 12; n >= 3; n -= 9) {
      int64_t ta[32], ta2[32], tg[32], tg2[32];
      rill_run_counts_t ca, ca2, cg, cg2;
      int64_t sa = generate(a, n, ta, &ca), sa2 = generate(a, n, ta2, &ca2);
      check_tokens(ta, sa, n);
      /* (these weights and seed: both sequences end, at steps 7 and 8, before 12) */
      if (n == 12 && !strcmp(devices[d], "cpu")) ck_assert_int_eq(sa, 8);
      else if (n < 12) ck_assert_int_eq(sa, n);
      /* the same seed, the same tokens */
      ck_assert_int_eq(sa, sa2);
      ck_assert(!memcmp(ta, ta2, sizeof ta));
      /* interpreted: a host round trip per condition, no launch */
      ck_assert_uint_eq(ca.host_waits, (uint64_t)sa + 1);
      ck_assert_uint_eq(ca.graph_launches, 0);
      ck_assert_uint_eq(ca.replay_host_ns, 0); /* no replay, no time issuing one */
      int64_t sg = generate(g, n, tg, &cg), sg2 = generate(g, n, tg2, &cg2);
      ck_assert_msg(sg == sa && !memcmp(ta, tg, sizeof ta), "%s n=%lld: graph mode's tokens differ", devices[d], (long long)n);
      ck_assert(sg2 == sa && !memcmp(ta, tg2, sizeof ta));
      /* once captured: the whole generate is one launch, no host round trip */
      ck_assert_uint_eq(cg2.graph_launches, 1);
      ck_assert_uint_eq(cg2.host_waits, 0);
      ck_assert_uint_eq(cg2.runs, 1);
      /* the host's time issuing the replay: counted, and far below a second */
      ck_assert(cg2.replay_host_ns > 0 && cg2.replay_host_ns < 1000000000ull);
    }
    rill_graph_info_t gi;
    ck_assert(rill_vm_graph_info(g, "generate", &gi));
    ck_assert_msg(gi.instances >= 1 && !gi.reason[0], "generate not captured: %s", gi.reason);
    rill_vm_destroy(a);
    rill_vm_destroy(g);
  }
  rill_module_release(m);
}
END_TEST

typedef struct got_records {
  int64_t vals[4096][2];
  int n[4096];
  uint64_t count;
  rill_gen_t *cancel_at_first;
  bool ordered;
} got_records_t;

static void on_record(void *user, uint64_t step, const int64_t *v, int n) {
  got_records_t *g = user;
  if (step != g->count) g->ordered = false;
  if (g->count < 4096) {
    g->n[g->count] = n;
    for (int i = 0; i < n && i < 2; i++) g->vals[g->count][i] = v[i];
  }
  g->count++;
  if (g->cancel_at_first) rill_gen_cancel(g->cancel_at_first);
}

START_TEST(session_streams_and_cancels) {
  pick_devices();
  rill_module_t *m = load_src(decoder_src());
  static got_records_t got;
  for (int d = 0; d < ndevices; d++)
    for (int graph = 0; graph < 2; graph++) {
      rill_vm_t *vm = vm_on(m, devices[d]);
      if (graph) ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
      for (int rep = 0; rep < 2; rep++) {
        /* every record streamed, equal to what the program kept */
        ck_assert(!rill_vm_reset_states(vm));
        rill_tensor_t *ids = tens(vm, T(RILL_I64, 2, 2, 4), (double[]){1, 7, 2, 9, 4, 8, 0, 0});
        ck_assert(!call(vm, "prefill", &ids, 1, NULL, 0));
        rill_tensor_release(ids);
        rill_tensor_t *in[3] = {tens(vm, T(RILL_I64, 1, 2), (double[]){9, 8}), tens(vm, T(RILL_I32, 1, 2), (double[]){4, 2}),
                                tens(vm, T(RILL_I64, 0), (double[]){12})};
        rill_gen_t *g;
        ck_assert(!rill_gen_start(vm, "generate", in, 3, &g));
        rill_gen_t *g2;
        rill_status_t st = rill_gen_start(vm, "generate", in, 3, &g2);
        ck_assert_msg(st && strstr(rill_status_message(st), "already running"), "a second session started");
        rill_status_free(st);
        release_all(in, 3);
        memset(&got, 0, sizeof got);
        got.ordered = true;
        rill_tensor_t **res;
        int nres;
        st = rill_gen_wait(g, on_record, &got, &res, &nres);
        ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
        int64_t toks[32], steps;
        ck_assert(!rill_tensor_read(res[0], toks, sizeof toks));
        ck_assert(!rill_tensor_read(res[1], &steps, sizeof steps));
        rill_results_free(vm, res, nres);
        check_tokens(toks, steps, 12);
        ck_assert(got.ordered);
        ck_assert_uint_eq(got.count, (uint64_t)steps);
        for (int64_t s = 0; s < steps; s++) {
          ck_assert_int_eq(got.n[s], 2);
          for (int b = 0; b < 2; b++) ck_assert_int_eq(got.vals[s][b], toks[b * 16 + s]);
        }
        rill_gen_info_t info;
        rill_gen_info(g, &info);
        ck_assert_uint_eq(info.records, (uint64_t)steps);
        ck_assert(info.finished && info.first_record_ms >= 0);
        if (graph && rep) ck_assert_msg(info.graph_launches == 1 && info.host_waits == 0, "%s: %llu launches, %llu host waits", devices[d],
                                        (unsigned long long)info.graph_launches, (unsigned long long)info.host_waits);
        if (!graph) ck_assert_uint_eq(info.host_waits, (uint64_t)steps + 1);
        rill_gen_destroy(g);
      }
      /* cancel: a long count stops soon after its first record (in graph mode, captured first by a short one) */
      for (int rep = graph ? 0 : 1; rep < 2; rep++) {
        int64_t n = rep ? 100000000 : 3;
        rill_tensor_t *nt = tens(vm, T(RILL_I64, 0), (double[]){(double)n});
        rill_gen_t *g;
        ck_assert(!rill_gen_start(vm, "count", &nt, 1, &g));
        rill_tensor_release(nt);
        memset(&got, 0, sizeof got);
        got.ordered = true;
        got.cancel_at_first = rep ? g : NULL;
        rill_tensor_t **res;
        int nres;
        rill_status_t st = rill_gen_wait(g, on_record, &got, &res, &nres);
        ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
        int64_t i;
        ck_assert(!rill_tensor_read(res[0], &i, sizeof i));
        rill_results_free(vm, res, nres);
        ck_assert(got.ordered);
        if (!rep) ck_assert_int_eq(i, 3);
        else ck_assert_msg(i < n && i >= 1, "count ran to %lld", (long long)i);
        ck_assert_uint_eq(got.count, (uint64_t)i);
        for (uint64_t k = 0; k < got.count && k < 4096; k++) ck_assert_int_eq(got.vals[k][0], (int64_t)k);
        rill_gen_destroy(g);
      }
      /* a reader 4096 records behind: an error, not wrong tokens */
      if (!graph) {
        rill_tensor_t *nt = tens(vm, T(RILL_I64, 0), (double[]){5000});
        rill_gen_t *g;
        ck_assert(!rill_gen_start(vm, "count", &nt, 1, &g));
        rill_tensor_release(nt);
        rill_gen_info_t info;
        do {
          usleep(1000);
          rill_gen_info(g, &info);
        } while (!info.finished);
        rill_status_t st = rill_gen_wait(g, on_record, &got, NULL, NULL);
        ck_assert_msg(st && strstr(rill_status_message(st), "the token channel overflowed"), "%s", st ? rill_status_message(st) : "no error");
        rill_status_free(st);
        rill_gen_destroy(g);
      }
      rill_vm_destroy(vm);
    }
  /* a module that emits nothing has no sessions */
  rill_module_t *m2 = load_src(COUNT_SRC);
  rill_vm_t *vm = vm_on(m2, "cpu");
  rill_gen_t *g;
  rill_status_t st = rill_gen_start(vm, "step", NULL, 0, &g);
  ck_assert_msg(st && strstr(rill_status_message(st), "has no emit"), "%s", st ? rill_status_message(st) : "started");
  rill_status_free(st);
  rill_vm_destroy(vm);
  rill_module_release(m2);
  rill_module_release(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("state");
  add_test_case(s, init_zeros_and_weights, 120);
  add_test_case(s, update_offsets, 120);
  add_test_case(s, update_kernel_no_partial_write, 60);
  add_test_case(s, persists_across_runs_per_vm, 120);
  add_test_case(s, data_parallel_cache_across_runs, 300);
  add_test_case(s, stream_check_updates, 120);
  add_test_case(s, run_time_stream_check, 120);
  add_test_case(s, schedules_keep_state_order, 300);
  add_test_case(s, bytecode_states_section, 300);
  add_test_case(s, parse_errors, 60);
  add_test_case(s, decode_loop_graph_equals_interpreted, 300);
  add_test_case(s, session_streams_and_cancels, 300);
  return run_suite(s);
}
