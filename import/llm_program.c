/* llm_program.c: the .vmasm text of a checkpoint's generation program
 * (llm.h says what its functions do; docs/internals.md, "LLM programs",
 * shows one). Weights are `const`s from `weights` statements naming the
 * checkpoint's files; a weight stored in another float dtype than the
 * embedding's is cast at the top of each function (folded at -O1). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm_int.h"

typedef struct gen {
  char *p;
  size_t len, cap;
  bool oom;
  const llm_model_t *m;
  const llm_config_t *c;
  const llm_gen_options_t *o;
  const char *dt;              /* the compute dtype's name */
  bool decode;                 /* emitting @decode (one token a row), else @prefill */
  const char *S;               /* the token axis: "S" or "1" */
} gen_t;

static void put(gen_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(gen_t *g, const char *fmt, ...) {
  if (g->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g->p ? g->p + g->len : NULL, g->p ? g->cap - g->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) { g->oom = true; return; }
    if (g->p && g->len + (size_t)n < g->cap) { g->len += (size_t)n; return; }
    size_t nc = g->cap ? g->cap * 2 : 65536;
    while (nc < g->len + (size_t)n + 1) nc *= 2;
    char *np = realloc(g->p, nc);
    if (!np) { g->oom = true; return; }
    g->p = np;
    g->cap = nc;
  }
}

/* A float attribute's value, exactly (the shortest form is not needed). */
static const char *num(double v, char *buf) {
  snprintf(buf, 40, "%.17g", v);
  if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
  return buf;
}
#define NUM(v) num((v), (char[48]){0})

/* ---- weights ---- */
static const char *const WNAME[LW_COUNT] = {
    [LW_EMBED] = "embed", [LW_POSITIONS] = "wpe", [LW_NORM] = "norm", [LW_NORM_BIAS] = "norm_b", [LW_HEAD] = "lm_head",
    [LW_LN1] = "ln1", [LW_LN1_BIAS] = "ln1_b", [LW_Q] = "wq", [LW_Q_BIAS] = "bq", [LW_K] = "wk", [LW_K_BIAS] = "bk",
    [LW_V] = "wv", [LW_V_BIAS] = "bv", [LW_QKV] = "wqkv", [LW_QKV_BIAS] = "bqkv", [LW_O] = "wo", [LW_O_BIAS] = "bo",
    [LW_LN2] = "ln2", [LW_LN2_BIAS] = "ln2_b", [LW_GATE] = "wg", [LW_GATE_BIAS] = "bg", [LW_UP] = "wu", [LW_UP_BIAS] = "bu",
    [LW_DOWN] = "wd", [LW_DOWN_BIAS] = "bd"};

/* The value a function reads weight w of `layer` as (NULL where the model has none). */
static const char *W(const gen_t *g, llm_weight_t w, int64_t layer, char *buf) {
  char name[256];
  rill_type_t t;
  if (!llm_weight_info(g->m, w, layer, name, sizeof name, &t)) return NULL;
  if (w >= LW_FIRST_LAYER) snprintf(buf, 64, "%%l%lld.%s", (long long)layer, WNAME[w]);
  else snprintf(buf, 64, "%%%s", WNAME[w]);
  return buf;
}
#define WV(w, layer) W(g, (w), (layer), (char[64]){0})

/* Calls f(g, w, layer, name, tensor) for each weight the model reads. */
static void each_weight(gen_t *g, void (*f)(gen_t *, llm_weight_t, int64_t, const llm_tensor_t *)) {
  for (int64_t layer = -1; layer < g->c->layers; layer++)
    for (int w = layer < 0 ? 0 : LW_FIRST_LAYER; w < (layer < 0 ? LW_FIRST_LAYER : LW_COUNT); w++) {
      char name[256];
      rill_type_t t;
      if (llm_weight_info(g->m, (llm_weight_t)w, layer, name, sizeof name, &t)) f(g, (llm_weight_t)w, layer, llm_find(g->m, name));
    }
}

static void put_type(gen_t *g, const rill_type_t *t) {
  char b[160];
  put(g, "%s", rill_type_format(t, b, sizeof b));
}

/* `const %NAME : TYPE = wF["tensor"]` (NAME.raw where it is cast) */
static void declare_weight(gen_t *g, llm_weight_t w, int64_t layer, const llm_tensor_t *t) {
  put(g, "const %s%s : ", WV(w, layer), t->type.dtype == g->m->dtype ? "" : ".raw");
  put_type(g, &t->type);
  put(g, " = w%d[\"%s\"]\n", t->file, t->name);
}

