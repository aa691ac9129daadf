/* test_graph.c: graph mode (capture once, replay) against interpreted runs,
 * on the cpu device and, where one is usable, the cuda device.
 *
 * Every fixture and conformance program, under the default schedule and
 * under `none`: a VM in graph mode and one interpreting run the same fresh
 * random inputs several times over (a graph that baked in its first inputs
 * fails), and must agree bit for bit. Also: if and while captured as
 * conditional nodes (replays that take the other branch and other trip
 * counts), concurrent runs on one loop, programs that cannot be captured
 * (auto falls back and says why; on is an error), allocation failure at
 * every allocation of a capture, and graphs per size for shape variables
 * (kept for a bounded number of sizes, least recently used dropped). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "helpers.h"
#include "rill_config.h"
#if RILL_HAVE_CUDA
#include "kernels/cuda_api.h"
#else
static void rill_cuda_fail_at(long n) { (void)n; }
#endif

static uint64_t rng = 12345;
static double urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) / 9007199254740992.0;
}

static const char *devices[2];
static int ndevices;

static void pick_devices(void) {
  if (!ndevices) ndevices = test_devices("test_graph", devices);
}

static rill_module_t *load_file(const char *path, const char *schedule) {
  uint8_t *b;
  size_t n;
  rill_asm_options_t o = {0};
  o.schedule = schedule;
  rill_status_t st = rill_assemble_file(NULL, path, &o, &b, &n);
  ck_assert_msg(!st, "%s: %s", path, rill_status_message(st));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  free(b);
  return m;
}

/* Random inputs for @main's parameters, on vm's device: floats in [-1, 1),
 * integers 0 or 1 (valid indices for the fixtures' gathers), bools. */
static int random_inputs(rill_vm_t *vm, rill_module_t *m, rill_tensor_t **in) {
  int np, nr;
  ck_assert(rill_module_function(m, "main", &np, &nr));
  for (int i = 0; i < np; i++) {
    rill_type_t t;
    ck_assert(rill_module_param_type(m, "main", i, &t, NULL));
    size_t n = rill_type_numel(&t);
    void *buf = calloc(n * rill_dtype_size(t.dtype) + 1, 1);
    bool is_float = t.dtype <= RILL_F64;
    for (size_t k = 0; k < n; k++)
      rill_element_set(t.dtype, buf, k, is_float ? 2 * urand() - 1 : (double)(urand() < 0.5));
    ck_assert(!rill_tensor_create(vm, &t, buf, &in[i]));
    free(buf);
  }
  return np;
}

/* Same results, bit for bit. */
static void expect_same(rill_tensor_t *const *a, rill_tensor_t *const *b, int n, const char *what) {
  for (int i = 0; i < n; i++) {
    size_t nb = rill_tensor_nbytes(a[i]);
    ck_assert_uint_eq(nb, rill_tensor_nbytes(b[i]));
    uint8_t *x = malloc(nb + 1), *y = malloc(nb + 1);
    ck_assert(!rill_tensor_read(a[i], x, nb));
    ck_assert(!rill_tensor_read(b[i], y, nb));
    ck_assert_msg(memcmp(x, y, nb) == 0, "%s: result %d differs between graph and interpreted runs", what, i);
    free(x);
    free(y);
  }
}

/* Graph mode `mode` against interpreted runs of one module on one device,
 * `runs` times with fresh inputs. Returns the graph VM's info. */
static rill_graph_info_t compare_runs(rill_module_t *m, const char *device, rill_graph_mode_t mode, int runs, const char *what) {
  rill_vm_t *g, *ref;
  ck_assert(!rill_vm_create(NULL, m, device, &g));
  ck_assert(!rill_vm_create(NULL, m, device, &ref));
  ck_assert(!rill_vm_set_graph_mode(g, NULL, mode));
  for (int r = 0; r < runs; r++) {
    rill_tensor_t *in_g[16], *in_r[16];
    uint64_t seed = rng;
    int np = random_inputs(g, m, in_g);
    rng = seed;
    random_inputs(ref, m, in_r);
    rill_tensor_t **rg, **rr;
    int ng, nr;
    rill_status_t st = rill_vm_invoke(g, "main", in_g, np, &rg, &ng);
    ck_assert_msg(!st, "%s on %s, run %d: %s", what, device, r, rill_status_message(st));
    ck_assert(!rill_vm_invoke(ref, "main", in_r, np, &rr, &nr));
    ck_assert_int_eq(ng, nr);
    char w[256];
    snprintf(w, sizeof w, "%s on %s, run %d", what, device, r);
    expect_same(rg, rr, ng, w);
    rill_results_free(g, rg, ng);
    rill_results_free(ref, rr, nr);
    for (int i = 0; i < np; i++) {
      rill_tensor_release(in_g[i]);
      rill_tensor_release(in_r[i]);
    }
  }
  rill_graph_info_t info;
  ck_assert(rill_vm_graph_info(g, "main", &info));
  rill_vm_destroy(g);
  rill_vm_destroy(ref);
  return info;
}

static const char *FIXTURES[] = {"branches", "cnn", "concat", "control", "decoder", "dtypes", "elementwise", "lowered", "reductions", "shapes", "weights"};

/* An f32 tensor of type t with every element x. */
static rill_tensor_t *filled(rill_vm_t *vm, rill_type_t t, float x) {
  size_t n = rill_type_numel(&t);
  float *v = malloc(sizeof(float) * (n ? n : 1));
  ck_assert(v);
  for (size_t i = 0; i < n; i++) v[i] = x;
  rill_tensor_t *o;
  ck_assert(!rill_tensor_create(vm, &t, v, &o));
  free(v);
  return o;
}

static rill_tensor_t *filled4(rill_vm_t *vm, float x) { return filled(vm, (rill_type_t){RILL_F32, 1, {4}}, x); }

static float first_of(rill_tensor_t *t) {
  float v[4];
  ck_assert(!rill_tensor_read(t, v, sizeof v));
  return v[0];
}

/* A VM on `device` with every function in graph mode (on). */
static rill_vm_t *graph_vm(rill_module_t *m, const char *device) {
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, device, &vm));
  ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
  return vm;
}

START_TEST(fixtures_replay_like_interpreted) {
  pick_devices();
  const char *schedules[] = {NULL, "none"};
  for (size_t f = 0; f < sizeof FIXTURES / sizeof *FIXTURES; f++)
    for (int s = 0; s < 2; s++) {
      char path[4200];
      snprintf(path, sizeof path, "%s/%s.vmasm", fixtures_dir(), FIXTURES[f]);
      rill_module_t *m = load_file(path, schedules[s]);
      for (int d = 0; d < ndevices; d++) {
        rill_graph_info_t info = compare_runs(m, devices[d], RILL_GRAPH_ON, 4, FIXTURES[f]);
        ck_assert_msg(info.instances == 1 && info.replays == 4 && info.nodes > 0, "%s: %d instances, %llu replays, %zu nodes",
                      FIXTURES[f], info.instances, (unsigned long long)info.replays, info.nodes);
      }
      rill_module_release(m);
    }
}
END_TEST

START_TEST(conformance_replay_like_interpreted) {
  if (!have_conformance("conformance_replay_like_interpreted")) return;
  pick_devices();
  const char *cases[] = {"mlp_f32", "resnet_stem_f32", "manual_streams_f32"};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s/prog.vmasm", conformance_dir(), cases[c]);
    rill_module_t *m = load_file(path, NULL);
    for (int d = 0; d < ndevices; d++) compare_runs(m, devices[d], RILL_GRAPH_ON, 3, cases[c]);
    rill_module_release(m);
  }
}
END_TEST

