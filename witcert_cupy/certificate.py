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


def budget_layers(cert: CertConfig, num_layers: int | None) -> int:
    """``L`` of the budget (SPEC §4.4): ``cert.num_layers`` when given, else the pool's layer count."""
    if cert.num_layers is not None:
        return cert.num_layers
    if num_layers is None:
        raise ValueError("the certificate's budget needs L: set CertConfig(num_layers=...) or pass the pool's")
    return int(num_layers)


def delta_loc(cert: CertConfig, num_q_heads: int, num_layers: int | None = None) -> float:
    """Per-cell failure budget ``δ_loc = δ_req / (L · Hq · T)`` (SPEC §4); ``num_layers``: the pool's,
    used when ``cert.num_layers`` is None."""
    return cert.delta_req / (budget_layers(cert, num_layers) * budget_heads(cert, num_q_heads) * cert.steps)


def log_budget(cert: CertConfig, num_q_heads: int, num_layers: int | None = None) -> np.float32:
    """``log(2 / δ_loc)`` as float32 rounded up; the kernels add ``log S`` (S = every attended token)."""
    v = math.log(2.0) + math.log(budget_layers(cert, num_layers)) + math.log(budget_heads(cert, num_q_heads)) \
        + math.log(cert.steps) - math.log(cert.delta_req)
    f = np.float32(v)
    if float(f) < v:
        f = np.nextafter(f, np.float32(np.inf))
    return f


def beta_steps(dither_bits: int) -> np.float32:
    """Tier-B bias per unit of ``s·Q1``, in steps: ``2^-(m+1) + 2^-15`` (exact in fp32)."""
    return np.float32(2.0 ** -(dither_bits + 1) + C.BETA_FP32_SLACK)


def f32_up(x: float) -> np.float32:
    """The float32 at or above the float64 ``x`` (``+inf`` past the fp32 range)."""
    f = np.float32(x)
    if float(f) < x:
        f = np.nextafter(f, np.float32(np.inf))
    return f


# The summation order of a logit formed by exact integer products (SPEC §6 form (I)): a result's
# ``dot_order`` says so, and its evaluation term is :func:`form_i_gamma`'s, not a dot product's height.
FORM_I_ORDER = (0, "int")
# ... and of an exact-tier token's fp32 dot product in that kernel (its values are fp16, not stored
# integers): a chain over each warp's 64 channels, the warps' sums added pairwise
FORM_I_EXACT_ORDER = (64, "tree")


def form_i_gamma(outliers: bool = False) -> np.float32:
    """``γ_n`` rounded up for ``n = FORM_I_ROUNDINGS`` (plus ``FORM_I_OUTLIER_ROUNDINGS`` for a pool
    with outlier pairs, whose fp32 logit is added to the integer part's): the relative bound of the
    fp32 combination of a form-(I) logit's exact group sums over the absolute values of its terms
    (docs/certificate.md §11)."""
    n = C.FORM_I_ROUNDINGS + (C.FORM_I_OUTLIER_ROUNDINGS if outliers else 0)
    return f32_up(n * C.UNIT_ROUNDOFF / (1.0 - n * C.UNIT_ROUNDOFF))


