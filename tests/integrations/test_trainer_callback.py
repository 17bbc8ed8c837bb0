"""``PlacementCallback`` in a real ``transformers.Trainer``: one process, then the Trainer example under a
2-process ``accelerate launch`` (CPU, gloo) in both modes.

* one process: the callback places at every ``every`` steps and at every save (once per step), each placement
  is one checkpoint of the run folder, and its metrics reach ``state.log_history`` and a callback registered
  through ``report_to`` (where W&B and TensorBoard sit: before the placement callback in the Trainer's list);
  the last placement equals ``flasheval.place`` of the trained model, called afresh;
* the callback is made for its Trainer (``attach``): without one it is refused when made, under another Trainer
  when training begins; the Trainer's wrapped model is unwrapped as the engine unwraps it (DDP stripped, FSDP1 kept);
  a sharded model with ``distributed="main"`` is refused, in one process and in a 2-process FSDP2 job where
  ``"all"`` places it in lockstep;
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
from flasheval.records.run_record import read_record
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


def _trainer(tmp_path, callbacks, *, evaluate=False, **args):
    from transformers import Trainer, TrainingArguments, default_data_collator

    tokenizer = LOOP.byte_tokenizer()
    arguments = TrainingArguments(output_dir=str(tmp_path / "trainer"), per_device_train_batch_size=2,
                                  learning_rate=3e-3, use_cpu=True, disable_tqdm=True, seed=0,
                                  save_only_model=True, **{"report_to": "none", "max_steps": 4, **args})
    data = TRAINER.training_data(tokenizer)
    return Trainer(model=LOOP.tiny_llama(0), args=arguments, processing_class=tokenizer, train_dataset=data,
                   eval_dataset=data if evaluate else None, data_collator=default_data_collator, callbacks=callbacks)


def test_the_callback_places_at_steps_and_saves_and_logs_through_the_trainer(world, tmp_path, monkeypatch):
    from transformers.integrations import integration_utils

    from flasheval.integrations.transformers import attach

    monkeypatch.setitem(integration_utils.INTEGRATION_TO_CALLBACK, RECORDER, Recorder)
    run = tmp_path / "run"
    trainer = _trainer(tmp_path, [], report_to=[RECORDER], save_strategy="steps", save_steps=3)
    placement = attach(trainer, world["reference"], run=run, every=2, on_save=True, plan=world["plan"])
    assert isinstance(placement, transformers.TrainerCallback)
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
        assert (entry["flasheval/examples"], entry["flasheval/tokens"]) == (checkpoint.n_examples, checkpoint.n_tokens)
        assert entry["flasheval/tier"] == int(checkpoint.tier.split("-")[0].rstrip("+"))
    # The last placement (step 4, the end of training) is the trained model's: placed afresh, no store, the same.
    fresh = flasheval.place(trainer.model, world["reference"], tokenizer=trainer.processing_class, plan=world["plan"])
    last = placement.placements[4].placement.to_json()
    for key in ("rank", "interval", "tier", "status", "stages", "compute"):
        assert last[key] == fresh.placement.to_json()[key], key
    assert trainer.model.training


def test_a_model_wrapped_in_ddp_is_placed_unwrapped(world, tmp_path):
    # A one-process gloo group made (and destroyed) by this test; the Trainer holds the DDP wrapper as its
    # model_wrapped, as it does under data parallelism.
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from flasheval.integrations.transformers import attach

    trainer = _trainer(tmp_path, [])
    placement = attach(trainer, world["reference"], run=tmp_path / "run", every=1, plan=world["plan"])
    trainer.state.global_step = 1
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        trainer.model_wrapped = DistributedDataParallel(trainer.model)
        placement.on_step_end(trainer.args, trainer.state, trainer.control, model=trainer.model,
                              processing_class=trainer.processing_class)
    finally:
        dist.destroy_process_group()
    bare = flasheval.place(trainer.model, world["reference"], tokenizer=trainer.processing_class, plan=world["plan"])
    assert placement.placements[1].placement.to_json()["stages"] == bare.placement.to_json()["stages"]
    assert trainer.state.log_history[-1]["flasheval/rank"] == bare.rank


SHARDED = ("field 'distributed': 'main' places on process zero alone, but the model is sharded (FSDP or DeepSpeed "
           "ZeRO-3: each forward pass runs on every process together): give distributed=\"all\" (every process places, "
           "in lockstep)")


@pytest.fixture
def one_process_group(tmp_path):
    """A one-process gloo group, made and destroyed by the test (FSDP needs one)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def two_processes(monkeypatch):
    """The refusal of a sharded model under "main" as a group of two processes sees it (a group of one is not
    refused: its process zero is every process); the real 2-process job is ``_sharded_callback_worker``."""
    monkeypatch.setattr("flasheval.engine.hf.in_memory.caller_group", lambda: (2, None))


