"""``flasheval.watch``: place every checkpoint a training run saves into a folder, as it appears.

The mode for spare GPUs beside a run (as NeMo and torchtitan evaluate saved checkpoints elsewhere):
:func:`~flasheval.placement.checkpoint_scan.find_checkpoints` finds the checkpoints and says which are
complete; each complete one not yet in the run folder is placed, in step order, by
:func:`flasheval.place_checkpoint`. The run folder says what is done, so a watcher killed and started
again places only what is left (and the interrupted checkpoint resumes from the run's results store).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from flasheval.api.place import PlaceRun
from flasheval.api.progress import ProgressCallback, Reporter
from flasheval.api.resolve import resolve_reference
from flasheval.api.runs import place_checkpoint, run_folder_path
from flasheval.errors import InputError
from flasheval.placement.checkpoint_scan import FoundCheckpoint, find_checkpoints
from flasheval.placement.run_coverage import check_n_checkpoints
from flasheval.placement.run_folder import RunHistory, placed_steps, read_run

__all__ = ["watch", "DEFAULT_RUN_DIR"]

DEFAULT_RUN_DIR = "flasheval-run"
"""The run folder's name inside the watched folder when none is given (beside the checkpoints it places)."""


def _seconds(value: Any, field: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise InputError(f"must be a number {'>' if positive else '>='} 0, got {value!r}", field=field)
    return float(value)


def _placed_line(found: FoundCheckpoint, placed: PlaceRun) -> str:
    result = placed.placement
    seconds = "" if placed.timing is None else f", {placed.timing.wall_seconds:.1f} s"
    return (f"step {found.step} ({found.path.name}): rank {result.rank} of {result.n_models + 1}, "
            f"{result.confidence_level:.0%} interval [{result.interval[0]}, {result.interval[1]}], tier {result.tier}, "
            f"{result.status}, {result.compute.n_examples} of {result.compute.full_examples} examples{seconds}")


def _place_ready(folder: Path, run_dir: Path, reference: Any, settle: float, report: Reporter, noted: set[Any],
                 place_kwargs: dict[str, Any]) -> int:
    """Place every complete checkpoint not yet in the run, in step order; the number placed."""
    done = placed_steps(run_dir)
    count = 0
    for found in find_checkpoints(folder, settle_seconds=settle, skip=run_dir):
        if found.step in done:
            continue
        if not found.complete:
            if (found.path, found.waiting_for) not in noted:
                noted.add((found.path, found.waiting_for))
                report("checkpoint", f"step {found.step} ({found.path.name}): not complete yet, waiting for "
                                     f"{found.waiting_for}")
            continue
        report("checkpoint", f"step {found.step} ({found.path.name}): placing {found.spec}")
        placed = place_checkpoint(found.spec, run=run_dir, step=found.step, reference=reference, **place_kwargs)
        done.add(found.step)
        count += 1
        report("checkpoint", _placed_line(found, placed), done=count, detail=placed)
    return count


def watch(directory: str | Path, *, reference: Any, run: str | Path | None = None, once: bool = False,
          poll_seconds: float = 30.0, settle_seconds: float = 60.0, progress: ProgressCallback | None = None,
          **place_kwargs: Any) -> RunHistory:
    """Place the checkpoints saved under ``directory`` into one run folder, in step order, as they appear.

    Parameters
    ----------
    directory
        The folder a training run saves its checkpoints into. Its direct entries are looked at:
        Hugging Face ``save_pretrained`` folders (``checkpoint-500``, ``step-500``, ``global_step500``, or
        any name with the step in ``trainer_state.json``) and ``*.gguf`` files with the step in their name
        (:mod:`flasheval.placement.checkpoint_scan`). A checkpoint needs its tokenizer files to be placed.
    reference
        Reference name, folder or object (a live reference built by scoring models).
    run
        The run folder (default ``DIRECTORY/flasheval-run``, skipped when looking for checkpoints).
    once
        Place what is complete now and return; otherwise look again every ``poll_seconds`` until
        interrupted (``KeyboardInterrupt``: every finished record is kept).
    poll_seconds
        Seconds between looks.
    settle_seconds
        A checkpoint is placed only when none of its files has changed for this long (and every file it
        needs is there: config, weights, every shard its index names; ``trainer_state.json`` for a Trainer's
        ``checkpoint-*``).
    progress
        Called with a ``checkpoint`` :class:`~flasheval.api.progress.Progress` as each checkpoint is found
        waiting, starts and is placed (``detail``: its :class:`~flasheval.api.place.PlaceRun`), and with each
        placement's own events.
    **place_kwargs
        Every other keyword of :func:`flasheval.place_checkpoint` / :func:`flasheval.place` (``plan``,
        ``budget``, ``seed``, ``engine``, ``simultaneous``, ...), forwarded unchanged to each placement
        (``distributed="all"`` is refused: one watcher is one process).

    Returns
    -------
    RunHistory
        The run folder read back (:func:`flasheval.read_run`), with every checkpoint placed so far.

    Raises
    ------
    InputError
        ``directory`` is not a folder; a bad option; ``once`` and nothing placed yet (no complete
        checkpoint, the run folder still empty).

    Notes
    -----
    Steps already in the run folder are skipped (a checkpoint saved again at a step the run holds is not
    placed again: place it with :func:`flasheval.place_checkpoint`). A watcher killed mid-placement and
    started again places the interrupted checkpoint again, computing only the results its store lacks.
    """
    if place_kwargs.get("distributed", "main") == "all":  # each process would see the files settle at its own time
        raise InputError("the watcher places from one process (its own device, device_map for a model larger than "
                         "one GPU); run one watcher per spare machine, not one per process of a group",
                         field="distributed", allowed=["main"])
    if not isinstance(directory, (str, Path)) or not str(directory).strip():
        raise InputError(f"expected the folder the checkpoints are saved into, got {directory!r}", field="DIR")
    folder = Path(directory)
    if not folder.is_dir():
        raise InputError("no such folder of checkpoints", path=folder, field="DIR")
    if place_kwargs.get("simultaneous") is not None:  # checked now, not at the first checkpoint found
        check_n_checkpoints(place_kwargs["simultaneous"])
    poll = _seconds(poll_seconds, "--poll", positive=True)
    settle = _seconds(settle_seconds, "--settle", positive=False)
    run_dir = folder / DEFAULT_RUN_DIR if run is None else run_folder_path(run)
    report = Reporter(progress)
    ref = resolve_reference(reference, missing=place_kwargs.get("missing", "complete-models"))
    report("start", f"watching {folder} for checkpoints ({'once' if once else f'every {poll:g} s'}); "
                    f"run folder {run_dir}, {len(placed_steps(run_dir))} checkpoints already placed")
    noted: set[Any] = set()
    while True:
        _place_ready(folder, run_dir, ref, settle, report, noted, {"progress": progress, **place_kwargs})
        if once:
            break
        time.sleep(poll)
    if not placed_steps(run_dir) and not (run_dir / "run.json").is_file():
        raise InputError("no complete checkpoint to place yet (nothing is in the run folder)", path=folder)
    return read_run(run_dir)
