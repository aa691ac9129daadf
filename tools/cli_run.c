/* cli_run.c: `rill run` and `rill bench`: tensor specs, printing, checking. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "onnx.h"
#include "vm/job.h"
#include "vm/vm.h"

/* ---- files and modules ---- */
static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

bool cli_is_source(const char *path) { return ends_with(path, ".vmasm") || ends_with(path, ".onnx"); }

/* --shape NAME=N options (for .onnx inputs with symbolic dimensions) */
static onnx_options_t cli_onnx_options;

int cli_take_shapes(const cli_args_t *a) {
  for (int i = 0; i < a->nopts; i++)
    if (!strcmp(a->opts[i].name, "--shape")) {
      char why[256];
      if (!onnx_options_add_shape(&cli_onnx_options, a->opts[i].value, why, sizeof why)) return cli_usage("%s", why);
    }
  return 0;
}

rill_status_t cli_assemble_onnx(const char *path, const rill_asm_options_t *o, uint8_t **out, size_t *out_size) {
  return onnx_assemble(path, &cli_onnx_options, o, out, out_size);
}

rill_status_t cli_load_module(const char *path, const rill_asm_options_t *o, rill_module_t **out) {
  if (ends_with(path, ".onnx")) return onnx_load_module(path, &cli_onnx_options, o, out);
  if (ends_with(path, ".vmasm")) {
    uint8_t *bytes;
    size_t size;
    rill_status_t st = rill_assemble_file(NULL, path, o, &bytes, &size);
    if (st) return st;
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else snprintf(dir, sizeof dir, ".");
    st = rill_module_load(NULL, bytes, size, dir, out);
    free(bytes);
    return st;
  }
  rill_status_t st = rill_module_load_file(NULL, path, out);
  /* An assembled module keeps the mode it was assembled in. */
  rill_precision_t p = st ? RILL_PRECISION_EXACT : rill_module_precision(*out);
  if (!st && o && o->precision != RILL_PRECISION_EXACT && o->precision != p) {
    char b[256];
    st = rill_status_new(RILL_INVALID_ARGUMENT, "%s was assembled with --precision=%s; --precision=%s applies when assembling .vmasm or .onnx",
                         rill_escape(path, strlen(path), b, sizeof b), rill_precision_name(p), rill_precision_name(o->precision));
    rill_module_release(*out);
    *out = NULL;
  }
  return st;
}

int cli_write_file(const char *path, const void *data, size_t size) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return cli_usage("%s: cannot write: %s", path, strerror(errno));
  bool ok = fwrite(data, 1, size, f) == size;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return cli_usage("%s: cannot write: %s", path, strerror(e));
  }
  return 0;
}

/* ---- tensor specs ---- */
typedef cli_tensor_t host_tensor_t;

static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static bool parse_type(const char *s, const char **end, rill_type_t *t) {
  const char *b = strchr(s, '[');
  if (!b || !rill_dtype_from_name(s, (size_t)(b - s), &t->dtype)) return false;
  t->rank = 0;
  const char *p = b + 1;
  if (*p == ']') { *end = p + 1; return true; }
  for (;;) {
    char *e;
    errno = 0;
    long long v = strtoll(p, &e, 10);
    if (e == p || errno || v < 0 || v > (1ll << 40) || t->rank == RILL_MAX_RANK) return false;
    t->dims[t->rank++] = v;
    p = e;
    if (*p == ',') { p++; continue; }
    if (*p != ']') return false;
    *end = p + 1;
    return true;
  }
}

static size_t type_bytes(const rill_type_t *t, size_t *numel) {
  size_t n = rill_type_numel(t);
  if (numel) *numel = n;
  return n * rill_dtype_size(t->dtype);
}


/* The machine's physical memory in bytes. */
static size_t host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 && (size_t)pages <= SIZE_MAX / (size_t)page ? (size_t)pages * (size_t)page : SIZE_MAX;
}

