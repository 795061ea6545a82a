// decode_i8.cuh — stage 1 of the split-KV decode in SPEC §6's form (I): the logits as exact integer
// tensor-core products of the stored code and dither bytes with a three-digit integer split of the
// power-of-two-scaled query, the values as integer products of the same bytes with three digits of
// p̃·s.  INT8 pools at d = 64, 128 or 256, 8- or 16-bit dither, scale groups of 32, Tier A, B, AB (8–64
// witness bands, a multiple of 8) or no certificate; the exact tier on pools of 16-token pages; with
// Tier B per-page contributions (16-token pages, d ≤ 128), over the exact tier or not (the gate's
// steps); outlier pairs (up to I8_OUTL_MAX channels, without the exact tier or page contributions).
// One file per head dim instantiates it (decode_i8_d64.cu, ...: the compiles stay short).
//
// decode_stage1_i8<D, G, TIER, PAGES, EXACT, OUTL, BITS>: grid (num_splits, Hkv, B), D / 64 warps per CTA serving the
// kv head's G ≤ 8 query heads over its split, 32-token tiles through a two-deep cp.async pipeline per
// warp.  Warp w owns channels [64w, 64w + 64) (scale groups 2w, 2w + 1) of every K and V row; lane
// 4g + t ("thread (g, t)") owns query head g (rows g ≥ G compute on zeros) and, within a tile, the
// tokens τ(n, i) = 8n + 2t + i (n < 4, i < 2).  Per tile:
//   1. lane = token: the warp's 8 Philox calls (its 4 chunks × K, V), the fields stored as
//      j' = 255 − j into the warp's dither tiles beside its staged rows;
//   2. K: per 8 tokens and scale group, three m16n8k32 products (columns: tokens; k: the group's 32
//      channels, ldmatrix fragments): {a0, a1}·k (rows g: head g's R0; rows g + 8 unused) and
//      {a0, a1}·j' + {a1, a2}·k (rows g: R1, rows g + 8: R2), every row of the A fragments a digit,
//        R0 = Σ a0·k,  R1 = Σ a1·k + Σ a0·j',  R2 = Σ a2·k + Σ a1·j'      (s32, exact)
//      so that Σ_c Q_c·(512k_c + 2j'_c − 255) = 2^25 R0 + 2^17 R1 + 2^9 R2 − 255·ΣQ + 2·Σ a2·j';
//      then in fp32 Z = fma(fl(256·R0 + R1), W1, fma(R2, W1/256, C)) per group, the warp's two
//      groups' Σ s_g Z_g into shared memory, one CTA barrier, and ℓ̃ = ((Σ_w part_w)·Fm)·P1·P2
//      (the warps' parts added pairwise) in log2 units in every warp (docs/certificate.md §11 bounds every difference from sm·q·x̂ in the
//      β-shaped coefficient the certificate adds);
//   3. the online softmax of head g over its 8 tokens (quad reductions; every warp), Tier B's c_t
//      and λ of the warp's 8-token blocks (4 / (D / 64) of them), and with PAGES each of its pages'
//      lse_j and λ_j;
//   4. V over the warp's two groups: P' = p̃·s_g per token and group as Y = rint(P'·σ), σ = 63·2^16
//      over the tile's largest P' of the head and group, in three digits (b0 ∈ [0, 63], b1, b2
//      signed bytes), and per 16 channels three m16n8k32 products over the 32 tokens as for K
//      (ldmatrix.trans, the bytes regrouped by prmt) give R0 = Σ b0·k, R1 = Σ b1·k + Σ b0·j',
//      R2 = Σ b2·k + Σ b1·j' exactly; o += (2^8·(256·R0 + R1) + R2)/σ, and −(255/512)·ΣP' per
//      group at the end.
// Exact-tier tokens (EXACT: a tile whose pages the tier serves, CTA-uniform passes): their logits
// as fp32 dot products of the query with the tier's fp16 rows (a chain over each warp's 64
// channels, the warps' sums added pairwise, times fl(sm·log2 e)), c_t = γ_t of that order
// (certificate.FORM_I_EXACT_ORDER, docs/certificate.md §10.1), their values p̃·v in fp32 beside the
// integer products (which see p̃·s = 0 for them).
// Outlier channels (OUTL): zero query digits (their codes add nothing), their stored fp16 K and V
// staged per warp beside the codes; a token's logit adds fl(d_o·SL) to the integer part (d_o an fp32
// chain over the channels), c_t adds gamma_exact·Σ|q_c||k_c| (docs/certificate.md §11), and their
// values are p̃·v in fp32, which replace the integer products' result on those channels.
// 16-bit dither (BITS = 16): j' = 65535 − j as two bytes, jh' and jl', in two dither tiles per side
// (four per warp); five products per group and 8 tokens (per 16 channels of V): {a0, a1}·kc +
// {0, a0}·jh' (rows g: R0, g + 8: R1) and {a2, 0}·kc + {a1, a2}·jh' + {a0, a1}·jl' (rows g: R2 =
// Σ a2·k + Σ a1·jh' + Σ a0·jl', rows g + 8: R3 = Σ a2·jh' + Σ a1·jl'; eight product terms over
// three B operands need five), Z = fma(fl(Y), W1, fma(fl(256·R2 + R3), W1/65536, C))
// (docs/certificate.md §11).
// The values are held to SPEC §9's flash-attention rule (V does not enter the certificate); the
// weights they apply are p̃ to 22 bits of each tile's largest, so both readings of p̃ (SPEC §5)
// agree within fp32 resolution.
// Why (docs/performance.md): the form-(F) read path's floor (fp32 dequantization, dot products and
// V accumulation) is 1.16–1.42× SDPA; here no element is converted or multiplied in fp32.  Warps on
// 64-channel slices rather than one on whole rows: fewer registers and less shared memory per warp
// (168 registers, 12 warps per SM at every D) and a shorter chain per warp per tile, for one barrier
// per tile.
// Never reads out of bounds: page ids outside the pool, an inconsistent kv_indptr or a bad
// last-page length poison the split (NaN output, infinite certificate); a token past the split's
// end stages zeros.  A head whose query is not finite, or whose logit is not, is poisoned alone; a
// non-finite V scale in the split makes every head's output NaN and certificate infinite (SPEC §3.6).
#pragma once
#include "common.cuh"
#include "philox.cuh"
#include "cp_async.cuh"
#include "griddep.cuh"
#include "certificate.cuh"
#include "tc_operands.cuh"
#include "decode_i8_geometry.cuh"

// Staged rows are the warp's 64-channel slices, 64 bytes a row, each row's four 16-byte chunks
// swizzled (chunk c of row r at c ^ ((r >> 1) & 3)) so that ldmatrix's eight rows of one chunk, a
// quarter-warp's 16-byte stores to eight rows and the copies of two rows fall on distinct banks.
WC_D int i8_off(int row, int chunk) { return row * I8_WARP_CH + ((chunk ^ ((row >> 1) & 3)) << 4); }


// byte k of each of four words into one word, a's first
WC_D u32 i8_pack4(u32 a, u32 b, u32 c, u32 d, int k) {
    const u32 sel = (u32)k | ((u32)(k + 4) << 4);
    return prmt(prmt(a, b, sel), prmt(c, d, sel), 0x5410u);
}

// i8_pack4's word by another instruction (the halves' last permute with its operands swapped): the
// same bits in a register of its own.  Two A quads that hold one word in different positions need
// two registers for it, and given one, ptxas rebuilt the quads before each product with moves (the
// values' three products: 20 moves per group and tile where two permutes do)
WC_D u32 i8_pack4_twin(u32 a, u32 b, u32 c, u32 d, int k) {
    const u32 sel = (u32)k | ((u32)(k + 4) << 4);
    return prmt(prmt(c, d, sel), prmt(a, b, sel), 0x1054u);
}

// NG fp16 K scales of one token (2·NG bytes, 16-byte aligned rows) as 32-bit words
template <int NG>
WC_D void i8_scale_words(const u16* p, u32 (&w)[NG / 2]) {
    if constexpr (NG == 2) {
        w[0] = *reinterpret_cast<const u32*>(p);
    } else if constexpr (NG == 4) {
        const uint2 x = *reinterpret_cast<const uint2*>(p);
        w[0] = x.x, w[1] = x.y;
    } else {
        static_assert(NG == 8, "2, 4 or 8 scale groups");
        const uint4 x = *reinterpret_cast<const uint4*>(p);
        w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
    }
}

// ... and their asynchronous copy into shared memory (zeros for an invalid row)
template <int NG>
WC_D void i8_copy_scales(u16* dst, const u16* src, bool v) {
    if constexpr (NG == 2) cp_async4_zfill(dst, src, v);
    else if constexpr (NG == 4) cp_async8_zfill(dst, src, v);
    else cp_async16_zfill(dst, src, v);
}

// Tier B's (a1, a2) of one head and group, read per token: at 8 groups the loop-invariant pairs
// ptxas would hoist out of the tile loop (16 registers) push it past its 168, so there the read is
// volatile (one 8-byte shared load per group and token)
template <bool VOLATILE>
WC_D float2 i8_coef_pair(const float* p) {
    if constexpr (!VOLATILE) {
        return *reinterpret_cast<const float2*>(p);
    } else {
        float2 r;
        asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(r.x), "=f"(r.y) : "r"(smem_addr(p)));
        return r;
    }
}

// the exact tier's row of a slot (tier_k or tier_v: [tier_cap, 16, D]) for entry e, entry 0's for e < 0
// (a token off the tier: its row is read, in bounds, and not used)
template <int D>
WC_D const u16* i8_tier_row(const u16* tier, int e, u32 slot, int page_shift) {
    return tier + (((i64)max(e, 0) << page_shift) + (slot & 15u)) * D;
}

// an exact-tier token's dot product and Σ|q_c||x_c| over four more channels, one chain each in
// channel order, every product and sum rounded (no contraction: the CPU twin's order); one product
// serves both chains, fl(|q||x|) being |fl(q·x)| under round-to-nearest
WC_D void i8_exact_dot4(float4 q, const float (&x)[4], float& acc, float& aac) {
    const float p[4] = {__fmul_rn(q.x, x[0]), __fmul_rn(q.y, x[1]), __fmul_rn(q.z, x[2]), __fmul_rn(q.w, x[3])};
#pragma unroll
    for (int c = 0; c < 4; ++c) acc = __fadd_rn(acc, p[c]), aac = __fadd_rn(aac, fabsf(p[c]));
}

