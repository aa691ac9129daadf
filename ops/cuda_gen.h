/* cuda_gen.h: helpers shared by the CUDA op implementations: the source
 * Shape block passed to kernels, strides, launches, the copy and fill kernels. */
#ifndef RILL_OPS_CUDA_GEN_H
#define RILL_OPS_CUDA_GEN_H

#include "../kernels/ksrc.h"
#include "cuda_ops.h"

/* Mirrors `struct Shape` in the generated sources. */
typedef struct kshape {
  int64_t n;
  int64_t dims[RILL_MAX_RANK];
  int64_t st[4][RILL_MAX_RANK];
  int64_t base[4];
} kshape_t;

void cuda_row_strides(const rill_type_t *t, int64_t *s);
long long cuda_numel(const rill_type_t *t);
/* A grid-stride launch of 256-thread blocks over n elements: cuda_blocks(n, SMs) of them. */
unsigned cuda_blocks(long long n, int num_sms);
rill_status_t cuda_launch(const ops_cuda_ctx_t *ctx, CUfunction fn, long long n, void **args);
rill_status_t cuda_gen_copy(const ops_cuda_env_t *env, rill_dtype_t din, rill_dtype_t dout, int rank, long long span, CUfunction *fn);
/* The strided copies prepare compiles (transpose, slice, broadcast_to, pad's
 * copy, and concat's and split's launches a part, where parts_k does not
 * serve): how many launches a plan takes (0 for other ops), and launch k's
 * source, of its element kernel or (vec) of its vector kernel, appended to
 * out; *out_unit the bytes a thread moves (0 where the launch has no vector
 * kernel: nothing appended). For tests that compile them without a GPU. */
uint32_t cuda_copy_launches(const ops_plan_t *plan);
rill_status_t cuda_copy_source(const ops_plan_t *plan, uint32_t k, bool vec, rill_buf_t *out, int *out_unit);
rill_status_t cuda_gen_fill(const ops_cuda_env_t *env, rill_dtype_t d, double value, long long n, CUfunction *fn);
/* An elementwise kernel's index space made smaller: the output's sizes of 1
 * dropped and neighbours merged where every operand read through strides
 * is contiguous across them, so that each element's index takes fewer
 * divisions (a [1,1,1,C] operand over [B,H,W,C] is read over [BHW, C]). */
void cuda_ew_merge_dims(kgen_fused_t *e, kgen_args_t *a);

/* `ACT` and `act_f(a)`, the activation over ksrc_comp(d), for a kernel source
 * (after its C define). */
rill_status_t cuda_act_function(rill_buf_t *b, int act, rill_dtype_t d);
/* `gate_f(a, b)`, swiglu's or geglu's expression over ksrc_comp(d) (unrounded), for a kernel source (after its C define). */
rill_status_t cuda_gate_function(rill_buf_t *b, bool geglu, bool gelu_tanh, rill_dtype_t d);
/* `C NAME(C v)` (with mask, `C NAME(C v, C m)`: a softmax's mask read as
 * x1): program fp (a prologue or epilogue, one result of dtype d) at v
 * rounded to d, in the kernel's compute type C = ksrc_comp(d), for the
 * `extra` of ksrc_build_with (it uses the kernel's T, C, LD and ST). */
rill_status_t cuda_around_function(rill_buf_t *b, const char *name, const ops_fused_t *fp, rill_dtype_t d, bool mask);
/* A kernel applying to n elements of dtype d in place: with residual, z
 * added (rounded to d), then an activation (OPS_ACT_*, or none); and its
 * arguments but the pointers (in[0] and out[0] the result, in[1] z). */
rill_status_t cuda_gen_activation(const ops_cuda_env_t *env, rill_dtype_t d, int act, bool residual, long long n, CUfunction *fn, CUfunction *fnv,
                                  int *vec, kgen_args_t *args);

/* cuda_nn.c: ops beyond elementwise and data movement. */
bool cuda_nn_supports(const ops_plan_t *plan);
rill_status_t cuda_nn_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **state);
rill_status_t cuda_nn_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out);
void cuda_nn_release(const ops_cuda_env_t *env, void *state);
size_t cuda_nn_workspace(const void *state);
bool cuda_nn_uses_cudnn(const void *state);
/* The candidates (kernel choices) a prepared op has at its sizes, one name a
 * line: "cudnn.legacy:ALGO" (a legacy algorithm), "cudnn.engine:GID" (a graph
 * API engine by its global index), "cudnn.fused:GID" (an engine of the graph
 * with the bias and activation fused), "cublaslt:ID" (a cuBLASLt algorithm id),
 * "kernel.matmul" (the generated kernel), "kernel.gemv" (gemv.cu, for a few
 * rows), "kernel.gconv" (the generated grouped convolution), "cudnn.pool" and "kernel.pool"
 * (cuDNN's pooling call, pool.cu); "default" for ops with one way. */
rill_status_t cuda_nn_candidates(const ops_cuda_env_t *env, const ops_plan_t *plan, void *state, rill_buf_t *out);


