/* test_onnx_ops.c: the ONNX ops that map onto the core set's indexing,
 * sampling and normalisation ops or are lowered onto others (Einsum,
 * GatherND, ScatterND, ScatterElements, TopK, ReduceProd, Mod with fmod,
 * GroupNormalization, BatchNormalization in training mode, MaxPool's
 * indices, DepthToSpace, GridSample, RoiAlign), on models built here with
 * protobuf-c, against values numpy computed (a short independent program
 * following ONNX's definitions, its results pasted below); and the random
 * ops refused with a message naming the node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_builder.h"

/* ---- values from numpy ---- */
static float E_A[12] = {0.5f, 1.625f, 1.125f, -1.125f, -0.75f, 1.5f, -2.0f, 1.25f, 1.25f, -0.125f, -0.75f, -0.875f};
static float E_B[12] = {-1.0f, -0.25f, 0.0f, 0.25f, 2.0f, 1.125f, 0.5f, 2.0f, -1.125f, -1.375f, 0.5f, -1.875f};
static float E_D[18] = {-1.875f, 0.0f, -0.125f, 1.625f, 0.5f, 0.0f, -0.0f, -1.0f, -2.0f, -1.25f, 0.75f, -1.25f, -0.5f, -2.0f, 1.375f, -1.375f, -0.875f, 1.5f};
static float E_P[12] = {0.0f, 1.375f, 0.5f, 1.0f, -1.625f, 0.125f, 0.0f, 1.5f, -0.5f, 0.375f, -1.75f, -0.5f};
static float E_Q[8] = {-0.75f, -1.375f, 1.25f, -0.5f, 1.875f, 0.375f, 0.375f, 0.5f};
static float E_V[3] = {0.75f, -1.375f, -0.25f};
static float E_F[18] = {-1.0f, -0.375f, -1.625f, 1.875f, -1.125f, 0.625f, -0.75f, 1.5f, 0.625f, -1.5f, 1.375f, 1.75f, 1.625f, 0.25f, -1.375f, -1.25f, 1.75f, 0.25f};
static float E_W0[8] = {1.75f, 1.546875f, 4.125f, 1.78125f, -1.78125f, -8.0625f, 0.34375f, 2.421875f};
static float E_W1[6] = {-1.875f, 0.5f, -2.0f, -1.25f, -2.0f, 1.5f};
static float E_W2[2] = {-3.375f, -1.75f};
static float E_W3[1] = {0.5f};
static float E_W4[6] = {3.03125f, 0.0f, 1.9375f, 2.921875f, -2.625f, -0.40625f};
static float E_W5[24] = {-0.5625f, 0.9375f, 1.40625f, 0.28125f, 1.03125f, -1.71875f, -2.578125f, -0.515625f, 0.1875f, -0.3125f, -0.46875f, -0.09375f, -1.03125f, -0.375f, 0.28125f, 0.375f, 1.890625f, 0.6875f, -0.515625f, -0.6875f, 0.34375f, 0.125f, -0.09375f, -0.125f};
static float E_W6[12] = {-0.865234375f, 1.68359375f, 4.2890625f, 0.05859375f, 5.3671875f, 7.3125f, 4.5703125f, 3.8203125f, 4.828125f, -0.990234375f, -1.38671875f, -1.689453125f};
static float E_W7[12] = {0.0f, -1.625f, -0.5f, 1.375f, 0.125f, 0.375f, 0.5f, 0.0f, -1.75f, 1.0f, 1.5f, -0.5f};
static float E_W8[2] = {1.375f, -1.625f};
static float E_W9[8] = {1.75f, 1.546875f, 4.125f, 1.78125f, 4.5f, 2.21875f, -1.625f, -1.140625f};
static int32_t E_IW[6] = {-10, 5, -10, 21, 0, 6};
static float GN_D[24] = {-1.25f, 1.5f, 0.625f, 0.25f, -0.5f, -0.375f, -1.0f, -1.875f, 1.5f, -0.125f, 0.25f, -0.75f, 1.0f, -1.875f, -0.5f, -1.875f, -1.5f, 1.875f, 0.625f, -0.25f, 0.125f, 1.5f, -0.625f, 0.375f};
static int64_t GN_I0[8] = {0, -1, 1, 2, -2, 0, 1, -3};
static float GN_W0[16] = {1.5f, -0.125f, 0.25f, -0.75f, 0.125f, 1.5f, -0.625f, 0.375f, -1.25f, 1.5f, 0.625f, 0.25f, 1.0f, -1.875f, -0.5f, -1.875f};
static int64_t GN_I1[4] = {1, -1, 0, 2};
static float GN_W1[16] = {-0.5f, -0.375f, -1.0f, -1.875f, 1.5f, -0.125f, 0.25f, -0.75f, 1.0f, -1.875f, -0.5f, -1.875f, 0.125f, 1.5f, -0.625f, 0.375f};
static float SN_X[12] = {0.75f, -0.625f, 0.125f, 1.0f, 1.625f, -1.375f, 1.75f, -2.0f, 1.0f, 1.25f, -1.5f, -0.375f};
static int64_t SN_I[3] = {2, 0, -1};
static float SN_U[12] = {1.25f, -2.0f, 0.5f, 1.125f, 0.0f, 0.875f, -1.125f, -1.25f, -0.5f, -1.25f, -0.625f, 1.75f};
static float SN_W[12] = {0.0f, -0.546875f, -0.140625f, -1.25f, 1.625f, -1.375f, 1.75f, -2.0f, -0.625f, 3.125f, 0.46875f, -0.73828125f};
static int64_t SE_I[6] = {1, -1, 1, 0, 0, 3};
static float SE_U[6] = {0.25f, -0.625f, -0.875f, 1.75f, -0.25f, 1.875f};
static float SE_W[12] = {0.75f, -1.25f, 0.125f, 0.375f, 3.125f, -1.375f, 1.75f, -0.125f, 1.0f, 1.25f, -1.5f, -0.375f};
static float TK_X[15] = {3.0f, 1.0f, 4.0f, 1.0f, 5.0f, 9.0f, 2.0f, 6.0f, 5.0f, 3.0f, 5.0f, 8.0f, 9.0f, 7.0f, 9.0f};
static float TK_V[6] = {1.0f, 1.0f, 2.0f, 3.0f, 5.0f, 7.0f};
static int64_t TK_I[6] = {1, 3, 1, 4, 0, 3};
static int32_t RP_X[6] = {2, -3, 4, 5, 6, -7};
static int32_t RP_W[3] = {10, -18, -28};
static float MD_X[5] = {-7.5f, 7.5f, -4.25f, 4.0f, 3.0f};
static float MD_Y[5] = {2.0f, -2.0f, 3.0f, -3.0f, 0.75f};
static float MD_W[5] = {-1.5f, 1.5f, -1.25f, 1.0f, 0.0f};
static float GR_X[24] = {0.0f, 0.125f, 1.625f, 1.0f, 0.375f, -0.25f, 1.5f, -0.375f, 1.75f, -1.75f, -0.25f, 0.125f, 1.75f, -1.0f, 1.25f, 0.75f, 0.875f, 0.5f, 1.875f, -0.625f, -0.375f, -1.25f, -1.75f, -1.125f};
static float GR_S18[2] = {1.5f, -0.5f};
static float GR_B18[2] = {0.25f, 1.0f};
static float GR_S21[4] = {1.0f, 2.0f, -1.0f, 0.5f};
static float GR_B21[4] = {0.0f, 0.5f, -0.5f, 1.0f};
static float GR_W18[24] = {-0.8675511119400716f, -0.5760160392600528f, 2.9224048329001704f, 1.4647294695000774f, 0.007054106099984414f, -1.4506212573001092f, 0.43747195942074246f, 1.2285270164853235f, 0.33199795181213165f, 1.8086340583326828f, 1.175790012681018f, 1.0175790012681019f, 2.1180647287257366f, -2.716926333858523f, 1.2389754446195076f, 0.3598861605132786f, 0.5796584815398359f, -0.0796584815398359f, -0.03505058748388068f, 1.0356913995684096f, 0.9286172008631807f, 1.3033768963314822f, 1.5175252937419406f, 1.2498397969788677f};
static float GR_W21[24] = {-0.7450340746267143f, -0.5506773595067019f, 1.781603221933447f, 2.11963929266677f, 0.1760721414666459f, -1.7674950097334787f, -1.625056081158515f, -0.042945967029353216f, -1.8360040963757367f, 0.19136594166731713f, 0.824209987318982f, 0.9824209987318983f, 1.2453764858171577f, -1.9779508892390152f, 0.6593169630796717f, 0.6465148806843715f, 0.9395446420531145f, 0.0604553579468855f, -2.5701011749677614f, -0.4286172008631806f, -0.6427655982736387f, 0.6966231036685178f, 0.48247470625805955f, 0.7501602030211322f};
static float BT_X[24] = {1.625f, 1.375f, -1.5f, 0.375f, -0.125f, 0.375f, 0.625f, -0.75f, 1.875f, -0.125f, 0.5f, 0.5f, -1.25f, -1.75f, -0.375f, 1.0f, 1.25f, 0.875f, -1.5f, 1.625f, 1.25f, 1.5f, 0.125f, 1.625f};
static float BT_S[3] = {1.0f, 0.5f, 2.0f};
static float BT_B[3] = {0.0f, 1.0f, -1.0f};
static float BT_M[3] = {0.5f, -0.5f, 0.0f};
static float BT_V[3] = {1.0f, 2.0f, 0.5f};
static float BT_Y[24] = {1.3416365462725515f, 1.1428755764543959f, -1.1428755764543959f, 0.34783169718177265f, 0.7839112217588918f, 1.04001644041502f, 1.1680690497430841f, 0.46377969843873146f, 1.76441522618377f, -3.942764595614981f, -2.1592709013028712f, -2.1592709013028712f, -0.94411460663624f, -1.3416365462725515f, -0.24845121227269473f, 0.8447341217271621f, 1.4882005730632444f, 1.2961216590711482f, 0.07962187045453917f, 1.6802794870553406f, -0.019078468128339687f, 0.6943190095965042f, -3.229367117890137f, 1.0510177484589263f};
static float BT_RM[3] = {0.3875f, -0.340625f, 0.18125000000000002f};
static float BT_RV[3] = {1.11640625f, 1.7905761718750002f, 0.49824218750000004f};
static float MP_X[40] = {-1.875f, -1.875f, -1.875f, -1.0f, -1.0f, -1.25f, 0.25f, -1.875f, 0.375f, -1.375f, 0.75f, -1.875f, -0.75f, 1.75f, 0.125f, 1.25f, 0.625f, 0.5f, -1.25f, 0.25f, -1.875f, 1.25f, 1.875f, 1.375f, -1.75f, -0.625f, -0.75f, -1.5f, 0.5f, 1.25f, -0.75f, 1.5f, 1.25f, -1.5f, 1.125f, 1.5f, -1.25f, 0.25f, 0.5f, 0.375f};
static float MP_V[12] = {0.25f, 0.375f, -1.0f, 1.25f, 1.75f, 0.25f, 1.25f, 1.875f, 1.25f, 1.5f, 1.25f, 1.25f};
static int64_t MP_I[12] = {5, 13, 16, 3, 14, 19, 24, 28, 37, 26, 30, 37};
#define MP_OH 2
#define MP_OW 3
static float DS_X[16] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f, 11.0f, 12.0f, 13.0f, 14.0f, 15.0f};
static float DS_DCR[16] = {0.0f, 4.0f, 8.0f, 12.0f, 1.0f, 5.0f, 9.0f, 13.0f, 2.0f, 6.0f, 10.0f, 14.0f, 3.0f, 7.0f, 11.0f, 15.0f};
static float DS_CRD[16] = {0.0f, 2.0f, 4.0f, 6.0f, 1.0f, 3.0f, 5.0f, 7.0f, 8.0f, 10.0f, 12.0f, 14.0f, 9.0f, 11.0f, 13.0f, 15.0f};

