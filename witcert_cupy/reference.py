"""float64 truth for tests and reports: exact attention, the true TV distance, and the SPEC §4
per-token bounds evaluated in float64 from the stored scales and witness.

Nothing here is on a hot path; every function takes host (NumPy) arrays.
"""

from __future__ import annotations

import math

import numpy as np

from . import _contract as C
from .config import QuantConfig


def _gqa(q, k):
    q = np.asarray(q, np.float64)
    k = np.asarray(k, np.float64)
    if q.ndim == 1:
        q = q[None, :]
    if k.ndim == 2:
        k = k[:, None, :]
    Hq, Hkv = q.shape[0], k.shape[1]
    if Hq % Hkv:
        raise ValueError(f"q has {Hq} heads, not a multiple of the {Hkv} kv heads")
    return q, k, Hq // Hkv


def logits(q, k, sm_scale=None):
    """float64 ``sm · q·k`` per head: q ``[Hq, d]``, k ``[S, Hkv, d]`` → ``[Hq, S]``."""
    q, k, G = _gqa(q, k)
    sm = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    kk = np.repeat(k, G, axis=1)  # [S, Hq, d]
    return sm * np.einsum("hd,shd->hs", q, kk)


def softmax(lg):
    m = np.max(lg, axis=-1, keepdims=True)
    e = np.exp(lg - m)
    return e / e.sum(axis=-1, keepdims=True)


def true_tv(q, k_exact, k_hat, *, sm_scale=None):
    """TV(p, p̃) in float64, ``p = softmax(sm q·k)`` from exact keys, ``p̃`` from reconstructed keys.

    Parameters
    ----------
    q : ``[Hq, d]`` or ``[d]``
    k_exact, k_hat : ``[S, Hkv, d]`` or ``[S, d]``

    Returns
    -------
    float64 ``[Hq]``
    """
    p = softmax(logits(q, k_exact, sm_scale))
    pt = softmax(logits(q, k_hat, sm_scale))
    return 0.5 * np.abs(p - pt).sum(axis=-1)


def attention(q, k, v, *, sm_scale=None):
    """float64 attention of one request: returns ``(o [Hq, d], lse [Hq])``."""
    lg = logits(q, k, sm_scale)
    m = lg.max(axis=-1, keepdims=True)
    e = np.exp(lg - m)
    lse = (m[:, 0] + np.log(e.sum(-1)))
    _, vv, G = _gqa(q, v)
    vv = np.repeat(vv, G, axis=1)  # [S, Hq, d]
    o = np.einsum("hs,shd->hd", e / e.sum(-1, keepdims=True), vv)
    return o, lse


def attention_fp16(q, k, v, *, sm_scale=None):
    """One request's attention as an fp16 flash-attention kernel computes it on the same values
    (SPEC §9's yardstick for a form-(I) or tensor-core output): q, k and v rounded to fp16, the
    logits and the exponentials' sums in fp32 from those operands, the weights ``p = e^{ℓ − m}``
    rounded to fp16 before they multiply v.  Returns ``o [Hq, d]`` (float64)."""
    f16 = lambda a: np.asarray(a, np.float64).astype(np.float16).astype(np.float64)  # noqa: E731
    lg = logits(f16(q), f16(k), sm_scale).astype(np.float32).astype(np.float64)
    e = np.exp(lg - lg.max(axis=-1, keepdims=True))
    _, vv, G = _gqa(q, f16(v))
    vv = np.repeat(vv, G, axis=1)
    return np.einsum("hs,shd->hd", f16(e), vv) / e.sum(-1, keepdims=True)


def c_tier_a(q, witness, config: QuantConfig, *, sm_scale=None):
    """float64 ``c^A_t = sm Σ_b ||q_b|| w_{t,b}``: q ``[Hq, d]``, witness ``[S, Hkv, B]`` → ``[Hq, S]``."""
    q, w, G = _gqa(q, np.asarray(witness, np.float64))
    sm = 1.0 / math.sqrt(config.head_dim) if sm_scale is None else sm_scale
    bands = config.band_channels()
    qn = np.sqrt((q[:, bands] ** 2).sum(-1))  # [Hq, B]
    ww = np.repeat(w, G, axis=1)  # [S, Hq, B]
    return sm * np.einsum("hb,shb->hs", qn, ww)