/* cuda_gconv.c: the generated grouped convolution (kernels/cuda/grouped_conv.cu),
 * for conv2d with groups > 1 of at most CUDA_GCONV_MAX_CG input channels a
 * group; cuda_nn.c chooses between it and cuDNN. Its source is whole (as
 * cuda_resample_source), the bias, residual and activation in it. */
#define CUDA_GCONV_MAX_CG 16
bool cuda_gconv_fits(const ops_plan_t *plan);
rill_status_t cuda_gconv_source(const ops_plan_t *plan, rill_buf_t *out, const char **out_name);
/* the kernel's work items (its Shape's n): the output's elements, or fewer where a thread takes several */
long long cuda_gconv_items(const ops_plan_t *plan);

/* cuda_llm.c: the decoder ops (rms_norm, rotary, attention, sample). */
bool cuda_llm_supports(const ops_plan_t *plan);
rill_status_t cuda_llm_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **state);
rill_status_t cuda_llm_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out);
void cuda_llm_release(const ops_cuda_env_t *env, void *state);
size_t cuda_llm_workspace(const void *state);
/* The whole source prepare compiles for a plan on a device of num_sms SMs
 * and compute capability sm (90: 9.0) (appended, without a NUL), and the
 * kernels it takes (name2 NULL when one): for tests that compile it without a GPU. */
rill_status_t cuda_llm_source(const ops_plan_t *plan, int num_sms, int sm, rill_buf_t *out, const char **out_name, const char **out_name2);

/* A kernel whose whole source a function writes (the source and the kernel's
 * name, as cuda_resample_source), compiled through the cache. */
typedef rill_status_t (*cuda_source_fn)(const ops_plan_t *plan, rill_buf_t *out, const char **out_name);
rill_status_t cuda_gen_compile(const ops_cuda_env_t *env, const ops_plan_t *plan, cuda_source_fn source, CUfunction *fn);
/* Several kernels of the one source (compiled once: the cache holds its
 * module): fns[i] the kernel names[i], or the source's own where NULL. */
rill_status_t cuda_gen_compile_n(const ops_cuda_env_t *env, const ops_plan_t *plan, cuda_source_fn source, const char *const *names,
                                 CUfunction *const *fns, int n);

/* cuda_resample.c: resize. */
bool cuda_resample_supports(const ops_plan_t *plan);
rill_status_t cuda_resample_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **state);
rill_status_t cuda_resample_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out);
void cuda_resample_release(const ops_cuda_env_t *env, void *state);
/* The whole source prepare compiles for a plan (appended, without a NUL) and
 * its kernel's name: for tests that compile it without a GPU. */
rill_status_t cuda_resample_source(const ops_plan_t *plan, rill_buf_t *out, const char **out_name);

/* cuda_convt.c: conv_transpose (the same four calls and the source, as resize's). */
bool cuda_convt_supports(const ops_plan_t *plan);
rill_status_t cuda_convt_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **state);
rill_status_t cuda_convt_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out);
void cuda_convt_release(const ops_cuda_env_t *env, void *state);
rill_status_t cuda_convt_source(const ops_plan_t *plan, rill_buf_t *out, const char **out_name);
/* cuda_select.c: nonzero and nms (the same four calls and the source, as
 * resize's; nms's lists in the stream's workspace). */
bool cuda_select_supports(const ops_plan_t *plan);
rill_status_t cuda_select_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **state);
rill_status_t cuda_select_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out);
void cuda_select_release(const ops_cuda_env_t *env, void *state);
rill_status_t cuda_select_source(const ops_plan_t *plan, rill_buf_t *out, const char **out_name);
size_t cuda_select_workspace(const void *state);

/* cuda_index.c: scatter_nd and topk (the same four calls and the source). */
bool cuda_index_supports(const ops_plan_t *plan);
rill_status_t cuda_index_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **state);
rill_status_t cuda_index_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out);
void cuda_index_release(const ops_cuda_env_t *env, void *state);
size_t cuda_index_workspace(const void *state);
rill_status_t cuda_index_source(const ops_plan_t *plan, rill_buf_t *out, const char **out_name);

/* cuda_quant.c: qmatmul and qconv2d. Their sources (for tests that compile
 * them without a GPU): which 0 the direct kernel (qmatmul_k, qconv2d_k),
 * and for qmatmul through cuBLASLt 1 the packing of its operands
 * (qmm_pack_k) and 2 the epilogue after it (qmm_epi_k). */
bool cuda_quant_supports(const ops_plan_t *plan);
rill_status_t cuda_quant_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **state);
rill_status_t cuda_quant_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out);
void cuda_quant_release(const ops_cuda_env_t *env, void *state);
size_t cuda_quant_workspace(const void *state);
bool cuda_quant_uses_cudnn(const void *state);
rill_status_t cuda_quant_source(const ops_plan_t *plan, int which, rill_buf_t *out, const char **out_name);

#endif
