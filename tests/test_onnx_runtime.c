/* test_onnx_runtime.c: values computed at run time that shape a result
 * (docs/internals.md, "Sizes read back at run time"): models built with
 * protobuf-c whose sizes, axes, positions and scales are graph inputs, each
 * run at two argument sets on one VM against an independent numpy program;
 * the ops lowered with them (OneHot, Compress, the windows, LRN,
 * MeanVarianceNormalization, ReverseSequence, the sequence ops, Unique,
 * BitShift of every unsigned dtype, MaxUnpool, DFT, STFT, MelWeightMatrix,
 * Det, TfIdfVectorizer); invalid
 * run-time values refused by bind_dims naming their flag; what stays
 * unsupported refused at import with its reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_builder.h"

#define MAXIN 16

/* Runs @main on the given inputs and compares every result with numpy's
 * (the script prints per result its rank, dims and values, as floats);
 * false where numpy is not usable. */
static bool run_against(rill_vm_t *vm, int nin, const rill_type_t *types, const void *const *data, const char *script, int want_nres) {
  static double want[1 << 16];
  size_t nw;
  if (!numpy_results(script, want, sizeof want / sizeof want[0], &nw)) return false;
  rill_tensor_t *in[MAXIN], **res;
  int nres;
  for (int i = 0; i < nin; i++) ck_assert(rill_tensor_create(vm, &types[i], data[i], &in[i]) == NULL);
  rill_status_t st = rill_vm_invoke(vm, "main", in, nin, &res, &nres);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  ck_assert_int_eq(nres, want_nres);
  size_t w = 0;
  for (int r = 0; r < nres; r++) {
    const rill_type_t *t = rill_tensor_type(res[r]);
    ck_assert_msg(w < nw && t->rank == (int)want[w], "result %d: rank %d, numpy %g", r, t->rank, w < nw ? want[w] : -1);
    w++;
    for (int d = 0; d < t->rank; d++, w++) ck_assert_msg(t->dims[d] == (int64_t)want[w], "result %d dim %d: %lld, numpy %g", r, d, (long long)t->dims[d], want[w]);
    size_t cnt = rill_type_numel(t);
    uint8_t *raw = malloc(8 * (cnt ? cnt : 1));
    ck_assert(rill_tensor_read(res[r], raw, rill_tensor_nbytes(res[r])) == NULL);
    for (size_t i = 0; i < cnt; i++, w++) {
      double g = t->dtype == RILL_I64 ? (double)((int64_t *)raw)[i] : t->dtype == RILL_F32 ? (double)((float *)raw)[i]
                 : t->dtype == RILL_F64 ? ((double *)raw)[i]
                 : t->dtype == RILL_BOOL || t->dtype == RILL_U8 ? raw[i] : NAN;
      ck_assert_msg(w < nw && fabs(g - want[w]) <= 1e-5 + 1e-5 * fabs(want[w]), "result %d [%zu]: %g, numpy %g", r, i, g, w < nw ? want[w] : NAN);
    }
    free(raw);
  }
  ck_assert_uint_eq(w, nw);
  rill_results_free(vm, res, nres);
  for (int i = 0; i < nin; i++) rill_tensor_release(in[i]);
  return true;
}

/* the run fails with a message holding needle */
static void run_fails(rill_vm_t *vm, int nin, const rill_type_t *types, const void *const *data, const char *needle) {
  rill_tensor_t *in[MAXIN], **res;
  int nres;
  for (int i = 0; i < nin; i++) ck_assert(rill_tensor_create(vm, &types[i], data[i], &in[i]) == NULL);
  rill_status_t st = rill_vm_invoke(vm, "main", in, nin, &res, &nres);
  ck_assert_msg(st && strstr(rill_status_message(st), needle), "expected '%s', got: %s", needle, st ? rill_status_message(st) : "ok");
  rill_status_free(st);
  for (int i = 0; i < nin; i++) rill_tensor_release(in[i]);
}

/* the model that make builds, loaded, and a VM on the cpu device for it */
static rill_vm_t *model_vm(void (*make)(builder_t *), rill_module_t **m) {
  builder_t b;
  make(&b);
  *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, *m, "cpu", &vm) == NULL);
  return vm;
}

#define PRINT_ALL "for r in res: r = np.asarray(r); print(r.ndim, *r.shape, *r.astype(np.float64).ravel().tolist())\n"

/* ---- sizes, axes and k at run time: one model ----
 * x f32[3,4]; Slice(x, st, en, ax, sp), Unsqueeze(x, ua), ReduceSum(x, ra,
 * keepdims=0), TopK(x, k) along 1 (both outputs), Trilu(x, tk) lower,
 * Split(x, sz) along 1, Pad(x, pd) reflect, CumSum(x, ca) exclusive */
static void shapes_model(builder_t *b) {
  b_init(b, 13);
  int64_t xd[2] = {3, 4}, two[1] = {2}, one[1] = {1}, four[1] = {4};
  b_input(b, "x", 2, xd, NULL);
  b_input_p(b, "st", 7, 1, two, NULL);
  b_input_p(b, "en", 7, 1, two, NULL);
  b_input_p(b, "ax", 7, 1, two, NULL);
  b_input_p(b, "sp", 7, 1, two, NULL);
  b_input_p(b, "ua", 7, 1, two, NULL);
  b_input_p(b, "ra", 7, 1, one, NULL);
  b_input_p(b, "k", 7, 1, one, NULL);
  b_input_p(b, "tk", 7, 0, NULL, NULL);
  b_input_p(b, "sz", 7, 1, two, NULL);
  b_input_p(b, "pd", 7, 1, four, NULL);
  b_input_p(b, "ca", 6, 0, NULL, NULL);
  static char *i0[] = {"x", "st", "en", "ax", "sp", NULL}, *o0[] = {"sl", NULL}, *i1[] = {"x", "ua", NULL}, *o1[] = {"us", NULL},
              *i2[] = {"x", "ra", NULL}, *o2[] = {"rd", NULL}, *i3[] = {"x", "k", NULL}, *o3[] = {"tv", "ti", NULL}, *i4[] = {"x", "tk", NULL},
              *o4[] = {"tr", NULL}, *i5[] = {"x", "sz", NULL}, *o5[] = {"s0", "s1", NULL}, *i6[] = {"x", "pd", NULL}, *o6[] = {"pa", NULL},
              *i7[] = {"x", "ca", NULL}, *o7[] = {"cs", NULL};
  b_node(b, "Slice", "sl", i0, o0);
  b_node(b, "Unsqueeze", "us", i1, o1);
  b_attr_i(b, b_node(b, "ReduceSum", "rd", i2, o2), "keepdims", 0);
  b_attr_i(b, b_node(b, "TopK", "tk", i3, o3), "axis", 1);
  b_attr_i(b, b_node(b, "Trilu", "tr", i4, o4), "upper", 0);
  b_attr_i(b, b_node(b, "Split", "sp", i5, o5), "axis", 1);
  b_attr_s(b, b_node(b, "Pad", "pa", i6, o6), "mode", "reflect");
  b_attr_i(b, b_node(b, "CumSum", "cs", i7, o7), "exclusive", 1);
  const char *outs[] = {"sl", "us", "rd", "tv", "ti", "tr", "s0", "s1", "pa", "cs"};
  for (int i = 0; i < 10; i++) b_output(b, outs[i]);
}

