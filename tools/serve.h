/* serve.h: `rill serve`, models over HTTP/1.1 with the KServe v2 inference
 * protocol (JSON tensors and the binary tensor data extension).
 *
 * A request that finds its model idle runs on its HTTP thread's own loop
 * (a lane) and is answered there, without a hop to the main loop.
 *
 * The HTTP server (h2o built on libuv, serve_http.c) runs on --http-threads
 * threads, each its own loop; they read and parse requests and post each
 * inference to the main loop, where its model's queue (serve_batch.c)
 * gathers requests that arrive together into one invocation along the
 * model's batch dimension (the first dimension of every parameter, a shape
 * variable), runs it with rill_vm_invoke_async and splits the results back
 * by rows; the answers go back to the connection's thread. serve_tensor.c
 * reads requests and writes responses; serve.c parses the command and
 * loads the models. Only the public API (rill.h) is used.
 *
 * Threads: a model's queue, runs, stages and histograms are the main
 * loop's; counters an HTTP thread may bump (a request refused at parsing)
 * and the flags it reads (draining, a model's max_batch) are atomic.
 */
#ifndef RILL_TOOLS_SERVE_H
#define RILL_TOOLS_SERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "cli.h"
#include "rill.h"

typedef struct serve_config {
  const char *host;
  int port;
  const char *device, *function;
  int64_t max_batch;        /* rows of one batched run (1: no batching) */
  int64_t batch_delay_us;   /* how long the oldest request may wait for others */
  int64_t batch_quiet_us;   /* ... or until none has arrived for this long (0: the whole delay) */
  int instances;            /* runs in flight per model */
  int copy_threads;         /* threads that help copy a batch into its staging */
  int max_queue;            /* requests waiting per model; more get 503 */
  int64_t timeout_ms;       /* a request's deadline from its arrival */
  size_t max_body;          /* bytes of a request body */
  int64_t idle_timeout_ms;  /* a connection that sends no whole request in this time is closed */
  int max_connections;
  int http_threads;         /* threads that read, parse and answer HTTP */
} serve_config_t;

/* How a dimension of a parameter relates to the shape variables. */
#define SERVE_DIM_FIXED (-1)   /* a constant size */
#define SERVE_DIM_EXPR (-2)    /* an expression of variables (checked by the VM) */

typedef struct serve_io {
  char name[96];
  rill_type_t type;              /* -1 for a size bound at call time */
  int dim_var[RILL_MAX_RANK];    /* per dimension: a variable's index, or SERVE_DIM_* */
} serve_io_t;

#define SERVE_HIST_MAX 20
typedef struct serve_hist {
  const double *bounds;   /* ascending upper bounds; +Inf implied */
  int n;
  uint64_t counts[SERVE_HIST_MAX + 1];
  double sum;
  uint64_t total;
} serve_hist_t;

typedef struct serve serve_t;
typedef struct serve_model serve_model_t;
typedef struct serve_req serve_req_t;
typedef struct serve_stage serve_stage_t;
typedef struct serve_fill serve_fill_t;
typedef struct serve_lane serve_lane_t;

/* An HTTP thread's own runs: a request alone (its model idle) runs on the
 * thread that parsed it, on that thread's loop, and is answered there. */
struct serve_lane {
  uv_loop_t *loop;
  void *running;            /* its runs in flight (serve_batch.c's batches) */
  uv_idle_t spin;           /* active while runs are in flight (where poll): the loop polls, it does not sleep */
  bool poll;                /* the device is a GPU (the cpu device's runs need the cores a poll would take) */
};
typedef struct serve_llm serve_llm_t;
typedef struct serve_greq serve_greq_t;

