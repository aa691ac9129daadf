// nms_common.h: NonMaxSuppression's tests, shared by the CPU reference
// (ops/cpu_select.c) and the CUDA kernels (nms.cu). The selection, as ONNX
// Runtime makes it: per batch and class, the boxes scoring above
// score_threshold (when one is given; a NaN score never) in order of score
// (highest first, a tie to the lower index), each kept unless its IoU with
// a box already kept is above iou_threshold (a box of no area suppresses
// nothing), up to max_per_class boxes; rows (batch, class, box) in that
// order up to cap, the count going on past it. Boxes [B, N, 4], scores
// [B, C, N]; center_point_box 0: [y1, x1, y2, x2] (either corner order),
// 1: [x_center, y_center, width, height].
#ifndef NMS_FN
#define NMS_FN
#endif
NMS_FN static void nms_corners(const float *b, int center, float *y1, float *x1, float *y2, float *x2) {
  if (center) {
    *x1 = b[0] - b[2] / 2, *x2 = b[0] + b[2] / 2, *y1 = b[1] - b[3] / 2, *y2 = b[1] + b[3] / 2;
  } else {
    *y1 = b[0] < b[2] ? b[0] : b[2], *y2 = b[0] < b[2] ? b[2] : b[0];
    *x1 = b[1] < b[3] ? b[1] : b[3], *x2 = b[1] < b[3] ? b[3] : b[1];
  }
}

NMS_FN static int nms_suppresses(const float *a, const float *b, int center, float iou) {
  float ay1, ax1, ay2, ax2, by1, bx1, by2, bx2;
  nms_corners(a, center, &ay1, &ax1, &ay2, &ax2);
  nms_corners(b, center, &by1, &bx1, &by2, &bx2);
  float iy1 = ay1 > by1 ? ay1 : by1, ix1 = ax1 > bx1 ? ax1 : bx1, iy2 = ay2 < by2 ? ay2 : by2, ix2 = ax2 < bx2 ? ax2 : bx2;
  float inter = (iy2 > iy1 ? iy2 - iy1 : 0) * (ix2 > ix1 ? ix2 - ix1 : 0);
  if (inter <= 0) return 0;
  float aa = (ay2 - ay1) * (ax2 - ax1), ab = (by2 - by1) * (bx2 - bx1), uni = aa + ab - inter;
  if (aa <= 0 || ab <= 0 || uni <= 0) return 0;
  return inter / uni > iou;
}

/* A score that takes part: not NaN (which has no place in the order), and
 * above thr when has_thr. */
NMS_FN static int nms_candidate(float v, int has_thr, float thr) { return v == v && (!has_thr || v > thr); }
