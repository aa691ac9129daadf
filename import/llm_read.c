/* llm_read.c: a Hugging Face model folder's config.json and safetensors
 * headers, and the weights each architecture reads (names as
 * transformers saves them, shapes from the config). Only headers are read:
 * the tensors' data stays in the files for the assembler to map. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "files.h"
#include "llm_int.h"

#define ESC(s) rill_escape((s), strlen(s), (char[256]){0}, 256)

/* ---- files ---- */
static rill_status_t parse_json(const char *path, const char *what, cJSON **out) {
  uint8_t *bytes;
  size_t len;
  rill_status_t st = import_read_file(path, (size_t)64 << 20, &bytes, &len);
  if (st) return st;
  char *text = (char *)bytes;
  const char *end = NULL;
  *out = cJSON_ParseWithOpts(text, &end, true);
  if (!*out) {
    size_t at = end && end >= text ? (size_t)(end - text) : 0, line = 1;
    for (size_t i = 0; i < at; i++) line += text[i] == '\n';
    free(text);
    return rill_status_new(RILL_MALFORMED, "%s: %s is not valid JSON (near line %zu)", ESC(path), what, line);
  }
  free(text);
  if (!cJSON_IsObject(*out)) {
    cJSON_Delete(*out);
    *out = NULL;
    return rill_status_new(RILL_MALFORMED, "%s: %s is not a JSON object", ESC(path), what);
  }
  return NULL;
}

/* ---- config.json ---- */
typedef struct cfg_ctx {
  const cJSON *j;
  const char *file;   /* "config.json" */
} cfg_ctx_t;

/* Integer `key`: absent or null gives def (required: an error); else an
 * integer in [lo, hi]. */
static rill_status_t cfg_int(const cfg_ctx_t *c, const char *key, bool required, int64_t def, int64_t lo, int64_t hi, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
  if (!v || cJSON_IsNull(v)) {
    if (required) return rill_status_new(RILL_MALFORMED, "%s: \"%s\" is missing", c->file, key);
    *out = def;
    return NULL;
  }
  double d = v->valuedouble;
  if (!cJSON_IsNumber(v) || d != floor(d) || d < (double)lo || d > (double)hi)
    return rill_status_new(RILL_MALFORMED, "%s: \"%s\" must be an integer in [%lld, %lld]", c->file, key, (long long)lo, (long long)hi);
  *out = (int64_t)d;
  return NULL;
}

static rill_status_t cfg_num(const cfg_ctx_t *c, const cJSON *obj, const char *key, double def, double lo, double hi, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return NULL;
  }
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
    return rill_status_new(RILL_MALFORMED, "%s: \"%s\" must be a number in [%g, %g]", c->file, key, lo, hi);
  *out = v->valuedouble;
  return NULL;
}

static rill_status_t cfg_bool(const cfg_ctx_t *c, const char *key, bool def, bool *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return NULL;
  }
  if (!cJSON_IsBool(v)) return rill_status_new(RILL_MALFORMED, "%s: \"%s\" must be true or false", c->file, key);
  *out = cJSON_IsTrue(v);
  return NULL;
}

/* A string `key` (absent or null: def) into out. */
static rill_status_t cfg_str(const cfg_ctx_t *c, const cJSON *obj, const char *key, const char *def, char *out, size_t size) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v || cJSON_IsNull(v)) {
    snprintf(out, size, "%s", def);
    return NULL;
  }
  if (!cJSON_IsString(v)) return rill_status_new(RILL_MALFORMED, "%s: \"%s\" must be a string", c->file, key);
  if (strlen(v->valuestring) >= size)
    return rill_status_new(RILL_UNIMPLEMENTED, "%s: \"%s\" is \"%s\", which is not one this reader knows", c->file, key, ESC(v->valuestring));
  snprintf(out, size, "%s", v->valuestring);
  return NULL;
}

/* eos_token_id: an integer or a list of them (null: none). Sets *found. */
static rill_status_t cfg_eos(const cfg_ctx_t *c, llm_config_t *cfg, bool *found) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, "eos_token_id");
  *found = v != NULL;
  if (!v || cJSON_IsNull(v)) return NULL;
  cfg->neos = 0;
  if (cJSON_IsNumber(v)) return cfg_int(c, "eos_token_id", true, 0, 0, cfg->vocab - 1, &cfg->eos[cfg->neos++]);
  if (!cJSON_IsArray(v)) return rill_status_new(RILL_MALFORMED, "%s: \"eos_token_id\" must be an integer or a list of them", c->file);
  const cJSON *e;
  cJSON_ArrayForEach(e, v) {
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 || e->valuedouble >= (double)cfg->vocab)
      return rill_status_new(RILL_MALFORMED, "%s: \"eos_token_id\" holds something other than a token id below the vocabulary's %lld",
                             c->file, (long long)cfg->vocab);
    if (cfg->neos == LLM_MAX_EOS) return rill_status_new(RILL_UNIMPLEMENTED, "%s: more than %d eos_token_id values", c->file, LLM_MAX_EOS);
    cfg->eos[cfg->neos++] = (int64_t)e->valuedouble;
  }
  return NULL;
}

