"""The certified fp16-store step's wave: when each CTA of decode_stage1_f16 starts and each of its
warps ends, on which SM, in a baseline tree and in this one, and the step's time over split counts.

    python3 bench/cert_cost.py --make-baseline 5b7ee4f DIR        # here: extract the baseline
    PYTHONPATH=. python3 bench/lab/f16_tail.py --baseline DIR [--shapes 8/32/8/32768,8/28/4/32768]
        [--splits 16,20,24,28,32,40,48] [--json out.json]

Timeline: a copy of each tree whose decode_f16.cu records, per CTA, %globaltimer and %smid at entry
(thread 0) and per warp its split's tokens and %globaltimer when its tile loop has drained (lane 0);
the last of three launches is kept.  Reported per tree: CTAs per SM, the spread of the CTAs' starts
(a late start is a second wave), the end of the step, and per class of SM (by CTAs resident) the
median warp time per 32-token tile and the latest end.  The probes' stores cost a few dozen cycles
per warp; the instrumented copies live in a temporary directory.

Sweep: the uninstrumented trees, the same pool layout (bench/cert_cost.py's Case), each split count
timed in CUDA graphs over rotated buffers, both trees alternately, ``--rounds`` times, medians.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SLOTS = 32  # records per CTA: 0 entry time, 1 SM, 2+w warp w's drain time, 10+w its tokens

_HELPERS = r'''
__device__ unsigned long long wc_tl[1 << 18];
__device__ __forceinline__ unsigned long long wc_gt() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ unsigned wc_sm() { unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); return s; }
#define WC_CTA (((unsigned long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x)
'''
# (anchor, probe after it)
PROBES = [
    ('#include "griddep.cuh"', _HELPERS),
    ("    const bool live = s < num_splits;  // (the last CTA's spare pipelines only help load the query)",
     "    if (threadIdx.x == 0) { wc_tl[WC_CTA * 32] = wc_gt(); wc_tl[WC_CTA * 32 + 1] = wc_sm(); }"),
    ("    const i64 ta = st_.ta, tb = live ? st_.tb : st_.ta;  // a spare pipeline: an empty range",
     "    if ((threadIdx.x & 31) == 0) wc_tl[WC_CTA * 32 + 10 + (threadIdx.x >> 5)] = (unsigned long long)(tb - ta);"),
    ("        cp_async_wait_all();  // nothing in flight at exit (the trailing groups are empty)",
     "        if ((threadIdx.x & 31) == 0) wc_tl[WC_CTA * 32 + 2 + (threadIdx.x >> 5)] = wc_gt();"),
]


def instrument(src: str) -> str:
    for anchor, probe in PROBES:
        n = src.count(anchor)
        if n != 1:
            raise ValueError(f"decode_f16.cu: anchor {anchor.strip()[:60]!r} occurs {n} times, not once")
        j = src.index(anchor) + len(anchor)
        src = src[:j] + "\n" + probe + src[j:]
    return src


def instrument_dir(cuda_dir: Path) -> None:
    f = cuda_dir / "decode_f16.cu"
    f.write_text(instrument(f.read_text()))


def summarize(a, warps):
    """The wave of one launch from the CTAs' records ``a`` [n, SLOTS] (uint64)."""
    start = a[:, 0].astype(np.int64)
    t0 = start.min()
    sm = a[:, 1].astype(np.int64)
    end = a[:, 2:2 + warps].astype(np.int64)
    tok = a[:, 10:10 + warps].astype(np.int64)
    live = tok > 0
    end_rel = np.where(live, end - t0, 0)
    cta_end = end_rel.max(axis=1)
    per_sm = np.bincount(sm, minlength=int(sm.max()) + 1)
    ctas_of = per_sm[sm]
    dur = np.where(live, end - start[:, None], 0)
    ns_per_tile = dur[live] / np.maximum(tok[live] / 32.0, 1.0)
    out = {"ctas": int(a.shape[0]), "sms_used": int((per_sm > 0).sum()),
           "ctas_per_sm": {int(k): int((per_sm == k).sum()) for k in np.unique(per_sm) if k},
           "start_spread_us": round(float(start.max() - t0) / 1e3, 2),
           "late_starts": int((start - t0 > 5000).sum()),
           "end_us": round(float(cta_end.max()) / 1e3, 2),
           "cta_end_us_p50_p90": [round(float(np.percentile(cta_end, p)) / 1e3, 2) for p in (50, 90)],
           "tiles_per_warp_min_max": [int(tok[live].min()) // 32, -(-int(tok[live].max()) // 32)],
           "ns_per_tile_p50": round(float(np.median(ns_per_tile)), 1)}
    by = {}
    for k in sorted(set(ctas_of.tolist())):
        sel = ctas_of == k
        lv = live[sel]
        by[int(k)] = {"ctas": int(sel.sum()), "end_us_max": round(float(cta_end[sel].max()) / 1e3, 2),
                      "end_us_p50": round(float(np.median(cta_end[sel])) / 1e3, 2),
                      "ns_per_tile_p50": round(float(np.median(dur[sel][lv] / np.maximum(tok[sel][lv] / 32.0, 1))), 1)}
    out["by_ctas_on_sm"] = by
    order = np.argsort(-cta_end)[:5]
    out["last_ctas"] = [{"sm": int(sm[i]), "ctas_on_sm": int(ctas_of[i]), "start_us": round(float(start[i] - t0) / 1e3, 2),
                         "end_us": round(float(cta_end[i]) / 1e3, 2), "tiles": [int(x) // 32 for x in tok[i]]} for i in order]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="a tree written by bench/cert_cost.py --make-baseline")
    ap.add_argument("--shapes", default="8/32/8/32768,8/28/4/32768")
    ap.add_argument("--splits", default="16,20,24,28,32,40,48", help="split counts of the sweep ('' for none)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(HERE.parent), str(ROOT)]
    import cupy as cp

    import cert_cost
    from decode import l2_bytes, rotations, time_cupy

    shapes = [tuple(int(x) for x in s.split("/")) for s in args.shapes.split(",")]
    splits = [int(x) for x in args.splits.split(",") if x]
    trees = {"base": Path(args.baseline), "this": ROOT}
    l2 = l2_bytes()
    report = {"baseline_rev": cert_cost.baseline_rev(trees["base"]),
              "timeline": [], "sweep": []}
    tl = {k: cert_cost.import_baseline(t, f"wc_tl_{k}", instrument_dir) for k, t in trees.items()}
    plain = {k: cert_cost.import_baseline(t, f"wc_sw_{k}") for k, t in trees.items()}
    for shape in shapes:
        B, hq, hkv, ctx = shape
        for k, pkg in tl.items():  # the timeline: one launch at the default split count
            case = cert_cost.Case(pkg, "fp16", None, shape, 1)
            plan = case.plans("A")[0]
            if hasattr(pkg._cuda, "build"):  # (the key of the loader's cache: kernel()'s arguments)
                mod = pkg._cuda.build._module("decode_f16.cu", (plan.stage1_template,), (), None)
            else:  # the baseline's loader
                mod = pkg._cuda._module("decode_f16.cu", (plan.stage1_template,), ())
            buf = cp.ndarray((1 << 18,), cp.uint64, mod.get_global("wc_tl"))
            n = int(np.prod(plan.grid1))
            for _ in range(3):
                buf[...] = 0
                plan.launch()
                cp.cuda.Device().synchronize()
            row = {"tree": k, "shape": "/".join(map(str, shape)), "kernel": plan.stage1_template, "splits": plan.ns,
                   "grid": list(plan.grid1), **summarize(buf[: n * SLOTS].get().reshape(n, SLOTS), plan.block1 // 32)}
            print(json.dumps(row), flush=True)
            report["timeline"].append(row)
            del case, plan
            cp.get_default_memory_pool().free_all_blocks()
        if not splits:
            continue
        rot = rotations(B * hkv * ctx * (2 * (2 * 128 + 16) + 4), l2)
        cases = {k: cert_cost.Case(pkg, "fp16", None, shape, rot) for k, pkg in plain.items()}
        cert = {k: pkg.CertConfig(tier="A", num_layers=32, steps=1024) for k, pkg in plain.items()}
        default_ns = {k: c.plans("A")[0].ns for k, c in cases.items()}
        for ns in [None] + splits:
            plans = {k: [c.pool._dev.plan(c.q[r], 0, *c.tables[r], 1 / 128 ** 0.5, cert[k], ns) for r in range(rot)]
                     for k, c in cases.items()}
            med, _ = cert_cost.alternate({k: [p.launch for p in ps] for k, ps in plans.items()}, args.reps,
                                         args.rounds, time_cupy)
            row = {"shape": "/".join(map(str, shape)), "splits": ns if ns else f"default {default_ns}",
                   "base_us": round(med["base"], 2), "this_us": round(med["this"], 2)}
            print(json.dumps(row), flush=True)
            report["sweep"].append(row)
            del plans
        del cases
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
