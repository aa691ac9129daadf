#!/usr/bin/env python3
"""report.py OUTDIR: the table of bench/llm/run.sh from the files it left in
OUTDIR (numpy only). Each goal of the issue beside its figure:
  - greedy tokens equal to Hugging Face generate (f32) for 64 tokens;
  - f16 logits within tolerance of HF's f32 ones (rill run's verdict);
  - decode tokens/s at batch 1, contexts 128 and 2048, against the bandwidth
    bound (bytes of weights and cache read per token over the copy
    bandwidth): at least 85%;
  - tokens/s at batch 1 and 8 against HF generate with a static cache and
    torch.compile(mode="reduce-overhead"): at least 1.3x (eager reported);
  - prefill of 512 tokens: at most 1.0x torch.compile's time;
  - graph mode: launches per generate call, time to first token.
"""
import glob
import json
import os
import struct
import sys

import numpy as np


def js(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def weight_bytes(d):
    """bytes of weights read per decode step: every tensor but the token
    embedding table (unless it is also the head) and GPT-2's positions"""
    cfg = json.load(open(os.path.join(d, "config.json")))
    total, skip = 0, 0
    tied = cfg.get("tie_word_embeddings", cfg["model_type"] == "gpt2")
    for f in glob.glob(os.path.join(d, "*.safetensors")):
        with open(f, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            h = json.loads(fh.read(n))
        for k, e in h.items():
            if k == "__metadata__":
                continue
            b = e["data_offsets"][1] - e["data_offsets"][0]
            total += b
            if k.endswith("wpe.weight") or (not tied and k.endswith(("embed_tokens.weight", "wte.weight"))):
                skip += b
    return total - skip, cfg


def cache_bytes(cfg, ctx, esize):
    if cfg["model_type"] == "gpt2":
        L, kvd = cfg["n_layer"], cfg["n_embd"]
    else:
        L = cfg["num_hidden_layers"]
        kvd = cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * cfg.get(
            "head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    return 2 * L * kvd * ctx * esize


def med(path):
    d = js(path)
    return d["median_ms"] if d else None


def fmt(v, f="%.2f"):
    return "-" if v is None else f % v


def main(out):
    bw = (js(os.path.join(out, "copybw.json")) or {}).get("copy_GBps")
    print("device-to-device copy bandwidth: %s GB/s" % fmt(bw, "%.0f"))
    for m in sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(out, "*.hf.npy"))}):
        print("\n== %s ==" % m)
        hf, ri = os.path.join(out, m + ".hf.npy"), os.path.join(out, m + ".rill_f32.npy")
        for tag in ("f32", "f16"):
            ri = os.path.join(out, "%s.rill_%s.npy" % (m, tag))
            if os.path.exists(hf) and os.path.exists(ri):
                a, b = np.load(hf), np.load(ri)
                same = (a == b).all(axis=0)
                first = int(np.argmin(same)) if not same.all() else len(same)
                print("greedy %s vs HF f32: %d of %d tokens equal%s (goal: all 64 for f32)" % (
                    tag, first, a.shape[1], "" if first == a.shape[1] else ", first difference at %d" % first))
        v = open(os.path.join(out, m + ".logits.log")).read().strip() if os.path.exists(os.path.join(out, m + ".logits.log")) else "-"
        print("f16 prefill logits vs HF f32: %s" % v.splitlines()[-1] if v else "-")
        wb, cfg = weight_bytes(os.path.join(out, m + ".f16"))
        for ctx in (128, 2048):
            t = med(os.path.join(out, "%s.decode%d.json" % (m, ctx)))
            if t is None:
                continue
            by = wb + cache_bytes(cfg, ctx, 2)
            bound = by / (bw * 1e9) * 1e3 if bw else None
            print("decode step, batch 1, context %d: %.3f ms = %.0f tokens/s; %.0f MB read a token; bound %s ms: %s of it (goal >= 85%%)" % (
                ctx, t, 1e3 / t, by / 1e6, fmt(bound, "%.3f"), fmt(bound / t * 100 if bound else None, "%.0f%%")))
        for B in (1, 8):
            g, p = js(os.path.join(out, "%s.gen%d.json" % (m, B))), med(os.path.join(out, "%s.prefill%d.json" % (m, B)))
            h = js(os.path.join(out, "%s.hf%d.json" % (m, B))) or {}
            if not g:
                continue
            n = h.get("new") or int(open(os.path.join(out, "new")).read())
            dec = g["median_ms"] - (p or 0)
            tps = B * (n - 1) / (dec / 1e3)
            gr = g.get("graph", {})
            line = "batch %d: generate %d tokens %.1f ms (prefill and first token %s ms), decode %.0f tokens/s; graph replayed %s, %s captures" % (
                B, n, g["median_ms"], fmt(p), tps, gr.get("replayed"), gr.get("captures"))
            print(line)
            st = os.path.join(out, "%s.stats%d.log" % (m, B))
            if os.path.exists(st):
                print("  rill llm --stats: " + (open(st).read().strip().splitlines() or ["-"])[-1])
            for k in ("eager", "compiled"):
                r = h.get(k, {})
                if "error" in r:
                    print("  HF %s: %s" % (k, r["error"]))
                elif r:
                    first = " (first token %.1f ms)" % r["first_token_ms"] if "first_token_ms" in r else ""
                    print("  HF %s: %.0f tokens/s%s: rill %.2fx%s" % (
                        k, r["decode_tokens_per_s"], first, tps / r["decode_tokens_per_s"],
                        " (goal >= 1.3x)" if k == "compiled" else ""))
        p512, h512 = med(os.path.join(out, m + ".prefill512.json")), js(os.path.join(out, m + ".hfprefill512.json")) or {}
        if p512:
            c = h512.get("compiled_ms")
            print("prefill 512: rill %.2f ms, HF eager %s ms, torch.compile %s ms: %s of compile's time (goal <= 1.0x)" % (
                p512, fmt(h512.get("eager_ms")), fmt(c), fmt(p512 / c if c else None, "%.2fx")))


if __name__ == "__main__":
    main(sys.argv[1])