START_TEST(sizes_axes_and_k_at_run_time) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(shapes_model, &m);
  static const float X[12] = {3, -1, 4, 1.5f, -5, 9, 2, 6, 5, -3, 5, 8};
  /* two argument sets: other sizes, negative axes and steps, other k */
  static const int64_t ST[2][2] = {{0, 3}, {-1, 1}}, EN[2][2] = {{2, 0}, {-4, 100}}, AX[2][2] = {{0, 1}, {0, -1}}, SP[2][2] = {{1, -1}, {-2, 2}};
  static const int64_t UA[2][2] = {{0, 3}, {-1, 1}}, RA[2][1] = {{1}, {-2}}, K[2][1] = {{3}, {1}}, TK[2] = {0, -1}, SZ[2][2] = {{1, 3}, {4, 0}},
                       PD[2][4] = {{1, 0, 2, 3}, {0, 2, 1, 0}};
  static const int32_t CA[2] = {1, -2};
  rill_type_t types[12] = {{RILL_F32, 2, {3, 4}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {2}},
                           {RILL_I64, 1, {1}}, {RILL_I64, 1, {1}}, {RILL_I64, 0, {0}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {4}}, {RILL_I32, 0, {0}}};
  for (int s = 0; s < 2; s++) {
    char script[4096];
    snprintf(script, sizeof script,
             "x = np.array([3,-1,4,1.5,-5,9,2,6,5,-3,5,8], dtype=np.float32).reshape(3, 4)\n"
             "st, en, ax, sp = %s, %s, %s, %s\n"
             "sl = [slice(None)] * 2\n"
             "for a, b, c, d in zip(st, en, ax, sp): sl[c] = slice(a, b, d)\n"
             "ua = sorted(a + 4 if a < 0 else a for a in %s)\n"
             "us = x\n"
             "for a in ua: us = np.expand_dims(us, a)\n"
             "k = %lld\n"
             "o = np.argsort(-x, axis=1, kind=\"stable\")[:, :k]\n"
             "cut = np.cumsum(%s)[0]\n"
             "pd = %s\n"
             "ca = %d\n"
             "cs = np.cumsum(x, axis=ca) - x\n"
             "res = [x[tuple(sl)], us, x.sum(axis=%lld), np.take_along_axis(x, o, 1), o, np.tril(x, %lld), x[:, :cut], x[:, cut:],\n"
             "       np.pad(x, ((pd[0], pd[2]), (pd[1], pd[3])), mode=\"reflect\"), cs]\n" PRINT_ALL,
             s ? "[-1, 1]" : "[0, 3]", s ? "[-4, 100]" : "[2, 0]", s ? "[0, -1]" : "[0, 1]", s ? "[-2, 2]" : "[1, -1]", s ? "[-1, 1]" : "[0, 3]",
             (long long)K[s][0], s ? "[4, 0]" : "[1, 3]", s ? "[0, 2, 1, 0]" : "[1, 0, 2, 3]", CA[s], (long long)RA[s][0], (long long)TK[s]);
    const void *data[12] = {X, ST[s], EN[s], AX[s], SP[s], UA[s], RA[s], K[s], &TK[s], SZ[s], PD[s], &CA[s]};
    if (!run_against(vm, 12, types, data, script, 10)) {
      printf("sizes_axes_and_k_at_run_time: numpy not usable, skipped\n");
      break;
    }
  }
  /* invalid values: refused where the sizes are read back, naming the flag */
  static const int64_t SP0[2] = {1, 0}, AXD[2] = {1, 1}, UAD[2] = {0, 0}, RAX[1] = {2}, KBIG[1] = {5}, SZB[2] = {2, 3}, PDB[4] = {4, 0, 0, 0};
  static const int32_t CAB = 2;
  const void *bad[7][12] = {
      {X, ST[0], EN[0], AX[0], SP0, UA[0], RA[0], K[0], &TK[0], SZ[0], PD[0], &CA[0]},
      {X, ST[0], EN[0], AXD, SP[0], UA[0], RA[0], K[0], &TK[0], SZ[0], PD[0], &CA[0]},
      {X, ST[0], EN[0], AX[0], SP[0], UAD, RA[0], K[0], &TK[0], SZ[0], PD[0], &CA[0]},
      {X, ST[0], EN[0], AX[0], SP[0], UA[0], RAX, K[0], &TK[0], SZ[0], PD[0], &CA[0]},
      {X, ST[0], EN[0], AX[0], SP[0], UA[0], RA[0], KBIG, &TK[0], SZ[0], PD[0], &CA[0]},
      {X, ST[0], EN[0], AX[0], SP[0], UA[0], RA[0], K[0], &TK[0], SZB, PD[0], &CA[0]},
      {X, ST[0], EN[0], AX[0], SP[0], UA[0], RA[0], K[0], &TK[0], SZ[0], PDB, &CA[0]}};
  const char *why[7] = {"invalid_slice", "invalid_slice", "invalid_axes", "invalid_axes", "invalid_k", "invalid_split", "invalid_pads"};
  for (int i = 0; i < 7; i++) run_fails(vm, 12, types, bad[i], why[i]);
  /* graph mode auto: interpreted, saying why (the sizes read back) */
  ck_assert(!rill_vm_set_graph_mode(vm, "main", RILL_GRAPH_AUTO));
  const void *good[12] = {X, ST[0], EN[0], AX[0], SP[0], UA[0], RA[0], K[0], &TK[0], SZ[0], PD[0], &CA[0]};
  rill_tensor_t *in[12], **res;
  int nres;
  for (int i = 0; i < 12; i++) {
    rill_status_t st = rill_tensor_create(vm, &types[i], good[i], &in[i]);
    ck_assert_msg(st == NULL, "input %d: %s", i, st ? rill_status_message(st) : "");
  }
  for (int run = 0; run < 2; run++) {
    rill_status_t st = rill_vm_invoke(vm, "main", in, 12, &res, &nres);
    ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
    rill_results_free(vm, res, nres);
  }
  for (int i = 0; i < 12; i++) rill_tensor_release(in[i]);
  rill_graph_info_t info;
  ck_assert(rill_vm_graph_info(vm, "main", &info));
  ck_assert_int_eq(info.instances, 0);
  ck_assert_msg(strstr(info.reason, "a size read back on the host (bind_dims)"), "reason: %s", info.reason);
  /* CumSum's axis out of range: the gather checking it fails the run (a kernel's error, which stays with the device as on cuda: last) */
  const void *badc[12] = {X, ST[0], EN[0], AX[0], SP[0], UA[0], RA[0], K[0], &TK[0], SZ[0], PD[0], &CAB};
  run_fails(vm, 12, types, badc, "out of range");
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ---- scales, sizes, depth, condition and size at run time ----
 * y f32[1,1,2,3]: Resize(y, scales sc) linear half_pixel, Resize(y, sizes
 * sz) nearest asymmetric floor; i i64[4]: OneHot(i, depth d, [off, on])
 * along axis 0; x f32[3,4]: Compress(x, c) along 1; HannWindow(n)
 * symmetric; z f32[1,3,1]: Squeeze(z, q); and, lowered with them, LRN and
 * MeanVarianceNormalization of y, ReverseSequence(x, lens) (time 1, batch 0) */
static void sampling_model(builder_t *b) {
  b_init(b, 17);
  int64_t yd[4] = {1, 1, 2, 3}, four[1] = {4}, two[1] = {2}, xd[2] = {3, 4}, zd[3] = {1, 3, 1}, three[1] = {3};
  b_input(b, "y", 4, yd, NULL);
  b_input(b, "sc", 1, four, NULL);
  b_input_p(b, "sz", 7, 1, four, NULL);
  b_input_p(b, "i", 7, 1, four, NULL);
  b_input_p(b, "d", 7, 0, NULL, NULL);
  b_input(b, "v", 1, two, NULL);
  b_input(b, "x", 2, xd, NULL);
  b_input_p(b, "c", 9, 1, four, NULL);
  b_input_p(b, "n", 7, 0, NULL, NULL);
  b_input(b, "z", 3, zd, NULL);
  b_input_p(b, "q", 7, 1, two, NULL);
  b_input_p(b, "lens", 7, 1, three, NULL);
  static char *i0[] = {"y", "", "sc", NULL}, *o0[] = {"r0", NULL}, *i1[] = {"y", "", "", "sz", NULL}, *o1[] = {"r1", NULL},
              *i2[] = {"i", "d", "v", NULL}, *o2[] = {"oh", NULL}, *i3[] = {"x", "c", NULL}, *o3[] = {"cp", NULL}, *i4[] = {"n", NULL},
              *o4[] = {"hw", NULL}, *i5[] = {"z", "q", NULL}, *o5[] = {"sq", NULL}, *i6[] = {"y", NULL}, *o6[] = {"lr", NULL},
              *o7[] = {"mv", NULL}, *i8[] = {"x", "lens", NULL}, *o8[] = {"rv", NULL};
  Onnx__NodeProto *r0 = b_node(b, "Resize", "r0", i0, o0);
  b_attr_s(b, r0, "mode", "linear");
  Onnx__NodeProto *r1 = b_node(b, "Resize", "r1", i1, o1);
  b_attr_s(b, r1, "coordinate_transformation_mode", "asymmetric");
  b_attr_s(b, r1, "nearest_mode", "floor");
  b_attr_i(b, b_node(b, "OneHot", "oh", i2, o2), "axis", 0);
  b_attr_i(b, b_node(b, "Compress", "cp", i3, o3), "axis", 1);
  b_attr_i(b, b_node(b, "HannWindow", "hw", i4, o4), "periodic", 0);
  b_node(b, "Squeeze", "sq", i5, o5);
  Onnx__NodeProto *lr = b_node(b, "LRN", "lr", i6, o6);
  b_attr_i(b, lr, "size", 3);
  b_attr_f(b, lr, "alpha", 0.5f);
  b_node(b, "MeanVarianceNormalization", "mv", i6, o7);
  Onnx__NodeProto *rv = b_node(b, "ReverseSequence", "rv", i8, o8);
  b_attr_i(b, rv, "time_axis", 1);
  b_attr_i(b, rv, "batch_axis", 0);
  const char *outs[] = {"r0", "r1", "oh", "cp", "hw", "sq", "lr", "mv", "rv"};
  for (int i = 0; i < 9; i++) b_output(b, outs[i]);
}

