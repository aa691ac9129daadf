/* gen_onnx.c: writes BERT-base, GPT-2 small and Swin as ONNX files with the node
 * patterns torch.onnx.export (TorchScript exporter, opset 17, constant
 * folding on, dynamic batch and sequence axes) writes for the Hugging Face
 * `transformers` models in eval mode, with random f32 weights, so the
 * importer's start-up time can be measured where torch is absent
 * (bench/import/run.sh). Built with protobuf-c over the same onnx.proto the
 * importer reads.
 *
 *   bench_import_gen bert OUT.onnx [--layers N]
 *   bench_import_gen gpt2 OUT.onnx [--layers N]
 *   bench_import_gen swin OUT.onnx [--batch N] [--image N] [--embed N] [--depths 2,2,6,2] [--heads 3,6,12,24] [--window N]
 *
 * swin: torchvision's swin_t (the defaults) as exported with the batch
 * fixed; bench/import/README.md lists its nodes. tests/test_windows.sh
 * assembles a small one.
 *
 * Where it differs from a real export (bench/import/README.md lists them):
 * no value_info for intermediate values, GPT-2's attention scale is a
 * Constant 8 (the exporter may compute it from value.size(-1)), each GPT-2
 * layer keeps its own causal-mask buffer (no deduplication), and node and
 * initializer names follow the exporter's scheme (/encoder/layer.0/...,
 * onnx::MatMul_N) but not its numbering. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

enum { F32 = 1, U8 = 2, I64 = 7, BOOL = 9 };

static Onnx__GraphProto G = ONNX__GRAPH_PROTO__INIT;
static size_t cap_node, cap_init;
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static int counter; /* for Constant names */

static void *xmalloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p) { fprintf(stderr, "gen_onnx: out of memory\n"); exit(1); }
  return p;
}
__attribute__((format(printf, 1, 2))) static char *fmt(const char *f, ...) {
  va_list ap;
  va_start(ap, f);
  char buf[512];
  vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return strdup(buf);
}
static float frand(void) { /* uniform in [-0.05, 0.05): BERT's init std 0.02 is close */
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return ((float)(rng >> 40) / (float)(1 << 24) - 0.5f) * 0.1f;
}

static Onnx__TensorProto *tensor(const char *name, int elem, int rank, const int64_t *dims, const void *data, size_t bytes) {
  Onnx__TensorProto *t = xmalloc(sizeof *t);
  *t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  t->name = strdup(name);
  t->has_data_type = 1;
  t->data_type = elem;
  t->n_dims = (size_t)rank;
  t->dims = xmalloc(sizeof(int64_t) * (size_t)(rank ? rank : 1));
  if (rank) memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
  t->has_raw_data = 1; /* the exporter writes raw_data */
  t->raw_data.len = bytes;
  t->raw_data.data = xmalloc(bytes);
  if (data) memcpy(t->raw_data.data, data, bytes);
  return t;
}
static void add_init(Onnx__TensorProto *t) {
  if (G.n_initializer == cap_init) {
    cap_init = cap_init ? 2 * cap_init : 256;
    G.initializer = realloc(G.initializer, cap_init * sizeof *G.initializer);
  }
  G.initializer[G.n_initializer++] = t;
}
/* a parameter of random f32 values; bias-like ones (rank 1) start near 0, norms' weights at 1 */
static const char *param(const char *name, int rank, const int64_t *dims, float base) {
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
  Onnx__TensorProto *t = tensor(name, F32, rank, dims, NULL, n * 4);
  float *f = (float *)t->raw_data.data;
  for (size_t i = 0; i < n; i++) f[i] = base + frand();
  add_init(t);
  return t->name;
}
static const char *W(const char *name, int64_t a, int64_t b) { return param(name, 2, (int64_t[]){a, b}, 0); }
static const char *V(const char *name, int64_t a, float base) { return param(name, 1, (int64_t[]){a}, base); }

static Onnx__NodeProto *node(const char *op, const char *name, const char **in, int nout) {
  Onnx__NodeProto *n = xmalloc(sizeof *n);
  *n = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  n->op_type = strdup(op);
  n->name = strdup(name);
  while (in[n->n_input]) n->n_input++;
  n->input = xmalloc(sizeof(char *) * (n->n_input + 1));
  for (size_t i = 0; i < n->n_input; i++) n->input[i] = strdup(in[i]);
  n->n_output = (size_t)nout;
  n->output = xmalloc(sizeof(char *) * (size_t)nout);
  for (int i = 0; i < nout; i++) n->output[i] = fmt("%s_output_%d", name, i);
  n->attribute = xmalloc(sizeof(void *) * 8);
  if (G.n_node == cap_node) {
    cap_node = cap_node ? 2 * cap_node : 1024;
    G.node = realloc(G.node, cap_node * sizeof *G.node);
  }
  G.node[G.n_node++] = n;
  return n;
}
#define IN(...) ((const char *[]){__VA_ARGS__, NULL})
/* one node with one output; its output's name */
static const char *op(const char *type, const char *name, const char **in) { return node(type, name, in, 1)->output[0]; }

static Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name, int type) {
  Onnx__AttributeProto *a = xmalloc(sizeof *a);
  *a = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
  a->name = strdup(name);
  a->has_type = 1;
  a->type = type;
  n->attribute[n->n_attribute++] = a;
  return a;
}
static void attr_i(Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  a->has_i = 1;
  a->i = v;
}
static void attr_f(Onnx__NodeProto *n, const char *name, float v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  a->has_f = 1;
  a->f = v;
}
static void attr_str(Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  a->has_s = 1;
  a->s.data = (uint8_t *)strdup(v);
  a->s.len = strlen(v);
}
static void attr_ints(Onnx__NodeProto *n, const char *name, int k, const int64_t *v) {
  Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  a->n_ints = (size_t)k;
  a->ints = xmalloc(sizeof(int64_t) * (size_t)k);
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)k);
}