// 8-bit dither's three products of the digits d0, d1, d2 (A fragments, rows g and g + 8) against
// the code bytes k and the complemented dither bytes j' (B fragments): {d0, d1}·k gives R0 = Σ d0·k
// in rows g (its rows g + 8 are not used), and {d0, d1}·j' + {d1, d2}·k in one accumulator gives
// R1 = Σ d1·k + Σ d0·j' in rows g and R2 = Σ d2·k + Σ d1·j' in rows g + 8 (integer sums: exact in any
// order).  With JL (the values at 16-bit dither: j' = 256·jh' + jl', j the bytes jh'), {0, d0}·jl'
// into the same accumulator adds Σ d0·jl' to R2.  Out: r01 = {R0, R0, R1, R1} (the thread's two
// columns each), r2 = {R2, R2, -, -}
template <bool JL = false>
WC_D void i8_three_products(int (&r01)[4], int (&r2)[4], uint4 d01, uint4 d12, u32 k0, u32 k1, u32 j0, u32 j1,
                            uint2 jl = make_uint2(0u, 0u)) {
    const int zero4[4] = {0, 0, 0, 0};
    int c0[4], c12[4];
    imma_k32<false>(c0, d01.x, d01.y, d01.z, d01.w, k0, k1, zero4);
    imma_k32<true>(c12, d01.x, d01.y, d01.z, d01.w, j0, j1, zero4);
    imma_k32<false>(c12, d12.x, d12.y, d12.z, d12.w, k0, k1, c12);
    if constexpr (JL) imma_k32<true>(c12, 0u, d01.x, 0u, d01.z, jl.x, jl.y, c12);
    r01[0] = c0[0], r01[1] = c0[1], r01[2] = c12[0], r01[3] = c12[1];
    r2[0] = c12[2], r2[1] = c12[3];
}

WC_D u32 dynamic_smem_bytes() {
    u32 r;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
    return r;
}

template <int D, int G, int TIER, bool PAGES, bool EXACT, bool OUTL, int BITS>
__global__ void __launch_bounds__(D / 2, I8_MIN_CTAS(D, BITS))
    decode_stage1_i8(const float* __restrict__ q, const i8* __restrict__ codes, const u16* __restrict__ scales,
                     const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
                     const int* __restrict__ kv_last_page_len, float* __restrict__ o_part,
                     float* __restrict__ lse_part, float* __restrict__ lam_part, float* __restrict__ cmax_part,
                     float* __restrict__ gam_part, float* __restrict__ page_lse, float* __restrict__ page_lam,
                     const int* __restrict__ tier_map, const u16* __restrict__ tier_k, const u16* __restrict__ tier_v,
                     const u16* __restrict__ wit, const int* __restrict__ band_ch, i64 N, int H, int layer,
                     int head_base, int page_shift, int num_pages, int nnz, int num_splits, int max_pages,
                     int tier_stride, int tier_cap, int NB, u32 k0, u32 k1, float sm, float log_budget,
                     float beta_steps, float gamma_eval, float gamma_exact, const u16* __restrict__ outl,
                     const int* __restrict__ bypass_ch, int NP2) {
    static_assert(D == 64 || D == 128 || D == 256, "head dim 64, 128 or 256");
    static_assert(G >= 1 && G <= 8, "G: 1 to 8 query heads per kv head");
    static_assert(TIER >= 0 && TIER <= 3, "tier code: 0 none, 1 A, 2 B, 3 AB");
    constexpr bool CERT = TIER != 0, TA = (TIER & 1) != 0, TB = (TIER & 2) != 0;
    static_assert(CERT || !PAGES, "page contributions are a certified step's");
    static_assert(!OUTL || (!PAGES && !EXACT), "outlier pairs: without page contributions or the exact tier");
    static_assert(BITS == 8 || BITS == 16, "8- or 16-bit dither");
    constexpr int NW = D / I8_WARP_CH, NG = D / 32, THREADS = 32 * NW;
    constexpr int NBW = 4 / NW;  // 8-token blocks per warp of the certificate's work
    // (a warp's certificate blocks are whole 16-token pages up to d = 128)
    static_assert(!PAGES || NBW % 2 == 0, "page contributions at d <= 128");
    constexpr int R = I8_HEAD_ROWS(G, TA, EXACT, OUTL);  // head rows of the partial logits and sums
    constexpr int QW = I8_QD2_WORDS(TA, OUTL);  // the words of the query digits' second fragment
    using Smem = I8Smem<D, BITS, R, QW>;
    using Setup = I8Setup<D>;
    static_assert(sizeof(Setup) <= sizeof(((Smem*)0)->dith), "the set-up lives in the dither tiles");
    extern __shared__ __align__(16) unsigned char i8_smem[];
    Smem& sh = *reinterpret_cast<Smem*>(i8_smem);
    Setup& su = *reinterpret_cast<Setup*>(&sh.dith[0][0][0]);
    // with the exact tier, the partial Σ|q_c||k_c| of exact-tier tokens: [warp][head row < R][token];
    // with a Tier-A term, the staged K witness rows [buffer][token][band], the band
    // coefficients [head][band] and the evaluation term's per-group coefficients [head][group]
    float* xa = reinterpret_cast<float*>(i8_smem + sizeof(Smem));
    u16* wit_s = reinterpret_cast<u16*>(i8_smem + sizeof(Smem) + (EXACT ? I8_EXACT_SMEM(D, R) : 0));
    float* a_band = reinterpret_cast<float*>(wit_s + 2 * I8_TILE * NB);
    float* gqk = a_band + 8 * NB;
    // with outlier pairs, the channels (-1 past NP2), each head's query on them [head][j] and the
    // staged K and V values [warp][buffer][token][side][j]
    unsigned char* ol_base = i8_smem + sizeof(Smem) + (EXACT ? I8_EXACT_SMEM(D, R) : 0) + (TA ? I8_TIER_A_SMEM(D, NB) : 0);
    int* och = reinterpret_cast<int*>(ol_base);
    float* oq = reinterpret_cast<float*>(ol_base + 4 * I8_OUTL_MAX);
    u16* orow = reinterpret_cast<u16*>(ol_base + 4 * I8_OUTL_MAX + 32 * NP2);
    // a launch-layer bug, never a result: too little shared memory, pages other than 16 tokens, a
    // band count the witness staging does not serve
    if (dynamic_smem_bytes() < i8_smem_total<D, BITS, G, TA, EXACT, OUTL>(NB, NP2) ||
        ((PAGES || EXACT) && page_shift != 4) || (TA && (NB < 8 || NB > 64 || NB % 8 != 0)) ||
        (OUTL && (NP2 < 2 || NP2 > I8_OUTL_MAX || NP2 % 2 != 0)))
        __trap();
    // (PAGES and EXACT instances serve 16-token pages only, the check above: their shifts are
    // constants, where the runtime shift cost a register shift per address in every tile)
    const int psh = (PAGES || EXACT) ? 4 : page_shift;

    griddep_wait();  // before the first global access (griddep.cuh)
    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int Hq = H * G;
    // the query rows first: their round trip overlaps the page table's
    float qr[G * D / THREADS];
#pragma unroll
    for (int i = 0; i < G * D / THREADS; ++i) {
        const int idx = tid + THREADS * i;
        qr[i] = q[((i64)b * Hq + h * G + idx / D) * D + idx % D];
    }
    const RequestPages rp = request_pages(kv_indptr, kv_last_page_len, b, nnz, psh);
    bool poisoned = rp.poisoned;
    const SplitTokens st = split_tokens(rp, s, num_splits, psh);
    const i64 ta = st.ta, tb = st.tb;
    const u32 ctr2 = dither_ctr2(layer, h + head_base);
    const i64 rowk = pool_row(layer, 0, H, h, N), rowv = pool_row(layer, 1, H, h, N);

    // ---- the tile pipeline's loads, per warp: lane = token; four lanes copy one half row's 64 code
    // bytes per side (lane & 3 = its 16-byte piece, the row's slot by shuffle), each lane its own
    // row's K scales and its half's V scales; rows past the split's end or on a bad page land as zeros
    auto page_of = [&](i64 t0n) { return tile_page(kv_indices, rp.p0, t0n, tb, lane, psh); };
    auto slot_at = [&](i64 t0n, int page) { return tile_slot(t0n, tb, lane, page, psh, num_pages, poisoned); };
    // the exact tier's map entry of a page (SPEC §7), raw (any in-bounds entry for a page id outside
    // the map: its slot is invalid, so the entry is never used), and the entry of a slot on that
    // page, or -1: its tokens are served from the tier's fp16 rows [tier_cap, 16, D] with c_t = γ_t
    // of their fp32 dot product.  The loop reads a page's entry a tile ahead, so that staging a tile
    // never waits on the map's round trip; the first tile's comes on its chain (tier_entry)
    auto page_entry = [&](int page) -> int {
        if (!EXACT) return -1;
        return tier_map[(i64)h * tier_stride + ((u32)page < (u32)tier_stride ? page : 0)];
    };
    auto entry_of = [&](i64 sl_, int pe_) -> int { return EXACT && sl_ >= 0 && pe_ >= 0 && pe_ < tier_cap ? pe_ : -1; };
    auto tier_entry = [&](i64 sl_) -> int {
        return !EXACT || sl_ < 0 ? -1 : entry_of(sl_, page_entry((int)(sl_ >> psh)));
    };
    // an exact-tier token's rows (the warp's 64 channels of K and V: a 128-byte line each) brought
    // into L2 a tile ahead of the passes that read them, whose loads then wait on L2, not DRAM
    auto prefetch_tier = [&](int e, i64 sl_, int ww) {
        if (EXACT && e >= 0) {
            prefetch_l2(i8_tier_row<D>(tier_k, e, (u32)sl_, psh) + I8_WARP_CH * ww);
            prefetch_l2(i8_tier_row<D>(tier_v, e, (u32)sl_, psh) + I8_WARP_CH * ww);
        }
    };
    // 16-bit dither: side sd's fields of the lane's token over the warp's 64 channels (Philox calls
    // 8w .. 8w + 7, eight 16-bit fields each, low half first: SPEC §2), complemented (j' = 65535 − j
    // bytewise) and split into their high bytes jh' (tile 2·sd) and low bytes jl' (tile 2·sd + 1),
    // each in the 8-bit layout, so that both feed the same ldmatrix fragments as the codes
    auto fields16 = [&](int sd, u32 slot_) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {  // call c: channels 8c .. 8c + 7, half a 16-byte chunk of each tile
            const u32x4 x = philox10(slot_, dither_ctr1(sd, 8 * w + c), ctr2, 0u, k0, k1);
            const int o = i8_off(lane, c >> 1) + 8 * (c & 1);
            *reinterpret_cast<uint2*>(&sh.dith[w][2 * sd][o]) = make_uint2(~prmt(x.x, x.y, 0x7531u), ~prmt(x.z, x.w, 0x7531u));
            *reinterpret_cast<uint2*>(&sh.dith[w][2 * sd + 1][o]) = make_uint2(~prmt(x.x, x.y, 0x6420u), ~prmt(x.z, x.w, 0x6420u));
        }
    };
    // a tile's rows into warp ww's buffers (its channels), committed as one group of this thread; an
    // exact-tier token's (te_ >= 0) V scales land as zeros, so that its P' is 0 in the integer value
    // products with no test per token there (its values come from the tier)
    auto stage = [&](int buf, i64 sl_, int te_, int ww) {
        const bool v = sl_ >= 0;
        const u32 slot = v ? (u32)sl_ : 0u;
        const u32 vm = __ballot_sync(0xffffffffu, v);
#pragma unroll
        for (int i = 0; i < I8_TILE / 8; ++i) {
            const int r = 8 * i + (lane >> 2);
            const u32 sr = __shfl_sync(0xffffffffu, slot, r);
            const bool vr = (vm >> r) & 1u;
            const int so = i8_off(r, lane & 3);
            const i64 co = (i64)sr * D + I8_WARP_CH * ww + 16 * (lane & 3);
            cp_async16_zfill(&sh.codes[buf][ww][0][so], codes + rowk * D + co, vr);
            cp_async16_zfill(&sh.codes[buf][ww][1][so], codes + rowv * D + co, vr);
        }
        i8_copy_scales<NG>(&sh.ks[buf][ww][lane][0], scales + (rowk + slot) * NG, v);
        cp_async4_zfill(&sh.vs[buf][ww][lane][0], scales + (rowv + slot) * NG + 2 * ww, v && te_ < 0);
        // the token's K witness row (NB fp16 band sums, 16-byte pieces), staged by the warp whose
        // certificate blocks hold the token only (each row read once per CTA, not once per warp)
        if (TA && lane / (8 * NBW) == ww)
            for (int k = 0; k < NB; k += 8)
                cp_async16_zfill(&wit_s[(buf * I8_TILE + lane) * NB + k], wit + (rowk + slot) * NB + k, v);
        // the token's outlier values, K then V (NP2 fp16 each, 4-byte pieces), into warp ww's buffer
        if constexpr (OUTL) {
            u16* dst = orow + ((ww * 2 + buf) * I8_TILE + lane) * 2 * NP2;
            const u16* srk = outl + (rowk + slot) * NP2;
            const u16* srv = outl + (rowv + slot) * NP2;
            for (int j = 0; j < NP2; j += 2) {
                cp_async4_zfill(dst + j, srk + j, v);
                cp_async4_zfill(dst + NP2 + j, srv + j, v);
            }
        }
        cp_async_commit();
    };
    // the first tile: its page, slots and tier entries (a chain of dependent loads) and its rows.
    // With one warp, at once, under the query's load; with more, warp 0 computes the set-up instead
    // and the other warps take the chain after the query is in shared memory, warp 1 staging warp
    // 0's rows beside its own and handing it the tile's state through the set-up's space
    int pg = 0, te = -1;
    i64 sl = -1;
    auto first_tile = [&]() {
        if (ta < tb) {
            pg = page_of(ta);
            sl = slot_at(ta, pg);
            te = tier_entry(sl);
            stage(0, sl, te, w);
            if (NW > 1 && w == 1) stage(0, sl, te, 0);
            pg = page_of(ta + I8_TILE);
        }
    };
    if constexpr (NW == 1) first_tile();

    // ---- set-up, warp 0's lane (g, γ = t): head g's group γ