def c_tier_b(q, scales, config: QuantConfig, *, layer, kv_heads_bypass, S, delta_loc, sm_scale=None):
    """float64 ``c^B_t = u_t + β_t`` (SPEC §4): q ``[Hq, d]``, scales ``[S, Hkv, ng]`` → ``[Hq, S]``.

    ``kv_heads_bypass`` is the int array ``[Hkv, 2 n_pairs]`` of bypassed channels of this layer.
    """
    q, s, G = _gqa(q, np.asarray(scales, np.float64))
    Hq, d = q.shape
    sm = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    gs = config.group_size
    mask = np.ones((s.shape[1], d), bool)
    for h in range(s.shape[1]):
        mask[h, kv_heads_bypass[h]] = False
    mq = np.repeat(mask, G, axis=0)  # [Hq, d]
    q2 = ((q * mq) ** 2).reshape(Hq, -1, gs).sum(-1)
    q1 = np.abs(q * mq).reshape(Hq, -1, gs).sum(-1)
    ss = np.repeat(s, G, axis=1)  # [S, Hq, ng]
    var = sm * sm / 12.0 * np.einsum("shg,hg->hs", ss ** 2, q2)
    with np.errstate(invalid="ignore"):
        u = np.sqrt(2.0 * var * math.log(2.0 * S / delta_loc))
        beta = sm * np.einsum("shg,hg->hs", ss, q1) * (2.0 ** -(config.dither_bits + 1) + C.BETA_FP32_SLACK)
    return u + beta


def c_gamma(q, k_hat, scales, config: QuantConfig, *, kv_heads_bypass, sm_scale=None, exact=None,
            dot_height=None):
    """float64 ``γ_t`` (SPEC §4.1), the kernels' own evaluation term, as the kernels bound it:
    ``sm·γ_n·(Σ_{c∉O} |q_c|·127.5(1 + u)·s_{t,g(c)} + Σ_{c∈O} |q_c||x̂_c|)`` on quantized tokens and
    ``sm·γ_n·Σ_c |q_c||x̂_c|`` on exact ones (``exact [S]`` bool, or None), with ``γ_n`` for a dot
    product of summation height ``dot_height`` (None: the CPU backend's, ``_cpu.decode.dot_height``).

    q ``[Hq, d]``, k_hat ``[S, Hkv, d]``, scales ``[S, Hkv, ng]`` (None for an fp16 store, where every
    channel is exact) → ``[Hq, S]``.
    """
    from . import certificate

    q, kh, G = _gqa(q, np.asarray(k_hat, np.float64))
    Hq, d = q.shape
    Hkv = kh.shape[1]
    sm = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    if dot_height is None:
        from ._cpu.decode import dot_height as cpu_height

        dot_height = cpu_height(d)
    gam = certificate.dot_gamma(dot_height)
    aq = np.abs(q)
    khr = np.repeat(np.abs(kh), G, axis=1)  # [S, Hq, d]
    if scales is None:
        return sm * gam * np.einsum("hd,shd->hs", aq, khr)
    byp = np.zeros((Hkv, d), bool)
    for h in range(Hkv):
        byp[h, kv_heads_bypass[h]] = True
    bq = np.repeat(byp, G, axis=0)  # [Hq, d]
    gs = config.group_size
    q1 = (aq * ~bq).reshape(Hq, -1, gs).sum(-1)
    ss = np.repeat(np.asarray(scales, np.float64), G, axis=1)  # [S, Hq, ng]
    quant = float(certificate.gamma_steps(dot_height)) * sm * np.einsum("shg,hg->hs", ss, q1)
    outl = sm * gam * np.einsum("hd,shd->hs", aq * bq, khr)
    full = sm * gam * np.einsum("hd,shd->hs", aq, khr)
    if exact is None:
        return quant + outl
    return np.where(np.asarray(exact, bool)[None, :], full, quant + outl)


def reported_log_a(p_tilde, c, gamma, *, head_dim, sm_scale):
    """float64 ``(log A, Γ, cmax)`` as the kernels report them (docs/certificate.md §10) from the
    per-token ``c_t`` *before* γ (``[Hq, S]``, +inf allowed) and ``γ_t``: ``c_t + γ_t`` and ``γ_t``
    carry the evaluation slack, and each of the three is raised by ``g₀``."""
    from . import certificate

    ct = (c + gamma) * C.C_EVAL_SLACK
    g0 = certificate.underflow_term(head_dim, sm_scale)
    with np.errstate(over="ignore"):
        la = np.log((p_tilde * np.exp(ct)).sum(-1))
    return la + g0, (gamma * C.C_EVAL_SLACK).max(-1) + g0, ct.max(-1) + g0


