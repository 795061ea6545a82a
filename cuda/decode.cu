// decode.cu — fused split-KV decode over the dithered INT8 pool with the certificate (SPEC §4–6).
//
// decode_stage1<D, G>: grid (num_splits, Hkv, B), block 128 threads (4 warps).  One CTA serves all
//   G query heads of one (request, kv head, split), so ξ is regenerated once per KV element.
//   A token row is handled by D/8 lanes, each owning 8 consecutive channels (one 8-byte code load
//   per side; a lane pair shares each 8-bit Philox call); a warp works on 32/(D/8) tokens at once,
//   each lane group with its own online-softmax state, merged at the end by shuffles and shared
//   memory.  Per query head it keeps (m, l, acc[16]) for lse and o, (m2, l2) for
//   λ = log Σ e^{ℓ̃ + c} with its own running max, and cmax.
//   Reads: codes/scales/outliers (+ witness for Tier A) of the split's tokens, the page table.
//   Writes: o_part [B, Hq, ns, D], lse_part / lam_part / cmax_part / gam_part [B, Hq, ns].
//   c_t = min(c^A, c^B) + γ_t (SPEC §4.1): γ_t bounds the kernel's own fp32 logit error —
//   gamma_per_beta times β's sum Σ_g s_g·b1_g on quantized channels, gamma_exact per unit of Σ|q_c||x_c|
//   on exact ones (outliers, exact-tier pages); an fp16 store's rows take gamma_exact·||q||·||x_t||
//   (Cauchy–Schwarz: one norm per token for all G heads; ||x_t|| the pool's stored norm, knorm,
//   rounded up at write time, an exact-tier row's formed here); gam_part is the split's max γ_t.
//   The coefficients are formed on the normalized query (certificate.cuh, SPEC §4.2); S counts
//   every attended token (SPEC §4.3).
//   Exact tier (SPEC §7, optional: tier_map != null): tier_map [H, tier_stride] of this layer gives
//   the tier entry of a page, or -1; tokens on such pages are read from tier_k/tier_v
//   [tier_cap, page_size, D] (fp16) with c_t = γ_t.
//   Page contributions (SPEC §6, optional: want_pages): page_lse / page_lam [B, Hq, max_pages]
//   receive per page lse_j and λ_j (natural log; -inf for an empty sum, +inf for λ with an
//   infinite c_t).  Tokens are staged per window of PW tokens in shared memory (aliasing the final
//   reduction buffer) and each page is reduced whole: windows are page aligned.
//   head_base: the pool's first kv head in the model (tensor-parallel shard): ξ is keyed by the
//   global kv head, like the write path.
//   Shared memory: static, < 48 KB for D <= 256, G <= 8.
//   Never reads out of bounds: page ids outside [0, num_pages), an inconsistent kv_indptr or a
//   last-page length outside [1, page_size] poison the split (NaN output, infinite certificate).
//   A head whose own logit is non-finite (its query) is poisoned alone; a head whose output is
//   non-finite (a non-finite V row it attends, SPEC §3.6) gets an infinite certificate.
//   FP16 = true: the same kernel over an Fp16Pool (stored fp16 values, no dither or scales; Tier A
//   from the witness, or no certificate): our fp16 baseline and the meter of black-box schemes.
// decode_merge: grid (B * Hq), block D: SPEC §6 stage 2, twin of _cpu/decode.py::merge_splits, and
//   optionally SPEC §5 per cell (the certified step's last launch).
// decode_certify: SPEC §5 risk and TV bound per cell into preallocated float64 outputs (for partials
//   merged elsewhere).
#include "common.cuh"
#include "philox.cuh"
#include "cp_async.cuh"
#include "budget.cuh"
#include "griddep.cuh"
#include "certificate.cuh"

#define DEC_THREADS 128
#define DEC_WARPS (DEC_THREADS / 32)
#define VEC 8
#define LOG2E WC_LOG2E
#define LN2 WC_LN2
#define PW 128  // tokens per page-contribution window (>= the largest page size, a multiple of TOK_STEP)

struct DecodeArgs {
    const float* q;                          // [B, Hq, D] fp32
    const i8* codes;                         // pool [L, 2, H, N, D]
    const u16* scales;                       // [L, 2, H, N, NG]
    const u16* outl;                         // [L, 2, H, N, NP2]
    const u16* wit;                          // [L, 2, H, N, NB]
    const float* knorm;                      // FP16: [L, H, N], each stored K row's norm rounded up
    const int* bypass_ch;                    // [H, NP2] of this layer
    const int* band_ch;                      // [NB, D / NB]
    const int* kv_indptr;                    // [B + 1]
    const int* kv_indices;                   // [nnz]
    const int* kv_last_page_len;             // [B]
    float* o_part;
    float* lse_part;
    float* lam_part;
    float* cmax_part;
    float* gam_part;
    const int* tier_map;                     // [H, tier_stride] of this layer, or null (no exact tier)
    const u16* tier_k;                       // [tier_cap, page_size, D] fp16
    const u16* tier_v;
    float* page_lse;                         // [B, Hq, max_pages] when want_pages
    float* page_lam;
    i64 N;                                   // slots in the pool
    int B, H, layer, gs, NP2, NB, page_shift, num_pages, nnz, num_splits, tier, bits;
    int tier_stride, tier_cap, want_pages, max_pages, head_base;
    u32 k0, k1;
    float sm, log_budget, beta_steps, gamma_per_beta, gamma_exact;
};

template <int G>
__device__ __forceinline__ void group_sum(float (&v)[G], int lpt) {
    // butterfly over the lanes of one token: every lane ends with the same bits
    for (int off = 1; off < lpt; off <<= 1) {
#pragma unroll
        for (int g = 0; g < G; ++g) v[g] += __shfl_xor_sync(0xffffffffu, v[g], off);
    }
}

