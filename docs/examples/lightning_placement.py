"""Place the Hugging Face model a Lightning ``Trainer`` trains, every few steps and at every save, into one run folder.

A ``lightning.Trainer`` trains a ``LightningModule`` that holds the tiny Llama of ``train_and_place.py`` as
``self.model`` (same model, byte tokenizer, small live reference and tier plan, imported from it; the byte text of
``trainer_placement.py``) for ``STEPS`` steps. ``flasheval.integrations.lightning.PlacementCallback`` places that
model (``model="model"``, ``tokenizer=``: given, not guessed) every ``PLACE_EVERY`` steps and at every checkpoint a
``ModelCheckpoint`` saves (every ``SAVE_EVERY`` steps, as ``WORK_DIR/checkpoints/MODE/step-N.ckpt``), each as one
checkpoint of the run folder ``WORK_DIR/runs/MODE``, and logs rank, interval, tier, examples, tokens and seconds
through the Trainer's loggers (TensorBoard and CSV under ``WORK_DIR/logs/MODE``) at the placement's step.

One process: ``python docs/examples/lightning_placement.py [TASK_DIR] [WORK_DIR]`` (default ``../shared/data/tasks``
and ``./lightning-placement``; mode ``main`` only: ``all`` needs a process group). Data parallel on CPU (gloo),
``strategy="ddp"`` on two processes, one training per mode (``--modes`` chooses)::

    python docs/examples/lightning_placement.py TASK_DIR WORK_DIR --devices 2

Lightning's ddp launcher starts the second process by running this script again (the reference is built before the
first ``fit``, so that process finds it). ``main``: global rank zero places alone, no collective; ``all``: both
processes place together (a collective), the examples split between them. Every process writes what it saw to
``WORK_DIR/MODE/process-I.json``. ``tests/integrations/test_lightning_callback.py`` runs it so and checks the
placements against ``flasheval.place_checkpoint`` of the checkpoints saved, and the TensorBoard events.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import lightning as L
import torch

import flasheval
from flasheval.integrations.lightning import PlacementCallback
from train_and_place import PLAN, build_small_reference, byte_tokenizer, tiny_llama
from trainer_placement import training_data

STEPS, PLACE_EVERY, SAVE_EVERY = 6, 3, 2


class CausalLM(L.LightningModule):
    """A LightningModule around a Hugging Face causal LM, held as ``self.model`` (next-token loss on the batch)."""

    def __init__(self, model, learning_rate: float = 3e-3):
        super().__init__()
        self.model, self.learning_rate = model, learning_rate

    def training_step(self, batch, batch_idx):
        loss = self.model(**batch).loss
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=self.learning_rate)


def make_trainer(root: Path, mode: str, callbacks: list, *, devices: int = 1) -> L.Trainer:
    """A CPU Trainer of ``STEPS`` steps (``strategy="ddp"`` on ``devices`` > 1) with TensorBoard and CSV loggers under
    ``root/logs/mode`` and a ``ModelCheckpoint`` saving every ``SAVE_EVERY`` steps into ``root/checkpoints/mode``."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

    saving = ModelCheckpoint(dirpath=root / "checkpoints" / mode, filename="step-{step}", auto_insert_metric_name=False,
                             every_n_train_steps=SAVE_EVERY, save_top_k=-1)
    loggers = [TensorBoardLogger(root / "logs" / mode, name="tensorboard", version=0),
               CSVLogger(root / "logs" / mode, name="csv", version=0)]
    return L.Trainer(accelerator="cpu", devices=devices, strategy="ddp" if devices > 1 else "auto", max_steps=STEPS,
                     logger=loggers, callbacks=[*callbacks, saving], log_every_n_steps=1, enable_progress_bar=False,
                     enable_model_summary=False)


def train(mode: str, root: Path, reference, plan, tokenizer, *, devices: int = 1) -> None:
    """One training of ``STEPS`` steps, placed every ``PLACE_EVERY`` steps and at every save, ``distributed=mode``."""
    placement = PlacementCallback(reference, run=root / "runs" / mode, model="model", tokenizer=tokenizer,
                                  every=PLACE_EVERY, on_save=True, distributed=mode, plan=plan)
    trainer = make_trainer(root, mode, [placement], devices=devices)
    data = torch.utils.data.DataLoader(training_data(tokenizer), batch_size=2)
    trainer.fit(CausalLM(tiny_llama(0)), data)
    seen = {"process": trainer.global_rank, "world_size": trainer.world_size, "global_step": trainer.global_step,
            "placed": sorted(placement.placements)}
    (root / mode).mkdir(parents=True, exist_ok=True)
    (root / mode / f"process-{trainer.global_rank}.json").write_text(json.dumps(seen), encoding="utf-8")
    if trainer.is_global_zero:
        for step, placed in sorted(placement.placements.items()):
            print(f"{mode}: step {step}: rank {placed.rank} [{placed.interval[0]}, {placed.interval[1]}]")


def main(task_dir: Path, root: Path, devices: int = 1, modes: tuple[str, ...] | None = None) -> None:
    """Build the reference unless ``root/refs/tiny`` holds it (before the first ``fit``: one process then), and
    train once per mode (default: ``main`` and ``all`` on several devices, ``main`` on one)."""
    if not (root / "refs" / "tiny").is_dir():  # a rerun keeps the one built
        build_small_reference(task_dir, root)
        (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    reference = flasheval.load_reference(root / "refs" / "tiny")
    plan = flasheval.load_plan(root / "plan.yaml")
    for mode in modes or (("main", "all") if devices > 1 else ("main",)):
        train(mode, root, reference, plan, byte_tokenizer(), devices=devices)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task_dir", nargs="?", default="../shared/data/tasks", type=Path)
    parser.add_argument("work_dir", nargs="?", default="lightning-placement", type=Path,
                        help="where the reference, the runs, the logs and the checkpoints go")
    parser.add_argument("--devices", type=int, default=1, help="processes (strategy='ddp' on the CPU when > 1)")
    parser.add_argument("--modes", help="comma-separated: main, all (default: both on several devices, main alone)")
    options = parser.parse_args()
    chosen = None if options.modes is None else tuple(m.strip() for m in options.modes.split(",") if m.strip())
    main(options.task_dir, options.work_dir.resolve(), options.devices, chosen)