/* RoiAlign, max, output_half_pixel, adaptive sampling, scale 0.9 (test_index.c's table) */
static const float RA_MAX_OHP[36] = {0.2896359375f, 0.50014453125f, 0.7544468750000001f, 0.10571484374999997f, 0.24339843749999995f, 0.46131406250000007f, 0.579271875f, 0.6794218750000003f, 0.04259062499999983f, 0.35420156249999996f, 0.61163671875f, 0.9226281250000001f, 0.5374999999999999f, 0.29562499999999997f, 0.36562499999999964f, 0.29374999999999973f, 0.225f, 0.32499999999999996f, 0.43750000000000044f, 0.24062500000000026f, 0.08968750000000002f, 0.75f, 0.45f, 0.6499999999999999f, 0.45916666666666683f, 0.33250000000000013f, 0.4512500000000001f, 0.2175000000000001f, 0.1575000000000001f, 0.21375000000000005f, 0.9183333333333337f, 0.6650000000000003f, 0.34833333333333344f, 0.4350000000000002f, 0.3150000000000002f, 0.3483333333333332f};

enum { F32 = 1, I32 = 6, I64 = 7, F16 = 10 };

/* Imports the model, runs @main on the CPU with nin inputs, reads nout results (bytes[k] each). */
static void run_io(builder_t *b, int nin, const void *const *in, int nout, void *const *out, const size_t *bytes) {
  rill_module_t *m = load_model(b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  rill_type_t t[4];
  for (int i = 0; i < nin; i++) ck_assert(rill_module_param_type(m, "main", i, &t[i], NULL));
  rill_tensor_t **res;
  int nres = invoke_main(vm, nin, t, in, &res);
  ck_assert_int_eq(nres, nout);
  for (int k = 0; k < nout; k++) {
    ck_assert_uint_eq(rill_tensor_nbytes(res[k]), bytes[k]);
    ck_assert(rill_tensor_read(res[k], out[k], bytes[k]) == NULL);
  }
  rill_results_free(vm, res, nres);
  rill_vm_destroy(vm);
  rill_module_release(m);
}

static void near(const float *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-5f * (1 + fabsf(want[i])), "%s at %zu: %.9g, want %.9g", what, i, got[i], want[i]);
}

