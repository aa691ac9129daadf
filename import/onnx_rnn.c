/* onnx_rnn.c: ONNX's recurrent layers (RNN, GRU, LSTM) unrolled at import
 * into matrix products per time step: each step's gates are
 * linear(x_t, W) + linear(h, R) with the biases (W's folded into the first
 * product), split into the gates ONNX orders (RNN one; GRU z, r, h; LSTM i,
 * o, f, c), and the cell update of the ONNX operator's definition; both
 * directions, the activations by name (Sigmoid, Tanh, Relu), initial
 * states, peepholes, GRU's linear_before_reset and layout 1. Y stacks each
 * step's hidden state in time order; Y_h (and Y_c) are the last ones.
 * sequence_lens (known or computed at run time) keeps a shorter sequence's
 * state past its end and gives 0 there. clip, activation_alpha/beta and
 * input_forget are refused. (cuDNN's RNN would take long sequences in one
 * call; the sequence length is a number at import, at most RNN_MAX_STEPS.) */
#include <stdio.h>
#include <string.h>

#include "onnx_ops.h"

#define RNN_MAX_STEPS 1024

enum { K_RNN, K_GRU, K_LSTM };

static ival_t *rows(imp_t *m, ival_t *x, int64_t axis, int64_t a, int64_t b) { return imp_slice1(m, x, axis, a, b, 1); }

/* x [.., D, ..] at index d of axis 0, that axis dropped */
static ival_t *pick(imp_t *m, ival_t *x, int64_t d) {
  if (!x) return NULL;
  rill_type_t t = x->t;
  t.rank--;
  for (int i = 0; i < t.rank; i++) t.dims[i] = x->t.dims[i + 1];
  return imp_reshape(m, NULL, rows(m, x, 0, d, d + 1), &t);
}

static ival_t *act(imp_t *m, const char *name, ival_t *x) {
  const char *op = !strcmp(name, "Sigmoid") ? "sigmoid" : !strcmp(name, "Tanh") ? "tanh" : !strcmp(name, "Relu") ? "relu" : NULL;
  if (!op) return imp_unsup(m, "activation %.60s (Sigmoid, Tanh and Relu are supported)", name);
  return imp_un(m, NULL, op, x, NULL);
}

static ival_t *linear(imp_t *m, ival_t *x, ival_t *w, ival_t *b) {
  if (!x || !w || (b == NULL && false)) return NULL;
  rill_type_t t = {x->t.dtype, 2, {x->t.dims[0], w->t.dims[0]}};
  ival_t *args[3] = {x, w, b};
  return imp_emit(m, NULL, &t, "linear", args, b ? 3 : 2, NULL);
}

/* one on a new first axis: [a, b] -> [1, a, b] (or [1, 1, a, b]) */
static ival_t *lift(imp_t *m, ival_t *x, int by) {
  if (!x) return NULL;
  rill_type_t t = x->t;
  t.rank = x->t.rank + by;
  for (int i = 0; i < by; i++) t.dims[i] = 1;
  for (int i = 0; i < x->t.rank; i++) t.dims[by + i] = x->t.dims[i];
  return imp_reshape(m, NULL, x, &t);
}

static ival_t *cat(imp_t *m, const char *out, ival_t **parts, int n, int axis) {
  for (int i = 0; i < n; i++)
    if (!parts[i]) return NULL;
  if (n == 1) return out ? imp_alias(m, out, parts[0]) : parts[0];
  rill_type_t t = parts[0]->t;
  t.dims[axis] = 0;
  for (int i = 0; i < n; i++) t.dims[axis] += parts[i]->t.dims[axis];
  char a[32];
  snprintf(a, sizeof a, "axis=%d", axis);
  return imp_emit(m, out, &t, "concat", parts, n, a);
}

static ival_t *perm(imp_t *m, const char *out, ival_t *x, const int64_t *p) {
  if (!x) return NULL;
  rill_type_t t = x->t;
  for (int i = 0; i < t.rank; i++) t.dims[i] = x->t.dims[p[i]];
  char a[64];
  imp_attrs(a, sizeof a, "perm=[%lld, %lld, %lld%s%s]", (long long)p[0], (long long)p[1], (long long)p[2], t.rank > 3 ? ", " : "",
            t.rank > 3 ? (p[3] == 3 ? "3" : "?") : "");
  return imp_emit(m, out, &t, "transpose", &x, 1, a);
}

