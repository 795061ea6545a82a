// write.cu — the write path (SPEC §3) and the small elementwise kernels of the public API.
//
// write_rows_<d>_<bits>_c<cpt>: grid (ceil(n / (256 / (d / cpt))), Hkv * sides), block 256: a thread
//   per cpt channels of a row (32 at 8 bits without a witness, else 16; d in {64, 128, 256}; the
//   layout is described at write_rows_impl).
//   Reads the input row (fp16/fp32/bf16/fp64, rounded to fp16 on entry), writes int8 codes, fp16
//   scales, exact outlier values and the witness straight into the paged pool at `slots`, and the
//   exact fp16 row to the host backing store when `exact` is not null (mapped pinned memory).
//   Shared memory: static, 256 * cpt * 5 bytes (the witness sums).  Bit-for-bit twin of
//   _cpu/write.py::write_rows.
//   head_base: the pool's first kv head in the model (tensor parallel shards): the dither stream is
//   keyed by the global kv head, so a shard stores the same codes as a single-GPU pool.
// dequant_rows: grid (n, Hkv), block d: x̂ = s16 * (k - ξ), bypassed channels exact.
// philox_kernel / dither_kernel: the public philox4x32_10 and dither on the GPU.
// evict_tier_pages: drops rewritten pages from the exact tier.
#include "common.cuh"
#include "philox.cuh"

#define WC_MAX_D 256

// Input dtypes of write_rows (witcert_cupy/_cuda/: INPUT_DTYPES).
#define IN_F16 0
#define IN_F32 1
#define IN_BF16 2
#define IN_F64 3

__device__ __forceinline__ u16 load_as_f16(const void* base, i64 idx, int dtype) {
    if (dtype == IN_F16) return ((const u16*)base)[idx];
    if (dtype == IN_F32) return (u16)f32_to_f16_rn(((const float*)base)[idx]);
    if (dtype == IN_BF16) return (u16)f32_to_f16_rn(__uint_as_float((u32)((const u16*)base)[idx] << 16));
    return (u16)f64_to_f16_rn(((const double*)base)[idx]);
}

// fp16 bits of ||x̂_b − x_b|| (1 + 2^-20), rounded up, from the rounded-up squares err2[] of the
// band's channels in list order: the same sequential sum as the CPU twin, hence bit-identical.
__device__ __forceinline__ u16 band_witness(const float* err2, const u8* byp, const int* channels, int per) {
    float acc = 0.0f;
    for (int jj = 0; jj < per; ++jj) {
        const int ch = channels[jj];
        if (byp[ch]) continue;
        acc = next_up(__fadd_rn(acc, err2[ch]));
    }
    return (u16)f32_to_f16_ru(__fmul_rn(next_up(sqrtf(acc)), (float)WC_WITNESS_MARGIN));
}

// ξ of channel c of one row; lanes of one Philox call share it through shuffles (the call's
// leader computes it), so each call runs once per row.  Needs the whole warp active.
__device__ __forceinline__ float row_xi(int c, u32 slot, int side, int layer, int h, u32 epoch,
                                        u32 k0, u32 k1, int bits) {
    int pc = per_call_of(bits);
    int lane = threadIdx.x & 31;
    u32x4 w = philox10(slot, dither_ctr1(side, c / pc), dither_ctr2(layer, h), epoch, k0, k1);
    int leader = lane & ~(pc - 1);
    u32x4 s;
    s.x = __shfl_sync(0xffffffffu, w.x, leader);
    s.y = __shfl_sync(0xffffffffu, w.y, leader);
    s.z = __shfl_sync(0xffffffffu, w.z, leader);
    s.w = __shfl_sync(0xffffffffu, w.w, leader);
    return xi_of(s, c % pc, bits);
}

// Channels per thread in write_rows (CPT, in the entry's name): 32 at 8-bit dither without a
// witness (two Philox calls, two 16-byte code stores, at fp16 input four 16-byte loads), else 16
// (16 and 24 bits: two and four calls, whose words would not fit twice; with a witness the band
// sums, one lane each, would be shared by half the lanes).  Why 32: the kernel is issue-bound and a
// row's fixed work (indices, bounds, scale, reciprocal, reductions) is shared by twice the channels
// (docs/performance.md).  The GPU requires group_size % 16 == 0 (_cuda.check_gpu_config): a thread
// holds one or two whole scale groups, or a group spans whole threads.
#define WR_LOAD 16  // channels per load_f16x16
#define WR_THREADS 256

