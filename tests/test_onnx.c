/* test_onnx.c: the ONNX importer on models built here with protobuf-c:
 * mappings checked against values computed by hand (Gemm's transposes and
 * scales, auto_pad, folded shape subgraphs, external data, sanitised
 * names), and bad models (truncated, mutated, wrong initializer sizes,
 * cycles, missing inputs, huge dimensions, unsupported ops): a clear error,
 * no crash, no leak and no file written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "fuzz/targets.h"
#include "onnx_builder.h"

/* Gemm: Y = alpha * A^T * B^T + beta * C, A given as [K, M], B as [N, K] */
START_TEST(gemm_transposes_and_scales) {
  builder_t b;
  b_init(&b, 13);
  int64_t ad[2] = {3, 2};
  b_input(&b, "a", 2, ad, NULL);
  int64_t bd[2] = {2, 3}, cd[1] = {2};
  float bv[6] = {1, 2, 3, 4, 5, 6}, cv[2] = {10, 20};
  b_init_tensor(&b, "b", 1, 2, bd, bv, 6);
  b_init_tensor(&b, "c", 1, 1, cd, cv, 2);
  char *in[] = {"a", "b", "c", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "Gemm", "gemm", in, out);
  b_attr_i(&b, n, "transA", 1);
  b_attr_i(&b, n, "transB", 1);
  b_attr_f(&b, n, "alpha", 0.5f);
  b_attr_f(&b, n, "beta", 2.0f);
  b_output(&b, "y");
  float a[6] = {1, 2, 3, 4, 5, 6}, y[4];  /* A^T = [[1,3,5],[2,4,6]] */
  run_model(&b, a, 6, y, 4);
  /* B^T = [[1,4],[2,5],[3,6]]; A^T B^T = [[22,49],[28,64]] */
  float want[4] = {0.5f * 22 + 20, 0.5f * 49 + 40, 0.5f * 28 + 20, 0.5f * 64 + 40};
  for (int i = 0; i < 4; i++) ck_assert_float_eq_tol(y[i], want[i], 1e-5);
}
END_TEST

/* Gemm without transB, B an initializer [K, N] (GPT-2's Conv1D as the
 * exporter writes it): one linear reading B as it lies (weight="kn", no
 * transpose folded into a copy), the bias its third operand; the results by
 * hand, through the module made in memory (onnx_load_module) and through
 * the module's bytes (onnx_assemble), bit for bit the same. */
START_TEST(gemm_weight_as_it_lies) {
  builder_t b;
  b_init(&b, 13);
  int64_t ad[2] = {2, 3}, bd[2] = {3, 2}, cd[1] = {2};
  b_input(&b, "a", 2, ad, NULL);
  float bv[6] = {1, 2, 3, 4, 5, 6}, cv[2] = {10, 20};
  b_init_tensor(&b, "b", 1, 2, bd, bv, 6);
  b_init_tensor(&b, "c", 1, 1, cd, cv, 2);
  char *in[] = {"a", "b", "c", NULL}, *out[] = {"y", NULL};
  b_node(&b, "Gemm", "gemm", in, out);
  b_output(&b, "y");
  onnx_result_t r;
  char msg[256];
  /* with RILL_LINEAR_KN=0 (rill__linear_kn off) a matmul and the bias added after it */
  setenv("RILL_LINEAR_KN", "0", 1);
  ck_assert_int_eq(import(&b, ".", NULL, &r, msg, sizeof msg), RILL_OK);
  unsetenv("RILL_LINEAR_KN");
  ck_assert_msg(strstr(r.vmasm, "matmul(") && !strstr(r.vmasm, "weight=\"kn\""), "%s", r.vmasm);
  onnx_result_free(&r);
  ck_assert_int_eq(import(&b, ".", NULL, &r, msg, sizeof msg), RILL_OK);
  ck_assert_msg(strstr(r.vmasm, "linear(") && strstr(r.vmasm, "weight=\"kn\"") && !strstr(r.vmasm, "transpose("), "%s", r.vmasm);
  onnx_result_free(&r);
  float a[6] = {1, 2, 3, 4, 5, 6}, y[4];
  run_model(&b, a, 6, y, 4);
  /* A B = [[22, 28], [49, 64]], plus C */
  float want[4] = {32, 48, 59, 84};
  for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], want[i]);
  char dir[] = "/tmp/rill-test-onnx-XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/m.onnx", dir);
  b_write_file(&b, path);
  uint8_t *bytes;
  size_t n;
  rill_status_t st = onnx_assemble(path, NULL, NULL, &bytes, &n);
  unlink(path);
  rmdir(dir);
  ck_assert_msg(!st, "%s", st ? rill_status_message(st) : "");
  rill_module_t *m;
  ck_assert(!rill_module_load(NULL, bytes, n, NULL, &m));
  free(bytes);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  rill_type_t at = {RILL_F32, 2, {2, 3}};
  rill_tensor_t **res;
  int nres = invoke_main(vm, 1, &at, (const void *[]){a}, &res);
  float y2[4];
  ck_assert(nres == 1 && !rill_tensor_read(res[0], y2, sizeof y2));
  ck_assert(!memcmp(y, y2, sizeof y));
  rill_results_free(vm, res, nres);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* ONNX's UINT64, UINT32, UINT16 and INT16 in their typed fields (uint64_data,
 * int32_data): a u64 graph input plus a u64 initializer (wrapping), Max in
 * unsigned order above 2^63, a u16 Mod, an i16 Neg wrapping, and a u32
 * initializer cast to u64 added in */
START_TEST(unsigned_and_int16_tensors) {
  builder_t b;
  b_init(&b, 13);
  static int64_t d3[1] = {3};
  static uint64_t k64[3] = {UINT64_MAX, 5, 1ull << 63}, k32[3] = {4294967295u, 7, 0};
  static int32_t k16[3] = {65535, 9, 100}, s16[3] = {-32768, 3, -1};
  b_input_p(&b, "x", 13, 1, d3, NULL);
  b_init_tensor(&b, "k64", 13, 1, d3, k64, 3);
  b_init_tensor(&b, "k32", 12, 1, d3, k32, 3);
  b_init_tensor(&b, "k16", 4, 1, d3, k16, 3);
  b_init_tensor(&b, "s16", 5, 1, d3, s16, 3);
  char *i1[] = {"x", "k64", NULL}, *o1[] = {"s", NULL}, *i2[] = {"s", "x", NULL}, *o2[] = {"m", NULL};
  char *i3[] = {"k16", "k16", NULL}, *o3[] = {"r", NULL}, *i4[] = {"s16", NULL}, *o4[] = {"n", NULL};
  char *i5[] = {"k32", NULL}, *o5[] = {"c", NULL}, *i6[] = {"c", "x", NULL}, *o6[] = {"w", NULL};
  b_attr_i(&b, b_node(&b, "Cast", "cast", i5, o5), "to", 13);
  b_node(&b, "Add", "add2", i6, o6);
  b_node(&b, "Add", "add", i1, o1);
  b_node(&b, "Max", "max", i2, o2);
  b_node(&b, "Mod", "mod", i3, o3);
  b_node(&b, "Neg", "neg", i4, o4);
  b_output(&b, "m");
  b_output(&b, "r");
  b_output(&b, "n");
  b_output(&b, "w");
  rill_module_t *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  uint64_t x[3] = {1, 10, 1ull << 62};
  rill_type_t xt = {RILL_U64, 1, {3}};
  rill_tensor_t **res;
  int nres = invoke_main(vm, 1, &xt, (const void *[]){x}, &res);
  ck_assert_int_eq(nres, 4);
  uint64_t mv[3], wv[3];
  ck_assert(!rill_tensor_read(res[3], wv, sizeof wv));
  ck_assert(wv[0] == 4294967296ull && wv[1] == 17 && wv[2] == 1ull << 62);
  uint16_t rv[3];
  int16_t nv[3];
  ck_assert(rill_tensor_type(res[0])->dtype == RILL_U64 && rill_tensor_type(res[1])->dtype == RILL_U16 && rill_tensor_type(res[2])->dtype == RILL_I16);
  ck_assert(!rill_tensor_read(res[0], mv, sizeof mv) && !rill_tensor_read(res[1], rv, sizeof rv) && !rill_tensor_read(res[2], nv, sizeof nv));
  /* s = x + k64 = {0 (wrapped), 15, 2^63 + 2^62}; m = max(s, x) in unsigned order */
  ck_assert_uint_eq(mv[0], 1);
  ck_assert_uint_eq(mv[1], 15);
  ck_assert_uint_eq(mv[2], (1ull << 63) + (1ull << 62));
  ck_assert(rv[0] == 0 && rv[1] == 0 && rv[2] == 0);              /* a value mod itself */
  ck_assert(nv[0] == -32768 && nv[1] == -3 && nv[2] == 1);        /* -(-32768) wraps */
  rill_results_free(vm, res, nres);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* Initializers larger than anything folded at import (a transformer's
 * weights) are read where they lie in the model's bytes, not copied
 * (onnx_strip): the same weights and results as the small ones', from bytes,
 * from a file and in the files `rill import` writes; a bool initializer
 * holding a byte other than 0 or 1 is copied and normalised. */
START_TEST(large_initializers_read_in_place) {
  enum { K = 256, N = 640, NB = 600000 };
  builder_t b;
  b_init(&b, 17);
  b_input(&b, "x", 2, (int64_t[]){2, K}, NULL);
  float *w = malloc(sizeof(float) * K * N), bias[N];
  uint8_t *mask = calloc(NB, 1);
  ck_assert(w && mask);
  for (int i = 0; i < K * N; i++) w[i] = (float)((i * 7) % 11 - 5) / 8;
  for (int j = 0; j < N; j++) bias[j] = (float)(j % 5);
  mask[3] = 1;
  mask[NB - 1] = 2; /* not 0 or 1: true */
  int64_t wd[2] = {K, N}, bd[1] = {N}, md[2] = {1, NB};
  Onnx__TensorProto *wt = b_init_tensor(&b, "w", 1, 2, wd, NULL, 0);
  wt->n_float_data = 0;
  wt->has_raw_data = 1;
  wt->raw_data = (ProtobufCBinaryData){.len = sizeof(float) * K * N, .data = (uint8_t *)w};
  b_init_tensor(&b, "bias", 1, 1, bd, bias, N);
  Onnx__TensorProto *mt = b_init_tensor(&b, "mask", 9, 2, md, NULL, 0);
  mt->n_int32_data = 0;
  mt->has_raw_data = 1;
  mt->raw_data = (ProtobufCBinaryData){.len = NB, .data = mask};
  char *i1[] = {"x", "w", NULL}, *o1[] = {"xw", NULL}, *i2[] = {"xw", "bias", NULL}, *o2[] = {"y", NULL};
  char *i3[] = {"mask", NULL}, *o3[] = {"mf", NULL};
  b_node(&b, "MatMul", "mm", i1, o1);
  b_node(&b, "Add", "add", i2, o2);
  b_attr_i(&b, b_node(&b, "Cast", "cast", i3, o3), "to", 1);
  b_output(&b, "y");
  b_output(&b, "mf");
  /* from bytes: the weights hold w as it was written */
  onnx_result_t r;
  char msg[512];
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_OK);
  ck_assert(r.parts == NULL && r.weights_len > sizeof(float) * K * N);
  bool found = false;
  for (size_t at = 0; at + sizeof(float) * K * N <= r.weights_len && !found; at += 4) found = !memcmp(r.weights + at, w, sizeof(float) * K * N);
  ck_assert(found);
  /* from a file: the same safetensors bytes, written from the pieces */
  char dir[] = "/tmp/rill-test-onnx-XXXXXX", path[256], out[256], wpath[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/m.onnx", dir);
  snprintf(out, sizeof out, "%s/m.vmasm", dir);
  snprintf(wpath, sizeof wpath, "%s/m.safetensors", dir);
  b_write_file(&b, path);
  size_t n;
  onnx_result_t rf;
  ck_assert(onnx_import_file_parts(path, NULL, &rf) == NULL);
  ck_assert(rf.parts != NULL && rf.weights == NULL && rf.parts->map != NULL);
  int inside = 0; /* w's piece, and only it, points into the file's mapping (the mask was copied) */
  for (int i = 0; i < rf.parts->n; i++) {
    const uint8_t *p = rf.parts->ptr[i], *base = rf.parts->map;
    if (p >= base && p < base + rf.parts->map_len) {
      inside++;
      ck_assert_uint_eq(rf.parts->len[i], sizeof(float) * K * N);
    }
  }
  ck_assert_int_eq(inside, 1);
  ck_assert(onnx_import_to_files(path, out, NULL) == NULL);
  uint8_t *file;
  size_t flen;
  ck_assert(import_read_file(wpath, (size_t)1 << 30, &file, &flen) == NULL);
  ck_assert_uint_eq(flen, r.weights_len);
  ck_assert(!memcmp(file, r.weights, flen));
  free(file);
  onnx_result_free(&rf);
  onnx_result_free(&r);
  /* the walk that leaves the raw data out meets truncated and damaged
   * messages: an error or an import, never a crash (the structure is in
   * the first and last few hundred bytes; the rest is the weights) */
  uint8_t *packed = b_pack(&b, &n), *copy = malloc(n);
  ck_assert(copy != NULL);
  for (size_t k = 0; k < 400 && k < n; k++) fuzz_onnx(packed, k), fuzz_onnx(packed, n - k);
  uint64_t s = 12345;
  for (int it = 0; it < 300; it++) {
    memcpy(copy, packed, n);
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t at = (s >> 33) % 800;
    copy[at < 400 ? at : n - (at - 399)] ^= (uint8_t)(1u << ((s >> 20) & 7));
    fuzz_onnx(copy, n);
  }
  free(copy);
  free(packed);
  rill_module_t *m;
  rill_status_t st = onnx_load_module(path, NULL, NULL, &m);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  unlink(path);
  unlink(out);
  unlink(wpath);
  rmdir(dir);
  rill_vm_t *vm;
  ck_assert(!rill_vm_create(NULL, m, "cpu", &vm));
  float x[2 * K];
  for (int i = 0; i < 2 * K; i++) x[i] = (float)(i % 3) - 1;
  rill_type_t xt = {RILL_F32, 2, {2, K}};
  rill_tensor_t **res;
  int nres = invoke_main(vm, 1, &xt, (const void *[]){x}, &res);
  ck_assert_int_eq(nres, 2);
  float *y = malloc(sizeof(float) * 2 * N), *mf = malloc(sizeof(float) * NB);
  ck_assert(y && mf);
  ck_assert(!rill_tensor_read(res[0], y, sizeof(float) * 2 * N) && !rill_tensor_read(res[1], mf, sizeof(float) * NB));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < N; j++) {
      double e = bias[j];
      for (int k = 0; k < K; k++) e += (double)x[i * K + k] * w[k * N + j];
      ck_assert_msg(fabs(y[i * N + j] - e) < 1e-3, "y[%d,%d] = %g, expected %g", i, j, y[i * N + j], e);
    }
  ck_assert(mf[0] == 0 && mf[3] == 1 && mf[4] == 0 && mf[NB - 1] == 1);
  rill_results_free(vm, res, nres);
  rill_vm_destroy(vm);
  rill_module_release(m);
  free(y);
  free(mf);
  free(w);
  free(mask);
}
END_TEST

/* Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to one reshape */
START_TEST(shape_subgraph_folds) {
  builder_t b;
  b_init(&b, 13);
  int64_t xd[3] = {2, 3, 4};
  b_input(&b, "x:0", 3, xd, NULL);
  int64_t one = 1, zero = 0, minus = -1, sd[1] = {1};
  b_init_tensor(&b, "idx", 7, 0, NULL, &zero, 1);
  b_init_tensor(&b, "ax", 7, 1, sd, &zero, 1);
  b_init_tensor(&b, "m1", 7, 1, sd, &minus, 1);
  (void)one;
  char *i1[] = {"x:0", NULL}, *o1[] = {"s", NULL};
  b_node(&b, "Shape", "shape", i1, o1);
  char *i2[] = {"s", "idx", NULL}, *o2[] = {"g", NULL};
  b_node(&b, "Gather", "gather", i2, o2);
  char *i3[] = {"g", "ax", NULL}, *o3[] = {"u", NULL};
  b_node(&b, "Unsqueeze", "unsq", i3, o3);
  char *i4[] = {"u", "m1", NULL}, *o4[] = {"shp", NULL};
  Onnx__NodeProto *c = b_node(&b, "Concat", "cat", i4, o4);
  b_attr_i(&b, c, "axis", 0);
  char *i5[] = {"x:0", "shp", NULL}, *o5[] = {"y/out", NULL};
  b_node(&b, "Reshape", "reshape", i5, o5);
  b_output(&b, "y/out");
  onnx_result_t r;
  char msg[512];
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_OK);
  ck_assert_msg(strstr(r.vmasm, "reshape(%x_0) {shape=[2, 12]}") != NULL, "%s", r.vmasm);
  ck_assert_msg(strstr(r.vmasm, "gather") == NULL && strstr(r.vmasm, "concat") == NULL, "%s", r.vmasm);
  ck_assert_msg(strstr(r.vmasm, "%y_out") != NULL, "%s", r.vmasm);
  onnx_result_free(&r);
}
END_TEST

/* auto_pad SAME_UPPER on a 5x5 input, 2x2 kernel, stride 2: out 3x3, pads end */
START_TEST(auto_pad_same_upper) {
  builder_t b;
  b_init(&b, 11);
  int64_t xd[4] = {1, 1, 5, 5};
  b_input(&b, "x", 4, xd, NULL);
  char *in[] = {"x", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "MaxPool", "pool", in, out);
  int64_t k[2] = {2, 2}, s[2] = {2, 2};
  b_attr_ints(&b, n, "kernel_shape", k, 2);
  b_attr_ints(&b, n, "strides", s, 2);
  b_attr_s(&b, n, "auto_pad", "SAME_UPPER");
  b_output(&b, "y");
  float x[25], y[9];
  for (int i = 0; i < 25; i++) x[i] = (float)i;
  run_model(&b, x, 25, y, 9);
  float want[9] = {6, 8, 9, 16, 18, 19, 21, 23, 24};
  for (int i = 0; i < 9; i++) ck_assert_float_eq(y[i], want[i]);
}
END_TEST

/* MaxPool rounding up with pads (GoogLeNet's 3x3 pools): kernel 3, stride
 * 2, pads 1, ceil_mode=1 on 6x6 gives 4x4 (3x3 rounding down); the last
 * window holds row and column 5 alone; with dilations 2 on 7x7: 3x3 */
START_TEST(max_pool_ceil_mode_with_pads) {
  for (int dil = 1; dil <= 2; dil++) {
    builder_t b;
    b_init(&b, 17);
    int64_t side = dil == 1 ? 6 : 7, xd[4] = {1, 1, side, side};
    b_input(&b, "x", 4, xd, NULL);
    char *in[] = {"x", NULL}, *out[] = {"y", NULL};
    Onnx__NodeProto *n = b_node(&b, "MaxPool", "pool", in, out);
    int64_t k[2] = {3, 3}, s[2] = {2, 2}, p[4] = {1, 1, 1, 1}, d[2] = {dil, dil};
    b_attr_ints(&b, n, "kernel_shape", k, 2);
    b_attr_ints(&b, n, "strides", s, 2);
    b_attr_ints(&b, n, "pads", p, 4);
    if (dil > 1) b_attr_ints(&b, n, "dilations", d, 2);
    b_attr_i(&b, n, "ceil_mode", 1);
    b_output(&b, "y");
    float x[49], y[16];
    for (int i = 0; i < side * side; i++) x[i] = (float)i;
    /* the largest row and column each window reaches: rows o*2-1 + {0, dil, 2*dil}, clipped */
    int64_t no = dil == 1 ? 4 : 3, last[4];
    ck_assert_int_eq(no, (side + 2 - dil * 2 - 1 + 1) / 2 + 1); /* ceil((in + 2 - dil*2 - 1) / 2) + 1 */
    for (int64_t o = 0; o < no; o++) {
      int64_t r = o * 2 - 1 + 2 * dil;
      while (r >= side) r -= dil;
      last[o] = r;
    }
    run_model(&b, x, (size_t)(side * side), y, (size_t)(no * no));
    for (int64_t i = 0; i < no; i++)
      for (int64_t j = 0; j < no; j++) ck_assert_float_eq(y[i * no + j], (float)(last[i] * side + last[j]));
  }
}
END_TEST

/* GoogLeNet's branch pools: kernel 3, stride 1, pads 1, ceil_mode=1, where
 * rounding up adds no window: one max_pool2d with its padding (no separate
 * pad op), and the values a padded 3x3 maximum gives */
START_TEST(max_pool_ceil_mode_adding_nothing) {
  builder_t b;
  b_init(&b, 17);
  int64_t xd[4] = {1, 1, 5, 5};
  b_input(&b, "x", 4, xd, NULL);
  char *in[] = {"x", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "MaxPool", "pool", in, out);
  int64_t k[2] = {3, 3}, s[2] = {1, 1}, p[4] = {1, 1, 1, 1};
  b_attr_ints(&b, n, "kernel_shape", k, 2);
  b_attr_ints(&b, n, "strides", s, 2);
  b_attr_ints(&b, n, "pads", p, 4);
  b_attr_i(&b, n, "ceil_mode", 1);
  b_output(&b, "y");
  onnx_result_t r;
  char msg[512];
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_OK);
  ck_assert_msg(strstr(r.vmasm, "pad(") == NULL, "an explicit pad: %s", r.vmasm);
  ck_assert_msg(strstr(r.vmasm, "max_pool2d(%x) {kernel=[3, 3], stride=[1, 1], padding=[1, 1], ceil_mode=false}") != NULL, "%s", r.vmasm);
  onnx_result_free(&r);
  float x[25], y[25];
  for (int i = 0; i < 25; i++) x[i] = (float)i;
  run_model(&b, x, 25, y, 25);
  for (int i = 0; i < 5; i++)
    for (int j = 0; j < 5; j++) ck_assert_float_eq(y[i * 5 + j], (float)((i < 4 ? i + 1 : 4) * 5 + (j < 4 ? j + 1 : 4)));
}
END_TEST

/* a symbolic dim is a shape variable unless --shape gives it a size; external data is read beside the model */
START_TEST(shape_option_and_external_data) {
  builder_t b;
  b_init(&b, 13);
  int64_t xd[2] = {-1, 2}, wd[1] = {2};
  b_input(&b, "x", 2, xd, "batch");
  Onnx__TensorProto *w = b_init_tensor(&b, "w", 1, 1, wd, NULL, 0);
  Onnx__StringStringEntryProto loc = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *locs[1] = {&loc};
  loc.key = "location";
  loc.value = "w.bin";
  w->n_external_data = 1;
  w->external_data = locs;
  w->has_data_location = 1;
  w->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  char *in[] = {"x", "w", NULL}, *out[] = {"y", NULL};
  b_node(&b, "Mul", "mul", in, out);
  b_output(&b, "y");
  char dir[] = "/tmp/rill-test-onnx-XXXXXX", path[256], msg[512];
  ck_assert(mkdtemp(dir) != NULL);
  onnx_result_t r;
  onnx_options_t o = {0};
  ck_assert(onnx_options_add_shape(&o, "batch=3", msg, sizeof msg));
  ck_assert_int_eq(import(&b, dir, &o, &r, msg, sizeof msg), RILL_IO_ERROR);  /* w.bin not there yet */
  ck_assert_msg(strstr(msg, "w.bin"), "%s", msg);
  snprintf(path, sizeof path, "%s/w.bin", dir);
  float wv[2] = {2, 3};
  FILE *f = fopen(path, "wb");
  ck_assert(f && fwrite(wv, 4, 2, f) == 2);
  fclose(f);
  /* without --shape the dimension is the shape variable batch */
  ck_assert_int_eq(import(&b, dir, NULL, &r, msg, sizeof msg), RILL_OK);
  ck_assert_msg(strstr(r.vmasm, "%x: f32[batch,2]") != NULL && strstr(r.vmasm, "dim ") == NULL, "%s", r.vmasm);
  onnx_result_free(&r);
  ck_assert_int_eq(import(&b, dir, &o, &r, msg, sizeof msg), RILL_OK);
  ck_assert_msg(strstr(r.vmasm, "%x: f32[3,2]") != NULL, "%s", r.vmasm);
  ck_assert(r.weights_len > 8 && !memcmp(r.weights + r.weights_len - 8, wv, 8));
  onnx_result_free(&r);
  /* a location outside the model's folder is refused */
  loc.value = "../w.bin";
  ck_assert_int_eq(import(&b, dir, &o, &r, msg, sizeof msg), RILL_MALFORMED);
  onnx_options_free(&o);
  unlink(path);
  rmdir(dir);
}
END_TEST

