"""The GPU backend: hand-written CUDA C (``cuda/``) loaded with CuPy ``RawModule``.

One module per step a call passes through, imports pointing down:

- :mod:`.build`: where the sources are, the contract's ``-D`` options, ``#include`` inlining, the
  cache key, :func:`kernel`;
- :mod:`.geometry`: split rules, block sizes, shared memory, residency;
- :mod:`.pdl`, :mod:`.launch`: programmatic dependent launch, and the bound launches of a step
  (merge, budget charge, query copy);
- :mod:`.write`: Philox, dither, the write kernels;
- :mod:`.device`: a pool's device state (counters, backing store, exact tier);
- :mod:`.decode`: :class:`DecodePlan`, the dispatch of a decode step to a kernel instance;
- :mod:`.extend`: the tensor-core extend kernel's plan;
- :mod:`.capture`: streams forked inside a CUDA-graph capture.

Nothing here imports CuPy at import time, nor any public module above it.  Tests and benchmarks
that change a rule patch the module that owns it (e.g. ``_cuda.geometry.V2_SPLIT_MIN_PAIRS``).
"""

from .build import defines, inline_source, kernel, kernel_dir, options, sources_hash  # noqa: F401
from .decode import DecodePlan  # noqa: F401
from .device import Fp16PoolDevice, PoolDevice  # noqa: F401
from .geometry import (  # noqa: F401
    F16_PIPES, MERGE_PREFETCH_BYTES, V2_GRID_CAP, V2_MAX_SPLITS, V2_MIN_TOKENS, V2_PLAIN_GROUP_SIZE,
    V2_SPLIT_MIN_G, V2_SPLIT_MIN_PAIRS, V2_THREADS, V2_TILE, V2_WAVE_MIN_TOKENS, f16_pipes, f16_smem_bytes,
    merge_smem_bytes, merge_smem_floats)
from .launch import bind_budget, bind_merge, launch_query  # noqa: F401
from .write import (  # noqa: F401
    INPUT_DTYPES, WRITE_THREADS, check_gpu_config, dequantize, dither, philox, quantize, write_kernel)
