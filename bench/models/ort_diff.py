#!/usr/bin/env python3
"""ort_diff.py: where does Rill's run of an ONNX file first leave onnxruntime's?

  python3 bench/models/ort_diff.py RILL MODEL.onnx IN.npy... [--device cuda] [--opt -O0]
                                 [--ints FILTER] [--feed NAME,...] [--out report.txt]

Every float value a node makes (shape arithmetic aside; int64 values too of
the nodes whose name holds FILTER) becomes a graph output; onnxruntime (CPU)
and `rill run` compute them, some hundreds at a time, and each is compared
in graph order: the largest and mean difference over the largest magnitude,
places finite on one side only, sizes that differ, int64 mismatches. The
first values off are printed with the two before each; the whole list goes
to --out.

--feed NAME,... cuts the model: the values of those nodes (or tensors) are
taken from onnxruntime's run of the whole file and given to both sides as
inputs, so what lies upstream of them (a top-k over near-tied scores, say)
no longer makes the two sides differ. Needs the onnx and onnxruntime
packages.
"""
import argparse, os, subprocess, sys, tempfile, time

import numpy as np
import onnx
from onnx import helper, shape_inference

FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)
SKIP = {"Shape", "Constant", "ConstantOfShape", "Cast", "Unsqueeze", "Squeeze", "Identity"}
CHUNK = 400   # values a run: each is kept alive to the end of its run


def value_types(m):
    inf = shape_inference.infer_shapes(m)
    return {v.name: v.type.tensor_type.elem_type for v in list(inf.graph.value_info) + list(inf.graph.output)}


