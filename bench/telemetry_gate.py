"""Issue 4 benchmarks: the cost of device telemetry (on vs off, eager and inside CUDA graphs) and the
gate's page-in traffic against a whole-head fallback, on one GPU (or the CPU for the gate part).

    PYTHONPATH=. python3 bench/telemetry_gate.py [--out bench/results] [--backend cuda|cpu]

Telemetry: B = 8, (Hq, Hkv) = (32, 8), d = 128, page 16, contexts 4096 and 32768, certified INT8
(8-bit dither, tier B).  The same decode plan is timed with and without the telemetry kernel, side
by side in one process, (a) eagerly (N launches between two events) and (b) as one CUDA graph of N
launches replayed (bench/decode.py's `time_cupy`); median over repetitions.  The pool holds several disjoint copies of the batch
(more than the L2) and the launches rotate through them.

Gate: a context with a few massive-activation kv heads (a handful of sink tokens with a huge key
channel, no outlier bypass), queries that lean on that channel; `gated_decode` at τ = 0.2 certified.
Page-granular traffic (bytes paged in) is compared with the whole-head fallback (every (request,
kv head) with an offending query head paged in whole).  Writes ``telemetry-gate.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import witcert_cupy as wc  # noqa: E402
from witcert_cupy.reference import to_host  # noqa: E402

D, PAGE = 128, 16


def _time_events(fn, reps, n):
    """Median µs per launch of ``fn`` called ``n`` times between two events, ``reps`` times."""
    import cupy as cp

    ts = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        for _ in range(n):
            fn()
        e1.record()
        e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / n)
    return statistics.median(ts)


def bench_telemetry(rows, reps):
    import cupy as cp
    from decode import time_cupy  # bench/decode.py's graph timing (imports CuPy: GPU part only)

    B, hq, hkv = 8, 32, 8
    l2 = int(cp.cuda.runtime.getDeviceProperties(0)["l2CacheSize"])
    for ctx in (4096, 32768):
        npg = ctx // PAGE
        per_copy = B * hkv * ctx * 2 * 136
        rot = int(max(2, min(8, math.ceil(3 * l2 / per_copy))))
        cfg = wc.QuantConfig(D, dither_bits=8, seed=7)
        pool = wc.KVPool(1, hkv, D, B * npg * rot, PAGE, cfg, backend="cuda")
        cp.random.seed(0)
        pool.codes[...] = (cp.random.randint(0, 255, size=pool.codes.shape, dtype=cp.int32) - 127).astype(cp.int8)
        pool.scales[...] = cp.random.uniform(0.004, 0.03, size=pool.scales.shape).astype(cp.float16)
        cert = wc.CertConfig(tier="B", num_layers=32, steps=1024)
        tel = wc.Telemetry(1, hq, cert, backend="cuda")
        plans = {False: [], True: []}
        for r in range(rot):
            ip = cp.arange(0, B * npg + 1, npg, dtype=cp.int32)
            ix = cp.arange(r * B * npg, (r + 1) * B * npg, dtype=cp.int32)
            ll = cp.full(B, PAGE, cp.int32)
            q = cp.asarray(np.random.default_rng(r).standard_normal((B, hq, D)).astype(np.float32))
            for on in (False, True):
                plans[on].append(wc.decode_plan(q, pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll,
                                                cert=cert, telemetry=tel if on else None))
        for p in plans[True]:
            p.launch()
        cp.cuda.Device().synchronize()
        res = {}
        for rep_round in range(2):  # alternate on/off twice: drift shows up as disagreement
            for on in (False, True):
                it = iter(range(10 ** 9))
                ps = plans[on]
                eager = _time_events(lambda: ps[next(it) % rot].launch(), reps, 4 * rot)
                graph, _ = time_cupy([p.launch for p in ps] * 4, reps)
                res.setdefault((on, "eager"), []).append(eager)
                res.setdefault((on, "graph"), []).append(graph)
        for mode in ("eager", "graph"):
            off = statistics.median(res[(False, mode)])
            on = statistics.median(res[(True, mode)])
            row = {"part": "telemetry", "mode": mode, "batch": B, "hq": hq, "hkv": hkv, "context": ctx,
                   "page_size": PAGE, "us_off": round(off, 2), "us_on": round(on, 2),
                   "overhead": round(on / off - 1, 4), "rotations": rot}
            rows.append(row)
            print(json.dumps(row), flush=True)
        snap = tel.snapshot()
        print(f"  telemetry counted {snap['cells']} cells over {snap['steps']} steps", flush=True)
        del pool, plans
        cp.get_default_memory_pool().free_all_blocks()


def massive_head_workload(backend, ctx, *, hkv=8, massive_heads=(1, 6), sinks=6, batch=2, seed=0):
    """A pool where ``massive_heads`` have ``sinks`` tokens with a huge key channel (3) and queries
    of the group lean on it; every other head is ordinary."""
    rng = np.random.default_rng(seed)
    npg = ctx // PAGE
    cfg = wc.QuantConfig(D, witness_bands=16, seed=seed)
    pool = wc.KVPool(1, hkv, D, batch * npg, PAGE, cfg, backend=backend, keep_exact=True,
                     exact_tier_pages=4096)
    xp = pool.xp
    chunk = 4096
    for b in range(batch):
        sink_pos = np.sort(rng.choice(ctx, size=sinks, replace=False))
        sink_pos[0] = 0
        for c0 in range(0, ctx, chunk):
            n = min(chunk, ctx - c0)
            k = rng.standard_normal((n, hkv, D)).astype(np.float32)
            v = rng.standard_normal((n, hkv, D)).astype(np.float32)
            for h in massive_heads:
                for t in sink_pos[(sink_pos >= c0) & (sink_pos < c0 + n)]:
                    k[t - c0, h, 3] = 400.0
            slots = np.arange(b * npg * PAGE + c0, b * npg * PAGE + c0 + n, dtype=np.int64)
            pool.write(0, xp.asarray(slots), xp.asarray(k), xp.asarray(v))
    G = 4
    q = rng.standard_normal((batch, hkv * G, D)).astype(np.float32)
    for h in massive_heads:
        q[:, h * G:(h + 1) * G, 3] = 0.05  # the sinks take a real share of the mass
    ip = np.arange(0, batch * npg + 1, npg, dtype=np.int32)
    ix = np.arange(batch * npg, dtype=np.int32)
    ll = np.full(batch, PAGE, np.int32)
    return pool, q, (ip, ix, ll)


def bench_gate(rows, backend, ctx):
    pool, q, (ip, ix, ll) = massive_head_workload(backend, ctx)
    xp = pool.xp
    cert = wc.CertConfig(tier="AB", num_layers=32, steps=1024)
    args = dict(layer=0, kv_indptr=xp.asarray(ip), kv_indices=xp.asarray(ix), kv_last_page_len=xp.asarray(ll))
    before = wc.decode_attention(xp.asarray(q), pool, cert=cert, **args)
    risk0 = to_host(before.risk)
    t0 = time.perf_counter()
    res, rep = wc.gated_decode(xp.asarray(q), pool, cert=cert, **args)
    dt = time.perf_counter() - t0
    risk1 = to_host(res.risk)
    B, Hq = risk0.shape
    G = Hq // pool.num_kv_heads
    over_kv = (risk0 > 0.2).reshape(B, pool.num_kv_heads, G).any(-1)
    whole_head = int(over_kv.sum()) * ctx * 2 * D * 2      # exact fp16 K and V of each offending head
    paged = int(rep.bytes_paged_in.sum())
    row = {"part": "gate", "backend": backend, "batch": B, "hq": Hq, "hkv": pool.num_kv_heads, "context": ctx,
           "page_size": PAGE, "tau": 0.2, "offending_kv_heads": int(over_kv.sum()),
           "coverage_before": float(np.mean(risk0 <= 0.2)), "coverage_after": float(np.mean(risk1 <= 0.2)),
           "pages_repaired": rep.pages_repaired, "rounds": rep.rounds, "decodes": rep.decodes, "tier_full": rep.tier_full,
           "bytes_paged_in": paged, "bytes_whole_head": whole_head,
           "traffic_cut": round(whole_head / paged, 1) if paged else None, "gate_seconds": round(dt, 3)}
    rows.append(row)
    print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    rows = []
    if a.backend == "cuda":
        bench_telemetry(rows, a.reps)
        for ctx in (4096, 32768):
            bench_gate(rows, "cuda", ctx)
    else:
        bench_gate(rows, "cpu", 4096)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "" if a.backend == "cuda" else "-cpu"
    path = out / f"telemetry-gate{tag}.json"
    path.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))
    print("wrote", path)


if __name__ == "__main__":
    main()
