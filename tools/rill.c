/* rill: the command-line tool (spec/cli.md).
 *
 *   rill COMMAND [ARGS] [OPTIONS]: the commands are the table COMMANDS
 *   below, each parsing its own table of options (cli_opt_t), from which
 *   `rill COMMAND --help` and `rill help` print its help.
 *
 * Exit status: 0 success; 1 the program ran but failed (runtime error, out
 * of memory, result outside tolerance); 2 usage errors and bad input.
 * Messages go to stderr, one line each.
 */
#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "rill.h"
#include "cli.h"
#include "onnx.h"

int cli_fail(rill_status_t st) { return cli_fail_in(NULL, st); }

int cli_fail_in(const char *context, rill_status_t st) {
  rill_code_t code = rill_status_code(st);
  const char *msg = rill_status_message(st);
  /* Source diagnostics carry their own FILE:LINE:COL prefix. */
  if (code == RILL_ASSEMBLY_ERROR && strstr(msg, ": error: ")) fprintf(stderr, "%s\n", msg);
  else fprintf(stderr, "rill: %s%s%s\n", context ? context : "", context ? ": " : "", msg);
  rill_status_free(st);
  /* Memory running out is no fault of the input: the run failed (1). */
  return code == RILL_RUNTIME_ERROR || code == RILL_OUT_OF_MEMORY ? 1 : 2;
}

static int vreport(int code, const char *fmt, va_list ap) {
  fprintf(stderr, "rill: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  return code;
}

int cli_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = vreport(2, fmt, ap);
  va_end(ap);
  return rc;
}

int cli_error(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = vreport(code, fmt, ap);
  va_end(ap);
  return rc;
}

/* ---- options ---- */
int cli_parse(int argc, char **argv, const cli_opt_t *opts, cli_args_t *out, const char *cmd) {
  struct cli_kv *kv = realloc(out->opts, sizeof *kv * (size_t)(argc > 0 ? argc : 1));
  if (!kv) return cli_usage("out of memory reading the options");
  memset(out, 0, sizeof *out);
  out->opts = kv;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      cli_help(cmd, opts);
      return CLI_HELP;
    }
  }
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || strcmp(a, "-") == 0) {
      if (out->npos >= CLI_MAX_POS) return cli_usage("too many arguments for 'rill %s'", cmd);
      out->pos[out->npos++] = a;
      continue;
    }
    const char *name = a, *value = NULL;
    char buf[64];
    if (strcmp(a, "-o") == 0) name = "--output-file";
    const char *eq = strchr(name, '=');
    if (eq) {
      snprintf(buf, sizeof buf, "%.*s", (int)(eq - name < 63 ? eq - name : 63), name);
      name = buf;
      value = eq + 1;
    }
    const cli_opt_t *o = opts;
    while (o->name && strcmp(o->name, name) != 0) o++;
    if (!o->name) return cli_usage("unknown option %s for 'rill %s' (rill %s --help lists them)", name, cmd, cmd);
    if (o->value && !value) {
      if (i + 1 >= argc) return cli_usage("option %s needs a value", name);
      value = argv[++i];
    }
    if (!o->value && value) return cli_usage("option %s takes no value", name);
    out->opts[out->nopts].name = o->name;
    out->opts[out->nopts].value = value ? value : "";
    out->nopts++;
  }
  return 0;
}

bool cli_no_opt(const cli_args_t *a) {
  bool no = false;
  for (int i = 0; i < a->nopts; i++) {
    if (!strcmp(a->opts[i].name, "-O0")) no = true;
    if (!strcmp(a->opts[i].name, "-O1")) no = false;
  }
  return no;
}

