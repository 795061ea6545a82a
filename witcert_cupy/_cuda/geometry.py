"""Launch geometry and split rules of the decode kernels: split counts, block sizes, shared memory,
resident CTAs.  The constants mirror the kernel sources (tests/test_cuda_compile.py checks them)."""

from __future__ import annotations

import functools

# decode_stage1_v2's default split count where the 64-split rule leaves most of one wave of resident
# CTAs empty (small batch, few kv heads; docs/performance.md): at most V2_MAX_SPLITS
# (decode_merge's shared-memory prefetch holds 128), within one wave; up to V2_GRID_CAP CTAs per SM,
# in steps of 64 splits, for splits of at least V2_MIN_TOKENS tokens; the whole wave for splits of at
# least V2_WAVE_MIN_TOKENS.  Measured at batch 1: 28/4, 128 splits (4 CTAs per SM)
# against 64 took 40.9 against 46.5 µs at 16k, 61.7 against 77.1 at 32k, 186 against 260 at 128k; 16/2
# at 32k 51.4 against 76.7; at 8k the two came within 2% (96 and 112 splits: 8–14% slower).  32/8,
# whose 64 splits already make 4 CTAs per SM: the whole wave (96–99 splits) against 64 took 51.0
# against 46.8 µs at 16k, 77.6 against 78.8 at 32k, 132.6 against 142.3 at 64k, 251.5 against 271.5 at
# 128k (batch 2, 28/4, 128k: 323.8 against 346.7); two waves (112–128 splits) were 10–35% slower, 66
# splits 1% slower than 64.  Splits of one 32-token tile count (V2_MIN_TOKENS of 128 lost): with the step's set-up, epilogue and merge shortened, 128 splits against 64 took
# 16.3 against 17.6 µs at 28/4 4k, 21.8 against 24.9 at 8k, 15.3 against 17.8 at 16/2 4k, 19.5
# against 25.6 at 16/2 8k; batch 2 (512 CTAs at 64 splits) keeps 64, where 128 took 26.8 against 20.8.
V2_MAX_SPLITS = 128
V2_GRID_CAP = 4
V2_MIN_TOKENS = 32
V2_WAVE_MIN_TOKENS = 512

# tokens per tile of decode_stage1_v2: cuda/decode_v2.cu's V2_TILE (tests/test_cuda_compile.py checks
# the two agree)
V2_TILE = 32
# threads per CTA of decode_stage1_v2: cuda/decode_v2.cu's V2_THREADS (tests/test_cuda_compile.py
# checks the two agree)
V2_THREADS = 64
# the scale group of decode_stage1_v2's PLAIN instantiation: 2^V2_PLAIN_GS_SHIFT of cuda/decode_v2.cu
# (the same test checks it)
V2_PLAIN_GROUP_SIZE = 32
# PLAIN's warps split each row's channels (SPLIT, cuda/decode_v2.cu) from this many (request, kv head)
# pairs per step, and the sides below it.  Measured (same process as the sides): at B = 8
# and 32 (32 to 256 pairs) the split was 5.3–7.5% faster certified and 7.8–11.8% uncertified; at
# B = 1 (4 and 8 pairs) it ranged from 2.6% faster (28/4, 4k) to 3.7% slower (32/8, 32k).
V2_SPLIT_MIN_PAIRS = 16
# Below that, the split also serves a step of at least V2_SPLIT_MIN_G query heads per kv head whose
# splits hold one 32-token tile each (the mean request's tokens from the page table's shape).  There
# the K warp's phase A, with its G dot products, is the sides' chain.  Measured at batch 1 and 4k
# tokens, one process, split against sides: G = 5 13.6 vs 13.8 µs, 6 14.0 vs 14.3,
# 7 14.8 vs 15.1, 8 15.3 vs 15.7, 6 at 48/8 18.2 vs 18.3; batch 2, 28/4, 4k 19.2 vs 19.5; but G = 3
# 12.5 vs 12.3 and G = 4 16.4 vs 16.1.  With more tiles per split the split lost at G = 6 and 8
# (32k: 45.3 vs 44.8, 53.2 vs 52.2) though not at G = 7 (0.2–1.5% faster from 8k to 32k, and at
# batch 2, 4k), which the rule leaves on the sides.  The rule against the sides in one process
# the rule against the sides: 28/4 14.8 vs 15.0 µs, 32/4 15.2 vs 15.6, 24/4 13.9 vs 14.3; the same bits elsewhere.
V2_SPLIT_MIN_G = 5