#pragma unroll
    for (int i = 0; i < G * D / THREADS; ++i) {
        const int idx = tid + THREADS * i;
        su.q[idx / D][idx % D] = qr[i];
    }
    if constexpr (OUTL) {  // the outlier channels and each head's query on them (rows g >= G: 0); a
        // channel outside the head poisons the split (channel 0 stands in, never used)
        for (int idx = tid; idx < I8_OUTL_MAX + 8 * NP2; idx += THREADS) {
            const int k = idx - I8_OUTL_MAX, gg = k / NP2, j = idx < I8_OUTL_MAX ? idx : k % NP2;
            const int c = j < NP2 ? bypass_ch[h * NP2 + j] : -1;
            const bool ok = (u32)c < (u32)D;
            if (idx < I8_OUTL_MAX) {
                if (j < NP2 && !ok) poisoned = true;
                och[j] = ok ? c : -1;
            } else {
                oq[k] = ok && gg < G ? q[((i64)b * Hq + h * G + gg) * D + c] : 0.0f;
            }
        }
    }
    __syncthreads();
    if constexpr (NW > 1) {
        if (w > 0) {
            first_tile();
            if (w == 1) su.sl[lane] = sl, su.te[lane] = te, su.pg[lane] = pg;
        }
    }
    prefetch_tier(te, sl, w);  // (here, not beside the first tile's staging: the tier map's entry is back)
    if (NW > 1 && w == 1) prefetch_tier(te, sl, 0);
    const SmSplit smx = sm_split(sm);
    // (K1, K2: c_t in log2 units with its slack, docs/certificate.md §6)
    const float K1 = __fmul_ru((float)WC_C_EVAL_SLACK, WC_LOG2E_UP), K2 = __fmul_ru(K1, K1);
    const float log_term = log_budget + logf((float)max(rp.S, (i64)1));
    if (w == 0) {  // warp 0's lane (g, t): head g's groups t, t + 4 (those below NG)
        constexpr int NGL = (NG + 3) / 4;
        const int ENONE = -100000;  // a zero group
        bool fin = g < G;
        int e_own[NGL];
        u32 bm[NGL];  // the group's outlier channels (their digits are 0: the exact values serve them)
        int eh = ENONE;
#pragma unroll
        for (int k = 0; k < NGL; ++k) {
            const int gr = t + 4 * k;
            e_own[k] = ENONE;
            bm[k] = 0u;
            if (gr >= NG) continue;
            if constexpr (OUTL) {
#pragma unroll
                for (int j = 0; j < I8_OUTL_MAX; ++j) {
                    const int c = och[j];
                    if (c >= 0 && (c >> 5) == gr) bm[k] |= 1u << (c & 31);
                }
            }
            const float* qg = &su.q[g < G ? g : 0][32 * gr];
            float mx = 0.0f;
            for (int i = 0; i < 32; ++i) {  // (rotated by lane: the quad's reads fall on distinct banks)
                const float v = qg[(i + lane) & 31];
                fin = fin && fabsf(v) <= WC_F32_MAX;
                if (!((bm[k] >> ((i + lane) & 31)) & 1u)) mx = fmaxf(mx, fabsf(v));
            }
            if (g >= G) mx = 0.0f;
            int eg;
            frexpf(mx, &eg);
            e_own[k] = (mx > 0.0f && fin) ? eg : ENONE;
            eh = max(eh, e_own[k]);
        }
        eh = max(eh, __shfl_xor_sync(0xffffffffu, eh, 1));
        eh = max(eh, __shfl_xor_sync(0xffffffffu, eh, 2));
        int fq = (int)fin;  // the head's whole query is finite
        fq &= __shfl_xor_sync(0xffffffffu, fq, 1);
        fq &= __shfl_xor_sync(0xffffffffu, fq, 2);
        const bool hfin = fq != 0;
        if (eh == ENONE) eh = 0;  // an all-zero query: every digit 0
        double csq = 0.0;  // (float64: certificate.cuh's sq_ratio_up)
        float rq = 0.0f;
        int cinf = 0;
#pragma unroll 1
        for (int k = 0; k < NGL; ++k) {
            const int gr = t + 4 * k;
            if (gr >= NG) break;
            const float* qg = &su.q[g < G ? g : 0][32 * gr];
            const int eo = k == 0 ? e_own[0] : e_own[NGL - 1];  // (NGL <= 2; not indexed: no stack)
            const u32 bmk = k == 0 ? bm[0] : bm[NGL - 1];
            const int delta = eo == ENONE ? 0 : min(eh - eo, WC_FORM_I_MAX_GROUP_SHIFT);
            const int S = WC_FORM_I_QUERY_BITS - eh + delta;
            // the split: Q = rint(q·2^S) = 2^16 a0 + 2^8 a1 + a2, r = q·2^S − Q (both exact)
            int sumQ = 0, sa0 = 0, sa1 = 0, sa2 = 0;
            double sr = 0.0;
            // (unrolled: the channels' chains are independent but for sr's, one warp runs this alone)
#pragma unroll
            for (int wi = 0; wi < 8; ++wi) {
                u32 wd[3] = {0u, 0u, 0u};
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const float qs = hfin && !((bmk >> (4 * wi + c)) & 1u) ? ldexpf(qg[4 * wi + c], S) : 0.0f;
                    const float qf = rintf(qs);
                    const int Q = (int)qf;
                    sr = __dadd_ru(sr, (double)fabsf(qs - qf));
                    const int a2 = ((Q + 128) & 255) - 128;
                    const int q1 = (Q - a2) >> 8;
                    const int a1 = ((q1 + 128) & 255) - 128;
                    const int a0 = (q1 - a1) >> 8;
                    sumQ += Q;
                    sa0 += abs(a0), sa1 += abs(a1), sa2 += abs(a2);
                    wd[0] |= ((u32)a0 & 0xFFu) << (8 * c);
                    wd[1] |= ((u32)a1 & 0xFFu) << (8 * c);
                    wd[2] |= ((u32)a2 & 0xFFu) << (8 * c);
                }
                // straight into head g's A fragments: word wi is channels 32γ + 4wi .. + 3, the
                // fragment's low half for wi < 4, its high half for the rest (thread t = wi mod 4)
                u32* f01 = reinterpret_cast<u32*>(&sh.qd01[gr][g][wi & 3]) + 2 * (wi >> 2);
                f01[0] = wd[0], f01[1] = wd[1];
                if constexpr (QW == 4) {
                    sh.qd2[gr][g][wi & 3][2 * (wi >> 2)] = wd[1];
                    sh.qd2[gr][g][wi & 3][2 * (wi >> 2) + 1] = wd[2];
                } else {
                    sh.qd2[gr][g][wi & 3][wi >> 2] = wd[2];
                }
            }
            // an entry the scaling flushes has Q = 0 and a residual below 2^-126, counted at that bound;
            // only a negative S can flush a normal entry (a subnormal one was flushed on reading: g₀'s,
            // §10.3).  Apart from the loop above: a test per channel there cost 9% of a step at B = 1
            if (S < 0 && hfin) {
                int nfl = 0;
#pragma unroll 1
                for (int c = 0; c < 32; ++c) {
                    const float qv = qg[c];
                    nfl += !((bmk >> c) & 1u) && fabsf(qv) >= WC_F32_MIN_NORMAL && ldexpf(qv, S) == 0.0f;
                }
                sr = __dadd_ru(sr, nfl * (double)WC_F32_MIN_NORMAL);
            }
            // the evaluation term per unit of the token's scale (docs/certificate.md §11):
            // sm·2^(−9−S)·(65279·Σ|r| + 510·Σ|a2| + γ_n·(2^17·Σ(32767|a0| + 127|a1|) + 2^9·Σ(127|a2| +
            // 255|a1|) + 255·|ΣQ|)), every step rounded up
            // (16-bit dither: 65279 + 255/256 per |r|, 255/128 per |a2|, and the second sum
            // 2·Σ(32767|a2| + 65535|a1| + 65280|a0|) and (65535/256)·|ΣQ| in place of the last two)
            double x = __dadd_ru(__dmul_ru(BITS == 8 ? (double)WC_FORM_I_RESIDUAL_BOUND : (double)WC_FORM_I_RESIDUAL_BOUND_16, sr),
                                 (BITS == 8 ? (double)WC_FORM_I_DROPPED_BOUND : (double)WC_FORM_I_DROPPED_BOUND_16) * sa2);
            const double terms = BITS == 8 ? 131072.0 * (32767.0 * sa0 + 127.0 * sa1) + 512.0 * (127.0 * sa2 + 255.0 * sa1) +
                                                 255.0 * fabs((double)sumQ)
                                           : 131072.0 * (32767.0 * sa0 + 127.0 * sa1) +
                                                 2.0 * (32767.0 * sa2 + 65535.0 * sa1 + 65280.0 * sa0) +
                                                 (65535.0 / 256.0) * fabs((double)sumQ);  // (below 2^53, multiples of 2^-8: exact)
            x = __dadd_ru(x, __dmul_ru((double)gamma_eval, terms));
            const float gq = hfin ? coef_up(__double2float_ru(__dmul_ru((double)smx.m, x)), smx.e - 9 - S,
                                            WC_COEF_FLOOR_1)
                                  : 0.0f;
            // Tier B's coefficients on the group's normalized query (certificate.cuh)
            float b2 = 0.0f, b1 = 0.0f;
            if (CERT && hfin) {  // (Tier A alone: b1's β term is not used)
                float q1, q2;
                int en;
                normalized_sums(qg, 32, [](int i) { return i; }, [bmk](int i) { return ((bmk >> i) & 1u) != 0u; }, q1, q2,
                                en);
                group_coefficients(smx, q1, q2, en, log_term, beta_steps, b2, b1);
            }
            // (with a Tier-A term the evaluation term stays apart: c_t = min(c^A, c^B) + γ_t)
            float a2c = __fmul_ru(b2, K2), a1c = __fmul_ru(TA ? b1 : __fadd_ru(b1, gq), K1);
            float gk = TA ? __fmul_ru(gq, K1) : 0.0f;
            if (!(a2c <= WC_F32_MAX && a1c <= WC_F32_MAX && gk <= WC_F32_MAX)) cinf = 1, a2c = a1c = gk = 0.0f;
            if (TA) gqk[g * NG + gr] = gk;
            // Γ ≤ ρ·cmax (docs/certificate.md §10.4): ρ = min(sqrt(Σ_g gq²/b2)·slack, max_g gq/(b1 + gq))
            csq = __dadd_ru(csq, sq_ratio_up(gq, b2));
            rq = fmaxf(rq, share_up(gq, b1));
            // (2^(17 − δ) and 2^−δ built from their exponent bits, 0 ≤ δ ≤ 60: the products exact)
            static_assert(WC_FORM_I_MAX_GROUP_SHIFT <= 143, "2^(17 − δ) a normal float");
            sh.cf[g][gr] = make_float4(__int_as_float((127 + 17 - delta) << 23),
                                       (float)(-(BITS == 8 ? 255.0 : 65535.0 / 256.0) * (double)sumQ *
                                               __longlong_as_double((i64)(1023 - delta) << 52)),
                                       a1c, a2c);
        }
        csq = __dadd_ru(csq, __shfl_xor_sync(0xffffffffu, csq, 1));
        csq = __dadd_ru(csq, __shfl_xor_sync(0xffffffffu, csq, 2));
        rq = fmaxf(rq, __shfl_xor_sync(0xffffffffu, rq, 1));
        rq = fmaxf(rq, __shfl_xor_sync(0xffffffffu, rq, 2));
        cinf |= __shfl_xor_sync(0xffffffffu, cinf, 1);
        cinf |= __shfl_xor_sync(0xffffffffu, cinf, 2);
        if (t == 0) {
            const int E = smx.e + eh - 31;
            const int E1 = min(max(E, -126), 127), E2 = E - E1;
            float* hd = su.head[g];
            hd[0] = __fmul_rn(smx.m, WC_LOG2E);
            hd[1] = ldexpf(1.0f, E1);
            hd[2] = E2 >= -126 ? ldexpf(1.0f, E2) : 0.0f;
            hd[3] = rho_up(csq, 1.0f, rq);
            su.flags[g] = (hfin ? 0 : 1) | (cinf ? 2 : 0);
        }
    }
    if constexpr (TA) {  // Tier A's band coefficients sm·||q_b||·K1 (certificate.cuh; rows g >= G: 0)
        const int per = D / NB;
        for (int idx = tid; idx < 8 * NB; idx += THREADS) {
            const int gg = idx / NB, bb = idx % NB;
            if (gg < G) {
                a_band[idx] = __fmul_ru(band_coefficient_of<false>(su.q[gg], band_ch, bb, per, smx), K1);
            } else {
                a_band[idx] = 0.0f;
            }
        }
    }
    __syncthreads();
    // head g's constants in registers (rows g >= G: zero digits, flagged as not finite, never stored)
    const float Fm = su.head[g][0], P1 = su.head[g][1], P2 = su.head[g][2], rho = su.head[g][3];
    const int hflags = su.flags[g];
    if (NW > 1 && w == 0 && ta < tb) sl = su.sl[lane], te = su.te[lane], pg = su.pg[lane];
    // warp 1's copies of warp 0's first tile landed before the barrier that shows them to warp 0
    if (NW > 1 && w == 1) cp_async_wait_group<0>();
    __syncthreads();  // the set-up's space is the dither tiles from here on

    // ---- per-thread state of head g: the softmax (m, l: l over the thread's tokens, m the quad's,
    // the same in every warp), o for channels 64w + 16cb + 4t .. + 3 (cb < 4) before the division
    // by l, Σ P' per group of the warp over the thread's tokens, λ's running maximum and sum over the
    // thread's certified tokens (warp w: 8-token blocks NBW·w .. NBW·w + NBW − 1), cmax (log2 units)
    // (with G <= 4 and no page contributions rows g >= 4 carry no head, so at d >= 128 the
    // certificate's work is halved over the rows: lane (g, t) takes half of head g mod 4's certified
    // tokens, lane (g + 4, t) the other half, their sums meeting at the end; a head's overflowing
    // coefficients (flag 2) are counted by its first lane.  At d = 64 the instances sit at the
    // register budget's edge, and there it spilled; so did d = 256 beside the outlier pairs' sums)
    constexpr bool HALF = G <= 4 && !PAGES && NW > 1 && !(OUTL && NW > 2);
    const int hc = HALF ? (g & 3) : g;  // the head this lane certifies
    const bool hi = HALF && g >= 4;     // ... with its second half of tokens
    float m = -INFINITY, l = 0.0f, m2 = -INFINITY, l2 = 0.0f, cmx = (!hi && (hflags & 2)) ? INFINITY : 0.0f;
    // exact-tier tokens: the logit's scale in log2 units (fp32 sm times log2 e: with the product, the
    // four roundings docs/certificate.md §10.1 counts), c_t = γ_t per unit of Σ|q_c||k_c| (log2
    // units with the slack, rounded up), and the largest such c_t (Γ's share of exact tokens)
    const float SL = __fmul_rn(sm, WC_LOG2E);
    const float GX = __fmul_ru(gamma_exact, K1);
    float gmx = 0.0f;
    float o[4][4], cs[2];
