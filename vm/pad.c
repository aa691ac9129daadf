/* pad.c: graph mode's size buckets.
 *
 * rill_vm_set_graph_buckets gives a shape variable a list of sizes. A run
 * in graph mode whose binding of that variable is n, below a listed size,
 * runs at the smallest listed size b >= n instead, so that one graph serves
 * every size up to b: the inputs are copied into the instance's stage, which
 * the graph copies in (rows n..b-1 hold zeros, or what an earlier replay
 * left there), the graph is
 * replayed, and the first n rows of each result are copied out. That is
 * exact only where every result row depends on the same row of the inputs
 * alone, which is checked once per function and variable over its
 * bytecode (vm_rows_check): each op must keep the rows apart (ops_rows), with
 * the variable a whole dimension of each value, and each parameter and
 * result must hold its rows as one run of bytes (the dimensions before the
 * variable's all 1), so that a row prefix is a byte prefix. Calls and
 * branches are not followed: a function with them is not padded. A
 * function that fails the check runs each size exactly (why: in
 * rill_vm_graph_info).
 */
#include <stdio.h>
#include <stdlib.h>

#include "vm.h"

enum { ROWS_NONE = -1, ROWS_MIXED = -2, ROWS_UNWRITTEN = -3 };

static bool mentions(const isa_syms_t *s, int64_t d, uint32_t v) {
  if (!isa_dim_is_sym(d)) return false;
  const isa_symexpr_t *e = &s->exprs.items[isa_sym_id(d)];
  for (uint32_t t = 0; t < e->nterms; t++)
    for (uint32_t k = 0; k < e->terms[t].natoms; k++) {
      const isa_symatom_t *a = &s->atoms.items[e->terms[t].atoms[k]];
      if (a->is_div ? mentions(s, a->num, v) : a->var == v) return true;
    }
  return false;
}

/* The axis of t whose size is variable v itself; ROWS_NONE where no size
 * names v, ROWS_MIXED where v is inside an expression or in two sizes. */
static int axis_of(const isa_syms_t *s, const rill_type_t *t, uint32_t v) {
  int axis = ROWS_NONE;
  for (int d = 0; d < t->rank; d++) {
    if (!mentions(s, t->dims[d], v)) continue;
    if (vm_dim_var(s, t->dims[d]) != (int32_t)v || axis != ROWS_NONE) return ROWS_MIXED;
    axis = d;
  }
  return axis;
}

/* Rows at axis a of t are one run of bytes: the dims before it are all 1. */
static bool leading(const rill_type_t *t, int a) {
  for (int d = 0; d < a; d++)
    if (t->dims[d] != 1) return false;
  return true;
}

/* A write into register r: every other register over the same memory
 * (group[]: a storage's views and their aliases) that holds data now holds
 * what r's write put there, read through another type: mixed. */
static void clobber(int *st, const uint32_t *group, uint32_t nregs, uint32_t r) {
  for (uint32_t q = 0; q < nregs; q++)
    if (q != r && group[q] == group[r] && st[q] != ROWS_UNWRITTEN) st[q] = ROWS_MIXED;
}

/* Whether op-table entry d (an alias: a reshape without attributes) keeps
 * the rows apart, operand and result axes ia and oa (ops_rows), with its
 * parameters as the registry normalises them. */
static bool keeps_rows(isa_syms_t *syms, const isa_opdecl_t *d, bool alias, const int *ia, const int *oa) {
  const ops_def_t *def = ops_find(d->name);
  ops_params_t p = {0};
  rill_type_t ot[OPS_FUSED_MAX_OUT + 4];
  uint32_t no;
  rill_status_t e = def && !alias ? ops_infer_sym(def, syms, d->in, d->nin, d->attrs, d->nattrs, ot, RILL_ARRAY_LEN(ot), &no, &p) : NULL;
  bool ok = def && !e && ops_rows(def, &p, d, ia, oa);
  rill_status_free(e);
  return ok;
}

