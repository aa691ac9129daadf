/* onnx_linalg.c: Einsum, lowered onto the core set's transpose, reshape,
 * broadcast_to, slice, sum and matmul (no op of its own).
 *
 * Each operand first takes its diagonals (a label twice in one term: the
 * two axes moved last, merged, and sliced with step n + 1) and sums away
 * the labels that neither the output nor a later operand names. Operands
 * then contract pairwise, left to right: the labels both hold and still
 * need are the batch, those both hold and no longer need are contracted,
 * the rest are the rows (first operand) and columns (second): one batched
 * matmul [B, M, K] x [B, K, N]. A last transpose puts the labels in the
 * output's order. "..." stands for the same dims in every term, aligned
 * right and broadcast; without "->" the output is "..." then the labels
 * that occur once, in alphabetical (ASCII) order, as numpy writes it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

#define EIN_ELL 128 /* label ids of the ellipsis dims: EIN_ELL + j */
#define EIN_MAX 8   /* operands */

typedef struct {
  ival_t *v;
  int lab[RILL_MAX_RANK];
} ein_t;

static int ein_rank(const ein_t *e) { return e->v ? e->v->t.rank : 0; }

/* x transposed so that its dims come in the order perm, its labels with them */
static bool ein_permute(imp_t *m, ein_t *e, const int *perm) {
  int r = ein_rank(e), lab[RILL_MAX_RANK];
  int64_t p[RILL_MAX_RANK];
  bool id = true;
  rill_type_t t = e->v->t;
  for (int i = 0; i < r; i++) {
    p[i] = perm[i], lab[i] = e->lab[perm[i]], t.dims[i] = e->v->t.dims[perm[i]];
    id = id && perm[i] == i;
  }
  if (id) return true;
  char l[120], a[140];
  imp_list_str(m, l, sizeof l, p, r);
  imp_attrs(a, sizeof a, "perm=%s", l);
  e->v = imp_emit(m, NULL, &t, "transpose", &e->v, 1, a);
  memcpy(e->lab, lab, sizeof lab);
  return e->v != NULL;
}

/* the diagonal of the first label that occurs twice; false when none does */
static bool ein_diagonal(imp_t *m, ein_t *e, bool *done) {
  int r = ein_rank(e), i = -1, j = -1;
  for (int a = 0; a < r && i < 0; a++)
    for (int b = a + 1; b < r; b++)
      if (e->lab[a] == e->lab[b]) { i = a, j = b; break; }
  if (i < 0) return *done = true;
  int64_t n = e->v->t.dims[i];
  if (e->v->t.dims[j] != n) return imp_fail(m, RILL_MALFORMED, "a repeated label over dims of sizes %lld and %lld", (long long)n, (long long)e->v->t.dims[j]), false;
  int perm[RILL_MAX_RANK], q = 0;
  for (int a = 0; a < r; a++)
    if (a != i && a != j) perm[q++] = a;
  perm[q++] = i, perm[q++] = j;
  if (!ein_permute(m, e, perm)) return false;
  rill_type_t t = e->v->t;
  t.rank = r - 1;
  t.dims[r - 2] = n * n;
  e->v = imp_reshape(m, NULL, e->v, &t);
  e->v = n ? imp_slice1(m, e->v, r - 2, 0, n * n, n + 1) : e->v;
  if (e->v && !n) {
    rill_type_t z = e->v->t;
    z.dims[r - 2] = 0;
    e->v = imp_reshape(m, NULL, e->v, &z);
  }
  return e->v != NULL;
}

/* sums away the labels that need[] does not hold */
static bool ein_sum_unneeded(imp_t *m, ein_t *e, const bool *need) {
  int r = ein_rank(e), lab[RILL_MAX_RANK], k = 0, na = 0;
  int64_t axes[RILL_MAX_RANK];
  rill_dtype_t d = e->v->t.dtype;
  /* an integer sum is i64: cast back to the operands' dtype */
  rill_type_t o = {imp_is_float(d) ? d : RILL_I64, 0, {0}};
  for (int a = 0; a < r; a++) {
    if (need[e->lab[a]]) lab[k++] = e->lab[a], o.dims[o.rank++] = e->v->t.dims[a];
    else axes[na++] = a;
  }
  if (!na) return true;
  char l[120], at[160];
  imp_list_str(m, l, sizeof l, axes, na);
  imp_attrs(at, sizeof at, "axes=%s, keepdims=false", l);
  ival_t *s = imp_emit(m, NULL, &o, "sum", &e->v, 1, at);
  e->v = o.dtype == d ? s : imp_cast(m, NULL, s, d);
  memcpy(e->lab, lab, sizeof lab);
  return e->v != NULL;
}

