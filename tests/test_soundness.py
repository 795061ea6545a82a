"""The certificate holds for every legal input (SPEC §3.6, §4.1–4.4, §5, §9), on both backends.

The adversarial cases of ``adversarial.py`` are judged on both readings of p̃ with zero violations;
the counterexamples that broke the certificate before the evaluation term and the normalized
coefficients stay here, each shown to break the bound without its fix.
"""

import math

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import certificate, reference
import adversarial as adv
from helpers import filled_pool, page_table

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]

# (kind, tiers): a black-box fp16 store and the adaptive queries are Tier A by construction
CASES = [("outliers", ("A", "B", "AB")), ("exact_tier", ("B", "AB")), ("fp16", ("A",)),
         ("decades", ("A", "B", "AB")), ("tiny_q", ("A", "B", "AB")), ("tiny_sm", ("A", "B", "AB")),
         ("adaptive", ("A",))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind,tiers", CASES, ids=[c[0] for c in CASES])
def test_adversarial_cases_have_no_violations(backend, kind, tiers):
    """Zero violations over 1024 cells per (case, tier), on the kernel's weights (reading 1) and on
    ``softmax(sm·q·x̂)`` (reading 2)."""
    for i, tier in enumerate(tiers):
        case = adv.build(kind, backend, B=32, Hkv=4, G=8, seed=i)
        case["cert"] = wc.CertConfig(tier=tier if kind not in ("fp16", "adaptive") else "A", delta_req=1e-3)
        res = adv.decode(case)
        if backend == "cuda" and kind in ("outliers", "decades", "tiny_q", "tiny_sm", "adaptive"):  # (the
            # form-(I) kernel, every tier: no exact tier, 16 witness bands)
            assert tuple(res.dot_order) == certificate.FORM_I_ORDER, res.dot_order
        cells, v2, v1 = adv.violations(case, res)
        assert cells == 1024 and (v2, v1) == (0, 0), (kind, tier, v2, v1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_absorbed_logits_break_the_bound_without_the_evaluation_term(backend):
    """The counterexample of SPEC §4.1: exact outlier channels with cancelling 2^30 terms make the
    kernel's fp32 logit lose every other channel.  c^AB alone (float64, from the stored scales and
    witness) is then below the true TV of the weights the kernel applied for most cells; with γ_t
    the reported bound holds.  (On the GPU a step with page contributions, which the staged tile's
    fp32 dot products serve: the form-(I) kernel's integer logit absorbs nothing, and its outlier
    channels' chain cancels exactly, test_outlier_logit_breaks_the_form_i_bound_without_its_exact_term.)"""
    case = adv.build("outliers", backend, B=8, Hkv=2, G=4)
    res = adv.decode(case, page_contrib=backend == "cuda")
    assert tuple(res.dot_order) != certificate.FORM_I_ORDER
    tv1 = adv.true_tv_reading1(case, res)
    pool, q, sm = case["pool"], case["q"], case["sm"]
    pt = page_table(pool, case["table"])
    old = np.empty_like(tv1)
    for b in range(q.shape[0]):
        rows = reference.request_rows(pool, 0, pt, b)
        S = len(rows["slots"])
        c = np.minimum(reference.c_tier_a(q[b], rows["k_witness"], pool.config, sm_scale=sm),
                       reference.c_tier_b(q[b], rows["k_scales"], pool.config, layer=0,
                                          kv_heads_bypass=pool.bypass_ch[0], S=S,
                                          delta_loc=certificate.delta_loc(case["cert"], q.shape[1], pool.num_layers),
                                          sm_scale=sm))
        p_t = reference.softmax(reference.logits(q[b], rows["k_hat"], sm))
        A = (p_t * np.exp(c)).sum(-1)
        old[b] = np.minimum(np.minimum(1.0, (A * A - 1) / 2), np.tanh(c.max(-1) / 2))
    assert np.mean(tv1 > old + adv.READOUT_TOL) > 0.5
    assert np.all(tv1 <= adv.host(res.tv_bound) + adv.READOUT_TOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_outlier_logit_breaks_the_form_i_bound_without_its_exact_term(backend, monkeypatch):
    """Form (I) with outlier pairs (docs/certificate.md §11): the outlier channels' fp32 logit is added
    to the integer one.  With ``±2^20`` query entries of one sign against keys of 1024 that logit is
    about 2^28 in log2 units for every token, so the one addition rounds the integer part to a
    multiple of 16 and the kernel's weights lose it.  With the exact channels' term (``gamma_exact``
    per unit of ``Σ|q_c||k_c|``) removed the bound falls below the true TV of the weights the
    kernel applied for most cells; with it the bound holds."""
    from helpers import cpu_dot_order

    case = adv.build("outliers", backend, B=8, Hkv=2, G=4)
    d = case["q"].shape[-1]
    case["q"][:, :, 3 + d // 2] = adv.BIG  # (both channels of the pair the same sign: no cancelling)
    case["cert"] = wc.CertConfig(tier="B", delta_req=1e-3)

    def run():
        with cpu_dot_order(certificate.FORM_I_ORDER if backend == "cpu" else None):
            res = adv.decode(case)
        assert tuple(res.dot_order) == certificate.FORM_I_ORDER
        return res

    res = run()
    tv1 = adv.true_tv_reading1(case, res)
    assert np.all(tv1 <= adv.host(res.tv_bound) + adv.READOUT_TOL)
    scalars = certificate.form_i_scalars
    monkeypatch.setattr(certificate, "form_i_scalars",
                        lambda d, sm, bits=8, outlier_channels=0, exact_tier=False: scalars(d, sm, bits)[:2] + (np.float32(0),))
    old = adv.host(run().tv_bound)
    assert np.mean(tv1 > old + adv.READOUT_TOL) > 0.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_outlier_term_is_their_chain_not_a_whole_dot_product(backend):
    """Form (I)'s outlier channels are an fp32 chain of NP2 products of their own (docs/certificate.md
    §11): their term is ``gamma_exact`` at height ``NP2 + FORM_I_OUTLIER_CHAIN_EXTRA``, not at an
    exact-tier token's 128-channel height (7× larger at one pair: on the demo the evaluation term
    adds 1.41% to the median bound at that height, 0.63% at the chain's).  Here every token's outlier
    part ``Σ|q_c||k_c| = 2·2^20·1024`` dwarfs
    the integer part's term, so Γ (the largest γ_t) is that part's term to within the slack; the
    bound still holds (test_outlier_logit_breaks_the_form_i_bound_without_its_exact_term)."""
    from witcert_cupy import _contract as C
    from helpers import cpu_dot_order

    case = adv.build("outliers", backend, B=4, Hkv=2, G=4)
    case["cert"] = wc.CertConfig(tier="AB", delta_req=1e-3)
    with cpu_dot_order(certificate.FORM_I_ORDER if backend == "cpu" else None):
        res = adv.decode(case)
    assert tuple(res.dot_order) == certificate.FORM_I_ORDER
    np2 = case["pool"].bypass_ch.shape[-1]
    chain = float(certificate.gamma_exact(np2 + C.FORM_I_OUTLIER_CHAIN_EXTRA, case["sm"])) * 2 * adv.BIG * adv.BIG_KEY
    ratio = adv.host(res.gamma) / chain
    assert np.all(ratio >= 1.0) and np.all(ratio <= C.C_EVAL_SLACK * (1 + 2.0 ** -16)), (ratio.min(), ratio.max())
    assert np.all(adv.true_tv_reading1(case, res) <= adv.host(res.tv_bound) + adv.READOUT_TOL)


def _unnormalized_c_b(q, scales, cfg, sm, log_term):
    """Tier B's c_t formed as the kernels did before SPEC §4.2: float32 sums of q², |q| and sm² on
    the raw query (what flushes to zero for a query of norm 2^-80)."""
    q = q.astype(np.float32)
    gs = cfg.group_size
    q2 = (q * q).reshape(*q.shape[:-1], -1, gs).sum(-1, dtype=np.float32)
    q1 = np.abs(q).reshape(*q.shape[:-1], -1, gs).sum(-1, dtype=np.float32)
    sm = np.float32(sm)
    b2 = np.float32(2) * (sm * sm / np.float32(12)) * q2 * np.float32(log_term)
    b1 = sm * q1 * certificate.beta_steps(cfg.dither_bits)
    s = scales.astype(np.float32)
    return np.sqrt(np.einsum("sg,g->s", s * s, b2)) + np.einsum("sg,g->s", s, b1)


def test_tiny_queries_break_the_bound_without_normalized_coefficients():
    """The counterexample of SPEC §4.2: for a query of norm 2^-80, Σq² flushes to 0 in fp32, so the
    unnormalized c^B is β alone and tanh(cmax/2) falls below the true TV; the normalized
    coefficients keep the bound sound."""
    case = adv.build("tiny_q", "cpu", B=4, Hkv=1, G=4, tier="B")
    res = adv.decode(case)
    tv = adv.true_tv_reading2(case)
    pool, q = case["pool"], case["q"]
    pt = page_table(pool, case["table"])
    rows = reference.request_rows(pool, 0, pt, 0)
    c_old = np.stack([_unnormalized_c_b(q[0, hq], rows["k_scales"][:, 0], pool.config, case["sm"], 30.0)
                      for hq in range(q.shape[1])])
    assert np.all(np.tanh(c_old.max(-1) / 2) < tv[0])
    assert np.all(tv <= adv.host(res.tv_bound)) and np.all(tv > 0)


def test_scale_invariance_of_the_certificate():
    """SPEC §4.2: scaling the query by 2^k and sm by 2^-k (the same logits) changes no coefficient;
    the certificate is the same up to fp32 rounding of the logits, for k far past where Σq² or sm²
    leave fp32."""
    rng = np.random.default_rng(5)
    cfg = wc.QuantConfig(128, witness_bands=16)
    pool, table, _, _ = filled_pool(rng, lengths=[200, 90], H=2, cfg=cfg)
    q = rng.standard_normal((2, 8, 128)).astype(np.float32)
    base = None
    for k in (0, 70, -70, 100):
        indptr, indices, last, _ = table
        pool.ledger.reset()  # each scale: a fresh request
        r = wc.decode_attention((q * np.float32(2.0 ** k)), pool, layer=0, kv_indptr=indptr, kv_indices=indices,
                                kv_last_page_len=last, sm_scale=2.0 ** -k / math.sqrt(128),
                                cert=wc.CertConfig(tier="AB"))
        if base is None:
            base = r
        np.testing.assert_allclose(r.cmax, base.cmax, rtol=1e-5)
        np.testing.assert_allclose(r.risk, base.risk, rtol=1e-4)


def test_s_counts_every_attended_token():
    """SPEC §4.3: S in log(2S/δ_loc) is every token the query attends, so paging one page in leaves
    every other page's λ_j bit for bit (before, S counted quantized tokens only and shrank)."""
    rng = np.random.default_rng(2)
    cfg = wc.QuantConfig(128)
    pool, table, _, _ = filled_pool(rng, lengths=[160], H=1, cfg=cfg)
    pool2 = wc.KVPool(1, 1, 128, pool.num_pages, 16, cfg, keep_exact=True, exact_tier_pages=4)
    pool2.write(0, table[3][0], pool.exact_rows(0, table[3][0], "k"), pool.exact_rows(0, table[3][0], "v"))
    q = rng.standard_normal((1, 4, 128)).astype(np.float32)
    indptr, indices, last, _ = table
    kw = dict(layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last,
              cert=wc.CertConfig(tier="B"), page_contrib=True, num_splits=1)
    before = wc.decode_attention(q, pool2, **kw)
    pool2.page_in(0, 0, int(indices[3]))
    pool2.ledger.reset()  # the repaired step, as a fresh request
    after = wc.decode_attention(q, pool2, **kw)
    keep = [j for j in range(len(indices)) if j != 3]
    assert np.all(before.page_contrib[..., 3] > 0) and np.all(after.page_contrib[..., 3] < before.page_contrib[..., 3])
    # the quantized pages' c_t did not change: their contributions move only through lse
    ratio = (after.page_contrib[..., keep] / before.page_contrib[..., keep])
    assert np.allclose(ratio, ratio[..., :1], rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_v_makes_every_certificate_that_attends_it_infinite(backend):
    """SPEC §3.6 on the V side: a NaN in one V row stores an infinite scale; every head that attends
    that slot has an infinite certificate, requests that do not attend it keep theirs."""
    rng = np.random.default_rng(3)
    pool, table, k, v = filled_pool(rng, lengths=[100, 60], H=2, cfg=wc.QuantConfig(128, witness_bands=8),
                                    backend=backend)
    slots = table[3][0]
    xp = pool.xp
    vbad = v[0].copy()
    vbad[17, 1, 5] = np.nan
    pool.write(0, xp.asarray(slots), xp.asarray(k[0]), xp.asarray(vbad))
    q = rng.standard_normal((2, 8, 128)).astype(np.float32)
    for tier in ("A", "B", "AB"):
        indptr, indices, last, _ = table
        pool.ledger.reset()  # each tier: a fresh request
        r = wc.decode_attention(xp.asarray(q), pool, layer=0, kv_indptr=xp.asarray(indptr),
                                kv_indices=xp.asarray(indices), kv_last_page_len=xp.asarray(last),
                                cert=wc.CertConfig(tier=tier))
        tv = adv.host(r.tv_bound)
        cmax = adv.host(r.cmax)
        assert np.all(tv[0, 4:] == 1.0) and np.all(np.isinf(cmax[0, 4:])), tier  # kv head 1 of request 0
        assert np.all(np.isfinite(cmax[0, :4])) and np.all(np.isfinite(cmax[1])), tier
        assert np.all(np.isfinite(adv.host(r.risk)[1])), tier


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_finite_query_head_leaves_its_group_alone(backend):
    """A NaN in one query head makes that head's output and certificate non-finite and nothing
    else: the other heads of its kv group get exactly what they get without it; gated_decode does
    not page in for it and warns of nothing."""
    import warnings

    rng = np.random.default_rng(4)
    cfg = wc.QuantConfig(128, witness_bands=8)
    pool, table, _, _ = filled_pool(rng, lengths=[120, 50], H=2, cfg=cfg, backend=backend)
    q = rng.standard_normal((2, 8, 128)).astype(np.float32) * 3
    qbad = q.copy()
    qbad[0, 1, 7] = np.nan
    xp = pool.xp
    indptr, indices, last, _ = table
    kw = dict(layer=0, kv_indptr=xp.asarray(indptr), kv_indices=xp.asarray(indices),
              kv_last_page_len=xp.asarray(last), cert=wc.CertConfig(tier="AB"), num_splits=2)
    good = wc.decode_attention(xp.asarray(q), pool, **kw)
    pool.ledger.reset()  # the same step with the bad query, as a fresh request
    bad = wc.decode_attention(xp.asarray(qbad), pool, **kw)
    h = adv.host
    assert np.all(np.isnan(h(bad.o)[0, 1])) and h(bad.tv_bound)[0, 1] == 1.0
    keep = np.ones((2, 8), bool)
    keep[0, 1] = False
    for f in ("o", "lse", "log_a", "cmax", "risk"):
        np.testing.assert_array_equal(h(getattr(bad, f))[keep], h(getattr(good, f))[keep], err_msg=f)
    gpool = wc.KVPool(1, 2, 128, pool.num_pages, 16, cfg, keep_exact=True, exact_tier_pages=16, backend=backend)
    for s in table[3]:
        gpool.write(0, xp.asarray(s), xp.asarray(pool.exact_rows(0, s, "k")), xp.asarray(pool.exact_rows(0, s, "v")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, rep = wc.gated_decode(xp.asarray(qbad), gpool, **{**kw, "cert": wc.CertConfig(tier="AB", tau=0.5)})
    assert not rep.over_threshold[0, 1]
    assert rep.pages_repaired <= 16


def test_page_in_validates_before_it_takes_a_tier_slot():
    """Bad page_in calls raise naming the argument and leave the tier as it was: four of them on a
    tier of four leave four free slots (before, each popped one)."""
    rng = np.random.default_rng(6)
    pool = wc.KVPool(2, 2, 64, 8, 16, wc.QuantConfig(64), keep_exact=True, exact_tier_pages=4)
    pool.write(0, np.arange(32), rng.standard_normal((32, 2, 64)).astype(np.float32),
               rng.standard_normal((32, 2, 64)).astype(np.float32))
    before = pool.tier_map.copy()
    for args, exc, name in (((0, 0, -1), ValueError, "page"), ((0, 0, 2.5), TypeError, "page"),
                            ((0, 0, True), TypeError, "page"), ((0, 2, 0), ValueError, "kv_head"),
                            ((2, 0, 0), ValueError, "layer"), ((0, 0, 8), ValueError, "page")):
        with pytest.raises(exc, match=name):
            pool.page_in(*args)
    assert pool.tier_free == 4 and np.array_equal(pool.tier_map, before)
    for p in range(4):
        assert pool.page_in(0, 0, p) == pool.page_in_bytes
    assert pool.tier_free == 0


def _chain_adversary(d):
    """float32 terms in [1, 2) whose sum in one fp32 chain rounds the same way at every step, by
    almost half an ulp of the running sum: the chain's error grows like ``d²·u/4``, far past
    ``γ_h·Σ|t|`` for a blocked order's height ``h``."""
    s, out = np.float32(0), []
    for _ in range(d):
        ulp = float(np.spacing(s)) if s > 0 else 2.0 ** -23
        # the term that puts the exact sum just below the next midpoint of the sum's grid
        target = float(s) + 1.25
        mid = (math.floor(target / ulp) + 0.5) * ulp
        t = np.float32(mid - float(s) - ulp * 2.0 ** -4)
        out.append(t)
        s = np.float32(s + t)
    return np.array(out, np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_evaluation_term_covers_the_kernel_s_summation_order(backend):
    """The evaluation term γ_t is computed for the height of the kernel's own summation tree
    (``certificate.sum_height``: 16-channel chains added pairwise on the CPU, 64-channel halves on
    decode_stage1_f16), not for any order: a query whose terms all round one way in a single fp32
    chain errs by several times the term a blocked order of height 12 or 19 is allowed, and the
    kernel's logit (a one-token request's ``lse``) stays within the ``Γ`` it reports, which is
    the fp16 store's ``gamma_exact(height)·||q||·||x||`` (with C_EVAL_SLACK)."""
    d = 128
    t = _chain_adversary(d)
    exact = float(np.sum(t.astype(np.float64)))
    chain = np.float32(0)
    for x in t:
        chain = np.float32(chain + x)
    pool = wc.Fp16Pool(1, 1, d, 1, 16, witness_bands=16, keep_exact=True, backend=backend)
    xp = pool.xp
    pool.write(0, xp.asarray([0]), xp.ones((1, 1, d), xp.float32), xp.zeros((1, 1, d), xp.float32))
    r = wc.decode_attention(xp.asarray(t.reshape(1, 1, d)), pool, layer=0, kv_indptr=xp.asarray([0, 1]),
                            kv_indices=xp.asarray([0]), kv_last_page_len=xp.asarray([1]), sm_scale=1.0,
                            cert=wc.CertConfig(tier="A"))
    lse, gam = float(adv.host(r.lse)[0, 0]), float(adv.host(r.gamma)[0, 0])
    assert abs(lse - exact) <= gam
    norms = float(np.linalg.norm(t.astype(np.float64))) * math.sqrt(d)  # ||q||·||x||, x = ones
    want = float(certificate.gamma_exact(r.dot_height, 1.0)) * norms
    assert want <= gam <= want * (1 + 2.0 ** -9)
    # the chain errs past the term of a blocked order (its height is the d-term chain's, not theirs)
    for height in (12, 19):
        assert abs(float(chain) - exact) > float(certificate.gamma_exact(height, 1.0)) * norms
