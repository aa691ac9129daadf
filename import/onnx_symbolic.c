/* onnx_symbolic.c: an ONNX model's symbolic input sizes (dim_param) as
 * shape variables, and where the mappings cannot carry them, the import at
 * probe sizes with the texts merged. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_int.h"

/* ---- symbolic dimensions as shape variables ----
 * An input's dim_param NAME that no --shape binds becomes the shape variable
 * NAME. The import first keeps sizes as polynomials over the variables
 * (isa/sym.c): in types, and in known values computed from a Shape
 * (ival_t.sym), which the mappings that take them (onnx_op_symbolic)
 * carry through imp_sym_binary, moves run on the encoded sizes, and
 * isa_sym_divexact in Reshape. Where a mapping cannot take them (a
 * convolution over a symbolic size, a Range to one), the model is imported
 * as before: at three sizes of each such
 * name, the others held (7, 11 and 13, or three sizes inside the range that
 * --shape NAME=LO..HI gives): the texts must agree token for token except
 * for integers that follow the size as k*NAME + c (k > 0, c >= 0), which
 * are written so (S, mul(S, 12), add(S, 1)); the weights must agree byte
 * for byte. Anything else (a structure, a name, a constant or a weight that
 * depends on the size, an integer that depends on two names) is refused,
 * naming the line, with the advice to give --shape NAME=N. */


/* a name the language reads as a shape variable in a type and a size expression */
static bool sym_name_ok(const char *s) {
  static const char *reserved[] = {"add", "mul", "floordiv", "inf", "nan", "true", "false", "f16", "bf16", "f32", "f64",
                                   "i8", "u8", "i32", "i64", "bool", "i16", "u16", "u32", "u64", NULL};
  if (!(isalpha((unsigned char)*s) || *s == '_')) return false;
  for (const char *p = s; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '.')) return false;
  for (int i = 0; reserved[i]; i++)
    if (!strcmp(s, reserved[i])) return false;
  return strlen(s) < 64;
}

rill_status_t imp_find_symbolic(const Onnx__ModelProto *model, const onnx_options_t *o, symdim_t *out, int *n) {
  *n = 0;
  const Onnx__GraphProto *g = model->graph;
  if (!g) return NULL;
  for (size_t i = 0; i < g->n_input; i++) {
    const Onnx__ValueInfoProto *vi = g->input[i];
    if (!vi->name || imp_opt_shape(o, vi->name) >= 0) continue;
    bool init = false;
    for (size_t k = 0; k < g->n_initializer && !init; k++) init = g->initializer[k]->name && !strcmp(g->initializer[k]->name, vi->name);
    if (init || !vi->type || vi->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !vi->type->tensor_type ||
        !vi->type->tensor_type->shape)
      continue; /* refused, if at all, by the import itself */
    const Onnx__TensorShapeProto *sh = vi->type->tensor_type->shape;
    for (size_t d = 0; d < sh->n_dim; d++) {
      const Onnx__TensorShapeProto__Dimension *dd = sh->dim[d];
      if (dd->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM || !dd->dim_param || !*dd->dim_param) continue;
      const char *p = dd->dim_param;
      if (imp_opt_shape(o, p) >= 0) continue;
      bool seen = false;
      for (int k = 0; k < *n && !seen; k++) seen = !strcmp(out[k].name, p);
      if (seen) continue;
      if (!sym_name_ok(p))
        return rill_status_new(RILL_UNIMPLEMENTED, "graph input '%.200s' has symbolic dimension '%.100s', which is not a name a shape variable can have (give --shape %.100s=N)", vi->name, p, p);
      if (*n == SYM_MAX) return rill_status_new(RILL_UNIMPLEMENTED, "more than %d symbolic dimensions (give --shape NAME=N for some)", SYM_MAX);
      symdim_t *s = &out[(*n)++];
      *s = (symdim_t){.name = p, .p = {7, 11, 13}};
      s->ranged = imp_opt_range(o, p, &s->lo, &s->hi);
      if (s->ranged && (s->lo > 7 || s->hi < 13)) {
        int64_t a = s->lo > 2 ? s->lo : 2;
        if (a + 2 > s->hi) a = s->lo;
        if (a < 1 || a + 2 > s->hi)
          return rill_status_new(RILL_UNIMPLEMENTED, "symbolic dimension '%.100s': its range [%lld, %lld] is too narrow to import it as a shape variable (give --shape %.100s=N)",
                                 p, (long long)s->lo, (long long)s->hi, p);
        s->p[0] = a, s->p[1] = a + 1, s->p[2] = a + 2;
      }
    }
  }
  return NULL;
}

