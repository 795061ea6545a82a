"""What the certificate's evaluation term costs in looseness (SPEC §4.1): the demo's median TV bound
with the kernels' own evaluation term γ_t, against the same run with γ_t removed, in one process.

    PYTHONPATH=. python3 bench/looseness.py [--backend cpu|cuda] [--shapes demo,2/32/8/32768] [--workers 5] [--out bench/results]

A shape ``B/Hq/Hkv/S`` runs the demo's synthetic model with that batch, heads and first context (one
layer, four steps), once as the demo configures it (Tier AB, two exact RoPE pairs: the general
kernel on the GPU) and once as Tier B with no exact channels (the staged-tile kernel's PLAIN layout);
``demo`` is ``witcert demo``'s own configuration.  γ_t is removed by zeroing the two launch scalars
that carry it (``certificate.kernel_scalars``); the form-(I) kernel forms its term inside the kernel
from the integer sums, so there the switch zeroes its rounding factor ``γ_n``
(``certificate.form_i_gamma``) and its exact-tier scalar (``certificate.form_i_scalars``) and compiles
the residual and dropped-product bounds (``_contract.FORM_I_*_BOUND*``) as 0, a module of its own.
Nothing else changes, so the ratio of the medians is the term's looseness.  A run whose launches
never took the switch (the CPU backend's twin has the bounds compiled in) reports ``looseness``
null (``switch_reached`` false) rather than a ratio of two identical runs.  Writes
``looseness-<backend>.json``; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]
from shapes import parse_shape  # noqa: E402  (the benchmarks' one shape parser)
from witcert_cupy import _contract, certificate  # noqa: E402
from witcert_cupy.demo import run_demo  # noqa: E402

_shipped = certificate.kernel_scalars
_shipped_form_i = certificate.form_i_scalars
_shipped_form_i_gamma = certificate.form_i_gamma
# the form-(I) kernel's bounds on the query split's residual and the dropped product, compiled in
_FORM_I_BOUNDS = ("FORM_I_RESIDUAL_BOUND", "FORM_I_DROPPED_BOUND", "FORM_I_RESIDUAL_BOUND_16",
                  "FORM_I_DROPPED_BOUND_16")

_reached = [0]  # launches whose evaluation term the switch removed


def _without_gamma(dot_height, sm_scale, dither_bits):
    _reached[0] += 1
    beta, _, _ = _shipped(dot_height, sm_scale, dither_bits)
    return beta, np.float32(0), np.float32(0)


def _clear_kernel_caches():
    """Forget the compiled modules and the options that keyed them (the next launch compiles with
    the contract constants as they are now; NVRTC's disk cache keeps both builds)."""
    from witcert_cupy._cuda import build

    build.options.cache_clear()
    build._module.cache_clear()


@contextlib.contextmanager
def evaluation_term_removed(backend):
    """Within: every kernel's evaluation term γ_t is 0 (the fp32 kernels' launch scalars, the
    form-(I) kernel's γ_n, exact-tier scalar and compiled bounds); restored on exit."""
    saved = {k: getattr(_contract, k) for k in _FORM_I_BOUNDS}

    def form_i_without_gamma(head_dim, sm_scale, dither_bits=8, outlier_channels=0, exact_tier=False):
        # (a launch whose bounds compile as 0: the CPU twin's are numba constants, not removed)
        _reached[0] += backend == "cuda"
        beta, _, _ = _shipped_form_i(head_dim, sm_scale, dither_bits, outlier_channels, exact_tier)
        return beta, np.float32(0), np.float32(0)

    certificate.kernel_scalars = _without_gamma
    certificate.form_i_scalars = form_i_without_gamma
    certificate.form_i_gamma = lambda outliers=False: np.float32(0)
    for k in _FORM_I_BOUNDS:
        setattr(_contract, k, 0)
    if backend == "cuda":
        _clear_kernel_caches()
    try:
        yield
    finally:
        certificate.kernel_scalars = _shipped
        certificate.form_i_scalars = _shipped_form_i
        certificate.form_i_gamma = _shipped_form_i_gamma
        for k, v in saved.items():
            setattr(_contract, k, v)
        if backend == "cuda":
            _clear_kernel_caches()


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
        for label in ("shipped", "without_gamma"):
            if label == "shipped":
                r = run_demo(backend=backend, quiet=True, **kw)
            else:
                with evaluation_term_removed(backend):
                    r = run_demo(backend=backend, quiet=True, **kw)
            med[label] = r["tv_bound"]["median"]
            med[f"{label}_violations"] = r["violations"]
            med["cells"] = r["cells"]
        # no launch took the switch (the CPU twin's form-(I) bounds are compiled in): the two runs are
        # the same, and the ratio would read 0 without measuring anything
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
                    else "not measured (no launch took the switch)")
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
