"""Issue 6 on the GPU: the tensor-core extend kernel (``cuda/extend_tc.cu``) against float64
references and the CPU oracle, run on the H200 with ``-m gpu``.

Rules (docs/certificate.md §9):

- ``o`` is computed from V̂ and P rounded to fp16, so it is held to the flash-attention rule against
  an fp16 attention on the same dequantized values: ``|o − ref64| ≤ 2·|o_fp16 − ref64| + atol``,
  with ``o_fp16`` the float64 attention whose P and V̂ are rounded to fp16 exactly as an fp16
  kernel (torch SDPA on the dequantized cache) rounds them.
- ``lse`` comes from near-fp32 logits: ``|lse − ref64| ≤ 2·|lse_cpu32 − ref64| + max_t γ_t + atol``,
  with ``γ_t`` the tensor-core term the kernel adds to ``c_t``.
- Certificates: zero violations against the float64 true TV from exact keys; ``cmax`` at least the
  CPU's (the kernel adds ``γ_t``) and within 1% of it.
- Against torch SDPA fp16 itself (when torch is installed): the same flash-attention rule with the
  real kernel as the baseline.
"""

import numpy as np
import pytest

import witcert_cupy as wc
from witcert_cupy import certificate as cm
from witcert_cupy import reference
from witcert_cupy.decode import check_page_table
from helpers import mid_vector, page_slots, paged_table, random_rows

cp = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

PS, D = 16, 128


