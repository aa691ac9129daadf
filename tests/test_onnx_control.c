/* test_onnx_control.c: ONNX If, Loop and Scan on models built here with
 * protobuf-c, against numpy: the branches as functions (a run-time
 * condition and one known at import), a Loop as a while carrying values and
 * reading the enclosing graph's, a Loop with scan outputs and a known trip
 * count, Scan forwards and backwards; graph mode on the while (a
 * conditional node, not a fallback); bad subgraphs (branches that disagree,
 * an undefined input, with the inner node's name escaped) and byte flips;
 * LSTM (both directions, peepholes, initial states, sequence_lens given at
 * run time) and GRU (reverse, linear_before_reset) unrolled, against
 * numpy's step-by-step definition; sequences as graph inputs (their
 * length and items' shapes given) and results, and SequenceMap;
 * optionals (given present or not) and their ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "onnx_builder.h"

/* a subgraph: a builder's graph, attached to node n as attribute `name` */
static void b_attr_graph(builder_t *b, Onnx__NodeProto *n, const char *name, builder_t *sub) {
  Onnx__AttributeProto *a = b_attr(b, n, name);
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
  a->g = &sub->graph;
}

/* runs @main on vm with n f32/i64/bool inputs; results compared with numpy's
 * (rank, dims, values of each, as numpy_results reads them); false: no numpy */
static bool check_run(rill_vm_t *vm, int n, const rill_type_t *types, const void *const *data, const char *script) {
  static double want[4096];
  size_t nw;
  if (!numpy_results(script, want, 4096, &nw)) {
    printf("onnx control flow: numpy not usable, skipped\n");
    return false;
  }
  rill_tensor_t *in[8], **res;
  int nres;
  for (int i = 0; i < n; i++) ck_assert(rill_tensor_create(vm, &types[i], data[i], &in[i]) == NULL);
  rill_status_t st = rill_vm_invoke(vm, "main", in, n, &res, &nres);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  size_t w = 0;
  for (int r = 0; r < nres; r++) {
    const rill_type_t *t = rill_tensor_type(res[r]);
    ck_assert_int_eq(t->rank, (int)want[w++]);
    for (int d = 0; d < t->rank; d++) ck_assert_msg(t->dims[d] == (int64_t)want[w++], "result %d dim %d", r, d);
    size_t cnt = rill_type_numel(t);
    void *raw = malloc(8 * (cnt ? cnt : 1));
    ck_assert(rill_tensor_read(res[r], raw, rill_tensor_nbytes(res[r])) == NULL);
    for (size_t i = 0; i < cnt; i++) {
      double g = t->dtype == RILL_I64 ? (double)((int64_t *)raw)[i] : (double)((float *)raw)[i];
      ck_assert_msg(fabs(g - want[w + i]) <= 1e-5 * (1 + fabs(want[w + i])), "result %d [%zu]: %g, numpy %g", r, i, g, want[w + i]);
    }
    w += cnt;
    free(raw);
  }
  ck_assert_uint_eq(w, nw);
  rill_results_free(vm, res, nres);
  for (int i = 0; i < n; i++) rill_tensor_release(in[i]);
  return true;
}

/* If(c): then x + y; else (x * y) - w, w an initializer of the else branch */
static builder_t ib_main, ib_then, ib_else;
static void if_model(void) {
  builder_t *b = &ib_main, *t = &ib_then, *e = &ib_else;
  b_init(b, 13);
  b_init(t, 13);
  b_init(e, 13);
  int64_t d3[1] = {3};
  b_input_p(b, "c", 9, 0, NULL, NULL);
  b_input(b, "x", 1, d3, NULL);
  b_input(b, "y", 1, d3, NULL);
  static char *ti[] = {"x", "y", NULL}, *to[] = {"t_out", NULL};
  b_node(t, "Add", "then_add", ti, to);
  b_output(t, "t_out");
  static float wv[3] = {1, -2, 0.5f};
  static int64_t wd[1] = {3};
  b_init_tensor(e, "w", 1, 1, wd, wv, 3);
  static char *ei0[] = {"x", "y", NULL}, *eo0[] = {"e_mul", NULL}, *ei1[] = {"e_mul", "w", NULL}, *eo1[] = {"e_out", NULL};
  b_node(e, "Mul", "else_mul", ei0, eo0);
  b_node(e, "Sub", "else_sub", ei1, eo1);
  b_output(e, "e_out");
  static char *ii[] = {"c", NULL}, *io[] = {"o", NULL};
  Onnx__NodeProto *n = b_node(b, "If", "if", ii, io);
  b_attr_graph(b, n, "then_branch", t);
  b_attr_graph(b, n, "else_branch", e);
  b_output(b, "o");
}

