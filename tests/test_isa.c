/* test_isa.c: the bottom layer: half-precision conversions, the module
 * reader against damaged input, and the verifier's rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "isa/safetensors.h"
#include <unistd.h>
#include "ops/ops.h"
#include "vm/vm.h"

START_TEST(verifier_rejects) {
  /* Each lowered program breaks one rule; assembling runs the verifier. */
  const char *bad[][2] = {
      {"func @main(%x: f32[2]) -> (f32[2]) lowered(streams=1, events=0) {\n  reg %y : f32[2]\n  return (%y)\n}\n", "read before it is defined"},
      {"const %k : f32[2] = [1, 2]\nop $0 = relu(f32[2]) -> (f32[2])\nfunc @main(%x: f32[2]) -> (f32[2]) lowered(streams=1, events=0) {\n  reg %y : f32[2]\n  load_const %y, %k\n  invoke $0, (%x), (%y)\n  return (%y)\n}\n", "not a writable tensor"},
      {"op $0 = relu(f32[2]) -> (f32[2])\nfunc @main(%x: f32[2]) -> (f32[2]) lowered(streams=1, events=0) {\n  invoke $0, (%x), (%x)\n  return (%x)\n}\n", "not a writable tensor"},
      {"op $0 = relu(f32[2]) -> (f32[2])\nfunc @main(%x: f32[2]) -> (f32[2]) lowered(streams=2, events=1) {\n  reg %y : f32[2]\n  cuda_set_stream 1\n  alloc_tensor %y\n  cuda_add_event 0, 1\n  cuda_wait_event 0, 0\n  invoke $0, (%x), (%y)\n  return (%y)\n}\n", "without an event"},
      {"op $0 = relu(f32[2]) -> (f32[2])\nfunc @main(%x: f32[2]) -> (f32[2]) lowered(streams=2, events=1) {\n  reg %y : f32[2]\n  cuda_add_event 0, 0\n  cuda_wait_event 0, 1\n  cuda_set_stream 1\n  alloc_tensor %y\n  invoke $0, (%x), (%y)\n  return (%x)\n}\n", "stream 1's work is not joined"},
      {"func @main(%c: bool[]) -> (bool[]) lowered(streams=1, events=0) {\n  br_if %c, L0, L0\nL0:\n  return (%c)\n}\n", "without a host wait"},
      {"func @main(%x: f32[2]) -> (f32[2]) lowered(streams=1, events=0) {\n  nop\n}\n", "falls off the end"},
      {"op $0 = relu(f32[2]) -> (f32[3])\n", "result 1 declared f32[3]"},
      {"func @main(%x: f32[2]) -> (f32[2]) lowered(streams=1, events=0) {\n  reg %s : storage(4)\n  reg %y : f32[2]\n  alloc_storage %s\n  view %y, %s, 0\n  return (%x)\n}\n", "exceeds storage"},
      {"func @main(%x: f32[2]) -> (f32[2]) lowered(streams=1, events=2) {\n  cuda_add_event 2, 0\n  return (%x)\n}\n", "event 2 not below"},
      {"func @main(%x: f32[2], %c: bool[]) -> (f32[2]) lowered(streams=1, events=0) {\n  host_wait %c\n  br_if %c, L0, L1\nL0:\n  nop\n  goto L0\nL1:\n  return (%x)\n}\n", "no path from here reaches a return"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint8_t *b = NULL;
    size_t n;
    rill_status_t st = asm_text(bad[i][0], &b, &n);
    ck_assert_msg(st != NULL, "case %zu was accepted", i);
    ck_assert_msg(strstr(rill_status_message(st), bad[i][1]) != NULL, "case %zu: want '%s' in: %s", i, bad[i][1], rill_status_message(st));
    rill_status_free(st);
  }
}
END_TEST

START_TEST(reader_rejects_damage) {
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text("const %k : f32[3] = [1, 2, 3]\nfunc @main(%x: f32[3]) -> f32[3] {\n  %y = add(%x, %k)\n  return %y\n}\n", &b, &n));
  /* Every truncation fails cleanly. */
  for (size_t len = 0; len < n; len++) {
    rill_module_t *m = NULL;
    rill_status_t st = rill_module_load(NULL, b, len, ".", &m);
    ck_assert_msg(st != NULL, "truncation to %zu bytes was accepted", len);
    ck_assert(rill_status_code(st) == RILL_MALFORMED || rill_status_code(st) == RILL_VERIFY_ERROR);
    rill_status_free(st);
  }
  /* Every single-byte flip either fails or still verifies (never crashes). */
  int rejected = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    c[i] ^= 0x5a;
    rill_module_t *m = NULL;
    rill_status_t st = rill_module_load(NULL, c, n, ".", &m);
    if (st) rejected++;
    rill_status_free(st);
    rill_module_release(m);
    free(c);
  }
  ck_assert_int_gt(rejected, (int)n / 2);
  /* A newer minor version and another major are refused; text-mode damage is named. */
  uint8_t *c = malloc(n);
  memcpy(c, b, n);
  c[10] = RILL_BYTECODE_MINOR + 1;
  rill_module_t *m;
  rill_status_t st = rill_module_load(NULL, c, n, ".", &m);
  ck_assert(st && strstr(rill_status_message(st), "version"));
  rill_status_free(st);
  memcpy(c, b, n);
  c[4] = '\n';
  st = rill_module_load(NULL, c, n, ".", &m);
  ck_assert(st && strstr(rill_status_message(st), "text-mode"));
  rill_status_free(st);
  /* A module of minor version 1 (no shapes section, the last: 16 bytes of
   * header and three zero counts) still loads. */
  memcpy(c, b, n);
  ck_assert(n > 28 && c[n - 28] == 10 && !memcmp(c + n - 12, (uint8_t[12]){0}, 12));
  c[10] = 1;
  c[12] = 9;
  st = rill_module_load(NULL, c, n - 28, ".", &m);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_module_release(m);
  free(c);
  free(b);
}
END_TEST

START_TEST(module_reader_shape_variables) {
  /* A module with shape variables: every truncation fails cleanly, every
   * byte flip fails or still verifies (never crashes), and it runs. */
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text("dim S in [2, 16]\nfunc @main(%x: f32[B,S]) -> f32[B] {\n  %y = reshape(%x) {shape=[-1]}\n"
                      "  %z = reshape(%y) {shape=[B, S]}\n  %p = pad(%z) {pads=[0, 1, 0, 1]}\n  %s = sum(%p) {axes=[1]}\n  return %s\n}\n", &b, &n));
  for (size_t len = 0; len < n; len++) {
    rill_module_t *m = NULL;
    rill_status_t st = rill_module_load(NULL, b, len, ".", &m);
    ck_assert_msg(st != NULL, "truncation to %zu bytes was accepted", len);
    rill_status_free(st);
  }
  for (size_t i = 0; i < n; i++)
    for (int x = 0; x < 2; x++) {
      uint8_t *c = malloc(n);
      memcpy(c, b, n);
      c[i] ^= x ? 0x80 : 0x01;
      rill_module_t *m = NULL;
      rill_status_t st = rill_module_load(NULL, c, n, ".", &m);
      rill_status_free(st);
      rill_module_release(m);
      free(c);
    }
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  rill_type_t t;
  ck_assert(rill_module_param_type(m, "main", 0, &t, NULL) && t.rank == 2 && t.dims[0] == -1 && t.dims[1] == -1);
  rill_module_release(m);
  free(b);
}
END_TEST

/* The precision mode in the module section: a module in another mode than
 * exact is written as 1.5 and reads back with its mode, an exact one as
 * before (older readers read it); a mode out of range is refused by the
 * reader and the verifier; damage fails cleanly. TF32 rounding is to
 * nearest even at the 13th bit. */
