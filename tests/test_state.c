/* test_state.c: states (module `state` declarations) and `update`: their
 * first contents, updates at offsets (one for every row and one per index
 * of axis 0, out of range an error), persistence across runs and per VM,
 * graph mode, the stream check around updates at assembly and at run time,
 * every schedule policy, the bytecode section (round trips, damage) and the
 * assembler's errors. On the cpu device and, where a GPU is usable, cuda. */
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
    ck_assert_ptr_nonnull(strstr(txt, "# lowered form, bytecode 1.5"));
    uint8_t *b1, *b2;
    size_t n1, n2;
    ck_assert(!rill_assemble(NULL, spath, INIT_SRC, strlen(INIT_SRC), &o, &b1, &n1));
    rill_status_t st = rill_assemble(NULL, spath, txt, tl, NULL, &b2, &n2);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    ck_assert_uint_eq(n1, n2);
    ck_assert(!memcmp(b1, b2, n1));
    ck_assert_int_eq(b1[10], 5); /* minor version 5: states */
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
  ck_assert_int_eq(b[10], 5);
  /* every truncation refused, every flipped byte refused or loading and printing */
  const uint8_t masks[] = {0x01, 0x80, 0xff};
  check_damaged_module(b, n, masks, 3);
  free(b);
  /* A module without states keeps its version. */
  ck_assert(!asm_text("func @main(%x: f32[2]) -> f32[2] {\n  return %x\n}\n", &b, &n));
  ck_assert_int_lt(b[10], 5);
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

int main(void) {
  Suite *s = suite_create("state");
  add_test_case(s, init_zeros_and_weights, 120);
  add_test_case(s, update_offsets, 120);
  add_test_case(s, update_kernel_no_partial_write, 60);
  add_test_case(s, persists_across_runs_per_vm, 120);
  add_test_case(s, stream_check_updates, 120);
  add_test_case(s, run_time_stream_check, 120);
  add_test_case(s, schedules_keep_state_order, 300);
  add_test_case(s, bytecode_states_section, 300);
  add_test_case(s, parse_errors, 60);
  return run_suite(s);
}
