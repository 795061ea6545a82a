"""The request budget, counted (spec §4.4; docs/certificate.md §10.8).

``δ_loc = δ_req / (L · Hq · T)`` is a union bound over at most ``L · Hq · T`` cells of one request.
Every pool owns a :class:`StepLedger` that counts, per request, the cells a Tier-B or Tier-AB
certificate has certified: ``Hq`` per decode call and row (the call's query heads), ``n_b · Hq``
per extend request, ``Hq`` per :func:`~witcert_cupy.gated_decode` call and row however many rounds
it takes.  A cell past ``L · T · Hq`` reports ``R = +inf`` (``tv_bound = 1``, the trivial bound), so
telemetry counts it as an overflow.  The count lives on the pool's device and is advanced by the
decode step itself (the merge kernel's atomic add on the GPU), so a captured CUDA graph counts every
replay.

A request is a ledger row: row ``b`` of a call charges request ``requests[b]`` (default ``b``).  The
first charge of a request records its budget's key (``δ_req``, ``L``, ``T``, the budget's ``Hq`` and
the call's); a later charge under another budget reports ``+inf``, so mixing budgets cannot
overdraw either.  :meth:`StepLedger.reset` starts new requests on rows.  Tier A alone spends no
budget (it is deterministic).
"""

from __future__ import annotations

import hashlib
import math
import struct

import numpy as np

from . import certificate as cert_mod
from .arrays import check_int, check_range, to_numpy
from .config import _int_arg

#: Ledger rows of a pool unless its constructor says otherwise.
DEFAULT_MAX_REQUESTS = 4096


def budget_key(cert, num_q_heads, num_layers):
    """``(key, limit)`` of a Tier-B budget for calls with ``num_q_heads`` query heads: a non-zero
    64-bit digest of ``(δ_req, L, Hq of the budget, Hq of the call, T)`` and the cells
    ``L · T · num_q_heads`` it allows a request (a tensor-parallel rank's share of ``L · T · Hq``).
    ``(0, 0)`` for Tier A (spends nothing)."""
    if cert is None or not cert_mod.tier_code(cert) & 2:
        return 0, 0
    L = cert_mod.budget_layers(cert, num_layers)
    hq = cert_mod.budget_heads(cert, num_q_heads)
    raw = struct.pack("<dqqqq", cert.delta_req, L, hq, int(num_q_heads), cert.steps)
    key = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little") | 1
    return key, L * cert.steps * int(num_q_heads)


class StepLedger:
    """Certified units spent by each request of one pool (spec §4.4).

    Parameters
    ----------
    capacity : int
        Request ids ``0 .. capacity - 1``.
    xp : module
        ``numpy`` or ``cupy``: where the counts live (the pool's device).

    Attributes
    ----------
    counts : int64 ``[capacity]``, cells certified
    keys : uint64 ``[capacity]``, the budget key of each request's first charge (0: none yet)
    """

    def __init__(self, capacity, xp=np):
        self.capacity = _int_arg("max_requests", capacity, lo=1, hi=1 << 24)
        self.xp = xp
        self.counts = xp.zeros(self.capacity, xp.int64)
        self.keys = xp.zeros(self.capacity, xp.uint64)

    def _ids(self, requests):
        if requests is None:
            return None
        r = requests.get() if hasattr(requests, "get") else to_numpy("requests", requests)
        r = np.asarray(r)
        if r.ndim == 0:
            r = r.reshape(1)
        check_int("requests", r)
        check_range("requests", r, 0, self.capacity, ValueError)
        return r.astype(np.int64)

    def reset(self, requests=None):
        """Start fresh requests on ledger rows ``requests`` (int array; None: every row).  On the GPU
        this is ordered on the current stream like any other launch."""
        r = self._ids(requests)
        if r is None:
            self.counts[...] = 0
            self.keys[...] = 0
            return
        idx = self.xp.asarray(r)
        self.counts[idx] = 0
        self.keys[idx] = 0

    def spent(self, requests=None) -> np.ndarray:
        """int64 ``[n]`` (host): cells certified for ``requests`` (None: every row).  Synchronises on
        the GPU."""
        c = self.counts.get() if hasattr(self.counts, "get") else self.counts
        r = self._ids(requests)
        return c.copy() if r is None else c[r]


def check_requests(requests, batch, ledger, backend):
    """The ``requests`` argument of a decode call: None (row ``b`` is request ``b``) or an int array
    ``[batch]``.  Host arrays are range-checked; device arrays are not read (ids out of range give
    ``+inf`` certificates and charge nothing)."""
    if requests is None:
        if batch > ledger.capacity:
            raise ValueError(f"the batch has {batch} rows but the pool's ledger holds {ledger.capacity} "
                             "requests: pass requests= or build the pool with a larger max_requests")
        return None
    if backend == "cuda":
        import cupy as cp

        from .arrays import to_cupy

        r = to_cupy(requests)
        check_int("requests", r)
        if r.shape[0] != batch:
            raise ValueError(f"requests must have shape [{batch}] (one per row), got {list(r.shape)}")
        return cp.ascontiguousarray(r, dtype=cp.int32)
    r = to_numpy("requests", requests)
    check_int("requests", r)
    if r.shape[0] != batch:
        raise ValueError(f"requests must have shape [{batch}] (one per row), got {list(r.shape)}")
    check_range("requests", r, 0, ledger.capacity, ValueError)
    return r.astype(np.int32)


def charge_host(ledger, key, limit, risk, tv_bound, requests=None, qo_indptr=None):
    """CPU twin of ``budget_charge`` (cuda/budget.cu, budget.cuh): request ``b``'s cells are rows
    ``b`` (``qo_indptr``: rows ``qo_indptr[b]:qo_indptr[b+1]``) of ``risk [rows, Hq]``, in row then
    head order; the cells past ``limit`` get ``R = +inf``, ``tv_bound = 1``, in place."""
    if not key:
        return
    Hq = risk.shape[1]
    nreq = risk.shape[0] if qo_indptr is None else qo_indptr.shape[0] - 1
    for b in range(nreq):
        r = b if requests is None else int(requests[b])
        lo, hi = (b, b + 1) if qo_indptr is None else (int(qo_indptr[b]), int(qo_indptr[b + 1]))
        n = (hi - lo) * Hq
        first = limit
        if 0 <= r < ledger.capacity and int(ledger.keys[r]) in (0, key):
            ledger.keys[r] = np.uint64(key)
            first = int(ledger.counts[r])
            ledger.counts[r] = first + n
        c = np.nonzero(first + np.arange(n) >= limit)[0]
        risk[lo + c // Hq, c % Hq] = math.inf
        tv_bound[lo + c // Hq, c % Hq] = 1.0