bool onnx_op_rnn(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  int kind = !strcmp(n->op_type, "LSTM") ? K_LSTM : !strcmp(n->op_type, "GRU") ? K_GRU : K_RNN;
  int G = kind == K_LSTM ? 4 : kind == K_GRU ? 3 : 1;
  ival_t *X = in[0], *W = in[1], *R = in[2];
  if (!imp_need_float(m, X, "X")) return false;
  char buf[64];
  const char *dir = onnx_attr_s(n, "direction", "forward", buf, sizeof buf);
  int D = !strcmp(dir, "bidirectional") ? 2 : 1;
  bool rev = !strcmp(dir, "reverse");
  if (D == 1 && !rev && strcmp(dir, "forward")) return imp_fail(m, RILL_MALFORMED, "direction '%.40s' (forward, reverse or bidirectional)", dir), false;
  int64_t layout = onnx_attr_i(n, "layout", 0), H = onnx_attr_i(n, "hidden_size", -1);
  if (onnx_attr_get(n, "clip")) return imp_unsup(m, "clip"), false;
  if (onnx_attr_get(n, "activation_alpha") || onnx_attr_get(n, "activation_beta")) return imp_unsup(m, "activation_alpha and activation_beta"), false;
  if (onnx_attr_i(n, "input_forget", 0)) return imp_unsup(m, "input_forget"), false;
  bool lbr = onnx_attr_i(n, "linear_before_reset", 0) != 0;
  if (X->t.rank != 3 || W->t.rank != 3 || R->t.rank != 3) return imp_fail(m, RILL_MALFORMED, "X, W and R must be 3-D"), false;
  for (int i = 0; i < 3; i++)
    if (isa_dim_is_sym(X->t.dims[i])) return imp_unsup(m, "X over sizes over shape variables"), false;
  if (layout == 1) {
    static const int64_t p[3] = {1, 0, 2};
    X = perm(m, NULL, X, p);
    if (!X) return false;
  } else if (layout != 0) {
    return imp_fail(m, RILL_MALFORMED, "layout %lld (0 or 1)", (long long)layout), false;
  }
  int64_t S = X->t.dims[0], N = X->t.dims[1], I = X->t.dims[2];
  if (H < 1) H = R->t.dims[2];
  if (W->t.dims[0] != D || W->t.dims[1] != G * H || W->t.dims[2] != I || R->t.dims[0] != D || R->t.dims[1] != G * H || R->t.dims[2] != H)
    return imp_fail(m, RILL_MALFORMED, "W or R of the wrong shape for %d direction(s), hidden size %lld and input size %lld", D, (long long)H, (long long)I), false;
  if (S < 1 || S > RNN_MAX_STEPS) return imp_unsup(m, "a sequence of %lld steps (1 to %d)", (long long)S, RNN_MAX_STEPS), false;
  ival_t *B = IN(3), *L = IN(4), *H0 = IN(5), *C0 = kind == K_LSTM ? IN(6) : NULL, *P = kind == K_LSTM ? IN(7) : NULL;
  if (B && (B->t.rank != 2 || B->t.dims[0] != D || B->t.dims[1] != 2 * G * H)) return imp_fail(m, RILL_MALFORMED, "B of the wrong shape"), false;
  ival_t *lens = NULL; /* [N, 1] i64, where some sequence may be shorter than S */
  if (L) {
    if (L->t.rank != 1 || L->t.dims[0] != N || !imp_is_int(L->t.dtype)) return imp_fail(m, RILL_MALFORMED, "sequence_lens must be %lld integers", (long long)N), false;
    bool full = L->data != NULL;
    for (size_t i = 0; full && i < imp_numel(&L->t); i++) full = rill_element_get_int(L->t.dtype, L->data, i) == S;
    rill_type_t lt = {RILL_I64, 2, {N, 1}};
    if (!full && !(lens = imp_reshape(m, NULL, imp_cast(m, NULL, L, RILL_I64), &lt))) return false;
  }
  if (layout == 1) {
    static const int64_t p[3] = {1, 0, 2};
    if (H0) H0 = perm(m, NULL, H0, p);
    if (C0) C0 = perm(m, NULL, C0, p);
  }
  if ((H0 && (H0->t.rank != 3 || H0->t.dims[0] != D || H0->t.dims[1] != N || H0->t.dims[2] != H)) ||
      (C0 && (C0->t.rank != 3 || C0->t.dims[0] != D || C0->t.dims[1] != N || C0->t.dims[2] != H)))
    return imp_fail(m, RILL_MALFORMED, "initial_h or initial_c of the wrong shape"), false;
  if (P && (P->t.rank != 2 || P->t.dims[0] != D || P->t.dims[1] != 3 * H)) return imp_fail(m, RILL_MALFORMED, "P of the wrong shape"), false;
  /* activations: per direction, the kind's defaults */
  static const char *const DEF[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
  int na = kind == K_LSTM ? 3 : kind == K_GRU ? 2 : 1;
  char names[6][32];
  const Onnx__AttributeProto *aa = onnx_attr_get(n, "activations");
  if (aa && (int)aa->n_strings != na * D) return imp_fail(m, RILL_MALFORMED, "activations needs %d names", na * D), false;
  for (int i = 0; i < na * D; i++)
    snprintf(names[i], sizeof names[i], "%.*s", aa ? (int)aa->strings[i].len : (int)strlen(DEF[kind][i % na]),
             aa ? (const char *)aa->strings[i].data : DEF[kind][i % na]);
  rill_dtype_t dt = X->t.dtype;
  rill_type_t st = {dt, 2, {N, H}}, xt = {dt, 2, {N, I}};
  ival_t *ys[2][RNN_MAX_STEPS], *hs[2], *cs[2];
  for (int d = 0; d < D && !m->err; d++) {
    bool back = D == 2 ? d == 1 : rev;
    const char *f = names[d * na], *g = na > 1 ? names[d * na + 1] : NULL, *hh = na > 2 ? names[d * na + 2] : NULL;
    ival_t *Wd = pick(m, W, d), *Rd = pick(m, R, d), *Bd = B ? pick(m, B, d) : NULL;
    ival_t *Wb = Bd ? rows(m, Bd, 0, 0, G * H) : NULL, *Rb = Bd ? rows(m, Bd, 0, G * H, 2 * G * H) : NULL;
    ival_t *h = H0 ? pick(m, H0, d) : imp_broadcast(m, NULL, imp_scalar(m, dt, 0), &st);
    ival_t *c = kind == K_LSTM ? (C0 ? pick(m, C0, d) : imp_broadcast(m, NULL, imp_scalar(m, dt, 0), &st)) : NULL;
    ival_t *Pd = P ? pick(m, P, d) : NULL;
    ival_t *pi = Pd ? rows(m, Pd, 0, 0, H) : NULL, *po = Pd ? rows(m, Pd, 0, H, 2 * H) : NULL, *pf = Pd ? rows(m, Pd, 0, 2 * H, 3 * H) : NULL;
    /* GRU's candidate uses R's h rows apart (with its bias) */
    ival_t *Rzr = kind == K_GRU ? rows(m, Rd, 0, 0, 2 * H) : NULL, *Rh = kind == K_GRU ? rows(m, Rd, 0, 2 * H, 3 * H) : NULL;
    ival_t *Rbzr = kind == K_GRU && Rb ? rows(m, Rb, 0, 0, 2 * H) : NULL, *Rbh = kind == K_GRU && Rb ? rows(m, Rb, 0, 2 * H, 3 * H) : NULL;
    ival_t *bias = kind == K_GRU ? Wb : Wb && Rb ? imp_bin(m, NULL, "add", Wb, Rb) : NULL;
    for (int64_t s = 0; s < S && !m->err; s++) {
      int64_t t = back ? S - 1 - s : s;
      ival_t *hprev = h, *cprev = c;
      ival_t *xt_ = imp_reshape(m, NULL, rows(m, X, 0, t, t + 1), &xt);
      ival_t *gx = linear(m, xt_, Wd, bias);
      if (kind == K_RNN) {
        h = act(m, f, imp_bin(m, NULL, "add", gx, linear(m, h, Rd, NULL)));
      } else if (kind == K_LSTM) {
        ival_t *gs = imp_bin(m, NULL, "add", gx, linear(m, h, Rd, NULL));
        ival_t *gi = rows(m, gs, 1, 0, H), *go = rows(m, gs, 1, H, 2 * H), *gf = rows(m, gs, 1, 2 * H, 3 * H), *gc = rows(m, gs, 1, 3 * H, 4 * H);
        if (pi) gi = imp_bin(m, NULL, "add", gi, imp_bin(m, NULL, "mul", pi, c));
        if (pf) gf = imp_bin(m, NULL, "add", gf, imp_bin(m, NULL, "mul", pf, c));
        ival_t *it = act(m, f, gi), *ft = act(m, f, gf), *ct = act(m, g, gc);
        c = imp_bin(m, NULL, "add", imp_bin(m, NULL, "mul", ft, c), imp_bin(m, NULL, "mul", it, ct));
        if (po) go = imp_bin(m, NULL, "add", go, imp_bin(m, NULL, "mul", po, c));
        h = imp_bin(m, NULL, "mul", act(m, f, go), act(m, hh, c));
      } else {
        ival_t *ghzr = linear(m, h, Rzr, Rbzr);
        ival_t *z = act(m, f, imp_bin(m, NULL, "add", rows(m, gx, 1, 0, H), rows(m, ghzr, 1, 0, H)));
        ival_t *r = act(m, f, imp_bin(m, NULL, "add", rows(m, gx, 1, H, 2 * H), rows(m, ghzr, 1, H, 2 * H)));
        ival_t *hc = lbr ? imp_bin(m, NULL, "mul", r, linear(m, h, Rh, Rbh)) : linear(m, imp_bin(m, NULL, "mul", r, h), Rh, Rbh);
        ival_t *ht = act(m, g, imp_bin(m, NULL, "add", rows(m, gx, 1, 2 * H, 3 * H), hc));
        /* (1 - z) * ht + z * h = ht + z * (h - ht) */
        h = imp_bin(m, NULL, "add", ht, imp_bin(m, NULL, "mul", z, imp_bin(m, NULL, "sub", h, ht)));
      }
      if (lens) { /* past a sequence's end: its state stays, its output is 0 */
        ival_t *on = imp_bin(m, NULL, "lt", imp_scalar_int(m, RILL_I64, t), lens);
        ival_t *wa[3] = {on, h, hprev}, *wz[3] = {on, h, imp_scalar(m, dt, 0)};
        ys[d][t] = on && h && hprev && wz[2] ? imp_emit(m, NULL, &st, "where", wz, 3, NULL) : NULL;
        h = on && h && hprev ? imp_emit(m, NULL, &st, "where", wa, 3, NULL) : NULL;
        if (kind == K_LSTM) {
          ival_t *wc[3] = {on, c, cprev};
          c = on && c && cprev ? imp_emit(m, NULL, &st, "where", wc, 3, NULL) : NULL;
        }
      } else {
        ys[d][t] = h;
      }
    }
    hs[d] = h;
    cs[d] = c;
  }
  if (m->err) return false;
  /* Y [S, D, N, H] (layout 1: [N, S, D, H]); Y_h, Y_c [D, N, H] (layout 1: [N, D, H]) */
  if (OUT(0)) {
    ival_t *per[2];
    for (int d = 0; d < D; d++) {
      ival_t *steps[RNN_MAX_STEPS];
      for (int64_t t = 0; t < S; t++) steps[t] = lift(m, ys[d][t], 2);
      per[d] = cat(m, NULL, steps, (int)S, 0);
    }
    ival_t *y = cat(m, layout ? NULL : OUT(0), per, D, 1);
    if (layout) {
      static const int64_t p[4] = {2, 0, 1, 3};
      y = perm(m, OUT(0), y, p);
    }
    if (!y) return false;
  }
  for (int k = 1; k <= (kind == K_LSTM ? 2 : 1); k++) {
    if (!OUT(k)) continue;
    ival_t *per[2];
    for (int d = 0; d < D; d++) per[d] = lift(m, k == 1 ? hs[d] : cs[d], 1);
    ival_t *y = cat(m, layout ? NULL : OUT(k), per, D, 0);
    if (layout) {
      static const int64_t p[3] = {1, 0, 2};
      y = perm(m, OUT(k), y, p);
    }
    if (!y) return false;
  }
  return !m->err;
}
