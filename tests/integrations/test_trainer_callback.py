"""``PlacementCallback`` in a real ``transformers.Trainer``: one process, then the Trainer example under a
2-process ``accelerate launch`` (CPU, gloo) in both modes.

* one process: the callback places at every ``every`` steps and at every save (once per step), each placement
  is one checkpoint of the run folder, and its metrics reach ``state.log_history`` and a callback registered
  through ``report_to`` (where W&B and TensorBoard sit: before the placement callback in the Trainer's list);
  the last placement equals ``flasheval.place`` of the trained model, called afresh;
* two processes (``docs/examples/trainer_placement.py``): no hang, both processes train every step with
  placements in between, one record per placement, the same results in both modes, equal to what
  ``flasheval watch DIR --once`` places from the checkpoints the Trainer saved, and the run report draws rank
  against step.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

import flasheval
from flasheval.cli import main as cli
from flasheval.records import read_record
from tests.conftest import REPO_ROOT

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

EXAMPLES = REPO_ROOT / "docs" / "examples"
RECORDER = "flasheval-test-recorder"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _example_placement():
    sys.path.insert(0, str(EXAMPLES))  # the example imports its sibling train_and_place, as a script does
    try:
        return _example("trainer_placement")
    finally:
        sys.path.remove(str(EXAMPLES))


LOOP = _example("train_and_place")  # the tiny Llama, the byte tokenizer, the reference and the plan
TRAINER = _example_placement()  # the Trainer example: its training data, steps and placement interval


@pytest.fixture(scope="module")
def world(tmp_path_factory, task_dir):
    """The Trainer example's folder with its small live reference and tier plan built (as the example builds them)."""
    root = tmp_path_factory.mktemp("trainer")
    LOOP.build_small_reference(task_dir, root)
    (root / "plan.yaml").write_text(LOOP.PLAN, encoding="utf-8")
    return {"root": root, "reference": root / "refs" / "tiny", "plan": root / "plan.yaml", "task_dir": task_dir}


class Recorder(transformers.TrainerCallback):
    """Registered through ``report_to``, as W&B and TensorBoard are: keeps what ``on_log`` hands it."""

    def __init__(self):
        self.logged = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logged.append(dict(logs))


def _metrics(entries) -> list[dict]:
    return [{k: v for k, v in e.items() if k.startswith("flasheval/")} for e in entries
            if any(k.startswith("flasheval/") for k in e)]


def _trainer(tmp_path, callbacks, **args):
    from transformers import Trainer, TrainingArguments, default_data_collator

    tokenizer = LOOP.byte_tokenizer()
    arguments = TrainingArguments(output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=2,
                                  learning_rate=3e-3, use_cpu=True, disable_tqdm=True, seed=0,
                                  save_only_model=True, **{"report_to": "none", "max_steps": 4, **args})
    return Trainer(model=LOOP.tiny_llama(0), args=arguments, processing_class=tokenizer,
                   train_dataset=TRAINER.training_data(tokenizer), data_collator=default_data_collator,
                   callbacks=callbacks)


