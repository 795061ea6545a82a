"""What the certificate's soundness terms cost: certified decode on this tree against a baseline
tree of the library (by default the one before SPEC §4.1–4.4: no evaluation term, unnormalized
coefficients, no request ledger), both imported into one process and timed on the same GPU, the
same shapes and the same rotated caches' layout, alternating between the two.

    python3 bench/cert_cost.py --make-baseline 5b7ee4f .old/base     # here: extract a git revision
    PYTHONPATH=. python3 bench/cert_cost.py --baseline .old/base [--reps 20] [--rounds 3]

``--make-baseline REV DIR`` writes ``REV``'s ``witcert_cupy/`` and ``cuda/`` under ``DIR`` (the GPU
machine has no git history).  The timed run copies that tree to a temporary directory as the package
``witcert_base`` (every ``witcert_cupy`` import renamed), builds each package's own pool with its own
write path from the same random codes, and times each configuration's plans per package in CUDA
graphs (bench/decode.py's method), ``--rounds`` times in alternation; the median over rounds is
reported.  Writes ``cert-cost.json`` (rows: shape, config, kernels, base_us, this_us, change_pct, and
``same_o``/``same_cert``: whether the first launch's outputs and certificates are the same bits in both
trees, as a kernel change that keeps the arithmetic should read against the tree before it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from shapes import parse_shapes  # (bench/, beside this file)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASE_NAME = "witcert_base"

SHAPES = ((8, 32, 8, 32768), (8, 28, 4, 32768), (1, 32, 8, 4096))
# (label, store, dither bits, tier): the library's default and the fp16 store a scheme is metered by
CONFIGS = (("tier_b_8", "int8", 8, "B"), ("tier_b_16", "int8", 16, "B"), ("fp16_store_tier_a", "fp16", None, "A"))
PAGE, D, BANDS = 16, 128, 16


def make_baseline(rev: str, out: Path) -> None:
    """``rev``'s package and kernel sources under ``out`` (replacing what is there)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "witcert_cupy", "cuda"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=tar, check=True)
    (out / "REV").write_text(subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True,
                                            capture_output=True, text=True).stdout)
    print(f"baseline {rev} written to {out}", file=sys.stderr)


def baseline_error(tree) -> str | None:
    """Why ``tree`` is not a tree written by ``--make-baseline`` (None when it is one): the check
    every tool comparing against a baseline tree makes before importing it."""
    return None if (Path(tree) / "witcert_cupy").is_dir() else \
        f"no witcert_cupy/ in {tree} (write one with bench/cert_cost.py --make-baseline)"


def baseline_rev(tree) -> str:
    """The git revision ``--make-baseline`` wrote into ``tree`` ('?' for a tree made otherwise)."""
    f = Path(tree) / "REV"
    return f.read_text().strip() if f.exists() else "?"


