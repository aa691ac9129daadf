/* shapes.c: shape variables bound at invoke.
 *
 * A module with shape variables (isa/sym.h) is checked once for its
 * symbolic signatures; a call binds each variable from the dimensions of
 * the arguments that name it, checks the binding (one size per name,
 * inside its range, and every other symbolic dimension of a parameter
 * equal to its expression's value) before anything runs, and then runs an
 * instance of the module for those sizes: the same code, with every
 * register's and op declaration's type (and names in attributes) computed
 * from the bound values, and op plans made for them. Instances are kept
 * per binding for the VM's life, most recently used first, so a size seen
 * before costs one lookup. The device prepares each instance's plans of op
 * entries with symbolic sizes (plan->dev: its own state per size); entries
 * without share the VM's prepared state. Storage sizes stay as the
 * assembler planned them (a range's largest).
 */
#include <stdio.h>
#include <stdlib.h>

#include "vm.h"

struct vm_inst {
  vm_inst_t *next;
  int64_t *vals;            /* per variable */
  isa_module_t m;           /* shallow copy: funcs and ops of this binding */
  ops_plan_t *plans;        /* a plan whose decl is not this instance's op entry is borrowed (plan_borrowed) */
  rill_arena_t arena;
};

static const char *pname(const isa_func_t *f, uint32_t i) { return f->regs[i].name ? f->regs[i].name : "?"; }

int32_t vm_dim_var(const isa_syms_t *s, int64_t d) {
  if (!isa_dim_is_sym(d)) return -1;
  const isa_symexpr_t *e = &s->exprs.items[isa_sym_id(d)];
  if (e->nterms != 1 || e->terms[0].coef != 1 || e->terms[0].natoms != 1) return -1;
  const isa_symatom_t *a = &s->atoms.items[e->terms[0].atoms[0]];
  return a->is_div ? -1 : (int32_t)a->var;
}

/* Variables a module may have before picking an instance allocates. */
#define FEW_VARS 16

static rill_status_t bind_args(const isa_module_t *m, const isa_func_t *f, rill_tensor_t *const *inputs, int64_t *vals) {
  const isa_syms_t *s = &m->syms;
  size_t nv = s->vars.len;
  uint32_t few[2 * FEW_VARS];
  uint32_t *where = nv <= FEW_VARS ? few : calloc(nv, 2 * sizeof(uint32_t));
  if (!where) return rill__oom();
  rill_status_t st = NULL;
  char b1[96], b2[96], e1[48];
  for (size_t k = 0; k < nv; k++) vals[k] = -1;
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    const rill_type_t *want = &f->regs[i].type, *got = &inputs[i]->type;
    if (want->dtype != got->dtype || want->rank != got->rank) {
      st = rill__status(RILL_INVALID_ARGUMENT, "input %u for parameter %%%s: expected %s, got %s", i + 1, pname(f, i),
                        isa_sym_format_type(s, want, b1, 96), rill_type_format(got, b2, 96));
      break;
    }
    for (int d = 0; !st && d < want->rank; d++) {
      int32_t v = vm_dim_var(s, want->dims[d]);
      if (v < 0) continue;
      const isa_symvar_t *sv = &s->vars.items[v];
      int64_t x = got->dims[d];
      if (vals[v] >= 0 && vals[v] != x) {
        st = rill__status(RILL_INVALID_ARGUMENT, "input %u for parameter %%%s: dimension %d binds %s to %lld, but parameter %%%s's dimension %u bound it to %lld",
                          i + 1, pname(f, i), d, sv->name, (long long)x, pname(f, where[2 * v]), where[2 * v + 1], (long long)vals[v]);
      } else if (x < sv->lo || x > sv->hi) {
        if (sv->declared)
          st = rill__status(RILL_INVALID_ARGUMENT, "input %u for parameter %%%s: dimension %d binds %s to %lld, outside its range [%lld, %lld]",
                            i + 1, pname(f, i), d, sv->name, (long long)x, (long long)sv->lo, (long long)sv->hi);
        else
          st = rill__status(RILL_INVALID_ARGUMENT, "input %u for parameter %%%s: dimension %d binds %s to %lld; an undeclared shape variable is 1 and up",
                            i + 1, pname(f, i), d, sv->name, (long long)x);
      } else {
        vals[v] = x;
        where[2 * v] = i;
        where[2 * v + 1] = (uint32_t)d;
      }
    }
  }
  /* Variables no parameter binds take their smallest size; then every dimension must agree. */
  for (size_t k = 0; k < nv; k++)
    if (vals[k] < 0) vals[k] = s->vars.items[k].lo;
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    const rill_type_t *want = &f->regs[i].type;
    for (int d = 0; !st && d < want->rank; d++) {
      int64_t x;
      if (!isa_dim_is_sym(want->dims[d])) x = want->dims[d];
      else if (!isa_sym_eval(s, want->dims[d], vals, &x)) x = -1;
      if (x != inputs[i]->type.dims[d])
        st = rill__status(RILL_INVALID_ARGUMENT, "input %u for parameter %%%s: dimension %d is %lld, expected %s%s", i + 1, pname(f, i), d,
                          (long long)inputs[i]->type.dims[d], isa_sym_format(s, want->dims[d], e1, sizeof e1),
                          isa_dim_is_sym(want->dims[d]) ? " at the sizes the other dimensions bind" : "");
    }
  }
  if (where != few) free(where);
  return st;
}

