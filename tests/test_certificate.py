"""SPEC §4–5: every certificate the kernels report is sound against the float64 true TV.

Zero violations, no tolerance: Tier A on adaptive worst-case queries built from the residual,
Tier B on fixed queries (plus its empirical failure rate), random and adversarial instances from
hypothesis, and the counterexamples that rule out the unsound forms.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import witcert_cupy as wc
from witcert_cupy import _contract as C
from witcert_cupy import certificate, reference
from helpers import filled_pool, page_table


def decode_all(pool, table, q, cert):
    indptr, indices, last, _ = table
    return wc.decode_attention(q, pool, layer=0, kv_indptr=indptr, kv_indices=indices,
                               kv_last_page_len=last, cert=cert)


def true_tvs(pool, table, q):
    pt = page_table(pool, table)
    out = []
    for b in range(len(table[2])):
        rows = reference.request_rows(pool, 0, pt, b)
        out.append(reference.true_tv(q[b], rows["k_exact"], rows["k_hat"]))
    return np.stack(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), d=st.sampled_from([64, 128]), G=st.sampled_from([1, 2, 4, 7]),
       S=st.integers(1, 400), page=st.sampled_from([1, 4, 16]), tier=st.sampled_from(["A", "B", "AB"]),
       bits=st.sampled_from([8, 16, 24]), qscale=st.floats(0.05, 40.0), massive=st.floats(1.0, 300.0),
       pairs=st.integers(0, 2), gs=st.sampled_from([16, 32]))
def test_no_violations_random_and_adversarial(seed, d, G, S, page, tier, bits, qscale, massive, pairs, gs):
    rng = np.random.default_rng(seed)
    H = 2
    op = np.stack([np.stack([rng.choice(d // 2, pairs, replace=False) for _ in range(H)])]) if pairs else None
    cfg = wc.QuantConfig(d, group_size=gs, dither_bits=bits, seed=seed, witness_bands=8, outlier_pairs=op)
    pool, table, k, _ = filled_pool(rng, lengths=[S, max(1, S // 3)], H=H, d=d, page_size=page, cfg=cfg,
                                    massive=[(d // 2 - 1, massive), (d - 1, massive)])
    # queries: random, or aligned with a stored key (peaky attention), scaled by qscale
    q = rng.standard_normal((2, H * G, d))
    for b in range(2):
        for hq in range(0, H * G, 2):
            q[b, hq] = k[b][rng.integers(len(k[b])), hq // G] / (np.linalg.norm(k[b][0, hq // G]) + 1e-9) * math.sqrt(d)
    q = (q * qscale / math.sqrt(d)).astype(np.float32)
    r = decode_all(pool, table, q, wc.CertConfig(tier=tier, delta_req=1e-3))
    tv = true_tvs(pool, table, q)
    assert np.all(tv <= r.tv_bound), (tv - r.tv_bound).max()
    assert np.all(tv <= r.risk) or np.all(tv[tv > r.risk] <= np.tanh(r.cmax[tv > r.risk] / 2))


@pytest.mark.parametrize("d,bands", [(128, 16), (128, 4), (64, 1)])
def test_tier_a_adaptive_worst_case_queries(d, bands):
    """Queries built from the residual itself (what an adversary who saw the cache would pick):
    Tier A is deterministic and must hold; each band of q points along r_b of one target token.  The
    residual is the exact product's, x̂ = s·fl(k − ξ), the one the witness bounds (the fp32 read
    paths' rounding of it is in their evaluation term)."""
    rng = np.random.default_rng(d + bands)
    cfg = wc.QuantConfig(d, witness_bands=bands, dither_bits=8)
    pool, table, _, _ = filled_pool(rng, lengths=[200, 60], H=2, d=d, cfg=cfg)
    pt = page_table(pool, table)
    worst_eps = []
    for trial in range(6):
        q = np.zeros((2, 4, d))
        for b in range(2):
            rows = reference.request_rows(pool, 0, pt, b)
            res = reference.exact_products(pool, 0, rows["slots"], "k") - rows["k_exact"]  # [S, Hkv, d]
            for hq in range(4):
                t = rng.integers(len(res))
                sign = 1 if trial % 2 else -1
                q[b, hq] = sign * res[t, hq // 2] / (np.linalg.norm(res[t, hq // 2]) + 1e-30)
                q[b, hq] *= 10.0 ** (trial - 1) * math.sqrt(d)
        q = q.astype(np.float32)
        r = decode_all(pool, table, q, wc.CertConfig(tier="A"))
        tv = true_tvs(pool, table, q)
        assert np.all(tv <= r.tv_bound)
        for b in range(2):
            rows = reference.request_rows(pool, 0, pt, b)
            k_hat = reference.exact_products(pool, 0, rows["slots"], "k")
            np.testing.assert_allclose(rows["k_hat"], k_hat, rtol=2.0**-24, atol=0)  # the fp32 reading: one rounding
            eps = reference.logits(q[b], k_hat) - reference.logits(q[b], rows["k_exact"])
            ca = reference.c_tier_a(q[b], rows["k_witness"], cfg)
            assert np.all(np.abs(eps) <= ca)
            worst_eps.append((np.abs(eps) / ca).max())
    assert max(worst_eps) > 0.5  # the adversary gets close to the Cauchy–Schwarz edge


def test_tier_b_fixed_queries_and_failure_rate():
    """Per-token Tier-B event |ε_t| > c^B_t over many (cell, token) pairs, at a large δ so that the
    bound is tight enough to fail sometimes: the empirical rate stays below δ_loc / S."""
    rng = np.random.default_rng(7)
    d, H, G = 128, 4, 2
    fails = tokens = cells = cell_fails = 0
    delta = 0.5
    for inst in range(6):
        cfg = wc.QuantConfig(d, seed=inst, dither_bits=8)
        pool, table, _, _ = filled_pool(rng, lengths=[64] * 6, H=H, d=d, cfg=cfg)
        q = rng.standard_normal((6, H * G, d)).astype(np.float32) * 3
        cert = wc.CertConfig(tier="B", delta_req=delta)  # L = T = 1: δ_loc = δ / Hq
        r = decode_all(pool, table, q, cert)
        pt = page_table(pool, table)
        dl = certificate.delta_loc(cert, H * G, pool.num_layers)
        for b in range(6):
            rows = reference.request_rows(pool, 0, pt, b)
            k_hat = reference.exact_products(pool, 0, rows["slots"], "k")
            np.testing.assert_allclose(rows["k_hat"], k_hat, rtol=2.0**-24, atol=0)  # the fp32 reading: one rounding
            eps = reference.logits(q[b], k_hat) - reference.logits(q[b], rows["k_exact"])
            cb = reference.c_tier_b(q[b], rows["k_scales"], cfg, layer=0, kv_heads_bypass=pool.bypass_ch[0],
                                    S=64, delta_loc=dl)
            over = np.abs(eps) > cb
            fails += int(over.sum())
            tokens += over.size
            cell_fails += int(over.any(-1).sum())
            cells += over.shape[0]
            tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
            assert np.all(tv <= r.tv_bound[b])
    assert cell_fails / cells <= dl
    assert fails / tokens <= dl / 64


def test_dispersion_form_counterexample():
    """SPEC §5: p̃ = (½, ½), c = (0.1, 0.1), ε = (0.1, −0.1)."""
    pt = np.array([0.5, 0.5])
    c = np.array([0.1, 0.1])
    eps = np.array([0.1, -0.1])
    p = pt * np.exp(-eps)
    p /= p.sum()
    tv = 0.5 * np.abs(p - pt).sum()
    assert math.isclose(tv, 0.049834, abs_tol=1e-6)
    cbar = (pt * c).sum()
    dispersion = 0.5 * math.exp(2 * c.max()) * ((pt * np.abs(c - cbar)).sum() + cbar * (math.exp(c.max()) - 1))
    assert math.isclose(dispersion, 0.006423, abs_tol=1e-6)
    assert tv > dispersion  # the unsound form under-reports
    ours = min(1.0, reference.e_form_risk(pt, c), math.tanh(c.max() / 2))
    assert tv <= ours


def test_aggregated_variance_form_counterexample():
    """½(e^{2u} − 1) with u from Σ p̃ ς² ignores the union over tokens: with every token at the edge of
    its own Tier-B event (alternating signs), the true TV exceeds it while the e-form holds.  (The gap
    needs log(2S/δ) > 4 log(2/δ): S = 4096 at δ = 0.5; at δ = 1e-2 it takes S ~ 1e7.)"""
    S, delta = 4096, 0.5
    sig = 0.02
    pt = np.full(S, 1.0 / S)
    u_tok = math.sqrt(2 * sig**2 * math.log(2 * S / delta))
    eps = np.where(np.arange(S) % 2 == 0, u_tok, -u_tok)
    p = pt * np.exp(-eps)
    p /= p.sum()
    tv = 0.5 * np.abs(p - pt).sum()
    u_agg = math.sqrt(2 * (pt * sig**2).sum() * math.log(2 / delta))
    aggregated = 0.5 * (math.exp(2 * u_agg) - 1)
    assert tv > aggregated
    c = np.full(S, u_tok)
    assert tv <= min(reference.e_form_risk(pt, c), math.tanh(c.max() / 2))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**31), S=st.integers(2, 50), cscale=st.floats(1e-4, 5.0),
       peaky=st.floats(0.0, 20.0))
