// conv_transpose.cu: `conv_transpose`, a thread per output element: the
// gather form of convt_common.h (shared with the CPU reference), in
// double, plus the bias, rounded once. The output's dims [N, O, *out].
// Defines: T, LD, ST, ND, NB (the batch), CC, OO, GG, IN0..2, K0..2,
// OUT0..2, S0..2, PB0..2, D0..2, HAS_B, I.
extern "C" __global__ void conv_transpose_k(const T *x, const T *w, const T *b, T *y, long long total) {
  ct_geom_t g;
  g.nd = ND, g.C = CC, g.O = OO, g.G = GG;
  g.in[0] = IN0, g.in[1] = IN1, g.in[2] = IN2, g.k[0] = K0, g.k[1] = K1, g.k[2] = K2;
  g.out[0] = OUT0, g.out[1] = OUT1, g.out[2] = OUT2, g.s[0] = S0, g.s[1] = S1, g.s[2] = S2;
  g.pb[0] = PB0, g.pb[1] = PB1, g.pb[2] = PB2, g.d[0] = D0, g.d[1] = D1, g.d[2] = D2;
  long long osz = 1;
  for (int a = 0; a < ND; a++) osz *= g.out[a];
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)total; t += (I)gridDim.x * blockDim.x) {
    long long rem = (long long)t, pos[3];
    for (int a = ND - 1; a >= 0; a--) pos[a] = rem % g.out[a], rem /= g.out[a];
    long long o = rem % OO, n = rem / OO;
#define X(e) ((double)LD(x[e]))
#define W(e) ((double)LD(w[e]))
    double v;
    CT_SUM(g, n, o, pos, X, W, v);
#undef X
#undef W
    if (HAS_B) v += (double)LD(b[o]);
    ST(y[t], v);
  }
}