int vm_rows_check(const isa_module_t *m, uint32_t fi, uint32_t v, char *why, size_t nwhy) {
  const isa_func_t *f = &m->funcs[fi];
  const isa_syms_t *s = &m->syms;
  const char *var = s->vars.items[v].name;
  int *st = malloc(sizeof(int) * (f->nregs ? f->nregs : 1));
  /* group[r]: which memory register r's tensor lies in (a generation per allocation) */
  uint32_t *group = malloc(sizeof(uint32_t) * (f->nregs ? f->nregs : 1)), gen = 0;
  isa_syms_t syms;
  isa_syms_init(&syms, s->a);
  rill_status_t cs = st && group ? isa_syms_copy(&syms, s) : rill__oom();
  bool ok = !cs, used = false;
  if (cs) snprintf(why, nwhy, "%s", rill_status_message(cs));
  rill_status_free(cs);
  for (uint32_t r = 0; ok && r < f->nregs; r++) st[r] = ROWS_UNWRITTEN, group[r] = ++gen;
  char b[96];
  for (uint32_t i = 0; ok && i < f->nparams; i++) {
    const rill_type_t *t = &f->regs[i].type;
    st[i] = axis_of(s, t, v);
    used |= st[i] >= 0;
    if (st[i] == ROWS_MIXED || (st[i] >= 0 && !leading(t, st[i]))) {
      snprintf(why, nwhy, "parameter %%%s (%s) does not hold %s's rows apart", f->regs[i].name ? f->regs[i].name : "?",
               isa_sym_format_type(s, t, b, sizeof b), var);
      ok = false;
    }
  }
  isa_insn_t in;
  const char *bad, *first_mix = NULL;
  uint32_t mix_line = 0, mix_pc = 0;
  for (uint32_t pc = 0; ok && pc < f->ncode; pc += in.len) {
    if (!isa_decode(f->code, f->ncode, pc, &in, &bad)) {
      snprintf(why, nwhy, "instruction at %u: %s", pc, bad);
      ok = false;
      break;
    }
    const isa_operand_t *o = in.operands;
    switch (in.op) {
    case ISA_OP_ALLOC_STORAGE: group[o[0].value] = ++gen; break;
    case ISA_OP_VIEW: st[o[0].value] = ROWS_UNWRITTEN, group[o[0].value] = group[o[1].value]; break;
    case ISA_OP_ALLOC_TENSOR:
    case ISA_OP_RELEASE: st[o[0].value] = ROWS_UNWRITTEN, group[o[0].value] = ++gen; break;
    case ISA_OP_LOAD_CONST: st[o[0].value] = ROWS_NONE, group[o[0].value] = ++gen; break;
    case ISA_OP_MOVE: st[o[0].value] = st[o[1].value], group[o[0].value] = group[o[1].value]; break;
    case ISA_OP_ALIAS:
    case ISA_OP_INVOKE: {
      /* An alias is a reshape's view: the same rule as the op. */
      bool alias = in.op == ISA_OP_ALIAS;
      const isa_opdecl_t *d = alias ? NULL : &m->ops[o[0].value];
      isa_opdecl_t ad = {0};
      if (alias) {
        ad = (isa_opdecl_t){.name = "reshape", .in = &f->regs[o[1].value].type, .nin = 1, .out = &f->regs[o[0].value].type, .nout = 1};
        d = &ad;
      }
      uint32_t nin = alias ? 1 : o[1].value, nout = alias ? 1 : o[2].value;
      const uint32_t *ins = alias ? &o[1].value : o[1].list, *outs = alias ? &o[0].value : o[2].list;
      int ia[OPS_FUSED_MAX_IN + 4], oa[OPS_FUSED_MAX_OUT + 4];
      bool mixed = false, rows = false, inherited = false;
      if (nin > RILL_ARRAY_LEN(ia) || nout > RILL_ARRAY_LEN(oa)) mixed = true;
      for (uint32_t k = 0; !mixed && k < nin; k++) {
        int x = st[ins[k]];
        if (x == ROWS_UNWRITTEN) {
          snprintf(why, nwhy, "%s at %u reads a tensor no op of the run wrote", d->name, pc);
          ok = false;
        }
        inherited |= x == ROWS_MIXED;
        rows |= x >= 0;
        ia[k] = x;
      }
      mixed |= inherited;
      for (uint32_t k = 0; !mixed && k < nout; k++) mixed |= (oa[k] = axis_of(s, &d->out[k], v)) == ROWS_MIXED;
      if (!mixed && rows) mixed = !keeps_rows(&syms, d, alias, ia, oa);
      uint32_t col;
      if (mixed && !inherited && !first_mix) {
        first_mix = d->name, mix_pc = pc;
        isa_func_loc(f, pc, &mix_line, &col); /* mix_line stays 0 where unknown */
      }
      if (alias) group[outs[0]] = group[ins[0]];
      for (uint32_t k = 0; k < nout; k++) {
        if (!alias) clobber(st, group, f->nregs, outs[k]);
        st[outs[k]] = mixed ? ROWS_MIXED : oa[k];
      }
      break;
    }
    case ISA_OP_CALL:
    case ISA_OP_HOST_WAIT:
    case ISA_OP_BR_IF:
    case ISA_OP_GOTO:
      snprintf(why, nwhy, "@%s has calls or branches, which are not followed", f->name);
      ok = false;
      break;
    case ISA_OP_LOAD_STATE:
      /* a padded run would write its padded rows' values into the state */
      snprintf(why, nwhy, "@%s uses the VM's states, which a padded run would write", f->name);
      ok = false;
      break;
    case ISA_OP_RETURN:
      for (uint32_t k = 0; ok && k < o[0].value; k++) {
        uint32_t r = o[0].list[k];
        int x = st[r];
        if (x == ROWS_MIXED || x == ROWS_UNWRITTEN || (x >= 0 && !leading(&f->regs[r].type, x))) {
          if (x >= 0 || !first_mix)
            snprintf(why, nwhy, "result %u of @%s (%s) %s", k + 1, f->name, isa_sym_format_type(s, &f->regs[r].type, b, sizeof b),
                     x >= 0 ? "does not hold its rows as one run of bytes" : "depends on other rows of its inputs");
          else {
            char at[48];
            if (mix_line) snprintf(at, sizeof at, "line %u", mix_line);
            else snprintf(at, sizeof at, "@%s+%u", f->name, mix_pc);
            snprintf(why, nwhy, "result %u of @%s (%s) depends on other rows of its inputs: %s (%s) mixes %s's rows", k + 1, f->name,
                     isa_sym_format_type(s, &f->regs[r].type, b, sizeof b), first_mix, at, var);
          }
          ok = false;
        }
      }
      break;
    default: break;
    }
  }
  isa_syms_free(&syms);
  free(st);
  free(group);
  return !ok ? ROWS_NOT : used ? ROWS_OK : ROWS_UNUSED;
}