// ξ of this lane's 8 channels of the K row (xk) and the V row (xv).  At 8 bits one Philox call
// feeds 16 channels, i.e. a lane pair: the even lane computes K's call, the odd lane V's, and each
// hands the other the two words it needs — one call per KV element, no redundant rounds.  At 16
// bits one call per side feeds exactly 8 channels; at 24 bits two calls per side.  Every lane must
// call this (it shuffles); inactive lanes pass slot 0.
__device__ __forceinline__ void lane_xi_kv(float (&xk)[VEC], float (&xv)[VEC], u32 slot, int layer, int h,
                                           int cl, u32 k0, u32 k1, int bits) {
    const u32 c2 = dither_ctr2(layer, h);
    if (bits == 8) {
        const int odd = cl & 1;
        const u32x4 w = philox10(slot, dither_ctr1(odd, cl >> 1), c2, 0u, k0, k1);
        const u32 ra = __shfl_xor_sync(0xffffffffu, odd ? w.x : w.z, 1);
        const u32 rb = __shfl_xor_sync(0xffffffffu, odd ? w.y : w.w, 1);
        const u32 ka = odd ? ra : w.x, kb = odd ? rb : w.y;  // K words of this lane's 8 channels
        const u32 va = odd ? w.z : ra, vb = odd ? w.w : rb;  // V words
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            const int sh = 8 * (i & 3);
            xk[i] = (float)(2 * (int)(((i < 4 ? ka : kb) >> sh) & 0xFFu) - 255) * 0x1p-9f;
            xv[i] = (float)(2 * (int)(((i < 4 ? va : vb) >> sh) & 0xFFu) - 255) * 0x1p-9f;
        }
    } else if (bits == 16) {
        const u32x4 wk = philox10(slot, dither_ctr1(0, cl), c2, 0u, k0, k1);
        const u32x4 wv = philox10(slot, dither_ctr1(1, cl), c2, 0u, k0, k1);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
            xk[i] = xi_of(wk, i, 16);
            xv[i] = xi_of(wv, i, 16);
        }
    } else {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const u32x4 wk = philox10(slot, dither_ctr1(0, 2 * cl + k), c2, 0u, k0, k1);
            const u32x4 wv = philox10(slot, dither_ctr1(1, 2 * cl + k), c2, 0u, k0, k1);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                xk[4 * k + i] = xi_of(wk, i, 24);
                xv[4 * k + i] = xi_of(wv, i, 24);
            }
        }
    }
}

// x̂ of this lane's 8 channels from an already loaded 8-byte code vector.
__device__ __forceinline__ void lane_dequant_raw(float (&x)[VEC], int2 raw, float sb, const float (&xi)[VEC]) {
    const i8* cb = reinterpret_cast<const i8*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) x[i] = __fmul_rn(sb, __fsub_rn((float)cb[i], xi[i]));
}

// The stored fp16 values of this lane's 8 channels from an already loaded 16-byte vector.
__device__ __forceinline__ void lane_f16_raw(float (&x)[VEC], int4 raw) {
    const u16* hb = reinterpret_cast<const u16*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; ++i) x[i] = f16_to_f32(hb[i]);
}

// One lane's raw share of a row: 8 int8 codes (8 bytes) or 8 fp16 values (16 bytes).
template <bool FP16> struct RawRow { typedef int2 T; };
template <> struct RawRow<true> { typedef int4 T; };

// Restore the exact outlier values of this lane's bypassed channels (K and V rows).
__device__ __forceinline__ void lane_outliers(float (&kh)[VEC], float (&vh)[VEC], const DecodeArgs& a, i64 rowk,
                                              i64 rowv, int cl, const short* oidx) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) {
        const int j = oidx[cl * VEC + i];
        if (j >= 0) {
            kh[i] = f16_to_f32(a.outl[rowk * a.NP2 + j]);
            vh[i] = f16_to_f32(a.outl[rowv * a.NP2 + j]);
        }
    }
}

