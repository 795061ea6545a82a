// write.cu — the write path (SPEC §3) and the small elementwise kernels of the public API.
//
// write_rows: grid ceil(n * Hkv * sides / 8), block 256 (one warp per row; d in {64, 128, 256}).
//   Reads the input row (fp16/fp32/bf16/fp64, rounded to fp16 on entry), writes int8 codes, fp16
//   scales, exact outlier values and the witness straight into the paged pool at `slots`, and the
//   exact fp16 row to the host backing store when `exact` is not null (mapped pinned memory).
//   Shared memory: static, 8 * d * 5 bytes.  Bit-for-bit twin of _cpu/write.py::write_rows.
//   head_base: the pool's first kv head in the model (tensor parallel shards): the dither stream is
//   keyed by the global kv head, so a shard stores the same codes as a single-GPU pool.
// dequant_rows: grid (n, Hkv), block d: x̂ = s16 * (k - ξ), bypassed channels exact.
// philox_kernel / dither_kernel: the public philox4x32_10 and dither on the GPU.
// evict_tier_pages: drops rewritten pages from the exact tier.
#include "common.cuh"
#include "philox.cuh"

#define WC_MAX_D 256

// Input dtypes of write_rows (witcert_cupy/_cuda.py: INPUT_DTYPES).
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

#define WR_WARPS 8

// write_rows: one warp per row (token i, kv head h, side), WR_WARPS rows per block; lane L owns the
// d/32 consecutive channels [L*cpl, L*cpl + cpl).  Group amax and flags reduce with shuffles over
// the gs/cpl lanes of a group; the witness bands are summed sequentially by one lane each from a
// per-warp shared buffer (the CPU twin's order).  No block-wide barrier: rows are independent.
template <int D>
__device__ __forceinline__ void write_rows_impl(
    const void* __restrict__ xk, const void* __restrict__ xv, int in_dtype,
    const i64* __restrict__ slots,       // [n] dither slot of each row
    const i64* __restrict__ dest_rows,   // [n] storage row (the slot in a pool)
    int n, int H, i64 N, int layer, int head_base, int plane_layer, int side0, int nsides, int gs, int NP2, int NB,
    const int* __restrict__ bypass_ch,   // [H, NP2] of this layer
    const int* __restrict__ band_ch,     // [NB, D / NB]
    int bits, u32 k0, u32 k1,
    i8* __restrict__ codes, u16* __restrict__ scales, u16* __restrict__ outl, u16* __restrict__ wit,
    u16* __restrict__ exact,             // host-mapped [L, 2, H, N, D] or null
    unsigned long long* __restrict__ counters) {  // [0]: non-finite rows, [1]: rows with a bad slot
    __shared__ float err2_s[WR_WARPS][WC_MAX_D];
    __shared__ u8 byp_s[WR_WARPS][WC_MAX_D];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const i64 r = (i64)blockIdx.x * WR_WARPS + warp;
    if (r >= (i64)n * H * nsides) return;
    const int side = side0 + (int)(r % nsides);
    const int h = (int)((r / nsides) % H);
    const i64 i = r / ((i64)nsides * H);
    const i64 slot = slots[i], dest = dest_rows[i];
    if (slot < 0 || slot > 0xFFFFFFFFll || dest < 0 || dest >= N) {  // never write out of bounds
        if (lane == 0) atomicAdd(&counters[1], 1ull);
        return;
    }
    float* err2 = err2_s[warp];
    u8* byp = byp_s[warp];
    constexpr int cpl = D / 32;                            // channels per lane
    const int NG = D / gs, lpg = gs / cpl;                 // scale groups, lanes per group
    const int c0 = lane * cpl;
    const i64 row = ((((i64)plane_layer * 2 + side) * H + h) * N + dest);
    const i64 src = (i * H + h) * D;
    const void* x_in = side == 0 ? xk : xv;

    float x[cpl];
    u16 xb[cpl];
    bool bp[cpl];
    bool bad = false;
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < cpl; ++j) {
        const int c = c0 + j;
        xb[j] = load_as_f16(x_in, src + c, in_dtype);
        x[j] = f16_to_f32(xb[j]);
        bp[j] = false;
        for (int t = 0; t < NP2; ++t) bp[j] |= bypass_ch[h * NP2 + t] == c;
        byp[c] = bp[j];
        if (!is_finite32(x[j])) bad = true;
        else if (!bp[j]) amax = fmaxf(amax, fabsf(x[j]));
        if (exact != nullptr) exact[row * D + c] = xb[j];
    }
    // group amax / non-finite flag over the lpg lanes of this lane's group (contiguous lanes)
    int gbad = bad;
    for (int off = 1; off < lpg; off <<= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        gbad |= __shfl_xor_sync(0xffffffffu, gbad, off);
    }
    const bool row_bad = __any_sync(0xffffffffu, bad);
    u32 s16;
    if (gbad) s16 = WC_FP16_INF;
    else if (amax == 0.0f) s16 = 0u;
    else s16 = f32_to_f16_ru(__fdiv_rn(amax, (float)WC_SCALE_DIVISOR));
    if (lane % lpg == 0) scales[row * NG + c0 / gs] = (u16)s16;
    const float sb = f16_to_f32((u16)s16);
    const bool live = sb > 0.0f && sb <= WC_F32_MAX;

    // ξ of this lane's channels: the Philox call(s) covering them (recomputed by the lanes that
    // share a call; no cross-lane dependency)
    const int pc = per_call_of(bits);
    u32 packed[(cpl + 3) / 4] = {};
    u32x4 w = {0u, 0u, 0u, 0u};
    int wchunk = -1;
