"""Binding a step's launches: the merge (with its certificate and the request budget), the budget
charge of extend and the gate, the query as the kernels read it, and programmatic dependent launch."""

from __future__ import annotations

import numpy as np

from .build import kernel
from .geometry import merge_smem_bytes
from .pdl import Launcher, pdl_enabled, pdl_supported

# a decode step's kernels (the stage-1 kernels and decode_merge, each of which calls griddep_wait
# before its first global access: cuda/griddep.cuh) launch with programmatic dependent launch on
# sm_90+ (witcert_cupy/_cuda/pdl.py) unless the environment sets WITCERT_PDL=0; the same bits either
# way (tests/test_gpu.py::test_pdl_launch_gives_the_same_bits)
PDL = pdl_enabled()


def _pdl():
    import cupy as cp

    return PDL and pdl_supported(cp.cuda.Device().id)


def bind_merge(o_part, lse_part, lam_part, cmax_part, gam_part, o, lse, log_a, cmax, gam, g0, risk=None,
               tv_bound=None, prefetch=None, budget=None):
    """A zero-argument launcher of ``decode_merge`` over split partials ``o_part [..., ns, d]`` and
    ``lse_part / lam_part / cmax_part / gam_part [..., ns]`` (float32) into ``o [..., d]`` and
    ``lse / log_a / cmax / gam [...]`` (``log A``, ``cmax`` and ``Γ`` raised by the underflow term
    ``g0``, docs/certificate.md §10); with ``risk`` and ``tv_bound`` (float64 ``[...]``) it certifies
    each cell in the same launch (SPEC §5).  ``prefetch`` (tests) forces the shared-memory copy of
    the rows on or off; the outputs are the same bits either way (the same sums in the same order).
    ``budget`` (``(ledger, key, limit, requests)``, :func:`witcert_cupy.decode.budget_of`; needs
    ``risk``, leading dims ``[B, Hq]``): each certified cell also spends its request's budget (spec §4.4)."""
    *lead, ns, d = o_part.shape
    rows = int(np.prod(lead, dtype=np.int64))
    null = np.uint64(0)
    smem, pf = merge_smem_bytes(ns, d, prefetch)
    if budget is None or risk is None:
        spend = (null, null, null, _i32(0), _i32(1), np.uint64(0), np.int64(0))
    else:
        ledger, key, limit, requests = budget
        spend = (null if requests is None else requests, ledger.counts, ledger.keys, _i32(ledger.capacity),
                 _i32(lead[-1]), np.uint64(key), np.int64(limit))
    args = (o_part, lse_part, lam_part, cmax_part, gam_part, _i32(ns), _i32(d), o, lse, log_a, cmax, gam,
            null if risk is None else risk, null if tv_bound is None else tv_bound, _i32(pf), np.float32(g0),
            *spend)
    merge = kernel("decode.cu", "decode_merge")
    # the opt-in only ever grows, read from the function itself: kernel objects built apart (after a
    # rebuild with other options) may share one CUDA function, and a
    # record kept per object lowered a larger plan's opt-in
    if smem > 48 * 1024 and smem > merge.max_dynamic_shared_size_bytes:
        merge.max_dynamic_shared_size_bytes = smem

    # certifying, one more warp: its first thread certifies the cell while the others run the o loop
    block = min(d, 256) + (32 if risk is not None else 0)

    return Launcher(merge, (rows,), (block,), args, smem, pdl=_pdl())


def bind_budget(budget, risk, tv_bound, qo_indptr=None):
    """A no-argument launcher of ``budget_charge`` (cuda/budget.cu, spec §4.4) for a call whose merge
    writes ``risk``/``tv_bound`` ``[rows, Hq]``; ``budget`` is ``(ledger, key, limit, requests)``
    (:func:`witcert_cupy.decode.budget_of`) or None (nothing to charge)."""
    if budget is None:
        return None
    ledger, key, limit, requests = budget
    nreq = risk.shape[0] if qo_indptr is None else qo_indptr.shape[0] - 1
    if nreq <= 0:
        return None
    null = np.uint64(0)
    fn = kernel("budget.cu", "budget_charge")
    args = (risk, tv_bound, _i32(nreq), _i32(risk.shape[1]), null if requests is None else requests,
            null if qo_indptr is None else qo_indptr, ledger.counts, ledger.keys, _i32(ledger.capacity),
            np.uint64(key), np.int64(limit))
    grid = (-(-nreq // 128),)
    return lambda: fn(grid, (128,), args)


def launch_query(q):
    """The query as the kernels read it: ``q`` itself when it is C-contiguous float32 starting on a
    16-byte boundary (a plan then reads it in place at every launch), else a contiguous copy.  The
    fp16-store decode and the extend kernel load the query 16 bytes at a time, and a view that
    starts mid-vector (``buf[1:]``) would fault there; CuPy's allocations are 256-byte aligned."""
    import cupy as cp

    a = cp.ascontiguousarray(q, dtype=cp.float32)
    return a.copy() if a.data.ptr % 16 else a


def _i32(v):
    return np.int32(v)


def _grid1(n, block=256):
    return (max(1, (n + block - 1) // block),)
