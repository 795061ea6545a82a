"""SPEC §1–2: Philox4x32-10 known answers, the dither stream and its conformance vectors."""

import json
from pathlib import Path

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import stream
from witcert_cupy._cpu.bits import dither_inputs

DATA = Path(__file__).parent / "data" / "vectors"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "vectors"

KAT = [  # SPEC §1 (Random123 kat_vectors)
    (10, [0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    (10, [0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (10, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
    (7, [0, 0, 0, 0], [0, 0], [0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48]),
]


@pytest.mark.parametrize("rounds,ctr,key,want", KAT)
def test_philox_known_answers(rounds, ctr, key, want):
    c = np.array(ctr, np.uint32)
    k = np.array(key, np.uint32)
    got = stream._philox(c, k, rounds) if rounds != 10 else wc.philox4x32_10(c, k)
    assert got.dtype == np.uint32
    assert got.tolist() == want


def test_philox_broadcasts_key_and_batches():
    rng = np.random.default_rng(1)
    ctr = rng.integers(0, 2**32, size=(3, 5, 4), dtype=np.uint64).astype(np.uint32)
    key = rng.integers(0, 2**32, size=(5, 2), dtype=np.uint64).astype(np.uint32)
    out = wc.philox4x32_10(ctr, key)
    assert out.shape == (3, 5, 4)
    for i in range(3):
        for j in range(5):
            assert np.array_equal(out[i, j], wc.philox4x32_10(ctr[i, j], key[j]))
    # one key for all counters
    assert np.array_equal(wc.philox4x32_10(ctr, key[0])[1, 2], wc.philox4x32_10(ctr[1, 2], key[0]))


def _load(name):
    return json.loads((DATA / name).read_text())


def test_vendored_vectors_match_shared():
    if not SHARED.exists():
        pytest.skip("../shared/vectors is not beside this checkout")
    for name in ("dither.json", "quantize.json"):
        assert json.loads((SHARED / name).read_text()) == _load(name)


@pytest.mark.parametrize("case", _load("dither.json")["cases"], ids=lambda c: f"m{c['bits']}-{c['side']}")
def test_dither_conformance_vectors(case):
    xi = wc.dither(np.array(case["slots"], np.int64), layer=case["layer"], kv_head=case["kv_head"],
                   side=case["side"], head_dim=case["head_dim"], seed=int(case["seed"]), bits=case["bits"],
                   epoch=case["epoch"])
    assert xi.dtype == np.float32
    num = xi.astype(np.float64) * 2.0 ** (case["bits"] + 1)
    assert np.array_equal(num, np.array(case["xi_numerators"], np.float64))


@pytest.mark.parametrize("bits", [8, 16])
def test_dither_levels_equally_spaced_mean_zero(bits):
    """Each m gives exactly 2^m equally spaced values, mean 0 (observed exhaustively for m = 8, 16)."""
    slots = np.arange(40_000 if bits == 16 else 2_000, dtype=np.int64)
    xi = wc.dither(slots, layer=1, kv_head=0, side="k", head_dim=128, seed=12345, bits=bits)
    vals = np.unique(xi)
    K = 2**bits
    assert vals.size == K
    assert np.array_equal(vals * np.float32(2.0 ** (bits + 1)), np.arange(1 - K, K, 2, dtype=np.float32))
    assert vals.astype(np.float64).sum() == 0.0  # the level set is symmetric: mean exactly 0
    assert abs(xi.astype(np.float64).mean()) < 4 * 0.29 / np.sqrt(xi.size)


def test_dither_24bit_grid_and_moments():
    rng = np.random.default_rng(3)
    slots = rng.integers(0, 2**32, size=20_000, dtype=np.uint64).astype(np.int64)
    xi = wc.dither(slots, layer=3, kv_head=5, side="v", head_dim=128, seed=2**63 + 11, bits=24)
    num = xi.astype(np.float64) * 2.0**25
    assert np.all(num == np.round(num)) and np.all(num.astype(np.int64) % 2 != 0)
    assert num.min() >= 1 - 2**24 and num.max() <= 2**24 - 1
    assert abs(xi.astype(np.float64).mean()) < 4 * 0.29 / np.sqrt(xi.size)
    assert abs(xi.astype(np.float64).var() - 1 / 12) < 0.002


def test_dither_field_extraction_hits_every_level():
    """All 2^m field values j map to the midpoint grid (2j + 1 - K) / 2^(m+1), m = 24 included."""
    from witcert_cupy._cpu.bits import xi_from_words
    from numba import njit

    @njit
    def levels(bits, out):
        K = 1 << bits
        for j in range(K):
            if bits == 24:
                out[j] = xi_from_words(np.uint64(j << 8), 0, 0, 0, 0, bits)
            else:
                out[j] = xi_from_words(np.uint64(j), 0, 0, 0, 0, bits)

    for bits in (8, 16, 24):
        K = 2**bits
        out = np.empty(K, np.float32)
        levels(bits, out)
        want = (2 * np.arange(K, dtype=np.float64) + 1 - K) / 2.0 ** (bits + 1)
        assert np.array_equal(out.astype(np.float64), want)
        assert want.sum() == 0.0


@pytest.mark.parametrize("bits", [8, 16, 24])
def test_no_two_tuples_share_a_philox_input(bits):
    rng = np.random.default_rng(bits)
    n = 400_000
    t = np.stack([rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.int64),  # slot
                  rng.integers(0, 2, n), rng.integers(0, 2**16, n), rng.integers(0, 2**16, n),
                  rng.integers(0, 256, n)], 1)
    # plant near-collisions: same slot, neighbouring channels / heads / layers / sides
    t[: n // 4, 0] = rng.integers(0, 8, n // 4)
    t[: n // 4, 2] = rng.integers(0, 2, n // 4)
    t[: n // 4, 3] = rng.integers(0, 2, n // 4)
    t = np.unique(t, axis=0)
    out = np.empty((t.shape[0], 6), np.int64)
    dither_inputs(t[:, 0], t[:, 1], t[:, 2], t[:, 3], t[:, 4], np.zeros(t.shape[0], np.int64), bits, out)
    assert np.unique(out, axis=0).shape[0] == t.shape[0]


def test_dither_independent_of_batch_order():
    rng = np.random.default_rng(4)
    slots = rng.integers(0, 2**32, size=333, dtype=np.uint64).astype(np.int64)
    perm = rng.permutation(slots.size)
    kw = dict(layer=7, kv_head=2, side="k", head_dim=64, seed=99, bits=8)
    a = wc.dither(slots, **kw)
    b = wc.dither(slots[perm], **kw)
    assert np.array_equal(a[perm], b)
    assert np.array_equal(wc.dither(slots[5:6], **kw)[0], a[5])


def test_outlier_set_does_not_shift_the_stream():
    """Bypassed channels keep their word positions: ξ of the other channels is unchanged."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 1, 64)).astype(np.float32)
    slots = np.arange(16) + 1000
    cfg0 = wc.QuantConfig(64, seed=3)
    cfg1 = wc.QuantConfig(64, seed=3, outlier_pairs=np.array([[[4]]]))
    x1 = x.copy()
    x1[:, :, [4, 36]] = 0.0  # same amax in every group once the bypassed channels are excluded
    x0 = x1.copy()
    q0 = wc.quantize(x0, slots, layer=0, side="k", config=cfg0)
    q1 = wc.quantize(x1, slots, layer=0, side="k", config=cfg1)
    keep = np.setdiff1d(np.arange(64), [4, 36])
    assert np.array_equal(q0.codes[..., keep], q1.codes[..., keep])
