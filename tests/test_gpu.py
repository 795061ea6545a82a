"""GPU backend against the numba oracle (SPEC §9), run on the H200 with ``-m gpu``.

Integers (Philox words, ξ, codes, scales, outliers, witness) must agree bit for bit; floats follow
the SPEC §9 rule ``|gpu − ref64| ≤ 2·|cpu32 − ref64| + atol``; certificates must be sound against the
float64 true TV with zero violations.
"""

import math

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import _contract as C
from witcert_cupy import _cuda
from witcert_cupy._cuda import pdl as _launch
from witcert_cupy import certificate, reference
from helpers import (cpu_dot_order, filled_pool, mid_vector, on_device, overflowing_query_group_case, page_table,
                     random_rows, stage1_results)

cp = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu


def _np(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _checked_requests(gpu, cpu, pool_cpu, table, q, lengths, also=None):
    """Per request of a decode: an empty one must give o = 0 and lse = −inf; every other one is
    held to SPEC §9 against float64 attention on the reconstructed values (``_assert_spec9``; with
    ``also``, a second fp32 implementation's error counts beside the CPU backend's).
    Yields ``(b, rows, lse64)`` for the caller's certificate checks."""
    pt = page_table(pool_cpu, table)
    for b, n in enumerate(lengths):
        if n == 0:
            assert np.all(_np(gpu.o[b]) == 0) and np.all(np.isneginf(_np(gpu.lse[b]))), b
            continue
        rows = reference.request_rows(pool_cpu, 0, pt, b)
        o64, lse64 = reference.attention(_np(q[b]), rows["k_hat"], rows["v_hat"])
        o16 = reference.attention_fp16(_np(q[b]), rows["k_hat"], rows["v_hat"]) if _form_i(gpu) else None
        _assert_spec9(gpu, cpu, b, o64, lse64, b, also, o16=o16)
        yield b, rows, lse64


def _form_i(res):
    """The result's logits were exact integer products (decode_stage1_i8), its values tensor-core ones."""
    return res.dot_order is not None and tuple(res.dot_order) == certificate.FORM_I_ORDER


def _assert_spec9(gpu, cpu, b, o64, lse64, where, also=None, o16=None):
    """SPEC §9 for request ``b`` of two decode results: o and lse within twice the float32 CPU
    backend's own error against float64, plus an absolute floor (1e-6 of the largest |o|, 1e-6 for
    lse) and 4e-6 relative for the float64 reference's fp32 inputs.  With ``also`` (another result,
    or a tuple of them), the fp32 error at each element is the largest of the CPU backend's and
    theirs.  A form-(I) result's o (``o16``: an fp16 attention on the same values,
    ``reference.attention_fp16``) by the flash-attention rule instead: per head, its largest error
    within twice the fp16 attention's, plus the same floor."""
    if o16 is not None:
        got = _np(gpu.o[b]).astype(np.float64)
        err = np.abs(got - o64).max(-1)
        bound = 2 * np.abs(o16 - o64).max(-1) + 1e-6 * np.abs(o64).max()
        assert np.all(err <= bound), f"{where}: o per head {err} > fp16 rule {bound}"
    for name, ref_cpu, ref, atol in (("o", _np(cpu.o[b]), o64, 1e-6 * np.abs(o64).max()),
                                     ("lse", _np(cpu.lse[b]), lse64, 1e-6)):
        if name == "o" and o16 is not None:
            continue
        got = _np(getattr(gpu, name)[b])
        scale = np.abs(ref_cpu - ref)
        for other in (() if also is None else also if isinstance(also, tuple) else (also,)):
            scale = np.maximum(scale, np.abs(_np(getattr(other, name)[b]) - ref))
        err, bound = np.abs(got - ref), 2 * scale + atol + 4e-6 * np.abs(ref)
        if not np.all(err <= bound):
            i = np.unravel_index(np.argmax(err - bound), err.shape)
            raise AssertionError(f"{where}: {name}{list(i)} gpu {got[i]!r} cpu {ref_cpu[i]!r} float64 {ref[i]!r}: "
                                 f"|gpu - ref| {err[i]:.3e} > bound {bound[i]:.3e} ({int(np.sum(err > bound))} of "
                                 f"{err.size} over; max |gpu - ref| {err.max():.3e}, max |cpu - ref| "
                                 f"{np.abs(ref_cpu - ref).max():.3e})")


# ---------------------------------------------------------------- stream and write path

def test_philox_bit_identical():
    rng = np.random.default_rng(0)
    ctr = rng.integers(0, 2**32, size=(50_000, 4), dtype=np.uint64).astype(np.uint32)
    key = rng.integers(0, 2**32, size=(50_000, 2), dtype=np.uint64).astype(np.uint32)
    got = wc.philox4x32_10(cp.asarray(ctr), cp.asarray(key))
    assert isinstance(got, cp.ndarray)
    assert np.array_equal(got.get(), wc.philox4x32_10(ctr, key))
    assert wc.philox4x32_10(cp.zeros(4, cp.uint32), cp.zeros(2, cp.uint32)).get().tolist() == \
        [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    from witcert_cupy import stream

    assert stream._philox(cp.zeros(4, cp.uint32), cp.zeros(2, cp.uint32), 7).get().tolist() == \
        [0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48]


@pytest.mark.parametrize("bits", [8, 16, 24])
def test_dither_bit_identical(bits):
    rng = np.random.default_rng(bits)
    slots = rng.integers(0, 2**32, size=3000, dtype=np.uint64).astype(np.int64)
    kw = dict(layer=17, kv_head=3, side="v", head_dim=128, seed=2**63 + 5, bits=bits)
    assert np.array_equal(wc.dither(cp.asarray(slots), **kw).get(), wc.dither(slots, **kw))


_DEQUANT_PROBE = r"""
extern "C" __global__ void dequant_probe(const u32* __restrict__ cw, const u32* __restrict__ xw,
                                         const float* __restrict__ sb, float* __restrict__ out, int chunks, int bits) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= chunks) return;
    const u32 c[4] = {cw[4 * i], cw[4 * i + 1], cw[4 * i + 2], cw[4 * i + 3]};
    float x[16];
    if (bits == 8) {
        u32 w[4];
        for (int e = 0; e < 4; ++e) w[e] = xw[16 * i + e];
        dequant16_u8(c, w, sb[i], x);
    } else if (bits == 16) {
        u32 w[8];
        for (int e = 0; e < 8; ++e) w[e] = xw[16 * i + e];
        dequant16_u16(c, w, sb[i], x);
    } else {
        u32 w[16];
        for (int e = 0; e < 16; ++e) w[e] = xw[16 * i + e];
        dequant16_u24(c, w, sb[i], x);
    }
    for (int e = 0; e < 16; ++e) out[16 * i + e] = x[e];
}
"""


@pytest.mark.parametrize("bits", [8, 16, 24])
def test_dequant_header_is_the_reference_on_the_device(bits):
    """cuda/dequant.cuh's x̂ of the staged-tile decode, run on the GPU over every code and every
    dither field (24 bits: 2^24 sampled fields with random low bytes, which must be ignored), against
    the reference x̂ = fp32(s)·(fp32(k) − ξ), bit for bit; scales cycle through fp16 values, 0 and
    +inf (CPU tests emulate the same instructions: tests/test_decode_v2_math.py)."""
    from witcert_cupy import _cuda

    rng = np.random.default_rng(bits)
    k = np.arange(-C.CODE_MAX, C.CODE_MAX + 1)
    if bits == 24:
        n = 1 << 24
        kk = rng.integers(-C.CODE_MAX, C.CODE_MAX + 1, n)
        jj = rng.integers(0, 1 << 24, n)
        kk[:8], jj[:8] = [-127, -127, 127, 127, 0, 0, 1, -1], [0, (1 << 24) - 1, 0, (1 << 24) - 1, 0, 1 << 23, 5, 7]
    else:
        kk, jj = (a.ravel() for a in np.meshgrid(k, np.arange(1 << bits), indexing="ij"))
        n = kk.size
    n16 = (n + 15) // 16 * 16
    kk, jj = np.resize(kk, n16), np.resize(jj, n16)
    chunks = n16 // 16
    codes = (kk & 0xFF).astype(np.uint8).reshape(chunks, 16)
    cw = codes.view(np.uint32)  # byte e of word e // 4: channel e's code (little endian)
    xw = np.zeros((chunks, 16), np.uint32)
    jc = jj.reshape(chunks, 16).astype(np.uint32)
    if bits == 8:  # word e // 4, byte e % 4
        for ch in range(16):
            xw[:, ch // 4] |= jc[:, ch] << np.uint32(8 * (ch % 4))
    elif bits == 16:  # call e // 8, word (e % 8) // 2, field e % 2
        for ch in range(16):
            xw[:, 4 * (ch // 8) + (ch % 8) // 2] |= jc[:, ch] << np.uint32(16 * (ch % 2))
    else:  # word e of the four calls, j in its top 24 bits
        xw[:] = (jc << np.uint32(8)) | rng.integers(0, 256, (chunks, 16)).astype(np.uint32)
    scales = np.concatenate([np.arange(1, 0x7C00, 37, dtype=np.uint16).view(np.float16).astype(np.float32),
                             np.array([0.0, np.inf], np.float32)])
    sb = np.resize(scales, chunks).astype(np.float32)
    src = _cuda.inline_source("dequant.cuh") + _DEQUANT_PROBE
    fn = cp.RawModule(code=src, options=_cuda.options()).get_function("dequant_probe")
    out = cp.empty(n16, cp.float32)
    fn(((chunks + 255) // 256,), (256,), (cp.asarray(cw), cp.asarray(xw), cp.asarray(sb), out, np.int32(chunks),
                                          np.int32(bits)))
    xi = ((2 * jj.astype(np.int64) + 1 - (1 << bits)) * 2.0 ** -(bits + 1)).astype(np.float32)  # SPEC §2, exact
    with np.errstate(invalid="ignore", over="ignore"):
        ref = np.repeat(sb, 16) * (kk.astype(np.float32) - xi)  # the reference's two fp32 roundings
    got = out.get()
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), ref[~nan].view(np.uint32))


def _adversarial(rng, n, d):
    from test_quantize import _adversarial_rows

    return _adversarial_rows(rng, n, d)


@pytest.mark.parametrize("bits,d,gs,bands", [(8, 128, 32, 16), (16, 64, 16, 4), (24, 256, 64, 1)])
def test_quantize_bit_identical(bits, d, gs, bands):
    rng = np.random.default_rng(bits + d)
    x = _adversarial(rng, 2000, d)
    x[5, 0, 3] = np.nan
    x[9, 0, 70 % d] = np.inf
    pairs = np.array([[[1, d // 2 - 2]]])
    cfg = wc.QuantConfig(d, group_size=gs, dither_bits=bits, seed=bits * 3, witness_bands=bands, outlier_pairs=pairs)
    slots = rng.permutation(100_000)[:2000]
    for dtype in (np.float32, np.float16, np.float64):
        xc = x.astype(dtype)
        a = wc.quantize(xc, slots, layer=0, side="k", config=cfg)
        b = wc.quantize(cp.asarray(xc), cp.asarray(slots), layer=0, side="k", config=cfg)
        assert np.array_equal(_np(b.scales).view(np.uint16), a.scales.view(np.uint16))
        assert np.array_equal(_np(b.outliers).view(np.uint16), a.outliers.view(np.uint16))
        assert np.array_equal(_np(b.witness).view(np.uint16), a.witness.view(np.uint16))
        diff = _np(b.codes) != a.codes
        if diff.any():  # only exact .5 ties may differ, and both roundings must satisfy §3.4
            s = np.repeat(a.scales.astype(np.float64), gs, -1)[diff]
            xi = np.stack([wc.dither(slots, layer=0, kv_head=0, side="k", head_dim=d, seed=bits * 3, bits=bits)], 1)
            xf = xc.astype(np.float16).astype(np.float64)
            xib = np.broadcast_to(xi, xf.shape)
            for code in (_np(b.codes)[diff], a.codes[diff]):
                r = np.abs(s * (code - xib[diff]) - xf[diff])
                assert np.all(r <= C.RECON_BOUND_STEPS * s)
            assert np.all(np.abs(_np(b.codes)[diff].astype(int) - a.codes[diff]) == 1)
        xa = wc.dequantize(a, slots, layer=0, side="k", config=cfg)
        xb = wc.dequantize(b, cp.asarray(slots), layer=0, side="k", config=cfg).get()
        assert np.array_equal(xa.view(np.uint32), xb.view(np.uint32)) or np.array_equal(
            np.nan_to_num(xa), np.nan_to_num(xb))


QUOTIENT_CHECK = r"""
// two residual corrections (the hardware division's fast path): counted beside quotient_rn's one
__device__ float quotient_two_steps(float x, float b, float rcp) {
    float q = __fmul_rn(x, rcp);
    q = __fmaf_rn(__fmaf_rn(-b, q, x), rcp, q);
    return __fmaf_rn(__fmaf_rn(-b, q, x), rcp, q);
}

extern "C" __global__ void quotient_check(const u16* bs, int nb, unsigned long long* mismatches) {
    // thread: one fp16 x (both signs), loop over the divisors; x / b against IEEE division
    const int ix = blockIdx.x * blockDim.x + threadIdx.x;
    if (ix >= 65536) return;
    const float x = f16_to_f32((u16)ix);
    if (!is_finite32(x)) return;
    unsigned long long bad = 0, bad2 = 0;
    for (int k = 0; k < nb; ++k) {
        const float b = f16_to_f32(bs[k]);
        const float d = __fdiv_rn(x, b);
        // the one tolerated difference: a zero quotient's sign (−0 / b gives +0 here); the write
        // path adds ξ ≠ 0 to it, so the code cannot depend on it
        const float q = quotient_rn(x, b, __frcp_rn(b));
        bad += __float_as_uint(q) != __float_as_uint(d) && !(q == 0.0f && d == 0.0f);
        bad2 += quotient_two_steps(x, b, __frcp_rn(b)) != d;
    }
    atomicAdd(mismatches, bad);
    atomicAdd(mismatches + 1, bad2);
}
"""


def test_write_quotient_is_ieee_division_for_every_fp16_pair():
    """quotient_rn (the write kernel's x / s from the group's reciprocal) equals IEEE division for
    every finite fp16 x and every positive finite fp16 divisor, under the kernels' own options
    (up to the sign of a zero quotient: the count is exactly one mismatch per divisor, the −0
    numerator, whose residual correction returns +0).  One correction measured as exact as two
    on this domain; the kernel ships one, and the count of two is printed beside it."""
    from witcert_cupy import _cuda

    src = _cuda.inline_source("common.cuh") + QUOTIENT_CHECK
    fn = cp.RawModule(code=src, options=_cuda.options()).get_function("quotient_check")
    bs = cp.arange(1, 0x7C00, dtype=cp.uint16)  # 2^-24 .. 65504
    mism = cp.zeros(2, cp.uint64)
    fn((256,), (256,), (bs, np.int32(bs.size), mism))
    counts = mism.get()
    print(f"pairs differing from IEEE division: one correction (shipped) {int(counts[0])}, two {int(counts[1])}")
    assert int(counts[0]) == 0


@pytest.mark.parametrize("d,gs,bits", [(128, 128, 8), (64, 64, 16), (256, 16, 8), (64, 16, 8), (128, 32, 8),
                                       (128, 16, 24)])
def test_write_group_sizes_witness_layouts_and_unaligned_input(d, gs, bits):
    """Scale groups from 16 channels (two in one thread) up to the whole row; without a witness and
    with one of 4, d/16, d/8 and d/4 bands (bands of 16, 8 and 4 channels: the kernel's
    compile-time band sums; wider bands: its general loop) in both RoPE layouts; an input whose
    start is not 16-byte aligned (the element-wise load path): bit-identical to the CPU twin."""
    rng = np.random.default_rng(d + gs)
    n, H = 300, 3
    x = _adversarial(rng, n * H, d).reshape(n, H, d)
    x[7, 1, 5] = np.inf
    slots = rng.permutation(10_000)[:n]
    flat = cp.zeros(n * H * d + 1, cp.float16)
    flat[1:] = cp.asarray(x.astype(np.float16).ravel())
    xg = flat[1:].reshape(n, H, d)
    assert xg.data.ptr % 16 != 0
    widths = sorted({4, d // 16, d // 8, d // 4})
    for bands, rope in [(nb, rope) for nb in widths for rope in ("neox", "gptj")] + [(0, "neox")]:
        cfg = wc.QuantConfig(d, group_size=gs, dither_bits=bits, seed=11, witness_bands=bands, rope=rope,
                             outlier_pairs=np.array([[[0, 3], [1, 2], [d // 2 - 1, 4]]]))
        a = wc.quantize(x.astype(np.float16), slots, layer=0, side="v", config=cfg)
        for xin in (xg, cp.asarray(x.astype(np.float32))):
            b = wc.quantize(xin, cp.asarray(slots), layer=0, side="v", config=cfg)
            for name in ("scales", "outliers", "witness"):
                if getattr(a, name) is None:  # no witness bands: neither backend stores one
                    assert getattr(b, name) is None, name
                    continue
                assert np.array_equal(_np(getattr(b, name)).view(np.uint16), getattr(a, name).view(np.uint16)), \
                    (name, bands, rope)
            assert np.array_equal(_np(b.codes), a.codes)  # same fp32 operations as the twin: ties included


SCALE_CHECK = r"""
extern "C" __global__ void scale_check(unsigned long long* mismatches) {
    // thread: one finite fp16 amax; the write kernel's scale against division and rounding up
    const u32 a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a > WC_FP16_MAX_BITS) return;
    const float x = f16_to_f32((u16)a);
    const u32 ref = a == 0u ? 0u : f32_to_f16_ru(__fdiv_rn(x, (float)WC_SCALE_DIVISOR));
    if (scale_f16_of_amax(a) != ref) atomicAdd(mismatches, 1ull);
}
"""


def test_write_scale_is_division_rounded_up_for_every_fp16_amax():
    """scale_f16_of_amax (the write kernel's scale: quotient_rn by the divisor's reciprocal, the
    hardware's round-up conversion to fp16) equals the twin's fp32 division rounded up to fp16 for
    every finite fp16 amax, under the kernels' own options (flush-to-zero included)."""
    from witcert_cupy import _cuda

    src = _cuda.inline_source("common.cuh") + SCALE_CHECK
    fn = cp.RawModule(code=src, options=_cuda.options()).get_function("scale_check")
    mism = cp.zeros(1, cp.uint64)
    fn((128,), (256,), (mism,))
    assert int(mism.get()[0]) == 0


WITNESS_ROOT_CHECK = r"""
extern "C" __global__ void witness_root_check(u32 lo, u32 hi, unsigned long long* mismatches) {
    // every float32 with bits in [lo, hi], strided over the grid
    unsigned long long bad = 0;
    for (u32 b = lo + blockIdx.x * blockDim.x + threadIdx.x; b <= hi && b >= lo; b += gridDim.x * blockDim.x) {
        const float a = __uint_as_float(b);
        bad += __float_as_uint(witness_sqrt_ru(a)) != __float_as_uint(__fsqrt_ru(a));
    }
    if (lo == 0u && blockIdx.x == 0 && threadIdx.x == 0) bad += __float_as_uint(witness_sqrt_ru(0.0f)) != 0u;
    atomicAdd(mismatches, bad);
}
"""


def test_witness_root_is_fsqrt_ru_on_its_domain():
    """witness_sqrt_ru (the witness sums' root without __fsqrt_ru's general-path branch) equals
    __fsqrt_ru bit for bit on every float32 of [2^-101, FLT_MAX] (a witness sum is 0 or at least
    2^-98) and at 0, under the kernels' own options."""
    from witcert_cupy import _cuda

    src = _cuda.inline_source("common.cuh") + WITNESS_ROOT_CHECK
    fn = cp.RawModule(code=src, options=_cuda.options()).get_function("witness_root_check")
    mism = cp.zeros(1, cp.uint64)
    fn((132 * 16,), (256,), (np.uint32(0x0D000000), np.uint32(0x7F7FFFFF), mism))
    fn((1,), (32,), (np.uint32(0), np.uint32(0), mism))
    assert int(mism.get()[0]) == 0


def _pools(seed, **kw):
    cpu = filled_pool(np.random.default_rng(seed), backend="cpu", **kw)
    gpu = filled_pool(np.random.default_rng(seed), backend="cuda", **kw)
    return cpu, gpu


def test_pool_write_bit_identical_and_backing_store():
    cfg = wc.QuantConfig(128, witness_bands=16, outlier_pairs=np.array([[[2, 50], [7, 9]]]))
    (pc, tc, kc, _), (pg, tg, kg, _) = _pools(1, lengths=[300, 77], cfg=cfg, massive=[(2, 80.0)])
    for name in ("codes", "scales", "outliers", "witness"):
        assert np.array_equal(_np(getattr(pg, name)).view(np.uint8), getattr(pc, name).view(np.uint8)), name
    slots = tc[3][0]
    assert np.array_equal(pg.exact_rows(0, slots, "k"), pc.exact_rows(0, slots, "k"))
    assert np.array_equal(pg.exact_rows(0, slots, "k"), kc[0].astype(np.float16))
    # non-finite rows are counted on the device, and out-of-range slots never write
    bad = random_rows(np.random.default_rng(2), 2, 2, 128)
    bad[0, 1, 5] = np.nan
    before = _np(pg.codes).copy()
    pg.write(0, cp.asarray([3, 4]), cp.asarray(bad), cp.asarray(bad))
    assert int(pg.nonfinite_writes.get()[0]) == 2
    pg.write(0, cp.asarray([pg.num_slots, -1]), cp.asarray(bad), cp.asarray(bad))
    assert int(pg._dev.bad_slot_writes.get()[0]) == 2 * 2 * 2  # (token, kv head, side) rows dropped
    after = _np(pg.codes)
    changed = np.argwhere(before != after)
    assert set(changed[:, 3].tolist()) <= {3, 4}


# ---------------------------------------------------------------- decode

def _decode(pool, table, q, order=None, **kw):
    """decode_attention on the pool's backend; ``order``: the CPU run in a GPU kernel's summation
    order (helpers.cpu_dot_order), to hold the two to each other by SPEC §9 and value for value."""
    ip, ix, ll = on_device(pool, table)
    with cpu_dot_order(order):
        return wc.decode_attention(pool.xp.asarray(q), pool, layer=0, kv_indptr=ip, kv_indices=ix,
                                   kv_last_page_len=ll, **kw)


CASES = [(64, 1, 16, 8, "B"), (128, 2, 16, 8, "A"), (128, 4, 16, 16, "AB"), (128, 7, 1, 8, "B"),
         (256, 8, 16, 24, "AB"), (128, 4, 1, 24, "B"), (64, 8, 16, 16, "A"), (256, 1, 16, 8, None)]


@pytest.mark.parametrize("d,G,page,bits,tier", CASES)
def test_decode_matches_cpu_and_reference(d, G, page, bits, tier):
    H = 2
    cfg = wc.QuantConfig(d, dither_bits=bits, witness_bands=8, seed=d + G,
                         outlier_pairs=np.array([[[0, d // 4]] * H]))
    lengths = [1, 33, 700, 129, 0, 2048]
    (pc, tc, _, _), (pg, tg, _, _) = _pools(d * G, lengths=lengths, H=H, d=d, page_size=page, cfg=cfg,
                                            massive=[(0, 40.0), (d // 2, 40.0)])
    rng = np.random.default_rng(5)
    q = (rng.standard_normal((len(lengths), H * G, d)) * 1.5).astype(np.float32)
    cert = None if tier is None else wc.CertConfig(tier=tier, num_layers=2, steps=8)
    rg = _decode(pg, tg, q, cert=cert)
    rc = _decode(pc, tc, q, cert=cert, num_splits=3, order=rg.dot_order)
    for b, rows, lse64 in _checked_requests(rg, rc, pc, tc, q, lengths):
        if tier is not None:
            la_g, la_c = rg.log_a[b].get(), rc.log_a[b]
            assert np.all(np.abs(la_g - la_c) <= 4e-6 * np.maximum(1, np.abs(lse64)) + 1e-5 * la_c)
            assert np.allclose(rg.cmax[b].get(), rc.cmax[b], rtol=3e-6)
            tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
            assert np.all(tv <= rg.tv_bound[b].get())


def test_decode_against_torch_sdpa_on_dequantized_values():
    torch = pytest.importorskip("torch")
    d, H, G = 128, 4, 4
    (pc, tc, _, _), (pg, tg, _, _) = _pools(11, lengths=[1000, 3000], H=H, d=d)
    q = np.random.default_rng(0).standard_normal((2, H * G, d)).astype(np.float32)
    r = _decode(pg, tg, q, cert=wc.CertConfig())
    pt = page_table(pc, tc)
    for b in range(2):
        rows = reference.request_rows(pg, 0, pt, b)
        k = torch.tensor(rows["k_hat"], device="cuda").permute(1, 0, 2)[None].double()
        v = torch.tensor(rows["v_hat"], device="cuda").permute(1, 0, 2)[None].double()
        qq = torch.tensor(q[b], device="cuda")[None, :, None, :].double()
        o = torch.nn.functional.scaled_dot_product_attention(qq, k, v, enable_gqa=True)[0, :, 0]
        o = o.cpu().numpy()
        assert np.abs(r.o[b].get() - o).max() <= 2e-5 * np.abs(o).max()


def test_no_violations_many_instances():
    viol = cells = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        d = [64, 128][seed % 2]
        G = [1, 2, 4, 7][seed % 4]
        tier = ["A", "B", "AB"][seed % 3]
        cfg = wc.QuantConfig(d, witness_bands=8, dither_bits=[8, 16, 24][seed % 3], seed=seed)
        pool, table, ks, _ = filled_pool(rng, lengths=[int(rng.integers(1, 2000)) for _ in range(4)], H=2, d=d,
                                         cfg=cfg, backend="cuda", massive=[(d - 1, float(rng.uniform(1, 200)))])
        q = rng.standard_normal((4, 2 * G, d)).astype(np.float32) * float(rng.uniform(0.1, 5))
        r = _decode(pool, table, q, cert=wc.CertConfig(tier=tier, delta_req=1e-3))
        pt = page_table(pool, table)
        for b in range(4):
            rows = reference.request_rows(pool, 0, pt, b)
            tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
            viol += int(np.sum(tv > r.tv_bound[b].get()))
            cells += tv.size
    assert cells > 100 and viol == 0


def test_invariance_split_count_batch_order_page_size():
    d = 128
    q = np.random.default_rng(3).standard_normal((3, 8, d)).astype(np.float32)
    lengths = [900, 17, 4000]
    base = None
    for ps in (1, 16, 128):
        pool, table, _, _ = filled_pool(np.random.default_rng(9), lengths=lengths, page_size=ps, backend="cuda",
                                        cfg=wc.QuantConfig(d, witness_bands=16))
        for ns in (1, 4, 37):
            r = _decode(pool, table, q, cert=wc.CertConfig(tier="AB"), num_splits=ns)
            o, cm = r.o.get(), r.cmax.get()
            if base is None:
                base = (o, r.lse.get(), r.log_a.get(), cm)
                continue
            assert np.allclose(o, base[0], atol=4e-6 * np.abs(base[0]).max())
            assert np.allclose(r.lse.get(), base[1], rtol=3e-6)
            assert np.allclose(r.log_a.get(), base[2], atol=2e-5)
            assert np.allclose(cm, base[3], rtol=1e-6)
    # batch order: permuted requests give the same per-request answers, bit for bit
    pool, table, _, _ = filled_pool(np.random.default_rng(9), lengths=lengths, backend="cuda")
    indptr, indices, last, _ = table
    perm = [2, 0, 1]
    chunks = [indices[indptr[b]:indptr[b + 1]] for b in perm]
    ip2 = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int32)
    r1 = _decode(pool, table, q, cert=wc.CertConfig(), num_splits=8)
    r2 = wc.decode_attention(cp.asarray(q[perm]), pool, layer=0, kv_indptr=cp.asarray(ip2),
                             kv_indices=cp.asarray(np.concatenate(chunks)), kv_last_page_len=cp.asarray(last[perm]),
                             cert=wc.CertConfig(), num_splits=8)
    for f in ("o", "lse", "log_a", "cmax"):
        assert np.array_equal(getattr(r2, f).get(), getattr(r1, f).get()[perm])


def test_bad_page_table_gives_nan_and_infinite_certificate():
    pool, table, _, _ = filled_pool(np.random.default_rng(4), lengths=[64, 64, 64], backend="cuda")
    indptr, indices, last, _ = table
    q = cp.asarray(np.random.default_rng(0).standard_normal((3, 8, 128)).astype(np.float32))
    ix = indices.copy()
    ix[indptr[1]] = pool.num_pages + 5        # request 1: page outside the pool
    ll = last.copy()
    ll[2] = pool.page_size + 3                 # request 2: impossible last-page length
    r = wc.decode_attention(q, pool, layer=0, kv_indptr=cp.asarray(indptr), kv_indices=cp.asarray(ix),
                            kv_last_page_len=cp.asarray(ll), cert=wc.CertConfig())
    o = r.o.get()
    assert np.all(np.isfinite(o[0])) and np.all(np.isfinite(r.risk[0].get()))
    for b in (1, 2):
        assert np.all(np.isnan(o[b])) and np.all(np.isinf(r.risk[b].get()))
    bad_ip = cp.asarray(np.array([0, 10**6, 3, 4], np.int32))  # inconsistent indptr
    r = wc.decode_attention(q, pool, layer=0, kv_indptr=bad_ip, kv_indices=cp.asarray(indices),
                            kv_last_page_len=cp.asarray(last), cert=wc.CertConfig())
    assert np.all(np.isnan(r.o[0].get())) and np.all(np.isinf(r.risk[0].get()))


def test_decode_makes_no_host_synchronisation():
    import cupyx

    pool, table, _, _ = filled_pool(np.random.default_rng(6), lengths=[500, 20], backend="cuda",
                                    cfg=wc.QuantConfig(128, witness_bands=16))
    ip, ix, ll = on_device(pool, table)
    q = cp.asarray(np.random.default_rng(0).standard_normal((2, 8, 128)).astype(np.float32))
    wc.decode_attention(q, pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll,
                        cert=wc.CertConfig(tier="AB"))  # compile outside the guard
    slot, row = cp.asarray([5]), cp.ones((1, 2, 128), cp.float32)
    cp.cuda.Device().synchronize()
    with cupyx.allow_synchronize(False):
        r = wc.decode_attention(q, pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll,
                                cert=wc.CertConfig(tier="AB"))
        pool.write(0, slot, row, row)
    assert np.all(np.isfinite(r.tv_bound.get()))


def test_torch_and_dlpack_arrays_zero_copy():
    torch = pytest.importorskip("torch")
    from witcert_cupy.arrays import backend_of, to_cupy

    t = torch.randn(2, 8, 128, device="cuda")
    assert backend_of(q=t) == "cuda"
    assert to_cupy(t).data.ptr == t.data_ptr()
    pool, table, _, _ = filled_pool(np.random.default_rng(7), lengths=[100, 50], backend="cuda")
    indptr, indices, last, _ = table
    r = wc.decode_attention(t, pool, layer=0, kv_indptr=torch.tensor(indptr, device="cuda"),
                            kv_indices=torch.tensor(indices, device="cuda"),
                            kv_last_page_len=torch.tensor(last, device="cuda"), cert=wc.CertConfig())
    r2 = _decode(pool, table, t.cpu().numpy(), cert=wc.CertConfig())
    assert np.array_equal(r.o.get(), r2.o.get())
    with pytest.raises(TypeError, match="one device"):
        wc.decode_attention(t, pool, layer=0, kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)


def test_gpu_errors_name_the_argument():
    pool, table, _, _ = filled_pool(np.random.default_rng(8), lengths=[10], backend="cuda")
    ip, ix, ll = on_device(pool, table)
    q = cp.zeros((1, 8, 128), cp.float32)
    with pytest.raises(ValueError, match="kv_indptr"):
        wc.decode_attention(q, pool, layer=0, kv_indptr=ip[:1], kv_indices=ix, kv_last_page_len=ll)
    with pytest.raises(TypeError, match="kv_indices"):
        wc.decode_attention(q, pool, layer=0, kv_indptr=ip, kv_indices=ix.astype(cp.float32), kv_last_page_len=ll)
    with pytest.raises(TypeError, match="q"):
        wc.decode_attention(q.astype(cp.int32), pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll)
    with pytest.raises(TypeError, match="k"):
        pool.write(0, cp.arange(2), cp.zeros((2, 2, 128), cp.int8), cp.zeros((2, 2, 128), cp.float32))
    with pytest.raises(TypeError):
        pool.write(0, np.arange(2), np.zeros((2, 2, 128), np.float32), np.zeros((2, 2, 128), np.float32))
    assert math.isfinite(float(wc.decode_attention(q, pool, layer=0, kv_indptr=ip, kv_indices=ix,
                                                   kv_last_page_len=ll).lse.get()[0, 0]))


@pytest.mark.parametrize("store", ["int8", "fp16"])
def test_query_starting_mid_vector_gives_the_same_bits(store):
    """A query view that starts 4 bytes past a 16-byte boundary: the fp16-store kernel loads the
    query 16 bytes at a time, which would fault on it; the launch layer copies such a query
    (launch_query) and the step gives the same bits as from an aligned one.  An aligned query is
    still read in place by a plan."""
    if store == "fp16":
        from test_fp16pool import build

        pool, table = build(np.random.default_rng(21), [300, 40], backend="cuda")
    else:
        pool, table, _, _ = filled_pool(np.random.default_rng(21), lengths=[300, 40], backend="cuda")
    ip, ix, ll = on_device(pool, table)
    q = cp.asarray(np.random.default_rng(22).standard_normal((2, 8, 128)).astype(np.float32))
    cert = wc.CertConfig(tier="A" if store == "fp16" else "B")
    want = wc.decode_attention(q, pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=cert)
    pool.ledger.reset()  # the same step again, as a fresh request
    got = wc.decode_attention(mid_vector(q), pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll,
                              cert=cert)
    for a, b in ((want.o, got.o), (want.lse, got.lse), (want.tv_bound, got.tv_bound)):
        assert np.array_equal(a.get(), b.get())
    plan = wc.decode_plan(q, pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=cert)
    assert plan.q.data.ptr == q.data.ptr  # in place
    mis = mid_vector(q)
    plan = wc.decode_plan(mis, pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=cert)
    assert plan.q.data.ptr != mis.data.ptr and plan.q.data.ptr % 16 == 0


# ---------------------------------------------------------------- fp16 store (black boxes, fp16 baseline)

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fp16_store_bit_identical_and_metered(dtype):
    from test_fp16pool import build, e4m3_like

    def scheme(x):
        return e4m3_like(x).astype(dtype)

    pc, tc = build(np.random.default_rng(5), [700, 33, 1], scheme=scheme, bands=16, massive=[(60, 80.0)])
    pg, tg = build(np.random.default_rng(5), [700, 33, 1], scheme=scheme, bands=16, massive=[(60, 80.0)],
                   backend="cuda")
    assert np.array_equal(pg.values.get().view(np.uint16), pc.values.view(np.uint16))
    assert np.array_equal(pg.witness.get().view(np.uint16), pc.witness.view(np.uint16))
    assert np.array_equal(pg.k_norm.get().view(np.uint32), pc.k_norm.view(np.uint32))  # the twin's chain
    q = np.random.default_rng(1).standard_normal((3, 8, 128)).astype(np.float32) * 2
    for cert in (None, wc.CertConfig(tier="A")):
        rg = wc.decode_attention(cp.asarray(q), pg, layer=0, kv_indptr=cp.asarray(tg[0]),
                                 kv_indices=cp.asarray(tg[1]), kv_last_page_len=cp.asarray(tg[2]), cert=cert)
        with cpu_dot_order(rg.dot_order):
            rc = wc.decode_attention(q, pc, layer=0, kv_indptr=tc[0], kv_indices=tc[1], kv_last_page_len=tc[2],
                                     cert=cert, num_splits=2)
        pt = page_table(pc, tc)
        for b in range(3):
            rows = reference.request_rows(pc, 0, pt, b)
            o64, _ = reference.attention(q[b], rows["k_hat"], rows["v_hat"])
            assert np.all(np.abs(rg.o[b].get() - o64) <= 2 * np.abs(rc.o[b] - o64) + 4e-6 * np.abs(o64).max())
            if cert is not None:
                tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
                assert np.all(tv <= rg.tv_bound[b].get())
                assert np.allclose(rg.cmax[b].get(), rc.cmax[b], rtol=3e-6)


@pytest.mark.parametrize("G", [1, 4, 7])
def test_fp16_store_kernels_agree(G):
    """The fp16-store stage-1 kernels on an Fp16Pool (a black-box scheme's values, Tier A):
    decode_stage1_f16<G, ·> (the library's choice, certified or not) and decode_stage1<128, G, true>
    held to the SPEC §9 rule against the CPU backend in each kernel's summation order; certified,
    cmax and Γ equal to the CPU twin's within fp32 evaluation (the evaluation term γ_t =
    gamma_exact·||q||·||x_t|| on all three) and sound against the exact keys."""
    from test_fp16pool import build, e4m3_like

    lengths = [700, 33, 1, 0, 1500]
    kw = dict(scheme=e4m3_like, bands=16, massive=[(60, 80.0)])
    pc, tc = build(np.random.default_rng(G), lengths, **kw)
    pg, tg = build(np.random.default_rng(G), lengths, backend="cuda", **kw)
    q = (np.random.default_rng(G + 1).standard_normal((len(lengths), 2 * G, 128)) * 2).astype(np.float32)
    ip, ix, ll = (cp.asarray(a) for a in tg[:3])
    for cert in (None, wc.CertConfig(tier="A")):
        res = {}
        for k in ("v1", "f16", "auto"):
            plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(128), cert, 3, stage1=k)
            assert plan.kernel_name == ("f16" if k == "auto" else k)
            plan.launch()
            res[k] = plan.result()
        for k, r in res.items():
            with cpu_dot_order(r.dot_order):  # (the CPU in this kernel's summation order)
                rc = wc.decode_attention(q, pc, layer=0, kv_indptr=tc[0], kv_indices=tc[1], kv_last_page_len=tc[2],
                                         cert=cert, num_splits=3)
            for bq, rows, _ in _checked_requests(r, rc, pc, tc, q, lengths):
                if cert is not None:
                    np.testing.assert_allclose(r.cmax[bq].get(), rc.cmax[bq], rtol=3e-6)
                    np.testing.assert_allclose(r.gamma[bq].get(), rc.gamma[bq], rtol=3e-6)
                    assert np.all(r.gamma[bq].get() > 0)
                    tv = reference.true_tv(q[bq], rows["k_exact"], rows["k_hat"])
                    assert np.all(tv <= r.tv_bound[bq].get())


@pytest.mark.parametrize("bands", [1, 2, 4, 8, 64])
def test_fp16_store_kernel_every_witness_width(bands):
    """decode_stage1_f16 stages each token's witness row by its width (2·bands bytes: one, two, four
    or several copies, or a plain load at one band): certificates equal the CPU twin's (in this
    kernel's summation order) within fp32 evaluation and sound, as the general kernel's, with and without a certificate (two
    instantiations) o equal to the CPU backend's by SPEC §9; a page id outside the pool poisons only
    its request."""
    from test_fp16pool import build, e4m3_like

    lengths = [97, 0, 640]
    kw = dict(scheme=e4m3_like, bands=bands, massive=[(5, 40.0)])
    pc, tc = build(np.random.default_rng(bands), lengths, **kw)
    pg, tg = build(np.random.default_rng(bands), lengths, backend="cuda", **kw)
    q = (np.random.default_rng(7).standard_normal((len(lengths), 8, 128)) * 2).astype(np.float32)
    ip, ix, ll = (cp.asarray(a) for a in tg[:3])
    for cert in (None, wc.CertConfig(tier="A")):
        res = {}
        for k in ("v1", "f16"):
            plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(128), cert, 5, stage1=k)
            plan.launch()
            res[k] = plan.result()
        with cpu_dot_order(res["f16"].dot_order):  # (the CPU in the kernel's summation order)
            rc = wc.decode_attention(q, pc, layer=0, kv_indptr=tc[0], kv_indices=tc[1], kv_last_page_len=tc[2],
                                     cert=cert, num_splits=5)
        for bq, rows, _ in _checked_requests(res["f16"], rc, pc, tc, q, lengths):
            if cert is not None:  # (v1 has its own summation height, so its own Γ: not compared here)
                np.testing.assert_allclose(res["f16"].cmax[bq].get(), rc.cmax[bq], rtol=3e-6)
                np.testing.assert_allclose(res["f16"].gamma[bq].get(), rc.gamma[bq], rtol=3e-6)
                tv = reference.true_tv(q[bq], rows["k_exact"], rows["k_hat"])
                for k in ("f16", "v1"):
                    assert np.all(tv <= res[k].tv_bound[bq].get())
    bad = ix.copy()
    bad[0] = pg.num_pages + 5
    plan = pg._dev.plan(cp.asarray(q), 0, ip, bad, ll, 1 / math.sqrt(128), cert, 5, stage1="f16")
    plan.launch()
    r = plan.result()
    assert np.all(np.isnan(r.o[0].get())) and np.all(np.isinf(r.log_a[0].get()))
    assert np.all(r.o[1].get() == 0) and np.all(np.isfinite(r.o[2].get()))


def _written(plan):
    """What a decode plan's step writes, on the device: o, lse and, when certified, log_a and tv_bound."""
    r = plan.result()
    return [a for a in (r.o, r.lse, r.log_a, r.tv_bound) if a is not None]


@pytest.mark.parametrize("stage1", ["v2", "v1"])
def test_certificate_is_infinite_where_a_query_group_overflows(stage1):
    """Both INT8 stage-1 kernels on the inputs of tests/test_decode.py's
    test_query_group_overflow_gives_a_bound_or_no_guarantee_never_a_lost_group: where only Σq²
    overflows (entries 2e19) the normalized coefficients (SPEC §4.2) give a finite cmax equal to the
    CPU's; where the coefficient itself does (1e21) a token whose scale there is 0 meets 0·inf =
    NaN, which must give "no guarantee" as on the CPU backend, never a finite c_t without u's other
    groups."""
    pc, tc, q = overflowing_query_group_case("cpu")
    pg, tg, _ = overflowing_query_group_case("cuda")
    ip, ix, ll = on_device(pg, tg)
    cert = wc.CertConfig(tier="B")
    # (1e19, not 2e19: PLAIN's coefficients carry C_EVAL_SLACK·log2 e, ≈ 2.09 on the squared one,
    # so within that factor of fp32's largest value they overflow where the CPU's do not: sound)
    for amp, finite in ((1e21, False), (1e19, True), (1e18, True)):
        qa = q.copy()
        qa[:, :, :32] = amp
        plan = pg._dev.plan(cp.asarray(qa), 0, ip, ix, ll, 1 / math.sqrt(128), cert, None, stage1=stage1)
        plan.launch()
        r = plan.result()
        rc = _decode(pc, tc, qa, cert=cert, order=r.dot_order)
        assert np.all(np.isfinite(r.o.get())) and np.all(np.isfinite(r.lse.get()))
        cm = r.cmax.get()
        assert np.all(np.isfinite(cm) == finite) and np.all(np.isfinite(rc.cmax) == finite), amp
        if finite:
            np.testing.assert_allclose(cm, rc.cmax, rtol=3e-6)
        else:
            assert np.all(r.tv_bound.get() == 1.0)


@pytest.mark.parametrize("layout,min_pairs", [("true, false", 10**9), ("true", 1)])
def test_plain_certificate_is_infinite_on_the_overflowing_heads_only(layout, min_pairs, monkeypatch):
    """PLAIN (the sides and the split) scales its Tier-B coefficients by C_EVAL_SLACK·log2 e and
    flags a head whose coefficients overflow instead of carrying +inf into c_t (docs/performance.md).  On the inputs of the test above with the overflowing group on heads 1 and 3 of
    each group of 4 only (in the split, one head of each warp), those heads get cmax = log A = +inf
    and tv_bound 1 as on the CPU backend, and the other heads the CPU's cmax and log A within fp32
    evaluation."""
    monkeypatch.setattr(_cuda.geometry, "V2_SPLIT_MIN_PAIRS", min_pairs)
    pc, tc, q = overflowing_query_group_case("cpu")
    pg, tg, _ = overflowing_query_group_case("cuda")
    ip, ix, ll = on_device(pg, tg)
    G = 4
    over = (np.arange(q.shape[1]) % G) % 2 == 1
    q[:, ~over, :32] = np.random.default_rng(3).standard_normal((q.shape[0], int((~over).sum()), 32))
    q[:, over, :32] = 1e21  # the coefficient itself overflows (2e19 no longer does: SPEC §4.2)
    cert = wc.CertConfig(tier="B")
    plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(128), cert, None)
    assert plan.stage1_template.endswith(f", {layout}>")
    plan.launch()
    r = plan.result()
    rc = _decode(pc, tc, q, cert=cert, order=r.dot_order)
    cm, la = r.cmax.get(), r.log_a.get()
    assert np.all(np.isfinite(r.o.get())) and np.all(np.isfinite(r.lse.get()))
    assert np.all(np.isinf(rc.cmax[:, over])) and np.all(np.isfinite(rc.cmax[:, ~over]))
    assert np.all(cm[:, over] == np.inf) and np.all(la[:, over] == np.inf)
    assert np.all(r.tv_bound.get()[:, over] == 1.0)
    np.testing.assert_allclose(cm[:, ~over], rc.cmax[:, ~over], rtol=3e-6)
    lse64 = rc.lse[:, ~over]
    assert np.all(np.abs(la[:, ~over] - rc.log_a[:, ~over])
                  <= 4e-6 * np.maximum(1, np.abs(lse64)) + 1e-5 * rc.log_a[:, ~over])


@pytest.mark.parametrize("stage1", ["f16", "v1"])
def test_fp16_store_certificate_with_huge_query_heads(stage1):
    """On an Fp16Pool with Tier A, query heads of entries 2e19 (every band's Σq² beyond fp32, the
    logits still finite): the normalized band and norm coefficients (SPEC §4.2) give both fp16-store
    kernels the CPU's finite cmax and log A on every head, and tv_bound 1 on the huge ones (tanh of
    their c_t); the library's choice is decode_stage1_f16."""
    from test_fp16pool import build, e4m3_like

    lengths = [700, 33, 1, 0, 1500]
    pc, tc = build(np.random.default_rng(4), lengths, scheme=e4m3_like, bands=16)
    pg, tg = build(np.random.default_rng(4), lengths, backend="cuda", scheme=e4m3_like, bands=16)
    G = 4
    q = (np.random.default_rng(5).standard_normal((len(lengths), 2 * G, 128)) * 2).astype(np.float32)
    over = np.arange(2 * G) % 3 == 1
    q[:, over, :] = 2e19
    cert = wc.CertConfig(tier="A")
    ip, ix, ll = (cp.asarray(a) for a in tg[:3])
    assert pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(128), cert, 3).kernel_name == "f16"
    plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(128), cert, 3, stage1=stage1)
    assert plan.kernel_name == stage1
    plan.launch()
    r = plan.result()
    with cpu_dot_order(r.dot_order):
        rc = wc.decode_attention(q, pc, layer=0, kv_indptr=tc[0], kv_indices=tc[1], kv_last_page_len=tc[2],
                                 cert=cert, num_splits=3)
    live = np.array(lengths) > 0
    cm, la, tvb = r.cmax.get()[live], r.log_a.get()[live], r.tv_bound.get()[live]
    assert np.all(np.isfinite(r.o.get()[live]))
    assert np.all(np.isfinite(rc.cmax[live])) and np.all(tvb[:, over] == 1.0)
    np.testing.assert_allclose(cm, rc.cmax[live], rtol=3e-6)
    lse64, la_c = np.abs(rc.lse[live][:, ~over]), rc.log_a[live][:, ~over]
    assert np.all(np.abs(la[:, ~over] - la_c) <= 4e-6 * np.maximum(1, lse64) + 1e-5 * la_c)


def _merge_cells(rng, rows, ns, d):
    """Split partials of ``rows`` cells for decode_merge (o_part on the device; lse, λ and cmax on the
    host, for the caller's own special cells): row 1 has empty splits, row 2 no tokens at all, row 3
    a poisoned split."""
    o_part = cp.asarray(rng.standard_normal((rows, ns, d)).astype(np.float32))
    lse = rng.standard_normal((rows, ns)).astype(np.float32) * 3
    lam = lse + np.abs(rng.standard_normal((rows, ns))).astype(np.float32) * 0.01
    cmx = np.abs(rng.standard_normal((rows, ns))).astype(np.float32)
    lse[1, ::2] = -np.inf  # empty splits
    lam[1, ::2] = -np.inf
    lse[2], lam[2], cmx[2] = -np.inf, -np.inf, 0.0  # no tokens at all
    lse[3, ns // 2] = np.nan  # a poisoned split
    lam[3, ns // 2] = np.inf
    return o_part, lse, lam, cmx


def _merge_outputs(rows, d, certified):
    """decode_merge's outputs for ``rows`` cells, filled with a sentinel: o, lse, log_a, cmax, gam,
    the underflow term g0 (0 here) and, when ``certified``, risk and tv_bound."""
    res = (cp.full((rows, d), 7.0, cp.float32), *(cp.full(rows, 7.0, cp.float32) for _ in range(4)), 0.0)
    return res + ((cp.zeros(rows, cp.float64), cp.zeros(rows, cp.float64)) if certified else ())


def _gam_part(lam):
    """Split evaluation terms for the merge tests: a small positive Γ_s per split."""
    return cp.asarray(np.where(np.isfinite(lam), 1e-6, 0.0).astype(np.float32))


def _run_merge(o_part, lse, lam, cmx, prefetch):
    """decode_merge with the certificate over the partials: (o, lse, log_a, cmax, gam, risk,
    tv_bound) on the host, from outputs filled with a sentinel first."""
    res = _merge_outputs(o_part.shape[0], o_part.shape[2], True)
    _cuda.bind_merge(o_part, cp.asarray(lse), cp.asarray(lam), cp.asarray(cmx), _gam_part(lam), *res,
                     prefetch=prefetch)()
    return [a.get() for a in res if not isinstance(a, float)]


@pytest.mark.parametrize("ns,d", [(1, 128), (5, 64), (64, 128), (200, 128), (33, 256)])
def test_merge_certifying_warp_gives_the_same_bits(ns, d):
    """decode_merge certifies each cell on an extra warp while the others run the o loop: the same
    bits with and without the prefetch, over normal cells, empty splits, an all-empty cell, a
    poisoned split, an infinite λ and an uncertified (λ = −inf) cell."""
    o_part, lse, lam, cmx = _merge_cells(np.random.default_rng(ns + d), 7, ns, d)
    lam[4, ns - 1] = np.inf  # an infinite certificate in one split
    lam[5], cmx[5] = -np.inf, 0.0  # no certificate
    out = [_run_merge(o_part, lse, lam, cmx, pf) for pf in (True, False)]
    for got in out[1:]:
        for a, b in zip(got, out[0]):
            assert np.array_equal(a, b, equal_nan=True)
    o, lse_o, log_a, cmax, _, risk, tvb = out[0]
    assert np.all(np.isnan(o[3])) and np.isinf(log_a[3]) and np.isinf(log_a[4]) and np.isinf(risk[4])
    assert log_a[5] == 0.0 and np.all(np.isfinite(log_a[[0, 1, 6]])) and np.all(tvb <= 1.0)
    assert np.all(o[2] == 0) and np.isneginf(lse_o[2])


@pytest.mark.parametrize("ns,d", [(1, 128), (5, 64), (64, 128), (200, 128)])
def test_merge_prefetch_gives_the_same_bits(ns, d):
    """decode_merge with the cell's o_part rows copied into shared memory first (the default where
    they fit) and read from global memory: the same sums in the same order, so the same bits —
    over normal cells, cells with empty splits, an all-empty cell and a poisoned (NaN) one, with
    the certificate.  At ns = 200 the default does not prefetch (the rows exceed its budget)."""
    parts = _merge_cells(np.random.default_rng(ns), 6, ns, d)
    out = {pf: _run_merge(*parts, pf) for pf in (True, False)}
    assert _cuda.merge_smem_bytes(ns, d)[1] == (ns <= 128)
    for a, b in zip(out[True], out[False]):
        assert np.array_equal(a, b, equal_nan=True)
    o = out[True][0]
    assert np.all(np.isnan(o[3])) and np.all(o[2] == 0) and np.all(np.isfinite(o[[0, 1, 4, 5]]))


@pytest.mark.parametrize("prefetch", [True, False])
def test_merge_empty_splits_keep_a_negative_zero_sum(prefetch):
    """An empty split adds nothing to o, not even a zero of another sign: decode_merge selects its
    operands, not the sum (fma(+0, −0, acc) is acc bit for bit), so a channel whose sum is −0 — a
    negative product below fp32's range — stays −0 through the empty splits that follow, in the
    whole batches of the o loop and in its remainder (ns = 9).  Adding fma(0, 0, acc) instead
    would turn it into +0."""
    ns, d = 9, 128
    o_part = np.zeros((1, ns, d), np.float32)
    lse = np.full((1, ns), -np.inf, np.float32)
    lse[0, 0] = 0.0  # weight ≈ 1 on a zero row: the sum is +0
    lse[0, 1] = np.float32(-100 * np.log(2))  # weight ≈ 2^-100 ...
    o_part[0, 1, ::2] = -(2.0 ** -100)  # ... times −2^-100: −2^-200 rounds to −0
    o_part[0, 1, 1::2] = 2.0 ** -100  # (+0 in the odd channels)
    o_part[0, 2:] = np.nan  # the empty splits' rows are never multiplied
    out = _run_merge(cp.asarray(o_part), lse, lse.copy(), np.zeros((1, ns), np.float32), prefetch)
    o = out[0][0]
    assert np.all(o == 0.0)
    assert np.all(np.signbit(o[::2])) and not np.any(np.signbit(o[1::2]))


def test_merge_opt_in_survives_a_rebuild_that_shares_the_function():
    """A merge bound with more than 48 KB of shared memory still launches after a rebuild (the same
    source and options: CuPy hands back the same CUDA function under a new kernel object) and a
    second, smaller opt-in above 48 KB: the opt-in only grows (a smaller one lowered it and the first
    launch failed with CUDA_ERROR_INVALID_VALUE)."""
    rng = np.random.default_rng(99)
    big, small = _merge_cells(rng, 4, 128, 128), _merge_cells(rng, 4, 96, 128)
    assert _cuda.merge_smem_bytes(128, 128)[0] > _cuda.merge_smem_bytes(96, 128)[0] > 48 * 1024

    def bound(parts):
        o_part, lse, lam, cmx = parts
        res = _merge_outputs(4, 128, False)
        return _cuda.bind_merge(o_part, cp.asarray(lse), cp.asarray(lam), cp.asarray(cmx), _gam_part(lam), *res), res

    launch_big, res_big = bound(big)
    launch_big()
    want = res_big[0].get()
    try:
        _cuda.build._module.cache_clear()
        launch_small, _ = bound(small)
        launch_small()
        res_big[0].fill(0)
        launch_big()
        cp.cuda.Device().synchronize()
    finally:
        _cuda.build._module.cache_clear()
    assert np.array_equal(res_big[0].get(), want, equal_nan=True)


@pytest.mark.parametrize("store", ["int8", "fp16"])
def test_pdl_launch_gives_the_same_bits(store, monkeypatch):
    """A decode step launched with programmatic dependent launch (witcert_cupy/_cuda/pdl.py; each
    kernel waits for the previous one before its first global access, cuda/griddep.cuh) gives the
    bits of plain launches: every stage-1 kernel, with and without a certificate, eagerly and in one
    CUDA graph where each plan's step follows another plan's merge, twice over, from outputs reset
    to NaN before the replay."""
    from test_fp16pool import build, e4m3_like

    from witcert_cupy._cuda import pdl as _launch

    assert _launch.pdl_supported(cp.cuda.Device().id)  # (sm_90: the path under test is taken)
    lengths = [5000, 33, 1500, 0, 700, 1]
    if store == "int8":
        cfg = wc.QuantConfig(128, witness_bands=16, seed=3, dither_bits=8)
        _, (pool, table, _, _) = _pools(31, lengths=lengths, H=2, d=128, page_size=16, cfg=cfg)
        ip, ix, ll = on_device(pool, table)
        kernels, certs = ("v2", "v1"), (wc.CertConfig(tier="AB", num_layers=2, steps=4), None)
    else:
        pool, table = build(np.random.default_rng(31), lengths, backend="cuda", scheme=e4m3_like, page=16)
        ip, ix, ll = (cp.asarray(np.array(a)) for a in table[:3])
        kernels, certs = ("f16",), (wc.CertConfig(tier="A"), None)
    q = cp.asarray((np.random.default_rng(4).standard_normal((len(lengths), 8, 128)) * 2).astype(np.float32))

    def written(plans):
        return [a for p in plans for a in _written(p)]

    def steps(pdl):
        monkeypatch.setattr(_cuda.launch, "PDL", pdl)
        plans = [pool._dev.plan(q, 0, ip, ix, ll, 1 / math.sqrt(128), c, ns, stage1=k)
                 for k in kernels for c in certs for ns in (None, 3)]
        assert all(p._stage1.pdl == pdl and p.merge.pdl == pdl for p in plans)
        for p in plans:
            p.launch()
        eager = [a.get() for a in written(plans)]
        for a in written(plans):
            a.fill(np.nan)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            for _ in range(2):
                for p in plans:
                    p.launch()
            g = s.end_capture()
            g.launch(s)
            s.synchronize()
        return eager + [a.get() for a in written(plans)]

    runs = [steps(pdl) for pdl in (True, False)]
    plain = runs[-1]
    n = len(plain) // 2
    for got in runs:
        for i, a in enumerate(got):
            assert np.array_equal(a, plain[i % n], equal_nan=True), i
    assert np.all(np.isfinite(plain[0][0]))  # request 0's o: a real result, not a NaN sentinel


def test_pdl_launch_from_a_thread_that_has_not_used_the_device():
    """The PDL launcher calls the driver directly: from a new thread, where no CuPy call has yet made
    the device's context current, a step still launches and gives the main thread's bits."""
    import threading

    cfg = wc.QuantConfig(128, witness_bands=16, seed=5, dither_bits=8)
    _, (pool, table, _, _) = _pools(5, lengths=[900, 40], H=2, d=128, page_size=16, cfg=cfg)
    ip, ix, ll = on_device(pool, table)
    q = cp.asarray((np.random.default_rng(5).standard_normal((2, 8, 128))).astype(np.float32))
    plan = pool._dev.plan(q, 0, ip, ix, ll, 1 / math.sqrt(128), wc.CertConfig(tier="B"), None)
    assert plan._stage1.pdl and plan.merge.pdl
    plan.launch()
    want = [a.get() for a in (plan.o, plan.tv_bound)]
    plan.o.fill(np.nan)
    cp.cuda.Device().synchronize()
    errors = []

    def worker():
        try:
            plan.launch()
            cp.cuda.Device().synchronize()
        except Exception as e:  # (re-raised in the main thread below)
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert not errors, errors
    for a, w in zip((plan.o, plan.tv_bound), want):
        assert np.array_equal(a.get(), w, equal_nan=True)


def test_telemetry_on_device_without_host_sync():
    import cupyx

    pool, table, _, _ = filled_pool(np.random.default_rng(12), lengths=[300, 64], backend="cuda")
    ip, ix, ll = on_device(pool, table)
    cert = wc.CertConfig(tier="B", steps=3, tau=0.05)
    tel = wc.Telemetry(1, 8, cert, backend="cuda")
    q = cp.asarray(np.random.default_rng(0).standard_normal((3, 2, 8, 128)).astype(np.float32))
    wc.decode_attention(q[0], pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll, cert=cert)
    pool.ledger.reset()  # (the warm-up call was a request of its own)
    cp.cuda.Device().synchronize()
    risks = []
    with cupyx.allow_synchronize(False):
        for t in range(3):
            r = wc.decode_attention(q[t], pool, layer=0, kv_indptr=ip, kv_indices=ix, kv_last_page_len=ll,
                                    cert=cert, telemetry=tel)
            risks.append(r.risk)
    R = np.stack([x.get() for x in risks])
    snap = tel.snapshot()
    assert snap["steps"] == 3 and snap["cells"] == R.size
    assert snap["coverage"] == np.mean(R <= 0.05)
    assert np.isclose(snap["max_r_finite"], R.max())
    assert np.array_equal(snap["head_exceed"][0], (R > 0.05).sum(axis=(0, 1)))


# ---------------------------------------------------------------- the two stage-1 kernels

V2_CASES = [(G, page, 8) for G in (1, 2, 4, 5, 8) for page in (16, 1)] + [
    (4, 16, 16), (7, 1, 16), (2, 16, 16), (1, 16, 24), (4, 1, 24), (8, 16, 24)]


@pytest.mark.parametrize("G,page,bits", V2_CASES)
def test_staged_tile_kernel_agrees_with_the_general_one(G, page, bits):
    """decode_stage1_v2 (the common case) against decode_stage1 and float64, on the same plan inputs:
    outlier bypass, witness (Tier AB), ragged lengths, an empty request, split counts that cut pages,
    at each dither resolution (8 bits: one Philox call per 16 channels; 16: two; 24: four).  Certified,
    both carry their evaluation term (SPEC §4.1: the quantized channels' from β's sum, the outlier
    channels' from their exact values) for their own summation orders, the library's choice is the
    staged tile at 24 bits (form (I) with outlier pairs at 8 and 16 bits at every G:
    test_i8_kernel_matches_its_cpu_twin), and each
    kernel's certificate is the CPU backend's at that kernel's height and sound."""
    H, d = 2, 128
    cfg = wc.QuantConfig(d, witness_bands=16, seed=G, dither_bits=bits,
                         outlier_pairs=np.array([[[3, 40], [7, 9]]]))
    lengths = [1, 31, 33, 700, 0, 1500]
    (pc, tc, _, _), (pg, tg, _, _) = _pools(G + page, lengths=lengths, H=H, d=d, page_size=page, cfg=cfg,
                                            massive=[(3, 50.0)])
    rng = np.random.default_rng(G)
    q = cp.asarray((rng.standard_normal((len(lengths), H * G, d)) * 2).astype(np.float32))
    ip, ix, ll = on_device(pg, tg)
    cert = wc.CertConfig(tier="AB", num_layers=2, steps=4)
    want = "i8" if bits in (8, 16) else "v2"
    assert pg._dev.plan(q, 0, ip, ix, ll, 1 / math.sqrt(d), cert, 3).kernel_name == want
    own = _decode(pc, tc, q.get(), cert=cert, num_splits=3)  # the CPU backend as it ships
    for ns in (1, 7):
        res, unc = {}, {}
        for k in ("v1", "v2"):
            plan = pg._dev.plan(q, 0, ip, ix, ll, 1 / math.sqrt(d), cert, ns, stage1=k)
            assert plan.kernel_name == k
            plan.launch()
            res[k] = plan.result()
            plan = pg._dev.plan(q, 0, ip, ix, ll, 1 / math.sqrt(d), None, ns, stage1=k)
            plan.launch()
            unc[k] = plan.result()
        # the new kernel by the SPEC §9 rule (its sum order differs from v1's, so not bit for bit),
        # the fp32 error at each element taken from the reference implementations: the CPU backend
        # in its own summation order, in v2's and in v1's, and the general kernel.  Why several: on this workload (a 50× key channel, q × 2, 1500 tokens)
        # the rounding of the fp32 logits sets o's error and which implementation is luckier at an
        # element varies from draw to draw — over 10 redraws each of four of these cases the general
        # kernel's largest error reached 3.4× the CPU backend's and v2's 2.4×, so the CPU-only rule
        # fails for either kernel on some draws (it did for v1 here at 8 bits: 1.7×), while v2 stayed
        # within 0.72 of this rule on every redraw and 0.82 on every case below
        # (`python3 tests/gpu_spec9_probe.py G page_size bits redraws`).  Both kernels meet the CPU-only
        # rule in test_decode_matches_cpu_and_reference; every dither resolution's x̂ is checked bit
        # for bit on the device by test_dequant_header_is_the_reference_on_the_device.
        at = {k: _decode(pc, tc, q.get(), cert=cert, num_splits=3, order=res[k].dot_order) for k in res}
        rc = at["v2"]  # (the CPU oracle in v2's summation order: SPEC §9)
        # (the general layout sums by chunk at every G)
        assert res["v1"].dot_height == 12 and res["v2"].dot_height == 23
        assert res["v1"].dot_order == (8, "tree") and res["v2"].dot_order == (16, "chain")
        for bq, rows, _ in _checked_requests(unc["v2"], rc, pc, tc, q, lengths, also=(unc["v1"], at["v1"], own)):
            tv = reference.true_tv(q[bq].get(), rows["k_exact"], rows["k_hat"])
            for k in ("v1", "v2"):
                np.testing.assert_allclose(res[k].cmax[bq].get(), at[k].cmax[bq], rtol=3e-6)
                np.testing.assert_allclose(res[k].gamma[bq].get(), at[k].gamma[bq], rtol=3e-6)
                assert np.all(tv <= res[k].tv_bound[bq].get())
    # a page id outside the pool poisons only its request, in both kernels
    bad = ix.copy()
    bad[0] = pg.num_pages + 5
    for k in ("v1", "v2"):
        plan = pg._dev.plan(q, 0, ip, bad, ll, 1 / math.sqrt(d), cert, 3, stage1=k)
        plan.launch()
        r = plan.result()
        assert np.all(np.isnan(r.o[0].get())) and np.all(np.isinf(r.log_a[0].get()))
        assert np.all(np.isfinite(r.o[3].get()))


@pytest.mark.parametrize("G,bits,page", [(4, 8, 16), (7, 16, 16), (1, 24, 1), (8, 8, 16), (2, 8, 1)])
def test_staged_tile_kernel_serves_the_exact_tier(G, bits, page):
    """An INT8 pool with an exact tier (every pool gated_decode repairs) on decode_stage1_v2's general
    layout: tokens on repaired pages read the tier's fp16 rows, with c_t = γ_t over every channel.
    With a third of the pages repaired (outlier pairs too, Tier AB): o and lse held to SPEC §9 against
    float64 attention over what the pool serves, both kernels' certificates the CPU backend's at
    their own summation heights and sound against the float64 TV of the served keys; with no page
    repaired, the same bits as the pool without a tier."""
    from witcert_cupy.gate import attention_with_repaired_pages, served_rows

    H, d = 2, 128
    cfg = wc.QuantConfig(d, witness_bands=16, seed=G, dither_bits=bits, outlier_pairs=np.array([[[3, 40], [7, 9]]]))
    lengths = [1, 33, 700, 0, 300]
    kw = dict(lengths=lengths, H=H, d=d, page_size=page, cfg=cfg, massive=[(3, 50.0)])
    (pc, tc, _, _), (pg, tg, _, _) = [filled_pool(np.random.default_rng(G), backend=be, exact_tier_pages=4096, **kw)
                                      for be in ("cpu", "cuda")]
    pn, tn, _, _ = filled_pool(np.random.default_rng(G), backend="cuda", **kw)  # (no tier)
    q = (np.random.default_rng(G + 1).standard_normal((len(lengths), H * G, d)) * 2).astype(np.float32)
    ip, ix, ll = on_device(pg, tg)
    cert = wc.CertConfig(tier="AB", num_layers=2, steps=4)
    plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(d), cert, 3)
    assert plan.kernel_name == "v2" and plan.stage1_template.endswith(", false>")
    plan.launch()
    same = pn._dev.plan(cp.asarray(q), 0, *on_device(pn, tn), 1 / math.sqrt(d), cert, 3, stage1="v2")
    same.launch()
    for x, y in zip(_written(plan), _written(same)):
        assert np.array_equal(x.get(), y.get(), equal_nan=True)
    rng = np.random.default_rng(G + 2)
    pages = np.unique(tc[1])
    for h in range(H):
        for pgid in rng.choice(pages, size=len(pages) // 3, replace=False):
            pc.page_in(0, h, int(pgid))
            pg.page_in(0, h, int(pgid))
    pt = page_table(pc, tc)
    for ns in (1, 5):
        res = stage1_results(pg, cp.asarray(q), (ip, ix, ll), 1 / math.sqrt(d), cert, ns)
        at = {k: _decode(pc, tc, q, cert=cert, num_splits=3, order=res[k].dot_order) for k in res}
        for b, n in enumerate(lengths):
            if n == 0:
                assert all(np.all(res[k].o[b].get() == 0) for k in res)
                continue
            o64, lse64 = attention_with_repaired_pages(pc, 0, pt, b, q[b])
            rows, served, _ = served_rows(pc, 0, pt, b)
            tv = reference.true_tv(q[b], rows["k_exact"], served)
            for k in ("v1", "v2"):
                oc, og = at[k].o[b], res[k].o[b].get()
                assert np.all(np.abs(og - o64) <= 2 * np.abs(oc - o64) + 4e-6 * np.abs(o64).max()), (k, b)
                lg = res[k].lse[b].get()
                assert np.all(np.abs(lg - lse64) <= 2 * np.abs(at[k].lse[b] - lse64) + 2e-6 * np.maximum(1, np.abs(lse64)))
                np.testing.assert_allclose(res[k].cmax[b].get(), at[k].cmax[b], rtol=3e-6)
                np.testing.assert_allclose(res[k].gamma[b].get(), at[k].gamma[b], rtol=3e-6)
                assert np.all(tv <= res[k].tv_bound[b].get()), (k, b)


def _relaunched_with(plan, template, extra_options=()):
    """The plan's outputs (:func:`_written`, on the host) after a step whose stage 1 is ``template``,
    another instantiation of the plan's kernel (built with ``extra_options`` besides the library's),
    launched with the plan's own arguments."""
    fn = _cuda.kernel("decode_v2.cu", None, template, extra_options)
    plan._stage1 = _launch.Launcher(fn, plan.grid1, (plan.block1,), plan.args1, plan.smem1, pdl=_cuda.launch._pdl())
    plan.launch()
    return [a.get() for a in _written(plan)]


@pytest.mark.parametrize("G,bits,page", [(1, 16, 16), (4, 8, 16), (4, 24, 1), (5, 24, 16), (6, 24, 1), (7, 8, 16),
                                         (7, 16, 1), (8, 24, 16)])
def test_plain_instantiation_gives_the_general_one_s_bits(G, bits, page, monkeypatch):
    """decode_stage1_v2<G, BITS, true, SPLIT> holds the default layout (no outlier channels,
    32-channel scale groups, no Tier-A term) as constants; with SPLIT its two warps split each row's
    channels where the general instantiation's split the sides (docs/performance.md).  The
    launch layer takes PLAIN for such a pool and step, with the sides below V2_SPLIT_MIN_PAIRS
    (request, kv head) pairs and the split from there (the staged tile named: from G = 7 the library
    takes form (I)).  Certified (Tier B) and not, over ragged
    lengths, an empty request, one-token and one-tile requests and split counts that cut pages:
    the split gives the general instantiation's bits (both sum each dot product by chunk), and the
    sides give them too where they sum by chunk as well (V2Tuning::blocked_dot: up to G = 6; from
    G = 7 the sides sum one chain, and agree within fp32 rounding).  A batch of
    16 pairs takes the split, and each of its requests gets the bits it gets in the smaller batch.
    (G = 5 and 6 at 24 bits: the split's instantiations that take two chunks a step,
    V2Tuning::split_unroll.)  The small batch on the sides at every G (V2_SPLIT_MIN_G off: test_split_serves_small_batches_of_one_tile_splits_from_g_5 covers
    that rule)."""
    monkeypatch.setattr(_cuda.geometry, "V2_SPLIT_MIN_G", 99)
    H, d = 2, 128
    cfg = wc.QuantConfig(d, seed=G, dither_bits=bits)
    lengths = [1, 31, 33, 700, 0, 1500]
    pg, tg, _, _ = filled_pool(np.random.default_rng(G + bits), lengths=lengths, H=H, d=d, page_size=page,
                               cfg=cfg, massive=[(3, 50.0)], backend="cuda")
    q = cp.asarray((np.random.default_rng(G).standard_normal((len(lengths), H * G, d)) * 2).astype(np.float32))
    ip, ix, ll = on_device(pg, tg)
    # the same requests and two more (repeats of requests 3 and 5, sharing their pages): 8·H = 16 pairs
    idx = [0, 1, 2, 3, 4, 5, 3, 5]
    iph, ixh = ip.get(), ix.get()
    chunks = [ixh[iph[b]:iph[b + 1]] for b in idx]
    big = (cp.asarray(np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int32)),
           cp.asarray(np.concatenate(chunks).astype(np.int32)), ll[cp.asarray(idx)])
    assert len(idx) * H == _cuda.V2_SPLIT_MIN_PAIRS
    for cert in (wc.CertConfig(tier="B", num_layers=2, steps=4), None):
        for ns in (None, 1, 7):
            # (the staged tile by name: at 8 and 16 bits from G = 7 the library's choice is form (I))
            plan = pg._dev.plan(q, 0, ip, ix, ll, 1 / math.sqrt(d), cert, ns, stage1="v2")
            assert plan.stage1_template == f"decode_stage1_v2<{G}, {bits}, true, false>"
            plan.launch()
            sides = [a.get() for a in _written(plan)]
            split = _relaunched_with(plan, f"decode_stage1_v2<{G}, {bits}, true>")
            general = _relaunched_with(plan, f"decode_stage1_v2<{G}, {bits}, false>")
            assert len(sides) == (4 if cert else 2)
            # (certified, the general layout says "no guarantee": SPEC §4.1; o and lse still agree)
            # (the general layout sums by chunk at every G, as the split does; the sides from G = 7
            # in one chain)
            same = [*zip(split[:2], general)] + ([*zip(sides[:2], general)] if G <= 6 else [])
            for x, y in same:
                assert np.array_equal(x.view(np.uint32 if x.dtype == np.float32 else np.uint64),
                                      y.view(np.uint32 if y.dtype == np.float32 else np.uint64))
            if G > 6:
                for x, y in zip(sides[:2], general):
                    fin = np.isfinite(y)  # the empty request's lse is -inf on both
                    assert np.array_equal(x[~fin], y[~fin]) and np.all(np.isfinite(x[fin]))
                    np.testing.assert_allclose(x[fin], y[fin], rtol=2e-5, atol=2e-5 * np.abs(y[fin]).max())
            assert np.all(np.isfinite(sides[0])) and np.all(np.isfinite(split[0]))
            if ns is not None:
                # (at 8 and 16 bits the library's choice there is the form-(I) kernel: the staged tile by name)
                plan8 = pg._dev.plan(q[cp.asarray(idx)], 0, *big, 1 / math.sqrt(d), cert, ns,
                                     stage1="v2" if bits in (8, 16) else "auto")
                assert plan8.stage1_template == f"decode_stage1_v2<{G}, {bits}, true>"
                plan8.launch()
                w8 = [a.get()[:len(lengths)] for a in _written(plan8)]
                for x, y in zip(w8[:2], split[:2]):
                    assert np.array_equal(x, y, equal_nan=True)
                # the certificate: the split's own (height 23) at 16 pairs; relaunched with the
                # sides' arguments it carries the sides' evaluation term, which at G >= 7 is a
                # chain's (height 128): the same up to G = 6, no smaller beyond
                for x, y in zip(w8[2:], split[2:]):
                    if G <= 6:
                        assert np.array_equal(x, y, equal_nan=True)
                    else:
                        assert np.array_equal(np.isfinite(x), np.isfinite(y)) and np.all(x[np.isfinite(x)] <= y[np.isfinite(y)])


@pytest.mark.parametrize("page", [16, 1])
def test_guessed_page_ids_give_the_same_bits(page):
    """decode_stage1_f16 requests a split's first page ids before kv_indptr has arrived, at the
    entries an equal share of kv_indices per request would give (common.cuh, guess_first_page),
    and uses such a value only where it is the real entry's.  On a batch of equal lengths (every
    guess right) and on the same table behind 37 entries of invalid page ids (every guess wrong,
    and a guessed value used in error would poison its request), certified and not, at split counts
    that cut pages: the two tables give the same bits (a wrong guess is never used)."""
    from test_fp16pool import build, e4m3_like

    lengths, d = [300, 300, 300], 128
    pg, tg = build(np.random.default_rng(11 + page), lengths, backend="cuda", scheme=e4m3_like, page=page)
    ip, ix, ll = (np.array(a) for a in tg[:3])
    pad = 37
    tables = [(ip, ix, ll), (ip + pad, np.concatenate([np.full(pad, 1 << 30, ix.dtype), ix]), ll)]
    q = cp.asarray((np.random.default_rng(3).standard_normal((len(lengths), 8, d)) * 2).astype(np.float32))

    def plans():
        return [pg._dev.plan(q, 0, *(cp.asarray(a) for a in t), 1 / math.sqrt(d), c, ns, stage1="f16")
                for t in tables for c in (wc.CertConfig(tier="A"), None) for ns in (1, 5, 12)]

    guessed = []
    for plan in plans():
        plan.launch()
        guessed += [a.get() for a in _written(plan)]
    assert len(guessed) == 2 * (4 + 2) * 3
    half = len(guessed) // 2
    for a, b in zip(guessed[:half], guessed[half:]):
        assert np.array_equal(a, b, equal_nan=True)
    # (the third request's certificate is finite: the guess costs it nothing)
    assert all(np.all(np.isfinite(a[2])) for a in guessed)


@pytest.mark.parametrize("what", ["outlier channels", "16-channel groups", "a Tier-A term"])
def test_plain_instantiation_poisons_a_launch_off_its_layout(what):
    """The launch layer takes the general instantiation for a pool or step off the default layout,
    and the PLAIN one, given such a launch's arguments, poisons every split (NaN o, log A = +inf:
    no guarantee) instead of computing without what it compiled out."""
    H, d, G = 2, 128, 4
    cfg = {"outlier channels": wc.QuantConfig(d, outlier_pairs=np.array([[[3, 40], [7, 9]]])),
           "16-channel groups": wc.QuantConfig(d, group_size=16),
           "a Tier-A term": wc.QuantConfig(d, witness_bands=16)}[what]
    lengths = [33, 700]
    pg, tg, _, _ = filled_pool(np.random.default_rng(5), lengths=lengths, H=H, d=d, cfg=cfg, backend="cuda")
    q = cp.asarray(np.random.default_rng(6).standard_normal((len(lengths), H * G, d)).astype(np.float32))
    ip, ix, ll = on_device(pg, tg)
    cert = wc.CertConfig(tier="AB" if what == "a Tier-A term" else "B", num_layers=2, steps=4)
    plan = pg._dev.plan(q, 0, ip, ix, ll, 1 / math.sqrt(d), cert, None, stage1="v2")
    assert plan.stage1_template == f"decode_stage1_v2<{G}, 8, false>"
    plan.launch()
    o, _, log_a, _ = [a.get() for a in _written(plan)]
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(log_a))  # (the general layout certifies it)
    for layout in ("true", "true, false"):  # the channel split, and the sides
        o, _, log_a, tv = _relaunched_with(plan, f"decode_stage1_v2<{G}, 8, {layout}>")
        assert np.all(np.isnan(o)) and np.all(log_a == np.inf) and np.all(tv == 1.0)


@pytest.mark.parametrize("filename,template", [
    *[("decode_f16.cu", f"decode_stage1_f16<{G}, {c}>") for G in (4, 7, 8) for c in ("false", "true")],
    *[("decode_v2.cu", f"decode_stage1_v2<{G}, {bits}, {p}>") for G in (4, 7, 8) for bits in (8, 24)
      for p in ("false", "true", "true, false")]])
def test_decode_kernels_as_built_on_the_device_use_no_local_memory(filename, template):
    """The stage-1 kernels as CuPy builds them here (this NVRTC, this driver): no local memory at the
    head counts of common models (G = 4, 7, 8).  A profile of decode_stage1_f16<7, false>
    showed a 40-byte stack frame (staging addresses spilled) that the offline nvcc check did not;
    tests/test_cuda_compile.py now also checks NVRTC offline, and this checks what the device built."""
    attrs = _cuda.kernel(filename, None, template).attributes  # (cuFuncGetAttribute)
    assert attrs["local_size_bytes"] == 0, (template, attrs)
    assert 0 < attrs["num_regs"] <= 255, (template, attrs)


@pytest.mark.parametrize("G,bits", [(7, 8), (5, 16), (4, 8), (8, 24)])
def test_split_serves_small_batches_of_one_tile_splits_from_g_5(G, bits):
    """Below V2_SPLIT_MIN_PAIRS the launch layer takes the channel split for G >= V2_SPLIT_MIN_G when
    the mean request's tokens fit one 32-token tile per split, and the sides otherwise
    (docs/performance.md).  One request of 4096 tokens at the default split count, of 300
    tokens at 16 and at 2 splits, certified: the layout the rule names; o and lse held to SPEC §9
    against float64 attention on the reconstructed rows; the certificate sound against exact keys."""
    H, d = 2, 128
    cfg = wc.QuantConfig(d, seed=G, dither_bits=bits)
    cert = wc.CertConfig(tier="B")
    for length, ns, one_tile in ((4096, None, True), (300, 16, True), (300, 2, False)):
        pc, tc, _, _ = filled_pool(np.random.default_rng(G + length), lengths=[length], H=H, d=d, cfg=cfg)
        pg, tg, _, _ = filled_pool(np.random.default_rng(G + length), lengths=[length], H=H, d=d, cfg=cfg,
                                   backend="cuda")
        q = (np.random.default_rng(G).standard_normal((1, H * G, d)) * 2).astype(np.float32)
        ip, ix, ll = on_device(pg, tg)
        # (the staged tile by name: at 8 and 16 bits from G = 7 the library's choice is form (I))
        plan = pg._dev.plan(cp.asarray(q), 0, ip, ix, ll, 1 / math.sqrt(d), cert, ns, stage1="v2")
        assert (length <= _cuda.V2_TILE * plan.ns) == one_tile, (length, plan.ns)
        split = one_tile and G >= _cuda.V2_SPLIT_MIN_G
        assert plan.stage1_template == f"decode_stage1_v2<{G}, {bits}, true{'' if split else ', false'}>"
        plan.launch()
        rg = plan.result()
        rc = _decode(pc, tc, q, cert=cert, num_splits=plan.ns, order=rg.dot_order)
        for b, rows, _ in _checked_requests(rg, rc, pc, tc, q, [length]):
            tv = reference.true_tv(q[b], rows["k_exact"], rows["k_hat"])
            assert np.all(tv <= rg.tv_bound[b].get())
            np.testing.assert_allclose(rg.cmax[b].get(), rc.cmax[b], rtol=3e-6)
