"""SPEC §6–7: per-page contributions, the exact tier and gated repair — one body per test, run on
the CPU backend (CI) and on the GPU (``-m gpu``, the H200), CuPy-style."""

import dataclasses

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import reference
from witcert_cupy.gate import attention_with_repaired_pages, served_rows
from witcert_cupy.reference import to_host as H
from helpers import contiguous_table, cpu_dot_order, page_table, random_rows

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def risky_pool(rng, lengths, *, cap=64, H=2, d=128, page=16, massive=150.0, backend="cpu"):
    """No outlier bypass and a massive key channel: the certificate of aligned queries is large.
    Returns ``(pool, table, q)`` with ``table`` host arrays and ``q`` float32 host ``[B, 4H, d]``."""
    indptr, indices, last, slots, npages = contiguous_table(lengths, page)
    pool = wc.KVPool(1, H, d, npages, page, wc.QuantConfig(d, witness_bands=16), keep_exact=True,
                     exact_tier_pages=cap, backend=backend)
    xp = pool.xp
    for s in slots:
        k = random_rows(rng, len(s), H, d, massive=[(5, massive)])
        pool.write(0, xp.asarray(s), xp.asarray(k), xp.asarray(random_rows(rng, len(s), H, d)))
    table = (indptr, indices, last, slots)
    q = rng.standard_normal((len(lengths), 4 * H, d)).astype(np.float32)
    q[:, ::2, 5] *= 12.0  # half of the query heads lean on the massive channel
    return pool, table, q


def served_tv(pool, pt, q, b):
    """float64 true TV of what the gated pool serves (exact rows on repaired pages) vs the exact keys."""
    rows, served, _ = served_rows(pool, 0, pt, b)
    return reference.true_tv(q[b], rows["k_exact"], served)


def gate(pool, table, q, **kw):
    """gated_decode with the arrays on the pool's device; returns host copies of the result."""
    xp = pool.xp
    indptr, indices, last, _ = table
    tau = kw.pop("tau", 0.2)  # the threshold lives in the CertConfig
    cert = kw.pop("cert", wc.CertConfig(tier="AB"))
    kw["cert"] = dataclasses.replace(cert, tau=tau) if isinstance(cert, wc.CertConfig) else cert
    res, rep = wc.gated_decode(xp.asarray(q), pool, layer=0, kv_indptr=xp.asarray(indptr),
                               kv_indices=xp.asarray(indices), kv_last_page_len=xp.asarray(last), **kw)
    for name in ("o", "lse", "log_a", "risk", "tv_bound", "cmax", "page_contrib"):
        value = getattr(res, name)
        setattr(res, name, None if value is None else H(value))
    return res, rep


def decode(pool, table, q, **kw):
    xp = pool.xp
    indptr, indices, last, _ = table
    return wc.decode_attention(xp.asarray(q), pool, layer=0, kv_indptr=xp.asarray(indptr),
                               kv_indices=xp.asarray(indices), kv_last_page_len=xp.asarray(last), **kw)


def test_page_contributions_sum_to_a_minus_one(backend):
    rng = np.random.default_rng(0)
    pool, table, q = risky_pool(rng, [300, 45], backend=backend)
    r = decode(pool, table, q, cert=wc.CertConfig(tier="AB"), page_contrib=True, num_splits=3)
    A = np.exp(H(r.log_a).astype(np.float64))
    contrib = H(r.page_contrib)
    assert contrib.shape == (2, 8, 19)
    assert np.all(contrib >= -1e-6)
    np.testing.assert_allclose(contrib.sum(-1), A - 1, rtol=2e-3, atol=2e-5)
    assert np.all(contrib[1, :, 3:] == 0)  # request 1 has 3 pages
    with pytest.raises(ValueError, match="page_contrib"):
        decode(pool, table, q, page_contrib=True)