#define TRY(x) do { rill_status_t st_ = (x); if (st_) return st_; } while (0)
#define BIG ((int64_t)1 << 31)

static rill_status_t read_rope(const cfg_ctx_t *c, llm_config_t *cfg) {
  snprintf(cfg->rope_scaling, sizeof cfg->rope_scaling, "none");
  cfg->rope_factor = 1;
  cfg->rope_low = 1;
  cfg->rope_high = 4;
  cfg->rope_original_max = 8192;
  const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c->j, "rope_scaling");
  /* transformers 5 writes the theta and the scaling as one "rope_parameters" */
  if (!rs || cJSON_IsNull(rs)) rs = cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters");
  if (!rs || cJSON_IsNull(rs)) return NULL;
  if (!cJSON_IsObject(rs)) return rill_status_new(RILL_MALFORMED, "%s: \"rope_scaling\" must be an object or null", c->file);
  char type[32];
  const char *key = cJSON_GetObjectItemCaseSensitive(rs, "rope_type") ? "rope_type" : "type";
  TRY(cfg_str(c, rs, key, "default", type, sizeof type));
  if (!strcmp(type, "default")) return NULL;
  if (strcmp(type, "linear") && strcmp(type, "llama3"))
    return rill_status_new(RILL_UNIMPLEMENTED, "%s: rope_scaling type \"%s\" is not supported (default, linear and llama3 are)", c->file, ESC(type));
  snprintf(cfg->rope_scaling, sizeof cfg->rope_scaling, "%s", !strcmp(type, "linear") ? "linear" : "llama3");
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(rs, "factor");
  if (!f || !cJSON_IsNumber(f)) return rill_status_new(RILL_MALFORMED, "%s: rope_scaling \"%s\" needs a number \"factor\"", c->file, type);
  TRY(cfg_num(c, rs, "factor", 1, 1e-6, 1e9, &cfg->rope_factor));
  if (!strcmp(type, "llama3")) {
    double om;
    TRY(cfg_num(c, rs, "low_freq_factor", 1, 1e-9, 1e9, &cfg->rope_low));
    TRY(cfg_num(c, rs, "high_freq_factor", 4, 1e-9, 1e9, &cfg->rope_high));
    TRY(cfg_num(c, rs, "original_max_position_embeddings", 8192, 1, 1e12, &om));
    if (om != floor(om)) return rill_status_new(RILL_MALFORMED, "%s: \"original_max_position_embeddings\" must be an integer", c->file);
    cfg->rope_original_max = (int64_t)om;
    if (!(cfg->rope_high > cfg->rope_low))
      return rill_status_new(RILL_MALFORMED, "%s: rope_scaling's high_freq_factor must exceed low_freq_factor", c->file);
  }
  return NULL;
}

