"""numba write path and reconstruction (SPEC §3).  Twin of ``cuda/write.cu``.

Storage layout (the pool's, per layer and side): ``codes int8 [H, R, d]``, ``scales/outliers/witness``
as fp16 bit patterns ``uint16 [H, R, n]``; row ``R`` is the pool slot (or a scratch row for
:func:`witcert_cupy.quantize`).  fp16 values travel as ``uint16`` bit patterns because the numba CPU
target has no fp16 arithmetic; the conversions in :mod:`.bits` are exact IEEE.
"""

import numpy as np
from numba import njit, prange

from .. import _contract as C
from .bits import add_up, dither_row, f16_bits_to_f32, f32_to_f16_bits_ru, mul_up, philox4x32, sqrt_up

_DIV = np.float32(C.SCALE_DIVISOR)
_MARGIN = np.float32(C.WITNESS_MARGIN)
_INF16 = np.uint16(C.FP16_POS_INF_BITS)
_F32_MAX = np.float32(3.4028234663852886e38)


@njit(inline="always", cache=True)
def is_finite32(v):
    return v <= _F32_MAX and v >= -_F32_MAX


@njit(inline="always", cache=True)
def reconstruct_row(out, codes_row, scales_row, outl_row, xi, bypass_row, group_size):
    """x̂ = float32(s16) * (float32(k) - ξ) per channel; bypassed channels take their stored fp16."""
    d = out.shape[0]
    for c in range(d):
        sb = f16_bits_to_f32(scales_row[c // group_size])
        out[c] = sb * (np.float32(codes_row[c]) - xi[c])
    for j in range(bypass_row.shape[0]):
        out[bypass_row[j]] = f16_bits_to_f32(outl_row[j])


@njit(parallel=True, cache=True)
def write_rows(x_bits, dest_rows, slots, epochs, side, layer, head_base, k0, k1, bits, group_size,
               bypass_ch, band_ch, codes, scales, outliers, witness, poisoned):
    """Quantize ``x_bits`` (fp16 bits ``uint16 [n, H, d]``) into row ``dest_rows[i]`` of the outputs.

    Head ``h`` of the rows is kv head ``head_base + h`` of the model: the dither stream is keyed by it.

    ``poisoned[i, h]`` is set to 1 when row ``(i, h)`` held a non-finite value (SPEC §3.6).
    """
    n, H, d = x_bits.shape
    ng = d // group_size
    nbands = band_ch.shape[0]
    npb = bypass_ch.shape[1]
    for it in prange(n * H):
        i = it // H
        h = it % H
        row = dest_rows[i]
        x = np.empty(d, np.float32)
        xi = np.empty(d, np.float32)
        err2 = np.zeros(d, np.float32)
        byp = np.zeros(d, np.bool_)
        for j in range(npb):
            byp[bypass_ch[h, j]] = True
        for c in range(d):
            x[c] = f16_bits_to_f32(x_bits[i, h, c])
        dither_row(xi, slots[i], side, layer, h + head_base, epochs[i], k0, k1, bits)
        row_bad = False
        for g in range(ng):
            amax = np.float32(0.0)
            bad = False
            for c in range(g * group_size, (g + 1) * group_size):
                v = x[c]
                if not is_finite32(v):
                    bad = True
                elif not byp[c]:
                    a = abs(v)
                    if a > amax:
                        amax = a
            if bad:
                s16 = _INF16
                row_bad = True
            elif amax == np.float32(0.0):
                s16 = np.uint16(0)
            else:
                s16 = np.uint16(f32_to_f16_bits_ru(amax / _DIV))
            scales[h, row, g] = s16
            sb = f16_bits_to_f32(s16)
            live = sb > np.float32(0.0) and sb <= _F32_MAX
            for c in range(g * group_size, (g + 1) * group_size):
                k = np.float32(0.0)
                if live and not byp[c]:
                    k = np.rint(x[c] / sb + xi[c])
                codes[h, row, c] = np.int8(k)
                if live and not byp[c]:
                    # the residual s·fl(k − ξ) − x is exact in float64 (at most 48 significant bits:
                    # docs/certificate.md §3), so this is the kernel's fma rounded once to nearest
                    r = np.float32(np.float64(sb) * np.float64(k - xi[c]) - np.float64(x[c]))
                    err2[c] = mul_up(r, r)
        for j in range(npb):
            outliers[h, row, j] = x_bits[i, h, bypass_ch[h, j]]
        for b in range(nbands):
            witness[h, row, b] = _INF16 if row_bad else band_witness(err2, band_ch[b])
        if row_bad:
            poisoned[i, h] = 1


@njit(inline="always", cache=True)
def band_witness(err2, channels):
    """fp16 bits of the band's witness (SPEC §3.5) from the squared residuals ``err2`` (each the
    residual rounded to nearest once, squared and rounded up; 0 on bypassed channels).

    The running sum over ``channels`` in list order, each addition rounded toward +inf; the square
    root rounded toward +inf; times the margin; rounded up into fp16 (docs/certificate.md §3).  The
    order is fixed, which makes the result bit-identical to the CUDA twin.
    """
    acc = np.float32(0.0)
    for jj in range(channels.shape[0]):
        acc = add_up(acc, err2[channels[jj]])
    return np.uint16(f32_to_f16_bits_ru(sqrt_up(acc) * _MARGIN))


@njit(cache=True)
def row_norm_up(bits):
    """``||x||`` of a row of fp16 values (bits ``uint16 [d]``), rounded up, as float32: each square
    is exact in float32 (an fp16 significand squared fits 22 bits, and 2^-48 is normal), the running
    sum in channel order rounded toward +inf, its square root rounded toward +inf.  A row with a
    non-finite value gives +inf.  The norm form of an fp16 store's evaluation term
    (docs/certificate.md §10.1) reads it; twin of ``row_norm_up`` in ``cuda/write.cu``."""
    acc = np.float32(0.0)
    for c in range(bits.shape[0]):
        x = f16_bits_to_f32(bits[c])
        if not is_finite32(x):
            return np.float32(np.inf)
        acc = add_up(acc, x * x)
    return sqrt_up(acc)


@njit(parallel=True, cache=True)
def store_fp16_rows(exact_bits, stored_bits, dest_rows, band_ch, values, witness, norms, poisoned):
    """Write ``stored_bits`` (fp16 ``[n, H, d]``) as the rows ``dest_rows`` of ``values [H, R, d]``,
    the Tier-A witness of ``stored − exact`` into ``witness [H, R, B]`` (black-box schemes, SPEC §3)
    and, where ``norms float32 [H, R]`` has rows (the K side of a pool with a witness), each stored
    row's norm rounded up (:func:`row_norm_up`; ``[H, 0]``: none).  A row with a non-finite exact or
    stored value gets an infinite witness and norm and is counted."""
    n, H, d = exact_bits.shape
    nbands = band_ch.shape[0]
    for it in prange(n * H):
        i = it // H
        h = it % H
        row = dest_rows[i]
        err2 = np.zeros(d, np.float32)
        bad = False
        for c in range(d):
            x = f16_bits_to_f32(exact_bits[i, h, c])
            xs = f16_bits_to_f32(stored_bits[i, h, c])
            values[h, row, c] = stored_bits[i, h, c]
            if not (is_finite32(x) and is_finite32(xs)):
                bad = True
            else:
                r = np.float32(np.float64(xs) - np.float64(x))  # exact in float64: rounded once
                err2[c] = mul_up(r, r)
        for b in range(nbands):
            witness[h, row, b] = _INF16 if bad else band_witness(err2, band_ch[b])
        if norms.shape[1] > 0:
            norms[h, row] = np.float32(np.inf) if bad else row_norm_up(stored_bits[i, h])
        if bad:
            poisoned[i, h] = 1


@njit(parallel=True, cache=True)
def dequant_rows(codes, scales, outliers, src_rows, slots, epochs, side, layer, head_base, k0, k1, bits,
                 group_size, bypass_ch, out):
    """Reconstruct rows ``src_rows`` into ``out float32 [n, H, d]`` (SPEC §3.4)."""
    n = src_rows.shape[0]
    H = codes.shape[0]
    d = codes.shape[2]
    for it in prange(n * H):
        i = it // H
        h = it % H
        row = src_rows[i]
        xi = np.empty(d, np.float32)
        dither_row(xi, slots[i], side, layer, h + head_base, epochs[i], k0, k1, bits)
        reconstruct_row(out[i, h], codes[h, row], scales[h, row], outliers[h, row], xi,
                        bypass_ch[h], group_size)


@njit(parallel=True, cache=True)
def dither_rows(slots, epochs, side, layer, kv_head, k0, k1, bits, out):
    """ξ of ``slots`` into ``out float32 [n, d]`` (SPEC §2)."""
    for i in prange(slots.shape[0]):
        dither_row(out[i], slots[i], side, layer, kv_head, epochs[i], k0, k1, bits)


@njit(parallel=True, cache=True)
def philox_many(ctr, key, rounds, out):
    """Philox of ``ctr uint32 [n, 4]`` under ``key uint32 [n, 2]`` into ``out uint32 [n, 4]``."""
    for i in prange(ctr.shape[0]):
        w0, w1, w2, w3 = philox4x32(ctr[i, 0], ctr[i, 1], ctr[i, 2], ctr[i, 3], key[i, 0], key[i, 1], rounds)
        out[i, 0] = np.uint32(w0)
        out[i, 1] = np.uint32(w1)
        out[i, 2] = np.uint32(w2)
        out[i, 3] = np.uint32(w3)
