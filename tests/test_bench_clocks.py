"""bench/gpu_clocks.py, the clock sampler beside every timed benchmark row: its summary of samples
(CPU: pynvml's constants, no NVML library needed), and that it neither starts a thread nor invents numbers without NVML."""

import time

import pytest

from helpers import load_script

gpu_clocks = load_script("bench/gpu_clocks.py")


def test_summary_of_samples():
    pytest.importorskip("pynvml")  # the reasons' bits are NVML's
    s = gpu_clocks.ClockSampler()
    # (sm MHz, mem MHz, °C, W, reason bits): idle between launches is dropped, a power cap is named
    s.samples = [(1980, 3201, 40, 300.0, 0x1), (1920, 3201, 41, 650.5, 0x4), (1785, 3201, 43, 699.0, 0x4 | 0x20)]
    c = s.summary()
    assert (c["sm_mhz_min"], c["sm_mhz_median"], c["sm_mhz_max"]) == (1785, 1920, 1980)
    assert c["mem_mhz"] == 3201 and c["temp_c_max"] == 43 and c["power_w_max"] == 699.0
    assert c["reasons"] == ["sw_power_cap", "sw_thermal"] and c["samples"] == 3


def test_no_samples_is_none():
    assert gpu_clocks.ClockSampler().summary() is None


def test_without_nvml_nothing_runs(monkeypatch):
    monkeypatch.setattr(gpu_clocks, "_nvml", False)  # as after a failed open
    assert gpu_clocks.sample() is None
    with gpu_clocks.ClockSampler(period_s=0.001) as s:
        pass
    assert s._thread is None and s.summary() is None


def test_sampler_thread_collects_and_stops(monkeypatch):
    seen = []

    def fake():
        seen.append(1)
        return (1980, 3201, 35, 120.0, 0)

    monkeypatch.setattr(gpu_clocks, "_device", lambda: object())
    monkeypatch.setattr(gpu_clocks, "sample", fake)
    deadline = time.monotonic() + 10
    with gpu_clocks.ClockSampler(period_s=0.001) as s:
        while len(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
    n = len(s.samples)
    assert n >= 3 and not s._thread.is_alive()
    assert s.summary()["sm_mhz_median"] == 1980 and s.summary()["reasons"] == []
    time.sleep(0.01)
    assert len(s.samples) == n  # stopped: nothing appended after exit
