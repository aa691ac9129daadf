/* onnx_backend.c: ONNX's own backend tests (Debian's libonnx-testdata:
 * node, pytorch-converted, pytorch-operator, simple), each model imported,
 * run on a device and its outputs compared with the expected ones.
 *
 *   onnx_backend [--device=cpu|cuda] [--O0] [--data=DIR] [--filter=TEXT] [--verbose] [--constant-inputs]
 *
 * --constant-inputs turns every graph input but the first into an
 * initializer holding the first data set's value (scales, sizes, k, axes
 * given as graph inputs), so an op's numerics are checked against ONNX's
 * expected outputs where the importer needs such values known; the data sets
 * then pass the first input alone, and the counts are not the suite's.
 *
 * DIR defaults to $RILL_ONNX_DATA, else $RILL_DEB_ROOT/usr/share/libonnx-testdata/data,
 * else /usr/share/libonnx-testdata/data. A model whose ops or attributes Rill
 * does not support counts as unsupported (the importer says why); every other
 * test must pass: within rtol 1e-3 and atol 1e-5 (ONNX's runner's rtol; its
 * atol of 1e-7 is below f32 rounding of the values these tests hold), integers
 * and booleans exactly. Prints `N passed, M failed, K unsupported`; exits 1
 * when any failed, 77 (skipped) when the data is absent. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "onnx_int.h"

static const char *const SUITES[] = {"node", "pytorch-converted", "pytorch-operator", "simple"};

typedef struct tensor {
  rill_type_t t;
  void *data;
} tensor_t;

/* A whole file (malloc), or NULL. */
static uint8_t *read_all(const char *path, size_t *out_n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = n >= 0 ? malloc(n > 0 ? (size_t)n : 1) : NULL;
  size_t got = b ? fread(b, 1, (size_t)n, f) : 0;
  fclose(f);
  if (b && got != (size_t)n) {
    free(b);
    b = NULL;
  }
  *out_n = (size_t)n;
  return b;
}

static rill_status_t read_pb(const char *path, tensor_t *out) {
  size_t n;
  uint8_t *b = read_all(path, &n);
  if (!b) return rill_status_new(RILL_IO_ERROR, "%s: cannot read", path);
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, n, b);
  free(b);
  if (!tp) return rill_status_new(RILL_MALFORMED, "%s: not a TensorProto", path);
  rill_status_t st = onnx_tensor_read(tp, NULL, NULL, &out->t, &out->data, NULL);
  onnx__tensor_proto__free_unpacked(tp, NULL);
  return st;
}

/* A SequenceProto of tensors (onnx-data.proto, which Debian does not ship:
 * read by hand: 1 name, 2 elem_type, 3 tensor_values; the other kinds of
 * items are unsupported) into out[0..*n), at most max. */
static bool varint(const uint8_t *b, size_t n, size_t *i, uint64_t *v) {
  *v = 0;
  for (int sh = 0; *i < n && sh < 64; sh += 7) {
    uint8_t c = b[(*i)++];
    *v |= (uint64_t)(c & 0x7f) << sh;
    if (c < 0x80) return true;
  }
  return false;
}

static rill_status_t seq_from(const uint8_t *b, size_t len, const char *path, tensor_t *out, int max, int *n) {
  size_t i = 0;
  rill_status_t st = NULL;
  *n = 0;
  while (!st && i < len) {
    uint64_t key, v;
    if (!varint(b, len, &i, &key)) st = rill_status_new(RILL_MALFORMED, "%s: not a SequenceProto", path);
    else if ((key & 7) == 0) {
      if (!varint(b, len, &i, &v)) st = rill_status_new(RILL_MALFORMED, "%s: not a SequenceProto", path);
      else if (key >> 3 == 2 && v != 1) st = rill_status_new(RILL_UNIMPLEMENTED, "%s: a sequence of items that are not tensors", path);
    } else if ((key & 7) == 2) {
      if (!varint(b, len, &i, &v) || v > len - i) st = rill_status_new(RILL_MALFORMED, "%s: not a SequenceProto", path);
      else if (key >> 3 == 3) {
        Onnx__TensorProto *tp = *n < max ? onnx__tensor_proto__unpack(NULL, (size_t)v, b + i) : NULL;
        if (!tp) st = rill_status_new(RILL_MALFORMED, "%s: item %d is not a TensorProto (or past %d)", path, *n, max);
        else {
          st = onnx_tensor_read(tp, NULL, NULL, &out[*n].t, &out[*n].data, NULL);
          if (!st) (*n)++;
          onnx__tensor_proto__free_unpacked(tp, NULL);
        }
      } else if (key >> 3 != 1) st = rill_status_new(RILL_UNIMPLEMENTED, "%s: a sequence of items that are not tensors", path);
      i += (size_t)v;
    } else st = rill_status_new(RILL_MALFORMED, "%s: not a SequenceProto", path);
  }
  return st;
}

