"""Write-path throughput (quantize + dither + scales + witness into the paged pool) against the
device-to-device copy bandwidth measured in the same run: the copy engine (cudaMemcpyAsync) and a
16-byte-per-thread copy kernel; the goal (>= 0.6 in every configuration) is judged against the
faster of the two.  Configurations: 8/16/24-bit dither, each with and without 16 witness bands, and
8-bit dither with 2 outlier pairs per kv head.

    PYTHONPATH=. python3 bench/write.py [--out bench/results]

Bytes counted for the write path: fp16 K and V read, codes + scales (+ witness) written.  All are
timed as CUDA-graph replays with events, median of many.  Before timing, the first 2048 tokens of
every configuration are checked bit for bit against the CPU twin (wc.quantize on NumPy arrays).
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
    copy_t = time_cupy([lambda: cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, 3,
                                                            cp.cuda.get_current_stream().ptr)], args.reps)
    copy_us = copy_t[0]
    copy_gbps = 2 * nbytes / copy_us / 1e3
    copy16 = cp.RawKernel(r"""
    extern "C" __global__ void copy16(const uint4* __restrict__ a, uint4* __restrict__ b, long long n) {
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
            b[i] = a[i];
    }""", "copy16")
    n16 = nbytes // 16
    kcopy_t = time_cupy([lambda: copy16((132 * 16,), (512,), (a, b, np.int64(n16)))], args.reps)
    kcopy_us = kcopy_t[0]
    assert bool((b == a).all())
    kcopy_gbps = 2 * nbytes / kcopy_us / 1e3
    best_copy = max(copy_gbps, kcopy_gbps)
    print(f"copy: cudaMemcpyAsync {copy_gbps:.0f} GB/s, copy kernel {kcopy_gbps:.0f} GB/s (bytes read + written)",
          flush=True)
    a = b = None  # free before the pools are built
    rows = []
    H, d = 8, 128
    n = args.tokens
    configs = [(0, 8, 0), (16, 8, 0), (0, 16, 0), (16, 16, 0), (0, 24, 0), (16, 24, 0), (0, 8, 2)]
    for bands, bits, pairs in configs:
        op = (np.arange(pairs, dtype=np.int32).reshape(1, 1, pairs) * 9 + np.zeros((1, H, 1), np.int32)
              if pairs else None)  # RoPE pairs 0, 9, ... of every kv head
        cfg = wc.QuantConfig(d, dither_bits=bits, witness_bands=bands, outlier_pairs=op)
        pool = wc.KVPool(1, H, d, n // 16, 16, cfg, backend="cuda")
        rng = np.random.default_rng(0)
        k = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
        v = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float16))
        slots = cp.arange(n, dtype=cp.int64)
        pool.write(0, slots, k, v)  # verify before timing: the first tokens against the CPU twin
        m = 2048
        for side, x in ((0, k), (1, v)):
            ref = wc.quantize(x[:m].get(), np.arange(m), layer=0, side="kv"[side], config=cfg)
            got_codes = pool.codes[0, side, :, :m].get().transpose(1, 0, 2)
            got_scales = pool.scales[0, side, :, :m].get().transpose(1, 0, 2)
            assert np.array_equal(got_codes, ref.codes), "codes differ from the CPU twin"
            assert np.array_equal(got_scales.view(np.uint16), ref.scales.view(np.uint16)), "scales differ"
            if pairs:
                got_o = pool.outliers[0, side, :, :m].get().transpose(1, 0, 2)
                assert np.array_equal(got_o.view(np.uint16), ref.outliers.view(np.uint16)), "outliers differ"
            if bands:
                got_w = pool.witness[0, side, :, :m].get().transpose(1, 0, 2)
                assert np.array_equal(got_w.view(np.uint16), ref.witness.view(np.uint16)), "witness differs"
        t = time_cupy([lambda: pool.write(0, slots, k, v)], args.reps)
        us = t[0]
        moved = n * H * (2 * 2 * d + 2 * cfg.bytes_per_token_side())
        rows.append(dict(method="witcert_write", tokens=n, kv_heads=H, head_dim=d, dither_bits=bits,
                         witness_bands=bands, outlier_pairs=pairs, us=us, gbps=moved / us / 1e3, copy_gbps=copy_gbps,
                         kernel_copy_gbps=kcopy_gbps, ratio_copy=moved / us / 1e3 / best_copy,
                         ratio_memcpy=moved / us / 1e3 / copy_gbps,
                         clocks=t.clocks))  # the SM clock sets an issue-bound kernel's time (gpu_clocks.py)
        sm = f", SM {t.clocks['sm_mhz_median']:.0f} MHz" if t.clocks else ""
        print(f"write bits={bits} bands={bands} pairs={pairs}: {us:.1f} us, {moved / us / 1e3:.0f} GB/s = "
              f"{rows[-1]['ratio_copy']:.2f} of the best copy ({best_copy:.0f} GB/s), verified{sm}", flush=True)
        pool = k = v = None
        cp.get_default_memory_pool().free_all_blocks()
    date = datetime.date.today().isoformat()
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    meta = {"date": date, "gpu": dev["name"].decode(), "copy_gbps": copy_gbps, "kernel_copy_gbps": kcopy_gbps,
            "copy_bytes": 2 * nbytes, "ratio_copy_is_against": "max(copy_gbps, kernel_copy_gbps)",
            "command": " ".join(["python3"] + sys.argv), "cupy": cp.__version__,
            "copy_clocks": copy_t.clocks, "kernel_copy_clocks": kcopy_t.clocks}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "write.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