@pytest.mark.gpu
def test_page_contributions_agree_across_backends_and_split_counts():
    """The GPU's per-page (lse_j, λ_j) (the staged-tile kernel's reductions over each page's lanes)
    against the numba oracle in the kernel's summation order, with an exact page in the middle
    (c_t = γ_t there) and one-token pages."""
    for page in (16, 1):
        pools = [risky_pool(np.random.default_rng(7), [300, 45, 130], page=page, backend=be) for be in ("cpu", "cuda")]
        for pool, _, _ in pools:
            pool.page_in(0, 1, 2)
        (pc, table, q), (pg, _, _) = pools
        for ns in (1, 5, 64):
            rg = decode(pg, table, q, cert=wc.CertConfig(tier="AB"), page_contrib=True, num_splits=ns)
            assert rg.dot_order == (16, "chain")  # (decode_stage1_v2, general layout, G = 4)
            with cpu_dot_order(rg.dot_order):  # (the kernel's evaluation term: its summation order)
                rc = decode(pc, table, q, cert=wc.CertConfig(tier="AB"), page_contrib=True, num_splits=2)
            cg, cc = H(rg.page_contrib), rc.page_contrib
            assert cg.shape == cc.shape
            assert np.array_equal(np.isinf(cg), np.isinf(cc))
            # contrib_j is a difference of two fp32-rounded exponentials: the error scales with A
            A = np.exp(rc.log_a.astype(np.float64))[..., None]
            fin = np.isfinite(cc)
            err = np.where(fin, np.abs(cg - cc), 0) - (1e-3 * np.abs(np.where(fin, cc, 0)) + 1e-6 * A)
            worst = np.unravel_index(np.argmax(err), err.shape)
            assert err[worst] <= 0, (page, ns, worst, cg[worst], cc[worst], A[worst[:2]])
            np.testing.assert_allclose(H(rg.log_a), rc.log_a, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(H(rg.o), rc.o, rtol=1e-4, atol=1e-5 * np.abs(rc.o).max())


def test_gate_brings_every_head_under_tau_and_matches_exact_attention(backend):
    rng = np.random.default_rng(1)
    pool, table, q = risky_pool(rng, [400, 200], backend=backend)
    r0 = gate(pool, table, q, max_rounds=0)[0]
    assert np.any(r0.risk > 0.2)  # the workload needs repair
    pool.ledger.reset()  # the same step again, as a fresh request
    res, rep = gate(pool, table, q)
    assert rep.mode == "certified" and not rep.tier_full
    assert rep.pages_repaired > 0 and rep.rounds >= 1
    assert np.all(res.risk <= 0.2) and not rep.over_threshold.any()
    assert rep.bytes_paged_in.sum() == rep.pages_repaired * pool.page_in_bytes
    pt = page_table(pool, table)
    for b in range(2):
        o, lse = attention_with_repaired_pages(pool, 0, pt, b, q[b])
        assert np.abs(res.o[b] - o).max() <= 2e-5 * np.abs(o).max()
        assert np.all(served_tv(pool, pt, q, b) <= res.tv_bound[b])  # the certificate stays sound
    # repair is persistent: a second call pages nothing in
    res2, rep2 = gate(pool, table, q)
    assert rep2.pages_repaired == 0 and rep2.bytes_paged_in.sum() == 0 and rep2.rounds == 0
    assert np.array_equal(res2.o, res.o)


def test_contributions_only_for_the_rows_over_tau(backend, monkeypatch):
    """By default the batch's decodes compute no page contributions: a step that needs no repair
    decodes once, and a repair round decodes again, with them, only the rows that hold a head over
    τ.  page_contrib=True computes them on every decode of the whole batch and reaches the same
    repair and the same output."""
    import witcert_cupy.gate as gate_mod

    calls = []  # (page contributions, batch rows, rows with a head over τ by this decode's risk)
    real = gate_mod._decode

    def spy(*a, **kw):
        res = real(*a, **kw)
        calls.append((a[10], a[0].shape[0], int((H(res.risk) > 0.2).any(1).sum())))
        return res

    monkeypatch.setattr(gate_mod, "_decode", spy)
    results = {}
    for mode in (None, True):
        rng = np.random.default_rng(1)
        pool, table, q = risky_pool(rng, [400, 200, 300], backend=backend)
        q[1] *= 1e-3  # a row with no head over τ: never decoded with the contributions
        calls.clear()
        res, rep = gate(pool, table, q, page_contrib=mode, num_splits=3)
        assert rep.rounds >= 1 and rep.pages_repaired > 0
        if mode is None:
            assert [c[0] for c in calls] == [False, True] * rep.rounds + [False]
            assert rep.decodes == 2 * rep.rounds + 1
            for full, rows in zip(calls[0::2], calls[1::2]):  # each round: its rows over τ alone
                assert full[1] == 3 and rows[1] == full[2] < 3
        else:
            assert calls == [(True, 3, c[2]) for c in calls] and rep.decodes == rep.rounds + 1
        results[mode] = (res, rep, H(pool.tier_map) if backend == "cuda" else pool.tier_map.copy())
        calls.clear()  # repaired: the same step again (a fresh request) needs no repair
        pool.ledger.reset()
        res2, rep2 = gate(pool, table, q, page_contrib=mode, num_splits=3)
        assert rep2.rounds == 0 and rep2.pages_repaired == 0 and not rep2.over_threshold.any()
        assert [c[:2] for c in calls] == [(bool(mode), 3)] and rep2.decodes == 1
        assert (res2.page_contrib is None) == (mode is None)
    (ra, pa, ta), (rb, pb, tb) = results[None], results[True]
    assert pa.pages_repaired == pb.pages_repaired and pa.rounds == pb.rounds and np.array_equal(ta, tb)
    # With and without the contributions the GPU may serve the last decode with different kernels
    # (measured on the H100: form (I) without them, the staged tile with them): the outputs agree
    # within fp32 tolerance, the certificates are each the kernel's own (both under τ)
    np.testing.assert_allclose(ra.o, rb.o, rtol=1e-4, atol=1e-5 * np.abs(rb.o).max())
    assert np.all(ra.risk <= 0.2) and np.all(rb.risk <= 0.2)


def test_a_round_that_repairs_nothing_ends_the_loop(backend):
    """At a τ no page can reach, the first round pages in every page that contributes; the next
    finds none left (exact pages are never chosen again) and stops there instead of recomputing
    the same result for the remaining rounds."""
    rng = np.random.default_rng(6)
    pool, table, q = risky_pool(rng, [64], cap=64, backend=backend)
    res, rep = gate(pool, table, q, tau=1e-12, max_rounds=4)
    # the batch, its rows over τ with the contributions; after the round the batch again, and its
    # rows, which find no page left
    assert rep.pages_repaired > 0 and rep.rounds == 1 and rep.decodes == 4
    assert rep.over_threshold.any() and not rep.tier_full  # still over: the exact tokens' own terms
    assert np.array_equal(rep.over_threshold, res.risk > 1e-12)


def test_predicted_drop_matches_recomputed_to_first_order(backend):
    rng = np.random.default_rng(2)
    pool, table, q = risky_pool(rng, [600], massive=60.0, backend=backend)
    res, rep = gate(pool, table, q, max_rounds=1)
    h0 = rep.history[0]
    A_after = np.exp(res.log_a.astype(np.float64))
    touched = h0["A_predicted"] < h0["A_before"]
    assert touched.any()
    pred = (h0["A_before"] - h0["A_predicted"])[touched]
    act = (h0["A_before"] - A_after)[touched]
    assert np.all(np.abs(pred - act) <= 0.1 * pred + 1e-4)


def test_tier_full_is_reported_and_certificate_stays_honest(backend):
    rng = np.random.default_rng(3)
    pool, table, q = risky_pool(rng, [500], cap=2, backend=backend)
    res, rep = gate(pool, table, q)
    assert rep.tier_full and pool.tier_free == 0 and rep.pages_repaired == 2
    assert rep.over_threshold.any()
    assert np.array_equal(rep.over_threshold, res.risk > 0.2)
    assert np.all(served_tv(pool, page_table(pool, table), q, 0) <= res.tv_bound[0])


def test_rewrite_returns_page_to_quantized_storage(backend):
    rng = np.random.default_rng(4)
    pool, table, q = risky_pool(rng, [256], backend=backend)
    res0, _ = gate(pool, table, q)
    exact_pages = np.argwhere(pool.tier_map[0] >= 0)
    assert len(exact_pages)
    h, page = exact_pages[0]
    free = pool.tier_free
    xp = pool.xp
    slot = page * pool.page_size + 3
    pool.write(0, xp.asarray([slot]), xp.asarray(random_rows(rng, 1, 2, 128)), xp.asarray(random_rows(rng, 1, 2, 128)))
    assert not pool.is_exact(0, h, page)
    assert pool.tier_free > free
    # decode now serves the rewritten page from quantized storage, and the certificate says so
    res1 = decode(pool, table, q, cert=wc.CertConfig(tier="AB"))
    pt = page_table(pool, table)
    assert np.all(served_tv(pool, pt, q, 0) <= H(res1.tv_bound)[0])
    assert not np.array_equal(H(res1.log_a), res0.log_a)


def test_risk_ranked_mode_and_errors(backend):
    rng = np.random.default_rng(5)
    pool, table, q = risky_pool(rng, [300], massive=400.0, backend=backend)
    q *= 3
    res, rep = gate(pool, table, q, tau=5.0, cert=wc.CertConfig(tier="B"))
    assert rep.mode == "risk-ranked" and np.all(res.risk <= 5.0)
    with pytest.raises(ValueError, match="tau"):
        gate(pool, table, q, tau=float("nan"))
    with pytest.raises(TypeError, match="cert"):
        gate(pool, table, q, cert=None)
    free = pool.tier_free
    with pytest.raises(ValueError, match="page_contrib"):  # the gate cannot rank pages without them
        gate(pool, table, q, page_contrib=False)
    with pytest.raises(TypeError, match="page_contrib"):
        gate(pool, table, q, page_contrib="yes")
    assert pool.tier_free == free  # refused before anything was paged in
    xp = pool.xp
    bare = wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend=backend)
    with pytest.raises(ValueError, match="exact tier"):
        wc.gated_decode(xp.asarray(q), bare, layer=0, kv_indptr=xp.asarray([0, 1]), kv_indices=xp.asarray([0]),
                        kv_last_page_len=xp.asarray([3]), cert=wc.CertConfig(tau=0.2))
    with pytest.raises(ValueError, match="keep_exact"):
        wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend=backend, exact_tier_pages=4)
    with pytest.raises(TypeError, match="device"):  # host q for a GPU pool, or the reverse
        wc.gated_decode(q if backend == "cuda" else _FakeCuda(q), pool, layer=0, kv_indptr=table[0],
                        kv_indices=table[1], kv_last_page_len=table[2], cert=wc.CertConfig(tau=0.2))


class _FakeCuda:
    """Looks like a CUDA array to the backend check (never read)."""

    def __init__(self, a):
        self.shape = a.shape
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": "<f4", "data": (0, False), "version": 3}
