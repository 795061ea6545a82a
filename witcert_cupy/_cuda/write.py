"""The GPU side of the write path and the stream: Philox, dither, the row quantizer and its
inverse (cuda/write.cu)."""

from __future__ import annotations

import numpy as np

from ..arrays import check_float, check_int, check_philox_args, check_shape, to_cupy
from ..config import bypass_for
from ..types import QuantizedKV
from .build import kernel
from .launch import _grid1, _i32

def philox(counter, key, rounds):
    import cupy as cp

    ctr, k = to_cupy(counter), to_cupy(key)
    batch = check_philox_args(ctr, k)
    c2 = cp.ascontiguousarray(cp.broadcast_to(ctr, batch + (4,))).reshape(-1, 4)
    k2 = cp.ascontiguousarray(cp.broadcast_to(k, batch + (2,))).reshape(-1, 2)
    out = cp.empty_like(c2)
    n = c2.shape[0]
    kernel("write.cu", "philox_kernel")(_grid1(n), (256,), (c2, k2, np.int64(n), _i32(rounds), out))
    return out.reshape(batch + (4,))


def _slots64(name, slots):
    import cupy as cp

    s = to_cupy(slots)
    check_int(name, s)
    return cp.ascontiguousarray(s, dtype=cp.int64)


def dither(slots, *, layer, kv_head, side, head_dim, seed, bits, epoch):
    import cupy as cp

    s = _slots64("slots", slots)
    out = cp.empty((s.shape[0], head_dim), cp.float32)
    if s.shape[0]:
        kernel("write.cu", "dither_kernel")((s.shape[0],), (min(256, head_dim),),
                                            (s, _i32(head_dim), _i32(side), _i32(layer), _i32(kv_head),
                                             np.uint32(epoch), np.uint32(seed & 0xFFFFFFFF),
                                             np.uint32(seed >> 32), _i32(bits), out))
    return out


INPUT_DTYPES = {"float16": 0, "float32": 1, "float64": 3}


def _input(name, x, shape):
    import cupy as cp

    x = to_cupy(x)
    check_float(name, x, shape)
    if str(x.dtype) not in INPUT_DTYPES:
        raise TypeError(f"{name}: dtype {x.dtype} is not supported on the GPU (float16/float32/float64)")
    return cp.ascontiguousarray(x), INPUT_DTYPES[str(x.dtype)]


def check_gpu_config(config):
    d, gs = config.head_dim, config.group_size
    if d not in (64, 128, 256):
        raise ValueError(f"the GPU kernels support head_dim 64, 128 or 256, got {d}")
    if gs % 16:
        raise ValueError(f"the GPU kernels need group_size to be a multiple of 16, got {gs}")
    if config.witness_bands > 64:
        raise ValueError(f"the GPU kernels support at most 64 witness bands, got {config.witness_bands}")


# write_rows' launch shape (cuda/write.cu: WR_THREADS, WR_CPT channels per thread)
WRITE_THREADS = 256
WRITE_CHANNELS_PER_THREAD = 32


def write_kernel(head_dim, dither_bits, witness_bands):
    """The name of the write_rows entry for a configuration: ``write_rows_<d>_<bits>``, with
    ``_wit`` when the pool stores a witness."""
    return f"write_rows_{head_dim}_{dither_bits}" + ("_wit" if witness_bands else "")