def test_e_form_and_tanh_bounds_hold_for_any_errors_within_c(seed, S, cscale, peaky):
    """The theorems behind §5, checked in float64 for arbitrary |ε_t| ≤ c_t (including ±c_t edges)."""
    rng = np.random.default_rng(seed)
    lg = rng.standard_normal(S) * peaky
    pt = reference.softmax(lg[None])[0]
    c = rng.uniform(0, cscale, S)
    eps = c * rng.choice([-1.0, 1.0, rng.uniform(-1, 1)], S)
    p = pt * np.exp(-eps)
    p /= p.sum()
    tv = 0.5 * np.abs(p - pt).sum()
    assert tv <= min(1.0, reference.e_form_risk(pt, c)) + 1e-15
    assert tv <= math.tanh(c.max() / 2) + 1e-15


def test_tanh_bound_is_attained_by_two_point_distribution():
    w = 0.8  # c_max; osc = 2w
    a = math.exp(2 * w) - 1
    pi = 1 / (math.sqrt(1 + a) + 1)
    pt = np.array([pi, 1 - pi])
    eps = np.array([-w, w])
    p = pt * np.exp(-eps)
    p /= p.sum()
    tv = 0.5 * np.abs(p - pt).sum()
    assert math.isclose(tv, math.tanh(w / 2), rel_tol=1e-12)


