import os

import pytest

# numba: keep the CPU tests deterministic in thread count (results do not depend on it, timings do)
os.environ.setdefault("NUMBA_NUM_THREADS", str(min(4, os.cpu_count() or 1)))


def _gpu_available():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy (run with -m gpu on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
