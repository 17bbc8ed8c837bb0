"""``flasheval.integrations.lightning.PlacementCallback`` in a real ``lightning.Trainer``: one process, then the
example (``docs/examples/lightning_placement.py``) under ``strategy="ddp"`` on 2 CPU processes (gloo) in both modes.

* one process: the callback places at every ``every`` steps and at every ``ModelCheckpoint`` save (once per step),
  each placement one checkpoint of the run folder, equal (example for example) to ``flasheval.place_checkpoint`` of
  the ``.ckpt`` Lightning saved at that step, loaded afterwards; the TensorBoard event files and the CSV log hold
  every placement under the names docs/runs.md documents; the host's RNG states, modes and grad mode are as before
  each placement; bad options are refused in one line when made, the rest when training begins (before a step);
* two processes: Lightning's ddp launcher runs the example again as the second process; both train every step, the
  run folders of ``main`` and ``all`` hold the same placements, equal to placing the saved checkpoints afterwards,
  and the TensorBoard events written by global rank zero hold each of them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import flasheval
from flasheval.integrations.placing import METRIC_NAMES, placement_metrics
from flasheval.records.run_record import read_record
from tests.conftest import REPO_ROOT
from tests.integrations._trackers import documented_tags, tensorboard_scalars

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
L = pytest.importorskip("lightning")

EXAMPLES = REPO_ROOT / "docs" / "examples"
KEYS = ("rank", "interval", "tier", "status", "stages", "compute")


def _example():
    sys.path.insert(0, str(EXAMPLES))  # the example imports its siblings, as a script does
    try:
        spec = importlib.util.spec_from_file_location("lightning_placement", EXAMPLES / "lightning_placement.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(EXAMPLES))


EXAMPLE = _example()
LOOP = sys.modules["train_and_place"]  # the tiny Llama, the byte tokenizer, the reference and the plan
PLACED = sorted({*range(EXAMPLE.PLACE_EVERY, EXAMPLE.STEPS + 1, EXAMPLE.PLACE_EVERY),
                 *range(EXAMPLE.SAVE_EVERY, EXAMPLE.STEPS + 1, EXAMPLE.SAVE_EVERY)})
SAVED = list(range(EXAMPLE.SAVE_EVERY, EXAMPLE.STEPS + 1, EXAMPLE.SAVE_EVERY))


@pytest.fixture(scope="module")
def world(tmp_path_factory, task_dir):
    """The small live reference and tier plan the example builds, built once here."""
    root = tmp_path_factory.mktemp("lightning")
    LOOP.build_small_reference(task_dir, root)
    (root / "plan.yaml").write_text(LOOP.PLAN, encoding="utf-8")
    return {"root": root, "reference": root / "refs" / "tiny", "plan": root / "plan.yaml", "task_dir": task_dir}


def _host_state(pl_module) -> tuple:
    """What a guest must leave as it found it: every global RNG, the modes, grad mode."""
    return (torch.get_rng_state().numpy().tobytes(), random.getstate(), np.random.get_state()[1].tobytes(),
            pl_module.training, pl_module.model.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled())


class Guard(L.Callback):
    """Registered before (``notes`` the host's state) and after (``compares``) the placement callback."""

    def __init__(self, notes: list, *, compare: bool):
        self.notes, self.compare, self.checked = notes, compare, 0

    def _look(self, pl_module) -> None:
        if self.compare:
            assert _host_state(pl_module) == self.notes[-1]
            self.checked += 1
        else:
            self.notes.append(_host_state(pl_module))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._look(pl_module)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._look(pl_module)


def _saved_model(path):
    """The causal LM of a ``.ckpt`` Lightning saved (the LightningModule's ``model.`` keys), loaded afresh."""
    state = torch.load(path, map_location="cpu", weights_only=True)["state_dict"]
    model = LOOP.tiny_llama(0)
    model.load_state_dict({key.removeprefix("model."): value for key, value in state.items()})
    return model


def _same_placement(got: dict, expected: dict, where) -> None:
    for key in KEYS:
        assert got[key] == expected[key], (where, key)
    assert [e["score"] for e in got["live"]["examples"]] == [e["score"] for e in expected["live"]["examples"]], where


def _placed_afresh(world, root, mode, tmp_path) -> dict[int, dict]:
    """``place_checkpoint`` of every checkpoint Lightning saved, loaded after training, into a run of its own
    (one torch thread: the launched processes run so, and a matmul split otherwise may round differently)."""
    from tests.engine.test_distributed import one_thread

    placed = {}
    for step in SAVED:
        model = _saved_model(root / "checkpoints" / mode / f"step-{step}.ckpt")
        run = one_thread(lambda: flasheval.place_checkpoint(model, run=tmp_path / "afresh" / mode, step=step,
                                                            reference=world["reference"], plan=world["plan"],
                                                            tokenizer=LOOP.byte_tokenizer()))
        placed[step] = read_record(run.record_path).payload
    return placed


def _check_trackers(root, mode, records: dict[int, dict]) -> None:
    """Every placement in TensorBoard under the documented tags (and in the CSV log), each value the record's."""
    tags = documented_tags(column=2)
    assert sorted(tags) == sorted(f"flasheval/{name}" for name in METRIC_NAMES)
    scalars = tensorboard_scalars(root / "logs" / mode / "tensorboard")
    csv = (root / "logs" / mode / "csv" / "version_0" / "metrics.csv").read_text(encoding="utf-8").splitlines()
    header = csv[0].split(",")
    rows = [dict(zip(header, line.split(","))) for line in csv[1:]]
    checkpoints = {c.step: c for c in flasheval.read_run(root / "runs" / mode).checkpoints}
    for step, record in records.items():
        metrics = placement_metrics(checkpoints[step], seconds=0)  # what the placement logs, from its record
        for name, tag in tags.items():
            assert step in scalars[tag], (mode, tag, step)
            if name != "flasheval/seconds":
                assert scalars[tag][step] == metrics[name], (mode, tag, step)
        (row,) = [r for r in rows if r["step"] == str(step) and r["flasheval/rank"]]
        assert int(row["flasheval/rank"]) == record["rank"] and float(row["flasheval/seconds"]) > 0
        assert (int(row["flasheval/rank_lo"]), int(row["flasheval/rank_hi"])) == tuple(record["interval"])
    assert set(scalars[tags["flasheval/rank"]]) == set(records)  # nothing else logged under the names
    assert "loss" in scalars  # the module's own logs are there beside them


def test_the_callback_places_at_steps_and_saves_and_logs_through_the_loggers(world, tmp_path):
    from flasheval.integrations.lightning import PlacementCallback

    notes = []
    before, after = Guard(notes, compare=False), Guard(notes, compare=True)
    placement = PlacementCallback(world["reference"], run=tmp_path / "runs" / "main", model="model",
                                  tokenizer=LOOP.byte_tokenizer(), every=EXAMPLE.PLACE_EVERY, on_save=True,
                                  plan=world["plan"])
    assert isinstance(placement, L.Callback)
    trainer = EXAMPLE.make_trainer(tmp_path, "main", [before, placement, after])
    module = EXAMPLE.CausalLM(LOOP.tiny_llama(0))
    trainer.fit(module, torch.utils.data.DataLoader(EXAMPLE.training_data(LOOP.byte_tokenizer()), batch_size=2))

    assert trainer.global_step == EXAMPLE.STEPS
    assert sorted(placement.placements) == PLACED == [2, 3, 4, 6]  # every 3 steps and every save, each once
    assert after.checked == EXAMPLE.STEPS + len(SAVED)  # the host as it was after every hook that may place
    history = flasheval.read_run(tmp_path / "runs" / "main")
    assert [c.step for c in history.checkpoints] == PLACED  # one record per placement
    records = {c.step: read_record(c.record_path).payload for c in history.checkpoints}
    for step, placed in placement.placements.items():
        assert placed.rank == records[step]["rank"]
    for step, afresh in _placed_afresh(world, tmp_path, "main", tmp_path).items():
        _same_placement(records[step], afresh, step)  # the weights in memory placed as the saved checkpoint's
    _check_trackers(tmp_path, "main", records)
    assert module.training


def test_bad_options_are_refused_when_made_and_the_rest_before_the_first_step(world, tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from flasheval.integrations.lightning import PlacementCallback

    tokenizer = LOOP.byte_tokenizer()
    made = [({"model": "model", "tokenizer": tokenizer, "every": 0}, "field 'every': must be an integer >= 1, got 0"),
            ({"model": "model", "tokenizer": tokenizer, "every": 2, "identity": "x"},
             "field 'identity': set by the callback for each placement (the LightningModule's model=, the Trainer's "
             "global_step, the run's NAME/step-N)"),
            ({"model": "model-1", "tokenizer": tokenizer, "every": 2}, "field 'model': expected the name of the "
             "LightningModule attribute that holds the Hugging Face causal LM (\"model\" for self.model), got "
             "'model-1'"),
            ({"model": "model", "tokenizer": None, "every": 2}, "field 'tokenizer': give the causal LM's tokenizer")]
    for options, message in made:
        with pytest.raises(flasheval.InputError) as caught:
            PlacementCallback("tiny", run=tmp_path / "run", **options)
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)

    begun = [({"model": "lm", "every": 1}, [], "field 'model': CausalLM has no attribute 'lm': give model= the name"),
             ({"model": "model", "every": 1, "distributed": "all"}, [],
              "field 'distributed': 'all' needs the caller's torch.distributed process group"),
             ({"model": "model", "on_save": True}, [ModelCheckpoint(tmp_path / "ckpt", save_weights_only=True)],
              "field 'on_save': a ModelCheckpoint(save_weights_only=True) saves without calling"),
             ({"model": "model", "every": 1, "seed": -3}, [], "field '--seed': must be an integer >= 0, got -3")]
    for options, others, message in begun:
        placement = PlacementCallback(world["reference"], run=tmp_path / "run", tokenizer=tokenizer,
                                      plan=world["plan"], **options)
        trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, callbacks=[placement, *others],
                            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=bool(others))
        with pytest.raises(flasheval.InputError) as caught:
            trainer.fit(EXAMPLE.CausalLM(LOOP.tiny_llama(0)),
                        torch.utils.data.DataLoader(EXAMPLE.training_data(tokenizer), batch_size=2))
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value), str(caught.value)
        assert trainer.global_step == 0 and not (tmp_path / "run").exists()


