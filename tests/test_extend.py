"""Issue 6 semantics on the CPU: extend (prefill) attention with per-position certificates, chunked
prefill, prefix sharing, and decode continuing on the same pool."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import reference
from witcert_cupy.decode import check_page_table
from helpers import page_slots, paged_table, random_rows

PS, H, G, D = 16, 2, 4, 128


def pool_with(rng, pages_per_request):
    total = sum(pages_per_request)
    return wc.KVPool(1, H, D, total, PS, wc.QuantConfig(D, witness_bands=16), keep_exact=True, backend="cpu")


def table(page_lists, lengths):
    return paged_table(page_lists, lengths, PS)


def slots_of(pages, lo, hi):
    return page_slots(pages, lo, hi, PS)


def test_extend_matches_causal_reference_and_is_certified():
    rng = np.random.default_rng(0)
    pool = pool_with(rng, [20])
    pages = rng.permutation(20)
    S, n = 300, 24
    k = random_rows(rng, S, H, D, massive=[(3, 30.0)])
    v = random_rows(rng, S, H, D)
    pool.write(0, slots_of(pages, 0, S), k, v)  # prefix and new tokens, written first
    q = rng.standard_normal((n, H * G, D)).astype(np.float32)
    ip, ix, ll = table([pages], [S])
    cert = wc.CertConfig(tier="AB", steps=n)
    r = wc.extend_attention(q, pool, layer=0, qo_indptr=np.array([0, n]), kv_indptr=ip, kv_indices=ix,
                            kv_last_page_len=ll, cert=cert)
    assert r.o.shape == (n, H * G, D) and r.tv_bound.shape == (n, H * G)
    pt = check_page_table(ip, ix, ll, batch=1, num_pages=20, page_size=PS)
    rows = reference.request_rows(pool, 0, pt, 0)
    for i in range(n):
        upto = S - n + i + 1
        o, lse = reference.attention(q[i], rows["k_hat"][:upto], rows["v_hat"][:upto])
        assert np.abs(r.o[i] - o).max() <= 2e-5 * np.abs(o).max()
        tv = reference.true_tv(q[i], rows["k_exact"][:upto], rows["k_hat"][:upto])
        assert np.all(tv <= r.tv_bound[i])
    full = wc.extend_attention(q, pool, layer=0, qo_indptr=np.array([0, n]), kv_indptr=ip, kv_indices=ix,
                               kv_last_page_len=ll, causal=False)
    o_all, _ = reference.attention(q[0], rows["k_hat"], rows["v_hat"])
    assert np.abs(full.o[0] - o_all).max() <= 2e-5 * np.abs(o_all).max()


def test_chunked_prefill_equals_one_shot_and_decode_continues():
    rng = np.random.default_rng(1)
    pool = pool_with(rng, [16])
    pages = rng.permutation(16)
    S = 200
    k = random_rows(rng, S, H, D)
    v = random_rows(rng, S, H, D)
    q = rng.standard_normal((S, H * G, D)).astype(np.float32)
    pool.write(0, slots_of(pages, 0, S), k, v)
    ip, ix, ll = table([pages], [S])
    one = wc.extend_attention(q, pool, layer=0, qo_indptr=np.array([0, S]), kv_indptr=ip, kv_indices=ix,
                              kv_last_page_len=ll, cert=wc.CertConfig(steps=S), num_splits=2)
    outs = []
    for lo, hi in ((0, 37), (37, 128), (128, 200)):  # the engine writes each chunk, then extends it
        ipc, ixc, llc = table([pages], [hi])
        outs.append(wc.extend_attention(q[lo:hi], pool, layer=0, qo_indptr=np.array([0, hi - lo]), kv_indptr=ipc,
                                        kv_indices=ixc, kv_last_page_len=llc, cert=wc.CertConfig(steps=S),
                                        num_splits=2))
    for f in ("o", "lse", "log_a", "cmax"):
        assert np.array_equal(np.concatenate([getattr(x, f) for x in outs]), getattr(one, f))
    # decoding the next token on the same pool sees everything the extend wrote
    kn, vn = random_rows(rng, 1, H, D), random_rows(rng, 1, H, D)
    pool.write(0, slots_of(pages, S, S + 1), kn, vn)
    ipd, ixd, lld = table([pages], [S + 1])
    qd = rng.standard_normal((1, H * G, D)).astype(np.float32)
    d = wc.decode_attention(qd, pool, layer=0, kv_indptr=ipd, kv_indices=ixd, kv_last_page_len=lld,
                            cert=wc.CertConfig(steps=S + 1), num_splits=2)
    e = wc.extend_attention(qd, pool, layer=0, qo_indptr=np.array([0, 1]), kv_indptr=ipd, kv_indices=ixd,
                            kv_last_page_len=lld, cert=wc.CertConfig(steps=S + 1), num_splits=2)
    assert np.array_equal(d.o, e.o) and np.array_equal(d.tv_bound, e.tv_bound)


def test_prefix_sharing_gives_identical_certificates():
    rng = np.random.default_rng(2)
    pool = pool_with(rng, [24])
    shared = np.arange(8)            # 128 prefix tokens on pages 0..7, shared by both requests
    own = [np.arange(8, 12), np.arange(12, 16)]
    P, n = 128, 40
    pool.write(0, slots_of(shared, 0, P), random_rows(rng, P, H, D), random_rows(rng, P, H, D))
    q = rng.standard_normal((n, H * G, D)).astype(np.float32)
    for o in own:  # identical suffix rows in the two requests' own pages
        rs = np.random.default_rng(9)
        pool.write(0, slots_of(o, 0, n), random_rows(rs, n, H, D), random_rows(rs, n, H, D))
    lists = [np.concatenate([shared, own[0]]), np.concatenate([shared, own[1]])]
    ip, ix, ll = table(lists, [P + n, P + n])
    r = wc.extend_attention(np.concatenate([q, q]), pool, layer=0, qo_indptr=np.array([0, n, 2 * n]),
                            kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=wc.CertConfig(steps=n))
    # the shared prefix reads the same slots; the suffixes differ only in their slots' dither
    first = slice(0, 1)  # position 0 of each request attends the prefix plus one own token
    assert np.allclose(r.o[first], r.o[n:n + 1], atol=0.05)
    assert r.tv_bound.shape == (2 * n, H * G)
    ipp, ixp, llp = table([shared, shared], [P, P])
    rp = wc.extend_attention(np.concatenate([q[:5], q[:5]]), pool, layer=0, qo_indptr=np.array([0, 5, 10]),
                             kv_indptr=ipp, kv_indices=ixp, kv_last_page_len=llp, cert=wc.CertConfig(steps=5))
    for f in ("o", "lse", "log_a", "cmax", "tv_bound"):
        assert np.array_equal(getattr(rp, f)[:5], getattr(rp, f)[5:])  # identical queries, identical answers


def test_extend_errors():
    rng = np.random.default_rng(3)
    pool = pool_with(rng, [4])
    pool.write(0, np.arange(30), random_rows(rng, 30, H, D), random_rows(rng, 30, H, D))
    ip, ix, ll = table([np.arange(4)], [30])
    q = np.zeros((5, H * G, D), np.float32)
    kw = dict(layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll)
    with pytest.raises(ValueError, match="qo_indptr"):
        wc.extend_attention(q, pool, qo_indptr=np.array([0, 4]), **kw)
    with pytest.raises(ValueError, match="cert.steps"):
        wc.extend_attention(q, pool, qo_indptr=np.array([0, 5]), cert=wc.CertConfig(steps=2), **kw)
    with pytest.raises(ValueError, match="holds only"):
        wc.extend_attention(np.zeros((31, H * G, D), np.float32), pool, qo_indptr=np.array([0, 31]), **kw)
    with pytest.raises(TypeError, match="qo_indptr"):
        wc.extend_attention(q, pool, qo_indptr=np.array([0.0, 5.0]), **kw)
