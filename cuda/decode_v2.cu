// decode_v2.cu — stage 1 of the split-KV decode with staged tiles: the INT8 pool at d = 128 (8-,
// 16- or 24-bit dither; outlier pairs, Tier A/AB, scale groups of 16–128, the exact tier and
// per-page contributions on pages of at most one tile in the general layout).  Same contract, inputs and outputs as decode_stage1 in decode.cu (SPEC §4–6; fp32
// dequant x̂ = s·(k − ξ) with the exact stream), which serves every other case.  The general
// layout's certificate carries the evaluation term γ_t per token (SPEC §4.1: β's sum times
// gamma_per_beta, the outlier channels' exact values; an exact-tier token's whole row) and tracks
// Γ = max γ_t per lane; an exact-tier token reads the tier's fp16 rows (a branch on its page).
//
// decode_stage1_v2<G, BITS, PLAIN, SPLIT = PLAIN>: grid (num_splits, Hkv, B), block 64 = two warps,
// lane = token of a 32-token tile, warp = side (K, V); each thread owns its token's whole row of its
// side (SPLIT: its half of both sides' rows, below).  BITS
// is the dither resolution (8, 16, 24) (pools of fp16 rows have their own kernel, decode_f16.cu).
// PLAIN: the library's default layout — no outlier channels, 2^V2_PLAIN_GS_SHIFT channels per scale, no
// Tier-A term in the step — as constants, so the outlier, Tier-A and other-group-size paths are
// not in the code at all (the same operations in the same order as the general instantiation on
// such a pool: the same bits).  Why (docs/performance.md): at B = 1 a third of stage 1's
// warp samples waited for instruction fetch, and ≈ 2,150 never-run instructions sat
// between the hot blocks; PLAIN is 33% less code at G = 7 and 4–8% faster at 32k.  A
// launch whose arguments do not match the layout poisons its split (NaN, no guarantee) rather
// than computing without what it was given.
// SPLIT (PLAIN only; the library's choice from B·Hkv >= 16, witcert_cupy/_cuda/): the warps split
// each row's channels instead of the sides — warp w dequantizes channels [64w, 64w + 64) of both
// the K and the V row of its token and takes the softmax and certificate of half the heads — so
// that neither warp waits for the other (docs/performance.md: the K warp's phase A was the
// step's critical path, and the V warp's not on it; 5–7.5% faster certified, 8–12% uncertified at
// B >= 8).  Its dot products are blocked by chunk at every G; with those, the same bits as
// the general instantiation (V2Tuning::blocked_dot).  The sections below describe the sides' layout;
// the split's own is at its loop.
//   A. A tile's rows (128 code bytes and the fp16 scales per token) arrive by cp.async in a shared
//      staging tile, issued a tile ahead, eight lanes per row.  Per 16-channel chunk: one, two or
//      four Philox calls (8, 16, 24 bits) and x̂ in 4, 6 or 7 instructions per element
//      (dequant.cuh), then
//        K warp: straight into the G dot products q_g · k̂ (sum orders below; registers; K̂ never
//                touches shared memory), then, still lane = token, the tile's online softmax by
//                warp reductions: probabilities P, rescales, and the logits for the V warp;
//        V warp: into the shared fp32 tile V̂[32][132] (padded: a quarter-warp's 16-byte stores to
//                8 rows hit distinct banks), then its token's c_t for every head (Tier A from
//                K's witness row, Tier B from K's scales, read from global memory).
//   B. the V warp (lane = token): cmax and λ from c_t and the logits, at the start of its next
//      phase A (after the last tile, once more), where the K warp's longer phase A
//      hides it.
//   C. thread t accumulates channels 2t, 2t + 1 of o for every head from V̂ and P.
// Why (docs/performance.md): v2.3 staged K̂ in shared memory and read it back once per
// head (≈ 1,150 shared wavefronts per tile, its largest cost after the arithmetic); here each K̂
// element is used from registers by the G heads, every (token, head) is still computed once, and
// the certificate rides on the warp that has slack (the K warp, with the dot products, sets the
// pace).  Sum orders: each INT8 dot product blocked by 16-channel chunk in the general layout and
// in PLAIN up to G = 6 (each chunk summed in channel order, then added in chunk order: the error of
// 16 + 8 terms instead of 128),
// channel order above; token order per output channel, band and group order in
// c_t, token order per lane in λ.
// Shared memory: static, 19–38 KB.  Never reads out of bounds: page ids outside the pool, an
// inconsistent kv_indptr or a bad last-page length poison the split (NaN output, infinite
// certificate), as in decode_stage1; a token past the split's end reads slot 0.
#include "common.cuh"
#include "philox.cuh"
#include "dequant.cuh"
#include "cp_async.cuh"
#include "griddep.cuh"
#include "certificate.cuh"

#define V2_THREADS 64
#define V2_TILE 32
#define V2_D 128
#define V2_PAD (V2_D + 4)
#define V2_CPITCH (V2_D / 4 + 4)
// λ's update for tile i is made by the V warp at the start of its phase A of tile i + 1, where the
// K warp's longer phase A hides it (between the barrier and phase C of tile i both warps waited for
// it); the logits go through a second buffer so that the K warp's next ones do not overwrite them
// first.  SPLIT takes a tile's c_t and λ step after the tile's phase C: 1.5–2.1% faster certified
// at 24 bits and B >= 8 than in the next tile's A1, the same at 8 bits and at B = 1
// (docs/performance.md).
// The unrolls and the dot product's blocking of decode_stage1_v2<G, BITS, ...>, by (G, BITS), as
// measured on the H200 (docs/performance.md).
template <int G, int BITS>
struct V2Tuning {
    // chunks (one Philox call each) unrolled per K row and per V row: the Philox chains of an
    // unrolled pair interleave (ILP), at a register cost.  Two per K row are 1–2% faster at G = 4,
    // one at G = 7 (where two also spill at 168 registers).  16-bit dither at G = 5–7 (two Philox
    // calls per chunk) takes one per K row: NVRTC 13.0 spills 4–8 bytes at 168 registers
    // otherwise.  One per V row (rather than two): the same bits, 0.4–1.1% faster at every 8-bit
    // shape measured (B = 1 to 32, G = 4 and 7; 2.3% at B = 1, 28/4, 4k, where the smaller loop
    // body also means fewer instruction-cache misses); two at G = 4, 24 bits, where one spills 4
    // bytes under nvcc 13.0.
    static constexpr int k_unroll = (G <= 6 && !(BITS == 16 && G >= 5)) ? 2 : 1;
    static constexpr int v_unroll = (G == 4 && BITS == 24) ? 2 : 1;
    // SPLIT's chunks unrolled per half row (four: the whole half), so that the Philox chains of
    // the four chunks interleave: 4.7–5.5% faster than one chunk at B >= 8 (G = 7 and 4; two
    // chunks: 0.5–2.9%), 1–2% at B = 1.  Without spills at every G and resolution but these at 24
    // bits, which take two chunks: G <= 3 (128 registers; nvcc 13.0), G = 5 (168; nvcc 13.0
    // spilled 8 bytes with the certificate) and G = 6 (168; NVRTC 13.0 spilled 4 bytes, nvcc none).
    static constexpr int split_unroll = ((G <= 3 || G == 5 || G == 6) && BITS == 24) ? 2 : 4;
    // INT8 dot products blocked by 16-channel chunk up to G = 6 (the error of v2's logits fell to
    // the general kernel's, at no cost at G = 4; at G = 7 it cost 4–5%, so one chain there)
    static constexpr bool blocked_dot = G <= 6;
    // heads whose epilogue reductions the V warp interleaves, level by level (four at G = 4,
    // 24 bits spill 4 bytes under NVRTC 13.0)
    static constexpr int epi_heads = (G == 4 && BITS == 24) ? 2 : 4;
};
// PLAIN's scale group: 32 channels (QuantConfig's default group_size; witcert_cupy/_cuda/'s
// V2_PLAIN_GROUP_SIZE, checked to agree by tests/test_cuda_compile.py)
#define V2_PLAIN_GS_SHIFT 5
#define V2_LOG2E WC_LOG2E
#define V2_LN2 WC_LN2
// SPLIT's staged half row (one side, one warp): 16 words of codes (64 channels), then the token's
// four fp16 scales (2 words, padded to 4 so that rows stay 16-byte aligned); a pitch of 20 words
// puts a quarter-warp's 16-byte reads of 8 rows (lane = token) on distinct banks
#define V2_BPITCH 20
// SPLIT's per-warp heads: the first warp's ⌈G/2⌉, the second warp's the rest
__host__ __device__ constexpr int v2_heads_a(int G) { return (G + 1) / 2; }