/* Constant nodes, as the exporter writes them ("/prefix/Constant_N") */
static const char *constant(const char *prefix, int elem, int rank, const int64_t *dims, const void *data, size_t bytes) {
  char *name = fmt("%s/Constant_%d", prefix, counter++);
  Onnx__NodeProto *n = node("Constant", name, IN(NULL), 1);
  Onnx__AttributeProto *a = attr(n, "value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  a->t = tensor("", elem, rank, dims, data, bytes);
  free(name);
  return n->output[0];
}
static const char *c_i64(const char *p, int64_t v) { return constant(p, I64, 0, NULL, &v, 8); } /* scalar */
static const char *c_i64v(const char *p, int64_t v) { return constant(p, I64, 1, (int64_t[]){1}, &v, 8); } /* [v] */
static const char *c_f32(const char *p, float v) { return constant(p, F32, 0, NULL, &v, 4); }
static const char *c_ints(const char *p, int k, const int64_t *v) { return constant(p, I64, 1, (int64_t[]){k}, v, 8 * (size_t)k); }

/* node names as the exporter makes them: PREFIX/OP, then PREFIX/OP_1, PREFIX/OP_2, ... */
static struct { char *key; int n; } *seen;
static size_t nseen, capseen;
static char *nm(const char *prefix, const char *op) {
  char *key = fmt("%s/%s", prefix, op);
  for (size_t i = nseen; i-- > 0;)
    if (strcmp(seen[i].key, key) == 0) {
      char *r = fmt("%s_%d", key, seen[i].n++);
      free(key);
      return r;
    }
  if (nseen == capseen) {
    capseen = capseen ? 2 * capseen : 1024;
    seen = realloc(seen, capseen * sizeof *seen);
  }
  seen[nseen].key = key;
  seen[nseen++].n = 1;
  return strdup(key);
}
static const char *op1(const char *prefix, const char *type, const char **in) {
  char *n = nm(prefix, type);
  const char *o = op(type, n, in);
  free(n);
  return o;
}
static Onnx__NodeProto *nd(const char *prefix, const char *type, const char **in) {
  char *n = nm(prefix, type);
  Onnx__NodeProto *r = node(type, n, in, 1);
  free(n);
  return r;
}
/* x.size(i) as a 1-D tensor for Concat: Shape -> Gather(Constant i) -> Unsqueeze(Constant [0]) */
static const char *size_of(const char *p, const char *x, int64_t i, const char **scalar) {
  const char *s = op1(p, "Shape", IN(x));
  Onnx__NodeProto *g = nd(p, "Gather", IN(s, c_i64(p, i)));
  attr_i(g, "axis", 0);
  if (scalar) *scalar = g->output[0];
  return op1(p, "Unsqueeze", IN(g->output[0], c_i64v(p, 0)));
}
static const char *transpose(const char *p, const char *x, int64_t a, int64_t b, int64_t c, int64_t d) {
  Onnx__NodeProto *t = nd(p, "Transpose", IN(x));
  attr_ints(t, "perm", 4, (int64_t[]){a, b, c, d});
  return t->output[0];
}
static const char *layer_norm(const char *p, const char *x, const char *w, const char *b, float eps) {
  Onnx__NodeProto *n = nd(p, "LayerNormalization", IN(x, w, b));
  attr_i(n, "axis", -1);
  attr_f(n, "epsilon", eps);
  return n->output[0];
}
/* nn.Linear on a 3-D input: MatMul with the folded weight.t() (onnx::MatMul_N), then Add(bias, .) */
static int matmul_id = 1000;
static const char *linear(const char *p, const char *x, const char *bias_name, int64_t in, int64_t out) {
  char *wn = fmt("onnx::MatMul_%d", matmul_id++);
  const char *w = W(wn, in, out);
  free(wn);
  const char *m = op1(p, "MatMul", IN(x, w));
  const char *b = V(bias_name, out, 0);
  return op1(p, "Add", IN(b, m));
}
/* x.view(x.size()[:-1] + (heads, size)).permute(0, 2, 1, 3) (both models' split of the heads) */
static const char *split_heads(const char *p, const char *x, int64_t heads, int64_t size) {
  const char *b = size_of(p, x, 0, NULL), *s = size_of(p, x, 1, NULL);
  Onnx__NodeProto *c = nd(p, "Concat", IN(b, s, c_i64v(p, heads), c_i64v(p, size)));
  attr_i(c, "axis", 0);
  const char *r = op1(p, "Reshape", IN(x, c->output[0]));
  return transpose(p, r, 0, 2, 1, 3);
}
/* x.permute(0, 2, 1, 3).contiguous().view(x.size()[:-2] + (all,)) */
static const char *merge_heads(const char *p, const char *x, int64_t all) {
  const char *t = transpose(p, x, 0, 2, 1, 3);
  const char *b = size_of(p, t, 0, NULL), *s = size_of(p, t, 1, NULL);
  Onnx__NodeProto *c = nd(p, "Concat", IN(b, s, c_i64v(p, all)));
  attr_i(c, "axis", 0);
  return op1(p, "Reshape", IN(t, c->output[0]));
}
static const char *softmax(const char *p, const char *x) {
  Onnx__NodeProto *n = nd(p, "Softmax", IN(x));
  attr_i(n, "axis", -1);
  return n->output[0];
}
/* attention_mask[:, None, None, :].to(f32); (1.0 - m) * finfo.min */
static const char *extended_mask(const char *p, const char *m) {
  const char *u1 = op1(p, "Unsqueeze", IN(m, c_i64v(p, 1)));
  const char *u2 = op1(p, "Unsqueeze", IN(u1, c_i64v(p, 2)));
  Onnx__NodeProto *c = nd(p, "Cast", IN(u2));
  attr_i(c, "to", F32);
  const char *s = op1(p, "Sub", IN(c_f32(p, 1.0f), c->output[0]));
  return op1(p, "Mul", IN(s, c_f32(p, -3.4028234663852886e+38f)));
}

static Onnx__ValueInfoProto *value_info(const char *name, int elem, int rank, const int64_t *dims, const char *const *params) {
  Onnx__ValueInfoProto *v = xmalloc(sizeof *v);
  *v = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  v->name = strdup(name);
  Onnx__TypeProto *t = xmalloc(sizeof *t);
  *t = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  Onnx__TypeProto__Tensor *tt = xmalloc(sizeof *tt);
  *tt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  tt->has_elem_type = 1;
  tt->elem_type = elem;
  Onnx__TensorShapeProto *sh = xmalloc(sizeof *sh);
  *sh = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  sh->n_dim = (size_t)rank;
  sh->dim = xmalloc(sizeof(void *) * (size_t)rank);
  for (int i = 0; i < rank; i++) {
    Onnx__TensorShapeProto__Dimension *d = xmalloc(sizeof *d);
    *d = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    if (params[i]) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = strdup(params[i]);
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    }
    sh->dim[i] = d;
  }
  tt->shape = sh;
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = tt;
  v->type = t;
  return v;
}
static void graph_input(const char *name, int elem, int rank, const int64_t *dims, const char *const *params) {
  G.input = realloc(G.input, (G.n_input + 1) * sizeof *G.input);
  G.input[G.n_input++] = value_info(name, elem, rank, dims, params);
}
/* the exporter renames the last node's output to the graph output's name */
static void graph_output(const char *value, const char *name, int rank, const int64_t *dims, const char *const *params) {
  char *old = strdup(value);
  for (size_t i = 0; i < G.n_node; i++) {
    for (size_t k = 0; k < G.node[i]->n_output; k++)
      if (strcmp(G.node[i]->output[k], old) == 0) G.node[i]->output[k] = strdup(name);
    for (size_t k = 0; k < G.node[i]->n_input; k++)
      if (strcmp(G.node[i]->input[k], old) == 0) G.node[i]->input[k] = strdup(name);
  }
  free(old);
  G.output = realloc(G.output, (G.n_output + 1) * sizeof *G.output);
  G.output[G.n_output++] = value_info(name, F32, rank, dims, params);
}

