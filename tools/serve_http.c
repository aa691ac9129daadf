/* serve_http.c: rill serve's HTTP side, h2o (built for libuv) on
 * --http-threads threads, each with its own loop and h2o context; the main
 * loop accepts connections on the one listening socket and hands each to
 * the next thread in turn (its descriptor in a message). The VMs, queues
 * and batches stay on the main loop.
 *
 * Routes (KServe v2): GET /v2/health/live, /v2/health/ready, /v2,
 * /v2/models/NAME[/versions/1], .../ready, POST .../infer; POST
 * /v2/repository/index (Triton's model repository extension); GET /metrics.
 * h2o reads whole requests (bodies up to --max-body-bytes, else 413;
 * connections that send no whole request within --idle-timeout-ms are
 * closed) and calls on_req on the connection's thread, which answers what
 * needs no model state itself and parses an inference there (its inputs
 * decoded into the batch's staging memory where the model has some, else
 * into the request's own: serve_batch.c), then posts it to the main loop.
 *
 * Threads talk through messages: an HTTP thread posts to the main loop's
 * inbox (a mutex-held list and a uv_async), the main loop answers through
 * the connection thread's outbox the same way; only the thread that owns a
 * connection writes to it. A ticket joins the two sides of one request: its
 * HTTP side (the h2o request, valid while the connection is) is the
 * connection thread's, its main side (the generation it feeds) the main
 * loop's; it is reference counted, and `gone` says that the connection
 * went. SIGTERM or SIGINT (on the main loop) closes the listener, answers
 * every request already taken, and then ends the threads and the loop.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <h2o.h>

#include "serve.h"

typedef struct hthread hthread_t;

/* One request's two sides (see the header comment). */
typedef struct ticket {
  atomic_int refs;
  atomic_bool gone;   /* the connection went: nothing more is written */
  struct hthread *th; /* the connection's thread */
  h2o_req_t *req;     /* the thread's: valid while !gone and not finally answered */
  struct glink *gl;   /* the thread's: a generation's stream state, or NULL */
  bool final;         /* the thread's: the last answer was handed to h2o */
  void *greq;         /* the main loop's: the generation (serve_greq_t), or NULL */
} ticket_t;

/* Messages: to the main loop (an inbox) or to an HTTP thread (its outbox). */
enum { TO_MAIN_INFER, TO_MAIN_GENERATE, TO_MAIN_METRICS, TO_MAIN_ABANDON, TO_MAIN_KICK, TO_HTTP_REPLY, TO_HTTP_STREAM_BEGIN, TO_HTTP_STREAM_WRITE,
       TO_HTTP_CONN, TO_HTTP_STOP, TO_HTTP_QUIT };
typedef struct msg {
  struct msg *next;
  int kind;
  ticket_t *t;            /* holds a reference (none for STOP and QUIT) */
  serve_req_t *r;         /* INFER */
  serve_model_t *m;       /* GENERATE */
  bool stream, final;     /* GENERATE; STREAM_WRITE */
  int status, retry_after;
  const char *ctype;      /* REPLY: a static string */
  char *body;             /* malloc'd, taken: GENERATE's request, REPLY's answer, STREAM_WRITE's events */
  size_t len, json_len;
  uv_os_sock_t fd;        /* CONN: an accepted connection's, taken */
} msg_t;

typedef struct box {
  pthread_mutex_t mu;
  msg_t *head, *tail;
  bool closed;            /* its loop has ended: what is posted now is dropped */
  uv_async_t async;
} box_t;

struct hthread {
  int index;
  serve_t *s;
  pthread_t th;
  bool inited, started;   /* its loop made; its thread running */
  uv_loop_t loop;
  h2o_context_t ctx;
  h2o_accept_ctx_t accept;
  box_t out;
  int connections;        /* this thread's (its loop closes only when none is left) */
  serve_lane_t lane;      /* requests alone that run here */
  uv_timer_t sweep;       /* the lane's deadlines */
  h2o_buffer_prototype_t inbuf; /* its connections' input buffers (request_room) */
  _Atomic uint64_t requests; /* requests it read (/metrics) */
};


typedef struct conn {
  uv_tcp_t tcp; /* first: h2o's close callback frees the conn */
  hthread_t *th;
} conn_t;

/* The HTTP thread this is (NULL on the main loop): an answer to one of its
 * own connections is written at once. */
static __thread hthread_t *current;

static struct {
  h2o_globalconf_t config;
  hthread_t *threads;
  int nthreads;
  box_t in;               /* the main loop's inbox */
  uv_tcp_t listener;      /* the main loop's */
  bool listening;
  size_t inbuf_room;      /* a connection's first input buffer (request_room) */
  int next;               /* the thread the next connection goes to */
  uv_signal_t sigterm, sigint;
  uv_timer_t finish;
  double finish_by;
  serve_t *s;
} H;

/* ---- messages ---- */
static void ticket_release(ticket_t *t);

static void post(box_t *b, msg_t *m) {
  m->next = NULL;
  pthread_mutex_lock(&b->mu);
  bool closed = b->closed;
  if (!closed) {
    if (b->tail) b->tail->next = m;
    else b->head = m;
    b->tail = m;
    uv_async_send(&b->async); /* under the lock: the handle is closed only after `closed` is set */
  }
  pthread_mutex_unlock(&b->mu);
  if (closed) { /* an answer to a thread that has ended: its connections are gone */
    if (m->kind == TO_HTTP_CONN) {
      close(m->fd);
      atomic_fetch_sub(&H.s->connections, 1);
    }
    free(m->body);
    ticket_release(m->t);
    free(m);
  }
}

