/* interp.c: the interpreter and its libuv integration.
 *
 * A run interprets frames until the entry function returns or a host wait
 * suspends it. A host wait enqueues a copy of the value's first bytes and a
 * host callback on the current stream; the callback (on a device thread)
 * pushes the run's wake-up under a lock and calls uv_async_send, which
 * coalesces; the loop drains the queue and resumes the run where it stopped.
 * The end of a run is one more host callback on its stream 0, so the
 * results are complete when the caller's callback sees them.
 *
 * The interpreter trusts the verifier: operands, types and definedness are
 * not checked here. Dispatch is computed goto (GCC, Clang) with a switch
 * fallback, both generated from opcodes.def.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "rill_config.h"
#include "vm.h"

#if defined(__GNUC__) && RILL_USE_COMPUTED_GOTO && !defined(RILL_NO_COMPUTED_GOTO)
#define RILL_COMPUTED_GOTO 1
#endif

typedef struct frame {
  const isa_func_t *f;
  uint32_t pc;
  vm_obj_t **regs;
  int base, cur;               /* device streams: the function's stream 0, the current one */
  const uint32_t *ret_list;    /* in the caller's code: count, then result registers */
  vm_event_t *ev[ISA_MAX_EVENTS];
} frame_t;

typedef struct vm_run {
  rill_vm_t *vm;
  uv_async_t async;
  pthread_mutex_t mu;
  bool woken;                  /* a device callback arrived (guarded by mu) */
  double woken_us;             /* when (guarded by mu; 0: not recorded) */
  rill_status_t dev_error;     /* its error (guarded by mu) */
  bool finishing;              /* the entry function returned; waiting for the device */
  RILL_VEC(frame_t) frames;
  int streams[ISA_MAX_STREAMS];/* device streams for local streams 1.. (run-wide); -1: none */
  int entry_stream;
  uint64_t backedges;
  rill_status_t status;
  rill_tensor_t **results;
  int nresults;
  rill_invoke_cb cb;
  void *user;
  RILL_VEC(void *) ptrs;       /* scratch for op operands */
  RILL_VEC(vm_obj_t *) keep;
  RILL_VEC(vm_obj_t *) deferred; /* operands kept until the run ends, for devices that ask */
  vm_streamcheck_t *sc;          /* --check-streams, else NULL */
  bool traced;                   /* recording into the VM's trace */
  uint32_t trace_run;
} vm_run_t;

/* A device stream's number in the frame's program (0 for its base). */
static int shown_stream(const vm_run_t *r, const frame_t *fr, int stream) {
  for (int s = 1; stream != fr->base && s < ISA_MAX_STREAMS; s++)
    if (r->streams[s] == stream) return s;
  return 0;
}

/* --check-streams: an access by the instruction at pc of register reg. */
static rill_status_t sc_access(vm_run_t *r, const frame_t *fr, int stream, uint32_t pc, uint32_t reg, bool write) {
  const rill_tensor_t *t = (const rill_tensor_t *)fr->regs[reg];
  const isa_func_t *f = fr->f;
  const char *op = f->code[pc] == ISA_OP_INVOKE ? r->vm->plans[f->code[pc + 1]].decl->name : isa_opinfo[f->code[pc]].mnemonic;
  const char *name = f->regs[reg].name;
  char what[160];
  snprintf(what, sizeof what, "%%%s", name ? name : "?");
  return vm_sc_access(r->sc, stream, shown_stream(r, fr, stream), t->storage, write, what, f->name, pc, op);
}

static void set_reg(vm_obj_t **regs, uint32_t r, vm_obj_t *o) {
  vm_obj_t *old = regs[r];
  regs[r] = o;
  if (old) vm_obj_release(old);
}

/* Events are created on first use by a frame and destroyed when it returns. */
static rill_status_t event_get(vm_run_t *r, frame_t *fr, uint32_t e, vm_event_t **out) {
  if (fr->ev[e]) { *out = fr->ev[e]; return NULL; }
  rill_vm_t *vm = r->vm;
  pthread_mutex_lock(&vm->ev_mu);
  if (vm->ev_pool.len) fr->ev[e] = vm->ev_pool.items[--vm->ev_pool.len];
  pthread_mutex_unlock(&vm->ev_mu);
  rill_status_t st = fr->ev[e] ? NULL : vm->dev->ops->event_create(vm->dev, &fr->ev[e]);
  *out = fr->ev[e];
  return st;
}

