"""Certificate formulas shared by both backends (SPEC §4–5).

The per-token bound ``c_t`` is formed inside the decode kernels (it needs every scale and witness
element, so it lives in the data pass); its constants come from here.  What the kernels return —
``log A`` and ``cmax`` per (request, query head) — becomes the reported risk and TV bound here, with
the same code for NumPy and CuPy arrays.
"""

from __future__ import annotations

import math

import numpy as np

from . import _contract as C
from .config import CertConfig


def budget_heads(cert: CertConfig, num_q_heads: int) -> int:
    """``Hq`` of the budget: the model's total (``cert.num_q_heads``) when given, else the query's."""
    return num_q_heads if cert.num_q_heads is None else cert.num_q_heads


def delta_loc(cert: CertConfig, num_q_heads: int) -> float:
    """Per-cell failure budget ``δ_loc = δ_req / (L · Hq · T)`` (SPEC §4)."""
    return cert.delta_req / (cert.num_layers * budget_heads(cert, num_q_heads) * cert.steps)


def log_budget(cert: CertConfig, num_q_heads: int) -> np.float32:
    """``log(2 / δ_loc)`` as float32 rounded up; the kernels add ``log S`` (S = quantized tokens)."""
    v = math.log(2.0) + math.log(cert.num_layers) + math.log(budget_heads(cert, num_q_heads)) + math.log(cert.steps) \
        - math.log(cert.delta_req)
    f = np.float32(v)
    if float(f) < v:
        f = np.nextafter(f, np.float32(np.inf))
    return f


def beta_steps(dither_bits: int) -> np.float32:
    """Tier-B bias per unit of ``s·Q1``, in steps: ``2^-(m+1) + 2^-15`` (exact in fp32)."""
    return np.float32(2.0 ** -(dither_bits + 1) + C.BETA_FP32_SLACK)


def tier_code(cert: CertConfig | None) -> int:
    return 0 if cert is None else C.TIERS[cert.tier]


def risk_from_log_a(log_a, lse, xp=np):
    """``R = (A² − 1)/2 = expm1(2 log A)/2`` (SPEC §5); NaN is treated as ``+inf``.

    ``log A`` comes from the fp32 difference ``LSE(λ) − lse``: it is raised by the resolution of
    that subtraction (``LOG_A_RESOLUTION_ULPS`` ulps of ``max(1, |lse|)``) before use, so a tiny
    positive ``A − 1`` that rounded to 0 still gives a positive R.  Rows without tokens
    (``lse = -inf``) keep ``R = 0``.
    """
    la = log_a.astype(xp.float64)
    l64 = lse.astype(xp.float64)
    res = C.LOG_A_RESOLUTION_ULPS * 2.0 ** -24 * xp.maximum(1.0, xp.abs(l64))
    la = la + xp.where(xp.isfinite(l64), res, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        r = xp.expm1(2.0 * la) / 2.0
    return xp.where(xp.isnan(r), xp.inf, r)


def tv_bound(risk, cmax, xp=np):
    """``min(1, R, tanh(cmax / 2))`` (SPEC §5); a NaN ``cmax`` counts as ``+inf``."""
    cm = cmax.astype(xp.float64)
    t = xp.where(xp.isnan(cm), 1.0, xp.tanh(cm / 2.0))
    return xp.minimum(xp.minimum(1.0, risk), t)


def page_contributions(page_lse, page_lam, lse, xp=np):
    """float64 ``contrib_j = e^{λ_j − lse} − e^{lse_j − lse}`` ``[B, Hq, P]`` (SPEC §6) from the
    kernels' per-page ``lse_j``/``λ_j`` ``[B, Hq, P]``; a NaN (an infinite λ_j) counts as ``+inf``."""
    L = lse.astype(xp.float64)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        c = xp.exp(page_lam.astype(xp.float64) - L) - xp.exp(page_lse.astype(xp.float64) - L)
    return xp.where(xp.isnan(c), xp.inf, c)


def a_threshold(tau: float) -> float:
    """``R ≤ τ  ⇔  A ≤ sqrt(1 + 2τ)`` (SPEC §5)."""
    return math.sqrt(1.0 + 2.0 * tau)


def tc_query_split(q):
    """The tensor-core extend kernel's query split (docs/certificate.md §9), twin of its row prologue.

    Parameters
    ----------
    q : float32 array ``[..., d]``

    Returns
    -------
    qh, ql : float16 arrays ``[..., d]``
        ``2^shift·q ≈ qh + ql``, with ``shift`` per row so that ``max|2^shift·q|`` lies in
        ``[2^(E−1), 2^E)``, ``E = TC_QUERY_EXPONENT``.
    shift : int array ``[...]``
    e1, e2 : float64 arrays ``[..., d]``
        ``|q − qh·2^-shift|`` and ``|q − (qh + ql)·2^-shift|``, exact (the kernel forms them in fp32,
        where both differences are exact).
    """
    q = np.asarray(q, np.float32)
    amax = np.abs(q).max(axis=-1)
    _, e = np.frexp(amax)
    shift = (C.TC_QUERY_EXPONENT - e).astype(np.int64)
    qs = np.ldexp(q, shift[..., None]).astype(np.float32)
    qh = qs.astype(np.float16)
    r1 = qs - qh.astype(np.float32)
    ql = r1.astype(np.float16)
    r2 = r1 - ql.astype(np.float32)
    unscale = np.ldexp(1.0, -shift)[..., None]
    return qh, ql, shift, np.abs(r1.astype(np.float64)) * unscale, np.abs(r2.astype(np.float64)) * unscale


def tc_logit_term(q, k_scales, *, group_size, sm_scale):
    """The deterministic logit term the tensor-core extend kernel adds to ``β_t``, per token.

    ``sm·Σ_g s_{t,g}·(TC_CODE_BOUND·E2_g + TC_XI_BOUND·E1_g)`` with ``E1_g, E2_g`` the group sums of
    :func:`tc_query_split`'s residuals: a bound on ``|ℓ̃_t(kernel) − sm·q·x̂_t|`` apart from fp32
    accumulation.  ``q [Hq, d]``, ``k_scales [S, Hq, d / group_size]`` (float) → ``[Hq, S]``.
    """
    _, _, _, e1, e2 = tc_query_split(q)
    d = q.shape[-1]
    g1 = e1.reshape(*e1.shape[:-1], d // group_size, group_size).sum(-1)
    g2 = e2.reshape(*e2.shape[:-1], d // group_size, group_size).sum(-1)
    coef = C.TC_CODE_BOUND * g2 + C.TC_XI_BOUND * g1          # [Hq, NG]
    return sm_scale * np.einsum("shg,hg->hs", np.asarray(k_scales, np.float64), coef)
