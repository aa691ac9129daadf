/* llm.c: `rill llm DIR`: a Hugging Face model folder's generation program
 * (import/llm.h), written with -o or run on the prompt's token ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "llm.h"
#include "vm/job.h"
#include "vm/vm.h"

/* The options' numbers, checked. */
typedef struct llm_args {
  llm_gen_options_t gen;
  bool have_max_length;
  const char *device;
} llm_args_t;

static int number(const cli_args_t *a, const char *name, double lo, double hi, double def, double *out) {
  const char *v = cli_get(a, name);
  *out = def;
  if (!v) return 0;
  char *e;
  double d = strtod(v, &e);
  if (!*v || *e || !(d >= lo && d <= hi)) return cli_usage("%s expects a number in [%g, %g], got '%s'", name, lo, hi, v);
  *out = d;
  return 0;
}

static int integer(const cli_args_t *a, const char *name, long long lo, long long hi, long long def, int64_t *out) {
  const char *v = cli_get(a, name);
  long long x = def;
  if (v && !cli_parse_int(v, lo, hi, &x)) return cli_usage("%s expects an integer in [%lld, %lld], got '%s'", name, lo, hi, v);
  *out = x;
  return 0;
}

static int read_args(const cli_args_t *a, llm_args_t *o) {
  memset(o, 0, sizeof *o);
  int64_t seed;
  int rc = integer(a, "-n", 1, 1 << 20, 32, &o->gen.new_tokens);
  if (!rc) rc = number(a, "--temperature", 0, 1e6, 0, &o->gen.temperature);
  if (!rc) rc = integer(a, "--top-k", 0, 1ll << 31, 0, &o->gen.top_k);
  if (!rc) rc = number(a, "--top-p", 1e-9, 1, 1, &o->gen.top_p);
  if (!rc) rc = integer(a, "--seed", 0, INT64_MAX, 0, &seed);
  if (!rc) rc = integer(a, "--batch", 1, 1 << 20, 1, &o->gen.batch);
  if (!rc) rc = integer(a, "--max-length", 2, 1ll << 31, 0, &o->gen.max_length);
  if (rc) return rc;
  o->gen.seed = (uint64_t)seed;
  o->have_max_length = cli_get(a, "--max-length") != NULL;
  o->gen.ignore_eos = cli_get(a, "--ignore-eos") != NULL;
  if (o->gen.temperature == 0 && (cli_get(a, "--top-k") || cli_get(a, "--top-p")))
    return cli_usage("--top-k and --top-p shape sampling: give a --temperature above 0 with them (without one, generation is greedy)");
  o->device = cli_get(a, "--device");
  return 0;
}

/* The prompt's ids (i64[B,S], or i32) and lengths (i64[B]; default S each), checked against the vocabulary. */
static int read_prompt(const cli_args_t *a, int64_t vocab, cli_tensor_t *ids, cli_tensor_t *lens) {
  int rc = cli_parse_spec("--prompt-ids", cli_get(a, "--prompt-ids"), ids);
  if (rc) return rc;
  char tb[160];
  rill_type_t *t = &ids->type;
  if ((t->dtype != RILL_I64 && t->dtype != RILL_I32) || t->rank != 2 || t->dims[0] < 1 || t->dims[1] < 1)
    return cli_usage("--prompt-ids: expected token ids i64[B,S] (B rows of S tokens, both at least 1), got %s", rill_type_format(t, tb, sizeof tb));
  size_t n = rill_type_numel(t);
  if (t->dtype == RILL_I32) {
    int64_t *w = malloc(n * sizeof *w);
    if (!w) return cli_error(1, "out of memory");
    for (size_t i = 0; i < n; i++) w[i] = rill_element_get_int(RILL_I32, ids->data, i);
    free(ids->data);
    ids->data = w;
    ids->nbytes = n * sizeof *w;
    t->dtype = RILL_I64;
  }
  int64_t B = t->dims[0], S = t->dims[1];
  const int64_t *v = ids->data;
  for (size_t i = 0; i < n; i++)
    if (v[i] < 0 || v[i] >= vocab)
      return cli_usage("--prompt-ids: token %lld (row %lld, position %lld) is outside the vocabulary [0, %lld)", (long long)v[i],
                       (long long)(i / (size_t)S), (long long)(i % (size_t)S), (long long)vocab);
  const char *ls = cli_get(a, "--prompt-lengths");
  if (ls) {
    if ((rc = cli_parse_spec("--prompt-lengths", ls, lens))) return rc;
    if (lens->type.dtype != RILL_I64 || lens->type.rank != 1 || lens->type.dims[0] != B)
      return cli_usage("--prompt-lengths: expected i64[%lld] (one length a row of the prompt), got %s", (long long)B,
                       rill_type_format(&lens->type, tb, sizeof tb));
    for (int64_t b = 0; b < B; b++) {
      int64_t l = ((const int64_t *)lens->data)[b];
      if (l < 1 || l > S) return cli_usage("--prompt-lengths: row %lld is %lld tokens long; a row has 1 to %lld (the prompt's S)", (long long)b, (long long)l, (long long)S);
    }
    return 0;
  }
  lens->type = (rill_type_t){RILL_I64, 1, {B}};
  lens->nbytes = (size_t)B * sizeof(int64_t);
  if (!(lens->data = malloc(lens->nbytes))) return cli_error(1, "out of memory");
  for (int64_t b = 0; b < B; b++) ((int64_t *)lens->data)[b] = S;
  return 0;
}

