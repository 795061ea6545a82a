"""Where one small-batch INT8 decode step's time goes, phase by phase, from timestamps the kernels
store themselves: the shipped sources with ``bench/variants/trace-step.patch`` applied (a copy in a
temporary directory; main's kernels are not touched), which has lane 0 of the K and V warps of each
stage-1 CTA, and thread 0 and the certifying thread of each merge CTA, store ``%globaltimer`` (ns,
one clock for all SMs) and ``clock64`` (cycles of its SM) at numbered points.

The step runs as bench/decode.py times it: a CUDA graph of the rotated plans' steps, replayed; the
trace holds the graph's last step, which followed another step's merge.  Reported per shape, as
medians over ``--reps`` replays: each point's time from the first stage-1 CTA's entry (over CTAs:
the first, median and last), and each CTA's phases in cycles (median over CTAs).

    PYTHONPATH=. python3 bench/trace_step.py [--shapes 1/28/4/4096,...] [--splits 0,128] [--defines GD_STAGE1_EARLY=2]
        [--repeat stage1|merge]

``--repeat`` traces the last step's stage 1 (or merge) launched a second time right after the first:
against the plain trace, what the kernel's phases cost when its code (and, for stage 1, its rows)
is already on the chip.

Writes ``trace-step-<date>.json`` (rows: shape, num_splits, kernel, who, point, ns_first, ns_median,
ns_last, cycles_median, repeat). The patch's hunks carry the kernels' own lines as context: after a
change to cuda/decode.cu or cuda/decode_v2.cu, make it again against the new sources (the stamps are
the ``TR(k)`` lines and cuda/trace.cuh); tests/test_cuda_compile.py checks that it applies and
compiles.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

import cupy as cp
import numpy as np

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("bench_decode_variants", HERE / "decode_variants.py")
dv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dv)
bd, _cuda = dv.bd, dv._cuda  # bench/decode.py, witcert_cupy._cuda
# the sides' layout at every batch below V2_SPLIT_MIN_PAIRS (the structure the patch's rungs and
# points describe; the library's default since session 23 takes the split at G >= 5 with one tile
# per split)
dv._SWITCHES["V2_SPLIT_MIN_G"] = 99

PATCH = HERE / "variants" / "trace-step.patch"
# the patch's points (cuda/trace.cuh: WC_TR_CTAS CTAs, 2 threads, WC_TR_PTS points)
NCTA, NPTS = 2048, 20
S1_POINTS = {0: "entry", 1: "griddep wait done", 2: "first rows requested", 3: "query in shared memory",
             4: "outlier map done", 5: "prologue done", 6: "tile 0 phase A done", 7: "tile 0 barrier 1",
             8: "tile 0 done", 9: "tile 1 phase A done", 10: "tile 1 barrier 1", 11: "tile 1 done",
             12: "tile loop done", 13: "statistics reduced", 14: "poison barrier", 15: "o partials stored",
             16: "end"}
MG_POINTS = {0: "entry", 1: "griddep wait done", 2: "statistics loaded", 3: "maxima shared",
             4: "exponentials formed", 5: "sums and weights done", 6: "rows in shared memory",
             7: "o loop done", 8: "end (certifier: certified)"}
S1_WHO, MG_WHO = ("K warp", "V warp"), ("thread 0", "certifier")


def trace_arrays(mod):
    """The module's trace buffers as CuPy arrays (globaltimer, clock64, smid)."""
    gt = cp.ndarray((NCTA, 2, NPTS), cp.uint64, memptr=mod.get_global("wc_tr_gt"))
    ck = cp.ndarray((NCTA, 2, NPTS), cp.int64, memptr=mod.get_global("wc_tr_ck"))
    sm = cp.ndarray((NCTA,), cp.uint32, memptr=mod.get_global("wc_tr_sm"))
    return gt, ck, sm


