// extend_tc.cu — the tensor-core extend (prefill) kernel of issue 6: stage 1 of a split-KV pass in
// which a tile of 64 query rows (consecutive new tokens of one request × the G query heads of one
// kv head) attends causally to its request's INT8 prefix, with the Tier-B certificate.  Its split
// partials feed decode_merge and decode_certify (decode.cu) unchanged.
//
// Why tensor cores, and why the certificate stays sound (docs/certificate.md §9):
//   Logits.  ℓ̃ = sm·Σ_g s_g·Σ_{c∈g} q_c·(k_c − ξ_c).  With 8-bit dither the code k_c (|k| ≤ 127) and
//   −ξ_c = (255 − 2j)/512 are both EXACT in fp16, so the K operands of the mma carry no rounding
//   at all.  The query is split q ≈ qh + ql (two fp16 values, after an exact power-of-two row
//   scaling that keeps them normal): mma(qh, k) + mma(ql, k) + mma(qh, −ξ).  What that leaves out,
//   |Σ (q − qh − ql)·k + (q − qh)·(−ξ)| ≤ 127·E2_g + ½·E1_g per group (E1, E2: the split's exact
//   residual sums, computed per row here), is a deterministic bound added to β_t, so c_t covers the
//   kernel's own logits.  The per-token scale s_g is applied in fp32 after each group's mma.
//   Values.  V̂ = fp32 x̂ rounded once to fp16 and P rounded to fp16 — the operands an fp16
//   attention kernel (torch SDPA on the dequantized cache) sees.  o carries fp16-class rounding;
//   the certificate bounds TV of the attention weights, which V does not enter.
//
//   Certificate.  c_t = u_t + β_t + γ_t with u² = Σ_g a2_g·s_g² and β + γ = Σ_g a1_g·s_g: rank-4
//   products of row coefficients and token scales, so two m16n8k4 tf32 mma per 16 × 8 block form
//   them, from operands rounded UP to tf32 (an fp16 scale is exact in tf32; its square and the row
//   coefficients, with C_EVAL_SLACK and log2 e folded in, are rounded up): docs/certificate.md §9.
//
// Layout: grid (num_tiles, H, num_splits); 8 row warps × 16 rows = 2 warpgroups × 64 rows.  Row r of
// the tile is (token r / G, head r % G).  A KV tile of 64 tokens is dequantized one half-row of K or
// of V per thread (4 Philox calls, xt_dequant) into one of two shared buffers, while the rows compute
// on the other:
//   - logits: each warpgroup's 64 rows × 64 tokens by warpgroup mma with Q and K read from shared
//     memory, a group's six products running while the previous group is scaled (sm_90, XT_WGMMA,
//     the sm_90a target); elsewhere per warp by m16n8k16 mma.sync with ldmatrix fragments;
//   - per warp: c_t by tf32 mma, the online softmax and λ (the unmasked instance for tiles that every
//     row attends);
//   - o += P·V̂ with P from registers (wgmma: V̂ read by the tensor cores).
// wgmma path (block 512): a prepass (extend_tc_dequant) dequantizes each of the call's tiles once per
// kv head into a workspace of tile images; stage 1's producer warpgroups bring tile i + 2 in by one
// bulk copy while the rows compute, buffers handed over by named barriers (full / empty), with
// setmaxnreg moving registers to the rows (48 / 208).  (Every CTA dequantizing its own copy of each
// tile, as the mma.sync path does, cost 14% at 2048 × 30k: docs/performance.md.)
// mma.sync path (block 256): every thread dequantizes the next tile while P·V̂ runs; one CTA
// barrier per tile.  Shared memory 192 KB (dynamic); 1 CTA per SM.
// Never reads out of bounds: page ids outside the pool, an inconsistent kv_indptr, a bad last-page
// length or more new tokens than the request holds poison the split (NaN output, infinite
// certificate), as in the decode kernels; a non-finite scale in a tile poisons the split too.
#include "common.cuh"
#include "philox.cuh"
#include "cp_async.cuh"
#include "tc_operands.cuh"
#include "certificate.cuh"

#define XT_TILE 64
#define XT_D 128
#define XT_NG 4       // scale groups of 32 channels
#define XT_LOG2E WC_LOG2E
#define XT_LN2 WC_LN2
#define XT_LOG2E_UP WC_LOG2E_UP

#define XT_WARPS 8
#ifndef XT_WGMMA
#define XT_WGMMA 0  // 1 (sm_90a only): the logits and P·V̂ by warpgroup mma (wgmma), else by mma.sync
#endif
#define XT_ROWS (16 * XT_WARPS)  // query rows per CTA: 16 per warp
#define XT_CONSUMER_THREADS (32 * XT_WARPS)
// wgmma path: two producer warpgroups bring the tiles in (one thread's bulk copy; the 512 threads
// keep the setmaxnreg budget below) while the two warpgroups of the rows
// compute (4 producer warps dequantizing both sides measured 8% slower); the launch
// layer reads this number from here
#define XT_PRODUCER_WARPS 8
#define XT_THREADS (XT_CONSUMER_THREADS + 32 * XT_PRODUCER_WARPS * XT_WGMMA)
// registers per thread after setmaxnreg, within the launch's 65536 / 512 = 128: 48 + 208 = 2 × 128
// (a producer at 40 spills)
#define XT_PRODUCER_REGS 48
#define XT_CONSUMER_REGS 208
// named barriers of the wgmma path, per tile buffer b, for all the CTA's threads: buffer b is full
// (the producers arrive, the rows wait) or empty (the other way round); 0 is __syncthreads.  (One
// pair per side, so that K's producers go on once the logits are done, measured 4% slower.)
#define XT_BAR_FULL(b) (1 + (b))
#define XT_BAR_EMPTY(b) (3 + (b))

// One dequantized KV tile.  The three 64 × 128 fp16 arrays are stored as 8 × 8 blocks of 128 bytes
// (8 tokens, each with 8 consecutive channels): the canonical no-swizzle layout of the wgmma
// descriptors, which serves K as a K-major and V̂ as an MN-major operand, and whose 16-byte rows
// ldmatrix reads without bank conflicts.
struct XtTile {
    u16 kc[XT_TILE * XT_D];           // K codes, exact in fp16
    u16 kx[XT_TILE * XT_D];           // −ξ of K, exact in fp16
    u16 vh[XT_TILE * XT_D];           // V̂ rounded to fp16
    float sk[XT_NG][XT_TILE];         // K scales [group][token]: the column scaling after each group's mma
    float skt[XT_TILE][XT_NG][2];     // per token and group: (s_g² rounded up to tf32, s_g): c_t's B operands
};

