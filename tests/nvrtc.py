"""Compile a CUDA source string with NVRTC (the compiler CuPy uses), without a GPU, through ctypes.

NVRTC differs from nvcc in what it gets for free (no <math.h>, no system headers), so the kernels
are checked with it as well as with nvcc.  The library comes from the ``nvidia-cuda-nvrtc`` wheel
(test extra) or the CUDA toolkit.
"""

import ctypes
import glob
import os
import sys


def find_nvrtc():
    cands = []
    for base in sys.path:
        cands += glob.glob(os.path.join(base, "nvidia", "cu13", "lib", "libnvrtc.so*"))
        cands += glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*"))
    cands += glob.glob("/usr/local/cuda/lib64/libnvrtc.so*")
    cands = [c for c in cands if "builtins" not in c and ".alt." not in c]
    return cands[0] if cands else None


def _load():
    path = find_nvrtc()
    for b in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*")):
        if ".alt." not in b:  # NVRTC dlopens it by soname: load it globally first
            ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(path)


def nvrtc_version():
    """``(major, minor)`` of the NVRTC library :func:`compile_nvrtc` uses."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    rc = _load().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    assert rc == 0, f"nvrtcVersion: {rc}"
    return major.value, minor.value


def compile_nvrtc(source, name, options):
    """Returns ``(ok, log)``."""
    lib = _load()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    assert rc == 0, f"nvrtcCreateProgram: {rc}"
    opts = [o.encode() for o in options]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc == 0, buf.value.decode(errors="replace")
