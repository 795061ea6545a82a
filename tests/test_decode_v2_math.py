"""CI (no GPU): the dequantization arithmetic of the staged-tile decode kernel (cuda/dequant.cuh,
used by cuda/decode_v2.cu), at 8, 16 and 24 dither bits.

``dequant16_u8`` forms x̂ = fl(s·(k − ξ)) in four instructions per element: the code byte and the
dither byte are packed under the exponent of 2^23, the float F minus 2^23 + 2^15 is the integer
m = 256k + 255 − j, and one fused multiply-add gives s/256·m − 255s/512.  The read path's contract
(SPEC §4, §6) is the reference's x̂ bit for bit.  These tests emulate each instruction in NumPy
(a float64 sum of exact products, then one rounding, is an fp32 FMA here) and compare bit patterns
with the reference arithmetic, for every code, every dither field and fp16 scales across the range.
"""

import re
from pathlib import Path

import numpy as np

from witcert_cupy import _contract as C


def byte_perm(x, y, sel):
    """PTX prmt / __byte_perm: byte n of the result is byte sel[4n:4n+3] of the 8-byte {y, x}."""
    src = (y.astype(np.uint64) << np.uint64(32)) | x.astype(np.uint64)
    out = np.zeros_like(x, dtype=np.uint32)
    for n in range(4):
        b = (src >> np.uint64(8 * ((sel >> (4 * n)) & 7))) & np.uint64(0xFF)
        out |= (b.astype(np.uint32) << np.uint32(8 * n))
    return out


def fp16_scales():
    """Every 97th positive finite fp16 value, with the smallest subnormal and the largest."""
    bits = np.arange(1, 0x7C00, 97, dtype=np.uint16)
    bits = np.unique(np.concatenate([bits, np.array([1, 0x3C00, 0x7BFF], np.uint16)]))
    return bits.view(np.float16).astype(np.float32)


def test_packed_dequantization_is_the_reference_bit_for_bit():
    k = np.arange(-C.CODE_MAX, C.CODE_MAX + 1)
    j = np.arange(256)
    kk, jj = (a.ravel() for a in np.meshgrid(k, j, indexing="ij"))
    for e in range(4):  # the element's byte position in its word (the selector of the kernel)
        cw = ((kk & 0xFF) << (8 * e)).astype(np.uint32)
        xw = (jj << (8 * e)).astype(np.uint32)
        p = byte_perm(cw, xw, (4 + e) | (e << 4))
        F = ((p & np.uint32(0xFFFF)) ^ np.uint32(0x4B0080FF)).view(np.float32)
        m = F - np.float32(8421376.0)  # fp32 subtraction of integers below 2^24: exact
        assert np.array_equal(m.astype(np.int64), 256 * kk + 255 - jj)
    xi = ((2 * jj - 255) * 2.0**-9).astype(np.float32)  # SPEC §2 at 8 bits: (2j + 1 − 256)/512
    d = kk.astype(np.float32) - xi  # exact in fp32
    for s in fp16_scales():
        ref = np.float32(s) * d  # the reference: one rounding
        sd, sn = np.float32(s) * np.float32(1 / 256), np.float32(s) * np.float32(-255 / 512)
        assert float(sd) * 256 == float(s) and float(sn) * 512 == -255 * float(s)  # both exact
        got = (np.float64(sd) * m.astype(np.float64) + np.float64(sn)).astype(np.float32)  # the FMA
        assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), s


def test_zero_and_non_finite_scales_take_the_reference_arithmetic():
    # the other branch of dequant16_u8: k − ξ = fma(m, 1/256, −255/512) exactly, then s·(k − ξ)
    k = np.arange(-C.CODE_MAX, C.CODE_MAX + 1)
    kk, jj = (a.ravel() for a in np.meshgrid(k, np.arange(256), indexing="ij"))
    m = (256 * kk + 255 - jj).astype(np.float64)
    d_new = (m * (1 / 256) - 255 / 512).astype(np.float32)  # exact in float64, so one rounding
    d_ref = kk.astype(np.float32) - ((2 * jj - 255) * 2.0**-9).astype(np.float32)
    assert np.array_equal(d_new.view(np.uint32), d_ref.view(np.uint32))
    with np.errstate(invalid="ignore"):
        for s in (0.0, np.inf, np.nan):  # zeros keep k − ξ's sign; infinities and NaN propagate
            assert np.array_equal((np.float32(s) * d_new).view(np.uint32), (np.float32(s) * d_ref).view(np.uint32))


