/* onnx_ops.c: the table of ONNX ops (each op type to its mapping, with the
 * attributes the mapping reads), the attribute readers and the small pieces
 * the mappings share. The mappings are split by op family as tract and ONNX
 * Runtime organise theirs: onnx_math.c (elementwise), onnx_nn.c (normalisation,
 * linear algebra, convolution, pooling, softmax, losses), onnx_reduce.c
 * (reductions), onnx_tensor.c (shapes, indexing, constants), onnx_resize.c (resampling),
 * onnx_quant.c (quantized ops). */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* ---- attributes ---- */
const Onnx__AttributeProto *onnx_attr_get(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name)) return n->attribute[i];
  return NULL;
}

int64_t onnx_attr_i(const Onnx__NodeProto *n, const char *name, int64_t def) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  return a && a->has_i ? a->i : def;
}

double onnx_attr_f(const Onnx__NodeProto *n, const char *name, double def) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  return a && a->has_f ? a->f : def;
}

const char *onnx_attr_s(const Onnx__NodeProto *n, const char *name, const char *def, char *buf, size_t nbuf) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  if (!a || !a->has_s) return def;
  snprintf(buf, nbuf, "%.*s", (int)a->s.len, a->s.data ? (const char *)a->s.data : "");
  return buf;
}

int onnx_attr_ints(const Onnx__NodeProto *n, const char *name, int64_t *out, int max) {
  const Onnx__AttributeProto *a = onnx_attr_get(n, name);
  if (!a) return -1;
  int k = (int)(a->n_ints < (size_t)max ? a->n_ints : (size_t)max);
  for (int i = 0; i < k; i++) out[i] = a->ints[i];
  return a->n_ints > (size_t)max ? max + 1 : k;
}

/* ---- small helpers ---- */
bool imp_need_float(imp_t *m, const ival_t *x, const char *what) {
  if (imp_is_float(x->t.dtype)) return true;
  imp_unsup(m, "%s of dtype %s (the core set's op takes f16, bf16, f32, f64)", what, rill_dtype_name(x->t.dtype));
  return false;
}

bool imp_need_num(imp_t *m, const ival_t *x, const char *what) {
  if (x->t.dtype != RILL_BOOL) return true;
  imp_unsup(m, "%s of dtype bool", what);
  return false;
}

bool imp_norm_axis(imp_t *m, int64_t axis, int rank, int64_t *out) {
  if (axis < -rank || axis >= (rank ? rank : 1)) return imp_fail(m, RILL_MALFORMED, "axis %lld out of range for rank %d", (long long)axis, rank), false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

/* A known integer input as a list (shape, axes, pads, ...). */
/* the list, whatever its values */
static int known_list(imp_t *m, ival_t *v, const char *what, int64_t *out, int max) {
  if (!v->data) return imp_unsup(m, "input '%s' computed at run time (it must be a constant)", what), -1;
  if (!imp_is_int(v->t.dtype)) return imp_fail(m, RILL_MALFORMED, "input '%s' must be integers", what), -1;
  size_t k = imp_numel(&v->t);
  if (v->t.rank > 1) return imp_fail(m, RILL_MALFORMED, "input '%s' must be a list", what), -1;
  if (k > (size_t)max) return imp_unsup(m, "input '%s' of %zu values (at most %d)", what, k, max), -1;
  for (size_t i = 0; i < k; i++) out[i] = rill_element_get_int(v->t.dtype, v->data, i);
  return (int)k;
}

int imp_known_ints(imp_t *m, ival_t *v, const char *what, int64_t *out, int max) {
  if (v->sym) return imp_unsup(m, "input '%s' depends on a shape variable (it must be a constant)", what), -1;
  return known_list(m, v, what, out, max);
}

int imp_known_dims(imp_t *m, ival_t *v, const char *what, int64_t *out, int max) {
  int k = known_list(m, v, what, out, max);
  for (int i = 0; !v->sym && i < k; i++) /* a number there would read as an encoded size */
    if (isa_dim_is_sym(out[i])) return imp_fail(m, RILL_MALFORMED, "input '%s' holds %lld, out of range", what, (long long)out[i]), -1;
  return k;
}

ival_t *imp_scalar_int(imp_t *m, rill_dtype_t d, int64_t v) {
  rill_type_t t = {d, 0, {0}};
  uint8_t buf[8] = {0};
  rill_element_set_int(d, buf, 0, v);
  return imp_const(m, &t, buf);
}

ival_t *imp_scalar(imp_t *m, rill_dtype_t d, double v) {
  if (!imp_is_float(d)) /* saturated: the cast of a double outside int64 is undefined */
    return imp_scalar_int(m, d, isnan(v) ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v);
  rill_type_t t = {d, 0, {0}};
  uint8_t buf[8] = {0};
  rill_element_set(d, buf, 0, v);
  return imp_const(m, &t, buf);
}

void imp_attrs(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
}

void imp_list_str(imp_t *m, char *buf, size_t n, const int64_t *v, int k) {
  sbuf_t b = {0};
  imp_list(m, &b, v, k);
  snprintf(buf, n, "%s", b.p && !b.oom ? b.p : "[?]");
  if (b.oom) imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  else if (b.len >= n) imp_unsup(m, "sizes too long to write here (%zu characters, at most %zu)", b.len, n - 1);
  free(b.p);
}

bool imp_bcast(imp_t *m, const rill_type_t *a, const rill_type_t *b, rill_type_t *o) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  o->rank = r;
  for (int i = 0; i < r; i++) {
    int64_t da = i - (r - a->rank) >= 0 ? a->dims[i - (r - a->rank)] : 1;
    int64_t db = i - (r - b->rank) >= 0 ? b->dims[i - (r - b->rank)] : 1;
    if (da != db && da != 1 && db != 1) {
      char b1[96], b2[96];
      return imp_fail(m, RILL_MALFORMED, "shapes %s and %s do not broadcast", imp_type_str(m, a, b1, sizeof b1), imp_type_str(m, b, b2, sizeof b2)), false;
    }
    o->dims[i] = da == 1 ? db : da;
  }
  return true;
}

