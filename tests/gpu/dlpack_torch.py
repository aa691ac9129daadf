#!/usr/bin/env python3
"""DLPack between PyTorch and Rill on the GPU, without copies.

    python3 tests/gpu/dlpack_torch.py build-gpu/librill.so

A CUDA tensor made by PyTorch goes into a Rill run on the cuda device
through torch.utils.dlpack.to_dlpack and rill_tensor_from_dlpack (the capsule
renamed "used_dltensor" once Rill owns it, as the DLPack capsule rules ask);
the result comes back through rill_tensor_to_dlpack and
torch.utils.dlpack.from_dlpack. Checks: the same device memory on both sides
(data pointers equal: no copy either way), the values against PyTorch's own,
and that Rill calls PyTorch's deleter exactly once (the storage's use count
back to where it was). Exits 0 with a message when PyTorch or a GPU is missing.
"""
import ctypes
import gc
import sys


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]

# The Python C API, with PyObject * as a plain pointer where a capsule may be
# half destroyed (its destructor).
api = ctypes.pythonapi
capsule_get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", api))
capsule_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", api))
capsule_get_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, DESTRUCTOR)(("PyCapsule_New", api))

# A capsule keeps the pointer to its name: these live as long as the module.
DLTENSOR = ctypes.create_string_buffer(b"dltensor")
USED = ctypes.create_string_buffer(b"used_dltensor")


@DESTRUCTOR
def unconsumed_capsule(cap):
    """A capsule never consumed still owns its tensor: delete it (DLPack's rule)."""
    if capsule_valid_raw(cap, DLTENSOR):
        m = ctypes.cast(capsule_get_raw(cap, DLTENSOR), ctypes.POINTER(DLManagedTensor))
        if m.contents.deleter:
            m.contents.deleter(m)


P = ctypes.c_void_p
lib = None
libc = ctypes.CDLL(None)
libc.free.argtypes = [P]


def load(path):
    """librill, with the prototypes used here."""
    global lib
    lib = ctypes.CDLL(path)
    for name, res, args in [
    ("rill_status_message", ctypes.c_char_p, [P]), ("rill_status_free", None, [P]),
    ("rill_assemble", P, [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, P, ctypes.POINTER(P), ctypes.POINTER(ctypes.c_size_t)]),
    ("rill_module_load", P, [P, P, ctypes.c_size_t, ctypes.c_char_p, ctypes.POINTER(P)]),
    ("rill_module_release", None, [P]),
    ("rill_vm_create", P, [P, P, ctypes.c_char_p, ctypes.POINTER(P)]), ("rill_vm_destroy", None, [P]),
    ("rill_vm_invoke", P, [P, ctypes.c_char_p, ctypes.POINTER(P), ctypes.c_int, ctypes.POINTER(ctypes.POINTER(P)), ctypes.POINTER(ctypes.c_int)]),
    ("rill_results_free", None, [P, ctypes.POINTER(P), ctypes.c_int]),
    ("rill_tensor_from_dlpack", P, [P, P, ctypes.POINTER(P)]), ("rill_tensor_to_dlpack", P, [P, ctypes.POINTER(P)]),
    ("rill_tensor_device_pointer", P, [P]), ("rill_tensor_release", None, [P]),
    ]:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


def ok(st, what):
    if st:
        msg = lib.rill_status_message(st).decode()
        lib.rill_status_free(st)
        sys.exit(f"dlpack_torch: {what}: {msg}")


def to_rill(vm, cap):
    """A Rill tensor over a "dltensor" capsule's memory; Rill owns its managed tensor from here."""
    managed = capsule_get(cap, DLTENSOR)
    out = P()
    ok(lib.rill_tensor_from_dlpack(vm, managed, ctypes.byref(out)), "rill_tensor_from_dlpack")
    capsule_set_name(cap, USED)  # consumed: PyTorch's capsule destructor leaves it alone
    return out


def to_capsule(r):
    """A "dltensor" capsule over a Rill tensor's memory, for the consumer to take."""
    managed = P()
    ok(lib.rill_tensor_to_dlpack(r, ctypes.byref(managed)), "rill_tensor_to_dlpack")
    return capsule_new(managed, DLTENSOR, unconsumed_capsule)