START_TEST(scales_sizes_and_counts_at_run_time) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(sampling_model, &m);
  static const float Y[6] = {1, 4, -2, 0.5f, 3, 7}, V[2] = {-1, 2}, X[12] = {3, -1, 4, 1.5f, -5, 9, 2, 6, 5, -3, 5, 8}, Z[3] = {7, 8, 9};
  static const float SC[2][4] = {{1, 1, 1.5f, 0.6f}, {1, 1, 2, 1.7f}};
  static const int64_t SZ[2][4] = {{1, 1, 3, 2}, {1, 1, 1, 7}}, I[2][4] = {{0, 2, -1, 5}, {1, -3, 0, 2}}, D[2] = {3, 4}, N[2] = {5, 2};
  static const int64_t Q[2][2] = {{0, 2}, {-1, 0}}, L[2][3] = {{4, 1, 2}, {0, 3, 4}};
  static const uint8_t C[2][4] = {{1, 0, 1, 1}, {0, 0, 0, 1}};
  rill_type_t types[12] = {{RILL_F32, 4, {1, 1, 2, 3}}, {RILL_F32, 1, {4}}, {RILL_I64, 1, {4}}, {RILL_I64, 1, {4}}, {RILL_I64, 0, {0}}, {RILL_F32, 1, {2}},
                           {RILL_F32, 2, {3, 4}}, {RILL_BOOL, 1, {4}}, {RILL_I64, 0, {0}}, {RILL_F32, 3, {1, 3, 1}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {3}}};
  for (int s = 0; s < 2; s++) {
    char script[6144];
    snprintf(script, sizeof script,
             "y = np.array([1, 4, -2, 0.5, 3, 7], dtype=np.float32).reshape(1, 1, 2, 3)\n"
             "x = np.array([3,-1,4,1.5,-5,9,2,6,5,-3,5,8], dtype=np.float32).reshape(3, 4)\n"
             "def lin(a, axis, s):\n"
             "    n = a.shape[axis]; m = int(np.floor(n * s))\n"
             "    c = np.clip((np.arange(m) + 0.5) / s - 0.5, 0, n - 1); i0 = np.floor(c).astype(int); i1 = np.minimum(i0 + 1, n - 1); w = c - i0\n"
             "    sh = [1] * a.ndim; sh[axis] = m; w = w.reshape(sh)\n"
             "    return np.take(a, i0, axis) * (1 - w) + np.take(a, i1, axis) * w\n"
             "sc = %s\n"
             "r0 = y.astype(np.float64)\n"
             "for a in range(4): r0 = lin(r0, a, np.float64(np.float32(sc[a])))\n"
             "sz = %s\n"
             "r1 = y\n"
             "for a in range(4): r1 = np.take(r1, np.floor(np.arange(sz[a]) / (sz[a] / y.shape[a])).astype(int), a)\n"
             "i = np.array(%s); d = %lld\n"
             "oh = np.where(np.where(i < 0, i + d, i)[None, :] == np.arange(d)[:, None], 2.0, -1.0)\n"
             "cp = x[:, np.array(%s, dtype=bool)]\n"
             "n = %lld; hw = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / (n - 1))\n"
             "sq = np.array([7, 8, 9], dtype=np.float32)\n"
             "p = np.pad(y.astype(np.float64) ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))\n"
             "lr = y / (1 + 0.5 / 3 * (p[:, 0:1] + p[:, 1:2] + p[:, 2:3])) ** 0.75\n"
             "mu = y.mean(axis=(0, 2, 3), keepdims=True); mv = (y - mu) / (np.sqrt((y ** 2).mean(axis=(0, 2, 3), keepdims=True) - mu ** 2) + 1e-9)\n"
             "lens = %s; rv = x.copy()\n"
             "for b, l in enumerate(lens): rv[b, :l] = x[b, :l][::-1]\n"
             "res = [r0, r1, oh, cp, hw, sq, lr, mv, rv]\n" PRINT_ALL,
             s ? "[1, 1, 2, 1.7]" : "[1, 1, 1.5, 0.6]", s ? "[1, 1, 1, 7]" : "[1, 1, 3, 2]", s ? "[1, -3, 0, 2]" : "[0, 2, -1, 5]", (long long)D[s],
             s ? "[0, 0, 0, 1]" : "[1, 0, 1, 1]", (long long)N[s], s ? "[0, 3, 4]" : "[4, 1, 2]");
    const void *data[12] = {Y, SC[s], SZ[s], I[s], &D[s], V, X, C[s], &N[s], Z, Q[s], L[s]};
    if (!run_against(vm, 12, types, data, script, 9)) {
      printf("scales_sizes_and_counts_at_run_time: numpy not usable, skipped\n");
      break;
    }
  }
  static const float SCB[4] = {1, 1, -2, 1};
  static const int64_t DB = 0, QB[2] = {0, 1}, LB[3] = {5, 0, 0};
  const void *bad[4][12] = {{Y, SCB, SZ[0], I[0], &D[0], V, X, C[0], &N[0], Z, Q[0], L[0]},
                            {Y, SC[0], SZ[0], I[0], &DB, V, X, C[0], &N[0], Z, Q[0], L[0]},
                            {Y, SC[0], SZ[0], I[0], &D[0], V, X, C[0], &N[0], Z, QB, L[0]},
                            {Y, SC[0], SZ[0], I[0], &D[0], V, X, C[0], &N[0], Z, Q[0], LB}};
  const char *why[4] = {"invalid_resize", "invalid_depth", "invalid_axes", "out of range"};
  for (int i = 0; i < 4; i++) run_fails(vm, 12, types, bad[i], why[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ---- sequences ----
 * x f32[3,4], s i64[2] (at run time): SplitToSequence(x, s) along 1, a
 * SequenceInsert of x's first part (SplitToSequence without split,
 * keepdims=0) at 1, SequenceErase at -1, SequenceAt 1 and -1,
 * SequenceLength, ConcatFromSequence along 0 with new_axis of a
 * SequenceConstruct(x, x) */
static void sequence_model(builder_t *b) {
  b_init(b, 13);
  int64_t xd[2] = {3, 4}, two[1] = {2};
  b_input(b, "x", 2, xd, NULL);
  b_input_p(b, "s", 7, 1, two, NULL);
  static int64_t one = 1, minus = -1;
  static int64_t sd[1] = {1};
  b_init_tensor(b, "p1", 7, 0, sd, &one, 1);
  b_init_tensor(b, "pm", 7, 0, sd, &minus, 1);
  static char *i0[] = {"x", "s", NULL}, *o0[] = {"q0", NULL}, *i1[] = {"x", NULL}, *o1[] = {"rows", NULL}, *i2[] = {"rows", "p1", NULL},
              *o2[] = {"r1", NULL}, *i3[] = {"q0", "r1", "p1", NULL}, *o3[] = {"q1", NULL}, *i4[] = {"q1", NULL}, *o4[] = {"q2", NULL},
              *i5[] = {"q2", "p1", NULL}, *o5[] = {"a1", NULL}, *i6[] = {"q2", "pm", NULL}, *o6[] = {"am", NULL}, *o7[] = {"len", NULL},
              *i8[] = {"x", "x", NULL}, *o8[] = {"q3", NULL}, *i9[] = {"q3", NULL}, *o9[] = {"cc", NULL};
  b_attr_i(b, b_node(b, "SplitToSequence", "s0", i0, o0), "axis", 1);
  b_attr_i(b, b_node(b, "SplitToSequence", "s1", i1, o1), "keepdims", 0);
  b_node(b, "SequenceAt", "at0", i2, o2);
  b_node(b, "SequenceInsert", "ins", i3, o3);
  b_node(b, "SequenceErase", "er", i4, o4);
  b_node(b, "SequenceAt", "at1", i5, o5);
  b_node(b, "SequenceAt", "at2", i6, o6);
  b_node(b, "SequenceLength", "ln", i4, o7);
  b_node(b, "SequenceConstruct", "sc", i8, o8);
  Onnx__NodeProto *cf = b_node(b, "ConcatFromSequence", "cf", i9, o9);
  b_attr_i(b, cf, "new_axis", 1);
  b_attr_i(b, cf, "axis", -1);
  b_output(b, "a1");
  b_output(b, "am");
  b_output(b, "len");
  b_output(b, "cc");
}

START_TEST(sequences_lowered_at_import) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(sequence_model, &m);
  static const float X[12] = {3, -1, 4, 1.5f, -5, 9, 2, 6, 5, -3, 5, 8};
  static const int64_t S[2][2] = {{1, 3}, {3, 1}};
  for (int s = 0; s < 2; s++) {
    char script[2048];
    snprintf(script, sizeof script,
             "x = np.array([3,-1,4,1.5,-5,9,2,6,5,-3,5,8], dtype=np.float32).reshape(3, 4)\n"
             "c = %lld\n"
             "q = [x[:, :c], x[1], x[:, c:]]\n"
             "res = [q[1], q[1], np.int64(len(q)), np.stack([x, x], axis=-1)]\n" PRINT_ALL,
             (long long)S[s][0]);
    rill_type_t types[2] = {{RILL_F32, 2, {3, 4}}, {RILL_I64, 1, {2}}};
    const void *data[2] = {X, S[s]};
    if (!run_against(vm, 2, types, data, script, 4)) {
      printf("sequences_lowered_at_import: numpy not usable, skipped\n");
      break;
    }
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* sequences returned: their items are the results (q2's two, x[:, :c]
   * and x[1], twice, and q3's x and x, each a copy of its own) */
  builder_t b;
  sequence_model(&b);
  b.graph.n_output = 0;
  b_output(&b, "q2");
  b_output(&b, "q2");
  b_output(&b, "q3");
  char msg[1024];
  onnx_result_t r;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), 0);
  ck_assert_int_eq(r.noutputs, 6);
  ck_assert_msg(strstr(r.vmasm, "copy("), "%s", r.vmasm);
  onnx_result_free(&r);
}
END_TEST


