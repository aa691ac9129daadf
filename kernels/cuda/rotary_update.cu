// rotary_update.cu: a decode step's rotations and cache writes in one
// launch (the op rotary_update): q [B,S,Hq,D] rotated into qy; k [B,S,Hkv,D]
// rotated and v as it is written into the caches kc and vc [B,Hkv,L,D] at
// offset off + s along L. A thread per rotated pair or passed-through element
// of q (nq of them) and of k (nk), then per element of v (nv): rotary.cu's
// arithmetic (the angle, sine and cosine in double). Offsets: upos[0], or
// upos[b] (PER_ROW); one outside 0..L - S raises KERR_UPDATE in *err and the
// cache element is not written. s.dims = {B, S, Hq, Hkv, D, L}.
// Defines: T, C, LD, ST, TP, POS_MODE, GPTJ, RD, THETA, SCALING, FACTOR, LOW,
// HIGH, ORIG (rotary.cu's), TU (the offsets' type), PER_ROW, KERR_UPDATE, I.
extern "C" __global__ void rotary_update_k(const T *q, const T *k, const T *v, const TP *pos, const TU *upos, T *kc, T *vc, T *qy, int *err,
                                           Shape s) {
  const long long B = s.dims[0], S = s.dims[1], Hq = s.dims[2], Hkv = s.dims[3], D = s.dims[4], L = s.dims[5], half = RD / 2, per = D - half;
  const long long nq = B * S * Hq * per, nk = B * S * Hkv * per, nv = B * S * Hkv * D;
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)(nq + nk + nv); t += (I)gridDim.x * blockDim.x) {
    bool isq = (long long)t < nq, isv = (long long)t >= nq + nk;
    long long u = isq ? (long long)t : isv ? (long long)t - nq - nk : (long long)t - nq, H = isq ? Hq : Hkv, w = isv ? D : per;
    long long row = u / w, j = u % w, h = row % H, bs = row / H, b = bs / S, si = bs % S, base = row * D, ybase = base;
    T *y = qy;
    if (!isq) {
      long long off = PER_ROW ? (long long)upos[b] : (long long)upos[0];
      if (off < 0 || off > L - S) {
        atomicMax(err, KERR_UPDATE);
        continue;
      }
      ybase = ((b * Hkv + h) * L + off + si) * D;
      y = isv ? vc : kc;
    }
    if (isv) {
      y[ybase + j] = v[base + j];
      continue;
    }
    const T *x = isq ? q : k;
    if (j >= half) {  // past rotary_dim: unchanged
      long long e = RD + (j - half);
      y[ybase + e] = x[base + e];
      continue;
    }
    long long p = POS_MODE == 0 ? (long long)pos[0] + si : POS_MODE == 1 ? (long long)pos[si] : (long long)pos[bs];
    double a = (double)p * rl_rope_inv_freq((int)j, RD, THETA, SCALING, FACTOR, LOW, HIGH, ORIG), sn, cs;
    sincos(a, &sn, &cs);
    long long j0 = GPTJ ? 2 * j : j, j1 = j0 + (GPTJ ? 1 : half);
    C x0 = LD(x[base + j0]), x1 = LD(x[base + j1]);
    ST(y[ybase + j0], x0 * (C)cs - x1 * (C)sn);
    ST(y[ybase + j1], x1 * (C)cs + x0 * (C)sn);
  }
}