# The stage-1 kernels' logit dot products as summation orders, (channels per chain, how the chains'
# sums combine): certificate.sum_height gives the height the certificate's evaluation term γ_t is
# computed for (docs/certificate.md §10.1), and the CPU twin can run the same order (SPEC §9).
# tests/test_cuda_compile.py checks each constant against the source:
#   decode_stage1 (decode.cu): a chain of GENERAL_VEC channels per lane (its VEC), the row's lanes
#     summed by butterfly (a pairwise tree);
#   decode_stage1_v2 (decode_v2.cu): V2_CHUNK-channel chains added in chunk order in its general
#     layout, in PLAIN where V2Tuning::blocked_dot (G <= V2_BLOCKED_DOT_MAX_G) and in SPLIT (its
#     first warp's four chains, then the other warp's four: the same order); one chain otherwise;
#   decode_stage1_f16: each half row a chain (F16_HALF channels), the halves added.
GENERAL_VEC = 8
V2_CHUNK = 16
V2_BLOCKED_DOT_MAX_G = 6
F16_HALF = 64


def stage1_dot_order(kernel: str, head_dim: int, G: int, *, split: bool, plain: bool = True) -> tuple:
    """``(chunk, combine)``: how stage-1 kernel ``kernel`` ('v1', 'v2', 'f16' or 'i8') sums the
    logit's dot product (:func:`witcert_cupy.certificate.sum_height`); ``split`` and ``plain``: the
    staged-tile instantiation's layout.  ``decode_stage1_i8`` forms it by exact integer products:
    ``certificate.FORM_I_ORDER``."""
    if kernel == "i8":
        from ..certificate import FORM_I_ORDER

        return FORM_I_ORDER
    if kernel == "v1":
        return GENERAL_VEC, "tree"
    if kernel == "f16":
        return F16_HALF, "tree"
    if split or not plain or G <= V2_BLOCKED_DOT_MAX_G:
        return V2_CHUNK, "chain"
    return head_dim, "chain"


def stage1_dot_height(kernel: str, head_dim: int, G: int, *, split: bool, plain: bool = True) -> int | None:
    """The summation height of :func:`stage1_dot_order`, what the kernel's evaluation term is for
    (None for the form-(I) kernel, which has no fp32 dot product)."""
    from ..certificate import sum_height

    if kernel == "i8":
        return None

    return sum_height(head_dim, *stage1_dot_order(kernel, head_dim, G, split=split, plain=plain))


