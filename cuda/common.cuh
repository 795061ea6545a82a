// common.cuh — types, IEEE fp16 bit conversions and directed-rounding helpers shared by the kernels.
//
// NVRTC has no system headers: fixed-width types are typedefs.  Every numeric constant of the
// contract (SPEC.md) arrives as a -D definition generated from witcert_cupy/_contract.py, so the
// Python and CUDA sides cannot drift apart.  Conversions here are the bit-for-bit twins of
// witcert_cupy/_cpu/bits.py.
#pragma once

typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;
typedef unsigned short u16;
typedef signed char i8;
typedef unsigned char u8;

#ifdef __CUDACC__
#define WC_HD __host__ __device__ __forceinline__
#define WC_D __device__ __forceinline__
#else
#define WC_HD inline
#define WC_D inline
#endif

#ifndef WC_SCALE_DIVISOR
#error "compile with the -D definitions of witcert_cupy._cuda.defines()"
#endif

#define WC_F32_MAX 3.4028234663852886e38f
// the smallest normal fp32 value: under -ftz=true anything smaller reads 0
#define WC_F32_MIN_NORMAL 0x1p-126f
#define WC_F64_MAX 1.7976931348623157e308

// NVRTC has no <math.h>: define the two macros the kernels use (nvcc already has them).
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
// the largest finite fp16's bits: |x|'s bits above it are +inf or a NaN
#define WC_FP16_MAX_BITS (WC_FP16_INF - 1u)
// log2(e) as the float nearest it: the decodes keep logits in log2 units (exp2)
#define WC_LOG2E 1.4426950408889634f
// log2(e) rounded up, and ln 2 as a float (which is above it): bounds carried into and out of log2
// units with upward rounding stay bounds
#define WC_LOG2E_UP 1.4426951408386230f  // 0x3FB8AA3C
#define WC_LN2 0.6931471805599453f  // 0x3F317218, the float nearest ln 2, lies above it

#ifdef __CUDA_ARCH__
WC_D u32 f32_bits(float x) { return __float_as_uint(x); }
WC_D float f32_from_bits(u32 b) { return __uint_as_float(b); }

// fp16 -> fp32 is exact; the hardware conversion handles subnormals without flushing.
WC_D float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// the two fp16 values of a 32-bit word, exactly, as fp32 (ptxas converts each half in place)
WC_D void f16_pair(u32 w, float& lo, float& hi) {
    lo = f16_to_f32((u16)(w & 0xFFFFu));
    hi = f16_to_f32((u16)(w >> 16));
}

// the four fp16 values of an 8-byte load, exactly, as fp32
WC_D void f16_x4(uint2 w, float (&x)[4]) {
    f16_pair(w.x, x[0], x[1]);
    f16_pair(w.y, x[2], x[3]);
}

WC_D bool is_finite32(float v) { return fabsf(v) <= WC_F32_MAX; }

// fp32 -> fp16 bits, round to nearest even (twin of bits.f32_to_f16_bits_rn).
WC_D u32 f32_to_f16_rn(float x) {
    u32 b = f32_bits(x);
    u32 sign = (b >> 16) & 0x8000u;
    u32 a = b & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) return sign | 0x7C00u | (a > 0x7F800000u ? 0x200u : 0u);
    if (a >= 0x477FF000u) return sign | 0x7C00u;
    if (a >= 0x38800000u) {
        u32 r = a + 0xFFFu + ((a >> 13) & 1u);
        return sign | ((r >> 13) - (112u << 10));
    }
    // fp16 subnormal: the value in units of 2^-24 (exact scaling; an fp32 subnormal input rounds
    // to 0 either way, so flush-to-zero cannot change the result)
    return sign | (u32)rintf(__fmul_rn(f32_from_bits(a), 16777216.0f));
}

