"""Telemetry: aggregates of the certificate over (layer, query head, step) cells (SPEC §8).

Every counter is an array on the backend's device: the step counter and the sampling predicate
live there too, so recording never reads a device value on the host.  On the GPU one single-CTA
kernel per decode call updates them (deterministic, graph-capturable), on the Telemetry's own
stream, forked off the decode's critical path; on the CPU, NumPy.  :meth:`Telemetry.snapshot` is the one explicit host read.
"""

from __future__ import annotations

import numpy as np

from .config import CertConfig, _int_arg


def check_telemetry(telemetry, cert, backend):
    """The checks every decode entry point makes on its ``telemetry`` argument."""
    if not isinstance(telemetry, Telemetry):
        raise TypeError(f"telemetry must be a Telemetry, got {type(telemetry).__name__}")
    if cert is None:
        raise ValueError("telemetry needs a certificate (cert=CertConfig(...))")
    if cert.tau != telemetry.tau:
        raise ValueError(f"cert.tau ({cert.tau}) differs from the telemetry's tau ({telemetry.tau}): build the "
                         "Telemetry from the CertConfig its decode calls use")
    if (telemetry.xp is np) != (backend == "cpu"):
        raise TypeError(f"telemetry counters must live on the pool's device ({backend})")


class Telemetry:
    """Certificate telemetry of a model: pass it as ``decode_attention(..., telemetry=t)``.

    Parameters
    ----------
    num_layers, num_q_heads : int
    cert : CertConfig
        The certificate of the decode calls it records; its ``tau`` is the coverage threshold on the
        risk ``R`` (a cell is covered when ``R ≤ τ``), and every recorded call must use the same.
    sample_every : int
        Record only steps whose index is a multiple of this (the predicate is evaluated on the
        device).  A step starts with the call for layer 0.
    backend : {'cpu', 'cuda'}
        Where the counters live (the pool's backend).
    """

    def __init__(self, num_layers, num_q_heads, cert, *, sample_every=1, backend="cpu"):
        self.num_layers = _int_arg("num_layers", num_layers, lo=1)
        self.num_q_heads = _int_arg("num_q_heads", num_q_heads, lo=1)
        if not isinstance(cert, CertConfig):
            raise TypeError(f"cert must be a CertConfig (the coverage threshold is its tau), got {type(cert).__name__}")
        self.tau = cert.tau
        self.sample_every = _int_arg("sample_every", sample_every, lo=1)
        if backend not in ("cpu", "cuda"):
            raise ValueError(f"backend must be 'cpu' or 'cuda', got {backend!r}")
        if backend == "cuda":
            import cupy as xp
        else:
            xp = np
        self.xp = xp
        L, H = self.num_layers, self.num_q_heads
        # becomes 0 at the first layer-0 call; on the GPU a second word holds step mod sample_every
        self.step = xp.full(2 if backend == "cuda" else 1, -1, xp.int64)
        self.cells = xp.zeros(1, xp.int64)
        self.covered = xp.zeros(1, xp.int64)
        self.overflow = xp.zeros(1, xp.int64)
        self.sum_r = xp.zeros(1, xp.float64)          # over finite R
        self.max_r = xp.zeros(1, xp.float64)          # over finite R
        self.head_max = xp.zeros((L, H), xp.float64)  # per (layer, query head), finite R
        self.head_exceed = xp.zeros((L, H), xp.int64)
        self.kv_cells = xp.zeros(1, xp.int64)         # (request, layer, kv head, step) cells
        self.kv_covered = xp.zeros(1, xp.int64)       # ... whose G query heads are all covered
        self._side, self._last, self._inflight = None, None, []  # GPU: the forked telemetry stream

    def record(self, layer, risk, num_kv_heads):
        """Add one decode call's risks ``[B, Hq]`` (float64, on the counters' device) for ``layer``."""
        xp = self.xp
        layer = _int_arg("layer", layer, lo=0, hi=self.num_layers - 1)
        if risk.ndim != 2 or risk.shape[1] != self.num_q_heads:
            raise ValueError(f"risk must have shape [B, {self.num_q_heads}], got {list(risk.shape)}")
        if self.num_q_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads ({num_kv_heads}) must divide num_q_heads ({self.num_q_heads})")
        if xp is not np:
            self._record_device(layer, xp.ascontiguousarray(risk, dtype=xp.float64), num_kv_heads)
            return
        if layer == 0:
            self.step += 1
        w = (self.step % self.sample_every == 0).astype(xp.int64)   # the sampling predicate, on device
        wf = w.astype(xp.float64)
        r = risk.astype(xp.float64)
        finite = xp.isfinite(r)
        r0 = xp.where(finite, r, 0.0)
        ok = r <= self.tau                                          # NaN and inf are not covered
        self.cells += w * r.size
        self.covered += w * ok.sum()
        self.overflow += w * (~finite).sum()
        self.sum_r += wf * r0.sum()
        if r.size:
            self.max_r[...] = xp.maximum(self.max_r, wf * r0.max())
            self.head_max[layer] = xp.maximum(self.head_max[layer], wf * r0.max(0))
        self.head_exceed[layer] += w * (~ok).sum(0)
        B = r.shape[0]
        kv_ok = ok.reshape(B, num_kv_heads, -1).all(-1)
        self.kv_cells += w * kv_ok.size
        self.kv_covered += w * kv_ok.sum()

    def _record_device(self, layer, risk, num_kv_heads):
        """The GPU twin of :meth:`record`: one single-CTA kernel (``cuda/telemetry.cu``), no
        allocation and no host read, so it runs inside captured CUDA graphs.  ``risk`` is a
        contiguous float64 ``[B, Hq]`` CuPy array."""
        from ._cuda import kernel

        B, Hq = risk.shape
        if B == 0:
            return
        kernel("telemetry.cu", "telemetry_record")(
            (1,), (256,),
            (risk, np.int32(B), np.int32(Hq), np.int32(Hq // num_kv_heads), np.int32(layer), np.float64(self.tau),
             np.int64(self.sample_every), self.step, self.cells, self.covered, self.overflow, self.sum_r,
             self.max_r, self.head_max, self.head_exceed, self.kv_cells, self.kv_covered))

    def _record_forked(self, layer, risk, num_kv_heads):
        """Record off the decode's critical path (GPU): the telemetry kernel runs on this object's
        own stream, forked from the current stream after the risks exist, so it overlaps the next
        kernels instead of delaying them.  Telemetry launches stay in order (one stream), so the
        aggregates are as deterministic as :meth:`_record_device`.  Under CUDA-graph capture the
        fork is captured too and ``witcert_cupy._cuda.capture.join_forks`` rejoins it before the capture ends
        (:class:`~witcert_cupy.CapturedStep` does); eagerly, ``risk`` is kept alive until the kernel
        that reads it has run."""
        import cupy as cp

        main = cp.cuda.get_current_stream()
        if self._side is None:
            self._side = cp.cuda.Stream(non_blocking=True)
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(main)
        self._side.wait_event(ready)
        with self._side:
            self._record_device(layer, risk, num_kv_heads)
        done = cp.cuda.Event(disable_timing=True)
        done.record(self._side)
        self._last = done
        if main.is_capturing():
            from ._cuda.capture import fork_into_capture

            fork_into_capture(self)
        else:
            self._inflight = [(e, r) for e, r in self._inflight if not e.done] + [(done, risk)]

    def join(self, stream=None):
        """Make ``stream`` (default: the current one) wait for every telemetry launch so far."""
        if self._last is not None:
            import cupy as cp

            (stream or cp.cuda.get_current_stream()).wait_event(self._last)

    def snapshot(self) -> dict:
        """One host read of every aggregate (this is the only synchronising call)."""
        if self._side is not None:
            self._side.synchronize()
        get = (lambda a: a.get()) if self.xp is not np else np.asarray
        cells, kv_cells = int(get(self.cells)[0]), int(get(self.kv_cells)[0])
        finite = cells - int(get(self.overflow)[0])
        return {
            "steps": int(get(self.step)[0]) + 1,
            "cells": cells,
            "coverage": int(get(self.covered)[0]) / cells if cells else None,
            "overflow_fraction": int(get(self.overflow)[0]) / cells if cells else None,
            "mean_r_finite": float(get(self.sum_r)[0]) / finite if finite else None,
            "max_r_finite": float(get(self.max_r)[0]),
            "head_max_r": get(self.head_max).copy(),
            "head_exceed": get(self.head_exceed).copy(),
            "kv_coverage": int(get(self.kv_covered)[0]) / kv_cells if kv_cells else None,
            "tau": self.tau,
        }