static rill_status_t subst_type(const isa_syms_t *s, const int64_t *vals, rill_type_t *t) {
  char e1[48];
  for (int d = 0; d < t->rank; d++) {
    if (!isa_dim_is_sym(t->dims[d])) continue;
    int64_t x;
    if (!isa_sym_eval(s, t->dims[d], vals, &x))
      return rill__status(RILL_INVALID_ARGUMENT, "the size %s is negative or overflows at the bound sizes", isa_sym_format(s, t->dims[d], e1, sizeof e1));
    t->dims[d] = x;
  }
  size_t n;
  if (!rill__type_sizes(t, &n, NULL)) return rill__status(RILL_INVALID_ARGUMENT, "a tensor is too large at the bound sizes");
  return NULL;
}

/* Whether plan i is another instance's, taken whole by inst_make (its decl
 * is that instance's copy of the op entry): neither it nor its state is
 * this instance's to free. */
static bool plan_borrowed(const vm_inst_t *in, uint32_t i) { return in->plans[i].decl && in->plans[i].decl != &in->m.ops[i]; }

/* Frees an instance, with the device states of its own plans (those of op
 * entries without symbolic sizes are the VM's, only borrowed). */
static void inst_free(rill_vm_t *vm, vm_inst_t *in) {
  const isa_module_t *src = vm->module->m;
  uint32_t nops = src->nops;
  if (in->plans) {
    for (uint32_t i = 0; i < nops; i++)
      if (!ops_decl_is_sym(&src->ops[i]) || plan_borrowed(in, i)) in->plans[i].dev = NULL;
    if (vm->dev && vm->dev->ops->unprepare) vm->dev->ops->unprepare(vm->dev, in->plans, nops);
    for (uint32_t i = 0; i < nops; i++)
      if (!plan_borrowed(in, i)) ops_plan_fini(&in->plans[i]);
  }
  free(in->plans);
  rill__arena_free(&in->arena);
  free(in);
}

/* Whether an op entry's sizes name a variable bound at run time. */
static bool decl_runtime(const isa_syms_t *s, const isa_opdecl_t *o) {
  for (uint32_t j = 0; j < o->nin + o->nout; j++) {
    const rill_type_t *t = j < o->nin ? &o->in[j] : &o->out[j - o->nin];
    for (int d = 0; d < t->rank; d++)
      if (isa_sym_runtime(s, t->dims[d])) return true;
  }
  for (uint32_t j = 0; j < o->nattrs; j++)
    for (uint32_t k = 0; o->attrs[j].kind == ISA_ATTR_INTS && k < o->attrs[j].count; k++)
      if (isa_sym_runtime(s, o->attrs[j].ints[k])) return true;
  return false;
}

/* Whether two instances' copies of one op entry came out the same (their
 * sizes substituted into copies of the same bytes, so memcmp is exact). */