static rill_status_t read_llama(const cfg_ctx_t *c, llm_config_t *cfg) {
  TRY(cfg_int(c, "hidden_size", true, 0, 1, BIG, &cfg->hidden));
  TRY(cfg_int(c, "num_hidden_layers", true, 0, 1, 100000, &cfg->layers));
  TRY(cfg_int(c, "num_attention_heads", true, 0, 1, 100000, &cfg->heads));
  TRY(cfg_int(c, "num_key_value_heads", false, cfg->heads, 1, cfg->heads, &cfg->kv_heads));
  TRY(cfg_int(c, "vocab_size", true, 0, 1, BIG, &cfg->vocab));
  TRY(cfg_int(c, "intermediate_size", true, 0, 1, BIG, &cfg->intermediate));
  TRY(cfg_int(c, "max_position_embeddings", false, 2048, 1, BIG, &cfg->max_positions));
  if (cfg->heads % cfg->kv_heads)
    return rill_status_new(RILL_MALFORMED, "%s: num_attention_heads (%lld) is not a multiple of num_key_value_heads (%lld)", c->file,
                           (long long)cfg->heads, (long long)cfg->kv_heads);
  if (cfg->hidden % cfg->heads && !cJSON_GetObjectItemCaseSensitive(c->j, "head_dim"))
    return rill_status_new(RILL_MALFORMED, "%s: hidden_size (%lld) is not a multiple of num_attention_heads (%lld), and no head_dim", c->file,
                           (long long)cfg->hidden, (long long)cfg->heads);
  TRY(cfg_int(c, "head_dim", false, cfg->hidden / cfg->heads, 1, 65536, &cfg->head_dim));
  double prf;
  TRY(cfg_num(c, c->j, "partial_rotary_factor", 1, 1e-9, 1, &prf));
  cfg->rotary_dim = (int64_t)((double)cfg->head_dim * prf) / 2 * 2;
  if (cfg->rotary_dim < 2) return rill_status_new(RILL_MALFORMED, "%s: partial_rotary_factor leaves no rotary dimensions", c->file);
  TRY(cfg_num(c, c->j, "rms_norm_eps", 1e-6, 0, 1, &cfg->eps));
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters");
  if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp)) return rill_status_new(RILL_MALFORMED, "%s: \"rope_parameters\" must be an object or null", c->file);
  TRY(cfg_num(c, cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") ? rp : c->j, "rope_theta", 10000, 1e-9, 1e30,
              &cfg->rope_theta));
  TRY(read_rope(c, cfg));
  TRY(cfg_bool(c, "tie_word_embeddings", false, &cfg->tie));
  bool qwen2 = !strcmp(cfg->model_type, "qwen2");
  bool attention_bias;
  TRY(cfg_bool(c, "attention_bias", false, &attention_bias));
  cfg->qkv_bias = qwen2 || attention_bias;
  cfg->o_bias = attention_bias;
  TRY(cfg_bool(c, "mlp_bias", false, &cfg->mlp_bias));
  TRY(cfg_str(c, c->j, "hidden_act", "silu", cfg->act, sizeof cfg->act));
  if (!strcmp(cfg->act, "gelu_pytorch_tanh") || !strcmp(cfg->act, "gelu_new")) snprintf(cfg->act, sizeof cfg->act, "gelu_tanh");
  if (strcmp(cfg->act, "silu") && strcmp(cfg->act, "gelu") && strcmp(cfg->act, "gelu_tanh"))
    return rill_status_new(RILL_UNIMPLEMENTED, "%s: hidden_act \"%s\" is not supported (silu, gelu, gelu_pytorch_tanh are)", c->file, ESC(cfg->act));
  /* Mistral's sliding window (Qwen2's only with use_sliding_window). */
  bool use_sw = true;
  if (qwen2) TRY(cfg_bool(c, "use_sliding_window", false, &use_sw));
  if (use_sw) TRY(cfg_int(c, "sliding_window", false, 0, 0, INT64_MAX / 2, &cfg->sliding_window));
  cfg->attn_scale = 1.0 / sqrt((double)cfg->head_dim);
  return NULL;
}

static rill_status_t read_gpt2(const cfg_ctx_t *c, llm_config_t *cfg) {
  TRY(cfg_int(c, "n_embd", true, 0, 1, BIG, &cfg->hidden));
  TRY(cfg_int(c, "n_layer", true, 0, 1, 100000, &cfg->layers));
  TRY(cfg_int(c, "n_head", true, 0, 1, 100000, &cfg->heads));
  TRY(cfg_int(c, "vocab_size", true, 0, 1, BIG, &cfg->vocab));
  TRY(cfg_int(c, "n_positions", false, 1024, 1, BIG, &cfg->max_positions));
  TRY(cfg_int(c, "n_inner", false, 4 * cfg->hidden, 1, BIG, &cfg->intermediate));
  if (cfg->hidden % cfg->heads)
    return rill_status_new(RILL_MALFORMED, "%s: n_embd (%lld) is not a multiple of n_head (%lld)", c->file, (long long)cfg->hidden,
                           (long long)cfg->heads);
  cfg->kv_heads = cfg->heads;
  cfg->head_dim = cfg->hidden / cfg->heads;
  TRY(cfg_num(c, c->j, "layer_norm_epsilon", 1e-5, 0, 1, &cfg->eps));
  TRY(cfg_bool(c, "tie_word_embeddings", true, &cfg->tie));
  cfg->qkv_bias = cfg->o_bias = cfg->mlp_bias = true;
  TRY(cfg_str(c, c->j, "activation_function", "gelu_new", cfg->act, sizeof cfg->act));
  if (!strcmp(cfg->act, "gelu_new") || !strcmp(cfg->act, "gelu_fast") || !strcmp(cfg->act, "gelu_pytorch_tanh"))
    snprintf(cfg->act, sizeof cfg->act, "gelu_tanh");
  if (strcmp(cfg->act, "gelu_tanh") && strcmp(cfg->act, "gelu") && strcmp(cfg->act, "relu") && strcmp(cfg->act, "silu"))
    return rill_status_new(RILL_UNIMPLEMENTED, "%s: activation_function \"%s\" is not supported (gelu_new, gelu, relu, silu are)", c->file,
                           ESC(cfg->act));
  bool scale, reorder;
  TRY(cfg_bool(c, "scale_attn_weights", true, &scale));
  TRY(cfg_bool(c, "scale_attn_by_inverse_layer_idx", false, &cfg->scale_by_layer));
  TRY(cfg_bool(c, "reorder_and_upcast_attn", false, &reorder)); /* numerics only: attention accumulates in f32 anyway */
  cfg->attn_scale = scale ? 1.0 / sqrt((double)cfg->head_dim) : 1.0;
  snprintf(cfg->rope_scaling, sizeof cfg->rope_scaling, "none");
  return NULL;
}

