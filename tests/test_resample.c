/* test_resample.c: the CPU reference of `resize`, against values worked by
 * hand or computed here in double from the textbook formulas (Keys' cubic
 * convolution, written out independently of kernels/cuda/resize_common.h),
 * and its attribute and shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static const rill_dtype_t FLOATS[] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64};

static double tol(rill_dtype_t d) { return d == RILL_F16 ? 2e-3 : d == RILL_BF16 ? 1.6e-2 : d == RILL_F32 ? 2e-6 : 1e-12; }

static isa_attr_t attr_str(const char *name, const char *v) { return (isa_attr_t){name, ISA_ATTR_STRING, 1, NULL, NULL, v}; }
static isa_attr_t attr_floats(const char *name, int n, double *v) { return (isa_attr_t){name, ISA_ATTR_FLOATS, (uint32_t)n, NULL, v, NULL}; }

/* resize of x (type xt, values xv) with attrs: the values, checked against want (n of them) within tol(dtype). */
static void expect_resize(rill_type_t xt, const double *xv, const isa_attr_t *at, uint32_t nat, const double *want, size_t n, const char *what) {
  op_io_t x = tensor_f(xt, xv), y;
  uint32_t no;
  rill_status_t st = run_op("resize", &x, 1, at, nat, &y, 1, &no);
  ck_assert_msg(!st, "%s: %s", what, st ? rill_status_message(st) : "");
  ck_assert_uint_eq(rill_type_numel(&y.type), n);
  ck_assert_int_eq(y.type.dtype, xt.dtype);
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(fabs(at_f(&y, i) - want[i]) <= tol(xt.dtype) * (1 + fabs(want[i])), "%s (%s) at %zu: got %.9g, want %.9g", what,
                  rill_dtype_name(xt.dtype), i, at_f(&y, i), want[i]);
  op_io_free(&x, 1);
  op_io_free(&y, 1);
}

static void expect_error(rill_type_t xt, const isa_attr_t *at, uint32_t nat, const char *needle) {
  op_io_t x = tensor_f(xt, NULL), y;
  uint32_t no;
  rill_status_t st = run_op("resize", &x, 1, at, nat, &y, 1, &no);
  ck_assert_msg(st && strstr(rill_status_message(st), needle), "want an error with '%s', got %s", needle, st ? rill_status_message(st) : "success");
  rill_status_free(st);
  op_io_free(&x, 1);
}

START_TEST(nearest_every_dtype) {
  /* [[1,2],[3,4]] doubled: each value a 2x2 block (asymmetric: x/2, floor and round_prefer_floor agree) */
  double xv[4] = {1, 0, 0, 1};
  double want[16] = {1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1};
  isa_attr_t at[2] = {attr_ints("sizes", 4, (int64_t[]){1, 1, 4, 4}), attr_str("coordinate_transformation_mode", "asymmetric")};
  rill_dtype_t all[] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64, RILL_I8, RILL_U8, RILL_I32, RILL_I64, RILL_BOOL};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) expect_resize(T(all[k], 4, 1, 1, 2, 2), xv, at, 2, want, 16, "nearest 2x");
  /* the nearest modes at x/2 = 0.5 and 1.5 (asymmetric, 4 -> 8) */
  double x4[4] = {0, 1, 2, 3};
  const char *modes[4] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  double w[4][8] = {{0, 0, 1, 1, 2, 2, 3, 3}, {0, 1, 1, 2, 2, 3, 3, 3}, {0, 0, 1, 1, 2, 2, 3, 3}, {0, 1, 1, 2, 2, 3, 3, 3}};
  for (int m = 0; m < 4; m++) {
    isa_attr_t a2[3] = {attr_ints("sizes", 1, (int64_t[]){8}), attr_str("coordinate_transformation_mode", "asymmetric"), attr_str("nearest_mode", modes[m])};
    expect_resize(T(RILL_I32, 1, 4), x4, a2, 3, w[m], 8, modes[m]);
  }
  /* 4 -> 3 with scale 0.75, half_pixel: x = (o + 0.5) / 0.75 - 0.5 = 1/6, 3/2, 17/6 -> 0, 1 (floor preferred at .5), 3 */
  isa_attr_t a3[1] = {attr_ints("sizes", 1, (int64_t[]){3})};
  expect_resize(T(RILL_F32, 1, 4), x4, a3, 1, (double[]){0, 1, 3}, 3, "nearest 4 -> 3");
}
END_TEST

