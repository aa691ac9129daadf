/* test_coll.c: collectives (all_reduce, all_gather, reduce_scatter,
 * broadcast, rank, ranks) over a VM's devices (cpu:0..3) for every dtype
 * and reduction against values computed here in participant order; over a
 * job's ranks with a fake transport (threads, each its own VM), a rank that
 * fails giving the others a status; send and recv over the fake transport
 * (a ring both ways and pairwise for every dtype, interpreted and as
 * graphs; a peer out of range, a send to itself, types that differ); the
 * assembler's errors for misuse; the GPUs' collectives and sends against
 * the cpu devices' (skipped below two GPUs). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helpers.h"
#include "vm/transport.h"
#include "vm/vm.h"

#define NDEV 4
#define ROWS 4
#define COLS 8
#define NEL (ROWS * COLS)

static const rill_dtype_t DTYPES[] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64, RILL_I8, RILL_U8, RILL_I32, RILL_I64, RILL_BOOL};

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* n elements of dtype d: floats in quarters of [-8, 8], integers over their whole range. */
static void fill(rill_dtype_t d, void *buf, size_t n, uint64_t seed) {
  uint64_t s = seed * 2654435761u + 12345;
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng_next(&s);
    switch (d) {
      case RILL_F16: case RILL_BF16: case RILL_F32: case RILL_F64: rill_element_set(d, buf, i, (double)((int)(r % 65) - 32) / 4.0); break;
      case RILL_BOOL: rill_element_set_int(d, buf, i, (int64_t)(r % 3 == 0)); break;
      case RILL_I64: ((int64_t *)buf)[i] = (int64_t)r; break;
      case RILL_I32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)r; break;
      case RILL_I8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)r; break;
      case RILL_U8: ((uint8_t *)buf)[i] = (uint8_t)r; break;
      default: break;
    }
  }
}

static bool is_float(rill_dtype_t d) { return d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64; }

/* One step of the reduction, as the contract gives it: in the dtype, rounded each step (wrapping for integers). */
static void step(rill_dtype_t d, const char *red, void *acc, size_t i, const void *x, size_t k) {
  if (d == RILL_BOOL) {
    int64_t a = rill_element_get_int(d, acc, i), b = rill_element_get_int(d, x, k);
    rill_element_set_int(d, acc, i, strcmp(red, "min") == 0 ? (a && b) : (a || b));
    return;
  }
  if (is_float(d)) {
    double a = rill_element_get(d, acc, i), b = rill_element_get(d, x, k), r;
    if (strcmp(red, "max") == 0) r = a > b ? a : b;
    else if (strcmp(red, "min") == 0) r = a < b ? a : b;
    else r = d == RILL_F64 ? a + b : (double)((float)a + (float)b);
    rill_element_set(d, acc, i, r);
    return;
  }
  int64_t a = rill_element_get_int(d, acc, i), b = rill_element_get_int(d, x, k), r;
  if (strcmp(red, "max") == 0) r = a > b ? a : b;
  else if (strcmp(red, "min") == 0) r = a < b ? a : b;
  else r = (int64_t)((uint64_t)a + (uint64_t)b);
  switch (d) { /* wrap to the dtype */
    case RILL_I8: r = (int8_t)(uint8_t)r; break;
    case RILL_U8: r = (uint8_t)r; break;
    case RILL_I32: r = (int32_t)(uint32_t)r; break;
    default: break;
  }
  rill_element_set_int(d, acc, i, r);
}

static void avg(rill_dtype_t d, void *acc, size_t i, int n) {
  if (is_float(d)) {
    double a = rill_element_get(d, acc, i);
    rill_element_set(d, acc, i, d == RILL_F64 ? a / n : (double)((float)a / (float)n));
  } else {
    rill_element_set_int(d, acc, i, rill_element_get_int(d, acc, i) / n);
  }
}

static void copy_el(rill_dtype_t d, void *dst, size_t i, const void *src, size_t k) {
  size_t es = rill_dtype_size(d);
  memcpy((uint8_t *)dst + i * es, (const uint8_t *)src + k * es, es);
}

/* Participant me's expected result: the reduction of element (r, c) over participants 0..n-1, in that order. */
static void expect(const char *kind, const char *red, int axis, int root, rill_dtype_t d, int n, void *const *x, int me, void *out) {
  if (strcmp(kind, "broadcast") == 0) {
    memcpy(out, x[root], NEL * rill_dtype_size(d));
    return;
  }
  if (strcmp(kind, "all_gather") == 0) {
    /* out is [ROWS*n, COLS] (axis 0) or [ROWS, COLS*n] (axis 1) */
    for (int p = 0; p < n; p++)
      for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
          size_t o = axis == 0 ? (size_t)(p * ROWS + r) * COLS + (size_t)c : (size_t)r * COLS * (size_t)n + (size_t)(p * COLS + c);
          copy_el(d, out, o, x[p], (size_t)(r * COLS + c));
        }
    return;
  }
  bool scatter = strcmp(kind, "reduce_scatter") == 0;
  int orows = scatter && axis == 0 ? ROWS / n : ROWS, ocols = scatter && axis == 1 ? COLS / n : COLS;
  for (int r = 0; r < orows; r++)
    for (int c = 0; c < ocols; c++) {
      int sr = scatter && axis == 0 ? me * orows + r : r, sc = scatter && axis == 1 ? me * ocols + c : c;
      size_t o = (size_t)(r * ocols + c), k = (size_t)(sr * COLS + sc);
      copy_el(d, out, o, x[0], k);
      for (int p = 1; p < n; p++) step(d, strcmp(red, "avg") == 0 ? "sum" : red, out, o, x[p], k);
      if (strcmp(red, "avg") == 0) avg(d, out, o, n);
    }
}

static void result_type(const char *kind, int axis, int n, int *rows, int *cols) {
  *rows = ROWS;
  *cols = COLS;
  if (strcmp(kind, "all_gather") == 0) *(axis ? cols : rows) *= n;
  if (strcmp(kind, "reduce_scatter") == 0) *(axis ? cols : rows) /= n;
}

/* @main(x0..x3) on device 0: x_i copied to device i, the collective over the four, results copied back. */
static char *device_program(const char *kind, const char *attrs, rill_dtype_t d, int nd) {
  const char *dn = rill_dtype_name(d);
  int rows, cols;
  int axis = strstr(attrs, "axis=1") ? 1 : 0;
  result_type(kind, axis, nd, &rows, &cols);
  static char buf[8192];
  int o = snprintf(buf, sizeof buf, "func @main(");
  for (int i = 0; i < nd; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "%s%%x%d: %s[4,8]", i ? ", " : "", i, dn);
  o += snprintf(buf + o, sizeof buf - (size_t)o, ") -> (");
  for (int i = 0; i < nd; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "%s%s[%d,%d]", i ? ", " : "", dn, rows, cols);
  o += snprintf(buf + o, sizeof buf - (size_t)o, ") {\n  add_event(0)\n");
  for (int i = 1; i < nd; i++)
    o += snprintf(buf + o, sizeof buf - (size_t)o, "  set_stream(%d, device=%d)\n  wait_event(0)\n  %%c%d = copy(%%x%d) {device=%d}\n", i, i, i, i, i);
  o += snprintf(buf + o, sizeof buf - (size_t)o, "  set_stream(0)\n  ");
  for (int i = 0; i < nd; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "%s%%y%d", i ? ", " : "", i);
  o += snprintf(buf + o, sizeof buf - (size_t)o, " = %s(%%x0", kind);
  for (int i = 1; i < nd; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, ", %%c%d", i);
  o += snprintf(buf + o, sizeof buf - (size_t)o, ") {%s}\n", attrs);
  for (int i = 1; i < nd; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "  set_stream(%d)\n  add_event(%d)\n", i, i);
  o += snprintf(buf + o, sizeof buf - (size_t)o, "  set_stream(0)\n");
  for (int i = 1; i < nd; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, "  wait_event(%d)\n  %%b%d = copy(%%y%d) {device=0}\n", i, i, i);
  o += snprintf(buf + o, sizeof buf - (size_t)o, "  return %%y0");
  for (int i = 1; i < nd; i++) o += snprintf(buf + o, sizeof buf - (size_t)o, ", %%b%d", i);
  snprintf(buf + o, sizeof buf - (size_t)o, "\n}\n");
  return buf;
}

