"""The live-placement benchmark's own steps on tiny seeded Llamas: the leave-one-out reference it
derives from the all-models build is a valid built reference a live placement accepts, and the
full-data figures come from the build."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import live_placement as lp
from flasheval.cli import main
from flasheval.reference import load_reference
from flasheval.reference.live import BuildSettings
from tests._tiny_models import save_tiny_models


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    return save_tiny_models(tmp_path_factory.mktemp("models"))


@pytest.mark.slow
def test_leave_one_out_reference_and_placement(tiny_models, task_dir, tmp_path, capsys):
    refs, work = tmp_path / "refs", tmp_path
    models = [f"{m}=hf:{path}" for m, path in tiny_models.items()]
    assert main(["reference", "build", "--models", *models, "--suite", "dclm-core", "--task-dir", str(task_dir),
                 "--tasks", "copa,winograd", "--n-examples", "10", "--seed", "3", "--device", "cpu",
                 "--name", "live-all", "--output-root", str(refs), "--work-dir", str(work / "work")]) == 0
    folder = lp.without(refs, "m2")
    ref = load_reference(folder)
    full = load_reference(refs / "live-all")
    assert ref.model_ids == ("m0", "m1") and ref.example_ids == full.example_ids
    settings = BuildSettings.from_json(ref.manifest.build, where="x")
    assert sorted(settings.models) == ["m0", "m1"] and settings.prompt_digests == full.manifest.build["prompt_digests"]
    for d in range(len(ref.dataset_names)):
        assert (ref.scores[d] == full.scores[d][:2]).all()
    args = argparse.Namespace(tiers="default")
    row = lp.place_one(args, {m: f"hf:{p}" for m, p in tiny_models.items()}, refs, work, "m2")
    assert row["full"]["examples"] == 20 and row["full"]["rank"] in (1, 2, 3)
    assert row["examples"] <= 20 and row["tokens"] > 0 and 1 <= row["rank"] <= 3
    assert "m2" in lp._table([row])
