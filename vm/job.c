/* job.c: ranks meeting at a rendezvous, and the transport between them.
 *
 * Rank 0 listens at HOST:PORT; every other rank connects (retrying every
 * 100 ms until the set-up deadline, since rank 0 may start later) and says
 * HELLO: its rank, the job's size, its module's hash. Rank 0 answers once
 * every rank has said it (or the deadline passed): WELCOME when all agree,
 * else REFUSE with one message naming the ranks and what differed (or which
 * did not arrive), which every rank then fails with.
 *
 * After that the connections carry the transport, a star through rank 0:
 * allgather number k sends DATA(k, bytes) from each rank to rank 0, which
 * waits for every rank's, checks they have the same size, and sends
 * RESULT(k, all bytes in rank order) back. A rank can be at most one
 * allgather ahead of rank 0 (it waits for RESULT), so rank 0 keeps one slot
 * per peer. Failures travel as FAIL(origin rank, message): a rank sends its
 * own (abort, a timeout) to rank 0, which relays every failure to the
 * others; a connection that closes without BYE is a rank that died, a call
 * that gets no answer within the collective timeout names the ranks that
 * did not answer. Leaving (rill_job_destroy) says BYE, so the others tell a
 * rank that finished from one that died.
 *
 * Point to point (send/recv): P2P(from, to, bytes) goes to rank 0, which
 * keeps it when it is the receiver and passes it on otherwise; so the
 * messages from one rank to another arrive in the order sent. A send
 * returns once its bytes are queued for the loop; each rank keeps what
 * arrived in a mailbox per sender until a recv takes it.
 *
 * Frames: u8 type, u64 length (little-endian), then the payload. All the
 * handles live on the job's loop, run by its own thread; callers talk to it
 * through `mu` (request, failure, closing) and a uv_async_t.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "isa/base.h"
#include "isa/isa.h"
#include "vm/job.h"
#include "vm/vm.h"

enum { F_HELLO = 1, F_WELCOME, F_REFUSE, F_DATA, F_RESULT, F_FAIL, F_BYE, F_P2P };
#define HDR 9
#define MAGIC "RILLJOB1" /* the protocol's version is its last character */
#define HELLO_SIZE (8 + 4 + 4 + 8)
#define SETUP_FRAME_MAX 4096 /* a frame before the peer said HELLO, or before WELCOME */
#define CONNECT_RETRY_MS 100
#define GRACE_MS 2000         /* a rank waits this much past its own deadline for rank 0's verdict */
#define CLOSE_MS 2000         /* pending writes (BYE, FAIL) get this long at destroy */

enum { PH_SETUP, PH_RUNNING, PH_SETUP_FAILED };

/* A payload shared by the writes of one frame to several peers. */
typedef struct blob {
  atomic_int refs;
  const rill_allocator_t *a;
  size_t n;
  uint8_t data[];
} blob_t;

typedef struct conn conn_t;
struct conn {
  uv_tcp_t tcp;
  rill_job_t *job;
  conn_t *next;
  int rank;            /* the peer's rank once it said HELLO (rank 0 for a non-root's connection); -1 before */
  bool hello, bye, closing, connected;
  uint32_t said_nranks;
  uint64_t said_hash;
  uint8_t hdr[HDR];
  size_t hdr_got;
  uint8_t type;
  uint64_t len, got;
  uint8_t *body;
  /* rank 0: this peer's DATA for the next allgather (body kept) */
  uint8_t *slot;
  size_t slot_n;
  uint64_t slot_seq;
  bool has_slot;
};

/* A message that arrived from a rank (mailbox) or waits for the loop to send it (queue). */
typedef struct p2p_msg {
  struct p2p_msg *next;
  int to;
  blob_t *blob;                /* from (u32), to (u32), then the bytes */
} p2p_msg_t;

typedef struct wreq {
  uv_write_t w;
  uint8_t hdr[HDR];
  blob_t *blob;
} wreq_t;

struct rill_job {
  const rill_allocator_t *a;
  int rank, nranks;
  char host[256];
  int port;
  uint64_t hash;
  double setup_s, coll_s;
  struct sockaddr_storage addr;
  vm_transport_t tr;

  /* the loop and its handles: touched only by the loop thread once it runs */
  uv_loop_t loop;
  bool loop_made, thread_started;
  pthread_t thread;
  uv_async_t async;
  uv_timer_t deadline, retry;
  uv_tcp_t listener;
  bool listening, in_grace, closing_started;
  bool retry_closed;
  conn_t *conns;
  conn_t **peers;              /* rank 0: by rank, those that said HELLO validly */
  conn_t *root;                /* other ranks: the connection to rank 0 */
  int arrived;                 /* rank 0: connections that said HELLO */
  rill_buf_t problems;         /* rank 0: what the ranks disagree on, "; "-separated */
  char last_err[160];          /* other ranks: why the last connection attempt failed */
  bool lreq_on;                /* the allgather under way, as the loop sees it */
  uint64_t lreq_seq;
  size_t lreq_n;
  blob_t *lreq_blob;           /* seq + this rank's bytes */

  /* shared with callers, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int phase;
  bool failed;
  rill_code_t fail_code;
  char fail[1024];
  bool fail_send;              /* a failure made by a caller (abort): the loop tells the others */
  bool closing;
  bool req_active, req_started, req_done;
  uint64_t seq;
  size_t req_n;
  blob_t *req_blob;
  void *req_out;
  rill_status_t req_status;
  p2p_msg_t **mbox_head, **mbox_tail; /* by sender */
  p2p_msg_t *sendq, *sendq_tail;
};

/* ---- small pieces ---- */
static blob_t *blob_new(const rill_allocator_t *a, size_t n) {
  if (n > SIZE_MAX - sizeof(blob_t)) return NULL;
  blob_t *b = rill__alloc(a, sizeof(blob_t) + n);
  if (!b) return NULL;
  atomic_init(&b->refs, 1);
  b->a = a;
  b->n = n;
  return b;
}
static void blob_unref(blob_t *b) {
  if (b && atomic_fetch_sub(&b->refs, 1) == 1) rill__free(b->a, b);
}

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static const char *plural(int n) { return n == 1 ? "" : "s"; }

