"""Kernel sources and their compilation: where the ``.cu`` files are (the wheel's copy or the
checkout's), the contract constants as ``-D`` options, ``#include`` inlining, the cache key over
every shipped source, and :func:`kernel` (CuPy ``RawModule``).

Loading rules (each learned the hard way):

- The sources are found inside the wheel (``witcert_cupy/cuda``) or beside the package in a source
  checkout (``cuda/``).  ``#include "x.cuh"`` lines are inlined here, so the code string CuPy hashes
  for its kernel cache holds every header; a hash of all sources also goes into the options.
- One options tuple (:data:`OPTIONS`): the contract constants as ``-D`` definitions generated from
  :mod:`witcert_cupy._contract`.  CuPy adds ``-arch`` and ``-ftz=true`` itself; the kernels use
  ``__fadd_rn``-style intrinsics wherever bits must match the CPU, so neither contraction nor
  flush-to-zero changes a stored bit.
- Every scalar goes to a launch as an explicit NumPy type.
- A compile error is re-raised naming the file and the kernel.
- Nothing here synchronises the host inside ``decode`` (no ``.get()``, no ``int()`` of a device value).
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

from .. import _contract as C

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def kernel_dir() -> Path:
    """Directory holding the ``.cu``/``.cuh`` files: the wheel's copy, else the checkout's."""
    here = Path(__file__).resolve().parents[1]  # the package (this file is in its _cuda/)
    for cand in (here / "cuda", here.parent / "cuda"):
        if (cand / "decode.cu").is_file():
            return cand
    raise FileNotFoundError(f"CUDA sources not found next to {here} (looked in cuda/ and ../cuda/)")


def defines() -> list[str]:
    """The contract constants as ``-D`` options: the single source of truth is ``_contract.py``."""
    f = lambda v: repr(float(v)) + "f"  # noqa: E731 - exact: every constant is a dyadic rational
    return [
        f"-DWC_SCALE_DIVISOR={f(C.SCALE_DIVISOR)}",
        f"-DWC_WITNESS_MARGIN={f(C.WITNESS_MARGIN)}",
        f"-DWC_C_EVAL_SLACK={f(C.C_EVAL_SLACK)}",
        f"-DWC_FP16_INF={C.FP16_POS_INF_BITS}u",
        f"-DWC_PHILOX_M0={C.PHILOX_M0}u",
        f"-DWC_PHILOX_M1={C.PHILOX_M1}u",
        f"-DWC_PHILOX_W0={C.PHILOX_W0}u",
        f"-DWC_PHILOX_W1={C.PHILOX_W1}u",
        f"-DWC_SIDE_SHIFT={C.SIDE_SHIFT}",
        f"-DWC_LAYER_SHIFT={C.LAYER_SHIFT}",
        f"-DWC_LOG_A_RESOLUTION_ULPS={float(C.LOG_A_RESOLUTION_ULPS)!r}",
        f"-DWC_TC_QUERY_EXPONENT={C.TC_QUERY_EXPONENT}",
        f"-DWC_FORM_I_QUERY_BITS={C.FORM_I_QUERY_BITS}",
        f"-DWC_FORM_I_MAX_GROUP_SHIFT={C.FORM_I_MAX_GROUP_SHIFT}",
        f"-DWC_FORM_I_RESIDUAL_BOUND={f(C.FORM_I_RESIDUAL_BOUND)}",
        f"-DWC_FORM_I_DROPPED_BOUND={f(C.FORM_I_DROPPED_BOUND)}",
        f"-DWC_FORM_I_RESIDUAL_BOUND_16={f(C.FORM_I_RESIDUAL_BOUND_16)}",
        f"-DWC_FORM_I_DROPPED_BOUND_16={f(C.FORM_I_DROPPED_BOUND_16)}",
        f"-DWC_TC_CODE_BOUND={f(C.TC_CODE_BOUND)}",
        f"-DWC_TC_XI_BOUND={f(C.TC_XI_BOUND)}",
        f"-DWC_COEF_FLOOR_1={f(C.COEF_FLOOR_1)}",
        f"-DWC_COEF_FLOOR_2={f(C.COEF_FLOOR_2)}",
    ]


def inline_source(name: str, _seen=None, root: str | None = None) -> str:
    """``name`` with its quoted includes inlined once each (``#pragma once`` semantics).  ``root``
    (a directory) is searched before the library's kernels: the benchmarks' lab kernels live there
    and include the library's headers."""
    seen = set() if _seen is None else _seen
    dirs = ([Path(root)] if root else []) + [kernel_dir()]
    path = next((d / name for d in dirs if (d / name).is_file()), dirs[-1] / name)
    text = path.read_text()

    def sub(m):
        inc = m.group(1)
        if inc in seen:
            return ""
        seen.add(inc)
        return f"// ---- {inc}\n" + inline_source(inc, seen, root).replace("#pragma once", "") + f"\n// ---- end {inc}\n"

    return _INCLUDE.sub(sub, text)


@functools.lru_cache(maxsize=None)
def sources_hash() -> str:
    h = hashlib.sha256()
    for p in sorted(kernel_dir().glob("*.cu*")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def options() -> tuple:
    return ("-std=c++17", *defines(), f"-DWITCERT_SRC_HASH=0x{sources_hash()}ull")


@functools.lru_cache(maxsize=None)
def _module(filename: str, name_expressions: tuple = (), extra_options: tuple = (), root: str | None = None):
    import cupy as cp

    try:
        mod = cp.RawModule(code=inline_source(filename, root=root), options=options() + tuple(extra_options),
                           name_expressions=name_expressions or None)
        mod.compile()
    except cp.cuda.compiler.CompileException as e:
        what = ", ".join(name_expressions) if name_expressions else "its extern \"C\" kernels"
        raise RuntimeError(f"compiling {filename} ({what}) failed:\n{e}") from None
    return mod


def kernel(filename: str, name: str, template: str | None = None, extra_options: tuple = (), root=None):
    """The function ``name`` (or the instantiation ``template``) of ``cuda/filename``, compiled with the
    library's options plus ``extra_options`` (e.g. ``-arch=sm_90a``: NVRTC takes it beside CuPy's own
    ``-arch=sm_90``, and the architecture-specific target wins).  ``root``: a directory holding
    ``filename`` outside the library (the benchmarks' lab kernels, ``bench/lab/cuda``)."""
    root = None if root is None else str(root)
    if template is None:
        return _module(filename, (), tuple(extra_options), root).get_function(name)
    return _module(filename, (template,), tuple(extra_options), root).get_function(template)
