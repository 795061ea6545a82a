"""How much a decode's time and its ratio to torch SDPA fp16 move with where the buffers land: the
same shape timed over several fresh allocations in one process, ours and SDPA's alternately.

Sweeps have read the fp16-store decode at B = 32, 28/4, 32k as 543–616 µs in different device calls
with the same kernel while its neighbours moved by ≤ 2% (docs/performance.md).  Each
allocation here first takes a spacer of a different size (CuPy's and torch's pools emptied before),
so that the pool and SDPA's tensors land at other addresses; each is checked against float64, then
ours and SDPA are timed in turn for ``--rounds`` rounds (graph replays over rotated buffers, as in
``bench/decode.py``), the SM clock and any slowdown reason sampled beside each timing
(bench/gpu_clocks.py; the last round's printed).

    PYTHONPATH=. python3 bench/lab/alloc_spread.py [--fp16] [--shapes 32/28/4/32768,...] [--allocs 4] [--out bench/results]

Without ``--fp16`` the certified INT8 step (8-bit dither).  Writes ``alloc-spread[-fp16].json``
(rows: alloc, batch, hq, hkv, context, us, sdpa_us, ratio_sdpa, the medians over rounds, and each
round's µs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import cupy as cp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))
import decode as bd  # noqa: E402

SPACER = 192 << 20  # bytes of spacer per allocation index


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fp16", action="store_true", help="the fp16-store decode (uncertified)")
    ap.add_argument("--shapes", default="32/28/4/32768,8/28/4/32768,8/32/8/32768,32/28/4/131072")
    ap.add_argument("--allocs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=str(HERE.parent / "results"))
    args = ap.parse_args()
    import torch

    l2 = bd.l2_bytes()
    bits, cert = (None, False) if args.fp16 else (8, True)
    rows = []
    for B, hq, hkv, ctx in bd.parse_shapes(args.shapes):
        ratios = []
        for a in range(args.allocs):
            cp.get_default_memory_pool().free_all_blocks()
            torch.cuda.empty_cache()
            spacer = cp.empty(SPACER * a + 1, cp.uint8)
            tspacer = torch.empty(SPACER * ((a * 5) % args.allocs) // 2 + 1, dtype=torch.uint8, device="cuda")
            case = bd.pool_case(args.fp16, B, hq, hkv, ctx, l2)
            err = case.check(bits, cert)
            assert err < 1e-4, err
            plans = case.plans(bits, cert)
            sdpa_fns = bd.sdpa_checked(B, hq, hkv, ctx, l2)
            ours, sdpa, notes = [], [], []
            for _ in range(args.rounds):
                t_s = bd.time_torch(sdpa_fns, args.reps)
                t_o = bd.time_cupy([p.launch for p in plans], args.reps)
                sdpa.append(t_s[0])
                ours.append(t_o[0])
                notes.append(dict(ours=t_o.clocks, sdpa=t_s.clocks))
                last = (t_o, t_s)
            us, sus = statistics.median(ours), statistics.median(sdpa)
            ratios.append(us / sus)
            rows.append(dict(alloc=a, batch=B, hq=hq, hkv=hkv, context=ctx, fp16=args.fp16, num_splits=plans[0].ns,
                             us=us, sdpa_us=sus, ratio_sdpa=us / sus, us_rounds=ours, sdpa_us_rounds=sdpa,
                             clocks_rounds=notes, rel_err_vs_fp64=err))
            print(f"B={B} {hq}/{hkv} ctx={ctx} alloc {a}: ours {us:8.1f} us, SDPA {sus:8.1f} us, {us / sus:.3f}x "
                  f"(rounds {' '.join(f'{t:.1f}' for t in ours)} / {' '.join(f'{t:.1f}' for t in sdpa)}); clocks "
                  + " ".join(f"{bd.clock_note(t) or '-'}" for t in last), flush=True)
            plans = case = sdpa_fns = spacer = tspacer = None
        print(f"B={B} {hq}/{hkv} ctx={ctx}: ratio median {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.3f}–{max(ratios):.3f} over {args.allocs} allocations", flush=True)
    bd.write_rows_json(args.out, "alloc-spread-fp16" if args.fp16 else "alloc-spread", rows)


if __name__ == "__main__":
    main()
