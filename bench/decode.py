"""Decode latency on one GPU, side by side in one process: our certified INT8 decode (dither bits 8,
16, 24; certificate on/off), our fp16-store decode when available, and torch SDPA fp16 (GQA, fused
backends) on the same shapes.

    PYTHONPATH=. python3 bench/decode.py [--quick | --shapes 32/28/4/32768,...] [--out bench/results]
    PYTHONPATH=. python3 bench/decode.py --configs [--shapes ...]   # the configuration axis

Method (docs/performance.md): correctness against a float64 reference before timing; every method is
captured in a CUDA graph that calls it once per rotated buffer (the buffers together are several
times the L2), the graph is replayed many times, each replay timed with CUDA events; the median per
call is reported.  Bytes count K+V (codes + scales for INT8, fp16 values for SDPA).
The fp16 store is timed certified (Tier A over a 16-band witness) and without a certificate.
Writes ``decode.json`` (``decode-quick.json`` with ``--quick``, ``decode-shapes.json`` with
``--shapes``; rows: method, batch, hq, hkv, context, page_size, dither_bits, cert, us, gbps,
ratio_sdpa; the date inside) and the matching ``.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import cupy as cp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import witcert_cupy as wc  # noqa: E402
from witcert_cupy._cuda.capture import join_forks  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_clocks import ClockSampler  # noqa: E402
from shapes import parse_shapes  # noqa: E402,F401  (the benchmarks' --shapes, lab scripts' bd.parse_shapes)

D = 128
PAGE = 16
FP16_BANDS = 16  # the fp16 store's witness bands (a black-box scheme metered by Tier A)


def l2_bytes():
    return int(cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["l2CacheSize"])


class Timed(tuple):
    """``(median µs, [µs per repetition])``, with ``.clocks``: the GPU clocks sampled while the
    repetitions ran (bench/gpu_clocks.py; None without NVML)."""

    clocks = None


def _timed(median, times, sampler):
    t = Timed((median, times))
    t.clocks = sampler.summary()
    return t


def time_cupy(launches, reps):
    """Median µs per launch of a CUDA graph that runs every callable in ``launches`` once (a
    :class:`Timed`)."""
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for f in launches:
            f()
        s.synchronize()
        s.begin_capture()
        for f in launches:
            f()
        join_forks(s)  # telemetry forked off the capture stream (if any) comes back before it ends
        g = s.end_capture()
        g.launch(s)
        s.synchronize()
        times = []
        with ClockSampler() as sampler:
            for _ in range(reps):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(s)
                g.launch(s)
                e1.record(s)
                e1.synchronize()
                times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / len(launches))
    return _timed(statistics.median(times), times, sampler)


def time_torch(launches, reps):
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in launches:
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in launches:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    with ClockSampler() as sampler:
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1e3 / len(launches))
    return _timed(statistics.median(times), times, sampler)




def cert_modes(fp16, uncertified_too):
    """The certificate settings a side benchmark times: certified (Tier B on INT8, Tier A on the
    fp16 store), and uncertified as well with ``--uncertified-too``."""
    return (True, False) if uncertified_too else (True,)


def rotations(bytes_one, l2):
    return int(max(1, min(16, math.ceil(3 * l2 / max(bytes_one, 1)))))


def rotated_tables(B, hq, npg, page, rot, d=D):
    """Page tables and queries for ``rot`` disjoint copies of a batch of B requests of npg pages."""
    tables, qs = [], []
    for r in range(rot):
        base = r * B * npg
        tables.append((cp.arange(0, B * npg + 1, npg, dtype=cp.int32),
                       cp.arange(base, base + B * npg, dtype=cp.int32), cp.full(B, page, cp.int32)))
        qs.append(cp.asarray(np.random.default_rng(r).standard_normal((B, hq, d)).astype(np.float32)))
    return tables, qs


class Int8Case:
    """A pool with ``rot`` disjoint copies of a (B, Hkv, ctx) batch: random valid codes and scales.

    ``cfg`` (default: 8-bit dither, group 32, head dim ``d``) sets the layout: witness bands and
    outlier pairs are stored (their contents do not change the work); ``exact_frac`` pages every
    ``1/exact_frac``-th page of each request and kv head into the exact tier (served exactly)."""

    def __init__(self, B, hq, hkv, ctx, page, rot, d=D, cfg=None, exact_frac=0.0):
        npg = ctx // page
        self.B, self.hq, self.hkv, self.ctx, self.rot, self.d = B, hq, hkv, ctx, rot, d
        self.cfg = cfg if cfg is not None else wc.QuantConfig(d, dither_bits=8, seed=1234)
        total = B * npg * rot
        step = max(1, int(round(1 / exact_frac))) if exact_frac else 0
        n_exact = hkv * len(range(0, total, step)) if exact_frac else 0
        self.pool = wc.KVPool(1, hkv, d, total, page, self.cfg, backend="cuda", keep_exact=bool(n_exact),
                              exact_tier_pages=n_exact)
        p = self.pool
        # random valid codes and scales, written block by block (a whole-pool int32 temporary
        # would not fit at the largest shapes); contents do not change the timing
        cp.random.seed(0)
        blk = 1 << 26
        codes_blk = (cp.random.randint(0, 255, size=blk, dtype=cp.int32) - 127).astype(cp.int8)
        scale_blk = cp.random.uniform(0.004, 0.03, size=blk // 16).astype(cp.float16)
        for arr, src in ((p.codes.reshape(-1), codes_blk), (p.scales.reshape(-1), scale_blk)):
            for off in range(0, arr.size, src.size):
                n = min(src.size, arr.size - off)
                arr[off:off + n] = src[:n]
        if n_exact:
            for h in range(hkv):
                for pg in range(0, total, step):
                    p.page_in(0, h, pg)
        self.tables, self.q = rotated_tables(B, hq, npg, page, rot, d)

    def bytes_moved(self):
        return self.B * self.hkv * self.ctx * 2 * self.cfg.bytes_per_token_side()

    def plans(self, bits, cert, unroll=0, stage1="auto", num_splits=None, tier="B", max_pages=0):
        self.pool.config = dataclasses.replace(self.cfg, dither_bits=bits)
        c = wc.CertConfig(tier=tier, num_layers=32, steps=1024) if cert else None
        return [self.pool._dev.plan(self.q[r], 0, *self.tables[r], 1 / math.sqrt(self.d), c, num_splits, unroll,
                                    max_pages=max_pages, stage1=stage1) for r in range(self.rot)]

    def reference_o(self, r=0, b=0, fp16=False):
        """float64 attention of request b of rotation r over the reconstructed values: o [Hq, D]
        (each request's pages are consecutive slots, rotated_tables); ``fp16``: as an fp16 attention
        kernel computes it on the same values (q, k̂, v̂ and the weights rounded to fp16: SPEC §9's
        yardstick for a form-(I) output, witcert_cupy.reference.attention_fp16)."""
        ip, ix, _ = self.tables[r]
        first = int(ix[int(ip[b].get())].get())
        slots = cp.arange(self.ctx, dtype=cp.int64) + first * self.pool.page_size
        kh = self.pool.dequantized(0, slots, "k").astype(cp.float64)  # [S, Hkv, d]
        vh = self.pool.dequantized(0, slots, "v").astype(cp.float64)
        tm = getattr(self.pool, "tier_map", None)
        if tm is not None:  # pages served exactly read the backing store's rows
            ps = self.pool.page_size
            for j in range(self.ctx // ps):
                for h in range(self.hkv):
                    if tm[0, h, first + j] >= 0:
                        rows = slice((first + j) * ps, (first + j + 1) * ps)
                        kh[j * ps:(j + 1) * ps, h] = cp.asarray(self.pool.exact[0, 0, h, rows], cp.float64)
                        vh[j * ps:(j + 1) * ps, h] = cp.asarray(self.pool.exact[0, 1, h, rows], cp.float64)
        G = self.hq // self.hkv
        f16 = (lambda a: a.astype(cp.float16).astype(cp.float64)) if fp16 else (lambda a: a)  # noqa: E731
        kh, vh = f16(kh), f16(vh)
        q = f16(self.q[r][b].astype(cp.float64)).reshape(self.hkv, G, self.d)
        lg = cp.einsum("hgd,shd->hgs", q, kh) / math.sqrt(self.d)
        if fp16:
            lg = lg.astype(cp.float32).astype(cp.float64)
        e = cp.exp(lg - lg.max(-1, keepdims=True))
        return cp.einsum("hgs,shd->hgd", f16(e), vh).reshape(self.hq, self.d) / e.sum(-1).reshape(self.hq, 1)

    def check(self, bits, cert, stage1="auto", num_splits=None, tier="B", max_pages=0):
        """Request 0 of rotation 0 against float64 attention over the reconstructed values: the
        relative error, and in ``self.tolerance`` what it is held to (1e-4; a form-(I) output twice
        the error of an fp16 attention on the same values, SPEC §9)."""
        plan = self.plans(bits, cert, stage1=stage1, num_splits=num_splits, tier=tier, max_pages=max_pages)[0]
        plan.launch()
        res = plan.result()
        o = self.reference_o()
        err = float(cp.linalg.norm(res.o[0] - o) / cp.linalg.norm(o))
        if cert:
            assert bool(cp.all(cp.isfinite(res.tv_bound[0]))), "non-finite certificate"
        self.tolerance = 1e-4  # (the fp32 paths' rule of thumb)
        if plan.kernel_name == "i8":  # form (I): the flash-attention rule, twice an fp16 attention's error
            self.tolerance = 2 * float(cp.linalg.norm(self.reference_o(fp16=True) - o) / cp.linalg.norm(o))
        return err


def fill_fp16_pool(pool, seed, chunk=1 << 16):
    """Every slot of layer 0 of an Fp16Pool written through its write path with standard-normal rows
    (K = V): the stored values, their witness (0: stored = exact) and the K rows' stored norms that
    the certified kernel reads are then the pool's own, as in use."""
    rng = cp.random.RandomState(seed)
    H, d = pool.num_kv_heads, pool.head_dim
    for s0 in range(0, pool.num_slots, chunk):
        n = min(chunk, pool.num_slots - s0)
        rows = rng.standard_normal((n, H, d), dtype=cp.float32).astype(cp.float16)
        pool.write(0, cp.arange(s0, s0 + n, dtype=cp.int64), rows, rows)


class Fp16Case(Int8Case):
    """Our fp16-store decode (Fp16Pool) on the same geometry: a black-box scheme's values with a
    ``FP16_BANDS``-band witness, metered by Tier A when certified (``plans(cert=True)``)."""

    def __init__(self, B, hq, hkv, ctx, page, rot):
        npg = ctx // page
        self.B, self.hq, self.hkv, self.ctx, self.rot, self.d = B, hq, hkv, ctx, rot, D
        self.pool = wc.Fp16Pool(1, hkv, D, B * npg * rot, page, witness_bands=FP16_BANDS, backend="cuda")
        fill_fp16_pool(self.pool, 1)
        self.tables, self.q = rotated_tables(B, hq, npg, page, rot)

    def bytes_moved(self, cert=False):
        """K and V rows, and when certified the K side's witness rows and stored norms."""
        return self.B * self.hkv * self.ctx * (2 * 2 * D + (2 * FP16_BANDS + 4 if cert else 0))

    def plans(self, bits=None, cert=False, stage1="auto", num_splits=None, **_):
        c = wc.CertConfig(tier="A", num_layers=32, steps=1024) if cert else None
        return [self.pool._dev.plan(self.q[r], 0, *self.tables[r], 1 / math.sqrt(D), c, num_splits,
                                    stage1=stage1) for r in range(self.rot)]


def pool_case(fp16, B, hq, hkv, ctx, l2, page=PAGE):
    """Our pool on a shape (Fp16Case or Int8Case), over enough rotated copies to exceed the L2 (512
    or 272 bytes per token and kv head)."""
    per_token = 512 if fp16 else 272
    return (Fp16Case if fp16 else Int8Case)(B, hq, hkv, ctx, page, rotations(B * hkv * ctx * per_token, l2))


def sdpa_time(B, hq, hkv, ctx, l2, reps):
    """torch SDPA fp16's µs per call on a shape (rotated buffers), checked against float64 first."""
    return sdpa_timed(B, hq, hkv, ctx, l2, reps)[0]


def sdpa_timed(B, hq, hkv, ctx, l2, reps):
    """As :func:`sdpa_time`, the :class:`Timed` (with its clocks)."""
    return time_torch(sdpa_checked(B, hq, hkv, ctx, l2), reps)


def sdpa_checked(B, hq, hkv, ctx, l2):
    """torch SDPA fp16's launches on a shape (rotated buffers), checked against float64: time them
    with :func:`time_torch` as often as needed."""
    fns, err, _ = sdpa_case(B, hq, hkv, ctx, rotations(B * hkv * ctx * 2 * 2 * D, l2))
    assert err < 2e-3, err
    return fns


def clock_note(timed):
    """`` [SM 1980 MHz]`` (the median SM clock while ``timed`` ran; its range when it moved, and
    any slowdown reason), or ``""`` without NVML."""
    c = timed.clocks
    if not c:
        return ""
    lo, mid, hi = c["sm_mhz_min"], c["sm_mhz_median"], c["sm_mhz_max"]
    rng = f" {lo}-{hi}" if hi - lo > 15 else ""
    why = f" {','.join(c['reasons'])}" if c["reasons"] else ""
    return f" [SM {mid:.0f} MHz{rng}{why}]"


def sdpa_case(B, hq, hkv, ctx, rot, d=D):
    import torch

    ks = [torch.randn(B, hkv, ctx, d, device="cuda", dtype=torch.float16) for _ in range(rot)]
    vs = [torch.randn(B, hkv, ctx, d, device="cuda", dtype=torch.float16) for _ in range(rot)]
    qs = [torch.randn(B, hq, 1, d, device="cuda", dtype=torch.float16) for _ in range(rot)]
    outs = [None] * rot
    F = torch.nn.functional

    def mk(r):
        def f():
            outs[r] = F.scaled_dot_product_attention(qs[r], ks[r], vs[r], enable_gqa=True)
        return f

    o = F.scaled_dot_product_attention(qs[0], ks[0], vs[0], enable_gqa=True)[:1]
    kk = ks[0][:1].double().repeat_interleave(hq // hkv, 1)
    vv = vs[0][:1].double().repeat_interleave(hq // hkv, 1)
    ref = torch.softmax(qs[0][:1].double() @ kk.transpose(-1, -2) / math.sqrt(d), -1) @ vv
    err = float((o.double() - ref).norm() / ref.norm())
    return [mk(r) for r in range(rot)], err, B * hkv * ctx * 2 * 2 * d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a subset of shapes (first look)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sweep", action="store_true", help="tokens-per-step (U) sweep of the INT8 kernel only")
    ap.add_argument("--splits", action="store_true",
                    help="split-count sweep of the certified INT8 decode at small batches (the default beside)")
    ap.add_argument("--configs", action="store_true",
                    help="the configuration axis (witness, outliers, exact tier, page contributions, 16/24-bit, "
                         "head dims, page 1, G) beside SDPA and FlashInfer; --shapes picks the shapes")
    ap.add_argument("--shapes", default=None,
                    help="B/Hq/Hkv/context,... : the full sweep's protocol on these shapes only (page size 16)")
    ap.add_argument("--bits", default=None, help="dither bits of the INT8 rows, e.g. 8 or 8,16 (default: 8,16,24)")
    ap.add_argument("--no-fp16", action="store_true", help="leave out the fp16-store rows")
    args = ap.parse_args()
    import torch

    if args.sweep:
        return sweep(args)
    if args.splits:
        return split_sweep(args)
    if args.configs:
        return config_sweep(args)

    batches, heads, ctxs = [1, 8, 32], [(32, 8), (28, 4)], [4096, 32768, 131072]
    bits_list = [8, 16, 24]
    if args.quick:
        batches, heads, ctxs, bits_list = [1, 8], [(32, 8), (28, 4)], [4096, 32768], [8]
    if args.bits:
        bits_list = [int(b) for b in args.bits.split(",")]
        if not set(bits_list) <= {8, 16, 24}:
            ap.error(f"--bits takes 8, 16 and 24, got {args.bits!r}")
    l2 = l2_bytes()
    rows, checks = [], []
    t_start = time.time()
    shapes = [(B, hq, hkv, ctx, PAGE) for B in batches for (hq, hkv) in heads for ctx in ctxs]
    if not args.quick:
        shapes.append((8, 32, 8, 32768, 1))
    if args.shapes:
        shapes = [(*sh, PAGE) for sh in parse_shapes(args.shapes)]
    date = datetime.date.today().isoformat()
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"decode{'-quick' if args.quick else ''}{'-shapes' if args.shapes else ''}"

    def save(complete):
        meta = {"date": date, "gpu": dev["name"].decode(), "sms": dev["multiProcessorCount"], "l2_bytes": l2,
                "cupy": cp.__version__, "torch": torch.__version__, "command": " ".join(["python3"] + sys.argv),
                "reps": args.reps, "quick": args.quick, "complete": complete, "wall_s": time.time() - t_start,
                "checks": checks}
        (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    for i, (B, hq, hkv, ctx, page) in enumerate(shapes):
        print(f"[decode] shape {i + 1}/{len(shapes)}: B={B} Hq/Hkv={hq}/{hkv} ctx={ctx} page={page}",
              file=sys.stderr, flush=True)
        sdpa_us = None
        if page == PAGE:
            rot = rotations(B * hkv * ctx * 2 * 2 * D, l2)
            fns, err, nbytes = sdpa_case(B, hq, hkv, ctx, rot)
            checks.append({"method": "torch_sdpa_fp16", "batch": B, "hq": hq, "hkv": hkv, "context": ctx,
                           "rel_err_vs_fp64": err})
            assert err < 2e-3, f"SDPA check failed: {err}"
            timed = time_torch(fns, args.reps)
            sdpa_us = timed[0]
            rows.append(dict(method="torch_sdpa_fp16", batch=B, hq=hq, hkv=hkv, context=ctx, page_size=None,
                             dither_bits=None, cert=None, us=sdpa_us, gbps=nbytes / sdpa_us / 1e3, ratio_sdpa=1.0,
                             rotations=rot, clocks=timed.clocks))
            del fns
            torch.cuda.empty_cache()
        else:
            sdpa_us = next(r["us"] for r in rows if r["method"] == "torch_sdpa_fp16" and r["batch"] == B
                           and r["hq"] == hq and r["context"] == ctx)
        rot = rotations(B * hkv * ctx * 272, l2)
        case = Int8Case(B, hq, hkv, ctx, page, rot)
        for bits in bits_list if page == PAGE else [8]:
            for cert in (True, False) if page == PAGE else (True,):
                # the library's choice, the staged tile where the choice is the form-(I) kernel, and
                # the general kernel, side by side
                auto = case.plans(bits, cert)[0].kernel_name
                variants = [("witcert_int8", "auto")] + ([("witcert_int8_v2", "v2")] if auto != "v2" else []) \
                    + [("witcert_int8_v1", "v1")]
                for method, stage1 in variants:
                    err = case.check(bits, cert, stage1)
                    checks.append({"method": method, "batch": B, "hq": hq, "hkv": hkv, "context": ctx,
                                   "page_size": page, "dither_bits": bits, "cert": cert, "rel_err_vs_fp64": err})
                    assert err < case.tolerance, f"INT8 decode check failed ({method}): {err} >= {case.tolerance}"
                    plans = case.plans(bits, cert, stage1=stage1)
                    timed = time_cupy([p.launch for p in plans], args.reps)
                    us = timed[0]
                    rows.append(dict(method=method, kernel=plans[0].kernel_name, batch=B, hq=hq, hkv=hkv,
                                     context=ctx, page_size=page, dither_bits=bits, cert=cert, us=us,
                                     gbps=case.bytes_moved() / us / 1e3, ratio_sdpa=us / sdpa_us, rotations=rot,
                                     num_splits=plans[0].ns, clocks=timed.clocks))
                    print(f"    int8 ({plans[0].kernel_name}) bits={bits} cert={cert}: {us:8.1f} us  "
                          f"({us / sdpa_us:.2f}x SDPA {sdpa_us:.1f} us){clock_note(timed)}", file=sys.stderr, flush=True)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
        if page == PAGE and not args.no_fp16:
            rot = rotations(B * hkv * ctx * 512, l2)
            case = Fp16Case(B, hq, hkv, ctx, page, rot)
            # the library's choice (decode_stage1_f16) certified by Tier A and without a
            # certificate, and the general kernel certified
            for method, stage1, cert in (("witcert_fp16", "auto", True), ("witcert_fp16", "auto", False),
                                         ("witcert_fp16_v1", "v1", True)):
                err = case.check(None, cert, stage1)
                checks.append({"method": method, "batch": B, "hq": hq, "hkv": hkv, "context": ctx, "cert": cert,
                               "rel_err_vs_fp64": err})
                assert err < 1e-4, f"fp16-store decode check failed ({method}): {err}"
                plans = case.plans(cert=cert, stage1=stage1)
                timed = time_cupy([p.launch for p in plans], args.reps)
                us = timed[0]
                rows.append(dict(method=method, kernel=plans[0].kernel_name, batch=B, hq=hq, hkv=hkv, context=ctx,
                                 page_size=page, dither_bits=None, cert=cert, us=us,
                                 gbps=case.bytes_moved(cert) / us / 1e3, ratio_sdpa=us / sdpa_us, rotations=rot,
                                 num_splits=plans[0].ns, clocks=timed.clocks))
                print(f"    fp16 store ({plans[0].kernel_name}) cert={cert}: {us:8.1f} us  ({us / sdpa_us:.2f}x SDPA)"
                      f"{clock_note(timed)}",
                      file=sys.stderr, flush=True)
            case = None
            cp.get_default_memory_pool().free_all_blocks()
        save(complete=i + 1 == len(shapes))  # after every shape: a run cut short keeps what it measured

    plot(rows, out / f"{stem}.png")
    print(f"{'method':<18}{'B':>4}{'hq/hkv':>8}{'ctx':>8}{'pg':>4}{'bits':>5}{'cert':>6}{'us':>10}{'GB/s':>8}{'/sdpa':>7}")
    for r in rows:
        print(f"{r['method']:<18}{r['batch']:>4}{str(r['hq']) + '/' + str(r['hkv']):>8}{r['context']:>8}"
              f"{str(r['page_size'] or '-'):>4}{str(r['dither_bits'] or '-'):>5}{str(r['cert']):>6}"
              f"{r['us']:>10.1f}{r['gbps']:>8.0f}{r['ratio_sdpa']:>7.2f}")


# the configuration axis (--configs): what each row of the product's configurations table runs.
# name -> (QuantConfig overrides, certificate tier or None, per-page contributions, exact fraction)
CONFIGS = {
    "tier_b_8": ({}, "B", False, 0.0),
    "uncertified_8": ({}, None, False, 0.0),
    "tier_b_16": ({"dither_bits": 16}, "B", False, 0.0),
    "tier_b_24": ({"dither_bits": 24}, "B", False, 0.0),
    "witness_ab_16": ({"witness_bands": 16}, "AB", False, 0.0),
    "outliers_2": ({"n_outlier_pairs": 2}, "B", False, 0.0),
    "exact_tier_1pct": ({}, "B", False, 0.01),
    "exact_tier_ab_16": ({"witness_bands": 16}, "AB", False, 0.01),  # the gate's pool under a Tier-AB certificate
    "page_contributions": ({}, "B", True, 0.0),
    # page contributions over an exact tier: what a repair round of gated_decode decodes for its
    # offending rows (a gated step that needs no repair launches exact_tier_1pct's decode alone)
    "gate_step": ({}, "B", True, 0.01),
}


def config_case(name, B, hq, hkv, ctx, l2, d=D, page=PAGE):
    """An :class:`Int8Case` in configuration ``name`` of :data:`CONFIGS`."""
    over, _, _, exact = CONFIGS[name]
    over = dict(over)
    kw = {"dither_bits": over.pop("dither_bits", 8), "seed": 1234, **over}
    n_pairs = kw.pop("n_outlier_pairs", 0)
    if n_pairs:  # the first n pairs of every kv head stored exactly
        kw["outlier_pairs"] = np.tile(np.arange(n_pairs), (1, hkv, 1))
    cfg = wc.QuantConfig(d, **kw)
    per_token = 2 * cfg.bytes_per_token_side()
    return Int8Case(B, hq, hkv, ctx, page, rotations(B * hkv * ctx * per_token, l2), d=d, cfg=cfg,
                    exact_frac=exact)


def flashinfer_fns(B, hq, hkv, ctx, l2, kv_dtype):
    """FlashInfer's tensor-core paged decode (page 16) on rotated caches of ``kv_dtype`` (fp16 or
    fp8 e4m3, no scale): its launches and its error against float64 attention over the stored
    values, or None when flashinfer is not importable."""
    try:
        import flashinfer
    except ImportError:
        return None
    import torch

    npg = ctx // PAGE
    bytes_one = B * hkv * ctx * 2 * D * torch.empty((), dtype=kv_dtype).element_size()
    rot = rotations(bytes_one, l2)
    ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
    indptr = torch.arange(0, B * npg + 1, npg, dtype=torch.int32, device="cuda")
    indices = torch.arange(B * npg, dtype=torch.int32, device="cuda")
    last = torch.full((B,), PAGE, dtype=torch.int32, device="cuda")
    w.plan(indptr, indices, last, hq, hkv, D, PAGE, pos_encoding_mode="NONE", q_data_type=torch.float16,
           kv_data_type=kv_dtype)
    caches = [(torch.randn(B * npg, PAGE, hkv, D, device="cuda", dtype=torch.float16).to(kv_dtype),
               torch.randn(B * npg, PAGE, hkv, D, device="cuda", dtype=torch.float16).to(kv_dtype))
              for _ in range(rot)]
    qs = [torch.randn(B, hq, D, device="cuda", dtype=torch.float16) for _ in range(rot)]
    outs = [None] * rot

    def mk(r):
        def f():
            outs[r] = w.run(qs[r], caches[r], k_scale=1.0, v_scale=1.0)
        return f

    o = w.run(qs[0], caches[0], k_scale=1.0, v_scale=1.0)[0].double()  # request 0: [Hq, D]
    k = caches[0][0][:npg].double().reshape(ctx, hkv, D).repeat_interleave(hq // hkv, 1)
    v = caches[0][1][:npg].double().reshape(ctx, hkv, D).repeat_interleave(hq // hkv, 1)
    p = torch.softmax(torch.einsum("hd,shd->hs", qs[0][0].double(), k) / math.sqrt(D), -1)
    ref = torch.einsum("hs,shd->hd", p, v)
    err = float((o - ref).norm() / ref.norm())
    return [mk(r) for r in range(rot)], err, bytes_one, rot


def config_sweep(args):
    """The configuration axis, side by side in one process per shape: torch SDPA fp16, FlashInfer's
    fp16 and fp8 tensor-core decode (when importable), and our decode in every configuration of
    :data:`CONFIGS`, plus the fp16 store; then head dims 64 and 256, page 1 and the GQA group sizes
    G in {1, 2, 4, 7, 8} (certified Tier B, 8-bit).  Writes ``decode-configs.json`` and its picture,
    ``decode-configs.png`` (``plot_configs.py``, which also redraws it from the JSON)."""
    import torch

    l2 = l2_bytes()
    rows = []
    shapes = parse_shapes(args.shapes) if args.shapes else ((8, 32, 8, 32768), (8, 28, 4, 32768), (1, 32, 8, 4096))

    def sdpa(B, hq, hkv, ctx, d=D):
        fns, err, nbytes = sdpa_case(B, hq, hkv, ctx, rotations(B * hkv * ctx * 2 * 2 * d, l2), d)
        assert err < 2e-3, f"SDPA check failed: {err}"
        t = time_torch(fns, args.reps)
        del fns
        torch.cuda.empty_cache()
        return t[0]

    def ours(label, case, sdpa_us, bits, tier, max_pages, **shape):
        err = case.check(bits, tier is not None, tier=tier or "B", max_pages=max_pages)
        assert err < getattr(case, "tolerance", 1e-4), f"decode check failed ({label}): {err}"
        plans = case.plans(bits, tier is not None, tier=tier or "B", max_pages=max_pages)
        t = time_cupy([p.launch for p in plans], args.reps)
        rows.append(dict(config=label, kernel=plans[0].kernel_name, **shape, us=t[0], ratio_sdpa=t[0] / sdpa_us,
                         gbps=(case.bytes_moved(tier is not None) if isinstance(case, Fp16Case) else case.bytes_moved())
                         / t[0] / 1e3, rel_err_vs_fp64=err, clocks=t.clocks))
        print(f"    {label:<22} ({plans[0].kernel_name}): {t[0]:8.1f} us  {t[0] / sdpa_us:5.2f}x SDPA"
              f"{clock_note(t)}", file=sys.stderr, flush=True)

    for i, (B, hq, hkv, ctx) in enumerate(shapes):
        print(f"[decode --configs] shape {i + 1}/{len(shapes)}: B={B} Hq/Hkv={hq}/{hkv} ctx={ctx}",
              file=sys.stderr, flush=True)
        shape = dict(batch=B, hq=hq, hkv=hkv, context=ctx, head_dim=D, page_size=PAGE)
        sdpa_us = sdpa(B, hq, hkv, ctx)
        rows.append(dict(config="torch_sdpa_fp16", **shape, us=sdpa_us, ratio_sdpa=1.0))
        for name, dt in (("flashinfer_fp16", torch.float16), ("flashinfer_fp8_e4m3", torch.float8_e4m3fn)):
            fi = flashinfer_fns(B, hq, hkv, ctx, l2, dt)
            if fi is None:
                continue
            fns, err, nbytes, _ = fi
            assert err < (2e-3 if dt == torch.float16 else 2e-2), f"{name} check failed: {err}"
            t = time_torch(fns, args.reps)
            rows.append(dict(config=name, **shape, us=t[0], ratio_sdpa=t[0] / sdpa_us, gbps=nbytes / t[0] / 1e3,
                             rel_err_vs_fp64=err))
            print(f"    {name:<22}: {t[0]:8.1f} us  {t[0] / sdpa_us:5.2f}x SDPA", file=sys.stderr, flush=True)
            del fns, fi
            torch.cuda.empty_cache()
        for name, (over, tier, contrib, _) in CONFIGS.items():
            case = config_case(name, B, hq, hkv, ctx, l2)
            ours(name, case, sdpa_us, case.cfg.dither_bits, tier, ctx // PAGE if contrib else 0, **shape)
            case = None
            cp.get_default_memory_pool().free_all_blocks()
        case = Fp16Case(B, hq, hkv, ctx, PAGE, rotations(B * hkv * ctx * (512 + 2 * FP16_BANDS), l2))
        ours("fp16_store", case, sdpa_us, None, None, 0, **shape)
        ours("fp16_store_tier_a", case, sdpa_us, None, "A", 0, **shape)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
        write_rows_json(args.out, "decode-configs", rows)

    # the other axes at the first shape's batch and context (certified Tier B, 8-bit)
    B, ctx = shapes[0][0], shapes[0][3]
    print(f"[decode --configs] head dims, page 1 and G at B={B} ctx={ctx}", file=sys.stderr, flush=True)
    for d in (64, 256):
        sdpa_us = sdpa(B, 32, 8, ctx, d)
        shape = dict(batch=B, hq=32, hkv=8, context=ctx, head_dim=d, page_size=PAGE)
        rows.append(dict(config="torch_sdpa_fp16", **shape, us=sdpa_us, ratio_sdpa=1.0))
        ours(f"tier_b_8_d{d}", config_case("tier_b_8", B, 32, 8, ctx, l2, d=d), sdpa_us, 8, "B", 0, **shape)
        cp.get_default_memory_pool().free_all_blocks()
    for hq, hkv in ((8, 8), (16, 8), (32, 8), (28, 4), (64, 8)):
        sdpa_us = sdpa(B, hq, hkv, ctx)
        shape = dict(batch=B, hq=hq, hkv=hkv, context=ctx, head_dim=D, page_size=PAGE)
        rows.append(dict(config="torch_sdpa_fp16", **shape, us=sdpa_us, ratio_sdpa=1.0))
        fi = flashinfer_fns(B, hq, hkv, ctx, l2, torch.float8_e4m3fn)
        if fi is not None:
            t = time_torch(fi[0], args.reps)
            rows.append(dict(config="flashinfer_fp8_e4m3", **shape, us=t[0], ratio_sdpa=t[0] / sdpa_us,
                             rel_err_vs_fp64=fi[1]))
            print(f"    G={hq // hkv} flashinfer_fp8_e4m3: {t[0]:8.1f} us  {t[0] / sdpa_us:5.2f}x SDPA",
                  file=sys.stderr, flush=True)
            del fi
            torch.cuda.empty_cache()
        ours(f"tier_b_8_G{hq // hkv}", config_case("tier_b_8", B, hq, hkv, ctx, l2), sdpa_us, 8, "B", 0, **shape)
        if (hq, hkv) == (32, 8):
            shape1 = dict(shape, page_size=1)
            ours("tier_b_8_page1", config_case("tier_b_8", B, hq, hkv, ctx, l2, page=1), sdpa_us, 8, "B", 0,
                 **shape1)
        cp.get_default_memory_pool().free_all_blocks()
    from plot_configs import plot_configs

    plot_configs(write_rows_json(args.out, "decode-configs", rows), Path(args.out) / "decode-configs.png")
    print(f"{'config':<24}{'B':>4}{'hq/hkv':>8}{'ctx':>8}{'d':>5}{'pg':>4}{'us':>10}{'/sdpa':>7}")
    for r in rows:
        print(f"{r['config']:<24}{r['batch']:>4}{str(r['hq']) + '/' + str(r['hkv']):>8}{r['context']:>8}"
              f"{r['head_dim']:>5}{r['page_size']:>4}{r['us']:>10.1f}{r['ratio_sdpa']:>7.2f}")


def write_rows_json(out_dir, stem, rows):
    """A side sweep's rows as ``<out_dir>/<stem>.json`` (each run replaces the last), each row naming
    the GPU it ran on (ratios to SDPA differ between cards whose bandwidth differs); returns the rows
    written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gpu = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"].decode()
    written = [dict(r, gpu=gpu) for r in rows]
    (out / f"{stem}.json").write_text(json.dumps(written, indent=1))
    return written


def sweep(args):
    """Side by side in one run: the INT8 kernel's tokens-per-step U at a few shapes, cert on/off."""
    l2 = l2_bytes()
    rows = []
    for B, hq, hkv, ctx in ((8, 32, 8, 32768), (8, 28, 4, 32768), (1, 32, 8, 32768), (32, 32, 8, 4096)):
        case = pool_case(False, B, hq, hkv, ctx, l2)
        for unroll in (1, 2, 4):
            for cert in (True, False):
                plans = case.plans(8, cert, unroll)
                us, _ = time_cupy([p.launch for p in plans], args.reps)
                rows.append(dict(method=f"witcert_int8_U{unroll}", batch=B, hq=hq, hkv=hkv, context=ctx, cert=cert,
                                 us=us, gbps=case.bytes_moved() / us / 1e3))
                print(f"sweep B={B} {hq}/{hkv} ctx={ctx} U={unroll} cert={cert}: {us:8.1f} us "
                      f"{rows[-1]['gbps']:6.0f} GB/s", flush=True)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
    write_rows_json(args.out, "decode-sweep", rows)


def split_sweep(args):
    """Side by side in one run: the certified INT8 decode (8-bit dither) at the library's default
    split count and at fixed counts, for the small-batch shapes where splits of one page leave each
    CTA half a 32-token tile (docs/performance.md); SDPA fp16 on the same shape for scale."""
    l2 = l2_bytes()
    rows = []
    for B, hq, hkv, ctx in ((1, 32, 8, 4096), (1, 28, 4, 4096), (1, 32, 8, 32768), (1, 28, 4, 32768),
                            (8, 32, 8, 4096), (8, 32, 8, 32768)):
        fns, _, _ = sdpa_case(B, hq, hkv, ctx, rotations(B * hkv * ctx * 2 * 2 * D, l2))
        sdpa_us, _ = time_torch(fns, args.reps)
        del fns
        case = pool_case(False, B, hq, hkv, ctx, l2)
        pages = ctx // PAGE
        for ns in [None] + [n for n in (2, 4, 8, 16, 32, 64, 128, 256) if n <= pages]:
            plans = case.plans(8, True, num_splits=ns)
            us, _ = time_cupy([p.launch for p in plans], args.reps)
            rows.append(dict(method="witcert_int8", batch=B, hq=hq, hkv=hkv, context=ctx, cert=True,
                             num_splits=plans[0].ns, default=ns is None, pages_per_split=-(-pages // plans[0].ns),
                             us=us, sdpa_us=sdpa_us, ratio_sdpa=us / sdpa_us))
            print(f"splits B={B} {hq}/{hkv} ctx={ctx} ns={plans[0].ns}{' (default)' if ns is None else ''}: "
                  f"{us:8.1f} us  ({us / sdpa_us:.2f}x SDPA {sdpa_us:.1f} us)", flush=True)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
    write_rows_json(args.out, "decode-splits", rows)


def plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    keys = sorted({(r["batch"], r["hq"], r["hkv"]) for r in rows})
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.6), squeeze=False)
    for ax, (B, hq, hkv) in zip(axes[0], keys):
        sel = [r for r in rows if (r["batch"], r["hq"], r["hkv"]) == (B, hq, hkv) and r["page_size"] in (None, PAGE)]
        methods = sorted({(r["method"], r["dither_bits"], r["cert"]) for r in sel}, key=str)
        for m in methods:
            pts = sorted((r["context"], r["us"]) for r in sel if (r["method"], r["dither_bits"], r["cert"]) == m)
            label = m[0] if m[1] is None else f"{m[0].replace('witcert_', '')} m={m[1]} cert={'on' if m[2] else 'off'}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"B={B} Hq/Hkv={hq}/{hkv}")
        ax.set_xlabel("context")
        ax.set_ylabel("µs")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    os.environ.setdefault("CUPY_CACHE_DIR", "/tmp/cupy_cache")
    main()