START_TEST(linear_by_hand) {
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = FLOATS[k];
    /* half_pixel (PyTorch's bilinear, align_corners=False): [[1,2],[3,4]] -> 4x4 */
    isa_attr_t at[2] = {attr_ints("sizes", 4, (int64_t[]){1, 1, 4, 4}), attr_str("mode", "linear")};
    double want[16] = {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4};
    expect_resize(T(d, 4, 1, 1, 2, 2), (double[]){1, 2, 3, 4}, at, 2, want, 16, "bilinear half_pixel");
    /* 1-D 4 -> 8: x = o/2 - 1/4, clamped at both ends */
    isa_attr_t a1[2] = {attr_ints("sizes", 2, (int64_t[]){1, 8}), attr_str("mode", "linear")};
    expect_resize(T(d, 2, 1, 4), (double[]){0, 10, 20, 30}, a1, 2, (double[]){0, 2.5, 7.5, 12.5, 17.5, 22.5, 27.5, 30}, 8, "linear 4 -> 8");
    /* align_corners 3 -> 5: x = o/2 */
    isa_attr_t a2[3] = {attr_ints("sizes", 1, (int64_t[]){5}), attr_str("mode", "linear"), attr_str("coordinate_transformation_mode", "align_corners")};
    expect_resize(T(d, 1, 3), (double[]){0, 10, 20}, a2, 3, (double[]){0, 5, 10, 15, 20}, 5, "align_corners");
    /* tf_crop_and_resize over roi [0.5, 1.5] of 4 values -> 3: x = 1.5 o + 1.5; 4.5 lies outside: the extrapolation value */
    isa_attr_t a3[5] = {attr_ints("sizes", 1, (int64_t[]){3}), attr_str("mode", "linear"), attr_str("coordinate_transformation_mode", "tf_crop_and_resize"),
                        attr_floats("roi", 2, (double[]){0.5, 1.5}), attr_float("extrapolation_value", -1)};
    expect_resize(T(d, 1, 4), (double[]){0, 10, 20, 30}, a3, 5, (double[]){15, 30, -1}, 3, "tf_crop_and_resize");
    /* scales given: asymmetric 2 -> 5 with scale 2.5 (x = o / 2.5) */
    isa_attr_t a4[4] = {attr_ints("sizes", 1, (int64_t[]){5}), attr_floats("scales", 1, (double[]){2.5}), attr_str("mode", "linear"),
                        attr_str("coordinate_transformation_mode", "asymmetric")};
    expect_resize(T(d, 1, 2), (double[]){0, 10}, a4, 4, (double[]){0, 4, 8, 10, 10}, 5, "scales 2.5");
  }
  /* integers round half to even: 0, 0.5, 1 -> 0, 0, 1; and 2.5 -> 2, 3.5 -> 4 */
  isa_attr_t ai[3] = {attr_ints("sizes", 1, (int64_t[]){3}), attr_str("mode", "linear"), attr_str("coordinate_transformation_mode", "align_corners")};
  expect_resize(T(RILL_I32, 1, 2), (double[]){0, 1}, ai, 3, (double[]){0, 0, 1}, 3, "i32 linear");
  expect_resize(T(RILL_U8, 1, 2), (double[]){3, 4}, ai, 3, (double[]){3, 4, 4}, 3, "u8 linear");
  expect_resize(T(RILL_I8, 1, 2), (double[]){2, 3}, ai, 3, (double[]){2, 2, 3}, 3, "i8 linear");
}
END_TEST

