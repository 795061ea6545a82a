"""One launch of the tensor-core extend kernel (certificate on) for Nsight Compute, on a shape
small enough to profile quickly (512 new tokens over an 8k prefix, 32/8 heads; ``--shape 2048/30720``
for bench/extend.py's):

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section InstructionStats --section SchedulerStats \
        -k regex:extend_tc_stage1 python3 bench/lab/profile_extend.py
"""

import sys
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from extend import build  # noqa: E402

import witcert_cupy as wc  # noqa: E402


class Args:
    new, prefix, hq, hkv = 512, 8192, 32, 8


if "--shape" in sys.argv:  # NEW/PREFIX, e.g. 2048/30720 (bench/extend.py's shape)
    Args.new, Args.prefix = (int(x) for x in sys.argv[sys.argv.index("--shape") + 1].split("/"))


pool, k16, v16, pages, slots, q, qo, ip, last = build(Args, cp)
res = wc.extend_attention(q, pool, layer=0, qo_indptr=cp.asarray(qo), kv_indptr=cp.asarray(ip), kv_indices=pages,
                          kv_last_page_len=cp.asarray(last), cert=wc.CertConfig(steps=Args.new))
cp.cuda.Device().synchronize()
print("extend", res.kernel, flush=True)