def test_the_callback_places_at_steps_and_saves_and_logs_through_the_trainer(world, tmp_path, monkeypatch):
    from transformers.integrations import integration_utils

    from flasheval.integrations.transformers import PlacementCallback

    monkeypatch.setitem(integration_utils.INTEGRATION_TO_CALLBACK, RECORDER, Recorder)
    run = tmp_path / "run"
    placement = PlacementCallback(world["reference"], run=run, every=2, on_save=True, plan=world["plan"])
    assert isinstance(placement, transformers.TrainerCallback)
    trainer = _trainer(tmp_path, [placement], report_to=[RECORDER], save_strategy="steps", save_steps=3)
    placement.set_trainer(trainer)
    recorder = next(c for c in trainer.callback_handler.callbacks if isinstance(c, Recorder))
    order = trainer.callback_handler.callbacks
    assert order.index(recorder) < order.index(placement)  # as W&B: on_log runs before the placement callback's
    trainer.train()

    # every 2 steps (2, 4) and every save (3, and 4 at the end: placed once)
    assert sorted(placement.placements) == [2, 3, 4]
    logged = [e for e in trainer.state.log_history if "flasheval/rank" in e]
    assert [e["step"] for e in logged] == [2, 3, 4]
    assert _metrics(recorder.logged) == _metrics(logged)  # the report_to integration got every placement
    history = flasheval.read_run(run)
    assert [c.step for c in history.checkpoints] == [2, 3, 4]  # one record per placement, in the run folder
    for entry, checkpoint in zip(logged, history.checkpoints):
        assert (entry["flasheval/rank"], entry["flasheval/rank_lo"], entry["flasheval/rank_hi"]) == \
            (checkpoint.rank, *checkpoint.interval)
        assert (entry["flasheval/examples"], entry["flasheval/tokens"]) == (checkpoint.examples, checkpoint.tokens)
        assert entry["flasheval/tier"] == int(checkpoint.tier.split("-")[0].rstrip("+"))
    # The last placement (step 4, the end of training) is the trained model's: placed afresh, no store, the same.
    fresh = flasheval.place(trainer.model, world["reference"], tokenizer=trainer.processing_class, plan=world["plan"])
    last = placement.placements[4].placement.to_json()
    for key in ("rank", "interval", "tier", "status", "stages", "compute"):
        assert last[key] == fresh.placement.to_json()[key], key
    assert trainer.model.training


def test_a_model_wrapped_in_ddp_is_placed_unwrapped(world, tmp_path):
    # A one-process gloo group made (and destroyed) by this test; the callback is handed the DDP wrapper.
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from flasheval.integrations.transformers import PlacementCallback

    placement = PlacementCallback(world["reference"], run=tmp_path / "run", every=1, plan=world["plan"])
    trainer = _trainer(tmp_path, [placement])
    placement.set_trainer(trainer)
    trainer.state.global_step = 1
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        wrapped = DistributedDataParallel(trainer.model)
        placement.on_step_end(trainer.args, trainer.state, trainer.control, model=wrapped,
                              processing_class=trainer.processing_class)
    finally:
        dist.destroy_process_group()
    bare = flasheval.place(trainer.model, world["reference"], tokenizer=trainer.processing_class, plan=world["plan"])
    assert placement.placements[1].placement.to_json()["stages"] == bare.placement.to_json()["stages"]
    assert trainer.state.log_history[-1]["flasheval/rank"] == bare.rank


def test_an_unbound_callback_refuses_to_train(tmp_path):
    from flasheval.integrations.transformers import PlacementCallback

    placement = PlacementCallback("tiny", run=tmp_path / "run", every=2)
    trainer = _trainer(tmp_path, [placement])
    with pytest.raises(flasheval.InputError, match=r"placement.set_trainer\(trainer\)"):
        trainer.train()
    placement.set_trainer(_trainer(tmp_path, []))  # another Trainer than the one that runs it
    with pytest.raises(flasheval.InputError, match="not bound to the Trainer that runs it"):
        trainer.train()
    assert not (tmp_path / "run").exists()


def test_all_without_a_process_group_is_refused_before_the_first_step(tmp_path):
    from flasheval.integrations.transformers import PlacementCallback

    placement = PlacementCallback("tiny", run=tmp_path / "run", every=1, distributed="all")
    trainer = _trainer(tmp_path, [placement])
    placement.set_trainer(trainer)
    with pytest.raises(flasheval.InputError, match="field 'distributed': 'all' needs the caller's torch.distributed"):
        trainer.train()
    assert trainer.state.global_step == 0 and not (tmp_path / "run").exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"every": 0}, "field 'every': must be an integer >= 1, got 0"),
    ({"every": True}, "field 'every': must be an integer >= 1, got True"),
    ({}, "field 'every': give every=N (place every N steps) or on_save=True (place every saved checkpoint)"),
    ({"on_save": "yes"}, "field 'on_save': must be True or False, got 'yes'"),
    ({"every": 2, "distributed": "rank0"}, "field 'distributed': unknown value 'rank0' (allowed: main, all)"),
    ({"every": 2, "identity": "run/x"}, "field 'identity': set by the callback for each placement (the Trainer's "
                                        "model, its global_step, the run's NAME/step-N)"),
    ({"every": 2, "plna": "default"}, "field 'plna': not a keyword of flasheval.place_checkpoint (allowed: aggregate, "),
])
def test_bad_callback_options_are_one_line(kwargs, message):
    from flasheval.integrations.transformers import PlacementCallback

    with pytest.raises(flasheval.InputError) as caught:
        PlacementCallback("tiny", run="runs/x", **kwargs)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