/* ---- Unique (the count read back) and BitShift ----
 * u f32[7]: Unique sorted, its four outputs; w f32[4,3]: Unique along 0
 * not sorted, and along 1 sorted; a, b u8[5]: BitShift LEFT and RIGHT */
static void unique_model(builder_t *b) {
  b_init(b, 11);
  int64_t ud[1] = {7}, wd[2] = {4, 3}, bd[1] = {5};
  b_input(b, "u", 1, ud, NULL);
  b_input(b, "w", 2, wd, NULL);
  b_input_p(b, "a", 2, 1, bd, NULL);
  b_input_p(b, "s", 2, 1, bd, NULL);
  static char *i0[] = {"u", NULL}, *o0[] = {"y", "ix", "inv", "cnt", NULL}, *i1[] = {"w", NULL}, *o1[] = {"y0", "ix0", "inv0", "cnt0", NULL},
              *o2[] = {"y1", NULL}, *i3[] = {"a", "s", NULL}, *o3[] = {"l", NULL}, *o4[] = {"r", NULL};
  b_node(b, "Unique", "un", i0, o0);
  Onnx__NodeProto *u0 = b_node(b, "Unique", "u0", i1, o1);
  b_attr_i(b, u0, "axis", 0);
  b_attr_i(b, u0, "sorted", 0);
  b_attr_i(b, b_node(b, "Unique", "u1", i1, o2), "axis", -1);
  b_attr_s(b, b_node(b, "BitShift", "bl", i3, o3), "direction", "LEFT");
  b_attr_s(b, b_node(b, "BitShift", "br", i3, o4), "direction", "RIGHT");
  const char *outs[] = {"y", "ix", "inv", "cnt", "y0", "ix0", "inv0", "cnt0", "y1", "l", "r"};
  for (int i = 0; i < 11; i++) b_output(b, outs[i]);
}

