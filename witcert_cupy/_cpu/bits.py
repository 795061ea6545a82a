"""Bit-exact scalar primitives for the numba kernels: Philox4x32 (SPEC §1), the dither field
(SPEC §2) and IEEE fp16 <-> fp32 conversions with the roundings the write path needs (SPEC §3).

numba widens uint32 arithmetic to 64 bits, so every 32-bit value here lives in a uint64 and is
masked explicitly after each operation that can carry past bit 31.  Mixing a uint64 with a Python
int literal makes numba fall back to float64, hence the typed module constants.

The CUDA twins are in ``cuda/philox.cuh`` and ``cuda/common.cuh``.
"""

import numpy as np
from numba import njit

from .. import _contract as C

_U32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_M0 = np.uint64(C.PHILOX_M0)
_M1 = np.uint64(C.PHILOX_M1)
_W0 = np.uint64(C.PHILOX_W0)
_W1 = np.uint64(C.PHILOX_W1)


@njit(inline="always", cache=True)
def philox4x32(c0, c1, c2, c3, k0, k1, rounds):
    """Philox4x32-``rounds`` of one counter; all arguments and results are uint64 holding 32 bits."""
    c0 = np.uint64(c0) & _U32
    c1 = np.uint64(c1) & _U32
    c2 = np.uint64(c2) & _U32
    c3 = np.uint64(c3) & _U32
    k0 = np.uint64(k0) & _U32
    k1 = np.uint64(k1) & _U32
    for r in range(rounds):
        if r > 0:
            k0 = (k0 + _W0) & _U32
            k1 = (k1 + _W1) & _U32
        p0 = _M0 * c0
        p1 = _M1 * c2
        n0 = (p1 >> _S32) ^ c1 ^ k0
        n1 = p1 & _U32
        n2 = (p0 >> _S32) ^ c3 ^ k1
        n3 = p0 & _U32
        c0, c1, c2, c3 = n0, n1, n2, n3
    return c0, c1, c2, c3


@njit(inline="always", cache=True)
def dither_counter1(side, chunk):
    """ctr1 = (side << 31) | chunk (SPEC §2)."""
    return (np.uint64(side) << np.uint64(C.SIDE_SHIFT)) | np.uint64(chunk)


@njit(inline="always", cache=True)
def dither_counter2(layer, kv_head):
    """ctr2 = (layer << 16) | kv_head (SPEC §2)."""
    return (np.uint64(layer) << np.uint64(C.LAYER_SHIFT)) | np.uint64(kv_head)


@njit(inline="always", cache=True)
def xi_field(lane, bits):
    """(word index, bit shift) of lane ``lane`` (= channel % per_call) within one Philox call (SPEC §2)."""
    if bits == 24:
        return lane, 8
    fields = 32 // bits
    return lane // fields, bits * (lane % fields)


@njit(inline="always", cache=True)
def xi_from_words(w0, w1, w2, w3, lane, bits):
    """ξ of lane ``lane`` of one Philox call (SPEC §2), as float32 (exact)."""
    widx, shift = xi_field(lane, bits)
    if widx == 0:
        word = np.uint64(w0)
    elif widx == 1:
        word = np.uint64(w1)
    elif widx == 2:
        word = np.uint64(w2)
    else:
        word = np.uint64(w3)
    j = np.int64((word >> np.uint64(shift)) & np.uint64((1 << bits) - 1))
    num = 2 * j + 1 - (np.int64(1) << bits)
    return np.float32(num) * np.float32(2.0 ** -(bits + 1))


