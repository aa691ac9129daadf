#!/usr/bin/python3
"""llm_ref.py: tiny Hugging Face model folders with random weights, and a
numpy reference of their forward pass and greedy generation, for the tests
of `rill llm` (tests/test_llm_cli.sh). numpy only: safetensors is a JSON
header and raw bytes, written here; the reference computes in float64 from
the weights as stored, in transformers' formulation of each family.

  llm_ref.py make DIR ARCH [--dtype f32|f16|bf16|mixed] [--shards N] [--tie]
             [--rope linear|llama3] [--eos ID,...] [--seed S]
  llm_ref.py ids OUT.npy ROWS COLS VOCAB SEED     random prompt ids
  llm_ref.py greedy DIR IDS.npy LENS.npy N OUT.npy   the new ids, i64[B,N]
  llm_ref.py logits DIR IDS.npy LENS.npy OUT.npy     prefill's logits [B,V]
  llm_ref.py tp-weights|pp-weights|cnn-weights OUT.safetensors SEED
                                                     the splitting tests' weights
  llm_ref.py drop DIR NAME          rewrite model.safetensors without tensor NAME
  llm_ref.py config DIR KEY=JSON... set (or with KEY=, remove) config.json's keys
"""
import json
import math
import os
import struct
import sys

import numpy as np


# ---- safetensors ----
def bf16_bits(a):
    """float32 -> bfloat16 bits, round to nearest even"""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    """tensors: name -> float array, stored in dtype"""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        if dtype == "mixed":  # norms in f32, the rest in bf16
            dt = "f32" if a.ndim == 1 else "bf16"
        else:
            dt = dtype
        if dt == "f32":
            b, tag = np.ascontiguousarray(a, dtype="<f4").tobytes(), "F32"
        elif dt == "f16":
            b, tag = np.ascontiguousarray(a, dtype="<f2").tobytes(), "F16"
        else:
            b, tag = bf16_bits(a).astype("<u2").tobytes(), "BF16"
        header[name] = {"dtype": tag, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = data[8 + n + b:8 + n + en]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, "<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2")
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(e["dtype"])
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    w = {}
    if os.path.exists(idx):
        for f in sorted(set(json.load(open(idx))["weight_map"].values())):
            w.update(read_safetensors(os.path.join(d, f)))
    else:
        w = read_safetensors(os.path.join(d, "model.safetensors"))
    return cfg, w


