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
        (lambda: flasheval.place(replay, "helm_lite", engine=flasheval.EngineOptions(dtype="float32")),
         ["place", "--dtype", "float32"]),
        (lambda: flasheval.place(replay, "no-such-reference"), ["place", "--reference", "no-such-reference"]),
        (lambda: flasheval.place("replay:nobody", "helm_lite"), ["place", "--model", "replay:nobody"]),
        (lambda: flasheval.sweep([f"a=hf:{folder}"], "helm_lite", budget=flasheval.Budget(max_examples=10),
                                 engine=flasheval.EngineOptions(batch_size=0)),
         ["sweep", "--models", f"a=hf:{folder}", "--budget-examples", "10", "--batch-size", "0"]),
        (lambda: flasheval.sweep([replay], "helm_lite", budget=flasheval.Budget(max_examples=10), max_loaded=2),
         ["sweep", "--models", replay, "--budget-examples", "10", "--max-loaded", "2"]),
        (lambda: flasheval.build_reference([f"a=hf:{folder}", f"b=hf:{folder}"], name="x", suite="dclm-core",
                                           task_dir=task_dir, engine=flasheval.EngineOptions(batch_size=0)),
         ["reference", "build", "--models", f"a=hf:{folder}", f"b=hf:{folder}", "--suite", "dclm-core", "--task-dir",
          str(task_dir), "--name", "x", "--batch-size", "0"]),
        (lambda: flasheval.build_reference([f"a=hf:{folder}"], name="x", suite="dclm-core", task_dir=task_dir),
         ["reference", "build", "--models", f"a=hf:{folder}", "--suite", "dclm-core", "--task-dir", str(task_dir),
          "--name", "x"]),
        (lambda: flasheval.evaluate(f"hf:{folder}", tasks="copa", task_dir=task_dir, n_examples=0),
         ["evaluate", "--model", f"hf:{folder}", "--tasks", "copa", "--task-dir", str(task_dir), "--n-examples", "0",
          "--output", str(folder / "out")]),
        # evaluate: a bogus dtype is an InputError (it was a BackendError), a string of suites is not its letters
        (lambda: flasheval.evaluate(f"hf:{folder}", tasks="copa", task_dir=task_dir,
                                    engine=flasheval.EngineOptions(dtype="bogus")),
         ["evaluate", "--model", f"hf:{folder}", "--tasks", "copa", "--task-dir", str(task_dir), "--dtype", "bogus",
          "--output", str(folder / "out")]),
        (lambda: flasheval.evaluate(f"hf:{folder}", suites="no-such-suite", task_dir=task_dir),
         ["evaluate", "--model", f"hf:{folder}", "--suite", "no-such-suite", "--task-dir", str(task_dir),
          "--output", str(folder / "out")]),
        (lambda: flasheval.dior("helm_lite", sizes=[0, 5]), ["dior", "--sizes", "0", "5"]),
        (lambda: flasheval.dior("helm_lite", n_instantiations=5), ["dior", "--n-instantiations", "5"]),
        (lambda: flasheval.check_tasks(folder / "nowhere"), ["tasks", "check", str(folder / "nowhere")]),
        (lambda: flasheval.aggregate(folder / "none.csv", suites="no-such-suite"),
         ["aggregate", "--suite", "no-such-suite", "--scores", str(folder / "none.csv")]),
        (lambda: flasheval.lm_eval(f"hf:{folder}", tasks="x", log_samples=True),
         ["lm-eval", "--model", f"hf:{folder}", "--tasks", "x", "--log-samples"]),
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


def _commands(parser) -> set[str]:
    """Every runnable command of the parser: ``place``, ``reference import``, ``scaling fit``, ..."""
    import argparse

    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = _commands(sub)
                found |= {f"{name} {n}" for n in nested} if nested else {name}
    return found


def test_every_command_has_a_documented_api_function():
    from pathlib import Path

    from flasheval.cli import build_parser

    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `") and "`flasheval " in line]
    documented = {}
    for row in rows:
        function = row.split("`")[1].split("(")[0]
        for command in row.split("|")[3].split("`flasheval ")[1:]:
            documented[command.split("`")[0]] = function
    commands = _commands(build_parser())
    assert len(commands) == 17, commands  # the 14 subcommands, three of them with several actions
    for command in sorted(commands):
        if command == "tasks list":  # prints the task registry (flasheval.tasks); nothing to compute
            continue
        assert command in documented, f"docs/api.md lists no API function for `flasheval {command}`"
        function = documented[command]
        assert function in flasheval.__all__ and callable(getattr(flasheval, function)), (command, function)


