#!/usr/bin/env python3
"""PyTorch's device memory for a torchvision model, to set beside
`rill bench`'s (bench/memory/run.sh): torch.cuda.max_memory_allocated over
loading the model and running it (eager, no_grad), and over capturing and
replaying a CUDA graph of it; weights as convert.py makes them (random,
torchvision's initialisation), so the bytes are the same.

    python3 bench/memory/torch_memory.py MODEL DTYPE BATCH   (prints one JSON line)
"""
import json
import sys

import torch
import torchvision

name, dtype, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
dt = {"f32": torch.float32, "f16": torch.float16}[dtype]
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
kw = {"aux_logits": False, "init_weights": True} if name in ("inception_v3", "googlenet") else {}
size = 299 if name == "inception_v3" else 224
torch.cuda.init()
torch.cuda.reset_peak_memory_stats()
model = getattr(torchvision.models, name)(weights=None, **kw).eval().to("cuda", dt)
weights = torch.cuda.memory_allocated()
x = torch.randn(batch, 3, size, size, device="cuda", dtype=dt)
with torch.no_grad():
    for _ in range(3):
        model(x)
torch.cuda.synchronize()
eager_peak = torch.cuda.max_memory_allocated()
torch.cuda.reset_peak_memory_stats()
g = torch.cuda.CUDAGraph()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.no_grad(), torch.cuda.stream(s):
    for _ in range(3):
        model(x)
torch.cuda.current_stream().wait_stream(s)
with torch.no_grad(), torch.cuda.graph(g):
    y = model(x)
for _ in range(3):
    g.replay()
torch.cuda.synchronize()
print(json.dumps({"model": name, "dtype": dtype, "batch": batch, "weights": weights, "eager_peak": eager_peak,
                  "graph_peak": torch.cuda.max_memory_allocated(), "graph_reserved": torch.cuda.memory_reserved()}))