static rill_module_t *load_text(const char *src) {
  uint8_t *b;
  size_t n;
  rill_status_t st = asm_text(src, &b, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  free(b);
  return m;
}

/* ---- graphs per size (shape variables) ---- */
static const char *DYN_SRC =
    "dim B in [1, 16]\n"
    "func @main(%x: f32[B,3,8,8], %w: f32[4,3,3,3], %v: f32[S], %m: f32[B,S], %q: f32[S,5]) -> (f32[B,4,8,8], f32[B], f32[B,S], f32[B,5]) {\n"
    "  %c = conv2d(%x, %w) {padding=[1,1]}\n"
    "  %r = relu(%c)\n"
    "  %s = sum(%m) {axes=[1]}\n"
    "  %e = add(%m, %v)\n"
    "  %t = softmax(%e) {axis=-1}\n"
    "  %mm = matmul(%m, %q)\n"
    "  return %r, %s, %t, %mm\n"
    "}\n";

/* Fresh random inputs of DYN_SRC at B and S (S has no bound: its values are
 * allocated per run). */
/* Fresh random f32 tensors of types t[0..n), on vm's device. */
static void random_f32(rill_vm_t *vm, const rill_type_t *t, int n, rill_tensor_t **in) {
  for (int i = 0; i < n; i++) {
    size_t k = rill_type_numel(&t[i]);
    float *buf = malloc(k * sizeof(float) + 4);
    for (size_t j = 0; j < k; j++) buf[j] = (float)(2 * urand() - 1);
    ck_assert(!rill_tensor_create(vm, &t[i], buf, &in[i]));
    free(buf);
  }
}

static void dyn_inputs(rill_vm_t *vm, int64_t B, int64_t S, rill_tensor_t **in) {
  rill_type_t t[5] = {{RILL_F32, 4, {B, 3, 8, 8}}, {RILL_F32, 4, {4, 3, 3, 3}}, {RILL_F32, 1, {S}}, {RILL_F32, 2, {B, S}},
                      {RILL_F32, 2, {S, 5}}};
  random_f32(vm, t, 5, in);
}

/* One run at (B, S) in graph mode and interpreted, fresh inputs, same bits. */
static void dyn_run(rill_vm_t *g, rill_vm_t *ref, int64_t B, int64_t S, const char *what) {
  rill_tensor_t *in_g[5], *in_r[5], **rg, **rr;
  int ng, nr;
  uint64_t seed = rng;
  dyn_inputs(g, B, S, in_g);
  rng = seed;
  dyn_inputs(ref, B, S, in_r);
  rill_status_t st = rill_vm_invoke(g, "main", in_g, 5, &rg, &ng);
  ck_assert_msg(!st, "%s at B=%lld S=%lld: %s", what, (long long)B, (long long)S, rill_status_message(st));
  ck_assert(!rill_vm_invoke(ref, "main", in_r, 5, &rr, &nr));
  ck_assert_int_eq(ng, 4);
  ck_assert_int_eq(rill_tensor_type(rg[2])->dims[1], S);
  char w[160];
  snprintf(w, sizeof w, "%s at B=%lld S=%lld", what, (long long)B, (long long)S);
  expect_same(rg, rr, ng, w);
  rill_results_free(g, rg, ng);
  rill_results_free(ref, rr, nr);
  for (int i = 0; i < 5; i++) {
    rill_tensor_release(in_g[i]);
    rill_tensor_release(in_r[i]);
  }
}

static rill_graph_info_t dyn_info(rill_vm_t *vm) {
  rill_graph_info_t info;
  ck_assert(rill_vm_graph_info(vm, "main", &info));
  ck_assert_str_eq(info.reason, "");
  return info;
}

/* A module with shape variables in graph mode on: one set of graphs per
 * size, captured on first use, replayed with fresh inputs at that size;
 * sizes cycling over more than the bound drop the least recently used (every
 * run of a cycle captures again), sizes within it replay, and lowering the
 * bound drops at once. Results equal interpreted runs' bit for bit. */
START_TEST(graphs_per_size_lru) {
  pick_devices();
  rill_module_t *m = load_text(DYN_SRC);
  static const int64_t SIZES[5][2] = {{1, 3}, {2, 5}, {3, 3}, {4, 7}, {5, 2}};
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *g, *ref;
    ck_assert(!rill_vm_create(NULL, m, devices[d], &g));
    ck_assert(!rill_vm_create(NULL, m, devices[d], &ref));
    ck_assert(!rill_vm_set_graph_mode(g, NULL, RILL_GRAPH_ON));
    ck_assert(!rill_vm_set_graph_sizes(g, 3));
    for (int round = 0; round < 3; round++)
      for (int k = 0; k < 5; k++) {
        dyn_run(g, ref, SIZES[k][0], SIZES[k][1], devices[d]);
        rill_graph_info_t info = dyn_info(g);
        int run = round * 5 + k + 1;
        ck_assert_int_eq(info.sizes, run < 3 ? run : 3);
        ck_assert_uint_eq(info.captures, (uint64_t)run);
        ck_assert_uint_eq(info.sizes_dropped, (uint64_t)(run > 3 ? run - 3 : 0));
        ck_assert_uint_eq(info.replays, (uint64_t)run);
        ck_assert_int_eq(info.instances, info.sizes);
      }
    /* Room for all five: the three kept replay, the other two are captured once. */
    ck_assert(!rill_vm_set_graph_sizes(g, 8));
    for (int round = 0; round < 2; round++)
      for (int k = 0; k < 5; k++) dyn_run(g, ref, SIZES[k][0], SIZES[k][1], devices[d]);
    rill_graph_info_t info = dyn_info(g);
    ck_assert_int_eq(info.sizes, 5);
    ck_assert_uint_eq(info.captures, 17);
    ck_assert_uint_eq(info.sizes_dropped, 12);
    ck_assert_uint_eq(info.replays, 25);
    /* A lower bound drops the least recently used at once. */
    ck_assert(!rill_vm_set_graph_sizes(g, 2));
    info = dyn_info(g);
    ck_assert_int_eq(info.sizes, 2);
    ck_assert_uint_eq(info.sizes_dropped, 15);
    dyn_run(g, ref, SIZES[4][0], SIZES[4][1], devices[d]); /* kept: a replay */
    dyn_run(g, ref, SIZES[0][0], SIZES[0][1], devices[d]); /* dropped: captured again */
    info = dyn_info(g);
    ck_assert_uint_eq(info.captures, 18);
    ck_assert_uint_eq(info.sizes_dropped, 16);
    rill_status_t st = rill_vm_set_graph_sizes(g, 0);
    ck_assert(st && rill_status_code(st) == RILL_INVALID_ARGUMENT);
    rill_status_free(st);
    rill_vm_destroy(g);
    rill_vm_destroy(ref);
  }
  rill_module_release(m);
}
END_TEST

/* Buckets: a CNN-like function whose results keep B's rows apart (conv2d,
 * pool, flatten, a product, layer_norm and softmax over features, a mean,
 * unsqueeze and transpose away from B) runs B = 1..20 with buckets 4, 16
 * and 64 as three graphs, each run padded up (18 of 20) and cut back, with
 * the interpreted exact size's results (bit for bit on cpu; cuda may choose
 * other kernels at a bucket's size); a reduction over B, or a parameter
 * whose rows are not one run of bytes, runs each size exactly and says why;
 * bad buckets are refused. */
static const char *PAD_SRC =
    "dim B in [1, 64]\n"
    "func @main(%x: f32[B,3,8,8], %w: f32[4,3,3,3], %q: f32[64,5], %g: f32[5], %t: f32[B,2,6]) -> (f32[B,5], f32[B,4,4,4], f32[1,B,2], f32[B,6,2]) {\n"
    "  %c = conv2d(%x, %w) {padding=[1,1]}\n  %r = relu(%c)\n  %p = max_pool2d(%r) {kernel=[2,2]}\n  %f = flatten(%p)\n"
    "  %y = matmul(%f, %q)\n  %n = layer_norm(%y, %g, %g) {axis=-1}\n  %s = softmax(%n) {axis=1}\n"
    "  %m = mean(%t) {axes=[2]}\n  %u = unsqueeze(%m) {axes=[0]}\n  %tt = transpose(%t) {perm=[0,2,1]}\n"
    "  return %s, %p, %u, %tt\n}\n";

static void pad_inputs(rill_vm_t *vm, int64_t B, rill_tensor_t **in) {
  rill_type_t t[5] = {{RILL_F32, 4, {B, 3, 8, 8}}, {RILL_F32, 4, {4, 3, 3, 3}}, {RILL_F32, 2, {64, 5}}, {RILL_F32, 1, {5}},
                      {RILL_F32, 3, {B, 2, 6}}};
  random_f32(vm, t, 5, in);
}

static void expect_close(rill_tensor_t *const *a, rill_tensor_t *const *b, int n, const char *what) {
  for (int i = 0; i < n; i++) {
    size_t nb = rill_tensor_nbytes(a[i]);
    ck_assert_msg(nb == rill_tensor_nbytes(b[i]) && rill_tensor_type(a[i])->rank == rill_tensor_type(b[i])->rank, "%s: result %d's type", what, i);
    for (int d = 0; d < rill_tensor_type(a[i])->rank; d++) ck_assert_int_eq(rill_tensor_type(a[i])->dims[d], rill_tensor_type(b[i])->dims[d]);
    float *x = malloc(nb + 4), *y = malloc(nb + 4);
    ck_assert(!rill_tensor_read(a[i], x, nb));
    ck_assert(!rill_tensor_read(b[i], y, nb));
    for (size_t k = 0; k < nb / 4; k++)
      ck_assert_msg(fabsf(x[k] - y[k]) <= 1e-4f * (1 + fabsf(y[k])), "%s: result %d [%zu]: %g, interpreted %g", what, i, k, x[k], y[k]);
    free(x);
    free(y);
  }
}

