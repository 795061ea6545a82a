// bench_floor.cu — the arithmetic floor of a certified INT8 decode, for bench/decode_floor.py
// (issue 5: "if a goal is out of reach, the notes must show the measured floor and why").
//
// Each level streams a KV cache laid out like one layer of the pool (rows of 128 int8 codes, NG
// fp16 scales per row) with 16-byte loads and does strictly less work per element than any decode
// that meets SPEC §2–§6, so its time lower-bounds every such kernel on the same bytes:
//   L0: the loads only (codes + scales, XOR-folded): the bytes floor;
//   L1: + one Philox4x32-10 call per 16 codes (SPEC §2: the dither stream at 8 bits); L1_16 and
//       L1_24 the same with 2 and 4 calls per 16 codes (the stream at 16- and 24-bit dither);
//   L2: + x̂ = fl(s·(k − ξ)) in fp32 (dequant.cuh: the shipped 4 instructions per element);
//   L3: + G fp32 FMAs per element (a decode multiplies each K̂ element by G query heads and each V̂
//       element by G probabilities; here into G·4 register accumulators: no shared memory, no
//       reductions, no softmax, no certificate).
// A thread takes half a row (64 channels, 4 Philox calls), grid-stride.  The sink is written so
// nothing is dead code; its value means nothing.
// The fp16-store ladder (bench_floor_f16_*) does the same for rows of 128 fp16 values (an
// Fp16Pool): F0 the loads; F1 + the fp32 conversion; F3 + G fp32 FMAs per element.
// The tensor-core ladder (bench_floor_tc_*, below) is not a floor of SPEC §6: it measures what a
// decode under docs/certificate.md §9's operands could reach.
#include "common.cuh"
#include "philox.cuh"
#include "dequant.cuh"
#include "cp_async.cuh"
#include "tc_operands.cuh"

#define BF_THREADS 256
#define BF_D 128

// the G·4 FMA coefficients (runtime values, so nothing folds) and zeroed accumulators
template <int G>
__device__ __forceinline__ void bf_start(const float* __restrict__ coef, float (&cf)[G][4], float (&acc)[G][4]) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            cf[g][e] = coef[4 * g + e];
            acc[g][e] = 0.0f;
        }
}

// everything a thread computed, into the sink (so no level is dead code)
template <int G>
__device__ __forceinline__ void bf_finish(u32 fold, const float (&acc)[G][4], float* __restrict__ sink) {
    float r = (float)fold;
#pragma unroll
    for (int g = 0; g < G; ++g) r += acc[g][0] + acc[g][1] + acc[g][2] + acc[g][3];
    sink[(i64)blockIdx.x * BF_THREADS + threadIdx.x] = r;
}

// grid-stride item `it`, half a row (64 channels, four 16-channel chunks): its row, its first
// channel, and the chunks' code words and fp16 scales, by 16-byte loads
__device__ __forceinline__ void bf_load_item(const i8* __restrict__ codes, const u16* __restrict__ scales, i64 it,
                                             int NG, int gs_shift, i64& row, int& c0, int4 (&raw)[4],
                                             u16 (&sr)[4]) {
    row = it >> 1;
    c0 = (int)(it & 1) * 64;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        raw[k] = reinterpret_cast<const int4*>(codes + row * BF_D + c0)[k];
        sr[k] = scales[row * NG + ((c0 + 16 * k) >> gs_shift)];
    }
}

// chunk k's code words and the words of its dither calls: CALLS = 1, 2 or 4 per 16 codes at 8-,
// 16- or 24-bit dither (SPEC §2: a 32-bit word holds four 8-bit fields, two 16-bit or one 24-bit
// field); with more than one call their words are XOR-folded, so each call is live
template <int CALLS = 1>
__device__ __forceinline__ void bf_chunk_words(const int4& raw, i64 row, int side, int c0, int k, u32 k0, u32 k1,
                                               u32 (&cw)[4], u32 (&xw)[4]) {
    cw[0] = (u32)raw.x, cw[1] = (u32)raw.y, cw[2] = (u32)raw.z, cw[3] = (u32)raw.w;
    xw[0] = xw[1] = xw[2] = xw[3] = 0u;
#pragma unroll
    for (int r = 0; r < CALLS; ++r) {
        const u32x4 w = philox10((u32)row, dither_ctr1(side, CALLS * ((c0 >> 4) + k) + r), 0u, 0u, k0, k1);
        xw[0] ^= w.x, xw[1] ^= w.y, xw[2] ^= w.z, xw[3] ^= w.w;
    }
}