def _header_function(name):
    src = (Path(__file__).resolve().parent.parent / "cuda" / "dequant.cuh").read_text()
    start = src.index(f"WC_D void {name}(")
    return src[start:src.index("\n}\n", start)]


def test_emulated_constants_are_the_header_s():
    # the emulations here are only evidence if the kernel uses the same selectors, masks, LUTs and
    # constants: read them back from the header the kernels include, function by function
    u8 = _header_function("dequant16_u8")
    assert "(u32)(4 + (e & 3)) | ((u32)(e & 3) << 4)" in u8  # the PRMT selector (4 + e) | (e << 4)
    assert re.search(r"lop3\.b32 %0, %1, 0x0000FFFF, 0x4B0080FF, 0x6A;", u8)  # (p & 0xFFFF) ^ 0x4B0080FF
    assert "-8421376.0f" in u8 and 8421376 == 2**23 + 2**15
    assert u8.count("0.00390625f") == 2 and u8.count("-0.498046875f") == 2  # 1/256, −255/512
    assert 0.00390625 == 1 / 256 and -0.498046875 == -255 / 512
    u16 = _header_function("dequant16_u16")
    assert "cw[e / 4] ^ 0x80808080u" in u16 and "__byte_perm(u, 0x4B000000u, 0x7540u | (u32)(e & 3))" in u16
    assert "-8388735.0f" in u16 and 8388735 == 2**23 + 127
    assert "xw[4 * (e / 8) + (e % 8) / 2]" in u16
    assert "__byte_perm(w, 0x43000000u, (e & 1) ? 0x7632u : 0x7610u)" in u16
    assert "-127.49999237060546875f" in u16 and 127.49999237060546875 == 127.5 - 2**-17
    assert "__fmul_rn(sb, __fsub_rn(K, T))" in u16
    u24 = _header_function("dequant16_u24")
    assert "__byte_perm(cw[e / 4], xw[e], 7u | ((u32)(e & 3) << 4))" in u24
    assert re.search(r"lop3\.b32 %0, %1, 0x0000FFFF, 0x4B0080FF, 0x6A;", u24)
    assert "-8421376.0f" in u24
    assert "__byte_perm(xw[e], 0x4B000000u, 0x7621u)" in u24
    assert "-5.9604644775390625e-8f" in u24 and 5.9604644775390625e-8 == 2**-24
    assert "0.0039062201976776123f" in u24 and float(np.float32(0.0039062201976776123)) == 2**-8 - 2**-25
    assert "__fmul_rn(sb, __fmaf_rn(m, 0.00390625f, R))" in u24
    assert "#include \"dequant.cuh\"" in (Path(__file__).resolve().parent.parent / "cuda" / "decode_v2.cu").read_text()


def _code_magic(k, sel_fn, const):
    """byte_perm of the XOR-ed code word (k + 128 per byte) with a constant, for every byte position:
    returns [(position, uint32 bits)]"""
    out = []
    for e in range(4):
        cw = ((k & 0xFF) << (8 * e)).astype(np.uint32)
        u = cw ^ np.uint32(0x80808080)
        out.append((e, byte_perm(u, np.full_like(u, const), sel_fn(e))))
    return out


def test_16_bit_dither_dequantization_is_the_reference_bit_for_bit():
    k = np.arange(-C.CODE_MAX, C.CODE_MAX + 1)
    j = np.arange(1 << 16)
    Ks = []
    for e, bits in _code_magic(k, lambda e: 0x7540 | e, 0x4B000000):  # K = k + 1, exactly
        K = bits.view(np.float32) - np.float32(8388735.0)
        assert np.array_equal(K.astype(np.float64), k + 1.0), e
        Ks.append(K)
    Ts = []
    for field, sel, other in ((0, 0x7610, 0xABCD << 16), (1, 0x7632, 0x1234)):  # T = j·2^-16 + 1/2 + 2^-17
        w = ((j << (16 * field)) | other).astype(np.uint32)  # the word's other field must not leak in
        T = byte_perm(w, np.full(j.shape, 0x43000000, np.uint32), sel).view(np.float32)
        T = T - np.float32(127.49999237060546875)
        assert np.array_equal(T.astype(np.float64), j * 2.0**-16 + 0.5 + 2.0**-17), field
        Ts.append(T)
    assert all(np.array_equal(K, Ks[0]) for K in Ks) and np.array_equal(Ts[0], Ts[1])
    kx = Ks[0][:, None] - Ts[0][None, :]  # fp32 subtraction: exact
    xi = ((2 * j + 1 - (1 << 16)) * 2.0**-17).astype(np.float32)  # SPEC §2 at 16 bits, exact
    ref = k.astype(np.float32)[:, None] - xi[None, :]  # the reference's k − ξ (exact here too)
    assert np.array_equal(kx.view(np.uint32), ref.view(np.uint32))
    with np.errstate(invalid="ignore", over="ignore"):
        for s in (*fp16_scales()[::8], 0.0, np.inf, np.nan):  # x̂ = s·(k − ξ): the same product
            assert np.array_equal((np.float32(s) * kx).view(np.uint32), (np.float32(s) * ref).view(np.uint32))


