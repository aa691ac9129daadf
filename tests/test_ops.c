/* test_ops.c: the op registry and CPU reference kernels. Expectations are
 * hand-computed or identities checked numerically, never taken from the
 * kernels themselves. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static const rill_dtype_t FLOATS[] = {RILL_F16, RILL_BF16, RILL_F32, RILL_F64};
static const rill_dtype_t INTS[] = {RILL_I8, RILL_U8, RILL_I32, RILL_I64};

static double tol(rill_dtype_t d) { return d == RILL_F16 ? 2e-3 : d == RILL_BF16 ? 1.6e-2 : d == RILL_F32 ? 2e-6 : 1e-12; }

static void close_to(double got, double want, double rel, const char *what) {
  ck_assert_msg(fabs(got - want) <= rel * (1 + fabs(want)), "%s: got %.9g, want %.9g", what, got, want);
}

/* One unary op on one value, for every float dtype. */
static void unary_case(const char *op, double x, double want, const isa_attr_t *attrs, uint32_t nattrs) {
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = FLOATS[k];
    op_io_t in = tensor_f(T(d, 1, 1), &x), out;
    uint32_t n;
    rill_status_t st = run_op(op, &in, 1, attrs, nattrs, &out, 1, &n);
    ck_assert_msg(!st, "%s: %s", op, rill_status_message(st));
    ck_assert_int_eq(out.type.dtype, d);
    char what[64];
    snprintf(what, sizeof what, "%s(%g) in %s", op, x, rill_dtype_name(d));
    close_to(at_f(&out, 0), want, tol(d), what);
    op_io_free(&in, 1);
    op_io_free(&out, 1);
  }
}

START_TEST(unary_values) {
  unary_case("neg", 1.5, -1.5, NULL, 0);
  unary_case("abs", -2.25, 2.25, NULL, 0);
  unary_case("exp", 0, 1, NULL, 0);
  unary_case("exp", 1, 2.718281828459045, NULL, 0);
  unary_case("log", 1, 0, NULL, 0);
  unary_case("log", 0.5, -0.6931471805599453, NULL, 0);
  unary_case("sqrt", 4, 2, NULL, 0);
  unary_case("rsqrt", 4, 0.5, NULL, 0);
  unary_case("reciprocal", 4, 0.25, NULL, 0);
  unary_case("sigmoid", 0, 0.5, NULL, 0);
  unary_case("tanh", 0.5, 0.46211715726000974, NULL, 0);
  unary_case("relu", -1, 0, NULL, 0);
  unary_case("relu", 3, 3, NULL, 0);
  unary_case("silu", 1, 0.7310585786300049, NULL, 0);
  unary_case("erf", 0.5, 0.5204998778130465, NULL, 0);
  unary_case("sin", 0.5, 0.479425538604203, NULL, 0);
  unary_case("cos", 0.5, 0.8775825618903728, NULL, 0);
  unary_case("asin", 0.5, 0.5235987755982989, NULL, 0);  /* pi/6 */
  unary_case("asin", -1, -1.5707963267948966, NULL, 0);   /* -pi/2 */
  unary_case("acos", 0.5, 1.0471975511965979, NULL, 0);  /* pi/3 */
  unary_case("acos", -1, 3.141592653589793, NULL, 0);
  unary_case("atan", 1, 0.7853981633974483, NULL, 0);    /* pi/4 */
  unary_case("atan", -0.5, -0.4636476090008061, NULL, 0);
  unary_case("floor", -1.5, -2, NULL, 0);
  unary_case("ceil", -1.5, -1, NULL, 0);
  unary_case("gelu", 1, 0.8413447460685429, NULL, 0);
  isa_attr_t tanh_attr = {"approximate", ISA_ATTR_STRING, 1, NULL, NULL, "tanh"};
  unary_case("gelu", 1, 0.8411919906082768, &tanh_attr, 1);
  isa_attr_t alpha = attr_float("alpha", 0.125);
  unary_case("leaky_relu", -2, -0.25, &alpha, 1);
  unary_case("leaky_relu", 2, 2, NULL, 0);
  isa_attr_t clip[2] = {attr_float("min", -1), attr_float("max", 0.5)};
  unary_case("clip", -3, -1, clip, 2);
  unary_case("clip", 3, 0.5, clip, 2);
  unary_case("clip", 0.25, 0.25, clip, 2);
}
END_TEST

/* Identities on many values: they hold for any correct implementation. */
START_TEST(unary_identities) {
  enum { N = 257 };
  double xs[N];
  for (int i = 0; i < N; i++) xs[i] = -4.0 + 8.0 * i / (N - 1);
  op_io_t x = tensor_f(T(RILL_F64, 1, N), xs), s, c, sp, sn, th, nx, e, l, g;
  uint32_t n;
  ck_assert(!run_op("sin", &x, 1, NULL, 0, &s, 1, &n));
  ck_assert(!run_op("cos", &x, 1, NULL, 0, &c, 1, &n));
  ck_assert(!run_op("sigmoid", &x, 1, NULL, 0, &sp, 1, &n));
  ck_assert(!run_op("neg", &x, 1, NULL, 0, &nx, 1, &n));
  ck_assert(!run_op("sigmoid", &nx, 1, NULL, 0, &sn, 1, &n));
  ck_assert(!run_op("tanh", &x, 1, NULL, 0, &th, 1, &n));
  ck_assert(!run_op("exp", &x, 1, NULL, 0, &e, 1, &n));
  ck_assert(!run_op("log", &e, 1, NULL, 0, &l, 1, &n));
  ck_assert(!run_op("gelu", &x, 1, NULL, 0, &g, 1, &n));
  for (int i = 0; i < N; i++) {
    close_to(at_f(&s, i) * at_f(&s, i) + at_f(&c, i) * at_f(&c, i), 1, 1e-12, "sin^2+cos^2");
    close_to(at_f(&sp, i) + at_f(&sn, i), 1, 1e-12, "sigmoid(x)+sigmoid(-x)");
    close_to(at_f(&th, i), 2 * (1 / (1 + exp(-2 * xs[i]))) - 1, 1e-12, "tanh = 2 sigmoid(2x) - 1");
    close_to(at_f(&l, i), xs[i], 1e-12, "log(exp(x))");
    /* gelu(x) - gelu(-x) = x */
    close_to(at_f(&g, i) - at_f(&g, N - 1 - i), xs[i], 1e-12, "gelu odd part");
  }
  op_io_free(&x, 1); op_io_free(&s, 1); op_io_free(&c, 1); op_io_free(&sp, 1); op_io_free(&sn, 1);
  op_io_free(&nx, 1); op_io_free(&th, 1); op_io_free(&e, 1); op_io_free(&l, 1); op_io_free(&g, 1);
}
END_TEST

START_TEST(unary_integers) {
  /* neg/abs/relu on every integer dtype; i8 wraps as two's complement. */
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = INTS[k];
    double v[3] = {d == RILL_U8 ? 200 : -7, 5, 0};
    op_io_t x = tensor_f(T(d, 1, 3), v), y;
    uint32_t n;
    ck_assert(!run_op("relu", &x, 1, NULL, 0, &y, 1, &n));
    ck_assert_int_eq(y.type.dtype, d);
    ck_assert_int_eq(rill_element_get_int(d, y.data, 0), d == RILL_U8 ? 200 : 0);
    ck_assert_int_eq(rill_element_get_int(d, y.data, 1), 5);
    op_io_free(&y, 1);
    ck_assert(!run_op("neg", &x, 1, NULL, 0, &y, 1, &n));
    ck_assert_int_eq(rill_element_get_int(d, y.data, 1), d == RILL_U8 ? 251 : -5);
    op_io_free(&y, 1);
    op_io_free(&x, 1);
  }
  double m = -128;
  op_io_t x = tensor_f(T(RILL_I8, 1, 1), &m), y;
  uint32_t n;
  ck_assert(!run_op("abs", &x, 1, NULL, 0, &y, 1, &n));
  ck_assert_int_eq(rill_element_get_int(RILL_I8, y.data, 0), -128);
  op_io_free(&x, 1);
  op_io_free(&y, 1);
  /* Float-only ops refuse integers with a clear message. */
  op_io_t xi = tensor_f(T(RILL_I32, 1, 2), NULL), yi;
  rill_status_t st = run_op("exp", &xi, 1, NULL, 0, &yi, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "expected a float tensor"));
  rill_status_free(st);
  op_io_free(&xi, 1);
}
END_TEST

/* The integer dtypes of bytecode 1.8 (i16 u16 u32 u64) against values
 * worked by hand as numpy gives them: wraparound, unsigned order (u64
 * above 2^63 is large, not negative), C's remainder, reductions, argmax and
 * topk, casts that saturate from floats and wrap between integers, numpy's
 * promotion, and movement ops keeping every bit. Integers as int64 bits. */
static op_io_t ints_of(rill_dtype_t d, int n, const int64_t *v) {
  op_io_t o = tensor_f(T(d, 1, n), NULL);
  for (int i = 0; i < n; i++) rill_element_set_int(d, o.data, (size_t)i, v[i]);
  return o;
}

static void expect_ints(const char *what, rill_dtype_t d, const op_io_t *y, int n, const int64_t *want) {
  ck_assert_msg(y->type.dtype == d, "%s: dtype %s, want %s", what, rill_dtype_name(y->type.dtype), rill_dtype_name(d));
  for (int i = 0; i < n; i++)
    ck_assert_msg(rill_element_get_int(d, y->data, (size_t)i) == want[i], "%s %s [%d]: got %lld, want %lld", what, rill_dtype_name(d), i,
                  (long long)rill_element_get_int(d, y->data, (size_t)i), (long long)want[i]);
}