/* x: f32[1, S, 4] with dim_param S -> Reshape [-1, 2] -> Relu -> Reshape to
 * [x.shape[1], 4] (a Shape subgraph): S becomes a shape variable, sizes that
 * follow it are written in terms of it, and the module runs at several S. */
static void symbolic_model(builder_t *b, bool constant_of_shape) {
  b_init(b, 13);
  static int64_t xd[3] = {1, -1, 4}, sd[1] = {1}, sd2[1] = {2}, m2[2] = {-1, 2}, one = 1, zero = 0, four = 4;
  b_input(b, "x", 3, xd, "S");
  b_init_tensor(b, "m2", 7, 1, sd2, m2, 2);
  b_init_tensor(b, "idx", 7, 0, NULL, &one, 1);
  b_init_tensor(b, "ax", 7, 1, sd, &zero, 1);
  b_init_tensor(b, "four", 7, 1, sd, &four, 1);
  static char *i1[] = {"x", "m2", NULL}, *o1[] = {"a", NULL}, *i2[] = {"a", NULL}, *o2[] = {"r", NULL};
  static char *i3[] = {"x", NULL}, *o3[] = {"s", NULL}, *i4[] = {"s", "idx", NULL}, *o4[] = {"g", NULL};
  static char *i5[] = {"g", "ax", NULL}, *o5[] = {"u", NULL}, *i6[] = {"u", "four", NULL}, *o6[] = {"shp", NULL};
  static char *i7[] = {"r", "shp", NULL}, *o7[] = {"y", NULL};
  static char *i8[] = {"s", NULL}, *o8[] = {"z", NULL}, *i9[] = {"x", "z", NULL}, *o9[] = {"xz", NULL};
  if (constant_of_shape) {  /* x + zeros(x.shape): a constant of S's size */
    b_node(b, "Shape", "shape0", i3, o3);
    b_node(b, "ConstantOfShape", "zeros", i8, o8);
    b_node(b, "Add", "addz", i9, o9);
    i1[0] = "xz";
  } else {
    i1[0] = "x";
  }
  b_node(b, "Reshape", "r1", i1, o1);
  b_node(b, "Relu", "relu", i2, o2);
  if (!constant_of_shape) b_node(b, "Shape", "shape", i3, o3);
  b_node(b, "Gather", "gather", i4, o4);
  b_node(b, "Unsqueeze", "unsq", i5, o5);
  Onnx__NodeProto *c = b_node(b, "Concat", "cat", i6, o6);
  b_attr_i(b, c, "axis", 0);
  b_node(b, "Reshape", "r2", i7, o7);
  b_output(b, "y");
}

START_TEST(symbolic_dims_become_shape_variables) {
  builder_t b;
  symbolic_model(&b, false);
  onnx_result_t r;
  char msg[512];
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_OK);
  ck_assert_msg(strstr(r.vmasm, "func @main(%x: f32[1,S,4]) -> (f32[S,4])") != NULL, "%s", r.vmasm);
  ck_assert_msg(strstr(r.vmasm, "{shape=[mul(2, S), 2]}") != NULL, "%s", r.vmasm);
  ck_assert_msg(strstr(r.vmasm, "{shape=[S, 4]}") != NULL, "%s", r.vmasm);
  ck_assert_msg(strstr(r.vmasm, "dim S") == NULL, "%s", r.vmasm);
  onnx_result_free(&r);
  /* with a range: its dim statement, probes inside it (2..4 here, as 13 > 9) */
  onnx_options_t o = {0};
  ck_assert(onnx_options_add_shape(&o, "S=2..9", msg, sizeof msg));
  ck_assert(!onnx_options_add_shape(&o, "S=5..2", msg, sizeof msg));
  ck_assert_msg(strstr(msg, "LO..HI"), "%s", msg);
  char dir[] = "/tmp/rill-test-onnx-XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/m.onnx", dir);
  size_t n;
  uint8_t *bytes = b_pack(&b, &n);
  FILE *f = fopen(path, "wb");
  ck_assert(f && fwrite(bytes, 1, n, f) == n);
  fclose(f);
  free(bytes);
  ck_assert_int_eq(onnx_import_file(path, &o, &r) ? 1 : 0, 0);
  ck_assert_msg(strstr(r.vmasm, "dim S in [2, 9]\n") != NULL && strstr(r.vmasm, "f32[1,S,4]") != NULL, "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m;
  rill_status_t st = onnx_load_module(path, &o, NULL, &m);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  unlink(path);
  rmdir(dir);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  for (int64_t S = 2; S <= 10; S += 4) {  /* 2, 6 and 10 (outside the range) */
    float x[40], y[40];
    for (int i = 0; i < S * 4; i++) x[i] = (float)((i * 5) % 7) - 3.0f;
    rill_type_t t = T(RILL_F32, 3, (int64_t)1, S, (int64_t)4);
    rill_tensor_t *in, **res;
    int nres;
    ck_assert(rill_tensor_create(vm, &t, x, &in) == NULL);
    st = rill_vm_invoke(vm, "main", &in, 1, &res, &nres);
    rill_tensor_release(in);
    if (S == 10) {
      ck_assert(st != NULL);
      ck_assert_msg(strstr(rill_status_message(st), "outside its range [2, 9]"), "%s", rill_status_message(st));
      rill_status_free(st);
      continue;
    }
    ck_assert_msg(st == NULL, "S=%lld: %s", (long long)S, st ? rill_status_message(st) : "");
    const rill_type_t *rt = rill_tensor_type(res[0]);
    ck_assert_int_eq(rt->rank, 2);
    ck_assert_int_eq(rt->dims[0], S);
    ck_assert_int_eq(rt->dims[1], 4);
    ck_assert(rill_tensor_read(res[0], y, (size_t)S * 16) == NULL);
    for (int i = 0; i < S * 4; i++) ck_assert_float_eq(y[i], x[i] > 0 ? x[i] : 0);
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
  /* a size given: concrete as before */
  onnx_options_free(&o);
  ck_assert(onnx_options_add_shape(&o, "S=3", msg, sizeof msg));
  ck_assert_int_eq(import(&b, NULL, &o, &r, msg, sizeof msg), RILL_OK);
  ck_assert_msg(strstr(r.vmasm, "f32[1,3,4]") != NULL && strstr(r.vmasm, "{shape=[6, 2]}") != NULL, "%s", r.vmasm);
  onnx_result_free(&r);
  onnx_options_free(&o);
  /* ConstantOfShape of a shape over S: the value broadcast at run time */
  symbolic_model(&b, true);
  ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "broadcast_to(%") && strstr(r.vmasm, "{shape=[1, S, 4]}"), "%s", r.vmasm);
  onnx_result_free(&r);
  ck_assert(onnx_options_add_shape(&o, "S=3", msg, sizeof msg));
  ck_assert_int_eq(import(&b, NULL, &o, &r, msg, sizeof msg), RILL_OK);
  onnx_result_free(&r);
  onnx_options_free(&o);
}
END_TEST

/* BERT's attention-mask expansion as torch.onnx exports it (opset 17),
 * mask [batch, seq] i64 to [batch, 1, seq, seq] f32: 0 where the mask is 1,
 * the f32 minimum where it is 0. The shape [B, 1, S, S] comes from Shape,
 * Gather, Unsqueeze and Concat, goes through torch's Expand idiom
 * (ConstantOfShape, Mul by -1, Equal, Where) into Expand; then Cast, Sub,
 * Cast to bool and Where (masked_fill). */
static void bert_mask_model(builder_t *b) {
  b_init(b, 17);
  static int64_t md[2] = {-1, -1}, one = 1, zero = 0, m1 = -1, d1[1] = {1}, d2[1] = {2}, ax12[2] = {1, 2};
  static float onef = 1, minf = -3.4028234663852886e38f;
  static const char *params[2] = {"batch", "sequence"};
  b_input_p(b, "attention_mask", 7, 2, md, params);
  b_init_tensor(b, "i0", 7, 0, NULL, &zero, 1);
  b_init_tensor(b, "i1", 7, 0, NULL, &one, 1);
  b_init_tensor(b, "ax0", 7, 1, d1, &zero, 1);
  b_init_tensor(b, "one1", 7, 1, d1, &one, 1);
  b_init_tensor(b, "m1", 7, 0, NULL, &m1, 1);
  b_init_tensor(b, "ax12", 7, 1, d2, ax12, 2);
  b_init_tensor(b, "onef", 1, 0, NULL, &onef, 1);
  b_init_tensor(b, "minf", 1, 0, NULL, &minf, 1);
  static char *i1[] = {"attention_mask", NULL}, *o1[] = {"s", NULL};
  static char *i2[] = {"s", "i0", NULL}, *o2[] = {"bsz", NULL}, *i3[] = {"s", "i1", NULL}, *o3[] = {"src", NULL};
  static char *i4[] = {"bsz", "ax0", NULL}, *o4[] = {"bsz1", NULL}, *i5[] = {"src", "ax0", NULL}, *o5[] = {"src1", NULL};
  static char *i6[] = {"bsz1", "one1", "src1", "src1", NULL}, *o6[] = {"shp", NULL};
  static char *i7[] = {"shp", NULL}, *o7[] = {"ss", NULL}, *i8[] = {"ss", NULL}, *o8[] = {"ones", NULL};
  static char *i9[] = {"ones", "m1", NULL}, *o9[] = {"neg", NULL}, *i10[] = {"shp", "neg", NULL}, *o10[] = {"eq", NULL};
  static char *i11[] = {"eq", "ones", "shp", NULL}, *o11[] = {"shp2", NULL};
  static char *i12[] = {"attention_mask", "ax12", NULL}, *o12[] = {"m4", NULL};
  static char *i13[] = {"m4", "shp2", NULL}, *o13[] = {"e", NULL}, *i14[] = {"e", NULL}, *o14[] = {"ef", NULL};
  static char *i15[] = {"onef", "ef", NULL}, *o15[] = {"inv", NULL}, *i16[] = {"inv", NULL}, *o16[] = {"invb", NULL};
  static char *i17[] = {"invb", "minf", "inv", NULL}, *o17[] = {"y", NULL};
  b_node(b, "Shape", "/Shape", i1, o1);
  b_node(b, "Gather", "/Gather", i2, o2);
  b_node(b, "Gather", "/Gather_1", i3, o3);
  b_node(b, "Unsqueeze", "/Unsqueeze", i4, o4);
  b_node(b, "Unsqueeze", "/Unsqueeze_1", i5, o5);
  b_attr_i(b, b_node(b, "Concat", "/Concat", i6, o6), "axis", 0);
  b_node(b, "Shape", "/Shape_1", i7, o7);
  b_attr_scalar(b, b_node(b, "ConstantOfShape", "/ConstantOfShape", i8, o8), "value", 7, &one);
  b_node(b, "Mul", "/Mul", i9, o9);
  b_node(b, "Equal", "/Equal", i10, o10);
  b_node(b, "Where", "/Where", i11, o11);
  b_node(b, "Unsqueeze", "/Unsqueeze_2", i12, o12);
  b_node(b, "Expand", "/Expand", i13, o13);
  b_attr_i(b, b_node(b, "Cast", "/Cast", i14, o14), "to", 1);
  b_node(b, "Sub", "/Sub", i15, o15);
  b_attr_i(b, b_node(b, "Cast", "/Cast_1", i16, o16), "to", 9);
  b_node(b, "Where", "/Where_1", i17, o17);
  b_output(b, "y");
}