static bool word_char(char ch) { return isalnum((unsigned char)ch) || ch == '_' || ch == '.' || ch == '%' || ch == '@' || ch == '+' || ch == '-'; }
static size_t tok_len(const char *s) {
  if (!*s) return 0;
  if (!word_char(*s)) return 1;
  size_t n = 0;
  while (s[n] && word_char(s[n])) n++;
  return n;
}
static bool int_tok(const char *s, size_t n, int64_t *v) {
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == n || n - i > 18) return false;
  int64_t x = 0;
  for (; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return false;
    x = x * 10 + (s[i] - '0');
  }
  *v = s[0] == '-' ? -x : x;
  return true;
}

/* texts[0]: every name at p[0]; texts[1 + 2i + j]: name i at p[1 + j], the others at p[0] */
static rill_status_t merge_texts(const symdim_t *sd, int nsym, char **texts, sbuf_t *out) {
  const char *q[1 + 2 * SYM_MAX];
  int nt = 1 + 2 * nsym;
  for (int j = 0; j < nt; j++) q[j] = texts[j];
  const char *line = texts[0];
  for (;;) {
    size_t n0 = tok_len(q[0]);
    bool differs[1 + 2 * SYM_MAX] = {0}, any = false;
    for (int j = 1; j < nt; j++) {
      size_t nj = tok_len(q[j]);
      differs[j] = nj != n0 || memcmp(q[j], q[0], n0);
      any |= differs[j];
    }
    const char *eol = strchr(line, '\n');
    int ll = eol ? (int)(eol - line) : (int)strlen(line);
    if (ll > 160) ll = 160;
    if (any) {
      int who = -1, nwho = 0;
      for (int i = 0; i < nsym; i++)
        if (differs[1 + 2 * i] || differs[2 + 2 * i]) who = i, nwho++;
      if (nwho > 1)
        return rill_status_new(RILL_UNIMPLEMENTED, "a size depends on more than one symbolic dimension, in: %.*s", ll, line);
      const symdim_t *s = &sd[who];
      int64_t v[3];
      const char *src[3] = {q[0], q[1 + 2 * who], q[2 + 2 * who]};
      for (int k = 0; k < 3; k++)
        if (!int_tok(src[k], tok_len(src[k]), &v[k]))
          return rill_status_new(RILL_UNIMPLEMENTED, "symbolic dimension '%s': the imported program depends on it beyond its sizes (at %s=%lld: %.*s)",
                                 s->name, s->name, (long long)s->p[0], ll, line);
      if (!strncmp(line, "const ", 6))
        return rill_status_new(RILL_UNIMPLEMENTED, "symbolic dimension '%s': a constant depends on it, in: %.*s", s->name, ll, line);
      int64_t k = (v[1] - v[0]) / (s->p[1] - s->p[0]), c = v[0] - k * s->p[0];
      if (k <= 0 || c < 0 || k * s->p[1] + c != v[1] || k * s->p[2] + c != v[2])
        return rill_status_new(RILL_UNIMPLEMENTED, "symbolic dimension '%s': a size is not k*%s + c (%lld, %lld, %lld at %s = %lld, %lld, %lld), in: %.*s",
                               s->name, s->name, (long long)v[0], (long long)v[1], (long long)v[2], s->name, (long long)s->p[0],
                               (long long)s->p[1], (long long)s->p[2], ll, line);
      if (k == 1 && c == 0) sb_printf(out, "%s", s->name);
      else if (c == 0) sb_printf(out, "mul(%s, %lld)", s->name, (long long)k);
      else if (k == 1) sb_printf(out, "add(%s, %lld)", s->name, (long long)c);
      else sb_printf(out, "add(mul(%s, %lld), %lld)", s->name, (long long)k, (long long)c);
    } else {
      if (!n0) break;
      sb_printf(out, "%.*s", (int)n0, q[0]);
      if (*q[0] == '\n') line = q[0] + 1;
    }
    for (int j = 0; j < nt; j++) q[j] += tok_len(q[j]);
  }
  return NULL;
}

