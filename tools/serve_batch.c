/* serve_batch.c: rill serve's queues, dynamic batching, runs and metrics.
 *
 * Each model has one queue. After each poll of the loop (a check handle),
 * on a run's end and when a batch delay runs out, a model with a free
 * instance (fewer than --instances runs in flight) takes requests from its
 * queue: the oldest, then every later one of the same sizes (other than
 * the batch dimension) while the rows add up to at most --max-batch. It
 * waits for more while the oldest has waited less than --batch-delay-us and
 * the rows are short of --max-batch. The inputs are concatenated along
 * dimension 0, the batch runs as one rill_vm_invoke_async on the loop, and
 * each request gets its own rows of every result. A request is answered
 * 504 at its deadline wherever it is (a run it is part of goes on for the
 * others).
 *
 * The HTTP threads write most requests' rows straight into a batch's
 * staging as they parse them (fills, below), and run a request that finds
 * its model idle on their own loops (lanes); the main loop runs the rest.
 * What both touch (the fills, the instances in flight, the counters and
 * histograms) is under fill_mu, atomic, or under hist_mu.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

double serve_now(const serve_t *s) { return (double)uv_hrtime() / 1e9; }

static const double ROW_BOUNDS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
static const double SEC_BOUNDS[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                    0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
#define NB(a) ((int)(sizeof a / sizeof *a))

static void hist_init(serve_hist_t *h, const double *bounds, int n) {
  memset(h, 0, sizeof *h);
  h->bounds = bounds;
  h->n = n;
}

/* Histograms are added to on the main loop and on the lanes, and read for /metrics. */
static pthread_mutex_t hist_mu = PTHREAD_MUTEX_INITIALIZER;

void serve_hist_add(serve_hist_t *h, double v) {
  pthread_mutex_lock(&hist_mu);
  int i = 0;
  while (i < h->n && v > h->bounds[i]) i++;
  h->counts[i]++;
  h->sum += v;
  h->total++;
  pthread_mutex_unlock(&hist_mu);
}

void serve_model_init(serve_model_t *m) {
  pthread_mutex_init(&m->fill_mu, NULL);
  hist_init(&m->batch_rows, ROW_BOUNDS, NB(ROW_BOUNDS));
  hist_init(&m->batch_reqs, ROW_BOUNDS, NB(ROW_BOUNDS));
  hist_init(&m->latency, SEC_BOUNDS, NB(SEC_BOUNDS));
  hist_init(&m->queue_wait, SEC_BOUNDS, NB(SEC_BOUNDS));
  hist_init(&m->run_time, SEC_BOUNDS, NB(SEC_BOUNDS));
}

/* ---- answers ---- */
static void count_response(serve_model_t *m, int status) {
  int c = status == 200 ? 0 : status == 400 ? 1 : status == 404 ? 2 : status == 504 ? 4 : status >= 500 ? 3 : 5;
  m->responses[c]++;
  if (status != 200) m->failures++;
}

static void answer(serve_req_t *r, int status, char *body, size_t len, size_t json_len) {
  serve_model_t *m = r->model;
  count_response(m, status);
  serve_hist_add(&m->latency, serve_now(m->server) - r->t0);
  if (r->http) serve_http_reply(r, status, body, len, json_len, 0);
  else free(body);
}

static void answer_error(serve_req_t *r, int status, const char *msg) {
  char *body = serve_error_json("%s", msg);
  answer(r, status, body, body ? strlen(body) : 0, body ? strlen(body) : 0);
}

static void unlink_req(serve_model_t *m, serve_req_t *r) {
  if (r->prev) r->prev->next = r->next;
  else m->head = r->next;
  if (r->next) r->next->prev = r->prev;
  else m->tail = r->prev;
  r->next = r->prev = NULL;
  m->queued--;
  m->queued_rows -= r->rows;
}

static void maybe_drained(serve_t *s) {
  if (s->draining && serve_idle(s)) serve_drained(s);
}

/* ---- staging ---- */
/* A batch's inputs in host memory the device reads (rill_vm_host_alloc):
 * each request's rows are copied in once, and each parameter is wrapped as
 * a tensor, so a graph's input copy moves the whole batch to the device in
 * one asynchronous copy, with no upload and no wait on the loop. A set
 * serves one run at a time; the model keeps the sets its runs in flight
 * used (at most --instances) for the next. */
struct serve_stage {
  serve_stage_t *next;
  int n;                     /* parameters, then results (m->into) */
  void **host, **dev;
  size_t *cap;
};

bool serve_result_type(const serve_model_t *m, int k, int64_t rows, rill_type_t *out) {
  *out = m->results[k].type;
  for (int d = 0; d < out->rank; d++) {
    if (d == 0 && m->batch_var >= 0) {
      out->dims[0] = rows;
      continue;
    }
    if (out->dims[d] < 0) return false;
  }
  return true;
}

size_t serve_request_bytes(const serve_model_t *m) {
  size_t total = 0;
  for (int p = 0; p < m->nparams; p++) {
    const serve_io_t *io = &m->params[p];
    size_t n = rill_dtype_size(io->type.dtype);
    for (int d = m->batch_var >= 0 ? 1 : 0; d < io->type.rank; d++) {
      if (io->dim_var[d] != SERVE_DIM_FIXED || io->type.dims[d] < 0) return 0;
      if (io->type.dims[d] && n > SIZE_MAX / 2 / (size_t)io->type.dims[d]) return 0;
      n *= (size_t)io->type.dims[d];
    }
    if (n > SIZE_MAX / 2 - total) return 0;
    total += n;
  }
  return total;
}

static void stage_free(serve_model_t *m, serve_stage_t *g) {
  if (!g) return;
  for (int p = 0; p < g->n; p++)
    if (g->host && g->host[p]) rill_vm_host_free(m->vm, g->host[p]);
  free(g->host);
  free(g->dev);
  free(g->cap);
  free(g);
}

static void fills_free(serve_model_t *m);

void serve_stages_free(serve_model_t *m) {
  fills_free(m);
  while (m->stages) {
    serve_stage_t *g = m->stages;
    m->stages = g->next;
    stage_free(m, g);
  }
}

/* A set with room for need[p] bytes of each parameter (room for max_batch
 * rows of that row size, so it is made once); NULL with a status. */
static rill_status_t stage_get(serve_model_t *m, const size_t *need, int n, int64_t rows, serve_stage_t **out) {
  serve_stage_t **best = NULL;
  for (serve_stage_t **g = &m->stages; *g; g = &(*g)->next) {
    bool fits = (*g)->n == n;
    for (int p = 0; p < n && fits; p++) fits = (*g)->cap[p] >= need[p];
    if (fits) {
      best = g;
      break;
    }
  }
  if (best) {
    *out = *best;
    *best = (*best)->next;
    (*out)->next = NULL;
    return NULL;
  }
  /* none fits: the smallest goes (only sets of runs in flight are kept) */
  serve_stage_t *g = calloc(1, sizeof *g);
  if (!g || !(g->host = calloc((size_t)n + 1, sizeof *g->host)) || !(g->dev = calloc((size_t)n + 1, sizeof *g->dev)) ||
      !(g->cap = calloc((size_t)n + 1, sizeof *g->cap))) {
    stage_free(m, g);
    return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory staging a batch");
  }
  g->n = n;
  for (int p = 0; p < n; p++) {
    size_t room = need[p];
    if (m->batch_var >= 0 && rows > 0 && rows < m->max_batch && need[p] / (size_t)rows <= SIZE_MAX / (size_t)m->max_batch)
      room = need[p] / (size_t)rows * (size_t)m->max_batch;
    room = room < 64 ? 64 : room;
    rill_status_t st = rill_vm_host_alloc(m->vm, room, &g->host[p], &g->dev[p]);
    if (st) {
      stage_free(m, g);
      return st;
    }
    g->cap[p] = room;
  }
  *out = g;
  return NULL;
}