/* The mask expansion imports with batch and sequence as shape variables and
 * runs right at several bindings (the expected values worked here from the
 * mask, as numpy would: (1 - mask) cast to bool selects the minimum). */
START_TEST(bert_mask_expansion_symbolic) {
  builder_t b;
  bert_mask_model(&b);
  onnx_result_t r;
  char msg[512];
  ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "func @main(%attention_mask: i64[batch,sequence]) -> (f32[batch,1,sequence,sequence])"), "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const int64_t sizes[3][2] = {{1, 5}, {3, 2}, {2, 9}};
  for (int k = 0; k < 3; k++) {
    int64_t B = sizes[k][0], S = sizes[k][1], mask[64];
    for (int64_t i = 0; i < B * S; i++) mask[i] = (i * 7 + k) % 3 != 0;
    rill_type_t t = T(RILL_I64, 2, B, S);
    const void *data[1] = {mask};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 1, &t, data, &res);
    const rill_type_t *rt = rill_tensor_type(res[0]);
    ck_assert(rt->rank == 4 && rt->dims[0] == B && rt->dims[1] == 1 && rt->dims[2] == S && rt->dims[3] == S);
    float y[2 * 9 * 9];
    ck_assert(rill_tensor_read(res[0], y, (size_t)(B * S * S) * 4) == NULL);
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < S; j++)
          ck_assert_float_eq(y[(bi * S + i) * S + j], mask[bi * S + j] ? 0.0f : -3.4028234663852886e38f);
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* Sizes over two shape variables, as polynomials: an embedding gathered by
 * ids [batch, seq]; the sum flattened to [batch*seq, 4] with a shape from
 * Shape, Gather, Mul, Unsqueeze and Concat; unflattened with seq*2/2 (an
 * exact division); then the sequence sliced from 1 to its end. */
static float emb_value(int64_t row, int64_t c) { return (float)((row * 4 + c) * 3 % 11) - 5.0f; }

static void two_vars_model(builder_t *b) {
  b_init(b, 13);
  static int64_t xd[3] = {-1, -1, 4}, idd[2] = {-1, -1}, ed[2] = {5, 4}, d1[1] = {1}, zero = 0, one = 1, two = 2, four = 4;
  static int64_t big = INT64_MAX;
  static float emb[20];
  for (int i = 0; i < 20; i++) emb[i] = emb_value(i / 4, i % 4);
  static const char *params[3] = {"batch", "seq", NULL};
  b_input_p(b, "x", 1, 3, xd, params);
  b_input_p(b, "ids", 7, 2, idd, params);
  b_init_tensor(b, "emb", 1, 2, ed, emb, 20);
  b_init_tensor(b, "i0", 7, 0, NULL, &zero, 1);
  b_init_tensor(b, "i1", 7, 0, NULL, &one, 1);
  b_init_tensor(b, "two", 7, 0, NULL, &two, 1);
  b_init_tensor(b, "ax0", 7, 1, d1, &zero, 1);
  b_init_tensor(b, "four", 7, 1, d1, &four, 1);
  b_init_tensor(b, "st1", 7, 1, d1, &one, 1);
  b_init_tensor(b, "end", 7, 1, d1, &big, 1);
  b_init_tensor(b, "ax1", 7, 1, d1, &one, 1);
  static char *i1[] = {"emb", "ids", NULL}, *o1[] = {"e", NULL}, *i2[] = {"x", "e", NULL}, *o2[] = {"h", NULL};
  static char *i3[] = {"h", NULL}, *o3[] = {"s", NULL}, *i4[] = {"s", "i0", NULL}, *o4[] = {"bs", NULL};
  static char *i5[] = {"s", "i1", NULL}, *o5[] = {"sq", NULL}, *i6[] = {"bs", "sq", NULL}, *o6[] = {"bq", NULL};
  static char *i7[] = {"bq", "ax0", NULL}, *o7[] = {"bq1", NULL}, *i8[] = {"bq1", "four", NULL}, *o8[] = {"shp", NULL};
  static char *i9[] = {"h", "shp", NULL}, *o9[] = {"flat", NULL}, *i10[] = {"sq", "two", NULL}, *o10[] = {"sq2", NULL};
  static char *i11[] = {"sq2", "two", NULL}, *o11[] = {"sqd", NULL}, *i12[] = {"bs", "ax0", NULL}, *o12[] = {"bs1", NULL};
  static char *i13[] = {"sqd", "ax0", NULL}, *o13[] = {"sqd1", NULL}, *i14[] = {"bs1", "sqd1", "four", NULL}, *o14[] = {"shp2", NULL};
  static char *i15[] = {"flat", "shp2", NULL}, *o15[] = {"back", NULL}, *i16[] = {"back", "st1", "end", "ax1", NULL}, *o16[] = {"y", NULL};
  b_node(b, "Gather", "/emb", i1, o1);
  b_node(b, "Add", "/add", i2, o2);
  b_node(b, "Shape", "/shape", i3, o3);
  b_node(b, "Gather", "/g0", i4, o4);
  b_node(b, "Gather", "/g1", i5, o5);
  b_node(b, "Mul", "/mul", i6, o6);
  b_node(b, "Unsqueeze", "/u0", i7, o7);
  b_attr_i(b, b_node(b, "Concat", "/cat", i8, o8), "axis", 0);
  b_node(b, "Reshape", "/flatten", i9, o9);
  b_node(b, "Mul", "/mul2", i10, o10);
  b_node(b, "Div", "/div2", i11, o11);
  b_node(b, "Unsqueeze", "/u1", i12, o12);
  b_node(b, "Unsqueeze", "/u2", i13, o13);
  b_attr_i(b, b_node(b, "Concat", "/cat2", i14, o14), "axis", 0);
  b_node(b, "Reshape", "/unflatten", i15, o15);
  b_node(b, "Slice", "/slice", i16, o16);
  b_output(b, "y");
  b_output(b, "flat");
}