START_TEST(if_branches) {
  if_model();
  rill_module_t *m = load_model(&ib_main);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const float x[3] = {1, 2, 3}, y[3] = {4, -5, 6};
  rill_type_t types[3] = {{RILL_BOOL, 0, {0}}, {RILL_F32, 1, {3}}, {RILL_F32, 1, {3}}};
  for (int c = 0; c < 2; c++) {
    uint8_t cv = (uint8_t)c;
    const void *data[3] = {&cv, x, y};
    char script[512];
    snprintf(script, sizeof script,
             "x = np.array([1, 2, 3], dtype=np.float32); y = np.array([4, -5, 6], dtype=np.float32)\n"
             "w = np.array([1, -2, 0.5], dtype=np.float32)\n"
             "o = x + y if %s else x * y - w\nprint(o.ndim, *o.shape, *o.tolist())",
             c ? "True" : "False");
    if (!check_run(vm, 3, types, data, script)) break;
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* a condition known at import: the branch is written in @main, no function */
  if_model();
  ib_main.graph.n_input = 2;
  ib_main.in_ptrs[0] = ib_main.in_ptrs[1];
  ib_main.in_ptrs[1] = ib_main.in_ptrs[2];
  Onnx__TensorProto *ct = b_init_tensor(&ib_main, "c", 9, 0, NULL, NULL, 0);
  ct->n_int32_data = 1;
  static int32_t fz = 0;
  ct->int32_data = &fz;
  size_t nb;
  uint8_t *bytes = b_pack(&ib_main, &nb);
  onnx_result_t r;
  rill_status_t st = onnx_import_bytes(bytes, nb, NULL, NULL, &r);
  free(bytes);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  ck_assert_msg(!strstr(r.vmasm, "func @sub") && strstr(r.vmasm, "= sub("), "%s", r.vmasm);
  onnx_result_free(&r);
}
END_TEST

/* Loop(M, "", x): body(i, cond, v) -> (cond, v + x * i) reads x of @main;
 * with a scan output (v each step) when M is an initializer */
static builder_t lb_main, lb_body;
/* mode 0: a while (M at run time); 1: scan outputs, M = 3 known; 2: scan
 * outputs with M at run time (read back, the outputs' rows written in a
 * while) */
static void loop_model(int mode) {
  builder_t *b = &lb_main, *g = &lb_body;
  bool scan = mode > 0;
  b_init(b, 13);
  b_init(g, 13);
  int64_t d2[1] = {2};
  static int64_t m3 = 3;
  if (mode == 1) b_init_tensor(b, "M", 7, 0, NULL, &m3, 1);
  else b_input_p(b, "M", 7, 0, NULL, NULL);
  b_input(b, "x", 1, d2, NULL);
  b_input_p(g, "i", 7, 0, NULL, NULL);
  b_input_p(g, "cond", 9, 0, NULL, NULL);
  b_input(g, "v", 1, d2, NULL);
  static char *c0[] = {"i", NULL}, *c1[] = {"i_f", NULL}, *m0[] = {"x", "i_f", NULL}, *m1[] = {"xi", NULL}, *a0[] = {"v", "xi", NULL},
              *a1[] = {"v2", NULL}, *k0[] = {"cond", NULL}, *k1[] = {"cond2", NULL}, *s0[] = {"v2", NULL}, *s1[] = {"sc", NULL};
  Onnx__NodeProto *cast = b_node(g, "Cast", "cast", c0, c1);
  b_attr_i(g, cast, "to", 1);
  b_node(g, "Mul", "mul", m0, m1);
  b_node(g, "Add", "add", a0, a1);
  b_node(g, "Identity", "keep", k0, k1);
  b_output(g, "cond2");
  b_output(g, "v2");
  if (scan) {
    b_node(g, "Identity", "scan", s0, s1);
    b_output(g, "sc");
  }
  static char *li[] = {"M", "", "x", NULL}, *lo[] = {"vf", NULL}, *lo2[] = {"vf", "all", NULL};
  Onnx__NodeProto *n = b_node(b, "Loop", "loop", li, scan ? lo2 : lo);
  b_attr_graph(b, n, "body", g);
  b_output(b, "vf");
  if (scan) b_output(b, "all");
}

START_TEST(loop_while_and_scan_outputs) {
  static const float x[2] = {1.5f, -2};
  rill_type_t types[2] = {{RILL_I64, 0, {0}}, {RILL_F32, 1, {2}}};
  for (int mode = 0; mode < 3; mode++) {
    bool scan = mode > 0, known = mode == 1;
    loop_model(mode);
    rill_module_t *m = load_model(&lb_main);
    rill_vm_t *vm;
    ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
    for (int64_t M = known ? 3 : mode == 2 ? -1 : 0; M <= (known ? 3 : 4); M++) {
      const void *data[2] = {&M, x};
      char script[512];
      snprintf(script, sizeof script,
               "x = np.array([1.5, -2], dtype=np.float32); v = x.copy(); all = []\n"
               "for i in range(%lld): v = v + x * np.float32(i); all.append(v)\n"
               "print(v.ndim, *v.shape, *v.tolist())\n%s",
               (long long)M, scan ? "a = np.array(all, dtype=np.float32).reshape(-1, 2); print(a.ndim, *a.shape, *a.ravel().tolist())" : "");
      if (!check_run(vm, known ? 1 : 2, known ? types + 1 : types, known ? data + 1 : data, script)) break;
    }
    if (mode == 0) { /* graph mode: the while is a conditional node, not a fallback */
      rill_vm_t *g;
      ck_assert(rill_vm_create(NULL, m, "cpu", &g) == NULL);
      ck_assert(!rill_vm_set_graph_mode(g, NULL, RILL_GRAPH_AUTO));
      int64_t M = 3;
      const void *data[2] = {&M, x};
      for (int run = 0; run < 3; run++)
        if (!check_run(g, 2, types, data, "x = np.array([1.5, -2], dtype=np.float32); v = x.copy()\n"
                                          "for i in range(3): v = v + x * np.float32(i)\nprint(v.ndim, *v.shape, *v.tolist())"))
          break;
      rill_graph_info_t info;
      ck_assert(rill_vm_graph_info(g, "main", &info));
      ck_assert_msg(!strcmp(info.reason, ""), "graph mode fell back: %s", info.reason);
      rill_vm_destroy(g);
    }
    rill_vm_destroy(vm);
    rill_module_release(m);
  }
}
END_TEST

/* Scan: state s, scan input xs [4, 2] (reversed when `back`): body(s, x) ->
 * (s + x, 2 * (s + x)); the outputs stacked on axis 0 */
static builder_t sb_main, sb_body;
static void scan_model(bool back) {
  builder_t *b = &sb_main, *g = &sb_body;
  b_init(b, 11);
  b_init(g, 11);
  int64_t d2[1] = {2}, d42[2] = {4, 2};
  b_input(b, "s", 1, d2, NULL);
  b_input(b, "xs", 2, d42, NULL);
  b_input(g, "st", 1, d2, NULL);
  b_input(g, "xe", 1, d2, NULL);
  static float two = 2;
  static int64_t d1[1] = {1};
  b_init_tensor(g, "two", 1, 1, d1, &two, 1);
  static char *a0[] = {"st", "xe", NULL}, *a1[] = {"st2", NULL}, *m0[] = {"st2", "two", NULL}, *m1[] = {"ye", NULL};
  b_node(g, "Add", "add", a0, a1);
  b_node(g, "Mul", "mul", m0, m1);
  b_output(g, "st2");
  b_output(g, "ye");
  static char *si[] = {"s", "xs", NULL}, *so[] = {"sf", "ys", NULL};
  Onnx__NodeProto *n = b_node(b, "Scan", "scan", si, so);
  b_attr_graph(b, n, "body", g);
  b_attr_i(b, n, "num_scan_inputs", 1);
  static int64_t one[1] = {1};
  if (back) b_attr_ints(b, n, "scan_input_directions", one, 1);
  b_output(b, "sf");
  b_output(b, "ys");
}

START_TEST(scan_steps) {
  static const float s[2] = {0.5f, 1}, xs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rill_type_t types[2] = {{RILL_F32, 1, {2}}, {RILL_F32, 2, {4, 2}}};
  const void *data[2] = {s, xs};
  for (int back = 0; back < 2; back++) {
    scan_model(back);
    rill_module_t *m = load_model(&sb_main);
    rill_vm_t *vm;
    ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
    char script[512];
    snprintf(script, sizeof script,
             "s = np.array([0.5, 1], dtype=np.float32); xs = np.arange(1, 9, dtype=np.float32).reshape(4, 2); ys = []\n"
             "for x in (xs[::-1] if %d else xs): s = s + x; ys.append(2 * s)\n"
             "print(s.ndim, *s.shape, *s.tolist()); y = np.array(ys); print(y.ndim, *y.shape, *y.ravel().tolist())",
             back);
    check_run(vm, 2, types, data, script);
    rill_vm_destroy(vm);
    rill_module_release(m);
  }
}
END_TEST

START_TEST(bad_subgraphs) {
  /* branches of different types */
  if_model();
  static char *ei[] = {"x", NULL}, *eo[] = {"e_out", NULL};
  static int64_t ax[1] = {0};
  ib_else.graph.n_node = 0;
  Onnx__NodeProto *rs = b_node(&ib_else, "ReduceSum", "else_sum", ei, eo);
  b_attr_ints(&ib_else, rs, "axes", ax, 1);
  import_escaped(&ib_main, "the branches give output 0 as f32[3] and f32[1] (they must agree)");
  /* an input no graph defines, in a node whose name holds control bytes */
  if_model();
  static char *bi[] = {"x", "nope", NULL};
  ib_then.nodes[0].input = bi;
  ib_then.nodes[0].name = "in\x1b[2Jner";
  import_escaped(&ib_main, "node 'in\\x1b[2Jner' (Add, opset 13): input 'nope' is not defined");
  /* a Loop whose body changes a carried value's type */
  loop_model(0);
  Onnx__NodeProto *cc = b_node(&lb_body, "Concat", "grow", (char *[]){"v", "xi", NULL}, (char *[]){"v3", NULL});
  b_attr_i(&lb_body, cc, "axis", 0);
  lb_body.outs[1].name = "v3";
  import_escaped(&lb_main, "carried value 0 changes its type in the body (it must keep it)");
  /* a body with the wrong number of inputs */
  scan_model(false);
  sb_body.graph.n_input = 1;
  import_escaped(&sb_main, "subgraph 'body' takes 1 inputs, 2 given");
  /* byte flips and truncations of each */
  if_model();
  damage(&ib_main, 800);
  loop_model(1);
  damage(&lb_main, 800);
  loop_model(2);
  damage(&lb_main, 800);
  scan_model(true);
  damage(&sb_main, 800);
}
END_TEST

/* LSTM (bidirectional, peepholes, initial states, sequence_lens an input)
 * or GRU (reverse, linear_before_reset 1), S = 3, N = 2, I = 3, H = 2;
 * weights sin/cos of their index, the same in numpy */
static builder_t rb;
static float rw[2][4 * 2 * 3], rr[2][4 * 2 * 2], rbias[2][8 * 2], rp[2][3 * 2], rh0[2][2 * 2], rc0[2][2 * 2];
static void fill(float *p, size_t n, double k, double a) {
  for (size_t i = 0; i < n; i++) p[i] = (float)(a * sin((double)i * k + 0.3));
}
static void rnn_model(bool lstm) {
  int G = lstm ? 4 : 3, D = lstm ? 2 : 1;
  b_init(&rb, 14);
  int64_t xd[3] = {3, 2, 3}, ld[1] = {2};
  b_input(&rb, "X", 3, xd, NULL);
  if (lstm) b_input_p(&rb, "lens", 6, 1, ld, NULL);
  fill(rw[0], (size_t)(D * G * 2 * 3), 0.7, 0.6);
  fill(rr[0], (size_t)(D * G * 2 * 2), 1.3, 0.5);
  fill(rbias[0], (size_t)(D * 2 * G * 2), 0.9, 0.4);
  fill(rp[0], (size_t)(D * 3 * 2), 2.1, 0.3);
  fill(rh0[0], (size_t)(D * 2 * 2), 0.5, 0.2);
  fill(rc0[0], (size_t)(D * 2 * 2), 1.7, 0.2);
  static int64_t wd[3], rd[3], bd[2], pd[2], hd[3];
  wd[0] = rd[0] = bd[0] = pd[0] = hd[0] = D;
  wd[1] = rd[1] = G * 2, wd[2] = 3, rd[2] = 2, bd[1] = 2 * G * 2, pd[1] = 6, hd[1] = 2, hd[2] = 2;
  b_init_tensor(&rb, "W", 1, 3, wd, rw, (size_t)(D * G * 6));
  b_init_tensor(&rb, "R", 1, 3, rd, rr, (size_t)(D * G * 4));
  b_init_tensor(&rb, "B", 1, 2, bd, rbias, (size_t)(D * 4 * G));
  b_init_tensor(&rb, "h0", 1, 3, hd, rh0, (size_t)(D * 4));
  static char *li[] = {"X", "W", "R", "B", "lens", "h0", "c0", "P", NULL}, *gi[] = {"X", "W", "R", "B", "", "h0", NULL};
  static char *lo[] = {"Y", "Y_h", "Y_c", NULL}, *go[] = {"Y", "Y_h", NULL};
  if (lstm) {
    b_init_tensor(&rb, "c0", 1, 3, hd, rc0, (size_t)(D * 4));
    b_init_tensor(&rb, "P", 1, 2, pd, rp, (size_t)(D * 6));
  }
  Onnx__NodeProto *n = b_node(&rb, lstm ? "LSTM" : "GRU", "rnn", lstm ? li : gi, lstm ? lo : go);
  b_attr_i(&rb, n, "hidden_size", 2);
  b_attr_s(&rb, n, "direction", lstm ? "bidirectional" : "reverse");
  if (!lstm) b_attr_i(&rb, n, "linear_before_reset", 1);
  b_output(&rb, "Y");
  b_output(&rb, "Y_h");
  if (lstm) b_output(&rb, "Y_c");
}

static const char RNN_PY[] =
    "def f(n, k, a, *shape): return (a * np.sin(np.arange(n) * k + 0.3)).astype(np.float32).astype(np.float64).reshape(shape)\n"
    "def sig(x): return 1 / (1 + np.exp(-x))\n"
    "G = 4 if lstm else 3; D = 2 if lstm else 1; S, N, I, H = 3, 2, 3, 2\n"
    "X = np.array(xs, dtype=np.float32).astype(np.float64).reshape(S, N, I)\n"
    "W = f(D*G*H*I, 0.7, 0.6, D, G*H, I); R = f(D*G*H*H, 1.3, 0.5, D, G*H, H); B = f(D*2*G*H, 0.9, 0.4, D, 2*G*H)\n"
    "P = f(D*3*H, 2.1, 0.3, D, 3*H); h0 = f(D*N*H, 0.5, 0.2, D, N, H); c0 = f(D*N*H, 1.7, 0.2, D, N, H); lens = np.array([3, 2])\n"
    "Y = np.zeros((S, D, N, H)); hs = []; cs = []\n"
    "for d in range(D):\n"
    "  back = d == 1 or not lstm; h = h0[d]; c = c0[d]\n"
    "  for t in (range(S - 1, -1, -1) if back else range(S)):\n"
    "    if lstm:\n"
    "      g = X[t] @ W[d].T + h @ R[d].T + B[d][:4*H] + B[d][4*H:]\n"
    "      i, o, fg, cc = np.split(g, 4, axis=1)\n"
    "      i = sig(i + P[d][:H] * c); fg = sig(fg + P[d][2*H:] * c); cn = fg * c + i * np.tanh(cc)\n"
    "      hn = sig(o + P[d][H:2*H] * cn) * np.tanh(cn)\n"
    "      on = (t < lens)[:, None]; h = np.where(on, hn, h); c = np.where(on, cn, c); Y[t, d] = np.where(on, hn, 0)\n"
    "    else:\n"
    "      gx = X[t] @ W[d].T + B[d][:3*H]\n"
    "      z = sig(gx[:, :H] + h @ R[d][:H].T + B[d][3*H:4*H]); r = sig(gx[:, H:2*H] + h @ R[d][H:2*H].T + B[d][4*H:5*H])\n"
    "      hh = np.tanh(gx[:, 2*H:] + r * (h @ R[d][2*H:].T + B[d][5*H:]))\n"
    "      h = (1 - z) * hh + z * h; Y[t, d] = h\n"
    "  hs.append(h); cs.append(c)\n"
    "for a in [Y, np.array(hs)] + ([np.array(cs)] if lstm else []): print(a.ndim, *a.shape, *a.ravel().tolist())\n";

START_TEST(recurrent_layers) {
  float x[18];
  fill(x, 18, 0.37, 1.0);
  char xs[512] = "[";
  for (int i = 0; i < 18; i++) snprintf(xs + strlen(xs), sizeof xs - strlen(xs), "%s%.9g", i ? "," : "", (double)x[i]);
  strcat(xs, "]");
  for (int lstm = 0; lstm < 2; lstm++) {
    rnn_model(lstm);
    rill_module_t *m = load_model(&rb);
    rill_vm_t *vm;
    ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
    static const int32_t lens[2] = {3, 2};
    rill_type_t types[2] = {{RILL_F32, 3, {3, 2, 3}}, {RILL_I32, 1, {2}}};
    const void *data[2] = {x, lens};
    char script[4096];
    snprintf(script, sizeof script, "lstm = %d; xs = %s\n", lstm, xs);
    strncat(script, RNN_PY, sizeof script - strlen(script) - 1);
    check_run(vm, lstm ? 2 : 1, types, data, script);
    rill_vm_destroy(vm);
    rill_module_release(m);
  }
  damage(&rb, 600);
}
END_TEST

/* ---- sequences as graph inputs and results, SequenceMap ----
 * s: a sequence of f32[N] (its length and each item's shape given with
 * --shape), w f32[], t f32[2]; SequenceMap(s, w) with the body
 * (x, w) -> (x * w, Shape(x)); SequenceInsert(s, t) at the back. The items
 * of s are of sizes 2, 4, 2: a body function per run of item types. */
static builder_t sq_main, sq_body;
static Onnx__TypeProto sq_type;
static Onnx__TypeProto__Sequence sq_seq;
static void seq_model(void) {
  builder_t *b = &sq_main, *f = &sq_body;
  b_init(b, 17);
  b_init(f, 17);
  static const int64_t dn[1] = {-1};
  static const char *pn[1] = {"N"};
  b_input_p(b, "s", 1, 1, dn, pn);
  sq_seq = (Onnx__TypeProto__Sequence)ONNX__TYPE_PROTO__SEQUENCE__INIT;
  sq_seq.elem_type = b->ins[0].type; /* the tensor type just made, as the item type */
  sq_type = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  sq_type.value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  sq_type.sequence_type = &sq_seq;
  b->ins[0].type = &sq_type;
  int64_t d2[1] = {2};
  b_input(b, "w", 0, NULL, NULL);
  b_input(b, "t", 1, d2, NULL);
  b_input_p(f, "x", 1, 1, dn, pn);
  b_input(f, "wb", 0, NULL, NULL);
  static char *fi0[] = {"x", "wb", NULL}, *fo0[] = {"xw", NULL}, *fi1[] = {"x", NULL}, *fo1[] = {"sh", NULL};
  b_node(f, "Mul", "mul", fi0, fo0);
  b_node(f, "Shape", "shape", fi1, fo1);
  b_output(f, "xw");
  b_output(f, "sh");
  static char *i0[] = {"s", "w", NULL}, *o0[] = {"ms", "shs", NULL}, *i1[] = {"s", "t", NULL}, *o1[] = {"s2", NULL};
  b_attr_graph(b, b_node(b, "SequenceMap", "map", i0, o0), "body", f);
  b_node(b, "SequenceInsert", "ins", i1, o1);
  b_output(b, "ms");
  b_output(b, "shs");
  b_output(b, "s2");
}

START_TEST(sequence_inputs_results_and_map) {
  seq_model();
  onnx_options_t o = {0};
  char why[256];
  static const char *specs[] = {"s=3", "s[0]=[2]", "s[1]=[4]", "s[2]=[2]"};
  for (int i = 0; i < 4; i++) ck_assert_msg(onnx_options_add_shape(&o, specs[i], why, sizeof why), "%s", why);
  rill_module_t *m = load_model_with(&sq_main, &o);
  int np = 0, nr = 0;
  rill_module_function(m, "main", &np, &nr);
  ck_assert_int_eq(np, 5); /* the 3 items, w, t */
  ck_assert_int_eq(nr, 10); /* 3 products, 3 shapes, 4 items */
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const float s0[2] = {1, -2}, s1[4] = {0.5f, 3, -1, 4}, s2[2] = {7, 8}, w = 1.5f, t[2] = {-3, 9};
  rill_type_t types[5] = {{RILL_F32, 1, {2}}, {RILL_F32, 1, {4}}, {RILL_F32, 1, {2}}, {RILL_F32, 0, {0}}, {RILL_F32, 1, {2}}};
  const void *data[5] = {s0, s1, s2, &w, t};
  check_run(vm, 5, types, data,
            "s = [np.array([1, -2], dtype=np.float32), np.array([0.5, 3, -1, 4], dtype=np.float32), np.array([7, 8], dtype=np.float32)]\n"
            "w = np.float32(1.5); t = np.array([-3, 9], dtype=np.float32)\n"
            "res = [x * w for x in s] + [np.array(x.shape) for x in s] + s + [t]\n"
            "for r in res: print(r.ndim, *r.shape, *r.ravel().tolist())");
  rill_vm_destroy(vm);
  rill_module_release(m);
  onnx_options_free(&o);
  /* without the length: refused, saying what to give */
  onnx_result_t r;
  char msg[1024];
  ck_assert_int_eq(import(&sq_main, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "graph input 's' is a sequence: give its length (--shape s=K"), "%s", msg);
  /* an item's shape of another rank than the model's */
  onnx_options_t o2 = {0};
  ck_assert(onnx_options_add_shape(&o2, "s=1", why, sizeof why));
  ck_assert(onnx_options_add_shape(&o2, "s[0]=[2,2]", why, sizeof why));
  ck_assert_int_eq(import(&sq_main, NULL, &o2, &r, msg, sizeof msg), RILL_INVALID_ARGUMENT);
  ck_assert_msg(strstr(msg, "--shape s[0]: rank 2, the model's input has rank 1"), "%s", msg);
  onnx_options_free(&o2);
  /* malformed whole shapes */
  static const char *bad[] = {"s[0]=[2,,3]", "s[0]=[2", "s[0]=[1,2,3,4,5,6,7,8,9]", "s[0]=[-1]", "s[0]=[2]x"};
  for (int i = 0; i < 5; i++) {
    onnx_options_t o3 = {0};
    ck_assert_msg(!onnx_options_add_shape(&o3, bad[i], why, sizeof why), "%s accepted", bad[i]);
    ck_assert_msg(strstr(why, "expected a shape [D1,D2,...]"), "%s", why);
  }
  damage(&sq_main, 600);
}
END_TEST

/* ---- optionals ----
 * o: an optional f32[3] (present or not by --shape o=1 / o=0), q: an
 * optional sequence of f32[2] (q=1, q[0]=2); h = OptionalHasElement(o),
 * g = OptionalGetElement(q) (a sequence, returned as its items),
 * e = Optional() of type f32 (none: no result), w = Optional(x) got back
 * as x + 1 */
static builder_t op_main;
static Onnx__TypeProto op_to, op_tq, op_tqs, op_te;
static Onnx__TypeProto__Optional op_oo, op_oq;
static Onnx__TypeProto__Sequence op_sq;
static void opt_model(void) {
  builder_t *b = &op_main;
  b_init(b, 16);
  int64_t d3[1] = {3}, d2[1] = {2};
  b_input(b, "o", 1, d3, NULL);
  b_input(b, "q", 1, d2, NULL);
  b_input(b, "x", 1, d3, NULL);
  op_oo = (Onnx__TypeProto__Optional)ONNX__TYPE_PROTO__OPTIONAL__INIT;
  op_oo.elem_type = b->ins[0].type;
  op_to = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  op_to.value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
  op_to.optional_type = &op_oo;
  b->ins[0].type = &op_to;
  op_sq = (Onnx__TypeProto__Sequence)ONNX__TYPE_PROTO__SEQUENCE__INIT;
  op_sq.elem_type = b->ins[1].type;
  op_tqs = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  op_tqs.value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
  op_tqs.sequence_type = &op_sq;
  op_oq = (Onnx__TypeProto__Optional)ONNX__TYPE_PROTO__OPTIONAL__INIT;
  op_oq.elem_type = &op_tqs;
  op_tq = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  op_tq.value_case = ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE;
  op_tq.optional_type = &op_oq;
  b->ins[1].type = &op_tq;
  static char *i0[] = {"o", NULL}, *o0[] = {"h", NULL}, *i1[] = {"q", NULL}, *o1[] = {"g", NULL}, *i2[] = {NULL}, *o2[] = {"e", NULL},
              *i3[] = {"x", NULL}, *o3[] = {"w", NULL}, *i4[] = {"w", NULL}, *o4[] = {"wx", NULL}, *i5[] = {"wx", "one", NULL}, *o5[] = {"y", NULL};
  static float one = 1;
  b_init_tensor(b, "one", 1, 0, NULL, &one, 1);
  b_node(b, "OptionalHasElement", "has", i0, o0);
  b_node(b, "OptionalGetElement", "get", i1, o1);
  Onnx__NodeProto *en = b_node(b, "Optional", "empty", i2, o2);
  op_te = *b_type_p(b, 1, 0, NULL, NULL);
  Onnx__AttributeProto *a = b_attr(b, en, "type");
  a->has_type = 1;
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO;
  a->tp = &op_te;
  b_node(b, "Optional", "wrap", i3, o3);
  b_node(b, "OptionalGetElement", "unwrap", i4, o4);
  b_node(b, "Add", "add", i5, o5);
  b_output(b, "h");
  b_output(b, "g");
  b_output(b, "e");
  b_output(b, "y");
}

START_TEST(optionals) {
  opt_model();
  for (int present = 0; present < 2; present++) {
    onnx_options_t o = {0};
    char why[256];
    const char *specs[] = {present ? "o=1" : "o=0", "o[0]=[3]", "q=1", "q[0]=2"};
    for (int i = 0; i < 4; i++) ck_assert_msg(onnx_options_add_shape(&o, specs[i], why, sizeof why), "%s", why);
    rill_module_t *m = load_model_with(&op_main, &o);
    int np = 0, nr = 0;
    rill_module_function(m, "main", &np, &nr);
    ck_assert_int_eq(np, present + 3); /* o's value where present, q's two, x */
    ck_assert_int_eq(nr, 4);           /* h, g's two, y; e none */
    rill_vm_t *vm;
    ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
    static const float ov[3] = {9, 9, 9}, q0[2] = {1, 2}, q1[2] = {-3, 4}, x[3] = {0.5f, -1, 2};
    rill_type_t types[4] = {{RILL_F32, 1, {3}}, {RILL_F32, 1, {2}}, {RILL_F32, 1, {2}}, {RILL_F32, 1, {3}}};
    const void *data[4] = {ov, q0, q1, x};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 4 - !present, types + !present, data + !present, &res);
    uint8_t h;
    float g0[2], g1[2], y[3];
    ck_assert(rill_tensor_read(res[0], &h, 1) == NULL);
    ck_assert(rill_tensor_read(res[1], g0, sizeof g0) == NULL);
    ck_assert(rill_tensor_read(res[2], g1, sizeof g1) == NULL);
    ck_assert(rill_tensor_read(res[3], y, sizeof y) == NULL);
    ck_assert_int_eq(h, present);
    ck_assert(!memcmp(g0, q0, sizeof g0) && !memcmp(g1, q1, sizeof g1));
    for (int i = 0; i < 3; i++) ck_assert(y[i] == x[i] + 1);
    rill_results_free(vm, res, nres);
    rill_vm_destroy(vm);
    rill_module_release(m);
    onnx_options_free(&o);
  }
  /* unsaid, or more than one value: refused */
  onnx_result_t r;
  char msg[1024], why[256];
  ck_assert_int_eq(import(&op_main, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "graph input 'o' is an optional: say whether it holds a value (--shape o=1, or =0)"), "%s", msg);
  onnx_options_t o2 = {0};
  ck_assert(onnx_options_add_shape(&o2, "o=2", why, sizeof why));
  ck_assert_int_eq(import(&op_main, NULL, &o2, &r, msg, sizeof msg), RILL_INVALID_ARGUMENT);
  ck_assert_msg(strstr(msg, "--shape o=2: an optional holds 0 or 1 values"), "%s", msg);
  onnx_options_free(&o2);
  /* the value of an empty optional */
  onnx_options_t o3 = {0};
  static const char *s3[] = {"o=0", "q=1", "q[0]=2"};
  for (int i = 0; i < 3; i++) ck_assert(onnx_options_add_shape(&o3, s3[i], why, sizeof why));
  op_main.nodes[4].input[0] = "e";
  ck_assert_int_eq(import(&op_main, NULL, &o3, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "OptionalGetElement of an optional that holds no value"), "%s", msg);
  op_main.nodes[4].input[0] = "w";
  onnx_options_free(&o3);
  damage(&op_main, 600);
}
END_TEST

