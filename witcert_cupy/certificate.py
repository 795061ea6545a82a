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