struct XtShared {
    u16 qh[XT_ROWS * XT_D];        // row-scaled query, high fp16 part (8 × 8 blocks, as the tiles)
    u16 ql[XT_ROWS * XT_D];        // low part: qs − qh rounded to fp16
    XtTile tile[2];  // two buffers: tile i+1 is written while tile i is read
    float rowc[XT_ROWS][12];       // per row: c_t's A operands (u² coefficients [4], β coefficients [4]), ℓ̃ scale,
                                   // infinite-c_t flag, rho (Γ ≤ rho·cmax, docs/certificate.md §10.4)
    int rowlen[XT_ROWS];           // tokens the row attends (0: no query in this row)
    int rowout[XT_ROWS];           // the row's (query, head) index qi·Hq + head, or -1
    // mma.sync path: raw codes of the next tile [K, V][token], 144-byte rows: conflict-free reads
    // (the wgmma path, fed by bulk copies, uses none of it)
    int4 stg[2][XT_TILE][9];
    u32 stg_sc[2][XT_TILE][2];  // their scales: each half-row's two groups (4 bytes)
    u64 tile_tx[2];                // wgmma path: buffer b's bulk copy completes on mbarrier b
};
// the launch layer reads this number from here (witcert_cupy/_cuda/extend.py): 8 warps, 128 rows
#define XT_SMEM_BYTES 196624
static_assert(sizeof(XtShared) == XT_SMEM_BYTES, "XT_SMEM_BYTES must be sizeof(XtShared)");
// dequantization items (side, token, half-row): 2 sides × 64 tokens × 2 halves, one per thread of the
// CTA (mma.sync path) or of the producer warpgroups (wgmma path)
static_assert(4 * XT_TILE == XT_CONSUMER_THREADS, "one half-row per thread");
static_assert(XT_PRODUCER_REGS * 32 * XT_PRODUCER_WARPS + XT_CONSUMER_REGS * XT_CONSUMER_THREADS <=
                  (65536 / (XT_CONSUMER_THREADS + 32 * XT_PRODUCER_WARPS) & ~7) *
                      (XT_CONSUMER_THREADS + 32 * XT_PRODUCER_WARPS),
              "setmaxnreg may only move the registers the CTA was launched with");

// element (token t, channel c) of a tile array: 8-token groups 2048 B apart, 8-channel blocks 128 B
// apart, 16 B per token within a block
WC_D int xt_off(int t, int c) { return (t >> 3) * 1024 + (c >> 3) * 64 + (t & 7) * 8 + (c & 7); }
#define XT_TOKEN_GROUP_BYTES 2048
#define XT_CHANNEL_BLOCK_BYTES 128

