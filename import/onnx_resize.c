/* onnx_resize.c: the ONNX resampling ops: Resize (opsets 10 to 19) and
 * Upsample (7, 9), onto the core set's `resize` (docs/internals.md,
 * "Resampling ops"). Scales, sizes and roi must be known at import. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_ops.h"

/* A known float input of n values (n = the rank, or the count of `axes`); -1 after a failure, 0 when absent or empty. */
static int known_floats(imp_t *m, ival_t *v, const char *what, double *out, int max) {
  if (!v || !imp_numel(&v->t)) return 0;
  if (!v->data) return imp_unsup(m, "input '%s' computed at run time (it must be a constant)", what), -1;
  if (!imp_is_float(v->t.dtype) || v->t.rank != 1) return imp_fail(m, RILL_MALFORMED, "input '%s' must be a 1-D float tensor", what), -1;
  size_t k = imp_numel(&v->t);
  if (k > (size_t)max) return imp_fail(m, RILL_MALFORMED, "input '%s' has %zu values (at most %d)", what, k, max), -1;
  for (size_t i = 0; i < k; i++) out[i] = rill_element_get(v->t.dtype, v->data, i);
  return (int)k;
}

/* "[v0, v1, ...]": doubles, exact */
static void floats_str(char *buf, size_t n, const double *v, int k) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < k && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%.17g", i ? ", " : "", v[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

