// decode_v2.cu — stage 1 of the split-KV decode with staged tiles (issue 5, v2): the common case
// of the INT8 pool (d = 128, 8-bit dither, no exact tier, no per-page output).  Same contract,
// inputs and outputs as decode_stage1 in decode.cu (SPEC §4–6; fp32 dequant x̂ = s·(k − ξ) with
// the exact stream), which serves every other case.
//
// decode_stage1_v2<G, FP16>: grid (num_splits, Hkv, B), block 128.  Per tile of 32 tokens:
//   A. warp = (side, half row), lane = token: each thread dequantizes 64 channels of one (token,
//      side) — 4 Philox calls, 4 instructions per element (v2_dequant16) — into the shared fp32
//      tiles K̂[32][132], V̂[32][132] (padded: a quarter-warp's 16-byte stores and phase B's row
//      reads hit 8 different rows, so distinct banks); K's scales and witness are staged for the
//      certificate; warp 0 reads the next tile's page ids meanwhile;
//   B. one warp per query head (two when G > 4), one lane per token: the dot product from shared
//      memory, c_t, and the tile's online-softmax and certificate updates by warp reductions, so
//      each (token, head) is computed once, not by 16 lanes as in decode_stage1;
//   C. thread c accumulates channel c of o for every head from V̂ and the tile's probabilities.
// Why: decode_stage1 spends ≈ 320 warp-instructions per KV token (bench/NOTES.md profile), most of
// them per-lane repetition of per-token work; this layout does each piece of work once.
// Shared memory: static, under 48 KB at G = 8 (49,088 bytes).  Never reads out of bounds: page ids
// outside the pool, an inconsistent kv_indptr or a bad last-page length poison the split (NaN
// output, infinite certificate), as in decode_stage1; a token past the split's end reads slot 0.
#include "common.cuh"
#include "philox.cuh"

#define V2_THREADS 128
#define V2_TILE 32
#define V2_D 128
#define V2_PAD (V2_D + 4)
#define V2_LOG2E 1.4426950408889634f
#define V2_LN2 0.6931471805599453f

// x̂ = fl(s·(k − ξ)) for the 16 codes of one Philox call (4 code words, 4 dither words),
// bit-identical to the reference, whose k − ξ is exact in fp32:
//   F = float with bits 0x4B00·(k+128)·(255−j) = 2^23 + 256(k + 128) + 255 − j   (one PRMT + one LOP3)
//   m = F − (2^23 + 2^15) = 256k + 255 − j                                    (exact: integers < 2^24)
//   x̂ = fma(s/256, m, −255s/512)  = s(2m − 255)/512 = s(k − (2j − 255)/512)  (one rounding)
// s/256 and 255s/512 are exact for an fp16 scale s > 0 (11 + 8 significant bits, no underflow):
// four instructions per element instead of eight.  A zero or non-finite s (an empty or poisoned
// group, or a token past the split's end) takes k − ξ = fma(m, 1/256, −255/512) exactly, then s·(k − ξ):
// the reference's own zeros, infinities and NaNs.
__device__ __forceinline__ void v2_dequant16(const u32 (&cw)[4], const u32 (&xw)[4], float sb, float* dst) {
    float m[16];
#pragma unroll
    for (int e = 0; e < 16; ++e) {
        // bytes [j_e, k_e, ·, ·] of (xw, cw), then (b & 0xFFFF) ^ 0x4B0080FF: ~j, k ^ 0x80, exponent
        const u32 p = __byte_perm(cw[e / 4], xw[e / 4], (u32)(4 + (e & 3)) | ((u32)(e & 3) << 4));
        u32 f;  // one LOP3 (LUT 0x6A = (a & b) ^ c); the C++ expression compiles to two
        asm("lop3.b32 %0, %1, 0x0000FFFF, 0x4B0080FF, 0x6A;" : "=r"(f) : "r"(p));
        m[e] = __fadd_rn(__uint_as_float(f), -8421376.0f);
    }
    float x[16];
    if (sb > 0.0f && sb <= WC_F32_MAX) {
        const float sd = __fmul_rn(sb, 0.00390625f), sn = __fmul_rn(sb, -0.498046875f);
#pragma unroll
        for (int e = 0; e < 16; ++e) x[e] = __fmaf_rn(sd, m[e], sn);
    } else {
#pragma unroll
        for (int e = 0; e < 16; ++e) x[e] = __fmul_rn(sb, __fmaf_rn(m[e], 0.00390625f, -0.498046875f));
    }
#pragma unroll
    for (int e = 0; e < 16; e += 4)
        *reinterpret_cast<float4*>(dst + e) = make_float4(x[e], x[e + 1], x[e + 2], x[e + 3]);
}

