"""The measured floor of a certified INT8 decode, side by side in one process with torch SDPA fp16
and our certified decode on the same shapes (issue 5: where a goal is out of reach, the notes show
the measured floor and why).

    PYTHONPATH=. python3 bench/lab/decode_floor.py [--out bench/results] [--reps 30] [--shapes 1/28/4/4096,...] [--graph]

The ladder (``bench/lab/cuda/bench_floor.cu``), each level streaming the same bytes as the decode (codes and
fp16 scales of K and V, one layer) and each doing strictly less than any decode that meets SPEC
§2–§6: L0 the loads; L1 + one Philox call per 16 codes (and L1_philox_16bit / _24bit: 2 and 4 calls,
the stream at 16- and 24-bit dither, a floor of those pools' decode); L2 + fp32 x̂ = s(k − ξ); L3 + G fp32 FMAs
per element.  The fp16-store ladder (rows of fp16 values, as an Fp16Pool) beside it: F0 the loads;
F1 + the fp32 conversion; F3 + G fp32 FMAs per element; with our fp16-store decode timed on the
same shape.  And the tensor-core route's levels on the INT8 bytes (not floors of SPEC §6: what a
decode with docs/certificate.md §9's fp16 operands could reach): T1 L1 + K's exact fp16 operands
and V̂ rounded to fp16; T2 + the mma.sync instructions such a decode issues (and K's per-group
scaling); T3 T2 with V as exact operands too; T4 integer tensor cores on the stored bytes (codes and
dither fields as they are, the query and p·s in 8-bit parts); T5 T4 by warpgroup mma (compute
capability 9.0).  Each level is timed with CUDA events around single launches over a buffer many times
the L2 at the large shapes; at B = 1, 4k the buffer fits in L2 and a launch's overhead is a large
part of each time, so those rows are not lower bounds on a graph-replayed decode (the decode and
SDPA rows are graph replays, as in bench/decode.py).  ``--graph`` times the levels that way too —
a CUDA graph of one launch per rotated copy of the data, replayed — which makes the small shapes'
rows a one-kernel floor: no page table, no softmax, no merge.  Writes
``decode-floor[-graph].json`` (rows: level, batch, hq, hkv, context, us, gbps, ratio_sdpa,
timing) and prints the table.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import math
import sys
import time
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
LAB_CUDA = Path(__file__).resolve().parent / "cuda"  # the lab's kernels, outside the wheel
from witcert_cupy import _cuda  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_decode", ROOT / "bench" / "decode.py")
bd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bd)

D, GS = 128, 32
LEVELS = (("L0_loads", "bench_floor_l0"), ("L1_philox", "bench_floor_l1"), ("L1_philox_16bit", "bench_floor_l1_16"),
          ("L1_philox_24bit", "bench_floor_l1_24"), ("L2_dequant", "bench_floor_l2"), ("L3_fma", None))
# the tensor-core route (bench/lab/cuda/bench_floor.cu, bench_floor_tc_*): not floors of SPEC §6
TC_LEVELS = (("T1_tc_operands", "bench_floor_tc_t1"), ("T2_tc_mma", "bench_floor_tc_t2"),
             ("T3_tc_exact_v", "bench_floor_tc_t3"), ("T4_imma_raw_bytes", "bench_floor_tc_t4"))
# T5: T4's products by warpgroup mma, built for the sm_90a target (compute capability 9.0 only)
WGMMA_LEVEL, WGMMA_OPTIONS = ("T5_wgmma_raw_bytes", "bench_floor_tc_t5"), ("-arch=sm_90a", "-DBF_WGMMA=1")


def time_events(fn, reps):
    """Median µs of ``fn`` (one launch per rep), CUDA events on the current stream.  Unlike the
    decode and SDPA rows (graph replays, bench/decode.py), each rep includes one launch's overhead:
    negligible at the large shapes, not at B = 1, 4k (docs/performance.md)."""
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    return statistics.median(ts)


def floor_rows(B, hq, hkv, ctx, reps, sms, graph=False, l2=0):
    """The ladder's rows on one shape.  ``graph``: each level timed as bench/decode.py times a step —
    a CUDA graph of one launch per rotated copy of the data (copies together ≥ 3× the L2), replayed
    — instead of events around single launches; for the small shapes, where one launch's overhead
    is most of a level's time."""
    G = hq // hkv
    rows_kv = 2 * hkv * B * ctx  # (side, kv head, token) rows of one layer
    # the tensor-core levels' warps (warpgroups for T5) each stay on one side: mma.sync is a warp's
    # instruction, wgmma a warpgroup's
    assert (rows_kv // 2) % 64 == 0, "B·Hkv·context must be a multiple of 64"
    nbytes = rows_kv * (D + 2 * (D // GS))
    rot = bd.rotations(nbytes, l2) if graph else 1
    cp.random.seed(0)
    codes = cp.empty(rot * rows_kv * D, cp.int8)
    blk = 1 << 26
    src = (cp.random.randint(0, 255, size=blk, dtype=cp.int32) - 127).astype(cp.int8)
    for off in range(0, codes.size, blk):
        n = min(blk, codes.size - off)
        codes[off:off + n] = src[:n]
    scales = cp.random.uniform(0.004, 0.03, size=rot * rows_kv * (D // GS)).astype(cp.float16)
    coef = cp.asarray(np.random.default_rng(0).standard_normal(32).astype(np.float32))
    grid = sms * 8
    sink = cp.empty(grid * 256, cp.float32)
    fh = 4 if G <= 4 else 7  # the FMA level's head count (the kernels instantiate G = 4 and 7)
    out = []

    def ladder(levels, data_args, nbytes):
        for level, name in levels:
            k = _cuda.kernel("bench_floor.cu", name, None, WGMMA_OPTIONS if (level, name) == WGMMA_LEVEL else (), root=LAB_CUDA)
            launches = [lambda a=a: k((grid,), (256,), (*a, coef, sink)) for a in data_args]
            us = bd.time_cupy(launches, reps)[0] if graph else time_events(launches[0], reps)
            assert bool(cp.isfinite(sink).all()), f"{name}: non-finite sink"
            out.append(dict(level=level, kernel=name, fma_heads=fh if "fma" in level.lower() else 0, us=us,
                            gbps=nbytes / us / 1e3, timing="graph" if graph else "events", rotations=rot))

    cs, ss = codes.reshape(rot, -1), scales.reshape(rot, -1)
    tc = TC_LEVELS + ((WGMMA_LEVEL,) if cp.cuda.Device().compute_capability == "90" else ())
    ladder([(lv, name or f"bench_floor_l3_g{fh}") for lv, name in LEVELS + tc],
           [(cs[r], ss[r], np.int64(rows_kv), np.int32(int(math.log2(GS))), np.uint32(0x1234), np.uint32(0x5678))
            for r in range(rot)], nbytes)
    del codes, scales, cs, ss
    cp.get_default_memory_pool().free_all_blocks()
    # the fp16-store ladder: rows of 128 fp16 values (half the values drawn, twice: a smaller
    # float32 temporary at the largest shapes; contents do not change the timing)
    vals = cp.random.standard_normal(rot * rows_kv * D // 2, dtype=cp.float32).astype(cp.float16)
    vals = cp.concatenate([vals, vals]).view(cp.uint16).reshape(rot, -1)
    ladder([("F0_loads", "bench_floor_f16_l0"), ("F1_convert", "bench_floor_f16_l1"),
            ("F3_fma", f"bench_floor_f16_l3_g{fh}")], [(vals[r], np.int64(rows_kv)) for r in range(rot)],
           rows_kv * D * 2)
    del vals
    cp.get_default_memory_pool().free_all_blocks()
    return out, nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--shapes", default=None, help="B/Hq/Hkv/context,... instead of the default shapes")
    ap.add_argument("--graph", action="store_true",
                    help="time the ladder as CUDA-graph replays over rotated copies (the small shapes' floor)")
    args = ap.parse_args()
    import torch

    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    sms, l2 = dev["multiProcessorCount"], bd.l2_bytes()
    shapes = [(8, 32, 8, 32768), (8, 28, 4, 32768), (32, 32, 8, 32768), (1, 32, 8, 131072), (1, 32, 8, 4096),
              (1, 28, 4, 4096)]
    if args.shapes:
        shapes = list(bd.parse_shapes(args.shapes))
    rows, t0 = [], time.time()
    for i, (B, hq, hkv, ctx) in enumerate(shapes):
        print(f"[floor] shape {i + 1}/{len(shapes)}: B={B} {hq}/{hkv} ctx={ctx}", file=sys.stderr, flush=True)
        fns, err, sb = bd.sdpa_case(B, hq, hkv, ctx, bd.rotations(B * hkv * ctx * 2 * 2 * D, l2))
        assert err < 2e-3, err
        sdpa_us, _ = bd.time_torch(fns, args.reps)
        del fns
        torch.cuda.empty_cache()
        case = bd.pool_case(False, B, hq, hkv, ctx, l2)
        err = case.check(8, True)
        assert err < 1e-4, err
        plans = case.plans(8, True)
        dec_us, _ = bd.time_cupy([p.launch for p in plans], args.reps)
        kname, ns = plans[0].kernel_name, plans[0].ns
        case = plans = None
        cp.get_default_memory_pool().free_all_blocks()
        f16 = bd.pool_case(True, B, hq, hkv, ctx, l2)
        err = f16.check(None, False)
        assert err < 1e-4, err
        f16_plans = f16.plans()
        f16_us, _ = bd.time_cupy([p.launch for p in f16_plans], args.reps)
        f16 = f16_plans = None
        cp.get_default_memory_pool().free_all_blocks()
        ladder, nbytes = floor_rows(B, hq, hkv, ctx, args.reps, sms, args.graph, l2)
        base = dict(batch=B, hq=hq, hkv=hkv, context=ctx)
        rows.append(dict(base, level="torch_sdpa_fp16", us=sdpa_us, gbps=sb / sdpa_us / 1e3, ratio_sdpa=1.0))
        for r in ladder:
            rows.append(dict(base, **r, ratio_sdpa=r["us"] / sdpa_us))
        rows.append(dict(base, level="witcert_int8_cert", kernel=kname, num_splits=ns, us=dec_us,
                         gbps=nbytes / dec_us / 1e3, ratio_sdpa=dec_us / sdpa_us))
        rows.append(dict(base, level="witcert_fp16_store", us=f16_us, gbps=sb / f16_us / 1e3,
                         ratio_sdpa=f16_us / sdpa_us))
        for r in rows[-len(ladder) - 3:]:
            print(f"  {r['level']:<20}{r['us']:>10.1f} us {r['gbps']:>7.0f} GB/s {r['ratio_sdpa']:>6.2f}x SDPA",
                  flush=True)
    date = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": date, "gpu": dev["name"].decode(), "sms": sms, "l2_bytes": l2, "cupy": cp.__version__,
            "torch": torch.__version__, "command": " ".join(["python3"] + sys.argv), "reps": args.reps,
            "wall_s": time.time() - t0}
    stem = f"decode-floor{'-graph' if args.graph else ''}"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