def test_an_fsdp1_model_is_placed_through_its_wrapper(world, tmp_path, one_process_group, two_processes):
    # Under FSDP1 the Trainer holds the FullyShardedDataParallel wrapper as its model and model_wrapped (the callback
    # handler's model= is the bare module inside, whose parameters the wrapper manages). The engine's unwrap keeps the
    # wrapper as the runner (it gathers the parameters): every forward pass of the placement goes through it, where
    # transformers' unwrap_model would strip it. On one process FSDP keeps whole parameters (NO_SHARD), so the
    # placement equals the bare model's. A sharded model takes distributed="all" ("main" is refused).
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    from flasheval.integrations.transformers import attach

    trainer = _trainer(tmp_path, [])
    bare = trainer.model
    wrapped = FullyShardedDataParallel(bare, device_id=torch.device("cpu"), use_orig_params=True)
    trainer.model = trainer.model_wrapped = wrapped
    with pytest.raises(flasheval.InputError) as caught:
        attach(trainer, world["reference"], run=tmp_path / "main", every=1, plan=world["plan"])
    assert str(caught.value) == SHARDED
    placement = attach(trainer, world["reference"], run=tmp_path / "run", every=1, plan=world["plan"],
                       distributed="all")
    passes = []
    wrapped.register_forward_pre_hook(lambda module, args: passes.append(len(passes)))
    trainer.state.global_step = 1
    placement.on_step_end(trainer.args, trainer.state, trainer.control, model=bare,
                          processing_class=trainer.processing_class)
    assert passes  # scored through the wrapper
    alone = flasheval.place(LOOP.tiny_llama(0), world["reference"], tokenizer=trainer.processing_class,
                            plan=world["plan"])
    for key in ("rank", "interval", "tier", "status", "stages", "compute"):
        assert placement.placements[1].placement.to_json()[key] == alone.placement.to_json()[key], key


def test_a_sharded_model_with_main_is_refused_when_made_and_when_training_begins(world, tmp_path,
                                                                                  one_process_group, two_processes):
    # FSDP2 (fully_shard: parameters become DTensors, every forward pass gathers them from every process): process
    # zero cannot place it alone. Refused when the callback is made if the Trainer's model is sharded then or the
    # Trainer is set to shard it (FSDP through accelerate), and as training begins (on every process alike, before
    # the first step) if it was sharded after.
    from torch.distributed.fsdp import fully_shard

    from flasheval.integrations.transformers import attach

    sharded = _trainer(tmp_path / "sharded", [])
    fully_shard(sharded.model)
    with pytest.raises(flasheval.InputError) as caught:
        attach(sharded, "tiny", run=tmp_path / "run", every=1)
    assert str(caught.value) == SHARDED
    assert attach(sharded, world["reference"], run=tmp_path / "run", every=1, plan=world["plan"],
                  distributed="all").distributed == "all"

    configured = _trainer(tmp_path / "configured", [])
    configured.is_fsdp_enabled = True  # as accelerate's FSDP plugin sets it (a GPU launch): the model is wrapped later
    with pytest.raises(flasheval.InputError, match="give distributed=\"all\""):
        attach(configured, "tiny", run=tmp_path / "run", every=1)

    later = _trainer(tmp_path / "later", [])
    attach(later, world["reference"], run=tmp_path / "run", every=1, plan=world["plan"])
    fully_shard(later.model)
    with pytest.raises(flasheval.InputError) as caught:
        later.train()
    assert str(caught.value) == SHARDED
    assert later.state.global_step == 0 and not (tmp_path / "run").exists()


