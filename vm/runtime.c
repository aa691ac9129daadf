/* runtime.c: modules, VMs, tensors and storages. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "rill_config.h"
#include "../isa/safetensors.h"
#if RILL_HAVE_CUDA
#include "../kernels/cuda_api.h"
#endif
#include "vm.h"

const char *rill_version_string(void) { return RILL_VERSION_STRING; }

/* ---- modules ---- */
static rill_status_t resolve_linked(rill_module_t *mod, const char *base_dir) {
  isa_module_t *m = mod->m;
  for (uint32_t w = 0; w < m->nweights; w++) {
    bool needed = false;
    for (uint32_t i = 0; i < m->nconsts; i++)
      needed |= m->consts[i].linked && !m->consts[i].shard_parts && !m->consts[i].stage_ranks && m->consts[i].weights == w;
    if (!needed) continue;
    char path[4096];
    RILL_TRY(rill__path_join(base_dir, m->weights[w].path, path, sizeof path));
    if (!mod->wfiles) {
      if (!(mod->wfiles = rill__calloc(mod->a, m->nweights, sizeof *mod->wfiles))) return rill__oom();
      mod->nwfiles = m->nweights;
    }
    /* mapped: the constants point into it, checked in place, never copied */
    rill_status_t st = rill__file_open(mod->a, path, &mod->wfiles[w]);
    if (st) return rill__status_prefix(st, "linked weights: ");
    const uint8_t *bytes = mod->wfiles[w].data;
    size_t size = mod->wfiles[w].size;
    for (uint32_t i = 0; !st && i < m->nconsts; i++) {
      isa_const_t *c = &m->consts[i];
      if (!c->linked || c->shard_parts || c->stage_ranks || c->weights != w) continue; /* a shard (a stage's weight): its rank's part at attach (vm_upload_shards) */
      char key[256];
      rill_escape(c->tensor, strlen(c->tensor), key, sizeof key);
      if (c->file_offset > size || c->size > size - c->file_offset) {
        st = rill__status(RILL_MALFORMED, "linked weights: %s is too short for tensor \"%s\"", path, key);
      } else if (isa_const_sum(c, bytes + c->file_offset, c->size) != c->checksum) {
        st = rill__status(RILL_MALFORMED, "linked weights: tensor \"%s\" in %s does not match the module's checksum (the file changed)", key, path);
      } else {
        c->data = bytes + c->file_offset;
      }
    }
    if (st) return st;
  }
  return NULL;
}

/* file: the module's bytes, mapped or read, which the module takes over
 * (its constants left there); NULL: bytes, copied. */
static rill_status_t module_load(const rill_allocator_t *a, const uint8_t *bytes, size_t size, rill_file_t *file,
                                 rill_module_image_t *img, const char *base_dir, rill_module_t **out) {
  if (!a) a = rill_allocator_system();
  rill_module_t *mod = rill__calloc(a, 1, sizeof *mod);
  if (!mod) {
    if (file) rill__file_close(file);
    rill_module_image_free(img);
    return rill__oom();
  }
  mod->a = a;
  mod->file.fd = -1;
  atomic_init(&mod->refs, 1);
  rill__map_init(&mod->func_map, a);
  rill_status_t st;
  double t0 = rill__now_us();
  if (img) {
    mod->image = img;
    st = isa_read_image(a, img, &mod->m);
  } else if (file) {
    mod->file = *file;
    st = isa_read_in_place(a, mod->file.data, mod->file.size, &mod->m);
  } else {
    st = isa_read(a, bytes, size, &mod->m);
  }
  if (!st) st = isa_verify(mod->m, &ops_resolver);
  snprintf(mod->base_dir, sizeof mod->base_dir, "%s", base_dir ? base_dir : ".");
  if (!st) st = resolve_linked(mod, base_dir ? base_dir : ".");
  for (uint32_t i = 0; !st && i < mod->m->nfuncs; i++)
    st = rill__map_put(&mod->func_map, mod->m->funcs[i].name, strlen(mod->m->funcs[i].name), i);
  rill__timing_since("module load", t0);
  if (st) {
    rill_module_release(mod);
    return st;
  }
  *out = mod;
  return NULL;
}

rill_status_t rill_module_load(const rill_allocator_t *a, const uint8_t *bytes, size_t size,
                               const char *base_dir, rill_module_t **out) {
  return module_load(a, bytes, size, NULL, NULL, base_dir, out);
}

rill_status_t rill_module_load_image(const rill_allocator_t *a, rill_module_image_t *image, rill_module_t **out) {
  if (!image) return rill__status(RILL_INVALID_ARGUMENT, "rill_module_load_image: no image");
  return module_load(a, NULL, 0, NULL, image, image ? image->dir : NULL, out);
}

/* The file mapped (rill__file_open; small ones read), the module's
 * constants checked and used where they lie in it, not copied. */
rill_status_t rill_module_load_file(const rill_allocator_t *a, const char *path, rill_module_t **out) {
  if (!a) a = rill_allocator_system();
  rill_file_t f;
  RILL_TRY(rill__file_open(a, path, &f));
  char dir[4096];
  rill__dirname(path, dir, sizeof dir);
  rill_status_t st = module_load(a, NULL, 0, &f, NULL, dir, out);
  return st ? rill__status_prefix(st, "%s: ", path) : NULL;
}

void rill_module_retain(rill_module_t *mod) { atomic_fetch_add(&mod->refs, 1); }

void rill_module_release(rill_module_t *mod) {
  if (!mod || atomic_fetch_sub(&mod->refs, 1) != 1) return;
  isa_module_free(mod->m);
  rill__map_free(&mod->func_map);
  if (mod->wfiles)
    for (uint32_t w = 0; w < mod->nwfiles; w++)
      if (mod->wfiles[w].data) rill__file_close(&mod->wfiles[w]);
  rill__free(mod->a, mod->wfiles);
  if (mod->file.data) rill__file_close(&mod->file);
  rill_module_image_free(mod->image);
  rill__free(mod->a, mod);
}

rill_status_t rill_module_disassemble(const rill_module_t *mod, char **out_text, size_t *out_len) {
  rill_buf_t b;
  rill__buf_init(&b, mod->a);
  rill_status_t st = isa_disassemble(mod->m, &b);
  if (st) {
    rill__buf_free(&b);
    return st;
  }
  *out_text = (char *)b.data;
  *out_len = b.len;
  return NULL;
}

static const isa_func_t *find_func(const rill_module_t *mod, const char *name) {
  uint32_t i;
  return name && rill__map_get(&mod->func_map, name, strlen(name), &i) ? &mod->m->funcs[i] : NULL;
}

rill_precision_t rill_module_precision(const rill_module_t *mod) { return (rill_precision_t)mod->m->precision; }

bool rill_module_function(const rill_module_t *mod, const char *name, int *np, int *nr) {
  const isa_func_t *f = find_func(mod, name);
  if (!f) return false;
  if (np) *np = (int)f->nparams;
  if (nr) *nr = (int)f->nresults;
  return true;
}

bool rill_module_param_type(const rill_module_t *mod, const char *name, int i, rill_type_t *t, const char **pname) {
  const isa_func_t *f = find_func(mod, name);
  if (!f || i < 0 || (uint32_t)i >= f->nparams) return false;
  if (t) *t = f->regs[i].type;
  if (t) for (int d = 0; d < t->rank; d++) if (isa_dim_is_sym(t->dims[d])) t->dims[d] = -1;
  if (pname) *pname = f->regs[i].name ? f->regs[i].name : "";
  return true;
}

bool rill_module_param_type_at(const rill_module_t *mod, const char *name, int i, const int64_t *vals, rill_type_t *t) {
  const isa_func_t *f = find_func(mod, name);
  if (!f || i < 0 || (uint32_t)i >= f->nparams) return false;
  *t = f->regs[i].type;
  for (int d = 0; d < t->rank; d++)
    if (isa_dim_is_sym(t->dims[d]) && (!vals || !isa_sym_eval(&mod->m->syms, t->dims[d], vals, &t->dims[d]))) return false;
  return true;
}

