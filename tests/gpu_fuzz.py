"""Fuzzed page tables and slot lists for ``compute-sanitizer --tool memcheck`` (run on the GPU).

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/gpu_fuzz.py

CuPy's memory pool is switched off so that every array is its own allocation and memcheck sees any
byte outside it.  Also asserts the documented outcome: rows attending a bad page come back NaN with
an infinite certificate, rows with good tables are finite.
"""

import sys

import cupy as cp
import numpy as np

import witcert_cupy as wc

cp.cuda.set_allocator(None)
cp.cuda.set_pinned_memory_allocator(None)


def main(iters=int(sys.argv[1]) if len(sys.argv) > 1 else 60):
    rng = np.random.default_rng(0)
    def int8(bits):
        cfg = wc.QuantConfig(128, witness_bands=16, dither_bits=bits, outlier_pairs=np.array([[[1, 40]] * 2]))
        return wc.KVPool(1, 2, 128, 64, 16, cfg, backend="cuda", keep_exact=True)

    def fp16(bands):
        return wc.Fp16Pool(1, 2, 128, 64, 16, witness_bands=bands, keep_exact=True, backend="cuda")

    def int8_tier():  # an exact tier, pages paged in as the fuzz goes (the staged tile's general layout)
        cfg = wc.QuantConfig(128, witness_bands=16, outlier_pairs=np.array([[[1, 40]] * 2]))
        return wc.KVPool(1, 2, 128, 64, 16, cfg, backend="cuda", keep_exact=True, exact_tier_pages=12)

    def int8_plain():  # the default layout on 8 kv heads: from 2 requests, the form-(I) kernel's steps
        return wc.KVPool(1, 8, 128, 64, 16, wc.QuantConfig(128), backend="cuda", keep_exact=True)

    def int8_dim(d):  # other head dims: the form-(I) kernel at every size
        return wc.KVPool(1, 2, d, 64, 16, wc.QuantConfig(d), backend="cuda", keep_exact=True)

    def int8_wit():  # the witness without outlier pairs: Tier AB on the form-(I) kernel
        return wc.KVPool(1, 2, 128, 64, 16, wc.QuantConfig(128, witness_bands=16), backend="cuda", keep_exact=True)

    def int8_gate():  # the default layout with an exact tier: the gate's steps on the form-(I) kernel
        return wc.KVPool(1, 2, 128, 64, 16, wc.QuantConfig(128), backend="cuda", keep_exact=True,
                         exact_tier_pages=12)

    def int8_tier_wide():  # ... on 8 kv heads, plain steps: the exact tier on the form-(I) kernel
        return wc.KVPool(1, 8, 128, 64, 16, wc.QuantConfig(128), backend="cuda", keep_exact=True,
                         exact_tier_pages=12)

    # INT8 at each dither resolution and fp16 stores (witness rows of 32 and 4 bytes) take turns
    pools = [int8(8), fp16(16), int8(16), fp16(2), int8(24), int8_tier(), int8_plain(), int8_dim(64), int8_dim(256),
             int8_gate(), int8_wit(), int8_tier_wide()]
    n_good = n_bad = n_i8 = 0
    for it in range(iters):
        pool = pools[it % len(pools)]
        H, d = pool.num_kv_heads, pool.head_dim
        plain = isinstance(pool, wc.KVPool) and pool.config.witness_bands == 0  # (Tier B: form (I))
        cert = wc.CertConfig(tier="A" if isinstance(pool, wc.Fp16Pool) else ("B" if plain else "AB"))
        # writes with arbitrary slots: out-of-range ones must be dropped, not written
        n = int(rng.integers(1, 40))
        slots = rng.integers(-50, pool.num_slots + 50, n)
        x = cp.asarray(rng.standard_normal((n, H, d)).astype(np.float32))
        pool.write(0, cp.asarray(slots), x, x)
        if pool.tier_map is not None and rng.random() < 0.5:
            try:
                pool.page_in(0, int(rng.integers(2)), int(rng.integers(pool.num_pages)))
            except RuntimeError:  # the tier is full
                pass
        # page tables: some valid, some garbage
        B = int(rng.integers(2 if H == 8 else 1, 6))
        npg = rng.integers(0, 10, B)
        indptr = np.concatenate([[0], np.cumsum(npg)]).astype(np.int32)
        indices = rng.integers(0, pool.num_pages, indptr[-1]).astype(np.int32)
        last = rng.integers(1, 17, B).astype(np.int32)
        bad = rng.random(B) < 0.4
        for b in np.nonzero(bad)[0]:
            kind = rng.integers(0, 3)
            if kind == 0 and npg[b]:
                indices[indptr[b] + rng.integers(npg[b])] = rng.choice([-7, pool.num_pages, 2**31 - 1])
            elif kind == 1 and npg[b]:
                last[b] = rng.choice([0, 17, -3, 2**30])
            else:
                bad[b] = False
        if rng.random() < 0.2:  # an inconsistent indptr
            indptr = indptr.copy()
            indptr[-1] += 1000
        G = 8 if H == 8 else int(rng.choice([1, 4, 7]))  # (where the library takes the form-(I) kernel)
        q = cp.asarray(rng.standard_normal((B, H * G, d)).astype(np.float32))
        ns = int(rng.integers(1, 9))
        args = dict(layer=0, kv_indptr=cp.asarray(indptr), kv_indices=cp.asarray(indices),
                    kv_last_page_len=cp.asarray(last), num_splits=ns)
        # (the two-head tier pools' steps also ask for page contributions, as the gate's do; the
        # form-(I) pools without a tier every other time, up to d = 128)
        if pool.tier_map is not None:
            pages = H == 2
        else:
            pages = plain and d <= 128 and it % 2 == 0
        r = wc.decode_attention(q, pool, cert=cert, page_contrib=pages, **args)
        n_i8 += r.dot_order is not None and r.dot_height is None  # (the form-(I) kernel's steps)
        o = r.o.get()
        risk = r.risk.get()
        # the uncertified launch (its own instantiation for fp16 stores) on the same table
        o_plain = wc.decode_attention(q, pool, **args).o.get()
        cp.cuda.Device().synchronize()
        assert np.array_equal(np.isnan(o_plain), np.isnan(o)), it
        if indptr[-1] == len(indices):
            for b in range(B):
                if bad[b]:
                    assert np.all(np.isnan(o[b])) and np.all(np.isinf(risk[b])), (it, b)
                    n_bad += 1
                elif npg[b]:
                    assert np.all(np.isfinite(o[b])), (it, b)
                    n_good += 1
    assert n_i8 > 0, "no step ran the form-(I) kernel"
    print(f"fuzz: {iters} iterations ({n_i8} on the form-(I) kernel), {n_good} good rows finite, {n_bad} bad rows NaN/inf, "
          f"{sum(int(p._dev.bad_slot_writes.get()[0]) for p in pools)} out-of-range slot rows dropped")
    extend_fuzz(rng, iters)