struct serve_model {
  serve_t *server;
  char name[128];
  rill_module_t *module;
  rill_vm_t *vm;
  int nparams, nresults;
  serve_io_t *params, *results;
  int nvars;
  int64_t *var_lo, *var_hi;
  int batch_var;            /* the variable that is every parameter's first dimension, or -1 */
  _Atomic int64_t max_batch; /* rows gathered into one run (1: none) */
  atomic_int inflight;      /* runs in flight, the main loop's and the lanes' (claimed below --instances) */
  atomic_bool broken;       /* a run failed on the device: the VM is made again once its runs end */
  rill_graph_mode_t graph;
  int64_t buckets[CLI_BUCKETS_MAX]; /* the batch variable's graph buckets (--graph-buckets, or serve.c's default), ascending */
  int nbuckets;
  bool staged;              /* inputs go through host memory the device reads (serve_batch.c), not uploads */
  bool into;                /* and results come back into it in the run's own copy (every result's type known from the rows) */
  bool no_staging;          /* the staged path failed its probe at the start */
  serve_stage_t *stages;    /* staging sets free for the next runs */
  /* Batches filled by the HTTP threads as requests arrive (serve_batch.c) */
  pthread_mutex_t fill_mu;  /* guards the fills and fill_on */
  bool fill_on;             /* requests are placed in fills */
  int nfills;
  serve_fill_t *fills, *fill_open, *fill_free;
  serve_llm_t *llm;         /* a Hugging Face folder's generation (serve_llm.c), or NULL */
  void *running;            /* runs in flight (serve_batch.c's batches) */
  serve_req_t *head, *tail; /* waiting requests, oldest first */
  atomic_int queued;
  int64_t queued_rows;
  double last_arrival;      /* when the main loop last queued a request (serve_now) */
  uv_timer_t delay_timer;
  /* metrics */
  _Atomic uint64_t requests, failures, rejected, timeouts, runs, tokens;
  _Atomic uint64_t filled;       /* requests whose HTTP thread wrote their rows into their batch's staging */
  _Atomic uint64_t lane_runs;    /* runs of a request alone on its HTTP thread */
  _Atomic uint64_t responses[6]; /* by status class: 2xx, 400, 404, 5xx (503 included), 504, other */
  serve_hist_t batch_rows, batch_reqs, latency, queue_wait, run_time;
};

/* One inference request, from its parsing to its response. */
enum { SERVE_QUEUED, SERVE_RUNNING };
struct serve_req {
  serve_req_t *next, *prev;
  serve_model_t *model;
  int state;
  void *http;               /* the HTTP side's ticket; NULL once answered or dropped */
  char *id;                 /* the request's "id", echoed; or NULL */
  int64_t rows;             /* its size along the batch dimension (1 without one) */
  rill_type_t *in_type;     /* per parameter, the request's own */
  uint8_t **in;             /* per parameter, its data: malloc'd, or in the HTTP body (binary data) */
  serve_fill_t *fill;       /* the batch whose staging holds its inputs (in[] NULL), or NULL */
  int64_t row;              /* its first row in its batch */
  bool arrived;             /* queued on the main loop (counted in its fill's) */
  serve_lane_t *lane;       /* runs alone on this HTTP thread's loop (its fill taken), or NULL */
  int nout;                 /* outputs asked for (all when the request names none) */
  int *out_idx;
  bool *out_binary;
  double t0, deadline, t_run;  /* seconds on the loop's clock */
  double timeout_s;         /* the request's own "timeout" parameter, or -1 */
};

struct serve {
  serve_config_t cfg;
  serve_model_t **models;
  int nmodels;
  uv_loop_t *loop;
  uv_check_t check;         /* gathers what one poll of the loop brought */
  uv_timer_t sweep;         /* deadlines */
  uv_idle_t wait_spin;      /* active while a batch's wait ends within a millisecond: the loop polls until it does */
  atomic_bool draining;
  const void *args;         /* the command's cli_args_t, for --graph-buckets */
  atomic_int connections;
  _Atomic uint64_t http_codes[600]; /* responses by status code */
};

/* ---- serve.c ---- */
/* A new VM for m (graph mode and buckets as at the start), the old one
 * destroyed; false (with a message) when it cannot be made. */
bool serve_model_renew(serve_model_t *m);

/* ---- serve_tensor.c ---- */
/* KServe's name of a dtype ("FP32") and back. */
const char *serve_dtype_name(rill_dtype_t d);
bool serve_dtype_from_name(const char *name, rill_dtype_t *out);
/* Parses the body of POST .../infer: the JSON header (json_len bytes, the
 * whole body without the binary extension) and binary tensor data after it.
 * On success *out is a new request (not queued); otherwise returns 400 with
 * the reason in err. */
int serve_parse_infer(serve_model_t *m, const char *body, size_t len, size_t json_len, serve_req_t **out, char *err,
                      size_t nerr, serve_lane_t *lane);
void serve_req_free(serve_req_t *r);
/* The response to r: results[k] (types rtype[k], full batch) from row `row`
 * on, r->rows rows (all of them when the model has no batch dimension).
 * The body is malloc'd; *out_json_len is the length of its JSON part (the
 * whole body when no output is binary). */
int serve_build_response(serve_model_t *m, serve_req_t *r, uint8_t *const *results, const rill_type_t *rtype, int64_t row,
                         char **out, size_t *out_len, size_t *out_json_len);
char *serve_model_metadata(const serve_model_t *m);
char *serve_repository_index(const serve_t *s);
char *serve_error_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- serve_batch.c ---- */
void serve_model_init(serve_model_t *m);
void serve_stages_free(serve_model_t *m); /* before the model's VM goes */
/* Result k's type for a run of `rows` rows, where it follows from them
 * alone (sizes past the batch dimension fixed); false otherwise. */