bool rill_module_result_type(const rill_module_t *mod, const char *name, int i, rill_type_t *t) {
  const isa_func_t *f = find_func(mod, name);
  if (!f || i < 0 || (uint32_t)i >= f->nresults) return false;
  *t = f->results[i];
  for (int d = 0; d < t->rank; d++) if (isa_dim_is_sym(t->dims[d])) t->dims[d] = -1;
  return true;
}

/* ---- objects ---- */
void vm_obj_release(vm_obj_t *o) {
  if (!o || atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1) return;
  if (o->kind == OBJ_STORAGE) {
    vm_storage_t *s = (vm_storage_t *)o;
    if (s->borrowed) {
      atomic_fetch_sub(&s->vm->mem[s->kind], s->size);
      atomic_fetch_sub(&s->vm->mem_all, s->size);
      rill_module_release(s->vm->module);
    } else if (!s->wrapped) {
      s->vm->dev->ops->free(s->vm->dev, atomic_load_explicit(&s->stream, memory_order_relaxed), s->ptr, s->size);
      atomic_fetch_sub(&s->vm->mem[s->kind], s->size);
      atomic_fetch_sub(&s->vm->mem_all, s->size);
    }
    else if (s->user_release) s->user_release(s->user);
    rill__free(s->vm->a, s);
  } else {
    rill_tensor_t *t = (rill_tensor_t *)o;
    vm_obj_release(&t->storage->hdr);
    rill__free(t->vm->a, t);
  }
}

/* *peak := max(*peak, v) */
static void atomic_max(atomic_size_t *peak, size_t v) {
  size_t p = atomic_load(peak);
  while (v > p && !atomic_compare_exchange_weak(peak, &p, v)) {}
}

rill_status_t vm_storage_new(rill_vm_t *vm, int stream, size_t size, vm_mem_kind_t kind, vm_storage_t **out) {
  vm_storage_t *s = rill__calloc(vm->a, 1, sizeof *s);
  if (!s) return rill__oom();
  rill_status_t st = vm->dev->ops->alloc(vm->dev, stream, size, &s->ptr);
  if (st) {
    rill__free(vm->a, s);
    return st;
  }
  atomic_init(&s->hdr.refs, 1);
  s->hdr.kind = OBJ_STORAGE;
  s->vm = vm;
  s->size = size;
  atomic_init(&s->stream, stream);
  s->kind = (uint8_t)kind;
  size_t k = atomic_fetch_add(&vm->mem[kind], size) + size;
  if (kind == VM_MEM_BUFFERS) atomic_max(&vm->mem_buffers_peak, k);
  atomic_max(&vm->mem_all_peak, atomic_fetch_add(&vm->mem_all, size) + size);
  *out = s;
  return NULL;
}

rill_status_t vm_tensor_new(rill_vm_t *vm, const rill_type_t *type, vm_storage_t *storage, size_t offset,
                            rill_tensor_t **out) {
  rill_tensor_t *t = rill__calloc(vm->a, 1, sizeof *t);
  if (!t) return rill__oom();
  atomic_init(&t->hdr.refs, 1);
  t->hdr.kind = OBJ_TENSOR;
  t->vm = vm;
  t->type = *type;
  rill__type_sizes(type, NULL, &t->nbytes);
  t->storage = (vm_storage_t *)vm_obj_retain(&storage->hdr);
  t->offset = offset;
  *out = t;
  return NULL;
}

/* ---- VMs ---- */
static int device_ordinal(const char *device);

/* A VM's devices: "cpu", "cuda", "cuda:N", or a list "cpu:0,cpu:1,..." (the
 * cpu devices in order) or "cuda:0,cuda:1,..." (GPUs, each once). *cuda,
 * the count and the GPUs' ordinals; NULL, or why the list is malformed. */
static const char *device_list(const char *device, bool *cuda, int *n, int ords[ISA_MAX_DEVICES]) {
  *n = 0;
  for (const char *p = device;;) {
    const char *e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    char item[32];
    if (len == 0 || len >= sizeof item) return "unknown device (expected cpu, cuda, cuda:N, or a list such as cpu:0,cpu:1 or cuda:0,cuda:1)";
    memcpy(item, p, len);
    item[len] = 0;
    bool is_cpu = strcmp(item, "cpu") == 0 || strncmp(item, "cpu:", 4) == 0;
    int ord = 0;
    if (is_cpu && item[3]) { /* cpu:N, its number read as cuda:N's */
      char tmp[40];
      snprintf(tmp, sizeof tmp, "cuda:%s", item + 4);
      ord = device_ordinal(tmp);
    } else if (!is_cpu) {
      ord = device_ordinal(item);
    }
    if (ord < 0) return "unknown device (expected cpu, cuda, cuda:N, or a list such as cpu:0,cpu:1 or cuda:0,cuda:1)";
    if (*n && *cuda == is_cpu) return "a VM's devices are all cpu or all cuda";
    if (*n >= ISA_MAX_DEVICES) return "too many devices (at most 64)";
    *cuda = !is_cpu;
    if (is_cpu && ord != *n) return "cpu devices are listed in order: cpu:0,cpu:1,...";
    for (int i = 0; i < *n; i++)
      if (ords[i] == ord) return "a GPU is listed twice";
    ords[(*n)++] = ord;
    if (!e) return NULL;
    if ((strcmp(item, "cpu") == 0 || strcmp(item, "cuda") == 0)) return "list devices with their numbers (cpu:0,cpu:1 or cuda:0,cuda:1)";
    p = e + 1;
  }
}

/* A GPU found unusable ends its background start (which holds nothing):
 * no thread of it is left running after the answer. */
bool rill_device_usable(const char *device, const char **why) {
  bool cuda;
  int n, ords[ISA_MAX_DEVICES];
  const char *w = device_list(device, &cuda, &n, ords);
  if (!w && cuda && (w = vm_cuda_unusable()))
    for (int i = 0; i < n; i++) vm_cuda_start_end(ords[i]);
  if (why) *why = w;
  return w == NULL;
}

bool rill_device_start(const char *device, const char **why) {
  bool cuda;
  int n, ords[ISA_MAX_DEVICES];
  const char *w = device ? device_list(device, &cuda, &n, ords) : NULL;
  if (why) *why = w;
  if (w) return false;
  if (device && cuda) vm_cuda_start(ords, n);
  return true;
}

#if RILL_HAVE_CUDA
bool rill_cuda_info(rill_cuda_info_t *out, const char **why) {
  const rill_cuda_api_t *api = rill_cuda_api(why);
  if (!api) return false;
  memset(out, 0, sizeof *out);
  out->driver_version = api->driver_version;
  out->nvrtc_major = api->nvrtc_major;
  out->nvrtc_minor = api->nvrtc_minor;
  out->cublaslt_version = api->cublaslt_version;
  out->cudnn_version = api->cudnn_version;
  api->cuDeviceGetCount(&out->device_count);
  CUdevice dev;
  int major = 0, minor = 0;
  if (api->cuDeviceGet(&dev, 0) == CUDA_SUCCESS) {
    api->cuDeviceGetName(out->device_name, sizeof out->device_name, dev);
    api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  }
  out->compute_capability = major * 10 + minor;
  return true;
}
#else
bool rill_cuda_info(rill_cuda_info_t *out, const char **why) {
  (void)out;
  if (why) *why = vm_cuda_unusable();
  return false;
}
#endif

#if !RILL_HAVE_CUDA
const char *vm_cuda_unusable(void) {
  return "this rill was built without the CUDA backend (the CUDA headers were not found at build time)";
}

void vm_cuda_start(const int *ords, int n) { (void)ords; (void)n; }
void vm_cuda_start_wait(int ordinal) { (void)ordinal; }
void vm_cuda_start_end(int ordinal) { (void)ordinal; }

rill_status_t vm_device_cuda_create(const rill_allocator_t *a, int ordinal, vm_release_fn release, vm_device_t **out) {
  (void)a; (void)ordinal; (void)release; (void)out;
  return rill__status(RILL_UNAVAILABLE, "cuda is not usable: %s", vm_cuda_unusable());
}

rill_status_t vm_cuda_make_current(vm_device_t *d) {
  (void)d;
  return rill__status(RILL_UNAVAILABLE, "cuda is not usable: %s", vm_cuda_unusable());
}

