"""The GPU backend: loads ``cuda/*.cu`` with CuPy ``RawModule`` and launches the kernels.

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
import math
import re
from pathlib import Path

import numpy as np

from . import _contract as C
from . import certificate as cert_mod
from ._launch import Launcher, pdl_enabled, pdl_supported
from .arrays import check_float, check_int, check_shape, to_cupy

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def kernel_dir() -> Path:
    """Directory holding the ``.cu``/``.cuh`` files: the wheel's copy, else the checkout's."""
    here = Path(__file__).resolve().parent
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
        f"-DWC_TC_CODE_BOUND={f(C.TC_CODE_BOUND)}",
        f"-DWC_TC_XI_BOUND={f(C.TC_XI_BOUND)}",
        f"-DWC_COEF_FLOOR_1={f(C.COEF_FLOOR_1)}",
        f"-DWC_COEF_FLOOR_2={f(C.COEF_FLOOR_2)}",
    ]


def inline_source(name: str, _seen=None) -> str:
    """``name`` with its quoted includes inlined once each (``#pragma once`` semantics)."""
    seen = set() if _seen is None else _seen
    text = (kernel_dir() / name).read_text()

    def sub(m):
        inc = m.group(1)
        if inc in seen:
            return ""
        seen.add(inc)
        return f"// ---- {inc}\n" + inline_source(inc, seen).replace("#pragma once", "") + f"\n// ---- end {inc}\n"

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
def _module(filename: str, name_expressions: tuple = (), extra_options: tuple = ()):
    import cupy as cp

    try:
        mod = cp.RawModule(code=inline_source(filename), options=options() + tuple(extra_options),
                           name_expressions=name_expressions or None)
        mod.compile()
    except cp.cuda.compiler.CompileException as e:
        what = ", ".join(name_expressions) if name_expressions else "its extern \"C\" kernels"
        raise RuntimeError(f"compiling cuda/{filename} ({what}) failed:\n{e}") from None
    return mod


def kernel(filename: str, name: str, template: str | None = None, extra_options: tuple = ()):
    """The function ``name`` (or the instantiation ``template``) of ``cuda/filename``, compiled with the
    library's options plus ``extra_options`` (e.g. ``-arch=sm_90a``: NVRTC takes it beside CuPy's own
    ``-arch=sm_90``, and the architecture-specific target wins)."""
    if template is None:
        return _module(filename, (), tuple(extra_options)).get_function(name)
    return _module(filename, (template,), tuple(extra_options)).get_function(template)


# decode_stage1_v2's default split count where the 64-split rule leaves most of one wave of resident
# CTAs empty (small batch, few kv heads; bench/NOTES.md, session 14): at most V2_MAX_SPLITS
# (decode_merge's shared-memory prefetch holds 128), within one wave; up to V2_GRID_CAP CTAs per SM,
# in steps of 64 splits, for splits of at least V2_MIN_TOKENS tokens; the whole wave for splits of at
# least V2_WAVE_MIN_TOKENS.  Measured at batch 1 (runs 98–102): 28/4, 128 splits (4 CTAs per SM)
# against 64 took 40.9 against 46.5 µs at 16k, 61.7 against 77.1 at 32k, 186 against 260 at 128k; 16/2
# at 32k 51.4 against 76.7; at 8k the two came within 2% (96 and 112 splits: 8–14% slower).  32/8,
# whose 64 splits already make 4 CTAs per SM: the whole wave (96–99 splits) against 64 took 51.0
# against 46.8 µs at 16k, 77.6 against 78.8 at 32k, 132.6 against 142.3 at 64k, 251.5 against 271.5 at
# 128k (batch 2, 28/4, 128k: 323.8 against 346.7); two waves (112–128 splits) were 10–35% slower, 66
# splits 1% slower than 64.  Splits of one 32-token tile count since session 17 (V2_MIN_TOKENS was
# 128): with the step's set-up, epilogue and merge shortened, 128 splits against 64 took (run 127)
# 16.3 against 17.6 µs at 28/4 4k, 21.8 against 24.9 at 8k, 15.3 against 17.8 at 16/2 4k, 19.5
# against 25.6 at 16/2 8k; batch 2 (512 CTAs at 64 splits) keeps 64, where 128 took 26.8 against 20.8.
V2_MAX_SPLITS = 128
V2_GRID_CAP = 4
V2_MIN_TOKENS = 32
V2_WAVE_MIN_TOKENS = 512

# tokens per tile of decode_stage1_v2: cuda/decode_v2.cu's V2_TILE (tests/test_cuda_compile.py checks
# the two agree)
V2_TILE = 32
# threads per CTA of decode_stage1_v2: cuda/decode_v2.cu's V2_THREADS (tests/test_cuda_compile.py
# checks the two agree)
V2_THREADS = 64
# the scale group of decode_stage1_v2's PLAIN instantiation: 2^V2_PLAIN_GS_SHIFT of cuda/decode_v2.cu
# (the same test checks it)
V2_PLAIN_GROUP_SIZE = 32
# PLAIN's warps split each row's channels (SPLIT, cuda/decode_v2.cu) from this many (request, kv head)
# pairs per step, and the sides below it.  Measured (run 163, same process as the sides): at B = 8
# and 32 (32 to 256 pairs) the split was 5.3–7.5% faster certified and 7.8–11.8% uncertified; at
# B = 1 (4 and 8 pairs) it ranged from 2.6% faster (28/4, 4k) to 3.7% slower (32/8, 32k).
V2_SPLIT_MIN_PAIRS = 16
# Below that, the split also serves a step of at least V2_SPLIT_MIN_G query heads per kv head whose
# splits hold one 32-token tile each (the mean request's tokens from the page table's shape).  There
# the K warp's phase A, with its G dot products, is the sides' chain.  Measured at batch 1 and 4k
# tokens, one process, split against sides (runs 193–194): G = 5 13.6 vs 13.8 µs, 6 14.0 vs 14.3,
# 7 14.8 vs 15.1, 8 15.3 vs 15.7, 6 at 48/8 18.2 vs 18.3; batch 2, 28/4, 4k 19.2 vs 19.5; but G = 3
# 12.5 vs 12.3 and G = 4 16.4 vs 16.1.  With more tiles per split the split lost at G = 6 and 8
# (32k: 45.3 vs 44.8, 53.2 vs 52.2) though not at G = 7 (0.2–1.5% faster from 8k to 32k, and at
# batch 2, 4k), which the rule leaves on the sides.  The rule against the sides in one process
# (run 196): 28/4 14.8 vs 15.0 µs, 32/4 15.2 vs 15.6, 24/4 13.9 vs 14.3; the same bits elsewhere.
V2_SPLIT_MIN_G = 5


# warps per split of decode_stage1_f16<G, W, CERT> (cuda/decode_f16.cu): one.  Two warps splitting
# each row's channels measured 0–4% slower (run 54, bench/NOTES.md session 8); ``bench/
# decode_variants.py --fp16 F16_WARPS=2`` compares them, and the GPU tests run both.
F16_WARPS = 1

# one-warp pipelines (splits) per CTA of decode_stage1_f16<G, 1, ·>: F16_PIPES of
# cuda/decode_f16_geometry.cuh (tests/test_cuda_compile.py checks the two agree;
# bench/decode_variants.py varies both)
F16_PIPES = 4


def f16_pipes(warps=None):
    """Splits per CTA of decode_stage1_f16 with ``warps`` warps per split (F16_WARPS by default)."""
    return F16_PIPES if (F16_WARPS if warps is None else warps) == 1 else 1


def f16_smem_bytes(G, num_bands, tier_a, warps=None):
    """decode_stage1_f16's dynamic shared memory in bytes (cuda/decode_f16.cu, ``f16_smem_bytes``):
    the query, each warp's K and V tiles and probabilities, the two-warp kernel's partial dot
    products, and with a Tier-A certificate each pipeline's 32 witness rows (fp16) and the heads'
    band norms (fp32)."""
    W = F16_WARPS if warps is None else warps
    npipe = f16_pipes(W)
    kp, vp = 128 // W // 2 + 4, 128 // W // 2
    per_warp = 32 * (kp + vp) * 4 + G * 32 * 4
    return (G * 128 * 4 + W * npipe * per_warp + (2 * W * G * 32 * 4 if W == 2 else 0)
            + (npipe * 32 * num_bands * 2 + G * num_bands * 4 if tier_a else 0))


@functools.lru_cache(maxsize=None)
def _resident_ctas(func, block, smem=0):
    """CTAs of ``func`` resident per SM at ``block`` threads and ``smem`` bytes of dynamic shared
    memory (with its registers and static shared memory)."""
    import cupy as cp

    return int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(func.kernel.ptr, block, smem))


