"""bench/cert_cost.py's command line: the configurations and shapes it is asked for are checked
before anything runs, and a refusal names the flag (no GPU needed)."""

import sys
from pathlib import Path

import pytest

from helpers import load_script

_BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))
cert_cost = load_script("bench/cert_cost.py")


@pytest.mark.parametrize("argv, flag", [
    (["--configs", "tier_b_9"], "--configs"),
    (["--configs", ","], "--configs"),
    (["--shapes", "8/32/8"], "--shapes"),
    (["--shapes", "8/30/8/32768"], "--shapes"),    # Hq not a multiple of Hkv
    (["--shapes", "1/32/8/4008"], "--shapes"),     # not whole pages
    (["--shapes", "0/32/8/4096"], "--shapes"),
    (["--shapes", "a/32/8/4096"], "--shapes"),
    (["--reps", "0"], "--reps"),
])
def test_refusals_name_the_flag(argv, flag, tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(cert_cost, "measure", lambda args: ran.append(args))
    (tmp_path / "witcert_cupy").mkdir()
    with pytest.raises(SystemExit) as e:
        cert_cost.main(["--baseline", str(tmp_path), *argv])
    assert e.value.code == 2 and flag in capsys.readouterr().err and not ran


def test_a_selection_reaches_the_measurement(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(cert_cost, "measure", lambda args: ran.append(args))
    (tmp_path / "witcert_cupy").mkdir()
    assert cert_cost.main(["--baseline", str(tmp_path), "--configs", "fp16_store_tier_a",
                           "--shapes", "1/32/8/4096,8/28/4/32768"]) == 0
    assert ran[0].configs == ["fp16_store_tier_a"] and ran[0].shapes == [(1, 32, 8, 4096), (8, 28, 4, 32768)]
    ran.clear()
    assert cert_cost.main(["--baseline", str(tmp_path)]) == 0  # the defaults: every configuration and shape
    assert ran[0].configs == [c[0] for c in cert_cost.CONFIGS] and ran[0].shapes == list(cert_cost.SHAPES)


def test_alternate_times_the_names_in_turn_and_takes_medians():
    order = []

    def time_fn(fs, reps):
        order.append((fs[0](), reps))
        return (float(len(order)), [])

    med, times = cert_cost.alternate({"base": [lambda: "b"], "this": [lambda: "t"]}, 7, 3, time_fn,
                                     enter=lambda k: order.append(k))
    assert order[:4] == ["base", ("b", 7), "this", ("t", 7)]
    assert times == {"base": [2.0, 6.0, 10.0], "this": [4.0, 8.0, 12.0]} and med == {"base": 6.0, "this": 8.0}
