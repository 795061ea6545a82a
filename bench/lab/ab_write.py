"""A write-kernel change against a baseline tree, in one process: for each of bench/write.py's
configurations (and its shape: 262,144 tokens × 8 kv heads, d = 128, fp16 input, with some scale
groups zero so that the dead-group path runs), both packages write the same rows into their own
pools, the pools' codes, scales, witness and outliers are compared bit for bit, then each write is
timed (CUDA graphs, both packages alternately, ``--rounds`` times, the median).

    python3 bench/cert_cost.py --make-baseline HEAD /tmp/base      # here: the tree before the change
    PYTHONPATH=. python3 bench/lab/ab_write.py /tmp/base --rounds 5 --json /tmp/ab_write.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ((0, 8, 0), (16, 8, 0), (0, 16, 0), (16, 16, 0), (0, 24, 0), (16, 24, 0), (0, 8, 2))  # (bands, bits, pairs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("baseline", help="a tree written by bench/cert_cost.py --make-baseline")
    ap.add_argument("--tokens", type=int, default=262144, help="rows per kv head and side (default 262144)")
    ap.add_argument("--reps", type=int, default=20, help="graph replays per timing (default 20)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timings per package (default 5)")
    ap.add_argument("--json", help="also write the summaries here")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
    from cert_cost import baseline_error  # (the baseline tree's format is cert_cost's)

    bad = baseline_error(args.baseline)
    if bad:
        ap.error(f"baseline: {bad}")
    if args.reps < 1 or args.rounds < 1 or args.tokens < 16 or args.tokens % 16:
        ap.error("--reps and --rounds must be at least 1, --tokens a positive multiple of 16")
    import cupy as cp
    import numpy as np

    import cert_cost
    import witcert_cupy as this
    from decode import time_cupy

    base = cert_cost.import_baseline(Path(args.baseline))
    H, d, n = 8, 128, args.tokens
    rng = np.random.default_rng(0)
    k = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
    v = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
    k[::97, :, :16] = 0  # zero scale groups in some rows
    v[::89, :, 16:32] = 0
    slots = cp.arange(n, dtype=cp.int64)
    rows = []
    for i, (bands, bits, pairs) in enumerate(CONFIGS):
        print(f"[ab_write] {i + 1}/{len(CONFIGS)}: {bits}-bit dither, {bands} witness bands, {pairs} outlier pairs",
              file=sys.stderr, flush=True)
        pools = {}
        for lab, pkg in (("base", base), ("this", this)):
            op = (np.arange(pairs, dtype=np.int32).reshape(1, 1, pairs) * 9 + np.zeros((1, H, 1), np.int32)
                  if pairs else None)
            cfg = pkg.QuantConfig(d, dither_bits=bits, witness_bands=bands, outlier_pairs=op)
            pools[lab] = pkg.KVPool(1, H, d, n // 16, 16, cfg, backend="cuda")
            pools[lab].write(0, slots, k, v)
        same = all(bool(cp.array_equal(getattr(pools["base"], a), getattr(pools["this"], a)))
                   for a in ("codes", "scales", "witness", "outliers") if getattr(pools["base"], a, None) is not None)
        med, times = cert_cost.alternate({lab: [lambda pool=pools[lab]: pool.write(0, slots, k, v)]
                                          for lab in ("base", "this")}, args.reps, args.rounds, time_cupy)
        mb, mt = med["base"], med["this"]
        row = {"bits": bits, "bands": bands, "pairs": pairs, "base_us": round(mb, 1), "this_us": round(mt, 1),
               "ratio": round(mt / mb, 4), "same": same, "rounds": times}
        print(json.dumps({k2: v2 for k2, v2 in row.items() if k2 != "rounds"}), flush=True)
        rows.append(row)
        pools = None
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