static void stage_put(serve_model_t *m, serve_stage_t *g) {
  if (!g) return;
  int kept = 0;
  for (serve_stage_t *h = m->stages; h; h = h->next) kept++;
  if (kept >= m->server->cfg.instances) {
    stage_free(m, g);
    return;
  }
  g->next = m->stages;
  m->stages = g;
}


/* ---- fills: batches the HTTP threads write as requests arrive ---- */
/* Where every parameter's sizes past the batch dimension are fixed and the
 * model is staged, a request's rows go straight into a staging set: the
 * HTTP thread that parsed it reserves the next rows of the open fill (a
 * batch being filled, under fill_mu), decodes its inputs there (JSON
 * values or binary bytes: the one copy of the body) and then posts it. The
 * main loop runs a fill when every request that reserved rows in it has
 * arrived (live == arrived), taking it from the HTTP threads first (no more
 * join). A request that leaves before (its parse failed, 503, its client
 * gone, its deadline) leaves zeroed or stale rows whose results nobody
 * reads. Fills are a fixed set (--instances + 2); when none is free a
 * request takes the other path (its own memory, copied by the main loop). */
struct serve_fill {
  serve_fill_t *next;       /* in fill_free */
  serve_stage_t *stage;
  int64_t rows;             /* rows reserved */
  int live;                 /* requests with rows here, not gone */
  int arrived;              /* of those, queued on the main loop */
  bool open;                /* the one being filled (m->fill_open) */
  bool taken;               /* running */
};

/* Bytes of one row of parameter p (its sizes past dimension 0 fixed). */
static size_t row_bytes(const serve_model_t *m, int p) {
  const rill_type_t *t = &m->params[p].type;
  size_t n = rill_dtype_size(t->dtype);
  for (int d = 1; d < t->rank; d++) n *= (size_t)t->dims[d];
  return n;
}

/* A fill that nobody uses goes back to the free list; with fill_mu held. */
static void fill_maybe_free(serve_model_t *m, serve_fill_t *f) {
  if (f->open || f->taken || f->live) return;
  f->rows = 0;
  f->arrived = 0;
  f->next = m->fill_free;
  m->fill_free = f;
}

/* The fills' staging sets, made on the main loop (before the HTTP threads
 * start, and after a VM is made again); none where the model cannot fill. */
static void fills_make(serve_model_t *m) {
  if (m->llm || !m->staged || m->batch_var < 0 || m->nparams > 64 || m->nresults > 64) return;
  for (int p = 0; p < m->nparams; p++)
    for (int d = 1; d < m->params[p].type.rank; d++)
      if (m->params[p].dim_var[d] != SERVE_DIM_FIXED) return;
  int64_t rows = m->max_batch;
  size_t need[128] = {0};
  bool into = m->into;
  for (int p = 0; p < m->nparams; p++) need[p] = row_bytes(m, p) * (size_t)rows;
  for (int k = 0; into && k < m->nresults; k++) {
    rill_type_t t;
    if (!serve_result_type(m, k, rows, &t)) into = false;
    else need[m->nparams + k] = rill_type_numel(&t) * rill_dtype_size(t.dtype);
  }
  if (!into && m->into) return;
  int n = m->server->cfg.instances + 2;
  serve_fill_t *f = calloc((size_t)n, sizeof *f);
  if (!f) return;
  for (int i = 0; i < n; i++) {
    serve_stage_t *g = calloc(1, sizeof *g);
    rill_status_t st = NULL;
    if (!g || !(g->host = calloc((size_t)m->nparams + (size_t)m->nresults + 1, sizeof *g->host)) ||
        !(g->dev = calloc((size_t)m->nparams + (size_t)m->nresults + 1, sizeof *g->dev)) ||
        !(g->cap = calloc((size_t)m->nparams + (size_t)m->nresults + 1, sizeof *g->cap)))
      st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
    if (g) g->n = m->nparams + (into ? m->nresults : 0);
    for (int p = 0; !st && p < g->n; p++) {
      size_t room = need[p] < 64 ? 64 : need[p];
      if (!(st = rill_vm_host_alloc(m->vm, room, &g->host[p], &g->dev[p]))) g->cap[p] = room;
    }
    if (st) {
      fprintf(stderr, "rill: serve: note: model '%s': staging for requests as they arrive failed (%s): the loop copies them\n", m->name,
              rill_status_message(st));
      rill_status_free(st);
      stage_free(m, g);
      for (int j = 0; j < i; j++) stage_free(m, f[j].stage);
      free(f);
      return;
    }
    f[i].stage = g;
  }
  pthread_mutex_lock(&m->fill_mu);
  m->fills = f;
  m->nfills = n;
  m->fill_open = m->fill_free = NULL;
  for (int i = n - 1; i >= 0; i--) fill_maybe_free(m, &f[i]);
  m->fill_on = true;
  pthread_mutex_unlock(&m->fill_mu);
}

/* With no run in flight and no fill being written: the fills go (with the VM
 * they were made on); requests queued in them get their rows copied out. */
static void fills_drop(serve_model_t *m) {
  for (serve_req_t *r = m->head; r; r = r->next) {
    serve_fill_t *f = r->fill;
    if (!f) continue;
    for (int p = 0; p < m->nparams; p++) {
      size_t rb = row_bytes(m, p), nb = rb * (size_t)r->rows;
      if ((r->in[p] = malloc(nb ? nb : 1))) memcpy(r->in[p], (uint8_t *)f->stage->host[p] + rb * (size_t)r->row, nb);
    }
    r->fill = NULL; /* (one whose copy failed runs with its input missing: answered 500) */
    r->arrived = false;
  }
  fills_free(m);
}

static void fills_free(serve_model_t *m) {
  pthread_mutex_lock(&m->fill_mu);
  for (int i = 0; i < m->nfills; i++) stage_free(m, m->fills[i].stage);
  free(m->fills);
  m->fills = m->fill_open = m->fill_free = NULL;
  m->nfills = 0;
  m->fill_on = false;
  pthread_mutex_unlock(&m->fill_mu);
}

/* Whether no HTTP thread is writing into a fill (after fill_on went false). */
static bool fills_quiet(serve_model_t *m) {
  bool quiet = true;
  pthread_mutex_lock(&m->fill_mu);
  m->fill_on = false;
  if (m->fill_open) {
    m->fill_open->open = false;
    serve_fill_t *f = m->fill_open;
    m->fill_open = NULL;
    fill_maybe_free(m, f);
  }
  for (int i = 0; i < m->nfills; i++)
    if (m->fills[i].live != m->fills[i].arrived || m->fills[i].taken) quiet = false;
  pthread_mutex_unlock(&m->fill_mu);
  return quiet;
}

