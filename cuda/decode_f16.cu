// decode_f16.cu — stage 1 of the split-KV decode over a pool of fp16 rows (Fp16Pool: an fp16 KV
// cache, or what a black-box scheme reconstructs, with a Tier-A witness), d = 128.  Same contract,
// inputs and outputs as decode_stage1<128, G, true> (decode.cu) on such a pool: fp32 dot products of the fp32 query with the stored values
// converted exactly to fp32 (SPEC §6), Tier-A c_t (SPEC §4) plus the evaluation term γ_t (SPEC §4.1),
// λ, cmax and Γ per split.  γ_t = gamma_exact·||q_g||·||x_t|| (Cauchy–Schwarz on Σ_c |q_c||x_c|,
// docs/certificate.md §10.1), ||x_t|| the pool's stored norm (knorm, rounded up when the row was
// written): one 4-byte load per token, where Σ|q||x| per head would double the dot products' work
// and forming the norm here cost an FMA per channel and token (4% of a certified step at G = 7).
//
// decode_stage1_f16<G, CERT>: grid (⌈num_splits / NP⌉, Hkv, B), block NP warps serving the kv
// head's G query heads (CERT: the certified instantiation, tier != 0; the other carries no λ state).
// NP = F16_PIPES splits per CTA (decode_f16_geometry.cuh: the query is loaded once per CTA, and 12
// one-warp pipelines fit an SM where 10 one-warp CTAs did); warp p serves split NP·blockIdx.x + p,
// every channel of every K and V row of it.  Its 32-token tiles go through a two-group cp.async pipeline per side, private to
// the warp:
//   K(i) [+ the witness rows] lands → lanes t and t ± 16 hold token t's two channel halves: the
//        G partial dot products, traded between the two lanes (then lane = token), and c^A from
//        the witness rows
//        → K(i+1) is issued into the freed buffer; the online softmax, c_t and λ (registers only);
//   V(i) lands → lane = 4 of the output channels: o += P·V̂ in token order
//        → V(i+1) is issued.
// So each side's next rows load under the other side's arithmetic.  A tile whose two halves are
// each a run of consecutive slots (pages of 16 or more tokens) is staged from two source bases
// with immediate offsets (f16_stage_side), any other row by row.
// Why (docs/performance.md): the staged-tile INT8 layout on fp16 rows (one warp per side, two CTA
// barriers per tile, the fp16 rows read synchronously from global memory and V̂ re-staged as
// fp32) moved 2.1 TB/s at B = 8, 32k, where SDPA moves the same bytes at 4.3 TB/s.  An fp16 row needs no dequantization: the work is the 2·G·128 FMAs per token, and the
// kernel has to keep bytes in flight and warps issuing.  Two warps sharing one tile's buffers,
// each with half of every row's channels (16 warps per SM instead of 10), measured 0–4% slower:
// fewer bytes in flight per SM, a barrier and a second softmax per tile.
// Sum orders: token order per output channel, band order in c_t; q·k in channel order over each
// half of the channels, the two halves then added; the
// softmax sum per lane in token order, the 32 lanes' sums then by a warp reduction.
// Never reads out of bounds: page ids outside the pool, an inconsistent kv_indptr or a bad
// last-page length poison the split (NaN output, infinite certificate), as in decode_stage1; a
// token past the split's end stages zeros (its row is not read; the witness row of slot 0 is).
#include "common.cuh"
#include "cp_async.cuh"
#include "griddep.cuh"
#include "certificate.cuh"

#include "decode_f16_geometry.cuh"

#define F16_LOG2E WC_LOG2E
#define F16_LN2 WC_LN2

// the eight fp16 values of a 16-byte load, exactly, as fp32
__device__ __forceinline__ void f16_x8(const uint4& w, float (&x)[8]) {
    f16_pair(w.x, x[0], x[1]);
    f16_pair(w.y, x[2], x[3]);
    f16_pair(w.z, x[4], x[5]);
    f16_pair(w.w, x[6], x[7]);
}