def cut(path, inputs, feed, tmp, ort):
    """The model with feed's values as inputs, and the inputs' arrays with theirs added."""
    m = shape_inference.infer_shapes(onnx.load(path))
    by_node = {n.name: n.output[0] for n in m.graph.node}
    feed = [by_node.get(f, f) for f in feed]
    ty = {v.name: v.type.tensor_type.elem_type for v in m.graph.value_info}
    inits = {t.name for t in m.graph.initializer}
    in_names = [i.name for i in m.graph.input if i.name not in inits]
    out_names = [o.name for o in m.graph.output]
    inferred = os.path.join(tmp, "inferred.onnx")
    onnx.save(m, inferred)
    for f in feed:
        if f not in ty: sys.exit(f"ort_diff: no value '{f}' with a known type to feed")
        m.graph.output.append(helper.make_tensor_value_info(f, ty[f], None))
    whole = os.path.join(tmp, "whole.onnx")
    onnx.save(m, whole)
    sess = ort.InferenceSession(whole, providers=["CPUExecutionProvider"])
    vals = sess.run(feed, dict(zip(in_names, inputs)))
    out = os.path.join(tmp, "cut.onnx")
    onnx.utils.extract_model(inferred, out, in_names + feed, out_names, check_model=False)
    mc = onnx.load(out)
    for gi in mc.graph.input:
        if gi.name in feed:
            v = vals[feed.index(gi.name)]
            gi.CopyFrom(helper.make_tensor_value_info(gi.name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    onnx.save(mc, out)
    for f, v in zip(feed, vals): print("fed %s %s %s" % (f, v.dtype, v.shape))
    return out, inputs + list(vals)


def compare(g, e):
    """(text, off) for Rill's value g against onnxruntime's e."""
    if g.shape != e.shape: return "sizes %s against %s" % (g.shape, e.shape), True
    if e.dtype.kind in "iub":
        n = int((g != e).sum())
        return "%d of %d differ %s" % (n, g.size, g.shape), n > 0
    g, e = g.astype(np.float64), e.astype(np.float64)
    fin = np.isfinite(e) & np.isfinite(g)
    nf = int((np.isfinite(e) != np.isfinite(g)).sum())
    sc = (np.abs(e[fin]).max() if fin.any() else 0.0) or 1.0
    d = np.abs(g[fin] - e[fin]) if fin.any() else np.zeros(1)
    rel = float(d.max() / sc)
    return "max %.1e mean %.1e finite-on-one-side %d %s" % (rel, float(d.mean() / sc), nf, g.shape), rel > args.tol or nf > 0


ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("rill")
ap.add_argument("model")
ap.add_argument("inputs", nargs="*", help="the graph inputs' values (.npy), in order")
ap.add_argument("--device", default="cuda")
ap.add_argument("--opt", default="-O0", choices=["-O0", "-O1"])
ap.add_argument("--ints", default="", help="also compare the int64 values of nodes whose name holds this")
ap.add_argument("--feed", default="", help="cut the model at these nodes' (or tensors') values, taken from onnxruntime")
ap.add_argument("--tol", type=float, default=2e-2, help="a float value is off past this difference over its largest magnitude")
ap.add_argument("--out", default="", help="the whole list")
ap.add_argument("--show", type=int, default=12, help="how many of the first values off are printed")
args = ap.parse_args()

import onnxruntime as ort
ort.set_default_logger_severity(3)
tmp = tempfile.mkdtemp(prefix="ort_diff-")
inputs = [np.load(f) for f in args.inputs]
path = args.model
if args.feed: path, inputs = cut(path, inputs, args.feed.split(","), tmp, ort)
m = onnx.load(path)
ty = value_types(m)
base = list(m.graph.output)
have = {o.name for o in base}
extra = []
for n in m.graph.node:
    if n.op_type in SKIP: continue
    for o in n.output:
        t = ty.get(o)
        if o and o not in have and (t in FLOATS or (args.ints and args.ints in n.name and t == onnx.TensorProto.INT64)):
            extra.append((o, n.op_type, n.name))
            have.add(o)
print("%d nodes, %d values compared" % (len(m.graph.node), len(extra)))
in_files = []
for i, x in enumerate(inputs):
    in_files.append(os.path.join(tmp, "in%d.npy" % i))
    np.save(in_files[-1], x)
rows, off = [], []
for c0 in range(0, max(len(extra), 1), CHUNK):
    del m.graph.output[:]
    m.graph.output.extend(base)
    part = extra[c0:c0 + CHUNK]
    for o, _, _ in part: m.graph.output.append(helper.make_tensor_value_info(o, ty[o], None))
    p = os.path.join(tmp, "part.onnx")
    onnx.save(m, p)
    t = time.time()
    sess = ort.InferenceSession(p, providers=["CPUExecutionProvider"])
    ref = sess.run(None, {k.name: x for k, x in zip(sess.get_inputs(), inputs)})
    t_ort = time.time() - t
    outs = [os.path.join(tmp, "out%d.npy" % i) for i in range(len(m.graph.output))]
    t = time.time()
    r = subprocess.run([args.rill, "run", p, "--device=" + args.device, args.opt] + ["--input=@" + f for f in in_files]
                       + ["--output=@" + f for f in outs], capture_output=True, text=True)
    print("values %d to %d: onnxruntime %.1f s, rill %.1f s (exit %d)" % (c0, c0 + len(part), t_ort, time.time() - t, r.returncode))
    if r.returncode: sys.exit("ort_diff: rill run failed: " + r.stderr.strip()[-600:])
    first = 0 if c0 == 0 else len(base)   # the graph's own outputs once
    for i in range(first, len(outs)):
        name, kind = (part[i - len(base)][2], part[i - len(base)][1]) if i >= len(base) else (m.graph.output[i].name, "output")
        text, bad = compare(np.load(outs[i]), np.asarray(ref[i]))
        if bad and i >= len(base): off.append(len(rows))
        rows.append("%4d %-16s %-56s %s" % (len(rows), kind, name[-56:], text))
if args.out:
    with open(args.out, "w") as f: f.write("\n".join(rows) + "\n")
shown = set()
for i in off[:args.show]:
    for j in range(max(0, i - 2), i + 1):
        if j not in shown: print(rows[j]); shown.add(j)
print("%d of %d values off (past %.0e)" % (len(off), len(rows), args.tol))
