/* test_index.c: the CPU references of the indexing and sampling ops added
 * for ONNX (scatter_nd, topk, grid_sample, roi_align) and of the
 * reduction `prod` and the elementwise `fmod`: values worked by hand, and
 * grid_sample's and roi_align's against values numpy computed (generated
 * once by a short independent numpy program following ONNX's definitions;
 * every mode, padding and coordinate mode), in every dtype the ops take;
 * then their attribute, shape and run-time errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "../kernels/cuda/nms_common.h"

/* grid_sample: mode, padding, align_corners -> values (numpy) */
static const double GS_X[12] = {-1.25, -0.75, -0.25, 0.25, 0.75, 1.25, 4.0, 2.25, 2.75, 3.25, 3.75, 4.25};
static const double GS_G[12] = {-1.2, -0.9, 0.3, 0.1, 0.95, 1.3, -0.25, 0.6, 1.0, -1.0, 0.0, 0.0};
static const double GS_WANT[3][3][2][6] = {
 {
  {{0.0, 4.0, 0.0, 3.25, 0.0, 4.0}, {-1.25, 4.0, 4.25, 3.25, 0.25, 4.0}},
  {{-1.25, 4.0, 4.25, 3.25, 0.25, 4.0}, {-1.25, 4.0, 4.25, 3.25, 0.25, 4.0}},
  {{-1.25, 4.0, 4.25, 3.25, 0.25, 4.0}, {-1.25, 4.0, 4.25, 3.25, 0.25, 4.0}},
 },
 {
  {{-0.08125000000000006, 3.82125, 0.1275000000000007, 3.0500000000000007, 0.0625, 2.625}, {-0.7350000000000001, 3.8487500000000003, 2.948750000000001, 2.6250000000000004, 0.25, 2.625}},
  {{-1.25, 3.82125, 4.25, 3.0500000000000007, 0.25, 2.625}, {-1.05, 3.8487500000000003, 4.2125, 2.6250000000000004, 0.25, 2.625}},
  {{-1.25, 3.82125, 4.25, 3.0500000000000007, 0.25, 2.625}, {-0.9, 3.8487500000000003, 3.663125000000001, 2.6250000000000004, 0.25, 2.625}},
 },
 {
  {{-0.08881386718750127, 4.412537648437499, 0.10698778124999848, 3.2969375000000003, 0.011962890625, 2.8359375}, {-0.9059642812499973, 4.215028396484375, 3.4066095495605504, 3.1797348632812508, 0.25, 2.8359375}},
  {{-1.471812500000003, 4.339304736328128, 4.304, 3.0995000000000017, 0.129150390625, 2.8359375}, {-1.0994999999999953, 4.189956787109381, 4.221822265625003, 2.819770019531255, 0.25, 2.8359375}},
  {{-1.6250000000000013, 4.339304736328128, 4.425678124999998, 3.0995000000000017, 0.0478515625, 2.8359375}, {-1.1632267499999966, 4.188352343750006, 4.010677906250004, 3.007886718750003, 0.25, 2.8359375}},
 },
};
static const double RA_X[120] = {-0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, -0.5};
static const double RA_ROIS[12] = {0.5, 1.0, 4.2, 3.7, -1.0, 0.0, 2.0, 6.5, 2.0, 2.0, 2.4, 2.2};
/* mode (avg, max) x half_pixel (false, true): [3, 2, 2, 3], sampling_ratio 0 (adaptive) then 2, scale 0.9 */
static const double RA_WANT[2][2][2][36] = {
 {{{0.37437499999999996, 0.651875, 0.71282890625, 0.07062499999999997, 0.34812499999999996, 0.6256250000000001, 0.75263515625, 0.18573281250000012, -0.29731171875000006, 0.5706249999999999, 0.7483134765625001, 0.32424941406249985, 0.5854166666666667, 0.4288541666666667, 0.11572916666666672, 0.21562499999999996, 0.29062499999999997, 0.440625, -0.11041666666666645, -0.11276041666666659, -0.02812500000000003, 0.5489583333333333, 0.4697395833333335, 0.14286458333333343, 0.47916666666666674, 0.5624999999999999, 0.6458333333333334, 0.35416666666666674, 0.4375, 0.5208333333333334, 0.9791666666666669, 0.5637500000000001, 0.09291666666666655, 0.8541666666666667, 0.7012499999999999, 0.5220833333333332}, {0.37437499999999996, 0.651875, 0.71282890625, 0.07062499999999997, 0.34812499999999996, 0.6256250000000001, 0.75263515625, 0.18573281250000012, -0.29731171875000006, 0.5706249999999999, 0.7483134765625001, 0.32424941406249985, 0.6492187500000001, 0.4737890625, 0.09996093749999994, 0.16796874999999994, 0.22421874999999997, 0.33671874999999996, -0.19609374999999996, -0.15988281249999997, -0.028124999999999983, 0.41796874999999994, 0.3388671875000001, 0.0849609375000002, 0.47916666666666663, 0.5625, 0.6458333333333335, 0.35416666666666663, 0.4375000000000001, 0.5208333333333335, 0.879088541666667, 0.5374999999999999, 0.11041666666666636, 0.8344791666666667, 0.7012499999999999, 0.522083333333333}}, {{0.374375, 0.651875, 0.7402423828124998, 0.07062499999999997, 0.348125, 0.6255361328125001, 0.74346953125, 0.14331718750000005, -0.24539003906249993, 0.5706249999999999, 0.8044023437500001, 0.17211152343749997, 0.403125, 0.403125, 0.10739583333333347, 0.3499999999999999, 0.3499999999999999, 0.5625, -0.2416666666666667, -0.2416666666666667, -0.02916666666666669, 0.7989583333333335, 0.7989583333333335, 0.5032291666666667, 0.5037499999999999, 0.53375, 0.56375, 0.48125, 0.5112500000000001, 0.54125, 0.5911, 0.48355000000000004, 0.37600000000000006, 0.6253, 0.5366499999999998, 0.44799999999999995}, {0.374375, 0.651875, 0.7402423828124998, 0.07062499999999997, 0.348125, 0.6255361328125001, 0.74346953125, 0.14331718750000005, -0.24539003906249993, 0.5706249999999999, 0.8044023437500001, 0.17211152343749997, 0.16835937500000003, 0.31744140625, 0.14432617187500002, 0.17773437499999997, 0.37734375, 0.5679687499999999, -0.12031250000000002, -0.21875, -0.028124999999999997, 0.427734375, 0.812744140625, 0.4301757812500001, 0.5037500000000001, 0.5337500000000001, 0.56375, 0.48125, 0.51125, 0.54125, 0.5911, 0.4835499999999999, 0.376, 0.6253, 0.53665, 0.44800000000000006}}},
 {{{0.2896359375, 0.50014453125, 0.7544468750000001, 0.10571484374999997, 0.24339843749999995, 0.46131406250000007, 0.579271875, 0.6794218750000003, 0.04259062499999983, 0.35420156249999996, 0.61163671875, 0.9226281250000001, 0.5374999999999999, 0.29562499999999997, 0.36562499999999964, 0.29374999999999973, 0.225, 0.32499999999999996, 0.43750000000000044, 0.24062500000000026, 0.08968750000000002, 0.75, 0.45, 0.6499999999999999, 0.45916666666666683, 0.33250000000000013, 0.4512500000000001, 0.2175000000000001, 0.1575000000000001, 0.21375000000000005, 0.9183333333333337, 0.6650000000000003, 0.34833333333333344, 0.4350000000000002, 0.3150000000000002, 0.3483333333333332}, {0.2896359375, 0.50014453125, 0.7544468750000001, 0.10571484374999997, 0.24339843749999995, 0.46131406250000007, 0.579271875, 0.6794218750000003, 0.04259062499999983, 0.35420156249999996, 0.61163671875, 0.9226281250000001, 0.7312500000000001, 0.56671875, 0.7054687499999999, 0.17187499999999978, 0.22148437500000018, 0.2871093750000002, 0.1937500000000001, 0.15015625000000007, 0.10511718750000004, 0.49218750000000033, 0.44296875000000036, 0.5742187500000004, 0.4393750000000001, 0.3622916666666666, 0.4971875000000001, 0.2731250000000001, 0.22520833333333337, 0.30906250000000013, 0.8787500000000003, 0.7245833333333332, 0.4162499999999998, 0.5462500000000002, 0.45041666666666674, 0.48374999999999996}}, {{0.2753421875, 0.47107265625000005, 0.7019906249999999, 0.17973046875000004, 0.4099921875000001, 0.6873398437499999, 0.550684375, 0.466234375, 0.17196562500000007, 0.5391914062500001, 0.8199843750000002, 0.524934375, 0.9625000000000001, 0.9625000000000001, 0.7968750000000004, 0.45625000000000027, 0.45625000000000027, 0.5817187500000004, 0.0, 0.0, 0.21250000000000002, 0.9125000000000005, 0.9125000000000005, 0.8500000000000001, 0.2095999999999999, 0.2358, 0.29474999999999996, 0.18079999999999996, 0.20340000000000008, 0.25425000000000003, 0.4191999999999998, 0.3405999999999998, 0.26199999999999984, 0.3615999999999999, 0.29379999999999984, 0.26100000000000007}, {0.2753421875, 0.47107265625000005, 0.7019906249999999, 0.17973046875000004, 0.4099921875000001, 0.6873398437499999, 0.550684375, 0.466234375, 0.17196562500000007, 0.5391914062500001, 0.8199843750000002, 0.524934375, 0.5203125000000001, 0.5203125000000001, 0.64171875, 0.4218749999999998, 0.4218749999999998, 0.5853515624999996, 0.0, 0.033632812500000026, 0.17777343749999994, 0.8437499999999996, 0.8437499999999996, 0.9249999999999998, 0.22696249999999998, 0.2591437500000001, 0.32011875000000006, 0.19681249999999995, 0.22471875000000008, 0.27759375000000003, 0.45392499999999997, 0.3726249999999999, 0.29132499999999995, 0.3936249999999999, 0.32312499999999983, 0.28822500000000023}}},
};

