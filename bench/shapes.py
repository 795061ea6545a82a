"""The benchmarks' decode shape ``B/Hq/Hkv/context``, parsed and checked in one place (no CuPy, so a
command line can refuse a bad shape before anything runs)."""

from __future__ import annotations


def parse_shape(text: str, page: int = 1) -> tuple[int, int, int, int]:
    """``"8/32/8/32768"`` → ``(8, 32, 8, 32768)``: batch, query heads, kv heads, context.

    Raises ValueError unless it is four positive integers with Hq a multiple of Hkv and the context a
    multiple of ``page``."""
    try:
        dims = tuple(int(x) for x in text.split("/"))
    except ValueError:
        dims = ()
    if len(dims) != 4 or min(dims) < 1 or dims[1] % dims[2] or dims[3] % page:
        more = f", context a multiple of {page}" if page > 1 else ""
        raise ValueError(f"{text!r}: the shape is B/Hq/Hkv/context, positive integers, Hq a multiple of Hkv{more}")
    return dims


def parse_shapes(text: str, page: int = 1) -> tuple[tuple[int, int, int, int], ...]:
    """``"1/28/4/32768,8/32/8/32768"`` → one :func:`parse_shape` per comma-separated shape (at least one)."""
    shapes = tuple(parse_shape(s, page) for s in text.split(",") if s)
    if not shapes:
        raise ValueError(f"{text!r}: no shape given")
    return shapes
