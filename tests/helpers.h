/* helpers.h: shared by the Check suites. */
#ifndef RILL_TESTS_HELPERS_H
#define RILL_TESTS_HELPERS_H

#include <check.h>
#include <stdatomic.h>

#include "ops/ops.h"
#include "rill.h"

/* An allocator that counts live blocks and can fail the Nth allocation. */
typedef struct test_alloc {
  rill_allocator_t base;
  atomic_long live, count;
  long fail_at; /* 1-based; 0: never */
  bool once;    /* fail only that allocation, not every one from it on */
} test_alloc_t;
void test_alloc_init(test_alloc_t *t, long fail_at);

/* Assembles source text; returns the status (NULL on success). */
rill_status_t asm_text(const char *src, uint8_t **bytes, size_t *size);
/* Asserts that assembling fails with FILE:LINE:COL: error: ... containing `needle`. */
void expect_asm_error(const char *src, int line, const char *needle);
/* Asserts that st failed with a message containing `needle` and safe to
 * print: no raw control byte and valid UTF-8 (escaping it changes nothing);
 * frees st. */
void expect_escaped(rill_status_t st, const char *needle);
/* Assembles, loads and runs @main on the CPU with the given inputs. */
rill_status_t run_text(const char *src, rill_tensor_t *const *inputs_host_types, int n,
                       rill_tensor_t ***results, int *nresults, rill_vm_t **vm, rill_module_t **mod);

/* Runs one op through the registry's inference and CPU kernel. */
typedef struct op_io {
  rill_type_t type;
  void *data;
} op_io_t;
rill_status_t run_op(const char *name, const op_io_t *in, uint32_t nin, const isa_attr_t *attrs, uint32_t nattrs,
                     op_io_t *out, uint32_t max_out, uint32_t *nout);
void op_io_free(op_io_t *o, uint32_t n);

rill_type_t T(rill_dtype_t d, int rank, ...);
/* A tensor of dtype d filled from doubles. */
op_io_t tensor_f(rill_type_t t, const double *vals);
double at_f(const op_io_t *o, size_t i);
isa_attr_t attr_ints(const char *name, int n, const int64_t *v);
isa_attr_t attr_int(const char *name, int64_t v);
isa_attr_t attr_float(const char *name, double v);
isa_attr_t attr_bool(const char *name, bool v);

/* Module bytes damaged every way: each truncation must be refused; each
 * byte XORed with each of masks must be refused or load and disassemble
 * (never a crash). */
void check_damaged_module(const uint8_t *b, size_t n, const uint8_t *masks, int nmasks);

/* The devices a suite runs on: cpu, and cuda where a GPU is usable (else
 * "SUITE: cuda skipped: WHY" is printed once); out has room for 2. */
int test_devices(const char *suite, const char **out);

/* Runs a suite; returns the process exit status. */
int run_suite(Suite *s);
/* A case of its own in S, named after TEST (CK_RUN_CASE=name runs it alone). */
void add_test_case(Suite *s, const TTest *test, double timeout_s);
/* A suite of one test, with its timeout in seconds; the exit status for main. */
int run_one_test(const char *name, const TTest *test, double timeout_s);
const char *conformance_dir(void);
/* Whether ../shared/conformance is there; prints a skip note when it is not. */
bool have_conformance(const char *test);
const char *fixtures_dir(void);

#endif
