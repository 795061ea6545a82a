"""bench/plot_configs.py, the picture of bench/decode.py --configs: the table it reads from the rows
(each configuration's ratio at each main shape, the first row where the other axes' section repeats
one), its refusals, and that it draws the committed JSON without a GPU."""

import json
from pathlib import Path

import pytest

from helpers import load_script

_BENCH = Path(__file__).resolve().parents[1] / "bench"
plot_configs = load_script("bench/plot_configs.py")


def _row(config, B, hq, hkv, ratio, d=128, page=16, ctx=32768):
    return dict(config=config, batch=B, hq=hq, hkv=hkv, context=ctx, head_dim=d, page_size=page, us=100.0 * ratio,
                ratio_sdpa=ratio)


def _rows():
    main = [(8, 32, 8), (8, 28, 4)]
    rows = []
    for k, (B, hq, hkv) in enumerate(main):
        rows += [_row("torch_sdpa_fp16", B, hq, hkv, 1.0), _row("flashinfer_fp8_e4m3", B, hq, hkv, 0.7 + k / 10),
                 _row("tier_b_8", B, hq, hkv, 1.2 + k / 10), _row("gate_step", B, hq, hkv, 1.5 + k / 10)]
    # the other axes' section: SDPA and FlashInfer again at a main shape, then its own rows
    rows += [_row("torch_sdpa_fp16", 8, 28, 4, 1.0), _row("flashinfer_fp8_e4m3", 8, 28, 4, 0.5),
             _row("tier_b_8_G7", 8, 28, 4, 1.1), _row("tier_b_8_d64", 8, 32, 8, 1.13, d=64)]
    return rows


def test_table_is_the_rows_ratios():
    shapes, table, axes = plot_configs.config_table(_rows())
    assert shapes == [(8, 32, 8, 32768), (8, 28, 4, 32768)]
    assert list(table) == ["flashinfer_fp8_e4m3", "tier_b_8", "gate_step"]  # SDPA's own rows left out
    assert table["tier_b_8"] == pytest.approx([1.2, 1.3]) and table["gate_step"] == pytest.approx([1.5, 1.6])
    # the main section's row, not the axes' repeat (0.5)
    assert table["flashinfer_fp8_e4m3"] == pytest.approx([0.7, 0.8])
    assert axes == [("G7", 1.1), ("d64", 1.13)]


def test_refuses_rows_that_are_not_a_configs_run():
    rows = _rows()
    del rows[2]["ratio_sdpa"]
    with pytest.raises(ValueError, match=r"rows\[2\] has no ratio_sdpa"):
        plot_configs.config_table(rows)
    with pytest.raises(ValueError, match="no 'tier_b_8' row"):
        plot_configs.config_table([r for r in _rows() if r["config"] != "tier_b_8"])


def test_draws_the_committed_json(tmp_path):
    pytest.importorskip("matplotlib")
    rows = json.loads((_BENCH / "results" / "decode-configs.json").read_text())
    shapes, table, _ = plot_configs.config_table(rows)
    assert len(shapes) >= 1 and "tier_b_8" in table and "gate_step" in table
    out = tmp_path / "c.png"
    assert plot_configs.plot_configs(rows, out, gpu="a card") is True
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_names_the_missing_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        plot_configs.main([str(tmp_path / "none.json")])
    assert e.value.code == 2 and "json: no file" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"config": "tier_b_8"}]))
    with pytest.raises(SystemExit) as e:
        plot_configs.main([str(bad), "--out", str(tmp_path / "b.png")])
    assert e.value.code == 2 and "has no ratio_sdpa" in capsys.readouterr().err
    assert not (tmp_path / "b.png").exists()
