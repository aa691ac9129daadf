// sample.cu: one token per row of logits (s.dims = {B, V}), a block of NT
// threads per row, each thread owning the chunk [t * chunk, (t + 1) *
// chunk) of the row. The steps, sums and their order are those of the CPU
// reference (ops/cpu_llm.c) and docs/internals.md ("Decoder ops"), with the
// arithmetic of llm_common.h, so both give the same token: greedy (the first
// largest), else top-k (the K largest, ties at the boundary by index), the
// weights e^((x - m) / TEMP) into w (the row's workspace), top-p (the
// largest key whose kept mass reaches TOPP of the total), then the draw.
// Defines: T, LD, TC (the counter's type), HAS_COUNTER, GREEDY, TOPK (0:
// every token), TOPP_ON, TOPP and TEMP (f32 bits), SEED.
#define NT 256
#define XF(i) ((float)LD(xr[i]))

// The sum of every thread's v, in thread order (sh: NT floats).
__device__ float ordered_sum(float v, float *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float z = 0;
    for (int k = 0; k < NT; k++) z = rl_add(z, sh[k]);
    sh[NT] = z;
  }
  __syncthreads();
  float z = sh[NT];
  __syncthreads();
  return z;
}

__device__ long long count_sum(long long v, long long *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int o = NT / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  long long r = sh[0];
  __syncthreads();
  return r;
}

extern "C" __global__ void __launch_bounds__(NT) sample_k(const T *x, const TC *counter, float *ws, long long *y, Shape s) {
  __shared__ unsigned long long pk[NT];
  __shared__ long long cnt[NT];
  __shared__ float sh[NT + 1];
  const long long V = s.dims[1], b = blockIdx.x, chunk = (V + NT - 1) / NT;
  const int t = threadIdx.x;
  const long long lo = t * chunk < V ? t * chunk : V, hi = lo + chunk < V ? lo + chunk : V;
  const T *xr = x + b * V;
  float *w = ws + b * V;
  // greedy: the largest key, then the lowest index (packed: key, ~index)
  unsigned long long best = 0;
  for (long long i = lo; i < hi; i++) {
    unsigned long long p = ((unsigned long long)rl_key(XF(i)) << 32) | (0xffffffffu - (unsigned)i);
    best = p > best ? p : best;
  }
  pk[t] = best;
  __syncthreads();
  for (int o = NT / 2; o > 0; o >>= 1) {
    if (t < o && pk[t + o] > pk[t]) pk[t] = pk[t + o];
    __syncthreads();
  }
  const long long arg = 0xffffffffu - (unsigned)pk[0];
  const float m = XF(arg);
  if (GREEDY || !(m > -RILL_INF && m < RILL_INF)) {
    if (t == 0) y[b] = arg;
    return;
  }
  unsigned tau = 0;
  long long cut = V;
#if TOPK
  if (TOPK < V) {
    for (int bit = 31; bit >= 0; bit--) {
      unsigned cand = tau | (1u << bit);
      long long n = 0;
      for (long long i = lo; i < hi; i++) n += rl_key(XF(i)) >= cand;
      if (count_sum(n, cnt) >= TOPK) tau = cand;
    }
    long long above = 0, ties = 0;
    for (long long i = lo; i < hi; i++) {
      unsigned k = rl_key(XF(i));
      above += k > tau;
      ties += k == tau;
    }
    long long need = TOPK - count_sum(above, cnt);
    cnt[t] = ties;
    __syncthreads();
    if (t == 0) {  // the need-th tie in index order: its chunk, then its place
      int c = 0;
      while (need > cnt[c]) need -= cnt[c++];
      long long i = c * chunk;
      for (;; i++)
        if (rl_key(XF(i)) == tau && --need == 0) break;
      pk[0] = (unsigned long long)(i + 1);
    }
    __syncthreads();
    cut = (long long)pk[0];
  }
#endif
  const float temp = __int_as_float(TEMP);
  float part = 0;
  for (long long i = lo; i < hi; i++) {
    float xi = XF(i);
    unsigned k = rl_key(xi);
    w[i] = (k > tau || (k == tau && i < cut)) && xi == xi ? rl_expf(rl_div(rl_sub(xi, m), temp)) : 0.0f;
    part = rl_add(part, w[i]);
  }
#if TOPP_ON
  const float want = rl_mul(__int_as_float(TOPP), ordered_sum(part, sh));
  unsigned tp = 0;
  for (int bit = 31; bit >= 0; bit--) {
    unsigned cand = tp | (1u << bit);
    float mass = 0;
    for (long long i = lo; i < hi; i++)
      if (rl_key(XF(i)) >= cand) mass = rl_add(mass, w[i]);
    if (ordered_sum(mass, sh) >= want) tp = cand;
  }
  part = 0;
  for (long long i = lo; i < hi; i++) {
    if (rl_key(XF(i)) < tp) w[i] = 0;
    part = rl_add(part, w[i]);
  }
#endif
  sh[t] = part;
  __syncthreads();
  if (t == 0) {
    float z = 0;
    for (int c = 0; c < NT; c++) z = rl_add(z, sh[c]);
#if HAS_COUNTER
    unsigned long long ctr = (unsigned long long)(long long)counter[0];
#else
    unsigned long long ctr = 0;
#endif
    const float target = rl_mul(rl_uniform(SEED, ctr, (unsigned)b), z);
    // the chunk where the running sum passes the target (else the last with weight), then the token in it
    float acc = 0, before = 0;
    int pick = -1, last = -1;
    for (int c = 0; c < NT && pick < 0; c++) {
      if (sh[c] > 0) last = c, before = acc;
      float next = rl_add(acc, sh[c]);
      if (sh[c] > 0 && next > target) pick = c;
      else acc = next;
    }
    if (pick < 0) pick = last, acc = before;
    long long tok = -1, end = (pick + 1) * chunk < V ? (pick + 1) * chunk : V;
    for (long long i = pick * chunk; i < end; i++) {
      if (!(w[i] > 0)) continue;
      tok = i;
      acc = rl_add(acc, w[i]);
      if (acc > target) break;
    }
    y[b] = tok;
  }
}
