/* test_vm.c: the runtime on the CPU device, through the public API. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "helpers.h"
#include "rill_config.h"
#include "kernels/pcache.h"
#if RILL_HAVE_DLPACK
#include <dlpack/dlpack.h>
#endif

static rill_tensor_t *tensor(rill_vm_t *vm, rill_type_t t, const double *v) {
  size_t n = rill_type_numel(&t);
  void *buf = calloc(n * rill_dtype_size(t.dtype) + 1, 1);
  for (size_t i = 0; i < n; i++) rill_element_set(t.dtype, buf, i, v[i]);
  rill_tensor_t *x;
  rill_status_t st = rill_tensor_create(vm, &t, buf, &x);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  free(buf);
  return x;
}

static double *read_all(rill_tensor_t *t) {
  size_t nb = rill_tensor_nbytes(t), n = rill_type_numel(rill_tensor_type(t));
  void *raw = malloc(nb + 1);
  ck_assert(!rill_tensor_read(t, raw, nb));
  double *d = malloc(sizeof(double) * (n + 1));
  for (size_t i = 0; i < n; i++) d[i] = rill_element_get(rill_tensor_type(t)->dtype, raw, i);
  free(raw);
  return d;
}

typedef struct prog {
  rill_module_t *m;
  rill_vm_t *vm;
} prog_t;

static prog_t load(const char *src) {
  prog_t p;
  uint8_t *b;
  size_t n;
  rill_status_t st = asm_text(src, &b, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert(!rill_module_load(NULL, b, n, ".", &p.m));
  free(b);
  ck_assert(!rill_vm_create(NULL, p.m, "cpu", &p.vm));
  return p;
}

static void unload(prog_t *p) {
  rill_vm_destroy(p->vm);
  rill_module_release(p->m);
}

/* Conformance cases through the API: inputs and expected outputs from .npy. */
START_TEST(conformance_cases) {
  if (!have_conformance("conformance_cases")) return;
  const char *cases[] = {"mlp_f32", "resnet_stem_f32", "manual_streams_f32", "while_f32"};
  for (size_t c = 0; c < 4; c++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s/prog.vmasm", conformance_dir(), cases[c]);
    uint8_t *b;
    size_t n;
    ck_assert(!rill_assemble_file(NULL, path, NULL, &b, &n));
    rill_module_t *m;
    ck_assert(!rill_module_load(NULL, b, n, ".", &m));
    free(b);
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
    int np, nr;
    ck_assert(rill_module_function(m, "main", &np, &nr));
    rill_tensor_t *in[4];
    for (int i = 0; i < np; i++) {
      snprintf(path, sizeof path, "%s/%s/in%d.npy", conformance_dir(), cases[c], i);
      rill_type_t t;
      void *d;
      size_t sz;
      ck_assert(!rill_npy_read(NULL, path, &t, &d, &sz));
      ck_assert(!rill_tensor_create(vm, &t, d, &in[i]));
      free(d);
    }
    rill_tensor_t **res;
    int nres;
    rill_status_t st = rill_vm_invoke(vm, "main", in, np, &res, &nres);
    ck_assert_msg(!st, "%s: %s", cases[c], rill_status_message(st));
    snprintf(path, sizeof path, "%s/%s/out0.npy", conformance_dir(), cases[c]);
    rill_type_t t;
    void *want;
    size_t sz;
    ck_assert(!rill_npy_read(NULL, path, &t, &want, &sz));
    double *got = read_all(res[0]);
    for (size_t i = 0; i < rill_type_numel(&t); i++) {
      double w = rill_element_get(t.dtype, want, i);
      ck_assert_msg(fabs(got[i] - w) <= 1e-4 + 1e-4 * fabs(w), "%s[%zu]: got %g want %g", cases[c], i, got[i], w);
    }
    free(got);
    free(want);
    rill_results_free(vm, res, nres);
    for (int i = 0; i < np; i++) rill_tensor_release(in[i]);
    rill_vm_destroy(vm);
    rill_module_release(m);
  }
}
END_TEST

/* The same computation on three streams and on one stream: identical bits, many times over. */
START_TEST(multistream_equals_single) {
  /* Four independent chains; the multi-stream version puts three on their own streams. */
  const char *parts[][2] = {
      {"  set_stream(1)\n", ""}, {"  %a = matmul(%x, %x)\n  %b = tanh(%a)\n", NULL},
      {"  add_event(1)\n  set_stream(2)\n", ""}, {"  %c = sigmoid(%x)\n  %d = mul(%c, %c)\n", NULL},
      {"  add_event(2)\n  set_stream(3)\n", ""}, {"  %e = exp(%x)\n  %f = neg(%e)\n", NULL},
      {"  add_event(3)\n  set_stream(0)\n  wait_event(1)\n  wait_event(2)\n  wait_event(3)\n", ""},
      {"  %g = add(%b, %d)\n  %h = add(%g, %f)\n  return %h\n}\n", NULL}};
  char multi[2048] = "func @main(%x: f32[24,24]) -> f32[24,24] {\n", single[2048];
  strcpy(single, multi);
  for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
    strcat(multi, parts[k][0]);
    strcat(single, parts[k][1] ? parts[k][1] : parts[k][0]);
  }
  prog_t pm = load(multi), ps = load(single);
  double xv[576];
  for (int i = 0; i < 576; i++) xv[i] = sin(i * 0.37) * 0.3;
  rill_tensor_t *xm = tensor(pm.vm, T(RILL_F32, 2, 24, 24), xv), *xs = tensor(ps.vm, T(RILL_F32, 2, 24, 24), xv);
  rill_tensor_t **r;
  int n;
  ck_assert(!rill_vm_invoke(ps.vm, "main", &xs, 1, &r, &n));
  double *want = read_all(r[0]);
  rill_results_free(ps.vm, r, n);
  for (int it = 0; it < 200; it++) {
    ck_assert(!rill_vm_invoke(pm.vm, "main", &xm, 1, &r, &n));
    double *got = read_all(r[0]);
    ck_assert_msg(memcmp(got, want, sizeof(double) * 576) == 0, "run %d differs", it);
    free(got);
    rill_results_free(pm.vm, r, n);
  }
  free(want);
  rill_tensor_release(xm);
  rill_tensor_release(xs);
  unload(&pm);
  unload(&ps);
}
END_TEST

/* The shared multi-stream case, and the same program with its stream
 * statements removed: bit-identical results over many runs. */
START_TEST(conformance_streams_equal_single) {
  if (!have_conformance("conformance_streams_equal_single")) return;
  char path[4200];
  snprintf(path, sizeof path, "%s/manual_streams_f32/prog.vmasm", conformance_dir());
  FILE *f = fopen(path, "r");
  ck_assert(f != NULL);
  size_t cap = 1 << 20, n = 0, m = 0;
  char *multi = calloc(cap, 1), *single = calloc(cap, 1), line[65536];
  int stream_lines = 0;
  while (fgets(line, sizeof line, f)) {
    size_t len = strlen(line);
    ck_assert(n + len < cap);
    memcpy(multi + n, line, len);
    n += len;
    if (strstr(line, "set_stream(") || strstr(line, "add_event(") || strstr(line, "wait_event(")) {
      stream_lines++;
      continue;
    }
    memcpy(single + m, line, len);
    m += len;
  }
  fclose(f);
  ck_assert_int_ge(stream_lines, 4);
  prog_t pm = load(multi), ps = load(single);
  snprintf(path, sizeof path, "%s/manual_streams_f32/in0.npy", conformance_dir());
  rill_type_t t;
  void *d;
  size_t sz;
  ck_assert(!rill_npy_read(NULL, path, &t, &d, &sz));
  rill_tensor_t *xm, *xs, **r;
  ck_assert(!rill_tensor_create(pm.vm, &t, d, &xm));
  ck_assert(!rill_tensor_create(ps.vm, &t, d, &xs));
  int nr;
  ck_assert(!rill_vm_invoke(ps.vm, "main", &xs, 1, &r, &nr));
  double *want = read_all(r[0]);
  size_t numel = rill_type_numel(rill_tensor_type(r[0]));
  rill_results_free(ps.vm, r, nr);
  for (int it = 0; it < 100; it++) {
    ck_assert(!rill_vm_invoke(pm.vm, "main", &xm, 1, &r, &nr));
    double *got = read_all(r[0]);
    ck_assert_msg(memcmp(got, want, sizeof(double) * numel) == 0, "run %d differs from the single-stream program", it);
    free(got);
    rill_results_free(pm.vm, r, nr);
  }
  free(want);
  free(d);
  free(multi);
  free(single);
  rill_tensor_release(xm);
  rill_tensor_release(xs);
  unload(&pm);
  unload(&ps);
}
END_TEST

/* bind_dims: a size read back from a value binds a shape variable for the
 * rest of the run: broadcast_to at that size (zero too), nonzero with its
 * count (values worked by hand, row-major order), a negative size refused,
 * a value made at the old size refused with its name. */
