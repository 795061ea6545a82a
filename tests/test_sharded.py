"""Tensor-parallel sharding (issue 9), simulated in one process: every rank's pool in this process,
on the CPU (CI) or on one GPU (``-m gpu``).  A sharded run must store the same codes and give the
same per-head outputs and certificates as one pool of every head, and the global telemetry must be
the sum of the per-rank telemetry.  The multi-process NCCL run is ``python/tp_decode.py``."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy.reference import to_host as H
from witcert_cupy.sharded import ShardedKVPool, global_cert, reduce_telemetry, shard_kv_heads
from helpers import contiguous_table, random_rows

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
L, HKV, G, D = 2, 4, 4, 128


def _build(backend, world, rng_seed=0):
    lengths = [150, 33, 260]
    indptr, indices, last, slots, npages = contiguous_table(lengths, 16)
    pairs = np.array([[[1], [5], [9], [13]], [[2], [6], [10], [14]]])  # per (layer, kv head): bypass differs
    cfg = wc.QuantConfig(D, witness_bands=16, outlier_pairs=pairs, seed=99)
    full = wc.KVPool(L, HKV, D, npages, 16, cfg, backend=backend, keep_exact=True, exact_tier_pages=64)
    sp = ShardedKVPool(L, HKV, D, npages, 16, cfg, world_size=world, backend=backend, keep_exact=True,
                       exact_tier_pages=64)
    rng = np.random.default_rng(rng_seed)
    xp = full.xp
    for layer in range(L):
        for s in slots:
            k = random_rows(rng, len(s), HKV, D, massive=[(3, 60.0)])
            v = random_rows(rng, len(s), HKV, D)
            full.write(layer, xp.asarray(s), xp.asarray(k), xp.asarray(v))
            sp.write(layer, s, k, v)
    return full, sp, (indptr, indices, last)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world", [2, 4])
def test_sharded_equals_single_pool(backend, world):
    full, sp, (ip, ix, ll) = _build(backend, world)
    xp = full.xp
    for r, pool in enumerate(sp.shards):  # bit-identical storage: the stream is keyed by the model's head
        sl = sp.kv_slice(r)
        for name in ("codes", "scales", "outliers", "witness"):
            a, b = H(getattr(full, name))[:, :, sl], H(getattr(pool, name))
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (r, name)
    Hq = HKV * G
    cert = wc.CertConfig(tier="AB", num_layers=L, steps=4)
    tel_full = wc.Telemetry(L, Hq, cert, backend=backend)
    tels = [wc.Telemetry(L, Hq // world, cert, backend=backend) for _ in range(world)]
    rng = np.random.default_rng(1)
    for step in range(3):
        q = rng.standard_normal((3, Hq, D)).astype(np.float32)
        q[:, ::3, 3] *= 6
        for layer in range(L):
            kw = dict(layer=layer, kv_indptr=xp.asarray(ip), kv_indices=xp.asarray(ix),
                      kv_last_page_len=xp.asarray(ll), num_splits=3)
            ref = wc.decode_attention(xp.asarray(q), full, cert=cert, telemetry=tel_full, **kw)
            parts = sp.decode(q, cert=cert, telemetry=tels, **kw)
            for r, part in enumerate(parts):
                hs = sp.q_slice(r, Hq)
                for name in ("o", "lse", "log_a", "risk", "tv_bound", "cmax"):
                    a, b = H(getattr(ref, name))[:, hs], H(getattr(part, name))
                    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (step, layer, r, name)
    offsets = [sp.q_slice(r, Hq).start for r in range(world)]
    snap = reduce_telemetry(tels, offsets, Hq)
    ref = tel_full.snapshot()
    for key in ("steps", "cells", "coverage", "overflow_fraction", "kv_coverage"):
        assert snap[key] == ref[key], key
    assert np.isclose(snap["mean_r_finite"], ref["mean_r_finite"], rtol=1e-12)
    assert snap["max_r_finite"] == ref["max_r_finite"]
    assert np.array_equal(snap["head_exceed"], ref["head_exceed"])
    assert np.array_equal(snap["head_max_r"], ref["head_max_r"])
    assert 0 < ref["coverage"] < 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_gate_repairs_per_rank_with_the_global_budget(backend):
    full, sp, (ip, ix, ll) = _build(backend, 2, rng_seed=3)
    xp = full.xp
    Hq = HKV * G
    q = np.random.default_rng(4).standard_normal((3, Hq, D)).astype(np.float32)
    q[:, :, 3] *= 8
    cert = global_cert(wc.CertConfig(tier="AB", num_layers=L, steps=4), Hq)
    kw = dict(layer=0, kv_indptr=xp.asarray(ip), kv_indices=xp.asarray(ix), kv_last_page_len=xp.asarray(ll),
              cert=cert)
    res_full, rep_full = wc.gated_decode(xp.asarray(q), full, **kw)
    assert rep_full.pages_repaired > 0 and not rep_full.tier_full
    total = 0
    for r, pool in enumerate(sp.shards):
        res, rep = wc.gated_decode(xp.asarray(np.ascontiguousarray(q[:, sp.q_slice(r, Hq)])), pool, **kw)
        assert np.all(H(res.risk) <= 0.2) and not rep.tier_full
        total += rep.pages_repaired
        # the same pages get repaired as in the single pool (the ranking is per kv head)
        assert np.array_equal(pool.tier_map[0] >= 0, full.tier_map[0][sp.kv_slice(r)] >= 0)
    assert total == rep_full.pages_repaired


def test_budget_and_errors():
    from witcert_cupy import certificate as cm

    c = wc.CertConfig(num_layers=4, steps=8)
    assert cm.log_budget(global_cert(c, 32), 8) == cm.log_budget(c, 32) > cm.log_budget(c, 8)
    assert shard_kv_heads(8, 4) == [(0, 2), (2, 2), (4, 2), (6, 2)]
    with pytest.raises(ValueError, match="world_size"):
        shard_kv_heads(8, 3)
    with pytest.raises(ValueError, match="num_q_heads"):
        pool = wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend="cpu")
        wc.decode_attention(np.zeros((1, 8, 128), np.float32), pool, layer=0, kv_indptr=np.array([0, 1]),
                            kv_indices=np.array([0]), kv_last_page_len=np.array([1]),
                            cert=wc.CertConfig(num_q_heads=4))
    with pytest.raises(ValueError, match="kv_head_offset"):
        wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128), backend="cpu", kv_head_offset=-1)
    with pytest.raises(ValueError, match="outside outlier_pairs"):
        wc.KVPool(1, 2, 128, 4, 16, wc.QuantConfig(128, outlier_pairs=np.zeros((1, 3, 1), int)), backend="cpu",
                  kv_head_offset=2)
