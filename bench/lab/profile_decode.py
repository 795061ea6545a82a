"""One launch each of the decode stage-1 kernels at B=8, Hq/Hkv=32/8, context 32768 (the library's
choice: decode_stage1_v2 for INT8 and fp16 stores at d = 128), for Nsight Compute:

    ncu --clock-control none --set full --import-source yes -k regex:decode_stage1 \
        -o decode-v2 python3 bench/lab/profile_decode.py
    ncu --import decode-v2.ncu-rep --print-details all          # the sections
    ncu --import decode-v2.ncu-rep --page source --csv --print-source sass   # stalls per instruction

Pass ``--v1`` to profile the general kernel (decode_stage1) on the same shapes instead, ``--fp16``
for the fp16-store launch alone, ``--shape HQ/HKV`` for other head counts (e.g. ``28/4``),
``--batch B`` and ``--ctx N`` for another batch and context (``-k regex:decode_merge`` profiles the
merge of the same steps).  ``--config NAME`` launches one certified step of a configuration of
``bench/decode.py``'s ``CONFIGS`` instead (e.g. ``gate_step`` or ``exact_tier_1pct``: the exact
tier's cost at ``--batch 1 --ctx 4096``), ``tier_b_8`` beside it for the diff; ``--stage1 KERNEL``
(``v1``, ``v2`` or ``i8``) forces the kernel of every launch (e.g. ``i8`` for form (I)'s Tier B at
B = 1, where the library picks the staged tile).
"""

import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import decode as bd  # noqa: E402
from decode import Fp16Case, Int8Case  # noqa: E402

stage1 = "v1" if "--v1" in sys.argv else "auto"
if "--stage1" in sys.argv:
    stage1 = sys.argv[sys.argv.index("--stage1") + 1]
    if stage1 not in ("auto", "v1", "v2", "i8"):
        sys.exit(f"--stage1: {stage1!r} is not one of auto, v1, v2, i8")
hq, hkv = (int(x) for x in sys.argv[sys.argv.index("--shape") + 1].split("/")) if "--shape" in sys.argv else (32, 8)
B = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 8
ctx = int(sys.argv[sys.argv.index("--ctx") + 1]) if "--ctx" in sys.argv else 32768
if "--config" in sys.argv:
    l2 = bd.l2_bytes()
    for name in ("tier_b_8", sys.argv[sys.argv.index("--config") + 1]):
        _, tier, contrib, _ = bd.CONFIGS[name]
        case = bd.config_case(name, B, hq, hkv, ctx, l2)
        p = case.plans(case.cfg.dither_bits, True, stage1=stage1, tier=tier or "B",
                       max_pages=ctx // bd.PAGE if contrib else 0)[0]
        p.launch()
        cp.cuda.Device().synchronize()
        print(f"{name} {p.kernel_name}", flush=True)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
    sys.exit(0)
if "--fp16" not in sys.argv:
    int8 = Int8Case(B, hq, hkv, ctx, 16, 1)
    for cert in (True, False):
        p = int8.plans(8, cert, stage1=stage1)[0]
        p.launch()
        cp.cuda.Device().synchronize()
        print(f"int8 {p.kernel_name} cert={cert}", flush=True)
    int8 = None
f16 = Fp16Case(B, hq, hkv, ctx, 16, 1)
p = f16.plans(stage1=stage1)[0]
p.launch()
cp.cuda.Device().synchronize()
print(f"fp16 {p.kernel_name}", flush=True)
