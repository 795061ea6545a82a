import os
import warnings

import pytest

# numba: keep the CPU tests deterministic in thread count (results do not depend on it, timings do)
os.environ.setdefault("NUMBA_NUM_THREADS", str(min(4, os.cpu_count() or 1)))


def _gpu_available():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        return False


# CPU tests share one xdist group, so that under `--dist loadgroup` (the README's test command) one
# worker runs them all and JIT-compiles each numba kernel once, while the other workers run the
# CUDA compile checks beside it.  Why: with a cold cache every worker compiled every kernel it
# touched; two workers spent 368 CPU-seconds (and 204 s) on the CPU tests that one process runs in
# 208 s, 146 of them compiling.  GPU tests stay ungrouped (spread over the GPU machine's workers).
NUMBA_GROUP = "cpu_numba"
NO_NUMBA = ("test_cuda_compile.py", "test_proofs.py")  # (nvcc, NVRTC and Coq: balanced freely)


# ... and the longest of the rest first, longest first: loadgroup hands out units in collection order
# (the numba group, the largest, goes first), so a long compile collected last ran on after the other
# worker was idle.  The order is that of their cold times on a 2-core machine (the form-(I) d = 128
# compile about three times the next, the proofs, each of the others 15–75 s).
_NVRTC = "test_compiles_with_nvrtc_as_cupy_does[{}]"
LONGEST_FIRST = (_NVRTC.format("decode_i8_d128.cu"), "test_proofs_build_and_pass_the_check",
                 *(_NVRTC.format(n) for n in ("decode_i8_d256.cu", "decode_v2.cu", "decode_i8_d64.cu", "decode.cu",
                                              "write.cu", "extend_tc.cu")),
                 "test_extend_wgmma_path_compiles_for_sm90a_without_spills_or_warnings", _NVRTC.format("decode_f16.cu"))


def _group_cpu_tests(items):
    for item in items:
        if "gpu" not in item.keywords and item.path.name not in NO_NUMBA:
            item.add_marker(pytest.mark.xdist_group(NUMBA_GROUP))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.name, len(rank)))  # stable: the rest keep their order


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group markers into node ids
def pytest_collection_modifyitems(config, items):
    _group_cpu_tests(items)
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with CuPy (run with -m gpu on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """Warn when --dist loadgroup did not take the group: xdist carries it in the node id, which
    pytest 9.2 stopped letting plugins change (pyproject.toml pins below it)."""
    if not getattr(session.config.option, "loadgroup", False):  # (set by xdist in its workers)
        return
    lost = [item for item in session.items if item.get_closest_marker("xdist_group") is not None
            and "@" not in item.nodeid.rsplit("]", 1)[-1]]
    if lost:
        warnings.warn(f"--dist loadgroup: {len(lost)} grouped tests lost their group (node id "
                      f"{lost[0].nodeid}); each worker will compile the numba kernels itself", stacklevel=1)
