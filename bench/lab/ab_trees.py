"""A kernel change against a baseline tree, configuration by configuration, in one process: each of
bench/decode.py's configurations built by both packages, their first launches' outputs and
certificates compared bit for bit, then each timed (CUDA graphs over rotated buffers, both packages
alternately, ``--rounds`` times, the median).

    python3 bench/cert_cost.py --make-baseline HEAD /tmp/base           # here: the tree before the change
    PYTHONPATH=. python3 bench/lab/ab_trees.py /tmp/base gate_step:1/32/8/4096 exact_tier_1pct:8/28/4/32768:v2

A case is ``CONFIG:B/Hq/Hkv/context[:STAGE1][:clear][:ns=N]``: STAGE1 forces a kernel ('auto' by
default), ``clear`` unmaps every exact-tier page after the plans are built (the pool keeps its tier,
so the step keeps its instantiation: what the instantiation costs without exact tiles), ``ns=N``
gives both trees N splits (by default each its own: a change of occupancy changes the split count,
and with it o's merge rounding, so ``same_o`` needs the same N to say whether a bit moved).  A summary line per
case, and ``--json`` writes them.  A change that should not move a bit reads ``same_o`` and
``same_cert`` true; one that changes the arithmetic reads false there, which is for its own tests to
judge.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))
from shapes import parse_shape  # noqa: E402  (the benchmarks' one shape parser)

STAGE1 = ("auto", "v1", "v2", "i8")


def parse_case(text, configs):
    """``(config, (B, Hq, Hkv, context), stage1, clear, splits)`` of one case (``splits`` None: each
    tree's default); ValueError naming what is wrong."""
    parts = text.split(":")
    if len(parts) < 2 or parts[0] not in configs:
        raise ValueError(f"{text!r}: CONFIG:B/Hq/Hkv/context[:STAGE1][:clear][:ns=N], "
                         f"CONFIG one of {', '.join(configs)}")
    dims = parse_shape(parts[1])
    rest = parts[2:]
    clear = "clear" in rest
    ns = [r[3:] for r in rest if r.startswith("ns=")]
    rest = [r for r in rest if r != "clear" and not r.startswith("ns=")]
    if len(ns) > 1 or (ns and not (ns[0].isdigit() and int(ns[0]) >= 1)):
        raise ValueError(f"{text!r}: ns=N takes one positive split count")
    stage1 = rest[0] if rest else "auto"
    if stage1 not in STAGE1 or len(rest) > 1:
        raise ValueError(f"{text!r}: STAGE1 is one of {', '.join(STAGE1)}, then optionally 'clear' and 'ns=N'")
    return parts[0], dims, stage1, clear, int(ns[0]) if ns else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("baseline", help="a tree written by bench/cert_cost.py --make-baseline")
    ap.add_argument("cases", nargs="+", help="CONFIG:B/Hq/Hkv/context[:STAGE1][:clear][:ns=N]")
    ap.add_argument("--reps", type=int, default=20, help="graph replays per timing (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timings per package (default 3)")
    ap.add_argument("--json", help="also write the summaries here")
    args = ap.parse_args(argv)
    from cert_cost import baseline_error  # (the baseline tree's format is cert_cost's)

    bad = baseline_error(args.baseline)
    if bad:
        ap.error(f"baseline: {bad}")
    if args.reps < 1 or args.rounds < 1:
        ap.error("--reps and --rounds must be at least 1")
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
    import decode as bd  # (imports CuPy)

    try:
        cases = [parse_case(c, bd.CONFIGS) for c in args.cases]
    except ValueError as e:
        ap.error(f"cases: {e}")
    import cupy as cp
    import numpy as np

    import cert_cost
    import witcert_cupy as this

    base = cert_cost.import_baseline(Path(args.baseline))
    l2 = bd.l2_bytes()
    rows = []
    for k, (name, (B, hq, hkv, ctx), stage1, clear, splits) in enumerate(cases):
        print(f"[ab_trees] case {k + 1}/{len(cases)}: {name} {B}/{hq}/{hkv}/{ctx}", file=sys.stderr, flush=True)
        _, tier, contrib, _ = bd.CONFIGS[name]
        plans, first = {}, {}
        for lab, pkg in (("base", base), ("this", this)):
            bd.wc = pkg  # the module global every Int8Case method builds with
            case = bd.config_case(name, B, hq, hkv, ctx, l2)
            ps = case.plans(case.cfg.dither_bits, tier is not None, stage1=stage1, num_splits=splits,
                            tier=tier or "B", max_pages=ctx // bd.PAGE if contrib else 0)
            if clear:
                if case.pool.tier_map_dev is None:
                    ap.error(f"cases: {name} has no exact tier to clear")
                case.pool.tier_map_dev[...] = -1
            ps[0].launch()
            r = ps[0].result()
            first[lab] = (cp.asnumpy(r.o), None if r.tv_bound is None else cp.asnumpy(r.tv_bound))
            plans[lab] = (case, ps)
        (ob, cb), (ot, ct) = first["base"], first["this"]
        med, times = cert_cost.alternate({lab: [p.launch for p in plans[lab][1]] for lab in ("base", "this")},
                                         args.reps, args.rounds, bd.time_cupy,
                                         enter=lambda lab: setattr(bd, "wc", base if lab == "base" else this))
        mb, mt = med["base"], med["this"]
        label = f"{name}:{B}/{hq}/{hkv}/{ctx}:{stage1}" + (":clear" if clear else "")
        label += f":ns={splits}" if splits else ""
        row = {"case": label,
               "kernels": {lab: f"{plans[lab][1][0].kernel_name} ns={plans[lab][1][0].ns}" for lab in plans},
               "base_us": round(mb, 2), "this_us": round(mt, 2), "ratio": round(mt / mb, 4),
               "same_o": bool(np.array_equal(ob, ot, equal_nan=True)),
               "same_cert": cb is None or bool(np.array_equal(cb, ct, equal_nan=True)),
               "rounds": times}
        print(json.dumps({k2: v for k2, v in row.items() if k2 != "rounds"}), flush=True)
        rows.append(row)
        plans = first = None
        cp.get_default_memory_pool().free_all_blocks()
    bd.wc = this
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
