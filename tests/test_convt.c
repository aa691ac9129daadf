/* test_convt.c: the CPU reference of `conv_transpose`, against a value
 * worked by hand and against the scatter form of the transposed
 * convolution computed here in double (each input element times the
 * kernel added into the output: the definition, where the kernel gathers),
 * and its attribute and shape errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static double tol(rill_dtype_t d) { return d == RILL_F16 ? 4e-3 : d == RILL_BF16 ? 3e-2 : d == RILL_F32 ? 2e-6 : 1e-12; }

static uint64_t rng = 12345;
static double urand(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct ct_case {
  int nd;
  int64_t N, C, O, G, in[3], k[3], s[3], pb[3], pe[3], d[3], op[3];
  bool bias;
} ct_case_t;

/* The scatter form: y[n, o, i*s - pb + k*d] += x[n, c, i] * w[c, o - g*O/G, k]; then the bias. */
static void reference(const ct_case_t *c, const double *x, const double *w, const double *b, const int64_t *out, double *y) {
  int64_t osz = 1, isz = 1, ksz = 1, opg = c->O / c->G, ipg = c->C / c->G;
  for (int a = 0; a < c->nd; a++) osz *= out[a], isz *= c->in[a], ksz *= c->k[a];
  for (int64_t e = 0; e < c->N * c->O * osz; e++) y[e] = c->bias ? b[(e / osz) % c->O] : 0;
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t ci = 0; ci < c->C; ci++)
      for (int64_t i = 0; i < isz; i++)
        for (int64_t oo = 0; oo < opg; oo++)
          for (int64_t kk = 0; kk < ksz; kk++) {
            int64_t ir = i, kr = kk, off = 0, st = 1;
            bool inside = true;
            for (int a = c->nd - 1; a >= 0; a--) {
              int64_t ia = ir % c->in[a], ka = kr % c->k[a], p = ia * c->s[a] - c->pb[a] + ka * c->d[a];
              ir /= c->in[a], kr /= c->k[a];
              if (p < 0 || p >= out[a]) inside = false;
              off += p * st;
              st *= out[a];
            }
            if (!inside) continue;
            int64_t o = ci / ipg * opg + oo;
            y[(n * c->O + o) * osz + off] += x[(n * c->C + ci) * isz + i] * w[(ci * opg + oo) * ksz + kk];
          }
}

static void run_case(const ct_case_t *c, rill_dtype_t d) {
  int64_t xs[5] = {c->N, c->C}, ws[5] = {c->C, c->O / c->G}, out[3];
  rill_type_t xt = {d, c->nd + 2, {0}}, wt = {d, c->nd + 2, {0}}, bt = {d, 1, {c->O}};
  for (int a = 0; a < c->nd; a++) {
    xs[2 + a] = c->in[a], ws[2 + a] = c->k[a];
    out[a] = (c->in[a] - 1) * c->s[a] - c->pb[a] - c->pe[a] + c->d[a] * (c->k[a] - 1) + c->op[a] + 1;
  }
  memcpy(xt.dims, xs, sizeof xs);
  memcpy(wt.dims, ws, sizeof ws);
  size_t nx = rill_type_numel(&xt), nw = rill_type_numel(&wt);
  double *xv = malloc(nx * sizeof *xv), *wv = malloc(nw * sizeof *wv), bv[16];
  for (size_t i = 0; i < nx; i++) xv[i] = round((urand() * 2 - 1) * 64) / 64; /* exact in every float dtype */
  for (size_t i = 0; i < nw; i++) wv[i] = round((urand() * 2 - 1) * 64) / 64;
  for (int i = 0; i < c->O; i++) bv[i] = round((urand() * 2 - 1) * 64) / 64;
  op_io_t in[3] = {tensor_f(xt, xv), tensor_f(wt, wv), tensor_f(bt, bv)}, y;
  int64_t pads[6];
  for (int a = 0; a < c->nd; a++) pads[a] = c->pb[a], pads[c->nd + a] = c->pe[a];
  isa_attr_t at[5] = {attr_ints("stride", c->nd, c->s), attr_ints("padding", 2 * c->nd, pads), attr_ints("output_padding", c->nd, c->op),
                      attr_ints("dilation", c->nd, c->d), attr_int("groups", c->G)};
  uint32_t no;
  rill_status_t st = run_op("conv_transpose", in, c->bias ? 3 : 2, at, 5, &y, 1, &no);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  size_t ny = rill_type_numel(&y.type);
  double *want = malloc(ny * sizeof *want);
  reference(c, xv, wv, bv, out, want);
  for (int a = 0; a < c->nd; a++) ck_assert_int_eq(y.type.dims[2 + a], out[a]);
  for (size_t i = 0; i < ny; i++)
    ck_assert_msg(fabs(at_f(&y, i) - want[i]) <= tol(d) * (1 + fabs(want[i])) * 4, "%dD %s at %zu: got %.9g, want %.9g", c->nd, rill_dtype_name(d), i,
                  at_f(&y, i), want[i]);
  free(want);
  free(xv);
  free(wv);
  op_io_free(in, 3);
  op_io_free(&y, 1);
}

