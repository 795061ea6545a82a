"""Compile-time variants of the decode side by side in one process: each variant is the shipped
source built with extra ``-D`` options (e.g. ``V2_KUNROLL=2``), checked against float64 attention,
then timed on the same pools with SDPA fp16 beside it.  By default the certified INT8 step through
the staged-tile kernel (cuda/decode_v2.cu, and the merge); with ``--fp16`` the fp16-store step
through decode_stage1_f16 (cuda/decode_f16.cu).

    PYTHONPATH=. python3 bench/decode_variants.py "V2_KUNROLL=1" "V2_KUNROLL=2,V2_VUNROLL=4" ...
    PYTHONPATH=. python3 bench/decode_variants.py --fp16 "" "F16_WARPS=2" ...
    git archive HEAD~1 cuda | tar -x -C /tmp/prev && PYTHONPATH=. python3 bench/decode_variants.py "" dir=/tmp/prev/cuda
    PYTHONPATH=. python3 bench/decode_variants.py --shapes 1/28/4/32768,1/32/8/32768 "" NS=64 NS=128

A variant ``NS=n`` launches n splits instead of the default count; ``--shapes`` replaces the default
B/Hq/Hkv/context list. Every variant is built and checked first, then all are timed in turn for
``--rounds`` rounds (SDPA first in each); ``--bits`` sets the INT8 step's dither resolution (8 by default), each timing with the SM clock sampled beside it
(bench/gpu_clocks.py). Writes ``decode-variants-<date>.json`` (rows: variant, num_splits, batch, hq,
hkv, context, us and ratio_sdpa, the medians over rounds, and each round's µs and clocks).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import cupy as cp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from witcert_cupy import _cuda  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_decode", Path(__file__).resolve().parent / "decode.py")
bd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bd)

_BASE_OPTIONS = _cuda.options()


# the launch layer's switches a variant may set (witcert_cupy/_cuda.py), with their shipped values
_SWITCHES = {name: getattr(_cuda, name)
             for name in ("F16_WARPS", "F16_PIPES", "MERGE_CERT_WARP", "MERGE_PREFETCH_BYTES", "PDL",
                          "V2_THREADS", "V2_SPLIT_MIN_PAIRS", "V2_SPLIT_MIN_G")}
_KERNEL_DIR = _cuda.kernel_dir


def patched_kernels(patch):
    """A temporary copy of the shipped cuda/ with ``patch`` (a file of bench/variants/) applied; the
    copy's cuda/ directory, for ``dir=`` (the caller removes its parent when done)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"witcert-{Path(patch).stem}-"))
    shutil.copytree(_KERNEL_DIR(), tmp / "cuda")
    subprocess.run(["git", "apply", str(Path(patch).resolve())], cwd=tmp, check=True)
    return tmp / "cuda"


def use_variant(defines):
    """Rebuild the kernels with ``defines`` (a list of ``NAME=VALUE``) added to the options;
    ``F16_WARPS=n`` sets the launch layer's warps per split of decode_stage1_f16 instead,
    ``F16_PIPES=n`` its splits per CTA in both the kernel and the launch layer,
    ``MERGE_CERT_WARP=0`` certifies on the merge's thread 0, ``MERGE_PREFETCH_BYTES=n`` sets the
    merge's budget for prefetching a cell's rows, ``V2_THREADS=n`` the block of decode_stage1_v2
    (for a ``dir=`` source built with another), ``V2_SPLIT_MIN_PAIRS=n`` and ``V2_SPLIT_MIN_G=n`` the
    PLAIN kernel's rule for the channel split, ``PDL=0`` launches without
    programmatic dependent launch (witcert_cupy/_cuda.py), ``NS=n`` launches n splits instead of
    the default count (returned), and ``dir=PATH`` builds from another directory of kernel sources
    (e.g. an earlier commit's ``cuda/``, from ``git archive``) with the same launch layer."""
    for name, value in _SWITCHES.items():
        setattr(_cuda, name, value)
    _cuda.kernel_dir = _KERNEL_DIR
    extra, ns = [], None
    for d in defines:
        name, _, value = d.partition("=")
        if name == "NS":
            ns = int(value)
        elif name == "dir":
            other = Path(value).resolve()
            _cuda.kernel_dir = lambda: other
        elif name in _SWITCHES:
            setattr(_cuda, name, type(_SWITCHES[name])(int(value)))
            if name == "F16_PIPES":  # the kernel's constant too
                extra.append(f"-D{d}")
        else:
            extra.append(f"-D{d}")
    _cuda.options = lambda: _BASE_OPTIONS + tuple(extra)
    _cuda._module.cache_clear()
    return ns