/* ---- failing ---- */
/* Under mu: the job's first failure; the pending allgather fails with it. */
static void set_failed_locked(rill_job_t *j, rill_code_t code, const char *msg) {
  if (j->failed) return;
  j->failed = true;
  j->fail_code = code;
  snprintf(j->fail, sizeof j->fail, "%s", msg);
  if (j->phase == PH_SETUP) j->phase = PH_SETUP_FAILED;
  if (j->req_active && !j->req_done) {
    j->req_status = rill__status(code, "%s", msg);
    j->req_done = true;
  }
  pthread_cond_broadcast(&j->cv);
}

static void write_frame(conn_t *c, int type, blob_t *payload);

/* A frame with a u32 and a text: REFUSE (code) and FAIL (origin rank). */
static void write_text(conn_t *c, int type, uint32_t word, const char *text) {
  size_t n = strlen(text);
  blob_t *b = blob_new(c->job->a, 4 + n);
  if (!b) return; /* the peer learns by the connection closing */
  put_u32(b->data, word);
  memcpy(b->data + 4, text, n);
  write_frame(c, type, b);
  blob_unref(b);
}

static bool live(const conn_t *c) { return c && c->connected && !c->closing && !c->bye; }

/* The loop drops the allgather it had under way. */
static void lreq_drop(rill_job_t *j) {
  j->lreq_on = false;
  blob_unref(j->lreq_blob);
  j->lreq_blob = NULL;
}

/* Sends the job's failure on: rank 0 to every rank but `origin` (REFUSE
 * during set-up), another rank to rank 0 when the failure is its own. */
static void send_failure(rill_job_t *j, int origin, bool setup, rill_code_t code, const char *msg) {
  if (j->rank == 0) {
    for (conn_t *c = j->conns; c; c = c->next)
      if (live(c) && c->hello && c->rank != origin) write_text(c, setup ? F_REFUSE : F_FAIL, setup ? (uint32_t)code : (uint32_t)origin, msg);
  } else if (origin == j->rank && live(j->root) && !setup) {
    write_text(j->root, F_FAIL, (uint32_t)origin, msg);
  }
}

static void stop_listening(rill_job_t *j);

/* On the loop: the job fails (first failure wins) and the others are told. */
static void fail_job(rill_job_t *j, int origin, rill_code_t code, const char *fmt, ...) RILL_PRINTF(4, 5);
static void fail_job(rill_job_t *j, int origin, rill_code_t code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&j->mu);
  bool first = !j->failed, setup = j->phase == PH_SETUP;
  set_failed_locked(j, code, msg);
  pthread_mutex_unlock(&j->mu);
  if (!first) return;
  uv_timer_stop(&j->deadline);
  uv_timer_stop(&j->retry);
  lreq_drop(j);
  stop_listening(j);
  send_failure(j, origin, setup, code, msg);
}

/* ---- connections ---- */
static void on_write(uv_write_t *w, int status) {
  wreq_t *r = (wreq_t *)w;
  blob_unref(r->blob);
  free(r);
}

static void write_frame(conn_t *c, int type, blob_t *payload) {
  if (!c->connected || c->closing) return;
  wreq_t *r = calloc(1, sizeof *r);
  if (!r) return;
  r->hdr[0] = (uint8_t)type;
  put_u64(r->hdr + 1, payload ? payload->n : 0);
  uv_buf_t bufs[2] = {uv_buf_init((char *)r->hdr, HDR), uv_buf_init(NULL, 0)};
  int nb = 1;
  if (payload && payload->n) {
    atomic_fetch_add(&payload->refs, 1);
    r->blob = payload;
    bufs[1] = uv_buf_init((char *)payload->data, 0);
    bufs[1].len = payload->n; /* size_t: uv_buf_init takes an unsigned int */
    nb = 2;
  }
  if (uv_write(&r->w, (uv_stream_t *)&c->tcp, bufs, (unsigned)nb, on_write) != 0) {
    blob_unref(r->blob);
    free(r);
  }
}