// c += a·b, m16n8k4, tf32 operands (fp32 registers whose low 13 bits are zero), fp32 accumulate
WC_D void mma_tf32_k4(float (&c)[4], u32 a0, u32 a1, u32 b0) {
    asm("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

#if XT_WGMMA
#define XT_ACC4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
// d (+)= A·B for the warpgroup's 64 rows × 64 tokens, k = 16, both from shared memory (A rows ×
// channels, B tokens × channels: K-major); SCALE_D 0 overwrites d
template <int SCALE_D>
WC_D void wg_qk_ss(float (&d)[8][4], u64 a, u64 b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,"
        "%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : XT_ACC4(d, 0), XT_ACC4(d, 1), XT_ACC4(d, 2), XT_ACC4(d, 3), XT_ACC4(d, 4), XT_ACC4(d, 5),
          XT_ACC4(d, 6), XT_ACC4(d, 7)
        : "l"(a), "l"(b), "n"(SCALE_D));
}
// o += p·V̂ for the warpgroup's 64 rows × 128 channels, k = 16 tokens: V̂ MN-major in shared memory
WC_D void wg_pv(float (&d)[16][4], const u32 (&a)[4], u64 b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,"
        "%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,"
        "%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, "
        "{%64,%65,%66,%67}, %68, 1, 1, 1, 1;\n"
        : XT_ACC4(d, 0), XT_ACC4(d, 1), XT_ACC4(d, 2), XT_ACC4(d, 3), XT_ACC4(d, 4), XT_ACC4(d, 5),
          XT_ACC4(d, 6), XT_ACC4(d, 7), XT_ACC4(d, 8), XT_ACC4(d, 9), XT_ACC4(d, 10), XT_ACC4(d, 11),
          XT_ACC4(d, 12), XT_ACC4(d, 13), XT_ACC4(d, 14), XT_ACC4(d, 15)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#endif

// named barriers: `n` threads take part, those that arrive do not wait
WC_D void bar_sync(int id, int n) { asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory"); }
WC_D void bar_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory"); }
// __syncthreads_or for a CTA whose warpgroups reach it from different branches
WC_D bool cta_or(bool v) {
    u32 r;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, 0, p;\nselp.u32 %0, 1, 0, q;\n}"
                 : "=r"(r) : "r"((u32)v) : "memory");
    return r != 0;
}

// the smallest tf32 value at or above x (x ≥ 0 or +inf; a carry into the exponent gives +inf)
WC_D float tf32_up(float x) { return __uint_as_float((__float_as_uint(x) + 0x1FFFu) & 0xFFFFE000u); }

// one MUFU op; its few-ulp error is inside C_EVAL_SLACK (docs/certificate.md §9, step 6), and
// sqrt(0) = 0 needs no guard (u·rsqrt(u) did)
WC_D float sqrt_approx(float x) {
    float r;
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

WC_D float xt_quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

WC_D float xt_quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- A: dequantize one half-row item — side (0: K, 1: V), token `at` of the tile, half `hf` —
// from its raw codes `raws` (4 × 16 bytes, read only when valid) and its two groups' fp16 scales
// `sc` into tile `tl` (shared memory, or a workspace image): K into exact fp16 operands, V into x̂
// rounded to fp16, the scales into the c_t operands.  An invalid item (past the request, or on a
// bad page) is zero-filled; a non-finite scale of a valid one sets `poisoned`.
// The prepass (extend_tc_dequant, wgmma path) and the mma.sync path's in-kernel dequantization
// both run this, so a tile's bits do not depend on which one built it.
WC_D void xt_dequant(XtTile& tl, const int4* raws, u32 sc, bool valid, u32 slot, int side, int at, int hf,
                     u32 ctr2, u32 k0, u32 k1, bool& poisoned) {
    float sb[2];
    {
#pragma unroll
        for (int gg = 0; gg < 2; ++gg) {
            sb[gg] = valid ? f16_to_f32((u16)(sc >> (16 * gg))) : 0.0f;
            if (!(sb[gg] <= WC_F32_MAX)) poisoned = true;
            if (side == 0) {
                tl.sk[2 * hf + gg][at] = sb[gg];
                // an fp16 scale is exact in tf32; its square is rounded up
                tl.skt[at][2 * hf + gg][0] = tf32_up(__fmul_ru(sb[gg], sb[gg]));
                tl.skt[at][2 * hf + gg][1] = sb[gg];
            }
        }
    }
#pragma unroll 2  // two Philox calls in flight per thread
    for (int k = 0; k < 4; ++k) {
        const int chunk = hf * 4 + k;  // 16 channels per 8-bit Philox call (SPEC §2)
        // the half-row's channels c, c + 8 of this call sit in two 8-channel blocks
        const int c = hf * 64 + 16 * k;
        u16* b0 = side == 0 ? tl.kc : tl.vh;
        uint4* d0a = reinterpret_cast<uint4*>(&b0[xt_off(at, c)]);
        uint4* d0b = reinterpret_cast<uint4*>(&b0[xt_off(at, c + 8)]);
        uint4* d1a = reinterpret_cast<uint4*>(&tl.kx[xt_off(at, c)]);
        uint4* d1b = reinterpret_cast<uint4*>(&tl.kx[xt_off(at, c + 8)]);
        if (!valid) {
            *d0a = *d0b = make_uint4(0u, 0u, 0u, 0u);
            if (side == 0) *d1a = *d1b = make_uint4(0u, 0u, 0u, 0u);
            continue;
        }
        const int4 raw = raws[k];
        const u32x4 wr = philox10(slot, dither_ctr1(side, chunk), ctr2, 0u, k0, k1);
        const u32 cw[4] = {(u32)raw.x, (u32)raw.y, (u32)raw.z, (u32)raw.w};
        const u32 xw[4] = {wr.x, wr.y, wr.z, wr.w};
        if (side == 0) {
            u32 kh[8], xh[8];
            tc_k_operands(cw, xw, kh, xh);
            *d0a = make_uint4(kh[0], kh[1], kh[2], kh[3]);
            *d0b = make_uint4(kh[4], kh[5], kh[6], kh[7]);
            *d1a = make_uint4(xh[0], xh[1], xh[2], xh[3]);
            *d1b = make_uint4(xh[4], xh[5], xh[6], xh[7]);
        } else {
            const float sbv = k < 2 ? sb[0] : sb[1], nsb = -sbv * 0.001953125f;
            u32 vhw[8];
            tc_v_fp16(cw, xw, sbv, nsb, vhw);
            *d0a = make_uint4(vhw[0], vhw[1], vhw[2], vhw[3]);
            *d0b = make_uint4(vhw[4], vhw[5], vhw[6], vhw[7]);
        }
    }
}

// ---- The wgmma path's prepass: tile image gi of the call — request img_req[gi], tokens from
// XT_TILE·img_tile[gi] — for kv head blockIdx.y, dequantized once by xt_dequant (one half-row item
// per thread, as the in-kernel path) straight into work[gi·H + h], which has the layout of a shared
// tile, so that stage 1 takes it with one bulk copy.  bad_tokens[gi·H + h] gets bit t for each
// token t below the request's length whose page id is outside the pool or one of whose scales is
// not finite; such a token, and every token past the request's end, is stored as zeros (as the
// in-kernel path stores what it does not read).  Grid (images, H), 256 threads.
__global__ void __launch_bounds__(4 * XT_TILE) extend_tc_dequant(
    const i8* __restrict__ codes, const u16* __restrict__ scales, const int* __restrict__ kv_indptr,
    const int* __restrict__ kv_indices, const int* __restrict__ kv_last_page_len, const int* __restrict__ img_req,
    const int* __restrict__ img_tile, XtTile* __restrict__ work, u64* __restrict__ bad_tokens, i64 N, int H,
    int layer, int head_base, int page_shift, int num_pages, int nnz, u32 k0, u32 k1) {
    __shared__ u32 bad[2];  // a bit per token
    const int gi = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int side = tid >> 7, at = (tid & 127) >> 1, hf = tid & 1;
    if (tid < 2) bad[tid] = 0u;
    const RequestPages rp = request_pages(kv_indptr, kv_last_page_len, img_req[gi], nnz, page_shift);
    const i64 S = rp.poisoned ? 0 : rp.S;
    const i64 tok = (i64)img_tile[gi] * XT_TILE + at;
    // below S, the page's entry lies inside the request's (checked) range of kv_indices
    const i64 sl = tok < S ? slot_of(kv_indices[rp.p0 + (int)(tok >> page_shift)], tok, page_shift, num_pages)
                           : (i64)-1;
    bool valid = sl >= 0;
    const i64 row = pool_row(layer, side, H, h, N) + (valid ? sl : 0);
    const u32 sc = valid ? *reinterpret_cast<const u32*>(scales + row * XT_NG + 2 * hf) : 0u;
    const bool bad_item = tok < S && (!valid || !(f16_to_f32((u16)sc) <= WC_F32_MAX) ||
                                      !(f16_to_f32((u16)(sc >> 16)) <= WC_F32_MAX));
    __syncthreads();  // (bad[] zeroed)
    if (bad_item) atomicOr(&bad[at >> 5], 1u << (at & 31));
    __syncthreads();
    valid = valid && !(bad[at >> 5] >> (at & 31) & 1u);  // all of a bad token's items are zeros
    bool ignored = false;  // (a bad scale is in bad[] already)
    xt_dequant(work[(i64)gi * H + h], reinterpret_cast<const int4*>(codes + row * XT_D + hf * 64), sc, valid,
               (u32)(valid ? sl : 0), side, at, hf, dither_ctr2(layer, h + head_base), k0, k1, ignored);
    if (tid == 0) bad_tokens[(i64)gi * H + h] = (u64)bad[1] << 32 | bad[0];
}
// the launch layer reads this number from here (the workspace holds one image per tile and kv head)
#define XT_IMAGE_BYTES 52224
static_assert(sizeof(XtTile) == XT_IMAGE_BYTES && XT_IMAGE_BYTES % 16 == 0,
              "a tile image is an XtTile, moved as 16-byte pieces and by one bulk copy");

// 8 warps: 128 rows, 1 CTA per SM.  (4 warps, 2 CTAs per SM, measured 13% slower: each
// dequantized tile then serves half the rows; docs/performance.md.)
template <int G>
__global__ void __launch_bounds__(XT_THREADS, 1) extend_tc_stage1(
    const float* __restrict__ q, const i8* __restrict__ codes, const u16* __restrict__ scales,
    const int* __restrict__ qo_indptr, const int* __restrict__ tile_req, const int* __restrict__ tile_q0,
    const int* __restrict__ kv_indptr, const int* __restrict__ kv_indices, const int* __restrict__ kv_last_page_len,
    float* __restrict__ o_part, float* __restrict__ lse_part, float* __restrict__ lam_part,
    float* __restrict__ cmax_part, float* __restrict__ gam_part, const XtTile* __restrict__ work, const u64* __restrict__ bad_tokens,
    const int* __restrict__ img_base, const int* __restrict__ img_count, i64 N, int H, int layer, int head_base,
    int page_shift, int num_pages, int nnz, int num_splits, int causal, int tier, u32 k0, u32 k1, float sm,
    float log_budget, float beta_steps, float gamma_steps) {
    constexpr int D = XT_D;
    constexpr int QT = XT_ROWS / G;  // new tokens per tile
    extern __shared__ __align__(16) unsigned char xt_raw[];
    XtShared& sh = *reinterpret_cast<XtShared*>(xt_raw);

    const int tile = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int grp = lane >> 2, tig = lane & 3;
    const int wr0 = warp * 16;
    const int Hq = H * G;
    const int ps = 1 << page_shift;

    // ---- the request: page table checked before use (as the decode kernels)
    const int b = tile_req[tile], qa0 = tile_q0[tile];
    const int qo0 = qo_indptr[b], qo1 = qo_indptr[b + 1];
    const RequestPages rp = request_pages(kv_indptr, kv_last_page_len, b, nnz, page_shift);
    const i64 S = rp.S;
    bool poisoned = rp.poisoned;
    const int n_new = qo1 - qo0;
    poisoned = poisoned || n_new < 0 || (i64)n_new > S;
    const int nq = max(0, min(QT, qo1 - qa0));  // queries of this tile
    // the tile's longest row sets the split ranges
    const i64 lmax = poisoned || nq == 0 ? 0 : (causal ? S - n_new + (qa0 + nq - 1 - qo0) + 1 : S);
    const int npg = (int)((lmax + ps - 1) >> page_shift);
    // pages per split, a whole number of tiles: every split starts at a tile image's first token
    const int tpg = max(1, XT_TILE >> page_shift);
    const int pps = ((npg + num_splits - 1) / max(num_splits, 1) + tpg - 1) / tpg * tpg;
    const i64 ta = (i64)min(s * pps, npg) << page_shift;
    const i64 tb = min((i64)min(s * pps + pps, npg) << page_shift, lmax);

    // ---- rows: scaled query split into two fp16 parts, certificate coefficients per group
    if (tid < XT_CONSUMER_THREADS) {
        const int r = tid >> 1, hf = tid & 1;
        const int tok = r / G, g = r % G;
        const bool rv = tok < nq;
        const int qi = qa0 + tok;
        // two passes over the half-row (the second from L1): its maximum, then each 32-channel group,
        // so that 32 values are live at a time (64 spilled within a 384-thread launch's 168 registers)
        const float4* src = reinterpret_cast<const float4*>(q + ((i64)qi * Hq + h * G + g) * D + hf * 64);
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            const float4 v = rv ? src[i] : make_float4(0.f, 0.f, 0.f, 0.f);
            amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        }
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        // (a non-finite query row poisons itself alone: its NaN stays in its own rows of the
        // products, and its coefficients, non-finite too, give it an infinite certificate below)
        int e = 0;
        frexpf(amax, &e);
        const int shift = WC_TC_QUERY_EXPONENT - e;  // max |q|·2^shift ∈ [2^14, 2^15): qh, ql stay normal
        // C_EVAL_SLACK·log2(e) and its square, rounded up: c_t in log2 units, slack included
        const float k1 = __fmul_ru((float)WC_C_EVAL_SLACK, XT_LOG2E_UP), k2 = __fmul_ru(k1, k1);
        const float log_term = log_budget + logf((float)max(rv ? (causal ? S - n_new + (qi - qo0) + 1 : S) : 0,
                                                            (i64)1));
        const SmSplit smx = sm_split(sm);
        double rho2 = 0.0;
#pragma unroll
        for (int gg = 0; gg < 2; ++gg) {
            float x[32];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float4 v = rv ? src[8 * gg + i] : make_float4(0.f, 0.f, 0.f, 0.f);
                x[4 * i] = v.x;
                x[4 * i + 1] = v.y;
                x[4 * i + 2] = v.z;
                x[4 * i + 3] = v.w;
            }
            float e1 = 0.0f, e2 = 0.0f;
#pragma unroll
            for (int i = 0; i < 32; i += 2) {
                u32 hw = 0, lw = 0;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const float v = x[i + j];
                    const float qs = ldexpf(v, shift);  // exact (power of two)
                    u16 hb, lb;
                    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hb) : "f"(qs));
                    const float r1 = __fsub_rn(qs, f16_to_f32(hb));  // exact: qh is qs rounded
                    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(lb) : "f"(r1));
                    const float r2 = __fsub_rn(r1, f16_to_f32(lb));  // exact likewise
                    hw |= (u32)hb << (16 * j);
                    lw |= (u32)lb << (16 * j);
                    e1 += fabsf(r1);
                    e2 += fabsf(r2);
                }
                *reinterpret_cast<u32*>(&sh.qh[xt_off(r, hf * 64 + gg * 32 + i)]) = hw;
                *reinterpret_cast<u32*>(&sh.ql[xt_off(r, hf * 64 + gg * 32 + i)]) = lw;
            }
            // c_t's operands for the tensor cores (docs/certificate.md §9, step 6; §10): the group's
            // Σq², Σ|q| on its own normalized query (SPEC §4.2), the split's residual sums (row-scaled
            // by 2^shift) and the tensor cores' accumulation with the fp32 group combination
            // (gamma_steps per unit of sm·s_g·Q1_g, SPEC §4.1), each back by its power of two; in log2
            // units with the evaluation slack folded in, products rounded up, then rounded up to tf32
            float gmx = 0.0f, q1 = 0.0f, q2 = 0.0f;  // (certificate.cuh's normalized_sums, in registers)