// Tier B's per-(token, head) sums u² = Σ_g s_g² bq2_g and β = Σ_g s_g bq1_g (SPEC §5), NGC groups
template <int NGC>
__device__ __forceinline__ float2 v2_tier_b_sums(const float* s1, const float* s2, const float* b1, const float* b2) {
    float u2 = 0.0f, be = 0.0f;
#pragma unroll
    for (int gr = 0; gr < NGC; ++gr) {
        u2 += s2[gr] * b2[gr];
        be += s1[gr] * b1[gr];
    }
    return make_float2(u2, be);
}

__device__ __forceinline__ float v2_warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float v2_warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// CTAs per SM the register budget is set for: 4 at every G (≤ 128 registers; the shared tiles,
// ≤ 48 KB, allow 4).  Since v2.3 stores each dequantized chunk as it is formed, ptxas needs ≈ 115
// registers even at G = 8, which used to take 2–3 CTAs per SM.
__host__ __device__ constexpr int v2_min_blocks(int, bool) { return 4; }

// FP16: the pool stores fp16 rows (Fp16Pool: a scheme's x̂ or the exact values, Tier A only); phase
// A converts them to fp32 instead of dequantizing (`codes` then points at the fp16 values).
template <int G, bool FP16>
__global__ void __launch_bounds__(V2_THREADS, v2_min_blocks(G, FP16)) decode_stage1_v2(
    const float* __restrict__ q, const i8* __restrict__ codes, const u16* __restrict__ scales,
    const u16* __restrict__ outl, const u16* __restrict__ wit, const int* __restrict__ bypass_ch,
    const int* __restrict__ band_ch, const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
    const int* __restrict__ kv_last_page_len, float* __restrict__ o_part, float* __restrict__ lse_part,
    float* __restrict__ lam_part, float* __restrict__ cmax_part, i64 N, int H, int layer, int head_base, int gs_shift,
    int NP2, int NB, int page_shift, int num_pages, int nnz, int num_splits, int tier, u32 k0, u32 k1, float sm,
    float log_budget, float beta_steps) {
    constexpr int D = V2_D;
    constexpr int NH = (G + 3) / 4;  // heads per warp in phase B
    __shared__ __align__(16) float q_s[G][D];
    __shared__ __align__(16) float bq2[G][8];  // 2 (sm²/12) Q2_g log(2S/δ_loc) per scale group (gs >= 16)
    __shared__ __align__(16) float bq1[G][8];  // sm Q1_g (2^-(m+1) + 2^-15)
    __shared__ float a_band[G][64];
    __shared__ short oidx[D];
    __shared__ __align__(16) float Ks[V2_TILE][V2_PAD];
    __shared__ __align__(16) float Vs[V2_TILE][V2_PAD];
    // per token, K's scales s_g [0, 8) and s_g² [8, 16); rows of 20: lane = token reads 16 bytes
    // without bank conflicts
    __shared__ __align__(16) float sck[V2_TILE][20];
    __shared__ u16 wit_s[V2_TILE][66];
    __shared__ __align__(16) float P[G][V2_TILE];
    __shared__ float st[G][6];  // per head: m, l, m2, l2, cmax (log2 units), this tile's rescale
    __shared__ int valid_s[V2_TILE];
    __shared__ u32 slot_s[V2_TILE];  // the tile's pool slots (below 2^32, SPEC §2), written a tile ahead

    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int Hq = H * G;
    const float sm2 = sm * V2_LOG2E;
    const int NG = D >> gs_shift, gs = 1 << gs_shift;  // scale groups (a power of two, >= 16)

    // ---- the split's token range, every page-table value checked before use (as decode_stage1)
    const RequestPages rp = request_pages(kv_indptr, kv_last_page_len, b, nnz, page_shift);
    const int p0 = rp.p0, npages = rp.npages;
    const i64 S = rp.S;
    bool poisoned = rp.poisoned;
    const int pps = (npages + num_splits - 1) / num_splits;
    const int pa = min(s * pps, npages), pb = min(pa + pps, npages);
    const i64 ta = (i64)pa << page_shift;
    const i64 tb = poisoned ? ta : min((i64)pb << page_shift, S);

    // ---- per query head: the query, Tier-B group coefficients, Tier-A band norms
    for (int idx = tid; idx < G * D; idx += V2_THREADS)
        q_s[idx / D][idx % D] = q[((i64)b * Hq + h * G + idx / D) * D + idx % D];
    for (int c = tid; c < D; c += V2_THREADS) oidx[c] = -1;
    __syncthreads();
    for (int j = tid; j < NP2; j += V2_THREADS) oidx[bypass_ch[h * NP2 + j]] = (short)j;
    __syncthreads();
    const float log_term = log_budget + logf((float)max(S, (i64)1));
    if (tier & 2) {
        for (int idx = tid; idx < G * NG; idx += V2_THREADS) {
            const int g = idx / NG, ch0 = (idx % NG) * gs;
            float q2 = 0.0f, q1 = 0.0f;
            for (int i = 0; i < gs; ++i)
                if (oidx[ch0 + i] < 0) {
                    q2 += q_s[g][ch0 + i] * q_s[g][ch0 + i];
                    q1 += fabsf(q_s[g][ch0 + i]);
                }
            bq2[g][idx % NG] = 2.0f * (sm * sm / 12.0f) * q2 * log_term;
            bq1[g][idx % NG] = sm * q1 * beta_steps;
        }
    }
    if (tier & 1) {
        const int per = D / NB;
        for (int idx = tid; idx < G * NB; idx += V2_THREADS) {
            const int g = idx / NB, bb = idx % NB;
            float acc = 0.0f;
            for (int j = 0; j < per; ++j) {
                const float v = q_s[g][band_ch[bb * per + j]];
                acc += v * v;
            }
            a_band[g][bb] = sm * sqrtf(acc);
        }
    }
    // this thread's share of phase A: token `lane`, one side, the 4 chunks (16 channels, one
    // Philox call each) from c0.  Why a row per thread: one address, four 16-byte loads issued
    // together (v2.3a/b's chunk-per-lane items, coalesced but with an address each, had ptxas issue
    // each item's load just before its use: long-scoreboard stalls ate the saved instructions).
    const int side = warp >> 1, c0 = (warp & 1) * 64;
    bool byp = false;  // an outlier channel in this thread's 64 (SPEC §3 bypass)
    for (int i = 0; i < 64; ++i) byp |= oidx[c0 + i] >= 0;
    // warp 0 stages the slots of a tile's tokens (lane = token) from their page ids, which it reads
    // a tile ahead; a page id outside the pool poisons the split and reads nothing
    auto stage_slot = [&](i64 t0n, int page) {
        const i64 tok = t0n + lane;
        const i64 sl = tok < tb ? slot_of(page, tok, page_shift, num_pages) : (i64)-1;
        if (tok < tb && sl < 0) poisoned = true;
        slot_s[lane] = sl < 0 ? 0u : (u32)sl;
        valid_s[lane] = sl >= 0;
    };
    auto page_of = [&](i64 t0n) {
        const i64 tok = t0n + lane;
        return tok < tb ? kv_indices[p0 + (int)(tok >> page_shift)] : 0;
    };
    if (warp == 0) stage_slot(ta, page_of(ta));
    __syncthreads();

    const i64 row_base = (((i64)layer * 2 + side) * H + h) * N;
    const u32 ctr2 = dither_ctr2(layer, h + head_base);
    float acc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) acc[g] = 0.0f;
    // head statistics of the head's warp: the softmax maximum m is warp-uniform (phase C scales by
    // it); the sums l, the certificate's own running maximum m2 and sum l2 (SPEC §6) and cmax are
    // per lane (its tokens) and reduced once after the last tile.  An infinite c_t makes cmax
    // infinite, which is how the end tells λ = +inf ("no guarantee").
    float m[NH], l[NH], m2[NH], l2[NH], cmx[NH];
