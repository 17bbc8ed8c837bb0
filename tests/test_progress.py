"""Progress of the long commands, and cached reruns that never load the model.

* step lines as the steps happen: a live placement's stage k is reported before stage k + 1 is
  scored (in process, and through a pipe from the command); a build reports each model before the
  next one opens; a backtest each held-out model before the next one is placed;
* the engine's bar advances per forward batch (a held-out text's windows, a generation unit's
  batches: before, one jump per unit of 32 requests), and the API's ``progress=False`` turns it off;
* a rerun the results store answers entirely loads no weights (the loader is made to fail) and
  says so, with no rates; ``--quiet`` leaves the summary only.

Tiny seeded Llamas (``tests/_tiny_models.py``) on two small task subsets: meaningless scores, real paths.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import flasheval
from flasheval.cli import main
from flasheval.records.run_record import read_record
from tests._tiny_models import save_tiny_models
from tests.conftest import REPO_ROOT

TASKS = "copa,winograd"
N_EXAMPLES = 20
PLAN = """name: four-looks
description: 4 -> 8 -> 12 -> all (test plan)
stop_rule: interval
confidence_level: 0.95
correction: none
estimator: control-variate
n_resamples: 100
stages: [4, 8, 12, all]
tiers:
  - {ranks: [1, null], resolution: maximal}
