"""Black-box compression schemes, metered at run time by the Tier-A witness (SPEC §3, §4).

A scheme is any function ``x -> x̂`` on K or V rows ``[n, Hkv, d]`` (NumPy or CuPy, same shape).
:class:`SchemePool` stores what it returns in fp16 together with the witness of ``x̂ − x``, and
:func:`~witcert_cupy.decode_attention` bounds the damage with Tier A and the tanh bound whatever the
scheme does.  Built-ins (``list_schemes()``):

- ``fp8_e4m3``: a raw cast to fp8 e4m3 (3 mantissa bits, saturating at ±448, no scaling).
- ``rtn_int8`` / ``rtn_int4``: round-to-nearest, symmetric absmax scale per token per 32 channels.
- ``kivi2``: KIVI-style 2-bit, asymmetric min/max: keys per channel over the rows of one write,
  values per token per 32 channels.  A single-row write keeps its row exact (KIVI's fp16 residual).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .arrays import to_cupy
from .pool import Fp16Pool


def _xp(x):
    if isinstance(x, np.ndarray):
        return np
    import cupy

    return cupy.get_array_module(x)


class Scheme(NamedTuple):
    """A registered scheme: ``key(x)`` for K rows, ``value(x)`` for V rows, and optionally
    ``nominal_bytes(d)``: what the scheme itself would store per token, KV head and side (a
    :class:`SchemePool` stores the values in fp16 to meter them)."""

    name: str
    key: Callable
    value: Callable
    nominal_bytes: Callable | None = None


_REGISTRY: dict[str, Scheme] = {}


def register_scheme(name, fn, *, value_fn=None, nominal_bytes=None, replace=False):
    """Register ``fn(x) -> x̂`` (``x`` float ``[n, Hkv, d]``) under ``name``.

    ``value_fn`` is used for V rows when the scheme treats them differently (default: ``fn``);
    ``nominal_bytes(d)`` gives the scheme's own storage per token, KV head and side (reports).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    for arg, f in (("fn", fn), ("value_fn", value_fn)):
        if f is not None and not callable(f):
            raise TypeError(f"{arg} must be callable, got {type(f).__name__}")
    if name in _REGISTRY and not replace:
        raise ValueError(f"a scheme named {name!r} is already registered (pass replace=True)")
    _REGISTRY[name] = Scheme(name, fn, value_fn or fn, nominal_bytes)
    return _REGISTRY[name]


def get_scheme(name) -> Scheme:
    if isinstance(name, Scheme):
        return name
    if callable(name):
        return Scheme(getattr(name, "__name__", "custom"), name, name)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown scheme {name!r}; registered: {sorted(_REGISTRY)}") from None


def list_schemes() -> list[str]:
    return sorted(_REGISTRY)


# ---------------------------------------------------------------- built-ins

def fp8_e4m3(x):
    """Round to fp8 e4m3 (to nearest, ties to even), saturating at ±448; NaN stays NaN."""
    xp = _xp(x)
    x = x.astype(xp.float64)
    a = xp.abs(x)
    _, e = xp.frexp(a)                                     # a = m·2^e, m in [0.5, 1)
    step = xp.where(a >= 2.0 ** -6, xp.ldexp(xp.ones_like(a), e - 4), 2.0 ** -9)
    r = xp.rint(a / step) * step                           # exact division by a power of two
    r = xp.minimum(r, 448.0)
    return (xp.sign(x) * r).astype(xp.float32)


