#!/usr/bin/env python3
"""The model zoo through ONNX: every torchvision model and the Hugging Face
architectures people bring, exported as users export them, run by Rill.

    python3 bench/models/zoo.py RILL OUTDIR [--models NAME,...|--family F]
        [--dtypes f32,f16] [--batches 1,32] [--jobs J] [--time N] [--list]

For each model: random weights (torchvision's initialisation, batch-norm
statistics measured on random images; Hugging Face models built from their
default configs with attn_implementation="eager"), exported once per dtype
with torch.onnx.export (opset 17, the TorchScript exporter) with the batch
axis (and the sequence axis of text models) dynamic. Then at each batch size:
PyTorch's output in the dtype (CUDA), the exact answer (the same weights and
inputs in float64), and `RILL run MODEL.onnx --device=cuda` on the same
inputs. An output passes when Rill's error (max |out - exact| / max |exact|)
is at most 5x PyTorch's own in the dtype plus a floor (f32 1e-4, f16 1e-2),
on every output the model returns. With --time N each passing run is also
timed: `rill bench` (interpreted and as a CUDA graph) beside PyTorch eager,
PyTorch's CUDA-graph replay and torch.compile (reduce-overhead), medians of
N runs.

Writes OUTDIR/zoo.jsonl (a line per model, dtype and batch: stage reached,
errors, times, Rill's message where it stopped) and prints a table.
The largest default configs (Llama, Mistral, Qwen2: 7B parameters) are cut
to 2 layers and hidden 1024 so that the export fits a file of 2 GB; each
row names the config it ran.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np

FLOOR = {"f32": 1e-4, "f16": 1e-2}
TV_SIZE = {"inception_v3": 299}


def tv_models():
    import torchvision
    names = list(torchvision.models.list_models(module=torchvision.models))
    seg = list(torchvision.models.list_models(module=torchvision.models.segmentation))
    return [("tv", n) for n in names] + [("seg", n) for n in seg]


HF = ["bert", "roberta", "distilbert", "gpt2", "llama", "qwen2", "mistral",
      "t5-encoder", "t5", "bart", "vit", "clip", "whisper", "wav2vec2"]


def all_models():
    return [("hf", n) for n in HF] + tv_models()


def keywords(torch, m, names, extra):
    """The model with forward taking its inputs positionally (as the
    exporter passes them) and giving a flat tuple of tensors."""
    class KW(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.m = m

        def forward(s, *xs):
            return tuple(flat(s.m(**dict(zip(names, xs)), **extra)))
    return KW()


def build(family, name):
    """Returns (model, input_names, make_inputs(batch, dtype_torch, gen),
    dynamic_axes, config note)."""
    import torch
    if family in ("tv", "seg"):
        import torchvision
        mod = torchvision.models if family == "tv" else torchvision.models.segmentation
        kw = {"weights": None}
        if name == "inception_v3" or name == "googlenet":
            kw["aux_logits"] = False
            kw["init_weights"] = True
        if family == "seg":
            kw["weights_backbone"] = None
            kw["aux_loss"] = False
        m = torchvision.models.get_model(name, **kw)

        class Seg(torch.nn.Module):
            def __init__(s, m):
                super().__init__()
                s.m = m

            def forward(s, x):
                return s.m(x)["out"]
        if family == "seg":
            m = Seg(m)
        size = TV_SIZE.get(name, 224)
        if family == "seg":
            size = 256

        def inputs(b, dt, gen):
            return [torch.randn(b, 3, size, size, generator=gen).to(dt)]
        return m, ["x"], inputs, {"x": {0: "B"}}, f"{size}x{size}"
    m, names, inputs, dyn, note = build_hf(name)
    extra = {"use_cache": False} if name in ("gpt2", "llama", "qwen2", "mistral", "t5", "bart", "whisper") else {}
    return keywords(torch, m, names, extra), names, inputs, dyn, note


def build_hf(name):
    import torch
    import transformers as T
    seq = 16

    def ids(b, vocab, gen):
        return torch.randint(3, min(vocab, 1000), (b, seq), generator=gen)
    note = "default config"
    if name in ("bert", "roberta", "distilbert", "gpt2"):
        cfg = T.AutoConfig.for_model(name)
        m = T.AutoModel.from_config(cfg, attn_implementation="eager")
        names = ["input_ids", "attention_mask"]

        def inputs(b, dt, gen):
            mask = torch.ones(b, seq, dtype=torch.int64)
            if b > 1:
                mask[1:, seq - 3:] = 0   # padded sequences
            return [ids(b, cfg.vocab_size, gen), mask]
        dyn = {n: {0: "B", 1: "S"} for n in names}
        return m, names, inputs, dyn, note
    if name in ("llama", "qwen2", "mistral"):
        cfg = T.AutoConfig.for_model(name, num_hidden_layers=2, hidden_size=1024, intermediate_size=2816,
                                     num_attention_heads=16, num_key_value_heads=4)
        m = T.AutoModel.from_config(cfg, attn_implementation="eager")
        note = "2 layers, hidden 1024, 16 heads, 4 kv heads"

        def inputs(b, dt, gen):
            return [ids(b, cfg.vocab_size, gen), torch.ones(b, seq, dtype=torch.int64)]
        names = ["input_ids", "attention_mask"]
        return m, names, inputs, {n: {0: "B", 1: "S"} for n in names}, note
    if name == "t5-encoder":
        cfg = T.AutoConfig.for_model("t5")
        m = T.T5EncoderModel(cfg)
        m.config._attn_implementation = "eager"

        def inputs(b, dt, gen):
            return [ids(b, cfg.vocab_size, gen)]
        return m, ["input_ids"], inputs, {"input_ids": {0: "B", 1: "S"}}, note
    if name in ("t5", "bart"):
        cfg = T.AutoConfig.for_model(name)
        m = T.AutoModel.from_config(cfg, attn_implementation="eager")

        def inputs(b, dt, gen):
            return [ids(b, cfg.vocab_size, gen), ids(b, cfg.vocab_size, gen)]
        names = ["input_ids", "decoder_input_ids"]
        return m, names, inputs, {n: {0: "B", 1: "S"} for n in names}, note
    if name == "vit":
        cfg = T.AutoConfig.for_model("vit")
        m = T.AutoModel.from_config(cfg, attn_implementation="eager")

        def inputs(b, dt, gen):
            return [torch.randn(b, 3, 224, 224, generator=gen).to(dt)]
        return m, ["pixel_values"], inputs, {"pixel_values": {0: "B"}}, note
    if name == "clip":
        cfg = T.CLIPConfig()
        m = T.CLIPModel(cfg)
        m.config._attn_implementation = "eager"

        def inputs(b, dt, gen):
            return [ids(b, cfg.text_config.vocab_size, gen), torch.randn(b, 3, 224, 224, generator=gen).to(dt)]
        names = ["input_ids", "pixel_values"]
        return m, names, inputs, {"input_ids": {0: "B", 1: "S"}, "pixel_values": {0: "B"}}, note
    if name == "whisper":
        cfg = T.AutoConfig.for_model("whisper")
        m = T.AutoModel.from_config(cfg, attn_implementation="eager")

        def inputs(b, dt, gen):
            return [torch.randn(b, cfg.num_mel_bins, 3000, generator=gen).to(dt), ids(b, cfg.vocab_size, gen)]
        names = ["input_features", "decoder_input_ids"]
        return m, names, inputs, {"input_features": {0: "B"}, "decoder_input_ids": {0: "B", 1: "S"}}, note
    if name == "wav2vec2":
        cfg = T.AutoConfig.for_model("wav2vec2")
        m = T.AutoModel.from_config(cfg, attn_implementation="eager")

        def inputs(b, dt, gen):
            return [torch.randn(b, 16000, generator=gen).to(dt)]
        return m, ["input_values"], inputs, {"input_values": {0: "B"}}, note
    raise SystemExit(f"unknown model {name}")


def flat(out):
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    res = []
    for o in out:
        res.extend(flat(o) if not isinstance(o, torch.Tensor) else [o])
    return res


def randomise_bn(m, torch):
    for mod in m.modules():
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None:
            with torch.no_grad():
                mod.running_mean.uniform_(-0.1, 0.1)
                mod.running_var.uniform_(0.5, 1.5)


def run_model(args, family, name):
    import torch
    rows = []
    torch.manual_seed(0)
    t0 = time.time()
    try:
        m, names, make_inputs, dyn, note = build(family, name)
    except Exception as e:
        return [{"model": name, "family": family, "stage": "build", "error": repr(e)[:400]}]
    m.eval()
    randomise_bn(m, torch)
    dev = "cuda"
    for dt in args.dtypes:
        tdt = torch.float16 if dt == "f16" else torch.float32
        md = m.to(dev).to(tdt)   # in place: m's weights are rounded to the dtype
        stem = os.path.join(args.out, f"{name}_{dt}")
        onnx = stem + ".onnx"
        gen = torch.Generator().manual_seed(1)
        ex = [x.to(dev) for x in make_inputs(2, tdt, gen)]
        te = time.time()
        exporter = "torchscript"
        try:
            with torch.no_grad():
                torch.onnx.export(md, tuple(ex), onnx, input_names=names, dynamic_axes=dyn, opset_version=17,
                                  do_constant_folding=True, dynamo=False)
        except Exception as e1:
            # the TorchScript exporter refuses some models; the default exporter then
            exporter = "dynamo"
            try:
                with torch.no_grad():
                    torch.onnx.export(md, tuple(ex), onnx, input_names=names, dynamic_axes=dyn, opset_version=18,
                                      dynamo=True, external_data=False)
            except Exception as e:
                rows.append({"model": name, "family": family, "dtype": dt, "stage": "export",
                             "error": (repr(e1)[:200] + " | " + repr(e)[:200])})
                continue
        export_s = time.time() - te
        for b in args.batches:
            row = {"model": name, "family": family, "dtype": dt, "batch": b, "config": note, "exporter": exporter,
                   "export_s": round(export_s, 1)}
            rows.append(row)
            gen = torch.Generator().manual_seed(2 + b)
            xs = make_inputs(b, tdt, gen)
            with torch.no_grad():
                m.to(tdt)
                want = [o.float().cpu().numpy() for o in flat(m(*[x.to(dev) for x in xs]))]
                m.double()
                ref = [o.double().cpu().numpy() for o in flat(m(*[(x.double() if x.is_floating_point() else x).to(dev) for x in xs]))]
                m.to(tdt)
            inp = []
            for i, x in enumerate(xs):
                p = f"{stem}_b{b}_in{i}.npy"
                np.save(p, x.numpy())
                inp.append(f"--input=@{p}")
            outs = [f"{stem}_b{b}_out{i}.npy" for i in range(len(ref))]
            cmd = [args.rill, "run", onnx, "--device=cuda"] + inp + [f"--output=@{p}" for p in outs]
            tr = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            row["rill_s"] = round(time.time() - tr, 2)
            if r.returncode != 0:
                row["stage"] = "rill"
                row["error"] = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1][:400]
                continue
            errs = []
            ok = True
            for i, (w, rf) in enumerate(zip(want, ref)):
                try:
                    got = np.load(outs[i]).astype(np.float64)
                except Exception as e:
                    ok = False
                    errs.append(f"out{i}: {e}")
                    continue
                if got.shape != rf.shape:
                    ok = False
                    errs.append(f"out{i}: shape {got.shape} vs {rf.shape}")
                    continue
                scale = np.abs(rf).max() or 1.0
                er = float(np.abs(got - rf).max() / scale)
                et = float(np.abs(w.astype(np.float64) - rf).max() / scale)
                good = er <= 5 * et + FLOOR[dt]
                ok = ok and good
                errs.append({"rill": er, "torch": et, "ok": good})
            row["errors"] = errs
            row["stage"] = "pass" if ok else "wrong"
            if ok and args.time:
                row.update(time_rill(args, onnx, inp))
    return rows


def time_rill(args, onnx, inp):
    res = {}
    for g in ("off", "on"):
        r = subprocess.run([args.rill, "bench", onnx, "--device=cuda", f"--graph={g}", f"--iterations={args.time}",
                            "--json"] + inp, capture_output=True, text=True, timeout=600)
        try:
            res[f"rill_graph_{g}_ms"] = json.loads(r.stdout)["median_ms"]
        except Exception:
            res[f"rill_graph_{g}_error"] = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rill")
    ap.add_argument("out")
    ap.add_argument("--models", default="")
    ap.add_argument("--family", default="")
    ap.add_argument("--dtypes", default="f32")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--time", type=int, default=0)
    ap.add_argument("--skip", default="")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    args.dtypes = sorted(args.dtypes.split(","), key=lambda d: d != "f32")   # f32 first: f16 rounds the weights
    args.batches = [int(b) for b in args.batches.split(",")]
    os.makedirs(args.out, exist_ok=True)
    models = all_models()
    if args.family:
        models = [m for m in models if m[0] in args.family.split(",")]
    if args.models:
        want = args.models.split(",")
        models = [m for m in models if m[1] in want]
    skip = set(args.skip.split(",")) if args.skip else set()
    models = [m for m in models if m[1] not in skip]
    if args.list:
        print(" ".join(n for _, n in models))
        return
    log = open(os.path.join(args.out, "zoo.jsonl"), "a")
    with cf.ProcessPoolExecutor(args.jobs) as pool:
        futs = {pool.submit(run_model, args, f, n): n for f, n in models}
        for fu in cf.as_completed(futs):
            try:
                rows = fu.result()
            except Exception as e:
                rows = [{"model": futs[fu], "stage": "crash", "error": repr(e)[:300]}]
            for r in rows:
                log.write(json.dumps(r) + "\n")
                log.flush()
                e = r.get("error", "")
                errs = r.get("errors") or []
                es = " ".join("%.1e/%.1e" % (x["rill"], x["torch"]) for x in errs if isinstance(x, dict))[:60]
                print(f"{r.get('model'):28s} {r.get('dtype', '-'):4s} b{r.get('batch', '-'):<3} {r.get('stage'):7s} {es} {e[:200]}", flush=True)


if __name__ == "__main__":
    main()
