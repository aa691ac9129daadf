#!/usr/bin/env python3
"""Converts a torchvision model to Rill: .vmasm, safetensors weights, and
PyTorch's own output for a fixed input, to check Rill against.

    python3 bench/models/convert.py resnet50 -o out/ [--dtype f32|f16] [--size 224] [--seed 0] [--time N] [--onnx]

Writes out/MODEL_DTYPE.vmasm, out/MODEL_DTYPE.safetensors, out/MODEL_DTYPE.input.npy
out/MODEL_DTYPE.expected.npy (batch 1) and out/MODEL_DTYPE.reference.npy: the same
weights and input, rounded to DTYPE, run in double precision (the exact
answer, to judge both Rill's and PyTorch's errors). TF32 is off: f32 is
float arithmetic in both. Weights are random (torchvision's
initialisation; batch-norm statistics measured on four random images so
activations keep their scale, affine parameters drawn from the seed). The model is traced with
torch.fx in eval mode; an op this script does not know stops it with the
node's name. PyTorch's output is computed on CUDA where it is usable, else on
the CPU (f16 needs CUDA there).

With --time N (CUDA only) it also times PyTorch on the same model and input,
batch 1: eager mode and the replay of a CUDA graph captured from it, N runs
each after a warm-up, each run timed on the host from launch to
synchronisation (as rill bench times a run); medians and minima go to
out/MODEL_DTYPE.torch.json.

With --onnx it also exports the same model (same weights, eval mode, batch
1, DTYPE) with torch.onnx.export (opset 17, constants folded) to
out/MODEL_DTYPE.onnx, for `rill import` and onnxruntime (bench/models/onnx.sh).
"""
import argparse
import json
import operator
import os
import statistics
import struct
import sys
import time

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.fx.passes.shape_prop import ShapeProp

MODELS = {
    "resnet50": lambda: torchvision.models.resnet50(),
    "googlenet": lambda: torchvision.models.googlenet(aux_logits=False, init_weights=True),
    "inception_v3": lambda: torchvision.models.inception_v3(aux_logits=False, init_weights=True),
    "resnet18": lambda: torchvision.models.resnet18(),
}
DEFAULT_SIZE = {"inception_v3": 299}
DT = {"f32": (torch.float32, "F32"), "f16": (torch.float16, "F16")}


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


def ints(v):
    return "[" + ", ".join(str(int(x)) for x in v) + "]"


