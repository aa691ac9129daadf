/* cli_job.c: ranks for `rill run` and `rill bench`, and `rill launch`.
 *
 * A process is rank R of a job of N when --ranks and --rank say so, or the
 * variables a launcher sets: RANK and WORLD_SIZE (torchrun, rill launch),
 * OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI's mpirun),
 * SLURM_PROCID and SLURM_NTASKS (Slurm's srun), in that order; options win
 * over variables. Rank 0's address is --rendezvous=tcp://HOST:PORT, else
 * MASTER_ADDR and MASTER_PORT. `rill launch -n N COMMAND...` starts N local
 * processes of COMMAND with those variables set (uv_spawn), forwards
 * SIGINT and SIGTERM, and when one rank fails ends the others after a grace
 * period; its exit status is the first non-zero one.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "cli.h"

extern char **environ;

/* ---- ranks of rill run and rill bench ---- */
/* "tcp://HOST:PORT" or "tcp://[V6]:PORT" into host and port; false if malformed. */
static bool parse_address(const char *url, char *host, size_t size, int *port) {
  if (strncmp(url, "tcp://", 6) != 0) return false;
  const char *h = url + 6, *colon;
  size_t hl;
  if (*h == '[') {
    const char *close = strchr(h, ']');
    if (!close || close[1] != ':') return false;
    hl = (size_t)(close - h - 1);
    h++;
    colon = close + 1;
  } else {
    colon = strrchr(h, ':');
    if (!colon) return false;
    hl = (size_t)(colon - h);
    if (memchr(h, ':', hl) || memchr(h, '/', hl)) return false;
  }
  long long p;
  if (hl == 0 || hl >= size || !cli_parse_int(colon + 1, 1, 65535, &p)) return false;
  memcpy(host, h, hl);
  host[hl] = 0;
  *port = (int)p;
  return true;
}

/* A variable's value; unset and empty are the same. */
static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && v[0] ? v : NULL;
}

static char job_host[256];

/* A value from the command line or the environment, safe to print. */
static const char *esc(const char *v, char *buf, size_t size) { return rill_escape(v, strlen(v), buf, size); }

int cli_job_options(const cli_args_t *a, rill_job_options_t *o, bool *in_job) {
  memset(o, 0, sizeof *o);
  *in_job = false;
  /* torchrun's and rill launch's, Open MPI's mpirun's, Slurm's srun's */
  static const char *const SOURCES[][2] = {{"WORLD_SIZE", "RANK"}, {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}, {"SLURM_NTASKS", "SLURM_PROCID"}};
  char e1[96], e2[96];
  const char *ranks = cli_get(a, "--ranks"), *rank = cli_get(a, "--rank"), *ranks_from = "--ranks", *rank_from = "--rank";
  for (size_t i = 0; i < sizeof SOURCES / sizeof *SOURCES && !ranks; i++)
    if (env(SOURCES[i][0])) {
      ranks = env(SOURCES[i][0]);
      ranks_from = SOURCES[i][0];
      if (!rank) {
        rank = env(SOURCES[i][1]);
        rank_from = SOURCES[i][1];
        if (!rank)
          return cli_usage("%s is set (%s) but %s is not: which rank is this process? (give --rank=R)", ranks_from, esc(ranks, e1, sizeof e1),
                           SOURCES[i][1]);
      }
    }
  if (!ranks) {
    if (rank) return cli_usage("--rank needs --ranks=N (the job's size)");
    if (cli_get(a, "--rendezvous")) return cli_usage("--rendezvous needs --ranks=N (the job's size)");
    return 0;
  }
  if (!rank && strcmp(ranks, "1") != 0) /* --ranks given: the rank from a launcher's variables */
    for (size_t i = 0; i < sizeof SOURCES / sizeof *SOURCES && !rank; i++)
      if ((rank = env(SOURCES[i][1]))) rank_from = SOURCES[i][1];
  long long n, r = 0;
  if (!cli_parse_int(ranks, 1, 65536, &n)) return cli_usage("%s expects 1..65536 ranks, got '%s'", ranks_from, esc(ranks, e1, sizeof e1));
  if (!rank && n > 1) return cli_usage("%s=%lld needs --rank=R (this process's rank, 0..%lld)", ranks_from, n, n - 1);
  if (rank && !cli_parse_int(rank, 0, 65535, &r)) return cli_usage("%s expects a rank 0..%lld, got '%s'", rank_from, n - 1, esc(rank, e1, sizeof e1));
  if (r >= n) return cli_usage("%s=%lld is out of the job's ranks 0..%lld (%s=%lld)", rank_from, r, n - 1, ranks_from, n);
  double timeout = 300;
  const char *ts = cli_get(a, "--collective-timeout");
  if (ts) {
    char *e;
    timeout = strtod(ts, &e);
    if (*e || !(timeout > 0 && timeout <= 1e6)) return cli_usage("--collective-timeout expects seconds, more than 0 and at most 1e6, got '%s'", esc(ts, e1, sizeof e1));
  }
  o->rank = (int)r;
  o->nranks = (int)n;
  o->setup_timeout_s = o->collective_timeout_s = timeout;
  *in_job = n > 1;
  if (n == 1) return 0;
  const char *url = cli_get(a, "--rendezvous");
  char buf[400];
  if (!url) {
    const char *ma = env("MASTER_ADDR"), *mp = env("MASTER_PORT");
    if (!ma || !mp)
      return cli_usage("rank %lld of %lld (%s) needs rank 0's address: --rendezvous=tcp://HOST:PORT, or MASTER_ADDR and MASTER_PORT%s", r, n,
                       ranks_from, ma || mp ? (ma ? " (MASTER_PORT is not set)" : " (MASTER_ADDR is not set)") : "");
    snprintf(buf, sizeof buf, strchr(ma, ':') && ma[0] != '[' ? "tcp://[%s]:%s" : "tcp://%s:%s", ma, mp);
    if (!parse_address(buf, job_host, sizeof job_host, &o->port))
      return cli_usage("MASTER_ADDR=%s MASTER_PORT=%s is not an address (a host and a port 1..65535)", esc(ma, e1, sizeof e1), esc(mp, e2, sizeof e2));
  } else if (!parse_address(url, job_host, sizeof job_host, &o->port)) {
    return cli_usage("--rendezvous expects tcp://HOST:PORT (a port 1..65535; [ADDRESS] for IPv6), got '%s'", esc(url, e1, sizeof e1));
  }
  o->host = job_host;
  return 0;
}