START_TEST(by_hand) {
  /* 1-D, stride 2, kernel [1, 2, 3]: x [1, 10] -> positions 0..2 get 1*w, 2..4 get 10*w (2 overlaps): [1, 2, 13, 20, 30] */
  op_io_t x = tensor_f(T(RILL_F32, 3, 1, 1, 2), (double[]){1, 10}), w = tensor_f(T(RILL_F32, 3, 1, 1, 3), (double[]){1, 2, 3}), y;
  isa_attr_t s = attr_ints("stride", 1, (int64_t[]){2});
  uint32_t no;
  ck_assert(!run_op("conv_transpose", (op_io_t[]){x, w}, 2, &s, 1, &y, 1, &no));
  double want[5] = {1, 2, 13, 20, 30};
  ck_assert_int_eq(y.type.dims[2], 5);
  for (int i = 0; i < 5; i++) ck_assert(at_f(&y, (size_t)i) == want[i]);
  op_io_free(&y, 1);
  /* padding [1, 1] crops one each side, output_padding 1 gives the last back: [2, 13, 20, 30] */
  isa_attr_t at[3] = {s, attr_ints("padding", 2, (int64_t[]){1, 1}), attr_ints("output_padding", 1, (int64_t[]){1})};
  ck_assert(!run_op("conv_transpose", (op_io_t[]){x, w}, 2, at, 3, &y, 1, &no));
  ck_assert_int_eq(y.type.dims[2], 4);
  ck_assert(at_f(&y, 0) == 2 && at_f(&y, 1) == 13 && at_f(&y, 2) == 20 && at_f(&y, 3) == 30);
  op_io_free(&y, 1);
  op_io_free(&x, 1);
  op_io_free(&w, 1);
}
END_TEST

START_TEST(against_scatter) {
  ct_case_t cases[] = {
      {1, 2, 3, 4, 1, {5}, {3}, {2}, {1}, {0}, {1}, {1}, true},
      {2, 1, 4, 6, 2, {4, 3}, {3, 2}, {2, 3}, {1, 0}, {2, 1}, {1, 2}, {1, 0}, true},
      {2, 2, 3, 3, 3, {3, 4}, {2, 3}, {1, 2}, {0, 1}, {0, 1}, {2, 1}, {0, 1}, false},
      {3, 1, 2, 2, 1, {3, 2, 3}, {2, 2, 3}, {2, 1, 2}, {1, 0, 1}, {0, 0, 1}, {1, 2, 1}, {1, 0, 0}, true},
      {2, 1, 2, 2, 1, {3, 3}, {3, 3}, {1, 1}, {-1, 0}, {0, -2}, {1, 1}, {0, 0}, false},
  };
  rill_dtype_t ds[4] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int k = 0; k < 4; k++) run_case(&cases[i], ds[k]);
}
END_TEST

START_TEST(errors) {
  rill_type_t xt = T(RILL_F32, 4, 1, 4, 3, 3);
  struct { rill_type_t w; isa_attr_t a; int na; const char *needle; } cases[] = {
      {T(RILL_F32, 4, 3, 2, 2, 2), attr_int("groups", 1), 1, "does not fit"},
      {T(RILL_F32, 4, 4, 2, 2, 2), attr_int("groups", 3), 1, "does not fit"},
      {T(RILL_F32, 3, 4, 2, 2), attr_int("groups", 1), 1, "weight: expected"},
      {T(RILL_F32, 4, 4, 2, 2, 2), attr_ints("stride", 3, (int64_t[]){1, 1, 1}), 1, "needs 2 values"},
      {T(RILL_F32, 4, 4, 2, 2, 2), attr_ints("stride", 2, (int64_t[]){0, 1}), 1, "'stride' must hold values in 1.."},
      {T(RILL_F32, 4, 4, 2, 2, 2), attr_ints("padding", 2, (int64_t[]){1, 1}), 1, "'padding' needs 4 values"},
      {T(RILL_F32, 4, 4, 2, 2, 2), attr_ints("padding", 4, (int64_t[]){3, 3, 3, 3}), 1, "at least 1"},
      {T(RILL_F32, 4, 4, 2, 2, 2), attr_ints("output_padding", 2, (int64_t[]){-1, 0}), 1, "'output_padding' must hold values in 0.."},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    op_io_t in[2] = {tensor_f(xt, NULL), tensor_f(cases[i].w, NULL)}, y;
    uint32_t no;
    rill_status_t st = run_op("conv_transpose", in, 2, &cases[i].a, (uint32_t)cases[i].na, &y, 1, &no);
    ck_assert_msg(st && strstr(rill_status_message(st), cases[i].needle), "case %zu: want '%s', got %s", i, cases[i].needle,
                  st ? rill_status_message(st) : "success");
    rill_status_free(st);
    op_io_free(in, 2);
  }
  op_io_t i8[2] = {tensor_f(T(RILL_I32, 3, 1, 1, 2), NULL), tensor_f(T(RILL_I32, 3, 1, 1, 2), NULL)}, y;
  uint32_t no;
  rill_status_t st = run_op("conv_transpose", i8, 2, NULL, 0, &y, 1, &no);
  ck_assert(st != NULL);
  rill_status_free(st);
  op_io_free(i8, 2);
}
END_TEST

int main(void) {
  Suite *s = suite_create("convt");
  TCase *t = tcase_create("conv_transpose");
  tcase_add_test(t, by_hand);
  tcase_add_test(t, against_scatter);
  tcase_add_test(t, errors);
  suite_add_tcase(s, t);
  return run_suite(s);
}