def test_a_callback_without_its_trainer_is_refused_when_made(tmp_path):
    # The trap of old: a callback handed to Trainer(callbacks=[...]) without its Trainer stopped training at its
    # start. It cannot be made without one now: one line naming attach(...), before any Trainer runs.
    from flasheval.integrations.transformers import PlacementCallback

    for trainer, got in ((None, "none"), (LOOP.tiny_llama(0), "LlamaForCausalLM")):
        with pytest.raises(flasheval.InputError) as caught:
            PlacementCallback("tiny", trainer=trainer, run=tmp_path / "run", every=2)
        assert str(caught.value) == (f"field 'trainer': the callback needs the transformers.Trainer that runs it, "
                                     f"got {got}: attach(trainer, reference, run=...) makes it for the Trainer and "
                                     "adds it")
    assert not (tmp_path / "run").exists()


def test_a_callback_made_for_its_trainer_and_added_places_and_one_run_by_another_refuses(world, tmp_path):
    # TRL's shape: PlacementCallback(..., trainer=trainer) then trainer.add_callback; attach() does both. A callback
    # made for one Trainer and given to another refuses to train, before the first step.
    from flasheval.integrations.transformers import PlacementCallback

    trainer = _trainer(tmp_path / "own", [], max_steps=2)
    placement = PlacementCallback(world["reference"], trainer=trainer, run=tmp_path / "run", every=2,
                                  plan=world["plan"])
    assert placement.trainer is trainer
    trainer.add_callback(placement)
    trainer.train()
    assert sorted(placement.placements) == [2]
    assert [e["step"] for e in trainer.state.log_history if "flasheval/rank" in e] == [2]

    stray = PlacementCallback(world["reference"], trainer=_trainer(tmp_path / "made-for", []), run=tmp_path / "stray",
                              every=1, plan=world["plan"])
    other = _trainer(tmp_path / "other", [stray])
    with pytest.raises(flasheval.InputError) as caught:
        other.train()
    assert str(caught.value) == ("field 'trainer': the callback was made for another Trainer than the one that runs "
                                 "it: attach(trainer, reference, run=...) makes it for a Trainer and adds it there")
    assert other.state.global_step == 0 and not (tmp_path / "stray").exists()


