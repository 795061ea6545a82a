"""The graph and tensor-parallel APIs refuse bad input on a machine without a GPU, with errors that
name the argument (the GPU behaviour is in tests/test_graph.py and tests/test_sharded.py)."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy.sharded import ShardedKVPool, pack_telemetry, reduce_telemetry, snapshot_from_packed


def _cpu_pool():
    return wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend="cpu")


def test_decode_plan_is_for_gpu_pools():
    pool = _cpu_pool()
    kw = dict(layer=0, kv_indptr=np.array([0, 1]), kv_indices=np.array([0]), kv_last_page_len=np.array([3]))
    with pytest.raises(ValueError, match="GPU pools"):
        wc.decode_plan(np.zeros((1, 8, 128), np.float32), pool, **kw)
    with pytest.raises(TypeError, match="pool"):
        wc.decode_plan(np.zeros((1, 8, 128), np.float32), "not a pool", **kw)


def test_captured_step_checks_its_arguments_before_touching_a_gpu():
    with pytest.raises(TypeError, match="fn must be callable"):
        wc.CapturedStep(3)
    with pytest.raises(TypeError, match="pools"):
        wc.CapturedStep(lambda: None, pools=[_cpu_pool()])


def test_packed_telemetry_round_trip_on_the_cpu():
    """pack -> sum -> snapshot equals the single-object snapshot, for one rank holding every head."""
    rng = np.random.default_rng(0)
    t = wc.Telemetry(2, 8, wc.CertConfig(tau=0.2))
    for step in range(3):
        for layer in range(2):
            r = rng.exponential(0.2, size=(3, 8))
            r[0, 1] = np.inf
            t.record(layer, r, 2)
    snap = snapshot_from_packed(pack_telemetry(t, 0, 8), 2, 8, 3, 0.2)
    ref = t.snapshot()
    for key in ("steps", "cells", "coverage", "overflow_fraction", "kv_coverage", "max_r_finite"):
        assert snap[key] == ref[key], key
    assert np.isclose(snap["mean_r_finite"], ref["mean_r_finite"], rtol=1e-12)
    assert np.array_equal(snap["head_exceed"], ref["head_exceed"])
    assert reduce_telemetry([t], [0], 8)["cells"] == ref["cells"]
    with pytest.raises(ValueError, match="query heads"):
        pack_telemetry(t, 4, 8)
    with pytest.raises(ValueError, match="at least one"):
        reduce_telemetry([], [], 8)


def test_sharded_pool_arguments():
    with pytest.raises(ValueError, match="world_size"):
        ShardedKVPool(1, 4, 128, 4, 16, wc.QuantConfig(128), world_size=3, backend="cpu")
    with pytest.raises(ValueError, match="devices"):
        ShardedKVPool(1, 4, 128, 4, 16, wc.QuantConfig(128), world_size=2, devices=[0], backend="cpu")
    with pytest.raises(TypeError, match="config"):
        ShardedKVPool(1, 4, 128, 4, 16, None, world_size=2, backend="cpu")


def test_python_examples_import_and_show_help_without_a_gpu():
    """The GPU-only examples still load on a CPU machine: argument parsing and imports work."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "python" / "tp_decode.py"), "--help"], capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "--worlds" in out.stdout and "--check" in out.stdout
    src = (root / "python" / "jax_interop.py").read_text()
    compile(src, "jax_interop.py", "exec")  # the JAX example is exercised on the H200 (test_llama.py)