def import_baseline(tree: Path, name: str = BASE_NAME, edit=None):
    """The package in ``tree`` imported as ``name`` (a renamed copy; its kernels in its own
    ``cuda/``, which its kernel loader finds beside the package); ``edit(cuda_dir)``, if given,
    changes the copy's kernel sources first (the lab's instrumented copies)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}_"))
    pkg = tmp / name
    shutil.copytree(tree / "witcert_cupy", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(tree / "cuda", pkg / "cuda")
    for py in pkg.rglob("*.py"):
        py.write_text(py.read_text().replace("witcert_cupy", name))
    if edit is not None:
        edit(pkg / "cuda")
    sys.path.insert(0, str(tmp))
    return importlib.import_module(name)


def alternate(launches, reps, rounds, time_fn, enter=None):
    """``(medians, times)``: each named launch list of ``launches`` (name -> callables) timed by
    ``time_fn(callables, reps)`` (bench/decode.py's ``time_cupy``), the names in turn, ``rounds``
    times (``enter(name)`` before each, if given), and the median µs of each name's rounds: the one
    way two trees are timed against each other here and in bench/lab."""
    times = {k: [] for k in launches}
    for _ in range(rounds):
        for k, fs in launches.items():
            if enter is not None:
                enter(k)
            times[k].append(time_fn(fs, reps)[0])
    return {k: statistics.median(v) for k, v in times.items()}, times


class Case:
    """One package's pool of ``rot`` disjoint copies of a (B, Hkv, ctx) batch and its plans."""

    def __init__(self, wc, store, bits, shape, rot):
        import cupy as cp

        B, hq, hkv, ctx = shape
        npg = ctx // PAGE
        total = B * npg * rot
        self.wc, self.shape, self.rot = wc, shape, rot
        if store == "int8":
            self.pool = wc.KVPool(1, hkv, D, total, PAGE, wc.QuantConfig(D, dither_bits=bits, seed=1234),
                                  backend="cuda")
            fill = ((self.pool.codes, lambda n: (cp.random.randint(0, 255, size=n, dtype=cp.int32) - 127)
                     .astype(cp.int8)),
                    (self.pool.scales, lambda n: cp.random.uniform(0.004, 0.03, size=n).astype(cp.float16)))
            cp.random.seed(0)
            blk = 1 << 24
            for arr, gen in fill:
                flat = arr.reshape(-1)
                src = gen(blk)
                for off in range(0, flat.size, blk):
                    n = min(blk, flat.size - off)
                    flat[off:off + n] = src[:n]
        else:  # through the write path: what each tree's certified kernel reads is its own pool's
            from decode import fill_fp16_pool

            self.pool = wc.Fp16Pool(1, hkv, D, total, PAGE, witness_bands=BANDS, backend="cuda")
            fill_fp16_pool(self.pool, 0)
        rng = np.random.default_rng(0)
        self.tables, self.q = [], []
        for r in range(rot):
            base = r * B * npg
            self.tables.append((cp.arange(0, B * npg + 1, npg, dtype=cp.int32),
                                cp.arange(base, base + B * npg, dtype=cp.int32), cp.full(B, PAGE, cp.int32)))
            self.q.append(cp.asarray(rng.standard_normal((B, hq, D)).astype("float32")))

    def plans(self, tier):
        cert = self.wc.CertConfig(tier=tier, num_layers=32, steps=1024)
        return [self.pool._dev.plan(self.q[r], 0, *self.tables[r], 1 / math.sqrt(D), cert, None)
                for r in range(self.rot)]


def measure(args):
    import cupy as cp

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(HERE))
    import witcert_cupy as this  # noqa: E402
    from decode import l2_bytes, rotations, time_cupy  # noqa: E402

    base = import_baseline(Path(args.baseline))
    rev = baseline_rev(args.baseline)
    l2 = l2_bytes()
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    rows, t0 = [], time.time()
    shapes, configs = args.shapes, [c for c in CONFIGS if c[0] in args.configs]
    for si, shape in enumerate(shapes):
        B, hq, hkv, ctx = shape
        for ci, (label, store, bits, tier) in enumerate(configs):
            print(f"[cert_cost] shape {si + 1}/{len(shapes)} B={B} {hq}/{hkv} ctx={ctx}, config {ci + 1}/"
                  f"{len(configs)} {label}", file=sys.stderr, flush=True)
            per_tok = 2 * (D + 8) if store == "int8" else 2 * (2 * D + BANDS) + 4
            rot = rotations(B * hkv * ctx * per_tok, l2)
            cases = {"base": Case(base, store, bits, shape, rot), "this": Case(this, store, bits, shape, rot)}
            plans = {k: c.plans(tier) for k, c in cases.items()}
            first = {}
            for k, ps in plans.items():  # verify before timing: every cell certified
                ps[0].launch()
                r = ps[0].result()
                assert bool(cp.all(cp.isfinite(r.tv_bound))), f"{k}: non-finite certificate ({label})"
                first[k] = (cp.asnumpy(r.o), cp.asnumpy(r.tv_bound))
            # (a baseline that should compute the same bits, a kernel change that keeps the arithmetic:
            # both true; against the default baseline, whose certificate has no evaluation term, false)
            same_o, same_cert = (bool(np.array_equal(first["base"][i], first["this"][i], equal_nan=True))
                                 for i in (0, 1))
            med, times = alternate({k: [p.launch for p in ps] for k, ps in plans.items()}, args.reps, args.rounds,
                                   time_cupy)
            row = dict(batch=B, hq=hq, hkv=hkv, context=ctx, config=label,
                       kernels={k: ps[0].kernel_name for k, ps in plans.items()},
                       base_us=med["base"], this_us=med["this"], rounds=times,
                       change_pct=100.0 * (med["this"] / med["base"] - 1.0), same_o=same_o, same_cert=same_cert)
            rows.append(row)
            print(f"    {label:<18} base {med['base']:8.1f} us ({row['kernels']['base']})  this {med['this']:8.1f} us "
                  f"({row['kernels']['this']})  {row['change_pct']:+.1f}%  same o/cert {same_o}/{same_cert}", file=sys.stderr,
                  flush=True)
            del plans, cases
            cp.get_default_memory_pool().free_all_blocks()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": dev["name"].decode(), "baseline_rev": rev,
            "command": " ".join(["python3"] + sys.argv), "reps": args.reps, "rounds": args.rounds,
            "wall_s": time.time() - t0}
    (out / "cert-cost.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--make-baseline", nargs=2, metavar=("REV", "DIR"),
                    help="write git revision REV's package and kernels under DIR, then exit")
    ap.add_argument("--baseline", help="a tree written by --make-baseline (the GPU run)")
    ap.add_argument("--reps", type=int, default=20, help="graph replays per timing (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timings per package (default 3)")
    ap.add_argument("--out", default=str(HERE / "results"), help="directory for cert-cost.json")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS),
                    help="comma-separated configurations (default: all of " + ", ".join(c[0] for c in CONFIGS) + ")")
    ap.add_argument("--shapes", default=",".join("/".join(map(str, s)) for s in SHAPES),
                    help="comma-separated B/Hq/Hkv/context shapes (default: %(default)s)")
    args = ap.parse_args(argv)
    known = [c[0] for c in CONFIGS]
    args.configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in args.configs if c not in known]
    if bad or not args.configs:
        ap.error(f"--configs: unknown configuration {bad[0] if bad else '(none given)'}; choose from {', '.join(known)}")
    try:
        args.shapes = list(parse_shapes(args.shapes, PAGE))
    except ValueError as e:
        ap.error(f"--shapes: {e}")
    if args.make_baseline:
        make_baseline(args.make_baseline[0], Path(args.make_baseline[1]))
        return 0
    if not args.baseline:
        ap.error("--baseline DIR is required (write one with --make-baseline REV DIR)")
    bad = baseline_error(args.baseline)
    if bad:
        ap.error(f"--baseline: {bad}")
    if args.reps < 1 or args.rounds < 1:
        ap.error("--reps and --rounds must be at least 1")
    measure(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