MODES = ("main", "all")


def _without_seconds(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "flasheval/seconds"}


@pytest.mark.slow
def test_the_trainer_example_under_a_two_process_launch_in_both_modes(world):
    # 25 s idle, 60-90 s on a loaded 2-core machine: one launch (2 processes importing torch and transformers), two
    # trainings of 30 steps with 3 placements each, then `flasheval watch --once` on the four saved checkpoints.
    from tests.engine.test_distributed import launch, one_thread

    example = TRAINER
    root = world["root"]
    launch(EXAMPLES / "trainer_placement.py", str(world["task_dir"]), str(root), timeout=240)
    steps = list(range(example.PLACE_EVERY, example.STEPS + 1, example.PLACE_EVERY))
    logged = {}
    for mode in MODES:
        seen = [json.loads((root / mode / f"process-{i}.json").read_text()) for i in (0, 1)]
        assert [s["world_size"] for s in seen] == [2, 2]
        assert [s["global_step"] for s in seen] == [example.STEPS] * 2  # trained on after every placement
        placing = (0, 1) if mode == "all" else (0,)
        for i, s in enumerate(seen):
            assert s["placed"] == (steps if i in placing else [])
            assert [e["step"] for e in s["log_history"]] == (steps if i in placing else [])
            assert _metrics(s["report_to"]) == _metrics(s["log_history"])
        history = flasheval.read_run(root / "runs" / mode)
        assert [c.step for c in history.checkpoints] == steps  # one record per placement
        logged[mode] = [_without_seconds(e) for e in seen[0]["log_history"]]
        if mode == "all":
            assert [_without_seconds(e) for e in seen[1]["log_history"]] == logged[mode]  # the same on both
    assert logged["main"] == logged["all"]
    records = {mode: [read_record(c.record_path).payload for c in flasheval.read_run(root / "runs" / mode).checkpoints]
               for mode in MODES}
    for main_record, all_record in zip(records["main"], records["all"]):
        for key in ("rank", "interval", "tier", "status", "stages", "compute"):
            assert main_record[key] == all_record[key], key
        assert main_record["live"]["examples"] == all_record["live"]["examples"]
    # `flasheval watch DIR --once` on the checkpoints the Trainer saved: every one placed, in step order, each the
    # same placement as the callback's of the same weights in memory.
    watched = root / "watched"
    assert one_thread(lambda: cli(["watch", str(root / "main"), "--reference", str(world["reference"]), "--tiers",
                                   str(world["plan"]), "--device", "cpu", "--run", str(watched), "--once",
                                   "--settle", "0", "-q"])) == 0
    saved = flasheval.read_run(watched).checkpoints
    assert [c.step for c in saved] == sorted({*steps, example.STEPS})
    for index, step in enumerate(steps):
        on_disk = read_record(saved[index].record_path).payload
        for key in ("rank", "interval", "tier", "status", "stages", "compute"):
            assert records["main"][index][key] == on_disk[key], (step, key)
        assert records["main"][index]["live"]["examples"] == on_disk["live"]["examples"]
    # The run report the example rendered: rank against step (the figure) and one row per checkpoint.
    for mode in MODES:
        folder = root / "runs" / mode
        report = (folder / "report.md").read_text(encoding="utf-8")
        assert "![Rank against step" in report and (folder / "figures" / "run-ranks.png").stat().st_size > 1000
        for c in flasheval.read_run(folder).checkpoints:
            assert f"| {c.step} | {c.model} | {c.rank} | [{c.interval[0]}, {c.interval[1]}] | {c.tier} |" in report
        assert "Rank against step" in (folder / "report.html").read_text(encoding="utf-8")