// fp64 -> fp16 bits, round to nearest even, directly from the double (no double rounding).
WC_D u32 f64_to_f16_rn(double x) {
    u64 b = (u64)__double_as_longlong(x);
    u32 sign = (u32)(b >> 48) & 0x8000u;
    u64 a = b & 0x7FFFFFFFFFFFFFFFull;
    if (a >= 0x7FF0000000000000ull) return sign | 0x7C00u | (a > 0x7FF0000000000000ull ? 0x200u : 0u);
    if (a >= 0x40EFFE0000000000ull) return sign | 0x7C00u;          // >= 65520
    if (a >= 0x3F10000000000000ull) {                               // >= 2^-14: normal fp16
        u64 r = a + 0x1FFFFFFFFFFull + ((a >> 42) & 1ull);
        return sign | (u32)((r >> 42) - (1008ull << 10));
    }
    // subnormal fp16: units of 2^-24, exact scaling in double, rint half-even
    return sign | (u32)rint(__longlong_as_double((long long)a) * 16777216.0);
}

// fp32 x >= 0 (or +inf/NaN) -> fp16 bits rounded toward +inf; NaN -> +inf.
WC_D u32 f32_to_f16_ru(float x) {
    if (!(x <= WC_F32_MAX)) return WC_FP16_INF;
    u32 h = f32_to_f16_rn(x);
    if (f16_to_f32((u16)h) < x) h += 1u;  // 0x7BFF + 1 = +inf: the right answer on overflow
    return h;
}

// x / b rounded to nearest (IEEE fp32 division) from rcp = __frcp_rn(b): the product x·rcp and one
// residual correction (Markstein), with the reciprocal hoisted out of a scale group.  One correction
// is not exact for every fp32 pair; for the write path's operands (fp16 x, fp16 b in
// [2^-24, 65504], where every intermediate is a normal fp32 number, so flush-to-zero cannot act)
// tests/test_gpu.py checks it against division for all 2^16 × 31743 pairs: equal, up to the sign
// of a zero quotient (−0 / b gives +0; the write path adds ξ ≠ 0 to it).
WC_D float quotient_rn(float x, float b, float rcp) {
    const float q = __fmul_rn(x, rcp);
    return __fmaf_rn(__fmaf_rn(-b, q, x), rcp, q);
}

