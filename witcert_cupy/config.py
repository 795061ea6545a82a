"""Validated, immutable configuration: :class:`QuantConfig` (the write path) and :class:`CertConfig`
(the certificate and its request budget).  Every default lives here."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from . import _contract as C


def _int_arg(name, value, lo=None, hi=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    value = int(value)
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi}, got {value}")
    return value


def _bool_arg(name, value):
    """A flag: True or False (a NumPy bool too); anything else, a truthy string included, is refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return bool(value)


def _float_arg(name, value, *, lo_open=None, hi_open=None):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if lo_open is not None and not value > lo_open:
        raise ValueError(f"{name} must be > {lo_open}, got {value}")
    if hi_open is not None and not value < hi_open:
        raise ValueError(f"{name} must be < {hi_open}, got {value}")
    return value


def pair_channels(head_dim, pairs, rope) -> np.ndarray:
    """Channels ``[..., 2]`` of RoPE pair indices: NeoX ``{i, i + d/2}``, GPT-J ``{2i, 2i + 1}`` (SPEC §3)."""
    pairs = np.asarray(pairs, dtype=np.int64)
    if rope == "neox":
        return np.stack([pairs, pairs + head_dim // 2], axis=-1)
    if rope == "gptj":
        return np.stack([2 * pairs, 2 * pairs + 1], axis=-1)
    raise ValueError(f"rope must be one of {sorted(C.ROPE_LAYOUTS)}, got {rope!r}")


def band_channels(head_dim, witness_bands, rope) -> np.ndarray:
    """int32 ``[B, d / B]``: the channels of each Tier-A band, whole RoPE pairs in pair order (SPEC §3)."""
    if witness_bands == 0:
        return np.zeros((0, 0), np.int32)
    if (head_dim // 2) % witness_bands:
        raise ValueError(f"witness_bands ({witness_bands}) must divide head_dim // 2 ({head_dim // 2})")
    per = head_dim // (2 * witness_bands)
    pairs = np.arange(head_dim // 2).reshape(witness_bands, per)
    return np.ascontiguousarray(pair_channels(head_dim, pairs, rope).reshape(witness_bands, 2 * per),
                                dtype=np.int32)


@dataclass(frozen=True)
class QuantConfig:
    """How K/V rows are quantized (SPEC §2–3).

    Parameters
    ----------
    head_dim : int
        ``d``, even.
    group_size : int
        Channels per fp16 scale; divides ``head_dim``.
    dither_bits : {8, 16, 24}
        Dither resolution ``m``.
    seed : int
        64-bit Philox key of the cache, ``0 <= seed < 2**64``.
    witness_bands : int
        ``B`` Tier-A witness bands per row; 0 stores no witness.  ``B`` divides ``head_dim // 2``
        (a band holds whole RoPE pairs).
    rope : {'neox', 'gptj'}
        RoPE pair layout: NeoX rotate-half pairs ``{i, i + d/2}``, GPT-J pairs ``{2i, 2i+1}``.
    outlier_pairs : array_like of int, shape ``[num_layers, num_kv_heads, n_pairs]``, optional
        RoPE pair indices stored exactly in fp16 and excluded from the group amax.
    """

    head_dim: int
    group_size: int = 32
    dither_bits: int = 8
    seed: int = 0
    witness_bands: int = 0
    rope: str = "neox"
    outlier_pairs: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self):
        d = _int_arg("head_dim", self.head_dim, lo=2, hi=1 << 12)
        if d % 2:
            raise ValueError(f"head_dim must be even, got {d}")
        gs = _int_arg("group_size", self.group_size, lo=1)
        if d % gs:
            raise ValueError(f"group_size ({gs}) must divide head_dim ({d})")
        bits = _int_arg("dither_bits", self.dither_bits)
        if bits not in C.DITHER_BITS:
            raise ValueError(f"dither_bits must be one of {C.DITHER_BITS}, got {bits}")
        seed = _int_arg("seed", self.seed, lo=0, hi=(1 << 64) - 1)
        nb = _int_arg("witness_bands", self.witness_bands, lo=0)
        if nb and (d // 2) % nb:
            raise ValueError(f"witness_bands ({nb}) must divide head_dim // 2 ({d // 2})")
        if self.rope not in C.ROPE_LAYOUTS:
            raise ValueError(f"rope must be one of {sorted(C.ROPE_LAYOUTS)}, got {self.rope!r}")
        pairs = self.outlier_pairs
        if pairs is not None:
            arr = np.asarray(pairs)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"outlier_pairs must be an integer array, got dtype {arr.dtype}")
            if arr.ndim != 3:
                raise ValueError(
                    f"outlier_pairs must have shape [num_layers, num_kv_heads, n_pairs], got {arr.shape}")
            if arr.size and (arr.min() < 0 or arr.max() >= d // 2):
                raise ValueError(f"outlier_pairs values must lie in [0, {d // 2}), got "
                                 f"[{arr.min()}, {arr.max()}]")
            srt = np.sort(arr, axis=-1)
            if arr.shape[-1] > 1 and np.any(srt[..., 1:] == srt[..., :-1]):
                raise ValueError("outlier_pairs must not repeat a pair within one (layer, kv_head)")
            arr = np.ascontiguousarray(arr, dtype=np.int32)
            arr.setflags(write=False)
            object.__setattr__(self, "outlier_pairs", arr)
        for name, val in (("head_dim", d), ("group_size", gs), ("dither_bits", bits), ("seed", seed),
                          ("witness_bands", nb)):
            object.__setattr__(self, name, val)

    # ------------------------------------------------------------------ derived quantities
    @property
    def num_groups(self) -> int:
        return self.head_dim // self.group_size

    @property
    def n_pairs(self) -> int:
        return 0 if self.outlier_pairs is None else int(self.outlier_pairs.shape[-1])

    @property
    def seed_words(self) -> tuple[int, int]:
        """Philox key ``(seed & 0xFFFFFFFF, seed >> 32)`` (SPEC §2)."""
        return self.seed & 0xFFFFFFFF, self.seed >> 32

    def bytes_per_token_side(self) -> int:
        """Bytes per token, per KV head, per side (SPEC §3): codes + scales + outliers + witness."""
        return self.head_dim + 2 * self.num_groups + 4 * self.n_pairs + 2 * self.witness_bands

    def pair_channels(self, pairs) -> np.ndarray:
        """Channels ``[..., 2]`` of RoPE pair indices ``pairs`` under this layout."""
        return pair_channels(self.head_dim, pairs, self.rope)

    def bypass_channels(self, num_layers: int, num_kv_heads: int) -> np.ndarray:
        """int32 ``[num_layers, num_kv_heads, 2 * n_pairs]``: channel of each stored outlier value."""
        if self.outlier_pairs is None:
            return np.zeros((num_layers, num_kv_heads, 0), np.int32)
        if self.outlier_pairs.shape[:2] != (num_layers, num_kv_heads):
            raise ValueError(
                f"outlier_pairs has shape {self.outlier_pairs.shape}, expected "
                f"[{num_layers}, {num_kv_heads}, n_pairs]")
        ch = self.pair_channels(self.outlier_pairs)
        return np.ascontiguousarray(ch.reshape(num_layers, num_kv_heads, -1), dtype=np.int32)

    def band_channels(self) -> np.ndarray:
        """int32 ``[witness_bands, d / witness_bands]``: channels of each band, pair by pair."""
        return band_channels(self.head_dim, self.witness_bands, self.rope)


@dataclass(frozen=True)
class CertConfig:
    """The certificate to compute during decode (SPEC §4–5).

    Parameters
    ----------
    tier : {'B', 'A', 'AB'}
        ``'A'``: deterministic witness bound (needs ``witness_bands > 0``); ``'B'``: probabilistic
        dither bound for non-adaptive queries; ``'AB'``: the per-token minimum of both.
    delta_req : float
        Failure probability budget of one request, ``0 < delta_req < 1`` (Tier B).
    num_layers : int or None
        ``L`` in ``delta_loc = delta_req / (L * Hq * T)``; None (the default) takes the pool's layer
        count, so a request over every layer of the model never overdraws ``delta_req`` (SPEC §4.4).
    steps : int
        ``T``: the request's certified decode steps (extend: query positions).  Enforced: the pool's
        ledger counts each request's certified (layer, step) units, and cells past ``L · T`` report
        ``risk = +inf`` (spec §4.4, :mod:`witcert_cupy.budget`).
    num_q_heads : int or None
        ``Hq`` of the budget: None takes the query's head count; a tensor-parallel rank that sees
        only its own heads passes the model's total, so every rank spends the same global budget.
    tau : float
        Threshold on the risk ``R``: ``tau < 1`` certified, ``tau >= 1`` risk-ranked (SPEC §7).
    """

    tier: str = "B"
    delta_req: float = 1e-2
    num_layers: int | None = None
    steps: int = 1
    tau: float = 0.2
    num_q_heads: int | None = None

    def __post_init__(self):
        if self.tier not in C.TIERS:
            raise ValueError(f"tier must be one of {sorted(C.TIERS)}, got {self.tier!r}")
        object.__setattr__(self, "delta_req", _float_arg("delta_req", self.delta_req, lo_open=0.0, hi_open=1.0))
        if self.num_layers is not None:
            object.__setattr__(self, "num_layers", _int_arg("num_layers", self.num_layers, lo=1))
        object.__setattr__(self, "steps", _int_arg("steps", self.steps, lo=1))
        object.__setattr__(self, "tau", _float_arg("tau", self.tau, lo_open=0.0))
        if self.num_q_heads is not None:
            object.__setattr__(self, "num_q_heads", _int_arg("num_q_heads", self.num_q_heads, lo=1))

    @property
    def uses_witness(self) -> bool:
        return "A" in self.tier


def bypass_for(config: QuantConfig, layer: int, num_kv_heads: int) -> np.ndarray:
    """int32 ``[Hkv, 2 n_pairs]``: the bypassed (outlier) channels of one layer of ``config``."""
    if config.outlier_pairs is None:
        return np.zeros((num_kv_heads, 0), np.int32)
    L, H = config.outlier_pairs.shape[:2]
    if H != num_kv_heads:
        raise ValueError(f"config.outlier_pairs has {H} kv heads, the rows have {num_kv_heads}")
    if layer >= L:
        raise ValueError(f"layer {layer} is outside config.outlier_pairs ({L} layers)")
    return config.bypass_channels(L, H)[layer]
