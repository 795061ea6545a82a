"""Paged K/V storage: :class:`KVPool` (dithered INT8, the product) and :class:`Fp16Pool` (stored
fp16 values with an optional Tier-A witness: an fp16 cache, or a black-box scheme's output).

Both share the page geometry, argument checks, byte accounting and the exact host backing store
(:class:`PagedPool`)."""

from __future__ import annotations

import numpy as np

from . import _contract as C
from .arrays import backend_of, check_float, check_int, check_range, to_cupy, to_numpy
from .budget import DEFAULT_MAX_REQUESTS, StepLedger
from .config import QuantConfig, _bool_arg, _int_arg, band_channels
from .write import check_layer_side, to_fp16_bits


def cuda_available() -> bool:
    try:
        import cupy as cp

        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no cupy, no driver or no device all mean "no GPU"
        return False


class PagedPool:
    """Page geometry, backend, the exact fp16 backing store and write-argument checks.

    ``num_slots = num_pages * page_size``; slot ``page * page_size + offset``.  Storage arrays are
    ``[L, 2, Hkv, num_slots, *]`` with side 0 = K, 1 = V.  ``exact`` (host, fp16, same layout with
    ``d`` channels) exists when ``keep_exact``.
    """

    def __init__(self, num_layers, num_kv_heads, head_dim, num_pages, page_size, *, backend="auto",
                 keep_exact=False, exact_tier_pages=0, kv_head_offset=0, max_requests=DEFAULT_MAX_REQUESTS):
        self.num_layers = _int_arg("num_layers", num_layers, lo=1, hi=C.MAX_LAYER)
        self.num_kv_heads = _int_arg("num_kv_heads", num_kv_heads, lo=1, hi=C.MAX_KV_HEAD)
        # first kv head of this pool in the model (a tensor-parallel shard); keys the dither stream
        self.kv_head_offset = _int_arg("kv_head_offset", kv_head_offset, lo=0, hi=C.MAX_KV_HEAD - self.num_kv_heads)
        self.head_dim = _int_arg("head_dim", head_dim, lo=2)
        self.page_size = _int_arg("page_size", page_size, lo=1, hi=128)
        if self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size must be a power of two, got {self.page_size}")
        self.num_pages = _int_arg("num_pages", num_pages, lo=1)
        if self.num_pages * self.page_size > C.MAX_SLOTS:
            raise ValueError(f"num_pages * page_size must be <= 2**32 (slot ids are 32-bit), got "
                             f"{self.num_pages * self.page_size}")
        if backend not in ("auto", "cpu", "cuda"):
            raise ValueError(f"backend must be 'auto', 'cpu' or 'cuda', got {backend!r}")
        if backend == "auto":
            backend = "cuda" if cuda_available() else "cpu"
        if backend == "cuda" and not cuda_available():
            raise ValueError("backend='cuda' needs CuPy and a CUDA device")
        self.backend = backend
        # certified units spent by each request (spec §4.4), on the pool's device
        self.ledger = StepLedger(max_requests, self.xp)
        self.keep_exact = _bool_arg("keep_exact", keep_exact)
        shape = (self.num_layers, 2, self.num_kv_heads, self.num_slots, self.head_dim)
        self.exact = np.zeros(shape, np.float16) if self.keep_exact else None
        # rows (token, kv head, side) written with a NaN/inf: readable without a per-step host sync
        self.nonfinite_writes = self.xp.zeros(1, self.xp.int64)
        cap = _int_arg("exact_tier_pages", exact_tier_pages, lo=0)
        if cap and not self.keep_exact:
            raise ValueError("exact_tier_pages needs keep_exact=True (the tier is filled from the backing store)")
        self.exact_tier_pages = cap
        # tier entry of (layer, kv head, page), -1 when the page is served from the store.  The host
        # map owns allocation; on the GPU the kernels read a device copy whose rows have one more
        # column than pages (a sink), and rewrites evict on the device (no sync): the host map is
        # reconciled from it before its next use (:meth:`_tier_reconcile`).
        self._tier_map = np.full((self.num_layers, self.num_kv_heads, self.num_pages), -1, np.int32) if cap else None
        xp = self.xp
        self.tier_k = xp.zeros((max(cap, 1), self.page_size, self.head_dim), xp.float16)
        self.tier_v = xp.zeros_like(self.tier_k)
        self._tier_free = list(range(cap - 1, -1, -1))
        self._tier_dirty = False
        self.tier_map_dev = None
        if cap and self.backend == "cuda":
            self.tier_map_dev = xp.full((self.num_layers, self.num_kv_heads, self.num_pages + 1), -1, xp.int32)

    # ------------------------------------------------------------------ exact tier (SPEC §7)
    @property
    def page_in_bytes(self) -> int:
        """Bytes one page-in moves: exact fp16 K and V of one (layer, kv head, page)."""
        return 2 * self.page_size * self.head_dim * 2

    @property
    def tier_map(self):
        """int32 ``[L, Hkv, num_pages]`` (host): tier entry of each (layer, kv head, page), or -1;
        None without a tier.  On the GPU, reading it synchronises once after a write."""
        self._tier_reconcile()
        return self._tier_map

    @property
    def tier_free(self) -> int:
        self._tier_reconcile()
        return len(self._tier_free)

    def is_exact(self, layer, kv_head, page) -> bool:
        tm = self.tier_map
        return tm is not None and tm[layer, kv_head, page] >= 0

    def page_in(self, layer, kv_head, page) -> int:
        """Serve page ``page`` of ``(layer, kv_head)`` exactly from now on; returns the bytes moved
        (0 if it was already exact).  Raises RuntimeError when the tier is full.  On the GPU the copy
        from the (mapped) backing store is ordered on the current stream after earlier writes."""
        tm = self.tier_map
        if tm is None:
            raise ValueError("this pool has no exact tier (exact_tier_pages=0)")
        # every argument checked before anything changes (a bad call must not consume a tier slot)
        layer = _int_arg("layer", layer, lo=0, hi=self.num_layers - 1)
        kv_head = _int_arg("kv_head", kv_head, lo=0, hi=self.num_kv_heads - 1)
        page = _int_arg("page", page, lo=0, hi=self.num_pages - 1)
        if tm[layer, kv_head, page] >= 0:
            return 0
        if not self._tier_free:
            raise RuntimeError("the exact tier is full")
        e = self._tier_free.pop()
        rows = slice(page * self.page_size, (page + 1) * self.page_size)
        if self.backend == "cuda":
            self._dev.page_in(e, self.exact[layer, 0, kv_head, rows], self.exact[layer, 1, kv_head, rows])
            self.tier_map_dev[layer, kv_head, page] = e
        else:
            self.tier_k[e] = self.exact[layer, 0, kv_head, rows]
            self.tier_v[e] = self.exact[layer, 1, kv_head, rows]
        tm[layer, kv_head, page] = e
        return self.page_in_bytes

    def _evict(self, layer, s64):
        """A rewritten slot makes its page's exact copy stale: back to quantized storage."""
        if self._tier_map is None:
            return
        if self.backend == "cuda":  # s64: device slots; the host map catches up in _tier_reconcile
            self._dev.evict(layer, s64)
            self._tier_dirty = True
            return
        for page in np.unique(s64 // self.page_size):
            for h in range(self.num_kv_heads):
                e = self._tier_map[layer, h, page]
                if e >= 0:
                    self._tier_map[layer, h, page] = -1
                    self._tier_free.append(int(e))

    def _tier_reconcile(self):
        """Free the entries the device evicted since the last reconciliation (one host read)."""
        if not self._tier_dirty:
            return
        self._tier_dirty = False
        dev = self.tier_map_dev[:, :, : self.num_pages].get()
        gone = (self._tier_map >= 0) & (dev < 0)
        self._tier_free.extend(int(e) for e in self._tier_map[gone])
        self._tier_map[gone] = -1

    @property
    def xp(self):
        if self.backend == "cuda":
            import cupy

            return cupy
        return np

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    def fp16_bytes_per_token(self) -> int:
        """What an fp16 KV cache of the same shape stores per token (all layers, heads, K and V)."""
        return self.num_layers * self.num_kv_heads * 2 * 2 * self.head_dim

    def bytes_per_token(self) -> int:
        """Stored bytes per token over all layers, KV heads and both sides (SPEC §3)."""
        return self.num_layers * self.num_kv_heads * 2 * self.bytes_per_token_side()

    def _storage(self):
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the cache (equals ``bytes_per_token() * num_slots``)."""
        return int(sum(a.nbytes for a in self._storage()))

    def _check_write(self, layer, slots, rows):
        """Validate a write on the host; returns ``(layer, slots int64, [host rows])``.

        Raises TypeError/ValueError/IndexError naming the argument; nothing is written before this
        returns.
        """
        layer, _ = check_layer_side(layer, "k", self.num_layers)
        be = backend_of(slots=slots, **rows)
        if be != self.backend:
            raise TypeError(f"{', '.join(['slots', *rows])} must be "
                            f"{'CUDA' if self.backend == 'cuda' else 'NumPy'} arrays for this {self.backend} pool")
        if be == "cuda":
            return layer, slots, rows
        s = to_numpy("slots", slots)
        check_int("slots", s)
        out, n = {}, None
        for name, x in rows.items():
            xh = to_numpy(name, x)
            check_float(name, xh, (n, self.num_kv_heads, self.head_dim))
            n = xh.shape[0]
            out[name] = xh
        if s.shape[0] != n:
            raise ValueError(f"slots must have shape [{n}] (one per row of k), got {list(s.shape)}")
        check_range("slots", s, 0, self.num_slots)
        if np.unique(s).size != n:
            raise ValueError("slots must be distinct within one write")
        return layer, s.astype(np.int64), out

    def _keep(self, layer, side, s64, bits16):
        if self.keep_exact:
            self.exact[layer, side][:, s64, :] = bits16.view(np.float16).transpose(1, 0, 2)

    def exact_rows(self, layer, slots, side):
        """The fp16 rows as written (``[n, Hkv, d]``, host), from the backing store."""
        if not self.keep_exact:
            raise ValueError("this pool was built with keep_exact=False: it has no backing store")
        layer, side_id = check_layer_side(layer, side, self.num_layers)
        if self.backend == "cuda":  # the kernels write the backing store through mapped memory
            import cupy

            cupy.cuda.Device().synchronize()
        s = np.asarray(to_numpy("slots", slots) if backend_of(slots=slots) == "cpu"
                       else to_cupy(slots).get())
        check_int("slots", s)
        check_range("slots", s, 0, self.num_slots)
        return np.ascontiguousarray(self.exact[layer, side_id][:, s, :].transpose(1, 0, 2))

    def __repr__(self):
        return (f"{type(self).__name__}(L={self.num_layers}, Hkv={self.num_kv_heads}, d={self.head_dim}, "
                f"pages={self.num_pages}x{self.page_size}, backend={self.backend!r}, "
                f"{self.bytes_per_token()} B/token vs fp16 {self.fp16_bytes_per_token()})")


class KVPool(PagedPool):
    """A paged INT8 KV cache with per-group fp16 scales, exact outlier pairs and optional witness.

    Storage (per layer ``l``, side ``s`` in {0: K, 1: V}, kv head ``h``, slot ``t``), all on the
    backend's device:

    - ``codes``    int8    ``[L, 2, Hkv, num_slots, d]``
    - ``scales``   float16 ``[L, 2, Hkv, num_slots, d / group_size]``
    - ``outliers`` float16 ``[L, 2, Hkv, num_slots, 2 * n_pairs]``
    - ``witness``  float16 ``[L, 2, Hkv, num_slots, witness_bands]``
    - ``exact``    float16 ``[L, 2, Hkv, num_slots, d]`` in host memory, when ``keep_exact``

    The slot id keys the dither stream (SPEC §2).

    Parameters
    ----------
    num_layers, num_kv_heads, head_dim, num_pages, page_size : int
        ``head_dim`` must equal ``config.head_dim``; ``page_size`` is a power of two <= 128.
    config : QuantConfig
    backend : {'auto', 'cpu', 'cuda'}
        ``'auto'`` picks ``'cuda'`` when CuPy sees a GPU.
    keep_exact : bool
        Keep the fp16 rows in a host backing store (the gate pages them back in).
    kv_head_offset : int
        This pool's first kv head in the model (a tensor-parallel shard holding heads
        ``[offset, offset + num_kv_heads)``).  The dither stream is keyed by the model's kv head, so a
        shard stores exactly what a single pool of every head stores; a per-head ``outlier_pairs``
        table may cover the whole model.
    exact_tier_pages : int
        Capacity of the exact fp16 tier, in (layer, kv head, page) entries (SPEC §7).  A repaired
        page is served from it exactly (``c_t = 0``) until one of its slots is rewritten.  Needs
        ``keep_exact``.  On the GPU the tier lives in device memory and decode reads it in the same
        pass (a device-side map; page-ins are stream-ordered copies from the mapped backing store).
    max_requests : int
        Rows of the pool's request ledger (:attr:`ledger`, spec §4.4): the request ids a certified
        decode may charge.  ``pool.ledger.reset(ids)`` starts new requests on those ids.
    """

    def __init__(self, num_layers, num_kv_heads, head_dim, num_pages, page_size, config, *,
                 backend="auto", keep_exact=False, exact_tier_pages=0, kv_head_offset=0,
                 max_requests=DEFAULT_MAX_REQUESTS):
        if not isinstance(config, QuantConfig):
            raise TypeError(f"config must be a QuantConfig, got {type(config).__name__}")
        super().__init__(num_layers, num_kv_heads, head_dim, num_pages, page_size, backend=backend,
                         keep_exact=keep_exact, exact_tier_pages=exact_tier_pages, kv_head_offset=kv_head_offset,
                         max_requests=max_requests)
        if self.head_dim != config.head_dim:
            raise ValueError(f"head_dim ({self.head_dim}) must equal config.head_dim ({config.head_dim})")
        self.config = config
        # validates outlier_pairs against (L, Hkv) now rather than at the first write; a shard
        # takes its heads' rows of a model-wide [L, Hkv_total, n_pairs] table
        o, H = self.kv_head_offset, self.num_kv_heads
        total = o + H if config.outlier_pairs is None or o == 0 and config.outlier_pairs.shape[1] == H \
            else config.outlier_pairs.shape[1]
        if o + H > total:
            raise ValueError(f"kv heads [{o}, {o + H}) lie outside outlier_pairs' {total} kv heads")
        self.bypass_ch = np.ascontiguousarray(config.bypass_channels(self.num_layers, total)[:, o:o + H])
        self.band_ch = config.band_channels()
        xp = self.xp
        L, H, N, d = self.num_layers, self.num_kv_heads, self.num_slots, self.head_dim
        self.codes = xp.zeros((L, 2, H, N, d), xp.int8)
        self.scales = xp.zeros((L, 2, H, N, config.num_groups), xp.float16)
        self.outliers = xp.zeros((L, 2, H, N, 2 * config.n_pairs), xp.float16)
        self.witness = xp.zeros((L, 2, H, N, config.witness_bands), xp.float16)
        if self.backend == "cuda":
            from . import _cuda

            self._dev = _cuda.PoolDevice(self)

    def bytes_per_token_side(self) -> int:
        return self.config.bytes_per_token_side()

    def _storage(self):
        return self.codes, self.scales, self.outliers, self.witness

    def write(self, layer, slots, k, v):
        """Quantize and store K and V rows of one layer at ``slots``.

        Parameters
        ----------
        layer : int
        slots : int array ``[n]``, distinct, each in ``[0, num_slots)``
        k, v : float arrays ``[n, Hkv, d]`` (rounded to fp16 on entry), on the pool's device

        Nothing is written if any argument is invalid.  On the GPU (no host synchronisation) rows
        whose slot is out of range are dropped and counted in ``_dev.bad_slot_writes``.
        """
        layer, s64, rows = self._check_write(layer, slots, {"k": k, "v": v})
        if self.backend == "cuda":
            self._dev.write(layer, to_cupy(slots), to_cupy(k), to_cupy(v))
            self._evict(layer, to_cupy(slots))
            return
        from ._cpu.write import write_rows

        cfg = self.config
        k0, k1 = cfg.seed_words
        n = s64.shape[0]
        zeros = np.zeros(n, np.int64)
        poisoned = np.zeros((n, self.num_kv_heads), np.uint8)
        for side, name in ((0, "k"), (1, "v")):
            bits16 = to_fp16_bits(name, rows[name])
            write_rows(bits16, s64, s64, zeros, side, layer, self.kv_head_offset, k0, k1, cfg.dither_bits,
                       cfg.group_size,
                       self.bypass_ch[layer], self.band_ch, self.codes[layer, side],
                       self.scales[layer, side].view(np.uint16),
                       self.outliers[layer, side].view(np.uint16),
                       self.witness[layer, side].view(np.uint16), poisoned)
            self._keep(layer, side, s64, bits16)
            self.nonfinite_writes[0] += int(poisoned.sum())  # rows of this side
            poisoned[:] = 0
        self._evict(layer, s64)

    def dequantized(self, layer, slots, side):
        """Reconstructed rows ``x̂`` (float32 ``[n, Hkv, d]``) at ``slots`` — what decode reads."""
        layer, side_id = check_layer_side(layer, side, self.num_layers)
        if self.backend == "cuda":
            return self._dev.dequantized(layer, to_cupy(slots), side_id)
        s = to_numpy("slots", slots)
        check_int("slots", s)
        check_range("slots", s, 0, self.num_slots)
        from ._cpu.write import dequant_rows

        cfg = self.config
        k0, k1 = cfg.seed_words
        out = np.empty((s.shape[0], self.num_kv_heads, self.head_dim), np.float32)
        s64 = s.astype(np.int64)
        dequant_rows(self.codes[layer, side_id], self.scales[layer, side_id].view(np.uint16),
                     self.outliers[layer, side_id].view(np.uint16), s64, s64,
                     np.zeros(s.shape[0], np.int64), side_id, layer, self.kv_head_offset, k0, k1, cfg.dither_bits,
                     cfg.group_size, self.bypass_ch[layer], out)
        return out


class Fp16Pool(PagedPool):
    """A paged cache of stored fp16 values with an optional Tier-A witness (SPEC §3, black boxes).

    With no witness it is a plain fp16 KV cache (our own fp16 decode baseline).  With
    ``witness_bands > 0`` each write may pass what a compression scheme reconstructs
    (``k_stored``/``v_stored``); the pool stores it and the witness ``||stored − exact||`` per RoPE
    band, and :func:`~witcert_cupy.decode_attention` meters it with Tier A and the tanh bound.

    Storage: ``values`` float16 ``[L, 2, Hkv, num_slots, d]``, ``witness`` float16
    ``[L, 2, Hkv, num_slots, witness_bands]``, ``k_norm`` float32 ``[L, Hkv, num_slots]`` with a
    witness (each stored K row's norm, rounded up: the evaluation term's norm form,
    docs/certificate.md §10.1; ``[L, Hkv, 0]`` without), ``exact`` (host, when ``keep_exact``).

    Parameters
    ----------
    num_layers, num_kv_heads, head_dim, num_pages, page_size : int
    witness_bands : int
        0 (no certificate) or a divisor of ``head_dim // 2``.
    rope : {'neox', 'gptj'}
        RoPE pair layout of the bands.
    backend, keep_exact, exact_tier_pages : as for :class:`KVPool`
    """

    def __init__(self, num_layers, num_kv_heads, head_dim, num_pages, page_size, *, witness_bands=0,
                 rope="neox", backend="auto", keep_exact=False, exact_tier_pages=0):
        super().__init__(num_layers, num_kv_heads, head_dim, num_pages, page_size, backend=backend,
                         keep_exact=keep_exact, exact_tier_pages=exact_tier_pages)
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even, got {self.head_dim}")
        self.witness_bands = _int_arg("witness_bands", witness_bands, lo=0)
        self.band_ch = band_channels(self.head_dim, self.witness_bands, rope)
        self.rope = rope
        xp = self.xp
        L, H, N, d = self.num_layers, self.num_kv_heads, self.num_slots, self.head_dim
        self.values = xp.zeros((L, 2, H, N, d), xp.float16)
        self.witness = xp.zeros((L, 2, H, N, self.witness_bands), xp.float16)
        self.k_norm = xp.zeros((L, H, N if self.witness_bands else 0), xp.float32)
        if self.backend == "cuda":
            from . import _cuda

            self._dev = _cuda.Fp16PoolDevice(self)

    def bytes_per_token_side(self) -> int:
        # (the K row's norm, 4 bytes, is half of each side's share)
        return 2 * self.head_dim + 2 * self.witness_bands + (2 if self.witness_bands else 0)

    def _storage(self):
        return self.values, self.witness, self.k_norm

    def write(self, layer, slots, k, v, *, k_stored=None, v_stored=None):
        """Store rows of one layer at ``slots``.

        Parameters
        ----------
        layer : int
        slots : int array ``[n]``, distinct, each in ``[0, num_slots)``
        k, v : float arrays ``[n, Hkv, d]``: the exact rows (rounded to fp16 on entry)
        k_stored, v_stored : float arrays ``[n, Hkv, d]`` or None
            What the cache should serve instead (a scheme's reconstruction, rounded to fp16);
            None stores the exact rows (witness 0).
        """
        rows = {"k": k, "v": v}
        if k_stored is not None:
            rows["k_stored"] = k_stored
        if v_stored is not None:
            rows["v_stored"] = v_stored
        layer, s64, rows = self._check_write(layer, slots, rows)
        if self.backend == "cuda":
            self._dev.write(layer, to_cupy(slots), {n: to_cupy(x) for n, x in rows.items()})
            self._evict(layer, to_cupy(slots))
            return
        from ._cpu.write import store_fp16_rows

        n = s64.shape[0]
        poisoned = np.zeros((n, self.num_kv_heads), np.uint8)
        for side, name in ((0, "k"), (1, "v")):
            exact = to_fp16_bits(name, rows[name])
            stored = to_fp16_bits(name + "_stored", rows[name + "_stored"]) if name + "_stored" in rows else exact
            norms = self.k_norm[layer] if side == 0 else np.zeros((self.num_kv_heads, 0), np.float32)
            store_fp16_rows(exact, stored, s64, self.band_ch, self.values[layer, side].view(np.uint16),
                            self.witness[layer, side].view(np.uint16), norms, poisoned)
            self._keep(layer, side, s64, exact)
            self.nonfinite_writes[0] += int(poisoned.sum())
            poisoned[:] = 0
        self._evict(layer, s64)

    def dequantized(self, layer, slots, side):
        """The stored rows as float32 ``[n, Hkv, d]`` — what decode reads."""
        layer, side_id = check_layer_side(layer, side, self.num_layers)
        xp = self.xp
        s = to_cupy(slots) if self.backend == "cuda" else to_numpy("slots", slots)
        check_int("slots", s)
        if self.backend == "cpu":
            check_range("slots", s, 0, self.num_slots)
        return xp.ascontiguousarray(self.values[layer, side_id][:, s, :].transpose(1, 0, 2)).astype(xp.float32)