#pragma unroll
            for (int i = 0; i < 32; ++i) gmx = fmaxf(gmx, fabsf(x[i]));
            int eg;
            frexpf(gmx, &eg);
            if (!(gmx <= WC_F32_MAX)) eg = 0;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                const float v = ldexpf(x[i], -eg);
                q2 += v * v;
                q1 += fabsf(v);
            }
            const float cu2 = coef_up(2.0f * (smx.m * smx.m / 12.0f) * q2 * log_term, 2 * (smx.e + eg), WC_COEF_FLOOR_2);
            const float cres = coef_up(smx.m * (WC_TC_CODE_BOUND * e2 + WC_TC_XI_BOUND * e1), smx.e - shift,
                                       WC_COEF_FLOOR_1);
            const float cg = __fadd_ru(coef_up(smx.m * q1 * gamma_steps, smx.e + eg, WC_COEF_FLOOR_1), cres);
            const float cb = __fadd_ru(coef_up(smx.m * q1 * beta_steps, smx.e + eg, WC_COEF_FLOOR_1), cg);
            sh.rowc[r][2 * hf + gg] = tf32_up(__fmul_ru(cu2, k2));
            sh.rowc[r][4 + 2 * hf + gg] = tf32_up(__fmul_ru(cb, k1));
            // the evaluation term's share, Σ_g cg²/cu2 (Cauchy–Schwarz: γ_t ≤ u_t·sqrt of it)
            rho2 = __dadd_ru(rho2, sq_ratio_up(cg, cu2));  // (float64: certificate.cuh)
        }
        rho2 = __dadd_ru(rho2, __shfl_xor_sync(0xffffffffu, rho2, 1));  // the row's other half
        if (hf == 0) {
            sh.rowc[r][8] = ldexpf(sm * XT_LOG2E, -shift);
            sh.rowc[r][10] = rho_up(rho2, 1.0f, 1.0f);
            sh.rowlen[r] = rv ? (int)(causal ? S - n_new + (qi - qo0) + 1 : S) : 0;
            sh.rowout[r] = rv ? qi * Hq + h * G + g : -1;
        }
