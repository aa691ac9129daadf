/* serve_http.c: rill serve's HTTP side, h2o (built for libuv) on the loop
 * that also drives the VMs.
 *
 * Routes (KServe v2): GET /v2/health/live, /v2/health/ready, /v2,
 * /v2/models/NAME[/versions/1], .../ready, POST .../infer; POST
 * /v2/repository/index (Triton's model repository extension); GET /metrics.
 * h2o reads whole requests (bodies up to --max-body-bytes, else 413;
 * connections that send no whole request within --idle-timeout-ms are
 * closed) and calls on_req; an inference is answered later, from the run's
 * callback, through the request's link (which h2o's pool disposes if the
 * connection goes first). SIGTERM or SIGINT closes the listening socket,
 * answers every request already taken, and then ends the loop.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <h2o.h>

#include "serve.h"

typedef struct serve_handler {
  h2o_handler_t super;
  serve_t *s;
} serve_handler_t;

/* An inference waiting for its answer; lives in the request's pool. */
typedef struct link {
  h2o_req_t *req;
  serve_req_t *r;
  serve_t *s;
} link_t;

typedef struct conn {
  uv_tcp_t tcp; /* first: h2o's close callback frees the conn */
  serve_t *s;
} conn_t;

static struct {
  h2o_globalconf_t config;
  h2o_context_t ctx;
  h2o_accept_ctx_t accept;
  uv_tcp_t listener;
  uv_signal_t sigterm, sigint;
  uv_timer_t finish;
  double finish_by;
  bool listening;
} H;

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

/* Sends a response; body is malloc'd (or NULL) and taken. */
static void respond(serve_t *s, h2o_req_t *req, int status, const char *ctype, char *body, size_t len, size_t json_len, int retry_after) {
  if (!body) {
    status = 500;
    body = strdup("{\"error\": \"out of memory\"}");
    len = json_len = body ? strlen(body) : 0;
    ctype = "application/json";
  }
  if (status >= 100 && status < 600) s->http_codes[status]++;
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
  if (s->draining) req->http1_is_persistent = 0;
  req->res.content_length = len;
  h2o_send_inline(req, body ? body : "", len);
  free(body);
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

void serve_http_reply(serve_req_t *r, int status, char *body, size_t len, size_t json_len, int retry_after) {
  link_t *l = r->http;
  r->http = NULL;
  l->r = NULL;
  respond(l->s, l->req, status, "application/json", body, len, json_len, retry_after);
}

/* ---- generations (serve_llm.c) ---- */
typedef struct glink {
  h2o_generator_t gen;  /* first: h2o hands it back to proceed and stop */
  h2o_req_t *req;
  serve_greq_t *r;      /* NULL once answered */
  serve_t *s;
  bool streaming, sending, final_queued, closed;
  char *pending;        /* events not yet handed to h2o */
  size_t len, cap;
} glink_t;

void serve_http_reply_to(void *http, int status, char *body, size_t len, int retry_after) {
  glink_t *l = http;
  l->r = NULL;
  respond(l->s, l->req, status, "application/json", body, len, len, retry_after);
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
  if (l->r) {
    serve_greq_t *r = l->r;
    l->r = NULL;
    serve_llm_abandon(r);
  }
}

void serve_http_stream_begin(void *http) {
  glink_t *l = http;
  h2o_req_t *req = l->req;
  l->streaming = true;
  l->s->http_codes[200]++;
  req->res.status = 200;
  req->res.reason = "OK";
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/event-stream"));
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-cache"));
  if (l->s->draining) req->http1_is_persistent = 0;
  l->gen.proceed = on_proceed;
  l->gen.stop = on_stop;
  h2o_start_response(req, &l->gen);
}

void serve_http_stream_write(void *http, char *data, size_t len, bool final) {
  glink_t *l = http;
  if (final) l->r = NULL;
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
  if (l->r) {
    serve_greq_t *r = l->r;
    l->r = NULL;
    serve_llm_abandon(r);
  }
}

static int generate(serve_t *s, h2o_req_t *req, serve_model_t *m, bool stream) {
  char err[1024];
  if (!m->llm) {
    snprintf(err, sizeof err, "model '%s' does not generate (a Hugging Face folder does): POST /v2/models/%s/infer", m->name, m->name);
    return send_error(s, req, 400, err);
  }
  if (s->draining) return send_busy(s, req, "the server is shutting down");
  glink_t *l = h2o_mem_alloc_shared(&req->pool, sizeof *l, on_glink_dispose);
  memset(l, 0, sizeof *l);
  l->req = req;
  l->s = s;
  serve_greq_t *r = NULL;
  int rc = serve_llm_request(m, l, stream, req->entity.base ? req->entity.base : "", req->entity.base ? req->entity.len : 0, &r, err, sizeof err);
  if (rc == 503) return send_busy(s, req, err);
  if (rc) return send_error(s, req, rc, err);
  l->r = r; /* answered later, from the loop (l->r cleared then) */
  if (stream) serve_http_stream_begin(l);
  serve_llm_kick(m);
  return 0;
}

/* The request's pool is going: its connection closed before the answer. */
static void on_link_dispose(void *p) {
  link_t *l = p;
  if (l->r) serve_abandon(l->r);
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

static int infer(serve_t *s, h2o_req_t *req, serve_model_t *m) {
  char err[1024];
  if (s->draining) return send_busy(s, req, "the server is shutting down");
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
      return send_error(s, req, 400, err);
    }
    json_len = (size_t)n;
  }
  serve_req_t *r;
  int rc = serve_parse_infer(m, req->entity.base ? req->entity.base : "", len, json_len, &r, err, sizeof err);
  if (rc) {
    m->requests++;
    m->failures++;
    m->responses[1]++;
    return send_error(s, req, rc, err);
  }
  link_t *l = h2o_mem_alloc_shared(&req->pool, sizeof *l, on_link_dispose);
  l->req = req;
  l->r = r;
  l->s = s;
  r->http = l;
  if ((rc = serve_submit(s, r, err, sizeof err))) {
    l->r = NULL;
    r->http = NULL;
    serve_req_free(r);
    return send_busy(s, req, err);
  }
  return 0;
}