#pragma unroll
    for (int cb = 0; cb < 4; ++cb) o[cb][0] = o[cb][1] = o[cb][2] = o[cb][3] = 0.0f;
    [[maybe_unused]] float ov[OUTL ? I8_OUTL_MAX : 1];  // with outlier pairs: Σ p̃·v of each outlier channel
#pragma unroll
    for (int j = 0; j < (OUTL ? I8_OUTL_MAX : 1); ++j) ov[j] = 0.0f;
    cs[0] = cs[1] = 0.0f;
    // hbad: the head is dead, its query not finite (flag 1) or one of its logits (set in the loop).
    // One register for both: held apart, the query's flag lived through the tile loop and with a
    // Tier-A term NVRTC 13.0's ptxas spilled it (d = 64 at G = 1–7, 128 at G = 5–8, 256 at G = 1–4)
    bool hbad = hflags & 1, vbad = false;
    constexpr bool SCALES_AT_END = CERT || D < 256;  // (V's non-finite scales: found in ΣP' at the end)
    constexpr bool V_TWIN = !OUTL && !(D == 64 && TA);  // (the values' digit b1 in two registers)
    const int zero4[4] = {0, 0, 0, 0};

    int pe = page_entry(pg);  // (the next tile's page: its entry, once per split)
    int it = 0;
    for (i64 t0 = ta; t0 < tb; t0 += I8_TILE, ++it) {
        const int buf = it & 1;
        const bool valid = sl >= 0;
        const u32 slot = valid ? (u32)sl : 0u;
        const u32 vm = __ballot_sync(0xffffffffu, valid);
        const u32 em = EXACT ? __ballot_sync(0xffffffffu, te >= 0) : 0u;  // the tile's exact-tier tokens
        // the thread's tokens 8n + 2t + i at bits 8n + i: each test of them a constant shift
        const u32 emt = em >> (2 * t);
        // the next tile's rows start loading now (the warp's buffer they land in was last read by
        // its previous tile, which every lane finished before the closing __syncwarp)
        const i64 sln = slot_at(t0 + I8_TILE, pg);
        const int ten = entry_of(sln, pe);
        if (t0 + I8_TILE < tb) stage(buf ^ 1, sln, ten, w);
        else cp_async_commit();  // (an empty group keeps the wait below uniform)
        pg = page_of(t0 + 2 * I8_TILE);
        // 1. this tile's dither fields of the warp's channels, j' = 255 − j (16 bits: two bytes each)
        if constexpr (BITS == 8) {
#pragma unroll
            for (int sd = 0; sd < 2; ++sd)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const u32x4 x = philox10(slot, dither_ctr1(sd, 4 * w + c), ctr2, 0u, k0, k1);
                    *reinterpret_cast<uint4*>(&sh.dith[w][sd][i8_off(lane, c)]) = make_uint4(~x.x, ~x.y, ~x.z, ~x.w);
                }
        } else {
            fields16(0, slot);
            fields16(1, slot);
        }
        cp_async_wait_group<1>();
        __syncwarp();
        // 2. K: the warp's partial logits Σ s_g Z_g over its two groups (two 8-token blocks at a
        // time: with all four in flight ptxas holds every block's fragments at once)
