"""Issue 8: the NumPy/CuPy Llama decoder of ``python/llama_numpy.py`` on the certified cache, with a
tiny random checkpoint built here (GQA, head dim 64 and 128).  CPU in CI; the same bodies on the
GPU with ``-m gpu``; the transformers cross-check where torch and transformers are installed."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("safetensors")
spec = importlib.util.spec_from_file_location("llama_numpy", ROOT / "python" / "llama_numpy.py")
llama = importlib.util.module_from_spec(spec)
sys.modules["llama_numpy"] = llama  # dataclasses look their module up
spec.loader.exec_module(llama)

BACKENDS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
SHAPES = {"d64_g4": dict(hidden=512, heads=8, kv_heads=2, head_dim=64),
          "d128_g2": dict(hidden=512, heads=4, kv_heads=2, head_dim=128)}


@pytest.fixture(scope="module", params=sorted(SHAPES))
def ckpt(request, tmp_path_factory):
    return llama.make_tiny_checkpoint(tmp_path_factory.mktemp(request.param), layers=2, **SHAPES[request.param])


def _tokens(path, n, seed=0):
    cfg = llama.LlamaConfig.from_dir(path)
    return np.random.default_rng(seed).integers(0, cfg.vocab_size, n).tolist()


def test_checkpoint_round_trip(ckpt):
    from safetensors.numpy import load_file

    cfg = llama.LlamaConfig.from_dir(ckpt)
    w = llama.load_weights(ckpt)
    raw = load_file(str(ckpt / "model.safetensors"))
    assert set(w) == set(raw) and len(w) == 3 + 9 * cfg.num_hidden_layers
    assert all(np.array_equal(w[k], raw[k].astype(np.float32)) for k in raw)
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0 and cfg.head_dim in (64, 128)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exact_cache_matches_float64_forward_and_int8_is_metered(ckpt, backend):
    tokens = _tokens(ckpt, 40)
    r = llama.teacher_forced(ckpt, tokens, 24, backend=backend)
    ref = llama.reference_logits(llama.LlamaConfig.from_dir(ckpt), llama.load_weights(ckpt), tokens)
    # the fp16 cache differs from float64 only by fp16 K/V and fp32 arithmetic
    err16 = np.abs(r["logits_fp16"] - ref).max() / np.abs(ref).max()
    err8 = np.abs(r["logits_int8"] - ref).max() / np.abs(ref).max()
    assert err16 < 5e-3, err16
    assert err16 < err8  # the INT8 cache is lossier, and ...
    dec = slice(23, 40)
    assert np.all(r["kl"] >= -1e-9) and np.all(np.isfinite(r["kl"]))
    assert np.all(r["max_tv_bound"][dec] > 0)  # ... its certificate says so at every decode step
    assert r["telemetry"]["cells"] == 16 * llama.LlamaConfig.from_dir(ckpt).num_hidden_layers * \
        llama.LlamaConfig.from_dir(ckpt).num_attention_heads
    assert r["int8_bytes_per_token"] < r["fp16_bytes_per_token"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_gate_restores_agreement_with_the_exact_cache(ckpt, backend):
    tokens = _tokens(ckpt, 36, seed=1)
    raw = llama.teacher_forced(ckpt, tokens, 20, backend=backend)
    gated = llama.teacher_forced(ckpt, tokens, 20, backend=backend, gate=True, tau=0.2)
    dec = slice(20, 36)  # positions decoded one at a time (through the gate)
    assert gated["pages_repaired"] > 0
    assert np.all(gated["max_tv_bound"][dec] <= 0.2)
    assert gated["kl"][dec].mean() < raw["kl"][dec].mean()


def test_transformers_cross_check(ckpt):
    """Our float64 forward (which the exact-cache decoder matches above) against transformers'
    LlamaForCausalLM on the same checkpoint: the torch baseline."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.LlamaForCausalLM.from_pretrained(str(ckpt), torch_dtype=torch.float32).eval()
    tokens = _tokens(ckpt, 32)
    with torch.no_grad():
        theirs = model(torch.tensor([tokens])).logits[0].double().numpy()
    ours = llama.reference_logits(llama.LlamaConfig.from_dir(ckpt), llama.load_weights(ckpt), tokens)
    assert np.abs(theirs - ours).max() <= 1e-4 * np.abs(ours).max()
    r = llama.teacher_forced(ckpt, tokens, 16)
    assert np.abs(r["logits_fp16"] - theirs).max() <= 5e-3 * np.abs(theirs).max()


def test_cli_smoke(tmp_path):
    env_path = str(ROOT)
    run = lambda *a: subprocess.run([sys.executable, str(ROOT / "python" / "llama_numpy.py"), *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=600, env={"PYTHONPATH": env_path,
                                                                                       "PATH": "/usr/bin:/bin"})
    out = run("--make-tiny", str(tmp_path / "m"))
    assert out.returncode == 0, out.stderr
    out = run("--model", str(tmp_path / "m"), "--prompt-len", "12", "--steps", "4", "--json", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "r.json").read_text())
    assert summary["steps"] == 4 and 0 <= summary["top1_agreement"] <= 1 and summary["mean_kl"] >= 0


@pytest.mark.gpu
def test_jax_arrays_zero_copy():
    pytest.importorskip("jax")
    spec_j = importlib.util.spec_from_file_location("jax_interop", ROOT / "python" / "jax_interop.py")
    jx = importlib.util.module_from_spec(spec_j)
    spec_j.loader.exec_module(jx)
    backend, o, r, zero_copy = jx.run()
    assert backend == "cuda" and zero_copy
    assert o.shape == (1, 8, 128) and np.all(np.isfinite(np.asarray(o)))