template <int LEVEL, int G, int CALLS = 1>
__device__ __forceinline__ void bench_floor_body(const i8* __restrict__ codes, const u16* __restrict__ scales,
                                                 i64 rows, int gs_shift, u32 k0, u32 k1,
                                                 const float* __restrict__ coef, float* __restrict__ sink) {
    const int NG = BF_D >> gs_shift;
    float cf[G][4], acc[G][4];
    bf_start<G>(coef, cf, acc);
    u32 fold = 0;
    const i64 items = rows * 2, stride = (i64)gridDim.x * BF_THREADS;
    for (i64 it = (i64)blockIdx.x * BF_THREADS + threadIdx.x; it < items; it += stride) {
        i64 row;
        int c0;
        int4 raw[4];
        u16 sr[4];
        bf_load_item(codes, scales, it, NG, gs_shift, row, c0, raw, sr);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (LEVEL == 0) {
                fold ^= (u32)raw[k].x ^ (u32)raw[k].y ^ (u32)raw[k].z ^ (u32)raw[k].w ^ (u32)sr[k];
                continue;
            }
            u32 cw[4], xw[4];
            bf_chunk_words<CALLS>(raw[k], row, 0, c0, k, k0, k1, cw, xw);
            if (LEVEL == 1) {
                fold ^= cw[0] ^ cw[1] ^ cw[2] ^ cw[3] ^ (u32)sr[k] ^ xw[0] ^ xw[1] ^ xw[2] ^ xw[3];
                continue;
            }
            float x[16];
            dequant16_u8(cw, xw, f16_to_f32(sr[k]), x);
#pragma unroll
            for (int e = 0; e < 16; ++e) {
                if (LEVEL == 2) {
                    acc[0][e & 3] += x[e];
                } else {
#pragma unroll
                    for (int g = 0; g < G; ++g) acc[g][e & 3] = __fmaf_rn(cf[g][e & 3], x[e], acc[g][e & 3]);
                }
            }
        }
    }
    bf_finish<G>(fold, acc, sink);
}

template <int LEVEL, int G>
__device__ __forceinline__ void bench_floor_f16_body(const u16* __restrict__ vals, i64 rows,
                                                     const float* __restrict__ coef, float* __restrict__ sink) {
    float cf[G][4], acc[G][4];
    bf_start<G>(coef, cf, acc);
    u32 fold = 0;
    const i64 items = rows * 2, stride = (i64)gridDim.x * BF_THREADS;
    for (i64 it = (i64)blockIdx.x * BF_THREADS + threadIdx.x; it < items; it += stride) {
        const uint4* src = reinterpret_cast<const uint4*>(vals + (it >> 1) * BF_D + (int)(it & 1) * 64);
        uint4 raw[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) raw[k] = src[k];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const u32 wd[4] = {raw[k].x, raw[k].y, raw[k].z, raw[k].w};
            if (LEVEL == 0) {
                fold ^= wd[0] ^ wd[1] ^ wd[2] ^ wd[3];
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float x = f16_to_f32((u16)(wd[e / 2] >> (16 * (e % 2))));
                    if (LEVEL == 1) {
                        acc[0][e & 3] += x;
                    } else {
#pragma unroll
                        for (int g = 0; g < G; ++g) acc[g][e & 3] = __fmaf_rn(cf[g][e & 3], x, acc[g][e & 3]);
                    }
                }
            }
        }
    }
    bf_finish<G>(fold, acc, sink);
}

#define WC_FLOOR_F16_ENTRY(NAME, LEVEL, G)                                                                  \
    extern "C" __global__ void __launch_bounds__(BF_THREADS) NAME(                                         \
        const u16* __restrict__ vals, i64 rows, const float* __restrict__ coef, float* __restrict__ sink) { \
        bench_floor_f16_body<LEVEL, G>(vals, rows, coef, sink);                                            \
    }

WC_FLOOR_F16_ENTRY(bench_floor_f16_l0, 0, 1)
WC_FLOOR_F16_ENTRY(bench_floor_f16_l1, 1, 1)
WC_FLOOR_F16_ENTRY(bench_floor_f16_l3_g4, 3, 4)
WC_FLOOR_F16_ENTRY(bench_floor_f16_l3_g7, 3, 7)

