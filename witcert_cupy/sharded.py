"""Tensor-parallel certified decode: KV heads sharded across ranks (GPUs), one pool per rank.

Each rank holds the pools of a contiguous range of kv heads (and their query heads); decode runs per
rank on local heads with no communication.  What keeps the certificate global:

- the dither stream is keyed by the model's kv head (``KVPool(kv_head_offset=...)``), so a shard
  stores exactly the codes a single pool stores;
- the request budget uses the model's ``L · Hq · T`` on every rank (``CertConfig(num_q_heads=Hq)``);
- telemetry is kept per rank and reduced off the decode path with one all-reduce of one packed
  float64 vector (:func:`pack_telemetry` / :func:`snapshot_from_packed`): counts and sums add, and
  per-head arrays occupy disjoint slots of the model-wide layout, so a sum is their concatenation;
  the global max of R is the max of the per-head maxima.
- the gate repairs per rank (each pool has its own exact tier).

:class:`ShardedKVPool` holds every rank's pool in one process (a simulated multi-rank run, on the
CPU or on one GPU); ``python/tp_decode.py`` runs one process per GPU with NCCL.
"""

from __future__ import annotations

import numpy as np

from .config import CertConfig, QuantConfig, _int_arg
from .pool import KVPool


def shard_kv_heads(num_kv_heads, world_size):
    """Contiguous kv-head ranges ``[(offset, count)]`` per rank; ``world_size`` divides ``num_kv_heads``."""
    num_kv_heads = _int_arg("num_kv_heads", num_kv_heads, lo=1)
    world_size = _int_arg("world_size", world_size, lo=1)
    if num_kv_heads % world_size:
        raise ValueError(f"world_size ({world_size}) must divide num_kv_heads ({num_kv_heads})")
    n = num_kv_heads // world_size
    return [(r * n, n) for r in range(world_size)]


def global_cert(cert, num_q_heads):
    """``cert`` with the model's query-head count in its budget (what every rank must use)."""
    if not isinstance(cert, CertConfig):
        raise TypeError(f"cert must be a CertConfig, got {type(cert).__name__}")
    return CertConfig(tier=cert.tier, delta_req=cert.delta_req, num_layers=cert.num_layers, steps=cert.steps,
                      tau=cert.tau, num_q_heads=num_q_heads)


class ShardedKVPool:
    """One model's KV cache split by kv head over ``world_size`` pools (all in this process).

    Parameters
    ----------
    num_layers, num_kv_heads, head_dim, num_pages, page_size, config
        As for :class:`KVPool`, for the whole model (``num_kv_heads`` is the model's total).
    world_size : int
        Ranks; divides ``num_kv_heads``.
    devices : sequence of int or None
        CUDA device of each rank's pool (``backend='cuda'``); None puts every shard on the current
        device (a simulated multi-rank run on one GPU).
    backend, keep_exact, exact_tier_pages
        As for :class:`KVPool`, per shard.
    """

    def __init__(self, num_layers, num_kv_heads, head_dim, num_pages, page_size, config, *, world_size,
                 devices=None, backend="auto", keep_exact=False, exact_tier_pages=0):
        if not isinstance(config, QuantConfig):
            raise TypeError(f"config must be a QuantConfig, got {type(config).__name__}")
        self.ranges = shard_kv_heads(num_kv_heads, world_size)
        self.num_kv_heads = num_kv_heads
        self.world_size = world_size
        if devices is not None and len(devices) != world_size:
            raise ValueError(f"devices must name one device per rank ({world_size}), got {len(devices)}")
        self.devices = devices
        self.shards = []
        for r, (off, n) in enumerate(self.ranges):
            with _on_device(devices[r] if devices is not None else None):
                self.shards.append(KVPool(num_layers, n, head_dim, num_pages, page_size, config, backend=backend,
                                          keep_exact=keep_exact, exact_tier_pages=exact_tier_pages,
                                          kv_head_offset=off))

    def kv_slice(self, rank):
        off, n = self.ranges[rank]
        return slice(off, off + n)

    def q_slice(self, rank, num_q_heads):
        G = num_q_heads // self.num_kv_heads
        off, n = self.ranges[rank]
        return slice(off * G, (off + n) * G)

    def write(self, layer, slots, k, v):
        """Write model-wide rows ``k, v [n, Hkv, d]``: each rank stores its heads."""
        for r, pool in enumerate(self.shards):
            sl = self.kv_slice(r)
            with _on_device(self.devices[r] if self.devices is not None else None):
                xp = pool.xp
                pool.write(layer, xp.asarray(slots), xp.ascontiguousarray(xp.asarray(k)[:, sl]),
                           xp.ascontiguousarray(xp.asarray(v)[:, sl]))

    def decode(self, q, *, layer, kv_indptr, kv_indices, kv_last_page_len, cert=None, telemetry=None, **kw):
        """Per-rank decode of the model-wide query ``q [B, Hq, d]``; returns the per-rank
        :class:`DecodeResult` list (rank ``r`` holds query heads ``q_slice(r, Hq)``).  The budget of
        ``cert`` is made global.  ``telemetry``: one :class:`Telemetry` per rank (local heads)."""
        from .decode import decode_attention

        Hq = q.shape[1]
        c = global_cert(cert, Hq) if cert is not None else None
        out = []
        for r, pool in enumerate(self.shards):
            with _on_device(self.devices[r] if self.devices is not None else None):
                xp = pool.xp
                qr = xp.ascontiguousarray(xp.asarray(q)[:, self.q_slice(r, Hq)])
                out.append(decode_attention(qr, pool, layer=layer, kv_indptr=xp.asarray(kv_indptr),
                                            kv_indices=xp.asarray(kv_indices),
                                            kv_last_page_len=xp.asarray(kv_last_page_len), cert=c,
                                            telemetry=None if telemetry is None else telemetry[r], **kw))
        return out


