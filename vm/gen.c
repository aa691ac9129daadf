/* gen.c: generation sessions (rill.h, "Generation").
 *
 * A session runs a function that emits (op emit: a record of tokens into
 * the VM's token channel, ops.h's ops_chan_t) on a thread of its own, with
 * rill_vm_invoke, so the run is interpreted or replayed as a graph like any
 * other; the caller takes the records from the channel as the device
 * publishes them (the head is read with acquire, each record copied, then
 * the head read again: a record overwritten meanwhile, the ring having
 * lapped the reader, is an error rather than a wrong token). Cancel sets
 * the channel's flag, which the next emit returns as false: the program's
 * loop condition ends the run, in a graph too. One session at a time per
 * VM (one reader of the channel).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "vm.h"

struct rill_gen {
  rill_vm_t *vm;
  char *function;
  rill_tensor_t **inputs;
  int ninputs;
  pthread_t thread;
  bool joined;
  atomic_bool finished;        /* the run has ended (status and results set) */
  rill_status_t status;
  rill_tensor_t **results;
  int nresults;
  uint64_t first, next;        /* the channel's head when the session began; the next record to read */
  int64_t *buf;                /* one record's values */
  rill_run_counts_t c0;        /* the VM's counts when it began */
  double t0_us, first_us;      /* the start; the first record's arrival (0: none yet) */
};

static void *gen_main(void *arg) {
  rill_gen_t *g = arg;
  g->status = rill_vm_invoke(g->vm, g->function, g->inputs, g->ninputs, &g->results, &g->nresults);
  atomic_store_explicit(&g->finished, true, memory_order_release);
  return NULL;
}

rill_status_t rill_gen_start(rill_vm_t *vm, const char *function, rill_tensor_t *const *inputs, int ninputs, rill_gen_t **out) {
  ops_chan_t *ch = &vm->chan;
  if (!ch->hdr) return rill__status(RILL_INVALID_ARGUMENT, "a generation session needs a module that emits tokens (emit(%%tokens)); this one has no emit");
  if (ninputs < 0 || (ninputs && !inputs)) return rill__status(RILL_INVALID_ARGUMENT, "bad inputs");
  bool idle = false;
  if (!atomic_compare_exchange_strong(&vm->gen_active, &idle, true))
    return rill__status(RILL_INVALID_ARGUMENT, "a generation session is already running on this VM (one at a time: they share its token channel)");
  rill_gen_t *g = rill__calloc(vm->a, 1, sizeof *g);
  rill_status_t st = g ? NULL : rill__oom();
  size_t fl = function ? strlen(function) : 0;
  if (!st && (!function || !(g->function = rill__alloc(vm->a, fl + 1)))) st = function ? rill__oom() : rill__status(RILL_INVALID_ARGUMENT, "no function");
  if (!st && ninputs && !(g->inputs = rill__calloc(vm->a, (size_t)ninputs, sizeof *g->inputs))) st = rill__oom();
  if (!st && !(g->buf = rill__calloc(vm->a, ch->width ? ch->width : 1, sizeof(int64_t)))) st = rill__oom();
  if (st) {
    if (g) {
      rill__free(vm->a, g->function);
      rill__free(vm->a, g->inputs);
      rill__free(vm->a, g->buf);
      rill__free(vm->a, g);
    }
    atomic_store(&vm->gen_active, false);
    return st;
  }
  memcpy(g->function, function, fl + 1);
  g->vm = vm;
  g->ninputs = ninputs;
  for (int i = 0; i < ninputs; i++) {
    g->inputs[i] = inputs[i];
    if (inputs[i]) rill_tensor_retain(inputs[i]);
  }
  __atomic_store_n(&ch->hdr->cancel, 0, __ATOMIC_RELEASE);
  g->first = g->next = __atomic_load_n(&ch->hdr->head, __ATOMIC_ACQUIRE);
  rill_vm_run_counts(vm, &g->c0);
  g->t0_us = rill__now_us();
  atomic_init(&g->finished, false);
  if (pthread_create(&g->thread, NULL, gen_main, g) != 0) {
    g->joined = true;
    rill_gen_destroy(g);
    return rill__status(RILL_UNAVAILABLE, "cannot start a thread for the session");
  }
  *out = g;
  return NULL;
}