def test_all_without_a_process_group_is_refused_when_made(tmp_path):
    from flasheval.integrations.transformers import attach

    trainer = _trainer(tmp_path, [])
    with pytest.raises(flasheval.InputError, match="field 'distributed': 'all' needs the caller's torch.distributed"):
        attach(trainer, "tiny", run=tmp_path / "run", every=1, distributed="all")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"every": 0}, "field 'every': must be an integer >= 1, got 0"),
    ({"every": True}, "field 'every': must be an integer >= 1, got True"),
    ({}, "field 'every': give every=N (place every N steps) or on_save=True (place every saved checkpoint)"),
    ({"on_save": "yes"}, "field 'on_save': must be True or False, got 'yes'"),
    ({"every": 2, "distributed": "rank0"}, "field 'distributed': unknown value 'rank0' (allowed: main, all)"),
    ({"every": 2, "identity": "run/x"}, "field 'identity': set by the callback for each placement (the Trainer's "
                                        "model, its global_step, the run's NAME/step-N)"),
    ({"every": 2, "plna": "default"}, "field 'plna': not a keyword of flasheval.place_checkpoint (allowed: aggregate, "),
    ({"every": 2, "max_seconds": 0}, "field '--max-seconds': must be a positive number, got 0"),
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
    # 25 s idle, 60-90 s on a loaded 2-core machine: one launch (2 processes importing torch and transformers), three
    # trainings of 20 steps (2 placements each in two of them), then `flasheval watch --once` on the saved checkpoints.
    from flasheval.report.run_section import tier_text
    from tests.engine.test_distributed import launch, one_thread

    example = TRAINER
    root = world["root"]
    launch(EXAMPLES / "trainer_placement.py", str(world["task_dir"]), str(root), "--modes", "main,all,none",
           timeout=240)
    steps = list(range(example.PLACE_EVERY, example.STEPS + 1, example.PLACE_EVERY))
    # Every placement falls on a logging step (PLACE_EVERY a multiple of LOGGING_STEPS): both processes trained every
    # step (rc 0, no collective mismatch at the loss gather), and the losses are those of the training without the
    # callback ("none"), logged at every logging step.
    assert all(step % example.LOGGING_STEPS == 0 for step in steps)
    unplaced = json.loads((root / "none" / "process-0.json").read_text())["losses"]
    assert sorted(map(int, unplaced)) == list(range(example.LOGGING_STEPS, example.STEPS + 1, example.LOGGING_STEPS))
    for mode in MODES:
        assert json.loads((root / mode / "process-0.json").read_text())["losses"] == unplaced, mode
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
        history = flasheval.read_run(folder)
        for c in history.checkpoints:
            tier = tier_text(c, history.tiers)  # the tier within the pool's ranks
            assert f"| {c.step} | {c.model_id} | {c.rank} | [{c.interval[0]}, {c.interval[1]}] | {tier} |" in report
        assert "Rank against step" in (folder / "report.html").read_text(encoding="utf-8")


def _losses(trainer) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}


@pytest.fixture(scope="module")
def unplaced_losses(tmp_path_factory):
    """The loss logs of the 20-step training below without any placement callback (the baseline)."""
    trainer = _trainer(tmp_path_factory.mktemp("baseline"), [], max_steps=20, logging_steps=5)
    trainer.train()
    return _losses(trainer)


@pytest.mark.parametrize("every", [10, 3], ids=["every-multiple-of-logging", "every-coprime-with-logging"])
def test_placements_leave_every_loss_log_as_without_the_callback(world, tmp_path, unplaced_losses, every):
    # `trainer.log` runs the Trainer's on_log handler, which clears control.should_log: at a placement on a logging
    # step the step's loss log (and, under data parallelism, its collective loss gather) was skipped on this
    # process alone. The callback puts every flag back: the losses are those of a training without it.
    from flasheval.integrations.transformers import attach

    trainer = _trainer(tmp_path, [], max_steps=20, logging_steps=5)
    placement = attach(trainer, world["reference"], run=tmp_path / "run", every=every, plan=world["plan"])
    trainer.train()
    assert sorted(placement.placements) == list(range(every, 21, every))
    assert sorted(unplaced_losses) == [5, 10, 15, 20]
    assert _losses(trainer) == unplaced_losses  # every loss log present, each the same number
    steps = [e["step"] for e in trainer.state.log_history if "flasheval/rank" in e]
    assert steps == list(range(every, 21, every))


