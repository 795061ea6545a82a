// certificate.cuh — the certificate's per-head coefficients, formed on a power-of-two-normalized
// query (SPEC §4.1, §4.2; docs/certificate.md §10).  Twins of head_coefficients / coef_up in
// witcert_cupy/_cpu/decode.py.
//
// Every sum over query entries (Σq², Σ|q|, a band's Σq²) runs on q·2^-e, where 2^e bounds the
// group's largest |q| (frexp), so no term underflows or overflows whatever the query's or sm's
// magnitude; the power of two goes back in once, exactly, when the coefficient is formed.  A
// coefficient whose value falls below the floor (COEF_FLOOR_1 for those multiplying a scale or a
// witness, COEF_FLOOR_2 for those multiplying a squared scale) is raised to it, so that no per-token
// product underflows: a floor only raises c_t.
#pragma once
#include "common.cuh"

#ifdef __CUDA_ARCH__
// float32 >= x·2^e: exact where that is a normal number, `floor` where it is below, +inf past the
// range or for a non-finite x; 0 for x = 0
WC_D float coef_up(float x, int e, float floor) {
    if (x == 0.0f) return 0.0f;
    if (!(x <= WC_F32_MAX)) return INFINITY;
    const float r = ldexpf(x, e);
    return r < floor ? floor : r;
}

// sm = sm_m·2^e_sm with sm_m in [1/2, 1)
struct SmSplit {
    float m;
    int e;
};
WC_D SmSplit sm_split(float sm) {
    SmSplit s;
    s.m = frexpf(sm, &s.e);
    return s;
}

// x·2^-e for the exponent e of a largest |x| (frexpf of a normal number, or 0), as two multiplies by
// normal powers of two: exact wherever ldexpf(x, -e) is a normal number, and 0 (flushed) wherever it
// is not, as ldexpf's own multiplies give under -ftz=true.  Why not ldexpf: it splits its factor for
// any exponent, four multiplies per entry on the set-up's chain (a short step, B = 1, waits for it);
// here e lies in [-125, 128], so -e splits into two halves in [-64, 63].
struct Pow2Down {
    float a, b;
    WC_D explicit Pow2Down(int e) {
        const int h = -e / 2;
        a = __int_as_float((127 + h) << 23);
        b = __int_as_float((127 - e - h) << 23);
    }
    WC_D float operator()(float x) const { return __fmul_rn(__fmul_rn(x, a), b); }
};

// Σ|q'| and Σq'² of the channels ch(i), i < n, of one query row in shared memory, skipped where
// `skip(i)`, on q' = q·2^-e with 2^e bounding their largest |q| (a NaN entry gives NaN sums, which
// coef_up makes +inf)
template <typename Ch, typename Skip>
WC_D void normalized_sums(const float* qrow, int n, Ch ch, Skip skip, float& q1, float& q2, int& e) {
    float mx = 0.0f;
    for (int i = 0; i < n; ++i)
        if (!skip(i)) mx = fmaxf(mx, fabsf(qrow[ch(i)]));
    frexpf(mx, &e);
    if (!(mx <= WC_F32_MAX)) e = 0;
    const Pow2Down down(e);
    q1 = q2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (skip(i)) continue;
        const float v = down(qrow[ch(i)]);
        q2 += v * v;
        q1 += fabsf(v);
    }
}

// Tier B's coefficients of one scale group from its normalized sums: b2 = 2 (sm²/12) Q2 log(2S/δ_loc)
// and b1 = sm Q1 beta_steps (the quantized channels' evaluation term is gamma_per_beta·Σ_g s_g b1_g)
WC_D void group_coefficients(SmSplit sm, float q1, float q2, int e, float log_term, float beta_steps, float& b2,
                             float& b1) {
    b2 = coef_up(2.0f * (sm.m * sm.m / 12.0f) * q2 * log_term, 2 * (sm.e + e), WC_COEF_FLOOR_2);
    b1 = coef_up(sm.m * q1 * beta_steps, sm.e + e, WC_COEF_FLOOR_1);
}

// Tier A's coefficient of one band from its normalized Σq'²: sm ||q_b||
WC_D float band_coefficient(SmSplit sm, float q2, int e) {
    return coef_up(sm.m * sqrtf(q2), sm.e + e, WC_COEF_FLOOR_1);
}

