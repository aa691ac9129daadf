/* test_job.c: ranks meeting at a loopback rendezvous, and the transport
 * between them (vm/job.c): allgather of several sizes, disagreeing ranks,
 * ranks that never arrive, abort, a rank that stops answering, one that
 * leaves and one killed with SIGKILL; point to point between every pair
 * (through rank 0), in order, and its errors. Ranks are threads of this process
 * (each with its own job), or forked processes where one must die. Every
 * case is bounded by short timeouts. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "helpers.h"
#include "vm/job.h"

#define MAXR 8

/* A port nobody listens on now (the kernel's choice for port 0). */
static int free_port(void) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_tcp_t t;
  uv_tcp_init(&loop, &t);
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", 0, &a);
  ck_assert_int_eq(uv_tcp_bind(&t, (const struct sockaddr *)&a, 0), 0);
  struct sockaddr_storage got;
  int len = sizeof got;
  ck_assert_int_eq(uv_tcp_getsockname(&t, (struct sockaddr *)&got, &len), 0);
  int port = ntohs(((struct sockaddr_in *)&got)->sin_port);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return port;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct rank_arg rank_arg_t;
typedef void (*rank_body_t)(rank_arg_t *r);
struct rank_arg {
  rill_job_options_t o;
  rank_body_t body;
  rill_job_t *job;
  rill_code_t join_code;
  char join_msg[1024];
  rill_code_t code;      /* of the body's last failing call */
  char msg[1024];
  double seconds;        /* the body's time */
  int step;              /* how far the body got */
  int delay_ms;          /* before joining */
};

static void take(rill_status_t st, rill_code_t *code, char *msg) {
  *code = rill_status_code(st);
  snprintf(msg, 1024, "%s", rill_status_message(st));
  rill_status_free(st);
}

static void *rank_main(void *p) {
  rank_arg_t *r = p;
  if (r->delay_ms) usleep((useconds_t)r->delay_ms * 1000);
  rill_status_t st = rill_job_join(NULL, &r->o, &r->job);
  if (st) {
    take(st, &r->join_code, r->join_msg);
    return NULL;
  }
  double t0 = now_s();
  if (r->body) r->body(r);
  r->seconds = now_s() - t0;
  rill_job_destroy(r->job);
  r->job = NULL;
  return NULL;
}

