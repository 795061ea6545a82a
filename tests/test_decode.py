"""SPEC §6 on the CPU backend: decode against float64 attention on the reconstructed cache, the
split-KV merge, GQA groups, head dims, page sizes and order invariances."""

import math

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import _contract as C
from witcert_cupy import certificate, reference
from helpers import filled_pool, overflowing_query_group_case, page_table


def ref_request(pool, table, q, b, cert, sm=None):
    """float64 o, lse, log A, max c of request ``b`` from the pool's own reconstructed values."""
    pt = page_table(pool, table)
    rows = reference.request_rows(pool, 0, pt, b)
    o, lse = reference.attention(q[b], rows["k_hat"], rows["v_hat"], sm_scale=sm)
    if cert is None:
        return o, lse, None, None
    S = len(rows["slots"])
    Hq = q.shape[1]
    c = np.full((Hq, S), np.inf)
    if "A" in cert.tier:
        c = np.minimum(c, reference.c_tier_a(q[b], rows["k_witness"], pool.config, sm_scale=sm))
    if "B" in cert.tier:
        c = np.minimum(c, reference.c_tier_b(q[b], rows["k_scales"], pool.config, layer=0,
                                             kv_heads_bypass=pool.bypass_ch[0], S=S,
                                             delta_loc=certificate.delta_loc(cert, Hq, pool.num_layers), sm_scale=sm))
    pt_ = reference.softmax(reference.logits(q[b], rows["k_hat"], sm))
    # the kernels add their own evaluation term and evaluate c_t with the fp32 slack on top
    # (docs/certificate.md §6, §10)
    gam = reference.c_gamma(q[b], rows["k_hat"], rows["k_scales"], pool.config,
                            kv_heads_bypass=pool.bypass_ch[0], sm_scale=sm)
    log_a, _, cmax = reference.reported_log_a(pt_, c, gam, head_dim=q.shape[-1],
                                              sm_scale=sm or 1 / math.sqrt(q.shape[-1]))
    return o, lse, log_a, cmax


def run(pool, table, q, **kw):
    indptr, indices, last, _ = table
    return wc.decode_attention(q, pool, layer=0, kv_indptr=indptr, kv_indices=indices,
                               kv_last_page_len=last, **kw)


@pytest.mark.parametrize("G,d,tier", [(1, 64, "B"), (2, 128, "A"), (4, 128, "AB"), (7, 128, "B"),
                                      (8, 256, "AB"), (4, 64, "A")])