# decode_stage1_i8 (cuda/decode_i8.cuh): one warp per I8_WARP_CH channels (the kernel's I8_WARP_CH:
# tests/test_cuda_compile.py checks the two agree), head dims I8_HEAD_DIMS; page contributions (up
# to I8_PAGES_MAX_D: a warp's certified blocks are whole pages) and the exact tier (a tier row is the
# slot's low four bits) on pools of I8_PAGE_SIZE-token pages, the kernel's one page-size check for
# both; its tokens per tile, I8_TILE (the kernel's; tests/test_cuda_compile.py checks it); its default
# split count (device.i8_num_splits) fills one wave of its resident CTAs with splits of whole tiles,
# at most I8_MAX_SPLITS (decode_merge's prefetch holds 128)
I8_WARP_CH = 64
I8_HEAD_DIMS = (64, 128, 256)
I8_PAGE_SIZE = 16
I8_PAGES_MAX_D = 128
# its Tier-A term stages each token's witness row in 16-byte pieces: 8 to 64 bands, a multiple of 8
I8_TIER_A_BANDS = (8, 16, 24, 32, 40, 48, 56, 64)
I8_MAX_SPLITS = 128
I8_TILE = 32
# the most outlier channels (2 per pair) decode_stage1_i8 serves: I8_OUTL_MAX of
# cuda/decode_i8_geometry.cuh (tests/test_cuda_compile.py checks the two agree)
I8_OUTL_MAX = 8
# ... and the library picks it where it beat the staged tile: its cost per kv token does not depend on
# G (its mma rows are 8 heads), the staged tile's grows with G, and each of its splits pays a set-up
# (the query split, per CTA) that only short contexts at small batch fail to amortize.  A plain pool
# (Tier B or no certificate; no exact tier, Tier-A term or outlier pairs; and the others below their
# thresholds, further down) takes it from I8_WIDE_G heads per kv head at any batch and context, and
# from I8_PLAIN_MIN_G[bits] with at least I8_MIN_PAIRS (request, kv head) pairs or I8_LONG_TOKENS
# tokens per request.  The measurements behind every threshold (both kernels forced in one process,
# bench/lab/kernel_pair.py) are the tables of docs/performance.md § "Decode: the form-(I) kernel";
# tests/test_dispatch.py holds this rule to each of them.
I8_MIN_PAIRS = 16
I8_PLAIN_MIN_G = {8: 2, 16: 3}  # a plain pool, by dither bits: from here with I8_MIN_PAIRS or I8_LONG_TOKENS
I8_WIDE_G = 7  # from here at any batch and context
I8_LONG_TOKENS = 16384
# With an exact tier, a Tier-A term or outlier pairs the staged tile runs its general layout (its
# per-token dequantization and fp32 dot products), which form (I) beats further down in G: outlier
# pairs at every G, an exact tier from I8_EXACT_MIN_G (under any certificate: the gate always
# certifies), a Tier-A term from I8_TIER_A_MIN_G; below those a plain pool's rule (the same tables).
I8_EXACT_MIN_G = 2  # with an exact tier (any tier of certificate): from here at any batch and context
I8_TIER_A_MIN_G = 3  # with a Tier-A term: from here at any batch and context