/* Parses @file.npy or TYPE=VALUES into a host tensor; returns an exit code. */
int cli_parse_spec(const char *what, const char *spec, host_tensor_t *out) {
  memset(out, 0, sizeof *out);
  if (spec[0] == '@') {
    rill_status_t st = rill_npy_read(NULL, spec + 1, &out->type, &out->data, &out->nbytes);
    if (st) return cli_fail(st);
    return 0;
  }
  const char *p;
  if (!parse_type(spec, &p, &out->type) || *p != '=')
    return cli_usage("%s '%.80s': expected @FILE.npy or TYPE=VALUES such as f32[2,2]=1 2 3 4", what, spec);
  p++;
  size_t numel, nbytes = type_bytes(&out->type, &numel);
  if (numel && nbytes / numel != rill_dtype_size(out->type.dtype)) return cli_usage("%s: tensor too large", what);
  char tb[160];
  rill_type_format(&out->type, tb, sizeof tb);
  /* Refused at once when more than the machine has: with overcommit, calloc
   * could succeed and filling the buffer then fail or swap. */
  if (nbytes > host_memory())
    return cli_error(1, "%s: out of memory: cannot allocate %zu bytes (%.1f GiB) on the host for %s: more than the machine's memory (%zu bytes)",
                     what, nbytes, (double)nbytes / (1024.0 * 1024 * 1024), tb, host_memory());
  out->data = calloc(nbytes ? nbytes : 1, 1);
  out->nbytes = nbytes;
  if (!out->data)
    return cli_error(1, "%s: out of memory: cannot allocate %zu bytes (%.1f GiB) on the host for %s", what, nbytes,
                     (double)nbytes / (1024.0 * 1024 * 1024), tb);
  rill_dtype_t d = out->type.dtype;
  bool isfloat = d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64;
  while (*p == ' ' || *p == ',') p++;
  if (strncmp(p, "random", 6) == 0 && !p[6]) {
    for (size_t i = 0; i < numel; i++) {
      uint64_t r = rng_next();
      if (isfloat) rill_element_set(d, out->data, i, (double)(r >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
      else if (d == RILL_BOOL) rill_element_set_int(d, out->data, i, (int64_t)(r & 1));
      else rill_element_set_int(d, out->data, i, (int64_t)(r % 10));
    }
    return 0;
  }
  size_t count = 0;
  double fv = 0;
  long long iv = 0;
  while (*p) {
    char *e;
    errno = 0;
    if (d == RILL_BOOL && (strncmp(p, "true", 4) == 0 || strncmp(p, "false", 5) == 0)) {
      iv = p[0] == 't';
      e = (char *)p + (iv ? 4 : 5);
    } else if (isfloat) {
      fv = strtod(p, &e);
    } else {
      iv = strtoll(p, &e, 10);
      if (errno == ERANGE && d == RILL_U64 && *p != '-') errno = 0, iv = (long long)strtoull(p, &e, 10); /* its bits */
      if (!errno && (d == RILL_BOOL) && iv != 0 && iv != 1) errno = ERANGE;
    }
    if (e == p || errno || (*e && *e != ' ' && *e != ',')) {
      return cli_usage("%s '%.60s': bad %s value at '%.20s'", what, spec, rill_dtype_name(d), p);
    }
    if (count < numel) {
      if (isfloat) rill_element_set(d, out->data, count, fv);
      else rill_element_set_int(d, out->data, count, iv);
    }
    count++;
    p = e;
    while (*p == ' ' || *p == ',') p++;
  }
  if (count == 1 && numel > 1) {
    size_t es = rill_dtype_size(d);
    for (size_t i = 1; i < numel; i++) memcpy((uint8_t *)out->data + i * es, out->data, es);
  } else if (count != numel) {
    return cli_usage("%s '%.60s': %zu values for %zu elements", what, spec, count, numel);
  }
  return 0;
}

/* ---- printing ---- */
static void print_elem(FILE *f, rill_dtype_t d, const void *data, size_t i) {
  if (d == RILL_BOOL) fprintf(f, "%s", rill_element_get_int(d, data, i) ? "true" : "false");
  else if (d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64) {
    double v = rill_element_get(d, data, i);
    if (isnan(v)) fprintf(f, "nan");
    else if (isinf(v)) fprintf(f, v < 0 ? "-inf" : "inf");
    else fprintf(f, "%.*g", d == RILL_F64 ? 10 : 6, v);
  } else if (d == RILL_U64) fprintf(f, "%llu", (unsigned long long)rill_element_get_int(d, data, i));
  else fprintf(f, "%lld", (long long)rill_element_get_int(d, data, i));
}

static void print_rec(FILE *f, const rill_type_t *t, const void *data, int dim, size_t base, bool summarize) {
  if (dim == t->rank) { print_elem(f, t->dtype, data, base); return; }
  size_t inner = 1;
  for (int i = dim + 1; i < t->rank; i++) inner *= (size_t)t->dims[i];
  int64_t n = t->dims[dim];
  fputc('[', f);
  for (int64_t i = 0; i < n; i++) {
    if (summarize && n > 6 && i == 3) {
      fprintf(f, "...");
      i = n - 4;
      if (dim + 1 < t->rank) fprintf(f, ",\n%*s", dim + 1, "");
      else fprintf(f, ", ");
      continue;
    }
    print_rec(f, t, data, dim + 1, base + (size_t)i * inner, summarize);
    if (i + 1 < n) {
      if (dim + 1 < t->rank) fprintf(f, ",\n%*s", dim + 1, "");
      else fprintf(f, ", ");
    }
  }
  fputc(']', f);
}

void cli_print_tensor(FILE *f, const char *label, const host_tensor_t *h) {
  char tb[160];
  fprintf(f, "%s: %s = ", label, rill_type_format(&h->type, tb, sizeof tb));
  print_rec(f, &h->type, h->data, 0, 0, rill_type_numel(&h->type) > 1000);
  fputc('\n', f);
}

/* ---- checking ---- */
bool cli_check_result(int index, const host_tensor_t *got, const host_tensor_t *want, double rtol, double atol,
                         bool tol_given) {
  char b1[160], b2[160];
  if (got->type.dtype != want->type.dtype || got->type.rank != want->type.rank ||
      memcmp(got->type.dims, want->type.dims, sizeof(int64_t) * (size_t)got->type.rank) != 0) {
    fprintf(stderr, "rill: result[%d]: got %s, expected %s\n", index, rill_type_format(&got->type, b1, sizeof b1),
            rill_type_format(&want->type, b2, sizeof b2));
    return false;
  }
  rill_dtype_t d = got->type.dtype;
  bool isfloat = d == RILL_F16 || d == RILL_BF16 || d == RILL_F32 || d == RILL_F64;
  if (!tol_given) {
    if (d == RILL_F16 || d == RILL_BF16) { rtol = 1e-2; atol = 1e-3; }
    else if (isfloat) { rtol = 1e-5; atol = 1e-6; }
    else { rtol = 0; atol = 0; }
  }
  size_t n = rill_type_numel(&got->type), bad = 0, worst = 0;
  double worst_excess = -1, max_abs = 0;
  for (size_t i = 0; i < n; i++) {
    bool ok;
    double g, w, diff = 0;
    if (isfloat) {
      g = rill_element_get(d, got->data, i);
      w = rill_element_get(d, want->data, i);
      if (isnan(g) || isnan(w)) ok = isnan(g) && isnan(w);
      else if (isinf(g) || isinf(w)) ok = g == w;
      else {
        diff = fabs(g - w);
        ok = diff <= atol + rtol * fabs(w);
      }
    } else {
      int64_t gi = rill_element_get_int(d, got->data, i), wi = rill_element_get_int(d, want->data, i);
      /* the difference exactly, in unsigned arithmetic (u64 above 2^63 too), then as a double */
      bool gt = d == RILL_U64 ? (uint64_t)gi > (uint64_t)wi : gi > wi;
      diff = (double)(gt ? (uint64_t)gi - (uint64_t)wi : (uint64_t)wi - (uint64_t)gi);
      ok = gi == wi || diff <= atol + rtol * fabs(rill_element_get(d, want->data, i));
    }
    if (diff > max_abs) max_abs = diff;
    if (!ok) {
      bad++;
      double excess = isnan(diff) ? INFINITY : diff;
      if (!isfinite(diff) || excess > worst_excess) { worst_excess = excess; worst = i; }
    }
  }
  if (!bad) {
    printf("result[%d]: matches (%zu elements, max abs diff %.3g, rtol=%g, atol=%g)\n", index, n, max_abs, rtol, atol);
    return true;
  }
  char idx[200] = "";
  size_t rem = worst, o = 0;
  size_t strides[RILL_MAX_RANK];
  size_t s = 1;
  for (int i = got->type.rank - 1; i >= 0; i--) { strides[i] = s; s *= (size_t)got->type.dims[i]; }
  for (int i = 0; i < got->type.rank; i++) {
    o += (size_t)snprintf(idx + o, sizeof idx - o, "%s%zu", i ? ", " : "", rem / strides[i]);
    rem %= strides[i];
  }
  fprintf(stderr, "rill: result[%d]: %zu of %zu elements outside tolerance (rtol=%g, atol=%g); worst at [%s]: got ", index, bad, n, rtol, atol, idx);
  print_elem(stderr, d, got->data, worst);
  fprintf(stderr, ", expected ");
  print_elem(stderr, d, want->data, worst);
  fprintf(stderr, "\n");
  return false;
}

/* ---- run / bench ---- */
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct session {
  rill_module_t *module;
  rill_vm_t *vm;
  const char *function;
  rill_tensor_t **inputs;
  int ninputs;
  double load_ms;            /* reading the file: import and assembly where it is source, load and verify */
  double import_ms;          /* of that, the ONNX import (an .onnx file) */
  double first_ms;           /* rill bench: the first run (ops prepared for its sizes, graph captured) */
  rill_memory_info_t mem;    /* rill bench: after the timed runs (before the traced and profiled ones) */
  rill_job_t *job;           /* with ranks: the job this process is a rank of; NULL alone */
  int rank, nranks;          /* 0 and 1 alone */
} session_t;

/* --graph=auto: one line on why the function ran interpreted, if it did. */
static void graph_note(const session_t *s) {
  rill_graph_info_t gi;
  if (!s->vm || !rill_vm_graph_info(s->vm, s->function, &gi)) return;
  if (gi.reason[0]) fprintf(stderr, "rill: @%s ran interpreted, not as a graph: %s\n", s->function, gi.reason);
  if (gi.pad_reason[0]) fprintf(stderr, "rill: @%s ran at its own sizes, not padded to a graph bucket: %s\n", s->function, gi.pad_reason);
}

/* --timings: the device's preparing threads (cuda: kernels compiled or
 * loaded, cuDNN plans, cuBLASLt heuristics), summed over the threads,
 * which work in parallel inside the VM's creation and the first run's
 * preparation; recorded once, as the VM goes. */
static void thread_timings(rill_vm_t *vm) {
  rill_kernel_stats_t ks;
  if (!vm || !rill_timings_recording() || !rill_vm_kernel_stats(vm, &ks)) return;
  if (ks.kernels_ms + ks.plans_ms <= 0) return;
  rill_timing_add("threads", ks.kernels_ms + ks.plans_ms);
  char name[48];
  snprintf(name, sizeof name, "threads/kernels (%ld compiled)", ks.compiled);
  rill_timing_add(name, ks.kernels_ms);
  rill_timing_add("threads/cudnn plans", ks.cudnn_ms);
  rill_timing_add("threads/cublaslt heuristics", ks.cublaslt_ms);
  rill_timing_add("threads/other plans", ks.plans_ms - ks.cudnn_ms - ks.cublaslt_ms);
}

/* The session's end: with ranks the job's (every rank's status, into rc),
 * then the inputs, the VM and the module freed: "teardown" of the
 * start-up's timings. Returns rc. */
static int session_end(session_t *s, int rc) {
  thread_timings(s->vm);
  double t0 = now_ms();
  rc = cli_job_end(s->job, rc);
  for (int i = 0; i < s->ninputs; i++) rill_tensor_release(s->inputs[i]);
  free(s->inputs);
  rill_vm_destroy(s->vm);
  rill_job_destroy(s->job);
  rill_module_release(s->module);
  if (rill_timings_recording()) rill_timing_add("teardown", now_ms() - t0);
  return rc;
}

/* A tensor of type t on vm's device with seeded random values (spec
 * "random"); an exit code. */
static int random_tensor(rill_vm_t *vm, const char *what, const rill_type_t *t, rill_tensor_t **out) {
  char tb[160], spec[200];
  snprintf(spec, sizeof spec, "%s=random", rill_type_format(t, tb, sizeof tb));
  host_tensor_t h;
  int rc = cli_parse_spec(what, spec, &h);
  if (rc) {
    free(h.data);
    return rc;
  }
  rill_status_t st = rill_tensor_create(vm, &h.type, h.data, out);
  free(h.data);
  return st ? cli_fail_in(what, st) : 0;
}

/* --graph=auto|on|off (default auto); an exit code. */
int cli_graph_mode(const cli_args_t *a, rill_graph_mode_t *out) {
  const char *graph = cli_get(a, "--graph");
  *out = RILL_GRAPH_AUTO;
  if (graph && !strcmp(graph, "on")) *out = RILL_GRAPH_ON;
  else if (graph && !strcmp(graph, "off")) *out = RILL_GRAPH_OFF;
  else if (graph && strcmp(graph, "auto")) return cli_usage("--graph expects auto, on or off, got '%s'", graph);
  return 0;
}

/* The comma-separated integers of p, each in [lo, hi], into out (room for
 * max); their count, or -1 with *bad and *nbad the item that is not one, or
 * -2 where there are more than max. */
static int int_list(const char *p, long long lo, long long hi, int64_t *out, int max, const char **bad, int *nbad) {
  for (int n = 0;; n++) {
    char num[32];
    size_t len = strcspn(p, ",");
    long long x;
    snprintf(num, sizeof num, "%.*s", (int)(len < 31 ? len : 31), p);
    if (n == max) return -2;
    if (len == 0 || len > 30 || !cli_parse_int(num, lo, hi, &x)) {
      *bad = p;
      *nbad = (int)(len < 31 ? len : 31);
      return -1;
    }
    out[n] = x;
    if (!p[len]) return n + 1;
    p += len + 1;
  }
}

/* --graph-buckets=NAME=S1,S2,... (repeatable): graph mode's bucket sizes of
 * shape variable NAME; an exit code. With want, the sizes given for that
 * variable (the last option's) into got (room for CLI_BUCKETS_MAX), their count in
 * *ngot (0 where none are given). */
int cli_graph_buckets(const cli_args_t *a, rill_vm_t *vm, const char *want, int64_t *got, int *ngot) {
  if (ngot) *ngot = 0;
  for (int i = 0; i < a->nopts; i++) {
    if (strcmp(a->opts[i].name, "--graph-buckets") != 0) continue;
    const char *v = a->opts[i].value, *eq = strchr(v, '='), *bad = v;
    int64_t sizes[CLI_BUCKETS_MAX];
    int nbad = 0;
    if (!eq || eq == v) return cli_usage("--graph-buckets expects NAME=S1,S2,..., got '%s'", v);
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(eq - v) < 127 ? (int)(eq - v) : 127, v);
    int n = int_list(eq + 1, 1, INT64_MAX, sizes, CLI_BUCKETS_MAX, &bad, &nbad);
    if (n == -2) return cli_usage("--graph-buckets: more than %d sizes in '%s'", CLI_BUCKETS_MAX, v);
    if (n < 0) return cli_usage("--graph-buckets: '%.*s' is not a size in '%s'", nbad, bad, v);
    rill_status_t st = rill_vm_set_graph_buckets(vm, name, sizes, n);
    if (st) {
      int rc = cli_usage("--graph-buckets: %s", rill_status_message(st));
      rill_status_free(st);
      return rc;
    }
    if (want && ngot && !strcmp(name, want)) {
      memcpy(got, sizes, sizeof *sizes * (size_t)n);
      *ngot = n;
    }
  }
  return 0;
}

/* The device's plan cache was damaged: said once, as it is rebuilt. */
void cli_cache_warning(rill_vm_t *vm) {
  rill_kernel_stats_t ks;
  if (rill_vm_kernel_stats(vm, &ks) && ks.cache_warning[0]) fprintf(stderr, "rill: warning: %s\n", ks.cache_warning);
}

/* Loads the module, makes the VM and binds inputs (specs given, or random when
 * fill_random). Returns an exit code. */
static int session_open(session_t *s, const cli_args_t *a, bool fill_random) {
  memset(s, 0, sizeof *s);
  s->nranks = 1;
  rill_job_options_t jo;
  bool in_job;
  int jrc = cli_job_options(a, &jo, &in_job);
  if (jrc) return jrc;
  s->function = cli_get(a, "--function");
  if (!s->function) s->function = "main";
  const char *seed = cli_get(a, "--seed");
  long long sv = 0;
  if (seed && !cli_parse_int(seed, 0, INT64_MAX, &sv)) return cli_usage("--seed expects a non-negative integer, got '%s'", seed);
  rng_state = (uint64_t)sv;
  /* cuda's start-up (its libraries loaded, the GPU's context made) runs in
   * the background while the module is imported and assembled, which is
   * host-only work; the device is checked after (cuda where usable unless
   * --device says: the assembly is the same for cuda and cpu, one device
   * each), and rill_vm_create waits for the rest of the start. */
  const char *device = cli_get(a, "--device"), *why = NULL;
  if (!rill_device_start(device ? device : "cuda", &why)) return cli_usage("device %s is not usable: %s", device, why);
  rill_asm_options_t o = {0};
  int orc = cli_asm_options(a, &o);
  if (orc) return orc;
  cli_parallel_form(a, &o, device, in_job);
  double t0 = now_ms();
  cli_onnx_options.import_ms = &s->import_ms;
  rill_status_t st = cli_load_module(a->pos[0], &o, &s->module);
  cli_onnx_options.import_ms = NULL;
  if (st) return cli_fail(st);
  s->load_ms = now_ms() - t0;
  if (!device) device = rill_device_usable("cuda", NULL) ? "cuda" : "cpu";
  if (!rill_device_usable(device, &why)) return cli_usage("device %s is not usable: %s", device, why);
  /* With ranks: meet the others before the device is made, so a rank with another module fails fast. */
  if (in_job) {
    if ((jrc = cli_job_join(&jo, s->module, &s->job))) return jrc;
    s->rank = rill_job_rank(s->job);
    s->nranks = rill_job_ranks(s->job);
  }
  int np, nr;
  if (!rill_module_function(s->module, s->function, &np, &nr)) return cli_usage("no function @%s in %s", s->function, a->pos[0]);
  rill_graph_mode_t gm;
  int grc = cli_graph_mode(a, &gm);
  if (grc) return grc;
  if ((st = rill_vm_create(NULL, s->module, device, &s->vm))) return cli_fail(st);
  /* With ranks, the VM's collectives run over the job (docs/collectives.md):
   * its transport attached before the first run, with the job's timeout. */
  if (s->job && ((st = vm_coll_settings(s->vm, jo.collective_timeout_s, -1)) || (st = vm_attach_transport(s->vm, vm_job_transport(s->job)))))
    return cli_fail(st);
  cli_cache_warning(s->vm);
  if ((st = rill_vm_set_graph_mode(s->vm, NULL, gm))) return cli_fail(st);
  if ((grc = cli_graph_buckets(a, s->vm, NULL, NULL, NULL))) return grc;
  if (cli_get(a, "--check-streams")) rill_vm_set_check_streams(s->vm, true);
  double ti = now_ms();
  s->inputs = calloc((size_t)np + 1, sizeof(rill_tensor_t *));
  if (!s->inputs) return cli_error(1, "out of memory");
  int k = 0;
  for (int i = 0; i < a->nopts && k <= np; i++) {
    if (strcmp(a->opts[i].name, "--input") != 0) continue;
    if (k == np) return cli_usage("more inputs than the %d parameters of @%s", np, s->function);
    rill_type_t pt;
    const char *pname;
    rill_module_param_type(s->module, s->function, k, &pt, &pname);
    host_tensor_t h;
    char what[160];
    snprintf(what, sizeof what, "--input %d (%%%.100s)", k + 1, pname);
    int rc = cli_parse_spec(what, a->opts[i].value, &h);
    if (rc) { free(h.data); return rc; }
    char b1[160], b2[160];
    bool same = h.type.dtype == pt.dtype && h.type.rank == pt.rank;
    for (int d = 0; same && d < pt.rank; d++) same = pt.dims[d] == -1 || pt.dims[d] == h.type.dims[d]; /* -1: a shape variable, bound at invoke */
    if (!same) {
      free(h.data);
      return cli_usage("input %d for parameter %%%s: expected %s, got %s", k + 1, pname, rill_type_format(&pt, b1, sizeof b1),
                       rill_type_format(&h.type, b2, sizeof b2));
    }
    st = rill_tensor_create(s->vm, &h.type, h.data, &s->inputs[k]);
    free(h.data);
    if (st) return cli_fail_in(what, st);
    s->ninputs = ++k;
  }
  for (; k < np; k++) {
    rill_type_t pt;
    const char *pname;
    rill_module_param_type(s->module, s->function, k, &pt, &pname);
    char tb[160];
    if (!fill_random) return cli_usage("missing input for parameter %%%s: %s (give --input=SPEC)", pname, rill_type_format(&pt, tb, sizeof tb));
    char what[160];
    snprintf(what, sizeof what, "input %d (%%%.100s)", k + 1, pname);
    int rc = random_tensor(s->vm, what, &pt, &s->inputs[k]);
    if (rc) return rc;
    s->ninputs = k + 1;
  }
  if (rill_timings_recording()) rill_timing_add("inputs", now_ms() - ti);
  return 0;
}

int cli_run(int argc, char **argv) {
  static const cli_opt_t opts[] = {
      CLI_OPT_FUNCTION, CLI_OPT_DEVICE, CLI_OPT_INPUT("every parameter needs one"),
      {"--output", "SPEC", "where the next result goes: @FILE.npy, or - to print it; repeatable (default: every result printed). "
                           "With ranks: %r in FILE is the rank, and every rank writes its own; a FILE without %r, and -, are rank 0's only"},
      {"--expected-output", "SPEC", "check the next result against @FILE.npy or TYPE=VALUES (exit 1 outside tolerance); repeatable"},
      {"--rtol", "R", "relative tolerance (default 1e-5 for f32 and f64, 1e-2 for f16 and bf16, 0 for integers; 1e-5 where only --atol is given)"},
      {"--atol", "A", "absolute tolerance (default 1e-6 for f32 and f64, 1e-3 for f16 and bf16, 0 for integers; 1e-6 where only --rtol is given)"},
      CLI_OPT_SEED, CLI_OPT_TRACE, CLI_OPT_CHECK_STREAMS, CLI_OPT_GRAPH, CLI_OPT_GRAPH_BUCKETS, CLI_OPT_SHAPE, CLI_OPT_LEVELS, CLI_OPT_RANKS, CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "run");
  if (!rc) rc = cli_take_shapes(&a);
  if (rc) return rc;
  if (a.npos != 1) return cli_usage("usage: rill run IN [--function=NAME] [--device=D] [--input=SPEC]... [--output=SPEC]... [--expected-output=SPEC]...");
  const char *trace = cli_get(&a, "--trace");
  double rtol = 0, atol = 0;
  bool tol_given = false;
  const char *rs = cli_get(&a, "--rtol"), *as = cli_get(&a, "--atol");
  char *e;
  if (rs) { rtol = strtod(rs, &e); if (*e || !(rtol >= 0)) return cli_usage("--rtol expects a non-negative number, got '%s'", rs); tol_given = true; }
  if (as) { atol = strtod(as, &e); if (*e || !(atol >= 0)) return cli_usage("--atol expects a non-negative number, got '%s'", as); tol_given = true; }
  if (tol_given && !rs) rtol = 1e-5;
  if (tol_given && !as) atol = 1e-6;
  session_t s;
  rc = session_open(&s, &a, false);
  int nres = 0;
  rill_tensor_t **results = NULL;
  host_tensor_t *host = NULL;
  char tbuf[4200], pbuf[4200];
  if (rc) goto done;
  if (trace) trace = cli_rank_path(trace, s.rank, s.nranks, tbuf, sizeof tbuf);
  /* Parse the expected outputs and check the outputs before running, so bad
   * specs fail fast (exit 2) and no output file is written for them. */
  int nexp = 0, nout = 0;
  for (int i = 0; i < a.nopts; i++) {
    if (strcmp(a.opts[i].name, "--expected-output") == 0) nexp++;
    if (strcmp(a.opts[i].name, "--output") != 0) continue;
    nout++;
    const char *spec = a.opts[i].value;
    if (strcmp(spec, "-") != 0 && (spec[0] != '@' || !spec[1])) {
      rc = cli_usage("--output expects @FILE.npy or -, got '%s'", spec);
      goto done;
    }
  }
  host_tensor_t *want = calloc((size_t)nexp + 1, sizeof *want);
  if (!want) { rc = cli_error(1, "out of memory"); goto done; }
  for (int i = 0, k = 0; i < a.nopts && !rc; i++)
    if (strcmp(a.opts[i].name, "--expected-output") == 0) rc = cli_parse_spec("--expected-output", a.opts[i].value, &want[k++]);
  if (!rc && trace) {
    rill_status_t st = rill_vm_set_tracing(s.vm, true);
    if (st) rc = cli_fail(st);
  }
  if (!rc) {
    double t0 = now_ms();
    rill_status_t st = rill_vm_invoke(s.vm, s.function, s.inputs, s.ninputs, &results, &nres);
    if (rill_timings_recording()) rill_timing_add("first run", now_ms() - t0);
    if (st) rc = cli_fail_run(st);
    else graph_note(&s);
  }
  double tr = now_ms();
  if (!rc && trace) {
    rill_status_t st = rill_vm_trace_write(s.vm, trace);
    if (st) rc = cli_fail(st);
  }
  if (!rc && (nexp > nres || nout > nres)) rc = cli_usage("%d results, but %d outputs and %d expected outputs given", nres, nout, nexp);
  if (!rc && !(host = calloc((size_t)nres + 1, sizeof *host))) rc = cli_error(1, "out of memory");
  for (int i = 0; !rc && i < nres; i++) {
    host[i].type = *rill_tensor_type(results[i]);
    host[i].nbytes = rill_tensor_nbytes(results[i]);
    host[i].data = malloc(host[i].nbytes ? host[i].nbytes : 1);
    if (!host[i].data) { rc = cli_error(1, "out of memory"); break; }
    rill_status_t st = rill_tensor_read(results[i], host[i].data, host[i].nbytes);
    if (st) rc = cli_fail(st);
  }
  if (!rc) {
    int k = 0;
    for (int i = 0; i < a.nopts && !rc; i++) {
      if (strcmp(a.opts[i].name, "--output") != 0) continue;
      const char *spec = a.opts[i].value;
      char label[32];
      snprintf(label, sizeof label, "result[%d]", k);
      const char *path = strcmp(spec, "-") == 0 ? NULL : cli_rank_path(spec + 1, s.rank, s.nranks, pbuf, sizeof pbuf);
      if (strcmp(spec, "-") == 0) {
        if (s.rank == 0) cli_print_tensor(stdout, label, &host[k]); /* with ranks, rank 0 prints */
      } else if (path) {
        rill_status_t st = rill_npy_write(path, &host[k].type, host[k].data);
        if (st) rc = cli_fail(st);
      }
      k++;
    }
    if (!nout && !nexp && s.rank == 0)
      for (int i = 0; i < nres; i++) {
        char label[32];
        snprintf(label, sizeof label, "result[%d]", i);
        cli_print_tensor(stdout, label, &host[i]);
      }
    bool all_ok = true;
    for (int i = 0; i < nexp && !rc; i++) all_ok &= cli_check_result(i, &host[i], &want[i], rtol, atol, tol_given);
    if (!rc && !all_ok) rc = 1;
  }
  for (int i = 0; i < nexp; i++) free(want[i].data);
  free(want);
  if (rill_timings_recording()) rill_timing_add("results", now_ms() - tr);
done:
  if (host)
    for (int i = 0; i < nres; i++) free(host[i].data);
  free(host);
  if (results) rill_results_free(s.vm, results, nres);
  return session_end(&s, rc);
}


static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* A status from running a program: 2 where the fault is the input's (an
 * argument, a file), else the run failed (1), whatever its code: a device
 * or library unusable mid-run, an op without an implementation there. */