def merge_smem_floats(ns):
    """decode_merge's dynamic shared memory in floats (cuda/decode.cu, ``merge_smem_floats``): three
    arrays of ns rounded up to 4, and 4 floats of slack."""
    return 3 * ((ns + 3) & ~3) + 4


# decode_merge copies a cell's o_part rows into shared memory first when they fit in this many bytes
# with its statistics (cuda/decode.cu, MG_PREFETCH): 128 splits of 128 channels take 66 KB
MERGE_PREFETCH_BYTES = 96 * 1024


def merge_smem_bytes(ns, d, prefetch=None):
    """``(bytes, pf)``: decode_merge's dynamic shared memory and whether it prefetches the o_part
    rows (``ns·d`` floats after the statistics; ``d % 4 == 0`` and within MERGE_PREFETCH_BYTES
    unless ``prefetch`` forces it)."""
    pf = d % 4 == 0 and 4 * (merge_smem_floats(ns) + ns * d) <= MERGE_PREFETCH_BYTES
    if prefetch is not None:
        pf = bool(prefetch) and d % 4 == 0
    return 4 * (merge_smem_floats(ns) + (ns * d if pf else 0)), pf


# decode_merge certifies a cell on a warp of its own (True), or on thread 0 after its channel of o
# (False: the launch before session 13); the same bits either way (bench/decode_variants.py
# MERGE_CERT_WARP=0 times the other)
MERGE_CERT_WARP = True
# a decode step's kernels (the stage-1 kernels and decode_merge, each of which calls griddep_enter
# before its first global access: cuda/griddep.cuh) launch with programmatic dependent launch on
# sm_90+ (witcert_cupy/_launch.py) unless the environment sets WITCERT_PDL=0; the same bits either
# way (bench/decode_variants.py PDL=0 times the plain launch)
PDL = pdl_enabled()


def _pdl():
    import cupy as cp

    return PDL and pdl_supported(cp.cuda.Device().id)


def bind_merge(o_part, lse_part, lam_part, cmax_part, gam_part, o, lse, log_a, cmax, gam, g0, risk=None,
               tv_bound=None, prefetch=None, budget=None):
    """A zero-argument launcher of ``decode_merge`` over split partials ``o_part [..., ns, d]`` and
    ``lse_part / lam_part / cmax_part / gam_part [..., ns]`` (float32) into ``o [..., d]`` and
    ``lse / log_a / cmax / gam [...]`` (``log A``, ``cmax`` and ``Γ`` raised by the underflow term
    ``g0``, docs/certificate.md §10); with ``risk`` and ``tv_bound`` (float64 ``[...]``) it certifies
    each cell in the same launch (SPEC §5).  ``prefetch`` (tests) forces the shared-memory copy of
    the rows on or off; the outputs are the same bits either way (the same sums in the same order).
    ``budget`` (``(ledger, key, limit, requests)``, :func:`witcert_cupy.decode.budget_of`; needs
    ``risk``, leading dims ``[B, Hq]``): each certified cell also spends its request's budget (spec §4.4)."""
    *lead, ns, d = o_part.shape
    rows = int(np.prod(lead, dtype=np.int64))
    null = np.uint64(0)
    smem, pf = merge_smem_bytes(ns, d, prefetch)
    if budget is None or risk is None:
        spend = (null, null, null, _i32(0), _i32(1), np.uint64(0), np.int64(0))
    else:
        ledger, key, limit, requests = budget
        spend = (null if requests is None else requests, ledger.counts, ledger.keys, _i32(ledger.capacity),
                 _i32(lead[-1]), np.uint64(key), np.int64(limit))
    args = (o_part, lse_part, lam_part, cmax_part, gam_part, _i32(ns), _i32(d), o, lse, log_a, cmax, gam,
            null if risk is None else risk, null if tv_bound is None else tv_bound, _i32(pf), np.float32(g0),
            *spend)
    merge = kernel("decode.cu", "decode_merge")
    # the opt-in only ever grows, read from the function itself: kernel objects built apart (after a
    # rebuild with other options, bench/decode_variants.py) may share one CUDA function, and a
    # record kept per object lowered a larger plan's opt-in (run 99)
    if smem > 48 * 1024 and smem > merge.max_dynamic_shared_size_bytes:
        merge.max_dynamic_shared_size_bytes = smem

    # certifying, one more warp: its first thread certifies the cell while the others run the o loop
    block = min(d, 256) + (32 if risk is not None and MERGE_CERT_WARP else 0)

    return Launcher(merge, (rows,), (block,), args, smem, pdl=_pdl())