bool vm_cuda_enable_peer(vm_device_t *to, vm_device_t *from) {
  (void)to; (void)from;
  return false;
}

rill_status_t vm_cuda_copy_peer(vm_device_t *to, int stream, void *dst, vm_device_t *from, const void *src, size_t n) {
  (void)to; (void)stream; (void)dst; (void)from; (void)src; (void)n;
  return rill__status(RILL_UNAVAILABLE, "cuda is not usable: %s", vm_cuda_unusable());
}
#endif

/* "cpu" -> -1, "cuda" -> 0, "cuda:N" -> N; -2 when malformed. */
static int device_ordinal(const char *device) {
  if (strcmp(device, "cpu") == 0) return -1;
  if (strcmp(device, "cuda") == 0) return 0;
  if (strncmp(device, "cuda:", 5) != 0 || !device[5]) return -2;
  int n = 0;
  for (const char *p = device + 5; *p; p++) {
    if (*p < '0' || *p > '9' || n > 1000) return -2;
    n = n * 10 + (*p - '0');
  }
  return n;
}

/* On the cpu device (host memory is its memory) a module constant is read
 * where the module holds it: the module file's mapping, a linked weights
 * file's, or the module's own copy; never written (constant), never freed
 * here. The storage holds a reference to the module, so those bytes live as
 * long as any tensor over them, even past the VM's own reference. Not for
 * bytes not the module's (a shard's part, made per rank), a fill, or data
 * not aligned to its dtype (the kernels read elements as C types). Saves
 * the copy of every weight into fresh memory (a second per 440 MB on a VM
 * whose first touch of a page is slow). */
static bool borrow_const(rill_vm_t *vm, const isa_const_t *c, rill_tensor_t **out) {
  size_t numel, nbytes;
  rill__type_sizes(&c->type, &numel, &nbytes);
  if (strcmp(vm->dev->ops->name, "cpu") != 0 || c->origin == ISA_CONST_FILL || !c->data || !nbytes ||
      (uintptr_t)c->data % rill_dtype_size(c->type.dtype))
    return false;
  vm_storage_t *s = rill__calloc(vm->a, 1, sizeof *s);
  if (!s) return false;
  atomic_init(&s->hdr.refs, 1);
  s->hdr.kind = OBJ_STORAGE;
  s->vm = vm;
  s->ptr = (void *)c->data;
  s->size = nbytes;
  s->kind = VM_MEM_WEIGHTS;
  s->constant = true;
  s->borrowed = true;
  rill_module_retain(vm->module);
  atomic_fetch_add(&vm->mem[s->kind], nbytes);
  atomic_max(&vm->mem_all_peak, atomic_fetch_add(&vm->mem_all, nbytes) + nbytes);
  rill_status_t st = vm_tensor_new(vm, &c->type, s, 0, out);
  vm_obj_release(&s->hdr);
  if (st) {
    rill_status_free(st);
    *out = NULL;
    return false;
  }
  return true;
}

/* The cpu device's copies of large constants that it cannot borrow (data
 * not aligned to its dtype: a model file's raw bytes): made together at
 * the end of rill_vm_create, on up to 8 threads (the storage is host memory
 * no stream uses yet), pieces of 4 MiB taken in turn; the first touch of
 * the fresh pages is their cost. */
typedef struct host_copy {
  uint8_t *dst;
  const uint8_t *src;
  size_t n;
} host_copy_t;
typedef struct host_copies {
  RILL_VEC(host_copy_t) v;
  atomic_size_t next;  /* the next 4 MiB piece, over all copies in order */
  size_t pieces;
  size_t queued;       /* a device's: bytes queued since its stream was last waited for */
} host_copies_t;
#define HOST_PIECE ((size_t)4 << 20)
#define UPLOAD_PIECE ((size_t)8 << 20)
/* rill_vm_create's uploads wait for their stream after each this many bytes
 * queued: each copy is staged through a pinned buffer that returns to the
 * device's pool when its transfer is done, so without a wait the pool grew
 * by a buffer a constant (BERT-base: some 200, 220 MB pinned) */
#define UPLOAD_BURST ((size_t)32 << 20)

static void *host_copy_worker(void *p) {
  host_copies_t *h = p;
  size_t c = 0, first = 0; /* copy c holds pieces first.. */
  for (size_t k; (k = atomic_fetch_add(&h->next, 1)) < h->pieces;) {
    while (first + (h->v.items[c].n + HOST_PIECE - 1) / HOST_PIECE <= k) first += (h->v.items[c++].n + HOST_PIECE - 1) / HOST_PIECE;
    const host_copy_t *x = &h->v.items[c];
    size_t off = (k - first) * HOST_PIECE, len = x->n - off < HOST_PIECE ? x->n - off : HOST_PIECE;
    memcpy(x->dst + off, x->src + off, len);
  }
  return NULL;
}

static void host_copies_run(host_copies_t *h) {
  h->pieces = 0;
  for (size_t i = 0; i < h->v.len; i++) h->pieces += (h->v.items[i].n + HOST_PIECE - 1) / HOST_PIECE;
  atomic_init(&h->next, 0);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int nt = h->pieces < 2 || ncpu < 2 ? 0 : ncpu > 8 ? 7 : (int)ncpu - 1;
  pthread_t th[8];
  int started = 0;
  for (int t = 0; t < nt; t++)
    if (pthread_create(&th[started], NULL, host_copy_worker, h) == 0) started++;
  host_copy_worker(h);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
}

/* copies: where given (the cpu device, a constant of 1 MiB and more, not a
 * fill), the copy is queued there instead of made now. */
static rill_status_t upload_const_to(rill_vm_t *vm, int stream, const isa_const_t *c, rill_tensor_t **out, host_copies_t *copies) {
  size_t numel, nbytes;
  rill__type_sizes(&c->type, &numel, &nbytes);
  vm_storage_t *s;
  RILL_TRY(vm_storage_new(vm, stream, nbytes, VM_MEM_WEIGHTS, &s));
  s->constant = true;
  rill_status_t st = vm_tensor_new(vm, &c->type, s, 0, out);
  vm_obj_release(&s->hdr);
  if (st) return st;
  if (copies && c->origin != ISA_CONST_FILL && nbytes >= ((size_t)1 << 20) && !strcmp(vm->dev->ops->name, "cpu")) {
    st = RILL_VEC_PUSH(vm->a, &copies->v, ((host_copy_t){vm_tensor_data(*out), c->data, nbytes}));
    if (st) {
      vm_obj_release(&(*out)->hdr);
      *out = NULL;
    }
    return st;
  }
  uint8_t *host = NULL;
  const uint8_t *src = c->data;
  if (c->origin == ISA_CONST_FILL) {
    host = rill__alloc(vm->a, nbytes);
    if (!host) {
      vm_obj_release(&(*out)->hdr);
      *out = NULL; /* the VM's table must not keep a released tensor */
      return rill__oom();
    }
    size_t es = rill_dtype_size(c->type.dtype);
    for (size_t i = 0; i < numel; i++) memcpy(host + i * es, c->data, es);
    src = host;
  }
  /* In pieces of 8 MiB: the cuda device stages each copy through a pinned
   * buffer of its size from a pool, so pieces take a few such buffers,
   * reused, instead of one of the largest weight's size, and a piece's copy
   * into its buffer overlaps the transfer before it. rill_vm_create's
   * uploads (copies given) are not waited for one by one: it waits for its
   * stream after each UPLOAD_BURST bytes, and once after them. */
  uint8_t *dst = vm_tensor_data(*out);
  double tq = rill__now_us();
  for (size_t off = 0; !st && off < nbytes; off += UPLOAD_PIECE)
    st = vm->dev->ops->copy_h2d(vm->dev, stream, dst + off, src + off, nbytes - off < UPLOAD_PIECE ? nbytes - off : UPLOAD_PIECE);
  if (copies) rill__timing_since("vm/weights/copies queued", tq);
  /* a fill's host buffer, and alone (no copies), every upload, is waited for at once; the VM's after each burst */
  bool wait = !copies || host || (copies->queued += nbytes) >= UPLOAD_BURST;
  if (!st && wait) {
    double tw = rill__now_us();
    st = vm->dev->ops->stream_sync(vm->dev, stream);
    if (copies) {
      copies->queued = 0;
      rill__timing_since("vm/weights/waits", tw);
    }
  }
  rill__free(vm->a, host);
  if (st) {
    vm_obj_release(&(*out)->hdr);
    *out = NULL;
  }
  return st;
}