static const rill_dtype_t FLOATS[4] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64};
static const rill_dtype_t NUMS[8] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64, RILL_I8, RILL_U8, RILL_I32, RILL_I64};
static double tol(rill_dtype_t d) { return d == RILL_F16 ? 2e-3 : d == RILL_BF16 ? 1.6e-2 : d == RILL_F32 ? 1e-6 : 1e-12; }
static isa_attr_t attr_str(const char *name, const char *v) { return (isa_attr_t){name, ISA_ATTR_STRING, 1, NULL, NULL, v}; }

static void expect_error(const char *op, const op_io_t *in, uint32_t nin, const isa_attr_t *at, uint32_t nat, uint32_t max_out, const char *needle) {
  op_io_t out[2];
  memset(out, 0, sizeof out);
  uint32_t no = 0;
  rill_status_t st = run_op(op, in, nin, at, nat, out, max_out, &no);
  ck_assert_msg(st != NULL, "%s: expected an error with '%s'", op, needle);
  ck_assert_msg(strstr(rill_status_message(st), needle), "%s: '%s' lacks '%s'", op, rill_status_message(st), needle);
  rill_status_free(st);
  op_io_free(out, no);
}

/* scatter_nd over rows: x [4, 3] = 1..12, rows 1, -1 (3) and 1 again */
START_TEST(scatter_nd_by_hand) {
  const char *red[5] = {"none", "add", "mul", "max", "min"};
  double x[12], u[9] = {2, -1, 5, 0, 7, -3, 4, 4, 1};
  for (int i = 0; i < 12; i++) x[i] = i + 1;
  /* rows 1 (4 5 6) and 3 (10 11 12) get updates [2 -1 5] then [4 4 1] (row 1), [0 7 -3] (row 3) */
  double want[5][6] = {{4, 4, 1, 0, 7, -3}, {10, 8, 12, 10, 18, 9}, {32, -20, 30, 0, 77, -36},
                       {4, 5, 6, 10, 11, 12}, {2, -1, 1, 0, 7, -3}};
  for (int k = 0; k < 8; k++)
    for (int r = 0; r < 5; r++) {
      rill_dtype_t d = NUMS[k];
      if (d == RILL_U8) continue; /* negative values */
      op_io_t in[3] = {tensor_f(T(d, 2, 4, 3), x), tensor_f(T(k & 1 ? RILL_I32 : RILL_I64, 2, 3, 1), (double[]){1, -1, 1}),
                       tensor_f(T(d, 2, 3, 3), u)},
              y;
      isa_attr_t at = attr_str("reduction", red[r]);
      uint32_t no;
      /* none with a duplicate index is open (ONNX); the last row's update wins on the CPU */
      rill_status_t st = run_op("scatter_nd", in, 3, &at, 1, &y, 1, &no);
      ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
      for (int i = 0; i < 12; i++) {
        int row = i / 3;
        double w = row == 1 ? want[r][i % 3] : row == 3 ? want[r][3 + i % 3] : x[i];
        ck_assert_msg(at_f(&y, (size_t)i) == w, "%s %s at %d: %g, want %g", red[r], rill_dtype_name(d), i, at_f(&y, (size_t)i), w);
      }
      op_io_free(in, 3);
      op_io_free(&y, 1);
    }
}
END_TEST