START_TEST(sizes_over_two_variables) {
  builder_t b;
  two_vars_model(&b);
  onnx_options_t o = {0};
  char msg[512];
  ck_assert(onnx_options_add_shape(&o, "seq=2..16", msg, sizeof msg));
  onnx_result_t r;
  ck_assert_msg(import(&b, NULL, &o, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "dim seq in [2, 16]") && strstr(r.vmasm, "-> (f32[batch,add(-1, seq),4], f32[mul(batch, seq),4])"),
                "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m = load_model_with(&b, &o);
  onnx_options_free(&o);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const int64_t sizes[2][2] = {{2, 3}, {3, 5}};
  for (int k = 0; k < 2; k++) {
    int64_t B = sizes[k][0], S = sizes[k][1], ids[15];
    float x[60], y[60], flat[60];
    for (int64_t i = 0; i < B * S; i++) ids[i] = (i * 2 + k) % 5;
    for (int64_t i = 0; i < B * S * 4; i++) x[i] = (float)(i % 7) * 0.5f;
    rill_type_t ts[2] = {T(RILL_F32, 3, B, S, (int64_t)4), T(RILL_I64, 2, B, S)};
    const void *data[2] = {x, ids};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 2, ts, data, &res);
    const rill_type_t *t0 = rill_tensor_type(res[0]), *t1 = rill_tensor_type(res[1]);
    ck_assert(t0->rank == 3 && t0->dims[0] == B && t0->dims[1] == S - 1 && t0->dims[2] == 4);
    ck_assert(t1->rank == 2 && t1->dims[0] == B * S && t1->dims[1] == 4);
    ck_assert(rill_tensor_read(res[0], y, (size_t)(B * (S - 1) * 4) * 4) == NULL);
    ck_assert(rill_tensor_read(res[1], flat, (size_t)(B * S * 4) * 4) == NULL);
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t j = 0; j < S; j++)
        for (int64_t c = 0; c < 4; c++) {
          int64_t at = (bi * S + j) * 4 + c;
          float want = x[at] + emb_value(ids[bi * S + j], c);
          ck_assert_float_eq(flat[at], want);
          if (j > 0) ck_assert_float_eq(y[(bi * (S - 1) + j - 1) * 4 + c], want);
        }
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* A causal mask over the sequence (as GPT-2's exports build one): ones
 * [seq, seq] from ConstantOfShape, Trilu to its lower triangle, x [batch,
 * seq] times it (y[b, j] = the sum of x[b, i] for i >= j), plus Range(0,
 * seq) cast to f32. seq's range bounds the indices made at run time. */
static void causal_model(builder_t *b) {
  b_init(b, 14);
  static int64_t xd[2] = {-1, -1}, d1[1] = {1}, zero = 0, one = 1;
  static float onef = 1;
  static const char *params[2] = {"batch", "seq"};
  b_input_p(b, "x", 1, 2, xd, params);
  b_init_tensor(b, "i1", 7, 0, NULL, &one, 1);
  b_init_tensor(b, "z", 7, 0, NULL, &zero, 1);
  b_init_tensor(b, "ax0", 7, 1, d1, &zero, 1);
  static char *i1[] = {"x", NULL}, *o1[] = {"s", NULL}, *i2[] = {"s", "i1", NULL}, *o2[] = {"sq", NULL};
  static char *i3[] = {"sq", "ax0", NULL}, *o3[] = {"sq1", NULL}, *i4[] = {"sq1", "sq1", NULL}, *o4[] = {"ss", NULL};
  static char *i5[] = {"ss", NULL}, *o5[] = {"ones", NULL}, *i6[] = {"ones", NULL}, *o6[] = {"tri", NULL};
  static char *i7[] = {"x", "tri", NULL}, *o7[] = {"mm", NULL}, *i8[] = {"z", "sq", "i1", NULL}, *o8[] = {"r", NULL};
  static char *i9[] = {"r", NULL}, *o9[] = {"rf", NULL}, *i10[] = {"mm", "rf", NULL}, *o10[] = {"y", NULL};
  b_node(b, "Shape", "/shape", i1, o1);
  b_node(b, "Gather", "/g", i2, o2);
  b_node(b, "Unsqueeze", "/u", i3, o3);
  b_attr_i(b, b_node(b, "Concat", "/cat", i4, o4), "axis", 0);
  b_attr_scalar(b, b_node(b, "ConstantOfShape", "/ones", i5, o5), "value", 1, &onef);
  b_attr_i(b, b_node(b, "Trilu", "/tril", i6, o6), "upper", 0);
  b_node(b, "MatMul", "/mm", i7, o7);
  b_node(b, "Range", "/range", i8, o8);
  b_attr_i(b, b_node(b, "Cast", "/cast", i9, o9), "to", 1);
  b_node(b, "Add", "/add", i10, o10);
  b_output(b, "y");
}

START_TEST(causal_mask_over_a_range) {
  builder_t b;
  causal_model(&b);
  onnx_options_t o = {0};
  char msg[512];
  ck_assert(onnx_options_add_shape(&o, "seq=1..32", msg, sizeof msg));
  onnx_result_t r;
  ck_assert_msg(import(&b, NULL, &o, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "split(") && strstr(r.vmasm, "-> (f32[batch,seq])"), "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m = load_model_with(&b, &o);
  onnx_options_free(&o);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const int64_t sizes[3][2] = {{2, 1}, {1, 7}, {3, 32}};
  for (int k = 0; k < 3; k++) {
    int64_t B = sizes[k][0], S = sizes[k][1];
    float x[96], y[96];
    for (int64_t i = 0; i < B * S; i++) x[i] = (float)((i * 5 + k) % 9) - 4.0f;
    rill_type_t xt = T(RILL_F32, 2, B, S);
    const void *data[1] = {x};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 1, &xt, data, &res);
    ck_assert(rill_tensor_read(res[0], y, (size_t)(B * S) * 4) == NULL);
    for (int64_t bi = 0; bi < B; bi++)
      for (int64_t j = 0; j < S; j++) {
        float want = (float)j;
        for (int64_t i = j; i < S; i++) want += x[bi * S + i];
        ck_assert_float_eq_tol(y[bi * S + j], want, 1e-4);
      }
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* A small convolutional net with a dynamic batch: conv 2x2 of ones on
 * [N, 1, 3, 3], max pool 2x2, flatten to [N, 1]; beside it z [N, T]
 * flattened to [N*T] (a size over two variables, which only the polynomial
 * import takes). */
static void conv_batch_model(builder_t *b) {
  b_init(b, 13);
  static int64_t xd[4] = {-1, 1, 3, 3}, zd[2] = {-1, -1}, wd[4] = {1, 1, 2, 2}, flat[1] = {-1}, d1[1] = {1}, k2[2] = {2, 2};
  static float ones[4] = {1, 1, 1, 1};
  static const char *px[4] = {"N", NULL, NULL, NULL}, *pz[2] = {"N", "T"};
  b_input_p(b, "x", 1, 4, xd, px);
  b_input_p(b, "z", 1, 2, zd, pz);
  b_init_tensor(b, "w", 1, 4, wd, ones, 4);
  b_init_tensor(b, "m1", 7, 1, d1, flat, 1);
  static char *i1[] = {"x", "w", NULL}, *o1[] = {"c", NULL}, *i2[] = {"c", NULL}, *o2[] = {"p", NULL};
  static char *i3[] = {"p", NULL}, *o3[] = {"y", NULL}, *i4[] = {"z", "m1", NULL}, *o4[] = {"zf", NULL};
  b_node(b, "Conv", "/conv", i1, o1);
  b_attr_ints(b, b_node(b, "MaxPool", "/pool", i2, o2), "kernel_shape", k2, 2);
  b_node(b, "Flatten", "/flatten", i3, o3);
  b_node(b, "Reshape", "/zflat", i4, o4);
  b_output(b, "y");
  b_output(b, "zf");
}

START_TEST(conv_with_dynamic_batch) {
  builder_t b;
  conv_batch_model(&b);
  onnx_result_t r;
  char msg[512];
  ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "-> (f32[N,1], f32[mul(N, T)])") && strstr(r.vmasm, "conv2d("), "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  for (int64_t N = 1; N <= 3; N += 2) {
    float x[27], z[6], y[3], zf[6];
    for (int i = 0; i < N * 9; i++) x[i] = (float)((i * 7) % 10) - 3.0f;
    for (int i = 0; i < N * 2; i++) z[i] = (float)i;
    rill_type_t ts[2] = {T(RILL_F32, 4, N, (int64_t)1, (int64_t)3, (int64_t)3), T(RILL_F32, 2, N, (int64_t)2)};
    const void *data[2] = {x, z};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 2, ts, data, &res);
    ck_assert(rill_tensor_read(res[0], y, (size_t)N * 4) == NULL);
    ck_assert(rill_tensor_read(res[1], zf, (size_t)N * 8) == NULL);
    for (int64_t bi = 0; bi < N; bi++) {
      const float *p = x + bi * 9;
      float best = -INFINITY;
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) best = fmaxf(best, p[i * 3 + j] + p[i * 3 + j + 1] + p[i * 3 + j + 3] + p[i * 3 + j + 4]);
      ck_assert_float_eq(y[bi], best);
    }
    for (int i = 0; i < N * 2; i++) ck_assert_float_eq(zf[i], z[i]);
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* RoBERTa's position ids: CumSum(mask, axis 1) * mask + 1 over a mask
 * [batch, seq] (seq bounded); beside it a reversed exclusive CumSum of f32
 * [2, 3] along axis 0. */
static void cumsum_model(builder_t *b) {
  b_init(b, 14);
  static int64_t md[2] = {-1, -1}, fd[2] = {2, 3}, one = 1, zero = 0;
  static const char *params[2] = {"batch", "seq"};
  b_input_p(b, "mask", 7, 2, md, params);
  b_input_p(b, "f", 1, 2, fd, params);
  b_init_tensor(b, "ax1", 7, 0, NULL, &one, 1);
  b_init_tensor(b, "ax0", 7, 0, NULL, &zero, 1);
  b_init_tensor(b, "pad", 7, 0, NULL, &one, 1);
  static char *i1[] = {"mask", "ax1", NULL}, *o1[] = {"cs", NULL}, *i2[] = {"cs", "mask", NULL}, *o2[] = {"cm", NULL};
  static char *i3[] = {"cm", "pad", NULL}, *o3[] = {"pos", NULL}, *i4[] = {"f", "ax0", NULL}, *o4[] = {"fc", NULL};
  b_node(b, "CumSum", "/cumsum", i1, o1);
  b_node(b, "Mul", "/mul", i2, o2);
  b_node(b, "Add", "/add", i3, o3);
  Onnx__NodeProto *c = b_node(b, "CumSum", "/cumsum_f", i4, o4);
  b_attr_i(b, c, "exclusive", 1);
  b_attr_i(b, c, "reverse", 1);
  b_output(b, "pos");
  b_output(b, "fc");
}

START_TEST(cumsum_position_ids) {
  builder_t b;
  cumsum_model(&b);
  onnx_options_t o = {0};
  char msg[512];
  ck_assert(onnx_options_add_shape(&o, "seq=1..64", msg, sizeof msg));
  rill_module_t *m = load_model_with(&b, &o);
  onnx_options_free(&o);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  for (int64_t S = 3; S <= 7; S += 4) {
    int64_t B = 2, mask[14], pos[14];
    float f[6] = {1, 2, 3, 10, 20, 30}, fc[6];
    for (int64_t i = 0; i < B * S; i++) mask[i] = (i % S) < S - 1 - i / S; /* right padding */
    rill_type_t ts[2] = {T(RILL_I64, 2, B, S), T(RILL_F32, 2, (int64_t)2, (int64_t)3)};
    const void *data[2] = {mask, f};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 2, ts, data, &res);
    ck_assert(rill_tensor_read(res[0], pos, (size_t)(B * S) * 8) == NULL);
    ck_assert(rill_tensor_read(res[1], fc, sizeof fc) == NULL);
    for (int64_t bi = 0; bi < B; bi++) {
      int64_t run = 0;
      for (int64_t j = 0; j < S; j++) {
        run += mask[bi * S + j];
        ck_assert_int_eq(pos[bi * S + j], run * mask[bi * S + j] + 1);
      }
    }
    float want[6] = {10, 20, 30, 0, 0, 0}; /* row 0 sums the rows after it, row 1 none */
    for (int i = 0; i < 6; i++) ck_assert_float_eq(fc[i], want[i]);
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* Whisper's decoder (transformers' packed-sequence check): a row r [1, seq]
 * tiled to x's batch by repeats [Shape(x)[0], 1] (a size over a shape
 * variable), compared with x and summed along the sequence by a CumSum
 * over bool, which PyTorch's exporter writes and PyTorch sums as int64. */
static void tile_cumsum_model(builder_t *b) {
  b_init(b, 17);
  static int64_t xd[2] = {-1, -1}, rd[2] = {1, -1}, d1[1] = {1}, zero = 0, one = 1;
  static const char *px[2] = {"batch", "seq"}, *pr[2] = {NULL, "seq"};
  b_input_p(b, "x", 7, 2, xd, px);
  b_input_p(b, "r", 7, 2, rd, pr);
  b_init_tensor(b, "i0", 7, 0, NULL, &zero, 1);
  b_init_tensor(b, "ax0", 7, 1, d1, &zero, 1);
  b_init_tensor(b, "one", 7, 1, d1, &one, 1);
  b_init_tensor(b, "ax1", 7, 0, NULL, &one, 1);
  static char *i1[] = {"x", NULL}, *o1[] = {"s", NULL}, *i2[] = {"s", "i0", NULL}, *o2[] = {"b", NULL};
  static char *i3[] = {"b", "ax0", NULL}, *o3[] = {"b1", NULL}, *i4[] = {"b1", "one", NULL}, *o4[] = {"reps", NULL};
  static char *i5[] = {"r", "reps", NULL}, *o5[] = {"t", NULL}, *i6[] = {"t", "x", NULL}, *o6[] = {"eq", NULL};
  static char *i7[] = {"eq", "ax1", NULL}, *o7[] = {"cs", NULL};
  b_node(b, "Shape", "/shape", i1, o1);
  b_node(b, "Gather", "/g", i2, o2);
  b_node(b, "Unsqueeze", "/u", i3, o3);
  b_attr_i(b, b_node(b, "Concat", "/reps", i4, o4), "axis", 0);
  b_node(b, "Tile", "/tile", i5, o5);
  b_node(b, "Equal", "/eq", i6, o6);
  b_node(b, "CumSum", "/cumsum", i7, o7);
  b_output(b, "t");
  b_output(b, "cs");
}

START_TEST(tile_by_a_batch_and_cumsum_of_bool) {
  builder_t b;
  tile_cumsum_model(&b);
  rill_module_t *m = load_model_with(&b, NULL);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  for (int64_t B = 1; B <= 3; B += 2)
    for (int64_t S = 2; S <= 5; S += 3) {
      int64_t x[15], r[5], t[15], cs[15];
      for (int64_t j = 0; j < S; j++) r[j] = j % 3;
      for (int64_t i = 0; i < B * S; i++) x[i] = (i * 7 + B) % 3;
      rill_type_t ts[2] = {T(RILL_I64, 2, B, S), T(RILL_I64, 2, (int64_t)1, S)};
      const void *data[2] = {x, r};
      rill_tensor_t **res;
      int nres = invoke_main(vm, 2, ts, data, &res);
      ck_assert_int_eq(nres, 2);
      ck_assert_int_eq(rill_tensor_type(res[1])->dtype, RILL_I64);
      ck_assert_int_eq(rill_tensor_type(res[0])->dims[0], B);
      ck_assert(rill_tensor_read(res[0], t, (size_t)(B * S) * 8) == NULL);
      ck_assert(rill_tensor_read(res[1], cs, (size_t)(B * S) * 8) == NULL);
      for (int64_t bi = 0; bi < B; bi++) {
        int64_t run = 0;
        for (int64_t j = 0; j < S; j++) {
          ck_assert_int_eq(t[bi * S + j], r[j]);
          run += x[bi * S + j] == r[j];
          ck_assert_int_eq(cs[bi * S + j], run);
        }
      }
      rill_results_free(vm, res, nres);
    }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* Sizes over shape variables as slice bounds, as detection at batch 2 and
 * Whisper's decoder write them: the rows of a and b [p, 2], [q, 2]
 * concatenated, then tail = cat[p : p + q] (both bounds from Shape), r =
 * Reshape(cat three times side by side, [p + q, -1, 2]) (a -1 beside a sum),
 * and d = yy[:, 1:] - yy[:, :-1] for yy = [1, y] of [1, s + 1]
 * (torch.diff with a prepend). */
static void sym_bounds_model(builder_t *b) {
  b_init(b, 17);
  static int64_t ad[2] = {-1, 2}, bd[2] = {-1, 2}, yd[2] = {1, -1}, d1[1] = {1}, d11[2] = {1, 1};
  static int64_t zero = 0, one1[1] = {1}, ax0[1] = {0}, ax1[1] = {1}, big[1] = {(int64_t)1 << 62}, m1[1] = {-1}, z1[1] = {0}, rest[2] = {-1, 2};
  static float onef = 1;
  static const char *pa[2] = {"p", NULL}, *pb[2] = {"q", NULL}, *py[2] = {NULL, "s"};
  b_input_p(b, "a", 1, 2, ad, pa);
  b_input_p(b, "b", 1, 2, bd, pb);
  b_input_p(b, "y", 1, 2, yd, py);
  b_init_tensor(b, "i0", 7, 0, NULL, &zero, 1);
  b_init_tensor(b, "ax0", 7, 1, d1, ax0, 1);
  b_init_tensor(b, "ax1", 7, 1, d1, ax1, 1);
  b_init_tensor(b, "one1", 7, 1, d1, one1, 1);
  b_init_tensor(b, "big", 7, 1, d1, big, 1);
  b_init_tensor(b, "m1", 7, 1, d1, m1, 1);
  b_init_tensor(b, "z1", 7, 1, d1, z1, 1);
  b_init_tensor(b, "rest", 7, 1, (int64_t[]){2}, rest, 2);
  b_init_tensor(b, "onef", 1, 2, d11, &onef, 1);
  static char *i1[] = {"a", "b", NULL}, *o1[] = {"cat", NULL}, *i2[] = {"a", NULL}, *o2[] = {"sa", NULL}, *i3[] = {"sa", "i0", NULL}, *o3[] = {"p0", NULL};
  static char *i4[] = {"p0", "ax0", NULL}, *o4[] = {"p1", NULL}, *i5[] = {"b", NULL}, *o5[] = {"sb", NULL}, *i6[] = {"sb", "i0", NULL}, *o6[] = {"q0", NULL};
  static char *i7[] = {"q0", "ax0", NULL}, *o7[] = {"q1", NULL}, *i8[] = {"p1", "q1", NULL}, *o8[] = {"e", NULL};
  static char *i9[] = {"cat", "p1", "e", "ax0", NULL}, *o9[] = {"tail", NULL};
  static char *i10[] = {"cat", "cat", "cat", NULL}, *o10[] = {"cat3", NULL}, *i11[] = {"e", "rest", NULL}, *o11[] = {"shp", NULL};
  static char *i12[] = {"cat3", "shp", NULL}, *o12[] = {"r", NULL}, *i13[] = {"onef", "y", NULL}, *o13[] = {"yy", NULL};
  static char *i14[] = {"yy", "one1", "big", "ax1", NULL}, *o14[] = {"hi", NULL}, *i15[] = {"yy", "z1", "m1", "ax1", NULL}, *o15[] = {"lo", NULL};
  static char *i16[] = {"hi", "lo", NULL}, *o16[] = {"d", NULL};
  b_attr_i(b, b_node(b, "Concat", "/cat", i1, o1), "axis", 0);
  b_node(b, "Shape", "/sa", i2, o2);
  b_node(b, "Gather", "/p0", i3, o3);
  b_node(b, "Unsqueeze", "/p1", i4, o4);
  b_node(b, "Shape", "/sb", i5, o5);
  b_node(b, "Gather", "/q0", i6, o6);
  b_node(b, "Unsqueeze", "/q1", i7, o7);
  b_node(b, "Add", "/e", i8, o8);
  b_node(b, "Slice", "/tail", i9, o9);
  b_attr_i(b, b_node(b, "Concat", "/cat3", i10, o10), "axis", 1);
  b_attr_i(b, b_node(b, "Concat", "/shp", i11, o11), "axis", 0);
  b_node(b, "Reshape", "/r", i12, o12);
  b_attr_i(b, b_node(b, "Concat", "/yy", i13, o13), "axis", 1);
  b_node(b, "Slice", "/hi", i14, o14);
  b_node(b, "Slice", "/lo", i15, o15);
  b_node(b, "Sub", "/d", i16, o16);
  b_output(b, "tail");
  b_output(b, "r");
  b_output(b, "d");
}

START_TEST(slice_bounds_over_shape_variables) {
  builder_t b;
  sym_bounds_model(&b);
  rill_module_t *m = load_model_with(&b, NULL);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  static const int64_t sizes[3][3] = {{2, 3, 4}, {1, 1, 1}, {4, 2, 6}};
  for (int t = 0; t < 3; t++) {
    int64_t P = sizes[t][0], Q = sizes[t][1], S = sizes[t][2];
    float a[8], bb[8], y[6], tail[8], r[36], d[6], cat[12];
    for (int i = 0; i < 2 * P; i++) a[i] = (float)(i * 3 + t);
    for (int i = 0; i < 2 * Q; i++) bb[i] = (float)(100 + i * 7 - t);
    for (int i = 0; i < S; i++) y[i] = (float)((i * i) % 5) - 1.5f * (float)t;
    rill_type_t ts[3] = {T(RILL_F32, 2, P, (int64_t)2), T(RILL_F32, 2, Q, (int64_t)2), T(RILL_F32, 2, (int64_t)1, S)};
    const void *data[3] = {a, bb, y};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 3, ts, data, &res);
    ck_assert_int_eq(nres, 3);
    const rill_type_t *tt = rill_tensor_type(res[0]), *rt = rill_tensor_type(res[1]), *dt = rill_tensor_type(res[2]);
    ck_assert(tt->rank == 2 && tt->dims[0] == Q && tt->dims[1] == 2);
    ck_assert(rt->rank == 3 && rt->dims[0] == P + Q && rt->dims[1] == 3 && rt->dims[2] == 2);
    ck_assert(dt->rank == 2 && dt->dims[0] == 1 && dt->dims[1] == S);
    ck_assert(rill_tensor_read(res[0], tail, sizeof(float) * (size_t)(2 * Q)) == NULL);
    ck_assert(rill_tensor_read(res[1], r, sizeof(float) * (size_t)(6 * (P + Q))) == NULL);
    ck_assert(rill_tensor_read(res[2], d, sizeof(float) * (size_t)S) == NULL);
    for (int i = 0; i < 2 * Q; i++) ck_assert_float_eq(tail[i], bb[i]);
    memcpy(cat, a, sizeof(float) * (size_t)(2 * P));
    memcpy(cat + 2 * P, bb, sizeof(float) * (size_t)(2 * Q));
    for (int64_t i = 0; i < P + Q; i++)
      for (int j = 0; j < 6; j++) ck_assert_float_eq(r[i * 6 + j], cat[i * 2 + j % 2]);
    for (int64_t j = 0; j < S; j++) ck_assert_float_eq(d[j], y[j] - (j ? y[j - 1] : 1.0f));
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* BERT's position ids: a buffer [1, 16] of 0..15 sliced to [:, :seq]
 * (the end from Shape), cast and added to x [batch, seq]; seq's range must
 * keep the end inside the buffer. */
static void position_ids_model(builder_t *b) {
  b_init(b, 13);
  static int64_t xd[2] = {-1, -1}, pd[2] = {1, 16}, pos[16], d1[1] = {1}, zero = 0, one = 1;
  for (int i = 0; i < 16; i++) pos[i] = i;
  static const char *params[2] = {"batch", "seq"};
  b_input_p(b, "x", 1, 2, xd, params);
  b_init_tensor(b, "position_ids", 7, 2, pd, pos, 16);
  b_init_tensor(b, "i1", 7, 0, NULL, &one, 1);
  b_init_tensor(b, "ax0", 7, 1, d1, &zero, 1);
  b_init_tensor(b, "st", 7, 1, d1, &zero, 1);
  b_init_tensor(b, "ax1", 7, 1, d1, &one, 1);
  static char *i1[] = {"x", NULL}, *o1[] = {"s", NULL}, *i2[] = {"s", "i1", NULL}, *o2[] = {"sq", NULL};
  static char *i3[] = {"sq", "ax0", NULL}, *o3[] = {"sq1", NULL}, *i4[] = {"position_ids", "st", "sq1", "ax1", NULL}, *o4[] = {"p", NULL};
  static char *i5[] = {"p", NULL}, *o5[] = {"pf", NULL}, *i6[] = {"x", "pf", NULL}, *o6[] = {"y", NULL};
  b_node(b, "Shape", "/shape", i1, o1);
  b_node(b, "Gather", "/g", i2, o2);
  b_node(b, "Unsqueeze", "/u", i3, o3);
  b_node(b, "Slice", "/slice", i4, o4);
  b_attr_i(b, b_node(b, "Cast", "/cast", i5, o5), "to", 1);
  b_node(b, "Add", "/add", i6, o6);
  b_output(b, "y");
}

START_TEST(position_ids_sliced_to_the_sequence) {
  builder_t b;
  position_ids_model(&b);
  onnx_options_t o = {0};
  char msg[512];
  onnx_result_t r;
  /* no range given: the buffer of 16 positions bounds seq, and the module declares it */
  ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "dim seq in [1, 16]\n"), "%s", r.vmasm);
  onnx_result_free(&r);
  /* a range the user gives is kept as given: one the buffer cannot hold is refused */
  ck_assert(onnx_options_add_shape(&o, "seq=1..17", msg, sizeof msg));
  ck_assert_int_eq(import(&b, NULL, &o, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  onnx_options_free(&o);
  o = (onnx_options_t){0};
  ck_assert(onnx_options_add_shape(&o, "seq=1..16", msg, sizeof msg));
  ck_assert_msg(import(&b, NULL, &o, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "gather(%position_ids, "), "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m = load_model_with(&b, &o);
  onnx_options_free(&o);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  for (int64_t S = 1; S <= 16; S += 15) {
    int64_t B = 2;
    float x[32], y[32];
    for (int64_t i = 0; i < B * S; i++) x[i] = (float)(i % 5) * 0.25f;
    rill_type_t t = T(RILL_F32, 2, B, S);
    const void *data[1] = {x};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 1, &t, data, &res);
    ck_assert(rill_tensor_read(res[0], y, (size_t)(B * S) * 4) == NULL);
    for (int64_t i = 0; i < B * S; i++) ck_assert_float_eq(y[i], x[i] + (float)(i % S));
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* What transformer exports do with the sequence length: y = x * S (a size
 * used as a tensor, made one at run time), last = x[:, -1] (a gather at a
 * size), g = GatherElements(x, idx, axis=1) over symbolic shapes. */
static void seq_sizes_model(builder_t *b) {
  b_init(b, 13);
  static int64_t xd[2] = {-1, -1}, minus1 = -1, one = 1;
  static const char *params[2] = {"batch", "seq"};
  b_input_p(b, "x", 1, 2, xd, params);
  b_input_p(b, "idx", 7, 2, xd, params);
  b_init_tensor(b, "i1", 7, 0, NULL, &one, 1);
  b_init_tensor(b, "m1", 7, 0, NULL, &minus1, 1);
  static char *i1[] = {"x", NULL}, *o1[] = {"s", NULL}, *i2[] = {"s", "i1", NULL}, *o2[] = {"sq", NULL};
  static char *i3[] = {"sq", NULL}, *o3[] = {"sqf", NULL}, *i4[] = {"x", "sqf", NULL}, *o4[] = {"y", NULL};
  static char *i5[] = {"x", "m1", NULL}, *o5[] = {"last", NULL}, *i6[] = {"x", "idx", NULL}, *o6[] = {"g", NULL};
  b_node(b, "Shape", "/shape", i1, o1);
  b_node(b, "Gather", "/g", i2, o2);
  b_attr_i(b, b_node(b, "Cast", "/cast", i3, o3), "to", 1);
  b_node(b, "Mul", "/mul", i4, o4);
  b_attr_i(b, b_node(b, "Gather", "/last", i5, o5), "axis", 1);
  b_attr_i(b, b_node(b, "GatherElements", "/ge", i6, o6), "axis", 1);
  b_output(b, "y");
  b_output(b, "last");
  b_output(b, "g");
}

START_TEST(sequence_sizes_as_tensors) {
  builder_t b;
  seq_sizes_model(&b);
  char msg[512];
  onnx_result_t r;
  ck_assert_msg(import(&b, NULL, NULL, &r, msg, sizeof msg) == RILL_OK, "%s", msg);
  ck_assert_msg(strstr(r.vmasm, "func @main(%x: f32[batch,seq], %idx: i64[batch,seq])"), "%s", r.vmasm);
  onnx_result_free(&r);
  rill_module_t *m = load_model_with(&b, NULL);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  for (int64_t S = 1; S <= 9; S += 4) {
    int64_t B = 3;
    float x[27], y[27], last[3], g[27];
    int64_t idx[27];
    for (int64_t i = 0; i < B * S; i++) {
      x[i] = (float)(i % 7) * 0.5f - 1.0f;
      idx[i] = (i * 5 + 2) % S - (i % 2 ? S : 0); /* negative ones wrap */
    }
    rill_type_t t[2] = {T(RILL_F32, 2, B, S), T(RILL_I64, 2, B, S)};
    const void *data[2] = {x, idx};
    rill_tensor_t **res;
    int nres = invoke_main(vm, 2, t, data, &res);
    ck_assert_int_eq(nres, 3);
    ck_assert(rill_tensor_read(res[0], y, (size_t)(B * S) * 4) == NULL);
    ck_assert(rill_tensor_read(res[1], last, (size_t)B * 4) == NULL);
    ck_assert(rill_tensor_read(res[2], g, (size_t)(B * S) * 4) == NULL);
    for (int64_t i = 0; i < B * S; i++) {
      ck_assert_float_eq(y[i], x[i] * (float)S);
      int64_t k = idx[i] < 0 ? idx[i] + S : idx[i];
      ck_assert_float_eq(g[i], x[(i / S) * S + k]);
    }
    for (int64_t bb = 0; bb < B; bb++) ck_assert_float_eq(last[bb], x[bb * S + S - 1]);
    rill_results_free(vm, res, nres);
  }
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* Opsets 18 to 22 as the default exporter writes them: a reduction's axes
 * and Pad's axes as inputs, Split's num_outputs, Gelu (opset 20). */
static void opset18_model(builder_t *b, int opset) {
  b_init(b, opset);
  static int64_t xd[2] = {2, 7}, d1[1] = {1}, d2[1] = {2}, axis1 = 1, pads[2] = {1, 2};
  b_input(b, "x", 2, xd, NULL);
  b_init_tensor(b, "ax", 7, 1, d1, &axis1, 1);
  b_init_tensor(b, "pads", 7, 1, d2, pads, 2);
  static char *i1[] = {"x", "ax", NULL}, *o1[] = {"mean", NULL}, *i2[] = {"x", NULL}, *o2[] = {"p0", "p1", "p2", "p3", NULL};
  static char *i3[] = {"x", "pads", "", "ax", NULL}, *o3[] = {"padded", NULL}, *o4[] = {"g", NULL};
  b_node(b, "ReduceMean", "/mean", i1, o1);
  Onnx__NodeProto *sp = b_node(b, "Split", "/split", i2, o2);
  b_attr_i(b, sp, "axis", 1);
  b_attr_i(b, sp, "num_outputs", 4);
  b_node(b, "Pad", "/pad", i3, o3);
  b_attr_s(b, b_node(b, "Gelu", "/gelu", i2, o4), "approximate", "tanh");
  b_output(b, "mean");
  b_output(b, "p3");
  b_output(b, "padded");
  b_output(b, "g");
}

START_TEST(opsets_18_to_22) {
  builder_t b;
  char msg[512];
  onnx_result_t r;
  opset18_model(&b, 23);
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "opset 23 of the default domain (1 to 22 are supported)"), "%s", msg);
  opset18_model(&b, 20);
  rill_module_t *m = load_model_with(&b, NULL);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  float x[14], mean[2], p3[2], padded[20], g[14];
  for (int i = 0; i < 14; i++) x[i] = (float)((i * 5) % 9) * 0.5f - 2.0f;
  rill_type_t t = T(RILL_F32, 2, 2, 7);
  const void *data[1] = {x};
  rill_tensor_t **res;
  int nres = invoke_main(vm, 1, &t, data, &res);
  ck_assert_int_eq(nres, 4);
  ck_assert(rill_tensor_read(res[0], mean, sizeof mean) == NULL);
  ck_assert(rill_tensor_read(res[1], p3, sizeof p3) == NULL); /* parts of 2, 2, 2 and 1 */
  ck_assert(rill_tensor_read(res[2], padded, sizeof padded) == NULL);
  ck_assert(rill_tensor_read(res[3], g, sizeof g) == NULL);
  for (int row = 0; row < 2; row++) {
    double sum = 0;
    for (int c = 0; c < 7; c++) sum += x[row * 7 + c];
    ck_assert_float_eq_tol(mean[row], (float)(sum / 7), 1e-6f);
    ck_assert_float_eq(p3[row], x[row * 7 + 6]);
    for (int c = 0; c < 10; c++) ck_assert_float_eq(padded[row * 10 + c], c >= 1 && c < 8 ? x[row * 7 + c - 1] : 0.0f);
  }
  for (int i = 0; i < 14; i++) {
    double v = x[i], want = 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    ck_assert_float_eq_tol(g[i], (float)want, 1e-5f);
  }
  rill_results_free(vm, res, nres);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

/* a two-node model to damage: y = relu(x + w) */
static void small_model(builder_t *b, float *wv) {
  static int64_t xd[2] = {2, 2}, wd[2] = {2, 2};
  b_init(b, 13);
  b_input(b, "x", 2, xd, NULL);
  b_init_tensor(b, "w", 1, 2, wd, wv, 4);
  static char *i1[] = {"x", "w", NULL}, *o1[] = {"s", NULL}, *i2[] = {"s", NULL}, *o2[] = {"y", NULL};
  b_node(b, "Add", "add", i1, o1);
  b_node(b, "Relu", "relu", i2, o2);
  b_output(b, "y");
}

/* Resize with constant scales (torchvision's F.interpolate, bilinear, half
 * pixel) and Upsample-9 (nearest, asymmetric, floor at x/3); scales given
 * at run time and antialias are refused with the reason */
static void resize_model(builder_t *b, const char *op, int opset, float *scales, bool scales_input) {
  b_init(b, opset);
  static int64_t xd[4] = {1, 1, 2, 2}, sd[1] = {4}, rd[1] = {0};
  b_input(b, "x", 4, xd, NULL);
  if (scales_input) b_input(b, "scales", 1, sd, NULL);
  else b_init_tensor(b, "scales", 1, 1, sd, scales, 4);
  b_init_tensor(b, "roi", 1, 1, rd, NULL, 0);
  static char *i11[] = {"x", "roi", "scales", NULL}, *i9[] = {"x", "scales", NULL}, *o[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(b, op, "/up", opset >= 11 ? i11 : i9, o);
  if (opset >= 11) b_attr_s(b, n, "mode", "linear");
  b_output(b, "y");
}

START_TEST(resize_and_upsample) {
  builder_t b;
  float s2[4] = {1, 1, 2, 2}, s3[4] = {1, 1, 1, 3}, x[4] = {1, 2, 3, 4}, y[16];
  resize_model(&b, "Resize", 13, s2, false);
  run_model(&b, x, 4, y, 16);
  float want[16] = {1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4};
  for (int i = 0; i < 16; i++) ck_assert_float_eq_tol(y[i], want[i], 1e-6);
  resize_model(&b, "Upsample", 9, s3, false);
  run_model(&b, x, 4, y, 12);
  float want3[12] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
  for (int i = 0; i < 12; i++) ck_assert_float_eq(y[i], want3[i]);
  onnx_result_t r;
  char msg[512];
  resize_model(&b, "Resize", 13, s2, true); /* scales at run time: the sizes read back (test_onnx_runtime.c) */
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_OK);
  onnx_result_free(&r);
  resize_model(&b, "Resize", 17, s2, false);
  b_attr_i(&b, &b.nodes[0], "antialias", 1);
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "unsupported: antialias=1"), "%s", msg);
  resize_model(&b, "Resize", 13, s2, false);
  b_attr_s(&b, &b.nodes[0], "coordinate_transformation_mode", "sideways");
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "unknown coordinate_transformation_mode"), "%s", msg);
  float bad[4] = {1, 1, 0, 2};
  resize_model(&b, "Resize", 13, bad, false);
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "scales[2] is 0"), "%s", msg);
}
END_TEST