// Σ_b a_{g,b} w_{t,b} per head in band order (SPEC §4, Tier A) from a staged witness row of NB
// bands, NB a compile-time constant.  From 8 bands the lane's row is read 16 bytes at a time: the
// rows sit NB·2 bytes apart, so the lanes 0, 4, 8, … of a 2-byte load read one bank (eight-way
// conflicts at 16 bands, sixteen loads a row), where a 16-byte load conflicts two ways.  Each head's
// sum still runs in band order: the same bits.
template <int NB, int G>
__device__ __forceinline__ void f16_tier_a(const u16* __restrict__ wr, const float* __restrict__ a_band,
                                           float (&ca)[G]) {
    if constexpr (NB >= 8) {
#pragma unroll 2
        for (int b8 = 0; b8 < NB; b8 += 8) {
            uint4 w;  // one 16-byte load (the compiler split a uint4 dereference into four)
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                         : "r"(smem_addr(wr + b8)));
            float wv[8];
            f16_x8(w, wv);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float4 a0 = *reinterpret_cast<const float4*>(a_band + g * NB + b8);
                const float4 a1 = *reinterpret_cast<const float4*>(a_band + g * NB + b8 + 4);
                ca[g] += a0.x * wv[0];
                ca[g] += a0.y * wv[1];
                ca[g] += a0.z * wv[2];
                ca[g] += a0.w * wv[3];
                ca[g] += a1.x * wv[4];
                ca[g] += a1.y * wv[5];
                ca[g] += a1.z * wv[6];
                ca[g] += a1.w * wv[7];
            }
        }
    } else {
#pragma unroll
        for (int bb = 0; bb < NB; ++bb) {
            const float wv = f16_to_f32(wr[bb]);
#pragma unroll
            for (int g = 0; g < G; ++g) ca[g] += a_band[g * NB + bb] * wv;
        }
    }
}

// A tile's rows RPI·i + r0 for i = I .. N − 1 (r0 the lane's row within a copy instruction), the
// lane's 16 bytes of each: from `src` + slot·F16_D (row r's slot is lane r's `slot_`; bit RPI·i of
// `vm` says the row is a token, else zeros land) to shared address `dst` + i·STEP.  Templated on i
// so that each destination offset is an immediate of its instruction.
template <int I, int N, int RPI, int STEP>
__device__ __forceinline__ void f16_copy_rows(u32 dst, const u16* src, u32 slot_, u32 vm, int r0) {
    if constexpr (I < N) {
        const u32 s = __shfl_sync(0xffffffffu, slot_, RPI * I + r0);
        cp_async16_zfill_at<I * STEP>(dst, src + (u64)s * F16_D, (vm >> (RPI * I)) & 1u);
        f16_copy_rows<I + 1, N, RPI, STEP>(dst, src, slot_, vm, r0);
    }
}

// The same rows when the tile's two halves are each a run of consecutive slots (rows 0–15 from
// slot a, rows 16–31 from slot b: a page of 16 or more tokens holds each half), every row a token:
// the lane's sources are two bases, `srca` = row r0's and `srcb` = row 16 + r0's, and each copy's
// offsets from them are immediates — no shuffle, multiply or predicate per copy.
template <int I, int N, int RPI, int STEP>
__device__ __forceinline__ void f16_copy_run(u32 dst, const u16* srca, const u16* srcb) {
    static_assert(F16_TILE == 32, "a tile is two halves of 16 rows");
    if constexpr (I < N) {
        constexpr int ROW = RPI * I;  // the lane's row is ROW + r0, and r0 < RPI divides 16
        if constexpr (ROW < 16) {
            cp_async16_at<I * STEP, ROW * F16_D * 2>(dst, srca);
        } else {
            cp_async16_at<I * STEP, (ROW - 16) * F16_D * 2>(dst, srcb);
        }
        f16_copy_run<I + 1, N, RPI, STEP>(dst, srca, srcb);
    }
}