START_TEST(new_integer_dtypes) {
  const int64_t H = INT64_MIN; /* 2^63 as u64 bits */
  static const struct {
    rill_dtype_t d;
    int64_t a[4], b[4], add[4], sub[4], mul[4], fmod[4], max[4], lt[4];
  } C[] = {
      {RILL_I16, {32767, -5, 7, -32768}, {1, 3, -2, -1}, {-32768, -2, 5, 32767}, {32766, -8, 9, -32767}, {32767, -15, -14, -32768},
       {0, -2, 1, 0}, {32767, 3, 7, -1}, {0, 1, 0, 1}},
      {RILL_U16, {65535, 5, 7, 0}, {1, 3, 2, 1}, {0, 8, 9, 1}, {65534, 2, 5, 65535}, {65535, 15, 14, 0}, {0, 2, 1, 0}, {65535, 5, 7, 1}, {0, 0, 0, 1}},
      {RILL_U32, {4294967295, 5, 7, 0}, {1, 3, 2, 1}, {0, 8, 9, 1}, {4294967294, 2, 5, 4294967295}, {4294967295, 15, 14, 0}, {0, 2, 1, 0},
       {4294967295, 5, 7, 1}, {0, 0, 0, 1}},
      {RILL_U64, {-1, 5, H + 7, 0}, {1, 3, 2, H}, {0, 8, H + 9, H}, {-2, 2, H + 5, H}, {-1, 15, 14, 0}, {0, 2, 1, 0}, {-1, 5, H + 7, H},
       {0, 0, 0, 1}},
  };
  uint32_t n;
  for (size_t k = 0; k < sizeof C / sizeof C[0]; k++) {
    rill_dtype_t d = C[k].d;
    op_io_t ab[2] = {ints_of(d, 4, C[k].a), ints_of(d, 4, C[k].b)}, y;
    const char *ops[] = {"add", "sub", "mul", "fmod", "maximum", "lt"};
    const int64_t *want[] = {C[k].add, C[k].sub, C[k].mul, C[k].fmod, C[k].max, C[k].lt};
    for (int o = 0; o < 6; o++) {
      ck_assert(!run_op(ops[o], ab, 2, NULL, 0, &y, 1, &n));
      expect_ints(ops[o], o == 5 ? RILL_BOOL : d, &y, 4, want[o]);
      op_io_free(&y, 1);
    }
    /* reductions: sum wraps (in i64, u64 in u64); max and min in value order; argmax; topk */
    ck_assert(!run_op("sum", ab, 1, NULL, 0, &y, 1, &n));
    int64_t s = 0;
    for (int i = 0; i < 4; i++) s = (int64_t)((uint64_t)s + (uint64_t)C[k].a[i]);
    expect_ints("sum", d == RILL_U64 ? RILL_U64 : RILL_I64, &y, 1, &s);
    op_io_free(&y, 1);
    int64_t mx = d == RILL_I16 ? 32767 : C[k].a[0], mn = d == RILL_I16 ? -32768 : 0, am = 0;
    ck_assert(!run_op("max", ab, 1, NULL, 0, &y, 1, &n));
    expect_ints("max", d, &y, 1, &mx);
    op_io_free(&y, 1);
    ck_assert(!run_op("min", ab, 1, NULL, 0, &y, 1, &n));
    expect_ints("min", d, &y, 1, &mn);
    op_io_free(&y, 1);
    ck_assert(!run_op("argmax", ab, 1, NULL, 0, &y, 1, &n));
    expect_ints("argmax", RILL_I64, &y, 1, &am);
    op_io_free(&y, 1);
    isa_attr_t ka = attr_int("k", 2);
    op_io_t tk[2];
    ck_assert(!run_op("topk", &ab[1], 1, &ka, 1, tk, 2, &n));
    /* b's two largest: i16 {3, 1}, unsigned {3, 2}, u64 {2^63, 3} */
    int64_t tv[2] = {d == RILL_U64 ? H : 3, d == RILL_I16 ? 1 : d == RILL_U64 ? 1 : 2}, ti[2] = {d == RILL_U64 ? 3 : 1, d == RILL_U64 ? 1 : d == RILL_I16 ? 0 : 2};
    if (d == RILL_U64) tv[1] = 3;
    expect_ints("topk values", d, &tk[0], 2, tv);
    expect_ints("topk indices", RILL_I64, &tk[1], 2, ti);
    op_io_free(tk, 2);
    /* movement: transpose, concat, slice, gather keep the bits */
    op_io_t x2 = ints_of(d, 4, C[k].a);
    x2.type = T(d, 2, 2, 2);
    isa_attr_t perm = attr_ints("perm", 2, (int64_t[]){1, 0});
    ck_assert(!run_op("transpose", &x2, 1, &perm, 1, &y, 1, &n));
    expect_ints("transpose", d, &y, 4, (int64_t[]){C[k].a[0], C[k].a[2], C[k].a[1], C[k].a[3]});
    op_io_free(&y, 1);
    op_io_free(&x2, 1);
    ck_assert(!run_op("concat", ab, 2, NULL, 0, &y, 1, &n));
    expect_ints("concat", d, &y, 4, C[k].a);
    ck_assert(rill_element_get_int(d, y.data, 7) == C[k].b[3]);
    op_io_free(&y, 1);
    op_io_t gi[2] = {ab[0], ints_of(RILL_I64, 3, (int64_t[]){2, 0, 2})};
    ck_assert(!run_op("gather", gi, 2, NULL, 0, &y, 1, &n));
    expect_ints("gather", d, &y, 3, (int64_t[]){C[k].a[2], C[k].a[0], C[k].a[2]});
    op_io_free(&y, 1);
    op_io_free(&gi[1], 1);
    op_io_free(ab, 2);
  }
  /* u64: clip's negative bound is 0, a remainder by 2^64 - 1 is the dividend, casts from and to floats */
  op_io_t u = ints_of(RILL_U64, 4, C[3].a), y;
  isa_attr_t cl[2] = {attr_float("min", -3), attr_float("max", 10)};
  ck_assert(!run_op("clip", &u, 1, cl, 2, &y, 1, &n));
  expect_ints("clip", RILL_U64, &y, 4, (int64_t[]){10, 5, 10, 0});
  op_io_free(&y, 1);
  op_io_t m2[2] = {u, ints_of(RILL_U64, 4, (int64_t[]){-1, -1, -1, -1})};
  ck_assert(!run_op("fmod", m2, 2, NULL, 0, &y, 1, &n));
  expect_ints("fmod by 2^64-1", RILL_U64, &y, 4, (int64_t[]){0, 5, H + 7, 0});
  op_io_free(&y, 1);
  op_io_free(&m2[1], 1);
  isa_attr_t f64 = {"dtype", ISA_ATTR_DTYPE, 1, (int64_t[]){RILL_F64}, NULL, NULL};
  ck_assert(!run_op("cast", &u, 1, &f64, 1, &y, 1, &n));
  ck_assert(at_f(&y, 0) == 18446744073709551615.0 && at_f(&y, 2) == 9223372036854775815.0);
  op_io_free(&y, 1);
  op_io_free(&u, 1);
  op_io_t f = tensor_f(T(RILL_F64, 1, 4), (double[]){-1.5, 1e20, 3e9, 70000.7});
  const rill_dtype_t to[] = {RILL_U64, RILL_U32, RILL_U16, RILL_I16};
  const int64_t sat[][4] = {{0, -1, 3000000000, 70000}, {0, 4294967295, 3000000000, 70000}, {0, 65535, 65535, 65535}, {-1, 32767, 32767, 32767}};
  for (int k = 0; k < 4; k++) {
    isa_attr_t at = {"dtype", ISA_ATTR_DTYPE, 1, (int64_t[]){to[k]}, NULL, NULL};
    ck_assert(!run_op("cast", &f, 1, &at, 1, &y, 1, &n));
    expect_ints("cast from f64 (saturating)", to[k], &y, 4, sat[k]);
    op_io_free(&y, 1);
  }
  op_io_free(&f, 1);
  /* numpy's promotion */
  static const rill_dtype_t pr[][3] = {{RILL_U8, RILL_I8, RILL_I16},   {RILL_U16, RILL_I16, RILL_I32}, {RILL_U32, RILL_I32, RILL_I64},
                                       {RILL_U64, RILL_I64, RILL_F64}, {RILL_U16, RILL_U32, RILL_U32}, {RILL_I16, RILL_U8, RILL_I16},
                                       {RILL_U32, RILL_I8, RILL_I64},  {RILL_U64, RILL_U8, RILL_U64}};
  for (size_t k = 0; k < sizeof pr / sizeof pr[0]; k++) {
    op_io_t p2[2] = {ints_of(pr[k][0], 1, (int64_t[]){200}), ints_of(pr[k][1], 1, (int64_t[]){100})};
    ck_assert(!run_op("add", p2, 2, NULL, 0, &y, 1, &n));
    ck_assert_msg(y.type.dtype == pr[k][2], "%s + %s: %s", rill_dtype_name(pr[k][0]), rill_dtype_name(pr[k][1]), rill_dtype_name(y.type.dtype));
    ck_assert(at_f(&y, 0) == at_f(&p2[0], 0) + at_f(&p2[1], 0));
    op_io_free(&y, 1);
    op_io_free(p2, 2);
  }
}
END_TEST

START_TEST(cast_all_pairs) {
  double v[4] = {1.5, -1.5, 0, 100};
  for (int a = 0; a < RILL_DTYPE_COUNT; a++)
    for (int b = 0; b < RILL_DTYPE_COUNT; b++) {
      rill_dtype_t da = (rill_dtype_t)a, db = (rill_dtype_t)b;
      op_io_t x = tensor_f(T(da, 1, 4), v), y;
      isa_attr_t at = {"dtype", ISA_ATTR_DTYPE, 1, (int64_t[]){db}, NULL, NULL};
      uint32_t n;
      ck_assert(!run_op("cast", &x, 1, &at, 1, &y, 1, &n));
      ck_assert_int_eq(y.type.dtype, db);
      for (int i = 0; i < 4; i++) {
        double src = at_f(&x, i), got = at_f(&y, i), want;
        if (db == RILL_BOOL) want = src != 0;
        else if (rill__dtypes[db].is_int) want = trunc(src);
        else want = src;
        /* unsigned: saturates from floats, wraps from ints (-1 is 2^bits - 1) */
        if (rill__dtypes[db].is_int && !rill__dtypes[db].is_signed && src < 0)
          want = rill__dtypes[da].is_float ? 0 : ldexp(1, 8 * (int)rill_dtype_size(db)) + src;
        char what[64];
        snprintf(what, sizeof what, "cast %s->%s of %g", rill_dtype_name(da), rill_dtype_name(db), src);
        close_to(got, want, tol(db == RILL_BOOL ? RILL_F64 : db), what);
      }
      op_io_free(&x, 1);
      op_io_free(&y, 1);
    }
}
END_TEST