#define WC_FLOOR_ENTRY(NAME, LEVEL, G, CALLS)                                                               \
    extern "C" __global__ void __launch_bounds__(BF_THREADS) NAME(                                         \
        const i8* __restrict__ codes, const u16* __restrict__ scales, i64 rows, int gs_shift, u32 k0, u32 k1, \
        const float* __restrict__ coef, float* __restrict__ sink) {                                        \
        bench_floor_body<LEVEL, G, CALLS>(codes, scales, rows, gs_shift, k0, k1, coef, sink);              \
    }

WC_FLOOR_ENTRY(bench_floor_l0, 0, 1, 1)
WC_FLOOR_ENTRY(bench_floor_l1, 1, 1, 1)
WC_FLOOR_ENTRY(bench_floor_l1_16, 1, 1, 2)  // the stream alone at 16- and 24-bit dither: the same
WC_FLOOR_ENTRY(bench_floor_l1_24, 1, 1, 4)  // bytes (codes and scales), 2 or 4 calls per 16 codes
WC_FLOOR_ENTRY(bench_floor_l2, 2, 1, 1)
WC_FLOOR_ENTRY(bench_floor_l3_g4, 3, 4, 1)
WC_FLOOR_ENTRY(bench_floor_l3_g7, 3, 7, 1)