int cli_fail_run(rill_status_t st) {
  rill_code_t c = rill_status_code(st);
  int rc = cli_fail(st);
  return c == RILL_INVALID_ARGUMENT || c == RILL_NOT_FOUND || c == RILL_IO_ERROR || c == RILL_MALFORMED ? rc : 1;
}

/* Runs fn warm + iters times; with t, the last iters runs' times (ms), sorted. */
/* timed (optional): the VM's counts over the timed runs (after the warm-up ones). */
static rill_status_t run_times(rill_vm_t *vm, const char *fn, rill_tensor_t *const *in, int nin, long long warm,
                               long long iters, double *t, double *first, rill_run_counts_t *timed) {
  rill_run_counts_t c0 = {0};
  for (long long i = 0; i < warm + iters; i++) {
    rill_tensor_t **res;
    int n;
    if (timed && i == warm) rill_vm_run_counts(vm, &c0);
    double t0 = now_ms();
    rill_status_t st = rill_vm_invoke(vm, fn, in, nin, &res, &n);
    double t1 = now_ms();
    if (i == 0 && rill_timings_recording()) rill_timing_add("first run", t1 - t0);
    if (st) return st;
    rill_results_free(vm, res, n);
    if (t && i >= warm) t[i - warm] = t1 - t0;
    if (first && i == 0) *first = t1 - t0;
  }
  if (t) qsort(t, (size_t)iters, sizeof(double), cmp_double);
  if (timed) {
    rill_vm_run_counts(vm, timed);
    timed->runs -= c0.runs, timed->host_waits -= c0.host_waits, timed->graph_launches -= c0.graph_launches;
    timed->replay_host_ns -= c0.replay_host_ns;
  }
  return NULL;
}

