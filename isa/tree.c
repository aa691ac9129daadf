/* tree.c: decision trees that choose an op's kernel per size (the DietCode
 * seed): evaluation, the structural check shared by the module reader and
 * the verifier, and the fit from measurements that `rill tune` makes.
 *
 * A tree is preorder nodes: a split's `yes` child is the next node and its
 * `no` child follows the `yes` subtree, so a tree has one layout and the
 * writer's bytes, the disassembler's text and the reader agree on it.
 */
#include "isa.h"

#include <math.h>
#include <stdlib.h>

#define MAX_NODES ((2u << RILL_TREE_MAX_DEPTH) - 1)
_Static_assert(RILL_TREE_MAX_DEPTH == 8, "the message below says 8");

uint32_t rill_tree_eval(const rill_tree_node_t *nodes, const int64_t *vals) {
  const rill_tree_node_t *n = nodes;
  while (n->var >= 0) n = &nodes[vals[n->var] <= n->le ? n->yes : n->no];
  return n->use;
}

const char *isa_tree_check(const isa_tree_t *t, uint32_t nvars) {
  uint32_t n = t->nnodes;
  if (n == 0 || n > MAX_NODES) return "bad node count";
  if (t->ncands == 0 || t->ncands > n) return "bad candidate count";
  uint32_t size[MAX_NODES];
  uint8_t depth[MAX_NODES];
  for (uint32_t i = n; i-- > 0;) {
    const rill_tree_node_t *x = &t->nodes[i];
    if (x->var < 0) {
      if (x->var != -1 || x->use >= t->ncands || x->le != 0 || x->yes != 0 || x->no != 0) return "bad leaf";
      size[i] = 1;
      continue;
    }
    if ((uint32_t)x->var >= nvars) return "a split names an unknown shape variable";
    if (x->use != 0 || x->yes != i + 1 || x->no <= x->yes || x->no >= n || x->no != x->yes + size[x->yes])
      return "children out of preorder (a cycle, a shared node or a gap)";
    size[i] = 1 + size[x->yes] + size[x->no];
  }
  if (size[0] != n) return "nodes outside the tree";
  depth[0] = 0;
  uint32_t next = 0;
  for (uint32_t i = 0; i < n; i++) {
    const rill_tree_node_t *x = &t->nodes[i];
    if (x->var >= 0) {
      if (depth[i] >= RILL_TREE_MAX_DEPTH) return "deeper than 8 splits";
      depth[x->yes] = depth[x->no] = (uint8_t)(depth[i] + 1);
    } else if (x->use == next) {
      next++;
    } else if (x->use > next) {
      return "candidates not listed in the order the leaves name them";
    }
  }
  if (next != t->ncands) return "a candidate no leaf names";
  for (uint32_t i = 0; i < t->ncands; i++) {
    if (!t->cands[i] || !t->cands[i][0]) return "an empty candidate name";
    for (uint32_t j = 0; j < i; j++)
      if (strcmp(t->cands[i], t->cands[j]) == 0) return "a candidate named twice";
  }
  return NULL;
}

/* ---- fitting ---- */
typedef struct fit {
  const int64_t *x;     /* nsamples x nvars */
  const double *us;     /* nsamples x ncands */
  uint32_t nvars, ncands;
  int max_depth;
  rill_tree_node_t *out;
  uint32_t n;
  uint32_t *tmp;        /* nsamples */
} fit_t;

typedef struct cost {
  uint32_t bad;         /* samples where the candidate is not usable */
  double us;            /* total time where it is */
} cost_t;

static bool usable(double t) { return t >= 0 && isfinite(t); }

static bool cost_less(cost_t a, cost_t b) { return a.bad != b.bad ? a.bad < b.bad : a.us < b.us; }