// U: tokens per lane group per step (0 = the library default for G).
template <int D, int G, bool FP16, int U_ = 0>
__global__ void __launch_bounds__(DEC_THREADS, 1) decode_stage1(
    const float* __restrict__ q, const i8* __restrict__ codes, const u16* __restrict__ scales,
    const u16* __restrict__ outl, const u16* __restrict__ wit, const float* __restrict__ knorm,
    const int* __restrict__ bypass_ch,
    const int* __restrict__ band_ch, const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices,
    const int* __restrict__ kv_last_page_len, float* __restrict__ o_part, float* __restrict__ lse_part,
    float* __restrict__ lam_part, float* __restrict__ cmax_part, float* __restrict__ gam_part,
    const int* __restrict__ tier_map, const u16* __restrict__ tier_k, const u16* __restrict__ tier_v,
    float* __restrict__ page_lse, float* __restrict__ page_lam, i64 N, int B, int H, int layer, int gs, int NP2,
    int NB, int page_shift, int num_pages, int nnz, int num_splits, int tier, int bits, int tier_stride,
    int tier_cap, int want_pages, int max_pages, int head_base, u32 k0, u32 k1, float sm, float log_budget,
    float beta_steps, float gamma_per_beta, float gamma_exact) {
    const DecodeArgs a = {q, codes, scales, outl, wit, knorm, bypass_ch, band_ch, kv_indptr, kv_indices,
                          kv_last_page_len, o_part, lse_part, lam_part, cmax_part, gam_part, tier_map, tier_k,
                          tier_v, page_lse, page_lam, N, B, H, layer, gs, NP2, NB, page_shift, num_pages, nnz,
                          num_splits, tier, bits, tier_stride, tier_cap, want_pages, max_pages, head_base, k0,
                          k1, sm, log_budget, beta_steps, gamma_per_beta, gamma_exact};
    constexpr int LPT = D / VEC;        // lanes per token
    constexpr int TPW = 32 / LPT;       // tokens per warp step
    // tokens per lane group per step; defaults from the sweep in docs/performance.md (v1)
    // (fp16 rows at G = 8: one token, as two spill past 255 registers)
    constexpr int U = U_ > 0 ? U_ : (G <= 4 || (FP16 && G == 8) ? 1 : 2);
    constexpr int TOK_STEP = TPW * DEC_WARPS * U;
    __shared__ float q_s[G][D];
    __shared__ float bq2[G][D / 16];    // 2 (sm²/12) Q2_g log(2S/δ_loc), per scale group (gs >= 16)
    __shared__ float bq1[G][D / 16];    // sm Q1_g (2^-(m+1) + 2^-15)
    __shared__ float a_band[G][64];     // sm ||q_b||  (NB <= 64)
    __shared__ float g_norm[G];         // an fp16 store's γ_t per unit of ||x_t||: gamma_exact ||q||
    __shared__ short oidx[D];           // outlier slot of a bypassed channel, -1 otherwise
    __shared__ float red[DEC_WARPS][G][D + 6];
    __shared__ int s_bad;               // heads whose logit was non-finite (bit g), then whose o is
    static_assert(PW % TOK_STEP == 0, "a page-contribution window holds whole steps");
    static_assert(DEC_WARPS * (D + 6) >= 2 * PW, "the window aliases the reduction buffer");
    // page-contribution window [G][PW] of ℓ̃ and ℓ̃ + c (log2 units), live only inside the token loop
    float* const pw_lt = &red[0][0][0];
    float* const pw_x = pw_lt + G * PW;

    griddep_wait();  // before the first global access (griddep.cuh)
    const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int tsub = lane / LPT, cl = lane % LPT;
    const int Hq = a.H * G;
    const int ps = 1 << a.page_shift;
    const float sm2 = a.sm * LOG2E;

    // ---- the split's token range, with every page-table value checked before use
    const int p0 = a.kv_indptr[b], p1 = a.kv_indptr[b + 1];
    const int last = a.kv_last_page_len[b];
    bool poisoned = p0 < 0 || p1 < p0 || p1 > a.nnz;
    const int npages = poisoned ? 0 : p1 - p0;
    poisoned = poisoned || (npages > 0 && (last < 1 || last > ps));
    const i64 S = npages == 0 ? 0 : ((i64)(npages - 1) << a.page_shift) + last;
    const int pps = (npages + a.num_splits - 1) / a.num_splits;
    const int pa = min(s * pps, npages), pb = min(pa + pps, npages);
    const i64 ta = (i64)pa << a.page_shift;
    const i64 tb = poisoned ? ta : min((i64)pb << a.page_shift, S);

    // ---- per query head: the query, Tier-A band norms and Tier-B chunk coefficients
    for (int idx = tid; idx < G * D; idx += DEC_THREADS)
        q_s[idx / D][idx % D] = a.q[((i64)b * Hq + h * G + idx / D) * D + idx % D];
    for (int c = tid; c < D; c += DEC_THREADS) oidx[c] = -1;
    __syncthreads();
    for (int j = tid; j < a.NP2; j += DEC_THREADS) oidx[a.bypass_ch[h * a.NP2 + j]] = (short)j;
    __syncthreads();
    if (tid == 0) s_bad = 0;
    // S counts every token the request attends (SPEC §4.3)
    const float log_term = a.log_budget + logf((float)max(S, (i64)1));
    const int NG = D / a.gs;
    const SmSplit smx = sm_split(a.sm);
    if (a.tier) {  // the evaluation term needs Q1 under Tier A too
        for (int idx = tid; idx < G * NG; idx += DEC_THREADS) {
            const int g = idx / NG, ch0 = (idx % NG) * a.gs;
            float q1, q2;
            int e;
            normalized_sums(q_s[g], a.gs, [&](int i) { return ch0 + i; }, [&](int i) { return oidx[ch0 + i] >= 0; },
                            q1, q2, e);
            group_coefficients(smx, q1, q2, e, log_term, a.beta_steps, bq2[g][idx % NG], bq1[g][idx % NG]);
        }
    }
    if (FP16 && a.tier)
        for (int g = warp; g < G; g += DEC_WARPS) {
            const float gq = warp_norm_coefficient(q_s[g], D, a.gamma_exact, lane);
            if (lane == 0) g_norm[g] = gq;
        }
    if (a.tier & 1) {
        const int per = D / a.NB;
        for (int idx = tid; idx < G * a.NB; idx += DEC_THREADS) {
            const int g = idx / a.NB, bb = idx % a.NB;
            a_band[g][bb] = band_coefficient_of(q_s[g], a.band_ch, bb, per, smx);
        }
    }
    __syncthreads();

    // ---- per-lane-group running state
    // m2 == +inf is sticky: some token had c_t = +inf, so λ = +inf ("no guarantee")
    float m[G], l[G], m2[G], l2[G], cmx[G], gmx[G], acc[G][VEC];
    int hbad = 0;  // heads with a non-finite logit (bit g)
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        m2[g] = -INFINITY;
        l2[g] = 0.0f;
        cmx[g] = 0.0f;
        gmx[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[g][i] = 0.0f;
    }
    const i64 plane = a.N;  // rows per (layer, side, head)
    const i64 kbase = (((i64)a.layer * 2 + 0) * a.H + h) * plane;
    const i64 vbase = (((i64)a.layer * 2 + 1) * a.H + h) * plane;
    bool bypass_lane = false;
#pragma unroll
    for (int i = 0; i < VEC; ++i) bypass_lane |= oidx[cl * VEC + i] >= 0;
    // Σ|q_c||x_c| over exact channels (γ_t's exact part) is needed where an INT8 token can have
    // any: an exact tier, outlier pairs (CTA-uniform); an fp16 store's rows need ||x_t|| instead
    const bool need_ad = !FP16 && a.tier && (a.tier_map != nullptr || a.NP2 > 0);

    // Each lane group takes U consecutive tokens per step: every load of the U tokens is issued
    // before any is used (memory-level parallelism), and the online softmax rescales once per U
    // tokens (U + 1 exponentials per head instead of 2U).
    for (i64 t0 = ta; t0 < tb; t0 += TOK_STEP) {
        const i64 tg = t0 + (i64)(warp * TPW + tsub) * U;
        i64 slot[U];
        bool valid[U];
        int te[U];  // exact-tier entry of the token's page, -1 when served from the store
        typename RawRow<FP16>::T rk[U], rv[U];
        u16 hk[U], hv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const i64 t = tg + u;
            valid[u] = t < tb;
            slot[u] = 0;
            te[u] = -1;
            if (valid[u]) {
                const int page = a.kv_indices[p0 + (int)(t >> a.page_shift)];
                slot[u] = slot_of(page, t, a.page_shift, a.num_pages);
                if (slot[u] < 0) {
                    poisoned = true;
                    valid[u] = false;
                    slot[u] = 0;
                } else {
                    if (a.tier_map != nullptr) {
                        const int e = a.tier_map[(i64)h * a.tier_stride + page];
                        te[u] = e >= 0 && e < a.tier_cap ? e : -1;
                    }
                }
            }
            if (valid[u] && te[u] < 0) {
                const i64 rowk = kbase + slot[u], rowv = vbase + slot[u];
                if constexpr (FP16) {
                    rk[u] = *reinterpret_cast<const int4*>(reinterpret_cast<const u16*>(a.codes) + rowk * D + cl * VEC);
                    rv[u] = *reinterpret_cast<const int4*>(reinterpret_cast<const u16*>(a.codes) + rowv * D + cl * VEC);
                } else {
                    rk[u] = *reinterpret_cast<const int2*>(a.codes + rowk * D + cl * VEC);
                    rv[u] = *reinterpret_cast<const int2*>(a.codes + rowv * D + cl * VEC);
                    hk[u] = a.scales[rowk * NG + (cl * VEC) / a.gs];
                    hv[u] = a.scales[rowv * NG + (cl * VEC) / a.gs];
                }
            }
        }
        float lt[U][G], ct[U][G], vh[U][VEC];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float xik[VEC], xiv[VEC], kh[VEC];
            if constexpr (!FP16) lane_xi_kv(xik, xiv, (u32)slot[u], a.layer, h + a.head_base, cl, a.k0, a.k1, a.bits);
            const i64 rowk = kbase + slot[u], rowv = vbase + slot[u];
            float sk = 0.0f;
            if (valid[u] && te[u] >= 0) {
                // a repaired page: the exact fp16 rows from the tier (rare, so not prefetched)
                const i64 row = (i64)te[u] * ps + (slot[u] & (ps - 1));
                lane_f16_raw(kh, *reinterpret_cast<const int4*>(a.tier_k + row * D + cl * VEC));
                lane_f16_raw(vh[u], *reinterpret_cast<const int4*>(a.tier_v + row * D + cl * VEC));
            } else if (valid[u]) {
                if constexpr (FP16) {
                    lane_f16_raw(kh, rk[u]);
                    lane_f16_raw(vh[u], rv[u]);
                } else {
                    sk = f16_to_f32(hk[u]);
                    lane_dequant_raw(kh, rk[u], sk, xik);
                    lane_dequant_raw(vh[u], rv[u], f16_to_f32(hv[u]), xiv);
                    if (bypass_lane) lane_outliers(kh, vh[u], a, rowk, rowv, cl, oidx);
                }
            } else {
#pragma unroll
                for (int i = 0; i < VEC; ++i) kh[i] = vh[u][i] = 0.0f;
            }
            float dot[G], ca[G], ad[G], xn[1] = {0.0f};
            const bool ex_tok = te[u] >= 0;  // every channel exact
            if (FP16 && a.tier) {  // the stored norm, or an exact-tier row's formed here (group-uniform)
                if (ex_tok) {
#pragma unroll
                    for (int i = 0; i < VEC; ++i) xn[0] += kh[i] * kh[i];
                    group_sum<1>(xn, LPT);
                    xn[0] = sqrtf(xn[0]);
                } else if (valid[u]) {
                    xn[0] = a.knorm[((i64)a.layer * a.H + h) * a.N + slot[u]];
                }
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float d0 = 0.0f, a0 = 0.0f;
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    const float qv = q_s[g][cl * VEC + i];
                    d0 += qv * kh[i];
                    if (need_ad && (ex_tok || oidx[cl * VEC + i] >= 0)) a0 += fabsf(qv) * fabsf(kh[i]);
                }
                dot[g] = d0;
                ad[g] = a0;
                ca[g] = 0.0f;
            }
            if ((a.tier & 1) && valid[u] && te[u] < 0) {
                for (int bb = cl; bb < a.NB; bb += LPT) {
                    const float w = f16_to_f32(a.wit[rowk * a.NB + bb]);
#pragma unroll
                    for (int g = 0; g < G; ++g) ca[g] += a_band[g][bb] * w;
                }
            }
            group_sum<G>(dot, LPT);
            if (a.tier & 1) group_sum<G>(ca, LPT);
            if (need_ad) group_sum<G>(ad, LPT);
            // Tier B and the quantized channels' evaluation term in every lane from the row's scales:
            // no cross-lane sums, identical bits in all lanes
            float u2[G], be[G];