/* One node over f32 inputs (dims given, -1 ending each list) and one f32 output of n values. */
typedef struct { const char *name; int rank; int64_t dims[4]; const float *v; } fin_t;
static void one_node(int opset, const char *op, const char *eq, const fin_t *ins, int nin, const float *want, size_t n) {
  builder_t b;
  b_init(&b, opset);
  static char *names[4] = {"a", "b", "c", "d"}, *in[5], *out[] = {"y", NULL};
  for (int i = 0; i < nin; i++) b_input_p(&b, names[i], F32, ins[i].rank, ins[i].dims, NULL), in[i] = names[i];
  in[nin] = NULL;
  Onnx__NodeProto *nd = b_node(&b, op, "/n", in, out);
  if (eq) b_attr_s(&b, nd, "equation", eq);
  b_output(&b, "y");
  float *y = malloc(n * sizeof *y);
  const void *data[4];
  for (int i = 0; i < nin; i++) data[i] = ins[i].v;
  size_t bytes = n * 4;
  run_io(&b, nin, data, 1, (void *const[]){y}, &bytes);
  near(y, want, n, eq ? eq : op);
  free(y);
}

START_TEST(einsum_equations) {
  fin_t A = {"a", 3, {2, 2, 3}, E_A}, B = {"b", 3, {2, 3, 2}, E_B}, D = {"d", 3, {2, 3, 3}, E_D}, P = {"p", 2, {3, 4}, E_P}, Q = {"q", 2, {4, 2}, E_Q},
        V = {"v", 1, {3}, E_V}, F = {"f", 3, {3, 3, 2}, E_F};
  one_node(12, "Einsum", "bij,bjk->bik", (fin_t[]){A, B}, 2, E_W0, 8);
  one_node(12, "Einsum", "...ii->...i", (fin_t[]){D}, 1, E_W1, 6);
  one_node(12, "Einsum", "bii", (fin_t[]){D}, 1, E_W2, 2);
  one_node(12, "Einsum", "ij->", (fin_t[]){P}, 1, E_W3, 1);
  one_node(12, "Einsum", "ij,jk", (fin_t[]){P, Q}, 2, E_W4, 6);
  one_node(12, "Einsum", "i,jk->kij", (fin_t[]){V, Q}, 2, E_W5, 24);
  one_node(12, "Einsum", "bij,bjk,bkl->bil", (fin_t[]){A, B, A}, 3, E_W6, 12);
  one_node(12, "Einsum", "ij->ji", (fin_t[]){P}, 1, E_W7, 12);
  one_node(12, "Einsum", "iij->j", (fin_t[]){F}, 1, E_W8, 2);
  /* "..." broadcast: the second operand has none of its dims */
  fin_t B0 = {"b", 2, {3, 2}, E_B};
  one_node(12, "Einsum", "...ij,jk->...ik", (fin_t[]){A, B0}, 2, E_W9, 8);
  /* integers: a matmul of i32 */
  builder_t b;
  b_init(&b, 12);
  static int64_t pd[2] = {2, 2}, qd[2] = {2, 3};
  static int32_t pi[4] = {1, -2, 0, 3}, qi[6] = {4, 5, -6, 7, 0, 2};
  b_input_p(&b, "p", I32, 2, pd, NULL);
  b_input_p(&b, "q", I32, 2, qd, NULL);
  static char *in[] = {"p", "q", NULL}, *out[] = {"y", NULL};
  b_attr_s(&b, b_node(&b, "Einsum", "/e", in, out), "equation", "ij,jk->ik");
  b_output(&b, "y");
  int32_t y[6];
  size_t bytes = sizeof y;
  run_io(&b, 2, (const void *[]){pi, qi}, 1, (void *const[]){y}, &bytes);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(y[i], E_IW[i]);
  /* a bad equation: a clear error */
  char msg[512];
  onnx_result_t r;
  b_init(&b, 12);
  b_input_p(&b, "p", I32, 2, pd, NULL);
  b_input_p(&b, "q", I32, 2, qd, NULL);
  b_attr_s(&b, b_node(&b, "Einsum", "/e", in, out), "equation", "ij,jk->iq");
  b_output(&b, "y");
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "node '/e' (Einsum, opset 12)") && strstr(msg, "an output label that no operand has"), "%s", msg);
}
END_TEST