static void conn_free(conn_t *c) {
  rill_job_t *j = c->job;
  for (conn_t **p = &j->conns; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  if (j->peers && c->rank > 0 && c->rank < j->nranks && j->peers[c->rank] == c) j->peers[c->rank] = NULL;
  if (j->root == c) j->root = NULL;
  rill__free(j->a, c->body);
  rill__free(j->a, c->slot);
  rill__free(j->a, c);
}

static void close_retry(rill_job_t *j);

static void on_conn_closed(uv_handle_t *h) {
  conn_t *c = h->data;
  rill_job_t *j = c->job;
  conn_free(c);
  if (j->closing_started && !j->conns) close_retry(j); /* nothing left to flush */
}

static void conn_close(conn_t *c) {
  if (c->closing) return;
  c->closing = true;
  uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static conn_t *conn_new(rill_job_t *j) {
  conn_t *c = rill__calloc(j->a, 1, sizeof *c);
  if (!c) return NULL;
  c->job = j;
  c->rank = -1;
  if (uv_tcp_init(&j->loop, &c->tcp) != 0) {
    rill__free(j->a, c);
    return NULL;
  }
  c->tcp.data = c;
  c->next = j->conns;
  j->conns = c;
  return c;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn_t *c = h->data;
  if (c->hdr_got < HDR) {
    *buf = uv_buf_init((char *)c->hdr + c->hdr_got, (unsigned)(HDR - c->hdr_got));
  } else {
    uint64_t left = c->len - c->got;
    *buf = uv_buf_init((char *)c->body + c->got, 0);
    buf->len = left < ((size_t)1 << 30) ? (size_t)left : ((size_t)1 << 30);
  }
}

static void dispatch(conn_t *c, int type, uint8_t *body, size_t n);

/* What a closed connection means: a rank that left (BYE), one that died,
 * or one that went away during set-up. */
static void conn_lost(conn_t *c, int err) {
  rill_job_t *j = c->job;
  pthread_mutex_lock(&j->mu);
  int phase = j->phase;
  bool failed = j->failed;
  pthread_mutex_unlock(&j->mu);
  int rank = c->rank;
  bool said_bye = c->bye, hello = c->hello;
  conn_close(c);
  if (failed || phase == PH_SETUP_FAILED) return;
  if (j->rank == 0) {
    if (phase == PH_SETUP) {
      /* gone before the job formed: it has not arrived (it may come again) */
      if (hello) j->arrived--;
      if (hello && rank > 0 && rank < j->nranks && j->peers[rank] == c) j->peers[rank] = NULL;
      return;
    }
    if (said_bye) {
      if (j->lreq_on) fail_job(j, rank, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank %d left the job (it finished) before taking part",
                               j->lreq_seq, rank);
      return;
    }
    fail_job(j, rank, RILL_RUNTIME_ERROR, "rank %d closed its connection without leaving the job (its process died or was killed: %s)", rank,
             err == UV_EOF ? "end of stream" : uv_strerror(err));
    return;
  }
  if (phase == PH_SETUP) {
    fail_job(j, j->rank, RILL_UNAVAILABLE, "rendezvous tcp://%s:%d: rank 0 closed the connection before the job formed", j->host, j->port);
    return;
  }
  if (said_bye) {
    if (j->lreq_on) fail_job(j, j->rank, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank 0 left the job (it finished) before taking part", j->lreq_seq);
    return;
  }
  fail_job(j, j->rank, RILL_RUNTIME_ERROR, "rank 0 closed its connection without leaving the job (its process died or was killed: %s)",
           err == UV_EOF ? "end of stream" : uv_strerror(err));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  conn_t *c = s->data;
  rill_job_t *j = c->job;
  if (nread < 0) {
    conn_lost(c, (int)nread);
    return;
  }
  if (nread == 0 || c->closing) return;
  if (c->hdr_got < HDR) {
    c->hdr_got += (size_t)nread;
    if (c->hdr_got < HDR) return;
    c->type = c->hdr[0];
    c->len = get_u64(c->hdr + 1);
    c->got = 0;
    pthread_mutex_lock(&j->mu);
    bool setup = j->phase != PH_RUNNING;
    pthread_mutex_unlock(&j->mu);
    bool small_only = j->rank == 0 ? !c->hello : setup; /* nobody makes us allocate much before the job forms */
    if (small_only && c->len > SETUP_FRAME_MAX) {
      if (j->rank != 0) {
        fail_job(j, j->rank, RILL_UNAVAILABLE, "rendezvous tcp://%s:%d: the answer is not a rill job's (is it a rill rank 0?)", j->host, j->port);
      }
      conn_close(c);
      return;
    }
    if (c->len > SIZE_MAX || !(c->body = rill__alloc(j->a, (size_t)c->len))) {
      fail_job(j, j->rank, RILL_OUT_OF_MEMORY, "out of memory receiving %" PRIu64 " bytes from rank %d", c->len, c->rank);
      conn_close(c);
      return;
    }
  } else {
    c->got += (uint64_t)nread;
  }
  if (c->got < c->len) return;
  uint8_t *body = c->body;
  c->body = NULL;
  c->hdr_got = 0;
  dispatch(c, c->type, body, (size_t)c->len); /* takes body */
}

/* ---- the rendezvous ---- */
static void problem(rill_job_t *j, const char *fmt, ...) RILL_PRINTF(2, 3);
static void problem(rill_job_t *j, const char *fmt, ...) {
  char m[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m, sizeof m, fmt, ap);
  va_end(ap);
  if (j->problems.len < 4096) {
    if (j->problems.len) (void)rill__buf_append(&j->problems, "; ", 2);
    (void)rill__buf_append(&j->problems, m, strlen(m));
  }
}

static void stop_listening(rill_job_t *j) {
  if (!j->listening) return;
  j->listening = false;
  uv_close((uv_handle_t *)&j->listener, NULL);
}

/* Rank 0: every rank has said HELLO: the job forms, or fails naming what differed. */
static void decide(rill_job_t *j) {
  if (j->problems.len) {
    fail_job(j, 0, RILL_INVALID_ARGUMENT, "the job's ranks do not agree: %.*s", (int)j->problems.len, (const char *)j->problems.data);
    return;
  }
  uv_timer_stop(&j->deadline);
  stop_listening(j);
  for (conn_t *c = j->conns; c; c = c->next)
    if (live(c) && c->hello) write_frame(c, F_WELCOME, NULL);
  pthread_mutex_lock(&j->mu);
  if (!j->failed) j->phase = PH_RUNNING;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void hello(conn_t *c, const uint8_t *b, size_t n) {
  rill_job_t *j = c->job;
  if (n != HELLO_SIZE || memcmp(b, MAGIC, 8) != 0) {
    conn_close(c); /* not a rank of this version of rill */
    return;
  }
  int r = (int)get_u32(b + 8);
  uint32_t nr = get_u32(b + 12);
  uint64_t h = get_u64(b + 16);
  c->hello = true;
  c->rank = r;
  c->said_nranks = nr;
  c->said_hash = h;
  j->arrived++;
  if (nr != (uint32_t)j->nranks) problem(j, "rank %d says the job has %" PRIu32 " ranks, rank 0 says %d", r, nr, j->nranks);
  if (r == 0) problem(j, "two processes say they are rank 0");
  else if (r < 0 || r >= j->nranks) problem(j, "a process says it is rank %d, out of the job's ranks 0..%d", r, j->nranks - 1);
  else if (j->peers[r]) problem(j, "two processes say they are rank %d", r);
  else j->peers[r] = c;
  if (h != j->hash) problem(j, "rank %d runs a different module (hash %016" PRIx64 ") from rank 0 (hash %016" PRIx64 ")", r, h, j->hash);
  if (j->arrived == j->nranks - 1) decide(j);
}

static void on_deadline(uv_timer_t *t) {
  rill_job_t *j = t->data;
  pthread_mutex_lock(&j->mu);
  int phase = j->phase;
  pthread_mutex_unlock(&j->mu);
  if (phase == PH_SETUP) {
    if (j->rank == 0) {
      char missing[512] = "";
      size_t at = 0;
      int nm = 0;
      for (int r = 1; r < j->nranks; r++)
        if (!j->peers[r] && at < sizeof missing - 16) {
          at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%d", nm ? ", " : "", r);
          nm++;
        }
      if (at >= sizeof missing - 16) snprintf(missing + sizeof missing - 16, 16, ", ...");
      fail_job(j, 0, RILL_UNAVAILABLE, "rendezvous tcp://%s:%d did not complete within %g s: rank%s %s did not arrive%s%.*s", j->host, j->port,
               j->setup_s, plural(nm), missing, j->problems.len ? "; and " : "", (int)j->problems.len, (const char *)j->problems.data);
    } else if (!j->root) {
      fail_job(j, j->rank, RILL_UNAVAILABLE, "rendezvous tcp://%s:%d did not complete within %g s: rank 0 did not arrive (%s)", j->host, j->port,
               j->setup_s, j->last_err[0] ? j->last_err : "no answer");
    } else if (!j->in_grace) {
      j->in_grace = true; /* rank 0's own deadline names the missing ranks */
      uv_timer_start(&j->deadline, on_deadline, GRACE_MS, 0);
    } else {
      fail_job(j, j->rank, RILL_UNAVAILABLE, "rendezvous tcp://%s:%d did not complete within %g s: rank 0 was reached but other ranks did not arrive",
               j->host, j->port, j->setup_s);
    }
    return;
  }
  if (!j->lreq_on) return;
  if (j->rank == 0) {
    char missing[512] = "";
    size_t at = 0;
    int nm = 0;
    for (int r = 1; r < j->nranks; r++) {
      conn_t *c = j->peers[r];
      if ((!c || !c->has_slot) && at < sizeof missing - 16) {
        at += (size_t)snprintf(missing + at, sizeof missing - at, "%s%d", nm ? ", " : "", r);
        nm++;
      }
    }
    fail_job(j, 0, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank%s %s did not answer within %g s (--collective-timeout)", j->lreq_seq, plural(nm),
             missing, j->coll_s);
  } else if (!j->in_grace) {
    j->in_grace = true; /* rank 0's own timeout names the ranks it waits for */
    uv_timer_start(&j->deadline, on_deadline, GRACE_MS, 0);
  } else {
    fail_job(j, j->rank, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank 0 did not answer within %g s (--collective-timeout)", j->lreq_seq,
             j->coll_s);
  }
}

static void start_connect(rill_job_t *j);

static void on_retry(uv_timer_t *t) { start_connect(t->data); }

static void on_connect(uv_connect_t *req, int status) {
  conn_t *c = req->data;
  rill_job_t *j = c->job;
  free(req);
  pthread_mutex_lock(&j->mu);
  bool over = j->phase != PH_SETUP || j->closing;
  pthread_mutex_unlock(&j->mu);
  if (status < 0 || over) {
    if (status < 0) snprintf(j->last_err, sizeof j->last_err, "connecting: %s", uv_strerror(status));
    conn_close(c);
    if (!over) uv_timer_start(&j->retry, on_retry, CONNECT_RETRY_MS, 0);
    return;
  }
  c->connected = true;
  c->rank = 0;
  j->root = c;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
  blob_t *b = blob_new(j->a, HELLO_SIZE);
  if (!b) {
    fail_job(j, j->rank, RILL_OUT_OF_MEMORY, "out of memory");
    return;
  }
  memcpy(b->data, MAGIC, 8);
  put_u32(b->data + 8, (uint32_t)j->rank);
  put_u32(b->data + 12, (uint32_t)j->nranks);
  put_u64(b->data + 16, j->hash);
  write_frame(c, F_HELLO, b);
  blob_unref(b);
}

static void start_connect(rill_job_t *j) {
  conn_t *c = conn_new(j);
  uv_connect_t *req = malloc(sizeof *req);
  if (!c || !req) {
    free(req);
    if (c) conn_close(c);
    fail_job(j, j->rank, RILL_OUT_OF_MEMORY, "out of memory");
    return;
  }
  req->data = c;
  int e = uv_tcp_connect(req, &c->tcp, (const struct sockaddr *)&j->addr, on_connect);
  if (e) {
    free(req);
    snprintf(j->last_err, sizeof j->last_err, "connecting: %s", uv_strerror(e));
    conn_close(c);
    uv_timer_start(&j->retry, on_retry, CONNECT_RETRY_MS, 0);
  }
}

static void on_connection(uv_stream_t *server, int status) {
  rill_job_t *j = server->data;
  if (status < 0) return;
  conn_t *c = conn_new(j);
  if (!c) return;
  if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
    conn_close(c);
    return;
  }
  c->connected = true;
  uv_tcp_nodelay(&c->tcp, 1);
  uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* ---- allgather ---- */
/* The loop's part of completing the pending allgather with the gathered bytes. */
static void complete(rill_job_t *j, const uint8_t *all) {
  pthread_mutex_lock(&j->mu);
  if (j->req_active && !j->req_done && j->seq == j->lreq_seq) {
    if (j->req_n) memcpy(j->req_out, all, j->req_n * (size_t)j->nranks);
    j->req_status = NULL;
    j->req_done = true;
    pthread_cond_broadcast(&j->cv);
  }
  pthread_mutex_unlock(&j->mu);
  uv_timer_stop(&j->deadline);
  lreq_drop(j);
}

/* Rank 0: when every rank's bytes are in, checks their sizes and sends the result. */
static void gather(rill_job_t *j) {
  if (!j->lreq_on) return;
  for (int r = 1; r < j->nranks; r++) {
    conn_t *c = j->peers[r];
    if (c && c->has_slot) continue;
    if (!c || c->bye) {
      fail_job(j, r, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank %d left the job (it finished) before taking part", j->lreq_seq, r);
      return;
    }
    return; /* not yet */
  }
  size_t n = j->lreq_n;
  for (int r = 1; r < j->nranks; r++)
    if (j->peers[r]->slot_seq != j->lreq_seq) {
      fail_job(j, 0, RILL_RUNTIME_ERROR, "rank %d is at allgather %" PRIu64 ", rank 0 at %" PRIu64 " (the ranks ran different collectives)", r,
               j->peers[r]->slot_seq, j->lreq_seq);
      return;
    } else if (j->peers[r]->slot_n != n) {
      fail_job(j, 0, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank %d gave %zu bytes, rank 0 gave %zu", j->lreq_seq, r, j->peers[r]->slot_n, n);
      return;
    }
  size_t total;
  blob_t *res = rill__mul_ok(n, (size_t)j->nranks, &total) && total <= SIZE_MAX - 8 ? blob_new(j->a, 8 + total) : NULL;
  if (!res) {
    fail_job(j, 0, RILL_OUT_OF_MEMORY, "allgather %" PRIu64 ": out of memory for %d x %zu bytes", j->lreq_seq, j->nranks, n);
    return;
  }
  put_u64(res->data, j->lreq_seq);
  if (n) memcpy(res->data + 8, j->lreq_blob->data + 8, n);
  for (int r = 1; r < j->nranks; r++) {
    conn_t *c = j->peers[r];
    if (n) memcpy(res->data + 8 + (size_t)r * n, c->slot + 8, n);
    rill__free(j->a, c->slot);
    c->slot = NULL;
    c->has_slot = false;
  }
  for (int r = 1; r < j->nranks; r++) write_frame(j->peers[r], F_RESULT, res);
  complete(j, res->data + 8);
  blob_unref(res);
}

/* On the loop: a P2P frame's body (from, to, bytes) for this rank, into the sender's mailbox. */
static void deliver(rill_job_t *j, int from, const uint8_t *body, size_t n) {
  p2p_msg_t *m = rill__calloc(j->a, 1, sizeof *m);
  blob_t *b = m ? blob_new(j->a, n) : NULL;
  if (!b) {
    rill__free(j->a, m);
    fail_job(j, j->rank, RILL_OUT_OF_MEMORY, "out of memory receiving %zu bytes from rank %d", n, from);
    return;
  }
  memcpy(b->data, body, n);
  m->blob = b;
  pthread_mutex_lock(&j->mu);
  if (j->mbox_tail[from]) j->mbox_tail[from]->next = m;
  else j->mbox_head[from] = m;
  j->mbox_tail[from] = m;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

/* On the loop: a P2P frame that rank 0 got or made, to its receiver. */
static void route(rill_job_t *j, int from, int to, const uint8_t *body, size_t n, blob_t *as_blob) {
  if (to == j->rank) {
    deliver(j, from, body, n);
    return;
  }
  conn_t *c = j->rank == 0 ? j->peers[to] : j->root;
  if (!live(c)) return; /* the receiver is gone: the job learns from its connection */
  blob_t *b = as_blob;
  if (!b) {
    if (!(b = blob_new(j->a, n))) {
      fail_job(j, j->rank, RILL_OUT_OF_MEMORY, "out of memory passing %zu bytes from rank %d to rank %d", n, from, to);
      return;
    }
    memcpy(b->data, body, n);
  } else {
    atomic_fetch_add(&b->refs, 1);
  }
  write_frame(c, F_P2P, b);
  blob_unref(b);
}

static void dispatch(conn_t *c, int type, uint8_t *body, size_t n) {
  rill_job_t *j = c->job;
  pthread_mutex_lock(&j->mu);
  int phase = j->phase;
  bool failed = j->failed;
  pthread_mutex_unlock(&j->mu);
  if (type == F_FAIL && n >= 4) {
    int origin = (int)get_u32(body);
    fail_job(j, j->rank == 0 ? c->rank : origin, RILL_RUNTIME_ERROR, "%.*s", (int)(n - 4), (const char *)body + 4);
    rill__free(j->a, body);
    return;
  }
  if (failed) {
    rill__free(j->a, body);
    return;
  }
  if (j->rank == 0) {
    if (!c->hello) {
      if (type == F_HELLO && phase == PH_SETUP) hello(c, body, n);
      else conn_close(c);
    } else if (type == F_DATA && n >= 8 && phase == PH_RUNNING && !c->has_slot) {
      c->slot = body;
      body = NULL;
      c->slot_n = n - 8;
      c->slot_seq = get_u64(c->slot);
      c->has_slot = true;
      gather(j);
    } else if (type == F_BYE) {
      c->bye = true;
      gather(j);
    } else if (type == F_P2P && n >= 8 && phase == PH_RUNNING && (int)get_u32(body) == c->rank && get_u32(body + 4) < (uint32_t)j->nranks &&
               get_u32(body + 4) != (uint32_t)c->rank) {
      route(j, c->rank, (int)get_u32(body + 4), body, n, NULL);
    } else {
      fail_job(j, 0, RILL_RUNTIME_ERROR, "rank %d sent a message out of turn (type %d, %zu bytes)", c->rank, type, n);
    }
  } else if (phase == PH_SETUP) {
    if (type == F_WELCOME) {
      uv_timer_stop(&j->deadline);
      pthread_mutex_lock(&j->mu);
      if (!j->failed) j->phase = PH_RUNNING;
      pthread_cond_broadcast(&j->cv);
      pthread_mutex_unlock(&j->mu);
    } else if (type == F_REFUSE && n >= 4) {
      uint32_t code = get_u32(body);
      fail_job(j, 0, code == RILL_INVALID_ARGUMENT ? RILL_INVALID_ARGUMENT : RILL_UNAVAILABLE, "%.*s", (int)(n - 4), (const char *)body + 4);
    } else {
      fail_job(j, j->rank, RILL_UNAVAILABLE, "rendezvous tcp://%s:%d: the answer is not a rill job's (is it a rill rank 0?)", j->host, j->port);
    }
  } else if (type == F_RESULT && n >= 8 && j->lreq_on && get_u64(body) == j->lreq_seq && n - 8 == j->lreq_n * (size_t)j->nranks) {
    complete(j, body + 8);
  } else if (type == F_P2P && n >= 8 && get_u32(body) < (uint32_t)j->nranks && get_u32(body + 4) == (uint32_t)j->rank) {
    deliver(j, (int)get_u32(body), body, n);
  } else if (type == F_BYE) {
    c->bye = true;
    if (j->lreq_on) fail_job(j, j->rank, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank 0 left the job (it finished) before taking part", j->lreq_seq);
  } else {
    fail_job(j, j->rank, RILL_RUNTIME_ERROR, "rank 0 sent a message out of turn (type %d, %zu bytes)", type, n);
  }
  rill__free(j->a, body);
}

/* ---- the loop thread ---- */
static void close_retry(rill_job_t *j) {
  if (j->retry_closed) return;
  j->retry_closed = true;
  uv_close((uv_handle_t *)&j->retry, NULL);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  conn_t *c = req->data;
  free(req);
  conn_close(c);
}

static void on_close_timer(uv_timer_t *t) {
  rill_job_t *j = t->data;
  for (conn_t *c = j->conns; c; c = c->next) conn_close(c);
  close_retry(j);
}

/* Destroy: BYE (when the job stands), pending writes flushed (at most
 * CLOSE_MS), every handle closed; the loop then ends. */
static void begin_close(rill_job_t *j, bool bye) {
  if (j->closing_started) return;
  j->closing_started = true;
  lreq_drop(j);
  stop_listening(j);
  uv_timer_stop(&j->retry);
  uv_close((uv_handle_t *)&j->deadline, NULL);
  uv_close((uv_handle_t *)&j->async, NULL);
  for (conn_t *c = j->conns, *next; c; c = next) {
    next = c->next;
    if (!c->connected) {
      conn_close(c);
      continue;
    }
    if (bye && !c->closing) write_frame(c, F_BYE, NULL);
    uv_shutdown_t *req = malloc(sizeof *req);
    if (!req) {
      conn_close(c);
      continue;
    }
    req->data = c;
    if (c->closing || uv_shutdown(req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
      free(req);
      conn_close(c);
    }
  }
  if (j->conns) uv_timer_start(&j->retry, on_close_timer, CLOSE_MS, 0);
  else close_retry(j);
}

static void on_async(uv_async_t *a) {
  rill_job_t *j = a->data;
  pthread_mutex_lock(&j->mu);
  bool send = j->fail_send, closing = j->closing, bye = j->phase == PH_RUNNING && !j->failed;
  j->fail_send = false;
  char msg[sizeof j->fail];
  snprintf(msg, sizeof msg, "%s", j->fail);
  bool start = j->req_active && !j->req_started && !j->failed;
  p2p_msg_t *out = j->failed ? NULL : j->sendq;
  if (!j->failed) j->sendq = j->sendq_tail = NULL;
  if (start) {
    j->req_started = true;
    j->lreq_on = true;
    j->lreq_seq = j->seq;
    j->lreq_n = j->req_n;
    j->lreq_blob = j->req_blob;
    atomic_fetch_add(&j->lreq_blob->refs, 1);
  }
  pthread_mutex_unlock(&j->mu);
  if (send) {
    uv_timer_stop(&j->deadline);
    lreq_drop(j);
    send_failure(j, j->rank, false, RILL_RUNTIME_ERROR, msg);
  }
  if (start) {
    j->in_grace = false;
    uv_timer_start(&j->deadline, on_deadline, (uint64_t)(j->coll_s * 1000.0), 0);
    if (j->rank == 0) gather(j);
    else if (live(j->root)) write_frame(j->root, F_DATA, j->lreq_blob);
    else fail_job(j, j->rank, RILL_RUNTIME_ERROR, "allgather %" PRIu64 ": rank 0 is gone", j->lreq_seq);
  }
  while (out) {
    p2p_msg_t *m = out;
    out = m->next;
    route(j, j->rank, m->to, m->blob->data, m->blob->n, m->blob);
    blob_unref(m->blob);
    rill__free(j->a, m);
  }
  if (closing) begin_close(j, bye);
}

static void *loop_main(void *arg) {
  rill_job_t *j = arg;
  uv_run(&j->loop, UV_RUN_DEFAULT);
  return NULL;
}

/* ---- the API ---- */
static rill_status_t tr_allgather(void *ctx, const void *in, size_t n, void *out) { return rill_job_allgather(ctx, in, n, out); }
static void tr_abort(void *ctx, const char *why) { rill_job_abort(ctx, why); }
static rill_status_t tr_send(void *ctx, int peer, const void *in, size_t n);
static rill_status_t tr_recv(void *ctx, int peer, void *out, size_t cap, size_t *out_n);

const vm_transport_t *vm_job_transport(rill_job_t *job) { return &job->tr; }
int rill_job_rank(const rill_job_t *job) { return job->rank; }
int rill_job_ranks(const rill_job_t *job) { return job->nranks; }

/* Closes the loop's handles (the thread, if it runs, ends with them) and frees. */
static void job_free(rill_job_t *j) {
  if (j->thread_started) {
    pthread_mutex_lock(&j->mu);
    j->closing = true;
    pthread_mutex_unlock(&j->mu);
    uv_async_send(&j->async);
    pthread_join(j->thread, NULL);
  } else if (j->loop_made) {
    begin_close(j, false);
    uv_run(&j->loop, UV_RUN_DEFAULT);
  }
  if (j->loop_made) {
    uv_run(&j->loop, UV_RUN_DEFAULT); /* nothing left, but be sure every close callback ran */
    uv_loop_close(&j->loop);
  }
  rill__buf_free(&j->problems);
  rill__free(j->a, j->peers);
  for (int r = 0; j->mbox_head && r < j->nranks; r++)
    for (p2p_msg_t *m = j->mbox_head[r], *next; m; m = next) {
      next = m->next;
      blob_unref(m->blob);
      rill__free(j->a, m);
    }
  for (p2p_msg_t *m = j->sendq, *next; m; m = next) {
    next = m->next;
    blob_unref(m->blob);
    rill__free(j->a, m);
  }
  rill__free(j->a, j->mbox_head);
  rill__free(j->a, j->mbox_tail);
  if (j->req_status) rill_status_free(j->req_status);
  blob_unref(j->lreq_blob);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cv);
  rill__free(j->a, j);
}

rill_status_t rill_job_join(const rill_allocator_t *a, const rill_job_options_t *o, rill_job_t **out) {
  if (!a) a = rill_allocator_system();
  *out = NULL;
  if (o->nranks < 1) return rill__status(RILL_INVALID_ARGUMENT, "a job needs at least 1 rank, got %d", o->nranks);
  if (o->rank < 0 || o->rank >= o->nranks)
    return rill__status(RILL_INVALID_ARGUMENT, "rank %d is out of the job's ranks 0..%d", o->rank, o->nranks - 1);
  if (o->nranks > 1 && (!o->host || !o->host[0] || strlen(o->host) >= 256))
    return rill__status(RILL_INVALID_ARGUMENT, "a job of %d ranks needs rank 0's address", o->nranks);
  if (o->nranks > 1 && (o->port < 1 || o->port > 65535))
    return rill__status(RILL_INVALID_ARGUMENT, "the rendezvous port must be 1..65535, got %d", o->port);
  rill_job_t *j = rill__calloc(a, 1, sizeof *j);
  if (!j) return rill__oom();
  j->a = a;
  j->rank = o->rank;
  j->nranks = o->nranks;
  snprintf(j->host, sizeof j->host, "%s", o->host ? o->host : "");
  j->port = o->port;
  j->hash = o->module_hash;
  j->setup_s = o->setup_timeout_s > 0 ? o->setup_timeout_s : 300;
  j->coll_s = o->collective_timeout_s > 0 ? o->collective_timeout_s : 300;
  j->tr = (vm_transport_t){.rank = o->rank, .nranks = o->nranks, .ctx = j, .allgather = tr_allgather, .abort = tr_abort, .send = tr_send, .recv = tr_recv};
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  rill__buf_init(&j->problems, a);
  j->mbox_head = rill__calloc(a, (size_t)j->nranks, sizeof *j->mbox_head);
  j->mbox_tail = rill__calloc(a, (size_t)j->nranks, sizeof *j->mbox_tail);
  if (!j->mbox_head || !j->mbox_tail) {
    job_free(j);
    return rill__oom();
  }
  if (j->nranks == 1) {
    j->phase = PH_RUNNING;
    *out = j;
    return NULL;
  }
  rill_status_t st = NULL;
  if (uv_loop_init(&j->loop) != 0) {
    job_free(j);
    return rill__status(RILL_INTERNAL, "cannot make the job's event loop");
  }
  j->loop_made = true;
  uv_async_init(&j->loop, &j->async, on_async);
  uv_timer_init(&j->loop, &j->deadline);
  uv_timer_init(&j->loop, &j->retry);
  j->async.data = j->deadline.data = j->retry.data = j;
  uv_getaddrinfo_t gai;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  char port[16];
  snprintf(port, sizeof port, "%d", j->port);
  int e = uv_getaddrinfo(&j->loop, &gai, NULL, j->host, port, &hints); /* no callback: resolves now */
  if (e) {
    st = rill__status(RILL_UNAVAILABLE, "rendezvous tcp://%s:%d: cannot resolve %s: %s", j->host, j->port, j->host, uv_strerror(e));
  } else {
    memcpy(&j->addr, gai.addrinfo->ai_addr, gai.addrinfo->ai_addrlen);
    uv_freeaddrinfo(gai.addrinfo);
  }
  if (!st && j->rank == 0) {
    j->peers = rill__calloc(a, (size_t)j->nranks, sizeof *j->peers);
    if (!j->peers) st = rill__oom();
    if (!st && uv_tcp_init(&j->loop, &j->listener) == 0) {
      j->listener.data = j;
      j->listening = true;
      /* An address (or localhost) is listened on as given. A host name is
       * listened for on every interface: a machine's own name may resolve
       * to a loopback address there (Debian's 127.0.1.1) and to its
       * network address on the others. */
      struct sockaddr_storage at = j->addr;
      unsigned char probe[16];
      bool literal = uv_inet_pton(AF_INET, j->host, probe) == 0 || uv_inet_pton(AF_INET6, j->host, probe) == 0;
      if (!literal && strcmp(j->host, "localhost") != 0) {
        if (at.ss_family == AF_INET) ((struct sockaddr_in *)&at)->sin_addr.s_addr = htonl(INADDR_ANY);
        else if (at.ss_family == AF_INET6) ((struct sockaddr_in6 *)&at)->sin6_addr = in6addr_any;
      }
      e = uv_tcp_bind(&j->listener, (const struct sockaddr *)&at, 0);
      if (!e) e = uv_listen((uv_stream_t *)&j->listener, j->nranks < 1024 ? j->nranks + 16 : 1040, on_connection);
      if (e)
        st = rill__status(RILL_UNAVAILABLE, "rendezvous tcp://%s:%d: rank 0 cannot listen there: %s%s", j->host, j->port, uv_strerror(e),
                          e == UV_EADDRNOTAVAIL ? " (the host must be an address of rank 0's machine)" : "");
    }
  }
  if (st) {
    job_free(j);
    return st;
  }
  uv_timer_start(&j->deadline, on_deadline, (uint64_t)(j->setup_s * 1000.0), 0);
  if (j->rank != 0) start_connect(j);
  if (pthread_create(&j->thread, NULL, loop_main, j) != 0) {
    job_free(j);
    return rill__status(RILL_INTERNAL, "cannot start the job's thread");
  }
  j->thread_started = true;
  pthread_mutex_lock(&j->mu);
  while (j->phase == PH_SETUP) pthread_cond_wait(&j->cv, &j->mu);
  if (j->phase == PH_SETUP_FAILED) st = rill__status(j->fail_code, "%s", j->fail);
  pthread_mutex_unlock(&j->mu);
  if (st) {
    job_free(j);
    return st;
  }
  *out = j;
  return NULL;
}

rill_status_t rill_job_allgather(rill_job_t *j, const void *in, size_t n, void *out) {
  if (j->nranks == 1) {
    pthread_mutex_lock(&j->mu);
    rill_status_t st = j->failed ? rill__status(j->fail_code, "%s", j->fail) : NULL;
    pthread_mutex_unlock(&j->mu);
    if (!st && n) memmove(out, in, n);
    return st;
  }
  if (n > SIZE_MAX / (size_t)j->nranks - 8) return rill__status(RILL_INVALID_ARGUMENT, "allgather of %zu bytes a rank is too large", n);
  blob_t *b = blob_new(j->a, 8 + n);
  if (!b) return rill__oom();
  if (n) memcpy(b->data + 8, in, n);
  pthread_mutex_lock(&j->mu);
  if (j->failed) {
    rill_status_t st = rill__status(j->fail_code, "%s", j->fail);
    pthread_mutex_unlock(&j->mu);
    blob_unref(b);
    return st;
  }
  j->seq++;
  put_u64(b->data, j->seq);
  j->req_active = true;
  j->req_started = j->req_done = false;
  j->req_n = n;
  j->req_blob = b;
  j->req_out = out;
  j->req_status = NULL;
  uv_async_send(&j->async);
  while (!j->req_done) pthread_cond_wait(&j->cv, &j->mu);
  rill_status_t st = j->req_status;
  j->req_status = NULL;
  j->req_active = false;
  j->req_blob = NULL;
  j->req_out = NULL;
  pthread_mutex_unlock(&j->mu);
  blob_unref(b);
  return st;
}

/* ---- point to point ---- */
static rill_status_t peer_ok(const rill_job_t *j, int peer, const char *what) {
  if (peer < 0 || peer >= j->nranks)
    return rill__status(RILL_INVALID_ARGUMENT, "%s rank %d, out of the job's ranks 0..%d", what, peer, j->nranks - 1);
  if (peer == j->rank) return rill__status(RILL_INVALID_ARGUMENT, "%s rank %d, which is this rank", what, peer);
  return NULL;
}

static rill_status_t tr_send(void *ctx, int peer, const void *in, size_t n) {
  rill_job_t *j = ctx;
  RILL_TRY(peer_ok(j, peer, "a send to"));
  if (n > SIZE_MAX - 8) return rill__status(RILL_INVALID_ARGUMENT, "a send of %zu bytes is too large", n);
  p2p_msg_t *m = rill__calloc(j->a, 1, sizeof *m);
  blob_t *b = m ? blob_new(j->a, 8 + n) : NULL;
  if (!b) {
    rill__free(j->a, m);
    return rill__oom();
  }
  put_u32(b->data, (uint32_t)j->rank);
  put_u32(b->data + 4, (uint32_t)peer);
  if (n) memcpy(b->data + 8, in, n);
  m->blob = b;
  m->to = peer;
  pthread_mutex_lock(&j->mu);
  rill_status_t st = j->failed ? rill__status(j->fail_code, "%s", j->fail) : NULL;
  if (!st) {
    if (j->sendq_tail) j->sendq_tail->next = m;
    else j->sendq = m;
    j->sendq_tail = m;
  }
  pthread_mutex_unlock(&j->mu);
  if (st) {
    blob_unref(b);
    rill__free(j->a, m);
    return st;
  }
  uv_async_send(&j->async);
  return NULL;
}

static rill_status_t tr_recv(void *ctx, int peer, void *out, size_t cap, size_t *out_n) {
  rill_job_t *j = ctx;
  RILL_TRY(peer_ok(j, peer, "a recv from"));
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  double whole = (double)(time_t)j->coll_s;
  dl.tv_sec += (time_t)j->coll_s;
  dl.tv_nsec += (long)((j->coll_s - whole) * 1e9);
  if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
  pthread_mutex_lock(&j->mu);
  bool late = false;
  while (!j->failed && !j->mbox_head[peer] && !late) late = pthread_cond_timedwait(&j->cv, &j->mu, &dl) != 0 && !j->mbox_head[peer];
  if (late && !j->failed) {
    char msg[256];
    snprintf(msg, sizeof msg, "rank %d: a recv from rank %d got nothing within %g s (--collective-timeout)", j->rank, peer, j->coll_s);
    bool first = j->phase == PH_RUNNING;
    set_failed_locked(j, RILL_RUNTIME_ERROR, msg);
    if (first && j->nranks > 1) j->fail_send = true;
    pthread_mutex_unlock(&j->mu);
    if (first && j->nranks > 1) uv_async_send(&j->async);
    return rill__status(RILL_RUNTIME_ERROR, "%s", msg);
  }
  if (j->failed) {
    rill_status_t st = rill__status(j->fail_code, "%s", j->fail);
    pthread_mutex_unlock(&j->mu);
    return st;
  }
  p2p_msg_t *m = j->mbox_head[peer];
  size_t n = m->blob->n - 8;
  if (n > cap) {
    pthread_mutex_unlock(&j->mu);
    return rill__status(RILL_RUNTIME_ERROR, "a recv from rank %d has room for %zu bytes, and rank %d sent %zu", peer, cap, peer, n);
  }
  if (!(j->mbox_head[peer] = m->next)) j->mbox_tail[peer] = NULL;
  pthread_mutex_unlock(&j->mu);
  if (n) memcpy(out, m->blob->data + 8, n);
  *out_n = n;
  blob_unref(m->blob);
  rill__free(j->a, m);
  return NULL;
}

void rill_job_abort(rill_job_t *j, const char *why) {
  char msg[1024];
  snprintf(msg, sizeof msg, "rank %d aborted the job: %s", j->rank, why && why[0] ? why : "no reason given");
  pthread_mutex_lock(&j->mu);
  bool first = !j->failed && j->phase == PH_RUNNING;
  set_failed_locked(j, RILL_RUNTIME_ERROR, msg);
  if (first && j->nranks > 1) j->fail_send = true;
  pthread_mutex_unlock(&j->mu);
  if (first && j->nranks > 1) uv_async_send(&j->async);
}

void rill_job_destroy(rill_job_t *job) {
  if (job) job_free(job);
}

/* ---- the module's hash ---- */
rill_status_t rill_module_hash(const rill_module_t *module, uint64_t *out_hash) {
  uint8_t *bytes;
  size_t size;
  RILL_TRY(isa_write(module->m, module->a, &bytes, &size));
  *out_hash = rill__fnv1a(bytes, size, RILL_FNV_INIT);
  rill__free(module->a, bytes);
  return NULL;
}
