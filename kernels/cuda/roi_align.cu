// roi_align.cu: `roi_align`, a thread per output element [R, C, OH, OW]:
// the roi's geometry from ra_geom and the bin's value from RA_BIN
// (grid_common.h, shared with the CPU reference), in double. A
// batch index out of range raises RILL_KERR_INDEX and writes 0.
// Defines: T, TR (the rois' type), TB (the batch indices'), LD, LDR, ST,
// NB (the batch), C_, IH, IW, OH, OW, MAXMODE, SAMPLING, SCALE, HALF_PIXEL, I.
extern "C" __global__ void roi_align_k(const T *x, const TR *rois, const TB *bi, T *y, int *err, long long total) {
  for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < (I)total; t += (I)gridDim.x * blockDim.x) {
    long long pw = (long long)t % OW, ph = (long long)t / OW % OH, c = (long long)t / OW / OH % C_, r = (long long)t / OW / OH / C_;
    long long b = (long long)bi[r];
    if (b < 0 || b >= NB) {
      atomicMax(err, 1);
      ST(y[t], 0.0);
      continue;
    }
    double roi[4], start[2], bin[2];
    long long grid[2];
    for (int k = 0; k < 4; k++) roi[k] = (double)LDR(rois[r * 4 + k]);
    ra_geom(roi, SCALE, HALF_PIXEL, OH, OW, SAMPLING, start, bin, grid);
    const T *img = x + (b * C_ + c) * IH * IW;
    double v;
#define X(e) ((double)LD(img[e]))
    RA_BIN(start, bin, grid, ph, pw, IH, IW, MAXMODE, X, v);
#undef X
    ST(y[t], v);
  }
}