enum { H = 768, HEADS = 12, HS = 64, FF = 3072 };

static void bert(int layers) {
  const char *const bs[] = {"batch_size", "sequence_length"};
  graph_input("input_ids", I64, 2, (int64_t[]){-1, -1}, bs);
  graph_input("attention_mask", I64, 2, (int64_t[]){-1, -1}, bs);
  graph_input("token_type_ids", I64, 2, (int64_t[]){-1, -1}, bs);
  /* embeddings: position_ids[:, 0 : seq + 0] */
  const char *p = "/embeddings";
  int64_t pos[512];
  for (int i = 0; i < 512; i++) pos[i] = i;
  add_init(tensor("embeddings.position_ids", I64, 2, (int64_t[]){1, 512}, pos, sizeof pos));
  const char *seq;
  size_of(p, "input_ids", 1, &seq);
  const char *end = op1(p, "Add", IN(seq, c_i64(p, 0)));
  end = op1(p, "Unsqueeze", IN(end, c_i64v(p, 0)));
  const char *pids = op1(p, "Slice", IN("embeddings.position_ids", c_i64v(p, 0), end, c_i64v(p, 1), c_i64v(p, 1)));
  const char *we = W("embeddings.word_embeddings.weight", 30522, H);
  const char *te = W("embeddings.token_type_embeddings.weight", 2, H);
  const char *pe = W("embeddings.position_embeddings.weight", 512, H);
  const char *e = op("Gather", "/embeddings/word_embeddings/Gather", IN(we, "input_ids"));
  const char *t = op("Gather", "/embeddings/token_type_embeddings/Gather", IN(te, "token_type_ids"));
  e = op1(p, "Add", IN(e, t));
  const char *pp = op("Gather", "/embeddings/position_embeddings/Gather", IN(pe, pids));
  e = op1(p, "Add", IN(e, pp));
  const char *h = layer_norm("/embeddings/LayerNorm", e, V("embeddings.LayerNorm.weight", H, 1), V("embeddings.LayerNorm.bias", H, 0), 1e-12f);
  const char *mask = extended_mask("", "attention_mask");
  for (int l = 0; l < layers; l++) {
    char pre[64], sp[96], name[128], pname[128];
    snprintf(pre, sizeof pre, "/encoder/layer.%d", l);
    snprintf(sp, sizeof sp, "%s/attention/self", pre);
#define PN(s) (snprintf(pname, sizeof pname, "encoder.layer.%d.%s", l, s), pname)
#define PP(s) (snprintf(name, sizeof name, "%s/%s", pre, s), name)
    const char *q = linear(PP("attention/self/query"), h, PN("attention.self.query.bias"), H, H);
    const char *k = linear(PP("attention/self/key"), h, PN("attention.self.key.bias"), H, H);
    k = split_heads(sp, k, HEADS, HS);
    const char *v = linear(PP("attention/self/value"), h, PN("attention.self.value.bias"), H, H);
    v = split_heads(sp, v, HEADS, HS);
    q = split_heads(sp, q, HEADS, HS);
    const char *kt = transpose(sp, k, 0, 1, 3, 2);
    const char *s = op1(sp, "MatMul", IN(q, kt));
    s = op1(sp, "Div", IN(s, c_f32(sp, 8.0f)));
    s = op1(sp, "Add", IN(s, mask));
    s = softmax(sp, s);
    const char *c = op1(sp, "MatMul", IN(s, v));
    c = merge_heads(sp, c, H);
    const char *o = linear(PP("attention/output/dense"), c, PN("attention.output.dense.bias"), H, H);
    o = op1(PP("attention/output"), "Add", IN(o, h));
    h = layer_norm(PP("attention/output/LayerNorm"), o, V(PN("attention.output.LayerNorm.weight"), H, 1),
                   V(PN("attention.output.LayerNorm.bias"), H, 0), 1e-12f);
    const char *f = linear(PP("intermediate/dense"), h, PN("intermediate.dense.bias"), H, FF);
    /* GELU (erf), as aten::gelu exports below opset 20 */
    char g[128];
    snprintf(g, sizeof g, "%s/intermediate/intermediate_act_fn", pre);
    const char *d = op1(g, "Div", IN(f, c_f32(g, 1.4142135381698608f)));
    d = op1(g, "Erf", IN(d));
    d = op1(g, "Add", IN(d, c_f32(g, 1.0f)));
    d = op1(g, "Mul", IN(f, d));
    d = op1(g, "Mul", IN(d, c_f32(g, 0.5f)));
    o = linear(PP("output/dense"), d, PN("output.dense.bias"), FF, H);
    o = op1(PP("output"), "Add", IN(o, h));
    h = layer_norm(PP("output/LayerNorm"), o, V(PN("output.LayerNorm.weight"), H, 1), V(PN("output.LayerNorm.bias"), H, 0), 1e-12f);
#undef PN
#undef PP
  }
  /* pooler: hidden[:, 0] -> Gemm(transB) -> Tanh */
  const char *last = h;
  Onnx__NodeProto *g0 = nd("/pooler", "Gather", IN(h, c_i64("/pooler", 0)));
  attr_i(g0, "axis", 1);
  Onnx__NodeProto *gm = nd("/pooler/dense", "Gemm", IN(g0->output[0], W("pooler.dense.weight", H, H), V("pooler.dense.bias", H, 0)));
  attr_f(gm, "alpha", 1);
  attr_f(gm, "beta", 1);
  attr_i(gm, "transB", 1);
  const char *pool = op1("/pooler/activation", "Tanh", IN(gm->output[0]));
  graph_output(last, "last_hidden_state", 3, (int64_t[]){-1, -1, H}, (const char *const[]){"batch_size", "sequence_length", NULL});
  graph_output(pool, "pooler_output", 2, (int64_t[]){-1, H}, (const char *const[]){"batch_size", NULL});
}