def test_24_bit_dither_dequantization_is_the_reference_bit_for_bit():
    k = np.arange(-C.CODE_MAX, C.CODE_MAX + 1)
    h = np.arange(256)
    kk, hh = (a.ravel() for a in np.meshgrid(k, h, indexing="ij"))
    for e in range(4):  # m = 256k + 255 − h from the code byte and the dither word's top byte
        cw = ((kk & 0xFF) << (8 * e)).astype(np.uint32)
        xw = ((hh << 24) | 0x5A5A00).astype(np.uint32)
        p = byte_perm(cw, xw, 7 | (e << 4))
        m = ((p & np.uint32(0xFFFF)) ^ np.uint32(0x4B0080FF)).view(np.float32) - np.float32(8421376.0)
        assert np.array_equal(m.astype(np.int64), 256 * kk + 255 - hh), e
    lo = np.arange(1 << 16)
    w = ((0x7F << 24) | (lo << 8) | 0xC3).astype(np.uint32)
    Jl = byte_perm(w, np.full(w.shape, 0x4B000000, np.uint32), 0x7621).view(np.float32)
    assert np.array_equal(Jl.astype(np.int64), 2**23 + lo)
    R = (Jl.astype(np.float64) * -(2.0**-24) + float(np.float32(0.0039062201976776123))).astype(np.float32)
    assert np.array_equal(R.astype(np.float64), -127 / 256 - 2.0**-25 - lo * 2.0**-24)  # the FMA is exact
    rng = np.random.default_rng(24)
    # every (k, h) against sampled low parts, and every low part against sampled (k, h), with the edges
    picks = [(kk, hh, rng.integers(0, 1 << 16, kk.size)), (kk, hh, np.zeros_like(kk)), (kk, hh, np.full_like(kk, 0xFFFF))]
    n = 1 << 16
    edge_k = rng.choice([-C.CODE_MAX, -1, 0, 1, C.CODE_MAX], n)
    picks.append((np.concatenate([edge_k, rng.integers(-C.CODE_MAX, C.CODE_MAX + 1, n)]),
                  np.concatenate([rng.integers(0, 256, n), rng.choice([0, 127, 128, 255], n)]), np.tile(lo, 2)))
    for kq, hq, lq in picks:
        m = (256 * kq + 255 - hq).astype(np.float32)
        kx = (m.astype(np.float64) * 2.0**-8 + R[lq].astype(np.float64)).astype(np.float32)  # the FMA, one rounding
        jq = (hq.astype(np.int64) << 16) | lq
        xi = ((2 * jq + 1 - (1 << 24)) * 2.0**-25).astype(np.float32)  # SPEC §2 at 24 bits, exact
        assert np.array_equal(xi.astype(np.float64), (2 * jq + 1 - (1 << 24)) * 2.0**-25)
        ref = kq.astype(np.float32) - xi  # the reference rounds k − ξ once
        assert np.array_equal(kx.view(np.uint32), ref.view(np.uint32))
        assert not np.array_equal(ref.astype(np.float64), kq - xi.astype(np.float64))  # it does round


def test_tile_rows_are_bank_conflict_free():
    # phase A: a quarter-warp stores 16 bytes at the same column of 8 consecutive token rows;
    # phase B: lanes 0..7 read the same float4 of 8 rows.  The row pitch (V2_PAD = 132 floats)
    # must put those on 8 distinct 4-bank groups; 128 would put them all on one.
    src = (Path(__file__).resolve().parent.parent / "cuda" / "decode_v2.cu").read_text()
    pitch = int(re.search(r"#define V2_PAD \(V2_D \+ (\d+)\)", src).group(1)) + 128
    for col in range(0, 128, 4):
        assert len({((r * pitch + col) // 4) % 8 for r in range(8)}) == 8
    assert len({((r * 128) // 4) % 8 for r in range(8)}) == 1  # the check can fail