static rill_status_t upload_const(rill_vm_t *vm, int stream, const isa_const_t *c, rill_tensor_t **out) {
  return upload_const_to(vm, stream, c, out, NULL);
}

static void release_obj(vm_obj_t *o) { vm_obj_release(o); }

/* Whether module m sends or receives and some function branches (if) on a
 * comparison of rank() (a pipeline's stages, --pipeline-parallel): a graph
 * would record every rank's branch, sends and receives included. */
static bool rank_branch(const isa_module_t *m) {
  bool p2p = false;
  for (uint32_t i = 0; i < m->nops; i++) p2p |= !strcmp(m->ops[i].name, "sendrecv");
  for (uint32_t f = 0; p2p && f < m->nfuncs; f++) {
    const isa_func_t *fn = &m->funcs[f];
    isa_insn_t in;
    const char *bad;
    /* per register: 1 + the op entry of the invoke that last wrote it (0: none) */
    uint32_t from[4096] = {0}, ops_of_arg[4096] = {0};
    for (uint32_t pc = 0; pc < fn->ncode && isa_decode(fn->code, fn->ncode, pc, &in, &bad); pc += in.len) {
      if (in.op == ISA_OP_INVOKE && in.noperands >= 3 && in.operands[2].value == 1 && in.operands[2].list[0] < 4096) {
        uint32_t r = in.operands[2].list[0], rank_arg = 0;
        for (uint32_t j = 0; j < in.operands[1].value; j++) {
          uint32_t a = in.operands[1].list[j];
          if (a < 4096 && from[a] && !strcmp(m->ops[from[a] - 1].name, "rank")) rank_arg = 1;
        }
        from[r] = in.operands[0].value + 1;
        ops_of_arg[r] = rank_arg;
      }
      if (in.op == ISA_OP_BR_IF && in.operands[0].value < 4096 && ops_of_arg[in.operands[0].value]) return true;
    }
  }
  return false;
}

/* A stream of device d for a state's copy: `stream` for device 0, else one
 * acquired into *held (released by the caller, -1 when none). */
rill_status_t vm_state_stream(rill_vm_t *vm, int stream, uint32_t i, int *held, int *out) {
  uint32_t d = vm->state_dev ? vm->state_dev[i] : 0;
  if (*held >= 0) vm->dev->ops->stream_release(vm->dev, *held), *held = -1;
  if (!d) { *out = stream; return NULL; }
  RILL_TRY(vm->dev->ops->stream_acquire_on(vm->dev, (int)d, held));
  *out = *held;
  return NULL;
}

rill_status_t vm_states_init(rill_vm_t *vm, int stream0) {
  const isa_module_t *m = vm->module->m;
  rill_status_t st = NULL;
  int held = -1;
  for (uint32_t i = 0; !st && i < m->nstates; i++) {
    const isa_state_t *x = &m->states[i];
    rill_tensor_t *t = vm->states[i];
    int stream;
    if ((st = vm_state_stream(vm, stream0, i, &held, &stream))) break;
    size_t numel, nbytes;
    rill__type_sizes(&x->type, &numel, &nbytes);
    const isa_const_t *c = x->init != ISA_NONE ? &m->consts[x->init] : NULL;
    uint8_t *host = NULL;
    const uint8_t *src = c ? c->data : NULL;
    if (!c || c->origin == ISA_CONST_FILL) {
      if (!(host = rill__calloc(vm->a, nbytes ? nbytes : 1, 1))) return rill__oom();
      size_t es = rill_dtype_size(x->type.dtype);
      for (size_t k = 0; c && k < numel; k++) memcpy(host + k * es, c->data, es);
      src = host;
    }
    if (nbytes) st = vm->dev->ops->copy_h2d(vm->dev, stream, vm_tensor_data(t), src, nbytes);
    if (!st) st = vm->dev->ops->stream_sync(vm->dev, stream);
    rill__free(vm->a, host);
    char tb[96];
    if (st) st = rill__status_prefix(st, "state %%%s: %s: ", x->name, rill_type_format(&x->type, tb, sizeof tb));
  }
  if (held >= 0) vm->dev->ops->stream_release(vm->dev, held);
  return st;
}

rill_status_t rill_vm_reset_states(rill_vm_t *vm) {
  if (!vm->module->m->nstates) return NULL;
  int s0;
  RILL_TRY(vm->dev->ops->stream_acquire(vm->dev, &s0));
  rill_status_t st = vm_states_init(vm, s0);
  vm->dev->ops->stream_release(vm->dev, s0);
  return st;
}

/* The token channel, where an op entry is emit: records as wide as its
 * widest emit, in memory the host and device 0 both reach. */
static rill_status_t chan_create(rill_vm_t *vm) {
  const isa_module_t *m = vm->module->m;
  uint32_t width = 0;
  for (uint32_t i = 0; i < m->nops; i++)
    if (!strcmp(m->ops[i].name, "emit") && m->ops[i].nin == 1) {
      size_t n = rill_type_numel(&m->ops[i].in[0]);
      if (n > width) width = (uint32_t)n;
    }
  if (!width) return NULL;
  ops_chan_t *c = &vm->chan;
  c->cap = OPS_CHAN_RECORDS;
  c->width = width;
  size_t head = 64, bytes = head + (size_t)c->cap * (1 + (size_t)width) * sizeof(int64_t);
  void *h, *d;
  if (vm->dev->ops->mapped_alloc) {
    RILL_TRY(vm->dev->ops->mapped_alloc(vm->dev, bytes, &h, &d));
    vm->chan_mapped = true;
  } else {
    if (!(h = rill__calloc(vm->a, 1, bytes))) return rill__oom();
    d = h;
  }
  c->hdr = h;
  c->ring = (int64_t *)((char *)h + head);
  c->dev_hdr = d;
  c->dev_ring = (char *)d + head;
  return NULL;
}

void rill_vm_run_counts(rill_vm_t *vm, rill_run_counts_t *out) {
  out->runs = atomic_load(&vm->n_runs);
  out->host_waits = atomic_load(&vm->n_host_waits);
  out->graph_launches = atomic_load(&vm->n_graph_launches);
  out->replay_host_ns = atomic_load(&vm->replay_host_ns);
}

/* Made once per VM, on device 0: each VM has its own. */
static rill_status_t states_create(rill_vm_t *vm, int stream0) {
  const isa_module_t *m = vm->module->m;
  if (!m->nstates) return NULL;
  if (!(vm->states = rill__calloc(vm->a, m->nstates, sizeof(rill_tensor_t *)))) return rill__oom();
  if (!(vm->state_dev = rill__calloc(vm->a, m->nstates, 1))) return rill__oom();
  uint32_t bad;
  const char *why;
  if (!isa_state_devices(m, vm->state_dev, &bad, &why)) return rill__status(RILL_VERIFY_ERROR, "state %%%s: %s", m->states[bad].name, why);
  for (uint32_t i = 0; i < m->nstates; i++)
    if (vm->state_dev[i] >= vm->dev->ndevices)
      return rill__status(RILL_INVALID_ARGUMENT, "state %%%s lives on device %u, and the VM has %d device%s", m->states[i].name, vm->state_dev[i], vm->dev->ndevices,
                          vm->dev->ndevices == 1 ? "" : "s");
  int held = -1;
  for (uint32_t i = 0; i < m->nstates; i++) {
    size_t nbytes;
    rill__type_sizes(&m->states[i].type, NULL, &nbytes);
    vm_storage_t *s;
    char tb[96];
    int stream;
    rill_status_t st = vm_state_stream(vm, stream0, i, &held, &stream);
    if (!st) st = vm_storage_new(vm, stream, nbytes, VM_MEM_BUFFERS, &s);
    if (!st) {
      st = vm_tensor_new(vm, &m->states[i].type, s, 0, &vm->states[i]);
      vm_obj_release(&s->hdr);
    }
    if (st) {
      if (held >= 0) vm->dev->ops->stream_release(vm->dev, held);
      return rill__status_prefix(st, "state %%%s: %s: ", m->states[i].name, rill_type_format(&m->states[i].type, tb, sizeof tb));
    }
  }
  if (held >= 0) vm->dev->ops->stream_release(vm->dev, held);
  return vm_states_init(vm, stream0);
}

