/* onnx_ops.h: what the op mappings share. Each mapping turns one ONNX node
 * into core-set statements (or a value known at import); the table in
 * onnx_ops.c is the one place an ONNX op type names its mapping, and the
 * mappings live by op family: onnx_math.c, onnx_nn.c, onnx_reduce.c,
 * onnx_tensor.c, onnx_resize.c, onnx_quant.c. This header holds the node macros, the checks and small
 * builders they all use, and the mappings' declarations for the table. */
#ifndef RILL_IMPORT_ONNX_OPS_H
#define RILL_IMPORT_ONNX_OPS_H

#include "onnx_int.h"

/* inside a mapping (imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin):
 * output i's name or NULL, input i or NULL, and input i required */
#define OUT(i) ((size_t)(i) < n->n_output && n->output[i] && *n->output[i] ? n->output[i] : NULL)
#define IN(i) ((i) < nin ? in[i] : NULL)
#define NEED(i)                                                                   \
  do {                                                                            \
    if (!IN(i)) return imp_fail(m, RILL_MALFORMED, "input %d is missing", (i)), false; \
  } while (0)

/* checks: each fails the import with a message and returns false */
bool imp_need_float(imp_t *m, const ival_t *x, const char *what);
bool imp_need_num(imp_t *m, const ival_t *x, const char *what);
bool imp_norm_axis(imp_t *m, int64_t axis, int rank, int64_t *out);
/* A known integer input as a list (shape, axes, pads, ...): its length, or -1. */
int imp_known_ints(imp_t *m, ival_t *v, const char *what, int64_t *out, int max);
/* The same, where entries may be sizes over shape variables (a shape). */
int imp_known_dims(imp_t *m, ival_t *v, const char *what, int64_t *out, int max);
/* The broadcast of two shapes (o's dtype is left alone). */
bool imp_bcast(imp_t *m, const rill_type_t *a, const rill_type_t *b, rill_type_t *o);

