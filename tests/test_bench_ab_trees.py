"""bench/lab/ab_trees.py's command line: a case names a configuration, a shape, optionally a forced
kernel, 'clear' and a split count for both trees; what is wrong is refused by name before anything is
built (no GPU needed)."""

import pytest

from helpers import load_script

ab = load_script("bench/lab/ab_trees.py")
CONFIGS = {"tier_b_8": None, "gate_step": None}


def test_cases_parse():
    assert ab.parse_case("gate_step:1/32/8/4096", CONFIGS) == ("gate_step", (1, 32, 8, 4096), "auto", False, None)
    assert ab.parse_case("gate_step:8/28/4/32768:i8:clear", CONFIGS) == ("gate_step", (8, 28, 4, 32768), "i8", True,
                                                                         None)
    assert ab.parse_case("tier_b_8:1/32/8/4096:clear", CONFIGS) == ("tier_b_8", (1, 32, 8, 4096), "auto", True, None)
    assert ab.parse_case("tier_b_8:8/32/8/32768:ns=12", CONFIGS) == ("tier_b_8", (8, 32, 8, 32768), "auto", False, 12)
    assert ab.parse_case("gate_step:8/28/4/32768:i8:ns=24:clear", CONFIGS) == ("gate_step", (8, 28, 4, 32768), "i8",
                                                                               True, 24)


@pytest.mark.parametrize("text, says", [
    ("nope:1/32/8/4096", "CONFIG one of tier_b_8, gate_step"),
    ("gate_step", "CONFIG one of"),
    ("gate_step:1/32/8", "the shape is B/Hq/Hkv/context"),
    ("gate_step:1/30/8/4096", "Hq a multiple of Hkv"),
    ("gate_step:0/32/8/4096", "positive integers"),
    ("gate_step:1/32/8/4096:v9", "STAGE1 is one of"),
    ("gate_step:1/32/8/4096:i8:v2", "STAGE1 is one of"),
    ("gate_step:1/32/8/4096:ns=0", "ns=N takes one positive split count"),
    ("gate_step:1/32/8/4096:ns=x", "ns=N takes one positive split count"),
    ("gate_step:1/32/8/4096:ns=4:ns=8", "ns=N takes one positive split count"),
])
def test_bad_cases_are_refused_by_name(text, says):
    with pytest.raises(ValueError, match=says):
        ab.parse_case(text, CONFIGS)


@pytest.mark.parametrize("argv, flag", [(["/nonexistent", "gate_step:1/32/8/4096"], "baseline"),
                                        (["{tree}", "gate_step:1/32/8/4096", "--reps", "0"], "--reps")])
def test_arguments_are_checked_before_any_import(argv, flag, tmp_path, capsys):
    (tmp_path / "witcert_cupy").mkdir()
    with pytest.raises(SystemExit) as e:
        ab.main([a.replace("{tree}", str(tmp_path)) for a in argv])
    assert e.value.code == 2 and flag in capsys.readouterr().err