/* scatter_nd of single elements (k = rank) in bool and f32; its errors */
START_TEST(scatter_nd_elements_and_errors) {
  op_io_t x = tensor_f(T(RILL_BOOL, 2, 2, 2), (double[]){0, 0, 1, 0}), ix = tensor_f(T(RILL_I64, 2, 2, 2), (double[]){0, 1, -1, -2}),
          u = tensor_f(T(RILL_BOOL, 1, 2), (double[]){1, 0}), y;
  uint32_t no;
  ck_assert(!run_op("scatter_nd", (op_io_t[]){x, ix, u}, 3, NULL, 0, &y, 1, &no));
  double want[4] = {0, 1, 0, 0};
  for (int i = 0; i < 4; i++) ck_assert(at_f(&y, (size_t)i) == want[i]);
  op_io_free(&y, 1);
  isa_attr_t add = attr_str("reduction", "add"), bad = attr_str("reduction", "sum");
  expect_error("scatter_nd", (op_io_t[]){x, ix, u}, 3, &add, 1, 1, "bool");
  op_io_t xf = tensor_f(T(RILL_F32, 2, 2, 2), NULL), uf = tensor_f(T(RILL_F32, 1, 2), (double[]){1, 2}), u3 = tensor_f(T(RILL_F32, 1, 3), NULL);
  expect_error("scatter_nd", (op_io_t[]){xf, ix, uf}, 3, &bad, 1, 1, "reduction");
  expect_error("scatter_nd", (op_io_t[]){xf, ix, u3}, 3, NULL, 0, 1, "updates: expected f32[2]");
  op_io_t ix3 = tensor_f(T(RILL_I64, 2, 1, 3), NULL), ixf = tensor_f(T(RILL_F32, 2, 2, 2), NULL);
  expect_error("scatter_nd", (op_io_t[]){xf, ix3, uf}, 3, NULL, 0, 1, "last dim");
  expect_error("scatter_nd", (op_io_t[]){xf, ixf, uf}, 3, NULL, 0, 1, "indices");
  /* an index out of range: a run-time error naming it */
  op_io_t far = tensor_f(T(RILL_I64, 2, 2, 2), (double[]){0, 1, 2, 0});
  expect_error("scatter_nd", (op_io_t[]){xf, far, uf}, 3, NULL, 0, 1, "index 2 out of range");
  op_io_free(&x, 1), op_io_free(&ix, 1), op_io_free(&u, 1), op_io_free(&xf, 1), op_io_free(&uf, 1), op_io_free(&u3, 1);
  op_io_free(&ix3, 1), op_io_free(&ixf, 1), op_io_free(&far, 1);
}
END_TEST

