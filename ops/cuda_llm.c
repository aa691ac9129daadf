/* cuda_llm.c: the decoder ops on the CUDA device.
 *
 *   rms_norm    kernels/cuda/rms_norm.cu, a block per row
 *   rotary      kernels/cuda/rotary.cu, a thread per rotated pair
 *   attention   kernels/cuda/attention.cu: one query token (Sq = 1) splits
 *               the keys over blocks (flash decoding), then a second kernel
 *               merges the parts, kept in the stream's workspace (from
 *               compute capability 9.0, the splits are a cluster's blocks,
 *               which merge them in shared memory); longer
 *               prompts run a tiled flash-attention kernel
 *   sample      kernels/cuda/sample.cu, a block per row, the weights in the
 *               stream's workspace
 *   update      kernels/cuda/update.cu, a thread per element of x (after a
 *               copy of the state where the result is another tensor)
 *   emit        kernels/cuda/emit.cu, one block: a record into the VM's
 *               token channel (pinned host memory the kernel reaches)
 *   rotary_update kernels/cuda/rotary_update.cu: rotary's thread per pair
 *               over q and k, k's written into the key cache, then a thread
 *               per element of v into the value cache (after copies of the
 *               caches where the results are other tensors)
 *   fused_linear kernels/cuda/fused_linear.cu: gemv.cu's warp per column,
 *               x read through the prologue (rms_norm, swiglu, geglu), the
 *               bias and residual added as each result is stored; with an
 *               epilogue a warp per column of both halves, the gated unit
 *               stored
 * rotary and sample compile kernels/cuda/llm_common.h before their kernel:
 * the arithmetic the CPU reference shares with them. swiglu and geglu are
 * elementwise ops (cuda_ops.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gen.h"

enum { LLM_RMS, LLM_ROTARY, LLM_DECODE, LLM_FLASH, LLM_SAMPLE, LLM_UPDATE, LLM_EMIT, LLM_FLIN, LLM_ROTUPD };

typedef struct llm_state {
  int kind;
  CUfunction fn, fn2;        /* LLM_DECODE: the split kernel, then the combine */
  kshape_t sh;
  unsigned grid[3], block;
  long long threads;         /* rotary: grid-stride over this many */
  size_t workspace;
  CUdeviceptr kv_off[2];     /* attention over packed heads: k's and v's first bytes past q's */
} llm_state_t;

/* Query heads a decode block takes (a divisor of the group): registers
 * hold a query and an output per head, DL values a lane each. */
#define DECODE_REGS 32
#define RMS_NPT 16
#define DECODE_MAX_SPLITS 256 /* attn_combine_k's CMAX */
#define DECODE_CLUSTER 8       /* a cluster's blocks, the portable most */
#define DECODE_CLUSTER_KEYS 4096  /* the longest cache that takes clusters (measured at lengths up to 2,048 of 4,096) */
#define DECODE_CLUSTER_SMEM 40000 /* static shared memory a clustered block's partials may take (under the 48 KiB static limit) */
/* Shared memory a flash block may hold (the static limit is 48 KiB). */
#define FLASH_SMEM 48000
#define FLASH_ROWS 16  /* attention.cu's BQ */
#define TC_WARPS 4     /* attention.cu's TCW: attn_tc_k's warps a block */

bool cuda_llm_supports(const ops_plan_t *plan) {
  ops_cpu_fn f = plan->def->cpu;
  return f == ops_cpu_rms_norm || f == ops_cpu_rotary || f == ops_cpu_attention || f == ops_cpu_sample || f == ops_cpu_update ||
         f == ops_cpu_emit || f == ops_cpu_fused_linear || f == ops_cpu_rotary_update;
}

size_t cuda_llm_workspace(const void *state) { return ((const llm_state_t *)state)->workspace; }

/* The dtype's T, C (the compute type), LD and ST. */
static rill_status_t llm_types(rill_buf_t *b, rill_dtype_t d) {
  const char *C = ksrc_comp(d);
  RILL_TRY(ksrc_def(b, "T", "%s", ksrc_ctype(d)));
  RILL_TRY(ksrc_def(b, "C", "%s", C));
  return ksrc_io(b, "LD", "ST", d, d, C);
}

static rill_status_t lit_def(rill_buf_t *b, const char *name, double v, const char *c) {
  char lit[64];
  ksrc_lit(lit, sizeof lit, v, c);
  return ksrc_def(b, name, "%s", lit);
}

