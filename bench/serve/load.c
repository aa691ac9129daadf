/* load.c: a closed-loop load generator for rill serve (KServe v2, binary
 * tensor data), for bench/serve/run.sh.
 *
 *   bench_serve_load HOST PORT MODEL INPUT DTYPE SHAPE CLIENTS SECONDS [WARMUP_SECONDS]
 *     e.g. bench_serve_load 127.0.0.1 8000 resnet50 x FP16 1,3,224,224 64 20 3
 *
 * CLIENTS threads each keep one connection and one request in flight: a
 * request (the input's bytes, zeros, as binary data; outputs asked for as
 * binary) is sent, its whole answer read, and the next one sent. Answers
 * in the first WARMUP_SECONDS are not counted. Prints one JSON line:
 * requests, errors (a status other than 200), requests per second and the
 * latency percentiles (ms) of the counted ones.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct client {
  pthread_t th;
  double *lat;
  size_t n, cap;
  long errors;
} client_t;

static struct sockaddr_in addr;
static char *req;
static size_t req_len;
static double t_start, t_count, t_end;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int connect_to(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads one response; its status, or -1 when the connection failed. */
static int read_response(int fd, char *buf, size_t cap) {
  size_t have = 0;
  char *end = NULL;
  while (!end) {
    ssize_t k = read(fd, buf + have, cap - have - 1);
    if (k <= 0) return -1;
    have += (size_t)k;
    buf[have] = 0;
    end = strstr(buf, "\r\n\r\n");
    if (!end && have + 1 >= cap) return -1;
  }
  int status = atoi(buf + 9);
  size_t body = 0;
  for (char *p = buf; p < end; p++)
    if ((p == buf || p[-1] == '\n') && !strncasecmp(p, "content-length:", 15)) body = strtoul(p + 15, NULL, 10);
  size_t got = have - (size_t)(end + 4 - buf);
  while (got < body) {
    ssize_t k = read(fd, buf, cap - 1 < body - got ? cap - 1 : body - got);
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return status;
}

static void *run(void *arg) {
  client_t *c = arg;
  size_t cap = 1 << 20;
  char *buf = malloc(cap);
  int fd = connect_to();
  while (fd >= 0 && now() < t_end) {
    double t0 = now();
    size_t sent = 0;
    while (sent < req_len) {
      ssize_t k = write(fd, req + sent, req_len - sent);
      if (k <= 0) break;
      sent += (size_t)k;
    }
    int status = sent == req_len ? read_response(fd, buf, cap) : -1;
    double t1 = now();
    if (status < 0) {
      close(fd);
      c->errors++;
      fd = connect_to();
      continue;
    }
    if (t0 < t_count) continue;
    if (status != 200) c->errors++;
    if (c->n == c->cap) {
      c->cap = c->cap ? c->cap * 2 : 4096;
      c->lat = realloc(c->lat, c->cap * sizeof *c->lat);
    }
    c->lat[c->n++] = (t1 - t0) * 1e3;
  }
  if (fd >= 0) close(fd);
  free(buf);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 9) {
    fprintf(stderr, "usage: bench_serve_load HOST PORT MODEL INPUT DTYPE SHAPE CLIENTS SECONDS [WARMUP_SECONDS]\n");
    return 2;
  }
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)atoi(argv[2]));
  if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1) return fprintf(stderr, "bad host %s\n", argv[1]), 2;
  const char *dtype = argv[5];
  size_t esize = !strcmp(dtype, "FP16") || !strcmp(dtype, "BF16") ? 2 : !strcmp(dtype, "FP64") || !strcmp(dtype, "INT64") ? 8
                 : !strcmp(dtype, "FP32") || !strcmp(dtype, "INT32")                    ? 4 : 1;
  size_t numel = 1;
  for (char *p = argv[6]; *p;) {
    numel *= strtoul(p, &p, 10);
    if (*p == ',') p++;
  }
  size_t nbytes = numel * esize;
  char json[1024];
  int jl = snprintf(json, sizeof json,
                    "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[%s],\"parameters\":{\"binary_data_size\":%zu}}],"
                    "\"parameters\":{\"binary_data_output\":true}}",
                    argv[4], dtype, argv[6], nbytes);
  char head[512];
  int hl = snprintf(head, sizeof head,
                    "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n"
                    "Inference-Header-Content-Length: %d\r\nContent-Length: %zu\r\n\r\n",
                    argv[3], argv[1], jl, (size_t)jl + nbytes);
  req_len = (size_t)hl + (size_t)jl + nbytes;
  req = calloc(req_len, 1);
  memcpy(req, head, (size_t)hl);
  memcpy(req + hl, json, (size_t)jl);
  int nc = atoi(argv[7]);
  double secs = atof(argv[8]), warm = argc > 9 ? atof(argv[9]) : 0;
  client_t *cs = calloc((size_t)nc, sizeof *cs);
  t_start = now();
  t_count = t_start + warm;
  t_end = t_count + secs;
  for (int i = 0; i < nc; i++) pthread_create(&cs[i].th, NULL, run, &cs[i]);
  size_t total = 0;
  long errors = 0;
  for (int i = 0; i < nc; i++) {
    pthread_join(cs[i].th, NULL);
    total += cs[i].n;
    errors += cs[i].errors;
  }
  double *all = malloc((total ? total : 1) * sizeof *all);
  size_t k = 0;
  for (int i = 0; i < nc; i++) {
    memcpy(all + k, cs[i].lat, cs[i].n * sizeof *all);
    k += cs[i].n;
    free(cs[i].lat);
  }
  qsort(all, total, sizeof *all, cmp);
#define PCT(p) (total ? all[(size_t)((double)(total - 1) * (p))] : 0)
  printf("{\"clients\": %d, \"seconds\": %.3f, \"requests\": %zu, \"errors\": %ld, \"per_second\": %.1f, "
         "\"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f}\n",
         nc, secs, total, errors, (double)total / secs, PCT(0.5), PCT(0.9), PCT(0.99), total ? all[total - 1] : 0);
  free(all);
  free(cs);
  free(req);
  return errors ? 1 : 0;
}
