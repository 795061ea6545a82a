"""The configuration table of ``bench/decode.py --configs`` as a picture: for each of its shapes,
every configuration's time over torch SDPA fp16's time in the same process (lower is faster), with
SDPA's 1.0 marked; beside it the other axes (head dims, G, page size) at the first shape's batch and
context.  It reads the JSON the benchmark wrote, so it renders without a GPU:

    python3 bench/plot_configs.py [bench/results/decode-configs.json] [--out PNG] [--gpu NAME]

(default PNG: the JSON's path with ``.png``).  ``bench/decode.py --configs`` calls
:func:`plot_configs` after writing its JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SDPA = "torch_sdpa_fp16"
_SHAPE = ("batch", "hq", "hkv", "context", "head_dim", "page_size")
_AXES_PREFIX = "tier_b_8_"  # the other axes' rows: tier_b_8_d64, tier_b_8_G4, tier_b_8_page1, ...


def config_table(rows):
    """The configuration table held in ``rows`` (the JSON's list of dicts).

    Returns
    -------
    shapes : list of tuple
        ``(batch, hq, hkv, context)`` of each shape that carries every configuration, in the order
        the benchmark ran them.
    table : dict
        ``config -> [ratio to SDPA per shape, or None]`` for every configuration measured at those
        shapes (SDPA's own rows left out), in the order of their first row.
    axes : list of (str, float)
        ``(config, ratio)`` of the other axes' rows.

    Raises
    ------
    ValueError
        A row without ``config``, ``ratio_sdpa`` or a shape field, or no shape with a Tier-B row.
    """
    for i, r in enumerate(rows):
        missing = [k for k in ("config", "ratio_sdpa", *_SHAPE) if k not in r]
        if missing:
            raise ValueError(f"rows[{i}] has no {', '.join(missing)}: not a bench/decode.py --configs row")
    main = [r for r in rows if not r["config"].startswith(_AXES_PREFIX)]
    shapes = []
    for r in main:
        key = (r["batch"], r["hq"], r["hkv"], r["context"])
        if r["config"] == "tier_b_8" and key not in shapes:
            shapes.append(key)
    if not shapes:
        raise ValueError("rows hold no 'tier_b_8' row: not a bench/decode.py --configs run")
    table = {}
    for r in main:
        key = (r["batch"], r["hq"], r["hkv"], r["context"])
        if r["config"] == SDPA or key not in shapes:
            continue
        col = table.setdefault(r["config"], [None] * len(shapes))
        if col[shapes.index(key)] is None:  # (the axes' section repeats some at a main shape: the first)
            col[shapes.index(key)] = float(r["ratio_sdpa"])
    axes = [(r["config"][len(_AXES_PREFIX):], float(r["ratio_sdpa"])) for r in rows
            if r["config"].startswith(_AXES_PREFIX)]
    return shapes, table, axes


def plot_configs(rows, path, gpu=None):
    """Draw :func:`config_table` of ``rows`` into the PNG ``path``, titled with the GPU the rows name
    (``gpu``: the card, for rows that do not name it); False (nothing written) when matplotlib is
    not installed."""
    shapes, table, axes = config_table(rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = list(table)
    gpus = sorted({r.get("gpu", gpu) for r in rows} - {None})
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 0.42 * len(names) + 2.2),
                                  gridspec_kw={"width_ratios": [3, 1]})
    h = 0.8 / len(shapes)
    for j, (B, hq, hkv, ctx) in enumerate(shapes):
        ys = [i + (j - (len(shapes) - 1) / 2) * h for i in range(len(names))]
        vals = [table[n][j] if table[n][j] is not None else 0.0 for n in names]
        ax.barh(ys, vals, height=h, label=f"B={B}, {hq}/{hkv}, {ctx // 1024}k")
    ax.axvline(1.0, color="k", lw=1)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time / torch SDPA fp16 (same process)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"decode configurations on {', '.join(gpus) if gpus else 'a GPU the rows do not name'}",
                 fontsize=10)
    if axes:
        ax2.barh(range(len(axes)), [a[1] for a in axes], color="tab:gray")
        ax2.set_yticks(range(len(axes)), [a[0] for a in axes], fontsize=8)
        ax2.invert_yaxis()
        ax2.axvline(1.0, color="k", lw=1)
        ax2.set_title(f"Tier B 8-bit, B={shapes[0][0]}, {shapes[0][3] // 1024}k", fontsize=10)
        ax2.set_xlabel("time / SDPA")
    else:
        ax2.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="?", default=str(Path(__file__).resolve().parent / "results" / "decode-configs.json"))
    ap.add_argument("--out", default=None, help="the PNG to write (default: the JSON's path with .png)")
    ap.add_argument("--gpu", default=None, help="the card, for rows that do not name it (runs before they did)")
    args = ap.parse_args(argv)
    src = Path(args.json)
    if not src.is_file():
        ap.error(f"json: no file {src}")
    out = Path(args.out) if args.out else src.with_suffix(".png")
    try:
        ok = plot_configs(json.loads(src.read_text()), out, gpu=args.gpu)
    except ValueError as e:
        ap.error(f"json: {e}")
    if not ok:
        print("matplotlib is not installed (pip install 'witcert_cupy[plot]'): nothing written", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