// Philox calls per 16-channel chunk (SPEC §2: a call feeds 16, 8 or 4 channels at 8, 16, 24 bits)
__host__ __device__ constexpr int v2_calls(int bits) { return bits == 8 ? 1 : (bits == 16 ? 2 : 4); }

// the inputs of one 16-channel chunk k of a staged INT8 row: its code words, the dither words of
// its Philox calls (SPEC §2 counter chunk = k·calls + i) and its scale (zero past the split's end)
template <int BITS>
__device__ __forceinline__ float v2_chunk_inputs(const u32* crow, const u16* srow, int k, int side, int gs_shift,
                                                 bool valid, u32 slot, u32 ctr2, u32 k0, u32 k1, u32 (&cw)[4],
                                                 u32 (&xw)[4 * v2_calls(BITS)]) {
    constexpr int NC = v2_calls(BITS);
#pragma unroll
    for (int i = 0; i < NC; ++i) {
        const u32x4 w = philox10(slot, dither_ctr1(side, NC * k + i), ctr2, 0u, k0, k1);
        xw[4 * i] = w.x, xw[4 * i + 1] = w.y, xw[4 * i + 2] = w.z, xw[4 * i + 3] = w.w;
    }
    const uint4 cr = *reinterpret_cast<const uint4*>(crow + 4 * k);
    cw[0] = cr.x, cw[1] = cr.y, cw[2] = cr.z, cw[3] = cr.w;
    return valid ? f16_to_f32(srow[(16 * k) >> gs_shift]) : 0.0f;
}

// x̂ of one chunk at the dither resolution BITS (dequant.cuh)
template <int BITS>
__device__ __forceinline__ void v2_dequant(const u32 (&cw)[4], const u32 (&xw)[4 * v2_calls(BITS)], float sb,
                                           float (&x)[16]) {
    if constexpr (BITS == 8) dequant16_u8(cw, xw, sb, x);
    else if constexpr (BITS == 16) dequant16_u16(cw, xw, sb, x);
    else dequant16_u24(cw, xw, sb, x);
}

// eight fp16 values of 16 bytes as fp32; zeros where not `valid`
__device__ __forceinline__ void v2_f16x8(const uint4& r, bool valid, float (&x)[8]) {
    const u32 wd[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = valid ? f16_to_f32((u16)(wd[e / 2] >> (16 * (e % 2)))) : 0.0f;
}

// sixteen fp16 values of an exact-tier row (its chunk's two 16-byte pieces) as fp32
__device__ __forceinline__ void v2_f16x16(const u16* __restrict__ src, float (&x)[16]) {
    float lo[8], hi[8];
    v2_f16x8(reinterpret_cast<const uint4*>(src)[0], true, lo);
    v2_f16x8(reinterpret_cast<const uint4*>(src)[1], true, hi);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = lo[e], x[8 + e] = hi[e];
}

// Tier B's c_t of one token for one head in log2 units (docs/certificate.md §6: the coefficients carry
// C_EVAL_SLACK·log2 e, rounded up) from the token's scales s1 (squared: s2) over NGC groups and the
// head's group coefficients (bq1, bq2 rows).  GUARD: a coefficient may be +inf (a query whose Σq²
// overflows), and 0·inf = NaN becomes +inf.  PLAIN's coefficients are finite (an overflowing head is
// flagged instead, `cinf`) and its scales are finite wherever the logits are (a non-finite scale
// poisons the split: no bypass channels), so its c_t is finite or +inf without the check.
template <int NGC, bool GUARD>
__device__ __forceinline__ float v2_c_b(const float (&s1)[NGC], const float (&s2)[NGC], const float* bq1g,
                                        const float* bq2g, float& be) {
    float u2 = 0.0f;
    be = 0.0f;
#pragma unroll
    for (int gr = 0; gr < NGC; ++gr) {
        u2 += s2[gr] * bq2g[gr];
        be += s1[gr] * bq1g[gr];
    }
    // sqrt.approx: within a few ulps, far inside C_EVAL_SLACK (as extend_tc; one instruction where
    // u2·rsqrt(u2) and its zero guard took four).  sqrt(0) = 0, and NaN (0·inf: a query group whose
    // Σq² overflows where the token's scale is 0) passes through, which the GUARD turns into +inf as
    // sqrtf would; mapping it to 0 gave a finite c_t without u's other groups.
    float u;
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(u) : "f"(u2));
    const float c2 = u + be;
    return GUARD ? (c2 <= WC_F32_MAX ? c2 : INFINITY) : c2;
}
template <int NGC, bool GUARD>
__device__ __forceinline__ float v2_c_b(const float (&s1)[NGC], const float (&s2)[NGC], const float* bq1g,
                                        const float* bq2g) {
    float be;
    return v2_c_b<NGC, GUARD>(s1, s2, bq1g, bq2g, be);
}

// c_t of one token for every head (SPEC §4) in log2 units: Tier A from its K witness row, Tier B from
// its K scales (NGC groups), c = min of the two; a token past the split's end counts zero scales.
// be: β's sum Σ_g s_g b1_g per head (the quantized channels' evaluation term is gamma_per_beta times
// it, SPEC §4.1), formed for every tier; Tier B's term enters c only where tier & 2.
template <int NGC, int G, bool GUARD>
__device__ __forceinline__ void v2_c_tier_b(const u16 (&ks)[8], bool valid, int tier, const float (*bq1)[8],
                                            const float (*bq2)[8], float (&c)[G], float (&be)[G]) {
    float s1[NGC], s2[NGC];
#pragma unroll
    for (int gr = 0; gr < NGC; ++gr) {
        s1[gr] = valid ? f16_to_f32(ks[gr]) : 0.0f;
        s2[gr] = __fmul_rn(s1[gr], s1[gr]);
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const float cb = v2_c_b<NGC, GUARD>(s1, s2, bq1[g], bq2[g], be[g]);
        if (tier & 2) c[g] = fminf(c[g], cb);
    }
}

