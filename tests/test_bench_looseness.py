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
