/* helpers.c: see helpers.h. */
#include "helpers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counts an allocation; whether it is the one (or, without `once`, one of those) to fail. */
static bool ta_fails(test_alloc_t *t) {
  long k = atomic_fetch_add(&t->count, 1) + 1;
  return t->fail_at && (t->once ? k == t->fail_at : k >= t->fail_at);
}
static void *ta_alloc(void *self, size_t n) {
  test_alloc_t *t = self;
  if (ta_fails(t)) return NULL;
  void *p = malloc(n);
  if (p) atomic_fetch_add(&t->live, 1);
  return p;
}
static void *ta_realloc(void *self, void *p, size_t n) {
  test_alloc_t *t = self;
  if (!p) return ta_alloc(self, n);
  return ta_fails(t) ? NULL : realloc(p, n);
}
static void ta_free(void *self, void *p) {
  test_alloc_t *t = self;
  if (!p) return;
  atomic_fetch_sub(&t->live, 1);
  free(p);
}
void test_alloc_init(test_alloc_t *t, long fail_at) {
  t->base = (rill_allocator_t){t, ta_alloc, ta_realloc, ta_free};
  atomic_init(&t->live, 0);
  atomic_init(&t->count, 0);
  t->fail_at = fail_at;
  t->once = false;
}

rill_status_t asm_text(const char *src, uint8_t **bytes, size_t *size) {
  return rill_assemble(NULL, "t.vmasm", src, strlen(src), NULL, bytes, size);
}

void expect_asm_error(const char *src, int line, const char *needle) {
  uint8_t *b = NULL;
  size_t n = 0;
  rill_status_t st = asm_text(src, &b, &n);
  ck_assert_msg(st != NULL, "expected an assembly error containing '%s'", needle);
  const char *msg = rill_status_message(st);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "t.vmasm:%d:", line);
  ck_assert_msg(strncmp(msg, prefix, strlen(prefix)) == 0, "want line %d, got: %s", line, msg);
  ck_assert_msg(strstr(msg, ": error: ") != NULL, "no ': error: ' in: %s", msg);
  ck_assert_msg(strstr(msg, needle) != NULL, "want '%s' in: %s", needle, msg);
  ck_assert_int_eq(rill_status_code(st), RILL_ASSEMBLY_ERROR);
  rill_status_free(st);
}

void expect_escaped(rill_status_t st, const char *needle) {
  ck_assert_msg(st != NULL, "expected an error containing '%s'", needle);
  const char *msg = rill_status_message(st);
  size_t n = strlen(msg);
  ck_assert_msg(strstr(msg, needle) != NULL, "want '%s' in: %s", needle, msg);
  for (size_t i = 0; i < n; i++) ck_assert_msg((uint8_t)msg[i] >= 0x20 && msg[i] != 0x7f, "raw byte 0x%02x at %zu", (uint8_t)msg[i], i);
  char *again = malloc(4 * n + 1);
  ck_assert(again != NULL);
  ck_assert_str_eq(rill_escape(msg, n, again, 4 * n + 1), msg);
  free(again);
  rill_status_free(st);
}

rill_status_t run_text(const char *src, rill_tensor_t *const *inputs, int n, rill_tensor_t ***results, int *nresults,
                       rill_vm_t **vm, rill_module_t **mod) {
  uint8_t *b;
  size_t sz;
  rill_status_t st = asm_text(src, &b, &sz);
  if (st) return st;
  st = rill_module_load(NULL, b, sz, ".", mod);
  free(b);
  if (st) return st;
  if ((st = rill_vm_create(NULL, *mod, "cpu", vm))) return st;
  return rill_vm_invoke(*vm, "main", inputs, n, results, nresults);
}

rill_status_t run_op(const char *name, const op_io_t *in, uint32_t nin, const isa_attr_t *attrs, uint32_t nattrs,
                     op_io_t *out, uint32_t max_out, uint32_t *nout) {
  const ops_def_t *def = ops_find(name);
  ck_assert_msg(def != NULL, "no op %s", name);
  rill_type_t it[16], ot[16];
  for (uint32_t i = 0; i < nin; i++) it[i] = in[i].type;
  ops_plan_t plan;
  rill_status_t st = ops_infer(def, it, nin, attrs, nattrs, ot, max_out, nout, &plan.p);
  if (st) return st;
  isa_opdecl_t decl = {name, nattrs, nin, *nout, (isa_attr_t *)attrs, it, ot};
  plan.def = def;
  plan.decl = &decl;
  void *ip[16], *op[16];
  for (uint32_t i = 0; i < nin; i++) ip[i] = in[i].data;
  for (uint32_t i = 0; i < *nout; i++) {
    size_t bytes = rill_type_numel(&ot[i]) * rill_dtype_size(ot[i].dtype);
    out[i].type = ot[i];
    out[i].data = calloc(bytes ? bytes : 1, 1);
    op[i] = out[i].data;
  }
  return def->cpu(&plan, ip, op);
}