@njit(cache=True)
def dither_inputs(slots, sides, layers, heads, channels, epochs, bits, out):
    """The Philox input of each (slot, side, layer, kv_head, channel): ``out int64 [n, 6]`` =
    (ctr0, ctr1, ctr2, ctr3, word, shift).  Used to test that no two tuples share one."""
    per_call = 16 if bits == 8 else (8 if bits == 16 else 4)
    for i in range(slots.shape[0]):
        lane = channels[i] % per_call
        widx, shift = xi_field(lane, bits)
        out[i, 0] = np.int64(np.uint64(slots[i]) & _U32)
        out[i, 1] = np.int64(dither_counter1(sides[i], channels[i] // per_call))
        out[i, 2] = np.int64(dither_counter2(layers[i], heads[i]))
        out[i, 3] = np.int64(epochs[i])
        out[i, 4] = widx
        out[i, 5] = shift


@njit(cache=True)
def dither_row(out, slot, side, layer, kv_head, epoch, k0, k1, bits):
    """Fill ``out[0:d]`` (float32) with the ξ of one (slot, side, layer, kv_head) row (SPEC §2)."""
    d = out.shape[0]
    per_call = 16 if bits == 8 else (8 if bits == 16 else 4)
    c2 = dither_counter2(layer, kv_head)
    nchunks = (d + per_call - 1) // per_call
    for chunk in range(nchunks):
        w0, w1, w2, w3 = philox4x32(slot, dither_counter1(side, chunk), c2, epoch, k0, k1, 10)
        base = chunk * per_call
        for lane in range(per_call):
            c = base + lane
            if c < d:
                out[c] = xi_from_words(w0, w1, w2, w3, lane, bits)


# ---------------------------------------------------------------- fp16 / fp32 bit conversions


@njit(inline="always", cache=True)
def f32_bits(x):
    return np.uint32(np.float32(x).view(np.uint32))


@njit(inline="always", cache=True)
def f32_from_bits(b):
    return np.uint32(b).view(np.float32)


@njit(inline="always", cache=True)
def f16_bits_to_f32(h):
    """Exact fp16 (bit pattern, any int type) -> float32."""
    h = np.uint32(h) & np.uint32(0xFFFF)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    exp = (h >> np.uint32(10)) & np.uint32(0x1F)
    mant = h & np.uint32(0x3FF)
    if exp == 0:
        v = np.float32(mant) * np.float32(2.0 ** -24)  # exact: mant < 2^10
        return -v if sign != 0 else v
    if exp == 31:
        return f32_from_bits(sign | np.uint32(0x7F800000) | (mant << np.uint32(13)))
    return f32_from_bits(sign | ((exp + np.uint32(112)) << np.uint32(23)) | (mant << np.uint32(13)))


@njit(inline="always", cache=True)
def f32_to_f16_bits_rn(x):
    """float32 -> fp16 bit pattern (uint32), IEEE round to nearest, ties to even."""
    b = f32_bits(x)
    sign = (b >> np.uint32(16)) & np.uint32(0x8000)
    a = b & np.uint32(0x7FFFFFFF)
    if a >= np.uint32(0x7F800000):  # inf or NaN
        return sign | np.uint32(0x7C00) | (np.uint32(0x200) if a > np.uint32(0x7F800000) else np.uint32(0))
    if a >= np.uint32(0x477FF000):  # >= 65520: rounds to inf
        return sign | np.uint32(0x7C00)
    if a >= np.uint32(0x38800000):  # normal fp16 range
        r = a + np.uint32(0xFFF) + ((a >> np.uint32(13)) & np.uint32(1))
        return sign | ((r >> np.uint32(13)) - np.uint32(112 << 10))
    # fp16 subnormal or zero: the value in units of 2^-24 (scaling by a power of two is exact)
    v = f32_from_bits(a) * np.float32(2.0 ** 24)
    return sign | np.uint32(np.rint(v))


@njit(inline="always", cache=True)
def f32_to_f16_bits_ru(x):
    """float32 x >= 0 (or +inf/NaN) -> fp16 bit pattern rounded toward +inf; NaN -> +inf."""
    if not (x <= np.float32(3.4028234663852886e38)):
        return np.uint32(C.FP16_POS_INF_BITS)
    h = f32_to_f16_bits_rn(x)
    if f16_bits_to_f32(h) < x:
        h = h + np.uint32(1)  # next fp16 up; 0x7BFF + 1 is +inf, which is the right answer
    return h


@njit(inline="always", cache=True)
def next_up(x):
    """The next float32 above a finite x >= 0 (0 stays 0: only used on magnitudes)."""
    if x > np.float32(0.0) and x < np.float32(np.inf):
        return f32_from_bits(f32_bits(x) + np.uint32(1))
    return x


@njit(inline="always", cache=True)
def two_sum(a, b):
    """(s, err): a + b to nearest and its exact error, s + err = a + b (Knuth's TwoSum, float32)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(inline="always", cache=True)
def add_up(a, b):
    """a + b in float32 rounded toward +inf (twin of __fadd_ru): the sum to nearest, one step up
    when its exact error is positive."""
    s, err = two_sum(a, b)
    return next_up(s) if err > np.float32(0.0) else s


@njit(inline="always", cache=True)
def mul_up(a, b):
    """a·b in float32 rounded toward +inf (twin of __fmul_ru; the float64 product is exact)."""
    p = a * b
    if np.float64(p) < np.float64(a) * np.float64(b):
        p = next_up(p)
    return p


@njit(inline="always", cache=True)
def sqrt_up(a):
    """sqrt(a) in float32 rounded toward +inf for a >= 0 (twin of __fsqrt_ru): the root to nearest,
    one step up when its square (exact in float64) falls short of a."""
    r = np.sqrt(a)
    if np.float64(r) * np.float64(r) < np.float64(a):
        r = next_up(r)
    return r
