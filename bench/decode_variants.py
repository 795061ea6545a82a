"""Compile-time variants of the staged-tile decode (cuda/decode_v2.cu) side by side in one process:
each variant is the shipped source built with extra ``-D`` options (e.g. ``V2_KUNROLL=2``), checked
against float64 attention, then timed on the same pools with SDPA fp16 beside it.

    PYTHONPATH=. python3 bench/decode_variants.py "V2_KUNROLL=1" "V2_KUNROLL=2,V2_VUNROLL=4" ...

Writes ``decode-variants-<date>.json`` (rows: variant, batch, hq, hkv, context, us, ratio_sdpa).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import cupy as cp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from witcert_cupy import _cuda  # noqa: E402

_spec = importlib.util.spec_from_file_location("bench_decode", Path(__file__).resolve().parent / "decode.py")
bd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bd)

_BASE_OPTIONS = _cuda.options()


def use_variant(defines):
    """Rebuild the kernels with ``defines`` (a list of ``NAME=VALUE``) added to the options."""
    extra = tuple(f"-D{d}" for d in defines)
    _cuda.options = lambda: _BASE_OPTIONS + extra
    _cuda._module.cache_clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+", help="comma-separated NAME=VALUE defines per variant ('' = shipped)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    l2 = bd.l2_bytes()
    rows = []
    for B, hq, hkv, ctx in ((8, 32, 8, 32768), (8, 28, 4, 32768), (1, 32, 8, 32768)):
        fns, err, _ = bd.sdpa_case(B, hq, hkv, ctx, bd.rotations(B * hkv * ctx * 2 * 2 * bd.D, l2))
        assert err < 2e-3, err
        sdpa_us, _ = bd.time_torch(fns, args.reps)
        del fns
        case = bd.Int8Case(B, hq, hkv, ctx, bd.PAGE, bd.rotations(B * hkv * ctx * 272, l2))
        for v in args.variants:
            use_variant([d for d in v.split(",") if d])
            err = case.check(8, True, "v2")
            assert err < 1e-4, (v, err)
            plans = case.plans(8, True, stage1="v2")
            us, _ = bd.time_cupy([p.launch for p in plans], args.reps)
            rows.append(dict(variant=v or "shipped", batch=B, hq=hq, hkv=hkv, context=ctx, cert=True, us=us,
                             sdpa_us=sdpa_us, ratio_sdpa=us / sdpa_us, rel_err_vs_fp64=err))
            print(f"variant [{v or 'shipped'}] B={B} {hq}/{hkv} ctx={ctx}: {us:8.1f} us ({us / sdpa_us:.2f}x SDPA "
                  f"{sdpa_us:.1f} us)", flush=True)
        case = None
        cp.get_default_memory_pool().free_all_blocks()
    use_variant([])
    bd.write_rows_json(args.out, "decode-variants", rows)


if __name__ == "__main__":
    main()
