/* onnx_text.c: TfIdfVectorizer over integer tokens, lowered onto
 * comparisons, sums and a matmul (no op of its own).
 *
 * The pool holds the n-grams to count, grouped by size (ngram_counts[k]
 * is where the (k + 1)-grams start); the i-th n-gram of the pool counts
 * into output ngram_indexes[i]. For each size n in [min_gram_length,
 * max_gram_length] that the pool holds, and each skip s in
 * [0, max_skip_count] (unigrams once): the windows x[c], x[c + d], ...,
 * x[c + (n - 1) d] with d = s + 1 are compared with every pool n-gram at
 * once ([N, G, W] booleans, ANDed over the n positions) and summed over
 * the windows. The counts are weighted by mode (TF: the count; IDF:
 * min(count, 1) * weight; TFIDF: count * weight; weights default 1) and
 * scattered to the outputs by a product with the [G, O] one-hot matrix
 * of ngram_indexes (exact: small integers in f32). */
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

#define TFIDF_POOL_MAX 65536

bool onnx_op_tfidf(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (onnx_attr_get(n, "pool_strings")) return imp_unsup(m, "pool_strings (strings are not a dtype of the language)"), false;
  if (!imp_is_int(x->t.dtype)) return imp_unsup(m, "TfIdfVectorizer of dtype %s (integer tokens are supported)", rill_dtype_name(x->t.dtype)), false;
  if ((x->t.rank != 1 && x->t.rank != 2) || isa_type_is_sym(&x->t)) return imp_fail(m, RILL_MALFORMED, "input must be [C] or [N, C] (numbers)"), false;
  int64_t mn = onnx_attr_i(n, "min_gram_length", 0), mx = onnx_attr_i(n, "max_gram_length", 0), skip = onnx_attr_i(n, "max_skip_count", 0);
  char buf[16];
  const char *mode = onnx_attr_s(n, "mode", "", buf, sizeof buf);
  int md = !strcmp(mode, "TF") ? 0 : !strcmp(mode, "IDF") ? 1 : !strcmp(mode, "TFIDF") ? 2 : -1;
  if (md < 0) return imp_fail(m, RILL_MALFORMED, "mode must be TF, IDF or TFIDF"), false;
  if (mn < 1 || mx < mn || skip < 0) return imp_fail(m, RILL_MALFORMED, "gram lengths 1 <= min <= max and max_skip_count >= 0 needed"), false;
  int64_t *pool = malloc(sizeof(int64_t) * TFIDF_POOL_MAX * 3), *counts = pool + TFIDF_POOL_MAX, *idx = counts + TFIDF_POOL_MAX;
  float *w = malloc(sizeof(float) * TFIDF_POOL_MAX);
  if (!pool || !w) return free(pool), free(w), imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
  int np = onnx_attr_ints(n, "pool_int64s", pool, TFIDF_POOL_MAX), nc = onnx_attr_ints(n, "ngram_counts", counts, TFIDF_POOL_MAX),
      ni = onnx_attr_ints(n, "ngram_indexes", idx, TFIDF_POOL_MAX);
  const Onnx__AttributeProto *wa = onnx_attr_get(n, "weights");
  bool ok = np > 0 && nc > 0 && ni > 0;
  if (!ok) imp_fail(m, RILL_MALFORMED, "pool_int64s, ngram_counts and ngram_indexes are needed (at most %d each)", TFIDF_POOL_MAX);
  /* the pool's n-grams: G_k of size k + 1 from counts[k] */
  int64_t ngrams = 0, O = 0;
  for (int k = 0; ok && k < nc; k++) {
    int64_t end = k + 1 < nc ? counts[k + 1] : np;
    ok = counts[k] >= 0 && end >= counts[k] && end <= np && (end - counts[k]) % (k + 1) == 0;
    if (ok) ngrams += (end - counts[k]) / (k + 1);
  }
  if (ok && ngrams != ni) ok = false;
  for (int i = 0; ok && i < ni; i++) {
    ok = idx[i] >= 0 && idx[i] < TFIDF_POOL_MAX;
    if (ok && idx[i] + 1 > O) O = idx[i] + 1;
  }
  if (ok && wa && (int64_t)wa->n_floats != ni) ok = false;
  for (int i = 0; ok && i < ni; i++) w[i] = wa ? wa->floats[i] : 1;
  if (!ok && !m->err) imp_fail(m, RILL_MALFORMED, "ngram_counts, pool_int64s, ngram_indexes and weights do not agree");
  int64_t N = x->t.rank == 2 ? x->t.dims[0] : 1, C = x->t.dims[x->t.rank - 1];
  rill_type_t xt = {RILL_I64, 2, {N, C}};
  ival_t *xs = ok ? imp_reshape(m, NULL, imp_cast(m, NULL, x, RILL_I64), &xt) : NULL, *y = NULL;
  int64_t first = 0; /* the index of the first n-gram of size k + 1 */
  for (int k = 0; xs && k < nc && !m->err; k++) {
    int64_t sz = k + 1, end = k + 1 < nc ? counts[k + 1] : np, G = (end - counts[k]) / sz;
    if (sz < mn || sz > mx || G == 0) {
      first += G;
      continue;
    }
    int64_t *pv = malloc(sizeof(int64_t) * (size_t)G);
    float *wg = malloc(sizeof(float) * (size_t)G), *hot = calloc((size_t)(G * O), sizeof(float));
    if (!pv || !wg || !hot) {
      free(pv), free(wg), free(hot), free(pool), free(w);
      return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory"), false;
    }
    ival_t *cnt = NULL;
    for (int64_t s = 0; s <= (sz == 1 ? 0 : skip) && !m->err; s++) {
      int64_t d = s + 1, W = C - (sz - 1) * d;
      if (W <= 0) break;
      ival_t *match = NULL;
      for (int64_t j = 0; j < sz && !m->err; j++) {
        rill_type_t wt = {RILL_I64, 3, {N, 1, W}}, pt = {RILL_I64, 3, {1, G, 1}};
        for (int64_t g = 0; g < G; g++) pv[g] = pool[counts[k] + g * sz + j];
        ival_t *win = imp_reshape(m, NULL, imp_slice1(m, xs, 1, j * d, j * d + W, 1), &wt);
        ival_t *e = imp_bin(m, NULL, "eq", win, imp_const(m, &pt, pv));
        match = match ? imp_bin(m, NULL, "logical_and", match, e) : e;
      }
      rill_type_t ct = {RILL_F32, 2, {N, G}};
      ival_t *f = imp_cast(m, NULL, match, RILL_F32);
      ival_t *sum = f ? imp_emit(m, NULL, &ct, "sum", &f, 1, "axes=[2], keepdims=false") : NULL;
      cnt = cnt ? imp_bin(m, NULL, "add", cnt, sum) : sum;
    }
    if (cnt) { /* weighted, then to the outputs: [N, G] x [G, O] (no window fits: no counts) */
      rill_type_t gt = {RILL_F32, 2, {1, G}}, ht = {RILL_F32, 2, {G, O}};
      for (int64_t g = 0; g < G; g++) hot[g * O + idx[first + g]] = 1, wg[g] = w[first + g];
      if (md == 1) cnt = imp_bin(m, NULL, "minimum", cnt, imp_scalar(m, RILL_F32, 1));
      if (md) cnt = imp_bin(m, NULL, "mul", cnt, imp_const(m, &gt, wg));
      ival_t *part = imp_matmul(m, NULL, cnt, imp_const(m, &ht, hot));
      y = y ? imp_bin(m, NULL, "add", y, part) : part;
    }
    free(pv), free(wg), free(hot);
    first += G;
  }
  free(pool);
  free(w);
  if (m->err || !xs) return false;
  rill_type_t ot = {RILL_F32, x->t.rank, {0}};
  if (x->t.rank == 2) ot.dims[0] = N, ot.dims[1] = O;
  else ot.dims[0] = O;
  if (!y) y = imp_broadcast(m, NULL, imp_scalar(m, RILL_F32, 0), &ot); /* nothing counted */
  return imp_reshape(m, OUT(0), y, &ot) != NULL;
}
