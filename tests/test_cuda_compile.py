"""CI (no GPU): every CUDA source compiles for sm_90 with nvcc, with no spills and no warnings, with
exactly the options the library uses; the host side of the Philox header gives the SPEC §1 vectors."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from witcert_cupy import _cuda

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
SOURCES = sorted(p.name for p in _cuda.kernel_dir().glob("*.cu"))


def test_every_source_is_checked():
    assert {"write.cu", "decode.cu"} <= set(SOURCES)


def _entries_without_local_memory(log, allowed=None):
    """The entry functions of a ``-Xptxas -v`` log, after checking that none has a stack frame or
    spills (``allowed``: ``(pattern, bytes)``, entries matching ``pattern`` may have up to ``bytes``)."""
    entries = re.findall(r"Compiling entry function '([^']+)'", log)
    assert entries, log
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) >= len(entries)
    bad = [(e, s) for e, s in zip(entries, spills) if any(int(v) for v in s)
           and not (allowed and allowed[0].search(e) and all(int(v) <= allowed[1] for v in s))]
    assert not bad, f"stack frames or spills: {bad}"
    return entries


# The one exception, NVRTC 13.0's alone (CUDA 13.0's NVRTC, the GPU machine's CuPy; nvcc 13.0 and
# NVRTC 13.5 spill nothing): form (I) with a Tier-A term, no page contributions, exact tier or outlier
# pairs, 8-bit dither, at d = 64 (tier code 1 or 3, every G), spills 4 bytes in an 8-byte frame, since
# the logits take three integer products per group and block where they took four (at d = 128 and
# 256 the same change removed the spills NVRTC 13.0 had there, docs/performance.md).
NVRTC_13_0_SPILLS = (re.compile(r"decode_stage1_i8ILi64ELi[1-8]ELi[13]ELb0ELb0ELb0ELi8E"), 16)


def test_nvrtc_13_0_spill_allowance_names_its_instances_alone():
    allowed = {(d, g, t, p, x, o, b) for d in (64, 128, 256) for g in range(1, 9) for t in range(4)
               for p in (0, 1) for x in (0, 1) for o in (0, 1) for b in (8, 16)
               if NVRTC_13_0_SPILLS[0].search(f"_Z16decode_stage1_i8ILi{d}ELi{g}ELi{t}ELb{p}ELb{x}ELb{o}ELi{b}EEv")}
    assert allowed == {(64, g, t, 0, 0, 0, 8) for g in range(1, 9) for t in (1, 3)}


# The G classes this file compiles of the decode kernels (WITCERT_COMPILE_EVERY_G=1, the GPU
# session's compile step, adds every G, one per compile; every G's compiles were over half of CI's
# time), -DWITCERT_G_CLASSES in
# the sources, each of which says why its classes: decode_i8.cuh's WC_I8_INST_G_CLASSES (one G of
# each class ptxas compiles alike, at 16-bit dither the one nearest the bound; at head dims other than 128,
# WC_I8_INST_D_CLASS: one G per dither width), decode.cu's and decode_v2.cu's (the G nearest each
# register bound)
I8_G_CLASSES = (1, 4, 7, 8)
I8_G_CLASSES_WIDE = (8,)  # ... at 16-bit dither: the class nearest the bound (G = 1: at d = 64 and 256)
# ... at head dims other than 128, one G per dither width (decode_i8.cuh: WC_I8_INST_D_CLASS)
I8_D_CLASS = {8: (8,), 16: (1,)}
GENERAL_G_CLASSES = (1, 4, 7, 8)  # decode.cu
V2_G_CLASSES = (3, 4, 7, 8)  # decode_v2.cu
G_CLASS_SOURCES = ("decode.cu", "decode_v2.cu")  # and every decode_i8_d*.cu


def _every_g():
    return os.environ.get("WITCERT_COMPILE_EVERY_G") == "1"


def _g_classes(name):
    """Whether ``name`` is compiled at its G classes (or, in the every-G check, one G at a time)."""
    return name in G_CLASS_SOURCES or name.startswith("decode_i8_")


def _scope_defines(name, one_g=None):
    """The instantiation scope's defines for ``name``: -DWITCERT_INSTANTIATE_ALL, and for the decode
    sources the G classes, or the one G ``one_g``."""
    if one_g is not None:
        return ["-DWITCERT_INSTANTIATE_ALL", f"-DWITCERT_ONE_G={one_g}"]
    return ["-DWITCERT_INSTANTIATE_ALL"] + (["-DWITCERT_G_CLASSES"] if _g_classes(name) else [])


def _assert_i8_instances(name, entries, one_g=None):
    """decode_i8_d{D}.cu instantiated every (G, tier, page contributions, exact tier, outlier pairs,
    dither bits) the library launches at its head dim (geometry.py: pages up to I8_PAGES_MAX_D), G at
    its classes (d = 128) or the head dim's one G per dither width (d = 64 and 256), or ``one_g``
    alone at both widths."""
    from witcert_cupy._cuda import geometry as geo

    d = int(re.fullmatch(r"decode_i8_d(\d+)\.cu", name).group(1))
    assert d in geo.I8_HEAD_DIMS
    # (tier code, page contributions, exact tier, outlier pairs): every tier with and without the exact
    # tier and with outlier pairs; Tier B with pages, and over the exact tier
    modes = [(c, 0, x, 0) for x in (0, 1) for c in range(4)] + [(c, 0, 0, 1) for c in range(4)] + \
        ([(2, 1, 0, 0), (2, 1, 1, 0)] if d <= geo.I8_PAGES_MAX_D else [])
    n = 0
    for bits, classes in ((8, I8_G_CLASSES), (16, I8_G_CLASSES_WIDE)):
        gs = (one_g,) if one_g else (classes if d == 128 else I8_D_CLASS[bits])
        for g in gs:
            for c, p, x, o in modes:
                assert any(f"decode_stage1_i8ILi{d}ELi{g}ELi{c}ELb{p}ELb{x}ELb{o}ELi{bits}EEv" in e for e in entries), \
                    (d, g, c, p, x, o, bits)
        n += len(gs) * len(modes)
    assert len([e for e in entries if "decode_stage1_i8" in e]) == n


def _assert_instances(name, entries, one_g=None):
    """Every instantiation the library launches from ``name`` is among the compiled ``entries`` (the
    decode kernels' at their G classes, or at ``one_g`` alone, and then no other)."""
    if name == "decode.cu":  # every (head dim, group), INT8 and fp16 stores
        gs = (one_g,) if one_g else GENERAL_G_CLASSES
        for d in (64, 128, 256):
            for g in gs:
                for f in ("Lb0", "Lb1"):
                    assert any(f"decode_stage1ILi{d}ELi{g}E{f}E" in e for e in entries), (d, g, f)
        assert len([e for e in entries if "decode_stage1ILi" in e]) == 3 * len(gs) * 2
    if name == "decode_v2.cu":
        gs = (one_g,) if one_g else V2_G_CLASSES
        for g in gs:
            for bits in (8, 16, 24):  # each dither resolution; the general layout and PLAIN, with
                # the warps on the sides (split 0) or on each row's channels (split 1)
                for plain, split in ((0, 0), (1, 0), (1, 1)):
                    kernel = f"decode_stage1_v2ILi{g}ELi{bits}ELb{plain}ELb{split}EE"
                    assert any(kernel in e for e in entries), (g, bits, plain, split)
        assert len([e for e in entries if "decode_stage1_v2" in e]) == len(gs) * 3 * 3
    if name == "decode_f16.cu":  # (G, certified)
        for g in range(1, 9):
            for c in (0, 1):
                assert any(f"decode_stage1_f16ILi{g}ELb{c}EEv" in e for e in entries), (g, c)
    if name.startswith("decode_i8_d"):
        _assert_i8_instances(name, entries, one_g)
    if name == "extend_tc.cu":
        for g in range(1, 9):
            assert any(f"extend_tc_stage1ILi{g}EEv" in e for e in entries), g
        assert any("extend_tc_dequant" in e for e in entries), entries
    if name == "write.cu":  # each head dim and dither width, with and without a witness
        for d in (64, 128, 256):
            for bits in (8, 16, 24):
                for wit in ("", "_wit"):
                    assert f"write_rows_{d}_{bits}{wit}" in entries, (d, bits, wit)


@pytest.mark.parametrize("name", SOURCES)
def test_compiles_for_sm90_without_spills_or_warnings(name, tmp_path):
    """nvcc, every instantiation (the decode kernels' at their G classes): no warnings,
    no stack frames or spills.  Where NVRTC is found,
    test_compiles_with_nvrtc_as_cupy_does makes the same checks (front end, instantiations, ptxas)
    with the compiler the library loads its kernels with, on the source CuPy compiles, and this one
    is skipped: the two compilations of every source were most of CI's time."""
    from nvrtc import find_nvrtc

    if find_nvrtc() is not None:
        pytest.skip("NVRTC found: test_compiles_with_nvrtc_as_cupy_does checks this source")
    cmd = [NVCC, "--cubin", "-arch=sm_90", "-ftz=true", "-Xptxas", "-v", "-Werror", "all-warnings",
           *_cuda.options(), *_scope_defines(name), "-I", str(_cuda.kernel_dir()),
           str(_cuda.kernel_dir() / name), "-o", str(tmp_path / "k.out")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "warning" not in log.lower(), log
    entries = _entries_without_local_memory(log)
    _assert_instances(name, entries)


def test_extend_wgmma_path_compiles_for_sm90a_without_spills_or_warnings(tmp_path):
    """The extend kernel's warpgroup-mma path (XT_WGMMA=1) needs the sm_90a target.  Where NVRTC is
    found, test_compiles_with_nvrtc_as_cupy_does makes the same checks on that path as the launch
    layer builds it, and this one is skipped."""
    from nvrtc import find_nvrtc

    from witcert_cupy._cuda import extend as _cuda_extend

    if find_nvrtc() is not None:
        pytest.skip("NVRTC found: test_compiles_with_nvrtc_as_cupy_does checks the wgmma path")

    cmd = [NVCC, "--cubin", "-gencode=arch=compute_90a,code=sm_90a", "-ftz=true", "-Xptxas", "-v", "-Werror",
           "all-warnings", *_cuda.options(), *_cuda_extend.kernel_options(True)[1:], "-DWITCERT_INSTANTIATE_ALL",
           "-I", str(_cuda.kernel_dir()), str(_cuda.kernel_dir() / "extend_tc.cu"), "-o", str(tmp_path / "k.cubin")]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    assert "warning" not in log.lower(), log  # ptxas warns when it must serialize wgmma
    # ptxas says "Potential Performance Loss" when it ignores setmaxnreg or serializes wgmma
    assert "performance loss" not in log.lower(), log
    entries = re.findall(r"Compiling entry function '([^']+)'", log)
    spills = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(entries) == 9 and len(spills) >= 9, log  # stage 1 for G = 1..8, and the prepass
    assert not [s for s in spills if any(int(v) for v in s)], spills
    for g in range(1, 9):
        assert any(f"extend_tc_stage1ILi{g}EEv" in e for e in entries), g
    assert any("extend_tc_dequant" in e for e in entries), entries
    # and the path needs the sm_90a target: plain sm_90 rejects it
    bad = subprocess.run([c if c != "-gencode=arch=compute_90a,code=sm_90a" else "-arch=sm_90" for c in cmd],
                         capture_output=True, text=True, timeout=900)
    assert bad.returncode != 0 and "wgmma" in (bad.stdout + bad.stderr)


def test_inlined_source_is_self_contained(tmp_path):
    """What CuPy compiles (headers inlined, no include path) builds on its own (where NVRTC is found,
    test_compiles_with_nvrtc_as_cupy_does compiles exactly that source)."""
    from nvrtc import find_nvrtc

    if find_nvrtc() is not None:
        pytest.skip("NVRTC found: test_compiles_with_nvrtc_as_cupy_does compiles the inlined sources")
    for name in SOURCES:
        src = tmp_path / name
        src.write_text(_cuda.inline_source(name))
        assert "#include \"" not in src.read_text()
        out = subprocess.run([NVCC, "--cubin", "-arch=sm_90", *_cuda.options(), str(src), "-o",
                              str(tmp_path / "x.cubin")], capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr


def test_philox_header_host_known_answers(tmp_path):
    exe = tmp_path / "kat"
    src = Path(__file__).parent / "cuda_host" / "philox_kat.cu"
    out = subprocess.run([NVCC, "-std=c++17", *_cuda.defines(), "-I", str(_cuda.kernel_dir()), str(src),
                          "-o", str(exe)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split("\n")
    assert lines[0] == "10 6627e8d5 e169c58d bc57ac4c 9b00dbd8"
    assert lines[1] == "10 408f276d 41c83b0e a20bc7c6 6d5451fd"
    assert lines[2] == "10 d16cfe09 94fdcceb 5001e420 24126ea1"
    assert lines[3] == "7 5f6fb709 0d893f64 4f121f81 4f730a48"
    # fields 1, 2, 3, 4 -> numerators 2j + 1 - 256
    assert lines[4:8] == ["xi -253", "xi -251", "xi -249", "xi -247"]


def test_launch_layer_block_size_is_the_kernel_s():
    src = (_cuda.kernel_dir() / "decode_v2.cu").read_text()
    assert int(re.search(r"#define V2_THREADS (\d+)", src).group(1)) == _cuda.V2_THREADS
    assert int(re.search(r"#define V2_TILE (\d+)", src).group(1)) == _cuda.V2_TILE
    assert 1 << int(re.search(r"#define V2_PLAIN_GS_SHIFT (\d+)", src).group(1)) == _cuda.V2_PLAIN_GROUP_SIZE
    src = (_cuda.kernel_dir() / "decode_i8.cuh").read_text() + (_cuda.kernel_dir() / "decode_i8_geometry.cuh").read_text()
    from witcert_cupy._cuda import geometry as geo

    assert int(re.search(r"#define I8_WARP_CH (\d+)", src).group(1)) == geo.I8_WARP_CH
    assert int(re.search(r"#define I8_TILE (\d+)", src).group(1)) == geo.I8_TILE
    assert int(re.search(r"#define I8_OUTL_MAX (\d+)", src).group(1)) == geo.I8_OUTL_MAX
    assert "__launch_bounds__(D / 2," in src and [geo.i8_threads(d) for d in (64, 128, 256)] == [32, 64, 128]
    assert sorted(p.name for p in _cuda.kernel_dir().glob("decode_i8_d*.cu")) == \
        sorted(f"decode_i8_d{d}.cu" for d in geo.I8_HEAD_DIMS)
    src = (_cuda.kernel_dir() / "decode_f16.cu").read_text()
    assert "__launch_bounds__(32 * F16_PIPES, f16_min_blocks(CERT)) decode_stage1_f16(" in src
    geom = (_cuda.kernel_dir() / "decode_f16_geometry.cuh").read_text()
    assert int(re.search(r"#define F16_PIPES (\d+)", geom).group(1)) == _cuda.F16_PIPES
    # the write path: 256 threads, 32 channels each
    from witcert_cupy._cuda import write as _cuda_write

    src = (_cuda.kernel_dir() / "write.cu").read_text()
    assert int(re.search(r"#define WR_THREADS (\d+)", src).group(1)) == _cuda_write.WRITE_THREADS
    assert int(re.search(r"#define WR_CPT (\d+)", src).group(1)) == _cuda_write.WRITE_CHANNELS_PER_THREAD
    # the extend: 8 row warps, and the two producer warpgroups on the wgmma path
    from witcert_cupy._cuda import extend as _cuda_extend

    src = (_cuda.kernel_dir() / "extend_tc.cu").read_text()
    assert "#define XT_THREADS (XT_CONSUMER_THREADS + 32 * XT_PRODUCER_WARPS * XT_WGMMA)" in src
    assert "__launch_bounds__(XT_THREADS, 1) extend_tc_stage1(" in src
    assert (_cuda_extend.block_threads(False), _cuda_extend.block_threads(True)) == (256, 512)
    # and its shared memory fits the 227 KB a CTA may opt into on sm_90
    assert _cuda_extend.smem_bytes() <= 227 * 1024


def test_dot_heights_are_the_kernels_summation_orders():
    """The evaluation term is computed for each kernel's summation tree (geometry.stage1_dot_height):
    the constants it is built from are the sources' own."""
    from witcert_cupy._cuda import geometry as geo

    src = (_cuda.kernel_dir() / "decode.cu").read_text()
    assert int(re.search(r"#define VEC (\d+)", src).group(1)) == geo.GENERAL_VEC
    # the lanes of a row summed by butterfly (a pairwise tree), after each lane's chain over VEC channels
    assert "for (int off = 1; off < lpt; off <<= 1)" in src and "group_sum<G>(dot, LPT);" in src
    src = (_cuda.kernel_dir() / "decode_v2.cu").read_text()
    assert f"static constexpr bool blocked_dot = G <= {geo.V2_BLOCKED_DOT_MAX_G};" in src
    assert "dot[g] = BLOCKED ? dot[g] + part : part;" in src
    assert "constexpr bool BLOCKED = Tune::blocked_dot || !PLAIN;" in src
    assert f"for (int k = 0; k < D / {geo.V2_CHUNK}; ++k)" in src
    # heights: 8 + 4 (d = 128 over 16 lanes), 16 + 7, and a chain's 128
    assert geo.stage1_dot_height("v1", 128, 4, split=False) == 12
    assert geo.stage1_dot_height("v2", 128, 6, split=False) == 23
    assert geo.stage1_dot_height("v2", 128, 7, split=True) == 23
    assert geo.stage1_dot_height("v2", 128, 7, split=False) == 128
    assert geo.stage1_dot_height("v2", 128, 7, split=False, plain=False) == 23
    src = (_cuda.kernel_dir() / "decode_f16.cu").read_text()
    assert "constexpr int CH = D;" in src and "dot[g] = keep + __shfl_xor_sync(FULL, give, 16);" in src
    assert geo.F16_HALF == 128 // 2 and geo.stage1_dot_height("f16", 128, 4, split=False) == 65
    # decode_stage1_i8's exact-tier tokens: a chain over the warp's channels, the warps' parts pairwise
    from witcert_cupy import certificate

    src = (_cuda.kernel_dir() / "decode_i8.cuh").read_text()
    assert certificate.FORM_I_EXACT_ORDER == (geo.I8_WARP_CH, "tree")
    assert "for (int c = 0; c < I8_WARP_CH; c += 4) {" in src and "acc = __fadd_rn(acc, p[c]), aac = __fadd_rn(aac, fabsf(p[c]));" in src
    assert "i8_exact_dot4(qv, x0, acc0, aac0);" in src and "i8_exact_dot4(qv, x1, acc1, aac1);" in src
    assert "ad[ww] = __fadd_ru(ad[ww], ad[ww + span]);" in src and "lt[n][0] = __fmul_rn(pw[0].x, SL);" in src
    assert [certificate.sum_height(d, *certificate.FORM_I_EXACT_ORDER) for d in (64, 128, 256)] == [64, 65, 66]


def _host_program_lines(name, tmp_path):
    """The output lines of tests/cuda_host/``name``, built by nvcc with the contract's defines against
    the kernel headers and run on the host."""
    exe = tmp_path / "host_prog"
    src = Path(__file__).parent / "cuda_host" / name
    out = subprocess.run([NVCC, "-std=c++17", *_cuda.defines(), "-I", str(_cuda.kernel_dir()), str(src), "-o",
                          str(exe)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.strip().split("\n")


def test_f16_launch_geometry_is_the_kernel_s(tmp_path):
    """decode_stage1_f16's splits per CTA and dynamic shared memory as the launch layer computes them
    (witcert_cupy/_cuda/) equal the kernel source's constexpr helpers, run on the host; and every
    CTA fits what an sm_90 SM gives (227 KB a CTA, 228 KB an SM with 1 KB kept per CTA) at the
    CTAs per SM its register bound is set for."""
    lines = _host_program_lines("f16_smem.cu", tmp_path)
    assert len(lines) == 8 * 4 * 2
    for line in lines:
        (G, NB, a), (pipes, smem, min_plain, min_cert) = (list(map(int, x.split())) for x in line.split("->"))
        assert (pipes, smem) == (_cuda.f16_pipes(), _cuda.f16_smem_bytes(G, NB, a)), line
        assert smem <= 227 * 1024, line
        if not a:  # the uncertified one-warp pipelines: 12 warps per SM
            assert min_plain * (smem + 1024) <= 228 * 1024 and min_plain * pipes == 12, line


def test_i8_shared_memory_is_the_kernel_s(tmp_path):
    """decode_stage1_i8's dynamic shared memory as the launch layer computes it is the kernel's
    i8_smem_total at every head dim, G and feature set (the kernel traps when given less), and its
    CTAs per SM at that size reach the warps per SM its register bound is set for; at d = 128 the
    gate's pool under a Tier-AB certificate (the exact tier, 16 witness bands) fits as many up to
    G = 7, and two outlier pairs under one up to G = 6 (at d = 128 neither fit at any G while the
    partial logits and sums had the mma's 8 rows at every G and the warps' exchange at the end had
    its own space)."""
    from witcert_cupy._cuda import geometry as geo

    lines = _host_program_lines("i8_smem.cu", tmp_path)
    got = {(int(d), int(g)): tuple(int(v) for v in rest) for d, g, *rest in (ln.split() for ln in lines)}

    def mirror(d, g):
        b = geo.i8_smem_bytes
        return (b(d, heads=g), b(d, exact=True, heads=g), b(d, num_bands=8, heads=g), b(d, num_bands=64, heads=g),
                b(d, outlier_channels=4, heads=g), b(d, outlier_channels=geo.I8_OUTL_MAX, heads=g),
                b(d, exact=True, num_bands=16, heads=g), b(d, outlier_channels=4, num_bands=16, heads=g),
                b(d, bits=16, heads=g), b(d, exact=True, bits=16, heads=g),
                b(d, outlier_channels=geo.I8_OUTL_MAX, bits=16, heads=g))

    def fits(ctas, smem):  # 228 KB an SM, 1 KB kept per CTA
        return ctas * (smem + 1024) <= 228 * 1024

    assert got == {(d, g): mirror(d, g) for d in geo.I8_HEAD_DIMS for g in range(1, 9)}
    for (d, g), (plain, exact, _, _, o4, _, gate_ab, o4_ab, s16, s16x, s16o) in got.items():
        # 12 warps per SM (8 with the exact tier), with up to two outlier pairs still 12; at 16-bit
        # dither the 8 warps its register bound is set for, with the exact tier or the most outlier pairs
        per_sm, wide = 12 * geo.I8_WARP_CH // d, 8 * geo.I8_WARP_CH // d
        assert fits(per_sm, plain) and fits(wide, exact) and fits(per_sm, o4), (d, g)
        assert fits(wide, max(s16, s16x, s16o)), (d, g)
        assert fits(per_sm, gate_ab) == {64: g <= 3, 128: g <= 7, 256: True}[d], (d, g, gate_ab)
        assert fits(per_sm, o4_ab) == {64: False, 128: g <= 6, 256: True}[d], (d, g, o4_ab)


def test_source_hash_tracks_every_file():
    h = _cuda.sources_hash()
    assert re.fullmatch(r"[0-9a-f]{16}", h)
    assert any(f"WITCERT_SRC_HASH=0x{h}" in o for o in _cuda.options())


def _nvrtc_check(name, one_g=None):
    """NVRTC as CuPy compiles ``name`` (at ``one_g`` alone for a decode source): no warnings, no
    stack frames or spills (NVRTC 13.0's allowance aside), every instance there; the inlined
    source.  Skips where no libnvrtc is found."""
    from nvrtc import compile_nvrtc, find_nvrtc, nvrtc_version

    if find_nvrtc() is None:
        pytest.skip("libnvrtc not found (pip install nvidia-cuda-nvrtc)")
    src = _cuda.inline_source(name)
    # -default-device: NVRTC 13.0 (the device machine's CuPy) reads a generic lambda's call operator
    # inside an explicitly instantiated kernel (this check's instantiations) as a host function and
    # refuses it, where the implicit instantiation CuPy makes from a name expression compiles; every
    # function of ours is annotated, so the option changes nothing else (newer NVRTC needs no option)
    opts = ["-arch=sm_90", "-ftz=true", "--ptxas-options=-v", "-default-device", *_scope_defines(name, one_g),
            *_cuda.options()]
    ok, log = compile_nvrtc(src, name, opts)
    assert ok, log
    assert "warning" not in log.lower(), log
    entries = _entries_without_local_memory(log, NVRTC_13_0_SPILLS if nvrtc_version() == (13, 0) else None)
    _assert_instances(name, entries, one_g)
    return src


G_SOURCES = tuple(n for n in SOURCES if _g_classes(n))


@pytest.mark.skipif(not _every_g(), reason="WITCERT_COMPILE_EVERY_G=1 (the GPU session's step); CI compiles G classes")
@pytest.mark.parametrize("g", range(1, 9))
@pytest.mark.parametrize("name", G_SOURCES)
def test_decode_compiles_at_every_g_with_nvrtc(name, g):
    """The every-G check, a G per compile (-DWITCERT_ONE_G) so that a machine's cores share it: the
    G classes CI compiles are nvcc's and NVRTC 13.5's, and NVRTC 13.0's ptxas spilled at G that CI's
    classes stood for (docs/performance.md)."""
    _nvrtc_check(name, g)


@pytest.mark.parametrize("name", SOURCES)
def test_compiles_with_nvrtc_as_cupy_does(name):
    """NVRTC, with CuPy's own additions (-arch, -ftz=true) and our options, on the inlined source,
    every instantiation (each one the library launches is there; the decode kernels' at their G
    classes): no warnings, no stack frames or
    spills.  NVRTC is what CuPy builds with,
    and its ptxas is not nvcc's: nvcc 13.0 found no spills in the kernels where NVRTC 13.0.88 (and
    the device) found 8–40 bytes (docs/performance.md)."""
    from nvrtc import compile_nvrtc

    src = _nvrtc_check(name)
    if name == "extend_tc.cu":  # the wgmma path as the launch layer builds it: its -arch beside CuPy's
        from witcert_cupy._cuda import extend as _cuda_extend

        ok, log = compile_nvrtc(src, name, [*_cuda.options(), *_cuda_extend.kernel_options(True), "-arch=sm_90",
                                            "-ftz=true", "--ptxas-options=-v", "-DWITCERT_INSTANTIATE_ALL"])
        assert ok, log
        assert "warning" not in log.lower() and "performance loss" not in log.lower(), log
        assert len(_entries_without_local_memory(log)) == 9  # stage 1 for G = 1..8, and the prepass
        # ... and the path needs the sm_90a target: plain sm_90 rejects it
        opts = [o for o in _cuda_extend.kernel_options(True) if o != "-arch=sm_90a"]
        ok, log = compile_nvrtc(src, name, [*_cuda.options(), *opts, "-arch=sm_90", "-ftz=true",
                                            "-DWITCERT_INSTANTIATE_ALL"])
        assert not ok and "wgmma" in log, log[-2000:]


def test_kernels_found_in_the_wheel_layout(tmp_path):
    """Installed, the sources sit in witcert_cupy/cuda/ (pyproject package-data); the loader finds
    them there before looking for a checkout's ../cuda."""
    import shutil
    import subprocess
    import sys

    pkg = Path(_cuda.__file__).resolve().parents[1]  # the package (_cuda is a subpackage)
    shutil.copytree(pkg, tmp_path / "witcert_cupy", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(_cuda.kernel_dir(), tmp_path / "witcert_cupy" / "cuda")
    out = subprocess.run([sys.executable, "-c", "from witcert_cupy import _cuda; print(_cuda.kernel_dir())"],
                         cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == tmp_path / "witcert_cupy" / "cuda"


def test_merge_shared_memory_formula_is_the_kernel_s():
    src = (_cuda.kernel_dir() / "decode.cu").read_text()
    assert "#define MG_PAD(ns) (((ns) + 3) & ~3)" in src
    assert "constexpr int merge_smem_floats(int ns) { return 3 * MG_PAD(ns) + 4; }" in src
    assert [_cuda.merge_smem_floats(n) for n in (1, 4, 5, 64, 4096)] == [16, 16, 28, 196, 12292]
    # the prefetched o_part rows sit right after the statistics, 16-byte aligned
    assert "float* ob_s = mg_s + merge_smem_floats(ns);" in src
    assert _cuda.merge_smem_bytes(64, 128) == (4 * (196 + 64 * 128), True)
    assert _cuda.merge_smem_bytes(128, 128)[1] and not _cuda.merge_smem_bytes(192, 128)[1]
    assert _cuda.merge_smem_bytes(8, 6) == (4 * _cuda.merge_smem_floats(8), False)  # d % 4 != 0
    assert _cuda.merge_smem_bytes(4096, 128, prefetch=False) == (4 * 12292, False)