START_TEST(graph_buckets) {
  pick_devices();
  rill_module_t *m = load_text(PAD_SRC);
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *g, *ref;
    ck_assert(!rill_vm_create(NULL, m, devices[d], &g));
    ck_assert(!rill_vm_create(NULL, m, devices[d], &ref));
    ck_assert(!rill_vm_set_graph_mode(g, NULL, RILL_GRAPH_ON));
    ck_assert(!rill_vm_set_graph_buckets(g, "B", (const int64_t[]){4, 16, 64}, 3));
    for (int64_t B = 1; B <= 20; B++) {
      rill_tensor_t *in_g[5], *in_r[5], **rg, **rr;
      int ng, nr;
      uint64_t seed = rng;
      pad_inputs(g, B, in_g);
      rng = seed;
      pad_inputs(ref, B, in_r);
      rill_status_t st = rill_vm_invoke(g, "main", in_g, 5, &rg, &ng);
      ck_assert_msg(!st, "%s at B=%lld: %s", devices[d], (long long)B, rill_status_message(st));
      ck_assert(!rill_vm_invoke(ref, "main", in_r, 5, &rr, &nr));
      ck_assert_int_eq(ng, 4);
      ck_assert_int_eq(rill_tensor_type(rg[0])->dims[0], B);
      ck_assert_int_eq(rill_tensor_type(rg[2])->dims[1], B);
      char w[96];
      snprintf(w, sizeof w, "%s at B=%lld", devices[d], (long long)B);
      if (d == 0) expect_same(rg, rr, ng, w);
      else expect_close(rg, rr, ng, w);
      rill_results_free(g, rg, ng);
      rill_results_free(ref, rr, nr);
      for (int i = 0; i < 5; i++) {
        rill_tensor_release(in_g[i]);
        rill_tensor_release(in_r[i]);
      }
    }
    rill_graph_info_t info = dyn_info(g);
    ck_assert_str_eq(info.pad_reason, "");
    ck_assert_int_eq(info.sizes, 3);
    ck_assert_uint_eq(info.captures, 3);
    ck_assert_uint_eq(info.padded, 18);
    ck_assert_uint_eq(info.replays, 20);
    /* refused: no such variable, outside the range, not ascending */
    rill_status_t st = rill_vm_set_graph_buckets(g, "S", (const int64_t[]){4}, 1);
    ck_assert(st && rill_status_code(st) == RILL_NOT_FOUND);
    rill_status_free(st);
    st = rill_vm_set_graph_buckets(g, "B", (const int64_t[]){4, 65}, 2);
    ck_assert(st && rill_status_code(st) == RILL_INVALID_ARGUMENT && strstr(rill_status_message(st), "[1, 64]"));
    rill_status_free(st);
    st = rill_vm_set_graph_buckets(g, "B", (const int64_t[]){8, 8}, 2);
    ck_assert(st && rill_status_code(st) == RILL_INVALID_ARGUMENT && strstr(rill_status_message(st), "ascend"));
    rill_status_free(st);
    /* cleared: each size runs exactly again */
    ck_assert(!rill_vm_set_graph_buckets(g, "B", NULL, 0));
    rill_tensor_t *in[5], **res;
    int n;
    pad_inputs(g, 7, in);
    ck_assert(!rill_vm_invoke(g, "main", in, 5, &res, &n));
    rill_results_free(g, res, n);
    for (int i = 0; i < 5; i++) rill_tensor_release(in[i]);
    info = dyn_info(g);
    ck_assert_uint_eq(info.padded, 18);
    ck_assert_uint_eq(info.captures, 4);
    rill_vm_destroy(g);
    rill_vm_destroy(ref);
  }
  rill_module_release(m);
  /* Not padded: a sum over B's rows; a parameter with B after a size other than 1. */
  static const char *const no_pad[2][2] = {
      {"dim B in [1, 64]\nfunc @main(%x: f32[B,4]) -> (f32[B,4], f32[4]) {\n  %a = relu(%x)\n  %s = sum(%a) {axes=[0]}\n  return %a, %s\n}\n",
       "sum (line 4) mixes B's rows"},
      {"dim B in [1, 64]\nfunc @main(%x: f32[2,B]) -> f32[2,B] {\n  %a = relu(%x)\n  return %a\n}\n", "parameter %x (f32[2,B])"}};
  for (int k = 0; k < 2; k++) {
    m = load_text(no_pad[k][0]);
    for (int d = 0; d < ndevices; d++) {
      rill_vm_t *g;
      ck_assert(!rill_vm_create(NULL, m, devices[d], &g));
      ck_assert(!rill_vm_set_graph_mode(g, NULL, RILL_GRAPH_ON));
      ck_assert(!rill_vm_set_graph_buckets(g, "B", (const int64_t[]){8}, 1));
      for (int64_t B = 3; B <= 5; B += 2) {
        rill_type_t t = {RILL_F32, 2, {k ? 2 : B, k ? B : 4}};
        float v[64];
        for (int i = 0; i < 64; i++) v[i] = (float)i - 9;
        rill_tensor_t *in, **res;
        int n;
        ck_assert(!rill_tensor_create(g, &t, v, &in));
        ck_assert(!rill_vm_invoke(g, "main", &in, 1, &res, &n));
        float y[64];
        ck_assert(!rill_tensor_read(res[0], y, rill_tensor_nbytes(res[0])));
        for (int i = 0; i < (int)(rill_tensor_nbytes(res[0]) / 4); i++) ck_assert(y[i] == (v[i] > 0 ? v[i] : 0));
        if (!k) {
          float s[4];
          ck_assert(!rill_tensor_read(res[1], s, sizeof s));
          float want = 0;
          for (int64_t r = 0; r < B; r++) want += v[r * 4 + 1] > 0 ? v[r * 4 + 1] : 0;
          ck_assert(s[1] == want);
        }
        rill_results_free(g, res, n);
        rill_tensor_release(in);
      }
      rill_graph_info_t info = dyn_info(g);
      ck_assert_msg(strstr(info.pad_reason, no_pad[k][1]) != NULL, "%s", info.pad_reason);
      ck_assert_uint_eq(info.padded, 0);
      ck_assert_uint_eq(info.captures, 2);
      rill_vm_destroy(g);
    }
    rill_module_release(m);
  }
}
END_TEST

typedef struct dyn_flight {
  rill_vm_t *vm;
  rill_tensor_t *in;
  int64_t n;
  float x;
  int done;
  rill_status_t st;
  bool ok;
} dyn_flight_t;

static void on_dyn_done(void *user, rill_status_t st, rill_tensor_t **res, int n) {
  dyn_flight_t *f = user;
  f->st = st;
  f->done = 1;
  if (st) return;
  float v[16];
  f->ok = n == 1 && rill_tensor_type(res[0])->dims[0] == f->n && !rill_tensor_read(res[0], v, sizeof(float) * (size_t)f->n);
  for (int64_t k = 0; f->ok && k < f->n; k++) {
    float x = f->x + (float)k;
    f->ok = v[k] == x * x + x;
  }
  rill_results_free(f->vm, res, n);
}

/* Sizes dropped while their replays are in flight (a bound of 1, runs at
 * alternating sizes started on one loop before any ends): each dropped size
 * goes once its replay has ended, and every run's results (handed out
 * without a copy by the first replay) are right. */
START_TEST(graphs_per_size_dropped_in_flight) {
  pick_devices();
  rill_module_t *m = load_text("dim B in [1, 16]\nfunc @main(%x: f32[B]) -> f32[B] {\n"
                               "  %a = mul(%x, %x)\n  %b = add(%a, %x)\n  return %b\n}\n");
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *vm = graph_vm(m, devices[d]);
    ck_assert(!rill_vm_set_graph_sizes(vm, 1));
    uv_loop_t loop;
    uv_loop_init(&loop);
    enum { N = 8 };
    dyn_flight_t f[N];
    for (int round = 0; round < 2; round++) {
      for (int i = 0; i < N; i++) {
        float v[16];
        f[i] = (dyn_flight_t){vm, NULL, i % 2 ? 5 : 11, (float)(i + 1) / 4, 0, NULL, false};
        for (int k = 0; k < f[i].n; k++) v[k] = f[i].x + (float)k;
        rill_type_t t = {RILL_F32, 1, {f[i].n}};
        ck_assert(!rill_tensor_create(vm, &t, v, &f[i].in));
        ck_assert(!rill_vm_invoke_async(vm, &loop, "main", &f[i].in, 1, on_dyn_done, &f[i]));
      }
      uv_run(&loop, UV_RUN_DEFAULT);
      for (int i = 0; i < N; i++) {
        ck_assert_msg(f[i].done && !f[i].st, "%s run %d: %s", devices[d], i, f[i].st ? rill_status_message(f[i].st) : "not done");
        ck_assert_msg(f[i].ok, "%s run %d (size %lld): wrong results", devices[d], i, (long long)f[i].n);
        rill_tensor_release(f[i].in);
      }
    }
    uv_loop_close(&loop);
    rill_graph_info_t info = dyn_info(vm);
    ck_assert_int_eq(info.sizes, 1);
    ck_assert_uint_eq(info.captures, 2 * N);
    ck_assert_uint_eq(info.sizes_dropped, 2 * N - 1);
    ck_assert_uint_eq(info.replays, 2 * N);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}
END_TEST