// One side of a tile (f16_copy_rows' arguments; `vm` bit r: row r is a token, warp-uniform):
// through f16_copy_run when the rows allow it.  Why: row by row the staging took ≈ 130 instructions
// per side and tile (a profile), a shuffle, a wide multiply-add and a predicate per copy; a
// run of slots takes ≈ 20 (2770 instead of ≈ 3100 per tile, 4% faster at B = 32, 28/4).
// The same bytes land either way.
template <int RPI, int STEP>
__device__ __forceinline__ void f16_stage_side(u32 dst, const u16* src, u32 slot_, u32 vm, int r0, int lane) {
    constexpr int N = F16_TILE / RPI;
    const u32 a = __shfl_sync(0xffffffffu, slot_, 0), b = __shfl_sync(0xffffffffu, slot_, 16);
    const u32 head = (lane & 16) ? b : a;
    // (slot_ ≥ head: a run never wraps past slot 2^32 − 1, so its rows' addresses are its slots')
    if (__all_sync(0xffffffffu, vm == 0xffffffffu && slot_ >= head && slot_ - head == (u32)(lane & 15))) {
        f16_copy_run<0, N, RPI, STEP>(dst, src + (u64)(a + (u32)r0) * F16_D, src + (u64)(b + (u32)r0) * F16_D);
    } else {
        f16_copy_rows<0, N, RPI, STEP>(dst, src, slot_, vm >> r0, r0);
    }
}

// The softmax sums are kept per lane over its tokens, with one warp sum at the end (five shuffles
// and adds per head fewer per tile than tile-by-tile warp sums; 2–3% faster at G = 7).  q·k runs two
// tokens a lane, half the channels each: each 16-byte broadcast of q serves two rows, half the q
// loads (6% faster at G = 7 than a token a lane over every channel).