bool vm_graph_pad(rill_vm_t *vm, uint32_t fi, int64_t *vals) {
  const isa_module_t *m = vm->module->m;
  bool padded = false;
  pthread_mutex_lock(&vm->graph_mu);
  vm_gfunc_t *gf = vm->graphs ? &vm->graphs[fi] : NULL;
  int mode = gf ? vm_graph_mode(vm, gf) : RILL_GRAPH_OFF;
  for (size_t v = 0; mode != RILL_GRAPH_OFF && !gf->failed && vm->buckets && v < m->syms.vars.len; v++) {
    const vm_buckets_t *bk = &vm->buckets[v];
    uint32_t k = 0;
    while (k < bk->n && bk->sizes[k] < vals[v]) k++;
    if (k == bk->n || bk->sizes[k] == vals[v]) continue;
    if (!gf->rows && !(gf->rows = rill__calloc(vm->a, m->syms.vars.len, sizeof(int8_t)))) break;
    if (!gf->rows[v]) {
      char why[sizeof gf->pad_why];
      gf->rows[v] = (int8_t)vm_rows_check(m, fi, (uint32_t)v, why, sizeof why);
      if (gf->rows[v] == ROWS_NOT && !gf->pad_why[0]) snprintf(gf->pad_why, sizeof gf->pad_why, "%s", why);
    }
    if (gf->rows[v] != ROWS_OK) continue;
    vals[v] = bk->sizes[k];
    padded = true;
  }
  pthread_mutex_unlock(&vm->graph_mu);
  return padded;
}

rill_status_t vm_pad_fill(rill_vm_t *vm, rill_tensor_t *const *t, rill_tensor_t *const *src, uint32_t n) {
  size_t most = 1;
  for (uint32_t i = 0; i < n; i++)
    if (t[i]->nbytes > most) most = t[i]->nbytes;
  void *zeros = calloc(1, most);
  if (!zeros) return rill__oom();
  const vm_device_ops_t *D = vm->dev->ops;
  int stream;
  rill_status_t st = D->stream_acquire(vm->dev, &stream);
  if (st) {
    free(zeros);
    return st;
  }
  for (uint32_t i = 0; !st && i < n; i++) {
    st = D->copy_h2d(vm->dev, stream, vm_tensor_data(t[i]), zeros, t[i]->nbytes);
    if (!st && src) st = D->copy_d2d(vm->dev, stream, vm_tensor_data(t[i]), vm_tensor_data(src[i]), src[i]->nbytes);
  }
  /* Nothing queued may read the zeros once they go. */
  rill_status_t sy = D->stream_sync(vm->dev, stream);
  if (!st) st = sy;
  else rill_status_free(sy);
  D->stream_release(vm->dev, stream);
  free(zeros);
  return st;
}