bool onnx_op_resize(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0);
  ival_t *x = in[0];
  int r = x->t.rank;
  bool upsample = !strcmp(n->op_type, "Upsample"), v10 = upsample || m->opset < 11;
  char mode[32], coord[32], nearest[32], buf[32];
  snprintf(mode, sizeof mode, "%s", onnx_attr_s(n, "mode", "nearest", buf, sizeof buf));
  if (!strcmp(mode, "bilinear") && upsample) snprintf(mode, sizeof mode, "linear"); /* Upsample-7's name */
  if (strcmp(mode, "nearest") && strcmp(mode, "linear") && (v10 || strcmp(mode, "cubic")))
    return imp_fail(m, RILL_MALFORMED, "unknown mode (nearest, linear%s)", v10 ? "" : " or cubic"), false;
  snprintf(coord, sizeof coord, "%s", v10 ? "asymmetric" : onnx_attr_s(n, "coordinate_transformation_mode", "half_pixel", buf, sizeof buf));
  snprintf(nearest, sizeof nearest, "%s", onnx_attr_s(n, "nearest_mode", "round_prefer_floor", buf, sizeof buf));
  static const char COORDS[] = " half_pixel half_pixel_symmetric pytorch_half_pixel align_corners asymmetric tf_crop_and_resize tf_half_pixel_for_nn ";
  static const char NEARESTS[] = " round_prefer_floor round_prefer_ceil floor ceil ";
  char key[40];
  snprintf(key, sizeof key, " %s ", coord);
  if (!*coord || strchr(coord, ' ') || !strstr(COORDS, key))
    return imp_fail(m, RILL_MALFORMED, "unknown coordinate_transformation_mode (one of%s)", COORDS), false;
  snprintf(key, sizeof key, " %s ", nearest);
  if (!*nearest || strchr(nearest, ' ') || !strstr(NEARESTS, key)) return imp_fail(m, RILL_MALFORMED, "unknown nearest_mode (one of%s)", NEARESTS), false;
  if (onnx_attr_i(n, "antialias", 0)) return imp_unsup(m, "antialias=1"), false;
  if (r < 1) return imp_fail(m, RILL_MALFORMED, "input of rank 0"), false;
  /* the axes the inputs give values for (opset 18's `axes`; all by default) */
  int64_t axes[RILL_MAX_RANK];
  int na = onnx_attr_ints(n, "axes", axes, RILL_MAX_RANK);
  if (na < 0) {
    na = r;
    for (int a = 0; a < r; a++) axes[a] = a;
  }
  if (na > r) return imp_fail(m, RILL_MALFORMED, "%d axes for an input of rank %d", na, r), false;
  for (int i = 0; i < na; i++) {
    if (!imp_norm_axis(m, axes[i], r, &axes[i])) return false;
    for (int j = 0; j < i; j++)
      if (axes[j] == axes[i]) return imp_fail(m, RILL_MALFORMED, "axis %lld given twice", (long long)axes[i]), false;
  }
  double scale[RILL_MAX_RANK], roi[2 * RILL_MAX_RANK], sv[RILL_MAX_RANK], rv[2 * RILL_MAX_RANK];
  int64_t size[RILL_MAX_RANK], zv[RILL_MAX_RANK];
  for (int a = 0; a < r; a++) scale[a] = 1, roi[a] = 0, roi[r + a] = 1, size[a] = x->t.dims[a];
  int ns, nz = 0, nr = 0;
  if (upsample && m->opset < 9) {
    const Onnx__AttributeProto *sa = onnx_attr_get(n, "scales");
    if (!sa || (int)sa->n_floats != r) return imp_fail(m, RILL_MALFORMED, "attribute 'scales' needs %d values", r), false;
    for (int a = 0; a < r; a++) sv[a] = sa->floats[a];
    ns = r;
  } else {
    ival_t *sc = v10 ? IN(1) : IN(2);
    if ((ns = known_floats(m, sc, "scales", sv, RILL_MAX_RANK)) < 0) return false;
    if (!v10) {
      if ((nr = known_floats(m, IN(1), "roi", rv, 2 * RILL_MAX_RANK)) < 0) return false;
      if (IN(3) && imp_numel(&IN(3)->t) && (nz = imp_known_dims(m, IN(3), "sizes", zv, RILL_MAX_RANK)) < 0) return false;
    }
  }
  if (!ns == !nz) return imp_fail(m, RILL_MALFORMED, "exactly one of scales and sizes must be given"), false;
  if ((ns && ns != na) || (nz && nz != na) || (nr && nr != 2 * na))
    return imp_fail(m, RILL_MALFORMED, "scales or sizes need %d values and roi %d, found %d, %d and %d", na, 2 * na, ns, nz, nr), false;
  char policy[32];
  snprintf(policy, sizeof policy, "%s", onnx_attr_s(n, "keep_aspect_ratio_policy", "stretch", buf, sizeof buf));
  if (strcmp(policy, "stretch") && strcmp(policy, "not_larger") && strcmp(policy, "not_smaller"))
    return imp_fail(m, RILL_MALFORMED, "unknown keep_aspect_ratio_policy (stretch, not_larger or not_smaller)"), false;
  bool given_scales = ns > 0;
  if (nz && strcmp(policy, "stretch")) {
    /* one scale for every axis given: the smallest (not_larger) or largest of sizes / in, sizes rounded from it */
    double s = 0;
    for (int i = 0; i < na; i++) {
      int64_t d = x->t.dims[axes[i]];
      if (isa_dim_is_sym(d) || isa_dim_is_sym(zv[i])) return imp_unsup(m, "keep_aspect_ratio_policy over sizes over shape variables"), false;
      double q = (double)zv[i] / (double)d;
      if (i == 0 || (!strcmp(policy, "not_larger") ? q < s : q > s)) s = q;
    }
    for (int i = 0; i < na; i++) sv[i] = s, zv[i] = (int64_t)(s * (double)x->t.dims[axes[i]] + 0.5);
    given_scales = true;
  }
  for (int i = 0; i < na; i++) {
    int a = (int)axes[i];
    int64_t d = x->t.dims[a];
    if (nr) roi[a] = rv[i], roi[r + a] = rv[na + i];
    if (nz) {
      size[a] = zv[i];
      if (isa_dim_is_sym(d) || isa_dim_is_sym(zv[i])) {
        if (zv[i] != d) return imp_unsup(m, "resizing axis %d, of a size over shape variables", a), false;
      } else if (zv[i] < 1) {
        return imp_fail(m, RILL_MALFORMED, "sizes[%d] is %lld (at least 1)", i, (long long)zv[i]), false;
      }
      if (given_scales) scale[a] = sv[i];
      else if (!isa_dim_is_sym(d)) scale[a] = (double)zv[i] / (double)d;
    } else {
      if (!(sv[i] > 0) || isinf(sv[i])) return imp_fail(m, RILL_MALFORMED, "scales[%d] is %g (a finite number above 0)", i, sv[i]), false;
      scale[a] = sv[i];
      if (isa_dim_is_sym(d)) {
        if (sv[i] != 1) return imp_unsup(m, "resizing axis %d, of a size over shape variables", a), false;
        continue;
      }
      double o = floor((double)d * sv[i]);
      if (o < 1 || o > 1e15) return imp_fail(m, RILL_MALFORMED, "axis %d: %lld times %g gives %g values", a, (long long)d, sv[i], o), false;
      size[a] = (int64_t)o;
    }
  }
  if (v10 && !strcmp(mode, "nearest")) {
    /* before opset 11: floor when upsampling, ceil when downsampling (ONNX Runtime's rule) */
    bool up = false, down = false;
    for (int a = 0; a < r; a++) up |= scale[a] > 1, down |= scale[a] < 1;
    if (up && down) return imp_unsup(m, "nearest upsampling one axis and downsampling another before opset 11"), false;
    snprintf(nearest, sizeof nearest, "%s", down ? "ceil" : "floor");
  }
  rill_type_t o = x->t;
  for (int a = 0; a < r; a++) o.dims[a] = size[a];
  if (!imp_type_ok(m, &o)) return false;
  char sl[400], scl[600], rl[1200], num[64], attrs[2600];
  imp_list_str(m, sl, sizeof sl, size, r);
  floats_str(scl, sizeof scl, scale, r);
  int len = snprintf(attrs, sizeof attrs, "sizes=%s, mode=\"%s\", coordinate_transformation_mode=\"%s\", nearest_mode=\"%s\"", sl, mode, coord, nearest);
  if (given_scales) len += snprintf(attrs + len, sizeof attrs - (size_t)len, ", scales=%s", scl);
  if (!strcmp(mode, "cubic")) {
    snprintf(num, sizeof num, "%.17g", (double)(float)onnx_attr_f(n, "cubic_coeff_a", -0.75));
    len += snprintf(attrs + len, sizeof attrs - (size_t)len, ", cubic_coeff_a=%s", num);
  }
  if (onnx_attr_i(n, "exclude_outside", 0)) len += snprintf(attrs + len, sizeof attrs - (size_t)len, ", exclude_outside=true");
  if (!strcmp(coord, "tf_crop_and_resize")) {
    floats_str(rl, sizeof rl, roi, 2 * r);
    snprintf(num, sizeof num, "%.17g", (double)(float)onnx_attr_f(n, "extrapolation_value", 0));
    len += snprintf(attrs + len, sizeof attrs - (size_t)len, ", roi=%s, extrapolation_value=%s", rl, num);
  }
  return imp_emit(m, OUT(0), &o, "resize", &x, 1, attrs) != NULL;
}

