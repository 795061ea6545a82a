"""bench/lab/timeline_i8.py, the clock64 timeline of the form-(I) decode: its probes still find
their anchors in cuda/decode_i8.cuh (each exactly once), every slot is written, and a changed kernel
is refused by name rather than instrumented wrongly (no GPU needed)."""

import re
from pathlib import Path

import pytest

from helpers import load_script

timeline = load_script("bench/lab/timeline_i8.py")
_ROOT = Path(__file__).resolve().parents[1]
SRC = (_ROOT / "cuda" / "decode_i8.cuh").read_text()


def test_every_probe_finds_its_anchor():
    out = timeline.instrument(SRC)
    assert sorted({int(k) for k in re.findall(r"WC_TL\((\d+),", out)}) == list(range(24))
    # the kernel's own lines are kept, in order: the probes only add lines
    import difflib

    ops = difflib.SequenceMatcher(None, SRC.splitlines(), out.splitlines(), autojunk=False).get_opcodes()
    assert all(tag in ("equal", "insert") for tag, *_ in ops)

@pytest.mark.parametrize("anchor", ["    __syncthreads();  // every warp's partial logits",
                                    "        cp_async_wait_group<1>();\n        __syncwarp();"])
def test_a_changed_kernel_is_refused_by_name(anchor):
    with pytest.raises(ValueError, match="occurs 0 times"):
        timeline.instrument(SRC.replace(anchor, "        // (moved)"))