/* rill bench's device memory (rill_vm_memory_info after the timed runs) and start-up parts. */
static void print_memory(const session_t *s, const rill_graph_info_t *gi, bool json) {
  rill_memory_info_t mi = s->mem;
  rill_kernel_stats_t ks = {0};
  bool compiles = rill_vm_kernel_stats(s->vm, &ks);
  const double MiB = 1024.0 * 1024.0;
  if (json) {
    printf(", \"memory\": {\"weights\": %zu, \"buffers\": %zu, \"buffers_peak\": %zu, \"graphs\": %zu, \"workspaces\": %zu, "
           "\"total\": %zu, \"peak\": %zu}, \"startup\": {\"load_ms\": %.3f, \"import_ms\": %.3f, \"create_ms\": %.3f, \"kernels_ms\": %.3f, "
           "\"plans_ms\": %.3f, \"cudnn_ms\": %.3f, \"cublaslt_ms\": %.3f, \"plans_built\": %ld, \"plans_from_disk\": %ld, "
           "\"kernels_compiled\": %ld, \"kernels_from_disk\": %ld, \"first_run_ms\": %.3f, \"capture_ms\": %.3f, \"instantiate_ms\": %.3f}",
           mi.weights, mi.buffers, mi.buffers_peak, mi.graphs, mi.workspaces, mi.total, mi.peak, s->load_ms, s->import_ms, mi.create_ms, ks.kernels_ms,
           ks.plans_ms, ks.cudnn_ms, ks.cublaslt_ms, ks.plans_built, ks.plans_from_disk, ks.compiled, ks.disk_hits, s->first_ms, gi->capture_ms,
           gi->instantiate_ms);
    return;
  }
  char b[7][32];
  size_t v[7] = {mi.weights, mi.buffers, mi.buffers_peak, mi.graphs, mi.workspaces, mi.total, mi.peak};
  for (int i = 0; i < 7; i++) {
    if (v[i] >= 1024 * 1024) snprintf(b[i], sizeof b[i], "%.1f MiB", (double)v[i] / MiB);
    else snprintf(b[i], sizeof b[i], "%.1f KiB", (double)v[i] / 1024);
  }
  printf("memory: weights %s, buffers %s (peak %s), graphs %s, workspaces %s; held now %s, peak %s\n", b[0], b[1], b[2], b[3], b[4],
         b[5], b[6]);
  printf("start-up: load %.1f ms", s->load_ms);
  if (s->import_ms > 0) printf(" (ONNX import %.1f ms, then assembly)", s->import_ms);
  printf(", VM %.1f ms", mi.create_ms);
  if (compiles)
    printf(" (over the preparing threads: kernels %.1f ms, %ld compiled and %ld from the disk cache; plans %.1f ms, of which cuDNN %.1f ms "
           "and cuBLASLt %.1f ms, %ld plans found by heuristics and %ld from the plan cache)",
           ks.kernels_ms, ks.compiled, ks.disk_hits, ks.plans_ms, ks.cudnn_ms, ks.cublaslt_ms, ks.plans_built, ks.plans_from_disk);
  printf(", first run %.1f ms", s->first_ms);
  if (gi->instances) printf(" (capture %.1f ms, instantiate %.1f ms)", gi->capture_ms, gi->instantiate_ms);
  printf("\n");
}

