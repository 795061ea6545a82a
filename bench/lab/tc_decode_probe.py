"""A decode step through the tensor-core extend kernel (cuda/extend_tc.cu): each request's one new
query as an extend of one token over its whole cache.  Beside the shipped certified INT8 decode
(decode_stage1_v2 and the merge) and torch SDPA fp16, in one process, on the decode benchmark's pools
(bench/decode.py: rotated buffers, CUDA graphs, event-timed medians).

Why: the decode is instruction-bound under SPEC §6's fp32 read path (docs/performance.md's
floor of 1.17–1.23× SDPA); the extend kernel's logits run on the tensor cores from exact fp16
operands with the split's residual in the certificate (docs/certificate.md §9).  This measures what
that route gives a decode step as built, before any decode-specific kernel is written.

    PYTHONPATH=. python3 bench/lab/tc_decode_probe.py [--shapes 8/28/4/32768,...] [--ns 0,16] [--wgmma 0,1]

Each TC row is checked first against the shipped decode on rotation 0 (o relative to float64
attention over the dequantized cache, |lse − decode's|, cmax against the decode's, a finite
tv_bound).  Writes ``tc-decode-probe.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import witcert_cupy as wc  # noqa: E402
from witcert_cupy._cuda import extend as _cuda_extend  # noqa: E402
from witcert_cupy._cuda.extend import ExtendPlan  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_decode", ROOT / "bench" / "decode.py")
bd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bd)

D = bd.D


def tc_plans(case, cert, ns):
    """One ExtendPlan per rotation: B queries (one per request), causal at the last position."""
    qo = np.arange(case.B + 1, dtype=np.int32)
    plans = []
    for r in range(case.rot):
        ip, ix, ll = case.tables[r]
        plans.append(ExtendPlan(case.pool._dev, case.q[r], 0, qo, ip, ix, ll, True, 1 / math.sqrt(D), cert,
                                ns or None, case.ctx // case.pool.page_size, host_tables=(ip.get(), ll.get())))
    return plans


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1/28/4/4096,1/32/8/4096,1/28/4/32768,8/28/4/32768,8/32/8/32768,"
                                        "32/28/4/32768")
    ap.add_argument("--ns", default="0", help="split counts of the TC kernel (0: its default)")
    ap.add_argument("--wgmma", default="0", help="0: mma.sync path, 1: wgmma path with its prepass")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    l2 = bd.l2_bytes()
    cert = wc.CertConfig(tier="B", num_layers=32, steps=1024)
    rows = []
    for B, hq, hkv, ctx in bd.parse_shapes(args.shapes):
        case = bd.pool_case(False, B, hq, hkv, ctx, l2)
        dec = case.plans(8, True)
        dec[0].launch()
        ref_res = dec[0].result()
        o64 = cp.stack([case.reference_o(0, b) for b in range(case.B)])
        dec_err = float(cp.linalg.norm(ref_res.o - o64) / cp.linalg.norm(o64))
        built = [("v2 decode", dec_err, None, dec)]
        for w in (int(x) for x in args.wgmma.split(",")):
            _cuda_extend.WGMMA = bool(w)
            for ns in (int(x) for x in args.ns.split(",")):
                plans = tc_plans(case, cert, ns)
                plans[0].launch()
                res = plans[0].result()
                err = float(cp.linalg.norm(res.o - o64) / cp.linalg.norm(o64))
                dlse = float(cp.abs(res.lse - ref_res.lse).max())
                cm = float((res.cmax / ref_res.cmax).max()), float((res.cmax / ref_res.cmax).min())
                finite = bool(cp.all(cp.isfinite(res.tv_bound)))
                assert finite and err < 2e-3 and dlse < 1e-3, (err, dlse, finite)
                name = f"tc {'wgmma' if w else 'mma.sync'} ns={plans[0].ns}"
                print(f"check {name} B={B} {hq}/{hkv} {ctx}: o rel err {err:.2e} (decode {dec_err:.2e}), "
                      f"|lse - decode| {dlse:.1e}, cmax/decode's {cm[1]:.4f}..{cm[0]:.4f}", flush=True)
                built.append((name, err, dict(dlse=dlse, cmax_ratio=cm), plans))
        _cuda_extend.WGMMA = None
        sdpa_fns = bd.sdpa_checked(B, hq, hkv, ctx, l2)
        sdpa_r, var_r = [], [[] for _ in built]
        for _ in range(args.rounds):
            sdpa_r.append(bd.time_torch(sdpa_fns, args.reps))
            for i, (_, _, _, plans) in enumerate(built):
                var_r[i].append(bd.time_cupy([p.launch for p in plans], args.reps))
        sdpa_us = statistics.median(t[0] for t in sdpa_r)
        print(f"SDPA B={B} {hq}/{hkv} ctx={ctx}: {sdpa_us:.1f} us", flush=True)
        for (name, err, extra, plans), ts in zip(built, var_r):
            us = statistics.median(t[0] for t in ts)
            ns = plans[0].ns
            print(f"  {name:24s} ns={ns:4d}: {us:9.1f} us  {us / sdpa_us:.2f}x SDPA; rounds "
                  + " ".join(f"{t[0]:.1f}{bd.clock_note(t)}" for t in ts), flush=True)
            rows.append(dict(method=name, num_splits=ns, batch=B, hq=hq, hkv=hkv, context=ctx, cert=True,
                             us=us, sdpa_us=sdpa_us, ratio_sdpa=us / sdpa_us, us_rounds=[t[0] for t in ts],
                             rel_err_vs_fp64=err, **(extra or {})))
        built = case = sdpa_fns = dec = None
        cp.get_default_memory_pool().free_all_blocks()
    bd.write_rows_json(args.out, "tc-decode-probe", rows)


if __name__ == "__main__":
    main()