def test_tensorboard_shows_the_placements_under_the_documented_tags(world, tmp_path):
    # TensorBoardCallback (report_to="tensorboard") writes what trainer.log hands it, through transformers'
    # rewrite_logs: every training log under "train/" (train/loss), so the placement's tags are train/flasheval/*, as
    # the table in docs/runs.md ("In the trackers") says: every placement is there under each of its tags.
    from flasheval.integrations.placing import METRIC_NAMES
    from flasheval.integrations.transformers import attach
    from tests.integrations._trackers import documented_tags, tensorboard_scalars

    trainer = _trainer(tmp_path, [], report_to="tensorboard", logging_steps=2)
    placement = attach(trainer, world["reference"], run=tmp_path / "run", every=2, plan=world["plan"])
    trainer.train()  # events under OUTPUT_DIR/runs/ (TensorBoardCallback's default folder)
    scalars = tensorboard_scalars(tmp_path / "trainer")
    tags = documented_tags(column=1)
    assert sorted(tags) == sorted(f"flasheval/{name}" for name in METRIC_NAMES)
    logged = {e["step"]: e for e in trainer.state.log_history if "flasheval/rank" in e}
    assert sorted(logged) == sorted(placement.placements) == [2, 4]
    for name, tag in tags.items():
        assert {step: pytest.approx(value) for step, value in scalars[tag].items()} == \
            {step: entry[name] for step, entry in logged.items()}, tag
    assert {step: int(value) for step, value in scalars["train/flasheval/rank"].items()} == \
        {step: placement.placements[step].rank for step in (2, 4)}
    assert "train/loss" in scalars  # the loss logs at the same steps are there too