static void frame_free(vm_run_t *r, frame_t *fr) {
  for (uint32_t i = 0; i < fr->f->nregs; i++)
    if (fr->regs[i]) vm_obj_release(fr->regs[i]);
  rill__free(r->vm->a, fr->regs);
  /* Events go back to the VM's pool without waiting: queued waits hold on to
   * the record they were issued against, so a new record cannot disturb them. */
  rill_vm_t *vm = r->vm;
  for (int e = 0; e < ISA_MAX_EVENTS; e++) {
    if (!fr->ev[e]) continue;
    pthread_mutex_lock(&vm->ev_mu);
    rill_status_t st = RILL_VEC_PUSH(vm->a, &vm->ev_pool, fr->ev[e]);
    pthread_mutex_unlock(&vm->ev_mu);
    if (st) {
      /* No room in the pool: drain, then destroy this one. */
      rill_status_free(st);
      rill_status_free(vm->dev->ops->synchronize(vm->dev));
      vm->dev->ops->event_destroy(vm->dev, fr->ev[e]);
    }
    fr->ev[e] = NULL;
  }
}

static rill_status_t stream_of(vm_run_t *r, frame_t *fr, uint32_t s, int *out) {
  if (s == 0) { *out = fr->base; return NULL; }
  if (r->streams[s] < 0) RILL_TRY(r->vm->dev->ops->stream_acquire(r->vm->dev, &r->streams[s]));
  *out = r->streams[s];
  return NULL;
}

static rill_status_t push_frame(vm_run_t *r, const isa_func_t *f, int base, const uint32_t *ret_list) {
  frame_t fr;
  memset(&fr, 0, sizeof fr);
  fr.f = f;
  fr.base = fr.cur = base;
  fr.ret_list = ret_list;
  fr.regs = rill__calloc(r->vm->a, f->nregs ? f->nregs : 1, sizeof(vm_obj_t *));
  if (!fr.regs) return rill__oom();
  rill_status_t st = RILL_VEC_PUSH(r->vm->a, &r->frames, fr);
  if (st) rill__free(r->vm->a, fr.regs);
  return st;
}

/* ---- completion ---- */
static void on_closed(uv_handle_t *h) {
  vm_run_t *r = h->data;
  rill_vm_t *vm = r->vm;
  r->cb(r->user, r->status, r->results, r->nresults);
  pthread_mutex_destroy(&r->mu);
  rill_status_free(r->dev_error);
  RILL_VEC_FREE(vm->a, &r->frames);
  RILL_VEC_FREE(vm->a, &r->ptrs);
  RILL_VEC_FREE(vm->a, &r->keep);
  RILL_VEC_FREE(vm->a, &r->deferred);
  vm_sc_free(r->sc);
  rill__free(vm->a, r);
}

static void run_end(vm_run_t *r) {
  rill_vm_t *vm = r->vm;
  /* A failed run may still have work queued (a copy back into a register's
   * tensor): let it finish before the frames and streams go. */
  if (r->status) rill_status_free(vm->dev->ops->synchronize(vm->dev));
  while (r->frames.len) frame_free(r, &r->frames.items[--r->frames.len]);
  if (r->status) {
    if (r->results) {
      for (int i = 0; i < r->nresults; i++) rill_tensor_release(r->results[i]);
      rill__free(vm->a, r->results);
      r->results = NULL;
    }
    r->nresults = 0;
  }
  /* The run's work is done (its last host callback ran, or the device was
   * drained above): operands kept for the device can go. */
  for (size_t i = 0; i < r->deferred.len; i++) vm_obj_release(r->deferred.items[i]);
  r->deferred.len = 0;
  for (int s = 1; s < ISA_MAX_STREAMS; s++)
    if (r->streams[s] >= 0) vm->dev->ops->stream_release(vm->dev, r->streams[s]);
  vm->dev->ops->stream_release(vm->dev, r->entry_stream);
  uv_close((uv_handle_t *)&r->async, on_closed);
}

static void on_device(void *arg, rill_status_t error) {
  vm_run_t *r = arg;
  pthread_mutex_lock(&r->mu);
  r->woken = true;
  if (r->vm->stats) r->woken_us = rill__now_us();
  if (error && !r->dev_error) r->dev_error = rill__status(rill_status_code(error), "%s", rill_status_message(error));
  pthread_mutex_unlock(&r->mu);
  uv_async_send(&r->async);
}

