"""Which backend an array belongs to, and argument checks that name the argument.

NumPy arrays (and array-likes) run on the ``cpu`` backend.  CuPy arrays, and any CUDA array that
exposes ``__cuda_array_interface__`` or a CUDA DLPack device (torch, JAX), run on ``cuda``; they are
wrapped as CuPy arrays without a copy.  Mixing the two in one call is a TypeError: a silent transfer
would hide a host synchronisation.
"""

from __future__ import annotations

import numpy as np

# DLPack device types that live on a CUDA GPU
_DLPACK_CUDA = 2
_DLPACK_CUDA_MANAGED = 13

FLOAT_DTYPES = ("float16", "float32", "float64", "bfloat16")


def is_cuda_array(x) -> bool:
    if hasattr(x, "__cuda_array_interface__"):
        return True
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None and not isinstance(x, np.ndarray):
        try:
            kind = int(dev()[0])
        except Exception:  # noqa: BLE001 - a foreign object with a broken protocol is not CUDA
            return False
        return kind in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED)
    return False


def backend_of(**named) -> str:
    """``'cpu'`` or ``'cuda'`` for the given arrays (``None`` values are ignored)."""
    kinds = {}
    for name, x in named.items():
        if x is None:
            continue
        kinds[name] = "cuda" if is_cuda_array(x) else "cpu"
    found = set(kinds.values())
    if len(found) > 1:
        detail = ", ".join(f"{k} on {v}" for k, v in kinds.items())
        raise TypeError(f"arrays must all be on one device (NumPy for cpu, CUDA for gpu): {detail}")
    return found.pop() if found else "cpu"


def to_cupy(x):
    """Zero-copy CuPy view of a CUDA array (CuPy, ``__cuda_array_interface__`` or DLPack)."""
    import cupy as cp

    if isinstance(x, cp.ndarray):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return cp.asarray(x)
    return cp.from_dlpack(x)


def to_numpy(name, x):
    """A NumPy view of a host array-like (DLPack CPU tensors included)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack_device__"):
        try:
            return np.from_dlpack(x)
        except Exception as e:  # noqa: BLE001
            raise TypeError(f"{name}: cannot read this array on the host ({e})") from None
    try:
        return np.asarray(x)
    except Exception as e:  # noqa: BLE001
        raise TypeError(f"{name} must be an array, got {type(x).__name__}") from e


def check_float(name, x, shape=None):
    """Raise TypeError unless ``x`` has a floating dtype, ValueError unless it matches ``shape``
    (``None`` entries are free)."""
    if str(x.dtype) not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be a floating array (float16/float32/float64), got dtype {x.dtype}")
    check_shape(name, x, shape)


def check_int(name, x, ndim=1):
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")


def check_shape(name, x, shape):
    if shape is None:
        return
    if x.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, x.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {want}, got {list(x.shape)}")


def check_range(name, x, lo, hi, exc=IndexError):
    """Host-side range check ``lo <= x < hi`` (only for host arrays)."""
    if x.size == 0:
        return
    mn, mx = int(x.min()), int(x.max())
    if mn < lo or mx >= hi:
        raise exc(f"{name} values must lie in [{lo}, {hi}), got [{mn}, {mx}]")


def check_philox_args(ctr, k):
    """Validate Philox arguments (either backend); returns the broadcast batch shape."""
    if str(ctr.dtype) != "uint32":
        raise TypeError(f"counter must be uint32, got dtype {ctr.dtype}")
    if str(k.dtype) != "uint32":
        raise TypeError(f"key must be uint32, got dtype {k.dtype}")
    if ctr.ndim < 1 or ctr.shape[-1] != 4:
        raise ValueError(f"counter must have shape [..., 4], got {list(ctr.shape)}")
    if k.ndim < 1 or k.shape[-1] != 2:
        raise ValueError(f"key must have shape [2] or [..., 2], got {list(k.shape)}")
    try:
        return np.broadcast_shapes(ctr.shape[:-1], k.shape[:-1])
    except ValueError:
        raise ValueError(f"key shape {list(k.shape)} does not broadcast against counter "
                         f"shape {list(ctr.shape)}") from None