static int64_t ein_size(const ein_t *e, int label) {
  for (int a = 0; a < ein_rank(e); a++)
    if (e->lab[a] == label) return e->v->t.dims[a];
  return -1;
}

/* broadcasts e's dims of size 1 where the other operand's same label is larger */
static bool ein_widen(imp_t *m, ein_t *e, const ein_t *o) {
  rill_type_t t = e->v->t;
  bool any = false;
  for (int a = 0; a < t.rank; a++) {
    int64_t s = ein_size(o, e->lab[a]);
    if (s >= 0 && s != t.dims[a]) {
      if (t.dims[a] != 1) return imp_fail(m, RILL_MALFORMED, "a label over dims of sizes %lld and %lld", (long long)t.dims[a], (long long)s), false;
      t.dims[a] = s, any = true;
    }
  }
  if (any) e->v = imp_broadcast(m, NULL, e->v, &t);
  return e->v != NULL;
}

/* a := a contracted with b, need[] the labels used after */
static bool ein_contract(imp_t *m, ein_t *a, ein_t *b, const bool *need) {
  if (!ein_widen(m, a, b) || !ein_widen(m, b, a)) return false;
  int ra = ein_rank(a), rb = ein_rank(b);
  int pa[RILL_MAX_RANK], pb[RILL_MAX_RANK], na = 0, nb = 0;
  int lab[2 * RILL_MAX_RANK], nl = 0;
  int64_t B = 1, M = 1, K = 1, N = 1, dims[2 * RILL_MAX_RANK];
  /* batch labels first, in a's order, then a's rows; b: batch, contracted, columns */
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < ra; i++) {
      int jb = -1;
      for (int j = 0; j < rb; j++)
        if (b->lab[j] == a->lab[i]) jb = j;
      bool batch = jb >= 0 && need[a->lab[i]];
      if (pass == 0 && batch) {
        pa[na++] = i, pb[nb++] = jb, B *= a->v->t.dims[i];
        lab[nl] = a->lab[i], dims[nl++] = a->v->t.dims[i];
      } else if (pass == 1 && jb < 0) {
        pa[na++] = i, M *= a->v->t.dims[i];
        lab[nl] = a->lab[i], dims[nl++] = a->v->t.dims[i];
      }
    }
  for (int i = 0; i < ra; i++)
    for (int j = 0; j < rb; j++)
      if (b->lab[j] == a->lab[i] && !need[a->lab[i]]) pa[na++] = i, pb[nb++] = j, K *= a->v->t.dims[i];
  for (int j = 0; j < rb; j++) {
    bool shared = false;
    for (int i = 0; i < ra; i++) shared = shared || b->lab[j] == a->lab[i];
    if (!shared) pb[nb++] = j, N *= b->v->t.dims[j], lab[nl] = b->lab[j], dims[nl++] = b->v->t.dims[j];
  }
  if (nl > RILL_MAX_RANK) return imp_unsup(m, "an Einsum whose intermediate has more than %d dims", RILL_MAX_RANK), false;
  if (!ein_permute(m, a, pa) || !ein_permute(m, b, pb)) return false;
  rill_type_t ta = {a->v->t.dtype, 3, {B, M, K}}, tb = {a->v->t.dtype, 3, {B, K, N}}, tm = {a->v->t.dtype, 3, {B, M, N}};
  ival_t *args[2] = {imp_reshape(m, NULL, a->v, &ta), imp_reshape(m, NULL, b->v, &tb)};
  ival_t *y = imp_emit(m, NULL, &tm, "matmul", args, 2, NULL);
  rill_type_t to = {a->v->t.dtype, nl, {0}};
  memcpy(to.dims, dims, sizeof dims[0] * (size_t)nl);
  a->v = imp_reshape(m, NULL, y, &to);
  memcpy(a->lab, lab, sizeof lab[0] * (size_t)nl);
  return a->v != NULL;
}

