"""Builders shared by the tests: pools filled with known rows and CSR page tables; the benchmark
scripts loaded as modules."""

import contextlib
import importlib.util
from pathlib import Path

import numpy as np

import witcert_cupy as wc
from witcert_cupy.decode import check_page_table


def contiguous_table(lengths, page_size, base_slots=None):
    """CSR page table for requests of ``lengths`` whose tokens sit at consecutive slots.

    Request ``b`` occupies slots ``[base_slots[b], base_slots[b] + lengths[b])``; each base is a
    multiple of 128, so the same tokens land at the same slots for every page size <= 128.
    Returns ``(indptr, indices, last, slots_per_request, num_pages)``.
    """
    if base_slots is None:
        base_slots, acc = [], 0
        for n in lengths:
            base_slots.append(acc)
            acc += -(-max(n, 1) // 128) * 128
    indptr, indices, last, slots = [0], [], [], []
    for n, base in zip(lengths, base_slots):
        npg = -(-n // page_size)
        first = base // page_size
        indices.extend(range(first, first + npg))
        indptr.append(len(indices))
        last.append(n - (npg - 1) * page_size if npg else 0)
        slots.append(np.arange(base, base + n, dtype=np.int64))
    total = max(b + -(-max(n, 1) // 128) * 128 for n, b in zip(lengths, base_slots))
    return (np.array(indptr, np.int32), np.array(indices, np.int32), np.array(last, np.int32), slots,
            -(-total // page_size))


def random_rows(rng, n, H, d, *, heavy=True, massive=None):
    """float32 K/V-like rows ``[n, H, d]``: Gaussian with log-normal token norms, optional massive channels."""
    x = rng.standard_normal((n, H, d))
    if heavy:
        x *= rng.lognormal(0.0, 0.5, size=(n, H, 1))
    if massive is not None:
        for ch, amp in massive:
            x[:, :, ch] *= amp
    return x.astype(np.float32)


def filled_pool(rng, *, lengths, H=2, d=128, page_size=16, cfg=None, L=1, layer=0, massive=None,
                backend="cpu", exact_tier_pages=0):
    """A pool holding random rows for requests of ``lengths`` at contiguous slots (and an exact tier
    of ``exact_tier_pages`` pages, none paged in).

    Returns ``(pool, table, k, v)`` with ``table = (indptr, indices, last, slots)`` and ``k/v`` the
    per-request float32 rows that were written.
    """
    cfg = cfg or wc.QuantConfig(d)
    indptr, indices, last, slots, npages = contiguous_table(lengths, page_size)
    pool = wc.KVPool(L, H, d, npages, page_size, cfg, keep_exact=True, backend=backend,
                     exact_tier_pages=exact_tier_pages)
    ks, vs = [], []
    xp = pool.xp
    for s in slots:
        k = random_rows(rng, len(s), H, d, massive=massive)
        v = random_rows(rng, len(s), H, d)
        if len(s):
            pool.write(layer, xp.asarray(s), xp.asarray(k), xp.asarray(v))
        ks.append(k)
        vs.append(v)
    return pool, (indptr, indices, last, slots), ks, vs


def on_device(pool, table):
    """The page table as arrays of the pool's backend."""
    indptr, indices, last, slots = table
    xp = pool.xp
    return xp.asarray(indptr), xp.asarray(indices), xp.asarray(last)


def page_table(pool, table):
    indptr, indices, last, _ = table
    return check_page_table(indptr, indices, last, batch=len(last), num_pages=pool.num_pages,
                            page_size=pool.page_size)


def paged_table(page_lists, lengths, page_size):
    """CSR page table (``indptr, indices, last``, int32) of requests holding ``lengths`` tokens on
    the pages of ``page_lists`` (each list long enough)."""
    npg = [-(-n // page_size) for n in lengths]
    indptr = np.concatenate([[0], np.cumsum(npg)]).astype(np.int32)
    indices = np.concatenate([np.asarray(pl)[:k] for pl, k in zip(page_lists, npg)]).astype(np.int32)
    last = np.array([n - (k - 1) * page_size for n, k in zip(lengths, npg)], np.int32)
    return indptr, indices, last


def page_slots(pages, lo, hi, page_size):
    """Slots of sequence positions ``lo..hi-1`` of a request laid out on ``pages``."""
    s = (np.asarray(pages)[:, None] * page_size + np.arange(page_size)).reshape(-1)
    return s[lo:hi]


def overflowing_query_group_case(backend, H=2, G=4, d=128, lengths=(40, 300), page_size=16):
    """A pool whose K rows are zero on channels 0..31 (scale group 0, so its scale is 0 for every
    token) and queries whose entries there are 2e19 (so Σq² over the group overflows fp32): Tier B's
    u² then meets 0·inf = NaN, while the logits stay finite.  Returns ``(pool, table, q)``."""
    rng = np.random.default_rng(11)
    indptr, indices, last, slots, npages = contiguous_table(list(lengths), page_size)
    pool = wc.KVPool(1, H, d, npages, page_size, wc.QuantConfig(d, seed=3), keep_exact=True, backend=backend)
    xp = pool.xp
    for s in slots:
        k = random_rows(rng, len(s), H, d)
        k[:, :, :32] = 0.0
        pool.write(0, xp.asarray(s), xp.asarray(k), xp.asarray(random_rows(rng, len(s), H, d)))
    q = rng.standard_normal((len(lengths), H * G, d)).astype(np.float32)
    q[:, :, :32] = 2e19
    return pool, (indptr, indices, last, slots), q


def mid_vector(a):
    """A contiguous float32 CuPy copy of ``a`` that starts 4 bytes past a 16-byte boundary (a view
    into a larger buffer, as a caller's slice would be)."""
    import cupy as cp

    buf = cp.zeros(a.size + 4, cp.float32)
    buf[1:1 + a.size] = cp.asarray(a, dtype=cp.float32).ravel()
    view = buf[1:1 + a.size].reshape(a.shape)
    assert view.flags.c_contiguous and view.data.ptr % 16 == 4
    return view


@contextlib.contextmanager
def cpu_dot_order(order):
    """The CPU backend run in summation order ``order`` (a GPU result's ``dot_order``; None: its
    own), its evaluation term computed for that order's height, so that a test holds the two
    backends to each other as SPEC §9 asks (the reference in the kernel's form): ``o`` by the same
    rounding structure, the certificate value for value (docs/certificate.md §10.1)."""
    from witcert_cupy._cpu import decode as cpu

    own = cpu.DOT_ORDER
    if order is not None:
        cpu.DOT_ORDER = tuple(order)
    try:
        yield
    finally:
        cpu.DOT_ORDER = own


def stage1_results(pool, q, tables, sm_scale, cert, num_splits, kernels=("v1", "v2")):
    """One GPU decode step per stage-1 kernel named (``DecodePlan``'s forced choice) on the same
    inputs: ``{kernel: DecodeResult}``.  ``q`` and ``tables`` (indptr, indices, last) on the device."""
    out = {}
    for k in kernels:
        plan = pool._dev.plan(q, 0, *tables, sm_scale, cert, num_splits, stage1=k)
        assert plan.kernel_name == k
        plan.launch()
        out[k] = plan.result()
    return out


def load_script(relpath):
    """The repository's script at ``relpath`` (e.g. ``bench/lab/ab_trees.py``) imported as a module
    named after its file (the benchmarks are scripts, not a package)."""
    path = Path(__file__).resolve().parents[1] / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
