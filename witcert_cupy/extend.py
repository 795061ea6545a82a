"""extend_attention: new tokens (a prompt chunk, or the suffix after a shared prefix) attend to the
quantized prefix plus themselves, each query position with its own certificate (issue 6).

The new tokens are written to the pool first, as an engine does.  Query position ``i`` of request
``b`` attends causally to the first ``S_b − n_b + i + 1`` tokens of the request's page table — the
same pages, so shared prefixes read the same slots — which makes an extend exactly a batch of decode
queries over prefixes of one page table.  It runs that way on both backends, through the certified
decode kernels (fp32, the SPEC §6 contract): correct and certified, not a tuned prefill kernel
(issue 6's tensor-core prefill is still to come); on the GPU it reads the small page-table arrays
on the host once per call.
"""

from __future__ import annotations

import numpy as np

from .arrays import backend_of, check_int, to_cupy, to_numpy
from .config import CertConfig
from .decode import check_page_table, decode_attention


def extend_attention(q, pool, *, layer, qo_indptr, kv_indptr, kv_indices, kv_last_page_len, causal=True,
                     sm_scale=None, cert=None, num_splits=None):
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

    Returns
    -------
    DecodeResult
        ``o [n_new, Hq, d]`` and ``lse``, ``log_a``, ``risk``, ``tv_bound``, ``cmax`` ``[n_new, Hq]``.
    """
    be = backend_of(q=q, qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_indices=kv_indices,
                    kv_last_page_len=kv_last_page_len)
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
    ps = pool.page_size
    indptr, indices, last = [0], [], []
    for b in range(B):
        S = pt.seq_len(b, ps)
        if n_new[b] > S:
            raise ValueError(f"request {b} has {n_new[b]} new tokens but its page table holds only {S}")
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
    return decode_attention(qh, pool, layer=layer, kv_indptr=tables[0], kv_indices=tables[1],
                            kv_last_page_len=tables[2], sm_scale=sm_scale, cert=cert, num_splits=num_splits)
