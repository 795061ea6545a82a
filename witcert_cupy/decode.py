"""decode_attention: paged split-KV decode over a :class:`KVPool` with the fused certificate
(SPEC §4–6)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from . import _contract as C
from . import certificate as cert_mod
from .budget import budget_key, charge_host, check_requests
from .arrays import backend_of, check_float, check_int, check_range, to_cupy, to_numpy
from .config import CertConfig, _bool_arg, _int_arg
from .pool import Fp16Pool, KVPool, PagedPool
from .types import DecodeResult
from .write import check_layer_side


@dataclass(frozen=True)
class PageTable:
    """A validated CSR page table on the host (FlashInfer/SGLang convention)."""

    indptr: np.ndarray
    indices: np.ndarray
    last_page_len: np.ndarray

    @property
    def batch(self):
        return self.last_page_len.shape[0]

    def num_pages_of(self, b):
        return int(self.indptr[b + 1] - self.indptr[b])

    def seq_len(self, b, page_size):
        n = self.num_pages_of(b)
        return 0 if n == 0 else (n - 1) * page_size + int(self.last_page_len[b])

    def pages(self, b):
        """The page ids of request ``b``, in order."""
        return self.indices[self.indptr[b]:self.indptr[b + 1]]

    def rows(self, rows):
        """The page table of the requests ``rows`` alone, in that order."""
        rows = np.asarray(rows, np.int64)
        indptr = np.concatenate([[0], np.cumsum(np.diff(self.indptr)[rows])]).astype(np.int32)
        indices = np.concatenate([self.pages(b) for b in rows] or [np.zeros(0, np.int32)]).astype(np.int32)
        return PageTable(indptr, indices, self.last_page_len[rows].astype(np.int32))

    def slots(self, b, page_size):
        """int64 slot ids of request ``b`` in sequence order."""
        pages = self.pages(b).astype(np.int64)
        if pages.size == 0:
            return np.zeros(0, np.int64)
        s = (pages[:, None] * page_size + np.arange(page_size)[None, :]).reshape(-1)
        return s[: self.seq_len(b, page_size)]


def check_page_table(kv_indptr, kv_indices, kv_last_page_len, *, batch, num_pages, page_size):
    """Validate host CSR page-table arrays; raises TypeError/ValueError/IndexError naming the argument."""
    ip = to_numpy("kv_indptr", kv_indptr)
    ix = to_numpy("kv_indices", kv_indices)
    ll = to_numpy("kv_last_page_len", kv_last_page_len)
    check_int("kv_indptr", ip)
    check_int("kv_indices", ix)
    check_int("kv_last_page_len", ll)
    if ip.shape[0] != batch + 1:
        raise ValueError(f"kv_indptr must have shape [{batch + 1}] (batch + 1), got {list(ip.shape)}")
    if ll.shape[0] != batch:
        raise ValueError(f"kv_last_page_len must have shape [{batch}], got {list(ll.shape)}")
    if ip[0] != 0 or np.any(np.diff(ip.astype(np.int64)) < 0):
        raise ValueError("kv_indptr must start at 0 and be non-decreasing")
    if int(ip[-1]) != ix.shape[0]:
        raise ValueError(f"kv_indptr[-1] ({int(ip[-1])}) must equal len(kv_indices) ({ix.shape[0]})")
    check_range("kv_indices", ix, 0, num_pages)
    npg = np.diff(ip.astype(np.int64))
    bad = (npg > 0) & ((ll < 1) | (ll > page_size))
    if np.any(bad):
        raise ValueError(f"kv_last_page_len must lie in [1, {page_size}] for requests with pages, "
                         f"got {ll[bad][:4].tolist()}")
    return PageTable(ip.astype(np.int32), ix.astype(np.int32), ll.astype(np.int32))


def default_num_splits_cpu(batch, num_kv_heads, max_pages):
    """Enough work units to keep every numba thread busy, never more splits than pages."""
    try:
        import numba

        threads = numba.get_num_threads()
    except Exception:  # noqa: BLE001
        threads = os.cpu_count() or 1
    want = math.ceil(2 * threads / max(1, batch * num_kv_heads))
    return int(max(1, min(want, max(1, max_pages))))


def _check_common(q, pool, layer, sm_scale, cert, num_splits):
    if not isinstance(pool, PagedPool):
        raise TypeError(f"pool must be a KVPool or an Fp16Pool, got {type(pool).__name__}")
    layer, _ = check_layer_side(layer, "k", pool.num_layers)
    if cert is not None and not isinstance(cert, CertConfig):
        raise TypeError(f"cert must be a CertConfig or None, got {type(cert).__name__}")
    if isinstance(pool, Fp16Pool) and cert is not None:
        if cert.tier != "A":
            raise ValueError(f"cert.tier={cert.tier!r}: an Fp16Pool has no dither, only Tier 'A' applies")
        if pool.witness_bands == 0:
            raise ValueError("cert.tier='A' needs a witness: build the Fp16Pool with witness_bands > 0")
    if isinstance(pool, KVPool) and cert is not None and cert.uses_witness and pool.config.witness_bands == 0:
        raise ValueError(f"cert.tier={cert.tier!r} needs a witness: build the pool with "
                         "QuantConfig(witness_bands > 0)")
    check_float("q", q, (None, None, pool.head_dim))
    B, Hq, _ = q.shape
    if Hq % pool.num_kv_heads:
        raise ValueError(f"q has {Hq} heads, not a multiple of the pool's {pool.num_kv_heads} kv heads")
    if cert is not None and cert.num_q_heads is not None and cert.num_q_heads < Hq:
        raise ValueError(f"cert.num_q_heads ({cert.num_q_heads}) is below the {Hq} query heads of q")
    sm_scale = cert_mod.check_sm_scale(sm_scale, pool.head_dim)
    if num_splits is not None:
        num_splits = _int_arg("num_splits", num_splits, lo=1, hi=4096)
    return layer, float(sm_scale), num_splits


def decode_attention(q, pool, *, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale=None,
                     cert=None, num_splits=None, page_contrib=False, telemetry=None, requests=None):
    """One decode step of paged attention over a quantized pool, with the SPEC certificate.

    Parameters
    ----------
    q : float array ``[B, Hq, d]``; ``Hq`` a multiple of the pool's ``Hkv`` (GQA group ``G``)
    pool : KVPool or Fp16Pool
    layer : int
    kv_indptr : int array ``[B + 1]``; request ``b`` owns ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``
    kv_indices : int array ``[nnz_pages]``, page ids
    kv_last_page_len : int array ``[B]``, tokens on each request's last page (``1..page_size``)
    sm_scale : float, default ``1/sqrt(d)``
    cert : CertConfig or None
    num_splits : int or None
        KV splits per (request, kv head); None picks one from the hardware.  Results do not depend
        on it beyond fp32 rounding.
    page_contrib : bool
        Also return the per-page certificate contributions (needs ``cert``).  On the GPU this reads
        ``kv_indptr`` once on the host to size the output (the one synchronising option).
    telemetry : Telemetry or None
        Adds this call's risks to the device-side aggregates (SPEC §8; needs ``cert``).
    requests : int array ``[B]`` or None
        The pool ledger's request id of each row (spec §4.4); None: row ``b`` is request ``b``.
        A Tier-B or AB certificate spends one unit of its request's ``L · T`` per call; cells past
        the budget report ``risk = +inf`` (see :mod:`witcert_cupy.budget`).

    Returns
    -------
    DecodeResult
        On the CPU, page indices outside the pool raise IndexError before anything runs; on the
        GPU (no host synchronisation) such a row yields NaN output and an infinite certificate.
    """
    be = backend_of(q=q, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_last_page_len=kv_last_page_len)
    if isinstance(pool, PagedPool) and be != pool.backend:
        raise TypeError(f"q and the page table must live on the pool's device ({pool.backend})")
    page_contrib = _bool_arg("page_contrib", page_contrib)
    if page_contrib and cert is None:
        raise ValueError("page_contrib needs a certificate (cert=CertConfig(...))")
    if telemetry is not None:
        from .telemetry import check_telemetry

        check_telemetry(telemetry, cert, be)
    if be == "cuda":  # the budget and telemetry are launched with the step (graph-capturable)
        return _decode(q, pool, be, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits,
                       page_contrib, telemetry, requests)
    res = _decode(q, pool, be, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits,
                  page_contrib, requests=requests)
    if telemetry is not None:
        telemetry.record(layer, res.risk, pool.num_kv_heads)
    return res


def _decode(q, pool, be, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits,
            page_contrib, telemetry=None, requests=None, charge=True):
    """One validated decode; ``charge=False`` spends no budget (the gate's rounds: one event)."""
    if be == "cuda":
        qd = to_cupy(q)
        layer, sm_scale, num_splits = _check_common(qd, pool, layer, sm_scale, cert, num_splits)
        budget = budget_of(pool, cert, qd.shape, requests, be) if charge else None
        ip = to_cupy(kv_indptr)
        # sizing the contribution output reads the page table once on the host (a sync, on request)
        max_pages = max(1, int((ip[1:] - ip[:-1]).max().get())) if page_contrib and ip.shape[0] > 1 else 0
        return pool._dev.decode(qd, layer, ip, to_cupy(kv_indices), to_cupy(kv_last_page_len), sm_scale, cert,
                                num_splits, max_pages=max_pages, telemetry=telemetry, budget=budget)
    qh = to_numpy("q", q)
    layer, sm_scale, num_splits = _check_common(qh, pool, layer, sm_scale, cert, num_splits)
    budget = budget_of(pool, cert, qh.shape, requests, be) if charge else None
    B, Hq, d = qh.shape
    pt = check_page_table(kv_indptr, kv_indices, kv_last_page_len, batch=B,
                          num_pages=pool.num_pages, page_size=pool.page_size)
    max_pages = int(np.max(np.diff(pt.indptr))) if B else 0
    ns = num_splits or default_num_splits_cpu(B, pool.num_kv_heads, max_pages)
    res = _decode_cpu(qh.astype(np.float32), pool, layer, pt, sm_scale, cert, ns, page_contrib)
    if budget is not None:
        ledger, key, limit, reqs = budget
        charge_host(ledger, key, limit, res.risk, res.tv_bound, reqs)
    return res


def budget_of(pool, cert, q_shape, requests, backend):
    """``(ledger, key, limit, requests)`` a certified call charges (spec §4.4), or None when it spends
    nothing (no certificate, or Tier A alone)."""
    key, limit = budget_key(cert, q_shape[1], pool.num_layers)
    reqs = check_requests(requests, q_shape[0], pool.ledger, backend)
    return (pool.ledger, key, limit, reqs) if key else None


def _decode_cpu(q32, pool, layer, pt, sm_scale, cert, ns, page_contrib=False):
    from ._cpu import decode as cpu
    from ._cpu.decode import decode_stage1, fp16_rows_as_bytes, merge_splits

    chunk, combine = cpu.DOT_ORDER  # (read per call: a test may run the CPU in a GPU kernel's order)
    form_i = (chunk, combine) == cert_mod.FORM_I_ORDER  # exact integer products (SPEC §6 form (I))
    # the fp32 dot products' order: the CPU's own, a GPU kernel's, or under form (I) its exact-tier tokens'
    dot_chunk, dot_combine = cert_mod.FORM_I_EXACT_ORDER if form_i else (chunk, combine)
    height = cpu.dot_height(q32.shape[-1]) if not form_i else None

    B, Hq, d = q32.shape
    tier = cert_mod.tier_code(cert)
    logb = cert_mod.log_budget(cert, Hq, pool.num_layers) if cert is not None else np.float32(0)
    o_part = np.empty((B, Hq, ns, d), np.float32)
    lse_part = np.empty((B, Hq, ns), np.float32)
    lam_part = np.empty((B, Hq, ns), np.float32)
    cmax_part = np.empty((B, Hq, ns), np.float32)
    u16 = lambda a: a.view(np.uint16)  # noqa: E731
    bands = pool.band_ch if pool.band_ch.size else np.zeros((0, 1), np.int32)
    tier_map = getattr(pool, "tier_map", None)  # None: no exact tier, every page is quantized
    if isinstance(pool, KVPool):
        cfg = pool.config
        k0, k1 = cfg.seed_words
        data = (pool.codes[layer, 0], u16(pool.scales[layer, 0]), u16(pool.outliers[layer, 0]),
                u16(pool.witness[layer, 0]), np.zeros((pool.num_kv_heads, 0), np.float32),
                pool.codes[layer, 1], u16(pool.scales[layer, 1]),
                u16(pool.outliers[layer, 1]), pool.bypass_ch[layer])
        quant = (k0, k1, cfg.dither_bits, cfg.group_size)
        if form_i:
            if cfg.dither_bits not in C.FORM_I_DITHER_BITS:
                raise ValueError(f"the form-(I) logit serves INT8 pools at 8- or 16-bit dither, not "
                                 f"{cfg.dither_bits}-bit")
            scalars = cert_mod.form_i_scalars(d, sm_scale, cfg.dither_bits, outlier_channels=pool.bypass_ch.shape[-1],
                                              exact_tier=tier_map is not None)
        else:
            scalars = cert_mod.kernel_scalars(height, sm_scale, cfg.dither_bits)
    else:  # stored fp16 values: no scales, outliers or dither
        if form_i:
            raise ValueError("the form-(I) logit serves INT8 pools, not stored fp16 values")
        none16 = np.zeros((pool.num_kv_heads, 1, 1), np.uint16)
        data = (fp16_rows_as_bytes(u16(pool.values[layer, 0])), none16, none16, u16(pool.witness[layer, 0]),
                pool.k_norm[layer], fp16_rows_as_bytes(u16(pool.values[layer, 1])), none16, none16,
                np.zeros((pool.num_kv_heads, 0), np.int32))
        quant = (0, 0, 8, d)
        scalars = cert_mod.kernel_scalars(height, sm_scale, None)
    outliers = isinstance(pool, KVPool) and pool.bypass_ch.shape[-1] > 0  # (form (I): one more rounding)
    if tier_map is None:
        # (a writable C-ordered map, the same array type as a tier's: one numba specialization, not two)
        layer_map = np.full((pool.num_kv_heads, pool.num_pages), -1, np.int32)
        tier_k = tier_v = np.zeros((1, pool.page_size, d), np.uint16)
    else:
        layer_map, tier_k, tier_v = tier_map[layer], u16(pool.tier_k), u16(pool.tier_v)
    P = max(1, int(np.max(np.diff(pt.indptr)))) if B and page_contrib else 1
    page_lse = np.full((B, Hq, P), -np.inf, np.float32)
    page_lam = np.full((B, Hq, P), -np.inf, np.float32)
    gam_part = np.empty((B, Hq, ns), np.float32)
    decode_stage1(np.ascontiguousarray(q32), *data, bands, pt.indptr, pt.indices, pt.last_page_len,
                  pool.page_size, np.float32(sm_scale), layer, pool.kv_head_offset, *quant, tier, logb, *scalars,
                  ns, isinstance(pool, Fp16Pool), layer_map, tier_k, tier_v, bool(page_contrib), max(dot_chunk, 1),
                  dot_combine == "tree", form_i, cert_mod.form_i_gamma(outliers), o_part, lse_part, lam_part, cmax_part, gam_part, page_lse, page_lam)
    o = np.empty((B, Hq, d), np.float32)
    lse = np.empty((B, Hq), np.float32)
    log_a = np.empty((B, Hq), np.float32)
    cmax = np.empty((B, Hq), np.float32)
    gam = np.empty((B, Hq), np.float32)
    merge_splits(o_part, lse_part, lam_part, cmax_part, gam_part, cert_mod.f32_up(cert_mod.underflow_term(d, sm_scale)),
                 o, lse, log_a, cmax, gam)
    if cert is None:
        return DecodeResult(o, lse, num_splits=ns, dot_order=(chunk, combine))
    risk = cert_mod.risk_from_log_a(log_a, lse, gam)
    contrib = cert_mod.page_contributions(page_lse, page_lam, lse) if page_contrib else None
    return DecodeResult(o, lse, log_a, risk, cert_mod.tv_bound(risk, cmax), cmax, num_splits=ns,
                        page_contrib=contrib, gamma=gam, dot_order=(chunk, combine))
