// budget.cu — the request budget for calls whose merge does not charge it itself (extend, the
// gate's one event per call): budget.cuh's tickets, a request's cells in order.
//
// budget_charge: one thread per request.  Request b's cells are rows lo..lo+n-1 of risk [rows, Hq]
// (n = 1, lo = b for a decode row; qo_indptr[b]..qo_indptr[b+1] for an extend request), n·Hq
// tickets in one atomic add, cell (i, h) taking ticket first + i·Hq + h.
#include "budget.cuh"

extern "C" __global__ void budget_charge(double* risk, double* tv_bound, int nreq, int Hq,
                                         const int* __restrict__ requests, const int* __restrict__ qo_indptr,
                                         long long* counts, u64* keys, int capacity, u64 key, long long limit) {
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nreq) return;
    const long long lo = qo_indptr ? qo_indptr[b] : b;
    const long long n = qo_indptr ? (long long)qo_indptr[b + 1] - lo : 1;
    if (n <= 0) return;
    const long long first = budget_tickets(requests, counts, keys, capacity, key, limit, b, n * Hq);
    for (long long c = 0; c < n * Hq; ++c)
        if (first + c >= limit) {
            risk[lo * Hq + c] = INFINITY;
            tv_bound[lo * Hq + c] = 1.0;
        }
}