#pragma unroll
            for (int g = 0; g < G; ++g) u2[g] = be[g] = 0.0f;
            if (!FP16 && a.tier && valid[u] && te[u] < 0) {
                for (int gr = 0; gr < NG; ++gr) {
                    const float sg = f16_to_f32(a.scales[rowk * NG + gr]);
#pragma unroll
                    for (int g = 0; g < G; ++g) {
                        u2[g] += sg * sg * bq2[g][gr];
                        be[g] += sg * bq1[g][gr];
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
                lt[u][g] = sm2 * dot[g];  // ℓ̃ in log2 units: the softmax runs on exp2
                if (valid[u] && !is_finite32(lt[u][g])) hbad |= 1 << g;
                // γ_t (SPEC §4.1): the exact channels' term, then the quantized ones' (β's sum times
                // gamma_steps / beta_steps, rounded up: both coefficients are sm·Q1_g times a constant)
                const float gam = FP16 ? g_norm[g] * xn[0] : __fmaf_rn(a.gamma_exact, ad[g], be[g] * a.gamma_per_beta);
                float c = INFINITY;
                if (a.tier & 1) c = ca[g];
                if ((a.tier & 2) && !FP16) c = fminf(c, sqrtf(u2[g]) + be[g]);
                c = te[u] >= 0 ? gam : c + gam;  // an exact token: c_t = γ_t
                c *= (float)WC_C_EVAL_SLACK;
                ct[u][g] = c <= WC_F32_MAX ? c : INFINITY;  // natural units (cmax); λ below works in log2 units
                if (a.tier && valid[u]) gmx[g] = fmaxf(gmx[g], gam * (float)WC_C_EVAL_SLACK);
            }
        }
        if (a.want_pages) {
            // stage this step's (ℓ̃, ℓ̃ + c) per token; a full window is reduced page by page
            if (cl == 0) {
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int off = (int)((tg + u - ta) & (PW - 1));
#pragma unroll
                    for (int g = 0; g < G; ++g) {
                        pw_lt[g * PW + off] = valid[u] ? lt[u][g] : -INFINITY;
                        pw_x[g * PW + off] = !valid[u] ? -INFINITY
                                           : (ct[u][g] == INFINITY ? INFINITY : lt[u][g] + ct[u][g] * LOG2E);
                    }
                }
            }
            if ((((t0 - ta) + TOK_STEP) & (PW - 1)) == 0 || t0 + TOK_STEP >= tb) {
                __syncthreads();
                const i64 wb = ta + ((t0 - ta) & ~(i64)(PW - 1));
                const int npw = PW >> a.page_shift;
                for (int idx = tid; idx < G * npw; idx += DEC_THREADS) {
                    const int g = idx / npw, jp = idx % npw;
                    const i64 tok0 = wb + ((i64)jp << a.page_shift);
                    if (tok0 >= tb) continue;
                    const int n = (int)min((i64)ps, tb - tok0), off0 = (int)(tok0 - wb);
                    float mx = -INFINITY, mx2 = -INFINITY;
                    for (int k = 0; k < n; ++k) {
                        mx = fmaxf(mx, pw_lt[g * PW + off0 + k]);
                        mx2 = fmaxf(mx2, pw_x[g * PW + off0 + k]);
                    }
                    float sl = 0.0f, sx = 0.0f;
                    for (int k = 0; k < n; ++k) {
                        if (mx != -INFINITY) sl += exp2f(pw_lt[g * PW + off0 + k] - mx);
                        if (mx2 != -INFINITY && mx2 != INFINITY) sx += exp2f(pw_x[g * PW + off0 + k] - mx2);
                    }
                    const int pi = (int)(tok0 >> a.page_shift);
                    if (pi < a.max_pages) {
                        const i64 o = ((i64)b * Hq + h * G + g) * a.max_pages + pi;
                        a.page_lse[o] = mx == -INFINITY ? -INFINITY : mx * LN2 + logf(sl);
                        a.page_lam[o] = mx2 == INFINITY ? INFINITY
                                      : (mx2 == -INFINITY ? -INFINITY : mx2 * LN2 + logf(sx));
                    }
                }
                __syncthreads();
            }
        }
        // ---- chunked online softmax and certificate accumulator
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (valid[u]) mx = fmaxf(mx, lt[u][g]);
            if (mx == -INFINITY) continue;  // no valid token in this chunk
            const float mn = fmaxf(m[g], mx);
            const float sc = exp2f(m[g] - mn);
            float p[U];
            float psum = 0.0f;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                p[u] = valid[u] ? exp2f(lt[u][g] - mn) : 0.0f;
                psum += p[u];
            }
            l[g] = l[g] * sc + psum;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                float o = acc[g][i] * sc;