static char *server_metadata(void) {
  char *s = malloc(256);
  if (s)
    snprintf(s, 256, "{\"name\":\"rill\",\"version\":\"%s\",\"extensions\":[\"binary_tensor_data\",\"model_repository\",\"generate\"]}",
             rill_version_string());
  return s;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req) {
  serve_t *s = ((serve_handler_t *)self)->s;
  h2o_iovec_t path = req->path_normalized;
  bool get = is(req->method, "GET") || is(req->method, "HEAD"), post = is(req->method, "POST");
  if (is(path, "/v2/health/live")) {
    if (!get) return wrong_method(s, req, "GET");
    send_json(s, req, 200, strdup("{\"live\":true}"));
    return 0;
  }
  if (is(path, "/v2/health/ready")) {
    if (!get) return wrong_method(s, req, "GET");
    send_json(s, req, s->draining ? 503 : 200, strdup(s->draining ? "{\"ready\":false}" : "{\"ready\":true}"));
    return 0;
  }
  if (is(path, "/v2") || is(path, "/v2/")) {
    if (!get) return wrong_method(s, req, "GET");
    send_json(s, req, 200, server_metadata());
    return 0;
  }
  if (is(path, "/v2/repository/index")) {
    if (!get && !post) return wrong_method(s, req, "POST");
    send_json(s, req, 200, serve_repository_index(s));
    return 0;
  }
  if (is(path, "/metrics")) {
    if (!get) return wrong_method(s, req, "GET");
    size_t n = 0;
    char *text = serve_metrics_text(s, &n);
    respond(s, req, 200, "text/plain; version=0.0.4", text, n, n, 0);
    return 0;
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
      if (b) snprintf(b, 256, "{\"name\":\"%s\",\"ready\":%s}", m->name, s->draining ? "false" : "true");
      send_json(s, req, s->draining ? 503 : 200, b);
      return 0;
    }
    if (segl[at] == 5 && !memcmp(seg[at], "infer", 5)) {
      if (!post) return wrong_method(s, req, "POST");
      if (m->llm) {
        snprintf(msg, sizeof msg, "model '%s' generates: POST /v2/models/%s/generate or generate_stream", m->name, m->name);
        return send_error(s, req, 400, msg);
      }
      return infer(s, req, m);
    }
    if ((segl[at] == 8 && !memcmp(seg[at], "generate", 8)) || (segl[at] == 15 && !memcmp(seg[at], "generate_stream", 15))) {
      if (!post) return wrong_method(s, req, "POST");
      return generate(s, req, m, segl[at] == 15);
    }
    return send_error(s, req, 404, "no such path");
  }
  return send_error(s, req, 404, "no such path");
}

/* ---- connections, signals, drain ---- */
static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = (conn_t *)h;
  c->s->connections--;
  free(c);
}

static void free_handle(uv_handle_t *h) { free(h); }

