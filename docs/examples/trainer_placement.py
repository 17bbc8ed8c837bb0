"""Place a model from inside a Hugging Face ``Trainer`` every few steps, into one run folder, and render its report.

A real ``transformers.Trainer`` trains the tiny Llama of ``train_and_place.py`` (same model, byte tokenizer, small
live reference and tier plan, imported from it) on byte text for ``STEPS`` steps.
``flasheval.integrations.transformers.attach`` adds a ``PlacementCallback`` that places the model it holds every
``PLACE_EVERY`` steps, as one checkpoint of the run folder ``WORK_DIR/runs/MODE``, and logs rank, interval, tier,
examples, tokens and seconds through the Trainer's ``log`` (``state.log_history``, and every ``report_to``
integration; here ``LoggedMetrics`` stands in for them, first in the list as they are). The Trainer saves the same
weights as ``checkpoint-N`` folders (what ``flasheval place --model hf:...`` or ``flasheval watch`` places from disk).
Training goes on after each placement; every placement falls on a logging step (``logging_steps=5``), and the
loss logs are those of the same training without the callback (mode ``none``). The main process then renders
the run's report: rank against step.

One process: ``python docs/examples/trainer_placement.py [TASK_DIR] [WORK_DIR]`` (default ``../shared/data/tasks``
and ``./trainer-placement``; mode ``main`` only: ``all`` needs a process group). Data parallel on CPU (gloo), both
modes in one launch (``--modes`` chooses; ``none`` trains without the callback, for comparison)::

    accelerate launch --multi_gpu --num_processes 2 docs/examples/trainer_placement.py TASK_DIR WORK_DIR

``main``: process zero places alone, no collective; the other process trains on to the next all-reduce and
waits there. ``all``: both processes place together (a collective), the examples split between them. Every
process writes what it saw to ``WORK_DIR/MODE/process-I.json``. ``tests/integrations/test_trainer_callback.py``
runs it under that launch and checks the placements against the command line on the saved checkpoints.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import flasheval
from train_and_place import PLAN, build_small_reference, byte_tokenizer, tiny_llama

STEPS, PLACE_EVERY, LOGGING_STEPS, SEQUENCE = 20, 10, 5, 32
TEXT = ("The cat sat on the mat because it was warm. A dog ran to the door when the bell rang. "
        "Rain fell all day, so the children stayed inside and read books. ") * 6


def training_data(tokenizer) -> list[dict]:
    """Byte text cut into ``SEQUENCE``-token examples (the labels are the inputs: next-token loss)."""
    import torch

    ids = tokenizer(TEXT).input_ids
    return [{"input_ids": torch.tensor(ids[i:i + SEQUENCE]), "labels": torch.tensor(ids[i:i + SEQUENCE])}
            for i in range(0, len(ids) - SEQUENCE + 1, SEQUENCE)]


def logged_metrics_callback():
    """A callback that keeps every ``flasheval/*`` value it is given in ``on_log``: a stand-in for W&B or
    TensorBoard, registered before the placement callback as the ``report_to`` integrations are."""
    from transformers import TrainerCallback

    class LoggedMetrics(TrainerCallback):
        def __init__(self):
            self.logged = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            placed = {k: v for k, v in (logs or {}).items() if k.startswith("flasheval/")}
            if placed:
                self.logged.append({**placed, "step": state.global_step})

    return LoggedMetrics()


def train(mode: str, root: Path, reference, plan, tokenizer, data) -> None:
    """One training run of ``STEPS`` steps, placed every ``PLACE_EVERY`` steps with ``distributed=mode`` (``none``:
    no placement callback)."""
    from transformers import Trainer, TrainingArguments, default_data_collator

    from flasheval.integrations.transformers import attach

    args = TrainingArguments(output_dir=str(root / mode), max_steps=STEPS, per_device_train_batch_size=2,
                             learning_rate=3e-3, lr_scheduler_type="constant", logging_steps=LOGGING_STEPS,
                             save_strategy="steps", save_steps=PLACE_EVERY, save_only_model=True, use_cpu=True,
                             report_to="none", disable_tqdm=True, seed=0, dataloader_num_workers=0,
                             ddp_find_unused_parameters=False)
    seen = logged_metrics_callback()
    trainer = Trainer(model=tiny_llama(0), args=args, train_dataset=data, processing_class=tokenizer,
                      data_collator=default_data_collator, callbacks=[seen])
    placement = None if mode == "none" else attach(trainer, reference, run=root / "runs" / mode, every=PLACE_EVERY,
                                                   distributed=mode, plan=plan)
    trainer.train()
    state = trainer.state
    logged = [entry for entry in state.log_history if any(key.startswith("flasheval/") for key in entry)]
    losses = {entry["step"]: entry["loss"] for entry in state.log_history if "loss" in entry}
    seen_by = {"process": args.process_index, "world_size": args.world_size, "global_step": state.global_step,
               "placed": sorted(placement.placements) if placement else [], "log_history": logged,
               "report_to": seen.logged, "losses": losses}
    (root / mode / f"process-{args.process_index}.json").write_text(json.dumps(seen_by, indent=1), encoding="utf-8")
    if state.is_world_process_zero:
        for entry in logged:
            print(f"{mode}: step {entry['step']}: rank {entry['flasheval/rank']} "
                  f"[{entry['flasheval/rank_lo']}, {entry['flasheval/rank_hi']}], "
                  f"{entry['flasheval/examples']} examples, {entry['flasheval/seconds']:.1f} s")


def main(task_dir: Path, root: Path, modes: tuple[str, ...] | None = None) -> None:
    """Build the reference unless ``root/refs/tiny`` holds it (main process; the others wait), train once per
    mode (default: ``main`` and ``all`` under a launch, ``main`` in one process), render each run's report."""
    from transformers import TrainingArguments

    setup = TrainingArguments(output_dir=str(root / "setup"), use_cpu=True, report_to="none")
    if modes is None:
        modes = ("main", "all") if setup.world_size > 1 else ("main",)
    with setup.main_process_first(local=False, desc="building the reference"):
        if setup.process_index == 0 and not (root / "refs" / "tiny").is_dir():  # a rerun keeps the one built
            build_small_reference(task_dir, root)
            (root / "plan.yaml").write_text(PLAN, encoding="utf-8")
    reference = flasheval.load_reference(root / "refs" / "tiny")
    plan = flasheval.load_plan(root / "plan.yaml")
    tokenizer = byte_tokenizer()
    data = training_data(tokenizer)
    for mode in modes:
        train(mode, root, reference, plan, tokenizer, data)
        if setup.process_index == 0 and mode != "none":
            report = flasheval.render_report(root / "runs" / mode)
            print(f"{mode}: run report {report.markdown}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("task_dir", nargs="?", default="../shared/data/tasks", type=Path)
    parser.add_argument("work_dir", nargs="?", default="trainer-placement", type=Path,
                        help="where the reference, the runs and the checkpoints go (every process: the same folder)")
    parser.add_argument("--modes", help="comma-separated: main, all, none (default: main and all under a launch, "
                        "main alone)")
    options = parser.parse_args()
    chosen = None if options.modes is None else tuple(m.strip() for m in options.modes.split(",") if m.strip())
    main(options.task_dir, options.work_dir, chosen)