int cli_bench(int argc, char **argv) {
  static const cli_opt_t opts[] = {
      CLI_OPT_FUNCTION, CLI_OPT_DEVICE, CLI_OPT_INPUT("parameters without one get seeded random values"), CLI_OPT_ITERATIONS("20"),
      {"--warmup", "N", "untimed runs before the timed ones (default 3)"}, CLI_OPT_SEED, CLI_OPT_TRACE,
      {"--json", NULL, "print the figures as one JSON object"}, CLI_OPT_CHECK_STREAMS, CLI_OPT_GRAPH, CLI_OPT_GRAPH_BUCKETS,
      CLI_OPT_SHAPE, CLI_OPT_LEVELS, CLI_OPT_RANKS, CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "bench");
  if (!rc) rc = cli_take_shapes(&a);
  if (rc) return rc;
  if (a.npos != 1) return cli_usage("usage: rill bench IN [--device=D] [--iterations=N] [--warmup=N] [--input=SPEC]... [--json]");
  const char *trace = cli_get(&a, "--trace");
  long long iters = 20, warm = 3;
  const char *v;
  if ((v = cli_get(&a, "--iterations")) && !cli_parse_int(v, 1, 100000000, &iters)) return cli_usage("--iterations expects 1..1e8, got '%s'", v);
  if ((v = cli_get(&a, "--warmup")) && !cli_parse_int(v, 0, 100000000, &warm)) return cli_usage("--warmup expects 0..1e8, got '%s'", v);
  session_t s;
  rc = session_open(&s, &a, true);
  double *t = NULL;
  char tbuf[4200];
  if (rc) goto done;
  if (trace) trace = cli_rank_path(trace, s.rank, s.nranks, tbuf, sizeof tbuf);
  /* with ranks, rank 0 prints the figures */
  if (s.rank != 0 && !freopen("/dev/null", "w", stdout)) { rc = cli_error(1, "cannot quiet rank %d's output", s.rank); goto done; }
  t = malloc(sizeof(double) * (size_t)iters);
  if (!t) { rc = cli_error(1, "out of memory"); goto done; }
  rill_run_counts_t rc_timed = {0};
  rill_status_t pst = run_times(s.vm, s.function, s.inputs, s.ninputs, warm, iters, t, &s.first_ms, &rc_timed);
  rill_vm_memory_info(s.vm, &s.mem);
  rill_graph_info_t gi;
  rill_vm_graph_info(s.vm, s.function, &gi);
  if (!pst) graph_note(&s);
  /* Traced runs and profiled runs each come apart from the timed ones, so
   * marks do not disturb the run times above, and apart from each other, so
   * the per-op figures count only their own runs. */
  rill_trace_summary_t sum;
  if (!pst && trace) {
    pst = rill_vm_set_tracing(s.vm, true);
    if (!pst) pst = run_times(s.vm, s.function, s.inputs, s.ninputs, 0, iters, NULL, NULL, NULL);
    if (!pst) pst = rill_vm_set_tracing(s.vm, false);
    if (!pst) pst = rill_vm_trace_summary(s.vm, &sum);
    if (!pst) pst = rill_vm_trace_write(s.vm, trace);
  }
  /* Per-op figures come from interpreted runs: a replay is one launch. */
  if (!pst) pst = rill_vm_set_graph_mode(s.vm, NULL, RILL_GRAPH_OFF);
  if (!pst) pst = rill_vm_set_profiling(s.vm, true);
  if (!pst) pst = run_times(s.vm, s.function, s.inputs, s.ninputs, 0, iters, NULL, NULL, NULL);
  if (pst) { rc = cli_fail_run(pst); goto done; }
  double med = iters % 2 ? t[iters / 2] : (t[iters / 2 - 1] + t[iters / 2]) / 2;
  bool json = cli_get(&a, "--json") != NULL;
  bool replayed = gi.instances > 0 && gi.replays > 0;
  /* the host's time issuing a replay (not its wait): the figure to set beside one device's */
  double replay_us = rc_timed.graph_launches ? (double)rc_timed.replay_host_ns / (double)rc_timed.graph_launches / 1e3 : 0;
  if (json)
    printf("{\"file\": \"%s\", \"function\": \"%s\", \"iterations\": %lld, \"warmup\": %lld, \"median_ms\": %.6f, \"min_ms\": %.6f, \"max_ms\": %.6f, "
           "\"graph\": {\"replayed\": %s, \"nodes\": %zu, \"instances\": %d, \"capture_ms\": %.3f, \"instantiate_ms\": %.3f, "
           "\"sizes\": %d, \"captures\": %llu, \"sizes_dropped\": %llu, \"padded\": %llu}, \"host_waits_per_run\": %.3f, "
           "\"graph_launches_per_run\": %.3f, \"replay_host_us\": %.3f, \"ops\": [",
           a.pos[0], s.function, iters, warm, med, t[0], t[iters - 1], replayed ? "true" : "false", gi.nodes, gi.instances,
           gi.capture_ms, gi.instantiate_ms, gi.sizes, (unsigned long long)gi.captures, (unsigned long long)gi.sizes_dropped,
           (unsigned long long)gi.padded, (double)rc_timed.host_waits / (double)iters, (double)rc_timed.graph_launches / (double)iters,
           replay_us);
  else {
    printf("%s @%s: %lld iterations (%lld warm-up): median %.4f ms, min %.4f ms, max %.4f ms\n", a.pos[0], s.function, iters, warm,
           med, t[0], t[iters - 1]);
    if (replayed)
      printf("graph: replayed (%zu nodes, %d instance%s, %d size%s kept, %llu dropped; %llu captures, the last %.3f ms, instantiate %.3f ms); "
             "per-op figures from interpreted runs\n",
             gi.nodes, gi.instances, gi.instances == 1 ? "" : "s", gi.sizes, gi.sizes == 1 ? "" : "s", (unsigned long long)gi.sizes_dropped,
             (unsigned long long)gi.captures, gi.capture_ms, gi.instantiate_ms);
    else
      printf("graph: not used (%s)\n", gi.reason[0] ? gi.reason : "--graph=off");
    if (gi.padded) printf("graph buckets: %llu runs padded\n", (unsigned long long)gi.padded);
    printf("per timed run: %.2f host round trips (host waits), %.2f graph launches", (double)rc_timed.host_waits / (double)iters,
           (double)rc_timed.graph_launches / (double)iters);
    if (rc_timed.graph_launches) printf(", %.2f us of the host's time issuing each replay", replay_us);
    printf("\n");
    printf("%-22s %-24s %10s %12s %12s\n", "op", "output", "calls/run", "us/call", "us/run");
  }
  for (int i = 0, first = 1; i < rill_vm_op_count(s.vm); i++) {
    rill_op_stats_t os;
    if (!rill_vm_op_stats(s.vm, i, &os) || !os.calls) continue;
    char tb[160];
    rill_type_format(&os.output, tb, sizeof tb);
    double per_call = os.seconds * 1e6 / (double)os.calls, per_run = os.seconds * 1e6 / (double)iters;
    if (json) printf("%s{\"op\": \"%s\", \"output\": \"%s\", \"calls_per_run\": %.3f, \"us_per_call\": %.3f, \"us_per_run\": %.3f}",
                     first ? "" : ", ", os.name, tb, (double)os.calls / (double)iters, per_call, per_run);
    else printf("%-22s %-24s %10.2f %12.3f %12.3f\n", os.name, tb, (double)os.calls / (double)iters, per_call, per_run);
    first = 0;
  }
  if (trace && json) {
    printf("], \"trace\": {\"file\": \"%s\", \"span_us\": %.3f, \"critical_path_us\": %.3f, \"critical_path_ops\": %.2f, \"streams\": [",
           trace, sum.span_us, sum.critical_us, sum.critical_ops);
    for (int k = 0; k < sum.nstreams; k++) printf("%s{\"stream\": %d, \"busy\": %.4f}", k ? ", " : "", sum.stream[k], sum.busy[k]);
    printf("]}");
  } else if (json) {
    printf("]");
  } else if (trace) {
    printf("trace of %u runs written to %s\nstreams:", sum.runs, trace);
    for (int k = 0; k < sum.nstreams; k++) printf(" %d busy %.0f%%%s", sum.stream[k], 100 * sum.busy[k], k + 1 < sum.nstreams ? "," : "");
    printf("\ncritical path: %.1f ops, %.1f us of device time in a %.1f us span (per run)\n", sum.critical_ops, sum.critical_us,
           sum.span_us);
  }
  print_memory(&s, &gi, json);
  if (json) printf("}\n");
done:
  free(t);
  return session_end(&s, rc);
}

/* ---- rill tune ---- */
/* Splits "a(T, T) -> (T) {...}"'s list at `p` (just after a '(') into types, at
 * commas outside brackets; returns the position after the ')'. */
static const char *type_list(const char *p, char types[][160], int *n) {
  *n = 0;
  while (*p && *p != ')') {
    const char *q = p;
    int depth = 0;
    while (*q && (depth || (*q != ',' && *q != ')'))) {
      if (*q == '[') depth++;
      if (*q == ']') depth--;
      q++;
    }
    if (*n < 16) snprintf(types[(*n)++], 160, "%.*s", (int)(q - p), p);
    p = *q == ',' ? q + 2 : q;
  }
  return *p ? p + 1 : p;
}

/* The median time of a run of fn after 3 warm-up runs; -1 when out of memory (st untouched). */
static double median_run_ms(rill_vm_t *vm, const char *fn, rill_tensor_t **in, int nin, long long iters, rill_status_t *st) {
  double *t = malloc(sizeof(double) * (size_t)iters), med = 0;
  if (!t) return -1;
  if (!(*st = run_times(vm, fn, in, nin, 3, iters, t, NULL, NULL))) med = t[iters / 2];
  free(t);
  return med;
}

/* Times one op declaration: a run with nothing in it, the op alone, and two
 * copies of it on two streams at once, each TUNE_OP_REPS times in a row (the
 * time per call is the difference over that many: a replayed graph's run
 * also copies the inputs in, whose time varies by about as much as a small
 * op takes). False with the reason in why. */
enum { TUNE_OP_REPS = 8 };
/* With `choice`, the op runs with that candidate (a one-leaf kernel choice
 * tree); with out_cands, *out_cands gets the device's candidates for it.
 * Runs in graph mode gm, as @main's schedules are timed: replayed, a run's
 * time is the device's, so candidates are compared as graphs will run
 * them, not by their host cost of a launch. */