rill_status_t rill_gen_poll(rill_gen_t *g, rill_gen_record_cb cb, void *user, bool *out_done) {
  const ops_chan_t *ch = &g->vm->chan;
  bool finished = atomic_load_explicit(&g->finished, memory_order_acquire);
  uint64_t head = __atomic_load_n(&ch->hdr->head, __ATOMIC_ACQUIRE);
  if (out_done) *out_done = false;
  while (g->next < head) {
    if (head - g->next > ch->cap)
      return rill__status(RILL_RUNTIME_ERROR, "the token channel overflowed: %llu records were overwritten before they were read (it holds %llu)",
                          (unsigned long long)(head - g->next - ch->cap), (unsigned long long)ch->cap);
    const volatile int64_t *rec = ch->ring + (g->next % ch->cap) * (1 + (uint64_t)ch->width);
    int64_t n = rec[0];
    if (n < 0 || n > (int64_t)ch->width) return rill__status(RILL_INTERNAL, "a token record of %lld values", (long long)n);
    for (int64_t i = 0; i < n; i++) g->buf[i] = rec[1 + i];
    head = __atomic_load_n(&ch->hdr->head, __ATOMIC_ACQUIRE);
    if (head - g->next > ch->cap)
      return rill__status(RILL_RUNTIME_ERROR, "the token channel overflowed: a record was overwritten while it was read (it holds %llu)",
                          (unsigned long long)ch->cap);
    if (!g->first_us) g->first_us = rill__now_us();
    if (cb) cb(user, g->next - g->first, g->buf, (int)n);
    g->next++;
  }
  if (out_done) *out_done = finished && g->next == __atomic_load_n(&ch->hdr->head, __ATOMIC_ACQUIRE);
  return NULL;
}

rill_status_t rill_gen_wait(rill_gen_t *g, rill_gen_record_cb cb, void *user, rill_tensor_t ***out_results, int *out_nresults) {
  bool done = false;
  rill_status_t st = NULL;
  unsigned idle = 0;
  while (!st && !done) {
    uint64_t before = g->next;
    st = rill_gen_poll(g, cb, user, &done);
    if (st || done) break;
    /* Poll closely while records come, then back off to 1 ms. */
    idle = g->next != before ? 0 : idle + 1;
    struct timespec ts = {0, idle < 64 ? 20000 : idle < 512 ? 200000 : 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
  }
  if (st) rill_gen_cancel(g); /* the run stops at its next emit */
  if (!g->joined) {
    pthread_join(g->thread, NULL);
    g->joined = true;
  }
  if (!st && g->status) {
    st = g->status;
    g->status = NULL;
  }
  if (!st && out_results) {
    *out_results = g->results;
    *out_nresults = g->nresults;
    g->results = NULL;
    g->nresults = 0;
  }
  return st;
}

void rill_gen_cancel(rill_gen_t *g) { __atomic_store_n(&g->vm->chan.hdr->cancel, 1, __ATOMIC_RELEASE); }

void rill_gen_info(rill_gen_t *g, rill_gen_info_t *out) {
  rill_run_counts_t c;
  rill_vm_run_counts(g->vm, &c);
  out->records = g->next - g->first;
  out->host_waits = c.host_waits - g->c0.host_waits;
  out->graph_launches = c.graph_launches - g->c0.graph_launches;
  out->runs = c.runs - g->c0.runs;
  out->first_record_ms = g->first_us ? (g->first_us - g->t0_us) * 1e-3 : -1;
  out->finished = atomic_load(&g->finished);
}

void rill_gen_destroy(rill_gen_t *g) {
  if (!g) return;
  rill_vm_t *vm = g->vm;
  if (!g->joined) {
    rill_gen_cancel(g);
    pthread_join(g->thread, NULL);
  }
  rill_status_free(g->status);
  if (g->results) rill_results_free(vm, g->results, g->nresults);
  for (int i = 0; i < g->ninputs; i++)
    if (g->inputs[i]) rill_tensor_release(g->inputs[i]);
  rill__free(vm->a, g->inputs);
  rill__free(vm->a, g->function);
  rill__free(vm->a, g->buf);
  rill__free(vm->a, g);
  atomic_store(&vm->gen_active, false);
}