static rill_status_t run_bind(const char *src, const rill_type_t *t0, const void *d0, const rill_type_t *t1, const void *d1,
                              rill_type_t *out_t, int64_t *out, size_t max) {
  uint8_t *b;
  size_t sz;
  rill_status_t st = asm_text(src, &b, &sz);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, sz, ".", &m));
  free(b);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  rill_tensor_t *in[2], **res;
  int nin = t1 ? 2 : 1, nres;
  ck_assert(!rill_tensor_create(vm, t0, d0, &in[0]));
  if (t1) ck_assert(!rill_tensor_create(vm, t1, d1, &in[1]));
  st = rill_vm_invoke(vm, "main", in, nin, &res, &nres);
  if (!st) {
    *out_t = *rill_tensor_type(res[0]);
    size_t n = rill_type_numel(out_t);
    ck_assert(n <= max);
    ck_assert(!rill_tensor_read(res[0], out, n * rill_dtype_size(out_t->dtype)));
    rill_results_free(vm, res, nres);
  }
  for (int i = 0; i < nin; i++) rill_tensor_release(in[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
  return st;
}

START_TEST(bind_dims_sizes) {
  static const char *BCAST = "func @main(%x: i64[1,2], %n: i64[]) -> i64[N,2] {\n  bind_dims(%n, N)\n"
                             "  %y = broadcast_to(%x) {shape=[N, 2]}\n  %z = add(%y, %y)\n  return %z\n}\n";
  rill_type_t tx = {RILL_I64, 2, {1, 2}}, tn = {RILL_I64, 0, {0}}, to;
  int64_t x[2] = {-3, 5}, out[64];
  for (int64_t n = 0; n <= 4; n++) {
    ck_assert(!run_bind(BCAST, &tx, x, &tn, &n, &to, out, 64));
    ck_assert_int_eq(to.rank, 2);
    ck_assert_int_eq(to.dims[0], n);
    for (int64_t i = 0; i < n; i++) {
      ck_assert_int_eq(out[2 * i], -6);
      ck_assert_int_eq(out[2 * i + 1], 10);
    }
  }
  int64_t neg = -2;
  rill_status_t st = run_bind(BCAST, &tx, x, &tn, &neg, &to, out, 64);
  ck_assert_msg(st && strstr(rill_status_message(st), "N := -2, a negative size"), "%s", st ? rill_status_message(st) : "ok");
  rill_status_free(st);
  /* nonzero: x = [[0, 1.5, 0], [-2, 0, nan]] has 3 nonzero elements, at (0,1), (1,0), (1,2) */
  static const char *NZ = "func @main(%x: f32[2,3]) -> i64[2,N] {\n  %c = cast(%x) {dtype=bool}\n  %i = cast(%c) {dtype=i64}\n"
                          "  %n = sum(%i)\n  bind_dims(%n, N)\n  %y = nonzero(%x) {count=[N]}\n  return %y\n}\n";
  rill_type_t tf = {RILL_F32, 2, {2, 3}};
  float xf[6] = {0, 1.5f, 0, -2, 0, NAN}, zeros[6] = {0};
  ck_assert(!run_bind(NZ, &tf, xf, NULL, NULL, &to, out, 64));
  ck_assert_int_eq(to.dims[0], 2);
  ck_assert_int_eq(to.dims[1], 3);
  static const int64_t WANT[6] = {0, 1, 1, 1, 0, 2};
  for (int i = 0; i < 6; i++) ck_assert_int_eq(out[i], WANT[i]);
  ck_assert(!run_bind(NZ, &tf, zeros, NULL, NULL, &to, out, 64));
  ck_assert_int_eq(to.dims[1], 0);
  /* a value of size N made before N is bound is refused when the binding changes its size */
  static const char *STALE = "func @main(%x: i64[1,2], %n: i64[]) -> i64[N,2] {\n  %y = broadcast_to(%x) {shape=[N, 2]}\n"
                             "  bind_dims(%n, N)\n  %z = add(%y, %y)\n  return %z\n}\n";
  int64_t three = 3;
  st = run_bind(STALE, &tx, x, &tn, &three, &to, out, 64);
  ck_assert_msg(st && strstr(rill_status_message(st), "bind a size before any value of that size is made"), "%s", st ? rill_status_message(st) : "ok");
  rill_status_free(st);
  /* its module (1.7, variables bound at run time) damaged every way: refused or loaded, never a crash */
  uint8_t *mb;
  size_t mn;
  ck_assert(!asm_text(NZ, &mb, &mn));
  ck_assert_int_eq(mb[10], 7);
  check_damaged_module(mb, mn, (const uint8_t[]){0x01, 0x02, 0x80}, 3);
  free(mb);
  /* the assembler's checks */
  expect_asm_error("func @main(%n: i32[]) -> i64[] {\n  bind_dims(%n, N)\n  return %n\n}\n", 2, "want i64[1] or i64[]");
  expect_asm_error("func @main(%n: i64[2]) -> i64[2] {\n  bind_dims(%n, N, N)\n  return %n\n}\n", 2, "binds N twice");
  expect_asm_error("func @main(%n: i64[]) -> i64[] {\n  bind_dims(%n)\n  return %n\n}\n", 2, "with 1 to 7 names");
}
END_TEST

START_TEST(control_flow) {
  prog_t p = load(
      "func @pos(%x: f32[3]) -> f32[3] {\n  %y = mul(%x, 2.0)\n  return %y\n}\n"
      "func @negb(%x: f32[3]) -> f32[3] {\n  %y = neg(%x)\n  return %y\n}\n"
      "func @cond(%i: i32[], %acc: f32[3]) -> bool[] {\n  %c = lt(%i, 5)\n  return %c\n}\n"
      "func @body(%i: i32[], %acc: f32[3]) -> (i32[], f32[3]) {\n  %j = add(%i, 1)\n  %a = add(%acc, 1.0)\n  return %j, %a\n}\n"
      "func @main(%x: f32[3], %flag: bool[]) -> (f32[3], i32[]) {\n  %y = if(%flag, @pos, @negb, %x)\n"
      "  %zero = cast(%flag) {dtype=i32}\n  %z = mul(%zero, 0)\n  %i, %s = while(@cond, @body, %z, %y)\n  return %s, %i\n}\n");
  rill_tensor_t *x = tensor(p.vm, T(RILL_F32, 1, 3), (double[]){1, 2, 3});
  for (int flag = 0; flag < 2; flag++) {
    rill_tensor_t *f = tensor(p.vm, T(RILL_BOOL, 0), (double[]){flag});
    rill_tensor_t *in[2] = {x, f}, **r;
    int n;
    rill_status_t st = rill_vm_invoke(p.vm, "main", in, 2, &r, &n);
    ck_assert_msg(!st, "%s", rill_status_message(st));
    ck_assert_int_eq(n, 2);
    double *s = read_all(r[0]), *i = read_all(r[1]);
    ck_assert(i[0] == 5);
    for (int k = 0; k < 3; k++) ck_assert(s[k] == (flag ? 2 * (k + 1) : -(k + 1)) + 5);
    free(s);
    free(i);
    rill_results_free(p.vm, r, n);
    rill_tensor_release(f);
  }
  rill_tensor_release(x);
  unload(&p);
}
END_TEST

/* A module made in memory (rill_asm_options_t.output_image) runs as the
 * module from its bytes does, and disassembles to the same text; what the
 * image keeps alive is released once, with the module's last reference
 * (or with the image where it is never loaded). */
static int kept_released;
static void kept(void *p) { kept_released += *(int *)p; }

START_TEST(module_image) {
  const char *src = "const %w : f32[3,4] = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12.5]]\nconst %b : f32[4] = fill(0.25)\n"
                    "func @main(%x: f32[2,3]) -> f32[2,4] {\n  %m = matmul(%x, %w)\n  %a = add(%m, %b)\n  %r = relu(%a)\n  return %r\n}\n";
  rill_module_image_t *img = NULL;
  rill_asm_options_t o = {.output_image = &img};
  uint8_t *bytes = (uint8_t *)"x";
  size_t n = 1;
  rill_status_t st = rill_assemble(NULL, "t.vmasm", src, strlen(src), &o, &bytes, &n);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  ck_assert(img && !bytes && n == 0);
  int one = 1;
  kept_released = 0;
  ck_assert(!rill_module_image_keep(img, kept, &one));
  rill_module_t *mi, *mb;
  ck_assert(!rill_module_load_image(NULL, img, &mi));
  ck_assert(!rill_assemble(NULL, "t.vmasm", src, strlen(src), NULL, &bytes, &n));
  ck_assert(!rill_module_load(NULL, bytes, n, NULL, &mb));
  free(bytes);
  char *t1, *t2;
  size_t l1, l2;
  ck_assert(!rill_module_disassemble(mi, &t1, &l1) && !rill_module_disassemble(mb, &t2, &l2));
  ck_assert_msg(l1 == l2 && !memcmp(t1, t2, l1), "%s\n---\n%s", t1, t2);
  free(t1);
  free(t2);
  double got[2][8];
  for (int k = 0; k < 2; k++) {
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(NULL, k ? mb : mi, "cpu", &vm));
    rill_tensor_t *x = tensor(vm, T(RILL_F32, 2, 2, 3), (double[]){1, -2, 0.5, 3, 0, 1}), **r;
    int nr;
    ck_assert(!rill_vm_invoke(vm, "main", &x, 1, &r, &nr) && nr == 1);
    double *y = read_all(r[0]);
    memcpy(got[k], y, sizeof got[k]);
    free(y);
    rill_results_free(vm, r, nr);
    rill_tensor_release(x);
    rill_vm_destroy(vm);
  }
  ck_assert(!memcmp(got[0], got[1], sizeof got[0]));
  /* relu(x W + b): row 0 = 1 [1..4] - 2 [5..8] + 0.5 [9..12.5] + 0.25, all below 0; row 1 = 3 [1..4] + [9..12.5] + 0.25 */
  ck_assert(got[0][0] == 0 && got[0][3] == 0 && got[0][4] == 12.25 && got[0][7] == 24.75);
  ck_assert_int_eq(kept_released, 0);
  rill_module_release(mi);
  ck_assert_int_eq(kept_released, 1);
  rill_module_release(mb);
  /* weights from a file, embedded and linked: the image's module runs to
   * the bytes' results (linked: the file found from the source's folder,
   * checked against the checksum the image keeps) */
  char wpath[4200];
  snprintf(wpath, sizeof wpath, "%s/weights.vmasm", RILL_FIXTURES_DIR);
  for (int linked = 0; linked < 2; linked++) {
    rill_asm_options_t lo = {.output_image = &img, .link_weights = linked};
    rill_asm_options_t bo = {.link_weights = linked};
    img = NULL;
    st = rill_assemble_file(NULL, wpath, &lo, &bytes, &n);
    ck_assert_msg(!st && img, "%s", st ? rill_status_message(st) : "");
    ck_assert(!rill_module_load_image(NULL, img, &mi));
    ck_assert(!rill_assemble_file(NULL, wpath, &bo, &bytes, &n));
    ck_assert(!rill_module_load(NULL, bytes, n, RILL_FIXTURES_DIR, &mb));
    free(bytes);
    double w2[2][6];
    for (int k = 0; k < 2; k++) {
      rill_vm_t *vm;
      ck_assert(!rill_vm_create(NULL, k ? mb : mi, "cpu", &vm));
      rill_tensor_t *x = tensor(vm, T(RILL_F32, 2, 2, 5), (double[]){1, -2, 0.5, 3, 0, 1, 2, 3, 4, 5}), **r;
      int nr;
      ck_assert(!rill_vm_invoke(vm, "main", &x, 1, &r, &nr) && nr == 2);
      double *y = read_all(r[0]);
      memcpy(w2[k], y, sizeof w2[k]);
      free(y);
      rill_results_free(vm, r, nr);
      rill_tensor_release(x);
      rill_vm_destroy(vm);
    }
    ck_assert(!memcmp(w2[0], w2[1], sizeof w2[0]));
    rill_module_release(mi);
    rill_module_release(mb);
  }
  st = rill_module_load_image(NULL, NULL, &mi);
  ck_assert(st && strstr(rill_status_message(st), "no image"));
  rill_status_free(st);
  /* an image never loaded: freed with what it keeps */
  img = NULL;
  ck_assert(!rill_assemble(NULL, "t.vmasm", src, strlen(src), &o, &bytes, &n) && img);
  ck_assert(!rill_module_image_keep(img, kept, &one));
  rill_module_image_free(img);
  ck_assert_int_eq(kept_released, 2);
}
END_TEST

