#!/usr/bin/env python3
"""counts.py RILL FILE.vmasm...: ops a run issues, before and after -O1.

For each program, the `invoke` instructions of every function in `rill dis`
at -O0 and -O1 (static counts: a loop body counts once) and, at -O1, how
many of them are fused groups, with the op table's entries by name.
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

rill = sys.argv[1]


def dis(path, level):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "m.vmbc")
        subprocess.run([rill, "asm", level, path, "-o", out], check=True, capture_output=True)
        return subprocess.run([rill, "dis", out], check=True, capture_output=True, text=True).stdout


def count(text):
    ops = {}
    for m in re.finditer(r"^op \$(\d+) = (\w+)\(", text, re.M):
        ops[m.group(1)] = m.group(2)
    c = collections.Counter(ops[m.group(1)] for m in re.finditer(r"^\s+invoke \$(\d+),", text, re.M))
    return sum(c.values()), c


print(f"{'program':40} {'-O0 ops':>8} {'-O1 ops':>8} {'fused':>6}  -O1 by name")
for path in sys.argv[2:]:
    try:
        n0, _ = count(dis(path, "-O0"))
        n1, c1 = count(dis(path, "-O1"))
    except subprocess.CalledProcessError as e:
        print(f"{path:40} failed: {e.stderr.strip()[:120]}")
        continue
    top = ", ".join(f"{k} {v}" for k, v in c1.most_common(6))
    print(f"{os.path.relpath(path)[-40:]:40} {n0:8} {n1:8} {c1.get('fused', 0):6}  {top}")