/* A while whose trip count is an input and an if on an input, nested: one
 * capture, then replays with trip counts 0 to 7 and both branches, against
 * interpreted runs. */
START_TEST(control_flow_replays) {
  pick_devices();
  const char *src =
      "const %W : f32[4,4] = [[0.5, -0.25, 0.125, 0.75], [-0.5, 0.25, 0.375, -0.125], [0.25, 0.5, -0.75, 0.5], [0.125, -0.5, 0.25, 0.25]]\n"
      "func @cond(%i: i64[], %n: i64[], %x: f32[4,4]) -> bool[] {\n  %c = lt(%i, %n)\n  return %c\n}\n"
      "func @twice(%x: f32[4,4]) -> f32[4,4] {\n  %y = add(%x, %x)\n  return %y\n}\n"
      "func @same(%x: f32[4,4]) -> f32[4,4] {\n  %y = neg(%x)\n  return %y\n}\n"
      "func @body(%i: i64[], %n: i64[], %x: f32[4,4]) -> (i64[], i64[], f32[4,4]) {\n  %i2 = add(%i, 1)\n"
      "  %m = matmul(%x, %W)\n  %x2 = tanh(%m)\n  %odd = gt(%i2, 2)\n  %x3 = if(%odd, @twice, @same, %x2)\n  return %i2, %n, %x3\n}\n"
      "const %zero : i64[] = 0\n"
      "func @main(%x: f32[4,4], %n: i64[], %flip: bool[]) -> (f32[4,4], i64[]) {\n"
      "  %a = if(%flip, @twice, @same, %x)\n  %i, %nn, %y = while(@cond, @body, %zero, %n, %a)\n  return %y, %i\n}\n";
  rill_module_t *m = load_text(src);
  const long trips[] = {3, 0, 1, 7, 2, 0, 5};
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *g, *ref;
    ck_assert(!rill_vm_create(NULL, m, devices[d], &g));
    ck_assert(!rill_vm_create(NULL, m, devices[d], &ref));
    ck_assert(!rill_vm_set_graph_mode(g, NULL, RILL_GRAPH_ON));
    for (int k = 0; k < 7; k++) {
      float x[16];
      for (int i = 0; i < 16; i++) x[i] = (float)(2 * urand() - 1);
      int64_t n = trips[k];
      uint8_t flip = (uint8_t)(k % 2);
      rill_type_t tx = {RILL_F32, 2, {4, 4}}, tn = {RILL_I64, 0, {0}}, tb = {RILL_BOOL, 0, {0}};
      rill_tensor_t *in[2][3], **res[2];
      int nres[2];
      rill_vm_t *vms[2] = {g, ref};
      for (int v = 0; v < 2; v++) {
        ck_assert(!rill_tensor_create(vms[v], &tx, x, &in[v][0]));
        ck_assert(!rill_tensor_create(vms[v], &tn, &n, &in[v][1]));
        ck_assert(!rill_tensor_create(vms[v], &tb, &flip, &in[v][2]));
        rill_status_t st = rill_vm_invoke(vms[v], "main", in[v], 3, &res[v], &nres[v]);
        ck_assert_msg(!st, "%s, trip count %ld: %s", devices[d], (long)n, rill_status_message(st));
      }
      char w[96];
      snprintf(w, sizeof w, "control flow on %s, trip count %ld, flip %d", devices[d], (long)n, flip);
      expect_same(res[0], res[1], nres[0], w);
      int64_t i_out;
      ck_assert(!rill_tensor_read(res[0][1], &i_out, sizeof i_out));
      ck_assert_int_eq(i_out, n);
      for (int v = 0; v < 2; v++) {
        rill_results_free(vms[v], res[v], nres[v]);
        for (int i = 0; i < 3; i++) rill_tensor_release(in[v][i]);
      }
    }
    rill_graph_info_t info;
    ck_assert(rill_vm_graph_info(g, "main", &info));
    ck_assert_msg(info.instances == 1 && info.replays == 7, "%d instances, %llu replays", info.instances, (unsigned long long)info.replays);
    rill_vm_destroy(g);
    rill_vm_destroy(ref);
  }
  rill_module_release(m);
}
END_TEST

/* m's @main cannot be captured: auto interprets it with a reason holding
 * `why` (results equal interpreted runs', on cuda too where the GPU is
 * usable), on refuses it, and the VM still runs it interpreted. */
static void expect_falls_back(rill_module_t *m, const char *why, const char *what) {
  pick_devices();
  for (int d = 0; d < ndevices; d++) {
    rill_graph_info_t info = compare_runs(m, devices[d], RILL_GRAPH_AUTO, 3, what);
    ck_assert_int_eq(info.instances, 0);
    ck_assert_msg(strstr(info.reason, why), "reason: %s", info.reason);
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(NULL, m, devices[d], &vm));
    ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
    rill_tensor_t *in[4], **res;
    int np = random_inputs(vm, m, in), nres;
    rill_status_t st = rill_vm_invoke(vm, "main", in, np, &res, &nres);
    ck_assert_msg(st && strstr(rill_status_message(st), "cannot run as a graph"), "%s", st ? rill_status_message(st) : "ok");
    rill_status_free(st);
    ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_OFF));
    ck_assert(!rill_vm_invoke(vm, "main", in, np, &res, &nres));
    rill_results_free(vm, res, nres);
    for (int i = 0; i < np; i++) rill_tensor_release(in[i]);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}

/* A size read back at run time (bind_dims, here nonzero's count). */
START_TEST(bind_dims_falls_back) {
  expect_falls_back(load_text("func @main(%x: f32[3,5]) -> i64[2,N] {\n  %r = relu(%x)\n  %c = cast(%r) {dtype=bool}\n"
                              "  %i = cast(%c) {dtype=i64}\n  %n = sum(%i)\n  bind_dims(%n, N)\n  %y = nonzero(%r) {count=[N]}\n  return %y\n}\n"),
                    "a size read back on the host (bind_dims)", "bind_dims (auto)");
}
END_TEST

/* A function whose branch is neither an if nor a while (lowered form). */
START_TEST(uncapturable_falls_back) {
  expect_falls_back(load_text("op $0 = neg(f32[4]) -> (f32[4])\n"
                              "func @main(%x: f32[4], %c: bool[]) -> (f32[4]) lowered(streams=1, events=0) {\n"
                              "  reg %y : f32[4]\n  host_wait %c\n  br_if %c, yes, no\nno:\n  alloc_tensor %y\n"
                              "  invoke $0, (%x), (%y)\n  return (%y)\nyes:\n  return (%x)\n}\n"),
                    "a branch that is not an if or a while", "unstructured (auto)");
}
END_TEST

/* N runs in flight on one loop: instances are made on demand (at most
 * four), and each run gets its own inputs' results. */
typedef struct inflight {
  rill_vm_t *vm;
  rill_tensor_t *in;
  double x;
  int done;
  rill_status_t st;
  double got;
} inflight_t;

static void on_done(void *user, rill_status_t st, rill_tensor_t **res, int n) {
  inflight_t *f = user;
  f->st = st;
  if (!st) {
    float v[64];
    ck_assert(!rill_tensor_read(res[0], v, sizeof v));
    f->got = v[63];
  }
  rill_results_free(f->vm, res, n);
  f->done = 1;
}

START_TEST(concurrent_runs_on_one_loop) {
  pick_devices();
  const char *src = "func @main(%x: f32[64]) -> f32[64] {\n  %a = mul(%x, %x)\n  %b = add(%a, %x)\n  %c = tanh(%b)\n"
                    "  %d = exp(%x)\n  %e = add(%c, %d)\n  return %e\n}\n";
  rill_module_t *m = load_text(src);
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *vm = graph_vm(m, devices[d]);
    uv_loop_t loop;
    uv_loop_init(&loop);
    enum { N = 16 };
    inflight_t f[N];
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < N; i++) {
        f[i] = (inflight_t){vm, NULL, (double)(i + round) / N, 0, NULL, 0};
        f[i].in = filled(vm, (rill_type_t){RILL_F32, 1, {64}}, (float)f[i].x);
        ck_assert(!rill_vm_invoke_async(vm, &loop, "main", &f[i].in, 1, on_done, &f[i]));
      }
      uv_run(&loop, UV_RUN_DEFAULT);
      for (int i = 0; i < N; i++) {
        ck_assert_msg(f[i].done && !f[i].st, "%s run %d: %s", devices[d], i, f[i].st ? rill_status_message(f[i].st) : "not done");
        float x = (float)f[i].x, a = x * x, bb = a + x, want = tanhf(bb) + expf(x);
        ck_assert_msg(fabs(f[i].got - want) <= 1e-5 * (1 + fabs(want)), "%s run %d: got %g want %g", devices[d], i, f[i].got, want);
        rill_tensor_release(f[i].in);
      }
    }
    uv_loop_close(&loop);
    rill_graph_info_t info;
    ck_assert(rill_vm_graph_info(vm, "main", &info));
    ck_assert_msg(info.instances > 1 && info.instances <= 4, "%d instances", info.instances);
    ck_assert_int_eq(info.replays, 3 * N);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}
