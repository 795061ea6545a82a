"""The form-(I) decode (SPEC §6 form (I), docs/certificate.md §11): the query split, the integer
logit and its evaluation term on the CPU twin (``witcert_cupy/_cpu/form_i.py``), and
``decode_stage1_i8`` on the GPU against that twin, float64 and the flash-attention rule (SPEC §9)."""

import math

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import _contract as C
from witcert_cupy import certificate, reference
from witcert_cupy._cpu import form_i
from witcert_cupy._cpu.bits import dither_row
import adversarial as adv
from helpers import cpu_dot_order, filled_pool, on_device, page_table

D, GS = 128, 32


def _queries(rng, d=D):
    """Query rows that stress the split: Gaussian, entries over 40 decades, one group 2^70 above the
    others (the shift clamp), norms near 2^-100 and 2^100, zeros, lone entries, fp32-subnormal ones,
    half-integers at the split's scale (residuals of exactly 1/2)."""
    rows = [rng.standard_normal(d), 10.0 ** rng.uniform(-20, 20, d) * rng.choice([-1, 1], d)]
    big = rng.standard_normal(d)
    big[:GS] *= 2.0 ** 70
    rows += [big, rng.standard_normal(d) * 2.0 ** -100, rng.standard_normal(d) * 2.0 ** 100, np.zeros(d)]
    lone = np.zeros(d)
    lone[d // 2 + 13] = -3.0
    rows.append(lone)
    sub = rng.standard_normal(d)
    sub[::3] = 1e-40
    rows.append(sub)
    rows.append(_half_residuals(rng, d))
    rows.append(_flushed_group(rng, d))
    return [r.astype(np.float32) for r in rows]


def _flushed_group(rng, d=D):
    """A 2^127 entry, and a group 208 binades below it: its shift is capped at FORM_I_MAX_GROUP_SHIFT,
    so its entries scale to 1.5·2^-127 and flush to zero — Q = 0, the residual the whole entry."""
    q = rng.standard_normal(d)
    q[0] = 2.0 ** 127
    q[GS:2 * GS] = rng.choice([-1.0, 1.0], GS) * 1.5 * 2.0 ** -81
    return q


def _half_residuals(rng, d=D):
    """Each group's first entry 1/2 (scaled to 2^21), the others ±2^-23: at the split's scale
    2^22 they are ±1/2, which round to 0 — residuals of exactly 1/2 on digits that are all zero."""
    q = rng.choice([-1.0, 1.0], d) * 2.0 ** -23
    q[::GS] = 0.5
    return q


def _split(qv, sm=1 / math.sqrt(D), byp=None, bits=8):
    d = qv.shape[0]
    ng = d // GS
    dig = np.zeros((3, d), np.int64)
    sh = np.zeros(ng, np.int64)
    w1, w2, cc, gq = (np.zeros(ng, np.float32) for _ in range(4))
    sm_m, e_sm = math.frexp(float(np.float32(sm)))
    byp = np.zeros(d, np.bool_) if byp is None else byp
    ok, fm, p1, p2 = form_i.query_split(qv, byp, GS, np.float32(sm_m), e_sm, certificate.form_i_gamma(), dig, sh, w1, w2,
                                        cc, gq, bits)
    return ok, dig, sh, (w1, w2, cc, gq, fm, p1, p2)


def test_query_split_is_exact_and_in_range():
    """Q = 2^16 a0 + 2^8 a1 + a2 = rint(q·2^S) exactly, |a0| ≤ 64, a1 and a2 signed bytes, the
    residual within 1/2; each group's largest entry scaled into [2^21, 2^22) unless the head's
    largest group is more than FORM_I_MAX_GROUP_SHIFT binades above it."""
    rng = np.random.default_rng(0)
    for qv in _queries(rng):
        ok, dig, sh, _ = _split(qv)
        assert ok
        a0, a1, a2 = dig
        assert np.all(np.abs(a0) <= 64) and np.all((a1 >= -128) & (a1 <= 127)) and np.all((a2 >= -128) & (a2 <= 127))
        q64 = np.where(np.abs(qv) < 2.0 ** -126, 0.0, qv.astype(np.float64))  # (the GPU's flush to zero)
        for gr in range(D // GS):
            ch = slice(gr * GS, (gr + 1) * GS)
            scaled = np.ldexp(q64[ch], int(sh[gr]))
            scaled = np.where(np.abs(scaled) < 2.0 ** -126, 0.0, scaled)
            Q = 65536 * a0[ch] + 256 * a1[ch] + a2[ch]
            assert np.array_equal(Q, np.rint(scaled).astype(np.int64))
            assert np.all(np.abs(scaled - Q) <= 0.5)
            mx = np.abs(scaled).max()
            assert mx < 2.0 ** C.FORM_I_QUERY_BITS
            if mx > 0 and np.abs(q64).max() < 2.0 ** C.FORM_I_MAX_GROUP_SHIFT * np.abs(q64[ch]).max():
                assert mx >= 2.0 ** (C.FORM_I_QUERY_BITS - 1)
    bad = rng.standard_normal(D).astype(np.float32)
    bad[5] = np.nan
    assert not _split(bad)[0]


def test_query_split_leaves_outlier_channels_out():
    """Outlier channels (exactly stored: their fp32 dot product is added to the logit) take no digits
    and set no group's exponent: the split of a query whose outlier entries are 2^40 is, constant for
    constant, the split of the same query with those entries at zero (and not at 2^40 they would
    leave every other digit of their groups at 0)."""
    rng = np.random.default_rng(3)
    qv = rng.standard_normal(D).astype(np.float32)
    byp = np.zeros(D, np.bool_)
    byp[[3, 3 + D // 2, 40, 40 + D // 2]] = True
    qv[byp] = np.float32(2.0 ** 40)
    ok, dig, sh, consts = _split(qv, byp=byp)
    zero = np.where(byp, np.float32(0), qv).astype(np.float32)
    ok0, dig0, sh0, consts0 = _split(zero)
    assert ok and ok0 and np.array_equal(dig, dig0) and np.array_equal(sh, sh0)
    for a, b in zip(consts, consts0):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert np.all(dig[:, byp] == 0) and np.any(dig[:, ~byp] != 0)
    _, dig_in, _, _ = _split(qv)  # the same entries taken as quantized channels
    assert np.all(dig_in[:, :32][:, ~byp[:32]] == 0)
    qv[40] = np.nan  # a non-finite outlier entry still makes the head not finite
    assert not _split(qv, byp=byp)[0]


def test_split_counts_the_residuals_its_scaling_flushes():
    """Each group's term covers 65279·Σ|r| of its true residuals r = q·2^S − Q, those of entries the
    scaling flushes to zero included (a group capped FORM_I_MAX_GROUP_SHIFT binades below its head can
    sit so far below it that every q·2^S is under 2^-126): read as 0 they would leave the term short
    in that group.  Entries below 2^-126 before scaling are g₀'s (docs/certificate.md §10.3)."""
    rng = np.random.default_rng(4)
    for sm in (1 / math.sqrt(D), 2.0 ** -80):
        for qv in _queries(rng):
            ok, dig, sh, (_, _, _, gq, _, _, _) = _split(qv, sm)
            assert ok
            q64 = np.where(np.abs(qv) < 2.0 ** -126, 0.0, qv.astype(np.float64))
            for gr in range(D // GS):
                ch = slice(gr * GS, (gr + 1) * GS)
                Q = 65536 * dig[0, ch] + 256 * dig[1, ch] + dig[2, ch]
                resid = np.abs(np.ldexp(q64[ch], int(sh[gr])) - Q).sum()  # (float64: nothing flushed)
                need = float(np.float32(sm)) * math.ldexp(C.FORM_I_RESIDUAL_BOUND * resid, -9 - int(sh[gr]))
                assert float(gq[gr]) >= need, (gr, float(gq[gr]), need)


def _tokens(rng, n, d=D, bits=8):
    """``n`` tokens' codes, ``bits``-bit dither fields and fp16 scales (over their whole range,
    subnormals included), extreme codes at the ends."""
    codes = rng.integers(-127, 128, (n, d))
    codes[0] = 127
    codes[1] = -127
    jp = rng.integers(0, 1 << bits, (n, d))
    jp[0] = 0
    jp[1] = (1 << bits) - 1
    s = np.exp2(rng.uniform(-24, 15.9, (n, d // GS))).astype(np.float16).astype(np.float32)
    return codes, jp, s


def _logit_errors(qv, codes, jp, s, sm, drop_residual=False, bits=8, sums=None):
    """float64 |ℓ̃ − sm·q·x̂| of the CPU twin's logits and the evaluation term Σ_g s_g·gq_g per token
    (x̂ = s(k − ξ), ξ = (255 − 2j')/512 exactly; 16-bit dither (65535 − 2j')/2^17).  ``sums``: a
    stand-in for ``form_i.group_sums`` (what a kernel computing other sums would produce)."""
    ok, dig, sh, (w1, w2, cc, gq, fm, p1, p2) = _split(qv, sm, bits=bits)
    assert ok
    if drop_residual:  # the term without the split's residual (what a kernel that forgot it would add)
        ng = D // GS
        gq = np.zeros(ng, np.float32)
        for gr in range(ng):
            ch = slice(gr * GS, (gr + 1) * GS)
            a = np.abs(dig[:, ch]).sum(-1).astype(np.float64)
            Q = 65536 * dig[0, ch] + 256 * dig[1, ch] + dig[2, ch]
            terms = 131072 * (32767 * a[0] + 127 * a[1]) + 512 * (127 * a[2] + 255 * a[1]) + 255 * abs(Q.sum())
            x = C.FORM_I_DROPPED_BOUND * a[2] + float(certificate.form_i_gamma()) * terms
            gq[gr] = float(np.float32(sm)) * math.ldexp(x, -9 - int(sh[gr]))
    jmax = (1 << bits) - 1
    xhat = np.repeat(s, GS, axis=1).astype(np.float64) * (codes - (jmax - 2.0 * jp) / (2.0 * (jmax + 1)))
    exact = float(np.float32(sm)) * xhat @ qv.astype(np.float64)
    logit2 = form_i.logit2 if sums is None else form_i.logit2.py_func
    saved = form_i.group_sums
    if sums is not None:  # (the pure-Python logit2 looks the sums up in the module when it runs)
        form_i.group_sums = sums
    try:
        got = np.array([float(logit2(dig, codes[t].astype(np.int8), jp[t], s[t], GS, w1, w2, cc, fm, p1, p2, bits))
                        for t in range(len(codes))]) * math.log(2.0)
    finally:
        form_i.group_sums = saved
    return np.abs(got - exact), s.astype(np.float64) @ gq.astype(np.float64)


@pytest.mark.parametrize("d,bits", [(64, 8), (128, 8), (256, 8), (64, 16), (128, 16), (256, 16)])
def test_integer_logit_is_inside_its_evaluation_term(d, bits):
    """|ℓ̃ − sm·q·x̂| ≤ Σ_g s_g·gq_g (+ g₀) for every token whose logit is finite, on queries over
    the whole fp32 range and logit scales from 2^-80 to 2^20, at each head dim (one, two or four
    warps' parts) and dither width."""
    rng = np.random.default_rng(1)
    codes, jp, s = _tokens(rng, 64, d, bits)
    for sm in (1 / math.sqrt(d), 2.0 ** -80, 2.0 ** 20):
        g0 = certificate.underflow_term(d, sm)
        for qv in _queries(rng, d):
            err, term = _logit_errors(qv, codes, jp, s, sm, bits=bits)
            # (a logit past fp32 poisons its head and a term past it says "no guarantee": both sound)
            held = np.isfinite(err) & np.isfinite(term)
            assert np.all(err[held] <= term[held] + g0), (sm, np.max(err[held] - term[held]))


def test_split_residual_breaks_the_bound_without_its_term():
    """The counterexample the residual term exists for: residuals of exactly 1/2 at the split's scale
    (on digits that are zero, so the fp32 part of the term is small) against codes of ±127 and
    dither fields aligned with their sign add up; without 65279·Σ|r| the term is exceeded."""
    rng = np.random.default_rng(2)
    qv = _half_residuals(rng).astype(np.float32)
    ok, dig, sh, _ = _split(qv)
    q64 = qv.astype(np.float64)
    resid = np.concatenate([np.ldexp(q64[g * GS:(g + 1) * GS], int(sh[g])) for g in range(D // GS)])
    resid -= 65536 * dig[0] + 256 * dig[1] + dig[2]
    codes = np.where(resid > 0, 127, -127)[None, :].repeat(4, 0)
    jp = np.where(resid > 0, 255, 0)[None, :].repeat(4, 0)
    s = np.ones((4, D // GS), np.float32)
    err, term = _logit_errors(qv, codes, jp, s, 1 / math.sqrt(D), drop_residual=True)
    assert np.all(err > term)
    err, term = _logit_errors(qv, codes, jp, s, 1 / math.sqrt(D))
    assert np.all(err <= term)


def test_sixteen_bit_logit_needs_its_fourth_sum():
    """At 16-bit dither the digit sum carries R3 = Σ a2·jh' + Σ a1·jl' at weight 2 (against R2's 2^9):
    the 8-bit layout's three sums would drop up to 510·Σ(|a1| + |a2|), which no part of the term
    counts.  Digits a1 = a2 = 127 under each group's 1/2 (a0 = 0 there) against fields of 65535:
    with R3 left out every token exceeds its term; with it, none does."""
    qv = np.full(D, 32639 * 2.0 ** -22, np.float32)  # Q = 127·256 + 127 at the split's scale 2^22
    qv[::GS] = 0.5
    rng = np.random.default_rng(6)
    codes = rng.integers(-127, 128, (8, D))
    jp = np.full((8, D), 65535)
    s = np.ones((8, D // GS), np.float32)
    real = form_i.group_sums
    three = lambda *a: real(*a)[:3] + (0,)  # noqa: E731
    err, term = _logit_errors(qv, codes, jp, s, 1 / math.sqrt(D), bits=16, sums=three)
    assert np.all(err > 4 * term)
    err, term = _logit_errors(qv, codes, jp, s, 1 / math.sqrt(D), bits=16)
    assert np.all(err <= term)


@pytest.mark.parametrize("kind,d,bits", [("decades", 128, 8), ("tiny_q", 128, 8), ("tiny_sm", 128, 8), ("decades", 64, 8),
                                         ("tiny_sm", 256, 8), ("outliers", 128, 8), ("outliers", 64, 8),
                                         ("decades", 128, 16), ("tiny_sm", 64, 16), ("outliers", 256, 16)])
def test_cpu_twin_has_no_violations_on_adversarial_cases(kind, d, bits):
    """The CPU backend in form (I) (the GPU kernel's twin), Tier B, on both readings of p̃ (with
    outlier pairs: their cancelling 2^30 terms in the fp32 logit added to the integer one), at 8-
    and 16-bit dither."""
    case = adv.build(kind, "cpu", B=16, Hkv=2, G=8, d=d, bits=bits, seed=3)
    case["cert"] = wc.CertConfig(tier="B", delta_req=1e-3)
    with cpu_dot_order(certificate.FORM_I_ORDER):
        res = adv.decode(case)
    assert tuple(res.dot_order) == certificate.FORM_I_ORDER and res.dot_height is None
    cells, v2, v1 = adv.violations(case, res)
    assert cells == 256 and (v2, v1) == (0, 0)


def _page_in_every(pool, indices, k):
    """Page every ``k``-th page of the table in, for every kv head (the same pages on both backends)."""
    for page in sorted(set(int(x) for x in np.asarray(indices)[::k])):
        for h in range(pool.num_kv_heads):
            pool.page_in(0, h, page)


@pytest.mark.parametrize("d,exact,tier,pairs,bits", [c + (8,) for c in [
    (64, False, "B", 0), (128, False, "B", 0), (256, False, "B", 0), (128, True, "B", 0), (64, True, "B", 0),
    (128, False, "AB", 0), (256, False, "A", 0), (128, True, "AB", 0), (128, False, "B", 2), (64, False, "AB", 4),
    (256, False, "A", 1)]] + [(128, False, "B", 0, 16), (64, True, "AB", 0, 16), (256, False, "B", 2, 16)])
def test_cpu_twin_is_close_to_the_fp32_path(d, exact, tier, pairs, bits):
    """Form (I) against the shipped fp32 path on ordinary inputs, at each head dim the kernel serves,
    with pages served from the exact tier, with outlier pairs and at 16-bit dither: o and lse within
    fp32 noise, the certificate and the page contributions within 0.2% (both evaluation terms are a
    small share of c_t)."""
    rng = np.random.default_rng(4)
    op = np.tile(np.arange(pairs), (1, 2, 1)) if pairs else None
    cfg = wc.QuantConfig(d, dither_bits=bits, witness_bands=0 if tier == "B" else 16, outlier_pairs=op)
    pool, (ip, ix, last, _), _, _ = filled_pool(rng, lengths=[300, 77, 1], H=2, d=d, cfg=cfg,
                                                exact_tier_pages=32 * exact)
    if exact:
        _page_in_every(pool, ix, 3)
    q = rng.standard_normal((3, 8, d)).astype(np.float32)
    cert = wc.CertConfig(tier=tier, num_layers=1, steps=16)
    kw = dict(layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=last, cert=cert, num_splits=3, page_contrib=True)
    pool.ledger.reset()
    f = wc.decode_attention(q, pool, **kw)
    pool.ledger.reset()
    with cpu_dot_order(certificate.FORM_I_ORDER):
        i = wc.decode_attention(q, pool, **kw)
    np.testing.assert_allclose(i.o, f.o, rtol=0, atol=2e-6 * np.abs(f.o).max())
    np.testing.assert_allclose(i.lse, f.lse, rtol=1e-6, atol=1e-5)
    # (request 2's one token is on an exact page: its c_t is γ_t alone, whose height is form (I)'s
    # exact-tier order's, a 64-channel chain and the warps' pairwise sum, against the CPU order's)
    mixed = slice(0, 2) if exact else slice(None)
    np.testing.assert_allclose(i.cmax[mixed], f.cmax[mixed], rtol=1e-3)
    # (at 16-bit dither β is 2^-8 of 8 bits': the evaluation terms' share of c_t is larger, and form
    # (I)'s, the smaller, pulls the bound down by up to 0.25%)
    np.testing.assert_allclose(i.tv_bound[mixed], f.tv_bound[mixed], rtol=2e-3 if bits == 8 else 3e-3,
                               atol=1e-4 if exact else 0)
    if exact:
        from witcert_cupy._cpu.decode import dot_height

        h_i, h_f = certificate.sum_height(d, *certificate.FORM_I_EXACT_ORDER), dot_height(d)
        want = certificate.dot_gamma(h_i) / certificate.dot_gamma(h_f)
        np.testing.assert_allclose(i.cmax[2] / f.cmax[2], want, rtol=1e-3)
    np.testing.assert_allclose(i.page_contrib, f.page_contrib, rtol=5e-3, atol=1e-4 if exact else 1e-7)


def test_form_i_refuses_what_it_does_not_serve():
    rng = np.random.default_rng(5)
    cfg = wc.QuantConfig(D, dither_bits=24)
    pool, (ip, ix, last, _), _, _ = filled_pool(rng, lengths=[40], H=2, cfg=cfg)
    q = rng.standard_normal((1, 4, D)).astype(np.float32)
    with cpu_dot_order(certificate.FORM_I_ORDER), pytest.raises(ValueError, match="8- or 16-bit dither, not 24"):
        wc.decode_attention(q, pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=last)


# ---------------------------------------------------------------- the GPU kernel


def _gpu_pools(seed, **kw):
    cpu = filled_pool(np.random.default_rng(seed), backend="cpu", **kw)
    gpu = filled_pool(np.random.default_rng(seed), backend="cuda", **kw)
    return cpu, gpu


# (d, G, page size, tier, page contributions, exact tier) and outlier pairs: none, then the cases with
I8_TWIN_CASES = [c + (0,) for c in [
    (128, 1, 16, "B", False, False), (128, 3, 16, "B", False, False), (128, 4, 1, "B", False, False),
    (128, 7, 16, "B", False, False), (128, 8, 64, "B", False, False), (128, 4, 16, None, False, False),
    (128, 8, 1, None, False, False),
    (128, 1, 16, "B", True, False), (128, 7, 16, "B", True, False), (128, 8, 16, "B", True, False),
    (128, 7, 16, "B", True, True), (128, 2, 16, "B", True, True), (64, 8, 16, "B", True, True),
    (64, 1, 16, "B", False, False), (64, 8, 64, "B", False, False), (64, 4, 1, None, False, False),
    (64, 5, 16, "B", True, False),
    (256, 2, 16, "B", False, False), (256, 8, 1, "B", False, False), (256, 7, 64, "B", False, False),
    (256, 3, 16, None, False, False),
    (128, 4, 16, "AB", False, False), (128, 7, 16, "A", False, False), (128, 8, 1, "AB", False, False),
    (64, 3, 16, "AB", False, False), (256, 8, 16, "A", False, False),
    (128, 4, 16, "B", False, True), (128, 7, 16, "AB", False, True), (64, 3, 16, None, False, True),
    (256, 8, 16, "B", False, True), (256, 2, 16, "A", False, True)]] + [
    (128, 4, 16, "B", False, False, 2), (128, 8, 1, "AB", False, False, 4), (128, 3, 16, None, False, False, 1),
    (64, 1, 16, "B", False, False, 2), (64, 7, 16, "AB", False, False, 3), (256, 8, 16, "A", False, False, 4),
    (256, 2, 64, "B", False, False, 1)]
# (..., outlier pairs) and the dither's width: 8 bits above; 16 bits across head dims, tiers and modes
I8_TWIN_CASES = [c + (8,) for c in I8_TWIN_CASES] + [
    (128, 8, 16, "B", False, False, 0, 16), (128, 1, 1, None, False, False, 0, 16), (64, 4, 16, "B", True, True, 0, 16),
    (256, 7, 16, "AB", False, False, 0, 16), (128, 4, 16, "B", False, False, 2, 16), (128, 7, 16, "B", True, False, 0, 16),
    (64, 8, 16, "A", False, True, 0, 16), (256, 2, 16, "B", False, False, 4, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize("d,G,page,tier,pages,exact,pairs,bits", I8_TWIN_CASES)
def test_i8_kernel_matches_its_cpu_twin(d, G, page, tier, pages, exact, pairs, bits):
    """decode_stage1_i8 against the CPU backend in form (I), at each head dim, with and without page
    contributions, with pages served from the exact tier (with page contributions or not) and with
    outlier pairs (their fp32 logit and values beside the integer products), at 8- and 16-bit dither: a one-token request's lse is its logit
    (the integer sums and their fp32 combination, value for value), every lse within fp32 noise, o by
    the flash-attention rule against an fp16 attention on the same values, the certificate the
    twin's and sound against the float64 TV, the page contributions the twin's (and the pages' lse_j
    summing to lse), at several split counts (split invariance)."""
    import cupy as cp

    H = 2
    lengths = [1, 31, 33, 700, 0, 1500]
    # (a Tier-A term reads the witness: 16 bands at d = 128, 8 at 64, 64 at 256)
    bands = {64: 8, 128: 16, 256: 64}[d] if tier and "A" in tier else 0
    op = np.tile(np.arange(pairs), (1, H, 1)) if pairs else None
    kw = dict(lengths=lengths, H=H, d=d, page_size=page, exact_tier_pages=256 * exact,
              cfg=wc.QuantConfig(d, dither_bits=bits, witness_bands=bands, outlier_pairs=op))
    (pc, tc, _, _), (pg, tg, _, _) = _gpu_pools(G + page + d + (bits if bits != 8 else 0), **kw)
    if exact:  # every third page of the table exact, on both backends
        _page_in_every(pc, tc[1], 3)
        _page_in_every(pg, tg[1], 3)
    q = (np.random.default_rng(G).standard_normal((len(lengths), H * G, d)) * 1.5).astype(np.float32)
    ip, ix, ll = on_device(pg, tg)
    cert = None if tier is None else wc.CertConfig(tier=tier, num_layers=2, steps=8)
    with cpu_dot_order(certificate.FORM_I_ORDER):
        rc = wc.decode_attention(q, pc, layer=0, kv_indptr=tc[0], kv_indices=tc[1], kv_last_page_len=tc[2],
                                 cert=cert, num_splits=3, page_contrib=pages)
    pt = page_table(pc, tc)
    P = int(np.diff(tc[0]).max()) if pages else 0
    for ns in (1, 5, None):
        plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(d), cert, ns, stage1="i8", max_pages=P)
        assert plan.stage1_template == f"decode_stage1_i8<{d}, {G}, {certificate.tier_code(cert)}, " \
                                       f"{str(pages).lower()}, {str(exact).lower()}, {str(pairs > 0).lower()}, {bits}>"
        plan.launch()
        rg = plan.result()
        assert tuple(rg.dot_order) == certificate.FORM_I_ORDER
        lse_g, lse_c = rg.lse.get(), rc.lse
        # one token: lse = ℓ̃ (log2 units times ln 2) — the same integer sums and fp32 steps
        np.testing.assert_allclose(lse_g[0], lse_c[0], rtol=2e-7, atol=1e-30)
        for b, n in enumerate(lengths):
            if n == 0:
                assert np.all(rg.o[b].get() == 0) and np.all(np.isneginf(lse_g[b]))
                continue
            rows = reference.request_rows(pc, 0, pt, b)
            if exact:  # the exact tier's tokens are the rows as written
                on = np.isin(rows["slots"] // page, np.nonzero(pc.tier_map[0][0] >= 0)[0])
                for side in ("k", "v"):
                    rows[f"{side}_hat"][on] = rows[f"{side}_exact"][on]
            o64, lse64 = reference.attention(q[b], rows["k_hat"], rows["v_hat"])
            o16 = reference.attention_fp16(q[b], rows["k_hat"], rows["v_hat"])
            err = np.abs(rg.o[b].get() - o64).max(-1)
            assert np.all(err <= 2 * np.abs(o16 - o64).max(-1) + 1e-6 * np.abs(o64).max()), (b, err)
            np.testing.assert_allclose(lse_g[b], lse64, rtol=2e-6, atol=1e-5)
            if cert is None:
                continue
            np.testing.assert_allclose(rg.cmax[b].get(), rc.cmax[b], rtol=1e-5)
            # (log A is λ − lse of each split, so its resolution is fp32's at |lse|: a few ulps apart)
            np.testing.assert_allclose(rg.log_a[b].get(), rc.log_a[b], rtol=1e-4,
                                       atol=max(2e-6, 4 * float(np.spacing(np.abs(lse_c[b]).max()))))
            assert np.all(rg.gamma[b].get() >= rc.gamma[b] * (1 - 1e-6))
            tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
            assert np.all(tv <= rg.tv_bound[b].get())
        if pages:
            # (an exact-tier page's contribution is the difference of two nearly equal masses <= 1, so
            # its resolution is fp32's at 1: a few 2^-23 apart between the backends' exponentials)
            np.testing.assert_allclose(rg.page_contrib.get(), rc.page_contrib, rtol=2e-4, atol=2e-6 if exact else 1e-7)
            plse = plan.page_lse.get().astype(np.float64)
            for b, n in enumerate(lengths):
                npg = -(-n // page)
                assert np.all(np.isneginf(plse[b, :, npg:]))  # pages the request does not have
                if n:
                    tot = np.log(np.exp(plse[b, :, :npg] - lse_g[b][:, None]).sum(-1))  # Σ_j e^(lse_j) = e^lse
                    np.testing.assert_allclose(tot, 0.0, atol=2e-5)
        else:
            assert rg.page_contrib is None


@pytest.mark.gpu
@pytest.mark.parametrize("stage1", ["i8", "v2"])
def test_kernels_certify_extreme_queries_as_the_cpu(stage1):
    """The rows of ``_queries`` (40 decades, a group 2^70 above the others, norms 2^±100, subnormal
    entries, residuals of 1/2, a group whose scaled entries all flush) at sm = 2^-80, on the form-(I)
    kernel (its query split and flush to zero against the twin's: a one-token request's lse is its
    logit) and on the staged tile, each against the CPU backend in its order: cmax the CPU's, Γ at
    least the CPU's largest γ_t (both kernels bound it by ρ·cmax, whose ρ must not underflow to 0
    for a query this small), every bound sound against the float64 TV."""
    import cupy as cp

    rows = _queries(np.random.default_rng(5))
    H, G = 2, len(rows) // 2
    lengths = [1, 300]
    (pc, tc, _, _), (pg, tg, _, _) = _gpu_pools(15, lengths=lengths, H=H, d=D)
    q = np.stack([np.stack(rows[:H * G])] * len(lengths))
    sm = 2.0 ** -80
    cert = wc.CertConfig(tier="B", num_layers=1, steps=8)
    ip, ix, ll = on_device(pg, tg)
    plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, sm, cert, 2, stage1=stage1)
    assert plan.kernel_name == stage1
    plan.launch()
    rg = plan.result()
    with cpu_dot_order(rg.dot_order):
        rc = wc.decode_attention(q, pc, layer=0, kv_indptr=tc[0], kv_indices=tc[1], kv_last_page_len=tc[2],
                                 sm_scale=sm, cert=cert, num_splits=2)
    np.testing.assert_allclose(rg.lse[0].get(), rc.lse[0], rtol=2e-7 if stage1 == "i8" else 2e-6, atol=1e-30)
    np.testing.assert_allclose(rg.cmax.get(), rc.cmax, rtol=1e-5)
    assert np.all(rg.gamma.get() >= rc.gamma * (1 - 1e-6))
    pt = page_table(pc, tc)
    for b in range(len(lengths)):
        rows_b = reference.request_rows(pc, 0, pt, b)
        tv = reference.true_tv(q[b], rows_b["k_exact"], rows_b["k_hat"], sm_scale=sm)
        assert np.all(tv <= rg.tv_bound[b].get())


def _nan_query_head_alone(run, q, clean, fields):
    """``run`` on ``q`` with a NaN in request 1's query head 2: that head's o NaN and its bound 1, every
    other head's ``fields`` as in ``clean``, bit for bit."""
    qn = q.copy()
    qn[1, 2, 7] = np.nan
    r = run(qn)
    bad = np.zeros(q.shape[:2], bool)
    bad[1, 2] = True
    assert np.all(np.isnan(r.o.get()[bad])) and np.all(r.tv_bound.get()[bad] == 1.0)
    for f in fields:
        np.testing.assert_array_equal(getattr(r, f).get()[~bad], getattr(clean, f).get()[~bad], err_msg=f)


@pytest.mark.gpu
@pytest.mark.parametrize("pairs", [0, 2])
def test_i8_kernel_non_finite_inputs(pairs):
    """A NaN V row: o NaN and every certificate that attends it infinite, other requests untouched;
    a NaN query head: that head alone; a page id outside the pool: its request alone.  With outlier
    pairs the infinite value is on an outlier channel (the fp32 sums beside the integer products)."""
    import cupy as cp

    G, H = 4, 2
    lengths = [100, 300]
    cfg = wc.QuantConfig(D, outlier_pairs=np.tile(np.arange(pairs), (1, H, 1)) if pairs else None)
    pg, tg, _, _ = filled_pool(np.random.default_rng(9), backend="cuda", lengths=lengths, H=H, d=D, cfg=cfg)
    ip, ix, ll = on_device(pg, tg)
    q = np.random.default_rng(10).standard_normal((2, H * G, D)).astype(np.float32)
    cert = wc.CertConfig(tier="B", num_layers=1, steps=8)

    def run(qq, idx=ix):
        pg.ledger.reset()
        plan = pg._dev.plan(cp.asarray(qq), 0, ip, idx, ll, 1 / math.sqrt(D), cert, 3, stage1="i8")
        assert plan.stage1_template.endswith(f"{str(pairs > 0).lower()}, 8>")
        plan.launch()
        return plan.result()

    clean = run(q)
    assert bool(cp.all(cp.isfinite(clean.tv_bound)))
    _nan_query_head_alone(run, q, clean, ("o",))
    bix = ix.copy()
    bix[0] = pg.num_pages + 3
    r = run(q, bix)
    assert np.all(np.isnan(r.o[0].get())) and np.all(r.tv_bound[0].get() == 1.0)
    assert np.array_equal(r.o[1].get(), clean.o[1].get())
    # a non-finite V row in request 1's first page
    slot = int(tg[3][1][3])
    v = np.random.default_rng(11).standard_normal((1, H, D)).astype(np.float32)
    v[0, 0, int(pg.bypass_ch[0, 0, 1]) if pairs else 5] = np.inf
    k = np.random.default_rng(12).standard_normal((1, H, D)).astype(np.float32)
    pg.write(0, cp.asarray([slot]), cp.asarray(k), cp.asarray(v))
    r = run(q)
    heads0 = np.arange(G)  # kv head 0's query heads
    assert np.all(~np.isfinite(r.o[1, heads0].get())) and np.all(r.tv_bound[1, heads0].get() == 1.0)
    assert np.array_equal(r.o[0].get(), clean.o[0].get())
    assert bool(cp.all(cp.isfinite(r.tv_bound[1, G:])))
    # ... found by the heads with finite queries when one head of the group has a NaN query (the
    # kernel reads a non-finite scale off ΣP', which a NaN query's weights make NaN as well)
    qn = q.copy()
    qn[1, 2, 7] = np.nan
    r = run(qn)
    assert np.all(~np.isfinite(r.o[1, heads0].get())) and np.all(r.tv_bound[1, heads0].get() == 1.0)
    assert bool(cp.all(cp.isfinite(r.tv_bound[1, G:])))
    # a NaN K entry (its scale group's scale is not finite): every logit of that token is NaN, so
    # every head of the kv group is dead (o NaN, bound 1), the other kv head and request untouched
    k[0, 0, 9] = np.nan
    v[0, 0] = 1.0
    pg.write(0, cp.asarray([slot]), cp.asarray(k), cp.asarray(v))
    r = run(q)
    assert np.all(np.isnan(r.o[1, heads0].get())) and np.all(r.tv_bound[1, heads0].get() == 1.0)
    assert np.array_equal(r.o[0].get(), clean.o[0].get())
    assert bool(cp.all(cp.isfinite(r.o[1, G:]))) and bool(cp.all(cp.isfinite(r.tv_bound[1, G:])))


@pytest.mark.gpu
@pytest.mark.parametrize("pages", [False, True])
def test_i8_kernel_exact_tier_non_finite_inputs(pages):
    """Over the exact tier (the exact V pass finds a non-finite value in o, not value by value): a
    NaN in an exact-tier token's V makes o NaN and the certificate +inf for every head of its kv
    group, other requests and kv heads bit for bit as before; a NaN query head alone, beside an
    exact page, poisons that head and no other (its non-finite o is not read as a bad value)."""
    import cupy as cp

    G, H = 4, 2
    lengths = [100, 300]
    pg, tg, k, v = filled_pool(np.random.default_rng(13), backend="cuda", lengths=lengths, H=H, d=D,
                               exact_tier_pages=32)
    _page_in_every(pg, tg[1], 3)
    ip, ix, ll = on_device(pg, tg)
    q = np.random.default_rng(14).standard_normal((2, H * G, D)).astype(np.float32)
    cert = wc.CertConfig(tier="B", num_layers=1, steps=8)
    P = int(np.diff(tg[0]).max()) if pages else 0

    def run(qq):
        pg.ledger.reset()
        plan = pg._dev.plan(cp.asarray(qq), 0, ip, ix, ll, 1 / math.sqrt(D), cert, 3, stage1="i8", max_pages=P)
        assert plan.stage1_template.endswith(f"{str(pages).lower()}, true, false, 8>")
        plan.launch()
        return plan.result()

    clean = run(q)
    assert bool(cp.all(cp.isfinite(clean.tv_bound))) and bool(cp.all(cp.isfinite(clean.o)))
    _nan_query_head_alone(run, q, clean, ("o", "lse", "cmax", "tv_bound"))
    # a NaN value in an exact page of request 1 (kv head 1, channel 70); the write evicts the page,
    # which is paged in again for both kv heads (kv head 0's row rewritten as it was)
    pages1 = np.asarray(tg[1])[tg[0][1]:tg[0][2]]
    page = int(next(p for p in pages1 if pg.tier_map[0][1][p] >= 0))
    i = int(np.flatnonzero(tg[3][1] == page * 16 + 5)[0])
    kk, vv = k[1][i:i + 1].copy(), v[1][i:i + 1].copy()
    vv[0, 1, 70] = np.nan
    pg.write(0, cp.asarray(tg[3][1][i:i + 1]), cp.asarray(kk), cp.asarray(vv))
    assert not pg.is_exact(0, 1, page)
    pg.page_in(0, 0, page), pg.page_in(0, 1, page)
    r = run(q)
    heads1 = np.arange(G, 2 * G)  # kv head 1's query heads
    assert np.all(np.isnan(r.o[1, heads1].get())) and np.all(r.tv_bound[1, heads1].get() == 1.0)
    assert np.array_equal(r.o[0].get(), clean.o[0].get()) and np.array_equal(r.o[1, :G].get(), clean.o[1, :G].get())
    assert np.array_equal(r.tv_bound[1, :G].get(), clean.tv_bound[1, :G].get())
