"""The form-(I) logit (SPEC §6, docs/certificate.md §11): twin of ``cuda/decode_i8.cuh``'s query split
and integer products, digit for digit, so that the two backends' integer sums agree bit for bit.

Per query head and scale group the query is scaled by a power of two ``2^S`` (its largest entry in
``[2^21, 2^22)``, or the head's scale shifted by at most ``FORM_I_MAX_GROUP_SHIFT`` binades), rounded
to integers ``Q`` (residual ``r``) and split into balanced base-256 digits ``Q = 2^16 a0 + 2^8 a1 + a2``.
Per token and group the exact sums ``R0 = Σ a0·k``, ``R1 = Σ a1·k + Σ a0·j'`` and
``R2 = Σ a2·k + Σ a1·j'`` (code ``k``, dither field ``j' = 255 − j``) combine in fp32 into the logit in
log2 units.  At 16-bit dither ``j' = 65535 − j = 256·jh' + jl'`` and the sums are ``R0 = Σ a0·k``,
``R1 = Σ a1·k + Σ a0·jh'``, ``R2 = Σ a2·k + Σ a1·jh' + Σ a0·jl'`` and ``R3 = Σ a2·jh' + Σ a1·jl'``.
Values the GPU flushes to zero (``-ftz=true``) are flushed here too, so that the digits are the same.
"""

import math

import numpy as np
from numba import njit

from .. import _contract as C
from .bits import f16_bits_to_f32
from .rounding import coef_up, f32_up

_F32_MAX = np.float32(3.4028234663852886e38)
_MIN_NORMAL = C.FP32_MIN_NORMAL
_LOG2E = np.float32(1.4426950408889634)
_FLOOR1 = C.COEF_FLOOR_1
_QBITS = C.FORM_I_QUERY_BITS
_MAXSHIFT = C.FORM_I_MAX_GROUP_SHIFT
_RES = float(C.FORM_I_RESIDUAL_BOUND)
_DROP = float(C.FORM_I_DROPPED_BOUND)
_RES16 = float(C.FORM_I_RESIDUAL_BOUND_16)
_DROP16 = float(C.FORM_I_DROPPED_BOUND_16)
_ENONE = -100000  # a group whose entries are all zero


@njit(inline="always", cache=True)
def _ftz(x):
    """An fp32 value as the GPU's flush-to-zero arithmetic sees it."""
    return np.float32(0.0) if abs(x) < _MIN_NORMAL else x


@njit(inline="always", cache=True)
def fma32(a, b, c):
    """fp32 ``a·b + c`` (the product is exact in float64; the sum rounds in float64, then to fp32)."""
    return np.float32(np.float64(a) * np.float64(b) + np.float64(c))


