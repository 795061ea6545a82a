"""``witcert report``: the quad report — coverage, latency, error, memory — per configuration
(certified INT8 at several outlier budgets, and every registered black-box scheme), with the
risk-coverage curve and the bound-vs-true-TV scatter as PNG plots and everything as JSON.

Workload: one request from :class:`~witcert_cupy.synthetic.SyntheticModel` (massive-activation RoPE
pairs, heavy-tailed norms), decoded for ``steps`` steps over every layer; the true TV is computed in
float64 from the exact keys, the output error against float64 attention over the exact K/V.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from . import reference
from .config import CertConfig, QuantConfig
from .decode import check_page_table, decode_attention
from .gate import gated_decode
from .demo import synthetic_inputs
from .pool import KVPool
from .schemes import SchemePool, list_schemes
from .synthetic import SyntheticModel, calibrate_outlier_pairs

DELTAS = np.logspace(-8, -0.5, 9)


def _nominal(pool):
    """A scheme's own storage per token (all layers, heads, K and V), or None when it declares none."""
    nb = pool.scheme.nominal_bytes
    return None if nb is None else int(pool.num_layers * pool.num_kv_heads * 2 * nb(pool.head_dim))


def _configs(outlier_budgets, schemes):
    cfgs = [("int8", f"int8 ({p} exact pairs)", p) for p in outlier_budgets]
    cfgs += [("scheme", name, name) for name in schemes]
    return cfgs