bool serve_fill_reserve(serve_model_t *m, serve_req_t *r, uint8_t **dst, serve_lane_t *lane) {
  int64_t max = m->max_batch;
  if (r->rows < 1 || r->rows > max) return false;
  pthread_mutex_lock(&m->fill_mu);
  /* Alone: nothing waits, is being filled or runs: it runs on its own
   * thread, with a fill of its own (no hop to the main loop and back).
   * Where a run is in flight, requests gather on the main loop to batch
   * (a lane's run of one each would split them); a broken model's wait
   * there for its new VM. */
  int idle = 0;
  if (lane && m->fill_on && m->fill_free && !m->queued && !m->broken && !m->server->draining &&
      (!m->fill_open || !m->fill_open->live) && atomic_compare_exchange_strong(&m->inflight, &idle, 1)) {
    serve_fill_t *f = m->fill_free;
    m->fill_free = f->next;
    f->taken = true;
    f->rows = r->rows;
    pthread_mutex_unlock(&m->fill_mu);
    m->filled++;
    r->fill = f;
    r->row = 0;
    r->lane = lane;
    for (int p = 0; p < m->nparams; p++) dst[p] = (uint8_t *)f->stage->host[p];
    return true;
  }
  serve_fill_t *f = m->fill_on ? m->fill_open : NULL;
  if (f && !f->live) f->rows = 0; /* every request that had rows here left: they are nobody's */
  if (m->fill_on && (!f || f->rows + r->rows > max)) {
    if (f) { /* full: it runs as it is, and a new one opens */
      f->open = false;
      m->fill_open = NULL;
      fill_maybe_free(m, f);
    }
    if ((f = m->fill_free)) {
      m->fill_free = f->next;
      f->open = true;
      m->fill_open = f;
    }
  }
  if (f) {
    m->filled++;
    r->fill = f;
    r->row = f->rows;
    f->rows += r->rows;
    f->live++;
  }
  pthread_mutex_unlock(&m->fill_mu);
  for (int p = 0; f && p < m->nparams; p++) dst[p] = (uint8_t *)f->stage->host[p] + row_bytes(m, p) * (size_t)r->row;
  return f != NULL;
}

void serve_fill_placed(serve_req_t *r, bool ok) {
  serve_model_t *m = r->model;
  for (int p = 0; !ok && p < m->nparams; p++)
    memset((uint8_t *)r->fill->stage->host[p] + row_bytes(m, p) * (size_t)r->row, 0, row_bytes(m, p) * (size_t)r->rows);
}

void serve_fill_leave(serve_req_t *r) {
  serve_model_t *m = r->model;
  serve_fill_t *f = r->fill;
  pthread_mutex_lock(&m->fill_mu);
  if (r->lane) { /* its parse failed: the fill and the instance it took go back */
    f->taken = false;
    fill_maybe_free(m, f);
    pthread_mutex_unlock(&m->fill_mu);
    r->fill = NULL;
    r->lane = NULL;
    m->inflight--;
    if (m->queued || m->server->draining) serve_http_kick();
    return;
  }
  f->live--;
  if (r->arrived) f->arrived--;
  fill_maybe_free(m, f);
  pthread_mutex_unlock(&m->fill_mu);
  r->fill = NULL;
  r->arrived = false;
}

/* r (in a fill) is queued on the main loop. */
static void fill_arrive(serve_req_t *r) {
  serve_model_t *m = r->model;
  pthread_mutex_lock(&m->fill_mu);
  r->fill->arrived++;
  r->arrived = true;
  pthread_mutex_unlock(&m->fill_mu);
}

/* ---- copies into staging ---- */
/* A batch's copy into its staging set (tens of megabytes for images) is
 * split among --copy-threads threads and the loop's own, which waits for
 * them: the request bodies it reads belong to their connections, which
 * only the loop closes, so nothing outlives them. Copies under 1 MiB are
 * the loop's alone. */
typedef struct seg {
  uint8_t *dst;
  const uint8_t *src;
  size_t n;
} seg_t;