template <int G, bool CERT>
__global__ void __launch_bounds__(32 * F16_PIPES, f16_min_blocks(CERT)) decode_stage1_f16(
    const float* __restrict__ q, const u16* __restrict__ vals, const u16* __restrict__ wit,
    const float* __restrict__ knorm, const int* __restrict__ band_ch, const int* __restrict__ kv_indptr,
    const int* __restrict__ kv_indices, const int* __restrict__ kv_last_page_len, float* __restrict__ o_part, float* __restrict__ lse_part,
    float* __restrict__ lam_part, float* __restrict__ cmax_part, float* __restrict__ gam_part, i64 N, int H, int layer,
    int NB, int page_shift, int num_pages, int nnz, int num_splits, int tier, float sm, float gamma_exact) {
    static_assert(F16_PIPES >= 1 && 12 % F16_PIPES == 0, "F16_PIPES: a divisor of 12");
    constexpr int NP = F16_PIPES;  // the CTA's pipelines (splits)
    constexpr int D = F16_D;
    constexpr int CH = D;            // channels of a row per warp
    constexpr int CPL = CH / 32;     // output channels per lane in P·V
    constexpr int KP = F16_KP;       // words per staged K row
    constexpr int VP = CH / 2;       // V is read a row at a time (lane = channels): no padding
    constexpr int NCH = CH / 8;      // 16-byte pieces of a row's CH channels
    constexpr int RPI = 32 / NCH;    // rows per staging instruction
    // q·k steps of two rows unrolled: four measured best at G = 7 (two the same, eight 2–4% slower);
    // 4-token P·V steps unrolled: two
    constexpr int KU = 4;
    constexpr int PU = 2;
    constexpr u32 FULL = 0xffffffffu;
    extern __shared__ __align__(16) unsigned char f16_dyn[];  // f16_smem_bytes, in its order
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int pipe = warp;  // the warp's split in the CTA
    float(*q_s)[D] = reinterpret_cast<float(*)[D]>(f16_dyn);
    unsigned char* wbuf = f16_dyn + G * D * 4 + warp * f16_warp_bytes(G);  // this warp's tiles
    u32(*kt)[KP] = reinterpret_cast<u32(*)[KP]>(wbuf);                            // [32][KP]
    u32(*vt)[VP] = reinterpret_cast<u32(*)[VP]>(wbuf + F16_TILE * KP * 4);        // [32][VP]
    float(*P)[F16_TILE] = reinterpret_cast<float(*)[F16_TILE]>(wbuf + F16_TILE * (KP + VP) * 4);  // [G][32]
    unsigned char* after = f16_dyn + G * D * 4 + NP * f16_warp_bytes(G);
    u16* wt = reinterpret_cast<u16*>(after) + pipe * F16_TILE * NB;                  // [32][NB]
    float* a_band = reinterpret_cast<float*>(after + NP * F16_TILE * NB * 2);        // [G][NB]: sm·||q_g||
    // γ_t per unit of ||x_t|| with the evaluation slack: gamma_exact·||q_g||·C_EVAL_SLACK rounded up
    // (certificate.cuh), so that c_t is one FMA per head and token
    __shared__ float g_norm[G];

    griddep_wait();  // before the first global access (griddep.cuh)
    const int s = blockIdx.x * NP + pipe, h = blockIdx.y, b = blockIdx.z;
    const bool live = s < num_splits;  // (the last CTA's spare pipelines only help load the query)
    const int Hq = H * G;
    const float sm2 = sm * F16_LOG2E;
    // CERT: the certified instantiation (tier != 0); an Fp16Pool has no Tier B: any tier without A
    // gives c_t = +inf
    const bool tier_a = CERT && (tier & 1) != 0;
    constexpr bool certifier = true;

    // the first tile's page ids, guessed, so that their round trip overlaps kv_indptr's (common.cuh)
    const PageGuess guess =
        guess_first_page(kv_indices, b, gridDim.z, nnz, live ? s : 0, num_splits, lane, page_shift);

    // ---- the split's token range, every page-table value checked before use (as decode_stage1)
    const RequestPages rp = request_pages(kv_indptr, kv_last_page_len, b, nnz, page_shift);
    bool poisoned = rp.poisoned;
    int hbad = 0;  // heads with a non-finite logit (bit g): their query, which poisons them alone
    const SplitTokens st_ = split_tokens(rp, live ? s : 0, num_splits, page_shift);
    const i64 ta = st_.ta, tb = live ? st_.tb : st_.ta;  // a spare pipeline: an empty range

    // o channels CPL·lane + j per head; the softmax maximum m (log2 units), warp-uniform,
    // and sum l (per lane), the same in every warp of a split; the certifier's λ
    // running maximum m2 and sum l2 over the lane's tokens, and cmax; the largest stored norm of the
    // lane's tokens (Γ: max_t g·||x_t|| = g·max_t ||x_t||, rounding being monotone)
    float acc[G][CPL], m[G], l[G], m2[G], l2[G], cmx[G], xmx = 0.0f;
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int j = 0; j < CPL; ++j) acc[g][j] = 0.0f;
        m[g] = m2[g] = -INFINITY;
        l[g] = l2[g] = 0.0f;
        cmx[g] = 0.0f;
    }

    const bool run = ta < tb;  // warp-uniform: an empty split goes straight to its outputs
    {
        // lane = token of a tile: its page id and slot (common.cuh: tile_page, tile_slot); every
        // warp of a split reads the same
        auto page_of = [&](i64 t0n) { return tile_page(kv_indices, rp.p0, t0n, tb, lane, page_shift); };
        auto slot_at = [&](i64 t0n, int page) { return tile_slot(t0n, tb, lane, page, page_shift, num_pages, poisoned); };
        const i64 kbase = ((i64)layer * 2 * H + h) * N;  // row of slot 0, K side
        const i64 vbase = kbase + (i64)H * N;             // and V side
        constexpr int c0 = 0;                             // the warp's first channel
        // a tile's rows of one side, the warp's CH channels of each: NCH lanes copy one row's part
        // (16 bytes each, the row's slot by shuffle), RPI rows per instruction, coalesced; rows of
        // tokens past the end land as zeros (`vmask`: bit r = row r is a token).  The lane's source
        // is its side's row 0 plus slot·D (one wide multiply-add), its destination one shared base
        // plus an immediate: a profile found ≈ 7 address instructions per copy and the 16
        // destinations of each side hoisted into registers (some spilled to local memory).
        const int rl = lane / NCH, cl = lane % NCH;  // the lane's row within an instruction, its piece
        const u16* ksrc = vals + kbase * D + c0 + 8 * cl;
        const u16* vsrc = vals + vbase * D + c0 + 8 * cl;
        const u32 kdst = smem_addr(&kt[rl][4 * cl]);
        const u32 vdst = smem_addr(&vt[rl][4 * cl]);
        // the K side (one commit group), and for the certifier with a Tier-A certificate each
        // lane's own witness row (2·NB bytes, aligned to its size: NB divides 64)
        auto stage_k = [&](u32 slot_, u32 vmask) {
            f16_stage_side<RPI, RPI * KP * 4>(kdst, ksrc, slot_, vmask, rl, lane);
            if (certifier && tier_a) {
                const u16* wr = wit + (kbase + slot_) * NB;
                u16* wd = wt + lane * NB;
                if (NB >= 8) {
                    for (int j = 0; j < NB; j += 8) cp_async16(wd + j, wr + j);
                } else if (NB == 4) {
                    cp_async8(wd, wr);
                } else if (NB == 2) {
                    cp_async4(wd, wr);
                } else if (NB == 1) {
                    wd[0] = wr[0];
                }
            }
            cp_async_commit();
        };
        auto stage_v = [&](u32 slot_, u32 vmask) {
            f16_stage_side<RPI, RPI * VP * 4>(vdst, vsrc, slot_, vmask, rl, lane);
            cp_async_commit();
        };

        // the stored norm of the lane's token (a tile ahead, in a register: its load's latency hides
        // under a tile; an invalid row reads slot 0's, unused)
        const float* kn = knorm + ((i64)layer * H + h) * N;
        float xn = 0.0f;
        int pg = 0;
        i64 sl = -1;
        if (run) {
            pg = tile_page_or(kv_indices, rp.p0, ta, tb, lane, page_shift, guess);
            sl = slot_at(ta, pg);
            const u32 vm = __ballot_sync(FULL, sl >= 0);
            stage_k(sl < 0 ? 0u : (u32)sl, vm);  // the first tile loads during the set-up below
            stage_v(sl < 0 ? 0u : (u32)sl, vm);
            if (CERT && tier_a) xn = kn[sl < 0 ? 0 : sl];
            pg = page_of(ta + F16_TILE);
        }

        // ---- per query head, by the whole CTA: the query, and the Tier-A band norms
        for (int idx = threadIdx.x; idx < G * D / 4; idx += 32 * NP)
            reinterpret_cast<float4*>(&q_s[0][0])[idx] =
                reinterpret_cast<const float4*>(q + ((i64)b * Hq + (i64)h * G) * D)[idx];
        __syncthreads();
        if (CERT) {  // the coefficients on the normalized query (SPEC §4.2)
            if (tier_a) {
                const int per = D / NB;
                const SmSplit smx = sm_split(sm);
                for (int idx = threadIdx.x; idx < G * NB; idx += 32 * NP) {
                    const int g = idx / NB, bb = idx % NB;
                    a_band[g * NB + bb] = band_coefficient_of(q_s[g], band_ch, bb, per, smx);
                }
            }
            for (int g = warp; g < G; g += NP) {
                const float gq = warp_norm_coefficient(q_s[g], D, gamma_exact, lane);
                if (lane == 0) g_norm[g] = __fmul_ru(gq, (float)WC_C_EVAL_SLACK);
            }
            __syncthreads();
        }

        for (i64 t0 = ta; t0 < tb; t0 += F16_TILE) {  // (no iteration when !run)
            const bool valid = sl >= 0;
            const bool more = t0 + F16_TILE < tb;  // warp-uniform
            // the next tile's slots (its page ids were read a tile ahead), and the page ids after it
            const i64 sln = slot_at(t0 + F16_TILE, pg);
            pg = page_of(t0 + 2 * F16_TILE);
            const u32 slotn = sln < 0 ? 0u : (u32)sln;
            const u32 vmn = __ballot_sync(FULL, sln >= 0);
            const float xnn = CERT && tier_a && more ? kn[slotn] : 0.0f;

            // ---- K(i): lane = token, the G dot products over the warp's channels in channel order
            cp_async_wait_group<1>();  // K(i) and its witness rows; V(i) may still be in flight
            __syncwarp();              // the lanes that copied this lane's row
            float dot[G];
            // two tokens a lane, half the channels each (lanes 0–15: the first half of tokens
            // lane and lane + 16, lanes 16–31 the second half of the same two): a q broadcast
            // serves two rows; then each lane trades the partial sum its partner needs
            const int tA = lane & 15, hh = lane >> 4;
            float dA[G], dB[G];
#pragma unroll
            for (int g = 0; g < G; ++g) dA[g] = dB[g] = 0.0f;
            const u32* ra = &kt[tA][hh * (CH / 4)];
            const u32* rb = &kt[tA + 16][hh * (CH / 4)];
#pragma unroll (KU)
            for (int k = 0; k < CH / 16; ++k) {
                const uint4 wa = *reinterpret_cast<const uint4*>(ra + 4 * k);
                const uint4 wb = *reinterpret_cast<const uint4*>(rb + 4 * k);
                float xa[8], xb[8];
                f16_x8(wa, xa);
                f16_x8(wb, xb);
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const float* qg = &q_s[g][c0 + hh * (CH / 2) + 8 * k];
                    dA[g] = dot8(dA[g], qg, xa);
                    dB[g] = dot8(dB[g], qg, xb);
                }
            }
            // lane t < 16 keeps its first half of token t and receives the second (lane t + 16's
            // dA); lane t ≥ 16 keeps its second half of token t and receives the first (lane
            // t − 16's dB): dot = half 0 + half 1 in both (fp32 addition commutes exactly)
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float give = hh ? dA[g] : dB[g], keep = hh ? dB[g] : dA[g];
                dot[g] = keep + __shfl_xor_sync(FULL, give, 16);
            }
            // c_t per head (the certifier): Σ_b a_b w_{t,b} in band order from the staged witness row,
            // plus γ_t from the token's stored norm
            float ct[G];