/* Start-up timings: nothing is recorded while off; on, each part's sum
 * and count by name, in the order first seen, the library's own parts
 * (assembly, its passes, module load, vm) among them; reset empties. */
START_TEST(startup_timings) {
  rill_timings_reset();
  rill_timings_record(false);
  rill_timing_add("x", 1);
  ck_assert_int_eq(rill_timings(NULL, 0), 0);
  rill_timings_record(true);
  ck_assert(rill_timings_recording());
  rill_timing_add("x", 1.5);
  rill_timing_add("x/y", 0.5);
  rill_timing_add("x", 2);
  prog_t p = load("func @main(%x: f32[3]) -> f32[3] {\n  %y = relu(%x)\n  return %y\n}\n");
  unload(&p);
  rill_timings_record(false);
  rill_timing_t t[96];
  int n = rill_timings(t, 96);
  ck_assert(n >= 4 && !strcmp(t[0].name, "x") && t[0].ms == 3.5 && t[0].count == 2 && !strcmp(t[1].name, "x/y") && t[1].count == 1);
  bool asm_part = false, fold = false, load_part = false, vm_part = false;
  for (int i = 0; i < n; i++) {
    asm_part |= !strcmp(t[i].name, "assembly") && t[i].ms >= 0;
    fold |= !strcmp(t[i].name, "assembly/fold");
    load_part |= !strcmp(t[i].name, "module load");
    vm_part |= !strcmp(t[i].name, "vm");
  }
  ck_assert(asm_part && fold && load_part && vm_part);
  rill_timings_reset();
  ck_assert_int_eq(rill_timings(t, 96), 0);
}
END_TEST

START_TEST(limits_and_errors) {
  /* Unbounded recursion stops at the call depth limit with a runtime error. */
  prog_t p = load("func @f(%x: f32[1]) -> f32[1] {\n  %y = call @f(%x)\n  return %y\n}\nfunc @main(%x: f32[1]) -> f32[1] {\n  %y = call @f(%x)\n  return %y\n}\n");
  rill_tensor_t *x = tensor(p.vm, T(RILL_F32, 1, 1), (double[]){1}), **r;
  int n;
  rill_status_t st = rill_vm_invoke(p.vm, "main", &x, 1, &r, &n);
  ck_assert(st && rill_status_code(st) == RILL_RUNTIME_ERROR && strstr(rill_status_message(st), "call depth"));
  rill_status_free(st);
  rill_tensor_release(x);
  unload(&p);
  /* An op failing on the device surfaces as a runtime error naming it. */
  p = load("func @main(%x: f32[4], %i: i64[2]) -> f32[2] {\n  %y = gather(%x, %i)\n  return %y\n}\n");
  x = tensor(p.vm, T(RILL_F32, 1, 4), (double[]){1, 2, 3, 4});
  rill_tensor_t *i = tensor(p.vm, T(RILL_I64, 1, 2), (double[]){1, 9});
  rill_tensor_t *in[2] = {x, i};
  st = rill_vm_invoke(p.vm, "main", in, 2, &r, &n);
  ck_assert(st && rill_status_code(st) == RILL_RUNTIME_ERROR && strstr(rill_status_message(st), "index 9"));
  rill_status_free(st);
  /* Bad inputs are refused before anything runs. */
  st = rill_vm_invoke(p.vm, "main", in, 1, &r, &n);
  ck_assert(st && strstr(rill_status_message(st), "missing input 2 for parameter %i"));
  rill_status_free(st);
  rill_tensor_t *swap[2] = {i, x};
  st = rill_vm_invoke(p.vm, "main", swap, 2, &r, &n);
  ck_assert(st && strstr(rill_status_message(st), "expected f32[4], got i64[2]"));
  rill_status_free(st);
  st = rill_vm_invoke(p.vm, "nope", in, 2, &r, &n);
  ck_assert(st && rill_status_code(st) == RILL_NOT_FOUND);
  rill_status_free(st);
  rill_tensor_release(x);
  rill_tensor_release(i);
  unload(&p);
  const char *why = NULL;
  ck_assert(!rill_device_usable("tpu", &why) && why);
}
END_TEST

typedef struct async_ctx {
  int done, ok;
  double want;
} async_ctx_t;

static void on_done(void *user, rill_status_t st, rill_tensor_t **res, int n) {
  async_ctx_t *c = user;
  c->done++;
  if (!st && n == 1) {
    float v;
    if (!rill_tensor_read(res[0], &v, 4) && v == (float)c->want) c->ok++;
  }
  for (int i = 0; i < n; i++) rill_tensor_release(res[i]);
  free(res);
  rill_status_free(st);
}

/* Many runs in flight on one loop thread, each with host waits (a while loop). */
START_TEST(concurrent_async_runs) {
  prog_t p = load("func @cond(%i: f32[]) -> bool[] {\n  %c = lt(%i, 10.0)\n  return %c\n}\n"
                  "func @body(%i: f32[]) -> f32[] {\n  %j = add(%i, 1.0)\n  return %j\n}\n"
                  "func @main(%x: f32[]) -> f32[] {\n  %y = while(@cond, @body, %x)\n  return %y\n}\n");
  uv_loop_t loop;
  uv_loop_init(&loop);
  enum { N = 16 };
  async_ctx_t ctx[N];
  rill_tensor_t *x[N];
  for (int k = 0; k < N; k++) {
    ctx[k] = (async_ctx_t){0, 0, k < 10 ? 10 : k};
    x[k] = tensor(p.vm, T(RILL_F32, 0), (double[]){k});
    ck_assert(!rill_vm_invoke_async(p.vm, &loop, "main", &x[k], 1, on_done, &ctx[k]));
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  for (int k = 0; k < N; k++) {
    ck_assert_int_eq(ctx[k].done, 1);
    ck_assert_msg(ctx[k].ok == 1, "run %d gave a wrong result", k);
    rill_tensor_release(x[k]);
  }
  ck_assert_int_eq(uv_loop_close(&loop), 0);
  unload(&p);
}
END_TEST

/* Fail the Nth allocation of a whole session on the cpu device (VM, tensors,
 * a run with a host wait, results), for every N: out-of-memory or success,
 * and nothing left allocated either way. */
START_TEST(vm_allocation_failures) {
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text("const %k : f32[3] = fill(2)\nconst %z : f32[] = 0\n"
                      "func @c(%i: f32[]) -> bool[] {\n  %q = lt(%i, 3.0)\n  return %q\n}\n"
                      "func @s(%i: f32[]) -> f32[] {\n  %j = add(%i, 1.0)\n  return %j\n}\n"
                      "func @main(%x: f32[3]) -> (f32[3], f32[]) {\n  %y = mul(%x, %k)\n  %n = while(@c, @s, %z)\n  return %y, %n\n}\n", &b, &n));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  free(b);
  int ok = 0;
  for (long k = 1; k < 10000 && !ok; k++) {
    test_alloc_t ta;
    test_alloc_init(&ta, k);
    rill_vm_t *vm = NULL;
    rill_tensor_t *x = NULL, **r = NULL;
    int nr = 0;
    rill_type_t t = {RILL_F32, 1, {3}};
    float v[3] = {1, 2, 3}, got[3];
    rill_status_t st = rill_vm_create(&ta.base, m, "cpu", &vm);
    if (!st) st = rill_tensor_create(vm, &t, v, &x);
    if (!st) st = rill_vm_invoke(vm, "main", &x, 1, &r, &nr);
    if (!st) st = rill_tensor_read(r[0], got, sizeof got);
    if (st) ck_assert_msg(rill_status_code(st) == RILL_OUT_OF_MEMORY, "fail at %ld: %s", k, rill_status_message(st));
    else ok = got[2] == 6;
    rill_status_free(st);
    if (r) rill_results_free(vm, r, nr);
    rill_tensor_release(x);
    rill_vm_destroy(vm);
    ck_assert_msg(atomic_load(&ta.live) == 0, "fail at %ld: %ld blocks left", k, atomic_load(&ta.live));
  }
  ck_assert(ok);
  rill_module_release(m);
}
END_TEST

