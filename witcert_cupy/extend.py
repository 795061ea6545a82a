"""extend_attention: new tokens (a prompt chunk, or the suffix after a shared prefix) attend to the
quantized prefix plus themselves, each query position with its own certificate (issue 6).

The new tokens are written to the pool first, as an engine does.  Query position ``i`` of request
``b`` attends causally to the first ``S_b − n_b + i + 1`` tokens of the request's page table — the
same pages, so shared prefixes read the same slots — which makes an extend exactly a batch of decode
queries over prefixes of one page table.

Two kernels (``kernel=``):

- ``'decode'``: that batch of decode queries through the certified decode kernels (fp32, the SPEC
  §6 contract).  The CPU backend (the oracle) always runs this.
- ``'extend_tc'`` (GPU): ``cuda/extend_tc.cu``, a tensor-core prefill kernel for the common INT8
  pool (d = 128, 8-bit dither, group 32, no outlier pairs, no exact tier, Tier B).  Its logits use
  exact fp16 operands for the codes and the dither plus a two-part fp16 split of the query; the
  split's residual is bounded per row and added to ``c_t`` (docs/certificate.md §9), so its
  certificates cover its own logits.  Its ``o`` is computed from V̂ and P rounded to fp16, the
  accuracy class of an fp16 attention kernel.  On compute capability 9.0 it first dequantizes each
  of the call's 64-token tiles once into a workspace (52 KB per tile and kv head) that the kernel
  reads by bulk copies.

``kernel='auto'`` (default) takes ``'extend_tc'`` on the GPU wherever it applies, else ``'decode'``;
the result's ``kernel`` field says which ran.  Both read the small page-table arrays on the host
once per call on the GPU.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .arrays import backend_of, check_int, to_cupy, to_numpy
from .budget import charge_host
from .config import CertConfig
from .decode import _decode, check_page_table
from .pool import PagedPool


def extend_attention(q, pool, *, layer, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, causal=True,
                     sm_scale=None, cert=None, num_splits=None, kernel="auto", requests=None):
    """Attention of ``n_new`` new tokens over their requests' prefix and themselves.

    Parameters
    ----------
    q : float array ``[n_new, Hq, d]``
        Queries of the new tokens, request by request (``qo_indptr``).
    pool : KVPool or Fp16Pool
        Already holding the new tokens' K/V (written before this call).
    layer : int
    qo_indptr : int array ``[B + 1]``
        Request ``b`` owns queries ``qo_indptr[b]:qo_indptr[b+1]``: its last ``n_b`` tokens.
    kv_indptr, kv_indices, kv_last_page_len
        CSR page table of the whole sequences (prefix + new tokens), as for decode.
    causal : bool
        Position ``i`` sees the prefix and new tokens ``0..i``; False: every token of the request.
    sm_scale, num_splits
        As for :func:`~witcert_cupy.decode_attention`.
    cert : CertConfig or None
        ``cert.steps`` is the request budget's ``T``: it must count every certified query position
        (all ``n_b`` of this call, plus whatever else the request certifies).
    kernel : {'auto', 'extend_tc', 'decode'}
        See the module docstring.  ``'extend_tc'`` raises ValueError where it does not apply.
    requests : int array ``[B]`` or None
        The pool ledger's request id of each request (spec §4.4; None: request ``b`` is id ``b``).
        A Tier-B or AB certificate spends ``n_b`` units of request ``b``'s ``L · T``; positions past
        it report ``risk = +inf``.

    Returns
    -------
    DecodeResult
        ``o [n_new, Hq, d]`` and ``lse``, ``log_a``, ``risk``, ``tv_bound``, ``cmax`` ``[n_new, Hq]``;
        ``kernel`` names the kernel that ran.
    """
    if kernel not in ("auto", "extend_tc", "decode"):
        raise ValueError(f"kernel must be 'auto', 'extend_tc' or 'decode', got {kernel!r}")
    be = backend_of(q=q, qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices,
                    kv_last_page_len=kv_last_page_len)
    if isinstance(pool, PagedPool) and be != pool.backend:
        raise TypeError(f"q and the page tables must live on the pool's device ({pool.backend})")
    if be == "cuda":  # the expanded page table is built on the host (one read of the small tables)
        from .reference import to_host

        qo_indptr, kv_indptr, kv_indices, kv_last_page_len = (
            to_host(a) for a in (qo_indptr, kv_indptr, kv_indices, kv_last_page_len))
    qo = to_numpy("qo_indptr", qo_indptr)
    check_int("qo_indptr", qo)
    qh = to_cupy(q) if be == "cuda" else to_numpy("q", q)
    if qh.ndim != 3:
        raise ValueError(f"q must have shape [n_new, Hq, d], got {list(qh.shape)}")
    B = qo.shape[0] - 1
    if B < 0 or qo[0] != 0 or np.any(np.diff(qo.astype(np.int64)) < 0) or int(qo[-1]) != qh.shape[0]:
        raise ValueError(f"qo_indptr must start at 0, be non-decreasing and end at len(q) ({qh.shape[0]})")
    pt = check_page_table(kv_indptr, kv_indices, kv_last_page_len, batch=B, num_pages=pool.num_pages,
                          page_size=pool.page_size)
    n_new = np.diff(qo.astype(np.int64))
    if cert is not None:
        if not isinstance(cert, CertConfig):
            raise TypeError(f"cert must be a CertConfig or None, got {type(cert).__name__}")
        if B and cert.steps < int(n_new.max()):
            raise ValueError(f"cert.steps ({cert.steps}) must count every certified query position "
                             f"(this call certifies up to {int(n_new.max())} per request)")
    from .decode import budget_of

    budget = budget_of(pool, cert, (B, qh.shape[1]), requests, be)
    ps = pool.page_size
    seq = [pt.seq_len(b, ps) for b in range(B)]
    for b in range(B):
        if n_new[b] > seq[b]:
            raise ValueError(f"request {b} has {n_new[b]} new tokens but its page table holds only {seq[b]}")
    if kernel != "decode":
        why = "the CPU backend runs the decode kernels" if be != "cuda" else None
        if why is None:
            from ._cuda.extend import tc_extend_applies

            why = tc_extend_applies(pool, cert, qh.shape[1])
        if why is None:
            res = _extend_tc(qh, pool, layer, qo, pt, causal, sm_scale, cert, num_splits)
            return _charge(res, pool, budget, qo)
        if kernel == "extend_tc":
            raise ValueError(f"kernel='extend_tc' does not apply here: {why}")
    indptr, indices, last = [0], [], []
    for b, S in enumerate(seq):
        pages = pt.indices[pt.indptr[b]:pt.indptr[b + 1]]
        for i in range(int(n_new[b])):
            length = S - n_new[b] + i + 1 if causal else S
            npg = -(-int(length) // ps)
            indices.extend(pages[:npg].tolist())
            indptr.append(len(indices))
            last.append(int(length) - (npg - 1) * ps)
    tables = [np.array(a, np.int32) for a in (indptr, indices, last)]
    if be == "cuda":
        tables = [pool.xp.asarray(a) for a in tables]
    res = _decode(qh, pool, be, layer, tables[0], tables[1], tables[2], sm_scale, cert, num_splits, False,
                  charge=False)
    return _charge(dataclasses.replace(res, kernel="decode"), pool, budget, qo)


def _charge(res, pool, budget, qo):
    """Spend ``n_b`` units of each request's budget (spec §4.4) and mark the positions past it."""
    if budget is None:
        return res
    ledger, key, limit, reqs = budget
    if pool.backend == "cuda":
        from ._cuda import bind_budget

        launch = bind_budget(budget, res.risk, res.tv_bound, pool.xp.asarray(qo.astype(np.int32)))
        if launch is not None:
            launch()
    else:
        charge_host(ledger, key, limit, res.risk, res.tv_bound, reqs, qo)
    return res


def _extend_tc(q, pool, layer, qo, pt, causal, sm_scale, cert, num_splits):
    from ._cuda.extend import ExtendPlan
    from .decode import _check_common

    layer, sm_scale, num_splits = _check_common(q, pool, layer, sm_scale, cert, num_splits)
    xp = pool.xp
    max_pages = int(np.max(np.diff(pt.indptr))) if pt.indptr.shape[0] > 1 else 0
    plan = ExtendPlan(pool._dev, q, layer, qo, xp.asarray(pt.indptr), xp.asarray(pt.indices),
                      xp.asarray(pt.last_page_len), causal, sm_scale, cert, num_splits, max_pages,
                      host_tables=(pt.indptr, pt.last_page_len))
    plan.launch()
    return plan.result()
