/* onnx_builder.h: ONNX models built in the tests with protobuf-c (every
 * piece owned by the builder or static in the test), imported, assembled
 * and run: shared by test_onnx.c, test_onnx_control.c (If, Loop, Scan) and
 * test_onnx_ops.c. */
#ifndef RILL_TESTS_ONNX_BUILDER_H
#define RILL_TESTS_ONNX_BUILDER_H

#include <check.h>

#include "helpers.h"
#include "onnx_int.h"

#define MAXN 24
#define MAXA 8 /* attributes per node */
typedef struct builder {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset, *opsets[1];
  Onnx__NodeProto nodes[MAXN], *node_ptrs[MAXN];
  Onnx__AttributeProto attrs[MAXN][MAXA], *attr_ptrs[MAXN][MAXA];
  Onnx__TensorProto inits[MAXN], *init_ptrs[MAXN];
  Onnx__ValueInfoProto ins[MAXN], outs[MAXN], *in_ptrs[MAXN], *out_ptrs[MAXN];
  Onnx__TypeProto types[2 * MAXN];
  Onnx__TypeProto__Tensor ttypes[2 * MAXN];
  Onnx__TensorShapeProto shapes[2 * MAXN];
  Onnx__TensorShapeProto__Dimension dims[2 * MAXN][8], *dim_ptrs[2 * MAXN][8];
  int ntypes;
  Onnx__TensorProto attr_tensors[MAXA];
  int nattr_tensors;
} builder_t;

void b_init(builder_t *b, int opset);
Onnx__TypeProto *b_type_p(builder_t *b, int32_t elem, int rank, const int64_t *dims, const char *const *params);
void b_input_p(builder_t *b, const char *name, int32_t elem, int rank, const int64_t *dims, const char *const *params);
void b_input(builder_t *b, const char *name, int rank, const int64_t *dims, const char *param);
void b_output(builder_t *b, const char *name);
Onnx__TensorProto *b_init_tensor(builder_t *b, const char *name, int32_t elem, int rank, int64_t *dims, void *vals, size_t n);
Onnx__NodeProto *b_node(builder_t *b, const char *op, const char *name, char **in, char **out);
Onnx__AttributeProto *b_attr(builder_t *b, Onnx__NodeProto *n, const char *name);
void b_attr_i(builder_t *b, Onnx__NodeProto *n, const char *name, int64_t v);
void b_attr_f(builder_t *b, Onnx__NodeProto *n, const char *name, float v);
void b_attr_s(builder_t *b, Onnx__NodeProto *n, const char *name, const char *v);
void b_attr_ints(builder_t *b, Onnx__NodeProto *n, const char *name, int64_t *v, size_t k);
void b_attr_scalar(builder_t *b, Onnx__NodeProto *n, const char *name, int32_t elem, void *val);
uint8_t *b_pack(builder_t *b, size_t *n);
void b_write_file(builder_t *b, const char *path);
rill_code_t import(builder_t *b, const char *base, onnx_options_t *o, onnx_result_t *r, char *msg, size_t nmsg);
rill_module_t *load_model_with(builder_t *b, const onnx_options_t *o);
rill_module_t *load_model(builder_t *b);
int invoke_main(rill_vm_t *vm, int n, const rill_type_t *types, const void *const *data, rill_tensor_t ***res);
void run_model(builder_t *b, const float *x, size_t nx, float *y, size_t ny);
void damage(builder_t *b, int flips);
bool numpy_results(const char *script, double *out, size_t max, size_t *n);
/* the import fails with a message holding needle, escaped */
void import_escaped(builder_t *b, const char *needle);
/* test_onnx_control.c: If, Loop, Scan */
void onnx_control_cases(TCase *tc);
/* test_onnx_runtime.c: values computed at run time that shape results */
void onnx_runtime_cases(TCase *tc);

#endif