/* Tracing or profiling: the launch between device marks on its stream
 * (0 and 1 for the trace, 2 and 3 for profiling). Operands are in r->ptrs,
 * the references the device takes in r->keep. Kept out of the dispatch loop. */
static rill_status_t launch_marked(vm_run_t *r, const frame_t *fr, uint32_t pc, const ops_plan_t *plan, uint32_t nkeep) {
  rill_vm_t *vm = r->vm;
  vm_device_t *dev = vm->dev;
  const vm_device_ops_t *D = dev->ops;
  double h0 = rill__now_us();
  vm_mark_t *mk[4] = {NULL, NULL, NULL, NULL};
  bool tr = r->traced, pr = vm->stats != NULL;
  rill_status_t st = tr ? D->mark(dev, fr->cur, &mk[0]) : NULL;
  if (!st && pr) st = D->mark(dev, fr->cur, &mk[2]);
  if (st) {
    for (uint32_t i = 0; i < nkeep; i++) vm_obj_release(r->keep.items[i]);
  } else {
    st = D->launch(dev, fr->cur, plan, r->ptrs.items, r->ptrs.items + plan->decl->nin, r->keep.items, nkeep);
    if (!st && pr) st = D->mark(dev, fr->cur, &mk[3]);
    if (!st && tr) st = D->mark(dev, fr->cur, &mk[1]);
  }
  if (!st && pr) {
    st = vm_prof_add(vm, fr->f->code[pc + 1], mk[2], mk[3]); /* takes both, even on failure */
    mk[2] = mk[3] = NULL;
  }
  if (st) {
    for (int k = 0; k < 4; k++)
      if (mk[k]) D->mark_free(dev, mk[k]);
    return st;
  }
  if (!tr) return NULL;
  return vm_trace_op(vm, r->trace_run, fr->cur, shown_stream(r, fr, fr->cur), fr->f->name, pc, plan->decl->name, h0,
                     rill__now_us(), mk[0], mk[1]);
}

static void run_continue(vm_run_t *r);

static void on_async(uv_async_t *h) {
  vm_run_t *r = h->data;
  pthread_mutex_lock(&r->mu);
  bool woken = r->woken;
  rill_status_t err = r->dev_error;
  double at = r->woken_us;
  r->woken = false;
  r->dev_error = NULL;
  pthread_mutex_unlock(&r->mu);
  if (!woken) return;
  if (r->vm->stats && at > 0) vm_record_wake_latency(r->vm, (rill__now_us() - at) * 1e-6);
  if (err) {
    r->status = err;
    run_end(r);
  } else if (r->finishing) {
    run_end(r);
  } else {
    run_continue(r);
  }
}

/* ---- the interpreter ---- */
static rill_status_t at_pc(const frame_t *fr, uint32_t pc, rill_status_t st) {
  if (!st || rill_status_code(st) == RILL_OUT_OF_MEMORY) return st;
  return rill__status_prefix(st, "@%s+%u (%s): ", fr->f->name, pc, isa_opinfo[fr->f->code[pc]].mnemonic);
}

/* A device allocation for register reg failed: the status says what for (the
 * value's name and type, or the storage), the bytes, the device and where,
 * then the device's reason; it keeps the device's code (out of memory). */