/* --stream: a line a step, as the device makes them: "STEP: the token of each row". */
static void print_record(void *user, uint64_t step, const int64_t *values, int n) {
  printf("%llu:", (unsigned long long)step);
  for (int i = 0; i < n; i++) printf(" %lld", (long long)values[i]);
  printf("\n");
  fflush(stdout);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Assembles the program, runs @generate on the prompt, and gives its
 * tokens (i64[B,N]) in *out; an exit code. */
static int run_program(const cli_args_t *a, const char *dir, const char *text, size_t len, const llm_args_t *o, const cli_tensor_t *ids,
                       const cli_tensor_t *lens, cli_tensor_t *out, int *out_rank, int *out_nranks) {
  rill_asm_options_t ao = {.link_weights = true};
  int rc = cli_asm_options(a, &ao);
  if (rc) return rc;
  rill_job_options_t jo;
  bool in_job;
  if ((rc = cli_job_options(a, &jo, &in_job))) return rc;
  rill_job_t *job = NULL;
  const char *device = o->device ? o->device : rill_device_usable("cuda", NULL) ? "cuda" : "cpu";
  const char *why = NULL;
  if (!rill_device_usable(device, &why)) return cli_usage("device %s is not usable: %s", device, why);
  cli_parallel_form(a, &ao, device, in_job);
  rill_graph_mode_t gm;
  if ((rc = cli_graph_mode(a, &gm))) return rc;
  char path[4200];
  snprintf(path, sizeof path, "%s/(rill llm).vmasm", dir);
  uint8_t *bytes = NULL;
  size_t size = 0;
  rill_module_t *m = NULL;
  rill_vm_t *vm = NULL;
  rill_tensor_t *in[2] = {NULL, NULL}, **res = NULL;
  rill_gen_t *gen = NULL;
  int nres = 0;
  rill_status_t st = rill_assemble(NULL, path, text, len, &ao, &bytes, &size);
  if (!st) st = rill_module_load(NULL, bytes, size, "/", &m);
  free(bytes);
  if (st) {
    rc = cli_fail(st);
    goto done;
  }
  /* With ranks (rill launch -n N rill llm ... --tensor-parallel=N): every rank runs the program, rank 0 speaks. */
  double t_join = now_ms();
  if (in_job && (rc = cli_job_join(&jo, m, &job))) goto done;
  if (in_job) rill_timing_add("job join", now_ms() - t_join);
  if (job && rill_job_rank(job) != 0 && !freopen("/dev/null", "w", stdout)) {
    rc = cli_error(1, "cannot quiet rank %d's output", rill_job_rank(job));
    goto done;
  }
  st = rill_vm_create(NULL, m, device, &vm);
  if (!st && job && !(st = vm_coll_settings(vm, jo.collective_timeout_s, -1))) st = vm_attach_transport(vm, vm_job_transport(job));
  if (!st) st = rill_vm_set_graph_mode(vm, NULL, gm);
  if (st) {
    rc = cli_fail(st);
    goto done;
  }
  double t0 = now_ms();
  if ((st = rill_tensor_create(vm, &ids->type, ids->data, &in[0])) || (st = rill_tensor_create(vm, &lens->type, lens->data, &in[1])) ||
      (st = rill_gen_start(vm, "generate", in, 2, &gen)) ||
      (st = rill_gen_wait(gen, cli_get(a, "--stream") ? print_record : NULL, NULL, &res, &nres))) {
    rc = cli_fail_run(st);
    goto done;
  }
  rill_timing_add("first run", now_ms() - t0); /* the prompt and every new token: the generation itself */
  if (cli_get(a, "--stats")) {
    rill_gen_info_t gi;
    rill_gen_info(gen, &gi);
    double ms = now_ms() - t0;
    fprintf(stderr, "rill: %llu steps of %lld rows in %.1f ms (%.1f steps/s), the first after %.1f ms; %llu host round trips (%.2f a step), %llu graph launches, %llu runs\n",
            (unsigned long long)gi.records, (long long)o->gen.batch, ms, gi.records ? (double)gi.records / (ms / 1e3) : 0.0, gi.first_record_ms,
            (unsigned long long)gi.host_waits, gi.records ? (double)gi.host_waits / (double)gi.records : 0.0, (unsigned long long)gi.graph_launches,
            (unsigned long long)gi.runs);
    rill_memory_info_t mi;
    rill_vm_memory_info(vm, &mi);
    char who[32] = "";
    if (job) snprintf(who, sizeof who, "rank %d: ", rill_job_rank(job));
    fprintf(stderr, "rill: %sweights %zu bytes on the device\n", who, mi.weights);
  }
  rill_graph_info_t gi;
  if (rill_vm_graph_info(vm, "generate", &gi) && gi.reason[0] && gm == RILL_GRAPH_AUTO)
    fprintf(stderr, "rill: @generate ran interpreted, not as a graph: %s\n", gi.reason);
  out->type = *rill_tensor_type(res[0]);
  out->nbytes = rill_tensor_nbytes(res[0]);
  if (!(out->data = malloc(out->nbytes ? out->nbytes : 1))) rc = cli_error(1, "out of memory");
  else if ((st = rill_tensor_read(res[0], out->data, out->nbytes))) rc = cli_fail(st);
done:;
  double t_end = now_ms();
  rill_gen_destroy(gen);
  if (res) rill_results_free(vm, res, nres);
  rill_tensor_release(in[0]);
  rill_tensor_release(in[1]);
  rill_vm_destroy(vm);
  rill_module_release(m);
  if (job) {
    *out_rank = rill_job_rank(job);
    *out_nranks = rill_job_ranks(job);
    rc = cli_job_end(job, rc);
    rill_job_destroy(job);
  }
  rill_timing_add("teardown", now_ms() - t_end); /* the VM and, with ranks, the job's end (every rank's status) */
  return rc;
}

int cli_llm(int argc, char **argv) {
  static const cli_opt_t opts[] = {
      {"--prompt-ids", "SPEC", "the prompt's token ids, i64[B,S]: @FILE.npy or e.g. 'i64[1,4]=1 15043 3186 29991' (rows of other lengths right-padded, "
                               "with --prompt-lengths)"},
      {"--prompt-lengths", "SPEC", "each row's prompt length, i64[B] (default: S for every row)"},
      {"-n", "N", "new tokens a row (default 32); rows that end early (an eos_token_id) give the pad id from then on"},
      {"--temperature", "T", "sample at temperature T (default 0: greedy, the most likely token)"},
      {"--top-k", "K", "sample among the K most likely tokens only (default 0: all)"},
      {"--top-p", "P", "sample within the smallest set of likeliest tokens whose probability reaches P (default 1: all)"},
      {"--seed", "S", "the sampler's seed (default 0): the same seed gives the same tokens, on cpu and cuda"},
      {"--ignore-eos", NULL, "make N tokens a row whatever they are (for timing): no stop at the config's eos_token_id"},
      {"--stream", NULL, "print each step's tokens as the device makes them, a line a step: 'STEP: the token of each row'"},
      {"--stats", NULL, "say on stderr how long generation took, when the first token came, and the host round trips and graph launches it cost"},
      {"--output", "SPEC", "where the new ids (i64[B,N]) go: @FILE.npy, or - to print them (default: printed)"},
      {"--expected-output", "SPEC", "check the new ids against @FILE.npy or TYPE=VALUES (exit 1 where they differ)"},
      {"--output-file", "OUT.vmasm", "write the program instead of running it (its weights statements name the checkpoint's files)"},
      {"--batch", "B", "rows of the program written with -o (default: the prompt's rows, else 1)"},
      {"--max-length", "T", "positions of the KV cache, prompt and new tokens together (default: the prompt's length plus N when running, "
                            "else max_position_embeddings up to 4096)"},
      CLI_OPT_DEVICE, CLI_OPT_GRAPH, CLI_OPT_LEVELS, CLI_OPT_RANKS, CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "llm");
  if (rc) return rc;
  if (a.npos != 1) return cli_usage("usage: rill llm DIR (--prompt-ids=SPEC [-n N] | -o OUT.vmasm) [--temperature=T] [--top-k=K] [--top-p=P] [--seed=S]");
  const char *dir = a.pos[0], *outfile = cli_get(&a, "--output-file");
  llm_args_t o;
  if ((rc = read_args(&a, &o))) return rc;
  rill_asm_options_t ao = {0};
  if ((rc = cli_asm_options(&a, &ao))) return rc;
  if (ao.pipeline_parallel > 1)
    return cli_usage("--pipeline-parallel: rill llm's programs keep a KV cache (states) and loop over tokens, which the pipeline does not cut into "
                     "stages: use --tensor-parallel=N");
  bool prompt = cli_get(&a, "--prompt-ids") != NULL;
  if (!prompt && !outfile) return cli_usage("rill llm needs --prompt-ids=SPEC to run, or -o OUT.vmasm to write the program");
  if (outfile && (cli_get(&a, "--output") || cli_get(&a, "--expected-output")))
    return cli_usage("-o writes the program instead of running it: --output and --expected-output are for runs");
  if (!prompt && cli_get(&a, "--prompt-lengths")) return cli_usage("--prompt-lengths goes with --prompt-ids");
  const char *spec = cli_get(&a, "--output");
  if (spec && strcmp(spec, "-") != 0 && (spec[0] != '@' || !spec[1])) return cli_usage("--output expects @FILE.npy or -, got '%s'", spec);
  llm_model_t *m = NULL;
  double t_open = now_ms();
  rill_status_t st = llm_open(dir, &m);
  if (st) return cli_fail(st);
  double t_opened = now_ms(); /* (--timings: "llm", the config and the checkpoint's index, then the program written) */
  rill_timing_add("llm/checkpoint", t_opened - t_open);
  const llm_config_t *c = llm_model_config(m);
  cli_tensor_t ids = {0}, lens = {0}, want = {0}, got = {0};
  char *text = NULL;
  size_t len = 0;
  if (prompt && (rc = read_prompt(&a, c->vocab, &ids, &lens))) goto done;
  if (cli_get(&a, "--expected-output") && (rc = cli_parse_spec("--expected-output", cli_get(&a, "--expected-output"), &want))) goto done;
  if (prompt) {
    if (cli_get(&a, "--batch") && o.gen.batch != ids.type.dims[0]) {
      rc = cli_usage("--batch=%lld, but the prompt has %lld rows", (long long)o.gen.batch, (long long)ids.type.dims[0]);
      goto done;
    }
    o.gen.batch = ids.type.dims[0];
    if (!o.have_max_length) o.gen.max_length = ids.type.dims[1] + o.gen.new_tokens;
    if (ids.type.dims[1] + o.gen.new_tokens > o.gen.max_length) {
      rc = cli_usage("the prompt's %lld tokens and %lld new ones need %lld positions, more than --max-length=%lld", (long long)ids.type.dims[1],
                     (long long)o.gen.new_tokens, (long long)(ids.type.dims[1] + o.gen.new_tokens), (long long)o.gen.max_length);
      goto done;
    }
  } else if (!o.have_max_length) {
    o.gen.max_length = c->max_positions < 4096 ? c->max_positions : 4096;
  }
  double t_prog = now_ms();
  st = llm_program(m, &o.gen, &text, &len);
  rill_timing_add("llm/program", now_ms() - t_prog);
  rill_timing_add("llm", (t_opened - t_open) + (now_ms() - t_prog));
  if (st) {
    rc = cli_fail(st);
    goto done;
  }
  if (outfile) {
    rc = cli_write_file(outfile, text, len);
    goto done;
  }
  int rank = 0, nranks = 1;
  if ((rc = run_program(&a, dir, text, len, &o, &ids, &lens, &got, &rank, &nranks))) goto done;
  char pbuf[4096];
  const char *opath = spec && strcmp(spec, "-") ? cli_rank_path(spec + 1, rank, nranks, pbuf, sizeof pbuf) : NULL;
  if (spec && !strcmp(spec, "-")) cli_print_tensor(stdout, "result[0]", &got);
  else if (spec) {
    if (opath && (st = rill_npy_write(opath, &got.type, got.data))) rc = cli_fail(st);
  } else if (!want.data) {
    cli_print_tensor(stdout, "result[0]", &got);
  }
  if (!rc && want.data && !cli_check_result(0, &got, &want, 0, 0, false)) rc = 1;
done:
  free(text);
  free(ids.data);
  free(lens.data);
  free(want.data);
  free(got.data);
  llm_free(m);
  return rc;
}
