/* serve_llm.c: rill serve's generate endpoint for a Hugging Face folder
 * (what `rill llm DIR` takes).
 *
 * POST /v2/models/NAME/generate and .../generate_stream take JSON
 * {"id", "input_ids": [token ids], "parameters": {"max_tokens",
 * "temperature", "top_k", "top_p", "seed", "ignore_eos"}} (the shape of
 * Triton's generate extension; there is no tokenizer, so "text_input" is
 * refused with a 400 that says to send ids). /generate answers once with
 * every token; /generate_stream answers with server-sent events, one a
 * token as the device makes it, then one with the finish reason.
 *
 * The folder's generation program (import/llm.h) has its sampling
 * settings, batch (1 row here), new tokens (--max-tokens) and positions
 * (--max-prompt plus --max-tokens) fixed when it is written, so each
 * instance (--instances) is a VM of the program for one setting of the
 * sampler, made again (on libuv's thread pool) when a request with
 * another setting takes it; a
 * request stops its run (rill_gen_cancel) at its own max_tokens or an end
 * token. Generations run one after another per instance, as many at once
 * as there are instances: the program's rows start together (one prefill),
 * so requests that arrive apart cannot join a running batch.
 *
 * Each run is a rill_gen session; a thread per run waits on it
 * (rill_gen_wait) and hands each token to the loop through an async handle.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "llm.h"
#include "serve.h"

typedef struct gkey {
  double temperature, top_p;
  int64_t top_k;
  uint64_t seed;
  bool ignore_eos;
} gkey_t;

struct serve_greq {
  serve_greq_t *next, *prev;
  serve_model_t *m;
  void *http;            /* NULL once answered or gone */
  bool stream, running;
  char *id;
  int64_t *ids, nids;
  int64_t max_tokens;
  gkey_t key;
  double t0, deadline;
  int64_t *out;          /* the tokens so far */
  int64_t nout, cap;
  bool ended;            /* an end token came (not in out) */
  void *inst;
};

typedef struct ginst {
  serve_llm_t *L;
  gkey_t key;
  bool have_key;
  rill_module_t *mod;
  rill_vm_t *vm;
  serve_greq_t *req;     /* the request running, or NULL (also when it went away) */
  bool busy;             /* a session runs */
  rill_gen_t *gen;
  rill_tensor_t *in[2];
  pthread_t th;
  bool building;         /* its VM is being made on the thread pool (build_work) */
  uv_work_t work;
  rill_status_t build_st;
  /* the waiter's own */
  int64_t max, taken;
  bool ignore_eos, stop;
  /* handed from the waiter to the loop, under L->mu */
  int64_t *toks;
  size_t ntoks, cap;
  bool done;
  rill_status_t st;
} ginst_t;

struct serve_llm {
  llm_model_t *hf;
  const llm_config_t *cfg;
  char dir[4096];
  int64_t max_tokens, max_prompt;
  int ninst;
  ginst_t *inst;
  serve_greq_t *head, *tail;
  int queued;
  pthread_mutex_t mu;
  uv_async_t async;
  bool async_live;
};

/* ---- instances ---- */
static bool key_eq(const gkey_t *a, const gkey_t *b) {
  return a->temperature == b->temperature && a->top_p == b->top_p && a->top_k == b->top_k && a->seed == b->seed && a->ignore_eos == b->ignore_eos;
}

static void inst_drop_vm(ginst_t *I) {
  rill_vm_destroy(I->vm);
  I->vm = NULL;
  if (I->mod) rill_module_release(I->mod);
  I->mod = NULL;
  I->have_key = false;
}

