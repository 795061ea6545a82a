// telemetry.cuh — the SPEC §8 aggregation of one decode call's risks by one CTA of NT threads.
// Used by telemetry_record (telemetry.cu) and by the last CTA of decode_merge (decode.cu), so the
// telemetry of a decode step needs no kernel of its own.  Fixed reduction order: deterministic,
// bit-identical between eager runs and CUDA-graph replays, no atomics on the counters.
// Counters (device arrays): step (int64 [2]: index, index mod sample_every), cells, covered,
// overflow, kv_cells, kv_covered (int64 [1]); sum_r, max_r (float64 [1], over finite R);
// head_max (float64 [L, Hq]); head_exceed (int64 [L, Hq]).
#pragma once
#include "common.cuh"


struct TelemetryArgs {
    long long* step;
    long long *cells, *covered, *overflow;
    double *sum_r, *max_r, *head_max;
    long long *head_exceed, *kv_cells, *kv_covered;
    double tau;
    long long sample_every;
    int layer, G;
};

// rr: the call's risks R [B, Hq] (float64), visible to the whole block.  Every thread must call it.
template <int NT>
__device__ __forceinline__ void telemetry_aggregate(const double* rr, int B, int Hq, const TelemetryArgs t) {
    constexpr int NW = NT / 32;
    __shared__ long long w_cov[NW], w_ovf[NW], w_kv[NW];
    __shared__ double w_sum[NW], w_max[NW];
    __shared__ int s_phase;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long n = (long long)B * Hq;
    // step[1] is step mod sample_every, kept alongside so the predicate needs no 64-bit division
    if (tid == 0) {
        long long st0 = t.step[0], st1 = t.step[1];
        if (t.layer == 0) {
            st0 += 1;
            st1 = st0 == 0 || st1 + 1 == t.sample_every ? 0 : st1 + 1;
            t.step[0] = st0;
            t.step[1] = st1;
        }
        s_phase = (int)(st1 != 0);
    }
    __syncthreads();
    if (s_phase) return;  // uniform
    long long cov = 0, ovf = 0, kv = 0;
    double sm = 0.0, mx = 0.0;
    for (long long i = tid; i < n; i += NT) {
        const double r = rr[i];
        const bool fin = fabs(r) <= WC_F64_MAX;  // false for NaN and inf
        cov += r <= t.tau;
        ovf += !fin;
        if (fin) {
            sm += r;
            mx = fmax(mx, r);
        }
    }
    // (request, kv head) cells whose G query heads are all covered
    const long long nkv = (long long)B * (Hq / t.G);
    for (long long i = tid; i < nkv; i += NT) {
        int ok = 0;
        for (int g = 0; g < t.G; ++g) ok += rr[i * t.G + g] <= t.tau;
        kv += ok == t.G;
    }
    // per (layer, query head): max over finite R and the exceed count, over the batch
    for (int hq = tid; hq < Hq; hq += NT) {
        const long long o = (long long)t.layer * Hq + hq;
        double hm = t.head_max[o];
        long long ex = 0;
        for (int b = 0; b < B; ++b) {
            const double r = rr[(long long)b * Hq + hq];
            if (fabs(r) <= WC_F64_MAX) hm = fmax(hm, r);
            ex += !(r <= t.tau);
        }
        t.head_max[o] = hm;
        t.head_exceed[o] += ex;
    }
    for (int off = 16; off > 0; off >>= 1) {
        cov += __shfl_xor_sync(0xffffffffu, cov, off);
        ovf += __shfl_xor_sync(0xffffffffu, ovf, off);
        kv += __shfl_xor_sync(0xffffffffu, kv, off);
        sm += __shfl_xor_sync(0xffffffffu, sm, off);
        mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    }
    if (lane == 0) {
        w_cov[warp] = cov;
        w_ovf[warp] = ovf;
        w_kv[warp] = kv;
        w_sum[warp] = sm;
        w_max[warp] = mx;
    }
    __syncthreads();
    if (tid == 0) {
        long long c = 0, o = 0, k = 0;
        double su = 0.0, m = 0.0;
        for (int w = 0; w < NW; ++w) {
            c += w_cov[w];
            o += w_ovf[w];
            k += w_kv[w];
            su += w_sum[w];
            m = fmax(m, w_max[w]);
        }
        t.cells[0] += n;
        t.covered[0] += c;
        t.overflow[0] += o;
        t.sum_r[0] += su;
        t.max_r[0] = fmax(t.max_r[0], m);
        t.kv_cells[0] += nkv;
        t.kv_covered[0] += k;
    }
}
