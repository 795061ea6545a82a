"""numba split-KV decode with the fused certificate (SPEC §4–6).  Twin of ``cuda/decode.cu``.

Stage 1 (:func:`decode_stage1`): one work unit per (request, kv head, split) serves all ``G`` query
heads of the group, so ξ is generated once per KV element.  Per query head it keeps the online
softmax ``(m, l, acc)``, the certificate accumulator ``λ = log Σ e^{ℓ̃+c}`` with its own running
max, and ``cmax``.  Stage 2 (:func:`merge_splits`) combines splits exactly (SPEC §6).
"""

import math

import numpy as np
from numba import njit, prange

from .. import _contract as C
from .bits import dither_row, f16_bits_to_f32
from .form_i import _LOG2E
from .form_i import logit2 as form_i_logit2
from .form_i import outlier_logit2 as form_i_outlier_logit2
from .form_i import query_split as form_i_query_split
from .rounding import coef_up
from .write import reconstruct_row

_F32_MAX = np.float32(3.4028234663852886e38)
_INF = np.float32(np.inf)
_SLACK = np.float32(C.C_EVAL_SLACK)
_FLOOR1 = C.COEF_FLOOR_1
_FLOOR2 = C.COEF_FLOOR_2
_NONFINITE = -(1 << 30)  # normalized_sums' exponent for a non-finite entry
_LN2 = np.float32(0.6931471805599453)  # the float nearest ln 2 (above it), as the GPU's


def fp16_rows_as_bytes(a):
    """A uint16 ``[..., d]`` array of fp16 bit patterns (last axis contiguous) as ``int8 [..., 2d]``,
    zero-copy: what :func:`decode_stage1` takes for an fp16 store (and views back as uint16 a row
    at a time), so that an fp16 store and an INT8 pool share one compiled specialization (each took
    about 45 s of numba's compile on a cold cache)."""
    return a.view(np.int8)


TIER_NONE = 0

# The logit's dot product: chains of DOT_ORDER[0] consecutive channels, their sums combined as
# DOT_ORDER[1] names (certificate.sum_height: 19 roundings at d = 128, pairwise, instead of a
# chain's 128), so that the evaluation term γ_t, which grows with that height, stays small
# (docs/certificate.md §10.1).  The order is an argument of the kernel, so that a test can run the
# CPU twin in a GPU kernel's own order (SPEC §9: the reference implements the kernel's form).
DOT_ORDER = (16, "tree")


@njit(inline="always", cache=True)
def _finite_or_inf(c):
    # NaN (inf * 0 from a poisoned scale against a zero query block) means "no guarantee".
    return c if c <= _F32_MAX else _INF


@njit(inline="always", cache=True)
def _exp2_of_max(mx):
    """``e`` with ``mx = f·2^e``, ``f ∈ [1/2, 1)`` (0 for ``mx = 0``): the power of two that
    normalizes a query group (SPEC §4.2)."""
    if mx == 0.0:
        return 0
    return math.frexp(mx)[1]


@njit(inline="always", cache=True)
def blocked_dot(qv, x, d, parts, chunk, pairwise):
    """float32 ``Σ_c qv[c]·x[c]`` over ``c < d``: one chain per ``chunk`` consecutive channels, the
    chains' sums added pairwise (``pairwise``) or in chunk order, the first to zero (``parts``:
    scratch of ``⌈d/chunk⌉`` float32).  Separate products and sums, each rounded (numba does not
    contract them)."""
    nch = (d + chunk - 1) // chunk
    for k in range(nch):
        acc = np.float32(0.0)
        for c in range(k * chunk, min(d, (k + 1) * chunk)):
            acc += qv[c] * x[c]
        parts[k] = acc
    if not pairwise:
        tot = np.float32(0.0)
        for k in range(nch):
            tot += parts[k]
        return tot
    step = 1
    while step < nch:
        for k in range(0, nch - step, 2 * step):
            parts[k] = parts[k] + parts[k + step]
        step *= 2
    return parts[0]


def dot_height(d: int) -> int:
    """The summation height of :func:`blocked_dot` over ``d`` channels in ``DOT_ORDER``."""
    from ..certificate import sum_height

    return sum_height(d, *DOT_ORDER)


