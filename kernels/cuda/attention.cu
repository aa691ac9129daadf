// attention.cu: grouped-query attention, q [B,Hq,Sq,D], k and v
// [B,Hkv,Skv,D] (or all [B,S,H,D]: element strides over (batch, head,
// position) in s.st[1] for q, s.st[2] for k and v, s.st[3] for y; a head's D
// elements contiguous); q head h reads k and v head h / G. Query i attends keys
// j < L (the sequence's length: len[b], len[0] or Skv) and, with CAUSAL, j
// <= i + L - Sq; no key attended gives zeros. A length outside 0..Skv
// raises KERR_LENGTH in *err (the host reports it) and is clamped. With
// HAS_MASK, mask[b * st[0][0] + h * st[0][1] + i * st[0][2] + j * st[0][3]]
// (strides 0 where the mask broadcasts) is added to each scaled score; a
// query whose every score is -inf gives zeros. With MASK_WINDOWS = W > 0
// the mask's batch axis holds W windows and batch b reads window b % W
// (Swin's shifted windows: B images times W windows a batch).
// s.dims = {B, Hq, Hkv, Sq, Skv, nsplit, chunk}. Accumulation in C.
//   attn_decode_k (Sq = 1), split-K "flash decoding": the run's length L
//     takes ns = min(nsplit, ceil(L / DKEYS)) of the grid's nsplit splits
//     (at least one), a split for each DKEYS keys at most, so a short
//     context is neither walked by a few warps one key after another nor
//     spread over splits of one key; block (split, group, b) takes GB query
//     heads of one kv head over keys [split * chunk, (split + 1) * chunk),
//     chunk = ceil(L / ns) (none for a split at or past ns), its WARPS warps
//     every WARPS-th key each, UK keys at once (fewer for large heads, whose
//     keys take more registers; their loads issued together, their scores'
//     warp sums independent), with an online softmax per warp; the block
//     merges its warps' (in shared memory) and writes one partial a head
//     (max, sum, unnormalised output: D + 2 values of C) to part. With
//     CLUSTER (the host sets it from compute capability 9.0, with WARPS),
//     nsplit = CLUSTER and the group's splits are one cluster's blocks: each
//     keeps its partials in shared memory and, after the cluster's barrier,
//     block r merges heads r, r + CLUSTER, ... reading every block's (no
//     combine kernel, no workspace).
//   attn_combine_k (not with CLUSTER): a block per (b, h) merges the nsplit partials
//     (at most CMAX): the block's maximum, the last partial that holds keys
//     (those after it, splits past the run's length, are skipped) and the
//     weighted sum by block reductions, then each warp sums its share of
//     the partials up to that one for the lanes' output dims (an empty one,
//     max -inf, weighs 0), and the warps' sums are added in shared memory.
//   attn_flash_k (Sq > 1): block (query tile, h, b) holds BQ queries (RW a
//     warp) and walks the keys in tiles of BK kept in shared memory; lane t
//     scores key t of the tile against a query, the warp updates its online
//     softmax and each lane accumulates the output dims lane + 32 c.
// Defines: T, C, LD, ST, D, G, GB, BK, SCALE, CAUSAL, HAS_LEN, LEN_PER_B,
// TL, HAS_MASK, MASK_WINDOWS, KERR_LENGTH, CLUSTER and WARPS (decode); ATTN_DECODE (1: the decode
// kernels alone, 0: attn_flash_k, or attn_tc_k with TC), so that a source
// compiles only the kernels its op runs (NVRTC took 2.3 to 2.8 s for the
// whole file with TC, 0.8 to 1.2 s for attn_tc_k alone).
#ifndef WARPS
#define WARPS 4  // (the host sets the decode kernel's with CLUSTER)
#endif
#ifndef CLUSTER
#define CLUSTER 0
#endif
#define QS(b, h, i) ((b) * s.st[1][0] + (h) * s.st[1][1] + (i) * s.st[1][2])
#define KS(b, h) ((b) * s.st[2][0] + (h) * s.st[2][1])
#define KR s.st[2][2]
#define QR s.st[1][2]
#define YS(b, h, i) ((b) * s.st[3][0] + (h) * s.st[3][1] + (i) * s.st[3][2])
#define CMAX 256  // the combine's partials at most: nsplit (the host caps it, DECODE_MAX_SPLITS)
#define DL ((D + 31) / 32)
#define BQ (WARPS * RW)
#define RW 4