def _rtn(x, levels, group=32):
    xp = _xp(x)
    n, H, d = x.shape
    g = x.astype(xp.float32).reshape(n, H, d // group, group)
    s = xp.abs(g).max(-1, keepdims=True) / levels
    q = xp.where(s > 0, xp.rint(g / xp.where(s > 0, s, 1)), 0)
    return (q * s).reshape(n, H, d)


def rtn_int8(x):
    """Round to nearest with a symmetric absmax/127 scale per token per 32 channels."""
    return _rtn(x, 127.0)


def rtn_int4(x):
    """Round to nearest with a symmetric absmax/7 scale per token per 32 channels."""
    return _rtn(x, 7.0)


def _asym2(g, axis):
    xp = _xp(g)
    lo = g.min(axis, keepdims=True)
    hi = g.max(axis, keepdims=True)
    s = (hi - lo) / 3.0
    q = xp.where(s > 0, xp.clip(xp.rint((g - lo) / xp.where(s > 0, s, 1)), 0, 3), 0)
    return q * s + lo


def kivi2_key(x):
    """KIVI-style 2-bit keys: asymmetric min/max per channel over the rows of this write."""
    if x.shape[0] <= 1:
        return x.astype(_xp(x).float32)
    return _asym2(x.astype(_xp(x).float32), axis=0)


def kivi2_value(x, group=32):
    """KIVI-style 2-bit values: asymmetric min/max per token per 32 channels."""
    xp = _xp(x)
    n, H, d = x.shape
    return _asym2(x.astype(xp.float32).reshape(n, H, d // group, group), axis=-1).reshape(n, H, d)


# nominal storage per token, KV head and side: values + fp16 scales (and zero points for kivi2; its
# per-channel key statistics are amortised over the rows of a write and not counted)
register_scheme("fp8_e4m3", fp8_e4m3, nominal_bytes=lambda d: d)
register_scheme("rtn_int8", rtn_int8, nominal_bytes=lambda d: d + 2 * d // 32)
register_scheme("rtn_int4", rtn_int4, nominal_bytes=lambda d: d // 2 + 2 * d // 32)
register_scheme("kivi2", kivi2_key, value_fn=kivi2_value, nominal_bytes=lambda d: d // 4 + 4 * d // 32)


class SchemePool(Fp16Pool):
    """An :class:`Fp16Pool` that applies a black-box scheme on write (SPEC §3, black boxes).

    Stores ``x̂ = scheme(x)`` in fp16 and the Tier-A witness of ``x̂ − x``; decode meters it with
    Tier A and the tanh bound (``CertConfig(tier='A')``).

    Parameters
    ----------
    num_layers, num_kv_heads, head_dim, num_pages, page_size : int
    scheme : str, Scheme or callable
        A registered name (``list_schemes()``), a :class:`Scheme`, or ``fn(x) -> x̂``.
    witness_bands, rope, backend, keep_exact, exact_tier_pages : as for :class:`Fp16Pool` (16 bands
        by default); with an exact tier, :func:`~witcert_cupy.gated_decode` repairs the scheme
    """

    def __init__(self, num_layers, num_kv_heads, head_dim, num_pages, page_size, scheme, *, witness_bands=16,
                 rope="neox", backend="auto", keep_exact=False, exact_tier_pages=0):
        self.scheme = get_scheme(scheme)
        super().__init__(num_layers, num_kv_heads, head_dim, num_pages, page_size, witness_bands=witness_bands,
                         rope=rope, backend=backend, keep_exact=keep_exact, exact_tier_pages=exact_tier_pages)

    def write(self, layer, slots, k, v):
        """Store ``scheme(k)``, ``scheme(v)`` at ``slots`` with the witness against ``k``, ``v``."""
        _, _, rows = self._check_write(layer, slots, {"k": k, "v": v})  # validate before the scheme runs
        if self.backend == "cuda":
            rows = {n: to_cupy(x) for n, x in rows.items()}
        k, v = rows["k"], rows["v"]
        k_hat, v_hat = self.scheme.key(k), self.scheme.value(v)
        for name, src, out in (("k", k, k_hat), ("v", v, v_hat)):
            if tuple(out.shape) != tuple(src.shape):
                raise ValueError(f"scheme {self.scheme.name!r} returned shape {list(out.shape)} for {name} "
                                 f"of shape {list(src.shape)}")
        super().write(layer, slots, k, v, k_stored=k_hat, v_stored=v_hat)
