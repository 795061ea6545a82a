"""SPEC §3: the write path on the CPU backend — conformance, adversarial inputs, the reconstruction
bound, bypass, witness, byte account and non-finite handling."""

import json
from pathlib import Path

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import _contract as C
from witcert_cupy import reference

DATA = Path(__file__).parent / "data" / "vectors"
BOUND = C.RECON_BOUND_STEPS


def _recon_steps(x, q, xhat, gs):
    """|x̂ − x| / s per element (float64), with the stored fp16 scale; 0 where s = 0."""
    s = np.repeat(q.scales.astype(np.float64), gs, axis=-1)
    err = np.abs(xhat.astype(np.float64) - x.astype(np.float16).astype(np.float64))
    return np.where(s > 0, err / np.where(s > 0, s, 1), err), s


@pytest.mark.parametrize("case", json.loads((DATA / "quantize.json").read_text())["cases"],
                         ids=lambda c: f"m{c['bits']}")
def test_quantize_conformance_vectors(case):
    cfg = wc.QuantConfig(case["head_dim"], group_size=case["group_size"], dither_bits=case["bits"],
                         seed=int(case["seed"]))
    x = np.array(case["x_fp16_bits"], np.uint16).view(np.float16)[:, None, :]
    q = wc.quantize(x, np.array(case["slots"]), layer=case["layer"], side=case["side"], config=cfg)
    assert q.codes.dtype == np.int8 and q.scales.dtype == np.float16
    assert np.array_equal(q.codes[:, 0], np.array(case["codes"]))
    assert np.array_equal(q.scales[:, 0].view(np.uint16), np.array(case["scales_fp16_bits"]))


def _adversarial_rows(rng, n, d):
    """Rows mixing the hard cases: subnormal and tiny groups, zero groups, huge values, ties of x/s."""
    x = rng.standard_normal((n, 1, d)).astype(np.float32)
    x[0::7, 0, :32] = 0.0                                                     # amax == 0
    x[1::7, 0, :32] = rng.integers(-3, 4, (len(x[1::7]), 32)) * 2.0**-24       # fp16 subnormals
    x[2::7, 0, 32:] *= 1e-5                                                   # tiny normal group
    x[3::7, 0, :] = np.sign(x[3::7, 0, :]) * 65504.0                          # largest fp16
    x[4::7, 0, 5] = 126.5 * 2.0**-4                                          # amax makes s exactly 2^-4
    x[5::7, 0, :] = rng.integers(-127, 128, (len(x[5::7]), d)) / 8.0          # values on a coarse grid
    x[6::7, 0, :] = rng.standard_normal((len(x[6::7]), d)) * 300.0
    return x


@pytest.mark.parametrize("bits", [8, 16, 24])
def test_codes_in_range_and_reconstruction_bound(bits):
    rng = np.random.default_rng(bits)
    d, n = 128, 3000
    cfg = wc.QuantConfig(d, dither_bits=bits, seed=bits * 77)
    x = _adversarial_rows(rng, n, d)
    slots = rng.permutation(10 * n)[:n]
    q = wc.quantize(x, slots, layer=3, side="v", config=cfg)
    assert q.codes.min() >= -127 and q.codes.max() <= 127
    xhat = wc.dequantize(q, slots, layer=3, side="v", config=cfg)
    steps, s = _recon_steps(x, q, xhat, 32)
    assert np.all(steps <= BOUND), steps.max()
    assert np.all(xhat[s == 0] == 0.0)
    assert np.all(np.isfinite(xhat))
    # the scale is the smallest fp16 at or above fl32(amax / 126.5)
    x16 = x.astype(np.float16).astype(np.float32).reshape(n, 1, -1, 32)
    q32 = (np.abs(x16).max(-1) / np.float32(126.5)).astype(np.float32)
    s16 = q.scales.astype(np.float32)
    assert np.all(s16 >= q32)
    prev = np.nextafter(q.scales, np.float16(-np.inf)).astype(np.float32)
    assert np.all((prev < q32) | (q.scales == 0))


