/* ksrc.h: assembling the sources of run-time compiled kernels.
 *
 * The CUDA C sources in kernels/cuda/ are embedded in the library at build
 * time (embed.py). A kernel's full source is the op's parameters as
 * #defines (types, load and store conversions, constants), then the prelude,
 * then the kernel file. The elementwise generator (fusegen.c) writes whole
 * kernels from an op's expression instead, with the same prelude.
 */
#ifndef RILL_KERNELS_KSRC_H
#define RILL_KERNELS_KSRC_H

#include "kcache.h"

extern const char rill_kernel_prelude[], rill_kernel_softmax[], rill_kernel_layer_norm[], rill_kernel_reduce[],
    rill_kernel_argmax[], rill_kernel_batch_norm[], rill_kernel_pool[], rill_kernel_matmul[], rill_kernel_channel_bias[],
    rill_kernel_copy[], rill_kernel_gather[], rill_kernel_gemv[], rill_kernel_fused_linear[], rill_kernel_llm_common[], rill_kernel_rms_norm[], rill_kernel_rotary[], rill_kernel_rotary_update[],
    rill_kernel_attention[], rill_kernel_sample[], rill_kernel_update[], rill_kernel_emit[], rill_kernel_resize_common[], rill_kernel_resize[],
    rill_kernel_convt_common[], rill_kernel_conv_transpose[], rill_kernel_scatter_nd[], rill_kernel_topk[],
    rill_kernel_grid_common[], rill_kernel_grid_sample[], rill_kernel_roi_align[], rill_kernel_nonzero[], rill_kernel_nms_common[], rill_kernel_nms[], rill_kernel_grouped_conv[], rill_kernel_quant[];

/* The C type a dtype travels as, and the type arithmetic happens in
 * (float for f16, bf16, f32; double for f64; long long for integers and bool). */
const char *ksrc_ctype(rill_dtype_t d);
const char *ksrc_comp(rill_dtype_t d);
/* "int" when every offset below n, and a grid-stride index past it, fits 31 bits; else "long long". */
const char *ksrc_idx(long long n);
/* A literal of type c that keeps inf and nan. */
void ksrc_lit(char *buf, size_t n, double v, const char *c);

/* Appends "#define NAME VALUE\n". */
rill_status_t ksrc_def(rill_buf_t *b, const char *name, const char *fmt, ...) RILL_PRINTF(3, 4);
/* Defines `ld(v)`, reading a din element as type c, and `st(p, v)`, storing
 * v into a dout lvalue. */
rill_status_t ksrc_io(rill_buf_t *b, const char *ld, const char *st, rill_dtype_t din, rill_dtype_t dout, const char *c);
/* Appends the prelude and the kernel, compiles (through the cache) and
 * returns the function; frees the buffer either way. `st` is the status of
 * writing the defines into b: when it is an error, it is returned as is. */
rill_status_t ksrc_build(kcache_t *cache, rill_buf_t *b, rill_status_t st, const char *kernel, const char *name, CUfunction *out);
/* The same with `extra` (device functions that use the prelude) between the prelude and the kernel. */
rill_status_t ksrc_build_with(kcache_t *cache, rill_buf_t *b, rill_status_t st, const char *extra, const char *kernel, const char *name,
                              CUfunction *out);

/* An elementwise kernel (one op, or a fused group): `body`, written by the
 * op layer, reads the operands' values i0, i1, ... (each in ksrc_comp of its
 * dtype) and sets the results r0, r1, ... (in ksrc_comp of theirs). Each
 * operand is read at the element's own index (`bcast` false: the output's
 * shape, contiguous), through strides (`bcast`: Args.st, 0 on broadcast
 * dimensions), or once (`scalar`). */
#define KGEN_MAX_IN 16
#define KGEN_MAX_OUT 8
typedef struct kgen_fused {
  uint32_t nin, nout;
  rill_dtype_t in[KGEN_MAX_IN], out[KGEN_MAX_OUT];
  bool bcast[KGEN_MAX_IN], scalar[KGEN_MAX_IN];
  /* A broadcast operand that is one row repeated: the index space is
   * [rows, Args.dims[1]], its strides {0, 1}, and dims[1] a multiple of the
   * vector width (kgen_fused_width): `kv` reads its vector at
   * i % (dims[1] / W) and stays available. */
  bool row[KGEN_MAX_IN];
  const char *body;
  int rank;
  long long span;            /* the largest element offset + 1 any operand reaches */
} kgen_fused_t;
/* Mirrors `struct Args` of the generated source: the kernels' one parameter. */
typedef struct kgen_args {
  CUdeviceptr in[KGEN_MAX_IN], out[KGEN_MAX_OUT];
  int64_t n;
  int64_t dims[RILL_MAX_RANK];
  int64_t st[KGEN_MAX_IN][RILL_MAX_RANK];
} kgen_args_t;
/* The full source: kernel `k` (any layout) and, when *out_width > 1,
 * `kv`, which moves 16 bytes per access for the widest operand (every
 * operand read at its own index or a scalar), with a scalar tail. */
rill_status_t kgen_fused_source(const kgen_fused_t *e, rill_buf_t *out, int *out_width);
/* The elements a `kv` vector holds (16 bytes of the widest operand), were no operand broadcast; 0 where none. */
int kgen_fused_width(const kgen_fused_t *e);
/* Compiles (through the cache) the source's kernels. */
rill_status_t kgen_fused(kcache_t *cache, const rill_allocator_t *a, const kgen_fused_t *e, CUfunction *out_scalar,
                         CUfunction *out_vec, int *out_width);

#endif