/* topk: [3 1 4 1 5 9 2 6] and [NaN 2 7] rows; ties by index, NaN the largest */
START_TEST(topk_by_hand) {
  double v[8] = {3, 1, 4, 1, 5, 9, 2, 6};
  for (int k = 0; k < 8; k++) {
    rill_dtype_t d = NUMS[k];
    op_io_t x = tensor_f(T(d, 1, 8), v), y[2];
    uint32_t no;
    isa_attr_t at[2] = {attr_int("k", 3), attr_bool("largest", false)};
    ck_assert(!run_op("topk", &x, 1, at, 1, y, 2, &no));
    ck_assert_int_eq(no, 2);
    ck_assert_int_eq(y[1].type.dtype, RILL_I64);
    double wv[3] = {9, 6, 5}, wi[3] = {5, 7, 4}, sv[3] = {1, 1, 2}, si[3] = {1, 3, 6};
    for (int i = 0; i < 3; i++) ck_assert(at_f(&y[0], (size_t)i) == wv[i] && at_f(&y[1], (size_t)i) == wi[i]);
    op_io_free(y, 2);
    ck_assert(!run_op("topk", &x, 1, at, 2, y, 2, &no));
    for (int i = 0; i < 3; i++) ck_assert(at_f(&y[0], (size_t)i) == sv[i] && at_f(&y[1], (size_t)i) == si[i]);
    op_io_free(y, 2);
    op_io_free(&x, 1);
  }
  /* along axis 0 of [3, 2]; NaN first among the largest, last among the smallest */
  op_io_t x = tensor_f(T(RILL_F32, 2, 3, 2), (double[]){NAN, 2, 2, 7, 1, 2}), y[2];
  uint32_t no;
  isa_attr_t at[3] = {attr_int("k", 2), attr_int("axis", 0), attr_bool("largest", false)};
  ck_assert(!run_op("topk", &x, 1, at, 2, y, 2, &no));
  ck_assert(isnan(at_f(&y[0], 0)) && at_f(&y[0], 1) == 7 && at_f(&y[0], 2) == 2 && at_f(&y[0], 3) == 2);
  ck_assert(at_f(&y[1], 0) == 0 && at_f(&y[1], 1) == 1 && at_f(&y[1], 2) == 1 && at_f(&y[1], 3) == 0);
  op_io_free(y, 2);
  ck_assert(!run_op("topk", &x, 1, at, 3, y, 2, &no));
  ck_assert(at_f(&y[0], 0) == 1 && at_f(&y[0], 1) == 2 && at_f(&y[0], 2) == 2 && at_f(&y[0], 3) == 2);
  ck_assert(at_f(&y[1], 0) == 2 && at_f(&y[1], 1) == 0 && at_f(&y[1], 2) == 1 && at_f(&y[1], 3) == 2);
  op_io_free(y, 2);
  isa_attr_t big = attr_int("k", 4);
  expect_error("topk", &x, 1, &big, 1, 2, "k=4");
  expect_error("topk", &x, 1, NULL, 0, 2, "'k' is required");
  expect_error("topk", &x, 1, at, 1, 1, "2 results");
  op_io_t b = tensor_f(T(RILL_BOOL, 1, 3), NULL);
  expect_error("topk", &b, 1, at, 1, 2, "bool");
  op_io_free(&x, 1), op_io_free(&b, 1);
}
END_TEST

