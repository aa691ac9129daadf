/* assembler.c: the assembler's entry points (rill_assemble). */
#include <stdio.h>
#include <stdlib.h>

#include "asm.h"

/* What an image's constants point into (the context's arena: folded
 * constants; the weights files, mapped), kept with the image. */
typedef struct asm_keep {
  const rill_allocator_t *a;
  rill_arena_t arena;
  isa_st_t **st;
  size_t nst;
} asm_keep_t;

static void keep_release(void *p) {
  asm_keep_t *k = p;
  for (size_t i = 0; i < k->nst; i++) isa_st_free(k->st[i]);
  rill__free(k->a, k->st);
  rill__arena_free(&k->arena);
  rill__free(k->a, k);
}

/* The module in memory (rill_asm_options_t.output_image): the context's
 * arena and weights files go with it. */
static rill_status_t write_image(asm_ctx_t *c, const isa_module_t *m, rill_module_image_t **out) {
  asm_keep_t *k = rill__calloc(c->a, 1, sizeof *k);
  if (k) k->st = rill__calloc(c->a, c->weights.len ? c->weights.len : 1, sizeof *k->st);
  if (!k || !k->st) {
    if (k) rill__free(c->a, k);
    return rill__oom();
  }
  rill_status_t st = isa_write_image(m, c->a, out);
  if (!st) snprintf((*out)->dir, sizeof (*out)->dir, "%s", c->dir);
  if (!st && (st = rill_module_image_keep(*out, keep_release, k))) {
    rill_module_image_free(*out);
    *out = NULL;
  }
  if (st) {
    rill__free(c->a, k->st);
    rill__free(c->a, k);
    return st;
  }
  k->a = c->a;
  k->arena = c->arena;
  rill__arena_init(&c->arena, c->a);
  for (size_t i = 0; i < c->weights.len; i++)
    if (c->weights.items[i].st) k->st[k->nst++] = c->weights.items[i].st, c->weights.items[i].st = NULL;
  return NULL;
}

static void ctx_free(asm_ctx_t *c) {
  for (size_t i = 0; i < c->weights.len; i++) isa_st_free(c->weights.items[i].st);
  RILL_VEC_FREE(c->a, &c->weights);
  RILL_VEC_FREE(c->a, &c->funcs);
  RILL_VEC_FREE(c->a, &c->consts);
  RILL_VEC_FREE(c->a, &c->ops);
  RILL_VEC_FREE(c->a, &c->trees);
  RILL_VEC_FREE(c->a, &c->states);
  rill__map_free(&c->const_map);
  rill__map_free(&c->state_map);
  rill__map_free(&c->func_map);
  rill__map_free(&c->lit_map);
  rill__map_free(&c->op_map);
  rill__map_free(&c->stack_map);
  rill__map_free(&c->prof_map);
  rill__free(c->a, c->prof_us);
  rill__free(c->a, c->prof_two_us);
  rill__free(c->a, c->toks);
  isa_syms_free(&c->syms);
  rill__arena_free(&c->arena);
}

/* -O1: drops the constants and op-table entries that no instruction names
 * any more (folding and fusion leave them behind), renumbering the rest in
 * the code, so a VM neither uploads nor prepares them. */
