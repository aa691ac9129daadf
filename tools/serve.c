/* serve.c: `rill serve MODEL...`: the command's options and the models.
 *
 * A model is a .vmasm, .vmbc or .onnx file, named by its base name without
 * the extension, or NAME=PATH. Each gets a VM on --device; its function's
 * parameters and results become the model's inputs and outputs (outputs
 * are named output_0, output_1, ...). A model batches when every parameter's
 * first dimension is one shape variable and every result's first dimension
 * depends on the variables: requests then join along it (serve_batch.c).
 * Before serving, each model runs once at every graph bucket size on zero
 * inputs (kernels compiled, graphs captured), and a run padded to a bucket
 * tells whether a result row depends on other rows (then it does not
 * batch). A folder is a Hugging Face checkpoint that generates
 * (serve_llm.c). Without h2o (libh2o-dev) the command only says so.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#if RILL_HAVE_H2O
#include "serve.h"
#endif

static const cli_opt_t SERVE_OPTS[] = {
    {"--port", "N", "TCP port to listen on (default 8000; 0 takes a free one; the port is printed at start)"},
    {"--host", "ADDR", "IPv4 or IPv6 address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)"},
    CLI_OPT_DEVICE,
    {"--function", "NAME", "the function each model serves (default main)"},
    {"--max-batch", "N", "rows joined into one run for a model whose first input dimension is a shape variable, at most its "
                         "range's top (default 32; 1 runs each request alone)"},
    {"--batch-delay-us", "US", "while runs of the model are in flight, how long the oldest waiting request may wait for more to "
                               "join its run, at most until they end (default 0: a run starts when an instance is free, with the "
                               "requests that arrived by then; requests that find the model idle never wait, so with --instances=1 "
                               "the delay never applies)"},
    {"--batch-quiet-us", "US", "while a batch waits out --batch-delay-us, it also starts once no request has arrived for this "
                               "long: the requests that came together are in (default: an eighth of the delay; 0: wait the "
                               "whole delay)"},
    {"--instances", "N", "runs in flight per model (default 2)"},
    {"--copy-threads", "N", "threads that help the loop copy a batch of 1 MiB or more into its staging memory (default 3; 0: the loop alone)"},
    {"--max-queue", "N", "requests waiting per model; more are answered 503 with Retry-After (default 256)"},
    {"--timeout-ms", "MS", "a request's deadline from its arrival: past it the answer is 504 (default 60000)"},
    {"--max-body-bytes", "N", "largest request body; a larger one is answered 413 (default 67108864)"},
    {"--idle-timeout-ms", "MS", "a connection that sends no whole request for this long (idle, or sending slowly) is closed (default 10000)"},
    {"--max-tokens", "N", "a Hugging Face folder's model: the most tokens one generation makes (default 128)"},
    {"--max-prompt", "N", "a Hugging Face folder's model: the longest prompt in tokens (default: what the positions leave, at most 1024)"},
    {"--max-connections", "N", "open connections; more are closed at once (default 1024)"},
    {"--http-threads", "N", "threads that read and parse requests and write answers, each its own loop, the connections dealt to "
                            "them in turn (default: the cores, at most 4); the models run on the main loop, or a request that finds "
                            "its model idle on its own thread"},
    CLI_OPT_GRAPH,
    {"--staging", "auto|off", "auto (default): a batch's inputs are copied into host memory the device reads (pinned on cuda) and "
                              "move to the device in the graph's own input copy; off: each batch is uploaded before its run"},
    {"--graph-buckets", "NAME=S1,S2,...", "graph mode: the sizes of shape variable NAME that get a graph; other sizes run padded to the "
                                          "next (default: for a batching model, every size to 16, then eight an octave (18, 20, ..., 32, 36, 40, ...) up to "
                                          "--max-batch, and --max-batch); repeatable"},
    CLI_OPT_SHAPE,
    CLI_OPT_LEVELS,
    CLI_OPT_END};

#if RILL_HAVE_H2O
static int opt_int(const cli_args_t *a, const char *name, long long lo, long long hi, long long dflt, long long *out) {
  const char *v = cli_get(a, name);
  *out = dflt;
  if (v && !cli_parse_int(v, lo, hi, out)) return cli_usage("%s expects an integer in [%lld, %lld], got '%s'", name, lo, hi, v);
  return 0;
}

static int read_config(const cli_args_t *a, serve_config_t *c) {
  long long v[12];
  int rc = opt_int(a, "--port", 0, 65535, 8000, &v[0]);
  if (!rc) rc = opt_int(a, "--max-batch", 1, 1 << 20, 32, &v[1]);
  if (!rc) rc = opt_int(a, "--batch-delay-us", 0, 60000000, 0, &v[2]);
  if (!rc) rc = opt_int(a, "--batch-quiet-us", 0, 60000000, v[2] / 8, &v[11]);
  if (!rc) rc = opt_int(a, "--instances", 1, 64, 2, &v[3]);
  if (!rc) rc = opt_int(a, "--max-queue", 1, 1 << 20, 256, &v[4]);
  if (!rc) rc = opt_int(a, "--timeout-ms", 1, 86400000, 60000, &v[5]);
  if (!rc) rc = opt_int(a, "--max-body-bytes", 1, 1ll << 40, 64ll << 20, &v[6]);
  if (!rc) rc = opt_int(a, "--idle-timeout-ms", 1, 86400000, 10000, &v[7]);
  if (!rc) rc = opt_int(a, "--max-connections", 1, 1 << 20, 1024, &v[8]);
  if (!rc) rc = opt_int(a, "--copy-threads", 0, 16, 3, &v[9]);
  unsigned cores = uv_available_parallelism();
  if (!rc) rc = opt_int(a, "--http-threads", 1, 64, cores < 4 ? (cores ? cores : 1) : 4, &v[10]);
  if (rc) return rc;
  c->port = (int)v[0];
  c->max_batch = v[1];
  c->batch_delay_us = v[2];
  c->batch_quiet_us = v[11];
  c->instances = (int)v[3];
  c->max_queue = (int)v[4];
  c->timeout_ms = v[5];
  c->max_body = (size_t)v[6];
  c->idle_timeout_ms = v[7];
  c->max_connections = (int)v[8];
  c->copy_threads = (int)v[9];
  c->http_threads = (int)v[10];
  c->host = cli_get(a, "--host") ? cli_get(a, "--host") : "127.0.0.1";
  c->function = cli_get(a, "--function") ? cli_get(a, "--function") : "main";
  c->device = cli_get(a, "--device");
  if (!c->device) c->device = rill_device_usable("cuda", NULL) ? "cuda" : "cpu";
  const char *why = NULL;
  if (!rill_device_usable(c->device, &why)) return cli_usage("device %s is not usable: %s", c->device, why);
  const char *st = cli_get(a, "--staging");
  if (st && strcmp(st, "auto") && strcmp(st, "off")) return cli_usage("--staging expects auto or off, got '%s'", st);
  return 0;
}

/* NAME=PATH, or PATH named by its base name without the extension. */
static int model_name(const char *arg, char *name, size_t n, const char **path) {
  const char *eq = strchr(arg, '=');
  const char *slash = strrchr(arg, '/');
  if (eq && (!slash || eq < slash)) {
    snprintf(name, n, "%.*s", (int)(eq - arg), arg);
    *path = eq + 1;
  } else {
    const char *base = slash ? slash + 1 : arg, *dot = strrchr(base, '.');
    snprintf(name, n, "%.*s", (int)(dot && dot > base ? dot - base : (ptrdiff_t)strlen(base)), base);
    *path = arg;
  }
  if (!name[0] || strlen(name) >= n - 1) return cli_usage("model '%s': no name (NAME=PATH names one)", arg);
  for (const char *p = name; *p; p++)
    if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') && !strchr("._-", *p))
      return cli_usage("model name '%s': letters, digits, '.', '_' and '-' only (NAME=PATH names it)", name);
  return 0;
}