def test_exact_ties_round_half_even_and_stay_in_bound():
    """Rows built so that x/s + ξ lands exactly on k + 1/2 for every channel."""
    d, n = 64, 64
    cfg = wc.QuantConfig(d, dither_bits=8, seed=5)
    slots = np.arange(n) * 3 + 11
    xi = np.stack([wc.dither(slots, layer=0, kv_head=0, side="k", head_dim=d, seed=5, bits=8)], 1)
    s = 2.0**-4
    rng = np.random.default_rng(0)
    k = rng.integers(-2, 2, (n, 1, d))
    x = (s * (k + 0.5 - xi.astype(np.float64))).astype(np.float16)
    x[:, 0, ::32] = 126.5 * s                                                  # pins s16 = 2^-4
    q = wc.quantize(x, slots, layer=0, side="k", config=cfg)
    assert np.all(q.scales.astype(np.float64) == s)
    z = x.astype(np.float64) / s + xi
    tie = (z - np.floor(z)) == 0.5
    assert tie.sum() > n * (d - 2) * 0.9
    assert np.array_equal(q.codes[tie], np.rint(z[tie]).astype(np.int8))  # half to even
    xhat = wc.dequantize(q, slots, layer=0, side="k", config=cfg)
    steps, _ = _recon_steps(x, q, xhat, 32)
    assert np.all(steps <= BOUND)
    # the other rounding of a tie is within the bound too (the GPU may pick it: SPEC §9)
    other = np.where(np.rint(z) > z, np.floor(z), np.ceil(z))
    alt = s * (other - xi)
    assert np.all(np.abs(alt[tie] - x.astype(np.float64)[tie]) <= BOUND * s)


def _wrong_quantizer_violations(x, slots, cfg):
    """What a kernel that quantizes with the fp32 scale but stores fp16 would reconstruct."""
    n, _, d = x.shape
    x16 = x.astype(np.float16).astype(np.float32)
    xi = wc.dither(slots, layer=0, kv_head=0, side="k", head_dim=d, seed=cfg.seed, bits=cfg.dither_bits)
    g = x16.reshape(n, -1, 32)
    s32 = (np.abs(g).max(-1, keepdims=True) / np.float32(126.5)).astype(np.float32)
    s16 = s32.astype(np.float16)
    s16 = np.where(s16.astype(np.float32) < s32, np.nextafter(s16, np.float16(np.inf)), s16).astype(np.float32)
    k = np.rint(g / s32 + xi.reshape(n, -1, 32))
    xhat = s16 * (k - xi.reshape(n, -1, 32))
    return int(np.sum(np.abs(xhat - g) > BOUND * s16))


def test_fp32_scale_quantizing_is_caught():
    """The bound check fails for a quantizer that divides by the fp32 scale: ours has 0 violations."""
    rng = np.random.default_rng(11)
    cfg = wc.QuantConfig(128, seed=1)
    x = (rng.standard_normal((4000, 1, 128)) * rng.lognormal(0, 2, (4000, 1, 1))).astype(np.float32)
    slots = np.arange(4000)
    assert _wrong_quantizer_violations(x, slots, cfg) > 100
    q = wc.quantize(x, slots, layer=0, side="k", config=cfg)
    steps, _ = _recon_steps(x, q, wc.dequantize(q, slots, layer=0, side="k", config=cfg), 32)
    assert int(np.sum(steps > BOUND)) == 0