/* An OptionalProto (1 name, 2 elem_type: 0 none, 1 tensor, 3 sequence;
 * 3 tensor_value, 5 sequence_value): its tensors into out[0..*n);
 * *present whether it holds a value, *inner a sequence's length (-1 for a
 * tensor). */
static rill_status_t opt_from(const uint8_t *b, size_t len, const char *path, tensor_t *out, int max, int *n, int *present, int *inner) {
  size_t i = 0;
  rill_status_t st = NULL;
  *n = *present = 0;
  *inner = -1;
  while (!st && i < len) {
    uint64_t key, v;
    if (!varint(b, len, &i, &key)) st = rill_status_new(RILL_MALFORMED, "%s: not an OptionalProto", path);
    else if ((key & 7) == 0) {
      if (!varint(b, len, &i, &v)) st = rill_status_new(RILL_MALFORMED, "%s: not an OptionalProto", path);
      else if (key >> 3 == 2 && v != 0 && v != 1 && v != 3) st = rill_status_new(RILL_UNIMPLEMENTED, "%s: an optional of a value that is not a tensor or a sequence", path);
    } else if ((key & 7) == 2) {
      if (!varint(b, len, &i, &v) || v > len - i) st = rill_status_new(RILL_MALFORMED, "%s: not an OptionalProto", path);
      else if (key >> 3 == 3) {
        Onnx__TensorProto *tp = max > 0 ? onnx__tensor_proto__unpack(NULL, (size_t)v, b + i) : NULL;
        if (!tp) st = rill_status_new(RILL_MALFORMED, "%s: its value is not a TensorProto", path);
        else {
          st = onnx_tensor_read(tp, NULL, NULL, &out[0].t, &out[0].data, NULL);
          if (!st) *n = *present = 1;
          onnx__tensor_proto__free_unpacked(tp, NULL);
        }
      } else if (key >> 3 == 5) {
        st = seq_from(b + i, (size_t)v, path, out, max, n);
        *present = 1, *inner = *n;
      } else if (key >> 3 != 1) st = rill_status_new(RILL_UNIMPLEMENTED, "%s: an optional of a value that is not a tensor or a sequence", path);
      i += (size_t)v;
    } else st = rill_status_new(RILL_MALFORMED, "%s: not an OptionalProto", path);
  }
  return st;
}

/* A graph input's or output's data: a TensorProto, a SequenceProto or an
 * OptionalProto (kind 0, 1, 2), its tensors flattened into out[0..*n);
 * *len a sequence's length or an optional's 0 or 1, *inner an optional
 * sequence's length (else -1). */
static rill_status_t read_value(const char *path, int kind, tensor_t *out, int max, int *n, int *len, int *inner) {
  *len = *inner = -1;
  if (kind == 0) {
    if (max < 1) return rill_status_new(RILL_UNIMPLEMENTED, "more than 64 inputs or outputs");
    *n = 1;
    return read_pb(path, out);
  }
  size_t blen;
  uint8_t *b = read_all(path, &blen);
  if (!b) return rill_status_new(RILL_IO_ERROR, "%s: cannot read", path);
  rill_status_t st = kind == 1 ? seq_from(b, blen, path, out, max, n) : opt_from(b, blen, path, out, max, n, len, inner);
  if (kind == 1) *len = *n;
  free(b);
  return st;
}

/* Each graph input's (initializers left out) and output's kind: 0 a
 * tensor, 1 a sequence, 2 an optional. */