# ---- making a model ----
def make(d, arch, dtype="f32", shards=1, tie=False, rope=None, eos=None, seed=0, vocab=97, kv_heads=2):
    rng = np.random.default_rng(seed)
    os.makedirs(d, exist_ok=True)

    def mat(o, i):
        return rng.standard_normal((o, i)) / math.sqrt(i)

    def vec(n, scale=0.1, base=0.0):
        return base + scale * rng.standard_normal(n)

    t = {}
    V, H, L = vocab, 64, 2
    if arch == "gpt2":
        P, I = 64, 256
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": H, "n_layer": L, "n_head": 4,
               "vocab_size": V, "n_positions": P, "n_inner": None, "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "bos_token_id": V - 1, "eos_token_id": V - 1}
        t["transformer.wte.weight"] = rng.standard_normal((V, H))
        t["transformer.wpe.weight"] = 0.5 * rng.standard_normal((P, H))
        for i in range(L):
            p = "transformer.h.%d." % i
            t[p + "ln_1.weight"], t[p + "ln_1.bias"] = vec(H, 0.1, 1.0), vec(H)
            t[p + "attn.c_attn.weight"], t[p + "attn.c_attn.bias"] = mat(H, 3 * H), vec(3 * H)
            t[p + "attn.c_proj.weight"], t[p + "attn.c_proj.bias"] = mat(H, H), vec(H)
            t[p + "ln_2.weight"], t[p + "ln_2.bias"] = vec(H, 0.1, 1.0), vec(H)
            t[p + "mlp.c_fc.weight"], t[p + "mlp.c_fc.bias"] = mat(H, I), vec(I)
            t[p + "mlp.c_proj.weight"], t[p + "mlp.c_proj.bias"] = mat(I, H), vec(H)
        t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = vec(H, 0.1, 1.0), vec(H)
        if not tie:
            t["lm_head.weight"] = mat(V, H)
            cfg["tie_word_embeddings"] = False
    else:
        Hq, Hkv, D, I = 4, kv_heads, 16, 128
        names = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
        cfg = {"architectures": [names[arch]], "model_type": arch, "hidden_size": H, "num_hidden_layers": L,
               "num_attention_heads": Hq, "num_key_value_heads": Hkv, "intermediate_size": I, "vocab_size": V,
               "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500.0,
               "tie_word_embeddings": tie, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
               "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "mixed": "bfloat16"}[dtype]}
        if arch == "mistral":
            cfg["sliding_window"] = 4096
        if arch == "qwen2":
            cfg["use_sliding_window"] = False
            cfg["eos_token_id"] = 3
        if arch == "llama" and rope in (None, "default"):
            # transformers 5 writes the theta (and any scaling) as rope_parameters
            del cfg["rope_theta"]
            cfg["rope_parameters"] = {"rope_theta": 500.0, "rope_type": "default"}
        if rope == "linear":
            cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
        elif rope == "llama3":
            cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        t["model.embed_tokens.weight"] = rng.standard_normal((V, H))
        for i in range(L):
            p = "model.layers.%d." % i
            t[p + "input_layernorm.weight"] = vec(H, 0.1, 1.0)
            t[p + "self_attn.q_proj.weight"] = mat(Hq * D, H)
            t[p + "self_attn.k_proj.weight"] = mat(Hkv * D, H)
            t[p + "self_attn.v_proj.weight"] = mat(Hkv * D, H)
            if arch == "qwen2":
                t[p + "self_attn.q_proj.bias"] = vec(Hq * D, 0.5)
                t[p + "self_attn.k_proj.bias"] = vec(Hkv * D, 0.5)
                t[p + "self_attn.v_proj.bias"] = vec(Hkv * D, 0.5)
            t[p + "self_attn.o_proj.weight"] = mat(H, Hq * D)
            t[p + "post_attention_layernorm.weight"] = vec(H, 0.1, 1.0)
            t[p + "mlp.gate_proj.weight"] = mat(I, H)
            t[p + "mlp.up_proj.weight"] = mat(I, H)
            t[p + "mlp.down_proj.weight"] = mat(H, I)
        t["model.norm.weight"] = vec(H, 0.1, 1.0)
        if not tie:
            t["lm_head.weight"] = mat(V, H)
    if eos is not None:
        cfg["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    names = list(t)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), t, dtype)
        return
    wm = {}
    for s in range(shards):
        f = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {n: t[n] for n in names[s::shards]}
        write_safetensors(os.path.join(d, f), part, dtype)
        wm.update({n: f for n in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wm},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)


# ---- the forward pass ----
def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def inv_freq(cfg, rd):
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    f = theta ** (-np.arange(0, rd, 2, dtype=np.float64) / rd)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        f = f / rs["factor"]
    elif kind == "llama3":  # transformers' _compute_llama3_parameters
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / f
        scaled = np.where(wavelen > old / lo, f / factor, f)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
        f = np.where(medium, smoothed, scaled)
    return f


def rope(x, pos, f):
    """x [L, heads, D], GPT-NeoX halves"""
    rd = 2 * len(f)
    a = pos[:, None] * f[None, :]
    c, s = np.cos(a)[:, None, :], np.sin(a)[:, None, :]
    x1, x2 = x[..., :rd // 2], x[..., rd // 2:rd]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, x[..., rd:]], axis=-1)


def attend(q, k, v, scale):
    """q [L,Hq,D], k and v [L,Hkv,D]; causal"""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) * scale
    L = q.shape[0]
    s = np.where(np.tril(np.ones((L, L), bool))[None], s, -np.inf)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", s, v).reshape(L, -1)


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def logits_of(cfg, w, toks):
    """the logits after the last of toks"""
    toks = np.asarray(toks)
    L = len(toks)
    pos = np.arange(L, dtype=np.float64)
    if cfg["model_type"] == "gpt2":
        p = "transformer." if "transformer.wte.weight" in w else ""
        H, nh = cfg["n_embd"], cfg["n_head"]
        eps = cfg.get("layer_norm_epsilon", 1e-5)
        h = w[p + "wte.weight"][toks] + w[p + "wpe.weight"][:L]
        for i in range(cfg["n_layer"]):
            q = "%sh.%d." % (p, i)
            x = layer_norm(h, w[q + "ln_1.weight"], w[q + "ln_1.bias"], eps)
            qkv = x @ w[q + "attn.c_attn.weight"] + w[q + "attn.c_attn.bias"]
            qq, kk, vv = (a.reshape(L, nh, H // nh) for a in np.split(qkv, 3, axis=-1))
            a = attend(qq, kk, vv, 1 / math.sqrt(H // nh))
            h = h + a @ w[q + "attn.c_proj.weight"] + w[q + "attn.c_proj.bias"]
            y = layer_norm(h, w[q + "ln_2.weight"], w[q + "ln_2.bias"], eps)
            f = gelu_tanh(y @ w[q + "mlp.c_fc.weight"] + w[q + "mlp.c_fc.bias"])
            h = h + f @ w[q + "mlp.c_proj.weight"] + w[q + "mlp.c_proj.bias"]
        h = layer_norm(h[-1], w[p + "ln_f.weight"], w[p + "ln_f.bias"], eps)
        head = w.get("lm_head.weight", w[p + "wte.weight"])
        return head @ h
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    D = cfg.get("head_dim", H // nh)
    eps = cfg.get("rms_norm_eps", 1e-6)
    f = inv_freq(cfg, D)
    h = w["model.embed_tokens.weight"][toks]
    for i in range(cfg["num_hidden_layers"]):
        q = "model.layers.%d." % i

        def proj(name, x):
            y = x @ w[q + name + ".weight"].T
            return y + w[q + name + ".bias"] if q + name + ".bias" in w else y

        x = rms_norm(h, w[q + "input_layernorm.weight"], eps)
        qq = rope(proj("self_attn.q_proj", x).reshape(L, nh, D), pos, f)
        kk = rope(proj("self_attn.k_proj", x).reshape(L, nkv, D), pos, f)
        vv = proj("self_attn.v_proj", x).reshape(L, nkv, D)
        h = h + proj("self_attn.o_proj", attend(qq, kk, vv, 1 / math.sqrt(D)))
        y = rms_norm(h, w[q + "post_attention_layernorm.weight"], eps)
        g = proj("mlp.gate_proj", y)
        h = h + proj("mlp.down_proj", g / (1 + np.exp(-g)) * proj("mlp.up_proj", y))
    h = rms_norm(h[-1], w["model.norm.weight"], eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
    return head @ h


def eos_pad(cfg):
    e = cfg.get("eos_token_id")
    eos = [] if e is None else e if isinstance(e, list) else [e]
    pad = cfg.get("pad_token_id")
    return eos, pad if pad is not None else (eos[0] if eos else 0)


def greedy(d, ids, lens, n):
    """each row alone (its first lens[b] ids), n new ids; after an end id, pad ids"""
    cfg, w = load(d)
    eos, pad = eos_pad(cfg)
    out = np.zeros((ids.shape[0], n), np.int64)
    for b in range(ids.shape[0]):
        toks, done = list(ids[b, :lens[b]]), False
        for i in range(n):
            if done:
                out[b, i] = pad
                continue
            t = int(np.argmax(logits_of(cfg, w, toks)))
            out[b, i] = t
            toks.append(t)
            done = t in eos
    return out


def split_weights(kind, path, seed):
    """The random f32 weights of the splitting tests' fixtures (tests/fixtures/tp, pp): tp, pp or cnn."""
    rng = np.random.default_rng(seed)
    m = lambda o, i: rng.standard_normal((o, i)) / np.sqrt(i)
    v = lambda n: 0.1 * rng.standard_normal(n)
    if kind == "tp":
        t = {"up.weight": m(128, 64), "up.bias": v(128), "down.weight": m(64, 128), "down.bias": v(64),
             "q.weight": m(64, 64), "q.bias": v(64), "k.weight": m(32, 64), "v.weight": m(32, 64), "o.weight": m(64, 64),
             "gate.weight": m(128, 64), "head.weight": m(96, 64), "q3.weight": m(48, 64), "k3.weight": m(48, 64), "v3.weight": m(48, 64),
             "o3.weight": m(64, 48)}
    elif kind == "cnn":
        t = {"conv.weight": rng.standard_normal((8, 3, 3, 3)) / 5, "conv.bias": v(8), "fc1.weight": m(64, 128), "fc1.bias": v(64),
             "fc2.weight": m(10, 64), "fc2.bias": v(10), "k.weight": m(32, 64), "ko.weight": m(64, 32)}
    else:
        t = {"l1.weight": m(128, 64), "l1.bias": v(128), "l2.weight": m(64, 128), "l2.bias": v(64),
             "l3.weight": m(128, 64), "l3.bias": v(128), "l4.weight": m(64, 128), "l4.bias": v(64)}
        for l in range(4):
            p = f"layers.{l}."
            t.update({p + "ln1": 1 + v(64), p + "wq": m(64, 64), p + "wk": m(64, 64), p + "wv": m(64, 64), p + "wo": m(64, 64), p + "ln2": 1 + v(64),
                      p + "wg": m(128, 64), p + "wu": m(128, 64), p + "wd": m(64, 128)})
    write_safetensors(path, t, "f32")


def main(argv):
    cmd = argv[1]
    if cmd == "make":
        d, arch, opts = argv[2], argv[3], argv[4:]
        kw = {}
        i = 0
        while i < len(opts):
            o = opts[i]
            if o == "--tie":
                kw["tie"] = True
                i += 1
                continue
            v = opts[i + 1]
            i += 2
            if o == "--dtype":
                kw["dtype"] = v
            elif o == "--shards":
                kw["shards"] = int(v)
            elif o == "--rope":
                kw["rope"] = v
            elif o == "--eos":
                kw["eos"] = [int(x) for x in v.split(",")]
            elif o == "--seed":
                kw["seed"] = int(v)
            elif o == "--vocab":
                kw["vocab"] = int(v)
            elif o == "--kv-heads":
                kw["kv_heads"] = int(v)
            else:
                raise SystemExit("unknown option " + o)
        make(d, arch, **kw)
    elif cmd == "ids":
        rows, cols, vocab, seed = (int(x) for x in argv[3:7])
        np.save(argv[2], np.random.default_rng(seed).integers(0, vocab, (rows, cols)).astype(np.int64))
    elif cmd == "greedy":
        ids, lens = np.load(argv[3]), np.load(argv[4])
        np.save(argv[6], greedy(argv[2], ids, lens, int(argv[5])))
    elif cmd == "logits":
        cfg, w = load(argv[2])
        ids, lens = np.load(argv[3]), np.load(argv[4])
        np.save(argv[5], np.stack([logits_of(cfg, w, ids[b, :lens[b]]) for b in range(ids.shape[0])]).astype(np.float32))
    elif cmd in ("tp-weights", "pp-weights", "cnn-weights"):
        split_weights(cmd[:-8], argv[2], int(argv[3]))
    elif cmd == "drop":
        path = os.path.join(argv[2], "model.safetensors")
        t = read_safetensors(path)
        del t[argv[3]]
        write_safetensors(path, t, "f32")
    elif cmd == "config":
        path = os.path.join(argv[2], "config.json")
        cfg = json.load(open(path))
        for kv in argv[3:]:
            k, v = kv.split("=", 1)
            if v:
                cfg[k] = json.loads(v)
            else:
                cfg.pop(k, None)
        json.dump(cfg, open(path, "w"), indent=2)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
