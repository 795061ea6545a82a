"""CI (no GPU): the named-barrier protocol of the extend kernel's wgmma path (``cuda/extend_tc.cu``),
and the profile summary of its tuning (``bench/lab/ncu_sass_summary.py``).

Two producer warpgroups (K and V) dequantize tile i into shared buffer i & 1 and the two warpgroups
of the rows read it; named barriers hand each buffer over (full: the producers arrive, the rows
wait; empty: the other way round).  A mistake there hangs the GPU for the whole device call
lost 590 s to a thread count), so it is checked here, on a model of PTX named barriers: ``bar.sync
id, n`` waits until n threads have arrived at barrier id, ``bar.arrive`` counts without waiting, and
the barrier starts over once n have arrived.  The model runs the kernel's sequence of barrier
operations, read from the source, under random interleavings of the four warpgroups and checks that
nothing deadlocks, that no barrier phase takes arrivals of the next one, and that every tile is
written before it is read and read before it is overwritten."""

import random
import re

import numpy as np
import pytest

from witcert_cupy import _cuda
from witcert_cupy._cuda import extend as _cuda_extend

SRC = (_cuda.kernel_dir() / "extend_tc.cu").read_text()
WG = 128  # threads per warpgroup


def _define(name):
    return _cuda_extend._source_define(name)


def _threads():
    return 32 * (_define("XT_WARPS") + _define("XT_PRODUCER_WARPS"))


def test_the_model_is_the_kernel_s_protocol():
    """The barrier calls the model replays, as the kernel source writes them (change both together)."""
    calls = re.findall(r"bar_(?:sync|arrive)\(XT_BAR_[^;]*;", SRC)
    assert calls == ["bar_sync(XT_BAR_EMPTY(pb), XT_THREADS);",  # producers, before writing tile i ≥ 2
                     "bar_arrive(XT_BAR_FULL(pb), XT_THREADS);",  # producers, after writing tile i
                     "bar_sync(XT_BAR_FULL(buf), XT_THREADS);",  # rows, before reading tile i
                     "bar_arrive(XT_BAR_EMPTY(buf), XT_THREADS);"]  # rows, after tile i (when i + 2 exists)
    assert "if (t0 >= ta + 2 * XT_TILE) bar_sync(XT_BAR_EMPTY(pb), XT_THREADS);" in SRC
    assert "if (t0 + 2 * XT_TILE < tb) bar_arrive(XT_BAR_EMPTY(buf), XT_THREADS);" in SRC
    assert "#define XT_BAR_FULL(b) (1 + (b))" in SRC and "#define XT_BAR_EMPTY(b) (3 + (b))" in SRC
    assert "#define XT_THREADS (XT_CONSUMER_THREADS + 32 * XT_PRODUCER_WARPS * XT_WGMMA)" in SRC
    assert _threads() == 512


def _programs(n, count, guard_empty=True, early_release=False):
    """Each warpgroup's barrier operations over n tiles: ('sync'|'arrive', barrier, count) and
    ('write'|'read', who, tile) markers; barrier ids as the kernel's XT_BAR_FULL/EMPTY."""
    full, empty = (lambda b: 1 + b), (lambda b: 3 + b)

    def producer(side):
        for i in range(n):
            if i >= 2:
                yield "sync", empty(i % 2), count
            yield "write", side, i
            yield "arrive", full(i % 2), count
        yield "sync", 0, _threads()  # cta_or at the end

    def rows(w):
        for i in range(n):
            yield "sync", full(i % 2), count
            if early_release and i + 2 < n:  # (a mistake: the buffer released before it is read)
                yield "arrive", empty(i % 2), count
            yield "read", w, i
            if (i + 2 < n or not guard_empty) and not early_release:
                yield "arrive", empty(i % 2), count
        yield "sync", 0, _threads()

    return [producer(0), producer(1), rows(0), rows(1)]