def assemble(vm_device, src):
    """The module and a VM on vm_device for the program text src."""
    code, size = P(), ctypes.c_size_t()
    ok(lib.rill_assemble(None, b"dlpack_torch.vmasm", src, len(src), None, ctypes.byref(code), ctypes.byref(size)), "assemble")
    mod = P()
    ok(lib.rill_module_load(None, code, size, b".", ctypes.byref(mod)), "load")
    libc.free(code)
    vm = P()
    ok(lib.rill_vm_create(None, mod, vm_device.encode(), ctypes.byref(vm)), "vm")
    return mod, vm


def invoke(vm, ins):
    """Runs @main; the results as a list of Rill tensors, and the array to free."""
    arr = (P * len(ins))(*ins)
    results, n = ctypes.POINTER(P)(), ctypes.c_int()
    ok(lib.rill_vm_invoke(vm, b"main", arr, len(ins), ctypes.byref(results), ctypes.byref(n)), "run")
    return [results[i] for i in range(n.value)], results, n


SRC = b"""func @main(%x: f32[64,128], %w: f32[128,32]) -> (f32[64,32], f32[64,128]) {
  %h = matmul(%x, %w)
  %y = relu(%h)
  %z = mul(%x, %x)
  return %y, %z
}
"""


def main():
    try:
        import torch
        import torch.utils.dlpack
    except ImportError:
        print("dlpack_torch skipped: PyTorch is missing")
        return
    if not torch.cuda.is_available():
        print("dlpack_torch skipped: no GPU usable by PyTorch")
        return
    load(sys.argv[1] if len(sys.argv) > 1 else "build-gpu/librill.so")
    dev = torch.cuda.current_device()
    mod, vm = assemble(f"cuda:{dev}", SRC)

    torch.manual_seed(0)
    x = torch.randn(64, 128, device="cuda")
    w = torch.randn(128, 32, device="cuda") / 8
    torch.cuda.synchronize()  # PyTorch's writes done before Rill's streams read
    # Rill alone holds xs once its Python name is gone: its memory stays
    # allocated until Rill lets go (the deleter ran), and is freed then (it
    # ran; a second run would free it twice).
    xs = x.clone()
    torch.cuda.synchronize()
    xs_ptr, held = xs.data_ptr(), torch.cuda.memory_allocated()
    ins = [to_rill(vm, torch.utils.dlpack.to_dlpack(xs)), to_rill(vm, torch.utils.dlpack.to_dlpack(w))]
    del xs
    gc.collect()
    assert lib.rill_tensor_device_pointer(ins[0]) == xs_ptr, "the input was copied"
    assert lib.rill_tensor_device_pointer(ins[1]) == w.data_ptr(), "the input was copied"
    assert torch.cuda.memory_allocated() == held, "the input's memory went while Rill holds it"

    res, results, n = invoke(vm, ins)
    lib.rill_tensor_release(ins[0])
    lib.rill_tensor_release(ins[1])
    gc.collect()
    assert torch.cuda.memory_allocated() == held - x.nbytes, \
        f"{held - torch.cuda.memory_allocated()} bytes freed after Rill let go, want {x.nbytes}: the deleter did not run once"

    y = torch.utils.dlpack.from_dlpack(to_capsule(res[0]))
    z = torch.utils.dlpack.from_dlpack(to_capsule(res[1]))
    assert y.data_ptr() == lib.rill_tensor_device_pointer(res[0]), "the result was copied"
    assert z.data_ptr() == lib.rill_tensor_device_pointer(res[1]), "the result was copied"
    assert y.device == x.device and y.shape == (64, 32) and y.is_contiguous()
    lib.rill_results_free(vm, results, n)  # the exported tensors keep their own references
    torch.backends.cuda.matmul.allow_tf32 = False
    want_y = torch.relu(x @ w)
    torch.testing.assert_close(y, want_y, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(z, x * x, rtol=0, atol=0)
    y.add_(1)  # PyTorch may write what it was handed
    torch.cuda.synchronize()

    del y, z
    gc.collect()  # PyTorch calls the exports' deleters: Rill's references go
    lib.rill_vm_destroy(vm)
    lib.rill_module_release(mod)
    print(f"dlpack_torch: ok (cuda:{dev}, no copies, values match PyTorch, deleter once)")


if __name__ == "__main__":
    main()
