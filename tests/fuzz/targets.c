/* targets.c: fuzz target bodies (see targets.h). */
#include "targets.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "isa/safetensors.h"
#include "kernels/pcache.h"
#include "vm/vm.h"
#include "onnx.h"
#include "rill.h"

/* Graph buckets' check over every function and shape variable of a loaded
 * (verified) module: an answer, and a reason with every refusal. */
static void check_rows(const rill_module_t *m) {
  const isa_module_t *im = m->m;
  for (uint32_t f = 0; f < im->nfuncs; f++)
    for (uint32_t v = 0; v < im->syms.vars.len; v++) {
      char why[160] = "";
      int r = vm_rows_check(im, f, v, why, sizeof why);
      if (r != ROWS_OK && r != ROWS_UNUSED && !(r == ROWS_NOT && why[0])) abort();
    }
}

/* Assembles src with opt; what assembles must load, and its disassembly
 * assemble back to the same bytes. Whether it assembled. */
static bool asm_roundtrip(const char *src, size_t size, const rill_asm_options_t *opt) {
  uint8_t *bytes = NULL, *again = NULL;
  size_t n = 0, n2 = 0;
  rill_status_t st = rill_assemble(NULL, "fuzz.vmasm", src, size, opt, &bytes, &n);
  if (st) {
    rill_status_free(st);
    return false;
  }
  rill_module_t *m = NULL;
  char *text = NULL;
  size_t len = 0;
  if ((st = rill_module_load(NULL, bytes, n, ".", &m))) abort();
  check_rows(m);
  if ((st = rill_module_disassemble(m, &text, &len))) abort();
  if ((st = rill_assemble(NULL, "fuzz.vmasm", text, len, NULL, &again, &n2))) abort();
  if (n2 != n || memcmp(again, bytes, n) != 0) abort();
  free(again);
  free(text);
  rill_module_release(m);
  free(bytes);
  return true;
}

/* Assembles; what assembles must load, verify and disassemble, and the
 * disassembly must assemble back to the same bytes. */
void fuzz_asm(const uint8_t *data, size_t size) {
  if (!asm_roundtrip((const char *)data, size, NULL)) return;
  /* In another precision mode (f16 and bf16 rewrite f32 values), what
   * assembles loads and round trips too. */
  rill_asm_options_t prec = {.precision = (rill_precision_t)(1 + size % (RILL_PRECISION_COUNT - 1))};
  asm_roundtrip((const char *)data, size, &prec);
  uint8_t *bytes = NULL;
  size_t n = 0;
  rill_status_t st;
  rill_module_t *m = NULL;
  /* A program that assembles on one stream assembles under every schedule
   * (the assembler verifies what it writes), and loads. */
  static const char *policies[] = {"wavefront", "asap", "rank", "ios"};
  rill_asm_options_t opt = {.schedule = policies[size % 4], .max_streams = 2 + (int)(size % 5)};
  if ((st = rill_assemble(NULL, "fuzz.vmasm", (const char *)data, size, &opt, &bytes, &n))) abort();
  if ((st = rill_module_load(NULL, bytes, n, ".", &m))) abort();
  rill_module_release(m);
  free(bytes);
}

void fuzz_profile(const uint8_t *data, size_t size) {
  /* the assembler reads a profile from a file */
  char path[64];
  snprintf(path, sizeof path, "/tmp/rill-fuzz-profile-%ld.json", (long)getpid());
  FILE *f = fopen(path, "wb");
  if (!f) return;
  bool ok = fwrite(data, 1, size, f) == size;
  if (fclose(f) != 0 || !ok) {
    remove(path);
    return;
  }
  static const char dyn[] = "dim B in [1, 64]\nfunc @main(%x: f32[B,4], %w: f32[4,4]) -> f32[B,4] {\n  %y = matmul(%x, %w)\n"
                            "  %z = tanh(%y)\n  return %z\n}\n";
  static const char fixed[] = "func @main(%x: f32[8,8]) -> f32[8,8] {\n  %a = relu(%x)\n  %b = tanh(%x)\n  %c = sigmoid(%x)\n"
                              "  %d = add(%a, %b)\n  %e = mul(%d, %c)\n  return %e\n}\n";
  rill_asm_options_t best = {.profile = path}, ios = {.schedule = "ios", .profile = path, .max_streams = 3};
  asm_roundtrip(dyn, sizeof dyn - 1, &best);
  asm_roundtrip(fixed, sizeof fixed - 1, &best);
  asm_roundtrip(fixed, sizeof fixed - 1, &ios);
  remove(path);
}