#pragma unroll
                for (int u = 0; u < U; ++u) o += p[u] * vh[u][i];
                acc[g][i] = o;
            }
            m[g] = mn;
            if (a.tier) {
                float mx2 = -INFINITY;
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    if (!valid[u]) continue;
                    cmx[g] = fmaxf(cmx[g], ct[u][g]);
                    if (ct[u][g] == INFINITY) m2[g] = INFINITY;
                    else mx2 = fmaxf(mx2, lt[u][g] + ct[u][g] * LOG2E);
                }
                if (m2[g] != INFINITY && mx2 != -INFINITY) {
                    const float mn2 = fmaxf(m2[g], mx2);
                    float s2 = l2[g] * exp2f(m2[g] - mn2);
#pragma unroll
                    for (int u = 0; u < U; ++u)
                        if (valid[u]) s2 += exp2f(lt[u][g] + ct[u][g] * LOG2E - mn2);
                    l2[g] = s2;
                    m2[g] = mn2;
                }
            }
        }
    }

    // ---- merge the lane groups of a warp (xor over the token-group bits of the lane id)
    for (int off = LPT; off < 32; off <<= 1) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
            const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
            const float mn = fmaxf(m[g], mo);
            const float sa = mn == -INFINITY ? 0.0f : exp2f(m[g] - mn);
            const float sb = mn == -INFINITY ? 0.0f : exp2f(mo - mn);
            l[g] = l[g] * sa + lo * sb;
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                const float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], off);
                acc[g][i] = acc[g][i] * sa + ao * sb;
            }
            m[g] = mn;
            const float m2o = __shfl_xor_sync(0xffffffffu, m2[g], off);
            const float l2o = __shfl_xor_sync(0xffffffffu, l2[g], off);
            const float mn2 = fmaxf(m2[g], m2o);
            const bool fin2 = mn2 != -INFINITY && mn2 != INFINITY;
            const float s2a = fin2 ? exp2f(m2[g] - mn2) : 0.0f;
            const float s2b = fin2 ? exp2f(m2o - mn2) : 0.0f;
            l2[g] = l2[g] * s2a + l2o * s2b;
            m2[g] = mn2;
            cmx[g] = fmaxf(cmx[g], __shfl_xor_sync(0xffffffffu, cmx[g], off));
            gmx[g] = fmaxf(gmx[g], __shfl_xor_sync(0xffffffffu, gmx[g], off));
        }
    }
    // ---- then the warps, through shared memory: [warp][g][0..D) acc, D: m, D+1: l, D+2: m2,
    //      D+3: l2, D+4: cmax, D+5: the largest γ_t
    if (tsub == 0) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) red[warp][g][cl * VEC + i] = acc[g][i];
            if (cl == 0) {
                red[warp][g][D] = m[g];
                red[warp][g][D + 1] = l[g];
                red[warp][g][D + 2] = m2[g];
                red[warp][g][D + 3] = l2[g];
                red[warp][g][D + 4] = cmx[g];
                red[warp][g][D + 5] = gmx[g];
            }
        }
    }
    if (hbad) atomicOr(&s_bad, hbad);  // (rare: a non-finite query)
    poisoned = __syncthreads_or(poisoned);
    const int bad_heads = s_bad;
    __syncthreads();  // every thread has read s_bad: it now collects the heads whose o is not finite
    for (int idx = tid; idx < G * D; idx += DEC_THREADS) {
        const int g = idx / D, c = idx % D;
        float M = -INFINITY;
        for (int w = 0; w < DEC_WARPS; ++w) M = fmaxf(M, red[w][g][D]);
        float L = 0.0f, A = 0.0f;
        for (int w = 0; w < DEC_WARPS; ++w) {
            const float sw = M == -INFINITY ? 0.0f : exp2f(red[w][g][D] - M);
            L += red[w][g][D + 1] * sw;
            A += red[w][g][c] * sw;
        }
        const bool dead = poisoned || ((bad_heads >> g) & 1);
        const float r = dead ? NAN : (L == 0.0f ? 0.0f : A / L);
        a.o_part[(((i64)b * Hq + h * G + g) * a.num_splits + s) * D + c] = r;
        if (!dead && !is_finite32(r)) atomicOr(&s_bad, 1 << (G + g));  // a non-finite V row (SPEC §3.6)
    }
    __syncthreads();
    const int vbad = s_bad >> G;
    for (int g = tid; g < G; g += DEC_THREADS) {
        float M = -INFINITY, M2 = -INFINITY;
        for (int w = 0; w < DEC_WARPS; ++w) {
            M = fmaxf(M, red[w][g][D]);
            M2 = fmaxf(M2, red[w][g][D + 2]);
        }
        float L = 0.0f, L2 = 0.0f, CM = 0.0f, GM = 0.0f;
        const bool linf = M2 == INFINITY || (a.tier && ((vbad >> g) & 1));
        for (int w = 0; w < DEC_WARPS; ++w) {
            const float sw = M == -INFINITY ? 0.0f : exp2f(red[w][g][D] - M);
            L += red[w][g][D + 1] * sw;
            if (!linf && M2 != -INFINITY) L2 += red[w][g][D + 3] * exp2f(red[w][g][D + 2] - M2);
            CM = fmaxf(CM, red[w][g][D + 4]);
            GM = fmaxf(GM, red[w][g][D + 5]);
        }
        if (linf) CM = INFINITY;
        const i64 o = ((i64)b * Hq + h * G + g) * a.num_splits + s;
        // back to natural-log units: the maxima were kept in log2 units
        store_split_stats(o, poisoned || ((bad_heads >> g) & 1), L, M * LN2 + logf(L),
                          linf ? INFINITY : (L2 > 0.0f ? M2 * LN2 + logf(L2) : -INFINITY), CM, GM, a.lse_part,
                          a.lam_part, a.cmax_part, a.gam_part);
    }
}

