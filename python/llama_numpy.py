"""A Llama/Qwen-style decoder in NumPy (CuPy on the GPU) on the certified INT8 cache (issue 8).

    python3 python/llama_numpy.py --make-tiny /tmp/tiny            # a random checkpoint to play with
    python3 python/llama_numpy.py --model /tmp/tiny --prompt-len 48 --steps 32 [--backend cuda] [--gate]

The model (RMSNorm, RoPE in the NeoX rotate-half layout, GQA attention, SwiGLU MLP) loads a Hugging
Face checkpoint directory (``config.json`` + ``*.safetensors``, through the ``safetensors``
package).  The prompt is prefilled with :func:`witcert_cupy.extend_attention`; then tokens are fed
one at a time (teacher forcing) with :func:`witcert_cupy.decode_attention`, certificates and
telemetry on, optionally through :func:`witcert_cupy.gated_decode`.  The same tokens run through an
exact fp16 cache (:class:`witcert_cupy.Fp16Pool`); per step the script reports the KL divergence of
the next-token distributions, top-1 and top-5 agreement, and the largest certified TV bound.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import witcert_cupy as wc  # noqa: E402


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = False

    @classmethod
    def from_dir(cls, path):
        c = json.loads((Path(path) / "config.json").read_text())
        heads = c["num_attention_heads"]
        return cls(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
                   intermediate_size=c["intermediate_size"], num_hidden_layers=c["num_hidden_layers"],
                   num_attention_heads=heads, num_key_value_heads=c.get("num_key_value_heads", heads),
                   head_dim=c.get("head_dim") or c["hidden_size"] // heads, rms_norm_eps=c.get("rms_norm_eps", 1e-6),
                   rope_theta=c.get("rope_theta", 10000.0), tie_word_embeddings=c.get("tie_word_embeddings", False))


def load_weights(path, xp=np):
    """Every tensor of the checkpoint's ``*.safetensors`` files as float32 arrays of ``xp``."""
    from safetensors.numpy import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    w = {}
    for f in files:
        for name, arr in load_file(str(f)).items():
            w[name] = xp.asarray(arr.astype(np.float32))
    return w


