"""The one place a decode step's stage-1 kernel is chosen (witcert_cupy/_cuda/decode.py,
select_stage1): which kernel each pool and step gets, and what a forced choice refuses.  Pure
Python, so it runs without a GPU; tests/test_gpu.py checks the plans built from it."""

import pytest

from witcert_cupy._cuda import geometry as geo
from witcert_cupy._cuda.decode import select_stage1

BASE = dict(fp16_store=False, bits=8, head_dim=128, exact_tier=False, page_outputs=False, unroll=0,
            group_size=32, num_bands=0, outlier_channels=0, tier=0, certified=True)
TIER_A = 1  # certificate.tier_code's bit for a Tier-A term


@pytest.mark.parametrize("change, want", [
    ({}, ("i8", True)),                                           # the default: form (I), PLAIN
    ({"certified": False}, ("i8", True)), ({"page_size": 1}, ("i8", True)),
    ({"G": 2}, ("i8", True)), ({"G": 1}, ("v2", True)),           # a plain pool: form (I) from G = 2 with
    ({"G": 2, "pairs": 8, "tokens": 4096}, ("v2", True)),          # 16 pairs or 16k tokens, from G = 7
    ({"G": 4, "pairs": 16, "tokens": 4096}, ("i8", True)),         # at any size; small short steps: the
    ({"G": 4, "pairs": 15, "tokens": 4096}, ("v2", True)),         # staged tile
    ({"G": 4, "pairs": 8, "tokens": 16384}, ("i8", True)), ({"G": 4, "pairs": 8, "tokens": 16383}, ("v2", True)),
    ({"G": 7, "pairs": 4, "tokens": 4096}, ("i8", True)), ({"G": 6, "pairs": 4, "tokens": 4096}, ("v2", True)),
    ({"bits": 16}, ("i8", True)), ({"bits": 24}, ("v2", True)),   # 16-bit dither: the same from G = 3
    ({"bits": 16, "G": 3}, ("i8", True)), ({"bits": 16, "G": 2}, ("v2", True)),
    ({"bits": 16, "G": 3, "pairs": 16, "tokens": 4096}, ("i8", True)),
    ({"bits": 16, "G": 4, "pairs": 8, "tokens": 4096}, ("v2", True)),
    ({"bits": 16, "G": 7, "pairs": 4, "tokens": 4096}, ("i8", True)),
    ({"bits": 16, "tier": TIER_A | 2, "num_bands": 16, "G": 4}, ("i8", False)),  # and as at 8 bits with Tier A,
    ({"bits": 16, "tier": TIER_A, "num_bands": 16, "exact_tier": True}, ("i8", False)),  # the exact tier,
    ({"bits": 16, "outlier_channels": 4, "G": 4}, ("i8", False)), ({"bits": 16, "outlier_channels": 4, "G": 1}, ("i8", False)),
    ({"bits": 16, "page_outputs": True}, ("i8", False)),           # outlier pairs and page contributions
    ({"tier": TIER_A, "num_bands": 16}, ("i8", False)),           # Tier A/AB: form (I) over 8–64 bands,
    ({"tier": TIER_A | 2, "num_bands": 16, "pairs": 8, "G": 3, "tokens": 4096}, ("i8", False)),  # at d = 128
    ({"tier": TIER_A | 2, "num_bands": 16, "pairs": 8, "G": 2, "tokens": 4096}, ("v2", False)),  # from G = 3,
    ({"tier": TIER_A | 2, "num_bands": 16, "pairs": 16, "G": 2, "tokens": 4096}, ("i8", False)),  # at G = 2 as
    ({"tier": TIER_A | 2, "num_bands": 16, "pairs": 8, "G": 2, "tokens": 32768}, ("i8", False)),  # a plain pool
    ({"tier": TIER_A | 2, "num_bands": 16, "pairs": 8, "G": 1, "tokens": 32768}, ("v2", False)),
    ({"tier": TIER_A | 2, "num_bands": 16, "G": 7, "tokens": 4096}, ("i8", False)),
    ({"tier": TIER_A, "num_bands": 8, "head_dim": 64, "pairs": 2}, ("i8", False)),  # elsewhere at any size
    ({"tier": TIER_A | 2, "num_bands": 64, "head_dim": 256}, ("i8", False)),
    ({"tier": TIER_A, "num_bands": 4}, ("v2", False)),            # ... else the staged tile's general layout
    ({"tier": TIER_A, "num_bands": 16, "page_outputs": True}, ("v2", False)),
    ({"outlier_channels": 4}, ("i8", False)),                     # outlier pairs: form (I) up to 4 pairs,
    ({"outlier_channels": 4, "certified": False}, ("i8", False)),  # at every G and size,
    ({"outlier_channels": 2, "pairs": 2, "G": 4, "tokens": 512}, ("i8", False)),
    ({"outlier_channels": 8, "tier": TIER_A | 2, "num_bands": 16, "G": 4, "pairs": 1}, ("i8", False)),
    ({"outlier_channels": 4, "pairs": 1, "G": 1, "tokens": 4096}, ("i8", False)),
    ({"outlier_channels": 4, "pairs": 2, "G": 2, "tokens": 4096}, ("i8", False)),
    ({"outlier_channels": 4, "head_dim": 64}, ("i8", False)), ({"outlier_channels": 6, "head_dim": 256}, ("i8", False)),
    ({"outlier_channels": 10}, ("v2", False)),                    # ... beyond: the staged tile's general layout,
    ({"outlier_channels": 4, "exact_tier": True}, ("v2", False)),  # as over the exact tier
    ({"outlier_channels": 4, "page_outputs": True}, ("v2", False)),  # and with page contributions
    ({"outlier_channels": 4, "head_dim": 64, "exact_tier": True}, ("v1", False)),
    ({"exact_tier": True}, ("i8", False)),                        # every pool the gate accepts: form (I)
    ({"exact_tier": True, "pairs": 8, "tokens": 4096}, ("i8", False)),  # ... at any batch (measured at d = 128)
    ({"exact_tier": True, "pairs": 8, "G": 2, "tokens": 4096}, ("i8", False)),  # ... from 2 heads per kv head,
    ({"exact_tier": True, "G": 1}, ("v2", False)),                 # below by a plain pool's rule
    ({"exact_tier": True, "G": 1, "tokens": 4096, "pairs": 8}, ("v2", False)),
    ({"exact_tier": True, "page_size": 1}, ("v2", False)),        # ... on 16-token pages
    ({"exact_tier": True, "tier": TIER_A | 2, "num_bands": 16, "G": 7}, ("i8", False)),  # with Tier A: from
    ({"exact_tier": True, "tier": TIER_A | 2, "num_bands": 16, "G": 4, "pairs": 2, "tokens": 4096}, ("i8", False)),
    ({"exact_tier": True, "tier": TIER_A | 2, "num_bands": 16, "G": 2, "tokens": 4096}, ("i8", False)),  # G = 2
    ({"exact_tier": True, "tier": TIER_A | 2, "num_bands": 16, "G": 1, "tokens": 4096}, ("v2", False)),
    ({"exact_tier": True, "G": 4}, ("i8", False)),
    ({"exact_tier": True, "head_dim": 256, "pairs": 2}, ("i8", False)),
    ({"exact_tier": True, "head_dim": 256, "page_size": 1}, ("v1", False)),
    ({"exact_tier": True, "page_outputs": True}, ("i8", False)),  # ... and the gate's steps on it
    ({"exact_tier": True, "page_outputs": True, "head_dim": 64, "pairs": 2}, ("i8", False)),
    ({"exact_tier": True, "page_outputs": True, "head_dim": 256}, ("v1", False)),
    ({"exact_tier": True, "fp16_store": True, "bits": 0, "tier": TIER_A}, ("v1", False)),
    ({"exact_tier": True, "fp16_store": True, "bits": 0, "certified": False}, ("v1", False)),
    ({"page_outputs": True}, ("i8", False)),                      # what the gate ranks by: form (I)
    ({"page_outputs": True, "pairs": 4, "G": 1, "tokens": 512}, ("i8", False)),  # at any size
    ({"page_outputs": True, "page_size": 1}, ("v2", False)),      # ... on 16-token pages
    ({"page_outputs": True, "head_dim": 64}, ("i8", False)), ({"page_outputs": True, "head_dim": 256}, ("v1", False)),
    ({"page_outputs": True, "exact_tier": True, "page_size": 1}, ("v2", False)),
    ({"page_outputs": True, "page_size": 64}, ("v1", False)),     # pages longer than a tile
    ({"page_outputs": True, "certified": False}, ("v1", False)),
    ({"head_dim": 64}, ("i8", True)), ({"head_dim": 256}, ("i8", True)),  # other head dims: form (I)
    ({"head_dim": 64, "pairs": 2, "G": 1, "tokens": 64}, ("i8", True)),
    ({"head_dim": 96}, ("v1", True)), ({"head_dim": 64, "bits": 16}, ("i8", True)),
    ({"head_dim": 64, "bits": 24}, ("v1", True)),
    ({"unroll": 4}, ("v1", True)),
    ({"group_size": 64}, ("v2", False)), ({"group_size": 16}, ("v2", False)),
    ({"fp16_store": True, "bits": 0, "certified": False}, ("f16", False)),
    ({"fp16_store": True, "bits": 0, "tier": TIER_A}, ("f16", False)),  # a certified fp16 store
    ({"fp16_store": True, "bits": 0, "tier": TIER_A, "page_outputs": True}, ("v1", False)),
    ({"fp16_store": True, "bits": 0, "tier": TIER_A, "head_dim": 64}, ("v1", False)),
])
def test_the_library_s_choice(change, want):
    assert select_stage1(**{**BASE, **change}) == want


