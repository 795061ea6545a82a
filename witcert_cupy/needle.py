"""A needle workload at the attention level (issue 7): contexts whose keys carry massive-activation
RoPE pairs, one planted needle the query must retrieve, many instances.

Retrieval is read off the attention distribution the cache serves (float64 over the served keys:
the reconstruction, or the exact rows on pages the gate repaired): top-1 on the needle, and the mass
on it.  The same instances run on the exact cache, the raw scheme and the gated scheme.
"""

from __future__ import annotations

import math

import numpy as np

from . import reference
from .certificate import a_threshold
from .config import CertConfig
from .decode import check_page_table, decode_attention
from .gate import gated_decode, served_rows
from .schemes import SchemePool


def make_instance(rng, *, context, head_dim=128, massive=(250.0, 400.0), margin=6.0, sink=0.5, spread=0.005):
    """Keys ``[S, 1, d]``, the needle position and a query ``[1, d]`` for one instance.

    Channel pair (0, d/2) carries a sign-stable, nearly constant massive activation (NeoX pair 0,
    relative ``spread`` per token); the
    needle key adds a direction ``u`` (non-massive channels) that the query also points along, giving
    the needle a logit lead of about ``margin``; the query's small component on the massive channel
    (``sink``) turns key-precision errors there into logit noise — what sinks raw low-precision casts.
    """
    d = head_dim
    k = rng.standard_normal((context, 1, d)) * rng.lognormal(0.0, 0.3, (context, 1, 1))
    amp = rng.uniform(*massive)
    k[:, 0, 0] = amp * (1 + spread * rng.standard_normal(context))
    k[:, 0, d // 2] = spread * amp * rng.standard_normal(context)
    u = rng.standard_normal(d)
    u[[0, d // 2]] = 0.0
    u /= np.linalg.norm(u)
    t = int(rng.integers(context // 4, context))
    sm = 1 / math.sqrt(d)
    beta = math.sqrt(d) * 0.5
    k[t, 0] += u * (margin / (sm * beta))
    q = beta * u
    q[0] = sink * beta
    return k.astype(np.float32), t, q[None].astype(np.float32)


def run_needle(scheme, *, instances=20, context=2048, page_size=16, tau=5.0, max_rounds=4, tier_pages=None,
               seed=0, progress=None):
    """Retrieval of a planted needle through ``scheme`` raw and gated, over ``instances`` contexts.

    ``tier_pages`` bounds the exact tier (default: room for every page, so the gate is limited only
    by its rounds).  Returns a dict with accuracies (exact cache, raw, gated), mean needle mass,
    page-in bytes, coverage at ``tau`` (raw and gated), the share of instances that filled the
    tier, and the per-instance records.
    """
    rng = np.random.default_rng(seed)
    npages = -(-context // page_size)
    tier_pages = npages if tier_pages is None else tier_pages
    ip = np.array([0, npages], np.int32)
    ix = np.arange(npages, dtype=np.int32)
    ll = np.array([context - (npages - 1) * page_size], np.int32)
    cert = CertConfig(tier="A", tau=tau)
    recs = []
    for i in range(instances):
        k, t, q = make_instance(rng, context=context)
        v = rng.standard_normal(k.shape).astype(np.float32)
        pool = SchemePool(1, 1, k.shape[-1], npages, page_size, scheme, keep_exact=True,
                          exact_tier_pages=tier_pages, backend="cpu")
        pool.write(0, np.arange(context), k, v)
        pt = check_page_table(ip, ix, ll, batch=1, num_pages=npages, page_size=page_size)
        rows, served, _ = served_rows(pool, 0, pt, 0)
        p_exact = reference.softmax(reference.logits(q, rows["k_exact"]))[0]
        p_raw = reference.softmax(reference.logits(q, served))[0]
        raw = decode_attention(q[None], pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=cert)
        res, rep = gated_decode(q[None], pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=cert,
                                max_rounds=max_rounds)
        _, served_g, _ = served_rows(pool, 0, pt, 0)
        p_gated = reference.softmax(reference.logits(q, served_g))[0]
        recs.append({
            "needle": t,
            "top1_exact": int(np.argmax(p_exact)) == t,
            "top1_raw": int(np.argmax(p_raw)) == t,
            "top1_gated": int(np.argmax(p_gated)) == t,
            "mass_exact": float(p_exact[t]), "mass_raw": float(p_raw[t]), "mass_gated": float(p_gated[t]),
            "risk_raw": float(raw.risk[0, 0]), "risk_gated": float(res.risk[0, 0]),
            "bytes_paged_in": int(rep.bytes_paged_in.sum()), "pages_repaired": rep.pages_repaired,
            "tier_full": rep.tier_full,
        })
        if progress:
            progress(i + 1, instances)
    mean = lambda key: float(np.mean([r[key] for r in recs]))  # noqa: E731
    return {
        "scheme": pool.scheme.name, "instances": instances, "context": context, "tau": tau,
        "a_threshold": a_threshold(tau),
        "acc_exact": mean("top1_exact"), "acc_raw": mean("top1_raw"), "acc_gated": mean("top1_gated"),
        "mass_exact": mean("mass_exact"), "mass_raw": mean("mass_raw"), "mass_gated": mean("mass_gated"),
        "coverage_raw": float(np.mean([r["risk_raw"] <= tau for r in recs])),
        "coverage_gated": float(np.mean([r["risk_gated"] <= tau for r in recs])),
        "bytes_paged_in_mean": mean("bytes_paged_in"),
        "tier_full_fraction": mean("tier_full"),
        "bytes_whole_head": 2 * context * k.shape[-1] * 2,
        "records": recs,
    }
