// grid_sample.cu: `grid_sample`, a thread per output element [N, C, HO, WO]:
// each axis's taps from gs_taps (grid_common.h, shared with the CPU
// reference), the sum of the products in double, rounded once.
// Defines: T, TG (the grid's type), LD, LDG, ST, C_, IH, IW, HO, WO, MODE,
// PAD, ALIGN, I.
extern "C" __global__ void grid_sample_k(const T *x, const TG *grid, T *y, long long total) {
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)total; t += (I)gridDim.x * blockDim.x) {
    long long ow = (long long)t % WO, oh = (long long)t / WO % HO, c = (long long)t / WO / HO % C_, n = (long long)t / WO / HO / C_;
    const TG *g = grid + ((n * HO + oh) * WO + ow) * 2;
    long long ix[4], iy[4];
    double wx[4], wy[4];
    int nx = gs_taps((double)LDG(g[0]), IW, MODE, PAD, ALIGN, ix, wx), ny = gs_taps((double)LDG(g[1]), IH, MODE, PAD, ALIGN, iy, wy);
    const T *img = x + (n * C_ + c) * IH * IW;
    double acc = 0;
    for (int i = 0; i < ny; i++)
      for (int j = 0; j < nx; j++)
        if (iy[i] >= 0 && ix[j] >= 0) acc += wy[i] * wx[j] * (double)LD(img[iy[i] * IW + ix[j]]);
    ST(y[t], acc);
  }
}