def _write(k, v, dtype_code, slots, dest_rows, *, layer, plane_layer, side0, nsides, H, N, config,
           bypass_layer, codes, scales, outl, wit, exact_ptr, counters, head_base=0):
    import cupy as cp

    n = slots.shape[0]
    if n == 0:
        return
    d = config.head_dim
    k0, k1 = config.seed_words
    exact_arg = np.uint64(exact_ptr)
    name = write_kernel(d, config.dither_bits, config.witness_bands)
    rows_per_block = WRITE_THREADS // (d // WRITE_CHANNELS_PER_THREAD)  # tokens of one (kv head, side)
    if config.group_size & (config.group_size - 1) or nsides not in (1, 2):  # d is 64/128/256 on the GPU
        raise RuntimeError("internal: write_rows needs a power-of-two group size and one or two sides")
    if H * nsides > 65535:  # the grid's y extent
        raise ValueError(f"the GPU write path supports at most 32767 kv heads per pool, got {H}")
    if codes.data.ptr % 16 or (exact_ptr and exact_ptr % 16):
        raise RuntimeError("internal: the pool's code planes must be 16-byte aligned")
    vec = all(a.data.ptr % 16 == 0 for a in (k, v))  # row offsets are multiples of 32 bytes
    kernel("write.cu", name)(
        ((n + rows_per_block - 1) // rows_per_block, H * nsides), (WRITE_THREADS,),
        (k, v, _i32(dtype_code), _i32(vec), slots, dest_rows, _i32(n), _i32(H), np.int64(N), _i32(layer),
         _i32(head_base), _i32(plane_layer), _i32(side0), _i32(nsides), _i32(config.group_size.bit_length() - 1),
         _i32(bypass_layer.shape[-1]), _i32(config.witness_bands),
         _i32(config.rope == "neox"), bypass_layer, np.uint32(k0),
         np.uint32(k1), codes, scales.view(cp.uint16), outl.view(cp.uint16), wit.view(cp.uint16), exact_arg,
         counters))


def quantize(x, slots, *, layer, side, config):
    import cupy as cp

    check_gpu_config(config)
    xd, code = _input("x", x, (None, None, config.head_dim))
    n, H, d = xd.shape
    s = _slots64("slots", slots)
    if s.shape[0] != n:
        raise ValueError(f"slots must have shape [{n}] (one per row), got {list(s.shape)}")
    bypass = cp.asarray(bypass_for(config, layer, H))
    np2, ng, nb = bypass.shape[1], config.num_groups, config.witness_bands
    codes = cp.empty((1, 2, H, n, d), cp.int8)
    scales = cp.empty((1, 2, H, n, ng), cp.float16)
    outl = cp.empty((1, 2, H, n, np2), cp.float16)
    wit = cp.empty((1, 2, H, n, nb), cp.float16)
    counters = cp.zeros(2, cp.uint64)
    _write(xd, xd, code, s, cp.arange(n, dtype=cp.int64), layer=layer, plane_layer=0, side0=side, nsides=1,
           H=H, N=n, config=config, bypass_layer=bypass, codes=codes, scales=scales, outl=outl, wit=wit, exact_ptr=0, counters=counters)
    tr = lambda a: cp.ascontiguousarray(a[0, side].transpose(1, 0, 2))  # noqa: E731
    return QuantizedKV(tr(codes), tr(scales), tr(outl), tr(wit) if nb else None)


def _dequant(codes, scales, outl, slots, rows, *, layer, plane_layer, side, H, N, config, bypass_layer, head_base=0):
    import cupy as cp

    n = slots.shape[0]
    d = config.head_dim
    out = cp.empty((n, H, d), cp.float32)
    if n:
        k0, k1 = config.seed_words
        kernel("write.cu", "dequant_rows")(
            (n, H), (d,),
            (codes, scales.view(cp.uint16), outl.view(cp.uint16), slots, rows, _i32(n), _i32(H), np.int64(N),
             _i32(d), _i32(layer), _i32(head_base), _i32(plane_layer), _i32(side), _i32(config.group_size),
             _i32(bypass_layer.shape[-1]), bypass_layer, _i32(config.dither_bits), np.uint32(k0),
             np.uint32(k1), out))
    return out


def dequantize(qkv, slots, *, layer, side, config):
    import cupy as cp

    check_gpu_config(config)
    codes = to_cupy(qkv.codes)
    if codes.dtype != cp.int8:
        raise TypeError(f"qkv.codes must be int8, got dtype {codes.dtype}")
    check_shape("qkv.codes", codes, (None, None, config.head_dim))
    n, H, d = codes.shape
    bypass = cp.asarray(bypass_for(config, layer, H))
    scales, outl = to_cupy(qkv.scales), to_cupy(qkv.outliers)
    for name, arr, w in (("qkv.scales", scales, config.num_groups), ("qkv.outliers", outl, bypass.shape[1])):
        if arr.dtype != cp.float16:
            raise TypeError(f"{name} must be float16, got dtype {arr.dtype}")
        check_shape(name, arr, (n, H, w))
    s = _slots64("slots", slots)
    if s.shape[0] != n:
        raise ValueError(f"slots must have shape [{n}] (one per row), got {list(s.shape)}")
    plane = lambda a: cp.ascontiguousarray(  # noqa: E731  [n,H,X] -> [1,2,H,n,X] at this side
        cp.stack([a.transpose(1, 0, 2)] * 2)[None])
    return _dequant(plane(codes), plane(scales), plane(outl), s, cp.arange(n, dtype=cp.int64), layer=layer,
                    plane_layer=0, side=side, H=H, N=n, config=config, bypass_layer=bypass)