@pytest.mark.parametrize("height", [12, 19, 23, 65, 128])
def test_quantized_evaluation_term_covers_the_fp32_reading(height):
    """An fp32 read path's logit differs from ``sm·q·x̂`` (x̂ the exact product s·fl(k − ξ), what the
    witness and Tier B bound) by its dot product's rounding on ``fl(x̂)`` and by ``fl(x̂) − x̂``:
    ``127.5·(1 + u)·(γ_n·(1 + u) + u)`` per unit of ``sm·s_g·Q1_g`` (docs/certificate.md §10.1).
    ``gamma_steps`` covers both; the term without the product's rounding did not."""
    u = C.UNIT_ROUNDOFF
    g = certificate.dot_gamma(height)
    need = C.CODE_ABS_BOUND * (1 + u) * (g * (1 + u) + u)
    assert float(certificate.gamma_steps(height)) >= need
    assert C.CODE_ABS_BOUND * (1 + u) * g < need  # (the previous term)
    assert float(certificate.gamma_steps(height)) <= need * (1 + 2.0 ** -20)


def test_risk_and_tv_bound_formulas():
    la = np.array([0.0, 0.1, np.inf, np.nan, 0.0], np.float32)
    lse = np.array([-np.inf, 0.5, 3.0, 3.0, 20.0], np.float32)
    R = certificate.risk_from_log_a(la, lse)
    assert R[0] == 0  # no tokens
    res = C.LOG_A_RESOLUTION_ULPS * 2.0**-24
    assert math.isclose(R[1], (math.exp(2 * (0.1 + res)) - 1) / 2, rel_tol=1e-7)
    assert np.isinf(R[2]) and np.isinf(R[3])
    assert math.isclose(R[4], (math.exp(2 * 20 * res) - 1) / 2, rel_tol=1e-6)  # never 0 with tokens
    R = R[:4]
    tvb = certificate.tv_bound(R, np.array([0.0, 0.05, np.inf, np.nan], np.float32))
    assert tvb[0] == 0 and math.isclose(tvb[1], math.tanh(0.025), rel_tol=1e-6)
    assert tvb[2] == 1 and tvb[3] == 1
    assert math.isclose(certificate.a_threshold(0.2), math.sqrt(1.4))
    cert = wc.CertConfig(delta_req=1e-2, num_layers=32, steps=1000)
    assert math.isclose(certificate.delta_loc(cert, 32), 1e-2 / (32 * 32 * 1000))
    lb = certificate.log_budget(cert, 32)
    assert lb.dtype == np.float32 and float(lb) >= math.log(2 / certificate.delta_loc(cert, 32))


def test_budget_layers_default_to_the_pool_s():
    """SPEC §4.4: ``CertConfig(num_layers=None)`` (the default) takes the pool's layer count, so a
    2-layer pool's cells share δ_req instead of each layer spending all of it (before, L defaulted
    to 1); without a pool to ask, the budget refuses to guess."""
    cert = wc.CertConfig(delta_req=1e-2, steps=4)
    assert cert.num_layers is None
    assert math.isclose(certificate.delta_loc(cert, 8, 2), 1e-2 / (2 * 8 * 4))
    assert certificate.log_budget(cert, 8, 2) > certificate.log_budget(wc.CertConfig(delta_req=1e-2, steps=4,
                                                                                       num_layers=1), 8)
    with pytest.raises(ValueError, match="num_layers"):
        certificate.delta_loc(cert, 8)
    rng = np.random.default_rng(9)
    pool, table, _, _ = filled_pool(rng, lengths=[120], H=1, d=64, cfg=wc.QuantConfig(64), L=2)
    q = rng.standard_normal((1, 2, 64)).astype(np.float32)
    indptr, indices, last, _ = table
    kw = dict(layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)
    r_default = wc.decode_attention(q, pool, cert=cert, **kw)
    r_two = wc.decode_attention(q, pool, cert=wc.CertConfig(delta_req=1e-2, steps=4, num_layers=2), **kw)
    r_one = wc.decode_attention(q, pool, cert=wc.CertConfig(delta_req=1e-2, steps=4, num_layers=1), **kw)
    np.testing.assert_array_equal(r_default.cmax, r_two.cmax)
    assert np.all(r_default.cmax > r_one.cmax)