/* GridSample (4-D) onto grid_sample: opset 20's mode names (linear,
 * cubic) are opset 16's (bilinear, bicubic) */
bool onnx_op_grid_sample(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1);
  ival_t *x = in[0], *g = in[1];
  if (!imp_need_float(m, x, "input") || !imp_need_float(m, g, "grid")) return false;
  if (x->t.rank != 4) return imp_unsup(m, "a %d-D GridSample (2-D is supported)", x->t.rank - 2), false;
  char mb[32], pb[32], mode[32], pad[32];
  snprintf(mode, sizeof mode, "%s", onnx_attr_s(n, "mode", m->opset >= 20 ? "linear" : "bilinear", mb, sizeof mb));
  snprintf(pad, sizeof pad, "%s", onnx_attr_s(n, "padding_mode", "zeros", pb, sizeof pb));
  const char *gm = !strcmp(mode, "linear") || !strcmp(mode, "bilinear") ? "bilinear" : !strcmp(mode, "cubic") || !strcmp(mode, "bicubic") ? "bicubic"
                   : !strcmp(mode, "nearest") ? "nearest" : NULL;
  if (!gm) return imp_fail(m, RILL_MALFORMED, "unknown mode (bilinear, nearest or bicubic)"), false;
  if (strcmp(pad, "zeros") && strcmp(pad, "border") && strcmp(pad, "reflection")) return imp_fail(m, RILL_MALFORMED, "unknown padding_mode (zeros, border or reflection)"), false;
  if (g->t.rank != 4 || g->t.dims[0] != x->t.dims[0] || g->t.dims[3] != 2) return imp_fail(m, RILL_MALFORMED, "grid of shape other than [N, H_out, W_out, 2]"), false;
  rill_type_t o = {x->t.dtype, 4, {x->t.dims[0], x->t.dims[1], g->t.dims[1], g->t.dims[2]}};
  char a[160];
  imp_attrs(a, sizeof a, "mode=\"%s\", padding_mode=\"%s\", align_corners=%s", gm, pad, onnx_attr_i(n, "align_corners", 0) ? "true" : "false");
  ival_t *args[2] = {x, g};
  return imp_emit(m, OUT(0), &o, "grid_sample", args, 2, a) != NULL;
}