int cli_asm_options(const cli_args_t *a, rill_asm_options_t *o) {
  o->no_opt = cli_no_opt(a);
  const char *p = cli_get(a, "--precision");
  if (p && !rill_precision_from_name(p, &o->precision)) {
    char b[64];
    return cli_usage("--precision expects exact, tf32, f16 or bf16, got '%s'", rill_escape(p, strlen(p), b, sizeof b));
  }
  const char *tp = cli_get(a, "--tensor-parallel");
  long long n;
  if (tp) {
    if (!cli_parse_int(tp, 1, 1024, &n)) return cli_usage("--tensor-parallel expects 1..1024, got '%s'", tp);
    o->tensor_parallel = (int)n;
  }
  const char *dp = cli_get(a, "--data-parallel");
  if (dp) {
    if (!cli_parse_int(dp, 1, 1024, &n)) return cli_usage("--data-parallel expects 1..1024, got '%s'", dp);
    o->data_parallel = (int)n;
  }
  if (o->data_parallel > 1 && o->tensor_parallel > 1) return cli_usage("--data-parallel and --tensor-parallel together are not built: give one");
  const char *pp = cli_get(a, "--pipeline-parallel"), *mb = cli_get(a, "--micro-batches");
  if (pp) {
    if (!cli_parse_int(pp, 1, 1024, &n)) return cli_usage("--pipeline-parallel expects 1..1024, got '%s'", pp);
    o->pipeline_parallel = (int)n;
  }
  if (mb) {
    if (!cli_parse_int(mb, 1, 64, &n)) return cli_usage("--micro-batches expects 1..64, got '%s'", mb);
    if (o->pipeline_parallel <= 1) return cli_usage("--micro-batches goes with --pipeline-parallel=N (N > 1)");
    o->micro_batches = (int)n;
  }
  if (o->pipeline_parallel > 1 && (o->data_parallel > 1 || o->tensor_parallel > 1))
    return cli_usage("--pipeline-parallel with --tensor-parallel or --data-parallel (a grid of ranks) is not built: give one");
  const char *form = cli_get(a, "--parallel-form");
  if (form) {
    if (strcmp(form, "ranks") != 0 && strcmp(form, "devices") != 0) return cli_usage("--parallel-form expects ranks or devices, got '%s'", form);
    o->parallel_devices = !strcmp(form, "devices");
    if (o->parallel_devices && o->tensor_parallel <= 1 && o->data_parallel <= 1 && o->pipeline_parallel <= 1)
      return cli_usage("--parallel-form=devices goes with --tensor-parallel=N, --data-parallel=N or --pipeline-parallel=N (N > 1)");
  }
  return 0;
}

void cli_parallel_form(const cli_args_t *a, rill_asm_options_t *o, const char *device, bool in_job) {
  int ndev = 1;
  for (const char *p = device; p && *p; p++) ndev += *p == ',';
  int parts = o->tensor_parallel > 1 ? o->tensor_parallel : o->data_parallel > 1 ? o->data_parallel : o->pipeline_parallel;
  if (!cli_get(a, "--parallel-form") && !in_job && parts > 1 && ndev == parts) o->parallel_devices = true;
}

const char *cli_get(const cli_args_t *a, const char *name) {
  const char *v = NULL;
  for (int i = 0; i < a->nopts; i++)
    if (strcmp(a->opts[i].name, name) == 0) v = a->opts[i].value;
  return v;
}

