#!/usr/bin/env python3
"""The Python side of bench/dynamic/run.sh.

    python3 bench/dynamic/helper.py torch --config L,H,HEADS,I --dtype f16 --lengths 1,8,... --iters N -o OUT.json [--no-compile]
    python3 bench/dynamic/helper.py table OUTDIR --lengths 1,8,... [--cnns M,... --batches 1,8,32] [--graph off,on]

`torch` times PyTorch on the encoder of bench/models/convert.py (same
construction and seed, batch 1, on CUDA) at each length, in one process:
eager; torch.compile(dynamic=True) (inductor, default mode: one compilation
for all lengths, its time apart); and the replay of a CUDA graph captured per
length. Each run is timed on the host from launch to synchronisation, as
rill bench times a run; medians and minima in ms go to OUT.json.

`table` reads the files run.sh wrote (ENC.N.VARIANT.GRAPH.bench.R.json from
rill bench, torch.R.json from `torch`, CNN_dyn.N.VARIANT.GRAPH.bench.R.json)
and prints one table: per length the median over rounds of each round's
median, with the range, and the ratios against the goals: the dynamic
module within 5% of the static module assembled for that length (like
with like: interpreted against interpreted, graph against graph), and
faster than PyTorch eager, torch.compile(dynamic=True) and CUDA-graph
replay (the dynamic module's faster mode against each); a miss is marked
with '!' and listed last (the exit status is 0 all the same: run.sh fails on
wrong results and failed runs, and reports the goals).
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time


def ints(spec):
    return [int(t) for t in spec.split(",") if t]


def time_torch(a):
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
    import convert
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    layers, hidden, heads, inter = a.config
    dt = {"f32": torch.float32, "f16": torch.float16}[a.dtype]
    model = convert.Encoder(layers, hidden, heads, inter).eval().to("cuda", dt)
    g = torch.Generator().manual_seed(a.seed + 1)
    xs = {n: (torch.rand(1, n, hidden, generator=g) * 2 - 1).to("cuda", dt) for n in a.lengths}

    def runs(step):
        return convert.time_ms(step, a.iters)

    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "lengths": {}}
    with torch.no_grad():
        for n in a.lengths:
            r = out["lengths"][str(n)] = {}
            x = xs[n]
            r["eager"] = runs(lambda: model(x))
            r["cuda_graph"] = convert.cuda_graph_ms(model, x, a.iters)
        if a.compile:
            cm = torch.compile(model, dynamic=True)
            t0 = time.perf_counter()
            for n in a.lengths:   # every length once: the compilations (a size-1 length may get its own)
                cm(xs[n])
            torch.cuda.synchronize()
            out["compile_s"] = time.perf_counter() - t0
            for n in a.lengths:
                x = xs[n]
                out["lengths"][str(n)]["torch_compile"] = runs(lambda: cm(x))
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, a.out)


def rounds(paths, get):
    """The median over rounds of each round's median, and the range; None when none."""
    v = []
    for p in paths:
        try:
            with open(p) as f:
                x = get(json.load(f))
            if isinstance(x, (int, float)):
                v.append(float(x))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return (statistics.median(v), min(v), max(v)) if v else None


def fmt(r):
    return "-" if r is None else f"{r[0]:.3f}[{r[1]:.3f}-{r[2]:.3f}]"


def ratio(x, y):
    return None if x is None or y is None else x[0] / y[0]


def rfmt(r, goal, mark):
    if r is None:
        return "-", True   # a missing figure: run.sh reports the failed run itself
    ok = r <= goal if mark == "<=" else r < goal
    return f"{r:.3f}{'' if ok else '!'}", ok


def judge(row, misses, r, goal, mark, what):
    """The ratio r against its goal into the row; a miss named `what` into misses."""
    s, ok = rfmt(r, goal, mark)
    row.append(s)
    if not ok:
        misses.append(f"{what} {s}")