static void cast_weight(gen_t *g, llm_weight_t w, int64_t layer, const llm_tensor_t *t) {
  if (t->type.dtype != g->m->dtype) put(g, "  %s = cast(%s.raw) {dtype=%s}\n", WV(w, layer), WV(w, layer), g->dt);
}

/* ---- layers ---- */
/* %out = x W^T + b (Llama's nn.Linear), or x W + b (GPT-2's Conv1D, [in, out]) */
static void project(gen_t *g, const char *out, const char *x, llm_weight_t w, llm_weight_t bias, int64_t layer) {
  const char *wv = WV(w, layer), *bv = WV(bias, layer);
  if (g->c->family == LLM_LLAMA) {
    if (bv) put(g, "  %s = linear(%s, %s, %s)\n", out, x, wv, bv);
    else put(g, "  %s = linear(%s, %s)\n", out, x, wv);
    return;
  }
  put(g, "  %s.mm = matmul(%s, %s)\n", out, x, wv);
  put(g, "  %s = add(%s.mm, %s)\n", out, out, bv);
}

static void norm(gen_t *g, const char *out, const char *x, llm_weight_t w, llm_weight_t bias, int64_t layer) {
  if (g->c->family == LLM_LLAMA) put(g, "  %s = rms_norm(%s, %s) {eps=%s}\n", out, x, WV(w, layer), NUM(g->c->eps));
  else put(g, "  %s = layer_norm(%s, %s, %s) {eps=%s}\n", out, x, WV(w, layer), WV(bias, layer), NUM(g->c->eps));
}

static void rotary(gen_t *g, const char *out, const char *x) {
  const llm_config_t *c = g->c;
  put(g, "  %s = rotary(%s, %s) {style=\"neox\", theta=%s, rotary_dim=%lld", out, x, g->decode ? "%pos2" : "%zero", NUM(c->rope_theta),
      (long long)c->rotary_dim);
  if (!strcmp(c->rope_scaling, "linear")) put(g, ", scaling=\"linear\", factor=%s", NUM(c->rope_factor));
  if (!strcmp(c->rope_scaling, "llama3"))
    put(g, ", scaling=\"llama3\", factor=%s, low_freq_factor=%s, high_freq_factor=%s, original_max_position=%lld", NUM(c->rope_factor),
        NUM(c->rope_low), NUM(c->rope_high), (long long)c->rope_original_max);
  put(g, "}\n");
}

/* Layer i: %h{i} -> %h{i+1}, writing its keys and values into the cache
 * (%k{i}, %v{i}) at the prompt's start or at each row's position. */