static int ein_label(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= 'A' && c <= 'Z') return c - 'A';
  return -1;
}

/* one term of the equation into labels; its ellipsis (at most one) covers
 * the dims the letters leave, numbered from the right of nell */
static bool ein_term(imp_t *m, const char *s, size_t len, int rank, int nell, int *lab, int *out_n) {
  int letters = 0, k = 0;
  bool ell = false;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '.') {
      if (ell || i + 2 >= len + 0 || s[i + 1] != '.' || s[i + 2] != '.') return imp_fail(m, RILL_MALFORMED, "a misplaced '.' in the equation"), false;
      ell = true, i += 2;
    } else if (ein_label(s[i]) >= 0) {
      letters++;
    } else if (s[i] != ' ') {
      return imp_fail(m, RILL_MALFORMED, "the equation holds a character other than letters, ',', '->' and '...'"), false;
    }
  }
  int e = rank < 0 ? (ell ? nell : 0) : rank - letters;
  if (e < 0 || (!ell && e) || e > nell) return imp_fail(m, RILL_MALFORMED, "a term of %d labels for an operand of rank %d", letters, rank), false;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '.') {
      for (int j = 0; j < e; j++) lab[k++] = EIN_ELL + nell - e + j;
      i += 2;
    } else if (ein_label(s[i]) >= 0) {
      lab[k++] = ein_label(s[i]);
    }
  }
  *out_n = k;
  return true;
}

