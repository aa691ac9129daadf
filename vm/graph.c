/* graph.c: graph mode's bookkeeping.
 *
 * Per function: whether it runs in graph mode, why it could not be captured,
 * and per size (a binding of the module's shape variables; one size for a
 * module without them) up to VM_GRAPH_INSTANCES instances. The first run at
 * a size warms up (an interpreted run with the caller's inputs, so that
 * kernels are compiled and algorithms chosen before anything is recorded),
 * then captures the function (interp.c, vm_run_sync) with that size's op
 * plans and instantiates the graph; that run and later ones at that size
 * replay. A run picks an idle instance (no replay in flight, no caller
 * holding its results), else captures another while there is room, else
 * replays one whose results no caller holds, copying the results out
 * (replays of one instance are ordered on the device), else runs
 * interpreted. Every instance but the last hands its results out without
 * a copy (the instance then stays out of use until the caller lets them
 * go); the last always copies its results out, so it stays usable however
 * long callers keep results, and concurrent runs share it rather than run
 * interpreted. A function keeps graphs
 * for vm->graph_sizes sizes, most recently used first: a new size beyond
 * that drops the least recently used one (its executables and the memory
 * they own go back to the device, at once or, with a replay of it in
 * flight, when its last replay ends).
 */
#include <stdio.h>

#include "vm.h"

static void inst_free(rill_vm_t *vm, vm_ginst_t *gi) {
  if (!gi) return;
  vm_device_t *dev = vm->dev;
  if (gi->exec) dev->ops->gexec_destroy(dev, gi->exec);
  if (gi->graph) dev->ops->graph_destroy(dev, gi->graph);
  if (gi->done) dev->ops->event_destroy(dev, gi->done);
  for (uint32_t i = 0; i < gi->nparams; i++) rill_tensor_release(gi->params[i]);
  /* (stage has a place per parameter; params grows only as the capture makes them) */
  for (uint32_t i = 0; gi->stage && i < gi->gs->m->funcs[gi->gs->fi].nparams; i++)
    if (gi->stage[i]) rill_tensor_release(gi->stage[i]);
  rill__free(vm->a, gi->params);
  rill__free(vm->a, gi->stage);
  rill__free(vm->a, gi->src);
  rill__free(vm->a, gi->base);
  rill_results_free(vm, gi->results, (int)gi->nresults);
  for (size_t i = 0; i < gi->keep.len; i++) vm_obj_release(gi->keep.items[i]);
  RILL_VEC_FREE(vm->a, &gi->keep);
  rill__free(vm->a, gi);
}

static void size_free(rill_vm_t *vm, vm_gsize_t *gs) {
  for (int i = 0; i < gs->ninst; i++) inst_free(vm, gs->inst[i]);
  rill__free(vm->a, gs);
}

/* Takes gs out of the function's list (graph_mu): freed now, or, with a
 * replay of it in flight, by the end of its last replay. */
static void size_drop(rill_vm_t *vm, vm_gfunc_t *gf, vm_gsize_t *gs) {
  for (vm_gsize_t **pp = &gf->sizes; *pp; pp = &(*pp)->next)
    if (*pp == gs) {
      *pp = gs->next;
      break;
    }
  gf->nsizes--;
  gf->sizes_dropped++;
  gs->dropped = true;
  if (gs->inflight) {
    gs->next = gf->dying;
    gf->dying = gs;
  } else {
    size_free(vm, gs);
  }
}

/* Drops least recently used sizes until at most `keep` remain (graph_mu). */
static void sizes_trim(rill_vm_t *vm, vm_gfunc_t *gf, int keep) {
  while (gf->nsizes > keep) {
    vm_gsize_t *last = gf->sizes;
    while (last->next) last = last->next;
    size_drop(vm, gf, last);
  }
}

/* The function's graphs at the size of `plans`, made most recently used,
 * or a new empty set (graph_mu). */