template <int G, bool GUARD>
__device__ __forceinline__ void v2_token_c(const u16 (&ks)[8], bool valid, int NG, int tier, int NB,
                                           const u16* __restrict__ wrow, const float (*a_band)[64],
                                           const float (*bq1)[8], const float (*bq2)[8], float (&c)[G],
                                           float (&be)[G]) {
#pragma unroll
    for (int g = 0; g < G; ++g) c[g] = INFINITY;
    if (tier & 1) {  // Σ_b a_b w_{t,b} per head, band order
        float ca[G];
#pragma unroll
        for (int g = 0; g < G; ++g) ca[g] = 0.0f;
        for (int bb = 0; bb < NB; ++bb) {
            const float wv = f16_to_f32(wrow[bb]);
#pragma unroll
            for (int g = 0; g < G; ++g) ca[g] += a_band[g][bb] * wv;
        }
#pragma unroll
        for (int g = 0; g < G; ++g) c[g] = ca[g] <= WC_F32_MAX ? ca[g] : INFINITY;  // (a_band carries the slack)
    }
#pragma unroll
    for (int g = 0; g < G; ++g) be[g] = 0.0f;
    if (tier) {  // the group count is a power of two
        switch (NG) {
            case 8: v2_c_tier_b<8, G, GUARD>(ks, valid, tier, bq1, bq2, c, be); break;
            case 4: v2_c_tier_b<4, G, GUARD>(ks, valid, tier, bq1, bq2, c, be); break;
            case 2: v2_c_tier_b<2, G, GUARD>(ks, valid, tier, bq1, bq2, c, be); break;
            default: v2_c_tier_b<1, G, GUARD>(ks, valid, tier, bq1, bq2, c, be); break;
        }
    }
}

// CTAs per SM the register budget is set for (64 threads per CTA; shared memory, 19–37 KB, allows
// 6–8): the largest count whose cap (65536 / (64·n) registers) ptxas meets without spilling —
// 8 (128 registers) up to G = 3, else 6 (168); at G = 8 PLAIN needs
// 180 (a bound of 5 still caps at 168 and spills), so 4, which still runs 5 per SM.  (7 at G = 4,
// 128 registers with one chunk per K step, measured 12% slower: docs/performance.md.)  The
// general layout of an INT8 pool (outlier channels, Tier A, the exact tier, per-token γ_t) holds
// more state through the loop: 6 up to G = 3 (8 spills 12–20 bytes) and 4 at G = 4 (6 and 5 spill
// 8 bytes at 16 bits; it takes 177 registers, which still run 5 per SM).
__host__ __device__ constexpr int v2_min_blocks(int G, bool plain) {
    return (!plain && G <= 4) ? (G <= 3 ? 6 : 4) : (G <= 3 ? 8 : (G <= 7 ? 6 : 4));
}

template <int G, int BITS, bool PLAIN, bool SPLIT = PLAIN>
__global__ void __launch_bounds__(V2_THREADS, v2_min_blocks(G, PLAIN)) decode_stage1_v2(
    const float* __restrict__ q, const i8* __restrict__ codes, const u16* __restrict__ scales,
    const u16* __restrict__ outl, const u16* __restrict__ wit, const int* __restrict__ bypass_ch,
    const int* __restrict__ band_ch, const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
    const int* __restrict__ kv_last_page_len, float* __restrict__ o_part, float* __restrict__ lse_part,
    float* __restrict__ lam_part, float* __restrict__ cmax_part, float* __restrict__ gam_part,
    const int* __restrict__ tier_map, const u16* __restrict__ tier_k, const u16* __restrict__ tier_v,
    float* __restrict__ page_lse, float* __restrict__ page_lam, i64 N, int H, int layer, int head_base, int gs_shift,
    int NP2, int NB, int page_shift, int num_pages, int nnz, int num_splits, int tier, int tier_stride, int tier_cap,
    int max_pages, u32 k0, u32 k1, float sm, float log_budget, float beta_steps, float gamma_per_beta,
    float gamma_exact) {
    static_assert(BITS == 8 || BITS == 16 || BITS == 24, "BITS: 8, 16 or 24");
    static_assert(!SPLIT || PLAIN, "SPLIT: the channel split is a PLAIN layout");
    constexpr int NXW = 4 * v2_calls(BITS);  // dither words per 16-channel chunk
    constexpr int D = V2_D;
    using Tune = V2Tuning<G, BITS>;
    constexpr int KU = Tune::k_unroll, VU = Tune::v_unroll, BU = Tune::split_unroll;  // chunk unrolls
    // the general layout sums by chunk at every G: its certificate's evaluation term is for that
    // order's height (23 rather than a chain's 128: +0.9% against +4.3–4.8% of the median bound at
    // G = 7, bench/looseness.py), and its step has more besides the dot products
    constexpr bool BLOCKED = Tune::blocked_dot || !PLAIN;
    __shared__ __align__(16) float q_s[G][D];
    // the certificate's coefficients per query head, each times C_EVAL_SLACK·log2 e (squared for
    // bq2) rounded up, so that c_t comes out in log2 units with its slack (docs/certificate.md §6)
    __shared__ __align__(16) float bq2[G][8];  // 2 (sm²/12) Q2_g log(2S/δ_loc) per scale group (gs >= 16)
    __shared__ __align__(16) float bq1[G][8];  // sm Q1_g (2^-(m+1) + 2^-15)
    __shared__ float a_band[G][64];            // sm ||q_b|| per band
    __shared__ int cinf[G];  // PLAIN: the head's Tier-B coefficients overflow (c_t = +inf for every token)
    // PLAIN: Γ_s ≤ rho·cmax_s (docs/certificate.md §10.4), the evaluation term's share of c_t bounded
    // per head from its coefficients (Cauchy–Schwarz), so no token tracks γ_t; and b1²/b2 per group
    __shared__ float rho[G];
    __shared__ double csq[G][8];  // (float64: certificate.cuh's sq_ratio_up)
    __shared__ int s_bad;  // heads with a non-finite logit (bit g), then heads whose o is not (bit G + g)
    __shared__ short oidx[D];
    __shared__ __align__(16) float Vs[V2_TILE][V2_PAD];
    // INT8: the tile's staged rows per side, codes [0, 32) and fp16 scales [32, 36) in words; a
    // pitch of 36 words puts a quarter-warp's 16-byte reads of 8 rows (lane = token) on distinct banks
    __shared__ __align__(16) u32 ctile[SPLIT ? 1 : 2][V2_TILE][SPLIT ? 4 : V2_CPITCH];
    __shared__ __align__(16) float P[G][V2_TILE];
    __shared__ float sc_s[G];   // this tile's rescale of o per head
    __shared__ float LT[SPLIT ? 1 : 2][SPLIT ? 1 : G][V2_TILE];  // the tile's logits (log2 units), for the V warp's λ
    // V warp: a tile's c_t per lane until its λ step (at the next phase A), and in
    // column G 1 where the lane's token is valid.  In registers (G + 1, carried over the loop's back
    // edge) they were live through the K warp's code too, since ptxas cannot see that a thread stays
    // on its side; here the same bits ran 0–1.7% faster.  The pitch is odd, so the lanes'
    // stores of one column hit distinct banks.
    __shared__ float cbuf[SPLIT ? 1 : V2_TILE][(G + 1) | 1];
    __shared__ float st[G][5];  // per head at the end: m, l, m2, l2, cmax (all in log2 units)
    // outside PLAIN, V warp: the largest γ_t per lane and head (log2 units), for Γ_s
    __shared__ float gbuf[PLAIN ? 1 : V2_TILE][G];
    // SPLIT (docs/performance.md): warp w's staged halves [w][side][token] of both sides'
    // rows; per head and token, the first warp's sum of q·k̂ over chunks 0–3 (xd) and the second
    // warp's chunk sums 4–7 (xp).  (All eight sums would cost 2.7 KB more, and a sixth CTA per SM.)
    __shared__ __align__(16) u32 ctb[SPLIT ? 2 * 2 * V2_TILE * V2_BPITCH : 4];
    __shared__ float xd[SPLIT ? G : 1][V2_TILE];
    __shared__ float xp[SPLIT ? G : 1][4][V2_TILE];

    griddep_wait();  // before the first global access (griddep.cuh)
    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, side = tid >> 5, lane = tid & 31;
    const int Hq = H * G;
    const float sm2 = sm * V2_LOG2E;
    int hbad = 0;  // this thread's heads with a non-finite logit
    if (tid == 0) s_bad = 0;
    bool off_layout = false;  // PLAIN launched on another layout: the split is poisoned below
    if constexpr (PLAIN) {
        off_layout = NP2 != 0 || (tier & 1) != 0 || gs_shift != V2_PLAIN_GS_SHIFT || tier_map != nullptr ||
                     page_lse != nullptr;
        NP2 = 0, tier &= 2, gs_shift = V2_PLAIN_GS_SHIFT;
    }
    // (page contributions: a certified step's, for pages of at most one tile)
    if (page_lse != nullptr && (tier == 0 || page_shift > 5)) off_layout = true;
    const int NG = D >> gs_shift, gs = 1 << gs_shift;  // scale groups (a power of two, >= 16)
    // the G query rows are requested first, so their round trip overlaps the page table's two
    // dependent ones below instead of following them (the set-up took ≈ 5 µs at B = 1)
    constexpr int NQ = G * D / V2_THREADS;
    float qr[NQ];
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
        const int idx = tid + i * V2_THREADS;
        qr[i] = q[((i64)b * Hq + h * G + idx / D) * D + idx % D];
    }

    // ---- the split's token range, every page-table value checked before use (as decode_stage1)
    const RequestPages rp = request_pages(kv_indptr, kv_last_page_len, b, nnz, page_shift);
    const i64 S = rp.S;
    bool poisoned = rp.poisoned || off_layout;
    const SplitTokens st_ = split_tokens(rp, s, num_splits, page_shift);
    const i64 ta = st_.ta, tb = st_.tb;

    float acc[G][2];  // channels 2·tid, 2·tid + 1 of o for every head
    // head statistics per lane (its tokens), reduced once after the last tile.  A thread is on one
    // side for the whole kernel, so the two warps' statistics share registers (ptxas cannot see
    // that the branches never mix; 2·G registers saved): K warp: mx_ = the softmax maximum m
    // (warp-uniform: phase C rescales by it), sm_ = its sum l; V warp: mx_ = λ's own running
    // maximum m2, sm_ = its sum l2 (SPEC §6), cm_ = cmax.  An infinite c_t makes cmax infinite,
    // which is how the end tells λ = +inf ("no guarantee").
    float mx_[G], sm_[G], cm_[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        acc[g][0] = acc[g][1] = 0.0f;
        mx_[g] = -INFINITY;  // m and m2 both start at −inf, l and l2 at 0
        sm_[g] = 0.0f;
        cm_[g] = 0.0f;
    }
    float(&m)[G] = mx_;
    float(&l)[G] = sm_;
    float(&m2)[G] = mx_;
    float(&l2)[G] = sm_;
    float(&cmx)[G] = cm_;
    // SPLIT: each warp keeps its own heads' statistics, [glo, glo + gn): the softmax's m and l (bm,
    // bl), λ's running maximum and sum and cmax (bm2, bl2, bcm)
    constexpr int GA = v2_heads_a(G);
    const int glo = side * GA, gn = side ? G - GA : GA;
    float bm[GA], bl[GA], bm2[GA], bl2[GA], bcm[GA];