/* attribute text */
void imp_attrs(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void imp_list_str(imp_t *m, char *buf, size_t n, const int64_t *v, int k);  /* "[a, b, c]", as imp_list */

/* builders: each returns NULL after a failure (and passes a NULL operand on) */
ival_t *imp_scalar_int(imp_t *m, rill_dtype_t d, int64_t v);
ival_t *imp_scalar(imp_t *m, rill_dtype_t d, double v);
ival_t *imp_un(imp_t *m, const char *out, const char *op, ival_t *x, const char *attrs);
ival_t *imp_bin(imp_t *m, const char *out, const char *op, ival_t *a, ival_t *b);
ival_t *imp_slice1(imp_t *m, ival_t *x, int64_t axis, int64_t start, int64_t end, int64_t step);
/* a size as an i64[] value: a number, or a size over shape variables
 * (known, sym: made a tensor where a statement takes it) */
ival_t *imp_size_scalar(imp_t *m, rill_dtype_t d, int64_t size);
/* Indices wrapped as ONNX says (a negative one counts from the end of a
 * dimension of `dim`, a number or a size over shape variables):
 * where(idx < 0, idx + dim, idx), of idx's type (onnx_tensor.c). */
ival_t *imp_wrap_index(imp_t *m, ival_t *idx, int64_t dim);
ival_t *imp_broadcast(imp_t *m, const char *out, ival_t *x, const rill_type_t *t);
ival_t *imp_gather_elements(imp_t *m, const char *out, ival_t *x, ival_t *ix, int64_t axis);
/* x gathered along axis by the 1-D index ix (NULL passes through): x's type with ix's length there. */
ival_t *imp_gather_axis(imp_t *m, const char *out, ival_t *x, ival_t *ix, int64_t axis);
/* [0, 1, ..., n-1] in dtype d, n a number or a size over bounded shape variables */
ival_t *imp_iota(imp_t *m, rill_dtype_t d, int64_t n);

/* round halves to even (exact, in x's float dtype) */
ival_t *imp_round_even(imp_t *m, const char *out, ival_t *x);
/* a product (MatMul's broadcasting and types) and a convolution (Conv's
 * attributes read from n: 1-D to 3-D, groups, pads, auto_pad) into `out` */
ival_t *imp_matmul(imp_t *m, const char *out, ival_t *a, ival_t *b);
ival_t *imp_conv(imp_t *m, const Onnx__NodeProto *n, const char *out, ival_t *x, ival_t *w, ival_t *b);
/* Conv node n's window over x and w as conv2d's attributes (1-D as 2-D, of
 * height 1) into a, and its output type (x's dtype) into o: the spatial
 * dims (1 or 2; 3 without attributes; x or w of another rank: their
 * rank less 2), or 0 after a failure. */
int imp_conv2d_window(imp_t *m, const Onnx__NodeProto *n, const rill_type_t *x, const rill_type_t *w, char *a, size_t na, rill_type_t *o);
/* The quantized products (onnx_quant.c): Conv or MatMul node n over
 * DequantizeLinear results (and a QuantizeLinear of its result, its only
 * reader) as one qconv2d or qmatmul; false where the pattern does not hold
 * exactly (the node is then mapped as it is, its inputs' deferred
 * DequantizeLinear statements written first) or after a failure. */
bool onnx_qdq_fuse(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin, bool conv);
/* A DequantizeLinear result's statements held back for onnx_qdq_fuse, written now (once). */
void onnx_dq_release(imp_t *m, ival_t *v);
/* sizes computed at run time (onnx_dynamic.c): v's values are read back and
 * bind fresh shape variables; out gets them as sizes; the count, or -1 */
int imp_read_back(imp_t *m, ival_t *v, const char *what, int64_t *out, int max);
/* the same, v's last value a fault flag (0, or -1 when the values are not
 * valid) bound to a variable named after `flag`, which bind_dims refuses */
int imp_read_back_flag(imp_t *m, ival_t *v, const char *what, int64_t *out, int max, const char *flag);
/* bind_dims(v, VAR): the shape variable var (a size read back elsewhere: an
 * If's other branch's) bound to v, an i64[] */
bool imp_bind_var(imp_t *m, ival_t *v, int64_t var);
/* a size as an i64[] tensor: imp_size_scalar's, made at run time where it is
 * over shape variables (imp_sizes_tensor), so that arithmetic on it is the
 * program's, not folded into sizes (a slice's -D-1 is no size) */
ival_t *imp_dim_scalar(imp_t *m, int64_t d);
/* Reshape's shape and Expand's, computed at run time: the result's sizes */
int imp_reshape_sizes(imp_t *m, ival_t *x, ival_t *shape, bool allowzero, int64_t *out);
int imp_expand_sizes(imp_t *m, ival_t *x, ival_t *shape, int64_t *out);
/* Slice with starts, ends, axes or steps computed at run time */
bool imp_slice_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *starts, ival_t *ends, ival_t *axes, ival_t *steps);
/* Squeeze's and Unsqueeze's axes computed at run time */
bool imp_squeeze_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *axes, bool squeeze);
/* a reduction (sum, mean, max, min, prod) over axes computed at run time */
ival_t *imp_reduce_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *axes, const char *op, bool keep);
/* Split's sizes, TopK's k, Pad's pads computed at run time */
bool imp_split_dynamic(imp_t *m, const Onnx__NodeProto *n, ival_t *x, int64_t axis, ival_t *split);
bool imp_split_parts(imp_t *m, char *const *names, ival_t *x, int64_t axis, ival_t *s64, int k, ival_t **parts);
/* an integer list input as i64[k]: k, or -1 after a failure */
int imp_int_list(imp_t *m, ival_t *x, const char *what, ival_t **out);
bool imp_topk_dynamic(imp_t *m, const Onnx__NodeProto *n, ival_t *x, int64_t axis, ival_t *k, const char *attrs_rest);
bool imp_pad_dynamic(imp_t *m, const char *out, ival_t *x, ival_t *pads, ival_t *value, const char *mode);
/* c ? a : b, of a's dtype and the broadcast shape */
ival_t *imp_where(imp_t *m, ival_t *c, ival_t *a, ival_t *b);
/* [0, n) as i64[n], n a number or a size read back */
ival_t *imp_iota_rt(imp_t *m, int64_t n);
/* Range over bounds computed at run time */
bool imp_range_dynamic(imp_t *m, const char *out, ival_t *start, ival_t *limit, ival_t *delta);