class _on_device:
    """``with`` the CUDA device ``dev`` current (no-op for None)."""

    def __init__(self, dev):
        self.dev = dev
        self.ctx = None

    def __enter__(self):
        if self.dev is not None:
            import cupy as cp

            self.ctx = cp.cuda.Device(self.dev)
            self.ctx.__enter__()
        return self

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)


# ---------------------------------------------------------------- telemetry across ranks

_SCALARS = ("cells", "covered", "overflow", "sum_r", "kv_cells", "kv_covered")


def packed_size(num_layers, num_q_heads_total):
    return len(_SCALARS) + 2 * num_layers * num_q_heads_total


def pack_telemetry(tel, q_head_offset, num_q_heads_total):
    """This rank's aggregates as one float64 vector in the model-wide layout (on the counters'
    device; no host read): ``[scalars..., head_exceed [L, Hq_total], head_max [L, Hq_total]]`` with
    this rank's query heads at ``q_head_offset`` and zeros elsewhere.  Integer counts stay exact in
    float64 up to 2^53."""
    xp = tel.xp
    L, h = tel.num_layers, tel.num_q_heads
    if q_head_offset < 0 or q_head_offset + h > num_q_heads_total:
        raise ValueError(f"query heads [{q_head_offset}, {q_head_offset + h}) exceed {num_q_heads_total}")
    vec = xp.zeros(packed_size(L, num_q_heads_total), xp.float64)
    for i, name in enumerate(_SCALARS):
        vec[i] = getattr(tel, name)[0]
    n = len(_SCALARS)
    ex = vec[n:n + L * num_q_heads_total].reshape(L, num_q_heads_total)
    mx = vec[n + L * num_q_heads_total:].reshape(L, num_q_heads_total)
    ex[:, q_head_offset:q_head_offset + h] = tel.head_exceed
    mx[:, q_head_offset:q_head_offset + h] = tel.head_max
    return vec


def snapshot_from_packed(vec, num_layers, num_q_heads_total, steps, tau):
    """The global :meth:`Telemetry.snapshot` from the sum over ranks of :func:`pack_telemetry`."""
    v = vec.get() if hasattr(vec, "get") else np.asarray(vec)
    sc = dict(zip(_SCALARS, v[: len(_SCALARS)]))
    n, LH = len(_SCALARS), num_layers * num_q_heads_total
    head_exceed = np.rint(v[n:n + LH]).astype(np.int64).reshape(num_layers, num_q_heads_total)
    head_max = v[n + LH:].reshape(num_layers, num_q_heads_total).copy()
    cells, kv_cells = int(sc["cells"]), int(sc["kv_cells"])
    finite = cells - int(sc["overflow"])
    return {
        "steps": int(steps),
        "cells": cells,
        "coverage": int(sc["covered"]) / cells if cells else None,
        "overflow_fraction": int(sc["overflow"]) / cells if cells else None,
        "mean_r_finite": float(sc["sum_r"]) / finite if finite else None,
        "max_r_finite": float(head_max.max()) if head_max.size else 0.0,
        "head_max_r": head_max,
        "head_exceed": head_exceed,
        "kv_coverage": int(sc["kv_covered"]) / kv_cells if kv_cells else None,
        "tau": tau,
    }


def reduce_telemetry(tels, offsets, num_q_heads_total, allreduce=None):
    """Global snapshot of per-rank telemetry.

    ``tels``/``offsets``: this process's ranks' :class:`Telemetry` and their first query head.  With
    ``allreduce`` (a callable summing a float64 device vector across processes in place, e.g.
    :func:`nccl_allreduce_sum`), each process passes its one rank and the vectors are summed by one
    all-reduce; without it, the listed ranks are summed here (a simulated run)."""
    if not tels:
        raise ValueError("tels must list at least one Telemetry")
    if len({t.xp.__name__ for t in tels}) != 1:
        raise ValueError("tels must all keep their counters on one backend")
    L, tau = tels[0].num_layers, tels[0].tau
    total = sum(pack_telemetry(t, o, num_q_heads_total) for t, o in zip(tels, offsets))
    if allreduce is not None:
        allreduce(total)
    steps = int((tels[0].step.get() if hasattr(tels[0].step, "get") else tels[0].step)[0]) + 1
    return snapshot_from_packed(total, L, num_q_heads_total, steps, tau)


def nccl_allreduce_sum(comm):
    """A callable summing a contiguous float64 CuPy vector in place across ``comm``'s ranks with one
    NCCL all-reduce on the current stream (``cupy.cuda.nccl.NcclCommunicator``)."""
    from cupy.cuda import nccl

    import cupy as cp

    def run(vec):
        if vec.dtype != cp.float64 or not vec.flags.c_contiguous:
            raise TypeError("the telemetry vector must be a contiguous float64 CuPy array")
        stream = cp.cuda.get_current_stream()
        comm.allReduce(vec.data.ptr, vec.data.ptr, vec.size, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()

    return run
