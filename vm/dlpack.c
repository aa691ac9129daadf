/* dlpack.c: tensors shared with other libraries through DLPack (dlpack.h).
 *
 * Import makes a rill tensor over a managed tensor's memory (rill_tensor_wrap:
 * no copy), checked against the VM's device, row-major and compact, and of
 * a dtype of the language; the managed tensor's deleter is the wrapped
 * memory's release, so it runs once, when the tensor's last reference goes.
 * Export makes a managed tensor over a rill tensor's memory that holds a
 * reference to it; the managed tensor owns its shape and strides, and its
 * deleter drops the reference and frees it.
 */
#include <stdlib.h>

#include "rill_config.h"
#include "vm.h"

#if RILL_HAVE_DLPACK
#include <dlpack/dlpack.h>

/* kDLBool (DLPack 0.8 on; the code is part of the ABI, older headers lack the name). */
enum { DL_BOOL = 6 };

static const struct { uint8_t code, bits; rill_dtype_t d; } DTYPES[] = {
    {kDLFloat, 16, RILL_F16}, {kDLBfloat, 16, RILL_BF16}, {kDLFloat, 32, RILL_F32}, {kDLFloat, 64, RILL_F64},
    {kDLInt, 8, RILL_I8},     {kDLUInt, 8, RILL_U8},      {kDLInt, 32, RILL_I32},   {kDLInt, 64, RILL_I64},
    {DL_BOOL, 8, RILL_BOOL},  {kDLInt, 16, RILL_I16},     {kDLUInt, 16, RILL_U16},    {kDLUInt, 32, RILL_U32},  {kDLUInt, 64, RILL_U64},
};

static const char *code_name(uint8_t code) {
  static const char *const names[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  return code < sizeof names / sizeof names[0] ? names[code] : "unknown";
}

/* The VM's device as DLPack names it: kDLCPU, or kDLCUDA and the ordinal. */
static void vm_dl_device(const rill_vm_t *vm, DLDevice *out) {
  const char *n = vm->device_name; /* validated at create: cpu, cuda or cuda:N */
  out->device_type = strncmp(n, "cuda", 4) == 0 ? kDLCUDA : kDLCPU;
  out->device_id = n[4] == ':' ? atoi(n + 5) : 0;
}

/* Whether t's memory is the VM's device's: host memory (pinned included)
 * for cpu; the same GPU's memory (or managed memory) for cuda:N. */
static bool device_ok(const rill_vm_t *vm, const DLTensor *t) {
  DLDevice d;
  vm_dl_device(vm, &d);
  if (d.device_type == kDLCPU) return t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost;
  return (t->device.device_type == kDLCUDA && t->device.device_id == d.device_id) || t->device.device_type == kDLCUDAManaged;
}

/* Checks a DLTensor and wraps its memory; release(user) runs when the last
 * reference goes, and not at all on failure. */
static rill_status_t import(rill_vm_t *vm, const DLTensor *t, void (*release)(void *), void *user, rill_tensor_t **out) {
  if (!device_ok(vm, t))
    return rill__status(RILL_INVALID_ARGUMENT, "DLPack: the tensor is on device type %d, id %d; the VM runs on %s", (int)t->device.device_type,
                        (int)t->device.device_id, vm->device_name);
  const DLDataType dt = t->dtype;
  size_t k = 0;
  while (k < RILL_ARRAY_LEN(DTYPES) && !(DTYPES[k].code == dt.code && DTYPES[k].bits == dt.bits)) k++;
  if (k == RILL_ARRAY_LEN(DTYPES) || dt.lanes != 1)
    return rill__status(RILL_INVALID_ARGUMENT, "DLPack: dtype %s, %u bits, %u lanes is not one of the language's", code_name(dt.code),
                        (unsigned)dt.bits, (unsigned)dt.lanes);
  if (t->ndim < 0 || t->ndim > RILL_MAX_RANK)
    return rill__status(RILL_INVALID_ARGUMENT, "DLPack: %d dimensions (at most %d)", (int)t->ndim, RILL_MAX_RANK);
  if (t->ndim && !t->shape) return rill__status(RILL_INVALID_ARGUMENT, "DLPack: no shape for %d dimensions", (int)t->ndim);
  rill_type_t ty = {DTYPES[k].d, t->ndim, {0}};
  bool empty = false;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0) return rill__status(RILL_INVALID_ARGUMENT, "DLPack: dimension %d is %lld", i, (long long)t->shape[i]);
    ty.dims[i] = t->shape[i];
    empty |= t->shape[i] == 0;
  }
  size_t nbytes;
  if (!rill__type_sizes(&ty, NULL, &nbytes)) return rill__status(RILL_INVALID_ARGUMENT, "DLPack: tensor too large");
  /* Row-major and compact: each stride the product of the dimensions after
   * it. A dimension of size 1 is never stepped over, so its stride is free;
   * an empty tensor has no elements to place. */
  if (t->strides && !empty) {
    int64_t want = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
      if (t->shape[i] != 1 && t->strides[i] != want) {
        char tb[96];
        return rill__status(RILL_INVALID_ARGUMENT,
                            "DLPack: %s with stride %lld in dimension %d (row-major needs %lld): only compact row-major tensors can be used (make it contiguous first)",
                            rill_type_format(&ty, tb, sizeof tb), (long long)t->strides[i], i, (long long)want);
      }
      want *= t->shape[i];
    }
  }
  void *p = t->data ? (uint8_t *)t->data + t->byte_offset : NULL;
  return rill_tensor_wrap(vm, &ty, p, release, user, out);
}

