"""The launch layer's cuLaunchKernelEx launcher (witcert_cupy/_cuda/pdl.py), on the CPU machine: the
configuration it hands cuda.bindings, and its argument checks.  The launches themselves run on the
GPU (tests/test_gpu.py::test_pdl_launch_gives_the_same_bits)."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from witcert_cupy._cuda import pdl as _launch


def test_launch_configuration_through_cuda_bindings():
    """The launcher hands cuda.bindings a configuration with its grid, block, shared memory and the
    one programmatic-serialization attribute (built once; a launch sets only the stream)."""
    cu = pytest.importorskip("cuda.bindings.driver")
    L = _launch.Launcher(None, (7, 3), (128,), (np.int32(1), np.float32(2.0)), shared_mem=4096, pdl=True)
    c = L._config
    assert (c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ) == (7, 3, 1, 128, 1, 1)
    assert c.sharedMemBytes == 4096 and c.numAttrs == 1
    (attr,) = c.attrs
    assert attr.id == cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attr.value.programmaticStreamSerializationAllowed == 1
    assert len(L._params) == 2 and L._params[1] == ctypes.addressof(L._values[1])


def test_without_cuda_bindings_pdl_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(_launch, "_driver", lambda: None)
    with pytest.raises(RuntimeError, match="cuda.bindings"):
        _launch.Launcher(None, (1,), (32,), (np.int32(1),), pdl=True)


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
