"""gated_decode: decode, and where the certificate exceeds τ, page exact values back in, page by
page, until it holds (SPEC §7).

For every (request, kv head) with a query head over the threshold, pages are ranked by their
certificate contribution ``contrib_j`` (SPEC §6) summed over the offending heads, and the shortest
prefix predicted to bring *every* offending head to ``A ≤ sqrt(1 + 2τ)`` is paged in from the host
backing store into the pool's exact fp16 tier; then decode runs again.  Repair is persistent and
incremental: an exact page has ``c_t = 0``, so it contributes nothing and is never chosen again, and
it returns to quantized storage only when one of its slots is rewritten.

``τ < 1`` is a certified TV threshold; ``τ ≥ 1`` ranks by the risk ``R`` where the bound is vacuous
(R is monotone in A, so the same rule serves both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import certificate as cert_mod
from .arrays import backend_of, to_cupy, to_numpy
from .budget import charge_host
from .config import CertConfig, _bool_arg, _int_arg
from .decode import _decode, budget_of, check_page_table
from .reference import to_host
from .pool import PagedPool


@dataclass
class GateReport:
    """What one :func:`gated_decode` call did.

    Attributes
    ----------
    pages_repaired : int
        (kv head, page) entries paged in by this call.
    bytes_paged_in : int64 ``[B]``
        Bytes moved from the backing store per request (exact fp16 K and V).
    rounds : int
        Repair rounds run (each followed by a recomputation).
    decodes : int
        Decode launches: one of the whole batch per recomputation, and with ``page_contrib=None``
        one more per round, of the rows with a head over τ, with the page contributions.
    tier_full : bool
        The exact tier ran out: some head may still exceed τ, and its certificate says so.
    over_threshold : bool ``[B, Hq]``
        Heads still above the threshold after the last recomputation (heads whose query is not
        finite are never repaired and not counted here; their certificate is infinite).
    mode : str
        ``'certified'`` (τ < 1) or ``'risk-ranked'`` (τ ≥ 1).
    history : list of dict
        Per round: ``A_before`` and ``A_predicted`` (``[B, Hq]``) — the first-order prediction the
        page choice was made on, to compare with the recomputed A of the next round.
    """

    pages_repaired: int = 0
    bytes_paged_in: np.ndarray = None
    rounds: int = 0
    decodes: int = 0
    tier_full: bool = False
    over_threshold: np.ndarray = None
    mode: str = "certified"
    history: list = field(default_factory=list)


def _a_of(log_a):
    a = np.exp(np.asarray(log_a, np.float64))
    return np.where(np.isnan(a), np.inf, a)


def gated_decode(q, pool, *, layer, kv_indptr, kv_indices, kv_last_page_len, cert, max_rounds=4,
                 sm_scale=None, num_splits=None, requests=None, page_contrib=None):
    """Certified decode with block repair from the exact backing store (SPEC §7).

    Parameters
    ----------
    q, pool, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, num_splits
        As for :func:`~witcert_cupy.decode_attention`; ``pool`` (a :class:`KVPool`, or an
        :class:`Fp16Pool`/:class:`SchemePool` metered by Tier A) is built with ``keep_exact=True`` and
        ``exact_tier_pages > 0``.  Either backend: on the GPU the loop reads ``A`` and the page
        contributions on the host once per round (the gate is not graph-capturable; decode is).
    cert : CertConfig
        Its ``tau`` is the threshold on the risk ``R``: ``< 1`` certified, ``>= 1`` risk-ranked.
    max_rounds : int
        Repair rounds at most (each costs one recomputation).  A round that finds no page to page in
        (every contributing page already exact, or the tier full) ends the loop without one.
    requests : int array ``[B]`` or None
        As for :func:`~witcert_cupy.decode_attention`: the rounds of one call are one event (spec
        §4.3), so the call spends one unit of each row's budget, however many rounds it takes.
    page_contrib : bool or None
        Which decodes compute the per-page contributions that rank pages for repair.  None (the
        default): none of the batch's decodes; in a round with a head over τ, the rows holding one
        are decoded once more with them (the same pool state), so a step that needs no repair runs
        without them (on the GPU they cost 10–12% of a step) and a repair round costs its rows'
        share of a second decode.  True: every decode of the whole batch computes them (no second
        decode; the cheaper where most rows repair).

    Returns
    -------
    (DecodeResult, GateReport)
        The result of the last recomputation (repaired pages served exactly) and the report.  Its
        ``page_contrib`` is None unless ``page_contrib=True``.
    """
    if not isinstance(pool, PagedPool):
        raise TypeError(f"pool must be a KVPool, Fp16Pool or SchemePool, got {type(pool).__name__}")
    if pool.tier_map is None:
        raise ValueError("gated_decode needs a pool with an exact tier (keep_exact=True, exact_tier_pages=N)")
    if not isinstance(cert, CertConfig):
        raise TypeError(f"cert must be a CertConfig, got {type(cert).__name__}")
    tau = cert.tau
    max_rounds = _int_arg("max_rounds", max_rounds, lo=0, hi=64)
    if page_contrib is not None and not _bool_arg("page_contrib", page_contrib):
        raise ValueError("page_contrib must be None (computed for the rows with a head over tau) or True (on "
                         "every decode): the gate ranks pages by them")
    be = backend_of(q=q, kv_indptr=kv_indptr, kv_indices=kv_indices, kv_last_page_len=kv_last_page_len)
    if be != pool.backend:
        raise TypeError(f"q and the page table must live on the pool's device ({pool.backend})")
    # the repair loop is host-driven: it reads A and the contributions once per round
    host = (lambda a: to_host(a)) if be == "cuda" else (lambda a: a)
    pt = check_page_table(host(kv_indptr), host(kv_indices), host(kv_last_page_len), batch=q.shape[0],
                          num_pages=pool.num_pages, page_size=pool.page_size)
    B, Hq = q.shape[0], q.shape[1]
    G = Hq // pool.num_kv_heads
    thr = cert_mod.a_threshold(tau)
    report = GateReport(bytes_paged_in=np.zeros(B, np.int64), mode="certified" if tau < 1 else "risk-ranked")
    if be == "cuda":
        qq = q
        tables = (kv_indptr, kv_indices, kv_last_page_len)
    else:
        qq = to_numpy("q", q)
        tables = (pt.indptr, pt.indices, pt.last_page_len)
    # a head whose query is not finite has a non-finite certificate that no page can mend: skipped
    q_finite = np.isfinite(host(qq).astype(np.float32)).all(-1)
    budget = budget_of(pool, cert, q.shape, requests, be)
    # By default the decodes compute no page contributions (a step that needs no repair never uses
    # them): where a head is over τ, the rows that hold one are decoded again with them (the same
    # pool state and dither, inside the call's one event: SPEC §4.3), and those rank the pages.
    full_contrib = bool(page_contrib)
    while True:
        res = _decode(qq, pool, be, layer, *tables, sm_scale, cert, num_splits, full_contrib, charge=False)
        report.decodes += 1
        # over τ by the reported risk itself, so that the gate and the report never disagree at the edge
        over = (host(res.risk) > tau) & q_finite
        report.over_threshold = over
        if not over.any() or report.rounds == max_rounds or report.tier_full:
            break
        A1, growth = _a_parts(res, host)
        if full_contrib:
            rows, ranked = np.arange(B), res
        else:
            rows = np.flatnonzero(over.any(1))
            q_r, ip_r, ix_r, ll_r = _rows_of(qq, pt, rows, be)
            ranked = _decode(q_r, pool, be, layer, ip_r, ix_r, ll_r, sm_scale, cert, num_splits, True, charge=False)
            report.decodes += 1
            # the ranked rows' A from the decode whose contributions decompose it
            A1[rows], growth[rows] = _a_parts(ranked, host)
        A = A1 * growth
        contrib_rows = host(ranked.page_contrib)   # [len(rows), Hq, pages]
        repaired_before = report.pages_repaired
        predicted = A.copy()
        for i, b in enumerate(rows):
            pages = pt.pages(b)
            for h in range(pool.num_kv_heads):
                heads = [h * G + g for g in range(G) if over[b, h * G + g]]
                if not heads:
                    continue
                contrib = contrib_rows[i, heads, :len(pages)]                 # [heads, pages]
                order = np.argsort(-contrib.sum(0), kind="stable")
                order = [j for j in order if contrib[:, j].sum() > 0 and not pool.is_exact(layer, h, pages[j])]
                if not order:
                    continue
                # shortest prefix predicted to bring every offending head under the threshold
                cum = np.cumsum(contrib[:, order], axis=1)                     # [heads, k]
                with np.errstate(invalid="ignore"):  # an infinite A (no guarantee) stays over
                    ok = np.all((A1[b, heads][:, None] - cum) * growth[b, heads][:, None] <= thr, axis=0)
                k = int(np.argmax(ok)) + 1 if ok.any() else len(order)
                for j in order[:k]:
                    try:
                        moved = pool.page_in(layer, h, int(pages[j]))
                    except RuntimeError:
                        report.tier_full = True
                        break
                    report.bytes_paged_in[b] += moved
                    report.pages_repaired += moved > 0
                    with np.errstate(invalid="ignore"):
                        predicted[b, heads] -= contrib[:, j] * growth[b, heads]
                if report.tier_full:
                    break
            if report.tier_full:
                break
        if report.pages_repaired == repaired_before:
            # no page could help (every page that contributes is exact, or the tier is full): a
            # recomputation would return the same result
            break
        report.history.append({"A_before": A, "A_predicted": predicted})
        report.rounds += 1
    if budget is not None:  # one unit for the call's one event
        ledger, key, limit, reqs = budget
        if be == "cuda":
            from ._cuda import bind_budget

            bind_budget(budget, res.risk, res.tv_bound)()
            spent_out = ~np.isfinite(host(res.risk))
        else:
            charge_host(ledger, key, limit, res.risk, res.tv_bound, reqs)
            spent_out = ~np.isfinite(res.risk)
        report.over_threshold = report.over_threshold | (spent_out & q_finite)
    return res, report


def _a_parts(res, host):
    """``(A1, growth)`` per row and head of a decode: ``A1 = Σ p̃ e^{c}`` (what the page
    contributions decompose) and the factor the reported bound raises it by (Γ and log A's
    resolution, SPEC §5, risk_from_log_a)."""
    return _a_of(host(res.log_a)), _a_of(cert_mod.log_a_raise(host(res.lse), host(res.gamma)))


def _rows_of(q, pt, rows, be):
    """``(q, kv_indptr, kv_indices, kv_last_page_len)`` of the batch rows ``rows`` alone (``pt`` the
    validated host page table), on the backend's device."""
    sub = pt.rows(rows)
    if be == "cuda":
        import cupy as cp

        return (to_cupy(q)[cp.asarray(rows)], *map(cp.asarray, (sub.indptr, sub.indices, sub.last_page_len)))
    return q[rows], sub.indptr, sub.indices, sub.last_page_len


def served_rows(pool, layer, page_table, b):
    """What the pool serves for request ``b`` after repair: ``(rows, k, v)`` with ``rows`` from
    :func:`reference.request_rows` and float64 ``k``/``v`` ``[S, Hkv, d]`` holding the exact rows on
    repaired (kv head, page) entries and the reconstruction elsewhere (for tests and reports)."""
    from . import reference

    rows = reference.request_rows(pool, layer, page_table, b)
    k = rows["k_hat"].astype(np.float64)
    v = rows["v_hat"].astype(np.float64)
    pages = rows["slots"] // pool.page_size
    for h in range(pool.num_kv_heads):
        exact = np.array([pool.is_exact(layer, h, int(p)) for p in pages], bool)
        k[exact, h] = rows["k_exact"][exact, h]
        v[exact, h] = rows["v_exact"][exact, h]
    return rows, k, v


def attention_with_repaired_pages(pool, layer, page_table, b, q, *, sm_scale=None):
    """float64 attention of request ``b`` over what the gated pool serves — what a gated decode must
    equal (for tests and reports)."""
    from . import reference

    _, k, v = served_rows(pool, layer, page_table, b)
    return reference.attention(q, k, v, sm_scale=sm_scale)
