// telemetry.cu — device aggregates of the certificate (SPEC §8), twin of witcert_cupy/telemetry.py.
//
// telemetry_record: grid 1, block 256.  Adds one decode call's risks R [B, Hq] (float64) of layer
// `layer` to the counters; a decode step launches it on the Telemetry's own stream, after
// decode_merge has certified the cells (written the risks).  A single CTA with a fixed reduction order makes the
// aggregates deterministic (bit-identical between eager runs and CUDA-graph replays) and needs no atomics;
// a call covers B·Hq cells (a few thousand at most), so one CTA is not the bottleneck: its cost is
// the chain of dependent memory round trips, so the risks stay in shared memory (up to TEL_SMEM
// cells), the step and counters are loaded early, and the sums reduce by shuffles.
// The step counter and the sampling predicate live here: the layer-0 call advances the step first,
// then every thread reads it, so nothing is read on the host and the call is graph-capturable.
// Counters (all device arrays): step (int64 [2]: index, index mod sample_every), cells, covered,
// overflow, kv_cells, kv_covered (int64 [1]);
// sum_r, max_r (float64 [1], over finite R); head_max (float64 [L, Hq]); head_exceed (int64 [L, Hq]).
#include "common.cuh"

#define TEL_THREADS 256
#define TEL_WARPS (TEL_THREADS / 32)
#define TEL_SMEM 2048  // cells kept in shared memory (16 KB); larger calls read R back from global

extern "C" __global__ void __launch_bounds__(TEL_THREADS) telemetry_record(
    const double* __restrict__ risk, int B, int Hq, int G, int layer, double tau, long long sample_every,
    long long* step, long long* cells, long long* covered, long long* overflow, double* sum_r, double* max_r,
    double* head_max, long long* head_exceed, long long* kv_cells, long long* kv_covered) {
    __shared__ double r_s[TEL_SMEM];
    __shared__ long long w_cov[TEL_WARPS], w_ovf[TEL_WARPS], w_kv[TEL_WARPS];
    __shared__ double w_sum[TEL_WARPS], w_max[TEL_WARPS];
    __shared__ int s_phase;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long n = (long long)B * Hq;
    const bool in_smem = n <= TEL_SMEM;
    long long st0 = 0, st1 = 0;
    if (tid == 0) {  // issued before the risk loads, so the round trips overlap
        st0 = step[0];
        st1 = step[1];
    }
    if (in_smem)
        for (long long i = tid; i < n; i += TEL_THREADS) r_s[i] = risk[i];
    // step[1] is step mod sample_every, kept alongside so the predicate needs no 64-bit division
    if (tid == 0) {
        if (layer == 0) {
            st0 += 1;
            st1 = st0 == 0 || st1 + 1 == sample_every ? 0 : st1 + 1;
            step[0] = st0;
            step[1] = st1;
        }
        s_phase = (int)(st1 != 0);
    }
    __syncthreads();  // also publishes every thread's risks (shared and global) to the block
    if (s_phase) return;  // uniform
    const double* rr = in_smem ? r_s : risk;
    long long cov = 0, ovf = 0, kv = 0;
    double sm = 0.0, mx = 0.0;
    for (long long i = tid; i < n; i += TEL_THREADS) {
        const double r = rr[i];
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
        int ok = 0;
        for (int g = 0; g < G; ++g) ok += rr[i * G + g] <= tau;
        kv += ok == G;
    }
    // per (layer, query head): max over finite R and the exceed count, over the batch
    for (int hq = tid; hq < Hq; hq += TEL_THREADS) {
        const long long o = (long long)layer * Hq + hq;
        double hm = head_max[o];
        long long ex = 0;
        for (int b = 0; b < B; ++b) {
            const double r = rr[(long long)b * Hq + hq];
            if (fabs(r) <= WC_F64_MAX) hm = fmax(hm, r);
            ex += !(r <= tau);
        }
        head_max[o] = hm;
        head_exceed[o] += ex;
    }
    // fixed-order reductions: a shuffle tree in each warp, then warp 0 over the warps
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
        for (int w = 0; w < TEL_WARPS; ++w) {
            c += w_cov[w];
            o += w_ovf[w];
            k += w_kv[w];
            su += w_sum[w];
            m = fmax(m, w_max[w]);
        }
        cells[0] += n;
        covered[0] += c;
        overflow[0] += o;
        sum_r[0] += su;
        max_r[0] = fmax(max_r[0], m);
        kv_cells[0] += nkv;
        kv_covered[0] += k;
    }
}