/* I's VM for the sampler setting k (the program written, assembled, loaded, bound). */
static rill_status_t inst_build(serve_model_t *m, ginst_t *I, const gkey_t *k) {
  serve_llm_t *L = m->llm;
  if (I->have_key && key_eq(&I->key, k)) return NULL;
  inst_drop_vm(I);
  llm_gen_options_t o = {.batch = 1, .max_length = L->max_prompt + L->max_tokens, .new_tokens = L->max_tokens,
                         .temperature = k->temperature, .top_k = k->top_k, .top_p = k->top_p, .seed = k->seed, .ignore_eos = k->ignore_eos};
  char *text = NULL;
  size_t len = 0;
  rill_status_t st = llm_program(L->hf, &o, &text, &len);
  uint8_t *bytes = NULL;
  size_t size = 0;
  char path[4200];
  snprintf(path, sizeof path, "%s/(rill serve).vmasm", L->dir);
  rill_asm_options_t ao = {.link_weights = true};
  if (!st) st = rill_assemble(NULL, path, text, len, &ao, &bytes, &size);
  free(text);
  if (!st) st = rill_module_load(NULL, bytes, size, "/", &I->mod);
  free(bytes);
  if (!st) st = rill_vm_create(NULL, I->mod, m->server->cfg.device, &I->vm);
  if (!st) st = rill_vm_set_graph_mode(I->vm, NULL, m->graph);
  if (st) {
    inst_drop_vm(I);
    return st;
  }
  I->key = *k;
  I->have_key = true;
  return NULL;
}

static bool is_eos(const llm_config_t *c, int64_t t) {
  for (int i = 0; i < c->neos; i++)
    if (c->eos[i] == t) return true;
  return false;
}

/* On the waiter's thread: a record of the run (one token: the program has one row). */
static void on_record(void *user, uint64_t step, const int64_t *v, int n) {
  (void)step;
  ginst_t *I = user;
  serve_llm_t *L = I->L;
  if (I->stop || n < 1) return;
  int64_t t = v[0];
  pthread_mutex_lock(&L->mu);
  if (I->ntoks == I->cap) {
    size_t cap = I->cap ? I->cap * 2 : 64;
    int64_t *p = realloc(I->toks, cap * sizeof *p);
    if (p) I->toks = p, I->cap = cap;
  }
  if (I->ntoks < I->cap) I->toks[I->ntoks++] = t;
  pthread_mutex_unlock(&L->mu);
  I->taken++;
  if (I->taken >= I->max || (!I->ignore_eos && is_eos(L->cfg, t))) {
    I->stop = true;
    rill_gen_cancel(I->gen);
  }
  uv_async_send(&L->async);
}

static void *waiter(void *arg) {
  ginst_t *I = arg;
  rill_tensor_t **res = NULL;
  int nres = 0;
  rill_status_t st = rill_gen_wait(I->gen, on_record, I, &res, &nres);
  if (res) rill_results_free(I->vm, res, nres);
  pthread_mutex_lock(&I->L->mu);
  I->done = true;
  I->st = st;
  pthread_mutex_unlock(&I->L->mu);
  uv_async_send(&I->L->async);
  return NULL;
}

/* ---- answers ---- */
static void count(serve_model_t *m, int status) {
  int c = status == 200 ? 0 : status == 400 ? 1 : status == 404 ? 2 : status == 504 ? 4 : status >= 500 ? 3 : 5;
  m->responses[c]++;
  if (status != 200) m->failures++;
}

static void greq_free(serve_greq_t *r) {
  if (!r) return;
  free(r->ids);
  free(r->out);
  free(r->id);
  free(r);
}

static cJSON *ids_json(const int64_t *v, int64_t n) {
  cJSON *a = cJSON_CreateArray();
  for (int64_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
  return a;
}

static char *event_text(serve_greq_t *r, cJSON *o) {
  char *j = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!j) return NULL;
  size_t n = strlen(j);
  char *e = malloc(n + 16);
  if (e) snprintf(e, n + 16, "data: %s\n\n", j);
  free(j);
  (void)r;
  return e;
}

