// scatter_nd.cu: the updates of `scatter_nd`, a thread per update element
// (the operand's copy into the result comes first, on the same stream).
// Element e of index tuple t goes to y[off(t) + e], off(t) the tuple's
// offset (negative indices count from the end). reduction none stores
// (duplicate indices: one of them wins, as ONNX leaves it); the others
// combine through a compare-and-swap loop on the aligned 32-bit word (or
// the 64-bit element) holding the element, in C, and round at each store
// as the CPU reference does, so every duplicate counts. An index out of
// range raises RILL_KERR_INDEX and skips its slice.
// Defines: T, TI, C, LD, ST, IS_INT, K (the tuple's length), SLICE, RED
// (0 none, 1 add, 2 mul, 3 max, 4 min), DIMS and STRIDES ({..} of K), I.
__device__ __forceinline__ C sc_comb(C a, C b) {
#if RED == 1
  return IS_INT ? (C)((unsigned long long)a + (unsigned long long)b) : a + b;
#elif RED == 2
  return IS_INT ? (C)((unsigned long long)a * (unsigned long long)b) : a * b;
#elif RED == 3
  return nanmax(a, b);
#elif RED == 4
  return nanmin(a, b);
#else
  return b;
#endif
}

__device__ __forceinline__ void sc_update(T *p, C v) {
  if (sizeof(T) == 8) {
    unsigned long long *w = (unsigned long long *)p, old = *w, as;
    do {
      as = old;
      union { unsigned long long u; T t; } cur, nv;
      cur.u = as;
      ST(nv.t, sc_comb(LD(cur.t), v));
      old = atomicCAS(w, as, nv.u);
    } while (old != as);
  } else {
    unsigned long long addr = (unsigned long long)p;
    unsigned *w = (unsigned *)(addr & ~3ull);
    int sh = (int)(addr & 3ull) * 8;
    unsigned mask = sizeof(T) == 4 ? 0xffffffffu : sizeof(T) == 2 ? (0xffffu << sh) : (0xffu << sh);
    unsigned old = *w, as;
    do {
      as = old;
      union { unsigned u; T t; } cur, nv;
      cur.u = (as & mask) >> sh;
      nv.u = 0;
      ST(nv.t, sc_comb(LD(cur.t), v));
      old = atomicCAS(w, as, (as & ~mask) | ((nv.u << sh) & mask));
    } while (old != as);
  }
}

extern "C" __global__ void scatter_nd_k(const TI *ix, const T *u, T *y, int *err, long long total) {
  const long long dims[K] = DIMS, strides[K] = STRIDES;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < (I)total; i += (I)gridDim.x * blockDim.x) {
    long long t = (long long)i / SLICE, e = (long long)i % SLICE, off = 0;
    bool ok = true;
    for (int a = 0; a < K; a++) {
      long long v = (long long)ix[t * K + a];
      if (v < -dims[a] || v >= dims[a]) { ok = false; break; }
      off += (v < 0 ? v + dims[a] : v) * strides[a];
    }
    if (!ok) {
      atomicMax(err, 1);
      continue;
    }
#if RED == 0
    y[off + e] = u[i];
#else
    sc_update(&y[off + e], LD(u[i]));
#endif
  }
}
