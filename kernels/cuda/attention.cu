// attention.cu: grouped-query attention, q [B,Hq,Sq,D], k and v
// [B,Hkv,Skv,D] (or all [B,S,H,D]: element strides over (batch, head,
// position) in s.st[1] for q and y, s.st[2] for k and v; a head's D
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
//   attn_decode_k (Sq = 1), split-K "flash decoding": block (split, group,
//     b) takes GB query heads of one kv head over keys [split * chunk,
//     (split + 1) * chunk), chunk = ceil(L / nsplit) taken from the run's
//     length L (so every split has keys whatever L is, and a short context
//     is not walked by a few warps one key after another), its WARPS warps
//     every WARPS-th key each, with an online softmax per warp; each warp
//     writes its partial (max, sum, unnormalised output: D + 2 values of C)
//     to part.
//   attn_combine_k: a block per (b, h) merges the nsplit * WARPS partials
//     (at most CMAX): the block's maximum and weighted sum by block
//     reductions, then each warp sums its share of the partials for the
//     lanes' output dims, and the warps' sums are added in shared memory.
//   attn_flash_k (Sq > 1): block (query tile, h, b) holds BQ queries (RW a
//     warp) and walks the keys in tiles of BK kept in shared memory; lane t
//     scores key t of the tile against a query, the warp updates its online
//     softmax and each lane accumulates the output dims lane + 32 c.
// Defines: T, C, LD, ST, D, G, GB, BK, SCALE, CAUSAL, HAS_LEN, LEN_PER_B,
// TL, HAS_MASK, MASK_WINDOWS, KERR_LENGTH.
#define WARPS 4
#define QS(b, h, i) ((b) * s.st[1][0] + (h) * s.st[1][1] + (i) * s.st[1][2])
#define KS(b, h) ((b) * s.st[2][0] + (h) * s.st[2][1])
#define KR s.st[2][2]
#define QR s.st[1][2]
#define CMAX 1024  // the combine's partials at most: nsplit * WARPS (the host caps nsplit)
#define DL ((D + 31) / 32)
#define BQ (WARPS * RW)
#define RW 4

// The mask's addend for (b, h, i, j): 0 without one.
__device__ __forceinline__ C mask_at(const T *mask, const Shape &s, long long b, long long h, long long i, long long j) {
#if HAS_MASK
#if MASK_WINDOWS
  b %= MASK_WINDOWS;
#endif
  return LD(mask[b * s.st[0][0] + h * s.st[0][1] + i * s.st[0][2] + j * s.st[0][3]]);
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

extern "C" __global__ void __launch_bounds__(32 * WARPS) attn_decode_k(const T *q, const T *k, const T *v, const TL *len, const T *mask, C *part, int *err, Shape s) {
  const long long Hq = s.dims[1], Skv = s.dims[4], nsplit = s.dims[5];
  const long long split = blockIdx.x, h0 = (long long)blockIdx.y * GB, b = blockIdx.z, kh = h0 / G;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long L = seq_len(len, b, Skv, err), chunk = (L + nsplit - 1) / nsplit, j0 = split * chunk,
                  j1 = j0 + chunk < L ? j0 + chunk : L;
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
  for (long long j = j0 + warp; j < j1; j += WARPS) {  // the same j for every lane of a warp
    C kr[DL], vr[DL];
#pragma unroll
    for (int c = 0; c < DL; c++) {
      int d = lane + 32 * c;
      kr[c] = d < D ? LD(kb[j * KR + d]) : (C)0;
      vr[c] = d < D ? LD(vb[j * KR + d]) : (C)0;
    }
#pragma unroll
    for (int g = 0; g < GB; g++) {
      C dot = 0;
#pragma unroll
      for (int c = 0; c < DL; c++) dot += qr[g][c] * kr[c];
      dot = warp_all<SumOp>(dot) * (C)SCALE + mask_at(mask, s, b, h0 + g, 0, j);
      if (HAS_MASK && m[g] == -RILL_INF && dot == -RILL_INF) continue;  // masked, nothing attended yet: the same for the whole warp
      C mn = m[g] > dot ? m[g] : dot, corr = exp(m[g] - mn), p = exp(dot - mn);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int c = 0; c < DL; c++) acc[g][c] = acc[g][c] * corr + p * vr[c];
      m[g] = mn;
    }
  }
#pragma unroll
  for (int g = 0; g < GB; g++) {
    C *rec = part + (((b * Hq + h0 + g) * nsplit + split) * WARPS + warp) * (D + 2);
    if (lane == 0) {
      rec[0] = m[g];
      rec[1] = l[g];
    }
#pragma unroll
    for (int c = 0; c < DL; c++)
      if (lane + 32 * c < D) rec[2 + lane + 32 * c] = acc[g][c];
  }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS) attn_combine_k(const C *part, T *y, Shape s) {
  __shared__ C sh[32], w[CMAX], o[WARPS][D];
  const long long row = blockIdx.x, np = s.dims[5] * WARPS;  // row: b * Hq + h
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const C *rec = part + row * np * (D + 2);
  C mx = -RILL_INF;
  for (long long p = threadIdx.x; p < np; p += blockDim.x) mx = rec[p * (D + 2)] > mx ? rec[p * (D + 2)] : mx;
  const C M = block_max(mx, sh);
  C ls = 0;
  for (long long p = threadIdx.x; p < np; p += blockDim.x) {
    C mp = rec[p * (D + 2)], wp = mp == -RILL_INF ? (C)0 : exp(mp - M);
    w[p] = wp;
    ls += wp * rec[p * (D + 2) + 1];
  }
  const C Ls = block_sum(ls, sh);  // its barriers also make w visible to every warp
  for (int d = lane; d < D; d += 32) {
    C acc = 0;
    for (long long p = warp; p < np; p += WARPS) acc += w[p] * rec[p * (D + 2) + 2 + d];
    o[warp][d] = acc;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    C acc = 0;
#pragma unroll
    for (int k = 0; k < WARPS; k++) acc += o[k][d];
    ST(y[QS(row / s.dims[1], row % s.dims[1], 0) + d], Ls > 0 ? acc / Ls : (C)0);
  }
}

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
      if (lane + 32 * c < D) ST(y[QS(b, h, i) + lane + 32 * c], l[r] > 0 ? acc[r][c] / l[r] : (C)0);
  }
}