/* What a prep_* function describes besides the state: the kernel file, the
 * functions to take from it, and whether llm_common.h goes before it. */
typedef struct llm_src {
  const char *kernel, *name, *name2;
  bool common;
} llm_src_t;

static rill_status_t prep_rms(const ops_plan_t *plan, int num_sms, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  const rill_type_t *x = &plan->decl->in[0];
  long long rows = 1, n = 1;
  for (int i = 0; i < x->rank; i++) {
    if (i < plan->p.axis) rows *= x->dims[i];
    else n *= x->dims[i];
  }
  s->kind = LLM_RMS;
  s->sh.dims[0] = n;
  s->grid[0] = (unsigned)rows;
  /* Fewer rows than SMs (decode): a wide block a row, so that a row's loads
   * are in flight at once; else 256 threads. Rows up to RMS_NPT elements a
   * thread stay in registers between the passes. */
  long long block = rows < num_sms ? 1024 : 256;
  while (block > 32 && block / 2 >= n) block /= 2;
  long long npt = (n + block - 1) / block;
  s->block = (unsigned)block;
  rill_status_t st = llm_types(b, x->dtype);
  if (!st) st = lit_def(b, "EPS", plan->p.eps, ksrc_comp(x->dtype));
  if (!st) st = ksrc_def(b, "HAS_W", "%d", plan->decl->nin > 1);
  if (!st) st = ksrc_def(b, "NPT", "%lld", npt <= RMS_NPT ? npt : 0);
  *src = (llm_src_t){rill_kernel_rms_norm, "rms_norm_k", NULL, false};
  return st;
}

/* rotary's defines (rotary.cu's and rotary_update.cu's) for x and positions pos. */
static rill_status_t rotary_defs(const ops_plan_t *plan, const rill_type_t *x, const rill_type_t *pos, rill_buf_t *b) {
  const ops_params_t *p = &plan->p;
  rill_status_t st = llm_types(b, x->dtype);
  if (!st) st = ksrc_def(b, "TP", "%s", ksrc_ctype(pos->dtype));
  if (!st) st = ksrc_def(b, "POS_MODE", "%d", pos->rank);
  if (!st) st = ksrc_def(b, "GPTJ", "%d", p->llm.style == OPS_ROPE_GPTJ);
  if (!st) st = ksrc_def(b, "RD", "%lld", (long long)p->llm.rotary_dim);
  if (!st) st = ksrc_def(b, "SCALING", "%d", p->llm.scaling);
  if (!st) st = lit_def(b, "THETA", p->llm.theta, "double");
  if (!st) st = lit_def(b, "FACTOR", p->llm.factor, "double");
  if (!st) st = lit_def(b, "LOW", p->llm.low_freq, "double");
  if (!st) st = lit_def(b, "HIGH", p->llm.high_freq, "double");
  if (!st) st = lit_def(b, "ORIG", p->llm.orig_max, "double");
  return st;
}

static rill_status_t prep_rotary(const ops_plan_t *plan, int num_sms, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  const rill_type_t *x = &plan->decl->in[0];
  s->kind = LLM_ROTARY;
  for (int i = 0; i < 4; i++) s->sh.dims[i] = x->dims[i];
  s->threads = s->sh.n = x->dims[0] * x->dims[1] * x->dims[2] * (x->dims[3] - plan->p.llm.rotary_dim / 2);
  rill_status_t st = rotary_defs(plan, x, &plan->decl->in[1], b);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(cuda_numel(x)));
  *src = (llm_src_t){rill_kernel_rotary, "rotary_k", NULL, true};
  return st;
}

static rill_status_t prep_rotary_update(const ops_plan_t *plan, int num_sms, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *kc = &d->in[0], *q = &d->in[2], *k = &d->in[3];
  long long B = q->dims[0], S = q->dims[1], Hq = q->dims[2], Hkv = k->dims[2], D = q->dims[3], per = D - plan->p.llm.rotary_dim / 2;
  s->kind = LLM_ROTUPD;
  s->sh.dims[0] = B, s->sh.dims[1] = S, s->sh.dims[2] = Hq, s->sh.dims[3] = Hkv, s->sh.dims[4] = D, s->sh.dims[5] = kc->dims[2];
  s->threads = s->sh.n = B * S * (Hq * per + Hkv * per + Hkv * D);
  long long most = cuda_numel(kc) > s->threads ? cuda_numel(kc) : s->threads;
  rill_status_t st = rotary_defs(plan, q, &d->in[5], b);
  if (!st) st = ksrc_def(b, "TU", "%s", ksrc_ctype(d->in[6].dtype));
  if (!st) st = ksrc_def(b, "PER_ROW", "%d", d->in[6].rank == 1);
  if (!st) st = ksrc_def(b, "KERR_UPDATE", "%d", RILL_KERR_UPDATE);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(most + cuda_numel(q)));
  *src = (llm_src_t){rill_kernel_rotary_update, "rotary_update_k", NULL, true};
  return st;
}

