"""bench/lab/code_size.py: the instance parser refuses by name, the ELF reader counts a cubin's
functions, and (with nvcc, as in CI) a feature's code shows up in its instance's count."""

import shutil

import pytest

from helpers import load_script

cs = load_script("bench/lab/code_size.py")


@pytest.mark.parametrize("text", ["WC_I8_INST1B(128, 4, 2, false, false, true, 8)", "decode_i8.cuh:", "x.py:f"])
def test_bad_instances_are_refused(text):
    with pytest.raises(ValueError, match="HEADER:INSTANTIATION"):
        cs.parse_instance(text)


def test_not_an_elf_is_refused():
    with pytest.raises(ValueError, match="ELF64"):
        cs.text_sections(b"not a cubin at all")


def test_cli_names_what_is_missing(capsys):
    with pytest.raises(SystemExit):
        cs.main([])
    assert "--i8" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_outlier_instance_counts_more_code_than_tier_b():
    lines = dict(cs.i8_instances(128))
    counts = cs.compile_instances("decode_i8.cuh", [lines["Tier B"], lines["outlier pairs"]])
    assert len(counts) == 2
    plain = next(n for f, n in counts.items() if "ELb0ELi8E" in f)
    outl = next(n for f, n in counts.items() if "ELb1ELi8E" in f)
    assert 1000 < plain < outl


SASS = """
        Function : _Z1fv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   IMMA.16832.S8.S8 R4, R8.ROW, R12.COL, RZ ;
{body}
        /*{end:04x}*/              @P0 BRA 0x10 ;
        /*{stub:04x}*/                   EXIT ;
        /*{stub2:04x}*/                  BRA.DIV UR4, 0x20 ;
"""


def _sass(n):
    body = "\n".join(f"        /*{0x20 + 16 * i:04x}*/                   FADD R2, R2, R3 ;" for i in range(n))
    end = 0x20 + 16 * n
    return SASS.format(body=body, end=end, stub=end + 16, stub2=end + 32)


def test_loops_are_backward_branches_of_some_length_without_an_exit():
    # the body runs from the branch's target (0x10, the mma) to the branch: n + 2 instructions
    assert cs.loops(_sass(40)) == {"_Z1fv": [(0x10, 0x20 + 16 * 40, 42, 1)]}
    assert cs.loops(_sass(10)) == {"_Z1fv": []}  # (shorter than LOOP_MIN)