// ... of band bb of a query row in shared memory, the band's channels band_ch[bb·per + j], j < per
// (global memory).  With BATCHED and per a power of two up to 8 (16 or more bands at d = 128) the
// band's channel ids are loaded at once into registers, a compile-time count: read per channel
// inside normalized_sums' two passes they were 2·per dependent global loads, the longest chain of
// a step's set-up (a short step, B = 1, waits for it).  decode_stage1_i8 keeps the per-channel
// reads: its 168-register budget has no room for the batch at G = 1 (ptxas spills).
template <int PER>
WC_D float band_coefficient_fixed(const float* qrow, const int* chs, SmSplit sm) {
    int c[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) c[j] = chs[j];
    float q1, q2;
    int e;
    normalized_sums(qrow, PER, [&](int j) { return c[j]; }, [](int) { return false; }, q1, q2, e);
    return band_coefficient(sm, q2, e);
}
template <bool BATCHED = true>
WC_D float band_coefficient_of(const float* qrow, const int* band_ch, int bb, int per, SmSplit sm) {
    const int* chs = band_ch + bb * per;
    if constexpr (BATCHED) {
        switch (per) {
            case 1: return band_coefficient_fixed<1>(qrow, chs, sm);
            case 2: return band_coefficient_fixed<2>(qrow, chs, sm);
            case 4: return band_coefficient_fixed<4>(qrow, chs, sm);
            case 8: return band_coefficient_fixed<8>(qrow, chs, sm);
            default: break;
        }
    }
    float q1, q2;
    int e;
    normalized_sums(qrow, per, [&](int j) { return chs[j]; }, [](int) { return false; }, q1, q2, e);
    return band_coefficient(sm, q2, e);
}
// An fp16 store's evaluation term per unit of the row norm ||x_t||: gamma_exact·||q|| over the n
// channels (a multiple of 32) of a query row in shared memory, on the normalized query
// (Cauchy–Schwarz bounds Σ_c |q_c||x_c| by ||q||·||x_t||: one norm per token serves every head).
// One warp forms it, lane i from channels i, i + 32, ... (a thread alone took ≈ 2n dependent steps
// of the CTA's set-up); every lane returns it.  A NaN entry gives NaN sums, which coef_up makes +inf.
WC_D float warp_norm_coefficient(const float* qrow, int n, float gamma_exact, int lane) {
    float mx = 0.0f;
    for (int c = lane; c < n; c += 32) mx = fmaxf(mx, fabsf(qrow[c]));
    mx = warp_max(mx);
    int e;
    frexpf(mx, &e);
    if (!(mx <= WC_F32_MAX)) e = 0;
    const Pow2Down down(e);
    float q2 = 0.0f;
    for (int c = lane; c < n; c += 32) {
        const float v = down(qrow[c]);
        q2 += v * v;
    }
    q2 = warp_sum(q2);
    return coef_up(gamma_exact * sqrtf(q2), e, WC_COEF_FLOOR_1);
}

// Γ ≤ ρ·cmax (docs/certificate.md §10.4) where γ_t is a fixed multiple of each group's β term:
// ρ's Cauchy–Schwarz factor Σ_g x_g²/b2_g is summed in float64, since in fp32 an x_g below 2^-63
// squares to zero under -ftz=true and ρ, then Γ, would read 0 however large cmax is.  One term,
// rounded up: the mantissas' quotient in fp32 (in [1/8, 2): nothing underflows), the exponents put
// back exactly (|2e_x − e_b| < 400); x ≠ 0 over b2 = 0 is +inf, anything over b2 = +inf is 0.  (Why
// not __ddiv_ru: a float64 division and square root are instruction sequences, measured +2.6% on
// the form-(I) decode at B = 1, whose set-up one warp runs.)
WC_D double sq_ratio_up(float x, float b2) {
    if (x == 0.0f) return 0.0;
    if (!(x <= WC_F32_MAX) || b2 == 0.0f) return (double)INFINITY;
    if (!(b2 <= WC_F32_MAX)) return 0.0;
    int ex, eb;
    const float mx = frexpf(x, &ex), mb = frexpf(b2, &eb);
    const float t = __fdiv_ru(__fmul_ru(mx, mx), mb);
    return (double)t * __longlong_as_double((long long)(1023 + 2 * ex - eb) << 52);
}
// a non-negative float64 bound as float32, rounded up and never flushed: a positive value below the
// normal range reads 2^-126
WC_D float f32_up_normal(double r) {
    const float f = __double2float_ru(r);
    return r > 0.0 ? fmaxf(f, WC_F32_MIN_NORMAL) : f;
}
// ρ = min(k·sqrt(s)·C_EVAL_SLACK, cap) for s = Σ_g x_g²/b2_g (sq_ratio_up's terms), as float32 rounded
// up and never flushed: s's exponent halved exactly and the root of its mantissa taken in fp32
WC_D float rho_up(double s, float k, float cap) {
    double root = 0.0;
    if (!(s <= 1.0e300)) {
        root = (double)INFINITY;
    } else if (s > 0.0) {
        const long long bits = __double_as_longlong(s);
        int e = (int)((bits >> 52) & 0x7FF) - 1022;  // s = m·2^e, m in [1/2, 1) (s is normal: a sum of normal terms)
        double m = __longlong_as_double((bits & 0x800FFFFFFFFFFFFFll) | (1022ll << 52));
        if (e & 1) m *= 2.0, e -= 1;  // m in [1/2, 2), e even
        const float r = __fmul_ru(__fsqrt_ru(__double2float_ru(m)), (float)WC_C_EVAL_SLACK);
        root = (double)r * __longlong_as_double((long long)(1023 + e / 2) << 52);
    }
    return f32_up_normal(fmin(__dmul_ru((double)k, root), (double)cap));
}
// a ratio x/(b1 + x) ≤ 1 rounded up and never flushed
WC_D float share_up(float x, float b1) {
    if (x == 0.0f) return 0.0f;
    return fmaxf(__fdiv_ru(x, __fadd_rd(b1, x)), WC_F32_MIN_NORMAL);
}
// Γ_s = ρ·cmax_s rounded up, never flushed to zero
WC_D float gamma_of_rho(float rho, float cm) {
    const float gm = __fmul_ru(rho, cm);
    return rho > 0.0f && cm > 0.0f ? fmaxf(gm, WC_F32_MIN_NORMAL) : gm;
}
#endif  // __CUDA_ARCH__
