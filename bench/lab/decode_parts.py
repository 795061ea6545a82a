"""Where a small-batch decode step's time goes, side by side in one process: for batch 1 at a few
contexts and split counts, the certified INT8 step (stage 1 + the merge that also certifies), stage 1
alone, and torch SDPA fp16 on the same shape — every number a graph replay over rotated buffers, as
in bench/decode.py.  The difference between the step and stage 1 is the merge plus one launch gap.

    PYTHONPATH=. python3 bench/lab/decode_parts.py [--fp16] [--out bench/results] [--reps 30]

With ``--fp16`` the fp16-store step (decode_stage1_f16, Tier A) instead, at more split counts;
``--uncertified-too`` times the INT8 step and stage 1 with the certificate off as well (where its
cost lies); ``--shapes 1/28/4/32768,...`` and ``--splits 0,64,...`` replace the default lists.
Writes ``decode-parts.json`` (``decode-parts-fp16.json``; rows: batch, hq, hkv,
context, num_splits (0 = the default), cert, part, us, sdpa_us, ratio_sdpa).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import decode as bd  # noqa: E402

SHAPES = ((1, 32, 8, 4096), (1, 28, 4, 4096), (1, 32, 8, 32768))
SPLITS = (0, 16, 32, 64, 128)
FP16_SHAPES = ((1, 32, 8, 4096), (1, 28, 4, 4096), (1, 32, 8, 32768), (1, 28, 4, 32768), (8, 28, 4, 32768),
               (32, 28, 4, 32768))
FP16_SPLITS = (0, 32, 64, 128, 256)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--fp16", action="store_true", help="the fp16-store step (decode_stage1_f16)")
    ap.add_argument("--stage1", default="auto", help="the plan's stage-1 kernel (auto, f16, v2, v1)")
    ap.add_argument("--uncertified-too", action="store_true",
                    help="the INT8 step and stage 1 with the certificate off as well (where its cost lies)")
    ap.add_argument("--shapes", default=None, help="B/Hq/Hkv/context,... instead of the default shapes")
    ap.add_argument("--splits", default=None, help="split counts, comma-separated (0 = the default)")
    args = ap.parse_args()
    l2 = bd.l2_bytes()
    rows = []
    shapes, splits = (FP16_SHAPES, FP16_SPLITS) if args.fp16 else (SHAPES, SPLITS)
    if args.shapes:
        shapes = bd.parse_shapes(args.shapes)
    if args.splits:
        splits = tuple(int(x) for x in args.splits.split(","))
    bits = None if args.fp16 else 8
    certs = bd.cert_modes(args.fp16, args.uncertified_too)
    for i, (B, hq, hkv, ctx) in enumerate(shapes):
        print(f"[parts] shape {i + 1}/{len(shapes)}: B={B} {hq}/{hkv} ctx={ctx}", file=sys.stderr, flush=True)
        sdpa_us = bd.sdpa_time(B, hq, hkv, ctx, l2, args.reps)
        case = bd.pool_case(args.fp16, B, hq, hkv, ctx, l2)
        for cert in certs:
            err = case.check(bits, cert, args.stage1)
            assert err < 1e-4, err
            for ns in splits:
                plans = case.plans(bits, cert, stage1=args.stage1, num_splits=ns or None)
                parts = {"step": [p.launch for p in plans],
                         "stage1": [lambda p=p: p.stage1(p.grid1, (p.block1,), p.args1, shared_mem=p.smem1)
                                    for p in plans]}
                for part, launches in parts.items():
                    us, _ = bd.time_cupy(launches, args.reps)
                    rows.append(dict(kernel=plans[0].kernel_name, cert=cert, batch=B, hq=hq, hkv=hkv, context=ctx,
                                     num_splits=ns, actual_splits=plans[0].ns, part=part, us=us, sdpa_us=sdpa_us,
                                     ratio_sdpa=us / sdpa_us))
                    print(f"  ns={plans[0].ns:>4}{' (default)' if not ns else '          '} {part:<7}"
                          f"{'' if cert else ' uncertified'} {us:8.2f} us "
                          f"({us / sdpa_us:.2f}x SDPA {sdpa_us:.1f} us)", flush=True)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
    bd.write_rows_json(args.out, "decode-parts-fp16" if args.fp16 else "decode-parts", rows)


if __name__ == "__main__":
    main()
