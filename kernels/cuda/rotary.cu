// rotary.cu: the rotary position embedding over x [B,S,H,D] (s.dims), a
// thread per rotated pair or passed-through element: s.n = B*S*H*(D - RD/2).
// Pair j of a head: (j, j + RD/2) (neox) or (2j, 2j + 1) (GPTJ); angle =
// position * rl_rope_inv_freq(j) (llm_common.h), in double. Positions (TP):
// POS_MODE 0 the first position (token s at pos[0] + s), 1 one a token
// ([S]), 2 one a sequence and token ([B,S]).
// Defines: T, C, LD, ST, TP, POS_MODE, GPTJ, RD, THETA, SCALING, FACTOR,
// LOW, HIGH, ORIG, I.
extern "C" __global__ void rotary_k(const T *x, const TP *pos, T *y, Shape s) {
  const long long S = s.dims[1], H = s.dims[2], D = s.dims[3], half = RD / 2, per = D - half;
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)s.n; t += (I)gridDim.x * blockDim.x) {
    long long row = (long long)t / per, j = (long long)t % per, base = row * D;
    if (j >= half) {  // past rotary_dim: unchanged
      long long e = base + RD + (j - half);
      y[e] = x[e];
      continue;
    }
    long long bs = row / H;  // b * S + s
    long long p = POS_MODE == 0 ? (long long)pos[0] + bs % S : POS_MODE == 1 ? (long long)pos[bs % S] : (long long)pos[bs];
    double a = (double)p * rl_rope_inv_freq((int)j, RD, THETA, SCALING, FACTOR, LOW, HIGH, ORIG), sn, cs;
    sincos(a, &sn, &cs);
    long long j0 = base + (GPTJ ? 2 * j : j), j1 = j0 + (GPTJ ? 1 : half);
    C x0 = LD(x[j0]), x1 = LD(x[j1]);
    ST(y[j0], x0 * (C)cs - x1 * (C)sn);
    ST(y[j1], x1 * (C)cs + x0 * (C)sn);
  }
}