static void on_accept(uv_stream_t *listener, int status) {
  serve_t *s = listener->data;
  if (status != 0) return;
  conn_t *c = calloc(1, sizeof *c);
  if (!c) return;
  c->s = s;
  uv_tcp_init(listener->loop, &c->tcp);
  if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 || s->connections >= s->cfg.max_connections || s->draining) {
    uv_close((uv_handle_t *)&c->tcp, free_handle);
    return;
  }
  s->connections++;
  uv_tcp_nodelay(&c->tcp, 1);
  h2o_socket_t *sock = h2o_uv_socket_create((uv_stream_t *)&c->tcp, on_conn_closed);
  h2o_accept(&H.accept, sock);
}

/* After the last answer: until the connections have closed (their answers
 * written) or a grace period has passed. */
static void on_finish(uv_timer_t *t) {
  serve_t *s = t->data;
  if (s->connections == 0 || serve_now(s) > H.finish_by) uv_stop(s->loop);
}

void serve_drained(serve_t *s) {
  if (uv_is_active((uv_handle_t *)&H.finish)) return;
  H.finish_by = serve_now(s) + 2.0;
  uv_timer_start(&H.finish, on_finish, 0, 10);
}

static void on_signal(uv_signal_t *sig, int signum) {
  serve_t *s = sig->data;
  if (s->draining) {
    fprintf(stderr, "rill: serve: second signal: stopping without waiting\n");
    uv_stop(s->loop);
    return;
  }
  fprintf(stderr, "rill: serve: %s: answering the requests taken, then stopping\n", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  s->draining = true;
  if (H.listening) {
    uv_close((uv_handle_t *)&H.listener, NULL);
    H.listening = false;
  }
  h2o_context_request_shutdown(&H.ctx);
  if (serve_idle(s)) serve_drained(s);
}

static int listen_on(serve_t *s) {
  struct sockaddr_storage addr;
  int e = strchr(s->cfg.host, ':') ? uv_ip6_addr(s->cfg.host, s->cfg.port, (struct sockaddr_in6 *)&addr)
                                   : uv_ip4_addr(s->cfg.host, s->cfg.port, (struct sockaddr_in *)&addr);
  if (e) {
    fprintf(stderr, "rill: serve: --host '%s' is not an IPv4 or IPv6 address\n", s->cfg.host);
    return 2;
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

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int serve_http_run(serve_t *s) {
  signal(SIGPIPE, SIG_IGN);
  s->loop = uv_default_loop();
  h2o_config_init(&H.config);
  H.config.server_name = h2o_iovec_init(H2O_STRLIT("rill"));
  H.config.max_request_entity_size = s->cfg.max_body;
  H.config.http1.req_timeout = (uint64_t)s->cfg.idle_timeout_ms;
  h2o_hostconf_t *host = h2o_config_register_host(&H.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
  serve_handler_t *handler = (serve_handler_t *)h2o_create_handler(path, sizeof *handler);
  handler->super.on_req = on_req;
  handler->s = s;
  h2o_context_init(&H.ctx, s->loop, &H.config);
  H.accept.ctx = &H.ctx;
  H.accept.hosts = H.config.hosts;
  int rc = serve_start(s) ? 1 : 0;
  uv_timer_init(s->loop, &H.finish);
  H.finish.data = s;
  uv_signal_init(s->loop, &H.sigterm);
  uv_signal_init(s->loop, &H.sigint);
  H.sigterm.data = H.sigint.data = s;
  uv_signal_start(&H.sigterm, on_signal, SIGTERM);
  uv_signal_start(&H.sigint, on_signal, SIGINT);
  if (!rc) rc = listen_on(s);
  if (!rc) uv_run(s->loop, UV_RUN_DEFAULT);
  /* Runs still in flight (a second signal) end before the VMs go. */
  while (!serve_idle(s) && uv_run(s->loop, UV_RUN_ONCE)) {
  }
  if (H.listening) uv_close((uv_handle_t *)&H.listener, NULL);
  serve_stop(s);
  uv_close((uv_handle_t *)&H.finish, NULL);
  uv_close((uv_handle_t *)&H.sigterm, NULL);
  uv_close((uv_handle_t *)&H.sigint, NULL);
  /* h2o's context is not disposed (its timeouts may still hold entries of
   * the shutdown); its handles close with the loop's others. */
  for (int i = 0; i < 8 && uv_run(s->loop, UV_RUN_NOWAIT); i++) {
  }
  if (s->connections == 0) {
    uv_walk(s->loop, close_walk, NULL);
    uv_run(s->loop, UV_RUN_NOWAIT);
    uv_loop_close(s->loop);
  }
  return rc;
}
