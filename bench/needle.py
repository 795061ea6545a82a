"""Needle retrieval per scheme, raw and gated (CPU backend), with page-in traffic.

    PYTHONPATH=. python3 bench/needle.py [--instances 50] [--context 2048] [--out bench/results]
"""

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tqdm import tqdm  # noqa: E402

from witcert_cupy.needle import run_needle  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=50)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--tau", type=float, default=5.0)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    rows = []
    t0 = time.time()
    for name in ("fp8_e4m3", "rtn_int4", "kivi2", "rtn_int8"):
        with tqdm(total=args.instances, desc=f"[needle] {name}", unit="instance", file=sys.stderr) as bar:
            r = run_needle(name, instances=args.instances, context=args.context, tau=args.tau,
                           progress=lambda i, n: bar.update(i - bar.n))
        r.pop("records")
        rows.append(r)
        print(f"{name:10s} acc exact {r['acc_exact']:.2f} raw {r['acc_raw']:.2f} gated {r['acc_gated']:.2f} | "
              f"page-in {r['bytes_paged_in_mean'] / 1024:.0f} KiB of {r['bytes_whole_head'] / 1024:.0f} KiB "
              f"whole head | coverage raw {r['coverage_raw']:.2f} gated {r['coverage_gated']:.2f} | "
              f"tier full {r['tier_full_fraction']:.2f}")
    meta = {"date": datetime.date.today().isoformat(), "backend": "cpu", "command": " ".join(["python3"] + sys.argv),
            "wall_s": time.time() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "needle-cpu.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