static int type_kind(const Onnx__TypeProto *t) {
  return !t ? 0 : t->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ? 1 : t->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE ? 2 : 0;
}

static void model_kinds(const char *model_path, int *in_kind, int max_in, int *out_kind, int max_out) {
  size_t n;
  uint8_t *b = read_all(model_path, &n);
  Onnx__ModelProto *m = b ? onnx__model_proto__unpack(NULL, n, b) : NULL;
  free(b);
  const Onnx__GraphProto *g = m ? m->graph : NULL;
  int k = 0;
  for (size_t i = 0; g && i < g->n_input && k < max_in; i++) {
    bool init = false;
    for (size_t j = 0; j < g->n_initializer; j++)
      if (g->input[i]->name && g->initializer[j]->name && !strcmp(g->input[i]->name, g->initializer[j]->name)) init = true;
    if (!init) in_kind[k++] = type_kind(g->input[i]->type);
  }
  for (size_t i = 0; g && i < g->n_output && (int)i < max_out; i++) out_kind[i] = type_kind(g->output[i]->type);
  if (m) onnx__model_proto__free_unpacked(m, NULL);
}

static int count_files(const char *dir, const char *prefix) {
  int n = 0;
  char p[4800];
  for (;; n++) {
    struct stat s;
    snprintf(p, sizeof p, "%.4600s/%.20s_%d.pb", dir, prefix, n);
    if (stat(p, &s)) return n;
  }
}

/* --shape NAME=[D1,...] for the tensors ins[0..n) named NAME[0], ... */
static void whole_shapes(onnx_options_t *o, const char *nm, const tensor_t *ins, int n) {
  for (int j = 0; j < n; j++) {
    char spec[300], why[128];
    int w = snprintf(spec, sizeof spec, "%.200s[%d]=[", nm, j);
    for (int d = 0; d < ins[j].t.rank && w < 280; d++) w += snprintf(spec + w, sizeof spec - (size_t)w, "%s%lld", d ? "," : "", (long long)ins[j].t.dims[d]);
    snprintf(spec + w, sizeof spec - (size_t)w, "]");
    onnx_options_add_shape(o, spec, why, sizeof why);
  }
}

/* dim_param sizes from the first data set's inputs; a sequence input's
 * length (len, by graph input; -1 for a tensor) as NAME=K and its items'
 * shapes; an optional's presence as NAME=0 or 1, its value's shape or, a
 * sequence (inner its length), its length and items' shapes; the values
 * next in ins (cnt of them) */
static void shapes_from_inputs(const char *model_path, const tensor_t *ins, int nin, const int *cnt, const int *len, const int *inner, onnx_options_t *o) {
  size_t n;
  uint8_t *b = read_all(model_path, &n);
  Onnx__ModelProto *m = b ? onnx__model_proto__unpack(NULL, n, b) : NULL;
  free(b);
  if (!m) return;
  const Onnx__GraphProto *g = m->graph;
  int k = 0, gi = 0;
  for (size_t i = 0; g && i < g->n_input; i++) {
    bool init = false;
    for (size_t j = 0; j < g->n_initializer; j++)
      if (g->input[i]->name && g->initializer[j]->name && !strcmp(g->input[i]->name, g->initializer[j]->name)) init = true;
    if (init) continue;
    if (gi < 64 && len[gi] >= 0) {
      char spec[256], why[128];
      const char *nm = g->input[i]->name ? g->input[i]->name : "";
      snprintf(spec, sizeof spec, "%.200s=%d", nm, len[gi]);
      onnx_options_add_shape(o, spec, why, sizeof why);
      if (k + cnt[gi] <= nin) {
        if (inner[gi] >= 0) { /* an optional sequence */
          char in0[256];
          snprintf(in0, sizeof in0, "%.200s[0]", nm);
          snprintf(spec, sizeof spec, "%.220s=%d", in0, inner[gi]);
          onnx_options_add_shape(o, spec, why, sizeof why);
          whole_shapes(o, in0, ins + k, cnt[gi]);
        } else {
          whole_shapes(o, nm, ins + k, cnt[gi]);
        }
      }
      k += cnt[gi++];
      continue;
    }
    gi++;
    const Onnx__TypeProto *tp = g->input[i]->type;
    if (k < nin && tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && tp->tensor_type->shape) {
      const Onnx__TensorShapeProto *s = tp->tensor_type->shape;
      for (size_t d = 0; d < s->n_dim && (int)d < ins[k].t.rank; d++)
        if (s->dim[d]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && o->nshapes < ONNX_MAX_SHAPES) {
          char spec[256];
          char why[128];
          snprintf(spec, sizeof spec, "%s=%lld", s->dim[d]->dim_param, (long long)ins[k].t.dims[d]);
          onnx_options_add_shape(o, spec, why, sizeof why);
        }
    }
    k++;
  }
  onnx__model_proto__free_unpacked(m, NULL);
}

