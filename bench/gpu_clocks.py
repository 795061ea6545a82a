"""The GPU's clocks while a benchmark times something: NVML through ``pynvml`` (the
``nvidia-ml-py`` package, the ``bench`` extra) sampled from a thread every few milliseconds.

Why: an issue-bound kernel's time follows the SM clock, and the same kernel on the same shape has
measured 540 µs and 600 µs minutes apart in one run (docs/performance.md).  Every timed row
carries the clocks seen while it ran, so that two rows can be compared knowing whether the clock
moved between them.

    with ClockSampler() as s:
        ...timed work...
    s.summary()  # {"sm_mhz_min", "sm_mhz_median", "sm_mhz_max", "mem_mhz", "temp_c_max",
                 #  "power_w_max", "reasons": ["sw_power_cap", ...], "samples"}, or None without NVML
"""

from __future__ import annotations

import statistics
import threading
import time

try:
    import pynvml
except ImportError:  # without the bench extra the rows carry no clocks, and say so (None)
    pynvml = None

# the reasons a clock is held down (NVML's bits), by name; "gpu_idle" is expected between launches
# and is dropped
_REASONS = {} if pynvml is None else {
    getattr(pynvml, "nvmlClocksEventReason" + k): v for k, v in {
        "GpuIdle": "gpu_idle", "ApplicationsClocksSetting": "app_clocks", "SwPowerCap": "sw_power_cap",
        "HwSlowdown": "hw_slowdown", "SwThermalSlowdown": "sw_thermal", "HwThermalSlowdown": "hw_thermal",
        "HwPowerBrakeSlowdown": "hw_power_brake", "DisplayClockSetting": "display_clock"}.items()}

_nvml = None  # the device handle once opened; False when NVML is unavailable


def _device():
    global _nvml
    if _nvml is None:
        _nvml = False
        if pynvml is not None:
            try:
                pynvml.nvmlInit()
                import cupy as cp

                _nvml = pynvml.nvmlDeviceGetHandleByPciBusId(cp.cuda.Device().pci_bus_id)
            except (pynvml.NVMLError, ImportError):
                _nvml = False
    return _nvml or None


def sample():
    """One reading: (sm MHz, mem MHz, temperature °C, power W, reason bits), or None without NVML."""
    h = _device()
    if h is None:
        return None
    return (pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
            pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))


class ClockSampler:
    """Samples :func:`sample` every ``period_s`` from a thread between ``__enter__`` and ``__exit__``."""

    def __init__(self, period_s: float = 0.002):
        self.period_s, self.samples = period_s, []
        self._stop = threading.Event()
        self._thread = None

    def _run(self):
        while not self._stop.is_set():
            s = sample()
            if s is None:
                return
            self.samples.append(s)
            time.sleep(self.period_s)

    def __enter__(self):
        if _device() is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return False

    def summary(self):
        if not self.samples:
            return None
        sm = [s[0] for s in self.samples]
        bits = 0
        for s in self.samples:
            bits |= s[4]
        return {"sm_mhz_min": min(sm), "sm_mhz_median": statistics.median(sm), "sm_mhz_max": max(sm),
                "mem_mhz": statistics.median(s[1] for s in self.samples),
                "temp_c_max": max(s[2] for s in self.samples), "power_w_max": max(s[3] for s in self.samples),
                "reasons": [n for b, n in _REASONS.items() if bits & b and n != "gpu_idle"], "samples": len(sm)}
