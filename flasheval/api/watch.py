"""``flasheval.watch``: place every checkpoint a training run saves into a folder, as it appears.

The mode for spare GPUs beside a run (as NeMo and torchtitan evaluate saved checkpoints elsewhere):
:func:`~flasheval.runs.checkpoint_scan.find_checkpoints` finds the checkpoints and says which are
complete; each complete one not yet in the run folder is placed, in step order, by
:func:`flasheval.place_checkpoint`. The run folder says what is done, so a watcher killed and started
again places only what is left (and the interrupted checkpoint resumes from the run's results store).

What a training run does to its folder does not stop the watcher: a checkpoint removed by the run's rotation
(``save_total_limit``) before or while it loads is skipped in one line (its path no longer exists: decided by
the file system, never guessed from the error); one that fails for another reason (corrupt, a bad config) is
recorded with its reason in ``RUN/failed.json`` and tried again at the next looks. Only an error that would
fail every checkpoint alike (other settings than the run's, a bad option) stops it.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from flasheval.api.place import PlaceRun, place
from flasheval.api.progress import Progress, ProgressCallback, Reporter, check_progress
from flasheval.api.resolve import resolve_reference
from flasheval.api.resolve import PLACE_KEYWORDS
from flasheval.api.runs import check_checkpoint_args, place_checkpoint, run_folder_path
from flasheval.checks import check_flag, check_keywords
from flasheval.cluster.executor import RayExecutor, resolve_executor, weights_bytes
from flasheval.cluster.pool import Captured, answering, capture, run_each
from flasheval.errors import FlashevalError, InputError
from flasheval.runs.checkpoint_scan import FoundCheckpoint, examine_checkpoint, find_checkpoints
from flasheval.runs.folder import RUN_FILE, RunHistory, placed_steps, read_run
from flasheval.atomic import atomic_write_text
from flasheval.records.run_record import check_creatable

__all__ = ["watch", "DEFAULT_RUN_DIR", "FAILED_FILE", "UnplacedCheckpoint", "unplaced_checkpoints"]

DEFAULT_RUN_DIR = "flasheval-run"
"""The run folder's name inside the watched folder when none is given (beside the checkpoints it places)."""
FAILED_FILE = "failed.json"
"""The watcher's record, in the run folder, of the checkpoints it found and did not place (absent: none)."""
GONE = "gone before it was placed (removed by the run's rotation?)"


@dataclass(frozen=True, slots=True, kw_only=True)
class UnplacedCheckpoint:
    """A checkpoint the watcher found complete and did not place: gone before it was placed, or failed."""

    step: int
    checkpoint: str
    """Its folder or file name."""
    path: str
    reason: str
    """One line: the error that stopped its placement (``GONE`` for one removed before it was placed)."""
    gone: bool = False
    tries: int = 0
    """How many times its placement was tried."""
    retrying: bool = False
    """Whether the watcher tries it again at its next look."""


def unplaced_checkpoints(run: str | Path) -> tuple[UnplacedCheckpoint, ...]:
    """What the last watcher of run folder ``run`` recorded as not placed (its ``failed.json``), by step."""
    path = Path(run) / FAILED_FILE
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["unplaced"]
        return tuple(UnplacedCheckpoint(**entry) for entry in entries)
    except FileNotFoundError:
        return ()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a watcher's record of unplaced checkpoints ({exc})", path=path) from None


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


def _reason(exc: Exception) -> str:
    """The error in one line (flasheval's own errors are one line already; others get their type's name)."""
    text = str(exc) if isinstance(exc, FlashevalError) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= 400 else text[:399] + "…"


def _stops_the_watcher(exc: Exception, found: FoundCheckpoint) -> bool:
    """An ``InputError`` that names no part of the checkpoint is about the options or the run's settings (another
    seed, plan or reference than the run's): every checkpoint would fail alike, so the watcher stops."""
    if not isinstance(exc, InputError) or exc.field in ("--model", "model"):
        return False
    return exc.path is None or not Path(exc.path).absolute().is_relative_to(found.path)