#pragma unroll
    for (int j = 0; j < GA; ++j) {
        bm[j] = bm2[j] = -INFINITY;
        bl[j] = bl2[j] = 0.0f;
        bcm[j] = 0.0f;
    }

    if (ta < tb) {  // CTA-uniform: an empty split (past its request's pages) goes straight to its outputs
    const bool byp = NP2 > 0;  // outlier channels carry their exact fp16 values (SPEC §3)
    // lane = token of a tile: its page id and slot (common.cuh: tile_page, tile_slot)
    auto page_of = [&](i64 t0n) { return tile_page(kv_indices, rp.p0, t0n, tb, lane, page_shift); };
    auto slot_at = [&](i64 t0n, int page) { return tile_slot(t0n, tb, lane, page, page_shift, num_pages, poisoned); };
    // the exact tier's entry of a valid slot's page (SPEC §7), or -1: its tokens are served from the
    // tier's fp16 rows [tier_cap, page_size, D] with c_t = γ_t (general layout only)
    auto tier_entry = [&](i64 sl_) -> int {
        if (PLAIN || tier_map == nullptr || sl_ < 0) return -1;
        const int e = tier_map[(i64)h * tier_stride + (int)(sl_ >> page_shift)];
        return e >= 0 && e < tier_cap ? e : -1;
    };
    auto tier_row = [&](int e, u32 slot_) { return ((i64)e << page_shift) + (slot_ & ((1u << page_shift) - 1u)); };
    const i64 row_base = pool_row(layer, side, H, h, N);
    const u32 ctr2 = dither_ctr2(layer, h + head_base);
    // INT8: a tile's rows of this warp's side (128 code bytes and NG fp16 scales per token) travel
    // by cp.async into `ctile`, issued a tile ahead, so the loads overlap phase C and the barriers,
    // and the arithmetic below holds one chunk at a time.  Eight lanes copy one row's 128 code bytes
    // (lane & 7 = its 16-byte piece, the row's slot by shuffle): each instruction moves four whole
    // rows, coalesced in global memory and one wavefront per row in shared memory (a row per lane
    // took 32 wavefronts per instruction: Nsight Compute).  Each lane copies its own row's
    // scales.  Visibility: each thread's cp.async.wait_all, then a __syncwarp.  Warp-uniform calls.
    // SPLIT: warp w stages channels [64w, 64w + 64) of both sides' rows (four lanes a half row, eight
    // half rows an instruction) and its own token's scales of both sides, into its part of `ctb`.
    u32* crow = &ctile[SPLIT ? 0 : side][lane][0];
    auto stage_rows = [&](u32 slot_) {
        if constexpr (SPLIT) {
#pragma unroll
            for (int sd = 0; sd < 2; ++sd) {
                const i64 rb = pool_row(layer, sd, H, h, N);
                u32* dst = &ctb[(side * 2 + sd) * V2_TILE * V2_BPITCH];
#pragma unroll
                for (int i = 0; i < V2_TILE / 8; ++i) {
                    const int r = 8 * i + (lane >> 2);
                    const i64 row = rb + __shfl_sync(0xffffffffu, slot_, r);
                    cp_async16(dst + r * V2_BPITCH + 4 * (lane & 3), codes + row * D + 64 * side + 16 * (lane & 3));
                }
                cp_async8(dst + lane * V2_BPITCH + 16, scales + (rb + slot_) * 4);  // NG = 4
            }
            cp_async_commit();
        } else {
#pragma unroll
            for (int i = 0; i < V2_TILE / 4; ++i) {
                const int r = 4 * i + (lane >> 3);
                const i64 row = row_base + __shfl_sync(0xffffffffu, slot_, r);
                cp_async16(&ctile[side][r][4 * (lane & 7)], codes + row * D + 16 * (lane & 7));
            }
            const u16* ss = scales + (row_base + slot_) * NG;
            switch (NG) {  // the row's scales: 2·NG bytes, aligned to their size
                case 8: cp_async16(crow + 32, ss); break;
                case 4: cp_async8(crow + 32, ss); break;
                case 2: cp_async4(crow + 32, ss); break;
                default: reinterpret_cast<u16*>(crow + 32)[0] = ss[0]; break;
            }
            cp_async_commit();
        }
    };
    int pg = page_of(ta);
    i64 sl = slot_at(ta, pg);
    int te = tier_entry(sl);  // (general layout: this tile's)
    stage_rows(sl < 0 ? 0u : (u32)sl);  // the first tile's rows load during the set-up below
    pg = page_of(ta + V2_TILE);

    // ---- per query head: the query, Tier-B group coefficients, Tier-A band norms
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
        const int idx = tid + i * V2_THREADS;
        q_s[idx / D][idx % D] = qr[i];
    }
    for (int c = tid; c < D; c += V2_THREADS) oidx[c] = -1;
    if (tid < G) cinf[tid] = 0;
    __syncthreads();
    for (int j = tid; j < NP2; j += V2_THREADS) oidx[bypass_ch[h * NP2 + j]] = (short)j;
    __syncthreads();
    const float log_term = log_budget + logf((float)max(S, (i64)1));
    // (K1, K2: not k1, the Philox key)
    const float K1 = __fmul_ru((float)WC_C_EVAL_SLACK, WC_LOG2E_UP), K2 = __fmul_ru(K1, K1);
    const SmSplit smx = sm_split(sm);
    // PLAIN folds the quantized channels' evaluation term into β's coefficient (SPEC §4.1):
    // c_t = u_t + (1 + gamma_per_beta)·Σ_g s_g b1_g
    const float fold = PLAIN ? __fadd_ru(1.0f, gamma_per_beta) : 1.0f;
    // outside PLAIN, γ_t per token: gamma_per_beta·Σ_g s_g b1_g + gex2·Σ_{c∈O} |q_c||x_c| (log2 units
    // with the slack, as b1), so β's coefficients are formed for every tier of an INT8 pool
    const float gex2 = __fmul_ru(gamma_exact, K1);
    if ((tier & 2) || (!PLAIN && tier)) {
        for (int idx = tid; idx < G * NG; idx += V2_THREADS) {
            const int g = idx / NG, ch0 = (idx % NG) * gs;
            // Σ|q'|, Σq'² on the group's normalized query (certificate.cuh), a bypassed channel
            // left out
            float q1, q2, b2, b1;
            int e;
            normalized_sums(q_s[g], gs, [&](int i) { return ch0 + i; }, [&](int i) { return byp && oidx[ch0 + i] >= 0; },
                            q1, q2, e);
            group_coefficients(smx, q1, q2, e, log_term, beta_steps, b2, b1);
            csq[g][idx % NG] = sq_ratio_up(b1, b2);
            float a2 = __fmul_ru(b2, K2);
            float a1 = __fmul_ru(__fmul_ru(b1, fold), K1);
            if (PLAIN && !(a2 <= WC_F32_MAX && a1 <= WC_F32_MAX)) {  // (as the extend kernel's rows)
                a2 = a1 = 0.0f;
                cinf[g] = 1;
            }
            bq2[g][idx % NG] = a2;
            bq1[g][idx % NG] = a1;
        }
    }
    if (tier & 1) {
        const int per = D / NB;
        for (int idx = tid; idx < G * NB; idx += V2_THREADS) {
            const int g = idx / NB, bb = idx % NB;
            a_band[g][bb] = __fmul_ru(band_coefficient_of(q_s[g], band_ch, bb, per, smx), K1);
        }
    }
    __syncthreads();
    if (PLAIN && tid < G) {  // rho = min(gpb·sqrt(Σ_g b1²/b2), gpb/(1 + gpb)), rounded up
        double t = 0.0;
        for (int gr = 0; gr < NG; ++gr) t = __dadd_ru(t, csq[tid][gr]);
        rho[tid] = rho_up(t, gamma_per_beta, __fdiv_ru(gamma_per_beta, fold));
    }
    if constexpr (!PLAIN) {
        if (side == 1)
#pragma unroll
            for (int g = 0; g < G; ++g) gbuf[lane][g] = 0.0f;
    }
    if constexpr (PLAIN) {  // a head whose coefficients overflow has c_t = +inf at every token: so has cmax
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (cinf[g]) cmx[g] = INFINITY;
#pragma unroll
        for (int j = 0; j < GA; ++j)
            if (j < gn && cinf[glo + j]) bcm[j] = INFINITY;
    }

    // ---- C: channels 2·tid, 2·tid + 1 of every head's output (a warp reads 256 contiguous bytes
    // of a V̂ row: two wavefronts)
    auto phase_c = [&]() {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            acc[g][0] *= sc_s[g];
            acc[g][1] *= sc_s[g];
        }
