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
 * Graph mode adds two kinds of run: a capture (the device records the run's
 * work instead of running it; every storage it allocates is kept by the
 * instance being made) and a replay (the executable told where the inputs
 * are, launched, results handed out or copied out, on the run's stream).
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
  int curdev;                  /* the current stream's device */
  const uint8_t *sdev;         /* each of the function's streams' device */
  const uint32_t *ret_list;    /* in the caller's code: count, then result registers */
  vm_event_t *ev[ISA_MAX_EVENTS];
} frame_t;

/* A control-flow construct being captured (an if or a while whose
 * condition the program reads on the host), in frame `depth`: bodies become
 * a conditional node's bodies, each captured on a fresh stream. A while's
 * carried registers (every tensor register its header and body define) live
 * in fixed tensors for the graph's life: copied in before the node, copied
 * back at the end of each run of the body, where the header runs again to
 * set the condition anew. An if's registers (those either branch defines)
 * are copied into fixed tensors at the end of each branch. */
enum { CTL_IF, CTL_WHILE };
typedef struct ctl {
  int kind, phase;             /* IF: 0 then, 1 else; WHILE: 0 body, 1 header again */
  uint32_t depth;              /* r->frames.len */
  uint32_t h, t, f, go, m;     /* host_wait, its branch targets, the goto ending the first region, the merge (IF) or header (WHILE) */
  bool has_else;
  uint32_t stop;               /* where this construct next takes over */
  int parent_stream, body_stream;
  int saved_base, saved_cur;
  int saved_streams[ISA_MAX_STREAMS];
  int8_t saved_stream_dev[ISA_MAX_STREAMS];
  vm_cond_t *c;
  uint32_t n, *regs;           /* registers carried (WHILE) or merged (IF) */
  rill_tensor_t **fixed, **old;
} ctl_t;

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
  int8_t stream_dev[ISA_MAX_STREAMS]; /* the device each was acquired on */
  vm_coll_group_t *coll;       /* the parts of a collective over the VM's devices issued so far (coll.c) */
  int entry_stream;
  uint64_t backedges;
  rill_status_t status;
  rill_tensor_t **results;
  int nresults;
  rill_tensor_t **outs;        /* rill_vm_invoke_async_into, interpreted: where the results go (references the run holds), or NULL */
  int nouts;
  rill_invoke_cb cb;
  void *user;
  const isa_module_t *m;         /* the module as run: the VM's, or an instance for bound shape variables */
  const ops_plan_t *plans;
  RILL_VEC(void *) ptrs;       /* scratch for op operands */
  RILL_VEC(vm_obj_t *) keep;
  RILL_VEC(vm_obj_t *) deferred; /* operands kept until the run ends, for devices that ask */
  vm_streamcheck_t *sc;          /* --check-streams, else NULL */
  bool traced;                   /* recording into the VM's trace */
  uint32_t trace_run;
  vm_ginst_t *cap;               /* a capture: the instance it makes */
  bool capturing;                /* the device is capturing the entry stream */
  vm_ginst_t *gi;                /* a replay: the instance it launches */
  RILL_VEC(ctl_t) ctl;           /* a capture: constructs being captured, innermost last */
  uint32_t stop_pc, stop_depth;  /* the innermost's next stop (depth 0: none) */
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
  const char *op = f->code[pc] == ISA_OP_INVOKE ? r->plans[f->code[pc + 1]].decl->name : isa_opinfo[f->code[pc]].mnemonic;
  const char *name = f->regs[reg].name;
  char what[160];
  snprintf(what, sizeof what, "%%%s", name ? name : "?");
  return vm_sc_access(r->sc, stream, shown_stream(r, fr, stream), t->storage, t->offset, t->nbytes, write, what, f->name, pc,
                      op);
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
  /* A capture's events are its own: a captured record cannot be waited for outside it. */
  pthread_mutex_lock(&vm->ev_mu);
  if (vm->ev_pool.len && !r->cap) fr->ev[e] = vm->ev_pool.items[--vm->ev_pool.len];
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
    if (r->cap) {
      vm->dev->ops->event_destroy(vm->dev, fr->ev[e]);
      fr->ev[e] = NULL;
      continue;
    }
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
  vm_device_t *dev = r->vm->dev;
  int d = fr->sdev[s];
  if (r->streams[s] < 0) {
    RILL_TRY(d ? dev->ops->stream_acquire_on(dev, d, &r->streams[s]) : dev->ops->stream_acquire(dev, &r->streams[s]));
    r->stream_dev[s] = (int8_t)d;
  } else if (r->stream_dev[s] != d) {
    return rill__status(RILL_RUNTIME_ERROR, "stream %u is on device %d in @%s and on device %d in a function of the same run (a stream "
                        "number keeps one device in a run)", s, d, fr->f->name, r->stream_dev[s]);
  }
  *out = r->streams[s];
  return NULL;
}

/* Later ops of the frame go on its stream s (and s's device). */
static rill_status_t set_stream(vm_run_t *r, frame_t *fr, uint32_t s) {
  RILL_TRY(stream_of(r, fr, s, &fr->cur));
  fr->curdev = fr->sdev[s];
  return NULL;
}

static rill_status_t push_frame(vm_run_t *r, const isa_func_t *f, int base, const uint32_t *ret_list) {
  frame_t fr;
  memset(&fr, 0, sizeof fr);
  fr.f = f;
  fr.base = fr.cur = base;
  fr.sdev = r->vm->sdev[f - r->m->funcs];
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
  RILL_VEC_FREE(vm->a, &r->ctl);
  vm_sc_free(r->sc);
  vm_coll_group_free(vm, r->coll);
  rill__free(vm->a, r);
}

/* Ends the capture; on success the graph goes to the instance. */
static rill_status_t capture_end(vm_run_t *r) {
  r->capturing = false;
  vm_graph_t *g = NULL;
  rill_vm_t *vm = r->vm;
  RILL_TRY(vm->dev->ops->capture_end(vm->dev, r->entry_stream, &g));
  if (r->status) vm->dev->ops->graph_destroy(vm->dev, g);
  else r->cap->graph = g;
  return NULL;
}

static void ctl_unwind(vm_run_t *r);

/* rill_vm_invoke_async_into: output i must be result i's type. */
static rill_status_t out_check(const rill_tensor_t *out, const rill_type_t *t, int i) {
  if (rill__type_eq(&out->type, t)) return NULL;
  char b1[96], b2[96];
  return rill__status(RILL_INVALID_ARGUMENT, "output %d: the result is %s, the tensor given for it %s", i + 1, rill_type_format(t, b1, 96),
                      rill_type_format(&out->type, b2, 96));
}

