/* test_isa.c: the bottom layer: half-precision conversions, the module
 * reader against damaged input, and the verifier's rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "isa/safetensors.h"

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
}
END_TEST

Suite *isa_suite(void);
Suite *isa_suite(void) {
  Suite *s = suite_create("isa");
  TCase *t = tcase_create("isa");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, half_precision);
  tcase_add_test(t, module_reader_shape_variables);
  tcase_add_test(t, reader_rejects_damage);
  tcase_add_test(t, verifier_rejects);
  tcase_add_test(t, safetensors_ranges);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return run_suite(isa_suite()); }