static void managed_delete(void *user) {
  DLManagedTensor *m = user;
  if (m->deleter) m->deleter(m);
}

rill_status_t rill_tensor_from_dlpack(rill_vm_t *vm, struct DLManagedTensor *managed, rill_tensor_t **out) {
  if (!vm || !managed || !out) return rill__status(RILL_INVALID_ARGUMENT, "DLPack: vm, managed tensor and output are required");
  return import(vm, &managed->dl_tensor, managed_delete, managed, out);
}

/* The DLTensor of a rill tensor; shape and strides point into the arrays given. */
static void describe(const rill_tensor_t *t, int64_t *shape, int64_t *strides, DLTensor *out) {
  memset(out, 0, sizeof *out);
  vm_dl_device(t->vm, &out->device);
  for (size_t k = 0; k < RILL_ARRAY_LEN(DTYPES); k++)
    if (DTYPES[k].d == t->type.dtype) out->dtype = (DLDataType){DTYPES[k].code, DTYPES[k].bits, 1};
  out->ndim = t->type.rank;
  int64_t s = 1;
  for (int i = t->type.rank - 1; i >= 0; i--) {
    shape[i] = t->type.dims[i];
    strides[i] = s;
    s *= t->type.dims[i];
  }
  out->shape = shape;
  out->strides = strides;
  out->data = t->nbytes ? vm_tensor_data(t) : NULL; /* DLPack: NULL for an empty tensor */
  out->byte_offset = 0;
}

/* An exported tensor: the managed tensor (either kind), its shape and
 * strides, and the reference it holds. */
typedef struct exported {
  union {
    DLManagedTensor m;
#ifdef DLPACK_MAJOR_VERSION
    DLManagedTensorVersioned v;
#endif
  } u;
  int64_t shape[RILL_MAX_RANK], strides[RILL_MAX_RANK];
  rill_tensor_t *t;
} exported_t;

static void exported_free(exported_t *e) {
  const rill_allocator_t *a = e->t->vm->a;
  rill_tensor_release(e->t);
  rill__free(a, e);
}

static void exported_delete(DLManagedTensor *m) { exported_free(m->manager_ctx); }

#ifdef DLPACK_MAJOR_VERSION
static void exported_v_delete(DLManagedTensorVersioned *m) { exported_free(m->manager_ctx); }
#endif

