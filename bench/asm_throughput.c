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

/* The generated program: op i reads op i - lanes (one chain for lanes = 1,
 * interleaved chains otherwise) and op i - 7. */
static char *generate(long n, long lanes, size_t *out_len) {
  size_t cap = (size_t)n * 64 + 4096, len = 0;
  char *s = malloc(cap);
  if (!s) return NULL;
  len += (size_t)snprintf(s + len, cap - len, "func @helper(%%a: f32[8,16]) -> f32[8,16] {\n  %%b = tanh(%%a)\n  return %%b\n}\n"
                          "func @main(%%x: f32[8,16]) -> f32[8,16] {\n  %%v0 = relu(%%x)\n");
  for (long i = 1; i < n; i++) {
    long a = i >= lanes ? i - lanes : 0, b = i > 7 ? i - 7 : 0;
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
  *out_len = len;
  return s;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  /* One chain, then four interleaved chains (where the schedules use several streams); each under one
   * stream and each automatic schedule with the default stream limit. */
  static const char *policies[] = {NULL, "wavefront", "asap", "rank", "ios"};
  for (long lanes = 1; lanes <= 4; lanes += 3) {
    size_t len;
    char *s = generate(n, lanes, &len);
    if (!s) return 1;
    for (size_t k = 0; k < sizeof policies / sizeof *policies; k++) {
      rill_asm_options_t opt = {.schedule = policies[k]};
      double best = 1e9;
      size_t size = 0;
      for (int r = 0; r < 5; r++) {
        uint8_t *bytes;
        double t0 = now_s();
        rill_status_t st = rill_assemble(NULL, "gen.vmasm", s, len, &opt, &bytes, &size);
        double t1 = now_s();
        if (st) { fprintf(stderr, "%s\n", rill_status_message(st)); return 1; }
        free(bytes);
        if (t1 - t0 < best) best = t1 - t0;
      }
      printf("%ld chain%s, schedule %-9s: %ld ops (%zu bytes of source, %zu of bytecode) in %.3f s (best of 5): %.0f ops/s\n",
             lanes, lanes == 1 ? " " : "s", policies[k] ? policies[k] : "none", n, len, size, best, (double)n / best);
    }
    free(s);
  }
  return 0;
}
