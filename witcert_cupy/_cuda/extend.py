"""Launch layer of the tensor-core extend kernel (``cuda/extend_tc.cu``, issue 6).

:class:`ExtendPlan` allocates every buffer up front and :meth:`~ExtendPlan.launch` only launches
kernels (stage 1, then the decode merge and certificate of ``cuda/decode.cu``), so a prefill can be
timed with events or captured in a graph.  :func:`tc_extend_applies` says when the kernel serves a
call; ``witcert_cupy.extend_attention`` documents the choice.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np

from .. import certificate as cert_mod
from ..types import DecodeResult
from .build import kernel, kernel_dir
from .launch import _i32, bind_merge, launch_query

def _source_define(name: str, src: str | None = None, default: int | None = None) -> int:
    """The number of ``#define NAME N`` in the extend kernel's source, or in ``src`` (another
    version's text, ``bench/extend.py``); ``default`` where that source has none."""
    text = (kernel_dir() / "extend_tc.cu").read_text() if src is None else src
    m = re.search(rf"#define {name} (\d+)", text)
    if m is None:
        if default is None:
            raise ValueError(f"the extend kernel source has no #define {name}")
        return default
    return int(m.group(1))


# bytes of one tile image of the wgmma path's prepass (a struct XtTile), from the kernel source
IMAGE_BYTES = _source_define("XT_IMAGE_BYTES")


