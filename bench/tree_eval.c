/* tree_eval.c: the cost of choosing an op's kernel per size: evaluating a
 * fitted decision tree (rill_tree_eval) of the largest depth `rill tune`
 * fits (4 splits), over two shape variables, for bindings that reach every
 * leaf. Prints ns per evaluation (one op of one instance).
 *   bench_tree_eval [evaluations]   (default 20,000,000) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "rill.h"

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000000;
  /* 16 sizes of each of S and T; 16 candidates, each fastest in its own
   * region of the plane, so the fit uses its full depth. */
  enum { NS = 16 * 16, NC = 16 };
  static int64_t x[NS * 2];
  static double us[NS * NC];
  for (int i = 0; i < NS; i++) {
    int64_t s = (int64_t)1 << (i / 16 % 16), t = (int64_t)1 << (i % 16);
    x[2 * i] = s;
    x[2 * i + 1] = t;
    int best = (i / 16 / 4) * 4 + (i % 16) / 4;
    for (int c = 0; c < NC; c++) us[i * NC + c] = c == best ? 10 : 20;
  }
  rill_tree_node_t nodes[31];
  uint32_t nn;
  rill_status_t st = rill_tree_fit(x, NS, 2, us, NC, 4, nodes, &nn);
  if (st) {
    fprintf(stderr, "%s\n", rill_status_message(st));
    return 1;
  }
  int depth = 0;
  for (uint32_t i = 0; i < nn; i++) depth += nodes[i].var >= 0;
  /* bindings: a pseudo-random walk over the samples */
  int64_t vals[4096][2];
  uint64_t r = 88172645463325252ull;
  for (int i = 0; i < 4096; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    vals[i][0] = x[2 * (r % NS)];
    vals[i][1] = x[2 * (r % NS) + 1] + (int64_t)(r >> 60);
  }
  volatile uint32_t sink = 0;
  uint32_t acc = 0;
  for (long i = 0; i < 100000; i++) acc += rill_tree_eval(nodes, vals[i & 4095]);
  double t0 = now_ns();
  for (long i = 0; i < n; i++) acc += rill_tree_eval(nodes, vals[i & 4095]);
  double t1 = now_ns();
  sink = acc;
  (void)sink;
  printf("tree of %u nodes (%d splits), depth 4, 2 variables: %.2f ns per evaluation (%ld evaluations)\n", nn, depth, (t1 - t0) / (double)n, n);
  return 0;
}