bool serve_result_type(const serve_model_t *m, int k, int64_t rows, rill_type_t *out);
/* The bytes of a request's inputs at one row (all of them where the model
 * does not batch); 0 where a size other than the batch dimension is not fixed. */
size_t serve_request_bytes(const serve_model_t *m);
/* One run of `rows` rows of zeros through the staged path, against an
 * uploaded run's results; false with the reason where they fail or differ. */
bool serve_staged_probe(serve_model_t *m, int64_t rows, char *why, size_t nwhy);
int serve_start(serve_t *s);      /* the check and sweep handles; 0 or a libuv error */
/* On an HTTP thread, once r's sizes are known: room for its rows in the
 * batch being filled (dst[p]: where input p's rows go), or false (its
 * inputs go in its own memory, copied into the batch by the main loop). */
bool serve_fill_reserve(serve_model_t *m, serve_req_t *r, uint8_t **dst, serve_lane_t *lane);
/* Runs r (r->lane set by serve_fill_reserve) on its lane's loop. */
void serve_lane_run(serve_req_t *r);
/* 504s for the lane's runs past their requests' deadlines. */
void serve_lane_sweep(serve_lane_t *lane);
/* On the main loop: a lane's run ended (queued requests may start, a drain may end). */
void serve_kick(serve_t *s);
/* The rows were written (ok), or not: then they are zeroed, and r goes. */
void serve_fill_placed(serve_req_t *r, bool ok);
/* r leaves its fill without running in it (serve_req_free). */
void serve_fill_leave(serve_req_t *r);
void serve_stop(serve_t *s);      /* closes them */
/* Queues r (taking it) and returns 0, or returns 503 (queue full, shutting
 * down) with the reason in err, r untouched. */
int serve_submit(serve_t *s, serve_req_t *r, char *err, size_t nerr);
bool serve_idle(const serve_t *s); /* no request waiting or running */
char *serve_metrics_text(serve_t *s, size_t *out_len);
double serve_now(const serve_t *s);
void serve_hist_add(serve_hist_t *h, double v);

/* ---- serve_llm.c: POST .../generate and .../generate_stream ---- */
/* The model at DIR (args: the command's cli_args_t); an exit code. */
int serve_llm_load(serve_model_t *m, const char *dir, const void *args);
void serve_llm_free(serve_model_t *m);
int serve_llm_start(serve_model_t *m); /* its async handle on the loop; 0 or a libuv error */
void serve_llm_stop(serve_model_t *m);
/* Parses and queues a generation answered through `http`; 0 (then *out is
 * the request, its HTTP side's to abandon; serve_llm_kick starts it), or
 * 400/503 with err. */
int serve_llm_request(serve_model_t *m, void *http, bool stream, const char *body, size_t len, serve_greq_t **out, char *err, size_t nerr);
void serve_llm_abandon(serve_greq_t *r);
void serve_llm_kick(serve_model_t *m); /* starts what waits where an instance is free */
void serve_llm_sweep(serve_model_t *m, double now);
bool serve_llm_idle(const serve_model_t *m);
void serve_llm_memory(serve_model_t *m, rill_memory_info_t *out);
char *serve_llm_metadata(const serve_model_t *m);

/* ---- serve_http.c (h2o) ---- */
/* A generation's answer: one response (body malloc'd, taken), or a stream
 * of server-sent events begun with stream_begin (each write's data
 * malloc'd and taken; the final one ends the response). */
void serve_http_reply_to(void *http, int status, char *body, size_t len, int retry_after);
void serve_http_stream_begin(void *http);
void serve_http_stream_write(void *http, char *data, size_t len, bool final);
/* Answers r's HTTP request (body malloc'd, taken); retry_after > 0 adds
 * Retry-After. Clears r->http. Called on the main loop: the answer is
 * written by the connection's thread. */
void serve_http_reply(serve_req_t *r, int status, char *body, size_t len, size_t json_len, int retry_after);
/* Whether the client of a request's ticket (r->http) went away. */
bool serve_http_gone(const void *http);
/* Lets a ticket go unanswered (its client gone). */
void serve_http_drop(void *http);
/* Wakes the main loop (serve_kick), from an HTTP thread. */
void serve_http_kick(void);
/* Requests each HTTP thread has read, into counts; how many threads. */
int serve_http_thread_requests(uint64_t *counts, int max);
/* Serves until SIGTERM or SIGINT has drained the requests; an exit code. */
int serve_http_run(serve_t *s);
/* Called when the last request of a drain is answered. */
void serve_drained(serve_t *s);

#endif