/* The largest divisor of g no larger than cap (at least 1). */
static long long divisor_upto(long long g, long long cap) {
  long long best = 1;
  for (long long k = 1; k <= g && k <= cap; k++)
    if (g % k == 0) best = k;
  return best;
}

/* Whether a prompt's attention runs on tensor cores (attn_tc_k): f16 or
 * bf16, a head size that is a multiple of 16 up to 128, compute capability
 * 8.0 or later (mma.sync m16n8k16 for both types); RILL_ATTN_TC=0 keeps
 * attn_flash_k (to compare the two). */
static bool attention_tc(const rill_type_t *q, long long Sq, int sm) {
  long long D = q->dims[3];
  return (q->dtype == RILL_F16 || q->dtype == RILL_BF16) && Sq > 1 && D % 16 == 0 && D <= 128 && sm >= 80 && !rill__env_off("RILL_ATTN_TC");
}

/* The warps a block of the decode kernel's clusters (compute capability 9.0
 * on): the group's splits are a cluster's blocks and merge their partials
 * in shared memory, so no combine kernel runs; more warps a block where the
 * query heads' registers allow, fewer where the warps' partials would not
 * fit in shared memory. 0: no clusters (RILL_DECODE_CLUSTER=0: never, to
 * compare; nor for a cache longer than DECODE_CLUSTER_KEYS, where the
 * cluster's 8 splits would walk more keys each than the combine's grid of
 * about two blocks an SM). */
static long long decode_cluster_warps(int sm, long long GB, long long DL, long long D, long long csize, long long Skv) {
  if (sm < 90 || Skv > DECODE_CLUSTER_KEYS || rill__env_off("RILL_DECODE_CLUSTER")) return 0;
  for (long long w = GB * DL <= 8 ? 16 : GB * DL <= 16 ? 8 : 4; w >= 4; w /= 2)
    if ((w + 1) * GB * (D + 2) * csize <= DECODE_CLUSTER_SMEM) return w; /* the warps' partials, then the block's */
  return 0;
}

