"""bench/looseness.py's ``--shapes`` entries: 'demo' or a shape read by the benchmarks' one parser
(bench/shapes.py), a refusal naming the flag before anything runs (no GPU needed)."""

import sys
from pathlib import Path

import pytest

from helpers import load_script

_BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))
looseness = load_script("bench/looseness.py")


@pytest.mark.parametrize("spec", ["8/32/8", "2/30/8/4096", "0/32/8/4096", "a/32/8/4096", "2/32/8/4", "demo2"])
def test_bad_entries_are_refused_naming_the_flag(spec):
    with pytest.raises(SystemExit) as e:
        looseness.runs(spec)
    assert str(e.value).startswith("--shapes:") and repr(spec) in str(e.value)


def test_entries_become_runs():
    assert looseness.runs("demo") == [("demo", {})]
    (name_ab, ab), (name_b, b) = looseness.runs("2/28/4/4096")
    assert (ab["batch"], ab["kv_heads"], ab["group"], ab["context"]) == (2, 4, 7, 4096)
    assert b["tier"] == "B" and b["n_outlier_pairs"] == 0 and "AB" in name_ab and name_b.endswith("B plain")


def test_the_switch_removes_every_term_and_restores_them():
    from witcert_cupy import _contract as C
    from witcert_cupy import certificate
    from witcert_cupy._cuda import build

    shipped = (certificate.kernel_scalars, certificate.form_i_scalars, certificate.form_i_gamma,
               C.FORM_I_RESIDUAL_BOUND, C.FORM_I_DROPPED_BOUND_16, build.options())
    beta = certificate.form_i_scalars(128, 0.125, 16)[0]
    assert certificate.form_i_gamma(True) > 0 and certificate.form_i_scalars(128, 0.125)[2] > 0
    with looseness.evaluation_term_removed("cuda"):
        assert certificate.form_i_gamma(True) == 0
        assert certificate.form_i_scalars(128, 0.125, 16) == (beta, 0, 0)
        assert certificate.kernel_scalars(128, 0.125, 8)[1:] == (0, 0)
        opts = build.options()
        for name in looseness._FORM_I_BOUNDS:  # the form-(I) kernel compiles without its bounds
            assert f"-DWC_{name}=0.0f" in opts
        assert opts != shipped[-1]
    assert (certificate.kernel_scalars, certificate.form_i_scalars, certificate.form_i_gamma,
            C.FORM_I_RESIDUAL_BOUND, C.FORM_I_DROPPED_BOUND_16, build.options()) == shipped