/* ---- If returning sequences ----
 * c bool, x, y f32[2]: then [x, y + y], else [y, x]; the output a
 * sequence, returned as its two values; branches of different lengths
 * refused */
static builder_t is_main, is_then, is_else;
static void if_seq_model(void) {
  builder_t *b = &is_main, *t = &is_then, *e = &is_else;
  b_init(b, 13);
  b_init(t, 13);
  b_init(e, 13);
  int64_t d2[1] = {2};
  b_input_p(b, "c", 9, 0, NULL, NULL);
  b_input(b, "x", 1, d2, NULL);
  b_input(b, "y", 1, d2, NULL);
  static char *ti0[] = {"y", "y", NULL}, *to0[] = {"yy", NULL}, *ti1[] = {"x", "yy", NULL}, *to1[] = {"ts", NULL}, *ei[] = {"y", "x", NULL},
              *eo[] = {"es", NULL}, *bi[] = {"c", NULL}, *bo[] = {"s", NULL};
  b_node(t, "Add", "dbl", ti0, to0);
  b_node(t, "SequenceConstruct", "tsc", ti1, to1);
  b_output(t, "ts");
  b_node(e, "SequenceConstruct", "esc", ei, eo);
  b_output(e, "es");
  Onnx__NodeProto *n = b_node(b, "If", "if", bi, bo);
  b_attr_graph(b, n, "then_branch", t);
  b_attr_graph(b, n, "else_branch", e);
  b_output(b, "s");
}