#if XT_WGMMA
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the tensor cores read qh, ql
#endif
    }
#if XT_WGMMA
    if (tid == XT_CONSUMER_THREADS) {  // one arrival (the copying thread's) per phase
        mbar_init(smem_addr(&sh.tile_tx[0]), 1);
        mbar_init(smem_addr(&sh.tile_tx[1]), 1);
        mbar_fence_init();
    }
#endif
    __syncthreads();

    // A row with an infinite c_t coefficient (a query whose Σq² overflows) gets an infinite certificate
    // and zero operands, so that no 0·inf reaches the tensor cores (flag in rowc[r][9])
    if (tid < XT_ROWS) {
        bool bad = false;
#pragma unroll
        for (int i = 0; i < 8; ++i) bad = bad || !(sh.rowc[tid][i] <= WC_F32_MAX);
        if (bad) {
#pragma unroll
            for (int i = 0; i < 8; ++i) sh.rowc[tid][i] = 0.0f;
        }
        sh.rowc[tid][9] = bad ? 1.0f : 0.0f;
    }
    __syncthreads();

#if XT_WGMMA
    // ---- the producers (warpgroups 2 and 3): tile i into buffer i & 1 once the rows have released
    // it (after tile i − 2), as one bulk copy of the tile image that extend_tc_dequant built (each
    // request's tiles dequantized once per call, where every CTA of a kv head dequantizing its own
    // copy cost 1.2 ms of 6.9 at 2048 × 30k: docs/performance.md).  One thread issues the
    // copy and waits for its bytes; the others hand the buffer over at once (the full barrier still
    // waits for that thread).  A bad page id or non-finite scale below tb in the tile poisons the
    // split, as the in-kernel dequantization does.  Their registers go to the rows.
    if (tid >= XT_CONSUMER_THREADS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(XT_PRODUCER_REGS));
        const bool lead = tid == XT_CONSUMER_THREADS;
        const int ib = lead ? img_base[b] : 0, ic = lead ? img_count[b] : 0;
        int pb = 0;
        for (i64 t0 = ta; t0 < tb; t0 += XT_TILE, pb ^= 1) {
            if (t0 >= ta + 2 * XT_TILE) bar_sync(XT_BAR_EMPTY(pb), XT_THREADS);
            if (lead) {
                const u32 bar = smem_addr(&sh.tile_tx[pb]);
                const i64 img = t0 / XT_TILE;  // ta is a multiple of XT_TILE (the split rule above)
                if (img < ic) {
                    const i64 gi = ((i64)ib + img) * H + h;
                    mbar_expect_tx(bar, (u32)sizeof(XtTile));
                    bulk_copy_g2s(smem_addr(&sh.tile[pb]), work + gi, (u32)sizeof(XtTile), bar);
                    const i64 nv = tb - t0;  // the tile's tokens this split reads
                    if (bad_tokens[gi] & (nv >= XT_TILE ? ~0ull : (1ull << nv) - 1ull)) poisoned = true;
                } else {
                    // the plan holds no image for this tile (its page table changed since): poisoned,
                    // and the phase completes with nothing copied
                    poisoned = true;
                    mbar_expect_tx(bar, 0u);
                }
                mbar_wait(bar, (u32)((t0 - ta) / (2 * XT_TILE)) & 1u);
            }
            bar_arrive(XT_BAR_FULL(pb), XT_THREADS);
        }
        cta_or(poisoned);
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(XT_CONSUMER_REGS));
#else
    // Dequantization item of this thread: side tid >> 7, token (tid & 127) >> 1, half-row tid & 1, so
    // a warp's items share one side.  The next tile's codes and scales travel by cp.async into
    // staging while a tile is computed; their page ids are loaded before that.  Why: each tile's two
    // dependent global round trips (page id, then codes) otherwise stall the SM.
    const int side = tid >> 7, at = (tid & 127) >> 1, hf = tid & 1;
    const u32 ctr2 = dither_ctr2(layer, h + head_base);
    // pool_row(layer, 0 / 1, H, h, N), written out: through the helper ptxas allocates this path's
    // registers differently (cubin compared), and this path was measured as it is
    const i64 rowK = (((i64)layer * 2 + 0) * H + h) * N, rowV = (((i64)layer * 2 + 1) * H + h) * N;
    // the staged item: whether this thread's token exists, and its slot (below 2^32: SPEC §2, ctr0)
    bool staged_valid = false;
    u32 staged_slot = 0;
    int pg_next = 0;
    auto page_of = [&](i64 t0n) {
        const i64 tok = t0n + at;
        return tok < tb ? kv_indices[rp.p0 + (int)(tok >> page_shift)] : 0;
    };
    auto issue = [&](i64 t0n) {
        const i64 tok = t0n + at;
        i64 sl = tok < tb ? slot_of(pg_next, tok, page_shift, num_pages) : 0;
        const bool valid = tok < tb && sl >= 0;
        if (sl < 0) {
            poisoned = true;
            sl = 0;
        }
        staged_valid = valid;
        staged_slot = (u32)sl;
        if (valid) {
            const i64 row = (side ? rowV : rowK) + sl;
            const int4* src = reinterpret_cast<const int4*>(codes + row * D + hf * 64);
#pragma unroll
            for (int k = 0; k < 4; ++k) cp_async16(&sh.stg[side][at][hf * 4 + k], src + k);
            cp_async4(&sh.stg_sc[side][at][hf], scales + row * XT_NG + 2 * hf);
        }
        cp_async_commit();
    };
    // ---- A: dequantize the staged half-row into buffer `buf` (xt_dequant).  A thread reads only the
    // staging entries it copied itself, so its own cp.async wait is all the staging needs.
    auto dequant = [&](int buf) {
        xt_dequant(sh.tile[buf], &sh.stg[side][at][hf * 4], sh.stg_sc[side][at][hf], staged_valid, staged_slot, side,
                   at, hf, ctr2, k0, k1, poisoned);
    };

    if (ta < tb) {
        pg_next = page_of(ta);
        issue(ta);
        cp_async_wait_all();
        dequant(0);
        if (ta + XT_TILE < tb) {
            pg_next = page_of(ta + XT_TILE);
            issue(ta + XT_TILE);
        }
    }
    __syncthreads();