static void run_end(vm_run_t *r) {
  rill_vm_t *vm = r->vm;
  ctl_unwind(r);
  if (r->capturing) {
    rill_status_t st = capture_end(r);
    if (st && !r->status) r->status = st;
    else rill_status_free(st);
  }
  /* A failed run may still have work queued (a copy back into a register's
   * tensor): let it finish before the frames and streams go. In a job of
   * several ranks the others are told first (a collective queued here may
   * be waiting for them). */
  if (r->status) vm_coll_failed(vm, rill_status_message(r->status));
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
  if (r->outs) {
    for (int i = 0; i < r->nouts; i++) rill_tensor_release(r->outs[i]);
    rill__free(vm->a, r->outs);
    r->outs = NULL;
  }
  /* The run's work is done (its last host callback ran, or the device was
   * drained above): operands kept for the device can go. */
  for (size_t i = 0; i < r->deferred.len; i++) vm_obj_release(r->deferred.items[i]);
  r->deferred.len = 0;
  for (int s = 1; s < ISA_MAX_STREAMS; s++)
    if (r->streams[s] >= 0) vm->dev->ops->stream_release(vm->dev, r->streams[s]);
  vm->dev->ops->stream_release(vm->dev, r->entry_stream);
  if (r->gi) vm_graph_ended(vm, r->gi);
  /* A run waited for by its caller (no loop) ends at once. */
  if (r->async.loop) uv_close((uv_handle_t *)&r->async, on_closed);
  else on_closed((uv_handle_t *)&r->async);
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

/* The run's end: the last callback on `stream`, where the run issues nothing
 * more (the device may wait for the stream itself, without an event), or,
 * with `issue`, nothing more than issue(r) does on the device's thread
 * (only where the device has host_callback_last). */
static rill_status_t end_callback(vm_run_t *r, int stream, rill_status_t (*issue)(void *)) {
  vm_device_t *dev = r->vm->dev;
  r->finishing = true;
  if (dev->ops->host_callback_last) return dev->ops->host_callback_last(dev, stream, issue, on_device, r);
  return dev->ops->host_callback(dev, stream, on_device, r);
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

/* A capture's storage: kept by the instance for the executable's life. */
static rill_status_t cap_keep(vm_run_t *r, vm_storage_t *s) {
  rill_status_t st = RILL_VEC_PUSH(r->vm->a, &r->cap->keep, &s->hdr);
  if (!st) vm_obj_retain(&s->hdr);
  return st;
}

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

/* ---- control flow in a capture ---- */
static void ctl_set_stop(vm_run_t *r) {
  r->stop_depth = 0;
  if (r->ctl.len) {
    const ctl_t *c = &r->ctl.items[r->ctl.len - 1];
    r->stop_pc = c->stop;
    r->stop_depth = c->depth;
  }
}

/* [start, end) of f is whole instructions; *last the one just before end. */
static bool last_insn(const isa_func_t *f, uint32_t start, uint32_t end, isa_insn_t *last) {
  const char *why;
  uint32_t pc = start;
  bool any = false;
  while (pc < end) {
    if (!isa_decode(f->code, f->ncode, pc, last, &why)) return false;
    pc += last->len;
    any = true;
  }
  return any && pc == end;
}

/* The tensor registers that instructions in [start, end) of f define (a
 * state's register is the state itself wherever it is loaded: not carried). */
static rill_status_t defs_in(rill_vm_t *vm, const isa_func_t *f, uint32_t start, uint32_t end, ctl_t *c) {
  uint8_t *mark = rill__calloc(vm->a, f->nregs ? f->nregs : 1, 1);
  if (!mark) return rill__oom();
  isa_insn_t in;
  const char *why;
  for (uint32_t pc = start; pc < end && isa_decode(f->code, f->ncode, pc, &in, &why); pc += in.len)
    for (int k = 0; in.op != ISA_OP_LOAD_STATE && k < in.noperands; k++) {
      const isa_operand_t *o = &in.operands[k];
      if (o->kind == 'd') mark[o->value] = 1;
      for (uint32_t j = 0; o->kind == 'D' && j < o->value; j++) mark[o->list[j]] = 1;
    }
  for (uint32_t i = 0; i < f->nregs; i++) c->n += mark[i] && !f->regs[i].storage;
  c->regs = rill__calloc(vm->a, c->n ? c->n : 1, sizeof(uint32_t));
  c->fixed = rill__calloc(vm->a, c->n ? c->n : 1, sizeof(rill_tensor_t *));
  c->old = rill__calloc(vm->a, c->n ? c->n : 1, sizeof(rill_tensor_t *));
  rill_status_t st = c->regs && c->fixed && c->old ? NULL : rill__oom();
  for (uint32_t i = 0, k = 0; !st && i < f->nregs; i++)
    if (mark[i] && !f->regs[i].storage) c->regs[k++] = i;
  rill__free(vm->a, mark);
  return st;
}

/* A tensor of register reg's type that the instance keeps. */
static rill_status_t fixed_tensor(vm_run_t *r, const isa_func_t *f, uint32_t reg, int stream, rill_tensor_t **out) {
  const rill_type_t *ty = &f->regs[reg].type;
  size_t bytes;
  rill__type_sizes(ty, NULL, &bytes);
  vm_storage_t *s;
  RILL_TRY(vm_storage_new(r->vm, stream, bytes, VM_MEM_GRAPHS, &s));
  rill_status_t st = cap_keep(r, s);
  if (!st) st = vm_tensor_new(r->vm, ty, s, 0, out);
  vm_obj_release(&s->hdr);
  return st;
}

/* The construct's registers into its fixed tensors, on `stream`, then bound
 * to them. A value that is another register's fixed tensor (a loop that
 * swaps two of its values) is first copied aside. */
static rill_status_t settle(vm_run_t *r, frame_t *fr, ctl_t *c, int stream) {
  rill_vm_t *vm = r->vm;
  for (uint32_t i = 0; i < c->n; i++) {
    rill_tensor_t *t = (rill_tensor_t *)fr->regs[c->regs[i]];
    for (uint32_t j = 0; t && j < c->n; j++) {
      if (j == i || t->storage != c->fixed[j]->storage) continue;
      rill_tensor_t *tmp;
      RILL_TRY(fixed_tensor(r, fr->f, c->regs[i], stream, &tmp));
      set_reg(fr->regs, c->regs[i], &tmp->hdr);
      RILL_TRY(vm->dev->ops->copy_d2d(vm->dev, stream, vm_tensor_data(tmp), vm_tensor_data(t), tmp->nbytes));
      break;
    }
  }
  for (uint32_t i = 0; i < c->n; i++) {
    rill_tensor_t *t = (rill_tensor_t *)fr->regs[c->regs[i]], *x = c->fixed[i];
    if (t && (t->storage != x->storage || t->offset != x->offset))
      RILL_TRY(vm->dev->ops->copy_d2d(vm->dev, stream, vm_tensor_data(x), vm_tensor_data(t), x->nbytes));
    set_reg(fr->regs, c->regs[i], vm_obj_retain(&x->hdr));
  }
  return NULL;
}

/* The node's body k is captured on a fresh stream: the frame's stream 0 and
 * the run's other streams are new ones until the body ends. */
static rill_status_t body_begin(vm_run_t *r, frame_t *fr, ctl_t *c, int k) {
  int bs;
  RILL_TRY(r->vm->dev->ops->cond_body_begin(r->vm->dev, c->c, k, &bs));
  c->body_stream = bs;
  c->saved_base = fr->base;
  c->saved_cur = fr->cur;
  /* --check-streams: the body runs after what the node's stream issued before it. */
  if (r->sc) {
    RILL_TRY(vm_sc_record(r->sc, c, fr->cur));
    RILL_TRY(vm_sc_wait(r->sc, c, bs));
  }
  memcpy(c->saved_streams, r->streams, sizeof r->streams);
  memcpy(c->saved_stream_dev, r->stream_dev, sizeof r->stream_dev);
  fr->base = fr->cur = bs;
  for (int s = 0; s < ISA_MAX_STREAMS; s++) r->streams[s] = -1;
  return NULL;
}

static rill_status_t body_end(vm_run_t *r, frame_t *fr, ctl_t *c, const void *flag) {
  vm_device_t *dev = r->vm->dev;
  rill_status_t st = dev->ops->cond_body_end(dev, c->c, c->body_stream, flag);
  /* and what follows the node on its stream runs after the body. */
  if (r->sc && !st && !(st = vm_sc_record(r->sc, (const char *)c + 1, c->body_stream)))
    st = vm_sc_wait(r->sc, (const char *)c + 1, c->saved_cur);
  c->body_stream = -1;
  for (int s = 1; s < ISA_MAX_STREAMS; s++)
    if (r->streams[s] >= 0) dev->ops->stream_release(dev, r->streams[s]);
  memcpy(r->streams, c->saved_streams, sizeof r->streams);
  memcpy(r->stream_dev, c->saved_stream_dev, sizeof r->stream_dev);
  fr->base = c->saved_base;
  fr->cur = c->saved_cur;
  return st;
}

static void ctl_pop(vm_run_t *r) {
  rill_vm_t *vm = r->vm;
  ctl_t *c = &r->ctl.items[--r->ctl.len];
  for (uint32_t i = 0; i < c->n; i++) {
    if (c->fixed && c->fixed[i]) vm_obj_release(&c->fixed[i]->hdr);
    if (c->old && c->old[i]) vm_obj_release(&c->old[i]->hdr);
  }
  rill__free(vm->a, c->regs);
  rill__free(vm->a, c->fixed);
  rill__free(vm->a, c->old);
  if (c->c) vm->dev->ops->cond_free(vm->dev, c->c);
  ctl_set_stop(r);
}

/* A failed capture: bodies still being captured end, innermost first. */
static void ctl_unwind(vm_run_t *r) {
  while (r->ctl.len) {
    ctl_t *c = &r->ctl.items[r->ctl.len - 1];
    if (c->body_stream >= 0) rill_status_free(body_end(r, &r->frames.items[c->depth - 1], c, NULL));
    ctl_pop(r);
  }
}

static rill_status_t unstructured(const char *what) {
  return rill__status(RILL_UNIMPLEMENTED, "%s, which a graph cannot capture", what);
}

static const void *flag_of(const ctl_t *c, vm_obj_t **R, uint32_t reg) {
  for (uint32_t i = 0; i < c->n; i++)
    if (c->regs[i] == reg) return vm_tensor_data(c->fixed[i]);
  return vm_tensor_data((rill_tensor_t *)R[reg]);
}

/* A host wait in a capture: the if or while it decides becomes a
 * conditional node; *pc goes to its first body. */
static rill_status_t ctl_enter(vm_run_t *r, frame_t *fr, uint32_t *pc) {
  rill_vm_t *vm = r->vm;
  const vm_device_ops_t *D = vm->dev->ops;
  const isa_func_t *f = fr->f;
  const uint32_t *code = f->code;
  uint32_t h = *pc, reg = code[h + 1];
  if (!D->cond_begin) return rill__status(RILL_UNIMPLEMENTED, "the %s device cannot capture conditional nodes", D->name);
  if (h + 6 > f->ncode || code[h + 2] != ISA_OP_BR_IF || code[h + 3] != reg)
    return unstructured("a value is read on the host for something other than the branch after it");
  uint32_t t = code[h + 4], fl = code[h + 5];
  isa_insn_t last;
  if (t != h + 6 || fl <= t || !last_insn(f, t, fl, &last)) return unstructured("a branch that is not an if or a while");
  ctl_t c;
  memset(&c, 0, sizeof c);
  c.depth = r->frames.len;
  c.h = h, c.t = t, c.f = fl;
  c.body_stream = -1;
  c.parent_stream = fr->cur;
  rill_status_t st;
  if (last.op == ISA_OP_GOTO && last.operands[0].value <= h) {
    c.kind = CTL_WHILE;
    c.go = last.pc;
    c.m = last.operands[0].value;   /* the header */
    st = defs_in(vm, f, c.m, c.f, &c);
  } else {
    isa_insn_t e;
    c.kind = CTL_IF;
    c.has_else = last.op == ISA_OP_GOTO && last.operands[0].value > fl;
    c.go = c.has_else ? last.pc : fl;
    c.m = c.has_else ? last.operands[0].value : fl;
    if (c.has_else && !last_insn(f, fl, c.m, &e)) return unstructured("an else branch that is not whole instructions");
    st = defs_in(vm, f, t, c.m, &c);
  }
  for (uint32_t i = 0; !st && i < c.n; i++) st = fixed_tensor(r, f, c.regs[i], c.parent_stream, &c.fixed[i]);
  if (!st && c.kind == CTL_WHILE) st = settle(r, fr, &c, c.parent_stream);
  for (uint32_t i = 0; !st && c.kind == CTL_IF && i < c.n; i++) c.old[i] = (rill_tensor_t *)vm_obj_retain(fr->regs[c.regs[i]]);
  if (!st)
    st = D->cond_begin(vm->dev, c.parent_stream, c.kind == CTL_WHILE, c.kind == CTL_WHILE ? 1 : 2, flag_of(&c, fr->regs, reg),
                       vm->max_backedges, &c.c);
  if (!st) st = RILL_VEC_PUSH(vm->a, &r->ctl, c);
  if (st) {
    /* Not on the stack: let go of what it holds here. */
    for (uint32_t i = 0; i < c.n; i++) {
      if (c.fixed && c.fixed[i]) vm_obj_release(&c.fixed[i]->hdr);
      if (c.old && c.old[i]) vm_obj_release(&c.old[i]->hdr);
    }
    if (c.c) D->cond_free(vm->dev, c.c);
    rill__free(vm->a, c.regs);
    rill__free(vm->a, c.fixed);
    rill__free(vm->a, c.old);
    return st;
  }
  ctl_t *top = &r->ctl.items[r->ctl.len - 1];
  RILL_TRY(body_begin(r, fr, top, 0));
  top->stop = top->go;
  ctl_set_stop(r);
  *pc = t;
  return NULL;
}

/* The innermost construct's stop was reached: the next region, or the end. */
static rill_status_t ctl_stop(vm_run_t *r, frame_t *fr, uint32_t *pc) {
  ctl_t *c = &r->ctl.items[r->ctl.len - 1];
  if (c->kind == CTL_WHILE && c->phase == 0) { /* the body's end: carry its values, then the header again */
    RILL_TRY(settle(r, fr, c, c->body_stream));
    c->phase = 1;
    c->stop = c->h;
    *pc = c->m;
  } else if (c->kind == CTL_WHILE) { /* the header's host wait: the condition for the next run */
    RILL_TRY(settle(r, fr, c, c->body_stream));
    RILL_TRY(body_end(r, fr, c, flag_of(c, fr->regs, fr->f->code[c->h + 1])));
    *pc = c->f;
    ctl_pop(r);
    return NULL;
  } else if (c->phase == 0) { /* the then branch's end: the else branch starts from the values before */
    RILL_TRY(settle(r, fr, c, c->body_stream));
    RILL_TRY(body_end(r, fr, c, NULL));
    for (uint32_t i = 0; i < c->n; i++) set_reg(fr->regs, c->regs[i], vm_obj_retain(c->old[i] ? &c->old[i]->hdr : NULL));
    RILL_TRY(body_begin(r, fr, c, 1));
    c->phase = 1;
    c->stop = c->m;
    *pc = c->f;
    if (c->has_else) {
      ctl_set_stop(r);
      return NULL;
    }
    return ctl_stop(r, fr, pc);
  } else { /* the merge */
    RILL_TRY(settle(r, fr, c, c->body_stream));
    RILL_TRY(body_end(r, fr, c, NULL));
    *pc = c->m;
    ctl_pop(r);
    return NULL;
  }
  ctl_set_stop(r);
  return NULL;
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

/* A storage of `bytes` for register reg, made on the frame's stream: a
 * capture's is kept by its instance (and counted as graph memory), and the
 * stream check sees it fresh. */
static rill_status_t run_storage(vm_run_t *r, const frame_t *fr, uint32_t pc, uint32_t reg, size_t bytes, vm_storage_t **out) {
  vm_storage_t *s;
  rill_status_t st = vm_storage_new(r->vm, fr->cur, bytes, r->cap ? VM_MEM_GRAPHS : VM_MEM_BUFFERS, &s);
  if (st) return alloc_failed(r, fr, pc, reg, bytes, st);
  if (r->cap && (st = cap_keep(r, s))) {
    vm_obj_release(&s->hdr);
    return st;
  }
  if (r->sc) vm_sc_fresh(r->sc, s);
  *out = s;
  return NULL;
}


/* bind_dims at pc of fr: the run goes on at the new sizes. Every frame's
 * function becomes the new instance's; a value already made whose register
 * the new sizes give another type is refused (it would be read at the wrong
 * size), naming it. */
static rill_status_t bind_dims(vm_run_t *r, frame_t *fr, uint32_t pc) {
  const uint32_t *code = fr->f->code;
  const rill_type_t *names = &fr->f->regs[code[pc + 1]].type;
  rill_tensor_t *t = (rill_tensor_t *)fr->regs[code[pc + 2]];
  int k = names->rank - 1;
  uint32_t vars[RILL_MAX_RANK];
  int64_t vals[RILL_MAX_RANK];
  const isa_module_t *src = r->vm->module->m, *m = r->m;
  const isa_func_t *sf = &src->funcs[fr->f - m->funcs];
  for (int i = 0; i < k; i++) {
    vars[i] = (uint32_t)vm_dim_var(&src->syms, sf->regs[code[pc + 1]].type.dims[i + 1]);
    memcpy(&vals[i], t->host + 8 * i, 8);
  }
  const ops_plan_t *plans = r->plans;
  RILL_TRY(vm_shapes_rebind(r->vm, (uint32_t)(r->frames.items[0].f - m->funcs), vars, vals, k, &m, &plans));
  if (m == r->m) return NULL;
  char b1[96], b2[96];
  for (size_t i = 0; i < r->frames.len; i++) {
    frame_t *x = &r->frames.items[i];
    const isa_func_t *g = &m->funcs[x->f - r->m->funcs];
    for (uint32_t q = 0; q < g->nregs; q++) {
      if (!x->regs[q] || g->regs[q].storage) continue;
      const rill_type_t *have = &((rill_tensor_t *)x->regs[q])->type;
      if (!rill__type_eq(have, &g->regs[q].type))
        return rill__status(RILL_RUNTIME_ERROR, "bind_dims: %%%s in @%s was made as %s, which the new sizes make %s; bind a size before any value of that size is made",
                            g->regs[q].name ? g->regs[q].name : "?", g->name, rill_type_format(have, b1, sizeof b1),
                            rill_type_format(&g->regs[q].type, b2, sizeof b2));
    }
  }
  for (size_t i = 0; i < r->frames.len; i++) r->frames.items[i].f = &m->funcs[r->frames.items[i].f - r->m->funcs];
  r->m = m;
  r->plans = plans;
  return NULL;
}

/* An op entry an instance could not plan: one over sizes that bind_dims had
 * not bound (or bound to sizes it does not take); why, from its plan now. */
static rill_status_t unplanned(vm_run_t *r, uint32_t op) {
  const isa_opdecl_t *d = &r->m->ops[op];
  ops_plan_t p;
  rill_status_t st = ops_plan_init(&p, d, r->vm->a);
  ops_plan_fini(&p);
  if (st) return rill__status_prefix(st, "op %s at the bound sizes: ", d->name);
  return rill__status(RILL_RUNTIME_ERROR, "op %s runs before bind_dims binds its sizes", d->name);
}

static void run_continue(vm_run_t *r) {
  rill_vm_t *vm = r->vm;
  vm_device_t *dev = vm->dev;
  const vm_device_ops_t *D = dev->ops;
  const isa_module_t *m = r->m;
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
  /* A capture with a construct open checks for its stop before each instruction. */
  static void *const stop_labels[ISA_OP_COUNT] = {[0 ... ISA_OP_COUNT - 1] = &&L_STOP};
  void *const *L = r->cap ? stop_labels : labels;
#define CASE(name) L_##name:
#define NEXT goto *L[code[pc]]
  NEXT;
L_STOP:
  if (r->stop_depth == r->frames.len && pc == r->stop_pc) {
    CHECK(ctl_stop(r, fr, &pc));
    NEXT;
  }
  goto *labels[code[pc]];
#else
#define CASE(name) case ISA_OP_##name:
#define NEXT continue
  for (;;) {
    if (r->stop_depth == r->frames.len && pc == r->stop_pc) {
      CHECK(ctl_stop(r, fr, &pc));
      continue;
    }
    switch (code[pc]) {
#endif
  CASE(NOP) { pc += 1; NEXT; }
  CASE(ALLOC_STORAGE) {
    vm_storage_t *s;
    size_t bytes = (size_t)fr->f->regs[code[pc + 1]].storage_size;
    CHECK(run_storage(r, fr, pc, code[pc + 1], bytes, &s));
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
    CHECK(run_storage(r, fr, pc, code[pc + 1], bytes, &s));
    rill_tensor_t *t;
    st = vm_tensor_new(vm, ty, s, 0, &t);
    vm_obj_release(&s->hdr);
    if (st) goto fail;
    set_reg(R, code[pc + 1], &t->hdr);
    pc += 2;
    NEXT;
  }
  CASE(RELEASE) { set_reg(R, code[pc + 1], NULL); pc += 2; NEXT; }
  CASE(LOAD_CONST) {
    uint32_t k = code[pc + 2] + (vm->const_devs > 1 ? (uint32_t)fr->curdev * m->nconsts : 0);
    if (!vm->consts[k]) { /* (a rank holds only its own stage's weights) */
      const isa_const_t *kc = &m->consts[code[pc + 2]];
      st = rill__status(RILL_INVALID_ARGUMENT, "constant %%%s is the weight of pipeline stage %u, which this rank does not hold", kc->name ? kc->name : "?", kc->stage);
      goto fail;
    }
    set_reg(R, code[pc + 1], vm_obj_retain(&vm->consts[k]->hdr));
    pc += 3;
    NEXT;
  }
  CASE(LOAD_STATE) { set_reg(R, code[pc + 1], vm_obj_retain(&vm->states[code[pc + 2]]->hdr)); pc += 3; NEXT; }
  CASE(MOVE) { set_reg(R, code[pc + 1], vm_obj_retain(R[code[pc + 2]])); pc += 3; NEXT; }
  CASE(INVOKE) {
    const ops_plan_t *plan = &r->plans[code[pc + 1]];
    if (!plan->def) FAIL(unplanned(r, code[pc + 1]));
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
      vm_storage_used_on(t->storage, fr->cur);
    }
    for (uint32_t i = 0; i < nout; i++) {
      rill_tensor_t *t = (rill_tensor_t *)R[outs[i]];
      r->ptrs.items[nin + i] = vm_tensor_data(t);
      r->keep.items[nin + i] = vm_obj_retain(&t->hdr);
      vm_storage_used_on(t->storage, fr->cur);
    }
    uint32_t nkeep = n;
    if (!dev->keeps_operands) {
      if (r->deferred.cap < r->deferred.len + n)
        CHECK(rill__vec_grow(vm->a, (void **)&r->deferred.items, &r->deferred.cap, r->deferred.len + n, sizeof(vm_obj_t *)));
      memcpy(r->deferred.items + r->deferred.len, r->keep.items, sizeof(vm_obj_t *) * n);
      r->deferred.len += n;
      nkeep = 0;
    }
    if (__builtin_expect(ops_collective(plan->def) != OPS_COLL_NONE, 0)) {
      CHECK(vm_coll_invoke(vm, &r->coll, fr->cur, fr->curdev, plan, r->ptrs.items, r->ptrs.items + nin, r->keep.items, nkeep));
      pc += 4 + n;
      NEXT;
    }
    if (r->traced || (vm->stats && !r->cap)) {
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
    if (vm_coll_pending(r->coll)) FAIL(rill__status(RILL_RUNTIME_ERROR, "a return before every part of a collective over the VM's devices"));
    if (r->frames.len == 1) {
      /* The caller reads the results once the entry stream is done. */
      for (uint32_t i = 0; r->sc && i < n; i++) CHECK(sc_access(r, fr, fr->base, pc, code[pc + 2 + i], false));
      r->results = rill__calloc(vm->a, n ? n : 1, sizeof(rill_tensor_t *));
      if (!r->results) FAIL(rill__oom());
      for (uint32_t i = 0; r->outs && i < n; i++) { /* into the caller's tensors, on the entry stream before the end */
        rill_tensor_t *t = (rill_tensor_t *)R[code[pc + 2 + i]];
        CHECK(out_check(r->outs[i], &t->type, (int)i));
        CHECK(vm->dev->ops->copy_d2d(vm->dev, fr->base, vm_tensor_data(r->outs[i]), vm_tensor_data(t), t->nbytes));
      }
      for (uint32_t i = 0; i < n; i++) r->results[i] = (rill_tensor_t *)vm_obj_retain(r->outs ? &r->outs[i]->hdr : R[code[pc + 2 + i]]);
      r->nresults = (int)n;
      r->finishing = true;
      fr->pc = pc;
      if (r->cap) { /* nothing ran: the run ends with the capture */
        CHECK(capture_end(r));
        run_end(r);
        return;
      }
      CHECK(end_callback(r, fr->base, NULL));
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
    if (r->cap && pc + 2 < fr->f->ncode && code[pc + 2] == ISA_OP_BIND_DIMS) FAIL(unstructured("a size read back on the host (bind_dims)"));
    if (r->cap) { /* the if or while it decides becomes a conditional node */
      CHECK(ctl_enter(r, fr, &pc));
      NEXT;
    }
    rill_tensor_t *t = (rill_tensor_t *)R[code[pc + 1]];
    size_t n = t->nbytes < sizeof t->host ? t->nbytes : sizeof t->host;
    atomic_fetch_add_explicit(&vm->n_host_waits, 1, memory_order_relaxed);
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
    if (r->cap) FAIL(unstructured("a branch on a value not read on the host just before it"));
    uint32_t target = ((rill_tensor_t *)R[code[pc + 1]])->host[0] ? code[pc + 2] : code[pc + 3];
    if (target <= pc && ++r->backedges > vm->max_backedges)
      FAIL(rill__status(RILL_RUNTIME_ERROR, "loop iteration limit (%llu) exceeded", (unsigned long long)vm->max_backedges));
    pc = target;
    NEXT;
  }
  CASE(GOTO) {
    uint32_t target = code[pc + 1];
    if (target <= pc && r->cap) FAIL(unstructured("a loop that is not a while"));
    if (target <= pc && ++r->backedges > vm->max_backedges)
      FAIL(rill__status(RILL_RUNTIME_ERROR, "loop iteration limit (%llu) exceeded", (unsigned long long)vm->max_backedges));
    pc = target;
    NEXT;
  }
  CASE(ALIAS) {
    rill_tensor_t *src = (rill_tensor_t *)R[code[pc + 2]], *t;
    CHECK(vm_tensor_new(vm, &fr->f->regs[code[pc + 1]].type, src->storage, src->offset, &t));
    if (t->nbytes != src->nbytes) { /* sizes bound at run time (bind_dims) that do not agree */
      char b1[96], b2[96];
      st = rill__status(RILL_RUNTIME_ERROR, "a view of %s as %s: the element counts differ at the sizes bound", rill_type_format(&src->type, b1, sizeof b1),
                        rill_type_format(&t->type, b2, sizeof b2));
      vm_obj_release(&t->hdr);
      goto fail;
    }
    set_reg(R, code[pc + 1], &t->hdr);
    pc += 3;
    NEXT;
  }
  CASE(BIND_DIMS) {
    if (r->cap) FAIL(unstructured("a size read back on the host (bind_dims)"));
    CHECK(bind_dims(r, fr, pc));
    m = r->m;
    vm_storage_t *s; /* the names' register: an empty tensor */
    CHECK(run_storage(r, fr, pc, code[pc + 1], 0, &s));
    rill_tensor_t *t;
    st = vm_tensor_new(vm, &fr->f->regs[code[pc + 1]].type, s, 0, &t);
    vm_obj_release(&s->hdr);
    if (st) goto fail;
    set_reg(R, code[pc + 1], &t->hdr);
    pc += 3;
    NEXT;
  }
  CASE(CUDA_SET_STREAM) { CHECK(set_stream(r, fr, code[pc + 1])); pc += 2; NEXT; }
  CASE(CUDA_SET_DEVICE_STREAM) { CHECK(set_stream(r, fr, code[pc + 2])); pc += 3; NEXT; }
  CASE(COPY_DEVICE) {
    rill_tensor_t *dst = (rill_tensor_t *)R[code[pc + 1]], *src = (rill_tensor_t *)R[code[pc + 2]];
    if (r->sc) {
      CHECK(sc_access(r, fr, fr->cur, pc, code[pc + 2], false));
      CHECK(sc_access(r, fr, fr->cur, pc, code[pc + 1], true));
    }
    /* Both stay until the run ends, when every stream has joined the one
     * it ends on: the source's memory is another device's, freed on its
     * own streams, which do not see this copy. */
    if (r->deferred.cap < r->deferred.len + 2)
      CHECK(rill__vec_grow(vm->a, (void **)&r->deferred.items, &r->deferred.cap, r->deferred.len + 2, sizeof(vm_obj_t *)));
    r->deferred.items[r->deferred.len++] = vm_obj_retain(&dst->hdr);
    r->deferred.items[r->deferred.len++] = vm_obj_retain(&src->hdr);
    vm_storage_used_on(dst->storage, fr->cur);
    if (D->copy_peer) CHECK(D->copy_peer(dev, fr->cur, vm_tensor_data(dst), (int)code[pc + 3], vm_tensor_data(src), dst->nbytes));
    else CHECK(D->copy_d2d(dev, fr->cur, vm_tensor_data(dst), vm_tensor_data(src), dst->nbytes));
    pc += 4;
    NEXT;
  }
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

/* A run's state, its entry stream acquired; the caller adds what the kind of run needs. */
static rill_status_t run_new(rill_vm_t *vm, uv_loop_t *loop, rill_invoke_cb cb, void *user, bool traced, vm_run_t **out) {
  vm_run_t *r = rill__calloc(vm->a, 1, sizeof *r);
  if (!r) return rill__oom();
  r->vm = vm;
  r->m = vm->module->m;
  r->plans = vm->plans;
  r->cb = cb;
  r->user = user;
  for (int s = 0; s < ISA_MAX_STREAMS; s++) r->streams[s] = -1;
  if (traced && vm->tracing) {
    r->traced = true;
    r->trace_run = vm_trace_run(vm->trace);
  }
  rill_status_t st = vm->dev->ops->stream_acquire(vm->dev, &r->entry_stream);
  if (st) {
    rill__free(vm->a, r);
    return st;
  }
  pthread_mutex_init(&r->mu, NULL);
  /* loop NULL: the caller waits for the run itself, so nothing wakes a loop. */
  if (loop) uv_async_init(loop, &r->async, on_async);
  r->async.data = r;
  *out = r;
  return NULL;
}

/* Fails a run that has not started: the callback gets the status. */
static void run_fail(vm_run_t *r, rill_status_t st) {
  r->status = st;
  run_end(r);
}

/* Interprets f with `inputs`; a capture runs it on the instance's own input
 * tensors, which the graph fills first by copying `inputs` (graph inputs,
 * numbered in parameter order, parameters of 0 bytes left out). */
static void run_interp(vm_run_t *r, const isa_func_t *f, rill_tensor_t *const *inputs) {
  rill_vm_t *vm = r->vm;
  rill_status_t st = vm->check_streams ? vm_sc_create(vm->a, &r->sc) : NULL;
  if (!st && r->cap) {
    vm_ginst_t *gi = r->cap;
    st = vm->dev->ops->capture_begin(vm->dev, r->entry_stream);
    r->capturing = st == NULL;
    if (!st && !(gi->params = rill__calloc(vm->a, f->nparams ? f->nparams : 1, sizeof(rill_tensor_t *)))) st = rill__oom();
    for (uint32_t i = 0; !st && i < f->nparams; i++) {
      vm_storage_t *s;
      const rill_type_t *ty = &f->regs[i].type;
      size_t bytes;
      rill__type_sizes(ty, NULL, &bytes);
      if ((st = vm_storage_new(vm, r->entry_stream, bytes, VM_MEM_GRAPHS, &s))) break;
      st = vm_tensor_new(vm, ty, s, 0, &gi->params[i]);
      vm_obj_release(&s->hdr);
      if (!st) gi->nparams = i + 1;
      if (!st && bytes)
        st = vm->dev->ops->capture_input(vm->dev, r->entry_stream, vm_tensor_data(gi->params[i]), vm_tensor_data(inputs[i]), bytes);
    }
    inputs = gi->params;
  }
  if (!st) st = push_frame(r, f, r->entry_stream, NULL);
  if (st) return run_fail(r, st);
  for (uint32_t i = 0; i < f->nparams; i++) r->frames.items[0].regs[i] = vm_obj_retain(&inputs[i]->hdr);
  run_continue(r);
}

static rill_status_t find_function(rill_vm_t *vm, const char *function, uint32_t *fi) {
  if (!function || !rill__map_get(&vm->module->func_map, function, strlen(function), fi))
    return rill__status(RILL_NOT_FOUND, "no function @%s in the module", function ? function : "(null)");
  return NULL;
}

rill_status_t vm_run_start(rill_vm_t *vm, uv_loop_t *loop, const char *function, rill_tensor_t *const *inputs,
                           int ninputs, rill_tensor_t *const *outs, int nouts, bool wait_here, rill_invoke_cb cb, void *user) {
  uint32_t fi;
  RILL_TRY(find_function(vm, function, &fi));
  if (vm->shards_missing)
    return rill__status(RILL_INVALID_ARGUMENT, "the module is split for a job of %u ranks (%s=%u): run it as one, e.g. rill launch -n %u rill run ...",
                        vm->shard_parts, vm->split_option, vm->shard_parts, vm->shard_parts);
  const isa_func_t *f = &vm->module->m->funcs[fi];
  char b1[96], b2[96];
  atomic_fetch_add_explicit(&vm->n_runs, 1, memory_order_relaxed);
  if (outs && nouts != (int)f->nresults) return rill__status(RILL_INVALID_ARGUMENT, "@%s has %u results, %d outputs given", f->name, f->nresults, nouts);
  for (int i = 0; outs && i < nouts; i++) {
    if (!outs[i]) return rill__status(RILL_INVALID_ARGUMENT, "output %d is NULL", i + 1);
    if (strcmp(outs[i]->vm->device_name, vm->device_name) != 0)
      return rill__status(RILL_INVALID_ARGUMENT, "output %d lives on device %s, the VM runs on %s", i + 1, outs[i]->vm->device_name, vm->device_name);
  }
  if (ninputs != (int)f->nparams) {
    if (ninputs < (int)f->nparams)
      return rill__status(RILL_INVALID_ARGUMENT, "@%s: missing input %d for parameter %%%s: %s", f->name, ninputs + 1,
                          f->regs[ninputs].name ? f->regs[ninputs].name : "?", rill_type_format(&f->regs[ninputs].type, b1, 96));
    return rill__status(RILL_INVALID_ARGUMENT, "@%s takes %u inputs, %d given", f->name, f->nparams, ninputs);
  }
  const isa_module_t *run_m = vm->module->m;
  const ops_plan_t *run_plans = vm->plans;
  bool sym = vm->module->m->syms.vars.len > 0;
  rill_type_t *exact = NULL; /* padded to a bucket: the results' own types */
  for (int i = 0; i < ninputs; i++) {
    if (!inputs[i]) return rill__status(RILL_INVALID_ARGUMENT, "input %d is NULL", i + 1);
    if (strcmp(inputs[i]->vm->device_name, vm->device_name) != 0)
      return rill__status(RILL_INVALID_ARGUMENT, "input %d lives on device %s, the VM runs on %s", i + 1,
                          inputs[i]->vm->device_name, vm->device_name);
  }
  if (sym) {
    /* Shape variables are bound (and checked) before anything runs. */
    RILL_TRY(vm_shapes_pick(vm, fi, inputs, vm->graphs ? &exact : NULL, &run_m, &run_plans));
    f = &run_m->funcs[fi];
  }
  /* (A padded call's inputs were checked against their own sizes when bound.) */
  for (int i = 0; !exact && i < ninputs; i++)
    if (!rill__type_eq(&inputs[i]->type, &f->regs[i].type))
      return rill__status(RILL_INVALID_ARGUMENT, "input %d for parameter %%%s: expected %s, got %s", i + 1,
                          f->regs[i].name ? f->regs[i].name : "?", rill_type_format(&f->regs[i].type, b1, 96),
                          rill_type_format(&inputs[i]->type, b2, 96));
  if (vm->graphs) {
    vm_ginst_t *gi = NULL;
    bool zero_copy;
    bool padded = exact != NULL;
    rill_status_t st = vm_graph_pick(vm, fi, run_m, run_plans, inputs, padded, &gi, &zero_copy);
    if (!st && gi) st = vm_run_replay(vm, loop, fi, gi, zero_copy, inputs, exact, outs, wait_here, cb, user);
    rill__free(vm->a, exact);
    if (st || gi) return st;
    if (padded) { /* interpreted after all: at the inputs' own sizes */
      RILL_TRY(vm_shapes_pick(vm, fi, inputs, NULL, &run_m, &run_plans));
      f = &run_m->funcs[fi];
    }
  }
  vm_run_t *r;
  RILL_TRY(run_new(vm, loop, cb, user, true, &r));
  r->m = run_m;
  r->plans = run_plans;
  if (outs && !(r->outs = rill__calloc(vm->a, (size_t)nouts + 1, sizeof *r->outs))) {
    run_fail(r, rill__oom());
    return NULL;
  }
  for (int i = 0; outs && i < nouts; i++) {
    rill_tensor_retain(outs[i]);
    r->outs[i] = outs[i];
  }
  r->nouts = nouts;
  run_interp(r, f, inputs);
  return NULL;
}

/* ---- graph mode's runs ---- */
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

rill_status_t vm_run_sync(rill_vm_t *vm, uint32_t fi, const isa_module_t *m, const ops_plan_t *plans, rill_tensor_t *const *inputs,
                          vm_ginst_t *capture) {
  uv_loop_t loop;
  if (uv_loop_init(&loop) != 0) return rill__status(RILL_UNAVAILABLE, "cannot create an event loop");
  sync_result_t res = {0};
  vm_run_t *r;
  rill_status_t st = run_new(vm, &loop, on_sync_done, &res, false, &r);
  if (!st) {
    r->cap = capture;
    r->m = m;
    r->plans = plans;
    run_interp(r, &m->funcs[fi], inputs);
    uv_run(&loop, UV_RUN_DEFAULT);
    st = res.status;
  }
  uv_loop_close(&loop);
  if (st) return st;
  if (capture) { /* the graph's own result tensors */
    capture->results = res.results;
    capture->nresults = (uint32_t)res.n;
  } else {
    rill_results_free(vm, res.results, res.n);
  }
  return NULL;
}

/* The source of graph input k for parameter i: the caller's tensor, or for a
 * padded one the instance's stage with the caller's rows copied in (on s,
 * after the instance's earlier replays). */
static rill_status_t replay_source(rill_vm_t *vm, vm_ginst_t *gi, uint32_t i, rill_tensor_t *in, int s, const void **out) {
  const vm_device_ops_t *D = vm->dev->ops;
  *out = vm_tensor_data(in);
  if (in->nbytes == gi->params[i]->nbytes) return NULL;
  if (!gi->stage[i]) {
    RILL_TRY(rill_tensor_create(vm, &gi->params[i]->type, NULL, &gi->stage[i]));
    rill_status_t st = vm_pad_fill(vm, &gi->stage[i], NULL, 1);
    if (st) { /* never a stage whose rows past a call's are not zeros */
      rill_tensor_release(gi->stage[i]);
      gi->stage[i] = NULL;
      return st;
    }
  }
  *out = vm_tensor_data(gi->stage[i]);
  return D->copy_d2d(vm->dev, s, vm_tensor_data(gi->stage[i]), vm_tensor_data(in), in->nbytes);
}

/* A deferred replay's launch (vm_run_replay), on the device's thread. */
static rill_status_t replay_launch(void *arg) {
  vm_run_t *r = arg;
  return r->vm->dev->ops->graph_launch(r->vm->dev, r->gi->exec, r->entry_stream);
}

rill_status_t vm_run_replay(rill_vm_t *vm, uv_loop_t *loop, uint32_t fi, vm_ginst_t *gi, bool zero_copy,
                            rill_tensor_t *const *inputs, const rill_type_t *exact, rill_tensor_t *const *outs, bool wait_here,
                            rill_invoke_cb cb, void *user) {
  double h_start = rill__now_us();
  vm_run_t *r;
  rill_status_t st = run_new(vm, wait_here ? NULL : loop, cb, user, true, &r);
  if (st) {
    pthread_mutex_unlock(&vm->graph_mu);
    vm_graph_ended(vm, gi);
    return st;
  }
  r->gi = gi;
  atomic_fetch_add_explicit(&vm->n_graph_launches, 1, memory_order_relaxed);
  vm_device_t *dev = vm->dev;
  const vm_device_ops_t *D = dev->ops;
  int s = r->entry_stream;
  /* After the instance's last replay: its memory and results are reused. A
   * replay still in flight (a shared instance) is waited for through its
   * `done` event; one that has ended needs no wait. graph_mu is held
   * since vm_graph_pick chose the instance. */
  if (gi->inflight > 1 && gi->done_valid && gi->last_stream != s) st = D->stream_wait(dev, s, gi->done);
  /* Results into the caller's tensors: checked before anything is issued. */
  for (uint32_t i = 0; !st && outs && i < gi->nresults; i++) st = out_check(outs[i], exact ? &exact[i] : &gi->results[i]->type, (int)i);
  if (outs) zero_copy = false;
  /* Inputs stay referenced until the run ends (the graph's copies read them);
   * the executable is told where they are only when that changed. */
  if (!st) st = rill__vec_grow(vm->a, (void **)&r->deferred.items, &r->deferred.cap, gi->nparams, sizeof(vm_obj_t *));
  for (uint32_t i = 0, k = 0; !st && i < gi->nparams; i++) {
    if (!gi->params[i]->nbytes) continue;
    r->deferred.items[r->deferred.len++] = vm_obj_retain(&inputs[i]->hdr);
    const void *src;
    st = replay_source(vm, gi, i, inputs[i], s, &src);
    if (!st && src != gi->src[i] && !(st = D->gexec_set_input(dev, gi->exec, (int)k, src))) gi->src[i] = src;
    k++;
  }
  /* A replay that issues nothing after its launch (its results handed out,
   * so no copy and no `done` to record; not traced) leaves the launch to the
   * device thread that waits for its end, where the device has one. */
  bool defer = zero_copy && !r->traced && D->host_callback_last && !wait_here;
  vm_mark_t *m0 = NULL, *m1 = NULL;
  double h0 = r->traced ? rill__now_us() : 0;
  if (!st && r->traced) st = D->mark(dev, s, &m0);
  if (!st && !defer) st = D->graph_launch(dev, gi->exec, s);
  if (!st && r->traced) st = D->mark(dev, s, &m1);
  if (!st && r->traced) {
    const isa_func_t *f = &vm->module->m->funcs[fi];
    st = vm_trace_op(vm, r->trace_run, s, 0, f->name, 0, "graph", h0, rill__now_us(), m0, m1);
    m0 = m1 = NULL;
  }
  if (m0) D->mark_free(dev, m0);
  if (m1) D->mark_free(dev, m1);
  if (!st && !(r->results = rill__calloc(vm->a, gi->nresults ? gi->nresults : 1, sizeof(rill_tensor_t *)))) st = rill__oom();
  for (uint32_t i = 0; !st && zero_copy && i < gi->nresults; i++) {
    r->results[i] = (rill_tensor_t *)vm_obj_retain(&gi->results[i]->hdr);
    r->nresults = (int)i + 1;
  }
  for (uint32_t i = 0; !st && !zero_copy && i < gi->nresults; i++) {
    /* A padded run's results are the first rows of the graph's (a byte prefix). */
    rill_tensor_t *src = gi->results[i];
    const rill_type_t *t = exact ? &exact[i] : &src->type;
    size_t bytes;
    rill__type_sizes(t, NULL, &bytes);
    if (outs) {
      r->results[i] = (rill_tensor_t *)vm_obj_retain(&outs[i]->hdr);
      r->nresults = (int)i + 1;
      st = D->copy_d2d(dev, s, vm_tensor_data(outs[i]), vm_tensor_data(src), bytes);
      continue;
    }
    vm_storage_t *sto;
    if ((st = vm_storage_new(vm, s, bytes, VM_MEM_BUFFERS, &sto))) break;
    st = vm_tensor_new(vm, t, sto, 0, &r->results[i]);
    vm_obj_release(&sto->hdr);
    if (st) break;
    r->nresults = (int)i + 1;
    st = D->copy_d2d(dev, s, vm_tensor_data(r->results[i]), vm_tensor_data(src), bytes);
  }
  if (!st && gi->record_done) st = D->event_record(dev, gi->done, s);
  if (!st) {
    gi->done_valid = gi->record_done;
    gi->last_stream = s;
  }
  pthread_mutex_unlock(&vm->graph_mu);
  atomic_fetch_add_explicit(&vm->replay_host_ns, (uint64_t)((rill__now_us() - h_start) * 1e3), memory_order_relaxed);
  if (!st && wait_here) { /* the caller's thread waits for the stream; the run ends here */
    r->finishing = true;
    st = D->stream_sync(dev, s);
    if (!st) {
      run_end(r);
      return NULL;
    }
  }
  if (!st) st = end_callback(r, s, defer ? replay_launch : NULL);
  if (st) run_fail(r, st);
  return NULL;
}

rill_status_t rill_vm_invoke_async(rill_vm_t *vm, void *loop, const char *function, rill_tensor_t *const *inputs,
                                   int ninputs, rill_invoke_cb callback, void *user) {
  if (!vm || !loop || !callback) return rill__status(RILL_INVALID_ARGUMENT, "invoke_async: vm, loop and callback are required");
  return vm_run_start(vm, loop, function, inputs, ninputs, NULL, 0, false, callback, user);
}

rill_status_t rill_vm_invoke_async_into(rill_vm_t *vm, void *loop, const char *function, rill_tensor_t *const *inputs, int ninputs,
                                        rill_tensor_t *const *outputs, int noutputs, rill_invoke_cb callback, void *user) {
  if (!vm || !loop || !callback || !outputs) return rill__status(RILL_INVALID_ARGUMENT, "invoke_async_into: vm, loop, outputs and callback are required");
  return vm_run_start(vm, loop, function, inputs, ninputs, outputs, noutputs, false, callback, user);
}

/* The synchronous call's loop: one per thread, made at the thread's first
 * call and closed when the thread ends (a loop made and closed per call
 * cost more than the run of a small program). tls_loop is the fast path;
 * the key only closes the loop at the thread's end. */
static pthread_key_t sync_loop_key;
static pthread_once_t sync_loop_once = PTHREAD_ONCE_INIT;
static bool sync_loop_key_ok;
static __thread uv_loop_t *tls_loop;
static __thread bool tls_loop_running;

static void sync_loop_close(void *p) {
  uv_loop_close(p);
  free(p);
}

static void sync_loop_key_make(void) { sync_loop_key_ok = pthread_key_create(&sync_loop_key, sync_loop_close) == 0; }

static uv_loop_t *sync_loop(void) {
  if (tls_loop) return tls_loop;
  pthread_once(&sync_loop_once, sync_loop_key_make);
  uv_loop_t *l = malloc(sizeof *l);
  if (!l || !sync_loop_key_ok || uv_loop_init(l) != 0) {
    free(l);
    return NULL;
  }
  if (pthread_setspecific(sync_loop_key, l) != 0) {
    sync_loop_close(l);
    return NULL;
  }
  return tls_loop = l;
}

rill_status_t rill_vm_invoke(rill_vm_t *vm, const char *function, rill_tensor_t *const *inputs, int ninputs,
                             rill_tensor_t ***out_results, int *out_nresults) {
  /* A call from inside a run on this thread's loop (a tensor's deleter
   * calling back in) gets a loop of its own. */
  uv_loop_t own, *loop = tls_loop_running ? NULL : sync_loop();
  bool private = loop == NULL;
  if (private) {
    if (uv_loop_init(&own) != 0) return rill__status(RILL_UNAVAILABLE, "cannot create an event loop");
    loop = &own;
  }
  sync_result_t res = {0};
  rill_status_t st = vm_run_start(vm, loop, function, inputs, ninputs, NULL, 0, true, on_sync_done, &res);
  if (!st) {
    bool was = tls_loop_running;
    tls_loop_running = tls_loop_running || !private;
    uv_run(loop, UV_RUN_DEFAULT);
    tls_loop_running = was;
    st = res.status;
  }
  if (private) uv_loop_close(&own);
  if (st) return st;
  *out_results = res.results;
  *out_nresults = res.n;
  return NULL;
}
