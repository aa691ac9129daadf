"""The transposes' share of a traced run's device time, from rill's trace.

    python3 bench/layout/transposes.py TRACE.json [LABEL]

TRACE.json is what `rill bench --trace=FILE` writes (Chrome trace JSON: a
slice of category "op" per op on its device stream, named by the op, its
duration the device time between the events around it). Prints, per run
(the trace's runs averaged): device time, the count and time of
`transpose` ops and their share, `batch_norm`, `fused` and `conv2d`
beside them, and the five ops that took the most time.
"""
import collections
import json
import sys


def main():
    path = sys.argv[1]
    label = sys.argv[2] if len(sys.argv) > 2 else path
    ev = json.load(open(path))["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "op" and e.get("ph") == "X"]
    runs = len({e.get("args", {}).get("run", 0) for e in ops}) or 1
    t = collections.defaultdict(float)
    n = collections.defaultdict(int)
    for e in ops:
        t[e["name"]] += e["dur"]
        n[e["name"]] += 1
    total = sum(t.values()) / runs
    tr = t.get("transpose", 0.0) / runs
    top = sorted(t.items(), key=lambda kv: -kv[1])[:5]
    print(f"{label}: device {total / 1000:.2f} ms a run; transpose {n.get('transpose', 0) // runs} ops {tr / 1000:.2f} ms "
          f"({100 * tr / total if total else 0:.1f}%); batch_norm {n.get('batch_norm', 0) // runs} ops {t.get('batch_norm', 0) / runs / 1000:.2f} ms; "
          f"fused {n.get('fused', 0) // runs} ops {t.get('fused', 0) / runs / 1000:.2f} ms; conv2d {n.get('conv2d', 0) // runs} ops "
          f"{t.get('conv2d', 0) / runs / 1000:.2f} ms; top: " + ", ".join(f"{k} {v / runs / 1000:.2f}" for k, v in top))


if __name__ == "__main__":
    main()