@njit(cache=True)
def query_split(qv, byp, group_size, sm_m, e_sm, gamma_eval, digits, shift, w1, w2, cc, gq, bits=8):
    """One query head's form-(I) split (twin of ``decode_stage1_i8``'s set-up).

    qv : float32 ``[d]``; ``byp``: bool ``[d]``, the outlier channels (exactly stored: their digits
    are 0 and they set no group's exponent; the kernel adds their fp32 dot product, ``outlier_logit2``);
    ``sm = sm_m·2^e_sm`` with ``sm_m ∈ [1/2, 1)``; ``gamma_eval``: float32
    ``γ_n`` of the fp32 combination (``certificate.form_i_gamma``).  Fills ``digits`` (int64
    ``[3, d]``: a0, a1, a2), and per group ``w1, w2`` (``2^(17−δ)``, ``2^(9−δ)``; 16-bit dither
    ``2^(1−δ)``), ``cc`` (``−255·ΣQ·2^−δ``, 16 bits ``−(65535/256)·ΣQ·2^−δ``, rounded to fp32) and ``gq``
    (the evaluation term per unit of the token's scale, natural-log units, rounded up:
    docs/certificate.md §11).  ``bits``: the dither's width, 8 or 16.  Returns ``(finite, Fm, P1, P2)``: the
    logit in log2 units is ``((Σ_g s_g Z_g)·Fm)·P1·P2``.  A query that is not finite returns
    ``finite = False`` and zero digits.
    """
    d = qv.shape[0]
    ng = d // group_size
    for c in range(d):
        digits[0, c] = digits[1, c] = digits[2, c] = 0
        if not (abs(qv[c]) <= _F32_MAX):
            for gr in range(ng):
                shift[gr] = 0
                w1[gr] = w2[gr] = cc[gr] = gq[gr] = np.float32(0.0)
            return False, np.float32(0.0), np.float32(0.0), np.float32(0.0)
    eg = np.full(ng, _ENONE, np.int64)
    eh = _ENONE
    for gr in range(ng):
        mx = np.float32(0.0)
        for c in range(gr * group_size, (gr + 1) * group_size):
            if not byp[c]:
                mx = max(mx, abs(_ftz(qv[c])))
        if mx > 0.0:
            eg[gr] = math.frexp(np.float64(mx))[1]
            eh = max(eh, eg[gr])
    if eh == _ENONE:
        eh = 0
    for gr in range(ng):
        delta = 0 if eg[gr] == _ENONE else min(eh - eg[gr], _MAXSHIFT)
        S = _QBITS - eh + delta
        shift[gr] = S
        sum_q = 0
        sa0 = sa1 = sa2 = 0
        sr = 0.0
        nfl = 0
        for c in range(gr * group_size, (gr + 1) * group_size):
            qin = np.float32(0.0) if byp[c] else _ftz(qv[c])
            qs = _ftz(np.float32(math.ldexp(np.float64(qin), S)))
            qf = np.float32(np.rint(qs))
            Q = np.int64(qf)
            sr += abs(np.float64(qs) - np.float64(qf))
            if qs == 0.0 and qin != 0.0:  # flushed by the scaling: Q = 0, a residual below 2^-126
                nfl += 1
            a2 = ((Q + 128) & 255) - 128
            q1 = (Q - a2) >> 8
            a1 = ((q1 + 128) & 255) - 128
            a0 = (q1 - a1) >> 8
            digits[0, c] = a0
            digits[1, c] = a1
            digits[2, c] = a2
            sum_q += Q
            sa0 += abs(a0)
            sa1 += abs(a1)
            sa2 += abs(a2)
        sr += nfl * _MIN_NORMAL
        w1[gr] = np.float32(math.ldexp(1.0, 17 - delta))
        if bits == 8:
            w2[gr] = np.float32(math.ldexp(1.0, 9 - delta))
            cc[gr] = np.float32(math.ldexp(-255.0 * np.float64(sum_q), -delta))
            terms = 131072.0 * (32767.0 * sa0 + 127.0 * sa1) + 512.0 * (127.0 * sa2 + 255.0 * sa1) \
                + 255.0 * abs(np.float64(sum_q))
            res, drop = _RES, _DROP
        else:  # (|256·R2 + R3| ≤ Σ 32767|a2| + 65535|a1| + 65280|a0|, weighted 2 against R2's 2^9)
            w2[gr] = np.float32(math.ldexp(1.0, 1 - delta))
            cc[gr] = np.float32(math.ldexp(-(65535.0 / 256.0) * np.float64(sum_q), -delta))
            terms = 131072.0 * (32767.0 * sa0 + 127.0 * sa1) + 2.0 * (32767.0 * sa2 + 65535.0 * sa1 + 65280.0 * sa0) \
                + (65535.0 / 256.0) * abs(np.float64(sum_q))
            res, drop = _RES16, _DROP16
        # (float64 sums of at most a few hundred non-negative terms: one part in 2^44 covers them)
        x = (res * sr + drop * sa2 + np.float64(gamma_eval) * terms) * (1.0 + 2.0 ** -44)
        gq[gr] = coef_up(f32_up(np.float64(sm_m) * x * (1.0 + 2.0 ** -50)), e_sm - 9 - S, _FLOOR1)
    fm = np.float32(np.float64(sm_m) * np.float64(_LOG2E))
    E = e_sm + eh - 31
    E1 = min(max(E, -126), 127)
    E2 = E - E1
    p1 = np.float32(math.ldexp(1.0, E1))
    p2 = np.float32(math.ldexp(1.0, E2)) if E2 >= -126 else np.float32(0.0)
    return True, fm, p1, p2