def print_table(cols, rows):
    widths = [max(len(r[i]) for r in rows + [cols]) for i in range(len(cols))]
    for r in [cols] + rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def table(a):
    d = a.dir
    enc = a.stem
    misses = []
    how = "tuned (rill tune, then rill asm --profile), " if a.tuned else ""
    print(f"Transformer encoder ({a.what}), batch 1, {a.dtype}, one dynamic module (S in [1, 512]), {how}on {a.device}; ms, "
          f"median over rounds of each process's median [range]")
    print("goals: dyn/static <= 1.050 at every length (per graph mode); dyn/eager, dyn/compile, dyn/cudagraph < 1.000 "
          "(dyn: the dynamic module's faster mode); '!' marks a miss")
    cols = ["S"] + [f"dyn+{g}" for g in a.graph] + [f"static+{g}" for g in a.graph] + ["eager", "compile", "cudagraph"] + \
           [f"dyn/st+{g}" for g in a.graph] + ["dyn/eager", "dyn/compile", "dyn/cgraph"]
    rows = []
    for n in a.lengths:
        dyn = {g: rounds(glob.glob(f"{d}/{enc}.{n}.dyn.{g}.bench.*.json"), lambda j: j["median_ms"]) for g in a.graph}
        st = {g: rounds(glob.glob(f"{d}/{enc}.{n}.static.{g}.bench.*.json"), lambda j: j["median_ms"]) for g in a.graph}
        tor = {k: rounds(glob.glob(f"{d}/torch.*.json"), lambda j, k=k: j["lengths"][str(n)][k]["median_ms"])
               for k in ("eager", "torch_compile", "cuda_graph")}
        best = min((v for v in dyn.values() if v), key=lambda v: v[0], default=None)
        row = [str(n)] + [fmt(dyn[g]) for g in a.graph] + [fmt(st[g]) for g in a.graph] + \
              [fmt(tor[k]) for k in ("eager", "torch_compile", "cuda_graph")]
        for g in a.graph:
            judge(row, misses, ratio(dyn[g], st[g]), 1.05, "<=", f"S={n}: dyn+{g}/static+{g}")
        for k in ("eager", "torch_compile", "cuda_graph"):
            judge(row, misses, ratio(best, tor[k]), 1.0, "<", f"S={n}: dyn/{k}")
        rows.append(row)
    print_table(cols, rows)
    try:
        with open(glob.glob(f"{d}/torch.1.json")[0]) as f:
            t = json.load(f)
        print(f"(PyTorch {t['torch']} on {t['device']}; torch.compile(dynamic=True) compiled in {t.get('compile_s', float('nan')):.1f} s)")
    except (IndexError, OSError, ValueError, KeyError):
        print("(no PyTorch timings)")
    for m in a.cnns:
        print(f"{m} {a.dtype}, symbolic batch B in [1, 32] against static modules per batch; ms")
        cols = ["B"] + [f"dyn+{g}" for g in a.graph] + [f"static+{g}" for g in a.graph] + [f"dyn/st+{g}" for g in a.graph]
        rows = []
        for b in a.batches:
            stem = f"{d}/{m}_{a.dtype}_dyn.{b}"
            dyn = {g: rounds(glob.glob(f"{stem}.dyn.{g}.bench.*.json"), lambda j: j["median_ms"]) for g in a.graph}
            st = {g: rounds(glob.glob(f"{stem}.static.{g}.bench.*.json"), lambda j: j["median_ms"]) for g in a.graph}
            row = [str(b)] + [fmt(dyn[g]) for g in a.graph] + [fmt(st[g]) for g in a.graph]
            for g in a.graph:
                judge(row, misses, ratio(dyn[g], st[g]), 1.05, "<=", f"{m} B={b}: dyn+{g}/static+{g}")
            rows.append(row)
        print_table(cols, rows)
    if misses:
        print(f"goals missed ({len(misses)}): " + "; ".join(misses))
    else:
        print("goals met everywhere measured")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torch")
    t.add_argument("--config", type=ints, default=[12, 768, 12, 3072])
    t.add_argument("--dtype", default="f16")
    t.add_argument("--lengths", type=ints, required=True)
    t.add_argument("--iters", type=int, default=200)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--no-compile", dest="compile", action="store_false")
    t.add_argument("-o", "--out", required=True)
    b = sub.add_parser("table")
    b.add_argument("dir")
    b.add_argument("--stem", required=True, help="the encoder's files' stem in DIR (encoder_f16_dyn)")
    b.add_argument("--what", default="BERT-base shapes")
    b.add_argument("--dtype", default="f16")
    b.add_argument("--device", default="cuda")
    b.add_argument("--lengths", type=ints, required=True)
    b.add_argument("--cnns", type=lambda s: [t for t in s.split(",") if t], default=[])
    b.add_argument("--batches", type=ints, default=[1, 8, 32])
    b.add_argument("--graph", type=lambda s: [t for t in s.split(",") if t], default=["off", "on"])
    b.add_argument("--tuned", action="store_true", help="the encoder's modules were tuned (rill tune, rill asm --profile)")
    a = ap.parse_args()
    if a.cmd == "torch":
        time_torch(a)
        return 0
    return table(a)


if __name__ == "__main__":
    sys.exit(main())
