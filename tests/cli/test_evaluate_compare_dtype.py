"""``flasheval evaluate --compare-dtype``: a bf16 run set against float32 on a tiny Llama (CPU).

The model's output layer is scaled (x4) so that bf16 visibly moves its log-likelihoods while its choices stay
close enough for some predictions to flip (2 of 24 winograd examples with one torch thread on CPU).
The summary's ``dtype_comparison`` block is checked against an independent recomputation from the
two per-example files, the float32 side against a plain float32 run, the rerun against the store.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import flasheval
from flasheval.cli import main
from flasheval.records.run_record import read_record
from tests.engine.conftest import tiny_model_and_tokenizer
from tests.engine.test_distributed import one_thread

TASKS = "copa,winograd,lambada_openai"  # zero-shot: multiple choice, schema, language modelling


@pytest.fixture(scope="module")
def peaky_model(tmp_path_factory) -> Path:
    import torch

    model, tokenizer = tiny_model_and_tokenizer(seed=5, max_positions=512)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    folder = tmp_path_factory.mktemp("peaky") / "m"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _rows(path: Path) -> dict[tuple[str, str], dict]:
    return {(r["task_name"], r["example_id"]): r for r in map(json.loads, path.read_text().splitlines())}


def _evaluate(model: Path, task_dir: Path, output: Path, *, dtype: str, compare_dtype: str | None = None):
    engine = flasheval.EngineOptions(device="cpu", batch_size=4, dtype=dtype)
    return one_thread(lambda: flasheval.evaluate(f"hf:{model}", tasks=TASKS, task_dir=task_dir, n_examples=24,
                                                 engine=engine, output=output, format="jsonl",
                                                 compare_dtype=compare_dtype))


def test_flips_and_differences_match_the_two_example_files(peaky_model, task_dir, tmp_path, capsys):
    out = tmp_path / "bf16"
    run = _evaluate(peaky_model, task_dir, out, dtype="bfloat16", compare_dtype="float32")
    block = read_record(out / "summary.json").payload["dtype_comparison"]
    assert block == json.loads(json.dumps(run.summary.record["dtype_comparison"]))
    assert (block["dtype"], block["compare_dtype"], block["examples_file"]) == ("bfloat16", "float32",
                                                                                 "examples-float32.jsonl")
    assert block["fingerprint"] != run.summary.record["fingerprint"] and block["n_requests_computed"] > 0
    ours, theirs = _rows(out / "examples.jsonl"), _rows(out / "examples-float32.jsonl")
    assert set(ours) == set(theirs)
    for task in TASKS.split(","):
        keys = [k for k in ours if k[0] == task]
        a = np.concatenate([ours[k]["choice_logprob_sum"] for k in keys])
        b = np.concatenate([theirs[k]["choice_logprob_sum"] for k in keys])
        got = block["tasks"][task]
        assert got["n_examples"] == len(keys) == 24 and got["n_choices"] == a.size
        assert got["max_abs_delta_logprob"] == pytest.approx(np.abs(a - b).max(), abs=0)
        assert got["median_abs_delta_logprob"] == pytest.approx(np.median(np.abs(a - b)), abs=0)
        assert got["n_correct_to_wrong"] == sum(theirs[k]["correct"] and not ours[k]["correct"] for k in keys)
        assert got["n_wrong_to_correct"] == sum(ours[k]["correct"] and not theirs[k]["correct"] for k in keys)
        assert got["n_prediction_changed"] == sum(ours[k]["prediction"] != theirs[k]["prediction"] for k in keys)
        assert got["accuracy"] == run.summary.tasks[task].accuracy
    assert max(t["max_abs_delta_logprob"] for t in block["tasks"].values()) > 1e-3  # bf16 did move the numbers
    assert sum(t["n_prediction_changed"] for t in block["tasks"].values()) > 0, \
        "no prediction flipped: the flip counts above were not put to the test (change the seed or the scale)"
    # The float32 side is what a float32 run scores.
    plain = _evaluate(peaky_model, task_dir, tmp_path / "fp32", dtype="float32")
    for record in plain.records:
        assert theirs[(record.task_name, record.example_id)]["choice_logprob_sum"] == list(record.choice_logprob_sum)
    # A rerun is served from the store, under both fingerprints, and reports the same comparison.
    again = _evaluate(peaky_model, task_dir, out, dtype="bfloat16", compare_dtype="float32").summary.record
    assert again["n_requests_computed"] == 0 and again["dtype_comparison"]["n_requests_computed"] == 0
    assert again["dtype_comparison"]["tasks"] == block["tasks"]


def test_command_prints_the_table(peaky_model, task_dir, tmp_path, capsys):
    argv = ["evaluate", "--model", f"hf:{peaky_model}", "--task-dir", str(task_dir), "--tasks", "copa",
            "--n-examples", "4", "--device", "cpu", "--dtype", "bfloat16", "--compare-dtype", "float32",
            "--output", str(tmp_path / "out"), "--quiet"]
    assert one_thread(lambda: main(argv)) == 0
    printed = capsys.readouterr().out
    assert "accuracy bfloat16" in printed and "correct in float32 -> wrong" in printed and "median |dLL|" in printed
    assert "Weights in bfloat16 against float32 on the same examples" in printed


@pytest.mark.parametrize(("model", "options", "message"), [
    ("replay:meta/llama-3-70b", ["--tasks", "copa"], "replay: models serve recorded scores"),
    ("hf", ["--dtype", "float32"], "the run is already in float32"),
    ("hf", [], "the run is already in float32"),  # auto is float32 on CPU: refused before any weight loads
    ("hf", ["--dtype", "bfloat16", "--compare-dtype", "int8"], "unknown dtype 'int8'"),
])
def test_refused_in_one_line(peaky_model, task_dir, tmp_path, capsys, model, options, message):
    spec = f"hf:{peaky_model}" if model == "hf" else model
    compare = [] if "--compare-dtype" in options else ["--compare-dtype", "float32"]  # an option is given once
    argv = ["evaluate", "--model", spec, "--output", str(tmp_path / "out"), *compare, "--device", "cpu", *options]
    if model == "hf":
        argv += ["--task-dir", str(task_dir), "--tasks", "copa", "--n-examples", "2"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "'--compare-dtype'" in err and message in err, err
    assert not (tmp_path / "out" / "store" / "results.jsonl").exists() or not (tmp_path / "out" / "store" /
                                                                             "results.jsonl").read_text()