START_TEST(binary_broadcast_and_promotion) {
  double a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30};
  op_io_t A = tensor_f(T(RILL_F32, 2, 2, 3), a), B = tensor_f(T(RILL_F32, 1, 3), b), Y;
  uint32_t n;
  ck_assert(!run_op("add", (op_io_t[]){A, B}, 2, NULL, 0, &Y, 1, &n));
  ck_assert_int_eq(Y.type.rank, 2);
  double want[6] = {11, 22, 33, 14, 25, 36};
  for (int i = 0; i < 6; i++) ck_assert(at_f(&Y, i) == want[i]);
  op_io_free(&Y, 1);
  ck_assert(!run_op("sub", (op_io_t[]){B, A}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(at_f(&Y, 4) == 15);
  op_io_free(&Y, 1);
  /* [2,1] x [1,3] -> [2,3] */
  op_io_t C = tensor_f(T(RILL_F32, 2, 2, 1), (double[]){2, 3}), D = tensor_f(T(RILL_F32, 2, 1, 3), b);
  ck_assert(!run_op("mul", (op_io_t[]){C, D}, 2, NULL, 0, &Y, 1, &n));
  double w2[6] = {20, 40, 60, 30, 60, 90};
  for (int i = 0; i < 6; i++) ck_assert(at_f(&Y, i) == w2[i]);
  op_io_free(&Y, 1);
  /* integer division is true division into f32 */
  op_io_t I = tensor_f(T(RILL_I64, 1, 2), (double[]){7, -7}), J = tensor_f(T(RILL_I64, 1, 1), (double[]){2});
  ck_assert(!run_op("div", (op_io_t[]){I, J}, 2, NULL, 0, &Y, 1, &n));
  ck_assert_int_eq(Y.type.dtype, RILL_F32);
  ck_assert(at_f(&Y, 0) == 3.5 && at_f(&Y, 1) == -3.5);
  op_io_free(&Y, 1);
  /* promotion: i32 with f16 is f16; f16 with bf16 is f32; a 0-d f64 does not widen f16 */
  op_io_t H = tensor_f(T(RILL_F16, 1, 2), (double[]){1, 2}), Ii = tensor_f(T(RILL_I32, 1, 2), (double[]){3, 4});
  op_io_t Bf = tensor_f(T(RILL_BF16, 1, 2), (double[]){1, 1}), S = tensor_f(T(RILL_F64, 0), (double[]){0.5});
  ck_assert(!run_op("add", (op_io_t[]){H, Ii}, 2, NULL, 0, &Y, 1, &n));
  ck_assert_int_eq(Y.type.dtype, RILL_F16);
  ck_assert(at_f(&Y, 1) == 6);
  op_io_free(&Y, 1);
  ck_assert(!run_op("add", (op_io_t[]){H, Bf}, 2, NULL, 0, &Y, 1, &n));
  ck_assert_int_eq(Y.type.dtype, RILL_F32);
  op_io_free(&Y, 1);
  ck_assert(!run_op("mul", (op_io_t[]){H, S}, 2, NULL, 0, &Y, 1, &n));
  ck_assert_int_eq(Y.type.dtype, RILL_F16);
  ck_assert(at_f(&Y, 1) == 1);
  op_io_free(&Y, 1);
  /* shape errors name both shapes */
  op_io_t E = tensor_f(T(RILL_F32, 1, 4), NULL);
  rill_status_t st = run_op("add", (op_io_t[]){A, E}, 2, NULL, 0, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "f32[2,3] and f32[4] do not broadcast"));
  rill_status_free(st);
  op_io_free(&A, 1); op_io_free(&B, 1); op_io_free(&C, 1); op_io_free(&D, 1); op_io_free(&I, 1); op_io_free(&J, 1);
  op_io_free(&H, 1); op_io_free(&Ii, 1); op_io_free(&Bf, 1); op_io_free(&S, 1); op_io_free(&E, 1);
}
END_TEST