void op_io_free(op_io_t *o, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) free(o[i].data);
}

rill_type_t T(rill_dtype_t d, int rank, ...) {
  rill_type_t t = {d, rank, {0}};
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) t.dims[i] = va_arg(ap, int);
  va_end(ap);
  return t;
}

op_io_t tensor_f(rill_type_t t, const double *vals) {
  size_t n = rill_type_numel(&t);
  op_io_t o = {t, calloc(n * rill_dtype_size(t.dtype) + 1, 1)};
  for (size_t i = 0; vals && i < n; i++) rill_element_set(t.dtype, o.data, i, vals[i]);
  return o;
}

double at_f(const op_io_t *o, size_t i) { return rill_element_get(o->type.dtype, o->data, i); }

/* Attribute values live in a static pool, so tests leak nothing. */
static int64_t int_pool[1 << 16];
static double float_pool[1 << 12];
static size_t int_used, float_used;
static int64_t *dup_ints(int n, const int64_t *v) {
  ck_assert(int_used + (size_t)n + 1 <= sizeof int_pool / sizeof int_pool[0]);
  int64_t *p = int_pool + int_used;
  int_used += (size_t)n + 1;
  if (n) memcpy(p, v, sizeof(int64_t) * (size_t)n);
  return p;
}
isa_attr_t attr_ints(const char *name, int n, const int64_t *v) {
  return (isa_attr_t){name, ISA_ATTR_INTS, (uint32_t)n, dup_ints(n, v), NULL, NULL};
}
isa_attr_t attr_int(const char *name, int64_t v) { return (isa_attr_t){name, ISA_ATTR_INT, 1, dup_ints(1, &v), NULL, NULL}; }
isa_attr_t attr_bool(const char *name, bool v) {
  int64_t x = v;
  return (isa_attr_t){name, ISA_ATTR_BOOL, 1, dup_ints(1, &x), NULL, NULL};
}
isa_attr_t attr_float(const char *name, double v) {
  ck_assert(float_used < sizeof float_pool / sizeof float_pool[0]);
  double *f = &float_pool[float_used++];
  *f = v;
  return (isa_attr_t){name, ISA_ATTR_FLOAT, 1, NULL, f, NULL};
}

int test_devices(const char *suite, const char **out) {
  static int said;
  int n = 0;
  out[n++] = "cpu";
  const char *why = NULL;
  if (rill_device_usable("cuda", &why)) out[n++] = "cuda";
  else if (!said++) printf("%s: cuda skipped: %s\n", suite, why);
  return n;
}

int run_suite(Suite *s) {
  SRunner *r = srunner_create(s);
  srunner_run_all(r, CK_NORMAL);
  int failed = srunner_ntests_failed(r);
  srunner_free(r);
  return failed ? 1 : 0;
}

void add_test_case(Suite *s, const TTest *test, double timeout_s) {
  TCase *t = tcase_create(test->name);
  tcase_set_timeout(t, timeout_s);
  tcase_add_test(t, test);
  suite_add_tcase(s, t);
}

int run_one_test(const char *name, const TTest *test, double timeout_s) {
  Suite *s = suite_create(name);
  add_test_case(s, test, timeout_s);
  return run_suite(s);
}

const char *conformance_dir(void) { return RILL_CONFORMANCE_DIR; }
bool have_conformance(const char *test) {
  char p[4200];
  snprintf(p, sizeof p, "%s/run.sh", RILL_CONFORMANCE_DIR);
  FILE *f = fopen(p, "r");
  if (f) {
    fclose(f);
    return true;
  }
  printf("%s: skipped its conformance part: %s not found\n", test, RILL_CONFORMANCE_DIR);
  return false;
}
const char *fixtures_dir(void) { return RILL_FIXTURES_DIR; }

void check_damaged_module(const uint8_t *b, size_t n, const uint8_t *masks, int nmasks) {
  for (size_t len = 0; len < n; len++) {
    rill_module_t *mm = NULL;
    rill_status_t st = rill_module_load(NULL, b, len, ".", &mm);
    ck_assert_msg(st != NULL, "truncation to %zu bytes was accepted", len);
    rill_status_free(st);
  }
  uint8_t *c = malloc(n);
  ck_assert_ptr_nonnull(c);
  for (size_t i = 0; i < n; i++)
    for (int x = 0; x < nmasks; x++) {
      memcpy(c, b, n);
      c[i] ^= masks[x];
      rill_module_t *mm = NULL;
      rill_status_t st = rill_module_load(NULL, c, n, ".", &mm);
      if (!st) { /* whatever loads must disassemble */
        char *txt;
        size_t tl;
        ck_assert(!rill_module_disassemble(mm, &txt, &tl));
        free(txt);
      }
      rill_status_free(st);
      rill_module_release(mm);
    }
  free(c);
}