static rill_status_t prep_attention(const ops_plan_t *plan, int num_sms, int sm, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *q = &d->in[0];
  ops_attn_geom_t ag;
  ops_attention_geom(d, &plan->p, &ag);
  long long B = ag.B, Hq = ag.Hq, Sq = ag.Sq, D = ag.D, Hkv = ag.Hkv, Skv = ag.Skv, G = Hq / Hkv;
  long long DL = (D + 31) / 32, csize = (long long)rill_dtype_size(q->dtype == RILL_F64 ? RILL_F64 : RILL_F32);
  long long GB = divisor_upto(G, DECODE_REGS / DL > 1 ? DECODE_REGS / DL : 1), BK = 32;
  bool tc = attention_tc(q, Sq, sm);
  bool ksplit = false;
  long long cw = Sq == 1 ? decode_cluster_warps(sm, GB, DL, D, csize, Skv) : 0;
  while (BK > 1 && (FLASH_ROWS * D + BK * (2 * D + 1)) * csize > FLASH_SMEM) BK /= 2;
  if (Sq > 1 && (FLASH_ROWS * D + BK * (2 * D + 1)) * csize > FLASH_SMEM)
    return rill__status(RILL_UNIMPLEMENTED, "attention: head size %lld is too large for the CUDA kernel", D);
  if (D > 1024) return rill__status(RILL_UNIMPLEMENTED, "attention: head size %lld is too large for the CUDA kernel", D);
  s->block = 128;
  int64_t *dims = s->sh.dims;
  dims[0] = B, dims[1] = Hq, dims[2] = Hkv, dims[3] = Sq, dims[4] = Skv;
  for (int a = 0; a < 3; a++) s->sh.st[1][a] = ag.qs[a], s->sh.st[2][a] = ag.ks[a], s->sh.st[3][a] = ag.ys[a]; /* any layout */
  s->kv_off[0] = (CUdeviceptr)(ag.koff * (long long)rill_dtype_size(q->dtype)), s->kv_off[1] = (CUdeviceptr)(ag.voff * (long long)rill_dtype_size(q->dtype));
  if (plan->p.llm.has_mask) {
    /* the mask's element strides over (b, h, i, j), 0 where it broadcasts */
    const int64_t *md = d->in[d->nin - 1].dims;
    long long inner = 1;
    for (int a = 3; a >= 0; a--) {
      s->sh.st[0][a] = md[a] > 1 ? inner : 0;
      inner *= md[a];
    }
  }
  if (Sq == 1) {
    /* about two blocks an SM, and a split for each 64 keys of the cache at most */
    long long base = B * (Hq / GB) > 0 ? B * (Hq / GB) : 1, want = (2LL * num_sms + base - 1) / base, most = (Skv + 63) / 64;
    long long nsplit = cw ? DECODE_CLUSTER : want < most ? want : most; /* (clusters: grid x is the cluster, a block's split its rank) */
    if (nsplit > DECODE_MAX_SPLITS) nsplit = DECODE_MAX_SPLITS;
    if (nsplit < 1) nsplit = 1;
    if (cw) s->block = (unsigned)(32 * cw);
    dims[5] = nsplit; /* the kernel splits the run's length L, not Skv, into nsplit chunks */
    s->kind = LLM_DECODE;
    s->grid[0] = (unsigned)nsplit, s->grid[1] = (unsigned)(Hq / GB), s->grid[2] = (unsigned)B;
    s->workspace = cw ? 0 : (size_t)(B * Hq * nsplit * (D + 2) * csize);
  } else {
    s->kind = LLM_FLASH;
    long long rows = FLASH_ROWS;
    if (tc) {
      /* 16 query rows a warp, 4 warps a block; where that grid would not give each SM a block, 16 rows a
       * block and the warps split the keys */
      ksplit = (Sq + 63) / 64 * Hq * B < num_sms;
      rows = ksplit ? 16 : 64;
      s->block = 32 * TC_WARPS;
    }
    s->grid[0] = (unsigned)((Sq + rows - 1) / rows), s->grid[1] = (unsigned)Hq, s->grid[2] = (unsigned)B;
  }
  const char *C = ksrc_comp(q->dtype);
  rill_status_t st = llm_types(b, q->dtype);
  if (!st) st = ksrc_def(b, "D", "%lld", D);
  if (!st) st = ksrc_def(b, "G", "%lld", G);
  if (!st) st = ksrc_def(b, "GB", "%lld", GB);
  if (!st) st = ksrc_def(b, "BK", "%lld", BK);
  if (!st) st = lit_def(b, "SCALE", plan->p.scale, C);
  if (!st) st = ksrc_def(b, "CAUSAL", "%d", plan->p.llm.causal);
  if (!st) st = ksrc_def(b, "HAS_LEN", "%d", plan->p.llm.has_len);
  if (!st) st = ksrc_def(b, "LEN_PER_B", "%d", plan->p.llm.has_len && d->in[3].rank == 1);
  if (!st) st = ksrc_def(b, "TL", "%s", plan->p.llm.has_len ? ksrc_ctype(d->in[3].dtype) : "int");
  if (!st) st = ksrc_def(b, "HAS_MASK", "%d", plan->p.llm.has_mask);
  if (!st) st = ksrc_def(b, "MASK_WINDOWS", "%lld", (long long)plan->p.llm.windows);
  if (!st) st = ksrc_def(b, "TC", "%d", tc);
  if (!st) st = ksrc_def(b, "ATTN_DECODE", "%d", s->kind == LLM_DECODE);
  if (!st) st = ksrc_def(b, "TC_BF16", "%d", q->dtype == RILL_BF16);
  if (!st) st = ksrc_def(b, "TCW", "%d", TC_WARPS);
  if (!st) st = ksrc_def(b, "TC_KSPLIT", "%d", ksplit);
  /* four blocks of 4 warps an SM (128 registers a thread) where D <= 64: ViT's b32 attention 76 us against 87 with 3 */
  if (!st) st = ksrc_def(b, "TC_MINB", "%d", D <= 64 && !ksplit ? 4 : 1);
  if (!st) st = ksrc_def(b, "KERR_LENGTH", "%d", RILL_KERR_LENGTH);
  if (!st && cw) st = ksrc_def(b, "WARPS", "%lld", cw);
  if (!st && cw) st = ksrc_def(b, "CLUSTER", "%d", DECODE_CLUSTER);
  if (s->kind == LLM_DECODE) *src = (llm_src_t){rill_kernel_attention, "attn_decode_k", cw ? NULL : "attn_combine_k", false};
  else *src = (llm_src_t){rill_kernel_attention, tc ? "attn_tc_k" : "attn_flash_k", NULL, false};
  return st;
}