static bool decl_same(const isa_opdecl_t *a, const isa_opdecl_t *b) {
  if (memcmp(a->in, b->in, sizeof(rill_type_t) * a->nin) || memcmp(a->out, b->out, sizeof(rill_type_t) * a->nout)) return false;
  for (uint32_t j = 0; j < a->nattrs; j++)
    if (a->attrs[j].kind == ISA_ATTR_INTS && memcmp(a->attrs[j].ints, b->attrs[j].ints, sizeof(int64_t) * a->attrs[j].count)) return false;
  return true;
}

/* The instance at vals. base (or NULL): the instance a bind_dims left; an
 * op entry whose sizes came out the same in both (one over variables the
 * binding did not touch) takes base's plan, prepared state and all, so a
 * run that binds sizes a dozen times (a detection model's counts) does
 * not prepare the same kernels and cuDNN plans a dozen times. */
static rill_status_t inst_make(rill_vm_t *vm, const int64_t *vals, const vm_inst_t *base, vm_inst_t **out) {
  const isa_module_t *src = vm->module->m;
  const isa_syms_t *s = &src->syms;
  vm_inst_t *in = calloc(1, sizeof *in);
  if (!in) return rill__oom();
  rill__arena_init(&in->arena, vm->a);
  rill_arena_t *A = &in->arena;
  rill_status_t st = NULL;
  /* Copies of n elements read none where n is 0 (an op without attributes:
   * its pointer may be the end of the module's memory). */
  in->m = *src;
  memset(&in->m.syms, 0, sizeof in->m.syms);
  in->vals = rill__arena_memdup(A, vals, sizeof(int64_t) * (s->vars.len ? s->vars.len : 1));
  in->m.funcs = rill__arena_alloc(A, sizeof(isa_func_t) * (src->nfuncs ? src->nfuncs : 1));
  in->m.ops = rill__arena_alloc(A, sizeof(isa_opdecl_t) * (src->nops ? src->nops : 1));
  in->plans = calloc(src->nops ? src->nops : 1, sizeof(ops_plan_t));
  if (!in->vals || !in->m.funcs || !in->m.ops || !in->plans) st = rill__oom();
  for (uint32_t i = 0; !st && i < src->nfuncs; i++) {
    const isa_func_t *f = &src->funcs[i];
    isa_func_t *g = &in->m.funcs[i];
    *g = *f;
    g->regs = rill__arena_memdup(A, f->regs, sizeof(isa_reg_t) * f->nregs);
    g->results = rill__arena_memdup(A, f->results, sizeof(rill_type_t) * f->nresults);
    if (!g->regs || !g->results) { st = rill__oom(); break; }
    for (uint32_t r = 0; !st && r < f->nregs; r++)
      if (!f->regs[r].storage) st = subst_type(s, vals, &g->regs[r].type);
    for (uint32_t r = 0; !st && r < f->nresults; r++) st = subst_type(s, vals, &g->results[r]);
  }
  for (uint32_t i = 0; !st && i < src->nops; i++) {
    const isa_opdecl_t *o = &src->ops[i];
    isa_opdecl_t *p = &in->m.ops[i];
    *p = *o;
    p->in = rill__arena_memdup(A, o->in, sizeof(rill_type_t) * o->nin);
    p->out = rill__arena_memdup(A, o->out, sizeof(rill_type_t) * o->nout);
    p->attrs = rill__arena_memdup(A, o->attrs, sizeof(isa_attr_t) * o->nattrs);
    if (!p->in || !p->out || !p->attrs) { st = rill__oom(); break; }
    for (uint32_t j = 0; !st && j < o->nin; j++) st = subst_type(s, vals, &p->in[j]);
    for (uint32_t j = 0; !st && j < o->nout; j++) st = subst_type(s, vals, &p->out[j]);
    for (uint32_t j = 0; !st && j < o->nattrs; j++) {
      isa_attr_t *a = &p->attrs[j];
      if (a->kind != ISA_ATTR_INTS) continue;
      if (!(a->ints = rill__arena_memdup(A, o->attrs[j].ints, sizeof(int64_t) * a->count))) { st = rill__oom(); break; }
      for (uint32_t k = 0; k < a->count; k++)
        if (isa_dim_is_sym(a->ints[k]) && !(strcmp(a->name, "pads") ? isa_sym_eval(s, a->ints[k], vals, &a->ints[k])
                                                                     : isa_sym_eval_signed(s, a->ints[k], vals, &a->ints[k])))
          st = rill__status(RILL_INVALID_ARGUMENT, "op %s: attribute '%s' is negative or overflows at the bound sizes", o->name, a->name);
    }
    if (!st) st = ops_plan_init(&in->plans[i], p, vm->a);
    if (st && decl_runtime(s, o)) {
      /* sizes bind_dims has not bound yet: planned at the binding that binds them (an invoke before it is refused) */
      rill_status_free(st);
      st = NULL;
      ops_plan_fini(&in->plans[i]);
      memset(&in->plans[i], 0, sizeof in->plans[i]);
      continue;
    }
    if (!st) in->plans[i].chan = vm->chan.hdr ? &vm->chan : NULL;
    if (st) st = rill__status_prefix(st, "op %s at the bound sizes: ", o->name);
    /* An entry the sizes do not touch runs with the VM's prepared state. */
    if (!st && !ops_decl_is_sym(o)) in->plans[i].dev = vm->plans[i].dev;
  }
  if (!st) vm_choose(src, vals, in->plans);
  for (uint32_t i = 0; !st && base && i < src->nops; i++) {
    const ops_plan_t *bp = &base->plans[i];
    ops_plan_t *p = &in->plans[i];
    /* (a device that prepares: only a prepared state, which its prepare then leaves alone) */
    if (!ops_decl_is_sym(&src->ops[i]) || !p->def || !bp->def || (!bp->dev && vm->dev->ops->prepare) || bp->choice != p->choice ||
        !decl_same(p->decl, bp->decl))
      continue;
    ops_plan_fini(p);
    *p = *bp; /* (its decl stays base's: plan_borrowed) */
  }
  double tp = rill__now_us();
  if (!st && vm->dev->ops->prepare) st = vm->dev->ops->prepare(vm->dev, in->plans, src->nops);
  rill__timing_since("first run/prepare", tp);
  if (st) { inst_free(vm, in); return st; }
  *out = in;
  return NULL;
}