// ---- The tensor-core route (bench_floor_tc_*): the work per element of a decode that takes the
// extend kernel's operands (docs/certificate.md §9: the codes and −ξ as exact fp16 operands, the
// query in two fp16 parts with the split's residual added to c_t, V̂ rounded to fp16).  That is not
// a decode that meets SPEC §6 ("no fp16 dot products on dequantized values"), so these levels are
// not floors of the issue's contract: they measure what a decode under that change could reach.
// The first half of the rows is K, the second V:
//   T1: L1 + K's exact operands (tc_k_operands) and V̂ = fl16(fl32(s·(k − ξ))) (tc_v_fp16);
//   T2: + the tensor-core instructions a decode issues per warp and 32 × 16 elements (the G ≤ 16
//       query heads as the m16 rows): K, 3 products (q's two parts × k, q's high part × −ξ) × 4
//       blocks of 8 tokens, each scale group's products then scaled into fp32 (16 FMAs a thread);
//       V̂, 2 steps of 16 tokens × 2 blocks of 8 channels;
//   T3: T2 with V as exact operands too (o = Σ_g (p·s_g)·k + (p·s_g)·(−ξ) per scale group g:
//       V built as K, 2 products × 2 steps × 2 blocks);
//   T4: integer tensor cores on the stored bytes themselves, a route of its own (not §9's): with the
//       query (and p·s_g) in 8-bit integer parts, q·(k − ξ) = Σ_parts (q_i·k − (255·Σq_i − 2·q_i·j)/512)
//       where the code k and the dither field j are the cache's and Philox's bytes, so the products
//       and their s32 sums are exact and no element is converted at all.  Per warp and 32 × 16
//       elements, m16n8k32 with the tokens (K) or channels (V) as the rows and ≤ 8 heads as the
//       columns: K two query parts × (k, j), each 32-channel group's four sums converted and scaled
//       into fp32; V two parts of p·s × (k, j);
//   T5 (BF_WGMMA, the sm_90a target): T4's products by warpgroup mma, m64n8k32 with the
//       warpgroup's 64 rows' bytes as the A operand from registers (a thread's 16 bytes are its
//       chunk) and the query parts in shared memory, 4 per chunk and side; K's four sums of each
//       group combined in s32 (exact: |Σ| < 2^27), then converted and scaled.
// The fragments are the thread's own words: the values mean nothing; the instructions and their
// dependences are the decode's.  No shared memory or ldmatrix, no softmax, no certificate.
// d += a·b, m16n8k32, 8-bit integer operands (a signed or unsigned, b signed), exact s32 accumulate
template <bool A_UNSIGNED>
__device__ __forceinline__ void bf_imma(int (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    if constexpr (A_UNSIGNED) {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

template <int LEVEL>
__device__ __forceinline__ void bench_floor_tc_body(const i8* __restrict__ codes, const u16* __restrict__ scales,
                                                    i64 rows, int gs_shift, u32 k0, u32 k1,
                                                    const float* __restrict__ coef, float* __restrict__ sink) {
    const int NG = BF_D >> gs_shift;
    float cf[1][4], acc[1][4];
    bf_start<1>(coef, cf, acc);
    const u32 qa[4] = {pack_f16x2(cf[0][0], cf[0][1]), pack_f16x2(cf[0][2], cf[0][3]),
                       pack_f16x2(cf[0][1], cf[0][0]), pack_f16x2(cf[0][3], cf[0][2])};
    const u32 qb[4] = {qa[0] ^ 0x00010001u, qa[1] ^ 0x00010001u, qa[2] ^ 0x00010001u, qa[3] ^ 0x00010001u};
    float c[4][4], tot[4][4];
    int ci[4][4];  // T4's s32 accumulators
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            c[n][r] = tot[n][r] = 0.0f;
            ci[n][r] = 0;
        }
    u32 fold = 0;
    const i64 items = rows * 2, stride = (i64)gridDim.x * BF_THREADS;
    for (i64 it = (i64)blockIdx.x * BF_THREADS + threadIdx.x; it < items; it += stride) {
        // warp-uniform (mma.sync is a warp's instruction): a warp's 32 items are 16 rows, and the
        // host keeps rows / 2 and the item count multiples of 16 and 32 (bench/decode_floor.py)
        const int side = ((it & ~(i64)31) >> 1) >= rows / 2;
        i64 row;
        int c0;
        int4 raw[4];
        u16 sr[4];
        bf_load_item(codes, scales, it, NG, gs_shift, row, c0, raw, sr);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            u32 cw[4], xw[4];
            bf_chunk_words(raw[k], row, side, c0, k, k0, k1, cw, xw);
            const float sb = f16_to_f32(sr[k]);
            if (LEVEL == 4) {  // the bytes as they are: codes k (signed) and dither fields j (unsigned)
                bf_imma<false>(ci[0], cw, qa[0], qa[1]);
                bf_imma<false>(ci[1], cw, qb[0], qb[1]);
                bf_imma<true>(ci[2], xw, qa[0], qa[1]);
                bf_imma<true>(ci[3], xw, qb[0], qb[1]);
                if (side == 0 && (k & 1)) {  // a 32-channel group's sums, into fp32
#pragma unroll
                    for (int n = 0; n < 4; ++n)
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            tot[n][r] = __fmaf_rn((float)ci[n][r], sb, tot[n][r]);
                            ci[n][r] = 0;
                        }
                }
                continue;
            }
            if (side == 0 || LEVEL == 3) {
                u32 kh[8], xh[8];
                tc_k_operands(cw, xw, kh, xh);
                if (LEVEL == 1) {
#pragma unroll
                    for (int i = 0; i < 8; ++i) fold ^= kh[i] ^ xh[i];
                } else if (side == 0) {
#pragma unroll
                    for (int n = 0; n < 4; ++n) {
                        mma_f16(c[n], qa, kh[2 * (n & 1)], kh[2 * (n & 1) + 1]);
                        mma_f16(c[n], qb, kh[2 * (n & 1) + 4], kh[2 * (n & 1) + 5]);
                        mma_f16(c[n], qa, xh[2 * (n >> 1)], xh[2 * (n >> 1) + 4]);
                    }
                    if (k & 1) {  // a 32-channel group's products, scaled into fp32
#pragma unroll
                        for (int n = 0; n < 4; ++n)
#pragma unroll
                            for (int r = 0; r < 4; ++r) {
                                tot[n][r] = __fmaf_rn(c[n][r], sb, tot[n][r]);
                                c[n][r] = 0.0f;
                            }
                    }
                } else {
#pragma unroll
                    for (int n = 0; n < 4; ++n) {
                        mma_f16(c[n], qa, kh[2 * n], kh[2 * n + 1]);
                        mma_f16(c[n], qa, xh[2 * n], xh[2 * n + 1]);
                    }
                }
            } else {
                u32 vh[8];
                tc_v_fp16(cw, xw, sb, -sb * 0.001953125f, vh);
                if (LEVEL == 1) {
#pragma unroll
                    for (int i = 0; i < 8; ++i) fold ^= vh[i];
                } else {
#pragma unroll
                    for (int n = 0; n < 4; ++n) mma_f16(c[n], qa, vh[2 * n], vh[2 * n + 1]);
                }
            }
        }
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[0][r] += c[n][r] + tot[n][r] + (float)ci[n][r];
    bf_finish<1>(fold, acc, sink);
}

#define WC_FLOOR_TC_ENTRY(NAME, LEVEL)                                                                      \
    extern "C" __global__ void __launch_bounds__(BF_THREADS) NAME(                                         \
        const i8* __restrict__ codes, const u16* __restrict__ scales, i64 rows, int gs_shift, u32 k0, u32 k1, \
        const float* __restrict__ coef, float* __restrict__ sink) {                                        \
        bench_floor_tc_body<LEVEL>(codes, scales, rows, gs_shift, k0, k1, coef, sink);                     \
    }

WC_FLOOR_TC_ENTRY(bench_floor_tc_t1, 1)
WC_FLOOR_TC_ENTRY(bench_floor_tc_t2, 2)
WC_FLOOR_TC_ENTRY(bench_floor_tc_t3, 3)
WC_FLOOR_TC_ENTRY(bench_floor_tc_t4, 4)

#ifndef BF_WGMMA
#define BF_WGMMA 0
#endif
#if BF_WGMMA
// d += A·B, m64n8k32, 8-bit integers (A signed or unsigned, B signed), A from registers, B by its
// shared-memory descriptor, exact s32 accumulation
template <bool A_UNSIGNED>
__device__ __forceinline__ void bf_wgmma_i8(int (&d)[4], const u32 (&a)[4], u64 b) {
    if constexpr (A_UNSIGNED) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p;\n}\n"
                     : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.s8 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p;\n}\n"
                     : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
    }
}