START_TEST(npy_roundtrip) {
  char path[] = "/tmp/rill-test-XXXXXX";
  int fd = mkstemp(path);
  ck_assert(fd >= 0);
  close(fd);
  for (int d = 0; d < RILL_DTYPE_COUNT; d++) {
    rill_type_t t = T((rill_dtype_t)d, 2, 2, 3);
    unsigned char data[6 * 8];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 37 + d);
    if (d == RILL_BOOL)
      for (int i = 0; i < 6; i++) data[i] &= 1;
    ck_assert(!rill_npy_write(path, &t, data));
    rill_type_t t2;
    void *back;
    size_t n;
    rill_status_t st = rill_npy_read(NULL, path, &t2, &back, &n);
    ck_assert_msg(!st, "%s: %s", rill_dtype_name((rill_dtype_t)d), rill_status_message(st));
    ck_assert(t2.dtype == t.dtype && t2.rank == 2 && t2.dims[0] == 2 && t2.dims[1] == 3);
    ck_assert(memcmp(back, data, n) == 0);
    free(back);
  }
  unlink(path);
  static const char h1[] = "\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'}";
  static const char h2[] = "\x93NUMPY\x01\x00\x40\x00{'descr': '|f4', 'fortran_order': False, 'shape': (1,), }            \n";
  static const char h3[] = "\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }            \n";
  static const char h4[] = "\x93NUMPY\x01\x00\x40\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }            \n\0\0\0\0";
  const struct { const char *p; size_t n; const char *why; } bad[] = {
      {"", 0, "magic"}, {h1, sizeof h1 - 1, "'fortran_order'"}, {h2, sizeof h2 - 1, "dtype '|f4' is not one of the language's"},
      {h3, sizeof h3 - 1, "'fortran_order' is not True or False"}, {h4, sizeof h4 - 1, "data bytes, the header's dtype and shape need 8"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    rill_type_t t;
    void *d;
    size_t n;
    rill_status_t st = rill_npy_parse(NULL, (const uint8_t *)bad[i].p, bad[i].n, &t, &d, &n);
    ck_assert_msg(st && strstr(rill_status_message(st), bad[i].why), "case %zu: %s", i, st ? rill_status_message(st) : "accepted");
    rill_status_free(st);
  }
}
END_TEST

/* Files numpy wrote (tests/fixtures/npy/make.py): Fortran order and
 * big-endian read as the same row-major little-endian data as C order. */
START_TEST(npy_layouts) {
  static const char *const names[] = {"f16", "bf16", "f32", "f64", "i8", "u8", "i32", "i64", "bool", "i16", "u16", "u32", "u64"};
  static const char *const layouts[] = {"f", "be", "fbe"};
  int read = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/npy/%s_c.npy", RILL_FIXTURES_DIR, names[i]);
    rill_type_t want;
    void *wd;
    size_t wn;
    rill_status_t st = rill_npy_read(NULL, path, &want, &wd, &wn);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    ck_assert_str_eq(rill_dtype_name(want.dtype), names[i]);
    ck_assert(want.rank == 3 && want.dims[0] == 2 && want.dims[1] == 3 && want.dims[2] == 4);
    /* numpy's -5 (the first element), wrapped in the unsigned dtypes */
    if (want.dtype == RILL_U64) ck_assert_uint_eq((uint64_t)rill_element_get_int(RILL_U64, wd, 0), UINT64_MAX - 4);
    if (want.dtype == RILL_U64) ck_assert(rill_element_get(RILL_U64, wd, 0) == 18446744073709551611.0);
    if (want.dtype == RILL_U32) ck_assert_int_eq(rill_element_get_int(RILL_U32, wd, 0), 4294967291);
    if (want.dtype == RILL_U16) ck_assert_int_eq(rill_element_get_int(RILL_U16, wd, 0), 65531);
    if (want.dtype == RILL_I16) ck_assert_int_eq(rill_element_get_int(RILL_I16, wd, 0), -5);
    for (size_t l = 0; l < 3; l++) {
      snprintf(path, sizeof path, "%s/npy/%s_%s.npy", RILL_FIXTURES_DIR, names[i], layouts[l]);
      if (access(path, F_OK) != 0) continue; /* one-byte dtypes have no byte order */
      /* The file's data really is in another layout. */
      uint8_t *raw;
      size_t rn;
      FILE *f = fopen(path, "rb");
      ck_assert(f);
      ck_assert(fseek(f, 0, SEEK_END) == 0);
      rn = (size_t)ftell(f);
      rewind(f);
      raw = malloc(rn);
      ck_assert(fread(raw, 1, rn, f) == rn);
      fclose(f);
      ck_assert_msg(rn >= wn && memcmp(raw + rn - wn, wd, wn) != 0, "%s: same bytes as C order", path);
      rill_type_t t;
      void *d;
      size_t n;
      st = rill_npy_parse(NULL, raw, rn, &t, &d, &n);
      ck_assert_msg(!st, "%s: %s", path, st ? rill_status_message(st) : "");
      ck_assert(rill__type_eq(&t, &want) && n == wn);
      ck_assert_msg(memcmp(d, wd, wn) == 0, "%s: data differs from C order", path);
      free(d);
      free(raw);
      read++;
    }
    free(wd);
  }
  ck_assert_int_eq(read, 4 * 1 + 9 * 3); /* bf16 and one-byte dtypes: Fortran order only */
  /* Written back: C order, little-endian, whatever was read. */
  char path[512], out[] = "/tmp/rill-test-XXXXXX";
  int fd = mkstemp(out);
  ck_assert(fd >= 0);
  close(fd);
  snprintf(path, sizeof path, "%s/npy/f64_fbe.npy", RILL_FIXTURES_DIR);
  rill_type_t t;
  void *d, *d2;
  size_t n;
  ck_assert(!rill_npy_read(NULL, path, &t, &d, &n));
  ck_assert(!rill_npy_write(out, &t, d));
  uint8_t *bytes;
  size_t size;
  ck_assert(!rill__read_file(rill_allocator_system(), out, &bytes, &size));
  ck_assert(strstr((const char *)bytes + 10, "'descr': '<f8', 'fortran_order': False"));
  ck_assert(!rill_npy_parse(NULL, bytes, size, &t, &d2, &n));
  ck_assert(memcmp(d, d2, n) == 0);
  free(bytes);
  free(d);
  free(d2);
  unlink(out);
}
END_TEST

#if RILL_HAVE_DLPACK
/* A managed tensor over caller memory, as another library would hand it
 * over; its deleter counts its calls. */
typedef struct dl_host {
  DLManagedTensor m;
  int64_t shape[RILL_MAX_RANK + 1], strides[RILL_MAX_RANK + 1];
  int deleted;
} dl_host_t;

static void dl_host_delete(DLManagedTensor *m) { ((dl_host_t *)m->manager_ctx)->deleted++; }

static void dl_host_init(dl_host_t *h, void *data, uint8_t code, uint8_t bits, int ndim, const int64_t *shape) {
  memset(h, 0, sizeof *h);
  h->m.dl_tensor.data = data;
  h->m.dl_tensor.device = (DLDevice){kDLCPU, 0};
  h->m.dl_tensor.ndim = ndim;
  h->m.dl_tensor.dtype = (DLDataType){code, bits, 1};
  memcpy(h->shape, shape, sizeof(int64_t) * (size_t)ndim);
  h->m.dl_tensor.shape = h->shape;
  h->m.manager_ctx = h;
  h->m.deleter = dl_host_delete;
}

/* Imports h: refused with `why` (the deleter not called), or, when why is
 * NULL, accepted and released (the deleter called once). */