/* Runs n ranks as threads; options from base, rank i's hash and size from the arrays (NULL: base's). */
static void run_ranks(rank_arg_t *args, int n, const rill_job_options_t *base, rank_body_t body) {
  pthread_t th[MAXR];
  for (int i = 0; i < n; i++) {
    rank_arg_t *r = &args[i];
    if (!r->o.nranks) {
      r->o = *base;
      r->o.rank = i;
    }
    r->body = body;
    ck_assert_int_eq(pthread_create(&th[i], NULL, rank_main, r), 0);
  }
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static rill_job_options_t opts(int nranks, double setup, double coll) {
  return (rill_job_options_t){.nranks = nranks, .host = "127.0.0.1", .port = free_port(), .module_hash = 0x1234abcd,
                              .setup_timeout_s = setup, .collective_timeout_s = coll};
}

static uint8_t byte_of(int rank, size_t i, size_t round) { return (uint8_t)(rank * 31 + i * 7 + round * 13); }

/* Rounds of allgather at sizes 0 to 1 MiB: every rank sees every rank's bytes in rank order. */
static void body_sizes(rank_arg_t *r) {
  static const size_t sizes[] = {0, 1, 7, 4096, 65537, 1 << 20, 3, 0, 16};
  int nr = rill_job_ranks(r->job), me = rill_job_rank(r->job);
  for (size_t k = 0; k < RILL_ARRAY_LEN(sizes); k++) {
    size_t n = sizes[k];
    uint8_t *in = malloc(n + 1), *out = malloc(n * (size_t)nr + 1);
    for (size_t i = 0; i < n; i++) in[i] = byte_of(me, i, k);
    rill_status_t st = rill_job_allgather(r->job, in, n, out);
    if (st) {
      take(st, &r->code, r->msg);
      free(in);
      free(out);
      return;
    }
    for (int q = 0; q < nr; q++)
      for (size_t i = 0; i < n; i++)
        if (out[(size_t)q * n + i] != byte_of(q, i, k)) {
          snprintf(r->msg, sizeof r->msg, "size %zu: rank %d's byte %zu wrong", n, q, i);
          free(in);
          free(out);
          return;
        }
    free(in);
    free(out);
    r->step = (int)k + 1;
  }
  /* many small ones in a row: the sequence numbers stay in step */
  for (int k = 0; k < 200; k++) {
    int64_t v = me * 1000 + k, all[MAXR];
    rill_status_t st = rill_job_allgather(r->job, &v, sizeof v, all);
    if (st) {
      take(st, &r->code, r->msg);
      return;
    }
    for (int q = 0; q < nr; q++)
      if (all[q] != q * 1000 + k) {
        snprintf(r->msg, sizeof r->msg, "round %d: rank %d gave %lld", k, q, (long long)all[q]);
        return;
      }
  }
  r->step = 100;
}

/* Every rank went through body_sizes. */
static void expect_done(const rank_arg_t *args, int n) {
  for (int i = 0; i < n; i++) ck_assert_msg(args[i].step == 100, "rank %d stopped at %d: %s %s", i, args[i].step, args[i].join_msg, args[i].msg);
}

START_TEST(allgather_sizes) {
  for (int n = 2; n <= 4; n += 2) {
    rank_arg_t args[MAXR] = {0};
    rill_job_options_t o = opts(n, 10, 10);
    run_ranks(args, n, &o, body_sizes);
    expect_done(args, n);
  }
}
END_TEST

static void expect_failed(const rank_arg_t *args, int i, const char *needle, double max_s);

/* Point to point: every rank sends rounds of messages (0 B to 1 MiB) to
 * every other one (through rank 0 where neither end is rank 0), then takes
 * them from each peer in the order sent; then a barrier. */
static void body_p2p(rank_arg_t *r) {
  static const size_t sizes[] = {0, 1, 4097, 1 << 20, 9, 64};
  const vm_transport_t *t = vm_job_transport(r->job);
  int nr = t->nranks, me = t->rank;
  uint8_t *buf = malloc((1 << 20) + 16);
  for (size_t k = 0; k < RILL_ARRAY_LEN(sizes); k++)
    for (int q = 0; q < nr; q++) {
      if (q == me) continue;
      for (size_t i = 0; i < sizes[k]; i++) buf[i] = byte_of(me * 8 + q, i, k);
      rill_status_t st = t->send(t->ctx, q, buf, sizes[k]);
      if (st) {
        take(st, &r->code, r->msg);
        free(buf);
        return;
      }
    }
  for (int q0 = 1; q0 < nr; q0++) {
    int q = (me + q0) % nr; /* each rank takes from its peers in another order */
    for (size_t k = 0; k < RILL_ARRAY_LEN(sizes); k++) {
      size_t got = 0;
      rill_status_t st = t->recv(t->ctx, q, buf, (1 << 20) + 16, &got);
      if (st) {
        take(st, &r->code, r->msg);
        free(buf);
        return;
      }
      bool ok = got == sizes[k];
      for (size_t i = 0; ok && i < got; i++) ok = buf[i] == byte_of(q * 8 + me, i, k);
      if (!ok) {
        snprintf(r->msg, sizeof r->msg, "message %zu from rank %d: %zu bytes, not the ones sent", k, q, got);
        free(buf);
        return;
      }
    }
  }
  free(buf);
  rill_status_t st = rill_job_allgather(r->job, NULL, 0, NULL);
  if (st) take(st, &r->code, r->msg);
  else r->step = 100;
}

START_TEST(p2p_every_pair) {
  for (int n = 2; n <= 4; n += 2) {
    rank_arg_t args[MAXR] = {0};
    rill_job_options_t o = opts(n, 10, 10);
    run_ranks(args, n, &o, body_p2p);
    expect_done(args, n);
  }
}
END_TEST

/* A peer out of range or itself, a message larger than the room for it, a
 * recv nothing answers (rank 1, after 0.5 s: the others learn), messages
 * never taken (freed with the job). */
static void body_p2p_errors(rank_arg_t *r) {
  const vm_transport_t *t = vm_job_transport(r->job);
  int me = t->rank;
  uint8_t b[64] = {0};
  size_t got;
  rill_status_t st = t->send(t->ctx, me, b, 4);
  if (!st || !strstr(rill_status_message(st), "which is this rank")) snprintf(r->msg, sizeof r->msg, "self: %s", st ? rill_status_message(st) : "sent");
  rill_status_free(st);
  st = t->recv(t->ctx, 3, b, sizeof b, &got);
  if (!st || !strstr(rill_status_message(st), "a recv from rank 3, out of the job's ranks 0..2"))
    snprintf(r->msg, sizeof r->msg, "range: %s", st ? rill_status_message(st) : "received");
  rill_status_free(st);
  if (r->msg[0]) return;
  if (me == 0) {
    ck_assert(!t->send(t->ctx, 2, b, 64));
    ck_assert(!t->send(t->ctx, 2, b, 8)); /* never taken */
  }
  if (me == 2) {
    st = t->recv(t->ctx, 0, b, 16, &got);
    if (!st || !strstr(rill_status_message(st), "has room for 16 bytes, and rank 0 sent 64"))
      snprintf(r->msg, sizeof r->msg, "room: %s", st ? rill_status_message(st) : "received");
    rill_status_free(st);
    if (r->msg[0]) return;
  }
  if (me != 1) usleep(300 * 1000); /* (their own allgather's timeout after rank 1's) */
  st = me == 1 ? t->recv(t->ctx, 0, b, sizeof b, &got) : rill_job_allgather(r->job, NULL, 0, NULL);
  if (st) take(st, &r->code, r->msg);
  r->step = 1;
}

START_TEST(p2p_errors) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(3, 10, 0.5);
  run_ranks(args, 3, &o, body_p2p_errors);
  for (int i = 0; i < 3; i++) expect_failed(args, i, "rank 1: a recv from rank 0 got nothing within 0.5 s", 0.5 + 6);
}
END_TEST