bool cli_parse_int(const char *s, long long lo, long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* ---- asm, dis, verify, version ---- */
static void print_note(void *user, const char *line) {
  (void)user;
  fprintf(stderr, "%s\n", line);
}

static int cmd_asm(int argc, char **argv) {
  static const cli_opt_t opts[] = {
      {"--output-file", "OUT.vmbc", "where the module goes (default: IN with .vmbc for .vmasm or .onnx)"},
      {"--schedule", "POLICY", "none, wavefront, asap, rank or ios: how independent ops spread over streams "
                               "(default: the profile's measured best with --profile, else rank)"},
      {"--max-streams", "N", "streams the schedule may use, 1..64 (default 4)"},
      {"--link-weights", NULL, "store references to the weights files instead of their data (checked by size and checksum at load)"},
      {"--profile", "PROFILE.json", "measurements from rill tune: the schedule measured fastest, ios's stage costs, kernel choices per size"},
      CLI_OPT_SHAPE, CLI_OPT_LEVELS, CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "asm");
  if (!rc) rc = cli_take_shapes(&a);
  if (rc) return rc;
  if (a.npos != 1) return cli_usage("usage: rill asm IN.vmasm|IN.onnx [-o OUT.vmbc] [-O0|-O1] [--precision=MODE] [--schedule=POLICY] [--max-streams=N] [--link-weights]");
  rill_asm_options_t o = {.note = print_note};
  if ((rc = cli_asm_options(&a, &o))) return rc;
  o.schedule = cli_get(&a, "--schedule");
  o.link_weights = cli_get(&a, "--link-weights") != NULL;
  o.profile = cli_get(&a, "--profile");
  if (o.profile && o.schedule && strcmp(o.schedule, "ios") != 0)
    return cli_usage("--profile is for --schedule=ios, or alone (the schedule rill tune measured best)");
  const char *ms = cli_get(&a, "--max-streams");
  long long n;
  if (ms) {
    if (!cli_parse_int(ms, 1, 64, &n)) return cli_usage("--max-streams expects 1..64, got '%s'", ms);
    o.max_streams = (int)n;
  }
  const char *in = a.pos[0];
  char outbuf[4096];
  const char *out = cli_get(&a, "--output-file");
  size_t len = strlen(in);
  bool onnx = len > 5 && strcmp(in + len - 5, ".onnx") == 0;
  if (!out) {
    if (len > 6 && strcmp(in + len - 6, ".vmasm") == 0) snprintf(outbuf, sizeof outbuf, "%.*s.vmbc", (int)(len - 6), in);
    else if (onnx) snprintf(outbuf, sizeof outbuf, "%.*s.vmbc", (int)(len - 5), in);
    else snprintf(outbuf, sizeof outbuf, "%s.vmbc", in);
    out = outbuf;
  }
  uint8_t *bytes;
  size_t size;
  rill_status_t st;
  o.output_file = out; /* written from where the constants lie, no module buffer */
  if (onnx) {
    /* imported in memory: the module's own bytes, weights embedded */
    if (o.link_weights) return cli_usage("--link-weights needs a weights file: rill import the model first");
    st = cli_assemble_onnx(in, &o, &bytes, &size);
  } else {
    st = rill_assemble_file(NULL, in, &o, &bytes, &size);
  }
  if (st) return cli_fail(st);
  if (o.schedule && !strcmp(o.schedule, "ios") && !o.profile)
    fprintf(stderr, "rill: note: --schedule=ios chose stages by its cost model (give --profile=FILE from rill tune to use measured times)\n");
  if (bytes) rc = cli_write_file(out, bytes, size);
  free(bytes);
  return rc;
}

/* rill import IN.onnx [-o OUT.vmasm] [--shape NAME=N]...: OUT.safetensors beside OUT.vmasm */
static int cmd_import(int argc, char **argv) {
  static const cli_opt_t opts[] = {{"--output-file", "OUT.vmasm", "where the program goes, its weights in OUT.safetensors beside it (default: IN with .vmasm)"},
                                   {"-O0", NULL, "quantized ops and QDQ patterns as core ops (casts, integer matmul, f64 conv2d), not qmatmul and qconv2d"},
                                   CLI_OPT_SHAPE, CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "import");
  if (rc) return rc;
  if (a.npos != 1) return cli_usage("usage: rill import IN.onnx [-o OUT.vmasm] [--shape NAME=N]...");
  const char *why;
  if (!onnx_available(&why)) return cli_error(2, "import: %s", why);
  onnx_options_t o = {0};
  o.unfused_quant = cli_no_opt(&a);
  for (int i = 0; i < a.nopts; i++)
    if (!strcmp(a.opts[i].name, "--shape")) {
      char msg[256];
      if (!onnx_options_add_shape(&o, a.opts[i].value, msg, sizeof msg)) {
        onnx_options_free(&o);
        return cli_usage("%s", msg);
      }
    }
  const char *in = a.pos[0];
  char outbuf[4096];
  const char *out = cli_get(&a, "--output-file");
  if (!out) {
    size_t len = strlen(in);
    if (len > 5 && strcmp(in + len - 5, ".onnx") == 0) snprintf(outbuf, sizeof outbuf, "%.*s.vmasm", (int)(len - 5), in);
    else snprintf(outbuf, sizeof outbuf, "%s.vmasm", in);
    out = outbuf;
  }
  rill_status_t st = onnx_import_to_files(in, out, &o);
  onnx_options_free(&o);
  return st ? cli_fail(st) : 0;
}

static int cmd_dis(int argc, char **argv, bool verify_only) {
  static const cli_opt_t opts[] = {CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, verify_only ? "verify" : "dis");
  if (rc) return rc;
  if (a.npos != 1) return cli_usage("usage: rill %s IN.vmbc", verify_only ? "verify" : "dis");
  rill_module_t *m;
  rill_status_t st = cli_load_module(a.pos[0], NULL, &m);
  if (st) return cli_fail(st);
  if (verify_only) {
    printf("ok\n");
  } else {
    char *text;
    size_t len;
    st = rill_module_disassemble(m, &text, &len);
    if (!st) {
      fwrite(text, 1, len, stdout);
      free(text);
    }
  }
  rill_module_release(m);
  return st ? cli_fail(st) : 0;
}

static int cmd_version(int argc, char **argv) {
  static const cli_opt_t opts[] = {CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "version");
  if (rc) return rc;
  if (a.npos) return cli_usage("usage: rill version");
  printf("rill %s\n", rill_version_string());
  printf("bytecode format %d.%d\n", RILL_BYTECODE_MAJOR, RILL_BYTECODE_MINOR);
  printf("libuv %s\n", uv_version_string());
  const char *why = NULL;
  rill_cuda_info_t ci;
  if (rill_cuda_info(&ci, &why)) {
    printf("cuda: usable: %d device%s, cuda:0 is %s (sm_%d)\n", ci.device_count, ci.device_count == 1 ? "" : "s", ci.device_name,
           ci.compute_capability);
    printf("cuda driver %d.%d\nnvrtc %d.%d\ncublasLt %zu\ncudnn %zu\n", ci.driver_version / 1000, ci.driver_version % 1000 / 10,
           ci.nvrtc_major, ci.nvrtc_minor, ci.cublaslt_version, ci.cudnn_version);
  } else {
    printf("cuda: not usable: %s\n", why);
  }
  return 0;
}

/* ---- commands and their help ---- */
static int cmd_dis_only(int argc, char **argv) { return cmd_dis(argc, argv, false); }
static int cmd_verify(int argc, char **argv) { return cmd_dis(argc, argv, true); }
static int cmd_help(int argc, char **argv);

typedef struct cli_command {
  const char *name, *args, *what;
  int (*fn)(int argc, char **argv);
} cli_command_t;

static const cli_command_t COMMANDS[] = {
    {"asm", "IN", "assemble a program into a module (IN: .vmasm, or .onnx imported in memory)", cmd_asm},
    {"import", "IN.onnx", "an ONNX model as .vmasm text plus its weights as .safetensors", cmd_import},
    {"dis", "IN.vmbc", "print a module as lowered .vmasm (reassembling it gives the same bytes)", cmd_dis_only},
    {"verify", "IN.vmbc", "load and verify a module; prints ok", cmd_verify},
    {"run", "IN", "run a function once; print or check its results (IN: .vmasm, .vmbc or .onnx)", cli_run},
    {"bench", "IN", "time repeated runs: median, min and max, per-op figures (IN: .vmasm, .vmbc or .onnx)", cli_bench},
    {"tune", "IN -o PROFILE.json", "measure a program on the device for rill asm --profile: each op, the schedules, kernels per size", cli_tune},
    {"serve", "MODEL...", "serve models over HTTP with the KServe v2 inference protocol, batching concurrent requests "
                          "(MODEL: .vmasm, .vmbc or .onnx, named by its base name, or NAME=PATH)", cli_serve},
    {"llm", "DIR", "generate tokens with a Hugging Face model folder (config.json, safetensors; Llama, Mistral, Qwen2, GPT-2): "
                   "the prompt's ids in, the new ids out; or write the program with -o", cli_llm},
    {"launch", "-n N COMMAND...", "start N local processes of COMMAND (e.g. rill run) as the ranks of one job: RANK, WORLD_SIZE, "
                                  "LOCAL_RANK, MASTER_ADDR and MASTER_PORT set; its exit status is the first non-zero one", cli_launch},
    {"version", "", "versions of rill, the bytecode format and each library found", cmd_version},
    {"help", "[COMMAND]", "this help, or one command's", cmd_help},
};

static const cli_command_t *command(const char *name) {
  for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
    if (!strcmp(COMMANDS[i].name, name)) return &COMMANDS[i];
  return NULL;
}

/* Prints `text` from column `col`, wrapped at 100 columns. */
static void wrapped(const char *text, int col) {
  int at = col;
  while (*text) {
    size_t word = strcspn(text, " ");
    if (at > col && at + 1 + (int)word > 100) {
      printf("\n%*s", col, "");
      at = col;
    } else if (at > col) {
      putchar(' ');
      at++;
    }
    printf("%.*s", (int)word, text);
    at += (int)word;
    text += word;
    while (*text == ' ') text++;
  }
  putchar('\n');
}

void cli_help(const char *cmd, const cli_opt_t *opts) {
  const cli_command_t *c = command(cmd);
  printf("usage: rill %s%s%s%s\n", cmd, c && c->args[0] ? " " : "", c ? c->args : "", opts[0].name ? " [OPTIONS]" : "");
  if (c) {
    printf("  ");
    wrapped(c->what, 2);
  }
  if (opts[0].name) printf("options:\n");
  for (const cli_opt_t *o = opts; o->name; o++) {
    char head[96];
    int n = snprintf(head, sizeof head, "  %s%s%s%s", strcmp(o->name, "--output-file") ? "" : "-o, ", o->name, o->value ? "=" : "",
                     o->value ? o->value : "");
    if (n > 30) printf("%s\n%32s", head, "");
    else printf("%-32s", head);
    wrapped(o->help, 32);
  }
}

static void overview(FILE *f) {
  fprintf(f, "usage: rill COMMAND [ARGS] [OPTIONS]\n");
  for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++) fprintf(f, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].what);
  fprintf(f, "rill help COMMAND (or rill COMMAND --help): a command's options with their defaults; rill help: every command's.\n"
             "--timings (any command but launch; or RILL_TIMINGS=1): the time of each part of the start-up on stderr.\n"
             "Exit status: 0 success; 1 the program ran but failed; 2 bad usage or bad input.\n");
}

