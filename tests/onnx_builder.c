/* onnx_builder.c: the model builder of onnx_builder.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz/targets.h"
#include "onnx_builder.h"

void b_init(builder_t *b, int opset) {
  memset(b, 0, sizeof *b);
  b->model = (Onnx__ModelProto)ONNX__MODEL_PROTO__INIT;
  b->graph = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
  b->opset = (Onnx__OperatorSetIdProto)ONNX__OPERATOR_SET_ID_PROTO__INIT;
  b->opset.has_version = 1;
  b->opset.version = opset;
  b->opsets[0] = &b->opset;
  b->model.n_opset_import = 1;
  b->model.opset_import = b->opsets;
  b->model.has_ir_version = 1;
  b->model.ir_version = 8;
  b->model.graph = &b->graph;
  b->graph.node = b->node_ptrs;
  b->graph.initializer = b->init_ptrs;
  b->graph.input = b->in_ptrs;
  b->graph.output = b->out_ptrs;
}

/* dims[i] < 0: the symbolic dimension params[i] */
Onnx__TypeProto *b_type_p(builder_t *b, int32_t elem, int rank, const int64_t *dims, const char *const *params) {
  int k = b->ntypes++;
  Onnx__TypeProto *t = &b->types[k];
  *t = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  b->ttypes[k] = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  b->ttypes[k].has_elem_type = 1;
  b->ttypes[k].elem_type = elem;
  b->shapes[k] = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  for (int i = 0; i < rank; i++) {
    b->dims[k][i] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    if (dims[i] < 0 && params && params[i]) {
      b->dims[k][i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      b->dims[k][i].dim_param = (char *)params[i];
    } else {
      b->dims[k][i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      b->dims[k][i].dim_value = dims[i];
    }
    b->dim_ptrs[k][i] = &b->dims[k][i];
  }
  b->shapes[k].n_dim = (size_t)rank;
  b->shapes[k].dim = b->dim_ptrs[k];
  b->ttypes[k].shape = &b->shapes[k];
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = &b->ttypes[k];
  return t;
}

/* an input of ONNX elem type `elem`; dims[i] < 0 is the symbolic dimension params[i] */
void b_input_p(builder_t *b, const char *name, int32_t elem, int rank, const int64_t *dims, const char *const *params) {
  size_t i = b->graph.n_input++;
  b->ins[i] = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  b->ins[i].name = (char *)name;
  b->ins[i].type = b_type_p(b, elem, rank, dims, params);
  b->in_ptrs[i] = &b->ins[i];
}

/* an f32 input whose negative dims are the symbolic dimension `param` */
void b_input(builder_t *b, const char *name, int rank, const int64_t *dims, const char *param) {
  const char *params[8] = {param, param, param, param, param, param, param, param};
  b_input_p(b, name, 1, rank, dims, params);
}

void b_output(builder_t *b, const char *name) {
  size_t i = b->graph.n_output++;
  b->outs[i] = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  b->outs[i].name = (char *)name;
  b->out_ptrs[i] = &b->outs[i];
}

/* f32 (elem 1) from float_data, else i64 (elem 7) from int64_data */
Onnx__TensorProto *b_init_tensor(builder_t *b, const char *name, int32_t elem, int rank, int64_t *dims, void *vals, size_t n) {
  size_t i = b->graph.n_initializer++;
  Onnx__TensorProto *t = &b->inits[i];
  *t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = (size_t)rank;
  t->dims = dims;
  if (elem == 1) { t->n_float_data = n; t->float_data = vals; }
  else if (elem == 2 || elem == 3 || elem == 4 || elem == 5 || elem == 6 || elem == 10 || elem == 16) { t->n_int32_data = n; t->int32_data = vals; } /* u8, i8, u16, i16, i32, and f16 and bf16's bits, as int32_t */
  else if (elem == 12 || elem == 13) { t->n_uint64_data = n; t->uint64_data = vals; } /* u32, u64 as uint64_t */
  else { t->n_int64_data = n; t->int64_data = vals; }
  b->init_ptrs[i] = t;
  return t;
}

/* node with inputs/outputs given as NULL-terminated lists */
Onnx__NodeProto *b_node(builder_t *b, const char *op, const char *name, char **in, char **out) {
  size_t i = b->graph.n_node++;
  Onnx__NodeProto *n = &b->nodes[i];
  *n = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  n->op_type = (char *)op;
  n->name = (char *)name;
  while (in[n->n_input]) n->n_input++;
  n->input = in;
  while (out[n->n_output]) n->n_output++;
  n->output = out;
  n->attribute = b->attr_ptrs[i];
  b->node_ptrs[i] = n;
  return n;
}

Onnx__AttributeProto *b_attr(builder_t *b, Onnx__NodeProto *n, const char *name) {
  size_t ni = (size_t)(n - b->nodes), k = n->n_attribute++;
  ck_assert_uint_lt(k, MAXA);
  Onnx__AttributeProto *a = &b->attrs[ni][k];
  *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
  a->name = (char *)name;
  b->attr_ptrs[ni][k] = a;
  return a;
}
void b_attr_i(builder_t *b, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = b_attr(b, n, name);
  a->has_type = 1; a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT; a->has_i = 1; a->i = v;
}
void b_attr_f(builder_t *b, Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = b_attr(b, n, name);
  a->has_type = 1; a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT; a->has_f = 1; a->f = v;
}
void b_attr_s(builder_t *b, Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = b_attr(b, n, name);
  a->has_type = 1; a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING; a->has_s = 1;
  a->s.data = (uint8_t *)v; a->s.len = strlen(v);
}
void b_attr_ints(builder_t *b, Onnx__NodeProto *n, const char *name, int64_t *v, size_t k) {
  Onnx__AttributeProto *a = b_attr(b, n, name);
  a->has_type = 1; a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS; a->n_ints = k; a->ints = v;
}

/* a tensor attribute: one value, f32 (elem 1) or i64 (elem 7) */
void b_attr_scalar(builder_t *b, Onnx__NodeProto *n, const char *name, int32_t elem, void *val) {
  Onnx__AttributeProto *a = b_attr(b, n, name);
  Onnx__TensorProto *t = &b->attr_tensors[b->nattr_tensors++];
  static int64_t one = 1;
  *t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = 1;
  t->dims = &one;
  if (elem == 1) { t->n_float_data = 1; t->float_data = val; }
  else { t->n_int64_data = 1; t->int64_data = val; }
  a->has_type = 1; a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR; a->t = t;
}

uint8_t *b_pack(builder_t *b, size_t *n) {
  *n = onnx__model_proto__get_packed_size(&b->model);
  uint8_t *p = malloc(*n);
  ck_assert(p != NULL);
  onnx__model_proto__pack(&b->model, p);
  return p;
}

/* the packed model written to path */
void b_write_file(builder_t *b, const char *path) {
  size_t n;
  uint8_t *bytes = b_pack(b, &n);
  FILE *f = fopen(path, "wb");
  ck_assert(f && fwrite(bytes, 1, n, f) == n);
  fclose(f);
  free(bytes);
}

/* imports bytes; returns the status code (RILL_OK on success), *text the program */
rill_code_t import(builder_t *b, const char *base, onnx_options_t *o, onnx_result_t *r, char *msg, size_t nmsg) {
  size_t n;
  uint8_t *bytes = b_pack(b, &n);
  rill_status_t st = onnx_import_bytes(bytes, n, base, o, r);
  free(bytes);
  rill_code_t c = st ? rill_status_code(st) : RILL_OK;
  if (msg) snprintf(msg, nmsg, "%s", st ? rill_status_message(st) : "");
  rill_status_free(st);
  return c;
}

/* The model written to a scratch file and loaded (o: the --shape options, or NULL). */
rill_module_t *load_model_with(builder_t *b, const onnx_options_t *o) {
  char dir[] = "/tmp/rill-test-onnx-XXXXXX", path[256];
  ck_assert(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/m.onnx", dir);
  b_write_file(b, path);
  rill_module_t *m;
  rill_status_t st = onnx_load_module(path, o, NULL, &m);
  unlink(path);
  rmdir(dir);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  return m;
}
rill_module_t *load_model(builder_t *b) { return load_model_with(b, NULL); }

/* Runs @main with n inputs (types and data); asserts success; the results' count. */
int invoke_main(rill_vm_t *vm, int n, const rill_type_t *types, const void *const *data, rill_tensor_t ***res) {
  rill_tensor_t *in[8] = {NULL};
  int nres;
  ck_assert_int_le(n, 8);
  for (int i = 0; i < n; i++) ck_assert(rill_tensor_create(vm, &types[i], data[i], &in[i]) == NULL);
  rill_status_t st = rill_vm_invoke(vm, "main", in, n, res, &nres);
  for (int i = 0; i < n; i++) rill_tensor_release(in[i]);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  return nres;
}

/* imports, assembles through a scratch folder and runs @main on cpu with one f32 input */
void run_model(builder_t *b, const float *x, size_t nx, float *y, size_t ny) {
  rill_module_t *m = load_model(b);
  rill_status_t st;
  rill_vm_t *vm;
  ck_assert(rill_vm_create(NULL, m, "cpu", &vm) == NULL);
  rill_type_t pt;
  const char *pn;
  ck_assert(rill_module_param_type(m, "main", 0, &pt, &pn));
  ck_assert_uint_eq(rill_type_numel(&pt), nx);
  rill_tensor_t *in, **res;
  int nres;
  ck_assert(rill_tensor_create(vm, &pt, x, &in) == NULL);
  st = rill_vm_invoke(vm, "main", &in, 1, &res, &nres);
  ck_assert_msg(st == NULL, "%s", st ? rill_status_message(st) : "");
  ck_assert_uint_eq(rill_tensor_nbytes(res[0]), ny * 4);
  ck_assert(rill_tensor_read(res[0], y, ny * 4) == NULL);
  rill_tensor_release(in);
  rill_results_free(vm, res, nres);
  rill_vm_destroy(vm);
  rill_module_release(m);
}


/* The model packed, then every truncation and `flips` copies with three
 * bits flipped each, through the ONNX fuzz target (no crash, leak or hang). */
void damage(builder_t *b, int flips) {
  size_t n;
  uint8_t *bytes = b_pack(b, &n);
  for (size_t k = 0; k < n; k++) fuzz_onnx(bytes, k);
  uint8_t *copy = malloc(n);
  uint64_t s = 12345;
  for (int it = 0; it < flips; it++) {
    memcpy(copy, bytes, n);
    for (int j = 0; j < 3; j++) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      copy[(s >> 33) % n] ^= (uint8_t)(1u << ((s >> 20) & 7));
    }
    fuzz_onnx(copy, n);
  }
  free(copy);
  free(bytes);
}

/* numpy's answer: the script prints each result as its shape's length, its
 * dims, then its values; false (the test skipped) where numpy cannot be
 * imported, a failure where the script fails */
bool numpy_results(const char *script, double *out, size_t max, size_t *n) {
  /* $PYTHON where set (a machine whose numpy is in another Python), else Debian's */
  const char *py = getenv("PYTHON") && *getenv("PYTHON") ? getenv("PYTHON") : "/usr/bin/python3";
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s -c 'import numpy' 2>/dev/null", py);
  if (system(cmd) != 0) return false;
  snprintf(cmd, sizeof cmd, "%s -c 'import numpy as np\n%s'", py, script);
  FILE *p = popen(cmd, "r");
  ck_assert(p != NULL);
  *n = 0;
  while (*n < max && fscanf(p, "%lf", &out[*n]) == 1) (*n)++;
  ck_assert_msg(pclose(p) == 0 && *n > 0, "numpy script failed:\n%s", script);
  return true;
}