static bool tune_op(const char *decl, const char *device, rill_graph_mode_t gm, long long iters, const char *choice, char **out_cands,
                    double *us, double *two_us, char *why, size_t nwhy) {
  char in[16][160], out[16][160];
  int nin, nout;
  const char *p = strchr(decl, '(');
  if (!p) return snprintf(why, nwhy, "cannot read the op"), false;
  p = type_list(p + 1, in, &nin);
  const char *q = strstr(p, "-> (");
  if (!q || !nin) return snprintf(why, nwhy, "an op without operands cannot be timed alone"), false;
  type_list(q + 4, out, &nout);
  char *src = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&src, &len);
  if (!f) return snprintf(why, nwhy, "out of memory"), false;
  fprintf(f, "op $0 = %s\n", decl);
  if (choice) fprintf(f, "choose $0 = \"%s\"\n", choice);
  const char *heads[3] = {"zero", "one", "two"};
  for (int k = 0; k < 3; k++) {
    fprintf(f, "func @%s(", heads[k]);
    for (int i = 0; i < nin; i++) fprintf(f, "%s%%a%d: %s", i ? ", " : "", i, in[i]);
    fprintf(f, ") -> (");
    if (k == 0) fprintf(f, "%s", in[0]);
    for (int r = 0; k && r < k; r++)
      for (int i = 0; i < nout; i++) fprintf(f, "%s%s", r || i ? ", " : "", out[i]);
    fprintf(f, ") lowered(streams=%d, events=%d) {\n", k == 2 ? 2 : 1, k == 2 ? 1 : 0);
    for (int r = 0; r < k; r++)
      for (int i = 0; i < nout; i++) fprintf(f, "  reg %%y%d_%d : %s\n", r, i, out[i]);
    if (k == 2) fprintf(f, "  cuda_add_event 0, 0\n  cuda_wait_event 0, 1\n  cuda_set_stream 1\n");
    for (int r = k - 1; r >= 0; r--) {
      for (int i = 0; i < nout; i++) fprintf(f, "  alloc_tensor %%y%d_%d\n", r, i);
      for (int rep = 0; rep < TUNE_OP_REPS; rep++) {
        fprintf(f, "  invoke $0, (");
        for (int i = 0; i < nin; i++) fprintf(f, "%s%%a%d", i ? ", " : "", i);
        fprintf(f, "), (");
        for (int i = 0; i < nout; i++) fprintf(f, "%s%%y%d_%d", i ? ", " : "", r, i);
        fprintf(f, ")\n");
      }
      if (k == 2 && r == 1) fprintf(f, "  cuda_add_event 0, 1\n  cuda_set_stream 0\n");
    }
    if (k == 2) fprintf(f, "  cuda_wait_event 0, 0\n");
    fprintf(f, "  return (");
    if (k == 0) fprintf(f, "%%a0");
    for (int r = 0; k && r < k; r++)
      for (int i = 0; i < nout; i++) fprintf(f, "%s%%y%d_%d", r || i ? ", " : "", r, i);
    fprintf(f, ")\n}\n");
  }
  fclose(f);
  uint8_t *bytes = NULL;
  size_t size;
  rill_module_t *m = NULL;
  rill_vm_t *vm = NULL;
  rill_tensor_t *args[16] = {0};
  bool bad_input = false;
  rill_status_t st = rill_assemble(NULL, "tune.vmasm", src, len, NULL, &bytes, &size);
  if (!st) st = rill_module_load(NULL, bytes, size, ".", &m);
  if (!st) st = rill_vm_create(NULL, m, device, &vm);
  if (!st) st = rill_vm_set_graph_mode(vm, NULL, gm);
  if (!st && out_cands) st = rill_vm_op_candidates(vm, 0, out_cands);
  for (int i = 0; !st && !bad_input && i < nin; i++) {
    /* Floats random; integers 0, a valid index anywhere; bools true. */
    char spec[256];
    bool is_float = in[i][0] == 'f' || (in[i][0] == 'b' && in[i][1] == 'f');
    snprintf(spec, sizeof spec, "%.160s=%s", in[i], is_float ? "random" : strncmp(in[i], "bool", 4) == 0 ? "true" : "0");
    host_tensor_t h;
    if (cli_parse_spec("tune", spec, &h)) bad_input = true;
    else {
      st = rill_tensor_create(vm, &h.type, h.data, &args[i]);
      free(h.data);
    }
  }
  bool ok = !st && !bad_input;
  double base = ok ? median_run_ms(vm, "zero", args, nin, iters, &st) : 0;
  double one = ok && !st ? median_run_ms(vm, "one", args, nin, iters, &st) : 0;
  double two = ok && !st ? median_run_ms(vm, "two", args, nin, iters, &st) : 0;
  if (st) snprintf(why, nwhy, "%s", rill_status_message(st));
  else if (bad_input) snprintf(why, nwhy, "cannot make its inputs");
  else if (base < 0 || one < 0 || two < 0) snprintf(why, nwhy, "out of memory");
  ok = !st && !bad_input && base >= 0 && one >= 0 && two >= 0;
  rill_status_free(st);
  *us = one > base ? (one - base) * 1e3 / TUNE_OP_REPS : 0;
  *two_us = two > base ? (two - base) * 1e3 / TUNE_OP_REPS : 0;
  for (int i = 0; i < nin; i++)
    if (args[i]) rill_tensor_release(args[i]);
  rill_vm_destroy(vm);
  rill_module_release(m);
  free(bytes);
  free(src);
  return ok;
}

typedef struct tune_shapes {
  int nv, ns;
  int64_t *samples;          /* ns x nv */
} tune_shapes_t;

/* The bindings @main is timed at: the samples, or the one fixed size. */
static int tune_bindings(const tune_shapes_t *sh) { return sh->ns ? sh->ns : 1; }

/* The schedules `rill tune` times as whole runs of @main, "none" first. */
static const char *const TUNE_SCHEDULES[] = {"none", "wavefront", "asap", "rank", "ios"};
enum { NSCHED = 5, TUNE_ROUNDS = 5, TUNE_MAX_TIMES = 1 << 22 /* a schedule's times kept, 32 MiB */ };

/* The streams @main uses in a module (its lowered header says). */
static int main_streams(const rill_module_t *m) {
  char *text = NULL;
  size_t len;
  rill_status_t st = rill_module_disassemble(m, &text, &len);
  const char *f = st ? NULL : strstr(text, "func @main(");
  const char *k = f ? strstr(f, "lowered(streams=") : NULL;
  int n = k ? atoi(k + 16) : 0;
  rill_status_free(st);
  free(text);
  return n;
}

/* Times @main of IN (.vmasm) under every schedule (ios with the op timings in
 * ops_profile), the same random inputs for each, in rounds that take turns so
 * that drift in the machine falls on all alike (a fresh VM each turn); adds
 * "schedules" (median, streams, and in how many rounds each beat one stream)
 * and "best" to root. With shape variables, at each of sh's sample bindings
 * (sh->ns of them, else one): a schedule's score is the sum over the
 * bindings of its median at each over one stream's median there, and so is
 * a round's (each size weighs as one). A schedule with streams is
 * taken over one stream only where it was faster in every round and by 1%
 * overall (two processes of one program differ by more than most gains:
 * bench/RESULTS.md, run G); then the fastest wins. An exit code. */
static int tune_schedules(const char *in, const char *device, const char *ops_profile, long long iters, uint64_t seed,
                          rill_graph_mode_t gm, const rill_asm_options_t *base, const tune_shapes_t *sh, cJSON *root) {
  rill_module_t *m[NSCHED] = {0};
  double *t[NSCHED] = {0}, med[NSCHED];
  int np = 0, nr, rc = 0, streams[NSCHED], nb = tune_bindings(sh);
  long long per = iters * TUNE_ROUNDS; /* a binding's times, all rounds */
  for (int p = 0; !rc && p < NSCHED; p++) {
    rill_asm_options_t o = *base;
    o.schedule = TUNE_SCHEDULES[p];
    o.profile = p == NSCHED - 1 ? ops_profile : NULL;
    rill_status_t st = cli_load_module(in, &o, &m[p]);
    if (st) rc = cli_fail(st);
    else if (!rill_module_function(m[p], "main", &np, &nr)) rc = cli_usage("tune: no function @main in %s to time schedules on", in);
    else if (!(t[p] = malloc(sizeof(double) * (size_t)(per * nb)))) rc = cli_error(1, "out of memory");
    else streams[p] = main_streams(m[p]);
  }
  /* One VM at a time, as a program runs alone: VMs side by side in one
   * process share the device's hardware queues, which changes what several
   * streams gain. */
  for (int r = 0; !rc && r < TUNE_ROUNDS; r++)
    for (int p = 0; !rc && p < NSCHED; p++) {
      rill_vm_t *vm = NULL;
      rill_tensor_t **args = calloc((size_t)np + 1, sizeof(rill_tensor_t *));
      rill_status_t st = args ? rill_vm_create(NULL, m[p], device, &vm) : NULL;
      /* In graph mode a run is a replay: its time is the device's, host launches gone. */
      if (!st && args) st = rill_vm_set_graph_mode(vm, NULL, gm);
      if (!args) rc = cli_error(1, "out of memory");
      else if (st) rc = cli_fail(st);
      for (int b = 0; !rc && b < nb; b++) {
        rng_state = seed;
        for (int i = 0; !rc && i < np; i++) {
          rill_type_t pt;
          const char *pname;
          rill_module_param_type(m[p], "main", i, NULL, &pname);
          char what[160];
          snprintf(what, sizeof what, "input %d (%%%.100s)", i + 1, pname);
          if (!rill_module_param_type_at(m[p], "main", i, sh->ns ? sh->samples + (size_t)b * sh->nv : NULL, &pt))
            rc = cli_usage("tune: %s of @main has no size at the sample sizes", what);
          else rc = random_tensor(vm, what, &pt, &args[i]);
        }
        if (!rc && (st = run_times(vm, "main", args, np, 3, iters, t[p] + b * per + r * iters, NULL, NULL))) rc = cli_fail_run(st);
        for (int i = 0; args && i < np; i++) {
          if (args[i]) rill_tensor_release(args[i]);
          args[i] = NULL;
        }
      }
      free(args);
      rill_vm_destroy(vm);
    }
  int best = 0;
  double none_round[TUNE_ROUNDS], rel[NSCHED];
  /* Each binding weighs as one: its times are taken relative to one stream's
   * median there (with sizes from 1 to 512, summed milliseconds would let
   * the largest decide alone). */
  double *w = rc ? NULL : malloc(sizeof(double) * (size_t)nb), *tmp = rc ? NULL : malloc(sizeof(double) * (size_t)per);
  cJSON *list = rc ? NULL : cJSON_CreateArray();
  if (!rc && (!list || !w || !tmp)) rc = cli_error(1, "out of memory");
  for (int b = 0; !rc && b < nb; b++) {
    memcpy(tmp, t[0] + b * per, sizeof(double) * (size_t)per);
    qsort(tmp, (size_t)per, sizeof(double), cmp_double);
    w[b] = tmp[per / 2] > 0 ? 1 / tmp[per / 2] : 1;
  }
  for (int p = 0; !rc && p < NSCHED; p++) {
    /* Each round's median at each binding (run_times sorted each round's
     * times), weighed and summed over the bindings; then each binding's
     * median over all rounds, summed (median_ms) and weighed (the choice). */
    int faster = 0;
    for (int r = 0; r < TUNE_ROUNDS; r++) {
      double rm = 0;
      for (int b = 0; b < nb; b++) rm += w[b] * t[p][b * per + r * iters + iters / 2];
      if (p == 0) none_round[r] = rm;
      faster += rm < none_round[r];
    }
    med[p] = rel[p] = 0;
    for (int b = 0; b < nb; b++) {
      qsort(t[p] + b * per, (size_t)per, sizeof(double), cmp_double);
      med[p] += t[p][b * per + per / 2];
      rel[p] += w[b] * t[p][b * per + per / 2];
    }
    if (p && faster == TUNE_ROUNDS && rel[p] < rel[0] * 0.99 && rel[p] < rel[best]) best = p;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "schedule", TUNE_SCHEDULES[p]) || !cJSON_AddNumberToObject(o, "median_ms", med[p]) ||
        !cJSON_AddNumberToObject(o, "streams", streams[p]) || !cJSON_AddNumberToObject(o, "rounds_faster_than_none", faster) ||
        !cJSON_AddNumberToObject(o, "relative", rel[p] / (nb ? nb : 1)) ||
        !cJSON_AddItemToArray(list, o)) {
      cJSON_Delete(o);
      rc = cli_error(1, "out of memory");
    }
  }
  if (rc) cJSON_Delete(list);
  else if (!cJSON_AddItemToObject(root, "schedules", list)) {
    cJSON_Delete(list);
    rc = cli_error(1, "out of memory");
  } else if (!cJSON_AddStringToObject(root, "best", TUNE_SCHEDULES[best])) {
    rc = cli_error(1, "out of memory");
  }
  if (!rc) {
    if (nb > 1) printf("@main on %s at %d sample sizes, the sum of each one's median of %lld runs:", device, nb, per);
    else printf("@main on %s, median of %lld runs:", device, per);
    for (int p = 0; p < NSCHED; p++) {
      char r[48] = "";
      if (nb > 1) snprintf(r, sizeof r, "; %.3f of none's", rel[p] / nb);
      printf(" %s %.3f ms (%d stream%s%s)%s", TUNE_SCHEDULES[p], med[p], streams[p], streams[p] == 1 ? "" : "s", r, p + 1 < NSCHED ? "," : "");
    }
    printf("; best: %s\n", TUNE_SCHEDULES[best]);
  }
  for (int p = 0; p < NSCHED; p++) {
    free(t[p]);
    rill_module_release(m[p]);
  }
  free(w);
  free(tmp);
  return rc;
}

