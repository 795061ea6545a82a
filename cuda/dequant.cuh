// dequant.cuh — the read path's reconstruction x̂ = fl(s·(k − ξ)) of 8-bit-dither INT8 codes
// (SPEC §2–3), shared by the staged-tile decode (decode_v2.cu) and the benchmark's floor kernel
// (bench_floor.cu), so the floor measures the shipped arithmetic.
#pragma once
#include "common.cuh"

#ifdef __CUDA_ARCH__
// x̂ for the 16 codes of one Philox call (4 code words cw, 4 dither words xw, scale sb), into
// registers, bit-identical to the reference, whose k − ξ is exact in fp32:
//   F = float with bits 0x4B00·(k+128)·(255−j) = 2^23 + 256(k + 128) + 255 − j   (one PRMT + one LOP3)
//   m = F − (2^23 + 2^15) = 256k + 255 − j                                    (exact: integers < 2^24)
//   x̂ = fma(s/256, m, −255s/512)  = s(2m − 255)/512 = s(k − (2j − 255)/512)  (one rounding)
// s/256 and 255s/512 are exact for an fp16 scale s > 0 (11 + 8 significant bits, no underflow):
// four instructions per element instead of eight.  A zero or non-finite s (an empty or poisoned
// group, or a token past the split's end) takes k − ξ = fma(m, 1/256, −255/512) exactly, then
// s·(k − ξ): the reference's own zeros, infinities and NaNs.  (docs/certificate.md §6;
// tests/test_decode_v2_math.py checks both branches bit for bit.)
WC_D void dequant16_u8(const u32 (&cw)[4], const u32 (&xw)[4], float sb, float (&x)[16]) {
    float m[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) {
        // bytes [j_e, k_e, ·, ·] of (xw, cw), then (b & 0xFFFF) ^ 0x4B0080FF: ~j, k ^ 0x80, exponent
        const u32 p = __byte_perm(cw[e / 4], xw[e / 4], (u32)(4 + (e & 3)) | ((u32)(e & 3) << 4));
        u32 f;  // one LOP3 (LUT 0x6A = (a & b) ^ c); the C++ expression compiles to two
        asm("lop3.b32 %0, %1, 0x0000FFFF, 0x4B0080FF, 0x6A;" : "=r"(f) : "r"(p));
        m[e] = __fadd_rn(__uint_as_float(f), -8421376.0f);
    }
    if (sb > 0.0f && sb <= WC_F32_MAX) {
        const float sd = __fmul_rn(sb, 0.00390625f), sn = __fmul_rn(sb, -0.498046875f);
#pragma unroll
        for (int e = 0; e < 16; ++e) x[e] = __fmaf_rn(sd, m[e], sn);
    } else {
#pragma unroll
        for (int e = 0; e < 16; ++e) x[e] = __fmul_rn(sb, __fmaf_rn(m[e], 0.00390625f, -0.498046875f));
    }
}
#endif