static rill_status_t size_get(rill_vm_t *vm, uint32_t fi, const isa_module_t *m, const ops_plan_t *plans, vm_gsize_t **out) {
  vm_gfunc_t *gf = &vm->graphs[fi];
  vm_gsize_t **pp = &gf->sizes, *gs;
  while ((gs = *pp) && gs->key != plans) pp = &gs->next;
  if (gs) {
    if (pp != &gf->sizes) {
      *pp = gs->next;
      gs->next = gf->sizes;
      gf->sizes = gs;
    }
    *out = gs;
    return NULL;
  }
  if (!(gs = rill__calloc(vm->a, 1, sizeof *gs))) return rill__oom();
  gs->key = plans;
  gs->fi = fi;
  gs->m = m;
  gs->plans = plans;
  sizes_trim(vm, gf, vm->graph_sizes - 1);
  gs->next = gf->sizes;
  gf->sizes = gs;
  gf->nsizes++;
  *out = gs;
  return NULL;
}

/* Captures and instantiates one instance of function fi at size gs, its
 * input copies reading from `src` (the caller's inputs, or padded copies
 * of them, which the instance keeps as its stage). */
static rill_status_t inst_new(rill_vm_t *vm, uint32_t fi, vm_gfunc_t *gf, vm_gsize_t *gs, rill_tensor_t *const *src,
                              rill_tensor_t *const *inputs, vm_ginst_t **out) {
  vm_device_t *dev = vm->dev;
  if (!dev->ops->capture_begin) return rill__status(RILL_UNIMPLEMENTED, "the %s device cannot capture graphs", dev->ops->name);
  vm_ginst_t *gi = rill__calloc(vm->a, 1, sizeof *gi);
  if (!gi) return rill__oom();
  gi->gs = gs;
  uint32_t np = gs->m->funcs[fi].nparams;
  rill_status_t st = NULL;
  if (!(gi->src = rill__calloc(vm->a, np ? np : 1, sizeof *gi->src)) || !(gi->stage = rill__calloc(vm->a, np ? np : 1, sizeof *gi->stage)))
    st = rill__oom();
  for (uint32_t i = 0; !st && i < np; i++) {
    gi->src[i] = vm_tensor_data(src[i]);
    if (src[i] != inputs[i]) gi->stage[i] = (rill_tensor_t *)vm_obj_retain(&src[i]->hdr);
  }
  if (!st) st = dev->ops->event_create(dev, &gi->done);
  double t0 = rill__now_us();
  if (!st) st = vm_run_sync(vm, fi, gs->m, gs->plans, src, gi);
  double t1 = rill__now_us();
  if (!st) gf->nodes = dev->ops->graph_nodes(dev, gi->graph);
  if (!st) st = dev->ops->graph_instantiate(dev, gi->graph, &gi->exec);
  double t2 = rill__now_us();
  if (gi->graph) dev->ops->graph_destroy(dev, gi->graph);
  gi->graph = NULL;
  if (!st && !(gi->base = rill__calloc(vm->a, gi->nresults ? gi->nresults : 1, sizeof *gi->base))) st = rill__oom();
  for (uint32_t i = 0; !st && i < gi->nresults; i++) {
    gi->base[i].tensor = atomic_load(&gi->results[i]->hdr.refs);
    gi->base[i].storage = atomic_load(&gi->results[i]->storage->hdr.refs);
  }
  if (st) {
    /* Nothing of the capture may still be queued when its memory goes. */
    rill_status_free(dev->ops->synchronize(dev));
    inst_free(vm, gi);
    return st;
  }
  gf->capture_ms = (t1 - t0) * 1e-3;
  gf->instantiate_ms = (t2 - t1) * 1e-3;
  if (rill__timings_on()) {
    rill__timing_add("first run/capture", gf->capture_ms);
    rill__timing_add("first run/instantiate", gf->instantiate_ms);
  }
  gf->captures++;
  *out = gi;
  return NULL;
}

/* No caller holds (or will be handed) the instance's result tensors, or a
 * view of their memory. A result that is a constant is shared by every
 * instance and never written: callers may keep it. */
static bool results_free(const vm_ginst_t *gi) {
  for (uint32_t i = 0; i < gi->nresults; i++) {
    const rill_tensor_t *t = gi->results[i];
    if (!t->storage->constant &&
        (atomic_load(&t->hdr.refs) != gi->base[i].tensor || atomic_load(&t->storage->hdr.refs) != gi->base[i].storage))
      return false;
  }
  return true;
}