/* model_type (or the first of architectures) names the family. */
static rill_status_t read_config(const char *dir, llm_config_t *cfg) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/config.json", dir);
  cJSON *j;
  TRY(parse_json(path, "config.json", &j));
  cfg_ctx_t c = {j, "config.json"};
  memset(cfg, 0, sizeof *cfg);
  rill_status_t st = cfg_str(&c, j, "model_type", "", cfg->model_type, sizeof cfg->model_type);
  const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
  const cJSON *a0 = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
  const char *an = cJSON_IsString(a0) ? a0->valuestring : "";
  if (!st && !cfg->model_type[0]) {
    static const char *const by_arch[][2] = {{"LlamaForCausalLM", "llama"}, {"MistralForCausalLM", "mistral"},
                                              {"Qwen2ForCausalLM", "qwen2"}, {"GPT2LMHeadModel", "gpt2"}};
    for (size_t i = 0; i < sizeof by_arch / sizeof *by_arch; i++)
      if (!strcmp(an, by_arch[i][0])) snprintf(cfg->model_type, sizeof cfg->model_type, "%s", by_arch[i][1]);
    if (!cfg->model_type[0]) st = rill_status_new(RILL_MALFORMED, "config.json: no \"model_type\" and no architecture this reader knows (\"%s\")", ESC(an));
  }
  if (!st && an[0] && strstr(an, "ForCausalLM") == NULL && strcmp(an, "GPT2LMHeadModel") != 0)
    st = rill_status_new(RILL_UNIMPLEMENTED, "config.json: architecture \"%s\" has no language-model head (a ...ForCausalLM or GPT2LMHeadModel is needed)", ESC(an));
  if (!st) {
    if (!strcmp(cfg->model_type, "llama") || !strcmp(cfg->model_type, "mistral") || !strcmp(cfg->model_type, "qwen2")) {
      cfg->family = LLM_LLAMA;
      st = read_llama(&c, cfg);
    } else if (!strcmp(cfg->model_type, "gpt2")) {
      cfg->family = LLM_GPT2;
      st = read_gpt2(&c, cfg);
    } else {
      st = rill_status_new(RILL_UNIMPLEMENTED, "config.json: model_type \"%s\" (architecture \"%s\") is not supported (llama, mistral, qwen2, gpt2 are)",
                           ESC(cfg->model_type), ESC(an));
    }
  }
  /* The end-of-sequence ids: generation_config.json's where it has them
   * (as transformers' generate reads them), else config.json's, else the
   * class's default (Llama and Mistral 2, GPT-2 50256). */
  bool found = false;
  cfg->neos = 0;
  if (!st) {
    st = cfg_eos(&c, cfg, &found);
    int64_t pad = -1;
    if (!st) st = cfg_int(&c, "pad_token_id", false, -1, -1, cfg->vocab - 1, &pad);
    cfg->pad = pad;
  }
  cJSON_Delete(j);
  if (st) return st;
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  struct stat sb;
  if (stat(path, &sb) == 0) {
    TRY(parse_json(path, "generation_config.json", &j));
    cfg_ctx_t g = {j, "generation_config.json"};
    bool gfound;
    st = cfg_eos(&g, cfg, &gfound);
    found |= gfound;
    int64_t pad = -1;
    if (!st) st = cfg_int(&g, "pad_token_id", false, -1, -1, cfg->vocab - 1, &pad);
    if (!st && pad >= 0) cfg->pad = pad;
    cJSON_Delete(j);
    if (st) return st;
  }
  if (!found && strcmp(cfg->model_type, "qwen2") != 0) {
    int64_t def = cfg->family == LLM_GPT2 ? 50256 : 2;
    if (def < cfg->vocab) cfg->eos[cfg->neos++] = def;
  }
  if (cfg->pad < 0) cfg->pad = cfg->neos ? cfg->eos[0] : 0;
  return NULL;
}