bool onnx_op_einsum(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  char buf[512];
  const Onnx__AttributeProto *at = onnx_attr_get(n, "equation");
  if (!at || !at->s.data) return imp_fail(m, RILL_MALFORMED, "no equation"), false;
  if (at->s.len >= sizeof buf) return imp_unsup(m, "an equation of %zu characters", at->s.len), false;
  memcpy(buf, at->s.data, at->s.len);
  buf[at->s.len] = 0;
  if (strlen(buf) != at->s.len) return imp_fail(m, RILL_MALFORMED, "the equation holds a NUL byte"), false;
  if (nin < 1 || nin > EIN_MAX) return imp_unsup(m, "%d operands (1 to %d)", nin, EIN_MAX), false;
  for (int i = 0; i < nin; i++) NEED(i);
  for (int i = 1; i < nin; i++)
    if (in[i]->t.dtype != in[0]->t.dtype) return imp_fail(m, RILL_MALFORMED, "operands of dtypes %s and %s", rill_dtype_name(in[0]->t.dtype), rill_dtype_name(in[i]->t.dtype)), false;
  if (!imp_need_num(m, in[0], "input")) return false;
  char *arrow = strstr(buf, "->");
  size_t lhs_len = arrow ? (size_t)(arrow - buf) : strlen(buf);
  /* the terms, and the ellipsis's rank: the most any operand gives it */
  const char *term[EIN_MAX];
  size_t tlen[EIN_MAX];
  int nt = 0, nell = 0;
  for (size_t s = 0, i = 0; i <= lhs_len; i++) {
    if (i == lhs_len || buf[i] == ',') {
      if (nt == EIN_MAX) return imp_fail(m, RILL_MALFORMED, "more terms than operands"), false;
      term[nt] = buf + s, tlen[nt++] = i - s, s = i + 1;
    }
  }
  if (nt != nin) return imp_fail(m, RILL_MALFORMED, "an equation of %d terms for %d operands", nt, nin), false;
  ein_t op[EIN_MAX];
  for (int i = 0; i < nin; i++) {
    int letters = 0;
    for (size_t c = 0; c < tlen[i]; c++) letters += ein_label(term[i][c]) >= 0;
    if (memchr(term[i], '.', tlen[i]) && in[i]->t.rank - letters > nell) nell = in[i]->t.rank - letters;
  }
  int cnt[EIN_ELL + RILL_MAX_RANK] = {0};
  for (int i = 0; i < nin; i++) {
    int k;
    op[i].v = in[i];
    if (!ein_term(m, term[i], tlen[i], in[i]->t.rank, nell, op[i].lab, &k)) return false;
    if (k != in[i]->t.rank) return imp_fail(m, RILL_MALFORMED, "term %d has %d labels for an operand of rank %d", i, k, in[i]->t.rank), false;
    for (int a = 0; a < k; a++) cnt[op[i].lab[a]]++;
  }
  int olab[RILL_MAX_RANK + 1], no = 0;
  if (arrow) {
    const char *r = arrow + 2;
    int letters = 0;
    for (const char *c = r; *c; c++) letters += ein_label(*c) >= 0;
    if (letters + (strstr(r, "...") ? nell : 0) > RILL_MAX_RANK) return imp_fail(m, RILL_MALFORMED, "an output of more than %d dims", RILL_MAX_RANK), false;
    if (!ein_term(m, r, strlen(r), -1, nell, olab, &no)) return false;
    for (int a = 0; a < no; a++) {
      if (!cnt[olab[a]]) return imp_fail(m, RILL_MALFORMED, "an output label that no operand has"), false;
      for (int b = 0; b < a; b++)
        if (olab[a] == olab[b]) return imp_fail(m, RILL_MALFORMED, "an output label twice"), false;
    }
  } else {
    for (int j = 0; j < nell; j++) olab[no++] = EIN_ELL + j;
    for (int l = 0; l < 52; l++)
      if (cnt[l] == 1) {
        if (no == RILL_MAX_RANK) return imp_fail(m, RILL_MALFORMED, "an output of more than %d dims", RILL_MAX_RANK), false;
        olab[no++] = l;
      }
  }
  /* each operand alone: diagonals, then the labels no one else needs summed */
  for (int i = 0; i < nin; i++) {
    for (bool done = false; !done;)
      if (!ein_diagonal(m, &op[i], &done) && !done) return false;
    bool need[EIN_ELL + RILL_MAX_RANK] = {false};
    for (int a = 0; a < no; a++) need[olab[a]] = true;
    for (int j = 0; j < nin; j++)
      for (int a = 0; j != i && a < ein_rank(&op[j]); a++) need[op[j].lab[a]] = true;
    if (!ein_sum_unneeded(m, &op[i], need)) return false;
  }
  for (int i = 1; i < nin; i++) {
    bool need[EIN_ELL + RILL_MAX_RANK] = {false};
    for (int a = 0; a < no; a++) need[olab[a]] = true;
    for (int j = i + 1; j < nin; j++)
      for (int a = 0; a < ein_rank(&op[j]); a++) need[op[j].lab[a]] = true;
    if (!ein_contract(m, &op[0], &op[i], need)) return false;
    /* labels that only the contracted pair held and the output drops */
    if (!ein_sum_unneeded(m, &op[0], need)) return false;
  }
  int perm[RILL_MAX_RANK];
  if (ein_rank(&op[0]) != no) return imp_fail(m, RILL_MALFORMED, "the output's labels do not match the operands'"), false;
  for (int a = 0; a < no; a++) {
    perm[a] = -1;
    for (int b = 0; b < no; b++)
      if (op[0].lab[b] == olab[a]) perm[a] = b;
    if (perm[a] < 0) return imp_fail(m, RILL_MALFORMED, "the output's labels do not match the operands'"), false;
  }
  if (!ein_permute(m, &op[0], perm)) return false;
  return imp_alias(m, OUT(0), op[0].v) != NULL;
}

/* DFT (opset 17) along `axis` of a signal [..., n, ..., 1 or 2] (real, or
 * real and imaginary parts), dft_length n (given or absent): the parts with
 * the axis moved last, products with the [n, K] cosine and sine matrices
 * (K = n, or n / 2 + 1 onesided), inverse with the conjugate and 1 / n:
 *   re = a cos + s b sin, im = b cos - s a sin   (s = 1 forward, -1 inverse)
 * then the axis moved back and the parts stacked as the last dim. */
bool onnx_op_dft(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  if (!imp_need_float(m, x, "input")) return false;
  int r = x->t.rank;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "DFT of an input with sizes over shape variables"), false;
  if (r < 2 || (x->t.dims[r - 1] != 1 && x->t.dims[r - 1] != 2)) return imp_fail(m, RILL_MALFORMED, "input must be [..., 1] (real) or [..., 2] (complex)"), false;
  int64_t axis = onnx_attr_i(n, "axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r - 2) return imp_fail(m, RILL_MALFORMED, "axis out of range for the signal's %d dims", r - 1), false;
  bool inverse = onnx_attr_i(n, "inverse", 0) != 0, onesided = onnx_attr_i(n, "onesided", 0) != 0;
  int64_t N = x->t.dims[axis];
  if (IN(1) && imp_numel(&in[1]->t)) {
    int64_t L;
    if (imp_known_ints(m, in[1], "dft_length", &L, 1) != 1) return false;
    if (L != N) return imp_unsup(m, "dft_length %lld other than the signal's %lld", (long long)L, (long long)N), false;
  }
  if (inverse && onesided) return imp_unsup(m, "an inverse onesided DFT"), false;
  return imp_dft(m, OUT(0), x, axis, inverse, onesided, NULL) != NULL;
}