/* Which shape variable (if any) each symbolic dimension of each parameter
 * is: a dimension that takes each value a variable is given, and moves with
 * no other, is that variable. */
static void classify_dims(serve_model_t *m, const char *fn) {
  int nv = m->nvars < 64 ? m->nvars : 64;
  int64_t base[64], probe[64];
  for (int v = 0; v < nv; v++) base[v] = m->var_lo[v];
  for (int p = 0; p < m->nparams; p++) {
    serve_io_t *io = &m->params[p];
    rill_type_t a, b;
    bool have = rill_module_param_type_at(m->module, fn, p, nv ? base : NULL, &a);
    for (int d = 0; d < io->type.rank; d++) {
      io->dim_var[d] = SERVE_DIM_FIXED;
      if (io->type.dims[d] >= 0) continue;
      io->dim_var[d] = SERVE_DIM_EXPR;
      if (!have) continue;
      int found = -1;
      bool moves = false;
      for (int v = 0; v < nv; v++) {
        if (m->var_hi[v] <= m->var_lo[v]) continue;
        memcpy(probe, base, sizeof(int64_t) * (size_t)nv);
        probe[v] = m->var_lo[v] + 1;
        if (!rill_module_param_type_at(m->module, fn, p, probe, &b)) {
          moves = true;
          continue;
        }
        if (b.dims[d] == a.dims[d]) continue;
        moves = true;
        if (a.dims[d] == m->var_lo[v] && b.dims[d] == m->var_lo[v] + 1 && found == -1) found = v;
        else found = -2;
      }
      if (!moves) {
        io->dim_var[d] = SERVE_DIM_FIXED; /* every variable it depends on has one value */
        io->type.dims[d] = a.dims[d];
      } else if (found >= 0) {
        io->dim_var[d] = found;
      }
    }
  }
}