START_TEST(module_precision) {
  static const char src[] = "precision tf32\nfunc @main(%x: f32[2,2]) -> f32[2,2] {\n  %y = matmul(%x, %x)\n  return %y\n}\n";
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text(src, &b, &n));
  ck_assert_int_eq(b[10], 5);
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  ck_assert_int_eq(rill_module_precision(m), RILL_PRECISION_TF32);
  rill_module_release(m);
  isa_module_t *im;
  ck_assert(!isa_read(rill_allocator_system(), b, n, &im));
  ck_assert_uint_eq(im->precision, RILL_PRECISION_TF32);
  check_damaged_module(b, n, (const uint8_t[]){0x01, 0x80, 0xff}, 3);
  free(b);
  static const struct { uint32_t mode; const char *want; } bad[] = {{RILL_PRECISION_COUNT, "bad precision"}, {0x80000000u, "bad precision"}};
  for (size_t i = 0; i < RILL_ARRAY_LEN(bad); i++) {
    im->precision = bad[i].mode;
    rill_status_t st = isa_verify(im, &ops_resolver);
    ck_assert(st && strstr(rill_status_message(st), "precision mode"));
    rill_status_free(st);
    uint8_t *w;
    size_t wn;
    ck_assert(!isa_write(im, rill_allocator_system(), &w, &wn));
    isa_module_t *r = NULL;
    st = isa_read(rill_allocator_system(), w, wn, &r);
    ck_assert_msg(st && strstr(rill_status_message(st), "module section: bad precision"), "%s", st ? rill_status_message(st) : "read");
    rill_status_free(st);
    free(w);
  }
  isa_module_free(im);
  ck_assert(!asm_text("func @main(%x: f32[2]) -> f32[2] {\n  %y = relu(%x)\n  return %y\n}\n", &b, &n));
  ck_assert_int_eq(b[10], 2);
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  ck_assert_int_eq(rill_module_precision(m), RILL_PRECISION_EXACT);
  rill_module_release(m);
  free(b);
  /* 1 + 2^-10 is a TF32 value; 1 + 2^-11 is halfway (to even: 1), 1 + 3 * 2^-11 too (to even: 1 + 2^-9) */
  ck_assert(rill__f32_to_tf32(1.0f + 0x1p-10f) == 1.0f + 0x1p-10f);
  ck_assert(rill__f32_to_tf32(1.0f + 0x1p-11f) == 1.0f);
  ck_assert(rill__f32_to_tf32(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
  ck_assert(rill__f32_to_tf32(-(1.0f + 0x1p-11f + 0x1p-20f)) == -(1.0f + 0x1p-10f));
  ck_assert(isinf(rill__f32_to_tf32(INFINITY)) && isnan(rill__f32_to_tf32(NAN)));
  ck_assert(rill__f32_to_tf32(0x1.fffffep127f) == 0x1.fffffep127f || isinf(rill__f32_to_tf32(0x1.fffffep127f)));
}
END_TEST

START_TEST(half_precision) {
  /* f16: exact values, rounding to nearest even, overflow, subnormals; all patterns round trip */
  ck_assert_uint_eq(rill__f32_to_f16(1.0f), 0x3c00);
  ck_assert_uint_eq(rill__f32_to_f16(65504.0f), 0x7bff);
  ck_assert_uint_eq(rill__f32_to_f16(65520.0f), 0x7c00);
  ck_assert_uint_eq(rill__f32_to_f16(5.9604645e-8f), 0x0001);
  ck_assert_uint_eq(rill__f32_to_f16(2049.0f), rill__f32_to_f16(2048.0f));
  ck_assert_uint_eq(rill__f32_to_f16(2051.0f), rill__f32_to_f16(2052.0f));
  for (uint32_t h = 0; h < 65536; h++) {
    float f = rill__f16_to_f32((uint16_t)h);
    if (isnan(f)) continue;
    ck_assert_uint_eq(rill__f32_to_f16(f), h);
    ck_assert_uint_eq(rill__f32_to_bf16(rill__bf16_to_f32((uint16_t)h)), h);
  }
  ck_assert_uint_eq(rill__f32_to_bf16(1.0f), 0x3f80);
  ck_assert(rill__bf16_to_f32(rill__f32_to_bf16(1.00390625f)) == 1.0f); /* tie to even */
  /* the bulk conversion (F16C where the CPU has it) gives rill__f32_to_f16's
   * bits: 2^26 patterns spread over all 2^32 (a step of 64 with a varying
   * low part), and around every exponent the mantissas next to the f16
   * rounding boundaries (ties, subnormals, overflow, NaN payloads, both
   * signs); from an odd address, with a tail of 5 */
  enum { N = 1 << 16 };
  uint8_t *src = malloc(4 * N + 1);
  uint16_t *got = malloc(2 * N);
  uint32_t bits[N];
  long diffs = 0;
  for (uint32_t round = 0; round < 1024 + 512 + 1; round++) {
    size_t n = N;
    if (round < 1024) {
      for (uint32_t i = 0; i < N; i++) bits[i] = (round << 22) + (i << 6) + ((i * 2654435761u) & 63u);
    } else if (round < 1024 + 512) {
      uint32_t e = round - 1024; /* sign and exponent */
      for (uint32_t i = 0; i < N; i++) {
        uint32_t low = i & 0x3fffu, mid = (i >> 14) & 3u; /* mantissa: a boundary's neighbourhood, at 4 places */
        uint32_t mant = (mid == 0 ? low : mid == 1 ? 0x1000u - 0x2000u + low : mid == 2 ? 0x7fffffu - low : (0x2000u * (i >> 7)) + (low & 0x7fu));
        bits[i] = (e << 23) | (mant & 0x7fffffu);
      }
    } else {
      n = 5 + 8 * 3; /* a tail after whole vectors */
      for (uint32_t i = 0; i < n; i++) bits[i] = 0x7f800001u + i * 0x11111u;
    }
    for (size_t i = 0; i < n; i++) memcpy(src + 1 + 4 * i, &bits[i], 4);
    rill__f32_to_f16_n(src + 1, got, n);
    for (size_t i = 0; i < n; i++) {
      float f;
      memcpy(&f, &bits[i], 4);
      if (got[i] != rill__f32_to_f16(f) && diffs++ < 5) printf("f32 0x%08x: bulk 0x%04x, scalar 0x%04x\n", bits[i], got[i], rill__f32_to_f16(f));
    }
  }
  free(src);
  free(got);
  ck_assert_int_eq(diffs, 0);
}
END_TEST

/* A safetensors file: the JSON header, then `data` zero bytes. */
static rill_status_t st_parse(const char *json, size_t data, isa_st_t **out) {
  size_t hl = strlen(json), n = 8 + hl + data;
  uint8_t *b = calloc(1, n);
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(b + 8, json, hl);
  return isa_st_parse(rill_allocator_system(), b, n, out);
}

/* Tensors' byte ranges: disjoint, covering the data section without holes. */
START_TEST(safetensors_ranges) {
  static const struct { const char *json; size_t data; const char *why; } bad[] = {
      {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
       "\"v\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12,
       "tensors \"w\" [0, 8) and \"v\" [4, 12) overlap"},
      {"{\"v\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]}, "
       "\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 20,
       "a hole of 4 bytes between tensors \"w\" (ends at 8) and \"v\" (begins at 12)"},
      {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12,
       "the first 4 data bytes belong to no tensor (the first, \"w\", begins at 4)"},
      {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 12,
       "4 data bytes after the last tensor \"w\" (ends at 8) belong to no tensor"},
      {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
       "\"v\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8,
       "tensors \"w\" [0, 8) and \"v\" [0, 8) overlap"},
      {"{\"__metadata__\": {}}", 4, "4 data bytes but no tensors"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    isa_st_t *st = NULL;
    rill_status_t s = st_parse(bad[i].json, bad[i].data, &st);
    ck_assert_msg(s && rill_status_code(s) == RILL_MALFORMED && strstr(rill_status_message(s), bad[i].why),
                  "case %zu: %s", i, s ? rill_status_message(s) : "accepted");
    rill_status_free(s);
  }
  /* In any order, with an empty tensor at either end. */
  static const char good[] = "{\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}, "
                             "\"z\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [16, 16]}, "
                             "\"e\": {\"dtype\": \"I64\", \"shape\": [0, 3], \"data_offsets\": [0, 0]}, "
                             "\"a\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [0, 8]}}";
  isa_st_t *st = NULL;
  rill_status_t s = st_parse(good, 16, &st);
  ck_assert_msg(!s, "%s", s ? rill_status_message(s) : "");
  ck_assert_int_eq(st->count, 4);
  ck_assert(isa_st_find(st, "b")->offset == 8 + strlen(good) + 8);
  isa_st_free(st);
  ck_assert(!st_parse("{}", 0, &st));
  ck_assert_int_eq(st->count, 0);
  isa_st_free(st);
  /* the dtypes of bytecode 1.8, by their safetensors names and sizes */
  static const char nd[] = "{\"a\": {\"dtype\": \"I16\", \"shape\": [3], \"data_offsets\": [0, 6]}, "
                           "\"b\": {\"dtype\": \"U16\", \"shape\": [1], \"data_offsets\": [6, 8]}, "
                           "\"c\": {\"dtype\": \"U32\", \"shape\": [2], \"data_offsets\": [8, 16]}, "
                           "\"d\": {\"dtype\": \"U64\", \"shape\": [1, 2], \"data_offsets\": [16, 32]}}";
  s = st_parse(nd, 32, &st);
  ck_assert_msg(!s, "%s", s ? rill_status_message(s) : "");
  ck_assert(isa_st_find(st, "a")->type.dtype == RILL_I16 && isa_st_find(st, "b")->type.dtype == RILL_U16);
  ck_assert(isa_st_find(st, "c")->type.dtype == RILL_U32 && isa_st_find(st, "d")->type.dtype == RILL_U64);
  isa_st_free(st);
  /* a U64 tensor of 2 elements in 12 bytes: refused */
  s = st_parse("{\"d\": {\"dtype\": \"U64\", \"shape\": [2], \"data_offsets\": [0, 12]}}", 12, &st);
  ck_assert(s && rill_status_code(s) == RILL_MALFORMED);
  rill_status_free(s);
}
END_TEST


/* ---- kernel choice trees ---- */
static void expect_tree(const rill_tree_node_t *got, uint32_t n, const rill_tree_node_t *want, uint32_t wn, const char *what) {
  ck_assert_msg(n == wn, "%s: %u nodes, want %u", what, n, wn);
  for (uint32_t i = 0; i < n; i++)
    ck_assert_msg(got[i].var == want[i].var && got[i].use == want[i].use && got[i].le == want[i].le && got[i].yes == want[i].yes &&
                      got[i].no == want[i].no,
                  "%s: node %u is (var %d use %u le %lld yes %u no %u), want (var %d use %u le %lld yes %u no %u)", what, i, got[i].var,
                  got[i].use, (long long)got[i].le, got[i].yes, got[i].no, want[i].var, want[i].use, (long long)want[i].le, want[i].yes,
                  want[i].no);
}

#define LEAF(u) {.var = -1, .use = (u)}
#define SPLIT(v, t, y, n) {.var = (v), .le = (t), .yes = (y), .no = (n)}

START_TEST(tree_fit_cases) {
  rill_tree_node_t out[31];
  uint32_t n;
  const int64_t b4[] = {1, 8, 32, 128};
  /* one candidate best everywhere: one leaf */
  const double one[] = {5, 4, 9, 8, 20, 19, 80, 70};
  ck_assert(!rill_tree_fit(b4, 4, 1, one, 2, 4, out, &n));
  expect_tree(out, n, (rill_tree_node_t[]){LEAF(1)}, 1, "one best");
  /* a switch between 8 and 32 */
  const double sw[] = {1, 3, 2, 4, 30, 10, 200, 50};
  ck_assert(!rill_tree_fit(b4, 4, 1, sw, 2, 4, out, &n));
  expect_tree(out, n, (rill_tree_node_t[]){SPLIT(0, 8, 1, 2), LEAF(0), LEAF(1)}, 3, "switch");
  ck_assert_uint_eq(rill_tree_eval(out, (int64_t[]){8}), 0);
  ck_assert_uint_eq(rill_tree_eval(out, (int64_t[]){9}), 1);
  /* within 1%: no split (noise) */
  const double noise[] = {100, 100.4, 100.5, 100};
  ck_assert(!rill_tree_fit(b4, 2, 1, noise, 2, 4, out, &n));
  expect_tree(out, n, (rill_tree_node_t[]){LEAF(1)}, 1, "noise");
  /* a candidate that is not usable at a size is not taken there, though faster elsewhere */
  const double unusable[] = {1, 5, 1, 5, NAN, 5};
  ck_assert(!rill_tree_fit(b4, 3, 1, unusable, 2, 4, out, &n));
  expect_tree(out, n, (rill_tree_node_t[]){SPLIT(0, 8, 1, 2), LEAF(0), LEAF(1)}, 3, "unusable");
  /* two variables: S first (the larger saving), then T on the right */
  const int64_t st[] = {1, 1, 1, 64, 64, 1, 64, 64};
  const double two[] = {1, 100, 100, 1, 100, 100, 100, 1, 100, 100, 100, 1};
  ck_assert(!rill_tree_fit(st, 4, 2, two, 3, 4, out, &n));
  expect_tree(out, n, (rill_tree_node_t[]){SPLIT(0, 1, 1, 2), LEAF(0), SPLIT(1, 1, 3, 4), LEAF(1), LEAF(2)}, 5, "two variables");
  ck_assert_uint_eq(rill_tree_eval(out, (int64_t[]){2, 1}), 1);
  ck_assert_uint_eq(rill_tree_eval(out, (int64_t[]){2, 2}), 2);
  ck_assert_uint_eq(rill_tree_eval(out, (int64_t[]){0, 99}), 0);
  /* the depth bound: one split only */
  ck_assert(!rill_tree_fit(st, 4, 2, two, 3, 1, out, &n));
  expect_tree(out, n, (rill_tree_node_t[]){SPLIT(0, 1, 1, 2), LEAF(0), LEAF(1)}, 3, "depth 1");
  /* ties go to the lowest index: equal times everywhere */
  const double tie[] = {3, 3, 3, 3, 3, 3, 3, 3};
  ck_assert(!rill_tree_fit(b4, 4, 1, tie, 2, 4, out, &n));
  expect_tree(out, n, (rill_tree_node_t[]){LEAF(0)}, 1, "tie");
  rill_status_t bad = rill_tree_fit(b4, 4, 1, tie, 2, 9, out, &n);
  ck_assert(bad && strstr(rill_status_message(bad), "depth"));
  rill_status_free(bad);
}
END_TEST

static const char *TREE_SRC =
    "dim B in [1, 64]\n"
    "op $0 = relu(f32[B,4]) -> (f32[B,4])\n"
    "op $1 = neg(f32[B,4]) -> (f32[B,4])\n"
    "choose $0 = (le B 8 \"cudnn.engine:3\" (le B 32 \"cublaslt:21\" \"cudnn.engine:3\"))\n"
    "choose $1 = \"default\"\n"
    "func @main(%x: f32[B,4]) -> (f32[B,4]) lowered(streams=1, events=0) {\n"
    "  reg %y : f32[B,4]\n  reg %z : f32[B,4]\n  alloc_tensor %y\n  invoke $0, (%x), (%y)\n"
    "  alloc_tensor %z\n  invoke $1, (%y), (%z)\n  return (%z)\n}\n";

START_TEST(trees_round_trip) {
  uint8_t *b, *b2;
  size_t n, n2;
  rill_status_t st = asm_text(TREE_SRC, &b, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert_int_eq(b[10], 3); /* trees make a 1.3 module */
  isa_module_t *m;
  ck_assert(!isa_read(rill_allocator_system(), b, n, &m));
  ck_assert_uint_eq(m->ntrees, 2);
  ck_assert_uint_eq(m->trees[0].nnodes, 5);
  ck_assert_uint_eq(m->trees[0].ncands, 2);
  ck_assert_str_eq(isa_tree_choose(&m->trees[0], (int64_t[]){8}), "cudnn.engine:3");
  ck_assert_str_eq(isa_tree_choose(&m->trees[0], (int64_t[]){9}), "cublaslt:21");
  ck_assert_str_eq(isa_tree_choose(&m->trees[0], (int64_t[]){33}), "cudnn.engine:3");
  ck_assert_str_eq(isa_tree_choose(&m->trees[1], (int64_t[]){33}), "default");
  ck_assert(!isa_verify(m, &ops_resolver));
  /* what an instance's plans get (vm_choose, from inst_make): the tree at the bound sizes */
  ops_plan_t plans[2] = {{.def = ops_find("relu")}, {.def = ops_find("neg")}};
  vm_choose(m, (int64_t[]){20}, plans);
  ck_assert_str_eq(plans[0].choice, "cublaslt:21");
  ck_assert_str_eq(plans[1].choice, "default");
  vm_choose(m, NULL, plans); /* the lower bounds: B = 1 */
  ck_assert_str_eq(plans[0].choice, "cudnn.engine:3");
  /* disassembled and assembled again: the same bytes */
  rill_buf_t text;
  rill__buf_init(&text, rill_allocator_system());
  ck_assert(!isa_disassemble(m, &text));
  ck_assert(!rill__buf_append(&text, "", 1));
  ck_assert_ptr_nonnull(strstr((char *)text.data, "choose $0 = (le B 8 \"cudnn.engine:3\" (le B 32 \"cublaslt:21\" \"cudnn.engine:3\"))\n"));
  st = asm_text((char *)text.data, &b2, &n2);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  ck_assert(n2 == n && memcmp(b, b2, n) == 0);
  rill__buf_free(&text);
  free(b2);
  /* the verifier: a tree for no op, and one whose split names no variable */
  m->trees[1].op = 7;
  st = isa_verify(m, &ops_resolver);
  ck_assert(st && strstr(rill_status_message(st), "names op entry 7"));
  rill_status_free(st);
  m->trees[1].op = 1;
  m->trees[0].nodes[0].var = 1;
  st = isa_verify(m, &ops_resolver);
  ck_assert(st && strstr(rill_status_message(st), "unknown shape variable"));
  rill_status_free(st);
  m->trees[0].nodes[0].var = 0;
  /* Targeted damage through the writer: the reader names each. */
  struct { int node; int field; int64_t value; const char *want; } cases[] = {
      {0, 0, 5, "unknown shape variable"},       /* var */
      {0, 3, 3, "out of preorder"},               /* yes: not the next node */
      {0, 4, 1, "out of preorder"},               /* no == yes: a shared node */
      {0, 4, 9, "out of preorder"},               /* no past the end */
      {1, 1, 2, "bad leaf"},                      /* use past the candidates */
      {3, 1, 0, "a candidate no leaf names"},     /* "cublaslt:21" no longer used */
      {1, 1, 1, "order the leaves name them"},    /* the first leaf names candidate 1 */
      {1, 2, 4, "bad leaf"},                      /* a leaf with a threshold */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rill_tree_node_t *x = &m->trees[0].nodes[cases[i].node], keep = *x;
    switch (cases[i].field) {
      case 0: x->var = (int32_t)cases[i].value; break;
      case 1: x->use = (uint32_t)cases[i].value; break;
      case 2: x->le = cases[i].value; break;
      case 3: x->yes = (uint32_t)cases[i].value; break;
      case 4: x->no = (uint32_t)cases[i].value; break;
    }
    uint8_t *w;
    size_t wn;
    ck_assert(!isa_write(m, rill_allocator_system(), &w, &wn));
    isa_module_t *r = NULL;
    st = isa_read(rill_allocator_system(), w, wn, &r);
    ck_assert_msg(st && rill_status_code(st) == RILL_MALFORMED && strstr(rill_status_message(st), cases[i].want), "case %zu: %s", i,
                  st ? rill_status_message(st) : "accepted");
    ck_assert(strstr(rill_status_message(st), "trees section"));
    rill_status_free(st);
    free(w);
    *x = keep;
  }
  /* too deep: a chain of 9 splits */
  rill_tree_node_t deep[19];
  for (int i = 0; i < 9; i++) deep[i] = (rill_tree_node_t)SPLIT(0, i, (uint32_t)i + 1, (uint32_t)(18 - i));
  deep[9] = (rill_tree_node_t)LEAF(0);
  for (int i = 10; i < 19; i++) deep[i] = (rill_tree_node_t)LEAF(0);
  const char *one[] = {"a"};
  isa_tree_t t = {0, 19, 1, deep, one};
  ck_assert_str_eq(isa_tree_check(&t, 1), "deeper than 8 splits");
  t.nnodes = 17; /* 8 splits: fine */
  for (int i = 0; i < 8; i++) deep[i].no = (uint32_t)(16 - i);
  deep[8] = (rill_tree_node_t)LEAF(0);
  ck_assert_ptr_null(isa_tree_check(&t, 1));
  /* ops out of order */
  isa_tree_t swap = m->trees[0];
  m->trees[0] = m->trees[1];
  m->trees[1] = swap;
  uint8_t *w;
  size_t wn;
  ck_assert(!isa_write(m, rill_allocator_system(), &w, &wn));
  isa_module_t *r = NULL;
  st = isa_read(rill_allocator_system(), w, wn, &r);
  ck_assert(st && strstr(rill_status_message(st), "out of order"));
  rill_status_free(st);
  free(w);
  isa_module_free(m);
  /* Every truncation fails; every byte flip fails or still verifies. */
  check_damaged_module(b, n, (const uint8_t[]){0x01, 0x80, 0xff}, 3);
  free(b);
  /* A module without trees is still written as 1.2. */
  ck_assert(!asm_text("func @main(%x: f32[2]) -> f32[2] {\n  %y = relu(%x)\n  return %y\n}\n", &b, &n));
  ck_assert_int_eq(b[10], 2);
  free(b);
  /* A 1.3 module (kernel choice trees, the minor before devices) still loads. */
  ck_assert(!asm_text("dim B in [1, 64]\nop $0 = relu(f32[B,4]) -> (f32[B,4])\nchoose $0 = (le B 8 \"default\" \"default\")\n"
                      "func @main(%x: f32[B,4]) -> (f32[B,4]) lowered(streams=1, events=0) {\n  reg %y : f32[B,4]\n  alloc_tensor %y\n"
                      "  invoke $0, (%x), (%y)\n  return (%y)\n}\n", &b, &n));
  ck_assert_int_eq(b[10], 3);
  rill_module_t *m3;
  rill_status_t st3 = rill_module_load(NULL, b, n, ".", &m3);
  ck_assert_msg(!st3, "%s", rill_status_message(st3));
  rill_module_release(m3);
  free(b);
}
END_TEST

/* Text safe to print: valid UTF-8 passes, control characters (C0, DEL, C1)
 * and invalid UTF-8 (stray continuation bytes, overlong forms, surrogates,
 * truncated sequences, past U+10FFFF) become \xNN; long text is cut at a
 * character with "..."; escaping twice changes nothing more. */
START_TEST(escape_names) {
  static const struct { const char *in; size_t len; const char *out; } cases[] = {
      {"relu", 4, "relu"},
      {"Re\x1b[31mlu\x07", 10, "Re\\x1b[31mlu\\x07"},
      {"a\0b", 3, "a\\x00b"},
      {"\x7f\n\t", 3, "\\x7f\\x0a\\x09"},
      {"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"},
      {"\xc2\x9b" "2J", 4, "\\xc2\\x9b2J"},                 /* CSI, a C1 control */
      {"\xc2\xa0", 2, "\xc2\xa0"},                           /* no-break space: printable */
      {"\xff\x80x", 3, "\\xff\\x80x"},
      {"\xc0\xaf", 2, "\\xc0\\xaf"},                       /* overlong '/' */
      {"\xed\xa0\x80", 3, "\\xed\\xa0\\x80"},             /* a surrogate */
      {"\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80"},     /* past U+10FFFF */
      {"ab\xe4\xb8", 4, "ab\\xe4\\xb8"},                    /* cut short */
  };
  char buf[128], again[128];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_str_eq(rill_escape(cases[i].in, cases[i].len, buf, sizeof buf), cases[i].out);
    ck_assert_str_eq(rill_escape(buf, strlen(buf), again, sizeof again), buf);
  }
  /* cut to fit, at a character, never inside an escape */
  ck_assert_str_eq(rill_escape("abcdefgh", 8, buf, 8), "abcd...");
  ck_assert_str_eq(rill_escape("abcdefg", 7, buf, 8), "abcdefg");
  ck_assert_str_eq(rill_escape("ab\x1b\x1b", 4, buf, 9), "ab...");
  ck_assert_str_eq(rill_escape("ab\x1b\x1b", 4, buf, 10), "ab\\x1b...");
  ck_assert_str_eq(rill_escape("a\xe4\xb8\xad\xe4\xb8\xad", 7, buf, 7), "a...");
  ck_assert_str_eq(rill_escape("a\xe4\xb8\xad\xe4\xb8\xad", 7, buf, 8), "a\xe4\xb8\xad\xe4\xb8\xad");
  ck_assert_str_eq(rill_escape("abc", 3, buf, 1), "");
}
END_TEST

/* A key with control bytes (JSON's \u001b is the raw byte once parsed) is
 * escaped in the reader's message. */
START_TEST(safetensors_key_escaped) {
  isa_st_t *st = NULL;
  expect_escaped(st_parse("{\"w\\u001b[2J\\u0007\": {\"dtype\": \"F99\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, &st),
                 "unsupported dtype (tensor \"w\\x1b[2J\\x07\")");
  expect_escaped(st_parse("{\"a\\u001b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                          "\"b\\u009b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12, &st),
                 "tensors \"a\\x1b\" [0, 8) and \"b\\xc2\\x9b\" [4, 12) overlap");
}
END_TEST


/* Module m (read from bytes b, n) printed holds `want`, and assembled again gives the same bytes. */
static void dis_roundtrip(const isa_module_t *m, const char *src, const uint8_t *b, size_t n, const char *want) {
  rill_buf_t db;
  rill__buf_init(&db, rill_allocator_system());
  ck_assert(!isa_disassemble(m, &db));
  ck_assert(!rill__buf_append(&db, "", 1));
  const char *dis = (const char *)db.data;
  ck_assert_msg(strstr(dis, want), "%s", dis);
  uint8_t *b2;
  size_t n2;
  rill_status_t st = rill_assemble(NULL, src, dis, strlen(dis), NULL, &b2, &n2);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  ck_assert(n2 == n && !memcmp(b, b2, n));
  free(b2);
  rill__buf_free(&db);
}

/* Every byte of module b flipped: refused or loaded, never a crash. */
static void flip_each_byte(const uint8_t *b, size_t n, const char *dir) {
  for (size_t i = 0; i < n; i++) {
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    c[i] ^= 0x5a;
    rill_module_t *mm = NULL;
    rill_status_free(rill_module_load(NULL, c, n, dir, &mm));
    rill_module_release(mm);
    free(c);
  }
}

/* The constants' checksum from bytecode 1.12 is XXH64 (seed 0): the
 * published values of the reference library. */
START_TEST(sum64_is_xxh64) {
  ck_assert_uint_eq(rill__sum64("", 0), 0xef46db3751d8e999ull);
  ck_assert_uint_eq(rill__sum64("abc", 3), 0x44bc2cf5ad770999ull);
  const char *fox = "The quick brown fox jumps over the lazy dog";
  ck_assert_uint_eq(rill__sum64(fox, strlen(fox)), 0x0b242d361fda71bcull);
  uint8_t b[102];
  for (int i = 0; i < 102; i++) b[i] = (uint8_t)i;
  ck_assert_uint_eq(rill__sum64(b, 101), 0xe99038495f85381eull);
  ck_assert_uint_eq(rill__sum64(b + 1, 101) == rill__sum64(b, 101), 0); /* any alignment, other bytes */
}
END_TEST

/* A weights file of one f32 [384, 1024] tensor (1.5 MiB: mapped, not read)
 * holding i / 2 at element i. */
static void write_big_weights(const char *path) {
  /* the header padded with spaces to 8 bytes, as the importer writes it, so the data is aligned */
  char json[128];
  snprintf(json, sizeof json, "%-72s", "{\"k\":{\"dtype\":\"F32\",\"shape\":[384,1024],\"data_offsets\":[0,1572864]}}");
  size_t hl = strlen(json);
  ck_assert_uint_eq(hl % 8, 0);
  FILE *f = fopen(path, "wb");
  ck_assert(f);
  for (int i = 0; i < 8; i++) fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, f);
  fwrite(json, 1, hl, f);
  for (int i = 0; i < 384 * 1024; i++) {
    float v = (float)i / 2;
    fwrite(&v, 4, 1, f);
  }
  ck_assert_int_eq(fclose(f), 0);
}

static uint8_t *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  ck_assert(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*n ? *n : 1);
  ck_assert(fread(b, 1, *n, f) == *n);
  fclose(f);
  return b;
}

/* Runs @main (x + k) of mod on cpu with x = 1 and checks element i is i / 2 + 1. */
static void run_big(rill_module_t *mod) {
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, mod, "cpu", &vm));
  /* the constant is the module's bytes, not a copy, and counted as weights */
  const isa_const_t *c = &mod->m->consts[0];
  ck_assert_ptr_eq(vm->consts[0]->storage->ptr, c->data);
  ck_assert(vm->consts[0]->storage->borrowed);
  rill_memory_info_t mi;
  rill_vm_memory_info(vm, &mi);
  ck_assert_uint_ge(mi.weights, 1572864);
  rill_type_t t = {RILL_F32, 2, {384, 1024}};
  float *x = malloc(1572864), *y = malloc(1572864);
  for (int i = 0; i < 384 * 1024; i++) x[i] = 1;
  rill_tensor_t *in, **out;
  int nout;
  ck_assert(!rill_tensor_create(vm, &t, x, &in));
  rill_status_t st = rill_vm_invoke(vm, "main", &in, 1, &out, &nout);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  ck_assert(!rill_tensor_read(out[0], y, 1572864));
  for (int i = 0; i < 384 * 1024; i += 997) ck_assert_float_eq(y[i], (float)i / 2 + 1);
  rill_tensor_release(in);
  rill_results_free(vm, out, nout);
  rill_vm_destroy(vm);
  free(x);
  free(y);
}

