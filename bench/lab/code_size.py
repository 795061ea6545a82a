"""SASS instructions per kernel instantiation, read from the cubin nvcc builds (each function's code is
an ELF section ``.text.<mangled name>``, 16 bytes an instruction on sm_90): what a template's
features cost in code.  At B = 1 each SM runs its few CTAs once, so a step fetches its kernel's code
cold, and a long instance stalls on instruction fetch (the outlier-pair instance of the form-(I)
kernel: docs/performance.md).  Needs nvcc only, not cuobjdump or a GPU.

    python3 bench/lab/code_size.py --i8 128                 # the form-(I) kernel's features at d = 128
    python3 bench/lab/code_size.py 'decode_i8.cuh:WC_I8_INST1B(128, 4, 2, false, false, true, 8)'
    python3 bench/lab/code_size.py --i8 128 --loops         # ... and each loop's body (needs cuobjdump)

``--loops`` lists every loop of each function (a backward branch over at least 32 instructions and
no exit: its body's instructions and mma among them): the form-(I) kernel's tile loop is what a tile costs a warp,
less its inner loops' further trips (the K products' loop runs twice a tile).

An instance is ``HEADER:INSTANTIATION`` (a header of ``cuda/`` and a line that instantiates templates
from it); ``--i8 D`` lists the form-(I) kernel's instances at head dim D, G = 4: Tier B, A, AB, page
contributions, the exact tier, both, outlier pairs, 16-bit dither.  One line per function.
"""

from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
INSTRUCTION_BYTES = 16  # sm_90: every instruction is 128 bits

# (label, D, G, tier code, page contributions, exact tier, outlier pairs, dither bits)
I8_FEATURES = (("Tier B", 4, 2, False, False, False, 8), ("Tier A", 4, 1, False, False, False, 8),
               ("Tier AB", 4, 3, False, False, False, 8), ("page contributions", 4, 2, True, False, False, 8),
               ("exact tier", 4, 2, False, True, False, 8), ("gated step", 4, 2, True, True, False, 8),
               ("outlier pairs", 4, 2, False, False, True, 8), ("16-bit dither", 4, 2, False, False, False, 16))


def text_sections(cubin: bytes) -> dict[str, int]:
    """``{function's mangled name: instructions}`` of an ELF64 cubin (its ``.text.*`` sections)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("not an ELF64 file")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]

    def name(off):
        end = cubin.index(b"\0", names_at + off)
        return cubin[names_at + off:end].decode()

    out = {}
    for h in heads:
        n = name(h[0])
        if n.startswith(".text."):
            out[n[len(".text."):]] = h[5] // INSTRUCTION_BYTES
    return out


def compile_cubin(header: str, lines: list[str], nvcc: str = "nvcc") -> bytes:
    """The cubin of ``lines`` (instantiations) after ``#include "header"``, built as the library's
    kernels are checked (sm_90, flush-to-zero, the contract's defines)."""
    from witcert_cupy._cuda import build

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "instances.cu", Path(tmp) / "instances.cubin"
        src.write_text(f'#include "{header}"\n' + "\n".join(lines) + "\n")
        cmd = [nvcc, "--cubin", "-arch=sm_90", "-ftz=true", *build.options(), "-I", str(ROOT / "cuda"), str(src),
               "-o", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"nvcc failed on {header}: {lines}\n{r.stderr[-2000:]}")
        return out.read_bytes()


def compile_instances(header: str, lines: list[str], nvcc: str = "nvcc") -> dict[str, int]:
    """Instructions per function of ``lines`` (see :func:`compile_cubin`)."""
    return text_sections(compile_cubin(header, lines, nvcc))


LOOP_MIN = 32  # (shorter backward branches are the compiler's small loops and retries, not phases)


def loops(sass: str) -> dict[str, list[tuple[int, int, int, int]]]:
    """``{function: [(start, end, instructions, mma), ...]}`` of ``cuobjdump -sass`` text: every
    backward branch over at least LOOP_MIN instructions and no EXIT, its body from the target to the
    branch."""
    out, fn, code = {}, None, []

    def close():
        if fn is not None:
            found = []
            for addr, text in code:
                m = re.search(r"\bBRA(?:\.\w+)* (0x[0-9a-f]+)", text)
                target = int(m.group(1), 16) if m else addr
                if target < addr:
                    body = [t for a, t in code if target <= a <= addr]
                    # (a warp-divergence stub after the exit branches back to its convergence point)
                    if len(body) >= LOOP_MIN and not any(re.search(r"\bEXIT\b", t) for t in body):
                        found.append((target, addr, len(body), sum(1 for t in body if re.search(r"\b[IH]?MMA\b", t))))
            out[fn] = sorted(found)

    for line in sass.splitlines():
        f = re.search(r"Function : (\S+)", line)
        if f:
            close()
            fn, code = f.group(1), []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and fn is not None:
            code.append((int(m.group(1), 16), m.group(2)))
    close()
    return out


def parse_instance(text: str) -> tuple[str, str]:
    header, sep, line = text.partition(":")
    if not sep or not header.endswith((".cuh", ".cu")) or not line.strip():
        raise ValueError(f"{text!r}: an instance is HEADER:INSTANTIATION, e.g. "
                         "'decode_i8.cuh:WC_I8_INST1B(128, 4, 2, false, false, true, 8)'")
    return header, line.strip()


def i8_instances(d: int) -> list[tuple[str, str]]:
    b = lambda v: "true" if v else "false"  # noqa: E731
    return [(label, f"WC_I8_INST1B({d}, {g}, {tier}, {b(pages)}, {b(exact)}, {b(outl)}, {bits})")
            for label, g, tier, pages, exact, outl, bits in I8_FEATURES]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("instances", nargs="*", help="HEADER:INSTANTIATION")
    ap.add_argument("--i8", type=int, choices=(64, 128, 256), help="the form-(I) kernel's features at this head dim")
    ap.add_argument("--loops", action="store_true", help="each function's loops and their bodies (needs cuobjdump)")
    args = ap.parse_args(argv)
    if not args.instances and args.i8 is None:
        ap.error("give instances or --i8 D")
    try:
        todo = [("", *parse_instance(t)) for t in args.instances]
    except ValueError as e:
        ap.error(f"instances: {e}")
    todo += [(label, "decode_i8.cuh", line) for label, line in (i8_instances(args.i8) if args.i8 else [])]
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("nvcc is not on PATH")
    cuobjdump = shutil.which("cuobjdump")
    if args.loops and cuobjdump is None:
        sys.exit("--loops: cuobjdump is not on PATH (the nvidia-cuda-cuobjdump wheel carries it)")
    for k, (label, header, line) in enumerate(todo, 1):
        print(f"[code_size] {k}/{len(todo)} {label or line}", file=sys.stderr, flush=True)
        cubin = compile_cubin(header, [line], nvcc)
        body = {}
        if args.loops:
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(cubin)
                f.flush()
                body = loops(subprocess.run([cuobjdump, "-sass", f.name], capture_output=True, text=True,
                                            check=True).stdout)
        for fn, n in text_sections(cubin).items():
            short = re.sub(r"^_Z\d+", "", fn)[:60]
            print(f"{n:7d} instructions  {label + ': ' if label else ''}{line}  ({short})")
            for a, b, m, mma in body.get(fn, []):
                print(f"          loop {a:#x}-{b:#x}: {m} instructions, {mma} mma")


if __name__ == "__main__":
    main()