// f32_to_f16_ru by the hardware conversion, for x >= 0 that is 0, a normal fp32 number or +inf (a
// subnormal one would convert where f32_to_f16_ru, under flush-to-zero, gives 0)
WC_D u32 f32_to_f16_ru_normal(float x) {
    unsigned short r;
    asm("cvt.rp.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}

// √acc rounded up for a witness sum: 0, or a finite sum of squares of non-zero residuals (each at
// least 2^-98).  On [2^-101, FLT_MAX] __fsqrt_ru is this sequence (a reciprocal-root estimate, the
// residual a − s² by an exact fma, the correction added rounded up); outside it __fsqrt_ru branches
// to a general routine, which a witness sum reaches only at 0.  Written out, the root has no branch
// (1.2% fewer instructions executed by the witness write kernels), with the same bits:
// tests/test_gpu.py compares the two on every float of that range and at 0.
WC_D float witness_sqrt_ru(float acc) {
    float r, s, h, e, q;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(acc));
    asm("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(s) : "f"(acc), "f"(r));
    asm("mul.rn.ftz.f32 %0, %1, 0f3F000000;" : "=f"(h) : "f"(r));
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(e) : "f"(-s), "f"(s), "f"(acc));
    asm("fma.rp.f32 %0, %1, %2, %3;" : "=f"(q) : "f"(e), "f"(h), "f"(s));
    return acc == 0.0f ? 0.0f : q;
}

// The fp16 bits of a scale group's scale from its amax's fp16 bits (finite, non-negative):
// fp16(fp32(amax / SCALE_DIVISOR)) rounded up, 0 for amax = 0 (SPEC §3, the twin's division).  The
// quotient by quotient_rn with the divisor's reciprocal (the divisor 126.5 is itself an fp16, so
// the every-fp16-pair check covers it), the rounding up to fp16 by the hardware conversion (the
// quotient is a normal fp32 number below 65504 / 126.5: no overflow, nothing to flush).
// tests/test_gpu.py compares it with f32_to_f16_ru(__fdiv_rn(amax, 126.5)) for every finite amax.
WC_D u32 scale_f16_of_amax(u32 amax_bits) {
    if (amax_bits == 0u) return 0u;
    const float d = (float)WC_SCALE_DIVISOR;
    return f32_to_f16_ru_normal(quotient_rn(f16_to_f32((u16)amax_bits), d, __frcp_rn(d)));
}

#endif  // __CUDA_ARCH__

// a compile-time boolean as a type: the argument that picks a generic lambda's instance
template <bool B>
struct WcBool {
    static constexpr bool value = B;
};

#ifdef __CUDA_ARCH__
// A request's pages, every page-table value checked before use: an inconsistent kv_indptr or a last
// page length outside 1..page_size poisons the request (NaN output, infinite certificate) instead
// of reading out of bounds.  Page ids are checked where they are read.
struct RequestPages {
    int p0;         // its first entry in kv_indices
    int npages;
    i64 S;          // tokens
    bool poisoned;
};

WC_D RequestPages request_pages(const int* kv_indptr, const int* kv_last_page_len, int b, int nnz, int page_shift) {
    RequestPages r;
    r.p0 = kv_indptr[b];
    const int p1 = kv_indptr[b + 1], last = kv_last_page_len[b];
    r.poisoned = r.p0 < 0 || p1 < r.p0 || p1 > nnz;
    r.npages = r.poisoned ? 0 : p1 - r.p0;
    r.poisoned = r.poisoned || (r.npages > 0 && (last < 1 || last > (1 << page_shift)));
    r.S = r.npages == 0 ? 0 : ((i64)(r.npages - 1) << page_shift) + last;
    return r;
}

// The pool row of slot 0 of (layer, side 0 = K / 1 = V, kv head h): codes are [L, 2, H, N, d] and
// scales [L, 2, H, N, groups], so a slot's codes start at (pool_row + slot)·d.
WC_D i64 pool_row(int layer, int side, int H, int h, i64 N) { return (((i64)layer * 2 + side) * H + h) * N; }

// The pool slot of token `tok` of a request, on page `page` (read from kv_indices), or -1 when the
// page id is outside [0, num_pages): the caller then poisons the request and reads nothing.
WC_D i64 slot_of(int page, i64 tok, int page_shift, int num_pages) {
    return page < 0 || page >= num_pages ? (i64)-1 : ((i64)page << page_shift) + (tok & ((1 << page_shift) - 1));
}

// Split s of num_splits of a request: the tokens [ta, tb) of its share of whole pages (empty for a
// poisoned request or a split past its pages).
struct SplitTokens {
    i64 ta, tb;
};

WC_D SplitTokens split_tokens(const RequestPages& rp, int s, int num_splits, int page_shift) {
    const int pps = (rp.npages + num_splits - 1) / num_splits;
    const int pa = min(s * pps, rp.npages), pb = min(pa + pps, rp.npages);
    SplitTokens t;
    t.ta = (i64)pa << page_shift;
    t.tb = rp.poisoned ? t.ta : min((i64)pb << page_shift, rp.S);
    return t;
}

// A split's first page ids, requested before its request's kv_indptr entries have arrived: where
// the split would begin if kv_indices held the grid's `nreq` requests in equal shares — so right
// for every request of a batch of equal lengths and for a single request.  tile_page_or takes such
// a value only where the real index is the guessed one, and reads the entry otherwise: the same
// page ids either way, and on a right guess the first tile's rows wait for two dependent round
// trips instead of three.  decode_stage1_f16 guesses (0.2–0.3 µs at B = 1, 4k, 0.8% at
// B = 8, 28/4, 32k); decode_stage1_v2 does not: there its set-up is the longer chain, and the same
// guess measured 0.1 µs faster at B = 1, 4k and up to 1% slower at 32k (docs/performance.md).
struct PageGuess {
    int idx;   // the entry of kv_indices guessed for this lane's token (-1: none)
    int page;  // its value
};

WC_D PageGuess guess_first_page(const int* kv_indices, int b, int nreq, int nnz, int s, int num_splits, int lane,
                                int page_shift) {
    const int npg = nnz / max(nreq, 1);
    const int pps = (npg + num_splits - 1) / num_splits;  // split_tokens' pages per split
    const i64 idx = (i64)b * npg + min(s * pps, npg) + (lane >> page_shift);
    PageGuess g;
    g.idx = idx < nnz ? (int)idx : -1;
    g.page = g.idx >= 0 ? kv_indices[g.idx] : 0;
    return g;
}

// The staged decodes' tiles (lane = token t0 + lane of a request, tokens before tb): the token's
// page id, read from kv_indices (0 past tb) ...
WC_D int tile_page(const int* kv_indices, int p0, i64 t0, i64 tb, int lane, int page_shift) {
    const i64 tok = t0 + lane;
    return tok < tb ? kv_indices[p0 + (int)(tok >> page_shift)] : 0;
}

// ... or the guessed value where it is this entry's (guess_first_page)
WC_D int tile_page_or(const int* kv_indices, int p0, i64 t0, i64 tb, int lane, int page_shift, PageGuess g) {
    const i64 tok = t0 + lane;
    return tok < tb && p0 + (int)(tok >> page_shift) == g.idx ? g.page
                                                              : tile_page(kv_indices, p0, t0, tb, lane, page_shift);
}

// ... and its slot, or -1 past tb or for a page id outside the pool (which sets `poisoned`)
WC_D i64 tile_slot(i64 t0, i64 tb, int lane, int page, int page_shift, int num_pages, bool& poisoned) {
    const i64 tok = t0 + lane;
    const i64 sl = tok < tb ? slot_of(page, tok, page_shift, num_pages) : (i64)-1;
    if (tok < tb && sl < 0) poisoned = true;
    return sl;
}

WC_D float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

WC_D float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// v[k] for a runtime k < N, selected rather than indexed (an indexed register array goes to local
// memory)
template <int N, typename T>
WC_D T select_of(const T (&v)[N], int k) {
    T r = v[0];
#pragma unroll
    for (int i = 1; i < N; ++i)
        if (i == k) r = v[i];
    return r;
}

// acc + q·x over 8 channels, one chain in channel order (q: 16-byte aligned shared memory)
WC_D float dot8(float acc, const float* q, const float (&x)[8]) {
    const float4 qa = *reinterpret_cast<const float4*>(q);
    const float4 qb = *reinterpret_cast<const float4*>(q + 4);
    acc += qa.x * x[0];
    acc += qa.y * x[1];
    acc += qa.z * x[2];
    acc += qa.w * x[3];
    acc += qb.x * x[4];
    acc += qb.y * x[5];
    acc += qb.z * x[6];
    acc += qb.w * x[7];
    return acc;
}

// Each of G warp-uniform sums at once: the butterfly steps of the G values interleave, so that G
// independent shuffles are in flight per step (each value's own sum is warp_sum's, bit for bit)
template <int G>
WC_D void warp_sums(float (&v)[G]) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int g = 0; g < G; ++g) v[g] += __shfl_xor_sync(0xffffffffu, v[g], off);
}
// ... and of G maxima (each warp_max's)
template <int G>
WC_D void warp_maxes(float (&v)[G]) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int g = 0; g < G; ++g) v[g] = fmaxf(v[g], __shfl_xor_sync(0xffffffffu, v[g], off));
}