/* The warm-up before a size's first capture. A function that uses the
 * VM's states would change them twice, once in the warm-up and once in the
 * replay that follows: they are copied aside and back around it. Emits are
 * muted in every warm-up (the replay publishes the tokens). */
static rill_status_t warm_up(rill_vm_t *vm, uint32_t fi, const isa_module_t *m, const ops_plan_t *plans, rill_tensor_t *const *src) {
  const isa_module_t *vm_m = vm->module->m;
  vm_device_t *dev = vm->dev;
  bool states = vm_func_uses_states(m, fi);
  int s0 = -1;
  vm_storage_t **saved = NULL;
  rill_status_t st = NULL;
  if (states) {
    saved = rill__calloc(vm->a, vm_m->nstates, sizeof *saved);
    st = saved ? dev->ops->stream_acquire(dev, &s0) : rill__oom();
  }
  /* each state saved beside it, on its device (bytecode 1.11: not only device 0) */
  int held = -1, si = s0;
  for (uint32_t i = 0; states && !st && i < vm_m->nstates; i++) {
    rill_tensor_t *t = vm->states[i];
    st = vm_state_stream(vm, s0, i, &held, &si);
    if (!st) st = vm_storage_new(vm, si, t->nbytes, VM_MEM_BUFFERS, &saved[i]);
    if (!st && t->nbytes) st = dev->ops->copy_d2d(dev, si, saved[i]->ptr, vm_tensor_data(t), t->nbytes);
    if (!st) st = dev->ops->stream_sync(dev, si);
  }
  if (!st) {
    if (vm->chan.hdr) __atomic_store_n(&vm->chan.hdr->muted, 1, __ATOMIC_RELEASE);
    st = vm_run_sync(vm, fi, m, plans, src, NULL);
    if (vm->chan.hdr) __atomic_store_n(&vm->chan.hdr->muted, 0, __ATOMIC_RELEASE);
    for (uint32_t i = 0; states && i < vm_m->nstates; i++) {
      rill_tensor_t *t = vm->states[i];
      rill_status_t e = vm_state_stream(vm, s0, i, &held, &si);
      if (!e && t->nbytes) e = dev->ops->copy_d2d(dev, si, vm_tensor_data(t), saved[i]->ptr, t->nbytes);
      if (!e) e = dev->ops->stream_sync(dev, si);
      if (!st) st = e;
      else rill_status_free(e);
    }
  }
  if (held >= 0) dev->ops->stream_release(dev, held);
  for (uint32_t i = 0; saved && i < vm_m->nstates; i++)
    if (saved[i]) vm_obj_release(&saved[i]->hdr);
  rill__free(vm->a, saved);
  if (s0 >= 0) dev->ops->stream_release(dev, s0);
  return st;
}