/* x[start:end:step] along one axis; end -1 with a negative step means "through index 0" */
ival_t *imp_slice1(imp_t *m, ival_t *x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  if (!x) return NULL;
  rill_type_t t = x->t;
  t.dims[axis] = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
  if (step < 0 && end < 0) end = -x->t.dims[axis] - 1;
  char a[200];
  imp_attrs(a, sizeof a, "starts=[%lld], ends=[%lld], axes=[%lld], steps=[%lld]", (long long)start, (long long)end, (long long)axis,
            (long long)step);
  return imp_emit(m, NULL, &t, "slice", &x, 1, a);
}

ival_t *imp_size_scalar(imp_t *m, rill_dtype_t d, int64_t size) {
  if (!isa_dim_is_sym(size)) return imp_scalar_int(m, d, size);
  rill_type_t t = {RILL_I64, 0, {0}};
  ival_t *v = imp_const(m, &t, &size);
  if (v) v->sym = true;
  return v;
}

ival_t *imp_broadcast(imp_t *m, const char *out, ival_t *x, const rill_type_t *t) {
  if (!x) return NULL;
  sbuf_t a = {0}; /* (sizes over many shape variables: an SSD head's sum of 90 counts) */
  sb_printf(&a, "shape=");
  imp_list(m, &a, t->dims, t->rank);
  if (a.oom) return free(a.p), imp_fail(m, RILL_OUT_OF_MEMORY, "out of memory");
  rill_type_t o = *t;
  o.dtype = x->t.dtype;
  ival_t *r = imp_emit(m, out, &o, "broadcast_to", &x, 1, a.p);
  free(a.p);
  return r;
}

/* ---- the table ---- */
/* Each op with the attributes its mapping reads (or may ignore: dropout's
 * ratio and seed, batch norm's momentum, max pooling's storage order without
 * indices); any other attribute is unsupported. consumed_inputs and is_test,
 * hints of the first opsets, are accepted everywhere. */
