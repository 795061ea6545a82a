"""What the certificate's evaluation term costs in looseness (SPEC §4.1): the demo's median TV bound
with the kernels' own evaluation term γ_t, against the same run with γ_t removed, in one process.

    PYTHONPATH=. python3 bench/looseness.py [--backend cpu|cuda] [--shapes demo,2/32/8/32768] [--workers 5] [--out bench/results]

A shape ``B/Hq/Hkv/S`` runs the demo's synthetic model with that batch, heads and first context (one
layer, four steps), once as the demo configures it (Tier AB, two exact RoPE pairs: the general
kernel on the GPU) and once as Tier B with no exact channels (the staged-tile kernel's PLAIN layout);
``demo`` is ``witcert demo``'s own configuration.  γ_t is removed by zeroing the two launch scalars
that carry it (``certificate.kernel_scalars``): nothing else changes, so the ratio of the medians is
the term's looseness.  The form-(I) kernel forms its term inside the kernel and takes no such
scalars: a run that never took the switch's scalars reports ``looseness`` null
(``switch_reached`` false) rather than a ratio of two identical runs.  Writes
``looseness-<backend>.json``; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]
from shapes import parse_shape  # noqa: E402  (the benchmarks' one shape parser)
from witcert_cupy import certificate  # noqa: E402
from witcert_cupy.demo import run_demo  # noqa: E402

_shipped = certificate.kernel_scalars


_reached = [0]  # launches whose scalars the switch replaced (the form-(I) kernel's never are)


def _without_gamma(dot_height, sm_scale, dither_bits):
    _reached[0] += 1
    beta, _, _ = _shipped(dot_height, sm_scale, dither_bits)
    return beta, np.float32(0), np.float32(0)


def runs(spec):
    """``(name, run_demo kwargs)`` for one ``--shapes`` entry."""
    if spec == "demo":
        return [("demo", {})]
    try:
        B, Hq, Hkv, S = parse_shape(spec)
    except ValueError as e:
        raise SystemExit(f"--shapes: each entry is 'demo' or a shape; {e}") from None
    if S < 8:
        raise SystemExit(f"--shapes: {spec!r} needs a context of at least 8 tokens")
    base = dict(layers=1, kv_heads=Hkv, group=Hq // Hkv, context=S, batch=B, steps=4)
    return [(f"{spec} AB+outliers", base), (f"{spec} B plain", dict(base, tier="B", n_outlier_pairs=0))]


def measure(backend, spec):
    """The rows of one ``--shapes`` entry: each run's median bound with and without γ_t."""
    rows = []
    for name, kw in runs(spec):
        med = {}
        _reached[0] = 0
        for label, fn in (("shipped", _shipped), ("without_gamma", _without_gamma)):
            certificate.kernel_scalars = fn
            try:
                r = run_demo(backend=backend, quiet=True, **kw)
            finally:
                certificate.kernel_scalars = _shipped
            med[label] = r["tv_bound"]["median"]
            med[f"{label}_violations"] = r["violations"]
            med["cells"] = r["cells"]
        # no launch took the switch's scalars (every step on the form-(I) kernel, whose term is formed
        # inside it): the two runs are the same, and the ratio would read 0 without measuring anything
        reached = _reached[0] > 0
        rows.append({"case": name, **med, "switch_reached": reached,
                     "looseness": med["shipped"] / med["without_gamma"] - 1.0 if reached else None})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--shapes", default="demo", help="comma-separated: demo and/or B/Hq/Hkv/S")
    ap.add_argument("--workers", type=int, default=1, help="processes measuring shapes at once (results in order)")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    if args.workers < 1:
        ap.error("--workers must be >= 1")
    specs = [spec.strip() for spec in args.shapes.split(",")]
    for spec in specs:
        runs(spec)  # (every entry checked before any runs)
    rows, t0 = [], time.time()
    if args.workers == 1:
        results = (measure(args.backend, spec) for spec in specs)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ex = ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn"))
        results = ex.map(measure, [args.backend] * len(specs), specs)
    for spec_rows in results:
        for row in spec_rows:
            rows.append(row)
            grow = (f"+{100 * row['looseness']:.2f}%" if row["switch_reached"]
                    else "not measured (the switch does not reach the form-(I) kernel)")
            print(f"[looseness] {row['case']}: median bound {row['shipped']:.5g} vs {row['without_gamma']:.5g} "
                  f"without γ_t: {grow} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    out = {"meta": {"date": time.strftime("%Y-%m-%d"), "backend": args.backend,
                    "command": "python3 bench/looseness.py " + " ".join(sys.argv[1:]), "wall_s": time.time() - t0},
           "rows": rows}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"looseness-{args.backend}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