/* nms against its definition written out: pick the best remaining
 * candidate (score down, index up; NaN and scores not above the threshold
 * never), keep it unless a kept box of its batch and class suppresses it
 * (nms_common.h's test), until max_per_class; rows up to cap. */
static long long nms_by_definition(const float *bx, const float *sc, long long B, long long C, long long N, long long mp, int center,
                                   float iou, bool has_thr, float thr, int64_t *rows, long long cap) {
  long long k = 0;
  bool *used = calloc((size_t)N, 1);
  for (long long b = 0; b < B; b++)
    for (long long c = 0; c < C; c++) {
      const float *s = sc + (b * C + c) * N;
      memset(used, 0, (size_t)N);
      long long start = k;
      while (k - start < mp) {
        long long best = -1;
        for (long long j = 0; j < N; j++)
          if (!used[j] && nms_candidate(s[j], has_thr, thr) && (best < 0 || s[j] > s[best])) best = j;
        if (best < 0) break;
        used[best] = true;
        bool keep = true;
        for (long long q = start; keep && q < k && q < cap; q++)
          keep = !nms_suppresses(bx + (b * N + rows[3 * q + 2]) * 4, bx + (b * N + best) * 4, center, iou);
        if (!keep) continue;
        if (k < cap) rows[3 * k] = b, rows[3 * k + 1] = c, rows[3 * k + 2] = best;
        k++;
      }
    }
  free(used);
  return k < cap ? k : cap;
}

