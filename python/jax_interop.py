"""JAX arrays in, zero-copy (issue 8): a JAX CUDA array goes to the certified decode through DLPack.

    python3 python/jax_interop.py          # on a machine with JAX (CUDA build) and CuPy

The queries and page table are JAX arrays on the GPU; :func:`witcert_cupy.decode_attention` wraps
them as CuPy arrays without a copy (the script checks that the device pointer is unchanged) and
returns CuPy arrays, which go back to JAX through DLPack, again without a copy.  On a CPU-only JAX
the same call runs on the CPU backend (JAX CPU arrays are host DLPack arrays).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import witcert_cupy as wc  # noqa: E402


def run():
    import jax
    import jax.numpy as jnp

    gpu = any(d.platform == "gpu" for d in jax.devices())
    backend = "cuda" if gpu else "cpu"
    H, G, d, page, n = 2, 4, 128, 16, 200
    pool = wc.KVPool(1, H, d, 16, page, wc.QuantConfig(d, witness_bands=16), backend=backend)
    rng = np.random.default_rng(0)
    k = jnp.asarray(rng.standard_normal((n, H, d)).astype(np.float32))
    v = jnp.asarray(rng.standard_normal((n, H, d)).astype(np.float32))
    slots = jnp.arange(n, dtype=jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    pool.write(0, slots, k, v)
    q = jnp.asarray(rng.standard_normal((1, H * G, d)).astype(np.float32))
    npg = -(-n // page)
    table = dict(kv_indptr=jnp.asarray([0, npg], jnp.int32), kv_indices=jnp.arange(npg, dtype=jnp.int32),
                 kv_last_page_len=jnp.asarray([n - (npg - 1) * page], jnp.int32))
    r = wc.decode_attention(q, pool, layer=0, cert=wc.CertConfig(tier="AB"), **table)
    if gpu:
        import cupy as cp

        zero_copy = cp.from_dlpack(q).data.ptr == q.unsafe_buffer_pointer()
        o = jax.dlpack.from_dlpack(r.o)            # back to JAX, no copy
    else:
        zero_copy = True
        o = jnp.asarray(r.o)
    print(f"backend {backend}: o {o.shape} {o.dtype}, max TV bound {float(np.max(wc.reference.to_host(r.tv_bound))):.3e}, "
          f"zero-copy in: {zero_copy}")
    return backend, o, r, zero_copy


if __name__ == "__main__":
    run()
