#!/usr/bin/env python3
"""The model zoo through ONNX: every torchvision model and the Hugging Face
architectures people bring, exported as users export them, run by Rill.

    python3 bench/models/zoo.py RILL OUTDIR [--models NAME,...|--family F]
        [--dtypes f32,f16] [--batches 1,32] [--jobs J] [--gpus G] [--time N]
        [--precision tf32,f16,bf16] [--list]

For each model: random weights (torchvision's initialisation, batch-norm
statistics measured on random images; Hugging Face models built from their
default configs with attn_implementation="eager"), exported once per dtype
with torch.onnx.export (opset 17, the TorchScript exporter) with the batch
axis (and the sequence axis of text models) dynamic. Then at each batch size:
PyTorch's output in the dtype (CUDA), the exact answer (the same weights and
inputs in float64), and `RILL run MODEL.onnx --device=cuda` on the same
inputs. An output passes when Rill's error (max |out - exact| / max |exact|)
is at most 5x PyTorch's own in the dtype plus a floor (f32 1e-4, f16 1e-2),
on every output the model returns. For the families --peer names
(detection by default) PyTorch's own error is the larger of PyTorch's and
onnxruntime's on the same file, as compare.py's rule: torch.onnx.export
folds batch norm into the convolutions in the model's dtype, a rounding of
the weights that the file, not the runtime, carries. Where PyTorch's own
output is not finite and the exact one is (the file's arithmetic overflows
or divides 0 by 0 in the dtype), Rill's must be not finite in the same
places and the rest is judged so: such rows are counted apart (stage
"as-torch"). Detection rows also count, image by image, how many of the
exact detections Rill's and PyTorch's outputs hold (same label, IoU >= 0.5:
"matched"). With --time N each passing run is also timed: `rill bench`
(interpreted and as a CUDA graph) beside PyTorch eager, PyTorch's CUDA-graph
replay and torch.compile (reduce-overhead), medians of N runs. With
--precision MODES each passing f32 row is also run with Rill's
`--precision=MODE` on the same f32 file: its error against the exact
answer, PyTorch autocast's beside it for f16 and bf16, and with --time its
CUDA-graph time (to set beside PyTorch's f32 CUDA graph, TF32 as PyTorch's
defaults have it, and beside Rill's time on the f16 file).

Families (--family): tv (every classification model), seg (segmentation),
det (detection: a list of images, whose length the exporter fixes, so one
file per batch size, DET_BATCHES; every detection kept, 20 an image, so
that the outputs' sizes do not hang on rounding), hf (Hugging Face).

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
    det = list(torchvision.models.list_models(module=torchvision.models.detection))
    return [("tv", n) for n in names] + [("seg", n) for n in seg] + [("det", n) for n in det]


DET_BATCHES = [1, 2]   # detection models take a list of images: the exporter fixes its length, one file a batch size
DET_SIZE = 320


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


def build(family, name, tiny=False):
    """Returns (model, input_names, make_inputs(batch, dtype_torch, gen),
    dynamic_axes, config note)."""
    import torch
    if family == "det":
        return build_det(name)
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
    m, names, inputs, dyn, note = build_hf(name, tiny)
    extra = {"use_cache": False} if name in ("gpt2", "llama", "qwen2", "mistral", "t5", "bart", "whisper") else {}
    return keywords(torch, m, names, extra), names, inputs, dyn, note


TINY = {  # --tiny: every family's size knobs small (names a config does not know are ignored)
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
    "vocab_size": 128, "max_position_embeddings": 128, "num_key_value_heads": 2,
    "d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "d_kv": 16, "num_decoder_layers": 2,
    "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "dim": 64, "hidden_dim": 128, "n_layers": 2, "n_heads": 4,
    "conv_dim": [32] * 7, "num_conv_pos_embeddings": 16, "projection_dim": 32, "image_size": 64, "patch_size": 16,
    "max_source_positions": 32, "max_target_positions": 64,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1,
}
BIG = {"llama", "qwen2", "mistral"}  # 7B defaults: cut (see the docstring)


def hf_config(name, tiny, **kw):
    import transformers as T
    if tiny:
        kw = {**TINY, **kw}
        if name == "clip":
            t = {k: v for k, v in TINY.items() if k not in ("image_size",)}
            return T.CLIPConfig(text_config=t, vision_config={**TINY, "intermediate_size": 128}, projection_dim=32)
    elif name in BIG:
        kw = {"num_hidden_layers": 2, "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
              "num_key_value_heads": 4, **kw}
    return T.AutoConfig.for_model(name, **kw)


def build_det(name):
    """A torchvision detection model, its every detection kept (score
    threshold 0) and at most 20 an image, so that its outputs have the same
    size whatever the rounding; its outputs (boxes, labels, scores, and masks
    or keypoints where it has them) flattened image by image."""
    import torch
    import torchvision
    if name.startswith(("retinanet", "fcos", "ssd")):
        kw = {"score_thresh": 0.0, "detections_per_img": 20}
    else:
        kw = {"box_score_thresh": 0.0, "box_detections_per_img": 20}
    m = torchvision.models.get_model(name, weights=None, weights_backbone=None, **kw)

    class Det(torch.nn.Module):
        def __init__(s, m):
            super().__init__()
            s.m = m

        def forward(s, x):
            return tuple(d[k] for d in s.m(list(x.unbind(0))) for k in sorted(d))

    def inputs(b, dt, gen):
        return [torch.rand(b, 3, DET_SIZE, DET_SIZE, generator=gen).to(dt)]
    return Det(m), ["x"], inputs, {}, f"{DET_SIZE}x{DET_SIZE}, score threshold 0, 20 detections an image"


def build_hf(name, tiny=False):
    import torch
    import transformers as T
    seq = int(os.environ.get("ZOO_SEQ", "16"))   # --seq (an environment variable, so torch's timing process has it too)

    def ids(b, vocab, gen):
        return torch.randint(3, min(vocab, 1000), (b, seq), generator=gen)
    note = "tiny config" if tiny else ("2 layers, hidden 1024, 16 heads, 4 kv heads" if name in BIG else "default config")
    note += f", sequence {seq}"
    base = "t5" if name == "t5-encoder" else name
    cfg = hf_config(base, tiny)
    if name == "t5-encoder":
        cfg._attn_implementation = "eager"
        m = T.T5EncoderModel(cfg)
    else:
        m = T.AutoModel.from_config(cfg, attn_implementation="eager")
    text = getattr(cfg, "text_config", cfg)
    img = getattr(getattr(cfg, "vision_config", cfg), "image_size", 224)
    if name in ("bert", "roberta", "distilbert", "gpt2", "llama", "qwen2", "mistral"):
        names = ["input_ids", "attention_mask"]

        def inputs(b, dt, gen):
            mask = torch.ones(b, seq, dtype=torch.int64)
            if b > 1:
                mask[1:, seq - 3:] = 0   # padded sequences
            return [ids(b, cfg.vocab_size, gen), mask]
        return m, names, inputs, {n: {0: "B", 1: "S"} for n in names}, note
    if name == "t5-encoder":
        return m, ["input_ids"], lambda b, dt, gen: [ids(b, cfg.vocab_size, gen)], {"input_ids": {0: "B", 1: "S"}}, note
    if name in ("t5", "bart"):
        names = ["input_ids", "decoder_input_ids"]
        return (m, names, lambda b, dt, gen: [ids(b, cfg.vocab_size, gen), ids(b, cfg.vocab_size, gen)],
                {n: {0: "B", 1: "S"} for n in names}, note)
    if name == "vit":
        return (m, ["pixel_values"], lambda b, dt, gen: [torch.randn(b, 3, img, img, generator=gen).to(dt)],
                {"pixel_values": {0: "B"}}, note)
    if name == "clip":
        names = ["input_ids", "pixel_values"]
        return (m, names, lambda b, dt, gen: [ids(b, text.vocab_size, gen), torch.randn(b, 3, img, img, generator=gen).to(dt)],
                {"input_ids": {0: "B", 1: "S"}, "pixel_values": {0: "B"}}, note)
    if name == "whisper":
        names = ["input_features", "decoder_input_ids"]
        frames = 2 * cfg.max_source_positions
        return (m, names, lambda b, dt, gen: [torch.randn(b, cfg.num_mel_bins, frames, generator=gen).to(dt), ids(b, cfg.vocab_size, gen)],
                {"input_features": {0: "B"}, "decoder_input_ids": {0: "B", 1: "S"}}, note)
    if name == "wav2vec2":
        return (m, ["input_values"], lambda b, dt, gen: [torch.randn(b, 16000, generator=gen).to(dt)],
                {"input_values": {0: "B"}}, note)
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


def randomise_bn(m, torch, make_inputs=None):
    """Weights a model initialises to zeros (torchvision's ViT head) drawn
    small, so that no output is zero whatever its input (a check that
    compares zeros proves nothing); batch-norm statistics measured on random
    inputs (make_inputs: a training-mode pass over two batches of 8, in f32),
    so that activations keep their scale through deep networks as trained
    ones do (with statistics drawn at random they grow layer by layer, and a
    ResNet-152 overflows f16 in PyTorch too), or drawn at random where the
    model takes no training-mode pass (detection)."""
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0, 0.02)
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) and mod.running_mean is not None]
    if bns and make_inputs:
        for mod in bns:
            mod.reset_running_stats()
            mod.momentum = None   # a cumulative average
        m.cuda().train()
        gen = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for _ in range(2):
                m(*[x.cuda() for x in make_inputs(8, torch.float32, gen)])
        m.eval()
        return
    for mod in bns:
        with torch.no_grad():
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)


def diff_symbolic(torch):
    """torch.diff for the TorchScript exporter, which has no symbolic for it
    (transformers' mask utilities call it, so Whisper did not export): a
    user's workaround, registered as users register one. Slices and a
    subtraction along dim, after the prepend and append are concatenated."""
    from torch.onnx import symbolic_helper as sh

    def diff(g, x, n, dim, prepend, append):
        n, dim = sh._parse_arg(n, "i"), sh._parse_arg(dim, "i")
        if not sh._is_none(prepend):
            x = g.op("Concat", prepend, x, axis_i=dim)
        if not sh._is_none(append):
            x = g.op("Concat", x, append, axis_i=dim)
        c = lambda v: g.op("Constant", value_t=torch.tensor([v], dtype=torch.int64))
        for _ in range(n):
            x = g.op("Sub", g.op("Slice", x, c(1), c(2 ** 62), c(dim)), g.op("Slice", x, c(0), c(-1), c(dim)))
        return x
    torch.onnx.register_custom_op_symbolic("aten::diff", diff, 17)


def run_model(args, family, name):
    import torch
    diff_symbolic(torch)
    rows = []
    torch.manual_seed(0)
    t0 = time.time()
    try:
        m, names, make_inputs, dyn, note = build(family, name, args.tiny)
    except Exception as e:
        return [{"model": name, "family": family, "stage": "build", "error": repr(e)[:400]}]
    m.eval()
    randomise_bn(m, torch, make_inputs if family in ("tv", "seg") else None)
    dev = "cuda"
    # (model, dtype, batch sizes, file) a file each: one per dtype with its batch axis dynamic; a detection
    # model's, one per batch size too
    files = []
    mdir = os.path.join(args.out, name)   # a folder a model: a file over 2 GB keeps its weights beside it, named by the model's own names
    os.makedirs(mdir, exist_ok=True)
    for dt in args.dtypes:
        if family == "det":
            files += [(dt, [b], os.path.join(mdir, f"{name}_{dt}_n{b}")) for b in DET_BATCHES]
        else:
            files.append((dt, args.batches, os.path.join(mdir, f"{name}_{dt}")))
    for dt, batches, stem in files:
        tdt = torch.float16 if dt == "f16" else torch.float32
        md = m.to(dev).to(tdt)   # in place: m's weights are rounded to the dtype
        onnx = stem + ".onnx"
        gen = torch.Generator().manual_seed(1)
        ex = [x.to(dev) for x in make_inputs(batches[0] if family == "det" else 2, tdt, gen)]
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
                    shapes = tuple({a: torch.export.Dim.DYNAMIC for a in dyn.get(n, {})} for n in names)
                    torch.onnx.export(md, tuple(ex), onnx, input_names=names, dynamic_shapes=shapes, opset_version=18,
                                      dynamo=True, external_data=False)
            except Exception as e:
                rows.append({"model": name, "family": family, "dtype": dt, "stage": "export",
                             "error": (repr(e1)[:200] + " | " + repr(e)[:200])})
                continue
        export_s = time.time() - te
        print(f"  {name} {dt}: exported in {export_s:.1f} s ({exporter})", file=sys.stderr, flush=True)
        for b in batches:
            row = {"model": name, "family": family, "dtype": dt, "batch": b, "seed": args.seed, "config": note, "exporter": exporter,
                   "export_s": round(export_s, 1)}
            rows.append(row)
            xs = make_inputs(b, tdt, input_generator(torch, b, args.seed))
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
            if args.export_only:   # the files, for runs elsewhere: inputs, PyTorch's outputs, the exact ones
                for i, (w, rf) in enumerate(zip(want, ref)):
                    np.save(f"{stem}_b{b}_want{i}.npy", w)
                    np.save(f"{stem}_b{b}_ref{i}.npy", rf)
                row["stage"] = "exported"
                continue
            # the file's other runtime, where asked (--peer): the exporter folds batch norm into the convolutions in
            # the model's dtype, so an f16 file's weights differ from PyTorch's by a rounding that any runtime of the
            # file carries (compare.py's rule too)
            peer, peer_note = ort_outputs(onnx, xs) if args.peer in ("all", family) else (None, None)
            if peer_note:
                row["peer"] = peer_note
            outs = [f"{stem}_b{b}_out{i}.npy" for i in range(len(ref))]
            cmd = [args.rill, "run", onnx, "--device=cuda"] + inp + [f"--output=@{p}" for p in outs]
            tr = time.time()
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
            except subprocess.TimeoutExpired:
                row["stage"] = "rill"
                row["error"] = f"rill run still running after {args.run_timeout} s (stopped)"
                continue
            finally:
                row["rill_s"] = round(time.time() - tr, 2)
                print(f"  {name} {dt} b{b}: rill run {row['rill_s']} s", file=sys.stderr, flush=True)
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
                pe = peer[i] if peer and i < len(peer) else None
                e = judge(w, rf, got, pe, dt)
                ok = ok and e["ok"]
                errs.append(e)
            row["errors"] = errs
            row["stage"] = "pass" if ok else "wrong"
            if ok and any("same_nonfinite" in x for x in errs if isinstance(x, dict)):
                row["stage"] = "as-torch"   # passes, its non-finite values where PyTorch's are (counted apart)
            if family == "det" and all(os.path.exists(o) for o in outs):
                row["matched"] = det_matched([np.load(o) for o in outs], want, ref)
            print(f"  {name} {dt} b{b}: {row['stage']}", file=sys.stderr, flush=True)
            if ok and args.time:
                row.update(time_rill(args, onnx, inp))
                row.update(time_torch_apart(args, family, name, dt, b))
                row.update(time_ort(onnx, names, xs, args.time))
            if ok and dt == "f32":
                for mode in args.precision:
                    row.update(run_precision(args, m, onnx, stem, b, inp, xs, ref, mode))
    return rows


def rel_err(ref, got):
    """max |got - ref| / max |ref| (inf where the shapes differ or got is not finite)."""
    ref, got = np.asarray(ref, dtype=np.float64), np.asarray(got, dtype=np.float64)
    if ref.shape != got.shape:
        return float("inf")
    if not ref.size:
        return 0.0
    d = np.abs(got - ref).max()
    return float(d / (np.abs(ref).max() or 1.0)) if np.isfinite(d) else float("inf")


def run_precision(args, m, onnx, stem, b, inp, xs, ref, mode):
    """An f32 file run with `--precision=MODE`: its error against the exact
    answer (the largest over the outputs, as rel_err); for f16 and bf16
    PyTorch autocast's error beside it (the model in f32 under
    torch.autocast to that dtype, on the same inputs); with --time its time
    as a CUDA graph (`rill bench --graph=on`). Keys prec_MODE_err,
    autocast_MODE_err, prec_MODE_ms, or prec_MODE_error with Rill's
    message."""
    import torch
    res = {}
    outs = [f"{stem}_b{b}_{mode}_out{i}.npy" for i in range(len(ref))]
    cmd = [args.rill, "run", onnx, "--device=cuda", f"--precision={mode}"] + inp + [f"--output=@{p}" for p in outs]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
    except subprocess.TimeoutExpired:
        return {f"prec_{mode}_error": f"rill run --precision={mode} still running after {args.run_timeout} s (stopped)"}
    if r.returncode != 0:
        return {f"prec_{mode}_error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1][:300]}
    try:
        res[f"prec_{mode}_err"] = max(rel_err(rf, np.load(o)) for rf, o in zip(ref, outs))
    except Exception as e:
        return {f"prec_{mode}_error": repr(e)[:300]}
    if mode in ("f16", "bf16"):
        adt = torch.float16 if mode == "f16" else torch.bfloat16
        with torch.no_grad(), torch.autocast("cuda", dtype=adt):
            ac = [o.double().cpu().numpy() for o in flat(m(*[x.to("cuda") for x in xs]))]
        res[f"autocast_{mode}_err"] = max(rel_err(rf, a) for rf, a in zip(ref, ac))
    if args.time:
        r = subprocess.run([args.rill, "bench", onnx, "--device=cuda", "--graph=on", f"--precision={mode}",
                            f"--iterations={args.time}", "--json"] + inp, capture_output=True, text=True, timeout=600)
        try:
            res[f"prec_{mode}_ms"] = json.loads(r.stdout)["median_ms"]
        except Exception:
            res[f"prec_{mode}_error"] = (r.stderr.strip().splitlines() or ["?"])[-1][:200]
    return res


def judge(want, ref, got, peer, dt):
    """One output's verdict (the module's docstring gives the rule): Rill's
    error and PyTorch's against the exact answer, relative to its largest
    |value|; onnxruntime's on the same file (peer) where given; which sides
    are not finite; ok."""
    ref = np.asarray(ref, dtype=np.float64)
    w, got = np.asarray(want, dtype=np.float64), np.asarray(got, dtype=np.float64)
    pe = np.asarray(peer, dtype=np.float64) if peer is not None and np.shape(peer) == ref.shape else None
    scale = np.abs(ref).max() if ref.size else 0.0
    scale = scale or 1.0
    e = {}
    for k, v in (("exact", ref), ("torch", w), ("rill", got)):
        if not np.isfinite(v).all():   # which side is not finite (f16 overflow), so a NaN error is explained
            e[k + "_nonfinite"] = int((~np.isfinite(v)).sum())
    fin = np.isfinite(w)
    if not fin.all() and np.isfinite(ref).all():
        # PyTorch's own output not finite where the exact one is (the file's arithmetic overflows or
        # divides 0 by 0 in the dtype): Rill's must be not finite in the same places, the rest judged
        e["same_nonfinite"] = bool(np.array_equal(np.isfinite(got), fin))
        w, ref, got = w[fin], ref[fin], got[fin]
        pe = pe[fin] if pe is not None else None
    er = float(np.abs(got - ref).max() / scale) if ref.size else 0.0
    et = float(np.abs(w - ref).max() / scale) if ref.size else 0.0
    own = et
    if pe is not None:
        e["peer"] = float(np.abs(pe - ref).max() / scale) if ref.size else 0.0
        own = max(et, e["peer"]) if np.isfinite(e["peer"]) else et
    good = bool(er <= 5 * own + FLOOR[dt]) and e.get("same_nonfinite", True)
    e.update({"rill": er, "torch": et, "ok": good})
    return e


def ort_session(onnx, xs):
    """onnxruntime on the file (its CUDA provider where the installed
    package has one): the session, its feed of the inputs, the provider."""
    import onnxruntime as ort
    prov = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in ort.get_available_providers()]
    sess = ort.InferenceSession(onnx, providers=prov[:1])
    return sess, {k.name: x.numpy() for k, x in zip(sess.get_inputs(), xs)}, prov[0]


def ort_outputs(onnx, xs):
    """onnxruntime's outputs for the file and inputs, and the provider; or
    None and why not."""
    try:
        sess, feed, prov = ort_session(onnx, xs)
        return [np.asarray(o) for o in sess.run(None, feed)], prov
    except Exception as e:
        return None, "onnxruntime: " + repr(e)[:200]


def det_matched(got, want, ref, iou_min=0.5):
    """Detection, a second measure beside the judge: of each image's exact
    detections (float64), how many Rill's and PyTorch's outputs hold too (a
    detection of the same label whose box overlaps it by IoU >= iou_min,
    each used once, best overlap first). Near-tied scores reorder the
    detections, or let an image's last places go to others, in any dtype;
    this counts what was found rather than where it stands in the list.
    Returns [[exact, rill, torch] per image]."""
    def iou(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
        return w * h / u if u > 0 else 0.0

    def found(be, le, bo, lo):
        used, n = set(), 0
        for i in range(len(le)):
            cand = [(iou(be[i], bo[j]), j) for j in range(len(lo)) if j not in used and lo[j] == le[i]]
            best = max(cand, default=(0.0, -1))
            if best[0] >= iou_min:
                used.add(best[1])
                n += 1
        return n
    res = []
    for k in range(0, len(ref) - 2, 3):   # outputs image by image: boxes, labels, scores
        be, le = ref[k], ref[k + 1]
        res.append([len(le), found(be, le, got[k], got[k + 1]), found(be, le, want[k], want[k + 1])])
    return res


def time_torch(model, xs, n, compiled):
    """PyTorch on the same inputs: eager, the replay of a CUDA graph captured
    from it, and with compiled torch.compile(mode="reduce-overhead") with
    freezing; cuDNN's algorithms timed per shape (benchmark mode)."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from convert import time_ms as convert_time_ms   # one timing loop for the model benchmarks

    def time_ms(torch_, step, n):
        return convert_time_ms(step, n)["median_ms"]
    torch.backends.cudnn.benchmark = True
    res = {}
    with torch.no_grad():
        res["torch_eager_ms"] = time_ms(torch, lambda: model(*xs), n)
        try:
            # tensors the model makes as it runs (transformers' masks) made on the GPU: a copy from pageable host
            # memory cannot be captured ("Cannot copy between CPU and CUDA tensors during CUDA graph capture")
            with torch.device("cuda"):
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):
                        model(*xs)
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    model(*xs)
            res["torch_graph_ms"] = time_ms(torch, g.replay, n)
        except Exception as e:
            res["torch_graph_error"] = repr(e)[:200]
        if compiled:
            try:
                import torch._inductor.config as inductor_config
                inductor_config.freezing = True
                cm = torch.compile(model, mode="reduce-overhead")
                for _ in range(3):
                    cm(*xs)
                res["torch_compile_ms"] = time_ms(torch, lambda: cm(*xs), n)
            except Exception as e:
                res["torch_compile_error"] = repr(e)[:200]
    return res


