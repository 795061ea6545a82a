"""Extend (prefill) benchmark of issue 6: 2048 new tokens over a 30k-token INT8 prefix, Hq = 32,
Hkv = 8, d = 128, page 16, against torch SDPA fp16 with the same causal structure, in one process.

    PYTHONPATH=. python3 bench/extend.py [--new 2048] [--prefix 30720] [--reps 20] [--out DIR]

(To compare with an earlier version, run an earlier commit's tree in its own process beside this one.)

Methods (each timed as a CUDA graph, median of ``--reps`` replays, events):

- ``witcert_extend_tc``: ``cuda/extend_tc.cu`` (the prepass that dequantizes each tile once, stage
  1, on sm_90) + merge + certificate (Tier B), and with the certificate off;
- ``witcert_extend_tc_prepass``: that prepass alone (its share of the certified time);
- ``sdpa_fp16_causal_lower_right``: torch SDPA on fp16 K/V with the lower-right causal mask (query
  ``i`` sees the prefix and new tokens ``0..i``: the extend's structure);
- ``sdpa_fp16_nomask``: the same shapes with no mask (an upper bound on SDPA's work).

Correctness first: sampled query positions are checked against float64 attention on the
dequantized cache (o by the flash-attention rule against an fp16 attention, lse, and zero
certificate violations against the float64 true TV from the exact keys).  Writes
``bench/results/extend.json`` (rows: method, n_new, prefix, hq, hkv, d, page_size, cert, us,
tflops, ratio_sdpa).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import witcert_cupy as wc  # noqa: E402

D, PS = 128, 16


def build(args, cp):
    total = args.prefix + args.new
    npages = -(-total // PS)
    pool = wc.KVPool(1, args.hkv, D, npages, PS, wc.QuantConfig(D), backend="cuda")
    rng = cp.random.default_rng(0)
    k16 = (rng.standard_normal((total, args.hkv, D), dtype=cp.float32)).astype(cp.float16)
    k16[:, :, 7] *= 12  # a massive key channel, as real models have
    v16 = rng.standard_normal((total, args.hkv, D), dtype=cp.float32).astype(cp.float16)
    pages = cp.asarray(np.random.default_rng(1).permutation(npages).astype(np.int32))
    slots = (pages[:, None] * PS + cp.arange(PS, dtype=cp.int32)).reshape(-1)[:total].astype(cp.int64)
    for lo in range(0, total, 8192):
        pool.write(0, slots[lo:lo + 8192], k16[lo:lo + 8192], v16[lo:lo + 8192])
    q = (rng.standard_normal((args.new, args.hq, D), dtype=cp.float32) * 1.5).astype(cp.float32)
    qo = np.array([0, args.new], np.int32)
    ip = np.array([0, npages], np.int32)
    last = np.array([total - (npages - 1) * PS], np.int32)
    return pool, k16, v16, pages, slots, q, qo, ip, last


def check(args, cp, pool, k16, slots, q, res, positions):
    """Sampled positions against float64 attention on the dequantized cache (returns the worst errors)."""
    total = args.prefix + args.new
    G = args.hq // args.hkv
    sm = 1.0 / math.sqrt(D)
    kh = pool.dequantized(0, slots, "k").astype(cp.float64)  # [S, H, D]
    vh = pool.dequantized(0, slots, "v")
    kx = k16.astype(cp.float64)
    worst = {"o_rel": 0.0, "o_over_fp16": 0.0, "lse": 0.0, "violations": 0}
    for i in positions:
        upto = total - args.new + i + 1
        qi = cp.asarray(q[i], cp.float64).reshape(args.hkv, G, D)
        lg = sm * cp.einsum("hgd,shd->hgs", qi, kh[:upto])
        lx = sm * cp.einsum("hgd,shd->hgs", qi, kx[:upto])
        m = lg.max(-1, keepdims=True)
        w = cp.exp(lg - m)
        lse64 = (m[..., 0] + cp.log(w.sum(-1))).reshape(-1)
        o64 = (cp.einsum("hgs,shd->hgd", w, vh[:upto].astype(cp.float64)) / w.sum(-1)[..., None]).reshape(-1, D)
        w16 = w.astype(cp.float16).astype(cp.float64)
        o16 = (cp.einsum("hgs,shd->hgd", w16, vh[:upto].astype(cp.float16).astype(cp.float64))
               / w.sum(-1)[..., None]).reshape(-1, D)
        err = float(cp.abs(res.o[i] - o64).max())
        err16 = float(cp.abs(o16 - o64).max())
        worst["o_rel"] = max(worst["o_rel"], err / float(cp.abs(o64).max()))
        worst["o_over_fp16"] = max(worst["o_over_fp16"], err / max(err16, 1e-30))
        worst["lse"] = max(worst["lse"], float(cp.abs(res.lse[i] - lse64).max()))
        p = cp.exp(lx - lx.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        pt = w / w.sum(-1, keepdims=True)
        tv = (0.5 * cp.abs(p - pt).sum(-1)).reshape(-1)
        worst["violations"] += int((tv > res.tv_bound[i]).sum())
    return worst


def sdpa_cases(args, k16, v16, q):
    import torch
    import torch.nn.functional as F

    total = args.prefix + args.new
    qt = torch.as_tensor(q, device="cuda").to(torch.float16).permute(1, 0, 2)[None].contiguous()
    kt = torch.as_tensor(k16, device="cuda").permute(1, 0, 2)[None].contiguous()
    vt = torch.as_tensor(v16, device="cuda").permute(1, 0, 2)[None].contiguous()
    out = {}
    try:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(args.new, total)
        try:
            F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)
            out["sdpa_fp16_causal_lower_right"] = lambda: F.scaled_dot_product_attention(
                qt, kt, vt, attn_mask=mask, enable_gqa=True)
        except Exception as e:  # noqa: BLE001 - older kernels: expand the kv heads instead
            print(f"  causal_lower_right with enable_gqa failed ({type(e).__name__}); expanding kv heads")
            G = args.hq // args.hkv
            ke, ve = kt.repeat_interleave(G, 1), vt.repeat_interleave(G, 1)
            F.scaled_dot_product_attention(qt, ke, ve, attn_mask=mask)
            out["sdpa_fp16_causal_lower_right"] = lambda: F.scaled_dot_product_attention(qt, ke, ve, attn_mask=mask)
    except Exception as e:  # noqa: BLE001
        print(f"  no lower-right causal SDPA: {type(e).__name__}: {e}")
    out["sdpa_fp16_nomask"] = lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--new", type=int, default=2048)
    ap.add_argument("--prefix", type=int, default=30720)
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import cupy as cp

    from decode import time_cupy, time_torch
    from witcert_cupy._cuda.extend import ExtendPlan
    from witcert_cupy.decode import check_page_table

    print(f"extend: {args.new} new tokens over a {args.prefix}-token prefix, Hq={args.hq}, Hkv={args.hkv}, d={D}")
    pool, k16, v16, pages, slots, q, qo, ip, last = build(args, cp)
    cert = wc.CertConfig(steps=args.new)
    sm = 1.0 / math.sqrt(D)
    # causal work: every new token attends its prefix and the new tokens up to itself
    pairs = args.new * args.prefix + args.new * (args.new + 1) / 2
    flops = 4.0 * pairs * args.hq * D
    pt = check_page_table(ip, pages.get(), last, batch=1, num_pages=pool.num_pages, page_size=PS)
    positions = [0, 1, args.new // 3, args.new // 2 + 5, args.new - 2, args.new - 1]
    times, checks, ok = {}, {}, True
    for variant in [""]:
        tag = ""
        res = wc.extend_attention(q, pool, layer=0, qo_indptr=cp.asarray(qo), kv_indptr=cp.asarray(ip),
                                  kv_indices=pages, kv_last_page_len=cp.asarray(last), cert=cert)
        assert res.kernel == "extend_tc", res.kernel
        worst = check(args, cp, pool, k16, slots, q, res, positions)
        print(f"  check{tag} ({len(positions)} positions × {args.hq} heads): o rel err {worst['o_rel']:.2e} "
              f"({worst['o_over_fp16']:.2f}× an fp16 attention's), lse err {worst['lse']:.2e}, "
              f"certificate violations {worst['violations']}, max cmax {float(res.cmax.max()):.6f}")
        checks[variant] = worst
        ok = ok and worst["violations"] == 0 and worst["o_over_fp16"] <= 2.0 + 1e-9 and worst["lse"] < 1e-3
        for name, c in ((f"witcert_extend_tc{tag}", cert), (f"witcert_extend_tc_nocert{tag}", None)):
            plan = ExtendPlan(pool._dev, q, 0, qo, cp.asarray(ip), pages, cp.asarray(last), True, sm, c, None,
                              pt.num_pages_of(0))
            times[name], _ = time_cupy([plan.launch], args.reps)
            if c is not None and getattr(plan, "num_images", 0):  # the wgmma path's prepass alone
                pre = f"witcert_extend_tc_prepass{tag}"
                times[pre], _ = time_cupy([plan.prepass], args.reps)
                moved = plan.num_images * args.hkv * (plan.work.shape[1] + 2 * 64 * (D + 8))
                print(f"  {pre:34s} {times[pre]:10.1f} µs  {plan.num_images} images × {args.hkv} kv heads, "
                      f"{moved / times[pre] / 1e3:.0f} GB/s (images written + codes and scales read)")
            plan.launch()
            agree = float(cp.abs(plan.lse - res.lse).max())
            print(f"  {name:34s} {times[name]:10.1f} µs  splits {plan.ns}, |lse − checked run| {agree:.1e}")
    try:
        for name, f in sdpa_cases(args, k16, v16, q).items():
            times[name], _ = time_torch([f], args.reps)
            print(f"  {name:34s} {times[name]:10.1f} µs")
    except ImportError:
        print("  torch not installed: no SDPA baseline")
    base = times.get("sdpa_fp16_causal_lower_right", times.get("sdpa_fp16_nomask"))
    rows = []
    for name, us in times.items():
        rows.append(dict(method=name, n_new=args.new, prefix=args.prefix, hq=args.hq, hkv=args.hkv, d=D,
                         page_size=PS, dither_bits=8,
                         cert=name.startswith("witcert") and "nocert" not in name and "prepass" not in name,
                         us=us, tflops=None if "prepass" in name else flops / (us * 1e-6) / 1e12,
                         ratio_sdpa=(us / base) if base else None))
    for r in rows:
        rs = f"{r['ratio_sdpa']:.2f}×" if r["ratio_sdpa"] else "-"
        tf = f"{r['tflops']:7.1f}" if r["tflops"] is not None else "      -"
        print(f"  {r['method']:34s} {r['us']:10.1f} µs {tf} TFLOP/s  {rs} SDPA (causal)")
    out = dict(date=str(datetime.date.today()), checks=checks[""], checks_ok=ok, causal_flops=flops, rows=rows)
    dest = Path(args.out) if args.out else Path(__file__).resolve().parent / "results"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "extend.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