static bool opt_const; /* --constant-inputs */

/* The model with graph inputs 1.. as initializers from data set ds, written
 * to a temporary file whose path goes to out (size n); false when it cannot. */
static bool const_model(const char *model, const char *ds, char *out, size_t n) {
  size_t len;
  uint8_t *b = read_all(model, &len);
  Onnx__ModelProto *m = b ? onnx__model_proto__unpack(NULL, len, b) : NULL;
  free(b);
  if (!m || !m->graph) {
    if (m) onnx__model_proto__free_unpacked(m, NULL);
    return false;
  }
  Onnx__GraphProto *g = m->graph;
  size_t keep = 0, k = 0;
  bool ok = true;
  for (size_t i = 0; i < g->n_input; i++) {
    bool init = false;
    for (size_t j = 0; j < g->n_initializer; j++)
      if (g->input[i]->name && g->initializer[j]->name && !strcmp(g->input[i]->name, g->initializer[j]->name)) init = true;
    if (init || k++ == 0) {
      g->input[keep++] = g->input[i];
      continue;
    }
    char p[4800];
    snprintf(p, sizeof p, "%.4600s/input_%zu.pb", ds, k - 1);
    uint8_t *tb = read_all(p, &len);
    Onnx__TensorProto *tp = tb ? onnx__tensor_proto__unpack(NULL, len, tb) : NULL;
    free(tb);
    Onnx__TensorProto **q = tp ? realloc(g->initializer, (g->n_initializer + 1) * sizeof *q) : NULL;
    if (!q) {
      if (tp) onnx__tensor_proto__free_unpacked(tp, NULL);
      ok = false;
      g->input[keep++] = g->input[i];
      continue;
    }
    free(tp->name);
    tp->name = strdup(g->input[i]->name ? g->input[i]->name : "");
    g->initializer = q;
    g->initializer[g->n_initializer++] = tp;
    onnx__value_info_proto__free_unpacked(g->input[i], NULL);
  }
  g->n_input = keep;
  size_t sz = onnx__model_proto__get_packed_size(m);
  uint8_t *pb = malloc(sz ? sz : 1);
  if (pb) onnx__model_proto__pack(m, pb);
  onnx__model_proto__free_unpacked(m, NULL);
  snprintf(out, n, "/tmp/rill_onnx_backend_XXXXXX");
  int fd = pb && ok ? mkstemp(out) : -1;
  FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  ok = f && fwrite(pb, 1, sz, f) == sz;
  if (f) ok = !fclose(f) && ok;
  free(pb);
  if (!ok && fd >= 0) remove(out);
  return ok;
}