#pragma unroll
            for (int g = 0; g < G; ++g) ct[g] = INFINITY;
            if (certifier && tier_a) {
                float ca[G];
#pragma unroll
                for (int g = 0; g < G; ++g) ca[g] = 0.0f;
                const u16* wr = wt + lane * NB;
                switch (NB) {
                    case 64: f16_tier_a<64, G>(wr, a_band, ca); break;
                    case 32: f16_tier_a<32, G>(wr, a_band, ca); break;
                    case 16: f16_tier_a<16, G>(wr, a_band, ca); break;
                    case 8: f16_tier_a<8, G>(wr, a_band, ca); break;
                    case 4: f16_tier_a<4, G>(wr, a_band, ca); break;
                    case 2: f16_tier_a<2, G>(wr, a_band, ca); break;
                    default: f16_tier_a<1, G>(wr, a_band, ca); break;
                }
#pragma unroll
                for (int g = 0; g < G; ++g) ct[g] = ca[g];
            }
            // K(i+1) loads from here, under this tile's c_t, softmax, λ and P·V: the K buffer and the
            // witness rows have had their last reads (the dot products, c^A), and the work after
            // them needs only registers and P, so it no longer delays the next tile's request
            __syncwarp();  // every lane is done with this tile's K rows and witness rows
            if (more) {
                stage_k(slotn, vmn);
            } else {
                cp_async_commit();  // an empty group keeps the wait counts uniform
            }
            if (CERT && certifier) {  // c_t = (c^A + γ_t)·slack as ca·slack + (g·slack)·||x_t||
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const float c1 = __fmaf_rn(ct[g], (float)WC_C_EVAL_SLACK, g_norm[g] * xn);
                    ct[g] = c1 <= WC_F32_MAX ? c1 : INFINITY;
                }
                if (valid) xmx = fmaxf(xmx, xn);
            }
            // ---- the tile's softmax (lane = token; the same in every warp of a split) and the certifier's λ
            float lt[G], scg[G], p[G], ps[G];
            tile_logits<G>(dot, sm2, valid, lt, hbad);  // ℓ̃ in log2 units
            softmax_tile_steps<G>(lt, valid, m, scg, p);