static void layer(gen_t *g, int64_t i) {
  const llm_config_t *c = g->c;
  long long B = (long long)g->o->batch, Hq = (long long)c->heads, Hkv = (long long)c->kv_heads, D = (long long)c->head_dim;
  const char *S = g->S;
  char p[32], x[48], h[48];
  snprintf(p, sizeof p, "%%l%lld.", (long long)i);
  snprintf(h, sizeof h, "%%h%lld", (long long)i);
  snprintf(x, sizeof x, "%sx", p);
  put(g, "  # layer %lld\n", (long long)i);
  norm(g, x, h, LW_LN1, LW_LN1_BIAS, i);
  char q[48], k[48], v[48];
  snprintf(q, sizeof q, "%sq", p);
  snprintf(k, sizeof k, "%sk", p);
  snprintf(v, sizeof v, "%sv", p);
  if (c->family == LLM_LLAMA) {
    project(g, q, x, LW_Q, LW_Q_BIAS, i);
    project(g, k, x, LW_K, LW_K_BIAS, i);
    project(g, v, x, LW_V, LW_V_BIAS, i);
  } else {
    char qkv[48];
    snprintf(qkv, sizeof qkv, "%sqkv", p);
    project(g, qkv, x, LW_QKV, LW_QKV_BIAS, i);
    long long H = (long long)c->hidden;
    put(g, "  %s, %s, %s = split(%s) {axis=-1, sizes=[%lld, %lld, %lld]}\n", q, k, v, qkv, H, H, H);
  }
  put(g, "  %sq4 = reshape(%s) {shape=[%lld, %s, %lld, %lld]}\n", p, q, B, S, Hq, D);
  put(g, "  %sk4 = reshape(%s) {shape=[%lld, %s, %lld, %lld]}\n", p, k, B, S, Hkv, D);
  put(g, "  %sv4 = reshape(%s) {shape=[%lld, %s, %lld, %lld]}\n", p, v, B, S, Hkv, D);
  const char *qs = "q4", *ks = "k4";
  if (c->family == LLM_LLAMA) {
    char qr[48], kr[48], q4[48], k4[48];
    snprintf(qr, sizeof qr, "%sqr", p);
    snprintf(kr, sizeof kr, "%skr", p);
    snprintf(q4, sizeof q4, "%sq4", p);
    snprintf(k4, sizeof k4, "%sk4", p);
    rotary(g, qr, q4);
    rotary(g, kr, k4);
    qs = "qr";
    ks = "kr";
  }
  put(g, "  %sqt = transpose(%s%s) {perm=[0, 2, 1, 3]}\n", p, p, qs);
  put(g, "  %skt = transpose(%s%s) {perm=[0, 2, 1, 3]}\n", p, p, ks);
  put(g, "  %svt = transpose(%sv4) {perm=[0, 2, 1, 3]}\n", p, p);
  const char *at = g->decode ? "%pos" : "%zero";
  put(g, "  update(%%k%lld, %skt, %s) {axis=2}\n", (long long)i, p, at);
  put(g, "  update(%%v%lld, %svt, %s) {axis=2}\n", (long long)i, p, at);
  double scale = c->attn_scale / (c->scale_by_layer ? (double)(i + 1) : 1.0);
  if (g->decode) put(g, "  %sa = attention(%sqt, %%k%lld, %%v%lld, %%len) {scale=%s}\n", p, p, (long long)i, (long long)i, NUM(scale));
  else put(g, "  %sa = attention(%sqt, %skt, %svt) {scale=%s, causal=true}\n", p, p, p, p, NUM(scale));
  put(g, "  %sat = transpose(%sa) {perm=[0, 2, 1, 3]}\n", p, p);
  put(g, "  %sa2 = reshape(%sat) {shape=[%lld, %s, %lld]}\n", p, p, B, S, Hq * D);
  char a2[48], o[48], hh[48], y[48], d[48];
  snprintf(a2, sizeof a2, "%sa2", p);
  snprintf(o, sizeof o, "%so", p);
  snprintf(hh, sizeof hh, "%sh", p);
  snprintf(y, sizeof y, "%sy", p);
  snprintf(d, sizeof d, "%sd", p);
  project(g, o, a2, LW_O, LW_O_BIAS, i);
  put(g, "  %s = add(%s, %s)\n", hh, h, o);
  norm(g, y, hh, LW_LN2, LW_LN2_BIAS, i);
  char u[48], mm[48];
  snprintf(u, sizeof u, "%su", p);
  snprintf(mm, sizeof mm, "%sm", p);
  project(g, u, y, LW_UP, LW_UP_BIAS, i);
  const char *act = c->act;
  if (c->family == LLM_LLAMA) {
    char gt[48];
    snprintf(gt, sizeof gt, "%sg", p);
    project(g, gt, y, LW_GATE, LW_GATE_BIAS, i);
    if (!strcmp(act, "silu")) put(g, "  %s = swiglu(%s, %s)\n", mm, gt, u);
    else put(g, "  %s = geglu(%s, %s) {approximate=\"%s\"}\n", mm, gt, u, strcmp(act, "gelu") ? "tanh" : "none");
  } else if (!strcmp(act, "relu") || !strcmp(act, "silu")) {
    put(g, "  %s = %s(%s)\n", mm, act, u);
  } else {
    put(g, "  %s = gelu(%s) {approximate=\"%s\"}\n", mm, u, strcmp(act, "gelu") ? "tanh" : "none");
  }
  project(g, d, mm, LW_DOWN, LW_DOWN_BIAS, i);
  put(g, "  %%h%lld = add(%s, %s)\n", (long long)i + 1, hh, d);
}

