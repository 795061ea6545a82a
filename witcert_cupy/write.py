"""The write path (SPEC §3): :func:`quantize` and :func:`dequantize` of loose K/V rows.

:class:`witcert_cupy.KVPool` writes through the same kernels straight into its paged storage.
"""

from __future__ import annotations

import numpy as np

from . import _contract as C
from .arrays import backend_of, check_float, check_int, check_range, check_shape, to_numpy
from .config import QuantConfig, _int_arg, bypass_for
from .types import QuantizedKV


def to_fp16_bits(name, x):
    """Round a host float array to fp16 (nearest even) on entry (SPEC §3.0); uint16 bit patterns."""
    if str(x.dtype) == "float16":
        return np.ascontiguousarray(x).view(np.uint16)
    if str(x.dtype) == "bfloat16":  # ml_dtypes on the host: exact widening first
        x = x.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(x.astype(np.float16)).view(np.uint16)


def check_layer_side(layer, side, num_layers=None):
    hi = C.MAX_LAYER - 1 if num_layers is None else num_layers - 1
    layer = _int_arg("layer", layer, lo=0, hi=hi)
    if side not in C.SIDES:
        raise ValueError(f"side must be 'k' or 'v', got {side!r}")
    return layer, C.SIDES[side]


def _check_slots(slots, n):
    s = to_numpy("slots", slots)
    check_int("slots", s)
    if s.shape[0] != n:
        raise ValueError(f"slots must have shape [{n}] (one per row), got {list(s.shape)}")
    check_range("slots", s, 0, C.MAX_SLOTS)
    return s.astype(np.int64)


def quantize(x, slots, *, layer, side, config: QuantConfig) -> QuantizedKV:
    """Quantize K or V rows with the subtractively dithered INT8 quantizer of SPEC §3.

    Parameters
    ----------
    x : float array ``[n, Hkv, d]`` (float16/float32/float64; rounded to fp16 on entry)
    slots : int array ``[n]``
        Pool slot of each row: the dither stream is keyed by slot, not position.
    layer : int
    side : {'k', 'v'}
    config : QuantConfig

    Returns
    -------
    QuantizedKV on the device of ``x``.
    """
    if not isinstance(config, QuantConfig):
        raise TypeError(f"config must be a QuantConfig, got {type(config).__name__}")
    layer, side_id = check_layer_side(layer, side)
    if backend_of(x=x, slots=slots) == "cuda":
        from . import _cuda

        return _cuda.quantize(x, slots, layer=layer, side=side_id, config=config)
    xh = to_numpy("x", x)
    check_float("x", xh, (None, None, config.head_dim))
    n, H, d = xh.shape
    s = _check_slots(slots, n)
    bypass = bypass_for(config, layer, H)
    from ._cpu.write import write_rows

    codes = np.empty((H, n, d), np.int8)
    scales = np.empty((H, n, config.num_groups), np.uint16)
    outl = np.empty((H, n, bypass.shape[1]), np.uint16)
    wit = np.empty((H, n, config.witness_bands), np.uint16)
    poisoned = np.zeros((n, H), np.uint8)
    k0, k1 = config.seed_words
    write_rows(to_fp16_bits("x", xh), np.arange(n, dtype=np.int64), s, np.zeros(n, np.int64), side_id,
               layer, 0, k0, k1, config.dither_bits, config.group_size, bypass, config.band_channels(),
               codes, scales, outl, wit, poisoned)
    tr = lambda a: np.ascontiguousarray(a.transpose(1, 0, 2))  # noqa: E731
    return QuantizedKV(tr(codes), tr(scales).view(np.float16), tr(outl).view(np.float16),
                       tr(wit).view(np.float16) if config.witness_bands else None)


def dequantize(qkv: QuantizedKV, slots, *, layer, side, config: QuantConfig):
    """Reconstruct ``x̂ = s16 * (k - ξ)`` (bypassed channels exact), float32 ``[n, Hkv, d]``."""
    if not isinstance(config, QuantConfig):
        raise TypeError(f"config must be a QuantConfig, got {type(config).__name__}")
    if not isinstance(qkv, QuantizedKV):
        raise TypeError(f"qkv must be a QuantizedKV, got {type(qkv).__name__}")
    layer, side_id = check_layer_side(layer, side)
    if backend_of(codes=qkv.codes, slots=slots) == "cuda":
        from . import _cuda

        return _cuda.dequantize(qkv, slots, layer=layer, side=side_id, config=config)
    codes = to_numpy("qkv.codes", qkv.codes)
    if codes.dtype != np.int8:
        raise TypeError(f"qkv.codes must be int8, got dtype {codes.dtype}")
    check_shape("qkv.codes", codes, (None, None, config.head_dim))
    n, H, d = codes.shape
    scales = to_numpy("qkv.scales", qkv.scales)
    if scales.dtype != np.float16:
        raise TypeError(f"qkv.scales must be float16, got dtype {scales.dtype}")
    check_shape("qkv.scales", scales, (n, H, config.num_groups))
    bypass = bypass_for(config, layer, H)
    outl = to_numpy("qkv.outliers", qkv.outliers)
    if outl.dtype != np.float16:
        raise TypeError(f"qkv.outliers must be float16, got dtype {outl.dtype}")
    check_shape("qkv.outliers", outl, (n, H, bypass.shape[1]))
    s = _check_slots(slots, n)
    from ._cpu.write import dequant_rows

    tr = lambda a: np.ascontiguousarray(a.transpose(1, 0, 2))  # noqa: E731
    out = np.empty((n, H, d), np.float32)
    k0, k1 = config.seed_words
    dequant_rows(tr(codes), tr(scales).view(np.uint16), tr(outl).view(np.uint16),
                 np.arange(n, dtype=np.int64), s, np.zeros(n, np.int64), side_id, layer, 0, k0, k1,
                 config.dither_bits, config.group_size, bypass, out)
    return out