def make_tiny_checkpoint(path, *, layers=2, hidden=512, heads=8, kv_heads=2, head_dim=64, inter=1024, vocab=512,
                         seed=0):
    """Write a random Llama checkpoint (``config.json`` + ``model.safetensors``, fp16 weights) that
    transformers' ``LlamaForCausalLM`` also loads."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "head_dim": head_dim, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "max_position_embeddings": 4096, "tie_word_embeddings": False, "hidden_act": "silu",
           "attention_bias": False, "mlp_bias": False, "torch_dtype": "float16"}
    (path / "config.json").write_text(json.dumps(cfg, indent=1))

    def lin(o, i, scale=1.0):
        return (rng.standard_normal((o, i)) * scale / math.sqrt(i)).astype(np.float16)

    w = {"model.embed_tokens.weight": (rng.standard_normal((vocab, hidden))).astype(np.float16),
         "model.norm.weight": (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float16),
         "lm_head.weight": lin(vocab, hidden, 4.0)}
    for i in range(layers):
        p = f"model.layers.{i}."
        # q/k scaled up so attention is peaked, and one RoPE pair of k gets a massive activation
        k = lin(kv_heads * head_dim, hidden, 3.0)
        k[0::head_dim] *= 8
        w.update({p + "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float16),
                  p + "post_attention_layernorm.weight": (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float16),
                  p + "self_attn.q_proj.weight": lin(heads * head_dim, hidden, 3.0),
                  p + "self_attn.k_proj.weight": k,
                  p + "self_attn.v_proj.weight": lin(kv_heads * head_dim, hidden),
                  p + "self_attn.o_proj.weight": lin(hidden, heads * head_dim),
                  p + "mlp.gate_proj.weight": lin(inter, hidden),
                  p + "mlp.up_proj.weight": lin(inter, hidden),
                  p + "mlp.down_proj.weight": lin(hidden, inter)})
    save_file(w, str(path / "model.safetensors"))
    return path


def rms_norm(x, w, eps, xp):
    var = (x * x).mean(-1, keepdims=True)
    return x / xp.sqrt(var + eps) * w


def rope(x, pos, theta, xp):
    """NeoX rotate-half RoPE of ``x [n, H, hd]`` at positions ``pos [n]``."""
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (xp.arange(0, hd, 2, dtype=xp.float64) / hd))
    ang = xp.asarray(pos, xp.float64)[:, None] * inv[None, :]           # [n, hd/2]
    cos = xp.concatenate([xp.cos(ang), xp.cos(ang)], -1)[:, None, :].astype(xp.float32)
    sin = xp.concatenate([xp.sin(ang), xp.sin(ang)], -1)[:, None, :].astype(xp.float32)
    half = hd // 2
    rot = xp.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


class CachedLlama:
    """One sequence through the model with a paged KV cache of the library.

    Parameters
    ----------
    cfg : LlamaConfig
    weights : dict of float32 arrays (NumPy or CuPy)
    cache : {'int8', 'fp16'}
        The certified dithered INT8 :class:`~witcert_cupy.KVPool` (Tier AB, witness, exact
        backing store for the gate) or the exact fp16 :class:`~witcert_cupy.Fp16Pool`.
    max_tokens : int
    backend : {'cpu', 'cuda'}
    steps : int
        ``T`` of the certificate budget (every certified position of the sequence).
    """

    def __init__(self, cfg, weights, *, cache="int8", max_tokens=512, backend="cpu", steps=512, page_size=16,
                 tau=0.2, gate=False):
        self.cfg, self.w, self.cache, self.backend = cfg, weights, cache, backend
        self.xp = np if backend == "cpu" else __import__("cupy")
        L, Hkv, hd = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
        self.page = page_size
        npg = -(-max_tokens // page_size)
        if cache == "int8":
            self.pool = wc.KVPool(L, Hkv, hd, npg, page_size, wc.QuantConfig(hd, witness_bands=16), backend=backend,
                                  keep_exact=gate, exact_tier_pages=L * Hkv * npg if gate else 0)
            self.cert = wc.CertConfig(tier="AB", num_layers=L, steps=steps, tau=tau)
            self.telemetry = wc.Telemetry(L, cfg.num_attention_heads, self.cert, backend=backend)
        elif cache == "fp16":
            self.pool = wc.Fp16Pool(L, Hkv, hd, npg, page_size, backend=backend)
            self.cert = self.telemetry = None
        else:
            raise ValueError(f"cache must be 'int8' or 'fp16', got {cache!r}")
        self.tau, self.gate = tau, gate
        self.len = 0
        self.pages_repaired = 0

    def _table(self, n):
        xp = self.xp
        npg = -(-n // self.page)
        return (xp.asarray([0, npg], np.int32), xp.arange(npg, dtype=xp.int32),
                xp.asarray([n - (npg - 1) * self.page], np.int32))

    def forward(self, tokens):
        """Feed ``tokens`` (int, a prefill when there are several); returns ``(logits [n, V]
        float32, tv_bound [n, L, Hq] or None)``."""
        xp, cfg, w = self.xp, self.cfg, self.w
        n = len(tokens)
        pos = np.arange(self.len, self.len + n)
        slots = xp.asarray(pos, dtype=xp.int64)
        x = w["model.embed_tokens.weight"][xp.asarray(tokens)]
        H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        ip, ix, ll = self._table(self.len + n)
        tv = []
        for layer in range(cfg.num_hidden_layers):
            p = f"model.layers.{layer}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps, xp)
            q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, H, hd), pos, cfg.rope_theta, xp)
            k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, Hkv, hd), pos, cfg.rope_theta, xp)
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, Hkv, hd)
            self.pool.write(layer, slots, xp.ascontiguousarray(k), xp.ascontiguousarray(v))
            q = xp.ascontiguousarray(q, dtype=xp.float32)
            if n > 1:
                r = wc.extend_attention(q, self.pool, layer=layer, qo_indptr=xp.asarray([0, n], np.int32),
                                        kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=self.cert)
            elif self.gate:
                r, rep = wc.gated_decode(q, self.pool, layer=layer, kv_indptr=ip, kv_indices=ix,
                                         kv_last_page_len=ll, cert=self.cert)
                self.pages_repaired += rep.pages_repaired
            else:
                r = wc.decode_attention(q, self.pool, layer=layer, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll,
                                        cert=self.cert, telemetry=self.telemetry)
            if r.tv_bound is not None:
                tv.append(r.tv_bound)
            x = x + r.o.reshape(n, H * hd) @ w[p + "self_attn.o_proj.weight"].T
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps, xp)
            g = h @ w[p + "mlp.gate_proj.weight"].T
            x = x + ((g / (1 + xp.exp(-g))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
        x = rms_norm(x, w["model.norm.weight"], cfg.rms_norm_eps, xp)
        head = w["model.embed_tokens.weight"] if cfg.tie_word_embeddings else w["lm_head.weight"]
        self.len += n
        return x @ head.T, (xp.stack(tv, 1) if tv else None)


def reference_logits(cfg, w, tokens):
    """float64 NumPy forward of the whole sequence with full causal attention and no cache."""
    w = {k: np.asarray(v.get() if hasattr(v, "get") else v, np.float64) for k, v in w.items()}
    n = len(tokens)
    H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    G = H // Hkv
    pos = np.arange(n)
    x = w["model.embed_tokens.weight"][np.asarray(tokens)]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.rms_norm_eps, np)
        q = rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(n, H, hd), pos, cfg.rope_theta, np).astype(np.float64)
        k = rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(n, Hkv, hd), pos, cfg.rope_theta, np).astype(np.float64)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(n, Hkv, hd)
        k, v = np.repeat(k, G, 1), np.repeat(v, G, 1)
        s = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        o = np.einsum("hij,jhd->ihd", s / s.sum(-1, keepdims=True), v)
        x = x + o.reshape(n, H * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps, np)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], cfg.rms_norm_eps, np)
    head = w["model.embed_tokens.weight"] if cfg.tie_word_embeddings else w["lm_head.weight"]
    return x @ head.T


def _log_softmax(z):
    z = np.asarray(z, np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def teacher_forced(model_dir, tokens, prompt_len, *, backend="cpu", gate=False, tau=0.2):
    """Run ``tokens`` through the INT8 and the fp16 caches: prefill ``prompt_len`` tokens, then one
    token per step.  Returns a dict with per-step KL(fp16 ‖ int8), top-1/top-5 agreement, the max TV
    bound, the telemetry snapshot, and the logits of both caches ``[n, V]``."""
    cfg = LlamaConfig.from_dir(model_dir)
    xp = np if backend == "cpu" else __import__("cupy")
    w = load_weights(model_dir, xp)
    n = len(tokens)
    runs = {}
    for cache in ("fp16", "int8"):
        m = CachedLlama(cfg, w, cache=cache, max_tokens=n, backend=backend, steps=n, gate=gate and cache == "int8",
                        tau=tau)
        lg, tv = m.forward(tokens[:prompt_len])
        logits, tvs = [lg], [tv]
        for t in range(prompt_len, n):
            lg, tv = m.forward(tokens[t:t + 1])
            logits.append(lg)
            tvs.append(tv)
        to_np = lambda a: a.get() if hasattr(a, "get") else np.asarray(a)  # noqa: E731
        runs[cache] = (np.concatenate([to_np(x) for x in logits]),
                       None if tvs[0] is None else np.concatenate([to_np(x) for x in tvs]), m)
    lf, li = _log_softmax(runs["fp16"][0]), _log_softmax(runs["int8"][0])
    kl = (np.exp(lf) * (lf - li)).sum(-1)
    top5 = lambda z: np.argsort(-z, -1)[:, :5]  # noqa: E731
    t5f, t5i = top5(lf), top5(li)
    m8 = runs["int8"][2]
    return {
        "positions": n, "prompt_len": prompt_len,
        "kl": kl, "top1_agree": (t5f[:, 0] == t5i[:, 0]), "top5_overlap": np.array(
            [len(set(a) & set(b)) / 5 for a, b in zip(t5f, t5i)]),
        "max_tv_bound": runs["int8"][1].reshape(n, -1).max(-1),
        "telemetry": m8.telemetry.snapshot() if not gate else None, "pages_repaired": m8.pages_repaired,
        "logits_fp16": runs["fp16"][0], "logits_int8": runs["int8"][0],
        "int8_bytes_per_token": m8.pool.bytes_per_token(), "fp16_bytes_per_token": runs["fp16"][2].pool.bytes_per_token(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--make-tiny", metavar="DIR", help="write a random tiny checkpoint to DIR and exit")
    ap.add_argument("--model", help="checkpoint directory (config.json + *.safetensors)")
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--steps", type=int, default=32, help="teacher-forced decode steps after the prompt")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--gate", action="store_true", help="decode through gated_decode (tau 0.2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the per-step numbers here")
    a = ap.parse_args()
    if a.make_tiny:
        print("wrote", make_tiny_checkpoint(a.make_tiny))
        return
    if not a.model:
        ap.error("--model is required (or --make-tiny DIR)")
    cfg = LlamaConfig.from_dir(a.model)
    tokens = np.random.default_rng(a.seed).integers(0, cfg.vocab_size, a.prompt_len + a.steps).tolist()
    r = teacher_forced(a.model, tokens, a.prompt_len, backend=a.backend, gate=a.gate)
    P = a.prompt_len
    print(f"{'pos':>4} {'KL(fp16||int8)':>15} {'top1':>5} {'top5':>5} {'max TV bound':>12}")
    for i in range(P - 1, r["positions"]):
        print(f"{i:4d} {r['kl'][i]:15.3e} {int(r['top1_agree'][i]):5d} {r['top5_overlap'][i]:5.2f} "
              f"{r['max_tv_bound'][i]:12.3e}", flush=True)
    dec = slice(P - 1, r["positions"])
    summary = {"model": a.model, "backend": a.backend, "gate": a.gate, "prompt_len": P, "steps": a.steps,
               "mean_kl": float(r["kl"][dec].mean()), "top1_agreement": float(r["top1_agree"][dec].mean()),
               "top5_overlap": float(r["top5_overlap"][dec].mean()),
               "max_tv_bound": float(r["max_tv_bound"][dec].max()), "pages_repaired": r["pages_repaired"],
               "int8_bytes_per_token": r["int8_bytes_per_token"], "fp16_bytes_per_token": r["fp16_bytes_per_token"],
               "coverage": None if r["telemetry"] is None else r["telemetry"]["coverage"]}
    print(json.dumps(summary))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