/* ---- rill tune --shapes: kernel choices per size ---- */
enum { TUNE_MAX_SAMPLES = 256, TUNE_MAX_CANDS = 64, TUNE_TREE_DEPTH = 4 };

/* The sample bindings: the cross product of each --shapes list, a variable
 * without one at its lower bound. An exit code. */
static int shapes_samples(const cli_args_t *a, const rill_module_t *m, tune_shapes_t *out) {
  int nv = rill_module_shape_var_count(m);
  int64_t *vals[64] = {0};
  int nvals[64] = {0}, rc = 0;
  bool any = false;
  for (int i = 0; !rc && i < a->nopts; i++) {
    if (strcmp(a->opts[i].name, "--shapes") != 0) continue;
    any = true;
    const char *spec = a->opts[i].value, *eq = strchr(spec, '=');
    int v = -1;
    const char *name = NULL;
    int64_t lo = 0, hi = 0;
    for (int k = 0; eq && k < nv; k++)
      if (rill_module_shape_var(m, k, &name, &lo, &hi) && strlen(name) == (size_t)(eq - spec) && strncmp(name, spec, (size_t)(eq - spec)) == 0) {
        v = k;
        break;
      }
    if (!eq || eq == spec) { rc = cli_usage("--shapes expects NAME=V1,V2,..., got '%s'", spec); break; }
    if (nv == 0) { rc = cli_usage("--shapes: the program has no shape variables"); break; }
    if (v < 0 || v >= 64) { rc = cli_usage("--shapes: '%.*s' is not a shape variable of the program", (int)(eq - spec), spec); break; }
    rill_module_shape_var(m, v, &name, &lo, &hi);
    if (vals[v]) { rc = cli_usage("--shapes: %s is given twice", name); break; }
    if (!(vals[v] = calloc(strlen(eq) + 1, sizeof(int64_t)))) { rc = cli_error(1, "out of memory"); break; }
    const char *bad = eq + 1;
    int nbad;
    if ((nvals[v] = int_list(eq + 1, lo, hi, vals[v], (int)strlen(eq) + 1, &bad, &nbad)) < 0)
      rc = cli_usage("--shapes: %s takes sizes in [%lld, %lld], got '%.*s'", name, (long long)lo, (long long)hi, (int)strcspn(bad, ","), bad);
  }
  long long ns = 1;
  for (int v = 0; !rc && v < nv && v < 64; v++) {
    if (!vals[v]) {
      int64_t lo, hi;
      const char *name;
      rill_module_shape_var(m, v, &name, &lo, &hi);
      if (!(vals[v] = malloc(sizeof(int64_t)))) { rc = cli_error(1, "out of memory"); break; }
      vals[v][0] = lo;
      nvals[v] = 1;
    }
    ns *= nvals[v];
    if (ns > TUNE_MAX_SAMPLES) rc = cli_usage("--shapes: %lld sizes or more to measure; at most %d", ns, TUNE_MAX_SAMPLES);
  }
  if (!rc && nv > 64) rc = cli_usage("--shapes: the program has more than 64 shape variables");
  out->nv = nv;
  out->ns = any && !rc ? (int)ns : 0;
  out->samples = out->ns ? malloc(sizeof(int64_t) * (size_t)(ns * (nv ? nv : 1))) : NULL;
  if (out->ns && !out->samples) rc = cli_error(1, "out of memory");
  for (int s = 0; !rc && s < out->ns; s++) {
    /* the first variable varies slowest */
    int r = s;
    for (int v = nv - 1; v >= 0; v--) {
      out->samples[s * nv + v] = vals[v][r % nvals[v]];
      r /= nvals[v];
    }
  }
  for (int v = 0; v < 64; v++) free(vals[v]);
  return rc;
}

static int json_oom(cJSON *o) {
  cJSON_Delete(o);
  return cli_error(1, "out of memory");
}

/* One op entry whose sizes depend on shape variables: every candidate at
 * every sample, then the tree. Adds the entry to `list`. An exit code. */
static int tune_op_shapes(const rill_module_t *m, int op, const char *text, const tune_shapes_t *sh, const char *device,
                          rill_graph_mode_t gm, long long iters, cJSON *list) {
  char *names[TUNE_MAX_CANDS];
  int nc = 0, rc = 0;
  double *us = malloc(sizeof(double) * (size_t)sh->ns * TUNE_MAX_CANDS);
  if (!us) return cli_error(1, "out of memory");
  for (int i = 0; i < sh->ns * TUNE_MAX_CANDS; i++) us[i] = NAN;
  for (int s = 0; !rc && s < sh->ns; s++) {
    char *at = NULL, *cands = NULL, why[512];
    double t, two;
    rill_status_t st = rill_module_op_text(m, op, sh->samples + s * sh->nv, &at, NULL);
    if (st) {
      fprintf(stderr, "rill: tune: op $%d at sample %d: %s\n", op, s, rill_status_message(st));
      rill_status_free(st);
      continue;
    }
    if (!tune_op(at, device, gm, iters, NULL, &cands, &t, &two, why, sizeof why)) {
      fprintf(stderr, "rill: tune: skipped %s: %s\n", at, why);
      free(at);
      free(cands);
      continue;
    }
    for (char *c = cands, *nl; c && *c; c = nl + 1) {
      if (!(nl = strchr(c, '\n'))) break;
      *nl = 0;
      int k = 0;
      while (k < nc && strcmp(names[k], c) != 0) k++;
      if (k == nc) {
        if (nc == TUNE_MAX_CANDS || strpbrk(c, "\"\\")) continue;
        if (!(names[nc++] = strdup(c))) { rc = cli_error(1, "out of memory"); break; }
      }
      /* A device with one way: the run above measured it. */
      if (strcmp(c, "default") == 0 && cands == c && nl[1] == 0) us[s * TUNE_MAX_CANDS + k] = t;
      else if (tune_op(at, device, gm, iters, c, NULL, &t, &two, why, sizeof why)) us[s * TUNE_MAX_CANDS + k] = t;
      else fprintf(stderr, "rill: tune: %s with %s: %s\n", at, c, why);
    }
    free(at);
    free(cands);
  }
  rill_tree_node_t nodes[(2 << TUNE_TREE_DEPTH) - 1];
  uint32_t nn = 0;
  double *dense = rc || !nc ? NULL : malloc(sizeof(double) * (size_t)(sh->ns * nc));
  if (!rc && nc && !dense) rc = cli_error(1, "out of memory");
  for (int s = 0; dense && s < sh->ns; s++)
    for (int k = 0; k < nc; k++) dense[s * nc + k] = us[s * TUNE_MAX_CANDS + k];
  if (!rc && !nc) fprintf(stderr, "rill: tune: op $%d (%s): nothing measured, no tree\n", op, text);
  if (!rc && nc) {
    rill_status_t st = rill_tree_fit(sh->samples, (uint32_t)sh->ns, (uint32_t)sh->nv, dense, (uint32_t)nc, TUNE_TREE_DEPTH, nodes, &nn);
    if (st) rc = cli_fail(st);
  }
  cJSON *o = !rc && nc ? cJSON_CreateObject() : NULL, *cl = NULL, *ul = NULL, *tl = NULL;
  if (!rc && nc) {
    if (!o || !cJSON_AddStringToObject(o, "op", text) || !(cl = cJSON_AddArrayToObject(o, "candidates")) ||
        !(ul = cJSON_AddArrayToObject(o, "us")) || !(tl = cJSON_AddArrayToObject(o, "tree")))
      rc = json_oom(o), o = NULL;
  }
  for (int k = 0; o && !rc && k < nc; k++)
    if (!cJSON_AddItemToArray(cl, cJSON_CreateString(names[k]))) rc = json_oom(o), o = NULL;
  for (int s = 0; o && !rc && s < sh->ns; s++) {
    cJSON *row = cJSON_CreateArray();
    for (int k = 0; row && k < nc; k++) {
      double t = dense[s * nc + k];
      if (!cJSON_AddItemToArray(row, isnan(t) ? cJSON_CreateNull() : cJSON_CreateNumber(t))) { cJSON_Delete(row); row = NULL; }
    }
    if (!row || !cJSON_AddItemToArray(ul, row)) rc = json_oom(o), o = NULL;
  }
  const char *name;
  int leaves = 0;
  for (uint32_t i = 0; o && !rc && i < nn; i++) {
    cJSON *x = cJSON_CreateObject();
    bool ok = x != NULL;
    if (nodes[i].var < 0) {
      leaves++;
      ok = ok && cJSON_AddNumberToObject(x, "use", nodes[i].use);
    } else {
      rill_module_shape_var(m, nodes[i].var, &name, NULL, NULL);
      ok = ok && cJSON_AddStringToObject(x, "var", name) && cJSON_AddNumberToObject(x, "le", (double)nodes[i].le) &&
           cJSON_AddNumberToObject(x, "yes", nodes[i].yes) && cJSON_AddNumberToObject(x, "no", nodes[i].no);
    }
    if (!ok || !cJSON_AddItemToArray(tl, x)) {
      cJSON_Delete(x);
      rc = json_oom(o), o = NULL;
    }
  }
  if (o && !rc) {
    if (!cJSON_AddItemToArray(list, o)) rc = json_oom(o);
    else printf("op $%d %.*s: %d candidate%s at %d sizes, a tree of %d leaf%s\n", op, (int)strcspn(text, "("), text, nc, nc == 1 ? "" : "s",
                sh->ns, leaves, leaves == 1 ? "" : "s");
  }
  for (int k = 0; k < nc; k++) free(names[k]);
  free(dense);
  free(us);
  return rc;
}

