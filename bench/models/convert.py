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

`encoder` is a transformer encoder on hidden states [1, S, hidden] (BERT-base
shapes by default: 12 layers, hidden 768, 12 heads, intermediate 3072, GELU,
post layer norm; --encoder-config L,H,HEADS,I for a small one), random
weights from the seed; --size is its length (128).

With --dynamic the batch (CNNs, `B`, --range 1,32 by default) or the
sequence length (encoder, `S`, 1,512) is a shape variable, and the files are
named MODEL_DTYPE_dyn.*. The program is traced at three sizes of that
dimension (2, 3, 5): every integer that follows the size is written in terms
of it (S, or mul/add of it), everything else must agree, and a program whose
structure depends on the size is refused, naming the line. --sizes N,...
writes STEM.N.input.npy, STEM.N.expected.npy and STEM.N.reference.npy at each
size; --static-sizes N,... writes STEM.N.vmasm, the program traced at that
size (no shape variable) with the same weights file: the static twin. With
--onnx --dynamic the export's axis is dynamic too (dynamic_axes, named B or S).
"""
import argparse
import json
import copy
import math
import operator
import re
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

class EncoderLayer(nn.Module):
    """One BERT layer (post layer norm), as transformers' BertLayer computes it
    in eval mode: self-attention with the head split written with the
    tensor's own sizes (x.size(0), x.size(1)), so that the converted program
    says [1, S, 12, 64] where the length is S."""
    def __init__(self, hidden, heads, inter, eps=1e-12):
        super().__init__()
        self.heads, self.hd = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.attn_out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden, eps=eps)
        self.inter, self.out = nn.Linear(hidden, inter), nn.Linear(inter, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=eps)

    def split(self, x):   # [B, S, hidden] -> [B, heads, S, hd]
        return x.view(x.size(0), x.size(1), self.heads, self.hd).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        a = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd), dim=-1)
        c = torch.matmul(a, v).permute(0, 2, 1, 3).reshape(x.size(0), x.size(1), self.heads * self.hd)
        x = self.ln1(x + self.attn_out(c))
        return self.ln2(x + self.out(F.gelu(self.inter(x))))


class Encoder(nn.Module):
    """A transformer encoder on hidden states [B, S, hidden] (no embeddings)."""
    def __init__(self, layers=12, hidden=768, heads=12, inter=3072):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, inter) for _ in range(layers))
        self.hidden = hidden

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def encoder_config(spec):
    """--encoder-config LAYERS,HIDDEN,HEADS,INTER (BERT-base: 12,768,12,3072)."""
    v = [int(t) for t in spec.split(",")]
    if len(v) != 4 or min(v) < 1 or v[1] % v[2]:
        raise argparse.ArgumentTypeError(f"expected LAYERS,HIDDEN,HEADS,INTER with HEADS dividing HIDDEN, got {spec!r}")
    return v


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


class Recorder(torch.fx.Interpreter):
    """Runs the traced module once and keeps what each node gave: a tensor's
    shape (not its data), or the value itself (sizes, tuples of sizes)."""
    def __init__(self, gm):
        super().__init__(gm)
        self.values = {}

    def run_node(self, n):
        r = super().run_node(n)
        self.values[n] = Shape(r.shape) if isinstance(r, torch.Tensor) else r
        return r


class Shape(tuple):
    """A tensor's shape, as Recorder keeps it (a plain tuple is a value of sizes)."""