START_TEST(one_rank_needs_no_network) {
  rill_job_options_t o = {.nranks = 1};
  rill_job_t *j;
  ck_assert_ptr_null(rill_job_join(NULL, &o, &j));
  ck_assert_int_eq(rill_job_rank(j), 0);
  ck_assert_int_eq(rill_job_ranks(j), 1);
  const vm_transport_t *t = vm_job_transport(j);
  ck_assert_int_eq(t->nranks, 1);
  int in = 42, out = 0;
  ck_assert_ptr_null(t->allgather(t->ctx, &in, sizeof in, &out));
  ck_assert_int_eq(out, 42);
  t->abort(t->ctx, "stop");
  rill_status_t st = rill_job_allgather(j, &in, sizeof in, &out);
  ck_assert_ptr_nonnull(st);
  ck_assert_msg(strstr(rill_status_message(st), "rank 0 aborted the job: stop"), "%s", rill_status_message(st));
  rill_status_free(st);
  rill_job_destroy(j);
}
END_TEST

START_TEST(bad_options) {
  rill_job_t *j = NULL;
  rill_job_options_t o = {.nranks = 0};
  rill_status_t st = rill_job_join(NULL, &o, &j);
  ck_assert_int_eq(rill_status_code(st), RILL_INVALID_ARGUMENT);
  rill_status_free(st);
  o = (rill_job_options_t){.nranks = 2, .rank = 2, .host = "127.0.0.1", .port = 5};
  expect_escaped(rill_job_join(NULL, &o, &j), "rank 2 is out of the job's ranks 0..1");
  o = (rill_job_options_t){.nranks = 2, .rank = 1, .host = "127.0.0.1", .port = 0};
  expect_escaped(rill_job_join(NULL, &o, &j), "port must be 1..65535");
  o = (rill_job_options_t){.nranks = 2, .rank = 0, .host = "no-such-host.invalid", .port = 4000, .setup_timeout_s = 1};
  st = rill_job_join(NULL, &o, &j);
  ck_assert_int_eq(rill_status_code(st), RILL_UNAVAILABLE);
  expect_escaped(st, "cannot resolve no-such-host.invalid");
  /* rank 0 must listen on an address of its own machine */
  o = (rill_job_options_t){.nranks = 2, .rank = 0, .host = "192.0.2.1", .port = 4000, .setup_timeout_s = 1};
  expect_escaped(rill_job_join(NULL, &o, &j), "rank 0 cannot listen there");
  ck_assert_ptr_null(j);
}
END_TEST