/* The parts that overlap the others, each a line apart, not added: the
 * preparing threads' sums (cuda) and a device's start in the background
 * (rill_device_start); their labels, or NULL for a part of the sum. */
static const char *apart(const char *name) {
  if (!strcmp(name, "threads")) return "preparing threads (summed, inside vm and first run)";
  if (!strcmp(name, "background")) return "device start in the background (summed over its threads, beside import and assembly)";
  return NULL;
}

/* --timings: the parts the library and the commands recorded (rill.h,
 * "Start-up timings"), one line per part with its own parts after a colon
 * (the slowest first, those under 0.05 ms counted), then the whole
 * command's time and what no part holds, and the process's start before
 * main where /proc tells it (before_ms < 0: not known). */
static void print_timings(double total_ms, double before_ms) {
  rill_timing_t t[96];
  int n = rill_timings(t, 96);
  if (n > 96) n = 96;
  double sum = 0;
  for (int i = 0; i < n; i++) {
    if (strchr(t[i].name, '/')) continue;
    size_t len = strlen(t[i].name);
    const char *label = apart(t[i].name);
    char line[1400];
    int o = snprintf(line, sizeof line, "rill: timings: %s %.1f ms", label ? label : t[i].name, t[i].ms);
    if (!label) sum += t[i].ms;
    if (t[i].count > 1) o += snprintf(line + o, sizeof line - (size_t)o, " (%ld times)", t[i].count);
    /* its parts, slowest first */
    int idx[96], k = 0;
    for (int j = 0; j < n; j++)
      if (!strncmp(t[j].name, t[i].name, len) && t[j].name[len] == '/') idx[k++] = j;
    for (int a = 1; a < k; a++)
      for (int b = a; b > 0 && t[idx[b]].ms > t[idx[b - 1]].ms; b--) {
        int x = idx[b];
        idx[b] = idx[b - 1];
        idx[b - 1] = x;
      }
    int shown = 0;
    for (int j = 0; j < k && t[idx[j]].ms >= 0.05 && o < (int)sizeof line - 80; j++, shown++)
      o += snprintf(line + o, sizeof line - (size_t)o, "%s%s %.1f", j ? ", " : ": ", t[idx[j]].name + len + 1, t[idx[j]].ms);
    if (shown < k) o += snprintf(line + o, sizeof line - (size_t)o, "%s%d more under 0.1", shown ? ", " : ": ", k - shown);
    fprintf(stderr, "%s\n", line);
  }
  fprintf(stderr, "rill: timings: total %.1f ms: the parts above %.1f ms, the rest %.1f ms\n", total_ms, sum, total_ms - sum);
  if (before_ms >= 0)
    fprintf(stderr, "rill: timings: before main %.0f ms (exec and the shared libraries loaded, in clock ticks: +-10 ms; not in the total, nor is the exit after)\n",
            before_ms);
}