/* GatherND: batch_dims 0 with indices known at import, 1 with indices given at run time */
START_TEST(gather_nd) {
  for (int bd = 0; bd < 2; bd++) {
    builder_t b;
    b_init(&b, 13);
    static int64_t dd[3] = {2, 3, 4}, i0[3] = {2, 2, 2}, i1[3] = {2, 2, 1};
    b_input_p(&b, "x", F32, 3, dd, NULL);
    if (bd) b_input_p(&b, "i", I64, 3, i1, NULL);
    else b_init_tensor(&b, "i", I64, 3, i0, GN_I0, 8);
    static char *in[] = {"x", "i", NULL}, *out[] = {"y", NULL};
    Onnx__NodeProto *n = b_node(&b, "GatherND", "/g", in, out);
    if (bd) b_attr_i(&b, n, "batch_dims", 1);
    b_output(&b, "y");
    float y[16];
    size_t bytes = sizeof y;
    run_io(&b, bd ? 2 : 1, (const void *[]){GN_D, GN_I1}, 1, (void *const[]){y}, &bytes);
    near(y, bd ? GN_W1 : GN_W0, 16, bd ? "GatherND batch_dims=1" : "GatherND");
  }
}
END_TEST

/* ScatterND (reduction mul, a negative index) and ScatterElements (add along axis 1, duplicates, negative indices) */
START_TEST(scatter_nd_and_elements) {
  for (int el = 0; el < 2; el++) {
    builder_t b;
    b_init(&b, 16);
    static int64_t xd[2] = {3, 4}, nd[2] = {3, 1}, ud[2] = {3, 4}, ed[2] = {2, 3};
    b_input_p(&b, "x", F32, 2, xd, NULL);
    b_init_tensor(&b, "i", I64, 2, el ? ed : nd, el ? SE_I : SN_I, el ? 6 : 3);
    b_input_p(&b, "u", F32, 2, el ? ed : ud, NULL);
    static char *in[] = {"x", "i", "u", NULL}, *out[] = {"y", NULL};
    Onnx__NodeProto *n = b_node(&b, el ? "ScatterElements" : "ScatterND", "/s", in, out);
    b_attr_s(&b, n, "reduction", el ? "add" : "mul");
    if (el) b_attr_i(&b, n, "axis", 1);
    b_output(&b, "y");
    float y[12];
    size_t bytes = sizeof y;
    run_io(&b, 2, (const void *[]){SN_X, el ? SE_U : SN_U}, 1, (void *const[]){y}, &bytes);
    near(y, el ? SE_W : SN_W, 12, el ? "ScatterElements" : "ScatterND");
  }
}
END_TEST