START_TEST(unique_and_bitshift) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(unique_model, &m);
  static const float U[2][7] = {{2, -1, 2, 5, -1, 0, 2}, {3, 3, 3, 3, 3, 3, 3}};
  static const float W[2][12] = {{1, 2, 3, 0, 5, 1, 1, 2, 3, 0, 5, 0}, {4, 4, 1, 4, 4, 1, 2, 2, 2, 4, 4, 1}};
  static const uint8_t A[5] = {1, 200, 255, 16, 7}, S[5] = {0, 1, 3, 4, 9};
  for (int k = 0; k < 2; k++) {
    char script[2048];
    snprintf(script, sizeof script,
             "u = np.array(%s, dtype=np.float32); w = np.array(%s, dtype=np.float32).reshape(4, 3)\n"
             "y, ix, inv, cnt = np.unique(u, return_index=True, return_inverse=True, return_counts=True)\n"
             "y0s, ix0s, inv0s, cnt0s = np.unique(w, axis=0, return_index=True, return_inverse=True, return_counts=True)\n"
             "o = np.argsort(ix0s, kind=\"stable\"); rank = np.argsort(o)\n"
             "y1 = np.unique(w, axis=1)\n"
             "a = np.array([1, 200, 255, 16, 7], dtype=np.uint8); s = np.array([0, 1, 3, 4, 9], dtype=np.uint8)\n"
             "l = ((a.astype(np.int64) << s.astype(np.int64)) %% 256).astype(np.uint8); r = a >> s\n"
             "res = [y, ix, inv, cnt, y0s[o], ix0s[o], rank[inv0s.ravel()], cnt0s[o], y1, l, r]\n" PRINT_ALL,
             k ? "[3, 3, 3, 3, 3, 3, 3]" : "[2, -1, 2, 5, -1, 0, 2]", k ? "[4, 4, 1, 4, 4, 1, 2, 2, 2, 4, 4, 1]" : "[1, 2, 3, 0, 5, 1, 1, 2, 3, 0, 5, 0]");
    rill_type_t types[4] = {{RILL_F32, 1, {7}}, {RILL_F32, 2, {4, 3}}, {RILL_U8, 1, {5}}, {RILL_U8, 1, {5}}};
    const void *data[4] = {U[k], W[k], A, S};
    if (!run_against(vm, 4, types, data, script, 11)) {
      printf("unique_and_bitshift: numpy not usable, skipped\n");
      break;
    }
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST


/* ---- BitShift of u16, u32, u64 ----
 * a, s of each (ONNX elem 4, 12, 13) [6]: LEFT and RIGHT; the values span
 * the dtype (u64 past f64's 53 bits), the shifts 0 to past the width */
static void bitshift_model(builder_t *b) {
  b_init(b, 11);
  int64_t d6[1] = {6};
  static const int32_t elem[3] = {4, 12, 13};
  static const char *an[3] = {"a16", "a32", "a64"}, *sn[3] = {"s16", "s32", "s64"}, *ln[3] = {"l16", "l32", "l64"}, *rn[3] = {"r16", "r32", "r64"};
  static char *ins[3][3], *lo[3][2], *ro[3][2];
  for (int k = 0; k < 3; k++) {
    b_input_p(b, an[k], elem[k], 1, d6, NULL);
    b_input_p(b, sn[k], elem[k], 1, d6, NULL);
    ins[k][0] = (char *)an[k], ins[k][1] = (char *)sn[k], ins[k][2] = NULL;
    lo[k][0] = (char *)ln[k], lo[k][1] = NULL;
    ro[k][0] = (char *)rn[k], ro[k][1] = NULL;
    b_attr_s(b, b_node(b, "BitShift", ln[k], ins[k], lo[k]), "direction", "LEFT");
    b_attr_s(b, b_node(b, "BitShift", rn[k], ins[k], ro[k]), "direction", "RIGHT");
  }
  for (int k = 0; k < 3; k++) b_output(b, ln[k]), b_output(b, rn[k]);
}

START_TEST(bitshift_wide) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(bitshift_model, &m);
  static const uint16_t A16[6] = {1, 65535, 40000, 12345, 7, 0x8001}, S16[6] = {0, 1, 3, 15, 16, 70};
  static const uint32_t A32[6] = {1, 4294967295u, 3000000000u, 123456789, 7, 0x80000001u}, S32[6] = {0, 1, 5, 31, 32, 100};
  static const uint64_t A64[6] = {1, 18446744073709551615ull, 12345678901234567891ull, 9007199254740993ull, 0x8000000180000001ull, 0xfedcba9876543210ull},
                        S64[6] = {0, 1, 13, 33, 63, 64};
  /* numpy's shifts are C's, undefined past the width: there, 0 (the
   * Python integers' << masked to the width, and >>) */
  const char *script =
      "def sh(a, s, bits, left):\n"
      "    m = (1 << bits) - 1\n"
      "    return [((x << y) & m) if left else (x >> y) for x, y in zip(a, s)]\n"
      "A = [[1, 65535, 40000, 12345, 7, 0x8001], [1, 4294967295, 3000000000, 123456789, 7, 0x80000001],\n"
      "     [1, 18446744073709551615, 12345678901234567891, 9007199254740993, 0x8000000180000001, 0xfedcba9876543210]]\n"
      "S = [[0, 1, 3, 15, 16, 70], [0, 1, 5, 31, 32, 100], [0, 1, 13, 33, 63, 64]]\n"
      "for k, bits in enumerate((16, 32, 64)):\n"
      "    for left in (True, False):\n"
      "        r = sh(A[k], S[k], bits, left)\n"
      "        u = np.array(r, dtype=np.uint64)\n"
      "        assert (u == (np.array(A[k], dtype=np.uint64) << np.array(S[k], dtype=np.uint64) if left else np.array(A[k], dtype=np.uint64) >> np.array(S[k], dtype=np.uint64)) & np.uint64((1 << bits) - 1))[np.array(S[k]) < bits].all()\n"
      "        print(*[v >> 32 for v in r], *[v & 0xffffffff for v in r])\n";
  double want[72];
  size_t nw;
  if (!numpy_results(script, want, 72, &nw)) {
    printf("bitshift_wide: numpy not usable, skipped\n");
  } else {
    ck_assert_uint_eq(nw, 72);
    rill_type_t types[6] = {{RILL_U16, 1, {6}}, {RILL_U16, 1, {6}}, {RILL_U32, 1, {6}}, {RILL_U32, 1, {6}}, {RILL_U64, 1, {6}}, {RILL_U64, 1, {6}}};
    const void *data[6] = {A16, S16, A32, S32, A64, S64};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 6, types, data, &res);
    ck_assert_int_eq(nres, 6);
    for (int r = 0; r < 6; r++) {
      ck_assert_int_eq(rill_tensor_type(res[r])->dtype, types[r / 2 * 2].dtype);
      uint64_t v[6] = {0};
      uint8_t raw[48];
      ck_assert(rill_tensor_read(res[r], raw, rill_tensor_nbytes(res[r])) == NULL);
      for (int i = 0; i < 6; i++) {
        v[i] = r < 2 ? ((uint16_t *)raw)[i] : r < 4 ? ((uint32_t *)raw)[i] : ((uint64_t *)raw)[i];
        uint64_t w = ((uint64_t)want[r * 12 + i] << 32) | (uint64_t)want[r * 12 + 6 + i];
        ck_assert_msg(v[i] == w, "result %d [%d]: %llu, want %llu", r, i, (unsigned long long)v[i], (unsigned long long)w);
      }
    }
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* a signed dtype: refused, naming the dtypes ONNX allows */
  builder_t b;
  char msg[1024];
  onnx_result_t r;
  b_init(&b, 11);
  int64_t d6[1] = {6};
  b_input_p(&b, "a", 6, 1, d6, NULL);
  b_input_p(&b, "s", 6, 1, d6, NULL);
  static char *i0[] = {"a", "s", NULL}, *o0[] = {"y", NULL};
  b_attr_s(&b, b_node(&b, "BitShift", "bl", i0, o0), "direction", "LEFT");
  b_output(&b, "y");
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "BitShift of dtype i32 (ONNX allows u8, u16, u32, u64)"), "%s", msg);
}
END_TEST

/* ---- Det: LU with partial pivoting, unrolled ----
 * a f32[2,3,3] (a batch), b f64[4,4], z f32[0,0]: Det of each */
static void det_model(builder_t *b) {
  b_init(b, 11);
  int64_t ad[3] = {2, 3, 3}, bd[2] = {4, 4}, zd[2] = {0, 0};
  b_input(b, "a", 3, ad, NULL);
  b_input_p(b, "b", 11, 2, bd, NULL);
  b_input(b, "z", 2, zd, NULL);
  static char *i0[] = {"a", NULL}, *o0[] = {"da", NULL}, *i1[] = {"b", NULL}, *o1[] = {"db", NULL}, *i2[] = {"z", NULL}, *o2[] = {"dz", NULL};
  b_node(b, "Det", "d0", i0, o0);
  b_node(b, "Det", "d1", i1, o1);
  b_node(b, "Det", "d2", i2, o2);
  b_output(b, "da");
  b_output(b, "db");
  b_output(b, "dz");
}

START_TEST(det_batched_pivoted_singular) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(det_model, &m);
  /* the first needs a swap at once (a zero pivot), the second is singular
   * (its third row the sum of the others); b needs swaps on the way */
  static const float A[18] = {0, 2, 1, 3, -1, 4, 1, 5, -2, 1, 2, 3, 4, 5, 6, 5, 7, 9};
  static const double B[16] = {1e-3, 2, 3, 4, 5, 6.5, -7, 8, 9, 10, 11.25, -12, 13, 14, 15, 17};
  float Z[1] = {0};
  rill_type_t types[3] = {{RILL_F32, 3, {2, 3, 3}}, {RILL_F64, 2, {4, 4}}, {RILL_F32, 2, {0, 0}}};
  const void *data[3] = {A, B, Z};
  if (!run_against(vm, 3, types, data,
                   "a = np.array([0, 2, 1, 3, -1, 4, 1, 5, -2, 1, 2, 3, 4, 5, 6, 5, 7, 9], dtype=np.float64).reshape(2, 3, 3)\n"
                   "b = np.array([1e-3, 2, 3, 4, 5, 6.5, -7, 8, 9, 10, 11.25, -12, 13, 14, 15, 17]).reshape(4, 4)\n"
                   "res = [np.linalg.det(a), np.linalg.det(b), np.linalg.det(np.zeros((0, 0)))]\n" PRINT_ALL,
                   3))
    printf("det_batched_pivoted_singular: numpy not usable, skipped\n");
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* refused: integers, a non-square matrix, one too large */
  builder_t b;
  char msg[1024];
  onnx_result_t r;
  static char *i0[] = {"x", NULL}, *o0[] = {"y", NULL};
  static const struct { int32_t elem; int64_t d0, d1; rill_code_t code; const char *needle; } bad[] = {
      {6, 3, 3, RILL_UNIMPLEMENTED, "Det of dtype i32 (ONNX allows f16, bf16, f32, f64)"},
      {1, 2, 3, RILL_MALFORMED, "Det of matrices that are not square (2 x 3)"},
      {1, 65, 65, RILL_UNIMPLEMENTED, "Det of 65 x 65 matrices (at most 64 x 64)"}};
  for (int i = 0; i < 3; i++) {
    b_init(&b, 11);
    int64_t xd[2] = {bad[i].d0, bad[i].d1};
    b_input_p(&b, "x", bad[i].elem, 2, xd, NULL);
    b_node(&b, "Det", "d", i0, o0);
    b_output(&b, "y");
    ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), bad[i].code);
    ck_assert_msg(strstr(msg, bad[i].needle), "%s", msg);
  }
}
END_TEST