#pragma unroll
            for (int g = 0; g < G; ++g) ps[g] = p[g];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                l[g] = l[g] * scg[g] + ps[g];
#pragma unroll
                for (int j = 0; j < CPL; ++j) acc[g][j] *= scg[g];  // o's rescale, before this tile's P·V
                P[g][lane] = p[g];
                if (CERT && certifier && tier && valid) lambda_add(ct[g], lt[g], m2[g], l2[g], cmx[g]);
            }

            // ---- V(i): lane = output channels c0 + CPL·lane + j, token order
            cp_async_wait_group<1>();  // V(i); K(i+1) may still be in flight
            __syncwarp();              // V(i)'s rows and P
#pragma unroll (PU)
            for (int t = 0; t < F16_TILE; t += 4) {
                float v[4][CPL];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const u32* vr = &vt[t + i][lane * CPL / 2];
                    if constexpr (CPL == 4) {
                        const uint2 w = *reinterpret_cast<const uint2*>(vr);
                        f16_pair(w.x, v[i][0], v[i][1]);
                        f16_pair(w.y, v[i][2], v[i][3]);
                    } else {
                        f16_pair(vr[0], v[i][0], v[i][1]);
                    }
                }
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    const float4 pp = *reinterpret_cast<const float4*>(&P[g][t]);
#pragma unroll
                    for (int j = 0; j < CPL; ++j) {
                        acc[g][j] += pp.x * v[0][j];
                        acc[g][j] += pp.y * v[1][j];
                        acc[g][j] += pp.z * v[2][j];
                        acc[g][j] += pp.w * v[3][j];
                    }
                }
            }
            __syncwarp();  // every lane is done with V(i) and P
            if (more) {
                stage_v(slotn, vmn);  // V(i+1) loads under the next tile's dot products
            } else {
                cp_async_commit();
            }
            sl = sln;
            xn = xnn;
        }
        cp_async_wait_all();  // nothing in flight at exit (the trailing groups are empty)
    }
    if (!live) return;  // after the CTA's barriers

    // ---- outputs: every warp of a split holds the same m, l and poison flag (the same logits, the
    // same page ids); each writes its channels of o, the certifier the split's statistics
    poisoned = __any_sync(FULL, poisoned);
    hbad = __reduce_or_sync(FULL, hbad);
    // Every head's warp reductions run interleaved (warp_sums, warp_maxes), and lane g stores head g's
    // statistics from selected values through one copy of the store code: the epilogue runs once per
    // split, so at B = 1 its latency chains and its code (fetched once per SM) are a visible share of
    // the step (a profile at B = 1, 4k: most of the certificate's extra stall samples were here)
    float L[G];
