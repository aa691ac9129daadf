// nms.cu: `nms`, NonMaxSuppression's greedy selection, with the CPU
// reference's order and tests (nms_common.h) spread over threads:
//   nms_rank_k    for each (batch, class) pair, each candidate's place in
//                 the order (score down, index up) by counting the
//                 candidates before it, over the whole grid; the places go
//                 to the workspace's order list, the candidates' count to
//                 its counts (zeroed before)
//   nms_greedy_k  one block walks each pair's order: a candidate is tested
//                 against the boxes kept so far by all threads at once (a
//                 block vote), then kept or not; rows written in (batch,
//                 class) order up to cap, rows past the count 0
// Workspace (ints): counts [P], order [P, N], kept [N] (P = B * C pairs).
// The box limit and thresholds are read from their tensors on the device.
// Defines: NMS_FN (__device__, before nms_common.h), CENTER, HAS_THR.
extern "C" __global__ void nms_rank_k(const float *scores, const float *thr, int *ws, long long P, long long N) {
  int *counts = ws, *order = ws + P;
  float t = HAS_THR ? *thr : 0.0f;
  for (long long p = blockIdx.y; p < P; p += gridDim.y) {
    const float *s = scores + p * N;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < N; j += (long long)gridDim.x * blockDim.x) {
      float v = s[j];
      if (!nms_candidate(v, HAS_THR, t)) continue;
      long long r = 0;
      for (long long i = 0; i < N; i++) {
        float u = s[i];
        r += nms_candidate(u, HAS_THR, t) && (u > v || (u == v && i < j));
      }
      order[p * N + r] = (int)j;
      atomicAdd(&counts[p], 1);
    }
  }
}

extern "C" __global__ void nms_greedy_k(const float *boxes, const long long *maxpc, const float *iou, const int *ws, long long *rows,
                                        long long *count, long long B, long long C, long long N, long long cap) {
  const long long P = B * C;
  const int *counts = ws, *order = ws + P;
  int *kept = (int *)ws + P + P * N;
  const long long mp = *maxpc;
  const float th = *iou;
  long long k = 0; /* rows so far: the same in every thread */
  for (long long p = 0; p < P; p++) {
    const long long b = p / C, c = p % C, start = k, m = counts[p];
    const int *ord = order + p * N;
    const float *bx = boxes + b * N * 4;
    for (long long r = 0; r < m && k - start < mp; r++) {
      const int j = ord[r];
      int hit = 0;
      for (long long q = start + threadIdx.x; q < k && q < cap && !hit; q += blockDim.x)
        hit = nms_suppresses(bx + (long long)kept[q - start] * 4, bx + (long long)j * 4, CENTER, th);
      if (__syncthreads_or(hit)) continue;
      if (threadIdx.x == 0 && k < cap) {
        rows[3 * k] = b, rows[3 * k + 1] = c, rows[3 * k + 2] = j;
        kept[k - start] = j;
      }
      k++;
      __syncthreads(); /* kept[] seen by every thread */
    }
  }
  if (k > cap) k = cap;
  for (long long q = 3 * k + threadIdx.x; q < 3 * cap; q += blockDim.x) rows[q] = 0;
  if (threadIdx.x == 0) *count = k;
}