// The thread's 16 input values as packed fp16 pairs (wider dtypes rounded to nearest on entry).
// `vec`: the row start is 16-byte aligned for every dtype (checked on the host), so the fp16 and
// fp32 inputs take vector loads; any other case reads element by element, with the same result.
__device__ __forceinline__ void load_f16x16(const void* base, i64 idx, int dtype, bool vec, u32* h2) {
    if (vec && dtype == IN_F16) {
        const uint4* p = reinterpret_cast<const uint4*>((const u16*)base + idx);
        const uint4 a = __ldg(p), b = __ldg(p + 1);
        h2[0] = a.x; h2[1] = a.y; h2[2] = a.z; h2[3] = a.w;
        h2[4] = b.x; h2[5] = b.y; h2[6] = b.z; h2[7] = b.w;
    } else if (vec && dtype == IN_F32) {
        const float4* p = reinterpret_cast<const float4*>((const float*)base + idx);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float4 f = __ldg(p + q);
            h2[2 * q] = f32_to_f16_rn(f.x) | (f32_to_f16_rn(f.y) << 16);
            h2[2 * q + 1] = f32_to_f16_rn(f.z) | (f32_to_f16_rn(f.w) << 16);
        }
    } else {
#pragma unroll
        for (int j = 0; j < WR_LOAD / 2; ++j)
            h2[j] = (u32)load_as_f16(base, idx + 2 * j, dtype) | ((u32)load_as_f16(base, idx + 2 * j + 1, dtype) << 16);
    }
}

// ξ of element e (< per_call) of one Philox call, times xi_unscale<BITS>()^-1, exact.  At 8 bits the
// dither byte j goes into the mantissa of 2^23 + 256 j (one byte permute), and the subtraction
// leaves 256 (j − 127.5) exactly = ξ · 2^16 (SPEC §2: ξ = (2j + 1 − 256) / 512); the other widths
// return ξ itself.
template <int BITS>
__device__ __forceinline__ float xi_scaled(const u32x4& w, int e) {
    if constexpr (BITS == 8) {
        const u32 t = __byte_perm(word_of(w, e >> 2), 0x4B000000u, 0x7504u | ((u32)(e & 3) << 4));
        return __fsub_rn(__uint_as_float(t), 8421248.0f);  // 2^23 + 256 * 127.5
    } else {
        return xi_of(w, e, BITS);
    }
}

template <int BITS>
__device__ __forceinline__ constexpr float xi_unscale() { return BITS == 8 ? 0x1p-16f : 1.0f; }

// max that propagates NaN (max.NaN.f32, sm_80+): a NaN anywhere in a group must poison its scale
__device__ __forceinline__ float fmax_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// 1.5 · 2^23: for |z| < 2^22, z + WR_RINT_MAGIC rounds z to an integer, ties to even (= rintf),
// and the low byte of the sum's bits is that integer as an int8.
#define WR_RINT_MAGIC 12582912.0f