/* ---- MaxUnpool (output_shape read back) and DFT ----
 * v f32[1,1,2,2], vi i64[1,1,2,2], os i64[4]: MaxUnpool kernel 2 stride 2
 * to os; g f32[2,5,2]: DFT along 1, forward and inverse; h f32[3,4,1]:
 * DFT along 0 onesided (real) */
static void unpool_dft_model(builder_t *b) {
  b_init(b, 17);
  int64_t vd[4] = {1, 1, 2, 2}, four[1] = {4}, gd[3] = {2, 5, 2}, hd[3] = {3, 4, 1};
  b_input(b, "v", 4, vd, NULL);
  b_input_p(b, "vi", 7, 4, vd, NULL);
  b_input_p(b, "os", 7, 1, four, NULL);
  b_input(b, "g", 3, gd, NULL);
  b_input(b, "h", 3, hd, NULL);
  static char *i0[] = {"v", "vi", "os", NULL}, *o0[] = {"un", NULL}, *i1[] = {"g", NULL}, *o1[] = {"f", NULL}, *o2[] = {"fi", NULL},
              *i3[] = {"h", NULL}, *o3[] = {"fh", NULL};
  Onnx__NodeProto *u = b_node(b, "MaxUnpool", "un", i0, o0);
  static int64_t two2[2] = {2, 2};
  b_attr_ints(b, u, "kernel_shape", two2, 2);
  b_attr_ints(b, u, "strides", two2, 2);
  b_node(b, "DFT", "f", i1, o1);
  b_attr_i(b, b_node(b, "DFT", "fi", i1, o2), "inverse", 1);
  Onnx__NodeProto *fh = b_node(b, "DFT", "fh", i3, o3);
  b_attr_i(b, fh, "axis", 0);
  b_attr_i(b, fh, "onesided", 1);
  b_output(b, "un");
  b_output(b, "f");
  b_output(b, "fi");
  b_output(b, "fh");
}

START_TEST(maxunpool_and_dft) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(unpool_dft_model, &m);
  static const float V[4] = {5, 6, 7, 8};
  static const int64_t VI[2][4] = {{5, 7, 13, 15}, {0, 3, 12, 10}}, OS[2][4] = {{1, 1, 5, 5}, {1, 1, 4, 6}};
  float G[20], H[12];
  for (int i = 0; i < 20; i++) G[i] = (float)((i * 7) % 11) - 4.5f;
  for (int i = 0; i < 12; i++) H[i] = (float)((i * 5) % 7) - 2;
  rill_type_t types[5] = {{RILL_F32, 4, {1, 1, 2, 2}}, {RILL_I64, 4, {1, 1, 2, 2}}, {RILL_I64, 1, {4}}, {RILL_F32, 3, {2, 5, 2}}, {RILL_F32, 3, {3, 4, 1}}};
  for (int s = 0; s < 2; s++) {
    char script[2048];
    snprintf(script, sizeof script,
             "vi = %s; os = %s\n"
             "un = np.zeros(os, dtype=np.float32)\n"
             "for val, i in zip([5, 6, 7, 8], vi): un[0, 0, i // 4, i %% 4] = val\n"
             "g = (np.array([(i * 7) %% 11 for i in range(20)], dtype=np.float64) - 4.5).reshape(2, 5, 2); c = g[..., 0] + 1j * g[..., 1]\n"
             "h = (np.array([(i * 5) %% 7 for i in range(12)], dtype=np.float64) - 2).reshape(3, 4)\n"
             "f = np.fft.fft(c, axis=1); fi = np.fft.ifft(c, axis=1); fh = np.fft.rfft(h, axis=0)\n"
             "res = [un] + [np.stack([z.real, z.imag], axis=-1) for z in (f, fi, fh)]\n" PRINT_ALL,
             s ? "[0, 3, 12, 10]" : "[5, 7, 13, 15]", s ? "[1, 1, 4, 6]" : "[1, 1, 5, 5]");
    const void *data[5] = {V, VI[s], OS[s], G, H};
    if (!run_against(vm, 5, types, data, script, 4)) {
      printf("maxunpool_and_dft: numpy not usable, skipped\n");
      break;
    }
  }
  /* an output_shape below the default: refused at the read-back */
  static const int64_t OSB[4] = {1, 1, 3, 4};
  const void *data[5] = {V, VI[0], OSB, G, H};
  run_fails(vm, 5, types, data, "invalid_output_shape");
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ---- STFT: frame_step and frame_length read back, or known ----
 * x f32[2,20,1], st i64[], fl i64[], w f32[6], c f32[1,12,2]:
 * STFT(x, st, -, fl) onesided; STFT(x, st, w) onesided; STFT(c, 3, w)
 * of a complex signal, two-sided (the step an initializer) */
static void stft_model(builder_t *b) {
  b_init(b, 17);
  int64_t xd[3] = {2, 20, 1}, wd[1] = {6}, cd[3] = {1, 12, 2};
  b_input(b, "x", 3, xd, NULL);
  b_input_p(b, "st", 7, 0, NULL, NULL);
  b_input_p(b, "fl", 7, 0, NULL, NULL);
  b_input(b, "w", 1, wd, NULL);
  b_input(b, "c", 3, cd, NULL);
  static int64_t three = 3;
  b_init_tensor(b, "k3", 7, 0, NULL, &three, 1);
  static char *i0[] = {"x", "st", "", "fl", NULL}, *o0[] = {"y1", NULL}, *i1[] = {"x", "st", "w", NULL}, *o1[] = {"y2", NULL},
              *i2[] = {"c", "k3", "w", NULL}, *o2[] = {"y3", NULL};
  b_node(b, "STFT", "s1", i0, o0);
  b_node(b, "STFT", "s2", i1, o1);
  b_attr_i(b, b_node(b, "STFT", "s3", i2, o2), "onesided", 0);
  b_output(b, "y1");
  b_output(b, "y2");
  b_output(b, "y3");
}

START_TEST(stft_frames_at_run_time) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(stft_model, &m);
  float X[40], W[6], C[24];
  for (int i = 0; i < 40; i++) X[i] = (float)((i * 7) % 13) - 6;
  for (int i = 0; i < 6; i++) W[i] = 0.25f + 0.125f * (float)i;
  for (int i = 0; i < 24; i++) C[i] = (float)((i * 5) % 11) - 5;
  static const int64_t ST[2] = {3, 5}, FL[2] = {8, 4};
  rill_type_t types[5] = {{RILL_F32, 3, {2, 20, 1}}, {RILL_I64, 0, {0}}, {RILL_I64, 0, {0}}, {RILL_F32, 1, {6}}, {RILL_F32, 3, {1, 12, 2}}};
  for (int k = 0; k < 2; k++) {
    char script[2048];
    snprintf(script, sizeof script,
             "x = (np.array([(i * 7) %% 13 for i in range(40)], dtype=np.float64) - 6).reshape(2, 20)\n"
             "w = 0.25 + 0.125 * np.arange(6)\n"
             "c = (np.array([(i * 5) %% 11 for i in range(24)], dtype=np.float64) - 5).reshape(1, 12, 2); c = c[..., 0] + 1j * c[..., 1]\n"
             "def stft(x, S, N, w, one):\n"
             "    F = (x.shape[1] - N) // S + 1\n"
             "    fr = np.stack([x[:, f * S:f * S + N] * w for f in range(F)], axis=1)\n"
             "    z = np.fft.fft(fr, axis=-1)[..., :N // 2 + 1 if one else N]\n"
             "    return np.stack([z.real, z.imag], axis=-1)\n"
             "res = [stft(x, %lld, %lld, np.ones(%lld), True), stft(x, %lld, 6, w, True), stft(c, 3, 6, w, False)]\n" PRINT_ALL,
             (long long)ST[k], (long long)FL[k], (long long)FL[k], (long long)ST[k]);
    const void *data[5] = {X, &ST[k], &FL[k], W, C};
    if (!run_against(vm, 5, types, data, script, 3)) {
      printf("stft_frames_at_run_time: numpy not usable, skipped\n");
      break;
    }
  }
  /* a frame longer than the signal, a step of 0: refused at the read-back */
  static const int64_t LONG = 21, ZERO = 0;
  const void *bad1[5] = {X, &ST[0], &LONG, W, C}, *bad2[5] = {X, &ZERO, &FL[0], W, C};
  run_fails(vm, 5, types, bad1, "invalid_frame_length");
  run_fails(vm, 5, types, bad2, "invalid_frame_step");
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ---- MelWeightMatrix with every input at run time ----
 * nm, dl, sr i64[], lo, hi f32[]: the matrix, [dl / 2 + 1, nm] */