void fuzz_module(const uint8_t *data, size_t size) {
  rill_module_t *m = NULL;
  rill_status_t st = rill_module_load(NULL, data, size, ".", &m);
  if (st) {
    rill_status_free(st);
    return;
  }
  char *text = NULL;
  size_t len = 0;
  check_rows(m);
  if ((st = rill_module_disassemble(m, &text, &len))) abort();
  free(text);
  rill_module_release(m);
}

/* Parses b (a cache labelled "fuzz"); what parses must serialise to bytes
 * that parse to a cache serialising to the same bytes. */
static void pcache_once(const uint8_t *b, size_t n) {
  const rill_allocator_t *a = rill_allocator_system();
  pcache_t *c = NULL, *d = NULL;
  if (pcache_open(a, NULL, "fuzz", &c)) abort();
  rill_status_t st = pcache_parse(c, b, n);
  if (st) {
    if (rill_status_code(st) != RILL_MALFORMED || pcache_count(c)) abort();
    rill_status_free(st);
    pcache_close(c);
    return;
  }
  uint8_t *s1, *s2;
  size_t n1, n2;
  if (pcache_serialize(c, &s1, &n1) || pcache_open(a, NULL, "fuzz", &d) || pcache_parse(d, s1, n1) || pcache_serialize(d, &s2, &n2)) abort();
  if (n1 != n2 || memcmp(s1, s2, n1) || pcache_count(c) != pcache_count(d)) abort();
  free(s1);
  free(s2);
  pcache_close(d);
  pcache_close(c);
}

void fuzz_pcache(const uint8_t *data, size_t size) {
  pcache_once(data, size);
  if (size < 8) return;
  uint8_t *b = malloc(size);
  if (!b) return;
  memcpy(b, data, size);
  uint64_t h = rill__fnv1a(b, size - 8, RILL_FNV_INIT);
  for (int i = 0; i < 8; i++) b[size - 8 + i] = (uint8_t)(h >> (8 * i));
  pcache_once(b, size);
  free(b);
}

void fuzz_safetensors(const uint8_t *data, size_t size) {
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) return;
  if (size) memcpy(copy, data, size);
  isa_st_t *st = NULL;
  rill_status_t s = isa_st_parse(rill_allocator_system(), copy, size, &st);
  if (s) {
    rill_status_free(s);
    return;
  }
  for (size_t i = 0; i < st->count; i++) {
    /* Every tensor's bytes must lie inside the file. */
    const isa_st_tensor_t *t = &st->tensors[i];
    if (t->offset > st->size || t->size > st->size - t->offset) abort();
    volatile uint8_t sum = 0;
    for (size_t k = 0; k < t->size; k += 64) sum ^= st->bytes[t->offset + k];
    (void)sum;
  }
  isa_st_free(st);
}

void fuzz_npy(const uint8_t *data, size_t size) {
  rill_type_t t;
  void *d = NULL;
  size_t n = 0;
  rill_status_t st = rill_npy_parse(NULL, data, size, &t, &d, &n);
  if (st) {
    rill_status_free(st);
    return;
  }
  if (n != rill_type_numel(&t) * rill_dtype_size(t.dtype)) abort();
  free(d);
}

void fuzz_onnx(const uint8_t *data, size_t size) {
  onnx_result_t r;
  rill_status_t st = onnx_import_bytes(data, size, NULL, NULL, &r);
  if (st) {
    rill_status_free(st);
    return;
  }
  /* a program and a weights file that parses, every tensor inside it */
  if (!r.vmasm || strlen(r.vmasm) != r.vmasm_len) abort();
  isa_st_t *w = NULL;
  rill_status_t s = isa_st_parse(rill_allocator_system(), r.weights, r.weights_len, &w);
  r.weights = NULL; /* the parser owns them now */
  if (s) abort();
  isa_st_free(w);
  onnx_result_free(&r);
}