/* TopK: the 2 smallest along axis 1, k an initializer; both outputs */
START_TEST(topk_both_outputs) {
  builder_t b;
  b_init(&b, 11);
  static int64_t xd[2] = {3, 5}, kd[1] = {1}, k[1] = {2};
  b_input_p(&b, "x", F32, 2, xd, NULL);
  b_init_tensor(&b, "k", I64, 1, kd, k, 1);
  static char *in[] = {"x", "k", NULL}, *out[] = {"v", "i", NULL};
  Onnx__NodeProto *n = b_node(&b, "TopK", "/t", in, out);
  b_attr_i(&b, n, "largest", 0);
  b_attr_i(&b, n, "axis", 1);
  b_output(&b, "v");
  b_output(&b, "i");
  float v[6];
  int64_t ix[6];
  size_t bytes[2] = {sizeof v, sizeof ix};
  run_io(&b, 1, (const void *[]){TK_X}, 2, (void *const[]){v, ix}, bytes);
  near(v, TK_V, 6, "TopK values");
  for (int i = 0; i < 6; i++) ck_assert_int_eq(ix[i], TK_I[i]);
}
END_TEST

/* ReduceProd of i32 (keepdims) and Mod with fmod=1 of f32 */
START_TEST(reduce_prod_and_fmod) {
  builder_t b;
  b_init(&b, 13);
  static int64_t xd[2] = {2, 3}, ax[1] = {0};
  b_input_p(&b, "x", I32, 2, xd, NULL);
  static char *in[] = {"x", NULL}, *out[] = {"y", NULL};
  b_attr_ints(&b, b_node(&b, "ReduceProd", "/p", in, out), "axes", ax, 1);
  b_output(&b, "y");
  int32_t y[3];
  size_t bytes = sizeof y;
  run_io(&b, 1, (const void *[]){RP_X}, 1, (void *const[]){y}, &bytes);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(y[i], RP_W[i]);
  b_init(&b, 13);
  static int64_t md[1] = {5};
  b_input_p(&b, "a", F32, 1, md, NULL);
  b_input_p(&b, "b", F32, 1, md, NULL);
  static char *min[] = {"a", "b", NULL};
  b_attr_i(&b, b_node(&b, "Mod", "/m", min, out), "fmod", 1);
  b_output(&b, "y");
  float f[5];
  bytes = sizeof f;
  run_io(&b, 2, (const void *[]){MD_X, MD_Y}, 1, (void *const[]){f}, &bytes);
  near(f, MD_W, 5, "Mod fmod=1");
}
END_TEST

/* GroupNormalization: opset 18 (scale and bias per group) and 21 (per channel) */
START_TEST(group_norm) {
  for (int v21 = 0; v21 < 2; v21++) {
    builder_t b;
    b_init(&b, v21 ? 21 : 18);
    static int64_t xd[3] = {2, 4, 3}, gd[1] = {2}, cd[1] = {4};
    b_input_p(&b, "x", F32, 3, xd, NULL);
    b_init_tensor(&b, "s", F32, 1, v21 ? cd : gd, v21 ? GR_S21 : GR_S18, v21 ? 4 : 2);
    b_init_tensor(&b, "b", F32, 1, v21 ? cd : gd, v21 ? GR_B21 : GR_B18, v21 ? 4 : 2);
    static char *in[] = {"x", "s", "b", NULL}, *out[] = {"y", NULL};
    b_attr_i(&b, b_node(&b, "GroupNormalization", "/g", in, out), "num_groups", 2);
    b_output(&b, "y");
    float y[24];
    size_t bytes = sizeof y;
    run_io(&b, 1, (const void *[]){GR_X}, 1, (void *const[]){y}, &bytes);
    near(y, v21 ? GR_W21 : GR_W18, 24, v21 ? "GroupNormalization-21" : "GroupNormalization-18");
  }
}
END_TEST

/* InstanceNormalization and GroupNormalization in f16 over groups whose
 * mean is large beside their spread (60 and -40, spread 0.25, where f16's
 * spacing is 1/32): the statistics must not be rounded to half before
 * the subtraction (which was off by 1e-2 here, and is within 1.2e-3). Against the same arithmetic in
 * double from the same half inputs. */