bool vm_func_uses_states(const isa_module_t *m, uint32_t fi) {
  if (!m->nstates) return false;
  /* the functions fi reaches through calls, marked as found */
  uint8_t seen[4096];
  uint32_t stack[4096], n = 0;
  if (m->nfuncs > 4096) return true; /* (not worth the walk: treat as using them) */
  memset(seen, 0, sizeof seen);
  stack[n++] = fi;
  seen[fi] = 1;
  while (n) {
    const isa_func_t *f = &m->funcs[stack[--n]];
    isa_insn_t in;
    const char *why;
    for (uint32_t pc = 0; pc < f->ncode && isa_decode(f->code, f->ncode, pc, &in, &why); pc += in.len) {
      if (in.op == ISA_OP_LOAD_STATE) return true;
      if (in.op == ISA_OP_CALL && !seen[in.operands[0].value]) {
        seen[in.operands[0].value] = 1;
        stack[n++] = in.operands[0].value;
      }
    }
  }
  return false;
}

/* Each function's streams' devices; a module that names a device the VM
 * does not have is refused here. */
static rill_status_t module_devices(rill_vm_t *vm, const char *device, uint32_t *out_most) {
  const isa_module_t *m = vm->module->m;
  *out_most = 1;
  if (!(vm->sdev = rill__calloc(vm->a, m->nfuncs ? m->nfuncs : 1, sizeof *vm->sdev))) return rill__oom();
  for (uint32_t i = 0; i < m->nfuncs; i++) {
    uint32_t n;
    const char *why;
    if (!isa_func_devices(&m->funcs[i], vm->sdev[i], &n, &why)) return rill__status(RILL_VERIFY_ERROR, "@%s: %s", m->funcs[i].name, why);
    if (n > *out_most) *out_most = n;
    if ((int)n > vm->dev->ndevices) {
      char want[64];
      const char *kind = strncmp(device, "cuda", 4) == 0 ? "cuda" : "cpu";
      if (n == 2) snprintf(want, sizeof want, "%s:0,%s:1", kind, kind);
      else snprintf(want, sizeof want, "%s:0,...,%s:%u", kind, kind, n - 1);
      return rill__status(RILL_INVALID_ARGUMENT, "@%s uses device %u, and the VM has %d device%s (%s): it needs %u, e.g. --device=%s", m->funcs[i].name,
                          n - 1, vm->dev->ndevices, vm->dev->ndevices == 1 ? "" : "s", device, n, want);
    }
  }
  return NULL;
}

static rill_status_t upload_parts(rill_vm_t *vm, int rank_in, uint32_t ndev);

rill_status_t rill_vm_create(const rill_allocator_t *a, rill_module_t *module, const char *device, rill_vm_t **out) {
  if (!a) a = rill_allocator_system();
  if (!device) device = "cpu";
  const char *why = NULL;
  if (!rill_device_usable(device, &why)) return rill__status(RILL_UNAVAILABLE, "device %s: %s", device, why);
  double t0 = rill__now_us();
  rill_vm_t *vm = rill__calloc(a, 1, sizeof *vm);
  if (!vm) return rill__oom();
  vm->a = a;
  vm->module = module;
  rill_module_retain(module);
  snprintf(vm->device_name, sizeof vm->device_name, "%s", device);
  vm->max_backedges = 100000000ull;
  vm->max_depth = 256;
  vm->graph_sizes = VM_GRAPH_SIZES;
  pthread_mutex_init(&vm->lat_mu, NULL);
  pthread_mutex_init(&vm->prof_mu, NULL);
  pthread_mutex_init(&vm->ev_mu, NULL);
  pthread_mutex_init(&vm->graph_mu, NULL);
  pthread_mutex_init(&vm->inst_mu, NULL);
  isa_module_t *m = module->m;
  bool cuda;
  int ndev, ords[ISA_MAX_DEVICES];
  device_list(device, &cuda, &ndev, ords);
  rill_status_t st = !cuda ? vm_device_cpu_create_n(a, ndev, release_obj, &vm->dev)
                     : ndev == 1 ? vm_device_cuda_create(a, ords[0], release_obj, &vm->dev)
                                 : vm_device_cuda_create_n(a, ords, ndev, release_obj, &vm->dev);
  uint32_t most = 1;
  if (!st) st = module_devices(vm, device, &most);
  if (!st && !(vm->plans = rill__calloc(a, m->nops ? m->nops : 1, sizeof(ops_plan_t)))) st = rill__oom();
  /* Op entries with symbolic sizes get plans per binding (shapes.c), which
   * the device prepares with each instance; prepare skips them here. */
  for (uint32_t i = 0; !st && i < m->nops; i++)
    if (!ops_decl_is_sym(&m->ops[i])) st = ops_plan_init(&vm->plans[i], &m->ops[i], a);
  if (!st) st = chan_create(vm);
  for (uint32_t i = 0; !st && vm->chan.hdr && i < m->nops; i++) vm->plans[i].chan = &vm->chan;
  if (!st) vm_choose(m, NULL, vm->plans);
  if (!st) vm->p2p_branch = rank_branch(m);
  double tp = rill__now_us();
  if (!st && vm->dev->ops->prepare) st = vm->dev->ops->prepare(vm->dev, vm->plans, m->nops);
  rill__timing_since("vm/prepare", tp);
  double tw = rill__now_us();
  int s0 = -1;
  if (!st) st = vm->dev->ops->stream_acquire(vm->dev, &s0);
  if (!st) st = states_create(vm, s0);
  /* The device form (docs/tensor_parallel.md): functions that use N > 1
   * devices and shard constants of N parts; device d holds part d. */
  uint32_t parts = 0;
  for (uint32_t i = 0; i < m->nconsts; i++)
    if (m->consts[i].shard_parts || m->consts[i].stage_ranks) parts = m->consts[i].shard_parts ? m->consts[i].shard_parts : m->consts[i].stage_ranks;
  vm->device_form = !st && parts > 1 && most == parts;
  /* Devices whose memory is apart each get the constants; in the device
   * form each device its parts (devices that share memory, the whole ones once). */
  bool shared = !(vm->dev && vm->dev->ops->copy_peer);
  vm->const_devs = vm->dev && (!shared || vm->device_form) ? (uint32_t)vm->dev->ndevices : 1;
  if (!st && !(vm->consts = rill__calloc(a, m->nconsts ? (size_t)m->nconsts * vm->const_devs : 1, sizeof(rill_tensor_t *)))) st = rill__oom();
  host_copies_t copies;
  memset(&copies, 0, sizeof copies);
  for (uint32_t d = 0; !st && d < vm->const_devs; d++) {
    if (d && s0 >= 0) {
      st = vm->dev->ops->stream_sync(vm->dev, s0); /* (the uploads before) */
      vm->dev->ops->stream_release(vm->dev, s0);
      s0 = -1;
      if (!st) st = vm->dev->ops->stream_acquire_on(vm->dev, (int)d, &s0);
    }
    for (uint32_t i = 0; !st && i < m->nconsts; i++) {
      if (vm->device_form && (m->consts[i].shard_parts || m->consts[i].stage_ranks)) continue; /* (below: part d, stage d's weights, on device d) */
      if (vm->device_form && d && shared && !m->consts[i].stage_ranks) {
        if (vm->consts[i]) vm->consts[d * m->nconsts + i] = (rill_tensor_t *)vm_obj_retain(&vm->consts[i]->hdr);
        continue;
      }
      if (m->consts[i].shard_parts || m->consts[i].stage_ranks) {
        /* a rank's part (or a pipeline stage's weight), uploaded when the VM learns its rank (vm_upload_shards) */
        vm->shard_parts = m->consts[i].shard_parts ? m->consts[i].shard_parts : m->consts[i].stage_ranks;
        vm->split_option = m->consts[i].shard_parts ? "--tensor-parallel" : "--pipeline-parallel";
        vm->shards_missing = true;
        continue;
      }
      if (!borrow_const(vm, &m->consts[i], &vm->consts[d * m->nconsts + i]))
        st = upload_const_to(vm, s0, &m->consts[i], &vm->consts[d * m->nconsts + i], &copies);
      char tb[96], on[160];
      if (vm->const_devs > 1) snprintf(on, sizeof on, "device %u of %s", d, device);
      else snprintf(on, sizeof on, "device %s", device);
      if (st) st = rill__status_prefix(st, "constant %%%s: %s on %s: ", m->consts[i].name ? m->consts[i].name : "?",
                                       rill_type_format(&m->consts[i].type, tb, sizeof tb), on);
    }
  }
  if (s0 >= 0) {
    rill_status_t ss = vm->dev->ops->stream_sync(vm->dev, s0); /* every upload done */
    if (!st) st = ss;
    else rill_status_free(ss);
    vm->dev->ops->stream_release(vm->dev, s0);
  }
  if (!st) host_copies_run(&copies);
  RILL_VEC_FREE(a, &copies.v);
  if (!st && vm->device_form) st = upload_parts(vm, -1, (uint32_t)most);
  rill__timing_since("vm/weights", tw);
  rill__timing_since("vm", t0);
  if (st) {
    rill_vm_destroy(vm);
    return st;
  }
  vm->create_ms = (rill__now_us() - t0) * 1e-3;
  *out = vm;
  return NULL;
}

