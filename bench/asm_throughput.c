/* asm_throughput.c: assembler speed on a generated program of N ops
 * (default 100000): a function of elementwise ops over several live
 * values, with literals, calls to a helper and shape ops, so every pass
 * (names, inference, liveness, memory plan, registers, verifier, writer)
 * sees a large input.
 *   bench_asm_throughput [N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  size_t cap = (size_t)n * 64 + 4096, len = 0;
  char *s = malloc(cap);
  len += (size_t)snprintf(s + len, cap - len, "func @helper(%%a: f32[8,16]) -> f32[8,16] {\n  %%b = tanh(%%a)\n  return %%b\n}\n"
                          "func @main(%%x: f32[8,16]) -> f32[8,16] {\n  %%v0 = relu(%%x)\n");
  for (long i = 1; i < n; i++) {
    long a = i - 1, b = i > 7 ? i - 7 : 0;
    char *p = s + len;
    size_t room = cap - len;
    int w;
    switch (i % 8) {
      case 0: w = snprintf(p, room, "  %%v%ld = add(%%v%ld, %%v%ld)\n", i, a, b); break;
      case 1: w = snprintf(p, room, "  %%v%ld = mul(%%v%ld, 0.5)\n", i, a); break;
      case 2: w = snprintf(p, room, "  %%v%ld = sigmoid(%%v%ld)\n", i, a); break;
      case 3: w = snprintf(p, room, "  %%v%ld = sub(%%v%ld, %%v%ld)\n", i, a, b); break;
      case 4: w = snprintf(p, room, "  %%v%ld = call @helper(%%v%ld)\n", i, a); break;
      case 5: w = snprintf(p, room, "  %%v%ld = maximum(%%v%ld, %%v%ld)\n", i, a, b); break;
      case 6: w = snprintf(p, room, "  %%v%ld = neg(%%v%ld)\n", i, a); break;
      default: w = snprintf(p, room, "  %%v%ld = transpose(%%v%ld) {perm=[0, 1]}\n", i, a); break;
    }
    len += (size_t)w;
  }
  len += (size_t)snprintf(s + len, cap - len, "  return %%v%ld\n}\n", n - 1);
  double best = 1e9;
  size_t size = 0;
  for (int r = 0; r < 5; r++) {
    uint8_t *bytes;
    double t0 = now_s();
    rill_status_t st = rill_assemble(NULL, "gen.vmasm", s, len, NULL, &bytes, &size);
    double t1 = now_s();
    if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); return 1; }
    free(bytes);
    if (t1 - t0 < best) best = t1 - t0;
  }
  printf("assembled %ld ops (%zu bytes of source, %zu bytes of bytecode) in %.3f s (best of 5): %.0f ops/s\n", n, len, size, best, (double)n / best);
  free(s);
  return 0;
}
