"""A whole decode step (every layer: write + certified decode + telemetry) captured in a CUDA graph:
replays are bit-identical to eager execution through the public API, and the device telemetry
counts every replayed step (SPEC §8).  GPU only."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import certificate as cert_mod
from helpers import contiguous_table, random_rows

cp = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

L, HKV, G, D, PAGE = 3, 2, 4, 128, 16
LENGTHS = [200, 37, 513]


def _model_pools():
    """Two identical pools (eager, graph) with a prompt written, and the page table with room to grow."""
    rng = np.random.default_rng(0)
    grow = 8
    indptr, indices, last, slots, npages = contiguous_table([n + grow for n in LENGTHS], PAGE)
    cfg = wc.QuantConfig(D, witness_bands=16)
    pools = [wc.KVPool(L, HKV, D, npages, PAGE, cfg, backend="cuda") for _ in range(2)]
    for layer in range(L):
        for b, n in enumerate(LENGTHS):
            k = random_rows(rng, n, HKV, D, massive=[(3, 30.0)])
            v = random_rows(rng, n, HKV, D)
            for p in pools:
                p.write(layer, cp.asarray(slots[b][:n]), cp.asarray(k), cp.asarray(v))
    return pools, slots


def _table(step):
    """Page table after ``step`` decode tokens (one per request per step)."""
    lens = [n + step for n in LENGTHS]
    ip, ix, ll, _, _ = contiguous_table([n + 8 for n in LENGTHS], PAGE)
    ll = np.array([(n - 1) % PAGE + 1 for n in lens], np.int32)
    counts = [-(-n // PAGE) for n in lens]
    rows = [ix[ip[b]:ip[b] + counts[b]] for b in range(len(lens))]
    return (np.concatenate([[0], np.cumsum(counts)]).astype(np.int32), np.concatenate(rows).astype(np.int32), ll)


def test_graph_replay_is_bit_identical_to_eager_and_telemetry_counts_replays():
    (pe, pg), slots = _model_pools()
    B, Hq = len(LENGTHS), HKV * G
    cert = wc.CertConfig(tier="AB", num_layers=L, steps=16, tau=0.05)
    tel_e = wc.Telemetry(L, Hq, cert, backend="cuda")
    tel_g = wc.Telemetry(L, Hq, cert, backend="cuda")
    # the graph's input buffers, refilled in place between replays; the page table has its final size
    ip0, ix0, ll0 = _table(1)
    nnz_max = len(_table(6)[1])
    q_buf = cp.zeros((L, B, Hq, D), cp.float32)
    k_buf = cp.zeros((L, B, HKV, D), cp.float32)
    v_buf = cp.zeros((L, B, HKV, D), cp.float32)
    s_buf = cp.zeros(B, cp.int64)
    ip_buf = cp.zeros(B + 1, cp.int32)
    ix_buf = cp.zeros(nnz_max, cp.int32)
    ll_buf = cp.zeros(B, cp.int32)
    plans = [wc.decode_plan(q_buf[l], pg, layer=l, kv_indptr=ip_buf, kv_indices=ix_buf, kv_last_page_len=ll_buf,
                            cert=cert, telemetry=tel_g) for l in range(L)]

    def step():
        for l in range(L):
            pg.write(l, s_buf, k_buf[l], v_buf[l])
            plans[l].launch()

    graph = wc.CapturedStep(step, pools=[pg])
    rng = np.random.default_rng(1)
    for t in range(1, 6):  # eager step, then a replay on the same inputs: 5 interleaved replays
        ip, ix, ll = _table(t)
        q = rng.standard_normal((L, B, Hq, D)).astype(np.float32)
        q[..., 3] *= 4
        q[:, :, ::2] *= 0.01  # half of the heads are near-uniform (tiny risk): coverage is in (0, 1)
        k = np.stack([random_rows(rng, B, HKV, D, massive=[(3, 30.0)]) for _ in range(L)])
        v = np.stack([random_rows(rng, B, HKV, D) for _ in range(L)])
        s = np.array([slots[b][LENGTHS[b] + t - 1] for b in range(B)], np.int64)
        eager = []
        for l in range(L):
            pe.write(l, cp.asarray(s), cp.asarray(k[l]), cp.asarray(v[l]))
            eager.append(wc.decode_attention(cp.asarray(q[l]), pe, layer=l, kv_indptr=cp.asarray(ip),
                                             kv_indices=cp.asarray(ix), kv_last_page_len=cp.asarray(ll), cert=cert,
                                             telemetry=tel_e))
        # refill the graph's inputs in place (the page table grows inside a fixed-size buffer)
        q_buf[...] = cp.asarray(q)
        k_buf[...] = cp.asarray(k)
        v_buf[...] = cp.asarray(v)
        s_buf[...] = cp.asarray(s)
        ip_buf[...] = cp.asarray(ip)
        ix_buf[: len(ix)] = cp.asarray(ix)
        ll_buf[...] = cp.asarray(ll)
        cp.cuda.get_current_stream().synchronize()
        before = tel_g.snapshot()["cells"]
        graph.replay()
        graph.synchronize()
        assert tel_g.snapshot()["cells"] == before + L * B * Hq  # the counters grow during replay
        for l in range(L):
            got = plans[l].result()
            for name in ("o", "lse", "log_a", "risk", "tv_bound", "cmax"):
                a, b_ = getattr(eager[l], name).get(), getattr(got, name).get()
                assert np.array_equal(a.view(np.uint8), b_.view(np.uint8)), (t, l, name)
        for name in ("codes", "scales", "outliers", "witness"):
            assert np.array_equal(getattr(pe, name).get().view(np.uint8), getattr(pg, name).get().view(np.uint8))
    se, sg = tel_e.snapshot(), tel_g.snapshot()
    assert sg["steps"] == se["steps"] == 5 and sg["cells"] == 5 * L * B * Hq
    for key in ("cells", "coverage", "overflow_fraction", "mean_r_finite", "max_r_finite", "kv_coverage"):
        assert se[key] == sg[key], key
    assert np.array_equal(se["head_max_r"], sg["head_max_r"])
    assert np.array_equal(se["head_exceed"], sg["head_exceed"])
    assert 0 < sg["coverage"] < 1  # the workload exercises both sides of tau


def test_certify_kernel_matches_the_python_formula():
    rng = np.random.default_rng(3)
    n = 5000
    log_a = np.abs(rng.standard_normal(n) * 2).astype(np.float32)
    log_a[:5] = [0, np.inf, np.nan, 1e-30, 40.0]
    lse = (rng.standard_normal(n) * 50).astype(np.float32)
    lse[5:8] = [-np.inf, np.nan, 1e6]
    cmax = np.abs(rng.standard_normal(n) * 3).astype(np.float32)
    cmax[8:10] = [np.inf, np.nan]
    risk = cp.empty(n, cp.float64)
    tv = cp.empty(n, cp.float64)
    from witcert_cupy import _cuda

    gam = np.abs(rng.standard_normal(n) * 1e-3).astype(np.float32)
    _cuda.kernel("decode.cu", "decode_certify")(((n + 255) // 256,), (256,),
                                                (cp.asarray(log_a), cp.asarray(lse), cp.asarray(cmax), cp.asarray(gam),
                                                 np.int32(n), risk, tv))
    r_ref = cert_mod.risk_from_log_a(log_a, lse, gam)
    t_ref = cert_mod.tv_bound(r_ref, cmax)
    r_got, t_got = risk.get(), tv.get()
    assert np.array_equal(np.isinf(r_got), np.isinf(r_ref))
    fin = np.isfinite(r_ref)
    np.testing.assert_allclose(r_got[fin], r_ref[fin], rtol=1e-14, atol=0)
    np.testing.assert_allclose(t_got, t_ref, rtol=1e-14, atol=0)