/* An f32 value's bits, as a kernel's define (exact, where a decimal literal might not be). */
static rill_status_t bits_def(rill_buf_t *b, const char *name, double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  return ksrc_def(b, name, "((int)0x%08xu)", u);
}

static rill_status_t prep_sample(const ops_plan_t *plan, int num_sms, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  const ops_params_t *p = &plan->p;
  s->kind = LLM_SAMPLE;
  s->sh.dims[0] = x->dims[0];
  s->sh.dims[1] = x->dims[1];
  s->grid[0] = (unsigned)x->dims[0];
  s->block = 256;
  s->workspace = (size_t)cuda_numel(x) * sizeof(float);
  rill_status_t st = llm_types(b, x->dtype);
  if (!st) st = ksrc_def(b, "TC", "%s", d->nin > 1 ? ksrc_ctype(d->in[1].dtype) : "int");
  if (!st) st = ksrc_def(b, "HAS_COUNTER", "%d", d->nin > 1);
  if (!st) st = ksrc_def(b, "GREEDY", "%d", p->llm.temperature == 0);
  if (!st) st = ksrc_def(b, "TOPK", "%lldLL", (long long)p->llm.top_k);
  if (!st) st = ksrc_def(b, "TOPP_ON", "%d", p->llm.top_p < 1);
  if (!st) st = bits_def(b, "TOPP", p->llm.top_p);
  if (!st) st = bits_def(b, "TEMP", p->llm.temperature);
  if (!st) st = ksrc_def(b, "SEED", "%lluULL", (unsigned long long)p->llm.seed);
  *src = (llm_src_t){rill_kernel_sample, "sample_k", NULL, true};
  return st;
}

static rill_status_t prep_update(const ops_plan_t *plan, int num_sms, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  const isa_opdecl_t *d = plan->decl;
  ops_update_geom_t g;
  ops_update_geom(plan, &g);
  size_t es = rill_dtype_size(d->in[0].dtype);
  s->kind = LLM_UPDATE;
  s->sh.dims[0] = (int64_t)g.rows, s->sh.dims[1] = g.n, s->sh.dims[2] = (int64_t)g.inner, s->sh.dims[3] = g.L, s->sh.dims[4] = (int64_t)g.per_b;
  s->threads = s->sh.n = cuda_numel(&d->in[1]);
  rill_status_t st = ksrc_def(b, "T", "%s", es == 1 ? "unsigned char" : es == 2 ? "unsigned short" : es == 4 ? "unsigned int" : "unsigned long long");
  if (!st) st = ksrc_def(b, "TP", "%s", ksrc_ctype(d->in[2].dtype));
  if (!st) st = ksrc_def(b, "PER_ROW", "%d", g.per_row);
  if (!st) st = ksrc_def(b, "I", "%s", ksrc_idx(cuda_numel(&d->in[0])));
  if (!st) st = ksrc_def(b, "KERR_UPDATE", "%d", RILL_KERR_UPDATE);
  *src = (llm_src_t){rill_kernel_update, "update_k", NULL, false};
  return st;
}

static rill_status_t prep_emit(const ops_plan_t *plan, int num_sms, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  s->kind = LLM_EMIT;
  s->sh.dims[0] = cuda_numel(&plan->decl->in[0]);
  s->grid[0] = s->grid[1] = s->grid[2] = 1;
  s->block = 32;
  *src = (llm_src_t){rill_kernel_emit, "emit_k", NULL, false};
  return ksrc_def(b, "TT", "%s", ksrc_ctype(plan->decl->in[0].dtype));
}