static void mel_model(builder_t *b) {
  b_init(b, 17);
  b_input_p(b, "nm", 7, 0, NULL, NULL);
  b_input_p(b, "dl", 7, 0, NULL, NULL);
  b_input_p(b, "sr", 7, 0, NULL, NULL);
  b_input(b, "lo", 0, NULL, NULL);
  b_input(b, "hi", 0, NULL, NULL);
  static char *i0[] = {"nm", "dl", "sr", "lo", "hi", NULL}, *o0[] = {"w", NULL};
  b_node(b, "MelWeightMatrix", "mel", i0, o0);
  b_output(b, "w");
}

START_TEST(mel_weight_matrix_at_run_time) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(mel_model, &m);
  static const int64_t NM[2] = {8, 5}, DL[2] = {16, 30}, SR[2] = {8192, 16000};
  static const float LO[2] = {0, 100}, HI[2] = {4096, 7000};
  rill_type_t types[5] = {{RILL_I64, 0, {0}}, {RILL_I64, 0, {0}}, {RILL_I64, 0, {0}}, {RILL_F32, 0, {0}}, {RILL_F32, 0, {0}}};
  for (int k = 0; k < 2; k++) {
    char script[2048];
    /* ONNX's definition, written out with numpy */
    snprintf(script, sizeof script,
             "nm, dl, sr, lo, hi = %lld, %lld, %lld, %g, %g\n"
             "S = dl // 2 + 1\n"
             "mel = lambda f: 2595 * np.log10(1 + f / 700)\n"
             "step = (mel(hi) - mel(lo)) / (nm + 2)\n"
             "fb = np.arange(nm + 2) * step + mel(lo)\n"
             "fb = np.floor((dl + 1) * (700 * (10 ** (fb / 2595) - 1)) / sr).astype(int)\n"
             "w = np.zeros((S, nm))\n"
             "for i in range(nm):\n"
             "    l, c, h = fb[i], fb[i + 1], fb[i + 2]\n"
             "    if c == l: w[c, i] = 1\n"
             "    else:\n"
             "        for j in range(l, c + 1): w[j, i] = (j - l) / (c - l)\n"
             "    for j in range(c, h): w[j, i] = (h - j) / (h - c)\n"
             "res = [w]\n" PRINT_ALL,
             (long long)NM[k], (long long)DL[k], (long long)SR[k], LO[k], HI[k]);
    const void *data[5] = {&NM[k], &DL[k], &SR[k], &LO[k], &HI[k]};
    if (!run_against(vm, 5, types, data, script, 1)) {
      printf("mel_weight_matrix_at_run_time: numpy not usable, skipped\n");
      break;
    }
  }
  static const int64_t ZERO = 0;
  const void *bad[5] = {&ZERO, &DL[0], &SR[0], &LO[0], &HI[0]};
  run_fails(vm, 5, types, bad, "invalid_num_mel_bins");
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ---- TfIdfVectorizer ----
 * x i32[2,9], z i64[9]: TF over unigrams, bigrams and trigrams with skips
 * up to 2 (ngram_indexes permuted, one output counting nothing); IDF and
 * TFIDF with weights, bigrams only, over the 1-D z */
static int64_t tf_counts[3] = {0, 3, 7}, tf_idx[6] = {5, 0, 2, 1, 6, 3},
               tf_pool[10] = {1, 4, 7, 4, 7, 1, 1, 4, 7, 1}, tf_mn[3] = {1, 2, 2}, tf_mx[3] = {3, 2, 2}, tf_skip[3] = {2, 1, 1};
static float tf_w[6] = {0.5f, 2, 1, 0.25f, 3, 1.5f};
static void tfidf_model(builder_t *b) {
  b_init(b, 9);
  int64_t xd[2] = {2, 9}, zd[1] = {9};
  b_input_p(b, "x", 6, 2, xd, NULL);
  b_input_p(b, "z", 7, 1, zd, NULL);
  static char *ix[] = {"x", NULL}, *iz[] = {"z", NULL}, *o[3][2] = {{"tf", NULL}, {"idf", NULL}, {"tfidf", NULL}};
  static const char *modes[3] = {"TF", "IDF", "TFIDF"};
  for (int k = 0; k < 3; k++) {
    Onnx__NodeProto *n = b_node(b, "TfIdfVectorizer", o[k][0], k ? iz : ix, o[k]);
    b_attr_s(b, n, "mode", modes[k]);
    b_attr_i(b, n, "min_gram_length", tf_mn[k]);
    b_attr_i(b, n, "max_gram_length", tf_mx[k]);
    b_attr_i(b, n, "max_skip_count", tf_skip[k]);
    b_attr_ints(b, n, "ngram_counts", tf_counts, 3);
    b_attr_ints(b, n, "ngram_indexes", tf_idx, 6);
    b_attr_ints(b, n, "pool_int64s", tf_pool, 10);
    if (k) {
      Onnx__AttributeProto *a = b_attr(b, n, "weights");
      a->has_type = 1;
      a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
      a->n_floats = 6;
      a->floats = tf_w;
    }
    b_output(b, o[k][0]);
  }
}

START_TEST(tfidf_vectorizer) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(tfidf_model, &m);
  static const int32_t X[18] = {1, 4, 7, 1, 1, 4, 7, 4, 7, 7, 1, 4, 4, 1, 7, 1, 1, 4};
  static const int64_t Z[9] = {4, 7, 4, 7, 1, 1, 4, 1, 4};
  rill_type_t types[2] = {{RILL_I32, 2, {2, 9}}, {RILL_I64, 1, {9}}};
  const void *data[2] = {X, Z};
  /* counting written out plainly */
  const char *script =
      "counts, idx, pool, w = [0, 3, 7], [5, 0, 2, 1, 6, 3], [1, 4, 7, 4, 7, 1, 1, 4, 7, 1], [0.5, 2, 1, 0.25, 3, 1.5]\n"
      "grams = []\n"
      "for size in (1, 2, 3):\n"
      "    end = counts[size] if size < 3 else len(pool)\n"
      "    for p in range(counts[size - 1], end, size): grams.append(tuple(pool[p:p + size]))\n"
      "def tfidf(x, mn, mx, skip, mode):\n"
      "    rows = x if x.ndim == 2 else x[None]; Y = np.zeros((len(rows), max(idx) + 1))\n"
      "    for r, row in enumerate(rows):\n"
      "        for gi, g in enumerate(grams):\n"
      "            n = len(g)\n"
      "            if n < mn or n > mx: continue\n"
      "            c = 0\n"
      "            for s in (range(1) if n == 1 else range(skip + 1)):\n"
      "                d = s + 1\n"
      "                for st in range(len(row) - (n - 1) * d): c += all(row[st + j * d] == g[j] for j in range(n))\n"
      "            Y[r, idx[gi]] += c if mode == 0 else (min(c, 1) * w[gi] if mode == 1 else c * w[gi])\n"
      "    return Y if x.ndim == 2 else Y[0]\n"
      "x = np.array([1, 4, 7, 1, 1, 4, 7, 4, 7, 7, 1, 4, 4, 1, 7, 1, 1, 4]).reshape(2, 9); z = np.array([4, 7, 4, 7, 1, 1, 4, 1, 4])\n"
      "res = [tfidf(x, 1, 3, 2, 0), tfidf(z, 2, 2, 1, 1), tfidf(z, 2, 2, 1, 2)]\n" PRINT_ALL;
  if (!run_against(vm, 2, types, data, script, 3)) printf("tfidf_vectorizer: numpy not usable, skipped\n");
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* strings, float tokens and counts that do not fit the pool: refused */
  builder_t b;
  char msg[1024];
  onnx_result_t r;
  tfidf_model(&b);
  b.ins[0].type->tensor_type->elem_type = 1;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "TfIdfVectorizer of dtype f32 (integer tokens are supported)"), "%s", msg);
  tfidf_model(&b);
  static int64_t bad_counts[3] = {0, 4, 7};
  b.attrs[0][4].ints = bad_counts;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "do not agree"), "%s", msg);
}
END_TEST