/* Keys' kernel with coefficient a */
static double keys(double t, double a) {
  t = fabs(t);
  if (t <= 1) return (a + 2) * t * t * t - (a + 3) * t * t + 1;
  if (t < 2) return a * t * t * t - 5 * a * t * t + 8 * a * t - 4 * a;
  return 0;
}

/* 1-D cubic convolution at source position s over x[0..n): the four nearest
 * samples, clamped to the edges, or (exclude) only those inside, renormalised */
static double cubic_at(const double *x, int n, double s, double a, bool exclude) {
  double f = floor(s), acc = 0, wsum = 0;
  for (int k = -1; k <= 2; k++) {
    double j = f + k, w = keys(s - j, a);
    if (exclude && (j < 0 || j >= n)) continue;
    int c = j < 0 ? 0 : j >= n ? n - 1 : (int)j;
    acc += w * x[c];
    wsum += w;
  }
  return exclude ? acc / wsum : acc;
}

START_TEST(cubic_against_keys) {
  double x[5] = {1, -2, 4.5, 0.25, 3};
  struct { const char *coord; int out; double a; bool exclude; } cases[] = {
      {"half_pixel", 9, -0.75, false}, {"asymmetric", 7, -0.5, false}, {"align_corners", 8, -0.75, false},
      {"pytorch_half_pixel", 3, -0.75, false}, {"half_pixel", 12, -0.5, true}, {"half_pixel", 3, -0.75, true}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int o = cases[c].out;
    double want[16], sc = o / 5.0;
    for (int i = 0; i < o; i++) {
      double s = !strcmp(cases[c].coord, "asymmetric") ? i / sc
                 : !strcmp(cases[c].coord, "align_corners") ? i * 4.0 / (o - 1)
                                                             : (i + 0.5) / sc - 0.5;
      want[i] = cubic_at(x, 5, s, cases[c].a, cases[c].exclude);
    }
    isa_attr_t at[5] = {attr_ints("sizes", 2, (int64_t[]){1, o}), attr_str("mode", "cubic"), attr_str("coordinate_transformation_mode", cases[c].coord),
                        attr_float("cubic_coeff_a", cases[c].a), attr_bool("exclude_outside", cases[c].exclude)};
    char what[96];
    snprintf(what, sizeof what, "cubic %s 5 -> %d a=%g%s", cases[c].coord, o, cases[c].a, cases[c].exclude ? " exclude_outside" : "");
    expect_resize(T(RILL_F64, 2, 1, 5), x, at, 5, want, (size_t)o, what);
    expect_resize(T(RILL_F32, 2, 1, 5), x, at, 5, want, (size_t)o, what);
  }
  /* 2-D: separable, the product of the two axes' weights */
  double x2[6] = {1, 2, 3, 4, 5, 7}, want2[20];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++) {
      double row[3], s0 = (i + 0.5) / 2 - 0.5, s1 = (j + 0.5) / (5.0 / 3) - 0.5, col[2];
      for (int r = 0; r < 2; r++) col[r] = cubic_at(x2 + 3 * r, 3, s1, -0.75, false);
      (void)row;
      want2[i * 5 + j] = cubic_at(col, 2, s0, -0.75, false);
    }
  isa_attr_t at2[2] = {attr_ints("sizes", 2, (int64_t[]){4, 5}), attr_str("mode", "cubic")};
  expect_resize(T(RILL_F64, 2, 2, 3), x2, at2, 2, want2, 20, "bicubic 2x3 -> 4x5");
}
END_TEST