// SPEC §5 per (request, query head) cell, the twin of witcert_cupy/certificate.py (risk_from_log_a,
// tv_bound).
// R = expm1(2 (log A + res)) / 2, res = LOG_A_RESOLUTION_ULPS ulp(max(1, |lse|)) for finite lse
// (the resolution of the fp32 difference log A = LSE(λ) − lse), NaN -> +inf;
// TV bound = min(1, R, tanh(cmax / 2)), NaN cmax -> 1.
// log A' = log A + Γ (docs/certificate.md §10.4): R bounds both readings of p̃.
WC_D void certify_cell(float log_a, float lse, float cmax, float gam, double& risk, double& tv) {
    const double l = (double)lse;
    double la = (double)log_a + (double)gam;
    if (fabs(l) <= WC_F64_MAX) la += WC_LOG_A_RESOLUTION_ULPS * 0x1p-24 * fmax(1.0, fabs(l));
    double r = expm1(2.0 * la) / 2.0;
    if (r != r) r = INFINITY;
    const double cm = (double)cmax;
    const double t = cm != cm ? 1.0 : tanh(cm / 2.0);
    risk = r;
    tv = fmin(fmin(1.0, r), t);
}

// decode_merge: grid (B·Hq), block min(D, 256) (+ 32 when it certifies: below), dynamic shared memory
// merge_smem_floats(ns) floats, and ns·D more with `pf` (below).
// Every per-split quantity is formed once, by the thread that owns the split, into shared memory: the
// statistics, the terms e^{lse_s − max} of lse and e^{λ_s − max} of log A, and the weights
// e^{lse_s − lse}.  Only the sums of those terms run serially — in split order, as the CPU twin —
// over shared memory, and the o loop's loads of o_part are unconditional (an empty split's weight
// is selected away), so they are issued MG_BATCH at a time.  (Before, every thread recomputed every
// exponential, and each o_part load sat behind a branch on its split's statistics: a chain of ns
// dependent L2 round trips, ≈ 15 µs of a 32 µs step at B = 1, 64 splits.)  With
// `risk` non-null the CTA also certifies its cell (SPEC §5, certify_cell), so a certified step is
// two launches, not three.
#define MG_PAD(ns) (((ns) + 3) & ~3)  // 16-byte aligned arrays
// o_part loads issued before their sum, per thread.  Batches of 32 were predicted to save the
// L2 round trips of ≈ 0.13 µs per split at B = 1, but measured slower than 8 (the variant
// benchmark: 33.8 vs 27.3 µs per step at B = 1, 4k; 93.7 vs 87.2 at 32k); 4 and
// 16 came within 1.6 µs of 8 either way, and within 0.2 µs once the batches' loads were
// unguarded.
#define MG_BATCH 8
// With `pf` (the host's choice: the rows fit, d % 4 == 0) every o_part row of the cell is copied
// into shared memory by cp.async at the kernel's start, after the three statistics arrays, so the
// copies land while the statistics are reduced (the merge was a chain of dependent global
// round trips).
__host__ __device__ constexpr int merge_smem_floats(int ns) { return 3 * MG_PAD(ns) + 4; }
// The prefetch as one bulk copy of the cell's rows on sm_90+, as 16-byte cp.async pieces over all
// threads below.  Why: with the pieces, 64 KB of rows (128 splits)
// kept every thread issuing copies for ≈ 1,700 cycles before the statistics, as fast as the rows
// flow into the SM; the bulk copy moves them while the statistics, exponentials and sums run, and
// only the o loop waits for them.  The same rows land, so the same bits.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MG_USE_BULK 1
#else
#define MG_USE_BULK 0
#endif

// the prefetched rows have landed and are visible to this thread (the cp.async pieces: this
// thread's; others' need a barrier after)
WC_D void merge_rows_landed(u32 bar) {
#if MG_USE_BULK
    mbar_wait(bar, 0);
#else
    (void)bar;
    cp_async_wait_all();
#endif
}