def test_a_placement_on_save_is_in_the_saved_checkpoints_trainer_state(world, tmp_path):
    # on_save=True places before the Trainer writes the checkpoint (at the step it is about to save), so the
    # checkpoint's trainer_state.json holds the placement: resume_from_checkpoint keeps it in log_history. A save
    # decided after the step's callbacks (save_strategy="best", after an evaluation) is placed in on_save and
    # written into that checkpoint's trainer_state.json.
    from flasheval.integrations.transformers import attach

    for strategy, extra in (("steps", {"save_steps": 3}),
                            ("best", {"eval_strategy": "steps", "eval_steps": 2, "metric_for_best_model": "loss",
                                      "evaluate": True})):
        folder = tmp_path / strategy
        trainer = _trainer(folder, [], save_strategy=strategy, **extra)
        placement = attach(trainer, world["reference"], run=folder / "run", on_save=True, plan=world["plan"])
        trainer.train()
        saved = sorted((folder / "trainer").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        assert saved, strategy
        for checkpoint in saved:
            step = int(checkpoint.name.split("-")[1])
            state = json.loads((checkpoint / "trainer_state.json").read_text())
            placed = [e for e in state["log_history"] if "flasheval/rank" in e]
            assert placed and placed[-1]["step"] == step, (strategy, step)
            assert placed[-1]["flasheval/rank"] == placement.placements[step].rank


def test_a_bf16_trainer_places_as_its_saved_weights_do(world, tmp_path):
    # Trainer(bf16=True) prepares the model with accelerate's bf16 autocast wrapper around its forward, while its
    # parameters stay float32. The callback scores the weights as they are (autocast off, wrapper put back): the same
    # placement, example for example, as `flasheval place` of the checkpoint the Trainer saved at that step.
    from flasheval.integrations.transformers import attach

    trainer = _trainer(tmp_path, [], bf16=True, save_strategy="steps", save_steps=4)
    placement = attach(trainer, world["reference"], run=tmp_path / "run", every=4, plan=world["plan"])
    assert "forward" in vars(trainer.model) or trainer.accelerator.mixed_precision == "bf16"
    trainer.train()
    assert "forward" in vars(trainer.model)  # accelerate's autocast wrapper is still there for training
    in_memory = placement.placements[4]
    saved = flasheval.place(f"hf:{tmp_path / 'trainer' / 'checkpoint-4'}", world["reference"], plan=world["plan"],
                            output=tmp_path / "saved")
    assert in_memory.live.dtype == saved.live.dtype == "float32"
    for key in ("rank", "interval", "tier", "status", "stages", "compute"):
        assert in_memory.placement.to_json()[key] == saved.placement.to_json()[key], key
    assert [e["score"] for e in in_memory.live.examples] == [e["score"] for e in saved.live.examples]
    # The scores above are accuracies, which bf16 rarely flips on a tiny model: the log-likelihoods each stored is
    # the sharp check (bf16 matrix products differ from float32 ones in their last bits and more).
    from flasheval.engine.store.results import ResultStore

    stored = [ResultStore(folder, fingerprint=run.live.fingerprint, writer=False).results()
              for folder, run in ((tmp_path / "run" / "store", in_memory), (tmp_path / "saved" / "store", saved))]
    assert stored[0].keys() == stored[1].keys() and stored[0]
    for key, result in stored[0].items():
        assert abs(result.logprob_sum - stored[1][key].logprob_sum) < 1e-4, key


def test_a_time_budget_ends_each_placement_unresolved_with_its_interval_so_far(world, tmp_path):
    # max_seconds below what a second stage needs: each placement keeps its first stage's interval, is recorded
    # "unresolved at budget" and logs resolved 0; training goes on.
    from flasheval.integrations.transformers import attach

    trainer = _trainer(tmp_path, [])
    placement = attach(trainer, world["reference"], run=tmp_path / "run", every=2, plan=world["plan"],
                       max_seconds=1e-6)
    trainer.train()
    free = flasheval.place(trainer.model, world["reference"], tokenizer=trainer.processing_class,
                           plan=world["plan"], budget=flasheval.Budget(max_examples=10**9))  # the same Pocock looks
    assert len(free.placement.stages) > 1
    last = placement.placements[4].placement
    assert last.status == "unresolved at budget" and "s > budget" in last.reason
    assert [s.interval for s in last.stages] == [free.placement.stages[0].interval]
    history = flasheval.read_run(tmp_path / "run")
    assert [(c.step, c.status) for c in history.checkpoints] == [(2, "unresolved at budget"), (4, "unresolved at budget")]
    assert [e["flasheval/resolved"] for e in trainer.state.log_history if "flasheval/resolved" in e] == [0, 0]
    with pytest.raises(flasheval.InputError, match="field 'max_seconds': given twice"):
        flasheval.place_checkpoint(trainer.model, run=tmp_path / "run", step=6, tokenizer=trainer.processing_class,
                                   max_seconds=5, budget=flasheval.Budget(max_seconds=9))


@pytest.mark.slow  # two processes importing torch and transformers, one placement in lockstep: ~30-60 s on 2 cores
def test_a_sharded_trainer_model_is_refused_with_main_and_placed_with_all_on_two_processes(world, tmp_path):
    # A real 2-process FSDP2 job (torchrun, gloo on CPU; _sharded_callback_worker.py): the Trainer's model is sharded,
    # so "main" is refused on both processes when the callback is made, and "all" places in lockstep: both processes
    # get and log the same placement, equal to one process placing the same (unsharded) weights here.
    import os
    import subprocess

    from tests.engine.test_distributed import _free_port, one_thread

    pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 needs torch.distributed")
    worker = REPO_ROOT / "tests" / "integrations" / "_sharded_callback_worker.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
               str(_free_port()), str(worker), str(world["reference"]), str(world["plan"]), str(tmp_path / "run"),
               str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["refused"] for r in ranks] == [SHARDED, SHARDED]
    assert [r["group"] for r in ranks] == [2, 2]  # the job's group is still there
    assert ranks[0]["placement"] == ranks[1]["placement"]
    assert [_without_seconds(e) for e in ranks[0]["logged"]] == [_without_seconds(e) for e in ranks[1]["logged"]]
    assert [e["step"] for e in ranks[0]["logged"]] == [1]
    alone = one_thread(lambda: flasheval.place(LOOP.tiny_llama(0), world["reference"], tokenizer=LOOP.byte_tokenizer(),
                                               plan=world["plan"]))
    for key, value in ranks[0]["placement"].items():
        assert value == json.loads(json.dumps(alone.placement.to_json()[key])), key
    assert [c.step for c in flasheval.read_run(tmp_path / "run").checkpoints] == [1]