class _CallbackRaised(Exception):
    """The caller's progress callback raised: its error is no checkpoint's failure, so it goes to the caller."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _guarded(progress: ProgressCallback | None) -> ProgressCallback | None:
    if progress is None:
        return None

    def call(event: Progress) -> None:
        try:
            progress(event)
        except Exception as exc:  # noqa: BLE001 - handed back to the caller unchanged by the watcher
            raise _CallbackRaised(exc) from exc

    return call


def _still_gone(run_dir: Path) -> dict[int, UnplacedCheckpoint]:
    """What an earlier watcher of the run recorded as gone and still is; its failures are tried again afresh."""
    try:
        earlier = unplaced_checkpoints(run_dir)
    except InputError:  # a record no watcher wrote: replaced
        return {}
    placed = placed_steps(run_dir)
    return {u.step: u for u in earlier if u.gone and u.step not in placed and not Path(u.path).exists()}


class _Watcher:
    """One watcher's looks at the folder: what it placed, what failed (and how often), what vanished."""

    def __init__(self, folder: Path, run_dir: Path, reference: Any, *, settle: float, tries: int, report: Reporter,
                 place_kwargs: dict[str, Any], remote: RayExecutor | None = None) -> None:
        self.folder, self.run_dir, self.reference, self.settle, self.tries = folder, run_dir, reference, settle, tries
        self.report, self.place_kwargs, self.remote = report, place_kwargs, remote
        self.ready: dict[int, Any] = {}
        """Ray: placements computed this look, by step (a :class:`PlaceRun` or the error that stopped it)."""
        self.unplaced = _still_gone(run_dir)
        self.changed: dict[int, FoundCheckpoint] = {}
        """Checkpoints whose files changed while they loaded: gone once their path is (else placed when complete)."""
        self.noted: set[Any] = set()
        self.problems: dict[int, str] = {}
        """Steps never placed as they are (two checkpoints of one step, a step out of range): one line each."""
        self._write()

    def look(self) -> None:
        """Place every complete checkpoint not yet in the run, in step order (failed ones while tries are left)."""
        done, todo = placed_steps(self.run_dir), []
        for found in find_checkpoints(self.folder, settle_seconds=self.settle, skip=self.run_dir, skip_steps=done):
            before = self.unplaced.get(found.step)
            if found.problem:
                self.problems[found.step] = f"step {found.step} ({found.path.name}): {found.problem}"
                self._note(found, f"not placed: {found.problem}")
            elif not found.complete:
                self._note(found, f"not complete yet, waiting for {found.waiting_for}")
            elif before is not None and not before.gone and not before.retrying:
                self._note(found, f"not tried again ({before.tries} tries failed: {before.reason})")
            else:
                todo.append((found, 0 if before is None or before.gone else before.tries))
        if self.remote is not None and todo:
            self._on_ray([found for found, _ in todo])
        for found, tried in todo:
            self._place(found, tried)
        for step, entry in list(self.unplaced.items()):  # failed, then removed: the run's rotation took it
            if not entry.gone and not Path(entry.path).exists():
                self._gone(step, entry.checkpoint, entry.path)
        for step, found in list(self.changed.items()):
            if not found.path.exists():
                del self.changed[step]
                self._gone(step, found.path.name, str(found.path))

    def _on_ray(self, found: list[FoundCheckpoint]) -> None:
        """This look's placements computed at once on Ray actors, one checkpoint each (each as the run would place
        it: :func:`~flasheval.api.runs.place_checkpoint` up to its placement); :meth:`_place` writes the records."""
        calls, steps = [], []
        for f in found:
            try:
                place_checkpoint(f.spec, run=self.run_dir, step=f.step, reference=self.reference,
                                 **{**self.place_kwargs, "progress": None, "_placer": capture})
            except Captured as call:
                calls.append((f"step {f.step}", place, call.args_, call.kwargs))
                steps.append(f.step)
            except Exception:  # noqa: BLE001 - raised again, and handled, when the checkpoint is placed
                pass
        values = run_each(self.remote, calls, folder_keyword="store", what="watch on Ray",  # type: ignore[arg-type]
                          memory_bytes=max(weights_bytes(str(f.path)) for f in found))
        self.ready = dict(zip(steps, values))

    def _note(self, found: FoundCheckpoint, message: str) -> None:
        if (found.path, message) not in self.noted:
            self.noted.add((found.path, message))
            self.report("checkpoint", f"step {found.step} ({found.path.name}): {message}")

    def _place(self, found: FoundCheckpoint, tried: int) -> None:
        self.report("checkpoint", f"step {found.step} ({found.path.name}): placing {found.spec}")
        given = {"_placer": answering(self.ready.pop(found.step))} if found.step in self.ready else {}
        try:
            placed = place_checkpoint(found.spec, run=self.run_dir, step=found.step, reference=self.reference,
                                      **self.place_kwargs, **given)
        except _CallbackRaised as exc:
            raise exc.error from None
        except Exception as exc:  # noqa: BLE001 - one checkpoint's failure must not stop the others' placement
            self._failed(found, exc, tried + 1)
            return
        self.changed.pop(found.step, None)
        if self.unplaced.pop(found.step, None) is not None:
            self._write()
        self.report("checkpoint", _placed_line(found, placed), done=len(placed_steps(self.run_dir)), detail=placed)

    def _failed(self, found: FoundCheckpoint, exc: Exception, tries: int) -> None:
        if not found.path.exists():  # vanished: whatever the loader made of the missing files
            self._gone(found.step, found.path.name, str(found.path))
            return
        if _stops_the_watcher(exc, found):
            raise exc
        now = examine_checkpoint(found.path)
        if now is None or not now.complete:  # its files changed under the loader: removed or rewritten right now
            self.changed[found.step] = found
            self.report("checkpoint", f"step {found.step} ({found.path.name}): changed while it loaded (now "
                                      f"{'no checkpoint' if now is None else 'waiting for ' + now.waiting_for}); "
                                      f"looked at again next time ({_reason(exc)})")
            return
        entry = UnplacedCheckpoint(step=found.step, checkpoint=found.path.name, path=str(found.path),
                                   reason=_reason(exc), tries=tries, retrying=tries < self.tries)
        self.unplaced[found.step] = entry
        self._write()
        then = "tried again at the next look" if entry.retrying else "not tried again"
        self.report("checkpoint", f"step {found.step} ({found.path.name}): failed (try {tries} of {self.tries}): "
                                  f"{entry.reason}; {then}", detail=entry)

    def _gone(self, step: int, name: str, path: str) -> None:
        before = self.unplaced.get(step)
        entry = UnplacedCheckpoint(step=step, checkpoint=name, path=path, reason=GONE, gone=True,
                                   tries=0 if before is None else before.tries)
        self.unplaced[step] = entry
        self._write()
        self.report("checkpoint", f"step {step} ({name}): {GONE}: skipped", detail=entry)

    def _write(self) -> None:
        if not self.unplaced:
            (self.run_dir / FAILED_FILE).unlink(missing_ok=True)
            return
        entries = [asdict(self.unplaced[step]) for step in sorted(self.unplaced)]
        atomic_write_text(self.run_dir / FAILED_FILE, json.dumps({"unplaced": entries}, indent=2) + "\n")

    def finish(self) -> tuple[UnplacedCheckpoint, ...]:
        """Once the looking is over: nothing is retried any more."""
        entries = tuple(replace(self.unplaced[s], retrying=False) for s in sorted(self.unplaced))
        self.unplaced = {e.step: e for e in entries}
        self._write()
        return entries