/* transformers' Conv1D on [B, S, in]: view(-1, in), addmm(bias, x, weight) (Gemm), view(size()[:-1] + (out,)) */
static const char *conv1d(const char *p, const char *x, const char *wname, const char *bname, int64_t in, int64_t out) {
  const char *b = size_of(p, x, 0, NULL), *s = size_of(p, x, 1, NULL);
  const char *last = size_of(p, x, 2, NULL);
  Onnx__NodeProto *c = nd(p, "Concat", IN(c_i64v(p, -1), last));
  attr_i(c, "axis", 0);
  const char *r = op1(p, "Reshape", IN(x, c->output[0]));
  Onnx__NodeProto *gm = nd(p, "Gemm", IN(r, W(wname, in, out), V(bname, out, 0)));
  attr_f(gm, "alpha", 1);
  attr_f(gm, "beta", 1);
  Onnx__NodeProto *c2 = nd(p, "Concat", IN(b, s, c_i64v(p, out)));
  attr_i(c2, "axis", 0);
  return op1(p, "Reshape", IN(gm->output[0], c2->output[0]));
}

static void gpt2(int layers) {
  const char *const bs[] = {"batch_size", "sequence_length"};
  graph_input("input_ids", I64, 2, (int64_t[]){-1, -1}, bs);
  graph_input("attention_mask", I64, 2, (int64_t[]){-1, -1}, bs);
  const char *p = "";
  /* input_ids.view(-1, input_shape[-1]) */
  const char *seq;
  const char *useq = size_of(p, "input_ids", 1, &seq);
  Onnx__NodeProto *c = nd(p, "Concat", IN(c_i64v(p, -1), useq));
  attr_i(c, "axis", 0);
  const char *ids = op1(p, "Reshape", IN("input_ids", c->output[0]));
  /* position_ids = arange(0, seq + 0).unsqueeze(0) */
  const char *lim = op1(p, "Add", IN(seq, c_i64(p, 0)));
  const char *pos = op1(p, "Range", IN(c_i64(p, 0), lim, c_i64(p, 1)));
  pos = op1(p, "Unsqueeze", IN(pos, c_i64v(p, 0)));
  /* attention_mask.view(batch, -1), extended */
  const char *ub = size_of(p, ids, 0, NULL);
  Onnx__NodeProto *c3 = nd(p, "Concat", IN(ub, c_i64v(p, -1)));
  attr_i(c3, "axis", 0);
  const char *am = op1(p, "Reshape", IN("attention_mask", c3->output[0]));
  const char *mask = extended_mask(p, am);
  const char *wte = W("wte.weight", 50257, H), *wpe = W("wpe.weight", 1024, H);
  const char *e = op("Gather", "/wte/Gather", IN(wte, ids));
  const char *pe = op("Gather", "/wpe/Gather", IN(wpe, pos));
  const char *h = op1(p, "Add", IN(e, pe));
  /* the causal mask buffer: tril(ones(1024, 1024)) as bool, per layer */
  uint8_t *tri = xmalloc(1024 * 1024);
  for (int i = 0; i < 1024; i++)
    for (int j = 0; j <= i; j++) tri[i * 1024 + j] = 1;
  for (int l = 0; l < layers; l++) {
    char pre[32], name[128], pname[128], ap[64], g[64];
    snprintf(pre, sizeof pre, "/h.%d", l);
    snprintf(ap, sizeof ap, "%s/attn", pre);
#define PN(s) (snprintf(pname, sizeof pname, "h.%d.%s", l, s), pname)
#define PP(s) (snprintf(name, sizeof name, "%s/%s", pre, s), name)
    const char *x = layer_norm(PP("ln_1"), h, V(PN("ln_1.weight"), H, 1), V(PN("ln_1.bias"), H, 0), 1e-5f);
    char w1[64], b1[64];
    snprintf(w1, sizeof w1, "h.%d.attn.c_attn.weight", l);
    snprintf(b1, sizeof b1, "h.%d.attn.c_attn.bias", l);
    const char *qkv = conv1d(PP("attn/c_attn"), x, w1, b1, H, 3 * H);
    Onnx__NodeProto *sp = node("Split", fmt("%s/Split", ap), IN(qkv, c_ints(ap, 3, (int64_t[]){H, H, H})), 3);
    attr_i(sp, "axis", 2);
    const char *q = split_heads(ap, sp->output[0], HEADS, HS);
    const char *k = split_heads(ap, sp->output[1], HEADS, HS);
    const char *v = split_heads(ap, sp->output[2], HEADS, HS);
    const char *kt = transpose(ap, k, 0, 1, 3, 2);
    const char *s = op1(ap, "MatMul", IN(q, kt));
    s = op1(ap, "Div", IN(s, c_f32(ap, 8.0f)));
    /* bias[:, :, kl - ql : kl, :kl] */
    const char *ql, *kl;
    size_of(ap, q, 2, &ql);
    size_of(ap, k, 2, &kl);
    const char *st = op1(ap, "Sub", IN(kl, ql));
    st = op1(ap, "Unsqueeze", IN(st, c_i64v(ap, 0)));
    const char *en = op1(ap, "Unsqueeze", IN(kl, c_i64v(ap, 0)));
    snprintf(b1, sizeof b1, "h.%d.attn.bias", l);
    add_init(tensor(b1, BOOL, 4, (int64_t[]){1, 1, 1024, 1024}, tri, 1024 * 1024));
    const char *cm = op1(ap, "Slice", IN(b1, st, en, c_i64v(ap, 2), c_i64v(ap, 1)));
    const char *en2 = op1(ap, "Unsqueeze", IN(kl, c_i64v(ap, 0)));
    cm = op1(ap, "Slice", IN(cm, c_i64v(ap, 0), en2, c_i64v(ap, 3), c_i64v(ap, 1)));
    s = op1(ap, "Where", IN(cm, s, c_f32(ap, -3.4028234663852886e+38f)));
    s = op1(ap, "Add", IN(s, mask));
    s = softmax(ap, s);
    const char *o = op1(ap, "MatMul", IN(s, v));
    o = merge_heads(ap, o, H);
    snprintf(w1, sizeof w1, "h.%d.attn.c_proj.weight", l);
    snprintf(b1, sizeof b1, "h.%d.attn.c_proj.bias", l);
    o = conv1d(PP("attn/c_proj"), o, w1, b1, H, H);
    h = op1(pre, "Add", IN(o, h));
    x = layer_norm(PP("ln_2"), h, V(PN("ln_2.weight"), H, 1), V(PN("ln_2.bias"), H, 0), 1e-5f);
    snprintf(w1, sizeof w1, "h.%d.mlp.c_fc.weight", l);
    snprintf(b1, sizeof b1, "h.%d.mlp.c_fc.bias", l);
    const char *f = conv1d(PP("mlp/c_fc"), x, w1, b1, H, FF);
    /* gelu_new: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) */
    snprintf(g, sizeof g, "%s/mlp/act", pre);
    const char *m05 = op1(g, "Mul", IN(c_f32(g, 0.5f), f));
    const char *cube = op1(g, "Pow", IN(f, c_f32(g, 3.0f)));
    const char *t = op1(g, "Mul", IN(c_f32(g, 0.044715f), cube));
    t = op1(g, "Add", IN(f, t));
    t = op1(g, "Mul", IN(c_f32(g, 0.7978845608028654f), t));
    t = op1(g, "Tanh", IN(t));
    t = op1(g, "Add", IN(c_f32(g, 1.0f), t));
    t = op1(g, "Mul", IN(m05, t));
    snprintf(w1, sizeof w1, "h.%d.mlp.c_proj.weight", l);
    snprintf(b1, sizeof b1, "h.%d.mlp.c_proj.bias", l);
    o = conv1d(PP("mlp/c_proj"), t, w1, b1, FF, H);
    h = op1(pre, "Add", IN(h, o));
#undef PN
#undef PP
  }
  free(tri);
  h = layer_norm("/ln_f", h, V("ln_f.weight", H, 1), V("ln_f.bias", H, 0), 1e-5f);
  /* view((-1,) + input_shape[1:] + (768,)) */
  Onnx__NodeProto *c4 = nd(p, "Concat", IN(c_i64v(p, -1), useq, c_i64v(p, H)));
  attr_i(c4, "axis", 0);
  h = op1(p, "Reshape", IN(h, c4->output[0]));
  graph_output(h, "last_hidden_state", 3, (int64_t[]){-1, -1, H}, (const char *const[]){"batch_size", "sequence_length", NULL});
}