// The mask's row for (b, h, i), its element j at j * s.st[0][3] (mask itself without one).
__device__ __forceinline__ const T *mask_row(const T *mask, const Shape &s, long long b, long long h, long long i) {
#if HAS_MASK
#if MASK_WINDOWS
  b %= MASK_WINDOWS;
#endif
  return mask + b * s.st[0][0] + h * s.st[0][1] + i * s.st[0][2];
#else
  return mask;
#endif
}

// The mask's addend for (b, h, i, j): 0 without one.
__device__ __forceinline__ C mask_at(const T *mask, const Shape &s, long long b, long long h, long long i, long long j) {
#if HAS_MASK
  return LD(mask_row(mask, s, b, h, i)[j * s.st[0][3]]);
#else
  return (C)0;
#endif
}

__device__ __forceinline__ long long seq_len(const TL *len, long long b, long long skv, int *err) {
#if HAS_LEN
  long long L = (long long)len[LEN_PER_B ? b : 0];
  if (L < 0 || L > skv) {
    atomicMax(err, KERR_LENGTH);
    return L < 0 ? 0 : skv;
  }
  return L;
#else
  return skv;
#endif
}

#if ATTN_DECODE
#define DKEYS (2 * WARPS)  // keys a decode split takes at least, where L allows
#define UK (DL <= 4 ? 4 : DL <= 8 ? 2 : 1)  // keys a warp scores at once
#if CLUSTER
// Thread block clusters (compute capability 9.0 on): the cluster's barrier
// (release and acquire: shared and global writes before it seen after it)
// and a generic address of the same shared variable in the cluster's block r.
__device__ __forceinline__ void cluster_sync() { asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory"); }
template <class X> __device__ __forceinline__ const X *cluster_map(const X *p, unsigned r) {
  unsigned long long a;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(a) : "l"((unsigned long long)p), "r"(r));
  return (const X *)a;
}
#define DECODE_ATTRS __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(32 * WARPS)
#else
#define DECODE_ATTRS __launch_bounds__(32 * WARPS)
#endif
extern "C" __global__ void DECODE_ATTRS attn_decode_k(const T *q, const T *k, const T *v, const TL *len, const T *mask, C *part, T *y, int *err, Shape s) {
  const long long Hq = s.dims[1], Skv = s.dims[4], nsplit = s.dims[5];
  const long long split = blockIdx.x, h0 = (long long)blockIdx.y * GB, b = blockIdx.z, kh = h0 / G;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long L = seq_len(len, b, Skv, err), want = (L + DKEYS - 1) / DKEYS,
                  ns = want < 1 ? 1 : want < nsplit ? want : nsplit, chunk = (L + ns - 1) / ns, j0 = split * chunk,
                  j1 = j0 + chunk < L ? j0 + chunk : L;  // (j0 >= L past ns: no keys)
  const T *kb = k + KS(b, kh), *vb = v + KS(b, kh);
  C qr[GB][DL], acc[GB][DL], m[GB], l[GB];
#pragma unroll
  for (int g = 0; g < GB; g++) {
    m[g] = -RILL_INF;
    l[g] = 0;
#pragma unroll
    for (int c = 0; c < DL; c++) {
      int d = lane + 32 * c;
      qr[g][c] = d < D ? LD(q[QS(b, h0 + g, 0) + d]) : (C)0;
      acc[g][c] = 0;
    }
  }
  for (long long j = j0 + warp; j < j1; j += WARPS * UK) {  // the same j for every lane of a warp
    C kr[UK][DL], vr[UK][DL];
#pragma unroll
    for (int u = 0; u < UK; u++) {
      long long ju = j + u * WARPS;
#pragma unroll
      for (int c = 0; c < DL; c++) {
        int d = lane + 32 * c;
        bool in = ju < j1 && d < D;
        kr[u][c] = in ? LD(kb[ju * KR + d]) : (C)0;
        vr[u][c] = in ? LD(vb[ju * KR + d]) : (C)0;
      }
    }
#pragma unroll
    for (int g = 0; g < GB; g++) {
      C dots[UK];
#pragma unroll
      for (int u = 0; u < UK; u++) {
        C dot = 0;
#pragma unroll
        for (int c = 0; c < DL; c++) dot += qr[g][c] * kr[u][c];
        dots[u] = warp_all<SumOp>(dot);
      }
#pragma unroll
      for (int u = 0; u < UK; u++) {
        long long ju = j + u * WARPS;
        if (ju >= j1) break;
        C dot = dots[u] * (C)SCALE + mask_at(mask, s, b, h0 + g, 0, ju);
        if (HAS_MASK && m[g] == -RILL_INF && dot == -RILL_INF) continue;  // masked, nothing attended yet: the same for the whole warp
        C mn = m[g] > dot ? m[g] : dot, corr = exp(m[g] - mn), p = exp(dot - mn);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int c = 0; c < DL; c++) acc[g][c] = acc[g][c] * corr + p * vr[u][c];
        m[g] = mn;
      }
    }
  }
  // The warps' partials merged into the block's, one a head: warp g % WARPS
  // writes head g's (max -inf, sum and output 0 where no warp had keys).
  __shared__ C wm[WARPS][GB], wl[WARPS][GB], wacc[WARPS][GB][D];