#pragma unroll 2
        for (int t = 0; t < V2_TILE; t += 4) {
            const float2 v0 = *reinterpret_cast<const float2*>(&Vs[t][2 * tid]);
            const float2 v1 = *reinterpret_cast<const float2*>(&Vs[t + 1][2 * tid]);
            const float2 v2 = *reinterpret_cast<const float2*>(&Vs[t + 2][2 * tid]);
            const float2 v3 = *reinterpret_cast<const float2*>(&Vs[t + 3][2 * tid]);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float4 pp = *reinterpret_cast<const float4*>(&P[g][t]);
                acc[g][0] += pp.x * v0.x;
                acc[g][0] += pp.y * v1.x;
                acc[g][0] += pp.z * v2.x;
                acc[g][0] += pp.w * v3.x;
                acc[g][1] += pp.x * v0.y;
                acc[g][1] += pp.y * v1.y;
                acc[g][1] += pp.z * v2.y;
                acc[g][1] += pp.w * v3.y;
            }
        }
    };
    if constexpr (SPLIT) {
    // ---- SPLIT: the two warps split each row's channels instead of the sides (docs/performance.md:
    // the K warp's phase A was the step's critical path, the V warp's was not on it).
    // Per tile, warp w (lane = token):
    //   A1. chunks 4w .. 4w + 3 of the token's K row: for every head, the first warp's running
    //       sum of the chunk sums into xd, the second warp's chunk sums into xp;
    //   — barrier —
    //   A2. chunks 4w .. 4w + 3 of the token's V row into V̂; then the warp's own heads (v2_heads_a):
    //       the logit as xd plus the four sums of xp in chunk order (the general path's blocked
    //       sum, bit for bit) and the tile's softmax; the next tile's half rows start loading;
    //       c_t and λ's step wait until after phase C;
    //   — barrier —
    //   C. as the general path.
    // The next tile's A1 writes only xd and xp, read before the second barrier, and its A2's writes of
    // V̂, P and the rescales follow its first barrier, which both warps reach after this tile's C:
    // two barriers per tile, as before.
    const u32* ck = &ctb[((side * 2 + 0) * V2_TILE + lane) * V2_BPITCH];  // the token's K half row
    const u32* cv = &ctb[((side * 2 + 1) * V2_TILE + lane) * V2_BPITCH];  // and its V half row
    const u16* sk = reinterpret_cast<const u16*>(ck + 16);
    const u16* sv = reinterpret_cast<const u16*>(cv + 16);
    // chunk k of the staged half row, dequantized into x: its code words, its dither words
    // (counter chunk NC·kg + i, kg = the chunk's place in the whole row) and its scale (zero past
    // the split's end) (v2_chunk_inputs on a half row: its codes from the half row's base 16 words
    // back, which stays inside ctb, so that chunk kg's words sit at 4·kg as in a whole row)
    auto half_chunk = [&](const u32* cr, const u16* sr, int k, int sd, bool valid, u32 slot, float (&x)[16]) {
        u32 cw[4], xw[NXW];
        const float sb = v2_chunk_inputs<BITS>(cr - 16 * side, sr, 4 * side + k, sd, gs_shift, valid, slot, ctr2,
                                               k0, k1, cw, xw);
        v2_dequant<BITS>(cw, xw, sb, x);
    };
    // c_t (Tier B) and λ's step for the warp's heads of a valid token of a tile, from its logits and
    // its K scales kept in registers: taken after the tile's phase C, off the barriers' path.  The general path's operations, in the same token order (same bits).
    float lag_lt[GA], lag_s1[4];
    bool lag_on = false;
    auto lambda_lagged = [&]() {
        float s2[4];
#pragma unroll
        for (int gr = 0; gr < 4; ++gr) s2[gr] = __fmul_rn(lag_s1[gr], lag_s1[gr]);
#pragma unroll
        for (int j = 0; j < GA; ++j)
            if (j < gn)  // (the general path's c = min(Tier A's +inf, Tier B's): the same, c_t is not NaN)
                lambda_add_log2(v2_c_b<4, false>(lag_s1, s2, bq1[glo + j], bq2[glo + j]), lag_lt[j], bm2[j],
                                bl2[j], bcm[j]);
    };
    for (i64 t0 = ta; t0 < tb; t0 += V2_TILE) {
        const bool valid = sl >= 0;
        const u32 slot = valid ? (u32)sl : 0u;
        cp_async_wait_all();
        __syncwarp();  // the lanes that copied this thread's half rows
        // ---- A1
        float run[G];
#pragma unroll
        for (int g = 0; g < G; ++g) run[g] = 0.0f;
#pragma unroll (BU)
        for (int k = 0; k < 4; ++k) {
            float x[16];
            half_chunk(ck, sk, k, 0, valid, slot, x);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float part = 0.0f;
#pragma unroll
                for (int e = 0; e < 16; e += 4) {
                    const float4 qq = *reinterpret_cast<const float4*>(&q_s[g][64 * side + 16 * k + e]);
                    part += qq.x * x[e];
                    part += qq.y * x[e + 1];
                    part += qq.z * x[e + 2];
                    part += qq.w * x[e + 3];
                }
                run[g] = run[g] + part;
                if (side) xp[g][k][lane] = part;
            }
        }
        if (!side)
#pragma unroll
            for (int g = 0; g < G; ++g) xd[g][lane] = run[g];
        __syncthreads();
        // ---- A2: the V half
#pragma unroll (BU)
        for (int k = 0; k < 4; ++k) {
            float x[16];
            half_chunk(cv, sv, k, 1, valid, slot, x);
            float* dst = &Vs[lane][64 * side + 16 * k];
#pragma unroll
            for (int e = 0; e < 16; e += 4) *reinterpret_cast<float4*>(dst + e) = make_float4(x[e], x[e + 1], x[e + 2], x[e + 3]);
        }
        // ---- A2: the warp's heads (entries past gn are computed on zeros and never stored)
        float dot[GA], lt[GA], sc[GA], p[GA];
#pragma unroll
        for (int j = 0; j < GA; ++j) {
            dot[j] = 0.0f;
            if (j < gn) {
                dot[j] = xd[glo + j][lane];
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) dot[j] = dot[j] + xp[glo + j][kk][lane];
            }
        }
        tile_logits<GA>(dot, sm2, valid, lt, hbad, glo);  // ℓ̃ in log2 units
        softmax_tile_steps<GA>(lt, valid, bm, sc, p);