typedef struct { const char *name; onnx_op_fn fn; const char *attrs; } op_entry_t;
#define BIN_ATTRS "broadcast axis"
static const op_entry_t OPS[] = {
    {"Neg", onnx_op_unary, ""}, {"Abs", onnx_op_unary, ""}, {"Exp", onnx_op_unary, ""}, {"Log", onnx_op_unary, ""}, {"Sqrt", onnx_op_unary, ""},
    {"Reciprocal", onnx_op_unary, ""}, {"Sigmoid", onnx_op_unary, ""}, {"Tanh", onnx_op_unary, ""}, {"Relu", onnx_op_unary, ""}, {"Erf", onnx_op_unary, ""},
    {"Sin", onnx_op_unary, ""}, {"Cos", onnx_op_unary, ""}, {"Asin", onnx_op_unary, ""}, {"Acos", onnx_op_unary, ""}, {"Atan", onnx_op_unary, ""}, {"Floor", onnx_op_unary, ""}, {"Ceil", onnx_op_unary, ""}, {"Not", onnx_op_unary, ""},
    {"Add", onnx_op_binary, BIN_ATTRS}, {"Sub", onnx_op_binary, BIN_ATTRS}, {"Mul", onnx_op_binary, BIN_ATTRS}, {"Div", onnx_op_binary, BIN_ATTRS},
    {"Pow", onnx_op_binary, BIN_ATTRS}, {"Equal", onnx_op_binary, BIN_ATTRS}, {"Less", onnx_op_binary, BIN_ATTRS}, {"LessOrEqual", onnx_op_binary, ""},
    {"Greater", onnx_op_binary, BIN_ATTRS}, {"GreaterOrEqual", onnx_op_binary, ""}, {"And", onnx_op_binary, BIN_ATTRS},
    {"Or", onnx_op_binary, BIN_ATTRS}, {"Xor", onnx_op_binary, BIN_ATTRS},
    {"Mod", onnx_op_mod, "fmod"}, {"CumSum", onnx_op_cumsum, "exclusive reverse"}, {"Max", onnx_op_variadic, ""}, {"Min", onnx_op_variadic, ""}, {"Sum", onnx_op_variadic, ""}, {"Mean", onnx_op_variadic, ""},
    {"Where", onnx_op_where, ""}, {"Gelu", onnx_op_gelu, "approximate"}, {"Identity", onnx_op_identity, ""}, {"Dropout", onnx_op_identity, "ratio seed"}, {"Cast", onnx_op_cast, "to saturate"},
    {"CastLike", onnx_op_cast, ""}, {"Clip", onnx_op_clip, "min max"}, {"LeakyRelu", onnx_op_activation, "alpha"},
    {"HardSigmoid", onnx_op_activation, "alpha beta"}, {"HardSwish", onnx_op_activation, ""}, {"Softsign", onnx_op_activation, ""},
    {"Softplus", onnx_op_activation, ""}, {"Elu", onnx_op_activation, "alpha"}, {"Selu", onnx_op_activation, "alpha gamma"},
    {"Celu", onnx_op_activation, "alpha"}, {"ThresholdedRelu", onnx_op_activation, "alpha"}, {"PRelu", onnx_op_activation, ""},
    {"IsNaN", onnx_op_activation, ""}, {"Sign", onnx_op_activation, ""}, {"Shrink", onnx_op_activation, "bias lambd"}, {"Tan", onnx_op_activation, ""},
    {"Sinh", onnx_op_activation, ""}, {"Cosh", onnx_op_activation, ""}, {"Asinh", onnx_op_activation, ""}, {"Acosh", onnx_op_activation, ""},
    {"Atanh", onnx_op_activation, ""}, {"Round", onnx_op_activation, ""}, {"Trilu", onnx_op_trilu, "upper"}, {"EyeLike", onnx_op_eyelike, "dtype k"}, {"IsInf", onnx_op_activation, "detect_negative detect_positive"},
    {"ReduceSum", onnx_op_reduce, "axes keepdims noop_with_empty_axes"}, {"ReduceMean", onnx_op_reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceMax", onnx_op_reduce, "axes keepdims noop_with_empty_axes"}, {"ReduceMin", onnx_op_reduce, "axes keepdims noop_with_empty_axes"}, {"ReduceProd", onnx_op_reduce, "axes keepdims noop_with_empty_axes"}, {"ReduceL1", onnx_op_reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceL2", onnx_op_reduce, "axes keepdims noop_with_empty_axes"}, {"ReduceSumSquare", onnx_op_reduce, "axes keepdims noop_with_empty_axes"},
    {"ReduceLogSum", onnx_op_reduce, "axes keepdims noop_with_empty_axes"}, {"ReduceLogSumExp", onnx_op_reduce, "axes keepdims noop_with_empty_axes"},
    {"DepthToSpace", onnx_op_depth_space, "blocksize mode"}, {"SpaceToDepth", onnx_op_depth_space, "blocksize"}, {"Tile", onnx_op_tile, ""},
    {"Hardmax", onnx_op_hardmax, "axis"},
    {"ArgMax", onnx_op_argmax, "axis keepdims select_last_index"}, {"ArgMin", onnx_op_argmax, "axis keepdims select_last_index"},
    {"Softmax", onnx_op_softmax, "axis"}, {"LogSoftmax", onnx_op_softmax, "axis"},
    {"BatchNormalization", onnx_op_batchnorm, "epsilon momentum spatial training_mode"},
    {"LayerNormalization", onnx_op_layernorm, "axis epsilon stash_type"}, {"InstanceNormalization", onnx_op_instancenorm, "epsilon"},
    {"GroupNormalization", onnx_op_groupnorm, "epsilon num_groups stash_type"},
    {"Bernoulli", onnx_op_random, "dtype seed"}, {"RandomNormal", onnx_op_random, "dtype mean scale seed shape"},
    {"RandomNormalLike", onnx_op_random, "dtype mean scale seed"}, {"RandomUniform", onnx_op_random, "dtype high low seed shape"},
    {"RandomUniformLike", onnx_op_random, "dtype high low seed"},
    {"MatMul", onnx_op_matmul, ""}, {"Gemm", onnx_op_gemm, "alpha beta transA transB broadcast"},
    {"Conv", onnx_op_conv, "auto_pad dilations group kernel_shape pads strides"},
    {"ConvTranspose", onnx_op_conv_transpose, "auto_pad dilations group kernel_shape output_padding output_shape pads strides"},
    {"MaxPool", onnx_op_pool, "auto_pad ceil_mode dilations kernel_shape pads storage_order strides"},
    {"AveragePool", onnx_op_pool, "auto_pad ceil_mode count_include_pad dilations kernel_shape pads strides"},
    {"GlobalAveragePool", onnx_op_global_pool, ""}, {"GlobalMaxPool", onnx_op_global_pool, ""},
    {"Shape", onnx_op_shape, "start end"}, {"Size", onnx_op_shape, ""}, {"Reshape", onnx_op_reshape, "allowzero"}, {"Flatten", onnx_op_reshape, "axis"},
    {"Squeeze", onnx_op_reshape, "axes"}, {"Unsqueeze", onnx_op_reshape, "axes"}, {"Transpose", onnx_op_transpose, "perm"},
    {"Concat", onnx_op_concat, "axis"}, {"Split", onnx_op_split, "axis split num_outputs"}, {"Slice", onnx_op_slice, "starts ends axes"},
    {"Gather", onnx_op_gather, "axis"}, {"GatherElements", onnx_op_gather_elements, "axis"},
    {"NegativeLogLikelihoodLoss", onnx_op_nll, "ignore_index reduction"}, {"SoftmaxCrossEntropyLoss", onnx_op_nll, "ignore_index reduction"}, {"Expand", onnx_op_expand, ""}, {"Pad", onnx_op_pad, "mode pads value"},
    {"Constant", onnx_op_constant, "value value_float value_floats value_int value_ints"}, {"ConstantOfShape", onnx_op_constant_of_shape, "value"},
    {"Range", onnx_op_range, ""}, {"Einsum", onnx_op_einsum, "equation"}, {"Det", onnx_op_det, ""}, {"STFT", onnx_op_stft, "onesided"}, {"MelWeightMatrix", onnx_op_mel, "output_datatype"},
    {"TfIdfVectorizer", onnx_op_tfidf, "max_gram_length max_skip_count min_gram_length mode ngram_counts ngram_indexes pool_int64s pool_strings weights"},
    {"GatherND", onnx_op_gather_nd, "batch_dims"}, {"ScatterND", onnx_op_scatter_nd, "reduction"},
    {"ScatterElements", onnx_op_scatter_elements, "axis reduction"}, {"Scatter", onnx_op_scatter_elements, "axis"},
    {"TopK", onnx_op_topk, "axis k largest sorted"},
    {"NonZero", onnx_op_nonzero, ""}, {"NonMaxSuppression", onnx_op_nms, "center_point_box"},
    {"Compress", onnx_op_compress, "axis"}, {"OneHot", onnx_op_onehot, "axis"}, {"HannWindow", onnx_op_window, "output_datatype periodic"},
    {"DFT", onnx_op_dft, "axis inverse onesided"}, {"MaxUnpool", onnx_op_maxunpool, "kernel_shape pads strides"}, {"Unique", onnx_op_unique, "axis sorted"}, {"BitShift", onnx_op_bitshift, "direction"}, {"SequenceEmpty", onnx_op_sequence, "dtype"}, {"SequenceConstruct", onnx_op_sequence, ""}, {"SequenceInsert", onnx_op_sequence, ""},
    {"SequenceErase", onnx_op_sequence, ""}, {"SequenceAt", onnx_op_sequence, ""}, {"SequenceLength", onnx_op_sequence, ""},
    {"ConcatFromSequence", onnx_op_sequence, "axis new_axis"}, {"SplitToSequence", onnx_op_sequence, "axis keepdims"},
    {"ReverseSequence", onnx_op_reverse_sequence, "batch_axis time_axis"}, {"LRN", onnx_op_lrn, "alpha beta bias size"}, {"MeanVarianceNormalization", onnx_op_mvn, "axes"},
    {"HammingWindow", onnx_op_window, "output_datatype periodic"}, {"BlackmanWindow", onnx_op_window, "output_datatype periodic"},
    {"If", onnx_op_if, "then_branch else_branch"}, {"Loop", onnx_op_loop, "body"},
    {"RNN", onnx_op_rnn, "activations activation_alpha activation_beta clip direction hidden_size layout"},
    {"GRU", onnx_op_rnn, "activations activation_alpha activation_beta clip direction hidden_size layout linear_before_reset"},
    {"LSTM", onnx_op_rnn, "activations activation_alpha activation_beta clip direction hidden_size layout input_forget"},
    {"Scan", onnx_op_scan, "body directions num_scan_inputs scan_input_axes scan_input_directions scan_output_axes scan_output_directions"},
    {"SequenceMap", onnx_op_sequence_map, "body"}, {"Optional", onnx_op_optional, "type"}, {"OptionalHasElement", onnx_op_optional, ""},
    {"OptionalGetElement", onnx_op_optional, ""},
    {"Resize", onnx_op_resize, "mode coordinate_transformation_mode nearest_mode cubic_coeff_a exclude_outside extrapolation_value antialias axes keep_aspect_ratio_policy"},
    {"Upsample", onnx_op_resize, "mode scales"}, {"GridSample", onnx_op_grid_sample, "align_corners mode padding_mode"},
    {"RoiAlign", onnx_op_roi_align, "coordinate_transformation_mode mode output_height output_width sampling_ratio spatial_scale"},
    {"QuantizeLinear", onnx_op_quantize, "axis block_size output_dtype saturate"}, {"DequantizeLinear", onnx_op_dequantize, "axis block_size"},
    {"DynamicQuantizeLinear", onnx_op_dynamic_quantize, ""}, {"MatMulInteger", onnx_op_matmul_integer, ""},
    {"ConvInteger", onnx_op_conv_integer, "auto_pad dilations group kernel_shape pads strides"}, {"QLinearMatMul", onnx_op_qlinear_matmul, ""},
    {"QLinearConv", onnx_op_qlinear_conv, "auto_pad dilations group kernel_shape pads strides"},
    {NULL, NULL, NULL}};