int cli_job_join(const rill_job_options_t *jo, rill_module_t *m, rill_job_t **out) {
  *out = NULL;
  rill_job_options_t o = *jo;
  rill_status_t st = rill_module_hash(m, &o.module_hash);
  if (!st) st = rill_job_join(NULL, &o, out);
  return st ? cli_fail(st) : 0;
}

int cli_job_end(rill_job_t *job, int rc) {
  if (!job) return rc;
  if (rc) {
    char why[64];
    snprintf(why, sizeof why, "its run failed (exit %d)", rc);
    rill_job_abort(job, why);
    return rc;
  }
  /* Every rank finished: a barrier, so a rank that died or failed meanwhile is seen. */
  rill_status_t st = rill_job_allgather(job, NULL, 0, NULL);
  if (!st) return 0;
  rc = cli_fail_run(st);
  /* The job failed because of another rank: let that one end first, so
   * that a launcher's "first non-zero exit status" is the cause's (its
   * own error's status, or the signal that killed it), not ours. */
  uv_sleep(250);
  return rc;
}

const char *cli_rank_path(const char *path, int rank, int nranks, char *buf, size_t size) {
  if (nranks <= 1 && !strstr(path, "%r")) return path;
  if (!strstr(path, "%r")) return rank == 0 ? path : NULL;
  size_t at = 0;
  for (const char *p = path; *p && at + 12 < size; p++) {
    if (p[0] == '%' && p[1] == 'r') {
      at += (size_t)snprintf(buf + at, size - at, "%d", rank);
      p++;
    } else {
      buf[at++] = *p;
    }
  }
  buf[at] = 0;
  return buf;
}

/* ---- rill launch ---- */
typedef struct kid {
  uv_process_t p;
  int rank;
  bool running;
} kid_t;

typedef struct launch {
  uv_loop_t *loop;
  kid_t *kids;
  int n, running, first_rc, stage;
  bool failing;
  double grace_s;
  uv_timer_t timer;
  uv_signal_t sig[2];
} launch_t;

/* Each rank is a process group of its own (a shell wrapping rill run ends
 * with what it started). */