/* the cpu device's nms (sorted candidates, kept boxes looked up along x) on
 * random boxes: spread out and clustered, small and inverted ones, NaN and
 * infinite corners, tied and NaN scores, thresholds below 0 and above 1,
 * limits per class */
START_TEST(nms_against_its_definition) {
  uint64_t st = 88172645463325252ull;
#define RND() (st ^= st << 13, st ^= st >> 7, st ^= st << 17, (double)(st >> 11) / 9007199254740992.0)
  for (int it = 0; it < 300; it++) {
    long long B = 1 + (long long)(RND() * 2), C = 1 + (long long)(RND() * 3), N = 1 + (long long)(RND() * (it % 10 ? 60 : 600));
    int center = RND() < 0.5;
    bool has_thr = RND() < 0.5;
    double iou = RND() * 1.2 - 0.1, thr = RND() - 0.5, mp = RND() < 0.3 ? floor(RND() * 10) : 1e6, spread = RND() < 0.5 ? 1 : 100;
    double *bx = malloc(sizeof(double) * (size_t)(B * N * 4)), *sc = malloc(sizeof(double) * (size_t)(B * C * N));
    for (long long i = 0; i < B * N * 4; i++) {
      double r = RND();
      bx[i] = r < 0.01 ? NAN : r < 0.02 ? INFINITY : r < 0.03 ? -INFINITY : (RND() * 2 - 1) * spread;
      if (RND() < 0.3 && i % 4 >= 2) bx[i] = bx[i - 2] + RND() * 0.5;
    }
    for (long long i = 0; i < B * C * N; i++) sc[i] = RND() < 0.02 ? NAN : floor(RND() * 8) / 4 - 1;
    op_io_t in[5] = {tensor_f(T(RILL_F32, 3, B, N, (int64_t)4), bx), tensor_f(T(RILL_F32, 3, B, C, N), sc), tensor_f(T(RILL_I64, 0), &mp),
                     tensor_f(T(RILL_F32, 0), &iou), tensor_f(T(RILL_F32, 0), &thr)};
    isa_attr_t at = attr_int("center_point_box", center);
    op_io_t y[2];
    uint32_t no;
    rill_status_t s = run_op("nms", in, has_thr ? 5 : 4, &at, 1, y, 2, &no);
    ck_assert_msg(!s, "%s", s ? rill_status_message(s) : "");
    long long cap = B * C * N;
    int64_t *want = calloc((size_t)(3 * cap), 8);
    long long k = nms_by_definition(in[0].data, in[1].data, B, C, N, (long long)mp, center, (float)iou, has_thr, (float)thr, want, cap);
    ck_assert_msg((long long)at_f(&y[1], 0) == k, "case %d: %lld rows, the definition %lld", it, (long long)at_f(&y[1], 0), k);
    ck_assert_msg(!memcmp(y[0].data, want, (size_t)(3 * cap) * 8), "case %d: rows differ", it);
    free(want), free(bx), free(sc);
    op_io_free(y, 2), op_io_free(in, 5);
  }
#undef RND
}
END_TEST