static rill_status_t prune(asm_ctx_t *c, isa_func_t *funcs, size_t nf) {
  size_t nk = c->consts.len, no = c->ops.len;
  uint32_t *kmap = rill__calloc(c->a, nk ? nk : 1, 4), *omap = rill__calloc(c->a, no ? no : 1, 4);
  rill_status_t st = kmap && omap ? NULL : rill__oom();
  for (int pass = 0; !st && pass < 2; pass++) {
    for (size_t i = 0; i < nf; i++) {
      const isa_func_t *fn = &funcs[i];
      isa_insn_t in;
      const char *why;
      for (uint32_t pc = 0; pc < fn->ncode && isa_decode(fn->code, fn->ncode, pc, &in, &why); pc += in.len) {
        uint32_t w = pc + 1;
        for (int k = 0; k < in.noperands; k++) {
          char kind = in.operands[k].kind;
          if (kind == 'k' || kind == 'o') {
            uint32_t *map = kind == 'k' ? kmap : omap;
            if (!pass) map[fn->code[w]] = 1;
            else fn->code[w] = map[fn->code[w]];
          }
          w += (kind == 'U' || kind == 'W' || kind == 'D') ? 1 + in.operands[k].value : 1;
        }
      }
    }
    if (pass) {
      for (size_t i = 0; i < c->states.len; i++)
        if (c->states.items[i].init != ISA_NONE) c->states.items[i].init = kmap[c->states.items[i].init];
      break;
    }
    for (size_t i = 0; i < c->states.len; i++)
      if (c->states.items[i].init != ISA_NONE) kmap[c->states.items[i].init] = 1;
    uint32_t n = 0;
    for (size_t k = 0; k < nk; k++)
      if (kmap[k]) { kmap[k] = n; c->consts.items[n++] = c->consts.items[k]; }
    c->consts.len = n;
    n = 0;
    for (size_t k = 0; k < no; k++)
      if (omap[k] || k < c->nexplicit_ops) { omap[k] = n; c->ops.items[n++] = c->ops.items[k]; }
    c->ops.len = n;
  }
  rill__free(c->a, kmap);
  rill__free(c->a, omap);
  return st;
}