END_TEST

/* A server's pattern: N runs kept in flight, each started again from the
 * callback of the one before, results released there. Every instance but
 * the last hands its results out without a copy, so with four in flight
 * about one run in four copies out (each run finds its own instance idle
 * again), not nearly every run as when only a second idle instance allowed
 * it. Results checked at every run. */
typedef struct chain {
  rill_vm_t *vm;
  uv_loop_t *loop;
  rill_tensor_t *in;
  float x;
  int left, bad;
  rill_status_t st;
} chain_t;

static void chain_done(void *user, rill_status_t st, rill_tensor_t **res, int n) {
  chain_t *c = user;
  if (st) {
    c->st = st;
    return;
  }
  static float v[128 * 128];
  float want = 128 * c->x * tanhf(128 * c->x * c->x) + c->x;
  if (rill_tensor_read(res[0], v, sizeof v) || fabsf(v[128 * 128 - 1] - want) > 1e-4f * (1 + fabsf(want))) c->bad++;
  rill_results_free(c->vm, res, n);
  if (--c->left > 0) c->st = rill_vm_invoke_async(c->vm, c->loop, "main", &c->in, 1, chain_done, c);
}

START_TEST(chained_runs_mostly_without_copies) {
  pick_devices();
  /* Products of 128x128 matrices, so that runs are still in flight when
   * one ends and the next starts. */
  const char *src = "func @main(%x: f32[128,128]) -> f32[128,128] {\n  %a = matmul(%x, %x)\n  %b = tanh(%a)\n"
                    "  %c = matmul(%b, %x)\n  %e = add(%c, %x)\n  return %e\n}\n";
  rill_module_t *m = load_text(src);
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *vm = graph_vm(m, devices[d]);
    uv_loop_t loop;
    uv_loop_init(&loop);
    /* RILL_QUICK (under compute-sanitizer, where each product takes long): 12 runs a chain. */
    enum { N = 4 };
    const int RUNS = getenv("RILL_QUICK") ? 12 : 50;
    chain_t c[N];
    for (int i = 0; i < N; i++) {
      c[i] = (chain_t){vm, &loop, NULL, 0.01f * (float)(i + 1), RUNS, 0, NULL};
      c[i].in = filled(vm, (rill_type_t){RILL_F32, 2, {128, 128}}, c[i].x);
      ck_assert(!rill_vm_invoke_async(vm, &loop, "main", &c[i].in, 1, chain_done, &c[i]));
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    for (int i = 0; i < N; i++) {
      ck_assert_msg(!c[i].st, "%s chain %d: %s", devices[d], i, c[i].st ? rill_status_message(c[i].st) : "");
      ck_assert_msg(!c[i].left && !c[i].bad, "%s chain %d: %d runs left, %d wrong", devices[d], i, c[i].left, c[i].bad);
      rill_tensor_release(c[i].in);
    }
    rill_graph_info_t info;
    ck_assert(rill_vm_graph_info(vm, "main", &info));
    ck_assert_int_eq(info.replays, N * RUNS);
    ck_assert_msg(info.instances == N && info.copied_out * 2 <= info.replays, "%s: %d instances, %llu of %llu runs copied out",
                  devices[d], info.instances, (unsigned long long)info.copied_out, (unsigned long long)info.replays);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}
END_TEST

/* A result that is a constant is shared by every instance: once callers let
 * go of results they kept from all four instances, later runs replay again
 * (they ran interpreted for good when the constant's references counted as
 * a caller's). */
START_TEST(constant_result_kept_and_released) {
  pick_devices();
  rill_module_t *m = load_text("const %k : f32[4] = [1, 2, 3, 4]\nfunc @main(%x: f32[4]) -> (f32[4], f32[4]) {\n"
                               "  %y = add(%x, %x)\n  return %y, %k\n}\n");
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *vm = graph_vm(m, devices[d]);
    rill_tensor_t **held[4], **r;
    int n;
    for (int k = 0; k < 4; k++) {
      rill_tensor_t *x = filled4(vm, (float)k);
      ck_assert(!rill_vm_invoke(vm, "main", &x, 1, &held[k], &n));
      rill_tensor_release(x);
    }
    for (int k = 0; k < 4; k++) {
      ck_assert(first_of(held[k][0]) == 2.0f * (float)k && first_of(held[k][1]) == 1.0f);
      rill_results_free(vm, held[k], n);
    }
    for (int k = 0; k < 3; k++) {
      rill_tensor_t *x = filled4(vm, 7);
      ck_assert(!rill_vm_invoke(vm, "main", &x, 1, &r, &n));
      ck_assert(first_of(r[0]) == 14.0f && first_of(r[1]) == 1.0f);
      rill_results_free(vm, r, n);
      rill_tensor_release(x);
    }
    rill_graph_info_t info;
    ck_assert(rill_vm_graph_info(vm, "main", &info));
    ck_assert_msg(info.instances == 4 && info.replays == 7, "%s: %d instances, %llu of 7 runs replayed", devices[d], info.instances,
                  (unsigned long long)info.replays);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}
END_TEST

/* A caller's view of a result (another function's reshape shares its
 * memory) keeps the instance out of use after the result itself is let go:
 * the next run must not write over it. */
START_TEST(view_of_result_kept) {
  pick_devices();
  rill_module_t *m = load_text("func @main(%x: f32[4]) -> f32[4] {\n  %y = add(%x, %x)\n  return %y\n}\n"
                               "func @view(%y: f32[4]) -> f32[2,2] {\n  %z = reshape(%y) {shape=[2,2]}\n  return %z\n}\n");
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(NULL, m, devices[d], &vm));
    ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
    rill_tensor_t *x1 = filled4(vm, 1), *x5 = filled4(vm, 5), **y, **z, **y2;
    int n;
    ck_assert(!rill_vm_invoke(vm, "main", &x1, 1, &y, &n));
    ck_assert(!rill_vm_invoke(vm, "view", y, 1, &z, &n));
    rill_results_free(vm, y, 1);
    ck_assert(!rill_vm_invoke(vm, "main", &x5, 1, &y2, &n));
    ck_assert_msg(first_of(z[0]) == 2.0f && first_of(y2[0]) == 10.0f, "%s: the kept view reads %g (want 2), the new result %g (want 10)",
                  devices[d], first_of(z[0]), first_of(y2[0]));
    rill_results_free(vm, y2, 1);
    rill_results_free(vm, z, 1);
    rill_tensor_release(x1);
    rill_tensor_release(x5);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}
END_TEST

/* Results a caller keeps stay as they were while later runs replay: the
 * first three replays hand out their instances' own tensors, and the fourth
 * instance, the last, copies its results out, so that runs after it still
 * replay (it is never held by a caller). */
START_TEST(held_results_stay_valid) {
  pick_devices();
  char path[4200];
  snprintf(path, sizeof path, "%s/branches.vmasm", fixtures_dir());
  rill_module_t *m = load_file(path, NULL);
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *g, *ref;
    ck_assert(!rill_vm_create(NULL, m, devices[d], &g));
    ck_assert(!rill_vm_create(NULL, m, devices[d], &ref));
    ck_assert(!rill_vm_set_graph_mode(g, NULL, RILL_GRAPH_ON));
    enum { K = 7 };
    rill_tensor_t **held[K], **want[K];
    int n = 0;
    for (int k = 0; k < K; k++) {
      rill_tensor_t *in_g[4], *in_r[4];
      uint64_t seed = rng;
      int np = random_inputs(g, m, in_g);
      rng = seed;
      random_inputs(ref, m, in_r);
      ck_assert(!rill_vm_invoke(g, "main", in_g, np, &held[k], &n));
      ck_assert(!rill_vm_invoke(ref, "main", in_r, np, &want[k], &n));
      for (int i = 0; i < np; i++) {
        rill_tensor_release(in_g[i]);
        rill_tensor_release(in_r[i]);
      }
    }
    for (int k = 0; k < K; k++) {
      char w[64];
      snprintf(w, sizeof w, "held run %d on %s", k, devices[d]);
      expect_same(held[k], want[k], n, w);
      rill_results_free(g, held[k], n);
      rill_results_free(ref, want[k], n);
    }
    rill_graph_info_t info;
    ck_assert(rill_vm_graph_info(g, "main", &info));
    ck_assert_int_eq(info.instances, 4);
    ck_assert_int_eq(info.replays, K);
    rill_vm_destroy(g);
    rill_vm_destroy(ref);
  }
  rill_module_release(m);
}
END_TEST

/* A replay reads its inputs where they are now: the same tensor again, with
 * new contents where the caller's memory is the host's (cpu), other tensors
 * in turn, and back to the first; each result against the expected values. */