def input_generator(torch, b, seed):
    """The generator of a row's inputs at batch b and input seed `seed` (run_model's and torch_child's)."""
    return torch.Generator().manual_seed(2 + b + 1000 * seed)


def time_torch_apart(args, family, name, dt, b):
    """time_torch in a process of its own, on the model built again (the
    same architecture, dtype and inputs): a crash there (vit_b_16's process
    died in PyTorch's timing in runs DP, DU and DV) costs only PyTorch's
    columns of this row, which then say how the process ended."""
    spec = json.dumps({"family": family, "name": name, "tiny": args.tiny, "dtype": dt, "batch": b, "seed": args.seed,
                       "n": args.time, "compile": args.compile, "seq": args.seq})
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), args.rill, args.out, "--torch-child", spec],
                           capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return {"torch_error": "PyTorch's timing ran past 1800 s"}
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("TORCH_TIMES "):
            return json.loads(line[len("TORCH_TIMES "):])
    how = "signal %d" % -r.returncode if r.returncode < 0 else "exit %d" % r.returncode
    last = (r.stderr.strip().splitlines() or [""])[-1][:200]
    return {"torch_error": f"PyTorch's timing process ended with {how}: {last}"}


def torch_child(spec):
    """--torch-child SPEC: build the model and time PyTorch on it (for time_torch_apart)."""
    import torch
    s = json.loads(spec)
    os.environ["ZOO_SEQ"] = str(s["seq"])   # the parent's --seq (this process's own arguments name none)
    torch.manual_seed(0)
    m, names, make_inputs, dyn, note = build(s["family"], s["name"], s["tiny"])
    m.eval()
    tdt = torch.float16 if s["dtype"] == "f16" else torch.float32
    m = m.to("cuda").to(tdt)
    xs = make_inputs(s["batch"], tdt, input_generator(torch, s["batch"], s["seed"]))
    res = time_torch(m, [x.to("cuda") for x in xs], s["n"], s["compile"])
    print("TORCH_TIMES " + json.dumps(res), flush=True)