/* fused_linear: rows of FLIN_ROWS at a time (blockIdx.y), FLIN_WARPS columns a block. */
#define FLIN_ROWS 4
#define FLIN_WARPS 8
#define FLIN_STAGE_BYTES 32768 /* of the 48 KiB a block may hold statically */
static rill_status_t prep_flin(const ops_plan_t *plan, int num_sms, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  (void)num_sms;
  const isa_opdecl_t *d = plan->decl;
  const rill_type_t *x = &d->in[0];
  rill_dtype_t dt = x->dtype;
  long long K = x->dims[x->rank - 1], N = d->in[1].dims[0], M = K ? cuda_numel(x) / K : 0;
  ops_flin_args_t ar;
  ops_flin_args(plan, &ar);
  s->kind = LLM_FLIN;
  long long NO = plan->p.llm.flin_epi ? N / 2 : N; /* y's columns (an epilogue: the gated unit of the halves) */
  s->sh.base[0] = M, s->sh.base[1] = N, s->sh.base[2] = K;
  s->grid[0] = (unsigned)((NO + FLIN_WARPS - 1) / FLIN_WARPS);
  s->grid[1] = 1; /* (run launches once per FLIN_ROWS rows) */
  s->grid[2] = 1;
  s->block = 32 * FLIN_WARPS;
  int rows = 1;
  while (rows < M && rows < FLIN_ROWS) rows *= 2;
  /* as gemv.cu: K / (32 lanes x 16 bytes) loads a lane at once, at most 16 (8 with a prologue's operand or an epilogue's second row beside) */
  long long chunk = 32 * (16 / (long long)rill_dtype_size(dt)), chunks = (K + chunk - 1) / chunk, most = plan->p.llm.flin_pro || plan->p.llm.flin_epi ? 8 : 16;
  rill_status_t st = llm_types(b, dt);
  if (!st) st = ksrc_def(b, "ROWS", "%d", rows);
  if (!st) st = ksrc_def(b, "CHUNKS", "%lld", chunks < most ? (chunks > 0 ? chunks : 1) : most);
  if (!st) st = ksrc_def(b, "WARPS", "%d", FLIN_WARPS);
  if (!st) st = ksrc_def(b, "HAS_BIAS", "%d", ar.bias >= 0);
  if (!st) st = ksrc_def(b, "HAS_RES", "%d", ar.res >= 0);
  if (!st) st = ksrc_def(b, "FEPI", "%d", plan->p.llm.flin_epi == OPS_FLIN_NONE ? 0 : plan->p.llm.flin_gate2 ? 2 : 1);
  if (!st) st = ksrc_def(b, "FPRO", "%d", plan->p.llm.flin_pro == OPS_FLIN_RMS ? 1 : plan->p.llm.flin_pro ? 2 : 0);
  /* x through the prologue staged in shared memory where its rows fit (RILL_FLIN_STAGE=0: never, to compare) */
  bool stage = plan->p.llm.flin_pro && rows * K * (long long)rill_dtype_size(dt) <= FLIN_STAGE_BYTES && !rill__env_off("RILL_FLIN_STAGE");
  if (!st) st = ksrc_def(b, "STAGE", "%d", stage);
  if (!st) st = ksrc_def(b, "KS", "%lld", stage ? K : 1LL);
  if (!st && plan->p.llm.flin_pro == OPS_FLIN_RMS) st = lit_def(b, "EPS", plan->p.eps, ksrc_comp(dt));
  if (!st && plan->p.llm.flin_pro >= OPS_FLIN_SWIGLU) st = cuda_gate_function(b, plan->p.llm.flin_pro == OPS_FLIN_GEGLU, plan->p.gelu_tanh, dt);
  if (!st && plan->p.llm.flin_epi >= OPS_FLIN_SWIGLU) st = cuda_gate_function(b, plan->p.llm.flin_epi == OPS_FLIN_GEGLU, plan->p.gelu_tanh, dt);
  *src = (llm_src_t){rill_kernel_fused_linear, "flin_k", NULL, false};
  return st;
}

/* The state and the whole source of a plan's kernels. */
static rill_status_t describe(const ops_plan_t *plan, int num_sms, int sm, llm_state_t *s, rill_buf_t *b, llm_src_t *src) {
  ops_cpu_fn f = plan->def->cpu;
  rill_status_t st = f == ops_cpu_rms_norm ? prep_rms(plan, num_sms, s, b, src)
                     : f == ops_cpu_rotary ? prep_rotary(plan, num_sms, s, b, src)
                     : f == ops_cpu_attention ? prep_attention(plan, num_sms, sm, s, b, src)
                     : f == ops_cpu_update ? prep_update(plan, num_sms, s, b, src)
                     : f == ops_cpu_emit ? prep_emit(plan, num_sms, s, b, src)
                     : f == ops_cpu_fused_linear ? prep_flin(plan, num_sms, s, b, src)
                     : f == ops_cpu_rotary_update ? prep_rotary_update(plan, num_sms, s, b, src)
                                              : prep_sample(plan, num_sms, s, b, src);
  if (!st && src->common) st = rill__buf_printf(b, "%s\n", rill_kernel_llm_common);
  if (!st) st = rill__buf_printf(b, "%s\n%s", rill_kernel_prelude, src->kernel);
  return st;
}

