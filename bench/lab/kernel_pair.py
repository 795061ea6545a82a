"""Both INT8 stage-1 kernels forced on one configuration's pool, side by side in one process: the
form-(I) kernel and the staged tile, certified (the configuration's tier) and uncertified, each
checked against float64 first, beside the library's own choice — the measurements a dispatch rule
in witcert_cupy/_cuda/geometry.py rests on.

    PYTHONPATH=. python3 bench/lab/kernel_pair.py tier_b_16:8/32/8/32768 witness_ab_16:1/32/8/4096 --bits 16

A case is ``CONFIG:B/Hq/Hkv/context`` (bench/decode.py's CONFIGS); ``--bits`` sets the dither's
width of every case (default: each configuration's own).  One line per case; ``--json`` writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ("i8", "v2")


def check_cases(cases, configs):
    """``[(config, (B, Hq, Hkv, context))]`` of the command line's cases; ValueError naming the first
    that is wrong (bench/lab/ab_trees.py's parser, without its STAGE1, 'clear' and 'ns=N')."""
    sys.path.insert(0, str(ROOT / "bench" / "lab"))
    from ab_trees import parse_case  # (bench/lab: one parser of a case for the lab tools)

    out = []
    for c in cases:
        name, dims, stage1, clear, splits = parse_case(c, configs)
        if stage1 != "auto" or clear or splits:
            raise ValueError(f"{c!r}: both kernels run on every case at their default splits (no STAGE1, no clear, "
                             "no ns=N)")
        out.append((name, dims))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", help="CONFIG:B/Hq/Hkv/context")
    ap.add_argument("--bits", type=int, choices=(8, 16, 24), help="the dither's width (default: the configuration's)")
    ap.add_argument("--reps", type=int, default=20, help="graph replays per timing (default 20)")
    ap.add_argument("--json", help="also write the lines here")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
    import decode as bd

    try:
        parsed = check_cases(args.cases, bd.CONFIGS)
    except ValueError as e:
        ap.error(f"cases: {e}")
    import cupy as cp

    l2 = bd.l2_bytes()
    rows = []
    for name, (B, hq, hkv, ctx) in parsed:
        _, tier, contrib, _ = bd.CONFIGS[name]
        case = bd.config_case(name, B, hq, hkv, ctx, l2)
        bits = args.bits or case.cfg.dither_bits
        kw = dict(tier=tier or "B", max_pages=ctx // bd.PAGE if contrib else 0)
        row = {"case": f"{name}:{B}/{hq}/{hkv}/{ctx}", "bits": bits,
               "auto": case.plans(bits, tier is not None, **kw)[0].kernel_name}
        for k in KERNELS:
            err = case.check(bits, tier is not None, stage1=k, **kw)
            if not err <= case.tolerance:
                raise SystemExit(f"{row['case']} on {k}: relative error {err:.2e} above {case.tolerance:.2e}")
            cert = bd.time_cupy([p.launch for p in case.plans(bits, tier is not None, stage1=k, **kw)], args.reps)[0]
            plain = bd.time_cupy([p.launch for p in case.plans(bits, False, stage1=k, **kw)], args.reps)[0] \
                if not contrib else None
            row[k] = {"certified_us": cert, "uncertified_us": plain, "rel_err": err}
        rows.append(row)
        print(f"{row['case']} at {bits} bits: " + ", ".join(
            f"{k} {row[k]['certified_us']:.1f} µs" + (f" (uncertified {row[k]['uncertified_us']:.1f})"
                                                       if row[k]["uncertified_us"] is not None else "")
            for k in KERNELS) + f"; the library's choice: {row['auto']}", flush=True)
        del case
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