/* A new managed tensor, versioned or not, over t; *out is its address. */
static rill_status_t export_tensor(rill_tensor_t *t, bool versioned, void **out) {
  if (!t || !out) return rill__status(RILL_INVALID_ARGUMENT, "DLPack: tensor and output are required");
  exported_t *e = rill__calloc(t->vm->a, 1, sizeof *e);
  if (!e) return rill__oom();
  rill_tensor_retain(t);
  e->t = t;
#ifdef DLPACK_MAJOR_VERSION
  if (versioned) {
    describe(t, e->shape, e->strides, &e->u.v.dl_tensor);
    e->u.v.version = (DLPackVersion){DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    e->u.v.manager_ctx = e;
    e->u.v.deleter = exported_v_delete;
    *out = &e->u.v;
    return NULL;
  }
#endif
  (void)versioned;
  describe(t, e->shape, e->strides, &e->u.m.dl_tensor);
  e->u.m.manager_ctx = e;
  e->u.m.deleter = exported_delete;
  *out = &e->u.m;
  return NULL;
}

rill_status_t rill_tensor_to_dlpack(rill_tensor_t *t, struct DLManagedTensor **out) {
  return export_tensor(t, false, (void **)out);
}

#ifdef DLPACK_MAJOR_VERSION
static void versioned_delete(void *user) {
  DLManagedTensorVersioned *m = user;
  if (m->deleter) m->deleter(m);
}

rill_status_t rill_tensor_from_dlpack_versioned(rill_vm_t *vm, struct DLManagedTensorVersioned *managed, rill_tensor_t **out) {
  if (!vm || !managed || !out) return rill__status(RILL_INVALID_ARGUMENT, "DLPack: vm, managed tensor and output are required");
  /* Past the version, the layout of another major version is unknown. */
  if (managed->version.major != DLPACK_MAJOR_VERSION)
    return rill__status(RILL_INVALID_ARGUMENT, "DLPack: version %u.%u; this rill reads %d.x", (unsigned)managed->version.major,
                        (unsigned)managed->version.minor, DLPACK_MAJOR_VERSION);
  /* A result may alias its input (a reshape), and would be handed on writable. */
  if (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY)
    return rill__status(RILL_INVALID_ARGUMENT, "DLPack: the tensor is read-only");
  return import(vm, &managed->dl_tensor, versioned_delete, managed, out);
}

rill_status_t rill_tensor_to_dlpack_versioned(rill_tensor_t *t, struct DLManagedTensorVersioned **out) {
  return export_tensor(t, true, (void **)out);
}
#endif

#else /* no dlpack.h at build time */
static rill_status_t no_dlpack(void) {
  return rill__status(RILL_UNAVAILABLE, "DLPack: this rill was built without dlpack.h (install libdlpack-dev and rebuild)");
}
rill_status_t rill_tensor_from_dlpack(rill_vm_t *vm, struct DLManagedTensor *managed, rill_tensor_t **out) {
  (void)vm; (void)managed; (void)out;
  return no_dlpack();
}
rill_status_t rill_tensor_to_dlpack(rill_tensor_t *t, struct DLManagedTensor **out) {
  (void)t; (void)out;
  return no_dlpack();
}
#endif

#if !RILL_HAVE_DLPACK || !defined(DLPACK_MAJOR_VERSION)
static rill_status_t no_versioned(void) {
#if RILL_HAVE_DLPACK
  return rill__status(RILL_UNAVAILABLE, "DLPack: this rill was built with dlpack.h version %d, which has no DLManagedTensorVersioned (1.0 on)",
                      DLPACK_VERSION);
#else
  return no_dlpack();
#endif
}
rill_status_t rill_tensor_from_dlpack_versioned(rill_vm_t *vm, struct DLManagedTensorVersioned *managed, rill_tensor_t **out) {
  (void)vm; (void)managed; (void)out;
  return no_versioned();
}
rill_status_t rill_tensor_to_dlpack_versioned(rill_tensor_t *t, struct DLManagedTensorVersioned **out) {
  (void)t; (void)out;
  return no_versioned();
}
#endif