static cJSON *head_json(serve_greq_t *r) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  cJSON_AddStringToObject(o, "model_name", r->m->name);
  cJSON_AddStringToObject(o, "model_version", "1");
  if (r->id) cJSON_AddStringToObject(o, "id", r->id);
  return o;
}

/* The end of r: status 200 with its tokens and finish reason, or an error. */
static void finish(serve_greq_t *r, int status, const char *msg) {
  serve_model_t *m = r->m;
  if (!r->http) return; /* answered already (its deadline), or the client went */
  count(m, status);
  serve_hist_add(&m->latency, serve_now(m->server) - r->t0);
  const char *reason = r->ended ? "stop" : "length";
  if (r->stream) {
    cJSON *o = head_json(r);
    if (o && status == 200) {
      cJSON_AddStringToObject(o, "finish_reason", reason);
      cJSON_AddItemToObject(o, "output_ids", ids_json(r->out, r->nout));
    } else if (o) {
      cJSON_AddNumberToObject(o, "status", status);
      cJSON_AddStringToObject(o, "error", msg);
    }
    char *e = o ? event_text(r, o) : NULL;
    if (e && status != 200) { /* an error event */
      size_t n = strlen(e);
      char *x = malloc(n + 16);
      if (x) snprintf(x, n + 16, "event: error\n%s", e);
      free(e);
      e = x;
    }
    serve_http_stream_write(r->http, e, e ? strlen(e) : 0, true);
    r->http = NULL;
    return;
  }
  if (status != 200) {
    char *b = serve_error_json("%s", msg);
    serve_http_reply_to(r->http, status, b, b ? strlen(b) : 0, status == 503 ? 1 : 0);
    r->http = NULL;
    return;
  }
  cJSON *o = head_json(r);
  if (o) {
    cJSON_AddItemToObject(o, "output_ids", ids_json(r->out, r->nout));
    cJSON_AddStringToObject(o, "finish_reason", reason);
  }
  char *b = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  serve_http_reply_to(r->http, 200, b, b ? strlen(b) : 0, 0);
  r->http = NULL;
}

static void deliver(serve_greq_t *r, int64_t t) {
  if (r->ended || r->nout >= r->max_tokens) return;
  if (!r->key.ignore_eos && is_eos(r->m->llm->cfg, t)) {
    r->ended = true;
    return;
  }
  if (r->nout == r->cap) {
    int64_t cap = r->cap ? r->cap * 2 : 32;
    int64_t *p = realloc(r->out, (size_t)cap * sizeof *p);
    if (!p) return;
    r->out = p;
    r->cap = cap;
  }
  r->out[r->nout++] = t;
  r->m->tokens++;
  if (r->stream && r->http) {
    cJSON *o = head_json(r);
    if (o) {
      cJSON_AddNumberToObject(o, "index", (double)(r->nout - 1));
      cJSON_AddNumberToObject(o, "token_id", (double)t);
    }
    char *e = o ? event_text(r, o) : NULL;
    if (e) serve_http_stream_write(r->http, e, strlen(e), false);
  }
}

/* ---- the queue ---- */
static void unlink_greq(serve_llm_t *L, serve_greq_t *r) {
  if (r->prev) r->prev->next = r->next;
  else L->head = r->next;
  if (r->next) r->next->prev = r->prev;
  else L->tail = r->prev;
  r->next = r->prev = NULL;
  L->queued--;
  r->m->queued--; /* the queue-length metric */
}

static void inst_release_inputs(ginst_t *I) {
  for (int i = 0; i < 2; i++) {
    rill_tensor_release(I->in[i]);
    I->in[i] = NULL;
  }
}

/* Starts r's run on I; a status when it could not start. */
static void llm_dispatch(serve_model_t *m);