def test_the_table_commands_from_python_equal_the_commands(tmp_path, capsys):
    import gzip

    import pandas as pd

    from flasheval.records.run_record import read_record
    from flasheval.tasks import load_suite

    gadre = load_suite("gadre-17")
    scores = tmp_path / "scores.csv.gz"
    with gzip.open(scores, "wt") as handle:
        pd.DataFrame([{"model": "m1", **{t: 0.6 for t in gadre.task_names}},
                      {"model": "m2", **{t: 0.2 for t in gadre.task_names[1:]}}]).to_csv(handle, index=False)
    run = flasheval.aggregate(scores, suites="gadre-17", partial=True)  # one suite as a string, not its letters
    assert run.table.loc["m1", "gadre-17"] == pytest.approx(0.4) and run.n_partial == 1 and run.output is None
    assert main(["aggregate", "--suite", "gadre-17", "--scores", str(scores), "--partial"]) == 0
    assert capsys.readouterr().out == run.to_csv()

    runs = tmp_path / "runs.csv"
    from flasheval.stats.scaling import loss_law

    sizes = [(1.06e7, 20), (7.89e7, 20), (1.54e8, 20), (4.12e8, 20), (1.06e7, 320), (7.89e7, 80), (1.4e9, 640)]
    rows = [{"model_id": f"r{i}", "params": n, "tokens": n * m, "err_avg17": 0.5,
             "loss": float(loss_law(6 * n * n * m, m, E=1.8, a=200.0, b=350.0, eta=0.13))}
            for i, (n, m) in enumerate(sizes)]
    pd.DataFrame(rows).to_csv(runs, index=False)
    options = dict(predict="r6", fit_max_compute=2.1e19, error=False, n_resamples=20)
    fit = flasheval.fit_scaling(runs, **options, output=tmp_path / "fit.json")
    assert fit.record_path == tmp_path / "fit.json" and fit.plot_path is None
    assert [p["model_id"] for p in fit.payload["predictions"]] == ["r6"]
    assert main(["scaling", "fit", "--runs", str(runs), "--predict", "r6", "--fit-max-compute", "2.1e19",
                 "--no-error", "--n-resamples", "20", "--output", str(tmp_path / "cli.json")]) == 0
    assert read_record(tmp_path / "cli.json").payload == json_roundtrip(fit.payload)


def json_roundtrip(payload):
    import json

    return json.loads(json.dumps(payload))


def test_import_dior_report_and_check_tasks_from_python(tmp_path, task_dir):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame([{"model": f"m{m}", "dataset": d, "example_id": str(e),
                           "score": float(rng.random() < 0.2 + 0.15 * m)}
                          for d in ("a", "b") for m in range(5) for e in range(40)])
    frame.to_parquet(tmp_path / "long.parquet")
    imported = flasheval.import_reference(tmp_path / "long.parquet", format="long-parquet", name="mine",
                                          output=tmp_path / "refs", metric_description="per-example 0/1")
    assert imported.written.n_models == 5
    reference = flasheval.load_reference(tmp_path / "refs" / "mine")
    with pytest.raises(flasheval.InputError, match=r"field '--decision': unknown decision 'exmaples'"):
        flasheval.dior(reference, decisions=["exmaples"])
    decided = flasheval.dior(reference, decisions="examples", sizes=[10, 5], n_instantiations=20,
                             output=tmp_path / "run")
    assert [s.size for s in decided.report.examples] == [5, 10] and not decided.report.datasets
    assert decided.record_path == tmp_path / "run" / "dior.json"
    files = flasheval.render_report(tmp_path / "run")
    assert files.kinds == ("dior",) and files.html.is_file() and files.markdown.is_file()

    checked = {row.task_name: row for row in flasheval.check_tasks(task_dir, suite="dclm-core")}
    assert set(checked) == set(flasheval.api.tasks.load_suite("dclm-core").task_names)
    assert checked["copa"].status == "ok" and checked["copa"].n_examples == 100