/* ---- safetensors headers ---- */
static bool st_dtype(const char *s, rill_dtype_t *d) {
  static const struct { const char *name; rill_dtype_t d; } T[] = {
      {"F16", RILL_F16}, {"BF16", RILL_BF16}, {"F32", RILL_F32}, {"F64", RILL_F64}, {"I8", RILL_I8},
      {"U8", RILL_U8},   {"I32", RILL_I32},   {"I64", RILL_I64}, {"BOOL", RILL_BOOL}, {"I16", RILL_I16},
      {"U16", RILL_U16}, {"U32", RILL_U32},   {"U64", RILL_U64}};
  for (size_t i = 0; i < sizeof T / sizeof *T; i++)
    if (!strcmp(s, T[i].name)) { *d = T[i].d; return true; }
  return false;
}

static rill_status_t add_tensor(llm_model_t *m, size_t *cap, const char *name, const rill_type_t *t, int file) {
  if (m->ntensors == *cap) {
    size_t nc = *cap ? *cap * 2 : 256;
    llm_tensor_t *nt = realloc(m->tensors, nc * sizeof *nt);
    if (!nt) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
    m->tensors = nt;
    *cap = nc;
  }
  llm_tensor_t *x = &m->tensors[m->ntensors];
  if (!(x->name = strdup(name))) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  x->type = *t;
  x->file = file;
  m->ntensors++;
  return NULL;
}

/* The header of file `file` of m: each tensor's name, dtype and shape,
 * checked against the file's size (the data is not read). */
static rill_status_t read_header(llm_model_t *m, size_t *cap, int file) {
  const char *path = m->files[file];
  FILE *f = fopen(path, "rb");
  if (!f) return rill_status_new(errno == ENOENT ? RILL_NOT_FOUND : RILL_IO_ERROR, "%s: %s", ESC(path), strerror(errno));
  struct stat sb;
  uint8_t len8[8];
  rill_status_t st = NULL;
  char *hdr = NULL;
  uint64_t n = 0;
  if (fstat(fileno(f), &sb) != 0 || fread(len8, 1, 8, f) != 8) st = rill_status_new(RILL_MALFORMED, "%s: not a safetensors file (shorter than 8 bytes)", ESC(path));
  for (int i = 7; !st && i >= 0; i--) n = n << 8 | len8[i];
  if (!st && (n < 2 || n > ((uint64_t)100 << 20) || n > (uint64_t)sb.st_size - 8))
    st = rill_status_new(RILL_MALFORMED, "%s: not a safetensors file (header length %llu for a file of %lld bytes)", ESC(path),
                         (unsigned long long)n, (long long)sb.st_size);
  if (!st && !(hdr = malloc(n + 1))) st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  if (!st && fread(hdr, 1, n, f) != n) st = rill_status_new(RILL_IO_ERROR, "%s: cannot read its header", ESC(path));
  fclose(f);
  if (st) {
    free(hdr);
    return st;
  }
  hdr[n] = 0;
  cJSON *j = cJSON_ParseWithLength(hdr, n);
  free(hdr);
  if (!j || !cJSON_IsObject(j)) {
    cJSON_Delete(j);
    return rill_status_new(RILL_MALFORMED, "%s: the safetensors header is not a JSON object", ESC(path));
  }
  uint64_t data = (uint64_t)sb.st_size - 8 - n;
  const cJSON *e;
  cJSON_ArrayForEach(e, j) {
    if (!strcmp(e->string, "__metadata__")) continue;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(e, "shape"),
                *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    rill_type_t t = {0};
    bool ok = cJSON_IsString(dt) && cJSON_IsArray(sh) && cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2 &&
              cJSON_GetArraySize(sh) <= RILL_MAX_RANK;
    if (ok && !st_dtype(dt->valuestring, &t.dtype)) {
      /* A dtype the language lacks (F8, I16, ...): left out; a weight that
       * needs it is reported as having that dtype. */
      continue;
    }
    double numel = 1;
    const cJSON *d;
    if (ok) cJSON_ArrayForEach(d, sh) {
      ok = ok && cJSON_IsNumber(d) && d->valuedouble >= 0 && d->valuedouble == floor(d->valuedouble) && d->valuedouble < 1e15;
      if (ok) {
        t.dims[t.rank++] = (int64_t)d->valuedouble;
        numel *= d->valuedouble;
      }
    }
    double b = ok && cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) ? cJSON_GetArrayItem(off, 0)->valuedouble : -1;
    double en = ok && cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) ? cJSON_GetArrayItem(off, 1)->valuedouble : -1;
    ok = ok && b >= 0 && en >= b && en <= (double)data && en - b == numel * (double)rill_dtype_size(t.dtype);
    if (!ok) {
      cJSON_Delete(j);
      return rill_status_new(RILL_MALFORMED, "%s: tensor \"%s\" has a malformed entry (dtype, shape and data_offsets within the file's %llu data bytes)",
                             ESC(path), ESC(e->string), (unsigned long long)data);
    }
    if ((st = add_tensor(m, cap, e->string, &t, file))) break;
  }
  cJSON_Delete(j);
  return st;
}