#pragma unroll
    for (int j = 0; j < NH; ++j) {
        m[j] = -INFINITY;
        l[j] = 0.0f;
        m2[j] = -INFINITY;
        l2[j] = 0.0f;
        cmx[j] = 0.0f;
    }

    for (i64 t0 = ta; t0 < tb; t0 += V2_TILE) {
        // ---- A: dequantize this thread's 64 channels into the shared tiles.  A token past the
        // split's end reads slot 0 (inside the pool whenever a tile runs) and is zeroed by a zero
        // scale, so loads and arithmetic need no branch.
        const bool valid = valid_s[lane] != 0;
        const u32 slot = slot_s[lane];
        const i64 row = row_base + slot;
        // page ids of the next tile (warp 0), in flight while this one is dequantized
        const int pg_next = warp == 0 ? page_of(t0 + V2_TILE) : 0;
        float* dst = side == 0 ? &Ks[lane][c0] : &Vs[lane][c0];
        if (FP16) {
            const uint4* src = reinterpret_cast<const uint4*>(reinterpret_cast<const u16*>(codes) + row * D + c0);
            uint4 raw[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) raw[k] = src[k];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const u32 wd[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
                float x[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) x[e] = valid ? f16_to_f32((u16)(wd[e / 2] >> (16 * (e % 2)))) : 0.0f;
                *reinterpret_cast<float4*>(dst + 8 * k) = make_float4(x[0], x[1], x[2], x[3]);
                *reinterpret_cast<float4*>(dst + 8 * k + 4) = make_float4(x[4], x[5], x[6], x[7]);
            }
            if (side == 0 && (tier & 1))
                for (int bb = c0 >> 6; bb < NB; bb += 2) wit_s[lane][bb] = wit[row * NB + bb];
        } else {
            int4 raw[4];
            u16 sr[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                raw[k] = reinterpret_cast<const int4*>(codes + row * D + c0)[k];
                sr[k] = scales[row * NG + ((c0 + 16 * k) >> gs_shift)];
            }
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const int ch = c0 + 16 * k;  // one 8-bit Philox call feeds these 16 channels (SPEC §2)
                const u32x4 w = philox10(slot, dither_ctr1(side, ch >> 4), ctr2, 0u, k0, k1);
                const float sb = valid ? f16_to_f32(sr[k]) : 0.0f;
                const u32 cw[4] = {(u32)raw[k].x, (u32)raw[k].y, (u32)raw[k].z, (u32)raw[k].w};
                const u32 xw[4] = {w.x, w.y, w.z, w.w};
                v2_dequant16(cw, xw, sb, dst + 16 * k);
                if (byp && valid)  // outlier channels carry their exact fp16 values (SPEC §3)
                    for (int e = 0; e < 16; ++e) {
                        const int o = oidx[ch + e];
                        if (o >= 0) dst[16 * k + e] = f16_to_f32(outl[row * NP2 + o]);
                    }
                if (side == 0 && (tier & 2) && (ch & ((1 << gs_shift) - 1)) == 0) {  // K's scales, for c_t
                    sck[lane][ch >> gs_shift] = sb;
                    sck[lane][8 + (ch >> gs_shift)] = __fmul_rn(sb, sb);
                }
            }
            if (side == 0 && (tier & 1))
                for (int bb = c0 >> 6; bb < NB; bb += 2) wit_s[lane][bb] = wit[row * NB + bb];
        }
        __syncthreads();

        // ---- B: lane = token, warp = head: logits, c_t, and the tile's softmax / λ updates