#define COPY_CHUNK ((size_t)256 << 10)
static struct {
  pthread_t th[16];
  int n;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  seg_t *segs;
  size_t nsegs, next, cap;
  int working;
  uint64_t round;
  bool quit;
} C = {.mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* Takes segments until none is left; with C.mu held on entry and exit. */
static void copy_some(void) {
  while (C.next < C.nsegs) {
    seg_t g = C.segs[C.next++];
    pthread_mutex_unlock(&C.mu);
    memcpy(g.dst, g.src, g.n);
    pthread_mutex_lock(&C.mu);
  }
}

static void *copier(void *arg) {
  (void)arg;
  uint64_t seen = 0;
  pthread_mutex_lock(&C.mu);
  for (;;) {
    while (!C.quit && C.round == seen) pthread_cond_wait(&C.go, &C.mu);
    if (C.quit) break;
    seen = C.round;
    C.working++;
    copy_some();
    if (--C.working == 0) pthread_cond_signal(&C.done);
  }
  pthread_mutex_unlock(&C.mu);
  return NULL;
}

static int copiers_start(int n) {
  C.quit = false;
  for (C.n = 0; C.n < n && C.n < 16; C.n++)
    if (pthread_create(&C.th[C.n], NULL, copier, NULL) != 0) break;
  return 0;
}

static void copiers_stop(void) {
  pthread_mutex_lock(&C.mu);
  C.quit = true;
  pthread_cond_broadcast(&C.go);
  pthread_mutex_unlock(&C.mu);
  for (int i = 0; i < C.n; i++) pthread_join(C.th[i], NULL);
  C.n = 0;
  free(C.segs);
  C.segs = NULL;
  C.nsegs = C.cap = C.next = 0;
}

/* Queues a copy (split into chunks), done by copies_run. */
static bool copy_add(uint8_t *dst, const uint8_t *src, size_t n) {
  bool ok = true;
  pthread_mutex_lock(&C.mu); /* a thread late from the last round may take these already */
  for (size_t at = 0; at < n; at += COPY_CHUNK) {
    if (C.nsegs == C.cap) {
      size_t cap = C.cap ? C.cap * 2 : 256;
      seg_t *p = realloc(C.segs, cap * sizeof *p);
      if (!p) {
        ok = false;
        break;
      }
      C.segs = p;
      C.cap = cap;
    }
    C.segs[C.nsegs++] = (seg_t){dst + at, src + at, n - at < COPY_CHUNK ? n - at : COPY_CHUNK};
  }
  if (!ok) /* this copy's chunks out again: the caller copies it whole */
    while (C.nsegs > C.next && C.segs[C.nsegs - 1].dst >= dst && C.segs[C.nsegs - 1].dst < dst + n) C.nsegs--;
  pthread_mutex_unlock(&C.mu);
  return ok;
}

/* Runs the queued copies (the threads help with 1 MiB and more) and clears them. */
static void copies_run(void) {
  size_t total = 0;
  pthread_mutex_lock(&C.mu);
  for (size_t i = C.next; i < C.nsegs; i++) total += C.segs[i].n;
  pthread_mutex_unlock(&C.mu);
  pthread_mutex_lock(&C.mu);
  if (C.n && total >= ((size_t)1 << 20)) {
    C.round++;
    pthread_cond_broadcast(&C.go);
  }
  copy_some();
  while (C.working) pthread_cond_wait(&C.done, &C.mu);
  C.nsegs = C.next = 0;
  pthread_mutex_unlock(&C.mu);
}

/* ---- runs ---- */
typedef struct batch {
  struct batch *next, *prev; /* the model's runs in flight */
  serve_model_t *m;
  int n;
  int64_t rows;
  double t_start;
  rill_tensor_t **inputs;
  serve_stage_t *stage;      /* the inputs' host memory, or NULL (uploaded) */
  serve_fill_t *fill;        /* the fill it runs (its stage), or NULL */
  serve_lane_t *lane;        /* runs on this HTTP thread's loop, or NULL: the main loop's */
  rill_tensor_t **outputs;   /* the results' (m->into), or NULL: results read after the run */
  rill_type_t *out_types;
  serve_req_t *reqs[];
} batch_t;

static void dispatch(serve_model_t *m);

static void batch_free(batch_t *b) {
  for (int p = 0; p < b->m->nparams; p++)
    if (b->inputs && b->inputs[p]) rill_tensor_release(b->inputs[p]);
  free(b->inputs);
  for (int k = 0; b->outputs && k < b->m->nresults; k++)
    if (b->outputs[k]) rill_tensor_release(b->outputs[k]);
  free(b->outputs);
  free(b->out_types);
  if (b->fill) {
    pthread_mutex_lock(&b->m->fill_mu);
    b->fill->taken = false;
    fill_maybe_free(b->m, b->fill);
    pthread_mutex_unlock(&b->m->fill_mu);
  } else {
    stage_put(b->m, b->stage);
  }
  for (int i = 0; i < b->n; i++) serve_req_free(b->reqs[i]);
  free(b);
}
/* Reads the results and answers each request in b with its rows. */
static void split_results(batch_t *b, rill_tensor_t **results, int nres) {
  serve_model_t *m = b->m;
  uint8_t **host = calloc((size_t)nres + 1, sizeof *host);
  rill_type_t *types = calloc((size_t)nres + 1, sizeof *types);
  char msg[512] = "";
  if (!host || !types) snprintf(msg, sizeof msg, "out of memory reading the results");
  for (int k = 0; !msg[0] && b->outputs && k < nres; k++) { /* already in host memory: the run copied them there */
    types[k] = b->out_types[k];
    host[k] = b->stage->host[m->nparams + k];
  }
  for (int k = 0; !msg[0] && !b->outputs && k < nres; k++) {
    types[k] = *rill_tensor_type(results[k]);
    if (m->batch_var >= 0 && (types[k].rank == 0 || types[k].dims[0] != b->rows)) {
      snprintf(msg, sizeof msg, "result %d has %" PRId64 " rows for a batch of %" PRId64 " rows: model '%s' cannot be batched", k + 1,
               types[k].rank ? types[k].dims[0] : 0, b->rows, m->name);
      if (b->n > 1) {
        fprintf(stderr, "rill: serve: %s; its requests run one at a time from now on\n", msg);
        m->max_batch = 1;
      }
      break;
    }
    size_t nb = rill_tensor_nbytes(results[k]);
    rill_status_t st = NULL;
    if (!(host[k] = malloc(nb ? nb : 1))) snprintf(msg, sizeof msg, "out of memory reading result %d", k + 1);
    else if ((st = rill_tensor_read(results[k], host[k], nb))) snprintf(msg, sizeof msg, "reading result %d: %s", k + 1, rill_status_message(st));
    rill_status_free(st);
  }
  for (int i = 0; i < b->n; i++) {
    serve_req_t *r = b->reqs[i];
    int64_t row = r->row;
    if (msg[0]) {
      if (r->http) answer_error(r, 500, msg);
      continue;
    }
    char *body = NULL;
    size_t len = 0, jl = 0;
    if (r->http) {
      int status = serve_build_response(m, r, host, types, row, &body, &len, &jl);
      if (status == 200) answer(r, 200, body, len, jl);
      else answer_error(r, 500, "out of memory writing the response");
    }
  }
  for (int k = 0; host && !b->outputs && k < nres; k++) free(host[k]);
  free(host);
  free(types);
}

static void run_end(batch_t *b, rill_status_t st, rill_tensor_t **results, int nres) {
  serve_model_t *m = b->m;
  void **running = b->lane ? &b->lane->running : &m->running;
  if (b->prev) b->prev->next = b->next;
  else *running = b->next;
  if (b->next) b->next->prev = b->prev;
  serve_hist_add(&m->run_time, serve_now(m->server) - b->t_start);
  if (st) {
    /* one request alone whose sizes the VM refused: the request's fault */
    int status = b->n == 1 && rill_status_code(st) == RILL_INVALID_ARGUMENT ? 400 : 500;
    /* A device keeps a failed op's error (as CUDA does): runs after it
     * would fail the same way. */
    if (rill_status_code(st) == RILL_RUNTIME_ERROR && !m->broken) {
      fprintf(stderr, "rill: serve: model '%s': a run failed (%s): its VM is made again once its runs end\n", m->name, rill_status_message(st));
      m->broken = true;
    }
    for (int i = 0; i < b->n; i++)
      if (b->reqs[i]->http) answer_error(b->reqs[i], status, rill_status_message(st));
    rill_status_free(st);
  } else {
    split_results(b, results, nres);
    rill_results_free(m->vm, results, nres);
  }
  bool lane = b->lane != NULL;
  if (lane && !b->lane->running) uv_idle_stop(&b->lane->spin);
  batch_free(b);
  m->inflight--; /* after its fill is free again */
  /* the main loop starts what waits for the instance, makes a broken VM
   * again, or ends a drain */
  if (lane && (m->queued || m->broken || m->server->draining)) serve_http_kick();
}

static void on_run(void *user, rill_status_t st, rill_tensor_t **results, int nres) {
  batch_t *b = user;
  serve_model_t *m = b->m;
  if (b->lane) {
    run_end(b, st, results, nres);
    return;
  }
  run_end(b, st, results, nres);
  dispatch(m);
  maybe_drained(m->server);
}

/* One of the model's --instances for a run; false where all are taken. */
static bool claim(serve_model_t *m) {
  int v = m->inflight;
  while (v < m->server->cfg.instances)
    if (atomic_compare_exchange_weak(&m->inflight, &v, v + 1)) return true;
  return false;
}

/* Whether request r can join a batch whose first request is h. */
static bool same_sizes(const serve_model_t *m, const serve_req_t *h, const serve_req_t *r) {
  for (int p = 0; p < m->nparams; p++)
    for (int d = 1; d < h->in_type[p].rank; d++)
      if (h->in_type[p].dims[d] != r->in_type[p].dims[d]) return false;
  return true;
}

/* The batch's inputs: in a staging set (wrapped, the device reads them
 * there) where the model takes them so, else uploaded (rill_tensor_create). */
static rill_status_t batch_inputs(serve_model_t *m, batch_t *b) {
  size_t need[128] = {0};
  rill_type_t types[64];
  if (m->nparams > 64 || m->nresults > 64) return rill_status_new(RILL_UNIMPLEMENTED, "more than 64 inputs or outputs");
  for (int p = 0; p < m->nparams; p++) {
    types[p] = b->reqs[0]->in_type[p];
    if (b->n > 1 || b->fill) types[p].dims[0] = b->rows;
    need[p] = rill_type_numel(&types[p]) * rill_dtype_size(types[p].dtype);
  }
  bool into = m->staged && m->into;
  if (into) {
    if (!(b->out_types = calloc((size_t)m->nresults + 1, sizeof *b->out_types)) ||
        !(b->outputs = calloc((size_t)m->nresults + 1, sizeof *b->outputs)))
      return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
    for (int k = 0; k < m->nresults; k++) {
      serve_result_type(m, k, b->rows, &b->out_types[k]);
      need[m->nparams + k] = rill_type_numel(&b->out_types[k]) * rill_dtype_size(b->out_types[k].dtype);
    }
  }
  if (m->staged) {
    rill_status_t st = NULL;
    if (b->fill) b->stage = b->fill->stage; /* written already, by the HTTP threads */
    else if ((st = stage_get(m, need, m->nparams + (into ? m->nresults : 0), b->rows, &b->stage))) return st;
    for (int k = 0; into && k < m->nresults; k++)
      if ((st = rill_tensor_wrap(m->vm, &b->out_types[k], b->stage->dev[m->nparams + k], NULL, NULL, &b->outputs[k]))) return st;
    bool queued = true;
    for (int p = 0; !b->fill && p < m->nparams; p++) {
      size_t at = 0;
      for (int i = 0; i < b->n; i++) {
        size_t nb = rill_type_numel(&b->reqs[i]->in_type[p]) * rill_dtype_size(types[p].dtype);
        if (queued && !copy_add((uint8_t *)b->stage->host[p] + at, b->reqs[i]->in[p], nb)) queued = false;
        if (!queued) memcpy((uint8_t *)b->stage->host[p] + at, b->reqs[i]->in[p], nb);
        at += nb;
      }
    }
    if (!b->fill) copies_run(); /* (what was queued before a failed copy_add, the rest done above) */
    for (int p = 0; p < m->nparams; p++)
      if ((st = rill_tensor_wrap(m->vm, &types[p], b->stage->dev[p], NULL, NULL, &b->inputs[p]))) return st;
    return NULL;
  }
  for (int p = 0; p < m->nparams; p++) {
    const uint8_t *data = b->reqs[0]->in[p];
    uint8_t *joined = NULL;
    if (b->n > 1) {
      if (!(joined = malloc(need[p] ? need[p] : 1))) return rill_status_new(RILL_OUT_OF_MEMORY, "out of memory joining a batch");
      size_t at = 0;
      for (int i = 0; i < b->n; i++) {
        size_t nb = rill_type_numel(&b->reqs[i]->in_type[p]) * rill_dtype_size(types[p].dtype);
        memcpy(joined + at, b->reqs[i]->in[p], nb);
        at += nb;
      }
      data = joined;
    }
    rill_status_t st = rill_tensor_create(m->vm, &types[p], data, &b->inputs[p]);
    free(joined);
    if (st) return st;
  }
  return NULL;
}

typedef struct probe {
  bool done;
  rill_status_t st;
  rill_tensor_t **res;
  int n;
} probe_t;

static void on_probe(void *user, rill_status_t st, rill_tensor_t **res, int n) {
  probe_t *p = user;
  p->done = true;
  p->st = st;
  p->res = res;
  p->n = n;
}

/* Reads result k of a run into malloc'd memory; NULL on failure. */
static uint8_t *read_result(rill_tensor_t *t) {
  size_t nb = rill_tensor_nbytes(t);
  uint8_t *h = malloc(nb ? nb : 1);
  rill_status_t st = h ? rill_tensor_read(t, h, nb) : NULL;
  if (st) {
    free(h);
    h = NULL;
  }
  rill_status_free(st);
  return h;
}

bool serve_staged_probe(serve_model_t *m, int64_t rows, char *why, size_t nwhy) {
  const char *fn = m->server->cfg.function;
  int64_t vals[64];
  for (int v = 0; v < m->nvars && v < 64; v++) vals[v] = m->var_lo[v];
  if (m->batch_var >= 0) vals[m->batch_var] = rows;
  serve_req_t r = {.model = m, .rows = rows};
  batch_t *b = calloc(1, sizeof *b + sizeof(serve_req_t *));
  r.in_type = calloc((size_t)m->nparams + 1, sizeof *r.in_type);
  r.in = calloc((size_t)m->nparams + 1, sizeof *r.in);
  rill_tensor_t **up = calloc((size_t)m->nparams + 1, sizeof *up), **want = NULL;
  int nwant = 0;
  probe_t pr = {0};
  rill_status_t st = b && r.in_type && r.in && up ? NULL : rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  for (int p = 0; !st && p < m->nparams; p++) {
    if (!rill_module_param_type_at(m->module, fn, p, m->nvars ? vals : NULL, &r.in_type[p])) {
      st = rill_status_new(RILL_INVALID_ARGUMENT, "no sizes for parameter %d", p + 1);
      break;
    }
    size_t nb = rill_type_numel(&r.in_type[p]) * rill_dtype_size(r.in_type[p].dtype);
    if (!(r.in[p] = calloc(nb ? nb : 1, 1))) st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
    else st = rill_tensor_create(m->vm, &r.in_type[p], r.in[p], &up[p]);
  }
  if (!st) st = rill_vm_invoke(m->vm, fn, up, m->nparams, &want, &nwant);
  if (!st) {
    b->m = m;
    b->n = 1;
    b->rows = rows;
    b->reqs[0] = &r;
    if (!(b->inputs = calloc((size_t)m->nparams + 1, sizeof *b->inputs))) st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  }
  if (!st) st = batch_inputs(m, b);
  uv_loop_t loop;
  bool looped = !st && uv_loop_init(&loop) == 0;
  if (!st && !looped) st = rill_status_new(RILL_UNAVAILABLE, "cannot create an event loop");
  if (!st && b->outputs) st = rill_vm_invoke_async_into(m->vm, &loop, fn, b->inputs, m->nparams, b->outputs, m->nresults, on_probe, &pr);
  else if (!st) st = rill_vm_invoke_async(m->vm, &loop, fn, b->inputs, m->nparams, on_probe, &pr);
  if (!st) {
    uv_run(&loop, UV_RUN_DEFAULT);
    st = pr.done ? pr.st : rill_status_new(RILL_INTERNAL, "the run did not end");
    pr.st = NULL;
  }
  if (looped) uv_loop_close(&loop);
  /* the same bytes as the uploaded run's */
  for (int k = 0; !st && k < nwant && k < pr.n; k++) {
    uint8_t *w = read_result(want[k]), *g = b->outputs ? NULL : read_result(pr.res[k]);
    const uint8_t *got = b->outputs ? b->stage->host[m->nparams + k] : g;
    if (!w || !got) st = rill_status_new(RILL_RUNTIME_ERROR, "reading result %d failed", k + 1);
    else if (rill_tensor_nbytes(want[k]) != rill_tensor_nbytes(pr.res[k]) || memcmp(w, got, rill_tensor_nbytes(want[k])))
      st = rill_status_new(RILL_RUNTIME_ERROR, "result %d differs from an uploaded run's", k + 1);
    free(w);
    free(g);
  }
  if (pr.res) rill_results_free(m->vm, pr.res, pr.n);
  if (want) rill_results_free(m->vm, want, nwant);
  for (int p = 0; up && p < m->nparams; p++)
    if (up[p]) rill_tensor_release(up[p]);
  free(up);
  if (b) {
    b->n = 0; /* r is this function's */
    b->m = m;
    batch_free(b);
  }
  for (int p = 0; r.in && p < m->nparams; p++) free(r.in[p]);
  free(r.in);
  free(r.in_type);
  if (st) snprintf(why, nwhy, "%s", rill_status_message(st));
  rill_status_free(st);
  return st == NULL;
}

static void on_spin(uv_idle_t *h) { (void)h; }

/* Starts b (its instance claimed) on its loop. */
static void run_batch(serve_model_t *m, batch_t *b) {
  serve_t *s = m->server;
  uv_loop_t *loop = b->lane ? b->lane->loop : s->loop;
  rill_status_t st = NULL;
  b->t_start = serve_now(s);
  if (!(b->inputs = calloc((size_t)m->nparams + 1, sizeof *b->inputs))) st = rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  if (!st) st = batch_inputs(m, b);
  for (int i = 0; i < b->n; i++) {
    serve_req_t *r = b->reqs[i];
    r->t_run = b->t_start;
    serve_hist_add(&m->queue_wait, b->t_start - r->t0);
    /* the inputs are the batch's now (and the body may go with the connection) */
    for (int p = 0; p < m->nparams; p++) {
      free(r->in[p]);
      r->in[p] = NULL;
    }
  }
  /* on the list before the run starts: its callback may come on another thread (the loop's) at once */
  void **running = b->lane ? &b->lane->running : &m->running;
  /* A lane's loop polls while its runs are in flight on a GPU: the run's
   * end comes as a wake-up of the loop (uv_async), and a thread asleep in
   * epoll_wait wakes tens of microseconds late on some machines, a request
   * alone paying it each time. The main loop is busy whenever runs queue. */
  if (b->lane && b->lane->poll) uv_idle_start(&b->lane->spin, on_spin);
  b->next = *running;
  if (*running) ((batch_t *)*running)->prev = b;
  *running = b;
  m->runs++;
  serve_hist_add(&m->batch_rows, (double)b->rows);
  serve_hist_add(&m->batch_reqs, (double)b->n);
  if (!st && b->outputs) st = rill_vm_invoke_async_into(m->vm, loop, s->cfg.function, b->inputs, m->nparams, b->outputs, m->nresults, on_run, b);
  else if (!st) st = rill_vm_invoke_async(m->vm, loop, s->cfg.function, b->inputs, m->nparams, on_run, b);
  if (st) run_end(b, st, NULL, 0);
}

static void on_delay(uv_timer_t *t) { dispatch(t->data); }

/* Whether to wait for more requests to join a run of h's (rows: the rows
 * it would have): while a run of the model is in flight, until the oldest
 * has waited --batch-delay-us, the rows reach --max-batch, or none has
 * arrived for --batch-quiet-us. The device is busy then, and a batch
 * started at once would only queue behind that run, smaller: at 64
 * clients, batches of 21 rows padded to 24 ran where 32 could have waited
 * (0.83x the offline rate, run FB). But clients answered together come
 * back together, within a fraction of a run: once they are in, waiting out
 * the rest of the delay leaves an instance idle (at 64 clients and a delay
 * of 1 ms, two instances' runs of 23.9 rows took 2.127 ms, 22,470 images a
 * second were they back to back, and 18,933 came: run FI). With the model
 * idle the requests run at once: waiting would leave the device idle. */
static bool delay(serve_model_t *m, serve_req_t *h, int64_t rows) {
  serve_t *s = m->server;
  if (!(m->max_batch > 1 && m->inflight > 0 && rows < m->max_batch && s->cfg.batch_delay_us > 0 && !s->draining)) return false;
  double now = serve_now(s), wait = h->t0 + (double)s->cfg.batch_delay_us / 1e6 - now;
  if (s->cfg.batch_quiet_us > 0) wait = fmin(wait, m->last_arrival + (double)s->cfg.batch_quiet_us / 1e6 - now);
  if (wait <= 0) return false;
  /* A timer counts whole milliseconds of the loop's cached clock: a wait's
   * last millisecond, and so the whole of a quiet time under one (125 us
   * at the default with a 1 ms delay), is spun out on the loop instead
   * (on_check dispatches after every poll), not stretched to 1 to 2 ms.
   * The spin ends once the batch starts or the instances are all busy. */
  if (wait < 1e-3) uv_idle_start(&s->wait_spin, on_spin);
  else uv_timer_start(&m->delay_timer, on_delay, (uint64_t)(wait * 1e3), 0);
  return true;
}

/* Starts the run of h's fill once every request with rows in it has come;
 * false where it waits (for them, or for more to join). */
static bool dispatch_fill(serve_model_t *m, serve_req_t *h) {
  serve_fill_t *f = h->fill;
  pthread_mutex_lock(&m->fill_mu);
  int64_t rows = f->rows;
  bool open = f->open; /* (a closed one is full: none can join it) */
  pthread_mutex_unlock(&m->fill_mu);
  if ((open && delay(m, h, rows)) || !claim(m)) return false;
  pthread_mutex_lock(&m->fill_mu);
  if (f->open) { /* no more join it */
    f->open = false;
    m->fill_open = NULL;
  }
  bool ready = f->live == f->arrived; /* else rows are being written: the last one's arrival dispatches again */
  int n = f->arrived;
  if (ready) {
    f->taken = true;
    rows = f->rows;
    f->live = f->arrived = 0;
  }
  pthread_mutex_unlock(&m->fill_mu);
  if (!ready) {
    m->inflight--;
    return false;
  }
  batch_t *b = calloc(1, sizeof *b + (size_t)n * sizeof(serve_req_t *));
  for (serve_req_t *r = m->head, *next; r; r = next) {
    next = r->next;
    if (r->fill != f) continue;
    unlink_req(m, r);
    r->fill = NULL; /* the batch's now */
    r->arrived = false;
    if (b && b->n < n) {
      r->state = SERVE_RUNNING;
      b->reqs[b->n++] = r;
    } else {
      answer_error(r, 500, "out of memory starting a run");
      serve_req_free(r);
    }
  }
  if (!b) {
    pthread_mutex_lock(&m->fill_mu);
    f->taken = false;
    fill_maybe_free(m, f);
    pthread_mutex_unlock(&m->fill_mu);
    m->inflight--;
    return true;
  }
  b->m = m;
  b->rows = rows;
  b->fill = f;
  run_batch(m, b);
  return true;
}

/* Starts runs while an instance is free and requests wait. */
static void dispatch(serve_model_t *m) {
  serve_t *s = m->server;
  if (m->broken && m->head) {
    if (m->inflight) return;
    if (m->nfills && !fills_quiet(m)) return; /* (tried again as requests come, and by the sweep) */
    fills_drop(m);
    if (!serve_model_renew(m)) {
      while (m->head) {
        serve_req_t *r = m->head;
        unlink_req(m, r);
        answer_error(r, 500, "the model's VM could not be made again after a failed run");
        serve_req_free(r);
      }
      return;
    }
    m->broken = false;
    fills_make(m);
  }
  while (m->head && m->inflight < s->cfg.instances) {
    serve_req_t *h = m->head;
    if (h->fill) {
      if (!dispatch_fill(m, h)) return;
      continue;
    }
    if (delay(m, h, m->queued_rows)) return;
    if (!claim(m)) return;
    int n = 0;
    int64_t rows = 0;
    for (serve_req_t *r = h; r; r = r->next)
      if (r == h || (!r->fill && rows + r->rows <= m->max_batch && same_sizes(m, h, r))) {
        n++;
        rows += r->rows;
        if (rows >= m->max_batch) break;
      }
    batch_t *b = calloc(1, sizeof *b + (size_t)n * sizeof(serve_req_t *));
    if (!b) {
      m->inflight--;
      unlink_req(m, h);
      answer_error(h, 500, "out of memory starting a run");
      serve_req_free(h);
      continue;
    }
    b->m = m;
    rows = 0;
    for (serve_req_t *r = h, *next; r && b->n < n; r = next) {
      next = r->next;
      if (r == h || (!r->fill && rows + r->rows <= m->max_batch && same_sizes(m, h, r))) {
        unlink_req(m, r);
        r->state = SERVE_RUNNING;
        r->row = rows;
        b->reqs[b->n++] = r;
        rows += r->rows;
      }
    }
    b->rows = rows;
    run_batch(m, b);
  }
}

static void on_check(uv_check_t *c);

/* ---- lanes: a request alone, run on the HTTP thread that parsed it ---- */
void serve_lane_run(serve_req_t *r) {
  serve_model_t *m = r->model;
  serve_t *s = m->server;
  m->requests++;
  r->t0 = r->t0 ? r->t0 : serve_now(s);
  r->deadline = r->t0 + (double)s->cfg.timeout_ms / 1e3;
  if (r->timeout_s >= 0 && r->t0 + r->timeout_s < r->deadline) r->deadline = r->t0 + r->timeout_s;
  r->state = SERVE_RUNNING;
  batch_t *b = calloc(1, sizeof *b + sizeof(serve_req_t *));
  if (!b) {
    answer_error(r, 500, "out of memory starting a run");
    serve_req_free(r); /* (its fill and instance go back) */
    return;
  }
  b->m = m;
  b->n = 1;
  b->reqs[0] = r;
  b->rows = r->rows;
  b->fill = r->fill;
  b->lane = r->lane;
  m->lane_runs++;
  r->fill = NULL; /* the batch's now */
  r->lane = NULL;
  run_batch(m, b);
}

void serve_lane_sweep(serve_lane_t *lane) {
  for (batch_t *b = lane->running; b; b = b->next) {
    serve_req_t *r = b->reqs[0];
    if (r->http && serve_now(b->m->server) >= r->deadline) {
      b->m->timeouts++;
      answer_error(r, 504, "the request's deadline passed while it ran");
    }
  }
}

void serve_kick(serve_t *s) {
  if (!uv_is_active((uv_handle_t *)&s->check)) uv_check_start(&s->check, on_check);
  maybe_drained(s);
}

static void on_check(uv_check_t *c) {
  serve_t *s = c->data;
  bool waiting = false;
  uv_idle_stop(&s->wait_spin); /* (a dispatch below that still waits starts it again) */
  for (int i = 0; i < s->nmodels; i++) {
    if (s->models[i]->llm) continue;
    dispatch(s->models[i]);
    waiting |= s->models[i]->head != NULL;
  }
  if (!waiting) uv_check_stop(c);
}

/* Deadlines: requests past theirs are answered 504. */
static void on_sweep(uv_timer_t *t) {
  serve_t *s = t->data;
  double now = serve_now(s);
  for (int i = 0; i < s->nmodels; i++) {
    serve_model_t *m = s->models[i];
    if (m->llm) {
      serve_llm_sweep(m, now);
      continue;
    }
    for (serve_req_t *r = m->head, *next; r; r = next) {
      next = r->next;
      if (r->http && serve_http_gone(r->http)) { /* its client went: not run */
        unlink_req(m, r);
        serve_http_drop(r->http);
        r->http = NULL;
        serve_req_free(r);
        continue;
      }
      if (now < r->deadline) continue;
      unlink_req(m, r);
      m->timeouts++;
      answer_error(r, 504, "the request's deadline passed while it waited to run");
      serve_req_free(r);
    }
    /* Requests inside runs: answered now, their rows dropped at the run's end. */
    for (batch_t *b = m->running; b; b = b->next)
      for (int k = 0; k < b->n; k++)
        if (b->reqs[k]->http && now >= b->reqs[k]->deadline) {
          m->timeouts++;
          answer_error(b->reqs[k], 504, "the request's deadline passed while it ran");
        }
    /* a fill whose last request left without arriving (its parse failed) is not waited for past here */
    if (m->head) dispatch(m);
  }
  maybe_drained(s);
}

int serve_start(serve_t *s) {
  int e = uv_check_init(s->loop, &s->check);
  if (!e) e = uv_timer_init(s->loop, &s->sweep);
  if (!e) e = uv_idle_init(s->loop, &s->wait_spin);
  if (e) return e;
  s->check.data = s;
  s->sweep.data = s;
  for (int i = 0; i < s->nmodels; i++) {
    uv_timer_init(s->loop, &s->models[i]->delay_timer);
    s->models[i]->delay_timer.data = s->models[i];
    if (s->models[i]->llm && (e = serve_llm_start(s->models[i]))) return e;
  }
  copiers_start(s->cfg.copy_threads);
  for (int i = 0; i < s->nmodels; i++) fills_make(s->models[i]);
  uint64_t tick = s->cfg.timeout_ms < 100 ? (uint64_t)(s->cfg.timeout_ms / 4 + 1) : 20;
  return uv_timer_start(&s->sweep, on_sweep, tick, tick);
}

void serve_stop(serve_t *s) {
  copiers_stop();
  uv_close((uv_handle_t *)&s->check, NULL);
  uv_close((uv_handle_t *)&s->sweep, NULL);
  uv_close((uv_handle_t *)&s->wait_spin, NULL);
  for (int i = 0; i < s->nmodels; i++) {
    uv_close((uv_handle_t *)&s->models[i]->delay_timer, NULL);
    if (s->models[i]->llm) serve_llm_stop(s->models[i]);
  }
}

int serve_submit(serve_t *s, serve_req_t *r, char *err, size_t nerr) {
  serve_model_t *m = r->model;
  m->requests++;
  if ((s->draining || m->queued >= s->cfg.max_queue) && r->fill && !uv_is_active((uv_handle_t *)&s->check))
    uv_check_start(&s->check, on_check); /* its fill may be whole without it */
  if (s->draining) {
    snprintf(err, nerr, "the server is shutting down");
    m->rejected++;
    count_response(m, 503);
    return 503;
  }
  if (m->queued >= s->cfg.max_queue) {
    snprintf(err, nerr, "model '%s' has %d requests waiting, its limit (--max-queue)", m->name, (int)m->queued);
    m->rejected++;
    count_response(m, 503);
    return 503;
  }
  if (r->t0 == 0) r->t0 = serve_now(s); /* (the HTTP thread sets its arrival) */
  r->deadline = r->t0 + (double)s->cfg.timeout_ms / 1e3;
  if (r->timeout_s >= 0 && r->t0 + r->timeout_s < r->deadline) r->deadline = r->t0 + r->timeout_s;
  r->state = SERVE_QUEUED;
  r->prev = m->tail;
  if (m->tail) m->tail->next = r;
  else m->head = r;
  m->tail = r;
  m->queued++;
  m->queued_rows += r->rows;
  m->last_arrival = serve_now(s);
  if (r->fill) fill_arrive(r);
  if (!uv_is_active((uv_handle_t *)&s->check)) uv_check_start(&s->check, on_check);
  return 0;
}

bool serve_idle(const serve_t *s) {
  for (int i = 0; i < s->nmodels; i++)
    if (s->models[i]->head || s->models[i]->inflight || (s->models[i]->llm && !serve_llm_idle(s->models[i]))) return false;
  return true;
}

/* ---- /metrics (Prometheus text format 0.0.4) ---- */
typedef struct out {
  char *p;
  size_t len, cap;
} out_t;

static void outf(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(out_t *o, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = o->p ? vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap) : -1;
    va_end(ap);
    if (n >= 0 && o->len + (size_t)n < o->cap) {
      o->len += (size_t)n;
      return;
    }
    size_t cap = o->cap ? o->cap * 2 : 4096;
    char *p = realloc(o->p, cap);
    if (!p) return;
    o->p = p;
    o->cap = cap;
  }
}