def run_report(*, layers=2, kv_heads=2, group=4, head_dim=128, context=1024, steps=4, page_size=16, tau=0.2,
               delta_req=1e-2, outlier_budgets=(0, 1, 2, 4), schemes=None, seed=0, backend="cpu", quiet=False):
    """Run every configuration on the same workload; returns the report dict (see module doc)."""
    schemes = list(list_schemes() if schemes is None else schemes)
    model = SyntheticModel(num_layers=layers, num_kv_heads=kv_heads, group=group, head_dim=head_dim, seed=seed)
    K, V, Q = synthetic_inputs(model, context=context, steps=steps, seed=seed + 1)
    L, S, H, d = K.shape
    npages = -(-S // page_size)
    cfgs = _configs(outlier_budgets, schemes)
    prog = tqdm(total=len(cfgs) * steps, desc="[report]", unit="step", disable=quiet, file=sys.stderr,
                dynamic_ncols=True)
    rows = []
    for kind, label, arg in cfgs:
        if kind == "int8":
            pairs = calibrate_outlier_pairs(K, arg) if arg else None
            cfg = QuantConfig(d, witness_bands=16, outlier_pairs=pairs, seed=seed)
            pool = KVPool(L, H, d, npages, page_size, cfg, keep_exact=True, backend=backend,
                          exact_tier_pages=L * H * npages)
            tier = "AB"
        else:
            pool = SchemePool(L, H, d, npages, page_size, arg, keep_exact=True, backend=backend,
                              exact_tier_pages=L * H * npages)
            tier = "A"
        xp_dev = pool.xp.asarray if pool.backend == "cuda" else (lambda a: a)
        host = reference.to_host
        pre = S - steps
        for layer in range(L):
            pool.write(layer, xp_dev(np.arange(pre)), xp_dev(K[layer, :pre]), xp_dev(V[layer, :pre]))
        bounds, trues, risks, oerr, times, cmaxes, ss = [], [], [], [], [], [], []
        for t in range(steps):
            cur = pre + t + 1
            np_ = -(-cur // page_size)
            ip = np.array([0, np_], np.int32)
            ix = np.arange(np_, dtype=np.int32)
            ll = np.array([cur - (np_ - 1) * page_size], np.int32)
            pt = check_page_table(ip, ix, ll, batch=1, num_pages=npages, page_size=page_size)
            for layer in range(L):
                pool.write(layer, xp_dev(np.array([cur - 1])), xp_dev(K[layer, cur - 1:cur]),
                           xp_dev(V[layer, cur - 1:cur]))
                q = Q[layer, t][None]
                cert = CertConfig(tier=tier, delta_req=delta_req, num_layers=L, steps=steps, tau=tau)
                t0 = time.perf_counter()
                r = decode_attention(xp_dev(q), pool, layer=layer, kv_indptr=xp_dev(ip), kv_indices=xp_dev(ix),
                                     kv_last_page_len=xp_dev(ll), cert=cert)
                host(r.o)  # wait for the result
                times.append(time.perf_counter() - t0)
                rows_b = reference.request_rows(pool, layer, pt, 0)
                trues.append(reference.true_tv(q[0], rows_b["k_exact"], rows_b["k_hat"]))
                bounds.append(host(r.tv_bound)[0])
                risks.append(host(r.risk)[0])
                cmaxes.append(host(r.cmax)[0])
                o_ex, _ = reference.attention(q[0], rows_b["k_exact"], rows_b["v_exact"])
                oerr.append(np.linalg.norm(host(r.o)[0] - o_ex, axis=-1) / np.linalg.norm(o_ex, axis=-1))
                if tier == "AB":  # for the risk-coverage curve: the Tier-B bound at other budgets
                    ss.append((q, layer, ip, ix, ll))
            prog.set_postfix_str(f"{label} step {t + 1}/{steps}", refresh=False)
            prog.update()
        bounds, trues, risks, oerr, cmaxes = map(np.concatenate, (bounds, trues, risks, oerr, cmaxes))
        # the gate on the last step: repair every layer's offending heads, then measure again.  It is
        # the run the gate would have made instead, so it spends its own request's budget (ledger
        # id 1; the risk-coverage curve's budgets: ids 2, 3, ...)
        g_cov, g_err, g_bytes, g_pages = [], [], 0, 0
        for layer in range(L):
            q = Q[layer, steps - 1][None]
            cert = CertConfig(tier=tier, delta_req=delta_req, num_layers=L, steps=steps, tau=tau)
            res, rep = gated_decode(xp_dev(q), pool, layer=layer, kv_indptr=xp_dev(ip), kv_indices=xp_dev(ix),
                                    kv_last_page_len=xp_dev(ll), cert=cert, requests=xp_dev(np.array([1])))
            g_cov.append(host(res.risk)[0] <= tau)
            rows_b = reference.request_rows(pool, layer, pt, 0)
            o_ex, _ = reference.attention(q[0], rows_b["k_exact"], rows_b["v_exact"])
            g_err.append(np.linalg.norm(host(res.o)[0] - o_ex, axis=-1) / np.linalg.norm(o_ex, axis=-1))
            g_bytes += int(rep.bytes_paged_in.sum())
            g_pages += rep.pages_repaired
        curve = None
        tanh_cov = float(np.mean(np.tanh(cmaxes / 2) <= tau))  # Tier A rows: already δ-free
        if tier == "AB":
            # the δ = 0 reference: the tanh bound from the deterministic Tier A alone
            ca = [host(decode_attention(xp_dev(q), pool, layer=layer, kv_indptr=xp_dev(ip), kv_indices=xp_dev(ix),
                                        kv_last_page_len=xp_dev(ll), cert=CertConfig(tier="A")).cmax)[0]
                  for q, layer, ip, ix, ll in ss]
            tanh_cov = float(np.mean(np.tanh(np.concatenate(ca) / 2) <= tau))
            curve = []
            for j, dl in enumerate(DELTAS):
                cov = []
                for q, layer, ip, ix, ll in ss:
                    r = decode_attention(xp_dev(q), pool, layer=layer, kv_indptr=xp_dev(ip), kv_indices=xp_dev(ix),
                                         kv_last_page_len=xp_dev(ll), requests=xp_dev(np.array([2 + j])),
                                         cert=CertConfig(tier="B", delta_req=float(dl), num_layers=L, steps=steps))
                    cov.append(host(r.risk)[0] <= tau)
                curve.append(float(np.mean(np.concatenate(cov))))
        rows.append({
            "config": label, "kind": kind, "tier": tier, "backend": pool.backend,
            "coverage_at_tau": float(np.mean(risks <= tau)),
            "tanh_coverage": tanh_cov,
            "ms_per_decode": float(np.median(times) * 1e3),
            "true_tv_median": float(np.median(trues)), "true_tv_max": float(np.max(trues)),
            "bound_median": float(np.median(bounds)), "violations": int(np.sum(trues > bounds)),
            "output_rel_err_median": float(np.median(oerr)), "output_rel_err_max": float(np.max(oerr)),
            "bytes_per_token": pool.bytes_per_token() if kind == "int8" else _nominal(pool),
            "fp16_bytes_per_token": pool.fp16_bytes_per_token(),
            "risk_coverage_curve": curve,
            "gated_last_step": {"coverage_at_tau": float(np.mean(np.concatenate(g_cov))),
                                "output_rel_err_max": float(np.max(np.concatenate(g_err))),
                                "pages_repaired": g_pages, "bytes_paged_in": g_bytes,
                                "bytes_whole_cache": int(L * H * npages * pool.page_in_bytes)},
            "scatter": {"bound": bounds.tolist(), "true_tv": trues.tolist()},
        })
    prog.close()
    return {"workload": {"layers": L, "kv_heads": H, "q_heads": Q.shape[2], "head_dim": d, "context": S,
                         "steps": steps, "page_size": page_size, "tau": tau, "delta_req": delta_req, "seed": seed},
            "deltas": DELTAS.tolist(), "rows": rows}


def write_report(report, out_dir) -> list[Path]:
    """``report.json``, ``risk_coverage.png`` and ``bound_vs_true.png`` in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.json", out / "risk_coverage.png", out / "bound_vs_true.png"]
    paths[0].write_text(json.dumps(report, indent=1))
    tau = report["workload"]["tau"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in report["rows"]:
        if r["risk_coverage_curve"]:
            line, = ax.plot(report["deltas"], r["risk_coverage_curve"], marker="o", label=f"{r['config']} (Tier B)")
            ax.axhline(r["tanh_coverage"], color=line.get_color(), ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("δ_req")
    ax.set_ylabel(f"coverage (R ≤ {tau:g})")
    ax.set_title("risk-coverage (dotted: tanh bound, δ = 0)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths[1], dpi=110)
    fig, ax = plt.subplots(figsize=(6, 5))
    for r in report["rows"]:
        ax.scatter(np.maximum(r["scatter"]["true_tv"], 1e-12), r["scatter"]["bound"], s=6, label=r["config"])
    lim = [1e-9, 1.5]
    ax.plot(lim, lim, "k--", lw=1, label="bound = true TV")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lim)
    ax.set_ylim(1e-6, 1.5)
    ax.set_xlabel("true TV (float64)")
    ax.set_ylabel("reported TV bound")
    ax.set_title("every point above the diagonal: no violation")
    ax.legend(fontsize=6, markerscale=2)
    fig.tight_layout()
    fig.savefig(paths[2], dpi=110)
    plt.close("all")
    return paths


def format_report(report) -> str:
    w = report["workload"]
    lines = [f"witcert report — L={w['layers']} Hq={w['q_heads']} Hkv={w['kv_heads']} d={w['head_dim']} "
             f"context={w['context']} steps={w['steps']} tau={w['tau']:g}",
             f"{'configuration':<24}{'coverage':>9}{'ms/dec':>8}{'TV med':>10}{'bound med':>11}{'viol':>5}"
             f"{'o err':>9}{'B/token':>9}{'gated cov':>10}{'page-in KiB':>12}"]
    for r in report["rows"]:
        lines.append(f"{r['config']:<24}{r['coverage_at_tau']:>9.2f}{r['ms_per_decode']:>8.2f}"
                     f"{r['true_tv_median']:>10.2e}{r['bound_median']:>11.2e}{r['violations']:>5d}"
                     f"{r['output_rel_err_median']:>9.1e}{str(r['bytes_per_token']):>9}"
                     f"{r['gated_last_step']['coverage_at_tau']:>10.2f}{r['gated_last_step']['bytes_paged_in'] / 1024:>12.1f}")
    return "\n".join(lines)
