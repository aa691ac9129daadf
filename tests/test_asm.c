/* test_asm.c: the assembler, the module format, the verifier and the
 * disassembler. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "isa/isa.h"

START_TEST(diagnostics) {
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = relu(%z)\n  return %y\n}\n", 2, "unknown value %z");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = relu(%z)\n  %z = relu(%x)\n  return %y\n}\n", 2, "before its definition on line 3");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = relu(%x)\n  %y = relu(%x)\n  return %y\n}\n", 3, "defined twice");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = frobnicate(%x)\n  return %y\n}\n", 2, "unknown op 'frobnicate'");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = softmax(%x) {dim=0}\n  return %y\n}\n", 2, "unknown attribute 'dim'");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = relu(%x)\n}\n", 3, "ends without return");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  return %x\n  %y = relu(%x)\n}\n", 3, "statement after return");
  expect_asm_error("func @main(%x: f32[2]) -> f32[3] {\n  return %x\n}\n", 2, "expected f32[3], found f32[2]");
  expect_asm_error("func @main(%x: i64[2]) -> i64[2] {\n  %y = mul(%x, 0.5)\n  return %y\n}\n", 2, "not an integer");
  expect_asm_error("func @main(%x: u8[2]) -> u8[2] {\n  %y = add(%x, 300)\n  return %y\n}\n", 2, "out of range for u8");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = matmul(%x, 2.0)\n  return %y\n}\n", 2, "must be a %value");
  expect_asm_error("func @f(%a: f32[2]) -> f32[2] {\n  return %a\n}\nfunc @main(%x: f32[3]) -> f32[2] {\n  %y = call @f(%x)\n  return %y\n}\n", 5, "expected f32[2], found f32[3]");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = call @nope(%x)\n  return %y\n}\n", 2, "unknown function @nope");
  expect_asm_error("func @t(%a: f32[2]) -> f32[2] {\n  return %a\n}\nfunc @main(%c: f32[], %x: f32[2]) -> f32[2] {\n  %y = if(%c, @t, @t, %x)\n  return %y\n}\n", 5, "must be bool[]");
  expect_asm_error("func @c(%a: f32[2]) -> f32[2] {\n  return %a\n}\nfunc @main(%x: f32[2]) -> f32[2] {\n  %y = while(@c, @c, %x)\n  return %y\n}\n", 5, "must return one bool[]");
  expect_asm_error("const %k : f32[3] = [1, 2]\nfunc @main(%x: f32[3]) -> f32[3] {\n  return %x\n}\n", 1, "2 values for a constant of 3 elements");
  expect_asm_error("const %k : i8[1] = [1.5]\nfunc @main(%x: f32[3]) -> f32[3] {\n  return %x\n}\n", 1, "expected an integer");
  expect_asm_error("const %k : f32[2,2] = [[1, 2], [3]]\nfunc @main(%x: f32[3]) -> f32[3] {\n  return %x\n}\n", 1, "has 1 items");
  expect_asm_error("const %k : f32[B] = fill(1)\n", 1, "symbolic dimension 'B'");
  /* shape variables: sizes that cannot be shown equal, at the op, naming both; ranges; names in attributes */
  expect_asm_error("func @main(%x: f32[S], %y: f32[T]) -> f32[S] {\n  %a = add(%x, %y)\n  return %a\n}\n", 2, "sizes S and T (dimension -1) cannot be shown equal");
  expect_asm_error("func @main(%x: f32[B,S]) -> f32[B] {\n  %a = reshape(%x) {shape=[B, 3]}\n  return %a\n}\n", 2, "B*S elements) into B*3 elements");
  expect_asm_error("func @main(%x: f32[B,S], %w: f32[4,S]) -> f32[B,4] {\n  %a = linear(%x, %w)\n  %b = matmul(%a, %x)\n  return %b\n}\n", 3, "inner dimensions differ");
  expect_asm_error("dim S in [1, 8]\ndim S in [2, 9]\n", 2, "dim S is declared twice");
  expect_asm_error("dim S in [9, 8]\n", 1, "empty range [9, 8]");
  expect_asm_error("dim S in [1]\n", 1, "expected ',' between the bounds");
  expect_asm_error("func @main(%x: f32[S]) -> f32[] {\n  %a = sum(%x) {axes=[S]}\n  return %a\n}\n", 2, "takes numbers only");
  expect_asm_error("dim S in [1, 4]\nfunc @main(%x: f32[S]) -> f32[S] {\n  %a = slice(%x) {starts=[2], ends=[9]}\n  return %a\n}\n", 3, "start 2 is not inside S");
  expect_asm_error("func @main(%x: f32[S,4]) -> f32[4,S] {\n  %a = reshape(%x) {shape=[-1, T]}\n  return %a\n}\n", 2, "with -1: T does not divide");
  /* a window whose size is a shape variable (found by the fuzzer: its arithmetic overflowed) */
  expect_asm_error("func @main(%x: f32[1,3,8,8], %w: f32[8,3,1,K]) -> f32[1,8,8,8] {\n  %a = conv2d(%x, %w)\n  return %a\n}\n", 2, "the window's size must be a number, found K");
  /* layout: the values it takes, and rank 4 only */
  expect_asm_error("func @main(%x: f32[1,3,8,8]) -> f32[1,3,4,4] {\n  %a = max_pool2d(%x) {kernel=[2,2], layout=\"nchwc\"}\n  return %a\n}\n", 2, "expects \"nchw\" or \"nhwc\"");
  expect_asm_error("func @main(%x: f32[3,8,8]) -> f32[3,4,4] {\n  %a = avg_pool2d(%x) {kernel=[2,2], layout=\"nhwc\"}\n  return %a\n}\n", 2, "needs an input of rank 4");
  expect_asm_error("func @main(%x: f32[1,8,8,3], %w: f32[4,3,3,3]) -> f32[1,6,6,4] {\n  %a = conv2d(%x, %w) {layout=\"nhwc\", groups=2}\n  return %a\n}\n", 2, "does not fit input");
  {
    /* a reshape's -1 resolved symbolically: [S,4] to [-1, S] is [4, S] */
    uint8_t *b;
    size_t n;
    rill_status_t st = asm_text("dim S in [1, 4]\nfunc @main(%x: f32[S,4]) -> f32[4,S] {\n  %a = reshape(%x) {shape=[-1, S]}\n  return %a\n}\n", &b, &n);
    ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
    free(b);
  }
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  set_stream(64)\n  return %x\n}\n", 2, "expected a stream number 0..63");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %s = \"abc\n  return %x\n}\n", 2, "unterminated string");
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  %y = relu(%x) {alpha=}\n  return %y\n}\n", 2, "expected an attribute value");
  expect_asm_error("weights \"missing.safetensors\" as w\nconst %k : f32[2] = w[\"k\"]\n", 1, "missing.safetensors");
  expect_asm_error("const %k : f32[2] = v[\"k\"]\n", 1, "unknown weights alias 'v'");
  expect_asm_error("func @main(%x: f32[2,3]) -> f32[2,3] {\n  %s = split(%x) {axis=1, sizes=[1,2]}\n  return %s\n}\n", 2, "produces 2 results, 1 names given");
  /* Sizes near the integer limits: clear errors, never overflow (these once overflowed) */
  expect_asm_error("func @main(%x: f32[0, 281474976710657]) -> f32[2] {\n  return %x\n}\n", 1, "tensor type too large");
  expect_asm_error("func @main(%x: f32[1,1,4,4]) -> f32[1,1,2,2] {\n  %y = max_pool2d(%x) {kernel=[2,2], padding=[4611686018427387904, 0]}\n"
                   "  return %y\n}\n", 2, "must be at most 1073741824");
  expect_asm_error("func @main(%x: f32[1,4,4,4], %w: f32[4,1,1,1]) -> f32[1,4,4,4] {\n  %y = conv2d(%x, %w) {groups=4611686018427387904}\n"
                   "  return %y\n}\n", 2, "does not fit input");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %a, %b = split(%x) {axis=0, sizes=[9223372036854775807, 9223372036854775807]}\n"
                   "  return %a\n}\n", 2, "add up to more than");
  expect_asm_error("func @main(%x: f32[4]) -> f32[4] {\n  %a = pad(%x) {pads=[9223372036854775807, 9223372036854775807]}\n"
                   "  return %a\n}\n", 2, "too large");
  /* the largest step takes one element */
  uint8_t *b = NULL;
  size_t n = 0;
  rill_status_t st = asm_text("func @main(%x: f32[4]) -> f32[1] {\n  %a = slice(%x) {starts=[1], ends=[4], steps=[9223372036854775807]}\n"
                              "  return %a\n}\n", &b, &n);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  free(b);
}
END_TEST

START_TEST(stream_check) {
  /* A value used on another stream without an event: named, with both streams, at the use. */
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  set_stream(1)\n  %a = relu(%x)\n  set_stream(0)\n  %b = neg(%a)\n  return %b\n}\n",
                   5, "%a is produced on stream 1 and used on stream 0");
  /* An event recorded before the producer does not cover it. */
  expect_asm_error("func @main(%x: f32[2]) -> f32[2] {\n  set_stream(1)\n  add_event(3)\n  %a = relu(%x)\n  set_stream(0)\n  wait_event(3)\n  %b = neg(%a)\n  return %b\n}\n",
                   7, "without an event");
  /* Correctly ordered: accepted; a wait on another stream by number also works. */
  uint8_t *b;
  size_t n;
  rill_status_t st = asm_text("func @main(%x: f32[2]) -> f32[2] {\n  set_stream(1)\n  %a = relu(%x)\n  add_event(3)\n  wait_event(3, 0)\n  set_stream(0)\n  %b = neg(%a)\n  return %b\n}\n", &b, &n);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  free(b);
}
END_TEST

/* Assembles, disassembles and reassembles: the bytes must be identical. */
static void roundtrip_file(const char *path) {
  uint8_t *a, *b;
  size_t na, nb;
  rill_status_t st = rill_assemble_file(NULL, path, NULL, &a, &na);
  ck_assert_msg(!st, "%s: %s", path, rill_status_message(st));
  rill_module_t *m;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  ck_assert(!rill_module_load(NULL, a, na, dir, &m));
  char *text;
  size_t len;
  ck_assert(!rill_module_disassemble(m, &text, &len));
  /* Reassemble "in the same folder" so relative weights paths resolve. */
  char fake[4200];
  snprintf(fake, sizeof fake, "%s/dis.vmasm", dir);
  st = rill_assemble(NULL, fake, text, len, NULL, &b, &nb);
  ck_assert_msg(!st, "%s (reassembly): %s", path, rill_status_message(st));
  ck_assert_msg(na == nb && memcmp(a, b, na) == 0, "%s: asm(dis(asm(x))) differs from asm(x)", path);
  free(a);
  free(b);
  free(text);
  rill_module_release(m);
}

static int roundtrip_dir(const char *dir, bool cases) {
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  struct dirent *e;
  int count = 0;
  char path[4096];
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (cases) snprintf(path, sizeof path, "%s/%s/prog.vmasm", dir, e->d_name);
    else if (strstr(e->d_name, ".vmasm")) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    else continue;
    FILE *f = fopen(path, "r");
    if (!f) continue;
    fclose(f);
    roundtrip_file(path);
    count++;
  }
  closedir(d);
  return count;
}

START_TEST(roundtrip_fixtures) {
  /* programs with shape variables: the fuzz seeds and the dynamic conformance cases */
  char seeds[4096];
  snprintf(seeds, sizeof seeds, "%s/../fuzz/seeds/asm", fixtures_dir());
  ck_assert_int_ge(roundtrip_dir(seeds, false), 2);
  snprintf(seeds, sizeof seeds, "%s/dynamic", conformance_dir());
  if (have_conformance("roundtrip_fixtures (dynamic)")) ck_assert_int_ge(roundtrip_dir(seeds, true), 1);
  int n = roundtrip_dir(fixtures_dir(), false);
  ck_assert_int_ge(n, 5);
  if (have_conformance("roundtrip_fixtures")) ck_assert_int_ge(roundtrip_dir(conformance_dir(), true), 4);
}
END_TEST


/* The disassembly at -O0: these tests look at the memory plan and views of ops one by one. */
static char *dis_text(const char *src) { return dis_text_opt("t.vmasm", src, true); }

static int count(const char *hay, const char *needle) {
  int k = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) k++;
  return k;
}

