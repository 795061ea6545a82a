"""The ``witcert`` command: ``witcert demo`` (the main job) and ``witcert info``."""

from __future__ import annotations

import argparse
import json
import sys


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
    p = argparse.ArgumentParser(prog="witcert", description="Runtime-certified INT8 KV cache.")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="certified decode on a realistic cache, checked against the true TV")
    d.add_argument("--input", help="npz with k, v [L,S,Hkv,d] and q [L,T,Hq,d] (captured activations)")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    d.add_argument("--layers", type=int, default=2)
    d.add_argument("--kv-heads", type=int, default=2)
    d.add_argument("--group", type=int, default=4, help="query heads per kv head (G)")
    d.add_argument("--head-dim", type=int, default=128)
    d.add_argument("--context", type=int, default=4096, help="tokens of the first request")
    d.add_argument("--batch", type=int, default=2)
    d.add_argument("--steps", type=int, default=8)
    d.add_argument("--page-size", type=int, default=16)
    d.add_argument("--tier", choices=["A", "B", "AB"], default="AB")
    d.add_argument("--tau", type=float, default=0.2)
    d.add_argument("--delta-req", type=float, default=1e-2)
    d.add_argument("--dither-bits", type=int, choices=[8, 16, 24], default=8)
    d.add_argument("--outlier-pairs", type=int, default=2, help="exact RoPE pairs per (layer, kv head)")
    d.add_argument("--witness-bands", type=int, default=16)
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(fn=_demo)
    r = sub.add_parser("report", help="the quad report (coverage, latency, error, memory) with plots")
    r.add_argument("--out", default="witcert-report", help="directory for report.json and the PNGs")
    r.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    r.add_argument("--layers", type=int, default=2)
    r.add_argument("--context", type=int, default=1024)
    r.add_argument("--steps", type=int, default=4)
    r.add_argument("--tau", type=float, default=0.2)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(fn=_report)
    i = sub.add_parser("info", help="versions and devices")
    i.set_defaults(fn=_info)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
