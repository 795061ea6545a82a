// decode_i8_geometry.cuh — decode_stage1_i8's launch geometry (decode_i8.cuh): tile, warps, the
// register budget's occupancy and the shared-memory layout, host-compilable so that
// tests/cuda_host/i8_smem.cu can print what witcert_cupy/_cuda/geometry.py mirrors.
#pragma once
#include "common.cuh"

#define I8_TILE 32
// channels per warp (two scale groups of 32): D / I8_WARP_CH warps per CTA
#define I8_WARP_CH 64
// minimum resident warps per SM the register budget is set for: 12 (three a scheduler: 168
// registers), every instance: those with page contributions too fit 168 without spills at every G
// and d, and measured 8–10% faster there than at 8 warps (up to 255 registers) at B = 8, 4% slower
// at B = 1 (docs/performance.md)
#define I8_WARPS_PER_SM 12
// ... at 16-bit dither: 8 (two a scheduler: up to 255 registers).  Its fifth product per group and
// block, the second byte's fragments and twice the Philox calls spilled at three a scheduler (10 or
// 12 warps: 168 registers) in most instances, wherever V's fields were drawn
#define I8_WARPS_PER_SM_WIDE 8
// CTAs per SM of head dim D at dither width BITS the register budget is set for
#define I8_MIN_CTAS(D, BITS) (((BITS) == 8 ? I8_WARPS_PER_SM : I8_WARPS_PER_SM_WIDE) * I8_WARP_CH / (D))

// shared memory (dynamic: 17–71 KB over D at 8 bits): per warp two buffers of staged rows and scales
// per side and one tile of dither fields per side (16-bit dither: two, the fields' high and low
// bytes); the tile's partial logits of every warp (two buffers), R head rows (I8_HEAD_ROWS);
// the per-head constants; the set-up (query, digits) uses the dither tiles' space before the first
// tile's fields are written, and the warps' exchange at the end after the last tile's are read.
// i8_smem_total below is the kernel's whole size; witcert_cupy/_cuda/geometry.py's i8_smem_bytes
// mirrors it.
template <int D, int BITS = 8, int R = 8, int QW = 4>
struct I8Smem {
    static constexpr int NW = D / I8_WARP_CH, NG = D / 32;
    u8 codes[2][NW][2][I8_TILE * I8_WARP_CH];  // [buffer][warp][side][i8_off(token, chunk)]
    // [warp][side][i8_off(token, chunk)]: j' = 255 − j; 16 bits: [warp][2·side + byte] (high, low)
    u8 dith[NW][BITS / 4][I8_TILE * I8_WARP_CH];
    u16 ks[2][NW][I8_TILE][NG];                // [buffer][warp][token][group]: K scales, every group
    u16 vs[2][NW][I8_TILE][2];                 // [buffer][warp][token][its group]: V scales
    float xp[2][NW][R][I8_TILE];               // [buffer][warp][head][token]: partial logits
    float4 cf[8][NG];                          // [head][group]: W1, C, Tier B's a1, a2
    // the query digits as K's A fragments, [group][head][t]: {a0, a1} of channels 32γ + 4t .. and
    // 32γ + 16 + 4t .. (thread (g, t)'s loads fall on distinct banks); rows g >= G zero (the mma's
    // rows).  Then (QW = 4) {a1, a2} of both, the second product's whole fragment (one 16-byte
    // load, where building it from {a0, a1} and a2 cost four register moves per group and 8 tokens),
    // or (QW = 2) a2 of both (I8_QD2_WORDS)
    uint4 qd01[NG][8][4];
    u32 qd2[NG][8][4][QW];
};
// the head rows of the partial logits and of the exact tier's partial sums: the G heads where shared
// memory sets the CTAs per SM (a Tier-A term beside the exact tier or outlier pairs: at d = 128 and
// G <= 7 one more CTA per SM, 6), else the mma's 8, which every lane's row indexes without a test (sized
// by G everywhere, NVRTC 13.0's ptxas spilled Tier-B instances at d = 64 and 256 over the tests)
#define I8_HEAD_ROWS(G, TA, EXACT, OUTL) (((TA) && ((EXACT) || (OUTL))) ? (G) : 8)
// the words of I8Smem::qd2 per (group, head, t): {a1, a2} in the instances of a fixed size, which
// fit their CTAs per SM with it at every D; a2 alone beside a Tier-A term or outlier pairs, whose
// runtime band and channel counts leave some steps no room (3 pairs or 32 bands lost a CTA per SM)
#define I8_QD2_WORDS(TA, OUTL) (((TA) || (OUTL)) ? 2 : 4)
// with the exact tier, beyond I8Smem<D, BITS, R>: the partial Σ|q_c||k_c| of exact-tier tokens per
// warp, head row and token (floats; one buffer, behind a CTA barrier in tiles that have such tokens)
#define I8_EXACT_SMEM(D, R) (((D) / I8_WARP_CH) * (R) * I8_TILE * 4)
// with a Tier-A term, beyond those: the staged K witness rows (fp16, NB bands, per buffer and token,
// each row staged by the warp that certifies the token), the band coefficients (float, [8][NB]) and
// the evaluation term's per-group coefficients (float, [8][D / 32])
#define I8_TIER_A_SMEM(D, NB) (2 * I8_TILE * (NB) * 2 + 8 * (NB) * 4 + 8 * ((D) / 32) * 4)
// with outlier pairs (NP2 exactly stored channels, at most I8_OUTL_MAX), beyond those: the channels
// (int [I8_OUTL_MAX]), each head's query on them (float [8][NP2]) and, per warp, buffer and token,
// the K and V rows' stored values (fp16 [NW][2][I8_TILE][2][NP2]): at d = 64 two pairs still fit 12
// CTAs per SM
#define I8_OUTL_MAX 8
#define I8_OUTL_SMEM(D, NP2) (I8_OUTL_MAX * 4 + 8 * (NP2) * 4 + ((D) / I8_WARP_CH) * 2 * I8_TILE * 2 * (NP2) * 2)

// the dynamic shared memory of decode_stage1_i8<D, G, TIER, ..., EXACT, OUTL, BITS> (TA: a Tier-A
// term) over NB witness bands and NP2 outlier channels (the kernel traps when given less)
template <int D, int BITS, int G, bool TA, bool EXACT, bool OUTL>
__host__ __device__ constexpr unsigned i8_smem_total(int NB, int NP2) {
    constexpr int R = I8_HEAD_ROWS(G, TA, EXACT, OUTL);
    return (unsigned)(sizeof(I8Smem<D, BITS, R, I8_QD2_WORDS(TA, OUTL)>) + (EXACT ? I8_EXACT_SMEM(D, R) : 0) + (TA ? I8_TIER_A_SMEM(D, NB) : 0) +
                      (OUTL ? I8_OUTL_SMEM(D, NP2) : 0));
}

template <int D>
struct I8Setup {
    float q[8][D];           // the G query rows
    float head[8][4];        // per head: Fm, P1, P2, ρ
    int flags[8];            // per head: bit 0 query not finite, bit 1 coefficients overflow
    long long sl[32];        // warp 0's first tile, from warp 1: each lane's slot (or -1),
    int te[32], pg[32];      // its exact-tier entry and the next tile's page
};
