/* cli.h: shared pieces of the rill command. */
#ifndef RILL_TOOLS_CLI_H
#define RILL_TOOLS_CLI_H

#include <stdarg.h>
#include <stdbool.h>

#include "rill.h"

#define CLI_MAX_POS 8
#define CLI_MAX_OPTS 256

typedef struct cli_opt {
  const char *name;
  bool takes_value;
} cli_opt_t;

typedef struct cli_args {
  const char *pos[CLI_MAX_POS];
  int npos;
  struct { const char *name, *value; } opts[CLI_MAX_OPTS];
  int nopts;
} cli_args_t;

int cli_parse(int argc, char **argv, const cli_opt_t *opts, cli_args_t *out, const char *cmd);
const char *cli_get(const cli_args_t *a, const char *name);   /* the last value given */
/* -O0 / -O1 (the last one given; -O1 by default): whether .vmasm is assembled without optimising passes. */
#define CLI_OPT_LEVELS {"-O0", false}, {"-O1", false}
bool cli_no_opt(const cli_args_t *a);
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
int cli_run(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_tune(int argc, char **argv);

#endif