/* The results' types of function fi at the sizes vals, in a new array. */
static rill_status_t result_types(rill_vm_t *vm, const isa_module_t *m, uint32_t fi, const int64_t *vals, rill_type_t **out) {
  const isa_func_t *f = &m->funcs[fi];
  rill_type_t *t = rill__calloc(vm->a, f->nresults ? f->nresults : 1, sizeof *t);
  if (!t) return rill__oom();
  rill_status_t st = NULL;
  for (uint32_t k = 0; !st && k < f->nresults; k++) {
    t[k] = f->results[k];
    st = subst_type(&m->syms, vals, &t[k]);
  }
  if (st) rill__free(vm->a, t);
  else *out = t;
  return st;
}

rill_status_t vm_shapes_pick(rill_vm_t *vm, uint32_t fi, rill_tensor_t *const *inputs, rill_type_t **out_exact, const isa_module_t **out_m,
                             const ops_plan_t **out_plans) {
  const isa_module_t *m = vm->module->m;
  size_t nv = m->syms.vars.len;
  /* vals, then (for buckets) the sizes the inputs bind before padding */
  int64_t few[2 * FEW_VARS];
  int64_t *vals = nv <= FEW_VARS ? few : calloc(2 * nv, sizeof(int64_t)), *orig = vals + nv;
  if (!vals) return rill__oom();
  rill_status_t st = bind_args(m, &m->funcs[fi], inputs, vals);
  /* Graph mode may run the call at a bucket's size; the results are cut to these. */
  rill_type_t *exact = NULL;
  if (!st && out_exact) {
    memcpy(orig, vals, sizeof(int64_t) * nv);
    if (vm_graph_pad(vm, fi, vals)) st = result_types(vm, m, fi, orig, &exact);
  }
  if (st) {
    if (vals != few) free(vals);
    return st;
  }
  pthread_mutex_lock(&vm->inst_mu);
  vm_inst_t **pp = &vm->insts, *in;
  while ((in = *pp) && memcmp(in->vals, vals, sizeof(int64_t) * nv) != 0) pp = &in->next;
  if (in && pp != &vm->insts) { /* most recently used first */
    *pp = in->next;
    in->next = vm->insts;
    vm->insts = in;
  }
  if (!in && !(st = inst_make(vm, vals, NULL, &in))) {
    in->next = vm->insts;
    vm->insts = in;
  }
  pthread_mutex_unlock(&vm->inst_mu);
  if (vals != few) free(vals);
  if (st) {
    rill__free(vm->a, exact);
    return st;
  }
  if (out_exact) *out_exact = exact;
  *out_m = &in->m;
  *out_plans = in->plans;
  return NULL;
}

