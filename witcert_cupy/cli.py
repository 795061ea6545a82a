"""The ``witcert`` command: ``witcert demo`` (the main job), ``witcert report`` and ``witcert info``.

Every value is checked before any work starts; a bad one ends with a usage message that names its
flag (exit status 2), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys


def _int_at_least(lo):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v

    return parse


def _float_in(lo, hi=None):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (v > lo and (hi is None or v < hi)):
            where = f"> {lo}" if hi is None else f"in ({lo}, {hi})"
            raise argparse.ArgumentTypeError(f"must be {where}, got {v}")
        return v

    return parse


def _demo(args):
    from .demo import format_report, run_demo

    backend = args.backend
    if backend == "auto":
        from .pool import cuda_available

        backend = "cuda" if cuda_available() else "cpu"
    report = run_demo(layers=args.layers, kv_heads=args.kv_heads, group=args.group, head_dim=args.head_dim,
                      context=args.context, batch=args.batch, steps=args.steps, page_size=args.page_size,
                      tier=args.tier, tau=args.tau, delta_req=args.delta_req, dither_bits=args.dither_bits,
                      n_outlier_pairs=args.outlier_pairs, witness_bands=args.witness_bands, seed=args.seed,
                      input_path=args.input, backend=backend, quiet=args.json)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print(format_report(report))
    return 0 if report["violations"] == 0 else 1


def _report(args):
    if importlib.util.find_spec("matplotlib") is None:  # before minutes of work, not after
        print("witcert report draws its plots with matplotlib, which is not installed: "
              "pip install 'witcert_cupy[plot]'", file=sys.stderr)
        return 2
    from .report import format_report, run_report, write_report

    backend = args.backend
    if backend == "auto":
        from .pool import cuda_available

        backend = "cuda" if cuda_available() else "cpu"
    rep = run_report(layers=args.layers, context=args.context, steps=args.steps, tau=args.tau, seed=args.seed,
                     backend=backend, quiet=args.quiet)
    paths = write_report(rep, args.out)
    print(format_report(rep))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0 if all(r["violations"] == 0 for r in rep["rows"]) else 1


def _info(_args):
    import numba
    import numpy

    from . import __version__
    from .pool import cuda_available

    print(f"witcert_cupy {__version__}")
    print(f"numpy {numpy.__version__}, numba {numba.__version__} ({numba.get_num_threads()} threads)")
    if cuda_available():
        import cupy

        dev = cupy.cuda.Device()
        print(f"cupy {cupy.__version__}, GPU: {cupy.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()}")
    else:
        print("GPU: none (cpu backend)")
    return 0


def main(argv=None):
    from . import __version__

    pos, nonneg = _int_at_least(1), _int_at_least(0)
    # no abbreviations: a prefix such as --out would silently mean --outlier-pairs
    p = argparse.ArgumentParser(prog="witcert", description="Runtime-certified INT8 KV cache.", allow_abbrev=False)
    p.add_argument("--version", action="version", version=f"witcert_cupy {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", allow_abbrev=False, help="certified decode on a realistic cache, checked against the true TV")
    d.add_argument("--input", help="npz with k, v [L,S,Hkv,d] and q [L,T,Hq,d] (captured activations)")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    d.add_argument("--layers", type=pos, default=2)
    d.add_argument("--kv-heads", type=pos, default=2)
    d.add_argument("--group", type=pos, default=4, help="query heads per kv head (G)")
    d.add_argument("--head-dim", type=pos, default=128)
    d.add_argument("--context", type=pos, default=4096, help="tokens of the first request")
    d.add_argument("--batch", type=pos, default=2)
    d.add_argument("--steps", type=pos, default=8)
    d.add_argument("--page-size", type=pos, default=16)
    d.add_argument("--tier", choices=["A", "B", "AB"], default="AB")
    d.add_argument("--tau", type=_float_in(0.0), default=0.2)
    d.add_argument("--delta-req", type=_float_in(0.0, 1.0), default=1e-2)
    d.add_argument("--dither-bits", type=int, choices=[8, 16, 24], default=8)
    d.add_argument("--outlier-pairs", type=nonneg, default=2, help="exact RoPE pairs per (layer, kv head)")
    d.add_argument("--witness-bands", type=nonneg, default=16)
    d.add_argument("--seed", type=nonneg, default=0)
    d.set_defaults(fn=_demo)
    r = sub.add_parser("report", allow_abbrev=False, help="the quad report (coverage, latency, error, memory) with plots")
    r.add_argument("--out", default="witcert-report", help="directory for report.json and the PNGs")
    r.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    r.add_argument("--layers", type=pos, default=2)
    r.add_argument("--context", type=pos, default=1024)
    r.add_argument("--steps", type=pos, default=4)
    r.add_argument("--tau", type=_float_in(0.0), default=0.2)
    r.add_argument("--seed", type=nonneg, default=0)
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(fn=_report)
    i = sub.add_parser("info", allow_abbrev=False, help="versions and devices")
    i.set_defaults(fn=_info)
    args = p.parse_args(argv)
    # values that are fine alone but not together, still before any work
    parser = {"demo": d, "report": r}.get(args.cmd)
    if parser is not None and args.context < args.steps:
        parser.error(f"--context ({args.context}) must be at least --steps ({args.steps}): "
                     "step t attends the first context − steps + t + 1 tokens")
    if args.cmd == "demo" and args.input is None:
        if args.head_dim % 2:
            d.error(f"--head-dim must be even (RoPE pairs), got {args.head_dim}")
        if args.witness_bands and (args.head_dim // 2) % args.witness_bands:
            d.error(f"--witness-bands ({args.witness_bands}) must divide --head-dim / 2 ({args.head_dim // 2})")
        if args.outlier_pairs > args.head_dim // 2:
            d.error(f"--outlier-pairs ({args.outlier_pairs}) must be at most --head-dim / 2 ({args.head_dim // 2})")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