def _run(n, count, seed, guard_empty=True, early_release=False):
    rnd = random.Random(seed)
    progs = _programs(n, count, guard_empty, early_release)
    op = [next(p) for p in progs]
    done, blocked = [False] * 4, [False] * 4
    arrived, waiting, log = {}, {}, []
    while not all(done):
        ready = [k for k in range(4) if not done[k] and not blocked[k]]
        if not ready:
            return "deadlock", log
        k = rnd.choice(ready)
        kind, a, b = op[k]
        if kind in ("write", "read"):
            log.append((kind, a, b))
        else:
            arrived[a] = arrived.get(a, 0) + WG
            if kind == "sync":
                waiting.setdefault(a, []).append(k)
                blocked[k] = True
            if arrived[a] > b:
                return "phases mixed", log
            if arrived[a] == b:
                arrived[a] = 0
                for w in waiting.pop(a, []):
                    blocked[w] = False
        try:
            op[k] = next(progs[k])
        except StopIteration:
            done[k] = True
    if any(arrived.values()):
        return "arrivals left over", log
    return "ok", log


def _hazards(n, log):
    at = {e: j for j, e in enumerate(log)}
    bad = []
    for i in range(n):
        for side in (0, 1):
            for w in (0, 1):
                if at[("read", w, i)] < at[("write", side, i)]:
                    bad.append(("read before write", i))
                if i >= 2 and at[("write", side, i)] < at[("read", w, i - 2)]:
                    bad.append(("overwritten before read", i))
    return bad


@pytest.mark.parametrize("n", range(8))
def test_protocol_never_hangs_and_orders_every_tile(n):
    for seed in range(150):
        status, log = _run(n, _threads(), seed)
        assert status == "ok", (n, seed, status)
        assert not _hazards(n, log), (n, seed)


def test_the_model_catches_the_mistakes_it_is_for():
    """Negative controls: a thread count that leaves a side out (a hang, seen from the other
    side: 384 with both producer warpgroups at every barrier), a count that waits for threads that
    never come, an empty-barrier arrival nobody waits for, and a buffer released before it is read."""
    outcomes = {_run(4, 384, seed)[0] for seed in range(50)}
    assert outcomes & {"phases mixed", "deadlock"}, outcomes
    assert {_run(4, _threads() + WG, seed)[0] for seed in range(20)} == {"deadlock"}
    assert {_run(4, _threads(), seed, guard_empty=False)[0] for seed in range(20)} == {"arrivals left over"}
    # and a release before the read: some interleaving overwrites a tile still to be read
    runs = [_run(6, _threads(), seed, early_release=True) for seed in range(200)]
    assert all(status == "ok" for status, _ in runs)
    assert any(_hazards(6, log) for _, log in runs)


