"""How fast the H200 reads a KV cache's bytes, by load pattern (issue 5, the fp16-store goal).

    PYTHONPATH=. python3 bench/lab/lab/stream_floor.py [--out bench/results] [--mib 1024] [--reps 15]

torch SDPA reads an fp16 cache at 4.3–4.5 TB/s, our fp16-store decode at 3.4–3.8, and the
loads-only level F0 of bench/decode_floor.py at 3.2–3.4: the pattern of the loads, not the work,
sets where the fp16 decode stands (docs/performance.md).  This times the kernels of
``bench/lab/cuda/bench_stream.cu`` — each reads one buffer many times the L2 once per launch and XOR-folds
it — for every pattern and depth, beside a device-to-device copy and torch SDPA fp16 on the
decode's B = 8, 28/4, 32k shape in the same process:

- ``ldg``: grid-stride 16-byte loads, U in flight per thread (F0 is U = 8);
- ``cpasync``: a warp per contiguous chunk (as a decode warp per split), tiles of ``tile`` bytes
  through S shared-memory stages by cp.async, read back from shared memory (the decode kernels
  today: S = 1, 8 KB tiles);
- ``bulk``: the same through one ``cp.async.bulk`` per tile (lane 0, an mbarrier per stage).

CTAs of four warps, as many per SM as fit (``cap``: at most that many), each warp its own chunk
and stages.  Writes ``stream-floor.json`` (rows: pattern, stages, tile, warps_per_sm,
bytes, us, tbps) and prints the table, fastest first.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
LAB_CUDA = Path(__file__).resolve().parent / "cuda"  # the lab's kernels, outside the wheel
from witcert_cupy import _cuda  # noqa: E402

# single launches timed with events, as the floor ladder's levels are (bench/decode_floor.py)
_spec = importlib.util.spec_from_file_location("bench_decode_floor", Path(__file__).resolve().parent / "decode_floor.py")
_floor = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_floor)
time_events = _floor.time_events

WARPS = 4  # per CTA
SMEM_PER_SM = 227 * 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--mib", type=int, default=1024, help="buffer size (MiB), many times the 50 MB L2")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    nbytes = args.mib << 20
    buf = cp.random.randint(1, 2**31 - 1, size=nbytes // 4, dtype=cp.int32)
    sink = cp.zeros(sms * 64 * 1024, dtype=cp.uint32)
    rows = []

    def row(pattern, stages, tile, wps, moved, us, **extra):
        r = dict(pattern=pattern, stages=stages, tile=tile, warps_per_sm=wps, bytes=int(moved), us=round(us, 2),
                 tbps=round(moved / us / 1e6, 3), **extra)
        rows.append(r)
        print(f"[stream] {pattern:>8} S={stages!s:>2} tile={tile!s:>6} warps/SM={wps!s:>3}: {us:9.1f} µs "
              f"{r['tbps']:6.3f} TB/s", flush=True)

    dst = cp.empty_like(buf)
    row("d2d_copy", None, None, None, 2 * nbytes, time_events(lambda: cp.copyto(dst, buf), args.reps),
        note="bytes read + written")
    del dst

    for U in (1, 4, 8, 16):
        fn = _cuda.kernel("bench_stream.cu", f"stream_ldg_u{U}", root=LAB_CUDA)
        nb = _cuda.geometry._resident_ctas(fn, 256, 0)
        grid = sms * nb
        n16 = nbytes // 16
        us = time_events(lambda: fn((grid,), (256,), (buf, np.int64(n16), sink)), args.reps)
        row("ldg", U, 16, nb * 8, nbytes, us)

    for kind, tiles in (("cpasync", (4096, 8192, 16384)), ("bulk", (4096, 8192, 16384, 32768))):
        for S in (1, 2, 3, 4):
            fn = _cuda.kernel("bench_stream.cu", f"stream_{kind}_s{S}", root=LAB_CUDA)
            for tile in tiles:
                smem = WARPS * S * tile
                if smem > SMEM_PER_SM - 2048:
                    continue
                # the opt-in past the default limit, which counts the static mbarriers too
                # stopped at 3 × 4 KB stages of the bulk kernel: 48 KB of stages and 768 bytes of
                # mbarriers, no CTA resident, a division by zero below)
                if smem > fn.max_dynamic_shared_size_bytes:
                    fn.max_dynamic_shared_size_bytes = smem
                nb_max = _cuda.geometry._resident_ctas(fn, 32 * WARPS, smem)
                if nb_max == 0:
                    continue
                for cap in sorted({min(nb_max, 2), min(nb_max, 3), nb_max}):
                    grid = sms * cap
                    chunk = nbytes // (grid * WARPS) // tile * tile
                    if chunk < tile:
                        continue
                    us = time_events(lambda: fn((grid,), (32 * WARPS,), (buf, np.int64(chunk), np.int32(tile), sink),
                                                shared_mem=smem), args.reps)
                    row(kind, S, tile, cap * WARPS, chunk * grid * WARPS, us)

    try:
        import torch

        B, hq, hkv, ctx, D = 8, 28, 4, 32768, 128
        k = torch.randn(B, hkv, ctx, D, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        q = torch.randn(B, hq, 1, D, device="cuda", dtype=torch.float16)
        f = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
        row("sdpa_fp16", None, None, None, 2 * k.numel() * 2, time_events(f, args.reps), shape="8/28/4/32768")
    except ImportError:
        print("[stream] torch not installed: no SDPA row")

    print("\nfastest first (TB/s):")
    for r in sorted(rows, key=lambda r: -r["tbps"]):
        print(f"  {r['tbps']:6.3f}  {r['pattern']:>9} S={r['stages']!s:>4} tile={r['tile']!s:>6} "
              f"warps/SM={r['warps_per_sm']!s:>4}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "stream-floor.json"
    meta = dict(device=cp.cuda.runtime.getDeviceProperties(dev.id)["name"].decode(), sms=sms, buffer_bytes=nbytes,
                reps=args.reps, timing="median of CUDA events around single launches (bench/decode_floor.py time_events)")
    path.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print(f"[stream] wrote {path}")


if __name__ == "__main__":
    main()
