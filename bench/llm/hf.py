#!/usr/bin/env python3
"""hf.py: the Hugging Face side of the LLM benchmark (bench/llm/run.sh), on
the GPU machine (torch, transformers, numpy).

  hf.py make OUT MODEL [--dtype f32|f16|bf16] [--seed S]
      a random-weight checkpoint folder written by save_pretrained
      (safetensors): MODEL llama1b (hidden 2048, 16 layers, 32 heads, 8 KV
      heads, intermediate 8192, vocabulary 32000), llama4k (the tensor-parallel
      benchmark's: hidden 4096, 16 layers, 32 heads, 8 KV heads, intermediate
      14336, vocabulary 32000) or gpt2 (GPT-2 small).
      The same seed gives the same weights in every dtype.
  hf.py ids OUT.npy ROWS COLS VOCAB [--seed S]     random prompt ids, i64
  hf.py greedy DIR IDS.npy N OUT.npy               generate(do_sample=False) in f32:
      the N new ids a row, i64[B,N], rows that ended padded with the pad id
  hf.py logits DIR IDS.npy OUT.npy                 the last position's logits, f32[B,V] (f32)
  hf.py time DIR OUT.json --batch B --prompt P --new N [--iters K]
      generate's time for N new tokens and for 1 (decode tokens/s from the
      difference), eager and with a static cache and
      torch.compile(mode="reduce-overhead"); in the checkpoint's dtype
  hf.py prefill DIR OUT.json --prompt P [--iters K]
      one forward over a prompt of P tokens (batch 1, no cache), eager and
      under torch.compile
  hf.py copybw OUT.json                            device-to-device copy bandwidth (GB/s)
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def make(out, model, dtype, seed):
    import transformers as tf
    torch.manual_seed(seed)
    llama = {"llama1b": (2048, 8192, 0.05), "llama4k": (4096, 14336, 0.02)}  # hidden, intermediate, init range
    if model in llama:
        hidden, inter, init = llama[model]
        cfg = tf.LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=16, num_attention_heads=32,
                             num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096, rope_theta=500000.0,
                             rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=2,
                             initializer_range=init)
        cls = tf.LlamaForCausalLM
    elif model == "gpt2":
        cfg = tf.GPT2Config(pad_token_id=50256)
        cls = tf.GPT2LMHeadModel
    else:
        raise SystemExit("unknown model " + model)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        m = cls(cfg).float()
    m.to(DTYPES[dtype]).save_pretrained(out, safe_serialization=True)


def load(d, dtype=None):
    import transformers as tf
    kw = {"torch_dtype": DTYPES[dtype]} if dtype else {"torch_dtype": "auto"}
    return tf.AutoModelForCausalLM.from_pretrained(d, **kw).cuda().eval()


@torch.no_grad()
def greedy(d, ids, n):
    m = load(d, "f32")
    x = torch.from_numpy(ids).cuda()
    out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                     pad_token_id=m.generation_config.pad_token_id)
    new = out[:, ids.shape[1]:].cpu().numpy()
    pad = m.generation_config.pad_token_id
    if pad is None:
        pad = m.generation_config.eos_token_id
        pad = pad[0] if isinstance(pad, list) else pad
    res = np.full((ids.shape[0], n), pad, np.int64)
    res[:, :new.shape[1]] = new
    return res


@torch.no_grad()
def logits(d, ids):
    m = load(d, "f32")
    return m(torch.from_numpy(ids).cuda()).logits[:, -1].float().cpu().numpy()


def timed(fn, iters):
    fn()
    fn()
    ts = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


@torch.no_grad()
def time_hf(d, batch, prompt, new, iters):
    m = load(d)
    cfg = m.config
    x = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
    mask = torch.ones_like(x)
    res = {"batch": batch, "prompt": prompt, "new": new, "dtype": str(m.dtype)}

    def gen(n, **kw):
        return lambda: m.generate(x, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  pad_token_id=cfg.eos_token_id, **kw)

    tn = timed(gen(new), iters)
    t1 = timed(gen(1), iters)
    res["eager"] = {"generate_ms": tn, "first_token_ms": t1, "decode_ms_per_step": (tn - t1) / (new - 1),
                    "decode_tokens_per_s": batch * (new - 1) / ((tn - t1) / 1e3)}
    try:
        res["compiled"] = compiled_decode(m, x, new, iters)
    except Exception as e:  # a model or version without a static cache: said, not fatal
        res["compiled"] = {"error": "%s: %s" % (type(e).__name__, str(e)[:300])}
    return res


def static_cache(m, batch, length):
    import transformers as tf
    for kw in ({"config": m.config, "max_cache_len": length},
               {"config": m.config, "max_batch_size": batch, "max_cache_len": length, "device": "cuda", "dtype": m.dtype}):
        try:
            return tf.StaticCache(**kw)
        except TypeError:
            continue
    raise RuntimeError("no StaticCache signature fits this transformers")


@torch.no_grad()
def compiled_decode(m, x, new, iters):
    """The greedy decode loop as gpt-fast and transformers' docs write it: a
    static cache, the prompt run once eagerly, then each step one call of the
    model compiled with mode="reduce-overhead" (a CUDA graph replay) on one
    token; generate() with a compiled forward stops with "accessing tensor
    output of CUDAGraphs that has been overwritten" on transformers 5."""
    batch, prompt = x.shape
    step = torch.compile(lambda tok, pos, cache: m(input_ids=tok, cache_position=pos, past_key_values=cache,
                                                    position_ids=pos.expand(batch, 1), use_cache=True).logits[:, -1],
                         mode="reduce-overhead", fullgraph=True)

    # one cache for every run (reset between them): a new cache object is a new
    # guard for the compiled step, so each run would compile again
    cache = static_cache(m, batch, prompt + max(new, 4) + 1)

    def run(n):
        cache.reset()
        logits = m(input_ids=x, cache_position=torch.arange(prompt, device="cuda"), past_key_values=cache,
                   use_cache=True).logits[:, -1]
        tok = logits.argmax(-1, keepdim=True)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for i in range(n):
            torch.compiler.cudagraph_mark_step_begin()
            tok = step(tok, torch.tensor([prompt + i], device="cuda"), cache).argmax(-1, keepdim=True).clone()
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3

    run(4)  # compiles and captures
    run(4)
    ts = sorted(run(new) for _ in range(max(1, iters // 3)))
    ms = ts[len(ts) // 2] / new
    return {"decode_ms_per_step": ms, "decode_tokens_per_s": batch / (ms / 1e3), "loop": "static cache, compiled step"}


@torch.no_grad()
def prefill_hf(d, prompt, iters):
    m = load(d)
    x = torch.randint(0, m.config.vocab_size, (1, prompt), device="cuda")
    res = {"prompt": prompt, "eager_ms": timed(lambda: m(x, use_cache=False), iters)}
    c = torch.compile(m.forward)
    res["compiled_ms"] = timed(lambda: c(x, use_cache=False), iters)
    return res


def copybw():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = timed(lambda: b.copy_(a), 20)
    return {"copy_GBps": 2 * n / (t / 1e3) / 1e9}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("args", nargs="*")
    p.add_argument("--dtype", default="f32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    if a.cmd == "make":
        make(a.args[0], a.args[1], a.dtype, a.seed)
    elif a.cmd == "ids":
        rows, cols, vocab = (int(v) for v in a.args[1:4])
        np.save(a.args[0], np.random.default_rng(a.seed).integers(3, vocab, (rows, cols)).astype(np.int64))
    elif a.cmd == "greedy":
        np.save(a.args[3], greedy(a.args[0], np.load(a.args[1]), int(a.args[2])))
    elif a.cmd == "logits":
        np.save(a.args[2], logits(a.args[0], np.load(a.args[1])))
    elif a.cmd == "time":
        json.dump(time_hf(a.args[0], a.batch, a.prompt, a.new, a.iters), open(a.args[1], "w"), indent=1)
    elif a.cmd == "prefill":
        json.dump(prefill_hf(a.args[0], a.prompt, a.iters), open(a.args[1], "w"), indent=1)
    elif a.cmd == "copybw":
        json.dump(copybw(), open(a.args[0], "w"))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