/* Everything posted so far; with `close`, nothing is taken after. */
static msg_t *take_all(box_t *b, bool close) {
  pthread_mutex_lock(&b->mu);
  msg_t *m = b->head;
  b->head = b->tail = NULL;
  if (close) b->closed = true;
  pthread_mutex_unlock(&b->mu);
  return m;
}

static msg_t *msg_new(int kind, ticket_t *t) {
  msg_t *m = calloc(1, sizeof *m);
  if (m) {
    m->kind = kind;
    m->t = t;
  }
  return m;
}

static void ticket_release(ticket_t *t) {
  if (t && atomic_fetch_sub(&t->refs, 1) == 1) free(t);
}

static ticket_t *ticket_new(hthread_t *th, h2o_req_t *req) {
  ticket_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  atomic_init(&t->refs, 1);
  atomic_init(&t->gone, false);
  t->th = th;
  t->req = req;
  return t;
}

static hthread_t *thread_of(h2o_req_t *req) {
  for (int i = 0; i < H.nthreads; i++)
    if (req->conn->ctx == &H.threads[i].ctx) return &H.threads[i];
  return NULL;
}

static const char *reason(int status) {
  switch (status) {
  case 200: return "OK";
  case 400: return "Bad Request";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 500: return "Internal Server Error";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  default: return "Error";
  }
}

static void free_body(void *p) { free(*(char **)p); }

/* Sends a response on the connection's thread; body is malloc'd (or NULL)
 * and taken: h2o writes it from where it is and it is freed with the
 * request's pool. */
static void respond(serve_t *s, h2o_req_t *req, int status, const char *ctype, char *body, size_t len, size_t json_len, int retry_after) {
  if (!body) {
    status = 500;
    body = strdup("{\"error\": \"out of memory\"}");
    len = json_len = body ? strlen(body) : 0;
    ctype = "application/json";
  }
  if (status >= 100 && status < 600) atomic_fetch_add_explicit(&s->http_codes[status], 1, memory_order_relaxed);
  req->res.status = status;
  req->res.reason = reason(status);
  if (json_len < len) {
    char *v = h2o_mem_alloc_pool(&req->pool, 24);
    int n = snprintf(v, 24, "%zu", json_len);
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("inference-header-content-length"), 0, NULL, v, (size_t)n);
    ctype = "application/octet-stream";
  }
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, ctype, strlen(ctype));
  if (retry_after > 0) {
    char *v = h2o_mem_alloc_pool(&req->pool, 16);
    int n = snprintf(v, 16, "%d", retry_after);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, v, (size_t)n);
  }
  if (atomic_load(&s->draining)) req->http1_is_persistent = 0;
  req->res.content_length = len;
  static h2o_generator_t generator = {NULL, NULL}; /* the whole body at once: never asked for more */
  char **owner = h2o_mem_alloc_shared(&req->pool, sizeof *owner, free_body);
  *owner = body;
  h2o_iovec_t v = h2o_iovec_init(body ? body : "", len);
  bool head = h2o_memis(req->input.method.base, req->input.method.len, H2O_STRLIT("HEAD"));
  h2o_start_response(req, &generator);
  h2o_send(req, &v, head ? 0 : 1, H2O_SEND_STATE_FINAL);
}

static void send_json(serve_t *s, h2o_req_t *req, int status, char *json) {
  size_t n = json ? strlen(json) : 0;
  respond(s, req, status, "application/json", json, n, n, 0);
}

static int send_error(serve_t *s, h2o_req_t *req, int status, const char *msg) {
  send_json(s, req, status, serve_error_json("%s", msg));
  return 0;
}

/* 503 with Retry-After: 1 */
static int send_busy(serve_t *s, h2o_req_t *req, const char *msg) {
  char *body = serve_error_json("%s", msg);
  size_t n = body ? strlen(body) : 0;
  respond(s, req, 503, "application/json", body, n, n, 1);
  return 0;
}

/* ---- the main loop's side: answers go to the connection's thread ---- */
static void reply_msg(ticket_t *t, int status, const char *ctype, char *body, size_t len, size_t json_len, int retry_after) {
  if (current && current == t->th) { /* a lane's run, on the connection's own thread */
    if (!atomic_load(&t->gone) && !t->final) {
      t->final = true;
      respond(current->s, t->req, status, ctype, body, len, json_len, retry_after);
    } else {
      free(body);
    }
    ticket_release(t);
    return;
  }
  msg_t *m = msg_new(TO_HTTP_REPLY, t);
  if (!m) { /* out of memory: unanswered (the client's own timeout ends it) */
    free(body);
    ticket_release(t);
    return;
  }
  m->status = status;
  m->ctype = ctype;
  m->body = body;
  m->len = len;
  m->json_len = json_len;
  m->retry_after = retry_after;
  post(&t->th->out, m);
}

void serve_http_reply(serve_req_t *r, int status, char *body, size_t len, size_t json_len, int retry_after) {
  ticket_t *t = r->http;
  r->http = NULL;
  reply_msg(t, status, "application/json", body, len, json_len, retry_after);
}

