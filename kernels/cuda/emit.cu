// emit.cu: one record into the VM's token channel (mapped host memory):
// the count and the values at record head % cap, then, after a system-wide
// fence, the head advanced; *go := not cancelled. One block of 32 threads.
// The header is {u64 head, u32 cancel, u32 muted}; a record is 1 + W i64.
// s.dims = {n values, cap records, W}. Defines: TT (the tokens' type).
extern "C" __global__ void emit_k(const TT *x, unsigned long long *hdr, long long *ring, unsigned char *go, Shape s) {
  volatile unsigned long long *head = hdr;
  volatile unsigned int *flags = (volatile unsigned int *)(hdr + 1);
  long long n = s.dims[0], cap = s.dims[1], w = s.dims[2];
  __shared__ unsigned long long at;
  if (threadIdx.x == 0) at = *head;
  __syncthreads();
  if (!flags[1]) {
    volatile long long *rec = ring + (long long)(at % (unsigned long long)cap) * (1 + w);
    if (threadIdx.x == 0) rec[0] = n;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) rec[1 + i] = (long long)x[i];
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) {
      *head = at + 1;
      __threadfence_system();
    }
  }
  if (threadIdx.x == 0) *go = flags[0] == 0 ? 1 : 0;
}