/* The run of r on I, whose VM is r's program. */
static rill_status_t launch(ginst_t *I, serve_greq_t *r) {
  rill_status_t st = NULL;
  rill_type_t ti = {RILL_I64, 2, {1, r->nids}}, tl = {RILL_I64, 1, {1}};
  int64_t len = r->nids;
  if (!st) st = rill_tensor_create(I->vm, &ti, r->ids, &I->in[0]);
  if (!st) st = rill_tensor_create(I->vm, &tl, &len, &I->in[1]);
  if (!st) {
    I->max = r->max_tokens;
    I->ignore_eos = r->key.ignore_eos;
    I->taken = 0;
    I->stop = false;
    I->done = false;
    I->ntoks = 0;
    st = rill_gen_start(I->vm, "generate", I->in, 2, &I->gen);
  }
  if (!st && pthread_create(&I->th, NULL, waiter, I) != 0) {
    rill_gen_destroy(I->gen);
    I->gen = NULL;
    st = rill_status_new(RILL_UNAVAILABLE, "cannot start a thread for the generation");
  }
  if (st) inst_release_inputs(I);
  return st;
}

/* Building a VM (the program written and assembled, weights uploaded) takes
 * long for a real model: it is done on libuv's thread pool, the loop
 * serving meanwhile. */
static void build_work(uv_work_t *w) {
  ginst_t *I = w->data;
  serve_greq_t *r = I->req;
  I->build_st = inst_build(r->m, I, &r->key);
}

static void build_done(uv_work_t *w, int status) {
  ginst_t *I = w->data;
  serve_greq_t *r = I->req;
  serve_model_t *m = r->m;
  rill_status_t st = I->build_st;
  I->build_st = NULL;
  I->building = false;
  if (!st && status) st = rill_status_new(RILL_INTERNAL, "building the program was cancelled");
  if (!st && r->http) st = launch(I, r);
  if (st || !r->http) { /* failed, or the client went (or its deadline passed) meanwhile */
    if (st) fprintf(stderr, "rill: serve: model '%s': a generation could not start: %s\n", m->name, rill_status_message(st));
    if (st) finish(r, 500, rill_status_message(st));
    rill_status_free(st);
    I->busy = false;
    I->req = NULL;
    greq_free(r);
  }
  llm_dispatch(m);
  if (m->server->draining && serve_idle(m->server)) serve_drained(m->server);
}

/* Starts r on I: at once where I's VM is r's program, else after building it. */
static rill_status_t start(serve_model_t *m, ginst_t *I, serve_greq_t *r) {
  I->busy = true;
  I->req = r;
  r->running = true;
  r->inst = I;
  if (I->have_key && key_eq(&I->key, &r->key)) {
    rill_status_t st = launch(I, r);
    if (st) {
      I->busy = false;
      I->req = NULL;
      r->running = false;
    }
    return st;
  }
  I->building = true;
  I->work.data = I;
  int e = uv_queue_work(m->server->loop, &I->work, build_work, build_done);
  if (e) {
    I->building = I->busy = false;
    I->req = NULL;
    r->running = false;
    return rill_status_new(RILL_UNAVAILABLE, "cannot queue the program's build: %s", uv_strerror(e));
  }
  return NULL;
}

static void llm_dispatch(serve_model_t *m) {
  serve_llm_t *L = m->llm;
  if (m->server->draining && !L->head) return;
  while (L->head) {
    serve_greq_t *r = L->head;
    ginst_t *I = NULL, *any = NULL;
    for (int i = 0; i < L->ninst; i++) {
      ginst_t *c = &L->inst[i];
      if (c->busy) continue;
      if (c->have_key && key_eq(&c->key, &r->key)) {
        I = c;
        break;
      }
      if (!any || (any->have_key && !c->have_key)) any = c;
    }
    if (!I) I = any;
    if (!I) return;
    unlink_greq(L, r);
    serve_hist_add(&m->queue_wait, serve_now(m->server) - r->t0);
    m->runs++;
    rill_status_t st = start(m, I, r);
    if (st) {
      fprintf(stderr, "rill: serve: model '%s': a generation could not start: %s\n", m->name, rill_status_message(st));
      finish(r, 500, rill_status_message(st));
      rill_status_free(st);
      greq_free(r);
    }
  }
}