class Converter:
    def __init__(self, gm, dtype):
        self.gm = gm
        self.mods = dict(gm.named_modules())
        self.dtype = dtype
        self.lines = []
        self.consts = []       # (name, tensor)
        self.names = {}        # fx node -> %name
        self.alias = {}        # fx node -> node it stands for (identity ops)

    def const(self, key, t):
        name = "c" + str(len(self.consts))
        self.consts.append((key, name, t.detach().to(DT[self.dtype][0]).contiguous().cpu()))
        return "%" + name

    def v(self, n):
        while n in self.alias:
            n = self.alias[n]
        return self.names[n]

    def emit(self, node, text):
        name = "%v" + str(len(self.names))
        self.names[node] = name
        self.lines.append(f"  {name} = {text}")

    def module(self, node, m):
        x = self.v(node.args[0])
        q = node.target
        if isinstance(m, nn.Conv2d):
            if m.padding_mode != "zeros" or isinstance(m.padding, str):
                raise ValueError(f"{q}: padding mode {m.padding_mode!r}/{m.padding!r}")
            args = [x, self.const(q + ".weight", m.weight)]
            if m.bias is not None:
                args.append(self.const(q + ".bias", m.bias))
            self.emit(node, f"conv2d({', '.join(args)}) {{stride={ints(pair(m.stride))}, padding={ints(pair(m.padding))}, "
                            f"dilation={ints(pair(m.dilation))}, groups={m.groups}}}")
        elif isinstance(m, nn.BatchNorm2d):
            args = [x, self.const(q + ".weight", m.weight), self.const(q + ".bias", m.bias),
                    self.const(q + ".running_mean", m.running_mean), self.const(q + ".running_var", m.running_var)]
            self.emit(node, f"batch_norm({', '.join(args)}) {{eps={m.eps!r}}}")
        elif isinstance(m, nn.ReLU):
            self.emit(node, f"relu({x})")
        elif isinstance(m, nn.MaxPool2d):
            self.pool(node, "max_pool2d", x, m.kernel_size, m.stride, m.padding, m.ceil_mode, None, m.dilation)
        elif isinstance(m, nn.AvgPool2d):
            self.pool(node, "avg_pool2d", x, m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad, 1)
        elif isinstance(m, nn.AdaptiveAvgPool2d):
            self.emit(node, f"adaptive_avg_pool2d({x}) {{output={ints(pair(m.output_size))}}}")
        elif isinstance(m, nn.Linear):
            args = [x, self.const(q + ".weight", m.weight)]
            if m.bias is not None:
                args.append(self.const(q + ".bias", m.bias))
            self.emit(node, f"linear({', '.join(args)})")
        elif isinstance(m, (nn.Dropout, nn.Identity)):
            self.alias[node] = node.args[0]
        elif isinstance(m, nn.Flatten):
            self.emit(node, f"flatten({x}) {{start={m.start_dim}, end={m.end_dim}}}")
        else:
            raise ValueError(f"{q}: module {type(m).__name__} is not supported")

    def pool(self, node, op, x, k, s, p, ceil, cip, dil):
        if pair(dil) != [1, 1]:
            raise ValueError(f"{node.name}: pooling with dilation")
        s = k if s is None or s == [] else s
        attrs = f"kernel={ints(pair(k))}, stride={ints(pair(s))}, padding={ints(pair(p))}, ceil_mode={str(bool(ceil)).lower()}"
        if cip is not None:
            attrs += f", count_include_pad={str(bool(cip)).lower()}"
        self.emit(node, f"{op}({x}) {{{attrs}}}")

    def function(self, node):
        f, a, kw = node.target, node.args, node.kwargs
        if f in (operator.add, torch.add) and len(a) == 2 and all(isinstance(t, torch.fx.Node) for t in a):
            self.emit(node, f"add({self.v(a[0])}, {self.v(a[1])})")
        elif f in (torch.relu, F.relu):
            self.emit(node, f"relu({self.v(a[0])})")
        elif f is torch.flatten:
            start = a[1] if len(a) > 1 else kw.get("start_dim", 0)
            end = a[2] if len(a) > 2 else kw.get("end_dim", -1)
            self.emit(node, f"flatten({self.v(a[0])}) {{start={start}, end={end}}}")
        elif f is torch.cat:
            dim = a[1] if len(a) > 1 else kw.get("dim", 0)
            self.emit(node, f"concat({', '.join(self.v(t) for t in a[0])}) {{axis={dim}}}")
        elif f is F.max_pool2d:
            g = lambda i, k, d: a[i] if len(a) > i else kw.get(k, d)
            self.pool(node, "max_pool2d", self.v(a[0]), g(1, "kernel_size", None), g(2, "stride", None), g(3, "padding", 0),
                      g(5, "ceil_mode", False), None, g(4, "dilation", 1))
        elif f is F.avg_pool2d:
            g = lambda i, k, d: a[i] if len(a) > i else kw.get(k, d)
            self.pool(node, "avg_pool2d", self.v(a[0]), g(1, "kernel_size", None), g(2, "stride", None), g(3, "padding", 0),
                      g(4, "ceil_mode", False), g(5, "count_include_pad", True), 1)
        elif f is F.adaptive_avg_pool2d:
            self.emit(node, f"adaptive_avg_pool2d({self.v(a[0])}) {{output={ints(pair(a[1] if len(a) > 1 else kw['output_size']))}}}")
        elif f is F.dropout:
            self.alias[node] = a[0]
        else:
            raise ValueError(f"{node.name}: function {getattr(f, '__name__', f)} is not supported")

    def method(self, node):
        m, a = node.target, node.args
        if m == "flatten":
            self.emit(node, f"flatten({self.v(a[0])}) {{start={a[1] if len(a) > 1 else 0}}}")
        elif m in ("view", "reshape") and all(isinstance(t, int) for t in a[1:]):
            self.emit(node, f"reshape({self.v(a[0])}) {{shape={ints(a[1:])}}}")
        else:
            raise ValueError(f"{node.name}: method {m} is not supported")

    def run(self, size):
        dt = self.dtype
        params, rets = [], []
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                shape = list(node.meta["tensor_meta"].shape)
                self.names[node] = "%" + node.name
                params.append(f"%{node.name}: {dt}{ints(shape)}")
            elif node.op == "call_module":
                self.module(node, self.mods[node.target])
            elif node.op == "call_function":
                self.function(node)
            elif node.op == "call_method":
                self.method(node)
            elif node.op == "output":
                out = node.args[0]
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                rets = [(self.v(o), list(o.meta["tensor_meta"].shape)) for o in outs]
            else:
                raise ValueError(f"{node.name}: {node.op} nodes are not supported")
        return params, rets


