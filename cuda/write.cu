// write.cu — the write path (SPEC §3) and the small elementwise kernels of the public API.
//
// write_rows_<d>_<bits>[_wit]: grid (ceil(n / (256 / (d / 32))), Hkv * sides), block 256: a thread
//   per 32 channels of a row (d in {64, 128, 256}; the layout is described at write_rows_impl);
//   `_wit`: the pool stores a witness.
//   Reads the input row (fp16/fp32/bf16/fp64, rounded to fp16 on entry), writes int8 codes, fp16
//   scales, exact outlier values and the witness straight into the paged pool at `slots`, and the
//   exact fp16 row to the host backing store when `exact` is not null (mapped pinned memory).
//   Shared memory (`_wit`): static, 256 rows · (d + d/8) · 4 bytes / (d / 32) = 36 KB (the squared
//   residuals of the block's rows).  Bit-for-bit twin of _cpu/write.py::write_rows.
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

// The witness chain (docs/certificate.md §3): per channel the residual rounded to nearest once
// (r = fma(s, k − ξ, −x) for a code: the exact product's residual; stored − exact for an fp16
// store) and its square rounded up; per band the rounded-up running sum of the squares in band
// order; the root rounded up; the margin (which also covers the residuals' rounding to nearest);
// fp16 rounded up.  A non-zero residual is at least 2^-49 in magnitude (every operand is a multiple
// of it), so no step meets a subnormal and flush-to-zero changes nothing.
__device__ __forceinline__ float square_up(float r) { return __fmul_ru(r, r); }

__device__ __forceinline__ u16 witness_f16_of_sum(float acc) {
    return (u16)f32_to_f16_ru_normal(__fmul_rn(witness_sqrt_ru(acc), (float)WC_WITNESS_MARGIN));
}