/* Ranks that disagree fail at set-up, every one with the same message naming them. */
static void expect_refused(rank_arg_t *args, int n, const char *needle) {
  for (int i = 0; i < n; i++) {
    ck_assert_msg(args[i].join_code == RILL_INVALID_ARGUMENT, "rank %d: code %d: %s", i, args[i].join_code, args[i].join_msg);
    ck_assert_msg(strstr(args[i].join_msg, needle), "rank %d: no '%s' in: %s", i, needle, args[i].join_msg);
    ck_assert_msg(strstr(args[i].join_msg, "the job's ranks do not agree"), "rank %d: %s", i, args[i].join_msg);
  }
}

START_TEST(different_modules_refused) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(3, 10, 10);
  args[2].o = o;
  args[2].o.rank = 2;
  args[2].o.module_hash = 0x999;
  double t0 = now_s();
  run_ranks(args, 3, &o, NULL);
  ck_assert_double_lt(now_s() - t0, 8); /* not the timeout (10 s): everyone arrived */
  expect_refused(args, 3, "rank 2 runs a different module (hash 0000000000000999) from rank 0 (hash 000000001234abcd)");
}
END_TEST

START_TEST(job_sizes_and_ranks_refused) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(3, 10, 10);
  args[1].o = o;
  args[1].o.nranks = 4;
  args[1].o.rank = 1;
  args[2].o = o;
  args[2].o.rank = 1; /* rank 1 twice */
  run_ranks(args, 3, &o, NULL);
  expect_refused(args, 3, "rank 1 says the job has 4 ranks, rank 0 says 3");
  expect_refused(args, 3, "two processes say they are rank 1");
}
END_TEST

START_TEST(missing_rank_named) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(4, 1, 10);
  double t0 = now_s();
  run_ranks(args, 2, &o, NULL); /* ranks 2 and 3 never come */
  double took = now_s() - t0;
  ck_assert_double_lt(took, 1 + 6); /* 1 s and rank 1's grace, with room for a loaded machine */
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(args[i].join_code == RILL_UNAVAILABLE, "rank %d: %s", i, args[i].join_msg);
    ck_assert_msg(strstr(args[i].join_msg, "ranks 2, 3 did not arrive"), "rank %d: %s", i, args[i].join_msg);
    ck_assert_msg(strstr(args[i].join_msg, "did not complete within 1 s"), "rank %d: %s", i, args[i].join_msg);
  }
}
END_TEST

START_TEST(rank_0_missing_named) {
  rank_arg_t args[MAXR] = {0};
  args[1].o = opts(2, 0.5, 10);
  args[1].o.rank = 1;
  double t0 = now_s();
  rank_main(&args[1]);
  ck_assert_double_lt(now_s() - t0, 5);
  ck_assert_int_eq(args[1].join_code, RILL_UNAVAILABLE);
  ck_assert_msg(strstr(args[1].join_msg, "rank 0 did not arrive (connecting: connection refused)"), "%s", args[1].join_msg);
}
END_TEST

/* Rank 0 starting late: the others keep trying until it comes. */
START_TEST(rank_0_may_come_late) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(3, 10, 10);
  args[0].delay_ms = 700;
  run_ranks(args, 3, &o, body_sizes);
  expect_done(args, 3);
}
END_TEST

/* Rank 1 aborts while the others wait in an allgather: they fail at once, naming it. */
static void body_abort(rank_arg_t *r) {
  int me = rill_job_rank(r->job), x = me, all[MAXR];
  if (me == 1) {
    usleep(200 * 1000);
    rill_job_abort(r->job, "out of patience");
    rill_status_t st = rill_job_allgather(r->job, &x, sizeof x, all);
    if (st) take(st, &r->code, r->msg);
    return;
  }
  rill_status_t st = rill_job_allgather(r->job, &x, sizeof x, all);
  if (st) take(st, &r->code, r->msg);
  r->step = 1;
  st = rill_job_allgather(r->job, &x, sizeof x, all); /* the next call fails too */
  if (st) {
    r->step = 2;
    rill_status_free(st);
  }
}

/* Rank i's body failed at run time with `needle`, within max_s seconds. */
static void expect_failed(const rank_arg_t *args, int i, const char *needle, double max_s) {
  ck_assert_msg(args[i].code == RILL_RUNTIME_ERROR, "rank %d: code %d: %s", i, args[i].code, args[i].msg);
  ck_assert_msg(strstr(args[i].msg, needle), "rank %d: no '%s' in: %s", i, needle, args[i].msg);
  ck_assert_double_lt(args[i].seconds, max_s);
}

