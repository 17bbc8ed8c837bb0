"""``flasheval sweep`` with live checkpoints: tiny seeded Llamas (``hf:`` folders) on a tiny built reference.

The models are random, so the ranks mean nothing; what is checked is the path: every checkpoint
is placed, only nested prefixes of the reference's seeded order are asked, a rerun computes
nothing, and the refusals.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flasheval.cli import main
from flasheval.records import read_record
from flasheval.reference import load_reference
from flasheval.stats.sampling import example_order
from flasheval.tasks import resolve_task_file, task_spec
from tests._tiny_models import save_tiny_models

TASKS = ("copa", "winograd")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    return save_tiny_models(tmp_path_factory.mktemp("models"), seeds=(0, 1, 2, 3))


@pytest.fixture(scope="module")
def built(tiny_models, task_dir: Path, tmp_path_factory) -> Path:
    """A reference of m0 and m1 on 12 examples of copa and winograd (seed 7)."""
    root = tmp_path_factory.mktemp("built")
    for name in TASKS:
        source = resolve_task_file(task_spec(name), task_dir)
        rel = source.path.relative_to(task_dir)
        (root / "tasks" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.path, root / "tasks" / rel)
    assert main(["reference", "build", "--models", *[f"{m}=hf:{tiny_models[m]}" for m in ("m0", "m1")],
                 "--suite", "dclm-core", "--task-dir", str(root / "tasks"), "--tasks", ",".join(TASKS),
                 "--n-examples", "12", "--seed", "7", "--device", "cpu", "--name", "tiny",
                 "--output-root", str(root / "refs"), "--work-dir", str(root / "work")]) == 0
    return root / "refs" / "tiny"


def _sweep(models: dict[str, Path], reference: Path, out: Path, *extra: str) -> int:
    return main(["sweep", "--models", f"a=hf:{models['m2']}", f"b=hf:{models['m3']}", "--reference", str(reference),
                 "--budget-examples", "60", "--output", str(out), "--device", "cpu", *extra])


@pytest.mark.slow
def test_live_sweep_places_each_checkpoint_on_nested_prefixes_and_resumes(tiny_models, built, tmp_path, capsys):
    out = tmp_path / "sweep"
    assert _sweep(tiny_models, built, out) == 0
    text = capsys.readouterr().out
    assert "sweeping 2 live checkpoints (float32" in text and "backtest" not in text
    payload = read_record(out / "sweep.json").payload
    ref = load_reference(built)
    rows = {c["model_id"]: c for c in payload["checkpoints"]}
    assert set(rows) == {"a", "b"} and "backtest" not in payload
    spent = 0
    for model_id, row in rows.items():
        assert 1 <= row["interval"][0] <= row["rank"] <= row["interval"][1] <= ref.n_models + 1
        live = payload["live"]["checkpoints"][model_id]
        n_asked = 0
        for d, ids in zip(ref.dataset_names, ref.example_ids):
            asked = [i for a in live["asked"] if a["task_name"] == d for i in a["example_ids"]]
            assert asked == list(example_order(ids, seed=7, task_name=d)[:len(asked)])  # nested prefix, each once
            n_asked += len(asked)
        assert n_asked == row["n_examples"] > 0
        assert live["requests_computed"] == 2 * n_asked  # two continuations per copa / winograd example
        assert (out / "models" / model_id).is_dir()
        spent += n_asked
    assert spent == payload["compute"]["n_examples"] <= 60
    # a rerun serves every example from the run folder's stores: no request computed, same result
    assert _sweep(tiny_models, built, out) == 0
    assert "already stored: resuming" in capsys.readouterr().out
    again = read_record(out / "sweep.json").payload
    assert again["n_computed"] == 0
    assert all(c["requests_computed"] == 0 and c["asked"] == [] for c in again["live"]["checkpoints"].values())
    assert [(c["model_id"], c["rank"], c["interval"]) for c in again["checkpoints"]] == \
        [(c["model_id"], c["rank"], c["interval"]) for c in payload["checkpoints"]]


def test_live_sweep_refusals(tiny_models, built, tmp_path, capsys):
    assert _sweep(tiny_models, Path("helm_lite"), tmp_path / "s") == 1  # not a built reference
    err = capsys.readouterr().err
    assert "was not built by 'flasheval reference build'" in err and len(err.strip().splitlines()) == 1
    assert _sweep(tiny_models, built, tmp_path / "s", "--seed", "8") == 1
    assert "built with seed 7" in capsys.readouterr().err
    assert _sweep(tiny_models, built, tmp_path / "s", "--dtype", "bfloat16") == 1
    assert "built in float32" in capsys.readouterr().err
    assert main(["sweep", "--models", "replay:m0", f"hf:{tiny_models['m2']}", "--reference", str(built),
                 "--budget-examples", "60"]) == 1
    assert "replay:MODEL_ID specs or live specs, not both" in capsys.readouterr().err
    assert main(["sweep", "--models", "x=gguf:/nope/x.gguf", "--reference", str(built), "--budget-examples", "60"]) == 1
    assert "model files not found: x" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