@njit(inline="always", cache=True)
def normalized_sums(qv, channels, skip):
    """``(Σ|q'|, Σq'², e)`` over ``qv[channels]`` where not ``skip``, on ``q' = q·2^-e`` with ``2^e``
    bounding their largest ``|q|``; ``e = _NONFINITE`` marks a non-finite entry.  Twin of
    ``normalized_sums`` in ``cuda/certificate.cuh``."""
    mx = np.float32(0.0)
    for jj in range(channels.shape[0]):
        if not skip[jj]:
            mx = max(mx, abs(qv[channels[jj]]))
    if not (mx <= _F32_MAX):
        return _INF, _INF, _NONFINITE
    e = _exp2_of_max(mx)
    q1 = np.float32(0.0)
    q2 = np.float32(0.0)
    for jj in range(channels.shape[0]):
        if not skip[jj]:
            v = np.float32(math.ldexp(np.float64(qv[channels[jj]]), -e))
            q2 += v * v
            q1 += abs(v)
    return q1, q2, e


@njit(cache=True)
def head_coefficients(qv, byp, band_ch, group_size, sm_m, e_sm, log_term, beta_steps, tier, a_band, b_q2, b_q1):
    """One query head's certificate coefficients (SPEC §4, §4.1, §4.2), each group and band on its own
    power-of-two-normalized query ``q' = q·2^-e`` so that no sum underflows or overflows:

    ``a_band[b] = sm·||q_b||``, ``b_q2[g] = 2 (sm²/12) Q2_g log(2S/δ_loc)``,
    ``b_q1[g] = sm·Q1_g·beta_steps``, with ``sm = sm_m·2^e_sm``; bypassed channels are left out of
    ``Q1``, ``Q2``.
    """
    d = qv.shape[0]
    ng = d // group_size
    if tier & 1:
        no_skip = np.zeros(band_ch.shape[1], np.bool_)
        for bb in range(band_ch.shape[0]):
            _, q2, e = normalized_sums(qv, band_ch[bb], no_skip)
            a_band[bb] = _INF if e == _NONFINITE else coef_up(sm_m * np.sqrt(q2), e_sm + e, _FLOOR1)
    for gr in range(ng):
        ch = np.arange(gr * group_size, (gr + 1) * group_size)
        q1, q2, e = normalized_sums(qv, ch, byp[gr * group_size:(gr + 1) * group_size])
        if e == _NONFINITE:
            b_q2[gr] = b_q1[gr] = _INF
            continue
        b_q2[gr] = coef_up(np.float32(2.0) * (sm_m * sm_m / np.float32(12.0)) * q2 * log_term, 2 * (e_sm + e),
                           _FLOOR2)
        b_q1[gr] = coef_up(sm_m * q1 * beta_steps, e_sm + e, _FLOOR1)


@njit(cache=True)
def norm_coefficient(qv, gamma_exact):
    """``gamma_exact·||q||`` rounded up, on the normalized query (SPEC §4.2): an fp16 store's
    evaluation term per unit of the row norm ``||x_t||`` (Cauchy–Schwarz: ``Σ_c|q_c||x_c| ≤
    ||q||·||x_t||``, docs/certificate.md §10.1).  Twin of ``warp_norm_coefficient`` in
    ``cuda/certificate.cuh``."""
    _, q2, e = normalized_sums(qv, np.arange(qv.shape[0]), np.zeros(qv.shape[0], np.bool_))
    if e == _NONFINITE:
        return _INF
    return coef_up(gamma_exact * np.sqrt(q2), e, _FLOOR1)


