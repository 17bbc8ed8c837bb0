"""``benchmarks/engine_throughput.py``: its command line, and one whole run on a tiny Llama (both engines, one process)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import engine_throughput as et
from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "engine_throughput.py"


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)


def test_help_and_one_line_errors():
    done = _run("--help")
    assert done.returncode == 0 and "--repeats" in done.stdout and "--lmeval-python" not in done.stdout
    for argv, code, message in [(["--bogus"], 2, "unrecognized arguments: --bogus"),
                                (["--repeats", "0"], 1, "--repeats must be >= 1, got 0"),
                                (["--batch-size", "x"], 2, "invalid int value: 'x'")]:
        done = _run(*argv)
        err = done.stderr.strip()
        assert done.returncode == code and len(err.splitlines()) == 1 and message in err, (argv, err)
        assert err.startswith("engine_throughput.py: error: ")


def test_no_machine_paths_and_no_second_interpreter():
    text = SCRIPT.read_text(encoding="utf-8")
    assert "/work/" not in text and "lmeval_worker" not in text and "subprocess" not in text
    assert not (REPO_ROOT / "benchmarks" / "lmeval_worker.py").exists()


def test_matmul_flops_is_a_rate():
    import torch

    assert et.matmul_flops(64, 32, 48, dtype=torch.float32, device=torch.device("cpu")) > 0


@pytest.mark.slow
def test_one_run_on_a_tiny_llama_scores_both_engines_alike(tmp_path, task_dir, monkeypatch, capsys):
    from tests.engine.conftest import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0, max_positions=8192)  # byte tokens: 10-shot prompts fit
    folder = tmp_path / "tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    monkeypatch.setenv("FLASHEVAL_SHARED", str(Path(task_dir).parent.parent))
    assert et.main(["--model", str(folder), "--n-examples", "1", "--repeats", "2", "--batch-size", "2",
                    "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "machine limit: dense matmul" in out and "load average" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if re.match(r"(hellaswag|arc_easy|total) ", line)}
    assert set(rows) == {"hellaswag", "arc_easy", "total"}
    for name, cells in rows.items():
        speed_up, token_ratio, rate_ratio = (float(c.rstrip("x")) for c in cells[5:8])
        assert speed_up == pytest.approx(token_ratio * rate_ratio, rel=0.02), name
        assert token_ratio > 1  # lm-eval runs every choice's context; flasheval each context once
        assert float(cells[8]) < 1e-4, name  # the same log-likelihoods from both engines


def test_lmeval_tokens_counts_the_rows_lm_eval_runs():
    """Checked against what lm-eval's HFLM feeds the model: its rows (one-token choices of one context share one)
    and their real tokens (byte tokens; lm-eval right-pads with id 0, the NUL byte, never in these texts)."""
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance

    from flasheval.engine.hf.backend import HFBackend
    from flasheval.types import LoglikelihoodRequest
    from tests.engine.conftest import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0, max_positions=512)
    lm = et.lmeval_around(HFBackend(model, tokenizer, fingerprint="x", batch_size=4), 4)
    choices = {"Answer:": ["A", "B", "C", "D"], "Is the sky blue?": [" yes", " no"], "": [" alone"]}
    requests = [LoglikelihoodRequest(task_name="t", example_id=f"e{e}", choice_index=k, context=context,
                                     continuation=choice)
                for e, (context, texts) in enumerate(choices.items()) for k, choice in enumerate(texts)]
    fed: list[int] = []
    handle = model.register_forward_pre_hook(
        lambda _m, args, kwargs: fed.extend(int((row != 0).sum()) for row in (args[0] if args else kwargs["input_ids"])),
        with_kwargs=True)
    try:
        lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=(r.context, r.continuation), idx=i)
                          for i, r in enumerate(requests)], disable_tqdm=True)
    finally:
        handle.remove()
    assert len(fed) == 1 + 2 + 1  # "A".."D" share a row
    assert et.lmeval_tokens(lm, requests) == sum(fed) + len(fed)  # a row feeds all but its last token
    assert et.lmeval_tokens(lm, requests[4:]) + et.lmeval_tokens(lm, requests[:1]) == et.lmeval_tokens(lm, requests)