/* The token embeddings (and GPT-2's positions) as %h0 [B, S, H]. */
static void embed(gen_t *g) {
  const llm_config_t *c = g->c;
  long long B = (long long)g->o->batch, H = (long long)c->hidden;
  bool pos = c->family == LLM_GPT2;
  if (g->decode) {
    put(g, "  %%e = gather(%%embed, %%tok) {axis=0}\n");
    put(g, "  %%h0%s = reshape(%%e) {shape=[%lld, 1, %lld]}\n", pos ? ".e" : "", B, H);
    if (pos) {
      put(g, "  %%pe = gather(%%wpe, %%pos) {axis=0}\n");
      put(g, "  %%pe3 = reshape(%%pe) {shape=[%lld, 1, %lld]}\n", B, H);
      put(g, "  %%h0 = add(%%h0.e, %%pe3)\n");
    }
    return;
  }
  put(g, "  %%ids.f = reshape(%%ids) {shape=[-1]}\n");
  put(g, "  %%e = gather(%%embed, %%ids.f) {axis=0}\n");
  put(g, "  %%h0%s = reshape(%%e) {shape=[%lld, S, %lld]}\n", pos ? ".e" : "", B, H);
  if (pos) {
    /* the first S rows of the position table */
    put(g, "  %%pe, %%pe.rest = split(%%wpe) {axis=0, sizes=[S, add(%lld, mul(-1, S))]}\n", (long long)c->max_positions);
    put(g, "  %%h0 = add(%%h0.e, %%pe)\n");
  }
}

static void function_start(gen_t *g, bool decode) {
  g->decode = decode;
  g->S = decode ? "1" : "S";
  long long B = (long long)g->o->batch, V = (long long)g->c->vocab;
  if (decode) {
    put(g, "\n# One token a row: tok[b] at position pos[b] (the row's length so far); the next token's logits.\n");
    put(g, "func @decode(%%tok: i64[%lld], %%pos: i64[%lld]) -> f32[%lld, %lld] {\n", B, B, B, V);
  } else {
    put(g, "\n# The prompts, right-padded: row b is lens[b] tokens long (1 <= lens[b] <= S); each row's next-token logits.\n");
    put(g, "func @prefill(%%ids: i64[%lld, S], %%lens: i64[%lld]) -> f32[%lld, %lld] {\n", B, B, B, V);
  }
  each_weight(g, cast_weight);
  if (decode) {
    put(g, "  %%pos2 = reshape(%%pos) {shape=[%lld, 1]}\n", B);
    put(g, "  %%len = add(%%pos, 1)\n");
  }
}

static void forward(gen_t *g, bool decode) {
  const llm_config_t *c = g->c;
  long long B = (long long)g->o->batch, H = (long long)c->hidden, L = (long long)c->layers;
  function_start(g, decode);
  embed(g);
  for (int64_t i = 0; i < c->layers; i++) layer(g, i);
  put(g, "  # the last token of each row\n");
  if (decode) {
    put(g, "  %%hl = reshape(%%h%lld) {shape=[%lld, %lld]}\n", L, B, H);
  } else {
    put(g, "  %%hf = reshape(%%h%lld) {shape=[-1, %lld]}\n", L, H);
    put(g, "  %%ones = broadcast_to(%%one) {shape=[S]}\n");
    put(g, "  %%slen = sum(%%ones)\n");
    put(g, "  %%base = mul(%%rows, %%slen)\n");
    put(g, "  %%end = add(%%base, %%lens)\n");
    put(g, "  %%last = sub(%%end, 1)\n");
    put(g, "  %%hl = gather(%%hf, %%last) {axis=0}\n");
  }
  norm(g, "%hn", "%hl", LW_NORM, LW_NORM_BIAS, -1);
  bool f32 = g->m->dtype == RILL_F32;
  put(g, "  %%logits%s = linear(%%hn, %s)\n", f32 ? "" : ".m", WV(c->tie ? LW_EMBED : LW_HEAD, -1));
  if (!f32) put(g, "  %%logits = cast(%%logits.m) {dtype=f32}\n");
  put(g, "  return %%logits\n}\n");
}

