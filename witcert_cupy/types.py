"""The results the public API returns, shared by both backends: :class:`DecodeResult` (a decode or
extend step) and :class:`QuantizedKV` (quantized rows of one side)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class DecodeResult:
    """Output of one decode step.

    Attributes
    ----------
    o : float32 ``[B, Hq, d]``
    lse : float32 ``[B, Hq]``, natural log of the softmax denominator of ``ℓ̃``
    log_a : float32 ``[B, Hq]`` or None, ``log A`` with ``A = Σ p̃_t e^{c_t}`` over the kernel's own
        weights (``c_t`` includes the kernel's evaluation term ``γ_t``, SPEC §4.1)
    gamma : float32 ``[B, Hq]`` or None, ``Γ = max_t γ_t``: how far the kernel's logits may lie from
        ``sm·q·x̂`` in exact arithmetic (the second reading of ``p̃``, SPEC §5)
    risk : float64 ``[B, Hq]`` or None, ``R = (A'² − 1)/2`` with ``log A' = log A + Γ``: a bound on
        both readings of ``p̃``
    tv_bound : float64 ``[B, Hq]`` or None, ``min(1, R, tanh(cmax/2))``
    cmax : float32 ``[B, Hq]`` or None, ``max_t c_t``

    page_contrib : float64 ``[B, Hq, max_pages]`` or None
        ``contrib_j = e^{λ_j − lse} − e^{lse_j − lse}`` of the request's j-th page (SPEC §6):
        ``A − 1 = Σ_j contrib_j``; making page j exact removes it to first order.  Only when asked.

    kernel : str or None
        Which kernel produced an extend result (``'extend_tc'`` or ``'decode'``); None for decode.
    dot_order : (int, str) or None
        How the fp32 dot product behind the logits was summed: chains of that many channels, their
        sums combined ``'tree'`` (pairwise) or ``'chain'`` (the CPU backend's order, or the GPU
        kernel's that ran; None for the tensor-core extend); ``certificate.FORM_I_ORDER``
        (``(0, 'int')``) for logits formed by exact integer products (SPEC §6 form (I)).
    dot_height : int or None (derived from ``dot_order``)
        That order's summation height (``certificate.sum_height``), which ``γ_t`` was computed for
        (None for form (I), whose term is ``certificate.form_i_gamma``'s).
        Backends and kernels sum in different orders, so their ``o`` differ by rounding and their
        ``cmax`` and ``log A`` by the difference of their evaluation terms, a small fraction of
        ``c_t`` (docs/certificate.md §10.1).

    Certificate fields are None when ``cert`` was None.  Arrays live on the device of ``q``.
    """

    o: object
    lse: object
    log_a: object = None
    risk: object = None
    tv_bound: object = None
    cmax: object = None
    num_splits: int = 1
    page_contrib: object = None
    kernel: str | None = None
    gamma: object = None
    dot_order: tuple | None = None

    @property
    def dot_height(self) -> int | None:
        from .certificate import FORM_I_ORDER, sum_height

        if self.dot_order is None or tuple(self.dot_order) == FORM_I_ORDER:
            return None

        return sum_height(self.o.shape[-1], *self.dot_order)


class QuantizedKV(NamedTuple):
    """Quantized rows of one side.

    Attributes
    ----------
    codes : int8 ``[n, Hkv, d]``
    scales : float16 ``[n, Hkv, d / group_size]``
    outliers : float16 ``[n, Hkv, 2 * n_pairs]`` (exact values of the bypassed channels)
    witness : float16 ``[n, Hkv, B]`` or None
    """

    codes: object
    scales: object
    outliers: object
    witness: object