int cli_tune(int argc, char **argv) {
  static const cli_opt_t opts[] = {
      CLI_OPT_DEVICE, {"--output-file", "PROFILE.json", "where the measurements go (required)"}, CLI_OPT_ITERATIONS("20 a round, 5 rounds"), CLI_OPT_SEED,
      {"--graph", "auto|on|off", "time @main under each schedule as replayed graphs where it can be (auto, the default, or on), or interpreted (off)"},
      {"--shapes", "NAME=V1,V2,...", "shape variable NAME's sizes to measure at (every combination with the other --shapes); "
                                     "each op's candidates are timed there and a decision tree fitted; repeatable (default: none, not timed per size)"},
      CLI_OPT_SHAPE, CLI_OPT_LEVELS, CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "tune");
  if (!rc) rc = cli_take_shapes(&a);
  if (rc) return rc;
  rill_graph_mode_t gm;
  if ((rc = cli_graph_mode(&a, &gm))) return rc;
  const char *out = cli_get(&a, "--output-file");
  if (a.npos != 1 || !out) return cli_usage("usage: rill tune IN [--device=D] [--iterations=N] [--shapes=NAME=V1,V2,...]... -o PROFILE.json");
  long long iters = 20, seed = 0;
  const char *v;
  if ((v = cli_get(&a, "--iterations")) && !cli_parse_int(v, 1, 100000, &iters)) return cli_usage("--iterations expects 1..100000, got '%s'", v);
  if ((v = cli_get(&a, "--seed")) && !cli_parse_int(v, 0, INT64_MAX, &seed)) return cli_usage("--seed expects a non-negative integer, got '%s'", v);
  rng_state = (uint64_t)seed;
  const char *device = cli_get(&a, "--device");
  if (!device) device = rill_device_usable("cuda", NULL) ? "cuda" : "cpu";
  const char *why = NULL;
  if (!rill_device_usable(device, &why)) return cli_usage("device %s is not usable: %s", device, why);
  rill_module_t *m;
  rill_asm_options_t lo = {0};
  if ((rc = cli_asm_options(&a, &lo))) return rc;
  if (lo.tensor_parallel > 1 || lo.data_parallel > 1 || lo.pipeline_parallel > 1)
    return cli_usage("--tensor-parallel, --data-parallel and --pipeline-parallel make a program for a job of ranks: tune the unsplit program");
  rill_status_t st = cli_load_module(a.pos[0], &lo, &m);
  if (st) return cli_fail(st);
  tune_shapes_t sh = {0};
  if ((rc = shapes_samples(&a, m, &sh))) {
    rill_module_release(m);
    return rc;
  }
  int np, nr;
  bool has_main = rill_module_function(m, "main", &np, &nr);
  bool dynamic = rill_module_shape_var_count(m) > 0;
  /* The schedules' times are kept (below), refused before anything runs where they would be too many. */
  long long runs = iters * TUNE_ROUNDS * tune_bindings(&sh);
  if (has_main && cli_is_source(a.pos[0]) && runs > TUNE_MAX_TIMES) {
    free(sh.samples);
    rill_module_release(m);
    return cli_usage("tune: %lld runs of @main a schedule (--iterations=%lld, %d rounds, %d sizes) are more than it keeps (%d); give fewer",
                     runs, iters, TUNE_ROUNDS, tune_bindings(&sh), TUNE_MAX_TIMES);
  }
  cJSON *root = cJSON_CreateObject(), *ops = root ? cJSON_AddArrayToObject(root, "ops") : NULL, *shapes = NULL, *sops = NULL;
  static const char *const GM[] = {"off", "auto", "on"};
  if (!ops || !cJSON_AddStringToObject(root, "device", device) || !cJSON_AddStringToObject(root, "graph", GM[gm]))
    rc = cli_error(1, "out of memory");
  if (!rc && sh.ns) {
    /* "shapes": the variables, the sample bindings, and per op entry its measurements and tree */
    cJSON *vars = NULL, *samples = NULL;
    if (!(shapes = cJSON_AddObjectToObject(root, "shapes")) || !(vars = cJSON_AddArrayToObject(shapes, "vars")) ||
        !(samples = cJSON_AddArrayToObject(shapes, "samples")) || !(sops = cJSON_AddArrayToObject(shapes, "ops")))
      rc = cli_error(1, "out of memory");
    for (int k = 0; !rc && k < sh.nv; k++) {
      const char *name;
      rill_module_shape_var(m, k, &name, NULL, NULL);
      if (!cJSON_AddItemToArray(vars, cJSON_CreateString(name))) rc = cli_error(1, "out of memory");
    }
    for (int s = 0; !rc && s < sh.ns; s++) {
      cJSON *row = cJSON_CreateArray();
      for (int k = 0; row && k < sh.nv; k++)
        if (!cJSON_AddItemToArray(row, cJSON_CreateNumber((double)sh.samples[s * sh.nv + k]))) { cJSON_Delete(row); row = NULL; }
      if (!row || !cJSON_AddItemToArray(samples, row)) { cJSON_Delete(row); rc = cli_error(1, "out of memory"); }
    }
  }
  int tuned = 0, skipped = 0, treed = 0;
  for (int i = 0; !rc && i < rill_module_op_count(m); i++) {
    char *text = NULL;
    bool symbolic = false;
    if ((st = rill_module_op_text(m, i, NULL, &text, &symbolic))) {
      rc = cli_fail(st);
      break;
    }
    double us, two;
    char reason[512];
    if (symbolic && !sh.ns) {
      fprintf(stderr, "rill: tune: skipped %s: its sizes depend on shape variables (give --shapes=NAME=V1,V2,... to measure it per size)\n", text);
      skipped++;
    } else if (symbolic) {
      int before = cJSON_GetArraySize(sops);
      rc = tune_op_shapes(m, i, text, &sh, device, gm, iters, sops);
      treed += cJSON_GetArraySize(sops) > before;
    } else if (!tune_op(text, device, gm, iters, NULL, NULL, &us, &two, reason, sizeof reason)) {
      fprintf(stderr, "rill: tune: skipped %s: %s\n", text, reason);
      skipped++;
    } else {
      cJSON *o = cJSON_CreateObject();
      if (!o || !cJSON_AddStringToObject(o, "op", text) || !cJSON_AddNumberToObject(o, "us", us) ||
          !cJSON_AddNumberToObject(o, "two_us", two) || !cJSON_AddItemToArray(ops, o)) {
        cJSON_Delete(o);
        rc = cli_error(1, "out of memory");
      }
      tuned++;
    }
    free(text);
  }
  rill_module_release(m);
  char *json = rc ? NULL : cJSON_Print(root);
  if (!rc && !json) rc = cli_error(1, "out of memory");
  if (!rc) printf("tuned %d ops on %s (%d skipped)%s", tuned, device, skipped, sh.ns ? "" : "\n");
  if (!rc && sh.ns) printf("; %d op%s measured per size at %d sizes\n", treed, treed == 1 ? "" : "s", sh.ns);
  /* Whole runs under each schedule, where the source can be scheduled again
   * (bytecode keeps the schedule it was assembled with); ios takes the op
   * timings above from a scratch file. */
  if (!rc && !cli_is_source(a.pos[0])) {
    fprintf(stderr, "rill: tune: schedules not timed: %s is bytecode, whose schedule is fixed (give the .vmasm or .onnx source)\n", a.pos[0]);
  } else if (!rc && !has_main) {
    fprintf(stderr, "rill: tune: schedules not timed: %s has no function @main to time them on\n", a.pos[0]);
  } else if (!rc && dynamic && !sh.ns) {
    fprintf(stderr, "rill: tune: schedules not timed: %s has shape variables (give --shapes=NAME=V1,V2,... to time them at those sizes)\n", a.pos[0]);
  } else if (!rc) {
    char tmp[] = "/tmp/rill-tune-XXXXXX";
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    bool wrote = f && fputs(json, f) >= 0;
    if (f) wrote = fclose(f) == 0 && wrote;
    else if (fd >= 0) close(fd);
    rc = wrote ? tune_schedules(a.pos[0], device, tmp, iters, (uint64_t)seed, gm, &lo, &sh, root) : cli_usage("tune: cannot write a scratch file: %s", strerror(errno));
    if (fd >= 0) unlink(tmp);
    cJSON_free(json);
    json = rc ? NULL : cJSON_Print(root);
    if (!rc && !json) rc = cli_error(1, "out of memory");
  }
  if (!rc) rc = cli_write_file(out, json, strlen(json));
  if (!rc) printf("profile written to %s\n", out);
  cJSON_free(json);
  cJSON_Delete(root);
  free(sh.samples);
  return rc;
}