/* ---- Swin (torchvision's swin_t and smaller configurations) ----
 * What torch.onnx.export(model.eval(), x, opset_version=17) writes for
 * torchvision.models.swin_t with the batch fixed (bench/layout/export.py):
 * every size is a number, so the shapes the exporter computes from
 * x.shape are folded into constants. */
typedef struct swin_cfg {
  int64_t batch, image, embed, window, classes;
  int nstages;
  int64_t depths[8], heads[8];
} swin_cfg_t;

/* a [rows, cols] weight as the exporter folds weight.t() for a MatMul (onnx::MatMul_N) */
static const char *matmul_w(int64_t in, int64_t out) {
  char *wn = fmt("onnx::MatMul_%d", matmul_id++);
  const char *w = W(wn, in, out);
  free(wn);
  return w;
}
/* F.linear on an input of rank 3 or more: MatMul(x, weight.t()), then Add(bias, .) where there is one */
static const char *swin_linear(const char *p, const char *x, const char *bias_name, int64_t in, int64_t out) {
  const char *m = op1(p, "MatMul", IN(x, matmul_w(in, out)));
  return bias_name ? op1(p, "Add", IN(V(bias_name, out, 0), m)) : m;
}
static const char *reshape_to(const char *p, const char *x, int k, const int64_t *shape) {
  return op1(p, "Reshape", IN(x, c_ints(p, k, shape)));
}
static const char *permute(const char *p, const char *x, int k, const int64_t *perm) {
  Onnx__NodeProto *t = nd(p, "Transpose", IN(x));
  attr_ints(t, "perm", k, perm);
  return t->output[0];
}
/* x[..., start::step] over one axis: Slice(x, starts, ends, axes, steps), as aten::slice exports */
static const char *slice1(const char *p, const char *x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  const char *in[6] = {x, c_i64v(p, start), c_i64v(p, end), c_i64v(p, axis), step ? c_i64v(p, step) : NULL, NULL};
  return op1(p, "Slice", in);
}
/* torch.roll(x, shifts=(s, s), dims=(1, 2)) as the opset-9 symbolic writes it:
 * per dim, Slice(x, [-s], [INT64_MAX], [dim]) and Slice(x, [0], [-s], [dim]), concatenated */
