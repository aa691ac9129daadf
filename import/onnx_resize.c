/* onnx_resize.c: the ONNX resampling ops: Resize (opsets 10 to 19) and
 * Upsample (7, 9), onto the core set's `resize` (docs/internals.md,
 * "Resampling ops"). Scales, sizes and roi known at import become
 * attributes; computed at run time, the sizes are read back and the scales
 * and roi become resize's params operand (resize_dynamic). */
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

/* Resize with scales, sizes or roi computed at run time (docs/internals.md,
 * "Sizes read back at run time"), keep_aspect_ratio_policy stretch: the
 * sizes of the axes resized (floor(in * scale), or sizes) are read back
 * with a flag that is 0 when the scales are finite and above 0 and the sizes
 * at least 1 (and, before opset 11's nearest, no axis grows while another
 * shrinks), else -1, which bind_dims refuses (invalid_resize); the
 * scales (or the sizes' ratios) and roi that the taps need become resize's
 * params operand (f64[3 r]) where they are not known. size gets the result's
 * dims; v10_nearest: *nearest_ceil := whether every axis shrinks (the
 * caller picks ceil's result then, floor's else). */
static bool resize_dynamic(imp_t *m, const Onnx__NodeProto *n, ival_t *x, const int64_t *axes, int na, ival_t *sc, ival_t *ro, ival_t *sz,
                           bool v10_nearest, int64_t *size, ival_t **prm, ival_t **nearest_ceil) {
  int r = x->t.rank;
  char buf[32];
  if (strcmp(onnx_attr_s(n, "keep_aspect_ratio_policy", "stretch", buf, sizeof buf), "stretch"))
    return imp_unsup(m, "keep_aspect_ratio_policy other than stretch with sizes computed at run time"), false;
  if (isa_type_is_sym(&x->t)) return imp_unsup(m, "scales or sizes computed at run time for an input with sizes over shape variables"), false;
  if (na + 1 > RILL_MAX_RANK - 1) return imp_unsup(m, "resizing %d axes with sizes computed at run time (at most %d)", na, RILL_MAX_RANK - 2), false;
  bool has_sc = sc && imp_numel(&sc->t), has_sz = sz && imp_numel(&sz->t);
  if (has_sc == has_sz) return imp_fail(m, RILL_MALFORMED, "exactly one of scales and sizes must be given"), false;
  ival_t *v = has_sc ? sc : sz;
  if (v->t.rank != 1 || v->t.dims[0] != na || (has_sc ? !imp_is_float(v->t.dtype) : !imp_is_int(v->t.dtype)) || v->sym)
    return imp_fail(m, RILL_MALFORMED, "%s must be a list of %d %s", has_sc ? "scales" : "sizes", na, has_sc ? "floats" : "integers"), false;
  if (ro && (ro->t.rank != 1 || ro->t.dims[0] != 2 * na || !imp_is_float(ro->t.dtype)))
    return imp_fail(m, RILL_MALFORMED, "roi must be a list of %d floats", 2 * na), false;
  rill_type_t one = {RILL_F64, 1, {1}};
  int64_t dl[RILL_MAX_RANK];
  for (int i = 0; i < na; i++) dl[i] = x->t.dims[axes[i]];
  rill_type_t dt = {RILL_I64, 1, {na}};
  ival_t *d64 = imp_cast(m, NULL, imp_const(m, &dt, dl), RILL_F64);
  ival_t *s64 = imp_cast(m, NULL, v, RILL_F64), *cnt, *bad;
  if (has_sc) { /* floor(in * scale); a scale must be finite and above 0 */
    cnt = imp_cast(m, NULL, imp_un(m, NULL, "floor", imp_bin(m, NULL, "mul", d64, s64), NULL), RILL_I64);
    ival_t *ok = imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "gt", s64, imp_scalar(m, RILL_F64, 0)), imp_bin(m, NULL, "lt", s64, imp_scalar(m, RILL_F64, INFINITY)));
    bad = imp_cast(m, NULL, imp_un(m, NULL, "logical_not", ok, NULL), RILL_I64);
  } else {
    cnt = imp_cast(m, NULL, v, RILL_I64);
    s64 = imp_bin(m, NULL, "div", s64, d64); /* the sizes' ratios, for the taps where roi comes at run time */
    bad = imp_scalar_int(m, RILL_I64, 0);
  }
  bad = imp_bin(m, NULL, "add", bad, imp_cast(m, NULL, imp_bin(m, NULL, "lt", cnt, imp_scalar_int(m, RILL_I64, 1)), RILL_I64));
  rill_type_t bt = {RILL_I64, 0, {0}};
  bad = bad && bad->t.rank ? imp_emit(m, NULL, &bt, "sum", &bad, 1, NULL) : bad;
  if (v10_nearest) { /* every scale below 1 or none (mixed: a fault) */
    ival_t *down = imp_cast(m, NULL, imp_bin(m, NULL, "lt", s64, imp_scalar(m, RILL_F64, 1)), RILL_I64);
    ival_t *up = imp_cast(m, NULL, imp_bin(m, NULL, "gt", s64, imp_scalar(m, RILL_F64, 1)), RILL_I64);
    ival_t *nd = down && down->t.rank ? imp_emit(m, NULL, &bt, "sum", &down, 1, NULL) : down, *nu = up && up->t.rank ? imp_emit(m, NULL, &bt, "sum", &up, 1, NULL) : up;
    ival_t *mixed = imp_bin(m, NULL, "logical_and", imp_bin(m, NULL, "gt", nd, imp_scalar_int(m, RILL_I64, 0)), imp_bin(m, NULL, "gt", nu, imp_scalar_int(m, RILL_I64, 0)));
    *nearest_ceil = imp_bin(m, NULL, "gt", nd, imp_scalar_int(m, RILL_I64, 0));
    bad = imp_bin(m, NULL, "add", bad, imp_cast(m, NULL, mixed, RILL_I64));
  }
  ival_t *flag = imp_bin(m, NULL, "sub", imp_scalar_int(m, RILL_I64, 0), imp_bin(m, NULL, "minimum", bad, imp_scalar_int(m, RILL_I64, 1)));
  rill_type_t fo = {RILL_I64, 1, {1}}, vt = {RILL_I64, 1, {na + 1}};
  /* the sizes read back at least 0 (the flag says why they are wrong) */
  ival_t *cargs[2] = {imp_bin(m, NULL, "maximum", cnt, imp_scalar_int(m, RILL_I64, 0)), imp_reshape(m, NULL, flag, &fo)};
  ival_t *vec = cargs[0] && cargs[1] ? imp_emit(m, NULL, &vt, "concat", cargs, 2, "axis=0") : NULL;
  int64_t got[RILL_MAX_RANK + 1];
  if (!vec) return false;
  int want = na + 1;
  if (vec->data) {
    for (int i = 0; i < want; i++) got[i] = rill_element_get_int(RILL_I64, vec->data, (size_t)i);
    if (got[na] < 0) return imp_fail(m, RILL_MALFORMED, "scales or sizes out of range"), false;
  } else if (imp_read_back_flag(m, vec, has_sc ? "scales" : "sizes", got, RILL_MAX_RANK, "invalid_resize") != want) {
    return false;
  }
  for (int i = 0; i < na; i++) size[axes[i]] = got[i];
  if (!has_sc && !ro) return true; /* the plan takes the sizes' ratios */
  /* params: per axis of x its scale (1 where not resized), roi start and end (0 and 1) */
  ival_t *parts[3 * RILL_MAX_RANK];
  ival_t *r64 = ro ? imp_cast(m, NULL, ro, RILL_F64) : NULL;
  for (int j = 0; j < 3; j++)
    for (int a = 0; a < r; a++) {
      int i = 0;
      while (i < na && axes[i] != a) i++;
      ival_t *e = NULL;
      if (i < na && (j == 0 || r64)) e = imp_slice1(m, j == 0 ? s64 : r64, 0, j == 0 ? i : (j - 1) * na + i, (j == 0 ? i : (j - 1) * na + i) + 1, 1);
      parts[j * r + a] = e ? e : imp_reshape(m, NULL, imp_scalar(m, RILL_F64, j == 1 ? 0 : 1), &one); /* scale 1, roi [0, 1] */
    }
  rill_type_t pt = {RILL_F64, 1, {3 * r}};
  for (int i = 0; i < 3 * r; i++)
    if (!parts[i]) return false;
  return (*prm = imp_emit(m, NULL, &pt, "concat", parts, 3 * r, "axis=0")) != NULL;
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
  ival_t *prm = NULL, *nearest_ceil = NULL;
  bool given_scales = false;
  if (!(upsample && m->opset < 9)) { /* scales, sizes or roi computed at run time */
    ival_t *sc = v10 ? IN(1) : IN(2), *ro = v10 ? NULL : IN(1), *sz = v10 ? NULL : IN(3);
    bool crop = !strcmp(coord, "tf_crop_and_resize");
    bool rt = (sc && imp_numel(&sc->t) && !sc->data) || (sz && imp_numel(&sz->t) && !sz->data && !sz->sym) || (crop && ro && imp_numel(&ro->t) && !ro->data);
    if (rt) {
      if (!resize_dynamic(m, n, x, axes, na, sc, crop ? ro : NULL, sz, v10 && !strcmp(mode, "nearest"), size, &prm, &nearest_ceil)) return false;
      if (nearest_ceil) snprintf(nearest, sizeof nearest, "floor"); /* and "ceil" for the second */
      goto emit;
    }
  }
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
  given_scales = ns > 0;
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
emit:;
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
    if (prm) len += snprintf(attrs + len, sizeof attrs - (size_t)len, ", extrapolation_value=%s", num);
    else len += snprintf(attrs + len, sizeof attrs - (size_t)len, ", roi=%s, extrapolation_value=%s", rl, num);
  }
  ival_t *args[2] = {x, prm};
  if (!nearest_ceil) return imp_emit(m, OUT(0), &o, "resize", args, prm ? 2 : 1, attrs) != NULL;
  /* before opset 11, nearest with scales known at run time: floor when
   * upsampling, ceil when downsampling (mixed refused when read back) */
  ival_t *fl = imp_emit(m, NULL, &o, "resize", args, prm ? 2 : 1, attrs);
  char *nm = strstr(attrs, "nearest_mode=\"");
  if (!fl || !nm) return false;
  int at = (int)(nm - attrs);
  snprintf(nm, sizeof attrs - (size_t)at, "nearest_mode=\"ceil\"%s", strstr(attrs + at + 14, "\"") + 1);
  ival_t *ce = imp_emit(m, NULL, &o, "resize", args, prm ? 2 : 1, attrs);
  ival_t *wargs[3] = {nearest_ceil, ce, fl};
  return ce && imp_emit(m, OUT(0), &o, "where", wargs, 3, NULL) != NULL;
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