static rill_status_t add_file(llm_model_t *m, const char *path) {
  for (int i = 0; i < m->nfiles; i++)
    if (!strcmp(m->files[i], path)) return NULL;
  char **nf = realloc(m->files, (size_t)(m->nfiles + 1) * sizeof *nf);
  if (!nf) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  m->files = nf;
  if (!(m->files[m->nfiles] = strdup(path))) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  m->nfiles++;
  return NULL;
}

/* model.safetensors, or the shards that model.safetensors.index.json's
 * weight_map names (each a file of the folder). */
static rill_status_t read_weights(llm_model_t *m, const char *dir) {
  char path[PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  struct stat sb;
  size_t cap = 0;
  if (stat(path, &sb) != 0) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &sb) != 0)
      return rill_status_new(RILL_NOT_FOUND, "%s: no model.safetensors and no model.safetensors.index.json", ESC(dir));
    TRY(add_file(m, path));
    return read_header(m, &cap, 0);
  }
  cJSON *j;
  TRY(parse_json(path, "model.safetensors.index.json", &j));
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *e;
  rill_status_t st = NULL;
  if (!cJSON_IsObject(wm)) st = rill_status_new(RILL_MALFORMED, "model.safetensors.index.json: no \"weight_map\" object");
  if (!st) cJSON_ArrayForEach(e, wm) {
    if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..")) {
      st = rill_status_new(RILL_MALFORMED, "model.safetensors.index.json: tensor \"%s\" maps to something other than a file name of the folder",
                           ESC(e->string));
      break;
    }
    snprintf(path, sizeof path, "%s/%s", dir, e->valuestring);
    if (stat(path, &sb) != 0) {
      st = rill_status_new(RILL_NOT_FOUND, "model.safetensors.index.json: tensor \"%s\" is in \"%s\", which is not in %s", ESC(e->string),
                           ESC(e->valuestring), ESC(dir));
      break;
    }
    if ((st = add_file(m, path))) break;
  }
  for (int i = 0; !st && i < m->nfiles; i++) st = read_header(m, &cap, i);
  /* each tensor of the map in the file the map names */
  if (!st) cJSON_ArrayForEach(e, wm) {
    const llm_tensor_t *t = llm_find(m, e->string);
    const char *base = t ? strrchr(m->files[t->file], '/') + 1 : NULL;
    if (!t || strcmp(base, e->valuestring) != 0) {
      st = rill_status_new(RILL_MALFORMED, "model.safetensors.index.json: tensor \"%s\" is not in \"%s\", where the index puts it", ESC(e->string),
                           ESC(e->valuestring));
      break;
    }
  }
  cJSON_Delete(j);
  if (!st && m->nfiles == 0) st = rill_status_new(RILL_MALFORMED, "model.safetensors.index.json: the weight_map names no file");
  return st;
}

const llm_tensor_t *llm_find(const llm_model_t *m, const char *name) {
  for (size_t i = 0; i < m->ntensors; i++)
    if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
  return NULL;
}

/* ---- the weights of each architecture ---- */
static void shape(rill_type_t *t, int rank, int64_t d0, int64_t d1) {
  t->rank = rank;
  t->dims[0] = d0;
  t->dims[1] = d1;
}

