"""A training run's folder: one record per run, one place record per checkpoint, one shared results store.

::

    RUN/
      run.json                          record of kind ``run``: the run's name and the settings its first
                                        placement fixed (reference, plan and level, seed, dtype, ...)
      checkpoints/step-<N>/place.json   each checkpoint's ``place`` record
      store/                            one results store for every checkpoint (keyed by each one's fingerprint)
      folder.lock                       held by the process writing a placement (as a sweep's run folder)

Every placement into the folder (:func:`flasheval.place_checkpoint`, the watcher, ``flasheval place --run``)
takes ``folder.lock`` (:func:`flasheval.engine.store.shards.lock_folder`; a second one waits for it), checks
its settings against ``run.json`` (:func:`fix_settings`), places through ``store/`` and writes its step's
record. A crash keeps every finished record and every finished result in the store: placing again
computes only what is missing. :func:`read_run` reads the folder back as a :class:`RunHistory`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from flasheval.engine.store.shards import FOLDER_LOCK, lock_folder
from flasheval.checks import check_name, is_whole
from flasheval.errors import FlashevalError, InputError
from flasheval.placement.results import Placed, PlacementResult
from flasheval.placement.tiers import Tier
from flasheval.records.run_record import RunRecord, read_record, write_record
from flasheval.reference import ReferenceLeaderboard
from flasheval.sweeps.folder import CONFIG_FILE as SWEEP_CONFIG
from flasheval.sweeps.folder import RECORD_FILE as SWEEP_RECORD

__all__ = ["RUN_FILE", "CHECKPOINTS_DIR", "STORE_DIR", "RUN_KIND", "SETTINGS", "RunCheckpoint", "RunHistory",
           "read_run", "is_run_folder",
           "placed_steps", "record_path", "read_settings", "fix_settings", "check_settings", "hold_run",
           "record_fingerprint", "reference_digest", "check_folder_kind", "check_step", "run_folder_path", "MAX_STEP"]

RUN_FILE = "run.json"
CHECKPOINTS_DIR = "checkpoints"
STORE_DIR = "store"
RUN_KIND = "run"
logger = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"step-(\d+)")
MAX_STEP = 2**63 - 1
"""The largest training step a run records: what a 64-bit integer holds (numpy, the report's axes, every logger)."""
SETTINGS = ("reference", "plan", "simultaneous", "confidence_level", "seed", "dtype", "engine", "aggregate", "missing")
"""What every checkpoint of a run shares, in the order a difference is reported (the split level follows K)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCheckpoint(Placed):
    """One checkpoint of a run: its placement, read back from its ``place`` record, and what is the run's own.

    The placement's outcome (``model_id``, ``rank``, ``interval``, ``confidence_level``, ``tier``, ``status``,
    ``n_models``; ``n_examples``, ``full_examples``, ``n_tokens``, ``full_tokens`` of its compute) is read through
    :class:`~flasheval.placement.results.Placed`'s read-only properties; the rest is ``checkpoint.placement.X``.
    """

    step: int
    placement: PlacementResult
    """The placement (:meth:`PlacementResult.from_json <flasheval.placement.results.PlacementResult.from_json>` of
    the record; ``model_id``: in-memory, the identity ``RUN/step-N``; a spec: its name; ``confidence_level``: the
    run's plan's, split over the run when ``simultaneous``)."""
    record_path: Path
    seconds: float | None = None
    """Wall seconds of the placement's own work (``None`` for a replayed model); the process's one-time start-up
    is :attr:`import_seconds` (records written before it was measured apart count it here)."""
    fingerprint: str | None = None
    """What keyed its results (live models; ``None`` for a replayed one)."""
    import_seconds: float | None = None
    """Seconds the placement spent importing modules for the first time in its process (torch, transformers,
    the model's architecture: the first placement of a process pays them; ``None``: not in the record)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunHistory:
    """A run folder read back (:func:`read_run`): its settings and every checkpoint placed, by step."""

    path: Path
    name: str
    reference: str
    """The reference's name."""
    plan: str
    """The tier plan's name."""
    settings: Mapping[str, Any]
    """What every checkpoint of the run shares (reference, plan, confidence_level, seed, dtype, engine,
    aggregate, missing, simultaneous)."""
    checkpoints: tuple[RunCheckpoint, ...]
    """Sorted by step."""
    confidence_level: float = 0.95
    """Each checkpoint's confidence level."""
    simultaneous: int | None = None
    """The planned number of checkpoints the run's level is split over (``None``: per-checkpoint coverage)."""
    tiers: tuple[Tier, ...] = ()
    """The plan's tiers on the run's pool (their first ranks are the tier boundaries)."""


_KIND_FILES = (("run", RUN_FILE, "a training run's folder (place --run, watch)"),
               ("sweep", SWEEP_CONFIG, "a sweep's folder (flasheval sweep)"),
               ("sweep", SWEEP_RECORD, "a sweep's folder (flasheval sweep)"),
               ("place", "place.json", "a placement's output folder (place --output)"))


def check_folder_kind(folder: str | os.PathLike[str], *, kind: str, field: str) -> None:
    """Refuse, in one line naming the file that says so, a ``kind`` folder (``run``, ``place`` or ``sweep``) given
    where a folder of another kind already is: the two records would share it and ``flasheval report`` would
    show one of them only. A sweep and a place output may share one (``report`` renders every record at the
    folder's top); a run folder, read through ``run.json`` alone, shares with neither. Nothing is read but the
    names of the files at its top."""
    for other, name, what in _KIND_FILES:
        if other != kind and {other, kind} != {"place", "sweep"} and (Path(folder) / name).is_file():
            raise InputError(f"is {what}: it holds {name}; give a folder of its own", path=folder, field=field)


def check_step(step: object) -> int:
    """``step`` as a training step: an integer (numpy's too) from 0 to :data:`MAX_STEP`; one line naming ``step``."""
    if not is_whole(step) or step < 0:  # type: ignore[operator]
        raise InputError(f"must be an integer >= 0, got {step!r}", field="step")
    if step > MAX_STEP:  # type: ignore[operator]
        raise InputError(f"must be at most {MAX_STEP} (2^63 - 1, what a 64-bit integer holds), got {step!r}",
                         field="step")
    return int(step)  # type: ignore[arg-type]


def run_folder_path(run: object) -> Path:
    """``run`` as a run folder: a non-empty path whose folder name is a name (:func:`~flasheval.checks.check_name`:
    the run's name, which keys its in-memory checkpoints' stored results)."""
    if not isinstance(run, (str, Path)) or not str(run).strip():
        raise InputError(f"expected a run folder (str or Path), got {run!r}", field="run")
    try:
        resolved = Path(run).resolve()
        name = resolved.name
    except (RuntimeError, OSError) as exc:  # a symlink loop on the way: "Symlink loop from ..."
        raise InputError(f"cannot be a folder ({exc})", path=run, field="run") from None
    if len(os.fsencode(name)) > 255:  # every file system's limit on one name: os.stat would fail on it
        raise InputError(f"a folder name is at most 255 bytes, this one has {len(os.fsencode(name))}", path=run,
                         field="run")
    check_name(name, field="run", what="run name (the run folder's name)")
    if resolved == Path.cwd().resolve():  # Path("") is Path("."): files would land in the working folder
        raise InputError(f"{str(run)!r} is the working folder itself (an empty Path('') is '.'); name the run's own "
                         "folder (e.g. Path.cwd() / 'my-run')", field="run")
    check_folder_kind(run, kind="run", field="run")
    return Path(run)


def is_run_folder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder holding a ``run.json``."""
    return (Path(path) / RUN_FILE).is_file()


def placed_steps(run: Path) -> set[int]:
    """The steps whose record is in the run folder (what a watcher started again skips)."""
    root = run / CHECKPOINTS_DIR
    if not root.is_dir():
        return set()
    return {int(m.group(1)) for e in root.iterdir()
            if (m := _STEP_DIR.fullmatch(e.name)) and (e / "place.json").is_file()}


def record_path(run: Path, step: int) -> Path:
    """Where step ``step``'s ``place`` record lives."""
    return run / CHECKPOINTS_DIR / f"step-{step}" / "place.json"


def _record(path: Path, kind: str) -> RunRecord:
    """The ``kind`` record at ``path``, its payload checked against the kind's schema (:mod:`flasheval.records.schemas`)."""
    return read_record(path, kind=kind)


def read_settings(run: Path) -> dict[str, Any] | None:
    """``run.json``'s payload, checked (``None`` when the folder holds no run yet)."""
    path = run / RUN_FILE
    if not path.exists():
        return None
    payload = _record(path, RUN_KIND).payload  # every field's type: the run kind's schema
    try:
        check_name(payload["name"], field="payload.name", what="run name")
    except InputError as exc:
        raise InputError(exc.reason, path=path, field="payload.name") from None
    return dict(payload)


def fix_settings(run: Path, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The run's settings: written by the first placement, compared by every later one (the caller holds the lock).

    Raises
    ------
    InputError
        A setting differs from the run's: one line naming the field and both values.
    """
    saved = read_settings(run)
    if saved is None:
        write_record(run / RUN_FILE, kind=RUN_KIND, payload=dict(payload))
        return dict(payload)
    check_settings(run, saved, payload)
    return saved


def check_settings(run: Path, saved: Mapping[str, Any], payload: Mapping[str, Any]) -> None:
    """Refuse, in one line naming the field and both values, a placement whose settings differ from the run's."""
    before, now = saved["settings"], payload["settings"]
    for key in [*SETTINGS, *sorted((set(before) | set(now)) - set(SETTINGS))]:
        if before.get(key) != now.get(key):
            raise InputError(f"this run's checkpoints are placed with {key} {before.get(key)!r}, this one with "
                             f"{now.get(key)!r}; a run keeps the settings of its first placement (give the same, or "
                             "place into a new run folder)", path=run / RUN_FILE, field=key)
    was, now_digest = saved.get("reference_digest"), payload.get("reference_digest")
    if was is not None and now_digest is not None and was != now_digest:  # names alone can hide other pools
        raise InputError(f"this run's checkpoints are placed on reference {before.get('reference')!r} (content digest "
                         f"{was}), this one on a reference of that name with other models or scores (digest "
                         f"{now_digest}); give the run's reference ({saved.get('reference_source')}), or place into "
                         "a new run folder", path=run / RUN_FILE, field="reference")
    if "plan_spec" in saved and "plan_spec" in payload and saved["plan_spec"] != payload["plan_spec"]:
        raise InputError(f"this run's checkpoints are placed with plan {before.get('plan')!r} as its first placement "
                         "gave it, this one with another plan of that name (other stages, tiers or options); leave the "
                         "plan out to use the run's, or place into a new run folder", path=run / RUN_FILE, field="plan")


LOCK_WAIT_S = 3600.0
"""How long a placement waits for another flasheval process placing into the same run folder (a watcher's
placement of a large model may take that long); a holder that is stopped is refused at once."""
OTHER_HOLDER_WAIT_S = 60.0
"""How long it waits when the lock's holder is no flasheval placement (it did not write its pid into the lock)."""


_STOPPED = {"T": "is stopped (continue it with kill -CONT, or end it)", "t": "is stopped by a debugger",
            "Z": "has exited (a zombie its parent has not reaped)"}
"""Process states (``/proc/PID/stat``) of a holder that will not release the lock by itself."""


def hold_run(run: Path, *, poll_seconds: float = 0.5, wait_seconds: float = LOCK_WAIT_S,
             other_wait_seconds: float = OTHER_HOLDER_WAIT_S) -> int:
    """Take the run folder's lock (the sweep's :func:`~flasheval.engine.store.shards.lock_folder`): its descriptor.

    When another process is placing into the folder, wait until it is done (a note names it once): a placement
    inside a training job should not fail because a watcher or another rank got there first. The wait is bounded:
    a holder that is stopped (``kill -STOP``, Ctrl-Z) or a zombie is refused at once, one that is no flasheval
    placement after ``other_wait_seconds``, any other after ``wait_seconds``, in one line naming it (its pid, host
    and command where this host can see them). The holder writes ``pid N on HOST`` into the lock file.
    """
    fd = _lock(run)
    start, noted = time.monotonic(), False
    while fd is None:
        holder, state, ours = _lock_holder(run / FOLDER_LOCK)
        if not noted:
            noted = True
            logger.warning("note: another placement is writing into run folder %s (%s holds %s); waiting for it "
                           "(at most %g s)", run, holder, FOLDER_LOCK, wait_seconds if ours else other_wait_seconds)
        waited = time.monotonic() - start
        why = _STOPPED.get(state)
        if why is None and waited > (wait_seconds if ours else other_wait_seconds):
            why = f"has held it for over {waited:.0f} s" + ("" if ours else " and is no flasheval placement")
        if why is not None:
            raise FlashevalError(f"run folder {run}: {holder} holds its lock ({FOLDER_LOCK}) and {why}; place again "
                                 "once it is done, or into another run folder")
        time.sleep(poll_seconds)
        fd = _lock(run)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    return fd


def _lock(run: Path) -> int | None:
    """:func:`lock_folder` of ``run``, a lock file that cannot be opened (a folder named ``folder.lock``) refused in one
    line naming it (the run folder's problem: a watcher stops on it rather than failing every checkpoint)."""
    try:
        return lock_folder(run)
    except OSError as exc:
        raise InputError(f"cannot take the run folder's lock ({exc.strerror or exc}); remove it if no placement is "
                         "running", path=run / FOLDER_LOCK, field="run") from None


def _lock_holder(path: Path) -> tuple[str, str, bool]:
    """Who holds the ``flock`` on ``path``: ``(description, process state, whether it wrote itself into the file)``.

    The holder is read from ``/proc/locks`` (this host's kernel: any process, flasheval or not) and, on another host
    of a shared file system, from what a flasheval holder wrote into the file; the state (``T`` stopped, ``Z``
    zombie, ``""`` unknown) from ``/proc/PID/stat``.
    """
    try:
        written = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        written = ""
    try:
        stat = path.stat()
        inode = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            rows = [line.split() for line in locks]
        pids = [row[4] for row in rows if row[1:2] == ["FLOCK"] and row[5:6] == [inode]]  # "->" rows: waiters
    except OSError:  # no /proc (not Linux): what the holder wrote
        pids = []
    if not pids:
        return (f"process {written}" if written else "another process", "", bool(written))
    pid = pids[0]
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
        command = " ".join(command.split())  # one line, whatever its arguments hold
    except (OSError, IndexError):
        state, command = "", ""
    shown = f"process {pid} on {socket.gethostname()}" + (f" ({command[:120]})" if command else "")
    return shown, state, written.startswith(f"pid {pid} ")


def reference_digest(reference: ReferenceLeaderboard) -> str:
    """A digest of a reference's content (16 hex digits): its pool's models, datasets and example ids, every
    score, and the manifest's direction, aggregate and baselines. Two references of one name with other
    models or scores differ here (``run.json`` compares it, not the name)."""
    digest = hashlib.sha256()
    manifest = reference.manifest
    digest.update(repr((reference.model_ids, reference.dataset_names, reference.example_ids, manifest.higher_is_better,
                        manifest.aggregate, sorted((manifest.random_baselines or {}).items()))).encode())
    for scores in reference.scores:
        digest.update(np.ascontiguousarray(scores, dtype=np.float64).tobytes())
    return digest.hexdigest()[:16]


def record_fingerprint(payload: Mapping[str, Any]) -> str:
    """What identifies the model of a ``place`` record: its live fingerprint, else ``replay:MODEL_ID``."""
    live = payload.get("live")
    if isinstance(live, Mapping) and isinstance(live.get("fingerprint"), str):
        return live["fingerprint"]
    return f"replay:{payload.get('model_id')}"


def _checkpoint(step: int, path: Path) -> RunCheckpoint:
    """Step ``step``'s record as a :class:`RunCheckpoint` (every field's type: the place kind's schema)."""
    p = _record(path, "place").payload
    timing, live = p.get("timing"), p.get("live")
    seconds = imports = None
    if isinstance(timing, Mapping):
        seconds, imports = timing.get("wall_seconds"), timing.get("import_seconds")
    elif isinstance(live, Mapping):
        seconds = live.get("seconds")
    return RunCheckpoint(
        step=step, placement=PlacementResult.from_json(p), record_path=path,
        seconds=None if seconds is None else float(seconds),
        fingerprint=live.get("fingerprint") if isinstance(live, Mapping) else None,
        import_seconds=None if imports is None else float(imports))


def read_run(run: str | os.PathLike[str]) -> RunHistory:
    """Read a run folder: its settings (``run.json``) and every checkpoint's record, sorted by step.

    Raises
    ------
    InputError
        Not a run folder (``""``, ``None`` or not a path: one line naming ``run``), or a malformed ``run.json`` /
        ``place.json``: one line naming the file and field. (``Path("")`` is ``Path(".")``, the working folder:
        read as that folder, which is refused unless it is a run folder.)
    """
    if not isinstance(run, (str, os.PathLike)) or not os.fspath(run).strip():
        raise InputError(f"expected a run folder (a str or Path), got {run!r}", field="run")
    folder = Path(run)
    if not folder.is_dir():
        raise InputError("no such run folder", path=folder)
    saved = read_settings(folder)
    if saved is None:
        raise InputError(f"not a run folder (no {RUN_FILE}: nothing was placed into it)", path=folder)
    checkpoints = []
    root = folder / CHECKPOINTS_DIR
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        match = _STEP_DIR.fullmatch(entry.name)
        if match and (entry / "place.json").is_file():
            if int(match.group(1)) > MAX_STEP:
                raise InputError(f"step {match.group(1)} is past the largest a run records ({MAX_STEP}, 2^63 - 1)",
                                 path=entry, field="step")
            checkpoints.append(_checkpoint(int(match.group(1)), entry / "place.json"))
    settings = saved["settings"]
    return RunHistory(path=folder, name=saved["name"], reference=settings["reference"], plan=settings["plan"],
                      settings=MappingProxyType(dict(settings)), checkpoints=tuple(sorted(checkpoints,
                                                                                           key=lambda c: c.step)),
                      confidence_level=float(settings["confidence_level"]), simultaneous=settings.get("simultaneous"),
                      tiers=tuple(Tier(first=t["first"], last=t.get("last"), resolution=t["resolution"])
                                  for t in saved["tiers"]))