#pragma unroll(BITS == 8 ? 2 : 1)
        for (int n = 0; n < 4; ++n) {
            u32 kc[4], kd[4];
            [[maybe_unused]] u32 kl[4];
            const int so = i8_off(8 * n + (lane & 7), lane >> 3);
            ldsm_x4(kc, &sh.codes[buf][w][0][so]);
            ldsm_x4(kd, &sh.dith[w][0][so]);
            if constexpr (BITS == 16) ldsm_x4(kl, &sh.dith[w][1][so]);
            float inner[2];
#pragma unroll
            for (int gg = 0; gg < 2; ++gg) {
                const int gr = 2 * w + gg;
                // a0, a1 (low k, rows g and g + 8), a0, a1 (high k); a12: a1, a2 (low), a1, a2 (high)
                const uint4 a01 = sh.qd01[gr][g][t];
                uint4 a12;
                if constexpr (QW == 4) {
                    a12 = *reinterpret_cast<const uint4*>(sh.qd2[gr][g][t]);
                } else {
                    const uint2 a2 = *reinterpret_cast<const uint2*>(sh.qd2[gr][g][t]);
                    a12 = make_uint4(a01.y, a2.x, a01.w, a2.y);
                }
                const float4 cq = sh.cf[g][gr];
                // (R0, R1, R2) at c01[i], c01[2 + i], c2[i]; 16 bits: R3 at c2[2 + i]
                int c01[4], c2[4];
                if constexpr (BITS == 8) {
                    i8_three_products(c01, c2, a01, a12, kc[2 * gg], kc[2 * gg + 1], kd[2 * gg], kd[2 * gg + 1]);
                } else {  // (j' = 256·jh' + jl': R2 = Σ a2·k + Σ a1·jh' + Σ a0·jl' in rows g, R3 =
                    // Σ a2·jh' + Σ a1·jl' in rows g + 8)
                    imma_k32<false>(c01, a01.x, a01.y, a01.z, a01.w, kc[2 * gg], kc[2 * gg + 1], zero4);
                    imma_k32<true>(c01, 0u, a01.x, 0u, a01.z, kd[2 * gg], kd[2 * gg + 1], c01);
                    imma_k32<false>(c2, a12.y, 0u, a12.w, 0u, kc[2 * gg], kc[2 * gg + 1], zero4);
                    imma_k32<true>(c2, a12.x, a12.y, a12.z, a12.w, kd[2 * gg], kd[2 * gg + 1], c2);
                    imma_k32<true>(c2, a01.x, a01.y, a01.z, a01.w, kl[2 * gg], kl[2 * gg + 1], c2);
                }
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    // Z = fma(fl(256·R0 + R1), W1, fma(R2, W1/256, C)) (W1 a power of two); 16 bits:
                    // fma(fl(256·R2 + R3), W1/65536, C) inside
                    const float fy = __int2float_rn((c01[i] << 8) + c01[2 + i]);
                    const float f2 = BITS == 8 ? __int2float_rn(c2[i]) : __int2float_rn((c2[i] << 8) + c2[2 + i]);
                    const float z = __fmaf_rn(fy, cq.x, __fmaf_rn(f2, cq.x * (BITS == 8 ? 0.00390625f : 1.52587890625e-5f), cq.y));
                    const float sg = f16_to_f32(sh.ks[buf][w][8 * n + 2 * t + i][gr]);
                    inner[i] = gg == 0 ? __fmul_rn(sg, z) : __fmaf_rn(sg, z, inner[i]);
                }
            }
            if (R == 8 || g < R) *reinterpret_cast<float2*>(&sh.xp[buf][w][g][8 * n + 2 * t]) = make_float2(inner[0], inner[1]);
        }
        if constexpr (EXACT) {
            if (em) {  // (CTA-uniform: every warp stages the same tokens) the tile's exact-tier tokens:
                // their partial dot products over the warp's 64 channels, one fp32 chain in channel
                // order (certificate.FORM_I_EXACT_ORDER), in place of the integer products' partial
                // logits, and Σ|q_c||k_c| beside them.  Apart from the loop above, whose blocks' products
                // ptxas then interleaves freely.  The barrier: every warp has read the previous exact
                // tile's sums (one buffer of them: 6 CTAs per SM at d = 128 instead of 5)
                __syncthreads();
                const float* qg_ = q + ((i64)b * Hq + h * G + (g < G ? g : 0)) * D + I8_WARP_CH * w;
#pragma unroll 1
                for (int n = 0; n < 4; ++n) {
                    if (!((em >> (8 * n)) & 0xFFu)) continue;
                    // the thread's two tokens together, their rows read whether or not they are exact
                    // (a token off the tier reads entry 0's row, in bounds and unused): no load waits
                    // behind a branch, and each query piece serves both rows
                    const int tk = 8 * n + 2 * t;
                    const int e0 = __shfl_sync(0xffffffffu, te, tk), e1 = __shfl_sync(0xffffffffu, te, tk + 1);
                    const u16* kr0 = i8_tier_row<D>(tier_k, e0, __shfl_sync(0xffffffffu, slot, tk), psh) + I8_WARP_CH * w;
                    const u16* kr1 = i8_tier_row<D>(tier_k, e1, __shfl_sync(0xffffffffu, slot, tk + 1), psh) + I8_WARP_CH * w;
                    float acc0 = 0.0f, aac0 = 0.0f, acc1 = 0.0f, aac1 = 0.0f;
                    // (unrolled whole: all sixteen loads per row in flight at once, where rounds of four
                    // were dependent trips to L2 on a short split's critical path)
#pragma unroll
                    for (int c = 0; c < I8_WARP_CH; c += 4) {
                        const float4 qv = *reinterpret_cast<const float4*>(qg_ + c);
                        float x0[4], x1[4];
                        f16_x4(*reinterpret_cast<const uint2*>(kr0 + c), x0);
                        f16_x4(*reinterpret_cast<const uint2*>(kr1 + c), x1);
                        // (products and sums each rounded, as the twin's blocked_dot: no contraction)
                        i8_exact_dot4(qv, x0, acc0, aac0);
                        i8_exact_dot4(qv, x1, acc1, aac1);
                    }
                    if (R == 8 || g < R) {
                        if (e0 >= 0) sh.xp[buf][w][g][tk] = acc0;
                        if (e1 >= 0) sh.xp[buf][w][g][tk + 1] = acc1;
                        *reinterpret_cast<float2*>(&xa[(w * R + g) * I8_TILE + tk]) =
                            make_float2(e0 >= 0 ? aac0 : 0.0f, e1 >= 0 ? aac1 : 0.0f);
                    }
                }
            }
        }
        prefetch_tier(ten, sln, w);
        pe = page_entry(pg);  // (after the K products, under which the page id arrived)
        __syncthreads();  // every warp's partial logits
        // ℓ̃ = ((Σ_w part_w)·Fm)·P1·P2 with the warps' parts added pairwise (part₀ + part₁, and
        // (part₀ + part₁) + (part₂ + part₃) at d = 256: at most two roundings, which the evaluation
        // term counts, docs/certificate.md §11), log2 units (the same in every warp)
        float lt[4][2];
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            float2 pw[NW];
#pragma unroll
            for (int ww = 0; ww < NW; ++ww) {  // (rows g >= R, which carry no head, are not held: zeros)
                pw[ww] = make_float2(0.0f, 0.0f);
                if (R == 8 || g < R) pw[ww] = *reinterpret_cast<const float2*>(&sh.xp[buf][ww][g][8 * n + 2 * t]);
            }
#pragma unroll
            for (int span = 1; span < NW; span *= 2)