@pytest.mark.parametrize("rope", ["neox", "gptj"])
def test_bypassed_channels_excluded_from_amax_and_stored_exactly(rope):
    rng = np.random.default_rng(2)
    d = 128
    pairs = np.array([[[3, 60], [10, 11]]])  # [L=1, Hkv=2, 2 pairs]
    cfg = wc.QuantConfig(d, outlier_pairs=pairs, rope=rope, witness_bands=8)
    x = rng.standard_normal((50, 2, d)).astype(np.float32)
    ch = cfg.bypass_channels(1, 2)[0]  # [2, 4]
    for h in range(2):
        x[:, h, ch[h]] = 3000.0 * rng.standard_normal((50, 4))
    q = wc.quantize(x, np.arange(50), layer=0, side="k", config=cfg)
    for h in range(2):
        assert np.array_equal(q.outliers[:, h], x[:, h, ch[h]].astype(np.float16))
        assert np.all(q.codes[:, h, ch[h]] == 0)
        xm = x[:, h].copy()
        xm[:, ch[h]] = 0
        amax = np.abs(xm.astype(np.float16).astype(np.float32)).reshape(50, -1, 32).max(-1)
        assert np.all(q.scales[:, h].astype(np.float32) < amax / 126.0)  # not driven by the 3000s
    xhat = wc.dequantize(q, np.arange(50), layer=0, side="k", config=cfg)
    for h in range(2):
        assert np.array_equal(xhat[:, h, ch[h]], x[:, h, ch[h]].astype(np.float16).astype(np.float32))


def _exact_xhat(q, slots, layer, cfg):
    """x̂ = s·fl(k − ξ) as the exact product (float64), the x̂ the witness bounds (one kv head)."""
    return reference.exact_product_rows(q.codes, q.scales, slots, layer=layer, side="k", config=cfg)[:, 0]


@pytest.mark.parametrize("d,bands,bits", [(128, 16, 16), (64, 1, 16), (256, 1, 24), (256, 4, 8)])
def test_witness_bounds_band_residual_norm(d, bands, bits):
    """w_b >= ||x̂_b − x_b||_2 exactly for x̂ the exact product s·fl(k − ξ), also for bands too wide
    for a plain fp32 sum."""
    rng = np.random.default_rng(d + bands)
    cfg = wc.QuantConfig(d, witness_bands=bands, dither_bits=bits)
    x = _adversarial_rows(rng, 700, d)
    slots = np.arange(700) * 5
    q = wc.quantize(x, slots, layer=1, side="k", config=cfg)
    r = _exact_xhat(q, slots, 1, cfg) - x[:, 0].astype(np.float16).astype(np.float64)
    norms = np.sqrt((r[:, cfg.band_channels()] ** 2).sum(-1))
    w = q.witness[:, 0].astype(np.float64)
    assert np.all(w >= norms)
    assert np.all(w <= norms * 1.01 + 2.0**-24)  # and not wildly loose