#pragma unroll
  for (int g = 0; g < GB; g++) {
    if (lane == 0) wm[warp][g] = m[g], wl[warp][g] = l[g];
#pragma unroll
    for (int c = 0; c < DL; c++)
      if (lane + 32 * c < D) wacc[warp][g][lane + 32 * c] = acc[g][c];
  }
  __syncthreads();
#if CLUSTER
  __shared__ C bm[GB], bl[GB], bo[GB][D];  // the block's partials, read by the cluster's blocks
#endif
  for (int g = warp; g < GB; g += WARPS) {
    C M = -RILL_INF;
#pragma unroll
    for (int w = 0; w < WARPS; w++) M = wm[w][g] > M ? wm[w][g] : M;
    C f[WARPS], ls = 0;
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
      f[w] = M == -RILL_INF ? (C)0 : exp(wm[w][g] - M);
      ls += f[w] * wl[w][g];
    }
#if CLUSTER
    C *out = bo[g];
    if (lane == 0) bm[g] = M, bl[g] = ls;
#else
    C *rec = part + ((b * Hq + h0 + g) * nsplit + split) * (D + 2), *out = rec + 2;
    if (lane == 0) rec[0] = M, rec[1] = ls;
#endif
    for (int d = lane; d < D; d += 32) {
      C o = 0;
#pragma unroll
      for (int w = 0; w < WARPS; w++) o += f[w] * wacc[w][g][d];
      out[d] = o;
    }
  }
#if CLUSTER
  // The cluster is the group's nsplit = CLUSTER splits (its rank the split):
  // block r merges heads r, r + CLUSTER, ... from every block's shared
  // memory, a thread an output dim; no block leaves while another may read it.
  cluster_sync();
  (void)part;
  for (long long g = split; g < GB; g += CLUSTER)
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      C mr[CLUSTER], M = -RILL_INF;
#pragma unroll
      for (int r = 0; r < CLUSTER; r++) {
        mr[r] = *cluster_map(&bm[g], r);
        M = mr[r] > M ? mr[r] : M;
      }
      C ls = 0, o = 0;
#pragma unroll
      for (int r = 0; r < CLUSTER; r++) {
        C f = M == -RILL_INF ? (C)0 : exp(mr[r] - M);
        ls += f * *cluster_map(&bl[g], r);
        o += f * *cluster_map(&bo[g][d], r);
      }
      ST(y[YS(b, h0 + g, 0) + d], ls > 0 ? o / ls : (C)0);
    }
  cluster_sync();
#else
  (void)y;
#endif
}

#if !CLUSTER
extern "C" __global__ void __launch_bounds__(32 * WARPS) attn_combine_k(const C *part, T *y, Shape s) {
  __shared__ C sh[32], w[CMAX], o[WARPS][D];
  const long long row = blockIdx.x, np = s.dims[5];  // row: b * Hq + h
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const C *rec = part + row * np * (D + 2);
  C mx = -RILL_INF, last = 0;
  for (long long p = threadIdx.x; p < np; p += blockDim.x) {
    C mp = rec[p * (D + 2)];
    mx = mp > mx ? mp : mx;
    if (mp != -RILL_INF) last = (C)(p + 1);
  }
  const C M = block_max(mx, sh);
  const long long n = (long long)block_max(last, sh);  // the partials past the last that holds keys add nothing
  C ls = 0;
  for (long long p = threadIdx.x; p < n; p += blockDim.x) {
    w[p] = exp(rec[p * (D + 2)] - M);  // (0 for an empty one: its max -inf, its sum and output 0)
    ls += w[p] * rec[p * (D + 2) + 1];
  }
  const C Ls = block_sum(ls, sh);  // its barriers also make w visible to every warp
  for (int d = lane; d < D; d += 32) {
    C acc = 0;
#pragma unroll 4
    for (long long p = warp; p < n; p += WARPS) acc += w[p] * rec[p * (D + 2) + 2 + d];  // (no branch: the loads issued together)
    o[warp][d] = acc;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    C acc = 0;
#pragma unroll
    for (int k = 0; k < WARPS; k++) acc += o[k][d];
    ST(y[YS(row / s.dims[1], row % s.dims[1], 0) + d], Ls > 0 ? acc / Ls : (C)0);
  }
}