bool serve_http_gone(const void *http) { return atomic_load(&((const ticket_t *)http)->gone); }

void serve_http_drop(void *http) { ticket_release(http); }

void serve_http_reply_to(void *http, int status, char *body, size_t len, int retry_after) {
  ticket_t *t = http;
  t->greq = NULL;
  reply_msg(t, status, "application/json", body, len, len, retry_after);
}

void serve_http_stream_begin(void *http) {
  ticket_t *t = http;
  atomic_fetch_add(&t->refs, 1); /* the message's */
  msg_t *m = msg_new(TO_HTTP_STREAM_BEGIN, t);
  if (m) post(&t->th->out, m);
  else ticket_release(t);
}

void serve_http_stream_write(void *http, char *data, size_t len, bool final) {
  ticket_t *t = http;
  if (final) t->greq = NULL;
  else atomic_fetch_add(&t->refs, 1); /* the final message takes the main side's own */
  msg_t *m = msg_new(TO_HTTP_STREAM_WRITE, t);
  if (!m) {
    free(data);
    if (!final) ticket_release(t);
    return;
  }
  m->body = data;
  m->len = len;
  m->final = final;
  post(&t->th->out, m);
}

/* ---- generations' streams (serve_llm.c), on the connection's thread ---- */
typedef struct glink {
  h2o_generator_t gen;  /* first: h2o hands it back to proceed and stop */
  ticket_t *t;          /* NULL once the pool goes */
  h2o_req_t *req;
  serve_t *s;
  bool streaming, sending, final_queued, closed, abandoned;
  char *pending;        /* events not yet handed to h2o */
  size_t len, cap;
} glink_t;

/* The generation's client went: the main loop stops it (once). */
static void glink_abandon(glink_t *l) {
  if (l->abandoned || !l->t) return;
  l->abandoned = true;
  atomic_fetch_add(&l->t->refs, 1);
  msg_t *m = msg_new(TO_MAIN_ABANDON, l->t);
  if (m) post(&H.in, m);
  else ticket_release(l->t);
}

