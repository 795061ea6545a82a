"""One certified launch of the same configuration from a baseline tree of the library and from this
tree (bench/cert_cost.py's two packages in one process), for Nsight Compute: what a change between
two trees does to a kernel's instructions, occupancy and stalls, beside cert_cost's times.

    python3 bench/cert_cost.py --make-baseline REV DIR        # here: extract the baseline
    ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \\
        --section InstructionStats -k regex:decode_stage1 -c 2 \\
        python3 bench/lab/profile_cert_pair.py --baseline DIR [--config fp16_store_tier_a] [--shape 8/32/8/32768]

The launches run in the order base, this; ``--config`` is one of cert_cost's CONFIGS labels.
"""

import argparse
import sys
from pathlib import Path

import cupy as cp

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent)]
import cert_cost  # noqa: E402
import witcert_cupy as this  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--baseline", required=True, help="a tree written by cert_cost.py --make-baseline")
ap.add_argument("--config", default="fp16_store_tier_a", choices=[c[0] for c in cert_cost.CONFIGS])
ap.add_argument("--shape", default="8/32/8/32768", help="B/Hq/Hkv/context")
args = ap.parse_args()
shape = tuple(int(x) for x in args.shape.split("/"))
_, store, bits, tier = next(c for c in cert_cost.CONFIGS if c[0] == args.config)
base = cert_cost.import_baseline(Path(args.baseline))
for name, wc in (("base", base), ("this", this)):
    plan = cert_cost.Case(wc, store, bits, shape, 1).plans(tier)[0]
    plan.launch()
    cp.cuda.Device().synchronize()
    print(f"{name}: {plan.kernel_name} {getattr(plan, 'stage1_template', '')}", flush=True)
