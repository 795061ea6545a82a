"""The device-side state of GPU pools: counters, the mapped exact backing store, the exact tier,
and the entry to a decode (:meth:`_DeviceBase.plan`)."""

from __future__ import annotations

import math

import numpy as np

from .. import certificate as cert_mod
from ..arrays import check_int
from .build import kernel
from .geometry import I8_MAX_SPLITS, I8_TILE, V2_GRID_CAP, V2_MAX_SPLITS, V2_MIN_TOKENS, V2_WAVE_MIN_TOKENS
from .launch import _grid1, _i32
from .write import _dequant, _input, _slots64, _write, check_gpu_config

class _DeviceBase:
    """What the GPU side of every pool has: counters, the mapped backing store, the decode plan."""

    fp16_store = False

    def __init__(self, pool, bypass_ch, band_ch):
        import cupy as cp

        if pool.head_dim not in (64, 128, 256):
            raise ValueError(f"the GPU kernels support head_dim 64, 128 or 256, got {pool.head_dim}")
        if band_ch.shape[0] > 64:
            raise ValueError(f"the GPU kernels support at most 64 witness bands, got {band_ch.shape[0]}")
        self.pool = pool
        self.bypass = cp.asarray(bypass_ch)                          # [L, H, NP2]
        self.band_ch = cp.asarray(band_ch if band_ch.size else np.zeros((1, 1), np.int32))
        self.num_bands = int(band_ch.shape[0])
        self.counters = cp.zeros(2, cp.uint64)                       # non-finite rows, bad slots
        pool.nonfinite_writes = self.counters[:1]
        self.exact_ptr = 0
        if pool.keep_exact:
            nbytes = pool.exact.nbytes
            flags = cp.cuda.runtime.hostAllocMapped | cp.cuda.runtime.hostAllocPortable
            self._pinned = cp.cuda.PinnedMemory(nbytes, flags)
            buf = cp.cuda.PinnedMemoryPointer(self._pinned, 0)
            pool.exact = np.frombuffer(buf, np.float16, pool.exact.size).reshape(pool.exact.shape)
            pool.exact[...] = 0
            # mapped pinned memory under unified addressing: the host pointer is the device pointer
            self.exact_ptr = self._pinned.ptr
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.num_sms = int(props["multiProcessorCount"])
        self.compute_capability = (int(props["major"]), int(props["minor"]))

    @property
    def bad_slot_writes(self):
        return self.counters[1:2]

    def page_in(self, entry, k_rows, v_rows):
        """Copy one page of exact rows (host views into the mapped backing store) into tier entry
        ``entry``, ordered on the current stream after the writes that filled them."""
        import cupy as cp

        stream = cp.cuda.get_current_stream().ptr
        for dst, src in ((self.pool.tier_k[entry], k_rows), (self.pool.tier_v[entry], v_rows)):
            assert src.flags.c_contiguous and dst.flags.c_contiguous and src.nbytes == dst.nbytes
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.ctypes.data, src.nbytes, 4, stream)  # 4: default

    def evict(self, layer, slots):
        p = self.pool
        s = _slots64("slots", slots)
        n = s.shape[0]
        if n:
            kernel("write.cu", "evict_tier_pages")(
                _grid1(n), (256,), (s, _i32(n), np.int64(p.num_slots), _i32(int(math.log2(p.page_size))),
                                    _i32(p.num_kv_heads), _i32(p.num_pages + 1), p.tier_map_dev[layer]))


    def default_num_splits(self, batch, ctas_per_sm=4, max_splits=64, tokens=None, min_tokens=64):
        """One wave of resident CTAs (``ctas_per_sm`` per SM, the stage-1 kernel's occupancy; for
        the fp16 kernel's pipelines, splits per SM) over batch × kv heads, at most ``max_splits``;
        splits beyond a request's pages exit at once.  Chosen without reading the page table (that
        would synchronise the host).  Measured (``bench/decode.py --splits``, docs/performance.md): one wave beats two at every small-batch shape; a wave counted at 4 CTAs per SM left the
        6-per-SM kernel at 0.73 waves (Nsight Compute).  ``tokens`` (the mean tokens per
        request, from the page table's shape) keeps at least ``min_tokens`` per split: the one-warp
        fp16 kernel takes ``max_splits=128`` (128 splits at batch 1, 28/4, 32k, 55 µs against
        75 at 64; at 4k, 64 splits 22–24 µs against 27–28 at 128); the INT8 kernel's rule is
        :meth:`v2_num_splits`."""
        target = max(1, ctas_per_sm) * self.num_sms
        ns = min(max_splits, target // max(1, batch * self.pool.num_kv_heads), self.pool.num_pages)
        if tokens is not None:
            ns = min(ns, tokens // min_tokens)
        return int(max(1, ns))

    def i8_num_splits(self, batch, ctas_per_sm, tokens):
        """decode_stage1_i8's default: one wave of its resident CTAs, at most :data:`I8_MAX_SPLITS`
        splits of at least one :data:`I8_TILE`-token tile, then the fewest splits with the same
        pages per split rounded up to whole tiles.  A split's pages are ``ceil(pages / splits)``
        (split_tokens, cuda/common.cuh), and a split of one and a half tiles runs two: so the
        longest split keeps its tiles and the step loses CTAs, each a set-up of its own.  Measured
        (one process, H100, certified µs): batch 1, 32/8, 4k, 99 splits (three pages each) against
        64 (four): Tier B 22.7 against 19.1, the gate's step 33.0 against 28.5, the exact tier 32.2
        against 27.8; 43 and 32 splits were slower (22.1, 20.7; 32.2, 33.6)."""
        ns = self.default_num_splits(batch, ctas_per_sm, max_splits=I8_MAX_SPLITS, tokens=tokens,
                                     min_tokens=I8_TILE)
        if tokens is None:
            return ns
        page = self.pool.page_size
        pages = -(-tokens // page)
        tile_pages = max(1, I8_TILE // page)
        pps = -(-pages // ns)
        pps = -(-pps // tile_pages) * tile_pages
        return int(max(1, -(-pages // pps)))

    def v2_num_splits(self, batch, ctas_per_sm, tokens):
        """decode_stage1_v2's default: the 64-split rule, and where 64 splits leave most of one wave
        empty, more — up to :data:`V2_MAX_SPLITS` within one wave: a multiple of 64 while the grid
        stays within :data:`V2_GRID_CAP` CTAs per SM, for splits of at least :data:`V2_MIN_TOKENS`
        tokens; the whole wave for splits of at least :data:`V2_WAVE_MIN_TOKENS`."""
        ns = self.default_num_splits(batch, ctas_per_sm)
        if ns < 64:
            return ns
        rows = max(1, batch * self.pool.num_kv_heads)
        # (in whole steps of 64: 66 splits at 32/8 measured 1% slower than 64)
        capped = min(V2_GRID_CAP, max(1, ctas_per_sm)) * self.num_sms // rows // 64 * 64
        near = self.default_num_splits(batch, ctas_per_sm, V2_MAX_SPLITS, tokens, V2_MIN_TOKENS)
        wave = self.default_num_splits(batch, ctas_per_sm, V2_MAX_SPLITS, tokens, V2_WAVE_MIN_TOKENS)
        return max(ns, min(near, capped), wave)

    def plan(self, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits, unroll=0,
             max_pages=0, telemetry=None, stage1="auto", budget=None):
        """Validate (metadata only), allocate the outputs, and return a :class:`DecodePlan`.

        ``unroll`` (tokens per lane group per step; 0 = default) exists for the benchmark sweep.
        ``max_pages > 0`` asks for per-page contributions of each request's first ``max_pages`` pages.
        ``stage1``: ``'auto'`` (``decode_stage1_f16`` for fp16 stores and the staged-tile
        ``decode_stage1_v2`` for INT8 where they apply, else ``decode_stage1``), or ``'v1'``, ``'v2'``
        or ``'f16'`` to force one (benchmarks; ``'v2'`` and ``'f16'`` raise where they do not apply)."""
        p = self.pool
        B, Hq, d = q.shape
        G = Hq // p.num_kv_heads
        if not 1 <= G <= 8:
            raise ValueError(f"the GPU kernels support 1 to 8 query heads per kv head, got G={G}")
        for name, arr, n in (("kv_indptr", kv_indptr, B + 1), ("kv_last_page_len", kv_last_page_len, B)):
            check_int(name, arr)
            if arr.shape[0] != n:
                raise ValueError(f"{name} must have shape [{n}], got {list(arr.shape)}")
        check_int("kv_indices", kv_indices)
        from .decode import DecodePlan

        return DecodePlan(self, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert,
                          num_splits, unroll, max_pages, telemetry, stage1, budget)

    def decode(self, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits, max_pages=0,
               telemetry=None, budget=None):
        plan = self.plan(q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits,
                         max_pages=max_pages, telemetry=telemetry, budget=budget)
        plan.launch()
        return plan.result()


class PoolDevice(_DeviceBase):
    """Device-side state and launches of a ``backend='cuda'`` :class:`~witcert_cupy.KVPool`."""

    def __init__(self, pool):
        check_gpu_config(pool.config)
        super().__init__(pool, pool.bypass_ch, pool.band_ch)

    def store(self, layer):
        """Kernel arguments of the stored data: (data, scales, outliers, witness, bypass, quant)."""
        import cupy as cp

        p, cfg = self.pool, self.pool.config
        k0, k1 = cfg.seed_words
        return (p.codes, p.scales.view(cp.uint16), p.outliers.view(cp.uint16), p.witness.view(cp.uint16),
                self.bypass[layer], (cfg.group_size, k0, k1, cfg.dither_bits, cert_mod.beta_steps(cfg.dither_bits)))

    def write(self, layer, slots, k, v):
        p = self.pool
        kd, code = _input("k", k, (None, p.num_kv_heads, p.head_dim))
        vd, code_v = _input("v", v, (kd.shape[0], p.num_kv_heads, p.head_dim))
        if code_v != code:
            vd = vd.astype(kd.dtype)
        s = _slots64("slots", slots)
        if s.shape[0] != kd.shape[0]:
            raise ValueError(f"slots must have shape [{kd.shape[0]}] (one per row of k), got {list(s.shape)}")
        _write(kd, vd, code, s, s, layer=layer, plane_layer=layer, side0=0, nsides=2, H=p.num_kv_heads,
               N=p.num_slots, config=p.config, bypass_layer=self.bypass[layer],
               codes=p.codes, scales=p.scales, outl=p.outliers, wit=p.witness,
               exact_ptr=self.exact_ptr, counters=self.counters, head_base=p.kv_head_offset)

    def dequantized(self, layer, slots, side):
        p = self.pool
        s = _slots64("slots", slots)
        return _dequant(p.codes, p.scales, p.outliers, s, s, layer=layer, plane_layer=layer, side=side,
                        H=p.num_kv_heads, N=p.num_slots, config=p.config, bypass_layer=self.bypass[layer],
                        head_base=p.kv_head_offset)


class Fp16PoolDevice(_DeviceBase):
    """Device-side state and launches of a ``backend='cuda'`` :class:`~witcert_cupy.Fp16Pool`."""

    fp16_store = True

    def __init__(self, pool):
        super().__init__(pool, np.zeros((pool.num_layers, pool.num_kv_heads, 0), np.int32), pool.band_ch)
        import cupy as cp

        self._none = cp.zeros(8, cp.uint16)

    def store(self, layer):
        import cupy as cp

        p = self.pool
        return (p.values.view(cp.uint16), self._none, self._none, p.witness.view(cp.uint16), self.bypass[layer],
                (p.head_dim, 0, 0, 8, 0.0))

    def write(self, layer, slots, rows):
        import cupy as cp

        p = self.pool
        shape = (None, p.num_kv_heads, p.head_dim)
        kd, code = _input("k", rows["k"], shape)
        n = kd.shape[0]
        vd, code_v = _input("v", rows["v"], (n, p.num_kv_heads, p.head_dim))
        if code_v != code:
            vd = vd.astype(kd.dtype)
        # stored rows per side, in their own dtype (rounded to fp16 in the kernel, like the CPU);
        # a null pointer serves the exact row
        st = [(np.uint64(0), 0), (np.uint64(0), 0)]
        for j, name in enumerate(("k_stored", "v_stored")):
            if name in rows:
                st[j] = _input(name, rows[name], (n, p.num_kv_heads, p.head_dim))
        s = _slots64("slots", slots)
        if s.shape[0] != n:
            raise ValueError(f"slots must have shape [{n}] (one per row of k), got {list(s.shape)}")
        if n == 0:
            return
        kernel("write.cu", "store_fp16_rows")(
            (n, p.num_kv_heads, 2), (p.head_dim,),
            (kd, vd, _i32(code), st[0][0], _i32(st[0][1]), st[1][0], _i32(st[1][1]), s, _i32(n), _i32(p.num_kv_heads), np.int64(p.num_slots), _i32(p.head_dim), _i32(layer),
             _i32(self.num_bands), self.band_ch, p.values.view(cp.uint16), p.witness.view(cp.uint16),
             p.k_norm if p.k_norm.size else np.uint64(0), np.uint64(self.exact_ptr), self.counters))