static void on_async(uv_async_t *a) {
  serve_model_t *m = a->data;
  serve_llm_t *L = m->llm;
  for (int i = 0; i < L->ninst; i++) {
    ginst_t *I = &L->inst[i];
    if (!I->busy || I->building) continue;
    pthread_mutex_lock(&L->mu);
    size_t n = I->ntoks;
    int64_t buf[256];
    int64_t *toks = n <= 256 ? buf : malloc(n * sizeof *toks);
    if (toks && n) memcpy(toks, I->toks, n * sizeof *toks);
    I->ntoks = 0;
    bool done = I->done;
    rill_status_t st = I->st;
    I->st = NULL;
    pthread_mutex_unlock(&L->mu);
    for (size_t k = 0; toks && I->req && k < n; k++) deliver(I->req, toks[k]);
    if (toks != buf) free(toks);
    if (!done) continue;
    pthread_join(I->th, NULL);
    rill_gen_destroy(I->gen);
    I->gen = NULL;
    inst_release_inputs(I);
    I->busy = false;
    serve_greq_t *r = I->req;
    I->req = NULL;
    if (st && rill_status_code(st) == RILL_RUNTIME_ERROR) inst_drop_vm(I); /* a device keeps a failed op's error */
    if (r) {
      serve_hist_add(&m->run_time, serve_now(m->server) - r->t0);
      finish(r, st ? 500 : 200, st ? rill_status_message(st) : NULL);
      greq_free(r);
    }
    rill_status_free(st);
  }
  llm_dispatch(m);
  if (m->server->draining && serve_idle(m->server)) serve_drained(m->server);
}

/* ---- requests ---- */
static int bad(char *err, size_t nerr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t nerr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, nerr, fmt, ap);
  va_end(ap);
  return 400;
}

static int whole(const cJSON *v, double lo, double hi, int64_t *out) {
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) return 0;
  *out = (int64_t)v->valuedouble;
  return 1;
}