START_TEST(abort_reaches_every_rank) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(4, 10, 30);
  run_ranks(args, 4, &o, body_abort);
  for (int i = 0; i < 4; i++) {
    expect_failed(args, i, "rank 1 aborted the job: out of patience", 8); /* the timeout is 30 s */
    if (i != 1) ck_assert_int_eq(args[i].step, 2);
  }
}
END_TEST

/* Rank 2 joins but never calls: the others' call fails after the collective timeout, naming it. */
static void body_silent(rank_arg_t *r) {
  int me = rill_job_rank(r->job), x = me, all[MAXR];
  if (me == 2) {
    usleep(3500 * 1000); /* alive, connected, not answering */
    return;
  }
  rill_status_t st = rill_job_allgather(r->job, &x, sizeof x, all);
  if (st) take(st, &r->code, r->msg);
  r->step = 1;
}

START_TEST(silent_rank_times_out) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(3, 10, 0.5);
  run_ranks(args, 3, &o, body_silent);
  for (int i = 0; i < 2; i++) expect_failed(args, i, "allgather 1: rank 2 did not answer within 0.5 s", 0.5 + 6);
}
END_TEST

/* Sizes that differ are the program's error, named. */
static void body_sizes_differ(rank_arg_t *r) {
  int me = rill_job_rank(r->job);
  uint8_t in[8] = {0}, out[64];
  rill_status_t st = rill_job_allgather(r->job, in, me == 1 ? 8 : 4, out);
  if (st) take(st, &r->code, r->msg);
}

START_TEST(sizes_differ) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(3, 10, 10);
  run_ranks(args, 3, &o, body_sizes_differ);
  for (int i = 0; i < 3; i++) expect_failed(args, i, "allgather 1: rank 1 gave 8 bytes, rank 0 gave 4", 8);
}
END_TEST

/* A rank that finished (left) is not one that died; a later call needing it says so. */
static void body_leave(rank_arg_t *r) {
  int me = rill_job_rank(r->job), x = me, all[MAXR];
  rill_status_t st = rill_job_allgather(r->job, &x, sizeof x, all);
  if (st) {
    take(st, &r->code, r->msg);
    return;
  }
  r->step = 1;
  if (me == 2) return; /* leaves */
  usleep(300 * 1000);
  st = rill_job_allgather(r->job, &x, sizeof x, all);
  if (st) take(st, &r->code, r->msg);
}

START_TEST(left_rank_named) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(3, 10, 10);
  run_ranks(args, 3, &o, body_leave);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(args[i].step, 1);
    expect_failed(args, i, "allgather 2: rank 2 left the job (it finished) before taking part", 8);
  }
  ck_assert_int_eq(args[2].step, 1);
  ck_assert(!args[2].msg[0]);
}
END_TEST

/* A rank killed with SIGKILL: forked ranks; the others' next call fails naming it. */
START_TEST(killed_rank_named) {
  rill_job_options_t o = opts(3, 10, 20);
  pid_t kids[3] = {0};
  int pipes[3][2];
  for (int i = 1; i < 3; i++) {
    ck_assert_int_eq(pipe(pipes[i]), 0);
    kids[i] = fork();
    ck_assert_int_ge(kids[i], 0);
    if (kids[i] == 0) {
      o.rank = i;
      rill_job_t *j;
      rill_status_t st = rill_job_join(NULL, &o, &j);
      char msg[1024] = "joined";
      if (!st) {
        int x = i, all[3];
        st = rill_job_allgather(j, &x, sizeof x, all);
        if (!st && i == 2) raise(SIGKILL);
        if (!st) {
          double t0 = now_s();
          st = rill_job_allgather(j, &x, sizeof x, all);
          if (now_s() - t0 > 8) snprintf(msg, sizeof msg, "too slow");
        }
      }
      if (st && strcmp(msg, "too slow") != 0) snprintf(msg, sizeof msg, "%s", rill_status_message(st));
      if (write(pipes[i][1], msg, strlen(msg)) < 0) _exit(3);
      _exit(0);
    }
    close(pipes[i][1]);
  }
  o.rank = 0;
  rill_job_t *j;
  ck_assert_ptr_null(rill_job_join(NULL, &o, &j));
  int x = 0, all[3];
  ck_assert_ptr_null(rill_job_allgather(j, &x, sizeof x, all));
  ck_assert_int_eq(all[1], 1);
  ck_assert_int_eq(all[2], 2);
  double t0 = now_s();
  rill_status_t st = rill_job_allgather(j, &x, sizeof x, all);
  ck_assert_double_lt(now_s() - t0, 8); /* the timeout is 20 s */
  ck_assert_int_eq(rill_status_code(st), RILL_RUNTIME_ERROR);
  ck_assert_msg(strstr(rill_status_message(st), "rank 2 closed its connection without leaving the job (its process died or was killed"), "%s",
                rill_status_message(st));
  rill_status_free(st);
  rill_job_destroy(j);
  int status;
  waitpid(kids[2], &status, 0);
  ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  waitpid(kids[1], &status, 0);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char msg[1024] = {0};
  ck_assert_int_gt(read(pipes[1][0], msg, sizeof msg - 1), 0);
  ck_assert_msg(strstr(msg, "rank 2 closed its connection without leaving the job"), "rank 1: %s", msg);
}
END_TEST