// write_rows: grid (ceil(n / rows per block), H · nsides), block WR_THREADS.  CPT
// channels of one row (token i, kv head h, side) per thread, D / CPT threads per row (a power of two
// that divides 32: a row never leaves its warp), WR_THREADS / (D / CPT) consecutive tokens of one (kv head,
// side) per block, so the block's code rows are contiguous in the pool and no thread divides a
// 64-bit index.  Each thread computes its own Philox call(s): every call runs once per row.
// Group amax and the non-finite flags reduce with shuffles over the row's lanes; the witness bands
// are summed sequentially by one lane each from shared memory (the CPU twin's order).  x / sb is
// the IEEE quotient from the group's reciprocal (quotient_rn, checked against division for every
// fp16 pair by tests/test_gpu.py); every other operation is the twin's, so codes, scales,
// outliers and witness are bit-identical to _cpu/write.py::write_rows.
template <int D, int BITS, int CPT>
__device__ __forceinline__ void write_rows_impl(
    const void* __restrict__ xk, const void* __restrict__ xv, int in_dtype, int vec,
    const i64* __restrict__ slots,       // [n] dither slot of each row
    const i64* __restrict__ dest_rows,   // [n] storage row (the slot in a pool)
    int n, int H, i64 N, int layer, int head_base, int plane_layer, int side0, int nsides,
    int gs_shift,                        // log2 of the group size (d is a power of two, so is every group size)
    int NP2, int NB,
    const int* __restrict__ bypass_ch,   // [H, NP2] of this layer
    const int* __restrict__ band_ch,     // [NB, D / NB]
    u32 k0, u32 k1,
    i8* __restrict__ codes, u16* __restrict__ scales, u16* __restrict__ outl, u16* __restrict__ wit,
    u16* __restrict__ exact,             // host-mapped [L, 2, H, N, D] or null
    unsigned long long* __restrict__ counters) {  // [0]: non-finite rows, [1]: rows with a bad slot
    constexpr int TPR = D / CPT;                           // threads per row
    constexpr int RPB = WR_THREADS / TPR;                  // rows per block
    constexpr int PC = BITS == 8 ? 16 : (BITS == 16 ? 8 : 4);  // channels per Philox call
    constexpr int HV = CPT / 16;                           // 16-channel parts: the smallest scale group
    static_assert(CPT == 16 || (CPT == 32 && BITS == 8), "32 channels per thread only at 8-bit dither");
    static_assert(TPR >= 1 && TPR <= 32 && (32 % TPR) == 0, "a row must stay inside one warp");
    __shared__ float err2_s[RPB][D];
    __shared__ u8 byp_s[RPB][D];
    const int tr = threadIdx.x % TPR, rb = threadIdx.x / TPR, lane = threadIdx.x & 31;
    const u32 seg = TPR == 32 ? 0xffffffffu : (((1u << TPR) - 1u) << (lane & ~(TPR - 1)));  // the row's lanes
    const i64 i = (i64)blockIdx.x * RPB + rb;
    if (i >= n) return;
    const int side = side0 + (nsides == 2 ? (int)(blockIdx.y & 1u) : 0);  // nsides is 1 or 2
    const int h = (int)(blockIdx.y >> (nsides - 1));
    const i64 slot = slots[i], dest = dest_rows[i];
    if (slot < 0 || slot > 0xFFFFFFFFll || dest < 0 || dest >= N) {  // never write out of bounds
        if (tr == 0) atomicAdd(&counters[1], 1ull);
        return;
    }
    // scale groups per row; `split`: each 16-channel part of the thread is a group of its own
    // (gs = 16 at 32 channels per thread), else a group spans GL whole threads.  Shifts, not
    // divisions (the kernel is issue-bound).
    const int NG = D >> gs_shift;
    const bool split = (1 << gs_shift) < CPT;
    const int GL = split ? 1 : (1 << gs_shift) / CPT;
    const int c0 = tr * CPT;
    const i64 row = pool_row(plane_layer, side, H, h, N) + dest;
    const i64 src = (i * H + h) * D;
    const void* x_in = side == 0 ? xk : xv;

    // Philox first: it depends only on the slot, so it overlaps the input loads
    u32x4 w[CPT / PC];
#pragma unroll
    for (int q = 0; q < CPT / PC; ++q)
        w[q] = philox10((u32)slot, dither_ctr1(side, c0 / PC + q), dither_ctr2(layer, h + head_base), 0u, k0, k1);

    u32 xh[CPT / 2];
#pragma unroll
    for (int q = 0; q < CPT / WR_LOAD; ++q) load_f16x16(x_in, src + c0 + WR_LOAD * q, in_dtype, vec != 0, xh + WR_LOAD / 2 * q);
    if (exact != nullptr) {
        uint4* e = reinterpret_cast<uint4*>(exact + row * D + c0);
#pragma unroll
        for (int q = 0; q < CPT / 8; ++q) e[q] = make_uint4(xh[4 * q], xh[4 * q + 1], xh[4 * q + 2], xh[4 * q + 3]);
    }
    u32 bmask = 0;                                         // bypassed channels among this thread's
    for (int t = 0; t < NP2; ++t) {
        const int ch = bypass_ch[h * NP2 + t] - c0;
        if ((unsigned)ch < (unsigned)CPT) bmask |= 1u << ch;
    }
    // per 16-channel part: the largest |x| over every channel (NaN propagating: the group's
    // non-finite flag, SPEC §3.6, bypassed channels included) and over the quantized channels (the
    // scale's amax).  max is order-free (and NaN-propagating max too, for the flag), so combining
    // parts and lanes in any order gives the twin's values.
    float x[CPT];
    float pall[HV], pq[HV];
#pragma unroll
    for (int v = 0; v < HV; ++v) pall[v] = pq[v] = 0.0f;
#pragma unroll
    for (int j = 0; j < CPT; ++j) {
        x[j] = f16_to_f32((u16)(xh[j / 2] >> (16 * (j % 2))));
        pall[j / 16] = fmax_nan(pall[j / 16], fabsf(x[j]));
        if (bmask) pq[j / 16] = fmaxf(pq[j / 16], ((bmask >> j) & 1u) ? 0.0f : fabsf(x[j]));
    }
    if (!bmask) {  // (when it is not finite the group is poisoned and amax unused)
#pragma unroll
        for (int v = 0; v < HV; ++v) pq[v] = pall[v];
    }
    float gq[HV], gall[HV];                                 // per part: its group's amax and flag
    float rall = pall[0];                                   // the row's flag
#pragma unroll
    for (int v = 1; v < HV; ++v) rall = fmax_nan(rall, pall[v]);
    if (split) {
#pragma unroll
        for (int v = 0; v < HV; ++v) {
            gq[v] = pq[v];
            gall[v] = pall[v];
        }
    } else {
        float a = pq[0];
#pragma unroll
        for (int v = 1; v < HV; ++v) a = fmaxf(a, pq[v]);
        float aa = rall;
        for (int off = 1; off < GL; off <<= 1) {
            a = fmaxf(a, __shfl_xor_sync(seg, a, off));
            aa = fmax_nan(aa, __shfl_xor_sync(seg, aa, off));
        }
#pragma unroll
        for (int v = 0; v < HV; ++v) {
            gq[v] = a;
            gall[v] = aa;
        }
        rall = aa;
    }
    for (int off = GL; off < TPR; off <<= 1) rall = fmax_nan(rall, __shfl_xor_sync(seg, rall, off));
    const bool rbad = !(rall <= WC_F32_MAX);
    // each group's scale, from its amax (once per thread when the parts share a group)
    float sb[HV], rcp[HV];
    bool live[HV];
    bool all_live = true;
#pragma unroll
    for (int v = 0; v < HV; ++v) {
        if (v == 0 || split) {
            u32 s16;
            if (!(gall[v] <= WC_F32_MAX)) s16 = WC_FP16_INF;
            else if (gq[v] == 0.0f) s16 = 0u;
            else s16 = f32_to_f16_ru(__fdiv_rn(gq[v], (float)WC_SCALE_DIVISOR));
            if (split) scales[row * NG + (c0 >> gs_shift) + v] = (u16)s16;
            else if ((tr & (GL - 1)) == 0) scales[row * NG + (c0 >> gs_shift)] = (u16)s16;
            sb[v] = f16_to_f32((u16)s16);
            live[v] = sb[v] > 0.0f && sb[v] <= WC_F32_MAX;
            rcp[v] = live[v] ? __frcp_rn(sb[v]) : 0.0f;
        } else {
            sb[v] = sb[0];
            live[v] = live[0];
            rcp[v] = rcp[0];
        }
        all_live = all_live && live[v];
    }

    u32 mb[CPT];                                           // bits of z + WR_RINT_MAGIC
    if (all_live && !bmask && NB == 0) {
        // the common case, every channel quantized and no witness: z = x/s + ξ with ξ's
        // 2^16-multiple folded into one FMA (exact product, one rounding: the twin's fp32 sum)
#pragma unroll
        for (int j = 0; j < CPT; ++j) {
            const float z = __fmaf_rn(xi_scaled<BITS>(w[j / PC], j % PC), xi_unscale<BITS>(),
                                      quotient_rn(x[j], sb[j / 16], rcp[j / 16]));
            mb[j] = __float_as_uint(__fadd_rn(z, WR_RINT_MAGIC));
        }
    } else {
#pragma unroll
        for (int j = 0; j < CPT; ++j) {
            const float xi = __fmul_rn(xi_scaled<BITS>(w[j / PC], j % PC), xi_unscale<BITS>());
            const bool quantized = live[j / 16] && !((bmask >> j) & 1u);
            const float z = quantized ? __fadd_rn(quotient_rn(x[j], sb[j / 16], rcp[j / 16]), xi) : 0.0f;
            const float m = __fadd_rn(z, WR_RINT_MAGIC);
            mb[j] = __float_as_uint(m);
            if (NB > 0) {
                const float xhat = __fmul_rn(sb[j / 16], __fsub_rn(__fsub_rn(m, WR_RINT_MAGIC), xi));
                err2_s[rb][c0 + j] = ((bmask >> j) & 1u) ? 0.0f : square_up(next_up(fabsf(__fsub_rn(xhat, x[j]))));
                byp_s[rb][c0 + j] = (u8)((bmask >> j) & 1u);
            }
        }
    }
#pragma unroll
    for (int q = 0; q < CPT / 16; ++q) {
        u32 packed[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int b = 16 * q + 4 * r;
            packed[r] = __byte_perm(__byte_perm(mb[b], mb[b + 1], 0x0040u), __byte_perm(mb[b + 2], mb[b + 3], 0x0040u),
                                    0x5410u);
        }
        reinterpret_cast<uint4*>(codes + row * D + c0)[q] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
    for (int t = 0; t < NP2; ++t) {
        const int ch = bypass_ch[h * NP2 + t];
        if ((unsigned)(ch - c0) < (unsigned)CPT) outl[row * NP2 + t] = load_as_f16(x_in, src + ch, in_dtype);
    }
    if (NB > 0) {
        __syncwarp(seg);
        for (int b = tr; b < NB; b += TPR)
            wit[row * NB + b] = rbad ? (u16)WC_FP16_INF : band_witness(err2_s[rb], byp_s[rb], band_ch + b * (D / NB), D / NB);
    }
    if (tr == 0 && rbad) atomicAdd(&counters[0], 1ull);
}

// CTAs per SM the register budget is set for (the largest count without spills): 32 channels per
// thread 3 (80 registers); 16 channels 4 at 8 and 16 bits, 3 at 24 bits, where the wider dither
// fields keep more Philox words live
__host__ __device__ constexpr int wr_min_blocks(int bits, int cpt) {
    return cpt == 32 ? 3 : (bits == 24 ? 3 : 4);
}

#define WC_WRITE_ENTRY(D, BITS, CPT)                                                                      \
    extern "C" __global__ void __launch_bounds__(WR_THREADS, wr_min_blocks(BITS, CPT))                    \
        write_rows_##D##_##BITS##_c##CPT(                                                                 \
            const void* xk, const void* xv, int in_dtype, int vec, const i64* slots, const i64* dest_rows, int n, \
            int H, i64 N, int layer, int head_base, int plane_layer, int side0, int nsides, int gs_shift, int NP2, \
            int NB, const int* bypass_ch, const int* band_ch, u32 k0, u32 k1, i8* codes, u16* scales, u16* outl, \
            u16* wit, u16* exact, unsigned long long* counters) {                                         \
        write_rows_impl<D, BITS, CPT>(xk, xv, in_dtype, vec, slots, dest_rows, n, H, N, layer, head_base,     \
                                      plane_layer, side0, nsides, gs_shift, NP2, NB, bypass_ch, band_ch, k0, k1, \
                                      codes, scales, outl, wit, exact, counters);                         \
    }