static rill_status_t alloc_failed(const vm_run_t *r, const frame_t *fr, uint32_t pc, uint32_t reg, size_t bytes,
                                  rill_status_t st) {
  const isa_reg_t *g = &fr->f->regs[reg];
  char name[80], what[200], tb[96];
  if (g->name) snprintf(name, sizeof name, "%%%s", g->name);
  else snprintf(name, sizeof name, "register r%u", reg);
  if (g->storage) {
    /* A planned slot: name the values placed in it (views of it), the first few. */
    int o = snprintf(what, sizeof what, "storage %s", name), nv = 0;
    isa_insn_t in;
    for (uint32_t p = pc; nv < 3 && p < fr->f->ncode && isa_decode(fr->f->code, fr->f->ncode, p, &in, NULL); p += in.len) {
      if (in.op != ISA_OP_VIEW || in.operands[1].value != reg) continue;
      const isa_reg_t *v = &fr->f->regs[in.operands[0].value];
      o += snprintf(what + o, sizeof what - (size_t)o, "%s%%%s: %s", nv++ ? ", " : " (for ", v->name ? v->name : "?",
                    rill_type_format(&v->type, tb, sizeof tb));
      if ((size_t)o >= sizeof what) break;
    }
    if (nv && (size_t)o < sizeof what - 1) snprintf(what + o, sizeof what - (size_t)o, ")");
  } else snprintf(what, sizeof what, "%s: %s", name, rill_type_format(&g->type, tb, sizeof tb));
  /* at_pc adds the position to every other code. */
  char at[128] = "";
  if (rill_status_code(st) == RILL_OUT_OF_MEMORY)
    snprintf(at, sizeof at, "@%s+%u (%s): out of memory: ", fr->f->name, pc, isa_opinfo[fr->f->code[pc]].mnemonic);
  char size[32] = "";
  if (bytes >= (1u << 30)) snprintf(size, sizeof size, " (%.1f GiB)", (double)bytes / (1u << 30));
  else if (bytes >= (1u << 20)) snprintf(size, sizeof size, " (%.1f MiB)", (double)bytes / (1u << 20));
  rill_status_t out = rill__status(rill_status_code(st), "%scannot allocate %zu bytes%s on device %s for %s: %s", at, bytes, size,
                                   r->vm->device_name, what, rill_status_message(st));
  rill_status_free(st);
  return out;
}