bool llm_weight_info(const llm_model_t *m, llm_weight_t w, int64_t layer, char *name, size_t size, rill_type_t *type) {
  const llm_config_t *c = &m->cfg;
  int64_t H = c->hidden, V = c->vocab, I = c->intermediate, qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
  const char *part = NULL;
  memset(type, 0, sizeof *type);
  type->dtype = m->dtype;
  if (c->family == LLM_LLAMA) {
    switch (w) {
    case LW_EMBED: part = "model.embed_tokens.weight"; shape(type, 2, V, H); break;
    case LW_NORM: part = "model.norm.weight"; shape(type, 1, H, 0); break;
    case LW_HEAD: if (c->tie) return false; part = "lm_head.weight"; shape(type, 2, V, H); break;
    case LW_LN1: part = "input_layernorm.weight"; shape(type, 1, H, 0); break;
    case LW_LN2: part = "post_attention_layernorm.weight"; shape(type, 1, H, 0); break;
    case LW_Q: part = "self_attn.q_proj.weight"; shape(type, 2, qd, H); break;
    case LW_K: part = "self_attn.k_proj.weight"; shape(type, 2, kvd, H); break;
    case LW_V: part = "self_attn.v_proj.weight"; shape(type, 2, kvd, H); break;
    case LW_O: part = "self_attn.o_proj.weight"; shape(type, 2, H, qd); break;
    case LW_Q_BIAS: if (!c->qkv_bias) return false; part = "self_attn.q_proj.bias"; shape(type, 1, qd, 0); break;
    case LW_K_BIAS: if (!c->qkv_bias) return false; part = "self_attn.k_proj.bias"; shape(type, 1, kvd, 0); break;
    case LW_V_BIAS: if (!c->qkv_bias) return false; part = "self_attn.v_proj.bias"; shape(type, 1, kvd, 0); break;
    case LW_O_BIAS: if (!c->o_bias) return false; part = "self_attn.o_proj.bias"; shape(type, 1, H, 0); break;
    case LW_GATE: part = "mlp.gate_proj.weight"; shape(type, 2, I, H); break;
    case LW_UP: part = "mlp.up_proj.weight"; shape(type, 2, I, H); break;
    case LW_DOWN: part = "mlp.down_proj.weight"; shape(type, 2, H, I); break;
    case LW_GATE_BIAS: if (!c->mlp_bias) return false; part = "mlp.gate_proj.bias"; shape(type, 1, I, 0); break;
    case LW_UP_BIAS: if (!c->mlp_bias) return false; part = "mlp.up_proj.bias"; shape(type, 1, I, 0); break;
    case LW_DOWN_BIAS: if (!c->mlp_bias) return false; part = "mlp.down_proj.bias"; shape(type, 1, H, 0); break;
    default: return false;
    }
    if (w >= LW_FIRST_LAYER) snprintf(name, size, "model.layers.%lld.%s", (long long)layer, part);
    else snprintf(name, size, "%s", part);
    return true;
  }
  /* GPT-2: Conv1D weights are [in, out] */
  switch (w) {
  case LW_EMBED: part = "wte.weight"; shape(type, 2, V, H); break;
  case LW_POSITIONS: part = "wpe.weight"; shape(type, 2, c->max_positions, H); break;
  case LW_NORM: part = "ln_f.weight"; shape(type, 1, H, 0); break;
  case LW_NORM_BIAS: part = "ln_f.bias"; shape(type, 1, H, 0); break;
  case LW_HEAD:
    if (c->tie) return false;
    snprintf(name, size, "lm_head.weight");
    shape(type, 2, V, H);
    return true;
  case LW_LN1: part = "ln_1.weight"; shape(type, 1, H, 0); break;
  case LW_LN1_BIAS: part = "ln_1.bias"; shape(type, 1, H, 0); break;
  case LW_LN2: part = "ln_2.weight"; shape(type, 1, H, 0); break;
  case LW_LN2_BIAS: part = "ln_2.bias"; shape(type, 1, H, 0); break;
  case LW_QKV: part = "attn.c_attn.weight"; shape(type, 2, H, 3 * H); break;
  case LW_QKV_BIAS: part = "attn.c_attn.bias"; shape(type, 1, 3 * H, 0); break;
  case LW_O: part = "attn.c_proj.weight"; shape(type, 2, H, H); break;
  case LW_O_BIAS: part = "attn.c_proj.bias"; shape(type, 1, H, 0); break;
  case LW_UP: part = "mlp.c_fc.weight"; shape(type, 2, H, I); break;
  case LW_UP_BIAS: part = "mlp.c_fc.bias"; shape(type, 1, I, 0); break;
  case LW_DOWN: part = "mlp.c_proj.weight"; shape(type, 2, I, H); break;
  case LW_DOWN_BIAS: part = "mlp.c_proj.bias"; shape(type, 1, H, 0); break;
  default: return false;
  }
  if (w >= LW_FIRST_LAYER) snprintf(name, size, "%sh.%lld.%s", m->prefix, (long long)layer, part);
  else snprintf(name, size, "%s%s", m->prefix, part);
  return true;
}