// A tile's logits in log2 units (the softmax runs on exp2) from the G dot products; a token's
// non-finite logit poisons its head alone (bit base + g of hbad: its query is not finite)
template <int G>
WC_D void tile_logits(const float (&dot)[G], float sm2, bool valid, float (&lt)[G], int& hbad, int base = 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
        lt[g] = sm2 * dot[g];
        if (valid && !is_finite32(lt[g])) hbad |= 1 << (base + g);
    }
}

// One 32-token tile of the staged decodes' online softmax for the G heads of a kv head (lane =
// token, logits `lt` in log2 units): the running maxima m become the maxima after the tile, `sc`
// the rescales of what was summed before, `p` the token's weights (0 past the split's end; 1 and
// 0 while no token has been valid).  The G warp maxima interleave and nothing branches: one head
// at a time, each butterfly step's shuffle latency was exposed and the per-head branch kept the
// compiler from overlapping heads (docs/performance.md).  Each head's values are the
// one-head-at-a-time values, bit for bit (max is exact; the exponentials are the same operations).
template <int G>
WC_D void softmax_tile_steps(const float (&lt)[G], bool valid, float (&m)[G], float (&sc)[G], float (&p)[G]) {
    float mx[G];
#pragma unroll
    for (int g = 0; g < G; ++g) mx[g] = valid ? lt[g] : -INFINITY;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int g = 0; g < G; ++g) mx[g] = fmaxf(mx[g], __shfl_xor_sync(0xffffffffu, mx[g], off));
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const float mn = fmaxf(m[g], mx[g]);
        const bool live = mn != -INFINITY;  // a valid token so far (else 2^(−inf − −inf) is NaN)
        sc[g] = live ? exp2f(m[g] - mn) : 1.0f;
        p[g] = live && valid ? exp2f(lt[g] - mn) : 0.0f;
        m[g] = mn;
    }
}