/* A module whose constant is large: written to its file from where the
 * weights lie (the same bytes as in memory), 1.12 with an XXH64 checksum;
 * loaded mapped, the cpu VM reading the constant in place; damaged or
 * truncated files refused; an older module's FNV-1a checksums still read;
 * a linked weights file mapped, and its truncation seen. */
START_TEST(big_constants_in_place) {
  char dir[] = "/tmp/rill_big_XXXXXX", wpath[128], src[128], mpath[128], bad[128];
  ck_assert(mkdtemp(dir));
  snprintf(wpath, sizeof wpath, "%s/w.safetensors", dir);
  snprintf(src, sizeof src, "%s/m.vmasm", dir);
  snprintf(mpath, sizeof mpath, "%s/m.vmbc", dir);
  snprintf(bad, sizeof bad, "%s/bad.vmbc", dir);
  write_big_weights(wpath);
  const char *text = "weights \"w.safetensors\" as w\nconst %k : f32[384,1024] = w[\"k\"]\n"
                     "func @main(%x: f32[384,1024]) -> f32[384,1024] {\n  %y = add(%x, %k)\n  return %y\n}\n";
  uint8_t *b, *fb;
  size_t n, fn, wn;
  ck_assert(!rill_assemble(NULL, src, text, strlen(text), NULL, &b, &n));
  rill_asm_options_t o = {.output_file = mpath};
  ck_assert(!rill_assemble(NULL, src, text, strlen(text), &o, &fb, &wn));
  ck_assert_ptr_null(fb);
  fb = slurp(mpath, &fn);
  ck_assert_uint_eq(fn, n);
  ck_assert_uint_eq(wn, n);
  ck_assert(!memcmp(fb, b, n));
  ck_assert_int_eq(b[10], 12);
  isa_module_t *im;
  ck_assert(!isa_read(rill_allocator_system(), b, n, &im));
  ck_assert(im->consts[0].sum64);
  ck_assert_uint_eq(im->consts[0].checksum, rill__sum64(im->consts[0].data, im->consts[0].size));
  /* the same module with FNV-1a, as an older assembler wrote it: 1.10 or below, still read */
  im->consts[0].sum64 = false;
  im->consts[0].checksum = rill__fnv1a(im->consts[0].data, im->consts[0].size, RILL_FNV_INIT);
  uint8_t *ob;
  size_t on;
  ck_assert(!isa_write(im, rill_allocator_system(), &ob, &on));
  ck_assert_int_lt(ob[10], 12);
  rill_module_t *om;
  ck_assert(!rill_module_load(NULL, ob, on, dir, &om));
  ck_assert(!om->m->consts[0].sum64);
  run_big(om);
  rill_module_release(om);
  free(ob);
  isa_module_free(im);
  /* a byte of the constant flipped (read in place: its data's offset in the file) is a checksum mismatch */
  ck_assert(!isa_read_in_place(rill_allocator_system(), b, n, &im));
  size_t at = (size_t)(im->consts[0].data - b) + 1000;
  ck_assert_uint_lt(at, n);
  isa_module_free(im);
  fb[at] ^= 0x40;
  FILE *f = fopen(bad, "wb");
  fwrite(fb, 1, n, f);
  fclose(f);
  rill_module_t *m = NULL;
  rill_status_t st = rill_module_load_file(NULL, bad, &m);
  ck_assert_msg(st && strstr(rill_status_message(st), "checksum mismatch"), "%s", st ? rill_status_message(st) : "loaded");
  rill_status_free(st);
  fb[at] ^= 0x40;
  /* labelled 1.11, the XXH64 flag is refused */
  fb[10] = 11;
  f = fopen(bad, "wb");
  fwrite(fb, 1, n, f);
  fclose(f);
  st = rill_module_load_file(NULL, bad, &m);
  ck_assert_msg(st && rill_status_code(st) == RILL_MALFORMED, "%s", st ? rill_status_message(st) : "loaded");
  rill_status_free(st);
  /* truncated files: a clear error, never a crash */
  for (size_t len = 0; len < n; len += n / 7 + 1) {
    f = fopen(bad, "wb");
    fwrite(fb, 1, len, f);
    fclose(f);
    st = rill_module_load_file(NULL, bad, &m);
    ck_assert_msg(st && rill_status_code(st) == RILL_MALFORMED, "truncated to %zu: %s", len, st ? rill_status_message(st) : "loaded");
    rill_status_free(st);
  }
  /* loaded from its file: mapped, the constant where it lies */
  ck_assert(!rill_module_load_file(NULL, mpath, &m));
  ck_assert_ptr_nonnull(m->file.map);
  ck_assert((const uint8_t *)m->m->consts[0].data >= m->file.data && (const uint8_t *)m->m->consts[0].data < m->file.data + m->file.size);
  run_big(m);
  rill_module_release(m);
  /* linked: the weights file mapped, the constant in it */
  rill_asm_options_t lo = {.link_weights = true};
  free(b);
  ck_assert(!rill_assemble(NULL, src, text, strlen(text), &lo, &b, &n));
  ck_assert(!rill_module_load(NULL, b, n, dir, &m));
  ck_assert_ptr_nonnull(m->wfiles[0].map);
  ck_assert(m->m->consts[0].data >= m->wfiles[0].data && m->m->consts[0].data < m->wfiles[0].data + m->wfiles[0].size);
  run_big(m);
  ck_assert_ptr_null(rill__file_check(&m->wfiles[0], wpath));
  /* truncated by someone else while mapped: seen by the size check (its
   * pages are not touched again: that would be SIGBUS) */
  ck_assert_int_eq(truncate(wpath, 100), 0);
  st = rill__file_check(&m->wfiles[0], wpath);
  ck_assert_msg(st && strstr(rill_status_message(st), "shrank"), "%s", st ? rill_status_message(st) : "no error");
  rill_status_free(st);
  rill_module_release(m);
  /* and a weights file truncated before the load is an error, not a crash */
  st = rill_module_load(NULL, b, n, dir, &m);
  ck_assert_msg(st && strstr(rill_status_message(st), "too short"), "%s", st ? rill_status_message(st) : "loaded");
  rill_status_free(st);
  free(b);
  free(fb);
  unlink(wpath);
  unlink(mpath);
  unlink(bad);
  rmdir(dir);
}
END_TEST