static void dl_expect(rill_vm_t *vm, dl_host_t *h, const char *why, size_t i) {
  rill_tensor_t *t = NULL;
  rill_status_t st = rill_tensor_from_dlpack(vm, &h->m, &t);
  if (!why) {
    ck_assert_msg(!st, "%zu: %s", i, st ? rill_status_message(st) : "");
    rill_tensor_release(t);
    ck_assert_int_eq(h->deleted, 1);
    return;
  }
  ck_assert_msg(st && rill_status_code(st) == RILL_INVALID_ARGUMENT && strstr(rill_status_message(st), why), "%zu: %s", i,
                st ? rill_status_message(st) : "accepted");
  ck_assert(!t && h->deleted == 0);
  rill_status_free(st);
}

/* A tensor from another library goes into a run without a copy, and its
 * deleter runs once, when Rill lets go; a result goes out the same way. */
START_TEST(dlpack_round_trip) {
  prog_t p = load("func @main(%x: f32[2,3]) -> (f32[2,3], f32[3,2]) {\n  %y = add(%x, %x)\n  %r = reshape(%y) {shape=[3,2]}\n  return %y, %r\n}\n");
  float buf[8] = {-1, -1, 1, 2, 3, 4, 5, 6};
  dl_host_t h;
  dl_host_init(&h, buf, kDLFloat, 32, 2, (const int64_t[]){2, 3});
  h.m.dl_tensor.byte_offset = 2 * sizeof(float); /* honoured: the data starts at buf[2] */
  rill_tensor_t *x;
  rill_status_t st = rill_tensor_from_dlpack(p.vm, &h.m, &x);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  ck_assert_ptr_eq(rill_tensor_device_pointer(x), buf + 2);
  ck_assert_str_eq(rill_type_format(rill_tensor_type(x), (char[32]){0}, 32), "f32[2,3]");
  rill_tensor_t **r;
  int nr;
  ck_assert(!rill_vm_invoke(p.vm, "main", &x, 1, &r, &nr));
  ck_assert_int_eq(h.deleted, 0);
  rill_tensor_release(x);
  ck_assert_int_eq(h.deleted, 1); /* the run has ended and let go too */
  /* Out: the result's memory, row-major strides, a reference held. */
  DLManagedTensor *out;
  ck_assert(!rill_tensor_to_dlpack(r[1], &out));
  const DLTensor *o = &out->dl_tensor;
  ck_assert_ptr_eq(o->data, rill_tensor_device_pointer(r[1]));
  ck_assert(o->device.device_type == kDLCPU && o->device.device_id == 0 && o->byte_offset == 0);
  ck_assert(o->dtype.code == kDLFloat && o->dtype.bits == 32 && o->dtype.lanes == 1);
  ck_assert(o->ndim == 2 && o->shape[0] == 3 && o->shape[1] == 2 && o->strides[0] == 2 && o->strides[1] == 1);
  rill_results_free(p.vm, r, nr); /* the export keeps r[1] alive */
  for (int i = 0; i < 6; i++) ck_assert(((float *)o->data)[i] == 2 * (float)(i + 1));
  /* ...and back in: a second run on it, no copy either way. */
  void *data = o->data;
  ck_assert(!rill_tensor_from_dlpack(p.vm, out, &x));
  ck_assert_ptr_eq(rill_tensor_device_pointer(x), data);
  rill_tensor_release(x); /* runs the export's deleter, which drops its reference */
  unload(&p);
}
END_TEST

/* Every dtype of the language maps both ways; other dtypes, strided
 * tensors and other devices are refused, and a refused tensor stays the
 * caller's (its deleter is not called). */
START_TEST(dlpack_checks) {
  prog_t p = load("func @main(%x: f32[2]) -> f32[2] {\n  return %x\n}\n");
  static const struct { rill_dtype_t d; uint8_t code, bits; } map[] = {
      {RILL_F16, kDLFloat, 16}, {RILL_BF16, kDLBfloat, 16}, {RILL_F32, kDLFloat, 32}, {RILL_F64, kDLFloat, 64}, {RILL_I8, kDLInt, 8},
      {RILL_U8, kDLUInt, 8},    {RILL_I32, kDLInt, 32},     {RILL_I64, kDLInt, 64},   {RILL_BOOL, 6, 8},        {RILL_I16, kDLInt, 16},
      {RILL_U16, kDLUInt, 16},  {RILL_U32, kDLUInt, 32},    {RILL_U64, kDLUInt, 64},
  };
  ck_assert_int_eq(sizeof map / sizeof map[0], RILL_DTYPE_COUNT);
  _Alignas(16) uint8_t buf[256] = {0};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    dl_host_t h;
    dl_host_init(&h, buf, map[i].code, map[i].bits, 3, (const int64_t[]){2, 1, 3});
    rill_tensor_t *t;
    rill_status_t st = rill_tensor_from_dlpack(p.vm, &h.m, &t);
    ck_assert_msg(!st, "%s: %s", rill_dtype_name(map[i].d), st ? rill_status_message(st) : "");
    ck_assert(rill_tensor_type(t)->dtype == map[i].d);
    DLManagedTensor *e;
    ck_assert(!rill_tensor_to_dlpack(t, &e));
    ck_assert(e->dl_tensor.dtype.code == map[i].code && e->dl_tensor.dtype.bits == map[i].bits && e->dl_tensor.dtype.lanes == 1);
    rill_tensor_release(t);
    ck_assert_int_eq(h.deleted, 0); /* the export still holds it */
    e->deleter(e);
    ck_assert_int_eq(h.deleted, 1);
  }
  const struct { uint8_t code, bits; uint16_t lanes; const char *why; } dtypes[] = {
      {kDLFloat, 32, 4, "dtype float, 32 bits, 4 lanes is not one of the language's"},
      {kDLComplex, 64, 1, "dtype complex, 64 bits"}, {kDLUInt, 1, 1, "dtype uint, 1 bits"},
      {kDLInt, 4, 1, "dtype int, 4 bits"}, {kDLFloat, 8, 1, "dtype float, 8 bits"},
      {kDLOpaqueHandle, 64, 1, "dtype opaque handle"}, {6, 32, 1, "dtype bool, 32 bits"}, {40, 32, 1, "dtype unknown"},
  };
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
    dl_host_t h;
    dl_host_init(&h, buf, dtypes[i].code, dtypes[i].bits, 1, (const int64_t[]){2});
    h.m.dl_tensor.dtype.lanes = dtypes[i].lanes;
    dl_expect(p.vm, &h, dtypes[i].why, i);
  }
  /* Strides: NULL or row-major; size-1 dimensions and empty tensors may have any. */
  const struct { int ndim; int64_t shape[3], strides[3]; const char *why; } layouts[] = {
      {2, {2, 3}, {3, 1}, NULL},
      {3, {2, 1, 3}, {3, 99, 1}, NULL},
      {2, {0, 3}, {7, 7}, NULL},
      {2, {2, 3}, {1, 2}, "f32[2,3] with stride 2 in dimension 1 (row-major needs 1): only compact row-major tensors"},
      {2, {2, 3}, {6, 2}, "with stride 2 in dimension 1"},
      {2, {2, 3}, {4, 1}, "with stride 4 in dimension 0 (row-major needs 3)"},
      {1, {4}, {-1}, "with stride -1 in dimension 0"},
  };
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
    dl_host_t h;
    dl_host_init(&h, buf, kDLFloat, 32, layouts[i].ndim, layouts[i].shape);
    memcpy(h.strides, layouts[i].strides, sizeof layouts[i].strides);
    h.m.dl_tensor.strides = h.strides;
    dl_expect(p.vm, &h, layouts[i].why, i);
  }
  /* Devices, dimensions, shapes, alignment. */
  const struct { int dev, id, ndim; int64_t dim0; size_t offset; const char *why; } other[] = {
      {kDLCUDA, 0, 1, 2, 0, "the tensor is on device type 2, id 0; the VM runs on cpu"},
      {kDLCUDAManaged, 0, 1, 2, 0, "device type 13"},
      {kDLCPU, 0, RILL_MAX_RANK + 1, 1, 0, "9 dimensions (at most 8)"},
      {kDLCPU, 0, 1, -2, 0, "dimension 0 is -2"},
      {kDLCPU, 0, 1, 2, 2, "not aligned to f32"},
      {kDLCUDAHost, 0, 1, 2, 0, NULL},
  };
  for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
    dl_host_t h;
    int64_t shape[RILL_MAX_RANK + 1] = {other[i].dim0, 1, 1, 1, 1, 1, 1, 1, 1};
    dl_host_init(&h, buf, kDLFloat, 32, other[i].ndim, shape);
    h.m.dl_tensor.device = (DLDevice){(DLDeviceType)other[i].dev, other[i].id};
    h.m.dl_tensor.byte_offset = other[i].offset;
    dl_expect(p.vm, &h, other[i].why, i);
  }
  /* No deleter: nothing to call. Empty: data may be NULL, and is NULL out. */
  dl_host_t h;
  dl_host_init(&h, NULL, kDLFloat, 32, 2, (const int64_t[]){0, 4});
  h.m.deleter = NULL;
  rill_tensor_t *t;
  ck_assert(!rill_tensor_from_dlpack(p.vm, &h.m, &t));
  DLManagedTensor *e;
  ck_assert(!rill_tensor_to_dlpack(t, &e));
  ck_assert(e->dl_tensor.data == NULL && e->dl_tensor.shape[0] == 0 && e->dl_tensor.shape[1] == 4);
  rill_tensor_release(t);
  e->deleter(e);
  ck_assert_int_eq(h.deleted, 0);