static void prof_fold(rill_vm_t *vm);

/* Part `rank` of shard constant c into host memory: from the module's data,
 * or read from its weights file in place (one read a chunk: a row range is
 * one, a column range one per leading row), checked against its checksum. */
static rill_status_t shard_part(rill_vm_t *vm, const isa_const_t *c, uint32_t rank, uint8_t *out) {
  if (c->stage_ranks) {
    /* a stage's weight: whole, from the module or read from its file in place */
    size_t numel, nbytes;
    rill__type_sizes(&c->type, &numel, &nbytes);
    if (!c->linked) {
      memcpy(out, c->data, nbytes);
    } else {
      char path[4096];
      RILL_TRY(rill__path_join(vm->module->base_dir, vm->module->m->weights[c->weights].path, path, sizeof path));
      FILE *f = fopen(path, "rb");
      if (!f) return rill__status(RILL_NOT_FOUND, "linked weights: cannot open %s", path);
      bool ok = fseeko(f, (off_t)c->file_offset, SEEK_SET) == 0 && fread(out, 1, nbytes, f) == nbytes;
      fclose(f);
      if (!ok) return rill__status(RILL_MALFORMED, "linked weights: %s is too short for tensor \"%s\"", path, c->tensor);
    }
    if (isa_const_sum(c, out, nbytes) != c->checksum)
      return rill__status(RILL_MALFORMED, "tensor \"%s\" does not match the module's checksum (the file changed)", c->tensor);
    return NULL;
  }
  if (!c->linked) {
    isa_shard_copy(c, c->data, rank, out);
  } else {
    const isa_module_t *m = vm->module->m;
    char path[4096];
    RILL_TRY(rill__path_join(vm->module->base_dir, m->weights[c->weights].path, path, sizeof path));
    FILE *f = fopen(path, "rb");
    if (!f) return rill__status(RILL_NOT_FOUND, "linked weights: cannot open %s", path);
    size_t outer, chunk;
    isa_shard_geometry(c, &outer, &chunk);
    rill_status_t st = NULL;
    for (size_t k = 0; !st && k < outer; k++) {
      uint64_t at = c->file_offset + ((uint64_t)k * c->shard_parts + rank) * chunk; /* (isa_shard_geometry's chunks) */
      if (fseeko(f, (off_t)at, SEEK_SET) != 0 || fread(out + k * chunk, 1, chunk, f) != chunk)
        st = rill__status(RILL_MALFORMED, "linked weights: %s is too short for tensor \"%s\"", path, c->tensor);
    }
    fclose(f);
    if (st) return st;
  }
  size_t numel, nbytes;
  rill__type_sizes(&c->type, &numel, &nbytes);
  if (isa_const_sum(c, out, nbytes) != c->part_sums[rank])
    return rill__status(RILL_MALFORMED, "tensor \"%s\": part %u does not match the module's checksum (the file changed)", c->tensor, rank);
  return NULL;
}

rill_status_t vm_upload_shards(rill_vm_t *vm, int rank, int nranks) {
  if (!vm->shard_parts || vm->device_form) return NULL;
  if ((uint32_t)nranks != vm->shard_parts)
    return rill__status(RILL_INVALID_ARGUMENT, "the module is split for a job of %u ranks (%s=%u), and this job has %d", vm->shard_parts,
                        vm->split_option, vm->shard_parts, nranks);
  return upload_parts(vm, rank, 0);
}

/* Shard constants' (and stage constants') parts: rank `rank`'s on every
 * device; or (rank -1, the device form) part d on each device d < ndev. */
static rill_status_t upload_parts(rill_vm_t *vm, int rank_in, uint32_t ndev) {
  const isa_module_t *m = vm->module->m;
  rill_status_t st = NULL;
  int s0 = -1;
  for (uint32_t d = 0; !st && d < vm->const_devs; d++) {
    if (s0 >= 0) vm->dev->ops->stream_release(vm->dev, s0), s0 = -1;
    st = d ? vm->dev->ops->stream_acquire_on(vm->dev, (int)d, &s0) : vm->dev->ops->stream_acquire(vm->dev, &s0);
    int rank = rank_in >= 0 ? rank_in : (int)d;
    if (rank_in < 0 && d >= ndev) break;
    for (uint32_t i = 0; !st && i < m->nconsts; i++) {
      const isa_const_t *c = &m->consts[i];
      if ((!c->shard_parts && !c->stage_ranks) || vm->consts[d * m->nconsts + i]) continue;
      if (c->stage_ranks && c->stage != (uint32_t)rank) { /* another stage's weight: never read here (the device form: on its own device) */
        vm->stage_only |= rank_in >= 0;
        continue;
      }
      size_t numel, nbytes;
      rill__type_sizes(&c->type, &numel, &nbytes);
      uint8_t *host = rill__alloc(vm->a, nbytes ? nbytes : 1);
      if (!host) { st = rill__oom(); break; }
      st = shard_part(vm, c, (uint32_t)rank, host);
      isa_const_t part = *c;
      part.shard_parts = 0;
      part.stage_ranks = 0;
      part.data = host;
      part.origin = ISA_CONST_LITERAL;
      if (!st) st = upload_const(vm, s0, &part, &vm->consts[d * m->nconsts + i]);
      rill__free(vm->a, host);
      char tb[96];
      if (st) st = rill__status_prefix(st, "constant %%%s: %s, part %d of %u%s: ", c->name ? c->name : "?", rill_type_format(&c->type, tb, sizeof tb), rank,
                                       vm->shard_parts, rank_in < 0 ? " (on its device)" : "");
    }
  }
  if (s0 >= 0) vm->dev->ops->stream_release(vm->dev, s0);
  if (!st) vm->shards_missing = false;
  return st;
}