def sum_height(terms: int, chunk: int, combine: str) -> int:
    """The height of an fp32 dot product's summation tree: the most roundings any one product meets
    on its way to the sum (``DotFloat.dot_error_height``: the error is at most ``γ_height·Σ|a b|``).

    The products are summed in chains of ``chunk`` consecutive channels (a chain of ``k`` products,
    fused or not, has height ``k``), and the chains' sums are combined ``'tree'`` (pairwise: a warp
    butterfly, the CPU's reduction) or ``'chain'`` (one after the other, the first added to zero).
    A single chain (``chunk >= terms``) is ``terms``, the most any order can reach.
    """
    if terms < 1 or chunk < 1:
        raise ValueError(f"terms and chunk must be >= 1, got {terms}, {chunk}")
    if combine not in ("tree", "chain"):
        raise ValueError(f"combine must be 'tree' or 'chain', got {combine!r}")
    chains = -(-terms // chunk)
    return min(chunk, terms) + ((chains - 1).bit_length() if combine == "tree" else chains - 1)


def dot_gamma(dot_height: int) -> float:
    """``γ_n = n·u/(1 − n·u)`` for ``n = dot_height + LOGIT_ROUNDINGS`` (SPEC §4.1): the relative
    bound, over ``Σ_c |q_c x̂_c|``, on how far a kernel's fp32 logit lies from ``sm·q·x̂`` (float64),
    for a kernel whose dot product has summation height ``dot_height`` (:func:`sum_height`)."""
    n = dot_height + C.LOGIT_ROUNDINGS
    return n * C.UNIT_ROUNDOFF / (1.0 - n * C.UNIT_ROUNDOFF)


def gamma_steps(dot_height: int) -> np.float32:
    """The evaluation term per unit of ``sm·s_g·Q1_g`` on quantized channels of an fp32 read path:
    ``127.5·(1 + u)·γ_{n+1}`` rounded up (``|x̂_c| ≤ 127.5·(1 + u)·s_g``; the one more rounding is
    the read path's fp32 product ``fl(s·fl(k − ξ))``, ``DEQUANT_ROUNDINGS``)."""
    return f32_up(C.CODE_ABS_BOUND * (1.0 + C.UNIT_ROUNDOFF) * dot_gamma(dot_height + C.DEQUANT_ROUNDINGS))


def gamma_exact(dot_height: int, sm_scale: float) -> np.float32:
    """The evaluation term per unit of ``Σ_c |q_c|·|x_c|`` over exact channels (outlier pairs,
    exact-tier pages, fp16 stores): ``sm·γ_n`` rounded up, at least the smallest normal fp32."""
    return f32_up(max(sm_scale * dot_gamma(dot_height), C.FP32_MIN_NORMAL))


def underflow_term(head_dim: int, sm_scale: float) -> float:
    """``g₀``: what underflow (flush-to-zero on the GPU) can take from a logit and from the exact
    channels' evaluation term, absolutely (docs/certificate.md §10.3).  Every ``c_t`` is short of
    its formula by at most ``g₀``, so the merge adds it to ``log A`` and ``cmax``."""
    return (1.0 + 2.0 ** -10) * (sm_scale * head_dim * 2.0 ** -102 + 2.0 ** -124)


def gamma_per_beta(dot_height: int, dither_bits: int) -> np.float32:
    """``gamma_steps / beta_steps`` rounded up: the quantized channels' evaluation term is this times
    β's sum ``Σ_g s_g·b1_g`` (both coefficients are ``sm·Q1_g`` times a constant, and ``b1_g`` is
    never below ``sm·Q1_g·beta_steps``)."""
    return f32_up(float(gamma_steps(dot_height)) / float(beta_steps(dither_bits)))


def kernel_scalars(dot_height: int, sm_scale: float, dither_bits: int | None):
    """``(beta_steps, gamma_per_beta, gamma_exact)`` float32 for a decode launch of a kernel whose
    dot product has summation height ``dot_height``; an fp16 store (``dither_bits=None``) has no β
    and no quantized channels."""
    if dither_bits is None:
        return np.float32(0), np.float32(0), gamma_exact(dot_height, sm_scale)
    return beta_steps(dither_bits), gamma_per_beta(dot_height, dither_bits), gamma_exact(dot_height, sm_scale)


def form_i_scalars(head_dim: int, sm_scale: float, dither_bits: int = 8, outlier_channels: int = 0,
                   exact_tier: bool = False):
    """:func:`kernel_scalars` of a form-(I) launch (SPEC §6, 8- or 16-bit dither): β of the dither,
    no evaluation term per unit of β (the quantized channels' is :func:`form_i_gamma`, formed from
    the integer sums), and the exact channels' ``gamma_exact``: an exact-tier token's fp32 dot
    product in :data:`FORM_I_EXACT_ORDER`, or for a pool with ``outlier_channels > 0`` and no
    ``exact_tier`` the outlier channels' own chain's, ``outlier_channels + FORM_I_OUTLIER_CHAIN_EXTRA``
    (docs/certificate.md §11; with an exact tier its tokens' height covers both)."""
    if dither_bits not in C.FORM_I_DITHER_BITS:
        raise ValueError(f"dither_bits: form (I) serves {C.FORM_I_DITHER_BITS}, got {dither_bits!r}")
    height = (outlier_channels + C.FORM_I_OUTLIER_CHAIN_EXTRA if outlier_channels > 0 and not exact_tier
              else sum_height(head_dim, *FORM_I_EXACT_ORDER))
    return beta_steps(dither_bits), np.float32(0), gamma_exact(height, sm_scale)


def tc_gamma_steps(group_size: int, num_groups: int) -> np.float32:
    """The tensor-core extend kernel's evaluation term per unit of ``sm·s_g·Q1_g`` (rounded up): its
    fp32 tensor-core accumulation of each group's products and the fp32 combination of the groups
    (docs/certificate.md §10.5); the query split's residual is added apart (§9)."""
    n = C.TC_PRODUCTS_PER_CHANNEL * group_size
    return f32_up(C.TC_OPERAND_BOUND * (n * C.TC_ACC_UNIT + (num_groups + 4) * C.UNIT_ROUNDOFF))


def check_sm_scale(sm_scale, head_dim: int) -> float:
    """``sm_scale`` (None: ``1/sqrt(d)``) as a float that is a normal fp32 number within
    ``[SM_SCALE_MIN, SM_SCALE_MAX]`` (SPEC §4.2: a subnormal one would flush to 0 on the GPU)."""
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(sm_scale, (bool, np.bool_)) or not isinstance(sm_scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"sm_scale must be a real number, got {type(sm_scale).__name__}")
    v = float(sm_scale)
    if not (C.SM_SCALE_MIN <= v <= C.SM_SCALE_MAX):
        raise ValueError(f"sm_scale must lie in [2^-126, 2^100] (a normal float32), got {sm_scale!r}")
    return v


def tier_code(cert: CertConfig | None) -> int:
    return 0 if cert is None else C.TIERS[cert.tier]


def log_a_raise(lse, gamma=None, xp=np):
    """float64 what the reported risk adds to the kernels' ``log A`` (:func:`risk_from_log_a`): ``Γ``
    (None: 0) and the resolution of the fp32 difference that formed ``log A`` (0 where ``lse`` is not
    finite).  The gate predicts the reported bound with it."""
    l64 = lse.astype(xp.float64)
    res = C.LOG_A_RESOLUTION_ULPS * 2.0 ** -24 * xp.maximum(1.0, xp.abs(l64))
    raise_ = xp.where(xp.isfinite(l64), res, 0.0)
    return raise_ if gamma is None else raise_ + gamma.astype(xp.float64)


def risk_from_log_a(log_a, lse, gamma=None, xp=np):
    """``R = (A'² − 1)/2 = expm1(2 log A')/2`` with ``log A' = log A + Γ`` (SPEC §5; docs/certificate.md
    §10.4: ``Γ``, the kernel's largest evaluation term, makes R hold for both readings of ``p̃``);
    NaN is treated as ``+inf``.

    ``log A`` comes from the fp32 difference ``LSE(λ) − lse``: it is raised by the resolution of
    that subtraction (``LOG_A_RESOLUTION_ULPS`` ulps of ``max(1, |lse|)``) before use, so a tiny
    positive ``A − 1`` that rounded to 0 still gives a positive R.  Rows without tokens
    (``lse = -inf``) keep ``R = 0``.
    """
    la = log_a.astype(xp.float64) + log_a_raise(lse, gamma, xp)
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