def e_form_risk(p_tilde, c):
    """``R = (A² − 1)/2`` with ``A = Σ p̃ e^c`` in float64 (SPEC §5)."""
    A = np.sum(p_tilde * np.exp(c), axis=-1)
    return (A * A - 1.0) / 2.0


def request_rows(pool, layer, page_table, b):
    """Exact and reconstructed K/V of request ``b`` (host float64 / float32 arrays).

    Returns ``dict(slots, k_exact, v_exact, k_hat, v_hat, k_scales, k_witness)``, rows in sequence
    order; ``*_exact`` need ``pool.keep_exact``; ``k_scales`` only for a :class:`KVPool`.
    """
    slots = page_table.slots(b, pool.page_size)
    out = {"slots": slots}
    out["k_hat"] = to_host(pool.dequantized(layer, _dev(pool, slots), "k"))
    out["v_hat"] = to_host(pool.dequantized(layer, _dev(pool, slots), "v"))
    if pool.keep_exact:
        out["k_exact"] = pool.exact_rows(layer, slots, "k").astype(np.float64)
        out["v_exact"] = pool.exact_rows(layer, slots, "v").astype(np.float64)
    if hasattr(pool, "scales"):  # an INT8 KVPool (an Fp16Pool has none)
        out["k_scales"] = to_host(pool.scales[layer, 0][:, _dev(pool, slots)]).transpose(1, 0, 2)
    out["k_witness"] = to_host(pool.witness[layer, 0][:, _dev(pool, slots)]).transpose(1, 0, 2)
    return out


def exact_product_rows(codes, scales, slots, *, layer, side, config, kv_head0=0):
    """The exact ``x̂ = s·fl(k − ξ)`` (float64 ``[n, H, d]``) of code rows ``codes`` (int8
    ``[n, H, d]``) with their scales (fp16 ``[n, H, d / group_size]``) at pool ``slots``, kv heads
    ``kv_head0 ..``: the ``x̂`` the witness and Tier B bound and the form-(I) decode multiplies
    (docs/certificate.md §3), against its fp32 rounding that the fp32 read paths use.  Bypassed
    channels are the caller's (their codes are 0)."""
    from .stream import dither

    slots = np.asarray(slots, np.int64)
    codes, scales = np.asarray(codes), np.asarray(scales).astype(np.float64)
    out = np.empty(codes.shape)
    for h in range(codes.shape[1]):
        xi = dither(slots, layer=layer, kv_head=kv_head0 + h, side=side, head_dim=config.head_dim,
                    seed=config.seed, bits=config.dither_bits)
        kmxi = (codes[:, h].astype(np.float32) - xi).astype(np.float64)            # fl(k − ξ)
        out[:, h] = np.repeat(scales[:, h], config.group_size, axis=-1) * kmxi
    return out


def exact_products(pool, layer, slots, side):
    """:func:`exact_product_rows` of a :class:`KVPool`'s rows at ``slots`` (float64 ``[n, Hkv, d]``),
    bypassed channels their stored fp16 values."""
    slots = np.asarray(slots, np.int64)
    sid = C.SIDES[side]
    codes = to_host(pool.codes[layer, sid][:, _dev(pool, slots)]).transpose(1, 0, 2)   # [n, H, d]
    scales = to_host(pool.scales[layer, sid][:, _dev(pool, slots)]).transpose(1, 0, 2)
    outl = to_host(pool.outliers[layer, sid][:, _dev(pool, slots)]).astype(np.float64)
    out = exact_product_rows(codes, scales, slots, layer=layer, side=side, config=pool.config,
                             kv_head0=pool.kv_head_offset)
    for h in range(pool.num_kv_heads):
        out[:, h, pool.bypass_ch[layer, h]] = outl[h]
    return out


def _dev(pool, a):
    return pool.xp.asarray(a) if pool.backend == "cuda" else a


def to_host(a):
    """A NumPy copy/view of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)