START_TEST(norm_f16_large_mean) {
  enum { N = 2, C = 2, S = 64 };
  uint16_t x[N * C * S], y[N * C * S];
  float xf[N * C * S];
  for (int i = 0; i < N * C * S; i++) {
    x[i] = rill__f32_to_f16((i < C * S ? 60.0f : -40.0f) + 0.25f * sinf(0.7f * (float)i + 0.3f * (float)(i % 7)));
    xf[i] = rill__f16_to_f32(x[i]);
  }
  int32_t sb[2 * C] = {rill__f32_to_f16(1.5f), rill__f32_to_f16(-0.5f), rill__f32_to_f16(0.25f), rill__f32_to_f16(1.0f)};
  for (int gn = 0; gn < 2; gn++) {
    builder_t b;
    b_init(&b, 18);
    static int64_t xd[3] = {N, C, S}, cd[1] = {C};
    b_input_p(&b, "x", F16, 3, xd, NULL);
    b_init_tensor(&b, "s", F16, 1, cd, sb, C);
    b_init_tensor(&b, "b", F16, 1, cd, sb + C, C);
    static char *in[] = {"x", "s", "b", NULL}, *out[] = {"y", NULL};
    Onnx__NodeProto *n = b_node(&b, gn ? "GroupNormalization" : "InstanceNormalization", "/n", in, out);
    if (gn) b_attr_i(&b, n, "num_groups", C);   /* a group a channel: the same normalisation */
    b_output(&b, "y");
    size_t bytes = sizeof y;
    run_io(&b, 1, (const void *[]){x}, 1, (void *const[]){y}, &bytes);
    for (int g = 0; g < N * C; g++) {
      double mean = 0, var = 0;
      for (int i = 0; i < S; i++) mean += xf[g * S + i] / S;
      for (int i = 0; i < S; i++) var += (xf[g * S + i] - mean) * (xf[g * S + i] - mean) / S;
      double sc = rill__f16_to_f32((uint16_t)sb[g % C]), bi = rill__f16_to_f32((uint16_t)sb[C + g % C]);
      for (int i = 0; i < S; i++) {
        double want = (xf[g * S + i] - mean) / sqrt(var + 1e-5) * sc + bi, got = rill__f16_to_f32(y[g * S + i]);
        ck_assert_msg(fabs(got - want) <= 3e-3, "%s f16 at %d: %.6g, want %.6g", gn ? "GroupNormalization" : "InstanceNormalization",
                      g * S + i, got, want);
      }
    }
  }
}
END_TEST

/* BatchNormalization with training_mode=1: the batch's statistics and the running ones updated (momentum 0.8) */
START_TEST(batch_norm_training) {
  builder_t b;
  b_init(&b, 15);
  static int64_t xd[4] = {2, 3, 2, 2}, cd[1] = {3};
  b_input_p(&b, "x", F32, 4, xd, NULL);
  b_init_tensor(&b, "s", F32, 1, cd, BT_S, 3);
  b_init_tensor(&b, "b", F32, 1, cd, BT_B, 3);
  b_init_tensor(&b, "m", F32, 1, cd, BT_M, 3);
  b_init_tensor(&b, "v", F32, 1, cd, BT_V, 3);
  static char *in[] = {"x", "s", "b", "m", "v", NULL}, *out[] = {"y", "rm", "rv", NULL};
  Onnx__NodeProto *n = b_node(&b, "BatchNormalization", "/bn", in, out);
  b_attr_i(&b, n, "training_mode", 1);
  b_attr_f(&b, n, "momentum", 0.8f);
  b_output(&b, "y");
  b_output(&b, "rm");
  b_output(&b, "rv");
  float y[24], rm[3], rv[3];
  size_t bytes[3] = {sizeof y, sizeof rm, sizeof rv};
  run_io(&b, 1, (const void *[]){BT_X}, 3, (void *const[]){y, rm, rv}, bytes);
  near(y, BT_Y, 24, "BatchNormalization y");
  near(rm, BT_RM, 3, "running mean");
  near(rv, BT_RV, 3, "running var");
}
END_TEST

/* MaxPool's Indices: kernel 3x2, stride 2, asymmetric pads, storage_order=1, a tie (the first position wins) */
START_TEST(max_pool_indices) {
  builder_t b;
  b_init(&b, 12);
  static int64_t xd[4] = {1, 2, 4, 5}, k[2] = {3, 2}, s[2] = {2, 2}, p[4] = {1, 0, 1, 1};
  b_input_p(&b, "x", F32, 4, xd, NULL);
  static char *in[] = {"x", NULL}, *out[] = {"y", "i", NULL};
  Onnx__NodeProto *n = b_node(&b, "MaxPool", "/mp", in, out);
  b_attr_ints(&b, n, "kernel_shape", k, 2);
  b_attr_ints(&b, n, "strides", s, 2);
  b_attr_ints(&b, n, "pads", p, 4);
  b_attr_i(&b, n, "storage_order", 1);
  b_output(&b, "y");
  b_output(&b, "i");
  float y[2 * MP_OH * MP_OW];
  int64_t ix[2 * MP_OH * MP_OW];
  size_t bytes[2] = {sizeof y, sizeof ix};
  run_io(&b, 1, (const void *[]){MP_X}, 2, (void *const[]){y, ix}, bytes);
  near(y, MP_V, 2 * MP_OH * MP_OW, "MaxPool values");
  for (int i = 0; i < 2 * MP_OH * MP_OW; i++) ck_assert_msg(ix[i] == MP_I[i], "index %d: %lld, want %lld", i, (long long)ix[i], (long long)MP_I[i]);
}
END_TEST