/* a graph input that is a sequence or an optional, its values parameters
 * (onnx_sequence.c) */
ival_t *imp_list_input(imp_t *m, const char *nm, const Onnx__TypeProto *ty);
/* a sequence of the n values v (dtype d), bound to out */
ival_t *imp_seq_of(imp_t *m, const char *out, ival_t *const *v, int n, rill_dtype_t d);

/* the DFT of x along axis (onnx_linalg.c); nval the axis's size as an i64[]
 * where it is a size read back */
ival_t *imp_dft(imp_t *m, const char *out, ival_t *x, int64_t axis, bool inverse, bool onesided, ival_t *nval);

/* the mappings, by family */
#define ONNX_OP(name) bool onnx_op_##name(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin);
/* onnx_math.c */
ONNX_OP(unary) ONNX_OP(gelu) ONNX_OP(binary) ONNX_OP(variadic) ONNX_OP(where) ONNX_OP(identity) ONNX_OP(cast) ONNX_OP(clip)
ONNX_OP(activation) ONNX_OP(mod) ONNX_OP(cumsum) ONNX_OP(random) ONNX_OP(bitshift)
/* onnx_reduce.c */
ONNX_OP(reduce) ONNX_OP(argmax)
/* onnx_nn.c */
ONNX_OP(softmax) ONNX_OP(hardmax) ONNX_OP(batchnorm) ONNX_OP(layernorm) ONNX_OP(instancenorm) ONNX_OP(groupnorm) ONNX_OP(matmul)
ONNX_OP(gemm) ONNX_OP(conv) ONNX_OP(conv_transpose) ONNX_OP(pool) ONNX_OP(global_pool) ONNX_OP(nll) ONNX_OP(lrn) ONNX_OP(mvn)
/* onnx_tensor.c */
ONNX_OP(shape) ONNX_OP(reshape) ONNX_OP(transpose) ONNX_OP(concat) ONNX_OP(split) ONNX_OP(slice) ONNX_OP(gather)
ONNX_OP(gather_elements) ONNX_OP(expand) ONNX_OP(pad) ONNX_OP(depth_space) ONNX_OP(tile) ONNX_OP(trilu)
ONNX_OP(eyelike) ONNX_OP(constant) ONNX_OP(constant_of_shape) ONNX_OP(range)
/* onnx_index.c */
ONNX_OP(gather_nd) ONNX_OP(scatter_nd) ONNX_OP(scatter_elements) ONNX_OP(topk) ONNX_OP(maxunpool)
/* onnx_linalg.c */
ONNX_OP(einsum) ONNX_OP(dft) ONNX_OP(det) ONNX_OP(stft) ONNX_OP(mel)
/* onnx_text.c */
ONNX_OP(tfidf)
/* onnx_quant.c */
ONNX_OP(quantize) ONNX_OP(dequantize) ONNX_OP(dynamic_quantize) ONNX_OP(matmul_integer) ONNX_OP(conv_integer)
ONNX_OP(qlinear_matmul) ONNX_OP(qlinear_conv)
/* onnx_resize.c */
ONNX_OP(resize) ONNX_OP(grid_sample) ONNX_OP(roi_align)
/* onnx_dynamic.c */
ONNX_OP(nonzero) ONNX_OP(nms) ONNX_OP(compress) ONNX_OP(onehot) ONNX_OP(window) ONNX_OP(reverse_sequence)
/* onnx_sequence.c, onnx_unique.c */
ONNX_OP(sequence) ONNX_OP(unique)
/* onnx_control.c */
ONNX_OP(if) ONNX_OP(loop) ONNX_OP(scan) ONNX_OP(sequence_map) ONNX_OP(optional)
/* onnx_rnn.c */
ONNX_OP(rnn)
#undef ONNX_OP

#endif