def bind_budget(budget, risk, tv_bound, qo_indptr=None):
    """A no-argument launcher of ``budget_charge`` (cuda/budget.cu, spec §4.4) for a call whose merge
    writes ``risk``/``tv_bound`` ``[rows, Hq]``; ``budget`` is ``(ledger, key, limit, requests)``
    (:func:`witcert_cupy.decode.budget_of`) or None (nothing to charge)."""
    if budget is None:
        return None
    ledger, key, limit, requests = budget
    nreq = risk.shape[0] if qo_indptr is None else qo_indptr.shape[0] - 1
    if nreq <= 0:
        return None
    null = np.uint64(0)
    fn = kernel("budget.cu", "budget_charge")
    args = (risk, tv_bound, _i32(nreq), _i32(risk.shape[1]), null if requests is None else requests,
            null if qo_indptr is None else qo_indptr, ledger.counts, ledger.keys, _i32(ledger.capacity),
            np.uint64(key), np.int64(limit))
    grid = (-(-nreq // 128),)
    return lambda: fn(grid, (128,), args)


def launch_query(q):
    """The query as the kernels read it: ``q`` itself when it is C-contiguous float32 starting on a
    16-byte boundary (a plan then reads it in place at every launch), else a contiguous copy.  The
    fp16-store decode and the extend kernel load the query 16 bytes at a time, and a view that
    starts mid-vector (``buf[1:]``) would fault there; CuPy's allocations are 256-byte aligned."""
    import cupy as cp

    a = cp.ascontiguousarray(q, dtype=cp.float32)
    return a.copy() if a.data.ptr % 16 else a


def _i32(v):
    return np.int32(v)


def _grid1(n, block=256):
    return (max(1, (n + block - 1) // block),)


# ---------------------------------------------------------------- public API, GPU side

def philox(counter, key, rounds):
    import cupy as cp

    from .stream import check_philox_args

    ctr, k = to_cupy(counter), to_cupy(key)
    batch = check_philox_args(ctr, k)
    c2 = cp.ascontiguousarray(cp.broadcast_to(ctr, batch + (4,))).reshape(-1, 4)
    k2 = cp.ascontiguousarray(cp.broadcast_to(k, batch + (2,))).reshape(-1, 2)
    out = cp.empty_like(c2)
    n = c2.shape[0]
    kernel("write.cu", "philox_kernel")(_grid1(n), (256,), (c2, k2, np.int64(n), _i32(rounds), out))
    return out.reshape(batch + (4,))


def _slots64(name, slots):
    import cupy as cp

    s = to_cupy(slots)
    check_int(name, s)
    return cp.ascontiguousarray(s, dtype=cp.int64)


def dither(slots, *, layer, kv_head, side, head_dim, seed, bits, epoch):
    import cupy as cp

    s = _slots64("slots", slots)
    out = cp.empty((s.shape[0], head_dim), cp.float32)
    if s.shape[0]:
        kernel("write.cu", "dither_kernel")((s.shape[0],), (min(256, head_dim),),
                                            (s, _i32(head_dim), _i32(side), _i32(layer), _i32(kv_head),
                                             np.uint32(epoch), np.uint32(seed & 0xFFFFFFFF),
                                             np.uint32(seed >> 32), _i32(bits), out))
    return out


INPUT_DTYPES = {"float16": 0, "float32": 1, "float64": 3}


def _input(name, x, shape):
    import cupy as cp

    x = to_cupy(x)
    check_float(name, x, shape)
    if str(x.dtype) not in INPUT_DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported on the GPU (float16/float32/float64)")
    return cp.ascontiguousarray(x), INPUT_DTYPES[str(x.dtype)]


def check_gpu_config(config):
    d, gs = config.head_dim, config.group_size
    if d not in (64, 128, 256):
        raise ValueError(f"the GPU kernels support head_dim 64, 128 or 256, got {d}")
    if gs % 16:
        raise ValueError(f"the GPU kernels need group_size to be a multiple of 16, got {gs}")
    if config.witness_bands > 64:
        raise ValueError(f"the GPU kernels support at most 64 witness bands, got {config.witness_bands}")


# write_rows' launch shape (cuda/write.cu: WR_THREADS, the entries write_rows_<d>_<bits>_c<cpt>)
WRITE_THREADS = 256


def write_kernel(head_dim, dither_bits, witness_bands):
    """(name, channels per thread) of the write_rows entry for a configuration: 32 channels per
    thread at 8-bit dither without a witness, else 16 (cuda/write.cu says why)."""
    cpt = 32 if dither_bits == 8 and witness_bands == 0 else 16
    return f"write_rows_{head_dim}_{dither_bits}_c{cpt}", cpt


def _write(k, v, dtype_code, slots, dest_rows, *, layer, plane_layer, side0, nsides, H, N, config,
           bypass_layer, band_ch, codes, scales, outl, wit, exact_ptr, counters, head_base=0):
    import cupy as cp

    n = slots.shape[0]
    if n == 0:
        return
    d = config.head_dim
    k0, k1 = config.seed_words
    exact_arg = np.uint64(exact_ptr)
    name, cpt = write_kernel(d, config.dither_bits, config.witness_bands)
    rows_per_block = WRITE_THREADS // (d // cpt)  # tokens of one (kv head, side)
    if config.group_size & (config.group_size - 1) or nsides not in (1, 2):  # d is 64/128/256 on the GPU
        raise RuntimeError("internal: write_rows needs a power-of-two group size and one or two sides")
    if H * nsides > 65535:  # the grid's y extent
        raise ValueError(f"the GPU write path supports at most 32767 kv heads per pool, got {H}")
    if codes.data.ptr % 16 or (exact_ptr and exact_ptr % 16):
        raise RuntimeError("internal: the pool's code planes must be 16-byte aligned")
    vec = all(a.data.ptr % 16 == 0 for a in (k, v))  # row offsets are multiples of 32 bytes
    kernel("write.cu", name)(
        ((n + rows_per_block - 1) // rows_per_block, H * nsides), (WRITE_THREADS,),
        (k, v, _i32(dtype_code), _i32(vec), slots, dest_rows, _i32(n), _i32(H), np.int64(N), _i32(layer),
         _i32(head_base), _i32(plane_layer), _i32(side0), _i32(nsides), _i32(config.group_size.bit_length() - 1),
         _i32(bypass_layer.shape[-1]), _i32(config.witness_bands), bypass_layer, band_ch, np.uint32(k0),
         np.uint32(k1), codes, scales.view(cp.uint16), outl.view(cp.uint16), wit.view(cp.uint16), exact_arg,
         counters))


def quantize(x, slots, *, layer, side, config):
    import cupy as cp

    from .write import QuantizedKV, _bypass_for

    check_gpu_config(config)
    xd, code = _input("x", x, (None, None, config.head_dim))
    n, H, d = xd.shape
    s = _slots64("slots", slots)
    if s.shape[0] != n:
        raise ValueError(f"slots must have shape [{n}] (one per row), got {list(s.shape)}")
    bypass = cp.asarray(_bypass_for(config, layer, H))
    np2, ng, nb = bypass.shape[1], config.num_groups, config.witness_bands
    codes = cp.empty((1, 2, H, n, d), cp.int8)
    scales = cp.empty((1, 2, H, n, ng), cp.float16)
    outl = cp.empty((1, 2, H, n, np2), cp.float16)
    wit = cp.empty((1, 2, H, n, nb), cp.float16)
    counters = cp.zeros(2, cp.uint64)
    _write(xd, xd, code, s, cp.arange(n, dtype=cp.int64), layer=layer, plane_layer=0, side0=side, nsides=1,
           H=H, N=n, config=config, bypass_layer=bypass, band_ch=cp.asarray(config.band_channels()),
           codes=codes, scales=scales, outl=outl, wit=wit, exact_ptr=0, counters=counters)
    tr = lambda a: cp.ascontiguousarray(a[0, side].transpose(1, 0, 2))  # noqa: E731
    return QuantizedKV(tr(codes), tr(scales), tr(outl), tr(wit) if nb else None)


def _dequant(codes, scales, outl, slots, rows, *, layer, plane_layer, side, H, N, config, bypass_layer, head_base=0):
    import cupy as cp

    n = slots.shape[0]
    d = config.head_dim
    out = cp.empty((n, H, d), cp.float32)
    if n:
        k0, k1 = config.seed_words
        kernel("write.cu", "dequant_rows")(
            (n, H), (d,),
            (codes, scales.view(cp.uint16), outl.view(cp.uint16), slots, rows, _i32(n), _i32(H), np.int64(N),
             _i32(d), _i32(layer), _i32(head_base), _i32(plane_layer), _i32(side), _i32(config.group_size),
             _i32(bypass_layer.shape[-1]), bypass_layer, _i32(config.dither_bits), np.uint32(k0),
             np.uint32(k1), out))
    return out


def dequantize(qkv, slots, *, layer, side, config):
    import cupy as cp

    from .write import _bypass_for

    check_gpu_config(config)
    codes = to_cupy(qkv.codes)
    if codes.dtype != cp.int8:
        raise TypeError(f"qkv.codes must be int8, got dtype {codes.dtype}")
    check_shape("qkv.codes", codes, (None, None, config.head_dim))
    n, H, d = codes.shape
    bypass = cp.asarray(_bypass_for(config, layer, H))
    scales, outl = to_cupy(qkv.scales), to_cupy(qkv.outliers)
    for name, arr, w in (("qkv.scales", scales, config.num_groups), ("qkv.outliers", outl, bypass.shape[1])):
        if arr.dtype != cp.float16:
            raise TypeError(f"{name} must be float16, got dtype {arr.dtype}")
        check_shape(name, arr, (n, H, w))
    s = _slots64("slots", slots)
    if s.shape[0] != n:
        raise ValueError(f"slots must have shape [{n}] (one per row), got {list(s.shape)}")
    plane = lambda a: cp.ascontiguousarray(  # noqa: E731  [n,H,X] -> [1,2,H,n,X] at this side
        cp.stack([a.transpose(1, 0, 2)] * 2)[None])
    return _dequant(plane(codes), plane(scales), plane(outl), s, cp.arange(n, dtype=cp.int64), layer=layer,
                    plane_layer=0, side=side, H=H, N=n, config=config, bypass_layer=bypass)


# ---------------------------------------------------------------- the pool's device side

class _DeviceBase:
    """What the GPU side of every pool has: counters, the mapped backing store, the decode plan."""

    fp16_store = False

    def __init__(self, pool, bypass_ch, band_ch):
        import cupy as cp

        if pool.head_dim not in (64, 128, 256):
            raise ValueError(f"the GPU kernels support head_dim 64, 128 or 256, got {pool.head_dim}")
        if band_ch.shape[0] > 64:
            raise ValueError(f"the GPU kernels support at most 64 witness bands, got {band_ch.shape[0]}")
        self.pool = pool
        self.bypass = cp.asarray(bypass_ch)                          # [L, H, NP2]
        self.band_ch = cp.asarray(band_ch if band_ch.size else np.zeros((1, 1), np.int32))
        self.num_bands = int(band_ch.shape[0])
        self.counters = cp.zeros(2, cp.uint64)                       # non-finite rows, bad slots
        pool.nonfinite_writes = self.counters[:1]
        self.exact_ptr = 0
        if pool.keep_exact:
            nbytes = pool.exact.nbytes
            flags = cp.cuda.runtime.hostAllocMapped | cp.cuda.runtime.hostAllocPortable
            self._pinned = cp.cuda.PinnedMemory(nbytes, flags)
            buf = cp.cuda.PinnedMemoryPointer(self._pinned, 0)
            pool.exact = np.frombuffer(buf, np.float16, pool.exact.size).reshape(pool.exact.shape)
            pool.exact[...] = 0
            # mapped pinned memory under unified addressing: the host pointer is the device pointer
            self.exact_ptr = self._pinned.ptr
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.num_sms = int(props["multiProcessorCount"])
        self.compute_capability = (int(props["major"]), int(props["minor"]))

    @property
    def bad_slot_writes(self):
        return self.counters[1:2]

    def page_in(self, entry, k_rows, v_rows):
        """Copy one page of exact rows (host views into the mapped backing store) into tier entry
        ``entry``, ordered on the current stream after the writes that filled them."""
        import cupy as cp

        stream = cp.cuda.get_current_stream().ptr
        for dst, src in ((self.pool.tier_k[entry], k_rows), (self.pool.tier_v[entry], v_rows)):
            assert src.flags.c_contiguous and dst.flags.c_contiguous and src.nbytes == dst.nbytes
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.ctypes.data, src.nbytes, 4, stream)  # 4: default

    def evict(self, layer, slots):
        p = self.pool
        s = _slots64("slots", slots)
        n = s.shape[0]
        if n:
            kernel("write.cu", "evict_tier_pages")(
                _grid1(n), (256,), (s, _i32(n), np.int64(p.num_slots), _i32(int(math.log2(p.page_size))),
                                    _i32(p.num_kv_heads), _i32(p.num_pages + 1), p.tier_map_dev[layer]))


    def default_num_splits(self, batch, ctas_per_sm=4, max_splits=64, tokens=None, min_tokens=64):
        """One wave of resident CTAs (``ctas_per_sm`` per SM, the stage-1 kernel's occupancy; for
        the fp16 kernel's pipelines, splits per SM) over batch × kv heads, at most ``max_splits``;
        splits beyond a request's pages exit at once.  Chosen without reading the page table (that
        would synchronise the host).  Measured (``bench/decode.py --splits``, bench/NOTES.md session
        6): one wave beats two at every small-batch shape; a wave counted at 4 CTAs per SM left the
        6-per-SM kernel at 0.73 waves (Nsight Compute, run 36).  ``tokens`` (the mean tokens per
        request, from the page table's shape) keeps at least ``min_tokens`` per split: the one-warp
        fp16 kernel takes ``max_splits=128`` (run 56: 128 splits at batch 1, 28/4, 32k, 55 µs against
        75 at 64; at 4k, 64 splits 22–24 µs against 27–28 at 128); the INT8 kernel's rule is
        :meth:`v2_num_splits`."""
        target = max(1, ctas_per_sm) * self.num_sms
        ns = min(max_splits, target // max(1, batch * self.pool.num_kv_heads), self.pool.num_pages)
        if tokens is not None:
            ns = min(ns, tokens // min_tokens)
        return int(max(1, ns))

    def v2_num_splits(self, batch, ctas_per_sm, tokens):
        """decode_stage1_v2's default: the 64-split rule, and where 64 splits leave most of one wave
        empty, more — up to :data:`V2_MAX_SPLITS` within one wave: a multiple of 64 while the grid
        stays within :data:`V2_GRID_CAP` CTAs per SM, for splits of at least :data:`V2_MIN_TOKENS`
        tokens; the whole wave for splits of at least :data:`V2_WAVE_MIN_TOKENS`."""
        ns = self.default_num_splits(batch, ctas_per_sm)
        if ns < 64:
            return ns
        rows = max(1, batch * self.pool.num_kv_heads)
        # (in whole steps of 64: 66 splits at 32/8 measured 1% slower than 64, runs 100 and 102)
        capped = min(V2_GRID_CAP, max(1, ctas_per_sm)) * self.num_sms // rows // 64 * 64
        near = self.default_num_splits(batch, ctas_per_sm, V2_MAX_SPLITS, tokens, V2_MIN_TOKENS)
        wave = self.default_num_splits(batch, ctas_per_sm, V2_MAX_SPLITS, tokens, V2_WAVE_MIN_TOKENS)
        return max(ns, min(near, capped), wave)

    def plan(self, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits, unroll=0,
             max_pages=0, telemetry=None, stage1="auto", budget=None):
        """Validate (metadata only), allocate the outputs, and return a :class:`DecodePlan`.

        ``unroll`` (tokens per lane group per step; 0 = default) exists for the benchmark sweep.
        ``max_pages > 0`` asks for per-page contributions of each request's first ``max_pages`` pages.
        ``stage1``: ``'auto'`` (``decode_stage1_f16`` for fp16 stores and the staged-tile
        ``decode_stage1_v2`` for INT8 where they apply, else ``decode_stage1``), or ``'v1'``, ``'v2'``
        or ``'f16'`` to force one (benchmarks; ``'v2'`` and ``'f16'`` raise where they do not apply)."""
        p = self.pool
        B, Hq, d = q.shape
        G = Hq // p.num_kv_heads
        if not 1 <= G <= 8:
            raise ValueError(f"the GPU kernels support 1 to 8 query heads per kv head, got G={G}")
        for name, arr, n in (("kv_indptr", kv_indptr, B + 1), ("kv_last_page_len", kv_last_page_len, B)):
            check_int(name, arr)
            if arr.shape[0] != n:
                raise ValueError(f"{name} must have shape [{n}], got {list(arr.shape)}")
        check_int("kv_indices", kv_indices)
        return DecodePlan(self, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert,
                          num_splits, unroll, max_pages, telemetry, stage1, budget)

    def decode(self, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits, max_pages=0,
               telemetry=None, budget=None):
        plan = self.plan(q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, num_splits,
                         max_pages=max_pages, telemetry=telemetry, budget=budget)
        plan.launch()
        return plan.result()


class PoolDevice(_DeviceBase):
    """Device-side state and launches of a ``backend='cuda'`` :class:`~witcert_cupy.KVPool`."""

    def __init__(self, pool):
        check_gpu_config(pool.config)
        super().__init__(pool, pool.bypass_ch, pool.band_ch)

    def store(self, layer):
        """Kernel arguments of the stored data: (data, scales, outliers, witness, bypass, quant)."""
        import cupy as cp

        p, cfg = self.pool, self.pool.config
        k0, k1 = cfg.seed_words
        return (p.codes, p.scales.view(cp.uint16), p.outliers.view(cp.uint16), p.witness.view(cp.uint16),
                self.bypass[layer], (cfg.group_size, k0, k1, cfg.dither_bits, cert_mod.beta_steps(cfg.dither_bits)))

    def write(self, layer, slots, k, v):
        p = self.pool
        kd, code = _input("k", k, (None, p.num_kv_heads, p.head_dim))
        vd, code_v = _input("v", v, (kd.shape[0], p.num_kv_heads, p.head_dim))
        if code_v != code:
            vd = vd.astype(kd.dtype)
        s = _slots64("slots", slots)
        if s.shape[0] != kd.shape[0]:
            raise ValueError(f"slots must have shape [{kd.shape[0]}] (one per row of k), got {list(s.shape)}")
        _write(kd, vd, code, s, s, layer=layer, plane_layer=layer, side0=0, nsides=2, H=p.num_kv_heads,
               N=p.num_slots, config=p.config, bypass_layer=self.bypass[layer], band_ch=self.band_ch,
               codes=p.codes, scales=p.scales, outl=p.outliers, wit=p.witness,
               exact_ptr=self.exact_ptr, counters=self.counters, head_base=p.kv_head_offset)

    def dequantized(self, layer, slots, side):
        p = self.pool
        s = _slots64("slots", slots)
        return _dequant(p.codes, p.scales, p.outliers, s, s, layer=layer, plane_layer=layer, side=side,
                        H=p.num_kv_heads, N=p.num_slots, config=p.config, bypass_layer=self.bypass[layer],
                        head_base=p.kv_head_offset)

class DecodePlan:
    """One decode step on the GPU with every buffer allocated up front: :meth:`launch` only launches
    kernels (stage 1, the merge with the certificate, and telemetry), so it can be timed with events or
    captured in a CUDA graph.  It reads ``q`` and the page table from the arrays it was given when
    they are already contiguous of the launch dtype (float32, int32; ``q`` starting on a 16-byte
    boundary, :func:`launch_query`): refill those in place between launches or replays.
    ``kernel_name`` ('v1', 'v2' or 'f16') and ``stage1_template`` (the instantiation, e.g.
    ``decode_stage1_v2<7, 8, true>``) say which stage-1 kernel it launches."""

    def __init__(self, dev, q, layer, kv_indptr, kv_indices, kv_last_page_len, sm_scale, cert, ns, unroll=0,
                 max_pages=0, telemetry=None, stage1="auto", budget=None):
        import cupy as cp

        p = dev.pool
        self.dev, self.cert, self.layer = dev, cert, layer
        self.telemetry, self.max_pages = telemetry, max_pages
        self._tel_done = None  # (event, recorded under capture) of this plan's last telemetry launch
        B, Hq, d = q.shape
        self.shape = (B, Hq, d)
        self.q = launch_query(q)
        self.ip = cp.ascontiguousarray(kv_indptr, dtype=cp.int32)
        self.ix = cp.ascontiguousarray(kv_indices, dtype=cp.int32)
        self.ll = cp.ascontiguousarray(kv_last_page_len, dtype=cp.int32)
        self.o = cp.empty((B, Hq, d), cp.float32)
        self.lse = cp.empty((B, Hq), cp.float32)
        self.log_a = cp.empty((B, Hq), cp.float32)
        self.cmax = cp.empty((B, Hq), cp.float32)
        self.gam = cp.empty((B, Hq), cp.float32)
        data, scales, outl, wit, bypass, (gs, k0, k1, bits, _) = dev.store(layer)
        # the certificate's per-launch constants (SPEC §4.1: the kernels' own evaluation term)
        beta, gpb, gex = cert_mod.kernel_scalars(d, sm_scale, None if dev.fp16_store else bits)
        g0 = cert_mod.f32_up(cert_mod.underflow_term(d, sm_scale))
        G = Hq // p.num_kv_heads
        logb = cert_mod.log_budget(cert, Hq, p.num_layers) if cert is not None else np.float32(0)
        P = max(0, int(max_pages))
        # the staged-tile kernel serves the common cases: INT8 (8-, 16- or 24-bit dither) or fp16
        # stores; d = 128, no exact tier, no per-page output, default unroll (decode_v2.cu);
        # decode_stage1 serves everything
        v2_ok = ((dev.fp16_store or bits in (8, 16, 24)) and d == 128 and p.tier_map_dev is None and P == 0
                 and unroll == 0 and 128 // gs <= 8 and gs & (gs - 1) == 0 and dev.num_bands <= 64)
        # its PLAIN layout (INT8, Tier B, no outlier channels, 32-channel groups)
        plain = (not dev.fp16_store and bypass.shape[-1] == 0 and gs == V2_PLAIN_GROUP_SIZE
                 and not cert_mod.tier_code(cert) & 1)
        # fp16 stores: the one-warp pipelined kernel (decode_f16.cu) under the same conditions
        f16_ok = dev.fp16_store and v2_ok
        # a certified step needs the kernel's own evaluation term in c_t (SPEC §4.1): decode_stage1
        # and PLAIN carry it; the staged kernels' other layouts and decode_f16 do not yet (asked for
        # by name, they report "no guarantee"), so the library's choice for those is decode_stage1
        auto_v2 = v2_ok and (cert is None or plain)
        auto_f16 = f16_ok and cert is None
        if stage1 not in ("auto", "v1", "v2", "f16"):
            raise ValueError(f"stage1 must be 'auto', 'v1', 'v2' or 'f16', got {stage1!r}")
        if stage1 == "v2" and not v2_ok:
            raise ValueError("decode_stage1_v2 serves d=128 pools (INT8 or fp16 stores) with no exact tier and "
                             "no page contributions")
        if stage1 == "f16" and not f16_ok:
            raise ValueError("decode_stage1_f16 serves d=128 fp16 stores with no page contributions")
        if stage1 == "auto":
            stage1 = "f16" if auto_f16 else ("v2" if auto_v2 else "v1")
        self.kernel_name = stage1
        sides = False  # decode_stage1_v2's PLAIN layout with the warps on the sides (below)
        npipe = f16_pipes() if stage1 == "f16" else 1  # splits per CTA
        self.block1 = {"v2": V2_THREADS, "f16": 32 * F16_WARPS * npipe}.get(stage1, 128)
        self.smem1 = 0  # dynamic shared memory of stage 1
        if stage1 == "f16":  # the certified instantiation keeps λ's sums; the other has none
            certified = "true" if cert is not None else "false"
            self.stage1_template = f"decode_stage1_f16<{G}, {F16_WARPS}, {certified}>"
            self.stage1 = kernel("decode_f16.cu", None, self.stage1_template)
            self.smem1 = f16_smem_bytes(G, dev.num_bands, cert_mod.tier_code(cert) & 1)
            if self.smem1 > self.stage1.max_dynamic_shared_size_bytes:  # (beyond 48 KB: opt in)
                self.stage1.max_dynamic_shared_size_bytes = self.smem1
        elif stage1 == "v2":  # the second template argument: dither bits, 0 for fp16 rows
            # the third: the default layout as constants (no outlier channels, 32-channel groups, no
            # Tier-A term; decode_v2.cu), the same results in less code
            # (the channel split, a fourth argument, by the batch: V2_SPLIT_MIN_PAIRS; below it by G and
            # the tiles per split once the split count is known, V2_SPLIT_MIN_G)
            layout = ("true" if B * p.num_kv_heads >= V2_SPLIT_MIN_PAIRS else "true, false") if plain else "false"
            sides = layout == "true, false"
            self.stage1_template = f"decode_stage1_v2<{G}, {0 if dev.fp16_store else bits}, {layout}>"
            self.stage1 = kernel("decode_v2.cu", None, self.stage1_template)
        else:
            fp16 = "true" if dev.fp16_store else "false"
            self.stage1_template = f"decode_stage1<{d}, {G}, {fp16}, {unroll}>"
            self.stage1 = kernel("decode.cu", None, self.stage1_template)
        # the default split count: one wave of this kernel's resident CTAs (the one-warp fp16 kernel:
        # up to 128 splits of at least 64 tokens, the mean request's length from the table's shape;
        # the INT8 kernel: beyond 64 splits at small batch, v2_num_splits)
        tokens = self.ix.shape[0] * p.page_size // max(1, B)  # the mean request's, at most
        if not ns:
            resident = _resident_ctas(self.stage1, self.block1, self.smem1)
            if stage1 == "f16":  # a whole number of CTAs' pipelines where there are several
                ns = dev.default_num_splits(B, resident * npipe, max_splits=128, tokens=tokens)
                ns = ns - ns % npipe if ns >= npipe else ns
            elif stage1 == "v2":
                ns = dev.v2_num_splits(B, resident, tokens)
            else:
                ns = dev.default_num_splits(B, resident)
        # V2_SPLIT_MIN_G needs the split count, which the sides' residency chose; the split keeps it
        # (as measured in runs 193–196)
        if stage1 == "v2" and sides and G >= V2_SPLIT_MIN_G and tokens <= V2_TILE * ns:
            self.stage1_template = f"decode_stage1_v2<{G}, {bits}, true>"  # (PLAIN: INT8, so bits)
            self.stage1 = kernel("decode_v2.cu", None, self.stage1_template)
        self.ns = ns
        self.o_part = cp.empty((B, Hq, ns, d), cp.float32)
        self.lse_part = cp.empty((B, Hq, ns), cp.float32)
        self.lam_part = cp.empty((B, Hq, ns), cp.float32)
        self.cmax_part = cp.empty((B, Hq, ns), cp.float32)
        self.gam_part = cp.empty((B, Hq, ns), cp.float32)
        self.grid1 = (-(-ns // npipe), p.num_kv_heads, B)
        common = (self.q, data, scales, outl, wit, bypass, dev.band_ch, self.ip, self.ix, self.ll, self.o_part,
                  self.lse_part, self.lam_part, self.cmax_part, self.gam_part)
        if self.kernel_name == "f16":
            self.args1 = (self.q, data, wit, dev.band_ch, self.ip, self.ix, self.ll, self.o_part, self.lse_part,
                          self.lam_part, self.cmax_part, self.gam_part, np.int64(p.num_slots), _i32(p.num_kv_heads),
                          _i32(layer), _i32(dev.num_bands), _i32(int(math.log2(p.page_size))), _i32(p.num_pages),
                          _i32(self.ix.shape[0]), _i32(ns), _i32(cert_mod.tier_code(cert)), np.float32(sm_scale),
                          np.float32(gex))
        elif self.kernel_name == "v2":
            self.args1 = (*common, np.int64(p.num_slots), _i32(p.num_kv_heads), _i32(layer), _i32(p.kv_head_offset),
                          _i32(gs.bit_length() - 1), _i32(bypass.shape[-1]), _i32(dev.num_bands), _i32(int(math.log2(p.page_size))),
                          _i32(p.num_pages), _i32(self.ix.shape[0]), _i32(ns), _i32(cert_mod.tier_code(cert)),
                          np.uint32(k0), np.uint32(k1), np.float32(sm_scale), np.float32(logb), np.float32(beta),
                          np.float32(gpb), np.float32(gex))
        else:
            null = np.uint64(0)
            if p.tier_map_dev is not None:  # the exact tier of this layer (SPEC §7)
                tier = (p.tier_map_dev[layer], p.tier_k.view(cp.uint16), p.tier_v.view(cp.uint16))
                tier_dims = (_i32(p.num_pages + 1), _i32(p.exact_tier_pages))
            else:
                tier, tier_dims = (null, null, null), (_i32(0), _i32(0))
            self.page_lse = cp.full((B, Hq, max(P, 1)), -cp.inf, cp.float32)
            self.page_lam = cp.full((B, Hq, max(P, 1)), -cp.inf, cp.float32)
            self.args1 = (*common, *tier, self.page_lse, self.page_lam, np.int64(p.num_slots), _i32(B),
                          _i32(p.num_kv_heads), _i32(layer), _i32(gs), _i32(bypass.shape[-1]), _i32(dev.num_bands),
                          _i32(int(math.log2(p.page_size))), _i32(p.num_pages), _i32(self.ix.shape[0]), _i32(ns),
                          _i32(cert_mod.tier_code(cert)), _i32(bits), *tier_dims, _i32(P > 0), _i32(P),
                          _i32(p.kv_head_offset), np.uint32(k0), np.uint32(k1), np.float32(sm_scale),
                          np.float32(logb), np.float32(beta), np.float32(gpb), np.float32(gex))
        self.risk = cp.empty((B, Hq), cp.float64)
        self.tv_bound = cp.empty((B, Hq), cp.float64)
        # the merge certifies each cell in the same launch when the step is certified
        cert_out = (self.risk, self.tv_bound) if cert is not None else (None, None)
        self._stage1 = Launcher(self.stage1, self.grid1, (self.block1,), self.args1, self.smem1, pdl=_pdl())
        # (the merge also spends the request budget of each cell it certifies)
        self.merge = bind_merge(self.o_part, self.lse_part, self.lam_part, self.cmax_part, self.gam_part, self.o,
                                self.lse, self.log_a, self.cmax, self.gam, g0, *cert_out, budget=budget)

    def launch(self):
        """Launch the step's kernels on the current stream (no allocation, no host read)."""
        B, Hq, d = self.shape
        if B == 0:
            return
        self._stage1()
        if self.cert is None or self.telemetry is None:
            self.merge()  # (and the certificate and its budget, when certified)
            return
        import cupy as cp

        from . import telemetry as tel_mod

        main = cp.cuda.get_current_stream()
        # which capture (or None: eager) this launch belongs to
        epoch = tel_mod.capture_epoch() if main.is_capturing() else None
        # this plan's previous telemetry launch must have read the risks before the merge rewrites
        # them (an event of the same capture, or of eager work; never one across two)
        if self._tel_done is not None and self._tel_done[1] == epoch:
            main.wait_event(self._tel_done[0])
        self.merge()
        self.telemetry._record_forked(self.layer, self.risk, self.dev.pool.num_kv_heads)
        self._tel_done = (self.telemetry._last, epoch)

    def result(self):
        import cupy as cp

        from .decode import DecodeResult

        if self.cert is None:
            return DecodeResult(self.o, self.lse, num_splits=self.ns)
        contrib = None
        if self.max_pages > 0:
            contrib = cert_mod.page_contributions(self.page_lse, self.page_lam, self.lse, cp)
        return DecodeResult(self.o, self.lse, self.log_a, self.risk, self.tv_bound, self.cmax, num_splits=self.ns,
                            page_contrib=contrib, gamma=self.gam)


class Fp16PoolDevice(_DeviceBase):
    """Device-side state and launches of a ``backend='cuda'`` :class:`~witcert_cupy.Fp16Pool`."""

    fp16_store = True

    def __init__(self, pool):
        super().__init__(pool, np.zeros((pool.num_layers, pool.num_kv_heads, 0), np.int32), pool.band_ch)
        import cupy as cp

        self._none = cp.zeros(8, cp.uint16)

    def store(self, layer):
        import cupy as cp

        p = self.pool
        return (p.values.view(cp.uint16), self._none, self._none, p.witness.view(cp.uint16), self.bypass[layer],
                (p.head_dim, 0, 0, 8, 0.0))

    def write(self, layer, slots, rows):
        import cupy as cp

        p = self.pool
        shape = (None, p.num_kv_heads, p.head_dim)
        kd, code = _input("k", rows["k"], shape)
        n = kd.shape[0]
        vd, code_v = _input("v", rows["v"], (n, p.num_kv_heads, p.head_dim))
        if code_v != code:
            vd = vd.astype(kd.dtype)
        # stored rows per side, in their own dtype (rounded to fp16 in the kernel, like the CPU);
        # a null pointer serves the exact row
        st = [(np.uint64(0), 0), (np.uint64(0), 0)]
        for j, name in enumerate(("k_stored", "v_stored")):
            if name in rows:
                st[j] = _input(name, rows[name], (n, p.num_kv_heads, p.head_dim))
        s = _slots64("slots", slots)
        if s.shape[0] != n:
            raise ValueError(f"slots must have shape [{n}] (one per row of k), got {list(s.shape)}")
        if n == 0:
            return
        kernel("write.cu", "store_fp16_rows")(
            (n, p.num_kv_heads, 2), (p.head_dim,),
            (kd, vd, _i32(code), st[0][0], _i32(st[0][1]), st[1][0], _i32(st[1][1]), s, _i32(n), _i32(p.num_kv_heads), np.int64(p.num_slots), _i32(p.head_dim), _i32(layer),
             _i32(self.num_bands), self.band_ch, p.values.view(cp.uint16), p.witness.view(cp.uint16),
             np.uint64(self.exact_ptr), self.counters))