/* How long the process ran before main (exec, the dynamic loader): its
 * start time in clock ticks since boot (/proc/self/stat's 22nd field)
 * against CLOCK_BOOTTIME; -1 where not known. */
static double before_main_ms(void) {
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return -1;
  char buf[1024];
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = 0;
  char *p = strrchr(buf, ')'); /* after the command's name, which may hold spaces */
  unsigned long long start = 0;
  for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
  struct timespec ts;
  long hz = sysconf(_SC_CLK_TCK);
  if (!p || sscanf(p, " %llu", &start) != 1 || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts)) return -1;
  double ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6 - (double)start * 1e3 / (double)hz;
  return ms >= 0 ? ms : -1;
}

static double wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* rill help [COMMAND]: a command's help is what `rill COMMAND --help`
 * prints; without one, the overview and then every command's. */
static int cmd_help(int argc, char **argv) {
  static const cli_opt_t opts[] = {CLI_OPT_END};
  static cli_args_t a;
  int rc = cli_parse(argc, argv, opts, &a, "help");
  if (rc) return rc;
  if (a.npos > 1) return cli_usage("usage: rill help [COMMAND]");
  if (a.npos && !command(a.pos[0])) return cli_usage("unknown command '%s' (rill help lists them)", a.pos[0]);
  if (!a.npos) overview(stdout);
  char help_arg[] = "--help";
  char *args[] = {help_arg, NULL};
  for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
    if (!a.npos || !strcmp(COMMANDS[i].name, a.pos[0])) {
      if (!a.npos) printf("\n");
      COMMANDS[i].fn(1, args);
    }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    overview(stderr);
    return 2;
  }
  const char *name = argv[1];
  if (!strcmp(name, "--version")) name = "version";
  if (!strcmp(name, "--help") || !strcmp(name, "-h")) name = "help";
  const cli_command_t *c = command(name);
  if (!c) {
    overview(stderr);
    return cli_usage("unknown command '%s'", argv[1]);
  }
  /* --timings anywhere (but in the command rill launch starts), or RILL_TIMINGS=1 */
  double t0 = wall_ms();
  const char *env = getenv("RILL_TIMINGS");
  double before_ms = -1;
  bool timings = env && *env && strcmp(env, "0") != 0;
  if (strcmp(name, "launch") != 0) {
    int k = 2;
    for (int i = 2; i < argc; i++) {
      if (!strcmp(argv[i], "--timings")) timings = true;
      else argv[k++] = argv[i];
    }
    argv[k] = NULL;
    argc = k;
  }
  if (timings) before_ms = before_main_ms() - (wall_ms() - t0);
  rill_timings_record(timings);
  int rc = c->fn(argc - 2, argv + 2);
  if (timings && rc != CLI_HELP) print_timings(wall_ms() - t0, before_ms);
  return rc == CLI_HELP ? 0 : rc;
}