rill_status_t vm_graph_pick(rill_vm_t *vm, uint32_t fi, const isa_module_t *m, const ops_plan_t *plans, rill_tensor_t *const *inputs,
                            bool padded, vm_ginst_t **out, bool *out_zero_copy) {
  vm_gfunc_t *gf = &vm->graphs[fi];
  int mode = vm_graph_mode(vm, gf);
  *out = NULL;
  if (mode == RILL_GRAPH_OFF || (gf->failed && mode == RILL_GRAPH_AUTO)) return NULL;
  const char *fname = vm->module->m->funcs[fi].name;
  if ((vm->stage_only || vm->p2p_branch) && !gf->failed) {
    /* A graph records both branches of an if: every stage's sends and
     * receives, and weights this rank does not hold */
    pthread_mutex_lock(&vm->graph_mu);
    snprintf(gf->reason, sizeof gf->reason, "%s", vm->stage_only ? "the module is cut into pipeline stages (--pipeline-parallel) and this rank holds only its stage's weights, "
             "which a graph of every stage's branch would need" : "sends and receives under an if (a rank's pipeline stage): a graph records every branch");
    gf->failed = true;
    pthread_mutex_unlock(&vm->graph_mu);
    if (mode == RILL_GRAPH_AUTO) return NULL;
  }
  if (gf->failed) return rill__status(RILL_UNIMPLEMENTED, "@%s cannot run as a graph: %s", fname, gf->reason);
  pthread_mutex_lock(&vm->graph_mu);
  vm_gsize_t *gs = NULL;
  rill_status_t st = size_get(vm, fi, m, plans, &gs);
  vm_ginst_t *gi = NULL;
  for (int i = 0; gs && i < gs->ninst && !gi; i++)
    if (!gs->inst[i]->inflight && results_free(gs->inst[i])) gi = gs->inst[i];
  if (!st && !gi && !gs->full) {
    /* The first capture at a size follows a warm-up run. */
    rill_tensor_t **pin = NULL;
    if (padded) st = vm_pad_inputs(vm, &m->funcs[fi], inputs, &pin);
    rill_tensor_t *const *src = padded ? pin : inputs;
    if (!st && !gs->ninst) st = warm_up(vm, fi, m, plans, src);
    if (!st) st = inst_new(vm, fi, gf, gs, src, inputs, &gi);
    vm_pad_release(vm, pin, m->funcs[fi].nparams);
    if (!st) {
      gs->inst[gs->ninst++] = gi;
      gs->full = gs->ninst == VM_GRAPH_INSTANCES;
    } else if (gs->ninst && rill_status_code(st) == RILL_OUT_OF_MEMORY) {
      /* Out of memory for a further instance: share the ones there are
       * (the last of them copies its results out from now on), without
       * trying again. */
      gs->full = true;
    } else {
      snprintf(gf->reason, sizeof gf->reason, "%s", rill_status_message(st));
      gf->failed = true;
    }
  }
  if (gs && !gi && gs->ninst) {
    rill_status_free(st);
    st = NULL;
    /* Sharing an instance in flight: only one whose last replay recorded
     * `done` for this one to wait on (else the run is interpreted). */
    for (int k = 0; k < gs->ninst && !gi; k++) {
      vm_ginst_t *c = gs->inst[gs->next_inst++ % (uint32_t)gs->ninst];
      if (results_free(c) && (c->done_valid || !c->inflight)) gi = c;
    }
  }
  if (gs && !gs->ninst) { /* a size whose first capture failed keeps nothing (and was not dropped as least used) */
    size_drop(vm, gf, gs);
    gf->sizes_dropped--;
  }
  /* Results without a copy keep the instance out of use until the caller
   * lets them go: every instance but the last hands them out, so the last
   * always stays usable, shared by runs that find the others in flight or
   * held (the last: the fourth, or the last made before one ran out of
   * memory). A replay that copies out records `done` once no further
   * instance will be made, for a run sharing its instance to wait on (one
   * that hands its results out is never shared while in flight). */
  *out_zero_copy = gi && !padded && !(gs->full && gi == gs->inst[gs->ninst - 1]);
  if (gi) {
    gi->record_done = gs->full && !*out_zero_copy;
    gi->inflight++;
    gs->inflight++;
    gf->inflight++;
    gf->replays++;
    gf->padded += padded;
    gf->copied_out += !*out_zero_copy;
  }
  /* With an instance, the lock stays held until vm_run_replay has issued
   * the replay: between the choice and the issue, another thread's run
   * would see the instance's results as free and `done` as recorded by
   * its last replay, and could share it without waiting. */
  if (!gi) pthread_mutex_unlock(&vm->graph_mu);
  if (st && mode == RILL_GRAPH_AUTO) {
    rill_status_free(st);
    return NULL;
  }
  if (st) return rill__status_prefix(st, "@%s cannot run as a graph: ", fname);
  *out = gi;
  return NULL;
}

void vm_graph_ended(rill_vm_t *vm, vm_ginst_t *gi) {
  pthread_mutex_lock(&vm->graph_mu);
  vm_gsize_t *gs = gi->gs;
  vm_gfunc_t *gf = &vm->graphs[gs->fi];
  gi->inflight--;
  gs->inflight--;
  gf->inflight--;
  if (gs->dropped && !gs->inflight) {
    for (vm_gsize_t **pp = &gf->dying; *pp; pp = &(*pp)->next)
      if (*pp == gs) {
        *pp = gs->next;
        break;
      }
    size_free(vm, gs);
  }
  pthread_mutex_unlock(&vm->graph_mu);
}