START_TEST(if_returning_sequences) {
  if_seq_model();
  rill_module_t *m = load_model(&is_main);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const float x[2] = {1, -2}, y[2] = {0.5f, 3};
  rill_type_t types[3] = {{RILL_BOOL, 0, {0}}, {RILL_F32, 1, {2}}, {RILL_F32, 1, {2}}};
  for (uint8_t c = 0; c < 2; c++) {
    const void *data[3] = {&c, x, y};
    char script[256];
    snprintf(script, sizeof script,
             "x = np.array([1, -2.]); y = np.array([0.5, 3])\nres = [x, y + y] if %d else [y, x]\n"
             "for r in res: print(r.ndim, *r.shape, *r.tolist())", c);
    if (!check_run(vm, 3, types, data, script)) break;
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* branches of different lengths */
  static char *ei2[] = {"y", "x", "x", NULL};
  is_else.nodes[0].input = ei2;
  is_else.nodes[0].n_input = 3;
  import_escaped(&is_main, "the branches give output 0 as a sequence of 2 values and a sequence of 3 (they must agree)");
  if_seq_model();
  damage(&is_main, 600);
}
END_TEST

/* ---- a Loop carrying a sequence ----
 * x f32[2], xs: SequenceConstruct(x, x + x, x * x); Loop M = 3 (known)
 * carrying an empty sequence acc and a tensor v = x: each iteration
 * inserts xs[i] * v into acc, v + xs[i] carried, v a scan output; acc
 * returned as its values. With M a graph input: refused. */
static builder_t ls_main, ls_body;
static void loop_seq_model(bool known) {
  builder_t *b = &ls_main, *g = &ls_body;
  b_init(b, 13);
  b_init(g, 13);
  int64_t d2[1] = {2};
  b_input(b, "x", 1, d2, NULL);
  static int64_t m3 = 3;
  if (known) b_init_tensor(b, "M", 7, 0, NULL, &m3, 1);
  else b_input_p(b, "M", 7, 0, NULL, NULL);
  static char *a0[] = {"x", "x", NULL}, *a1[] = {"x2", NULL}, *m0[] = {"x", "x", NULL}, *m1[] = {"xx", NULL}, *c0[] = {"x", "x2", "xx", NULL},
              *c1[] = {"xs", NULL}, *e0[] = {NULL}, *e1[] = {"acc0", NULL}, *l0[] = {"M", "", "acc0", "x", NULL}, *l1[] = {"acc", "vf", "vs", NULL};
  b_node(b, "Add", "x2", a0, a1);
  b_node(b, "Mul", "xx", m0, m1);
  b_node(b, "SequenceConstruct", "xs", c0, c1);
  b_attr_i(b, b_node(b, "SequenceEmpty", "acc0", e0, e1), "dtype", 1);
  b_input_p(g, "i", 7, 0, NULL, NULL);
  b_input_p(g, "c", 9, 0, NULL, NULL);
  b_input(g, "acc_in", 1, d2, NULL); /* a sequence in the model; its type is not read */
  b_input(g, "v", 1, d2, NULL);
  static char *g0[] = {"xs", "i", NULL}, *g1[] = {"xi", NULL}, *g2[] = {"xi", "v", NULL}, *g3[] = {"p", NULL}, *g4[] = {"acc_in", "p", NULL},
              *g5[] = {"acc_out", NULL}, *g6[] = {"v", "xi", NULL}, *g7[] = {"v2", NULL}, *g8[] = {"c", NULL}, *g9[] = {"c2", NULL},
              *g10[] = {"v", NULL}, *g11[] = {"vscan", NULL};
  b_node(g, "SequenceAt", "at", g0, g1);
  b_node(g, "Mul", "p", g2, g3);
  b_node(g, "SequenceInsert", "ins", g4, g5);
  b_node(g, "Add", "v2", g6, g7);
  b_node(g, "Identity", "c2", g8, g9);
  b_node(g, "Identity", "vscan", g10, g11);
  b_output(g, "c2");
  b_output(g, "acc_out");
  b_output(g, "v2");
  b_output(g, "vscan");
  b_attr_graph(b, b_node(b, "Loop", "loop", l0, l1), "body", g);
  b_output(b, "acc");
  b_output(b, "vf");
  b_output(b, "vs");
}

START_TEST(loop_carrying_a_sequence) {
  loop_seq_model(true);
  rill_module_t *m = load_model(&ls_main);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const float x[2] = {1.5f, -2};
  rill_type_t types[1] = {{RILL_F32, 1, {2}}};
  const void *data[1] = {x};
  check_run(vm, 1, types, data,
            "x = np.array([1.5, -2], dtype=np.float32); xs = [x, x + x, x * x]; acc = []; v = x; vs = []\n"
            "for i in range(3): vs.append(v); acc.append(xs[i] * v); v = v + xs[i]\n"
            "for r in acc + [v, np.array(vs)]: print(r.ndim, *r.shape, *r.ravel().tolist())");
  rill_vm_destroy(vm);
  rill_module_release(m);
  loop_seq_model(false);
  import_escaped(&ls_main, "a Loop carrying or reading sequences or optionals whose trip count is computed at run time");
  loop_seq_model(true);
  damage(&ls_main, 600);
}
END_TEST

/* ---- Scan of opset 8 ----
 * sl i32[2] (sequence_lens, an initializer of 3s), s f32[2,2], xs and ys
 * f32[2,3,2] (ys read backwards): body(s, x, y) -> (s + x * y, s - y) */
static builder_t s8_main, s8_body;
static int32_t s8_lens[2] = {3, 3};
static void scan8_model(void) {
  builder_t *b = &s8_main, *g = &s8_body;
  b_init(b, 8);
  b_init(g, 8);
  int64_t d2[1] = {2}, d22[2] = {2, 2}, d232[3] = {2, 3, 2};
  static int64_t ld[1] = {2};
  b_init_tensor(b, "sl", 6, 1, ld, s8_lens, 2);
  b_input(b, "s", 2, d22, NULL);
  b_input(b, "xs", 3, d232, NULL);
  b_input(b, "ys", 3, d232, NULL);
  b_input(g, "si", 1, d2, NULL);
  b_input(g, "x", 1, d2, NULL);
  b_input(g, "y", 1, d2, NULL);
  static char *m0[] = {"x", "y", NULL}, *m1[] = {"xy", NULL}, *a0[] = {"si", "xy", NULL}, *a1[] = {"so", NULL}, *d0[] = {"si", "y", NULL}, *d1[] = {"o", NULL};
  b_node(g, "Mul", "mul", m0, m1);
  b_node(g, "Add", "add", a0, a1);
  b_node(g, "Sub", "sub", d0, d1);
  b_output(g, "so");
  b_output(g, "o");
  static char *i0[] = {"sl", "s", "xs", "ys", NULL}, *o0[] = {"sf", "os", NULL};
  static int64_t dirs[2] = {0, 1};
  Onnx__NodeProto *n = b_node(b, "Scan", "scan", i0, o0);
  b_attr_graph(b, n, "body", g);
  b_attr_i(b, n, "num_scan_inputs", 2);
  b_attr_ints(b, n, "directions", dirs, 2);
  b_output(b, "sf");
  b_output(b, "os");
}

START_TEST(scan_opset_8) {
  scan8_model();
  rill_module_t *m = load_model(&s8_main);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  float s0[4], xs[12], ys[12];
  for (int i = 0; i < 4; i++) s0[i] = (float)i - 1.5f;
  for (int i = 0; i < 12; i++) xs[i] = (float)((i * 5) % 7) - 3, ys[i] = (float)((i * 3) % 5) * 0.5f;
  rill_type_t types[3] = {{RILL_F32, 2, {2, 2}}, {RILL_F32, 3, {2, 3, 2}}, {RILL_F32, 3, {2, 3, 2}}};
  const void *data[3] = {s0, xs, ys};
  check_run(vm, 3, types, data,
            "s = np.arange(4, dtype=np.float32).reshape(2, 2) - 1.5\n"
            "xs = (np.array([(i * 5) % 7 for i in range(12)], dtype=np.float32) - 3).reshape(2, 3, 2)\n"
            "ys = (np.array([(i * 3) % 5 for i in range(12)], dtype=np.float32) * 0.5).reshape(2, 3, 2)\n"
            "fs, os = [], []\n"
            "for b in range(2):\n"
            "    st = s[b]; o = []\n"
            "    for t in range(3):\n"
            "        x, y = xs[b, t], ys[b, 2 - t]\n"
            "        o.append(st - y); st = st + x * y\n"
            "    fs.append(st); os.append(np.stack(o))\n"
            "for r in (np.stack(fs), np.stack(os)): print(r.ndim, *r.shape, *r.ravel().tolist())");
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* a shorter sequence: refused */
  s8_lens[1] = 2;
  import_escaped(&s8_main, "sequence_lens shorter than the scan inputs");
  s8_lens[1] = 3;
  damage(&s8_main, 600);
}
END_TEST

/* ---- detection models' data-dependent chains ---- */
/* The scores (two inputs: some above 0, none) and boxes of the tests below. */
static const float DET_S[2][8] = {{0.9f, -1, 0.3f, 0.75f, -0.5f, 0.6f, 0.2f, -2}, {-1, -0.5f, -0.8f, -0.1f, -0.45f, -3, -0.2f, -0.7f}};
static const float DET_BX[8][4] = {{0, 0, 1, 1}, {0, 0, 2, 2}, {0.1f, 0.1f, 1.1f, 1.1f}, {2, 2, 3, 3}, {5, 5, 6, 6},
                                   {0, 0, 0.9f, 1}, {2.1f, 2, 3.1f, 3}, {7, 7, 8, 8}};

/* numpy's side: s and bx as given, sv and bv the scores above 0 and their
 * boxes, keep ONNX's greedy NMS over them (at most 10, IoU above 0.5
 * suppressed, highest first, ties to the lower index), then `tail` */
static void det_script(char *script, size_t n, const float *s, const char *tail) {
  char sl[256] = "", bl[512] = "";
  for (int i = 0; i < 8; i++) snprintf(sl + strlen(sl), sizeof sl - strlen(sl), "%s%.9g", i ? "," : "", s[i]);
  for (int i = 0; i < 32; i++) snprintf(bl + strlen(bl), sizeof bl - strlen(bl), "%s%.9g", i ? "," : "", DET_BX[i / 4][i % 4]);
  snprintf(script, n,
           "s = np.array([%s], dtype=np.float32); bx = np.array([%s], dtype=np.float32).reshape(8, 4)\n"
           "ix = np.nonzero(s > 0)[0]; sv = s[ix]; bv = bx[ix]\n"
           "def iou(a, b):\n"
           "  ay1, ay2 = min(a[0], a[2]), max(a[0], a[2]); ax1, ax2 = min(a[1], a[3]), max(a[1], a[3])\n"
           "  by1, by2 = min(b[0], b[2]), max(b[0], b[2]); bx1, bx2 = min(b[1], b[3]), max(b[1], b[3])\n"
           "  ih = max(0.0, min(ay2, by2) - max(ay1, by1)); iw = max(0.0, min(ax2, bx2) - max(ax1, bx1)); i = ih * iw\n"
           "  u = (ay2 - ay1) * (ax2 - ax1) + (by2 - by1) * (bx2 - bx1) - i\n"
           "  return i / u if u > 0 else 0.0\n"
           "keep = []\n"
           "for i in np.argsort(-sv, kind=\"stable\"):\n"
           "  if len(keep) < 10 and all(iou(bv[i], bv[j]) <= 0.5 for j in keep): keep.append(i)\n"
           "keep = np.array(keep, dtype=np.int64)\n%s",
           sl, bl, tail);
}

/* A detection head's data-dependent chain, as torchvision's exporter writes
 * it: the scores above a threshold (NonZero: a count read back), their
 * values and boxes taken with GatherND at those indices, the best 3 with
 * TopK along that counted axis (k checked against it at run time), and
 * NonMaxSuppression over the counted boxes; a Concat of 90 inputs. Against
 * numpy (ONNX's greedy NMS written out), at two inputs with different counts;
 * a count below k is a run-time error. */
/* Both detection models' front: scores s [8] and boxes bx [8, 4], the
 * scores above 0 (m, a NonZero over it: nz), and their values sv and boxes
 * bv taken by GatherND at those indices (ix). */
static void detection_front(builder_t *b) {
  b_init(b, 13);
  /* static: the builder keeps pointers to an initializer's dims and values */
  static int64_t sd[1] = {8}, bd[2] = {8, 4};
  static float thr = 0;
  b_input(b, "s", 1, sd, NULL);
  b_input(b, "bx", 2, bd, NULL);
  b_init_tensor(b, "thr", 1, 0, NULL, &thr, 1);
  static char *i0[] = {"s", "thr", NULL}, *o0[] = {"m", NULL}, *o1[] = {"nz", NULL}, *i1[] = {"m", NULL}, *i2[] = {"nz", NULL}, *o2[] = {"ix", NULL},
              *i3[] = {"s", "ix", NULL}, *o3[] = {"sv", NULL}, *i4[] = {"bx", "ix", NULL}, *o4[] = {"bv", NULL};
  b_node(b, "Greater", "gt", i0, o0);
  b_node(b, "NonZero", "nz", i1, o1);
  b_node(b, "Transpose", "tr", i2, o2);
  b_node(b, "GatherND", "gs", i3, o3);
  b_node(b, "GatherND", "gb", i4, o4);
}

static void detection_model(builder_t *b) {
  detection_front(b);
  static int64_t one = 1, two = 2;
  static float iou = 0.5f;
  static int64_t k3 = 3, maxo = 10, ax0[1] = {0}, ax01[2] = {0, 1};
  b_init_tensor(b, "iou", 1, 0, NULL, &iou, 1);
  b_init_tensor(b, "k", 7, 1, &one, &k3, 1);
  b_init_tensor(b, "maxo", 7, 1, &one, &maxo, 1);
  b_init_tensor(b, "ax0", 7, 1, &one, ax0, 1);
  b_init_tensor(b, "ax01", 7, 1, &two, ax01, 2);
  static char *i5[] = {"sv", "k", NULL}, *o5[] = {"tv", "ti", NULL}, *i6[] = {"bv", "ax0", NULL}, *o6[] = {"b3", NULL}, *i7[] = {"sv", "ax01", NULL},
              *o7[] = {"s3", NULL}, *i8[] = {"b3", "s3", "maxo", "iou", NULL}, *o8[] = {"sel", NULL}, *o9[] = {"cat", NULL};
  b_node(b, "TopK", "tk", i5, o5);
  b_node(b, "Unsqueeze", "ub", i6, o6);
  b_node(b, "Unsqueeze", "us", i7, o7);
  b_node(b, "NonMaxSuppression", "nms", i8, o8);
  static char *i9[91];
  for (int i = 0; i < 90; i++) i9[i] = "s";
  Onnx__NodeProto *c = b_node(b, "Concat", "cat", i9, o9);
  b_attr_i(b, c, "axis", 0);
  b_output(b, "sv");
  b_output(b, "bv");
  b_output(b, "tv");
  b_output(b, "ti");
  b_output(b, "sel");
  b_output(b, "cat");
}

START_TEST(detection_chain) {
  builder_t b;
  detection_model(&b);
  rill_module_t *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const float S1[8] = {-1, 0.5f, 0.8f, -0.1f, 0.45f, -3, -0.2f, -0.7f}; /* three above 0: k=3 fits */
  rill_type_t types[2] = {{RILL_F32, 1, {8}}, {RILL_F32, 2, {8, 4}}};
  for (int k = 0; k < 2; k++) {
    char script[3072];
    det_script(script, sizeof script, k ? S1 : DET_S[0],
               "ti = np.argsort(-sv, kind=\"stable\")[:3]; tv = sv[ti]\n"
               "sel = np.array([[0, 0, i] for i in keep], dtype=np.int64).reshape(-1, 3)\n"
               "for r in (sv, bv, tv, ti, sel, np.concatenate([s] * 90)): print(r.ndim, *r.shape, *r.ravel().tolist())");
    if (!check_run(vm, 2, types, (const void *[]){k ? S1 : DET_S[0], DET_BX}, script)) break;
  }
  /* two scores above 0: TopK's k=3 does not fit the counted axis */
  static const float FEW[8] = {0.5f, -1, -1, 0.25f, -1, -1, -1, -1};
  rill_tensor_t *in[2], **res;
  int nres;
  ck_assert(rill_tensor_create(vm, &types[0], FEW, &in[0]) == NULL);
  ck_assert(rill_tensor_create(vm, &types[1], DET_BX, &in[1]) == NULL);
  rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &res, &nres);
  ck_assert_msg(st && strstr(rill_status_message(st), "k"), "%s", st ? rill_status_message(st) : "no error");
  rill_status_free(st);
  for (int i = 0; i < 2; i++) rill_tensor_release(in[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
  damage(&b, 600); /* every truncation and byte flips: an error or a program, no crash */
}
END_TEST

/* torchvision's batched NMS as its exporter writes it: the boxes of the
 * scores above 0 (a count read back), If(no boxes) then an empty i64[0]
 * else NonMaxSuppression's kept indices (a count the else branch reads
 * back): the branches' sizes differ, so the then branch binds the else's
 * count to 0. The condition is data (a sum of the mask), not sizes. After
 * the If: the first two kept (a Slice over that count), ones of the kept's
 * shape (made from sizes alone: it must come after the
 * If that binds them), and the kept scores scattered back into place
 * (ScatterElements over counted sizes). Against numpy, with boxes and with
 * none. */
static builder_t nb_main, nb_then, nb_else;
static void nms_if_model(void) {
  builder_t *b = &nb_main, *t = &nb_then, *e = &nb_else;
  detection_front(b);
  b_init(t, 13);
  b_init(e, 13);
  static int64_t one = 1, two = 2; /* static: the builder keeps pointers */
  static float iou = 0.5f;
  static int64_t zero = 0, maxo = 10, ax0 = 0, ax01[2] = {0, 1}, st0 = 0, en2 = 2, col2 = 2;
  b_init_tensor(b, "zero", 7, 0, NULL, &zero, 1);
  b_init_tensor(b, "st0", 7, 1, &one, &st0, 1);
  b_init_tensor(b, "en2", 7, 1, &one, &en2, 1);
  static char *i5[] = {"mi", NULL}, *o5[] = {"cnt", NULL}, *i5a[] = {"m", NULL}, *o5a[] = {"mi", NULL},
              *i6[] = {"cnt", "zero", NULL}, *o6[] = {"none", NULL}, *i7[] = {"none", NULL}, *o7[] = {"keep", NULL},
              *i8[] = {"keep", "st0", "en2", NULL}, *o8[] = {"first2", NULL}, *i9[] = {"keep", NULL}, *o9[] = {"kshape", NULL},
              *i10[] = {"kshape", NULL}, *o10[] = {"ones", NULL}, *i11[] = {"sv", NULL}, *o11[] = {"svshape", NULL},
              *i12[] = {"svshape", NULL}, *o12[] = {"zeros", NULL}, *i13[] = {"sv", "keep", NULL}, *o13[] = {"kept", NULL},
              *i14[] = {"zeros", "keep", "kept", NULL}, *o14[] = {"placed", NULL};
  b_attr_i(b, b_node(b, "Cast", "mi", i5a, o5a), "to", 7);
  b_attr_i(b, b_node(b, "ReduceSum", "cnt", i5, o5), "keepdims", 0); /* the count as data: the If is decided at run time */
  b_node(b, "Equal", "eq", i6, o6);
  /* then: an empty i64[0] */
  static int64_t d0 = 0;
  b_init_tensor(t, "t_keep", 7, 1, &d0, NULL, 0);
  b_output(t, "t_keep");
  /* else: NMS over the counted boxes, the third column of its rows */
  b_init_tensor(e, "maxo", 7, 1, &one, &maxo, 1);
  b_init_tensor(e, "iou", 1, 0, NULL, &iou, 1);
  b_init_tensor(e, "ax0", 7, 1, &one, &ax0, 1);
  b_init_tensor(e, "ax01", 7, 1, &two, ax01, 2);
  b_init_tensor(e, "col2", 7, 0, NULL, &col2, 1);
  static char *e0[] = {"bv", "ax0", NULL}, *eo0[] = {"b3", NULL}, *e1[] = {"sv", "ax01", NULL}, *eo1[] = {"s3", NULL},
              *e2[] = {"b3", "s3", "maxo", "iou", NULL}, *eo2[] = {"sel", NULL}, *e3[] = {"sel", "col2", NULL}, *eo3[] = {"e_keep", NULL};
  b_node(e, "Unsqueeze", "ub", e0, eo0);
  b_node(e, "Unsqueeze", "us", e1, eo1);
  b_node(e, "NonMaxSuppression", "nms", e2, eo2);
  b_attr_i(e, b_node(e, "Gather", "col", e3, eo3), "axis", 1);
  b_output(e, "e_keep");
  Onnx__NodeProto *n = b_node(b, "If", "if", i7, o7);
  b_attr_graph(b, n, "then_branch", t);
  b_attr_graph(b, n, "else_branch", e);
  b_node(b, "Slice", "first2", i8, o8);
  b_node(b, "Shape", "kshape", i9, o9);
  Onnx__NodeProto *cs = b_node(b, "ConstantOfShape", "ones", i10, o10);
  static float onev = 1;
  b_attr_scalar(b, cs, "value", 1, &onev);
  b_node(b, "Shape", "svshape", i11, o11);
  b_node(b, "ConstantOfShape", "zeros", i12, o12);
  b_node(b, "Gather", "kept", i13, o13);
  b_attr_i(b, b_node(b, "ScatterElements", "place", i14, o14), "axis", 0);
  b_output(b, "keep");
  b_output(b, "first2");
  b_output(b, "ones");
  b_output(b, "placed");
}

START_TEST(if_branches_of_counted_sizes) {
  nms_if_model();
  rill_module_t *m = load_model(&nb_main);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  rill_type_t types[2] = {{RILL_F32, 1, {8}}, {RILL_F32, 2, {8, 4}}};
  for (int k = 0; k < 2; k++) {
    char script[3072];
    det_script(script, sizeof script, DET_S[k],
               "placed = np.zeros(len(sv), dtype=np.float32); placed[keep] = sv[keep]\n"
               "for r in (keep, keep[:2], np.ones(len(keep), dtype=np.float32), placed): print(r.ndim, *r.shape, *r.ravel().tolist())");
    if (!check_run(vm, 2, types, (const void *[]){DET_S[k], DET_BX}, script)) break;
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
  damage(&nb_main, 600);
}
END_TEST

void onnx_control_cases(TCase *tc) {
  tcase_add_test(tc, recurrent_layers);
  tcase_add_test(tc, if_branches);
  tcase_add_test(tc, if_branches_of_counted_sizes);
  tcase_add_test(tc, detection_chain);
  tcase_add_test(tc, loop_while_and_scan_outputs);
  tcase_add_test(tc, scan_steps);
  tcase_add_test(tc, bad_subgraphs);
  tcase_add_test(tc, sequence_inputs_results_and_map);
  tcase_add_test(tc, optionals);
  tcase_add_test(tc, if_returning_sequences);
  tcase_add_test(tc, loop_carrying_a_sequence);
  tcase_add_test(tc, scan_opset_8);
}