#ifndef DLPACK_MAJOR_VERSION
  rill_status_t st = rill_tensor_from_dlpack_versioned(p.vm, NULL, &t);
  ck_assert(st && rill_status_code(st) == RILL_UNAVAILABLE && strstr(rill_status_message(st), "DLManagedTensorVersioned"));
  rill_status_free(st);
#endif
  unload(&p);
}
END_TEST

#ifdef DLPACK_MAJOR_VERSION
/* DLPack 1.x (built against a dlpack.h that has it). */
typedef struct dl_vhost {
  DLManagedTensorVersioned m;
  int64_t shape[1];
  int deleted;
} dl_vhost_t;

static void dl_vhost_delete(DLManagedTensorVersioned *m) { ((dl_vhost_t *)m->manager_ctx)->deleted++; }

START_TEST(dlpack_versioned) {
  prog_t p = load("func @main(%x: f32[3]) -> f32[3] {\n  %y = add(%x, %x)\n  return %y\n}\n");
  float v[3] = {1, 2, 3};
  const struct { uint32_t major; uint64_t flags; const char *why; } cases[] = {
      {2, 0, "DLPack: version 2.0; this rill reads 1.x"},
      {DLPACK_MAJOR_VERSION, DLPACK_FLAG_BITMASK_READ_ONLY, "read-only"},
      {DLPACK_MAJOR_VERSION, DLPACK_FLAG_BITMASK_IS_COPIED, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    dl_vhost_t h;
    memset(&h, 0, sizeof h);
    h.shape[0] = 3;
    h.m.version = (DLPackVersion){cases[i].major, 0};
    h.m.flags = cases[i].flags;
    h.m.manager_ctx = &h;
    h.m.deleter = dl_vhost_delete;
    h.m.dl_tensor = (DLTensor){v, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, h.shape, NULL, 0};
    rill_tensor_t *x = NULL;
    rill_status_t st = rill_tensor_from_dlpack_versioned(p.vm, &h.m, &x);
    if (cases[i].why) {
      ck_assert_msg(st && strstr(rill_status_message(st), cases[i].why), "%zu: %s", i, st ? rill_status_message(st) : "accepted");
      rill_status_free(st);
      ck_assert(!x && h.deleted == 0);
      continue;
    }
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    rill_tensor_t **r;
    int nr;
    ck_assert(!rill_vm_invoke(p.vm, "main", &x, 1, &r, &nr));
    rill_tensor_release(x);
    ck_assert_int_eq(h.deleted, 1);
    DLManagedTensorVersioned *e;
    ck_assert(!rill_tensor_to_dlpack_versioned(r[0], &e));
    rill_results_free(p.vm, r, nr);
    ck_assert(e->version.major == DLPACK_MAJOR_VERSION && e->flags == 0 && e->dl_tensor.ndim == 1 && e->dl_tensor.strides[0] == 1);
    ck_assert(((float *)e->dl_tensor.data)[2] == 6);
    ck_assert(!rill_tensor_from_dlpack_versioned(p.vm, e, &x));
    rill_tensor_release(x);
  }
  unload(&p);
}
END_TEST
#endif

/* Allocation failure at each allocation of an import: refused with out of
 * memory, the deleter not called, nothing left allocated. */
START_TEST(dlpack_allocation_failures) {
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text("func @main(%x: f32[2]) -> f32[2] {\n  %y = add(%x, %x)\n  return %y\n}\n", &b, &n));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  free(b);
  test_alloc_t base;
  test_alloc_init(&base, 0);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(&base.base, m, "cpu", &vm));
  bool ok = false;
  for (long k = 1; k < 100 && !ok; k++) {
    long before = atomic_load(&base.count);
    base.fail_at = before + k;
    float v[2] = {1, 2};
    dl_host_t h;
    dl_host_init(&h, v, kDLFloat, 32, 1, (const int64_t[]){2});
    rill_tensor_t *t = NULL;
    DLManagedTensor *e = NULL;
    rill_status_t st = rill_tensor_from_dlpack(vm, &h.m, &t);
    if (!st) st = rill_tensor_to_dlpack(t, &e);
    if (st) {
      ck_assert_msg(rill_status_code(st) == RILL_OUT_OF_MEMORY, "%s", rill_status_message(st));
      ck_assert_int_eq(h.deleted, 0);
      rill_status_free(st);
    } else {
      ok = true;
      e->deleter(e);
    }
    rill_tensor_release(t);
    ck_assert_int_eq(h.deleted, t ? 1 : 0);
  }
  ck_assert(ok);
  base.fail_at = 0;
  rill_vm_destroy(vm);
  ck_assert_int_eq(atomic_load(&base.live), 0);
  rill_module_release(m);
}
END_TEST
#endif

/* ---- shape variables ---- */
/* `src` with each whole-word B and S replaced by the sizes, and `dim` lines dropped. */
static char *concrete_source(const char *src, int64_t B, int64_t S) {
  size_t n = strlen(src);
  char *out = malloc(n * 4 + 1), *o = out;
  for (const char *p = src; *p;) {
    if (!strncmp(p, "dim ", 4) && (p == src || p[-1] == '\n')) { while (*p && *p != '\n') p++; continue; }
    bool word = (p == src || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '%' || p[-1] == '@')) &&
                !(isalnum((unsigned char)p[1]) || p[1] == '_');
    if (word && (*p == 'B' || *p == 'S')) o += sprintf(o, "%lld", (long long)(*p == 'B' ? B : S));
    else *o++ = *p;
    p++;
  }
  *o = 0;
  return out;
}

/* Runs a program's @main on inputs of the given types filled with a pattern; the results' bytes. */
static rill_status_t run_pattern(const char *src, const rill_type_t *types, int n, uint8_t **out, size_t *out_len) {
  rill_tensor_t *in[4] = {0}, **res = NULL;
  rill_vm_t *vm = NULL;
  rill_module_t *mod = NULL;
  int nres = 0;
  rill_status_t st = NULL;
  uint8_t *m = NULL;
  size_t total = 0;
  uint8_t *b;
  size_t sz;
  if ((st = asm_text(src, &b, &sz))) return st;
  st = rill_module_load(NULL, b, sz, ".", &mod);
  free(b);
  if (!st) st = rill_vm_create(NULL, mod, "cpu", &vm);
  for (int i = 0; !st && i < n; i++) {
    size_t k = rill_type_numel(&types[i]);
    float *v = malloc(4 * (k ? k : 1));
    for (size_t j = 0; j < k; j++) v[j] = (float)((j * 7 + (size_t)i * 3) % 11) * 0.25f - 1.0f;
    st = rill_tensor_create(vm, &types[i], v, &in[i]);
    free(v);
  }
  if (!st) st = rill_vm_invoke(vm, "main", in, n, &res, &nres);
  for (int i = 0; !st && i < nres; i++) {
    size_t bytes = rill_type_numel(rill_tensor_type(res[i])) * rill_dtype_size(rill_tensor_type(res[i])->dtype);
    m = realloc(m, total + bytes + 1);
    st = rill_tensor_read(res[i], m + total, bytes);
    total += bytes;
  }
  for (int i = 0; i < nres; i++) rill_tensor_release(res[i]);
  free(res);
  for (int i = 0; i < n; i++) if (in[i]) rill_tensor_release(in[i]);
  rill_vm_destroy(vm);
  rill_module_release(mod);
  *out = m;
  *out_len = total;
  return st;
}

START_TEST(shape_variables_match_concrete) {
  /* One program with a batch B and a length S, run at several sizes,
   * against the same program assembled with those sizes as numbers:
   * the same bytes (at -O1 and -O0 alike, one assembly for every size). */
  static const char *src =
      "dim S in [4, 32]\n"
      "const %w : f32[6,8] = fill(0.25)\n"
      "const %b : f32[6] = fill(0.5)\n"
      "const %k : f32[2,1,3,3] = fill(0.125)\n"
      "func @main(%x: f32[B,S,8], %m: f32[S]) -> (f32[B,S,6], f32[B,S], f32[B,2,S,S], f32[S], f32[B]) {\n"
      "  %h = linear(%x, %w, %b)\n"
      "  %r = relu(%h)\n"
      "  %f = reshape(%r) {shape=[-1, 6]}\n"
      "  %g = softmax(%f) {axis=-1}\n"
      "  %y = reshape(%g) {shape=[B, S, 6]}\n"
      "  %s = sum(%y) {axes=[2]}\n"
      "  %t = add(%s, %m)\n"
      "  %c = concat(%t, %t) {axis=1}\n"
      "  %p, %q = split(%c) {axis=1, sizes=[S, S]}\n"
      "  %u = mul(%p, %q)\n"
      "  %e = unsqueeze(%x) {axes=[1]}\n"
      "  %e2 = slice(%e) {starts=[0], ends=[1], axes=[3]}\n"
      "  %e3 = reshape(%e2) {shape=[B, 1, S, 1]}\n"
      "  %e4 = broadcast_to(%e3) {shape=[B, 1, S, S]}\n"
      "  %cv = conv2d(%e4, %k) {padding=[1,1]}\n"
      "  %pd = pad(%m) {pads=[1, 2]}\n"
      "  %sl = slice(%pd) {starts=[1], ends=[-2]}\n"
      "  %mx = max(%u) {axes=[1]}\n"
      "  return %y, %u, %cv, %sl, %mx\n"
      "}\n";
  for (int64_t B = 1; B <= 3; B++)
    for (int64_t S = 4; S <= 9; S += 5) {
      rill_type_t t[2] = {T(RILL_F32, 3, B, S, 8), T(RILL_F32, 1, S)};
      uint8_t *a, *c;
      size_t na, nc;
      rill_status_t st = run_pattern(src, t, 2, &a, &na);
      ck_assert_msg(!st, "symbolic at B=%lld S=%lld: %s", (long long)B, (long long)S, st ? rill_status_message(st) : "");
      char *csrc = concrete_source(src, B, S);
      st = run_pattern(csrc, t, 2, &c, &nc);
      ck_assert_msg(!st, "concrete at B=%lld S=%lld: %s\n%s", (long long)B, (long long)S, st ? rill_status_message(st) : "", csrc);
      ck_assert_msg(na == nc && !memcmp(a, c, na), "results differ at B=%lld S=%lld", (long long)B, (long long)S);
      free(csrc);
      free(a);
      free(c);
    }
}
END_TEST