START_TEST(errors) {
  rill_type_t t = T(RILL_F32, 2, 2, 3);
  expect_error(t, NULL, 0, "attribute 'sizes'");
  isa_attr_t a1[1] = {attr_ints("sizes", 1, (int64_t[]){4})};
  expect_error(t, a1, 1, "needs 2 values");
  isa_attr_t a2[2] = {attr_ints("sizes", 2, (int64_t[]){2, 6}), attr_str("mode", "bicubic")};
  expect_error(t, a2, 2, "attribute 'mode' expects \"nearest\", \"linear\" or \"cubic\"");
  isa_attr_t a3[2] = {attr_ints("sizes", 2, (int64_t[]){2, 6}), attr_str("coordinate_transformation_mode", "center")};
  expect_error(t, a3, 2, "coordinate_transformation_mode");
  isa_attr_t a4[2] = {attr_ints("sizes", 2, (int64_t[]){2, 6}), attr_floats("roi", 4, (double[]){0, 0, 1, 1})};
  expect_error(t, a4, 2, "'roi' needs coordinate_transformation_mode=\"tf_crop_and_resize\"");
  isa_attr_t a5[2] = {attr_ints("sizes", 2, (int64_t[]){2, 6}), attr_floats("scales", 2, (double[]){1, 0})};
  expect_error(t, a5, 2, "scale must be a finite number above 0");
  isa_attr_t a6[1] = {attr_ints("sizes", 2, (int64_t[]){2, 0})};
  expect_error(t, a6, 1, "sizes must be at least 1");
  isa_attr_t a7[2] = {attr_ints("sizes", 2, (int64_t[]){2, 6}), attr_str("mode", "linear")};
  expect_error(T(RILL_BOOL, 2, 2, 3), a7, 2, "takes a numeric input");
  isa_attr_t a8[2] = {attr_ints("sizes", 2, (int64_t[]){2, 6}), attr_floats("scales", 1, (double[]){2})};
  expect_error(t, a8, 2, "attribute 'scales' needs 2 values");
}
END_TEST

/* Through the language: an assembled program, at -O1 (folding a constant input) and with a shape variable kept. */
START_TEST(in_a_program) {
  const char *src = "dim B in [1, 8]\nfunc @main(%x: f32[B,1,2,2]) -> f32[B,1,4,4] {\n"
                    "  %y = resize(%x) {sizes=[B, 1, 4, 4], mode=\"linear\"}\n  return %y\n}\n";
  rill_type_t xt = T(RILL_F32, 4, 3, 1, 2, 2);
  float xv[12], want[16] = {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}, yv[48];
  for (int b = 0; b < 3; b++)
    for (int i = 0; i < 4; i++) xv[b * 4 + i] = (float)((i + 1) * (b + 1));
  uint8_t *bytes;
  size_t size;
  rill_status_t st = asm_text(src, &bytes, &size);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_module_t *mod;
  ck_assert(!rill_module_load(NULL, bytes, size, ".", &mod));
  free(bytes);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, mod, "cpu", &vm));
  rill_tensor_t *in, **res;
  int nres;
  ck_assert(!rill_tensor_create(vm, &xt, xv, &in));
  st = rill_vm_invoke(vm, "main", &in, 1, &res, &nres);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  ck_assert(!rill_tensor_read(res[0], yv, sizeof yv));
  for (int b = 0; b < 3; b++)
    for (int i = 0; i < 16; i++) ck_assert_float_eq_tol(yv[b * 16 + i], want[i] * (b + 1), 1e-6);
  rill_results_free(vm, res, nres);
  rill_tensor_release(in);
  rill_vm_destroy(vm);
  rill_module_release(mod);
}
END_TEST

int main(void) {
  Suite *s = suite_create("resample");
  TCase *t = tcase_create("resize");
  tcase_add_test(t, nearest_every_dtype);
  tcase_add_test(t, linear_by_hand);
  tcase_add_test(t, cubic_against_keys);
  tcase_add_test(t, errors);
  tcase_add_test(t, in_a_program);
  suite_add_tcase(s, t);
  return run_suite(s);
}