_WATCH_KEYWORDS = (set(PLACE_KEYWORDS) - {"reference", "tokenizer", "identity", "output", "store"}) \
    | {"simultaneous", "max_seconds"}
"""What ``watch`` forwards to each placement: :func:`flasheval.place_checkpoint`'s keywords, less what names one
in-memory model (its checkpoints are saved ones) and what the run folder sets."""


def _check_options(directory: Any, place_kwargs: dict[str, Any], retries: Any, *, reference: Any, run: Any) -> Path:
    """The watched folder, once every option is checked (before anything is looked at, loaded or written):
    :func:`~flasheval.api.runs.check_checkpoint_args` checks the placements' options as each placement will."""
    if place_kwargs.get("distributed", "main") == "all":  # each process would see the files settle at its own time
        raise InputError("the watcher places from one process (its own device, device_map for a model larger than "
                         "one GPU); run one watcher per spare machine, not one per process of a group",
                         field="distributed", allowed=["main"])
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InputError(f"must be an integer >= 0, got {retries!r}", field="--retries")
    check_keywords(place_kwargs, _WATCH_KEYWORDS, where="flasheval.watch")
    options = dict(place_kwargs)
    check_checkpoint_args(None, run=DEFAULT_RUN_DIR if run is None else run, step=0, reference=reference,
                          tokenizer=None, simultaneous=options.pop("simultaneous", None),
                          max_seconds=options.pop("max_seconds", None), place_kwargs=options)
    if not isinstance(directory, (str, Path)) or not str(directory).strip():
        raise InputError(f"expected the folder the checkpoints are saved into, got {directory!r}", field="DIR")
    folder = Path(directory)
    if not folder.is_dir():
        raise InputError("no such folder of checkpoints", path=folder, field="DIR")
    return folder


