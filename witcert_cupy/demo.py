"""``witcert demo``: build a certified cache from a realistic source, decode with certificates,
and check every certificate against the float64 true TV.

Input (``--input file.npz``): arrays ``k`` and ``v`` shaped ``[L, S, Hkv, d]`` (post-RoPE keys as
the engine caches them) and ``q`` shaped ``[L, T, Hq, d]``.  Decode step ``t`` (0-based) attends to
the first ``S - T + t + 1`` tokens, as a model decoding the last ``T`` tokens would.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from . import reference
from .config import CertConfig, QuantConfig
from .decode import check_page_table, decode_attention
from .pool import KVPool
from .synthetic import SyntheticModel, calibrate_outlier_pairs


def _progress(msg, quiet):
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def synthetic_inputs(model: SyntheticModel, *, context, steps, seed):
    """One request from ``model``: K, V ``[L, S, Hkv, d]`` and Q ``[L, T, Hq, d]`` (float32)."""
    rng = np.random.default_rng(seed)
    pos = np.arange(context)
    ks, vs, qs = [], [], []
    for layer in range(model.num_layers):
        k, v = model.keys_values(layer, pos, rng)
        ks.append(k)
        vs.append(v)
        qs.append(np.stack([model.queries(layer, k[: context - steps + t + 1], context - steps + t, rng)
                            for t in range(steps)]))
    return np.stack(ks), np.stack(vs), np.stack(qs)


def run_demo(*, layers=2, kv_heads=2, group=4, head_dim=128, context=4096, batch=2, steps=8,
             page_size=16, tier="AB", tau=0.2, delta_req=1e-2, dither_bits=8, n_outlier_pairs=2,
             witness_bands=16, seed=0, input_path=None, backend="cpu", quiet=False):
    """Run the demo and return the report as a dict (see :func:`format_report`)."""
    t_start = time.perf_counter()
    if input_path is not None:
        data = np.load(input_path)
        for key in ("k", "v", "q"):
            if key not in data:
                raise ValueError(f"{input_path}: missing array {key!r} (need k, v [L,S,Hkv,d] and q [L,T,Hq,d])")
        K, V, Q = (np.asarray(data[x], np.float32) for x in ("k", "v", "q"))
        if K.ndim != 4 or V.shape != K.shape or Q.ndim != 4 or Q.shape[0] != K.shape[0] \
                or Q.shape[3] != K.shape[3] or Q.shape[2] % K.shape[2]:
            raise ValueError(f"{input_path}: shapes k {K.shape}, v {V.shape}, q {Q.shape} do not match "
                             "k, v [L,S,Hkv,d] and q [L,T,Hq,d] with Hq a multiple of Hkv")
        Ks, Vs, Qs = [K], [V], [Q]
        batch = 1
        source = str(input_path)
    else:
        _progress(f"[demo] synthetic source: {batch} requests x {context}+ tokens, L={layers}, "
                  f"Hkv={kv_heads}, G={group}, d={head_dim}", quiet)
        model = SyntheticModel(num_layers=layers, num_kv_heads=kv_heads, group=group, head_dim=head_dim,
                               seed=seed)
        Ks, Vs, Qs = [], [], []
        for b in range(batch):
            # requests of different lengths, so the page table is ragged
            S_b = context + b * (context // 2)
            K, V, Q = synthetic_inputs(model, context=S_b, steps=steps, seed=seed * 1000 + b + 1)
            Ks.append(K)
            Vs.append(V)
            Qs.append(Q)
        source = "synthetic"
    L, _, H, d = Ks[0].shape
    T, Hq = Qs[0].shape[1], Qs[0].shape[2]
    lens = [K.shape[1] for K in Ks]

    # outlier pairs calibrated on the first request's keys (what an operator does offline)
    pairs = calibrate_outlier_pairs(Ks[0], n_outlier_pairs) if n_outlier_pairs else None
    cfg = QuantConfig(d, dither_bits=dither_bits, seed=seed, witness_bands=witness_bands if "A" in tier else 0,
                      outlier_pairs=pairs)
    pages_per = [(S + page_size - 1) // page_size for S in lens]
    pool = KVPool(L, H, d, sum(pages_per), page_size, cfg, backend=backend, keep_exact=True)
    # inputs are built on the host; the pool's backend decides where they run
    dev = (lambda a: pool.xp.asarray(a)) if pool.backend == "cuda" else (lambda a: a)  # noqa: E731
    host = reference.to_host
    rng = np.random.default_rng(seed + 7)
    perm = rng.permutation(sum(pages_per)).astype(np.int32)  # scattered pages, as in a real pool
    page_lists = np.split(perm, np.cumsum(pages_per)[:-1])

    # prefill: everything except the last T tokens
    t0 = time.perf_counter()
    for b in range(batch):
        slots = (page_lists[b][:, None].astype(np.int64) * page_size + np.arange(page_size)).reshape(-1)
        for layer in range(L):
            pre = lens[b] - T
            pool.write(layer, dev(slots[:pre]), dev(Ks[b][layer, :pre]), dev(Vs[b][layer, :pre]))
    t_prefill = time.perf_counter() - t0
    _progress(f"[demo] wrote {sum(lens) - batch * T} prefix tokens x {L} layers in {t_prefill:.2f} s", quiet)

    cert = CertConfig(tier=tier, delta_req=delta_req, num_layers=L, steps=T, tau=tau)
    bounds, trues, risks, step_times = [], [], [], []
    _progress(f"[demo] compiling the {backend} kernels on first use (cached for later runs)...", quiet)
    for t in range(T):
        cur = [lens[b] - T + t + 1 for b in range(batch)]
        indptr = np.concatenate([[0], np.cumsum([(c + page_size - 1) // page_size for c in cur])]).astype(np.int32)
        indices = np.concatenate([page_lists[b][: (cur[b] + page_size - 1) // page_size] for b in range(batch)])
        last = np.array([c - (c - 1) // page_size * page_size for c in cur], np.int32)
        pt = check_page_table(indptr, indices, last, batch=batch, num_pages=pool.num_pages, page_size=page_size)
        t_step = 0.0
        for layer in range(L):
            new_slots = np.array([pt.slots(b, page_size)[-1] for b in range(batch)], np.int64)
            k_new = np.stack([Ks[b][layer, cur[b] - 1] for b in range(batch)])
            v_new = np.stack([Vs[b][layer, cur[b] - 1] for b in range(batch)])
            q = np.stack([Qs[b][layer, t] for b in range(batch)])
            t0 = time.perf_counter()
            pool.write(layer, dev(new_slots), dev(k_new), dev(v_new))
            res = decode_attention(dev(q), pool, layer=layer, kv_indptr=dev(indptr), kv_indices=dev(indices),
                                   kv_last_page_len=dev(last), cert=cert)
            if pool.backend == "cuda":  # the kernels run asynchronously: wait before reading the clock
                pool.xp.cuda.Device().synchronize()
            t_step += time.perf_counter() - t0
            for b in range(batch):
                rows = reference.request_rows(pool, layer, pt, b)
                tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
                trues.append(tv)
                bounds.append(host(res.tv_bound[b]))
                risks.append(host(res.risk[b]))
        step_times.append(t_step)
        _progress(f"[demo] step {t + 1}/{T}: {t_step * 1e3:.1f} ms for {L} layers "
                  f"(write + certified decode), max bound {max(np.max(x) for x in bounds[-L * batch:]):.3g}",
                  quiet)

    bounds = np.concatenate(bounds)
    trues = np.concatenate(trues)
    risks = np.concatenate(risks)
    viol = int(np.sum(trues > bounds))
    tight = bounds[trues > 0] / trues[trues > 0]
    report = {
        "source": source,
        "backend": pool.backend,
        "shape": {"layers": L, "kv_heads": H, "q_heads": Hq, "head_dim": d, "batch": batch,
                  "context_lengths": lens, "steps": T, "page_size": page_size},
        "config": {"tier": tier, "tau": tau, "delta_req": delta_req, "dither_bits": dither_bits,
                   "group_size": cfg.group_size, "outlier_pairs_per_head": cfg.n_pairs,
                   "witness_bands": cfg.witness_bands, "seed": seed},
        "cells": int(bounds.size),
        "coverage_at_tau": float(np.mean(risks <= tau)),
        "tv_bound": {"median": float(np.median(bounds)), "max": float(np.max(bounds))},
        "true_tv": {"median": float(np.median(trues)), "max": float(np.max(trues))},
        "tightness_median": float(np.median(tight)) if tight.size else None,
        "violations": viol,
        "bytes_per_token": pool.bytes_per_token(),
        "fp16_bytes_per_token": pool.fp16_bytes_per_token(),
        "compression_vs_fp16": pool.fp16_bytes_per_token() / pool.bytes_per_token(),
        "ms_per_step": float(np.median(step_times) * 1e3),
        "nonfinite_writes": int(host(pool.nonfinite_writes)[0]),
        "wall_s": time.perf_counter() - t_start,
    }
    return report


def format_report(r) -> str:
    s = r["shape"]
    c = r["config"]
    lines = [
        "witcert demo — certified INT8 KV cache",
        f"  source            {r['source']} ({r['backend']} backend)",
        f"  shape             L={s['layers']} Hq={s['q_heads']} Hkv={s['kv_heads']} d={s['head_dim']} "
        f"batch={s['batch']} contexts={s['context_lengths']} steps={s['steps']} page={s['page_size']}",
        f"  quantizer         int8, group {c['group_size']}, {c['dither_bits']}-bit dither, "
        f"{c['outlier_pairs_per_head']} exact RoPE pairs/head, witness bands {c['witness_bands']}",
        f"  certificate       tier {c['tier']}, delta_req {c['delta_req']:g} over L*Hq*T cells, tau {c['tau']:g}",
        f"  cells             {r['cells']} (layer, query head, step, request)",
        f"  coverage at tau   {100 * r['coverage_at_tau']:.1f}% of cells certified R <= {c['tau']:g}",
        f"  TV bound          median {r['tv_bound']['median']:.3g}, max {r['tv_bound']['max']:.3g}",
        f"  true TV (float64) median {r['true_tv']['median']:.3g}, max {r['true_tv']['max']:.3g}",
        f"  tightness         median bound/true = {r['tightness_median']:.3g}" if r["tightness_median"]
        else "  tightness         n/a (true TV is 0)",
        f"  violations        {r['violations']} (true TV > bound)",
        f"  memory            {r['bytes_per_token']} B/token vs fp16 {r['fp16_bytes_per_token']} B/token "
        f"({r['compression_vs_fp16']:.3f}x tokens in the same memory)",
        f"  time per step     {r['ms_per_step']:.1f} ms (write + certified decode, all layers)",
        f"  non-finite writes {r['nonfinite_writes']}",
        f"  wall time         {r['wall_s']:.1f} s",
    ]
    return "\n".join(lines)
