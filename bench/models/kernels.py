"""Kernels per run and kernel time per run, Rill next to PyTorch, from CUPTI.

    python3 bench/models/kernels.py LIBRILL MODEL DTYPE MODULE.vmbc INPUT.npy [--runs N] [--time N] [--json OUT.json] [--no-torch | --no-compile]

Rill: the module (assembled by rill asm, weights beside it) runs @main in
this process through librill on cuda:0, on the input (a PyTorch CUDA tensor
handed over by DLPack), interpreted and replayed as a CUDA graph. PyTorch:
the torchvision MODEL or convert.py's BERT-base-shaped encoder (random
weights: kernel counts and times do not depend on them; the encoder's
length is the input's) in DTYPE, eager and torch.compile(mode=
"reduce-overhead") with freezing, batch 1. Each is warmed up, then N runs
(20) are recorded by torch.profiler's CUDA activity (CUPTI, which sees every
kernel of the process, graph replays included); a kernel is counted with
the time CUPTI gives it. Per configuration it prints kernels per run, kernel
time per run (us) and the time by class: `convert` (cuDNN's layout
conversions: nchwToNhwc and back), `conv` (convolution and GEMM kernels of
cuDNN, cuBLAS and CUTLASS) and `other`, with the longest kernels.
"""
import argparse
import ctypes
import json
import os
import sys

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "gpu"))
import convert  # noqa: E402
import dlpack_torch as dl  # noqa: E402


def kind(name):
    k = name.lower()
    if "nchwtonhwc" in k or "nhwctonchw" in k:
        return "convert"
    if any(s in k for s in ("conv", "xmma", "implicit", "gemm", "cutlass", "sm90_", "sm80_", "cudnn")):
        return "conv"
    return "other"


def kernels(step, runs, time_n=0):
    """Kernels per run, kernel us per run, us per class and the longest kernels, over `runs` calls of step()."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(runs):
            step()
        torch.cuda.synchronize()
    n, total, by, top = 0, 0.0, {}, []
    for e in p.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = e.self_cuda_time_total
        if t <= 0 or e.count <= 0:
            continue
        n += e.count
        total += t
        by[kind(e.key)] = by.get(kind(e.key), 0.0) + t / runs
        top.append((t / runs, e.key[:60], e.count / runs))
    top.sort(reverse=True)
    lat = convert.time_ms(step, time_n) if time_n else {}
    return {**lat, "kernels_per_run": n / runs, "kernel_us_per_run": total / runs,
            "by_class_us": {k: round(v, 1) for k, v in sorted(by.items())},
            "top": [{"us": round(t, 1), "name": k, "per_run": c} for t, k, c in top[:15]]}


def rill_runs(lib_path, vmbc, x, graph):
    """step() for the module's @main on x, interpreted or replayed as a graph."""
    dl.load(lib_path)
    lib = dl.lib
    lib.rill_vm_set_graph_mode.restype, lib.rill_vm_set_graph_mode.argtypes = dl.P, [dl.P, ctypes.c_char_p, ctypes.c_int]
    code = open(vmbc, "rb").read()
    mod, vm = dl.P(), dl.P()
    dl.ok(lib.rill_module_load(None, code, len(code), os.path.dirname(os.path.abspath(vmbc)).encode(), ctypes.byref(mod)), "load")
    dl.ok(lib.rill_vm_create(None, mod, b"cuda:0", ctypes.byref(vm)), "vm")
    dl.ok(lib.rill_vm_set_graph_mode(vm, b"main", 2 if graph else 0), "graph mode")
    torch.cuda.synchronize()
    xin = dl.to_rill(vm, torch.utils.dlpack.to_dlpack(x))

    def step():
        res, results, n = dl.invoke(vm, [xin])
        lib.rill_results_free(vm, results, n)

    def done():
        lib.rill_tensor_release(xin)
        lib.rill_vm_destroy(vm)
        lib.rill_module_release(mod)
    return step, done


def torch_runs(a, x, out):
    """PyTorch's eager and torch.compile runs of the same model, into out."""
    tdt = convert.DT[a.dtype][0]
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = (convert.Encoder() if a.model == "encoder" else convert.MODELS[a.model]()).eval().cuda().to(tdt)
    xt = x.to(tdt)
    with torch.no_grad():
        out["torch_eager"] = kernels(lambda: model(xt), a.runs, a.time)
        out["torch_cuda_graph"] = {"median_ms": convert.cuda_graph_ms(model, xt, a.time)["median_ms"]} if a.time else {}
        if a.no_compile:
            return
        import torch._inductor.config as inductor_config
        inductor_config.freezing = True
        cm = torch.compile(model, mode="reduce-overhead")
        out["torch_compile"] = kernels(lambda: cm(xt), a.runs, a.time)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("model", choices=sorted(convert.MODELS) + ["encoder"])
    ap.add_argument("dtype", choices=sorted(convert.DT))
    ap.add_argument("vmbc")
    ap.add_argument("input")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--time", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--no-torch", action="store_true", help="Rill's runs only")
    ap.add_argument("--no-compile", action="store_true", help="PyTorch eager only (its CUDA graph replays the same kernels)")
    a = ap.parse_args()
    x = torch.from_numpy(np.load(a.input)).cuda().contiguous()
    out = {}
    for graph in (False, True):
        step, done = rill_runs(a.lib, a.vmbc, x, graph)
        out["rill_graph" if graph else "rill"] = kernels(step, a.runs, a.time)
        done()
    if not a.no_torch:
        torch_runs(a, x, out)
    for k, v in out.items():
        ms = f"{v['median_ms']:.3f} ms; " if "median_ms" in v else ""
        if "kernels_per_run" not in v:
            print(f"{a.model} {a.dtype} {k}: {ms}")
            continue
        print(f"{a.model} {a.dtype} {k}: {ms}{v['kernels_per_run']:.0f} kernels, {v['kernel_us_per_run']:.1f} us per run; "
              f"{v['by_class_us']}; longest {[(t['name'][:40], t['us']) for t in v['top'][:3]]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