#pragma unroll
        for (int j = 0; j < NH; ++j) {
            const int g = warp + 4 * j;
            if (g < G) {  // warp-uniform
            const bool v = valid_s[lane] != 0;
            const float* kr = &Ks[lane][0];
            const float4* qr = reinterpret_cast<const float4*>(&q_s[g][0]);
            // channel order, as the CPU twin: large logits amplify a different summation order's
            // rounding past the SPEC §9 rule (four partial sums failed it in run 19, and gained nothing)
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < D / 4; ++c) {
                const float4 kk = *reinterpret_cast<const float4*>(kr + 4 * c), qq = qr[c];
                dot += qq.x * kk.x;
                dot += qq.y * kk.y;
                dot += qq.z * kk.z;
                dot += qq.w * kk.w;
            }
            const float lt = sm2 * dot;  // ℓ̃ in log2 units
            if (v && !is_finite32(lt)) poisoned = true;
            float c = INFINITY;
            if (tier & 1) {
                float ca = 0.0f;
                for (int bb = 0; bb < NB; ++bb) ca += a_band[g][bb] * f16_to_f32(wit_s[lane][bb]);
                const float c1 = ca * (float)WC_C_EVAL_SLACK;
                c = c1 <= WC_F32_MAX ? c1 : INFINITY;
            }
            if (tier & 2) {
                // the group count is a power of two: each count's sums unrolled (a warp-uniform switch)
                float2 ub;
                switch (NG) {
                    case 8: ub = v2_tier_b_sums<8>(sck[lane], sck[lane] + 8, bq1[g], bq2[g]); break;
                    case 4: ub = v2_tier_b_sums<4>(sck[lane], sck[lane] + 8, bq1[g], bq2[g]); break;
                    case 2: ub = v2_tier_b_sums<2>(sck[lane], sck[lane] + 8, bq1[g], bq2[g]); break;
                    default: ub = v2_tier_b_sums<1>(sck[lane], sck[lane] + 8, bq1[g], bq2[g]); break;
                }
                const float u2 = ub.x, be = ub.y;
                // sqrt as u2·rsqrt(u2): within a few ulps, far inside C_EVAL_SLACK (as extend_tc)
                float c2 = ((u2 > 0.0f ? u2 * rsqrtf(u2) : 0.0f) + be) * (float)WC_C_EVAL_SLACK;
                c2 = c2 <= WC_F32_MAX ? c2 : INFINITY;
                c = fminf(c, c2);
            }
            const float mx = v2_warp_max(v ? lt : -INFINITY);
            const float mn = fmaxf(m[j], mx);
            float sc = 1.0f, p = 0.0f;
            if (mn != -INFINITY) {  // else no valid token yet: nothing to rescale or add
                sc = exp2f(m[j] - mn);
                p = v ? exp2f(lt - mn) : 0.0f;
            }
            l[j] = l[j] * sc + p;
            m[j] = mn;
            P[g][lane] = p;
            if (lane == 0) st[g][5] = sc;
            if (tier && v) {
                cmx[j] = fmaxf(cmx[j], c);  // infinite c_t: λ = +inf at the end ("no guarantee")
                if (c != INFINITY) {
                    // λ's sum under its own running maximum, one exponential per token: 2^{-|x − m2|}
                    // scales either the old sum (a new maximum) or the new term
                    const float x = lt + c * V2_LOG2E;
                    const bool up = x > m2[j];
                    const float e = exp2f(up ? m2[j] - x : x - m2[j]);
                    l2[j] = up ? l2[j] * e + 1.0f : l2[j] + e;
                    m2[j] = up ? x : m2[j];
                }
            }
            }
        }
        __syncthreads();

        // ---- C: channel `tid` of every head's output; warp 0 stages the next tile's slots
        if (warp == 0) stage_slot(t0 + V2_TILE, pg_next);
