// nms.cu: `nms`, NonMaxSuppression's greedy selection (nms_common.h, the
// CPU reference's own code) on one thread: the selection is sequential
// (each box against those kept before it), and it writes the rows and
// their count without scratch memory. Rows past the count are 0. The box
// limit and thresholds are read from their tensors on the device.
// Defines: NMS_FN (__device__, before nms_common.h), CENTER, HAS_THR.
extern "C" __global__ void nms_k(const float *boxes, const float *scores, const long long *maxpc, const float *iou, const float *thr,
                                 long long *rows, long long *count, long long B, long long C, long long N, long long cap) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  long long k = nms_run(boxes, scores, B, C, N, *maxpc, CENTER, *iou, HAS_THR, HAS_THR ? *thr : 0.0f, rows, cap);
  if (k > cap) k = cap;
  for (long long q = 3 * k; q < 3 * cap; q++) rows[q] = 0;
  *count = k;
}