/* The variable every parameter's first dimension is, with every result's
 * first dimension symbolic; else -1. */
static int batch_var(const serve_model_t *m) {
  if (m->nparams == 0 || m->nresults == 0) return -1;
  int v = m->params[0].type.rank ? m->params[0].dim_var[0] : -1;
  if (v < 0) return -1;
  for (int p = 0; p < m->nparams; p++)
    if (m->params[p].type.rank == 0 || m->params[p].dim_var[0] != v) return -1;
  for (int k = 0; k < m->nresults; k++)
    if (m->results[k].type.rank == 0 || m->results[k].type.dims[0] != -1) return -1;
  return v;
}

/* One run on zero inputs with the batch variable at `rows` (others at the
 * bottom of their ranges); false with a note when it fails. */
static bool same_type(const rill_type_t *a, const rill_type_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

static bool warm_run(serve_model_t *m, const char *fn, int64_t rows) {
  int64_t vals[64];
  for (int v = 0; v < m->nvars && v < 64; v++) vals[v] = m->var_lo[v];
  if (m->batch_var >= 0) vals[m->batch_var] = rows;
  rill_tensor_t **in = calloc((size_t)m->nparams + 1, sizeof *in);
  rill_status_t st = in ? NULL : rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
  for (int p = 0; !st && p < m->nparams; p++) {
    rill_type_t t;
    if (!rill_module_param_type_at(m->module, fn, p, m->nvars ? vals : NULL, &t)) {
      st = rill_status_new(RILL_INVALID_ARGUMENT, "no sizes for parameter %d at the bottom of the ranges", p + 1);
      break;
    }
    size_t nb = rill_type_numel(&t) * rill_dtype_size(t.dtype);
    void *zeros = calloc(nb ? nb : 1, 1);
    st = zeros ? rill_tensor_create(m->vm, &t, zeros, &in[p]) : rill_status_new(RILL_OUT_OF_MEMORY, "out of memory");
    free(zeros);
  }
  rill_tensor_t **res = NULL;
  int nres = 0;
  if (!st) st = rill_vm_invoke(m->vm, fn, in, m->nparams, &res, &nres);
  /* results are staged only where their types follow from the rows */
  for (int k = 0; !st && m->into && k < nres; k++) {
    rill_type_t t;
    if (!serve_result_type(m, k, rows, &t) || !same_type(&t, rill_tensor_type(res[k]))) m->into = false;
  }
  if (!st) rill_results_free(m->vm, res, nres);
  for (int p = 0; in && p < m->nparams; p++)
    if (in[p]) rill_tensor_release(in[p]);
  free(in);
  if (st) {
    fprintf(stderr, "rill: serve: note: model '%s': a warm-up run at %" PRId64 " rows failed: %s\n", m->name, rows, rill_status_message(st));
    rill_status_free(st);
  }
  return st == NULL;
}

/* The smallest size between two of the buckets (a run there is padded), or 0. */
static int64_t between_buckets(const int64_t *sizes, int n) {
  for (int i = 0; i + 1 < n; i++)
    if (sizes[i] + 1 < sizes[i + 1]) return sizes[i] + 1;
  return 0;
}

/* The batch variable's graph buckets by default: every size to 16, then
 * eight an octave (18, 20, ..., 32, 36, 40, ..., 64, 72, ...) up to
 * max_batch, and max_batch. A batch padded to its bucket runs at the
 * bucket's cost (run AS: 20 rows padded to 32 took 1.47x the exact run),
 * and a server's batches come in every size: with powers of two, 64
 * clients' batches of about 25 rows ran as 32 (run DL: 0.765x the offline
 * rate at 32); four an octave still padded them by a tenth on average.
 * Eight an octave pad by at most an eighth, by one row in 16 to 32. One
 * size below max_batch is left out where no other is, so that the warm-up
 * has a padded run, which checks that no result row depends on other rows. */
static int default_buckets(const serve_model_t *m, int64_t *sizes) {
  int n = 0;
  if (m->batch_var < 0) return 0;
  int64_t lo = m->var_lo[m->batch_var];
  /* eight an octave, or four, two, one where a --max-batch of thousands would not fit them */
  for (int64_t per = 8; per >= 1; per /= 2) {
    n = 0;
    for (int64_t b = 1, oct = 16; b <= m->max_batch && n < CLI_BUCKETS_MAX - 1; b += b < 16 ? 1 : oct / per) {
      if (b >= 2 * oct) oct *= 2;
      if (b >= lo) sizes[n++] = b;
    }
    if (n < CLI_BUCKETS_MAX - 1 || per == 1) break;
  }
  if (n == 0 || sizes[n - 1] != m->max_batch) sizes[n++] = m->max_batch;
  if (n >= 3 && !between_buckets(sizes, n)) sizes[n - 2] = sizes[n - 1], n--;
  return n;
}

/* m's VM with its graph mode and buckets (m->buckets: the batch variable's,
 * as given by --graph-buckets or else default_buckets'); an exit code. */
static int make_vm(serve_model_t *m, const cli_args_t *a) {
  rill_status_t st = rill_vm_create(NULL, m->module, m->server->cfg.device, &m->vm);
  if (st) return cli_fail_in(m->name, st);
  if ((st = rill_vm_set_graph_mode(m->vm, NULL, m->graph))) return cli_fail_in(m->name, st);
  const char *vname = NULL;
  if (m->batch_var >= 0) rill_module_shape_var(m->module, m->batch_var, &vname, NULL, NULL);
  int rc = cli_graph_buckets(a, m->vm, vname, m->buckets, &m->nbuckets);
  if (rc) return rc;
  bool given = m->nbuckets > 0;
  if (!given) m->nbuckets = default_buckets(m, m->buckets);
  int n = m->nbuckets;
  if (m->graph != RILL_GRAPH_OFF && n > 1 && !given && (st = rill_vm_set_graph_buckets(m->vm, vname, m->buckets, n)))
    return cli_fail_in(m->name, st);
  /* every bucket's graphs kept: the function's default of 8 sizes would drop and capture them again in turn */
  if (m->graph != RILL_GRAPH_OFF && n > 8 && (st = rill_vm_set_graph_sizes(m->vm, n))) return cli_fail_in(m->name, st);
  return 0;
}

bool serve_model_renew(serve_model_t *m) {
  serve_stages_free(m);
  rill_vm_destroy(m->vm);
  m->vm = NULL;
  if (make_vm(m, m->server->args)) {
    rill_vm_destroy(m->vm);
    m->vm = NULL;
    return false;
  }
  return true;
}

/* The warm-up runs: at each bucket size, and one padded to check the rows. */
static void choose_staging(serve_model_t *m, rill_graph_mode_t gm) {
  /* Inputs through host memory the device reads where a graph's input copy
   * reads them (one copy per batch) or the device is the host's; a cuda
   * model that runs interpreted would read them over the bus op by op, and
   * gets uploads instead. */
  rill_graph_info_t gi;
  bool graph = gm != RILL_GRAPH_OFF && rill_vm_graph_info(m->vm, m->server->cfg.function, &gi) && !gi.reason[0];
  m->staged = !strncmp(m->server->cfg.device, "cpu", 3) || graph;
  const char *st = cli_get(m->server->args, "--staging");
  if ((st && !strcmp(st, "off")) || m->no_staging) m->staged = false;
}

static int warm_up(serve_model_t *m, rill_graph_mode_t gm);

/* The staged path tried once (a device that cannot copy between host
 * memory and a run's would fail every request): where it fails, the model
 * uploads instead, on a new VM warmed up again. */
static int prepare(serve_model_t *m, rill_graph_mode_t gm) {
  int rc = warm_up(m, gm);
  if (rc || !m->staged) return rc;
  char why[512];
  /* at the bottom of the range, and where buckets pad, at a size between two (its rows copied into the bucket's stage) */
  int64_t rows = m->batch_var >= 0 ? (m->var_lo[m->batch_var] > 1 ? m->var_lo[m->batch_var] : 1) : 0;
  bool ok = serve_staged_probe(m, rows, why, sizeof why);
  int64_t pad = between_buckets(m->buckets, m->nbuckets);
  if (ok && m->batch_var >= 0 && gm != RILL_GRAPH_OFF && pad > rows) ok = serve_staged_probe(m, pad, why, sizeof why);
  if (ok) return 0;
  fprintf(stderr, "rill: serve: note: model '%s': inputs and results in host memory failed (%s): its batches are uploaded instead\n",
          m->name, why);
  m->no_staging = true;
  m->staged = m->into = false;
  if (!serve_model_renew(m)) return 1;
  return warm_up(m, gm);
}

static int warm_up(serve_model_t *m, rill_graph_mode_t gm) {
  const char *fn = m->server->cfg.function;
  const int64_t *sizes = m->buckets;
  int n = m->nbuckets;
  if (m->batch_var < 0) {
    warm_run(m, fn, 0);
    choose_staging(m, gm);
    return 0;
  }
  for (int i = 0; i < n; i++) warm_run(m, fn, sizes[i]);
  /* a size between two buckets runs padded, which checks the rows */
  int64_t pad = between_buckets(sizes, n);
  if (gm != RILL_GRAPH_OFF && pad) {
    warm_run(m, fn, pad);
    rill_graph_info_t gi;
    if (rill_vm_graph_info(m->vm, fn, &gi) && strstr(gi.pad_reason, "depends on other rows")) {
      fprintf(stderr, "rill: serve: model '%s' runs each request alone: %s\n", m->name, gi.pad_reason);
      m->max_batch = 1;
    }
  }
  choose_staging(m, gm);
  return 0;
}

static int load_model(serve_t *s, serve_model_t *m, const char *arg, const cli_args_t *a, rill_graph_mode_t gm) {
  const char *path;
  int rc = model_name(arg, m->name, sizeof m->name, &path);
  if (rc) return rc;
  for (int i = 0; i < s->nmodels; i++)
    if (!strcmp(s->models[i]->name, m->name)) return cli_usage("two models are named '%s' (NAME=PATH names them)", m->name);
  m->server = s;
  m->batch_var = -1;
  serve_model_init(m);
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* a Hugging Face folder: generation */
    m->graph = gm;
    return serve_llm_load(m, path, a);
  }
  rill_asm_options_t o = {0};
  if ((rc = cli_asm_options(a, &o))) return rc;
  if (o.tensor_parallel > 1 || o.data_parallel > 1 || o.pipeline_parallel > 1)
    return cli_usage("--tensor-parallel, --data-parallel and --pipeline-parallel make a program for a job of ranks, which rill serve does not run");
  rill_status_t st = cli_load_module(path, &o, &m->module);
  if (st) return cli_fail(st);
  const char *fn = s->cfg.function;
  if (!rill_module_function(m->module, fn, &m->nparams, &m->nresults)) return cli_usage("no function @%s in %s", fn, path);
  m->params = calloc((size_t)m->nparams + 1, sizeof *m->params);
  m->results = calloc((size_t)m->nresults + 1, sizeof *m->results);
  m->nvars = rill_module_shape_var_count(m->module);
  m->var_lo = calloc((size_t)m->nvars + 1, sizeof *m->var_lo);
  m->var_hi = calloc((size_t)m->nvars + 1, sizeof *m->var_hi);
  if (!m->params || !m->results || !m->var_lo || !m->var_hi) return cli_error(1, "out of memory");
  for (int v = 0; v < m->nvars; v++) rill_module_shape_var(m->module, v, NULL, &m->var_lo[v], &m->var_hi[v]);
  for (int p = 0; p < m->nparams; p++) {
    const char *name = NULL;
    rill_module_param_type(m->module, fn, p, &m->params[p].type, &name);
    if (name && name[0] == '%') name++;
    snprintf(m->params[p].name, sizeof m->params[p].name, "%s", name && name[0] ? name : "input");
    if (!name || !name[0]) snprintf(m->params[p].name, sizeof m->params[p].name, "input_%d", p);
  }
  for (int k = 0; k < m->nresults; k++) {
    rill_module_result_type(m->module, fn, k, &m->results[k].type);
    snprintf(m->results[k].name, sizeof m->results[k].name, "output_%d", k);
  }
  classify_dims(m, fn);
  m->batch_var = batch_var(m);
  m->max_batch = 1;
  if (m->batch_var >= 0) {
    int64_t hi = m->var_hi[m->batch_var];
    m->max_batch = s->cfg.max_batch < hi ? s->cfg.max_batch : hi;
  }
  m->graph = gm;
  m->into = true;
  for (int k = 0; k < m->nresults; k++) {
    rill_type_t t;
    if (!serve_result_type(m, k, 1, &t)) m->into = false;
  }
  if ((rc = make_vm(m, a))) return rc;
  return prepare(m, gm);
}

