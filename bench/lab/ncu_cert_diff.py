"""What the certificate adds to a decode stage-1 kernel, by SASS opcode: an Nsight Compute source-page
export holding two launches of the same kernel (certificate on, then off; bench/profile_decode.py
launches them in that order) gives executed warp-instructions and stall samples per opcode for each,
their difference, and the instructions whose counts differ between the two, per tile.

    ncu --clock-control none --set full -k regex:decode_stage1_v2 -c 2 -o split \\
        python3 bench/lab/profile_decode.py --shape 28/4
    ncu --import split.ncu-rep --page source --csv --print-source sass > split.csv
    python3 bench/lab/ncu_cert_diff.py split.csv --tiles 32768

(``--tiles``: (request, kv head) pairs × context / 32, the CTA-tiles of the launch: 8·4·32768/32 at
B = 8, 28/4, 32k.)
"""

from __future__ import annotations

import argparse
import collections
import csv


def launches(path):
    """The export's launches, each a list of SASS rows (dicts keyed by the export's header)."""
    out, head = [], None
    for r in csv.reader(open(path)):
        if not r:
            continue
        if r[0] == "Kernel Name":
            out.append([])
        elif r[0] == "Address":
            head = r
        elif out and head and len(r) == len(head):
            out[-1].append(dict(zip(head, r)))
    return out


def n(row):
    """Warp-level instructions executed at the row's SASS address."""
    return int(row["Instructions Executed"] or 0)


def smp(row):
    """Warp-stall samples at the row's SASS address."""
    return int(row["Warp Stall Sampling (All Samples)"] or 0)


def opcode(src):
    words = src.split()
    op = words[1] if words[0].startswith("@") else words[0]
    return op.split(".")[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--tiles", type=float, required=True)
    ap.add_argument("--top", type=int, default=24)
    args = ap.parse_args(argv)
    on, off = launches(args.csv)[:2]
    if len(on) != len(off) or any(a["Source"] != b["Source"] for a, b in zip(on, off)):
        raise SystemExit("the two launches are not the same kernel")
    by = {k: (collections.Counter(), collections.Counter()) for k in ("on", "off")}
    for k, rows in (("on", on), ("off", off)):
        for r in rows:
            by[k][0][opcode(r["Source"])] += n(r)
            by[k][1][opcode(r["Source"])] += smp(r)
    ton, toff = sum(by["on"][0].values()), sum(by["off"][0].values())
    print(f"warp-instructions: certified {ton:,}, uncertified {toff:,}, difference {ton - toff:,} "
          f"({100 * (ton - toff) / toff:.2f}% of the uncertified; {(ton - toff) / args.tiles:.1f} per tile)")
    print(f"stall samples: certified {sum(by['on'][1].values()):,}, uncertified {sum(by['off'][1].values()):,}")
    print(f"\n{'opcode':10s} {'per tile on':>12s} {'off':>10s} {'added':>8s} {'samples on':>11s} {'off':>8s}")
    ops = sorted(set(by["on"][0]) | set(by["off"][0]), key=lambda o: (-(by["on"][0][o] - by["off"][0][o]), o))
    for o in ops[:args.top]:
        a, b = by["on"][0][o], by["off"][0][o]
        print(f"{o:10s} {a / args.tiles:12.1f} {b / args.tiles:10.1f} {(a - b) / args.tiles:8.1f} "
              f"{by['on'][1][o]:11d} {by['off'][1][o]:8d}")
    print("\ninstructions whose counts differ (per tile with the certificate, without; stall samples):")
    for i, (a, b) in enumerate(zip(on, off)):
        if n(a) != n(b) and n(a) >= 0.5 * args.tiles:
            print(f"{i:6d} {n(a) / args.tiles:6.2f} {n(b) / args.tiles:6.2f} {smp(a):5d}  {a['Source'].strip()}")


if __name__ == "__main__":
    main()
