"""One launch each of the decode kernels at B=8, Hq/Hkv=32/8, context 32768, for Nsight Compute:

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section InstructionStats -k regex:decode_stage1 \
        python3 bench/profile_decode.py
"""

import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from decode import Fp16Case, Int8Case  # noqa: E402

int8 = Int8Case(8, 32, 8, 32768, 16, 1)
for unroll in (1, 4):
    for cert in (False, True):
        p = int8.plans(8, cert, unroll)[0]
        p.launch()
        cp.cuda.Device().synchronize()
        print(f"int8 U={unroll} cert={cert}", flush=True)
int8 = None
f16 = Fp16Case(8, 32, 8, 32768, 16, 1)
f16.plans()[0].launch()
cp.cuda.Device().synchronize()
print("fp16", flush=True)
