// telemetry.cu — device aggregates of the certificate (SPEC §8), twin of witcert_cupy/telemetry.py.
//
// telemetry_record: grid 1, block 256.  Adds the risks R [B, Hq] (float64) of one decode call of
// layer `layer` to the counters (telemetry.cuh).  A decode step launched by the library does this
// in the last CTA of decode_merge instead; this kernel serves Telemetry.record() on arrays the
// caller computed.  No allocation and no host read: capturable in a CUDA graph.
#include "telemetry.cuh"

#define TEL_THREADS 256

extern "C" __global__ void __launch_bounds__(TEL_THREADS, 1) telemetry_record(
    const double* __restrict__ risk, int B, int Hq, int G, int layer, double tau, long long sample_every,
    long long* step, long long* cells, long long* covered, long long* overflow, double* sum_r, double* max_r,
    double* head_max, long long* head_exceed, long long* kv_cells, long long* kv_covered) {
    const TelemetryArgs t = {step, cells, covered, overflow, sum_r, max_r, head_max, head_exceed, kv_cells,
                             kv_covered, tau, sample_every, layer, G};
    telemetry_aggregate<TEL_THREADS>(risk, B, Hq, t);
}