// ... from the squared residuals err2[] of the band's channels in list order: the same sequential
// sum as the CPU twin, hence bit-identical.
__device__ __forceinline__ u16 band_witness(const float* err2, const int* channels, int per) {
    float acc = 0.0f;
    for (int jj = 0; jj < per; ++jj) acc = __fadd_ru(acc, err2[channels[jj]]);
    return witness_f16_of_sum(acc);
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

// write_rows works on 32 channels per thread (WR_CPT) at every dither width: a row's fixed work
// (indices, bounds, the group amax, the scale and its reciprocal, the reductions) is shared by 32
// channels, and the kernel is issue-bound (docs/performance.md).  The Philox calls of a thread (2,
// 4 or 8 at 8, 16 or 24 bits) are written where their words are used, so ptxas keeps one or two
// calls' words live.  The GPU requires group_size % 16 == 0 (_cuda.check_gpu_config): a thread
// holds one or two whole scale groups, or a group spans whole threads.
#define WR_CPT 32
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

// ξ of element e (< per_call) of one Philox call divided by xi_unscale<BITS>() (a power of two), exact, from
// the field j without an integer-to-float conversion where the field fits a mantissa (SPEC §2:
// ξ = (2j + 1 − 2^m) / 2^(m+1)):
//   8 bits: the byte j in the mantissa of 2^23 + 256 j (one byte permute) minus 2^23 + 256·127.5
//           leaves 256 (j − 127.5) = ξ·2^16;
//   16 bits: 2^23 + 2j minus 2^23 + 65535 leaves 2j − 65535 = ξ·2^17;
//   24 bits: 2j exceeds a mantissa: ξ = j·2^-24 + (2^-25 − 1/2) in one fma, exact (ξ·2^25 is an
//            integer below 2^24 in magnitude).
// `magic`: 0x4B000000 (2^23's bits) in a register (wr_xi_magic), for the 8-bit field's permute.
template <int BITS>
__device__ __forceinline__ float xi_scaled(const u32x4& w, int e, u32 magic) {
    if constexpr (BITS == 8) {
        const u32 t = __byte_perm(word_of(w, e >> 2), magic, 0x7504u | ((u32)(e & 3) << 4));
        return __fsub_rn(__uint_as_float(t), 8421248.0f);  // 2^23 + 256 * 127.5
    } else if constexpr (BITS == 16) {
        const u32 wd = word_of(w, e >> 1);
        const u32 j2 = (e & 1) ? ((wd >> 15) & 0x1FFFEu) : ((wd << 1) & 0x1FFFEu);
        return __fsub_rn(__uint_as_float(0x4B000000u | j2), 8454143.0f);  // 2^23 + 65535
    } else {
        static_assert(BITS == 24, "8, 16 or 24 dither bits");
        return __fmaf_rn((float)(word_of(w, e) >> 8), 0x1p-24f, 0x1p-25f - 0.5f);
    }
}

// 0x4B000000 in a register the compiler cannot fold.  Why: a byte permute takes one immediate;
// with both the selector and 2^23's bits known, ptxas kept the constant as the immediate and
// rebuilt the selector before every permute, an extra instruction per channel (8-bit dither: 6%
// fewer instructions executed, 2% less time; at 16 bits, where the field is shifted and masked
// instead, the register measured 1% more instructions and is not used).  The bits come from the
// clock's top bit (0: the counter would need 2^63 cycles to reach it), once per thread.
__device__ __forceinline__ u32 wr_xi_magic() {
    return 0x4B000000u | (u32)((unsigned long long)clock64() >> 63);
}

template <int BITS>
__device__ __forceinline__ constexpr float xi_unscale() { return BITS == 8 ? 0x1p-16f : (BITS == 16 ? 0x1p-17f : 1.0f); }

// lane-wise max of two pairs of 16-bit unsigned integers (max.u16x2, sm_90)
__device__ __forceinline__ u32 max_u16x2(u32 a, u32 b) {
    u32 r;
    asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

// 1.5 · 2^23: for |z| < 2^22, z + WR_RINT_MAGIC rounds z to an integer, ties to even (= rintf),
// and the low byte of the sum's bits is that integer as an int8.
#define WR_RINT_MAGIC 12582912.0f

// The witness staging row: channel c of a row at c + 4·(c / 32) floats, rows D + D/8 floats apart,
// so that each quarter-warp's 16-byte stores of its lanes' four channels fall on distinct banks at
// every head dim (two, four or eight lanes a row), and a half-warp's 8-byte stores on at most two
// lanes a bank; a band's runs are read as 16-byte vectors.
template <int D>
__device__ __forceinline__ constexpr int wr_wit_stride() { return D + D / 8; }
__device__ __forceinline__ int wr_wit_at(int c) { return c + 4 * (c >> 5); }

// channel j of the thread's input as fp32, from its packed fp16 pairs
template <int N>
__device__ __forceinline__ float wr_channel(const u32 (&xh)[N], int j) {
    return f16_to_f32((u16)(xh[j / 2] >> (16 * (j % 2))));
}

// one word of four int8 codes, the low bytes of four sums z + WR_RINT_MAGIC, the first lowest
__device__ __forceinline__ u32 wr_code_word(const u32 (&mb)[4]) {
    return __byte_perm(__byte_perm(mb[0], mb[1], 0x0040u), __byte_perm(mb[2], mb[3], 0x0040u), 0x5410u);
}

// The quantization of a lane's 32 channels: z = x/s + ξ with ξ's power-of-two scaling folded into
// one FMA (exact product, one rounding: the twin's fp32 sum); with a witness (WIT) k − ξ the same way
// (the fp32 rounding of the exact difference, as the twin's subtraction) and the residual's square
// staged at er_mine[j].  Every channel is treated as quantized: the caller overwrites the bypassed
// channels and those of a zero or non-finite group (code 0, witness term 0), whose values here are
// whatever x/0 or x/inf gave.  Why one path: a second, masked instantiation for rows with such a
// group needs more than 64 registers at 16 and 24 bits with a witness (ptxas spills), where this one
// fits 4 CTAs per SM; overwriting the channels afterwards gives the same codes and sums.
// The Philox calls are written where their words are used, so ptxas keeps one or two calls' words
// live.
template <int BITS, bool WIT>
__device__ __forceinline__ void wr_quantize(const u32 (&xh)[WR_CPT / 2], const float (&sb)[WR_CPT / 16],
                                            const float (&rcp)[WR_CPT / 16], i64 slot, int side, int c0,
                                            u32 ctr2, u32 k0, u32 k1, float* er_mine, u32 (&packed)[WR_CPT / 4]) {
    constexpr int PC = BITS == 8 ? 16 : (BITS == 16 ? 8 : 4);  // channels per Philox call
    const u32 magic = BITS == 8 ? wr_xi_magic() : 0u;  // (unused at 16 and 24 bits)
#pragma unroll
    for (int q = 0; q < WR_CPT / PC; ++q) {
        const u32x4 w = philox10((u32)slot, dither_ctr1(side, c0 / PC + q), ctr2, 0u, k0, k1);
#pragma unroll
        for (int e4 = 0; e4 < PC; e4 += 4) {  // four channels at a time: one code word
            u32 mb[4];
            float er[4];  // (stored in pairs: four at once left ptxas one register short at 8 bits)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = PC * q + e4 + e;
                const float x = wr_channel(xh, j);
                const float xs = xi_scaled<BITS>(w, e4 + e, magic);
                const float z = __fmaf_rn(xs, xi_unscale<BITS>(), quotient_rn(x, sb[j / 16], rcp[j / 16]));
                const float m = __fadd_rn(z, WR_RINT_MAGIC);
                mb[e] = __float_as_uint(m);
                if constexpr (WIT) {
                    const float kmxi = __fmaf_rn(-xs, xi_unscale<BITS>(), __fsub_rn(m, WR_RINT_MAGIC));
                    er[e] = square_up(__fmaf_rn(sb[j / 16], kmxi, -x));
                    if (e & 1)
                        *reinterpret_cast<float2*>(&er_mine[PC * q + e4 + e - 1]) = make_float2(er[e - 1], er[e]);
                }
            }
            packed[(PC * q + e4) / 4] = wr_code_word(mb);
        }
    }
}

// bit j set for each channel c0 + j (j < WR_CPT) among the row's NP2 bypassed channels `ch`
__device__ __forceinline__ u32 wr_bypass_mask(const int* __restrict__ ch, int NP2, int c0) {
    u32 m = 0u;
    for (int t = 0; t < NP2; ++t) {
        const int j = ch[t] - c0;
        if ((unsigned)j < (unsigned)WR_CPT) m |= 1u << j;
    }
    return m;
}

// One lane's bands of a row, in the twin's band order, with the band width a compile-time constant
// (PER channels; NEOX: pairs {i, i + D/2}): lane tr sums bands tr·BPL .. tr·BPL + BPL − 1 from the
// row's staged squares `er` and stores their witnesses as one vector.  Same chain, same bits as
// wr_band_sums_any; write_rows_impl takes this one for bands of 4, 8 and 16 channels (16 bands at
// d = 64, 128 and 256, and their neighbours), where the general loop's runtime trip counts and
// addressing cost more than the sums themselves.
template <int D, int PER, bool NEOX>
__device__ __forceinline__ void wr_band_sums(const float* er, int tr, bool rbad, u16* wit_row) {
    constexpr int TPR = D / WR_CPT, NB = D / PER, BPL = NB / TPR;
    static_assert(BPL >= 1 && BPL <= 8 && PER % 4 == 0, "a lane's bands fit one vector store");
    static_assert(BPL * PER == 32, "a lane's bands are 32 channels");
    // The lane's bands cover 32 consecutive channels (GPT-J: its own, tr·32 ..) or 16 consecutive
    // pairs (NeoX: tr·16 .. and their partners D/2 further), each run inside one 32-channel chunk of
    // the staging row: one base each, compile-time offsets.
    const float* lo_s = er + (NEOX ? wr_wit_at(16 * tr) : wr_wit_at(32 * tr));
    const float* hi_s = er + wr_wit_at(16 * tr + D / 2);
    u32 h[(BPL + 1) / 2];
#pragma unroll
    for (int k = 0; k < (BPL + 1) / 2; ++k) h[k] = 0u;
#pragma unroll
    for (int bl = 0; bl < BPL; ++bl) {
        float acc = 0.0f;
        if constexpr (!NEOX) {
#pragma unroll
            for (int c = 0; c < PER; c += 4) {
                const float4 e = *reinterpret_cast<const float4*>(&lo_s[bl * PER + c]);
                acc = __fadd_ru(__fadd_ru(__fadd_ru(__fadd_ru(acc, e.x), e.y), e.z), e.w);
            }
        } else if constexpr (PER == 4) {  // two pairs
            const float2 lo = *reinterpret_cast<const float2*>(&lo_s[2 * bl]);
            const float2 hi = *reinterpret_cast<const float2*>(&hi_s[2 * bl]);
            acc = __fadd_ru(__fadd_ru(__fadd_ru(__fadd_ru(acc, lo.x), hi.x), lo.y), hi.y);
        } else {
#pragma unroll
            for (int c = 0; c < PER / 2; c += 4) {
                const float4 lo = *reinterpret_cast<const float4*>(&lo_s[bl * (PER / 2) + c]);
                const float4 hi = *reinterpret_cast<const float4*>(&hi_s[bl * (PER / 2) + c]);
                acc = __fadd_ru(__fadd_ru(__fadd_ru(__fadd_ru(acc, lo.x), hi.x), lo.y), hi.y);
                acc = __fadd_ru(__fadd_ru(__fadd_ru(__fadd_ru(acc, lo.z), hi.z), lo.w), hi.w);
            }
        }
        const u32 w = rbad ? (u32)WC_FP16_INF : (u32)witness_f16_of_sum(acc);
        h[bl / 2] |= w << (16 * (bl % 2));
    }
    u16* dst = wit_row + tr * BPL;  // (BPL·2 bytes, aligned to its size)
    if constexpr (BPL == 8) *reinterpret_cast<uint4*>(dst) = make_uint4(h[0], h[1], h[2], h[3]);
    else if constexpr (BPL == 4) *reinterpret_cast<uint2*>(dst) = make_uint2(h[0], h[1]);
    else if constexpr (BPL == 2) *reinterpret_cast<u32*>(dst) = h[0];
    else *dst = (u16)h[0];
}

// Every band width: lane tr sums bands tr, tr + TPR, ... of the row in the twin's band order
// (_cpu/write.py::band_witness's chain), every addition rounded up; a bypassed channel's term is 0,
// which leaves the sum exact.
template <int D>
__device__ __noinline__ void wr_band_sums_any(const float* er, int tr, int per, bool neox, bool rbad, u16* wit_row) {
    constexpr int TPR = D / WR_CPT;
    const int NB = D / per;
    for (int b = tr; b < NB; b += TPR) {
        float acc = 0.0f;
        if (!neox) {  // channels b·per .. b·per + per − 1
            const int cb = b * per;
            if ((per & 3) == 0) {
#pragma unroll 2
                for (int c = cb; c < cb + per; c += 4) {
                    const float4 e = *reinterpret_cast<const float4*>(&er[wr_wit_at(c)]);
                    acc = __fadd_ru(__fadd_ru(__fadd_ru(__fadd_ru(acc, e.x), e.y), e.z), e.w);
                }
            } else {
                for (int c = cb; c < cb + per; ++c) acc = __fadd_ru(acc, er[wr_wit_at(c)]);
            }
        } else {  // pairs b·per/2 .. : channels i, i + D/2 in turn
            const int pb = per / 2, ib = b * pb;
            if ((pb & 3) == 0) {
#pragma unroll 2
                for (int c = ib; c < ib + pb; c += 4) {
                    const float4 lo = *reinterpret_cast<const float4*>(&er[wr_wit_at(c)]);
                    const float4 hi = *reinterpret_cast<const float4*>(&er[wr_wit_at(c + D / 2)]);
                    acc = __fadd_ru(__fadd_ru(__fadd_ru(__fadd_ru(acc, lo.x), hi.x), lo.y), hi.y);
                    acc = __fadd_ru(__fadd_ru(__fadd_ru(__fadd_ru(acc, lo.z), hi.z), lo.w), hi.w);
                }
            } else {
                for (int c = ib; c < ib + pb; ++c)
                    acc = __fadd_ru(__fadd_ru(acc, er[wr_wit_at(c)]), er[wr_wit_at(c + D / 2)]);
            }
        }
        wit_row[b] = rbad ? (u16)WC_FP16_INF : witness_f16_of_sum(acc);
    }
}

// write_rows: grid (ceil(n / rows per block), H · nsides), block WR_THREADS.  32 channels of one
// row (token i, kv head h, side) per thread, TPR = D / 32 threads per row (a power of two that
// divides 32: a row never leaves its warp), WR_THREADS / TPR consecutive tokens of one (kv head,
// side) per block, so the block's code rows are contiguous in the pool and no thread divides a
// 64-bit index.  Each thread computes its own Philox calls: every call runs once per row.
// Group amax and the non-finite flags reduce with shuffles over the row's lanes, on the fp16 bits
// (|x|'s bits order like |x|, and every NaN's bits lie above +inf's, so the integer maximum is the
// NaN-propagating maximum).  x / sb is the IEEE quotient from the group's reciprocal (quotient_rn,
// checked against division for every fp16 pair by tests/test_gpu.py); every other operation is
// the twin's, so codes, scales, outliers and witness are bit-identical to _cpu/write.py::write_rows.
// Witness (WIT): each lane stages its channels' squared residuals in shared memory, then the row's
// lanes sum its bands in the twin's band order: band_channels' bands of whole RoPE pairs
// (config.band_channels), consecutive channels (GPT-J) or pairs {i, i + D/2} (NeoX, `neox`), `per`
// channels a band (wr_band_sums for 4, 8 and 16, wr_band_sums_any otherwise).
template <int D, int BITS, bool WIT>
__device__ __forceinline__ void write_rows_impl(
    const void* __restrict__ xk, const void* __restrict__ xv, int in_dtype, int vec,
    const i64* __restrict__ slots,       // [n] dither slot of each row
    const i64* __restrict__ dest_rows,   // [n] storage row (the slot in a pool)
    int n, int H, i64 N, int layer, int head_base, int plane_layer, int side0, int nsides,
    int gs_shift,                        // log2 of the group size (d is a power of two, so is every group size)
    int NP2, int NB, int neox,
    const int* __restrict__ bypass_ch,   // [H, NP2] of this layer
    u32 k0, u32 k1,
    i8* __restrict__ codes, u16* __restrict__ scales, u16* __restrict__ outl, u16* __restrict__ wit,
    u16* __restrict__ exact,             // host-mapped [L, 2, H, N, D] or null
    unsigned long long* __restrict__ counters) {  // [0]: non-finite rows, [1]: rows with a bad slot
    constexpr int CPT = WR_CPT;
    constexpr int TPR = D / CPT;                           // threads per row
    constexpr int RPB = WR_THREADS / TPR;                  // rows per block
    constexpr int HV = CPT / 16;                           // 16-channel parts: the smallest scale group
    static_assert(TPR >= 1 && TPR <= 32 && (32 % TPR) == 0, "a row must stay inside one warp");
    __shared__ __align__(16) float err2_s[WIT ? RPB : 1][WIT ? wr_wit_stride<D>() : 4];
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
    // (gs = 16), else a group spans GL whole threads.  Shifts, not divisions.
    const int NG = D >> gs_shift;
    const bool split = (1 << gs_shift) < CPT;
    const int GL = split ? 1 : (1 << gs_shift) / CPT;
    const int c0 = tr * CPT;
    const i64 row = pool_row(plane_layer, side, H, h, N) + dest;
    const i64 src = (i * H + h) * D;
    const void* x_in = side == 0 ? xk : xv;
    const u32 ctr2 = dither_ctr2(layer, h + head_base);

    u32 xh[CPT / 2];
#pragma unroll
    for (int q = 0; q < CPT / WR_LOAD; ++q) load_f16x16(x_in, src + c0 + WR_LOAD * q, in_dtype, vec != 0, xh + WR_LOAD / 2 * q);
    if (exact != nullptr) {
        uint4* e = reinterpret_cast<uint4*>(exact + row * D + c0);
#pragma unroll
        for (int q = 0; q < CPT / 8; ++q) e[q] = make_uint4(xh[4 * q], xh[4 * q + 1], xh[4 * q + 2], xh[4 * q + 3]);
    }
    u32 bmask = wr_bypass_mask(bypass_ch + h * NP2, NP2, c0);  // bypassed channels among this thread's
    // per 16-channel part, as fp16 bits: the largest |x| over every channel (above 0x7BFF: the
    // group's non-finite flag, SPEC §3.6, bypassed channels included) and over the quantized
    // channels (the scale's amax).  A maximum is order-free, so any combination gives the twin's.
    u32 pall[HV], pq[HV];
#pragma unroll
    for (int v = 0; v < HV; ++v) {
        u32 ma = 0u;
#pragma unroll
        for (int k = 0; k < 8; ++k) ma = max_u16x2(ma, xh[8 * v + k] & 0x7FFF7FFFu);
        pall[v] = max(ma & 0xFFFFu, ma >> 16);
        pq[v] = pall[v];
    }
    if (bmask) {  // (when the group is not finite the scale is +inf and amax unused)
#pragma unroll
        for (int v = 0; v < HV; ++v) {
            u32 mq = 0u;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const u32 bb = bmask >> (16 * v + 2 * k);
                const u32 keep = ((bb & 1u) ? 0u : 0xFFFFu) | ((bb & 2u) ? 0u : 0xFFFF0000u);
                mq = max_u16x2(mq, xh[8 * v + k] & 0x7FFF7FFFu & keep);
            }
            pq[v] = max(mq & 0xFFFFu, mq >> 16);
        }
    }
    u32 gq[HV], gall[HV];                                   // per part: its group's amax and flag
    u32 rall = pall[0];                                     // the row's flag
#pragma unroll
    for (int v = 1; v < HV; ++v) rall = max(rall, pall[v]);
    if (split) {
#pragma unroll
        for (int v = 0; v < HV; ++v) gq[v] = pq[v], gall[v] = pall[v];
    } else {
        u32 a = pq[0];
#pragma unroll
        for (int v = 1; v < HV; ++v) a = max(a, pq[v]);
        u32 aa = rall;
        for (int off = 1; off < GL; off <<= 1) {
            a = max(a, __shfl_xor_sync(seg, a, off));
            aa = max(aa, __shfl_xor_sync(seg, aa, off));
        }
#pragma unroll
        for (int v = 0; v < HV; ++v) gq[v] = a, gall[v] = aa;
        rall = aa;
    }
    for (int off = GL; off < TPR; off <<= 1) rall = max(rall, __shfl_xor_sync(seg, rall, off));
    const bool rbad = rall > WC_FP16_MAX_BITS;
    // each group's scale, from its amax (once per thread when the parts share a group)
    float sb[HV], rcp[HV];
    bool live[HV];
    bool all_live = true;
#pragma unroll
    for (int v = 0; v < HV; ++v) {
        if (v == 0 || split) {
            const u32 s16 = gall[v] > WC_FP16_MAX_BITS ? (u32)WC_FP16_INF : scale_f16_of_amax(gq[v]);
            if (split) scales[row * NG + (c0 >> gs_shift) + v] = (u16)s16;
            else if ((tr & (GL - 1)) == 0) scales[row * NG + (c0 >> gs_shift)] = (u16)s16;
            sb[v] = f16_to_f32((u16)s16);
            live[v] = s16 != 0u && s16 != (u32)WC_FP16_INF;
            rcp[v] = live[v] ? __frcp_rn(sb[v]) : 0.0f;
        } else {
            sb[v] = sb[0];
            live[v] = live[0];
            rcp[v] = rcp[0];
        }
        all_live = all_live && live[v];
    }

    u32 packed[CPT / 4];                                   // the codes, four a word
    // (WIT) this lane's 32 staged squares: channel c0 + j at er_mine[j], one base for every store
    float* er_mine = &err2_s[rb][wr_wit_at(c0)];
    wr_quantize<BITS, WIT>(xh, sb, rcp, slot, side, c0, ctr2, k0, k1, er_mine, packed);
    if (!all_live) {  // a zero or non-finite group's channels: code 0, witness term 0 (the twin's)
#pragma unroll
        for (int v = 0; v < HV; ++v) {
            if (!live[v]) {
#pragma unroll
                for (int k = 0; k < 4; ++k) packed[4 * v + k] = 0u;
                if constexpr (WIT) {
#pragma unroll
                    for (int k = 0; k < 4; ++k)
                        *reinterpret_cast<float4*>(&er_mine[16 * v + 4 * k]) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
            }
        }
    }
    uint4* cdst = reinterpret_cast<uint4*>(codes + row * D + c0);
#pragma unroll
    for (int q = 0; q < CPT / 16; ++q)
        cdst[q] = make_uint4(packed[4 * q], packed[4 * q + 1], packed[4 * q + 2], packed[4 * q + 3]);
    // bypassed channels store code 0 and the witness term 0: the fast path quantized them with the
    // rest and they are overwritten here (the general path stored them so already).  The mask is
    // read again rather than kept live through the quantization: 24-bit dither has no register
    // to spare.
    for (u32 bb = wr_bypass_mask(bypass_ch + h * NP2, NP2, c0); bb != 0u; bb &= bb - 1u) {
        const int j = __ffs(bb) - 1;
        codes[row * D + c0 + j] = 0;
        if constexpr (WIT) er_mine[j] = 0.0f;
    }
    for (int t = 0; t < NP2; ++t) {
        const int ch = bypass_ch[h * NP2 + t];
        if ((unsigned)(ch - c0) < (unsigned)CPT) outl[row * NP2 + t] = load_as_f16(x_in, src + ch, in_dtype);
    }
    if constexpr (WIT) {
        const int per = D >> (__ffs(NB) - 1);  // (NB is a power of two: it divides D / 2)
        __syncwarp(seg);
        const float* er = err2_s[rb];
        u16* wit_row = wit + row * NB;
        if (!neox && per == 4) wr_band_sums<D, 4, false>(er, tr, rbad, wit_row);
        else if (!neox && per == 8) wr_band_sums<D, 8, false>(er, tr, rbad, wit_row);
        else if (!neox && per == 16) wr_band_sums<D, 16, false>(er, tr, rbad, wit_row);
        else if (neox && per == 4) wr_band_sums<D, 4, true>(er, tr, rbad, wit_row);
        else if (neox && per == 8) wr_band_sums<D, 8, true>(er, tr, rbad, wit_row);
        else if (neox && per == 16) wr_band_sums<D, 16, true>(er, tr, rbad, wit_row);
        else wr_band_sums_any<D>(er, tr, per, neox != 0, rbad, wit_row);
    }
    if (tr == 0 && rbad) atomicAdd(&counters[0], 1ull);
}

// CTAs per SM the register budget is set for: 4 (64 registers), at every dither width, with a
// witness or not (no spills: see wr_quantize)
#define WR_MIN_BLOCKS 4

#define WC_WRITE_ENTRY(D, BITS, WIT, SUFFIX)                                                              \
    extern "C" __global__ void __launch_bounds__(WR_THREADS, WR_MIN_BLOCKS)                          \
        write_rows_##D##_##BITS##SUFFIX(                                                                  \
            const void* xk, const void* xv, int in_dtype, int vec, const i64* slots, const i64* dest_rows, int n, \
            int H, i64 N, int layer, int head_base, int plane_layer, int side0, int nsides, int gs_shift, int NP2, \
            int NB, int neox, const int* bypass_ch, u32 k0, u32 k1, i8* codes, u16* scales, u16* outl,       \
            u16* wit, u16* exact, unsigned long long* counters) {                                         \
        write_rows_impl<D, BITS, WIT>(xk, xv, in_dtype, vec, slots, dest_rows, n, H, N, layer, head_base,     \
                                      plane_layer, side0, nsides, gs_shift, NP2, NB, neox, bypass_ch, k0, k1, \
                                      codes, scales, outl, wit, exact, counters);                         \
    }
