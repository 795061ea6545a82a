"""Where a form-(I) decode step's CTAs spend their cycles: a copy of the library whose
decode_stage1_i8 records clock64 at fixed points of each CTA (thread 0), imported beside nothing
else, run on bench/decode.py's configurations; per phase the median cycles over CTAs, for tiles with
exact-tier tokens and without, and which CTAs end last.

    PYTHONPATH=. python3 bench/lab/timeline_i8.py gate_step:1/32/8/4096 [exact_tier_1pct:8/32/8/32768 ...]

Probes (``PROBES``, each inserted after one anchor line of cuda/decode_i8.cuh, checked to occur
exactly once): the kernel's entry (with %globaltimer), the end of the set-up, in the first tile its
start, after the Philox fields, after its K rows land, after the K products, after the exact K pass,
after the barrier, before V, after the V products, its end (bit 63: the tile had exact-tier tokens),
the second tile's end, the loop's end and the exit (with %globaltimer), and the set-up's steps
(``SETUP``: the page table, the query, its exponents and digits, the certificate's coefficients).  The probes' stores and the
clock reads cost a few dozen cycles each and the compiler may move work across them: compare phases,
not single cycles.  The instrumented copy lives in a temporary directory; the library is not touched.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = "decode_i8.cuh"
PHASES = ["start>philox", "philox>K landed", "K landed>K products", "K products>exact K", "exact K>barrier",
          "barrier>before V", "before V>V products", "V products>end"]

# (anchor line, probe) — the probe goes on the line after the anchor; slot k of the CTA's 32
_HELPERS = r'''
__device__ unsigned long long wc_tl[1 << 18];
WC_D unsigned long long wc_clk() { unsigned long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)); return t; }
WC_D unsigned long long wc_gt() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
#define WC_TL(k, v) do { if (threadIdx.x == 0) wc_tl[(((blockIdx.z * gridDim.y + blockIdx.y) * (u64)gridDim.x + blockIdx.x) << 5) + (k)] = (v); } while (0)
'''
PROBES = [
    ("    griddep_wait();  // before the first global access (griddep.cuh)", "    WC_TL(0, wc_gt()); WC_TL(1, wc_clk());"),
    ("    __syncthreads();  // the set-up's space is the dither tiles from here on", "    WC_TL(2, wc_clk());"),
    ("        pg = page_of(t0 + 2 * I8_TILE);", "        if (it == 0) WC_TL(3, wc_clk());"),
    ("            fields16(0, slot);\n            fields16(1, slot);\n        }", "        if (it == 0) WC_TL(4, wc_clk());"),
    ("        cp_async_wait_group<1>();\n        __syncwarp();", "        if (it == 0) WC_TL(5, wc_clk());"),
    ("            if (R == 8 || g < R) *reinterpret_cast<float2*>(&sh.xp[buf][w][g][8 * n + 2 * t]) = make_float2(inner[0], inner[1]);\n"
     "        }", "        if (it == 0) WC_TL(6, wc_clk());"),
    ("        prefetch_tier(ten, sln, w);\n        pe = page_entry(pg);  // (after the K products, under which the page id arrived)",
     None),  # (the exact K pass ends just above this line: the probe goes before it)
    ("        __syncthreads();  // every warp's partial logits", "        if (it == 0) WC_TL(8, wc_clk());"),
    ("        // 4. V over the warp's two groups: P' = p̃·s per token and group, its digits, o += P'·V̂",
     "        if (it == 0) WC_TL(9, wc_clk());"),
    ("        te = ten;\n        __syncwarp();  // every lane's reads of the warp's buffers of this tile are done",
     "        if (it == 0) WC_TL(11, wc_clk() | ((u64)(em != 0) << 63));\n"
     "        if (it == 1) WC_TL(12, wc_clk() | ((u64)(em != 0) << 63));"),
    ("    cp_async_wait_group<0>();\n", "    WC_TL(13, wc_clk());"),
    # the set-up's steps (warp 0, whose lane 0 records): the first tile's staging issued (the page
    # table read), the query in shared memory, the exponents, the digits, the evaluation term, Tier
    # B's coefficients, the per-head constants, the barrier after Tier A's band coefficients
    ("    if constexpr (NW == 1) first_tile();", "    WC_TL(16, wc_clk());"),
    ("    prefetch_tier(te, sl, w);  // (here, not beside the first tile's staging: the tier map's entry is back)",
     "    WC_TL(17, wc_clk());"),
    ("        const bool hfin = fq != 0;", "        WC_TL(18, wc_clk());"),
    ("                    sh.qd2[gr][g][wi & 3][wi >> 2] = wd[2];\n                }\n            }",
     "            WC_TL(19, wc_clk());"),
    ("            float b2 = 0.0f, b1 = 0.0f;", "            WC_TL(20, wc_clk());"),
    ("                group_coefficients(smx, q1, q2, en, log_term, beta_steps, b2, b1);\n            }",
     "            WC_TL(21, wc_clk());"),
    ("            su.flags[g] = (hfin ? 0 : 1) | (cinf ? 2 : 0);\n        }\n    }", "    WC_TL(22, wc_clk());"),
    ("    __syncthreads();\n    // head g's constants in registers (rows g >= G: zero digits, flagged as not finite, never stored)",
     "    WC_TL(23, wc_clk());"),
]
# the set-up's phases: from the kernel's entry (slot 1) through slots 16–23 to the set-up's end (2)
SETUP = [(1, 16, "entry>first tile staged"), (16, 17, "staged>query in smem"), (17, 18, "query>exponents"),
         (18, 19, "exponents>digits"), (19, 20, "digits>evaluation term"), (20, 21, "evaluation>Tier B coefficients"),
         (21, 22, "Tier B>head constants"), (22, 23, "head constants>barrier (Tier A bands)"),
         (23, 2, "barrier>set-up end")]
# before the exact V pass (after the V products): the last `if constexpr (EXACT) {` of the loop
_BEFORE_EXACT_V = "        if constexpr (EXACT) {\n            if (em) {  // (warp-uniform) the exact-tier tokens' values"
_KERNEL_END = "            store_split_stats(oi, dead, l, m * WC_LN2 + logf(l), lam, cm, gm, lse_part, lam_part, cmax_part, gam_part);\n        }\n    }\n}\n"


def instrument(src: str) -> str:
    """decode_i8.cuh's text with the probes in; raises ValueError naming an anchor that does not
    occur exactly once (the kernel changed: update PROBES)."""
    def once(text, anchor):
        n = text.count(anchor)
        if n != 1:
            raise ValueError(f"{SOURCE}: anchor {anchor.splitlines()[0].strip()!r} occurs {n} times, not once")
        return text.index(anchor)

    kernel = "template <int D, int G, int TIER, bool PAGES, bool EXACT, bool OUTL, int BITS>\n__global__"
    i = once(src, kernel)
    src = src[:i] + _HELPERS + src[i:]
    for anchor, probe in PROBES:
        i = once(src, anchor)
        if probe is None:  # the exact K pass's end: before the anchor
            src = src[:i] + "        if (it == 0) WC_TL(7, wc_clk());\n" + src[i:]
        else:
            j = i + len(anchor)
            src = src[:j] + "\n" + probe + src[j:]
    i = once(src, _BEFORE_EXACT_V)
    src = src[:i] + "        if (it == 0) WC_TL(10, wc_clk());\n" + src[i:]
    i = once(src, _KERNEL_END) + len(_KERNEL_END) - len("}\n")  # the kernel's closing brace
    return src[:i] + "    __syncthreads();\n    WC_TL(14, wc_clk()); WC_TL(15, wc_gt());\n" + src[i:]


def instrument_dir(cuda_dir: Path) -> None:
    """decode_i8.cuh in ``cuda_dir`` (a copy of the kernels) instrumented."""
    p = cuda_dir / SOURCE
    p.write_text(instrument(p.read_text()))


def summarize(a, ns_ctas):
    """Per-phase medians (cycles) of the CTAs' records ``a`` [n, 32] (uint64)."""
    import numpy as np

    valid = a[:, 11] != 0
    ex = ((a[:, 11] >> np.uint64(63)).astype(bool)) & valid
    c = (a & np.uint64((1 << 63) - 1)).astype(np.int64)
    d = np.diff(c[:, 3:12], axis=1)
    g0, g1 = a[:, 0].astype(np.int64), a[:, 15].astype(np.int64)
    has_ex = ex.copy()
    out = {"ctas": ns_ctas, "ctas_with_exact_first_tile": int(ex.sum()),
           "setup": int(np.median(c[:, 2] - c[:, 1])),
           "setup_phases": {nm: int(np.median(c[:, j] - c[:, i])) for i, j, nm in SETUP}, "epilogue": int(np.median(c[:, 14] - c[:, 13])),
           "cta_total": int(np.median(c[:, 14] - c[:, 1])), "cta_total_max": int((c[:, 14] - c[:, 1]).max()),
           "last_end_us": {"exact first tile": round(float((g1[has_ex] - g0.min()).max()) / 1e3, 2) if has_ex.any() else None,
                           "others": round(float((g1[~has_ex] - g0.min()).max()) / 1e3, 2)}}
    for lab, sel in (("first tile, exact", ex), ("first tile, plain", valid & ~ex)):
        out[lab] = {nm: int(np.median(d[sel, k])) for k, nm in enumerate(PHASES)} if sel.any() else None
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="+", help="CONFIG:B/Hq/Hkv/context, CONFIG one of bench/decode.py's CONFIGS")
    ap.add_argument("--json", help="also write the summaries here")
    args = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT / "bench" / "lab"), str(ROOT / "bench"), str(ROOT)]
    import decode as bd

    from ab_trees import parse_case  # (bench/lab: one parser of a case for the lab tools)

    parsed = []
    for c in args.cases:
        try:
            name, dims, stage1, clear, splits = parse_case(c, bd.CONFIGS)
        except ValueError as e:
            ap.error(f"cases: {e}")
        if stage1 != "auto" or clear or splits:
            ap.error(f"cases: {c!r}: the timeline runs the form-(I) kernel on the pool as built (no STAGE1, no clear, "
                     "no ns=N)")
        parsed.append((name, dims))
    import cupy as cp

    import cert_cost

    pkg = cert_cost.import_baseline(ROOT, "witcert_timeline", instrument_dir)
    bd.wc = pkg
    l2 = bd.l2_bytes()
    rows = []
    for name, (B, hq, hkv, ctx) in parsed:
        _, tier, contrib, _ = bd.CONFIGS[name]
        case = bd.config_case(name, B, hq, hkv, ctx, l2)
        plan = case.plans(8, tier is not None, stage1="i8", tier=tier or "B",
                          max_pages=ctx // bd.PAGE if contrib else 0)[0]
        d = int(plan.stage1_template.split("<")[1].split(",")[0])
        mod = pkg._cuda.build._module(f"decode_i8_d{d}.cu", (plan.stage1_template,), (), None)
        buf = cp.ndarray((1 << 18,), cp.uint64, mod.get_global("wc_tl"))
        n = plan.ns * hkv * B
        if n * 32 > buf.size:
            ap.error(f"cases: {name} at {B}/{hq}/{hkv}/{ctx} has {n} CTAs, more than the probes' {buf.size // 32}")
        for _ in range(3):  # the last of three launches (the first ones warm the caches and the clocks)
            buf[...] = 0
            plan.launch()
            cp.cuda.Device().synchronize()
        row = {"case": f"{name}:{B}/{hq}/{hkv}/{ctx}", "kernel": plan.stage1_template, "splits": plan.ns,
               **summarize(buf[: n * 32].get().reshape(n, 32), n)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        case = plan = None
        cp.get_default_memory_pool().free_all_blocks()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
