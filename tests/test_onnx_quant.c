/* test_onnx_quant.c: the quantized ONNX ops (QuantizeLinear and
 * DequantizeLinear per tensor, per axis and in blocks, DynamicQuantizeLinear,
 * MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, and a QDQ
 * convolution) on models built here with protobuf-c, against values numpy
 * computed (a short independent program following ONNX's reference
 * definitions: rint's halves to even, the zero point added before rounding
 * in QLinear*, integer sums exact; its results pasted below); on the cpu
 * device, and on cuda where a GPU is usable; and the inputs refused with a
 * message naming the node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_builder.h"

/* ---- values from numpy ---- */
static float QA_X[24] = {1.25f, 1.75f, -0.25f, 300.0f, 0.625f, 0.875f, -40.0f, 31.875f, 11.0f, 9.0f, 1000.0f, -3.0f, 0.375f, -0.125f, 5.0f, -33.0f, 3.0f, 501.0f, 1.0f, -1.0f, 0.75f, 32.125f, -6.0f, 6.0f};
static float QA_S[3] = {0.5f, 0.25f, 2.0f};
static int32_t QA_Z[3] = {0, 128, 250};
static uint8_t QA_Y[24] = {2, 4, 0, 255, 130, 132, 0, 255, 255, 254, 255, 248, 1, 0, 10, 0, 140, 255, 132, 124, 250, 255, 247, 253};
static int8_t QB_Y[24] = {-1, 1, -3, 127, -2, -1, -83, 61, 19, 15, 127, -9, -2, -3, 7, -69, 3, 127, -1, -5, -1, 61, -15, 9};
static int32_t DQ_Z[3] = {1, -2, 5};
static float DQ_Y[24] = {-1.0f, 0.0f, -2.0f, 63.0f, 0.0f, 0.25f, -20.25f, 15.75f, 28.0f, 20.0f, 244.0f, -28.0f, -1.5f, -2.0f, 3.0f, -35.0f, 1.25f, 32.25f, 0.25f, -0.75f, -12.0f, 112.0f, -40.0f, 8.0f};
static uint8_t BK_X[8] = {0, 17, 255, 128, 3, 200, 99, 1};
static float BK_S[4] = {0.5f, 0.125f, 2.0f, 0.25f};
static int32_t BK_Z[4] = {1, 128, 0, 99};
static float BK_Y[8] = {-0.5f, 8.0f, 15.875f, 0.0f, 6.0f, 400.0f, 0.0f, -24.5f};
static float DY_X[10] = {2.1951098442077637f, -0.6884700059890747f, 2.7665047645568848f, 1.1263543367385864f, -3.7127015590667725f, 4.004964351654053f, 0.7063714265823364f, 2.8594067096710205f, 6.510496616363525f, 1.8052898645401f};
static uint8_t DY_Y[10] = {148, 76, 162, 121, 0, 193, 111, 164, 255, 138};
#define DY_S 0.04009097069501877f
#define DY_Z 93
static int8_t MI_A[24] = {-22, -67, 1, -116, -114, -100, 91, -41, -98, -125, 113, 69, -89, 77, 19, -123, -96, 6, 51, -18, -90, -26, 91, -110};
static int32_t MI_AZ[3] = {-128, 0, 127};
static int32_t MI_B[8] = {164, 240, 159, 75, 59, 238, 169, 103};
static int32_t MI_BZ[2] = {255, 3};
static int32_t MI_Y[12] = {-41818, 61029, 5664, -16933, 52399, -80559, -52471, 59048, -288, -12135, 61873, -94605};
static uint8_t CI_X[32] = {26, 53, 116, 64, 65, 63, 49, 206, 124, 212, 170, 206, 170, 68, 71, 75, 54, 137, 243, 182, 203, 180, 91, 215, 69, 195, 10, 131, 170, 177, 26, 195};
static int32_t CI_W[54] = {-118, -79, -110, 122, 1, 9, -9, 34, -74, 43, -20, 53, 14, -106, -13, -109, 58, -52, 127, -95, 13, 63, -6, -8, 58, -82, 68, -25, -118, -78, -11, 63, 53, -26, 10, 90, 107, 53, 21, -10, 4, 19, 108, 127, 98, 56, -122, -20, 67, -27, 40, 90, -6, 33};
static int32_t CI_WZ[3] = {-128, 0, 127};
static int32_t CI_Y[12] = {86761, 136080, 195431, 265416, 25951, 52899, -22164, 5890, -69807, -129194, -186326, -210873};
static int32_t CB_Y[2] = {-4694080, -4651584};
static uint8_t QM_A[6] = {157, 177, 69, 41, 67, 113};
static int32_t QM_B[12] = {111, -124, 57, 9, 53, -123, -115, 38, -76, -91, -31, -109};
static float QM_BS[4] = {0.009999999776482582f, 0.019999999552965164f, 0.004999999888241291f, 0.03999999910593033f};
static uint8_t QM_Y[8] = {231, 0, 96, 153, 121, 0, 108, 0};
static uint8_t QC_X[50] = {162, 42, 65, 106, 156, 125, 165, 64, 157, 159, 56, 155, 73, 55, 154, 97, 141, 238, 235, 126, 54, 208, 81, 174, 29, 166, 118, 226, 45, 11, 124, 141, 98, 229, 202, 140, 95, 4, 31, 240, 184, 189, 165, 97, 201, 46, 208, 5, 31, 238};
static int32_t QC_W[54] = {60, 85, 38, -96, -73, -87, -40, 53, -18, -93, -12, 18, -102, -36, 87, 19, 100, 36, 27, -52, -20, -52, 39, -80, 78, 117, -59, -16, 63, -112, 87, -2, -41, 38, 37, 100, -77, -45, 127, 73, -37, 43, 6, 109, -125, -43, -16, -77, -65, -126, 104, 13, -27, 24};
static float QC_WS[3] = {0.003000000026077032f, 0.0010000000474974513f, 0.0020000000949949026f};
static int32_t QC_B[3] = {1000, -2000, 0};
static int8_t QC_Y[27] = {-1, -3, 23, 5, 12, 5, 4, -19, 17, -3, -2, -3, -7, -5, -3, -12, -6, -9, -17, -31, 11, -7, -3, -25, 13, 8, -12};
static float QD_X[50] = {0.1424054205417633f, 0.16520148515701294f, 3.0218722820281982f, -1.0140968561172485f, -0.6921901106834412f, -1.0733435153961182f, 0.7994938492774963f, 1.0208820104599f, -0.29373809695243835f, 1.4924548864364624f, 2.078599452972412f, -0.4878225326538086f, 0.5294150710105896f, -0.21404767036437988f, -0.653978168964386f, -0.4823295772075653f, -0.25421813130378723f, -1.3015562295913696f, -0.10104065388441086f, 0.7841373085975647f, -0.9550715088844299f, -0.5346168279647827f, -0.9207459688186646f, 0.3683609068393707f, -0.11396010220050812f, 0.9199299812316895f, -0.3240019977092743f, -1.4774104356765747f, 0.5555979013442993f, -0.3067752718925476f, 1.1344558000564575f, 0.7093860507011414f, -2.634882688522339f, -1.9811365604400635f, 0.022280512377619743f, -0.7609233856201172f, -2.2506425380706787f, -0.5439951419830322f, 1.2800382375717163f, 0.6257850527763367f, -0.8953576683998108f, 0.2767138183116913f, 1.0045394897460938f, -0.19380316138267517f, 1.7637417316436768f, -0.7175432443618774f, 2.096034049987793f, 1.5256187915802002f, 0.5116987824440002f, 0.21799787878990173f};
static float QD_B[3] = {0.25f, -0.5f, 0.125f};
static float QD_Y[75] = {0.20000000298023224f, -0.9000000357627869f, -0.550000011920929f, -0.75f, 0.75f, 0.25f, -2.1000001430511475f, 0.15000000596046448f, 1.5f, 0.30000001192092896f, -1.100000023841858f, -0.15000000596046448f, 1.7000000476837158f, 1.850000023841858f, 1.5500000715255737f, 0.8500000238418579f, 2.700000047683716f, 1.649999976158142f, 1.149999976158142f, -0.550000011920929f, 1.100000023841858f, 1.25f, -0.6500000357627869f, -0.3499999940395355f, 0.15000000596046448f, -0.550000011920929f, -0.800000011920929f, -0.45000001788139343f, -0.949999988079071f, -0.3499999940395355f, -0.550000011920929f, -0.30000001192092896f, -0.550000011920929f, -0.550000011920929f, -0.6500000357627869f, -0.30000001192092896f, -0.4000000059604645f, -0.800000011920929f, -0.6000000238418579f, -0.30000001192092896f, -0.30000001192092896f, -0.4000000059604645f, -0.6500000357627869f, -0.3499999940395355f, -0.4000000059604645f, -0.6500000357627869f, -0.6000000238418579f, -0.25f, -0.6000000238418579f, -0.4000000059604645f, -0.6500000357627869f, -0.20000000298023224f, 0.75f, 0.10000000149011612f, 0.30000001192092896f, 0.699999988079071f, -0.25f, -0.05000000074505806f, 1.0f, 0.25f, -0.15000000596046448f, 1.9500000476837158f, 0.4000000059604645f, 0.45000001788139343f, -0.05000000074505806f, 0.550000011920929f, 0.3499999940395355f, -0.45000001788139343f, 0.10000000149011612f, -0.4000000059604645f, 0.75f, -0.5f, -0.30000001192092896f, -0.25f, -0.05000000074505806f};