/* Every weight the architecture reads is there with its shape, in a float
 * dtype (the compute dtype is the embedding's; others are cast to it). */
static rill_status_t check_weights(llm_model_t *m) {
  const llm_config_t *c = &m->cfg;
  if (c->family == LLM_GPT2) m->prefix = llm_find(m, "transformer.wte.weight") ? "transformer." : "";
  char name[256];
  rill_type_t want;
  m->dtype = RILL_F32;
  llm_weight_info(m, LW_EMBED, -1, name, sizeof name, &want);
  const llm_tensor_t *emb = llm_find(m, name);
  if (emb) m->dtype = emb->type.dtype;
  if (m->dtype != RILL_F16 && m->dtype != RILL_BF16 && m->dtype != RILL_F32)
    return rill_status_new(RILL_UNIMPLEMENTED, "tensor \"%s\" is %s: checkpoints in f16, bf16 or f32 are supported", ESC(name), rill_dtype_name(m->dtype));
  for (int64_t layer = -1; layer < c->layers; layer++)
    for (int w = layer < 0 ? 0 : LW_FIRST_LAYER; w < (layer < 0 ? LW_FIRST_LAYER : LW_COUNT); w++) {
      if (!llm_weight_info(m, (llm_weight_t)w, layer, name, sizeof name, &want)) continue;
      const llm_tensor_t *t = llm_find(m, name);
      if (!t) {
        if (w == LW_HEAD)
          return rill_status_new(RILL_NOT_FOUND, "no tensor \"%s\" in the checkpoint (and tie_word_embeddings is false)", ESC(name));
        return rill_status_new(RILL_NOT_FOUND, "no tensor \"%s\" in the checkpoint", ESC(name));
      }
      char b1[96], b2[96];
      bool same = t->type.rank == want.rank;
      for (int d = 0; same && d < want.rank; d++) same = t->type.dims[d] == want.dims[d];
      if (!same)
        return rill_status_new(RILL_MALFORMED, "tensor \"%s\" in %s is %s, but config.json makes it %s", ESC(name), ESC(strrchr(m->files[t->file], '/') + 1),
                               rill_type_format(&t->type, b1, sizeof b1), rill_type_format(&(rill_type_t){t->type.dtype, want.rank, {want.dims[0], want.dims[1]}}, b2, sizeof b2));
      rill_dtype_t d = t->type.dtype;
      if (d != RILL_F16 && d != RILL_BF16 && d != RILL_F32)
        return rill_status_new(RILL_UNIMPLEMENTED, "tensor \"%s\" is %s: weights in f16, bf16 or f32 are supported", ESC(name), rill_dtype_name(d));
    }
  return NULL;
}

rill_status_t llm_open(const char *dir, llm_model_t **out) {
  *out = NULL;
  char abs[PATH_MAX];
  struct stat sb;
  if (stat(dir, &sb) != 0) return rill_status_new(RILL_NOT_FOUND, "%s: %s", ESC(dir), strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return rill_status_new(RILL_INVALID_ARGUMENT, "%s: not a folder (rill llm takes a Hugging Face model folder)", ESC(dir));
  if (!realpath(dir, abs)) return rill_status_new(RILL_IO_ERROR, "%s: %s", ESC(dir), strerror(errno));
  llm_model_t *m = calloc(1, sizeof *m);
  if (!m) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  rill_status_t st = read_config(abs, &m->cfg);
  if (!st) st = read_weights(m, abs);
  if (!st) st = check_weights(m);
  if (st) {
    llm_free(m);
    return st;
  }
  *out = m;
  return NULL;
}

void llm_free(llm_model_t *m) {
  if (!m) return;
  for (size_t i = 0; i < m->ntensors; i++) free(m->tensors[i].name);
  free(m->tensors);
  for (int i = 0; i < m->nfiles; i++) free(m->files[i]);
  free(m->files);
  free(m);
}

const llm_config_t *llm_model_config(const llm_model_t *m) { return &m->cfg; }
rill_dtype_t llm_model_dtype(const llm_model_t *m) { return m->dtype; }