/* A safetensors file given as pieces in memory (what rill asm MODEL.onnx
 * hands the assembler): each tensor read where its piece lies; a tensor
 * across two pieces, or a first piece without the whole header, refused;
 * a program assembled from them the same bytes as from the file, and such
 * weights refused as linked. */
START_TEST(weights_in_pieces) {
  char json[128];
  snprintf(json, sizeof json, "%-112s", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                         "\"b\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[8,20]}}");
  size_t hl = strlen(json);
  uint8_t head[8 + 128];
  for (int i = 0; i < 8; i++) head[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(head + 8, json, hl);
  float a[2] = {1, 2}, b[3] = {3, 4, 5};
  const void *ptr[3] = {head, a, b};
  size_t len[3] = {8 + hl, 8, 12};
  isa_st_t *st;
  ck_assert(!isa_st_parse_pieces(rill_allocator_system(), ptr, len, 3, &st));
  ck_assert_ptr_eq(isa_st_find(st, "a")->data, (const uint8_t *)a);
  ck_assert_ptr_eq(isa_st_find(st, "b")->data, (const uint8_t *)b);
  isa_st_free(st);
  /* b's 12 bytes as 4 + 8: across two pieces */
  uint8_t both[20];
  memcpy(both, a, 8);
  memcpy(both + 8, b, 12);
  const void *ptr2[3] = {head, both, both + 12};
  size_t len2[3] = {8 + hl, 12, 8};
  rill_status_t e = isa_st_parse_pieces(rill_allocator_system(), ptr2, len2, 3, &st);
  ck_assert_msg(e && strstr(rill_status_message(e), "span two pieces"), "%s", e ? rill_status_message(e) : "accepted");
  rill_status_free(e);
  size_t len3[3] = {8 + hl - 1, 9, 12};
  const void *ptr3[3] = {head, a, b};
  e = isa_st_parse_pieces(rill_allocator_system(), ptr3, len3, 3, &st);
  ck_assert_msg(e && strstr(rill_status_message(e), "header"), "%s", e ? rill_status_message(e) : "accepted");
  rill_status_free(e);
  /* assembled from the pieces: the bytes of the file's */
  char dir[] = "/tmp/rill_pieces_XXXXXX", path[128], src[128];
  ck_assert(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  snprintf(src, sizeof src, "%s/m.vmasm", dir);
  FILE *f = fopen(path, "wb");
  for (int i = 0; i < 3; i++) fwrite(ptr[i], 1, len[i], f);
  fclose(f);
  const char *text = "weights \"w.safetensors\" as w\nconst %a : f32[2] = w[\"a\"]\nconst %b : f32[3] = w[\"b\"]\n"
                     "func @main(%x: f32[2], %y: f32[3]) -> (f32[2], f32[3]) {\n  %p = add(%x, %a)\n  %q = add(%y, %b)\n  return %p, %q\n}\n";
  uint8_t *fb, *mb;
  size_t fn, mn;
  ck_assert(!rill_assemble(NULL, src, text, strlen(text), NULL, &fb, &fn));
  unlink(path); /* not read: the pieces are */
  rill_asm_options_t o = {.weights_path = "w.safetensors", .weights_pieces = ptr, .weights_lens = len, .weights_npieces = 3};
  rill_status_t st2 = rill_assemble(NULL, src, text, strlen(text), &o, &mb, &mn);
  ck_assert_msg(!st2, "%s", st2 ? rill_status_message(st2) : "");
  ck_assert(fn == mn && !memcmp(fb, mb, fn));
  free(mb);
  o.link_weights = true;
  st2 = rill_assemble(NULL, src, text, strlen(text), &o, &mb, &mn);
  ck_assert_msg(st2 && strstr(rill_status_message(st2), "cannot be linked"), "%s", st2 ? rill_status_message(st2) : "assembled");
  rill_status_free(st2);
  free(fb);
  rmdir(dir);
}
END_TEST

/* Shard constants (bytecode 1.9): a weight's part per rank, along rows or
 * columns, its parts' checksums; the module read back as written, and
 * damaged copies refused or loaded, never a crash. */
START_TEST(shard_constants) {
  char dir[] = "/tmp/rill_shard_XXXXXX", path[128], src[1024];
  ck_assert(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  const char *json = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,6],\"data_offsets\":[0,96]}}";
  size_t hl = strlen(json);
  FILE *f = fopen(path, "wb");
  ck_assert(f);
  for (int i = 0; i < 8; i++) fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, f);
  fwrite(json, 1, hl, f);
  float whole[24];
  for (int i = 0; i < 24; i++) whole[i] = (float)i;
  fwrite(whole, 4, 24, f);
  fclose(f);
  snprintf(src, sizeof src, "%s/m.vmasm", dir);
  const char *head = "weights \"w.safetensors\" as w\n"
                     "const %rows : f32[2,6] = w[\"w\"] {shard=0, ranks=2}\n"
                     "const %cols : f32[4,2] = w[\"w\"]",
             *tail = " {shard=1, ranks=3}\n"
                     "func @a(%x: f32[2,6]) -> f32[2,6] {\n  %y = add(%x, %rows)\n  return %y\n}\n"
                     "func @b(%x: f32[4,2]) -> f32[4,2] {\n  %y = add(%x, %cols)\n  return %y\n}\n"
                     "const %grp : f32[4,3] = w[\"w\"] {shard=1, ranks=2, groups=3}\n"
                     "func @c(%x: f32[4,3]) -> f32[4,3] {\n  %y = add(%x, %grp)\n  return %y\n}\n";
  for (int linked = 0; linked < 2; linked++) {
    char body[1024];
    snprintf(body, sizeof body, "%s%s%s", head, linked ? " linked" : "", tail);
    uint8_t *b;
    size_t n;
    rill_status_t st = rill_assemble(NULL, src, body, strlen(body), NULL, &b, &n);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    ck_assert_uint_eq(b[10], 9);
    isa_module_t *m;
    ck_assert(!isa_read(rill_allocator_system(), b, n, &m));
    ck_assert_uint_eq(m->nconsts, 3);
    /* groups: part p is column 2g + p of each row, for the groups g = 0, 1, 2 */
    const isa_const_t *gc = &m->consts[2];
    ck_assert_uint_eq(gc->shard_groups, 3);
    for (uint32_t p = 0; p < 2; p++) {
      float part[12], want[12];
      isa_shard_copy(gc, (const uint8_t *)whole, p, (uint8_t *)part);
      for (int i = 0; i < 12; i++) want[i] = (float)((i / 3) * 6 + (i % 3) * 2 + (int)p);
      ck_assert(!memcmp(part, want, 48));
      ck_assert(gc->part_sums[p] == rill__fnv1a(want, 48, RILL_FNV_INIT));
    }
    for (uint32_t k = 0; k < 2; k++) {
      const isa_const_t *c = &m->consts[k];
      ck_assert_uint_eq(c->shard_axis, k);
      ck_assert_uint_eq(c->shard_parts, k ? 3 : 2);
      ck_assert_uint_eq(c->size, 96);
      bool lk = linked && k == 1; /* (only %cols is written linked) */
      ck_assert_msg(c->linked == lk && (c->data != NULL) == !lk, "linked %d: const %u linked %d data %p", linked, k, c->linked, (const void *)c->data);
      for (uint32_t p = 0; p < c->shard_parts; p++) {
        float part[12], want[12];
        isa_shard_copy(c, (const uint8_t *)whole, p, (uint8_t *)part);
        /* rows: part p is rows 2p, 2p+1; columns: part p is columns 2p, 2p+1 of each row */
        for (int i = 0; i < (k ? 8 : 12); i++) want[i] = k ? (float)((i / 2) * 6 + 2 * (int)p + i % 2) : (float)(12 * (int)p + i);
        ck_assert(!memcmp(part, want, k ? 32 : 48));
        ck_assert(c->part_sums[p] == rill__fnv1a(want, k ? 32 : 48, RILL_FNV_INIT));
      }
    }
    /* printed and assembled again: the same bytes */
    dis_roundtrip(m, src, b, n, linked ? "= w[\"w\"] linked {shard=1, ranks=3}" : "= w[\"w\"] {shard=1, ranks=3}");
    isa_module_free(m);
    /* truncations refused; byte flips refused or loaded */
    for (size_t len = 0; len < n; len += 3) {
      rill_module_t *mm = NULL;
      st = rill_module_load(NULL, b, len, dir, &mm);
      ck_assert_msg(st != NULL, "truncation to %zu bytes was accepted", len);
      rill_status_free(st);
    }
    flip_each_byte(b, n, dir);
    /* a reader of 1.8 refuses the flag */
    b[10] = 8;
    rill_module_t *mm = NULL;
    st = rill_module_load(NULL, b, n, dir, &mm);
    ck_assert(st && strstr(rill_status_message(st), "bad origin"));
    rill_status_free(st);
    free(b);
  }
  unlink(path);
  rmdir(dir);
}
END_TEST

/* Stage constants (bytecode 1.10, --pipeline-parallel): a whole weight that
 * one rank uploads; read back as written (embedded and linked), printed and
 * assembled again to the same bytes; damaged copies refused or loaded,
 * never a crash; a reader of 1.9 refuses the flag. */
START_TEST(stage_constants) {
  char dir[] = "/tmp/rill_stage_XXXXXX", path[128], src[1024];
  ck_assert(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/w.safetensors", dir);
  const char *json = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
  size_t hl = strlen(json);
  FILE *f = fopen(path, "wb");
  ck_assert(f);
  for (int i = 0; i < 8; i++) fputc((int)((uint64_t)hl >> (8 * i)) & 0xff, f);
  fwrite(json, 1, hl, f);
  float whole[6] = {1, 2, 3, 4, 5, 6};
  fwrite(whole, 4, 6, f);
  fclose(f);
  snprintf(src, sizeof src, "%s/m.vmasm", dir);
  for (int linked = 0; linked < 2; linked++) {
    char body[1024];
    snprintf(body, sizeof body, "weights \"w.safetensors\" as w\nconst %%a : f32[2,3] = w[\"w\"]%s {stage=1, ranks=3}\n"
             "func @main(%%x: f32[2,3]) -> f32[2,3] {\n  %%y = add(%%x, %%a)\n  return %%y\n}\n", linked ? " linked" : "");
    uint8_t *b;
    size_t n;
    rill_status_t st = rill_assemble(NULL, src, body, strlen(body), NULL, &b, &n);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    ck_assert_uint_eq(b[10], 10);
    isa_module_t *m;
    ck_assert(!isa_read(rill_allocator_system(), b, n, &m));
    ck_assert_uint_eq(m->nconsts, 1);
    ck_assert_uint_eq(m->consts[0].stage, 1);
    ck_assert_uint_eq(m->consts[0].stage_ranks, 3);
    ck_assert_uint_eq(m->consts[0].shard_parts, 0);
    ck_assert(linked || !memcmp(m->consts[0].data, whole, 24));
    dis_roundtrip(m, src, b, n, linked ? "= w[\"w\"] linked {stage=1, ranks=3}" : "= w[\"w\"] {stage=1, ranks=3}");
    isa_module_free(m);
    /* a VM of no job makes itself without it (it waits for a rank to upload it) */
    rill_module_t *mm = NULL;
    ck_assert(!rill_module_load(NULL, b, n, dir, &mm));
    rill_vm_t *vm = NULL;
    ck_assert(!rill_vm_create(NULL, mm, "cpu", &vm));
    rill_vm_destroy(vm);
    rill_module_release(mm);
    flip_each_byte(b, n, dir);
    mm = NULL;
    b[10] = 9;
    st = rill_module_load(NULL, b, n, dir, &mm);
    ck_assert(st && strstr(rill_status_message(st), "bad origin"));
    rill_status_free(st);
    free(b);
  }
  /* {stage=K, ranks=N} out of range, or with a shard, at its position */
  const char *bad[] = {"{stage=3, ranks=3}", "{stage=0, ranks=1}", "{stage=0, shard=0, ranks=2}"};
  for (int i = 0; i < 3; i++) {
    char body[512];
    snprintf(body, sizeof body, "weights \"w.safetensors\" as w\nconst %%a : f32[2,3] = w[\"w\"] %s\n", bad[i]);
    uint8_t *b = NULL;
    size_t n;
    rill_status_t st = rill_assemble(NULL, src, body, strlen(body), NULL, &b, &n);
    ck_assert_msg(st && strstr(rill_status_message(st), ":2:30: error:"), "%s: %s", bad[i], st ? rill_status_message(st) : "accepted");
    rill_status_free(st);
    free(b);
  }
  unlink(path);
  rmdir(dir);
}
END_TEST

Suite *isa_suite(void);
/* A module with the dtypes of bytecode 1.8 (i16 u16 u32 u64) is written as
 * 1.8, one without them as before; it disassembles and reassembles to the
 * same bytes (u64 literals up to 2^64 - 1, in constants and in a fused
 * expression at -O1), and labelled 1.7 it is refused at its types. On the
 * cpu device: wraparound, unsigned order, casts and a u64 constant. */
static const char *NEW_DT_SRC =
    "const %k : u64[2] = [18446744073709551615, 9223372036854775808]\n"
    "func @main(%x: u64[2], %h: i16[2]) -> (u64[2], bool[2], f64[2], u16[2], u32[2], i16[2]) {\n"
    "  %a = add(%x, %k)\n"
    "  %b = mul(%a, 3)\n"
    "  %g = gt(%x, 9223372036854775807)\n"
    "  %f = cast(%x) {dtype=f64}\n"
    "  %u = cast(%h) {dtype=u16}\n"
    "  %w = cast(%x) {dtype=u32}\n"
    "  %n = neg(%h)\n"
    "  return %b, %g, %f, %u, %w, %n\n}\n";

START_TEST(new_dtypes_module) {
  for (int opt = 0; opt < 2; opt++) {
    uint8_t *b, *b2;
    size_t n, n2;
    rill_asm_options_t o = {.no_opt = !opt};
    rill_status_t st = rill_assemble(NULL, "new.vmasm", NEW_DT_SRC, strlen(NEW_DT_SRC), &o, &b, &n);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    ck_assert_int_eq(b[10], 8); /* minor version 8 */
    rill_module_t *m;
    ck_assert(!rill_module_load(NULL, b, n, ".", &m));
    char *txt;
    size_t tl;
    ck_assert(!rill_module_disassemble(m, &txt, &tl));
    ck_assert_ptr_nonnull(strstr(txt, "18446744073709551615"));
    st = rill_assemble(NULL, "new.vmasm", txt, tl, NULL, &b2, &n2);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    ck_assert(n == n2 && !memcmp(b, b2, n));
    free(b2);
    free(txt);
    /* on the cpu device */
    rill_vm_t *vm;
    ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
    uint64_t x[2] = {5, UINT64_MAX - 1};
    int16_t h[2] = {-2, 32767};
    rill_type_t tx = {RILL_U64, 1, {2}}, th = {RILL_I16, 1, {2}};
    rill_tensor_t *in[2], **r;
    int nr;
    ck_assert(!rill_tensor_create(vm, &tx, x, &in[0]));
    ck_assert(!rill_tensor_create(vm, &th, h, &in[1]));
    st = rill_vm_invoke(vm, "main", in, 2, &r, &nr);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    uint64_t rb[2], rw32[2];
    uint8_t rg[2];
    double rf[2];
    uint16_t ru[2];
    int16_t rn[2];
    ck_assert(!rill_tensor_read(r[0], rb, sizeof rb) && !rill_tensor_read(r[1], rg, 2) && !rill_tensor_read(r[2], rf, sizeof rf));
    ck_assert(!rill_tensor_read(r[3], ru, sizeof ru) && !rill_tensor_read(r[5], rn, sizeof rn));
    uint32_t w32[2];
    ck_assert(!rill_tensor_read(r[4], w32, sizeof w32));
    rw32[0] = w32[0], rw32[1] = w32[1];
    ck_assert_uint_eq(rb[0], 12);                              /* (5 + 2^64 - 1) * 3 wraps */
    ck_assert_uint_eq(rb[1], (UINT64_MAX - 1 + (1ull << 63)) * 3); /* the same, unsigned */
    ck_assert(rg[0] == 0 && rg[1] == 1);                       /* 2^64 - 2 > 2^63 - 1 */
    ck_assert(rf[0] == 5.0 && rf[1] == 18446744073709551614.0);
    ck_assert(ru[0] == 65534 && ru[1] == 32767);
    ck_assert(rw32[0] == 5 && rw32[1] == 4294967294u);
    ck_assert(rn[0] == 2 && rn[1] == -32767);
    rill_results_free(vm, r, nr);
    rill_tensor_release(in[0]);
    rill_tensor_release(in[1]);
    rill_vm_destroy(vm);
    rill_module_release(m);
    /* damaged every way: refused or loaded, never a crash */
    if (!opt) check_damaged_module(b, n, (const uint8_t[]){0x01, 0x80, 0xff}, 3);
    /* labelled 1.7, its types are refused */
    b[10] = 7;
    st = rill_module_load(NULL, b, n, ".", &m);
    ck_assert_msg(st && strstr(rill_status_message(st), "bytecode 1.8"), "%s", st ? rill_status_message(st) : "loaded");
    rill_status_free(st);
    free(b);
  }
  /* without them: as before */
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text("func @main(%x: i64[2]) -> i64[2] {\n  %y = add(%x, 1)\n  return %y\n}\n", &b, &n));
  ck_assert_int_lt(b[10], 8);
  free(b);
  /* literals out of range: above 2^64 - 1, a u64 literal for i64, a big attribute */
  expect_asm_error("func @main(%x: u64[2]) -> u64[2] {\n  %y = add(%x, 18446744073709551616)\n  return %y\n}\n", 2, "out of the 64-bit range");
  expect_asm_error("func @main(%x: i64[2]) -> i64[2] {\n  %y = add(%x, 9223372036854775808)\n  return %y\n}\n", 2, "out of range for i64");
  expect_asm_error("func @main(%x: u16[2]) -> u16[2] {\n  %y = add(%x, 65536)\n  return %y\n}\n", 2, "out of range for u16");
  expect_asm_error("func @main(%x: u64[2]) -> u64[2] {\n  %y = add(%x, -1)\n  return %y\n}\n", 2, "out of range for u64");
  expect_asm_error("func @main(%x: f32[4]) -> f32[2] {\n  %y = slice(%x) {starts=[0], ends=[18446744073709551615]}\n  return %y\n}\n", 2,
                   "out of the attribute's range");
}
END_TEST

Suite *isa_suite(void) {
  Suite *s = suite_create("isa");
  TCase *t = tcase_create("isa");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, half_precision);
  tcase_add_test(t, module_precision);
  tcase_add_test(t, module_reader_shape_variables);
  tcase_add_test(t, reader_rejects_damage);
  tcase_add_test(t, verifier_rejects);
  tcase_add_test(t, safetensors_ranges);
  tcase_add_test(t, escape_names);
  tcase_add_test(t, safetensors_key_escaped);
  tcase_add_test(t, tree_fit_cases);
  tcase_add_test(t, trees_round_trip);
  tcase_add_test(t, new_dtypes_module);
  tcase_add_test(t, shard_constants);
  tcase_add_test(t, stage_constants);
  tcase_add_test(t, sum64_is_xxh64);
  tcase_add_test(t, big_constants_in_place);
  tcase_add_test(t, weights_in_pieces);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return run_suite(isa_suite()); }