static void expect_y(rill_vm_t *vm, rill_tensor_t *x, rill_tensor_t *w, float xv, float wv, const char *what) {
  rill_tensor_t *in[2] = {x, w}, **r;
  int n;
  rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &r, &n);
  ck_assert_msg(!st, "%s: %s", what, st ? rill_status_message(st) : "");
  float y[256];
  ck_assert(!rill_tensor_read(r[0], y, sizeof y));
  for (int k = 0; k < 256; k++) ck_assert_msg(y[k] == xv * wv + xv, "%s: y[%d] = %g, want %g", what, k, y[k], xv * wv + xv);
  rill_results_free(vm, r, n);
}

START_TEST(inputs_bound_where_they_are) {
  pick_devices();
  const char *src = "func @main(%x: f32[256], %w: f32[256]) -> f32[256] {\n  %a = mul(%x, %w)\n  %y = add(%a, %x)\n  return %y\n}\n";
  rill_module_t *m = load_text(src);
  rill_type_t t = {RILL_F32, 1, {256}};
  for (int d = 0; d < ndevices; d++) {
    rill_vm_t *vm = graph_vm(m, devices[d]);
    rill_tensor_t *x[3], *w;
    float v[256];
    for (int i = 0; i < 3; i++) {
      for (int k = 0; k < 256; k++) v[k] = (float)(i + 1);
      ck_assert(!rill_tensor_create(vm, &t, v, &x[i]));
    }
    for (int k = 0; k < 256; k++) v[k] = 0.5f;
    ck_assert(!rill_tensor_create(vm, &t, v, &w));
    char what[96];
    for (int r = 0; r < 7; r++) { /* x0 x0 x1 x2 x0 x1 x1 */
      static const int order[7] = {0, 0, 1, 2, 0, 1, 1};
      snprintf(what, sizeof what, "%s, replay %d with x%d", devices[d], r, order[r]);
      expect_y(vm, x[order[r]], w, (float)(order[r] + 1), 0.5f, what);
    }
    if (strcmp(devices[d], "cpu") == 0) { /* the same memory, written by the caller between runs */
      float *host = malloc(sizeof v);
      for (int k = 0; k < 256; k++) host[k] = 3;
      rill_tensor_t *h;
      ck_assert(!rill_tensor_wrap(vm, &t, host, NULL, NULL, &h));
      expect_y(vm, h, w, 3, 0.5f, "cpu, wrapped memory");
      for (int k = 0; k < 256; k++) host[k] = -2;
      expect_y(vm, h, w, -2, 0.5f, "cpu, wrapped memory written again");
      expect_y(vm, x[2], w, 3, 0.5f, "cpu, back to x2");
      for (int k = 0; k < 256; k++) host[k] = 7;
      expect_y(vm, h, w, 7, 0.5f, "cpu, wrapped memory a third time");
      rill_tensor_release(h);
      free(host);
    }
    rill_graph_info_t info;
    ck_assert(rill_vm_graph_info(vm, "main", &info));
    ck_assert_int_eq(info.captures, 1);
    for (int i = 0; i < 3; i++) rill_tensor_release(x[i]);
    rill_tensor_release(w);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}
END_TEST

/* cuda: when a replayed run has ended for the caller, the device has
 * finished it. Each replay's result is read straight from device memory
 * (a synchronous copy, ordered after nothing of the VM's) as soon as the
 * invocation returns: a run ended early would show the previous replay's
 * values. The graph is long (16 products of 2048 x 2048, about 5 ms). */
START_TEST(replay_ends_after_the_device) {
#if RILL_HAVE_CUDA
  pick_devices();
  if (ndevices < 2) return;
  const rill_cuda_api_t *api = rill_cuda_api(NULL);
  CUcontext ctx;
  CUdevice dev;
  ck_assert(api->cuDeviceGet(&dev, 0) == CUDA_SUCCESS);
  ck_assert(api->cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS);
  ck_assert(api->cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  char src[2048];
  int at = snprintf(src, sizeof src, "func @main(%%x: f32[2048,2048], %%w: f32[2048,2048]) -> f32[2048,2048] {\n  %%y0 = matmul(%%x, %%w)\n");
  for (int k = 1; k < 16; k++) at += snprintf(src + at, sizeof src - (size_t)at, "  %%y%d = matmul(%%y%d, %%w)\n", k, k - 1);
  snprintf(src + at, sizeof src - (size_t)at, "  return %%y15\n}\n");
  rill_module_t *m = load_text(src);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cuda", &vm));
  ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
  rill_type_t t = {RILL_F32, 2, {2048, 2048}};
  size_t numel = 2048 * 2048;
  float *h = malloc(numel * sizeof *h);
  for (size_t k = 0; k < numel; k++) h[k] = k % 2049 == 0 ? 1.0f : 0.0f; /* the identity */
  rill_tensor_t *in[2];
  ck_assert(!rill_tensor_create(vm, &t, h, &in[1]));
  for (int r = 0; r < 6; r++) {
    for (size_t k = 0; k < numel; k++) h[k] = (float)(r + 1);
    ck_assert(!rill_tensor_create(vm, &t, h, &in[0]));
    rill_tensor_t **res;
    int n;
    rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &res, &n);
    ck_assert_msg(!st, "replay %d: %s", r, st ? rill_status_message(st) : "");
    float got[2];
    CUdeviceptr p = (CUdeviceptr)rill_tensor_device_pointer(res[0]);
    ck_assert(api->cuMemcpyDtoH(&got[0], p, sizeof(float)) == CUDA_SUCCESS);
    ck_assert(api->cuMemcpyDtoH(&got[1], p + (numel - 1) * sizeof(float), sizeof(float)) == CUDA_SUCCESS);
    ck_assert_msg(got[0] == (float)(r + 1) && got[1] == (float)(r + 1), "replay %d ended before the device: read %g and %g, want %d",
                  r, got[0], got[1], r + 1);
    rill_results_free(vm, res, n);
    rill_tensor_release(in[0]);
  }
  rill_graph_info_t info;
  ck_assert(rill_vm_graph_info(vm, "main", &info));
  ck_assert_int_eq(info.replays, 6);
  rill_tensor_release(in[1]);
  free(h);
  rill_vm_destroy(vm);
  rill_module_release(m);
  api->cuDevicePrimaryCtxRelease(dev);
#endif
}
END_TEST

/* Allocation failure at every allocation of the first graph-mode run
 * (warm-up, capture, instantiation): the invocation fails with a status
 * (mode on) or runs interpreted (auto), nothing leaks, and the VM still
 * runs. */
START_TEST(capture_allocation_failures) {
  char path[4200];
  snprintf(path, sizeof path, "%s/branches.vmasm", fixtures_dir());
  rill_module_t *m = load_file(path, NULL);
  bool reached_end = false;
  for (long k = 1; k < 100000 && !reached_end; k++) {
    for (int mode = RILL_GRAPH_AUTO; mode <= RILL_GRAPH_ON; mode++) {
      test_alloc_t ta;
      test_alloc_init(&ta, 0);
      rill_vm_t *vm;
      ck_assert(!rill_vm_create(&ta.base, m, "cpu", &vm));
      ck_assert(!rill_vm_set_graph_mode(vm, NULL, (rill_graph_mode_t)mode));
      rill_tensor_t *in[4], **res;
      int np = random_inputs(vm, m, in), nres;
      ta.fail_at = atomic_load(&ta.count) + k;
      rill_status_t st = rill_vm_invoke(vm, "main", in, np, &res, &nres);
      ta.fail_at = 0;
      if (st) {
        rill_status_free(st);
      } else {
        rill_results_free(vm, res, nres);
        if (mode == RILL_GRAPH_ON) {
          rill_graph_info_t info;
          rill_vm_graph_info(vm, "main", &info);
          reached_end = info.instances == 1;
        }
      }
      /* Still usable, interpreted. */
      ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_OFF));
      st = rill_vm_invoke(vm, "main", in, np, &res, &nres);
      ck_assert_msg(!st, "after failure %ld: %s", k, rill_status_message(st));
      rill_results_free(vm, res, nres);
      for (int i = 0; i < np; i++) rill_tensor_release(in[i]);
      rill_vm_destroy(vm);
      ck_assert_msg(atomic_load(&ta.live) == 0, "failure at allocation %ld (mode %d): %ld blocks leaked", k, mode,
                    atomic_load(&ta.live));
    }
  }
  ck_assert(reached_end);
  rill_module_release(m);
}
END_TEST

/* The same for a padded first call (B=3 run as bucket 8's graph, whose
 * instance keeps the padded inputs as its stage): a status, nothing leaked,
 * and the VM then replays padded and exact calls right. */
static rill_tensor_t *rows_input(rill_vm_t *vm, int64_t B, float base) {
  rill_type_t t = {RILL_F32, 2, {B, 4}};
  float v[32];
  for (int i = 0; i < B * 4; i++) v[i] = base + (float)i;
  rill_tensor_t *x;
  ck_assert(!rill_tensor_create(vm, &t, v, &x));
  return x;
}