/* The DFT of x [..., n, ..., 1 or 2] along axis (onnx_op_dft's lowering).
 * n a number: the matrices are constants; n a size read back (nval its
 * value, an i64[]): they are made at run time, cos and sin of
 * 2 pi ((j k) mod n) / n over j in [0, n), k in [0, K), K = n / 2 + 1
 * (onesided, read back) or n. */
ival_t *imp_dft(imp_t *m, const char *out, ival_t *x, int64_t axis, bool inverse, bool onesided, ival_t *nval) {
  int r = x->t.rank;
  int64_t N = x->t.dims[axis], K;
  rill_dtype_t dt = x->t.dtype;
  ival_t *C, *S;
  if (isa_dim_is_sym(N)) {
    if (!nval) return imp_unsup(m, "a DFT over a size over shape variables");
    ival_t *nf = imp_cast(m, NULL, nval, RILL_F64);
    K = N;
    if (onesided) {
      rill_type_t one = {RILL_I64, 1, {1}};
      ival_t *kv = imp_cast(m, NULL, imp_bin(m, NULL, "add", imp_un(m, NULL, "floor", imp_bin(m, NULL, "div", nf, imp_scalar(m, RILL_F64, 2)), NULL), imp_scalar(m, RILL_F64, 1)), RILL_I64);
      if (imp_read_back(m, imp_reshape(m, NULL, kv, &one), "dft_unique_bins", &K, 1) != 1) return NULL;
    }
    rill_type_t jt = {RILL_I64, 2, {N, 1}}, kt = {RILL_I64, 2, {1, K}};
    ival_t *j = imp_reshape(m, NULL, imp_iota_rt(m, N), &jt), *k = imp_reshape(m, NULL, imp_iota_rt(m, K), &kt);
    ival_t *jk = imp_cast(m, NULL, imp_bin(m, NULL, "fmod", imp_bin(m, NULL, "mul", j, k), nval), RILL_F64);
    ival_t *th = imp_bin(m, NULL, "div", imp_bin(m, NULL, "mul", jk, imp_scalar(m, RILL_F64, 2 * M_PI)), nf);
    ival_t *sc = inverse ? imp_bin(m, NULL, "div", imp_scalar(m, RILL_F64, 1), nf) : imp_scalar(m, RILL_F64, 1);
    C = imp_cast(m, NULL, imp_bin(m, NULL, "mul", imp_un(m, NULL, "cos", th, NULL), sc), dt);
    S = imp_cast(m, NULL, imp_bin(m, NULL, "mul", imp_un(m, NULL, "sin", th, NULL), sc), dt);
  } else {
    K = onesided ? N / 2 + 1 : N;
    if (N < 1 || N * K > ONNX_FOLD_MAX) return imp_unsup(m, "a DFT of %lld points (its matrices are limited to %d values)", (long long)N, ONNX_FOLD_MAX);
    double *cs = malloc(sizeof(double) * (size_t)(2 * N * K));
    if (!cs) return imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
    for (int64_t j = 0; j < N; j++)
      for (int64_t k = 0; k < K; k++) {
        double th = 2 * M_PI * (double)((j * k) % N) / (double)N, sc = inverse ? 1.0 / (double)N : 1;
        cs[j * K + k] = cos(th) * sc;
        cs[N * K + j * K + k] = sin(th) * sc;
      }
    rill_type_t mt = {RILL_F64, 2, {N, K}};
    C = imp_cast(m, NULL, imp_const(m, &mt, cs), dt), S = imp_cast(m, NULL, imp_const(m, &mt, cs + N * K), dt);
    free(cs);
  }
  if (!C || !S) return NULL;
  /* the parts, without the last dim, the axis last */
  int q = r - 1;
  rill_type_t pt = {dt, q, {0}};
  for (int d = 0; d < q; d++) pt.dims[d] = x->t.dims[d];
  int64_t perm[RILL_MAX_RANK], inv[RILL_MAX_RANK];
  for (int d = 0, j = 0; d < q; d++)
    if (d != axis) perm[j++] = d;
  perm[q - 1] = axis;
  for (int d = 0; d < q; d++) inv[perm[d]] = d;
  rill_type_t tt = pt;
  for (int d = 0; d < q; d++) tt.dims[d] = pt.dims[perm[d]];
  char l[120], a[140];
  ival_t *parts[2] = {NULL, NULL};
  for (int c = 0; c < x->t.dims[r - 1]; c++) {
    ival_t *p = imp_reshape(m, NULL, imp_slice1(m, x, r - 1, c, c + 1, 1), &pt);
    if (p && axis != q - 1) {
      imp_list_str(m, l, sizeof l, perm, q);
      imp_attrs(a, sizeof a, "perm=%s", l);
      p = imp_emit(m, NULL, &tt, "transpose", &p, 1, a);
    }
    parts[c] = p;
  }
  if (!parts[0]) return NULL;
  double s = inverse ? -1 : 1;
  ival_t *re = imp_matmul(m, NULL, parts[0], C), *im = imp_bin(m, NULL, "mul", imp_scalar(m, dt, -s), imp_matmul(m, NULL, parts[0], S));
  if (parts[1]) {
    re = imp_bin(m, NULL, "add", re, imp_bin(m, NULL, "mul", imp_scalar(m, dt, s), imp_matmul(m, NULL, parts[1], S)));
    im = imp_bin(m, NULL, "add", im, imp_matmul(m, NULL, parts[1], C));
  }
  if (!re || !im) return NULL;
  rill_type_t rt = re->t, bt = re->t, ot = x->t;
  ival_t *v[2] = {re, im};
  for (int c = 0; c < 2; c++) {
    if (axis != q - 1) {
      bt = rt;
      for (int d = 0; d < q; d++) bt.dims[d] = rt.dims[inv[d]];
      imp_list_str(m, l, sizeof l, inv, q);
      imp_attrs(a, sizeof a, "perm=%s", l);
      v[c] = imp_emit(m, NULL, &bt, "transpose", &v[c], 1, a);
    }
    rill_type_t e = v[c] ? v[c]->t : bt;
    e.dims[e.rank++] = 1;
    v[c] = imp_reshape(m, NULL, v[c], &e);
  }
  if (!v[0] || !v[1]) return NULL;
  ot.dims[axis] = K;
  ot.dims[r - 1] = 2;
  imp_attrs(a, sizeof a, "axis=%d", r - 1);
  return imp_emit(m, out, &ot, "concat", v, 2, a);
}