static void hist_text(out_t *o, const char *name, const char *model, const serve_hist_t *h) {
  uint64_t cum = 0;
  for (int i = 0; i <= h->n; i++) {
    cum += h->counts[i];
    if (i < h->n) outf(o, "%s_bucket{model=\"%s\",le=\"%g\"} %" PRIu64 "\n", name, model, h->bounds[i], cum);
    else outf(o, "%s_bucket{model=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", name, model, cum);
  }
  outf(o, "%s_sum{model=\"%s\"} %.9g\n%s_count{model=\"%s\"} %" PRIu64 "\n", name, model, h->sum, name, model, h->total);
}

typedef enum { COUNTER, GAUGE } kind_t;

char *serve_metrics_text(serve_t *s, size_t *out_len) {
  out_t o = {0};
  static const struct {
    const char *name, *help;
    kind_t kind;
    size_t off;
  } SCALARS[] = {
      {"rill_serve_requests_total", "inference requests received", COUNTER, offsetof(serve_model_t, requests)},
      {"rill_serve_failures_total", "inference requests answered with an error", COUNTER, offsetof(serve_model_t, failures)},
      {"rill_serve_rejected_total", "inference requests refused with 503 (queue full or shutting down)", COUNTER,
       offsetof(serve_model_t, rejected)},
      {"rill_serve_timeouts_total", "inference requests answered 504 at their deadline", COUNTER, offsetof(serve_model_t, timeouts)},
      {"rill_serve_runs_total", "invocations of the model (each a batch of one or more requests; a generation each)", COUNTER, offsetof(serve_model_t, runs)},
      {"rill_serve_filled_requests_total", "inference requests decoded by their HTTP thread straight into their batch's staging memory",
       COUNTER, offsetof(serve_model_t, filled)},
      {"rill_serve_lane_runs_total", "runs of a request alone (its model idle) on the HTTP thread that read it, not on the main loop",
       COUNTER, offsetof(serve_model_t, lane_runs)},
      {"rill_serve_generated_tokens_total", "tokens generated and sent (generate endpoints)", COUNTER, offsetof(serve_model_t, tokens)},
  };
  for (size_t k = 0; k < sizeof SCALARS / sizeof *SCALARS; k++) {
    outf(&o, "# HELP %s %s\n# TYPE %s %s\n", SCALARS[k].name, SCALARS[k].help, SCALARS[k].name,
         SCALARS[k].kind == COUNTER ? "counter" : "gauge");
    for (int i = 0; i < s->nmodels; i++)
      outf(&o, "%s{model=\"%s\"} %" PRIu64 "\n", SCALARS[k].name, s->models[i]->name,
           atomic_load((const _Atomic uint64_t *)((const char *)s->models[i] + SCALARS[k].off)));
  }
  static const char *CLASSES[] = {"2xx", "400", "404", "5xx", "504", "other"};
  outf(&o, "# HELP rill_serve_responses_total inference responses by status\n# TYPE rill_serve_responses_total counter\n");
  for (int i = 0; i < s->nmodels; i++)
    for (int c = 0; c < 6; c++)
      outf(&o, "rill_serve_responses_total{model=\"%s\",code=\"%s\"} %" PRIu64 "\n", s->models[i]->name, CLASSES[c],
           (uint64_t)s->models[i]->responses[c]);
  outf(&o, "# HELP rill_serve_queue_length requests waiting to run\n# TYPE rill_serve_queue_length gauge\n");
  for (int i = 0; i < s->nmodels; i++) outf(&o, "rill_serve_queue_length{model=\"%s\"} %d\n", s->models[i]->name, (int)s->models[i]->queued);
  outf(&o, "# HELP rill_serve_runs_in_flight runs started and not ended\n# TYPE rill_serve_runs_in_flight gauge\n");
  for (int i = 0; i < s->nmodels; i++) outf(&o, "rill_serve_runs_in_flight{model=\"%s\"} %d\n", s->models[i]->name, (int)s->models[i]->inflight);
  static const struct {
    const char *name, *help;
    size_t off;
  } HISTS[] = {
      {"rill_serve_batch_rows", "rows of each run (the batch dimension's size)", offsetof(serve_model_t, batch_rows)},
      {"rill_serve_batch_requests", "requests joined into each run", offsetof(serve_model_t, batch_reqs)},
      {"rill_serve_request_seconds", "from a request's arrival to its answer", offsetof(serve_model_t, latency)},
      {"rill_serve_queue_seconds", "from a request's arrival to the start of its run", offsetof(serve_model_t, queue_wait)},
      {"rill_serve_run_seconds", "from a run's start to its results", offsetof(serve_model_t, run_time)},
  };
  pthread_mutex_lock(&hist_mu);
  for (size_t k = 0; k < sizeof HISTS / sizeof *HISTS; k++) {
    outf(&o, "# HELP %s %s\n# TYPE %s histogram\n", HISTS[k].name, HISTS[k].help, HISTS[k].name);
    for (int i = 0; i < s->nmodels; i++)
      hist_text(&o, HISTS[k].name, s->models[i]->name, (const serve_hist_t *)((const char *)s->models[i] + HISTS[k].off));
  }
  pthread_mutex_unlock(&hist_mu);
  /* Device memory (rill_vm_memory_info): read on the loop thread, which issues every run of these VMs. */
  outf(&o, "# HELP rill_serve_device_memory_bytes device memory a model's VM holds, by kind (peak: the most at once)\n"
           "# TYPE rill_serve_device_memory_bytes gauge\n");
  for (int i = 0; i < s->nmodels; i++) {
    rill_memory_info_t mi;
    if (s->models[i]->llm) serve_llm_memory(s->models[i], &mi);
    else rill_vm_memory_info(s->models[i]->vm, &mi);
    const size_t v[] = {mi.weights, mi.buffers, mi.graphs, mi.workspaces, mi.total, mi.peak};
    static const char *const KIND[] = {"weights", "buffers", "graphs", "workspaces", "total", "peak"};
    for (int k = 0; k < 6; k++) outf(&o, "rill_serve_device_memory_bytes{model=\"%s\",kind=\"%s\"} %zu\n", s->models[i]->name, KIND[k], v[k]);
  }
  outf(&o, "# HELP rill_serve_graph_captures_total graphs a model's function captured (the warm-up's included; a size captured again "
           "after its graphs were dropped counts again)\n# TYPE rill_serve_graph_captures_total counter\n");
  for (int i = 0; i < s->nmodels; i++) {
    rill_graph_info_t gi;
    if (!s->models[i]->llm && rill_vm_graph_info(s->models[i]->vm, s->cfg.function, &gi))
      outf(&o, "rill_serve_graph_captures_total{model=\"%s\"} %" PRIu64 "\n", s->models[i]->name, gi.captures);
  }
  outf(&o, "# HELP rill_serve_http_responses_total HTTP responses by status code\n# TYPE rill_serve_http_responses_total counter\n");
  for (int c = 100; c < 600; c++)
    if (s->http_codes[c]) outf(&o, "rill_serve_http_responses_total{code=\"%d\"} %" PRIu64 "\n", c, (uint64_t)s->http_codes[c]);
  uint64_t per[64];
  int nth = serve_http_thread_requests(per, 64);
  outf(&o, "# HELP rill_serve_http_thread_requests_total HTTP requests each HTTP thread read (--http-threads)\n"
           "# TYPE rill_serve_http_thread_requests_total counter\n");
  for (int i = 0; i < nth; i++) outf(&o, "rill_serve_http_thread_requests_total{thread=\"%d\"} %" PRIu64 "\n", i, per[i]);
  outf(&o, "# HELP rill_serve_connections open HTTP connections\n# TYPE rill_serve_connections gauge\nrill_serve_connections %d\n",
       (int)s->connections);
  *out_len = o.len;
  return o.p;
}