static int parse(serve_model_t *m, const char *body, size_t len, serve_greq_t *r, char *err, size_t nerr) {
  serve_llm_t *L = m->llm;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
  if (!root) {
    size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
    return bad(err, nerr, "the request is not JSON (at byte %zu)", at);
  }
  int rc = 0;
  while (end && end < body + len && *end && strchr(" \t\r\n", *end)) end++;
  if (end && end < body + len) {
    rc = bad(err, nerr, "%zu bytes after the JSON", (size_t)(body + len - end));
    goto done;
  }
  if (!cJSON_IsObject(root)) {
    rc = bad(err, nerr, "the request must be a JSON object");
    goto done;
  }
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
  if (id && !cJSON_IsString(id)) {
    rc = bad(err, nerr, "\"id\" must be a string");
    goto done;
  }
  if (id && !(r->id = strdup(id->valuestring))) {
    rc = bad(err, nerr, "out of memory");
    goto done;
  }
  const cJSON *ids = cJSON_GetObjectItemCaseSensitive(root, "input_ids");
  if (!ids && cJSON_GetObjectItemCaseSensitive(root, "text_input")) {
    rc = bad(err, nerr, "\"text_input\": this server has no tokenizer; send the prompt's token ids as \"input_ids\"");
    goto done;
  }
  if (!cJSON_IsArray(ids)) {
    rc = bad(err, nerr, "the request needs \"input_ids\", an array of token ids");
    goto done;
  }
  int n = cJSON_GetArraySize(ids);
  if (n < 1 || n > L->max_prompt) {
    rc = bad(err, nerr, "\"input_ids\" has %d tokens; a prompt has 1 to %" PRId64 " (--max-prompt)", n, L->max_prompt);
    goto done;
  }
  if (!(r->ids = malloc((size_t)n * sizeof *r->ids))) {
    rc = bad(err, nerr, "out of memory");
    goto done;
  }
  int k = 0;
  for (const cJSON *c = ids->child; c; c = c->next, k++)
    if (!whole(c, 0, (double)(L->cfg->vocab - 1), &r->ids[k])) {
      rc = bad(err, nerr, "\"input_ids\"[%d] is not a token id in [0, %" PRId64 ")", k, L->cfg->vocab);
      goto done;
    }
  r->nids = n;
  r->max_tokens = L->max_tokens < 16 ? L->max_tokens : 16;
  r->key = (gkey_t){.temperature = 0, .top_p = 1, .top_k = 0, .seed = 0};
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "parameters");
  if (p && !cJSON_IsObject(p)) {
    rc = bad(err, nerr, "\"parameters\" must be an object");
    goto done;
  }
  const cJSON *v;
  int64_t x;
  if (p && (v = cJSON_GetObjectItemCaseSensitive(p, "max_tokens"))) {
    if (!whole(v, 1, (double)L->max_tokens, &x)) {
      rc = bad(err, nerr, "max_tokens must be an integer in [1, %" PRId64 "] (--max-tokens)", L->max_tokens);
      goto done;
    }
    r->max_tokens = x;
  }
  if (p && (v = cJSON_GetObjectItemCaseSensitive(p, "temperature"))) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1e6)) {
      rc = bad(err, nerr, "temperature must be a number in [0, 1e6] (0: greedy)");
      goto done;
    }
    r->key.temperature = v->valuedouble;
  }
  if (p && (v = cJSON_GetObjectItemCaseSensitive(p, "top_k"))) {
    if (!whole(v, 0, 2147483648.0, &x)) {
      rc = bad(err, nerr, "top_k must be an integer in [0, 2^31] (0: off)");
      goto done;
    }
    r->key.top_k = x;
  }
  if (p && (v = cJSON_GetObjectItemCaseSensitive(p, "top_p"))) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1)) {
      rc = bad(err, nerr, "top_p must be a number in (0, 1] (1: off)");
      goto done;
    }
    r->key.top_p = v->valuedouble;
  }
  if (p && (v = cJSON_GetObjectItemCaseSensitive(p, "seed"))) {
    if (!whole(v, 0, 9007199254740992.0, &x)) {
      rc = bad(err, nerr, "seed must be a non-negative integer (up to 2^53)");
      goto done;
    }
    r->key.seed = (uint64_t)x;
  }
  if (p && (v = cJSON_GetObjectItemCaseSensitive(p, "ignore_eos"))) {
    if (!cJSON_IsBool(v)) {
      rc = bad(err, nerr, "ignore_eos must be true or false");
      goto done;
    }
    r->key.ignore_eos = cJSON_IsTrue(v);
  }
  if (r->key.temperature == 0) { /* greedy: the sampler's settings change nothing, and one program serves them all */
    r->key.top_k = 0;
    r->key.top_p = 1;
    r->key.seed = 0;
  }
done:
  cJSON_Delete(root);
  return rc;
}

int serve_llm_request(serve_model_t *m, void *http, bool stream, const char *body, size_t len, serve_greq_t **out, char *err, size_t nerr) {
  serve_t *s = m->server;
  serve_llm_t *L = m->llm;
  *out = NULL;
  m->requests++;
  serve_greq_t *r = calloc(1, sizeof *r);
  if (!r) {
    count(m, 500);
    snprintf(err, nerr, "out of memory");
    return 500;
  }
  r->m = m;
  r->stream = stream;
  int rc = parse(m, body, len, r, err, nerr);
  if (!rc && s->draining) rc = (snprintf(err, nerr, "the server is shutting down"), 503);
  if (!rc && L->queued >= s->cfg.max_queue)
    rc = (snprintf(err, nerr, "model '%s' has %d generations waiting, its limit (--max-queue)", m->name, L->queued), 503);
  if (rc) {
    if (rc == 503) m->rejected++;
    count(m, rc);
    greq_free(r);
    return rc;
  }
  r->http = http;
  r->t0 = serve_now(s);
  r->deadline = r->t0 + (double)s->cfg.timeout_ms / 1e3;
  r->prev = L->tail;
  if (L->tail) L->tail->next = r;
  else L->head = r;
  L->tail = r;
  L->queued++;
  m->queued++;
  *out = r;
  return 0;
}