@njit(parallel=True, cache=True)
def decode_stage1(q, codes_k, scales_k, outl_k, wit_k, norm_k, codes_v, scales_v, outl_v,
                  bypass_ch, band_ch, kv_indptr, kv_indices, kv_last_page_len, page_size,
                  sm_scale, layer, head_base, k0, k1, bits, group_size, tier, log_budget, beta_steps,
                  gamma_per_beta, gamma_exact, num_splits, fp16_store, tier_map, tier_k, tier_v, want_pages,
                  dot_chunk, dot_pairwise, form_i, gamma_eval, o_part, lse_part, lam_part, cmax_part, gam_part,
                  page_lse, page_lam):
    """Stage 1 over work units ``(b, kv_head, split)``; the logits' dot products in the order
    ``(dot_chunk, dot_pairwise)`` (:func:`blocked_dot`), or with ``form_i`` as exact integer products
    (SPEC §6 form (I), :mod:`.form_i`: the twin of ``decode_stage1_i8``; an INT8 pool at 8- or 16-bit
    dither, ``gamma_eval = certificate.form_i_gamma(outliers)``; outlier channels take zero digits
    and their fp32 dot product is added to the logit in log2 units,
    ``gamma_per_beta = 0``; its evaluation term joins β's coefficient per group; exact-tier tokens
    take the fp32 dot product in ``(dot_chunk, dot_pairwise)``, the kernel's order for them).

    q : float32 ``[B, Hq, d]``; ``codes_* int8 [Hkv, N, d]``; ``scales_*``, ``outl_*``, ``wit_k``:
    fp16 bits ``uint16 [Hkv, N, *]``; ``bypass_ch int32 [Hkv, 2 n_pairs]``; ``band_ch int32 [B_w, *]``.
    With ``fp16_store`` the ``codes_*`` are the bytes of fp16 bit patterns of stored values (an fp16
    cache or a black-box scheme's x̂), ``uint16 [Hkv, N, d]`` viewed as ``int8 [Hkv, N, 2d]``
    (:func:`fp16_rows_as_bytes`; viewed back a row at a time), no dither or scales are involved, and
    only Tier A (from the witness) is available.
    ``log_budget`` = ``log(2 / δ_loc)`` (float32, rounded up); the kernel adds ``log S``, S = every
    token the request attends (SPEC §4.3).
    c_t = min(c^A, c^B) + γ_t (SPEC §4.1): ``gamma_per_beta`` times β's sum ``Σ_g s_g·b1_g`` on
    quantized channels (certificate.gamma_per_beta), ``gamma_exact`` per unit of ``Σ|q_c||x_c|`` on
    exact ones (outlier pairs, exact-tier pages, which have ``c_t = γ_t``); an fp16 store's rows take
    ``gamma_exact·||q||·||x_t||`` instead (:func:`norm_coefficient`), ``||x_t||`` the pool's stored
    norm ``norm_k float32 [Hkv, N]`` (rounded up at write time; an INT8 pool passes ``[Hkv, 0]``),
    an exact-tier token's formed from its row.
    ``gam_part`` receives ``max_t γ_t`` per split (the second reading of p̃, docs/certificate.md §10.4).
    Exact tier (SPEC §7): ``tier_map int32 [Hkv, num_pages]`` gives the tier entry of a (kv head,
    page) or -1; entries hold exact fp16 K/V bits ``tier_k/tier_v uint16 [cap, page_size, d]``.
    Outputs ``o_part [B, Hq, ns, d]``, ``lse_part``, ``lam_part``, ``cmax_part``, ``gam_part [B, Hq, ns]``;
    with ``want_pages`` also ``page_lse``/``page_lam [B, Hq, max_pages]`` (per page ``lse_j``, ``λ_j``;
    ``-inf`` for an empty page), from which ``contrib_j = e^{λ_j − lse} − e^{lse_j − lse}`` (SPEC §6).
    Empty splits write ``lse = λ = -inf``.  A split that meets a page index outside the pool or a
    last-page length outside ``[1, page_size]`` writes NaN output and an infinite certificate for
    every head, and reads nothing out of bounds; a head whose own logit is non-finite (its query)
    does so alone; a head whose output is non-finite (a non-finite V row, SPEC §3.6) keeps its output
    and gets an infinite certificate.
    """
    B, Hq, d = q.shape
    Hkv, N = codes_k.shape[0], codes_k.shape[1]
    G = Hq // Hkv
    ng = d // group_size
    nbands = band_ch.shape[0]
    num_pages = N // page_size
    sm_m64, e_sm = math.frexp(np.float64(sm_scale))
    sm_m = np.float32(sm_m64)
    sl2 = np.float32(np.float32(sm_scale) * _LOG2E)  # form (I): an exact-tier logit in log2 units, as the kernel's
    for unit in prange(B * Hkv * num_splits):
        b = unit // (Hkv * num_splits)
        h = (unit // num_splits) % Hkv
        s = unit % num_splits
        p_begin = kv_indptr[b]
        npages = kv_indptr[b + 1] - p_begin
        last = kv_last_page_len[b]
        pps = (npages + num_splits - 1) // num_splits
        pa = min(s * pps, npages)
        pb = min(pa + pps, npages)

        poisoned = npages > 0 and (last < 1 or last > page_size)
        S = 0 if npages == 0 else (npages - 1) * page_size + last  # every attended token (SPEC §4.3)

        # per query head: the query and its certificate coefficients
        qg = np.empty((G, d), np.float32)
        a_band = np.zeros((G, max(nbands, 1)), np.float32)
        b_q2 = np.zeros((G, ng), np.float32)
        b_q1 = np.zeros((G, ng), np.float32)
        g_norm = np.zeros(G, np.float32)  # an fp16 store's γ_t per unit of ||x_t||
        byp = np.zeros(d, np.bool_)
        for j in range(bypass_ch.shape[1]):
            byp[bypass_ch[h, j]] = True
        log_term = log_budget + np.log(np.float32(max(S, 1)))
        for g in range(G):
            hq = h * G + g
            for c in range(d):
                qg[g, c] = q[b, hq, c]
            if tier != TIER_NONE:
                head_coefficients(qg[g], byp, band_ch, group_size, sm_m, e_sm, log_term, beta_steps, tier,
                                  a_band[g], b_q2[g], b_q1[g])
                if fp16_store:
                    g_norm[g] = norm_coefficient(qg[g], gamma_exact)

        m = np.full(G, -_INF, np.float32)
        lsum = np.zeros(G, np.float32)
        acc_o = np.zeros((G, d), np.float32)
        m2 = np.full(G, -_INF, np.float32)
        l2 = np.zeros(G, np.float32)
        lam_inf = np.zeros(G, np.bool_)
        cmax = np.zeros(G, np.float32)
        gmax = np.zeros(G, np.float32)
        head_bad = np.zeros(G, np.bool_)  # a non-finite logit: this head's query
        pst = np.zeros((G, 5), np.float32)  # per page: m, l, m2, l2, λ infinite
        # form (I): each head's digits, group constants and evaluation coefficients
        fdig = np.zeros((G, 3, d), np.int64)
        fw1 = np.zeros((G, ng), np.float32)
        fw2 = np.zeros((G, ng), np.float32)
        fcc = np.zeros((G, ng), np.float32)
        fgq = np.zeros((G, ng), np.float32)
        fsc = np.zeros((G, 3), np.float32)  # Fm, P1, P2
        fsh = np.zeros(ng, np.int64)
        if form_i:
            for g in range(G):
                ok, fm, p1, p2 = form_i_query_split(qg[g], byp, group_size, sm_m, e_sm, gamma_eval, fdig[g], fsh,
                                                    fw1[g], fw2[g], fcc[g], fgq[g], bits)
                fsc[g, 0] = fm
                fsc[g, 1] = p1
                fsc[g, 2] = p2
                head_bad[g] = not ok
        jp = np.empty(d, np.int64)
        ksc = np.empty(ng, np.float32)
        xi = np.empty(d, np.float32)
        kh = np.empty(d, np.float32)
        vh = np.empty(d, np.float32)
        exact_ch = np.empty(d, np.bool_)
        parts = np.empty((d + dot_chunk - 1) // dot_chunk, np.float32)

        for pi in range(pa, pb):
            if poisoned:
                break
            page = kv_indices[p_begin + pi]
            if page < 0 or page >= num_pages:
                poisoned = True
                break
            te = tier_map[h, page]
            ntok = last if pi == npages - 1 else page_size
            # an INT8 row's channels whose values are exact fp16 (their evaluation term is
            # γ_exact·|q_c||x_c|; an fp16 store's rows take the norm form)
            for c in range(d):
                exact_ch[c] = te >= 0 or byp[c]
            for g in range(G):
                pst[g, 0] = -_INF
                pst[g, 1] = 0
                pst[g, 2] = -_INF
                pst[g, 3] = 0
                pst[g, 4] = 0
            for off in range(ntok):
                slot = page * page_size + off
                if te >= 0:
                    for c in range(d):
                        kh[c] = f16_bits_to_f32(tier_k[te, off, c])
                        vh[c] = f16_bits_to_f32(tier_v[te, off, c])
                elif fp16_store:
                    rk, rv = codes_k[h, slot].view(np.uint16), codes_v[h, slot].view(np.uint16)
                    for c in range(d):
                        kh[c] = f16_bits_to_f32(rk[c])
                        vh[c] = f16_bits_to_f32(rv[c])
                else:
                    dither_row(xi, slot, 0, layer, h + head_base, 0, k0, k1, bits)
                    if form_i:  # the dither fields j' = 255 − j (ξ = (255 − 2j')/512, exactly; 16 bits:
                        # j' = 65535 − j, ξ = (65535 − 2j')/2^17): the logit reads the stored bytes, not x̂
                        jmax = np.float32(255.0) if bits == 8 else np.float32(65535.0)
                        for c in range(d):
                            jp[c] = np.int64((jmax - (jmax + np.float32(1.0)) * np.float32(2.0) * xi[c]) * np.float32(0.5))
                        for gr in range(ng):
                            ksc[gr] = f16_bits_to_f32(scales_k[h, slot, gr])
                    else:
                        reconstruct_row(kh, codes_k[h, slot], scales_k[h, slot], outl_k[h, slot], xi,
                                        bypass_ch[h], group_size)
                    dither_row(xi, slot, 1, layer, h + head_base, 0, k0, k1, bits)
                    reconstruct_row(vh, codes_v[h, slot], scales_v[h, slot], outl_v[h, slot], xi,
                                    bypass_ch[h], group_size)
                xn = np.float32(0.0)  # an fp16 store's ||x_t||: stored, or an exact-tier row's
                if fp16_store and tier != TIER_NONE:
                    if te >= 0:
                        for c in range(d):
                            xn += kh[c] * kh[c]
                        xn = np.sqrt(xn)
                    else:
                        xn = norm_k[h, slot]
                for g in range(G):
                    if head_bad[g]:
                        continue
                    ad = np.float32(0.0)  # Σ|q_c||x_c| over the exact channels of an INT8 pool's row
                    if form_i and te < 0:  # exact integer products, the logit in log2 units, then natural
                        # (an exact-tier token: its fp32 dot product below, in the kernel's order for those)
                        lt2 = form_i_logit2(fdig[g], codes_k[h, slot], jp, ksc, group_size, fw1[g], fw2[g], fcc[g],
                                            fsc[g, 0], fsc[g, 1], fsc[g, 2], bits)
                        if bypass_ch.shape[1]:  # outlier pairs: their fp32 dot product added, γ_t's exact part
                            lt2 = form_i_outlier_logit2(lt2, qg[g], bypass_ch[h], outl_k[h, slot], sl2)
                            if tier != TIER_NONE:
                                for j in range(bypass_ch.shape[1]):
                                    ad += abs(qg[g, bypass_ch[h, j]]) * abs(f16_bits_to_f32(outl_k[h, slot, j]))
                        lt = lt2 * _LN2
                    else:
                        dot = blocked_dot(qg[g], kh, d, parts, dot_chunk, dot_pairwise)
                        if tier != TIER_NONE and not fp16_store:
                            for c in range(d):
                                if exact_ch[c]:
                                    ad += abs(qg[g, c]) * abs(kh[c])
                        lt = (dot * sl2) * _LN2 if form_i else sm_scale * dot
                    if not (lt <= _F32_MAX and lt >= -_F32_MAX):
                        head_bad[g] = True
                        continue
                    # online softmax for lse and o
                    mn = max(m[g], lt)
                    sc = np.exp(m[g] - mn)
                    p = np.exp(lt - mn)
                    lsum[g] = lsum[g] * sc + p
                    for c in range(d):
                        acc_o[g, c] = acc_o[g, c] * sc + p * vh[c]
                    m[g] = mn
                    if tier == TIER_NONE:
                        continue
                    # γ_t: exact channels ...
                    gam = g_norm[g] * xn if fp16_store else gamma_exact * ad
                    if te >= 0:
                        ct = gam  # an exact token: c_t = γ_t
                    else:
                        cab = _INF
                        if tier & 1:
                            ca = np.float32(0.0)
                            for bb in range(nbands):
                                ca += a_band[g, bb] * f16_bits_to_f32(wit_k[h, slot, bb])
                            cab = ca
                        if not fp16_store:  # (Tier A alone still needs β's sum for the evaluation term)
                            u2 = np.float32(0.0)
                            beta = np.float32(0.0)
                            gi = np.float32(0.0)  # form (I): Σ_g s_g·gq_g
                            for gr in range(ng):
                                sg = f16_bits_to_f32(scales_k[h, slot, gr])
                                u2 += sg * sg * b_q2[g, gr]
                                beta += sg * b_q1[g, gr]
                                gi += sg * fgq[g, gr]
                            if tier & 2:
                                cab = min(cab, np.sqrt(u2) + beta)
                            gam = gam + beta * gamma_per_beta + gi  # ... and the quantized channels'
                        ct = cab + gam
                    ct = _finite_or_inf(ct * _SLACK)
                    gmax[g] = max(gmax[g], _finite_or_inf(gam * _SLACK))
                    cmax[g] = max(cmax[g], ct)
                    if ct == _INF:
                        lam_inf[g] = True
                        pst[g, 4] = 1
                    else:
                        x = lt + ct
                        mn2 = max(m2[g], x)
                        l2[g] = l2[g] * np.exp(m2[g] - mn2) + np.exp(x - mn2)
                        m2[g] = mn2
                    if want_pages:
                        pm = max(pst[g, 0], lt)
                        pst[g, 1] = pst[g, 1] * np.exp(pst[g, 0] - pm) + np.exp(lt - pm)
                        pst[g, 0] = pm
                        if ct != _INF:
                            x = lt + ct
                            pm2 = max(pst[g, 2], x)
                            pst[g, 3] = pst[g, 3] * np.exp(pst[g, 2] - pm2) + np.exp(x - pm2)
                            pst[g, 2] = pm2
            if want_pages:
                for g in range(G):
                    hq = h * G + g
                    page_lse[b, hq, pi] = pst[g, 0] + np.log(pst[g, 1]) if pst[g, 1] > 0 else -_INF
                    if pst[g, 4] != 0 or head_bad[g]:
                        page_lam[b, hq, pi] = _INF
                    else:
                        page_lam[b, hq, pi] = pst[g, 2] + np.log(pst[g, 3]) if pst[g, 3] > 0 else -_INF

        for g in range(G):
            hq = h * G + g
            if poisoned or head_bad[g]:
                for c in range(d):
                    o_part[b, hq, s, c] = np.nan
                lse_part[b, hq, s] = np.nan
                lam_part[b, hq, s] = _INF
                cmax_part[b, hq, s] = _INF
                gam_part[b, hq, s] = _INF
            elif lsum[g] == np.float32(0.0):
                for c in range(d):
                    o_part[b, hq, s, c] = np.float32(0.0)
                lse_part[b, hq, s] = -_INF
                lam_part[b, hq, s] = -_INF
                cmax_part[b, hq, s] = np.float32(0.0)
                gam_part[b, hq, s] = np.float32(0.0)
            else:
                inv = np.float32(1.0) / lsum[g]
                o_fin = True
                for c in range(d):
                    o_part[b, hq, s, c] = acc_o[g, c] * inv
                    o_fin = o_fin and abs(acc_o[g, c]) <= _F32_MAX
                lse_part[b, hq, s] = m[g] + np.log(lsum[g])
                # a non-finite V row the head attended makes its output non-finite, and every
                # certificate that attends it infinite (SPEC §3.6)
                if tier != TIER_NONE and not o_fin:
                    lam_inf[g] = True
                    cmax[g] = _INF
                if lam_inf[g]:
                    lam_part[b, hq, s] = _INF
                elif l2[g] > np.float32(0.0):
                    lam_part[b, hq, s] = m2[g] + np.log(l2[g])
                else:
                    lam_part[b, hq, s] = -_INF
                cmax_part[b, hq, s] = cmax[g]
                gam_part[b, hq, s] = gmax[g]


@njit(inline="always", cache=True)
def _add_up(a, b):
    """float32 at or above ``a + b`` (both float32, ``b >= 0``)."""
    x = np.float64(a) + np.float64(b)
    f = np.float32(x)
    if np.float64(f) < x:
        f = np.float32(np.nextafter(f, _INF))
    return f


@njit(parallel=True, cache=True)
def merge_splits(o_part, lse_part, lam_part, cmax_part, gam_part, g0, o, lse, log_a, cmax, gam):
    """Stage 2 (SPEC §6): ``lse = LSE_s lse_s``, ``o = Σ e^{lse_s - lse} o_s`` (formed as
    ``Σ_s (e^{lse_s − max}/Σ_s' e^{lse_s' − max})·o_s``: weights that sum to 1 however far ``lse``'s
    own rounding is from it, docs/certificate.md §5),
    ``log A = LSE_s λ_s - lse``, ``cmax = max_s``, ``Γ = max_s gam_s``.  Empty splits (``-inf``)
    weigh 0.  ``log A``, ``cmax`` and ``Γ`` are each raised by the underflow term ``g₀``, rounded up
    (docs/certificate.md §10.3); ``R`` is then formed from ``log A + Γ`` (§10.4).
    """
    B, Hq, ns, d = o_part.shape
    for it in prange(B * Hq):
        b = it // Hq
        hq = it % Hq
        mx = -_INF
        lmx = -_INF
        bad = False
        cm = np.float32(0.0)
        gm = np.float32(0.0)
        for s in range(ns):
            v = lse_part[b, hq, s]
            if v != v:
                bad = True
            elif v > mx:
                mx = v
            lv = lam_part[b, hq, s]
            if lv > lmx:
                lmx = lv
            cm = max(cm, cmax_part[b, hq, s])
            gm = max(gm, gam_part[b, hq, s])
        cmax[b, hq] = _add_up(cm, g0) if mx != -_INF or bad else cm  # (no token: nothing to bound)
        gam[b, hq] = _add_up(gm, g0) if mx != -_INF or bad else gm
        if bad:
            for c in range(d):
                o[b, hq, c] = np.nan
            lse[b, hq] = np.nan
            log_a[b, hq] = _INF
            continue
        if mx == -_INF:  # no tokens at all
            for c in range(d):
                o[b, hq, c] = np.float32(0.0)
            lse[b, hq] = -_INF
            log_a[b, hq] = np.float32(0.0)
            continue
        ex = np.zeros(ns, np.float32)  # e^{lse_s − max}, then the weights (an empty split: 0)
        tot = np.float32(0.0)
        for s in range(ns):
            if lse_part[b, hq, s] != -_INF:
                ex[s] = np.exp(lse_part[b, hq, s] - mx)
                tot += ex[s]
        L = mx + np.log(tot)
        lse[b, hq] = L
        for s in range(ns):
            ex[s] = np.float32(ex[s] / tot)
        for c in range(d):
            acc = np.float32(0.0)
            for s in range(ns):
                if lse_part[b, hq, s] != -_INF:
                    acc += ex[s] * o_part[b, hq, s, c]
            o[b, hq, c] = acc
        if lmx == _INF:
            log_a[b, hq] = _INF
        elif lmx == -_INF:
            log_a[b, hq] = np.float32(0.0)
        else:
            t2 = np.float32(0.0)
            for s in range(ns):
                if lam_part[b, hq, s] != -_INF:
                    t2 += np.exp(lam_part[b, hq, s] - lmx)
            la = lmx + np.log(t2) - L
            # A >= 1 exactly (c >= 0); a negative value is fp32 rounding
            log_a[b, hq] = _add_up(max(la, np.float32(0.0)), g0)