def one_shape(case, ns, reps, repeat="none"):
    plans = case.plans(8, True, stage1="v2", num_splits=ns or None)
    p = plans[-1]
    n1 = int(np.prod(p.grid1))
    n2 = p.shape[0] * p.shape[1]
    assert n1 <= NCTA and n2 <= NCTA, (n1, n2)
    s1_mod = _cuda._module("decode_v2.cu", (p.stage1_template,), ())
    mg_mod = _cuda._module("decode.cu", (), ())
    s1, mg = trace_arrays(s1_mod), trace_arrays(mg_mod)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for q in plans:
            q.launch()
        s.begin_capture()
        for q in plans[:-1]:
            q.launch()
        # --repeat: the last step's stage 1 (or merge) twice in a row, so that the traced one runs
        # right after itself (its code and data warm) instead of after the other kernel
        if repeat == "stage1":
            p._stage1()
        p.launch()
        if repeat == "merge":
            p.merge()
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        samples = []
        for _ in range(reps):
            for a in (*s1, *mg):
                a.fill(0)
            g.launch(s)
            s.synchronize()
            samples.append(tuple(a.get() for a in (*s1, *mg)))
    rows = []
    per_rep = []
    for (gt1, ck1, _, gt2, ck2, _) in samples:
        gt1, ck1, gt2, ck2 = gt1[:n1], ck1[:n1], gt2[:n2], ck2[:n2]
        t0 = int(gt1[:, 0, 0].min())
        rec = {}
        for kname, gt, ck, points, whos in (("stage1", gt1, ck1, S1_POINTS, S1_WHO),
                                            ("merge", gt2, ck2, MG_POINTS, MG_WHO)):
            for w in range(2):
                for k in points:
                    col = gt[:, w, k]
                    ok = col > 0
                    if not ok.any():
                        continue
                    rel = col[ok].astype(np.int64) - t0
                    cyc = (ck[ok, w, k] - ck[ok, w, 0]).astype(np.float64)
                    rec[(kname, w, k)] = (int(rel.min()), float(np.median(rel)), int(rel.max()), float(np.median(cyc)))
        per_rep.append(rec)
    ctas_per_sm = np.bincount(samples[-1][2][:n1], minlength=p.dev.num_sms)
    keys = sorted(set().union(*per_rep), key=lambda k: (k[0] != "stage1", k[1], k[2]))
    print(f"B={case.B} {case.hq}/{case.hkv} ctx={case.ctx}: {p.ns} splits, stage 1 grid {p.grid1} "
          f"(CTAs per SM in the last replay: {np.bincount(ctas_per_sm).tolist()} SMs with 0, 1, 2, ...), "
          f"merge grid {n2}", flush=True)
    print(f"  {'kernel':<7} {'who':<10} {'point':<28} {'first ns':>9} {'median ns':>10} {'last ns':>9} "
          f"{'cycles from entry':>17}")
    for key in keys:
        vals = [r[key] for r in per_rep if key in r]
        first, med, last, cyc = (statistics.median(v[i] for v in vals) for i in range(4))
        kname, w, k = key
        points, whos = (S1_POINTS, S1_WHO) if kname == "stage1" else (MG_POINTS, MG_WHO)
        print(f"  {kname:<7} {whos[w]:<10} {points[k]:<28} {first:9.0f} {med:10.0f} {last:9.0f} {cyc:17.0f}")
        rows.append(dict(batch=case.B, hq=case.hq, hkv=case.hkv, context=case.ctx, num_splits=p.ns,
                         kernel=kname, who=whos[w], point=points[k], ns_first=first, ns_median=med,
                         ns_last=last, cycles_median=cyc))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1/28/4/4096,1/32/8/4096")
    ap.add_argument("--splits", default="0", help="split counts, comma-separated (0 = the default)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--defines", default="", help="NAME=VALUE,... added to the build (bench/decode_variants.py)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--repeat", default="none", choices=("none", "stage1", "merge"),
                    help="trace the last step's stage 1 (or merge) run a second time right after the first")
    args = ap.parse_args()
    dv.use_variant([f"dir={dv.patched_kernels(PATCH)}", *(d for d in args.defines.split(",") if d)])
    l2 = bd.l2_bytes()
    rows = []
    for B, hq, hkv, ctx in bd.parse_shapes(args.shapes):
        case = bd.pool_case(False, B, hq, hkv, ctx, l2)
        err = case.check(8, True, "v2")
        assert err < 1e-4, err
        for ns in (int(x) for x in args.splits.split(",")):
            rows += [dict(r, repeat=args.repeat) for r in one_shape(case, ns, args.reps, args.repeat)]
        case = None
        cp.get_default_memory_pool().free_all_blocks()
    bd.write_rows_json(args.out, "trace-step", rows)


if __name__ == "__main__":
    main()
