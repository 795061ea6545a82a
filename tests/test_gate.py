"""SPEC §6–7 on the CPU backend: per-page contributions, the exact tier and gated repair."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import reference
from witcert_cupy.gate import attention_with_repaired_pages, served_rows
from helpers import contiguous_table, page_table, random_rows


def risky_pool(rng, lengths, *, cap=64, H=2, d=128, page=16, massive=150.0):
    """No outlier bypass and a massive key channel: the certificate of aligned queries is large."""
    indptr, indices, last, slots, npages = contiguous_table(lengths, page)
    pool = wc.KVPool(1, H, d, npages, page, wc.QuantConfig(d, witness_bands=16), keep_exact=True,
                     exact_tier_pages=cap, backend="cpu")
    for s in slots:
        k = random_rows(rng, len(s), H, d, massive=[(5, massive)])
        pool.write(0, s, k, random_rows(rng, len(s), H, d))
    table = (indptr, indices, last, slots)
    q = rng.standard_normal((len(lengths), 4 * H, d)).astype(np.float32)
    q[:, ::2, 5] *= 12.0  # half of the query heads lean on the massive channel
    return pool, table, q


def served_tv(pool, pt, q, b):
    """float64 true TV of what the gated pool serves (exact rows on repaired pages) vs the exact keys."""
    rows, served, _ = served_rows(pool, 0, pt, b)
    return reference.true_tv(q[b], rows["k_exact"], served)


def gate(pool, table, q, **kw):
    indptr, indices, last, _ = table
    kw.setdefault("cert", wc.CertConfig(tier="AB"))
    kw.setdefault("tau", 0.2)
    return wc.gated_decode(q, pool, layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last, **kw)


def test_page_contributions_sum_to_a_minus_one():
    rng = np.random.default_rng(0)
    pool, table, q = risky_pool(rng, [300, 45])
    indptr, indices, last, _ = table
    r = wc.decode_attention(q, pool, layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last,
                            cert=wc.CertConfig(tier="AB"), page_contrib=True, num_splits=3)
    A = np.exp(r.log_a.astype(np.float64))
    assert r.page_contrib.shape == (2, 8, 19)
    assert np.all(r.page_contrib >= -1e-6)
    np.testing.assert_allclose(r.page_contrib.sum(-1), A - 1, rtol=2e-3, atol=2e-5)
    assert np.all(r.page_contrib[1, :, 3:] == 0)  # request 1 has 3 pages
    with pytest.raises(ValueError, match="page_contrib"):
        wc.decode_attention(q, pool, layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last,
                            page_contrib=True)


def test_gate_brings_every_head_under_tau_and_matches_exact_attention():
    rng = np.random.default_rng(1)
    pool, table, q = risky_pool(rng, [400, 200])
    r0 = gate(pool, table, q, max_rounds=0)[0]
    assert np.any(r0.risk > 0.2)  # the workload needs repair
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


def test_predicted_drop_matches_recomputed_to_first_order():
    rng = np.random.default_rng(2)
    pool, table, q = risky_pool(rng, [600], massive=60.0)
    res, rep = gate(pool, table, q, max_rounds=1)
    h0 = rep.history[0]
    A_after = np.exp(res.log_a.astype(np.float64))
    touched = h0["A_predicted"] < h0["A_before"]
    assert touched.any()
    pred = (h0["A_before"] - h0["A_predicted"])[touched]
    act = (h0["A_before"] - A_after)[touched]
    assert np.all(np.abs(pred - act) <= 0.1 * pred + 1e-4)


def test_tier_full_is_reported_and_certificate_stays_honest():
    rng = np.random.default_rng(3)
    pool, table, q = risky_pool(rng, [500], cap=2)
    res, rep = gate(pool, table, q)
    assert rep.tier_full and pool.tier_free == 0 and rep.pages_repaired == 2
    assert rep.over_threshold.any()
    assert np.array_equal(rep.over_threshold, res.risk > 0.2)
    assert np.all(served_tv(pool, page_table(pool, table), q, 0) <= res.tv_bound[0])


def test_rewrite_returns_page_to_quantized_storage():
    rng = np.random.default_rng(4)
    pool, table, q = risky_pool(rng, [256])
    gate(pool, table, q)
    exact_pages = np.argwhere(pool.tier_map[0] >= 0)
    assert len(exact_pages)
    h, page = exact_pages[0]
    free = pool.tier_free
    pool.write(0, [page * pool.page_size + 3], random_rows(rng, 1, 2, 128), random_rows(rng, 1, 2, 128))
    assert not pool.is_exact(0, h, page)
    assert pool.tier_free > free


def test_risk_ranked_mode_and_errors():
    rng = np.random.default_rng(5)
    pool, table, q = risky_pool(rng, [300], massive=400.0)
    q *= 3
    res, rep = gate(pool, table, q, tau=5.0, cert=wc.CertConfig(tier="B"))
    assert rep.mode == "risk-ranked" and np.all(res.risk <= 5.0)
    with pytest.raises(ValueError, match="tau"):
        gate(pool, table, q, tau=float("nan"))
    with pytest.raises(TypeError, match="cert"):
        gate(pool, table, q, cert=None)
    bare = wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend="cpu")
    with pytest.raises(ValueError, match="exact tier"):
        wc.gated_decode(q[:, :, :], bare, layer=0, kv_indptr=np.array([0, 1]), kv_indices=np.array([0]),
                        kv_last_page_len=np.array([3]), cert=wc.CertConfig(), tau=0.2)
    with pytest.raises(ValueError, match="keep_exact"):
        wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend="cpu", exact_tier_pages=4)