#pragma unroll
                for (int ww = 0; ww + span < NW; ww += 2 * span)
                    pw[ww].x = __fadd_rn(pw[ww].x, pw[ww + span].x), pw[ww].y = __fadd_rn(pw[ww].y, pw[ww + span].y);
            lt[n][0] = __fmul_rn(__fmul_rn(__fmul_rn(pw[0].x, Fm), P1), P2);
            lt[n][1] = __fmul_rn(__fmul_rn(__fmul_rn(pw[0].y, Fm), P1), P2);
            if constexpr (EXACT) {  // an exact-tier token's logit: its fp32 dot product times SL
                if (em) {  // (warp-uniform: a tile without such tokens skips the tests)
                    if ((emt >> (8 * n)) & 1u) lt[n][0] = __fmul_rn(pw[0].x, SL);
                    if ((emt >> (8 * n + 1)) & 1u) lt[n][1] = __fmul_rn(pw[0].y, SL);
                }
            }
            if constexpr (OUTL) {  // the outlier channels' fp32 dot product (a chain in channel-list
                // order, products and sums each rounded), times SL, added once (docs/certificate.md §11)
                const u16* kr = orow + ((w * 2 + buf) * I8_TILE + 8 * n + 2 * t) * 2 * NP2;
                float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
                for (int j = 0; j < I8_OUTL_MAX; ++j) {
                    if (j < NP2) {
                        const float qv = oq[g * NP2 + j];
                        d0 = __fadd_rn(d0, __fmul_rn(qv, f16_to_f32(kr[j])));
                        d1 = __fadd_rn(d1, __fmul_rn(qv, f16_to_f32(kr[2 * NP2 + j])));
                    }
                }
                lt[n][0] = __fadd_rn(lt[n][0], __fmul_rn(d0, SL));
                lt[n][1] = __fadd_rn(lt[n][1], __fmul_rn(d1, SL));
            }
        }
        // 3. the online softmax over the tile (head g: the quad's 32 tokens)
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const bool v = (vm >> (8 * n + 2 * t + i)) & 1u;
                if (v && !is_finite32(lt[n][i])) hbad = true;
                if (v) mx = fmaxf(mx, lt[n][i]);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(m, mx);
        const bool live = mn != -INFINITY;
        const float alpha = live ? exp2f(m - mn) : 1.0f;
        m = mn;
        float p[4][2];
        float psum = 0.0f;
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const bool v = (vm >> (8 * n + 2 * t + i)) & 1u;
                p[n][i] = live && v ? exp2f(lt[n][i] - mn) : 0.0f;
                psum += p[n][i];
            }
        l = __fmaf_rn(l, alpha, psum);
        if constexpr (CERT) {  // the certificate's c_t (log2 units, with the slack), cmax and λ's sum: the
            // warp's NBW 8-token blocks, at most two (one 16-token page) under each new maximum
            // (two instances: a tile without exact-tier tokens runs none of their code, warp-uniformly)
            auto certify = [&](auto exact_tile) {
                constexpr bool EX = decltype(exact_tile)::value;
                constexpr int NC = NBW < 2 ? NBW : 2;  // 8-token blocks per chunk
#pragma unroll
                for (int pp = 0; pp < NBW / NC; ++pp) {
                    float x[NC][2], lw[NC][2];
                    float mx2 = -INFINITY;
#pragma unroll
                    for (int nn = 0; nn < NC; ++nn)
#pragma unroll
                        for (int i = 0; i < 2; ++i) {
                            // (HALF: the chunk's first NC of its 2·NC (block, token) pairs p = 2nn + i, the
                            // lanes g >= 4 taking pair NC + p instead, whose logit their partner holds)
                            const int p = 2 * nn + i;
                            if (HALF && p >= NC) continue;
                            const int n0 = NBW * w + NC * pp + nn, n1 = NBW * w + NC * pp + (NC + p) / 2, i1 = (NC + p) % 2;
                            const int n = hi ? n1 : n0, tk = 8 * n + 2 * t + (hi ? i1 : i);
                            [[maybe_unused]] float u2 = 0.0f, be = 0.0f, ge = 0.0f;  // (per tier)
#pragma unroll
                            for (int gp = 0; gp < NG / 2; ++gp) {  // two groups a word; Tier B's a1, a2
                                const u32 kw = *reinterpret_cast<const u32*>(&sh.ks[buf][w][tk][2 * gp]);
#pragma unroll
                                for (int hh = 0; hh < 2; ++hh) {
                                    const float2 cq = i8_coef_pair<NG == 8>(&sh.cf[hc][2 * gp + hh].z);
                                    const float s1 = f16_to_f32((u16)(kw >> (16 * hh)));
                                    if constexpr (TB) u2 += __fmul_rn(s1, s1) * cq.y, be += s1 * cq.x;
                                    if constexpr (TA) ge += s1 * gqk[hc * NG + 2 * gp + hh];
                                }
                            }
                            float u = 0.0f;
                            if constexpr (TB) asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(u) : "f"(u2));
                            const bool v = (vm >> tk) & 1u;
                            float c2 = u + be;  // (without a Tier-A term be carries γ_t)
                            if constexpr (OUTL) {  // γ_t's exact part GX·Σ|q_c||k_c| over the outlier
                                // channels, every step rounded up: in c_t beside β's (Γ: its largest)
                                const u16* kr = orow + ((w * 2 + buf) * I8_TILE + tk) * 2 * NP2;
                                float ao = 0.0f;
#pragma unroll
                                for (int j = 0; j < I8_OUTL_MAX; ++j)
                                    if (j < NP2) ao = __fadd_ru(ao, __fmul_ru(fabsf(oq[hc * NP2 + j]), fabsf(f16_to_f32(kr[j]))));
                                ao = __fmul_ru(GX, ao);
                                if constexpr (TA) ge = __fadd_ru(ge, ao);
                                else c2 = __fadd_ru(c2, ao);
                                if (!TA && v) gmx = fmaxf(gmx, ao);
                            }
                            if constexpr (TA) {  // c^A = Σ_b a_b·w_{t,b} in band order; c_t = min(c^A, c^B) + γ_t
                                const u16* wr = &wit_s[(buf * I8_TILE + tk) * NB];
                                const float* ab = &a_band[hc * NB];
                                float ca = 0.0f;
                                // (four bands a step: one 8-byte load of the row, one 16-byte load of the coefficients)
#pragma unroll 2
                                for (int bb = 0; bb < NB; bb += 4) {
                                    const uint2 wv = *reinterpret_cast<const uint2*>(wr + bb);
                                    const float4 a4 = *reinterpret_cast<const float4*>(ab + bb);
                                    ca += a4.x * f16_to_f32((u16)wv.x);
                                    ca += a4.y * f16_to_f32((u16)(wv.x >> 16));
                                    ca += a4.z * f16_to_f32((u16)wv.y);
                                    ca += a4.w * f16_to_f32((u16)(wv.y >> 16));
                                }
                                ca = ca <= WC_F32_MAX ? ca : INFINITY;  // (NaN: +inf)
                                c2 = (TB ? fminf(ca, c2) : ca) + ge;
                                if (v) gmx = fmaxf(gmx, ge);
                            }
                            if constexpr (EX) {
                                if ((em >> tk) & 1u) {  // c_t = γ_t: Σ|q_c||k_c| over every warp's channels
                                    float ad[NW];
#pragma unroll
                                    for (int ww = 0; ww < NW; ++ww) ad[ww] = R == 8 || hc < R ? xa[(ww * R + hc) * I8_TILE + tk] : 0.0f;
#pragma unroll
                                    for (int span = 1; span < NW; span *= 2)
#pragma unroll
                                        for (int ww = 0; ww + span < NW; ww += 2 * span) ad[ww] = __fadd_ru(ad[ww], ad[ww + span]);
                                    c2 = __fmul_ru(GX, ad[0]);
                                    if (v) gmx = fmaxf(gmx, c2);
                                }
                            }
                            if (v) cmx = fmaxf(cmx, c2);
                            lw[nn][i] = lt[0][i];  // lt[n][i], n warp-dependent: selected, not indexed
#pragma unroll
                            for (int n2 = 1; n2 < 4; ++n2)
                                if (n2 == n0) lw[nn][i] = lt[n2][i];
                            if constexpr (HALF) {
                                float l1 = lt[0][(NC + p) % 2];
#pragma unroll
                                for (int n2 = 1; n2 < 4; ++n2)
                                    if (n2 == n1) l1 = lt[n2][(NC + p) % 2];
                                l1 = __shfl_xor_sync(0xffffffffu, l1, 16);
                                if (hi) lw[nn][i] = l1;
                            }
                            x[nn][i] = v ? lw[nn][i] + c2 : -INFINITY;
                            mx2 = fmaxf(mx2, x[nn][i]);
                        }
                    const float mn2 = fmaxf(m2, mx2);
                    if (mn2 != -INFINITY) {  // (an infinite c_t makes cmax infinite: the end reports λ = +inf)
                        float add = 0.0f;
#pragma unroll
                        for (int nn = 0; nn < NC; ++nn) {
                            if constexpr (!HALF) add += exp2f(x[nn][0] - mn2) + exp2f(x[nn][1] - mn2);
                            else if (2 * nn < NC) add += NC == 1 ? exp2f(x[0][0] - mn2) : exp2f(x[0][0] - mn2) + exp2f(x[0][1] - mn2);
                        }
                        l2 = __fmaf_rn(l2, exp2f(m2 - mn2), add);
                        m2 = mn2;
                    }
                    if constexpr (PAGES) {  // this page's lse_j and λ_j over the quad's tokens,
                        // natural-log units (SPEC §6; -inf for an empty sum, +inf for λ with an infinite
                        // c_t or a head without a finite logit)
                        static_assert(!PAGES || NC == 2, "a chunk is one page");
                        float pmx = -INFINITY, pmx2 = -INFINITY;
                        int pbad = 0;
#pragma unroll
                        for (int nn = 0; nn < NC; ++nn)
#pragma unroll
                            for (int i = 0; i < 2; ++i) {
                                const bool v = (vm >> (8 * (NBW * w + NC * pp + nn) + 2 * t + i)) & 1u;
                                if (v && !is_finite32(lw[nn][i])) pbad = 1;
                                if (v) pmx = fmaxf(pmx, lw[nn][i]), pmx2 = fmaxf(pmx2, x[nn][i]);
                            }
                        pmx = fmaxf(pmx, __shfl_xor_sync(0xffffffffu, pmx, 1));
                        pmx = fmaxf(pmx, __shfl_xor_sync(0xffffffffu, pmx, 2));
                        pmx2 = fmaxf(pmx2, __shfl_xor_sync(0xffffffffu, pmx2, 1));
                        pmx2 = fmaxf(pmx2, __shfl_xor_sync(0xffffffffu, pmx2, 2));
                        float e = 0.0f, e2 = 0.0f;
#pragma unroll
                        for (int nn = 0; nn < NC; ++nn)
#pragma unroll
                            for (int i = 0; i < 2; ++i) {
                                const bool v = (vm >> (8 * (NBW * w + NC * pp + nn) + 2 * t + i)) & 1u;
                                if (v && is_finite32(lw[nn][i])) e += exp2f(lw[nn][i] - pmx), e2 += exp2f(x[nn][i] - pmx2);
                            }
#pragma unroll
                        for (int off = 1; off <= 2; off <<= 1) {
                            e += __shfl_xor_sync(0xffffffffu, e, off);
                            e2 += __shfl_xor_sync(0xffffffffu, e2, off);
                            pbad |= __shfl_xor_sync(0xffffffffu, pbad, off);
                        }
                        const int tp = (NBW * w + NC * pp) / 2;  // the tile's page
                        const i64 pi = (t0 >> 4) + tp;
                        if (t == 0 && g < G && ((vm >> (16 * tp)) & 1u) && pi < max_pages) {
                            const i64 po = ((i64)b * Hq + h * G + g) * max_pages + pi;
                            const bool qbad = hflags & 1;
                            page_lse[po] = qbad || pmx == -INFINITY ? -INFINITY : pmx * WC_LN2 + logf(e);
                            page_lam[po] = qbad || pbad || (hflags & 2) ? INFINITY
                                                                        : (pmx2 == -INFINITY ? -INFINITY
                                                                                             : pmx2 * WC_LN2 + logf(e2));
                        }
                    }
                }
            };
            if (EXACT && em) certify(WcBool<EXACT>{});
            else certify(WcBool<false>{});
        }
        // 4. V over the warp's two groups: P' = p̃·s per token and group, its digits, o += P'·V̂
#pragma unroll
        for (int cb = 0; cb < 4; ++cb) o[cb][0] *= alpha, o[cb][1] *= alpha, o[cb][2] *= alpha, o[cb][3] *= alpha;
        if constexpr (OUTL) {  // the outlier channels' values in fp32: ov_j += p̃·v over the thread's tokens
#pragma unroll
            for (int j = 0; j < I8_OUTL_MAX; ++j) ov[j] *= alpha;
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const u16* vr = orow + ((w * 2 + buf) * I8_TILE + 8 * n + 2 * t + i) * 2 * NP2 + NP2;
#pragma unroll
                    for (int j = 0; j < I8_OUTL_MAX; ++j)
                        if (j < NP2) ov[j] = __fmaf_rn(p[n][i], f16_to_f32(vr[j]), ov[j]);
                }
        }
