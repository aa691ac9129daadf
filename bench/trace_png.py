#!/usr/bin/env python3
"""Renders a Rill trace (rill run|bench --trace=FILE.json) as a PNG timeline.

    python3 bench/trace_png.py trace.json timeline.png [--run N] [--width 12]

One row per track (the host's dispatch, then each stream), a bar per op
coloured by op, and an arrow per honoured event wait. --run picks one run
of a bench trace by its place in time (0: the first; default: the last),
since a whole bench trace is too long to read. Needs matplotlib.
"""
import argparse
import json
import sys


def load(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    slices = [e for e in events if e.get("ph") == "X"]
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = e
    return names, slices, [(v["s"], v["f"]) for v in flows.values() if "s" in v and "f" in v]


def runs_of(slices):
    """The device slices of each run, in time order: by the run number Rill
    writes in each slice's args, or (older traces) split at gaps longer than
    any op."""
    ops = sorted((e for e in slices if e["tid"] > 0), key=lambda e: e["ts"])
    if not ops:
        return []
    if all("run" in e.get("args", {}) for e in ops):
        by = {}
        for e in ops:
            by.setdefault(e["args"]["run"], []).append(e)
        return sorted(by.values(), key=lambda r: r[0]["ts"])
    longest = max(e["dur"] for e in ops)
    runs, cur, end = [], [ops[0]], ops[0]["ts"] + ops[0]["dur"]
    for e in ops[1:]:
        if e["ts"] > end + max(longest, 1.0):
            runs.append(cur)
            cur = []
        cur.append(e)
        end = max(end, e["ts"] + e["dur"])
    runs.append(cur)
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("png")
    ap.add_argument("--run", type=int, default=-1)
    ap.add_argument("--width", type=float, default=12.0)
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("trace_png.py needs matplotlib (Debian: apt-get install python3-matplotlib)")
    try:
        names, slices, flows = load(a.trace)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{a.trace}: not a Rill trace: {e}")
    runs = runs_of(slices)
    if not runs:
        sys.exit(f"{a.trace}: no ops in the trace")
    if not -len(runs) <= a.run < len(runs):
        sys.exit(f"--run {a.run}: the trace has {len(runs)} runs")
    run = runs[a.run]
    t0 = min(e["ts"] for e in run)
    t1 = max(e["ts"] + e["dur"] for e in run)
    # The host's dispatch of this run: by run number, or what overlaps its device span, from a little before.
    if "run" in run[0].get("args", {}):
        shown = run + [e for e in slices if e["tid"] == 0 and e["args"].get("run") == run[0]["args"]["run"]]
    else:
        lo = t0 - (t1 - t0) * 0.5
        shown = run + [e for e in slices if e["tid"] == 0 and lo <= e["ts"] <= t1]
    t0 = min(e["ts"] for e in shown)
    t1 = max(e["ts"] + e["dur"] for e in shown)
    tids = sorted({e["tid"] for e in shown})
    row = {tid: i for i, tid in enumerate(reversed(tids))}
    kinds = sorted({e["name"] for e in shown})
    cmap = plt.get_cmap("tab20")
    colour = {k: cmap(i % 20) for i, k in enumerate(kinds)}
    fig, ax = plt.subplots(figsize=(a.width, 0.6 * len(tids) + 1.5))
    for e in shown:
        ax.broken_barh([(e["ts"] - t0, max(e["dur"], (t1 - t0) * 0.002))], (row[e["tid"]] - 0.4, 0.8),
                       facecolors=colour[e["name"]], edgecolor="black", linewidth=0.3)
    for s, f in flows:
        if f["tid"] in row and s["tid"] in row and t0 <= f["ts"] <= t1:
            ax.annotate("", xy=(f["ts"] - t0, row[f["tid"]]), xytext=(s["ts"] - t0, row[s["tid"]]),
                        arrowprops=dict(arrowstyle="->", color="black", lw=0.8))
    ax.set_yticks(range(len(tids)))
    ax.set_yticklabels([names.get(t, f"track {t}") for t in reversed(tids)])
    ax.set_xlabel("microseconds from the run's first dispatch")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=colour[k]) for k in kinds]
    ax.legend(handles, kinds, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    ax.set_title(f"{a.trace}: run {a.run if a.run >= 0 else len(runs) + a.run} of {len(runs)}")
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)


if __name__ == "__main__":
    main()
