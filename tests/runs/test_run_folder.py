"""One record per run: ``place_checkpoint`` into a run folder, ``read_run`` back, settings fixed by the first.

Replayed reference models stand in for checkpoints here (no weights, seconds per placement); the live
path (in-memory models, a shared results store, the watcher) is tested in ``tests/runs/test_watch.py`` and
``tests/test_api_docs.py``.
"""

from __future__ import annotations

import json
import logging

import pytest

import flasheval
from flasheval.runs.coverage import split_level
from flasheval.records.run_record import read_record

A, B = "replay:meta/llama-3-70b", "replay:meta/llama-3-8b"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Two checkpoints placed into one run: steps 100 (model A) and 200 (model B)."""
    run = tmp_path_factory.mktemp("runs") / "my-run"
    flasheval.place_checkpoint(A, run=run, step=100, reference="helm_lite")
    flasheval.place_checkpoint(B, run=run, step=200)  # the run's reference, from run.json
    return run


def test_every_placement_lands_in_the_run_folder_and_reads_back_by_step(run_dir):
    history = flasheval.read_run(run_dir)
    assert history.name == "my-run" and history.reference == "helm_lite" and history.plan == "default"
    assert [c.step for c in history.checkpoints] == [100, 200]
    for checkpoint, model in zip(history.checkpoints, ("meta/llama-3-70b", "meta/llama-3-8b")):
        alone = flasheval.place(f"replay:{model}", "helm_lite")  # the same placement outside any run
        assert checkpoint.model_id == model
        assert (checkpoint.rank, checkpoint.interval, checkpoint.tier) == (alone.rank, alone.interval,
                                                                          alone.placement.tier)
        assert checkpoint.n_examples == alone.placement.compute.n_examples
        assert checkpoint.full_examples == alone.placement.compute.full_examples
        assert read_record(checkpoint.record_path).payload == json.loads(json.dumps(alone.to_json()))
        assert checkpoint.placement == alone.placement  # the whole result, every stage, read back from the record
        assert (checkpoint.status, checkpoint.n_models, checkpoint.n_tokens) == (
            alone.placement.status, alone.placement.n_models, alone.placement.compute.n_tokens)
    plan = flasheval.load_plan("default").for_pool(flasheval.load_reference("helm_lite").n_models)
    assert [t.first for t in history.tiers] == [t.first for t in plan.tiers]
    assert history.settings["seed"] == 0 and history.simultaneous is None and history.confidence_level == 0.95


@pytest.mark.parametrize(("options", "field", "values"), [
    ({"seed": 3}, "seed", "seed 0, this one with 3"),
    ({"plan": "lean"}, "plan", "plan 'default', this one with 'lean'"),
    ({"simultaneous": 4}, "simultaneous", "simultaneous None, this one with 4"),
    ({"missing": "common-datasets"}, "missing", "'complete-models', this one with 'common-datasets'"),
])
def test_a_later_placement_with_other_settings_is_refused_naming_the_field_and_both_values(run_dir, options, field,
                                                                                           values):
    with pytest.raises(flasheval.InputError) as caught:
        flasheval.place_checkpoint(A, run=run_dir, step=300, **options)
    message = str(caught.value)
    assert f"field '{field}'" in message and values in message and "\n" not in message
    assert not (run_dir / "checkpoints" / "step-300").exists()


def test_a_step_placed_again_keeps_its_record_for_the_same_model_and_replaces_it_for_another(run_dir, caplog):
    path = run_dir / "checkpoints" / "step-100" / "place.json"
    before = path.read_bytes()
    again = flasheval.place_checkpoint(A, run=run_dir, step=100)
    assert again.record_path == path and path.read_bytes() == before  # same model: record kept as it was
    with caplog.at_level(logging.WARNING):
        other = flasheval.place_checkpoint(B, run=run_dir, step=100)
    assert "step 100" in caplog.text and "other weights" in caplog.text and "replaced" in caplog.text
    assert read_record(path).payload["model_id"] == "meta/llama-3-8b" and other.record_path == path
    flasheval.place_checkpoint(A, run=run_dir, step=100)  # back as it was for the other tests
    assert read_record(path).payload["model_id"] == "meta/llama-3-70b"


def test_simultaneous_coverage_splits_the_level_and_is_recorded(tmp_path):
    run = tmp_path / "k-run"
    placed = flasheval.place_checkpoint(B, run=run, step=1, reference="helm_lite", simultaneous=5)
    expected = split_level(flasheval.load_plan("default"), 5).confidence_level
    assert placed.placement.confidence_level == pytest.approx(expected) and expected > 0.95
    history = flasheval.read_run(run)
    assert history.simultaneous == 5 and history.confidence_level == pytest.approx(expected)
    assert read_record(run / "run.json").payload["plan_level"] == 0.95
    with pytest.raises(flasheval.InputError, match="field 'simultaneous': .* 5, this one with 3"):
        flasheval.place_checkpoint(B, run=run, step=2, simultaneous=3)
    later = flasheval.place_checkpoint(B, run=run, step=2)  # left out: the run's K
    assert later.placement.confidence_level == pytest.approx(expected)


def test_checkpoints_beyond_the_planned_number_are_placed_at_the_same_level_and_said(tmp_path, caplog):
    run = tmp_path / "k2"
    for step in (1, 2):
        flasheval.place_checkpoint(B, run=run, step=step, reference="helm_lite", simultaneous=2)
    assert "more than" not in caplog.text
    with caplog.at_level(logging.WARNING):
        third = flasheval.place_checkpoint(B, run=run, step=3)
    assert third.placement.confidence_level == pytest.approx(0.975)
    # union bound for 3 intervals at 97.5% each: 1 - 3 * 0.025, computed here independently
    assert "3 checkpoints placed, more than the 2 planned" in caplog.text and ">= 92.5%" in caplog.text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"step": -1}, "field 'step': must be an integer >= 0, got -1"),
    ({"step": True}, "field 'step': must be an integer >= 0, got True"),
    ({"step": 1, "simultaneous": 0}, "field 'simultaneous': the planned number of checkpoints must be a whole "
                                     "number >= 1, got 0"),
    ({"step": 1, "output": "x"}, "field 'output': set by the run folder"),
    ({"step": 1}, "field 'reference': the first placement of a run needs its reference"),
])
def test_bad_arguments_are_one_line(tmp_path, kwargs, message):
    with pytest.raises(flasheval.InputError, match=message):
        flasheval.place_checkpoint(A, run=tmp_path / "r", **kwargs)
    assert not (tmp_path / "r" / "run.json").exists()


def test_a_malformed_record_is_one_line_naming_file_and_field(tmp_path, run_dir):
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(run_dir, run)
    path = run / "checkpoints" / "step-200" / "place.json"
    data = json.loads(path.read_text())
    del data["payload"]["compute"]["n_examples"]
    path.write_text(json.dumps(data))
    with pytest.raises(flasheval.InputError, match=r"step-200/place.json: field 'payload.compute.n_examples': missing"):
        flasheval.read_run(run)
    data = json.loads((run / "run.json").read_text())
    data["payload"]["settings"]["confidence_level"] = "high"
    (run / "run.json").write_text(json.dumps(data))
    with pytest.raises(flasheval.InputError,
                       match=r"run.json: field 'payload.settings.confidence_level': 'high' is not a finite number"):
        flasheval.read_run(run)
    with pytest.raises(flasheval.InputError, match="not a run folder"):
        flasheval.read_run(tmp_path)


def test_the_place_command_adds_a_checkpoint_to_a_run_and_refuses_half_of_run_and_step(run_dir, tmp_path, capsys):
    import shutil

    from flasheval.cli import main

    run_dir = shutil.copytree(run_dir, tmp_path / "copy")
    assert main(["place", "--model", B, "--run", str(run_dir), "--step", "250", "-q"]) == 0
    assert f"record: {run_dir / 'checkpoints' / 'step-250' / 'place.json'}" in capsys.readouterr().out
    assert [c.step for c in flasheval.read_run(run_dir).checkpoints] == [100, 200, 250]
    for argv, field in ((["--run", str(tmp_path / "x")], "--step"), (["--step", "5"], "--run"),
                        (["--run", str(run_dir), "--step", "5", "--output", str(tmp_path / "o")], "--output")):
        assert main(["place", "--model", B, *argv]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"flasheval: error: field '{field}': ") and err.count("\n") == 1, err
    assert not (run_dir / "checkpoints" / "step-5").exists()


def test_a_second_placement_waits_for_the_one_holding_the_run_folder(run_dir, tmp_path, caplog):
    import os
    import shutil
    import threading
    import time

    from flasheval.engine.store.shards import lock_folder

    run = shutil.copytree(run_dir, tmp_path / "copy")
    fd = lock_folder(run)  # another placement writing into the folder
    assert fd is not None
    released = []

    def release():
        time.sleep(1.0)
        released.append(time.time())
        os.close(fd)

    threading.Thread(target=release).start()
    with caplog.at_level(logging.WARNING):
        placed = flasheval.place_checkpoint(B, run=run, step=400)
    assert released and placed.record_path.stat().st_mtime >= released[0]  # written only once the lock was free
    assert "another placement is writing into run folder" in caplog.text and "waiting for it" in caplog.text


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"poll_seconds": 0}, "field '--poll': must be a number > 0, got 0"),
    ({"settle_seconds": -1}, "field '--settle': must be a number >= 0, got -1"),
    ({"distributed": "all"}, "field 'distributed': the watcher places from one process"),
])
def test_the_watcher_refuses_bad_options_in_one_line(tmp_path, kwargs, message):
    with pytest.raises(flasheval.InputError, match=message):
        flasheval.watch(tmp_path, reference="helm_lite", once=True, **kwargs)
    with pytest.raises(flasheval.InputError, match="no such folder of checkpoints"):
        flasheval.watch(tmp_path / "missing", reference="helm_lite", once=True)
    with pytest.raises(flasheval.InputError, match="no complete checkpoint to place yet"):
        flasheval.watch(tmp_path, reference="helm_lite", once=True)


def test_checkpoints_are_found_with_their_step_and_complete_only_when_every_file_is_there(tmp_path):
    import json
    import os

    from flasheval.runs.checkpoint_scan import find_checkpoints

    def folder(name, files):
        (tmp_path / name).mkdir()
        for file, text in files.items():
            (tmp_path / name / file).write_text(text)

    shards = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    index = json.dumps({"weight_map": dict(zip("ab", shards))})
    folder("checkpoint-500", {"config.json": "{}", "model.safetensors": "w"})  # no trainer_state.json yet
    folder("step700", {"config.json": "{}", "model.safetensors.index.json": index, "tokenizer.json": "{}",
                       "model-00001-of-00002.safetensors": "w"})  # one shard of two
    folder("final", {"config.json": "{}", "pytorch_model.bin": "w", "trainer_state.json": '{"global_step": 900}',
                     "tokenizer.model": "w"})
    folder("notes", {"readme.txt": "not a checkpoint"})
    (tmp_path / "model-step-300.gguf").write_text("gguf")
    (tmp_path / "other.gguf").write_text("no step in the name")
    found = find_checkpoints(tmp_path, settle_seconds=0)
    assert [(c.step, c.path.name, c.kind, c.waiting_for) for c in found] == [
        (300, "model-step-300.gguf", "gguf", ""),
        (500, "checkpoint-500", "hf", "trainer_state.json"),
        (700, "step700", "hf", "shards model-00002-of-00002.safetensors"),
        (900, "final", "hf", "")]
    assert found[0].spec == f"gguf:{tmp_path / 'model-step-300.gguf'}"
    # A file written a moment ago has not settled; the same file 10 s later has.
    (tmp_path / "step700" / "model-00002-of-00002.safetensors").write_text("w")
    now = os.stat(tmp_path / "step700" / "model-00002-of-00002.safetensors").st_mtime
    waiting = {c.step: c.waiting_for for c in find_checkpoints(tmp_path, settle_seconds=5, now=now + 1)}
    assert waiting[700] == "its files to stop changing for 5 s"
    assert {c.step: c.complete for c in find_checkpoints(tmp_path, settle_seconds=5, now=now + 10)}[700]


def test_a_run_keeps_the_plan_its_first_placement_was_given(tmp_path, capsys):
    # `place --run` used to need --tiers again (the reference was remembered, the plan was not: a plan file's name
    # matched nothing and the default plan was refused as "other settings"). run.json keeps the plan whole.
    from flasheval.cli import main

    plan = flasheval.load_plan("lean")
    from flasheval.placement.tiers import resolve_tier_plan

    text = resolve_tier_plan("lean").read_text(encoding="utf-8")
    custom = tmp_path / "my-plan.yaml"
    custom.write_text(text.replace("name: lean", "name: my-plan"), encoding="utf-8")
    run = tmp_path / "run"
    assert main(["place", "--model", A, "--run", str(run), "--step", "1", "--reference", "helm_lite",
                 "--tiers", str(custom), "-q"]) == 0
    assert main(["place", "--model", B, "--run", str(run), "--step", "2", "-q"]) == 0  # neither --reference nor --tiers
    history = flasheval.read_run(run)
    assert history.plan == "my-plan" and [c.step for c in history.checkpoints] == [1, 2]
    alone = flasheval.place(B, "helm_lite", plan=custom)
    second = read_record(history.checkpoints[1].record_path).payload
    assert second["stages"] == json.loads(json.dumps(alone.placement.to_json()))["stages"]
    assert plan.stages == flasheval.load_plan(custom).stages
    # Another plan under the same name (other stages) is refused, naming the plan.
    custom.write_text(text.replace("name: lean", "name: my-plan").replace("n_resamples: 2000", "n_resamples: 300"),
                      encoding="utf-8")
    capsys.readouterr()
    assert main(["place", "--model", B, "--run", str(run), "--step", "3", "--tiers", str(custom), "-q"]) == 1
    err = capsys.readouterr().err
    assert "field 'plan': this run's checkpoints are placed with plan 'my-plan' as its first placement gave it" in err
    assert err.count("\n") == 1 and not (run / "checkpoints" / "step-3").exists()
