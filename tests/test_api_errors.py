"""Bad input everywhere in the public API: a TypeError/ValueError/IndexError that names the
argument, and nothing written."""

import math

import numpy as np
import pytest

import witcert_cupy as wc
from helpers import contiguous_table


@pytest.mark.parametrize("kw,exc,name", [
    (dict(head_dim=127), ValueError, "head_dim"),
    (dict(head_dim=128.0), TypeError, "head_dim"),
    (dict(head_dim=128, group_size=48), ValueError, "group_size"),
    (dict(head_dim=128, dither_bits=12), ValueError, "dither_bits"),
    (dict(head_dim=128, seed=-1), ValueError, "seed"),
    (dict(head_dim=128, seed=2**64), ValueError, "seed"),
    (dict(head_dim=128, witness_bands=5), ValueError, "witness_bands"),
    (dict(head_dim=128, rope="llama"), ValueError, "rope"),
    (dict(head_dim=128, outlier_pairs=np.zeros((1, 1, 1), np.float32)), TypeError, "outlier_pairs"),
    (dict(head_dim=128, outlier_pairs=np.zeros((1, 1), np.int32)), ValueError, "outlier_pairs"),
    (dict(head_dim=128, outlier_pairs=np.full((1, 1, 1), 64)), ValueError, "outlier_pairs"),
    (dict(head_dim=128, outlier_pairs=np.array([[[3, 3]]])), ValueError, "outlier_pairs"),
])
def test_quant_config_errors(kw, exc, name):
    with pytest.raises(exc, match=name):
        wc.QuantConfig(**kw)


@pytest.mark.parametrize("kw,exc,name", [
    (dict(tier="C"), ValueError, "tier"),
    (dict(delta_req=float("nan")), ValueError, "delta_req"),
    (dict(delta_req=0.0), ValueError, "delta_req"),
    (dict(delta_req=1.0), ValueError, "delta_req"),
    (dict(delta_req="0.1"), TypeError, "delta_req"),
    (dict(num_layers=0), ValueError, "num_layers"),
    (dict(steps=2.5), TypeError, "steps"),
    (dict(tau=float("nan")), ValueError, "tau"),
    (dict(tau=float("inf")), ValueError, "tau"),
    (dict(tau=-0.1), ValueError, "tau"),
])
def test_cert_config_errors(kw, exc, name):
    with pytest.raises(exc, match=name):
        wc.CertConfig(**kw)


def test_philox_and_dither_errors():
    with pytest.raises(TypeError, match="counter"):
        wc.philox4x32_10(np.zeros(4, np.int64), np.zeros(2, np.uint32))
    with pytest.raises(TypeError, match="key"):
        wc.philox4x32_10(np.zeros(4, np.uint32), np.zeros(2, np.int32))
    with pytest.raises(ValueError, match="counter"):
        wc.philox4x32_10(np.zeros(3, np.uint32), np.zeros(2, np.uint32))
    with pytest.raises(ValueError, match="key"):
        wc.philox4x32_10(np.zeros((3, 4), np.uint32), np.zeros((2, 2), np.uint32))
    ok = dict(layer=0, kv_head=0, side="k", head_dim=64, seed=0)
    with pytest.raises(ValueError, match="side"):
        wc.dither(np.arange(3), **{**ok, "side": "q"})
    with pytest.raises(ValueError, match="layer"):
        wc.dither(np.arange(3), **{**ok, "layer": 2**16})
    with pytest.raises(ValueError, match="kv_head"):
        wc.dither(np.arange(3), **{**ok, "kv_head": -1})
    with pytest.raises(IndexError, match="slots"):
        wc.dither(np.array([2**32]), **ok)
    with pytest.raises(TypeError, match="slots"):
        wc.dither(np.array([1.0]), **ok)
    with pytest.raises(ValueError, match="bits"):
        wc.dither(np.arange(3), **ok, bits=4)


def test_quantize_errors():
    cfg = wc.QuantConfig(64)
    x = np.zeros((4, 2, 64), np.float32)
    with pytest.raises(TypeError, match="x"):
        wc.quantize(x.astype(np.int32), np.arange(4), layer=0, side="k", config=cfg)
    with pytest.raises(ValueError, match="x"):
        wc.quantize(x[..., :32], np.arange(4), layer=0, side="k", config=cfg)
    with pytest.raises(ValueError, match="slots"):
        wc.quantize(x, np.arange(3), layer=0, side="k", config=cfg)
    with pytest.raises(IndexError, match="slots"):
        wc.quantize(x, np.array([0, 1, 2, -1]), layer=0, side="k", config=cfg)
    with pytest.raises(TypeError, match="config"):
        wc.quantize(x, np.arange(4), layer=0, side="k", config={"head_dim": 64})
    with pytest.raises(ValueError, match="side"):
        wc.quantize(x, np.arange(4), layer=0, side="kv", config=cfg)
    q = wc.quantize(x, np.arange(4), layer=0, side="k", config=cfg)
    with pytest.raises(TypeError, match="qkv.codes"):
        wc.dequantize(q._replace(codes=q.codes.astype(np.int16)), np.arange(4), layer=0, side="k", config=cfg)
    with pytest.raises(ValueError, match="qkv.scales"):
        wc.dequantize(q._replace(scales=q.scales[..., :1]), np.arange(4), layer=0, side="k", config=cfg)