// every entry of one head dim; the launch layer (witcert_cupy/_cuda/: write_kernel) picks c32 at
// 8 bits without a witness
#define WC_WRITE_ENTRIES(D) \
    WC_WRITE_ENTRY(D, 8, 32) WC_WRITE_ENTRY(D, 8, 16) WC_WRITE_ENTRY(D, 16, 16) WC_WRITE_ENTRY(D, 24, 16)
WC_WRITE_ENTRIES(64)
WC_WRITE_ENTRIES(128)
WC_WRITE_ENTRIES(256)

// store_fp16_rows: grid (n, Hkv, 2 sides), block d.  Stores what a scheme reconstructs (`stored`,
// or the exact row when null) as fp16, and the Tier-A witness of stored − exact.  Twin of
// witcert_cupy/_cpu/write.py::store_fp16_rows.
extern "C" __global__ void __launch_bounds__(WC_MAX_D) store_fp16_rows(
    const void* __restrict__ xk, const void* __restrict__ xv, int in_dtype,
    const void* __restrict__ sk, int sk_dtype, const void* __restrict__ sv, int sv_dtype,  // null: exact row
    const i64* __restrict__ dest_rows, int n, int H, i64 N, int D, int layer, int NB,
    const int* __restrict__ band_ch, u16* __restrict__ values, u16* __restrict__ wit, u16* __restrict__ exact,
    unsigned long long* __restrict__ counters) {
    __shared__ u8 byp[WC_MAX_D];
    __shared__ float err2[WC_MAX_D];
    const int i = blockIdx.x, h = blockIdx.y, side = blockIdx.z, c = threadIdx.x;
    const i64 dest = dest_rows[i];
    if (dest < 0 || dest >= N) {
        if (c == 0) atomicAdd(&counters[1], 1ull);
        return;
    }
    const i64 row = pool_row(layer, side, H, h, N) + dest;
    const i64 src = ((i64)i * H + h) * D + c;
    const u16 xb = load_as_f16(side == 0 ? xk : xv, src, in_dtype);
    const void* st = side == 0 ? sk : sv;
    const u16 sb = st == nullptr ? xb : load_as_f16(st, src, side == 0 ? sk_dtype : sv_dtype);
    const float x = f16_to_f32(xb), xs = f16_to_f32(sb);
    byp[c] = 0;
    const bool finite = is_finite32(x) && is_finite32(xs);
    err2[c] = finite ? square_up(next_up(fabsf(__fsub_rn(xs, x)))) : 0.0f;
    values[row * D + c] = sb;
    if (exact != nullptr) exact[row * D + c] = xb;
    const bool row_bad = __syncthreads_or(!finite);
    if (c < NB) wit[row * NB + c] = row_bad ? (u16)WC_FP16_INF : band_witness(err2, byp, band_ch + c * (D / NB), D / NB);
    if (c == 0 && row_bad) atomicAdd(&counters[0], 1ull);
}

