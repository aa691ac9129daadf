// topk.cu: `topk`, the order of the CPU reference's stable sort (larger
// first, or smaller when not LARGEST; NaN the largest; equal values by
// index), rows of N along the axis at stride INNER. Two ways:
//   topk_k        a thread per element: its rank, the count of the row's
//                 elements before it; an element of rank below K writes
//                 itself there. O(N) per thread, stopping once the rank
//                 reaches K: for short rows
//   a radix select, for long rows: each element's place in the order as
//   one key of two words (hi: its value's bits made to order as the
//   values do; lo: N-1 minus its index), unique, so the K-th largest key
//   is one element's
//     topk_hist_k   per pass, the next byte of the keys that match the
//                   bytes chosen so far, counted (256 bins a row)
//     topk_pick_k   the byte where the count from the top reaches K
//     topk_select_k the K elements whose key is at least the K-th's, listed
//     topk_rank_k   each listed element's rank among the K: O(K) each
//   Workspace per row: the key so far and the counts (tk_row_t), 256 bins,
//   K list places.
// Defines: T, C, LD, N, INNER, K, LARGEST, I; KEY_BITS (T's), IDX_BITS
// (N-1's), TK_FLOAT, TK_SIGNED, ROWS.
__device__ __forceinline__ int tk_cmp(C x, C y) {
  bool nx = x != x, ny = y != y;
  if (nx || ny) return nx && ny ? 0 : nx ? 1 : -1;
  return x > y ? 1 : x < y ? -1 : 0;
}

extern "C" __global__ void topk_k(const T *x, T *y, long long *yi, long long total) {
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)total; t += (I)gridDim.x * blockDim.x) {
    long long in = (long long)t % INNER, i = (long long)t / INNER % N, o = (long long)t / INNER / N;
    const T *row = x + o * N * INNER + in;
    C v = LD(row[i * INNER]);
    long long r = 0;
    for (long long j = 0; j < N && r < K; j++) {
      int c = tk_cmp(LD(row[j * INNER]), v);
      if (!LARGEST) c = -c;
      r += c > 0 || (c == 0 && j < i);
    }
    if (r < K) {
      long long oi = (o * K + r) * INNER + in;
      y[oi] = row[i * INNER];
      yi[oi] = i;
    }
  }
}

typedef unsigned long long tk_u64;
#define TK_KMASK (~0ULL >> (64 - KEY_BITS))
#define TK_HD ((KEY_BITS + 7) / 8) /* bytes of hi */
#define TK_LD ((IDX_BITS + 7) / 8) /* bytes of lo */

typedef struct {
  tk_u64 hi, lo;   /* the key's bytes chosen so far */
  long long above; /* elements whose key is above those bytes' */
  int listed;      /* topk_select_k's count */
  int pad;
} tk_row_t;

__device__ __forceinline__ tk_u64 tk_raw(const T *p) {
  if (sizeof(T) == 1) return *(const unsigned char *)p;
  if (sizeof(T) == 2) return *(const unsigned short *)p;
  if (sizeof(T) == 4) return *(const unsigned int *)p;
  return *(const tk_u64 *)p;
}

/* hi: larger values larger (NaN the largest, -0 as +0); inverted when not LARGEST */
__device__ __forceinline__ tk_u64 tk_hi(const T *p) {
  tk_u64 raw = tk_raw(p);
  const tk_u64 sign = 1ULL << (KEY_BITS - 1);
#if TK_FLOAT
  C v = LD(*p);
  if (v != v) raw = TK_KMASK;
  else {
    if (v == 0) raw = 0;
    raw = (raw & sign) ? ~raw & TK_KMASK : raw | sign;
  }
#elif TK_SIGNED
  raw = (raw ^ sign) & TK_KMASK;
#endif
  return LARGEST ? raw : ~raw & TK_KMASK;
}

__device__ __forceinline__ const T *tk_row(const T *x, long long r) { return x + (r / INNER) * N * INNER + r % INNER; }

/* byte p of the key, most significant first */
__device__ __forceinline__ unsigned tk_byte(tk_u64 hi, tk_u64 lo, int p) {
  return p < TK_HD ? (unsigned)(hi >> (8 * (TK_HD - 1 - p))) & 255u : (unsigned)(lo >> (8 * (TK_LD - 1 - (p - TK_HD)))) & 255u;
}