/* src assembled, loaded (*m) and bound to a VM of `devices`. */
static rill_vm_t *vm_of(const char *src, const char *devices, rill_module_t **m) {
  uint8_t *b;
  size_t n;
  rill_status_t st = asm_text(src, &b, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert(!rill_module_load(NULL, b, n, ".", m));
  free(b);
  rill_vm_t *vm;
  st = rill_vm_create(NULL, *m, devices, &vm);
  ck_assert_msg(!st, "%s: %s", devices, rill_status_message(st));
  return vm;
}

typedef struct coll_case {
  const char *kind, *red;
  int axis, root;
} coll_case_t;

static const coll_case_t CASES[] = {
    {"all_reduce", "sum", 0, 0},     {"all_reduce", "max", 0, 0},     {"all_reduce", "min", 0, 0},     {"all_reduce", "avg", 0, 0},
    {"all_gather", NULL, 0, 0},      {"all_gather", NULL, 1, 0},      {"reduce_scatter", "sum", 0, 0}, {"reduce_scatter", "max", 1, 0},
    {"reduce_scatter", "min", 0, 0}, {"reduce_scatter", "avg", 1, 0}, {"reduce_scatter", "sum", 1, 0}, {"broadcast", NULL, 0, 2},
};

static void case_attrs(const coll_case_t *c, char *buf, size_t n) {
  int o = 0;
  buf[0] = 0;
  if (c->red) o += snprintf(buf + o, n - (size_t)o, "op=\"%s\"", c->red);
  if (strcmp(c->kind, "all_gather") == 0 || strcmp(c->kind, "reduce_scatter") == 0)
    o += snprintf(buf + o, n - (size_t)o, "%saxis=%d", o ? ", " : "", c->axis);
  if (strcmp(c->kind, "broadcast") == 0) snprintf(buf + o, n - (size_t)o, "root=%d", c->root);
}

/* Runs the case on a VM of `devices`; results[i] receives participant i's bytes. */
static void run_device_case(const char *devices, int nd, int64_t oneshot_max, const coll_case_t *c, rill_dtype_t d, bool graph, void *const *x, void **got,
                            size_t *out_bytes) {
  char attrs[128];
  case_attrs(c, attrs, sizeof attrs);
  rill_module_t *m;
  rill_vm_t *vm = vm_of(device_program(c->kind, attrs, d, nd), devices, &m);
  rill_status_t st;
  if (graph) ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
  if (oneshot_max >= 0) ck_assert(!vm_coll_settings(vm, -1, oneshot_max));
  rill_type_t t = T(d, 2, ROWS, COLS);
  rill_tensor_t *in[NDEV];
  for (int i = 0; i < nd; i++) ck_assert(!rill_tensor_create(vm, &t, x[i], &in[i]));
  for (int rep = 0; rep < (graph ? 3 : 1); rep++) {
    rill_tensor_t **r;
    int nr;
    st = rill_vm_invoke(vm, "main", in, nd, &r, &nr);
    ck_assert_msg(!st, "%s %s %s on %s: %s", c->kind, attrs, rill_dtype_name(d), devices, rill_status_message(st));
    ck_assert_int_eq(nr, nd);
    *out_bytes = rill_tensor_nbytes(r[0]);
    for (int i = 0; i < nd; i++) ck_assert(!rill_tensor_read(r[i], got[i], *out_bytes));
    rill_results_free(vm, r, nr);
  }
  if (graph) {
    rill_graph_info_t gi;
    ck_assert(rill_vm_graph_info(vm, "main", &gi));
    ck_assert_msg(gi.replays >= 1, "no replay: %s", gi.reason);
  }
  for (int i = 0; i < nd; i++) rill_tensor_release(in[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
}

START_TEST(devices_every_dtype) {
  /* Every collective and reduction, every dtype, on cpu:0..3, interpreted
   * (and a graph for each dtype's all_reduce sum), bit for bit against
   * the reduction in participant order. */
  uint8_t xs[NDEV][NEL * 8], want[NEL * 8 * NDEV], gotb[NDEV][NEL * 8 * NDEV];
  void *x[NDEV], *got[NDEV];
  for (int i = 0; i < NDEV; i++) x[i] = xs[i], got[i] = gotb[i];
  int ran = 0;
  for (size_t di = 0; di < RILL_ARRAY_LEN(DTYPES); di++) {
    rill_dtype_t d = DTYPES[di];
    for (size_t ci = 0; ci < RILL_ARRAY_LEN(CASES); ci++) {
      const coll_case_t *c = &CASES[ci];
      if (d == RILL_BOOL && c->red && strcmp(c->red, "avg") == 0) continue; /* refused at assembly (asm_errors) */
      for (int i = 0; i < NDEV; i++) fill(d, x[i], NEL, (uint64_t)(di * 100 + ci * 10 + (size_t)i + 1));
      bool graph = ci == 0;
      size_t bytes;
      run_device_case("cpu:0,cpu:1,cpu:2,cpu:3", NDEV, -1, c, d, graph, x, got, &bytes);
      for (int me = 0; me < NDEV; me++) {
        expect(c->kind, c->red ? c->red : "sum", c->axis, c->root, d, NDEV, x, me, want);
        if (memcmp(want, got[me], bytes) != 0) {
          size_t es = rill_dtype_size(d), k = 0;
          while (k < bytes / es && !memcmp(want + k * es, (uint8_t *)got[me] + k * es, es)) k++;
          ck_abort_msg("%s op=%s axis=%d %s participant %d element %zu: %g, expected %g", c->kind, c->red ? c->red : "-", c->axis, rill_dtype_name(d),
                       me, k, rill_element_get(d, got[me], k), rill_element_get(d, want, k));
        }
      }
      ran++;
    }
  }
  ck_assert_int_eq(ran, 9 * 12 - 2);
}
END_TEST

START_TEST(two_devices_and_one_rank) {
  /* Over two of four devices (parts 2), with the operands' own streams
   * named by streams=[...]; the rank form in a job of one rank is the
   * identity, rank() 0 and ranks() 1, interpreted and as a graph. */
  const char *src =
      "func @main(%x: i32[2,3]) -> (i32[2,3], i32[2,3], i64[], i64[], i32[2,3]) {\n"
      "  %a = mul(%x, 3)\n  add_event(0)\n  set_stream(5, device=1)\n  wait_event(0)\n  %b = copy(%x) {device=1}\n  %b2 = add(%b, 1)\n"
      "  set_stream(0)\n  %y0, %y1 = all_reduce(%a, %b2) {op=\"max\", streams=[0, 5]}\n"
      "  set_stream(5)\n  add_event(1)\n  set_stream(0)\n  wait_event(1)\n  %back = copy(%y1) {device=0}\n"
      "  %s = all_reduce(%x) {op=\"sum\"}\n  %r = rank()\n  %n = ranks()\n  %g = all_gather(%x) {axis=1}\n  %h = reduce_scatter(%g) {axis=1}\n"
      "  return %y0, %back, %r, %n, %h\n}\n";
  rill_module_t *m;
  rill_vm_t *vm = vm_of(src, "cpu:0,cpu:1,cpu:2,cpu:3", &m);
  rill_status_t st;
  int32_t xv[6] = {-4, 7, 0, 2, -1, 5};
  rill_type_t t = T(RILL_I32, 2, 2, 3);
  rill_tensor_t *x;
  ck_assert(!rill_tensor_create(vm, &t, xv, &x));
  for (int mode = 0; mode < 2; mode++) {
    if (mode) ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
    for (int rep = 0; rep < 2; rep++) {
      rill_tensor_t **r;
      int nr;
      st = rill_vm_invoke(vm, "main", &x, 1, &r, &nr);
      ck_assert_msg(!st, "%s", rill_status_message(st));
      int32_t y0[6], y1[6], h[6];
      int64_t rk, rn;
      ck_assert(!rill_tensor_read(r[0], y0, sizeof y0));
      ck_assert(!rill_tensor_read(r[1], y1, sizeof y1));
      ck_assert(!rill_tensor_read(r[2], &rk, 8));
      ck_assert(!rill_tensor_read(r[3], &rn, 8));
      ck_assert(!rill_tensor_read(r[4], h, sizeof h));
      for (int i = 0; i < 6; i++) {
        int32_t w = 3 * xv[i] > xv[i] + 1 ? 3 * xv[i] : xv[i] + 1;
        ck_assert_int_eq(y0[i], w);
        ck_assert_int_eq(y1[i], w);
        ck_assert_int_eq(h[i], xv[i]);
      }
      ck_assert_int_eq(rk, 0);
      ck_assert_int_eq(rn, 1);
      rill_results_free(vm, r, nr);
    }
  }
  rill_tensor_release(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

START_TEST(asm_errors) {
  /* An operand on the wrong device, names the value, both devices, the stream and the line. */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  set_stream(0)\n  %a, %b = all_reduce(%x, %x)\n  return %a\n}\n", 4,
                   "%x lives on device 0 (a parameter) and is used on device 1 (stream 1) without a copy");
  /* A value made on device 1's stream 1, used by the part on its stream 2 without an event. */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  add_event(0)\n  set_stream(1, device=1)\n  wait_event(0)\n  %c = copy(%x) {device=1}\n"
                   "  set_stream(2, device=1)\n  set_stream(0)\n  %a, %b = all_reduce(%x, %c) {streams=[0, 2]}\n  return %a\n}\n",
                   8, "%c is produced on stream 1 and used on stream 2 without an event");
  /* A device without a stream. */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %a, %b = all_reduce(%x, %x)\n  return %a\n}\n", 2,
                   "device 1 has none yet");
  /* streams=[...] naming a stream of another device. */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  set_stream(0)\n  %a, %b = all_reduce(%x, %x) {streams=[0, 0]}\n  return %a\n}\n",
                   4, "streams[1] = 0 is not a stream of device 1");
  /* Results counted. */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  %c = copy(%x) {device=1}\n  set_stream(0)\n  %a = all_reduce(%x, %c)\n  return %a\n}\n",
                   5, "gives 2 results (one per device), 1 named");
  /* Types differ between the devices. */
  expect_asm_error("func @main(%x: f32[4], %z: f32[2]) -> f32[4] {\n  add_event(0)\n  set_stream(1, device=1)\n  wait_event(0)\n  %c = copy(%z) {device=1}\n"
                   "  set_stream(0)\n  %a, %b = all_gather(%x, %c)\n  return %a\n}\n",
                   7, "operand 2 is f32[2] and operand 1 f32[4]");
  /* reduce_scatter that does not divide; avg of bool; a bad reduction; a root past the devices. */
  expect_asm_error("func @main(%x: f32[6]) -> f32[2] {\n  %y = reduce_scatter(%x) {ranks=4}\n  return %y\n}\n", 2,
                   "axis 0 has size 6, which 4 participants do not divide");
  expect_asm_error("func @main(%x: bool[6]) -> bool[6] {\n  %y = all_reduce(%x) {op=\"avg\"}\n  return %y\n}\n", 2, "op=\"avg\" of bool is not defined");
  expect_asm_error("func @main(%x: f32[6]) -> f32[6] {\n  %y = all_reduce(%x) {op=\"prod\"}\n  return %y\n}\n", 2, "expected \"sum\", \"max\", \"min\" or \"avg\"");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  set_stream(1, device=1)\n  %c = copy(%x) {device=1}\n  set_stream(0)\n  %a, %b = broadcast(%x, %c) {root=2}\n  return %a\n}\n",
                   5, "root=2: expected a participant 0..1");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %y = all_reduce(%x) {part=1}\n  return %y\n}\n", 2, "part=1: expected 0..parts-1");
  /* A result of device 1 returned without a copy. */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  add_event(0)\n  set_stream(1, device=1)\n  wait_event(0)\n  %c = copy(%x) {device=1}\n"
                   "  set_stream(0)\n  %a, %b = all_reduce(%x, %c)\n  return %b\n}\n",
                   8, "%b lives on device 1");
}
END_TEST