#pragma unroll
        for (int j = 0; j < GA; ++j)
            if (j < gn) {
                bl[j] = bl[j] * sc[j] + p[j];
                P[glo + j][lane] = p[j];
                if (lane == 0) sc_s[glo + j] = sc[j];
            }
        lag_on = tier && valid;  // this tile's certificate inputs
#pragma unroll
        for (int j = 0; j < GA; ++j) lag_lt[j] = lt[j];
#pragma unroll
        for (int gr = 0; gr < 4; ++gr) lag_s1[gr] = f16_to_f32(sk[gr]);
        // the next tile's half rows start loading (this warp's lanes are done reading these) and its
        // page ids are read, both in flight through phase C
        sl = slot_at(t0 + V2_TILE, pg);
        __syncwarp();
        if (t0 + V2_TILE < tb) stage_rows(sl < 0 ? 0u : (u32)sl);  // warp-uniform
        pg = page_of(t0 + 2 * V2_TILE);
        __syncthreads();
        phase_c();
        if (lag_on) {  // this tile's
            lambda_lagged();
            lag_on = false;
        }
    }
    } else {
    // V warp: cmax and λ's sum under its own running maximum for one token (a tile's c_t in cbuf,
    // in log2 units; its logits in LT[buf]): common.cuh's lambda_add_log2
    auto lambda_step = [&](int buf) {
#pragma unroll
        for (int g = 0; g < G; ++g) lambda_add_log2(cbuf[lane][g], LT[buf][g][lane], m2[g], l2[g], cmx[g]);
    };
    // page contributions (SPEC §6): each page of the tile starting at token tt (pages of at most a
    // tile, aligned to it: splits are page aligned) reduced over its lanes, lse_j and λ_j in natural
    // log units (-inf for an empty sum, +inf for λ with an infinite c_t), as decode_stage1.  All lanes
    // (it shuffles); past the split's end a lane holds no token.
    auto page_step = [&](int buf, i64 tt) {
        const int ps = 1 << page_shift;
        const bool v = cbuf[lane][G] != 0.0f;
        const i64 pi = (tt + lane) >> page_shift;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float lt = v ? LT[buf][g][lane] : -INFINITY, c = cbuf[lane][g];
            const float x = !v ? -INFINITY : (c == INFINITY ? INFINITY : lt + c);
            float mx = lt, mx2 = x;
            for (int off = 1; off < ps; off <<= 1) {
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
                mx2 = fmaxf(mx2, __shfl_xor_sync(0xffffffffu, mx2, off));
            }
            float e = mx == -INFINITY ? 0.0f : exp2f(lt - mx);
            float e2 = (mx2 == -INFINITY || mx2 == INFINITY) ? 0.0f : exp2f(x - mx2);
            for (int off = 1; off < ps; off <<= 1) {
                e += __shfl_xor_sync(0xffffffffu, e, off);
                e2 += __shfl_xor_sync(0xffffffffu, e2, off);
            }
            if ((lane & (ps - 1)) == 0 && v && pi < max_pages) {
                const i64 o = ((i64)b * Hq + h * G + g) * max_pages + pi;
                page_lse[o] = mx == -INFINITY ? -INFINITY : mx * V2_LN2 + logf(e);
                page_lam[o] = mx2 == INFINITY ? INFINITY : (mx2 == -INFINITY ? -INFINITY : mx2 * V2_LN2 + logf(e2));
            }
        }
    };
    const bool pages_out = !PLAIN && page_lse != nullptr && !off_layout;  // (warp-uniform)
    int par = 0;         // the tile's LT buffer
    for (i64 t0 = ta; t0 < tb; t0 += V2_TILE, par ^= 1) {
        // ---- A: lane = token, warp = side; the thread's whole row.  A token past the split's end
        // reads slot 0 and is zeroed by a zero scale, so loads and arithmetic need no branch.
        const bool valid = sl >= 0;
        const u32 slot = valid ? (u32)sl : 0u;
        const i64 row = row_base + slot;
        cp_async_wait_all();
        __syncwarp();  // the lanes that copied this thread's row
        const u16* srow = reinterpret_cast<const u16*>(crow + 32);  // the row's fp16 scales
        float ct[G];  // V warp: this token's c_t per head
        if (side == 0) {
            // K: each 16-channel chunk goes from registers into the G dot products (channel
            // order, as the CPU twin), so K̂ never touches shared memory
            float dot[G];
#pragma unroll
            for (int g = 0; g < G; ++g) dot[g] = 0.0f;
            {
#pragma unroll (KU)
                for (int k = 0; k < D / 16; ++k) {
                    u32 cw[4], xw[NXW];
                    const float sb =
                        v2_chunk_inputs<BITS>(crow, srow, k, 0, gs_shift, valid, slot, ctr2, k0, k1, cw, xw);
                    float x[16];
                    v2_dequant<BITS>(cw, xw, sb, x);
                    if (byp && valid)
#pragma unroll
                        for (int e = 0; e < 16; ++e) {
                            const int o = oidx[16 * k + e];
                            if (o >= 0) x[e] = f16_to_f32(outl[row * NP2 + o]);
                        }
                    if (!PLAIN && te >= 0) v2_f16x16(tier_k + tier_row(te, slot) * D + 16 * k, x);
#pragma unroll
                    for (int g = 0; g < G; ++g) {
                        // the chunk's 16 products are summed first, then added: a blocked sum, whose
                        // rounding error grows with 16 + 8 terms instead of 128 (PLAIN's sides from
                        // G = 7: one chain in channel order, BLOCKED)
                        float part = BLOCKED ? 0.0f : dot[g];
#pragma unroll
                        for (int e = 0; e < 16; e += 4) {
                            const float4 qq = *reinterpret_cast<const float4*>(&q_s[g][16 * k + e]);
                            part += qq.x * x[e];
                            part += qq.y * x[e + 1];
                            part += qq.z * x[e + 2];
                            part += qq.w * x[e + 3];
                        }
                        dot[g] = BLOCKED ? dot[g] + part : part;
                    }
                }
            }
            // ---- B (same warp, lane = token): logits and the tile's softmax; the certificate's
            // c_t and λ are the V warp's (it has the slack: docs/performance.md)
            float lt[G], sc[G], p[G];
            tile_logits<G>(dot, sm2, valid, lt, hbad);  // ℓ̃ in log2 units
            softmax_tile_steps<G>(lt, valid, m, sc, p);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                l[g] = l[g] * sc[g] + p[g];
                P[g][lane] = p[g];
                if (tier) LT[par][g][lane] = lt[g];
                if (lane == 0) sc_s[g] = sc[g];
            }
        } else {
            // V: the previous tile's λ step, the token's certificate inputs (K's
            // scales of this row: loads in flight through the dequantization), then the
            // dequantized V row into the shared tile
            if (pages_out && t0 > ta) page_step(par ^ 1, t0 - V2_TILE);  // (warp-uniform)
            if (tier && t0 > ta && cbuf[lane][G] != 0.0f) lambda_step(par ^ 1);
            const i64 rowK = row - (i64)H * N;  // the same slot on the K side
            u16 ks[8];
#pragma unroll
            for (int gr = 0; gr < 8; ++gr) ks[gr] = (tier && gr < NG) ? scales[rowK * NG + gr] : (u16)0;
            float* dst = &Vs[lane][0];
            {
#pragma unroll (VU)
                for (int k = 0; k < D / 16; ++k) {
                    u32 cw[4], xw[NXW];
                    const float sb =
                        v2_chunk_inputs<BITS>(crow, srow, k, 1, gs_shift, valid, slot, ctr2, k0, k1, cw, xw);
                    float x[16];
                    v2_dequant<BITS>(cw, xw, sb, x);
#pragma unroll
                    for (int e = 0; e < 16; e += 4)  // stored as formed
                        *reinterpret_cast<float4*>(dst + 16 * k + e) = make_float4(x[e], x[e + 1], x[e + 2], x[e + 3]);
                    if (byp && valid)
                        for (int e = 0; e < 16; ++e) {
                            const int o = oidx[16 * k + e];
                            if (o >= 0) dst[16 * k + e] = f16_to_f32(outl[row * NP2 + o]);
                        }
                    if (!PLAIN && te >= 0) {
                        float xe[16];
                        v2_f16x16(tier_v + tier_row(te, slot) * D + 16 * k, xe);
#pragma unroll
                        for (int e = 0; e < 16; e += 4)
                            *reinterpret_cast<float4*>(dst + 16 * k + e) = make_float4(xe[e], xe[e + 1], xe[e + 2], xe[e + 3]);
                    }
                }
            }
            if (tier) {  // c_t, kept for the λ step
                float be[G];
                v2_token_c<G, !PLAIN>(ks, valid, NG, tier, NB, wit + rowK * NB, a_band, bq1, bq2, ct, be);
                if constexpr (!PLAIN) {
                    // γ_t (SPEC §4.1): the quantized channels' term from β's sum, the outlier
                    // channels' from their exact K values (PLAIN folds the first into b1 and has no
                    // second); an exact-tier token has c_t = γ_t over every channel's exact value
                    if (te >= 0) {
                        const u16* kr = tier_k + tier_row(te, slot) * D;
#pragma unroll
                        for (int g = 0; g < G; ++g) {
                            float ad = 0.0f;
#pragma unroll 1
                            for (int k = 0; k < D / 8; ++k) {
                                float x[8];
                                v2_f16x8(reinterpret_cast<const uint4*>(kr)[k], true, x);
#pragma unroll
                                for (int e = 0; e < 8; ++e) ad += fabsf(q_s[g][8 * k + e]) * fabsf(x[e]);
                            }
                            const float gam = gex2 * ad;
                            ct[g] = gam <= WC_F32_MAX ? gam : INFINITY;
                            gbuf[lane][g] = fmaxf(gbuf[lane][g], ct[g]);
                        }
                    } else {
#pragma unroll
                        for (int g = 0; g < G; ++g) {
                            float ad = 0.0f;  // head by head: G sums at once spilled at G = 7, 16 bits
                            for (int j = 0; j < (valid ? NP2 : 0); ++j)
                                ad += fabsf(q_s[g][bypass_ch[h * NP2 + j]]) * fabsf(f16_to_f32(outl[rowK * NP2 + j]));
                            const float gam = __fmaf_rn(gex2, ad, be[g] * gamma_per_beta);
                            const float c = ct[g] + gam;  // (+inf stays; NaN, 0·inf, becomes +inf)
                            ct[g] = c <= WC_F32_MAX ? c : INFINITY;
                            gbuf[lane][g] = fmaxf(gbuf[lane][g], gam <= WC_F32_MAX ? gam : INFINITY);
                        }
                    }
                }
#pragma unroll
                for (int g = 0; g < G; ++g) cbuf[lane][g] = ct[g];
                cbuf[lane][G] = valid ? 1.0f : 0.0f;
            }
        }
        // the next tile's rows start loading and its page ids are read, both in flight through
        // phase C; the warp's lanes are done reading this tile's rows first (a lane copies others')
        sl = slot_at(t0 + V2_TILE, pg);
        te = tier_entry(sl);
        __syncwarp();
        if (t0 + V2_TILE < tb) stage_rows(sl < 0 ? 0u : (u32)sl);  // warp-uniform
        pg = page_of(t0 + 2 * V2_TILE);
        __syncthreads();

        // ---- the certificate (V warp, lane = token), unless it waits for the next phase A

        phase_c();
        __syncthreads();
    }
    // the last tile's λ step (its logits are visible: the loop's last barrier)
    if (side == 1 && pages_out && tb > ta) page_step(par ^ 1, ta + ((tb - 1 - ta) & ~(i64)(V2_TILE - 1)));
    if (side == 1 && tier && cbuf[lane][G] != 0.0f) lambda_step(par ^ 1);
    }  // (the general path)
    }

    // ---- outputs: the heads' statistics reduced over the K warp's lanes and passed through shared
    // memory, then o, lse, λ, cmax
    // (every head's butterfly one level at a time, so the heads' shuffles overlap: the same sums
    // and maxima as warp_sum and warp_max per head; head after head took 1.1–1.6 µs at B = 1)
    if constexpr (SPLIT) {  // each warp its own heads' (the general path's operations, head by head)
        warp_sums<GA>(bl);
        float M2[GA];
#pragma unroll
        for (int j = 0; j < GA; ++j) M2[j] = bm2[j];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
            for (int j = 0; j < GA; ++j) M2[j] = fmaxf(M2[j], __shfl_xor_sync(0xffffffffu, M2[j], off));
#pragma unroll
        for (int j = 0; j < GA; ++j) bl2[j] = bm2[j] == -INFINITY ? 0.0f : bl2[j] * exp2f(bm2[j] - M2[j]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
            for (int j = 0; j < GA; ++j) {
                bl2[j] += __shfl_xor_sync(0xffffffffu, bl2[j], off);
                bcm[j] = fmaxf(bcm[j], __shfl_xor_sync(0xffffffffu, bcm[j], off));
            }
        if (lane == 0)
#pragma unroll
            for (int j = 0; j < GA; ++j)
                if (j < gn) {
                    st[glo + j][0] = bm[j];
                    st[glo + j][1] = bl[j];
                    st[glo + j][2] = bcm[j] == INFINITY ? INFINITY : M2[j];
                    st[glo + j][3] = bl2[j];
                    st[glo + j][4] = bcm[j];
                }
    } else if (side == 0) {  // the softmax statistics
        warp_sums<G>(l);
        if (lane == 0)
#pragma unroll
            for (int g = 0; g < G; ++g) {
                st[g][0] = m[g];
                st[g][1] = l[g];
            }
    } else {  // the certificate's, Tune::epi_heads heads at a time
#pragma unroll
        for (int g0 = 0; g0 < G; g0 += Tune::epi_heads) {
            float M2[Tune::epi_heads];
#pragma unroll
            for (int j = 0; j < Tune::epi_heads; ++j) M2[j] = g0 + j < G ? m2[g0 + j] : 0.0f;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
#pragma unroll
                for (int j = 0; j < Tune::epi_heads; ++j)
                    if (g0 + j < G) M2[j] = fmaxf(M2[j], __shfl_xor_sync(0xffffffffu, M2[j], off));
#pragma unroll
            for (int j = 0; j < Tune::epi_heads; ++j) {
                const int g = g0 + j;
                if (g < G) l2[g] = m2[g] == -INFINITY ? 0.0f : l2[g] * exp2f(m2[g] - M2[j]);
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
#pragma unroll
                for (int j = 0; j < Tune::epi_heads; ++j) {
                    const int g = g0 + j;
                    if (g < G) {
                        l2[g] += __shfl_xor_sync(0xffffffffu, l2[g], off);
                        cmx[g] = fmaxf(cmx[g], __shfl_xor_sync(0xffffffffu, cmx[g], off));
                    }
                }
            if (lane == 0)
#pragma unroll
                for (int j = 0; j < Tune::epi_heads; ++j) {
                    const int g = g0 + j;
                    if (g < G) {
                        st[g][2] = cmx[g] == INFINITY ? INFINITY : M2[j];
                        st[g][3] = l2[g];
                        st[g][4] = cmx[g];
                    }
                }
        }
    }
    if (hbad) atomicOr(&s_bad, hbad);  // (rare: a non-finite query)
    poisoned = __syncthreads_or(poisoned);
    const int bad_heads = s_bad;
    __syncthreads();  // every thread has read s_bad: it now collects the heads whose o is not finite
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const i64 o = ((i64)b * Hq + h * G + g) * num_splits + s;
        const float L = st[g][1];
        const bool dead = poisoned || ((bad_heads >> g) & 1);
        const float2 r = dead ? make_float2(NAN, NAN)
                              : (L == 0.0f ? make_float2(0.0f, 0.0f) : make_float2(acc[g][0] / L, acc[g][1] / L));
        *reinterpret_cast<float2*>(&o_part[o * D + 2 * tid]) = r;
        if (!dead && !(is_finite32(r.x) && is_finite32(r.y))) atomicOr(&s_bad, 1 << (G + g));  // SPEC §3.6
    }
    __syncthreads();
    if (tid < G) {
        const int g = tid;
        const i64 o = ((i64)b * Hq + h * G + g) * num_splits + s;
        const float M = st[g][0], L = st[g][1];
        // a non-finite V row the head attended (SPEC §3.6)
        const bool linf = st[g][2] == INFINITY || (tier && ((s_bad >> (G + g)) & 1));
        const float M2 = st[g][2], L2 = st[g][3];
        // back to natural-log units: the maxima and cmax were kept in log2 units (cmax, a bound,
        // through the float ln 2, which is above ln 2, rounded up)
        const float cm = linf ? INFINITY : __fmul_ru(st[g][4], V2_LN2);
        float gm = 0.0f;  // Γ_s, natural units
        if constexpr (PLAIN) {
            gm = gamma_of_rho(rho[g], cm);
        } else if (tier) {
            float g2 = 0.0f;
            for (int l = 0; l < V2_TILE; ++l) g2 = fmaxf(g2, gbuf[l][g]);
            gm = linf ? INFINITY : __fmul_ru(g2, V2_LN2);
        }
        store_split_stats(o, poisoned || ((bad_heads >> g) & 1), L, M * V2_LN2 + logf(L),
                          linf ? INFINITY : (L2 > 0.0f ? M2 * V2_LN2 + logf(L2) : -INFINITY), cm, gm, lse_part,
                          lam_part, cmax_part, gam_part);
    }
}

