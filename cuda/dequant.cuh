// dequant.cuh — the read path's reconstruction x̂ = fl(s·(k − ξ)) of INT8 codes at 8, 16 and 24
// dither bits (SPEC §2–3), shared by the staged-tile decode (decode_v2.cu) and the benchmark's
// floor kernel (bench_floor.cu), so the floor measures the shipped arithmetic.  Each form below is
// the reference's x̂ bit for bit (tests/test_decode_v2_math.py emulates every instruction).
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

// 16-bit dither: x̂ for the 16 codes of two Philox calls (channel e: call e / 8, word (e % 8) / 2,
// field e % 2).  k − ξ = k + 1/2 − 2^-17 − j·2^-16 is exact in fp32 (a multiple of 2^-17 below 128),
// so x̂ = fl(s·(k − ξ)) is one multiply of two exact pieces built from magic floats:
//   K = float(0x4B0000·(k+128)) − (2^23 + 127)       = k + 1                    (PRMT, FADD)
//   T = float(0x4300·j) − (127.5 − 2^-17)            = j·2^-16 + 1/2 + 2^-17    (PRMT, FADD)
//   x̂ = s·(K − T)                                                              (FADD, FMUL)
// Every step is exact but the last (128 + j·2^-16 has ulp 2^-16; 127.5 − 2^-17 has 24 bits), so
// zero and non-finite scales give the reference's zeros, infinities and NaNs with no branch.
WC_D void dequant16_u16(const u32 (&cw)[4], const u32 (&xw)[8], float sb, float (&x)[16]) {
#pragma unroll
    for (int e = 0; e < 16; ++e) {
        const u32 u = cw[e / 4] ^ 0x80808080u;  // k + 128 per byte (folded per word by ptxas)
        const float K = __fadd_rn(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u | (u32)(e & 3))),
                                  -8388735.0f);
        const u32 w = xw[4 * (e / 8) + (e % 8) / 2];
        const float T = __fadd_rn(__uint_as_float(__byte_perm(w, 0x43000000u, (e & 1) ? 0x7632u : 0x7610u)),
                                  -127.49999237060546875f);
        x[e] = __fmul_rn(sb, __fsub_rn(K, T));
    }
}

// 24-bit dither: x̂ for the 16 codes of four Philox calls (channel e: word e of the four calls,
// j = word >> 8).  k − ξ = k + 1/2 − 2^-25 − j·2^-24 needs up to 32 bits, so the reference rounds
// it once, fl(k − ξ), before the multiply; the kernel forms that same single rounding from the
// top byte h and the low 16 bits l of j (j = 2^16·h + l):
//   m = float(0x4B0000 | (k+128) << 8 | 255 − h) − (2^23 + 2^15)   = 256k + 255 − h  (PRMT, LOP3, FADD)
//   R = fma(float(0x4B000000 | l), −2^-24, 2^-8 − 2^-25)           = −127/256 − 2^-25 − l·2^-24 (PRMT, FFMA)
//   x̂ = s·fma(m, 2^-8, R)                                            = s·fl(k − ξ)       (FFMA, FMUL)
// R is exact (a multiple of 2^-25 in (−1/2, −1/4]), and m/256 + R = k − ξ exactly, so the FMA's one
// rounding is the reference's.
WC_D void dequant16_u24(const u32 (&cw)[4], const u32 (&xw)[16], float sb, float (&x)[16]) {
#pragma unroll
    for (int e = 0; e < 16; ++e) {
        const u32 p = __byte_perm(cw[e / 4], xw[e], 7u | ((u32)(e & 3) << 4));  // [h, k, ·, ·]
        u32 f;
        asm("lop3.b32 %0, %1, 0x0000FFFF, 0x4B0080FF, 0x6A;" : "=r"(f) : "r"(p));
        const float m = __fadd_rn(__uint_as_float(f), -8421376.0f);
        const float R = __fmaf_rn(__uint_as_float(__byte_perm(xw[e], 0x4B000000u, 0x7621u)), -5.9604644775390625e-8f,
                                  0.0039062201976776123f);
        x[e] = __fmul_rn(sb, __fmaf_rn(m, 0.00390625f, R));
    }
}
#endif