#endif

    // ---- the consumers: this warp's 16 rows; this thread holds rows grp and grp + 8 of them.  Per-row
    // constants stay in shared memory and are read per tile (in registers they cost a spill).
    float o[16][4];
#pragma unroll
    for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, l2[2] = {0.f, 0.f};
    float cmx[2] = {0.f, 0.f};  // max c_t, log2 units

    // a group's logits before its scale (two for the wgmma path, whose first product of a group
    // overwrites them: zeroed once so that they are never undefined)
    float acc[1 + XT_WGMMA][8][4];
#pragma unroll
    for (int b = 0; b <= XT_WGMMA; ++b)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) acc[b][nt][0] = acc[b][nt][1] = acc[b][nt][2] = acc[b][nt][3] = 0.0f;
    int buf = 0;
    for (i64 t0 = ta; t0 < tb; t0 += XT_TILE, buf ^= 1) {
        const XtTile& tl = sh.tile[buf];
#if XT_WGMMA
        bar_sync(XT_BAR_FULL(buf), XT_THREADS);
        // the copy's phase completed before its thread arrived: this returns at once, and makes the
        // bytes the copy unit wrote visible to this thread as well
        mbar_wait(smem_addr(&sh.tile_tx[buf]), (u32)((t0 - ta) / (2 * XT_TILE)) & 1u);
#endif

        // ---- B: logits of 16 rows × 64 tokens per warp: per group, three products per k16 step, then
        // the group's scale per token
        float S[8][4];
#if XT_WGMMA
        // the warpgroup's 64 rows × 64 tokens per instruction, Q and K read by the tensor cores; a
        // group's six products run while the previous group is scaled (two accumulators)
        {
            const u32 q_rows = (u32)(warp >> 2) * 64 / 8 * XT_TOKEN_GROUP_BYTES;
            const u32 qh0 = wg_desc_lo(smem_addr(sh.qh) + q_rows, XT_CHANNEL_BLOCK_BYTES),
                      ql0 = wg_desc_lo(smem_addr(sh.ql) + q_rows, XT_CHANNEL_BLOCK_BYTES);
            const u32 kc0 = wg_desc_lo(smem_addr(tl.kc), XT_CHANNEL_BLOCK_BYTES),
                      kx0 = wg_desc_lo(smem_addr(tl.kx), XT_CHANNEL_BLOCK_BYTES);
            auto issue_group = [&](int gg, float (&a)[8][4]) {
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < 2; ++kk) {
                    const u32 off = (4 * gg + 2 * kk) * XT_CHANNEL_BLOCK_BYTES;  // channels 32gg + 16kk
                    const u64 dqh = wg_desc_at(qh0, XT_TOKEN_GROUP_BYTES, off);
                    const u64 dql = wg_desc_at(ql0, XT_TOKEN_GROUP_BYTES, off);
                    const u64 dk = wg_desc_at(kc0, XT_TOKEN_GROUP_BYTES, off);
                    const u64 dx = wg_desc_at(kx0, XT_TOKEN_GROUP_BYTES, off);
                    if (kk == 0)
                        wg_qk_ss<0>(a, dqh, dk);
                    else
                        wg_qk_ss<1>(a, dqh, dk);
                    wg_qk_ss<1>(a, dql, dk);
                    wg_qk_ss<1>(a, dqh, dx);
                }
                wg_commit();
            };
            issue_group(0, acc[0]);
#pragma unroll
            for (int gg = 0; gg < XT_NG; ++gg) {
                if (gg + 1 < XT_NG) {
                    issue_group(gg + 1, acc[(gg + 1) & 1]);
                    wg_wait<1>();  // group gg is done
                } else {
                    wg_wait<0>();
                }
                const float(&ag)[8][4] = acc[gg & 1];
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    const float2 skv = *reinterpret_cast<const float2*>(&tl.sk[gg][8 * nt + 2 * tig]);
                    S[nt][0] = gg == 0 ? __fmul_rn(skv.x, ag[nt][0]) : __fmaf_rn(skv.x, ag[nt][0], S[nt][0]);
                    S[nt][1] = gg == 0 ? __fmul_rn(skv.y, ag[nt][1]) : __fmaf_rn(skv.y, ag[nt][1], S[nt][1]);
                    S[nt][2] = gg == 0 ? __fmul_rn(skv.x, ag[nt][2]) : __fmaf_rn(skv.x, ag[nt][2], S[nt][2]);
                    S[nt][3] = gg == 0 ? __fmul_rn(skv.y, ag[nt][3]) : __fmaf_rn(skv.y, ag[nt][3], S[nt][3]);
                }
            }
        }