"""


class _Bar:
    """Stands in for ``tqdm.auto.tqdm``: records every bar made and every update."""

    made: list[_Bar] = []

    def __init__(self, *, total: int, desc: str, unit: str, disable: bool | None) -> None:
        self.total, self.desc, self.disable, self.updates = total, desc, disable, []
        _Bar.made.append(self)

    def update(self, n: int) -> None:
        self.updates.append(n)

    def close(self) -> None:
        pass


@pytest.fixture()
def bars(monkeypatch) -> list[_Bar]:
    _Bar.made = []
    monkeypatch.setattr("flasheval.engine.progress_bar._tqdm", lambda: _Bar)  # the engine's bars only
    return _Bar.made


def _no_weights(*args, **kwargs):
    raise AssertionError("the weights were loaded although every request is in the store")


@pytest.fixture(scope="module")
def world(tmp_path_factory, task_dir):
    """Tiny models, a test plan and a reference built from m0 and m1 through the API (its events recorded)."""
    import flasheval.reference.scoring.live as build  # where every live model is opened (build and placement)

    root = tmp_path_factory.mktemp("progress")
    models = save_tiny_models(root / "models")
    (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    events, opens = [], []
    with pytest.MonkeyPatch.context() as mp:
        real_open = build.open_cached_backend
        mp.setattr(build, "open_cached_backend", lambda *a, **k: opens.append(1) or real_open(*a, **k))
        built = flasheval.build_reference(
            [f"m0=hf:{models['m0']}", f"m1=hf:{models['m1']}"], name="tiny", suite="dclm-core", tasks=TASKS,
            task_dir=task_dir, n_examples=N_EXAMPLES, seed=7, engine=flasheval.EngineOptions(device="cpu"), output=root / "refs",
            work_dir=root / "work", progress=lambda p: events.append((p, len(opens))))
    assert built.reference is not None
    return {"root": root, "models": models, "ref": root / "refs" / "tiny", "plan": root / "plan.yaml",
            "build_events": events, "task_dir": task_dir}


def test_a_build_reports_each_model_before_the_next_one_opens(world):
    steps = [(p.step, p.done, p.total, n_open) for p, n_open in world["build_events"]]
    assert steps == [("start", None, None, 0), ("model", 1, 2, 1), ("model", 2, 2, 2)]
    assert all(p.elapsed is not None and p.elapsed >= 0 for p, _ in world["build_events"])
    assert world["build_events"][1][0].message.startswith("model 1/2 m0: scored in ")


def _place(world, output: Path, **kwargs):
    return flasheval.place(f"m2=hf:{world['models']['m2']}", world["ref"], plan=world["plan"],
                           engine=flasheval.EngineOptions(device="cpu"),
                           output=output, **kwargs)


def test_each_stage_is_reported_before_the_next_is_scored_and_a_cached_rerun_loads_nothing(world, tmp_path,
                                                                                         monkeypatch):
    import flasheval.reference.scoring.scorers as scorers

    calls: list[int] = []
    real = scorers.score_requests
    monkeypatch.setattr(scorers, "score_requests", lambda *a, **k: calls.append(1) or real(*a, **k))
    seen: list[tuple[str, int | None, int]] = []
    first = _place(world, tmp_path / "place", progress=lambda p: seen.append((p.step, p.done, len(calls))))
    n_stages = len(first.placement.stages)
    assert n_stages == 4  # 4 -> 8 -> 12 -> all: each stage asks both tasks for new examples
    stages = [(done, n_calls) for step, done, n_calls in seen if step == "stage"]
    # reported before the next stage's scoring; both tasks' requests of a stage in one backend call
    assert stages == [(k, k) for k in range(1, n_stages + 1)]
    assert [step for step, _, _ in seen][:2] == ["start", "load"]  # the weights loaded on the first stage
    assert first.live.model_loaded and first.live.requests_computed > 0
    # the same placement again: every request is in the output folder's store, so no weights load
    monkeypatch.setattr("flasheval.engine.hf.loading.load_planned", _no_weights)
    again = _place(world, tmp_path / "place")
    assert again.live.requests_computed == 0 and not again.live.model_loaded
    assert again.placement.stages == first.placement.stages


@pytest.mark.slow
def test_the_place_command_prints_each_stage_while_it_runs(world, tmp_path):
    """Through a pipe (block-buffered unless flushed): lines must arrive as the stages finish, not at exit."""
    command = [sys.executable, "-m", "flasheval", "place", "--model", f"m2=hf:{world['models']['m2']}",
               "--reference", str(world["ref"]), "--tiers", str(world["plan"]), "--device", "cpu",
               "--output", str(tmp_path / "place")]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    arrivals: list[tuple[float, str, bool]] = []  # (when, line, the process still running)
    assert process.stdout is not None
    for line in process.stdout:
        arrivals.append((time.monotonic(), line.rstrip("\n"), process.poll() is None))
    assert process.wait(timeout=300) == 0
    stage_lines = [(t, text, running) for t, text, running in arrivals if text.lstrip().startswith("stage ")]
    assert [text.split()[1] for _, text, _ in stage_lines] == ["1/4", "2/4", "3/4", "4/4"]
    assert all("elapsed" in text for _, text, _ in stage_lines)
    assert stage_lines[0][2], "the first stage line came only when the command ended"
    # buffered output would arrive in one burst at exit; here the later stages are scored after it arrives
    assert arrivals[-1][0] - stage_lines[0][0] > 0.05


def test_the_evaluate_bar_advances_per_forward_batch_and_can_be_switched_off(world, bars):
    model, batch_size = f"hf:{world['models']['m0']}", 4
    flasheval.evaluate(model, tasks="copa", task_dir=world["task_dir"], n_examples=10,
                       engine=flasheval.EngineOptions(batch_size=batch_size, device="cpu"), progress=True)
    (bar,) = bars
    n_continuations = 2 * 10  # copa: two choices per example
    assert bar.total == n_continuations and bar.disable is False
    assert len(bar.updates) >= math.ceil(n_continuations / batch_size) and sum(bar.updates) == n_continuations
    bars.clear()
    flasheval.evaluate(model, tasks="copa", task_dir=world["task_dir"], n_examples=10, engine=flasheval.EngineOptions(device="cpu"),
                       progress=False)
    assert bars == []  # the API's off switch: no bar made at all
    events = []
    flasheval.evaluate(model, tasks="winograd", task_dir=world["task_dir"], n_examples=2,
                       engine=flasheval.EngineOptions(device="cpu"), progress=events.append)
    assert [b.disable for b in bars] == [None]  # a callback keeps the default bar: tqdm's rule (stderr a terminal)
    assert [e.step for e in events] == ["start", "load"]  # ... and gets the events (the weights loaded once)
    with pytest.raises(flasheval.InputError, match="progress"):
        flasheval.evaluate(model, tasks="copa", task_dir=world["task_dir"], progress="yes")


def test_held_out_text_advances_the_bar_within_one_unit_of_requests(world, bars, tmp_path):
    """Six documents are ONE unit of the data-parallel runner (fewer than the batch size); their 21 windows of
    32 tokens take several forward batches of 8 rows. Document i is 31 * (i + 1) bytes: i + 1 full windows."""
    text = tmp_path / "heldout.jsonl"
    text.write_text("".join(json.dumps({"text": ("abcdefghijklmnopqrstuvwxyz01234" * (i + 1))}) + "\n"
                            for i in range(6)), encoding="utf-8")
    flasheval.evaluate(f"hf:{world['models']['m0']}", heldout=[text],
                       engine=flasheval.EngineOptions(device="cpu", batch_size=8, max_length=32),
                       progress=True)
    (bar,) = bars
    assert bar.total == 6 and sum(bar.updates) == 6
    assert len(bar.updates) >= 2  # documents reported as their last window's batch finishes, not all at the end


def test_a_generation_unit_stores_and_advances_per_batch():
    """The runner hands the backend a unit of ``batch_size`` requests; the backend's batches must show."""
    from flasheval.engine.base import BackendInfo
    from flasheval.engine.coordination.distributed import DistributedBackend
    from flasheval.types import GenerationRequest, GenerationResult

    class TwoPerBatch:
        fingerprint = "fake"
        info = BackendInfo(prefix_space=True, batch_size=8, is_loaded=True, load_seconds=0.0, n_parameters=None,
                           dtype=None, device=None)

        def generate(self, requests, *, on_results=None):
            results = [GenerationResult(task_name=r.task_name, example_id=r.example_id, text="x", n_context_tokens=1,
                                        n_generated_tokens=1) for r in requests]
            for start in range(0, len(results), 2):
                if on_results is not None:
                    on_results([(i, results[i]) for i in range(start, min(start + 2, len(results)))])
            return results

    class OneProcess:
        num_processes, process_index, is_main_process = 1, 0, True

    runner = DistributedBackend(TwoPerBatch(), state=OneProcess(), progress=False)
    reported: list[int] = []
    requests = [GenerationRequest(task_name="g", example_id=str(i), context="c", max_new_tokens=2) for i in range(8)]
    results = runner.generate(requests, on_results=lambda pairs: reported.append(len(pairs)))
    assert reported == [2, 2, 2, 2] and [r.example_id for r in results] == [str(i) for i in range(8)]


