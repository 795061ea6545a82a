"""CUDA-graph capture of a whole decode step (SPEC §8: the meter must run inside captured graphs).

A serving engine captures one model step — for every layer the K/V write, the certified decode and
the telemetry update — and replays it.  Everything a captured step launches must already own its
buffers: :func:`decode_plan` allocates a decode's outputs up front, and a pool write allocates
nothing when its inputs are contiguous (fp16/fp32 rows, int64 slots).  Between replays, refill the
input buffers in place (``q``, the rows, the slots, the page table); the graph reads them again.

GPU only.  Example::

    plans = [decode_plan(q_buf[l], pool, layer=l, kv_indptr=ip, kv_indices=ix,
                         kv_last_page_len=ll, cert=cert, telemetry=tel) for l in range(L)]
    def step():
        for l in range(L):
            pool.write(l, slots_buf, k_buf[l], v_buf[l])
            plans[l].launch()
    g = CapturedStep(step, pools=[pool])
    g.replay()                      # as often as wanted; plans[l].result() reads the outputs
"""

from __future__ import annotations

from .arrays import backend_of, to_cupy
from .pool import PagedPool


def decode_plan(q, pool, *, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale=None, cert=None,
                num_splits=None, telemetry=None, requests=None):
    """A GPU decode step with every output allocated: ``plan.launch()`` only launches kernels (stage
    1, merge, certificate, telemetry) and ``plan.result()`` returns the :class:`DecodeResult` views.

    Arguments as for :func:`~witcert_cupy.decode_attention`.  ``q`` (float32), ``kv_indptr``,
    ``kv_indices`` and ``kv_last_page_len`` (int32), when given contiguous in those dtypes (``q``
    starting on a 16-byte boundary, as every CuPy or torch allocation does), are read in place at
    every launch, so they can be refilled between replays; otherwise the plan keeps a copy.
    ``num_splits`` is fixed when the plan is made.  Every launch (every replay of a graph that
    captured it) spends the rows' request budget (``requests``, spec §4.4), as a decode call does.
    """
    from .decode import _check_common, budget_of
    from .telemetry import check_telemetry

    if not isinstance(pool, PagedPool):
        raise TypeError(f"pool must be a KVPool, Fp16Pool or SchemePool, got {type(pool).__name__}")
    if pool.backend != "cuda":
        raise ValueError("decode_plan is for GPU pools (a CPU decode has nothing to capture)")
    if backend_of(q=q, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_last_page_len=kv_last_page_len) != "cuda":
        raise TypeError("q and the page table must be CUDA arrays for a GPU pool")
    if telemetry is not None:
        check_telemetry(telemetry, cert, "cuda")
    qd = to_cupy(q)
    layer, sm_scale, num_splits = _check_common(qd, pool, layer, sm_scale, cert, num_splits)
    budget = budget_of(pool, cert, qd.shape, requests, "cuda")
    return pool._dev.plan(qd, layer, to_cupy(kv_indptr), to_cupy(kv_indices), to_cupy(kv_last_page_len),
                          sm_scale, cert, num_splits, telemetry=telemetry, budget=budget)


def warm_kernels(pool):
    """Compile and load every kernel a step on ``pool`` may launch (module loads cannot happen
    inside a capture)."""
    from . import _cuda

    d = pool.head_dim
    _cuda.kernel("telemetry.cu", "telemetry_record")
    _cuda.kernel("budget.cu", "budget_charge")
    _cuda.kernel("decode.cu", "decode_merge")
    _cuda.kernel("write.cu", "evict_tier_pages")
    _cuda.kernel("write.cu", "store_fp16_rows" if pool._dev.fp16_store
                 else _cuda.write_kernel(d, pool.config.dither_bits, pool.config.witness_bands))


class CapturedStep:
    """``fn()`` captured once into a CUDA graph on a private stream; :meth:`replay` launches it.

    Parameters
    ----------
    fn : callable
        Issues the step's launches (pool writes, ``plan.launch()`` calls).  It is called once,
        under capture: nothing runs until the first replay.
    pools : sequence of pools
        Their kernels are compiled before capture.
    """

    def __init__(self, fn, *, pools=()):
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        pools = list(pools)
        for p in pools:
            if not isinstance(p, PagedPool) or p.backend != "cuda":
                raise TypeError("pools must be GPU KVPool/Fp16Pool/SchemePool objects (CUDA graphs are GPU-only)")
        import cupy as cp

        for p in pools:
            warm_kernels(p)
        cp.cuda.Device().synchronize()  # no eager work (telemetry streams included) still in flight
        self.stream = cp.cuda.Stream(non_blocking=True)
        from ._cuda.capture import join_forks

        with self.stream:
            self.stream.begin_capture()
            try:
                fn()
                join_forks(self.stream)  # telemetry forked off the capture stream comes back
            finally:
                self.graph = self.stream.end_capture()

    def replay(self, stream=None):
        """Launch the captured step on ``stream`` (default: the capture stream), asynchronously."""
        self.graph.launch(stream or self.stream)

    def synchronize(self):
        self.stream.synchronize()