#else
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) S[nt][0] = S[nt][1] = S[nt][2] = S[nt][3] = 0.0f;
#pragma unroll 1  // one group's fragments live at a time (unrolled, ptxas hoists them all and spills)
        for (int gg = 0; gg < XT_NG; ++gg) {
            u32 qa[2][4], qb[2][4];
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
                ldsm_x4(qa[kk], &sh.qh[xt_off(wr0 + (lane & 15), 32 * gg + 16 * kk + (lane >> 4) * 8)]);
                ldsm_x4(qb[kk], &sh.ql[xt_off(wr0 + (lane & 15), 32 * gg + 16 * kk + (lane >> 4) * 8)]);
            }
            float(&ac)[8][4] = acc[0];
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                ac[nt][0] = ac[nt][1] = ac[nt][2] = ac[nt][3] = 0.0f;
                u32 kb[4], xb[4];
                ldsm_x4(kb, &tl.kc[xt_off(8 * nt + (lane & 7), 32 * gg + (lane >> 3) * 8)]);
                ldsm_x4(xb, &tl.kx[xt_off(8 * nt + (lane & 7), 32 * gg + (lane >> 3) * 8)]);
                mma_f16(ac[nt], qa[0], kb[0], kb[1]);
                mma_f16(ac[nt], qb[0], kb[0], kb[1]);
                mma_f16(ac[nt], qa[0], xb[0], xb[1]);
                mma_f16(ac[nt], qa[1], kb[2], kb[3]);
                mma_f16(ac[nt], qb[1], kb[2], kb[3]);
                mma_f16(ac[nt], qa[1], xb[2], xb[3]);
            }
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const float2 skv = *reinterpret_cast<const float2*>(&tl.sk[gg][8 * nt + 2 * tig]);
                S[nt][0] = __fmaf_rn(skv.x, ac[nt][0], S[nt][0]);
                S[nt][1] = __fmaf_rn(skv.y, ac[nt][1], S[nt][1]);
                S[nt][2] = __fmaf_rn(skv.x, ac[nt][2], S[nt][2]);
                S[nt][3] = __fmaf_rn(skv.y, ac[nt][3], S[nt][3]);
            }
        }
#endif

        // ---- C, D: online softmax, c_t and λ, o += P·V̂.  A warp whose rows attend every token of
        // the tile (all but a request's last tiles) takes the unmasked instance; both compute the same
        // bits for every token they share, so a row's result does not depend on its warp's other rows.
        const float rsc[2] = {sh.rowc[wr0 + grp][8], sh.rowc[wr0 + grp + 8][8]};
        // a row attends the tile's tokens below min(its length, the split's end): the tile's valid
        // tokens are a prefix (a bad page id poisons the whole split, so its zeros never count)
        const int rl[2] = {sh.rowlen[wr0 + grp], sh.rowlen[wr0 + grp + 8]};
        const i64 lim[2] = {min(tb, (i64)rl[0]), min(tb, (i64)rl[1])};
        // rows without a query (rl = 0) never store, so they do not hold the warp on the masked path
        const bool full = __all_sync(0xffffffffu, (rl[0] == 0 || t0 + XT_TILE <= lim[0]) &&
                                                                      (rl[1] == 0 || t0 + XT_TILE <= lim[1]));
        u32 pa[4][4];  // P in fp16, the A fragments of the four k16 steps of P·V̂
        // called with a constant: each call site is inlined and folds MASK (no generic lambda: NVRTC
        // takes those for host functions)
        auto tile_step = [&](const bool MASK) {
            float tmx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int rr = e >> 1, tl = 8 * nt + 2 * tig + (e & 1);
                    if (MASK && !(t0 + tl < lim[rr])) S[nt][e] = -INFINITY;
                    tmx[rr] = fmaxf(tmx[rr], S[nt][e]);
                }
            }
            // S is ℓ̃ before its row scale (positive, so the scaled maximum is the maximum scaled)
            float mn[2], nmn[2];