/* %DONE = whether token %T ends its row */
static void is_end(gen_t *g, const char *done, const char *t) {
  const llm_config_t *c = g->c;
  if (!c->neos || g->o->ignore_eos) {
    put(g, "  %s = eq(%s, -1)\n", done, t); /* no end token: never */
    return;
  }
  if (c->neos == 1) {
    put(g, "  %s = eq(%s, %lld)\n", done, t, (long long)c->eos[0]);
    return;
  }
  char acc[64];
  snprintf(acc, sizeof acc, "%s.e0", done);
  put(g, "  %s = eq(%s, %lld)\n", acc, t, (long long)c->eos[0]);
  for (int i = 1; i < c->neos; i++) {
    char next[64];
    if (i + 1 == c->neos) snprintf(next, sizeof next, "%s", done);
    else snprintf(next, sizeof next, "%s.o%d", done, i);
    put(g, "  %s.e%d = eq(%s, %lld)\n", done, i, t, (long long)c->eos[i]);
    put(g, "  %s = logical_or(%s, %s.e%d)\n", next, acc, done, i);
    snprintf(acc, sizeof acc, "%s", next);
  }
}

static void sampler(gen_t *g, const char *out, const char *logits, const char *counter) {
  const llm_gen_options_t *o = g->o;
  put(g, "  %s = sample(%s, %s) {temperature=%s, top_k=%lld, top_p=%s, seed=%lld}\n", out, logits, counter, NUM(o->temperature),
      (long long)o->top_k, NUM(o->top_p), (long long)o->seed);
}

static void generate(gen_t *g) {
  long long B = (long long)g->o->batch, N = (long long)g->o->new_tokens;
  put(g, "\n# N new tokens a row: the first from the prompt, the rest by @decode in a loop that stops early\n"
         "# when every row has made an end token (a row that ended gives the pad id from then on) or the host\n"
         "# cancels; each step's tokens go to the host as they are made (emit).\n");
  put(g, "func @generate(%%ids: i64[%lld, S], %%lens: i64[%lld]) -> i64[%lld, %lld] {\n", B, B, B, N);
  put(g, "  update(%%tokens, %%pads, %%zero) {axis=1}\n");
  put(g, "  %%logits = call @prefill(%%ids, %%lens)\n");
  sampler(g, "%t0", "%logits", "%zero");
  put(g, "  %%t0.2 = reshape(%%t0) {shape=[%lld, 1]}\n", B);
  put(g, "  update(%%tokens, %%t0.2, %%zero) {axis=1}\n");
  put(g, "  %%go0 = emit(%%t0)\n");
  is_end(g, "%end0", "%t0");
  put(g, "  %%stop0 = logical_not(%%go0)\n");
  put(g, "  %%done0 = logical_or(%%end0, %%stop0)\n");
  put(g, "  %%i, %%tok, %%pos, %%done = while(@more, @step, %%first, %%t0, %%lens, %%done0)\n");
  put(g, "  %%out = copy(%%tokens)\n");
  put(g, "  return %%out\n}\n");
  put(g, "\nfunc @more(%%i: i64[], %%tok: i64[%lld], %%pos: i64[%lld], %%done: bool[%lld]) -> bool[] {\n", B, B, B);
  put(g, "  %%room = lt(%%i, %lld)\n", N);
  put(g, "  %%d32 = cast(%%done) {dtype=i32}\n");
  put(g, "  %%least = min(%%d32)\n");
  put(g, "  %%open = eq(%%least, 0)\n");
  put(g, "  %%go = logical_and(%%room, %%open)\n");
  put(g, "  return %%go\n}\n");
  put(g, "\n# Token i: tok (token i - 1) goes in at each row's position pos.\n");
  put(g, "func @step(%%i: i64[], %%tok: i64[%lld], %%pos: i64[%lld], %%done: bool[%lld]) -> (i64[], i64[%lld], i64[%lld], bool[%lld]) {\n", B,
      B, B, B, B, B);
  put(g, "  %%logits = call @decode(%%tok, %%pos)\n");
  sampler(g, "%s", "%logits", "%i");
  put(g, "  %%t = where(%%done, %%pad, %%s)\n");
  put(g, "  %%t2 = reshape(%%t) {shape=[%lld, 1]}\n", B);
  put(g, "  update(%%tokens, %%t2, %%i) {axis=1}\n");
  put(g, "  %%go = emit(%%t)\n");
  is_end(g, "%end", "%t");
  put(g, "  %%stop = logical_not(%%go)\n");
  put(g, "  %%fin = logical_or(%%end, %%stop)\n");
  put(g, "  %%done2 = logical_or(%%done, %%fin)\n");
  put(g, "  %%pos2 = add(%%pos, 1)\n");
  put(g, "  %%i2 = add(%%i, 1)\n");
  put(g, "  return %%i2, %%t, %%pos2, %%done2\n}\n");
}

