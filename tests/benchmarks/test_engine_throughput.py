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


def test_the_grid_defaults_and_lists():
    args = et.parse_args([])
    assert args.models == ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"]
    assert (args.threads, args.shots, args.batch_size, args.repeats, args.load) == ([1, 2], [0, 10], [4, None], 3, 0)
    args = et.parse_args(["--threads", "2", "--batch-size", "auto,8", "--shots", "5"])
    assert (args.threads, args.batch_size, args.shots) == ([2], [None, 8], [5])
    with pytest.raises(et.BenchmarkError, match="--shots must be >= 0, got -1"):
        et.parse_args(["--shots", "0,-1"])


def test_the_summary_prints_every_cell_and_the_worst(capsys):
    cell = {"speed_up": 2.0, "fraction": {"lm-eval": 0.5, "flasheval": 0.4}, "diff": 1e-5, "shots": 10}
    cells = [{**cell, "model": m, "threads": t, "batch": b, "rate_ratio": r}
             for m, t, b, r in [("a", 1, 4, 1.2), ("a", 2, "auto", 0.9), ("b", 1, 4, 1.1)]]
    et.summary(cells)
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if "-shot batch" in line]) == 3
    assert "worst cell: a, 2 threads, 10-shot, batch auto: tokens/s ratio 0.90x" in out


def test_load_starts_busy_processes_that_end_when_terminated():
    import time

    workers = et.start_load(1)
    try:
        time.sleep(0.5)
        assert [w.is_alive() for w in workers] == [True]
    finally:
        for w in workers:
            w.terminate()
            w.join(10)
    assert [w.is_alive() for w in workers] == [False]


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
                    "--threads", "1", "--shots", "10"]) == 0
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