#endif  // !CLUSTER
#endif

#if !ATTN_DECODE && !TC
extern "C" __global__ void __launch_bounds__(32 * WARPS) attn_flash_k(const T *q, const T *k, const T *v, const TL *len, const T *mask, T *y, int *err, Shape s) {
  __shared__ C qs[BQ][D], ks[BK][D + 1], vs[BK][D];  // ks padded: lane t reads row t, no bank conflicts
  const long long Sq = s.dims[3], Skv = s.dims[4];
  const long long h = blockIdx.y, b = blockIdx.z, i0 = (long long)blockIdx.x * BQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long L = seq_len(len, b, Skv, err);
  const T *qb = q + QS(b, h, 0), *kb = k + KS(b, h / G), *vb = v + KS(b, h / G);
  for (int e = threadIdx.x; e < BQ * D; e += blockDim.x) {
    long long i = i0 + e / D;
    qs[e / D][e % D] = i < Sq ? LD(qb[i * QR + e % D]) : (C)0;
  }
  // the keys any query of the tile attends: below L and, causal, up to the last query's
  long long kend = L;
  if (CAUSAL) {
    long long last = (i0 + BQ < Sq ? i0 + BQ : Sq) - 1;
    if (last + L - Sq + 1 < kend) kend = last + L - Sq + 1;
  }
  C m[RW], l[RW], acc[RW][DL];
#pragma unroll
  for (int r = 0; r < RW; r++) {
    m[r] = -RILL_INF;
    l[r] = 0;
#pragma unroll
    for (int c = 0; c < DL; c++) acc[r][c] = 0;
  }
  __syncthreads();
  for (long long t0 = 0; t0 < kend; t0 += BK) {
    for (int e = threadIdx.x; e < BK * D; e += blockDim.x) {
      long long j = t0 + e / D;
      ks[e / D][e % D] = j < Skv ? LD(kb[j * KR + e % D]) : (C)0;
      vs[e / D][e % D] = j < Skv ? LD(vb[j * KR + e % D]) : (C)0;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < RW; r++) {
      const int qi = warp * RW + r;
      const long long i = i0 + qi, j = t0 + lane, lim = CAUSAL ? i + L - Sq : L - 1;
      const bool ok = lane < BK && i < Sq && j < L && j <= lim;
      C sc = -RILL_INF;
      if (ok) {
        C dot = 0;
        for (int d = 0; d < D; d++) dot += qs[qi][d] * ks[lane][d];
        sc = dot * (C)SCALE + mask_at(mask, s, b, h, i, j);
      }
      C tm = warp_all<MaxOp>(sc), mn = m[r] > tm ? m[r] : tm;
      if (mn == -RILL_INF) continue;  // nothing attended yet: the same for the whole warp
      C corr = exp(m[r] - mn), p = ok ? exp(sc - mn) : (C)0;
      l[r] = l[r] * corr + warp_all<SumOp>(p);
#pragma unroll
      for (int c = 0; c < DL; c++) acc[r][c] *= corr;
      for (int t = 0; t < BK; t++) {
        C pt = __shfl_sync(0xffffffffu, p, t);
#pragma unroll
        for (int c = 0; c < DL; c++)
          if (lane + 32 * c < D) acc[r][c] += pt * vs[t][lane + 32 * c];
      }
      m[r] = mn;
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < RW; r++) {
    long long i = i0 + warp * RW + r;
    if (i >= Sq) continue;
#pragma unroll
    for (int c = 0; c < DL; c++)
      if (lane + 32 * c < D) ST(y[YS(b, h, i) + lane + 32 * c], l[r] > 0 ? acc[r][c] / l[r] : (C)0);
  }
}

#endif

#if TC
// attn_tc_k (Sq > 1, f16 and bf16, D a multiple of 16 up to 128, compute
// capability 8.0 or later): attn_flash_k's walk on tensor cores, after
// FlashAttention-2. Block (query tile, h, b) holds TCQ = 16 TCW queries, 16
// a warp (TCW warps: the host takes fewer where the grid would not fill the
// GPU); keys in tiles of TCK = 64, copied to shared memory with cp.async (16
// bytes a copy, K and V in two groups, so the scores start while V is in
// flight; element by element where the rows are not 16-byte aligned), rows
// padded 8 values so ldmatrix's rows hit distinct banks; with D up to 80
// two stages, the next tile's copies issued before this one's work. Per tile a warp
// computes its 16 x 64 scores with mma.sync m16n8k16 (q's fragments kept in
// registers for the whole walk, K's B fragments by ldmatrix; sub-tiles of 16
// keys past the block's last key skipped, and their rows not copied), masks
// them only on a tile that reaches past the length or the causal edge (or
// with a mask: each row's mask row found once), updates its online softmax in
// base 2 (the scale times log2 e folded in, ex2.approx; each
// row's values are held by the 4 lanes of a quad), and adds P V, P rounded to
// T as the A operand and V's fragments by ldmatrix.trans, into f32
// accumulators held in registers (rows lane / 4 and lane / 4 + 8, dims
// 2 (lane % 4) + {0, 1} of each 8). A warp whose rows are all past Sq only
// copies. With TC_KSPLIT (a grid of 64-query blocks would not give each SM
// one) a block holds 16 queries and its TCW warps split each tile's keys, a
// quarter each, and merge their partial softmaxes and outputs through shared
// memory at the end: four times the warps on a small grid (ViT's b1 prompt,
// [1,197,12,64]: 156 blocks of 4 warps, not 156 of one). Defines TC_BF16
// (bf16, else f16), TCW, TC_KSPLIT, TC_MINB (the launch bounds' blocks an SM).
#define TCK 64
#define TCP (D + 8)
#define TCQ (TC_KSPLIT ? 16 : 16 * TCW)
#define TKW (TC_KSPLIT ? TCK / TCW : TCK)  // a warp's keys of a tile: all, or its share where the warps split them
static_assert(TKW % 16 == 0, "attn_tc_k: a warp's keys of a tile are whole steps of 16 (P V's)");
#define TCS (TCK * TCP * 8 <= 49152 ? 2 : 1)  // stages: two where four tiles fit in static shared memory
#define TC_LOG2E 1.4426950408889634f
#if TC_BF16
#define TC_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#define TC_CVT2 "cvt.rn.bf16x2.f32 %0, %1, %2;"
#else
#define TC_MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#define TC_CVT2 "cvt.rn.f16x2.f32 %0, %1, %2;"
#endif

// Two values rounded to T in one register (lo in the lower half).
__device__ __forceinline__ unsigned tc_pack(float lo, float hi) {
  unsigned r;
  asm(TC_CVT2 : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// 2^x (ex2.approx: 2 ulp at most; 2^-inf = 0)
__device__ __forceinline__ float tc_ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void tc_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  asm volatile(TC_MMA "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two adjacent 16-bit values of a row as one register (the lower index low);
// one 32-bit load where the pair is aligned (A: all of the kernel's pairs are).
template <bool A> __device__ __forceinline__ unsigned tc_pair(const T *p) {
  return A ? *(const unsigned *)p : (unsigned)p[0] | ((unsigned)p[1] << 16);
}

__device__ __forceinline__ unsigned tc_smem(const void *p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

// Four 8 x 8 matrices of 16-bit values (lane l gives the address of row l % 8
// of matrix l / 8): lane l gets row l / 4, columns 2 (l % 4) + {0, 1} of each
// (TRANS: column l / 4, rows 2 (l % 4) + {0, 1}).
template <bool TRANS> __device__ __forceinline__ void tc_ldsm(unsigned *r, const T *p) {
  if (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_smem(p)) : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(tc_smem(p)) : "memory");
}

// Rows t0 .. t0 + TCK - 1 of a K or V head (row stride kr) into dst, rows at
// or past n zeros: asynchronous 16-byte copies (VEC), else element by element.
template <bool VEC> __device__ __forceinline__ void tc_tile(T (*dst)[TCP], const T *src, long long kr, long long t0, long long n) {
  if (VEC) {
    for (int e = threadIdx.x; e < TCK * D / 8; e += 32 * TCW) {
      const int r = e / (D / 8), c = 8 * (e % (D / 8));
      const bool in = t0 + r < n;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tc_smem(&dst[r][c])), "l"(in ? src + (t0 + r) * kr + c : src),
                   "r"(in ? 16 : 0)
                   : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  } else {
    for (int e = threadIdx.x; e < TCK * D; e += 32 * TCW) {
      const int r = e / D, c = e % D;
      dst[r][c] = t0 + r < n ? src[(t0 + r) * kr + c] : (T)0;
    }
  }
}

template <int N> __device__ __forceinline__ void tc_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <bool VEC>
__device__ __forceinline__ void attn_tc(const T *q, const T *k, const T *v, const TL *len, const T *mask, T *y, int *err, const Shape &s,
                                        T (*ks)[TCK][TCP], T (*vs)[TCK][TCP]) {
  const long long Sq = s.dims[3], Skv = s.dims[4];
  const long long h = blockIdx.y, b = blockIdx.z, i0 = (long long)blockIdx.x * TCQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
  const long long L = seq_len(len, b, Skv, err);
  const T *qb = q + QS(b, h, 0), *kb = k + KS(b, h / G), *vb = v + KS(b, h / G);
  const long long w0 = TC_KSPLIT ? i0 : i0 + warp * 16, r0 = w0 + g, r1 = r0 + 8;  // the warp's first row, this lane's two
  const int kw = TC_KSPLIT ? warp * TKW : 0;                                          // the warp's first key of a tile
  const bool active = w0 < Sq;
  // q's A fragments: rows r0 and r1, dims 16 kk + 2 tg + {0, 1} and + 8
  unsigned qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const T *p0 = qb + r0 * QR + kk * 16 + 2 * tg, *p1 = qb + r1 * QR + kk * 16 + 2 * tg;
    qa[kk][0] = r0 < Sq ? tc_pair<VEC>(p0) : 0u;
    qa[kk][1] = r1 < Sq ? tc_pair<VEC>(p1) : 0u;
    qa[kk][2] = r0 < Sq ? tc_pair<VEC>(p0 + 8) : 0u;
    qa[kk][3] = r1 < Sq ? tc_pair<VEC>(p1 + 8) : 0u;
  }
  // each row's last key attended (-1: none, or a row past Sq) and its mask row
  long long lim[2];
  const T *mrow[2];
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    const long long i = rr ? r1 : r0, c = CAUSAL ? i + L - Sq : L - 1;
    lim[rr] = i >= Sq ? -1 : c < L - 1 ? c : L - 1;
    mrow[rr] = mask_row(mask, s, b, h, i < Sq ? i : 0);
  }
  const long long mj = s.st[0][3];
  float o[D / 8][4], m[2] = {-RILL_INF, -RILL_INF}, l[2] = {0, 0};
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0;
  long long kend = L;  // the keys any row of the block attends: [0, kend); later rows of K and V are not copied
  if (CAUSAL) {
    long long last = (i0 + TCQ < Sq ? i0 + TCQ : Sq) - 1;
    if (last + L - Sq + 1 < kend) kend = last + L - Sq + 1;
  }
  const float sl2 = (float)SCALE * TC_LOG2E;
  // ldmatrix's row addresses: lane l reads row l % 8 of matrix l / 8
  const int lr = lane & 7, lm = lane >> 3;
  if (kend > 0) tc_tile<VEC>(ks[0], kb, KR, 0, kend), tc_tile<VEC>(vs[0], vb, KR, 0, kend);
  int it = 0;
  for (long long t0 = 0; t0 < kend; t0 += TCK, it++) {
    const int cur = TCS == 2 ? it & 1 : 0;
    const long long nv = kend - t0;  // keys of the tile that matter: sub-tiles of 16 past them are skipped
    const bool pre = TCS == 2 && nv > TCK;  // the next tile's copies overlap this one's work
    if (pre) tc_tile<VEC>(ks[cur ^ 1], kb, KR, t0 + TCK, kend), tc_tile<VEC>(vs[cur ^ 1], vb, KR, t0 + TCK, kend);
    if (VEC) {
      if (pre) tc_wait<3>();  // K is in; V and the next tile may still be in flight
      else tc_wait<1>();
    }
    __syncthreads();
    float sc[TKW / 8][4];
    if (active) {
      // scores: 8 tiles of 8 keys, this lane's keys 8 nt + 2 tg + {0, 1}; ldmatrix gives two tiles' B fragments
#pragma unroll
      for (int nt = 0; nt < TKW / 8; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0;
#pragma unroll
      for (int nt = 0; nt < TKW / 8; nt += 2)
        if (kw + nt * 8 < nv)
#pragma unroll
          for (int kk = 0; kk < D / 16; kk++) {
            unsigned bf[4];
            tc_ldsm<false>(bf, &ks[cur][kw + (nt + (lm >> 1)) * 8 + lr][kk * 16 + (lm & 1) * 8]);
            tc_mma(sc[nt], qa[kk], bf[0], bf[1]);
            tc_mma(sc[nt + 1], qa[kk], bf[2], bf[3]);
          }
      // a tile past a row's last key (the length, the causal edge, a partial tile) or with a mask is masked
      const bool edge = t0 + TCK > L || (CAUSAL && t0 + TCK - 1 > w0 + L - Sq);
      float tmax[2] = {-RILL_INF, -RILL_INF};
      if (HAS_MASK || edge) {
        int lt[2];
        const T *mt[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
          const long long d = lim[rr] - t0;
          lt[rr] = d < -1 ? -1 : d > TCK ? TCK : (int)d;
          mt[rr] = mrow[rr] + t0 * mj;
        }
#pragma unroll
        for (int nt = 0; nt < TKW / 8; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            const int jt = kw + nt * 8 + 2 * tg + (e & 1), rr = e >> 1;
            float x = -RILL_INF;
            if (jt <= lt[rr]) x = HAS_MASK ? sc[nt][e] * sl2 + (float)LD(mt[rr][jt * mj]) * TC_LOG2E : sc[nt][e] * sl2;
            sc[nt][e] = x;
            tmax[rr] = fmaxf(tmax[rr], x);
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < TKW / 8; nt++)
#pragma unroll
          for (int e = 0; e < 4; e++) sc[nt][e] *= sl2, tmax[e >> 1] = fmaxf(tmax[e >> 1], sc[nt][e]);
      }
      float ms[2];  // the running maximum, 0 while nothing is attended (so e^(-inf - 0) = 0, never NaN)
#pragma unroll
      for (int rr = 0; rr < 2; rr++) {
        tmax[rr] = fmaxf(tmax[rr], __shfl_xor_sync(0xffffffffu, tmax[rr], 1));
        tmax[rr] = fmaxf(tmax[rr], __shfl_xor_sync(0xffffffffu, tmax[rr], 2));
        const float mn = fmaxf(m[rr], tmax[rr]);
        ms[rr] = mn == -RILL_INF ? 0.f : mn;
        const float corr = tc_ex2(m[rr] - ms[rr]);
        m[rr] = mn;
        l[rr] *= corr;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) o[dt][2 * rr] *= corr, o[dt][2 * rr + 1] *= corr;
      }
#pragma unroll
      for (int nt = 0; nt < TKW / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          sc[nt][e] = tc_ex2(sc[nt][e] - ms[e >> 1]);
          l[e >> 1] += sc[nt][e];
        }
    }
    if (VEC) {
      if (pre) tc_wait<2>();
      else tc_wait<0>();
    }
    __syncthreads();  // V is in
    if (active) {
      // P's A fragments for the keys 16 kk2 .. 16 kk2 + 15; V's B fragments (keys x dims) of two dim tiles by ldmatrix.trans
#pragma unroll
      for (int kk2 = 0; kk2 < TKW / 16; kk2++)
        if (kw + kk2 * 16 < nv) {
          unsigned pa[4] = {tc_pack(sc[2 * kk2][0], sc[2 * kk2][1]), tc_pack(sc[2 * kk2][2], sc[2 * kk2][3]),
                            tc_pack(sc[2 * kk2 + 1][0], sc[2 * kk2 + 1][1]), tc_pack(sc[2 * kk2 + 1][2], sc[2 * kk2 + 1][3])};
#pragma unroll
          for (int dt = 0; dt < D / 8; dt += 2) {
            unsigned bf[4];
            tc_ldsm<true>(bf, &vs[cur][kw + kk2 * 16 + (lm & 1) * 8 + lr][(dt + (lm >> 1)) * 8]);
            tc_mma(o[dt], pa, bf[0], bf[1]);
            tc_mma(o[dt + 1], pa, bf[2], bf[3]);
          }
        }
    }
    __syncthreads();  // this tile's readers are done
    if (TCS == 1 && nv > TCK) tc_tile<VEC>(ks[0], kb, KR, t0 + TCK, kend), tc_tile<VEC>(vs[0], vb, KR, t0 + TCK, kend);
  }
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
  }
#if TC_KSPLIT
  // the warps' partials of the same 16 rows merged through shared memory (the tiles' space; the walk's last
  // readers are past its final __syncthreads): po [TCW][16][D] unnormalised outputs, pm and pl [TCW][16]
  // maxima (base 2) and sums
  static_assert(TCW * 16 * (D + 2) * 4 <= 2 * TCS * TCK * TCP * (int)sizeof(T), "attn_tc_k: the partials do not fit the tiles' space");
  float *po = (float *)&ks[0][0][0], *pm = po + TCW * 16 * D, *pl = pm + TCW * 16;
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
    for (int e = 0; e < 4; e++) po[(warp * 16 + g + 8 * (e >> 1)) * D + dt * 8 + 2 * tg + (e & 1)] = o[dt][e];
  if (tg == 0)
#pragma unroll
    for (int rr = 0; rr < 2; rr++) pm[warp * 16 + g + 8 * rr] = m[rr], pl[warp * 16 + g + 8 * rr] = l[rr];
  __syncthreads();
  for (int x = threadIdx.x; x < 16 * D; x += 32 * TCW) {
    const int row = x / D, col = x % D;
    const long long i = i0 + row;
    if (i >= Sq) continue;
    float mt = -RILL_INF, lt = 0.f, ot = 0.f;
#pragma unroll
    for (int w = 0; w < TCW; w++) mt = fmaxf(mt, pm[w * 16 + row]);
#pragma unroll
    for (int w = 0; w < TCW; w++) {
      const float mw = pm[w * 16 + row], f = mw == -RILL_INF ? 0.f : tc_ex2(mw - mt);
      lt += pl[w * 16 + row] * f;
      ot += po[(w * 16 + row) * D + col] * f;
    }
    ST(y[YS(b, h, i) + col], lt > 0 ? ot / lt : 0.f);
  }
  return;
#endif
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      const long long i = rr ? r1 : r0;
      const float inv = l[rr] > 0 ? 1.f / l[rr] : 0.f;
      if (i >= Sq) continue;
      T *yp = &y[YS(b, h, i) + dt * 8 + 2 * tg];
      if (VEC)
        *(unsigned *)yp = tc_pack(o[dt][2 * rr] * inv, o[dt][2 * rr + 1] * inv);
      else
        ST(yp[0], o[dt][2 * rr] * inv), ST(yp[1], o[dt][2 * rr + 1] * inv);
    }
}

