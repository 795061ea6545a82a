"""Directed-rounding helpers of the CPU kernels' certificate coefficients (docs/certificate.md §10.2,
§11): twins of ``coef_up`` in ``cuda/certificate.cuh`` and of the kernels' upward conversions."""

import math

import numpy as np
from numba import njit

_F32_MAX = np.float32(3.4028234663852886e38)
_INF = np.float32(np.inf)


@njit(inline="always", cache=True)
def f32_up(x):
    """The float32 at or above the float64 ``x``."""
    f = np.float32(x)
    if np.float64(f) < x:
        f = np.nextafter(f, _INF)
    return f


@njit(inline="always", cache=True)
def coef_up(x, e, floor):
    """float32 ``≥ x·2^e`` (exact where that is a normal fp32 number), at least ``floor`` when
    ``x > 0``, ``+inf`` for a non-finite ``x`` or past the fp32 range: a per-head certificate
    coefficient formed on a normalized query (docs/certificate.md §10.2).  Twin of ``coef_up`` in
    ``cuda/certificate.cuh``."""
    if x == 0.0:
        return np.float32(0.0)
    if not (x <= _F32_MAX):
        return _INF
    r = math.ldexp(np.float64(x), e)
    if r < floor:
        r = floor
    return np.float32(r) if r <= np.float64(_F32_MAX) else _INF