START_TEST(binary_semantics) {
  uint32_t n;
  op_io_t Y;
  /* maximum and minimum propagate NaN; pow; comparisons and logic give bool */
  op_io_t a = tensor_f(T(RILL_F32, 1, 3), (double[]){1, NAN, -2}), b = tensor_f(T(RILL_F32, 1, 3), (double[]){3, 0, -5});
  ck_assert(!run_op("maximum", (op_io_t[]){a, b}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 3 && isnan(at_f(&Y, 1)) && at_f(&Y, 2) == -2);
  op_io_free(&Y, 1);
  ck_assert(!run_op("minimum", (op_io_t[]){a, b}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 1 && isnan(at_f(&Y, 1)) && at_f(&Y, 2) == -5);
  op_io_free(&Y, 1);
  const char *cmp[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  int want[6][3] = {{0, 0, 0}, {1, 1, 1}, {1, 0, 0}, {1, 0, 0}, {0, 0, 1}, {0, 0, 1}};
  for (int k = 0; k < 6; k++) {
    ck_assert(!run_op(cmp[k], (op_io_t[]){a, b}, 2, NULL, 0, &Y, 1, &n));
    ck_assert_int_eq(Y.type.dtype, RILL_BOOL);
    for (int i = 0; i < 3; i++) ck_assert_msg(((uint8_t *)Y.data)[i] == want[k][i], "%s[%d]", cmp[k], i);
    op_io_free(&Y, 1);
  }
  op_io_t p = tensor_f(T(RILL_I32, 1, 3), (double[]){2, 3, -2}), q = tensor_f(T(RILL_I32, 1, 3), (double[]){10, 0, 3});
  ck_assert(!run_op("pow", (op_io_t[]){p, q}, 2, NULL, 0, &Y, 1, &n));
  ck_assert_int_eq(rill_element_get_int(RILL_I32, Y.data, 0), 1024);
  ck_assert_int_eq(rill_element_get_int(RILL_I32, Y.data, 1), 1);
  ck_assert_int_eq(rill_element_get_int(RILL_I32, Y.data, 2), -8);
  op_io_free(&Y, 1);
  op_io_t t = tensor_f(T(RILL_BOOL, 1, 4), (double[]){0, 1, 0, 1}), u = tensor_f(T(RILL_BOOL, 1, 4), (double[]){0, 0, 1, 1});
  ck_assert(!run_op("logical_and", (op_io_t[]){t, u}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(!memcmp(Y.data, (uint8_t[]){0, 0, 0, 1}, 4));
  op_io_free(&Y, 1);
  ck_assert(!run_op("logical_or", (op_io_t[]){t, u}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(!memcmp(Y.data, (uint8_t[]){0, 1, 1, 1}, 4));
  op_io_free(&Y, 1);
  ck_assert(!run_op("logical_not", &t, 1, NULL, 0, &Y, 1, &n));
  ck_assert(!memcmp(Y.data, (uint8_t[]){1, 0, 1, 0}, 4));
  op_io_free(&Y, 1);
  /* where(cond, a, b) with broadcasting */
  op_io_t c = tensor_f(T(RILL_BOOL, 1, 3), (double[]){1, 0, 1}), z = tensor_f(T(RILL_F32, 0), (double[]){7});
  ck_assert(!run_op("where", (op_io_t[]){c, b, z}, 3, NULL, 0, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 3 && at_f(&Y, 1) == 7 && at_f(&Y, 2) == -5);
  op_io_free(&Y, 1);
  op_io_free(&a, 1); op_io_free(&b, 1); op_io_free(&p, 1); op_io_free(&q, 1); op_io_free(&t, 1); op_io_free(&u, 1);
  op_io_free(&c, 1); op_io_free(&z, 1);
}
END_TEST

START_TEST(reductions) {
  uint32_t n;
  op_io_t Y;
  double v[6] = {1, 2, 3, 4, 5, 6};
  op_io_t x = tensor_f(T(RILL_F32, 2, 2, 3), v);
  isa_attr_t ax1[2] = {attr_ints("axes", 1, (int64_t[]){-1}), attr_bool("keepdims", true)};
  ck_assert(!run_op("sum", &x, 1, ax1, 2, &Y, 1, &n));
  ck_assert(Y.type.rank == 2 && Y.type.dims[0] == 2 && Y.type.dims[1] == 1);
  ck_assert(at_f(&Y, 0) == 6 && at_f(&Y, 1) == 15);
  op_io_free(&Y, 1);
  isa_attr_t ax0 = attr_ints("axes", 1, (int64_t[]){0});
  ck_assert(!run_op("mean", &x, 1, &ax0, 1, &Y, 1, &n));
  ck_assert(Y.type.rank == 1 && at_f(&Y, 0) == 2.5 && at_f(&Y, 2) == 4.5);
  op_io_free(&Y, 1);
  ck_assert(!run_op("max", &x, 1, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.rank == 0 && at_f(&Y, 0) == 6);
  op_io_free(&Y, 1);
  ck_assert(!run_op("min", &x, 1, &ax0, 1, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 1 && at_f(&Y, 1) == 2);
  op_io_free(&Y, 1);
  /* sums of integers and bools are i64, as in PyTorch */
  op_io_t b = tensor_f(T(RILL_BOOL, 1, 4), (double[]){1, 0, 1, 1});
  ck_assert(!run_op("sum", &b, 1, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.dtype == RILL_I64 && rill_element_get_int(RILL_I64, Y.data, 0) == 3);
  op_io_free(&Y, 1);
  /* argmax: first of ties, NaN counts as largest, flattened without axis */
  op_io_t m = tensor_f(T(RILL_F32, 2, 2, 3), (double[]){1, 5, 5, NAN, 0, 9});
  isa_attr_t a1 = attr_int("axis", 1);
  ck_assert(!run_op("argmax", &m, 1, &a1, 1, &Y, 1, &n));
  ck_assert(Y.type.dtype == RILL_I64 && rill_element_get_int(RILL_I64, Y.data, 0) == 1 && rill_element_get_int(RILL_I64, Y.data, 1) == 0);
  op_io_free(&Y, 1);
  ck_assert(!run_op("argmax", &x, 1, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.rank == 0 && rill_element_get_int(RILL_I64, Y.data, 0) == 5);
  op_io_free(&Y, 1);
  /* duplicate axes are an error */
  isa_attr_t dup = attr_ints("axes", 2, (int64_t[]){1, -1});
  rill_status_t st = run_op("sum", &x, 1, &dup, 1, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "given twice"));
  rill_status_free(st);
  op_io_free(&x, 1); op_io_free(&b, 1); op_io_free(&m, 1);
}
END_TEST

START_TEST(normalisation) {
  uint32_t n;
  op_io_t Y, L;
  double v[8] = {1, 2, 3, 4, -1, 0, 1, 100};
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = FLOATS[k];
    op_io_t x = tensor_f(T(d, 2, 2, 4), v);
    ck_assert(!run_op("softmax", &x, 1, NULL, 0, &Y, 1, &n));
    ck_assert(!run_op("log_softmax", &x, 1, NULL, 0, &L, 1, &n));
    for (int r = 0; r < 2; r++) {
      double s = 0;
      for (int i = 0; i < 4; i++) {
        s += at_f(&Y, r * 4 + i);
        if (at_f(&Y, r * 4 + i) > 1e-3) close_to(at_f(&L, r * 4 + i), log(at_f(&Y, r * 4 + i)), 4 * tol(d), "log_softmax = log softmax");
      }
      close_to(s, 1, 4 * tol(d), "softmax rows sum to 1");
    }
    close_to(at_f(&Y, 0), exp(1) / (exp(1) + exp(2) + exp(3) + exp(4)), tol(d), "softmax value");
    op_io_free(&Y, 1);
    op_io_free(&L, 1);
    /* `divisor` and `scale`: the softmax of x / 4 and of x * 0.25 (exact here) */
    isa_attr_t dv = attr_float("divisor", 4), sc = attr_float("scale", 0.25);
    ck_assert(!run_op("softmax", &x, 1, &dv, 1, &Y, 1, &n));
    ck_assert(!run_op("log_softmax", &x, 1, &sc, 1, &L, 1, &n));
    close_to(at_f(&Y, 0), exp(0.25) / (exp(0.25) + exp(0.5) + exp(0.75) + exp(1)), tol(d), "softmax {divisor=4}");
    close_to(at_f(&L, 0), 0.25 - log(exp(0.25) + exp(0.5) + exp(0.75) + exp(1)), 4 * tol(d), "log_softmax {scale=0.25}");
    op_io_free(&Y, 1);
    op_io_free(&L, 1);
    /* layer_norm: each row has mean 0 and variance 1, then gamma and beta */
    op_io_t g = tensor_f(T(d, 1, 4), (double[]){2, 2, 2, 2}), bt = tensor_f(T(d, 1, 4), (double[]){1, 1, 1, 1});
    isa_attr_t eps = attr_float("eps", 0);
    ck_assert(!run_op("layer_norm", (op_io_t[]){x, g, bt}, 3, &eps, 1, &Y, 1, &n));
    for (int r = 0; r < 2; r++) {
      double mean = 0, var = 0;
      for (int i = 0; i < 4; i++) mean += (at_f(&Y, r * 4 + i) - 1) / 2;
      for (int i = 0; i < 4; i++) var += pow((at_f(&Y, r * 4 + i) - 1) / 2 - mean / 4, 2);
      close_to(mean / 4, 0, 8 * tol(d), "layer_norm mean");
      close_to(var / 4, 1, 8 * tol(d), "layer_norm variance");
    }
    /* with a residual z: the norm of x + z (exact in every dtype here; z no
     * multiple of x, so a z ignored or added twice shows) */
    static const double zv[8] = {0.5, -1, 2, 0.25, 3, 1, -2, 7};
    double sv[8];
    for (int i = 0; i < 8; i++) sv[i] = v[i] + zv[i];
    op_io_t Z, z = tensor_f(T(d, 2, 2, 4), zv), x2 = tensor_f(T(d, 2, 2, 4), sv);
    ck_assert(!run_op("layer_norm", (op_io_t[]){x, g, bt, z}, 4, &eps, 1, &Z, 1, &n));
    op_io_free(&Y, 1);
    ck_assert(!run_op("layer_norm", (op_io_t[]){x2, g, bt}, 3, &eps, 1, &Y, 1, &n));
    for (int i = 0; i < 8; i++) close_to(at_f(&Z, i), at_f(&Y, i), 0, "layer_norm(x, g, b, z) = layer_norm(x + z, g, b)");
    op_io_free(&z, 1);
    /* z must have x's type */
    rill_status_t st = run_op("layer_norm", (op_io_t[]){x, g, bt, g}, 4, &eps, 1, &L, 1, &n);
    ck_assert_msg(st && strstr(rill_status_message(st), "residual: expected"), "%s", st ? rill_status_message(st) : "accepted");
    rill_status_free(st);
    op_io_free(&Z, 1);
    op_io_free(&x2, 1);
    op_io_free(&Y, 1);
    op_io_free(&g, 1);
    op_io_free(&bt, 1);
    op_io_free(&x, 1);
  }
  /* batch_norm: (x - mean) / sqrt(var + eps) * scale + bias per channel */
  op_io_t x = tensor_f(T(RILL_F32, 4, 1, 2, 1, 2), (double[]){1, 3, 10, 20});
  op_io_t sc = tensor_f(T(RILL_F32, 1, 2), (double[]){2, 1}), bi = tensor_f(T(RILL_F32, 1, 2), (double[]){0, 5});
  op_io_t mu = tensor_f(T(RILL_F32, 1, 2), (double[]){2, 10}), va = tensor_f(T(RILL_F32, 1, 2), (double[]){4, 25});
  isa_attr_t eps = attr_float("eps", 0);
  ck_assert(!run_op("batch_norm", (op_io_t[]){x, sc, bi, mu, va}, 5, &eps, 1, &Y, 1, &n));
  double want[4] = {-1, 1, 5, 7};
  for (int i = 0; i < 4; i++) close_to(at_f(&Y, i), want[i], 1e-6, "batch_norm");
  op_io_free(&Y, 1);
  op_io_free(&x, 1); op_io_free(&sc, 1); op_io_free(&bi, 1); op_io_free(&mu, 1); op_io_free(&va, 1);
}
END_TEST

START_TEST(linear_algebra) {
  uint32_t n;
  op_io_t Y;
  rill_status_t st;
  op_io_t a = tensor_f(T(RILL_F32, 2, 2, 3), (double[]){1, 2, 3, 4, 5, 6});
  op_io_t b = tensor_f(T(RILL_F32, 2, 3, 2), (double[]){7, 8, 9, 10, 11, 12});
  ck_assert(!run_op("matmul", (op_io_t[]){a, b}, 2, NULL, 0, &Y, 1, &n));
  double w[4] = {58, 64, 139, 154};
  for (int i = 0; i < 4; i++) ck_assert(at_f(&Y, i) == w[i]);
  op_io_free(&Y, 1);
  /* vector @ matrix and matrix @ vector drop the vector's dimension */
  op_io_t v = tensor_f(T(RILL_F32, 1, 3), (double[]){1, 0, -1});
  ck_assert(!run_op("matmul", (op_io_t[]){a, v}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.rank == 1 && Y.type.dims[0] == 2 && at_f(&Y, 0) == -2 && at_f(&Y, 1) == -2);
  op_io_free(&Y, 1);
  /* batched with broadcasting: [2,1,2,3] @ [3,3,2] -> [2,3,2,2]; each slice matches the 2-D product */
  double av[12], bv[18];
  for (int i = 0; i < 12; i++) av[i] = i - 5;
  for (int i = 0; i < 18; i++) bv[i] = (i % 7) - 3;
  op_io_t A = tensor_f(T(RILL_F64, 4, 2, 1, 2, 3), av), B = tensor_f(T(RILL_F64, 3, 3, 3, 2), bv);
  ck_assert(!run_op("matmul", (op_io_t[]){A, B}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.rank == 4 && Y.type.dims[0] == 2 && Y.type.dims[1] == 3 && Y.type.dims[2] == 2 && Y.type.dims[3] == 2);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int r = 0; r < 2; r++)
        for (int c = 0; c < 2; c++) {
          double s = 0;
          for (int k = 0; k < 3; k++) s += av[i * 6 + r * 3 + k] * bv[j * 6 + k * 2 + c];
          ck_assert(at_f(&Y, ((i * 3 + j) * 2 + r) * 2 + c) == s);
        }
  op_io_free(&Y, 1);
  /* linear(x, w, b) = x w^T + b, in integers too */
  op_io_t x = tensor_f(T(RILL_I64, 2, 1, 3), (double[]){1, 2, 3});
  op_io_t W = tensor_f(T(RILL_I64, 2, 2, 3), (double[]){1, 0, 0, 1, 1, 1}), bb = tensor_f(T(RILL_I64, 1, 2), (double[]){100, 0});
  ck_assert(!run_op("linear", (op_io_t[]){x, W, bb}, 3, NULL, 0, &Y, 1, &n));
  ck_assert(rill_element_get_int(RILL_I64, Y.data, 0) == 101 && rill_element_get_int(RILL_I64, Y.data, 1) == 6);
  op_io_free(&Y, 1);
  /* weight="kn": w [in, out] read as it lies gives what the transposed
   * weight gives by default, bit for bit (the same sums in the same order),
   * in f32 (read without a widened copy), f64, f16 and integers; "nk" is the
   * default; wrong sizes and values are errors that say what was expected */
  {
    isa_attr_t kn = {"weight", ISA_ATTR_STRING, 1, NULL, NULL, "kn"}, nk = {"weight", ISA_ATTR_STRING, 1, NULL, NULL, "nk"};
    rill_dtype_t dts[] = {RILL_F32, RILL_F64, RILL_F16, RILL_I32};
    double xv[2 * 5], wv[5 * 3], wt[3 * 5], bias3[3] = {0.5, -1, 0.25};
    for (int i = 0; i < 10; i++) xv[i] = (i * 7 % 11) * 0.37 - 1.5;
    for (int k = 0; k < 5; k++)
      for (int o = 0; o < 3; o++) wv[k * 3 + o] = wt[o * 5 + k] = ((k * 3 + o) * 5 % 13) * 0.21 - 1.1;
    for (int d = 0; d < 4; d++) {
      if (dts[d] == RILL_I32) {
        for (int i = 0; i < 10; i++) xv[i] = i - 4;
        for (int k = 0; k < 5; k++)
          for (int o = 0; o < 3; o++) wv[k * 3 + o] = wt[o * 5 + k] = (k + 2 * o) % 5 - 2;
        bias3[0] = 3, bias3[1] = -2, bias3[2] = 1;
      }
      op_io_t X = tensor_f(T(dts[d], 2, 2, 5), xv), Wkn = tensor_f(T(dts[d], 2, 5, 3), wv), Wnk = tensor_f(T(dts[d], 2, 3, 5), wt),
              Bb = tensor_f(T(dts[d], 1, 3), bias3), Y1, Y2, Y3;
      ck_assert(!run_op("linear", (op_io_t[]){X, Wkn, Bb}, 3, &kn, 1, &Y1, 1, &n));
      ck_assert(!run_op("linear", (op_io_t[]){X, Wnk, Bb}, 3, NULL, 0, &Y2, 1, &n));
      ck_assert(!run_op("linear", (op_io_t[]){X, Wnk, Bb}, 3, &nk, 1, &Y3, 1, &n));
      ck_assert(Y1.type.rank == 2 && Y1.type.dims[0] == 2 && Y1.type.dims[1] == 3);
      ck_assert(!memcmp(Y1.data, Y2.data, 6 * rill_dtype_size(dts[d])) && !memcmp(Y2.data, Y3.data, 6 * rill_dtype_size(dts[d])));
      op_io_free(&Y1, 1); op_io_free(&Y2, 1); op_io_free(&Y3, 1);
      /* linear(x, w, b, z): the product and bias rounded, then z added and rounded, as an add after it gives, bit for
       * bit (z no multiple of the product, so a z ignored or added twice shows); with relu, relu of that sum */
      {
        double zv[6] = {0.75, -2, 1.5, 3, -0.5, 0.125};
        if (dts[d] == RILL_I32) zv[0] = 2147483647, zv[3] = -2147483647; /* sums that wrap, as add's do */
        op_io_t Z = tensor_f(T(dts[d], 2, 2, 3), zv), P, S, R, Ra, Q;
        ck_assert(!run_op("linear", (op_io_t[]){X, Wnk, Bb, Z}, 4, NULL, 0, &R, 1, &n));
        ck_assert(!run_op("linear", (op_io_t[]){X, Wnk, Bb}, 3, NULL, 0, &P, 1, &n));
        ck_assert(!run_op("add", (op_io_t[]){P, Z}, 2, NULL, 0, &S, 1, &n));
        ck_assert_msg(!memcmp(R.data, S.data, 6 * rill_dtype_size(dts[d])), "linear with z, %s", rill_dtype_name(dts[d]));
        if (dts[d] != RILL_I32) {
          isa_attr_t relu = {"activation", ISA_ATTR_STRING, 1, NULL, NULL, "relu"};
          ck_assert(!run_op("linear", (op_io_t[]){X, Wnk, Bb, Z}, 4, &relu, 1, &Ra, 1, &n));
          ck_assert(!run_op("relu", (op_io_t[]){S}, 1, NULL, 0, &Q, 1, &n));
          ck_assert(!memcmp(Ra.data, Q.data, 6 * rill_dtype_size(dts[d])));
          op_io_free(&Ra, 1); op_io_free(&Q, 1);
        }
        /* z must have y's type */
        st = run_op("linear", (op_io_t[]){X, Wnk, Bb, Bb}, 4, NULL, 0, &Ra, 1, &n);
        ck_assert_msg(st && strstr(rill_status_message(st), "residual: expected"), "%s", st ? rill_status_message(st) : "accepted");
        rill_status_free(st);
        op_io_free(&Z, 1); op_io_free(&P, 1); op_io_free(&S, 1); op_io_free(&R, 1);
      }
      if (d == 0) {
        st = run_op("linear", (op_io_t[]){X, Wnk, Bb}, 3, &kn, 1, &Y1, 1, &n); /* [3,5] read as [in, out]: in is 3, not 5 */
        ck_assert(st && strstr(rill_status_message(st), "weight: expected f32[5,out], found f32[3,5]"));
        rill_status_free(st);
        isa_attr_t bad = {"weight", ISA_ATTR_STRING, 1, NULL, NULL, "kk"};
        st = run_op("linear", (op_io_t[]){X, Wkn, Bb}, 3, &bad, 1, &Y1, 1, &n);
        ck_assert(st && strstr(rill_status_message(st), "attribute 'weight' expects \"nk\" or \"kn\", found \"kk\""));
        rill_status_free(st);
      }
      op_io_free(&X, 1); op_io_free(&Wkn, 1); op_io_free(&Wnk, 1); op_io_free(&Bb, 1);
    }
  }
  st = run_op("matmul", (op_io_t[]){a, a}, 2, NULL, 0, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "inner dimensions differ"));
  rill_status_free(st);
  op_io_free(&a, 1); op_io_free(&b, 1); op_io_free(&v, 1); op_io_free(&A, 1); op_io_free(&B, 1);
  op_io_free(&x, 1); op_io_free(&W, 1); op_io_free(&bb, 1);
}
END_TEST

START_TEST(convolution) {
  uint32_t n;
  op_io_t Y;
  /* 3x3 all-ones kernel, padding 1: each output sums its neighbourhood */
  double xv[16];
  for (int i = 0; i < 16; i++) xv[i] = i;
  double ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  for (size_t k = 0; k < 4; k++) {
    rill_dtype_t d = FLOATS[k];
    op_io_t x = tensor_f(T(d, 4, 1, 1, 4, 4), xv), w = tensor_f(T(d, 4, 1, 1, 3, 3), ones);
    isa_attr_t pad = attr_ints("padding", 2, (int64_t[]){1, 1});
    ck_assert(!run_op("conv2d", (op_io_t[]){x, w}, 2, &pad, 1, &Y, 1, &n));
    ck_assert(Y.type.dims[2] == 4 && Y.type.dims[3] == 4);
    close_to(at_f(&Y, 0), 0 + 1 + 4 + 5, tol(d), "corner");
    close_to(at_f(&Y, 5), 0 + 1 + 2 + 4 + 5 + 6 + 8 + 9 + 10, tol(d), "inside");
    op_io_free(&Y, 1);
    op_io_free(&x, 1);
    op_io_free(&w, 1);
  }
  /* stride 2, asymmetric padding, dilation 2, bias */
  op_io_t x = tensor_f(T(RILL_F64, 4, 1, 1, 4, 4), xv), w = tensor_f(T(RILL_F64, 4, 1, 1, 2, 2), (double[]){1, 0, 0, -1});
  op_io_t bias = tensor_f(T(RILL_F64, 1, 1), (double[]){0.5});
  isa_attr_t at[3] = {attr_ints("stride", 2, (int64_t[]){2, 2}), attr_ints("padding", 4, (int64_t[]){0, 0, 1, 1}),
                      attr_ints("dilation", 2, (int64_t[]){2, 2})};
  ck_assert(!run_op("conv2d", (op_io_t[]){x, w, bias}, 3, at, 3, &Y, 1, &n));
  /* out = floor((4 + 1 - 2*1 - 1)/2) + 1 = 2; out[i][j] = x[2i][2j] - x[2i+2][2j+2] + 0.5 (0 when out of range) */
  ck_assert(Y.type.dims[2] == 2 && Y.type.dims[3] == 2);
  ck_assert(at_f(&Y, 0) == 0 - 10 + 0.5 && at_f(&Y, 1) == 2 - 0 + 0.5 && at_f(&Y, 3) == 10 + 0.5);
  op_io_free(&Y, 1);
  /* groups: a depthwise 1x1 conv scales each channel */
  op_io_t x2 = tensor_f(T(RILL_F32, 4, 1, 2, 1, 2), (double[]){1, 2, 3, 4}), w2 = tensor_f(T(RILL_F32, 4, 2, 1, 1, 1), (double[]){10, 100});
  isa_attr_t g = attr_int("groups", 2);
  ck_assert(!run_op("conv2d", (op_io_t[]){x2, w2}, 2, &g, 1, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 10 && at_f(&Y, 1) == 20 && at_f(&Y, 2) == 300 && at_f(&Y, 3) == 400);
  op_io_free(&Y, 1);
  rill_status_t st = run_op("conv2d", (op_io_t[]){x2, x}, 2, NULL, 0, &Y, 1, &n);
  ck_assert(st != NULL);
  rill_status_free(st);
  op_io_free(&x, 1); op_io_free(&w, 1); op_io_free(&bias, 1); op_io_free(&x2, 1); op_io_free(&w2, 1);
}
END_TEST

/* qmatmul and qconv2d, worked by hand: zero points per tensor and per
 * column, the bias, the requantization with the zero point before rounding
 * (ties to even) and after y_scale, saturation, the dequantized result; a
 * padded position is 0 in x - x_zp; and the operands refused */
START_TEST(quantized_products) {
  uint32_t n;
  op_io_t Y;
  op_io_t a = tensor_f(T(RILL_I8, 2, 2, 2), (double[]){1, -2, 3, 4}), b = tensor_f(T(RILL_U8, 2, 2, 2), (double[]){10, 20, 30, 40});
  op_io_t za = tensor_f(T(RILL_I8, 0), (double[]){1}), zb = tensor_f(T(RILL_U8, 1, 2), (double[]){10, 0});
  op_io_t bias = tensor_f(T(RILL_I32, 1, 2), (double[]){5, -5}), sc = tensor_f(T(RILL_F32, 0), (double[]){0.5});
  op_io_t yz = tensor_f(T(RILL_I8, 0), (double[]){3});
  /* (a - 1) @ (b - [10, 0]) = [[0, -3], [2, 3]] @ [[0, 20], [20, 40]] */
  ck_assert(!run_op("qmatmul", (op_io_t[]){a, b, za, zb}, 4, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.dtype == RILL_I32 && at_f(&Y, 0) == -60 && at_f(&Y, 1) == -120 && at_f(&Y, 2) == 60 && at_f(&Y, 3) == 160);
  op_io_free(&Y, 1);
  /* + bias = [[-55, -125], [65, 155]]; * 0.5 + 3 = -24.5, -59.5, 35.5, 80.5: to even */
  ck_assert(!run_op("qmatmul", (op_io_t[]){a, b, za, zb, bias, sc, yz}, 7, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.dtype == RILL_I8 && at_f(&Y, 0) == -24 && at_f(&Y, 1) == -60 && at_f(&Y, 2) == 36 && at_f(&Y, 3) == 80);
  op_io_free(&Y, 1);
  /* y_scale 0.25: round(acc * 0.5 / 0.25) + 3 = -107, -247, 133, 313, saturated */
  isa_attr_t ys = attr_float("y_scale", 0.25);
  ck_assert(!run_op("qmatmul", (op_io_t[]){a, b, za, zb, bias, sc, yz}, 7, &ys, 1, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == -107 && at_f(&Y, 1) == -128 && at_f(&Y, 2) == 127 && at_f(&Y, 3) == 127);
  op_io_free(&Y, 1);
  /* dequantized, in f64 */
  isa_attr_t dt = {.name = "dtype", .kind = ISA_ATTR_DTYPE, .count = 1, .ints = (int64_t[]){RILL_F64}};
  ck_assert(!run_op("qmatmul", (op_io_t[]){a, b, za, zb, bias, sc}, 6, &dt, 1, &Y, 1, &n));
  ck_assert(Y.type.dtype == RILL_F64 && at_f(&Y, 0) == -27.5 && at_f(&Y, 1) == -62.5 && at_f(&Y, 2) == 32.5 && at_f(&Y, 3) == 77.5);
  op_io_free(&Y, 1);
  /* activation="relu" on the dequantized value; with y_scale 0.25 and zero point 3: round(max(r, 0) / 0.25) + 3 */
  isa_attr_t relu[2] = {{.name = "activation", .kind = ISA_ATTR_STRING, .count = 1, .str = "relu"}, ys};
  ck_assert(!run_op("qmatmul", (op_io_t[]){a, b, za, zb, bias, sc, yz}, 7, relu, 2, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 3 && at_f(&Y, 1) == 3 && at_f(&Y, 2) == 127 && at_f(&Y, 3) == 127);
  op_io_free(&Y, 1);
  rill_status_t rst = run_op("qmatmul", (op_io_t[]){a, b, za, zb}, 4, relu, 1, &Y, 1, &n);
  ck_assert(rst && strstr(rill_status_message(rst), "without a scale"));
  rill_status_free(rst);
  /* refused: float operands, a zero point of another dtype, a scale that does not fit, y_scale without a zero point,
   * dtype with one, a zero point before the scale */
  op_io_t af = tensor_f(T(RILL_F32, 2, 2, 2), (double[]){1, 2, 3, 4}), s3 = tensor_f(T(RILL_F32, 1, 3), (double[]){1, 2, 3});
  static const struct { int which; const char *want; } bad[] = {
      {0, "expected i8 or u8 tensors"}, {1, "a's zero point: expected i8"}, {2, "scale: expected one value, [N], [M,1] or [M,N]"},
      {3, "attribute 'y_scale' needs a zero point"}, {4, "attribute 'dtype' is the dequantized result's"}, {5, "operand 5: expected an i32 bias"}};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    op_io_t in[7] = {bad[k].which == 0 ? af : a, b, bad[k].which == 1 ? zb : za, zb, bias, bad[k].which == 2 ? s3 : sc, yz};
    uint32_t nin = bad[k].which == 3 ? 6 : 7;
    if (bad[k].which == 5) in[4] = yz, nin = 5;
    const isa_attr_t *at = bad[k].which == 3 ? &ys : bad[k].which == 4 ? &dt : NULL;
    rill_status_t st = run_op("qmatmul", in, nin, at, at ? 1 : 0, &Y, 1, &n);
    ck_assert_msg(st && strstr(rill_status_message(st), bad[k].want), "case %zu: %s", k, st ? rill_status_message(st) : "accepted");
    rill_status_free(st);
  }
  /* qconv2d: u8 x 1..9 less 5, the kernel [[1, 0], [0, -1]] with padding 1: a padded tap is 0 less nothing */
  op_io_t x = tensor_f(T(RILL_U8, 4, 1, 1, 3, 3), (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9}), w = tensor_f(T(RILL_I8, 4, 1, 1, 2, 2), (double[]){1, 0, 0, -1});
  op_io_t xz = tensor_f(T(RILL_U8, 0), (double[]){5}), wz = tensor_f(T(RILL_I8, 1, 1), (double[]){0});
  isa_attr_t pad = attr_ints("padding", 2, (int64_t[]){1, 1});
  ck_assert(!run_op("qconv2d", (op_io_t[]){x, w, xz, wz}, 4, &pad, 1, &Y, 1, &n));
  /* out[i][j] = x'[i-1][j-1] - x'[i][j], x' = x - 5 and 0 outside */
  ck_assert(Y.type.dims[2] == 4 && Y.type.dims[3] == 4);
  ck_assert(at_f(&Y, 0) == 4 && at_f(&Y, 5) == -4 - 0 && at_f(&Y, 15) == 4 && at_f(&Y, 3) == 0);
  op_io_free(&Y, 1);
  isa_attr_t g = attr_int("groups", 2);
  rill_status_t st = run_op("qconv2d", (op_io_t[]){x, w, xz, wz}, 4, &g, 1, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "does not fit input"));
  rill_status_free(st);
  op_io_free(&x, 1); op_io_free(&w, 1); op_io_free(&xz, 1); op_io_free(&wz, 1);
  op_io_free(&a, 1); op_io_free(&b, 1); op_io_free(&za, 1); op_io_free(&zb, 1); op_io_free(&bias, 1); op_io_free(&sc, 1); op_io_free(&yz, 1);
  op_io_free(&af, 1); op_io_free(&s3, 1);
}
END_TEST

START_TEST(pooling) {
  uint32_t n;
  op_io_t Y;
  double xv[16];
  for (int i = 0; i < 16; i++) xv[i] = i;
  op_io_t x = tensor_f(T(RILL_F32, 4, 1, 1, 4, 4), xv);
  isa_attr_t k2 = attr_ints("kernel", 2, (int64_t[]){2, 2});
  ck_assert(!run_op("max_pool2d", &x, 1, &k2, 1, &Y, 1, &n));
  ck_assert(Y.type.dims[2] == 2 && at_f(&Y, 0) == 5 && at_f(&Y, 3) == 15);
  op_io_free(&Y, 1);
  ck_assert(!run_op("avg_pool2d", &x, 1, &k2, 1, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 2.5 && at_f(&Y, 3) == 12.5);
  op_io_free(&Y, 1);
  /* kernel 3, stride 2, padding 1: count_include_pad divides by 9 at the corner, else by 4 */
  isa_attr_t a[3] = {attr_ints("kernel", 2, (int64_t[]){3, 3}), attr_ints("stride", 2, (int64_t[]){2, 2}),
                     attr_ints("padding", 2, (int64_t[]){1, 1})};
  ck_assert(!run_op("avg_pool2d", &x, 1, a, 3, &Y, 1, &n));
  close_to(at_f(&Y, 0), (0 + 1 + 4 + 5) / 9.0, 1e-6, "count_include_pad");
  op_io_free(&Y, 1);
  isa_attr_t b[4] = {a[0], a[1], a[2], attr_bool("count_include_pad", false)};
  ck_assert(!run_op("avg_pool2d", &x, 1, b, 4, &Y, 1, &n));
  close_to(at_f(&Y, 0), (0 + 1 + 4 + 5) / 4.0, 1e-6, "exclude pad");
  op_io_free(&Y, 1);
  ck_assert(!run_op("max_pool2d", &x, 1, a, 3, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 5 && at_f(&Y, 3) == 15);
  op_io_free(&Y, 1);
  /* ceil_mode on 5x5 with kernel 2 stride 2: 3x3 (the last window is partial) */
  double x5[25];
  for (int i = 0; i < 25; i++) x5[i] = i;
  op_io_t y5 = tensor_f(T(RILL_F32, 3, 1, 5, 5), x5);
  isa_attr_t c[2] = {k2, attr_bool("ceil_mode", true)};
  ck_assert(!run_op("max_pool2d", &y5, 1, c, 2, &Y, 1, &n));
  ck_assert(Y.type.rank == 3 && Y.type.dims[1] == 3 && Y.type.dims[2] == 3 && at_f(&Y, 8) == 24);
  op_io_free(&Y, 1);
  isa_attr_t o = attr_ints("output", 2, (int64_t[]){1, 1});
  ck_assert(!run_op("adaptive_avg_pool2d", &x, 1, &o, 1, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 7.5);
  op_io_free(&Y, 1);
  isa_attr_t o3 = attr_ints("output", 2, (int64_t[]){3, 3});
  ck_assert(!run_op("adaptive_avg_pool2d", &x, 1, &o3, 1, &Y, 1, &n));
  /* windows [0,2),[1,3),[2,4) in each direction */
  close_to(at_f(&Y, 4), (5 + 6 + 9 + 10) / 4.0, 1e-6, "adaptive middle");
  op_io_free(&Y, 1);
  op_io_free(&x, 1);
  op_io_free(&y5, 1);
}
END_TEST

START_TEST(shape_ops) {
  uint32_t n;
  op_io_t Y, Z;
  double v[24];
  for (int i = 0; i < 24; i++) v[i] = i;
  op_io_t x = tensor_f(T(RILL_I32, 3, 2, 3, 4), v);
  isa_attr_t sh = attr_ints("shape", 2, (int64_t[]){-1, 6});
  ck_assert(!run_op("reshape", &x, 1, &sh, 1, &Y, 1, &n));
  ck_assert(Y.type.rank == 2 && Y.type.dims[0] == 4 && at_f(&Y, 23) == 23);
  op_io_free(&Y, 1);
  ck_assert(!run_op("flatten", &x, 1, NULL, 0, &Y, 1, &n));
  ck_assert(Y.type.rank == 2 && Y.type.dims[1] == 12);
  op_io_free(&Y, 1);
  isa_attr_t perm = attr_ints("perm", 3, (int64_t[]){2, 0, 1}), inv = attr_ints("perm", 3, (int64_t[]){1, 2, 0});
  ck_assert(!run_op("transpose", &x, 1, &perm, 1, &Y, 1, &n));
  ck_assert(Y.type.dims[0] == 4 && Y.type.dims[1] == 2 && Y.type.dims[2] == 3);
  ck_assert(at_f(&Y, 1) == 4); /* y[0][0][1] = x[0][1][0] */
  ck_assert(!run_op("transpose", &Y, 1, &inv, 1, &Z, 1, &n));
  ck_assert(!memcmp(Z.data, x.data, 24 * 4));
  op_io_free(&Y, 1);
  op_io_free(&Z, 1);
  isa_attr_t un = attr_ints("axes", 2, (int64_t[]){0, -1});
  ck_assert(!run_op("unsqueeze", &x, 1, &un, 1, &Y, 1, &n));
  ck_assert(Y.type.rank == 5 && Y.type.dims[0] == 1 && Y.type.dims[4] == 1);
  ck_assert(!run_op("squeeze", &Y, 1, NULL, 0, &Z, 1, &n));
  ck_assert(Z.type.rank == 3 && Z.type.dims[0] == 2);
  op_io_free(&Y, 1);
  op_io_free(&Z, 1);
  /* concat and split are inverses */
  isa_attr_t ax = attr_int("axis", 1), sizes = attr_ints("sizes", 2, (int64_t[]){1, 2});
  op_io_t parts[2];
  isa_attr_t sp[2] = {ax, sizes};
  ck_assert(!run_op("split", &x, 1, sp, 2, parts, 2, &n));
  ck_assert(n == 2 && parts[0].type.dims[1] == 1 && parts[1].type.dims[1] == 2);
  ck_assert(at_f(&parts[1], 0) == 4);
  ck_assert(!run_op("concat", parts, 2, &ax, 1, &Y, 1, &n));
  ck_assert(!memcmp(Y.data, x.data, 24 * 4));
  op_io_free(&Y, 1);
  op_io_free(parts, 2);
  /* slice with a negative step and clamped ends */
  op_io_t r = tensor_f(T(RILL_F32, 1, 6), v);
  isa_attr_t sl[3] = {attr_ints("starts", 1, (int64_t[]){-1}), attr_ints("ends", 1, (int64_t[]){-100}),
                      attr_ints("steps", 1, (int64_t[]){-2})};
  ck_assert(!run_op("slice", &r, 1, sl, 3, &Y, 1, &n));
  ck_assert(Y.type.dims[0] == 3 && at_f(&Y, 0) == 5 && at_f(&Y, 1) == 3 && at_f(&Y, 2) == 1);
  op_io_free(&Y, 1);
  isa_attr_t sl2[2] = {attr_ints("starts", 1, (int64_t[]){1}), attr_ints("ends", 1, (int64_t[]){INT64_MAX})};
  ck_assert(!run_op("slice", &r, 1, sl2, 2, &Y, 1, &n));
  ck_assert(Y.type.dims[0] == 5 && at_f(&Y, 0) == 1);
  op_io_free(&Y, 1);
  /* pad with a value, and cropping by negative pads */
  isa_attr_t pd[2] = {attr_ints("pads", 2, (int64_t[]){2, -1}), attr_float("value", -7)};
  ck_assert(!run_op("pad", &r, 1, pd, 2, &Y, 1, &n));
  ck_assert(Y.type.dims[0] == 7 && at_f(&Y, 0) == -7 && at_f(&Y, 2) == 0 && at_f(&Y, 6) == 4);
  op_io_free(&Y, 1);
  /* broadcast_to and gather */
  isa_attr_t bt = attr_ints("shape", 2, (int64_t[]){2, 6});
  ck_assert(!run_op("broadcast_to", &r, 1, &bt, 1, &Y, 1, &n));
  ck_assert(at_f(&Y, 7) == 1);
  op_io_free(&Y, 1);
  op_io_t idx = tensor_f(T(RILL_I64, 1, 3), (double[]){5, 0, 5});
  ck_assert(!run_op("gather", (op_io_t[]){r, idx}, 2, NULL, 0, &Y, 1, &n));
  ck_assert(at_f(&Y, 0) == 5 && at_f(&Y, 1) == 0 && at_f(&Y, 2) == 5);
  op_io_free(&Y, 1);
  op_io_t bad = tensor_f(T(RILL_I32, 1, 1), (double[]){6});
  rill_status_t st = run_op("gather", (op_io_t[]){r, bad}, 2, NULL, 0, &Y, 1, &n);
  ck_assert(st && rill_status_code(st) == RILL_RUNTIME_ERROR && strstr(rill_status_message(st), "out of range"));
  rill_status_free(st);
  op_io_free(&Y, 1);
  ck_assert(!run_op("copy", &x, 1, NULL, 0, &Y, 1, &n));
  ck_assert(!memcmp(Y.data, x.data, 24 * 4));
  op_io_free(&Y, 1);
  isa_attr_t bad_shape = attr_ints("shape", 1, (int64_t[]){5});
  st = run_op("reshape", &x, 1, &bad_shape, 1, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "cannot reshape"));
  rill_status_free(st);
  op_io_free(&x, 1); op_io_free(&r, 1); op_io_free(&idx, 1); op_io_free(&bad, 1);
}
END_TEST

START_TEST(attribute_errors) {
  uint32_t n;
  op_io_t Y;
  op_io_t x = tensor_f(T(RILL_F32, 1, 2), NULL);
  isa_attr_t unknown = attr_int("nope", 1);
  rill_status_t st = run_op("relu", &x, 1, &unknown, 1, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "unknown attribute 'nope'"));
  rill_status_free(st);
  isa_attr_t wrong = attr_float("axis", 1.5);
  st = run_op("softmax", &x, 1, &wrong, 1, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "expects an integer"));
  rill_status_free(st);
  st = run_op("add", &x, 1, NULL, 0, &Y, 1, &n);
  ck_assert(st && strstr(rill_status_message(st), "expected 2 operands"));
  rill_status_free(st);
  op_io_free(&x, 1);
}
END_TEST

/* ---- shape variables ---- */
/* A type from text such as "f32[B,20]": capital letters are shape variables
 * (made in `syms`, or substituted from vals[letter - 'A'] when syms is NULL). */
static rill_type_t sym_type(isa_syms_t *syms, const char *text, const int64_t *vals) {
  rill_type_t t = {0};
  const char *b = strchr(text, '[');
  ck_assert(b && rill_dtype_from_name(text, (size_t)(b - text), &t.dtype));
  for (const char *p = b + 1; *p && *p != ']';) {
    if (*p >= 'A' && *p <= 'Z') {
      if (syms) {
        uint32_t v;
        ck_assert(!isa_syms_var(syms, p, 1, &v));
        ck_assert(!isa_syms_var_dim(syms, v, &t.dims[t.rank]));
      } else {
        t.dims[t.rank] = vals[*p - 'A'];
      }
      t.rank++;
      p++;
    } else {
      t.dims[t.rank++] = strtoll(p, (char **)&p, 10);
    }
    if (*p == ',') p++;
  }
  return t;
}

typedef struct sym_case {
  const char *op;
  const char *in[5];
  int nattrs;
  isa_attr_t attrs[3];
  int nout;
} sym_case_t;

/* An attribute list whose capital-letter entries are shape variables; names holds the letters. */
static isa_attr_t sym_ints(isa_syms_t *syms, const isa_attr_t *a, const char *names, const int64_t *vals, int64_t *store) {
  isa_attr_t r = *a;
  r.ints = store;
  for (uint32_t i = 0; i < a->count; i++) {
    store[i] = a->ints[i];
    if (names && names[i] != '.') {
      if (syms) {
        uint32_t v;
        ck_assert(!isa_syms_var(syms, &names[i], 1, &v));
        ck_assert(!isa_syms_var_dim(syms, v, &store[i]));
      } else {
        store[i] = vals[names[i] - 'A'];
      }
    }
  }
  return r;
}

START_TEST(symbolic_inference_matches_concrete) {
  /* Each op's inference with symbolic sizes, evaluated at several sizes,
   * gives what inference with those sizes as numbers gives. */
  const struct {
    sym_case_t c;
    const char *names[3];   /* per attribute: a letter per entry ('.' for a number), or NULL */
  } cases[] = {
    {{"relu", {"f32[B,S]"}, 0, {{0}}, 1}, {NULL}},
    {{"add", {"f32[B,S]", "f32[S]"}, 0, {{0}}, 1}, {NULL}},
    {{"add", {"f32[B,1]", "f32[1,S]"}, 0, {{0}}, 1}, {NULL}},
    {{"where", {"bool[B,S]", "f32[S]", "f32[B,1]"}, 0, {{0}}, 1}, {NULL}},
    {{"sum", {"f32[B,S,4]"}, 1, {attr_ints("axes", 1, (int64_t[]){1})}, 1}, {NULL}},
    {{"max", {"f32[B,S]"}, 2, {attr_ints("axes", 1, (int64_t[]){0}), attr_bool("keepdims", true)}, 1}, {NULL}},
    {{"argmax", {"f32[B,S]"}, 1, {attr_int("axis", 1)}, 1}, {NULL}},
    {{"softmax", {"f32[B,S]"}, 0, {{0}}, 1}, {NULL}},
    {{"layer_norm", {"f32[B,S,8]", "f32[8]", "f32[8]"}, 0, {{0}}, 1}, {NULL}},
    {{"batch_norm", {"f32[B,3,S,S]", "f32[3]", "f32[3]", "f32[3]", "f32[3]"}, 0, {{0}}, 1}, {NULL}},
    {{"matmul", {"f32[B,S,8]", "f32[8,5]"}, 0, {{0}}, 1}, {NULL}},
    {{"matmul", {"f32[B,S,8]", "f32[B,8,S]"}, 0, {{0}}, 1}, {NULL}},
    {{"linear", {"f32[B,8]", "f32[5,8]", "f32[5]"}, 0, {{0}}, 1}, {NULL}},
    {{"conv2d", {"f32[B,3,S,S]", "f32[4,3,3,3]"}, 2, {attr_ints("stride", 2, (int64_t[]){2, 2}), attr_ints("padding", 2, (int64_t[]){1, 1})}, 1}, {NULL}},
    {{"max_pool2d", {"f32[B,3,S,S]"}, 1, {attr_ints("kernel", 2, (int64_t[]){2, 2})}, 1}, {NULL}},
    {{"avg_pool2d", {"f32[B,3,S,S]"}, 2, {attr_ints("kernel", 2, (int64_t[]){3, 3}), attr_ints("stride", 2, (int64_t[]){1, 1})}, 1}, {NULL}},
    {{"adaptive_avg_pool2d", {"f32[B,3,S,S]"}, 1, {attr_ints("output", 2, (int64_t[]){1, 1})}, 1}, {NULL}},
    {{"reshape", {"f32[B,S,6]"}, 1, {attr_ints("shape", 3, (int64_t[]){0, -1, 3})}, 1}, {"B.."}},
    {{"reshape", {"f32[B,S,6]"}, 1, {attr_ints("shape", 1, (int64_t[]){-1})}, 1}, {NULL}},
    {{"reshape", {"f32[B,12]"}, 1, {attr_ints("shape", 2, (int64_t[]){-1, 4})}, 1}, {NULL}},
    {{"flatten", {"f32[B,S,6]"}, 0, {{0}}, 1}, {NULL}},
    {{"transpose", {"f32[B,S,6]"}, 1, {attr_ints("perm", 3, (int64_t[]){2, 0, 1})}, 1}, {NULL}},
    {{"unsqueeze", {"f32[B,S]"}, 1, {attr_ints("axes", 1, (int64_t[]){1})}, 1}, {NULL}},
    {{"squeeze", {"f32[B,1,S]"}, 1, {attr_ints("axes", 1, (int64_t[]){1})}, 1}, {NULL}},
    {{"broadcast_to", {"f32[S]"}, 1, {attr_ints("shape", 2, (int64_t[]){0, 0})}, 1}, {"BS"}},
    {{"concat", {"f32[B,S]", "f32[B,4]", "f32[B,S]"}, 1, {attr_int("axis", 1)}, 1}, {NULL}},
    {{"split", {"f32[B,S]"}, 2, {attr_int("axis", 1), attr_ints("sizes", 1, (int64_t[]){0})}, 1}, {NULL, "S"}},
    {{"slice", {"f32[B,S]"}, 3, {attr_ints("starts", 1, (int64_t[]){1}), attr_ints("ends", 1, (int64_t[]){INT64_MAX}), attr_ints("axes", 1, (int64_t[]){1})}, 1}, {NULL}},
    {{"slice", {"f32[B,S]"}, 3, {attr_ints("starts", 1, (int64_t[]){0}), attr_ints("ends", 1, (int64_t[]){-1}), attr_ints("axes", 1, (int64_t[]){1})}, 1}, {NULL}},
    {{"pad", {"f32[B,S]"}, 1, {attr_ints("pads", 4, (int64_t[]){0, 2, 1, 3})}, 1}, {NULL}},
    {{"gather", {"f32[B,S]", "i64[S]"}, 1, {attr_int("axis", 0)}, 1}, {NULL}},
    {{"copy", {"f32[B,S]"}, 0, {{0}}, 1}, {NULL}},
  };
  for (size_t k = 0; k < RILL_ARRAY_LEN(cases); k++) {
    const sym_case_t *c = &cases[k].c;
    isa_syms_t syms;
    isa_syms_init(&syms, rill_allocator_system());
    uint32_t bv, sv;
    ck_assert(!isa_syms_var(&syms, "B", 1, &bv) && !isa_syms_var(&syms, "S", 1, &sv));
    syms.vars.items[sv].lo = 6;  /* S in [6, 40]: the slices and windows fit at every size */
    syms.vars.items[sv].hi = 40;
    syms.vars.items[sv].declared = true;
    rill_type_t in[5], out[4];
    isa_attr_t at[3];
    int64_t store[3][8];
    uint32_t nin = 0, nout;
    ops_params_t p;
    while (nin < 5 && c->in[nin]) { in[nin] = sym_type(&syms, c->in[nin], NULL); nin++; }
    for (int a = 0; a < c->nattrs; a++) at[a] = sym_ints(&syms, &c->attrs[a], cases[k].names[a], NULL, store[a]);
    const ops_def_t *def = ops_find(c->op);
    ck_assert(def);
    rill_status_t st = ops_infer_sym(def, &syms, in, nin, at, (uint32_t)c->nattrs, out, 4, &nout, &p);
    ck_assert_msg(!st, "case %zu %s: %s", k, c->op, st ? rill_status_message(st) : "");
    ck_assert_msg(isa_type_is_sym(&out[0]), "case %zu %s: result has no symbolic size", k, c->op);
    for (int64_t Bv = 1; Bv <= 3; Bv++)
      for (int64_t Sv = 6; Sv <= 11; Sv += 5) {
        int64_t vals[26] = {0};
        vals['B' - 'A'] = Bv;
        vals['S' - 'A'] = Sv;
        int64_t bind[2];
        bind[bv] = Bv;
        bind[sv] = Sv;
        rill_type_t cin[5], cout[4];
        isa_attr_t cat_[3];
        int64_t cstore[3][8];
        uint32_t cn;
        for (uint32_t i = 0; i < nin; i++) cin[i] = sym_type(NULL, c->in[i], vals);
        for (int a = 0; a < c->nattrs; a++) cat_[a] = sym_ints(NULL, &c->attrs[a], cases[k].names[a], vals, cstore[a]);
        st = ops_infer(def, cin, nin, cat_, (uint32_t)c->nattrs, cout, 4, &cn, &p);
        ck_assert_msg(!st, "case %zu %s at B=%lld S=%lld: %s", k, c->op, (long long)Bv, (long long)Sv, st ? rill_status_message(st) : "");
        ck_assert_uint_eq(cn, nout);
        for (uint32_t r = 0; r < cn; r++) {
          ck_assert_int_eq(cout[r].rank, out[r].rank);
          ck_assert_int_eq(cout[r].dtype, out[r].dtype);
          for (int d = 0; d < cout[r].rank; d++) {
            int64_t got;
            char b1[64];
            ck_assert(isa_sym_eval(&syms, out[r].dims[d], bind, &got));
            ck_assert_msg(got == cout[r].dims[d], "case %zu %s result %u dim %d (%s) at B=%lld S=%lld: %lld, concrete %lld", k,
                          c->op, r, d, isa_sym_format(&syms, out[r].dims[d], b1, sizeof b1), (long long)Bv, (long long)Sv,
                          (long long)got, (long long)cout[r].dims[d]);
          }
        }
      }
    isa_syms_free(&syms);
  }
}
END_TEST

START_TEST(symbolic_sizes_that_differ) {
  isa_syms_t syms;
  isa_syms_init(&syms, rill_allocator_system());
  rill_type_t in[2] = {sym_type(&syms, "f32[S]", NULL), sym_type(&syms, "f32[T]", NULL)}, out[1];
  uint32_t nout;
  ops_params_t p;
  rill_status_t st = ops_infer_sym(ops_find("add"), &syms, in, 2, NULL, 0, out, 1, &nout, &p);
  ck_assert(st && strstr(rill_status_message(st), "sizes S and T") && strstr(rill_status_message(st), "cannot be shown equal"));
  rill_status_free(st);
  /* (S*4)/4 is S again; S+S is 2*S; a reshape whose sizes cannot be shown equal is refused */
  int64_t s4, back, twice, s2;
  ck_assert(!isa_sym_mul(&syms, in[0].dims[0], 4, &s4));
  ck_assert(isa_sym_divexact(&syms, s4, 4, &back, &st) && back == in[0].dims[0]);
  ck_assert(!isa_sym_add(&syms, in[0].dims[0], in[0].dims[0], &twice) && !isa_sym_mul(&syms, in[0].dims[0], 2, &s2) && twice == s2);
  isa_attr_t sh = attr_ints("shape", 1, (int64_t[]){in[1].dims[0]});
  st = ops_infer_sym(ops_find("reshape"), &syms, in, 1, &sh, 1, out, 1, &nout, &p);
  ck_assert(st && strstr(rill_status_message(st), "cannot be shown equal"));
  rill_status_free(st);
  /* names only where the language allows them */
  isa_attr_t ax = attr_ints("axes", 1, (int64_t[]){in[1].dims[0]});
  st = ops_infer_sym(ops_find("sum"), &syms, in, 1, &ax, 1, out, 1, &nout, &p);
  ck_assert(st && strstr(rill_status_message(st), "takes numbers only"));
  rill_status_free(st);
  isa_syms_free(&syms);
}
END_TEST

/* What --data-parallel writes for a symbolic batch B over N ranks: pad by a
 * symbolic amount up to N*ceil(B/N) rows, all_gather a symbolic axis, pad by
 * a negative symbolic amount back down to B; the amounts evaluate (a crop's
 * negative too) at each size. */
START_TEST(symbolic_pads_and_gather) {
  isa_syms_t syms;
  isa_syms_init(&syms, rill_allocator_system());
  rill_type_t in[1] = {sym_type(&syms, "f32[B,3]", NULL)}, out[1], part, gathered;
  uint32_t nout;
  ops_params_t p;
  int64_t B = in[0].dims[0], t, P, NP, up, down;
  ck_assert(!isa_sym_add(&syms, B, 2, &t) && !isa_sym_floordiv(&syms, t, 3, &P) && !isa_sym_mul(&syms, P, 3, &NP));
  ck_assert(!isa_sym_sub(&syms, NP, B, &up) && !isa_sym_sub(&syms, B, NP, &down));
  isa_attr_t pads = attr_ints("pads", 4, (int64_t[]){0, 0, up, 0});
  ck_assert(!ops_infer_sym(ops_find("pad"), &syms, in, 1, &pads, 1, out, 1, &nout, &p));
  ck_assert(out[0].dims[0] == NP && out[0].dims[1] == 3);
  part = in[0];
  part.dims[0] = P;
  isa_attr_t ga[2] = {attr_int("axis", 0), attr_int("ranks", 3)};
  ck_assert(!ops_infer_sym(ops_find("all_gather"), &syms, &part, 1, ga, 2, &gathered, 1, &nout, &p));
  ck_assert(gathered.dims[0] == NP);
  isa_attr_t crop = attr_ints("pads", 4, (int64_t[]){0, 0, down, 0});
  ck_assert(!ops_infer_sym(ops_find("pad"), &syms, &gathered, 1, &crop, 1, out, 1, &nout, &p));
  ck_assert(out[0].dims[0] == B);
  for (int64_t b = 1; b <= 7; b++) {
    int64_t vals[1] = {b}, u, d, np;
    ck_assert(isa_sym_eval(&syms, NP, vals, &np) && np == 3 * ((b + 2) / 3));
    ck_assert(isa_sym_eval_signed(&syms, up, vals, &u) && u == np - b);
    ck_assert(!isa_sym_eval(&syms, down, vals, &d) || d == 0); /* a size is never negative */
    ck_assert(isa_sym_eval_signed(&syms, down, vals, &d) && d == b - np);
  }
  /* a reduce_scatter of a symbolic axis would have to divide at every size */
  rill_status_t st = ops_infer_sym(ops_find("reduce_scatter"), &syms, in, 1, ga, 2, out, 1, &nout, &p);
  ck_assert(st && strstr(rill_status_message(st), "symbolic size"));
  rill_status_free(st);
  /* a symbolic pad that may crop below zero is refused */
  isa_attr_t bad = attr_ints("pads", 4, (int64_t[]){0, 0, down, 0});
  st = ops_infer_sym(ops_find("pad"), &syms, in, 1, &bad, 1, out, 1, &nout, &p);
  ck_assert(st && strstr(rill_status_message(st), "below zero"));
  rill_status_free(st);
  isa_syms_free(&syms);
}
END_TEST

Suite *ops_suite(void);
Suite *ops_suite(void) {
  Suite *s = suite_create("ops");
  TCase *t = tcase_create("cpu");
  tcase_add_test(t, unary_values);
  tcase_add_test(t, unary_identities);
  tcase_add_test(t, unary_integers);
  tcase_add_test(t, cast_all_pairs);
  tcase_add_test(t, new_integer_dtypes);
  tcase_add_test(t, binary_broadcast_and_promotion);
  tcase_add_test(t, binary_semantics);
  tcase_add_test(t, reductions);
  tcase_add_test(t, normalisation);
  tcase_add_test(t, linear_algebra);
  tcase_add_test(t, convolution);
  tcase_add_test(t, quantized_products);
  tcase_add_test(t, pooling);
  tcase_add_test(t, shape_ops);
  tcase_add_test(t, attribute_errors);
  tcase_add_test(t, symbolic_inference_matches_concrete);
  tcase_add_test(t, symbolic_sizes_that_differ);
  tcase_add_test(t, symbolic_pads_and_gather);
  suite_add_tcase(s, t);
  return s;
}

int main(void) { return run_suite(ops_suite()); }
