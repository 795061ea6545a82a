"""Where a small-batch decode step's time goes, side by side in one process: for batch 1 at a few
contexts and split counts, the certified INT8 step (stage 1 + the merge that also certifies), stage 1
alone, and torch SDPA fp16 on the same shape — every number a graph replay over rotated buffers, as
in bench/decode.py.  The difference between the step and stage 1 is the merge plus one launch gap.

    PYTHONPATH=. python3 bench/decode_parts.py [--out bench/results] [--reps 30]

Writes ``decode-parts-<date>.json`` (rows: batch, hq, hkv, context, num_splits (0 = the default),
part, us, sdpa_us, ratio_sdpa).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import decode as bd  # noqa: E402

SHAPES = ((1, 32, 8, 4096), (1, 28, 4, 4096), (1, 32, 8, 32768))
SPLITS = (0, 16, 32, 64, 128)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    l2 = bd.l2_bytes()
    rows = []
    for i, (B, hq, hkv, ctx) in enumerate(SHAPES):
        print(f"[parts] shape {i + 1}/{len(SHAPES)}: B={B} {hq}/{hkv} ctx={ctx}", file=sys.stderr, flush=True)
        fns, err, _ = bd.sdpa_case(B, hq, hkv, ctx, bd.rotations(B * hkv * ctx * 2 * 2 * bd.D, l2))
        assert err < 2e-3, err
        sdpa_us, _ = bd.time_torch(fns, args.reps)
        del fns
        case = bd.Int8Case(B, hq, hkv, ctx, bd.PAGE, bd.rotations(B * hkv * ctx * 272, l2))
        err = case.check(8, True)
        assert err < 1e-4, err
        for ns in SPLITS:
            plans = case.plans(8, True, num_splits=ns or None)
            parts = {"step": [p.launch for p in plans],
                     "stage1": [lambda p=p: p.stage1(p.grid1, (p.block1,), p.args1) for p in plans]}
            for part, launches in parts.items():
                us, _ = bd.time_cupy(launches, args.reps)
                rows.append(dict(batch=B, hq=hq, hkv=hkv, context=ctx, num_splits=ns, actual_splits=plans[0].ns,
                                 part=part, us=us, sdpa_us=sdpa_us, ratio_sdpa=us / sdpa_us))
                print(f"  ns={plans[0].ns:>4}{' (default)' if not ns else '          '} {part:<7} {us:8.2f} us "
                      f"({us / sdpa_us:.2f}x SDPA {sdpa_us:.1f} us)", flush=True)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
    bd.write_rows_json(args.out, "decode-parts", rows)


if __name__ == "__main__":
    main()
