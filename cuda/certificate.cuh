// certificate.cuh — SPEC §5 per (request, query head) cell, the twin of
// witcert_cupy/certificate.py (risk_from_log_a, tv_bound).  Shared by decode_certify (decode.cu)
// and the fused certify-and-record telemetry kernel (telemetry.cu), so the formula exists once in C.
#pragma once
#include "common.cuh"

#define WC_F64_MAX 1.7976931348623157e308

// R = expm1(2 (log A + res)) / 2, res = LOG_A_RESOLUTION_ULPS ulp(max(1, |lse|)) for finite lse
// (the resolution of the fp32 difference log A = LSE(λ) − lse), NaN -> +inf;
// TV bound = min(1, R, tanh(cmax / 2)), NaN cmax -> 1.
WC_D void certify_cell(float log_a, float lse, float cmax, double& risk, double& tv) {
    const double l = (double)lse;
    double la = (double)log_a;
    if (fabs(l) <= WC_F64_MAX) la += WC_LOG_A_RESOLUTION_ULPS * 0x1p-24 * fmax(1.0, fabs(l));
    double r = expm1(2.0 * la) / 2.0;
    if (r != r) r = INFINITY;
    const double cm = (double)cmax;
    const double t = cm != cm ? 1.0 : tanh(cm / 2.0);
    risk = r;
    tv = fmin(fmin(1.0, r), t);
}