def test_a_forced_kernel_is_used_where_it_applies_and_refused_where_not():
    assert select_stage1(**{**BASE, "tier": TIER_A}, requested="v2") == ("v2", False)
    assert select_stage1(**BASE, requested="v1") == ("v1", True)
    assert select_stage1(**BASE, requested="v2") == ("v2", True)
    assert select_stage1(**BASE, requested="i8") == ("i8", True)
    assert select_stage1(**{**BASE, "outlier_channels": 8}, requested="i8") == ("i8", False)
    assert select_stage1(**{**BASE, "bits": 16}, requested="v2") == ("v2", True)
    for change in ({"bits": 24}, {"tier": TIER_A}, {"outlier_channels": 10}, {"outlier_channels": 4, "exact_tier": True},
                   {"outlier_channels": 4, "page_outputs": True}, {"group_size": 64},
                   {"exact_tier": True, "page_size": 64},
                   {"page_outputs": True, "page_size": 1}, {"page_outputs": True, "certified": False},
                   {"page_outputs": True, "head_dim": 256}, {"head_dim": 96}, {"unroll": 4}):
        with pytest.raises(ValueError, match="decode_stage1_i8 serves"):
            select_stage1(**{**BASE, **change}, requested="i8")
    with pytest.raises(ValueError, match="decode_stage1_v2 serves"):
        select_stage1(**{**BASE, "page_outputs": True, "page_size": 64}, requested="v2")
    with pytest.raises(ValueError, match="decode_stage1_v2 serves"):
        select_stage1(**{**BASE, "fp16_store": True, "bits": 0, "certified": False}, requested="v2")
    with pytest.raises(ValueError, match="decode_stage1_f16 serves"):
        select_stage1(**{**BASE, "exact_tier": True, "fp16_store": True, "bits": 0}, requested="f16")
    with pytest.raises(ValueError, match="decode_stage1_f16 serves"):
        select_stage1(**BASE, requested="f16")
    with pytest.raises(ValueError, match="stage1 must be"):
        select_stage1(**BASE, requested="v3")


