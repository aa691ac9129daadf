#!/usr/bin/env python3
"""torch_ref.py N: PyTorch's figures for the fusion benchmark, as JSON.

Device time per call (CUDA events around ITER calls, median of 5 rounds) of a
device copy, sigmoid(x0 * x1 + x2) eager and under torch.compile, and one
Adam step with fused=True and foreach=True (the same hyperparameters as
make.py's program).
"""
import json
import sys

import torch

n = int(sys.argv[1])
ITER = 20


def timed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(ITER):
            fn()
        b.record()
        torch.cuda.synchronize()
        rounds.append(a.elapsed_time(b) / ITER)
    return sorted(rounds)[2]


dev = "cuda"
x0, x1, x2 = (torch.rand(n, device=dev) * 2 - 1 for _ in range(3))
y = torch.empty_like(x0)
res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "n": n}
res["copy_ms"] = timed(lambda: y.copy_(x0))
res["sigmoid_eager_ms"] = timed(lambda: torch.sigmoid(x0 * x1 + x2))
try:
    f = torch.compile(lambda a, b, c: torch.sigmoid(a * b + c))
    res["sigmoid_compiled_ms"] = timed(lambda: f(x0, x1, x2))
except Exception as e:  # no compiler toolchain: say so
    res["sigmoid_compiled_error"] = str(e)[:200]
del x0, x1, x2, y
for mode in ("fused", "foreach"):
    p = torch.nn.Parameter(torch.rand(n, device=dev))
    p.grad = torch.rand(n, device=dev)
    opt = torch.optim.Adam([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **{mode: True})
    res[f"adam_{mode}_ms"] = timed(opt.step)
    del p, opt
    torch.cuda.empty_cache()
print(json.dumps(res))
