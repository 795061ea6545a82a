"""Kernel launches with programmatic dependent launch (PDL) through the driver's ``cuLaunchKernelEx``.

A decode step is two kernels (stage 1, then the merge), and a serving loop runs one step after
another: each launch waits for the previous kernel's last CTA to finish before its own first CTA
starts.  Launched with the programmatic-stream-serialization attribute (sm_90+), a kernel is
scheduled as soon as every CTA of the previous kernel has signalled or exited
(``cuda/griddep.cuh``), and its ``griddepcontrol.wait``, before any global access, then holds it
until that kernel has completed with its writes visible.  The outputs are the same bits as with a
plain launch (``tests/test_gpu.py::test_pdl_launch_gives_the_same_bits``); only the launch latency
overlaps.

CuPy's ``RawKernel`` launches through ``cuLaunchKernel``, which has no attributes, so this module
calls ``cuLaunchKernelEx`` through cuda-python's ``cuda.bindings.driver`` (installed with CuPy).
The launch configuration and the argument block are built once per launcher: a launch is one
driver call.  Only kernels that call ``griddep_wait`` before their first global access may be
launched with the attribute: the decode's stage-1 kernels and decode_merge (``_cuda.launch.PDL``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

import numpy as np

# the ctypes type of each kernel-argument scalar (the launch layer passes every scalar as an
# explicit NumPy type; a Python int or float has no C width and is refused)
_SCALARS = {np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
            np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64,
            np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double}


def pdl_enabled(environ=None) -> bool:
    """Whether programmatic dependent launch is wanted: the environment variable ``WITCERT_PDL``,
    ``"1"`` (the default when unset) or ``"0"`` (plain launches; the same results either way, for a
    driver or profiler that mishandles the attribute).  Any other value raises ValueError."""
    value = (os.environ if environ is None else environ).get("WITCERT_PDL", "1")
    if value not in ("0", "1"):
        raise ValueError(f"WITCERT_PDL must be '0' or '1', got {value!r}")
    return value == "1"


@functools.lru_cache(maxsize=None)
def _driver():
    """cuda-python's ``cuda.bindings.driver``, or None where it is missing or its driver has no
    ``cuLaunchKernelEx`` (before CUDA 12)."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    return driver if hasattr(driver, "cuLaunchKernelEx") else None


@functools.lru_cache(maxsize=None)
def pdl_supported(device_id: int) -> bool:
    """Whether device ``device_id`` takes programmatic dependent launches: compute capability 9.0
    or newer and a driver with ``cuLaunchKernelEx``."""
    import cupy as cp

    return int(cp.cuda.Device(device_id).compute_capability) >= 90 and _driver() is not None


def _c_arg(i, a):
    """Argument ``i`` as the ctypes value whose address goes into the parameter block."""
    if isinstance(a, np.generic) and a.dtype in _SCALARS:
        return _SCALARS[a.dtype](a.item())
    cp = sys.modules.get("cupy")  # (a cupy array exists only once cupy is imported)
    if cp is not None and isinstance(a, cp.ndarray):
        return ctypes.c_void_p(a.data.ptr)
    raise TypeError(f"kernel argument {i}: expected a cupy.ndarray or a NumPy scalar of "
                    f"{sorted(str(d) for d in _SCALARS)}, got {type(a).__name__}")


class Launcher:
    """A zero-argument callable that launches ``func`` (a CuPy ``RawKernel``) with ``args`` on the
    current stream, with the programmatic-serialization attribute when ``pdl`` is true.

    Parameters
    ----------
    func : cupy.RawKernel
        The kernel; with ``pdl`` it must call ``griddep_wait`` before any global access.
    grid, block : tuple of int
        Up to three dimensions each.
    args : tuple
        The kernel's arguments: ``cupy.ndarray`` (passed as its device pointer; the launcher keeps
        a reference) or NumPy scalars of the kernel's C types.
    shared_mem : int
        Dynamic shared memory in bytes (beyond 48 KB the caller opts the function in first).
    pdl : bool
        Launch with ``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``; False gives CuPy's
        own launch.
    """

    def __init__(self, func, grid, block, args, shared_mem=0, pdl=True):
        grid, block = tuple(int(g) for g in grid), tuple(int(b) for b in block)
        if not (1 <= len(grid) <= 3 and 1 <= len(block) <= 3) or min(grid + block) < 1:
            raise ValueError(f"grid and block take 1 to 3 positive dimensions, got {grid} and {block}")
        self.func, self.grid, self.block, self.args = func, grid, block, tuple(args)
        self.shared_mem = int(shared_mem)
        self.pdl = bool(pdl)
        if not self.pdl:
            return
        self._values = [_c_arg(i, a) for i, a in enumerate(self.args)]  # the storage the pointers name
        cu = _driver()
        if cu is None:
            raise RuntimeError("programmatic dependent launch needs cuda-python's cuda.bindings with "
                               "cuLaunchKernelEx (CUDA 12 or newer)")
        self._params = (ctypes.c_void_p * max(1, len(self._values)))(
            *[ctypes.addressof(v) for v in self._values])
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        cfg = cu.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid + (1,) * (3 - len(grid))
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block + (1,) * (3 - len(block))
        cfg.sharedMemBytes = self.shared_mem
        cfg.attrs, cfg.numAttrs = [attr], 1
        self._config, self._cu = cfg, cu

    def __call__(self):
        if not self.pdl:
            self.func(self.grid, self.block, self.args, shared_mem=self.shared_mem)
            return
        import cupy as cp

        cu = self._cu
        self._config.hStream = cp.cuda.get_current_stream().ptr
        params = ctypes.addressof(self._params)
        err, = cu.cuLaunchKernelEx(self._config, self.func.kernel.ptr, params, 0)
        if err == cu.CUresult.CUDA_ERROR_INVALID_CONTEXT:
            # a thread with no current context yet (CuPy's own launch would have bound the
            # device's primary context through the runtime): bind it, and launch again
            cp.cuda.runtime.setDevice(cp.cuda.Device().id)
            err, = cu.cuLaunchKernelEx(self._config, self.func.kernel.ptr, params, 0)
        if err != cu.CUresult.CUDA_SUCCESS:
            _, nm = cu.cuGetErrorName(err)
            raise RuntimeError(f"cuLaunchKernelEx({self.func.name}) failed: "
                               f"{nm.decode() if nm else f'CUDA error {int(err)}'}")
