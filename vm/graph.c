/* graph.c: graph mode's bookkeeping.
 *
 * Per function: whether it runs in graph mode, why it could not be captured,
 * and up to VM_GRAPH_INSTANCES instances. The first run in graph mode warms
 * up (an interpreted run with the caller's inputs, so that kernels are
 * compiled and algorithms chosen before anything is recorded), then captures
 * the function (interp.c, vm_run_sync) and instantiates the graph; that run
 * and later ones replay. A run picks an idle instance (no replay in flight,
 * no caller holding its results) and, when no other replay is in flight,
 * takes its results without a copy; else captures another while there is
 * room; else replays one whose results no caller holds, copying the results
 * out (replays of one instance are ordered on the device); else, with every
 * instance's results held, runs interpreted. Shapes are static, so
 * a function's input signature is its parameter types and one set of
 * instances serves it.
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
  rill__free(vm->a, gi->params);
  rill__free(vm->a, gi->base_refs);
  rill_results_free(vm, gi->results, (int)gi->nresults);
  for (size_t i = 0; i < gi->keep.len; i++) vm_obj_release(gi->keep.items[i]);
  RILL_VEC_FREE(vm->a, &gi->keep);
  rill__free(vm->a, gi);
}

/* Captures and instantiates one instance of function fi. */
static rill_status_t inst_new(rill_vm_t *vm, uint32_t fi, vm_gfunc_t *gf, vm_ginst_t **out) {
  vm_device_t *dev = vm->dev;
  if (!dev->ops->capture_begin) return rill__status(RILL_UNIMPLEMENTED, "the %s device cannot capture graphs", dev->ops->name);
  vm_ginst_t *gi = rill__calloc(vm->a, 1, sizeof *gi);
  if (!gi) return rill__oom();
  double t0 = rill__now_us();
  rill_status_t st = vm_run_sync(vm, fi, NULL, gi);
  double t1 = rill__now_us();
  if (!st) st = dev->ops->graph_instantiate(dev, gi->graph, &gi->exec);
  double t2 = rill__now_us();
  if (!st) {
    gf->nodes = dev->ops->graph_nodes(dev, gi->graph);
    dev->ops->graph_destroy(dev, gi->graph);
    gi->graph = NULL;
    st = dev->ops->event_create(dev, &gi->done);
  }
  if (!st && !(gi->base_refs = rill__calloc(vm->a, gi->nresults ? gi->nresults : 1, sizeof(int)))) st = rill__oom();
  for (uint32_t i = 0; !st && i < gi->nresults; i++) gi->base_refs[i] = atomic_load(&gi->results[i]->hdr.refs);
  if (st) {
    /* Nothing of the capture may still be queued when its memory goes. */
    rill_status_free(dev->ops->synchronize(dev));
    inst_free(vm, gi);
    return st;
  }
  gf->capture_ms = (t1 - t0) * 1e-3;
  gf->instantiate_ms = (t2 - t1) * 1e-3;
  *out = gi;
  return NULL;
}

static int mode_of(const rill_vm_t *vm, const vm_gfunc_t *gf) { return gf->mode >= 0 ? gf->mode : vm->graph_mode; }

/* No caller holds (or will be handed) the instance's result tensors. */
static bool results_free(const vm_ginst_t *gi) {
  for (uint32_t i = 0; i < gi->nresults; i++)
    if (atomic_load(&gi->results[i]->hdr.refs) != gi->base_refs[i]) return false;
  return true;
}

rill_status_t vm_graph_pick(rill_vm_t *vm, uint32_t fi, rill_tensor_t *const *inputs, vm_ginst_t **out, bool *out_zero_copy) {
  vm_gfunc_t *gf = &vm->graphs[fi];
  int mode = mode_of(vm, gf);
  *out = NULL;
  if (mode != RILL_GRAPH_OFF && !gf->failed && vm->module->m->syms.vars.len) {
    pthread_mutex_lock(&vm->graph_mu);
    snprintf(gf->reason, sizeof gf->reason, "the module has shape variables, and graphs per size are not made yet");
    gf->failed = true;
    pthread_mutex_unlock(&vm->graph_mu);
  }
  if (mode == RILL_GRAPH_OFF || (gf->failed && mode == RILL_GRAPH_AUTO)) return NULL;
  const char *fname = vm->module->m->funcs[fi].name;
  if (gf->failed) return rill__status(RILL_UNIMPLEMENTED, "@%s cannot run as a graph: %s", fname, gf->reason);
  pthread_mutex_lock(&vm->graph_mu);
  vm_ginst_t *gi = NULL;
  int busy = 0;
  for (int i = 0; i < gf->ninst; i++) {
    busy += gf->inst[i]->inflight;
    if (!gi && !gf->inst[i]->inflight && results_free(gf->inst[i])) gi = gf->inst[i];
  }
  /* Results without a copy only for a run alone in flight: an instance
   * whose results a caller holds is out of use, so concurrent runs copy. */
  *out_zero_copy = busy == 0;
  rill_status_t st = NULL;
  if (!gi && gf->ninst < VM_GRAPH_INSTANCES) {
    /* The first capture follows a warm-up run. */
    if (!gf->ninst) st = vm_run_sync(vm, fi, inputs, NULL);
    if (!st) st = inst_new(vm, fi, gf, &gi);
    if (!st) gf->inst[gf->ninst++] = gi;
    else if (gf->ninst == 0 || rill_status_code(st) != RILL_OUT_OF_MEMORY) {
      /* Out of memory for a further instance: share the ones there are. */
      snprintf(gf->reason, sizeof gf->reason, "%s", rill_status_message(st));
      gf->failed = true;
    }
  }
  if (!gi && gf->ninst) {
    rill_status_free(st);
    st = NULL;
    *out_zero_copy = false;
    /* Sharing an instance in flight: only one whose last replay recorded
     * `done` for this one to wait on (else the run is interpreted). */
    for (int k = 0; k < gf->ninst && !gi; k++) {
      vm_ginst_t *c = gf->inst[gf->next++ % (uint32_t)gf->ninst];
      if (results_free(c) && (c->done_valid || !c->inflight)) gi = c;
    }
  }
  if (gi) {
    gi->record_done = gf->ninst == VM_GRAPH_INSTANCES;
    gi->inflight++;
    gf->replays++;
  }
  pthread_mutex_unlock(&vm->graph_mu);
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
  gi->inflight--;
  pthread_mutex_unlock(&vm->graph_mu);
}

void vm_graph_free(rill_vm_t *vm) {
  if (!vm->graphs) return;
  bool any = false;
  for (uint32_t f = 0; f < vm->module->m->nfuncs; f++) any |= vm->graphs[f].ninst > 0;
  if (any) rill_status_free(vm->dev->ops->synchronize(vm->dev));
  for (uint32_t f = 0; f < vm->module->m->nfuncs; f++)
    for (int i = 0; i < vm->graphs[f].ninst; i++) inst_free(vm, vm->graphs[f].inst[i]);
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
  out->mode = (rill_graph_mode_t)mode_of(vm, gf);
  out->instances = gf->ninst;
  out->nodes = gf->nodes;
  out->capture_ms = gf->capture_ms;
  out->instantiate_ms = gf->instantiate_ms;
  out->replays = gf->replays;
  if (gf->failed) snprintf(out->reason, sizeof out->reason, "%s", gf->reason);
  pthread_mutex_unlock(&vm->graph_mu);
  return true;
}