START_TEST(memory_plan) {
  /* A chain of 8 ops needs two buffers that alternate; the result has its own. */
  char *t = dis_text("func @main(%x: f32[64]) -> f32[64] {\n  %a = relu(%x)\n  %b = neg(%a)\n  %c = exp(%b)\n  %d = neg(%c)\n"
                     "  %e = relu(%d)\n  %f = neg(%e)\n  %g = exp(%f)\n  %h = neg(%g)\n  return %h\n}\n");
  ck_assert_int_eq(count(t, "storage("), 2);
  ck_assert_int_eq(count(t, "alloc_tensor"), 1);
  /* Registers of the same type are reused after their last use. */
  ck_assert_int_le(count(t, "  reg "), 4);
  free(t);
  /* A value that lives long keeps its buffer: x -> a, b = f(a), c = g(b, a) */
  t = dis_text("func @main(%x: f32[16]) -> f32[16] {\n  %a = relu(%x)\n  %b = neg(%a)\n  %c = exp(%b)\n  %d = add(%c, %a)\n  return %d\n}\n");
  ck_assert_int_eq(count(t, "storage("), 3);
  free(t);
  /* Shape ops are views: no storage and no kernel of their own; the viewed
   * value's buffer lives as long as the view (here: until %e). */
  t = dis_text("func @main(%x: f32[4,6]) -> f32[24] {\n  %a = relu(%x)\n  %b = reshape(%a) {shape=[24]}\n  %c = unsqueeze(%b) {axes=[0]}\n"
               "  %d = neg(%x)\n  %e = squeeze(%c) {axes=[0]}\n  %f = exp(%e)\n  return %f\n}\n");
  ck_assert_int_eq(count(t, "  alias "), 3);
  ck_assert_int_eq(count(t, "invoke"), 3);
  ck_assert_int_eq(count(t, "storage("), 2); /* %a and %d overlap: two buffers */
  free(t);
  /* A view that escapes keeps its source out of any shared buffer. */
  t = dis_text("func @main(%x: f32[4,6]) -> f32[24] {\n  %a = relu(%x)\n  %b = flatten(%a) {start=0}\n  %c = neg(%x)\n  return %b\n}\n");
  ck_assert_int_eq(count(t, "alloc_tensor"), 1);
  ck_assert_int_eq(count(t, "  alias "), 1);
  free(t);
  /* Multi-stream: the buffer of a value read on stream 1 is not reused by stream 0
   * work that is not ordered after that read. */
  t = dis_text("func @main(%x: f32[16]) -> f32[16] {\n  %a = relu(%x)\n  add_event(1)\n  set_stream(1)\n  wait_event(1)\n"
               "  %b = neg(%a)\n  add_event(2)\n  set_stream(0)\n  %c = exp(%x)\n  %d = exp(%c)\n  wait_event(2)\n  %e = add(%d, %b)\n  return %e\n}\n");
  ck_assert_int_ge(count(t, "storage("), 4);
  free(t);
}
END_TEST



/* Fail the Nth allocation for every N: each run returns out-of-memory (or
 * succeeds once N passes the number needed) with nothing left allocated. */
START_TEST(allocation_failures) {
  char path[4200];
  snprintf(path, sizeof path, "%s/weights.vmasm", fixtures_dir());
  uint8_t *good;
  size_t ngood;
  ck_assert(!rill_assemble_file(NULL, path, NULL, &good, &ngood));
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", fixtures_dir());
  int assembled = 0, loaded = 0;
  for (long k = 1; k < 100000 && !(assembled && loaded); k++) {
    test_alloc_t ta;
    if (!assembled) {
      test_alloc_init(&ta, k);
      uint8_t *b = NULL;
      size_t n;
      rill_status_t st = rill_assemble_file(&ta.base, path, NULL, &b, &n);
      if (st) {
        ck_assert_msg(rill_status_code(st) == RILL_OUT_OF_MEMORY, "assemble, fail at %ld: %s", k, rill_status_message(st));
        rill_status_free(st);
      } else {
        ck_assert(n == ngood && memcmp(b, good, n) == 0);
        ta.base.free(ta.base.self, b);
        assembled = 1;
      }
      ck_assert_msg(atomic_load(&ta.live) == 0, "assemble, fail at %ld: %ld blocks leaked", k, atomic_load(&ta.live));
    }
    if (!loaded) {
      test_alloc_init(&ta, k);
      rill_module_t *m = NULL;
      rill_status_t st = rill_module_load(&ta.base, good, ngood, dir, &m);
      if (st) {
        ck_assert_msg(rill_status_code(st) == RILL_OUT_OF_MEMORY, "load, fail at %ld: %s", k, rill_status_message(st));
        rill_status_free(st);
      } else {
        rill_module_release(m);
        loaded = 1;
      }
      ck_assert_msg(atomic_load(&ta.live) == 0, "load, fail at %ld: %ld blocks leaked", k, atomic_load(&ta.live));
    }
  }
  ck_assert(assembled && loaded);
  free(good);
}
END_TEST

/* The invokes in one function's disassembly. */
static int invokes_in(const char *text, const char *fn) {
  char head[64];
  snprintf(head, sizeof head, "func @%s(", fn);
  const char *p = strstr(text, head), *end = p ? strstr(p, "\n}\n") : NULL;
  ck_assert_ptr_nonnull(end);
  int n = 0;
  for (const char *q = p; (q = strstr(q, "  invoke ")) && q < end; q++) n++;
  return n;
}


/* Runs @main of src at -O0 and at -O1 on the cpu device (nout <= 3 f32
 * results of n <= 128 elements each) and checks -O1's within f32 rounding of -O0's. */
static void same_at_O1(const char *src, int nin, const rill_type_t *types, const float *const *in, int nout, size_t n) {
  float res[2][3][128];
  const size_t bytes[3] = {n * 4, n * 4, n * 4};
  ck_assert(nout <= 3 && n <= 128);
  for (int opt1 = 0; opt1 < 2; opt1++)
    run_f32(src, opt1, nin, types, in, nout, (float *const[]){res[opt1][0], res[opt1][1], res[opt1][2]}, bytes);
  for (int k = 0; k < nout; k++)
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(fabsf(res[1][k][i] - res[0][k][i]) <= 1e-5f * (1 + fabsf(res[0][k][i])), "result %d [%zu]: %g vs %g", k, i, res[1][k][i], res[0][k][i]);
}