enum { F32 = 1, U8 = 2, I8 = 3, I16 = 5, I32 = 6, I64 = 7 };

/* Imports the model and runs @main on each usable device with nin inputs;
 * each of the nout results (bytes[k]) must equal want[k] byte for byte, or
 * (f32 results, tol > 0) within tol. */
static void check_io(builder_t *b, int nin, const void *const *in, int nout, const void *const *want, const size_t *bytes, float tol) {
  rill_module_t *m = load_model(b);
  const char *devs[2] = {"cpu", "cuda"};
  for (int dv = 0; dv < 2; dv++) {
    const char *why;
    if (dv && !rill_device_usable("cuda", &why)) {
      printf("cuda skipped: %s\n", why);
      break;
    }
    rill_vm_t *vm;
    ck_assert(rill_vm_create(NULL, m, devs[dv], &vm) == NULL);
    rill_type_t t[4];
    for (int i = 0; i < nin; i++) ck_assert(rill_module_param_type(m, "main", i, &t[i], NULL));
    rill_tensor_t **res;
    int nres = invoke_main(vm, nin, t, in, &res);
    ck_assert_int_eq(nres, nout);
    for (int k = 0; k < nout; k++) {
      ck_assert_uint_eq(rill_tensor_nbytes(res[k]), bytes[k]);
      uint8_t *got = malloc(bytes[k]);
      ck_assert(got && rill_tensor_read(res[k], got, bytes[k]) == NULL);
      if (tol > 0) {
        const float *g = (const float *)got, *w = want[k];
        for (size_t i = 0; i < bytes[k] / 4; i++)
          ck_assert_msg(fabsf(g[i] - w[i]) <= tol * (1 + fabsf(w[i])), "%s result %d at %zu: %.9g, want %.9g", devs[dv], k, i, g[i], w[i]);
      } else {
        for (size_t i = 0; i < bytes[k]; i++)
          ck_assert_msg(got[i] == ((const uint8_t *)want[k])[i], "%s result %d: byte %zu is %u, want %u", devs[dv], k, i, got[i],
                        ((const uint8_t *)want[k])[i]);
      }
      free(got);
    }
    rill_results_free(vm, res, nres);
    rill_vm_destroy(vm);
  }
  rill_module_release(m);
}

/* QuantizeLinear per axis (u8, halves to even, saturated both ways), per
 * tensor (i8, opset 10), and DequantizeLinear per axis of the i8 result */
START_TEST(quantize_dequantize) {
  static int64_t xd[3] = {2, 3, 4}, cd[1] = {3};
  static int32_t z0[1] = {0}, zm3[1] = {-3};
  static float half[1] = {0.5f};
  for (int k = 0; k < 3; k++) {
    builder_t b;
    b_init(&b, k == 1 ? 10 : 13);
    b_input_p(&b, "x", k == 2 ? I8 : F32, 3, xd, NULL);
    static char *in[] = {"x", "s", "z", NULL}, *out[] = {"y", NULL};
    if (k == 0) {
      b_init_tensor(&b, "s", F32, 1, cd, QA_S, 3);
      b_init_tensor(&b, "z", U8, 1, cd, QA_Z, 3);
    } else if (k == 1) {
      b_init_tensor(&b, "s", F32, 0, NULL, half, 1);
      b_init_tensor(&b, "z", I8, 0, NULL, zm3, 1);
    } else {
      b_init_tensor(&b, "s", F32, 1, cd, QA_S, 3);
      b_init_tensor(&b, "z", I8, 1, cd, DQ_Z, 3);
    }
    (void)z0;
    b_node(&b, k == 2 ? "DequantizeLinear" : "QuantizeLinear", "/q", in, out);
    b_output(&b, "y");
    size_t bytes = k == 2 ? sizeof DQ_Y : 24;
    const void *x = k == 2 ? (const void *)QB_Y : QA_X, *want = k == 0 ? (const void *)QA_Y : k == 1 ? (const void *)QB_Y : DQ_Y;
    check_io(&b, 1, (const void *[]){x}, 1, (const void *[]){want}, &bytes, 0);
  }
}
END_TEST

/* opset 21: QuantizeLinear with output_dtype and no zero point; DequantizeLinear in blocks of 2 along axis 1 */
START_TEST(quantize_opset21) {
  builder_t b;
  b_init(&b, 21);
  static int64_t xd[3] = {2, 3, 4};
  static float half[1] = {0.5f};
  b_input_p(&b, "x", F32, 3, xd, NULL);
  b_init_tensor(&b, "s", F32, 0, NULL, half, 1);
  static char *in[] = {"x", "s", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "QuantizeLinear", "/q", in, out);
  b_attr_i(&b, n, "output_dtype", I8);
  b_attr_i(&b, n, "saturate", 1);
  b_output(&b, "y");
  int8_t want[24];
  for (int i = 0; i < 24; i++) want[i] = (int8_t)(QB_Y[i] + 3 > 127 ? 127 : QB_Y[i] + 3); /* QB_Y without its zero point -3 */
  size_t bytes = 24;
  /* saturation: 300 / 0.5 and 1000 / 0.5 above 127 stay 127 without the -3 */
  check_io(&b, 1, (const void *[]){QA_X}, 1, (const void *[]){want}, &bytes, 0);
  b_init(&b, 21);
  static int64_t bd[2] = {2, 4}, sd[2] = {2, 2};
  b_input_p(&b, "x", U8, 2, bd, NULL);
  b_init_tensor(&b, "s", F32, 2, sd, BK_S, 4);
  b_init_tensor(&b, "z", U8, 2, sd, BK_Z, 4);
  static char *bin[] = {"x", "s", "z", NULL};
  n = b_node(&b, "DequantizeLinear", "/dq", bin, out);
  b_attr_i(&b, n, "block_size", 2);
  b_output(&b, "y");
  bytes = sizeof BK_Y;
  check_io(&b, 1, (const void *[]){BK_X}, 1, (const void *[]){BK_Y}, &bytes, 0);
}
END_TEST

START_TEST(dynamic_quantize) {
  builder_t b;
  b_init(&b, 11);
  static int64_t xd[2] = {2, 5};
  b_input_p(&b, "x", F32, 2, xd, NULL);
  static char *in[] = {"x", NULL}, *out[] = {"y", "s", "z", NULL};
  b_node(&b, "DynamicQuantizeLinear", "/dq", in, out);
  b_output(&b, "y");
  b_output(&b, "s");
  b_output(&b, "z");
  float s = DY_S;
  uint8_t z = DY_Z;
  size_t bytes[3] = {10, 4, 1};
  check_io(&b, 1, (const void *[]){DY_X}, 3, (const void *[]){DY_Y, &s, &z}, bytes, 0);
}
END_TEST

/* MatMulInteger: A i8 [2,3,4] with a zero point per row, B u8 [4,2] with one per column */
START_TEST(matmul_integer) {
  builder_t b;
  b_init(&b, 10);
  static int64_t ad[3] = {2, 3, 4}, bd[2] = {4, 2}, rd[1] = {3}, cd[1] = {2};
  b_input_p(&b, "a", I8, 3, ad, NULL);
  b_init_tensor(&b, "b", U8, 2, bd, MI_B, 8);
  b_init_tensor(&b, "az", I8, 1, rd, MI_AZ, 3);
  b_init_tensor(&b, "bz", U8, 1, cd, MI_BZ, 2);
  static char *in[] = {"a", "b", "az", "bz", NULL}, *out[] = {"y", NULL};
  b_node(&b, "MatMulInteger", "/mm", in, out);
  b_output(&b, "y");
  size_t bytes = sizeof MI_Y;
  check_io(&b, 1, (const void *[]){MI_A}, 1, (const void *[]){MI_Y}, &bytes, 0);
}
END_TEST