def test_a_sharded_model_with_main_is_refused_as_training_begins(world, tmp_path, monkeypatch):
    # FSDP2 (fully_shard: every forward pass gathers the parameters from every process) in a one-process group made
    # here, seen as a group of two (a group of one is not refused: its process zero is every process).
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from flasheval.integrations.lightning import PlacementCallback

    monkeypatch.setattr("flasheval.engine.hf.in_memory.caller_group", lambda: (2, None))
    module = EXAMPLE.CausalLM(LOOP.tiny_llama(0))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        fully_shard(module.model)
        placement = PlacementCallback(world["reference"], run=tmp_path / "run", model="model",
                                      tokenizer=LOOP.byte_tokenizer(), every=1, plan=world["plan"])
        with pytest.raises(flasheval.InputError, match="field 'distributed': 'main' places on process zero alone, "
                                                       "but the model is sharded"):
            placement.on_fit_start(trainer, module)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two processes importing torch, transformers and lightning, two trainings, 8 placements: 15-40 s
def test_the_example_under_ddp_on_two_processes_in_both_modes(world, tmp_path):
    import shutil

    root = tmp_path / "work"
    shutil.copytree(world["reference"], root / "refs" / "tiny")
    shutil.copy(world["plan"], root / "plan.yaml")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(EXAMPLES / "lightning_placement.py"), str(world["task_dir"]), str(root),
                           "--devices", "2"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = {}
    for mode in ("main", "all"):
        seen = [json.loads((root / mode / f"process-{i}.json").read_text()) for i in (0, 1)]
        assert [s["world_size"] for s in seen] == [2, 2]
        assert [s["global_step"] for s in seen] == [EXAMPLE.STEPS] * 2  # both trained on after every placement
        assert [s["placed"] for s in seen] == [PLACED, PLACED if mode == "all" else []]
        history = flasheval.read_run(root / "runs" / mode)
        assert [c.step for c in history.checkpoints] == PLACED
        records[mode] = {c.step: read_record(c.record_path).payload for c in history.checkpoints}
        _check_trackers(root, mode, records[mode])
    for step in PLACED:
        _same_placement(records["main"][step], records["all"][step], step)
    for step, afresh in _placed_afresh(world, root, "main", tmp_path).items():
        _same_placement(records["main"][step], afresh, step)