static void expect_rows(rill_vm_t *vm, int64_t B, float base, rill_tensor_t *w, const char *what) {
  rill_tensor_t *in[2] = {rows_input(vm, B, base), w}, **r;
  int n;
  rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &r, &n);
  ck_assert_msg(!st, "%s: %s", what, st ? rill_status_message(st) : "");
  float y[32];
  ck_assert(!rill_tensor_read(r[0], y, (size_t)B * 4 * sizeof(float)));
  for (int i = 0; i < B * 4; i++) {
    float x = base + (float)i;
    ck_assert_msg(y[i] == x * 0.5f + x, "%s: y[%d] = %g, want %g", what, i, y[i], x * 0.5f + x);
  }
  rill_results_free(vm, r, n);
  rill_tensor_release(in[0]);
}

START_TEST(padded_capture_allocation_failures) {
  rill_module_t *m = load_text("dim B in [1, 8]\nfunc @main(%x: f32[B,4], %w: f32[4]) -> f32[B,4] {\n"
                               "  %a = mul(%x, %w)\n  %y = add(%a, %x)\n  return %y\n}\n");
  rill_type_t tw = {RILL_F32, 1, {4}};
  const float half[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  bool reached_end = false;
  for (long k = 1; k < 100000 && !reached_end; k++) {
    test_alloc_t ta;
    test_alloc_init(&ta, 0);
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(&ta.base, m, "cpu", &vm));
    ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
    ck_assert(!rill_vm_set_graph_buckets(vm, "B", (const int64_t[]){8}, 1));
    rill_tensor_t *in[2] = {rows_input(vm, 3, 1), NULL}, **res;
    ck_assert(!rill_tensor_create(vm, &tw, half, &in[1]));
    int n;
    ta.fail_at = atomic_load(&ta.count) + k;
    rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &res, &n);
    ta.fail_at = 0;
    if (st) {
      rill_status_free(st);
    } else {
      rill_results_free(vm, res, n);
      rill_graph_info_t info;
      rill_vm_graph_info(vm, "main", &info);
      reached_end = info.instances == 1;
    }
    char what[64];
    snprintf(what, sizeof what, "after failure %ld, B=3", k);
    ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
    expect_rows(vm, 3, 100, in[1], what);
    what[strlen(what) - 1] = '8';
    expect_rows(vm, 8, 200, in[1], what);
    rill_tensor_release(in[0]);
    rill_tensor_release(in[1]);
    rill_vm_destroy(vm);
    ck_assert_msg(atomic_load(&ta.live) == 0, "failure at allocation %ld: %ld blocks leaked", k, atomic_load(&ta.live));
  }
  ck_assert(reached_end);
  rill_module_release(m);
}
END_TEST

/* A further instance runs out of memory (one allocation failing, at each
 * point of the second run, with the first instance's results kept): the run is interpreted, no capture is tried again at that size,
 * and the one instance copies its results out from then on, so runs whose
 * results are all kept still replay. */
START_TEST(further_instance_out_of_memory) {
  rill_module_t *m = load_text("func @main(%x: f32[4]) -> f32[4] {\n  %a = mul(%x, %x)\n  %y = add(%a, %x)\n  return %y\n}\n");
  bool reached_end = false;
  int ooms = 0;
  for (long k = 1; k < 100000 && !reached_end; k++) {
    test_alloc_t ta;
    test_alloc_init(&ta, 0);
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(&ta.base, m, "cpu", &vm));
    ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
    rill_tensor_t *x = filled4(vm, 2), **held, **r, **kept[3];
    int n;
    ck_assert(!rill_vm_invoke(vm, "main", &x, 1, &held, &n));
    ta.once = true; /* the failure is a moment's: what follows it gets memory */
    ta.fail_at = atomic_load(&ta.count) + k;
    rill_status_t st = rill_vm_invoke(vm, "main", &x, 1, &r, &n);
    ta.fail_at = 0;
    rill_graph_info_t info;
    rill_vm_graph_info(vm, "main", &info);
    if (st) {
      rill_status_free(st);
    } else {
      ck_assert(first_of(r[0]) == 6.0f);
      rill_results_free(vm, r, n);
      reached_end = info.instances == 2;
    }
    if (!st && info.instances == 1) { /* the capture ran out of memory: the run was interpreted */
      ooms++;
      ck_assert_int_eq(info.replays, 1);
      rill_results_free(vm, held, 1);
      held = NULL;
      for (int i = 0; i < 3; i++) {
        rill_tensor_t *xi = filled4(vm, (float)i);
        ck_assert(!rill_vm_invoke(vm, "main", &xi, 1, &kept[i], &n));
        rill_tensor_release(xi);
      }
      for (int i = 0; i < 3; i++) {
        ck_assert(first_of(kept[i][0]) == (float)(i * i + i));
        rill_results_free(vm, kept[i], n);
      }
      rill_vm_graph_info(vm, "main", &info);
      ck_assert_msg(info.instances == 1 && info.replays == 4 && info.copied_out == 3,
                    "failure %ld: %d instances, %llu replays, %llu copied out", k, info.instances,
                    (unsigned long long)info.replays, (unsigned long long)info.copied_out);
    }
    if (held) rill_results_free(vm, held, 1);
    rill_tensor_release(x);
    rill_vm_destroy(vm);
    ck_assert_msg(atomic_load(&ta.live) == 0, "failure at allocation %ld: %ld blocks leaked", k, atomic_load(&ta.live));
  }
  ck_assert(reached_end);
  ck_assert_int_gt(ooms, 0);
  rill_module_release(m);
}
END_TEST

/* A failure of each CUDA call of the first graph-mode run (warm-up, capture,
 * instantiation, replay), injected: the run fails with a status or succeeds,
 * nothing leaks on the host, and the VM still runs interpreted. */
START_TEST(cuda_fault_injection) {
  pick_devices();
  if (ndevices < 2) return;
  char path[4200];
  snprintf(path, sizeof path, "%s/branches.vmasm", fixtures_dir());
  rill_module_t *m = load_file(path, NULL);
  int failures = 0, successes = 0;
  long step = getenv("RILL_QUICK") ? 3 : 1;
  for (long k = 1; k <= 3000 && successes < 3; k += step) {
    test_alloc_t ta;
    test_alloc_init(&ta, 0);
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(&ta.base, m, "cuda", &vm));
    ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
    rill_tensor_t *in[4], **res;
    int np = random_inputs(vm, m, in), nres;
    rill_cuda_fail_at(k);
    rill_status_t st = rill_vm_invoke(vm, "main", in, np, &res, &nres);
    rill_cuda_fail_at(0);
    if (st) {
      failures++;
      ck_assert(rill_status_message(st)[0] != 0);
      rill_status_free(st);
    } else {
      successes++;
      rill_results_free(vm, res, nres);
    }
    ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_OFF));
    st = rill_vm_invoke(vm, "main", in, np, &res, &nres);
    ck_assert_msg(!st, "after a fault at call %ld: %s", k, rill_status_message(st));
    rill_results_free(vm, res, nres);
    for (int i = 0; i < np; i++) rill_tensor_release(in[i]);
    rill_vm_destroy(vm);
    ck_assert_msg(atomic_load(&ta.live) == 0, "fault at call %ld: %ld host blocks left", k, atomic_load(&ta.live));
  }
  printf("graph fault injection: %d runs failed as statuses, %d succeeded\n", failures, successes);
  ck_assert_int_gt(failures, 10);
  ck_assert_int_gt(successes, 0);
  rill_module_release(m);
}
END_TEST

/* A replay's launch that fails (cuda launches a replay that hands its
 * results out from the thread that then waits for its end) reaches the run
 * as its status; the instance is not lost: the next replays are right
 * without a new capture. */
START_TEST(failed_replay_launch_is_a_status) {
  pick_devices();
  if (ndevices < 2) return;
  char path[4200];
  snprintf(path, sizeof path, "%s/branches.vmasm", fixtures_dir());
  rill_module_t *m = load_file(path, NULL);
  rill_vm_t *vm, *ref;
  ck_assert(!rill_vm_create(NULL, m, "cuda", &vm));
  ck_assert(!rill_vm_create(NULL, m, "cuda", &ref));
  ck_assert(!rill_vm_set_graph_mode(vm, NULL, RILL_GRAPH_ON));
  rill_tensor_t *in[4], *in_ref[4], **res, **want;
  uint64_t seed = rng;
  int np = random_inputs(vm, m, in), nres, nwant;
  rng = seed;
  ck_assert_int_eq(random_inputs(ref, m, in_ref), np);
  ck_assert(!rill_vm_invoke(ref, "main", in_ref, np, &want, &nwant));
  ck_assert(!rill_vm_invoke(vm, "main", in, np, &res, &nres)); /* warm-up, capture, the first replay */
  rill_results_free(vm, res, nres);
  int launches = 0;
  for (long k = 1; k <= 8; k++) {
    rill_cuda_fail_at(k);
    rill_status_t st = rill_vm_invoke(vm, "main", in, np, &res, &nres);
    rill_cuda_fail_at(0);
    if (st) {
      launches += strstr(rill_status_message(st), "cuGraphLaunch") != NULL;
      rill_status_free(st);
    } else {
      rill_results_free(vm, res, nres);
    }
    ck_assert(!rill_vm_invoke(vm, "main", in, np, &res, &nres));
    ck_assert_int_eq(nres, nwant);
    expect_same(res, want, nres, "the replay after an injected fault");
    rill_results_free(vm, res, nres);
  }
  ck_assert_msg(launches > 0, "no injected fault failed a replay's launch");
  rill_graph_info_t gi;
  ck_assert(rill_vm_graph_info(vm, "main", &gi));
  ck_assert_uint_eq(gi.captures, 1);
  rill_results_free(ref, want, nwant);
  for (int i = 0; i < np; i++) rill_tensor_release(in[i]), rill_tensor_release(in_ref[i]);
  rill_vm_destroy(vm);
  rill_vm_destroy(ref);
  rill_module_release(m);
}
END_TEST

