"""The decode step's dispatch and launch (:class:`DecodePlan`): which stage-1 kernel instance
serves a step, its buffers, its split count, and the launches (stage 1, merge, telemetry)."""

from __future__ import annotations

import math

import numpy as np

from .. import _contract as C
from .. import certificate as cert_mod
from ..types import DecodeResult
from . import geometry as geo
from .build import kernel
from .capture import capture_epoch
from .geometry import V2_PLAIN_GROUP_SIZE, V2_THREADS, V2_TILE, _resident_ctas, f16_pipes, f16_smem_bytes
from .launch import _i32, _pdl, bind_merge, launch_query
from .pdl import Launcher


def _cpp_bool(x):
    """A template argument's C++ spelling of ``x``."""
    return "true" if x else "false"


def select_stage1(*, fp16_store, bits, head_dim, exact_tier, page_outputs, unroll, group_size, num_bands,
                  outlier_channels, tier, certified, page_size=16, G=8, pairs=geo.I8_MIN_PAIRS,
                  tokens=geo.I8_LONG_TOKENS, requested="auto"):
    """The stage-1 kernel of a decode step, the one place it is chosen.

    Parameters
    ----------
    fp16_store : bool
        The pool stores fp16 rows (``Fp16Pool``) rather than dithered INT8.
    bits : int
        Dither bits of an INT8 pool (8, 16 or 24).
    head_dim, group_size, num_bands, outlier_channels : int
        The pool's layout: head dim, scale-group size, witness bands, exactly stored channels per row.
    exact_tier, page_outputs : bool
        The pool has an exact tier; the step asks for per-page contributions.
    page_size : int
        The pool's tokens per page.
    G, pairs, tokens : int
        The step's query heads per kv head, (request, kv head) pairs and mean tokens per request: where
        the staged tile's PLAIN layout also serves, the form-(I) kernel is chosen where it measured
        faster (``geometry.i8_serves``); elsewhere it is chosen wherever it serves.
    unroll : int
        The general kernel's tokens per lane group (0: its default).
    tier : int
        ``certificate.tier_code`` of the step's certificate (bit 0: a Tier-A term).
    certified : bool
        The step carries a certificate.
    requested : {'auto', 'v1', 'v2', 'f16', 'i8'}
        ``'auto'`` for the library's choice; a name forces that kernel (benchmarks, tests).

    Returns
    -------
    (str, bool)
        ``'i8'`` (``decode_stage1_i8``: SPEC §6 form (I), INT8 pools at 8- or 16-bit dither with 32-channel
        groups, d 64, 128 or 256, up to ``geometry.I8_OUTL_MAX`` outlier channels without an exact
        tier or page contributions, any tier (Tier A over 8–64 bands, a multiple
        of 8), an exact tier on 16-token pages; with Tier B alone page contributions on 16-token
        pages up to d = 128), ``'f16'`` (``decode_stage1_f16``: fp16 stores), ``'v2'`` (``decode_stage1_v2``:
        INT8 pools) or ``'v1'`` (``decode_stage1``, which serves everything), and whether the PLAIN
        layout (INT8, Tier B or no certificate, no outlier channels, 32-channel groups, no exact
        tier, no page contributions) applies.

    Raises
    ------
    ValueError
        For an unknown ``requested`` or a forced kernel that does not serve the step.
    """
    if requested not in ("auto", "v1", "v2", "f16", "i8"):
        raise ValueError(f"stage1 must be 'auto', 'v1', 'v2', 'f16' or 'i8', got {requested!r}")
    # the staged-tile kernel serves INT8 pools at d = 128 (8-, 16- or 24-bit dither; in its general
    # layout an exact tier and, for a certified step, per-page contributions on pages of at most one
    # 32-token tile), default unroll (decode_v2.cu); the one-warp pipelined kernel (decode_f16.cu)
    # fp16 stores at d = 128 without an exact tier or page contributions; both carry the
    # evaluation term of SPEC §4.1 in their certificates
    layout_ok = head_dim == 128 and unroll == 0
    v2_ok = (not fp16_store and bits in (8, 16, 24) and layout_ok
             and (not page_outputs or (certified and page_size <= V2_TILE))
             and 128 // group_size <= 8 and group_size & (group_size - 1) == 0 and num_bands <= 64)
    plain = (not fp16_store and outlier_channels == 0 and group_size == V2_PLAIN_GROUP_SIZE and not tier & 1
             and not exact_tier and not page_outputs)
    f16_ok = fp16_store and layout_ok and not exact_tier and not page_outputs and num_bands <= 64
    # the form-(I) kernel (decode_i8.cuh): 8- or 16-bit dither, 32-channel groups, up to I8_OUTL_MAX outlier
    # channels (pairs) without the exact tier or page contributions; a
    # Tier-A term over 8–64 witness bands (multiples of 8); the exact tier on 16-token pages; with
    # Tier B alone page contributions of a certified step on 16-token pages up to d = 128 (over the
    # exact tier: the gate's steps)
    i8_pages = (certified and not tier & 1 and page_size == geo.I8_PAGE_SIZE
                and head_dim <= geo.I8_PAGES_MAX_D)
    i8_outl = outlier_channels == 0 or (outlier_channels <= geo.I8_OUTL_MAX and outlier_channels % 2 == 0
                                         and not exact_tier and not page_outputs)
    i8_ok = (not fp16_store and bits in C.FORM_I_DITHER_BITS and i8_outl and group_size == V2_PLAIN_GROUP_SIZE
             and unroll == 0 and head_dim in geo.I8_HEAD_DIMS and (not tier & 1 or num_bands in geo.I8_TIER_A_BANDS)
             and (not page_outputs or i8_pages) and (not exact_tier or page_size == geo.I8_PAGE_SIZE))
    if requested == "i8" and not i8_ok:
        raise ValueError("decode_stage1_i8 serves INT8 pools at 8- or 16-bit dither with 32-channel groups and d 64, 128 or "
                         f"256, up to {geo.I8_OUTL_MAX // 2} outlier pairs without an exact tier or page "
                         "contributions, a Tier-A term over 8 to 64 witness bands (a multiple of 8), "
                         "an exact tier on 16-token pages, and page contributions of Tier-B steps on 16-token "
                         "pages up to d=128")
    if requested == "v2" and not v2_ok:
        raise ValueError("decode_stage1_v2 serves d=128 INT8 pools, and page contributions only of certified "
                         "steps on pages of at most 32 tokens")
    if requested == "f16" and not f16_ok:
        raise ValueError("decode_stage1_f16 serves d=128 fp16 stores with no exact tier or page contributions")
    if requested != "auto":
        return requested, plain
    if f16_ok:
        return "f16", plain
    # at d = 128 without page contributions the staged tile serves too (PLAIN, or its general layout
    # with a Tier-A term): the measured rule; elsewhere form (I) (page contributions: the staged
    # tile's general layout or the general kernel, both slower in every measured shape,
    # docs/performance.md)
    if i8_ok and (not (v2_ok and not page_outputs)
                  or geo.i8_serves(G, pairs, tokens, exact_tier, bool(tier & 1), outliers=outlier_channels > 0,
                                  bits=bits)):
        return "i8", plain
    if v2_ok:
        return "v2", plain
    return "v1", plain


class DecodePlan:
    """One decode step on the GPU with every buffer allocated up front: :meth:`launch` only launches
    kernels (stage 1, the merge with the certificate, and telemetry), so it can be timed with events or
    captured in a CUDA graph.  It reads ``q`` and the page table from the arrays it was given when
    they are already contiguous of the launch dtype (float32, int32; ``q`` starting on a 16-byte
    boundary, :func:`launch_query`): refill those in place between launches or replays.
    ``kernel_name`` ('v1', 'v2', 'f16' or 'i8') and ``stage1_template`` (the instantiation, e.g.
    ``decode_stage1_v2<7, 8, true>``) say which stage-1 kernel it launches."""

    def __init__(self, dev, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, ns, unroll=0,
                 max_pages=0, telemetry=None, stage1="auto", budget=None):
        import cupy as cp

        p = dev.pool
        self.dev, self.cert, self.layer = dev, cert, layer
        self.telemetry, self.max_pages = telemetry, max_pages
        self._tel_done = None  # (event, recorded under capture) of this plan's last telemetry launch
        B, Hq, d = q.shape
        self.shape = (B, Hq, d)
        self.q = launch_query(q)
        self.ip = cp.ascontiguousarray(kv_indptr, dtype=cp.int32)
        self.ix = cp.ascontiguousarray(kv_indices, dtype=cp.int32)
        self.ll = cp.ascontiguousarray(kv_last_page_len, dtype=cp.int32)
        self.o = cp.empty((B, Hq, d), cp.float32)
        self.lse = cp.empty((B, Hq), cp.float32)
        self.log_a = cp.empty((B, Hq), cp.float32)
        self.cmax = cp.empty((B, Hq), cp.float32)
        self.gam = cp.empty((B, Hq), cp.float32)
        data, scales, outl, wit, bypass, (gs, k0, k1, bits, _) = dev.store(layer)
        g0 = cert_mod.f32_up(cert_mod.underflow_term(d, sm_scale))
        G = Hq // p.num_kv_heads
        logb = cert_mod.log_budget(cert, Hq, p.num_layers) if cert is not None else np.float32(0)
        P = max(0, int(max_pages))
        tokens = self.ix.shape[0] * p.page_size // max(1, B)  # the mean request's, at most
        stage1, plain = select_stage1(
            fp16_store=dev.fp16_store, bits=bits, head_dim=d, exact_tier=p.tier_map_dev is not None,
            page_outputs=P > 0, unroll=unroll, group_size=gs, num_bands=dev.num_bands,
            outlier_channels=bypass.shape[-1], tier=cert_mod.tier_code(cert), certified=cert is not None,
            page_size=p.page_size, G=G, pairs=B * p.num_kv_heads, tokens=tokens, requested=stage1)
        self.kernel_name = stage1
        sides = False  # decode_stage1_v2's PLAIN layout with the warps on the sides (below)
        split = False  # ... or on each row's channels
        npipe = f16_pipes() if stage1 == "f16" else 1  # splits per CTA
        self.block1 = {"v2": V2_THREADS, "f16": 32 * npipe, "i8": geo.i8_threads(d)}.get(stage1, 128)
        self.smem1 = 0  # dynamic shared memory of stage 1
        if stage1 == "f16":  # the certified instantiation keeps λ's sums; the other has none
            self.stage1_template = f"decode_stage1_f16<{G}, {_cpp_bool(cert is not None)}>"
            self.stage1 = kernel("decode_f16.cu", None, self.stage1_template)
            self.smem1 = f16_smem_bytes(G, dev.num_bands, cert_mod.tier_code(cert) & 1)
        elif stage1 == "i8":  # (head dim, G, tier code, page contributions, exact tier, outlier pairs); a
            # file per head dim
            exact, tc, np2 = p.tier_map_dev is not None, cert_mod.tier_code(cert), bypass.shape[-1]
            self.stage1_template = (f"decode_stage1_i8<{d}, {G}, {tc}, {_cpp_bool(P > 0)}, {_cpp_bool(exact)}, "
                                    f"{_cpp_bool(np2 > 0)}, {bits}>")
            self.stage1 = kernel(f"decode_i8_d{d}.cu", None, self.stage1_template)
            self.smem1 = geo.i8_smem_bytes(d, exact, dev.num_bands if tc & 1 else 0, np2, bits, G)
        elif stage1 == "v2":  # the second template argument: dither bits
            # the third: the default layout as constants (no outlier channels, 32-channel groups, no
            # Tier-A term; decode_v2.cu), the same results in less code
            # (the channel split, a fourth argument, by the batch: geo.V2_SPLIT_MIN_PAIRS; below it by G and
            # the tiles per split once the split count is known, geo.V2_SPLIT_MIN_G)
            layout = ("true" if B * p.num_kv_heads >= geo.V2_SPLIT_MIN_PAIRS else "true, false") if plain else "false"
            sides, split = layout == "true, false", layout == "true"
            self.stage1_template = f"decode_stage1_v2<{G}, {bits}, {layout}>"
            self.stage1 = kernel("decode_v2.cu", None, self.stage1_template)
        else:
            self.stage1_template = f"decode_stage1<{d}, {G}, {_cpp_bool(dev.fp16_store)}, {unroll}>"
            self.stage1 = kernel("decode.cu", None, self.stage1_template)
        if self.smem1 > self.stage1.max_dynamic_shared_size_bytes:  # (beyond 48 KB: opt in)
            self.stage1.max_dynamic_shared_size_bytes = self.smem1
        # the default split count: one wave of this kernel's resident CTAs (the one-warp fp16 kernel:
        # up to 128 splits of at least 64 tokens, the mean request's length from the table's shape;
        # the INT8 kernel: beyond 64 splits at small batch, v2_num_splits)
        if not ns:
            resident = _resident_ctas(self.stage1, self.block1, self.smem1)
            if stage1 == "f16":  # a whole number of CTAs' pipelines where there are several
                ns = dev.default_num_splits(B, resident * npipe, max_splits=128, tokens=tokens)
                ns = ns - ns % npipe if ns >= npipe else ns
            elif stage1 == "v2":
                ns = dev.v2_num_splits(B, resident, tokens)
            elif stage1 == "i8":  # one wave of its CTAs, splits of whole tiles
                ns = dev.i8_num_splits(B, resident, tokens)
            else:
                ns = dev.default_num_splits(B, resident)
        # geo.V2_SPLIT_MIN_G needs the split count, which the sides' residency chose; the split keeps it
        # (as measured)
        if stage1 == "v2" and sides and G >= geo.V2_SPLIT_MIN_G and tokens <= V2_TILE * ns:
            self.stage1_template = f"decode_stage1_v2<{G}, {bits}, true>"
            self.stage1 = kernel("decode_v2.cu", None, self.stage1_template)
            sides, split = False, True
        self.ns = ns
        # the certificate's per-launch constants (SPEC §4.1: the kernel's own evaluation term, for the
        # summation order of the instantiation chosen above)
        self.dot_order = geo.stage1_dot_order(stage1, d, G, split=split, plain=stage1 == "v2" and plain)
        if stage1 == "i8":  # exact integer products: β, and the form-(I) term formed in the kernel
            beta, gpb, gex = cert_mod.form_i_scalars(d, sm_scale, bits, outlier_channels=np2, exact_tier=exact)
        else:
            beta, gpb, gex = cert_mod.kernel_scalars(cert_mod.sum_height(d, *self.dot_order), sm_scale,
                                                     None if dev.fp16_store else bits)
        self.o_part = cp.empty((B, Hq, ns, d), cp.float32)
        self.lse_part = cp.empty((B, Hq, ns), cp.float32)
        self.lam_part = cp.empty((B, Hq, ns), cp.float32)
        self.cmax_part = cp.empty((B, Hq, ns), cp.float32)
        self.gam_part = cp.empty((B, Hq, ns), cp.float32)
        self.grid1 = (-(-ns // npipe), p.num_kv_heads, B)
        # per-page (lse_j, λ_j) of a step that asks for page contributions (SPEC §6)
        self.page_lse = cp.full((B, Hq, max(P, 1)), -cp.inf, cp.float32)
        self.page_lam = cp.full((B, Hq, max(P, 1)), -cp.inf, cp.float32)
        # an fp16 store's stored K row norms (its evaluation term's norm form), or a null pointer
        knorm = p.k_norm if dev.fp16_store and p.k_norm.size else np.uint64(0)
        stored = (self.q, data, scales, outl, wit)  # (the general kernel takes knorm after these)
        tail = (bypass, dev.band_ch, self.ip, self.ix, self.ll, self.o_part, self.lse_part, self.lam_part,
                self.cmax_part, self.gam_part)
        if self.kernel_name == "f16":
            self.args1 = (self.q, data, wit, knorm, dev.band_ch, self.ip, self.ix, self.ll, self.o_part, self.lse_part,
                          self.lam_part, self.cmax_part, self.gam_part, np.int64(p.num_slots), _i32(p.num_kv_heads),
                          _i32(layer), _i32(dev.num_bands), _i32(int(math.log2(p.page_size))), _i32(p.num_pages),
                          _i32(self.ix.shape[0]), _i32(ns), _i32(cert_mod.tier_code(cert)), np.float32(sm_scale),
                          np.float32(gex))
        elif self.kernel_name == "i8":
            pages = (self.page_lse, self.page_lam) if P > 0 else (np.uint64(0), np.uint64(0))
            tier, tier_dims = self._exact_tier(layer)
            self.args1 = (self.q, data, scales, self.ip, self.ix, self.ll, self.o_part, self.lse_part, self.lam_part,
                          self.cmax_part, self.gam_part, *pages, *tier, wit, dev.band_ch, np.int64(p.num_slots),
                          _i32(p.num_kv_heads), _i32(layer), _i32(p.kv_head_offset), _i32(int(math.log2(p.page_size))),
                          _i32(p.num_pages), _i32(self.ix.shape[0]), _i32(ns), _i32(P), *tier_dims,
                          _i32(dev.num_bands), np.uint32(k0), np.uint32(k1),
                          np.float32(sm_scale), np.float32(logb), np.float32(beta),
                          cert_mod.form_i_gamma(np2 > 0), np.float32(gex), outl, bypass, _i32(np2))
        elif self.kernel_name == "v2":
            tier, tier_dims = self._exact_tier(layer)
            pages = (self.page_lse, self.page_lam) if P > 0 else (np.uint64(0), np.uint64(0))
            self.args1 = (*stored, *tail, *tier, *pages, np.int64(p.num_slots), _i32(p.num_kv_heads), _i32(layer),
                          _i32(p.kv_head_offset), _i32(gs.bit_length() - 1), _i32(bypass.shape[-1]), _i32(dev.num_bands),
                          _i32(int(math.log2(p.page_size))), _i32(p.num_pages), _i32(self.ix.shape[0]), _i32(ns),
                          _i32(cert_mod.tier_code(cert)), *tier_dims, _i32(P), np.uint32(k0), np.uint32(k1),
                          np.float32(sm_scale), np.float32(logb), np.float32(beta), np.float32(gpb), np.float32(gex))
        else:
            tier, tier_dims = self._exact_tier(layer)
            self.args1 = (*stored, knorm, *tail, *tier, self.page_lse, self.page_lam, np.int64(p.num_slots), _i32(B),
                          _i32(p.num_kv_heads), _i32(layer), _i32(gs), _i32(bypass.shape[-1]), _i32(dev.num_bands),
                          _i32(int(math.log2(p.page_size))), _i32(p.num_pages), _i32(self.ix.shape[0]), _i32(ns),
                          _i32(cert_mod.tier_code(cert)), _i32(bits), *tier_dims, _i32(P > 0), _i32(P),
                          _i32(p.kv_head_offset), np.uint32(k0), np.uint32(k1), np.float32(sm_scale),
                          np.float32(logb), np.float32(beta), np.float32(gpb), np.float32(gex))
        self.risk = cp.empty((B, Hq), cp.float64)
        self.tv_bound = cp.empty((B, Hq), cp.float64)
        # the merge certifies each cell in the same launch when the step is certified
        cert_out = (self.risk, self.tv_bound) if cert is not None else (None, None)
        self._stage1 = Launcher(self.stage1, self.grid1, (self.block1,), self.args1, self.smem1, pdl=_pdl())
        # (the merge also spends the request budget of each cell it certifies)
        self.merge = bind_merge(self.o_part, self.lse_part, self.lam_part, self.cmax_part, self.gam_part, self.o,
                                self.lse, self.log_a, self.cmax, self.gam, g0, *cert_out, budget=budget)

    def _exact_tier(self, layer):
        """The exact tier's launch arguments for ``layer`` (SPEC §7): (map, K rows, V rows) and (map
        stride, capacity), or null pointers and zeros for a pool without one."""
        import cupy as cp

        p = self.dev.pool
        if p.tier_map_dev is None:
            null = np.uint64(0)
            return (null, null, null), (_i32(0), _i32(0))
        return ((p.tier_map_dev[layer], p.tier_k.view(cp.uint16), p.tier_v.view(cp.uint16)),
                (_i32(p.num_pages + 1), _i32(p.exact_tier_pages)))

    def launch(self):
        """Launch the step's kernels on the current stream (no allocation, no host read)."""
        B, Hq, d = self.shape
        if B == 0:
            return
        self._stage1()
        if self.cert is None or self.telemetry is None:
            self.merge()  # (and the certificate and its budget, when certified)
            return
        import cupy as cp

        main = cp.cuda.get_current_stream()
        # which capture (or None: eager) this launch belongs to
        epoch = capture_epoch() if main.is_capturing() else None
        # this plan's previous telemetry launch must have read the risks before the merge rewrites
        # them (an event of the same capture, or of eager work; never one across two)
        if self._tel_done is not None and self._tel_done[1] == epoch:
            main.wait_event(self._tel_done[0])
        self.merge()
        self.telemetry._record_forked(self.layer, self.risk, self.dev.pool.num_kv_heads)
        self._tel_done = (self.telemetry._last, epoch)

    def result(self):
        import cupy as cp

        if self.cert is None:
            return DecodeResult(self.o, self.lse, num_splits=self.ns, dot_order=self.dot_order)
        contrib = None
        if self.max_pages > 0:
            contrib = cert_mod.page_contributions(self.page_lse, self.page_lam, self.lse, cp)
        return DecodeResult(self.o, self.lse, self.log_a, self.risk, self.tv_bound, self.cmax, num_splits=self.ns,
                            page_contrib=contrib, gamma=self.gam, dot_order=self.dot_order)