/* ConvTranspose with output_shape one longer than the full output: the
 * pads ONNX's reference derives (begin 0, end -1) add a zero at the end */
START_TEST(conv_transpose_output_shape) {
  builder_t b;
  b_init(&b, 13);
  static int64_t xd[3] = {1, 1, 2}, wd[3] = {1, 1, 3}, st[1] = {2}, os[1] = {6};
  static float wv[3] = {1, 2, 3};
  b_input(&b, "x", 3, xd, NULL);
  b_init_tensor(&b, "w", 1, 3, wd, wv, 3);
  static char *in[] = {"x", "w", NULL}, *out[] = {"y", NULL};
  Onnx__NodeProto *n = b_node(&b, "ConvTranspose", "/ct", in, out);
  b_attr_ints(&b, n, "strides", st, 1);
  b_attr_ints(&b, n, "output_shape", os, 1);
  b_output(&b, "y");
  float x[2] = {1, 10}, y[6], want[6] = {1, 2, 13, 20, 30, 0};
  run_model(&b, x, 2, y, 6);
  for (int i = 0; i < 6; i++) ck_assert_float_eq(y[i], want[i]);
}
END_TEST

START_TEST(bad_models) {
  builder_t b;
  float wv[4] = {1, 2, 3, 4};
  onnx_result_t r;
  char msg[512];
  /* wrong initializer size */
  small_model(&b, wv);
  b.inits[0].n_float_data = 3;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "tensor 'w': 3 values, expected 4"), "%s", msg);
  /* a cycle: add reads relu's output */
  small_model(&b, wv);
  static char *cyc[] = {"x", "y", NULL};
  b.nodes[0].input = cyc;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "node 'add' (Add, opset 13)") && strstr(msg, "cycle"), "%s", msg);
  /* a missing input */
  small_model(&b, wv);
  static char *miss[] = {"x", "nowhere", NULL};
  b.nodes[0].input = miss;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  ck_assert_msg(strstr(msg, "'nowhere' is not defined"), "%s", msg);
  /* huge dimensions: an input, and an initializer that claims them */
  small_model(&b, wv);
  b.dims[0][0].dim_value = (int64_t)1 << 40;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  small_model(&b, wv);
  static int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  b.inits[0].dims = huge;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_MALFORMED);
  /* an unsupported op names node, op type, opset and what */
  small_model(&b, wv);
  b.nodes[1].op_type = "StringNormalizer";
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "node 'relu' (StringNormalizer, opset 13): unsupported: op type StringNormalizer"), "%s", msg);
  /* an unsupported attribute value */
  small_model(&b, wv);
  b.nodes[1].op_type = "Pad";
  b_attr_s(&b, &b.nodes[1], "mode", "wrap");
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "mode=\"wrap\""), "%s", msg);
  /* an attribute the mapping does not know */
  small_model(&b, wv);
  b_attr_i(&b, &b.nodes[1], "frobnicate", 1);
  ck_assert_int_eq(import(&b, NULL, NULL, &r, msg, sizeof msg), RILL_UNIMPLEMENTED);
  ck_assert_msg(strstr(msg, "node 'relu' (Relu, opset 13): unsupported: attribute 'frobnicate'"), "%s", msg);
  /* not a model at all */
  rill_status_t st = onnx_import_bytes((const uint8_t *)"\xff\xff\xff", 3, NULL, NULL, &r);
  ck_assert(st != NULL && rill_status_code(st) == RILL_MALFORMED);
  rill_status_free(st);
}
END_TEST

