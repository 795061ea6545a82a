"""bench/lab/kernel_pair.py's command line: what is wrong is refused by name before anything is
built (no GPU needed)."""

import pytest

from helpers import load_script

kp = load_script("bench/lab/kernel_pair.py")
CONFIGS = {"tier_b_16": None, "witness_ab_16": None}


def test_cases_parse():
    assert kp.check_cases(["tier_b_16:8/32/8/32768", "witness_ab_16:1/32/8/4096"], CONFIGS) == \
        [("tier_b_16", (8, 32, 8, 32768)), ("witness_ab_16", (1, 32, 8, 4096))]


@pytest.mark.parametrize("text, says", [
    ("nope:1/32/8/4096", "CONFIG one of tier_b_16, witness_ab_16"),
    ("tier_b_16:1/32/8/4096:i8", "both kernels run on every case"),
    ("tier_b_16:1/32/8/4096:clear", "both kernels run on every case"),
    ("tier_b_16:1/32/8/4096:ns=8", "both kernels run on every case"),
])
def test_cases_refused_by_name(text, says):
    with pytest.raises(ValueError, match=says):
        kp.check_cases([text], CONFIGS)


@pytest.mark.parametrize("argv, says", [
    (["tier_b_16:1/32/8/4096", "--bits", "12"], "--bits"),
    (["tier_b_16:1/32/8/4096", "--reps", "0"], "--reps must be >= 1"),
])
def test_flags_refused_by_name(argv, says, capsys):
    with pytest.raises(SystemExit):
        kp.main(argv)
    assert says in capsys.readouterr().err