/* The best leaf over samples idx[0..n). */
static cost_t leaf(const fit_t *f, const uint32_t *idx, uint32_t n, uint32_t *out_use) {
  cost_t best = {UINT32_MAX, INFINITY};
  *out_use = 0;
  for (uint32_t c = 0; c < f->ncands; c++) {
    cost_t k = {0, 0};
    for (uint32_t i = 0; i < n; i++) {
      double t = f->us[(size_t)idx[i] * f->ncands + c];
      if (usable(t)) k.us += t;
      else k.bad++;
    }
    if (cost_less(k, best)) {
      best = k;
      *out_use = c;
    }
  }
  return best;
}

static cost_t cost_add(cost_t a, cost_t b) { return (cost_t){a.bad + b.bad, a.us + b.us}; }

/* Samples idx[0..n) with variable v <= le first (order kept); the count of those. */
static uint32_t partition(const fit_t *f, uint32_t *idx, uint32_t n, uint32_t v, int64_t le) {
  uint32_t k = 0, m = 0;
  for (uint32_t i = 0; i < n; i++)
    if (f->x[(size_t)idx[i] * f->nvars + v] <= le) idx[k++] = idx[i];
    else f->tmp[m++] = idx[i];
  memcpy(idx + k, f->tmp, sizeof(uint32_t) * m);
  return k;
}

static void grow(fit_t *f, uint32_t *idx, uint32_t n, int depth) {
  uint32_t self = f->n++, use;
  cost_t here = leaf(f, idx, n, &use);
  f->out[self] = (rill_tree_node_t){.var = -1, .use = use};
  if (depth >= f->max_depth || n < 2) return;
  bool found = false;
  uint32_t bv = 0;
  int64_t ble = 0;
  cost_t best = here;
  for (uint32_t v = 0; v < f->nvars; v++) {
    /* thresholds: each distinct value of v but the largest, ascending */
    int64_t lo = INT64_MIN;
    for (;;) {
      bool any = false;
      int64_t t = INT64_MAX, hi = INT64_MIN;
      for (uint32_t i = 0; i < n; i++) {
        int64_t x = f->x[(size_t)idx[i] * f->nvars + v];
        if (x > hi) hi = x;
        if ((lo == INT64_MIN || x > lo) && x <= t) { t = x; any = true; }
      }
      if (!any || t >= hi) break;
      lo = t;
      uint32_t k = partition(f, idx, n, v, t), u;
      cost_t split = cost_add(leaf(f, idx, k, &u), leaf(f, idx + k, n - k, &u));
      /* a split must make fewer samples unusable, or save more than 1% of the time */
      bool better = split.bad != best.bad ? split.bad < best.bad
                                          : found ? split.us < best.us : split.us < here.us * 0.99;
      if (better) {
        best = split;
        bv = v;
        ble = t;
        found = true;
      }
    }
  }
  if (!found) return;
  uint32_t k = partition(f, idx, n, bv, ble);
  f->out[self] = (rill_tree_node_t){.var = (int32_t)bv, .le = ble, .yes = self + 1};
  grow(f, idx, k, depth + 1);
  f->out[self].no = f->n;
  grow(f, idx + k, n - k, depth + 1);
}

rill_status_t rill_tree_fit(const int64_t *samples, uint32_t nsamples, uint32_t nvars, const double *us, uint32_t ncands,
                            int max_depth, rill_tree_node_t *out, uint32_t *out_n) {
  if (!samples || !us || !out || !out_n || nsamples == 0 || ncands == 0 || max_depth < 1 || max_depth > RILL_TREE_MAX_DEPTH ||
      nvars > INT32_MAX)
    return rill__status(RILL_INVALID_ARGUMENT, "rill_tree_fit: needs samples, candidates and a depth of 1..%d", RILL_TREE_MAX_DEPTH);
  uint32_t *idx = malloc(sizeof(uint32_t) * nsamples * 2);
  if (!idx) return rill__oom();
  for (uint32_t i = 0; i < nsamples; i++) idx[i] = i;
  fit_t f = {samples, us, nvars, ncands, max_depth, out, 0, idx + nsamples};
  grow(&f, idx, nsamples, 0);
  free(idx);
  *out_n = f.n;
  return NULL;
}