@pytest.mark.parametrize("args,kw,exc,name", [
    ((1, 2, 64, 4, 3), {}, ValueError, "page_size"),
    ((1, 2, 64, 4, 256), {}, ValueError, "page_size"),
    ((1, 2, 64, 0, 16), {}, ValueError, "num_pages"),
    ((1, 2, 128, 4, 16), {}, ValueError, "head_dim"),
    ((0, 2, 64, 4, 16), {}, ValueError, "num_layers"),
    ((1, 2, 64, 2**29, 16), {}, ValueError, "num_pages"),
    ((1, 2, 64, 4, 16), {"backend": "tpu"}, ValueError, "backend"),
    ((1, 2, 64, 4, 16), {"keep_exact": "no"}, TypeError, "keep_exact"),  # a truthy string is no flag
])
def test_pool_constructor_errors(args, kw, exc, name):
    with pytest.raises(exc, match=name):
        wc.KVPool(*args, wc.QuantConfig(64), **kw)
    with pytest.raises(ValueError, match="outlier_pairs"):
        wc.KVPool(2, 2, 64, 4, 16, wc.QuantConfig(64, outlier_pairs=np.zeros((1, 2, 1), np.int32)))


def _snapshot(pool):
    return [a.copy() for a in (pool.codes, pool.scales, pool.outliers, pool.witness, pool.exact,
                               pool.nonfinite_writes)]


def test_pool_write_errors_leave_pool_unchanged():
    rng = np.random.default_rng(0)
    pool = wc.KVPool(2, 2, 64, 4, 16, wc.QuantConfig(64, witness_bands=4), backend="cpu", keep_exact=True)
    k = rng.standard_normal((5, 2, 64)).astype(np.float32)
    pool.write(0, np.arange(5), k, k)
    snap = _snapshot(pool)
    bad = [
        (dict(layer=2, slots=np.arange(5), k=k, v=k), ValueError, "layer"),
        (dict(layer=0, slots=np.arange(5), k=k.astype(np.int8), v=k), TypeError, "k"),
        (dict(layer=0, slots=np.arange(5), k=k, v=k[:4]), ValueError, "v"),
        (dict(layer=0, slots=np.arange(5), k=k[:, :1], v=k[:, :1]), ValueError, "k"),
        (dict(layer=0, slots=np.array([0, 1, 2, 3, 64]), k=k, v=k), IndexError, "slots"),
        (dict(layer=0, slots=np.array([0, 1, 2, 3, 3]), k=k, v=k), ValueError, "slots"),
        (dict(layer=0, slots=np.arange(4), k=k, v=k), ValueError, "slots"),
        (dict(layer=0, slots=np.arange(5).astype(np.float32), k=k, v=k), TypeError, "slots"),
    ]
    for kw, exc, name in bad:
        with pytest.raises(exc, match=name):
            pool.write(**kw)
        for a, b in zip(snap, _snapshot(pool)):
            assert np.array_equal(a, b)


def test_decode_errors():
    rng = np.random.default_rng(1)
    indptr, indices, last, slots, npages = contiguous_table([20, 5], 16)
    pool = wc.KVPool(1, 2, 64, npages, 16, wc.QuantConfig(64), backend="cpu")
    for s in slots:
        pool.write(0, s, rng.standard_normal((len(s), 2, 64)), rng.standard_normal((len(s), 2, 64)))
    q = rng.standard_normal((2, 4, 64)).astype(np.float32)
    ok = dict(layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)
    wc.decode_attention(q, pool, **ok)
    cases = [
        (dict(q=q.astype(np.int32)), TypeError, "q"),
        (dict(q=q[:, :3]), ValueError, "heads"),
        (dict(q=q[..., :32]), ValueError, "q"),
        (dict(kv_indptr=indptr[:-1]), ValueError, "kv_indptr"),
        (dict(kv_indptr=np.array([0, 3, 2], np.int32)), ValueError, "kv_indptr"),
        (dict(kv_indptr=np.array([0, 1, 2], np.int32)), ValueError, "kv_indptr"),
        (dict(kv_indices=np.array([0, 1, npages], np.int32)), IndexError, "kv_indices"),
        (dict(kv_indices=np.array([0, -1, 2], np.int32)), IndexError, "kv_indices"),
        (dict(kv_indices=indices.astype(np.float32)), TypeError, "kv_indices"),
        (dict(kv_last_page_len=np.array([0, 5], np.int32)), ValueError, "kv_last_page_len"),
        (dict(kv_last_page_len=np.array([4, 17], np.int32)), ValueError, "kv_last_page_len"),
        (dict(kv_last_page_len=np.array([4], np.int32)), ValueError, "kv_last_page_len"),
        (dict(layer=1), ValueError, "layer"),
        (dict(cert="B"), TypeError, "cert"),
        (dict(cert=wc.CertConfig(tier="A")), ValueError, "witness"),
        (dict(sm_scale=float("nan")), ValueError, "sm_scale"),
        (dict(sm_scale=-1.0), ValueError, "sm_scale"),
        (dict(num_splits=0), ValueError, "num_splits"),
        (dict(page_contrib="yes"), TypeError, "page_contrib"),
        (dict(page_contrib=1), TypeError, "page_contrib"),
        (dict(pool="pool"), TypeError, "pool"),
    ]
    for kw, exc, name in cases:
        args = {**ok, "q": q, "pool": pool, **kw}
        qq, pp = args.pop("q"), args.pop("pool")
        with pytest.raises(exc, match=name):
            wc.decode_attention(qq, pp, **args)
    assert math.isfinite(float(wc.decode_attention(q, pool, **ok).lse[0, 0]))