# geometry.i8_serves against the measurements it rests on (their µs in the tables of
# docs/performance.md § "Decode: the form-(I) kernel", H100, both kernels forced in one process by
# bench/lab/kernel_pair.py): Tier B or no
# certificate at head dim 128, where both kernels serve, each case expecting the kernel that measured
# faster.  (The two measured shapes the rule does not follow, G = 1 at 8 bits and G = 2 at 16 bits
# below 16k tokens, are in those tables.)  (what was measured, G, (request, kv head) pairs, tokens per
# request, form (I) faster)
MEASURED = [
    # 8-bit dither
    ("8 bits, B=8, 8/8, 32k", 1, 64, 32768, False),
    ("8 bits, B=8, 16/8, 32k", 2, 64, 32768, True),
    ("8 bits, B=8, 16/8, 16k", 2, 64, 16384, True),
    ("8 bits, B=8, 16/8, 4k", 2, 64, 4096, True),
    ("8 bits, B=8, 24/8, 4k", 3, 64, 4096, True),
    ("8 bits, B=8, 32/8, 4k", 4, 64, 4096, True),
    ("8 bits, B=8, 48/8, 4k", 6, 64, 4096, True),
    ("8 bits, B=8, 32/8, 8k", 4, 64, 8192, True),
    ("8 bits, B=4, 32/8, 4k", 4, 32, 4096, True),
    ("8 bits, B=3, 32/8, 4k", 4, 24, 4096, True),
    ("8 bits, B=2, 16/8, 4k", 2, 16, 4096, True),
    ("8 bits, B=2, 24/8, 4k", 3, 16, 4096, True),
    ("8 bits, B=2, 32/8, 4k", 4, 16, 4096, True),
    ("8 bits, B=2, 32/8, 8k", 4, 16, 8192, True),
    ("8 bits, B=1, 32/8, 4k", 4, 8, 4096, False),
    ("8 bits, B=1, 32/8, 8k", 4, 8, 8192, False),
    ("8 bits, B=1, 32/8, 32k", 4, 8, 32768, True),
    ("8 bits, B=1, 24/8, 4k", 3, 8, 4096, False),
    ("8 bits, B=1, 16/8, 32k", 2, 8, 32768, True),
    ("8 bits, B=1, 64/8, 4k", 8, 8, 4096, True),
    ("8 bits, B=1, 28/4, 4k", 7, 4, 4096, True),
    # 16-bit dither
    ("16 bits, B=8, 16/8, 32k", 2, 64, 32768, False),
    ("16 bits, B=8, 16/8, 16k", 2, 64, 16384, False),
    ("16 bits, B=8, 24/8, 32k", 3, 64, 32768, True),
    ("16 bits, B=8, 32/8, 32k", 4, 64, 32768, True),
    ("16 bits, B=8, 8/8, 4k", 1, 64, 4096, False),
    ("16 bits, B=8, 24/8, 4k", 3, 64, 4096, True),
    ("16 bits, B=8, 32/8, 4k", 4, 64, 4096, True),
    ("16 bits, B=8, 40/8, 4k", 5, 64, 4096, True),
    ("16 bits, B=8, 48/8, 4k", 6, 64, 4096, True),
    ("16 bits, B=2, 32/8, 32k", 4, 16, 32768, True),
    ("16 bits, B=2, 24/8, 4k", 3, 16, 4096, True),
    ("16 bits, B=2, 32/8, 4k", 4, 16, 4096, True),
    ("16 bits, B=4, 28/4, 4k", 7, 16, 4096, True),
    ("16 bits, B=1, 32/8, 4k", 4, 8, 4096, False),
    ("16 bits, B=1, 32/8, 32k", 4, 8, 32768, True),
]