@njit(cache=True)
def group_sums(digits, codes_row, jp_row, c0, c1, bits=8):
    """``(R0, R1, R2, R3)`` of channels ``[c0, c1)`` of one token: exact integers (``R3 = 0`` at 8-bit
    dither; at 16 bits ``jp_row`` holds ``j' = 256·jh' + jl'``)."""
    r0 = r1 = r2 = r3 = 0
    for c in range(c0, c1):
        k = np.int64(codes_row[c])
        jp = np.int64(jp_row[c])
        # (8 bits: the field is one byte, jh' = j', and there is no jl')
        jh = jp if bits == 8 else jp >> 8
        jl = 0 if bits == 8 else jp & 255
        r0 += digits[0, c] * k
        r1 += digits[1, c] * k + digits[0, c] * jh
        r2 += digits[2, c] * k + digits[1, c] * jh + digits[0, c] * jl
        if bits != 8:
            r3 += digits[2, c] * jh + digits[1, c] * jl
    return r0, r1, r2, r3


@njit(cache=True)
def logit2(digits, codes_row, jp_row, scales_row, group_size, w1, w2, cc, fm, p1, p2, bits=8):
    """One token's logit in log2 units (twin of the kernel's K phase): per group
    ``Z = fma(fl(256·R0 + R1), W1, fma(R2, W2, C))`` (16-bit dither: ``fl(256·R2 + R3)`` in place of
    ``R2``); each warp's 64 channels (two groups)
    accumulated in order by fma, the warps' parts added pairwise (``p0 + p1``,
    ``(p0 + p1) + (p2 + p3)``); then ``(Σ_w p_w·Fm)·P1·P2``.  ``scales_row``: float32 ``[ng]``."""
    ng = scales_row.shape[0]
    gpw = max(1, 64 // group_size)  # groups per warp
    nw = (ng + gpw - 1) // gpw
    parts = np.zeros(nw, np.float32)
    for wi in range(nw):
        w0 = wi * gpw
        inner = np.float32(0.0)
        for gr in range(w0, min(w0 + gpw, ng)):
            r0, r1, r2, r3 = group_sums(digits, codes_row, jp_row, gr * group_size, (gr + 1) * group_size, bits)
            fy = np.float32(256 * r0 + r1)
            f2 = np.float32(r2) if bits == 8 else np.float32(256 * r2 + r3)
            z = fma32(fy, w1[gr], fma32(f2, w2[gr], cc[gr]))
            inner = np.float32(scales_row[gr] * z) if gr == w0 else fma32(scales_row[gr], z, inner)
        parts[wi] = inner
    span = 1
    while span < nw:
        for wi in range(0, nw - span, 2 * span):
            parts[wi] = np.float32(parts[wi] + parts[wi + span])
        span *= 2
    return _ftz(np.float32(_ftz(np.float32(_ftz(np.float32(parts[0] * fm)) * p1)) * p2))


@njit(cache=True)
def outlier_logit2(lt2, qv, bypass_row, outl_row, sl2):
    """``fl(lt2 + fl(dot·sl2))``: a token's log2-unit logit with its outlier channels' fp32 dot product
    added (twin of the kernel's: a chain in ``bypass_row``'s order, products and sums each rounded,
    then times ``sl2 = fl(fl(sm)·log2 e)``).  ``outl_row``: the row's stored values, fp16 bits."""
    dot = np.float32(0.0)
    for j in range(bypass_row.shape[0]):
        dot = _ftz(np.float32(dot + _ftz(np.float32(_ftz(qv[bypass_row[j]]) * f16_bits_to_f32(outl_row[j])))))
    return _ftz(np.float32(lt2 + _ftz(np.float32(dot * sl2))))