void serve_llm_kick(serve_model_t *m) { llm_dispatch(m); }

void serve_llm_abandon(serve_greq_t *r) {
  r->http = NULL;
  if (r->running) {
    ginst_t *I = r->inst;
    if (I->gen) rill_gen_cancel(I->gen);
    return; /* freed when its run ends */
  }
  unlink_greq(r->m->llm, r);
  greq_free(r);
}

/* Deadlines: a generation past its --timeout-ms is stopped and answered 504. */
void serve_llm_sweep(serve_model_t *m, double now) {
  serve_llm_t *L = m->llm;
  for (serve_greq_t *r = L->head, *next; r; r = next) {
    next = r->next;
    if (now < r->deadline) continue;
    unlink_greq(L, r);
    m->timeouts++;
    finish(r, 504, "the generation's deadline passed while it waited to run");
    greq_free(r);
  }
  for (int i = 0; i < L->ninst; i++) {
    ginst_t *I = &L->inst[i];
    if (I->req && I->req->http && now >= I->req->deadline) {
      m->timeouts++;
      finish(I->req, 504, "the generation's deadline passed while it ran");
      if (I->gen) rill_gen_cancel(I->gen); /* (while its program is built: dropped when that ends) */
    }
  }
}

bool serve_llm_idle(const serve_model_t *m) {
  const serve_llm_t *L = m->llm;
  if (L->head) return false;
  for (int i = 0; i < L->ninst; i++)
    if (L->inst[i].busy) return false;
  return true;
}

void serve_llm_memory(serve_model_t *m, rill_memory_info_t *out) {
  memset(out, 0, sizeof *out);
  serve_llm_t *L = m->llm;
  for (int i = 0; i < L->ninst; i++) {
    if (!L->inst[i].vm || L->inst[i].busy) continue; /* read with no run in flight (nor a build) */
    rill_memory_info_t mi;
    rill_vm_memory_info(L->inst[i].vm, &mi);
    out->weights += mi.weights;
    out->buffers += mi.buffers;
    out->graphs += mi.graphs;
    out->workspaces += mi.workspaces;
    out->total += mi.total;
    out->peak += mi.peak;
  }
}

char *serve_llm_metadata(const serve_model_t *m) {
  const serve_llm_t *L = m->llm;
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  cJSON_AddStringToObject(root, "name", m->name);
  cJSON *v = cJSON_AddArrayToObject(root, "versions");
  if (v) cJSON_AddItemToArray(v, cJSON_CreateString("1"));
  cJSON_AddStringToObject(root, "platform", "rill_llm");
  static const char *const IO[2] = {"input_ids", "output_ids"};
  for (int k = 0; k < 2; k++) {
    cJSON *a = cJSON_AddArrayToObject(root, k ? "outputs" : "inputs"), *o = cJSON_CreateObject();
    if (!a || !o) {
      cJSON_Delete(o);
      break;
    }
    cJSON_AddItemToArray(a, o);
    cJSON_AddStringToObject(o, "name", IO[k]);
    cJSON_AddStringToObject(o, "datatype", "INT64");
    cJSON *sh = cJSON_AddArrayToObject(o, "shape");
    if (sh) cJSON_AddItemToArray(sh, cJSON_CreateNumber(-1));
  }
  cJSON *p = cJSON_AddObjectToObject(root, "parameters");
  if (p) {
    cJSON_AddStringToObject(p, "model_type", L->cfg->model_type);
    cJSON_AddNumberToObject(p, "vocab_size", (double)L->cfg->vocab);
    cJSON_AddNumberToObject(p, "max_tokens", (double)L->max_tokens);
    cJSON_AddNumberToObject(p, "max_prompt", (double)L->max_prompt);
    cJSON_AddNumberToObject(p, "instances", L->ninst);
    cJSON_AddStringToObject(p, "device", m->server->cfg.device);
  }
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}