#pragma unroll
    for (int g = 0; g < G; ++g) L[g] = l[g];
    warp_sums<G>(L);
    int obad = 0;  // heads with a non-finite o entry on this lane (bit g)
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const i64 o = ((i64)b * Hq + h * G + g) * num_splits + s;
        const bool dead = poisoned || ((hbad >> g) & 1);
        float r[CPL];
#pragma unroll
        for (int j = 0; j < CPL; ++j) {
            r[j] = dead ? NAN : (L[g] == 0.0f ? 0.0f : acc[g][j] / L[g]);
            if (!dead && !is_finite32(r[j])) obad |= 1 << g;
        }
        float* dst = &o_part[o * D + CPL * lane];
        if constexpr (CPL == 4) {
            *reinterpret_cast<float4*>(dst) = make_float4(r[0], r[1], r[2], r[3]);
        } else {
            *reinterpret_cast<float2*>(dst) = make_float2(r[0], r[1]);
        }
    }
    // (lanes g < G store head g's statistics)
    const int gl = lane < G ? lane : 0;
    const i64 ol = ((i64)b * Hq + h * G + gl) * num_splits + s;
    const bool deadl = poisoned || ((hbad >> gl) & 1);
    const float Ll = select_of(L, gl), ml = select_of(m, gl);
    if (CERT && certifier) {
        // λ from the lanes' sums (log2 units, then natural log); a head whose o is not finite
        // (a non-finite V row it attends, SPEC §3.6) gets an infinite certificate
        obad = __reduce_or_sync(FULL, obad);
        float M2[G], L2[G], CM[G];
#pragma unroll
        for (int g = 0; g < G; ++g) M2[g] = m2[g], CM[g] = cmx[g];
        warp_maxes<G>(M2);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const bool linf = M2[g] == INFINITY || ((obad >> g) & 1);
            L2[g] = linf || m2[g] == -INFINITY ? 0.0f : l2[g] * exp2f(m2[g] - M2[g]);
        }
        warp_sums<G>(L2);
        warp_maxes<G>(CM);
        const float XM = warp_max(xmx);  // (0·inf, a zero query over a non-finite row: no term)
        const float M2l = select_of(M2, gl), L2l = select_of(L2, gl), gn = g_norm[gl];
        const bool linf = M2l == INFINITY || ((obad >> gl) & 1);
        const float CMl = linf ? INFINITY : select_of(CM, gl);
        const float GM = gn > 0.0f && XM > 0.0f ? gn * XM : 0.0f;
        if (lane < G)
            store_split_stats(ol, deadl, Ll, ml * F16_LN2 + logf(Ll),
                              linf ? INFINITY : (L2l > 0.0f ? M2l * F16_LN2 + logf(L2l) : -INFINITY), CMl, GM,
                              lse_part, lam_part, cmax_part, gam_part);
    } else if (!CERT && lane < G) {  // no certificate: λ = −inf, cmax 0 (as tier 0)
        store_split_stats(ol, deadl, Ll, ml * F16_LN2 + logf(Ll), -INFINITY, 0.0f, 0.0f, lse_part, lam_part,
                          cmax_part, gam_part);
    }
}

// An explicit instantiation (the offline compile checks in tests/test_cuda_compile.py).
#define WC_F16_INST(G, C)                                                                                      \
    template __global__ void decode_stage1_f16<G, C>(const float*, const u16*, const u16*, const float*,        \
                                                     const int*, const int*, const int*, const int*, float*,     \
                                                     float*, float*, float*, float*, i64, int, int, int, int,     \
                                                     int, int, int, int, float, float);
#ifdef WITCERT_INSTANTIATE_ALL
#define WC_F16_INST_C(G) WC_F16_INST(G, false) WC_F16_INST(G, true)
WC_F16_INST_C(1)
WC_F16_INST_C(2)
WC_F16_INST_C(3)
WC_F16_INST_C(4)
WC_F16_INST_C(5)
WC_F16_INST_C(6)
WC_F16_INST_C(7)
WC_F16_INST_C(8)
#endif