void rill_vm_destroy(rill_vm_t *vm) {
  if (!vm) return;
  if (vm->dev) vm_graph_free(vm);
  if (vm->dev) vm_coll_free(vm);
  pthread_mutex_destroy(&vm->graph_mu);
  vm_shapes_free(vm);
  pthread_mutex_destroy(&vm->inst_mu);
  if (vm->consts)
    for (uint32_t i = 0; i < vm->module->m->nconsts * vm->const_devs; i++)
      if (vm->consts[i]) vm_obj_release(&vm->consts[i]->hdr);
  if (vm->states)
    for (uint32_t i = 0; i < vm->module->m->nstates; i++)
      if (vm->states[i]) vm_obj_release(&vm->states[i]->hdr);
  rill__free(vm->a, vm->states);
  rill__free(vm->a, vm->state_dev);
  rill__free(vm->a, vm->consts);
  rill__free(vm->a, vm->sdev);
  if (vm->plans && vm->dev && vm->dev->ops->unprepare) vm->dev->ops->unprepare(vm->dev, vm->plans, vm->module->m->nops);
  if (vm->plans)
    for (uint32_t i = 0; i < vm->module->m->nops; i++) ops_plan_fini(&vm->plans[i]);
  rill__free(vm->a, vm->plans);
  if (vm->dev && vm->ev_pool.len) {
    rill_status_free(vm->dev->ops->synchronize(vm->dev));
    for (size_t i = 0; i < vm->ev_pool.len; i++) vm->dev->ops->event_destroy(vm->dev, vm->ev_pool.items[i]);
  }
  RILL_VEC_FREE(vm->a, &vm->ev_pool);
  pthread_mutex_destroy(&vm->ev_mu);
  if (vm->trace) {
    rill_status_free(vm->dev->ops->synchronize(vm->dev));
    vm_trace_free(vm, vm->trace);
  }
  if (vm->dev && vm->prof.len) prof_fold(vm);
  RILL_VEC_FREE(vm->a, &vm->prof);
  if (vm->chan.hdr) {
    if (vm->chan_mapped) vm->dev->ops->mapped_free(vm->dev, vm->chan.hdr);
    else rill__free(vm->a, vm->chan.hdr);
  }
  if (vm->dev) vm->dev->ops->destroy(vm->dev);
  rill__free(vm->a, vm->stats);
  rill__free(vm->a, vm->lat);
  pthread_mutex_destroy(&vm->lat_mu);
  pthread_mutex_destroy(&vm->prof_mu);
  rill_module_release(vm->module);
  rill__free(vm->a, vm);
}

/* ---- tensors ---- */
rill_status_t rill_tensor_create(rill_vm_t *vm, const rill_type_t *type, const void *data, rill_tensor_t **out) {
  size_t nbytes;
  if (type->dtype >= RILL_DTYPE_COUNT || type->rank < 0 || type->rank > RILL_MAX_RANK || !rill__type_sizes(type, NULL, &nbytes))
    return rill__status(RILL_INVALID_ARGUMENT, "invalid tensor type");
  int stream;
  RILL_TRY(vm->dev->ops->stream_acquire(vm->dev, &stream));
  vm_storage_t *s = NULL;
  *out = NULL;
  rill_status_t st = vm_storage_new(vm, stream, nbytes, VM_MEM_BUFFERS, &s);
  if (!st) st = vm_tensor_new(vm, type, s, 0, out);
  if (s) vm_obj_release(&s->hdr);
  if (!st && data && nbytes) st = vm->dev->ops->copy_h2d(vm->dev, stream, vm_tensor_data(*out), data, nbytes);
  if (!st) st = vm->dev->ops->stream_sync(vm->dev, stream);
  vm->dev->ops->stream_release(vm->dev, stream);
  if (st && *out) {
    vm_obj_release(&(*out)->hdr);
    *out = NULL;
  }
  return st;
}

rill_status_t rill_tensor_wrap(rill_vm_t *vm, const rill_type_t *type, void *device_ptr, void (*release)(void *user),
                               void *user, rill_tensor_t **out) {
  size_t nbytes;
  if (type->dtype >= RILL_DTYPE_COUNT || type->rank < 0 || type->rank > RILL_MAX_RANK || !rill__type_sizes(type, NULL, &nbytes))
    return rill__status(RILL_INVALID_ARGUMENT, "invalid tensor type");
  if (!device_ptr && nbytes) return rill__status(RILL_INVALID_ARGUMENT, "tensor wrap: a NULL pointer for %zu bytes", nbytes);
  if ((uintptr_t)device_ptr % rill_dtype_size(type->dtype))
    return rill__status(RILL_INVALID_ARGUMENT, "tensor wrap: pointer not aligned to %s", rill_dtype_name(type->dtype));
  vm_storage_t *s = rill__calloc(vm->a, 1, sizeof *s);
  if (!s) return rill__oom();
  atomic_init(&s->hdr.refs, 1);
  s->hdr.kind = OBJ_STORAGE;
  s->vm = vm;
  s->ptr = device_ptr;
  s->size = nbytes;
  s->wrapped = true;
  s->user_release = release;
  s->user = user;
  rill_status_t st = vm_tensor_new(vm, type, s, 0, out);
  if (st) s->user_release = NULL; /* on failure the caller keeps its memory */
  vm_obj_release(&s->hdr);
  return st;
}

void *rill_tensor_device_pointer(const rill_tensor_t *t) { return vm_tensor_data(t); }

rill_status_t rill_vm_host_alloc(rill_vm_t *vm, size_t n, void **out_host, void **out_dev) {
  *out_host = *out_dev = NULL;
  if (!n) return rill__status(RILL_INVALID_ARGUMENT, "host memory: 0 bytes asked");
  if (vm->dev->ops->mapped_alloc) return vm->dev->ops->mapped_alloc(vm->dev, n, out_host, out_dev);
  /* cpu: host memory is the device's */
  if (!(*out_host = calloc(1, n))) return rill__oom();
  *out_dev = *out_host;
  return NULL;
}

void rill_vm_host_free(rill_vm_t *vm, void *host) {
  if (!host) return;
  if (vm->dev->ops->mapped_free) vm->dev->ops->mapped_free(vm->dev, host);
  else free(host);
}

void rill_tensor_retain(rill_tensor_t *t) { vm_obj_retain(&t->hdr); }
void rill_tensor_release(rill_tensor_t *t) {
  if (t) vm_obj_release(&t->hdr);
}
const rill_type_t *rill_tensor_type(const rill_tensor_t *t) { return &t->type; }
size_t rill_tensor_nbytes(const rill_tensor_t *t) { return t->nbytes; }

rill_status_t rill_tensor_read(rill_tensor_t *t, void *dst, size_t size) {
  if (size != t->nbytes) return rill__status(RILL_INVALID_ARGUMENT, "tensor read: %zu bytes asked, the tensor has %zu", size, t->nbytes);
  rill_vm_t *vm = t->vm;
  int stream;
  RILL_TRY(vm->dev->ops->stream_acquire(vm->dev, &stream));
  rill_status_t st = vm->dev->ops->copy_d2h(vm->dev, stream, dst, vm_tensor_data(t), size);
  if (!st) st = vm->dev->ops->stream_sync(vm->dev, stream);
  vm->dev->ops->stream_release(vm->dev, stream);
  return st;
}

void rill_vm_set_check_streams(rill_vm_t *vm, bool on) { vm->check_streams = on; }

rill_status_t rill_vm_set_tracing(rill_vm_t *vm, bool on) {
  if (on && !vm->trace) RILL_TRY(vm_trace_create(vm->a, &vm->trace));
  vm->tracing = on;
  return NULL;
}

rill_status_t rill_vm_trace_write(rill_vm_t *vm, const char *path) {
  if (!vm->trace) return rill__status(RILL_INVALID_ARGUMENT, "trace: tracing was never turned on for this VM");
  return rill__status_prefix(vm_trace_write(vm, path), "writing the trace %s: ", path);
}

rill_status_t rill_vm_trace_summary(rill_vm_t *vm, rill_trace_summary_t *out) {
  if (!vm->trace) return rill__status(RILL_INVALID_ARGUMENT, "trace: tracing was never turned on for this VM");
  return vm_trace_summary(vm, out);
}

rill_status_t rill_vm_set_profiling(rill_vm_t *vm, bool on) {
  uint32_t n = vm->module->m->nops;
  if (on && !vm->stats) {
    if (!(vm->stats = rill__calloc(vm->a, n ? n : 1, sizeof(vm_op_stats_t)))) return rill__oom();
    pthread_mutex_lock(&vm->lat_mu);
    if (!vm->lat && !(vm->lat = rill__calloc(vm->a, RILL_LAT_RING, sizeof(double)))) {
      pthread_mutex_unlock(&vm->lat_mu);
      return rill__oom();
    }
    vm->nlat = 0;
    pthread_mutex_unlock(&vm->lat_mu);
  } else if (!on && vm->stats) {
    prof_fold(vm);
    rill__free(vm->a, vm->stats);
    vm->stats = NULL;
  }
  return NULL;
}