START_TEST(rank_form_sizes_checked) {
  /* all_gather's types made for 2 ranks, run in a job of one: a run-time error. */
  const char *src = "func @main(%x: f32[2]) -> f32[4] {\n  %y = all_gather(%x) {ranks=2}\n  return %y\n}\n";
  rill_type_t t = T(RILL_F32, 1, 2);
  float v[2] = {1, 2};
  rill_module_t *m;
  rill_vm_t *vm = vm_of(src, "cpu", &m);
  rill_tensor_t *x, **r;
  int nr;
  ck_assert(!rill_tensor_create(vm, &t, v, &x));
  rill_status_t st = rill_vm_invoke(vm, "main", &x, 1, &r, &nr);
  ck_assert(st && strstr(rill_status_message(st), "all_gather {ranks=2} runs in a job of 1 rank"));
  rill_status_free(st);
  rill_tensor_release(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* A lowered program whose device form's parts are `body` (the rest as the assembler writes it). */
static const char *lowered_parts(const char *body) {
  static char buf[2048];
  snprintf(buf, sizeof buf,
           "op $0 = all_reduce(f32[4]) -> (f32[4]) {part=0, parts=2}\n"
           "op $1 = all_reduce(f32[4]) -> (f32[4]) {part=1, parts=2}\n"
           "func @main(%%x: f32[4]) -> (f32[4]) lowered(streams=2, events=2) {\n"
           "  reg %%c : f32[4]\n  reg %%a : f32[4]\n  reg %%b : f32[4]\n"
           "  cuda_add_event 1, 0\n  cuda_wait_event 1, 1\n  cuda_add_event 0, 0\n  cuda_set_device_stream 1, 1\n  cuda_wait_event 0, 1\n"
           "  alloc_tensor %%c\n  copy_device %%c, %%x, 0\n  cuda_set_stream 0\n  alloc_tensor %%a\n  cuda_set_device_stream 1, 1\n  alloc_tensor %%b\n"
           "%s"
           "  cuda_set_device_stream 1, 1\n  cuda_add_event 1, 1\n  cuda_wait_event 1, 0\n  cuda_set_stream 0\n  return (%%a)\n}\n",
           body);
  return buf;
}

START_TEST(parts_checked_at_run_time) {
  /* Lowered programs whose parts are not in order, or miss one: a run-time error, no hang. */
  static const struct {
    const char *body, *err;
  } cases[] = {
      {"  cuda_set_stream 0\n  invoke $0, (%x), (%a)\n  cuda_set_device_stream 1, 1\n  invoke $1, (%c), (%b)\n", NULL},
      {"  cuda_set_stream 0\n  invoke $0, (%x), (%a)\n", "a return before every part of a collective over the VM's devices"},
      {"  invoke $1, (%c), (%b)\n  cuda_set_stream 0\n  invoke $0, (%x), (%a)\n", "all_reduce part 1 of 2 (on device 1) where part 0 of the collective before was due"},
      {"  cuda_set_stream 0\n  invoke $0, (%x), (%a)\n  invoke $0, (%x), (%a)\n", "all_reduce part 0 of 2 (on device 0) where part 1"},
  };
  for (size_t i = 0; i < RILL_ARRAY_LEN(cases); i++) {
    rill_module_t *m;
    rill_vm_t *vm = vm_of(lowered_parts(cases[i].body), "cpu:0,cpu:1", &m);
    rill_type_t t = T(RILL_F32, 1, 4);
    float v[4] = {1, 2, 3, 4}, y[4];
    rill_tensor_t *x, **r;
    int nr;
    ck_assert(!rill_tensor_create(vm, &t, v, &x));
    rill_status_t st = rill_vm_invoke(vm, "main", &x, 1, &r, &nr);
    if (!cases[i].err) {
      ck_assert_msg(!st, "%s", rill_status_message(st));
      ck_assert(!rill_tensor_read(r[0], y, sizeof y));
      for (int k = 0; k < 4; k++) ck_assert_float_eq(y[k], 2 * v[k]);
      rill_results_free(vm, r, nr);
    } else {
      ck_assert_msg(st && strstr(rill_status_message(st), cases[i].err), "case %zu: %s", i, st ? rill_status_message(st) : "no error");
      rill_status_free(st);
    }
    rill_tensor_release(x);
    rill_vm_destroy(vm);
    rill_module_release(m);
  }
}
END_TEST

/* ---- a fake transport: N threads of one process ---- */
typedef struct fake_job {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int n;
  uint64_t gen;                /* allgathers completed */
  int arrived;
  uint8_t *slots;              /* n * cap */
  size_t cap;
  int failed;                  /* 1 + the rank that aborted, 0: none */
  char why[128];
  double timeout_s;
  int calls[16];               /* allgathers per rank */
  struct fake_msg *q[16][16], *qt[16][16]; /* point to point: a FIFO per sender and receiver */
  int sends[16];
} fake_job_t;

typedef struct fake_msg {
  struct fake_msg *next;
  size_t n;
  uint8_t data[];
} fake_msg_t;

typedef struct fake_rank {
  fake_job_t *job;
  int rank;
} fake_rank_t;

/* A job of n ranks, each giving at most cap bytes, waiting timeout_s for the others. */
static void job_init(fake_job_t *j, int n, size_t cap, double timeout_s) {
  memset(j, 0, sizeof *j);
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->n = n;
  j->cap = cap;
  j->timeout_s = timeout_s;
  j->slots = calloc(2 * (size_t)n, cap);
}
static void job_fini(fake_job_t *j) {
  for (int a = 0; a < 16; a++)
    for (int b = 0; b < 16; b++)
      while (j->q[a][b]) {
        fake_msg_t *m = j->q[a][b];
        j->q[a][b] = m->next;
        free(m);
      }
  free(j->slots);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
}

static rill_status_t fake_allgather(void *ctx, const void *in, size_t n, void *out) {
  fake_rank_t *fr = ctx;
  fake_job_t *j = fr->job;
  pthread_mutex_lock(&j->mu);
  if (j->failed) {
    pthread_mutex_unlock(&j->mu);
    return rill__status(RILL_RUNTIME_ERROR, "rank %d failed: %s", j->failed - 1, j->why);
  }
  ck_assert(n <= j->cap);
  j->calls[fr->rank]++;
  /* Rounds alternate between two sets of slots: a rank that is on to the
   * next round writes the other set while the slower ones still read. */
  uint64_t gen = j->gen;
  uint8_t *slots = j->slots + (size_t)(gen & 1) * (size_t)j->n * j->cap;
  memcpy(slots + (size_t)fr->rank * j->cap, in, n);
  if (++j->arrived == j->n) {
    j->arrived = 0;
    j->gen++;
    for (int r = 0; r < j->n; r++) memcpy((uint8_t *)out + (size_t)r * n, slots + (size_t)r * j->cap, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
  }
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += (time_t)j->timeout_s;
  while (j->gen == gen && !j->failed) {
    if (pthread_cond_timedwait(&j->cv, &j->mu, &dl)) {
      pthread_mutex_unlock(&j->mu);
      return rill__status(RILL_RUNTIME_ERROR, "rank %d: the job's other ranks did not arrive within %g s", fr->rank, j->timeout_s);
    }
  }
  if (j->gen == gen) {
    pthread_mutex_unlock(&j->mu);
    return rill__status(RILL_RUNTIME_ERROR, "rank %d failed: %s", j->failed - 1, j->why);
  }
  for (int r = 0; r < j->n; r++) memcpy((uint8_t *)out + (size_t)r * n, slots + (size_t)r * j->cap, n);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

static void fake_abort(void *ctx, const char *why) {
  fake_rank_t *fr = ctx;
  fake_job_t *j = fr->job;
  pthread_mutex_lock(&j->mu);
  if (!j->failed) {
    j->failed = fr->rank + 1;
    snprintf(j->why, sizeof j->why, "%s", why);
  }
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static rill_status_t fake_send(void *ctx, int peer, const void *in, size_t n) {
  fake_rank_t *fr = ctx;
  fake_job_t *j = fr->job;
  ck_assert(peer >= 0 && peer < j->n && peer != fr->rank);
  fake_msg_t *m = malloc(sizeof *m + n);
  ck_assert(m != NULL);
  m->next = NULL;
  m->n = n;
  memcpy(m->data, in, n);
  pthread_mutex_lock(&j->mu);
  if (j->qt[fr->rank][peer]) j->qt[fr->rank][peer]->next = m;
  else j->q[fr->rank][peer] = m;
  j->qt[fr->rank][peer] = m;
  j->sends[fr->rank]++;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

static rill_status_t fake_recv(void *ctx, int peer, void *out, size_t cap, size_t *out_n) {
  fake_rank_t *fr = ctx;
  fake_job_t *j = fr->job;
  ck_assert(peer >= 0 && peer < j->n && peer != fr->rank);
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += (time_t)j->timeout_s;
  pthread_mutex_lock(&j->mu);
  while (!j->q[peer][fr->rank] && !j->failed)
    if (pthread_cond_timedwait(&j->cv, &j->mu, &dl)) {
      pthread_mutex_unlock(&j->mu);
      return rill__status(RILL_RUNTIME_ERROR, "rank %d: nothing from rank %d within %g s", fr->rank, peer, j->timeout_s);
    }
  fake_msg_t *m = j->q[peer][fr->rank];
  if (!m) {
    pthread_mutex_unlock(&j->mu);
    return rill__status(RILL_RUNTIME_ERROR, "rank %d failed: %s", j->failed - 1, j->why);
  }
  if (m->n > cap) {
    pthread_mutex_unlock(&j->mu);
    return rill__status(RILL_RUNTIME_ERROR, "%zu bytes for room of %zu", m->n, cap);
  }
  if (!(j->q[peer][fr->rank] = m->next)) j->qt[peer][fr->rank] = NULL;
  pthread_mutex_unlock(&j->mu);
  memcpy(out, m->data, m->n);
  *out_n = m->n;
  free(m);
  return NULL;
}

#define NRANKS 4
/* The program each rank runs, for a job of n ranks (n divides 4). */
static const char *rank_src(int n) {
  static char buf[1024];
  snprintf(buf, sizeof buf,
           "func @main(%%x: f32[4,6]) -> (f32[4,6], f32[4,6], f32[%d,6], f32[4,6], f32[%d,6], i64[], i64[], f32[4,6]) {\n"
           "  %%s = all_reduce(%%x) {op=\"sum\"}\n"
           "  %%m = all_reduce(%%x) {op=\"max\"}\n"
           "  %%g = all_gather(%%x) {axis=0, ranks=%d}\n"
           "  %%b = broadcast(%%x) {root=1}\n"
           "  %%h = reduce_scatter(%%x) {op=\"avg\", axis=0, ranks=%d}\n"
           "  %%r = rank()\n  %%n = ranks()\n"
           "  %%t = mul(%%s, 0.5)\n  %%u = all_reduce(%%t) {op=\"min\"}\n"
           "  return %%s, %%m, %%g, %%b, %%h, %%r, %%n, %%u\n}\n",
           4 * n, 4 / n, n, n);
  return buf;
}

typedef struct rank_arg {
  fake_job_t *job;
  int rank;
  const uint8_t *mod;
  size_t nmod;
  bool fail;                   /* abort the job instead of running */
  bool graph;
  char device[16];             /* the VM's device */
  float x[24];
  float out[24 + 24 + 96 + 24 + 6 + 24];
  int64_t rk, rn;
  rill_status_t st;
} rank_arg_t;

/* Rank fr's VM on `device` for module bytes mod, joined to the fake job through t (filled here), graph mode on where asked. */
static rill_vm_t *rank_vm(fake_rank_t *fr, vm_transport_t *t, const uint8_t *mod, size_t nmod, const char *device, bool graph, rill_module_t **m) {
  *t = (vm_transport_t){fr->rank, fr->job->n, fr, fake_allgather, fake_abort, fake_send, fake_recv};
  ck_assert(!rill_module_load(NULL, mod, nmod, ".", m));
  rill_vm_t *vm;
  rill_status_t cst = rill_vm_create(NULL, *m, device, &vm);
  ck_assert_msg(!cst, "%s", rill_status_message(cst));
  ck_assert(!vm_attach_transport(vm, t));
  if (graph) ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_ON));
  return vm;
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  fake_rank_t fr = {a->job, a->rank};
  vm_transport_t t;
  rill_module_t *m;
  rill_vm_t *vm = rank_vm(&fr, &t, a->mod, a->nmod, a->device, a->graph, &m);
  if (a->fail) {
    fake_abort(&fr, "rank stopped on purpose");
  } else {
    rill_type_t ty = T(RILL_F32, 2, 4, 6);
    rill_tensor_t *x, **r;
    int nr;
    ck_assert(!rill_tensor_create(vm, &ty, a->x, &x));
    for (int rep = 0; rep < (a->graph ? 3 : 1) && !a->st; rep++) {
      a->st = rill_vm_invoke(vm, "main", &x, 1, &r, &nr);
      if (a->st) break;
      float *o = a->out;
      int sizes[] = {24, 24, 24 * a->job->n, 24, 24 / a->job->n};
      for (int i = 0; i < 5; i++) {
        ck_assert(!rill_tensor_read(r[i], o, sizeof(float) * (size_t)sizes[i]));
        o += sizes[i];
      }
      ck_assert(!rill_tensor_read(r[5], &a->rk, 8));
      ck_assert(!rill_tensor_read(r[6], &a->rn, 8));
      ck_assert(!rill_tensor_read(r[7], o, sizeof(float) * 24));
      rill_results_free(vm, r, nr);
    }
    rill_tensor_release(x);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
  return NULL;
}

static void run_job(rank_arg_t *a, fake_job_t *job, int nranks, const char *dev, int fail_rank, bool graph) {
  uint8_t *b;
  size_t n;
  rill_status_t st = asm_text(rank_src(nranks), &b, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  job_init(job, nranks, 4096, 20);
  pthread_t th[NRANKS];
  for (int r = 0; r < nranks; r++) {
    memset(&a[r], 0, sizeof a[r]);
    a[r] = (rank_arg_t){.job = job, .rank = r, .mod = b, .nmod = n, .fail = r == fail_rank, .graph = graph};
    if (strcmp(dev, "cuda") == 0) snprintf(a[r].device, sizeof a[r].device, "cuda:%d", r);
    else snprintf(a[r].device, sizeof a[r].device, "%s", dev);
    for (int i = 0; i < 24; i++) a[r].x[i] = (float)(((i * 7 + r * 5) % 11) - 5) / 4.0f;
    ck_assert(!pthread_create(&th[r], NULL, rank_main, &a[r]));
  }
  for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
  free(b);
  job_fini(job);
}

/* Runs the rank program on nranks ranks of `dev` ("cpu", or "cuda": rank r on cuda:r) and checks every result. */
static void check_ranks(int nranks, const char *dev) {
  static rank_arg_t a[NRANKS];
  static fake_job_t job;
  for (int graph = 0; graph < 2; graph++) {
    run_job(a, &job, nranks, dev, -1, graph);
    for (int r = 0; r < nranks; r++) {
      ck_assert_msg(!a[r].st, "rank %d: %s", r, rill_status_message(a[r].st));
      ck_assert_int_eq(a[r].rk, r);
      ck_assert_int_eq(a[r].rn, nranks);
      if (!strcmp(dev, "cuda")) {
        /* Three gathers when the communicator is made (NCCL's unique id, the
         * one-shot path's buffers, every rank's agreement to use it); the
         * collectives then run on the GPUs (one-shot or NCCL). */
        ck_assert_int_eq(job.calls[r], 3);
      } else {
        /* Six gathers a run (graph mode may run once more to warm up), alike on every rank. */
        ck_assert_int_eq(job.calls[r] % 6, 0);
        ck_assert_int_ge(job.calls[r], 6 * (graph ? 3 : 1));
      }
      ck_assert_int_eq(job.calls[r], job.calls[0]);
      const float *s = a[r].out, *mx = s + 24, *g = mx + 24, *bc = g + 24 * nranks, *h = bc + 24, *u = h + 24 / nranks;
      for (int i = 0; i < 24; i++) {
        float sum = a[0].x[i], m = a[0].x[i];
        for (int q = 1; q < nranks; q++) {
          sum += a[q].x[i];
          m = a[q].x[i] > m ? a[q].x[i] : m;
        }
        ck_assert_float_eq(s[i], sum);
        ck_assert_float_eq(mx[i], m);
        ck_assert_float_eq(bc[i], a[1].x[i]);
        ck_assert_float_eq(u[i], sum * 0.5f); /* every rank has the same */
      }
      for (int q = 0; q < nranks; q++) ck_assert(!memcmp(g + q * 24, a[q].x, sizeof(float) * 24));
      int per = 24 / nranks; /* rank r's rows of the average, summed in rank order */
      for (int c = 0; c < per; c++) {
        float sum = a[0].x[r * per + c];
        for (int q = 1; q < nranks; q++) sum += a[q].x[r * per + c];
        ck_assert_msg(fabsf(h[c] - sum / (float)nranks) <= 1e-6f, "rank %d avg %d: %g against %g", r, c, h[c], sum / (float)nranks);
      }
    }
  }
}

START_TEST(ranks_fake_transport) {
  /* Four ranks, each a thread with its own VM, over the fake transport:
   * the results against the reductions in rank order, interpreted and as
   * graphs (replays gather again). */
  check_ranks(NRANKS, "cpu");
}
END_TEST

START_TEST(ranks_one_fails) {
  /* Rank 2 aborts the job: the others' runs end with a status naming it (no hang). */
  static rank_arg_t a[NRANKS];
  static fake_job_t job;
  run_job(a, &job, NRANKS, "cpu", 2, false);
  for (int r = 0; r < NRANKS; r++) {
    if (r == 2) continue;
    ck_assert_msg(a[r].st != NULL, "rank %d ran without rank 2", r);
    ck_assert_msg(strstr(rill_status_message(a[r].st), "rank 2 failed: rank stopped on purpose"), "rank %d: %s", r, rill_status_message(a[r].st));
    rill_status_free(a[r].st);
  }
}
END_TEST

static fake_job_t one_run_job;
static const char ONE_RUN_SRC[] =
    "func @main(%x: f32[4], %i: i64[1]) -> f32[1] {\n  %g = gather(%x, %i) {axis=0}\n  %y = all_reduce(%g) {op=\"sum\"}\n  return %y\n}\n";
typedef struct one_run_arg {
  int rank;
  rill_status_t st;
} one_run_arg_t;

static void *one_run_rank(void *p) {
  one_run_arg_t *a = p;
  fake_rank_t fr = {&one_run_job, a->rank};
  vm_transport_t t = {a->rank, one_run_job.n, &fr, fake_allgather, fake_abort, NULL, NULL};
  rill_module_t *m;
  rill_vm_t *vm = vm_of(ONE_RUN_SRC, "cpu", &m);
  ck_assert(!vm_attach_transport(vm, &t));
  rill_type_t tx = T(RILL_F32, 1, 4), ti = T(RILL_I64, 1, 1);
  float xv[4] = {1, 2, 3, 4};
  int64_t iv = a->rank == 1 ? 9 : a->rank; /* rank 1's index is out of range */
  rill_tensor_t *in[2], **r;
  int nr;
  ck_assert(!rill_tensor_create(vm, &tx, xv, &in[0]));
  ck_assert(!rill_tensor_create(vm, &ti, &iv, &in[1]));
  a->st = rill_vm_invoke(vm, "main", in, 2, &r, &nr);
  if (!a->st) rill_results_free(vm, r, nr);
  rill_tensor_release(in[0]);
  rill_tensor_release(in[1]);
  rill_vm_destroy(vm);
  rill_module_release(m);
  return NULL;
}

START_TEST(ranks_one_run_fails) {
  /* Rank 1's run fails before its collective (a gather index out of range):
   * its VM aborts the job, and the others' runs end with a status naming
   * it at once, not at the transport's timeout (60 s here). */
  enum { N = 3 };
  fake_job_t *j = &one_run_job;
  job_init(j, N, 256, 60);
  one_run_arg_t args[N];
  pthread_t th[N];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < N; r++) {
    args[r] = (one_run_arg_t){.rank = r};
    ck_assert(!pthread_create(&th[r], NULL, one_run_rank, &args[r]));
  }
  for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  ck_assert_msg(secs < 20, "the ranks took %g s: the timeout, not the abort", secs);
  for (int r = 0; r < N; r++) {
    ck_assert_msg(args[r].st != NULL, "rank %d ran", r);
    if (r != 1)
      ck_assert_msg(strstr(rill_status_message(args[r].st), "rank 1 failed: a run on rank 1 failed"), "rank %d: %s", r, rill_status_message(args[r].st));
    rill_status_free(args[r].st);
  }
  job_fini(j);
}
END_TEST

/* ---- send and recv over the fake transport ---- */
typedef struct p2p_arg {
  fake_job_t *job;
  int rank;
  const uint8_t *mod;          /* the rank's module (the fake job checks no hash: ranks may differ) */
  size_t nmod;
  bool graph;
  char device[16];
  rill_type_t xt;
  uint8_t x[NEL * 8];
  uint8_t y[4][NEL * 8];
  int nres;
  rill_status_t st;
  uint64_t replays;
} p2p_arg_t;

static void *p2p_main(void *p) {
  p2p_arg_t *a = p;
  fake_rank_t fr = {a->job, a->rank};
  vm_transport_t t;
  rill_module_t *m;
  rill_vm_t *vm = rank_vm(&fr, &t, a->mod, a->nmod, a->device, a->graph, &m);
  rill_tensor_t *x, **r;
  int nr;
  ck_assert(!rill_tensor_create(vm, &a->xt, a->x, &x));
  for (int rep = 0; rep < (a->graph ? 3 : 1); rep++) {
    if ((a->st = rill_vm_invoke(vm, "main", &x, 1, &r, &nr))) {
      fake_abort(&fr, rill_status_message(a->st)); /* as rill run does: the others end too */
      break;
    }
    a->nres = nr;
    for (int i = 0; i < nr && i < 4; i++) ck_assert(!rill_tensor_read(r[i], a->y[i], rill_tensor_nbytes(r[i])));
    rill_results_free(vm, r, nr);
  }
  rill_graph_info_t gi;
  if (a->graph && rill_vm_graph_info(vm, "main", &gi)) a->replays = gi.replays;
  rill_tensor_release(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
  return NULL;
}

/* Runs srcs[r % nsrc] on rank r of a fake job of n ranks (device `dev`, "cuda": rank r on cuda:r), x of type xt filled per rank. */
static void run_p2p(p2p_arg_t *a, fake_job_t *job, int n, const char *const *srcs, int nsrc, rill_type_t xt, bool graph, const char *dev, double timeout_s) {
  uint8_t *mods[NRANKS];
  size_t nmods[NRANKS];
  for (int i = 0; i < nsrc; i++) {
    rill_status_t st = asm_text(srcs[i], &mods[i], &nmods[i]);
    ck_assert_msg(!st, "%s", rill_status_message(st));
  }
  job_init(job, n, 4096, timeout_s);
  pthread_t th[NRANKS];
  for (int r = 0; r < n; r++) {
    memset(&a[r], 0, sizeof a[r]);
    a[r].job = job;
    a[r].rank = r;
    a[r].mod = mods[r % nsrc];
    a[r].nmod = nmods[r % nsrc];
    a[r].graph = graph;
    a[r].xt = xt;
    if (strcmp(dev, "cuda") == 0) snprintf(a[r].device, sizeof a[r].device, "cuda:%d", r);
    else snprintf(a[r].device, sizeof a[r].device, "%s", dev);
    fill(xt.dtype, a[r].x, (size_t)rill_type_numel(&xt), (uint64_t)(r * 31 + xt.dtype + 1));
    ck_assert(!pthread_create(&th[r], NULL, p2p_main, &a[r]));
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int i = 0; i < nsrc; i++) free(mods[i]);
  job_fini(job);
}

/* A ring both ways (the recv written before the send: an exchange issues its sends first), then the value sent back. */
static const char *ring_src(rill_dtype_t d) {
  static char buf[1024];
  const char *dn = rill_dtype_name(d);
  snprintf(buf, sizeof buf,
           "func @main(%%x: %s[4,8]) -> (%s[4,8], %s[4,8], %s[4,8], %s[4,8]) {\n"
           "  %%y = recv() {shift=-1, dtype=%s, shape=[4,8]}\n"
           "  send(%%x) {shift=1}\n"
           "  %%c = copy(%%y)\n"
           "  send(%%c) {shift=-1}\n"
           "  %%z = recv() {shift=1, dtype=%s, shape=[4,8]}\n"
           "  %%k = copy(%%z)\n"
           "  send(%%x) {shift=1}\n  send(%%k) {shift=-1}\n"
           "  %%a = recv() {shift=-1, dtype=%s, shape=[4,8]}\n  %%b = recv() {shift=1, dtype=%s, shape=[4,8]}\n"
           "  return %%y, %%z, %%a, %%b\n}\n",
           dn, dn, dn, dn, dn, dn, dn, dn, dn);
  return buf;
}

/* The ring on n ranks of dev for every dtype, interpreted and as graphs: rank r gets rank r-1's x, its own back, and from the two-way exchange r-1's x and r+1's own. */
static void check_p2p(int n, const char *dev) {
  static p2p_arg_t a[NRANKS];
  static fake_job_t job;
  for (size_t di = 0; di < RILL_ARRAY_LEN(DTYPES); di++) {
    rill_dtype_t d = DTYPES[di];
    size_t bytes = NEL * rill_dtype_size(d);
    for (int graph = 0; graph < 2; graph++) {
      const char *src = ring_src(d);
      run_p2p(a, &job, n, &src, 1, T(d, 2, ROWS, COLS), graph, dev, 20);
      for (int r = 0; r < n; r++) {
        ck_assert_msg(!a[r].st, "%s %s rank %d: %s", rill_dtype_name(d), graph ? "graph" : "interpreted", r, rill_status_message(a[r].st));
        ck_assert_int_eq(a[r].nres, 4);
        int prev = (r + n - 1) % n, next = (r + 1) % n;
        ck_assert_msg(!memcmp(a[r].y[0], a[prev].x, bytes), "%s rank %d: not rank %d's x", rill_dtype_name(d), r, prev);
        ck_assert_msg(!memcmp(a[r].y[1], a[r].x, bytes), "%s rank %d: its own x did not come back", rill_dtype_name(d), r);
        ck_assert(!memcmp(a[r].y[2], a[prev].x, bytes));
        ck_assert(!memcmp(a[r].y[3], a[next].x, bytes));
        if (graph) ck_assert_msg(a[r].replays >= 1, "rank %d: no replay", r);
        /* cpu: a message a send a run (graph mode may run once more to warm
         * up); cuda: a header a send issued (replays issue nothing) */
        ck_assert_int_eq(job.sends[r] % 4, 0);
        ck_assert_int_ge(job.sends[r], strcmp(dev, "cuda") ? 4 * (graph ? 3 : 1) : 4);
      }
    }
  }
}

START_TEST(p2p_ring_every_dtype) {
  /* Four ranks (threads with their own VMs) pass a tensor of every dtype
   * round a ring and back, bit for bit, interpreted and as graphs (replays
   * send again). */
  check_p2p(NRANKS, "cpu");
}
END_TEST

START_TEST(p2p_pairwise) {
  /* Absolute peers: rank 0 and rank 1 (each its own module) exchange, the
   * recv written first; then a pair of f16 sends one way in one exchange,
   * received in order. */
  static const char *srcs[2] = {
      "func @main(%x: f32[4,8]) -> (f32[4,8], f16[3]) {\n  %y = recv() {peer=1, dtype=f32, shape=[4,8]}\n  send(%x) {peer=1}\n"
      "  %h = cast(%x) {dtype=f16}\n  %s = slice(%h) {starts=[0, 0], ends=[1, 3]}\n  %t = reshape(%s) {shape=[3]}\n  %u = mul(%t, 2.0)\n"
      "  send(%t) {peer=1}\n  send(%u) {peer=1}\n  return %y, %t\n}\n",
      "func @main(%x: f32[4,8]) -> (f32[4,8], f16[3], f16[3]) {\n  send(%x) {peer=0}\n  %y = recv() {peer=0, dtype=f32, shape=[4,8]}\n"
      "  %a = recv() {peer=0, dtype=f16, shape=[3]}\n  %b = recv() {peer=0, dtype=f16, shape=[3]}\n  return %y, %a, %b\n}\n"};
  static p2p_arg_t a[2];
  static fake_job_t job;
  for (int graph = 0; graph < 2; graph++) {
    run_p2p(a, &job, 2, srcs, 2, T(RILL_F32, 2, ROWS, COLS), graph, "cpu", 20);
    for (int r = 0; r < 2; r++) ck_assert_msg(!a[r].st, "rank %d: %s", r, rill_status_message(a[r].st));
    ck_assert(!memcmp(a[0].y[0], a[1].x, NEL * 4));
    ck_assert(!memcmp(a[1].y[0], a[0].x, NEL * 4));
    ck_assert_int_eq(a[1].nres, 3);
    const uint16_t *t = (const uint16_t *)a[0].y[1], *ga = (const uint16_t *)a[1].y[1], *gb = (const uint16_t *)a[1].y[2];
    for (int i = 0; i < 3; i++) {
      ck_assert_uint_eq(ga[i], t[i]);
      ck_assert_float_eq(rill_element_get(RILL_F16, gb, (size_t)i), 2 * rill_element_get(RILL_F16, t, (size_t)i));
    }
  }
}
END_TEST

START_TEST(p2p_errors) {
  /* A peer out of the job, a send to itself, a type that differs from the
   * peer's, a recv with no send: a status on the rank concerned naming the
   * ranks and the types; the others end with the job's failure, no hang. */
  static p2p_arg_t a[NRANKS];
  static fake_job_t job;
  static const struct {
    const char *src[2];
    int nsrc, n, rank;
    const char *err;
  } cases[] = {
      {{"func @main(%x: f32[4,8]) -> f32[4,8] {\n  send(%x) {peer=7}\n  return %x\n}\n"}, 1, 4, 0,
       "send {peer=7} on rank 0: rank 7 is out of the job's ranks 0..3"},
      {{"func @main(%x: f32[4,8]) -> f32[4,8] {\n  %y = recv() {shift=4, dtype=f32, shape=[4,8]}\n  return %y\n}\n"}, 1, 4, 2,
       "recv {shift=4} on rank 2 of a job of 4 ranks is rank 2 itself"},
      {{"func @main(%x: f32[4,8]) -> f32[4,8] {\n  send(%x) {peer=1}\n  return %x\n}\n"}, 1, 2, 1,
       "send {peer=1} on rank 1: a rank does not send to or receive from itself"},
      {{"func @main(%x: f32[4,8]) -> f32[4,8] {\n  send(%x) {peer=1}\n  return %x\n}\n",
        "func @main(%x: f32[4,8]) -> i32[4,8] {\n  %y = recv() {peer=0, dtype=i32, shape=[4,8]}\n  return %y\n}\n"}, 2, 2, 1,
       "recv on rank 1 from rank 0 expects i32[4,8], and rank 0 sent f32[4,8]"},
      {{"func @main(%x: f32[4,8]) -> f32[4,8] {\n  send(%x) {peer=1}\n  return %x\n}\n",
        "func @main(%x: f32[4,8]) -> f32[32] {\n  %y = recv() {peer=0, dtype=f32, shape=[32]}\n  return %y\n}\n"}, 2, 2, 1,
       "expects f32[32], and rank 0 sent f32[4,8]"},
      {{"func @main(%x: f32[4,8]) -> f32[4,8] {\n  %y = recv() {shift=1, dtype=f32, shape=[4,8]}\n  return %y\n}\n",
        "func @main(%x: f32[4,8]) -> f32[4,8] {\n  return %x\n}\n"}, 2, 2, 0,
       "rank 0: nothing from rank 1 within 2 s"},
  };
  for (size_t i = 0; i < RILL_ARRAY_LEN(cases); i++) {
    run_p2p(a, &job, cases[i].n, cases[i].src, cases[i].nsrc, T(RILL_F32, 2, ROWS, COLS), false, "cpu", 2);
    ck_assert_msg(a[cases[i].rank].st && strstr(rill_status_message(a[cases[i].rank].st), cases[i].err), "case %zu: %s", i,
                  a[cases[i].rank].st ? rill_status_message(a[cases[i].rank].st) : "no error");
    for (int r = 0; r < cases[i].n; r++) rill_status_free(a[r].st);
  }
  /* A VM of no job: a job of one rank, where every peer is itself. */
  rill_module_t *m;
  rill_vm_t *vm = vm_of("func @main(%x: f32[4]) -> f32[4] {\n  send(%x) {shift=1}\n  return %x\n}\n", "cpu", &m);
  rill_type_t t = T(RILL_F32, 1, 4);
  float v[4] = {1, 2, 3, 4};
  rill_tensor_t *x, **r;
  int nr;
  ck_assert(!rill_tensor_create(vm, &t, v, &x));
  rill_status_t st = rill_vm_invoke(vm, "main", &x, 1, &r, &nr);
  ck_assert_msg(st && strstr(rill_status_message(st), "send {shift=1} on rank 0 of a job of 1 rank is rank 0 itself"), "%s",
                st ? rill_status_message(st) : "ran");
  rill_status_free(st);
  rill_tensor_release(x);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

START_TEST(p2p_asm_errors) {
  /* The forms: a peer (one of peer or shift), recv's type, send without a result, a send of what its own exchange receives. */
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  send(%x)\n  return %x\n}\n", 2, "needs one of peer=R (a rank) or shift=K");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  send(%x) {peer=1, shift=1}\n  return %x\n}\n", 2, "found both");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  send(%x) {peer=-1}\n  return %x\n}\n", 2, "peer=-1: expected a rank 0 or more");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %y = recv() {peer=1}\n  return %y\n}\n", 2, "needs the type it receives: dtype=D and shape=[...]");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %y = recv() {peer=1, dtype=f32, shape=[-2]}\n  return %y\n}\n", 2, "shape[0] = -2");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %t = send(%x) {peer=1}\n  return %x\n}\n", 2, "send: expected send(%x) {peer=R} (no result)");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  send(%x) {peer=1, dtype=f32}\n  return %x\n}\n", 2, "send: unknown attribute 'dtype' (expected peer, shift)");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  send(%x) {peer=1, part=0, parts=1}\n  return %x\n}\n", 2, "send: unknown attribute 'part' (expected peer, shift)");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %y = sendrecv(%x) {to=[1], to_shift=[0]}\n  return %x\n}\n", 2, "sendrecv is the assembler's");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  send(4.0) {peer=1}\n  return %x\n}\n", 2, "operand 1 of send must be a %value");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %a, %b = recv() {peer=1, dtype=f32, shape=[4]}\n  return %a\n}\n", 2,
                   "expected send(%x) {peer=R} (no result) or %y = recv()");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %y = recv() {peer=1, dtype=f32, shape=[4]}\n  send(%y) {peer=1}\n  return %y\n}\n", 3,
                   "%y is received in the exchange that sends it");
}
END_TEST