/* prod over an axis (integers wrap in i64) and fmod (the dividend's sign) */
START_TEST(prod_and_fmod) {
  for (int k = 0; k < 8; k++) {
    rill_dtype_t d = NUMS[k];
    op_io_t x = tensor_f(T(d, 2, 2, 3), (double[]){1, 2, 3, 4, 5, 6}), y;
    isa_attr_t ax = attr_ints("axes", 1, (int64_t[]){1});
    uint32_t no;
    ck_assert(!run_op("prod", &x, 1, &ax, 1, &y, 1, &no));
    ck_assert_int_eq(y.type.dtype, rill__is_float(d) ? d : RILL_I64);
    ck_assert(at_f(&y, 0) == 6 && at_f(&y, 1) == 120);
    op_io_free(&y, 1);
    op_io_free(&x, 1);
  }
  op_io_t big = tensor_f(T(RILL_I64, 1, 2), (double[]){4294967296.0, 4294967297.0}), y;
  uint32_t no;
  ck_assert(!run_op("prod", &big, 1, NULL, 0, &y, 1, &no));
  ck_assert(rill_element_get_int(RILL_I64, y.data, 0) == 4294967296LL); /* (2^32)(2^32 + 1) mod 2^64 */
  op_io_free(&y, 1), op_io_free(&big, 1);
  double a[5] = {-7.5, 7.5, -4, 4, 5}, b[5] = {2, -2, 3, -3, 5}, wf[5] = {-1.5, 1.5, -1, 1, 0};
  for (int k = 0; k < 4; k++) {
    op_io_t in[2] = {tensor_f(T(FLOATS[k], 1, 5), a), tensor_f(T(FLOATS[k], 1, 5), b)};
    ck_assert(!run_op("fmod", in, 2, NULL, 0, &y, 1, &no));
    for (int i = 0; i < 5; i++) ck_assert_msg(at_f(&y, (size_t)i) == wf[i], "fmod %s at %d", rill_dtype_name(FLOATS[k]), i);
    op_io_free(&y, 1), op_io_free(in, 2);
  }
  double ai[5] = {-7, 7, -9, 9, 5}, bi[5] = {3, -3, 0, -1, 5}, wi[5] = {-1, 1, 0, 0, 0};
  op_io_t in[2] = {tensor_f(T(RILL_I32, 1, 5), ai), tensor_f(T(RILL_I32, 1, 5), bi)};
  ck_assert(!run_op("fmod", in, 2, NULL, 0, &y, 1, &no));
  for (int i = 0; i < 5; i++) ck_assert(at_f(&y, (size_t)i) == wi[i]);
  op_io_free(&y, 1), op_io_free(in, 2);
}
END_TEST

START_TEST(grid_sample_against_numpy) {
  const char *modes[3] = {"nearest", "bilinear", "bicubic"}, *pads[3] = {"zeros", "border", "reflection"};
  for (int k = 0; k < 4; k++)
    for (int mo = 0; mo < 3; mo++)
      for (int pa = 0; pa < 3; pa++)
        for (int al = 0; al < 2; al++) {
          rill_dtype_t d = FLOATS[k];
          op_io_t in[2] = {tensor_f(T(d, 4, 1, 1, 3, 4), GS_X), tensor_f(T(k == 3 ? RILL_F64 : RILL_F32, 4, 1, 2, 3, 2), GS_G)}, y;
          isa_attr_t at[3] = {attr_str("mode", modes[mo]), attr_str("padding_mode", pads[pa]), attr_bool("align_corners", al)};
          uint32_t no;
          ck_assert(!run_op("grid_sample", in, 2, at, 3, &y, 1, &no));
          ck_assert(y.type.rank == 4 && y.type.dims[2] == 2 && y.type.dims[3] == 3);
          for (int i = 0; i < 6; i++) {
            double w = GS_WANT[mo][pa][al][i];
            ck_assert_msg(fabs(at_f(&y, (size_t)i) - w) <= tol(d) * (1 + fabs(w)) * 4, "%s %s align %d %s at %d: %.9g, want %.9g", modes[mo], pads[pa], al,
                          rill_dtype_name(d), i, at_f(&y, (size_t)i), w);
          }
          op_io_free(in, 2), op_io_free(&y, 1);
        }
  op_io_t x = tensor_f(T(RILL_F32, 4, 1, 1, 3, 4), NULL), g = tensor_f(T(RILL_F32, 4, 1, 2, 3, 3), NULL), gi = tensor_f(T(RILL_I32, 4, 1, 2, 3, 2), NULL);
  isa_attr_t bad = attr_str("mode", "area");
  expect_error("grid_sample", (op_io_t[]){x, g}, 2, NULL, 0, 1, "grid: expected [N,HO,WO,2]");
  expect_error("grid_sample", (op_io_t[]){x, gi}, 2, NULL, 0, 1, "grid");
  op_io_t g2 = tensor_f(T(RILL_F32, 4, 1, 2, 3, 2), NULL);
  expect_error("grid_sample", (op_io_t[]){x, g2}, 2, &bad, 1, 1, "mode");
  op_io_free(&x, 1), op_io_free(&g, 1), op_io_free(&gi, 1), op_io_free(&g2, 1);
}
END_TEST