/* DepthToSpace in both modes */
START_TEST(depth_to_space_modes) {
  for (int crd = 0; crd < 2; crd++) {
    builder_t b;
    b_init(&b, 13);
    static int64_t xd[4] = {1, 8, 2, 1};
    b_input_p(&b, "x", F32, 4, xd, NULL);
    static char *in[] = {"x", NULL}, *out[] = {"y", NULL};
    Onnx__NodeProto *n = b_node(&b, "DepthToSpace", "/d", in, out);
    b_attr_i(&b, n, "blocksize", 2);
    if (crd) b_attr_s(&b, n, "mode", "CRD");
    b_output(&b, "y");
    float y[16];
    size_t bytes = sizeof y;
    run_io(&b, 1, (const void *[]){DS_X}, 1, (void *const[]){y}, &bytes);
    near(y, crd ? DS_CRD : DS_DCR, 16, crd ? "DepthToSpace CRD" : "DepthToSpace DCR");
  }
}
END_TEST

/* GridSample (bicubic, reflection) and RoiAlign (max, output_half_pixel) through the importer */
START_TEST(grid_sample_and_roi_align) {
  builder_t b;
  b_init(&b, 16);
  static int64_t xd[4] = {1, 1, 3, 4}, gd[4] = {1, 2, 3, 2};
  static float x[12] = {-1.25f, -0.75f, -0.25f, 0.25f, 0.75f, 1.25f, 4.0f, 2.25f, 2.75f, 3.25f, 3.75f, 4.25f};
  static float g[12] = {-1.2f, -0.9f, 0.3f, 0.1f, 0.95f, 1.3f, -0.25f, 0.6f, 1.0f, -1.0f, 0.0f, 0.0f};
  /* numpy, bicubic with reflection, align_corners=0 (the values of test_index.c's table) */
  static float want[6] = {-1.6250000000000013f, 4.339304736328128f, 4.425678124999998f, 3.0995000000000017f, 0.0478515625f, 2.8359375f};
  b_input_p(&b, "x", F32, 4, xd, NULL);
  b_input_p(&b, "g", F32, 4, gd, NULL);
  static char *in[] = {"x", "g", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "GridSample", "/gs", in, out);
  b_attr_s(&b, n, "mode", "bicubic");
  b_attr_s(&b, n, "padding_mode", "reflection");
  b_output(&b, "y");
  float y[6];
  size_t bytes = sizeof y;
  run_io(&b, 2, (const void *[]){x, g}, 1, (void *const[]){y}, &bytes);
  for (int i = 0; i < 6; i++) ck_assert_msg(fabsf(y[i] - want[i]) <= 2e-5f * (1 + fabsf(want[i])), "GridSample at %d: %.9g, want %.9g", i, y[i], want[i]);
  b_init(&b, 16);
  static int64_t rxd[4] = {2, 2, 5, 6}, rd[2] = {3, 4}, bd[1] = {3};
  static float rx[120], rois[12] = {0.5f, 1.0f, 4.2f, 3.7f, -1.0f, 0.0f, 2.0f, 6.5f, 2.0f, 2.0f, 2.4f, 2.2f};
  static int64_t bi[3] = {1, 0, 1};
  for (int i = 0; i < 120; i++) rx[i] = (float)(i % 7) * 0.25f - 0.5f;
  b_input_p(&b, "x", F32, 4, rxd, NULL);
  b_input_p(&b, "r", F32, 2, rd, NULL);
  b_init_tensor(&b, "bi", I64, 1, bd, bi, 3);
  static char *rin[] = {"x", "r", "bi", NULL};
  n = b_node(&b, "RoiAlign", "/ra", rin, out);
  b_attr_s(&b, n, "mode", "max");
  b_attr_s(&b, n, "coordinate_transformation_mode", "output_half_pixel");
  b_attr_i(&b, n, "output_height", 2);
  b_attr_i(&b, n, "output_width", 3);
  b_attr_f(&b, n, "spatial_scale", 0.9f);
  b_output(&b, "y");
  float ry[36];
  bytes = sizeof ry;
  run_io(&b, 2, (const void *[]){rx, rois}, 1, (void *const[]){ry}, &bytes);
  for (int i = 0; i < 36; i++) ck_assert_msg(fabsf(ry[i] - RA_MAX_OHP[i]) <= 1e-5f * (1 + fabsf(RA_MAX_OHP[i])), "RoiAlign at %d: %.9g, want %.9g", i, ry[i], RA_MAX_OHP[i]);
}
END_TEST

/* Bernoulli and the Random ops: refused, the message naming the node */
START_TEST(random_refused) {
  const char *ops[5] = {"Bernoulli", "RandomUniformLike", "RandomNormalLike", "RandomUniform", "RandomNormal"};
  for (int k = 0; k < 5; k++) {
    builder_t b;
    b_init(&b, 15);
    static int64_t xd[1] = {4};
    b_input_p(&b, "x", F32, 1, xd, NULL);
    static char *in[] = {"x", NULL}, *none[] = {NULL}, *out[] = {"y", NULL};
    b_node(&b, ops[k], "/drop/mask", k < 3 ? in : none, out);
    b_output(&b, "y");
    char msg[512], want[128];
    onnx_result_t r;
    ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
    snprintf(want, sizeof want, "node '/drop/mask' (%s, opset 15): unsupported: random numbers are not generated", ops[k]);
    ck_assert_msg(strstr(msg, want), "%s", msg);
  }
}
END_TEST