/* B declared, S not: two parameters that bind them */
static const char *two_vars_src =
    "dim B in [1, 8]\n"
    "func @main(%x: f32[B,S], %y: f32[S]) -> f32[B,S] {\n"
    "  %a = add(%x, %y)\n"
    "  return %a\n"
    "}\n";

START_TEST(shape_variable_binding_errors) {
  const struct { rill_type_t x, y; const char *want; } cases[] = {
      {T(RILL_F32, 2, 2, 3), T(RILL_F32, 1, 4), "parameter %y: dimension 0 binds S to 4, but parameter %x's dimension 1 bound it to 3"},
      {T(RILL_F32, 2, 9, 3), T(RILL_F32, 1, 3), "parameter %x: dimension 0 binds B to 9, outside its range [1, 8]"},
      {T(RILL_F32, 2, 0, 3), T(RILL_F32, 1, 3), "parameter %x: dimension 0 binds B to 0, outside its range [1, 8]"},
      {T(RILL_F32, 2, 2, 0), T(RILL_F32, 1, 0), "dimension 1 binds S to 0; an undeclared shape variable is 1 and up"},
      {T(RILL_F32, 1, 3), T(RILL_F32, 1, 3), "expected f32[B,S], got f32[3]"},
  };
  for (size_t k = 0; k < RILL_ARRAY_LEN(cases); k++) {
    uint8_t *b;
    size_t sz;
    ck_assert(!asm_text(two_vars_src, &b, &sz));
    rill_module_t *mod;
    rill_vm_t *vm;
    ck_assert(!rill_module_load(NULL, b, sz, ".", &mod));
    free(b);
    ck_assert(!rill_vm_create(NULL, mod, "cpu", &vm));
    rill_tensor_t *in[2], **res = NULL;
    int nres = 0;
    ck_assert(!rill_tensor_create(vm, &cases[k].x, NULL, &in[0]));
    ck_assert(!rill_tensor_create(vm, &cases[k].y, NULL, &in[1]));
    rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &res, &nres);
    ck_assert_msg(st && rill_status_code(st) == RILL_INVALID_ARGUMENT && strstr(rill_status_message(st), cases[k].want),
                  "case %zu: %s", k, st ? rill_status_message(st) : "ran");
    ck_assert_int_eq(nres, 0);
    rill_status_free(st);
    rill_tensor_release(in[0]);
    rill_tensor_release(in[1]);
    rill_vm_destroy(vm);
    rill_module_release(mod);
  }
  /* the cuda device refuses such a module with a reason (where it can be made at all) */
}
END_TEST

/* A parameter's type at bound sizes (what `rill tune --shapes` makes inputs of). */
/* rill_vm_memory_info: weights, buffers and graphs counted as they come and go. */
START_TEST(memory_info_counts) {
  prog_t p = load("const %w : f32[64,64] = fill(0.25)\n"
                  "func @main(%x: f32[8,64]) -> f32[8,64] {\n  %a = matmul(%x, %w)\n  %b = relu(%a)\n"
                  "  %c = matmul(%b, %w)\n  %d = add(%c, %a)\n  return %d\n}\n");
  const size_t W = 64 * 64 * 4, X = 8 * 64 * 4;
  rill_memory_info_t mi;
  rill_vm_memory_info(p.vm, &mi);
  ck_assert_uint_eq(mi.weights, W);
  ck_assert_uint_eq(mi.buffers, 0);
  ck_assert_uint_eq(mi.graphs, 0);
  ck_assert(mi.create_ms > 0);
  rill_type_t t = {RILL_F32, 2, {8, 64}};
  rill_tensor_t *x, **out;
  int nout;
  ck_assert(!rill_tensor_create(p.vm, &t, NULL, &x));
  rill_vm_memory_info(p.vm, &mi);
  ck_assert_uint_eq(mi.buffers, X);
  ck_assert(!rill_vm_invoke(p.vm, "main", &x, 1, &out, &nout));
  rill_vm_memory_info(p.vm, &mi);
  ck_assert_uint_ge(mi.buffers, 2 * X);      /* x and the result */
  ck_assert_uint_ge(mi.buffers_peak, 3 * X); /* x, %a and %c at once at least */
  ck_assert_uint_ge(mi.peak, W + 3 * X);
  rill_results_free(p.vm, out, nout);
  rill_vm_memory_info(p.vm, &mi);
  ck_assert_uint_eq(mi.buffers, X);
  ck_assert_uint_eq(mi.total, W + X);
  ck_assert(!rill_vm_set_graph_mode(p.vm, NULL, RILL_GRAPH_ON));
  for (int i = 0; i < 3; i++) {
    ck_assert(!rill_vm_invoke(p.vm, "main", &x, 1, &out, &nout));
    rill_results_free(p.vm, out, nout);
  }
  rill_vm_memory_info(p.vm, &mi);
  ck_assert_uint_ge(mi.graphs, 2 * X); /* the instance's input and its buffers */
  ck_assert_uint_eq(mi.total, mi.weights + mi.buffers + mi.graphs + mi.workspaces);
  ck_assert_uint_ge(mi.peak, mi.total);
  rill_tensor_release(x);
  rill_vm_memory_info(p.vm, &mi);
  ck_assert_uint_eq(mi.buffers, 0);
  unload(&p);
}
END_TEST

START_TEST(param_types_at_sizes) {
  prog_t p = load(two_vars_src);
  const rill_module_t *mod = p.m;
  const char *name;
  ck_assert_int_eq(rill_module_shape_var_count(mod), 2);
  ck_assert(rill_module_shape_var(mod, 0, &name, NULL, NULL) && !strcmp(name, "B"));
  ck_assert(rill_module_shape_var(mod, 1, &name, NULL, NULL) && !strcmp(name, "S"));
  const int64_t vals[2] = {3, 5};
  rill_type_t t;
  ck_assert(rill_module_param_type(mod, "main", 0, &t, NULL) && t.rank == 2 && t.dims[0] == -1 && t.dims[1] == -1);
  ck_assert(rill_module_param_type_at(mod, "main", 0, vals, &t));
  ck_assert(t.dtype == RILL_F32 && t.rank == 2 && t.dims[0] == 3 && t.dims[1] == 5);
  ck_assert(rill_module_param_type_at(mod, "main", 1, vals, &t) && t.rank == 1 && t.dims[0] == 5);
  ck_assert(!rill_module_param_type_at(mod, "main", 0, NULL, &t)); /* sizes that need the variables */
  ck_assert(!rill_module_param_type_at(mod, "main", 2, vals, &t));
  ck_assert(!rill_module_param_type_at(mod, "other", 0, vals, &t));
  unload(&p);
}
END_TEST

/* A .npy header's dtype with control bytes is escaped in the message. */
START_TEST(npy_header_escaped) {
  static const char hdr[] = "{'descr': '<f\x1b[2J\x07', 'fortran_order': False, 'shape': (1,), }";
  uint8_t bytes[128] = "\x93NUMPY\x01\x00";
  size_t hl = sizeof hdr - 1;
  bytes[8] = (uint8_t)hl;
  memcpy(bytes + 10, hdr, hl);
  rill_type_t t;
  void *d;
  size_t sz;
  expect_escaped(rill_npy_parse(NULL, bytes, 10 + hl + 4, &t, &d, &sz), "dtype '<f\\x1b[2J\\x07' is not one of the language's");
}
END_TEST

/* ---- the plan cache's file (kernels/pcache.c), without a GPU ---- */
/* Recomputes a plan cache file's closing checksum, so that damage made
 * on purpose reaches the structure's checks. */
static void pc_reseal(uint8_t *b, size_t n) {
  uint64_t h = rill__fnv1a(b, n - 8, RILL_FNV_INIT);
  for (int i = 0; i < 8; i++) b[n - 8 + i] = (uint8_t)(h >> (8 * i));
}

static void pc_expect_bad(pcache_t *c, const uint8_t *b, size_t n, const char *why) {
  size_t before = pcache_count(c);
  rill_status_t st = pcache_parse(c, b, n);
  ck_assert_msg(st && rill_status_code(st) == RILL_MALFORMED && strstr(rill_status_message(st), why), "want '%s', got %s", why,
                st ? rill_status_message(st) : "success");
  rill_status_free(st);
  ck_assert_uint_eq(pcache_count(c), before); /* nothing taken from a bad file */
}