class Converter:
    def __init__(self, gm, dtype, values):
        self.values = values   # fx node -> recorded shape or value (Recorder)
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

    def shape(self, n):
        while n in self.alias:
            n = self.alias[n]
        return self.values[n]

    def size(self, a):
        """An integer argument, where it may be a node computed from sizes (x.size(1))."""
        if isinstance(a, torch.fx.Node):
            a = self.values[a]
        if not isinstance(a, int):
            raise ValueError(f"expected a size, found {a!r}")
        return a

    def sizes(self, args):
        """view/reshape/permute arguments: several ints, or one tuple of them (either may hold nodes)."""
        if len(args) == 1:
            a = args[0]
            if isinstance(a, torch.fx.Node) and isinstance(self.values[a], (tuple, list)) and not isinstance(self.values[a], Shape):
                return [self.size(x) for x in self.values[a]]
            if isinstance(a, (tuple, list)):
                return [self.size(x) for x in a]
        return [self.size(x) for x in args]

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
        elif isinstance(m, nn.LayerNorm):
            if len(m.normalized_shape) != 1:
                raise ValueError(f"{q}: layer norm over {len(m.normalized_shape)} dimensions")
            args = [x]
            if m.elementwise_affine:
                args += [self.const(q + ".weight", m.weight), self.const(q + ".bias", m.bias)]
            self.emit(node, f"layer_norm({', '.join(args)}) {{axis=-1, eps={m.eps!r}}}")
        elif isinstance(m, nn.GELU):
            self.emit(node, f"gelu({x}) {{approximate=\"{m.approximate}\"}}")
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
        elif f in (torch.matmul, operator.matmul):
            self.emit(node, f"matmul({self.v(a[0])}, {self.v(a[1])})")
        elif f in (operator.mul, torch.mul, operator.truediv, torch.div) and isinstance(a[0], torch.fx.Node) and \
                isinstance(a[1], (int, float)) and not isinstance(a[1], bool):
            op = "mul" if f in (operator.mul, torch.mul) else "div"
            self.emit(node, f"{op}({self.v(a[0])}, {float(a[1])!r})")
        elif f in (torch.softmax, F.softmax):
            dim = a[1] if len(a) > 1 else kw["dim"]
            self.emit(node, f"softmax({self.v(a[0])}) {{axis={dim}}}")
        elif f is F.gelu:
            approx = kw.get("approximate", "none")
            self.emit(node, f"gelu({self.v(a[0])}) {{approximate=\"{approx}\"}}")
        else:
            raise ValueError(f"{node.name}: function {getattr(f, '__name__', f)} is not supported")

    def method(self, node):
        m, a = node.target, node.args
        if m == "flatten":
            self.emit(node, f"flatten({self.v(a[0])}) {{start={a[1] if len(a) > 1 else 0}}}")
        elif m in ("view", "reshape"):
            self.emit(node, f"reshape({self.v(a[0])}) {{shape={ints(self.sizes(a[1:]))}}}")
        elif m == "permute":
            self.emit(node, f"transpose({self.v(a[0])}) {{perm={ints(self.sizes(a[1:]))}}}")
        elif m == "transpose":
            rank = len(self.shape(a[0]))
            i, j = self.size(a[1]) % rank, self.size(a[2]) % rank
            perm = list(range(rank))
            perm[i], perm[j] = j, i
            self.emit(node, f"transpose({self.v(a[0])}) {{perm={ints(perm)}}}")
        elif m == "softmax":
            dim = a[1] if len(a) > 1 else node.kwargs["dim"]
            self.emit(node, f"softmax({self.v(a[0])}) {{axis={dim}}}")
        elif m == "contiguous":
            self.alias[node] = a[0]
        else:
            raise ValueError(f"{node.name}: method {m} is not supported")

    def run(self):
        dt = self.dtype
        params, rets = [], []
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                shape = list(self.values[node])
                self.names[node] = "%" + node.name
                params.append(f"%{node.name}: {dt}{ints(shape)}")
            elif node.op in ("call_function", "call_method") and not isinstance(self.values[node], Shape):
                pass   # arithmetic on sizes (x.shape[1], x.size()[:-1] + (h, d)): no op, its value is read where used
            elif node.op == "call_module":
                self.module(node, self.mods[node.target])
            elif node.op == "call_function":
                self.function(node)
            elif node.op == "call_method":
                self.method(node)
            elif node.op == "output":
                out = node.args[0]
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                rets = [(self.v(o), list(self.shape(o))) for o in outs]
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


def time_ms(step, n):
    """Latency of step() in ms over n runs, after max(10, n // 10) warm-up
    runs: the median and the least."""
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