START_TEST(optimise_counts) {
  char path[4200];
  snprintf(path, sizeof path, "%s/fusion.vmasm", fixtures_dir());
  char *o0 = dis_text_opt(path, NULL, true), *o1 = dis_text_opt(path, NULL, false);
  /* conv2d + batch_norm + relu: one op (the batch norm folds into the
   * convolution's weights and bias, the relu becomes its activation) */
  ck_assert_int_eq(invokes_in(o0, "conv_bn_relu"), 3);
  ck_assert_int_eq(invokes_in(o1, "conv_bn_relu"), 1);
  ck_assert_ptr_null(strstr(o1, "batch_norm"));
  ck_assert_ptr_nonnull(strstr(o1, "conv2d(f32[1,3,8,8], f32[4,3,3,3], f32[4]) -> (f32[1,4,8,8]) {padding=[1, 1], activation=\"relu\"}"));
  /* an elementwise chain (broadcasting, a scalar, literals, a comparison, casts, where, clip): one kernel */
  ck_assert_int_eq(invokes_in(o0, "chain"), 8);
  ck_assert_int_eq(invokes_in(o1, "chain"), 1);
  /* an Adam step: one kernel writing parameter, m and v */
  ck_assert_int_eq(invokes_in(o0, "adam"), 12);
  ck_assert_int_eq(invokes_in(o1, "adam"), 1);
  ck_assert_ptr_nonnull(strstr(o1, "-> (f32[37], f32[37], f32[37]) {expr=\""));
  /* the folded constants are printed, the unused ones gone */
  ck_assert_ptr_nonnull(strstr(o1, "const %fold"));
  ck_assert_ptr_null(strstr(o1, "const %var"));
  free(o0);
  free(o1);
  char *t;
  /* relu and gelu after matmul or linear become their activation (a cuBLASLt epilogue) */
  t = dis_text_opt("t.vmasm", "func @main(%x: f32[3,8], %w: f32[5,8], %b: f32[5], %v: f32[8,4]) -> (f32[3,5], f32[3,4], f32[3,4]) {\n"
                   "  %y = linear(%x, %w, %b)\n  %r = relu(%y)\n  %m = matmul(%x, %v)\n  %g = gelu(%m) {approximate=\"tanh\"}\n"
                   "  %n = matmul(%x, %v)\n  %k = relu(%n)\n  return %r, %g, %n\n}\n", false);
  ck_assert_int_eq(invokes_in(t, "main"), 4); /* %n is used twice: its relu stays */
  ck_assert_ptr_nonnull(strstr(t, "{activation=\"relu\"}"));
  ck_assert_ptr_nonnull(strstr(t, "{activation=\"gelu_tanh\"}"));
  free(t);
  /* gelu written out with erf, in both groupings (div by sqrt 2, mul by its
   * inverse, operands either way round), becomes gelu and then the linear's
   * activation; with another constant it stays a fused chain, and the
   * results equal -O0's */
  const char *gel = "func @main(%x: f32[3,8], %w: f32[5,8], %b: f32[5]) -> (f32[3,5], f32[3,5], f32[3,5]) {\n"
                    "  %y = linear(%x, %w, %b)\n  %d = div(%y, 1.4142135)\n  %e = erf(%d)\n  %a = add(%e, 1.0)\n"
                    "  %m = mul(%y, %a)\n  %g = mul(%m, 0.5)\n"
                    "  %y2 = linear(%x, %w, %b)\n  %h = mul(0.5, %y2)\n  %d2 = mul(0.70710678, %y2)\n  %e2 = erf(%d2)\n"
                    "  %a2 = add(1.0, %e2)\n  %g2 = mul(%a2, %h)\n"
                    "  %y3 = linear(%x, %w, %b)\n  %d3 = div(%y3, 1.5)\n  %e3 = erf(%d3)\n  %a3 = add(%e3, 1.0)\n"
                    "  %m3 = mul(%y3, %a3)\n  %g3 = mul(%m3, 0.5)\n  return %g, %g2, %g3\n}\n";
  t = dis_text_opt("t.vmasm", gel, false);
  ck_assert_msg(invokes_in(t, "main") == 4 && strstr(t, "{activation=\"gelu\"}") && count(t, "erf(") == 1, "%s", t);
  free(t);
  float gx[24], gw[40], gb[5];
  for (int i = 0; i < 40; i++) gw[i] = (float)((i * 37) % 19 - 9) / 7.0f;
  for (int i = 0; i < 24; i++) gx[i] = (float)((i * 11) % 13 - 6) / 5.0f;
  for (int i = 0; i < 5; i++) gb[i] = (float)i / 4.0f - 0.5f;
  const rill_type_t gel_types[3] = {{RILL_F32, 2, {3, 8}}, {RILL_F32, 2, {5, 8}}, {RILL_F32, 1, {5}}};
  same_at_O1(gel, 3, gel_types, (const float *const[]){gx, gw, gb}, 3, 15);
  /* a slice that keeps every element in place becomes a view (no copy):
   * over all axes or some, sizes from shape variables too; a reversing
   * slice of the same sizes and a partial one stay; results equal -O0's */
  const char *sl = "func @main(%x: f32[2,3,4]) -> (f32[2,3,4], f32[2,3,4], f32[2,2,4]) {\n"
                   "  %a = slice(%x) {starts=[0, 0], ends=[3, 9], axes=[1, 2]}\n  %b = slice(%x) {starts=[2], ends=[-4], axes=[1], steps=[-1]}\n"
                   "  %c = slice(%x) {starts=[1], ends=[3], axes=[1]}\n  %y = relu(%a)\n  return %y, %b, %c\n}\n";
  t = dis_text_opt("t.vmasm", sl, false);
  ck_assert_msg(count(t, "= slice(") == 2 && strstr(t, "steps=[-1]") && strstr(t, "-> (f32[2,2,4]) {starts=[1]"), "%s", t);
  free(t);
  float sx[24];
  for (int i = 0; i < 24; i++) sx[i] = (float)((i * 7) % 11 - 5) / 3.0f;
  same_at_O1("func @main(%x: f32[2,3,4]) -> (f32[2,3,4], f32[2,3,4]) {\n  %a = slice(%x) {starts=[0, 0], ends=[3, 9], axes=[1, 2]}\n"
             "  %b = slice(%x) {starts=[2], ends=[-4], axes=[1], steps=[-1]}\n  %y = relu(%a)\n  return %y, %b\n}\n",
             1, (const rill_type_t[]){{RILL_F32, 3, {2, 3, 4}}}, (const float *const[]){sx}, 2, 24);
  t = dis_text_opt("t.vmasm", "func @main(%x: f32[n,5]) -> f32[n,5] {\n  %a = slice(%x) {starts=[0], ends=[9223372036854775807], axes=[0]}\n"
                   "  %y = relu(%a)\n  return %y\n}\n", false);
  ck_assert_msg(!strstr(t, "= slice("), "%s", t);
  free(t);
  /* a q/k/v product split as an exporter with a dynamic batch writes it
   * (-1 in the reshape, the batch a shape variable): one product per part
   * read, no gather or transpose left; -O1 equals -O0 at 2 images */
  const char *qkv = "const %w : f32[4,6] = [[0.1, -0.2, 0.3, 0.5, -0.1, 0.25], [0.2, 0.1, -0.3, 0.05, 0.4, -0.5], [-0.15, 0.3, 0.2, -0.25, 0.1, 0.35], "
                    "[0.45, -0.05, 0.1, 0.2, -0.3, 0.15]]\nconst %b : f32[6] = [0.1, -0.1, 0.2, 0, 0.05, -0.2]\nconst %i0 : i64[1] = [0]\n"
                    "const %i2 : i64[1] = [2]\nfunc @main(%x: f32[n,3,4]) -> (f32[n,1,3,2], f32[n,1,3,2]) {\n  %m = matmul(%x, %w)\n  %a = add(%b, %m)\n"
                    "  %r = reshape(%a) {shape=[-1,3,3,1,2]}\n  %t = transpose(%r) {perm=[2,0,3,1,4]}\n  %g0 = gather(%t, %i0) {axis=0}\n"
                    "  %q = reshape(%g0) {shape=[n,1,3,2]}\n  %g2 = gather(%t, %i2) {axis=0}\n  %v = reshape(%g2) {shape=[n,1,3,2]}\n  return %q, %v\n}\n";
  t = dis_text_opt("t.vmasm", qkv, false);
  ck_assert_msg(!strstr(t, "= gather(") && !strstr(t, "= transpose(") && strstr(t, "(f32[n,3,4], f32[4,2], f32[2]) -> (f32[n,3,2])"), "%s", t);
  free(t);
  same_at_O1(qkv, 1, (const rill_type_t[]){{RILL_F32, 3, {2, 3, 4}}}, (const float *const[]){sx}, 2, 12);
  /* a step with another use keeps the chain */
  t = dis_text_opt("t.vmasm", "func @main(%y: f32[4]) -> (f32[4], f32[4]) {\n  %d = div(%y, 1.4142135)\n  %e = erf(%d)\n"
                   "  %a = add(%e, 1.0)\n  %m = mul(%y, %a)\n  %g = mul(%m, 0.5)\n  return %g, %e\n}\n", false);
  ck_assert_msg(strstr(t, "gelu") == NULL && strstr(t, "erf(") != NULL, "%s", t);
  free(t);
  /* ops over constants are evaluated; a gather index out of range is left for the run to report */
  t = dis_text_opt("t.vmasm", "const %a : f32[3] = [1, 2, 3]\nconst %i : i64[1] = [7]\nfunc @main(%x: f32[3]) -> (f32[3], f32[1]) {\n"
                         "  %b = mul(%a, 2.0)\n  %c = add(%b, %x)\n  %g = gather(%a, %i)\n  return %c, %g\n}\n", false);
  ck_assert_int_eq(invokes_in(t, "main"), 2);
  ck_assert_ptr_nonnull(strstr(t, "= [2.0, 4.0, 6.0]"));
  free(t);
  /* nested concats along one axis (Inception's blocks) become one; a concat
   * used twice, or along another axis, stays; the results are the same */
  const char *cat = "func @main(%a: f32[2,1,3], %b: f32[2,2,3], %c: f32[2,3,3], %d: f32[2,1,3]) -> (f32[2,8,3], f32[2,2,6]) {\n"
                    "  %ab = concat(%a, %b) {axis=1}\n  %abc = concat(%ab, %c) {axis=-2}\n  %ad = concat(%a, %d) {axis=1}\n"
                    "  %y = concat(%abc, %ad) {axis=1}\n  %w = concat(%ad, %ad) {axis=2}\n  return %y, %w\n}\n";
  t = dis_text_opt("t.vmasm", cat, false);
  ck_assert_int_eq(invokes_in(t, "main"), 3);
  ck_assert_msg(strstr(t, "concat(f32[2,1,3], f32[2,2,3], f32[2,3,3], f32[2,2,3]) -> (f32[2,8,3])") != NULL, "%s", t);
  free(t);
  float want[2][48], got[2][48], in[4][18];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 18; j++) in[i][j] = (float)(i * 100 + j);
  const rill_type_t cat_types[4] = {{RILL_F32, 3, {2, 1, 3}}, {RILL_F32, 3, {2, 2, 3}}, {RILL_F32, 3, {2, 3, 3}}, {RILL_F32, 3, {2, 1, 3}}};
  const float *cat_in[4] = {in[0], in[1], in[2], in[3]};
  const size_t cat_bytes[2] = {48 * 4, 24 * 4};
  run_f32(cat, false, 4, cat_types, cat_in, 2, (float *const[]){want[0], want[1]}, cat_bytes);
  run_f32(cat, true, 4, cat_types, cat_in, 2, (float *const[]){got[0], got[1]}, cat_bytes);
  ck_assert(!memcmp(got[0], want[0], 48 * 4) && !memcmp(got[1], want[1], 24 * 4));
  ck_assert_float_eq(want[0][7 * 3], 300.0f); /* %y[0, 7, 0]: the first element of %d's part (after %a, %b, %c, %a) */
  /* f16 and bf16 convolutions run channels-last: an Inception-like block
   * (stem conv + batch norm + relu, max pool, two branch convolutions, the
   * residual add, concat, adaptive pool, flatten, linear) takes one transpose
   * in (three channels move) and none back (the pooled [1,1,1,C] is a view
   * of [1,C,1,1]); f32 stays NCHW; weights are transposed once, at assembly */
  const char *blk = "const %w0 : $T[8,3,3,3] = fill(0.1)\nconst %s0 : $T[8] = fill(1.5)\nconst %z0 : $T[8] = fill(0)\n"
                    "const %v0 : $T[8] = fill(2)\nconst %w1 : $T[4,8,1,1] = fill(0.2)\nconst %w2 : $T[8,8,3,3] = fill(-0.1)\n"
                    "const %fw : $T[5,12] = fill(0.3)\n"
                    "func @main(%x: $T[1,3,16,16]) -> $T[1,5] {\n  %a = conv2d(%x, %w0) {stride=[2,2], padding=[1,1]}\n"
                    "  %n = batch_norm(%a, %s0, %z0, %z0, %v0)\n  %r = relu(%n)\n  %p = max_pool2d(%r) {kernel=[2,2]}\n"
                    "  %b1 = conv2d(%p, %w1)\n  %b2 = conv2d(%p, %w2) {padding=[1,1]}\n  %s = add(%b2, %p)\n"
                    "  %c = concat(%b1, %s) {axis=1}\n  %g = adaptive_avg_pool2d(%c) {output=[1,1]}\n  %f = flatten(%g)\n"
                    "  %y = linear(%f, %fw)\n  return %y\n}\n";
  const char *dts[3] = {"f16", "bf16", "f32"};
  for (int k = 0; k < 3; k++) {
    char src[2048], *q = src;
    for (const char *p = blk; *p; p++) {
      if (p[0] == '$' && p[1] == 'T') { q += sprintf(q, "%s", dts[k]); p++; }
      else *q++ = *p;
    }
    *q = 0;
    t = dis_text_opt("t.vmasm", src, false);
    bool half = k < 2;
    ck_assert_msg(count(t, "layout=\"nhwc\"") == (half ? 5 : 0), "%s", t); /* 3 conv2d, 2 pools (op table) */
    ck_assert_msg(count(t, "= transpose(") == (half ? 1 : 0), "%s", t);
    if (half) {
      char conv_text[160];
      snprintf(conv_text, sizeof conv_text, "conv2d(%s[1,4,4,8], %s[8,3,3,8]) -> (%s[1,4,4,8]) {padding=[1, 1], layout=\"nhwc\"}", dts[k], dts[k], dts[k]);
      ck_assert_msg(strstr(t, conv_text) != NULL, "%s", t);
      ck_assert_msg(strstr(t, "concat(") && strstr(t, "{axis=3}"), "%s", t);
      ck_assert_msg(strstr(t, "transpose(") && strstr(t, "[1,3,16,16]) -> (") && strstr(t, "{perm=[0, 2, 3, 1]}"), "%s", t);
    }
    free(t);
  }
  /* The layout pass interns transposes while it reads an op's operands:
   * with 0 to 40 op-table entries before it (the table grows and moves at
   * some count; ASan in CI sees a read of the moved table), a concat of a
   * parameter and two convolutions goes channels-last (one transpose in
   * for the parameter instead of two back); 65 operands are no limit; a
   * batch_norm of a channels-last conv2d written so by hand is not folded
   * into it (its channels are dim 3, the batch norm's dim 1) but becomes
   * its affine */
  for (int k = 0; k <= 40; k++) {
    char src[8192], *q = src;
    q += snprintf(q, (size_t)(src + sizeof src - q), "const %%w0 : f16[4,3,3,3] = fill(0.1)\nconst %%w1 : f16[4,3,3,3] = fill(-0.2)\nfunc @main(%%x: f16[1,3,6,10], %%p: f16[1,4,6,10]");
    for (int i = 1; i <= k; i++) q += snprintf(q, (size_t)(src + sizeof src - q), ", %%s%d: f32[%d]", i, i);
    q += snprintf(q, (size_t)(src + sizeof src - q), ") -> f16[1,12,6,10] {\n");
    for (int i = 1; i <= k; i++) q += snprintf(q, (size_t)(src + sizeof src - q), "  %%t%d = neg(%%s%d)\n", i, i);
    q += snprintf(q, (size_t)(src + sizeof src - q), "  %%a = conv2d(%%x, %%w0) {padding=[1,1]}\n  %%b = conv2d(%%x, %%w1) {padding=[1,1]}\n"
                    "  %%c = concat(%%p, %%a, %%b) {axis=1}\n  return %%c\n}\n");
    t = dis_text_opt("t.vmasm", src, false);
    ck_assert_msg(strstr(t, "-> (f16[1,6,10,12]) {axis=3}") && count(t, "= transpose(") == 3, "%s", t);
    free(t);
  }
  {
    char src[4096], *q = src;
    q += sprintf(q, "const %%w0 : f16[4,3,3,3] = fill(0.1)\nfunc @main(%%x: f16[1,3,6,10]) -> f16[1,260,6,10] {\n"
                    "  %%a = conv2d(%%x, %%w0) {padding=[1,1]}\n  %%c = concat(");
    for (int i = 0; i < 65; i++) q += sprintf(q, "%s%%a", i ? ", " : "");
    q += sprintf(q, ") {axis=1}\n  return %%c\n}\n");
    t = dis_text_opt("t.vmasm", src, false);
    ck_assert_msg(strstr(t, "-> (f16[1,6,10,260]) {axis=3}"), "%s", t);
    free(t);
  }
  t = dis_text_opt("t.vmasm", "const %w : f32[4,3,3,3] = fill(0.1)\nconst %v : f32[4] = fill(1)\n"
                   "func @main(%x: f32[1,4,5,3]) -> f32[1,4,5,4] {\n  %a = conv2d(%x, %w) {padding=[1,1], layout=\"nhwc\"}\n"
                   "  %b = batch_norm(%a, %v, %v, %v, %v)\n  return %b\n}\n", false);
  ck_assert_msg(!strstr(t, "batch_norm(") && strstr(t, "fused(f32[1,4,5,4], f32[1,4,1,1], f32[1,4,1,1])") &&
                    strstr(t, "t0 = mul(x0, x1); t1 = add(t0, x2)"), "%s", t); /* its affine over dim 1, fused */
  free(t);
  /* a kernel choice tree names its variable by index: the module lists
   * variables by name (xB after B), and the tree must follow (found by
   * fuzzing: it named xB, and at run time would have read xB's size) */
  t = dis_text_opt("t.vmasm", "dim xB in [1, 64]\nop $0 = relu(f32[B,4]) -> (f32[B,4])\nchoose $0 = (le B 8 \"a\" \"b\")\n"
                   "func @main(%x: f32[B,4], %z: f32[xB]) -> (f32[B,4]) lowered(streams=1, events=0) {\n  reg %y : f32[B,4]\n"
                   "  alloc_tensor %y\n  invoke $0, (%x), (%y)\n  return (%y)\n}\n", false);
  ck_assert_msg(strstr(t, "choose $0 = (le B 8 \"a\" \"b\")"), "%s", t);
  free(t);
  /* matmul by a constant then add of a bias vector (ONNX's linear layer):
   * one linear reading the weight as it lies (weight="kn", no transposed
   * copy: the module's constants are the source's two), and a relu after it
   * merges as its activation; not when the bias is made after the product,
   * or the product has another use; -O1's results within f32 rounding of -O0's */
  const char *mb = "const %w : f32[3,5] = [[1, 2, 3, 4, 5], [0.5, -1, 0, 2, 1], [-2, 1, 0.25, 0, 3]]\nconst %b : f32[5] = [0.1, 0.2, 0.3, 0.4, 0.5]\n"
                   "func @main(%x: f32[2,4,3], %c: f32[5]) -> (f32[2,4,5], f32[2,4,5], f32[2,4,5]) {\n"
                   "  %m = matmul(%x, %w)\n  %a = add(%m, %b)\n  %r = relu(%a)\n"
                   "  %m2 = matmul(%x, %w)\n  %c2 = neg(%c)\n  %a2 = add(%c2, %m2)\n"
                   "  %m3 = matmul(%x, %w)\n  %a3 = add(%b, %m3)\n  %s = sub(%a3, %m3)\n  return %r, %a2, %s\n}\n";
  t = dis_text_opt("t.vmasm", mb, false);
  ck_assert_msg(count(t, "= linear(f32[2,4,3], f32[3,5], f32[5]) -> (f32[2,4,5]) {weight=\"kn\", activation=\"relu\"}") == 1, "%s", t);
  ck_assert_msg(count(t, "\nconst %") == 2, "%s", t);
  ck_assert_msg(count(t, "= matmul(") == 1 && count(t, "= linear(") == 1, "%s", t); /* %m2 and %m3 stay (one entry) */
  free(t);
  /* with RILL_LINEAR_KN=0 the weight is transposed into a constant of its own, [N, K] */
  setenv("RILL_LINEAR_KN", "0", 1);
  t = dis_text_opt("t.vmasm", mb, false);
  unsetenv("RILL_LINEAR_KN");
  ck_assert_msg(count(t, "= linear(f32[2,4,3], f32[5,3], f32[5]) -> (f32[2,4,5]) {activation=\"relu\"}") == 1 && !strstr(t, "\"kn\""), "%s", t);
  free(t);
  /* a product of at most 4 rows (a decode step's): the weight transposed, [N, K], which fused_linear reads */
  t = dis_text_opt("t.vmasm", "const %w : f32[3,5] = fill(0.5)\nconst %b : f32[5] = fill(1)\nfunc @main(%x: f32[1,4,3]) -> f32[1,4,5] {\n"
                   "  %m = matmul(%x, %w)\n  %a = add(%m, %b)\n  return %a\n}\n", false);
  ck_assert_msg(count(t, "= linear(f32[1,4,3], f32[5,3], f32[5]) -> (f32[1,4,5])\n") == 1, "%s", t);
  free(t);
  {
    float xin[24], cin[5];
    for (int i = 0; i < 24; i++) xin[i] = (float)((i * 7) % 11) / 4.0f - 1.2f;
    for (int i = 0; i < 5; i++) cin[i] = (float)i - 2.0f;
    const rill_type_t mb_types[2] = {{RILL_F32, 3, {2, 4, 3}}, {RILL_F32, 1, {5}}};
    same_at_O1(mb, 2, mb_types, (const float *const[]){xin, cin}, 3, 40);
  }
  /* a residual block: add(conv2d(x, w, b), z) then relu becomes one
   * conv2d(x, w, b, z) {activation="relu"}, in the add's place (the shortcut
   * %d is made after the convolution); not when the convolution has no bias,
   * another use, or z another type (broadcast); -O1 within f32 rounding of -O0 */
  const char *rb = "const %w : f32[4,4,3,3] = fill(0.05)\nconst %b : f32[4] = [0.1, -0.2, 0.3, -0.4]\nconst %w2 : f32[4,4,1,1] = fill(-0.25)\n"
                   "func @main(%x: f32[1,4,5,6], %v: f32[4,1,1]) -> (f32[1,4,5,6], f32[1,4,5,6], f32[1,4,5,6]) {\n"
                   "  %c = conv2d(%x, %w, %b) {padding=[1,1]}\n  %d = conv2d(%x, %w2, %b)\n  %s = add(%c, %d)\n  %r = relu(%s)\n"
                   "  %e = conv2d(%x, %w) {padding=[1,1]}\n  %s2 = add(%x, %e)\n"
                   "  %g = conv2d(%x, %w, %b) {padding=[1,1]}\n  %s3 = add(%g, %v)\n  %s4 = add(%s3, %g)\n  return %r, %s2, %s4\n}\n";
  t = dis_text_opt("t.vmasm", rb, false);
  ck_assert_msg(count(t, "= conv2d(f32[1,4,5,6], f32[4,4,3,3], f32[4], f32[1,4,5,6]) -> (f32[1,4,5,6]) {padding=[1, 1], activation=\"relu\"}") == 1, "%s", t);
  ck_assert_msg(count(t, "invoke ") == 6 && count(t, "= relu(") == 0, "%s", t); /* %e and %g stay with their adds (%g's two in one fused kernel) */
  free(t);
  {
    float xin[120], vin[4];
    for (int i = 0; i < 120; i++) xin[i] = (float)((i * 5) % 13) / 3.0f - 2.0f;
    for (int i = 0; i < 4; i++) vin[i] = (float)i - 1.5f;
    const rill_type_t rb_types[2] = {{RILL_F32, 4, {1, 4, 5, 6}}, {RILL_F32, 3, {4, 1, 1}}};
    same_at_O1(rb, 2, rb_types, (const float *const[]){xin, vin}, 3, 120);
  }
  /* a batch norm after a convolution with an activation or a residual is
   * not folded into it (they do not fold into the weights: found in review, -O1 gave
   * relu(bn(conv)) and dropped the bias and z); -O1 the same as -O0 */
  const char *bnr = "const %w : f32[2,2,1,1] = [[[[1]], [[0.5]]], [[[-1]], [[2]]]]\nconst %b : f32[2] = [0.5, -1]\n"
                    "const %s : f32[2] = [2, -3]\nconst %o : f32[2] = [0.25, 1]\nconst %m : f32[2] = [1, -2]\nconst %v : f32[2] = [4, 0.25]\n"
                    "func @main(%x: f32[1,2,2,3], %z: f32[1,2,2,3]) -> (f32[1,2,2,3], f32[1,2,2,3]) {\n"
                    "  %c = conv2d(%x, %w, %b) {activation=\"relu\"}\n  %n = batch_norm(%c, %s, %o, %m, %v)\n"
                    "  %d = conv2d(%x, %w, %b, %z)\n  %n2 = batch_norm(%d, %s, %o, %m, %v)\n  return %n, %n2\n}\n";
  t = dis_text_opt("t.vmasm", bnr, false);
  /* each becomes its per-channel affine, one fused kernel (one op entry, used twice) */
  ck_assert_msg(count(t, "= batch_norm(") == 0 && count(t, "= fused(") == 1 && count(t, "invoke ") == 4, "%s", t);
  free(t);
  {
    float xin[12], zin[12];
    for (int i = 0; i < 12; i++) xin[i] = (float)i - 5.5f, zin[i] = (float)(i % 5) - 2.0f;
    const rill_type_t bn_types[2] = {{RILL_F32, 4, {1, 2, 2, 3}}, {RILL_F32, 4, {1, 2, 2, 3}}};
    same_at_O1(bnr, 2, bn_types, (const float *const[]){xin, zin}, 2, 12);
  }
  /* a residual add before a layer_norm (with gamma and beta) becomes its
   * fourth operand: layer_norm(a, g, b, z), no add left; not when the sum has
   * another use (%s2), the add broadcasts (%s3), or the norm has no beta
   * (%s4); -O1 within f32
   * rounding of -O0 */
  const char *lnr = "const %g : f32[8] = [1, 0.5, 2, -1, 1.5, 0.25, 1, 3]\nconst %b : f32[8] = [0, 0.1, -0.2, 0.3, 0, 1, -1, 0.5]\n"
                    "func @main(%x: f32[3,8], %z: f32[3,8]) -> (f32[3,8], f32[3,8], f32[3,8]) {\n"
                    "  %s = add(%x, %z)\n  %n = layer_norm(%s, %g, %b)\n"
                    "  %s2 = add(%z, %x)\n  %n2 = layer_norm(%s2, %g, %b)\n  %u = add(%n2, %s2)\n"
                    "  %s3 = add(%x, %b)\n  %n3 = layer_norm(%s3, %g, %b)\n  %s4 = add(%x, %n3)\n  %n4 = layer_norm(%s4, %g)\n"
                    "  %r = add(%n4, %u)\n  return %n, %u, %r\n}\n";
  t = dis_text_opt("t.vmasm", lnr, false);
  ck_assert_msg(count(t, "= layer_norm(f32[3,8], f32[8], f32[8], f32[3,8]) -> (f32[3,8])") == 1 && count(t, "= layer_norm(") == 3, "%s", t);
  free(t);
  {
    float xin[24], zin[24];
    for (int i = 0; i < 24; i++) xin[i] = (float)((i * 7) % 9) / 2.0f - 2.0f, zin[i] = (float)((i * 5) % 11) / 3.0f - 1.5f;
    const rill_type_t ln_types[2] = {{RILL_F32, 2, {3, 8}}, {RILL_F32, 2, {3, 8}}};
    same_at_O1(lnr, 2, ln_types, (const float *const[]){xin, zin}, 3, 24);
  }
  /* a residual add after a float linear with a bias (its only use) becomes
   * its fourth operand, linear(x, w, b, z), in the add's place, and a relu
   * after merges too; not without a bias (%l2), with z broadcast (%v), or
   * where the product has another use (%l3); -O1 within f32 rounding of -O0.
   * (5 rows: a product of at most FLIN_MAX_ROWS, a decode step's, takes its
   * residual as decode_fuse.c's fused_linear instead, tested in test_llm_cli.sh) */
  const char *lr = "const %w : f32[6,8] = fill(0.125)\nconst %b : f32[6] = [0.5, -1, 0.25, 2, -0.75, 1]\n"
                   "func @main(%x: f32[5,8], %h: f32[5,6], %v: f32[6]) -> (f32[5,6], f32[5,6], f32[5,6]) {\n"
                   "  %l = linear(%x, %w, %b)\n  %s = add(%h, %l)\n  %r = relu(%s)\n"
                   "  %l2 = linear(%x, %w)\n  %s2 = add(%l2, %h)\n"
                   "  %l3 = linear(%x, %w, %b)\n  %s3 = add(%l3, %v)\n  %u = add(%s3, %l3)\n  %y = add(%u, %s2)\n  return %r, %s2, %y\n}\n";
  t = dis_text_opt("t.vmasm", lr, false);
  ck_assert_msg(count(t, "= linear(f32[5,8], f32[6,8], f32[6], f32[5,6]) -> (f32[5,6]) {activation=\"relu\"}") == 1 && count(t, "= relu(") == 0, "%s",
                t);
  ck_assert_msg(count(t, "= linear(f32[5,8], f32[6,8]) -> (f32[5,6])") == 1 && count(t, "= linear(f32[5,8], f32[6,8], f32[6]) -> (f32[5,6])") == 1,
                "%s", t);
  free(t);
  {
    float xin[40], hin[30], vin[6];
    for (int i = 0; i < 40; i++) xin[i] = (float)((i * 7) % 9) / 2.0f - 2.0f;
    for (int i = 0; i < 30; i++) hin[i] = (float)((i * 5) % 11) / 3.0f - 1.5f;
    for (int i = 0; i < 6; i++) vin[i] = (float)i - 2.5f;
    const rill_type_t lr_types[3] = {{RILL_F32, 2, {5, 8}}, {RILL_F32, 2, {5, 6}}, {RILL_F32, 1, {6}}};
    same_at_O1(lr, 3, lr_types, (const float *const[]){xin, hin, vin}, 3, 30);
  }
  /* a residual add that a layer_norm (gamma and beta) alone reads stays the norm's (post-norm, BERT): the linear keeps
   * three operands, the norm takes four */
  const char *lpn = "const %w : f32[6,8] = fill(0.125)\nconst %b : f32[6] = [0.5, -1, 0.25, 2, -0.75, 1]\nconst %g : f32[6] = fill(1)\n"
                    "func @main(%x: f32[5,8], %h: f32[5,6]) -> f32[5,6] {\n  %l = linear(%x, %w, %b)\n  %s = add(%l, %h)\n"
                    "  %n = layer_norm(%s, %g, %b)\n  return %n\n}\n";
  t = dis_text_opt("t.vmasm", lpn, false);
  ck_assert_msg(count(t, "= linear(f32[5,8], f32[6,8], f32[6]) -> (f32[5,6])") == 1 &&
                    count(t, "= layer_norm(f32[5,6], f32[6], f32[6], f32[5,6]) -> (f32[5,6])") == 1,
                "%s", t);
  free(t);
  /* a div or mul by a scalar constant before a softmax or log_softmax
   * becomes its `divisor` or `scale`; not when the quotient has another use
   * (%q2), the constant is not a scalar (%q3), or is zero (%q4); -O1 within
   * f32 rounding of -O0 */
  const char *sms = "const %v : f32[4] = [1, 2, 3, 4]\n"
                    "func @main(%x: f32[2,4]) -> (f32[2,4], f32[2,4], f32[2,4]) {\n"
                    "  %q = div(%x, 8.0)\n  %s = softmax(%q)\n  %m = mul(0.5, %x)\n  %l = log_softmax(%m) {axis=0}\n"
                    "  %q2 = div(%x, 3.0)\n  %s2 = softmax(%q2)\n  %u = add(%s2, %q2)\n"
                    "  %q3 = mul(%x, %v)\n  %s3 = softmax(%q3)\n  %q4 = mul(%x, 0.0)\n  %s4 = softmax(%q4)\n"
                    "  %w = add(%s3, %s4)\n  %r = add(%w, %u)\n  %r2 = add(%r, %s)\n  return %r2, %l, %s\n}\n";
  t = dis_text_opt("t.vmasm", sms, false);
  ck_assert_msg(count(t, "= softmax(f32[2,4]) -> (f32[2,4]) {divisor=8.0}") == 1 &&
                count(t, "= log_softmax(f32[2,4]) -> (f32[2,4]) {axis=0, scale=0.5}") == 1 && count(t, "divisor=") == 1 &&
                count(t, "scale=") == 1, "%s", t);
  free(t);
  {
    float xin[8];
    for (int i = 0; i < 8; i++) xin[i] = (float)((i * 5) % 7) - 3.0f;
    const rill_type_t sm_types[1] = {{RILL_F32, 2, {2, 4}}};
    same_at_O1(sms, 1, sm_types, (const float *const[]){xin}, 3, 8);
  }
  /* attention's transposes ride its products: a transpose of a transpose
   * is one, a transposed operand is read through perm_a or perm_b and a
   * transposed result written through perm_y; not where the operand's last
   * axis would become a batch axis (%t2) or the result's last axis would
   * move (%y3); -O1 within f32 rounding of -O0 */
  const char *att = "const %w2 : f32[2,2] = [1, -0.5, 0.25, 2]\nconst %w3 : f32[3,3] = [1, 0, 2, -1, 0.5, 0, 0, 1.5, -2]\n"
                    "func @main(%q: f32[1,4,2,3], %k: f32[1,4,2,3], %v: f32[1,4,2,3]) -> (f32[1,4,6], f32[3,4,2], f32[4,3,2]) {\n"
                    "  %qt = transpose(%q) {perm=[0,2,1,3]}\n  %kt = transpose(%k) {perm=[0,2,1,3]}\n  %kk = transpose(%kt) {perm=[0,1,3,2]}\n"
                    "  %vt = transpose(%v) {perm=[0,2,1,3]}\n  %s = matmul(%qt, %kk)\n  %o = matmul(%s, %vt)\n"
                    "  %ot = transpose(%o) {perm=[0,2,1,3]}\n  %y = reshape(%ot) {shape=[1,4,6]}\n"
                    "  %x2 = reshape(%q) {shape=[4,2,3]}\n  %t2 = transpose(%x2) {perm=[2,0,1]}\n  %m2 = matmul(%t2, %w2)\n"
                    "  %m3 = matmul(%x2, %w3)\n  %y3 = transpose(%m3) {perm=[0,2,1]}\n  return %y, %m2, %y3\n}\n";
  t = dis_text_opt("t.vmasm", att, false);
  ck_assert_msg(count(t, "= matmul(f32[1,4,2,3], f32[1,4,2,3]) -> (f32[1,2,4,4]) {perm_a=[0, 2, 1, 3], perm_b=[0, 2, 3, 1]}") == 1 &&
                count(t, "= matmul(f32[1,2,4,4], f32[1,4,2,3]) -> (f32[1,4,2,3]) {perm_b=[0, 2, 1, 3], perm_y=[0, 2, 1, 3]}") == 1 &&
                count(t, "= transpose(") == 2 && count(t, "perm_") == 4, "%s", t);
  free(t);
  {
    float qin[24], kin[24], vin[24];
    for (int i = 0; i < 24; i++)
      qin[i] = (float)((i * 7) % 9) / 4.0f - 1.0f, kin[i] = (float)((i * 5) % 11) / 5.0f - 1.0f, vin[i] = (float)((i * 3) % 7) - 3.0f;
    const rill_type_t at_types[3] = {{RILL_F32, 4, {1, 4, 2, 3}}, {RILL_F32, 4, {1, 4, 2, 3}}, {RILL_F32, 4, {1, 4, 2, 3}}};
    same_at_O1(att, 3, at_types, (const float *const[]){qin, kin, vin}, 3, 24);
  }
  /* two batch axes that follow one another in the stored keys ([windows,
   * heads, tokens, dim], swin's) are one strided batch: read through
   * perm_b; keys whose heads and tokens are swapped (a batch axis apart
   * from the other) keep their transpose; -O1 equals -O0 */
  const char *kb = "func @main(%q: f32[2,3,2,4], %k: f32[2,3,5,4], %j: f32[2,5,3,4]) -> (f32[2,3,2,5], f32[2,3,2,5]) {\n"
                   "  %kt = transpose(%k) {perm=[0, 1, 3, 2]}\n  %y = matmul(%q, %kt)\n"
                   "  %jt = transpose(%j) {perm=[0, 2, 3, 1]}\n  %z = matmul(%q, %jt)\n  return %y, %z\n}\n";
  t = dis_text_opt("t.vmasm", kb, false);
  ck_assert_msg(count(t, "= matmul(f32[2,3,2,4], f32[2,3,5,4]) -> (f32[2,3,2,5]) {perm_b=[0, 1, 3, 2]}") == 1 && count(t, "= transpose(") == 1 &&
                    strstr(t, "transpose(f32[2,5,3,4])"),
                "%s", t);
  free(t);
  {
    float qin[48], kin[120], jin[120];
    for (int i = 0; i < 120; i++) kin[i] = (float)((i * 5) % 11) / 5.0f - 1.0f, jin[i] = (float)((i * 3) % 7) - 3.0f;
    for (int i = 0; i < 48; i++) qin[i] = (float)((i * 7) % 9) / 4.0f - 1.0f;
    const rill_type_t kb_types[3] = {{RILL_F32, 4, {2, 3, 2, 4}}, {RILL_F32, 4, {2, 3, 5, 4}}, {RILL_F32, 4, {2, 5, 3, 4}}};
    same_at_O1(kb, 3, kb_types, (const float *const[]){qin, kin, jin}, 2, 60);
  }
  /* a bad fused expression is an assembly error at the op */
  uint8_t *b;
  size_t n;
  rill_status_t st = asm_text("func @main(%x: f32[3]) -> f32[3] {\n  %y = fused(%x) {expr=\"t0 = nope(x0); return t0\"}\n  return %y\n}\n", &b, &n);
  ck_assert_ptr_nonnull(st);
  ck_assert_ptr_nonnull(strstr(rill_status_message(st), "t.vmasm:2:"));
  ck_assert_ptr_nonnull(strstr(rill_status_message(st), "'nope' is not an elementwise op"));
  rill_status_free(st);
}
END_TEST