/* names and strings of the model with control bytes and invalid UTF-8 are
 * escaped in every message (and the producer's name in the text's comment) */
/* ---- sizes read back at run time ---- */
/* x f32[3,4], s i64[2], t i64[3], lo, hi, dl f32[]: NonZero(x),
 * Reshape(x, s), Expand(x, t), ConstantOfShape(t) of 2.5, Tile(x, r) with
 * r = Abs(s) (the repeats computed), Range(lo, hi, dl) */
static void dynamic_model(builder_t *b) {
  b_init(b, 13);
  int64_t xd[2] = {3, 4}, sd[1] = {2}, td[1] = {3};
  b_input(b, "x", 2, xd, NULL);
  b_input_p(b, "s", 7, 1, sd, NULL);
  b_input_p(b, "t", 7, 1, td, NULL);
  b_input_p(b, "lo", 1, 0, NULL, NULL);
  b_input_p(b, "hi", 1, 0, NULL, NULL);
  b_input_p(b, "dl", 1, 0, NULL, NULL);
  static char *i0[] = {"x", NULL}, *o0[] = {"nz", NULL}, *i1[] = {"x", "s", NULL}, *o1[] = {"r", NULL}, *i2[] = {"x", "t", NULL},
              *o2[] = {"e", NULL}, *i3[] = {"t", NULL}, *o3[] = {"c", NULL}, *i4[] = {"s", NULL}, *o4[] = {"rep", NULL},
              *i5[] = {"x", "rep", NULL}, *o5[] = {"tl", NULL}, *i6[] = {"lo", "hi", "dl", NULL}, *o6[] = {"rg", NULL};
  b_node(b, "NonZero", "nz", i0, o0);
  b_node(b, "Reshape", "rs", i1, o1);
  b_node(b, "Expand", "ex", i2, o2);
  Onnx__NodeProto *c = b_node(b, "ConstantOfShape", "cs", i3, o3);
  static float v = 2.5f;
  b_attr_scalar(b, c, "value", 1, &v);
  b_node(b, "Abs", "ab", i4, o4);
  b_node(b, "Tile", "tl", i5, o5);
  b_node(b, "Range", "rg", i6, o6);
  b_output(b, "nz");
  b_output(b, "r");
  b_output(b, "e");
  b_output(b, "c");
  b_output(b, "tl");
  b_output(b, "rg");
}