static void launch_signal_all(launch_t *l, int sig) {
  for (int i = 0; i < l->n; i++)
    if (l->kids[i].running) uv_kill(-l->kids[i].p.pid, sig);
}

/* Grace over: SIGTERM to the ranks still running, then (after another) SIGKILL. */
static void on_grace(uv_timer_t *t) {
  launch_t *l = t->data;
  if (!l->running) return;
  l->stage++;
  fprintf(stderr, "rill: launch: %d rank%s still running after %g s; sending %s\n", l->running, l->running == 1 ? "" : "s", l->grace_s,
          l->stage == 1 ? "SIGTERM" : "SIGKILL");
  launch_signal_all(l, l->stage == 1 ? SIGTERM : SIGKILL);
  if (l->stage == 1) uv_timer_start(&l->timer, on_grace, (uint64_t)(l->grace_s * 1000), 0);
}

static void start_failing(launch_t *l) {
  if (l->failing) return;
  l->failing = true;
  uv_timer_start(&l->timer, on_grace, (uint64_t)(l->grace_s * 1000), 0);
}

static void launch_done_maybe(launch_t *l) {
  if (l->running) return;
  uv_timer_stop(&l->timer);
  uv_close((uv_handle_t *)&l->timer, NULL);
  for (int i = 0; i < 2; i++) uv_close((uv_handle_t *)&l->sig[i], NULL);
}

static void on_exit_cb(uv_process_t *p, int64_t status, int term_signal) {
  kid_t *k = p->data;
  launch_t *l = k->p.loop->data;
  k->running = false;
  l->running--;
  int rc = term_signal ? 128 + term_signal : (int)status;
  if (rc) {
    if (!l->first_rc) l->first_rc = rc;
    if (term_signal) fprintf(stderr, "rill: launch: rank %d was killed by signal %d (%s)\n", k->rank, term_signal, strsignal(term_signal));
    else fprintf(stderr, "rill: launch: rank %d exited with status %d\n", k->rank, rc);
    if (!l->failing && l->running) fprintf(stderr, "rill: launch: the other ranks get %g s to end before SIGTERM\n", l->grace_s);
    start_failing(l);
  }
  uv_close((uv_handle_t *)p, NULL);
  launch_done_maybe(l);
}

static void on_signal(uv_signal_t *s, int signum) {
  launch_t *l = s->data;
  launch_signal_all(l, signum);
  start_failing(l);
}

/* A port on 127.0.0.1 that nobody listens on now (the kernel's choice for port 0). */
static int free_port(uv_loop_t *loop) {
  uv_tcp_t t;
  struct sockaddr_in a;
  struct sockaddr_storage got;
  int len = sizeof got, port = 0;
  uv_ip4_addr("127.0.0.1", 0, &a);
  if (uv_tcp_init(loop, &t) != 0) return 0;
  if (uv_tcp_bind(&t, (const struct sockaddr *)&a, 0) == 0 && uv_tcp_getsockname(&t, (struct sockaddr *)&got, &len) == 0)
    port = ntohs(((struct sockaddr_in *)&got)->sin_port);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  return port;
}