// An explicit instantiation (the offline compile checks in tests/test_cuda_compile.py).
#define WC_V2_INST1(G, BITS, PLAIN)                                                                         \
    template __global__ void decode_stage1_v2<G, BITS, PLAIN>(const float*, const i8*, const u16*, const u16*, const u16*, \
                                                 const int*, const int*, const int*, const int*, const int*,  \
                                                 float*, float*, float*, float*, float*, const int*, const u16*, \
                                                 const u16*, float*, float*, i64, int, int, int, int, int, int, int, \
                                                 int, int, int, int, int, int, int, u32, u32, float, float, float, \
                                                 float, float);
// PLAIN with the sides split between the warps (the general path's layout; small batches)
#define WC_V2_INST_SIDES(G, BITS)                                                                          \
    template __global__ void decode_stage1_v2<G, BITS, true, false>(const float*, const i8*, const u16*, const u16*, \
                                                 const u16*, const int*, const int*, const int*, const int*,  \
                                                 const int*, float*, float*, float*, float*, float*, const int*, \
                                                 const u16*, const u16*, float*, float*, i64, int, int, int, int, int, \
                                                 int, int, int, int, int, int, int, int, int, u32, u32, float, float, \
                                                 float, float, float);
#define WC_V2_INST(G)                                                                                     \
    WC_V2_INST1(G, 8, false) WC_V2_INST1(G, 16, false) WC_V2_INST1(G, 24, false)  \
    WC_V2_INST1(G, 8, true) WC_V2_INST1(G, 16, true) WC_V2_INST1(G, 24, true)                                \
    WC_V2_INST_SIDES(G, 8) WC_V2_INST_SIDES(G, 16) WC_V2_INST_SIDES(G, 24)
#ifdef WITCERT_INSTANTIATE_ALL
// With WITCERT_G_CLASSES (CI's compile check, tests/test_cuda_compile.py; WITCERT_COMPILE_EVERY_G=1
// there checks every G): the largest G under each register bound v2_min_blocks sets, G = 3, 4, 7
// and 8.  The other G share those bounds (many instances of every G sit at theirs, NVRTC 13.0);
// their compiles were half of this file's time, and the every-G check runs on the GPU machine.
#if defined(WITCERT_ONE_G)  // one G (the GPU session's every-G check, a G per compile)
WC_V2_INST(WITCERT_ONE_G)
#else
WC_V2_INST(3)
WC_V2_INST(4)
WC_V2_INST(7)
WC_V2_INST(8)
#ifndef WITCERT_G_CLASSES
WC_V2_INST(1)
WC_V2_INST(2)
WC_V2_INST(5)
WC_V2_INST(6)
#endif
#endif
#endif