def test_decode_matches_float64_reference(G, d, tier):
    rng = np.random.default_rng(G * d)
    H = 2
    cfg = wc.QuantConfig(d, witness_bands=8, outlier_pairs=np.array([[[1, d // 2 - 1]] * H]))
    pool, table, _, _ = filled_pool(rng, lengths=[37, 300, 1, 129], H=H, d=d, cfg=cfg,
                                    massive=[(1, 30.0), (d - 1, 30.0)])
    q = rng.standard_normal((4, H * G, d)).astype(np.float32) * 2
    cert = wc.CertConfig(tier=tier, num_layers=4, steps=16)
    r = run(pool, table, q, cert=cert, num_splits=3)
    for b in range(4):
        o, lse, log_a, cmax = ref_request(pool, table, q, b, cert)
        scale = np.abs(o).max(-1, keepdims=True) + 1e-30
        assert np.all(np.abs(r.o[b] - o) / scale < 2e-5)
        assert np.all(np.abs(r.lse[b] - lse) < 2e-5 * np.maximum(1, np.abs(lse)))
        assert np.all(np.abs(r.log_a[b] - log_a) < 5e-6 * np.maximum(1, np.abs(lse)) + 1e-4 * log_a)
        # c_t carries a tiny evaluation slack upward, never downward
        assert np.all(r.cmax[b] >= cmax / C.C_EVAL_SLACK) and np.all(r.cmax[b] <= cmax * (1 + 2.0**-9))
        res = C.LOG_A_RESOLUTION_ULPS * 2.0**-24 * np.maximum(1, np.abs(r.lse[b].astype(np.float64)))
        risk = np.expm1(2 * (r.log_a[b].astype(np.float64) + r.gamma[b] + res)) / 2
        assert np.allclose(r.risk[b], risk, rtol=1e-12)
        assert np.allclose(r.tv_bound[b], np.minimum(1, np.minimum(risk, np.tanh(r.cmax[b] / 2))))


def test_split_count_invariance():
    rng = np.random.default_rng(0)
    cfg = wc.QuantConfig(128, witness_bands=16)
    pool, table, _, _ = filled_pool(rng, lengths=[1000, 17, 333], cfg=cfg)
    q = rng.standard_normal((3, 8, 128)).astype(np.float32)
    cert = wc.CertConfig(tier="AB")
    base = run(pool, table, q, cert=cert, num_splits=1)
    for ns in (2, 3, 8, 64, 200):
        r = run(pool, table, q, cert=cert, num_splits=ns)
        assert r.num_splits == ns
        np.testing.assert_allclose(r.o, base.o, rtol=0, atol=3e-6 * np.abs(base.o).max())
        np.testing.assert_allclose(r.lse, base.lse, rtol=2e-6)
        np.testing.assert_allclose(r.log_a, base.log_a, atol=1e-5 * np.abs(base.lse).max())
        assert np.array_equal(r.cmax, base.cmax)  # a max over identical per-token values


def test_merge_weights_sum_to_one_at_any_lse():
    """The merge forms o from weights e^{lse_s − max}/Σ (docs/certificate.md §5): with eight equal
    splits at lse = 1.9e8 (ulp 16) the rounded lse equals the largest split's, and weights
    e^{lse_s − fl(lse)} would sum to 8; the mixture of equal rows must be that row."""
    from witcert_cupy._cpu.decode import merge_splits

    ns, d = 8, 4
    o_part = np.ones((1, 1, ns, d), np.float32)
    lse_part = np.full((1, 1, ns), 1.9e8, np.float32)
    lam_part = np.full((1, 1, ns), 1.9e8 + 64, np.float32)
    zeros = np.zeros((1, 1, ns), np.float32)
    o = np.empty((1, 1, d), np.float32)
    lse, log_a, cmax, gam = (np.empty((1, 1), np.float32) for _ in range(4))
    merge_splits(o_part, lse_part, lam_part, zeros, zeros, np.float32(0), o, lse, log_a, cmax, gam)
    np.testing.assert_allclose(o, 1.0, rtol=1e-6)


def test_batch_order_invariance():
    rng = np.random.default_rng(1)
    pool, table, _, _ = filled_pool(rng, lengths=[50, 400, 3, 129, 77])
    q = rng.standard_normal((5, 8, 128)).astype(np.float32)
    r = run(pool, table, q, cert=wc.CertConfig(), num_splits=4)
    indptr, indices, last, _ = table
    perm = [3, 0, 4, 2, 1]
    chunks = [indices[indptr[b]:indptr[b + 1]] for b in perm]
    ip2 = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int32)
    r2 = wc.decode_attention(q[perm], pool, layer=0, kv_indptr=ip2, kv_indices=np.concatenate(chunks),
                             kv_last_page_len=last[perm], cert=wc.CertConfig(), num_splits=4)
    for f in ("o", "lse", "log_a", "cmax"):
        assert np.array_equal(getattr(r2, f), getattr(r, f)[perm])


def test_page_size_invariance():
    """The same tokens at the same slots give the same answer whatever the page size."""
    rng = np.random.default_rng(2)
    lengths = [700, 5, 257]
    q = rng.standard_normal((3, 8, 128)).astype(np.float32)
    outs = []
    for ps in (1, 16, 128):
        r2 = np.random.default_rng(9)
        pool, table, _, _ = filled_pool(r2, lengths=lengths, page_size=ps,
                                        cfg=wc.QuantConfig(128, witness_bands=16))
        outs.append(run(pool, table, q, cert=wc.CertConfig(tier="AB"), num_splits=2))
    for r in outs[1:]:
        np.testing.assert_allclose(r.o, outs[0].o, atol=3e-6 * np.abs(outs[0].o).max())
        np.testing.assert_allclose(r.lse, outs[0].lse, rtol=2e-6)
        assert np.array_equal(r.cmax, outs[0].cmax)


def test_empty_request_and_single_token():
    rng = np.random.default_rng(3)
    pool, table, k, v = filled_pool(rng, lengths=[0, 1])
    q = rng.standard_normal((2, 8, 128)).astype(np.float32)
    r = run(pool, table, q, cert=wc.CertConfig())
    assert np.all(r.o[0] == 0) and np.all(np.isneginf(r.lse[0]))
    assert np.all(r.log_a[0] == 0) and np.all(r.tv_bound[0] == 0)
    # one token: softmax is 1, o is v̂ of that token, and A = e^{c} exactly
    vhat = pool.dequantized(0, table[3][1], "v")[0]
    assert np.allclose(r.o[1], np.repeat(vhat, 4, axis=0), atol=1e-6)
    # one token: A = e^{c_t}, so log A is its c_t (both carry g₀; the evaluation term Γ is apart)
    assert np.all(np.abs(r.log_a[1] - r.cmax[1]) <= 2e-6 * np.maximum(1, np.abs(r.lse[1])))
    assert np.all(r.gamma[1] > 0) and np.all(r.gamma[1] < r.cmax[1])


def test_nonfinite_slot_makes_certificate_infinite_for_its_requests_only():
    rng = np.random.default_rng(4)
    pool, table, _, _ = filled_pool(rng, lengths=[64, 64])
    bad = table[3][0][10]
    k = rng.standard_normal((1, 2, 128)).astype(np.float32)
    k[0, 1, 7] = np.nan
    pool.write(0, [bad], k, k)
    q = rng.standard_normal((2, 8, 128)).astype(np.float32)
    for tier in ("B",):
        r = run(pool, table, q, cert=wc.CertConfig(tier=tier))
        assert np.all(np.isinf(r.risk[0, 4:])) and np.all(np.isinf(r.cmax[0, 4:]))  # kv head 1
        assert np.all(np.isfinite(r.risk[0, :4]))  # kv head 0 of that slot was finite
        assert np.all(np.isfinite(r.risk[1]))
    pool2, table2, _, _ = filled_pool(np.random.default_rng(4), lengths=[64, 64],
                                      cfg=wc.QuantConfig(128, witness_bands=16))
    pool2.write(0, [bad], k, k)
    for tier in ("A", "AB"):
        r = run(pool2, table2, q, cert=wc.CertConfig(tier=tier))
        assert np.all(np.isinf(r.risk[0, 4:])) and np.all(np.isfinite(r.risk[1]))


def test_sm_scale_and_no_cert():
    rng = np.random.default_rng(5)
    pool, table, _, _ = filled_pool(rng, lengths=[90])
    q = rng.standard_normal((1, 8, 128)).astype(np.float32)
    r = run(pool, table, q, sm_scale=0.3)
    assert r.log_a is None and r.risk is None and r.tv_bound is None and r.cmax is None
    o, lse, _, _ = ref_request(pool, table, q, 0, None, sm=0.3)
    assert np.allclose(r.o[0], o, atol=1e-5 * np.abs(o).max())
    assert np.allclose(r.lse[0], lse, rtol=1e-5)
    assert math.isclose(1 / math.sqrt(128), 0.08838834764831845)


def test_gpu_default_split_count_fills_one_wave_of_resident_ctas():
    """The GPU launch layer's default split count (host arithmetic only, run here without a GPU):
    one wave of the stage-1 kernel's resident CTAs over batch × kv heads, at most 64 splits (the
    measured best at batch 1 in docs/performance.md), at least 1, never more than the pool's
    pages; the fp16 kernel's rule (up to 128 splits of at least 64 tokens) and the INT8 kernel's
    (beyond 64 splits at small batch)."""
    import types

    from witcert_cupy import _cuda

    def device(hkv, sms=132, pages=1 << 20):  # the attributes the split rules read
        dev = types.SimpleNamespace(num_sms=sms, pool=types.SimpleNamespace(num_kv_heads=hkv, num_pages=pages))
        dev.default_num_splits = types.MethodType(_cuda.device._DeviceBase.default_num_splits, dev)
        return dev

    def splits(batch, hkv, ctas, sms=132, pages=1 << 20):
        return device(hkv, sms, pages).default_num_splits(batch, ctas)

    assert splits(8, 8, 6) == 12 and 8 * 8 * 12 <= 6 * 132 < 8 * 8 * 13  # one wave, not more
    assert splits(8, 4, 6) == 24
    assert splits(32, 8, 6) == 3
    assert splits(1, 8, 6) == 64 and splits(1, 4, 8) == 64  # the cap
    assert splits(512, 8, 6) == 1  # more rows than resident CTAs: one split each
    assert splits(1, 8, 6, pages=5) == 5  # never more splits than pages
    assert splits(8, 8, 4) == 8  # the residency counts: 4 resident per SM get 8 splits, 6 get 12

    def f16_splits(batch, hkv, tokens, ctas=10, sms=132):
        return device(hkv, sms).default_num_splits(batch, ctas, max_splits=128, tokens=tokens)

    # the one-warp fp16 kernel's rule: up to 128 splits, each of at least 64 tokens
    assert f16_splits(1, 4, 32768) == 128 and f16_splits(1, 8, 32768) == 128
    assert f16_splits(1, 4, 4096) == 64 and f16_splits(1, 8, 4096) == 64
    assert f16_splits(8, 4, 32768) == 41  # one wave: 1320 // 32
    assert f16_splits(1, 8, 40) == 1  # a short request: one split

    def v2_splits(batch, hkv, tokens, ctas=6, sms=132, pages=1 << 20):
        return _cuda.device._DeviceBase.v2_num_splits(device(hkv, sms, pages), batch, ctas, tokens)

    # the INT8 kernel's rule: the 64-split rule, or where 64 splits leave most of
    # one wave empty, up to 128 within one wave: 4 CTAs per SM (in steps of 64 splits) for splits of
    # at least one 32-token tile, the whole wave for splits of at least 512 tokens
    assert v2_splits(1, 4, 32768) == 128 and v2_splits(1, 4, 131072) == 128 and v2_splits(1, 2, 32768) == 128
    assert v2_splits(1, 4, 16384) == 128 and v2_splits(1, 4, 12800) == 128
    assert v2_splits(1, 4, 8192) == 128 and v2_splits(1, 4, 4096) == 128 and v2_splits(1, 2, 4096) == 128
    assert v2_splits(1, 4, 3200) == 100 and v2_splits(1, 4, 1024) == 64  # 32 tokens each; never below 64
    assert v2_splits(2, 4, 4096) == 64  # 512 CTAs at 64 splits: already 4 per SM
    assert v2_splits(1, 8, 16384) == 64 and v2_splits(1, 8, 32768) == 64  # 528 // 8 = 66: steps of 64
    assert v2_splits(1, 5, 32768) == 64 and v2_splits(1, 3, 32768) == 128  # 105 → 64, 176 → 128
    assert v2_splits(1, 8, 131072) == 99 and v2_splits(2, 4, 131072) == 99  # the whole wave: 792 // 8
    assert v2_splits(1, 8, 50688) == 99 and v2_splits(1, 8, 40960) == 80  # splits of 512 tokens
    assert v2_splits(1, 8, 34303) == 66 and v2_splits(1, 8, 32767) == 64  # 66 or 63 splits of 512
    assert v2_splits(8, 8, 32768) == 12 and v2_splits(4, 4, 32768) == 49  # one wave, as before
    assert v2_splits(1, 4, 32768, pages=80) == 80  # never more splits than pages
    assert v2_splits(1, 4, 32768, ctas=1) == 33  # nor more than one wave of resident CTAs
    assert v2_splits(1, 4, 32768, ctas=3) == 64 and v2_splits(1, 4, 131072, ctas=3) == 99  # 3 resident: 99 a wave


def test_i8_default_split_count_makes_whole_tiles():
    """decode_stage1_i8's default split count (host arithmetic only): one wave of resident CTAs, at
    most 128 splits of at least one 32-token tile, then the fewest splits with as many tiles on the
    longest split (a split of three 16-token pages runs two tiles, as one of four does)."""
    import types

    from witcert_cupy import _cuda

    def i8_splits(batch, hkv, tokens, ctas=6, page=16, sms=132, pages=1 << 20):
        dev = types.SimpleNamespace(num_sms=sms, pool=types.SimpleNamespace(num_kv_heads=hkv, num_pages=pages,
                                                                             page_size=page))
        dev.default_num_splits = types.MethodType(_cuda.device._DeviceBase.default_num_splits, dev)
        return _cuda.device._DeviceBase.i8_num_splits(dev, batch, ctas, tokens)

    # batch 1, 32/8, 4k: a wave is 99 splits of three pages; four pages (two tiles) need only 64
    assert i8_splits(1, 8, 4096) == 64 and i8_splits(1, 8, 4096, ctas=4) == 64
    assert i8_splits(1, 4, 4096) == 128  # two pages each already: one tile
    assert i8_splits(2, 8, 4096) == 43  # 49 in the wave, six pages (three tiles) each: 43 cover them
    assert i8_splits(1, 8, 32768) == 94  # 22 pages (11 tiles) each, as the wave's 21 run
    assert i8_splits(8, 8, 32768) == 12  # long splits: the wave as it was
    assert i8_splits(1, 8, 4096, page=1) == 64  # 1-token pages: 64 tokens (two tiles) each
    assert i8_splits(1, 8, 4096, page=64) == 64  # a page already holds two tiles
    assert i8_splits(1, 8, 40) == 1 and i8_splits(1, 8, 96) == 3  # short requests: a tile each
    # in general: the wave's longest split in tiles, never more splits than the wave, and the fewest
    # that keep it
    for batch, hkv, tokens, page in ((1, 8, 4096, 16), (1, 8, 32768, 16), (2, 8, 4096, 16), (1, 8, 4000, 16),
                                     (1, 4, 1000, 1), (3, 2, 12345, 16), (1, 8, 200, 16)):
        ns = i8_splits(batch, hkv, tokens, page=page)
        dev = types.SimpleNamespace(num_sms=132, pool=types.SimpleNamespace(num_kv_heads=hkv, num_pages=1 << 20))
        wave = _cuda.device._DeviceBase.default_num_splits(dev, batch, 6, max_splits=128, tokens=tokens, min_tokens=32)
        pages = -(-tokens // page)

        def tiles(n):
            return -(-(-(-pages // n) * page) // 32)

        assert 1 <= ns <= wave and tiles(ns) == tiles(wave) and (ns == 1 or tiles(ns - 1) > tiles(ns))


def test_query_group_overflow_gives_a_bound_or_no_guarantee_never_a_lost_group():
    """Tier B's u coefficient is formed on the power-of-two-normalized query group (SPEC §4.2), so
    a group whose Σq² alone overflows fp32 (entries 2e19 against K rows that are 0 there, scale 0)
    still gets a finite coefficient and a sound, finite certificate; only where the coefficient
    itself exceeds fp32 (entries 1e21) does the token meet 0·inf = NaN, which must become "no
    guarantee" (cmax = +inf, tv_bound = 1), never a finite c_t that lost u's other groups.  o and
    lse stay finite throughout (the group contributes 0 to the logits).  tests/test_gpu.py holds the
    GPU kernels to the same."""
    from test_certificate import true_tvs

    pool, table, q = overflowing_query_group_case("cpu")
    for amp, finite in ((2e19, True), (1e21, False)):
        q2 = q.copy()
        q2[:, :, :32] = amp
        r = run(pool, table, q2, cert=wc.CertConfig(tier="B"))
        assert np.all(np.isfinite(r.o)) and np.all(np.isfinite(r.lse))
        assert np.all(np.isfinite(r.cmax) == finite), amp
        if finite:
            assert np.all(true_tvs(pool, table, q2) <= r.tv_bound)
        else:
            assert np.all(r.tv_bound == 1.0)