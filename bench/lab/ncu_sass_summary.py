"""Summarize an Nsight Compute source-page export (SASS with warp-stall samples) of the extend kernel
by role: setup, rows (consumers, after ``setmaxnreg.inc``) and producers (after ``setmaxnreg.dec``),
with each role's samples, executed warp-instructions per CTA-tile, stall mix, opcode mix and hottest
instructions.  The export comes from

    ncu --section SourceCounters --section WarpStateStats --import-source no --page source \\
        --print-source sass --csv -k regex:extend_tc_stage1 python3 bench/lab/profile_extend.py > x.csv
    python3 bench/lab/ncu_sass_summary.py x.csv [--tiles 16.9e3]

(``--tiles``: CTA-tiles of 64 tokens in the profiled launch; 512 new tokens over 8k at 32/8 make
16.9 k.)
"""

from __future__ import annotations

import argparse
import collections
import csv
import re


def load(path):
    rows = list(csv.reader(open(path)))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    return rows[hi], rows[hi + 1:]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--tiles", type=float, default=16.9e3)
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args(argv)
    head, data = load(args.csv)
    ix = {k: i for i, k in enumerate(head)}
    samples = [int(r[ix["Warp Stall Sampling (All Samples)"]] or 0) for r in data]
    execd = [int(r[ix["Instructions Executed"]] or 0) for r in data]
    sass = [r[ix["Source"]].strip() for r in data]
    stalls = [k for k in head if k.startswith("stall_") and "Not Issued" not in k]
    # roles: code after setmaxnreg.inc (rows) and after setmaxnreg.dec (producers) up to the next EXIT
    role, cur = [], "setup"
    for s in sass:
        if "USETMAXREG.TRY_ALLOC" in s:
            cur = "rows"
        elif "USETMAXREG.DEALLOC" in s:
            cur = "producers"
        role.append(cur)
        if re.search(r"\bEXIT\b", s) and cur == "producers":
            cur = "other"
    total = sum(samples)
    print(f"{args.csv}: {total} stall samples, {sum(execd) / 1e6:.1f} M warp-instructions")
    for name in ("setup", "rows", "producers"):
        idx = [i for i, r in enumerate(role) if r == name]
        s = sum(samples[i] for i in idx)
        st = collections.Counter()
        ops = collections.Counter()
        for i in idx:
            for k in stalls:
                st[k[6:]] += int(data[i][ix[k]] or 0)
            op = re.sub(r"^@!?U?P\w+\s+", "", sass[i]).split()
            ops[op[0] if op else "?"] += execd[i]
        print(f"\n== {name}: {s} samples ({100 * s / max(total, 1):.1f}%), "
              f"{sum(ops.values()) / args.tiles:.0f} warp-instructions per CTA-tile")
        print("  stalls: " + ", ".join(f"{k} {v}" for k, v in st.most_common(9)))
        print("  opcodes per CTA-tile: " + ", ".join(f"{k} {v / args.tiles:.0f}" for k, v in ops.most_common(16)))
        for i in sorted(sorted(idx, key=lambda j: -samples[j])[:args.top]):
            why = sorted(((int(data[i][ix[k]] or 0), k[6:]) for k in stalls), reverse=True)[:2]
            print(f"  [{i:5d}] {samples[i]:6d} samples  {sass[i][:58]:58s} {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
