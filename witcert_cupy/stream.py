"""Philox4x32-10 and the dither stream (SPEC §1–2), public entry points for both backends."""

from __future__ import annotations

import numpy as np

from . import _contract as C
from .arrays import backend_of, check_int, check_philox_args, check_range, to_numpy
from .config import _int_arg


def _philox(counter, key, rounds):
    be = backend_of(counter=counter, key=key)
    if be == "cuda":
        from . import _cuda

        return _cuda.philox(counter, key, rounds)
    ctr = to_numpy("counter", counter)
    k = to_numpy("key", key)
    batch = check_philox_args(ctr, k)
    from ._cpu.write import philox_many

    c2 = np.ascontiguousarray(np.broadcast_to(ctr, batch + (4,))).reshape(-1, 4)
    k2 = np.ascontiguousarray(np.broadcast_to(k, batch + (2,))).reshape(-1, 2)
    out = np.empty_like(c2)
    philox_many(c2, k2, rounds, out)
    return out.reshape(batch + (4,))


def philox4x32_10(counter, key):
    """Random123 Philox4x32-10 (SPEC §1), elementwise.

    Parameters
    ----------
    counter : uint32 array, shape ``[..., 4]``
    key : uint32 array, shape ``[2]`` or ``[..., 2]`` (broadcast against ``counter``)

    Returns
    -------
    uint32 array, shape ``[..., 4]``, on the device of the inputs.
    """
    return _philox(counter, key, C.PHILOX_ROUNDS)


def dither(slots, *, layer, kv_head, side, head_dim, seed, bits=8, epoch=0):
    """The dither ξ of SPEC §2 for pool slots ``slots``.

    Parameters
    ----------
    slots : int array, shape ``[n]``
        Pool slot ids (``page * page_size + offset``), ``0 <= slot < 2**32``.
    layer, kv_head : int
        ``< 2**16`` each.
    side : {'k', 'v'}
    head_dim : int
        Channels per row (even).
    seed : int
        64-bit cache seed.
    bits : {8, 16, 24}
        Dither resolution ``m``.
    epoch : int
        Counter word 3 (slot epoch), ``< 2**32``.

    Returns
    -------
    float32 array ``[n, head_dim]``: ``ξ = (2j + 1 - 2^m) * 2^-(m+1)``, exact.
    """
    if side not in C.SIDES:
        raise ValueError(f"side must be 'k' or 'v', got {side!r}")
    layer = _int_arg("layer", layer, lo=0, hi=C.MAX_LAYER - 1)
    kv_head = _int_arg("kv_head", kv_head, lo=0, hi=C.MAX_KV_HEAD - 1)
    head_dim = _int_arg("head_dim", head_dim, lo=2)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even, got {head_dim}")
    seed = _int_arg("seed", seed, lo=0, hi=(1 << 64) - 1)
    bits = _int_arg("bits", bits)
    if bits not in C.DITHER_BITS:
        raise ValueError(f"bits must be one of {C.DITHER_BITS}, got {bits}")
    epoch = _int_arg("epoch", epoch, lo=0, hi=(1 << 32) - 1)
    if backend_of(slots=slots) == "cuda":
        from . import _cuda

        return _cuda.dither(slots, layer=layer, kv_head=kv_head, side=C.SIDES[side],
                            head_dim=head_dim, seed=seed, bits=bits, epoch=epoch)
    s = to_numpy("slots", slots)
    check_int("slots", s)
    check_range("slots", s, 0, C.MAX_SLOTS)
    from ._cpu.write import dither_rows

    out = np.empty((s.shape[0], head_dim), np.float32)
    dither_rows(s.astype(np.int64), np.full(s.shape[0], epoch, np.int64), C.SIDES[side], layer,
                kv_head, seed & 0xFFFFFFFF, seed >> 32, bits, out)
    return out