extern "C" __global__ void __launch_bounds__(WC_MAX_D) dequant_rows(
    const i8* __restrict__ codes, const u16* __restrict__ scales, const u16* __restrict__ outl,
    const i64* __restrict__ slots, const i64* __restrict__ src_rows, int n, int H, i64 N, int D, int layer, int head_base,
    int plane_layer, int side, int gs, int NP2, const int* __restrict__ bypass_ch, int bits, u32 k0, u32 k1,
    float* __restrict__ out) {
    const int i = blockIdx.x, h = blockIdx.y, c = threadIdx.x;
    const i64 slot = slots[i], src = src_rows[i];
    if (slot < 0 || slot > 0xFFFFFFFFll || src < 0 || src >= N) {
        out[((i64)i * H + h) * D + c] = NAN;
        return;
    }
    const i64 row = pool_row(plane_layer, side, H, h, N) + src;
    const float xi = row_xi(c, (u32)slot, side, layer, h + head_base, 0u, k0, k1, bits);
    const float sb = f16_to_f32(scales[row * (D / gs) + c / gs]);
    float v = __fmul_rn(sb, __fsub_rn((float)codes[row * D + c], xi));
    for (int j = 0; j < NP2; ++j)
        if (bypass_ch[h * NP2 + j] == c) v = f16_to_f32(outl[row * NP2 + j]);
    out[((i64)i * H + h) * D + c] = v;
}