rill_status_t cuda_llm_source(const ops_plan_t *plan, int num_sms, int sm, rill_buf_t *out, const char **out_name, const char **out_name2) {
  llm_state_t s = {0};
  llm_src_t src = {0};
  RILL_TRY(describe(plan, num_sms, sm, &s, out, &src));
  *out_name = src.name;
  *out_name2 = src.name2;
  return NULL;
}

rill_status_t cuda_llm_prepare(const ops_cuda_env_t *env, const ops_plan_t *plan, void **out) {
  llm_state_t *s = rill__calloc(env->a, 1, sizeof *s);
  if (!s) return rill__oom();
  rill_buf_t b;
  rill__buf_init(&b, env->a);
  llm_src_t src = {0};
  rill_status_t st = describe(plan, env->num_sms, env->sm, s, &b, &src);
  if (!st) st = rill__buf_append(&b, "", 1);
  if (!st) st = kcache_get(env->cache, (const char *)b.data, src.name, &s->fn);
  if (!st && src.name2) st = kcache_get(env->cache, (const char *)b.data, src.name2, &s->fn2);
  rill__buf_free(&b);
  if (st) {
    rill__free(env->a, s);
    return st;
  }
  *out = s;
  return NULL;
}

void cuda_llm_release(const ops_cuda_env_t *env, void *state) { rill__free(env->a, state); }

static rill_status_t grid_launch(const ops_cuda_ctx_t *ctx, CUfunction fn, const unsigned *grid, unsigned block, void **args) {
  if (!grid[0] || !grid[1] || !grid[2]) return NULL;
  return CU(ctx->api, cuLaunchKernel, fn, grid[0], grid[1], grid[2], block, 1, 1, 0, ctx->stream, args, NULL);
}

