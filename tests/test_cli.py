"""`witcert demo` (the main job) and the synthetic source behind it."""

import json
import subprocess
import sys

import numpy as np
import pytest

from witcert_cupy.demo import run_demo, synthetic_inputs
from witcert_cupy.synthetic import SyntheticModel, calibrate_outlier_pairs


def _cli(*args):
    out = subprocess.run([sys.executable, "-m", "witcert_cupy.cli", *args], capture_output=True, text=True,
                         timeout=600)
    return out


def test_demo_json_small():
    out = _cli("demo", "--json", "--backend", "cpu", "--context", "600", "--steps", "3", "--layers", "1")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["violations"] == 0
    assert r["cells"] == 1 * 8 * 3 * 2
    assert 0.0 <= r["coverage_at_tau"] <= 1.0
    assert r["tv_bound"]["median"] >= r["true_tv"]["median"]
    assert r["bytes_per_token"] < r["fp16_bytes_per_token"]


def test_demo_text_report_and_progress():
    out = _cli("demo", "--backend", "cpu", "--context", "300", "--steps", "2", "--layers", "1", "--batch", "1",
               "--tier", "B")
    assert out.returncode == 0, out.stderr
    assert "coverage at tau" in out.stdout and "violations        0" in out.stdout
    assert "[demo] step 2/2" in out.stderr


def test_demo_on_captured_npz(tmp_path):
    model = SyntheticModel(num_layers=2, num_kv_heads=2, group=2, head_dim=64, seed=3)
    K, V, Q = synthetic_inputs(model, context=400, steps=3, seed=1)
    f = tmp_path / "acts.npz"
    np.savez(f, k=K, v=V, q=Q)
    out = _cli("demo", "--json", "--backend", "cpu", "--input", str(f))
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["source"] == str(f) and r["shape"]["context_lengths"] == [400]
    assert r["cells"] == 2 * 4 * 3 and r["violations"] == 0
    np.savez(tmp_path / "bad.npz", k=K, v=V)
    with pytest.raises(ValueError, match="missing array 'q'"):
        run_demo(input_path=tmp_path / "bad.npz", quiet=True)


def test_info():
    out = _cli("info")
    assert out.returncode == 0 and "witcert_cupy" in out.stdout


def test_calibration_finds_massive_pairs():
    model = SyntheticModel(num_layers=2, num_kv_heads=3, head_dim=128, n_massive=2, seed=5)
    K = np.stack([model.keys_values(layer, np.arange(300))[0] for layer in range(2)])
    pairs = calibrate_outlier_pairs(K, 2)
    assert pairs.shape == (2, 3, 2) and pairs.dtype == np.int32
    assert np.array_equal(pairs, np.sort(model.massive_pairs, axis=-1))
    with pytest.raises(ValueError, match="keys"):
        calibrate_outlier_pairs(K[0], 2)


def test_readme_example_runs():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    ns = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - our own README
    res = ns["res"]
    assert res.o.shape == (1, 8, 128) and np.all(res.tv_bound >= 0) and np.all(res.tv_bound <= 1)



def test_report_renders_on_cpu(tmp_path):
    out = _cli("report", "--backend", "cpu", "--quiet", "--layers", "1", "--context", "300", "--steps", "2",
               "--out", str(tmp_path / "rep"))
    assert out.returncode == 0, out.stderr
    rep = json.loads((tmp_path / "rep" / "report.json").read_text())
    names = [r["config"] for r in rep["rows"]]
    assert "int8 (2 exact pairs)" in names and "fp8_e4m3" in names
    for r in rep["rows"]:
        assert r["violations"] == 0
        assert len(r["scatter"]["bound"]) == len(r["scatter"]["true_tv"]) == 1 * 8 * 2
        g = r["gated_last_step"]  # the gate brings every head of the last step under tau ...
        assert g["coverage_at_tau"] == 1.0 and g["output_rel_err_max"] <= r["output_rel_err_max"] + 1e-9
        # ... paging in at most the whole cache, and nothing where nothing exceeded tau
        assert 0 <= g["bytes_paged_in"] <= g["bytes_whole_cache"]
        assert (g["pages_repaired"] == 0) == (g["bytes_paged_in"] == 0)
        if r["kind"] == "int8":
            assert len(r["risk_coverage_curve"]) == len(rep["deltas"])
            assert r["risk_coverage_curve"] == sorted(r["risk_coverage_curve"])  # looser δ, more coverage
    for png in ("risk_coverage.png", "bound_vs_true.png"):
        assert (tmp_path / "rep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "witcert report" in out.stdout


def test_version():
    from witcert_cupy import __version__

    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"witcert_cupy {__version__}"


@pytest.mark.parametrize("args,flag", [
    (("demo", "--steps", "0"), "--steps"), (("demo", "--batch", "0"), "--batch"),
    (("demo", "--context", "5", "--steps", "10"), "--context"), (("demo", "--tau", "-1"), "--tau"),
    (("demo", "--delta-req", "1.5"), "--delta-req"), (("demo", "--layers", "two"), "--layers"),
    (("demo", "--head-dim", "63"), "--head-dim"), (("demo", "--witness-bands", "7"), "--witness-bands"),
    (("demo", "--outlier-pairs", "-1"), "--outlier-pairs"), (("report", "--steps", "0"), "--steps"),
    (("report", "--context", "2", "--steps", "3"), "--context")])
def test_bad_values_name_their_flag(args, flag):
    """A bad value ends in a usage message naming its flag (exit 2), before any work, never a traceback."""
    out = _cli(*args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert flag in out.stderr and "Traceback" not in out.stderr


def test_report_without_matplotlib_names_the_extra(tmp_path):
    """``witcert report`` checks for matplotlib before it computes anything and names the extra."""
    stub = tmp_path / "nompl"
    stub.mkdir()
    # a sitecustomize that makes matplotlib unimportable (find_spec gives None, import fails)
    (stub / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    import os

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(stub), *sys.path]))
    out = subprocess.run([sys.executable, "-m", "witcert_cupy.cli", "report", "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2 and "witcert_cupy[plot]" in out.stderr, out.stderr
    assert not (tmp_path / "r").exists()


def test_a_flag_prefix_is_not_taken_for_another_flag():
    """``--out`` is no flag of ``demo``: argparse's prefix matching once read it as ``--outlier-pairs``
    and reported a bad integer; now it is an unknown argument."""
    out = _cli("demo", "--out", "x")
    assert out.returncode == 2 and "unrecognized arguments: --out" in out.stderr, out.stderr