/* the key's first p bytes are those chosen (p >= 1: a shift under 64) */
__device__ __forceinline__ bool tk_match(tk_u64 hi, tk_u64 lo, const tk_row_t *s, int p) {
  if (p == 0) return true;
  if (p <= TK_HD) return (hi >> (8 * (TK_HD - p))) == (s->hi >> (8 * (TK_HD - p)));
  return hi == s->hi && (lo >> (8 * (TK_LD - (p - TK_HD)))) == (s->lo >> (8 * (TK_LD - (p - TK_HD))));
}

extern "C" __global__ void topk_hist_k(const T *x, char *ws, int p) {
  __shared__ int h[256];
  tk_row_t *rows = (tk_row_t *)ws;
  int *hist = (int *)(rows + ROWS);
  for (long long r = blockIdx.y; r < ROWS; r += gridDim.y) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) h[b] = 0;
    __syncthreads();
    const tk_row_t s = rows[r];
    const T *row = tk_row(x, r);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long long)gridDim.x * blockDim.x) {
      tk_u64 hi = tk_hi(row + i * INNER), lo = (tk_u64)(N - 1 - i);
      if (tk_match(hi, lo, &s, p)) atomicAdd(&h[tk_byte(hi, lo, p)], 1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
      if (h[b]) atomicAdd(&hist[r * 256 + b], h[b]);
    __syncthreads();
  }
}

/* a block a row: the byte whose bin holds the K-th key; the bins zeroed for the next pass */
extern "C" __global__ void topk_pick_k(char *ws, int p) {
  tk_row_t *rows = (tk_row_t *)ws;
  int *hist = (int *)(rows + ROWS);
  for (long long r = blockIdx.x; r < ROWS; r += gridDim.x) {
    int *h = hist + r * 256;
    if (threadIdx.x == 0) {
      tk_row_t *s = &rows[r];
      long long above = s->above;
      int b = 255;
      for (; b > 0 && above + h[b] < K; b--) above += h[b];
      s->above = above;
      if (p < TK_HD) s->hi |= (tk_u64)b << (8 * (TK_HD - 1 - p));
      else s->lo |= (tk_u64)b << (8 * (TK_LD - 1 - (p - TK_HD)));
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) h[b] = 0;
    __syncthreads();
  }
}

extern "C" __global__ void topk_select_k(const T *x, char *ws) {
  tk_row_t *rows = (tk_row_t *)ws;
  int *list = (int *)((int *)(rows + ROWS) + ROWS * 256);
  for (long long r = blockIdx.y; r < ROWS; r += gridDim.y) {
    const tk_u64 th = rows[r].hi, tl = rows[r].lo;
    const T *row = tk_row(x, r);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (long long)gridDim.x * blockDim.x) {
      tk_u64 hi = tk_hi(row + i * INNER), lo = (tk_u64)(N - 1 - i);
      if (hi > th || (hi == th && lo >= tl)) {
        int k = atomicAdd(&rows[r].listed, 1);
        if (k < K) list[r * K + k] = (int)i;
      }
    }
  }
}

extern "C" __global__ void topk_rank_k(const T *x, T *y, long long *yi, char *ws) {
  __shared__ tk_u64 th[256], tl[256];
  tk_row_t *rows = (tk_row_t *)ws;
  const int *list = (const int *)((int *)(rows + ROWS) + ROWS * 256);
  for (long long r = blockIdx.y; r < ROWS; r += gridDim.y) {
    const T *row = tk_row(x, r);
    const long long o = r / INNER, in = r % INNER;
    for (long long c0 = (long long)blockIdx.x * blockDim.x; c0 < K; c0 += (long long)gridDim.x * blockDim.x) {
      long long c = c0 + threadIdx.x;
      int i = c < K ? list[r * K + c] : 0;
      tk_u64 hi = tk_hi(row + (long long)i * INNER), lo = (tk_u64)(N - 1 - i), rank = 0;
      for (long long t0 = 0; t0 < K; t0 += blockDim.x) {
        __syncthreads();
        if (t0 + threadIdx.x < K) {
          int j = list[r * K + t0 + threadIdx.x];
          th[threadIdx.x] = tk_hi(row + (long long)j * INNER), tl[threadIdx.x] = (tk_u64)(N - 1 - j);
        }
        __syncthreads();
        int m = K - t0 < (long long)blockDim.x ? (int)(K - t0) : (int)blockDim.x;
        for (int t = 0; t < m; t++) rank += th[t] > hi || (th[t] == hi && tl[t] > lo);
      }
      if (c < K) {
        long long oi = (o * K + (long long)rank) * INNER + in;
        y[oi] = row[(long long)i * INNER];
        yi[oi] = i;
      }
    }
  }
}