rill_status_t cuda_llm_run(const ops_cuda_ctx_t *ctx, const ops_plan_t *plan, void *state, void *const *in, void *const *out) {
  llm_state_t *s = state;
  const isa_opdecl_t *d = plan->decl;
  CUdeviceptr p[5] = {0}, y = (CUdeviceptr)out[0], ws = ctx->workspace, err = ctx->error_word;
  for (uint32_t k = 0; k < d->nin && k < 4; k++) p[k] = (CUdeviceptr)in[k];
  if (s->kind == LLM_DECODE || s->kind == LLM_FLASH) {
    /* attention: k and v in q's operand where packed; len (p[3]) and mask (p[4]) where given, 0 where not */
    if (plan->p.llm.packed) p[1] = p[0] + s->kv_off[0], p[2] = p[0] + s->kv_off[1];
    p[3] = plan->p.llm.has_len ? (CUdeviceptr)in[3] : 0;
    p[4] = plan->p.llm.has_mask ? (CUdeviceptr)in[d->nin - 1] : 0;
  }
  switch (s->kind) {
    case LLM_RMS: {
      unsigned g[3] = {s->grid[0], 1, 1};
      void *args[] = {&p[0], &p[1], &y, &s->sh};
      return grid_launch(ctx, s->fn, g, s->block, args);
    }
    case LLM_ROTARY: {
      void *args[] = {&p[0], &p[1], &y, &s->sh};
      return cuda_launch(ctx, s->fn, s->threads, args);
    }
    case LLM_DECODE: {
      void *args[] = {&p[0], &p[1], &p[2], &p[3], &p[4], &ws, &y, &err, &s->sh};
      RILL_TRY(grid_launch(ctx, s->fn, s->grid, s->block, args));
      if (!s->fn2) return NULL; /* a cluster's blocks merged the splits */
      unsigned g[3] = {(unsigned)(s->sh.dims[0] * s->sh.dims[1]), 1, 1};
      void *cargs[] = {&ws, &y, &s->sh};
      return grid_launch(ctx, s->fn2, g, s->block, cargs);
    }
    case LLM_FLASH: {
      void *args[] = {&p[0], &p[1], &p[2], &p[3], &p[4], &y, &err, &s->sh};
      return grid_launch(ctx, s->fn, s->grid, s->block, args);
    }
    case LLM_SAMPLE: {
      unsigned g[3] = {s->grid[0], 1, 1};
      void *args[] = {&p[0], &p[1], &ws, &y, &s->sh};
      return grid_launch(ctx, s->fn, g, s->block, args);
    }
    case LLM_UPDATE: {
      /* In place where y is the state (what the assembler emits); else y starts as a copy of it. */
      if (y != p[0]) {
        size_t bytes = (size_t)cuda_numel(&d->in[0]) * rill_dtype_size(d->in[0].dtype);
        if (bytes) RILL_TRY(CU(ctx->api, cuMemcpyDtoDAsync, y, p[0], bytes, ctx->stream));
      }
      void *args[] = {&p[1], &p[2], &y, &err, &s->sh};
      return cuda_launch(ctx, s->fn, s->threads, args);
    }
    case LLM_EMIT: {
      /* Without a channel (no VM) nothing is published: go is true. */
      if (!plan->chan) return CU(ctx->api, cuMemsetD8Async, y, 1, 1, ctx->stream);
      kshape_t sh = s->sh;
      sh.dims[1] = (int64_t)plan->chan->cap;
      sh.dims[2] = plan->chan->width;
      CUdeviceptr hdr = (CUdeviceptr)plan->chan->dev_hdr, ring = (CUdeviceptr)plan->chan->dev_ring;
      void *args[] = {&p[0], &hdr, &ring, &y, &sh};
      return grid_launch(ctx, s->fn, s->grid, s->block, args);
    }
    case LLM_ROTUPD: {
      /* In place where the results are the caches (what the assembler emits); else copies of them first. */
      CUdeviceptr kc = (CUdeviceptr)out[0], vc = (CUdeviceptr)out[1], qy = (CUdeviceptr)out[2], pin[7];
      for (int k = 0; k < 7; k++) pin[k] = (CUdeviceptr)in[k];
      for (int c = 0; c < 2; c++) {
        size_t bytes = (size_t)cuda_numel(&d->in[c]) * rill_dtype_size(d->in[c].dtype);
        CUdeviceptr dst = c ? vc : kc;
        if (dst != pin[c] && bytes) RILL_TRY(CU(ctx->api, cuMemcpyDtoDAsync, dst, pin[c], bytes, ctx->stream));
      }
      void *args[] = {&pin[2], &pin[3], &pin[4], &pin[5], &pin[6], &kc, &vc, &qy, &err, &s->sh};
      return cuda_launch(ctx, s->fn, s->threads, args);
    }
    case LLM_FLIN: {
      /* a grid row per FLIN_ROWS rows of x: each its own pointers and M */
      ops_flin_args_t ar;
      ops_flin_args(plan, &ar);
      const rill_type_t *x = &d->in[0];
      size_t es = rill_dtype_size(x->dtype);
      long long M = s->sh.base[0], K = s->sh.base[2], N = plan->p.llm.flin_epi ? s->sh.base[1] / 2 : s->sh.base[1]; /* (y's columns) */
      CUdeviceptr w = (CUdeviceptr)in[1], bias = ar.bias >= 0 ? (CUdeviceptr)in[ar.bias] : 0, pp = ar.pro >= 0 ? (CUdeviceptr)in[ar.pro] : 0,
                  r = ar.res >= 0 ? (CUdeviceptr)in[ar.res] : 0;
      for (long long m0 = 0; m0 < M; m0 += FLIN_ROWS) {
        kshape_t sh = s->sh;
        sh.base[0] = M - m0 < FLIN_ROWS ? M - m0 : FLIN_ROWS;
        CUdeviceptr xm = (CUdeviceptr)in[0] + (CUdeviceptr)(m0 * K * (long long)es), ym = y + (CUdeviceptr)(m0 * N * (long long)es),
                    rm = r ? r + (CUdeviceptr)(m0 * N * (long long)es) : 0,
                    pm = pp && plan->p.llm.flin_pro != OPS_FLIN_RMS ? pp + (CUdeviceptr)(m0 * K * (long long)es) : pp;
        void *args[] = {&xm, &w, &bias, &pm, &rm, &ym, &sh};
        RILL_TRY(grid_launch(ctx, s->fn, s->grid, s->block, args)); /* (prep_flin's grid: columns x 1 x 1) */
      }
      return NULL;
    }
    default: return rill__status(RILL_INTERNAL, "bad CUDA op state");
  }
}