def _host(a):
    """A small index array on the host (CuPy arrays are copied; the plan reads them once)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


@functools.lru_cache(maxsize=None)
def smem_bytes() -> int:
    """Dynamic shared memory of one CTA, read from the kernel source (its ``static_assert`` ties it
    to the struct)."""
    return _source_define("XT_SMEM_BYTES")


# warps per CTA, from the kernel source; 16 query rows (new token × query head of one kv head) each
WARPS = _source_define("XT_WARPS")


@functools.lru_cache(maxsize=None)
def producer_warps() -> int:
    """Warps of the wgmma path's dequantizing (producer) warpgroups, from the kernel source
    (``bench/extend.py`` replaces this function when it times an older source without them)."""
    return _source_define("XT_PRODUCER_WARPS")


def block_threads(wgmma: bool) -> int:
    """Threads per CTA: the row warps, and the producer warpgroups on the wgmma path."""
    return 32 * (WARPS + (producer_warps() if wgmma else 0))

# The logits and P·V̂ by warpgroup mma (wgmma, cuda/extend_tc.cu with XT_WGMMA=1): None chooses it on
# compute capability 9.0 exactly (the sm_90a target runs nowhere else); True/False force either path
# (the GPU tests compare them; ``bench/extend.py --variant WGMMA=0`` times the mma.sync path).
WGMMA = None


def uses_wgmma(dev) -> bool:
    """Whether the extend kernel on ``dev`` (a pool's device state) takes the wgmma path."""
    return bool(WGMMA) if WGMMA is not None else tuple(dev.compute_capability) == (9, 0)


def kernel_options(wgmma: bool) -> tuple:
    """Extra compile options of the extend kernel: sm_90a and XT_WGMMA=1 for the wgmma path."""
    return ("-arch=sm_90a", "-DXT_WGMMA=1") if wgmma else ()


def tc_extend_applies(pool, cert, num_q_heads) -> str | None:
    """None when the tensor-core kernel serves this pool and certificate, else the reason why not."""
    dev = getattr(pool, "_dev", None)
    if dev is None or dev.fp16_store:
        return "it serves INT8 KVPools on the GPU"
    cfg = pool.config
    G = num_q_heads // pool.num_kv_heads
    checks = (
        (cfg.head_dim == 128, "head_dim 128"),
        (cfg.dither_bits == 8, "8-bit dither"),
        (cfg.group_size == 32, "group_size 32"),
        (cfg.n_pairs == 0, "no outlier pairs"),
        (pool.tier_map_dev is None, "no exact tier"),
        (cert is None or cert.tier == "B", "Tier B certificates (or none)"),
        (1 <= G <= 8, "1 to 8 query heads per kv head"),
    )
    missing = [what for ok, what in checks if not ok]
    return None if not missing else "it needs " + ", ".join(missing)


def tile_images(qo_host, kv_indptr, kv_last_page_len, nnz, page_size, tile=None):
    """Per request, how many tile images the wgmma path's prepass builds (``ceil(S_b / tile)``), and
    where its images start: ``(base [B], count [B])``, int32.  A request that stage 1 poisons (the
    checks of ``request_pages`` in common.cuh, or more new tokens than it holds) or that has no new
    token gets none; stage 1 poisons a split whose tile has no image rather than read past them.
    ``tile``: tokens per image, the kernel's ``XT_TILE`` by default."""
    tile = _source_define("XT_TILE") if tile is None else tile
    ip = np.asarray(kv_indptr, np.int64)
    ll = np.asarray(kv_last_page_len, np.int64)
    qo = np.asarray(qo_host, np.int64)
    B = qo.shape[0] - 1
    count = np.zeros(B, np.int64)
    for b in range(B):
        p0, p1 = int(ip[b]), int(ip[b + 1])
        bad = p0 < 0 or p1 < p0 or p1 > nnz
        npg = 0 if bad else p1 - p0
        bad = bad or (npg > 0 and not 1 <= int(ll[b]) <= page_size)
        S = 0 if npg == 0 else (npg - 1) * page_size + int(ll[b])
        n_new = int(qo[b + 1] - qo[b])
        if not bad and 0 < n_new <= S:
            count[b] = -(-S // tile)
    base = np.concatenate([[0], np.cumsum(count)[:-1]]) if B else np.zeros(0, np.int64)
    if B and int(count.sum()) >= 2**31:
        raise ValueError("the extend call's tile images exceed 2^31: split the call")
    return base.astype(np.int32), count.astype(np.int32)


def default_num_splits(num_tiles, num_kv_heads, num_sms, max_pages):
    """Splits so that the grid fills two waves of one CTA per SM; a long prefill needs none."""
    target = 2 * num_sms
    return int(max(1, min(64, math.ceil(target / max(1, num_tiles * num_kv_heads)), max(1, max_pages))))


class ExtendPlan:
    """One extend call on the GPU with every buffer allocated up front.

    Parameters are those of :func:`witcert_cupy.extend_attention` after validation; ``qo_host`` is
    the host copy of ``qo_indptr`` (the tile list is built from it), ``max_pages`` the longest
    request's page count (for the split count).  The page-table arrays may be device arrays: the
    plan sizes the wgmma path's workspace of tile images (``IMAGE_BYTES``, 52 KB, per 64 tokens per
    kv head of each request with new tokens: 214 MB for 32k tokens × 8 kv heads), which
    :meth:`prepass` fills and stage 1 reads, from ``host_tables`` (host copies of ``kv_indptr`` and
    ``kv_last_page_len``, as extend_attention holds them) or else from one read of those arrays."""

    def __init__(self, dev, q, layer, qo_host, kv_indptr, kv_indices, kv_last_page_len, causal, sm_scale, cert,
                 num_splits, max_pages, host_tables=None):
        import cupy as cp

        p = dev.pool
        n, Hq, d = q.shape
        if n * Hq >= 2**31:
            raise ValueError(f"extend of {n} query positions × {Hq} heads exceeds 2^31 rows: split the call")
        G = Hq // p.num_kv_heads
        qt = 16 * WARPS // G
        req, q0 = [], []
        for b in range(qo_host.shape[0] - 1):
            for i in range(int(qo_host[b]), int(qo_host[b + 1]), qt):
                req.append(b)
                q0.append(i)
        self.num_tiles = len(req)
        ns = num_splits or default_num_splits(self.num_tiles, p.num_kv_heads, dev.num_sms, max_pages)
        self.dev, self.cert, self.ns, self.shape = dev, cert, int(ns), (n, Hq, d)
        self.q = launch_query(q)
        self.qo = cp.asarray(qo_host, dtype=cp.int32)
        self.tile_req = cp.asarray(np.array(req, np.int32))
        self.tile_q0 = cp.asarray(np.array(q0, np.int32))
        self.ip = cp.ascontiguousarray(kv_indptr, dtype=cp.int32)
        self.ix = cp.ascontiguousarray(kv_indices, dtype=cp.int32)
        self.ll = cp.ascontiguousarray(kv_last_page_len, dtype=cp.int32)
        self.o_part = cp.empty((n, Hq, self.ns, d), cp.float32)
        self.lse_part = cp.empty((n, Hq, self.ns), cp.float32)
        self.lam_part = cp.empty((n, Hq, self.ns), cp.float32)
        self.cmax_part = cp.empty((n, Hq, self.ns), cp.float32)
        self.gam_part = cp.empty((n, Hq, self.ns), cp.float32)
        self.gam = cp.empty((n, Hq), cp.float32)
        self.o = cp.empty((n, Hq, d), cp.float32)
        self.lse = cp.empty((n, Hq), cp.float32)
        self.log_a = cp.empty((n, Hq), cp.float32)
        self.cmax = cp.empty((n, Hq), cp.float32)
        self.risk = cp.empty((n, Hq), cp.float64)
        self.tv_bound = cp.empty((n, Hq), cp.float64)
        cfg = p.config
        k0, k1 = cfg.seed_words
        logb = cert_mod.log_budget(cert, Hq, p.num_layers) if cert is not None else np.float32(0)
        self.wgmma = uses_wgmma(dev)
        self.stage1 = kernel("extend_tc.cu", None, f"extend_tc_stage1<{G}>", kernel_options(self.wgmma))
        # the wgmma path's tile images: each request's tiles dequantized once per call by the prepass
        # (extend_tc_dequant), then bulk-copied by stage 1; the mma.sync path dequantizes in-kernel
        # (one image's worth of dummies keeps the arguments valid)
        ps = p.page_size
        ip_h, ll_h = host_tables if host_tables is not None else (_host(kv_indptr), _host(kv_last_page_len))
        base, count = tile_images(qo_host, ip_h, ll_h, self.ix.shape[0], ps)
        total = int(count.sum()) if self.wgmma else 0
        img_req = np.repeat(np.arange(count.shape[0], dtype=np.int32), count) if total else np.zeros(0, np.int32)
        img_tile = (np.arange(total, dtype=np.int64) - np.repeat(base.astype(np.int64), count)).astype(np.int32) \
            if total else np.zeros(0, np.int32)
        self.num_images = total
        self.img_base, self.img_count = cp.asarray(base), cp.asarray(count if self.wgmma else np.zeros_like(count))
        self.img_req, self.img_tile = cp.asarray(img_req), cp.asarray(img_tile)
        self.work = cp.empty((max(total, 1) * p.num_kv_heads, IMAGE_BYTES), cp.uint8)
        self.bad_tokens = cp.empty(max(total, 1) * p.num_kv_heads, cp.uint64)
        self.smem = smem_bytes()
        self.threads = block_threads(self.wgmma)
        self.stage1.max_dynamic_shared_size_bytes = self.smem
        # the largest shared-memory carveout: 192 KB of shared memory per CTA
        self.stage1.preferred_shared_memory_carveout = 100
        if total:
            self.prep = kernel("extend_tc.cu", None, "extend_tc_dequant", kernel_options(self.wgmma))
            self.prep_args = (p.codes, p.scales.view(cp.uint16), self.ip, self.ix, self.ll, self.img_req,
                              self.img_tile, self.work, self.bad_tokens, np.int64(p.num_slots),
                              _i32(p.num_kv_heads), _i32(layer), _i32(p.kv_head_offset),
                              _i32(int(math.log2(p.page_size))), _i32(p.num_pages), _i32(self.ix.shape[0]),
                              np.uint32(k0), np.uint32(k1))
        self.args1 = (self.q, p.codes, p.scales.view(cp.uint16), self.qo, self.tile_req, self.tile_q0, self.ip,
                      self.ix, self.ll, self.o_part, self.lse_part, self.lam_part, self.cmax_part, self.gam_part,
                      self.work,
                      self.bad_tokens, self.img_base, self.img_count, np.int64(p.num_slots),
                      _i32(p.num_kv_heads), _i32(layer), _i32(p.kv_head_offset),
                      _i32(int(math.log2(p.page_size))), _i32(p.num_pages), _i32(self.ix.shape[0]), _i32(self.ns),
                      _i32(1 if causal else 0), _i32(cert_mod.tier_code(cert)), np.uint32(k0), np.uint32(k1),
                      np.float32(sm_scale), np.float32(logb), np.float32(cert_mod.beta_steps(cfg.dither_bits)),
                      np.float32(cert_mod.tc_gamma_steps(cfg.group_size, cfg.num_groups)))
        cert_out = (self.risk, self.tv_bound) if cert is not None else (None, None)
        g0 = cert_mod.f32_up(cert_mod.underflow_term(d, sm_scale))
        self.merge = bind_merge(self.o_part, self.lse_part, self.lam_part, self.cmax_part, self.gam_part, self.o,
                                self.lse, self.log_a, self.cmax, self.gam, g0, *cert_out)

    def launch(self):
        """Launch stage 1, the merge and the certificate on the current stream (no allocation, no
        host read)."""
        n, Hq, d = self.shape
        if n == 0:
            return
        self.prepass()
        self.stage1((self.num_tiles, self.dev.pool.num_kv_heads, self.ns), (self.threads,), self.args1,
                    shared_mem=self.smem)
        self.merge()  # and the certificate, when certified

    def prepass(self):
        """Launch the wgmma path's prepass alone (each request's tiles dequantized once into the
        workspace that stage 1 bulk-copies from); nothing on the mma.sync path."""
        if self.num_images:
            self.prep((self.num_images, self.dev.pool.num_kv_heads), (256,), self.prep_args)

    def result(self):

        if self.cert is None:
            return DecodeResult(self.o, self.lse, num_splits=self.ns, kernel="extend_tc")
        return DecodeResult(self.o, self.lse, self.log_a, self.risk, self.tv_bound, self.cmax, num_splits=self.ns, gamma=self.gam,
                            kernel="extend_tc")