static rill_status_t assemble(asm_ctx_t *c, uint8_t **out_bytes, size_t *out_size) {
  double t0 = rill__now_us(), tp0 = t0;
  RILL_TRY(asm_lex(c));
  RILL_TRY(asm_parse_module(c));
  rill__timing_since("assembly/parse", tp0);
  for (size_t i = 0; i + 1 < c->ntoks && !c->has_emit; i++)
    c->has_emit = c->toks[i].kind == T_NAME && c->toks[i].len == 4 && !memcmp(c->toks[i].text, "emit", 4) && c->toks[i + 1].kind == T_LPAREN;
  /* Collectives keep their order as emits do (every rank issues them alike). */
  for (size_t i = 0; i + 1 < c->ntoks && !c->has_emit; i++) {
    char nm[32];
    const token_t *t = &c->toks[i];
    if (t->kind != T_NAME || t->len >= sizeof nm || c->toks[i + 1].kind != T_LPAREN) continue;
    memcpy(nm, t->text, t->len);
    nm[t->len] = 0;
    const ops_def_t *d = ops_find(nm);
    c->has_emit = d && ops_collective(d) != OPS_COLL_NONE;
  }
  size_t nf = c->funcs.len;
  isa_func_t *funcs = rill__arena_alloc(&c->arena, sizeof(isa_func_t) * (nf ? nf : 1));
  if (!funcs) return rill__oom();
  int tp = c->opts ? c->opts->tensor_parallel : 0, dp = c->opts ? c->opts->data_parallel : 0, pp = c->opts ? c->opts->pipeline_parallel : 0;
  if (dp > 1) tp = dp; /* (the same way through: every IR first) */
  if (pp > 1) tp = pp;
  size_t cap = nf + (pp > 1 ? 2 * (size_t)pp : 0); /* the pipeline's stage and pick functions */
  funcs = pp > 1 ? rill__arena_alloc(&c->arena, sizeof(isa_func_t) * cap) : funcs;
  if (!funcs) return rill__oom();
  if (tp > 1) c->has_emit = true; /* the collectives the split adds keep their order: every rank issues them alike */
  if (tp > 1) {
    /* every function's IR first: the split is decided for the module's states at once */
    ir_func_t *irs = rill__arena_alloc(&c->arena, sizeof(ir_func_t) * (cap ? cap : 1));
    bool *built = rill__arena_alloc(&c->arena, cap ? cap : 1);
    if (!irs || !built) return rill__oom();
    memset(built, 0, cap ? cap : 1);
    rill_status_t st = NULL;
    double tb = rill__now_us();
    for (size_t i = 0; !st && i < nf; i++) {
      if (c->funcs.items[i].lowered) st = asm_build_lowered(c, (uint32_t)i, &funcs[i]);
      else if (!(st = asm_build_ir(c, (uint32_t)i, &irs[i]))) built[i] = true;
    }
    rill__timing_since("assembly/check", tb);
    double ts = rill__now_us();
    if (!st) st = pp > 1 ? asm_pipeline_parallel(c, irs, built, &nf, cap) : dp > 1 ? asm_data_parallel(c, irs, built, nf) : asm_tensor_parallel(c, irs, built, nf);
    rill__timing_since(pp > 1 ? "assembly/pipeline split" : dp > 1 ? "assembly/data split" : "assembly/tensor split", ts);
    for (size_t i = 0; i < nf; i++) {
      if (!st && built[i]) st = asm_run_passes(c, &irs[i], &funcs[i]);
      if (built[i]) {
        RILL_VEC_FREE(c->a, &irs[i].nodes);
        RILL_VEC_FREE(c->a, &irs[i].values);
      }
    }
    if (st) return st;
  }
  for (size_t i = 0; tp <= 1 && i < nf; i++) {
    if (c->funcs.items[i].lowered) {
      RILL_TRY(asm_build_lowered(c, (uint32_t)i, &funcs[i]));
    } else {
      ir_func_t f;
      double tb = rill__now_us();
      rill_status_t st = asm_build_ir(c, (uint32_t)i, &f);
      rill__timing_since("assembly/check", tb);
      if (!st) st = asm_run_passes(c, &f, &funcs[i]);
      RILL_VEC_FREE(c->a, &f.nodes);
      RILL_VEC_FREE(c->a, &f.values);
      if (st) return st;
    }
  }
  /* (a split module drops the whole weights that only split ones replaced, at -O0 too) */
  double tv = rill__now_us();
  if (!(c->opts && c->opts->no_opt) || tp > 1) RILL_TRY(prune(c, funcs, nf));
  isa_module_t *m;
  RILL_TRY(isa_module_create(c->a, &m));
  m->name = c->module_name;
  m->precision = c->precision;
  m->source = c->source_name ? c->source_name : c->path;
  m->nweights = (uint32_t)c->weights.len;
  m->weights = rill__arena_alloc(&m->arena, sizeof(isa_weights_t) * (m->nweights ? m->nweights : 1));
  if (!m->weights) { isa_module_free(m); return rill__oom(); }
  for (uint32_t i = 0; i < m->nweights; i++) {
    m->weights[i].alias = c->weights.items[i].alias;
    m->weights[i].path = c->weights.items[i].path;
  }
  m->nconsts = (uint32_t)c->consts.len;
  m->consts = c->consts.items;
  m->nops = (uint32_t)c->ops.len;
  m->ops = c->ops.items;
  m->nfuncs = (uint32_t)nf;
  m->funcs = funcs;
  m->ntrees = (uint32_t)c->trees.len;
  m->trees = c->trees.items;
  m->nstates = (uint32_t)c->states.len;
  m->states = c->states.items;
  rill_status_t st = isa_syms_copy(&m->syms, &c->syms);
  if (st) { isa_module_free(m); return st; }
  st = isa_verify(m, &ops_resolver);
  if (st && rill_status_code(st) != RILL_OUT_OF_MEMORY) {
    rill_status_t e = asm_error(c, 1, 1, "%s", rill_status_message(st));
    rill_status_free(st);
    st = e;
  }
  rill__timing_since("assembly/verify", tv);
  rill__timing_since("assembly", t0);
  const char *file = c->opts ? c->opts->output_file : NULL;
  *out_bytes = NULL;
  double tw = rill__now_us();
  if (!st && !file && c->opts && c->opts->output_image && !c->opts->profile) {
    *c->opts->output_image = NULL;
    *out_size = 0;
    st = write_image(c, m, c->opts->output_image);
    isa_module_free(m);
    rill__timing_since("module image", tw);
    return st;
  }
  if (!st && file && !(c->opts && c->opts->profile)) {
    /* the constants written from where they lie (the weights file's mapping) */
    st = isa_write_file(m, c->a, file, out_size);
    isa_module_free(m);
    rill__timing_since("module write", tw);
    return st;
  }
  if (!st) st = isa_write(m, c->a, out_bytes, out_size);
  isa_module_free(m);
  rill__timing_since("module write", tw);
  if (!st && (st = asm_profile_trees(c, out_bytes, out_size))) {
    rill__free(c->a, *out_bytes);
    *out_bytes = NULL;
  }
  if (!st && file) {
    st = rill__write_file_atomic(file, *out_bytes, *out_size);
    rill__free(c->a, *out_bytes);
    *out_bytes = NULL;
  }
  return st;
}

