"""Tensor-parallel certified decode with NCCL: one process per GPU, kv heads sharded.

    python3 python/tp_decode.py --world 2 --out /tmp/tp          # 2 GPUs (needs 2 GPUs)
    python3 python/tp_decode.py --worlds 1,2 --check --out DIR    # 1 then 2 GPUs, compared, JSON
    python3 python/tp_decode.py --worlds 1 --emulate 2,4 --graph  # one GPU: the per-rank step of W = 2, 4

Each rank builds its shard (``KVPool(kv_head_offset=...)``) of a model-shaped cache (L layers, Hkv kv
heads, G query heads per kv head, d = 128, page 16), writes a prompt, then runs decode steps: per
layer, write the new token and run the certified decode of its local query heads with telemetry,
the certificate budget global (``CertConfig(num_q_heads=Hq)``).  Per-step latency is timed with
CUDA events on every rank.  At the end the telemetry of all ranks is reduced with one NCCL
all-reduce (off the decode path).  Every rank saves its last-step outputs and a checksum of its
codes; ``--check`` compares a W-rank run against the 1-rank run of the same workload (bit-identical
codes and outputs: same kernels, same split count) and checks that the global telemetry equals the
sum of per-rank telemetry.  Inputs are generated on the GPU from fixed seeds, identical on every
rank, and each rank keeps its heads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rows(cp, seed, n, H, d, massive=False):
    x = cp.random.RandomState(seed).standard_normal((n, H, d), dtype=cp.float32)
    if massive:  # kv head 1 has a huge channel on a few tokens: something for the certificate to see
        x[::997, 1, 3] *= 200.0
    return x


def worker(rank, world, uid, a, out_dir, queue, emulate=1):
    """One rank of ``world``; with ``emulate = W > 1`` (and ``world`` 1), rank 0 of a W-rank run
    alone on this GPU: its shard's shapes, no NCCL (the per-rank step of W GPUs, measured on one)."""
    import cupy as cp
    from cupy.cuda import nccl

    import witcert_cupy as wc
    from witcert_cupy.sharded import nccl_allreduce_sum, pack_telemetry, reduce_telemetry, shard_kv_heads

    cp.cuda.Device(rank).use()
    comm = nccl.NcclCommunicator(world, uid, rank) if world > 1 else None
    off, nh = shard_kv_heads(a.kv_heads, max(world, emulate))[rank]
    Hq, G, d, page = a.kv_heads * a.group, a.group, 128, 16
    qs = slice(off * G, (off + nh) * G)
    total = a.context + a.steps
    npg = -(-total // page)
    cfg = wc.QuantConfig(d, witness_bands=16, seed=2026)
    pool = wc.KVPool(a.layers, nh, d, a.batch * npg, page, cfg, backend="cuda", kv_head_offset=off)
    cert = wc.CertConfig(tier="AB", num_layers=a.layers, steps=a.steps, num_q_heads=Hq)
    tel = wc.Telemetry(a.layers, nh * G, cert, backend="cuda")
    # the prompt, written in chunks per (layer, request)
    chunk = 4096
    for layer in range(a.layers):
        for b in range(a.batch):
            for c0 in range(0, a.context, chunk):
                n = min(chunk, a.context - c0)
                seed = (layer * 1000 + b) * 1000 + c0 // chunk
                k = _rows(cp, seed, n, a.kv_heads, d, massive=True)[:, off:off + nh]
                v = _rows(cp, seed + 7, n, a.kv_heads, d)[:, off:off + nh]
                slots = cp.arange(b * npg * page + c0, b * npg * page + c0 + n, dtype=cp.int64)
                pool.write(layer, slots, cp.ascontiguousarray(k), cp.ascontiguousarray(v))
    cp.cuda.Device().synchronize()
    ip = cp.arange(0, a.batch * npg + 1, npg, dtype=cp.int32)
    times, host_times, outs = [], [], None
    for t in range(a.steps):
        pos = a.context + t
        used = pos // page + 1
        ix = cp.concatenate([cp.arange(b * npg, b * npg + used, dtype=cp.int32) for b in range(a.batch)])
        ipt = cp.arange(0, a.batch * used + 1, used, dtype=cp.int32)
        ll = cp.full(a.batch, pos % page + 1, cp.int32)
        slots = cp.asarray([b * npg * page + pos for b in range(a.batch)], cp.int64)
        kn = [cp.ascontiguousarray(_rows(cp, 10 ** 8 + t * 100 + l, a.batch, a.kv_heads, d)[:, off:off + nh])
              for l in range(a.layers)]
        vn = [cp.ascontiguousarray(_rows(cp, 2 * 10 ** 8 + t * 100 + l, a.batch, a.kv_heads, d)[:, off:off + nh])
              for l in range(a.layers)]
        qn = [cp.ascontiguousarray(_rows(cp, 3 * 10 ** 8 + t * 100 + l, a.batch, Hq, d)[:, qs]) for l in range(a.layers)]
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        h0 = time.perf_counter()
        res = []
        for layer in range(a.layers):
            pool.write(layer, slots, kn[layer], vn[layer])
            res.append(wc.decode_attention(qn[layer], pool, layer=layer, kv_indptr=ipt, kv_indices=ix,
                                           kv_last_page_len=ll, cert=cert, telemetry=tel, num_splits=a.splits))
        host_times.append((time.perf_counter() - h0) * 1e6)
        e1.record()
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
        outs = res
    del ip
    # global telemetry: one NCCL all-reduce of the packed per-rank aggregates
    local = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in tel.snapshot().items()}
    packed_local = pack_telemetry(tel, qs.start, Hq).get()
    t0 = time.perf_counter()
    snap = reduce_telemetry([tel], [qs.start], Hq, allreduce=nccl_allreduce_sum(comm) if comm else None)
    reduce_s = time.perf_counter() - t0
    graph_us = _graph_step_us(cp, wc, pool, a, qn, kn, vn, slots, ipt, ix, ll, cert, tel) if a.graph else None
    cp.get_default_memory_pool().free_all_blocks()
    free, _ = cp.cuda.runtime.memGetInfo()
    np.savez(out_dir / f"w{world if emulate == 1 else f'{emulate}emu'}_r{rank}.npz",
             **{f"{n}_{l}": getattr(outs[l], n).get() for l in range(a.layers) for n in ("o", "lse", "log_a", "risk")},
             codes_sum=pool.codes.astype(cp.int64).sum(axis=(3, 4)).get(),
             scales_sum=pool.scales.astype(cp.float64).sum(axis=(3, 4)).get(), packed=packed_local)
    queue.put({"rank": rank, "world": world, "kv_heads": [off, off + nh], "step_us": times,
               "host_us": host_times, "graph_step_us": graph_us,
               "bytes_per_token_rank": pool.bytes_per_token(), "free_bytes": int(free), "pool_bytes": pool.nbytes,
               "telemetry_local": local, "telemetry_global": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                                               for k, v in snap.items()},
               "reduce_seconds": reduce_s})