def _evaluate_argv(world, output: Path, *extra: str) -> list[str]:
    return ["evaluate", "--model", f"hf:{world['models']['m1']}", "--task-dir", str(world["task_dir"]),
            "--tasks", TASKS, "--n-examples", "5", "--device", "cpu", "--format", "jsonl", "--output", str(output),
            *extra]


def test_a_cached_evaluate_rerun_loads_no_weights_and_prints_no_rates(world, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    assert main(_evaluate_argv(world, out)) == 0
    first = capsys.readouterr().out
    assert "examples/s" in first and "scoring 2 tasks with m1: 20 requests, 0 of them in the store" in first
    assert "loaded the weights of m1 in " in first
    records = (out / "examples.jsonl").read_text()
    n_parameters = read_record(out / "summary.json").payload["n_parameters"]  # counted on the loaded model
    monkeypatch.setattr("flasheval.engine.hf.loading.load_planned", _no_weights)
    assert main(_evaluate_argv(world, out)) == 0
    again = capsys.readouterr().out
    assert "all 20 requests served from the store (nothing computed)" in again
    assert "examples/s" not in again and "GFLOP/s" not in again and "loaded the weights of m1" not in again
    assert (out / "examples.jsonl").read_text() == records  # the same records, from the store
    summary = read_record(out / "summary.json").payload
    assert summary["n_requests_computed"] == 0 and summary["model_loaded"] is False
    assert summary["examples_per_second"] is None and summary["n_tokens_computed"] == 0
    assert summary["n_parameters"] == n_parameters > 0  # counted without the weights (an empty copy)
    # --quiet: the summary only (the task table and the final lines), no step lines
    assert main([*_evaluate_argv(world, out), "--quiet"]) == 0
    quiet = capsys.readouterr().out
    assert "scoring 2 tasks" not in quiet and quiet.splitlines()[0].startswith("task ")
    assert quiet.splitlines()[-1].startswith("10 examples: all 20 requests served from the store")


def test_quiet_place_prints_the_summary_only(world, tmp_path, capsys):
    argv = ["place", "--model", f"m2=hf:{world['models']['m2']}", "--reference", str(world["ref"]), "--tiers",
            str(world["plan"]), "--device", "cpu", "--output", str(tmp_path / "place")]
    assert main(argv) == 0
    loud = capsys.readouterr().out.splitlines()
    assert loud[0].startswith("placing m2 (live, float32) on tiny") and any("stage 1/4" in ln for ln in loud)
    assert main([*argv, "--quiet"]) == 0
    quiet = capsys.readouterr().out.splitlines()
    assert quiet[0].startswith("m2 on tiny (2 reference models") and not any("stage " in ln for ln in quiet)
    assert quiet[:-1] == loud[-len(quiet):-1]  # the loud run's summary (its last line: the timing, the record)
    assert "model not loaded: every request was in the store" in quiet[-1]


def _synthetic_folder(root: Path, n_models: int = 6) -> Path:
    from flasheval.analysis.simulation import synthetic_reference
    from flasheval.reference import write_reference

    ref = synthetic_reference(n_models, [40, 60], rng=3)
    rows = [{"model": m, "dataset": d, "example_id": e, "score": float(s)}
            for d, ids, mat in zip(ref.dataset_names, ref.example_ids, ref.scores)
            for i, m in enumerate(ref.model_ids) for e, s in zip(ids, mat[i])]
    return write_reference(root / "syn", pd.DataFrame(rows), name="syn", source="test", licence="none", metric="acc")


def test_backtest_reports_each_held_out_model_as_it_goes(tmp_path, monkeypatch, capsys):
    import flasheval.analysis.backtest as bt

    placements: list[int] = []
    real = bt.place
    monkeypatch.setattr(bt, "place", lambda *a, **k: placements.append(1) or real(*a, **k))
    folder = _synthetic_folder(tmp_path)
    seen = []
    flasheval.backtest(folder, seeds=(0, 1), progress=lambda p: seen.append((p.step, p.done, p.total, len(placements))))
    per_seed = 2 * 6  # adaptive and flash_helm place each of the 6 models
    expected = [("start", None, None, 0)]
    for s in range(2):
        expected += [("model", 6 * s + k, 12, s * per_seed + 2 * k) for k in range(1, 7)]  # counted over both seeds
        expected.append(("seed", s + 1, 2, (s + 1) * per_seed))
    assert seen == expected
    assert main(["backtest", "--reference", str(folder), "--output", str(tmp_path / "bt.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("  model ")] == [f"{k}/6" for k in range(1, 7)]
    left = [float(re.search(r"elapsed ([\d.]+) s, about (\d+) s left\)$", ln).group(2)) for ln in lines
            if ln.startswith("  model ") and not ln.startswith("  model 6/6")]
    assert len(left) == 5  # the ETA of every model but the last
    assert all(ln.endswith(" s)") and "left" not in ln for ln in lines if ln.startswith("  model 6/6"))
    assert main(["backtest", "--reference", str(folder), "--output", str(tmp_path / "bt.json"), "--quiet"]) == 0
    quiet = capsys.readouterr().out
    assert "model 1/6" not in quiet and "backtesting" not in quiet and "adaptive" in quiet and "record:" in quiet


def test_the_lm_eval_bar_advances_per_batch_and_respects_disable_tqdm(bars, tmp_path):
    pytest.importorskip("lm_eval", reason='lm-eval not installed: pip install -e ".[lm-eval]"')
    from types import SimpleNamespace

    from flasheval.engine.store.results import CachedBackend, ResultStore
    from flasheval.lmeval.model import FlashevalLM
    from flasheval.types import LoglikelihoodResult

    class ThreePerBatch:
        fingerprint = "fake"

        def loglikelihood(self, requests, *, on_results=None):
            results = [LoglikelihoodResult(task_name=r.task_name, example_id=r.example_id, choice_index=0,
                                           logprob_sum=-1.0, n_tokens=1, is_greedy=False, n_context_tokens=1)
                       for r in requests]
            for start in range(0, len(results), 3):
                on_results([(i, results[i]) for i in range(start, min(start + 3, len(results)))])
            return results

    store = ResultStore(tmp_path / "store", fingerprint="fake")
    lm = FlashevalLM(CachedBackend(ThreePerBatch(), store), model_id="fake", progress_bar=True)
    docs = [SimpleNamespace(args=(f"context {i}", " answer"), task_name="t", doc_id=i) for i in range(7)]
    lm.loglikelihood(docs[:5])
    assert [(b.desc, b.total, b.updates) for b in bars] == [("loglikelihood", 5, [3, 2])]
    bars.clear()
    lm.loglikelihood(docs)  # five answers from the store at once, then the two computed in one batch
    assert [b.updates for b in bars] == [[5, 2]]
    bars.clear()
    lm.loglikelihood(docs, disable_tqdm=True)
    FlashevalLM(CachedBackend(ThreePerBatch(), store), progress_bar=False).loglikelihood(docs)
    assert bars == []
    store.close()
