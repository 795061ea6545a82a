"""CI (no GPU): the dequantization arithmetic of the staged-tile decode kernel (cuda/dequant.cuh,
used by cuda/decode_v2.cu).

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


def test_emulated_constants_are_the_header_s():
    # the emulation above is only evidence if the kernel uses the same selector, mask, LUT and
    # constants: read them back from the header the kernels include
    src = (Path(__file__).resolve().parent.parent / "cuda" / "dequant.cuh").read_text()
    assert "(u32)(4 + (e & 3)) | ((u32)(e & 3) << 4)" in src  # the PRMT selector (4 + e) | (e << 4)
    assert re.search(r"lop3\.b32 %0, %1, 0x0000FFFF, 0x4B0080FF, 0x6A;", src)  # (p & 0xFFFF) ^ 0x4B0080FF
    assert "-8421376.0f" in src and 8421376 == 2**23 + 2**15
    assert src.count("0.00390625f") == 2 and src.count("-0.498046875f") == 2  # 1/256, −255/512
    assert 0.00390625 == 1 / 256 and -0.498046875 == -255 / 512
    assert "#include \"dequant.cuh\"" in (Path(__file__).resolve().parent.parent / "cuda" / "decode_v2.cu").read_text()


def test_tile_rows_are_bank_conflict_free():
    # phase A: a quarter-warp stores 16 bytes at the same column of 8 consecutive token rows;
    # phase B: lanes 0..7 read the same float4 of 8 rows.  The row pitch (V2_PAD = 132 floats)
    # must put those on 8 distinct 4-bank groups; 128 would put them all on one.
    src = (Path(__file__).resolve().parent.parent / "cuda" / "decode_v2.cu").read_text()
    pitch = int(re.search(r"#define V2_PAD \(V2_D \+ (\d+)\)", src).group(1)) + 128
    for col in range(0, 128, 4):
        assert len({((r * pitch + col) // 4) % 8 for r in range(8)}) == 8
    assert len({((r * 128) // 4) % 8 for r in range(8)}) == 1  # the check can fail