def test_sass_summary_splits_the_roles(tmp_path, capsys):
    """bench/lab/ncu_sass_summary.py (the extend kernel's profiles) attributes samples to setup, rows and
    producers at the setmaxnreg instructions."""
    import csv
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "lab" / "ncu_sass_summary.py"
    spec = importlib.util.spec_from_file_location("ncu_sass_summary", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_wait",
            "stall_barrier", "stall_wait (Not Issued)"]
    body = [["0x0", "LDC R1, c[0x0][0x28]", "5", "10", "5", "0", "0"],
            ["0x10", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xd0", "1", "20", "1", "0", "0"],
            ["0x20", "BAR.SYNC.DEFER_BLOCKING R8, 0x200", "30", "20", "0", "30", "0"],
            ["0x30", "EXIT", "0", "20", "0", "0", "0"],
            ["0x40", "USETMAXREG.DEALLOC.CTAPOOL 0x30", "2", "40", "2", "0", "0"],
            ["0x50", "@P0 LOP3.LUT R3, R4, UR32, R3, 0x96, !PT", "60", "400", "60", "0", "0"],
            ["0x60", "EXIT", "0", "40", "0", "0", "0"]]
    f = tmp_path / "x.csv"
    with open(f, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Kernel Name", "k"])
        w.writerow(head)
        w.writerows(body)
    assert mod.main([str(f), "--tiles", "10"]) == 0
    out = capsys.readouterr().out
    assert "== setup: 5 samples (5.1%), 1 warp-instructions per CTA-tile" in out
    assert "== rows: 31 samples (31.6%), 6 warp-instructions per CTA-tile" in out
    assert "stalls: barrier 30, wait 1" in out
    assert "== producers: 62 samples (63.3%), 48 warp-instructions per CTA-tile" in out
    assert "LOP3.LUT 40" in out


def test_cert_diff_counts_what_the_certified_launch_adds(tmp_path, capsys):
    """bench/lab/ncu_cert_diff.py (the profiles): per opcode, what the first launch of an export
    (certificate on) executes beyond the second (off), per tile, and the addresses whose counts differ;
    two launches of different kernels are refused."""
    import csv
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "lab" / "ncu_cert_diff.py"
    spec = importlib.util.spec_from_file_location("ncu_cert_diff", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
    on = [["0x0", "FFMA.FTZ R1, R2, R3, R4", "7", "400"], ["0x10", "MUFU.SQRT R5, R6", "3", "100"],
          ["0x20", "@P0 BRA 0x40", "1", "20"]]
    off = [["0x0", "FFMA.FTZ R1, R2, R3, R4", "6", "300"], ["0x10", "MUFU.SQRT R5, R6", "0", "0"],
           ["0x20", "@P0 BRA 0x40", "1", "20"]]

    def export(name, second):
        f = tmp_path / name
        with open(f, "w", newline="") as fh:
            w = csv.writer(fh)
            for rows in (on, second):
                w.writerow(["Kernel Name", "k"])
                w.writerow(head)
                w.writerows(rows)
        return str(f)

    mod.main([export("x.csv", off), "--tiles", "100"])
    out = capsys.readouterr().out
    assert "certified 520, uncertified 320, difference 200 (62.50% of the uncertified; 2.0 per tile)" in out
    table = {line.split()[0]: line.split()[1:] for line in out.split("\n\n")[1].splitlines()[1:]}
    assert table["FFMA"] == ["4.0", "3.0", "1.0", "7", "6"] and table["MUFU"] == ["1.0", "0.0", "1.0", "3", "0"]
    assert table["BRA"] == ["0.2", "0.2", "0.0", "1", "1"]
    listed = out.split("\n\n")[2].splitlines()[1:]  # the addresses whose counts differ
    assert [line.split()[:4] for line in listed] == [["0", "4.00", "3.00", "7"], ["1", "1.00", "0.00", "3"]]
    other = [["0x0", "FADD.FTZ R1, R2, R3", "1", "1"], *off[1:]]
    with pytest.raises(SystemExit, match="not the same kernel"):
        mod.main([export("y.csv", other), "--tiles", "100"])


def test_tile_images_follow_the_kernels_request_checks():
    """The launch layer's count of prepass images per request (``tile_images``) mirrors stage 1's
    checks (``request_pages`` in common.cuh, and more new tokens than the request holds): a request
    that stage 1 poisons, or that has no new token, gets none, so the workspace is never sized from a
    garbage length; the others get ceil(S / 64), laid out one after another."""
    nnz, ps = 40, 16
    qo = np.array([0, 5, 5, 9, 12, 20, 21, 22, 30], np.int32)
    ip = np.array([0, 10, 12, 12, 15, 41, 20, 25, 30], np.int32)  # request 4 ends past nnz, 5 runs backwards
    ll = np.array([16, 1, 7, 0, 16, 16, 2**30, 9], np.int32)  # request 3 has last 0, 6 has 2^30
    base, count = _cuda_extend.tile_images(qo, ip, ll, nnz, ps)
    S0 = 9 * 16 + 16
    assert count.tolist() == [-(-S0 // 64), 0, 0, 0, 0, 0, 0, -(-(4 * 16 + 9) // 64)]
    # request 1 has 17 tokens and no new one; request 2 has no page but 4 new tokens (poisoned)
    assert base.tolist() == [0, 3, 3, 3, 3, 3, 3, 3]
    assert base.dtype == count.dtype == np.int32


def test_splits_start_at_tile_images():
    """Stage 1 rounds each split up to whole 64-token tiles, so that every split's first token is an
    image's first token (the bulk copy cannot start mid-image)."""
    src = SRC
    assert "const int tpg = max(1, XT_TILE >> page_shift);" in src
    assert "const int pps = ((npg + num_splits - 1) / max(num_splits, 1) + tpg - 1) / tpg * tpg;" in src
    for shift in range(0, 9):  # page sizes 1 .. 256
        tpg = max(1, 64 >> shift)
        for npg in range(0, 70):
            for ns in (1, 2, 3, 5, 8, 64):
                pps = ((npg + ns - 1) // ns + tpg - 1) // tpg * tpg
                starts = [min(s * pps, npg) << shift for s in range(ns)]
                assert all(t % 64 == 0 or t == npg << shift for t in starts)
                assert min(ns * pps, npg) == npg  # the splits still cover every page