/* The byte offset of value `name`'s view in a disassembly, with its
 * storage's name in slot; -1 where it has no view. */
static long view_at(const char *text, const char *name, char *slot, size_t n) {
  char head[64];
  snprintf(head, sizeof head, "  view %%%s, ", name);
  const char *p = strstr(text, head);
  if (!p) return -1;
  p += strlen(head);
  const char *comma = strchr(p, ',');
  ck_assert_ptr_nonnull(comma);
  snprintf(slot, n, "%.*s", (int)(comma - p), p);
  return strtol(comma + 1, NULL, 10);
}

/* -O1 writes a concat along axis 1 of batch-1 NCHW tensors in place: its
 * operands are views of its result's slot at their byte offsets and its
 * invoke is gone, the operands still read after it; -O1's results equal
 * -O0's on the cpu device (every access checked against the streams'
 * order). Left as copies: an offset not a multiple of 256 bytes, a batch
 * of 2, a parameter operand, an operand named twice, an operand or the
 * result returned, an operand that is another in-place concat's result. */
START_TEST(concat_in_place) {
  const char *src = "func @main(%x: f32[1,3,4,4], %w1: f32[4,3,3,3], %w2: f32[4,3,1,1]) -> (f32[1,12,4,4], f32[1,4,4,4]) {\n"
                    "  %a = conv2d(%x, %w1) {padding=[1,1]}\n  %b = conv2d(%x, %w2)\n  %c = tanh(%a)\n"
                    "  %y = concat(%a, %b, %c) {axis=1}\n  %s = sigmoid(%y)\n  %t = mul(%a, %b)\n  return %s, %t\n}\n";
  char *o0 = dis_text_opt("t.vmasm", src, true), *o1 = dis_text_opt("t.vmasm", src, false);
  ck_assert_int_eq(invokes_in(o0, "main"), 6);
  ck_assert_msg(invokes_in(o1, "main") == 5 && !strstr(o1, "= concat("), "%s", o1);
  char slot[4][64];
  const char *names[4] = {"a", "b", "c", "y"};
  const long offsets[4] = {0, 256, 512, 0};
  for (int k = 0; k < 4; k++) {
    ck_assert_msg(view_at(o1, names[k], slot[k], sizeof slot[k]) == offsets[k], "%%%s:\n%s", names[k], o1);
    ck_assert_msg(!strcmp(slot[k], slot[0]), "%%%s in %s, %%a in %s:\n%s", names[k], slot[k], slot[0], o1);
    ck_assert_int_eq(view_at(o0, names[k], slot[k], sizeof slot[k]), 0);
  }
  ck_assert_msg(strstr(o1, ": storage(768)"), "%s", o1);
  free(o0);
  free(o1);
  float x[48], w1[108], w2[12], want[2][192], got[2][192];
  for (int i = 0; i < 48; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < 108; i++) w1[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
  for (int i = 0; i < 12; i++) w2[i] = (float)i / 4.0f - 1.5f;
  const rill_type_t types[3] = {{RILL_F32, 4, {1, 3, 4, 4}}, {RILL_F32, 4, {4, 3, 3, 3}}, {RILL_F32, 4, {4, 3, 1, 1}}};
  const float *in[3] = {x, w1, w2};
  const size_t bytes[2] = {192 * 4, 64 * 4};
  run_f32(src, false, 3, types, in, 2, (float *const[]){want[0], want[1]}, bytes);
  run_f32(src, true, 3, types, in, 2, (float *const[]){got[0], got[1]}, bytes);
  ck_assert(!memcmp(got[0], want[0], bytes[0]) && !memcmp(got[1], want[1], bytes[1]));
  /* Every allocation of its assembly failed in turn: out of memory, nothing leaked. */
  bool assembled = false;
  for (long k = 1; !assembled; k++) {
    test_alloc_t ta;
    test_alloc_init(&ta, k);
    uint8_t *b = NULL;
    size_t n;
    rill_status_t st = rill_assemble(&ta.base, "t.vmasm", src, strlen(src), NULL, &b, &n);
    if (st) {
      ck_assert_msg(rill_status_code(st) == RILL_OUT_OF_MEMORY, "fail at %ld: %s", k, rill_status_message(st));
      rill_status_free(st);
    } else {
      ta.base.free(ta.base.self, b);
      assembled = true;
    }
    ck_assert_msg(atomic_load(&ta.live) == 0, "fail at %ld: %ld blocks leaked", k, atomic_load(&ta.live));
  }
  /* Left alone: each program keeps one concat (an op entry is kept only where an invoke names it). */
  static const char *const keep[] = {
      /* an operand at 192 bytes */
      "func @main(%x: f32[1,3,4,4], %w: f32[3,3,1,1]) -> f32[1,6,4,4] {\n  %a = conv2d(%x, %w)\n  %b = tanh(%a)\n"
      "  %y = concat(%a, %b) {axis=1}\n  %q = neg(%y)\n  return %q\n}\n",
      /* a batch of 2 */
      "func @main(%x: f32[2,3,4,4], %w: f32[4,3,1,1]) -> f32[2,8,4,4] {\n  %a = conv2d(%x, %w)\n  %b = tanh(%a)\n"
      "  %y = concat(%a, %b) {axis=1}\n  %q = neg(%y)\n  return %q\n}\n",
      /* a parameter */
      "func @main(%x: f32[1,3,4,4], %w: f32[4,3,1,1], %p: f32[1,4,4,4]) -> f32[1,8,4,4] {\n  %a = conv2d(%x, %w)\n"
      "  %y = concat(%p, %a) {axis=1}\n  %q = neg(%y)\n  return %q\n}\n",
      /* an operand named twice */
      "func @main(%x: f32[1,3,4,4], %w: f32[4,3,1,1]) -> f32[1,12,4,4] {\n  %a = conv2d(%x, %w)\n  %b = tanh(%a)\n"
      "  %y = concat(%a, %b, %a) {axis=1}\n  %q = neg(%y)\n  return %q\n}\n",
      /* an operand returned */
      "func @main(%x: f32[1,3,4,4], %w: f32[4,3,1,1]) -> (f32[1,8,4,4], f32[1,4,4,4]) {\n  %a = conv2d(%x, %w)\n  %b = tanh(%a)\n"
      "  %y = concat(%a, %b) {axis=1}\n  %q = neg(%y)\n  return %q, %b\n}\n",
      /* the result returned */
      "func @main(%x: f32[1,3,4,4], %w: f32[4,3,1,1]) -> f32[1,8,4,4] {\n  %a = conv2d(%x, %w)\n  %b = tanh(%a)\n"
      "  %y = concat(%a, %b) {axis=1}\n  return %y\n}\n",
      /* an operand that is another in-place concat's result (that one, %ab, in place) */
      "func @main(%x: f32[1,3,4,4], %w: f32[4,3,1,1]) -> (f32[1,12,4,4], f32[1,8,4,4]) {\n  %a = conv2d(%x, %w)\n  %b = tanh(%a)\n"
      "  %c = relu(%a)\n  %ab = concat(%a, %b) {axis=1}\n  %u = neg(%ab)\n  %y = concat(%ab, %c) {axis=1}\n  %q = neg(%y)\n"
      "  return %q, %u\n}\n",
  };
  for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) {
    char *t = dis_text_opt("t.vmasm", keep[k], false);
    ck_assert_msg(count(t, "= concat(") == 1 && view_at(t, "a", slot[0], sizeof slot[0]) <= 0, "program %zu:\n%s", k, t);
    free(t);
  }
  char *t = dis_text_opt("t.vmasm", keep[6], false);
  ck_assert_msg(view_at(t, "b", slot[0], sizeof slot[0]) == 256 && strstr(t, "-> (f32[1,12,4,4]) {axis=1}"), "%s", t);
  free(t);
}
END_TEST