def i8_threads(head_dim):
    """Threads per CTA of decode_stage1_i8 at ``head_dim``: a warp per 64 channels."""
    return 32 * (head_dim // I8_WARP_CH)


def i8_head_rows(heads, tier_a, exact, outliers):
    """Head rows of decode_stage1_i8's partial logits and exact-tier sums (I8_HEAD_ROWS of
    cuda/decode_i8_geometry.cuh): the ``heads`` (G) where shared memory sets its CTAs per SM (a
    Tier-A term beside the exact tier or outlier pairs), else the mma's 8."""
    return heads if tier_a and (exact or outliers) else 8


def i8_qd2_words(tier_a, outliers):
    """32-bit words per (group, head row, lane quad) of decode_stage1_i8's second query-digit
    fragment (I8_QD2_WORDS of cuda/decode_i8_geometry.cuh): {a1, a2} whole (4) where shared memory has
    a fixed size, a2 alone (2) beside a Tier-A term or outlier pairs."""
    return 2 if tier_a or outliers else 4


def i8_smem_bytes(head_dim, exact=False, num_bands=0, outlier_channels=0, bits=8, heads=8):
    """decode_stage1_i8's dynamic shared memory in bytes at ``head_dim`` and ``heads`` (G) query
    heads per kv head: ``i8_smem_total`` of cuda/decode_i8_geometry.cuh (the kernel traps when
    launched with less).  Per warp two buffers of staged K and V rows (64 bytes each, 32 tokens) and
    one tile of dither fields per side, K scales of every group and V scales of its two per token and
    buffer, and the partial logits of R head rows per buffer (``i8_head_rows``); per head row of the
    mma (8) and group the constants (16 bytes) and the query digits (32 bytes; 24 with a Tier-A term
    or outlier pairs); with the exact tier,
    a partial Σ|q||k| per warp, head row and token; with
    Tier A, the tile's staged witness rows per buffer (each by the warp certifying its token), and
    per head the band coefficients and the evaluation term's per-group coefficients; with
    ``outlier_channels`` (outlier pairs) their channels, each head's query on them and per warp,
    buffer and token the K and V rows' stored values (``I8_OUTL_SMEM(D, NP2)``).  At ``bits = 16`` two
    tiles of dither fields per side."""
    if not 1 <= heads <= 8:
        raise ValueError(f"heads: {heads} query heads per kv head; decode_stage1_i8 serves 1 to 8")
    nw, ng = head_dim // I8_WARP_CH, head_dim // 32
    rows = i8_head_rows(heads, num_bands > 0, exact, outlier_channels > 0)
    per_warp = 2 * 2 * 32 * 64 + bits // 4 * 32 * 64 + 2 * 32 * ng * 2 + 2 * 32 * 2 * 2 + 2 * rows * 32 * 4
    qd2 = 4 * i8_qd2_words(num_bands > 0, outlier_channels > 0)
    base = nw * per_warp + 8 * ng * (16 + 4 * 16 + 4 * qd2)
    tier_a = 2 * 32 * num_bands * 2 + 8 * num_bands * 4 + 8 * ng * 4 if num_bands else 0
    outl = 4 * I8_OUTL_MAX + 32 * outlier_channels + nw * 2 * 32 * 2 * outlier_channels * 2 if outlier_channels else 0
    return base + (nw * rows * 32 * 4 if exact else 0) + tier_a + outl


def i8_serves(G, pairs, tokens, exact_tier=False, tier_a=False, outliers=False, bits=8):
    """Whether the form-(I) kernel is the library's choice for a step it can serve: ``G`` query heads
    per kv head, ``pairs`` (request, kv head) pairs, ``tokens`` the mean request's tokens,
    ``exact_tier`` a pool with an exact tier, ``tier_a`` a certificate with a Tier-A term, ``outliers``
    a pool with outlier pairs, ``bits`` the dither's width (8 or 16)."""
    if outliers:  # the staged tile's general layout: slower at every G measured
        return True
    if exact_tier and G >= I8_EXACT_MIN_G:
        return True
    if tier_a and G >= I8_TIER_A_MIN_G:  # (with an exact tier the test above already holds from G = 2)
        return True
    return G >= I8_WIDE_G or (G >= I8_PLAIN_MIN_G[bits] and (pairs >= I8_MIN_PAIRS or tokens >= I8_LONG_TOKENS))

# one-warp pipelines (splits) per CTA of decode_stage1_f16: F16_PIPES of
# cuda/decode_f16_geometry.cuh (tests/test_cuda_compile.py checks the two agree)
F16_PIPES = 4


def f16_pipes():
    """Splits per CTA of decode_stage1_f16."""
    return F16_PIPES


def f16_smem_bytes(G, num_bands, tier_a):
    """decode_stage1_f16's dynamic shared memory in bytes (cuda/decode_f16_geometry.cuh,
    ``f16_smem_bytes``): the query, each warp's K and V tiles and probabilities, and with a Tier-A
    certificate each pipeline's 32 witness rows (fp16) and the heads' band norms (fp32)."""
    per_warp = 32 * ((128 // 2 + 4) + 128 // 2) * 4 + G * 32 * 4
    return G * 128 * 4 + F16_PIPES * per_warp + (F16_PIPES * 32 * num_bands * 2 + G * num_bands * 4 if tier_a else 0)


@functools.lru_cache(maxsize=None)
def _resident_ctas(func, block, smem=0):
    """CTAs of ``func`` resident per SM at ``block`` threads and ``smem`` bytes of dynamic shared
    memory (with its registers and static shared memory)."""
    import cupy as cp

    return int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(func.kernel.ptr, block, smem))


def merge_smem_floats(ns):
    """decode_merge's dynamic shared memory in floats (cuda/decode.cu, ``merge_smem_floats``): three
    arrays of ns rounded up to 4, and 4 floats of slack."""
    return 3 * ((ns + 3) & ~3) + 4


# decode_merge copies a cell's o_part rows into shared memory first when they fit in this many bytes
# with its statistics (cuda/decode.cu): 128 splits of 128 channels take 66 KB
MERGE_PREFETCH_BYTES = 96 * 1024


def merge_smem_bytes(ns, d, prefetch=None):
    """``(bytes, pf)``: decode_merge's dynamic shared memory and whether it prefetches the o_part
    rows (``ns·d`` floats after the statistics; ``d % 4 == 0`` and within MERGE_PREFETCH_BYTES
    unless ``prefetch`` forces it)."""
    pf = d % 4 == 0 and 4 * (merge_smem_floats(ns) + ns * d) <= MERGE_PREFETCH_BYTES
    if prefetch is not None:
        pf = bool(prefetch) and d % 4 == 0
    return 4 * (merge_smem_floats(ns) + (ns * d if pf else 0)), pf