#if TC
// attn_tc_k (Sq > 1, f16 and bf16, D a multiple of 16 up to 128, compute
// capability 8.0 or later): attn_flash_k's walk on tensor cores, after
// FlashAttention-2. Block (query tile, h, b) holds TCQ = 64 queries, 16 a
// warp; keys in tiles of TCK = 64 held in shared memory (rows padded 8
// values, so a warp's fragment loads hit distinct banks). Per tile a warp
// computes its 16 x 64 scores with mma.sync m16n8k16 (q's fragments kept in
// registers for the whole walk), masks and scales them in registers, updates
// its online softmax (each row's values are held by the 4 lanes of a quad),
// and adds P V, P rounded to T as the A operand, into f32 accumulators held
// in registers (rows lane / 4 and lane / 4 + 8, dims 2 (lane % 4) + {0, 1}
// of each 8). Defines TC_BF16 (bf16, else f16).
#define TCQ 64
#define TCK 64
#define TCP (D + 8)
#if TC_BF16
#define TC_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#define TC_PACK(lo, hi) (((unsigned)st_bf16(hi) << 16) | (unsigned)st_bf16(lo))
#else
#define TC_MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#define TC_PACK(lo, hi) (((unsigned)st_f16(hi) << 16) | (unsigned)st_f16(lo))
#endif