def time_ort(onnx, names, xs, n):
    """onnxruntime on the same file and inputs, with its CUDA provider where
    the installed package has one (the row names the provider)."""
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from convert import time_ms as convert_time_ms
        sess, feed, prov = ort_session(onnx, xs)
        t = time.time()
        sess.run(None, feed)
        if prov == "CPUExecutionProvider":   # a reference point: on the CPU a batch of 32 takes a second or more a run
            n = 1 if time.time() - t > 2 else min(n, 5)
        return {"ort_ms": convert_time_ms(lambda: sess.run(None, feed), n)["median_ms"], "ort_provider": prov, "ort_iterations": n}
    except Exception as e:
        return {"ort_error": repr(e)[:200]}


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


def pick_gpu(counter, gpus):
    if gpus > 0:
        with counter.get_lock():
            k = counter.value
            counter.value += 1
        os.environ["CUDA_VISIBLE_DEVICES"] = str(k % gpus)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rill")
    ap.add_argument("out")
    ap.add_argument("--models", default="")
    ap.add_argument("--family", default="")
    ap.add_argument("--dtypes", default="f32")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--time", type=int, default=0, help="time passing runs, N iterations (use --jobs 1)")
    ap.add_argument("--compile", action="store_true", help="with --time: also torch.compile (reduce-overhead)")
    ap.add_argument("--skip", default="")
    ap.add_argument("--seed", type=int, default=0, help="the inputs' seed (the weights' stays): rows over other inputs")
    ap.add_argument("--peer", default="det", choices=["det", "seg", "tv", "hf", "all", "none"],
                    help="the families whose allowance also counts onnxruntime's error on the same file (default det)")
    ap.add_argument("--gpus", type=int, default=0, help="spread the workers over this many GPUs (0: CUDA's default device)")
    ap.add_argument("--run-timeout", type=int, default=600, help="s a rill run may take before it is stopped and reported")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--seq", type=int, default=16, help="Hugging Face text models' sequence length")
    ap.add_argument("--tiny", action="store_true", help="Hugging Face models with tiny configs")
    ap.add_argument("--export-only", action="store_true", help="write the .onnx files and the inputs and outputs only")
    ap.add_argument("--precision", default="", help="f32 rows also run with rill's --precision=MODE, for each MODE "
                    "listed (tf32,f16,bf16): the error and, with --time, the time")
    ap.add_argument("--torch-child", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ["ZOO_SEQ"] = str(args.seq)
    if args.torch_child:
        return torch_child(args.torch_child)
    args.dtypes = sorted(args.dtypes.split(","), key=lambda d: d != "f32")   # f32 first: f16 rounds the weights
    args.batches = [int(b) for b in args.batches.split(",")]
    args.precision = [p for p in args.precision.split(",") if p]
    bad = [p for p in args.precision if p not in ("tf32", "f16", "bf16")]
    if bad:
        ap.error(f"--precision takes tf32, f16 or bf16, got {bad[0]!r}")
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
    # --gpus N: the workers spread over N GPUs, each worker on one of them
    # (CUDA_VISIBLE_DEVICES set before it touches CUDA; rill inherits it)
    # A fresh process a model (spawned): no state carried from one model to the next (torch.compile's caches,
    # the attention fast path a module took), which crashed a worker timing vit_b_16 after swin_t (run DP).
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    counter = ctx.Value("i", 0)
    with cf.ProcessPoolExecutor(args.jobs, mp_context=ctx, initializer=pick_gpu, initargs=(counter, args.gpus),
                                max_tasks_per_child=1) as pool:
        futs = {pool.submit(run_model, args, f, n): n for f, n in models}
        for fu in cf.as_completed(futs):
            try:
                rows = fu.result()
            except Exception as e:
                rows = [{"model": futs[fu], "stage": "crash", "error": repr(e)[:300]}]
            for r in rows:
                log.write(json.dumps(r) + "\n")
                log.flush()
                e = r.get("error", "") or r.get("torch_error", "")
                errs = r.get("errors") or []
                es = " ".join("%.1e/%.1e" % (x["rill"], x["torch"]) for x in errs if isinstance(x, dict))[:60]
                tm = " ".join("%s=%.3f" % (k[:-3], r[k]) for k in ("rill_graph_off_ms", "rill_graph_on_ms", "torch_eager_ms",
                                                                  "torch_graph_ms", "torch_compile_ms") if k in r)
                tm += "".join(" %s=%.3g" % (k, r[k]) for k in sorted(r) if k.startswith(("prec_", "autocast_")) and not k.endswith("_error"))
                e = e or next((r[k] for k in sorted(r) if k.startswith("prec_") and k.endswith("_error")), "")
                print(f"{r.get('model'):28s} {r.get('dtype', '-'):4s} b{r.get('batch', '-'):<3} {r.get('stage'):7s} {es} {tm} {e[:200]}", flush=True)


if __name__ == "__main__":
    main()