// VEC where every row of q, k, v and y starts 16 bytes aligned: the copies
// of 16 bytes and the loads and stores of pairs. (The tiles are declared
// here: each instance of attn_tc would have its own.)
extern "C" __global__ void __launch_bounds__(32 * TCW, TC_MINB) attn_tc_k(const T *q, const T *k, const T *v, const TL *len, const T *mask, T *y, int *err, Shape s) {
  __shared__ __align__(16) T kv[2][TCS][TCK][TCP];  // K's tiles, then V's (one array: TC_KSPLIT's partials use both)
  T(*ks)[TCK][TCP] = kv[0], (*vs)[TCK][TCP] = kv[1];
  const unsigned long long a = (unsigned long long)q | (unsigned long long)k | (unsigned long long)v | (unsigned long long)y;
  if ((a & 15) == 0 && QR % 8 == 0 && KR % 8 == 0 && s.st[1][0] % 8 == 0 && s.st[1][1] % 8 == 0 && s.st[2][0] % 8 == 0 && s.st[2][1] % 8 == 0 &&
      s.st[3][0] % 8 == 0 && s.st[3][1] % 8 == 0 && s.st[3][2] % 8 == 0)
    attn_tc<true>(q, k, v, len, mask, y, err, s, ks, vs);
  else
    attn_tc<false>(q, k, v, len, mask, y, err, s, ks, vs);
}
#endif