#pragma unroll
    for (int j = 0; j < cpl; ++j) {
        const int c = c0 + j;
        if (c / pc != wchunk) {
            wchunk = c / pc;
            w = philox10((u32)slot, dither_ctr1(side, wchunk), dither_ctr2(layer, h + head_base), 0u, k0, k1);
        }
        const float xi = xi_of(w, c % pc, bits);
        float kf = 0.0f;
        if (live && !bp[j]) kf = rintf(__fadd_rn(__fdiv_rn(x[j], sb), xi));
        const float xhat = __fmul_rn(sb, __fsub_rn(kf, xi));
        err2[c] = bp[j] ? 0.0f : square_up(next_up(fabsf(__fsub_rn(xhat, x[j]))));
        packed[j / 4] |= ((u32)(u8)(i8)(int)kf) << (8 * (j % 4));
    }
    if constexpr (cpl >= 4) {
#pragma unroll
        for (int q = 0; q < cpl / 4; ++q) *reinterpret_cast<u32*>(codes + row * D + c0 + 4 * q) = packed[q];
    } else {
        *reinterpret_cast<u16*>(codes + row * D + c0) = (u16)packed[0];
    }
    for (int j = lane; j < NP2; j += 32) outl[row * NP2 + j] = load_as_f16(x_in, src + bypass_ch[h * NP2 + j], in_dtype);
    __syncwarp();
    for (int b = lane; b < NB; b += 32)
        wit[row * NB + b] = row_bad ? (u16)WC_FP16_INF : band_witness(err2, byp, band_ch + b * (D / NB), D / NB);
    if (lane == 0 && row_bad) atomicAdd(&counters[0], 1ull);
}

#define WC_WRITE_ENTRY(D)                                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * WR_WARPS, 1) write_rows_##D(                        \
        const void* xk, const void* xv, int in_dtype, const i64* slots, const i64* dest_rows, int n, int H,  \
        i64 N, int layer, int head_base, int plane_layer, int side0, int nsides, int gs, int NP2, int NB,  \
        const int* bypass_ch, const int* band_ch, int bits, u32 k0, u32 k1, i8* codes, u16* scales,       \
        u16* outl, u16* wit, u16* exact, unsigned long long* counters) {                                  \
        write_rows_impl<D>(xk, xv, in_dtype, slots, dest_rows, n, H, N, layer, head_base, plane_layer, side0, \
                           nsides,                                                                        \
                           gs, NP2, NB, bypass_ch, band_ch, bits, k0, k1, codes, scales, outl, wit, exact,  \
                           counters);                                                                     \
    }
WC_WRITE_ENTRY(64)
WC_WRITE_ENTRY(128)
WC_WRITE_ENTRY(256)

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
    const i64 row = ((((i64)layer * 2 + side) * H + h) * N + dest);
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
    const i64 row = ((((i64)plane_layer * 2 + side) * H + h) * N + src);
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
