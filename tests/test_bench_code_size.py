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