/* what stays unsupported says why at import */
START_TEST(run_time_values_refused_with_reasons) {
  builder_t b;
  char msg[1024];
  onnx_result_t r;
  /* Dropout training at run time with a ratio that is not a known 0 */
  b_init(&b, 13);
  int64_t xd[1] = {4};
  b_input(&b, "x", 1, xd, NULL);
  b_input_p(&b, "t", 9, 0, NULL, NULL);
  static float ratio = 0.5f;
  static int64_t sd[1] = {1};
  b_init_tensor(&b, "r", 1, 0, sd, &ratio, 1);
  static char *i0[] = {"x", "r", "t", NULL}, *o0[] = {"y", NULL};
  b_node(&b, "Dropout", "dr", i0, o0);
  b_output(&b, "y");
  /* imported; at run time y = x where training_mode is false, and the run
   * refused as unsupported where it is true */
  static const float X[4] = {1, -2, 3.5f, 0};
  static const uint8_t T[2] = {0, 1};
  for (int pass = 0; pass < 2; pass++) {
    rill_module_t *dm = load_model(&b);
    rill_vm_t *vm;
    ck_assert(rill_vm_create(NULL, dm, "cpu", &vm) == NULL);
    rill_type_t types[2] = {{RILL_F32, 1, {4}}, {RILL_BOOL, 0, {0}}};
    for (int k = 0; k < 2; k++) {
      rill_tensor_t *in[2], **res;
      int nres;
      const void *data[2] = {X, &T[k]};
      for (int i = 0; i < 2; i++) ck_assert(rill_tensor_create(vm, &types[i], data[i], &in[i]) == NULL);
      rill_status_t st = rill_vm_invoke(vm, "main", in, 2, &res, &nres);
      if (k && !pass) { /* training with a ratio of 0.5 */
        ck_assert_msg(st && rill_status_code(st) == RILL_UNIMPLEMENTED && strstr(rill_status_message(st), "unsupported_dropout_training"), "%s",
                      st ? rill_status_message(st) : "ok");
        rill_status_free(st);
      } else { /* not training, or a ratio of 0: y = x */
        ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
        float y[4];
        ck_assert(rill_tensor_read(res[0], y, sizeof y) == NULL);
        ck_assert(!memcmp(y, X, sizeof y));
        rill_results_free(vm, res, nres);
      }
      for (int i = 0; i < 2; i++) rill_tensor_release(in[i]);
    }
    rill_vm_destroy(vm);
    rill_module_release(dm);
    /* then with a known ratio of 0: y = x exactly, training or not */
    static float zero = 0;
    b.inits[0].float_data = &zero;
  }
  /* training known true with a ratio known other than 0: refused at import */
  static int32_t on = 1;
  static float half = 0.5f;
  b.inits[0].float_data = &half;
  b.graph.n_input = 1;
  Onnx__TensorProto *tt = b_init_tensor(&b, "t", 9, 0, NULL, NULL, 0);
  tt->n_int32_data = 1;
  tt->int32_data = &on;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "training_mode=true with a ratio other than 0"), "%s", msg);
  /* a position computed at run time among values of different types */
  b_init(&b, 13);
  b_input(&b, "x", 1, xd, NULL);
  int64_t x2d[1] = {5};
  b_input(&b, "x2", 1, x2d, NULL);
  b_input_p(&b, "p", 7, 0, NULL, NULL);
  static char *i1[] = {"x", "x2", NULL}, *o1[] = {"q", NULL}, *i2[] = {"q", "p", NULL}, *o2[] = {"y", NULL};
  b_node(&b, "SequenceConstruct", "sc", i1, o1);
  b_node(&b, "SequenceAt", "at", i2, o2);
  b_output(&b, "y");
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "a position computed at run time in a sequence of values of different types"), "%s", msg);
}
END_TEST

/* ---- positions in a sequence at run time ----
 * a, b, c f32[2], t f32[2], p i64[]: s = [a, b, c]; SequenceAt(s, p),
 * SequenceInsert(s, t, p) and SequenceErase(s, p), returned as values */
static void positions_model(builder_t *b) {
  b_init(b, 13);
  int64_t d2[1] = {2};
  b_input(b, "a", 1, d2, NULL);
  b_input(b, "b", 1, d2, NULL);
  b_input(b, "c", 1, d2, NULL);
  b_input(b, "t", 1, d2, NULL);
  b_input_p(b, "p", 7, 0, NULL, NULL);
  static char *i0[] = {"a", "b", "c", NULL}, *o0[] = {"s", NULL}, *i1[] = {"s", "p", NULL}, *o1[] = {"at", NULL}, *i2[] = {"s", "t", "p", NULL},
              *o2[] = {"ins", NULL}, *o3[] = {"er", NULL};
  b_node(b, "SequenceConstruct", "sc", i0, o0);
  b_node(b, "SequenceAt", "sat", i1, o1);
  b_node(b, "SequenceInsert", "sin", i2, o2);
  b_node(b, "SequenceErase", "ser", i1, o3);
  b_output(b, "at");
  b_output(b, "ins");
  b_output(b, "er");
}

START_TEST(sequence_positions_at_run_time) {
  rill_module_t *m;
  rill_vm_t *vm = model_vm(positions_model, &m);
  static const float A[2] = {1, 2}, B[2] = {3, 4}, C[2] = {5, 6}, T[2] = {-1, -2};
  static const int64_t P[5] = {0, 1, 2, -1, -3};
  rill_type_t types[5] = {{RILL_F32, 1, {2}}, {RILL_F32, 1, {2}}, {RILL_F32, 1, {2}}, {RILL_F32, 1, {2}}, {RILL_I64, 0, {0}}};
  for (int k = 0; k < 5; k++) {
    char script[1024];
    snprintf(script, sizeof script,
             "s = [np.array([1, 2.]), np.array([3, 4.]), np.array([5, 6.])]; t = np.array([-1, -2.]); p = %lld\n"
             "q = p + 3 if p < 0 else p\n"
             "res = [s[p]] + s[:q] + [t] + s[q:] + s[:q] + s[q + 1:]\n" PRINT_ALL,
             (long long)P[k]);
    const void *data[5] = {A, B, C, T, &P[k]};
    if (!run_against(vm, 5, types, data, script, 1 + 4 + 2)) {
      printf("sequence_positions_at_run_time: numpy not usable, skipped\n");
      break;
    }
  }
  /* out of range: refused at the read-back */
  static const int64_t FAR = 3;
  const void *bad[5] = {A, B, C, T, &FAR};
  run_fails(vm, 5, types, bad, "invalid_position");
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* the models above imported, truncated at every length and bit-flipped
 * through the ONNX fuzz target */
START_TEST(run_time_models_damaged) {
  builder_t b;
  shapes_model(&b);
  damage(&b, 1500);
  sampling_model(&b);
  damage(&b, 1500);
  sequence_model(&b);
  damage(&b, 1500);
  unique_model(&b);
  damage(&b, 1500);
  unpool_dft_model(&b);
  damage(&b, 1500);
  bitshift_model(&b);
  damage(&b, 1500);
  det_model(&b);
  damage(&b, 1500);
  stft_model(&b);
  damage(&b, 1500);
  mel_model(&b);
  damage(&b, 1500);
  positions_model(&b);
  damage(&b, 1500);
  tfidf_model(&b);
  damage(&b, 1500);
}
END_TEST

void onnx_runtime_cases(TCase *tc) {
  tcase_add_test(tc, sizes_axes_and_k_at_run_time);
  tcase_add_test(tc, scales_sizes_and_counts_at_run_time);
  tcase_add_test(tc, sequences_lowered_at_import);
  tcase_add_test(tc, unique_and_bitshift);
  tcase_add_test(tc, bitshift_wide);
  tcase_add_test(tc, det_batched_pivoted_singular);
  tcase_add_test(tc, stft_frames_at_run_time);
  tcase_add_test(tc, mel_weight_matrix_at_run_time);
  tcase_add_test(tc, sequence_positions_at_run_time);
  tcase_add_test(tc, tfidf_vectorizer);
  tcase_add_test(tc, maxunpool_and_dft);
  tcase_add_test(tc, run_time_values_refused_with_reasons);
  tcase_add_test(tc, run_time_models_damaged);
}
