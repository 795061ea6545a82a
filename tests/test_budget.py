"""The request budget is counted, not trusted (spec §4.4; docs/certificate.md §10.8), on both backends.

Before the ledger, a request could certify any number of steps under ``CertConfig(steps=T)``: every
test below that expects ``+inf`` past ``L · T`` failed there."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy.reference import to_host as H
from helpers import contiguous_table, filled_pool, random_rows

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def _setup(backend, L=1, lengths=(70, 40), cfg=None, **kw):
    rng = np.random.default_rng(11)
    pool, table, _, _ = filled_pool(rng, lengths=list(lengths), H=2, L=L, cfg=cfg, backend=backend, **kw)
    xp = pool.xp
    for layer in range(1, L):  # the other layers hold the same rows (only the layer count matters)
        for s in table[3]:
            pool.write(layer, xp.asarray(s), xp.asarray(pool.exact_rows(0, s, "k")),
                       xp.asarray(pool.exact_rows(0, s, "v")))
    q = rng.standard_normal((len(lengths), 8, 128)).astype(np.float32)
    return pool, table, q


def _decode(pool, table, q, cert, layer=0, **kw):
    xp = pool.xp
    indptr, indices, last, _ = table
    return wc.decode_attention(xp.asarray(q), pool, layer=layer, kv_indptr=xp.asarray(indptr),
                               kv_indices=xp.asarray(indices), kv_last_page_len=xp.asarray(last), cert=cert, **kw)


def test_cells_past_the_declared_steps_are_infinite_and_counted(backend):
    pool, table, q = _setup(backend)
    cert = wc.CertConfig(tier="B", steps=2)
    tel = wc.Telemetry(1, 8, cert, backend=backend)
    r = [_decode(pool, table, q, cert, telemetry=tel) for _ in range(3)]
    for res in r[:2]:
        assert np.all(np.isfinite(H(res.risk)))
    assert np.all(np.isinf(H(r[2].risk))) and np.all(H(r[2].tv_bound) == 1.0)
    # the step is otherwise the same computation: o is untouched
    np.testing.assert_array_equal(H(r[2].o), H(r[0].o))
    assert pool.ledger.spent([0, 1]).tolist() == [3 * 8, 3 * 8]  # cells: 8 query heads
    snap = tel.snapshot()
    assert snap["cells"] == 3 * 2 * 8 and snap["overflow_fraction"] == pytest.approx(1 / 3)


def test_layers_default_to_the_pool_and_a_smaller_declared_l_is_enforced(backend):
    pool, table, q = _setup(backend, L=2, cfg=wc.QuantConfig(128, witness_bands=16))
    cert = wc.CertConfig(tier="AB", steps=1)  # L = 2 from the pool: one step over both layers
    assert all(np.all(np.isfinite(H(_decode(pool, table, q, cert, layer=l).risk))) for l in (0, 1))
    assert np.all(np.isinf(H(_decode(pool, table, q, cert, layer=0).risk)))
    pool.ledger.reset()
    small = wc.CertConfig(tier="AB", steps=1, num_layers=1)  # declares one layer, uses two
    assert np.all(np.isfinite(H(_decode(pool, table, q, small, layer=0).risk)))
    assert np.all(np.isinf(H(_decode(pool, table, q, small, layer=1).risk)))


def test_requests_map_rows_to_ledger_ids_and_reset_starts_new_requests(backend):
    pool, table, q = _setup(backend)
    cert = wc.CertConfig(tier="B", steps=1)
    xp = pool.xp
    _decode(pool, table, q, cert, requests=xp.asarray(np.array([5, 9], np.int32)))
    assert pool.ledger.spent([5, 9, 0, 1]).tolist() == [8, 8, 0, 0]
    # row 0 is request 9 now (it moved): spent; row 1 is the fresh request 3
    r = _decode(pool, table, q, cert, requests=xp.asarray(np.array([9, 3], np.int32)))
    risk = H(r.risk)
    assert np.all(np.isinf(risk[0])) and np.all(np.isfinite(risk[1]))
    pool.ledger.reset([9])
    assert np.all(np.isfinite(H(_decode(pool, table, q, cert, requests=xp.asarray(np.array([9, 4]))).risk)))
    assert pool.ledger.spent([9, 3, 4, 5]).tolist() == [8, 8, 8, 8]


def test_a_request_cannot_switch_budgets(backend):
    pool, table, q = _setup(backend)
    _decode(pool, table, q, wc.CertConfig(tier="B", steps=4))
    # the same request under T = 8 would get a larger δ_loc for units the first budget never had
    assert np.all(np.isinf(H(_decode(pool, table, q, wc.CertConfig(tier="B", steps=8)).risk)))
    assert np.all(np.isinf(H(_decode(pool, table, q, wc.CertConfig(tier="B", steps=4, delta_req=0.1)).risk)))
    assert np.all(np.isfinite(H(_decode(pool, table, q, wc.CertConfig(tier="B", steps=4)).risk)))
    assert pool.ledger.spent([0]).tolist() == [2 * 8]


def test_tier_a_spends_nothing(backend):
    cfg = wc.QuantConfig(128, witness_bands=16)
    pool, table, q = _setup(backend, cfg=cfg)
    for _ in range(3):
        assert np.all(np.isfinite(H(_decode(pool, table, q, wc.CertConfig(tier="A", steps=1)).risk)))
    assert pool.ledger.spent([0, 1]).tolist() == [0, 0]


def test_the_gates_rounds_spend_one_step(backend):
    rng = np.random.default_rng(1)
    indptr, indices, last, slots, npages = contiguous_table([300], 16)
    pool = wc.KVPool(1, 2, 128, npages, 16, wc.QuantConfig(128, witness_bands=16), keep_exact=True,
                     exact_tier_pages=64, backend=backend)
    xp = pool.xp
    pool.write(0, xp.asarray(slots[0]), xp.asarray(random_rows(rng, 300, 2, 128, massive=[(5, 150.0)])),
               xp.asarray(random_rows(rng, 300, 2, 128)))
    q = rng.standard_normal((1, 8, 128)).astype(np.float32)
    q[:, ::2, 5] *= 12.0
    res, rep = wc.gated_decode(xp.asarray(q), pool, layer=0, kv_indptr=xp.asarray(indptr),
                               kv_indices=xp.asarray(indices), kv_last_page_len=xp.asarray(last),
                               cert=wc.CertConfig(tier="AB", steps=1, tau=0.2))
    assert rep.rounds >= 1 and np.all(np.isfinite(H(res.risk)))
    assert pool.ledger.spent([0]).tolist() == [8]
    res, rep = wc.gated_decode(xp.asarray(q), pool, layer=0, kv_indptr=xp.asarray(indptr),
                               kv_indices=xp.asarray(indices), kv_last_page_len=xp.asarray(last),
                               cert=wc.CertConfig(tier="AB", steps=1, tau=0.2))
    assert np.all(np.isinf(H(res.risk))) and rep.over_threshold.all()


def test_extend_spends_one_step_per_position(backend):
    pool, table, q = _setup(backend, lengths=(70, 40))
    xp = pool.xp
    indptr, indices, last, _ = table
    qo = np.array([0, 3, 5], np.int32)
    qq = np.random.default_rng(2).standard_normal((5, 8, 128)).astype(np.float32)
    kw = dict(layer=0, qo_indptr=xp.asarray(qo), kv_indptr=xp.asarray(indptr), kv_indices=xp.asarray(indices),
              kv_last_page_len=xp.asarray(last), cert=wc.CertConfig(tier="B", steps=4), kernel="decode")
    r1 = wc.extend_attention(xp.asarray(qq), pool, **kw)
    assert np.all(np.isfinite(H(r1.risk)))
    assert pool.ledger.spent([0, 1]).tolist() == [3 * 8, 2 * 8]
    risk = H(wc.extend_attention(xp.asarray(qq), pool, **kw).risk)
    # request 0: positions 4, 5, 6 (only the first within T = 4); request 1: positions 3, 4
    assert np.isfinite(risk[0]).all() and np.isinf(risk[1:3]).all() and np.isfinite(risk[3:5]).all()


def test_bad_requests_raise_and_charge_nothing():
    pool, table, q = _setup("cpu")
    cert = wc.CertConfig(tier="B", steps=1)
    for bad, exc in (([0, 4096], ValueError), ([-1, 0], ValueError), ([0], ValueError), ([0.0, 1.0], TypeError)):
        with pytest.raises(exc, match="requests"):
            _decode(pool, table, q, cert, requests=np.array(bad))
    assert pool.ledger.spent().sum() == 0
    with pytest.raises(ValueError, match="max_requests"):
        wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend="cpu", max_requests=0)
    small = wc.KVPool(1, 2, 128, pool.num_pages, 16, wc.QuantConfig(128), backend="cpu", max_requests=1)
    with pytest.raises(ValueError, match="max_requests"):
        _decode(small, table, q, cert)


@pytest.mark.gpu
def test_every_replay_of_a_captured_step_is_counted():
    pool, table, q = _setup("cuda")
    import cupy as cp

    indptr, indices, last, _ = table
    cert = wc.CertConfig(tier="B", steps=3)
    plan = wc.decode_plan(cp.asarray(q), pool, layer=0, kv_indptr=cp.asarray(indptr, cp.int32),
                          kv_indices=cp.asarray(indices, cp.int32), kv_last_page_len=cp.asarray(last, cp.int32),
                          cert=cert)
    g = wc.CapturedStep(plan.launch, pools=[pool])
    finite = []
    for _ in range(4):
        g.replay()
        g.synchronize()
        finite.append(bool(np.isfinite(plan.result().risk.get()).all()))
    assert finite == [True, True, True, False]
    assert pool.ledger.spent([0, 1]).tolist() == [4 * 8, 4 * 8]