/* ---- load, start, stop ---- */
int serve_llm_load(serve_model_t *m, const char *dir, const void *args) {
  const cli_args_t *a = args;
  serve_t *s = m->server;
  serve_llm_t *L = calloc(1, sizeof *L);
  if (!L) return cli_error(1, "out of memory");
  m->llm = L;
  pthread_mutex_init(&L->mu, NULL);
  snprintf(L->dir, sizeof L->dir, "%s", dir);
  rill_status_t st = llm_open(dir, &L->hf);
  if (st) return cli_fail_in(m->name, st);
  L->cfg = llm_model_config(L->hf);
  long long v;
  const char *t = cli_get(a, "--max-tokens");
  L->max_tokens = 128;
  if (t) {
    if (!cli_parse_int(t, 1, 1 << 20, &v)) return cli_usage("--max-tokens expects an integer in [1, 1048576], got '%s'", t);
    L->max_tokens = v;
  }
  int64_t room = L->cfg->max_positions - L->max_tokens;
  if (L->cfg->family != LLM_GPT2 && room < 4096 - L->max_tokens) room = 4096 - L->max_tokens; /* rotary: positions beyond the config's still work */
  L->max_prompt = room < 1024 ? room : 1024;
  if ((t = cli_get(a, "--max-prompt"))) {
    if (!cli_parse_int(t, 1, 1 << 20, &v)) return cli_usage("--max-prompt expects an integer in [1, 1048576], got '%s'", t);
    L->max_prompt = v;
  }
  if (L->max_prompt < 1)
    return cli_usage("model '%s': --max-tokens=%lld leaves no room for a prompt in its %lld positions", m->name, (long long)L->max_tokens,
                     (long long)L->cfg->max_positions);
  L->ninst = s->cfg.instances;
  if (!(L->inst = calloc((size_t)L->ninst, sizeof *L->inst))) return cli_error(1, "out of memory");
  for (int i = 0; i < L->ninst; i++) L->inst[i].L = L;
  /* the greedy program made now: the checkpoint's problems show at the start */
  gkey_t greedy = {.temperature = 0, .top_p = 1};
  if ((st = inst_build(m, &L->inst[0], &greedy))) return cli_fail_in(m->name, st);
  return 0;
}

int serve_llm_start(serve_model_t *m) {
  int e = uv_async_init(m->server->loop, &m->llm->async, on_async);
  if (e) return e;
  m->llm->async.data = m;
  m->llm->async_live = true;
  return 0;
}

void serve_llm_stop(serve_model_t *m) {
  if (m->llm->async_live) uv_close((uv_handle_t *)&m->llm->async, NULL);
  m->llm->async_live = false;
}

void serve_llm_free(serve_model_t *m) {
  serve_llm_t *L = m->llm;
  if (!L) return;
  for (int i = 0; L->inst && i < L->ninst; i++) {
    ginst_t *I = &L->inst[i];
    if (I->busy) { /* a second signal: stop the run and wait for it */
      rill_gen_cancel(I->gen);
      pthread_join(I->th, NULL);
      rill_gen_destroy(I->gen);
      rill_status_free(I->st);
      greq_free(I->req);
    }
    inst_release_inputs(I);
    inst_drop_vm(I);
    free(I->toks);
  }
  while (L->head) {
    serve_greq_t *r = L->head;
    unlink_greq(L, r);
    greq_free(r);
  }
  free(L->inst);
  llm_free(L->hf);
  pthread_mutex_destroy(&L->mu);
  free(L);
  m->llm = NULL;
}