static bool word_in(const char *list, const char *w) {
  size_t n = strlen(w);
  if (!n) return false;
  for (const char *p = list; (p = strstr(p, w)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
  return false;
}

const char *onnx_op_unknown_attr(const char *op_type, const Onnx__NodeProto *n) {
  for (const op_entry_t *e = OPS; e->name; e++)
    if (!strcmp(e->name, op_type)) {
      for (size_t i = 0; i < n->n_attribute; i++) {
        const char *a = n->attribute[i]->name ? n->attribute[i]->name : "";
        if (!word_in(e->attrs, a) && strcmp(a, "consumed_inputs") && strcmp(a, "is_test")) return a;
      }
      return NULL;
    }
  return NULL;
}

/* The mappings that take sizes over shape variables, in types and as known
 * values: elementwise ops (broadcasting compares sizes as they are; the
 * arithmetic of known sizes is imp_sym_binary's), and the shape ops whose
 * size arithmetic goes through isa/sym.c. */
static const char SYMBOLIC[] =
    "Neg Abs Exp Log Sqrt Reciprocal Sigmoid Tanh Relu Erf Sin Cos Asin Acos Atan Floor Ceil Not Add Sub Mul Div Pow Equal Less "
    "LessOrEqual Greater GreaterOrEqual And Or Xor Max Min Sum Where Identity Dropout Cast CastLike Clip LeakyRelu "
    "HardSigmoid HardSwish Softsign Softplus Elu Selu Celu ThresholdedRelu PRelu IsNaN Sign Shrink Tan Sinh Cosh Asinh "
    "Acosh Atanh Round IsInf ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceSumSquare ReduceLogSum "
    "ReduceLogSumExp Softmax LogSoftmax BatchNormalization LayerNormalization MatMul Gemm Shape Size Reshape Squeeze "
    "Unsqueeze Flatten Transpose Concat Slice Gather Expand ConstantOfShape Constant Range Trilu Conv MaxPool "
    "AveragePool GlobalAveragePool GlobalMaxPool CumSum Mod Resize Upsample ConvTranspose GatherElements ArgMax ArgMin "
    "InstanceNormalization Split Gelu QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger QLinearMatMul "
    "QLinearConv NonZero GatherND TopK NonMaxSuppression RoiAlign ScatterElements Tile";

bool onnx_op_symbolic(const char *op_type) { return word_in(SYMBOLIC, op_type); }

onnx_op_fn onnx_op_find(const char *op_type) {
  for (const op_entry_t *e = OPS; e->name; e++)
    if (!strcmp(e->name, op_type)) return e->fn;
  return NULL;
}