#pragma unroll
        for (int gg = 0; gg < 2; ++gg) {
            float pp[4][2];
            float pm = 0.0f, ps = 0.0f;
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    // (an exact-tier token's scale was staged as 0: P' = 0, its values come from the tier;
                    // a token past the split's end stages 0 as well.  A non-finite scale is found in ΣP'
                    // at the end, not token by token, but at d = 256 without a certificate, where that
                    // made ptxas spill 8–24 bytes)
                    const float sv = f16_to_f32(sh.vs[buf][w][8 * n + 2 * t + i][gg]);
                    if (!SCALES_AT_END && ((vm >> (8 * n + 2 * t + i)) & 1u) && !is_finite32(sv)) vbad = true;
                    pp[n][i] = __fmul_rn(p[n][i], sv);
                    pm = fmaxf(pm, pp[n][i]);
                    ps += pp[n][i];
                }
            cs[gg] = __fmaf_rn(cs[gg], alpha, ps);
            pm = fmaxf(pm, __shfl_xor_sync(0xffffffffu, pm, 1));
            pm = fmaxf(pm, __shfl_xor_sync(0xffffffffu, pm, 2));
            // Y = rint(P'·σ) = 2^16 b0 + 2^8 b1 + b2 with σ = 63·2^16/max (Y < 2^22, so it is the low
            // bits of y + 1.5·2^23 rounded to nearest): b2 is Y's low byte, b1 byte 1 of Y + 128, b0
            // byte 2 of Y + 128 + 2^15 (balanced base-256 digits, b0 in [0, 63])
            const bool pos = pm > 0.0f && pm <= WC_F32_MAX;
            const float sig = pos ? __fdividef(4128768.0f, pm) : 0.0f;
            const float vw1 = __fmul_rn(pm, 1.0f / 16128.0f), vw2 = __fmul_rn(pm, 1.0f / 4128768.0f);  // 2^8/σ, 1/σ
            u32 y2[4][2], y1[4][2], y0[4][2];
#pragma unroll
            for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const u32 tb_ = __float_as_uint(__fmaf_rn(pp[n][i], sig, 12582912.0f));
                    const u32 u = tb_ - (0x4B400000u - 128u);
                    y2[n][i] = tb_;
                    y1[n][i] = u;
                    y0[n][i] = u + 32768u;
                }
            // A fragments: rows g the digits b0 and b2, rows g + 8 b1, k = the tokens of V's B fragments
            const u32 b0lo = i8_pack4(y0[0][0], y0[0][1], y0[1][0], y0[1][1], 2);
            const u32 b0hi = i8_pack4(y0[2][0], y0[2][1], y0[3][0], y0[3][1], 2);
            const u32 b1lo = i8_pack4(y1[0][0], y1[0][1], y1[1][0], y1[1][1], 1);
            const u32 b1hi = i8_pack4(y1[2][0], y1[2][1], y1[3][0], y1[3][1], 1);
            const u32 b2lo = i8_pack4(y2[0][0], y2[0][1], y2[1][0], y2[1][1], 0);
            const u32 b2hi = i8_pack4(y2[2][0], y2[2][1], y2[3][0], y2[3][1], 0);
            // b1 again for the second quad {b1, b2} (i8_pack4_twin), but with outlier pairs and with a
            // Tier-A term at d = 64, where the second register made ptxas spill (NVRTC 13.0: 4–28 bytes
            // with outlier pairs at every head dim; NVRTC 13.5: 4 bytes at d = 64, G = 8, Tier AB)
            const u32 b1lo2 = V_TWIN ? i8_pack4_twin(y1[0][0], y1[0][1], y1[1][0], y1[1][1], 1) : b1lo;
            const u32 b1hi2 = V_TWIN ? i8_pack4_twin(y1[2][0], y1[2][1], y1[3][0], y1[3][1], 1) : b1hi;
#pragma unroll
            for (int hb = 0; hb < 2; ++hb) {  // the warp's channels 16cb .. 16cb + 15, cb = 2·gg + hb
                const int cb = 2 * gg + hb;
                u32 vc[4], vd[4];
                [[maybe_unused]] u32 vl[4];
                ldsm_x4_trans(vc, &sh.codes[buf][w][1][i8_off(lane, cb)]);
                ldsm_x4_trans(vd, &sh.dith[w][BITS == 8 ? 1 : 2][i8_off(lane, cb)]);
                if constexpr (BITS == 16) ldsm_x4_trans(vl, &sh.dith[w][3][i8_off(lane, cb)]);
#pragma unroll
                for (int odd = 0; odd < 2; ++odd) {  // channels 16cb + 2n' + odd, n' < 8
                    const u32 sel = odd ? 0x7531u : 0x6420u;
                    const u32 bk0 = prmt(vc[0], vc[1], sel), bk1 = prmt(vc[2], vc[3], sel);
                    const u32 bj0 = prmt(vd[0], vd[1], sel), bj1 = prmt(vd[2], vd[3], sel);
                    // R0 = Σ b0·k, R1 = Σ b1·k + Σ b0·j', R2 = Σ b2·k + Σ b1·j' at c[i], c[2 + i], c2[i]
                    int c[4], c2[4];
                    if constexpr (BITS == 8) {
                        i8_three_products(c, c2, make_uint4(b0lo, b1lo, b0hi, b1hi), make_uint4(b1lo2, b2lo, b1hi2, b2hi),
                                          bk0, bk1, bj0, bj1);
                    } else {  // (j' = 256·jh' + jl', bj the jh' bytes: the same three products and
                        // {0, b0}·jl' into the second accumulator, R2 += Σ b0·jl' in rows g + 8 (four
                        // products where five had rows of zeros); Σ b2·jh' + Σ b1·jl', weighted 2^-8
                        // against R2, dropped as 8 bits drop Σ b2·j')
                        i8_three_products<true>(c, c2, make_uint4(b0lo, b1lo, b0hi, b1hi), make_uint4(b1lo2, b2lo, b1hi2, b2hi),
                                                bk0, bk1, bj0, bj1, make_uint2(prmt(vl[0], vl[1], sel), prmt(vl[2], vl[3], sel)));
                    }
#pragma unroll
                    for (int i = 0; i < 2; ++i)  // columns 2t + i: channels 16cb + 4t + 2i + odd
                        o[cb][2 * i + odd] = __fmaf_rn(__int2float_rn((c[i] << 8) + c[2 + i]), vw1,
                                                       __fmaf_rn(__int2float_rn(c2[i]), vw2, o[cb][2 * i + odd]));
                }
            }
        }
        if constexpr (EXACT) {
            if (em) {  // (warp-uniform) the exact-tier tokens' values: o += p̃·v in fp32, head g's p̃ of
                // token 8n + 2t' + i from its thread (g, t'), channels 64w + 16cb + 4t .. + 3; a
                // non-finite value is found in o at the end, not value by value
                // rounds of four tokens 4r .. 4r + 3 (those with an exact-tier token), their rows read
                // first whether or not they are exact (entry 0's row for a token off the tier,
                // unused), then added in token order.  A loop, not unrolled: this code runs in few
                // tiles, and each run of it fetches its instructions anew
#pragma unroll 1
                for (int r = 0; r < 8; ++r) {
                    if (!((em >> (4 * r)) & 0xFu)) continue;
                    const int n = r >> 1;
                    float pn[2] = {p[0][0], p[0][1]};  // p[n], n a loop variable: selected, not indexed
#pragma unroll
                    for (int n2 = 1; n2 < 4; ++n2)
                        if (n2 == n) pn[0] = p[n2][0], pn[1] = p[n2][1];
                    uint2 vw[4][4];
                    float pt[4];
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int tk = 4 * r + j;  // thread (g, tk mod 8 / 2)'s token i = j mod 2 of block n
                        pt[j] = __shfl_sync(0xffffffffu, pn[j & 1], (lane & ~3) | ((tk & 7) >> 1));
                        const int e = __shfl_sync(0xffffffffu, te, tk);
                        const u16* vr = i8_tier_row<D>(tier_v, e, __shfl_sync(0xffffffffu, slot, tk), psh) +
                                        I8_WARP_CH * w + 4 * t;
#pragma unroll
                        for (int cb = 0; cb < 4; ++cb) vw[j][cb] = *reinterpret_cast<const uint2*>(vr + 16 * cb);
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        if (!((em >> (4 * r + j)) & 1u)) continue;
#pragma unroll
                        for (int cb = 0; cb < 4; ++cb) {
                            float v4[4];
                            f16_x4(vw[j][cb], v4);
#pragma unroll
                            for (int k = 0; k < 4; ++k) o[cb][k] = __fmaf_rn(pt[j], v4[k], o[cb][k]);
                        }
                    }
                }
            }
        }
        sl = sln;
        te = ten;
        __syncwarp();  // every lane's reads of the warp's buffers of this tile are done
    }
    cp_async_wait_group<0>();

    // ---- the quad's sums: l, ΣP', λ's (m2, l2) under one maximum, cmax; then the warps' λ
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
        l += __shfl_xor_sync(0xffffffffu, l, off);
        cs[0] += __shfl_xor_sync(0xffffffffu, cs[0], off);
        cs[1] += __shfl_xor_sync(0xffffffffu, cs[1], off);
        cmx = fmaxf(cmx, __shfl_xor_sync(0xffffffffu, cmx, off));
        gmx = fmaxf(gmx, __shfl_xor_sync(0xffffffffu, gmx, off));
        hbad = __shfl_xor_sync(0xffffffffu, (int)hbad, off) || hbad;
    }
    // a non-finite V scale of a token in the split: its P' = p̃·s is NaN or ±inf for every p̃ ≥ 0 (0·inf
    // is NaN) and stays so through every rescale and sum, while finite scales cannot overflow ΣP' (p̃ ≤
    // 1, s ≤ 65504 per token).  So a head whose logits are finite has a non-finite ΣP' exactly when
    // one of the warp's groups had such a scale; every head of the CTA reads the same scales
    if (SCALES_AT_END && (!is_finite32(cs[0]) || !is_finite32(cs[1])) && g < G && !hbad) vbad = true;
    if constexpr (EXACT) {
        // an exact-tier token's non-finite value: p̃·v is NaN or ±inf for every p̃ ≥ 0 (0·inf is NaN)
        // and stays so through every rescale and sum, while finite values cannot overflow o (|v| ≤
        // 65504, p̃ ≤ 1: |o| < 2^17 per token).  So o of a head whose logits are finite is non-finite
        // exactly when some value it attended was (docs/certificate.md §10.7); every head of the
        // CTA reads the same values, and each thread holds 16 of the warp's 64 channels
        bool onf = false;
#pragma unroll
        for (int cb = 0; cb < 4; ++cb)
#pragma unroll
            for (int k = 0; k < 4; ++k) onf = onf || !is_finite32(o[cb][k]);
        if (onf && g < G && !hbad) vbad = true;
    }
    if constexpr (OUTL) {  // the quad's Σ p̃·v per outlier channel; a non-finite one as the exact tier's
        bool onf = false;
#pragma unroll
        for (int j = 0; j < I8_OUTL_MAX; ++j) {
            ov[j] += __shfl_xor_sync(0xffffffffu, ov[j], 1);
            ov[j] += __shfl_xor_sync(0xffffffffu, ov[j], 2);
            onf = onf || !is_finite32(ov[j]);
        }
        if (onf && g < G && !hbad) vbad = true;
    }
    if constexpr (HALF) {  // the two halves of each head's certified tokens
        cmx = fmaxf(cmx, __shfl_xor_sync(0xffffffffu, cmx, 16));
        gmx = fmaxf(gmx, __shfl_xor_sync(0xffffffffu, gmx, 16));
    }
    float M2 = m2;
    M2 = fmaxf(M2, __shfl_xor_sync(0xffffffffu, M2, 1));
    M2 = fmaxf(M2, __shfl_xor_sync(0xffffffffu, M2, 2));
    if constexpr (HALF) M2 = fmaxf(M2, __shfl_xor_sync(0xffffffffu, M2, 16));
    l2 = m2 == -INFINITY ? 0.0f : l2 * exp2f(m2 - M2);
    l2 += __shfl_xor_sync(0xffffffffu, l2, 1);
    l2 += __shfl_xor_sync(0xffffffffu, l2, 2);
    if constexpr (HALF) l2 += __shfl_xor_sync(0xffffffffu, l2, 16);
    if (w > 0) {
        // (in the warp's own dither tile, whose last reads were its last tile's, before the loop's end)
        reinterpret_cast<float4*>(&sh.dith[w][0][0])[lane] = make_float4(M2, l2, cmx, gmx);
    }
    vbad = __syncthreads_or(vbad);
    poisoned = __syncthreads_or(poisoned);
    if (w == 0) {  // λ's sums of the warps under one maximum, in warp order
#pragma unroll
        for (int ww = 1; ww < NW; ++ww) {
            const float4 lo = reinterpret_cast<const float4*>(&sh.dith[ww][0][0])[lane];
            const float Mo = lo.x, Lo = lo.y;
            const float Mx = fmaxf(M2, Mo);
            l2 = (M2 == -INFINITY ? 0.0f : l2 * exp2f(M2 - Mx)) + (Mo == -INFINITY ? 0.0f : Lo * exp2f(Mo - Mx));
            M2 = Mx;
            cmx = fmaxf(cmx, lo.z);
            gmx = fmaxf(gmx, lo.w);
        }
    }
    const bool dead = poisoned || hbad;
    if (g < G) {
        const i64 oi = ((i64)b * Hq + h * G + g) * num_splits + s;
        float* op = o_part + oi * D + I8_WARP_CH * w;
        // the outlier channels' outputs, divided once each: a division per channel and output slot
        // made the epilogue 600 instructions and 128 branches long, and at B = 1 (each SM runs its
        // CTAs once) instruction fetch was most of the step's stalls (a profile)
        [[maybe_unused]] float ovl[OUTL ? I8_OUTL_MAX : 1];
        if constexpr (OUTL) {
#pragma unroll
            for (int j = 0; j < I8_OUTL_MAX; ++j) ovl[j] = ov[j] / l;
        }
#pragma unroll
        for (int cb = 0; cb < 4; ++cb) {
            // 255/512 (16 bits: 65535/131072) · ΣP' of the group
            const float c0 = (BITS == 8 ? 0.498046875f : 0.49999237060546875f) * cs[cb >> 1];
            float4 r;
            if (dead || vbad) r = make_float4(NAN, NAN, NAN, NAN);
            else if (l == 0.0f) r = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            else r = make_float4((o[cb][0] - c0) / l, (o[cb][1] - c0) / l, (o[cb][2] - c0) / l, (o[cb][3] - c0) / l);
            if constexpr (OUTL) {  // an outlier channel of this thread's four: its fp32 sum
                if (!(dead || vbad) && l != 0.0f) {
#pragma unroll
                    for (int j = 0; j < I8_OUTL_MAX; ++j) {
                        const int k = och[j] - (I8_WARP_CH * w + 16 * cb + 4 * t);  // (-1 past NP2: never 0..3 here)
                        if (och[j] >= 0 && k == 0) r.x = ovl[j];
                        if (och[j] >= 0 && k == 1) r.y = ovl[j];
                        if (och[j] >= 0 && k == 2) r.z = ovl[j];
                        if (och[j] >= 0 && k == 3) r.w = ovl[j];
                    }
                }
            }
            *reinterpret_cast<float4*>(op + 16 * cb + 4 * t) = r;
        }
        if (w == 0 && t == 0) {
            // back to natural-log units (cmax, a bound, through the float ln 2, which is above ln 2,
            // rounded up); a non-finite V scale: o is not finite, so no guarantee (SPEC §3.6)
            const bool linf = CERT && (cmx == INFINITY || vbad);
            const float cm = CERT ? (linf ? INFINITY : __fmul_ru(cmx, WC_LN2)) : 0.0f;
            const float lam = !CERT ? -INFINITY
                                    : (linf ? INFINITY : (l2 > 0.0f ? M2 * WC_LN2 + logf(l2) : -INFINITY));
            // Γ: with Tier B alone ρ·cmax over the quantized tokens (γ_t ≤ ρ·c_t there) and the largest
            // exact-tier c_t = γ_t; with a Tier-A term the largest γ_t, tracked
            const float gx = linf ? INFINITY : __fmul_ru(gmx, WC_LN2);
            // (with outlier pairs every quantized token's γ_t adds its exact part: ρ·cmax plus the largest)
            const float gm = !CERT ? 0.0f
                                   : (TA ? gx : (OUTL ? __fadd_ru(gamma_of_rho(rho, cm), gx) : fmaxf(gamma_of_rho(rho, cm), gx)));
            store_split_stats(oi, dead, l, m * WC_LN2 + logf(l), lam, cm, gm, lse_part, lam_part, cmax_part, gam_part);
        }
    }
}

