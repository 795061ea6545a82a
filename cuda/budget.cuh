// budget.cuh — the request budget counted on the device (spec §4.4, docs/certificate.md §10.8), the
// twin of witcert_cupy/budget.py:charge_host.
//
// A request's ledger row counts certified cells.  Each cell takes one ticket with an atomic add, so
// concurrent calls, rows naming one request twice, and every replay of a captured graph are all
// counted; tickets below `limit` (L·T·Hq of the budget) certify, the rest report +inf.  The first
// charge of a request stores its budget's key; a charge under another key, or a request id outside
// [0, capacity), takes no ticket and certifies nothing.
#pragma once
#include "common.cuh"

// true when `n` cells of request row `b` (`requests[b]`, or b when requests is null) are within the
// budget; `first` receives the first ticket (limit when none was taken)
WC_D long long budget_tickets(const int* requests, long long* counts, u64* keys, int capacity, u64 key,
                              long long limit, int b, long long n) {
    const int r = requests ? requests[b] : b;
    if (r < 0 || r >= capacity) return limit;
    const u64 prev = atomicCAS(keys + r, 0ull, key);
    if (prev != 0ull && prev != key) return limit;
    return (long long)atomicAdd((unsigned long long*)(counts + r), (unsigned long long)n);
}

// one cell of request row b: whether its ticket certifies
WC_D bool budget_take(const int* requests, long long* counts, u64* keys, int capacity, u64 key, long long limit,
                      int b) {
    return budget_tickets(requests, counts, keys, capacity, key, limit, b, 1) < limit;
}