/* Det of X [..., n, n]: LU with partial pivoting, unrolled over the n
 * columns (n known, at most DET_MAX), in f32 (f16, bf16, f32) or f64, onto
 * where, slice, sum, argmax and elementwise ops. Step k: p the row at or
 * below k of the largest |A[., k]| (the first of equals); rows k and p
 * swapped (selected with where, so no 0 * inf); det *= A[k, k], negated
 * where p != k; the rows below k less A[i, k] / A[k, k] times row k (a
 * zero pivot, a column of zeros, leaves det 0 and divides by 1). n = 0
 * gives 1, numpy's det of an empty matrix. */
#define DET_MAX 64
bool onnx_op_det(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  (void)n;
  NEED(0);
  ival_t *x = in[0];
  rill_dtype_t d = x->t.dtype, c = d == RILL_F64 ? RILL_F64 : RILL_F32;
  if (!imp_is_float(d)) return imp_unsup(m, "Det of dtype %s (ONNX allows f16, bf16, f32, f64)", rill_dtype_name(d)), false;
  int r = x->t.rank;
  if (r < 2) return imp_fail(m, RILL_MALFORMED, "Det takes a matrix or a batch of them (rank 2 or more), found rank %d", r), false;
  int64_t k_n = x->t.dims[r - 1];
  if (isa_dim_is_sym(k_n) || isa_dim_is_sym(x->t.dims[r - 2])) return imp_unsup(m, "Det of matrices whose size is over shape variables"), false;
  if (x->t.dims[r - 2] != k_n) return imp_fail(m, RILL_MALFORMED, "Det of matrices that are not square (%lld x %lld)", (long long)x->t.dims[r - 2], (long long)k_n), false;
  if (k_n > DET_MAX) return imp_unsup(m, "Det of %lld x %lld matrices (at most %d x %d)", (long long)k_n, (long long)k_n, DET_MAX, DET_MAX), false;
  int nn = (int)k_n;
  rill_type_t bt = x->t; /* the batch: the result's type */
  bt.rank = r - 2;
  rill_type_t kt = x->t; /* the batch with [1, 1]: det's running value */
  kt.dims[r - 2] = kt.dims[r - 1] = 1;
  kt.dtype = c;
  if (nn == 0) {
    ival_t *one = imp_scalar(m, d, 1);
    return one && imp_broadcast(m, OUT(0), one, &bt) != NULL;
  }
  /* the row index, [1, ..., n, 1] */
  rill_type_t it = {RILL_I64, r, {0}};
  for (int i = 0; i < r; i++) it.dims[i] = 1;
  it.dims[r - 2] = nn;
  int64_t rows[DET_MAX];
  for (int i = 0; i < nn; i++) rows[i] = i;
  ival_t *ri = imp_const(m, &it, rows), *A = imp_cast(m, NULL, x, c), *det = NULL;
  rill_type_t rowt = x->t; /* a row [..., 1, n] */
  rowt.dims[r - 2] = 1;
  rowt.dtype = c;
  rill_type_t pt = kt; /* p: [..., 1, 1] i64 */
  pt.dtype = RILL_I64;
  char ax[96];
  imp_attrs(ax, sizeof ax, "axis=%d, keepdims=true", r - 2);
  char sx[96];
  imp_attrs(sx, sizeof sx, "axes=[%d], keepdims=true", r - 2);
  for (int k = 0; k < nn && A && !m->err; k++) {
    ival_t *kk = imp_scalar_int(m, RILL_I64, k);
    ival_t *col = imp_slice1(m, A, r - 1, k, k + 1, 1);
    ival_t *cand = imp_where(m, imp_bin(m, NULL, "ge", ri, kk), imp_un(m, NULL, "abs", col, NULL), imp_scalar(m, c, -1));
    ival_t *p = cand ? imp_emit(m, NULL, &pt, "argmax", &cand, 1, ax) : NULL;
    ival_t *ep = imp_bin(m, NULL, "eq", ri, p), *ek = imp_bin(m, NULL, "eq", ri, kk);
    ival_t *pick = imp_where(m, ep, A, imp_scalar(m, c, 0));
    ival_t *rowp = pick ? imp_emit(m, NULL, &rowt, "sum", &pick, 1, sx) : NULL;
    ival_t *rowk = imp_slice1(m, A, r - 2, k, k + 1, 1);
    A = imp_where(m, ek, rowp, imp_where(m, ep, rowk, A));
    ival_t *piv = imp_slice1(m, imp_slice1(m, A, r - 2, k, k + 1, 1), r - 1, k, k + 1, 1);
    ival_t *sg = imp_where(m, imp_bin(m, NULL, "eq", p, kk), imp_scalar(m, c, 1), imp_scalar(m, c, -1));
    ival_t *f = imp_bin(m, NULL, "mul", piv, sg);
    det = det ? imp_bin(m, NULL, "mul", det, f) : f;
    if (k == nn - 1) break;
    /* eliminate below k */
    ival_t *safe = imp_where(m, imp_bin(m, NULL, "eq", piv, imp_scalar(m, c, 0)), imp_scalar(m, c, 1), piv);
    ival_t *fac = imp_bin(m, NULL, "div", imp_slice1(m, A, r - 1, k, k + 1, 1), safe);
    ival_t *upd = imp_bin(m, NULL, "sub", A, imp_bin(m, NULL, "mul", fac, imp_slice1(m, A, r - 2, k, k + 1, 1)));
    A = imp_where(m, imp_bin(m, NULL, "gt", ri, kk), upd, A);
  }
  if (!det || m->err) return false;
  rill_type_t ct = bt;
  ct.dtype = c;
  if (d == c) return imp_reshape(m, OUT(0), det, &ct) != NULL;
  return imp_cast(m, OUT(0), imp_reshape(m, NULL, det, &ct), d) != NULL;
}
