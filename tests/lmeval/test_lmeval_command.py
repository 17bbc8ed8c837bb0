"""``flasheval lm-eval``: lm-eval's task options and output files, the results store (a rerun
computes nothing; a partly stored run computes only the rest), two data-parallel processes equal
one, and a one-line install hint when lm-eval is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flasheval.cli import main
from flasheval.engine.store.results import iter_store
from flasheval.reference import read_lm_eval_samples
from tests._tiny_models import save_tiny_models
from tests.conftest import REPO_ROOT
from tests.engine.test_distributed import _free_port, one_thread
from tests.lmeval.conftest import ALL_TASKS

TASKS = "synth_arith,synth_story,synth_text"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny_models(tmp_path_factory.mktemp("tiny_lm_eval"), seeds=(3,))["m3"]


def _run(tiny: Path, tasks: Path, out: Path, *extra: str) -> int:
    return main(["lm-eval", "--model", f"m3=hf:{tiny}", "--tasks", TASKS, "--include_path", str(tasks), "--log_samples",
                 "--output_path", str(out), "--device", "cpu", "--batch_size", "8", *extra])


def _samples(out: Path) -> dict[str, list]:
    files = sorted((out / "m3").glob("samples_*.jsonl"))
    rows = {}
    for f in files:
        task = f.name.split("_2")[0].removeprefix("samples_")
        rows[task] = sorted(([json.loads(x)["doc_id"], json.loads(x)["resps"]] for x in f.read_text().splitlines()))
    return rows


def test_command_writes_lm_evals_files_and_resumes(tiny, lmeval_tasks, tmp_path, capsys):
    out = tmp_path / "out"
    # First a part of the work (--limit 3), then everything: only the rest is computed.
    assert _run(tiny, lmeval_tasks, tmp_path / "part", "--limit", "3", "--store", str(tmp_path / "store")) == 0
    first = capsys.readouterr().out
    assert _run(tiny, lmeval_tasks, out, "--store", str(tmp_path / "store")) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    n_total, n_computed = (int(line.split()[1]), int(line.split()[3]))
    n_part = int(first.strip().splitlines()[-1].split()[3])
    assert 0 < n_part and n_computed == n_total - n_part
    assert _run(tiny, lmeval_tasks, tmp_path / "again", "--store", str(tmp_path / "store")) == 0
    assert " 0 computed" in capsys.readouterr().out
    assert (out / "m3").is_dir() and list((out / "m3").glob("results_*.json"))
    assert _samples(out) == _samples(tmp_path / "again")
    assert {f.name.split("_2")[0] for f in (out / "m3").glob("samples_*.jsonl")} == {
        "samples_synth_arith", "samples_synth_story", "samples_synth_text"}
    # lm-eval's own layout: importable as a reference's logs (a perplexity task has no per-sample score)
    next((out / "m3").glob("samples_synth_text_*.jsonl")).unlink()
    frame = read_lm_eval_samples(out)
    assert set(frame["dataset"]) == {"synth_arith", "synth_story"} and set(frame["model"]) == {"m3"}


@pytest.mark.slow
def test_two_data_parallel_processes_equal_one(tiny, lmeval_tasks, tmp_path):
    # the single process runs in this one, with one torch thread as the launched processes have
    single, double = tmp_path / "one", tmp_path / "two"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    common = ["lm-eval", "--model", f"m3=hf:{tiny}", "--tasks", TASKS, "--include_path", str(lmeval_tasks),
              "--log_samples", "--device", "cpu", "--batch_size", "8"]
    assert one_thread(lambda: main([*common, "--output_path", str(single)])) == 0
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
              str(_free_port()), "-m", "flasheval", *common, "--output_path", str(double)]
    done = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _samples(single) == _samples(double)
    stored = [(r.fingerprint, r.key) for r in iter_store(double / "store")]
    assert stored and len(stored) == len(set(stored))  # one writer, each request once


def test_without_lm_eval_the_command_says_how_to_install_it(tmp_path):
    # every argument is checked first (a model folder that exists), then lm-eval is needed
    code = ("import sys; sys.modules['lm_eval'] = None\n"
            "from flasheval.cli import main\n"
            f"raise SystemExit(main(['lm-eval', '--model', 'hf:{tmp_path}', '--tasks', 'x']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        'flasheval: error: lm-evaluation-harness is not installed; install it with: pip install -e ".[lm-eval]"  '
        '(or: pip install "lm-eval[hf]==0.4.13")']


def test_only_the_include_path_is_indexed_when_it_holds_every_task(lmeval_tasks, tmp_path):
    # Indexing lm-eval's own ~15,000 task configs costs 15-20 s. The tasks loaded from the include path alone are
    # lm-eval's: tests/lmeval/test_lmeval_placement.py places against configs pinned by lm-eval's own CLI (which
    # indexes everything) and would be refused if they differed.
    from flasheval.lmeval.tasks import _own_task_manager

    own = _own_task_manager(str(lmeval_tasks), ["synth_arith", "synth_gen"])
    assert own is not None and set(own.all_tasks) == set(ALL_TASKS)
    assert set(own.load(["synth_story"])["tasks"]) == {"synth_story"}
    for f in lmeval_tasks.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "group.yaml").write_text("group: synth_pair\ntask:\n  - synth_arith\n  - synth_story\n")
    # a group, an installed task's name or no include path: lm-eval's own tasks are indexed too
    assert _own_task_manager(str(tmp_path), ["synth_pair"]) is None
    assert _own_task_manager(str(tmp_path), ["synth_arith", "arc_easy"]) is None
    assert _own_task_manager(None, ["synth_arith"]) is None and _own_task_manager(str(tmp_path), []) is None
