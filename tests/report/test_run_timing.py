"""A run's seconds are each placement's own work: a fresh process's one-time imports are counted apart.

Two tiny saved checkpoints are placed into one run folder by ONE fresh Python process, as a watcher does.
The first pays for importing torch, transformers and the model's architecture (seconds; before the fix its
wall seconds counted them, 4.5 s against 0.1 s for the next one); the second pays nothing of it. The record
keeps the imports in ``timing.import_seconds``, out of ``wall_seconds`` and ``load_seconds``, and the run report
shows them in their own column.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import flasheval
from tests._tiny_models import save_tiny_models
from tests.placement.test_timing import PLAN  # stages [4, all]: two looks


SCRIPT = textwrap.dedent("""
    import json, sys, time
    import flasheval
    root, task_dir = sys.argv[1], sys.argv[2]
    out = {"torch_before": "torch" in sys.modules, "placements": []}
    for step, name in ((1, "m2"), (2, "m3")):
        start = time.perf_counter()
        run = flasheval.place_checkpoint(f"hf:{root}/models/{name}", run=f"{root}/run", step=step,
                                         reference=f"{root}/refs/tiny", plan=f"{root}/plan.yaml", task_dir=task_dir,
                                         engine=flasheval.EngineOptions(device="cpu"))
        out["placements"].append({"elapsed": time.perf_counter() - start, **run.timing.to_json()})
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def placed(tmp_path_factory, task_dir):
    root = tmp_path_factory.mktemp("run-timing")
    models = save_tiny_models(root / "models", seeds=(0, 1, 2, 3))
    (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    flasheval.build_reference([f"m0=hf:{models['m0']}", f"m1=hf:{models['m1']}"], name="tiny", suite="dclm-core",
                              tasks="copa,winograd", task_dir=task_dir, n_examples=10, seed=7,
                              engine=flasheval.EngineOptions(device="cpu"), output=root / "refs",
                              work_dir=root / "work")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(root), str(task_dir)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_first_placement_of_a_process_records_its_imports_apart_from_its_own_seconds(placed):
    _, out = placed
    first, second = out["placements"]
    assert not out["torch_before"]  # a fresh process: the first placement imports torch and transformers
    assert first["import_seconds"] > 0.3  # torch alone takes longer to import
    assert second["import_seconds"] < 0.2 * first["import_seconds"]  # nothing left to import
    for p in (first, second):  # the imports are not in the placement's own seconds
        assert p["wall_seconds"] + p["import_seconds"] <= p["elapsed"] + 1e-3
    assert first["wall_seconds"] < first["elapsed"] - 0.9 * first["import_seconds"]
    assert first["load_seconds"] < 0.5 * first["import_seconds"]  # the architecture's import is not its load
    assert first["outside_model_seconds"] >= 0.0 and first["load_seconds"] <= first["wall_seconds"]


def test_the_run_report_shows_each_checkpoints_own_seconds_and_the_start_up_apart(placed):
    run, out = placed
    history = flasheval.read_run(run)
    for c, p in zip(history.checkpoints, out["placements"]):
        assert c.seconds == pytest.approx(p["wall_seconds"]) and c.import_seconds == pytest.approx(p["import_seconds"])
    text = flasheval.render_report(run).markdown.read_text()
    assert "| seconds | start-up seconds |" in text
    for c in history.checkpoints:
        assert f"| {c.seconds:.1f} | {c.import_seconds:.1f} |" in text
    total = sum(c.import_seconds for c in history.checkpoints)
    assert f"| {sum(c.seconds for c in history.checkpoints):.1f} | {total:.1f} |" in text.splitlines()[-1]