/* ConvInteger: pads 1, strides 2, a zero point per output channel; and 32
 * channels (288 products a window, sums to 2^24 and beyond: f32 would round)
 * at the extremes of u8 and i8 */
START_TEST(conv_integer) {
  builder_t b;
  b_init(&b, 10);
  static int64_t xd[4] = {1, 2, 4, 4}, wd[4] = {3, 2, 3, 3}, cd[1] = {3}, p[4] = {1, 1, 1, 1}, s[2] = {2, 2};
  static int32_t xz[1] = {7};
  b_input_p(&b, "x", U8, 4, xd, NULL);
  b_init_tensor(&b, "w", I8, 4, wd, CI_W, 54);
  b_init_tensor(&b, "xz", U8, 0, NULL, xz, 1);
  b_init_tensor(&b, "wz", I8, 1, cd, CI_WZ, 3);
  static char *in[] = {"x", "w", "xz", "wz", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "ConvInteger", "/ci", in, out);
  b_attr_ints(&b, n, "pads", p, 4);
  b_attr_ints(&b, n, "strides", s, 2);
  b_output(&b, "y");
  size_t bytes = sizeof CI_Y;
  check_io(&b, 1, (const void *[]){CI_X}, 1, (const void *[]){CI_Y}, &bytes, 0);
  b_init(&b, 10);
  static int64_t bxd[4] = {1, 32, 3, 3}, bwd[4] = {2, 32, 3, 3};
  static uint8_t bx[288];
  static int32_t bw[576], bxz[1] = {255}, bwz[1] = {-128};
  for (int i = 0; i < 288; i++) bx[i] = (uint8_t)((i * 37 + 11) % 256);
  for (int i = 0; i < 576; i++) bw[i] = (i * 53 + 7) % 256 - 128;
  b_input_p(&b, "x", U8, 4, bxd, NULL);
  b_init_tensor(&b, "w", I8, 4, bwd, bw, 576);
  b_init_tensor(&b, "xz", U8, 0, NULL, bxz, 1);
  b_init_tensor(&b, "wz", I8, 0, NULL, bwz, 1);
  b_node(&b, "ConvInteger", "/ci", in, out);
  b_output(&b, "y");
  bytes = sizeof CB_Y;
  check_io(&b, 1, (const void *[]){bx}, 1, (const void *[]){CB_Y}, &bytes, 0);
}
END_TEST

/* QLinearMatMul: u8 a, i8 b with a scale per column, u8 y */
START_TEST(qlinear_matmul) {
  builder_t b;
  b_init(&b, 10);
  static int64_t ad[2] = {2, 3}, bd[2] = {3, 4}, cd[1] = {4};
  static float as[1] = {0.05f}, ys[1] = {0.1f};
  static int32_t az[1] = {10}, bz[1] = {0}, yz[1] = {128};
  b_input_p(&b, "a", U8, 2, ad, NULL);
  b_init_tensor(&b, "as", F32, 0, NULL, as, 1);
  b_init_tensor(&b, "az", U8, 0, NULL, az, 1);
  b_init_tensor(&b, "b", I8, 2, bd, QM_B, 12);
  b_init_tensor(&b, "bs", F32, 1, cd, QM_BS, 4);
  b_init_tensor(&b, "bz", I8, 0, NULL, bz, 1);
  b_init_tensor(&b, "ys", F32, 0, NULL, ys, 1);
  b_init_tensor(&b, "yz", U8, 0, NULL, yz, 1);
  static char *in[] = {"a", "as", "az", "b", "bs", "bz", "ys", "yz", NULL}, *out[] = {"y", NULL};
  b_node(&b, "QLinearMatMul", "/qm", in, out);
  b_output(&b, "y");
  size_t bytes = sizeof QM_Y;
  check_io(&b, 1, (const void *[]){QM_A}, 1, (const void *[]){QM_Y}, &bytes, 0);
}
END_TEST

/* QLinearConv: u8 x, i8 w with a scale per output channel, an i32 bias, i8 y */
START_TEST(qlinear_conv) {
  builder_t b;
  b_init(&b, 10);
  static int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, cd[1] = {3}, p[4] = {1, 1, 1, 1}, s[2] = {2, 2};
  static float xs[1] = {0.02f}, ys[1] = {0.05f};
  static int32_t xz[1] = {128}, wz[1] = {0}, yz[1] = {-5};
  b_input_p(&b, "x", U8, 4, xd, NULL);
  b_init_tensor(&b, "xs", F32, 0, NULL, xs, 1);
  b_init_tensor(&b, "xz", U8, 0, NULL, xz, 1);
  b_init_tensor(&b, "w", I8, 4, wd, QC_W, 54);
  b_init_tensor(&b, "ws", F32, 1, cd, QC_WS, 3);
  b_init_tensor(&b, "wz", I8, 0, NULL, wz, 1);
  b_init_tensor(&b, "ys", F32, 0, NULL, ys, 1);
  b_init_tensor(&b, "yz", I8, 0, NULL, yz, 1);
  b_init_tensor(&b, "bias", I32, 1, cd, QC_B, 3);
  static char *in[] = {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "QLinearConv", "/qc", in, out);
  b_attr_ints(&b, n, "pads", p, 4);
  b_attr_ints(&b, n, "strides", s, 2);
  b_output(&b, "y");
  size_t bytes = sizeof QC_Y;
  check_io(&b, 1, (const void *[]){QC_X}, 1, (const void *[]){QC_Y}, &bytes, 0);
}
END_TEST

/* A QDQ convolution as quantization tools write it: x quantized and back,
 * the i8 weight dequantized per output channel, Conv with a float bias, the
 * result quantized and back (its nearest rounding tie is 0.004 away: the
 * sums' order cannot flip a step) */
static void qdq_model(builder_t *b, bool sym) {
  b_init(b, 13);
  static int64_t xd[4] = {1, 2, 5, 5}, sd[4] = {-1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, cd[1] = {3}, p[4] = {1, 1, 1, 1};
  static const char *params[4] = {"N", NULL, NULL, NULL};
  static float xs[1] = {0.02f}, ys[1] = {0.05f};
  static int32_t xz[1] = {128}, yz[1] = {100};
  b_input_p(b, "x", F32, 4, sym ? sd : xd, sym ? params : NULL);
  b_init_tensor(b, "xs", F32, 0, NULL, xs, 1);
  b_init_tensor(b, "xz", U8, 0, NULL, xz, 1);
  b_init_tensor(b, "wq", I8, 4, wd, QC_W, 54);
  b_init_tensor(b, "ws", F32, 1, cd, QC_WS, 3);
  b_init_tensor(b, "bias", F32, 1, cd, QD_B, 3);
  b_init_tensor(b, "ys", F32, 0, NULL, ys, 1);
  b_init_tensor(b, "yz", U8, 0, NULL, yz, 1);
  static char *qx[] = {"x", "xs", "xz", NULL}, *xq[] = {"xq", NULL}, *dx[] = {"xq", "xs", "xz", NULL}, *xf[] = {"xf", NULL};
  static char *dw[] = {"wq", "ws", NULL}, *wf[] = {"wf", NULL}, *cv[] = {"xf", "wf", "bias", NULL}, *c[] = {"c", NULL};
  static char *qc[] = {"c", "ys", "yz", NULL}, *cq[] = {"cq", NULL}, *dc[] = {"cq", "ys", "yz", NULL}, *y[] = {"y", NULL};
  b_node(b, "QuantizeLinear", "/x/q", qx, xq);
  b_node(b, "DequantizeLinear", "/x/dq", dx, xf);
  b_attr_i(b, b_node(b, "DequantizeLinear", "/w/dq", dw, wf), "axis", 0);
  b_attr_ints(b, b_node(b, "Conv", "/conv", cv, c), "pads", p, 4);
  b_node(b, "QuantizeLinear", "/y/q", qc, cq);
  b_node(b, "DequantizeLinear", "/y/dq", dc, y);
  b_output(b, "y");
}

START_TEST(qdq_conv) {
  builder_t b;
  qdq_model(&b, false);
  size_t bytes = sizeof QD_Y;
  check_io(&b, 1, (const void *[]){QD_X}, 1, (const void *[]){QD_Y}, &bytes, 1e-6f);
}
END_TEST

/* the same with the batch a shape variable: one module, run at N = 3 (the
 * input three times over, the result too) */
START_TEST(qdq_conv_symbolic_batch) {
  builder_t b;
  qdq_model(&b, true);
  char msg[512];
  onnx_result_t r;
  ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "f32[N,3,5,5]"), "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  float x[150], y[225];
  for (int i = 0; i < 150; i++) x[i] = QD_X[i % 50];
  rill_type_t xt = T(RILL_F32, 4, 3, 2, 5, 5);
  rill_tensor_t **res;
  int nres = invoke_main(vm, 1, &xt, (const void *[]){x}, &res);
  ck_assert_int_eq(nres, 1);
  ck_assert_uint_eq(rill_tensor_nbytes(res[0]), sizeof y);
  ck_assert(rill_tensor_read(res[0], y, sizeof y) == NULL);
  for (int i = 0; i < 225; i++) ck_assert_msg(fabsf(y[i] - QD_Y[i % 75]) <= 1e-6f * (1 + fabsf(QD_Y[i % 75])), "at %d: %.9g, want %.9g", i, y[i], QD_Y[i % 75]);
  rill_results_free(vm, res, nres);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ---- qmatmul and qconv2d: the fused import against -O0's lowering ---- */
static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}

