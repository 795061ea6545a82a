"""One launch of the write kernel for Nsight Compute, on the shape of bench/write.py (262,144 tokens
× 8 kv heads × K and V, fp16 input); ``--bits`` (8, 16, 24) and ``--bands`` (witness bands, 0 for
none) pick the configuration (8-bit dither, no witness by default):

    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section InstructionStats --section SchedulerStats \
        --section MemoryWorkloadAnalysis -k regex:write_rows -c 1 python3 bench/lab/profile_write.py
"""

import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import witcert_cupy as wc  # noqa: E402

bits = int(sys.argv[sys.argv.index("--bits") + 1]) if "--bits" in sys.argv else 8
bands = int(sys.argv[sys.argv.index("--bands") + 1]) if "--bands" in sys.argv else 0
n, H, d = 262144, 8, 128
pool = wc.KVPool(1, H, d, n // 16, 16, wc.QuantConfig(d, dither_bits=bits, witness_bands=bands), backend="cuda")
rng = np.random.default_rng(0)
k = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
v = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
pool.write(0, cp.arange(n, dtype=cp.int64), k, v)
cp.cuda.Device().synchronize()
print(f"write {n} tokens, {bits}-bit dither, {bands} witness bands", flush=True)