/* The instance (of vm->insts, which only vm_shapes_free empties) whose module is m. */
static vm_inst_t *inst_of(rill_vm_t *vm, const isa_module_t *m) {
  pthread_mutex_lock(&vm->inst_mu);
  vm_inst_t *in = vm->insts;
  while (in && &in->m != m) in = in->next;
  pthread_mutex_unlock(&vm->inst_mu);
  return in;
}

rill_status_t vm_shapes_rebind(rill_vm_t *vm, uint32_t entry, const uint32_t *vars, const int64_t *vals, int n, const isa_module_t **m,
                               const ops_plan_t **plans) {
  const isa_module_t *src = vm->module->m;
  const isa_syms_t *s = &src->syms;
  vm_inst_t *cur = inst_of(vm, *m);
  if (!cur) return rill__status(RILL_INTERNAL, "bind_dims outside an instance of the module's sizes");
  size_t nv = s->vars.len;
  int64_t few[FEW_VARS];
  int64_t *nvals = nv <= FEW_VARS ? few : malloc(sizeof(int64_t) * nv);
  if (!nvals) return rill__oom();
  memcpy(nvals, cur->vals, sizeof(int64_t) * nv);
  const isa_func_t *f = &src->funcs[entry];
  rill_status_t st = NULL;
  bool changed = false;
  for (int i = 0; !st && i < n; i++) {
    const isa_symvar_t *sv = &s->vars.items[vars[i]];
    int64_t x = vals[i];
    if (x < 0 || (sv->declared && (x < sv->lo || x > sv->hi))) {
      if (sv->declared)
        st = rill__status(RILL_RUNTIME_ERROR, "bind_dims: %s := %lld, outside its range [%lld, %lld]", sv->name, (long long)x, (long long)sv->lo,
                          (long long)sv->hi);
      else if (!strncmp(sv->name, "unsupported_", 12))
        /* a fault flag for values the program does not support (an
         * importer's, named for them): unimplemented, not a fault */
        st = rill__status(RILL_UNIMPLEMENTED, "bind_dims: %s := %lld: the values given are not supported", sv->name, (long long)x);
      else
        st = rill__status(RILL_RUNTIME_ERROR, "bind_dims: %s := %lld, a negative size", sv->name, (long long)x);
      break;
    }
    if (nvals[vars[i]] == x) continue;
    /* A size the call's arguments bind stays theirs. */
    for (uint32_t p = 0; !st && p < f->nparams; p++)
      for (int d = 0; d < f->regs[p].type.rank; d++)
        if (vm_dim_var(s, f->regs[p].type.dims[d]) == (int32_t)vars[i]) {
          st = rill__status(RILL_RUNTIME_ERROR, "bind_dims: %s := %lld, but the arguments bind it to %lld (parameter %%%s, dimension %d)", sv->name,
                            (long long)x, (long long)nvals[vars[i]], pname(f, p), d);
          break;
        }
    nvals[vars[i]] = x;
    changed = true;
  }
  if (!st && changed) {
    pthread_mutex_lock(&vm->inst_mu);
    vm_inst_t **pp = &vm->insts, *in;
    while ((in = *pp) && memcmp(in->vals, nvals, sizeof(int64_t) * nv) != 0) pp = &in->next;
    if (!in && !(st = inst_make(vm, nvals, cur, &in))) {
      in->next = vm->insts;
      vm->insts = in;
    }
    pthread_mutex_unlock(&vm->inst_mu);
    if (!st) {
      *m = &in->m;
      *plans = in->plans;
    }
  }
  if (nvals != few) free(nvals);
  return st;
}

void vm_shapes_free(rill_vm_t *vm) {
  while (vm->insts) {
    vm_inst_t *n = vm->insts->next;
    inst_free(vm, vm->insts);
    vm->insts = n;
  }
}