static const char *const JOB_VARS[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

int cli_launch(int argc, char **argv) {
  static const cli_opt_t opts[] = {
      {"-n", "N", "how many ranks (local processes) to start, 1..1024 (required)"},
      {"--port", "PORT", "the rendezvous port on 127.0.0.1, MASTER_PORT (default: a free one)"},
      {"--grace", "SECONDS", "once a rank fails, how long the others get to end before SIGTERM, and then before SIGKILL (default 5)"},
      CLI_OPT_END};
  /* launch's own options come first; COMMAND and its arguments are the rest */
  int k = 0;
  while (k < argc && argv[k][0] == '-' && strcmp(argv[k], "-") != 0 && strcmp(argv[k], "--") != 0) {
    size_t len = strcspn(argv[k], "=");
    const cli_opt_t *o = opts;
    while (o->name && (strlen(o->name) != len || strncmp(o->name, argv[k], len) != 0)) o++;
    k += o->name && o->value && !argv[k][len] ? 2 : 1;
  }
  if (k > argc) k = argc;
  static cli_args_t a;
  int rc = cli_parse(k, argv, opts, &a, "launch");
  if (rc) return rc;
  if (k < argc && !strcmp(argv[k], "--")) k++;
  if (k >= argc) return cli_usage("usage: rill launch -n N [--port=PORT] [--grace=SECONDS] COMMAND [ARGS]... (e.g. rill launch -n 4 rill run model.vmbc)");
  const char *v = cli_get(&a, "-n");
  long long n, port = 0;
  char e1[96];
  if (!v) return cli_usage("rill launch needs -n N, the number of ranks");
  if (!cli_parse_int(v, 1, 1024, &n)) return cli_usage("-n expects 1..1024 ranks, got '%s'", esc(v, e1, sizeof e1));
  if ((v = cli_get(&a, "--port")) && !cli_parse_int(v, 1, 65535, &port)) return cli_usage("--port expects 1..65535, got '%s'", esc(v, e1, sizeof e1));
  launch_t l = {.n = (int)n, .grace_s = 5};
  if ((v = cli_get(&a, "--grace"))) {
    char *e;
    l.grace_s = strtod(v, &e);
    if (*e || !(l.grace_s >= 0 && l.grace_s <= 1e5)) return cli_usage("--grace expects seconds 0..1e5, got '%s'", esc(v, e1, sizeof e1));
  }
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) return cli_error(1, "launch: cannot make an event loop");
  loop.data = &l;
  l.loop = &loop;
  if (!port && !(port = free_port(&loop))) {
    uv_loop_close(&loop);
    return cli_error(1, "launch: no free port on 127.0.0.1 (give --port)");
  }
  /* the environment: ours, less the variables each rank gets its own of */
  size_t nenv = 0;
  while (environ[nenv]) nenv++;
  char **envp = calloc(nenv + 8, sizeof *envp);
  l.kids = calloc((size_t)n, sizeof *l.kids);
  char vals[6][64];
  if (!envp || !l.kids) {
    free(envp);
    free(l.kids);
    uv_loop_close(&loop);
    return cli_error(1, "out of memory");
  }
  size_t ne = 0;
  for (size_t i = 0; i < nenv; i++) {
    bool ours = false;
    for (size_t j = 0; j < 6; j++) {
      size_t len = strlen(JOB_VARS[j]);
      ours |= !strncmp(environ[i], JOB_VARS[j], len) && environ[i][len] == '=';
    }
    if (!ours) envp[ne++] = environ[i];
  }
  uv_timer_init(&loop, &l.timer);
  l.timer.data = &l;
  int sigs[2] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; i++) {
    uv_signal_init(&loop, &l.sig[i]);
    l.sig[i].data = &l;
    uv_signal_start(&l.sig[i], on_signal, sigs[i]);
  }
  uv_stdio_container_t stdio[3];
  for (int i = 0; i < 3; i++) {
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = i;
  }
  for (int r = 0; r < n && !l.failing; r++) {
    snprintf(vals[0], sizeof vals[0], "RANK=%d", r);
    snprintf(vals[1], sizeof vals[1], "WORLD_SIZE=%lld", n);
    snprintf(vals[2], sizeof vals[2], "LOCAL_RANK=%d", r);
    snprintf(vals[3], sizeof vals[3], "LOCAL_WORLD_SIZE=%lld", n);
    snprintf(vals[4], sizeof vals[4], "MASTER_ADDR=127.0.0.1");
    snprintf(vals[5], sizeof vals[5], "MASTER_PORT=%lld", port);
    for (int j = 0; j < 6; j++) envp[ne + (size_t)j] = vals[j];
    envp[ne + 6] = NULL;
    uv_process_options_t po = {.exit_cb = on_exit_cb, .file = argv[k], .args = argv + k, .env = envp, .stdio_count = 3, .stdio = stdio,
                               .flags = UV_PROCESS_DETACHED};
    kid_t *kid = &l.kids[r];
    kid->rank = r;
    kid->p.data = kid;
    int e = uv_spawn(&loop, &kid->p, &po); /* copies args and env */
    if (e) {
      fprintf(stderr, "rill: launch: cannot start '%s' as rank %d: %s\n", esc(argv[k], e1, sizeof e1), r, uv_strerror(e));
      uv_close((uv_handle_t *)&kid->p, NULL);
      if (!l.first_rc) l.first_rc = 2;
      launch_signal_all(&l, SIGTERM);
      start_failing(&l);
      break;
    }
    kid->running = true;
    l.running++;
  }
  if (!l.running) launch_done_maybe(&l);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  free(envp);
  free(l.kids);
  return l.first_rc;
}