def cuda_graph_ms(model, x, n):
    """model(x) captured once into a CUDA graph (after three warm-up runs on a
    side stream, as capture needs) and its replays timed with time_ms."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        model(x)
    return time_ms(g.replay, n)


def time_torch(model, x, n, compiled=False):
    """Latency of eager runs and of CUDA-graph replays, in ms; with compiled,
    also torch.compile(mode="reduce-overhead") with freezing (its own CUDA
    graphs), the compile time apart."""
    out = {}
    torch.backends.cudnn.benchmark = True   # PyTorch at its best: cuDNN's algorithms timed per shape
    with torch.no_grad():
        out["eager"] = time_ms(lambda: model(x), n)
        out["cuda_graph"] = cuda_graph_ms(model, x, n)
        if compiled:
            import torch._inductor.config as inductor_config
            inductor_config.freezing = True
            cm = torch.compile(model, mode="reduce-overhead")
            t0 = time.perf_counter()
            for _ in range(3):
                cm(x)
            torch.cuda.synchronize()
            out["compile_s"] = time.perf_counter() - t0
            out["torch_compile"] = time_ms(lambda: cm(x), n)
    return out


def program(model, x, dtype):
    """The function text of MODEL traced with torch.fx and run on x (the
    sizes it says are x's), and its weights."""
    gm = torch.fx.symbolic_trace(model)
    rec = Recorder(gm)
    with torch.no_grad():
        rec.run(x)
    conv = Converter(gm, dtype, rec.values)
    params, rets = conv.run()
    ret_types = ", ".join(f"{dtype}{ints(s)}" for _, s in rets)
    lines = [f"func @main({', '.join(params)}) -> ({ret_types}) {{"] + conv.lines
    lines += ["  return " + ", ".join(v for v, _ in rets), "}"]
    return lines, conv.consts


TOKEN = re.compile(r"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|[%@]?[A-Za-z_][\w.]*|\s+|.")
INT = re.compile(r"-?\d+")


def size_expr(name, k, c):
    """k*NAME + c in the language's size notation."""
    e = name if k == 1 else f"mul({name}, {k})"
    return e if c == 0 else f"add({e}, {c})"


def symbolize(texts, sizes, name):
    """One program with the shape variable NAME from the same program traced
    at several sizes of one dimension (texts[i] at sizes[i], at least 3):
    every integer that differs between them must be k*NAME + c (k > 0, c >=
    0) at every size, and everything else must agree. Raises ValueError,
    naming the line, where it cannot tell."""
    lines = [t.splitlines() for t in texts]
    if any(len(l) != len(lines[0]) for l in lines):
        raise ValueError(f"the programs at {name}={sizes[0]} and {name}={sizes[1]} have different numbers of lines "
                         f"({len(lines[0])} and {len(lines[1])}): the structure depends on the size")
    out = []
    for i, group in enumerate(zip(*lines)):
        toks = [TOKEN.findall(l) for l in group]
        where = f"line {i + 1} ({group[0].strip()[:120]!r} at {name}={sizes[0]}, {group[1].strip()[:120]!r} at {name}={sizes[1]})"
        if any(len(t) != len(toks[0]) for t in toks):
            raise ValueError(f"{where}: the op or its attributes depend on the size")
        line = []
        for tg in zip(*toks):
            if all(t == tg[0] for t in tg):
                line.append(tg[0])
                continue
            if not all(INT.fullmatch(t) for t in tg):
                raise ValueError(f"{where}: {' / '.join(tg)} differ and are not sizes")
            v = [int(t) for t in tg]
            k, r = divmod(v[1] - v[0], sizes[1] - sizes[0])
            c = v[0] - k * sizes[0]
            if r or k <= 0 or c < 0 or any(k * s + c != w for s, w in zip(sizes, v)):
                raise ValueError(f"{where}: cannot tell the size: {', '.join(f'{s} -> {w}' for s, w in zip(sizes, v))} "
                                 f"is not k*{name} + c with k > 0, c >= 0")
            line.append(size_expr(name, k, c))
        out.append("".join(line))
    return out


def ints_list(spec):
    return [int(t) for t in spec.split(",") if t]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(MODELS) + ["encoder"])
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--dtype", choices=sorted(DT), default="f32")
    ap.add_argument("--size", type=int, help="image size (CNNs), or sequence length (encoder, 128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time", type=int, metavar="N", help="time PyTorch eager and CUDA-graph replay, N runs each")
    ap.add_argument("--compile", action="store_true", help="with --time: also torch.compile (reduce-overhead, freezing)")
    ap.add_argument("--onnx", action="store_true", help="also export the model to MODEL_DTYPE.onnx (torch.onnx.export)")
    ap.add_argument("--encoder-config", type=encoder_config, default=[12, 768, 12, 3072], metavar="L,H,HEADS,I",
                    help="encoder layers, hidden size, heads, intermediate size (BERT-base: 12,768,12,3072)")
    ap.add_argument("--dynamic", action="store_true",
                    help="the batch (CNNs: B) or the sequence length (encoder: S) is a shape variable")
    ap.add_argument("--range", type=ints_list, metavar="LO,HI", help="the shape variable's range (B: 1,32; S: 1,512)")
    ap.add_argument("--sizes", type=ints_list, default=[], metavar="N,...",
                    help="with --dynamic: input, PyTorch's output and the exact answer at each size (STEM.N.*.npy)")
    ap.add_argument("--static-sizes", type=ints_list, default=[], metavar="N,...",
                    help="with --dynamic: also STEM.N.vmasm, the program traced at that size (no shape variable), same weights")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    # Float arithmetic for f32, as Rill does it: no TF32 on tensor cores.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if a.dtype == "f16" and dev == "cpu":
        sys.exit("convert.py: f16 needs CUDA for PyTorch's reference output")
    if (a.sizes or a.static_sizes or a.range) and not a.dynamic:
        sys.exit("convert.py: --sizes, --static-sizes and --range go with --dynamic")
    g = torch.Generator().manual_seed(a.seed + 1)
    if a.model == "encoder":
        layers, hidden, heads, inter = a.encoder_config
        model = Encoder(layers, hidden, heads, inter)
        size = a.size or 128
        var, (lo, hi) = "S", a.range or (1, 512)
        # Random layer-norm parameters, so that none is the identity.
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                    m.bias.copy_(torch.rand(m.bias.shape, generator=g) - 0.5)

        def make_input(n, gen):
            return torch.rand(1, n, hidden, generator=gen) * 2 - 1
        what = f"transformer encoder ({layers} layers, hidden {hidden}, {heads} heads, intermediate {inter}, " \
               f"GELU, post layer norm; random weights, seed {a.seed}), batch 1"
        dyn_axis = 1
    else:
        model = MODELS[a.model]()
        size = a.size or DEFAULT_SIZE.get(a.model, 224)
        var, (lo, hi) = "B", a.range or (1, 32)
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

        def make_input(n, gen):
            return torch.rand(n, 3, size, size, generator=gen) * 2 - 1
        what = f"{a.model} (torchvision {torchvision.__version__}, random weights, seed {a.seed})"
        dyn_axis = 0
    model.eval()
    x = make_input(1 if a.model != "encoder" else size, g)
    tdt = DT[a.dtype][0]
    stem = os.path.join(a.out, f"{a.model}_{a.dtype}" + ("_dyn" if a.dynamic else ""))
    try:
        lines, consts = program(model, x, a.dtype)
        if a.dynamic:
            # The same program traced at three sizes of the variable dimension:
            # the integers that follow the size are it, everything else must agree.
            probes = [2, 3, 5]
            texts = []
            for n in probes:
                l, c = program(model, make_input(n, torch.Generator().manual_seed(0)), a.dtype)
                if [(k, tuple(t.shape)) for k, _, t in c] != [(k, tuple(t.shape)) for k, _, t in consts]:
                    raise ValueError(f"the weights differ between sizes (at {var}={n})")
                texts.append("\n".join(l))
            lines = symbolize(texts, probes, var)
    except ValueError as e:
        sys.exit(f"convert.py: {a.model}: {e}")
    os.makedirs(a.out, exist_ok=True)
    model_t = copy.deepcopy(model).to(dev, tdt)
    with torch.no_grad():
        want = model_t(x.to(dev, tdt)).float().cpu()
    if a.time:
        if dev != "cuda":
            sys.exit("convert.py: --time needs CUDA")
        times = time_torch(model_t, x.to(dev, tdt), a.time, a.compile)
        times.update(torch=torch.__version__, device=torch.cuda.get_device_name(), cudnn=torch.backends.cudnn.version())
        with open(stem + ".torch.json", "w") as f:
            json.dump(times, f)
    # The exact answer for this program: the same rounded weights and input
    # in double precision, to judge Rill's error against PyTorch's own.
    model_d = copy.deepcopy(model_t).double()
    with torch.no_grad():
        ref = model_d(x.to(tdt).to(dev, torch.float64)).cpu()
    np.save(stem + ".reference.npy", ref.numpy())
    write_safetensors(stem + ".safetensors", consts)
    np.save(stem + ".input.npy", x.to(tdt).numpy())
    np.save(stem + ".expected.npy", want.to(tdt).numpy())
    # Per size (--dynamic): input, PyTorch's output and the exact answer.
    for n in a.sizes:
        xn = make_input(n, torch.Generator().manual_seed(a.seed + 1000 + n)).to(tdt)
        with torch.no_grad():
            np.save(f"{stem}.{n}.expected.npy", model_t(xn.to(dev)).cpu().numpy())
            np.save(f"{stem}.{n}.reference.npy", model_d(xn.to(dev, torch.float64)).cpu().numpy())
        np.save(f"{stem}.{n}.input.npy", xn.numpy())
    head = [f"weights \"{os.path.basename(stem)}.safetensors\" as w"]
    head += [f"const {n and '%' + n} : {a.dtype}{ints(t.shape)} = w[\"{k}\"]" for k, n, t in consts]
    for n in a.static_sizes:
        try:
            l, _ = program(model, make_input(n, torch.Generator().manual_seed(0)), a.dtype)
        except ValueError as e:
            sys.exit(f"convert.py: {a.model} at {var}={n}: {e}")
        with open(f"{stem}.{n}.vmasm.tmp", "w") as f:
            f.write("\n".join([f"# {what}, {var}={n} (static twin of {os.path.basename(stem)}.vmasm), {a.dtype}"] + head + l) + "\n")
        os.replace(f"{stem}.{n}.vmasm.tmp", f"{stem}.{n}.vmasm")
    if a.dynamic:
        src = [f"# {what}, {'sequence length' if var == 'S' else 'batch'} {var} in [{lo}, {hi}], {a.dtype}", f"dim {var} in [{lo}, {hi}]"]
    else:
        src = [f"# {what}, {'length ' + str(size) if a.model == 'encoder' else 'batch 1'}, {a.dtype}"]
    src += head + lines
    if a.onnx:
        # the weights rounded to DTYPE, as the .vmasm has them
        args = dict(opset_version=17, do_constant_folding=True, input_names=["x"], output_names=["y"])
        if a.dynamic:
            args["dynamic_axes"] = {"x": {dyn_axis: var}, "y": {dyn_axis: var}}
        with torch.no_grad():
            try:   # the TorchScript exporter, which keeps opset 17 (newer PyTorch defaults to dynamo's)
                torch.onnx.export(model_t, (x.to(dev, tdt),), stem + ".onnx.tmp", dynamo=False, **args)
            except TypeError:   # a PyTorch without the dynamo argument
                torch.onnx.export(model_t, (x.to(dev, tdt),), stem + ".onnx.tmp", **args)
        os.replace(stem + ".onnx.tmp", stem + ".onnx")
    with open(stem + ".vmasm.tmp", "w") as f:
        f.write("\n".join(src) + "\n")
    os.replace(stem + ".vmasm.tmp", stem + ".vmasm")
    print(f"{stem}.vmasm: {len(lines) - 3} ops, {len(consts)} weights; PyTorch output on {dev}")


if __name__ == "__main__":
    main()