def _graph_step_us(cp, wc, pool, a, qn, kn, vn, slots, ipt, ix, ll, cert, tel, reps=50):
    """The last step (every layer's write, certified decode and telemetry) captured as one CUDA
    graph and replayed ``reps`` times: CUDA-event µs per replay (the same slot rewritten, the same
    context decoded; replays past the declared steps certify +inf, which times the same)."""
    plans = [wc.decode_plan(qn[l], pool, layer=l, kv_indptr=ipt, kv_indices=ix, kv_last_page_len=ll, cert=cert,
                            telemetry=tel, num_splits=a.splits) for l in range(a.layers)]

    def step():
        for l in range(a.layers):
            pool.write(l, slots, kn[l], vn[l])
            plans[l].launch()

    g = wc.CapturedStep(step, pools=[pool])
    for _ in range(3):
        g.replay()
    g.synchronize()
    out = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(g.stream)
        g.replay()
        e1.record(g.stream)
        e1.synchronize()
        out.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    return out


def run_world(world, a, out_dir, emulate=1):
    from cupy.cuda import nccl

    uid = nccl.get_unique_id() if world > 1 else None
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, uid, a, out_dir, q, emulate)) for r in range(world)]
    for p in procs:
        p.start()
    got = [q.get(timeout=900) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"a rank exited with code {p.exitcode}")
    return sorted(got, key=lambda r: r["rank"])


