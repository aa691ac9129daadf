/* cli.h: shared pieces of the rill command. */
#ifndef RILL_TOOLS_CLI_H
#define RILL_TOOLS_CLI_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "rill.h"

#define CLI_MAX_POS 8

/* One option of a command: the parser accepts exactly the options of the
 * command's table, and its help is printed from the same table, so the two
 * cannot drift apart. */
typedef struct cli_opt {
  const char *name;   /* "--device", "-O0" */
  const char *value;  /* what its value is ("N", "FILE"); NULL for an option without one */
  const char *help;   /* what it does, with its default */
} cli_opt_t;
#define CLI_OPT_END {NULL, NULL, NULL}

/* A command's parsed line. opts has a place for each word of the line (a
 * model may take thousands of --input and --output options); commands
 * keep their cli_args_t static, so the list lasts as long as the process
 * and a second parse reuses it. */
typedef struct cli_args {
  const char *pos[CLI_MAX_POS];
  int npos;
  struct cli_kv { const char *name, *value; } *opts;
  int nopts;
} cli_args_t;

/* Returns 0, an exit code (2) after a message, or CLI_HELP after printing
 * the command's help for --help or -h (the command then exits 0). */
#define CLI_HELP (-1)
int cli_parse(int argc, char **argv, const cli_opt_t *opts, cli_args_t *out, const char *cmd);
const char *cli_get(const cli_args_t *a, const char *name);   /* the last value given */
/* Without --parallel-form: a split for N (--tensor-, --data- or --pipeline-parallel)
 * takes the device form where `device` names N devices outside a job. */
void cli_parallel_form(const cli_args_t *a, rill_asm_options_t *o, const char *device, bool in_job);
/* Options several commands share, with their help. */
/* -O0 / -O1 (the last one given; -O1 by default): whether .vmasm is assembled without optimising passes. */
#define CLI_OPT_LEVELS \
  {"-O0", NULL, "assemble .vmasm and .onnx without the optimising passes (constant folding, fusion, layouts)"}, \
  {"-O1", NULL, "assemble with the optimising passes (the default)"}, \
  {"--precision", "exact|tf32|f16|bf16", "assembling: exact computes each dtype as written (the default); tf32 lets f32 convolutions and " \
                                          "matmuls use TF32 tensor cores; f16 and bf16 run an f32 program in half (accumulation, softmax, " \
                                          "norms and reductions in f32)"}, \
  {"--tensor-parallel", "N", "assembling: split the program's attention and MLP blocks and vocabulary head over a job of N ranks " \
                             "(Megatron-style; each rank reads only its part of each weight); run it as N ranks, e.g. rill launch -n N (default 1)"}, \
  {"--data-parallel", "N", "assembling: each of a job's N ranks computes its rows of the batch (axis 0 of the parameters: blocks where N " \
                           "divides it, else, a symbolic batch too, dealt round robin), the results gathered in order; a state whose first " \
                           "size is the batch split with it (default 1)"}, \
  {"--pipeline-parallel", "N", "assembling: cut @main into N stages of about equal cost, rank k of a job of N computing stage k and " \
                               "holding only its weights, activations passed on with send/recv; every rank returns the results (default 1)"}, \
  {"--micro-batches", "M", "with --pipeline-parallel: cut the batch (axis 0 of the parameters) into M micro-batches that flow " \
                           "through the stages one after another (default N)"}, \
  {"--parallel-form", "ranks|devices", "with --tensor-parallel=N or --data-parallel=N: ranks makes a module for a job of N ranks " \
                                       "(rill launch -n N); devices one for a single process with a VM of N devices (--device=cuda:0,cuda:1), " \
                                       "device d holding part d (default: devices where --device names N devices and no job is running, else ranks)"}
#define CLI_OPT_SHAPE \
  {"--shape", "NAME=N|NAME=LO..HI|NAME=[D,...]", "for .onnx: fix a symbolic input dimension (dim_param NAME), or give its range (default: a shape " \
                                                "variable); a sequence input's length (NAME=K, its items NAME[0], ...), an optional's presence " \
                                                "(NAME=1 or 0), or an input's whole shape (NAME=[D,...], NAME[i]=[D,...] for an item)"}
#define CLI_OPT_DEVICE {"--device", "D", "cpu, cuda or cuda:N; several: cpu:0,cpu:1,... or cuda:0,cuda:1,... (default: cuda where a GPU is usable, else cpu)"}
#define CLI_OPT_FUNCTION {"--function", "NAME", "the function to run (default main)"}
#define CLI_OPT_INPUT(MISSING) \
  {"--input", "SPEC", "the next parameter's value: @FILE.npy or TYPE=VALUES (e.g. 'f32[2,2]=1 2 3 4', 'f16[8]=random'); repeatable; " MISSING}
#define CLI_OPT_SEED {"--seed", "N", "seed of the random values (default 0)"}
#define CLI_OPT_GRAPH \
  {"--graph", "auto|on|off", "replay runs as device graphs: on (an error where the program cannot be captured), off, or auto (where it can; the default)"}
#define CLI_OPT_GRAPH_BUCKETS \
  {"--graph-buckets", "NAME=S1,S2,...", "graph mode: the sizes of shape variable NAME that get a graph; other sizes run padded to the next (default: one graph per size); repeatable"}