rill_status_t vm_pad_inputs(rill_vm_t *vm, const isa_func_t *f, rill_tensor_t *const *inputs, rill_tensor_t ***out) {
  rill_tensor_t **t = rill__calloc(vm->a, f->nparams ? f->nparams : 1, sizeof *t);
  if (!t) return rill__oom();
  rill_status_t st = NULL;
  for (uint32_t i = 0; !st && i < f->nparams; i++) {
    if (rill__type_eq(&inputs[i]->type, &f->regs[i].type)) t[i] = (rill_tensor_t *)vm_obj_retain(&inputs[i]->hdr);
    else if (!(st = rill_tensor_create(vm, &f->regs[i].type, NULL, &t[i]))) st = vm_pad_fill(vm, &t[i], &inputs[i], 1);
  }
  if (st) {
    vm_pad_release(vm, t, f->nparams);
    return st;
  }
  *out = t;
  return NULL;
}

void vm_pad_release(rill_vm_t *vm, rill_tensor_t **t, uint32_t n) {
  for (uint32_t i = 0; t && i < n; i++)
    if (t[i]) vm_obj_release(&t[i]->hdr);
  rill__free(vm->a, t);
}

void vm_buckets_free(rill_vm_t *vm) {
  for (size_t v = 0; vm->buckets && v < vm->module->m->syms.vars.len; v++) rill__free(vm->a, vm->buckets[v].sizes);
  rill__free(vm->a, vm->buckets);
  vm->buckets = NULL;
}

rill_status_t rill_vm_set_graph_buckets(rill_vm_t *vm, const char *dim, const int64_t *sizes, int nsizes) {
  if (!vm || !dim || nsizes < 0 || (nsizes && !sizes)) return rill__status(RILL_INVALID_ARGUMENT, "set_graph_buckets: bad arguments");
  const isa_syms_t *s = &vm->module->m->syms;
  size_t v = 0;
  while (v < s->vars.len && strcmp(s->vars.items[v].name, dim) != 0) v++;
  if (v == s->vars.len) return rill__status(RILL_NOT_FOUND, "no shape variable %s in the module", dim);
  const isa_symvar_t *sv = &s->vars.items[v];
  for (int k = 0; k < nsizes; k++) {
    if (sizes[k] < sv->lo || sizes[k] > sv->hi)
      return rill__status(RILL_INVALID_ARGUMENT, "graph bucket %lld of %s is outside its range [%lld, %lld]", (long long)sizes[k], dim,
                          (long long)sv->lo, (long long)sv->hi);
    if (k && sizes[k] <= sizes[k - 1])
      return rill__status(RILL_INVALID_ARGUMENT, "graph buckets of %s must ascend: %lld after %lld", dim, (long long)sizes[k],
                          (long long)sizes[k - 1]);
  }
  int64_t *copy = nsizes ? rill__alloc(vm->a, sizeof *sizes * (size_t)nsizes) : NULL;
  if (nsizes && !copy) return rill__oom();
  if (nsizes) memcpy(copy, sizes, sizeof *sizes * (size_t)nsizes);
  pthread_mutex_lock(&vm->graph_mu);
  rill_status_t st = NULL;
  if (!vm->buckets && !(vm->buckets = rill__calloc(vm->a, s->vars.len, sizeof *vm->buckets))) st = rill__oom();
  if (!st) {
    rill__free(vm->a, vm->buckets[v].sizes);
    vm->buckets[v] = (vm_buckets_t){copy, (uint32_t)nsizes};
    copy = NULL;
    /* The reasons given are for the buckets before: checked again on use. */
    for (uint32_t f = 0; vm->graphs && f < vm->module->m->nfuncs; f++) {
      rill__free(vm->a, vm->graphs[f].rows);
      vm->graphs[f].rows = NULL;
      vm->graphs[f].pad_why[0] = 0;
    }
  }
  pthread_mutex_unlock(&vm->graph_mu);
  rill__free(vm->a, copy);
  return st;
}