static void ctx_init(asm_ctx_t *c, const rill_allocator_t *a, const char *path, const char *source, size_t source_len,
                     const rill_asm_options_t *options) {
  memset(c, 0, sizeof *c);
  c->a = a;
  c->path = path ? path : "<input>";
  c->src = source;
  c->src_len = source_len;
  c->opts = options;
  c->precision = options ? options->precision : RILL_PRECISION_EXACT;
  rill__dirname(c->path, c->dir, sizeof c->dir);
  rill__arena_init(&c->arena, a);
  rill__map_init(&c->const_map, a);
  rill__map_init(&c->state_map, a);
  rill__map_init(&c->func_map, a);
  rill__map_init(&c->lit_map, a);
  rill__map_init(&c->op_map, a);
  rill__map_init(&c->stack_map, a);
  rill__map_init(&c->prof_map, a);
  isa_syms_init(&c->syms, a);
}

rill_status_t rill_assemble(const rill_allocator_t *a, const char *path, const char *source,
                            size_t source_len, const rill_asm_options_t *options,
                            uint8_t **out_bytes, size_t *out_size) {
  if (!a) a = rill_allocator_system();
  asm_ctx_t c;
  ctx_init(&c, a, path, source, source_len, options);
  if (options && options->max_streams && (options->max_streams < 1 || options->max_streams > ISA_MAX_STREAMS))
    return rill__status(RILL_INVALID_ARGUMENT, "--max-streams must be 1..%d, got %d", ISA_MAX_STREAMS, options->max_streams);
  if (options && (options->tensor_parallel < 0 || options->tensor_parallel > ISA_MAX_SHARD_PARTS))
    return rill__status(RILL_INVALID_ARGUMENT, "--tensor-parallel must be 1..%d, got %d", ISA_MAX_SHARD_PARTS, options->tensor_parallel);
  if (options && (options->data_parallel < 0 || options->data_parallel > ISA_MAX_SHARD_PARTS))
    return rill__status(RILL_INVALID_ARGUMENT, "--data-parallel must be 1..%d, got %d", ISA_MAX_SHARD_PARTS, options->data_parallel);
  if (options && (options->pipeline_parallel < 0 || options->pipeline_parallel > ISA_MAX_SHARD_PARTS))
    return rill__status(RILL_INVALID_ARGUMENT, "--pipeline-parallel must be 1..%d, got %d", ISA_MAX_SHARD_PARTS, options->pipeline_parallel);
  if (options && options->pipeline_parallel > 1 && (options->data_parallel > 1 || options->tensor_parallel > 1))
    return rill__status(RILL_UNIMPLEMENTED, "--pipeline-parallel with --tensor-parallel or --data-parallel (a grid of ranks) is not built: give one");
  if (options && options->data_parallel > 1 && options->tensor_parallel > 1)
    return rill__status(RILL_UNIMPLEMENTED, "--data-parallel and --tensor-parallel together (a job's ranks as a grid) are not built: give one");
  if (options && (unsigned)options->precision >= RILL_PRECISION_COUNT)
    return rill__status(RILL_INVALID_ARGUMENT, "--precision must be exact, tf32, f16 or bf16 (got mode %d)", (int)options->precision);
  rill_status_t st = assemble(&c, out_bytes, out_size);
  ctx_free(&c);
  return st;
}