static const char *roll2(const char *p, const char *x, int64_t s) {
  for (int64_t d = 1; d <= 2; d++) {
    const char *a = op1(p, "Slice", IN(x, c_i64v(p, -s), c_i64v(p, INT64_MAX), c_i64v(p, d)));
    const char *b = op1(p, "Slice", IN(x, c_i64v(p, 0), c_i64v(p, -s), c_i64v(p, d)));
    Onnx__NodeProto *c = nd(p, "Concat", IN(a, b));
    attr_i(c, "axis", d);
    x = c->output[0];
  }
  return x;
}
/* GELU (erf) as aten::gelu exports below opset 20 */
static const char *gelu_erf(const char *g, const char *f) {
  const char *d = op1(g, "Div", IN(f, c_f32(g, 1.4142135381698608f)));
  d = op1(g, "Erf", IN(d));
  d = op1(g, "Add", IN(d, c_f32(g, 1.0f)));
  d = op1(g, "Mul", IN(f, d));
  return op1(g, "Mul", IN(d, c_f32(g, 0.5f)));
}
/* The relative position bias, folded by the exporter: table[index].view(N, N, -1).permute(2, 0, 1).unsqueeze(0) */
static const char *rel_bias(const char *name, int64_t ws, int64_t heads) {
  int64_t n = ws * ws, rows = (2 * ws - 1) * (2 * ws - 1);
  float *table = xmalloc(sizeof(float) * (size_t)(rows * heads)), *bias = xmalloc(sizeof(float) * (size_t)(heads * n * n));
  for (int64_t i = 0; i < rows * heads; i++) table[i] = 20 * frand(); /* trunc_normal(std=0.02) would hardly show */
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < n; j++) {
      int64_t dh = i / ws - j / ws + ws - 1, dw = i % ws - j % ws + ws - 1, idx = dh * (2 * ws - 1) + dw;
      for (int64_t h = 0; h < heads; h++) bias[(h * n + i) * n + j] = table[idx * heads + h];
    }
  Onnx__TensorProto *t = tensor(name, F32, 4, (int64_t[]){1, heads, n, n}, bias, sizeof(float) * (size_t)(heads * n * n));
  add_init(t);
  free(table);
  free(bias);
  return t->name;
}
/* The shifted windows' mask, folded: [1, nW, 1, N, N], -100 between positions of different regions */
static const char *shift_mask(const char *name, int64_t hw, int64_t ws, int64_t shift) {
  int64_t nw = (hw / ws) * (hw / ws), n = ws * ws;
  int *label = xmalloc(sizeof(int) * (size_t)(hw * hw));
  for (int64_t y = 0; y < hw; y++)
    for (int64_t x = 0; x < hw; x++) {
      int ry = y < hw - ws ? 0 : y < hw - shift ? 1 : 2, rx = x < hw - ws ? 0 : x < hw - shift ? 1 : 2;
      label[y * hw + x] = 3 * ry + rx;
    }
  float *m = xmalloc(sizeof(float) * (size_t)(nw * n * n));
  for (int64_t w = 0; w < nw; w++) {
    int64_t wy = w / (hw / ws), wx = w % (hw / ws);
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) {
        int li = label[(wy * ws + i / ws) * hw + wx * ws + i % ws], lj = label[(wy * ws + j / ws) * hw + wx * ws + j % ws];
        m[(w * n + i) * n + j] = li == lj ? 0.0f : -100.0f;
      }
  }
  Onnx__TensorProto *t = tensor(name, F32, 5, (int64_t[]){1, nw, 1, n, n}, m, sizeof(float) * (size_t)(nw * n * n));
  add_init(t);
  free(label);
  free(m);
  return t->name;
}