/* one model holding every op above (opset 18), imported and run, then
 * damaged: truncated at every length and bits flipped (no crash, leak or hang) */
static void all_ops_model(builder_t *b) {
  b_init(b, 18);
  static int64_t xd[3] = {2, 3, 4}, id[4] = {1, 1, 3, 4}, k1[1] = {1}, gi[2] = {2, 1}, sd[3] = {2, 3, 1}, gd[4] = {1, 2, 2, 2}, rd[2] = {2, 4}, c3[1] = {3},
                 kk[2] = {2, 2}, a1[1] = {1};
  static int64_t kv[1] = {2}, gv[2] = {1, -2}, sv[6] = {0, 3, -1, 2, 1, 0}, bv[2] = {0, 0}, axv[1] = {1};
  static float uv[6] = {1, 2, 3, 4, 5, 6}, grv[8] = {-0.5f, 0.2f, 0.9f, -1.1f, 0, 0, 0.3f, 0.7f}, rv[8] = {0, 0, 2, 2, 1, 0.5f, 3, 2.5f}, one[3] = {1, 1, 1},
                      zero[3] = {0, 0, 0};
  b_input(b, "x", 3, xd, NULL);
  b_input(b, "img", 4, id, NULL);
  b_init_tensor(b, "k", I64, 1, k1, kv, 1);
  b_init_tensor(b, "gi", I64, 2, gi, gv, 2);
  b_init_tensor(b, "si", I64, 3, sd, sv, 6);
  b_init_tensor(b, "su", F32, 3, sd, uv, 6);
  b_init_tensor(b, "grid", F32, 4, gd, grv, 8);
  b_init_tensor(b, "rois", F32, 2, rd, rv, 8);
  b_init_tensor(b, "bi", I64, 1, (int64_t[]){2}, bv, 2);
  b_init_tensor(b, "ones", F32, 1, c3, one, 3);
  b_init_tensor(b, "zeros", F32, 1, c3, zero, 3);
  b_init_tensor(b, "axes", I64, 1, a1, axv, 1);
  static char *x1[] = {"x", NULL}, *img[] = {"img", NULL}, *e[] = {"e", NULL}, *gin[] = {"x", "gi", NULL}, *g[] = {"g", NULL},
              *sin[] = {"x", "si", "su", NULL}, *s[] = {"s", NULL}, *tin[] = {"x", "k", NULL}, *t[] = {"t", "ti", NULL}, *pin[] = {"x", "axes", NULL},
              *pr[] = {"p", NULL}, *gsin[] = {"img", "grid", NULL}, *gs[] = {"gs", NULL}, *rin[] = {"img", "rois", "bi", NULL}, *ra[] = {"ra", NULL},
              *mp[] = {"mp", "mi", NULL}, *gnin[] = {"x", "ones", "zeros", NULL}, *gn[] = {"gn", NULL}, *modin[] = {"x", "e2", NULL}, *md[] = {"md", NULL},
              *e2[] = {"e2", NULL};
  b_attr_s(b, b_node(b, "Einsum", "/e", x1, e), "equation", "bij->bji");
  b_node(b, "GatherND", "/g", gin, g);
  Onnx__NodeProto *n = b_node(b, "ScatterElements", "/s", sin, s);
  b_attr_i(b, n, "axis", 2);
  b_attr_s(b, n, "reduction", "max");
  b_node(b, "TopK", "/t", tin, t);
  b_node(b, "ReduceProd", "/p", pin, pr);
  b_node(b, "GridSample", "/gs", gsin, gs);
  b_node(b, "RoiAlign", "/ra", rin, ra);
  b_attr_ints(b, b_node(b, "MaxPool", "/mp", img, mp), "kernel_shape", kk, 2);
  b_attr_i(b, b_node(b, "GroupNormalization", "/gn", gnin, gn), "num_groups", 3);
  b_attr_s(b, b_node(b, "Einsum", "/e2", x1, e2), "equation", "bij->bij");
  b_attr_i(b, b_node(b, "Mod", "/md", modin, md), "fmod", 1);
  const char *outs[] = {"e", "g", "s", "t", "ti", "p", "gs", "ra", "mp", "mi", "gn", "md"};
  for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) b_output(b, outs[i]);
}

START_TEST(damaged_models) {
  builder_t b;
  all_ops_model(&b);
  rill_module_t *m = load_model(&b);
  rill_module_release(m);
  damage(&b, 1500);
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_ops");
  TCase *tc = tcase_create("onnx_ops");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, einsum_equations);
  tcase_add_test(tc, gather_nd);
  tcase_add_test(tc, scatter_nd_and_elements);
  tcase_add_test(tc, topk_both_outputs);
  tcase_add_test(tc, reduce_prod_and_fmod);
  tcase_add_test(tc, group_norm);
  tcase_add_test(tc, norm_f16_large_mean);
  tcase_add_test(tc, batch_norm_training);
  tcase_add_test(tc, max_pool_indices);
  tcase_add_test(tc, depth_to_space_modes);
  tcase_add_test(tc, grid_sample_and_roi_align);
  tcase_add_test(tc, random_refused);
  tcase_add_test(tc, damaged_models);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