// Explicit instantiations of one head dim (the offline compile checks in tests/test_cuda_compile.py):
// every G and tier, with and without the exact tier, with outlier pairs, and where the layout serves
// them, with page contributions and with page contributions over the exact tier (the gate's steps).
#define WC_I8_INST1B(D, G, TIER, PAGES, EXACT, OUTL, BITS)                                                      \
    template __global__ void decode_stage1_i8<D, G, TIER, PAGES, EXACT, OUTL, BITS>(                           \
        const float*, const i8*, const u16*, const int*, const int*, const int*, float*, float*, float*, float*, \
        float*, float*, float*, const int*, const u16*, const u16*, const u16*, const int*, i64, int, int, int,   \
        int, int, int, int, int, int, int, int, u32, u32, float, float, float, float, float, const u16*,          \
        const int*, int);
// every tier code (0: no certificate, 1: A, 2: B, 3: AB) of one feature set
#define WC_I8_INST_TIERS(D, G, EXACT, OUTL, BITS)         \
    WC_I8_INST1B(D, G, 0, false, EXACT, OUTL, BITS)       \
    WC_I8_INST1B(D, G, 1, false, EXACT, OUTL, BITS)       \
    WC_I8_INST1B(D, G, 2, false, EXACT, OUTL, BITS)       \
    WC_I8_INST1B(D, G, 3, false, EXACT, OUTL, BITS)
#define WC_I8_INST_GB(D, G, BITS)                 \
    WC_I8_INST_TIERS(D, G, false, false, BITS)    \
    WC_I8_INST_TIERS(D, G, true, false, BITS)     \
    WC_I8_INST_TIERS(D, G, false, true, BITS)     \
    WC_I8_INST_PAGES(D, G, BITS)
#define WC_I8_INST_G(D, G) WC_I8_INST_GB(D, G, 8) WC_I8_INST_GB(D, G, 16)
#define WC_I8_INST_EVERY_G(D)                                                                          \
    WC_I8_INST_G(D, 1) WC_I8_INST_G(D, 2) WC_I8_INST_G(D, 3) WC_I8_INST_G(D, 4) WC_I8_INST_G(D, 5) \
        WC_I8_INST_G(D, 6) WC_I8_INST_G(D, 7) WC_I8_INST_G(D, 8)
// One G of each class ptxas compiles alike (G = 1; 2–4; 5–7; 8: G only sets the query's loads per
// thread and which mma rows are predicated off; registers equal within a class, nvcc 13.0 at every
// tier and mode): CI's compile check (tests/test_cuda_compile.py, where WITCERT_COMPILE_EVERY_G=1
// checks every G) instantiates these, which halves its longest compiles.  The classes are nvcc's
// and NVRTC 13.5's: NVRTC 13.0's ptxas spilled at some G of a class and not at others (Tier A,
// docs/performance.md), which only the every-G check sees.  At 16-bit dither the
// class nearest the register bound, G = 8: its instances sit 24 or more registers below their
// bound of 255 (163–231 at every class, nvcc 13.0), its compiles are the longest, and G = 1 (the
// fewest registers) is compiled at head dims 64 and 256 (WC_I8_INST_D_CLASS), the same warp code.
#define WC_I8_INST_G_CLASSES(D)                                                                                \
    WC_I8_INST_GB(D, 1, 8) WC_I8_INST_GB(D, 4, 8) WC_I8_INST_GB(D, 7, 8) WC_I8_INST_GB(D, 8, 8) WC_I8_INST_GB(D, 8, 16)
// ... and at head dims 64 and 256 one G per dither width (8 bits: G = 8; 16 bits: G = 1): a warp's
// code is the same 64 channels at every head dim (D / 64 warps per CTA), and an instance's registers
// at d = 64 and 256 were within 8 of d = 128's at 8-bit dither (every one at or near its bound of 168,
// none spilling) and 163–230 against 255 at 16 bits, nvcc 13.0: d = 128 carries the G classes, these
// carry what depends on the head dim (the warps' count and shared-memory layout).  Together the
// three files were about 70% of CI's compile time.
#define WC_I8_INST_D_CLASS(D) WC_I8_INST_GB(D, 8, 8) WC_I8_INST_GB(D, 1, 16)
#if defined(WITCERT_ONE_G)  // one G of every head dim (the GPU session's every-G check, a G per compile)
#define WC_I8_INST(D) WC_I8_INST_G(D, WITCERT_ONE_G)
#define WC_I8_INST_OTHER_D(D) WC_I8_INST_G(D, WITCERT_ONE_G)
#elif defined(WITCERT_G_CLASSES)
#define WC_I8_INST(D) WC_I8_INST_G_CLASSES(D)
#define WC_I8_INST_OTHER_D(D) WC_I8_INST_D_CLASS(D)
#else
#define WC_I8_INST_OTHER_D(D) WC_I8_INST_EVERY_G(D)
#define WC_I8_INST(D) WC_I8_INST_EVERY_G(D)
#endif
