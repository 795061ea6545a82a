"""Write-path throughput (quantize + dither + scales + witness into the paged pool) against the
device-to-device copy bandwidth measured in the same run.

    PYTHONPATH=. python3 bench/write.py [--out bench/results]

Bytes counted for the write path: fp16 K and V read, codes + scales (+ witness) written.  Both are
timed as CUDA-graph replays with events, median of many.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import witcert_cupy as wc  # noqa: E402
from decode import time_cupy  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--tokens", type=int, default=262144)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    nbytes = 2 << 30
    a = cp.empty(nbytes, cp.uint8)
    b = cp.empty_like(a)
    a[...] = 1
    # the copy engine path (cudaMemcpyAsync device to device), bytes read + written
    copy_us, _ = time_cupy([lambda: cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, 3,
                                                                cp.cuda.get_current_stream().ptr)], args.reps)
    copy_gbps = 2 * nbytes / copy_us / 1e3
    a = b = None  # free before the pools are built
    rows = []
    H, d = 8, 128
    n = args.tokens
    for bands, bits in ((0, 8), (16, 8), (0, 16), (0, 24)):
        cfg = wc.QuantConfig(d, dither_bits=bits, witness_bands=bands)
        pool = wc.KVPool(1, H, d, n // 16, 16, cfg, backend="cuda")
        rng = np.random.default_rng(0)
        k = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
        v = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
        slots = cp.arange(n, dtype=cp.int64)
        us, _ = time_cupy([lambda: pool.write(0, slots, k, v)], args.reps)
        moved = n * H * (2 * 2 * d + 2 * cfg.bytes_per_token_side())
        rows.append(dict(method="witcert_write", tokens=n, kv_heads=H, head_dim=d, dither_bits=bits,
                         witness_bands=bands, us=us, gbps=moved / us / 1e3, copy_gbps=copy_gbps,
                         ratio_copy=moved / us / 1e3 / copy_gbps))
        print(f"write bits={bits} bands={bands}: {us:.1f} us, {moved / us / 1e3:.0f} GB/s = "
              f"{rows[-1]['ratio_copy']:.2f} of copy ({copy_gbps:.0f} GB/s)", flush=True)
        pool = k = v = None
        cp.get_default_memory_pool().free_all_blocks()
    date = datetime.date.today().isoformat()
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    meta = {"date": date, "gpu": dev["name"].decode(), "copy_gbps": copy_gbps, "copy_bytes": 2 * nbytes,
            "command": " ".join(["python3"] + sys.argv), "cupy": cp.__version__}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"write-{date}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
