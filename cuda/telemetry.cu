// telemetry.cu — device aggregates of the certificate (SPEC §8), twin of witcert_cupy/telemetry.py.
//
// telemetry_record: grid 1, block 256.  Adds one decode call's risks R [B, Hq] (float64) of layer
// `layer` to the counters.  With log_a != null it first certifies the cells itself (SPEC §5,
// certificate.cuh: log_a, lse, cmax -> risk, tv_bound) in place of decode_certify, so a decode
// step with telemetry on launches no extra kernel.  A single CTA with a fixed reduction order makes the aggregates
// deterministic (bit-identical between eager runs and CUDA-graph replays) and needs no atomics;
// a call covers B·Hq cells (a few thousand at most), so one CTA is not the bottleneck.
// The step counter and the sampling predicate live here: the layer-0 call advances the step first,
// then every thread reads it, so nothing is read on the host and the call is graph-capturable.
// Counters (all device arrays): step (int64 [2]: index, index mod sample_every), cells, covered,
// overflow, kv_cells, kv_covered (int64 [1]);
// sum_r, max_r (float64 [1], over finite R); head_max (float64 [L, Hq]); head_exceed (int64 [L, Hq]).
#include "certificate.cuh"

#define TEL_THREADS 256

extern "C" __global__ void __launch_bounds__(TEL_THREADS) telemetry_record(
    const float* __restrict__ log_a, const float* __restrict__ lse, const float* __restrict__ cmax,
    double* __restrict__ tv_bound, double* risk, int B, int Hq, int G, int layer, double tau, long long sample_every,
    long long* step, long long* cells, long long* covered, long long* overflow, double* sum_r, double* max_r,
    double* head_max, long long* head_exceed, long long* kv_cells, long long* kv_covered) {
    __shared__ long long s_cov[TEL_THREADS], s_ovf[TEL_THREADS], s_kv[TEL_THREADS];
    __shared__ double s_sum[TEL_THREADS], s_max[TEL_THREADS];
    const int tid = threadIdx.x;
    const long long n = (long long)B * Hq;
    if (log_a != nullptr) {
        for (long long i = tid; i < n; i += TEL_THREADS) certify_cell(log_a[i], lse[i], cmax[i], risk[i], tv_bound[i]);
    }
    // step[1] is step mod sample_every, kept alongside so the predicate needs no 64-bit division
    if (layer == 0 && tid == 0) {
        step[0] += 1;
        step[1] = step[0] == 0 || step[1] + 1 == sample_every ? 0 : step[1] + 1;
    }
    __syncthreads();
    if (step[1] != 0) return;  // uniform: every thread read the same phase (and the risks above)
    long long cov = 0, ovf = 0, kv = 0;
    double sm = 0.0, mx = 0.0;
    for (long long i = tid; i < n; i += TEL_THREADS) {
        const double r = risk[i];
        const bool fin = fabs(r) <= WC_F64_MAX;  // false for NaN and inf
        cov += r <= tau;
        ovf += !fin;
        if (fin) {
            sm += r;
            mx = fmax(mx, r);
        }
    }
    // (request, kv head) cells whose G query heads are all covered
    const long long nkv = (long long)B * (Hq / G);
    for (long long i = tid; i < nkv; i += TEL_THREADS) {
        bool all = true;
        for (int g = 0; g < G; ++g) all = all && risk[i * G + g] <= tau;
        kv += all;
    }
    s_cov[tid] = cov;
    s_ovf[tid] = ovf;
    s_kv[tid] = kv;
    s_sum[tid] = sm;
    s_max[tid] = mx;
    // per (layer, query head): max over finite R and the exceed count, over the batch
    for (int hq = tid; hq < Hq; hq += TEL_THREADS) {
        double hm = head_max[(long long)layer * Hq + hq];
        long long ex = 0;
        for (int b = 0; b < B; ++b) {
            const double r = risk[(long long)b * Hq + hq];
            if (fabs(r) <= WC_F64_MAX) hm = fmax(hm, r);
            ex += !(r <= tau);
        }
        head_max[(long long)layer * Hq + hq] = hm;
        head_exceed[(long long)layer * Hq + hq] += ex;
    }
    __syncthreads();
    for (int w = TEL_THREADS / 2; w > 0; w >>= 1) {
        if (tid < w) {
            s_cov[tid] += s_cov[tid + w];
            s_ovf[tid] += s_ovf[tid + w];
            s_kv[tid] += s_kv[tid + w];
            s_sum[tid] += s_sum[tid + w];
            s_max[tid] = fmax(s_max[tid], s_max[tid + w]);
        }
        __syncthreads();
    }
    if (tid == 0) {
        cells[0] += n;
        covered[0] += s_cov[0];
        overflow[0] += s_ovf[0];
        sum_r[0] += s_sum[0];
        max_r[0] = fmax(max_r[0], s_max[0]);
        kv_cells[0] += nkv;
        kv_covered[0] += s_kv[0];
    }
}