/* the model's program with and without the fusion: `op` in the first, not in the second */
static void check_programs(builder_t *b, const char *op) {
  char msg[512];
  onnx_result_t r;
  onnx_options_t o = {0};
  ck_assert_msg(import(b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, op), "no %s in:\n%s", op, r.vmasm);
  /* nothing of the float product is left: no f32 product, no dequantized operand */
  ck_assert_msg(!strstr(r.vmasm, " conv2d(") && !strstr(r.vmasm, " matmul("), "a float product left in:\n%s", r.vmasm);
  if (getenv("RILL_TEST_PRINT")) printf("%s\n", r.vmasm);
  onnx_result_free(&r);
  o.unfused_quant = true;
  ck_assert_msg(import(b, NULL, &o, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(!strstr(r.vmasm, "qmatmul") && !strstr(r.vmasm, "qconv2d"), "-O0 fused:\n%s", r.vmasm);
  onnx_result_free(&r);
}

/* Runs the model fused (-O1) and lowered (-O0) on the cpu device over
 * `runs` random inputs (input 0 of nx elements: i8/u8 values, or floats
 * on a grid of `step` when elem is F32); the results must be equal byte for
 * byte, or (tol_steps > 0, u8/i8 results) within tol_steps, equal in at
 * least 95% of the elements. The first run's fused result goes to first. */
static void compare_runs(builder_t *b, const char *op, int elem, size_t nx, float step, int tol_steps, void *first, size_t first_bytes);
static void fused_vs_lowered(builder_t *b, const char *op, int elem, size_t nx, float step, int tol_steps, void *first, size_t first_bytes) {
  check_programs(b, op);
  compare_runs(b, op, elem, nx, step, tol_steps, first, first_bytes);
}

/* the same for a program that keeps a float product (nx f32 inputs on a grid of 1/4) */
static void fused_vs_lowered_only(builder_t *b, size_t nx) { compare_runs(b, "mixed", F32, nx, 0.25f, 0, NULL, 0); }

static void compare_runs(builder_t *b, const char *op, int elem, size_t nx, float step, int tol_steps, void *first, size_t first_bytes) {
  onnx_options_t o0 = {0};
  o0.unfused_quant = true;
  rill_module_t *mf = load_model(b), *ml = load_model_with(b, &o0);
  rill_vm_t *vf, *vl, *vg = NULL;
  ck_assert(rill_vm_create(NULL, mf, "cpu", &vf) == NULL);
  ck_assert(rill_vm_create(NULL, ml, "cpu", &vl) == NULL);
  /* the fused program on cuda too, where a GPU is usable: equal to the cpu's byte for byte */
  const char *why;
  if (rill_device_usable("cuda", &why)) ck_assert(rill_vm_create(NULL, mf, "cuda", &vg) == NULL);
  rill_type_t t;
  ck_assert(rill_module_param_type(mf, "main", 0, &t, NULL));
  void *x = malloc(nx * 4);
  for (int run = 0; run < 4; run++) {
    for (size_t i = 0; i < nx; i++) {
      if (elem == F32) ((float *)x)[i] = step * (float)((int)(rnd() % 241) - 120);
      else ((uint8_t *)x)[i] = (uint8_t)(run == 0 && i < 4 ? (i & 1 ? 0 : 255) : rnd()); /* the extremes too */
    }
    rill_tensor_t **rf, **rl;
    int nf = invoke_main(vf, 1, &t, (const void *[]){x}, &rf), nl = invoke_main(vl, 1, &t, (const void *[]){x}, &rl);
    ck_assert_int_eq(nf, nl);
    if (vg) {
      rill_tensor_t **rg;
      int ng = invoke_main(vg, 1, &t, (const void *[]){x}, &rg);
      ck_assert_int_eq(ng, nf);
      for (int k = 0; k < ng; k++) {
        size_t n = rill_tensor_nbytes(rf[k]);
        uint8_t *gc = malloc(n), *gg = malloc(n);
        ck_assert(rill_tensor_read(rf[k], gc, n) == NULL && rill_tensor_read(rg[k], gg, n) == NULL);
        ck_assert_msg(!memcmp(gc, gg, n), "%s run %d result %d: cuda differs from cpu", op, run, k);
        free(gc);
        free(gg);
      }
      rill_results_free(vg, rg, ng);
    }
    for (int k = 0; k < nf; k++) {
      size_t n = rill_tensor_nbytes(rf[k]);
      ck_assert_uint_eq(n, rill_tensor_nbytes(rl[k]));
      ck_assert_int_eq(rill_tensor_type(rf[k])->dtype, rill_tensor_type(rl[k])->dtype);
      uint8_t *gf = malloc(n), *gl = malloc(n);
      ck_assert(rill_tensor_read(rf[k], gf, n) == NULL && rill_tensor_read(rl[k], gl, n) == NULL);
      if (run == 0 && k == 0 && first) {
        ck_assert_uint_eq(n, first_bytes);
        memcpy(first, gf, n);
      }
      size_t same = 0;
      rill_dtype_t d = rill_tensor_type(rf[k])->dtype;
      for (size_t i = 0; i < n; i++) {
        same += gf[i] == gl[i];
        if (!tol_steps) ck_assert_msg(gf[i] == gl[i], "%s run %d result %d: byte %zu is %u fused, %u lowered", op, run, k, i, gf[i], gl[i]);
        int a = d == RILL_I8 ? (int8_t)gf[i] : gf[i], c = d == RILL_I8 ? (int8_t)gl[i] : gl[i];
        ck_assert_msg(abs(a - c) <= tol_steps, "%s run %d: element %zu is %d fused, %d lowered", op, run, i, a, c);
      }
      ck_assert_msg(same * 100 >= n * 95, "%s: %zu of %zu equal", op, same, n);
      free(gf);
      free(gl);
    }
    rill_results_free(vf, rf, nf);
    rill_results_free(vl, rl, nl);
  }
  free(x);
  if (vg) rill_vm_destroy(vg);
  rill_vm_destroy(vf);
  rill_vm_destroy(vl);
  rill_module_release(mf);
  rill_module_release(ml);
}

/* MatMulInteger (u8 a batched, zero point per row; i8 b, one per column) and
 * ConvInteger (i8 x; u8 w with a zero point per output channel; 2-D with
 * pads, strides and dilations, and 1-D with two groups) */
START_TEST(fused_integer_ops) {
  static int64_t ad[3] = {2, 3, 5}, bd[2] = {5, 4}, rd[1] = {3}, cd[1] = {4};
  static int32_t B[20], AZ[3] = {0, 128, 255}, BZ[4] = {-128, 0, 5, 127};
  for (int i = 0; i < 20; i++) B[i] = (int)(rnd() % 256) - 128;
  builder_t b;
  b_init(&b, 10);
  b_input_p(&b, "a", U8, 3, ad, NULL);
  b_init_tensor(&b, "b", I8, 2, bd, B, 20);
  b_init_tensor(&b, "az", U8, 1, rd, AZ, 3);
  b_init_tensor(&b, "bz", I8, 1, cd, BZ, 4);
  static char *in[] = {"a", "b", "az", "bz", NULL}, *out[] = {"y", NULL};
  b_node(&b, "MatMulInteger", "/mm", in, out);
  b_output(&b, "y");
  fused_vs_lowered(&b, "qmatmul", U8, 30, 0, 0, NULL, 0);
  static int64_t xd[4] = {1, 3, 7, 6}, wd[4] = {4, 3, 3, 2}, p[4] = {1, 0, 2, 1}, s[2] = {2, 1}, dl[2] = {1, 2};
  static int32_t W[72], XZ[1] = {-3}, WZ[4] = {0, 255, 17, 128};
  for (int i = 0; i < 72; i++) W[i] = (int)(rnd() % 256);
  b_init(&b, 10);
  b_input_p(&b, "x", I8, 4, xd, NULL);
  b_init_tensor(&b, "w", U8, 4, wd, W, 72);
  b_init_tensor(&b, "xz", I8, 0, NULL, XZ, 1);
  b_init_tensor(&b, "wz", U8, 1, cd, WZ, 4);
  static char *cin[] = {"x", "w", "xz", "wz", NULL};
  Onnx__NodeProto *n = b_node(&b, "ConvInteger", "/ci", cin, out);
  b_attr_ints(&b, n, "pads", p, 4);
  b_attr_ints(&b, n, "strides", s, 2);
  b_attr_ints(&b, n, "dilations", dl, 2);
  b_output(&b, "y");
  fused_vs_lowered(&b, "qconv2d", I8, 126, 0, 0, NULL, 0);
  static int64_t x1[3] = {2, 4, 9}, w1[3] = {4, 2, 3}, p1[2] = {1, 1};
  b_init(&b, 10);
  b_input_p(&b, "x", I8, 3, x1, NULL);
  b_init_tensor(&b, "w", U8, 3, w1, W, 24);
  b_init_tensor(&b, "xz", I8, 0, NULL, XZ, 1);
  b_init_tensor(&b, "wz", U8, 1, cd, WZ, 4);
  n = b_node(&b, "ConvInteger", "/ci1", cin, out);
  b_attr_ints(&b, n, "pads", p1, 2);
  b_attr_i(&b, n, "group", 2);
  b_output(&b, "y");
  fused_vs_lowered(&b, "qconv2d", I8, 72, 0, 0, NULL, 0);
}
END_TEST

/* QLinearMatMul (i8 a batched with a scale and zero point per row, u8 b with
 * them per column, u8 y) and QLinearConv (u8 x, i8 w per output channel, a
 * bias, i8 y; groups of 2), with numpy's values for the first */
START_TEST(fused_qlinear_ops) {
  static int64_t ad[3] = {2, 4, 6}, bd[2] = {6, 3}, rd[1] = {4}, cd[1] = {3};
  static int32_t B[18], AZ[4] = {-128, 0, 3, 127}, BZ[3] = {0, 128, 255}, YZ[1] = {120};
  static float AS[4] = {0.05f, 0.1f, 0.013f, 0.2f}, BS[3] = {0.02f, 0.0075f, 0.1f}, YS[1] = {0.37f};
  for (int i = 0; i < 18; i++) B[i] = (int)(rnd() % 256);
  builder_t b;
  b_init(&b, 10);
  b_input_p(&b, "a", I8, 3, ad, NULL);
  b_init_tensor(&b, "as", F32, 1, rd, AS, 4);
  b_init_tensor(&b, "az", I8, 1, rd, AZ, 4);
  b_init_tensor(&b, "b", U8, 2, bd, B, 18);
  b_init_tensor(&b, "bs", F32, 1, cd, BS, 3);
  b_init_tensor(&b, "bz", U8, 1, cd, BZ, 3);
  b_init_tensor(&b, "ys", F32, 0, NULL, YS, 1);
  b_init_tensor(&b, "yz", U8, 0, NULL, YZ, 1);
  static char *in[] = {"a", "as", "az", "b", "bs", "bz", "ys", "yz", NULL}, *out[] = {"y", NULL};
  b_node(&b, "QLinearMatMul", "/qm", in, out);
  b_output(&b, "y");
  uint8_t got[24];
  uint64_t seed = rng;
  fused_vs_lowered(&b, "qmatmul", I8, 48, 0, 0, got, sizeof got);
  /* numpy: the same first input (the generator replayed), ONNX's definition */
  rng = seed;
  char script[4096], list[600];
  size_t o = 0;
  int8_t a0[48];
  for (int i = 0; i < 48; i++) a0[i] = (int8_t)(uint8_t)(i < 4 ? (i & 1 ? 0 : 255) : rnd());
  for (int i = 0; i < 48; i++) o += (size_t)snprintf(list + o, sizeof list - o, "%d,", a0[i]);
  char bl[200];
  size_t ob = 0;
  for (int i = 0; i < 18; i++) ob += (size_t)snprintf(bl + ob, sizeof bl - ob, "%d,", B[i]);
  snprintf(script, sizeof script,
           "a = np.array([%s], dtype=np.int64).reshape(2, 4, 6); b = np.array([%s], dtype=np.int64).reshape(6, 3)\n"
           "az = np.array([-128, 0, 3, 127]).reshape(4, 1); bz = np.array([0, 128, 255])\n"
           "s = (np.array([0.05, 0.1, 0.013, 0.2], dtype=np.float32).reshape(4, 1) * np.array([0.02, 0.0075, 0.1], dtype=np.float32)) / np.float32(0.37)\n"
           "acc = np.matmul(a - az, b - bz)\n"
           "y = np.clip(np.rint(acc.astype(np.float64) * s.astype(np.float64) + 120), 0, 255)\n"
           "print(*y.ravel().astype(np.int64).tolist())",
           list, bl);
  double want[64];
  size_t nw;
  if (numpy_results(script, want, 64, &nw)) {
    ck_assert_uint_eq(nw, 24);
    for (int i = 0; i < 24; i++) ck_assert_msg(got[i] == (uint8_t)want[i], "qmatmul at %d: %u, numpy %g", i, got[i], want[i]);
  } else {
    printf("fused_qlinear_ops: numpy not usable, its check skipped\n");
  }
  static int64_t xd[4] = {2, 4, 5, 5}, wd[4] = {6, 2, 3, 3}, c6[1] = {6}, p[4] = {1, 1, 1, 1};
  static int32_t W[108], XZ[1] = {131}, WZ[1] = {0}, QB[6] = {1000, -2000, 0, 77, -5, 123456}, QY[1] = {-7};
  static float XS[1] = {0.02f}, WS[6] = {0.003f, 0.001f, 0.002f, 0.004f, 0.0005f, 0.0025f}, QYS[1] = {0.05f};
  for (int i = 0; i < 108; i++) W[i] = (int)(rnd() % 256) - 128;
  b_init(&b, 10);
  b_input_p(&b, "x", U8, 4, xd, NULL);
  b_init_tensor(&b, "xs", F32, 0, NULL, XS, 1);
  b_init_tensor(&b, "xz", U8, 0, NULL, XZ, 1);
  b_init_tensor(&b, "w", I8, 4, wd, W, 108);
  b_init_tensor(&b, "ws", F32, 1, c6, WS, 6);
  b_init_tensor(&b, "wz", I8, 0, NULL, WZ, 1);
  b_init_tensor(&b, "ys", F32, 0, NULL, QYS, 1);
  b_init_tensor(&b, "yz", I8, 0, NULL, QY, 1);
  b_init_tensor(&b, "bias", I32, 1, c6, QB, 6);
  static char *cin[] = {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias", NULL};
  Onnx__NodeProto *n = b_node(&b, "QLinearConv", "/qc", cin, out);
  b_attr_ints(&b, n, "pads", p, 4);
  b_attr_i(&b, n, "group", 2);
  b_output(&b, "y");
  fused_vs_lowered(&b, "qconv2d", U8, 200, 0, 0, NULL, 0);
}
END_TEST

/* A QDQ model: x (f32 input) quantized and dequantized per tensor; the
 * weight i8 dequantized per output channel (conv, axis 0) or per column
 * (matmul, axis 1) or per tensor; Conv with a bias quantized to i32 at
 * x's scale times w's, or MatMul; then (q) quantized, and dequantized. */
static bool qdq_relu; /* a Relu between the product and its QuantizeLinear (or the end) */
static void qdq_product_sym(builder_t *b, bool conv, bool per_axis, bool q, bool pow2, bool sym);
static void qdq_product(builder_t *b, bool conv, bool per_axis, bool q, bool pow2) { qdq_product_sym(b, conv, per_axis, q, pow2, false); }

/* the same, x's first dim (the batch, or the matmul's rows) the shape variable N where sym */
static void qdq_product_sym(builder_t *b, bool conv, bool per_axis, bool q, bool pow2, bool sym) {
  static const char *params[4] = {"N", NULL, NULL, NULL};
  static int64_t xd[4] = {2, 3, 6, 6}, wd[4] = {4, 3, 3, 3}, md[2] = {5, 7}, mw[2] = {7, 6}, c4[1] = {4}, c6[1] = {6}, p[4] = {1, 0, 1, 2};
  static int32_t W[108], XZ[1] = {7}, BI[4] = {-300, 0, 4100, 17}, YZ[1] = {-10};
  static float XS[1], WS[6], BS[6], YS[1];
  for (int i = 0; i < 108; i++) W[i] = (int)(rnd() % 255) - 127;
  XS[0] = pow2 ? 0.125f : 0.0173f;
  YS[0] = pow2 ? 0.5f : 0.311f;
  int nw = conv ? 4 : 6;
  for (int i = 0; i < nw; i++) {
    WS[i] = pow2 ? (float)ldexp(1, -(i % 3) - 3) : 0.0041f * (float)(i + 1);
    BS[i] = (float)((double)XS[0] * (double)WS[per_axis ? i : 0]);
  }
  b_init(b, 13);
  static int64_t xs_d[4] = {-1, 3, 6, 6}, ms_d[2] = {-1, 7};
  b_input_p(b, "x", F32, conv ? 4 : 2, sym ? (conv ? xs_d : ms_d) : conv ? xd : md, sym ? params : NULL);
  b_init_tensor(b, "xs", F32, 0, NULL, XS, 1);
  b_init_tensor(b, "xz", I8, 0, NULL, XZ, 1);
  b_init_tensor(b, "wq", I8, conv ? 4 : 2, conv ? wd : mw, W, conv ? 108 : 42);
  b_init_tensor(b, "ws", F32, per_axis ? 1 : 0, conv ? c4 : c6, WS, per_axis ? (size_t)nw : 1);
  b_init_tensor(b, "bq", I32, 1, c4, BI, 4);
  b_init_tensor(b, "bs", F32, per_axis ? 1 : 0, c4, BS, per_axis ? 4 : 1);
  b_init_tensor(b, "ys", F32, 0, NULL, YS, 1);
  b_init_tensor(b, "yz", I8, 0, NULL, YZ, 1);
  static char *qx[] = {"x", "xs", "xz", NULL}, *xq[] = {"xq", NULL}, *dx[] = {"xq", "xs", "xz", NULL}, *xf[] = {"xf", NULL};
  static char *dw[] = {"wq", "ws", NULL}, *wf[] = {"wf", NULL}, *db[] = {"bq", "bs", NULL}, *bf[] = {"bf", NULL};
  static char *cv[] = {"xf", "wf", "bf", NULL}, *mm[] = {"xf", "wf", NULL}, *c[] = {"c", NULL};
  static char *qc[] = {"c", "ys", "yz", NULL}, *cq[] = {"cq", NULL}, *dc[] = {"cq", "ys", "yz", NULL}, *y[] = {"y", NULL};
  b_node(b, "QuantizeLinear", "/x/q", qx, xq);
  b_node(b, "DequantizeLinear", "/x/dq", dx, xf);
  Onnx__NodeProto *n = b_node(b, "DequantizeLinear", "/w/dq", dw, wf);
  if (per_axis) b_attr_i(b, n, "axis", conv ? 0 : 1);
  if (conv) {
    b_attr_i(b, b_node(b, "DequantizeLinear", "/b/dq", db, bf), "axis", 0);
    b_attr_ints(b, b_node(b, "Conv", "/conv", cv, c), "pads", p, 4);
  } else {
    b_node(b, "MatMul", "/mm", mm, c);
  }
  static char *rin[] = {"c", NULL}, *rout[] = {"cr", NULL}, *qcr[] = {"cr", "ys", "yz", NULL};
  if (qdq_relu) b_node(b, "Relu", "/relu", rin, rout);
  if (q) {
    b_node(b, "QuantizeLinear", "/y/q", qdq_relu ? qcr : qc, cq);
    b_node(b, "DequantizeLinear", "/y/dq", dc, y);
    b_output(b, "y");
  } else {
    b_output(b, qdq_relu ? "cr" : "c");
  }
}

/* The QDQ patterns: with scales that are powers of two the float pattern is
 * exact, and the fused op equals it bit for bit (and numpy); with others it
 * is within one step of it */
START_TEST(fused_qdq) {
  builder_t b;
  for (int relu = 0; relu < 2; relu++)
    for (int conv = 0; conv < 2; conv++)
      for (int per_axis = 0; per_axis < 2; per_axis++)
        for (int q = 0; q < 2; q++) {
          qdq_relu = relu;
          qdq_product(&b, conv, per_axis, q, true);
          fused_vs_lowered(&b, conv ? "qconv2d" : "qmatmul", F32, conv ? 216 : 35, 0.125f / 3, 0, NULL, 0);
          if (relu) {
            char msg[512];
            onnx_result_t r;
            ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
            ck_assert_msg(strstr(r.vmasm, "activation=\"relu\"") && !strstr(r.vmasm, " relu("), "%s", r.vmasm);
            onnx_result_free(&r);
          }
        }
  qdq_relu = false;
  /* scales of no special kind: within one quantization step of y (0.311; the
   * float pattern rounds each product and partial sum, the op only once),
   * and equal nearly everywhere */
  for (int conv = 0; conv < 2; conv++) {
    qdq_product(&b, conv, true, true, false);
    check_programs(&b, conv ? "qconv2d" : "qmatmul");
    onnx_options_t o0 = {0};
    o0.unfused_quant = true;
    rill_module_t *mf = load_model(&b), *ml = load_model_with(&b, &o0);
    rill_vm_t *vf, *vl;
    ck_assert(rill_vm_create(NULL, mf, "cpu", &vf) == NULL && rill_vm_create(NULL, ml, "cpu", &vl) == NULL);
    rill_type_t t;
    ck_assert(rill_module_param_type(mf, "main", 0, &t, NULL));
    size_t nx = conv ? 216 : 35, same = 0, total = 0;
    float x[216];
    for (int run = 0; run < 4; run++) {
      for (size_t i = 0; i < nx; i++) x[i] = 0.0173f * (float)((int)(rnd() % 201) - 100) + 0.001f * (float)(rnd() % 7);
      rill_tensor_t **rf, **rl;
      ck_assert_int_eq(invoke_main(vf, 1, &t, (const void *[]){x}, &rf), 1);
      ck_assert_int_eq(invoke_main(vl, 1, &t, (const void *[]){x}, &rl), 1);
      size_t n = rill_tensor_nbytes(rf[0]) / 4;
      float *gf = malloc(n * 4), *gl = malloc(n * 4);
      ck_assert(rill_tensor_read(rf[0], gf, n * 4) == NULL && rill_tensor_read(rl[0], gl, n * 4) == NULL);
      for (size_t i = 0; i < n; i++) {
        ck_assert_msg(fabsf(gf[i] - gl[i]) <= 0.3111f, "%s at %zu: %g fused, %g lowered", conv ? "conv" : "matmul", i, (double)gf[i], (double)gl[i]);
        same += gf[i] == gl[i];
      }
      total += n;
      free(gf);
      free(gl);
      rill_results_free(vf, rf, 1);
      rill_results_free(vl, rl, 1);
    }
    ck_assert_msg(same * 100 >= total * 95, "%zu of %zu equal", same, total);
    rill_vm_destroy(vf);
    rill_vm_destroy(vl);
    rill_module_release(mf);
    rill_module_release(ml);
  }
}
END_TEST

/* A QDQ convolution over a batch, and a QDQ matmul over rows, of a shape
 * variable: one fused op, run at two sizes, equal to -O0's lowering */
START_TEST(fused_qdq_symbolic) {
  builder_t b;
  for (int conv = 0; conv < 2; conv++) {
    qdq_product_sym(&b, conv, true, true, true, true);
    char msg[512];
    onnx_result_t r;
    ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
    ck_assert_msg(strstr(r.vmasm, conv ? "qconv2d(" : "qmatmul(") && strstr(r.vmasm, conv ? "f32[N,4,6,6]" : "f32[N,6]"), "%s", r.vmasm);
    onnx_result_free(&r);
    onnx_options_t o0 = {0};
    o0.unfused_quant = true;
    rill_module_t *mf = load_model(&b), *ml = load_model_with(&b, &o0);
    rill_vm_t *vf, *vl;
    ck_assert(rill_vm_create(NULL, mf, "cpu", &vf) == NULL && rill_vm_create(NULL, ml, "cpu", &vl) == NULL);
    for (int64_t nb = 1; nb <= 3; nb += 2) {
      rill_type_t t = conv ? T(RILL_F32, 4, nb, 3, 6, 6) : T(RILL_F32, 2, nb, 7);
      size_t nx = (size_t)nb * (conv ? 108 : 7);
      float x[324];
      for (size_t i = 0; i < nx; i++) x[i] = 0.125f / 3 * (float)((int)(rnd() % 241) - 120);
      rill_tensor_t **rf, **rl;
      ck_assert_int_eq(invoke_main(vf, 1, &t, (const void *[]){x}, &rf), 1);
      ck_assert_int_eq(invoke_main(vl, 1, &t, (const void *[]){x}, &rl), 1);
      size_t n = rill_tensor_nbytes(rf[0]);
      ck_assert_uint_eq(n, rill_tensor_nbytes(rl[0]));
      ck_assert_uint_eq(n, (size_t)nb * (conv ? 144 : 6) * 4);
      uint8_t *gf = malloc(n), *gl = malloc(n);
      ck_assert(rill_tensor_read(rf[0], gf, n) == NULL && rill_tensor_read(rl[0], gl, n) == NULL);
      ck_assert_msg(!memcmp(gf, gl, n), "%s at N=%lld: fused and lowered differ", conv ? "conv" : "matmul", (long long)nb);
      free(gf);
      free(gl);
      rill_results_free(vf, rf, 1);
      rill_results_free(vl, rl, 1);
    }
    rill_vm_destroy(vf);
    rill_vm_destroy(vl);
    rill_module_release(mf);
    rill_module_release(ml);
  }
}
END_TEST

/* One dequantized x and w read by two convolutions: the first fuses (a
 * QuantizeLinear after it), the second (a float bias) does not, so the
 * statements held back for the first are written for the second */
START_TEST(fused_and_not) {
  builder_t b;
  b_init(&b, 13);
  static int64_t xd[4] = {1, 4, 5, 5}, wd[4] = {4, 4, 3, 3}, c4[1] = {4};
  static int32_t W[144], XZ[1] = {3}, YZ[1] = {0};
  static float XS[1] = {0.25f}, WS[4] = {0.125f, 0.0625f, 0.25f, 0.5f}, YS[1] = {0.5f}, FB[4] = {0.5f, -1, 2, 0};
  for (int i = 0; i < 144; i++) W[i] = (int)(rnd() % 255) - 127;
  b_input_p(&b, "x", F32, 4, xd, NULL);
  b_init_tensor(&b, "xs", F32, 0, NULL, XS, 1);
  b_init_tensor(&b, "xz", I8, 0, NULL, XZ, 1);
  b_init_tensor(&b, "wq", I8, 4, wd, W, 144);
  b_init_tensor(&b, "ws", F32, 1, c4, WS, 4);
  b_init_tensor(&b, "fb", F32, 1, c4, FB, 4);
  b_init_tensor(&b, "ys", F32, 0, NULL, YS, 1);
  b_init_tensor(&b, "yz", I8, 0, NULL, YZ, 1);
  static char *qx[] = {"x", "xs", "xz", NULL}, *xq[] = {"xq", NULL}, *dx[] = {"xq", "xs", "xz", NULL}, *xf[] = {"xf", NULL};
  static char *dw[] = {"wq", "ws", NULL}, *wf[] = {"wf", NULL}, *c1[] = {"xf", "wf", NULL}, *c1o[] = {"c1", NULL};
  static char *c2[] = {"xf", "wf", "fb", NULL}, *c2o[] = {"c2", NULL}, *q1[] = {"c1", "ys", "yz", NULL}, *q1o[] = {"y1", NULL};
  b_node(&b, "QuantizeLinear", "/x/q", qx, xq);
  b_node(&b, "DequantizeLinear", "/x/dq", dx, xf);
  b_attr_i(&b, b_node(&b, "DequantizeLinear", "/w/dq", dw, wf), "axis", 0);
  b_node(&b, "Conv", "/c1", c1, c1o);
  b_node(&b, "QuantizeLinear", "/c1/q", q1, q1o);
  b_node(&b, "Conv", "/c2", c2, c2o);
  b_output(&b, "y1");
  b_output(&b, "c2");
  char msg[512];
  onnx_result_t r;
  ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "qconv2d(") && strstr(r.vmasm, " conv2d("), "%s", r.vmasm);
  onnx_result_free(&r);
  fused_vs_lowered_only(&b, 100);
}
END_TEST

/* numpy's QDQ convolution (per-channel weights, an i32 bias, quantized result) against the fused op */
START_TEST(fused_qdq_numpy) {
  builder_t b;
  uint64_t seed = rng;
  qdq_product(&b, true, true, true, true);
  rng = seed;
  int32_t w[108];
  for (int i = 0; i < 108; i++) w[i] = (int)(rnd() % 255) - 127;
  rill_module_t *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  float x[216];
  char xl[4096], wl[1024], script[8192];
  size_t o = 0, ow = 0;
  for (int i = 0; i < 216; i++) {
    x[i] = 0.0625f * (float)((int)(rnd() % 301) - 150);
    o += (size_t)snprintf(xl + o, sizeof xl - o, "%g,", (double)x[i]);
  }
  for (int i = 0; i < 108; i++) ow += (size_t)snprintf(wl + ow, sizeof wl - ow, "%d,", w[i]);
  rill_type_t t = T(RILL_F32, 4, 2, 3, 6, 6);
  rill_tensor_t **res;
  ck_assert_int_eq(invoke_main(vm, 1, &t, (const void *[]){x}, &res), 1);
  float y[2 * 4 * 6 * 6];
  ck_assert_uint_eq(rill_tensor_nbytes(res[0]), sizeof y);
  ck_assert(rill_tensor_read(res[0], y, sizeof y) == NULL);
  snprintf(script, sizeof script,
           "x = np.array([%s], dtype=np.float64).reshape(2, 3, 6, 6); w = np.array([%s], dtype=np.int64).reshape(4, 3, 3, 3)\n"
           "xq = np.clip(np.rint(x / 0.125) + 7, -128, 127).astype(np.int64) - 7\n"
           "xp = np.pad(xq, ((0, 0), (0, 0), (1, 1), (0, 2)))\n"
           "acc = np.zeros((2, 4, 6, 6), dtype=np.int64)\n"
           "for i in range(6):\n"
           "  for j in range(6): acc[:, :, i, j] = np.einsum(\"nchw,ochw->no\", xp[:, :, i:i + 3, j:j + 3], w)\n"
           "acc += np.array([-300, 0, 4100, 17]).reshape(1, 4, 1, 1)\n"
           "ws = np.array([2.0 ** -(k %% 3 + 3) for k in range(4)]).reshape(1, 4, 1, 1)\n"
           "yq = np.clip(np.rint(acc * 0.125 * ws / 0.5) - 10, -128, 127)\n"
           "print(*((yq + 10) * 0.5).ravel().tolist())",
           xl, wl);
  double want[288];
  size_t nw;
  if (numpy_results(script, want, 288, &nw)) {
    ck_assert_uint_eq(nw, 288);
    for (int i = 0; i < 288; i++) ck_assert_msg(y[i] == (float)want[i], "at %d: %g, numpy %g", i, (double)y[i], want[i]);
  } else {
    printf("fused_qdq_numpy: numpy not usable, skipped\n");
  }
  rill_results_free(vm, res, 1);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* bad inputs: a message naming the node, its op type and opset, and what is wrong */
static void refused(builder_t *b, rill_code_t code, const char *want1, const char *want2) {
  char msg[512];
  onnx_result_t r;
  ck_assert_int_eq(import(b, NULL, NULL, &r, msg, sizeof msg), code);
  ck_assert_msg(strstr(msg, want1) && strstr(msg, want2), "%s", msg);
}

START_TEST(bad_inputs) {
  static int64_t xd[2] = {2, 3}, s2[1] = {2}, wd[4] = {1, 1, 1, 1};
  static float sc[2] = {0.5f, 0.25f};
  static int32_t z16[1] = {3};
  static char *in[] = {"x", "s", NULL}, *inz[] = {"x", "s", "z", NULL}, *out[] = {"y", NULL};
  builder_t b;
  /* a scale of 2 values along axis 1 of 3 */
  b_init(&b, 13);
  b_input_p(&b, "x", F32, 2, xd, NULL);
  b_init_tensor(&b, "s", F32, 1, s2, sc, 2);
  b_node(&b, "QuantizeLinear", "/bad/q", in, out);
  b_output(&b, "y");
  refused(&b, RILL_MALFORMED, "node '/bad/q' (QuantizeLinear, opset 13)", "y_scale of shape f32[2] does not fit input f32[2,3]");
  /* int16 asked for: named */
  b_init(&b, 21);
  b_input_p(&b, "x", F32, 2, xd, NULL);
  b_init_tensor(&b, "s", F32, 0, NULL, sc, 1);
  b_attr_i(&b, b_node(&b, "QuantizeLinear", "/q16", in, out), "output_dtype", I16);
  b_output(&b, "y");
  refused(&b, RILL_UNIMPLEMENTED, "node '/q16' (QuantizeLinear, opset 21)", "output_dtype INT16 (quantized values are i8 or u8)");
  /* float8 and int4 by name */
  b_init(&b, 21);
  b_input_p(&b, "x", F32, 2, xd, NULL);
  b_init_tensor(&b, "s", F32, 0, NULL, sc, 1);
  b_attr_i(&b, b_node(&b, "QuantizeLinear", "/q4", in, out), "output_dtype", 22);
  b_output(&b, "y");
  refused(&b, RILL_UNIMPLEMENTED, "node '/q4'", "output_dtype INT4");
  /* a zero point of int16 (a dtype of the language, not of quantized values): refused naming the node and the dtype */
  b_init(&b, 21);
  b_input_p(&b, "x", F32, 2, xd, NULL);
  b_init_tensor(&b, "s", F32, 0, NULL, sc, 1);
  b_init_tensor(&b, "z", I16, 0, NULL, z16, 1);
  b_node(&b, "QuantizeLinear", "/qz", inz, out);
  b_output(&b, "y");
  refused(&b, RILL_UNIMPLEMENTED, "node '/qz' (QuantizeLinear, opset 21)", "y_zero_point of dtype i16 (quantized values are i8 or u8)");
  /* a zero point of i32 */
  b_init(&b, 13);
  b_input_p(&b, "x", F32, 2, xd, NULL);
  b_init_tensor(&b, "s", F32, 0, NULL, sc, 1);
  b_init_tensor(&b, "z", I32, 0, NULL, z16, 1);
  b_node(&b, "QuantizeLinear", "/qi", inz, out);
  b_output(&b, "y");
  refused(&b, RILL_UNIMPLEMENTED, "node '/qi' (QuantizeLinear, opset 13)", "y_zero_point of dtype i32 (quantized values are i8 or u8)");
  /* an integer scale */
  b_init(&b, 13);
  b_input_p(&b, "x", U8, 2, xd, NULL);
  b_init_tensor(&b, "s", I32, 0, NULL, z16, 1);
  b_node(&b, "DequantizeLinear", "/dqs", in, out);
  b_output(&b, "y");
  refused(&b, RILL_MALFORMED, "node '/dqs' (DequantizeLinear, opset 13)", "x_scale of dtype i32 (a scale is a float)");
  /* ConvInteger of floats */
  static char *cin[] = {"x", "w", NULL};
  static float one[1] = {1};
  static int64_t cxd[4] = {1, 1, 2, 2};
  b_init(&b, 10);
  b_input_p(&b, "x", F32, 4, cxd, NULL);
  b_init_tensor(&b, "w", F32, 4, wd, one, 1);
  b_node(&b, "ConvInteger", "/ci", cin, out);
  b_output(&b, "y");
  refused(&b, RILL_UNIMPLEMENTED, "node '/ci' (ConvInteger, opset 10)", "x of dtype f32 (quantized values are i8 or u8)");
  /* QLinearConv with a w_scale of the wrong length */
  static int64_t qxd[4] = {1, 1, 2, 2};
  static int32_t zero[1] = {0}, w1[1] = {1};
  b_init(&b, 10);
  b_input_p(&b, "x", U8, 4, qxd, NULL);
  b_init_tensor(&b, "xs", F32, 0, NULL, sc, 1);
  b_init_tensor(&b, "xz", U8, 0, NULL, zero, 1);
  b_init_tensor(&b, "w", I8, 4, wd, w1, 1);
  b_init_tensor(&b, "ws", F32, 1, s2, sc, 2);
  b_init_tensor(&b, "wz", I8, 0, NULL, zero, 1);
  b_init_tensor(&b, "ys", F32, 0, NULL, sc, 1);
  b_init_tensor(&b, "yz", U8, 0, NULL, zero, 1);
  static char *qin[] = {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", NULL};
  b_node(&b, "QLinearConv", "/qc", qin, out);
  b_output(&b, "y");
  refused(&b, RILL_MALFORMED, "node '/qc' (QLinearConv, opset 10)", "w_scale of shape f32[2] does not fit weight i8[1,1,1,1]");
}
END_TEST

/* every quantized op in one model, imported and run, then damaged: truncated
 * at every length and bits flipped (no crash, leak or hang) */
START_TEST(damaged_models) {
  builder_t b;
  b_init(&b, 13);
  static int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, cd[1] = {3}, md[2] = {5, 4};
  static float xs[1] = {0.02f};
  static int32_t xz[1] = {128}, wz[1] = {0};
  b_input_p(&b, "x", F32, 4, xd, NULL);
  b_init_tensor(&b, "xs", F32, 0, NULL, xs, 1);
  b_init_tensor(&b, "xz", U8, 0, NULL, xz, 1);
  b_init_tensor(&b, "w", I8, 4, wd, QC_W, 54);
  b_init_tensor(&b, "ws", F32, 1, cd, QC_WS, 3);
  b_init_tensor(&b, "wz", I8, 0, NULL, wz, 1);
  b_init_tensor(&b, "m", I8, 2, md, CI_W, 20);
  static char *qx[] = {"x", "xs", "xz", NULL}, *xq[] = {"xq", NULL}, *dq[] = {"xq", "xs", "xz", NULL}, *xf[] = {"xf", NULL};
  static char *dy[] = {"x", NULL}, *dyo[] = {"dq", "dqs", "dqz", NULL}, *ci[] = {"xq", "w", "xz", "wz", NULL}, *cio[] = {"ci", NULL};
  static char *ql[] = {"xq", "xs", "xz", "w", "ws", "wz", "xs", "xz", NULL}, *qlo[] = {"qc", NULL}, *mi[] = {"xq", "m", NULL}, *mio[] = {"mi", NULL};
  static char *qm[] = {"xq", "xs", "xz", "m", "xs", "wz", "xs", "xz", NULL}, *qmo[] = {"qm", NULL};
  b_node(&b, "QuantizeLinear", "/q", qx, xq);
  b_node(&b, "DequantizeLinear", "/dq", dq, xf);
  b_node(&b, "DynamicQuantizeLinear", "/dyn", dy, dyo);
  b_node(&b, "ConvInteger", "/ci", ci, cio);
  b_node(&b, "QLinearConv", "/qc", ql, qlo);
  b_node(&b, "MatMulInteger", "/mi", mi, mio);
  b_node(&b, "QLinearMatMul", "/qm", qm, qmo);
  /* the QDQ patterns: a convolution with per-channel weights ending quantized, a matmul ending in float */
  static char *dw[] = {"w", "ws", NULL}, *wf[] = {"wf", NULL}, *cv[] = {"xf", "wf", NULL}, *cvo[] = {"cv", NULL};
  static char *qc[] = {"cv", "xs", "xz", NULL}, *qco[] = {"cvq", NULL}, *dm[] = {"m", "xs", NULL}, *mf[] = {"mf", NULL};
  static char *mm[] = {"xf", "mf", NULL}, *mmo[] = {"mm", NULL};
  b_attr_i(&b, b_node(&b, "DequantizeLinear", "/w/dq", dw, wf), "axis", 0);
  b_node(&b, "Conv", "/conv", cv, cvo);
  b_node(&b, "QuantizeLinear", "/conv/q", qc, qco);
  b_node(&b, "DequantizeLinear", "/m/dq", dm, mf);
  b_node(&b, "MatMul", "/mm", mm, mmo);
  const char *outs[] = {"xf", "dq", "dqs", "dqz", "ci", "qc", "mi", "qm", "cvq", "mm"};
  for (size_t i = 0; i < sizeof outs / sizeof *outs; i++) b_output(&b, outs[i]);
  check_programs(&b, "qconv2d");
  rill_module_t *m = load_model(&b);
  rill_module_release(m);
  damage(&b, 1500);
}
END_TEST

int main(void) {
  Suite *s = suite_create("onnx_quant");
  TCase *tc = tcase_create("onnx_quant");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, quantize_dequantize);
  tcase_add_test(tc, quantize_opset21);
  tcase_add_test(tc, dynamic_quantize);
  tcase_add_test(tc, matmul_integer);
  tcase_add_test(tc, conv_integer);
  tcase_add_test(tc, qlinear_matmul);
  tcase_add_test(tc, qlinear_conv);
  tcase_add_test(tc, qdq_conv);
  tcase_add_test(tc, qdq_conv_symbolic_batch);
  tcase_add_test(tc, fused_integer_ops);
  tcase_add_test(tc, fused_qlinear_ops);
  tcase_add_test(tc, fused_qdq);
  tcase_add_test(tc, fused_qdq_numpy);
  tcase_add_test(tc, fused_qdq_symbolic);
  tcase_add_test(tc, fused_and_not);
  tcase_add_test(tc, bad_inputs);
  tcase_add_test(tc, damaged_models);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