def _np(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def pools(num_pages, H):
    cfg = wc.QuantConfig(D)
    return [wc.KVPool(1, H, D, num_pages, PS, cfg, keep_exact=True, backend=be) for be in ("cpu", "cuda")]


def table(page_lists, lengths):
    return paged_table(page_lists, lengths, PS)


def slots_of(pages, lo, hi):
    return page_slots(pages, lo, hi, PS)


def put(pool, slots, k, v):
    """Write the same rows into a pool of either backend."""
    if pool.backend == "cuda":
        slots, k, v = cp.asarray(slots), cp.asarray(k), cp.asarray(v)
    pool.write(0, slots, k, v)


def run(pool, q, qo, tabs, **kw):
    if pool.backend == "cuda":
        q, qo, tabs = cp.asarray(q), cp.asarray(qo), [cp.asarray(t) for t in tabs]
    return wc.extend_attention(q, pool, layer=0, qo_indptr=qo, kv_indptr=tabs[0], kv_indices=tabs[1],
                               kv_last_page_len=tabs[2], **kw)


def fp16_attention(q, k_hat, v_hat, sm):
    """float64 attention with P (relative to its max) and V̂ rounded to fp16, as an fp16 kernel does."""
    lg = sm * np.einsum("hd,shd->hs", q.astype(np.float64), k_hat.astype(np.float64))
    w = np.exp(lg - lg.max(-1, keepdims=True))
    w16 = w.astype(np.float16).astype(np.float64)
    v16 = v_hat.astype(np.float16).astype(np.float64)
    return np.einsum("hs,shd->hd", w16, v16) / w.sum(-1)[:, None]


def requests(rng, H, G, lengths, news, *, spare, massive):
    """CPU and GPU pools holding the same rows for requests of ``lengths`` tokens on shuffled pages
    (``spare`` pages unused), with ``news`` new queries each (1.5 × Gaussian) and a certificate
    budget for the longest: ``(cpu, gpu, q, qo, tabs, cert)``."""
    npages = [-(-n // PS) for n in lengths]
    cpu, gpu = pools(sum(npages) + spare, H)
    perm = rng.permutation(sum(npages) + spare)
    page_lists = np.split(perm, np.cumsum(npages))[:len(npages)]
    for pl, n in zip(page_lists, lengths):
        k = random_rows(rng, n, H, D, massive=[massive])
        v = random_rows(rng, n, H, D)
        for p in (cpu, gpu):
            put(p, slots_of(pl, 0, n), k, v)
    qo = np.concatenate([[0], np.cumsum(news)]).astype(np.int32)
    q = (1.5 * rng.standard_normal((qo[-1], H * G, D))).astype(np.float32)
    return cpu, gpu, q, qo, table(page_lists, lengths), wc.CertConfig(steps=int(max(news)))


def check_against_references(res, cpu_res, pool, q, qo, tabs, causal=True):
    """Every rule of the module docstring, query position by query position."""
    H = pool.num_kv_heads
    G = q.shape[1] // H
    sm = 1.0 / np.sqrt(D)
    pt = check_page_table(*tabs, batch=len(qo) - 1, num_pages=pool.num_pages, page_size=PS)
    o, lse, tvb, cmax = (_np(getattr(res, f)) for f in ("o", "lse", "tv_bound", "cmax"))
    worst_o = worst_lse = 0.0
    violations = 0
    for b in range(len(qo) - 1):
        rows = reference.request_rows(pool, 0, pt, b)
        S = rows["k_hat"].shape[0]
        n = qo[b + 1] - qo[b]
        for i in range(n):
            qi = qo[b] + i
            upto = S - n + i + 1 if causal else S
            kh, vh, kx = rows["k_hat"][:upto], rows["v_hat"][:upto], rows["k_exact"][:upto]
            o64, lse64 = reference.attention(q[qi], kh, vh)
            kk = np.repeat(kh, G, axis=1)
            vv = np.repeat(vh, G, axis=1)
            o16 = fp16_attention(q[qi], kk, vv, sm)
            atol_o = 1e-6 * np.abs(o64).max()
            err_o = np.abs(o[qi] - o64).max()
            assert err_o <= 2 * np.abs(o16 - o64).max() + atol_o, (b, i, err_o, np.abs(o16 - o64).max())
            worst_o = max(worst_o, err_o / np.abs(o64).max())
            scales = np.repeat(rows["k_scales"][:upto], G, axis=1).astype(np.float64)
            gamma = cm.tc_logit_term(q[qi], scales, group_size=32, sm_scale=sm).max()
            lse_cpu = _np(cpu_res.lse)[qi]
            bound = 2 * np.abs(lse_cpu - lse64) + gamma + 1e-6 * np.maximum(1.0, np.abs(lse64))
            assert np.all(np.abs(lse[qi] - lse64) <= bound), (b, i, np.abs(lse[qi] - lse64).max(), bound.min())
            worst_lse = max(worst_lse, float((np.abs(lse[qi] - lse64) / np.maximum(1.0, np.abs(lse64))).max()))
            tv = reference.true_tv(q[qi], kx, kh)
            violations += int(np.sum(tv > tvb[qi]))
    assert violations == 0
    c_cpu = _np(cpu_res.cmax)
    # (above the CPU's by the tensor cores' own evaluation term, 1.5× β's coefficient at 8 bits
    # against the CPU's 0.1× for its blocked sum: docs/certificate.md §10.1, §10.5)
    assert np.all(cmax >= c_cpu * (1 - 1e-6)) and np.all(cmax <= c_cpu * 1.02 + 1e-30)
    return worst_o, worst_lse


@pytest.mark.parametrize("G", [1, 4, 7, 8])
def test_tc_extend_matches_references_and_is_certified(G):
    rng = np.random.default_rng(G)
    H = 2
    # a partial last tile, a whole-tile chunk, no prefix
    cpu, gpu, q, qo, tabs, cert = requests(rng, H, G, [301, 160, 47], [37, 64, 47], spare=3, massive=(5, 25.0))
    res = run(gpu, q, qo, tabs, cert=cert)
    assert res.kernel == "extend_tc"
    cpu_res = run(cpu, q, qo, tabs, cert=cert)
    assert cpu_res.kernel == "decode"
    worst_o, worst_lse = check_against_references(res, cpu_res, cpu, q, qo, tabs)
    # the split keeps the logits far from fp16 rounding (~2^-11 = 5e-4 relative): lse within 1e-4
    # relative (measured up to 4e-5 on the H200: the tensor cores' fp32 accumulation, not the split)
    assert worst_lse < 1e-4
    # and the GPU agrees with the decode-kernel path on the same GPU pool
    dec = run(gpu, q, qo, tabs, cert=cert, kernel="decode")
    assert dec.kernel == "decode"
    lse_dec = _np(dec.lse)
    assert np.all(np.abs(_np(res.lse) - lse_dec) <= 1e-4 * np.maximum(1.0, np.abs(lse_dec)))
    # non-causal
    res_nc = run(gpu, q, qo, tabs, cert=cert, causal=False)
    cpu_nc = run(cpu, q, qo, tabs, cert=cert, causal=False)
    check_against_references(res_nc, cpu_nc, cpu, q, qo, tabs, causal=False)
    # no certificate: the same outputs
    plain = run(gpu, q, qo, tabs)
    assert plain.risk is None
    assert np.array_equal(_np(plain.o), _np(res.o)) and np.array_equal(_np(plain.lse), _np(res.lse))


def test_tc_extend_query_starting_mid_vector_gives_the_same_bits():
    """The extend kernel loads the query 16 bytes at a time: a query view 4 bytes past a 16-byte
    boundary is copied by the launch layer (launch_query) and gives the same bits as an aligned
    one, instead of faulting."""
    rng = np.random.default_rng(31)
    _, gpu, q, qo, tabs, cert = requests(rng, 2, 4, [200, 90], [40, 17], spare=1, massive=(5, 25.0))
    want = run(gpu, q, qo, tabs, cert=cert)
    assert want.kernel == "extend_tc"
    gpu.ledger.reset()  # the same positions again, as a fresh request
    got = run(gpu, mid_vector(q), qo, tabs, cert=cert)
    for a, b in ((want.o, got.o), (want.lse, got.lse), (want.tv_bound, got.tv_bound)):
        assert np.array_equal(_np(a), _np(b))


def test_tc_chunked_prefill_equals_one_shot_prefix_sharing_and_decode_continues():
    rng = np.random.default_rng(11)
    H, G = 2, 4
    S = 230
    cpu, gpu = pools(40, H)
    pages = rng.permutation(40)[:15]
    k = random_rows(rng, S, H, D)
    v = random_rows(rng, S, H, D)
    put(gpu, slots_of(pages, 0, S), k, v)
    q = rng.standard_normal((S, H * G, D)).astype(np.float32)
    cert = wc.CertConfig(steps=S)
    # one split: a row's tiles and their order do not depend on how the queries were chunked
    one = run(gpu, q, np.array([0, S], np.int32), table([pages], [S]), cert=cert, num_splits=1)
    gpu.ledger.reset()  # the chunked prefill: a fresh request of the same S positions
    outs = []
    for lo, hi in ((0, 37), (37, 128), (128, S)):
        outs.append(run(gpu, q[lo:hi], np.array([0, hi - lo], np.int32), table([pages], [hi]), cert=cert,
                        num_splits=1))
    for f in ("o", "lse", "log_a", "cmax", "risk"):
        assert np.array_equal(np.concatenate([_np(getattr(x, f)) for x in outs]), _np(getattr(one, f))), f
    # split counts change fp32 summation only
    gpu.ledger.reset()
    many = run(gpu, q, np.array([0, S], np.int32), table([pages], [S]), cert=cert, num_splits=5)
    assert np.abs(_np(many.lse) - _np(one.lse)).max() < 1e-5
    assert np.abs(_np(many.o) - _np(one.o)).max() < 1e-3 * np.abs(_np(one.o)).max()
    assert np.abs(_np(many.log_a) - _np(one.log_a)).max() < 1e-5
    # prefix sharing: a second request shares the first 160 tokens' pages and adds its own suffix
    own = rng.permutation(np.setdiff1d(np.arange(40), pages))[:5]
    pages2 = np.concatenate([pages[:10], own])
    k2 = random_rows(rng, 60, H, D)
    v2 = random_rows(rng, 60, H, D)
    put(gpu, slots_of(pages2, 160, 220), k2, v2)
    q2 = np.concatenate([q[100:160], rng.standard_normal((60, H * G, D)).astype(np.float32)])
    qb = np.concatenate([q[100:160], q2])
    gpu.ledger.reset()  # two fresh requests
    both = run(gpu, qb, np.array([0, 60, 180], np.int32), table([pages, pages2], [160, 220]), cert=cert,
               num_splits=1)
    # the shared positions 100..159 of both requests see the same slots: identical certificates
    for f in ("o", "lse", "log_a", "risk", "tv_bound"):
        a = _np(getattr(both, f))
        assert np.array_equal(a[:60], a[60:120]), f
    # decode continues on the same pool: the next token attends everything the extend wrote
    ip, ix, ll = (cp.asarray(t) for t in table([pages], [S]))
    dec = wc.decode_attention(cp.asarray(q[S - 1:S]), gpu, layer=0, kv_indptr=ip, kv_indices=ix,
                              kv_last_page_len=ll, cert=cert)
    assert np.abs(_np(dec.lse) - _np(one.lse)[S - 1]).max() < 1e-4


def test_tc_certificate_operands_hold_across_dynamic_range():
    """c_t is evaluated by the tensor cores from tf32 operands rounded up (docs/certificate.md §9,
    step 5).  Keys whose magnitudes span six decades (scales down into fp16's subnormal range) and
    queries spanning four keep every rule: cmax at or above the CPU's and within 1% of it, zero
    violations.  A query whose Σq² overflows fp32 gets an infinite certificate, alone: every other
    (position, head) of the same call is bit-identical to the run without it."""
    rng = np.random.default_rng(33)
    H, G, S, n = 2, 4, 260, 70
    cpu, gpu = pools(20, H)
    pages = rng.permutation(20)[:17]
    k = random_rows(rng, S, H, D, heavy=False) * (10.0 ** rng.uniform(-4.0, 1.7, size=(S, H, 1)))
    k = k.astype(np.float32)
    v = random_rows(rng, S, H, D)
    for p in (cpu, gpu):
        put(p, slots_of(pages, 0, S), k, v)
    scales = _np(gpu.scales)
    assert scales[scales > 0].min() < 6.1e-5  # some scales are fp16 subnormals
    q = (rng.standard_normal((n, H * G, D)) * 10.0 ** rng.uniform(-2.0, 2.0, size=(n, H * G, 1))).astype(np.float32)
    tabs = table([pages], [S])
    cert = wc.CertConfig(steps=n)
    res = run(gpu, q, np.array([0, n], np.int32), tabs, cert=cert)
    assert res.kernel == "extend_tc"
    cpu_res = run(cpu, q, np.array([0, n], np.int32), tabs, cert=cert)
    check_against_references(res, cpu_res, cpu, q, np.array([0, n], np.int32), tabs)
    big = q.copy()
    big[33, 5] = 1e20  # Σq² = 128e40 overflows fp32
    gpu.ledger.reset()  # the same positions with one huge query, as a fresh request
    res_big = run(gpu, big, np.array([0, n], np.int32), tabs, cert=cert)
    cm_big, tv_big = _np(res_big.cmax), _np(res_big.tv_bound)
    assert np.isinf(cm_big[33, 5]) and tv_big[33, 5] == 1.0
    keep = np.ones((n, H * G), bool)
    keep[33, 5] = False
    for f in ("o", "lse", "log_a", "cmax", "tv_bound"):
        assert np.array_equal(_np(getattr(res_big, f))[keep], _np(getattr(res, f))[keep]), f


def test_tc_extend_gamma_survives_tiny_queries():
    """Γ ≤ ρ·cmax with ρ = sqrt(Σ_g cg²/cu2): at sm = 2^-80 and queries of norm about 2^-37 each
    group's cg sits at its floor 2^-102, whose square is far below fp32's range, and ρ must not read
    0 (docs/certificate.md §10.4): every certified cell's Γ well above the underflow term g₀ alone
    (which is what a flushed ρ leaves), and every bound sound against the float64 TV."""
    rng = np.random.default_rng(41)
    H, G, S, n = 2, 4, 200, 20
    cpu, gpu = pools(16, H)
    pages = rng.permutation(16)[:13]
    k = random_rows(rng, S, H, D)
    v = random_rows(rng, S, H, D)
    put(gpu, slots_of(pages, 0, S), k, v)
    q = (rng.standard_normal((n, H * G, D)) * 2.0 ** -40).astype(np.float32)
    tabs = table([pages], [S])
    sm = 2.0 ** -80
    res = run(gpu, q, np.array([0, n], np.int32), tabs, cert=wc.CertConfig(steps=n), sm_scale=sm)
    assert res.kernel == "extend_tc"
    gam, cmx, tvb = _np(res.gamma), _np(res.cmax), _np(res.tv_bound)
    assert np.all(cmx > 0)
    assert np.all(gam > 2 * cm.underflow_term(D, sm))
    pt = check_page_table(*tabs, batch=1, num_pages=gpu.num_pages, page_size=PS)
    rows = reference.request_rows(gpu, 0, pt, 0)
    for i in range(n):
        upto = S - n + i + 1
        tv = reference.true_tv(q[i], rows["k_exact"][:upto], rows["k_hat"][:upto], sm_scale=sm)
        assert np.all(tv <= tvb[i])


@pytest.mark.parametrize("G", [4, 7])
def test_tc_extend_wgmma_and_mma_sync_paths_agree(G, monkeypatch):
    """The two tensor-core paths of cuda/extend_tc.cu (warpgroup mma on sm_90, mma.sync elsewhere)
    read the same shared tiles and meet every rule against the references; their logits differ only
    in the tensor cores' fp32 accumulation order."""
    from witcert_cupy._cuda import extend as _cuda_extend

    rng = np.random.default_rng(40 + G)
    H = 2
    cpu, gpu, q, qo, tabs, cert = requests(rng, H, G, [333, 90], [70, 90], spare=2, massive=(3, 20.0))
    cpu_res = run(cpu, q, qo, tabs, cert=cert)
    out = {}
    for path in (False, True):
        if path and tuple(gpu._dev.compute_capability) != (9, 0):
            continue  # the sm_90a target runs on compute capability 9.0 only
        monkeypatch.setattr(_cuda_extend, "WGMMA", path)
        out[path] = run(gpu, q, qo, tabs, cert=cert)
        assert out[path].kernel == "extend_tc"
        check_against_references(out[path], cpu_res, cpu, q, qo, tabs)
    assert len(out) == 2, "this test runs on an H100/H200 (compute capability 9.0)"
    a, b = out[False], out[True]
    lse_a, lse_b = _np(a.lse), _np(b.lse)
    assert np.all(np.abs(lse_a - lse_b) <= 2e-5 * np.maximum(1.0, np.abs(lse_a)))
    assert np.abs(_np(a.o) - _np(b.o)).max() <= 2e-3 * np.abs(_np(a.o)).max()
    assert np.allclose(_np(a.cmax), _np(b.cmax), rtol=1e-6) and np.allclose(_np(a.log_a), _np(b.log_a), atol=1e-4)


def test_tc_nonfinite_slot_gives_infinite_certificate():
    rng = np.random.default_rng(5)
    H, G, S = 1, 4, 96
    _, gpu = pools(8, H)
    pages = np.arange(6)
    k = random_rows(rng, S, H, D)
    k[40, 0, 3] = np.inf
    put(gpu, slots_of(pages, 0, S), k, random_rows(rng, S, H, D))
    q = rng.standard_normal((S, H * G, D)).astype(np.float32)
    r = run(gpu, q, np.array([0, S], np.int32), table([pages], [S]), cert=wc.CertConfig(steps=S))
    assert r.kernel == "extend_tc"
    tvb = _np(r.tv_bound)
    # every query of a tile that reads slot 40 has no guarantee (the split is poisoned)
    assert np.all(tvb[40:] == 1.0) and np.all(np.isinf(_np(r.risk)[40:]))
    assert np.all(np.isnan(_np(r.o)[48:]))
    # queries whose tiles never read it keep finite certificates
    assert np.all(np.isfinite(_np(r.risk)[:32])) and np.all(np.isfinite(_np(r.o)[:32]))


def test_tc_kernel_choice_is_explicit():
    _, gpu = pools(4, 1)
    cfgpool = wc.KVPool(1, 1, D, 4, PS, wc.QuantConfig(D, witness_bands=16), backend="cuda")
    q = np.zeros((4, 4, D), np.float32)
    tabs = table([np.arange(4)], [4])
    with pytest.raises(ValueError, match="Tier B"):
        run(cfgpool, q, np.array([0, 4], np.int32), tabs, cert=wc.CertConfig(tier="AB", steps=4),
            kernel="extend_tc")
    r = run(cfgpool, q, np.array([0, 4], np.int32), tabs, cert=wc.CertConfig(tier="AB", steps=4))
    assert r.kernel == "decode"


def test_tc_extend_against_torch_sdpa_on_dequantized_values():
    """Issue 6's external baseline: torch SDPA fp16 with the extend's causal structure (query i sees
    the prefix and new tokens 0..i) on the dequantized cache.  o by the flash-attention rule against
    it; both against the float64 attention on the same values."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(21)
    H, G, S, n = 2, 4, 400, 96
    cpu, gpu = pools(30, H)
    pages = rng.permutation(30)[:25]
    k = random_rows(rng, S, H, D, massive=[(9, 20.0)])
    v = random_rows(rng, S, H, D)
    for p in (cpu, gpu):
        put(p, slots_of(pages, 0, S), k, v)
    q = rng.standard_normal((n, H * G, D)).astype(np.float32)
    tabs = table([pages], [S])
    res = run(gpu, q, np.array([0, n], np.int32), tabs, cert=wc.CertConfig(steps=n))
    assert res.kernel == "extend_tc"
    pt = check_page_table(*tabs, batch=1, num_pages=cpu.num_pages, page_size=PS)
    rows = reference.request_rows(cpu, 0, pt, 0)
    kh, vh = rows["k_hat"], rows["v_hat"]
    as_t = lambda a: torch.tensor(np.ascontiguousarray(a), device="cuda",  # noqa: E731
                                  dtype=torch.float16).permute(1, 0, 2)[None]
    mask = torch.ones(n, S, dtype=torch.bool, device="cuda").tril(diagonal=S - n)
    o_sdpa = F.scaled_dot_product_attention(as_t(q), as_t(np.repeat(kh, G, axis=1)), as_t(np.repeat(vh, G, axis=1)),
                                            attn_mask=mask)[0].permute(1, 0, 2).double().cpu().numpy()
    o = _np(res.o)
    for i in range(n):
        o64, _ = reference.attention(q[i], kh[:S - n + i + 1], vh[:S - n + i + 1])
        err, err_sdpa = np.abs(o[i] - o64).max(), np.abs(o_sdpa[i] - o64).max()
        assert err <= 2 * err_sdpa + 1e-6 * np.abs(o64).max(), (i, err, err_sdpa)


def _image_arrays(img):
    """A tile image's parts (bytes of one XtTile): kc, kx, vh as [64 tokens, 128 channels] fp16 in
    token-channel order (the shared tiles' 8 × 8 blocks undone), sk [4, 64], skt [64, 4, 2]."""
    t, c = np.meshgrid(np.arange(64), np.arange(D), indexing="ij")
    off = (t >> 3) * 1024 + (c >> 3) * 64 + (t & 7) * 8 + (c & 7)
    h16 = img[:3 * 64 * D * 2].view(np.float16).reshape(3, 64 * D)
    kc, kx, vh = (h16[i][off] for i in range(3))
    f = img[3 * 64 * D * 2:].view(np.float32)
    return kc, kx, vh, f[:256].reshape(4, 64), f[256:].reshape(64, 4, 2)


def test_tc_prepass_images_hold_the_dequantized_tiles():
    """The wgmma path's prepass (extend_tc_dequant) stores per tile and kv head what the in-kernel
    dequantization builds: K as its exact code and −ξ, with fl32(s·(code − ξ)) the pool's x̂ bit for
    bit; V̂ = fl16(x̂); the scales and c_t's operands.  Tokens past the request and on a page id
    outside the pool are zeros, and only the latter have their bit in bad_tokens."""
    from witcert_cupy._cuda import extend as _cuda_extend
    from witcert_cupy._cuda.extend import IMAGE_BYTES, ExtendPlan

    _, gpu = pools(30, 2)
    if not _cuda_extend.uses_wgmma(gpu._dev):
        pytest.skip("the prepass serves the sm_90a path (compute capability 9.0)")
    rng = np.random.default_rng(8)
    H, G, lengths = 2, 4, [150, 77]
    pages = [rng.permutation(30)[:10], rng.permutation(30)[:5]]
    for pl, n in zip(pages, lengths):
        put(gpu, slots_of(pl, 0, n), random_rows(rng, n, H, D, massive=[(5, 15.0)]), random_rows(rng, n, H, D))
    ip, ix, ll = table(pages, lengths)
    bad_page = int(ip[0]) + 5  # tokens 80..95 of request 0
    ix[bad_page] = 30 + 4
    qo = np.array([0, 40, 60], np.int32)
    q = cp.asarray(rng.standard_normal((60, H * G, D)).astype(np.float32))
    plan = ExtendPlan(gpu._dev, q, 0, qo, cp.asarray(ip), cp.asarray(ix), cp.asarray(ll), True, 0.088,
                      wc.CertConfig(steps=64), None, 10)
    plan.launch()
    assert plan.num_images == 3 + 2
    work = plan.work.get().reshape(plan.num_images, H, IMAGE_BYTES)
    bad = plan.bad_tokens.get().reshape(plan.num_images, H)
    scales = gpu.scales.get()
    gi = 0
    for b, n in enumerate(lengths):
        slots = slots_of(pages[b], 0, n)
        k_hat, v_hat = (_np(gpu.dequantized(0, cp.asarray(slots), s)) for s in ("k", "v"))
        for i in range(-(-n // 64)):
            for h in range(H):
                kc, kx, vh, sk, skt = _image_arrays(work[gi, h])
                want_bad = 0
                for t in range(64):
                    tok = 64 * i + t
                    on_bad_page = b == 0 and 80 <= tok < 96
                    if tok >= n or on_bad_page:
                        assert not (kc[t].any() or kx[t].any() or vh[t].any() or sk[:, t].any() or skt[t].any()), tok
                        want_bad |= int(on_bad_page) << t
                        continue
                    s = scales[0, 0, h, slots[tok]].astype(np.float32)  # [4] groups
                    assert np.array_equal(sk[:, t], s) and np.array_equal(skt[t, :, 1], s)
                    assert np.all(skt[t, :, 0] >= s * s) and np.all(skt[t, :, 0] <= s * s * (1 + 2.0**-9))
                    code, nxi = kc[t].astype(np.float32), kx[t].astype(np.float32)
                    assert np.array_equal(code, np.round(code)) and np.abs(code).max() <= 127
                    assert np.array_equal(np.abs(512 * nxi) % 2, np.ones(D)) and np.abs(nxi).max() < 0.5
                    x = np.repeat(s, 32) * (code + nxi)  # float32: one rounding, as the reference's x̂
                    assert np.array_equal(x.view(np.uint32), k_hat[tok, h].view(np.uint32)), (b, tok, h)
                    assert np.array_equal(vh[t].view(np.uint16), v_hat[tok, h].astype(np.float16).view(np.uint16))
                assert int(bad[gi, h]) == want_bad, (b, i, h)
            gi += 1


def test_tc_split_count_changes_results_only_by_rounding():
    """Splits are whole tiles (the prepass's images start every split): 1, 3 and 7 splits of the
    same call agree to rounding (fp32 for lse and cmax, P's fp16 for o), and each meets the
    references' rules."""
    rng = np.random.default_rng(12)
    H, G = 2, 4
    cpu, gpu, q, qo, tabs, cert = requests(rng, H, G, [333, 90], [70, 90], spare=2, massive=(3, 20.0))
    cpu_res = run(cpu, q, qo, tabs, cert=cert)
    outs = []
    for ns in (1, 3, 7):
        r = run(gpu, q, qo, tabs, cert=cert, num_splits=ns)
        assert r.kernel == "extend_tc"
        check_against_references(r, cpu_res, cpu, q, qo, tabs)
        outs.append(r)
    for r in outs[1:]:
        lse0, lse = _np(outs[0].lse), _np(r.lse)
        assert np.all(np.abs(lse - lse0) <= 1e-5 * np.maximum(1.0, np.abs(lse0)))
        # P is rounded to fp16 relative to each split's own maximum: o moves at that rounding's size
        assert np.abs(_np(r.o) - _np(outs[0].o)).max() <= 2e-3 * np.abs(_np(outs[0].o)).max()
        assert np.allclose(_np(r.cmax), _np(outs[0].cmax), rtol=1e-6)