/* A path as a .vmasm string: quotes and backslashes escaped. */
static void put_path(gen_t *g, const char *s) {
  put(g, "\"");
  for (; *s; s++) put(g, "%s%c", *s == '"' || *s == '\\' ? "\\" : "", *s);
  put(g, "\"");
}

rill_status_t llm_program(const llm_model_t *m, const llm_gen_options_t *o, char **out_text, size_t *out_len) {
  *out_text = NULL;
  const llm_config_t *c = &m->cfg;
  if (o->batch < 1 || o->new_tokens < 1 || o->max_length < 2)
    return rill_status_new(RILL_INVALID_ARGUMENT, "a program needs a batch of at least 1 row, 1 new token and 2 positions");
  if (o->max_length > c->max_positions && c->family == LLM_GPT2)
    return rill_status_new(RILL_INVALID_ARGUMENT, "%lld positions, but GPT-2's position table (n_positions) has %lld", (long long)o->max_length,
                           (long long)c->max_positions);
  if (c->sliding_window > 0 && o->max_length > c->sliding_window)
    return rill_status_new(RILL_UNIMPLEMENTED, "%lld positions exceed the model's sliding_window of %lld, which attention here does not apply",
                           (long long)o->max_length, (long long)c->sliding_window);
  for (int i = 0; i < m->nfiles; i++)
    for (const char *s = m->files[i]; *s; s++)
      if ((unsigned char)*s < 0x20 || *s == 0x7f) {
        char b[256];
        return rill_status_new(RILL_INVALID_ARGUMENT, "%s: a path with control characters cannot be named in a program",
                               rill_escape(m->files[i], strlen(m->files[i]), b, sizeof b));
      }
  gen_t g0 = {.m = m, .c = c, .o = o, .dt = rill_dtype_name(m->dtype)}, *g = &g0;
  long long B = (long long)o->batch, T = (long long)o->max_length, N = (long long)o->new_tokens;
  long long Hkv = (long long)c->kv_heads, D = (long long)c->head_dim;
  put(g, "# rill llm: a %s model (%lld layers, hidden %lld, %lld heads, %lld KV heads, vocabulary %lld), %s\n", c->model_type,
      (long long)c->layers, (long long)c->hidden, (long long)c->heads, (long long)c->kv_heads, (long long)c->vocab, g->dt);
  put(g, "# batch %lld, %lld positions (prompt and new tokens), %lld new tokens; ", B, T, N);
  if (o->temperature > 0) put(g, "sampled: temperature %g, top-k %lld, top-p %g, seed %llu\n", o->temperature, (long long)o->top_k, o->top_p,
                              (unsigned long long)o->seed);
  else put(g, "greedy\n");
  put(g, "module \"llm\"\n\n");
  for (int i = 0; i < m->nfiles; i++) {
    put(g, "weights ");
    put_path(g, m->files[i]);
    put(g, " as w%d\n", i);
  }
  each_weight(g, declare_weight);
  put(g, "\nconst %%zero : i64[] = 0\nconst %%first : i64[] = 1\nconst %%one : i64[1] = [1]\n");
  put(g, "const %%rows : i64[%lld] = [", B);
  for (long long b = 0; b < B; b++) put(g, "%s%lld", b ? ", " : "", b);
  put(g, "]\nconst %%pad : i64[%lld] = fill(%lld)\n", B, (long long)c->pad);
  put(g, "const %%pads : i64[%lld, %lld] = fill(%lld)\n", B, N, (long long)c->pad);
  put(g, "dim S in [1, %lld]\n\n# the KV cache, and the tokens made\n", T);
  for (int64_t i = 0; i < c->layers; i++) {
    put(g, "state %%k%lld : %s[%lld, %lld, %lld, %lld]\n", (long long)i, g->dt, B, Hkv, T, D);
    put(g, "state %%v%lld : %s[%lld, %lld, %lld, %lld]\n", (long long)i, g->dt, B, Hkv, T, D);
  }
  put(g, "state %%tokens : i64[%lld, %lld]\n", B, N);
  forward(g, false);
  forward(g, true);
  generate(g);
  if (g->oom) {
    free(g->p);
    return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory writing the program");
  }
  *out_text = g->p;
  *out_len = g->len;
  return NULL;
}