def write_safetensors(path, consts):
    header, offset, blobs = {}, 0, []
    for key, name, t in consts:
        b = t.numpy().tobytes()
        header[key] = {"dtype": DT["f16" if t.dtype == torch.float16 else "f32"][1], "shape": list(t.shape),
                       "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def time_torch(model, x, n, compiled=False):
    """Latency of eager runs and of CUDA-graph replays, in ms; with compiled,
    also torch.compile(mode="reduce-overhead") with freezing (its own CUDA
    graphs), the compile time apart."""
    def runs(step):
        for _ in range(max(10, n // 10)):
            step()
        torch.cuda.synchronize()
        t = []
        for _ in range(n):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            t.append((time.perf_counter() - t0) * 1e3)
        return {"median_ms": statistics.median(t), "min_ms": min(t)}

    out = {}
    torch.backends.cudnn.benchmark = True   # PyTorch at its best: cuDNN's algorithms timed per shape
    with torch.no_grad():
        out["eager"] = runs(lambda: model(x))
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(x)
        out["cuda_graph"] = runs(g.replay)
        if compiled:
            import torch._inductor.config as inductor_config
            inductor_config.freezing = True
            cm = torch.compile(model, mode="reduce-overhead")
            t0 = time.perf_counter()
            for _ in range(3):
                cm(x)
            torch.cuda.synchronize()
            out["compile_s"] = time.perf_counter() - t0
            out["torch_compile"] = runs(lambda: cm(x))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--dtype", choices=sorted(DT), default="f32")
    ap.add_argument("--size", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time", type=int, metavar="N", help="time PyTorch eager and CUDA-graph replay, N runs each")
    ap.add_argument("--compile", action="store_true", help="with --time: also torch.compile (reduce-overhead, freezing)")
    ap.add_argument("--onnx", action="store_true", help="also export the model to MODEL_DTYPE.onnx (torch.onnx.export)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    # Float arithmetic for f32, as Rill does it: no TF32 on tensor cores.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if a.dtype == "f16" and dev == "cpu":
        sys.exit("convert.py: f16 needs CUDA for PyTorch's reference output")
    model = MODELS[a.model]()
    g = torch.Generator().manual_seed(a.seed + 1)
    size = a.size or DEFAULT_SIZE.get(a.model, 224)
    # Batch-norm statistics from a few random images, so activations keep
    # their scale through the network (f16 would overflow otherwise), then
    # random affine parameters so that no batch norm is the identity.
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(torch.rand(4, 3, size, size, generator=g) * 2 - 1)
        for m in bns:
            m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
            m.bias.copy_(torch.rand(m.bias.shape, generator=g) - 0.5)
    model.eval()
    x = torch.rand(1, 3, size, size, generator=g) * 2 - 1
    gm = torch.fx.symbolic_trace(model)
    ShapeProp(gm).propagate(x)
    conv = Converter(gm, a.dtype)
    try:
        params, rets = conv.run(size)
    except ValueError as e:
        sys.exit(f"convert.py: {a.model}: {e}")
    tdt = DT[a.dtype][0]
    with torch.no_grad():
        want = model.to(dev, tdt)(x.to(dev, tdt)).float().cpu()
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"{a.model}_{a.dtype}")
    if a.time:
        if dev != "cuda":
            sys.exit("convert.py: --time needs CUDA")
        times = time_torch(model, x.to(dev, tdt), a.time, a.compile)
        times.update(torch=torch.__version__, device=torch.cuda.get_device_name(), cudnn=torch.backends.cudnn.version())
        with open(stem + ".torch.json", "w") as f:
            json.dump(times, f)
    # The exact answer for this program: the same rounded weights and input
    # in double precision, to judge Rill's error against PyTorch's own.
    with torch.no_grad():
        ref = model.double()(x.to(tdt).to(dev, torch.float64)).cpu()
    np.save(stem + ".reference.npy", ref.numpy())
    write_safetensors(stem + ".safetensors", conv.consts)
    np.save(stem + ".input.npy", x.to(tdt).numpy())
    np.save(stem + ".expected.npy", want.to(tdt).numpy())
    src = [f"# {a.model} (torchvision {torchvision.__version__}, random weights, seed {a.seed}), batch 1, {a.dtype}",
           f"weights \"{os.path.basename(stem)}.safetensors\" as w"]
    src += [f"const {n and '%' + n} : {a.dtype}{ints(t.shape)} = w[\"{k}\"]" for k, n, t in conv.consts]
    ret_types = ", ".join(f"{a.dtype}{ints(s)}" for _, s in rets)
    src.append(f"func @main({', '.join(params)}) -> ({ret_types}) {{")
    src += conv.lines
    src.append("  return " + ", ".join(v for v, _ in rets))
    src.append("}")
    if a.onnx:
        m = model.to(dev, tdt)  # the weights rounded to DTYPE, as the .vmasm has them
        args = dict(opset_version=17, do_constant_folding=True, input_names=["x"], output_names=["y"])
        with torch.no_grad():
            try:   # the TorchScript exporter, which keeps opset 17 (newer PyTorch defaults to dynamo's)
                torch.onnx.export(m, (x.to(dev, tdt),), stem + ".onnx.tmp", dynamo=False, **args)
            except TypeError:   # a PyTorch without the dynamo argument
                torch.onnx.export(m, (x.to(dev, tdt),), stem + ".onnx.tmp", **args)
        os.replace(stem + ".onnx.tmp", stem + ".onnx")
    with open(stem + ".vmasm.tmp", "w") as f:
        f.write("\n".join(src) + "\n")
    os.replace(stem + ".vmasm.tmp", stem + ".vmasm")
    print(f"{stem}.vmasm: {len(conv.lines)} ops, {len(conv.consts)} weights; PyTorch output on {dev}")


if __name__ == "__main__":
    main()
