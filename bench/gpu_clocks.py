"""The GPU's clocks while a benchmark times something: NVML (the driver's ``libnvidia-ml.so.1``,
through ctypes, no extra package) sampled from a thread every few milliseconds.

Why: an issue-bound kernel's time follows the SM clock, and the same kernel on the same shape has
measured 540 µs and 600 µs minutes apart in one run (docs/performance.md).  Every timed row
carries the clocks seen while it ran, so that two rows can be compared knowing whether the clock
moved between them.

    with ClockSampler() as s:
        ...timed work...
    s.summary()  # {"sm_mhz_min", "sm_mhz_median", "sm_mhz_max", "mem_mhz", "temp_c_max",
                 #  "power_w_max", "reasons": ["sw_power_cap", ...], "samples"} or None (no NVML)
"""

from __future__ import annotations

import ctypes
import statistics
import threading
import time

# nvmlClocksEventReasons bits (nvml.h); "gpu_idle" is expected between launches and is dropped
_REASONS = {0x1: "gpu_idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal",
            0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock"}
_NVML_CLOCK_SM, _NVML_CLOCK_MEM, _NVML_TEMPERATURE_GPU = 1, 2, 0

_nvml = None  # (library, device handle) once opened; False when NVML is unavailable


def _device():
    global _nvml
    if _nvml is None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                raise OSError("nvmlInit_v2 failed")
            import cupy as cp

            bus = cp.cuda.Device().pci_bus_id.encode()
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByPciBusId_v2(ctypes.c_char_p(bus), ctypes.byref(h)) != 0:
                raise OSError(f"no NVML device at {bus!r}")
            reasons = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                lib.nvmlDeviceGetCurrentClocksThrottleReasons
            _nvml = (lib, h, reasons)
        except (OSError, AttributeError):
            _nvml = False
    return _nvml or None


def sample():
    """One reading: (sm MHz, mem MHz, temperature °C, power W, reason bits), or None without NVML."""
    d = _device()
    if d is None:
        return None
    lib, h, reasons = d
    sm, mem, temp, mw = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    bits = ctypes.c_ulonglong()
    lib.nvmlDeviceGetClockInfo(h, _NVML_CLOCK_SM, ctypes.byref(sm))
    lib.nvmlDeviceGetClockInfo(h, _NVML_CLOCK_MEM, ctypes.byref(mem))
    lib.nvmlDeviceGetTemperature(h, _NVML_TEMPERATURE_GPU, ctypes.byref(temp))
    lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(mw))
    reasons(h, ctypes.byref(bits))
    return sm.value, mem.value, temp.value, mw.value / 1e3, bits.value


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
                "reasons": [n for b, n in _REASONS.items() if bits & b and b != 0x1], "samples": len(sm)}