@pytest.mark.parametrize("what, G, pairs, tokens, faster", MEASURED, ids=[m[0] for m in MEASURED])
def test_tier_b_takes_the_kernel_that_measured_faster(what, G, pairs, tokens, faster):
    assert geo.i8_serves(G, pairs, tokens, bits=int(what.split()[0])) is faster


# ... and with an exact tier, a Tier-A term or outlier pairs, where the staged tile runs its general
# layout (the same tables, the same tool, 8-bit dither).  (what was measured, G, pairs, tokens,
# exact tier, Tier-A term, outlier pairs, form (I) faster)
MEASURED_FEATURES = [
    ("outliers, B=8, 24/8, 4k", 3, 64, 4096, False, False, True, True),
    ("outliers, B=8, 16/8, 32k", 2, 64, 32768, False, False, True, True),
    ("outliers, B=1, 24/8, 32k", 3, 8, 32768, False, False, True, True),
    ("outliers, B=1, 16/8, 4k", 2, 8, 4096, False, False, True, True),
    ("outliers, B=1, 8/8, 4k", 1, 8, 4096, False, False, True, True),
    ("exact tier, B=8, 24/8, 4k", 3, 64, 4096, True, False, False, True),
    ("exact tier, B=8, 16/8, 32k", 2, 64, 32768, True, False, False, True),
    ("exact tier, B=8, 8/8, 32k", 1, 64, 32768, True, False, False, False),
    ("exact tier, B=1, 24/8, 4k", 3, 8, 4096, True, False, False, True),
    ("exact tier, B=1, 16/8, 4k", 2, 8, 4096, True, False, False, True),
    ("Tier AB, B=8, 24/8, 4k", 3, 64, 4096, False, True, False, True),
    ("Tier AB, B=2, 24/8, 4k", 3, 16, 4096, False, True, False, True),
    ("Tier AB, B=1, 24/8, 4k", 3, 8, 4096, False, True, False, True),
    ("Tier AB, B=8, 16/8, 32k", 2, 64, 32768, False, True, False, True),
    ("Tier AB, B=8, 16/8, 4k", 2, 64, 4096, False, True, False, True),
]


@pytest.mark.parametrize("what, G, pairs, tokens, exact, tier_a, outliers, faster", MEASURED_FEATURES,
                         ids=[m[0] for m in MEASURED_FEATURES])
def test_the_other_pools_take_the_kernel_that_measured_faster(what, G, pairs, tokens, exact, tier_a, outliers, faster):
    assert geo.i8_serves(G, pairs, tokens, exact_tier=exact, tier_a=tier_a, outliers=outliers) is faster


def test_every_form_i_dither_width_has_a_plain_rule():
    from witcert_cupy import _contract as C

    assert set(geo.I8_PLAIN_MIN_G) == set(C.FORM_I_DITHER_BITS)