def extend_fuzz(rng, iters):
    """The tensor-core extend kernel launched directly (no host validation) on garbage tables, through
    both of its paths (warpgroup mma where the GPU has it, and mma.sync)."""
    from witcert_cupy._cuda import extend as _cuda_extend
    from witcert_cupy._cuda.extend import ExtendPlan

    pool = wc.KVPool(1, 2, 128, 40, 16, wc.QuantConfig(128), backend="cuda")
    x = cp.asarray(rng.standard_normal((pool.num_slots, 2, 128)).astype(np.float32))
    pool.write(0, cp.arange(pool.num_slots), x, x)
    n_good = n_bad = 0
    for it in range(max(1, iters // 3)):
        B = int(rng.integers(1, 4))
        npg = rng.integers(1, 8, B)
        indptr = np.concatenate([[0], np.cumsum(npg)]).astype(np.int32)
        indices = rng.integers(0, pool.num_pages, indptr[-1]).astype(np.int32)
        last = rng.integers(1, 17, B).astype(np.int32)
        seq = (npg - 1) * 16 + last
        news = np.minimum(rng.integers(1, 40, B), seq)
        bad = rng.random(B) < 0.4
        for b in np.nonzero(bad)[0]:
            kind = rng.integers(0, 3)
            if kind == 0:  # on the first page, which every query position attends
                indices[indptr[b]] = rng.choice([-7, pool.num_pages, 2**31 - 1])
            elif kind == 1:
                last[b] = rng.choice([0, 17, -3, 2**30])
            else:
                news[b] = seq[b] + int(rng.integers(1, 50))  # more new tokens than the request holds
        qo = np.concatenate([[0], np.cumsum(news)]).astype(np.int32)
        G = int(rng.choice([1, 4, 7]))
        _cuda_extend.WGMMA = None if it % 2 == 0 else False
        q = cp.asarray(rng.standard_normal((int(qo[-1]), 2 * G, 128)).astype(np.float32))
        plan = ExtendPlan(pool._dev, q, 0, qo, cp.asarray(indptr), cp.asarray(indices), cp.asarray(last), True,
                          0.088, wc.CertConfig(steps=64), int(rng.integers(1, 6)), int(npg.max()))
        plan.launch()
        o, risk = plan.o.get(), plan.risk.get()
        for b in range(B):
            rows = slice(int(qo[b]), int(qo[b + 1]))
            if bad[b]:
                assert np.all(np.isnan(o[rows])) and np.all(np.isinf(risk[rows])), (it, b)
                n_bad += 1
            else:
                assert np.all(np.isfinite(o[rows])), (it, b)
                n_good += 1
    _cuda_extend.WGMMA = None
    print(f"extend fuzz: {n_good} good requests finite, {n_bad} bad requests NaN/inf")


if __name__ == "__main__":
    main()