/* A stranger connecting to rank 0 (not a rill rank) does not count as a rank. */
static void on_stranger_write(uv_write_t *w, int status) { uv_close((uv_handle_t *)w->handle, NULL); }
static void on_stranger(uv_connect_t *c, int status) {
  if (status < 0) {
    uv_close((uv_handle_t *)c->handle, NULL);
    return;
  }
  static char junk[] = "GET / HTTP/1.0\r\n\r\n";
  static uv_write_t w;
  uv_buf_t b = uv_buf_init(junk, sizeof junk - 1);
  uv_write(&w, c->handle, &b, 1, on_stranger_write);
}
static void *stranger(void *p) {
  int port = *(int *)p;
  usleep(100 * 1000);
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_tcp_t t;
  uv_tcp_init(&loop, &t);
  struct sockaddr_in a;
  uv_ip4_addr("127.0.0.1", port, &a);
  uv_connect_t c;
  uv_tcp_connect(&c, &t, (const struct sockaddr *)&a, on_stranger);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return NULL;
}
START_TEST(stranger_ignored) {
  rank_arg_t args[MAXR] = {0};
  rill_job_options_t o = opts(2, 10, 10);
  args[1].delay_ms = 400; /* the stranger comes first */
  pthread_t th;
  pthread_create(&th, NULL, stranger, &o.port);
  run_ranks(args, 2, &o, body_sizes);
  pthread_join(th, NULL);
  expect_done(args, 2);
}
END_TEST

START_TEST(module_hash_is_the_modules) {
  const char *src = "func @main(%x: f32[4]) -> f32[4] {\n  %y = relu(%x)\n  return %y\n}\n";
  const char *other = "func @main(%x: f32[4]) -> f32[4] {\n  %y = neg(%x)\n  return %y\n}\n";
  uint64_t h[3];
  const char *srcs[3] = {src, src, other};
  for (int i = 0; i < 3; i++) {
    uint8_t *b;
    size_t n;
    ck_assert_ptr_null(asm_text(srcs[i], &b, &n));
    rill_module_t *m;
    ck_assert_ptr_null(rill_module_load(NULL, b, n, NULL, &m));
    ck_assert_ptr_null(rill_module_hash(m, &h[i]));
    rill_module_release(m);
    free(b);
  }
  ck_assert(h[0] == h[1]);
  ck_assert(h[0] != h[2]);
}
END_TEST

int main(void) {
  Suite *s = suite_create("job");
  add_test_case(s, allgather_sizes, 60);
  add_test_case(s, one_rank_needs_no_network, 10);
  add_test_case(s, bad_options, 20);
  add_test_case(s, different_modules_refused, 20);
  add_test_case(s, job_sizes_and_ranks_refused, 20);
  add_test_case(s, missing_rank_named, 20);
  add_test_case(s, rank_0_missing_named, 20);
  add_test_case(s, rank_0_may_come_late, 20);
  add_test_case(s, abort_reaches_every_rank, 20);
  add_test_case(s, silent_rank_times_out, 20);
  add_test_case(s, sizes_differ, 20);
  add_test_case(s, left_rank_named, 20);
  add_test_case(s, killed_rank_named, 30);
  add_test_case(s, stranger_ignored, 20);
  add_test_case(s, module_hash_is_the_modules, 20);
  add_test_case(s, p2p_every_pair, 60);
  add_test_case(s, p2p_errors, 20);
  return run_suite(s);
}