// acc + w·v for a split of weight w ≥ 0, acc for an empty split (w = −1), whose row is never
// multiplied (SPEC §6: no 0·inf).  The selects are on the operands, off the chain through acc:
// fma(+0, −0, acc) = acc + (−0), which is acc bit for bit (−0 included), as selecting acc was.
WC_D float merge_term(float acc, float w, float v) {
    const bool live = w >= 0.0f;
    return fmaf(live ? w : 0.0f, live ? v : -0.0f, acc);
}

// Σ w_s·v_s over the whole batches [0, nfull) of one channel's rows (src[s·stride]), MG_BATCH
// unguarded loads, then their terms in split order.  Inlined once for the rows in shared memory
// and once for those in global memory (an i64 stride), each call's loads stay in their own space.
template <typename Stride>
WC_D float merge_batches(const float* src, Stride stride, int nfull, const float* w) {
    float acc = 0.0f;
    for (int s0 = 0; s0 < nfull; s0 += MG_BATCH) {
        float v[MG_BATCH];
#pragma unroll
        for (int i = 0; i < MG_BATCH; ++i) v[i] = src[(s0 + i) * stride];
#pragma unroll
        for (int i = 0; i < MG_BATCH; ++i) acc = merge_term(acc, w[s0 + i], v[i]);
    }
    return acc;
}

// log A, cmax and Γ each carry the underflow term g0 (docs/certificate.md §10.3), rounded up.
// With a budget key (spec §4.4, budget.cuh) each certified cell also spends one cell of its
// request's ledger row, and a cell past the budget reports R = +inf, tv_bound = 1.
extern "C" __global__ void decode_merge(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                        const float* __restrict__ lam_part, const float* __restrict__ cmax_part,
                                        const float* __restrict__ gam_part, int ns, int D, float* __restrict__ o,
                                        float* __restrict__ lse, float* __restrict__ log_a, float* __restrict__ cmax,
                                        float* __restrict__ gam, double* __restrict__ risk,
                                        double* __restrict__ tv_bound, int pf, float g0,
                                        const int* __restrict__ requests, long long* counts, u64* keys,
                                        int capacity, int Hq, u64 key, long long limit) {
    extern __shared__ __align__(16) float mg_s[];
    float* lp_s = mg_s;                 // lse_s, then the weights e^{lse_s − max}/Σ (−1: empty split)
    float* lm_s = mg_s + MG_PAD(ns);    // λ_s, then e^{λ_s − max λ}
    float* ex_s = mg_s + 2 * MG_PAD(ns);  // e^{lse_s − max lse}
    float* ob_s = mg_s + merge_smem_floats(ns);  // [ns][D]: the cell's o_part rows (pf)
    __shared__ float red[32][4];
    __shared__ int bad_s;
    __shared__ __align__(8) unsigned long long mg_bar;  // the bulk copy's completion (MG_USE_BULK)
    const u32 bar = smem_addr(&mg_bar);
    const i64 r = blockIdx.x;  // (b, hq)
    const int tid = threadIdx.x, nt = blockDim.x;
    const bool pref = pf != 0;
    griddep_wait();  // before the first global access (griddep.cuh)
    // the thread's first split's statistics are requested before the row copies are issued, so
    // that round trip is not queued behind them (the copies' issue delayed it ≈ 0.4 µs)
    float v0 = 0.0f, lv0 = 0.0f, cv0 = 0.0f, gv0 = 0.0f;
    if (tid < ns) {
        v0 = lse_part[r * ns + tid];
        lv0 = lam_part[r * ns + tid];
        cv0 = cmax_part[r * ns + tid];
        gv0 = gam_part[r * ns + tid];
    }
    if (pref) {  // (waited for after the first barrier below, so the mbarrier is initialised by then)
        const float* src = o_part + r * ns * D;
#if MG_USE_BULK
        if (tid == 0) {
            mbar_init(bar, 1);
            mbar_fence_init();
            mbar_expect_tx(bar, (u32)(ns * D * 4));
            bulk_copy_g2s(smem_addr(ob_s), src, (u32)(ns * D * 4), bar);
        }
#else
        for (int i = tid; i < ns * D / 4; i += nt) cp_async16(ob_s + 4 * i, src + 4 * i);
        cp_async_commit();
#endif
    }
    if (tid == 0) bad_s = 0;
    float mx = -INFINITY, lmx = -INFINITY, cm = 0.0f, gm = 0.0f;
    bool bad = false;
    for (int s = tid; s < ns; s += nt) {
        const bool first = s == tid;
        const float v = first ? v0 : lse_part[r * ns + s], lv = first ? lv0 : lam_part[r * ns + s];
        lp_s[s] = v;
        lm_s[s] = lv;
        if (v != v) bad = true;
        else mx = fmaxf(mx, v);
        lmx = fmaxf(lmx, lv);
        cm = fmaxf(cm, first ? cv0 : cmax_part[r * ns + s]);
        gm = fmaxf(gm, first ? gv0 : gam_part[r * ns + s]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        lmx = fmaxf(lmx, __shfl_xor_sync(0xffffffffu, lmx, off));
        cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, off));
        gm = fmaxf(gm, __shfl_xor_sync(0xffffffffu, gm, off));
    }
    __syncthreads();  // bad_s is initialised
    if (bad) bad_s = 1;
    if ((tid & 31) == 0) {
        red[tid >> 5][0] = mx;
        red[tid >> 5][1] = lmx;
        red[tid >> 5][2] = cm;
        red[tid >> 5][3] = gm;
    }
    __syncthreads();
    for (int wi = 0; wi < (nt + 31) >> 5; ++wi) {  // max is exact: any order gives the same bits
        mx = fmaxf(mx, red[wi][0]);
        lmx = fmaxf(lmx, red[wi][1]);
        cm = fmaxf(cm, red[wi][2]);
        gm = fmaxf(gm, red[wi][3]);
    }
    float L, la;
    if (bad_s) {
        if (pref) merge_rows_landed(bar);  // (no copy outlives the CTA)
        for (int c = tid; c < D; c += nt) o[r * D + c] = NAN;
        L = NAN;
        la = INFINITY;
    } else if (mx == -INFINITY) {  // no tokens at all
        if (pref) merge_rows_landed(bar);
        for (int c = tid; c < D; c += nt) o[r * D + c] = 0.0f;
        L = -INFINITY;
        la = 0.0f;
    } else {
        const bool lfin = lmx != INFINITY && lmx != -INFINITY;
        for (int s = tid; s < ns; s += nt) {
            ex_s[s] = lp_s[s] != -INFINITY ? expf(lp_s[s] - mx) : 0.0f;
            if (lfin) lm_s[s] = lm_s[s] != -INFINITY ? expf(lm_s[s] - lmx) : 0.0f;
        }
        __syncthreads();
        // the same bits in every thread: split order, as the twin.  λ's sum runs in the same loop as
        // lse's (two independent chains), so log A is known before the o loop.  Two loops rather than a test of lfin per split, whose branches kept
        // the loads from being issued ahead
        float tot = 0.0f, t2 = 0.0f;
        if (lfin) {
#pragma unroll 16
            for (int s = 0; s < ns; ++s) {
                tot += ex_s[s];
                t2 += lm_s[s];
            }
        } else {
#pragma unroll 16
            for (int s = 0; s < ns; ++s) tot += ex_s[s];
        }
        L = mx + logf(tot);
        // A >= 1 exactly; below 0 is fp32 rounding
        la = lmx == INFINITY ? INFINITY : (lmx == -INFINITY ? 0.0f : fmaxf(lmx + logf(t2) - L, 0.0f));
        // the weights e^{lse_s − max}/Σ: they sum to 1 within fp32 even where lse is so large that its
        // own rounding moves e^{lse_s − lse} by a factor (docs/certificate.md §5)
        for (int s = tid; s < ns; s += nt) lp_s[s] = lp_s[s] != -INFINITY ? ex_s[s] / tot : -1.0f;
        if (pref) merge_rows_landed(bar);  // (the cp.async pieces: the barrier makes everyone's visible)
        __syncthreads();
        // o: one loop per source of the rows, whole batches of MG_BATCH unguarded loads, then the
        // remainder (with the source and the bound tested per load, the loads were issued
        // one at a time behind branches, ≈ 85 cycles per split)
        const int nfull = ns - ns % MG_BATCH;
        for (int c = tid; c < D; c += nt) {
            float acc = pref ? merge_batches(ob_s + c, D, nfull, lp_s)
                             : merge_batches(o_part + r * ns * D + c, (i64)D, nfull, lp_s);
            for (int s = nfull; s < ns; ++s)
                acc = merge_term(acc, lp_s[s], pref ? ob_s[s * D + c] : o_part[(r * ns + s) * D + c]);
            o[r * D + c] = acc;
        }
    }
    // the cell's statistics and certificate (double-precision expm1 and tanh): with more threads
    // than channels (the launch layer adds a warp when it certifies), the first thread without a
    // channel, while the others run the o loop; else thread 0 after its channel
    if (tid == (nt > D ? D : 0)) {
        // the underflow term g0 (none where no token was attended: nothing to bound)
        const bool any = bad_s || mx != -INFINITY;
        cm = any ? __fadd_ru(cm, g0) : cm;
        gm = any ? __fadd_ru(gm, g0) : gm;
        la = any && mx != -INFINITY ? __fadd_ru(la, g0) : la;
        cmax[r] = cm;
        gam[r] = gm;
        lse[r] = L;
        log_a[r] = la;
        if (risk != nullptr) {
            certify_cell(la, L, cm, gm, risk[r], tv_bound[r]);
            if (key != 0ull && !budget_take(requests, counts, keys, capacity, key, limit, (int)(r / Hq))) {
                risk[r] = INFINITY;
                tv_bound[r] = 1.0;
            }
        }
    }
}

