"""The latency floor of a small-batch INT8 decode step, as a ladder of skeletons timed side by side
with the shipped step and torch SDPA fp16 in one process (issue 5: "B = 1, context 4096: ≤ 1.0";
where a goal is out of reach, the notes show the measured floor and why).

At B = 1 and 4k tokens the step moves 4–9 MB: a few µs of HBM time.  What is left is the chain of
dependent steps that a paged, split-KV decode with a separate merge cannot avoid — a launch, the
request's page-table entries, the split's page ids, its rows, its partials, a second launch, the
partials, the output.  Each rung below removes work from the shipped kernels
(``bench/variants/step-skeleton.patch``, applied to a temporary copy of ``cuda/``; the results of
every rung but the first are wrong by design and are not checked):

- ``shipped``: the certified step (decode_stage1_v2, then decode_merge);
- ``V2_SKEL=4`` / ``5`` / ``6``: stage 1 without the V warp's phase A (V̂, c_t, λ) / the K warp's
  (q·k̂, the softmax) / phase C (o += P·V̂), the rest as shipped: which part binds;
- ``V2_SKEL=1``: stage 1 loads and stages every tile's rows as shipped, without their arithmetic;
- ``V2_SKEL=2``: stage 1 reads the query and the request's page-table entries, no tiles;
- ``V2_SKEL=3``: stage 1 reads nothing (it stores its partials);
- ``MG_SKEL=1``: the merge reads nothing (it stores its cell).

Each rung is timed as the whole step and as its stage 1 (or merge) alone, at the shipped plan's
split count, in the CUDA graph of rotated plans that ``bench/decode.py`` replays, with
programmatic dependent launch as shipped.  ``V2_SKEL=1,MG_SKEL=1``, the step, moves every byte the
step moves through the shipped set-up and epilogue, and merges nothing; ``V2_SKEL=3,MG_SKEL=1`` is
two launches that store what a step stores; its stage 1 alone is one.

    PYTHONPATH=. python3 bench/step_floor.py [--shapes 1/28/4/4096,1/32/8/4096] [--rounds 3] [--out bench/results]

Writes ``step-floor-<date>.json`` (rows: rung, part, batch, hq, hkv, context, num_splits, us, the
median over rounds, sdpa_us, ratio_sdpa, us_rounds).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
from pathlib import Path

import cupy as cp

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("bench_decode_variants", HERE / "decode_variants.py")
dv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dv)
bd = dv.bd  # bench/decode.py
# the sides' layout at every batch below V2_SPLIT_MIN_PAIRS (the structure the patch's rungs and
# points describe; the library's default since session 23 takes the split at G >= 5 with one tile
# per split)
dv._SWITCHES["V2_SPLIT_MIN_G"] = 99

PATCH = HERE / "variants" / "step-skeleton.patch"
RUNGS = ("", "V2_SKEL=4", "V2_SKEL=5", "V2_SKEL=6", "V2_SKEL=1", "V2_SKEL=2", "V2_SKEL=3", "MG_SKEL=1",
         "V2_SKEL=1,MG_SKEL=1", "V2_SKEL=3,MG_SKEL=1")


def parts(plans):
    """The launches each part of a step times: the step, its stage 1, its merge."""
    return {"step": [p.launch for p in plans], "stage1": [p._stage1 for p in plans],
            "merge": [p.merge for p in plans]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1/28/4/4096,1/32/8/4096")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    src = dv.patched_kernels(PATCH)
    l2 = bd.l2_bytes()
    rows = []
    try:
        for B, hq, hkv, ctx in bd.parse_shapes(args.shapes):
            case = bd.pool_case(False, B, hq, hkv, ctx, l2)
            dv.use_variant([])
            err = case.check(8, True, "v2")
            assert err < 1e-4, err
            ns = case.plans(8, True, stage1="v2")[0].ns
            built = []
            for rung in RUNGS:
                dv.use_variant([f"dir={src}", *[d for d in rung.split(",") if d]])
                plans = case.plans(8, True, stage1="v2", num_splits=ns)
                for p in plans:  # every part then reads partials its own stage 1 wrote
                    p.launch()
                built.append((rung or "shipped", parts(plans)))
            sdpa_fns = bd.sdpa_checked(B, hq, hkv, ctx, l2)
            sdpa_rounds, times = [], {}
            for _ in range(args.rounds):
                sdpa_rounds.append(bd.time_torch(sdpa_fns, args.reps)[0])
                for rung, ps in built:
                    for part, fns in ps.items():
                        times.setdefault((rung, part), []).append(bd.time_cupy(fns, args.reps)[0])
            sdpa_us = statistics.median(sdpa_rounds)
            print(f"B={B} {hq}/{hkv} ctx={ctx} ns={ns}: SDPA {sdpa_us:.1f} us (rounds "
                  + " ".join(f"{t:.1f}" for t in sdpa_rounds) + ")", flush=True)
            for (rung, part), ts in times.items():
                us = statistics.median(ts)
                rows.append(dict(rung=rung, part=part, batch=B, hq=hq, hkv=hkv, context=ctx, num_splits=ns, us=us,
                                 sdpa_us=sdpa_us, ratio_sdpa=us / sdpa_us, us_rounds=ts, sdpa_us_rounds=sdpa_rounds))
                print(f"  {rung:<22} {part:<7} {us:8.1f} us  {us / sdpa_us:5.2f}x  rounds "
                      + " ".join(f"{t:.1f}" for t in ts), flush=True)
            built = case = sdpa_fns = None
            cp.get_default_memory_pool().free_all_blocks()
    finally:
        dv.use_variant([])
        shutil.rmtree(src.parent, ignore_errors=True)
    bd.write_rows_json(args.out, "step-floor", rows)


if __name__ == "__main__":
    main()