static void free_models(serve_t *s) {
  for (int i = 0; i < s->nmodels; i++) {
    serve_model_t *m = s->models[i];
    serve_llm_free(m);
    if (m->vm) serve_stages_free(m);
    rill_vm_destroy(m->vm);
    if (m->module) rill_module_release(m->module);
    free(m->params);
    free(m->results);
    free(m->var_lo);
    free(m->var_hi);
    free(m);
  }
  free(s->models);
}
#endif

int cli_serve(int argc, char **argv) {
  static cli_args_t a;
  int rc = cli_parse(argc, argv, SERVE_OPTS, &a, "serve");
  if (!rc) rc = cli_take_shapes(&a);
  if (rc) return rc;
  if (a.npos < 1) return cli_usage("usage: rill serve MODEL... [--port=N] [--host=ADDR] [--device=D] (rill serve --help lists the options)");
#if !RILL_HAVE_H2O
  return cli_error(2, "serve: this rill was built without h2o: install libh2o-dev (h2o built for libuv) and libssl-dev, then rebuild");
#else
  static serve_t s;
  memset(&s, 0, sizeof s);
  if ((rc = read_config(&a, &s.cfg))) return rc;
  s.args = &a;
  rill_graph_mode_t gm;
  if ((rc = cli_graph_mode(&a, &gm))) return rc;
  if (!(s.models = calloc((size_t)a.npos, sizeof *s.models))) return cli_error(1, "out of memory");
  for (int i = 0; i < a.npos && !rc; i++) {
    serve_model_t *m = calloc(1, sizeof *m);
    if (!m) {
      rc = cli_error(1, "out of memory");
      break;
    }
    rc = load_model(&s, m, a.pos[i], &a, gm);
    s.models[s.nmodels++] = m; /* freed with the others, loaded or not */
  }
  if (!rc) {
    for (int i = 0; i < s.nmodels; i++) {
      serve_model_t *m = s.models[i];
      if (m->llm) {
        fprintf(stderr, "rill: serve: model '%s': generation (POST /v2/models/%s/generate and generate_stream)\n", m->name, m->name);
        continue;
      }
      fprintf(stderr, "rill: serve: model '%s': %d input%s, %d output%s", m->name, m->nparams, m->nparams == 1 ? "" : "s", m->nresults,
              m->nresults == 1 ? "" : "s");
      if (m->batch_var >= 0 && m->max_batch > 1) fprintf(stderr, ", batches up to %" PRId64 " rows\n", m->max_batch);
      else fprintf(stderr, ", runs each request alone\n");
    }
    rc = serve_http_run(&s);
  }
  free_models(&s);
  return rc;
#endif
}
