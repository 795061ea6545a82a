// philox.cuh — Philox4x32 (SPEC §1) and the dither field (SPEC §2), usable from host and device.
//
// The host side is compiled by the CI test (tests/test_cuda_compile.py) and checked against the
// Random123 known-answer vectors.  Twin of witcert_cupy/_cpu/bits.py.
#pragma once
#include "common.cuh"

struct u32x4 {
    u32 x, y, z, w;
};

WC_HD u32 wc_mulhi(u32 a, u32 b) {
#ifdef __CUDA_ARCH__
    return __umulhi(a, b);
#else
    return (u32)(((u64)a * (u64)b) >> 32);
#endif
}

// hi and lo of a 32x32 product from one 64-bit product (a single IMAD.WIDE.U32 on the GPU).
WC_HD void wc_mulwide(u32 a, u32 b, u32& hi, u32& lo) {
    const u64 p = (u64)a * (u64)b;
    hi = (u32)(p >> 32);
    lo = (u32)p;
}

// One Philox round on the counter words (SPEC §1).
WC_HD void philox_round(u32& c0, u32& c1, u32& c2, u32& c3, u32 k0, u32 k1) {
    u32 hi0, lo0, hi1, lo1;
    wc_mulwide((u32)WC_PHILOX_M0, c0, hi0, lo0);
    wc_mulwide((u32)WC_PHILOX_M1, c2, hi1, lo1);
    const u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
}

// Philox4x32 with `rounds` rounds (the 7-round known-answer vector goes through here); with a
// constant count, as in philox10, the loop unrolls fully.
WC_HD u32x4 philox4x32_rounds(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1, int rounds) {
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int r = 0; r < rounds; ++r) {
        if (r > 0) {
            k0 += (u32)WC_PHILOX_W0;
            k1 += (u32)WC_PHILOX_W1;
        }
        philox_round(c0, c1, c2, c3, k0, k1);
    }
    u32x4 o = {c0, c1, c2, c3};
    return o;
}

// The 10-round stream of the contract.
WC_HD u32x4 philox10(u32 c0, u32 c1, u32 c2, u32 c3, u32 k0, u32 k1) {
    return philox4x32_rounds(c0, c1, c2, c3, k0, k1, 10);
}

// Counter words (SPEC §2): ctr0 = slot, ctr1 = side << 31 | chunk, ctr2 = layer << 16 | kv_head.
WC_HD u32 dither_ctr1(int side, int chunk) { return ((u32)side << WC_SIDE_SHIFT) | (u32)chunk; }
WC_HD u32 dither_ctr2(int layer, int kv_head) { return ((u32)layer << WC_LAYER_SHIFT) | (u32)kv_head; }

WC_HD u32 word_of(const u32x4& w, int i) { return i == 0 ? w.x : (i == 1 ? w.y : (i == 2 ? w.z : w.w)); }

// ξ of lane `lane` (= channel % per_call) of one Philox call: exact in fp32.
WC_HD float xi_of(const u32x4& w, int lane, int bits) {
    u32 j;
    if (bits == 24) {
        j = word_of(w, lane) >> 8;
    } else {
        int fields = 32 / bits;
        j = (word_of(w, lane / fields) >> (bits * (lane % fields))) & ((1u << bits) - 1u);
    }
    int num = 2 * (int)j + 1 - (1 << bits);
    return (float)num * (bits == 8 ? 0x1p-9f : (bits == 16 ? 0x1p-17f : 0x1p-25f));
}

WC_HD int per_call_of(int bits) { return bits == 8 ? 16 : (bits == 16 ? 8 : 4); }