__device__ __forceinline__ void tc_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
  asm volatile(TC_MMA "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two adjacent 16-bit values of a row as one register (the lower index low).
__device__ __forceinline__ unsigned tc_pair(const T *p) { return (unsigned)p[0] | ((unsigned)p[1] << 16); }

extern "C" __global__ void __launch_bounds__(128) attn_tc_k(const T *q, const T *k, const T *v, const TL *len, const T *mask, T *y, int *err, Shape s) {
  __shared__ __align__(16) T ks[TCK][TCP], vs[TCK][TCP];
  const long long Sq = s.dims[3], Skv = s.dims[4];
  const long long h = blockIdx.y, b = blockIdx.z, i0 = (long long)blockIdx.x * TCQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
  const long long L = seq_len(len, b, Skv, err);
  const T *qb = q + QS(b, h, 0), *kb = k + KS(b, h / G), *vb = v + KS(b, h / G);
  const long long r0 = i0 + warp * 16 + g, r1 = r0 + 8;  // this lane's two query rows
  // q's A fragments: rows r0 and r1, dims 16 kk + 2 tg + {0, 1} and + 8
  unsigned qa[D / 16][4];
  const T zero2[2] = {0, 0};
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) {
    const T *p0 = r0 < Sq ? qb + r0 * QR + kk * 16 + 2 * tg : zero2, *p1 = r1 < Sq ? qb + r1 * QR + kk * 16 + 2 * tg : zero2;
    qa[kk][0] = tc_pair(p0);
    qa[kk][1] = tc_pair(p1);
    qa[kk][2] = tc_pair(r0 < Sq ? p0 + 8 : zero2);
    qa[kk][3] = tc_pair(r1 < Sq ? p1 + 8 : zero2);
  }
  float o[D / 8][4], m[2] = {-RILL_INF, -RILL_INF}, l[2] = {0, 0};
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0;
  long long kend = L;
  if (CAUSAL) {
    long long last = (i0 + TCQ < Sq ? i0 + TCQ : Sq) - 1;
    if (last + L - Sq + 1 < kend) kend = last + L - Sq + 1;
  }
  for (long long t0 = 0; t0 < kend; t0 += TCK) {
    __syncthreads();  // the previous tile's readers are done
    for (int e = threadIdx.x; e < TCK * D / 2; e += blockDim.x) {
      int r = e / (D / 2), c = 2 * (e % (D / 2));
      long long j = t0 + r;
      bool in = j < Skv;
      ks[r][c] = in ? kb[j * KR + c] : (T)0;
      ks[r][c + 1] = in ? kb[j * KR + c + 1] : (T)0;
      vs[r][c] = in ? vb[j * KR + c] : (T)0;
      vs[r][c + 1] = in ? vb[j * KR + c + 1] : (T)0;
    }
    __syncthreads();
    // scores: 8 tiles of 8 keys, this lane's keys 8 nt + 2 tg + {0, 1}
    float sc[TCK / 8][4];
#pragma unroll
    for (int nt = 0; nt < TCK / 8; nt++) {
      sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        const T *kr = &ks[nt * 8 + g][kk * 16 + 2 * tg];
        tc_mma(sc[nt], qa[kk], tc_pair(kr), tc_pair(kr + 8));
      }
    }
    float tmax[2] = {-RILL_INF, -RILL_INF};
#pragma unroll
    for (int nt = 0; nt < TCK / 8; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const long long i = e < 2 ? r0 : r1, j = t0 + nt * 8 + 2 * tg + (e & 1), lim = CAUSAL ? i + L - Sq : L - 1;
        float x = -RILL_INF;
        if (i < Sq && j < L && j <= lim) x = sc[nt][e] * (float)SCALE + (float)mask_at(mask, s, b, h, i, j);
        sc[nt][e] = x;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], x);
      }
    float corr[2];
#pragma unroll
    for (int rr = 0; rr < 2; rr++) {
      tmax[rr] = fmaxf(tmax[rr], __shfl_xor_sync(0xffffffffu, tmax[rr], 1));
      tmax[rr] = fmaxf(tmax[rr], __shfl_xor_sync(0xffffffffu, tmax[rr], 2));
      float mn = fmaxf(m[rr], tmax[rr]);
      corr[rr] = mn == -RILL_INF ? 1.f : expf(m[rr] - mn);  // nothing attended yet: nothing to correct
      m[rr] = mn;
      l[rr] *= corr[rr];
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) o[dt][0] *= corr[0], o[dt][1] *= corr[0], o[dt][2] *= corr[1], o[dt][3] *= corr[1];
    // P = e^(s - m), its A fragments for the keys 16 kk2 .. 16 kk2 + 15
#pragma unroll
    for (int kk2 = 0; kk2 < TCK / 16; kk2++) {
      float p[2][4];
#pragma unroll
      for (int h2 = 0; h2 < 2; h2++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          float mr = m[e >> 1];
          p[h2][e] = mr == -RILL_INF ? 0.f : expf(sc[2 * kk2 + h2][e] - mr);
          l[e >> 1] += p[h2][e];
        }
      unsigned pa[4] = {TC_PACK(p[0][0], p[0][1]), TC_PACK(p[0][2], p[0][3]), TC_PACK(p[1][0], p[1][1]), TC_PACK(p[1][2], p[1][3])};
#pragma unroll
      for (int dt = 0; dt < D / 8; dt++) {
        // B (keys x dims, column-major): keys 16 kk2 + 2 tg + {0, 1} (and + 8), dim 8 dt + g
        const int kr = kk2 * 16 + 2 * tg, dc = dt * 8 + g;
        unsigned b0 = (unsigned)vs[kr][dc] | ((unsigned)vs[kr + 1][dc] << 16), b1 = (unsigned)vs[kr + 8][dc] | ((unsigned)vs[kr + 9][dc] << 16);
        tc_mma(o[dt], pa, b0, b1);
      }
    }
  }
#pragma unroll
  for (int rr = 0; rr < 2; rr++) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
  }
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const long long i = e < 2 ? r0 : r1;
      const float lr = l[e >> 1];
      if (i < Sq) ST(y[QS(b, h, i) + dt * 8 + 2 * tg + (e & 1)], lr > 0 ? o[dt][e] / lr : 0.f);
    }
}
#endif
