"""A synthetic K/V/Q source shaped like real LLM attention, for the demo, tests and benchmarks.

What it reproduces, per (layer, kv head):

- **massive activations**: a few RoPE pairs carry a large, sign-stable pre-RoPE component (tens to
  hundreds of times the typical channel), on low-frequency pairs as in trained models;
- **heavy-tailed token norms**: each token's key/value is scaled by a log-normal factor;
- **structure that makes attention peaky**: keys share a per-head mean direction (attention sinks)
  and queries are noisy copies of earlier keys (retrieval) plus that direction;
- **RoPE** applied to keys and queries at their positions, NeoX or GPT-J layout.

It needs only NumPy and is deterministic for a given seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def rope_rotate(x, positions, *, layout="neox", base=10000.0):
    """Apply RoPE to ``x [S, H, d]`` at integer ``positions [S]`` (float64 math, dtype kept)."""
    S, H, d = x.shape
    half = d // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
    ang = positions.astype(np.float64)[:, None] * inv[None, :]  # [S, half]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    xf = x.astype(np.float64)
    if layout == "neox":
        a, b = xf[..., :half], xf[..., half:]
        out = np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    else:
        a, b = xf[..., 0::2], xf[..., 1::2]
        out = np.empty_like(xf)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
    return out.astype(x.dtype)


@dataclass
class SyntheticModel:
    """Parameters of the synthetic attention source (see module docstring)."""

    num_layers: int = 2
    num_kv_heads: int = 2
    group: int = 4
    head_dim: int = 128
    rope: str = "neox"
    n_massive: int = 2
    massive_scale: float = 60.0
    norm_sigma: float = 0.6
    query_gain: float = 2.0
    seed: int = 0

    def __post_init__(self):
        rng = np.random.default_rng(self.seed)
        L, H, d = self.num_layers, self.num_kv_heads, self.head_dim
        half = d // 2
        # massive pairs among the lowest-frequency quarter of pairs
        lo = half - max(self.n_massive, half // 4)
        self.massive_pairs = np.stack([
            np.stack([np.sort(rng.choice(np.arange(lo, half), self.n_massive, replace=False))
                      for _ in range(H)]) for _ in range(L)]).astype(np.int32)
        self.massive_amp = self.massive_scale * rng.uniform(0.5, 1.5, size=(L, H, self.n_massive))
        self.mean_dir = rng.standard_normal((L, H, d)) * 0.8
        self._rng = rng

    @property
    def num_q_heads(self) -> int:
        return self.num_kv_heads * self.group

    def _pair_channels(self, pairs):
        d = self.head_dim
        if self.rope == "neox":
            return np.stack([pairs, pairs + d // 2], -1)
        return np.stack([2 * pairs, 2 * pairs + 1], -1)

    def keys_values(self, layer, positions, rng=None):
        """Post-RoPE keys and values ``[S, Hkv, d]`` (float32) for token ``positions``."""
        rng = self._rng if rng is None else rng
        S, H, d = len(positions), self.num_kv_heads, self.head_dim
        norms = rng.lognormal(0.0, self.norm_sigma, size=(S, H, 1))
        k = (rng.standard_normal((S, H, d)) + self.mean_dir[layer][None]) * norms
        for h in range(H):
            ch = self._pair_channels(self.massive_pairs[layer, h])  # [n, 2]
            amp = self.massive_amp[layer, h]
            k[:, h, ch[:, 0]] = amp[None, :] * (1.0 + 0.05 * rng.standard_normal((S, len(amp))))
            k[:, h, ch[:, 1]] = 0.1 * amp[None, :] * rng.standard_normal((S, len(amp)))
        k = rope_rotate(k.astype(np.float32), np.asarray(positions), layout=self.rope)
        v = (rng.standard_normal((S, H, d)) * rng.lognormal(0.0, self.norm_sigma, size=(S, H, 1)))
        return k, v.astype(np.float32)

    def queries(self, layer, keys, position, rng=None):
        """Queries ``[Hq, d]`` (float32) at ``position`` that retrieve random earlier ``keys [S, Hkv, d]``.

        Each query head copies one earlier key of its kv head (noisy, gain ``query_gain``) plus the
        head's mean direction, RoPE'd at ``position`` relative to that key's own rotation.
        """
        rng = self._rng if rng is None else rng
        S, H, d = keys.shape
        G = self.group
        q = np.empty((H * G, d), np.float32)
        for h in range(H):
            for g in range(G):
                t = rng.integers(0, S)
                target = keys[t, h].astype(np.float64)
                noise = rng.standard_normal(d) * np.linalg.norm(target) / np.sqrt(d)
                qv = self.query_gain * (target + noise) / max(np.linalg.norm(target), 1e-6) * np.sqrt(d) / 4
                qv = qv + 0.1 * rope_rotate(self.mean_dir[layer][None, h:h + 1].astype(np.float32),
                                            np.array([position]), layout=self.rope)[0, 0]
                q[h * G + g] = qv
        return q


def calibrate_outlier_pairs(keys, n_pairs, *, rope="neox"):
    """Pick the ``n_pairs`` RoPE pairs of largest mean energy per (layer, kv head).

    Parameters
    ----------
    keys : float array ``[L, S, Hkv, d]`` (a sample of keys; pre- or post-RoPE alike, since RoPE
        preserves each pair's energy)
    n_pairs : int
    rope : {'neox', 'gptj'}

    Returns
    -------
    int32 ``[L, Hkv, n_pairs]`` for :class:`witcert_cupy.QuantConfig` ``outlier_pairs``.
    """
    k = np.asarray(keys, np.float64)
    if k.ndim != 4:
        raise ValueError(f"keys must have shape [L, S, Hkv, d], got {list(k.shape)}")
    d = k.shape[-1]
    if not 0 <= n_pairs <= d // 2:
        raise ValueError(f"n_pairs must lie in [0, {d // 2}], got {n_pairs}")
    if rope == "neox":
        energy = k[..., : d // 2] ** 2 + k[..., d // 2:] ** 2
    elif rope == "gptj":
        energy = k[..., 0::2] ** 2 + k[..., 1::2] ** 2
    else:
        raise ValueError(f"rope must be 'neox' or 'gptj', got {rope!r}")
    mean_e = energy.mean(axis=1)  # [L, Hkv, d/2]
    top = np.argsort(-mean_e, axis=-1, kind="stable")[..., :n_pairs]
    return np.sort(top, axis=-1).astype(np.int32)