START_TEST(gpus) {
  /* The collectives over GPUs against the cpu devices': over the VM's GPUs
   * (2, and 4 where there are), one-shot and through NCCL; over ranks, one
   * GPU each (threads with a fake transport), interpreted and as graphs.
   * Bit for bit, but avg (NCCL's own arithmetic) within a rounding. */
  rill_cuda_info_t ci;
  const char *why = NULL;
  if (!rill_cuda_info(&ci, &why) || ci.device_count < 2) {
    printf("coll: GPU collectives skipped: %s\n", why ? why : "fewer than two GPUs");
    return;
  }
  uint8_t xs[NDEV][NEL * 8], want[NDEV][NEL * 8 * NDEV], gotb[NDEV][NEL * 8 * NDEV];
  void *x[NDEV], *got[NDEV], *w[NDEV];
  for (int i = 0; i < NDEV; i++) x[i] = xs[i], got[i] = gotb[i], w[i] = want[i];
  for (int nd = 2; nd <= (ci.device_count >= 4 ? 4 : 2); nd += 2) {
    char gpus[64] = "", cpus[64] = "";
    for (int i = 0; i < nd; i++) {
      snprintf(gpus + strlen(gpus), sizeof gpus - strlen(gpus), "%scuda:%d", i ? "," : "", i);
      snprintf(cpus + strlen(cpus), sizeof cpus - strlen(cpus), "%scpu:%d", i ? "," : "", i);
    }
    for (size_t di = 0; di < RILL_ARRAY_LEN(DTYPES); di++) {
      rill_dtype_t d = DTYPES[di];
      for (size_t ci2 = 0; ci2 < RILL_ARRAY_LEN(CASES); ci2++) {
        const coll_case_t *c = &CASES[ci2];
        if (d == RILL_BOOL && c->red && strcmp(c->red, "avg") == 0) continue;
        if (strcmp(c->kind, "broadcast") == 0 && nd < 3) continue; /* root=2 */
        for (int i = 0; i < nd; i++) fill(d, x[i], NEL, (uint64_t)(di * 100 + ci2 * 10 + (size_t)i + 7));
        size_t bytes, wb;
        run_device_case(cpus, nd, -1, c, d, false, x, w, &wb);
        for (int oneshot = 0; oneshot < 2; oneshot++) {
          /* all_reduce sum and all_gather along axis 0 also as graphs over the GPUs (the NCCL group or the one-shot kernels captured) */
          bool graph = ci2 == 0 || ci2 == 4;
          run_device_case(gpus, nd, oneshot ? 1 << 20 : 0, c, d, graph, x, got, &bytes);
          ck_assert_uint_eq(bytes, wb);
          for (int me = 0; me < nd; me++) {
            bool avg = c->red && strcmp(c->red, "avg") == 0;
            /* NCCL's integer avg of sums that wrap is its own (where it divides); the one-shot kernel's is ours. */
            if (avg && !is_float(d) && !(oneshot && strcmp(c->kind, "all_reduce") == 0)) continue;
            for (size_t k = 0; k < bytes / rill_dtype_size(d); k++) {
              double a = rill_element_get(d, got[me], k), b = rill_element_get(d, w[me], k);
              bool ok = avg && is_float(d) ? fabs(a - b) <= 1e-2 * fabs(b) + 1e-6 : a == b;
              ck_assert_msg(ok, "%s op=%s %s on %s (%s) participant %d element %zu: %g, the cpu devices %g", c->kind, c->red ? c->red : "-",
                            rill_dtype_name(d), gpus, oneshot ? "one-shot" : "NCCL", me, k, a, b);
            }
          }
        }
      }
    }
  }
  check_ranks(2, "cuda");
  check_p2p(2, "cuda"); /* send/recv through NCCL, every dtype, interpreted and as graphs */
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("coll");
  add_test_case(s, devices_every_dtype, 300);
  add_test_case(s, two_devices_and_one_rank, 60);
  add_test_case(s, asm_errors, 60);
  add_test_case(s, rank_form_sizes_checked, 60);
  add_test_case(s, parts_checked_at_run_time, 60);
  add_test_case(s, ranks_fake_transport, 120);
  add_test_case(s, ranks_one_fails, 120);
  add_test_case(s, ranks_one_run_fails, 120);
  add_test_case(s, p2p_ring_every_dtype, 300);
  add_test_case(s, p2p_pairwise, 60);
  add_test_case(s, p2p_errors, 120);
  add_test_case(s, p2p_asm_errors, 60);
  add_test_case(s, gpus, 600);
  return s;
}

int main(void) { return run_suite(suite()); }