#pragma unroll
        for (int g = 0; g < G; ++g) acc[g] *= st[g][5];
#pragma unroll 2
        for (int t = 0; t < V2_TILE; t += 4) {
            const float v0 = Vs[t][tid], v1 = Vs[t + 1][tid], v2 = Vs[t + 2][tid], v3 = Vs[t + 3][tid];
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const float4 pp = *reinterpret_cast<const float4*>(&P[g][t]);
                acc[g] += pp.x * v0;
                acc[g] += pp.y * v1;
                acc[g] += pp.z * v2;
                acc[g] += pp.w * v3;
            }
        }
        __syncthreads();
    }

    // ---- outputs: the heads' statistics reduced over the lanes and passed through shared memory,
    // then o, lse, λ, cmax
#pragma unroll
    for (int j = 0; j < NH; ++j) {
        const int g = warp + 4 * j;
        if (g < G) {  // warp-uniform
            const float L = v2_warp_sum(l[j]);
            const float M2 = v2_warp_max(m2[j]);
            const float L2 = v2_warp_sum(m2[j] == -INFINITY ? 0.0f : l2[j] * exp2f(m2[j] - M2));
            const float CM = v2_warp_max(cmx[j]);
            if (lane == 0) {
                st[g][0] = m[j];
                st[g][1] = L;
                st[g][2] = CM == INFINITY ? INFINITY : M2;
                st[g][3] = L2;
                st[g][4] = CM;
            }
        }
    }
    poisoned = __syncthreads_or(poisoned);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const i64 o = ((i64)b * Hq + h * G + g) * num_splits + s;
        const float L = st[g][1];
        o_part[o * D + tid] = poisoned ? NAN : (L == 0.0f ? 0.0f : acc[g] / L);
    }
    if (tid < G) {
        const int g = tid;
        const i64 o = ((i64)b * Hq + h * G + g) * num_splits + s;
        const float M = st[g][0], L = st[g][1], M2 = st[g][2], L2 = st[g][3];
        // back to natural-log units: the maxima were kept in log2 units
        store_split_stats(o, poisoned, L, M * V2_LN2 + logf(L),
                          M2 == INFINITY ? INFINITY : (L2 > 0.0f ? M2 * V2_LN2 + logf(L2) : -INFINITY), st[g][4],
                          lse_part, lam_part, cmax_part);
    }
}

// An explicit instantiation (the offline compile checks in tests/test_cuda_compile.py).
#define WC_V2_INST(G, F)                                                                                    \
    template __global__ void decode_stage1_v2<G, F>(const float*, const i8*, const u16*, const u16*, const u16*, \
                                                 const int*, const int*, const int*, const int*, const int*,  \
                                                 float*, float*, float*, float*, i64, int, int, int, int, int, \
                                                 int, int, int, int, int, int, u32, u32, float, float, float);
#ifdef WITCERT_INSTANTIATE_ALL
WC_V2_INST(1, false)
WC_V2_INST(1, true)
WC_V2_INST(2, false)
WC_V2_INST(2, true)
WC_V2_INST(3, false)
WC_V2_INST(3, true)
WC_V2_INST(4, false)
WC_V2_INST(4, true)
WC_V2_INST(5, false)
WC_V2_INST(5, true)
WC_V2_INST(6, false)
WC_V2_INST(6, true)
WC_V2_INST(7, false)
WC_V2_INST(7, true)
WC_V2_INST(8, false)
WC_V2_INST(8, true)
#endif