// every entry of one head dim: each dither width with and without a witness (the launch layer,
// witcert_cupy/_cuda/: write_kernel, names them)
#define WC_WRITE_ENTRIES(D)                                                                      \
    WC_WRITE_ENTRY(D, 8, false, ) WC_WRITE_ENTRY(D, 16, false, ) WC_WRITE_ENTRY(D, 24, false, ) \
    WC_WRITE_ENTRY(D, 8, true, _wit) WC_WRITE_ENTRY(D, 16, true, _wit) WC_WRITE_ENTRY(D, 24, true, _wit)
WC_WRITE_ENTRIES(64)
WC_WRITE_ENTRIES(128)
WC_WRITE_ENTRIES(256)

// ||x|| of a stored fp16 row from its squares `x2` (each exact in fp32: an fp16 significand squared
// fits 22 bits and 2^-48 is normal), rounded up: the running sum in channel order and the square
// root, each rounded toward +inf.  The norm form of an fp16 store's evaluation term
// (docs/certificate.md §10.1) reads it from the pool instead of forming it per token and step.
// Twin of witcert_cupy/_cpu/write.py::row_norm_up.
__device__ __forceinline__ float row_norm_up(const float* x2, int D) {
    float acc = 0.0f;
    for (int c = 0; c < D; ++c) acc = __fadd_ru(acc, x2[c]);
    return __fsqrt_ru(acc);
}