START_TEST(roi_align_against_numpy) {
  for (int k = 0; k < 4; k++)
    for (int mo = 0; mo < 2; mo++)
      for (int hp = 0; hp < 2; hp++)
        for (int s = 0; s < 2; s++) {
          rill_dtype_t d = FLOATS[k];
          op_io_t in[3] = {tensor_f(T(d, 4, 2, 2, 5, 6), RA_X), tensor_f(T(d, 2, 3, 4), RA_ROIS), tensor_f(T(k & 1 ? RILL_I32 : RILL_I64, 1, 3), (double[]){1, 0, 1})}, y;
          isa_attr_t at[6] = {attr_int("output_height", 2), attr_int("output_width", 3), attr_int("sampling_ratio", s ? 2 : 0), attr_float("spatial_scale", 0.9),
                              attr_str("mode", mo ? "max" : "avg"), attr_str("coordinate_transformation_mode", hp ? "half_pixel" : "output_half_pixel")};
          uint32_t no;
          ck_assert(!run_op("roi_align", in, 3, at, 6, &y, 1, &no));
          ck_assert(y.type.rank == 4 && y.type.dims[0] == 3 && y.type.dims[1] == 2 && y.type.dims[2] == 2 && y.type.dims[3] == 3);
          /* the rois, rounded to d, move the samples: f16 and bf16 more loosely */
          double t = d == RILL_F16 ? 2e-2 : d == RILL_BF16 ? 8e-2 : tol(d) * 4;
          for (int i = 0; i < 36; i++) {
            double w = RA_WANT[mo][hp][s][i];
            ck_assert_msg(fabs(at_f(&y, (size_t)i) - w) <= t * (1 + fabs(w)), "%s half_pixel %d sampling %d %s at %d: %.9g, want %.9g", mo ? "max" : "avg", hp, s,
                          rill_dtype_name(d), i, at_f(&y, (size_t)i), w);
          }
          op_io_free(in, 3), op_io_free(&y, 1);
        }
  op_io_t x = tensor_f(T(RILL_F32, 4, 2, 2, 5, 6), NULL), r = tensor_f(T(RILL_F32, 2, 1, 4), (double[]){0, 0, 1, 1}), bi = tensor_f(T(RILL_I64, 1, 1), (double[]){2});
  op_io_t r5 = tensor_f(T(RILL_F32, 2, 1, 5), NULL), b2 = tensor_f(T(RILL_I64, 1, 2), NULL);
  isa_attr_t z = attr_int("output_height", 0), bad = attr_str("mode", "sum");
  expect_error("roi_align", (op_io_t[]){x, r, bi}, 3, NULL, 0, 1, "batch index 2 of roi 0 is out of range");
  expect_error("roi_align", (op_io_t[]){x, r5, bi}, 3, NULL, 0, 1, "rois: expected [R,4]");
  expect_error("roi_align", (op_io_t[]){x, r, b2}, 3, NULL, 0, 1, "batch indices");
  expect_error("roi_align", (op_io_t[]){x, r, bi}, 3, &z, 1, 1, "output_height");
  expect_error("roi_align", (op_io_t[]){x, r, bi}, 3, &bad, 1, 1, "mode");
  op_io_free(&x, 1), op_io_free(&r, 1), op_io_free(&bi, 1), op_io_free(&r5, 1), op_io_free(&b2, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("index");
  TCase *t = tcase_create("index");
  tcase_add_test(t, scatter_nd_by_hand);
  tcase_add_test(t, scatter_nd_elements_and_errors);
  tcase_add_test(t, topk_by_hand);
  tcase_add_test(t, nms_against_its_definition);
  tcase_add_test(t, prod_and_fmod);
  tcase_add_test(t, grid_sample_against_numpy);
  tcase_add_test(t, roi_align_against_numpy);
  suite_add_tcase(s, t);
  return run_suite(s);
}