/* rill_vm_invoke_async_into: an input and the results in host memory
 * (rill_vm_host_alloc, wrapped), replayed exactly, padded to a bucket and
 * interpreted (through host waits, the outputs' array gone by then): each
 * equals rill_vm_invoke's, and the callback's results are the outputs. A
 * result of another type is refused. */
typedef struct into_run {
  rill_tensor_t *out[2];
  bool done;
  rill_status_t st;
  bool same;
} into_run_t;

static void on_into(void *user, rill_status_t st, rill_tensor_t **res, int n) {
  into_run_t *r = user;
  r->done = true;
  r->st = st;
  r->same = !st && n == 2 && res[0] == r->out[0] && res[1] == r->out[1];
  for (int i = 0; i < n; i++) rill_tensor_release(res[i]);
  free(res);
}

START_TEST(invoke_into_host_memory) {
  pick_devices();
  static const char *const src[2] = {
      "dim B in [1, 16]\nfunc @main(%x: f32[B,3]) -> (f32[B,3], f32[B]) {\n  %a = mul(%x, %x)\n  %b = add(%a, %x)\n"
      "  %s = sum(%b) {axes=[1]}\n  return %b, %s\n}\n",
      "func @more(%i: i64[], %x: f32[5,3]) -> bool[] {\n  %c = lt(%i, 3)\n  return %c\n}\n"
      "func @step(%i: i64[], %x: f32[5,3]) -> (i64[], f32[5,3]) {\n  %j = add(%i, 1)\n  %y = mul(%x, 1.5)\n  return %j, %y\n}\n"
      "const %zero : i64[] = 0\nfunc @main(%x: f32[5,3]) -> (f32[5,3], f32[5]) {\n  %k, %z = while(@more, @step, %zero, %x)\n"
      "  %s = sum(%z) {axes=[1]}\n  return %z, %s\n}\n"};
  for (int k = 0; k < 2; k++) {
    rill_module_t *m = load_text(src[k]);
    for (int d = 0; d < ndevices; d++)
      for (int mode = 0; mode < 2; mode++) {
        rill_vm_t *vm;
        ck_assert(!rill_vm_create(NULL, m, devices[d], &vm));
        ck_assert(!rill_vm_set_graph_mode(vm, NULL, mode ? RILL_GRAPH_ON : RILL_GRAPH_OFF));
        if (k == 0) ck_assert(!rill_vm_set_graph_buckets(vm, "B", (const int64_t[]){4, 16}, 2));
        uv_loop_t loop;
        uv_loop_init(&loop);
        const int64_t sizes[] = {4, 3, 4, 16, 7, 5};
        for (int i = 0; i < 6; i++) {
          int64_t B = k == 0 ? sizes[i] : 5;
          float x[48];
          for (int e = 0; e < B * 3; e++) x[e] = (float)(urand() * 4 - 2);
          rill_type_t tx = {RILL_F32, 2, {B, 3}}, ty = {RILL_F32, 1, {B}};
          rill_tensor_t *up, *in, **want;
          int nw;
          ck_assert(!rill_tensor_create(vm, &tx, x, &up));
          ck_assert(!rill_vm_invoke(vm, "main", &up, 1, &want, &nw));
          rill_tensor_release(up);
          /* the input in host memory too: the graph's input copy (or the ops) read it there */
          void *hin, *din;
          ck_assert(!rill_vm_host_alloc(vm, (size_t)B * 12, &hin, &din));
          memcpy(hin, x, (size_t)B * 12);
          ck_assert(!rill_tensor_wrap(vm, &tx, din, NULL, NULL, &in));
          void *h[2], *dv[2];
          into_run_t r = {0};
          ck_assert(!rill_vm_host_alloc(vm, (size_t)B * 12, &h[0], &dv[0]));
          ck_assert(!rill_vm_host_alloc(vm, (size_t)B * 4, &h[1], &dv[1]));
          ck_assert(!rill_tensor_wrap(vm, &tx, dv[0], NULL, NULL, &r.out[0]));
          ck_assert(!rill_tensor_wrap(vm, &ty, dv[1], NULL, NULL, &r.out[1]));
          rill_tensor_t *outs[2] = {r.out[0], r.out[1]};
          rill_status_t st = rill_vm_invoke_async_into(vm, &loop, "main", &in, 1, outs, 2, on_into, &r);
          ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
          outs[0] = outs[1] = NULL; /* the VM keeps its own */
          uv_run(&loop, UV_RUN_DEFAULT);
          ck_assert_msg(r.done && !r.st && r.same, "%s, source %d, graph %d, B=%lld: %s", devices[d], k, mode, (long long)B,
                        r.st ? rill_status_message(r.st) : "results are not the outputs");
          for (int o = 0; o < 2; o++) {
            size_t nb = rill_tensor_nbytes(want[o]);
            float *w = malloc(nb);
            ck_assert(!rill_tensor_read(want[o], w, nb));
            ck_assert_msg(!memcmp(w, h[o], nb), "%s, source %d, graph %d, B=%lld: result %d differs", devices[d], k, mode, (long long)B, o);
            free(w);
          }
          rill_results_free(vm, want, nw);
          /* the wrong type for a result: refused */
          rill_tensor_release(r.out[1]);
          rill_type_t bad = {RILL_F32, 1, {B + 1}};
          ck_assert(!rill_tensor_wrap(vm, &bad, dv[0], NULL, NULL, &r.out[1]));
          outs[0] = r.out[0];
          outs[1] = r.out[1];
          r.done = false;
          st = rill_vm_invoke_async_into(vm, &loop, "main", &in, 1, outs, 2, on_into, &r);
          if (!st) {
            uv_run(&loop, UV_RUN_DEFAULT);
            ck_assert(r.done);
            st = r.st;
          }
          ck_assert_msg(st && rill_status_code(st) == RILL_INVALID_ARGUMENT && strstr(rill_status_message(st), "output 2"), "%s",
                        st ? rill_status_message(st) : "accepted");
          rill_status_free(st);
          st = rill_vm_invoke_async_into(vm, &loop, "main", &in, 1, outs, 1, on_into, &r);
          ck_assert(st && strstr(rill_status_message(st), "2 results, 1 outputs given"));
          rill_status_free(st);
          rill_tensor_release(r.out[0]);
          rill_tensor_release(r.out[1]);
          rill_tensor_release(in);
          rill_vm_host_free(vm, h[0]);
          rill_vm_host_free(vm, h[1]);
          rill_vm_host_free(vm, hin);
        }
        uv_loop_close(&loop);
        rill_vm_destroy(vm);
      }
    rill_module_release(m);
  }
}
END_TEST

int main(void) {
  /* One case per test, named after it, so that CK_RUN_CASE runs one test
   * (tests/gpu/run.sh runs them side by side under compute-sanitizer). */
  Suite *s = suite_create("graph");
  add_test_case(s, fixtures_replay_like_interpreted, 600);
  add_test_case(s, conformance_replay_like_interpreted, 600);
  add_test_case(s, control_flow_replays, 600);
  add_test_case(s, uncapturable_falls_back, 600);
  add_test_case(s, bind_dims_falls_back, 600);
  add_test_case(s, concurrent_runs_on_one_loop, 600);
  add_test_case(s, chained_runs_mostly_without_copies, 600);
  add_test_case(s, constant_result_kept_and_released, 600);
  add_test_case(s, view_of_result_kept, 600);
  add_test_case(s, held_results_stay_valid, 600);
  add_test_case(s, inputs_bound_where_they_are, 600);
  add_test_case(s, replay_ends_after_the_device, 600);
  add_test_case(s, capture_allocation_failures, 600);
  add_test_case(s, padded_capture_allocation_failures, 600);
  add_test_case(s, further_instance_out_of_memory, 600);
  add_test_case(s, cuda_fault_injection, 600);
  add_test_case(s, failed_replay_launch_is_a_status, 600);
  add_test_case(s, graphs_per_size_lru, 600);
  add_test_case(s, graphs_per_size_dropped_in_flight, 600);
  add_test_case(s, graph_buckets, 600);
  add_test_case(s, invoke_into_host_memory, 600);
  return run_suite(s);
}