// store_fp16_rows: grid (n, Hkv, 2 sides), block d.  Stores what a scheme reconstructs (`stored`,
// or the exact row when null) as fp16, the Tier-A witness of stored − exact and, where `knorm` is
// not null ([L, Hkv, N] float32: a pool with a witness), each stored K row's norm rounded up.
// Twin of witcert_cupy/_cpu/write.py::store_fp16_rows.
extern "C" __global__ void __launch_bounds__(WC_MAX_D) store_fp16_rows(
    const void* __restrict__ xk, const void* __restrict__ xv, int in_dtype,
    const void* __restrict__ sk, int sk_dtype, const void* __restrict__ sv, int sv_dtype,  // null: exact row
    const i64* __restrict__ dest_rows, int n, int H, i64 N, int D, int layer, int NB,
    const int* __restrict__ band_ch, u16* __restrict__ values, u16* __restrict__ wit, float* __restrict__ knorm,
    u16* __restrict__ exact, unsigned long long* __restrict__ counters) {
    __shared__ float err2[WC_MAX_D], x2[WC_MAX_D];
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
    const bool finite = is_finite32(x) && is_finite32(xs);
    err2[c] = finite ? square_up(__fsub_rn(xs, x)) : 0.0f;
    x2[c] = finite ? __fmul_rn(xs, xs) : 0.0f;  // (exact: see row_norm_up)
    values[row * D + c] = sb;
    if (exact != nullptr) exact[row * D + c] = xb;
    const bool row_bad = __syncthreads_or(!finite);
    if (c < NB) wit[row * NB + c] = row_bad ? (u16)WC_FP16_INF : band_witness(err2, band_ch + c * (D / NB), D / NB);
    if (side == 0 && knorm != nullptr && c == D - 1)
        knorm[((i64)layer * H + h) * N + dest] = row_bad ? INFINITY : row_norm_up(x2, D);
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