/* RoiAlign onto roi_align: before opset 16 the coordinates are
 * output_half_pixel's (no half-pixel shift) */
bool onnx_op_roi_align(imp_t *m, const Onnx__NodeProto *n, ival_t **in, int nin) {
  NEED(0); NEED(1); NEED(2);
  ival_t *x = in[0], *r = in[1], *b = in[2];
  if (!imp_need_float(m, x, "input")) return false;
  if (x->t.rank != 4) return imp_fail(m, RILL_MALFORMED, "input of rank %d (4 expected)", x->t.rank), false;
  if (r->t.dtype != x->t.dtype) r = imp_cast(m, NULL, r, x->t.dtype);
  char mb[32], cb[32], mode[32], coord[32];
  snprintf(mode, sizeof mode, "%s", onnx_attr_s(n, "mode", "avg", mb, sizeof mb));
  snprintf(coord, sizeof coord, "%s", onnx_attr_s(n, "coordinate_transformation_mode", m->opset >= 16 ? "half_pixel" : "output_half_pixel", cb, sizeof cb));
  if (strcmp(mode, "avg") && strcmp(mode, "max")) return imp_fail(m, RILL_MALFORMED, "unknown mode (avg or max)"), false;
  if (strcmp(coord, "half_pixel") && strcmp(coord, "output_half_pixel")) return imp_fail(m, RILL_MALFORMED, "unknown coordinate_transformation_mode"), false;
  int64_t oh = onnx_attr_i(n, "output_height", 1), ow = onnx_attr_i(n, "output_width", 1), sr = onnx_attr_i(n, "sampling_ratio", 0);
  double scale = onnx_attr_f(n, "spatial_scale", 1.0);
  if (oh < 1 || ow < 1 || oh > (1 << 20) || ow > (1 << 20) || sr < 0 || sr > 4096) return imp_fail(m, RILL_MALFORMED, "output size or sampling_ratio out of range"), false;
  if (!r || r->t.rank != 2 || r->t.dims[1] != 4) return imp_fail(m, RILL_MALFORMED, "rois of shape other than [R, 4]"), false;
  if ((b->t.dtype != RILL_I64 && b->t.dtype != RILL_I32) || b->t.rank != 1 || b->t.dims[0] != r->t.dims[0]) return imp_fail(m, RILL_MALFORMED, "batch_indices of shape other than [R]"), false;
  rill_type_t o = {x->t.dtype, 4, {r->t.dims[0], x->t.dims[1], oh, ow}};
  char a[300];
  imp_attrs(a, sizeof a, "output_height=%lld, output_width=%lld, sampling_ratio=%lld, spatial_scale=%.17g, mode=\"%s\", coordinate_transformation_mode=\"%s\"",
            (long long)oh, (long long)ow, (long long)sr, scale, mode, coord);
  ival_t *args[3] = {x, r, b};
  return imp_emit(m, OUT(0), &o, "roi_align", args, 3, a) != NULL;
}