def _run_outside_checkpoints(run_dir: Path, folder: Path) -> Path:
    """``run_dir``, refused in one line when it lies inside a checkpoint of the watched folder: the run's records
    would be written into that checkpoint, which is then never placed (the watcher skips the run folder)."""
    real, watched = Path(os.path.realpath(run_dir)), Path(os.path.realpath(folder))
    if real != watched and real.is_relative_to(watched):
        top = watched / real.relative_to(watched).parts[0]
        if examine_checkpoint(top) is not None:
            raise InputError(f"is inside checkpoint {top.name} of the watched folder: the run's records would be "
                             "written into that checkpoint, and it would never be placed; give a run folder outside "
                             f"the checkpoints (default: {folder / DEFAULT_RUN_DIR})", path=run_dir, field="--run")
    return run_dir


def _unplaced_text(unplaced: tuple[UnplacedCheckpoint, ...]) -> str:
    """``step 40 (checkpoint-40): gone before it was placed ...; step 50 (...): BackendError: ...``."""
    return "; ".join(f"step {u.step} ({u.checkpoint}): {u.reason}" for u in unplaced)


def watch(directory: str | Path, *, reference: Any, run: str | Path | None = None, once: bool = False,
          poll_seconds: float = 30.0, settle_seconds: float = 60.0, retries: int = 3,
          progress: ProgressCallback | None = None, executor: Any = None, **place_kwargs: Any) -> RunHistory:
    """Place the checkpoints saved under ``directory`` into one run folder, in step order, as they appear.

    Parameters
    ----------
    directory
        The folder a training run saves its checkpoints into. Its direct entries are looked at:
        Hugging Face ``save_pretrained`` folders (``checkpoint-500``, ``step-500``, ``global_step500``, or
        any name with the step in ``trainer_state.json``) and ``*.gguf`` files with the step in their name
        (:mod:`flasheval.runs.checkpoint_scan`). A checkpoint needs its tokenizer files to be placed.
    reference
        Reference name, folder or object (a live reference built by scoring models).
    run
        The run folder (default ``DIRECTORY/flasheval-run``, skipped when looking for checkpoints).
    once
        Place what is complete now and return; otherwise look again every ``poll_seconds`` until
        interrupted (``KeyboardInterrupt``: every finished record is kept).
    poll_seconds, settle_seconds
        Seconds between looks; a checkpoint is placed only when every file it needs is there (config,
        weights, every shard its index names, ``trainer_state.json`` for a Trainer's ``checkpoint-*``), each
        ``.safetensors`` / ``.gguf`` as long as its header says, and none changed for ``settle_seconds``.
    retries
        A checkpoint that fails to load or place is tried again at each of the next ``retries`` looks, then
        left (``once``: tried once).
    progress
        Called with a ``checkpoint`` :class:`~flasheval.api.progress.Progress` as each checkpoint is found
        waiting, starts, is placed (``detail``: its :class:`~flasheval.api.place.PlaceRun`), fails or is gone
        (``detail``: its :class:`UnplacedCheckpoint`), and with each placement's own events.
    executor
        ``"ray"`` or a :class:`~flasheval.cluster.executor.RayExecutor`: the checkpoints of each look placed at once
        on Ray actors, one each; the records written here, in step order, as in this process (docs/cluster.md).
    **place_kwargs
        Every other keyword of :func:`flasheval.place_checkpoint` / :func:`flasheval.place` (``plan``,
        ``budget``, ``seed``, ``engine``, ``simultaneous``, ...), forwarded unchanged to each placement
        (``distributed="all"`` is refused: one watcher is one process).

    Returns
    -------
    RunHistory
        The run folder read back (:func:`flasheval.read_run`), with every checkpoint placed so far. What was
        not placed is in ``RUN/failed.json`` (:func:`unplaced_checkpoints`; absent when everything was).

    Raises
    ------
    InputError
        ``directory`` is not a folder; a bad option; another setting than the run's (or any error that names
        no file of the checkpoint: it would fail for every one); ``once`` and nothing placed yet.

    Notes
    -----
    A checkpoint removed (``save_total_limit`` rotation) before or while it is placed is skipped with one
    line; one that fails for any other reason (corrupt weights, a bad config) is recorded with its reason
    and never stops the others. Steps already in the run folder are skipped (a checkpoint saved again at a
    step the run holds is not placed again: place it with :func:`flasheval.place_checkpoint`). A watcher
    killed mid-placement and started again places the interrupted checkpoint again, computing only the
    results its store lacks.
    """
    poll = _seconds(poll_seconds, "--poll", positive=True)
    settle = _seconds(settle_seconds, "--settle", positive=False)
    check_flag(once, field="once")
    check_progress(progress)
    folder = _check_options(directory, place_kwargs, retries, reference=reference, run=run)
    remote = resolve_executor(executor)
    run_dir = folder / DEFAULT_RUN_DIR if run is None else _run_outside_checkpoints(run_folder_path(run), folder)
    check_creatable(run_dir, field="--run")  # before failed.json is looked for in it
    report = Reporter(progress)
    ref = resolve_reference(reference, missing=place_kwargs.get("missing", "complete-models"))
    report("start", f"watching {folder} for checkpoints ({'once' if once else f'every {poll:g} s'}); "
                    f"run folder {run_dir}, {len(placed_steps(run_dir))} checkpoints already placed")
    watcher = _Watcher(folder, run_dir, ref, settle=settle, tries=1 if once else 1 + retries, report=report,
                       place_kwargs={**place_kwargs, "progress": _guarded(progress)}, remote=remote)
    while True:
        watcher.look()
        if once:
            break
        time.sleep(poll)
    unplaced = watcher.finish()
    if not placed_steps(run_dir) and not (run_dir / RUN_FILE).is_file():
        if unplaced or watcher.problems:
            text = "; ".join([_unplaced_text(unplaced)] * bool(unplaced) + list(watcher.problems.values()))
            raise InputError(f"no checkpoint placed: {text}", path=folder)
        raise InputError("no complete checkpoint to place yet (nothing is in the run folder)", path=folder)
    return read_run(run_dir)
