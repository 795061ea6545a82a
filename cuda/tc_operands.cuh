// tc_operands.cuh — the tensor-core route's operands from a chunk of raw 8-bit-dither codes
// (docs/certificate.md §9, steps 1 and 8) and the f16x2, ldmatrix, mma.sync and warpgroup-mma
// instructions that go with them.
// A header of its own so that the extend kernel (cuda/extend_tc.cu), the form-(I) decode
// (cuda/decode_i8.cuh) and the tensor-core levels of the decode floor ladder (cuda/bench_floor.cu)
// build the same operands with the same instructions.
#pragma once
#include "common.cuh"
#include "cp_async.cuh"

// ---- ldmatrix: four 8×8 matrices of 16-bit elements, lanes 8m .. 8m + 7 giving matrix m's row
// addresses (16 bytes each); lane 4g + t receives row g, elements 2t and 2t + 1 of each (.trans:
// rows 2t and 2t + 1 of column g, the first in the low half)
WC_D void ldsm_x4(u32 (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

WC_D void ldsm_x4_trans(u32 (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// ---- 8-bit integer mma.sync, m16n8k32, exact s32 accumulation: d = a·b + c.  A (16 × 32, row
// major): lane 4g + t holds row g, columns 4t .. 4t + 3 (a0) and 16 + 4t .. (a2), row g + 8 likewise
// (a1, a3); B (32 × 8, column major): column g, rows 4t .. 4t + 3 (b0) and 16 + 4t .. (b1); C: row g,
// columns 2t, 2t + 1 (c0, c1), row g + 8 (c2, c3).  S8U8: B's bytes unsigned.
template <bool S8U8>
WC_D void imma_k32(int (&d)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1, const int (&c)[4]) {
    if constexpr (S8U8) {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
    } else {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%10,%11,%12,%13};"
            : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
    }
}

// byte permutation: byte i of the result is byte (sel >> 4i) & 7 of {a, b} (a's bytes 0–3, b's 4–7)
WC_D u32 prmt(u32 a, u32 b, u32 sel) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// ---- warpgroup mma (sm_90a; only what a kernel uses is assembled)
// A no-swizzle shared-memory matrix descriptor (layout type 0): low word start address >> 4 and
// leading-dimension byte offset >> 4 << 16, high word stride-dimension byte offset >> 4.  Built once
// per operand and advanced by adding offset >> 4 to the low word: shared addresses stay below 2^18,
// so the 14-bit address field never carries (building each one took ~8 instructions per wgmma).
WC_D u32 wg_desc_lo(u32 addr, u32 lbo) { return ((addr >> 4) & 0x3FFFu) | (((lbo >> 4) & 0x3FFFu) << 16); }
WC_D u64 wg_desc_at(u32 lo, u32 sbo, u32 off) {
    return ((u64)((sbo >> 4) & 0x3FFFu) << 32) | (u64)(lo + (off >> 4));
}
WC_D void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
template <int N>
WC_D void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
WC_D void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// ---- mma.sync and f16x2
// c += a·b, m16n8k16, fp16 operands, fp32 accumulate
WC_D void mma_f16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// two floats -> f16x2, round to nearest; `lo` in the low half (the lower column / channel)
WC_D u32 pack_f16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

WC_D u32 hsub2(u32 a, u32 b) {
    u32 r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

WC_D u32 hfma2(u32 a, u32 b, u32 c) {
    u32 r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

// A K chunk of 16 channels as exact fp16 operands, channel pairs (2i, 2i + 1) in word i: its codes
// kh (from the 4 code words cw) and −ξ xh (from the 4 dither words xw of its 8-bit Philox call)
WC_D void tc_k_operands(const u32 (&cw)[4], const u32 (&xw)[4], u32 (&kh)[8], u32 (&xh)[8]) {
    // f16x2 constants as bit patterns (literals the compiler can rematerialize instead of holding):
    // 1152, −1/256, 4.5 and 1/512 in both halves
    constexpr u32 c1152 = 0x64806480u, cm256 = 0x9C009C00u, c4_5 = 0x44804480u, c512 = 0x18001800u;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        // code k: byte k+128 under the exponent of 1024 gives 1024 + k + 128, exactly
        const u32 u = cw[w] ^ 0x80808080u;
        kh[2 * w] = hsub2(__byte_perm(u, 0x64646464u, 0x5140), c1152);
        kh[2 * w + 1] = hsub2(__byte_perm(u, 0x64646464u, 0x5342), c1152);
        // dither field j: (1024 + j)·(−1/256) + 4.5 = (128 − j)/256, then − 1/512 = −ξ (exact)
        xh[2 * w] = hsub2(hfma2(__byte_perm(xw[w], 0x64646464u, 0x5140), cm256, c4_5), c512);
        xh[2 * w + 1] = hsub2(hfma2(__byte_perm(xw[w], 0x64646464u, 0x5342), cm256, c4_5), c512);
    }
}

// A V chunk of 16 channels as x̂ = fl(sb·(k − ξ)) rounded once more to fp16, channel pairs in words
// (nsb = −sb/512)
WC_D void tc_v_fp16(const u32 (&cw)[4], const u32 (&xw)[4], float sbv, float nsb, u32 (&vhw)[8]) {
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        const u32 u = cw[w] ^ 0x80808080u;
        float xv[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            // k + 32768.5 and 2^23 + j exactly, then k + (128 − j)/256 exactly; x̂ =
            // sb·(that − 1/512) with one rounding = fl(sb·(k − ξ)), the reference's x̂
            const float kb = __fadd_rn(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7440 | j)), -8355967.5f);
            const float jf = __uint_as_float(__byte_perm(xw[w], 0x4B000000u, 0x7440 | j));
            const float kx = __fmaf_rn(jf, -0.00390625f, kb);
            xv[j] = __fmaf_rn(sbv, kx, nsb);
        }
        vhw[2 * w] = pack_f16x2(xv[0], xv[1]);
        vhw[2 * w + 1] = pack_f16x2(xv[2], xv[3]);
    }
}
