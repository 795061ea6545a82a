"""Fp16Pool: a plain fp16 cache (our fp16 baseline) and a black-box scheme's stored values metered
with Tier A and the tanh bound (SPEC §3 black boxes, §4 Tier A)."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import reference
from helpers import contiguous_table, page_table, random_rows

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def e4m3_like(x):
    """Round to 3 mantissa bits (an fp8-e4m3-style lossy cast, no range clipping): a black box."""
    x = np.asarray(x, np.float64)
    m, e = np.frexp(x)
    return np.ldexp(np.round(m * 16) / 16, e).astype(np.float32)


def build(rng, lengths, *, bands=16, scheme=None, H=2, d=128, page=16, backend="cpu", massive=None):
    indptr, indices, last, slots, npages = contiguous_table(lengths, page)
    pool = wc.Fp16Pool(1, H, d, npages, page, witness_bands=bands, keep_exact=True, backend=backend)
    xp = pool.xp
    for s in slots:
        k = random_rows(rng, len(s), H, d, massive=massive)
        v = random_rows(rng, len(s), H, d)
        kw = {} if scheme is None else {"k_stored": xp.asarray(scheme(k)), "v_stored": xp.asarray(scheme(v))}
        pool.write(0, xp.asarray(s), xp.asarray(k), xp.asarray(v), **kw)
    return pool, (indptr, indices, last, slots)


def decode(pool, table, q, **kw):
    xp = pool.xp
    return wc.decode_attention(xp.asarray(q), pool, layer=0, kv_indptr=xp.asarray(table[0]),
                               kv_indices=xp.asarray(table[1]), kv_last_page_len=xp.asarray(table[2]), **kw)


def test_plain_fp16_cache_matches_float64_attention():
    rng = np.random.default_rng(0)
    pool, table = build(rng, [300, 1, 77], bands=0)
    q = rng.standard_normal((3, 8, 128)).astype(np.float32)
    r = decode(pool, table, q, num_splits=4)
    assert r.log_a is None
    pt = page_table(pool, table)
    for b in range(3):
        rows = reference.request_rows(pool, 0, pt, b)
        assert np.array_equal(rows["k_hat"], rows["k_exact"].astype(np.float32))  # stored == exact
        o, lse = reference.attention(q[b], rows["k_exact"], rows["v_exact"])
        assert np.abs(r.o[b] - o).max() <= 2e-5 * np.abs(o).max()
        assert np.allclose(r.lse[b], lse, rtol=2e-6)


@pytest.mark.parametrize("adaptive", [False, True])
def test_scheme_metered_by_tier_a_without_violations(adaptive):
    rng = np.random.default_rng(1 + adaptive)
    pool, table = build(rng, [400, 90], scheme=e4m3_like, massive=[(63, 50.0)])
    pt = page_table(pool, table)
    for trial in range(4):
        q = rng.standard_normal((2, 8, 128)) * (0.5 + trial)
        if adaptive:  # queries along the scheme's own residual: the worst case for Cauchy–Schwarz
            for b in range(2):
                rows = reference.request_rows(pool, 0, pt, b)
                res = rows["k_hat"] - rows["k_exact"]
                for hq in range(8):
                    t = rng.integers(len(res))
                    q[b, hq] = res[t, hq // 4] / (np.linalg.norm(res[t, hq // 4]) + 1e-30) * 10 ** trial
        q = q.astype(np.float32)
        r = decode(pool, table, q, cert=wc.CertConfig(tier="A"))
        for b in range(2):
            rows = reference.request_rows(pool, 0, pt, b)
            tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
            assert np.all(tv <= r.tv_bound[b])
            eps = reference.logits(q[b], rows["k_hat"]) - reference.logits(q[b], rows["k_exact"])
            assert np.all(np.abs(eps).max(-1) <= r.cmax[b])


def test_witness_bounds_the_scheme_residual_and_byte_account():
    rng = np.random.default_rng(3)
    pool, table = build(rng, [200], scheme=e4m3_like, bands=8)
    s = table[3][0]
    xe = pool.exact_rows(0, s, "v").astype(np.float64)
    xs = pool.dequantized(0, s, "v").astype(np.float64)
    norms = np.sqrt(((xs - xe)[:, :, pool.band_ch] ** 2).sum(-1))
    w = pool.witness[0, 1][:, s].transpose(1, 0, 2).astype(np.float64)
    assert np.all(w >= norms) and np.all(w <= 1.01 * norms + 1e-7)
    assert pool.nbytes == pool.bytes_per_token() * pool.num_slots
    assert pool.bytes_per_token_side() == 2 * 128 + 2 * 8 + 2  # (+ the K row's 4-byte norm, per side)


@pytest.mark.parametrize("backend", BACKENDS)
def test_stored_k_norm_bounds_each_row_norm(backend):
    """Each stored K row's norm is kept rounded up (the evaluation term's norm form,
    docs/certificate.md §10.1), over fp16's whole range: subnormals, the largest value, a
    one-channel row; a non-finite row gets +inf; the V side and a pool without witness keep none."""
    rng = np.random.default_rng(6)
    d, H, n = 128, 2, 12
    pool = wc.Fp16Pool(1, H, d, 1, 16, witness_bands=8, backend=backend)
    xp = pool.xp
    k = rng.standard_normal((n, H, d)) * np.logspace(-8, 4, n)[:, None, None]
    k[0] = 2.0 ** -24 * rng.integers(-3, 4, (H, d))       # fp16 subnormals
    k[1] = 65504.0 * np.sign(rng.standard_normal((H, d)))  # fp16's largest: Σx² near 2^39
    k[2] = 0.0
    k[2, :, 77] = -3.0                                      # one channel
    k[3] = 0.0
    stored = e4m3_like(k)
    stored[4, 1, 5] = np.nan
    pool.write(0, xp.arange(n), xp.asarray(k), xp.asarray(k), k_stored=xp.asarray(stored))
    x = _host(pool.values[0, 0, :, :n]).astype(np.float64)
    exact = np.sqrt((x * x).sum(-1))
    got = _host(pool.k_norm[0, :, :n]).astype(np.float64)
    ok = np.isfinite(exact)
    assert np.all(got[ok] >= exact[ok]) and np.all(got[ok] <= exact[ok] * (1 + 2.0 ** -15))
    assert got[0, 3] == 0.0 and got[0, 2] == 3.0
    assert np.isinf(got[1, 4]) and np.isfinite(got[0, 4])
    assert pool.k_norm.shape == (1, H, 16)
    assert wc.Fp16Pool(1, H, d, 1, 16, backend=backend).k_norm.shape == (1, H, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_certificate_reads_the_stored_k_norm(backend):
    """The fp16 store's γ_t is gamma_exact·||q||·(the stored norm): scaling one token's stored norm by
    2^20 raises the largest γ_t of every head that attends it by about as much (a kernel that formed the norm from the
    values would not see it)."""
    rng = np.random.default_rng(7)
    pool, table = build(rng, [64], scheme=e4m3_like, bands=16, backend=backend)
    q = rng.standard_normal((1, 8, 128)).astype(np.float32)
    cert = wc.CertConfig(tier="A")
    before = decode(pool, table, q, cert=cert)
    slot = int(table[3][0][10])
    pool.k_norm[0, 1, slot] *= np.float32(2.0 ** 20)
    after = decode(pool, table, q, cert=cert)
    g0, g1, c1 = _host(before.gamma)[0], _host(after.gamma)[0], _host(after.cmax)[0]
    assert np.array_equal(g1[:4], g0[:4])  # kv head 0: untouched
    assert np.all(g1[4:] >= 2.0 ** 16 * g0[4:])  # (the token is not the largest)
    assert np.all(g0[4:] > 0) and np.all(c1[4:] >= g1[4:])


def test_fp16pool_errors_and_nonfinite():
    rng = np.random.default_rng(4)
    pool, table = build(rng, [40], bands=4)
    q = rng.standard_normal((1, 8, 128)).astype(np.float32)
    with pytest.raises(ValueError, match="Tier 'A'"):
        decode(pool, table, q, cert=wc.CertConfig(tier="B"))
    bare, t2 = build(rng, [40], bands=0)
    with pytest.raises(ValueError, match="witness"):
        decode(bare, t2, q, cert=wc.CertConfig(tier="A"))
    with pytest.raises(ValueError, match="witness_bands"):
        wc.Fp16Pool(1, 2, 128, 4, 16, witness_bands=5)
    snap = [a.copy() for a in (pool.values, pool.witness, pool.k_norm, pool.exact)]
    k = rng.standard_normal((3, 2, 128)).astype(np.float32)
    with pytest.raises(ValueError, match="k_stored"):
        pool.write(0, np.arange(3), k, k, k_stored=k[:2])
    with pytest.raises(TypeError, match="v_stored"):
        pool.write(0, np.arange(3), k, k, v_stored=k.astype(np.int16))
    for a, b in zip(snap, (pool.values, pool.witness, pool.k_norm, pool.exact)):
        assert np.array_equal(a, b)
    bad = k.copy()
    bad[1, 0, 3] = np.inf
    slot = table[3][0][:3]
    pool.write(0, slot, k, k, k_stored=bad)
    assert int(pool.nonfinite_writes[0]) == 1
    r = decode(pool, table, q, cert=wc.CertConfig(tier="A"))
    assert np.all(np.isinf(r.risk[0, :4])) and np.all(np.isfinite(r.risk[0, 4:]))


def test_fp16_store_and_int8_pool_share_one_cpu_decode_specialization():
    """The CPU decode of an fp16 store and of an INT8 pool run one compiled stage 1 (a second numba
    specialization cost about 45 s of compile in every cold process)."""
    from witcert_cupy._cpu.decode import decode_stage1

    rng = np.random.default_rng(5)
    fp16, table = build(rng, [40, 17], bands=8)
    pool = wc.KVPool(1, 2, 128, fp16.num_pages, 16, wc.QuantConfig(128, witness_bands=8), backend="cpu")
    for s in table[3]:
        pool.write(0, np.asarray(s), random_rows(rng, len(s), 2, 128), random_rows(rng, len(s), 2, 128))
    q = rng.standard_normal((2, 8, 128)).astype(np.float32)
    for p in (fp16, pool):
        assert np.isfinite(_host(decode(p, table, q, cert=wc.CertConfig(tier="A")).tv_bound)).all()
    assert len(decode_stage1.signatures) == 1, decode_stage1.signatures