def _result_bits(plan):
    """A plan's outputs as raw bits (o, lse and, when certified, log_a and tv_bound): NaNs compare
    equal by their bits."""
    plan.launch()
    r = plan.result()
    arrs = [a for a in (r.o, r.lse, r.log_a, r.tv_bound) if a is not None]
    return [cp.ascontiguousarray(a).view(cp.uint32 if a.dtype == cp.float32 else cp.uint64) for a in arrs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+", help="comma-separated NAME=VALUE defines per variant ('' = shipped)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--fp16", action="store_true", help="the fp16-store decode (decode_stage1_f16)")
    ap.add_argument("--uncertified-too", action="store_true",
                    help="INT8: time each variant without the certificate as well (the certificate's cost)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="times each variant (and SDPA) this many times in turn; rows report the median")
    ap.add_argument("--same-bits", action="store_true",
                    help="fail unless every variant's o, lse and certificate equal the first variant's bit for bit")
    ap.add_argument("--bits", type=int, default=8, choices=(8, 16, 24), help="INT8: the dither resolution")
    ap.add_argument("--shapes", default=None,
                    help="B/Hq/Hkv/context,... instead of the default shapes (e.g. 1/28/4/32768,8/28/4/32768)")
    args = ap.parse_args()
    l2 = bd.l2_bytes()
    rows = []
    if args.shapes:
        shapes = bd.parse_shapes(args.shapes)
    elif args.fp16:
        shapes = ((8, 32, 8, 32768), (8, 28, 4, 32768), (32, 28, 4, 32768), (1, 32, 8, 4096))
    else:
        shapes = ((8, 32, 8, 32768), (8, 28, 4, 32768), (1, 32, 8, 32768), (1, 32, 8, 4096))
    for B, hq, hkv, ctx in shapes:
        case = bd.pool_case(args.fp16, B, hq, hkv, ctx, l2)
        bits, stage1 = (None, "f16") if args.fp16 else (args.bits, "v2")
        certs = bd.cert_modes(args.fp16, args.uncertified_too)
        # every variant built, checked and its bits compared first; then timed in turn, round after
        # round, SDPA first in each round: a drift of the clock over the run falls on all of them
        first, built = {}, []
        for v in args.variants:
            ns = use_variant([d for d in v.split(",") if d])
            for cert in certs:
                err = case.check(bits, cert, stage1, num_splits=ns)
                assert err < 1e-4, (v, err)
                plans = case.plans(bits, cert, stage1=stage1, num_splits=ns)
                bits_now = _result_bits(plans[0])
                first.setdefault(cert, bits_now)
                same = all(cp.array_equal(a, b) for a, b in zip(bits_now, first[cert]))
                assert same or not args.same_bits, \
                    f"variant [{v}] differs from [{args.variants[0]}] at B={B} {hq}/{hkv} cert={cert}"
                built.append((v, cert, plans, err, same))
        sdpa_fns = bd.sdpa_checked(B, hq, hkv, ctx, l2)  # built and checked once, timed each round
        sdpa_rounds, var_rounds = [], [[] for _ in built]
        for r in range(args.rounds):
            sdpa_rounds.append(bd.time_torch(sdpa_fns, args.reps))
            for i, (v, _, plans, _, _) in enumerate(built):
                var_rounds[i].append(bd.time_cupy([p.launch for p in plans], args.reps))
        sdpa_us = statistics.median(t[0] for t in sdpa_rounds)
        print(f"SDPA B={B} {hq}/{hkv} ctx={ctx}: {sdpa_us:8.1f} us, rounds "
              + " ".join(f"{t[0]:.1f}{bd.clock_note(t)}" for t in sdpa_rounds), flush=True)
        for (v, cert, plans, err, same), ts in zip(built, var_rounds):
            us = statistics.median(t[0] for t in ts)
            rows.append(dict(variant=v or "shipped", kernel=plans[0].kernel_name, num_splits=plans[0].ns, batch=B,
                             dither_bits=bits,
                             hq=hq, hkv=hkv, context=ctx, cert=cert, us=us, sdpa_us=sdpa_us, ratio_sdpa=us / sdpa_us,
                             us_rounds=[t[0] for t in ts], sdpa_us_rounds=[t[0] for t in sdpa_rounds],
                             clocks_rounds=[t.clocks for t in ts], sdpa_clocks_rounds=[t.clocks for t in sdpa_rounds],
                             rel_err_vs_fp64=err, same_bits_as_first=bool(same)))
            print(f"variant [{v or 'shipped'}]{'' if cert or args.fp16 else ' uncertified'} B={B} {hq}/{hkv} ctx={ctx} "
                  f"ns={plans[0].ns}: {us:8.1f} us ({us / sdpa_us:.2f}x SDPA "
                  f"{sdpa_us:.1f} us){'' if same else ' (bits differ from the first variant)'}; rounds "
                  + " ".join(f"{t[0]:.1f}{bd.clock_note(t)}" for t in ts), flush=True)
        built = case = sdpa_fns = None
        cp.get_default_memory_pool().free_all_blocks()
    use_variant([])
    bd.write_rows_json(args.out, "decode-variants-fp16" if args.fp16 else "decode-variants", rows)


if __name__ == "__main__":
    main()