/* shifted_window_attention on x [B, S, S, C] (S a multiple of the window: no padding) */
static const char *swin_attention(const swin_cfg_t *c, const char *p, const char *pn, const char *x, int64_t S, int64_t C, int64_t heads,
                                  int64_t shift) {
  int64_t B = c->batch, ws = c->window, nw = (S / ws) * (S / ws), N = ws * ws, hd = C / heads;
  char name[200];
  /* F.pad(input, (0, 0, 0, pad_r, 0, pad_b)) with pad_r = pad_b = 0 */
  Onnx__NodeProto *pad = nd(p, "Pad", IN(x, c_ints(p, 8, (int64_t[]){0, 0, 0, 0, 0, 0, 0, 0}), c_f32(p, 0)));
  attr_str(pad, "mode", "constant");
  x = pad->output[0];
  if (shift) x = roll2(p, x, -shift);
  x = reshape_to(p, x, 6, (int64_t[]){B, S / ws, ws, S / ws, ws, C});
  x = permute(p, x, 6, (int64_t[]){0, 1, 3, 2, 4, 5});
  x = reshape_to(p, x, 3, (int64_t[]){B * nw, N, C});
  snprintf(name, sizeof name, "%s.qkv.bias", pn);
  const char *qkv = swin_linear(p, x, name, C, 3 * C);
  qkv = reshape_to(p, qkv, 5, (int64_t[]){B * nw, N, 3, heads, hd});
  qkv = permute(p, qkv, 5, (int64_t[]){2, 0, 3, 1, 4});
  const char *qkvs[3];
  for (int i = 0; i < 3; i++) {
    Onnx__NodeProto *g = nd(p, "Gather", IN(qkv, c_i64(p, i)));
    attr_i(g, "axis", 0);
    qkvs[i] = g->output[0];
  }
  const char *q = op1(p, "Mul", IN(qkvs[0], c_f32(p, (float)(1.0 / sqrt((double)hd)))));
  const char *kt = permute(p, qkvs[1], 4, (int64_t[]){0, 1, 3, 2});
  const char *a = op1(p, "MatMul", IN(q, kt));
  snprintf(name, sizeof name, "onnx::Add_%d", matmul_id++);
  a = op1(p, "Add", IN(a, rel_bias(name, ws, heads)));
  if (shift) {
    a = reshape_to(p, a, 5, (int64_t[]){B, nw, heads, N, N});
    snprintf(name, sizeof name, "onnx::Add_%d", matmul_id++);
    a = op1(p, "Add", IN(a, shift_mask(name, S, ws, shift)));
    a = reshape_to(p, a, 4, (int64_t[]){-1, heads, N, N});
  }
  a = softmax(p, a);
  const char *o = op1(p, "MatMul", IN(a, qkvs[2]));
  o = permute(p, o, 4, (int64_t[]){0, 2, 1, 3});
  o = reshape_to(p, o, 3, (int64_t[]){B * nw, N, C});
  snprintf(name, sizeof name, "%s.proj.bias", pn);
  o = swin_linear(p, o, name, C, C);
  /* reverse windows */
  o = reshape_to(p, o, 6, (int64_t[]){B, S / ws, S / ws, ws, ws, C});
  o = permute(p, o, 6, (int64_t[]){0, 1, 3, 2, 4, 5});
  o = reshape_to(p, o, 4, (int64_t[]){B, S, S, C});
  if (shift) o = roll2(p, o, shift);
  /* x[:, :H, :W, :] */
  return op1(p, "Slice", IN(o, c_ints(p, 2, (int64_t[]){0, 0}), c_ints(p, 2, (int64_t[]){S, S}), c_ints(p, 2, (int64_t[]){1, 2}),
                           c_ints(p, 2, (int64_t[]){1, 1})));
}

static void swin(const swin_cfg_t *c) {
  int64_t B = c->batch, C = c->embed, S = c->image / 4;
  graph_input("x", F32, 4, (int64_t[]){B, 3, c->image, c->image}, (const char *const[]){NULL, NULL, NULL, NULL});
  /* features.0: Conv2d(3, C, 4, stride 4), Permute([0, 2, 3, 1]), LayerNorm */
  const char *p = "/features/features.0";
  Onnx__NodeProto *cv = nd(p, "Conv", IN("x", param("features.0.0.weight", 4, (int64_t[]){C, 3, 4, 4}, 0), V("features.0.0.bias", C, 0)));
  attr_ints(cv, "kernel_shape", 2, (int64_t[]){4, 4});
  attr_ints(cv, "strides", 2, (int64_t[]){4, 4});
  attr_ints(cv, "pads", 4, (int64_t[]){0, 0, 0, 0});
  attr_ints(cv, "dilations", 2, (int64_t[]){1, 1});
  attr_i(cv, "group", 1);
  const char *h = permute(p, cv->output[0], 4, (int64_t[]){0, 2, 3, 1});
  h = layer_norm(p, h, V("features.0.2.weight", C, 1), V("features.0.2.bias", C, 0), 1e-5f);
  int feat = 1;
  for (int s = 0; s < c->nstages; s++, feat += 2) {
    if (s > 0) {
      /* features.(feat - 1): PatchMerging */
      char pm[64], pn[64], pn2[64];
      snprintf(pm, sizeof pm, "/features/features.%d", feat - 1);
      Onnx__NodeProto *pad = nd(pm, "Pad", IN(h, c_ints(pm, 8, (int64_t[]){0, 0, 0, 0, 0, 0, 0, 0}), c_f32(pm, 0)));
      attr_str(pad, "mode", "constant");
      const char *xs[4];
      for (int k = 0; k < 4; k++) {
        const char *t = slice1(pm, pad->output[0], 1, k & 1, INT64_MAX, 2);
        xs[k] = slice1(pm, t, 2, k >> 1, INT64_MAX, 2);
      }
      Onnx__NodeProto *cc = nd(pm, "Concat", IN(xs[0], xs[1], xs[2], xs[3]));
      attr_i(cc, "axis", -1);
      snprintf(pn, sizeof pn, "features.%d.norm.weight", feat - 1);
      snprintf(pn2, sizeof pn2, "features.%d.norm.bias", feat - 1);
      h = layer_norm(pm, cc->output[0], V(pn, 4 * C, 1), V(pn2, 4 * C, 0), 1e-5f);
      h = swin_linear(pm, h, NULL, 4 * C, 2 * C);
      C *= 2;
      S /= 2;
    }
    for (int64_t b = 0; b < c->depths[s]; b++) {
      char pre[96], pn[64], name[160], name2[160];
      snprintf(pre, sizeof pre, "/features/features.%d/features.%d.%lld", feat, feat, (long long)b);
      snprintf(pn, sizeof pn, "features.%d.%lld", feat, (long long)b);
      int64_t shift = b % 2 ? c->window / 2 : 0;
      if (c->window >= S) shift = 0; /* the window covers the map: no shift */
      snprintf(name, sizeof name, "%s.norm1.weight", pn);
      snprintf(name2, sizeof name2, "%s.norm1.bias", pn);
      char sub[160];
      snprintf(sub, sizeof sub, "%s/norm1", pre);
      const char *x = layer_norm(sub, h, V(name, C, 1), V(name2, C, 0), 1e-5f);
      snprintf(sub, sizeof sub, "%s/attn", pre);
      snprintf(name, sizeof name, "%s.attn", pn);
      x = swin_attention(c, sub, name, x, S, C, c->heads[s], shift);
      h = op1(pre, "Add", IN(h, x));
      snprintf(name, sizeof name, "%s.norm2.weight", pn);
      snprintf(name2, sizeof name2, "%s.norm2.bias", pn);
      snprintf(sub, sizeof sub, "%s/norm2", pre);
      x = layer_norm(sub, h, V(name, C, 1), V(name2, C, 0), 1e-5f);
      snprintf(sub, sizeof sub, "%s/mlp/mlp.0", pre);
      snprintf(name, sizeof name, "%s.mlp.0.bias", pn);
      x = swin_linear(sub, x, name, C, 4 * C);
      snprintf(sub, sizeof sub, "%s/mlp/mlp.1", pre);
      x = gelu_erf(sub, x);
      snprintf(sub, sizeof sub, "%s/mlp/mlp.3", pre);
      snprintf(name, sizeof name, "%s.mlp.3.bias", pn);
      x = swin_linear(sub, x, name, 4 * C, C);
      h = op1(pre, "Add", IN(h, x));
    }
  }
  h = layer_norm("/norm", h, V("norm.weight", C, 1), V("norm.bias", C, 0), 1e-5f);
  h = permute("/permute", h, 4, (int64_t[]){0, 3, 1, 2});
  h = op1("/avgpool", "GlobalAveragePool", IN(h));
  Onnx__NodeProto *fl = nd("/flatten", "Flatten", IN(h));
  attr_i(fl, "axis", 1);
  Onnx__NodeProto *gm = nd("/head", "Gemm", IN(fl->output[0], W("head.weight", c->classes, C), V("head.bias", c->classes, 0)));
  attr_f(gm, "alpha", 1);
  attr_f(gm, "beta", 1);
  attr_i(gm, "transB", 1);
  graph_output(gm->output[0], "y", 2, (int64_t[]){B, c->classes}, (const char *const[]){NULL, NULL});
}