/* Hands what is pending to h2o, one send at a time (the next after proceed). */
static void stream_flush(glink_t *l) {
  if (l->sending || l->closed || (!l->len && !l->final_queued)) return;
  h2o_iovec_t v = {NULL, 0};
  if (l->len) { /* copied into the request's pool: h2o may write it after this returns */
    v.base = h2o_mem_alloc_pool(&l->req->pool, l->len);
    memcpy(v.base, l->pending, l->len);
    v.len = l->len;
    l->len = 0;
  }
  bool final = l->final_queued;
  l->sending = true;
  if (final) {
    l->closed = true;
    free(l->pending);
    l->pending = NULL;
    l->cap = 0;
  }
  h2o_send(l->req, &v, v.len ? 1 : 0, final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void on_proceed(h2o_generator_t *g, h2o_req_t *req) {
  (void)req;
  glink_t *l = (glink_t *)g;
  l->sending = false;
  stream_flush(l);
}

static void on_stop(h2o_generator_t *g, h2o_req_t *req) {
  (void)req;
  glink_t *l = (glink_t *)g;
  l->closed = true;
  if (!l->final_queued) glink_abandon(l);
}

static void stream_begin(glink_t *l) {
  h2o_req_t *req = l->req;
  l->streaming = true;
  atomic_fetch_add_explicit(&l->s->http_codes[200], 1, memory_order_relaxed);
  req->res.status = 200;
  req->res.reason = "OK";
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/event-stream"));
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
  if (atomic_load(&l->s->draining)) req->http1_is_persistent = 0;
  l->gen.proceed = on_proceed;
  l->gen.stop = on_stop;
  h2o_start_response(req, &l->gen);
}

static void stream_write(glink_t *l, char *data, size_t len, bool final) {
  if (!l->closed && data && len) {
    if (l->len + len > l->cap) {
      size_t cap = l->cap ? l->cap * 2 : 1024;
      while (cap < l->len + len) cap *= 2;
      char *p = realloc(l->pending, cap);
      if (p) l->pending = p, l->cap = cap;
    }
    if (l->len + len <= l->cap) {
      memcpy(l->pending + l->len, data, len);
      l->len += len;
    }
  }
  free(data);
  if (final) l->final_queued = true;
  stream_flush(l);
}

static void on_glink_dispose(void *p) {
  glink_t *l = p;
  free(l->pending);
  l->pending = NULL;
  if (!l->t) return;
  ticket_t *t = l->t;
  atomic_store(&t->gone, true);
  if (!t->final) glink_abandon(l);
  t->gl = NULL;
  l->t = NULL;
  ticket_release(t); /* the connection's */
}

static int generate(hthread_t *th, h2o_req_t *req, serve_model_t *m, bool stream) {
  serve_t *s = th->s;
  char err[1024];
  if (!m->llm) {
    snprintf(err, sizeof err, "model '%s' does not generate (a Hugging Face folder does): POST /v2/models/%s/infer", m->name, m->name);
    return send_error(s, req, 400, err);
  }
  if (atomic_load(&s->draining)) return send_busy(s, req, "the server is shutting down");
  size_t len = req->entity.base ? req->entity.len : 0;
  glink_t *l = h2o_mem_alloc_shared(&req->pool, sizeof *l, on_glink_dispose);
  memset(l, 0, sizeof *l);
  l->req = req;
  l->s = s;
  ticket_t *t = ticket_new(th, req);
  msg_t *msg = t ? msg_new(TO_MAIN_GENERATE, t) : NULL;
  char *body = msg ? malloc(len + 1) : NULL; /* the main loop parses it: the body is the connection's */
  if (!body) {
    free(msg);
    free(t);
    return send_error(s, req, 500, "out of memory");
  }
  memcpy(body, req->entity.base ? req->entity.base : "", len);
  body[len] = 0;
  t->gl = l;
  l->t = t;
  atomic_fetch_add(&t->refs, 1); /* the main loop's */
  msg->m = m;
  msg->stream = stream;
  msg->body = body;
  msg->len = len;
  post(&H.in, msg);
  return 0;
}

/* ---- inference ---- */
typedef struct link {
  ticket_t *t;
} link_t;

/* The request's pool is going: its connection closed (or it was answered). */
static void on_link_dispose(void *p) {
  link_t *l = p;
  atomic_store(&l->t->gone, true);
  ticket_release(l->t);
}

static bool is(h2o_iovec_t v, const char *s) { return v.len == strlen(s) && memcmp(v.base, s, v.len) == 0; }

static serve_model_t *find_model(serve_t *s, const char *name, size_t len) {
  for (int i = 0; i < s->nmodels; i++)
    if (strlen(s->models[i]->name) == len && !memcmp(s->models[i]->name, name, len)) return s->models[i];
  return NULL;
}

static int wrong_method(serve_t *s, h2o_req_t *req, const char *allow) {
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, allow, strlen(allow));
  char msg[96];
  snprintf(msg, sizeof msg, "this path takes %s", allow);
  return send_error(s, req, 405, msg);
}

static int infer(hthread_t *th, h2o_req_t *req, serve_model_t *m) {
  serve_t *s = th->s;
  char err[1024];
  if (atomic_load(&s->draining)) return send_busy(s, req, "the server is shutting down");
  size_t len = req->entity.base ? req->entity.len : 0, json_len = len;
  ssize_t h = h2o_find_header_by_str(&req->headers, H2O_STRLIT("inference-header-content-length"), -1);
  if (h >= 0) {
    h2o_iovec_t v = req->headers.entries[h].value;
    char num[32];
    char *end;
    snprintf(num, sizeof num, "%.*s", (int)(v.len < 31 ? v.len : 31), v.base);
    unsigned long long n = strtoull(num, &end, 10);
    if (!v.len || v.len > 20 || *end || num[0] == '-' || n > len) {
      snprintf(err, sizeof err, "Inference-Header-Content-Length '%.40s' is not a length within the body's %zu bytes", num, len);
      m->requests++;
      m->failures++;
      m->responses[1]++;
      return send_error(s, req, 400, err);
    }
    json_len = (size_t)n;
  }
  ticket_t *t = ticket_new(th, req);
  link_t *l = t ? h2o_mem_alloc_shared(&req->pool, sizeof *l, on_link_dispose) : NULL;
  msg_t *msg = t ? msg_new(TO_MAIN_INFER, t) : NULL;
  if (!t || !msg) {
    free(msg);
    if (l) l->t = t; /* released when the pool goes */
    else free(t);
    return send_error(s, req, 500, "out of memory");
  }
  l->t = t;
  serve_req_t *r;
  double t0 = serve_now(s);
  int rc = serve_parse_infer(m, req->entity.base ? req->entity.base : "", len, json_len, &r, err, sizeof err, &th->lane);
  if (rc) {
    free(msg);
    m->requests++;
    m->failures++;
    m->responses[1]++;
    return send_error(s, req, rc, err);
  }
  r->t0 = t0;
  r->http = t;
  atomic_fetch_add(&t->refs, 1); /* the request's (the main loop's, or the lane's) */
  if (r->lane) { /* alone: runs here */
    free(msg);
    serve_lane_run(r);
    return 0;
  }
  msg->r = r;
  post(&H.in, msg);
  return 0;
}

static char *server_metadata(void) {
  char *s = malloc(256);
  if (s)
    snprintf(s, 256, "{\"name\":\"rill\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\",\"model_repository\",\"generate\"]}",
             rill_version_string());
  return s;
}

/* /metrics reads the main loop's state: built there. */
static int metrics(hthread_t *th, h2o_req_t *req) {
  ticket_t *t = ticket_new(th, req);
  link_t *l = t ? h2o_mem_alloc_shared(&req->pool, sizeof *l, on_link_dispose) : NULL;
  msg_t *msg = l ? msg_new(TO_MAIN_METRICS, t) : NULL;
  if (!msg) {
    if (l) l->t = t;
    else free(t);
    return send_error(th->s, req, 500, "out of memory");
  }
  l->t = t;
  atomic_fetch_add(&t->refs, 1);
  post(&H.in, msg);
  return 0;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req) {
  (void)self;
  hthread_t *th = thread_of(req);
  serve_t *s = th->s;
  atomic_fetch_add_explicit(&th->requests, 1, memory_order_relaxed);
  h2o_iovec_t path = req->path_normalized;
  bool get = is(req->method, "GET") || is(req->method, "HEAD"), post_ = is(req->method, "POST");
  bool draining = atomic_load(&s->draining);
  if (is(path, "/v2/health/live")) {
    if (!get) return wrong_method(s, req, "GET");
    send_json(s, req, 200, strdup("{\"live\":true}"));
    return 0;
  }
  if (is(path, "/v2/health/ready")) {
    if (!get) return wrong_method(s, req, "GET");
    send_json(s, req, draining ? 503 : 200, strdup(draining ? "{\"ready\":false}" : "{\"ready\":true}"));
    return 0;
  }
  if (is(path, "/v2") || is(path, "/v2/")) {
    if (!get) return wrong_method(s, req, "GET");
    send_json(s, req, 200, server_metadata());
    return 0;
  }
  if (is(path, "/v2/repository/index")) {
    if (!get && !post_) return wrong_method(s, req, "POST");
    send_json(s, req, 200, serve_repository_index(s));
    return 0;
  }
  if (is(path, "/metrics")) {
    if (!get) return wrong_method(s, req, "GET");
    return metrics(th, req);
  }
  static const char prefix[] = "/v2/models/";
  if (path.len > sizeof prefix - 1 && !memcmp(path.base, prefix, sizeof prefix - 1)) {
    /* NAME[/versions/V][/ready|/infer] */
    const char *seg[5];
    size_t segl[5];
    int nseg = 0;
    const char *p = path.base + sizeof prefix - 1, *end = path.base + path.len;
    while (p < end && nseg < 5) {
      const char *q = memchr(p, '/', (size_t)(end - p));
      if (!q) q = end;
      seg[nseg] = p;
      segl[nseg++] = (size_t)(q - p);
      p = q + 1;
    }
    serve_model_t *m = nseg ? find_model(s, seg[0], segl[0]) : NULL;
    char msg[512];
    if (!m) {
      snprintf(msg, sizeof msg, "no model '%.*s' here", (int)(nseg && segl[0] < 100 ? segl[0] : 100), nseg ? seg[0] : "");
      return send_error(s, req, 404, msg);
    }
    int at = 1;
    if (nseg >= 3 && segl[1] == 8 && !memcmp(seg[1], "versions", 8)) {
      if (segl[2] != 1 || seg[2][0] != '1') {
        snprintf(msg, sizeof msg, "model '%s' has version 1 only", m->name);
        return send_error(s, req, 404, msg);
      }
      at = 3;
    }
    if (p < end || nseg > at + 1) return send_error(s, req, 404, "no such path");
    if (nseg == at) {
      if (!get) return wrong_method(s, req, "GET");
      send_json(s, req, 200, m->llm ? serve_llm_metadata(m) : serve_model_metadata(m));
      return 0;
    }
    if (segl[at] == 5 && !memcmp(seg[at], "ready", 5)) {
      if (!get) return wrong_method(s, req, "GET");
      char *b = malloc(256);
      if (b) snprintf(b, 256, "{\"name\":\"%s\",\"ready\":%s}", m->name, draining ? "false" : "true");
      send_json(s, req, draining ? 503 : 200, b);
      return 0;
    }
    if (segl[at] == 5 && !memcmp(seg[at], "infer", 5)) {
      if (!post_) return wrong_method(s, req, "POST");
      if (m->llm) {
        snprintf(msg, sizeof msg, "model '%s' generates: POST /v2/models/%s/generate or generate_stream", m->name, m->name);
        return send_error(s, req, 400, msg);
      }
      return infer(th, req, m);
    }
    if ((segl[at] == 8 && !memcmp(seg[at], "generate", 8)) || (segl[at] == 15 && !memcmp(seg[at], "generate_stream", 15))) {
      if (!post_) return wrong_method(s, req, "POST");
      return generate(th, req, m, segl[at] == 15);
    }
    return send_error(s, req, 404, "no such path");
  }
  return send_error(s, req, 404, "no such path");
}

/* ---- an HTTP thread: its outbox ---- */
static void conn_start(hthread_t *th, uv_os_sock_t fd);

static void outbox_run(hthread_t *th, bool close) {
  serve_t *s = th->s;
  for (msg_t *m = take_all(&th->out, close), *next; m; m = next) {
    next = m->next;
    ticket_t *t = m->t;
    bool live = t && !atomic_load(&t->gone) && !t->final;
    switch (m->kind) {
    case TO_HTTP_REPLY:
      if (live) {
        t->final = true;
        respond(s, t->req, m->status, m->ctype, m->body, m->len, m->json_len, m->retry_after);
      } else {
        free(m->body);
      }
      break;
    case TO_HTTP_STREAM_BEGIN:
      if (live && t->gl) stream_begin(t->gl);
      break;
    case TO_HTTP_STREAM_WRITE:
      if (live && t->gl) {
        if (m->final) t->final = true;
        stream_write(t->gl, m->body, m->len, m->final);
      } else {
        free(m->body);
      }
      break;
    case TO_HTTP_CONN: conn_start(th, m->fd); break;
    case TO_HTTP_STOP: h2o_context_request_shutdown(&th->ctx); break;
    case TO_HTTP_QUIT: uv_stop(&th->loop); break;
    }
    ticket_release(t);
    free(m);
  }
}

static void on_outbox(uv_async_t *a) { outbox_run(a->data, false); }

/* ---- the main loop's inbox ---- */
static void on_inbox(uv_async_t *a) {
  serve_t *s = a->data;
  for (msg_t *m = take_all(&H.in, false), *next; m; m = next) {
    next = m->next;
    ticket_t *t = m->t;
    char err[1024];
    switch (m->kind) {
    case TO_MAIN_INFER: {
      serve_req_t *r = m->r;
      int rc = serve_submit(s, r, err, sizeof err);
      if (rc) {
        char *body = serve_error_json("%s", err);
        size_t n = body ? strlen(body) : 0;
        serve_http_reply(r, rc, body, n, n, 1);
        serve_req_free(r);
      }
      t = NULL; /* the request holds the reference */
      break;
    }
    case TO_MAIN_METRICS: {
      size_t n = 0;
      char *text = serve_metrics_text(s, &n);
      reply_msg(t, 200, "text/plain; version=0.0.4", text, n, n, 0);
      t = NULL;
      break;
    }
    case TO_MAIN_GENERATE: {
      serve_greq_t *g = NULL;
      int rc = serve_llm_request(m->m, t, m->stream, m->body, m->len, &g, err, sizeof err);
      if (rc) {
        char *body = serve_error_json("%s", err);
        serve_http_reply_to(t, rc, body, body ? strlen(body) : 0, rc == 503 ? 1 : 0);
      } else {
        t->greq = g; /* answered later (serve_http_reply_to or the final stream write clear it) */
        if (m->stream) serve_http_stream_begin(t);
        serve_llm_kick(m->m);
      }
      free(m->body);
      t = NULL;
      break;
    }
    case TO_MAIN_KICK: serve_kick(s); break;
    case TO_MAIN_ABANDON:
      if (t->greq) {
        serve_greq_t *g = t->greq;
        t->greq = NULL;
        serve_llm_abandon(g);
        ticket_release(t); /* the main side's: nothing more is sent */
      }
      break;
    }
    ticket_release(t);
    free(m);
  }
  if (atomic_load(&s->draining) && serve_idle(s)) serve_drained(s);
}

/* ---- connections ---- */
static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = (conn_t *)h;
  atomic_fetch_sub(&c->th->s->connections, 1);
  c->th->connections--;
  free(c);
}