void vm_graph_free(rill_vm_t *vm) {
  vm_buckets_free(vm);
  if (!vm->graphs) return;
  bool any = false;
  for (uint32_t f = 0; f < vm->module->m->nfuncs; f++) any |= vm->graphs[f].sizes || vm->graphs[f].dying;
  if (any) rill_status_free(vm->dev->ops->synchronize(vm->dev));
  for (uint32_t f = 0; f < vm->module->m->nfuncs; f++) {
    vm_gfunc_t *gf = &vm->graphs[f];
    for (vm_gsize_t *n; gf->sizes; gf->sizes = n) {
      n = gf->sizes->next;
      size_free(vm, gf->sizes);
    }
    for (vm_gsize_t *n; gf->dying; gf->dying = n) {
      n = gf->dying->next;
      size_free(vm, gf->dying);
    }
    rill__free(vm->a, gf->rows);
  }
  rill__free(vm->a, vm->graphs);
  vm->graphs = NULL;
}

/* ---- public API ---- */
rill_status_t rill_vm_set_graph_mode(rill_vm_t *vm, const char *function, rill_graph_mode_t mode) {
  if (!vm || mode < RILL_GRAPH_OFF || mode > RILL_GRAPH_ON) return rill__status(RILL_INVALID_ARGUMENT, "set_graph_mode: bad arguments");
  const isa_module_t *m = vm->module->m;
  uint32_t fi = 0;
  if (function && !rill__map_get(&vm->module->func_map, function, strlen(function), &fi))
    return rill__status(RILL_NOT_FOUND, "no function @%s in the module", function);
  pthread_mutex_lock(&vm->graph_mu);
  rill_status_t st = NULL;
  if (!vm->graphs) {
    vm->graphs = rill__calloc(vm->a, m->nfuncs ? m->nfuncs : 1, sizeof(vm_gfunc_t));
    if (!vm->graphs) st = rill__oom();
    for (uint32_t f = 0; !st && f < m->nfuncs; f++) vm->graphs[f].mode = -1;
  }
  if (!st) {
    if (function) vm->graphs[fi].mode = (int)mode;
    else vm->graph_mode = (int)mode;
    /* A new mode tries again what could not be captured before. */
    for (uint32_t f = 0; f < m->nfuncs; f++)
      if (!function || f == fi) vm->graphs[f].failed = false;
  }
  pthread_mutex_unlock(&vm->graph_mu);
  return st;
}

bool rill_vm_graph_info(rill_vm_t *vm, const char *function, rill_graph_info_t *out) {
  uint32_t fi;
  if (!vm || !function || !rill__map_get(&vm->module->func_map, function, strlen(function), &fi)) return false;
  memset(out, 0, sizeof *out);
  if (!vm->graphs) return true;
  pthread_mutex_lock(&vm->graph_mu);
  const vm_gfunc_t *gf = &vm->graphs[fi];
  out->mode = (rill_graph_mode_t)vm_graph_mode(vm, gf);
  for (const vm_gsize_t *gs = gf->sizes; gs; gs = gs->next) out->instances += gs->ninst;
  out->sizes = gf->nsizes;
  out->captures = gf->captures;
  out->sizes_dropped = gf->sizes_dropped;
  out->nodes = gf->nodes;
  out->capture_ms = gf->capture_ms;
  out->instantiate_ms = gf->instantiate_ms;
  out->replays = gf->replays;
  out->padded = gf->padded;
  out->copied_out = gf->copied_out;
  if (gf->failed) snprintf(out->reason, sizeof out->reason, "%s", gf->reason);
  snprintf(out->pad_reason, sizeof out->pad_reason, "%s", gf->pad_why);
  pthread_mutex_unlock(&vm->graph_mu);
  return true;
}

rill_status_t rill_vm_set_graph_sizes(rill_vm_t *vm, int max_sizes) {
  if (!vm || max_sizes < 1) return rill__status(RILL_INVALID_ARGUMENT, "set_graph_sizes: expected a VM and at least 1 size, got %d", max_sizes);
  pthread_mutex_lock(&vm->graph_mu);
  vm->graph_sizes = max_sizes;
  for (uint32_t f = 0; vm->graphs && f < vm->module->m->nfuncs; f++) sizes_trim(vm, &vm->graphs[f], max_sizes);
  pthread_mutex_unlock(&vm->graph_mu);
  return NULL;
}
