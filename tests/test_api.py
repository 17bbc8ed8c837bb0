"""The public API: what ``import flasheval`` offers, and that it refuses bad values as the CLI does.

Each bad value is given once to the API and once to the command: the API raises an
:class:`~flasheval.InputError` and the command prints exactly ``flasheval: error: <that message>``
and exits 1, before any model loads.
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

import flasheval
from flasheval.cli import main

API = ("place", "sweep", "evaluate", "backtest", "build_reference", "load_reference", "load_plan", "Budget",
       "PlaceRun", "SweepRun", "EvaluationRun", "BacktestRun", "BuiltReference", "PlacementResult", "SweepResult",
       "LoadedModel", "Progress", "InputError")


def test_the_package_exports_the_api_and_stays_light():
    assert set(API) <= set(flasheval.__all__)
    code = ("import sys, pydoc, flasheval\ntext = pydoc.render_doc(flasheval, renderer=pydoc.plaintext)\n"
            "assert 'torch' not in sys.modules, 'import flasheval loaded torch'\n"
            f"missing = [n for n in {API!r} if n not in text]\nassert not missing, missing\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert callable(flasheval.place) and flasheval.load_plan("default").name == "default"


@pytest.fixture()
def model_folder(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")  # never loaded: every case is refused first
    return folder


def _cases(folder, task_dir):
    replay = "replay:meta/llama-3-70b"
    return [
        (lambda: flasheval.place(replay, "helm_lite", budget=flasheval.Budget(max_flops=math.nan)),
         ["place", "--max-flops", "nan"]),
        (lambda: flasheval.place(replay, "helm_lite", seed=-1), ["place", "--seed", "-1"]),
        (lambda: flasheval.place(replay, "helm_lite", dtype="float32"), ["place", "--dtype", "float32"]),
        (lambda: flasheval.place(replay, "no-such-reference"), ["place", "--reference", "no-such-reference"]),
        (lambda: flasheval.place("replay:nobody", "helm_lite"), ["place", "--model", "replay:nobody"]),
        (lambda: flasheval.sweep([f"a=hf:{folder}"], "helm_lite", budget=flasheval.Budget(max_examples=10),
                                 batch_size=0),
         ["sweep", "--models", f"a=hf:{folder}", "--budget-examples", "10", "--batch-size", "0"]),
        (lambda: flasheval.sweep([replay], "helm_lite", budget=flasheval.Budget(max_examples=10), max_loaded=2),
         ["sweep", "--models", replay, "--budget-examples", "10", "--max-loaded", "2"]),
        (lambda: flasheval.build_reference([f"a=hf:{folder}", f"b=hf:{folder}"], name="x", suite="dclm-core",
                                           task_dir=task_dir, batch_size=0),
         ["reference", "build", "--models", f"a=hf:{folder}", f"b=hf:{folder}", "--suite", "dclm-core", "--task-dir",
          str(task_dir), "--name", "x", "--batch-size", "0"]),
        (lambda: flasheval.build_reference([f"a=hf:{folder}"], name="x", suite="dclm-core", task_dir=task_dir),
         ["reference", "build", "--models", f"a=hf:{folder}", "--suite", "dclm-core", "--task-dir", str(task_dir),
          "--name", "x"]),
        (lambda: flasheval.evaluate(f"hf:{folder}", tasks="copa", task_dir=task_dir, n_examples=0),
         ["evaluate", "--model", f"hf:{folder}", "--tasks", "copa", "--task-dir", str(task_dir), "--n-examples", "0",
          "--output", str(folder / "out")]),
    ]


def test_api_and_cli_refuse_the_same_values_with_the_same_line(model_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    task_dir = tmp_path / "tasks"  # a build or evaluation refused first never reads its tasks
    for api, argv in _cases(model_folder, task_dir):
        with pytest.raises(flasheval.InputError) as caught:
            api()
        capsys.readouterr()
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err == f"flasheval: error: {caught.value}\n", (argv, err)


def test_budget_refuses_what_is_not_a_positive_number():
    for bad in (math.nan, math.inf, 0, -1, "10", True):
        with pytest.raises(flasheval.InputError, match="field '--max-examples'"):
            flasheval.Budget(max_examples=bad)
    assert flasheval.Budget(max_examples=10, max_flops=1e12).capped


def test_backtest_needs_only_a_reference_and_a_plan():
    reference = flasheval.load_reference("helm_lite")
    small = reference
    for model_id in reference.model_ids[6:]:
        small = small.without(model_id)
    run = flasheval.backtest(small, "default")
    assert [s.method for s in run.results[0].summaries] == ["adaptive", "flash_helm", "uniform"]
    assert len(run.results[0].rows["adaptive"]) == 6 and run.record_path is None
