"""The launch layer's cuLaunchKernelEx mirror (witcert_cupy/_cuda/pdl.py), on the CPU machine: its ctypes
structures against cuda.h's layout as the host compiler lays it out, and its argument checks.  The
launches themselves run on the GPU (tests/test_gpu.py::test_pdl_launch_gives_the_same_bits)."""

import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from witcert_cupy._cuda import pdl as _launch

NVCC = shutil.which("nvcc")

_ABI_PROBE = r"""
#include <cuda.h>
#include <cstddef>
#include <cstdio>
int main() {
    std::printf("%zu %zu %zu %zu %zu %zu %zu %d\n", sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, sharedMemBytes),
                offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs),
                offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),
                (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
    return 0;
}
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_ctypes_structures_match_cuda_h(tmp_path):
    """A wrong offset would hand the driver a garbage stream or attribute: every field the launcher
    writes sits where cuda.h puts it, and the attribute id is cuda.h's."""
    src, exe = tmp_path / "abi.cpp", tmp_path / "abi"
    src.write_text(_ABI_PROBE)
    subprocess.run([NVCC, "-o", str(exe), str(src)], check=True, capture_output=True, text=True)
    got = [int(v) for v in subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()]
    C, A = _launch._Config, _launch._Attr
    assert got == [ctypes.sizeof(C), C.sharedMemBytes.offset, C.hStream.offset, C.attrs.offset,
                   C.numAttrs.offset, ctypes.sizeof(A), A.value.offset,
                   _launch._PROGRAMMATIC_STREAM_SERIALIZATION]


def test_launcher_refuses_arguments_without_a_c_type():
    """Every scalar goes to the kernel as an explicit NumPy type; a Python int (no C width) or an
    unsupported NumPy type is refused before anything launches, naming the argument."""
    for bad, where in (((np.int32(1), 5), "argument 1"), ((np.float16(1),), "argument 0"),
                       ((np.int32(1), np.float32(2), "x"), "argument 2")):
        with pytest.raises(TypeError, match=where):
            _launch.Launcher(None, (1,), (32,), bad, pdl=True)


def test_launcher_checks_its_geometry():
    for grid, block in (((0,), (32,)), ((1, 1, 1, 1), (32,)), ((1,), ()), ((4,), (32, 0))):
        with pytest.raises(ValueError, match="grid and block"):
            _launch.Launcher(None, grid, block, (np.int32(1),), pdl=True)


def test_scalars_reach_the_parameter_block_with_their_c_width():
    """The parameter block's entries point at values of the kernel's C types, bit for bit (the
    driver copies sizeof(param) bytes from each address)."""
    vals = (np.int32(-7), np.uint32(0xFFFFFFF0), np.int64(-(2**40)), np.uint64(2**63 + 5), np.float32(1.5),
            np.float64(-2.25))
    got = [_launch._c_arg(i, v) for i, v in enumerate(vals)]
    assert [ctypes.sizeof(g) for g in got] == [4, 4, 8, 8, 4, 8]
    for g, v in zip(got, vals):
        assert ctypes.string_at(ctypes.addressof(g), ctypes.sizeof(g)) == v.tobytes()


def test_the_environment_switch():
    """WITCERT_PDL: unset or "1" launches with PDL, "0" without; anything else is refused by name
    (at import of the launch layer: a typo must not silently change how kernels launch)."""
    assert _launch.pdl_enabled({}) and _launch.pdl_enabled({"WITCERT_PDL": "1"})
    assert not _launch.pdl_enabled({"WITCERT_PDL": "0"})
    for bad in ("", "yes", "true", " 1"):
        with pytest.raises(ValueError, match="WITCERT_PDL"):
            _launch.pdl_enabled({"WITCERT_PDL": bad})


def test_the_launch_layer_reads_the_switch_at_import():
    """witcert_cupy._cuda.launch.PDL follows the environment of the process that imports it."""
    code = "from witcert_cupy._cuda import launch; print(launch.PDL)"
    for value, want in (("0", "False"), ("1", "True")):
        env = dict(os.environ, WITCERT_PDL=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want
    env = dict(os.environ, WITCERT_PDL="on")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "WITCERT_PDL must be '0' or '1'" in out.stderr
