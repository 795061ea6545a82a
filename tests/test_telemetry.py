"""SPEC §8: telemetry aggregates equal the same counts made by hand, on the CPU (NumPy counters)
and on the GPU (the single-CTA kernel of ``cuda/telemetry.cu``), with one test body."""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy.reference import to_host
from helpers import filled_pool


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_telemetry_counts_sampling_and_overflow(backend):
    rng = np.random.default_rng(0)
    L, H, G = 2, 2, 4
    pool, table, _, _ = filled_pool(rng, lengths=[120, 40, 300], H=H, L=L, layer=0, backend=backend)
    xp = pool.xp
    for s in table[3]:  # layer 1 gets rows too
        pool.write(1, xp.asarray(s), xp.asarray(rng.standard_normal((len(s), H, 128))),
                   xp.asarray(rng.standard_normal((len(s), H, 128))))
    bad = table[3][1][7]  # a non-finite K row in layer 1, kv head 0: request 1 overflows there
    k = rng.standard_normal((1, H, 128))
    k[0, 0, 3] = np.inf
    pool.write(1, xp.asarray([bad]), xp.asarray(k), xp.asarray(k))
    indptr, indices, last = (xp.asarray(a) for a in table[:3])
    tau = 0.05
    cert = wc.CertConfig(tier="B", num_layers=L, steps=5, tau=tau)
    tel_all = wc.Telemetry(L, H * G, cert, backend=backend)
    tel_half = wc.Telemetry(L, H * G, cert, sample_every=2, backend=backend)
    risks = []
    for step in range(5):
        q = xp.asarray((rng.standard_normal((3, H * G, 128)) * (0.5 + step)).astype(np.float32))
        for layer in range(L):
            kw = dict(layer=layer, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last, cert=cert)
            r = wc.decode_attention(q, pool, telemetry=tel_all, **kw)
            # the same cells as requests of their own (ledger ids 3..5), so both see the same risks
            wc.decode_attention(q, pool, telemetry=tel_half, requests=xp.asarray(np.array([3, 4, 5])), **kw)
            risks.append((step, layer, to_host(r.risk)))
    snap = tel_all.snapshot()
    R = np.stack([x[2] for x in risks])                  # [steps*L, B, Hq]
    fin = np.isfinite(R)
    assert snap["steps"] == 5 and snap["cells"] == R.size
    assert snap["coverage"] == np.mean(R <= tau)
    assert snap["overflow_fraction"] == np.mean(~fin) > 0
    assert np.isclose(snap["mean_r_finite"], R[fin].mean())
    assert np.isclose(snap["max_r_finite"], R[fin].max())
    per_layer = R.reshape(5, L, 3, H * G)
    assert np.allclose(snap["head_max_r"], np.where(np.isfinite(per_layer), per_layer, 0).max(axis=(0, 2)))
    assert np.array_equal(snap["head_exceed"], (per_layer > tau).sum(axis=(0, 2)))
    kv_ok = (R <= tau).reshape(R.shape[0], 3, H, G).all(-1)
    assert snap["kv_coverage"] == kv_ok.mean()
    half = tel_half.snapshot()
    even = np.stack([x[2] for x in risks if x[0] % 2 == 0])
    assert half["cells"] == even.size and half["coverage"] == np.mean(even <= tau)


def test_telemetry_errors():
    rng = np.random.default_rng(1)
    pool, table, _, _ = filled_pool(rng, lengths=[10])
    indptr, indices, last, _ = table
    q = np.zeros((1, 8, 128), np.float32)
    kw = dict(layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)
    with pytest.raises(ValueError, match="certificate"):
        wc.decode_attention(q, pool, telemetry=wc.Telemetry(1, 8, wc.CertConfig()), **kw)
    with pytest.raises(TypeError, match="telemetry"):
        wc.decode_attention(q, pool, telemetry={}, cert=wc.CertConfig(), **kw)
    with pytest.raises(TypeError, match="cert"):
        wc.Telemetry(1, 8, 0.2)  # the threshold's one home is the CertConfig
    with pytest.raises(ValueError, match="tau"):
        wc.decode_attention(q, pool, telemetry=wc.Telemetry(1, 8, wc.CertConfig(tau=0.1)), cert=wc.CertConfig(), **kw)
    with pytest.raises(ValueError, match="risk"):
        wc.Telemetry(1, 8, wc.CertConfig()).record(0, np.zeros((2, 4)), 2)