// decode_certify: grid ceil(n / 256), block 256: SPEC §5 per cell (certify_cell) into
// preallocated float64 risk and tv_bound [n], so a decode step stays capturable in a CUDA graph.
extern "C" __global__ void decode_certify(const float* __restrict__ log_a, const float* __restrict__ lse,
                                          const float* __restrict__ cmax, const float* __restrict__ gam, int n,
                                          double* __restrict__ risk, double* __restrict__ tv_bound) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) certify_cell(log_a[i], lse[i], cmax[i], gam[i], risk[i], tv_bound[i]);
}

// An explicit instantiation (the offline compile checks in tests/test_cuda_compile.py).
#define WC_INST1(D, G, F)                                                                                 \
    template __global__ void decode_stage1<D, G, F, 0>(const float*, const i8*, const u16*, const u16*, const u16*, \
                                                 const float*, const int*, const int*, const int*, const int*, \
                                                 const int*, float*, float*, float*, float*, float*, const int*, \
                                                 const u16*, const u16*, float*, float*, i64, int, int, int,  \
                                                 int, int, int, int, int, int, int, int, int, int, int, int,  \
                                                 int, int, u32, u32, float, float, float, float, float);
#ifdef WITCERT_INSTANTIATE_ALL
// every shape the library launches
#define WC_INST(D, G) WC_INST1(D, G, false) WC_INST1(D, G, true)
// With WITCERT_G_CLASSES (CI's compile check, tests/test_cuda_compile.py; WITCERT_COMPILE_EVERY_G=1
// there checks every G): G = 1, 4, 7 and 8.  Every instance has the same bound (255 registers);
// G = 7 and 8 hold the instances nearest it (236–255, NVRTC 13.0), G = 5 and 6 reach 198–246 and
// G ≤ 4 at most 176.  The other G's compiles were half of this file's time.
#if defined(WITCERT_ONE_G)  // one G (the GPU session's every-G check, a G per compile)
#define WC_INST_G(D) WC_INST(D, WITCERT_ONE_G)
#elif defined(WITCERT_G_CLASSES)
#define WC_INST_G(D) WC_INST(D, 1) WC_INST(D, 4) WC_INST(D, 7) WC_INST(D, 8)
#else
#define WC_INST_G(D) WC_INST(D, 1) WC_INST(D, 2) WC_INST(D, 3) WC_INST(D, 4) WC_INST(D, 5) \
    WC_INST(D, 6) WC_INST(D, 7) WC_INST(D, 8)
#endif
WC_INST_G(64)
WC_INST_G(128)
WC_INST_G(256)
#endif