// λ's sum (SPEC §6) under its own running maximum m2 for one more term 2^x (log2 units): 2^{m2 − mn}
// rescales the old sum and 2^{x − mn} is the new term, one of the two being 2^0 = 1, so the values
// are those of the form that selects between l2·2^{m2−x} + 1 (a new maximum) and l2 + 2^{x−m2},
// without its compare and select (docs/performance.md).  x = +inf (an infinite c_t, or an
// overflowing sum) leaves m2 = +inf, which every caller's end turns into λ = +inf whatever l2 holds.
WC_D void lambda_sum(float x, float& m2, float& l2) {
    const float mn = fmaxf(m2, x);
    l2 = fmaf(l2, exp2f(m2 - mn), exp2f(x - mn));
    m2 = mn;
}

// λ's step for one valid token of one head, c_t `c` in natural units (≥ 0, or +inf: "no guarantee",
// which makes cmax infinite) and logit `lt` in log2 units: cmax, then λ's sum
WC_D void lambda_add(float c, float lt, float& m2, float& l2, float& cmx) {
    cmx = fmaxf(cmx, c);
    lambda_sum(lt + c * WC_LOG2E, m2, l2);
}

// the same with c_t already in log2 units (`c2`, its coefficients scaled by C_EVAL_SLACK·log2 e,
// docs/certificate.md §6); cmx is then in log2 units too
WC_D void lambda_add_log2(float c2, float lt, float& m2, float& l2, float& cmx2) {
    cmx2 = fmaxf(cmx2, c2);
    lambda_sum(lt + c2, m2, l2);
}

// Stage-1 split statistics of one (row, split) (SPEC §6): a poisoned split carries NaN lse and an
// infinite certificate, an empty one −inf and weight 0; otherwise the given natural-log values.
// `gam` is the split's largest evaluation term Γ_s = max γ_t (docs/certificate.md §10.4).
WC_D void store_split_stats(i64 o, bool poisoned, float L, float lse, float lam, float cmax, float gam,
                            float* lse_part, float* lam_part, float* cmax_part, float* gam_part) {
    if (poisoned) {
        lse_part[o] = NAN;
        lam_part[o] = INFINITY;
        cmax_part[o] = INFINITY;
        gam_part[o] = INFINITY;
    } else if (L == 0.0f) {
        lse_part[o] = -INFINITY;
        lam_part[o] = -INFINITY;
        cmax_part[o] = 0.0f;
        gam_part[o] = 0.0f;
    } else {
        lse_part[o] = lse;
        lam_part[o] = lam;
        cmax_part[o] = cmax;
        gam_part[o] = gam;
    }
}
#endif  // __CUDA_ARCH__