static void free_handle(uv_handle_t *h) { free(h); }

/* On the connection's thread: h2o takes it over. */
static void conn_start(hthread_t *th, uv_os_sock_t fd) {
  conn_t *c = calloc(1, sizeof *c);
  if (!c || uv_tcp_init(&th->loop, &c->tcp) != 0) {
    free(c);
    close(fd);
    atomic_fetch_sub(&th->s->connections, 1);
    return;
  }
  c->th = th;
  if (uv_tcp_open(&c->tcp, fd) != 0) {
    close(fd);
    atomic_fetch_sub(&th->s->connections, 1);
    uv_close((uv_handle_t *)&c->tcp, free_handle);
    return;
  }
  th->connections++;
  uv_tcp_nodelay(&c->tcp, 1);
  h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, on_conn_closed);
  h2o_buffer_set_prototype(&sock->input, &th->inbuf);
  h2o_accept(&th->accept, sock);
}

/* On the main loop: a connection goes to the next HTTP thread (its
 * descriptor duplicated; the main loop's handle closes). */
static void on_accept(uv_stream_t *listener, int status) {
  serve_t *s = listener->data;
  if (status != 0) return;
  uv_tcp_t *c = malloc(sizeof *c);
  if (!c) return;
  uv_tcp_init(listener->loop, c);
  uv_os_fd_t fd = -1;
  bool take = uv_accept(listener, (uv_stream_t *)c) == 0 && !atomic_load(&s->draining) && atomic_load(&s->connections) < s->cfg.max_connections;
  uv_os_sock_t dup_fd = take && !uv_fileno((uv_handle_t *)c, &fd) ? dup(fd) : -1;
  uv_close((uv_handle_t *)c, free_handle);
  if (dup_fd < 0) return;
  msg_t *m = msg_new(TO_HTTP_CONN, NULL);
  if (!m) {
    close(dup_fd);
    return;
  }
  atomic_fetch_add(&s->connections, 1);
  m->fd = dup_fd;
  hthread_t *th = &H.threads[H.next];
  H.next = (H.next + 1) % H.nthreads;
  post(&th->out, m);
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void on_lane_sweep(uv_timer_t *t) { serve_lane_sweep(t->data); }

/* A connection's input buffer starts with room for a whole request of one
 * row of the largest model's inputs (h2o's own starts at 8 KiB and doubles,
 * copying what it holds, as a body of hundreds of kilobytes arrives), and
 * goes back to its thread's free list between requests. */
static size_t request_room(const serve_t *s) {
  size_t most = 0;
  for (int i = 0; i < s->nmodels; i++) {
    size_t n = s->models[i]->llm ? 0 : serve_request_bytes(s->models[i]);
    if (n > most) most = n;
  }
  size_t room = most + ((size_t)16 << 10); /* the request line, headers and JSON */
  size_t cap = s->cfg.max_body < ((size_t)16 << 20) ? s->cfg.max_body + ((size_t)16 << 10) : (size_t)16 << 20;
  if (room > cap) room = cap;
  if (room < H2O_SOCKET_INITIAL_INPUT_BUFFER_SIZE * 2) room = H2O_SOCKET_INITIAL_INPUT_BUFFER_SIZE * 2;
  return (room + 4095) & ~(size_t)4095;
}

/* The buffers the thread's free list still holds. */
static void inbuf_free(h2o_buffer_prototype_t *p) {
  size_t sz = offsetof(h2o_buffer_t, _buf) + p->_initial_buf.capacity;
  while (p->allocator.cnt) free(h2o_mem_alloc_recycle(&p->allocator, sz));
}

static void *thread_main(void *arg) {
  hthread_t *th = arg;
  current = th;
  uv_run(&th->loop, UV_RUN_DEFAULT);
  /* (runs of its lane have ended: the main loop waited for every run) */
  outbox_run(th, true); /* what came with the last wake-up; later answers are dropped */
  /* h2o's context is not disposed (its timeouts may still hold entries of
   * the shutdown); its handles close with the loop's others. */
  for (int i = 0; i < 8 && uv_run(&th->loop, UV_RUN_NOWAIT); i++) {
  }
  if (th->connections == 0) {
    uv_walk(&th->loop, close_walk, NULL);
    uv_run(&th->loop, UV_RUN_NOWAIT);
    uv_loop_close(&th->loop);
    inbuf_free(&th->inbuf); /* (with a connection left, its buffer may still come back to the list) */
  }
  return NULL;
}

/* Thread i's loop and h2o context; 0, or an exit code with the reason printed. */
static int thread_init(serve_t *s, hthread_t *th) {
  th->s = s;
  int e = uv_loop_init(&th->loop);
  if (e) {
    fprintf(stderr, "rill: serve: cannot make an event loop: %s\n", uv_strerror(e));
    return 1;
  }
  th->inited = true;
  pthread_mutex_init(&th->out.mu, NULL);
  uv_async_init(&th->loop, &th->out.async, on_outbox);
  th->out.async.data = th;
  h2o_context_init(&th->ctx, &th->loop, &H.config);
  th->lane.loop = &th->loop;
  uv_idle_init(&th->loop, &th->lane.spin);
  th->lane.poll = strncmp(s->cfg.device, "cpu", 3) != 0;
  uv_timer_init(&th->loop, &th->sweep);
  th->sweep.data = &th->lane;
  uint64_t tick = s->cfg.timeout_ms < 100 ? (uint64_t)(s->cfg.timeout_ms / 4 + 1) : 20;
  uv_timer_start(&th->sweep, on_lane_sweep, tick, tick);
  size_t keep = ((size_t)64 << 20) / H.inbuf_room; /* at most 64 MiB of free buffers */
  th->inbuf = (h2o_buffer_prototype_t){.allocator = {.max = keep < 1 ? 1 : keep > 16 ? 16 : keep}, ._initial_buf = {.capacity = H.inbuf_room}};
  th->accept.ctx = &th->ctx;
  th->accept.hosts = H.config.hosts;
  return 0;
}

static int listen_on(serve_t *s) {
  struct sockaddr_storage addr;
  int e = strchr(s->cfg.host, ':') ? uv_ip6_addr(s->cfg.host, s->cfg.port, (struct sockaddr_in6 *)&addr)
                                   : uv_ip4_addr(s->cfg.host, s->cfg.port, (struct sockaddr_in *)&addr);
  if (e) {
    fprintf(stderr, "rill: serve: --host '%s' is not an IPv4 or IPv6 address\n", s->cfg.host);
    return 2;
  }
  for (int i = 0; i < H.nthreads; i++) {
    int rc = thread_init(s, &H.threads[i]);
    if (rc) return rc;
  }
  uv_tcp_init(s->loop, &H.listener);
  H.listener.data = s;
  H.listening = true;
  if ((e = uv_tcp_bind(&H.listener, (struct sockaddr *)&addr, 0)) || (e = uv_listen((uv_stream_t *)&H.listener, 511, on_accept))) {
    fprintf(stderr, "rill: serve: cannot listen on %s port %d: %s\n", s->cfg.host, s->cfg.port, uv_strerror(e));
    return 2;
  }
  struct sockaddr_storage got;
  int glen = sizeof got;
  char name[64] = "?";
  int port = s->cfg.port;
  if (!uv_tcp_getsockname(&H.listener, (struct sockaddr *)&got, &glen)) {
    if (got.ss_family == AF_INET6) {
      uv_ip6_name((struct sockaddr_in6 *)&got, name, sizeof name);
      port = ntohs(((struct sockaddr_in6 *)&got)->sin6_port);
    } else {
      uv_ip4_name((struct sockaddr_in *)&got, name, sizeof name);
      port = ntohs(((struct sockaddr_in *)&got)->sin_port);
    }
  }
  printf("rill serve: listening on %s%s%s:%d (", strchr(name, ':') ? "[" : "", name, strchr(name, ':') ? "]" : "", port);
  for (int i = 0; i < s->nmodels; i++) printf("%s%s", i ? ", " : "", s->models[i]->name);
  printf(")\n");
  fflush(stdout);
  return 0;
}

void serve_http_kick(void) {
  msg_t *m = msg_new(TO_MAIN_KICK, NULL);
  if (m) post(&H.in, m);
}

int serve_http_thread_requests(uint64_t *counts, int max) {
  for (int i = 0; i < H.nthreads && i < max; i++) counts[i] = atomic_load_explicit(&H.threads[i].requests, memory_order_relaxed);
  return H.nthreads < max ? H.nthreads : max;
}

/* ---- signals, drain ---- */
/* After the last answer: until the connections have closed (their answers
 * written) or a grace period has passed. */
static void on_finish(uv_timer_t *t) {
  serve_t *s = t->data;
  if (atomic_load(&s->connections) == 0 || serve_now(s) > H.finish_by) uv_stop(s->loop);
}

void serve_drained(serve_t *s) {
  if (uv_is_active((uv_handle_t *)&H.finish)) return;
  H.finish_by = serve_now(s) + 2.0;
  uv_timer_start(&H.finish, on_finish, 0, 10);
}

static void to_threads(int kind) {
  for (int i = 0; i < H.nthreads; i++) {
    if (!H.threads[i].started) continue;
    msg_t *m = msg_new(kind, NULL);
    if (m) post(&H.threads[i].out, m);
  }
}

static void on_signal(uv_signal_t *sig, int signum) {
  serve_t *s = sig->data;
  if (atomic_load(&s->draining)) {
    fprintf(stderr, "rill: serve: second signal: stopping without waiting\n");
    uv_stop(s->loop);
    return;
  }
  fprintf(stderr, "rill: serve: %s: answering the requests taken, then stopping\n", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  atomic_store(&s->draining, true);
  if (H.listening) {
    uv_close((uv_handle_t *)&H.listener, NULL);
    H.listening = false;
  }
  to_threads(TO_HTTP_STOP);
  if (serve_idle(s)) serve_drained(s);
}

int serve_http_run(serve_t *s) {
  signal(SIGPIPE, SIG_IGN);
  s->loop = uv_default_loop();
  H.s = s;
  h2o_config_init(&H.config);
  H.config.server_name = h2o_iovec_init(H2O_STRLIT("rill"));
  H.config.max_request_entity_size = s->cfg.max_body;
  H.config.http1.req_timeout = (uint64_t)s->cfg.idle_timeout_ms;
  h2o_hostconf_t *host = h2o_config_register_host(&H.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
  h2o_handler_t *handler = h2o_create_handler(path, sizeof *handler);
  handler->on_req = on_req;
  H.nthreads = s->cfg.http_threads;
  if (!(H.threads = calloc((size_t)H.nthreads, sizeof *H.threads))) {
    fprintf(stderr, "rill: serve: out of memory\n");
    return 1;
  }
  for (int i = 0; i < H.nthreads; i++) H.threads[i].index = i;
  H.inbuf_room = request_room(s);
  pthread_mutex_init(&H.in.mu, NULL);
  uv_async_init(s->loop, &H.in.async, on_inbox);
  H.in.async.data = s;
  int rc = serve_start(s) ? 1 : 0;
  uv_timer_init(s->loop, &H.finish);
  H.finish.data = s;
  uv_signal_init(s->loop, &H.sigterm);
  uv_signal_init(s->loop, &H.sigint);
  H.sigterm.data = H.sigint.data = s;
  uv_signal_start(&H.sigterm, on_signal, SIGTERM);
  uv_signal_start(&H.sigint, on_signal, SIGINT);
  if (!rc) rc = listen_on(s);
  for (int i = 0; !rc && i < H.nthreads; i++) {
    if (pthread_create(&H.threads[i].th, NULL, thread_main, &H.threads[i]) != 0) {
      fprintf(stderr, "rill: serve: cannot start HTTP thread %d\n", i + 1);
      rc = 1;
      break;
    }
    H.threads[i].started = true;
  }
  if (!rc) uv_run(s->loop, UV_RUN_DEFAULT);
  /* Runs still in flight (a second signal, or a failed start) end before the VMs go. */
  while (!serve_idle(s) && uv_run(s->loop, UV_RUN_ONCE)) {
  }
  to_threads(TO_HTTP_QUIT);
  for (int i = 0; i < H.nthreads; i++) {
    hthread_t *th = &H.threads[i];
    if (th->started) {
      pthread_join(th->th, NULL);
    } else if (th->inited) { /* the start failed after its loop was made: it ends here, never run */
      take_all(&th->out, true);
      uv_walk(&th->loop, close_walk, NULL);
      uv_run(&th->loop, UV_RUN_NOWAIT);
      uv_loop_close(&th->loop);
    }
  }
  on_inbox(&H.in.async); /* what the threads posted last: answered (their connections gone) or dropped */
  if (H.listening) uv_close((uv_handle_t *)&H.listener, NULL);
  H.listening = false;
  serve_stop(s);
  uv_close((uv_handle_t *)&H.in.async, NULL);
  uv_close((uv_handle_t *)&H.finish, NULL);
  uv_close((uv_handle_t *)&H.sigterm, NULL);
  uv_close((uv_handle_t *)&H.sigint, NULL);
  for (int i = 0; i < 8 && uv_run(s->loop, UV_RUN_NOWAIT); i++) {
  }
  uv_walk(s->loop, close_walk, NULL);
  uv_run(s->loop, UV_RUN_NOWAIT);
  uv_loop_close(s->loop);
  return rc;
}