extern "C" __global__ void philox_kernel(const u32* __restrict__ ctr, const u32* __restrict__ key,
                                         i64 n, int rounds, u32* __restrict__ out) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    u32x4 w = rounds == 10
                  ? philox10(ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3], key[2 * i], key[2 * i + 1])
                  : philox4x32_rounds(ctr[4 * i], ctr[4 * i + 1], ctr[4 * i + 2], ctr[4 * i + 3], key[2 * i],
                                      key[2 * i + 1], rounds);
    out[4 * i] = w.x;
    out[4 * i + 1] = w.y;
    out[4 * i + 2] = w.z;
    out[4 * i + 3] = w.w;
}

// grid (n), block D (D % 32 == 0 not required: one Philox call per channel here)
extern "C" __global__ void dither_kernel(const i64* __restrict__ slots, int D, int side, int layer, int h,
                                         u32 epoch, u32 k0, u32 k1, int bits, float* __restrict__ out) {
    const int i = blockIdx.x;
    const int pc = per_call_of(bits);
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        u32x4 w = philox10((u32)slots[i], dither_ctr1(side, c / pc), dither_ctr2(layer, h), epoch, k0, k1);
        out[(i64)i * D + c] = xi_of(w, c % pc, bits);
    }
}

// evict_tier_pages: grid ceil(n / 256), block 256.  A rewritten slot makes the exact-tier copy of
// its page stale (SPEC §7): its (kv head, page) entries of this layer go back to -1 in tier_map
// [H, stride].  Out-of-range slots are ignored (the write kernel dropped and counted them).  The
// host reconciles its free list from the device map when it next allocates (no sync here).
extern "C" __global__ void evict_tier_pages(const i64* __restrict__ slots, int n, i64 num_slots, int page_shift,
                                            int H, int stride, int* __restrict__ tier_map) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const i64 s = slots[i];
    if (s < 0 || s >= num_slots) return;
    const int page = (int)(s >> page_shift);
    for (int h = 0; h < H; ++h) tier_map[(i64)h * stride + page] = -1;
}