/* Entries round trip (in any order, an empty value, a replaced one);
 * keys and values out of bounds are refused; every truncation and every
 * byte flip of a file is refused, as are the structural faults behind a
 * good checksum (a duplicate key, a NUL in a key, trailing bytes, lengths
 * past the end, another label); a file is written, read back, merged with
 * another process's entries, and a damaged one is ignored with a warning
 * and rebuilt. */
START_TEST(plan_cache_file) {
  const rill_allocator_t *a = rill_allocator_system();
  pcache_t *c, *d;
  ck_assert(!pcache_open(a, NULL, "sm_90 cudnn 91400", &c));
  ck_assert(!pcache_put(c, "matmul f32 8x8x8", "abcdefgh", 8));
  ck_assert(!pcache_put(c, "conv2d f16 nhwc", "\x01\x02", 2));
  ck_assert(!pcache_put(c, "empty", "", 0));
  ck_assert(!pcache_put(c, "matmul f32 8x8x8", "xyz", 3)); /* replaced */
  char big[PCACHE_MAX_KEY + 2];
  memset(big, 'k', sizeof big - 1);
  big[sizeof big - 1] = 0;
  rill_status_t st = pcache_put(c, big, "v", 1);
  ck_assert(st && rill_status_code(st) == RILL_INVALID_ARGUMENT);
  rill_status_free(st);
  st = pcache_put(c, "", "v", 1);
  ck_assert(st && rill_status_code(st) == RILL_INVALID_ARGUMENT);
  rill_status_free(st);
  big[PCACHE_MAX_KEY] = 0;
  ck_assert(!pcache_put(c, big, "v", 1)); /* the longest key */
  ck_assert_uint_eq(pcache_count(c), 4);
  uint8_t *f, *f2, *v;
  size_t n, n2, vn;
  ck_assert(!pcache_serialize(c, &f, &n));
  ck_assert(!pcache_open(a, NULL, "sm_90 cudnn 91400", &d));
  ck_assert(!pcache_parse(d, f, n));
  ck_assert(pcache_get(d, "matmul f32 8x8x8", &v, &vn) && vn == 3 && !memcmp(v, "xyz", 3));
  free(v);
  ck_assert(pcache_get(d, "empty", &v, &vn) && vn == 0);
  free(v);
  ck_assert(!pcache_get(d, "matmul f32 8x8x9", &v, &vn) && v == NULL);
  ck_assert(!pcache_serialize(d, &f2, &n2));
  ck_assert(n2 == n && !memcmp(f, f2, n)); /* sorted by key: the same bytes */
  free(f2);
  pcache_close(d);
  /* damage: every truncation, every flipped byte */
  ck_assert(!pcache_open(a, NULL, "sm_90 cudnn 91400", &d));
  for (size_t len = 0; len < n; len++) pc_expect_bad(d, f, len, len < 8 ? "magic" : len < 28 ? "truncated" : "checksum");
  uint8_t *g = malloc(n);
  for (size_t i = 0; i < n; i++) {
    memcpy(g, f, n);
    g[i] ^= i % 2 ? 0x01 : 0x80;
    rill_status_t e = pcache_parse(d, g, n);
    ck_assert_msg(e != NULL, "flipping byte %zu was accepted", i);
    rill_status_free(e);
  }
  ck_assert_uint_eq(pcache_count(d), 0);
  /* faults behind a good checksum: the first entry (sorted: "conv2d f16 nhwc") starts at 20 + label */
  size_t e0 = 20 + strlen("sm_90 cudnn 91400");
  memcpy(g, f, n);
  g[e0 + 8 + 6] = 0;
  pc_reseal(g, n);
  pc_expect_bad(d, g, n, "entry 0: a NUL byte in the key");
  memcpy(g, f, n);
  g[e0] = 0xff, g[e0 + 1] = 0xff;
  pc_reseal(g, n);
  pc_expect_bad(d, g, n, "entry 0: a key or value length out of bounds");
  memcpy(g, f, n);
  g[e0 + 4] = 0xf0, g[e0 + 5] = 0xff, g[e0 + 6] = 0x0f;
  pc_reseal(g, n);
  pc_expect_bad(d, g, n, "entry 0: runs past the end");
  memcpy(g, f, n);
  g[12] += 1; /* one entry more than there are */
  pc_reseal(g, n);
  pc_expect_bad(d, g, n, "entry 4: truncated");
  memcpy(g, f, n);
  g[12] -= 1; /* one entry fewer: the last one's bytes are left over */
  pc_reseal(g, n);
  pc_expect_bad(d, g, n, "bytes after the last entry");
  memcpy(g, f, n);
  g[8] = 2;
  pc_reseal(g, n);
  pc_expect_bad(d, g, n, "another format version");
  memcpy(g, f, n);
  g[20] = 'S';
  pc_reseal(g, n);
  pc_expect_bad(d, g, n, "another device or library versions");
  free(g);
  /* a duplicate key: two caches' files spliced */
  pcache_t *x;
  ck_assert(!pcache_open(a, NULL, "L", &x));
  ck_assert(!pcache_put(x, "k", "1", 1));
  ck_assert(!pcache_put(x, "l", "2", 1));
  uint8_t *xb;
  size_t xn;
  ck_assert(!pcache_serialize(x, &xb, &xn));
  ck_assert_uint_eq(xn, 21 + 10 + 10 + 8); /* header and label, two entries of 10 bytes, the checksum */
  xb[21 + 10 + 8] = 'k'; /* the second key becomes the first's */
  pc_reseal(xb, xn);
  pc_expect_bad(x, xb, xn, "entry 1: the key of an earlier entry");
  free(xb);
  pcache_close(x);
  pcache_close(d);
  pcache_close(c);
  free(f);

  /* on disk: absent, written, read back, merged, damaged and rebuilt */
  char dir[] = "/tmp/rill-pcache-XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/plans.rpc", dir);
  ck_assert(!pcache_open(a, path, "L", &c));
  ck_assert_str_eq(pcache_warning(c), "");
  ck_assert(!pcache_open(a, path, "L", &d)); /* another process, opened before the first writes */
  ck_assert(!pcache_put(c, "a", "1", 1));
  ck_assert(!pcache_flush(c));
  ck_assert(!pcache_put(d, "b", "2", 1));
  ck_assert(!pcache_put(d, "a", "3", 1)); /* its own value wins in its write */
  ck_assert(!pcache_flush(d));
  pcache_close(c);
  pcache_close(d);
  ck_assert(!pcache_open(a, path, "L", &c));
  ck_assert_str_eq(pcache_warning(c), "");
  ck_assert_uint_eq(pcache_count(c), 2);
  ck_assert(pcache_get(c, "a", &v, &vn) && vn == 1 && v[0] == '3');
  free(v);
  pcache_close(c);
  for (int damage = 0; damage < 2; damage++) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, damage ? "truncate -s 30 %s" : "printf 'XX' | dd of=%s bs=1 seek=24 conv=notrunc 2>/dev/null", path);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert(!pcache_open(a, path, "L", &c));
    ck_assert_msg(strstr(pcache_warning(c), "plan cache ") && strstr(pcache_warning(c), "ignored (checksum mismatch") &&
                  strstr(pcache_warning(c), "rebuilding it"), "%s", pcache_warning(c));
    ck_assert_uint_eq(pcache_count(c), 0);
    ck_assert(!pcache_put(c, "a", "4", 1));
    ck_assert(!pcache_flush(c)); /* the damaged file replaced */
    pcache_close(c);
    ck_assert(!pcache_open(a, path, "L", &c));
    ck_assert_str_eq(pcache_warning(c), "");
    ck_assert_uint_eq(pcache_count(c), 1);
    pcache_close(c);
  }
  /* another label (library versions changed): ignored with a warning */
  ck_assert(!pcache_open(a, path, "L2", &c));
  ck_assert(strstr(pcache_warning(c), "another device or library versions"));
  pcache_close(c);
  unlink(path);
  rmdir(dir);
}
END_TEST

Suite *vm_suite(void);
Suite *vm_suite(void) {
  Suite *s = suite_create("vm");
  TCase *t = tcase_create("cpu");
  tcase_set_timeout(t, 300);
  tcase_add_test(t, conformance_cases);
  tcase_add_test(t, multistream_equals_single);
  tcase_add_test(t, conformance_streams_equal_single);
  tcase_add_test(t, control_flow);
  tcase_add_test(t, module_image);
  tcase_add_test(t, startup_timings);
  tcase_add_test(t, bind_dims_sizes);
  tcase_add_test(t, limits_and_errors);
  tcase_add_test(t, concurrent_async_runs);
  tcase_add_test(t, vm_allocation_failures);
  tcase_add_test(t, npy_roundtrip);
  tcase_add_test(t, npy_layouts);
  tcase_add_test(t, npy_header_escaped);
#if RILL_HAVE_DLPACK
  tcase_add_test(t, dlpack_round_trip);
  tcase_add_test(t, dlpack_checks);
  tcase_add_test(t, shape_variables_match_concrete);
  tcase_add_test(t, shape_variable_binding_errors);
  tcase_add_test(t, param_types_at_sizes);
  tcase_add_test(t, memory_info_counts);
  tcase_add_test(t, plan_cache_file);
  tcase_add_test(t, dlpack_allocation_failures);
#ifdef DLPACK_MAJOR_VERSION
  tcase_add_test(t, dlpack_versioned);
#endif
#endif
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return run_suite(vm_suite()); }