rill_status_t rill_assemble_file(const rill_allocator_t *a, const char *path,
                                 const rill_asm_options_t *options, uint8_t **out_bytes,
                                 size_t *out_size) {
  if (!a) a = rill_allocator_system();
  uint8_t *src;
  size_t n;
  double t0 = rill__now_us();
  RILL_TRY(rill__read_file(a, path, &src, &n));
  rill__timing_since("read", t0);
  rill_status_t st = rill_assemble(a, path, (const char *)src, n, options, out_bytes, out_size);
  rill__free(a, src);
  return st;
}

/* One op on host data: its attributes read as a statement's are, its
 * result types inferred by the registry, and its CPU reference kernel run
 * through ops_eval, as -O1 folds a constant op. */
rill_status_t rill_op_eval(const char *op, const char *attrs, const rill_type_t *in_types, const void *const *in, int nin,
                           rill_type_t *out_types, void **out, int max_out, int *out_n) {
  *out_n = 0;
  if (!op || nin < 0 || nin > 64 || max_out < 1) return rill__status(RILL_INVALID_ARGUMENT, "rill_op_eval: bad arguments");
  const ops_def_t *def = ops_find(op);
  if (!def) return rill__status(RILL_NOT_FOUND, "unknown op '%s'", op);
  for (int i = 0; i < nin; i++)
    if (isa_type_is_sym(&in_types[i])) return rill__status(RILL_INVALID_ARGUMENT, "%s: operand %d has symbolic sizes", op, i + 1);
  const rill_allocator_t *a = rill_allocator_system();
  rill_buf_t src;
  rill__buf_init(&src, a);
  rill_status_t st = rill__buf_printf(&src, "{%s}", attrs ? attrs : "");
  asm_ctx_t c;
  ctx_init(&c, a, "<attributes>", src.data ? (const char *)src.data : "{}", src.len, NULL);
  isa_attr_t *at = NULL;
  uint32_t na = 0, nout = 0;
  size_t pos = 0;
  if (!st) st = asm_lex(&c);
  if (!st) st = asm_parse_attrs(&c, &pos, &at, &na);
  if (!st && c.toks[pos].kind != T_EOF && c.toks[pos].kind != T_NEWLINE) st = asm_error_at(&c, &c.toks[pos], "text after the attributes");
  rill_type_t ot[64];
  ops_params_t p;
  if (!st) st = ops_infer(def, in_types, (uint32_t)nin, at, na, ot, (uint32_t)(max_out < 64 ? max_out : 64), &nout, &p);
  for (uint32_t r = 0; !st && r < nout; r++) {
    size_t bytes;
    if (!rill__type_sizes(&ot[r], NULL, &bytes)) st = rill__status(RILL_INVALID_ARGUMENT, "%s: result %u too large", op, r + 1);
    else if (!(out[r] = calloc(bytes ? bytes : 1, 1))) st = rill__oom();
    else out_types[r] = ot[r], *out_n = (int)r + 1;
  }
  if (!st) {
    isa_opdecl_t decl = {op, na, (uint32_t)nin, nout, at, (rill_type_t *)in_types, ot};
    st = ops_eval(&decl, (void *const *)in, out, a);
  }
  if (st) {
    for (int r = 0; r < *out_n; r++) free(out[r]), out[r] = NULL;
    *out_n = 0;
  }
  ctx_free(&c);
  rill__buf_free(&src);
  return st;
}