rill_status_t imp_import_symbolic(const Onnx__ModelProto *model, const char *base_dir, const onnx_options_t *options,
                                     const symdim_t *sd, int nsym, const onnx_raw_t *raw, size_t nraw, onnx_result_t *out) {
  int nt = 1 + 2 * nsym;
  onnx_result_t r[1 + 2 * SYM_MAX];
  char *texts[1 + 2 * SYM_MAX];
  memset(r, 0, sizeof r);
  rill_status_t st = NULL;
  int base = options ? options->nshapes : 0;
  if (base + nsym > ONNX_MAX_SHAPES) return rill_status_new(RILL_UNIMPLEMENTED, "too many --shape options and symbolic dimensions");
  int done = 0;
  for (int t = 0; t < nt && !st; t++) {
    onnx_options_t o = options ? *options : (onnx_options_t){0};
    o.nshapes = base + nsym;
    for (int i = 0; i < nsym; i++) {
      o.shape_names[base + i] = sd[i].name;
      o.shape_values[base + i] = t > 0 && (t - 1) / 2 == i ? sd[i].p[1 + (t - 1) % 2] : sd[i].p[0];
    }
    st = imp_import_once(model, base_dir, &o, false, raw, nraw, false, &r[t]);
    if (st) {
      /* the model fails at a concrete size too: its own message, as the import would give it */
      for (int k = 0; k < t; k++) onnx_result_free(&r[k]);
      return st;
    }
    texts[t] = r[t].vmasm;
    done = t + 1;
    if (t > 0 && (r[t].weights_len != r[0].weights_len || memcmp(r[t].weights, r[0].weights, r[0].weights_len)))
      st = rill_status_new(RILL_UNIMPLEMENTED, "symbolic dimension '%s': the weights depend on it (a constant folded from its size)", sd[(t - 1) / 2].name);
    if (t > 0) { /* compared: one copy of the weights is enough */
      free(r[t].weights);
      r[t].weights = NULL;
      r[t].weights_len = 0;
    }
  }
  sbuf_t text = {0};
  if (!st) {
    for (int i = 0; i < nsym; i++)
      if (sd[i].ranged) sb_printf(&text, "dim %s in [%lld, %lld]\n", sd[i].name, (long long)sd[i].lo, (long long)sd[i].hi);
    st = merge_texts(sd, nsym, texts, &text);
  }
  if (!st && text.oom) st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  if (st) {
    free(text.p);
    for (int t = 0; t < done; t++) onnx_result_free(&r[t]);
    if (rill_status_code(st) == RILL_UNIMPLEMENTED && !strstr(rill_status_message(st), "--shape")) {
      /* the texts or weights differ: a concrete size is the way out */
      rill_status_t p = rill_status_new(RILL_UNIMPLEMENTED, "%s (give --shape NAME=N)", rill_status_message(st));
      rill_status_free(st);
      st = p;
    }
    return st;
  }
  *out = r[0];
  free(out->vmasm);
  out->vmasm = text.p;
  out->vmasm_len = text.len;
  for (int t = 1; t < done; t++) onnx_result_free(&r[t]);
  return NULL;
}