/* -O1 makes a split along the last axis of a batch-1 product into views
 * of the product's slot at the parts' byte offsets (no copy; a fused QKV
 * projection's query, key and value), the product's slot held through the
 * parts' last uses (a value made after the split does not overwrite them);
 * -O1's results equal -O0's. Left as copies: a batch of 2, a part
 * returned, a part at an offset that is not a multiple of 256 bytes, a
 * parameter split. */
START_TEST(split_in_place) {
  const char *src = "func @main(%x: f32[1,64], %w: f32[192,64]) -> f32[1,64] {\n  %h = linear(%x, %w)\n"
                    "  %a, %b, %c = split(%h) {axis=1, sizes=[64,64,64]}\n  %t = tanh(%a)\n  %m = linear(%b, %w)\n"
                    "  %p, %q, %r = split(%m) {axis=1, sizes=[64,64,64]}\n  %s = sum(%q) {axes=[1], keepdims=true}\n"
                    "  %y = mul(%t, %c)\n  %z = add(%y, %s)\n  %u = sub(%z, %r)\n  %v = mul(%u, %p)\n  return %v\n}\n";
  char *o0 = dis_text_opt("t.vmasm", src, true), *o1 = dis_text_opt("t.vmasm", src, false);
  ck_assert_msg(count(o0, "= split(") == 1, "%s", o0);
  ck_assert_msg(!strstr(o1, "= split("), "%s", o1);
  /* (%p takes a register freed before it, named after another value) */
  char slot[3][64];
  const char *names[2][3] = {{"a", "b", "c"}, {NULL, "q", "r"}};
  for (int g = 0; g < 2; g++)
    for (int k = 0; k < 3; k++) {
      if (!names[g][k]) continue;
      ck_assert_msg(view_at(o1, names[g][k], slot[k], sizeof slot[k]) == 256 * k, "%%%s:\n%s", names[g][k], o1);
      ck_assert_msg(!strcmp(slot[k], slot[names[g][0] ? 0 : 1]), "%%%s in %s:\n%s", names[g][k], slot[k], o1);
    }
  free(o0);
  free(o1);
  float x[64], w[192 * 64], want[64], got[64];
  for (int i = 0; i < 64; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
  for (int i = 0; i < 192 * 64; i++) w[i] = (float)((i * 5) % 13) / 60.0f - 0.1f;
  const rill_type_t types[2] = {{RILL_F32, 2, {1, 64}}, {RILL_F32, 2, {192, 64}}};
  const float *in[2] = {x, w};
  const size_t bytes[1] = {64 * 4};
  run_f32(src, false, 2, types, in, 1, (float *const[]){want}, bytes);
  run_f32(src, true, 2, types, in, 1, (float *const[]){got}, bytes);
  ck_assert(!memcmp(got, want, bytes[0]));
  static const char *const keep[] = {
      /* a batch of 2 */
      "func @main(%x: f32[2,64], %w: f32[128,64]) -> f32[2,64] {\n  %h = linear(%x, %w)\n"
      "  %a, %b = split(%h) {axis=1, sizes=[64,64]}\n  %y = mul(%a, %b)\n  %q = neg(%y)\n  return %q\n}\n",
      /* a part returned */
      "func @main(%x: f32[1,64], %w: f32[128,64]) -> (f32[1,64], f32[1,64]) {\n  %h = linear(%x, %w)\n"
      "  %a, %b = split(%h) {axis=1, sizes=[64,64]}\n  %y = tanh(%a)\n  return %y, %b\n}\n",
      /* a part at 160 bytes */
      "func @main(%x: f32[1,64], %w: f32[128,64]) -> f32[1,88] {\n  %h = linear(%x, %w)\n"
      "  %a, %b = split(%h) {axis=1, sizes=[40,88]}\n  %y = tanh(%b)\n  return %y\n}\n",
      /* a parameter */
      "func @main(%h: f32[1,128]) -> f32[1,64] {\n  %a, %b = split(%h) {axis=1, sizes=[64,64]}\n  %y = mul(%a, %b)\n"
      "  %q = neg(%y)\n  return %q\n}\n",
  };
  for (size_t k = 0; k < sizeof keep / sizeof *keep; k++) {
    char *t = dis_text_opt("t.vmasm", keep[k], false);
    ck_assert_msg(count(t, "= split(") == 1, "program %zu:\n%s", k, t);
    free(t);
  }
}
END_TEST

/* -O1 merges linears that read one operand with constant weights into one
 * linear over the weights stacked and a split (views where the operand is
 * one row, a copy else): one stacked constant a module, shared by the
 * functions, the parts pruned; -O1's results equal -O0's for one row and
 * for three. Left apart: a part 160 bytes wide (not a multiple of 256)
 * ends the group after it; a linear with a bias. */
static char *stack_src(int rows, bool both) {
  rill_buf_t b;
  rill__buf_init(&b, rill_allocator_system()); /* (malloc: free() frees the text) */
  const char *names[3] = {"wq", "wk", "wv"};
  const int n[3] = {64, 64, 40};
  for (int w = 0; w < 3; w++) {
    ck_assert(!rill__buf_printf(&b, "const %%%s : f32[%d,4] = [", names[w], n[w]));
    for (int i = 0; i < n[w] * 4; i++) ck_assert(!rill__buf_printf(&b, "%s%g", i ? ", " : "", (double)((i * (7 + w)) % 11) / 10.0 - 0.5));
    ck_assert(!rill__buf_printf(&b, "]\n"));
  }
  const char *body = "  %q = linear(%x, %wq)\n  %v = linear(%x, %wv)\n  %k = linear(%x, %wk)\n"
                     "  %s = sum(%v) {axes=[1], keepdims=true}\n  %m = mul(%q, %k)\n  %y = add(%m, %s)\n  return %y\n}\n";
  ck_assert(!rill__buf_printf(&b, "func @main(%%x: f32[%d,4]) -> f32[%d,64] {\n", rows, rows));
  ck_assert(!rill__buf_printf(&b, "%s", body));
  if (both) {
    ck_assert(!rill__buf_printf(&b, "func @prompt(%%x: f32[%d,4]) -> f32[%d,64] {\n", rows + 2, rows + 2));
    ck_assert(!rill__buf_printf(&b, "%s", body));
  }
  ck_assert(!rill__buf_append(&b, "", 1));
  return (char *)b.data;
}

START_TEST(linears_stacked) {
  char *src = stack_src(1, true);
  char *o0 = dis_text_opt("t.vmasm", src, true), *o1 = dis_text_opt("t.vmasm", src, false);
  ck_assert_msg(!strstr(o0, "split") && strstr(o0, "= linear(f32[1,4], f32[40,4])"), "-O0");
  /* q and v stacked; v's 160 bytes end the group, so k stays apart */
  ck_assert_msg(strstr(o1, "= linear(f32[1,4], f32[104,4]) -> (f32[1,104])") && strstr(o1, "= linear(f32[3,4], f32[104,4]) -> (f32[3,104])"),
                "stacked");
  ck_assert_msg(count(o1, ": f32[104,4] = [") == 1 && !strstr(o1, "const %wq") && !strstr(o1, "const %wv") && strstr(o1, "const %wk"), "consts");
  ck_assert_msg(count(o1, "= linear(") == 4 && count(o1, "= split(") == 1 && strstr(o1, "= split(f32[3,104])"), "ops"); /* @main's is views */
  free(o0);
  free(o1);
  for (int rows = 1; rows <= 3; rows += 2) {
    char *one = stack_src(rows, false);
    float x[12], want[3 * 64], got[3 * 64];
    for (int i = 0; i < 12; i++) x[i] = (float)((i * 5) % 7) / 3.0f - 1.0f;
    const rill_type_t types[1] = {{RILL_F32, 2, {rows, 4}}};
    const float *in[1] = {x};
    const size_t bytes[1] = {(size_t)rows * 64 * 4};
    run_f32(one, false, 1, types, in, 1, (float *const[]){want}, bytes);
    run_f32(one, true, 1, types, in, 1, (float *const[]){got}, bytes);
    ck_assert_msg(!memcmp(got, want, bytes[0]), "rows %d", rows);
    free(one);
  }
  free(src);
  /* A state written between merged groups, layer after layer (each merge
   * takes a node out, so every later node moves): the state's versions
   * stay with their updates, and -O1 computes what -O0 does. */
  {
    rill_buf_t b;
    rill__buf_init(&b, rill_allocator_system());
    char *w = stack_src(1, false);
    *strstr(w, "func @main") = 0; /* the constants */
    ck_assert(!rill__buf_printf(&b, "%sconst %%p : f32[4,64] = fill(0.03125)\nstate %%s : f32[6,64]\n", w));
    free(w);
    for (int l = 0; l < 6; l++) ck_assert(!rill__buf_printf(&b, "const %%i%d : i64[] = %d\n", l, l));
    ck_assert(!rill__buf_printf(&b, "func @main(%%x0: f32[1,4]) -> (f32[1,4], f32[6,64]) {\n"));
    for (int l = 0; l < 6; l++)
      ck_assert(!rill__buf_printf(&b,
                                  "  %%a%d = linear(%%x%d, %%wq)\n  %%b%d = linear(%%x%d, %%wk)\n  %%v%d = linear(%%x%d, %%wv)\n"
                                  "  update(%%s, %%a%d, %%i%d) {axis=0}\n  %%r%d = copy(%%s)\n  %%t%d = sum(%%r%d) {axes=[0], keepdims=true}\n"
                                  "  %%m%d = mul(%%t%d, %%b%d)\n  %%n%d = sum(%%v%d) {axes=[1], keepdims=true}\n  %%f%d = add(%%m%d, %%n%d)\n"
                                  "  %%x%d = linear(%%f%d, %%p)\n",
                                  l, l, l, l, l, l, l, l, l, l, l, l, l, l, l, l, l, l, l, l + 1, l));
    ck_assert(!rill__buf_printf(&b, "  %%y = copy(%%s)\n  return %%x6, %%y\n}\n"));
    ck_assert(!rill__buf_append(&b, "", 1));
    const char *st_src = (const char *)b.data;
    char *t = dis_text_opt("t.vmasm", st_src, false);
    ck_assert_msg(strstr(t, "= linear(f32[1,4], f32[168,4]) -> (f32[1,168])"), "stacked with a state");
    free(t);
    float x[4] = {0.5f, -1.0f, 0.25f, 2.0f}, want[4 + 384], got[4 + 384];
    const rill_type_t types[1] = {{RILL_F32, 2, {1, 4}}};
    const float *in[1] = {x};
    const size_t bytes[2] = {4 * 4, 384 * 4};
    run_f32(st_src, false, 1, types, in, 2, (float *const[]){want, want + 4}, bytes);
    run_f32(st_src, true, 1, types, in, 2, (float *const[]){got, got + 4}, bytes);
    ck_assert(!memcmp(got, want, sizeof want));
    free(b.data);
  }
  /* a bias keeps a linear apart */
  const char *bias = "const %b : f32[64] = fill(0.5)\nconst %w1 : f32[64,4] = fill(0.25)\nconst %w2 : f32[64,4] = fill(0.75)\n"
                     "func @main(%x: f32[1,4]) -> f32[1,64] {\n  %p = linear(%x, %w1, %b)\n  %q = linear(%x, %w2)\n  %y = mul(%p, %q)\n"
                     "  return %y\n}\n";
  char *t = dis_text_opt("t.vmasm", bias, false);
  ck_assert_msg(count(t, "= linear(") == 2 && !strstr(t, "split"), "%s", t);
  free(t);
}
END_TEST

START_TEST(link_weights) {
  char path[4200], out[4200];
  snprintf(path, sizeof path, "%s/weights.vmasm", fixtures_dir());
  rill_asm_options_t o = {.link_weights = true, .no_opt = true}, e = {.no_opt = true};
  uint8_t *linked, *embedded;
  size_t nl, ne;
  ck_assert(!rill_assemble_file(NULL, path, &o, &linked, &nl));
  ck_assert(!rill_assemble_file(NULL, path, &e, &embedded, &ne));
  ck_assert_uint_ge(ne, nl + 180); /* the 180 bytes of weights stay out of the module */
  snprintf(out, sizeof out, "%s", fixtures_dir());
  rill_module_t *m;
  rill_status_t st = rill_module_load(NULL, linked, nl, out, &m);
  ck_assert_msg(!st, "%s", rill_status_message(st));
  rill_module_release(m);
  /* Resolved against another folder, the weights are missing: a clear error. */
  st = rill_module_load(NULL, linked, nl, "/nonexistent", &m);
  ck_assert(st && strstr(rill_status_message(st), "linked weights"));
  rill_status_free(st);
  free(linked);
  free(embedded);
}
END_TEST

/* Strings of the source with control bytes (an attribute's value, a file
 * name) are escaped where a diagnostic echoes them, as is a stray byte. */
START_TEST(diagnostics_escaped) {
  uint8_t *b = NULL;
  size_t n = 0;
  expect_escaped(asm_text("func @main(%x: f32[2]) -> f32[2] {\n  %y = gelu(%x) {approximate=\"no\x1b[31mne\x07\"}\n  return %y\n}\n", &b, &n),
                 "found \"no\\x1b[31mne\\x07\"");
  expect_asm_error("weights \"w\x1b[2J.safetensors\" as w\nconst %c : f32[2] = w[\"k\"]\n", 1, "w\\x1b[2J.safetensors");
  expect_escaped(asm_text("weights \"w\x1b[2J\xff.safetensors\" as w\nconst %c : f32[2] = w[\"k\"]\n", &b, &n),
                 "w\\x1b[2J\\xff.safetensors");
  expect_escaped(asm_text("func @main(%x: f32[2]) -> f32[2] {\n  \x1b\n}\n", &b, &n), "unexpected byte 0x1b");
}
END_TEST

/* rill_op_eval: one op on host data by its CPU reference kernel, the
 * attributes read as a statement's; errors as statuses. */
START_TEST(op_eval) {
  rill_type_t xt = {RILL_I64, 2, {2, 3}}, it = {RILL_I64, 1, {2}}, ot[2];
  int64_t x[6] = {1, 2, 3, 4, 5, 6}, idx[2] = {2, 0};
  const void *in[2] = {x, idx};
  rill_type_t ts[2] = {xt, it};
  void *out[2];
  int n;
  ck_assert(!rill_op_eval("gather", "axis=1", ts, in, 2, ot, out, 2, &n));
  ck_assert_int_eq(n, 1);
  ck_assert(ot[0].rank == 2 && ot[0].dims[0] == 2 && ot[0].dims[1] == 2 && ot[0].dtype == RILL_I64);
  int64_t want[4] = {3, 1, 6, 4};
  ck_assert(!memcmp(out[0], want, sizeof want));
  free(out[0]);
  ck_assert(!rill_op_eval("sum", "axes=[0], keepdims=false", ts, in, 1, ot, out, 2, &n));
  int64_t want2[3] = {5, 7, 9};
  ck_assert(n == 1 && ot[0].rank == 1 && !memcmp(out[0], want2, sizeof want2));
  free(out[0]);
  rill_status_t st = rill_op_eval("sum", "axes=[0", ts, in, 1, ot, out, 2, &n);
  ck_assert(st && rill_status_code(st) == RILL_ASSEMBLY_ERROR && n == 0);
  rill_status_free(st);
  idx[0] = 7; /* out of range: the kernel's run-time error */
  st = rill_op_eval("gather", "axis=1", ts, in, 2, ot, out, 2, &n);
  ck_assert(st && rill_status_code(st) != RILL_ASSEMBLY_ERROR && n == 0);
  rill_status_free(st);
  st = rill_op_eval("frobnicate", NULL, ts, in, 1, ot, out, 2, &n);
  ck_assert(st && rill_status_code(st) == RILL_NOT_FOUND);
  rill_status_free(st);
}
END_TEST

/* ---- --precision ---- */
/* @main of the program at fixture path `rel` (under the source tree),
 * assembled with `o`, run on the cpu on seeded inputs in [-1, 1): its
 * first result as doubles (freed by the caller), and the disassembly. */
static double *run_precision(const char *rel, const rill_asm_options_t *o, const rill_type_t *in, int nin, size_t *out_n, char **out_dis) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", fixtures_dir(), rel);
  uint8_t *bytes;
  size_t size;
  rill_status_t st = rill_assemble_file(NULL, path, o, &bytes, &size);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, bytes, size, ".", &m));
  free(bytes);
  ck_assert_int_eq(rill_module_precision(m), o->precision);
  size_t len;
  ck_assert(!rill_module_disassemble(m, out_dis, &len));
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  rill_tensor_t *args[4];
  uint64_t seed = 12345;
  for (int i = 0; i < nin; i++) {
    size_t n = rill_type_numel(&in[i]);
    float *x = malloc(n * sizeof(float));
    for (size_t k = 0; k < n; k++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      x[k] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2 - 1);
    }
    ck_assert(!rill_tensor_create(vm, &in[i], x, &args[i]));
    free(x);
  }
  rill_tensor_t **res;
  int nres;
  st = rill_vm_invoke(vm, "main", args, nin, &res, &nres);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  const rill_type_t *t = rill_tensor_type(res[0]);
  ck_assert_int_eq(t->dtype, RILL_F32); /* results keep their declared type */
  size_t n = rill_type_numel(t);
  float *y = malloc(n * sizeof(float));
  double *out = malloc(n * sizeof(double));
  ck_assert(!rill_tensor_read(res[0], y, n * sizeof(float)));
  for (size_t k = 0; k < n; k++) out[k] = y[k];
  free(y);
  for (int i = 0; i < nres; i++) rill_tensor_release(res[i]);
  free(res);
  for (int i = 0; i < nin; i++) rill_tensor_release(args[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
  *out_n = n;
  return out;
}

/* An f32 MLP, a convolutional net with batch norm, and a transformer
 * encoder (softmax, layer norms, GELU) run with --precision=f16 and bf16
 * at -O0 and -O1 give their f32 results within the half dtype's rounding
 * (a few units of 2^-11 or 2^-8 of the result's scale, from rounding each
 * layer's inputs, weights and outputs), but not the same bits; the
 * module says its mode, products and convolutions are in half, a pool
 * between half ops is too, and a softmax or layer norm whose result is
 * returned or whose operand is f32 stays in f32. */
START_TEST(precision_half) {
  static const struct {
    const char *path;
    rill_type_t in;
    const char *half_ops[2], *f32_ops[2];
  } progs[] = {
      /* the softmax's result is returned: f32 */
      {"../../examples/mlp/mlp.vmasm", {RILL_F32, 2, {4, 16}}, {"linear(", NULL}, {"softmax(f32", NULL}},
      /* the adaptive pool's operand is half and a product reads its result: half */
      {"cnn.vmasm", {RILL_F32, 4, {1, 2, 9, 9}}, {"conv2d(", "adaptive_avg_pool2d("}, {NULL, NULL}},
      /* -O1: softmax in attention; the first norm reads the f32 parameter */
      {"encoder_f32_dyn.vmasm", {RILL_F32, 3, {1, 8, 16}}, {"linear(", NULL}, {"layer_norm(f32", NULL}},
  };
  for (size_t p = 0; p < RILL_ARRAY_LEN(progs); p++)
    for (int lvl = 0; lvl < 2; lvl++) {
      rill_asm_options_t ex = {.no_opt = lvl == 0};
      size_t n, nh;
      char *dis;
      double *want = run_precision(progs[p].path, &ex, &progs[p].in, 1, &n, &dis);
      ck_assert_msg(!strstr(dis, "precision ") && !strstr(dis, "f16["), "%s", dis);
      free(dis);
      double scale = 0;
      for (size_t k = 0; k < n; k++) scale = fmax(scale, fabs(want[k]));
      for (int h = 0; h < 2; h++) {
        rill_asm_options_t o = ex;
        o.precision = h ? RILL_PRECISION_BF16 : RILL_PRECISION_F16;
        const char *dt = h ? "bf16" : "f16";
        double *got = run_precision(progs[p].path, &o, &progs[p].in, 1, &nh, &dis);
        ck_assert_uint_eq(nh, n);
        char line[64], op[64];
        snprintf(line, sizeof line, "\nprecision %s\n", dt);
        ck_assert_msg(strstr(dis, line), "%s -O%d %s:\n%s", progs[p].path, lvl, dt, dis);
        for (int k = 0; k < 2 && progs[p].half_ops[k]; k++) {
          snprintf(op, sizeof op, "%s%s[", progs[p].half_ops[k], dt);
          ck_assert_msg(strstr(dis, op), "%s -O%d %s: no %s:\n%s", progs[p].path, lvl, dt, op, dis);
        }
        for (int k = 0; k < 2; k++)
          ck_assert_msg(!progs[p].f32_ops[k] || strstr(dis, progs[p].f32_ops[k]), "%s: %s not in f32:\n%s", progs[p].path, progs[p].f32_ops[k], dis);
        free(dis);
        /* 2^-11 (f16) or 2^-8 (bf16) of the scale, a few times over (about one was measured) */
        double u = h ? 1.0 / 256 : 1.0 / 2048, worst = 0;
        for (size_t k = 0; k < n; k++) worst = fmax(worst, fabs(got[k] - want[k]));
        ck_assert_msg(worst <= 4 * u * fmax(scale, 1e-3), "%s -O%d %s: error %g, scale %g", progs[p].path, lvl, dt, worst, scale);
        ck_assert_msg(worst > 0, "%s -O%d %s: the same bits as f32", progs[p].path, lvl, dt);
        free(got);
      }
      free(want);
    }
}
END_TEST

/* A group norm written out (group_norm_f32.vmasm: a convolution's result
 * of magnitude about 1000, deviations of several hundred) with
 * --precision=f16 and bf16 at -O0 and -O1 keeps its statistics in f32: no
 * half mean, sub or square (in f16 the squares passed its range, the
 * variance was inf and every group came out 0), the convolution and the
 * affine after in half, the result within a few units of the half dtype
 * of the f32 one. */
START_TEST(precision_norm_stats) {
  rill_type_t in[4] = {{RILL_F32, 4, {2, 4, 10, 10}}, {RILL_F32, 4, {8, 4, 3, 3}}, {RILL_F32, 2, {4, 1}}, {RILL_F32, 2, {4, 1}}};
  for (int lvl = 0; lvl < 2; lvl++)
    for (int h = 0; h < 2; h++) {
      rill_asm_options_t ex = {.no_opt = lvl == 0}, o = ex;
      o.precision = h ? RILL_PRECISION_BF16 : RILL_PRECISION_F16;
      const char *dt = h ? "bf16" : "f16";
      size_t n, nh;
      char *dis, half[64];
      double *want = run_precision("group_norm_f32.vmasm", &ex, in, 4, &n, &dis);
      free(dis);
      double *got = run_precision("group_norm_f32.vmasm", &o, in, 4, &nh, &dis);
      ck_assert_uint_eq(n, nh);
      snprintf(half, sizeof half, "conv2d(%s[", dt);
      ck_assert_msg(strstr(dis, half) && strstr(dis, "mean(f32[2,4,128]) -> (f32[2,4,1])"), "-O%d %s:\n%.2000s", lvl, dt, dis);
      char no[3][64];
      snprintf(no[0], sizeof no[0], "mean(%s[", dt);
      snprintf(no[1], sizeof no[1], "sub(%s[2,4,128]", dt);
      snprintf(no[2], sizeof no[2], "mul(%s[2,4,128], %s[2,4,128])", dt, dt);
      for (int k = 0; k < 3; k++) ck_assert_msg(!strstr(dis, no[k]), "-O%d %s: %s in half:\n%.2000s", lvl, dt, no[k], dis);
      free(dis);
      /* normalised values of magnitude about 1 to 3 (gamma, beta in [-1, 1)), each rounded a few times in half */
      double u = h ? 1.0 / 256 : 1.0 / 2048, worst = 0, scale = 0;
      for (size_t k = 0; k < n; k++) {
        scale = fmax(scale, fabs(want[k]));
        worst = fmax(worst, fabs(got[k] - want[k]));
      }
      ck_assert_msg(scale > 0.5 && worst <= 8 * u * scale, "-O%d %s: error %g at scale %g", lvl, dt, worst, scale);
      free(want);
      free(got);
    }
  /* moves between the steps (norm_moves_f32.vmasm): the squares, their reshape, the variance, its reshape and + eps in f32 */
  rill_type_t mv = {RILL_F32, 3, {2, 4, 128}};
  for (int lvl = 0; lvl < 2; lvl++) {
    rill_asm_options_t ex = {.no_opt = lvl == 0}, o = ex;
    o.precision = RILL_PRECISION_F16;
    size_t n, nh;
    char *dis;
    double *want = run_precision("norm_moves_f32.vmasm", &ex, &mv, 1, &n, &dis);
    free(dis);
    double *got = run_precision("norm_moves_f32.vmasm", &o, &mv, 1, &nh, &dis);
    ck_assert(!lvl || !strstr(dis, "f16[2,4,128], f16[2,4,128])"));
    ck_assert_msg(!strstr(dis, "reshape(f16") && !strstr(dis, "mean(f16") && !strstr(dis, "add(f16[2,4,1]"), "-O%d:\n%.2000s", lvl, dis);
    free(dis);
    double worst = 0, scale = 0;
    for (size_t k = 0; k < n; k++) {
      scale = fmax(scale, fabs(want[k]));
      worst = fmax(worst, fabs(got[k] - want[k]));
    }
    ck_assert_msg(scale > 1 && worst <= 8.0 / 2048 * scale, "-O%d: error %g at scale %g", lvl, worst, scale);
    free(want);
    free(got);
  }
  /* a mean in a classifier head (pool_head_f32.vmasm): the relu and the mean stay in half */
  rill_type_t hd[3] = {{RILL_F32, 4, {2, 4, 10, 10}}, {RILL_F32, 4, {8, 4, 3, 3}}, {RILL_F32, 2, {8, 8}}};
  rill_asm_options_t ho = {.no_opt = true, .precision = RILL_PRECISION_F16};
  size_t hn;
  char *hdis;
  free(run_precision("pool_head_f32.vmasm", &ho, hd, 3, &hn, &hdis));
  ck_assert_msg(strstr(hdis, "relu(f16[") && strstr(hdis, "mean(f16[") && !strstr(hdis, "cast(f16[2,8,8,8]) -> (f32"), "%.2000s", hdis);
  free(hdis);
}
END_TEST

/* A layer norm, a copy and a softmax between products (norms_f32.vmasm) run with
 * --precision=f16 on the first product's half result and make half
 * results, the norm's gamma left in f32: no cast between the products, at
 * -O0 and -O1. Their values are those of the f32 ops between casts
 * (norms_f16_casts.vmasm, the casts written out) but for the double
 * rounding (f64 to f32 to f16 on the cpu device) the casts added: at most
 * a unit of f16 at the result's scale apart, nearly all the same bits. A
 * norm whose result is also returned stays in f32. The op itself: a half
 * x with f32 gamma and beta gives the f32 op on x's values rounded to half
 * once; gamma and beta must both be x's dtype or both f32 for a half x. */
START_TEST(precision_row_ops) {
  rill_type_t in[4] = {{RILL_F32, 2, {6, 40}}, {RILL_F32, 2, {40, 40}}, {RILL_F32, 1, {40}}, {RILL_F32, 2, {24, 40}}};
  for (int lvl = 0; lvl < 2; lvl++) {
    rill_asm_options_t ex = {.no_opt = lvl == 0}, o = ex;
    o.precision = RILL_PRECISION_F16;
    size_t n, nh;
    char *dis;
    double *want = run_precision("norms_f16_casts.vmasm", &ex, in, 4, &n, &dis);
    free(dis);
    double *got = run_precision("norms_f32.vmasm", &o, in, 4, &nh, &dis);
    ck_assert_uint_eq(n, nh);
    ck_assert_msg(strstr(dis, "layer_norm(f16[6,40], f32[40]) -> (f16[6,40])") && strstr(dis, "softmax(f16[6,40]) -> (f16[6,40])") &&
                      (lvl || strstr(dis, "copy(f16[6,40]) -> (f16[6,40])")) &&
                      !strstr(dis, "cast(f16[6,40]) -> (f32"),
                  "-O%d:\n%s", lvl, dis);
    free(dis);
    double scale = 0, worst = 0;
    size_t same = 0;
    for (size_t k = 0; k < n; k++) scale = fmax(scale, fabs(want[k]));
    for (size_t k = 0; k < n; k++) {
      worst = fmax(worst, fabs(got[k] - want[k]));
      same += got[k] == want[k];
    }
    ck_assert_msg(worst <= scale / 1024 && same * 10 >= n * 9, "-O%d: worst %g at scale %g, %zu of %zu the same", lvl, worst, scale, same, n);
    free(want);
    free(got);
  }
  /* read by a return too: in f32 */
  static const char both[] = "func @main(%x: f32[2,8], %w: f32[8,8]) -> (f32[2,8], f32[2,8]) {\n  %h = linear(%x, %w)\n"
                             "  %n = layer_norm(%h)\n  %y = linear(%n, %w)\n  return %y, %n\n}\n";
  rill_asm_options_t ho = {.precision = RILL_PRECISION_BF16};
  uint8_t *b;
  size_t bn, len;
  rill_module_t *m;
  char *t;
  ck_assert(!rill_assemble(NULL, "both.vmasm", both, strlen(both), &ho, &b, &bn));
  ck_assert(!rill_module_load(NULL, b, bn, ".", &m));
  free(b);
  ck_assert(!rill_module_disassemble(m, &t, &len));
  ck_assert_msg(strstr(t, "layer_norm(f32[2,8]) -> (f32[2,8])") && !strstr(t, "layer_norm(bf16"), "%s", t);
  free(t);
  rill_module_release(m);
  /* the op: f16 x, f32 gamma and beta */
  enum { R = 5, N = 48 };
  double xv[R * N], gv[N], bv[N];
  uint64_t seed = 7;
  for (int k = 0; k < R * N + 2 * N; k++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    double v = (double)(seed >> 11) / 9007199254740992.0 * 4 - 2;
    if (k < R * N) xv[k] = v;
    else if (k < R * N + N) gv[k - R * N] = v;
    else bv[k - R * N - N] = v;
  }
  op_io_t mi[3] = {tensor_f(T(RILL_F16, 2, R, N), xv), tensor_f(T(RILL_F32, 1, N), gv), tensor_f(T(RILL_F32, 1, N), bv)};
  op_io_t fi[3] = {tensor_f(T(RILL_F32, 2, R, N), NULL), tensor_f(T(RILL_F32, 1, N), gv), tensor_f(T(RILL_F32, 1, N), bv)};
  for (int k = 0; k < R * N; k++) rill_element_set(RILL_F32, fi[0].data, k, at_f(&mi[0], k)); /* x's half values */
  op_io_t mo[1], fo[1];
  uint32_t nout;
  ck_assert(!run_op("layer_norm", mi, 3, NULL, 0, mo, 1, &nout) && nout == 1 && mo[0].type.dtype == RILL_F16);
  ck_assert(!run_op("layer_norm", fi, 3, NULL, 0, fo, 1, &nout) && nout == 1);
  int same = 0;
  for (int k = 0; k < R * N; k++) {
    double h = at_f(&mo[0], k), f = at_f(&fo[0], k);
    ck_assert_msg(fabs(h - f) <= fmax(fabs(f), 1.0 / 16384) / 2048, "%d: %g vs %g", k, h, f); /* half's rounding */
    uint16_t hb;
    rill_element_set(RILL_F16, &hb, 0, f);
    same += rill_element_get(RILL_F16, &hb, 0) == h;
  }
  ck_assert_int_ge(same, R * N - 2); /* the f32 result rounded to half: the same but for a double rounding */
  op_io_free(mo, 1);
  op_io_free(fo, 1);
  op_io_free(fi, 3);
  op_io_t bad[3] = {mi[0], mi[1], tensor_f(T(RILL_F16, 1, N), bv)};
  rill_status_t st = run_op("layer_norm", bad, 3, NULL, 0, mo, 1, &nout);
  ck_assert_msg(st && strstr(rill_status_message(st), "beta: expected f32[48]"), "%s", st ? rill_status_message(st) : "ok");
  rill_status_free(st);
  op_io_free(&bad[2], 1);
  op_io_t bad2[2] = {tensor_f(T(RILL_F64, 2, R, N), xv), mi[1]};
  st = run_op("layer_norm", bad2, 2, NULL, 0, mo, 1, &nout);
  ck_assert_msg(st && strstr(rill_status_message(st), "gamma: expected f64[48]"), "%s", st ? rill_status_message(st) : "ok");
  rill_status_free(st);
  op_io_free(bad2, 1);
  op_io_free(mi, 3);
}
END_TEST

/* The mode: a `precision` statement (as rill dis prints it) sets it and
 * must agree with the options; bad modes are refused; tf32 changes only
 * the module's mode, not its ops. */
START_TEST(precision_statement) {
  static const char prog[] = "func @main(%x: f32[2,2], %w: f32[2,2]) -> f32[2,2] {\n  %y = matmul(%x, %w)\n  %z = exp(%y)\n  return %z\n}\n";
  char src[512];
  snprintf(src, sizeof src, "precision f16\n%s", prog);
  uint8_t *b;
  size_t n;
  ck_assert(!asm_text(src, &b, &n));
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  free(b);
  ck_assert_int_eq(rill_module_precision(m), RILL_PRECISION_F16);
  char *t;
  size_t len;
  ck_assert(!rill_module_disassemble(m, &t, &len));
  ck_assert_msg(strstr(t, "matmul(f16[2,2], f16[2,2]) -> (f16[2,2])") && strstr(t, "t0 = cast(x0) {dtype=f32}; t1 = exp(t0)"), "%s", t);
  free(t);
  rill_module_release(m);
  expect_asm_error("precision f8\nfunc @main(%x: f32[2]) -> f32[2] {\n  return %x\n}\n", 1, "expected a precision mode (exact, tf32, f16 or bf16), found");
  expect_asm_error("precision f16\nprecision f16\n", 2, "'precision' is given twice");
  rill_asm_options_t o = {.precision = RILL_PRECISION_BF16};
  rill_status_t st = rill_assemble(NULL, "p.vmasm", src, strlen(src), &o, &b, &n);
  ck_assert(st && strstr(rill_status_message(st), "p.vmasm:1:11: error: the source says precision f16, the options bf16"));
  rill_status_free(st);
  o.precision = (rill_precision_t)9;
  st = rill_assemble(NULL, "p.vmasm", prog, strlen(prog), &o, &b, &n);
  ck_assert(st && rill_status_code(st) == RILL_INVALID_ARGUMENT && strstr(rill_status_message(st), "--precision"));
  rill_status_free(st);
  o.precision = RILL_PRECISION_TF32;
  ck_assert(!rill_assemble(NULL, "p.vmasm", prog, strlen(prog), &o, &b, &n));
  ck_assert(!rill_module_load(NULL, b, n, ".", &m));
  free(b);
  ck_assert(!rill_module_disassemble(m, &t, &len));
  ck_assert_msg(strstr(t, "\nprecision tf32\n") && strstr(t, "matmul(f32[2,2], f32[2,2])"), "%s", t);
  free(t);
  rill_module_release(m);
  /* a constant or attribute past f16's range keeps its op in f32 (bf16 has the range) */
  static const char big[] = "func @main(%x: f32[2,2]) -> (f32[2,2], f32[2,2], f32[2,2]) {\n  %y = mul(%x, -1e9)\n  %z = add(%x, 2.0)\n"
                            "  %p = pad(%x) {pads=[0,0,0,0], value=1e6}\n  return %y, %z, %p\n}\n";
  for (int h = 0; h < 2; h++) {
    rill_asm_options_t ho = {.precision = h ? RILL_PRECISION_BF16 : RILL_PRECISION_F16, .no_opt = true};
    ck_assert(!rill_assemble(NULL, "big.vmasm", big, strlen(big), &ho, &b, &n));
    ck_assert(!rill_module_load(NULL, b, n, ".", &m));
    free(b);
    ck_assert(!rill_module_disassemble(m, &t, &len));
    ck_assert_msg(h ? strstr(t, "mul(bf16[2,2], bf16[])") && strstr(t, "pad(bf16[2,2])")
                    : !strstr(t, "mul(f16") && !strstr(t, "pad(f16") && strstr(t, "add(f16[2,2], f16[])"), "%s", t);
    free(t);
    rill_module_release(m);
  }
  rill_precision_t p;
  ck_assert(rill_precision_from_name("bf16", &p) && p == RILL_PRECISION_BF16);
  ck_assert(!rill_precision_from_name("BF16", &p) && !rill_precision_from_name("", &p) && !rill_precision_from_name(NULL, &p));
  ck_assert_str_eq(rill_precision_name(RILL_PRECISION_EXACT), "exact");
  ck_assert(rill_precision_name(RILL_PRECISION_COUNT) == NULL);
}
END_TEST

Suite *asm_suite(void);
Suite *asm_suite(void) {
  Suite *s = suite_create("assembler");
  TCase *t = tcase_create("assembler");
  tcase_set_timeout(t, 120);
  tcase_add_test(t, diagnostics);
  tcase_add_test(t, diagnostics_escaped);
  tcase_add_test(t, op_eval);
  tcase_add_test(t, stream_check);
  tcase_add_test(t, roundtrip_fixtures);
  tcase_add_test(t, optimise_counts);
  tcase_add_test(t, concat_in_place);
  tcase_add_test(t, split_in_place);
  tcase_add_test(t, linears_stacked);
  tcase_add_test(t, memory_plan);
  tcase_add_test(t, allocation_failures);
  tcase_add_test(t, link_weights);
  tcase_add_test(t, precision_half);
  tcase_add_test(t, precision_statement);
  tcase_add_test(t, precision_row_ops);
  tcase_add_test(t, precision_norm_stats);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return run_suite(asm_suite()); }