static void run_continue(vm_run_t *r) {
  rill_vm_t *vm = r->vm;
  vm_device_t *dev = vm->dev;
  const vm_device_ops_t *D = dev->ops;
  const isa_module_t *m = vm->module->m;
  frame_t *fr = &r->frames.items[r->frames.len - 1];
  const uint32_t *code = fr->f->code;
  uint32_t pc = fr->pc;
  vm_obj_t **R = fr->regs;
  rill_status_t st = NULL;

#define RELOAD() do { fr = &r->frames.items[r->frames.len - 1]; code = fr->f->code; pc = fr->pc; R = fr->regs; } while (0)
#define FAIL(x) do { st = (x); goto fail; } while (0)
#define CHECK(x) do { if ((st = (x))) goto fail; } while (0)
#ifdef RILL_COMPUTED_GOTO
  static void *const labels[ISA_OP_COUNT] = {
#define OP(name, mnem, fmt, flags, sem) &&L_##name,
#include "../isa/opcodes.def"
#undef OP
  };
#define CASE(name) L_##name:
#define NEXT goto *labels[code[pc]]
  NEXT;
#else
#define CASE(name) case ISA_OP_##name:
#define NEXT continue
  for (;;) switch (code[pc]) {
#endif
  CASE(NOP) { pc += 1; NEXT; }
  CASE(ALLOC_STORAGE) {
    vm_storage_t *s;
    size_t bytes = (size_t)fr->f->regs[code[pc + 1]].storage_size;
    if ((st = vm_storage_new(vm, fr->cur, bytes, &s))) FAIL(alloc_failed(r, fr, pc, code[pc + 1], bytes, st));
    if (r->sc) vm_sc_fresh(r->sc, s);
    set_reg(R, code[pc + 1], &s->hdr);
    pc += 2;
    NEXT;
  }
  CASE(VIEW) {
    rill_tensor_t *t;
    CHECK(vm_tensor_new(vm, &fr->f->regs[code[pc + 1]].type, (vm_storage_t *)R[code[pc + 2]], code[pc + 3], &t));
    set_reg(R, code[pc + 1], &t->hdr);
    pc += 4;
    NEXT;
  }
  CASE(ALLOC_TENSOR) {
    const rill_type_t *ty = &fr->f->regs[code[pc + 1]].type;
    size_t bytes;
    rill__type_sizes(ty, NULL, &bytes);
    vm_storage_t *s;
    if ((st = vm_storage_new(vm, fr->cur, bytes, &s))) FAIL(alloc_failed(r, fr, pc, code[pc + 1], bytes, st));
    if (r->sc) vm_sc_fresh(r->sc, s);
    rill_tensor_t *t;
    st = vm_tensor_new(vm, ty, s, 0, &t);
    vm_obj_release(&s->hdr);
    if (st) goto fail;
    set_reg(R, code[pc + 1], &t->hdr);
    pc += 2;
    NEXT;
  }
  CASE(RELEASE) { set_reg(R, code[pc + 1], NULL); pc += 2; NEXT; }
  CASE(LOAD_CONST) { set_reg(R, code[pc + 1], vm_obj_retain(&vm->consts[code[pc + 2]]->hdr)); pc += 3; NEXT; }
  CASE(MOVE) { set_reg(R, code[pc + 1], vm_obj_retain(R[code[pc + 2]])); pc += 3; NEXT; }
  CASE(INVOKE) {
    const ops_plan_t *plan = &vm->plans[code[pc + 1]];
    uint32_t nin = code[pc + 2], nout = code[pc + 3 + nin];
    const uint32_t *ins = code + pc + 3, *outs = code + pc + 4 + nin;
    uint32_t n = nin + nout;
    if (r->sc) {
      for (uint32_t i = 0; i < nin; i++) CHECK(sc_access(r, fr, fr->cur, pc, ins[i], false));
      for (uint32_t i = 0; i < nout; i++) CHECK(sc_access(r, fr, fr->cur, pc, outs[i], true));
    }
    if (r->ptrs.cap < n) {
      CHECK(rill__vec_grow(vm->a, (void **)&r->ptrs.items, &r->ptrs.cap, n, sizeof(void *)));
      CHECK(rill__vec_grow(vm->a, (void **)&r->keep.items, &r->keep.cap, n, sizeof(vm_obj_t *)));
    }
    for (uint32_t i = 0; i < nin; i++) {
      rill_tensor_t *t = (rill_tensor_t *)R[ins[i]];
      r->ptrs.items[i] = vm_tensor_data(t);
      r->keep.items[i] = vm_obj_retain(&t->hdr);
      t->storage->stream = fr->cur;
    }
    for (uint32_t i = 0; i < nout; i++) {
      rill_tensor_t *t = (rill_tensor_t *)R[outs[i]];
      r->ptrs.items[nin + i] = vm_tensor_data(t);
      r->keep.items[nin + i] = vm_obj_retain(&t->hdr);
      t->storage->stream = fr->cur;
    }
    uint32_t nkeep = n;
    if (!dev->keeps_operands) {
      if (r->deferred.cap < r->deferred.len + n)
        CHECK(rill__vec_grow(vm->a, (void **)&r->deferred.items, &r->deferred.cap, r->deferred.len + n, sizeof(vm_obj_t *)));
      memcpy(r->deferred.items + r->deferred.len, r->keep.items, sizeof(vm_obj_t *) * n);
      r->deferred.len += n;
      nkeep = 0;
    }
    if (r->traced || vm->stats) {
      CHECK(launch_marked(r, fr, pc, plan, nkeep));
      pc += 4 + n;
      NEXT;
    }
    CHECK(D->launch(dev, fr->cur, plan, r->ptrs.items, r->ptrs.items + nin, r->keep.items, nkeep));
    pc += 4 + n;
    NEXT;
  }
  CASE(CALL) {
    const isa_func_t *g = &m->funcs[code[pc + 1]];
    uint32_t nin = code[pc + 2];
    if (r->frames.len >= vm->max_depth) FAIL(rill__status(RILL_RUNTIME_ERROR, "call depth limit (%u) exceeded", vm->max_depth));
    fr->pc = pc;
    CHECK(push_frame(r, g, fr->cur, code + pc + 3 + nin));
    frame_t *caller = &r->frames.items[r->frames.len - 2];
    frame_t *callee = &r->frames.items[r->frames.len - 1];
    for (uint32_t i = 0; i < nin; i++) callee->regs[i] = vm_obj_retain(caller->regs[code[pc + 3 + i]]);
    RELOAD();
    NEXT;
  }
  CASE(RETURN) {
    uint32_t n = code[pc + 1];
    if (r->frames.len == 1) {
      /* The caller reads the results once the entry stream is done. */
      for (uint32_t i = 0; r->sc && i < n; i++) CHECK(sc_access(r, fr, fr->base, pc, code[pc + 2 + i], false));
      r->results = rill__calloc(vm->a, n ? n : 1, sizeof(rill_tensor_t *));
      if (!r->results) FAIL(rill__oom());
      for (uint32_t i = 0; i < n; i++) r->results[i] = (rill_tensor_t *)vm_obj_retain(R[code[pc + 2 + i]]);
      r->nresults = (int)n;
      r->finishing = true;
      fr->pc = pc;
      CHECK(D->host_callback(dev, fr->base, on_device, r));
      return;
    }
    frame_t *caller = &r->frames.items[r->frames.len - 2];
    const uint32_t *ret = fr->ret_list;
    for (uint32_t i = 0; i < n; i++) set_reg(caller->regs, ret[1 + i], vm_obj_retain(R[code[pc + 2 + i]]));
    frame_free(r, fr);
    r->frames.len--;
    RELOAD();
    /* Resume after the caller's call: call f, (n, args...), (m, results...). */
    pc = (uint32_t)(ret - code) + 1 + ret[0];
    NEXT;
  }
  CASE(HOST_WAIT) {
    rill_tensor_t *t = (rill_tensor_t *)R[code[pc + 1]];
    size_t n = t->nbytes < sizeof t->host ? t->nbytes : sizeof t->host;
    if (r->sc) {
      CHECK(sc_access(r, fr, fr->cur, pc, code[pc + 1], false));
      CHECK(vm_sc_host_wait(r->sc, fr->cur));
    }
    CHECK(D->copy_d2h(dev, fr->cur, t->host, vm_tensor_data(t), n));
    fr->pc = pc + 2;
    CHECK(D->host_callback(dev, fr->cur, on_device, r));
    return;
  }
  CASE(BR_IF) {
    uint32_t target = ((rill_tensor_t *)R[code[pc + 1]])->host[0] ? code[pc + 2] : code[pc + 3];
    if (target <= pc && ++r->backedges > vm->max_backedges)
      FAIL(rill__status(RILL_RUNTIME_ERROR, "loop iteration limit (%llu) exceeded", (unsigned long long)vm->max_backedges));
    pc = target;
    NEXT;
  }
  CASE(GOTO) {
    uint32_t target = code[pc + 1];
    if (target <= pc && ++r->backedges > vm->max_backedges)
      FAIL(rill__status(RILL_RUNTIME_ERROR, "loop iteration limit (%llu) exceeded", (unsigned long long)vm->max_backedges));
    pc = target;
    NEXT;
  }
  CASE(ALIAS) {
    rill_tensor_t *src = (rill_tensor_t *)R[code[pc + 2]], *t;
    CHECK(vm_tensor_new(vm, &fr->f->regs[code[pc + 1]].type, src->storage, src->offset, &t));
    set_reg(R, code[pc + 1], &t->hdr);
    pc += 3;
    NEXT;
  }
  CASE(CUDA_SET_STREAM) { CHECK(stream_of(r, fr, code[pc + 1], &fr->cur)); pc += 2; NEXT; }
  CASE(CUDA_ADD_EVENT) {
    vm_event_t *e;
    int s;
    CHECK(event_get(r, fr, code[pc + 1], &e));
    CHECK(stream_of(r, fr, code[pc + 2], &s));
    if (r->sc) CHECK(vm_sc_record(r->sc, e, s));
    if (r->traced) CHECK(vm_trace_event(vm, r->trace_run, true, s, shown_stream(r, fr, s), e));
    CHECK(D->event_record(dev, e, s));
    pc += 3;
    NEXT;
  }
  CASE(CUDA_WAIT_EVENT) {
    vm_event_t *e;
    int s;
    CHECK(event_get(r, fr, code[pc + 1], &e));
    CHECK(stream_of(r, fr, code[pc + 2], &s));
    if (r->sc) CHECK(vm_sc_wait(r->sc, e, s));
    if (r->traced) CHECK(vm_trace_event(vm, r->trace_run, false, s, shown_stream(r, fr, s), e));
    CHECK(D->stream_wait(dev, s, e));
    pc += 3;
    NEXT;
  }
#ifndef RILL_COMPUTED_GOTO
  }
#endif
fail:
  r->status = at_pc(fr, pc, st);
  run_end(r);
#undef CASE
#undef NEXT
#undef RELOAD
#undef FAIL
#undef CHECK
}

