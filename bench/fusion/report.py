#!/usr/bin/env python3
"""report.py OUT: the fusion benchmark's ratios from run.sh's JSON files.

Rill's copy is its own elementwise kernel (op copy, 16-byte vectors);
PyTorch's (Tensor.copy_) is measured in the same run, and each ratio is
given against both."""
import json
import os
import sys

out = sys.argv[1]


def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def op_us(b, op):
    """Device time of one call of `op` (rill bench's per-op figures), or the run's median."""
    if not b:
        return None
    for o in b.get("ops", []):
        if o["op"] == op:
            return o["us_per_call"]
    return b["median_ms"] * 1000


n = int(open(os.path.join(out, "n")).read())
mb = n * 4 / 1e6
copy, sig, sig0, adam, adam0 = (load(f + ".json") for f in ("copy", "sigmoid", "sigmoid-O0", "adam", "adam-O0"))
t = load("torch.json")
rows = []
tc = op_us(copy, "copy")
if tc:
    copy_bw = 2 * mb / tc
    rows.append(f"device copy: {tc:.1f} us, {copy_bw:.2f} TB/s (read+write)")
    ts = op_us(sig, "fused")
    if ts:
        bw = 4 * mb / ts
        rows.append(f"sigmoid(x0*x1+x2) -O1: {ts:.1f} us, {bw:.2f} TB/s = {bw / copy_bw:.3f} of copy bandwidth (goal >= 0.95)")
    ts0 = sig0 and sig0["median_ms"] * 1000
    if ts0:
        rows.append(f"sigmoid -O0 (3 kernels), whole run: {ts0:.1f} us; -O1 whole run: {sig['median_ms'] * 1000:.1f} us")
ta = op_us(adam, "fused")
if ta:
    rows.append(f"Adam step -O1 (one kernel): {ta:.1f} us, {7 * mb / ta:.2f} TB/s = {7 * mb / ta / copy_bw:.3f} of copy bandwidth")
if adam0:
    rows.append(f"Adam step -O0, whole run: {adam0['median_ms'] * 1000:.1f} us")
if t:
    rows.append(f"PyTorch {t['torch']} on {t['device']}: copy {t['copy_ms'] * 1000:.1f} us, sigmoid eager {t['sigmoid_eager_ms'] * 1000:.1f} us"
                + (f", compiled {t['sigmoid_compiled_ms'] * 1000:.1f} us" if "sigmoid_compiled_ms" in t else ""))
    for mode in ("fused", "foreach"):
        if ta and f"adam_{mode}_ms" in t:
            tt = t[f"adam_{mode}_ms"] * 1000
            rows.append(f"Adam: PyTorch {mode}=True {tt:.1f} us; Rill / PyTorch = {ta / tt:.3f} (goal <= 1 for fused)")
    tcopy_bw = 2 * mb / (t["copy_ms"] * 1000)
    ts = op_us(sig, "fused")
    if ts:
        rows.append(f"sigmoid -O1: {4 * mb / ts / tcopy_bw:.3f} of PyTorch's copy bandwidth ({tcopy_bw:.2f} TB/s)")
    if "sigmoid_compiled_ms" in t:
        rows.append(f"torch.compile sigmoid: {4 * mb / (t['sigmoid_compiled_ms'] * 1000) / tcopy_bw:.3f} of PyTorch's copy bandwidth")
else:
    rows.append("PyTorch figures missing (torch.json)")
print("\n".join(rows))
