"""CI (no GPU): the arithmetic the tensor-core extend kernel relies on (docs/certificate.md §9).

The kernel's logits are ``sm·2^-shift·Σ_g s_g·Σ_{c∈g} [(qh + ql)_c·k_c + qh_c·(−ξ_c)]`` with fp16
operands and fp32 accumulation.  These tests check, in float64 (where every fp16 product is exact),
that the operands it treats as exact are exact and that ``tc_logit_term`` bounds what the split
leaves out, for queries of any dynamic range."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import _contract as C
from witcert_cupy import certificate as cm

D, GS = 128, 32


def test_codes_and_dither_are_exact_fp16_operands():
    k = np.arange(-C.CODE_MAX, C.CODE_MAX + 1, dtype=np.float64)
    assert np.array_equal(k.astype(np.float16).astype(np.float64), k)
    j = np.arange(256, dtype=np.float64)
    neg_xi = (255 - 2 * j) / 512  # −ξ at 8-bit dither (SPEC §2)
    assert np.array_equal(neg_xi.astype(np.float16).astype(np.float64), neg_xi)
    assert np.abs(neg_xi).max() <= C.TC_XI_BOUND
    # the kernel builds −ξ from the field j as ((1024 + j)·(−1/256) + 4.5) − 1/512 in f16x2 arithmetic:
    # every intermediate is exact, so no rounding happens
    h = (1024 + j).astype(np.float16)
    t = (h.astype(np.float64) * (-1 / 256) + 4.5)
    assert np.array_equal(t.astype(np.float16).astype(np.float64), t)
    assert np.array_equal((t - 1 / 512).astype(np.float16).astype(np.float64), neg_xi)
    # and the code k from the byte k + 128 under the exponent of 1024: 1024 + k + 128 − 1152
    assert np.array_equal((1024 + k + 128).astype(np.float16).astype(np.float64) - 1152, k)


def _queries(rng):
    q = rng.standard_normal((64, D)) * np.exp(rng.uniform(-12, 6, (64, 1)))
    q[1] *= np.exp(rng.uniform(-30, 0, D))  # entries over 13 decades in one row
    q[2] = 0.0
    q[3, :5] = 1e-30  # fp32 subnormal-range entries with a normal row maximum
    q[3, 5:] = rng.standard_normal(D - 5)
    q[4] = 1e-35  # a whole row near the bottom of fp32
    return q.astype(np.float32)


def test_split_residual_bound_holds_for_any_dynamic_range():
    rng = np.random.default_rng(0)
    q = _queries(rng)
    qh, ql, shift, e1, e2 = cm.tc_query_split(q)
    assert np.all(np.abs(qh.astype(np.float64)).max(-1)[np.abs(q).max(-1) > 0] < 2.0 ** C.TC_QUERY_EXPONENT)
    S = 300
    k = rng.integers(-127, 128, size=(S, D)).astype(np.float64)
    j = rng.integers(0, 256, size=(S, D)).astype(np.float64)
    neg_xi = (255 - 2 * j) / 512
    scales = np.exp(rng.uniform(-8, 2, (S, D // GS))).astype(np.float16).astype(np.float64)
    sm = 1 / np.sqrt(D)
    s_ch = np.repeat(scales, GS, axis=1)                               # [S, D]
    x_hat = s_ch * (k + neg_xi)                                         # exact reconstruction
    exact = sm * q.astype(np.float64) @ x_hat.T                         # [64, S]
    un = np.ldexp(1.0, -shift)[:, None]
    qhf, qlf = qh.astype(np.float64), ql.astype(np.float64)
    kernel = sm * un * ((qhf + qlf) @ (s_ch * k).T + qhf @ (s_ch * neg_xi).T)
    gamma = cm.tc_logit_term(q, np.broadcast_to(scales[:, None, :], (S, 64, D // GS)), group_size=GS,
                             sm_scale=sm)
    slack = 1e-12 * sm * np.abs(q.astype(np.float64)) @ np.abs(x_hat).T
    err = np.abs(kernel - exact)
    assert np.all(err <= gamma + slack)
    # not vacuous: the bound is within a small factor of what happens on ordinary rows
    ordinary = np.arange(5, 64)
    assert (err[ordinary] / gamma[ordinary]).max() > 0.02


def test_tc_term_is_small_against_the_tier_b_bias():
    """What the kernel adds to β_t is a few percent of β_t (and β_t is ~1% of c_t)."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((32, D)).astype(np.float32)
    scales = np.exp(rng.uniform(-4, 0, (50, 1, D // GS))).repeat(32, axis=1)
    sm = 1 / np.sqrt(D)
    gamma = cm.tc_logit_term(q, scales, group_size=GS, sm_scale=sm)
    q1 = np.abs(q.astype(np.float64)).reshape(32, D // GS, GS).sum(-1)
    beta = sm * np.einsum("shg,hg->hs", scales, q1) * float(cm.beta_steps(8))
    assert np.all(gamma <= 0.1 * beta)


def test_kernel_choice_arguments():
    pool = wc.KVPool(1, 1, D, 4, 16, wc.QuantConfig(D), backend="cpu")
    q = np.zeros((4, 4, D), np.float32)
    kw = dict(layer=0, qo_indptr=np.array([0, 4]), kv_indptr=np.array([0, 1]), kv_indices=np.array([0]),
              kv_last_page_len=np.array([4]))
    with pytest.raises(ValueError, match="kernel must be"):
        wc.extend_attention(q, pool, kernel="tc", **kw)
    with pytest.raises(ValueError, match="CPU backend"):
        wc.extend_attention(q, pool, kernel="extend_tc", **kw)
    assert wc.extend_attention(q, pool, **kw).kernel == "decode"


def _kernel_constants():
    """The f16x2 constants as ``cuda/tc_operands.cuh`` writes them (the operands of the extend kernel
    and of the floor ladder's tensor-core levels) and the rounding constants as ``cuda/extend_tc.cu``
    names them (its upward log2 e and its ln 2 are common.cuh's, which the decodes share)."""
    import re
    from pathlib import Path

    cuda = Path(__file__).resolve().parents[1] / "cuda"
    src = (cuda / "extend_tc.cu").read_text()
    ops = (cuda / "tc_operands.cuh").read_text()
    hexes = dict(re.findall(r"(c1152|cm256|c4_5|c512) = (0x[0-9A-Fa-f]{8})u", ops))
    assert '#include "tc_operands.cuh"' in src
    alias = dict(re.findall(r"#define (XT_LOG2E_UP|XT_LN2) (WC_[A-Z0-9_]+)\b", src))
    common = dict(re.findall(r"#define (WC_[A-Z0-9_]+) ([0-9.]+)f", (cuda / "common.cuh").read_text()))
    floats = {k: common[v] for k, v in alias.items()}
    return {k: int(v, 16) for k, v in hexes.items()}, {k: np.float32(float(v)) for k, v in floats.items()}


def test_kernel_constants_are_what_their_comments_say():
    hexes, floats = _kernel_constants()
    for name, value in (("c1152", 1152.0), ("cm256", -1 / 256), ("c4_5", 4.5), ("c512", 1 / 512)):
        half = int(np.float16(value).view(np.uint16))
        assert hexes[name] == (half << 16) | half, name
    # the upward constants of the certificate's evaluation lie above the real numbers
    assert float(floats["XT_LOG2E_UP"]) > 1 / np.log(2) and floats["XT_LOG2E_UP"].view(np.uint32) == 0x3FB8AA3C
    assert float(floats["XT_LN2"]) > np.log(2)


def _f32_up(x):
    """x (float64) rounded up to float32."""
    f = np.float32(x)
    return np.nextafter(f, np.float32(np.inf)) if float(f) < x else f


def _f32_toward_zero(x):
    f = np.float32(x)
    return np.nextafter(f, np.float32(0)) if float(f) > x else f


def _tf32_up(f):
    """The kernel's tf32_up: the smallest tf32 value at or above the float32 ``f``."""
    b = (int(np.float32(f).view(np.uint32)) + 0x1FFF) & 0xFFFFE000
    return np.uint32(b).view(np.float32)


def test_tc_certificate_operands_round_up():
    """docs/certificate.md §9, step 6: c_t formed by the tensor cores from operands rounded up, with
    the tensor core's truncating accumulation and an approximate square root taken at their worst,
    stays at or above log2(e)·c_t, and the reported cmax at or above c_t, over twelve decades."""
    _, floats = _kernel_constants()
    k1 = _f32_up(float(np.float32(C.C_EVAL_SLACK)) * float(floats["XT_LOG2E_UP"]))
    k2 = _f32_up(float(k1) * float(k1))
    rng = np.random.default_rng(7)
    worst = np.inf
    for _ in range(3000):
        s = np.float16(np.exp(rng.uniform(np.log(6e-8), np.log(6e4), 4))).astype(np.float32)  # fp16 scales
        cu2 = np.float32(np.exp(rng.uniform(-60, 60, 4)))
        cb = np.float32(np.exp(rng.uniform(-60, 40, 4)))
        a2 = [_tf32_up(_f32_up(float(c) * float(k2))) for c in cu2]
        a1 = [_tf32_up(_f32_up(float(c) * float(k1))) for c in cb]
        b2 = [_tf32_up(_f32_up(float(x) * float(x))) for x in s]
        assert all(float(x) == float(_tf32_up(x)) for x in s)  # an fp16 scale is exact in tf32
        u2 = be = np.float32(0)
        for g in range(4):  # products exact, each addition truncated
            u2 = _f32_toward_zero(float(u2) + float(a2[g]) * float(b2[g]))
            be = _f32_toward_zero(float(be) + float(a1[g]) * float(s[g]))
        if not (np.isfinite(u2) and np.isfinite(be)):
            continue  # +inf: "no guarantee", sound
        u = np.float32(np.sqrt(u2)) * np.float32(1 - 2.0 ** -21)  # the approximate square root, low
        c2 = _f32_toward_zero(float(u) + float(be))
        exact = np.sqrt(np.sum(cu2.astype(np.float64) * s.astype(np.float64) ** 2)) + np.sum(
            cb.astype(np.float64) * s.astype(np.float64))
        assert float(c2) >= exact / np.log(2), (s, cu2, cb)
        cmax = _f32_up(float(c2) * float(floats["XT_LN2"]))
        assert float(cmax) >= exact
        if exact > 0:
            worst = min(worst, float(cmax) / exact)
    # and the margin is what the slack buys, not more: the certificate is looser by under 0.2%
    assert 1.0 <= worst < 1.002