#pragma unroll
            for (int rr = 0; rr < 2; ++rr) {
                mn[rr] = fmaxf(m[rr], __fmul_rn(xt_quad_max(tmx[rr]), rsc[rr]));  // log2 units
                const float scl = mn[rr] == -INFINITY ? 1.0f : exp2f(m[rr] - mn[rr]);
                l[rr] *= scl;
                l2[rr] *= scl;  // λ's sum shares the softmax's reference maximum
                m[rr] = mn[rr];
                nmn[rr] = -mn[rr];
                tmx[rr] = scl;
            }
            if (!__all_sync(0xffffffffu, tmx[0] == 1.0f && tmx[1] == 1.0f)) {  // most tiles keep their maxima
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    o[i][0] *= tmx[0];
                    o[i][1] *= tmx[0];
                    o[i][2] *= tmx[1];
                    o[i][3] *= tmx[1];
                }
            }
            // c_t's A operands: rows grp and grp + 8, group tig (u², then β coefficients)
            const u32 ca[4] = {__float_as_uint(sh.rowc[wr0 + grp][tig]), __float_as_uint(sh.rowc[wr0 + grp + 8][tig]),
                               __float_as_uint(sh.rowc[wr0 + grp][4 + tig]),
                               __float_as_uint(sh.rowc[wr0 + grp + 8][4 + tig])};
            // per k16 step of 16 tokens: probabilities, c_t and λ; the C fragments of token tiles 2kk
            // and 2kk+1 are the A fragment of P·V̂
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int nt = 2 * kk + half;
                    // c_t for the 16 × 8 block by the tensor cores: u² = Σ_g a2_g·s_g², β = Σ_g a1_g·s_g
                    float u2[4] = {0.f, 0.f, 0.f, 0.f}, be[4] = {0.f, 0.f, 0.f, 0.f};
                    if (tier) {
                        const float2 sv = *reinterpret_cast<const float2*>(&tl.skt[8 * nt + grp][tig][0]);
                        mma_tf32_k4(u2, ca[0], ca[1], __float_as_uint(sv.x));
                        mma_tf32_k4(be, ca[2], ca[3], __float_as_uint(sv.y));
                    }
                    float p[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int rr = e >> 1;
                        const float d = __fmaf_rn(S[nt][e], rsc[rr], nmn[rr]);  // ℓ̃ − m, log2 units
                        p[e] = (MASK && mn[rr] == -INFINITY) ? 0.0f : exp2f(d);
                        l[rr] += p[e];
                        if (tier && (!MASK || S[nt][e] != -INFINITY)) {
                            // c_t·slack·log2(e); an infinite u² or β gives +inf, "no guarantee"
                            const float c2 = __fadd_rn(sqrt_approx(u2[e]), be[e]);
                            cmx[rr] = fmaxf(cmx[rr], c2);
                            // e^{ℓ̃ + c} relative to the softmax maximum: overflow gives +inf (sound);
                            // terms below 2^-126 of the maximum vanish
                            l2[rr] += exp2f(__fadd_rn(c2, d));
                        }
                    }
                    pa[kk][2 * half] = pack_f16x2(p[0], p[1]);
                    pa[kk][2 * half + 1] = pack_f16x2(p[2], p[3]);
                }
            }
        };
        if (full)
            tile_step(false);
        else
            tile_step(true);
        // o += P·V̂, outside the two instances (a wgmma is one instruction for all four warps)
#if XT_WGMMA
        wg_fence();
        const u32 vh0 = wg_desc_lo(smem_addr(tl.vh), XT_TOKEN_GROUP_BYTES);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wg_pv(o, pa[kk], wg_desc_at(vh0, XT_CHANNEL_BLOCK_BYTES, kk * 2 * XT_TOKEN_GROUP_BYTES));
        wg_commit();
#else
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int np = 0; np < 8; ++np) {  // V̂ fragments by transposed ldmatrix
                u32 vb[4];
                ldsm_x4_trans(vb, &tl.vh[xt_off(16 * kk + (lane & 7) + ((lane >> 3) & 1) * 8, 16 * np + (lane >> 4) * 8)]);
                mma_f16(o[2 * np], pa[kk], vb[0], vb[1]);
                mma_f16(o[2 * np + 1], pa[kk], vb[2], vb[3]);
            }
        }
#endif
#if XT_WGMMA
        // P·V̂ done: its registers and this buffer are free.  (Waiting for it under the next tile's
        // logits instead makes ptxas serialize every wgmma, C7514.)
        wg_wait<0>();
        if (t0 + 2 * XT_TILE < tb) bar_arrive(XT_BAR_EMPTY(buf), XT_THREADS);  // the producers' next use
#else
        // the next tile into the other buffer (last read before the previous barrier), its successor's
        // codes into the staging, while this tile's P·V̂ runs on the tensor cores
        if (t0 + XT_TILE < tb) {
            // the page ids of the tile after next: their load overlaps the dequantization
            pg_next = t0 + 2 * XT_TILE < tb ? page_of(t0 + 2 * XT_TILE) : 0;
            cp_async_wait_all();
            dequant(buf ^ 1);
            if (t0 + 2 * XT_TILE < tb) issue(t0 + 2 * XT_TILE);
        }
        __syncthreads();  // the next tile's buffer is complete; this one may be overwritten
#endif
    }

    // ---- outputs
    poisoned = cta_or(poisoned);
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
        const int ro = sh.rowout[wr0 + grp + 8 * rr];
        const float L = xt_quad_sum(l[rr]), L2 = xt_quad_sum(l2[rr]);
        // max c_t back to natural units, rounded up; a row with an infinite coefficient that attended
        // a token has an infinite certificate
        const bool CI = tier && sh.rowc[wr0 + grp + 8 * rr][9] != 0.0f && L > 0.0f;
        const float CM = CI ? INFINITY : __fmul_ru(xt_quad_max(cmx[rr]), XT_LN2);
        if (ro < 0) continue;
        const i64 row = (i64)ro * num_splits + s;
#pragma unroll
        for (int nt = 0; nt < 16; ++nt) {
            float2 v;
            v.x = poisoned ? NAN : (L == 0.0f ? 0.0f : o[nt][2 * rr] / L);
            v.y = poisoned ? NAN : (L == 0.0f ? 0.0f : o[nt][2 * rr + 1] / L);
            *reinterpret_cast<float2*>(o_part + row * D + 8 * nt + 2 * tig) = v;
        }
        if (tig == 0) {
            // an infinite c_t, or a sum that overflowed (or went NaN rescaling an overflow): +inf
            const float lam = !tier ? -INFINITY
                                    : ((CI || !(L2 <= WC_F32_MAX))
                                           ? INFINITY
                                           : (L2 > 0.0f ? __fmaf_rn(m[rr], XT_LN2, logf(L2)) : -INFINITY));
            // Γ_s ≤ rho·cmax (docs/certificate.md §10.4)
            const float GM = tier ? gamma_of_rho(sh.rowc[wr0 + grp + 8 * rr][10], CM) : 0.0f;
            store_split_stats(row, poisoned, L, __fmaf_rn(m[rr], XT_LN2, logf(L)), lam, CM, GM, lse_part, lam_part,
                              cmax_part, gam_part);
        }
    }
}

#define WC_XT_INST(G)                                                                                          \
    template __global__ void extend_tc_stage1<G>(const float*, const i8*, const u16*, const int*, const int*, \
                                                    const int*, const int*, const int*, const int*, float*, float*, \
                                                    float*, float*, float*, const XtTile*, const u64*, const int*, \
                                                    const int*, i64, int, int, int, int, int, int, int, int, int,  \
                                                    u32, u32, float, float, float, float);
#ifdef WITCERT_INSTANTIATE_ALL
WC_XT_INST(1)
WC_XT_INST(2)
WC_XT_INST(3)
WC_XT_INST(4)
WC_XT_INST(5)
WC_XT_INST(6)
WC_XT_INST(7)
WC_XT_INST(8)
#endif