#define CLI_OPT_TRACE {"--trace", "FILE.json", "write a Chrome trace (Perfetto) of the runs: ops per stream, event arrows"}
#define CLI_OPT_CHECK_STREAMS {"--check-streams", NULL, "fail at the first two buffer accesses that no event orders"}
#define CLI_OPT_ITERATIONS(DEFAULT) {"--iterations", "N", "timed runs (default " DEFAULT ")"}
/* Ranks (tools/cli_job.c): this process as rank R of a job of N. */
#define CLI_OPT_RANKS \
  {"--ranks", "N", "run as one rank of a job of N processes running the same module (default: the variables a launcher sets: " \
                   "WORLD_SIZE, OMPI_COMM_WORLD_SIZE or SLURM_NTASKS; else 1, alone)"}, \
  {"--rank", "R", "this process's rank, 0..N-1 (default: RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)"}, \
  {"--rendezvous", "tcp://HOST:PORT", "where the ranks meet: rank 0 listens there, the others connect (default: MASTER_ADDR and MASTER_PORT)"}, \
  {"--collective-timeout", "SECONDS", "with ranks: how long the rendezvous and each exchange wait for the other ranks before failing " \
                                      "with the ranks that did not arrive or answer (default 300)"}
/* The job the rank options or a launcher's variables ask for, into *o (its
 * host valid until the next call); *in_job false for a process alone. An exit code. */
int cli_job_options(const cli_args_t *a, rill_job_options_t *o, bool *in_job);
/* Meets the other ranks with m's hash; an exit code (2: the rendezvous failed). */
int cli_job_join(const rill_job_options_t *o, rill_module_t *m, rill_job_t **out);
/* A rank's end: with rc 0 waits for every rank (a rank that died or failed
 * meanwhile is an error, 1), else aborts the job; the exit code. job may be NULL. */
int cli_job_end(rill_job_t *job, int rc);
/* An output path (--output=@PATH, --trace) for this rank: %r is replaced
 * by the rank; in a job of several ranks a path without %r is rank 0's
 * only (NULL on the others). */
const char *cli_rank_path(const char *path, int rank, int nranks, char *buf, size_t size);
int cli_launch(int argc, char **argv);
bool cli_no_opt(const cli_args_t *a);
/* The assembly options of CLI_OPT_LEVELS (-O0/-O1, --precision) into *o; an exit code. */
int cli_asm_options(const cli_args_t *a, rill_asm_options_t *o);
bool cli_parse_int(const char *s, long long lo, long long hi, long long *out);
int cli_fail(rill_status_t st);                                /* prints, frees, returns the exit code */
int cli_fail_in(const char *context, rill_status_t st);       /* the same, the message after "CONTEXT: " */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the message and returns `code`: 1 for what went wrong in a run
 * (memory running out), 2 for bad usage or input. */
int cli_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* .vmasm or .onnx: source assembled in memory (schedules can be chosen again) */
bool cli_is_source(const char *path);
/* Takes the --shape NAME=N options for .onnx inputs; an exit code. */
int cli_take_shapes(const cli_args_t *a);
rill_status_t cli_assemble_onnx(const char *path, const rill_asm_options_t *o, uint8_t **out, size_t *out_size);
rill_status_t cli_load_module(const char *path, const rill_asm_options_t *o, rill_module_t **out);
int cli_write_file(const char *path, const void *data, size_t size);  /* atomic; exit code */
/* --graph=auto|on|off (default auto) into *out; an exit code. */
int cli_graph_mode(const cli_args_t *a, rill_graph_mode_t *out);
/* --graph-buckets=NAME=S1,S2,... (repeatable, at most CLI_BUCKETS_MAX sizes
 * each) set on vm; an exit code. With want, that variable's sizes as given
 * into got (room for CLI_BUCKETS_MAX), their count in *ngot (0: none given). */
#define CLI_BUCKETS_MAX 64
int cli_graph_buckets(const cli_args_t *a, rill_vm_t *vm, const char *want, int64_t *got, int *ngot);
/* A tensor in host memory (specs, results). */
typedef struct cli_tensor {
  rill_type_t type;
  void *data;
  size_t nbytes;
} cli_tensor_t;
/* Parses @FILE.npy or TYPE=VALUES (spec/cli.md) into a host tensor (data
 * malloc'd, freed by the caller even on failure); an exit code. `what`
 * names the option in messages. */
int cli_parse_spec(const char *what, const char *spec, cli_tensor_t *out);
/* "LABEL: TYPE = [...]", abbreviated past 1000 elements as numpy does. */
void cli_print_tensor(FILE *f, const char *label, const cli_tensor_t *h);
/* Whether result `index` matches `want` within the tolerances (the dtype's
 * defaults unless tol_given); says why not on stderr, and how close on stdout. */
bool cli_check_result(int index, const cli_tensor_t *got, const cli_tensor_t *want, double rtol, double atol, bool tol_given);
/* A status from running a program: prints it; 2 where the fault is the
 * input's (an argument, a file), else 1. */
int cli_fail_run(rill_status_t st);
/* Prints a command's help from its option table (stdout). */
void cli_help(const char *cmd, const cli_opt_t *opts);
/* Prints the device's plan cache warning (rill: warning: ...), if it has one. */
void cli_cache_warning(rill_vm_t *vm);
int cli_run(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_tune(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_llm(int argc, char **argv);

#endif