def check(world, ranks, a, out_dir):
    """W-rank outputs and codes against the 1-rank run; global telemetry = sum of local."""
    one = np.load(out_dir / "w1_r0.npz")
    G = a.group
    for r in ranks:
        f = np.load(out_dir / f"w{world}_r{r['rank']}.npz")
        k0, k1 = r["kv_heads"]
        assert np.array_equal(f["codes_sum"], one["codes_sum"][:, :, k0:k1]), "codes differ"
        assert np.array_equal(f["scales_sum"], one["scales_sum"][:, :, k0:k1]), "scales differ"
        for l in range(a.layers):
            for n in ("o", "lse", "log_a", "risk"):
                x, y = f[f"{n}_{l}"], one[f"{n}_{l}"][:, k0 * G:k1 * G]
                assert np.array_equal(x.view(np.uint8), y.view(np.uint8)), (world, r["rank"], l, n)
    packed = sum(np.load(out_dir / f"w{world}_r{r['rank']}.npz")["packed"] for r in ranks)
    g = ranks[0]["telemetry_global"]
    assert g["cells"] == sum(r["telemetry_local"]["cells"] for r in ranks) == int(packed[0])
    assert g == ranks[-1]["telemetry_global"], "ranks disagree on the global telemetry"
    w1 = np.load(out_dir / "w1_r0.npz")["packed"]
    exact = np.ones(packed.shape, bool)
    exact[3] = False  # the finite sum of R: per-rank partial sums round differently
    assert np.array_equal(packed[exact], w1[exact]), "the reduced telemetry differs from the 1-rank run"
    assert np.isclose(packed[3], w1[3], rtol=1e-12)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="1,2", help="comma-separated rank counts, run one after another")
    ap.add_argument("--world", type=int, default=None, help="a single rank count (overrides --worlds)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--splits", type=int, default=16, help="fixed split count: runs of every world size compare bit for bit")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--graph", action="store_true",
                    help="also time each rank's step captured as one CUDA graph (replays, CUDA events, median)")
    ap.add_argument("--emulate", default="",
                    help="comma-separated W: rank 0 of a W-rank run alone on GPU 0 (its shard's shapes, no NCCL)")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    import cupy as cp

    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    worlds = [a.world] if a.world else [int(w) for w in a.worlds.split(",")]
    have = cp.cuda.runtime.getDeviceCount()
    rows, skipped = [], []
    try:
        emulated = [int(w) for w in a.emulate.split(",") if w.strip()]
    except ValueError:
        raise SystemExit(f"--emulate takes comma-separated rank counts, got {a.emulate!r}") from None
    if any(w < 2 or a.kv_heads % w for w in emulated):
        raise SystemExit(f"--emulate: each W must be at least 2 and divide --kv-heads ({a.kv_heads}), got {emulated}")
    runs = [(w, 1) for w in worlds] + [(1, w) for w in emulated]
    for w, emu in runs:
        if w > have:
            skipped.append(w)
            print(f"world {w}: skipped, this machine has {have} GPU(s)", flush=True)
            continue
        t0 = time.perf_counter()
        ranks = run_world(w, a, out_dir, emu)
        warm = [statistics.median(r["step_us"][2:]) for r in ranks]
        per_gpu_bytes = ranks[0]["bytes_per_token_rank"]
        row = {"world": w, "emulated_world": emu if emu > 1 else None, "layers": a.layers, "kv_heads": a.kv_heads,
               "q_heads": a.kv_heads * a.group, "batch": a.batch, "context": a.context, "steps": a.steps,
               "num_splits": a.splits, "rank_kv_heads": ranks[0]["kv_heads"][1] - ranks[0]["kv_heads"][0],
               "step_us_median_per_rank": [round(x, 1) for x in warm], "step_us": round(max(warm), 1),
               "host_issue_us_median": round(max(statistics.median(r["host_us"][2:]) for r in ranks), 1),
               "graph_step_us": (round(max(statistics.median(r["graph_step_us"]) for r in ranks), 1)
                                 if a.graph else None),
               "cache_bytes_per_token_per_gpu": per_gpu_bytes,
               # tokens of this model's cache one GPU can hold: its pool plus the memory still free
               "capacity_tokens_per_gpu": int(min(r["free_bytes"] + r["pool_bytes"] for r in ranks) // per_gpu_bytes),
               "telemetry_reduce_s": round(max(r["reduce_seconds"] for r in ranks), 4),
               "global_coverage": ranks[0]["telemetry_global"]["coverage"],
               "global_cells": ranks[0]["telemetry_global"]["cells"], "wall_s": round(time.perf_counter() - t0, 1)}
        if a.check and w > 1 and 1 in worlds:
            row["matches_single_gpu"] = check(w, ranks, a, out_dir)
        rows.append(row)
        print(json.dumps(row), flush=True)
    path = out_dir / ("tp-decode-emulated.json" if emulated else "tp-decode.json")
    path.write_text(json.dumps({"date": datetime.date.today().isoformat(), "command": " ".join(sys.argv), "gpus_available": have, "skipped_worlds": skipped,
                                "rows": rows}, indent=1))
    print("wrote", path)


if __name__ == "__main__":
    main()