START_TEST(sizes_read_back) {
  builder_t b;
  dynamic_model(&b);
  rill_module_t *m = load_model(&b);
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  /* two runs at different sizes, on one VM: each binds its own */
  static const float X[2][12] = {{0, 1.5f, 0, -2, 0, 0, 3, 0, 0, 0, 0, 4}, {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 7}};
  static const int64_t S[2][2] = {{-1, 6}, {2, -1}}, T[2][3] = {{2, 1, 4}, {1, 3, 1}};
  static const float LO[2] = {1.5f, 10}, HI[2] = {7, -2}, DL[2] = {1.25f, -3};
  for (int k = 0; k < 2; k++) {
    char script[2048];
    snprintf(script, sizeof script,
             "x = np.array(%s, dtype=np.float32).reshape(3, 4)\n"
             "s = [%lld, %lld]; t = [%lld, %lld, %lld]\n"
             "s2 = [x.shape[i] if v == 0 else v for i, v in enumerate(s)]\n"
             "res = [np.array(np.nonzero(x)), x.reshape(s2), x * np.ones(t, dtype=np.float32), np.full(t, 2.5, dtype=np.float32),\n"
             "       np.tile(x, np.abs(s)), np.arange(np.float32(%g), np.float32(%g), np.float32(%g), dtype=np.float32)]\n"
             "for r in res: print(r.ndim, *r.shape, *r.ravel().tolist())",
             k ? "[1,0,2,0,3,0,4,0,5,0,6,7]" : "[0,1.5,0,-2,0,0,3,0,0,0,0,4]", (long long)S[k][0], (long long)S[k][1], (long long)T[k][0],
             (long long)T[k][1], (long long)T[k][2], LO[k], HI[k], DL[k]);
    static double want[4096];
    size_t nw;
    if (!numpy_results(script, want, 4096, &nw)) {
      printf("sizes_read_back: numpy not usable, skipped\n");
      break;
    }
    rill_type_t types[6] = {{RILL_F32, 2, {3, 4}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {3}}, {RILL_F32, 0, {0}}, {RILL_F32, 0, {0}}, {RILL_F32, 0, {0}}};
    const void *data[6] = {X[k], S[k], T[k], &LO[k], &HI[k], &DL[k]};
    rill_tensor_t *in[6], **res;
    int nres;
    for (int i = 0; i < 6; i++) ck_assert(rill_tensor_create(vm, &types[i], data[i], &in[i]) == NULL);
    rill_status_t st = rill_vm_invoke(vm, "main", in, 6, &res, &nres);
    ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
    ck_assert_int_eq(nres, 6);
    size_t w = 0;
    for (int r = 0; r < nres; r++) {
      const rill_type_t *t = rill_tensor_type(res[r]);
      ck_assert_int_eq(t->rank, (int)want[w++]);
      for (int d = 0; d < t->rank; d++) ck_assert_msg(t->dims[d] == (int64_t)want[w++], "run %d result %d dim %d", k, r, d);
      size_t cnt = rill_type_numel(t);
      double *got = malloc(8 * (cnt ? cnt : 1));
      void *raw = malloc(8 * (cnt ? cnt : 1));
      ck_assert(rill_tensor_read(res[r], raw, rill_tensor_nbytes(res[r])) == NULL);
      for (size_t i = 0; i < cnt; i++) got[i] = t->dtype == RILL_I64 ? (double)((int64_t *)raw)[i] : (double)((float *)raw)[i];
      for (size_t i = 0; i < cnt; i++) ck_assert_msg(got[i] == want[w + i], "run %d result %d [%zu]: %g, numpy %g", k, r, i, got[i], want[w + i]);
      w += cnt;
      free(got);
      free(raw);
    }
    ck_assert_uint_eq(w, nw);
    rill_results_free(vm, res, nres);
    for (int i = 0; i < 6; i++) rill_tensor_release(in[i]);
  }
  /* a shape that does not fit: refused at the sizes bound, naming the view */
  rill_type_t types[6] = {{RILL_F32, 2, {3, 4}}, {RILL_I64, 1, {2}}, {RILL_I64, 1, {3}}, {RILL_F32, 0, {0}}, {RILL_F32, 0, {0}}, {RILL_F32, 0, {0}}};
  static const int64_t BAD[2] = {5, -1};
  const void *data[6] = {X[0], BAD, T[0], &LO[0], &HI[0], &DL[0]};
  rill_tensor_t *in[6], **res;
  int nres;
  for (int i = 0; i < 6; i++) ck_assert(rill_tensor_create(vm, &types[i], data[i], &in[i]) == NULL);
  rill_status_t st = rill_vm_invoke(vm, "main", in, 6, &res, &nres);
  ck_assert_msg(st && strstr(rill_status_message(st), "the element counts differ at the sizes bound"), "%s", st ? rill_status_message(st) : "ok");
  rill_status_free(st);
  for (int i = 0; i < 6; i++) rill_tensor_release(in[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
}
END_TEST

void import_escaped(builder_t *b, const char *needle) {
  size_t n;
  uint8_t *bytes = b_pack(b, &n);
  onnx_result_t r;
  expect_escaped(onnx_import_bytes(bytes, n, NULL, NULL, &r), needle);
  free(bytes);
}

START_TEST(names_escaped) {
  builder_t b;
  float wv[4] = {1, 2, 3, 4};
  /* an op type */
  small_model(&b, wv);
  b.nodes[1].op_type = "Re\x1b[31mlu\x07";
  import_escaped(&b, "(Re\\x1b[31mlu\\x07, opset 13): unsupported: op type Re\\x1b[31mlu\\x07");
  /* a node name with invalid UTF-8 and a C1 control, and an input name */
  small_model(&b, wv);
  b.nodes[0].name = "a\xff\xc2\x9b" "dd";
  static char *miss[] = {"x", "now\x1bhere", NULL};
  b.nodes[0].input = miss;
  import_escaped(&b, "node 'a\\xff\\xc2\\x9bdd' (Add, opset 13): input 'now\\x1bhere' is not defined");
  /* an attribute's string and an attribute's name */
  small_model(&b, wv);
  b.nodes[1].op_type = "Pad";
  b_attr_s(&b, &b.nodes[1], "mode", "wr\x1b]0;ap\x07");
  import_escaped(&b, "mode=\"wr\\x1b]0;ap\\x07\"");
  small_model(&b, wv);
  b_attr_i(&b, &b.nodes[1], "frob\x08", 1);
  import_escaped(&b, "attribute 'frob\\x08'");
  /* an initializer's name */
  small_model(&b, wv);
  b.inits[0].name = "w\x1b";
  static char *again[] = {"x", "w\x1b", NULL};
  b.nodes[0].input = again;
  b.inits[0].n_float_data = 3;
  import_escaped(&b, "w\\x1b");
  /* the producer's name cannot end the text's comment line */
  small_model(&b, wv);
  b.model.producer_name = "evil\nfunc @x() -> () {\x1b";
  onnx_result_t r;
  ck_assert_int_eq(import(&b, NULL, NULL, &r, NULL, 0), RILL_OK);
  const char *want = "# imported from ONNX (opset 13, produced by evil\\x0afunc @x() -> () {\\x1b)\nweights ";
  ck_assert_msg(!strncmp(r.vmasm, want, strlen(want)), "%s", r.vmasm);
  onnx_result_free(&r);
}
END_TEST

/* every truncation and many byte flips of a valid model: an error or a
 * program, never a crash (ASan and UBSan watch in CI) */
START_TEST(truncated_and_mutated) {
  builder_t b;
  float wv[4] = {1, 2, 3, 4};
  small_model(&b, wv);
  damage(&b, 3000);
  /* models whose sizes are over shape variables: the polynomial import and its fallback */
  bert_mask_model(&b);
  damage(&b, 1500);
  dynamic_model(&b); /* sizes read back at run time */
  damage(&b, 1500);
  two_vars_model(&b);
  damage(&b, 1500);
  causal_model(&b);
  damage(&b, 1500);
  tile_cumsum_model(&b); /* Tile by a size over a variable, CumSum of bool */
  damage(&b, 1500);
  sym_bounds_model(&b); /* slice bounds over variables, Reshape's -1 beside a sum */
  damage(&b, 1500);
}
END_TEST

/* onnx_import_to_files writes both files or neither */
START_TEST(no_partial_files) {
  builder_t b;
  float wv[4] = {1, 2, 3, 4};
  small_model(&b, wv);
  b.nodes[1].op_type = "Resize";
  char dir[] = "/tmp/rill-test-onnx-XXXXXX", in[256], out[256], w[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(in, sizeof in, "%s/m.onnx", dir);
  snprintf(out, sizeof out, "%s/m.vmasm", dir);
  snprintf(w, sizeof w, "%s/m.safetensors", dir);
  b_write_file(&b, in);
  rill_status_t st = onnx_import_to_files(in, out, NULL);
  ck_assert(st != NULL);
  rill_status_free(st);
  struct stat sb;
  ck_assert(stat(out, &sb) != 0 && stat(w, &sb) != 0);
  small_model(&b, wv);
  b_write_file(&b, in);
  st = onnx_import_to_files(in, out, NULL);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  ck_assert(stat(out, &sb) == 0 && stat(w, &sb) == 0);
  uint8_t *mod;
  size_t msize;
  st = rill_assemble_file(NULL, out, NULL, &mod, &msize);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  free(mod);
  unlink(in);
  unlink(out);
  unlink(w);
  rmdir(dir);
}
END_TEST

int main(void) {
  const char *why;
  if (!onnx_available(&why)) {
    printf("skipped: %s\n", why);
    return 77;
  }
  Suite *s = suite_create("onnx");
  TCase *tc = tcase_create("import");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, gemm_transposes_and_scales);
  tcase_add_test(tc, gemm_weight_as_it_lies);
  tcase_add_test(tc, unsigned_and_int16_tensors);
  tcase_add_test(tc, shape_subgraph_folds);
  tcase_add_test(tc, large_initializers_read_in_place);
  tcase_add_test(tc, auto_pad_same_upper);
  tcase_add_test(tc, max_pool_ceil_mode_with_pads);
  tcase_add_test(tc, max_pool_ceil_mode_adding_nothing);
  tcase_add_test(tc, shape_option_and_external_data);
  tcase_add_test(tc, symbolic_dims_become_shape_variables);
  tcase_add_test(tc, bert_mask_expansion_symbolic);
  tcase_add_test(tc, tile_by_a_batch_and_cumsum_of_bool);
  tcase_add_test(tc, slice_bounds_over_shape_variables);
  tcase_add_test(tc, sizes_over_two_variables);
  tcase_add_test(tc, causal_mask_over_a_range);
  tcase_add_test(tc, conv_with_dynamic_batch);
  tcase_add_test(tc, cumsum_position_ids);
  tcase_add_test(tc, position_ids_sliced_to_the_sequence);
  tcase_add_test(tc, sequence_sizes_as_tensors);
  tcase_add_test(tc, opsets_18_to_22);
  tcase_add_test(tc, resize_and_upsample);
  tcase_add_test(tc, conv_transpose_output_shape);
  tcase_add_test(tc, bad_models);
  tcase_add_test(tc, names_escaped);
  tcase_add_test(tc, sizes_read_back);
  onnx_control_cases(tc);
  onnx_runtime_cases(tc);
  tcase_add_test(tc, truncated_and_mutated);
  tcase_add_test(tc, no_partial_files);
  suite_add_tcase(s, tc);
  return run_suite(s);
}
