/* ksrc.h: assembling the sources of run-time compiled kernels.
 *
 * The CUDA C sources in kernels/cuda/ are embedded in the library at build
 * time (embed.py). A kernel's full source is the op's parameters as
 * #defines (types, load and store conversions, constants), then the prelude,
 * then the kernel file. The elementwise generator (ewgen.c) writes whole
 * kernels from an op's expression instead, with the same prelude.
 */
#ifndef RILL_KERNELS_KSRC_H
#define RILL_KERNELS_KSRC_H

#include "kcache.h"

extern const char rill_kernel_prelude[], rill_kernel_softmax[], rill_kernel_layer_norm[], rill_kernel_reduce[],
    rill_kernel_argmax[], rill_kernel_batch_norm[], rill_kernel_pool[], rill_kernel_matmul[], rill_kernel_channel_bias[],
    rill_kernel_copy[], rill_kernel_gather[];

/* The C type a dtype travels as, and the type arithmetic happens in
 * (float for f16, bf16, f32; double for f64; long long for integers and bool). */
const char *ksrc_ctype(rill_dtype_t d);
const char *ksrc_comp(rill_dtype_t d);
/* "int" when every offset below n fits 31 bits, else "long long". */
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

/* An elementwise kernel from an expression over a, b, c (the operands, read
 * in compute type c; a where-condition is read as long long). */
typedef struct kgen_ew {
  uint32_t nin;
  rill_dtype_t in[3], out;
  const char *comp;          /* compute type */
  bool cond_first;           /* operand 0 is where's condition */
  const char *expr;
  bool contig;               /* every operand has the output's shape */
  int rank;
  long long n;
} kgen_ew_t;
/* `out_scalar` handles any layout (index math); `out_vec`, when contig,
 * moves 16 bytes per access for the widest operand (*out_width elements). */
rill_status_t kgen_elementwise(kcache_t *cache, const rill_allocator_t *a, const kgen_ew_t *e, CUfunction *out_scalar,
                               CUfunction *out_vec, int *out_width);

#endif