rill_status_t vm_run_start(rill_vm_t *vm, uv_loop_t *loop, const char *function, rill_tensor_t *const *inputs,
                           int ninputs, rill_invoke_cb cb, void *user) {
  const rill_module_t *mod = vm->module;
  uint32_t fi;
  if (!function || !rill__map_get(&mod->func_map, function, strlen(function), &fi))
    return rill__status(RILL_NOT_FOUND, "no function @%s in the module", function ? function : "(null)");
  const isa_func_t *f = &mod->m->funcs[fi];
  char b1[96], b2[96];
  if (ninputs != (int)f->nparams) {
    if (ninputs < (int)f->nparams)
      return rill__status(RILL_INVALID_ARGUMENT, "@%s: missing input %d for parameter %%%s: %s", f->name, ninputs + 1,
                          f->regs[ninputs].name ? f->regs[ninputs].name : "?", rill_type_format(&f->regs[ninputs].type, b1, 96));
    return rill__status(RILL_INVALID_ARGUMENT, "@%s takes %u inputs, %d given", f->name, f->nparams, ninputs);
  }
  for (int i = 0; i < ninputs; i++) {
    if (!inputs[i]) return rill__status(RILL_INVALID_ARGUMENT, "input %d is NULL", i + 1);
    if (!rill__type_eq(&inputs[i]->type, &f->regs[i].type))
      return rill__status(RILL_INVALID_ARGUMENT, "input %d for parameter %%%s: expected %s, got %s", i + 1,
                          f->regs[i].name ? f->regs[i].name : "?", rill_type_format(&f->regs[i].type, b1, 96),
                          rill_type_format(&inputs[i]->type, b2, 96));
    if (strcmp(inputs[i]->vm->device_name, vm->device_name) != 0)
      return rill__status(RILL_INVALID_ARGUMENT, "input %d lives on device %s, the VM runs on %s", i + 1,
                          inputs[i]->vm->device_name, vm->device_name);
  }
  vm_run_t *r = rill__calloc(vm->a, 1, sizeof *r);
  if (!r) return rill__oom();
  r->vm = vm;
  r->cb = cb;
  r->user = user;
  for (int s = 0; s < ISA_MAX_STREAMS; s++) r->streams[s] = -1;
  rill_status_t st = vm->check_streams ? vm_sc_create(vm->a, &r->sc) : NULL;
  if (vm->tracing) {
    r->traced = true;
    r->trace_run = vm_trace_run(vm->trace);
  }
  if (!st) st = vm->dev->ops->stream_acquire(vm->dev, &r->entry_stream);
  if (st) {
    vm_sc_free(r->sc);
    rill__free(vm->a, r);
    return st;
  }
  if ((st = push_frame(r, f, r->entry_stream, NULL))) {
    vm->dev->ops->stream_release(vm->dev, r->entry_stream);
    vm_sc_free(r->sc);
    RILL_VEC_FREE(vm->a, &r->frames);
    rill__free(vm->a, r);
    return st;
  }
  for (int i = 0; i < ninputs; i++) r->frames.items[0].regs[i] = vm_obj_retain(&inputs[i]->hdr);
  pthread_mutex_init(&r->mu, NULL);
  uv_async_init(loop, &r->async, on_async);
  r->async.data = r;
  run_continue(r);
  return NULL;
}