/* "2,2,6,2": up to 8 numbers; how many */
static int int_list(const char *s, int64_t *out) {
  int k = 0;
  while (*s && k < 8) {
    char *end;
    out[k++] = strtoll(s, &end, 10);
    if (end == s) return -1;
    s = *end == ',' ? end + 1 : end;
  }
  return *s ? -1 : k;
}

/* protobuf-c writes through this straight into the file */
typedef struct {
  ProtobufCBuffer base;
  FILE *f;
  int err;
} file_buffer_t;
static void file_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
  file_buffer_t *fb = (file_buffer_t *)b;
  if (fwrite(data, 1, len, fb->f) != len) fb->err = 1;
}

static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s bert|gpt2 OUT.onnx [--layers N]\n"
          "       %s swin OUT.onnx [--batch N] [--image N] [--embed N] [--depths 2,2,6,2] [--heads 3,6,12,24] [--window N]\n",
          argv0, argv0);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[1], "bert") && strcmp(argv[1], "gpt2") && strcmp(argv[1], "swin"))) return usage(argv[0]);
  int layers = 12;
  /* torchvision's swin_t at batch 32 */
  swin_cfg_t sw = {.batch = 32, .image = 224, .embed = 96, .window = 7, .classes = 1000, .nstages = 4, .depths = {2, 2, 6, 2}, .heads = {3, 6, 12, 24}};
  for (int i = 3; i < argc; i += 2) {
    if (i + 1 >= argc) return usage(argv[0]);
    const char *o = argv[i], *v = argv[i + 1];
    int nd = 0, nh = 0;
    if (!strcmp(o, "--layers") && argv[1][0] != 's') layers = atoi(v);
    else if (!strcmp(o, "--batch") && argv[1][0] == 's') sw.batch = atoll(v);
    else if (!strcmp(o, "--image") && argv[1][0] == 's') sw.image = atoll(v);
    else if (!strcmp(o, "--embed") && argv[1][0] == 's') sw.embed = atoll(v);
    else if (!strcmp(o, "--window") && argv[1][0] == 's') sw.window = atoll(v);
    else if (!strcmp(o, "--depths") && argv[1][0] == 's' && (nd = int_list(v, sw.depths)) > 0) sw.nstages = nd;
    else if (!strcmp(o, "--heads") && argv[1][0] == 's' && (nh = int_list(v, sw.heads)) > 0) (void)nh;
    else return usage(argv[0]);
  }
  if (layers < 1 || layers > 48) {
    fprintf(stderr, "gen_onnx: --layers must be 1 to 48\n");
    return 2;
  }
  if (argv[1][0] == 's') {
    /* every stage's map a multiple of the window (torchvision pads otherwise) and of 2 before a merge */
    int64_t S = sw.image / 4, C = sw.embed;
    bool ok = sw.batch >= 1 && sw.batch <= 1024 && sw.image % 4 == 0 && sw.window >= 1 && C >= 1;
    for (int s = 0; ok && s < sw.nstages; s++) {
      if (s > 0) ok = S % 2 == 0, S /= 2, C *= 2;
      ok = ok && S >= 1 && S % sw.window == 0 && sw.heads[s] >= 1 && C % sw.heads[s] == 0 && sw.depths[s] >= 1 && sw.depths[s] <= 32;
    }
    if (!ok) {
      fprintf(stderr, "gen_onnx: swin: each stage's map must be a multiple of the window, halved by each merge; heads must divide the width\n");
      return 2;
    }
  }
  G.name = "main_graph";
  if (argv[1][0] == 'b') bert(layers);
  else if (argv[1][0] == 'g') gpt2(layers);
  else swin(&sw);
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1;
  m.ir_version = 8;
  m.producer_name = "pytorch";
  m.producer_version = "2.1.0";
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  os.domain = "";
  os.has_version = 1;
  os.version = 17;
  Onnx__OperatorSetIdProto *osp = &os;
  m.n_opset_import = 1;
  m.opset_import = &osp;
  m.graph = &G;
  FILE *f = fopen(argv[2], "wb");
  if (!f) {
    perror(argv[2]);
    return 1;
  }
  file_buffer_t fb = {.base = {.append = file_append}, .f = f};
  onnx__model_proto__pack_to_buffer(&m, &fb.base);
  if (fclose(f) != 0 || fb.err) {
    fprintf(stderr, "gen_onnx: writing %s failed\n", argv[2]);
    return 1;
  }
  fprintf(stderr, "gen_onnx: %s: %zu nodes, %zu initializers\n", argv[2], G.n_node, G.n_initializer);
  return 0;
}
