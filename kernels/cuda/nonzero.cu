// nonzero.cu: `nonzero`, one block of NZ_THREADS threads walking x in
// chunks of NZ_THREADS elements: each chunk's nonzero flags are counted
// with a ballot per warp and a scan of the warps' counts, so every nonzero
// element learns its place among all before it (row-major order, as the
// CPU reference), and writes its coordinates there while the place is
// below `count`; the columns from the last nonzero one to `count` are 0.
// (One block: the places depend on every earlier element; NonZero is
// rare and small in the models that use it.)
// Defines: T, LD, RANK, DIMS (x's dims, comma separated; 1 for rank 0).
#define NZ_THREADS 1024
extern "C" __global__ void nonzero_k(const T *x, long long *y, long long numel, long long count) {
  __shared__ long long part[NZ_THREADS / 32];
  const long long dims[] = {DIMS};
  int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  long long base = 0;
  for (long long start = 0; start < numel && base < count; start += NZ_THREADS) {
    long long i = start + tid;
    int f = i < numel && LD(x[i]) != 0;
    unsigned ballot = __ballot_sync(0xffffffffu, f);
    int before = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 31) part[warp] = before + f;
    __syncthreads();
    if (warp == 0) { // inclusive scan of the warps' counts
      long long v = lane < NZ_THREADS / 32 ? part[lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        long long u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
      }
      if (lane < NZ_THREADS / 32) part[lane] = v;
    }
    __syncthreads();
    long long pos = base + (warp ? part[warp - 1] : 0) + before;
    if (f && pos < count) {
      long long rem = i;
      for (int d = RANK - 1; d >= 0; d--) {
        y[(long long)d * count + pos] = rem % dims[d];
        rem /= dims[d];
      }
    }
    long long total = part[NZ_THREADS / 32 - 1];
    __syncthreads(); // every thread has read part before the next chunk writes it
    base += total;
  }
  for (long long k = (base < count ? base : count) + tid; k < count; k += NZ_THREADS)
    for (int d = 0; d < RANK; d++) y[(long long)d * count + k] = 0;
}