rill_status_t rill_vm_invoke_async(rill_vm_t *vm, void *loop, const char *function, rill_tensor_t *const *inputs,
                                   int ninputs, rill_invoke_cb callback, void *user) {
  if (!vm || !loop || !callback) return rill__status(RILL_INVALID_ARGUMENT, "invoke_async: vm, loop and callback are required");
  return vm_run_start(vm, loop, function, inputs, ninputs, callback, user);
}

typedef struct sync_result {
  rill_status_t status;
  rill_tensor_t **results;
  int n;
} sync_result_t;

static void on_sync_done(void *user, rill_status_t status, rill_tensor_t **results, int n) {
  sync_result_t *s = user;
  s->status = status;
  s->results = results;
  s->n = n;
}

rill_status_t rill_vm_invoke(rill_vm_t *vm, const char *function, rill_tensor_t *const *inputs, int ninputs,
                             rill_tensor_t ***out_results, int *out_nresults) {
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) return rill__status(RILL_UNAVAILABLE, "cannot create an event loop");
  sync_result_t res = {0};
  rill_status_t st = vm_run_start(vm, &loop, function, inputs, ninputs, on_sync_done, &res);
  if (!st) {
    uv_run(&loop, UV_RUN_DEFAULT);
    st = res.status;
  }
  uv_loop_close(&loop);
  if (st) return st;
  *out_results = res.results;
  *out_nresults = res.n;
  return NULL;
}