def test_witness_bounds_the_exact_product_not_only_its_fp32_rounding():
    """The form-(I) decode multiplies the exact x̂ = s·(k − ξ), the fp32 read paths its rounding
    fl(x̂) (their evaluation term carries the difference, docs/certificate.md §10.1).  A row built so
    that fl(x̂) equals x on a band while x̂ does not: a witness of the fp32 reading (the chain this one
    replaced) is the fp16 floor there, below the exact residual's norm; this one bounds it."""
    d, bits, gs = 64, 8, 32
    cfg = wc.QuantConfig(d, group_size=gs, witness_bands=d // 2, rope="gptj", dither_bits=bits)
    # group amax values whose scale RU16(amax / 126.5) has a full 11-bit significand
    amaxes = np.arange(0x7800, 0x7BFF, dtype=np.uint16).view(np.float16)  # [32768, 65504)
    q32 = amaxes.astype(np.float32) / np.float32(C.SCALE_DIVISOR)
    s16 = q32.astype(np.float16)
    s16 = np.where(s16.astype(np.float32) < q32, np.nextafter(s16, np.float16(np.inf)), s16)
    full = (s16.view(np.uint16) & 1) == 1
    amaxes, scales = amaxes[full], s16[full].astype(np.float32)
    ks = np.arange(-120, 121, dtype=np.float32)
    found = None
    for slot in range(64):
        xi = wc.dither(np.array([slot]), layer=0, kv_head=0, side="k", head_dim=d, seed=cfg.seed, bits=bits)[0]
        hits = []
        for c in (0, 1):  # band 0: fl(s·(k − ξ)) an fp16 number, s·(k − ξ) not
            y = scales[:, None].astype(np.float64) * (ks - xi[c]).astype(np.float64)[None, :]
            f = y.astype(np.float32)
            hits.append((f.astype(np.float16).astype(np.float32) == f) & (f.astype(np.float64) != y), )
        both = np.flatnonzero(hits[0].any(1) & hits[1].any(1))
        if both.size:
            i = both[0]
            found = slot, amaxes[i], scales[i], [np.float16(scales[i] * (ks[np.argmax(h[i])] - xi[c]))
                                                 for c, h in enumerate(hits)]
            break
    assert found is not None, "no row found"
    slot, amax, s, vals = found
    row = np.zeros(d, np.float16)
    row[:2] = vals
    row[gs - 1] = amax  # sets the group's scale to s
    q = wc.quantize(row[None, None, :], np.array([slot]), layer=0, side="k", config=cfg)
    assert q.scales[0, 0, 0].astype(np.float32) == s
    x16 = row.astype(np.float64)
    fl = wc.dequantize(q, np.array([slot]), layer=0, side="k", config=cfg)[0, 0].astype(np.float64)
    ex = _exact_xhat(q, np.array([slot]), 0, cfg)[0]
    assert np.array_equal(fl[:2], x16[:2])
    norm = np.sqrt(((ex[:2] - x16[:2]) ** 2).sum())
    assert norm > 2.0**-24  # above the smallest fp16: what a witness of fl(x̂) − x would store
    assert q.witness[0, 0, 0].astype(np.float64) >= norm


def _two_sum(a, b):
    """float64 a + b as (s, err) with s + err exact."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _ru32(s, err):
    """The smallest float32 >= s + err (s + err exact, |err| below half an ulp of s)."""
    f = s.astype(np.float32)
    f64 = f.astype(np.float64)
    up = (f64 < s) | ((f64 == s) & (err > 0))
    return np.where(up, np.nextafter(f, np.float32(np.inf)), f)


def _witness_fp16(acc):
    root = np.sqrt(acc)  # rounded up: one step up where its square (exact in float64) is short of acc
    short = root.astype(np.float64) ** 2 < acc.astype(np.float64)
    r = np.where(short, np.nextafter(root, np.float32(np.inf)), root) * np.float32(C.WITNESS_MARGIN)
    h = r.astype(np.float16)
    return np.where(h.astype(np.float32) < r, np.nextafter(h, np.float16(np.inf)), h)


@pytest.mark.parametrize("rope", ["neox", "gptj"])
def test_witness_is_the_rounded_residual_chain(rope):
    """Each band's witness is the chain of docs/certificate.md §3, recomputed here in exact
    (double-double) arithmetic: the residual s·fl(k − ξ) − x rounded once to nearest, its square
    rounded up, the running sum rounded up in band order, the square root rounded up, the margin,
    fp16 rounded up.  The chain it replaced (on the fp32 reading fl(x̂): |fl(x̂) − x|
    rounded up, its square rounded up with the smallest normal as a floor) gives other bits on the
    same rows."""
    rng = np.random.default_rng(17)
    n, d, nb = 3000, 128, 16
    x = _adversarial_rows(rng, n, d)
    cfg = wc.QuantConfig(d, witness_bands=nb, rope=rope)
    slots = np.arange(n)
    q = wc.quantize(x, slots, layer=0, side="k", config=cfg)
    xh = wc.dequantize(q, slots, layer=0, side="k", config=cfg)[:, 0]
    x16 = x[:, 0].astype(np.float16).astype(np.float32)
    res = (_exact_xhat(q, slots, 0, cfg) - x16.astype(np.float64)).astype(np.float32)  # exact, then rounded
    tiny = np.float32(C.FP32_MIN_NORMAL)
    acc = np.zeros((n, nb), np.float32)
    old = np.zeros((n, nb), np.float32)
    for c in cfg.band_channels().T:  # step jj of every band
        r64 = res[:, c].astype(np.float64)
        t = _ru32(r64 * r64, np.zeros_like(r64))
        acc = _ru32(*_two_sum(acc.astype(np.float64), t.astype(np.float64)))
        sd, err = _two_sum(xh[:, c].astype(np.float64), -x16[:, c].astype(np.float64))
        neg = sd < 0
        e = _ru32(np.where(neg, -sd, sd), np.where(neg, -err, err)).astype(np.float64)
        to = np.maximum(_ru32(e * e, np.zeros_like(e)), tiny)
        old = _ru32(*_two_sum(old.astype(np.float64), to.astype(np.float64)))
    want = _witness_fp16(acc)
    assert np.array_equal(q.witness[:, 0].view(np.uint16), want.view(np.uint16))
    assert np.any(_witness_fp16(old).view(np.uint16) != want.view(np.uint16))


def test_fp16_rounding_on_entry():
    rng = np.random.default_rng(6)
    cfg = wc.QuantConfig(64, witness_bands=4)
    x64 = rng.standard_normal((40, 1, 64)) * 10
    slots = np.arange(40)
    a = wc.quantize(x64, slots, layer=0, side="k", config=cfg)
    b = wc.quantize(x64.astype(np.float16), slots, layer=0, side="k", config=cfg)
    c = wc.quantize(x64.astype(np.float32), slots, layer=0, side="k", config=cfg)
    for f in range(4):
        assert np.array_equal(a[f].view(np.uint8), b[f].view(np.uint8))
    # float32 -> fp16 and float64 -> fp16 may differ by a double rounding; the fp32 path must equal
    # rounding its own fp32 value
    d = wc.quantize(x64.astype(np.float32).astype(np.float16), slots, layer=0, side="k", config=cfg)
    assert np.array_equal(c.codes, d.codes) and np.array_equal(c.scales, d.scales)


def test_byte_account_is_exact():
    for d, gs, pairs, bands in [(128, 32, 0, 0), (128, 32, 2, 16), (64, 16, 1, 8), (256, 64, 3, 0)]:
        op = np.zeros((3, 2, pairs), np.int32) + np.arange(pairs) if pairs else None
        cfg = wc.QuantConfig(d, group_size=gs, outlier_pairs=op, witness_bands=bands)
        assert cfg.bytes_per_token_side() == d + 2 * d // gs + 4 * pairs + 2 * bands
        pool = wc.KVPool(3, 2, d, 10, 16, cfg, backend="cpu")
        assert pool.nbytes == pool.bytes_per_token() * pool.num_slots
        assert pool.bytes_per_token() == 3 * 2 * 2 * cfg.bytes_per_token_side()
    assert wc.QuantConfig(128).bytes_per_token_side() * 2 == 272  # vs 512 B of fp16 K+V


def test_nonfinite_rows_poison_their_groups_and_are_counted():
    rng = np.random.default_rng(8)
    cfg = wc.QuantConfig(64, witness_bands=4)
    x = rng.standard_normal((6, 1, 64)).astype(np.float32)
    x[1, 0, 3] = np.nan
    x[2, 0, 40] = np.inf
    x[3, 0, 10] = 1e6  # overflows fp16 on entry: +inf
    q = wc.quantize(x, np.arange(6), layer=0, side="k", config=cfg)
    s = q.scales.astype(np.float32)
    assert np.isinf(s[1, 0, 0]) and np.isfinite(s[1, 0, 1])
    assert np.isinf(s[2, 0, 1]) and np.isfinite(s[2, 0, 0])
    assert np.isinf(s[3, 0, 0])
    assert np.all(np.isfinite(s[[0, 4, 5]]))
    assert np.all(np.isinf(q.witness[1:4].astype(np.float32)))
    assert np.all(np.isfinite(q.witness[[0, 4, 5]].astype(np.float32)))
    pool = wc.KVPool(1, 1, 64, 2, 4, cfg, backend="cpu")
    pool.write(0, np.arange(6), x, x)
    assert int(pool.nonfinite_writes[0]) == 6  # 3 bad rows, written as K and as V