// T5: grid-stride over 128-item blocks, one per warpgroup (the host keeps the item count a multiple
// of 128 and rows / 2 of 64, so that a warpgroup's items are one side's)
extern "C" __global__ void __launch_bounds__(BF_THREADS) bench_floor_tc_t5(
    const i8* __restrict__ codes, const u16* __restrict__ scales, i64 rows, int gs_shift, u32 k0, u32 k1,
    const float* __restrict__ coef, float* __restrict__ sink) {
    __shared__ __align__(128) u32 qpart[2][64];  // two query parts: 32 × 8 bytes each (K-major)
    const int NG = BF_D >> gs_shift;
    for (int i = threadIdx.x; i < 128; i += BF_THREADS)
        qpart[i >> 6][i & 63] = __float_as_uint(coef[i & 31]) ^ (u32)i;
    __syncthreads();
    // no-swizzle K-major: two 8 × 16-byte core matrices along k, 128 bytes apart
    const u64 qd0 = wg_desc_at(wg_desc_lo(smem_addr(qpart[0]), 128), 256, 0);
    const u64 qd1 = wg_desc_at(wg_desc_lo(smem_addr(qpart[1]), 128), 256, 0);
    float tot[4];
    int acc[2][4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) tot[r] = 0.0f;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[h][n][r] = 0;
    const i64 items = rows * 2, stride = (i64)gridDim.x * BF_THREADS;
    for (i64 it = (i64)blockIdx.x * BF_THREADS + threadIdx.x; it < items; it += stride) {
        const int side = ((it & ~(i64)127) >> 1) >= rows / 2;
        i64 row;
        int c0;
        int4 raw[4];
        u16 sr[4];
        bf_load_item(codes, scales, it, NG, gs_shift, row, c0, raw, sr);
        u32 cw[4][4], xw[4][4];
#pragma unroll
        for (int k = 0; k < 4; ++k) bf_chunk_words(raw[k], row, side, c0, k, k0, k1, cw[k], xw[k]);
        wg_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) {  // chunks 0–1 into accumulator set 0, 2–3 into set 1
            bf_wgmma_i8<false>(acc[k >> 1][0], cw[k], qd0);
            bf_wgmma_i8<false>(acc[k >> 1][1], cw[k], qd1);
            bf_wgmma_i8<true>(acc[k >> 1][2], xw[k], qd0);
            bf_wgmma_i8<true>(acc[k >> 1][3], xw[k], qd1);
            if (k & 1) wg_commit();
        }
        wg_wait<0>();
        if (side == 0) {  // each group's sums combined exactly in s32, then into fp32 with its scale
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int lg = (acc[h][0][r] << 7) + acc[h][1][r] - 2 * ((acc[h][2][r] << 7) + acc[h][3][r]);
                    tot[r] = __fmaf_rn((float)lg, f16_to_f32(sr[2 * h]), tot[r]);
#pragma unroll
                    for (int n = 0; n < 4; ++n) acc[h][n][r] = 0;
                }
        }
    }
    float r = tot[0] + tot[1] + tot[2] + tot[3];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int n = 0; n < 4; ++n) r += (float)(acc[h][n][0] + acc[h][n][1] + acc[h][n][2] + acc[h][n][3]);
    sink[(i64)blockIdx.x * BF_THREADS + threadIdx.x] = r;
}
#endif
