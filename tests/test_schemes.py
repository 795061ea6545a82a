"""Black-box schemes metered by Tier A (SPEC §3 black boxes, §4 Tier A): built-ins behave as
documented and the certificate is never violated, worst-case queries included."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import reference, schemes
from helpers import contiguous_table, page_table, random_rows


def test_fp8_e4m3_rounding_points():
    x = np.array([1.0, 1.0625, 1.0626, 1.1875, 500.0, -500.0, 448.0, 2.0**-10, 3 * 2.0**-10, 0.0, np.nan,
                  2.0**-6, 240.0, 232.0])[:, None, None]
    y = schemes.fp8_e4m3(np.repeat(x, 2, 1))[:, 0, 0]
    want = [1.0, 1.0, 1.125, 1.25, 448.0, -448.0, 448.0, 0.0, 2 * 2.0**-9, 0.0, np.nan, 2.0**-6, 240.0, 224.0]
    np.testing.assert_array_equal(y, np.array(want, np.float32))


def test_fp8_e4m3_is_ml_dtypes_cast_saturated():
    """The built-in cast is written with array operations so that it runs on NumPy and CuPy alike;
    ml_dtypes' float8_e4m3fn (after clipping to ±448, since e4m3fn overflows to NaN) is its judge:
    the same value for every finite float32 on a stride through all 2^32 bit patterns, both zeros
    and the subnormals included."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32)
    near = (np.arange(-2**16, 2**16, dtype=np.int64) + 0x3C000000).astype(np.uint32)  # around 2^-7
    x = np.concatenate([bits, near, near | np.uint32(1 << 31)]).view(np.float32)
    x = x[np.isfinite(x)][:, None, None]
    ours = schemes.fp8_e4m3(x)
    ref = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("name", ["fp8_e4m3", "rtn_int8", "rtn_int4", "kivi2"])
def test_builtin_error_sizes(name):
    rng = np.random.default_rng(0)
    x = random_rows(rng, 64, 2, 128)
    sch = wc.get_scheme(name)
    for f in (sch.key, sch.value):
        y = f(x)
        assert y.shape == x.shape and np.all(np.isfinite(y))
        rel = np.linalg.norm(y - x) / np.linalg.norm(x)
        bound = {"fp8_e4m3": 0.04, "rtn_int8": 0.01, "rtn_int4": 0.15, "kivi2": 0.6}[name]
        assert 0 < rel < bound, (name, rel)
    assert np.array_equal(schemes.kivi2_key(x[:1]), x[:1])  # one row: KIVI's fp16 residual


def test_registry():
    assert {"fp8_e4m3", "rtn_int8", "rtn_int4", "kivi2"} <= set(wc.list_schemes())
    with pytest.raises(ValueError, match="already registered"):
        wc.register_scheme("fp8_e4m3", schemes.fp8_e4m3)
    with pytest.raises(TypeError, match="fn"):
        wc.register_scheme("bad", 3)
    with pytest.raises(ValueError, match="unknown scheme"):
        wc.get_scheme("nope")
    s = wc.register_scheme("halve_test", lambda x: x * 0.5, replace=True)
    assert wc.get_scheme("halve_test") is s


@pytest.mark.parametrize("name", ["fp8_e4m3", "rtn_int8", "rtn_int4", "kivi2"])
def test_scheme_pool_tier_a_never_violated(name):
    rng = np.random.default_rng(sum(map(ord, name)))  # stable across processes
    indptr, indices, last, slots, npages = contiguous_table([300, 70], 16)
    pool = wc.SchemePool(1, 2, 128, npages, 16, name, keep_exact=True, backend="cpu")
    for s in slots:
        pool.write(0, s, random_rows(rng, len(s), 2, 128, massive=[(9, 80.0)]), random_rows(rng, len(s), 2, 128))
    assert pool.nbytes == pool.bytes_per_token() * pool.num_slots
    pt = page_table(pool, (indptr, indices, last, slots))
    for trial in range(4):
        q = rng.standard_normal((2, 8, 128)) * (0.3 + trial)
        if trial >= 2:  # adversarial: along the scheme's own residual
            for b in range(2):
                res = (lambda r: r["k_hat"] - r["k_exact"])(reference.request_rows(pool, 0, pt, b))
                for hq in range(8):
                    t = rng.integers(len(res))
                    q[b, hq] = res[t, hq // 4] / (np.linalg.norm(res[t, hq // 4]) + 1e-30) * 10 ** (trial - 1)
        q = q.astype(np.float32)
        r = wc.decode_attention(q, pool, layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last,
                                cert=wc.CertConfig(tier="A"))
        for b in range(2):
            rows = reference.request_rows(pool, 0, pt, b)
            assert np.all(reference.true_tv(q[b], rows["k_exact"], rows["k_hat"]) <= r.tv_bound[b])


def test_scheme_pool_rejects_bad_scheme_output_before_writing():
    pool = wc.SchemePool(1, 2, 64, 4, 16, lambda x: x[:, :, :32], backend="cpu")
    snap = pool.values.copy()
    with pytest.raises(ValueError, match="returned shape"):
        pool.write(0, np.arange(3), np.ones((3, 2, 64), np.float32), np.ones((3, 2, 64), np.float32))
    assert np.array_equal(pool.values, snap)
    with pytest.raises(IndexError, match="slots"):
        pool.write(0, np.array([0, 99]), np.ones((2, 2, 64), np.float32), np.ones((2, 2, 64), np.float32))
