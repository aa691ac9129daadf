#!/usr/bin/env python3
"""tp_torch.py: PyTorch's tensor parallel on a Hugging Face Llama checkpoint,
the baseline of bench/llm/tp.sh. Run under torchrun, one process per GPU:

  torchrun --nproc-per-node=N tp_torch.py DIR OUT.json [--prompt P] [--new K] [--iters I]

The model is split with torch.distributed.tensor.parallel (parallelize_module:
column-parallel q/k/v, gate and up, row-parallel o and down, as Megatron and
the PyTorch tutorial write it; transformers' own tp_plan="auto" where it
loads). Measured, batch 1, rank 0 writes OUT.json:
  decode: the greedy loop over a static cache, each step one forward of one
          token, eager (and compiled with mode="reduce-overhead" where that
          works with DTensor: said when not), ms a step, median of ITERS;
  prefill: one forward over PROMPT tokens without a cache.
N = 1 runs the same code unsplit.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf import static_cache  # noqa: E402  (bench/llm/hf.py, beside this file)


def split(m, mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
    for layer in m.model.layers:
        parallelize_module(layer, mesh, plan)
        a = layer.self_attn  # heads per rank, for the versions that reshape by them
        for k in ("num_heads", "num_key_value_heads"):
            if hasattr(a, k):
                setattr(a, k, getattr(a, k) // mesh.size())


def load(d, n):
    import transformers as tf
    if n > 1:
        try:
            return tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float16, tp_plan="auto").eval(), "tp_plan=auto"
        except Exception as e:  # older or newer transformers: the plan by hand
            if dist.get_rank() == 0:
                print("tp_plan=auto: %s: %s; parallelize_module instead" % (type(e).__name__, str(e)[:200]))
    m = tf.AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float16).cuda().eval()
    if n > 1:
        from torch.distributed.device_mesh import init_device_mesh
        split(m, init_device_mesh("cuda", (n,)))
        return m, "parallelize_module"
    return m, "one GPU"


@torch.no_grad()
def decode(m, prompt, new, iters, compiled):
    x = torch.randint(0, m.config.vocab_size, (1, prompt), device="cuda")
    dist.broadcast(x, 0) if dist.is_initialized() else None

    def fwd(tok, pos, cache):
        return m(input_ids=tok, cache_position=pos, past_key_values=cache, position_ids=pos.view(1, 1),
                 use_cache=True).logits[:, -1]
    step = torch.compile(fwd, mode="reduce-overhead") if compiled else fwd

    def run(n):
        cache = static_cache(m, 1, prompt + n + 1)
        tok = m(input_ids=x, cache_position=torch.arange(prompt, device="cuda"), past_key_values=cache,
                use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(n):
            if compiled:
                torch.compiler.cudagraph_mark_step_begin()
            tok = step(tok, torch.tensor([prompt + i], device="cuda"), cache).argmax(-1, keepdim=True).clone()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3 / n

    run(4)
    run(4)
    return statistics.median(run(new) for _ in range(iters))


@torch.no_grad()
def prefill(m, prompt, iters):
    x = torch.randint(0, m.config.vocab_size, (1, prompt), device="cuda")
    ts = []
    for i in range(iters + 2):
        torch.cuda.synchronize()
        t = time.perf_counter()
        m(x, use_cache=False)
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts[2:])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("out")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--no-compile", action="store_true", help="eager only")
    a = p.parse_args()
    n = int(os.environ.get("WORLD_SIZE", "1"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if n > 1:
        dist.init_process_group("nccl")
    m, how = load(a.dir, n)
    res = {"gpus": n, "split": how, "prompt": a.prompt, "new": a.new}
    res["decode_ms_eager"] = decode(m, a.prompt, a.new, a.iters, False)
    try:
        if not a.no_compile:
            res["decode_ms_compiled"] = decode(m, a.prompt, a.new, a.iters, True)
    except Exception as e:
        res["decode_compiled_error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    res["prefill512_ms_eager"] = prefill(m, 512, a.iters)
    if not dist.is_initialized() or dist.get_rank() == 0:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        print(json.dumps(res))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