void vm_record_wake_latency(rill_vm_t *vm, double seconds) {
  pthread_mutex_lock(&vm->lat_mu);
  if (vm->lat) vm->lat[vm->nlat++ % RILL_LAT_RING] = seconds;
  pthread_mutex_unlock(&vm->lat_mu);
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

bool rill_vm_wake_latency(rill_vm_t *vm, double *median_us, double *p99_us, uint64_t *count) {
  pthread_mutex_lock(&vm->lat_mu);
  size_t n = vm->nlat < RILL_LAT_RING ? (size_t)vm->nlat : RILL_LAT_RING;
  double *c = n ? malloc(n * sizeof(double)) : NULL;
  if (c) memcpy(c, vm->lat, n * sizeof(double));
  if (count) *count = vm->nlat;
  pthread_mutex_unlock(&vm->lat_mu);
  if (!c) return false;
  qsort(c, n, sizeof(double), cmp_d);
  *median_us = c[n / 2] * 1e6;
  *p99_us = c[(size_t)((double)(n - 1) * 0.99)] * 1e6;
  free(c);
  return true;
}

int rill_vm_op_count(const rill_vm_t *vm) { return (int)vm->module->m->nops; }

void rill_vm_memory_info(rill_vm_t *vm, rill_memory_info_t *out) {
  size_t ws = 0, gr = 0;
  if (vm->dev->ops->memory) vm->dev->ops->memory(vm->dev, &ws, &gr);
  *out = (rill_memory_info_t){
      .weights = atomic_load(&vm->mem[VM_MEM_WEIGHTS]),
      .buffers = atomic_load(&vm->mem[VM_MEM_BUFFERS]),
      .buffers_peak = atomic_load(&vm->mem_buffers_peak),
      .graphs = atomic_load(&vm->mem[VM_MEM_GRAPHS]) + gr,
      .workspaces = ws,
      .create_ms = vm->create_ms,
  };
  out->total = out->weights + out->buffers + out->graphs + out->workspaces;
  out->peak = atomic_load(&vm->mem_all_peak) + gr + ws;
}

bool rill_vm_kernel_stats(rill_vm_t *vm, rill_kernel_stats_t *out) {
  if (!vm->dev->ops->kernel_stats) return false;
  vm->dev->ops->kernel_stats(vm->dev, out);
  return true;
}

rill_status_t vm_prof_add(rill_vm_t *vm, uint32_t op, vm_mark_t *m0, vm_mark_t *m1) {
  pthread_mutex_lock(&vm->prof_mu);
  rill_status_t st = RILL_VEC_PUSH(vm->a, &vm->prof, ((struct vm_prof_pending){op, m0, m1}));
  pthread_mutex_unlock(&vm->prof_mu);
  if (st) {
    vm->dev->ops->mark_free(vm->dev, m0);
    vm->dev->ops->mark_free(vm->dev, m1);
  }
  return st;
}

/* Waits for the device and adds every timed launch to the stats (when
 * there are stats), freeing the marks. */
static void prof_fold(rill_vm_t *vm) {
  rill_status_free(vm->dev->ops->synchronize(vm->dev));
  pthread_mutex_lock(&vm->prof_mu);
  for (size_t i = 0; i < vm->prof.len; i++) {
    struct vm_prof_pending *p = &vm->prof.items[i];
    double a = vm->dev->ops->mark_us(vm->dev, p->m0), b = vm->dev->ops->mark_us(vm->dev, p->m1);
    if (vm->stats && a >= 0 && b >= a) {
      vm->stats[p->op].calls++;
      vm->stats[p->op].ns += (uint64_t)((b - a) * 1e3);
    }
    vm->dev->ops->mark_free(vm->dev, p->m0);
    vm->dev->ops->mark_free(vm->dev, p->m1);
  }
  vm->prof.len = 0;
  pthread_mutex_unlock(&vm->prof_mu);
}

bool rill_vm_op_stats(rill_vm_t *vm, int i, rill_op_stats_t *out) {
  if (i < 0 || (uint32_t)i >= vm->module->m->nops) return false;
  prof_fold(vm);
  const isa_opdecl_t *d = &vm->module->m->ops[i];
  out->name = d->name;
  out->output = d->nout ? d->out[0] : (rill_type_t){RILL_F32, 0, {0}};
  for (int k = 0; k < out->output.rank; k++) /* -1: a size that depends on shape variables, as for parameters */
    if (isa_dim_is_sym(out->output.dims[k])) out->output.dims[k] = -1;
  out->calls = vm->stats ? vm->stats[i].calls : 0;
  out->seconds = vm->stats ? (double)vm->stats[i].ns / 1e9 : 0;
  return true;
}

void rill_results_free(rill_vm_t *vm, rill_tensor_t **results, int n) {
  for (int i = 0; i < n; i++) rill_tensor_release(results[i]);
  rill__free(vm->a, results);
}

/* ---- kernel choices per size ---- */
void vm_choose(const isa_module_t *m, const int64_t *vals, ops_plan_t *plans) {
  for (uint32_t i = 0; i < m->nops; i++) plans[i].precision = (rill_precision_t)m->precision;
  int64_t lo[64];
  if (!vals && m->ntrees) {
    /* Entries with fixed sizes have one plan for every binding: the tree at the lower bounds. */
    size_t nv = m->syms.vars.len < 64 ? m->syms.vars.len : 64;
    for (size_t k = 0; k < nv; k++) lo[k] = m->syms.vars.items[k].lo;
    for (size_t k = nv; k < 64; k++) lo[k] = 0;
    if (m->syms.vars.len > 64) return; /* no such module in practice; the plans keep the usual choice */
    vals = lo;
  }
  for (uint32_t i = 0; i < m->ntrees; i++) {
    const isa_tree_t *t = &m->trees[i];
    if (plans[t->op].def) plans[t->op].choice = isa_tree_choose(t, vals);
  }
}

int rill_module_shape_var_count(const rill_module_t *module) { return (int)module->m->syms.vars.len; }

bool rill_module_shape_var(const rill_module_t *module, int index, const char **out_name, int64_t *out_lo, int64_t *out_hi) {
  const isa_syms_t *s = &module->m->syms;
  if (index < 0 || (size_t)index >= s->vars.len) return false;
  if (out_name) *out_name = s->vars.items[index].name;
  if (out_lo) *out_lo = s->vars.items[index].lo;
  if (out_hi) *out_hi = s->vars.items[index].hi;
  return true;
}

int rill_module_op_count(const rill_module_t *module) { return (int)module->m->nops; }

rill_status_t rill_module_op_text(const rill_module_t *module, int op, const int64_t *vals, char **out_text, bool *out_symbolic) {
  const isa_module_t *m = module->m;
  if (op < 0 || (uint32_t)op >= m->nops) return rill__status(RILL_INVALID_ARGUMENT, "no op-table entry %d (the module has %u)", op, m->nops);
  rill_buf_t b;
  rill__buf_init(&b, rill_allocator_system());
  rill_status_t st = isa_print_opdecl_at(&b, m, &m->ops[op], vals);
  if (!st) st = rill__buf_append(&b, "", 1);
  if (st) {
    rill__buf_free(&b);
    return st;
  }
  if (out_symbolic) *out_symbolic = ops_decl_is_sym(&m->ops[op]);
  *out_text = (char *)b.data;
  return NULL;
}

rill_status_t rill_vm_op_candidates(rill_vm_t *vm, int op, char **out_list) {
  const isa_module_t *m = vm->module->m;
  if (op < 0 || (uint32_t)op >= m->nops) return rill__status(RILL_INVALID_ARGUMENT, "no op-table entry %d (the module has %u)", op, m->nops);
  if (!vm->plans[op].def) return rill__status(RILL_INVALID_ARGUMENT, "op-table entry %d has sizes that depend on shape variables: its candidates depend on them", op);
  rill_buf_t b;
  rill__buf_init(&b, rill_allocator_system());
  rill_status_t st = vm->dev->ops->candidates ? vm->dev->ops->candidates(vm->dev, &vm->plans[op], &b) : rill__buf_append(&b, "default\n", 8);
  if (!st) st = rill__buf_append(&b, "", 1);
  if (st) {
    rill__buf_free(&b);
    return st;
  }
  *out_list = (char *)b.data;
  return NULL;
}