static bool same_type(const rill_type_t *a, const rill_type_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* Compares; writes why into msg on a mismatch. */
static bool compare(const tensor_t *want, const rill_type_t *gt, const void *got, char *msg, size_t nmsg) {
  char b1[96], b2[96];
  if (want->t.dtype == RILL_U16 && gt->dtype == RILL_BF16) ((tensor_t *)want)->t.dtype = RILL_BF16; /* bf16 written as u16 (run_test) */
  if (!same_type(&want->t, gt)) {
    snprintf(msg, nmsg, "result %s, expected %s", rill_type_format(gt, b1, sizeof b1), rill_type_format(&want->t, b2, sizeof b2));
    return false;
  }
  size_t n = rill_type_numel(gt), bad = 0, worst = 0;
  double worst_err = -1;
  bool flt = want->t.dtype == RILL_F16 || want->t.dtype == RILL_BF16 || want->t.dtype == RILL_F32 || want->t.dtype == RILL_F64;
  double rtol = want->t.dtype == RILL_F16 || want->t.dtype == RILL_BF16 ? 1e-2 : 1e-3, atol = want->t.dtype == RILL_F16 || want->t.dtype == RILL_BF16 ? 1e-3 : 1e-5;
  for (size_t i = 0; i < n; i++) {
    bool ok;
    double e = 0;
    if (flt) {
      double w = rill_element_get(want->t.dtype, want->data, i), g = rill_element_get(gt->dtype, got, i);
      if (isnan(w) || isnan(g)) ok = isnan(w) && isnan(g);
      else if (isinf(w) || isinf(g)) ok = w == g;
      else {
        e = fabs(g - w);
        ok = e <= atol + rtol * fabs(w);
      }
    } else {
      ok = rill_element_get_int(want->t.dtype, want->data, i) == rill_element_get_int(gt->dtype, got, i);
      e = ok ? 0 : 1;
    }
    if (!ok) {
      bad++;
      if (e > worst_err || worst_err < 0) { worst_err = e; worst = i; }
    }
  }
  if (bad) {
    snprintf(msg, nmsg, "%zu of %zu elements differ; worst at %zu: got %.9g, expected %.9g", bad, n, worst,
             rill_element_get(gt->dtype, got, worst), rill_element_get(want->t.dtype, want->data, worst));
    return false;
  }
  return true;
}

typedef enum { PASS, FAIL, UNSUPPORTED } outcome_t;

static bool opt_O0; /* assemble at -O0 (no optimising passes) */

static outcome_t run_test(const char *dir, const char *device, char *msg, size_t nmsg) {
  char model[4600], ds[4700], p[4800];
  snprintf(model, sizeof model, "%.4000s/model.onnx", dir);
  /* the data sets */
  int nsets = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (!strncmp(e->d_name, "test_data_set_", 14)) nsets++;
  if (d) closedir(d);
  if (!nsets) {
    snprintf(msg, nmsg, "no test_data_set_* folders");
    return FAIL;
  }
  outcome_t result = PASS;
  char tmp_model[64] = "";
  if (opt_const) {
    snprintf(ds, sizeof ds, "%.4000s/test_data_set_0", dir);
    if (!const_model(model, ds, tmp_model, sizeof tmp_model)) {
      snprintf(msg, nmsg, "cannot make the model with constant inputs");
      return FAIL;
    }
    snprintf(model, sizeof model, "%s", tmp_model);
  }
  rill_asm_options_t ao = {.no_opt = opt_O0};
  rill_module_t *mod = NULL;
  rill_vm_t *vm = NULL;
  for (int s = 0; s < nsets && result == PASS; s++) {
    snprintf(ds, sizeof ds, "%.4000s/test_data_set_%d", dir, s);
    int nin_files = count_files(ds, "input"), nout_files = count_files(ds, "output");
    if (opt_const && nin_files > 1) nin_files = 1; /* the rest are the model's initializers */
    tensor_t ins[64] = {0}, outs[64] = {0};
    if (nin_files > 64 || nout_files > 64) {
      snprintf(msg, nmsg, "too many inputs or outputs");
      return FAIL;
    }
    /* a sequence's or an optional's values are parameters (results) of
     * their own, in order */
    int in_kind[64] = {0}, out_kind[64] = {0}, cnt[64], len[64], inner[64], nin = 0, nout = 0, got, l2, i2;
    model_kinds(model, in_kind, 64, out_kind, 64);
    rill_status_t st = NULL;
    for (int i = 0; i < nin_files && !st; i++) {
      snprintf(p, sizeof p, "%.4600s/input_%d.pb", ds, i);
      st = read_value(p, in_kind[i], ins + nin, 64 - nin, &got, &len[i], &inner[i]);
      cnt[i] = got;
      nin += got;
    }
    for (int i = 0; i < nout_files && !st; i++) {
      snprintf(p, sizeof p, "%.4600s/output_%d.pb", ds, i);
      st = read_value(p, out_kind[i], outs + nout, 64 - nout, &got, &l2, &i2);
      nout += got;
    }
    if (st) {
      /* data the language cannot hold (a dtype, an optional or a sequence):
       * unsupported where the model is too */
      onnx_options_t o = {0};
      rill_status_t st2 = mod ? NULL : onnx_load_module(model, &o, &ao, &mod);
      bool unsup = rill_status_code(st) == RILL_UNIMPLEMENTED || (st2 && rill_status_code(st2) == RILL_UNIMPLEMENTED);
      result = unsup ? UNSUPPORTED : FAIL;
      snprintf(msg, nmsg, "%s", rill_status_message(st2 && unsup ? st2 : st));
      rill_status_free(st);
      rill_status_free(st2);
    }
    if (result == PASS && !mod) {
      onnx_options_t o = {0};
      shapes_from_inputs(model, ins, nin, cnt, len, inner, &o);
      st = onnx_load_module(model, &o, &ao, &mod);
      onnx_options_free(&o);
      if (st) {
        result = rill_status_code(st) == RILL_UNIMPLEMENTED ? UNSUPPORTED : FAIL;
        snprintf(msg, nmsg, "%s", rill_status_message(st));
        rill_status_free(st);
      } else if ((st = rill_vm_create(NULL, mod, device, &vm))) {
        result = FAIL;
        snprintf(msg, nmsg, "%s", rill_status_message(st));
        rill_status_free(st);
      }
    }
    rill_tensor_t *args[64] = {0};
    int np = 0, nr = 0;
    bool bf16_as_u16 = false;
    if (result == PASS) {
      rill_module_function(mod, "main", &np, &nr);
      if (np != nin || nr != nout) {
        result = FAIL;
        snprintf(msg, nmsg, "@main takes %d inputs and gives %d results; the data set has %d and %d", np, nr, nin, nout);
      }
    }
    for (int i = 0; result == PASS && i < nin; i++) {
      rill_type_t pt;
      const char *pn;
      rill_module_param_type(mod, "main", i, &pt, &pn);
      char b1[96], b2[96];
      /* ONNX 1.12's data sets write a bf16 tensor as u16, its bits (numpy has
       * no bf16); in those tests (CastLike's) the data's shapes can differ
       * from the model's too, which no runtime that checks them runs */
      if (pt.dtype == RILL_BF16 && ins[i].t.dtype == RILL_U16) ins[i].t.dtype = RILL_BF16, bf16_as_u16 = true;
      if (!same_type(&pt, &ins[i].t) && bf16_as_u16) {
        result = UNSUPPORTED;
        snprintf(msg, nmsg, "input %d: @main takes %s, the data set (its bf16 written as u16) has %s", i, rill_type_format(&pt, b1, sizeof b1),
                 rill_type_format(&ins[i].t, b2, sizeof b2));
      } else if (!same_type(&pt, &ins[i].t)) {
        result = FAIL;
        snprintf(msg, nmsg, "input %d: @main takes %s, the data is %s", i, rill_type_format(&pt, b1, sizeof b1), rill_type_format(&ins[i].t, b2, sizeof b2));
      } else if ((st = rill_tensor_create(vm, &ins[i].t, ins[i].data, &args[i]))) {
        result = FAIL;
        snprintf(msg, nmsg, "%s", rill_status_message(st));
        rill_status_free(st);
      }
    }
    rill_tensor_t **res = NULL;
    int nres = 0;
    if (result == PASS && (st = rill_vm_invoke(vm, "main", args, nin, &res, &nres))) {
      /* values the program refuses as unsupported at run time (a flag the
       * importer named unsupported_..., which bind_dims refuses): unsupported,
       * with the reason; any other failure (a device lacking an op too) fails */
      result = rill_status_code(st) == RILL_UNIMPLEMENTED && strstr(rill_status_message(st), "bind_dims: unsupported_") ? UNSUPPORTED : FAIL;
      snprintf(msg, nmsg, "run: %s", rill_status_message(st));
      rill_status_free(st);
    }
    for (int i = 0; result == PASS && i < nres; i++) {
      size_t nb = rill_tensor_nbytes(res[i]);
      void *h = malloc(nb ? nb : 1);
      if (!h || (st = rill_tensor_read(res[i], h, nb))) {
        result = FAIL;
        snprintf(msg, nmsg, "reading result %d: %s", i, st ? rill_status_message(st) : "out of memory");
        rill_status_free(st);
      } else {
        char why[512];
        if (!compare(&outs[i], rill_tensor_type(res[i]), h, why, sizeof why)) {
          result = FAIL;
          snprintf(msg, nmsg, "data set %d, output %d: %s", s, i, why);
        }
      }
      free(h);
    }
    if (res) rill_results_free(vm, res, nres);
    for (int i = 0; i < nin; i++) {
      if (args[i]) rill_tensor_release(args[i]);
      free(ins[i].data);
    }
    for (int i = 0; i < nout; i++) free(outs[i].data);
  }
  rill_vm_destroy(vm);
  if (mod) rill_module_release(mod);
  if (*tmp_model) remove(tmp_model);
  return result;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  const char *device = "cpu", *root = NULL, *filter = NULL;
  bool verbose = false;
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--device=", 9)) device = argv[i] + 9;
    else if (!strncmp(argv[i], "--data=", 7)) root = argv[i] + 7;
    else if (!strncmp(argv[i], "--filter=", 9)) filter = argv[i] + 9;
    else if (!strcmp(argv[i], "--verbose")) verbose = true;
    else if (!strcmp(argv[i], "--O0")) opt_O0 = true;
    else if (!strcmp(argv[i], "--constant-inputs")) opt_const = true;
    else {
      fprintf(stderr, "usage: onnx_backend [--device=cpu|cuda] [--O0] [--data=DIR] [--filter=TEXT] [--verbose] [--constant-inputs]\n");
      return 2;
    }
  }
  const char *why;
  if (!onnx_available(&why)) {
    printf("skipped: %s\n", why);
    return 77;
  }
  char rootbuf[4096];
  if (!root) root = getenv("RILL_ONNX_DATA");
  if (!root && getenv("RILL_DEB_ROOT")) {
    snprintf(rootbuf, sizeof rootbuf, "%s/usr/share/libonnx-testdata/data", getenv("RILL_DEB_ROOT"));
    struct stat s;
    if (!stat(rootbuf, &s)) root = rootbuf;
  }
  if (!root) root = "/usr/share/libonnx-testdata/data";
  struct stat s;
  if (stat(root, &s)) {
    printf("skipped: the ONNX backend tests are not at %s (install libonnx-testdata)\n", root);
    return 77;
  }
  if (!rill_device_usable(device, &why)) {
    printf("skipped: device %s is not usable: %s\n", device, why);
    return 77;
  }
  int pass = 0, fail = 0, unsup = 0;
  for (size_t k = 0; k < sizeof SUITES / sizeof SUITES[0]; k++) {
    char sd[4200];
    snprintf(sd, sizeof sd, "%.4000s/%s", root, SUITES[k]);
    DIR *d = opendir(sd);
    if (!d) continue;
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      if (filter && !strstr(e->d_name, filter)) continue;
      if (nn == cap) {
        cap = cap ? 2 * cap : 256;
        char **q = realloc(names, cap * sizeof *q);
        if (!q) break;
        names = q;
      }
      names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    if (nn) qsort(names, nn, sizeof *names, cmp_str); /* names is NULL when the filter matches none */
    int sp = 0, sf = 0, su = 0;
    for (size_t i = 0; i < nn; i++) {
      char dir[4600], msg[2048] = "";
      snprintf(dir, sizeof dir, "%.4200s/%.300s", sd, names[i]);
      outcome_t r = run_test(dir, device, msg, sizeof msg);
      if (r == PASS) sp++;
      else if (r == FAIL) sf++;
      else su++;
      if (r == FAIL) printf("FAIL %s/%s: %s\n", SUITES[k], names[i], msg);
      else if (verbose) printf("%s %s/%s%s%s\n", r == PASS ? "pass" : "unsupported", SUITES[k], names[i], *msg ? ": " : "", msg);
      fflush(stdout);
      free(names[i]);
    }
    free(names);
    printf("%s: %d passed, %d failed, %d unsupported\n", SUITES[k], sp, sf, su);
    pass += sp;
    fail += sf;
    unsup += su;
  }
  printf("%d passed, %d failed, %d unsupported (device %s, %s)\n", pass, fail, unsup, device, opt_O0 ? "-O0" : "-O1");
  return fail ? 1 : 0;
}
