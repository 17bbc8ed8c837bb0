"""Versioned JSON run records: the one format every command (evaluate, place, sweep, backtest,
dior, scaling) writes and ``flasheval report`` reads, and the names of the folders runs write.

A record is ``{"schema": "flasheval.run", "schema_version": N, "kind": ..., "flasheval_version":
..., "created_utc": ..., "argv": [...], "payload": {...}}``. Writes are atomic (temp file +
rename, :mod:`flasheval.atomic`), so a crash never leaves a half-written record. Reading checks the schema and version
and refuses, in one line, a record from an incompatible version.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from flasheval.atomic import atomic_write_text
from flasheval.version import __version__
from flasheval.errors import InputError
from flasheval.records.schemas import PAYLOAD_SCHEMAS, check_payload

__all__ = ["SCHEMA", "SCHEMA_VERSION", "RunRecord", "write_record", "read_record", "slug",
           "prepare_output", "check_replace", "default_run_folder", "note_replacing", "check_creatable"]

logger = logging.getLogger(__name__)

SCHEMA = "flasheval.run"
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A run record as read back from disk."""

    kind: str
    """What wrote it: ``evaluate``, ``place``, ``sweep``, ``backtest``, ``dior``, ``scaling``."""
    payload: dict[str, Any]
    """The command's results (JSON types only)."""
    flasheval_version: str
    created_utc: str
    argv: tuple[str, ...]
    path: Path
    settings: dict[str, Any] | None = None
    """The settings that decide the result (``place``, ``backtest``, ``dior``; ``None`` in older records): a record
    in a folder is replaced only by a run with the same settings (:func:`check_replace`), or with ``force``."""


def _json_safe(obj: Any) -> Any:
    """Replace NaN/inf (not valid JSON) by None so no report ever shows a silent NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        return _json_safe(obj.item())
    return obj


def write_record(path: str | os.PathLike[str], *, kind: str, payload: dict[str, Any],
                 settings: dict[str, Any] | None = None) -> Path:
    """Write a run record atomically and return its path (``settings``: what decided the result, compared by
    :func:`check_replace` before a later run replaces the record).

    The payload is checked against its kind's schema (:func:`~flasheval.records.schemas.check_payload`) before
    anything is written, so no reader ever meets a record its writer got wrong; a kind without a schema is a
    programming error (every kind written has one in :data:`~flasheval.records.schemas.PAYLOAD_SCHEMAS`).
    """
    if kind not in PAYLOAD_SCHEMAS:
        raise ValueError(f"record kind {kind!r} has no schema in flasheval.records.schemas.PAYLOAD_SCHEMAS")
    safe = _json_safe(payload)
    check_payload(kind, safe, path=path)
    record = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "flasheval_version": __version__,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv),
        "payload": safe,
        **({} if settings is None else {"settings": _json_safe(settings)}),
    }
    return atomic_write_text(path, json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def prepare_output(folder: str | os.PathLike[str], *, record: str | None = None, field: str = "--output",
                   note: bool = True, kind: str | None = None, model_id: str | None = None,
                   force: bool = False, settings: dict[str, Any] | None = None) -> Path:
    """Create ``folder`` and check that it can be written, before a run spends anything on results.

    ``record``: the record file the run will write there; when one is already there the run
    replaces it, which is said in one line (a WARNING of this module's logger, shown by the
    command line and by Python's last-resort handler to an API caller who configured none): a
    live run's folder also holds the results store it resumes from. ``note``: whether to say it
    (``False`` on the other processes of a launch). ``kind`` and ``model_id``: what the run will
    write; a record there of another command (``kind``), of another model (``model_id``), or a
    file that is no run record, is refused unless ``force`` (another model's record is never
    lost to a default folder or a typo); so is one written with other ``settings`` (:func:`check_replace`).

    Raises
    ------
    InputError
        The folder cannot be created or written (a read-only place, a path under a regular file),
        or it holds a record of another command or model (without ``force``).
    """
    out = check_creatable(folder, field=field)
    if record is not None and kind is not None:
        check_replace(out / record, kind=kind, model_id=model_id, force=force, field=field, settings=settings)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _probe_write(out)
    except OSError as exc:
        raise InputError(f"cannot write the output here ({exc.strerror or exc}); choose another folder",
                         path=out, field=field) from None
    if record is not None and note:
        note_replacing(out / record)
    return out


def check_creatable(folder: str | os.PathLike[str], *, field: str = "--output") -> Path:
    """``folder`` as a path, refused in one line when it cannot be a folder written here: empty, a file on its way,
    a name too long, or a nearest existing folder this process cannot write into (a file created there and removed
    at once says so: nothing is left behind). What a run checks before it spends anything, and a training callback
    when it is made."""
    out = Path(folder)
    if not str(folder).strip():
        raise InputError("empty path; name a folder", field=field)
    try:
        blocker = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
        existing = next(p for p in (out, *out.parents) if p.is_dir())
    except OSError as exc:  # a name over the file system's limit (ENAMETOOLONG), a symlink loop
        raise InputError(f"cannot be a folder here ({exc.strerror or exc}); choose another folder", path=out,
                         field=field) from None
    if blocker is not None:
        raise InputError(f"{'is' if blocker == out else f'{blocker} is'} a file, not a folder; choose another "
                         "folder", path=out, field=field)
    try:
        _probe_write(existing)
    except OSError as exc:
        raise InputError(f"cannot write the output here ({exc.strerror or exc} in {existing}); choose another folder",
                         path=out, field=field) from None
    return out


def _probe_write(folder: Path) -> None:
    """Create a file in ``folder`` and remove it at once (an ``OSError`` says this process cannot write there)."""
    fd, probe = tempfile.mkstemp(dir=folder, prefix=".flasheval-write-check-")
    os.close(fd)
    os.unlink(probe)


def note_replacing(path: Path) -> None:
    """Say, in one line, that the record at ``path`` (if there is one) will be replaced: once every check of the
    run has passed (a run refused afterwards replaces nothing, so says nothing)."""
    if path.is_file():
        logger.warning("note: replacing the earlier record %s (written %s)", path, _written(path))


def check_replace(path: str | os.PathLike[str], *, kind: str, model_id: str | None = None, force: bool = False,
                  field: str = "--output", settings: dict[str, Any] | None = None) -> None:
    """Refuse to replace the file at ``path`` unless it is a ``kind`` record of ``model_id`` (any model when
    ``None``) written with the same ``settings`` (not compared when either side has none), or ``force``;
    nothing there passes. One line naming the folder, ``field``, the record's owner or the first setting that
    differs with both values."""
    path = Path(path)
    if force or not path.is_file():
        return
    fix = f"choose another {field}, or --force (force=True) to replace it"
    try:
        found = read_record(path)
    except InputError as exc:
        raise InputError(f"holds {path.name}, not a run record this flasheval reads ({exc.reason}); {fix}",
                         path=path.parent, field=field) from None
    if found.kind != kind:
        raise InputError(f"holds a {found.kind!r} record ({path.name}), not a {kind!r} one; {fix}",
                         path=path.parent, field=field)
    other = found.payload.get("model_id") if isinstance(found.payload, dict) else None
    if model_id is not None and other is not None and other != model_id:
        raise InputError(f"holds the {kind} record of model {other!r}, not {model_id!r}; {fix}",
                         path=path.parent, field=field)
    if settings is not None and found.settings is not None:
        now = json.loads(json.dumps(_json_safe(settings)))
        for key in sorted(set(now) | set(found.settings)):
            if found.settings.get(key) != now.get(key):
                raise InputError(f"holds the {kind} record {path.name} written with {key} "
                                 f"{found.settings.get(key)!r}, not {now.get(key)!r}; {fix}", path=path.parent,
                                 field=field)


def default_run_folder(kind: str, *names: str, settings: dict[str, Any] | None = None) -> Path:
    """``runs/<kind>-<name>-...``: a command's default output, one per model, reference and settings.

    Each name is made a path component by :func:`slug`. Where that changes a name (``org/m``,
    ``org m`` and ``org-m`` all slug to ``org-m``), or where ``settings`` (the options that decide the
    result and differ from their defaults, e.g. ``{"seed": 1}``) is not empty, 8 hex digits of the SHA-256
    of the exact names and settings are appended: two models, or one model under two settings, never
    share a default folder, and a rerun of the same command finds its own.

    Examples
    --------
    >>> default_run_folder("place", "helm_lite", "org-m").as_posix()
    'runs/place-helm_lite-org-m'
    >>> default_run_folder("place", "helm_lite", "org/m") != default_run_folder("place", "helm_lite", "org m")
    True
    >>> len(default_run_folder("place", "helm_lite", "org/" + "m" * 300).name)
    209
    >>> seeded = default_run_folder("place", "helm_lite", "org-m", settings={"seed": 1})
    >>> seeded.name.startswith("place-helm_lite-org-m-"), seeded != default_run_folder("place", "helm_lite", "org-m")
    (True, True)
    """
    slugs = [slug(n) for n in names]
    stem = "-".join([kind, *slugs])
    if slugs != list(names) or settings or len(stem) > _MAX_STEM:
        exact = "\0".join(names)
        if settings:
            exact += "\0" + json.dumps(_json_safe(settings), sort_keys=True)
        stem = stem[:_MAX_STEM].rstrip("-") + "-" + hashlib.sha256(exact.encode("utf-8")).hexdigest()[:8]
    return Path("runs") / stem


_MAX_STEM = 200
"""The longest default folder name before its digest (file systems take 255 bytes a name; slugs are ASCII): a long
model id (a 300-character hub id) is cut there, the digest of the whole names keeping folders apart."""


def _written(path: Path) -> str:
    """When the record at ``path`` was written: its ``created_utc``, else the file's time (UTC, to the minute)."""
    try:
        stamp = datetime.fromisoformat(read_record(path).created_utc)
    except (InputError, ValueError):
        stamp = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    return stamp.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def read_record(path: str | os.PathLike[str], *, kind: str | None = None) -> RunRecord:
    """Read and validate a run record: its envelope, then its payload field by field against its kind's schema
    (:data:`flasheval.records.schemas.PAYLOAD_SCHEMAS`); ``kind``: the kind the caller reads (another is refused).

    Raises
    ------
    InputError
        One line naming the file, the field (``payload.stages[2].interval``), the value and what is allowed.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("run record not found", path=p) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=p) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a JSON run record ({exc})", path=p) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"not a flasheval run record (schema must be {SCHEMA!r})", path=p, field="schema")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            f"run record has schema_version {version!r}, this flasheval {__version__} reads only {SCHEMA_VERSION}",
            path=p,
            field="schema_version",
        )
    for key in ("kind", "payload"):
        if key not in data:
            raise InputError("missing field", path=p, field=key)
    for key, ok, allowed in (("kind", isinstance(data["kind"], str) and data["kind"] != "", "a command's name"),
                             ("payload", isinstance(data["payload"], dict), "an object"),
                             ("argv", isinstance(data.get("argv", []), list)
                              and all(isinstance(a, str) for a in data.get("argv", [])), "a list of strings"),
                             ("flasheval_version", isinstance(data.get("flasheval_version", ""), str), "a string"),
                             ("created_utc", isinstance(data.get("created_utc", ""), str), "a string")):
        if not ok:
            raise InputError(f"{str(repr(data.get(key)))[:60]} is not {allowed}", path=p, field=key)
    if kind is not None and data["kind"] != kind:
        raise InputError(f"a {kind!r} record is expected here, this one is {data['kind']!r}", path=p, field="kind")
    check_payload(data["kind"], data["payload"], path=p)
    settings = data.get("settings")
    if settings is not None and not isinstance(settings, dict):
        raise InputError(f"{str(repr(settings))[:60]} is not an object", path=p, field="settings")
    return RunRecord(
        kind=data["kind"],
        payload=data["payload"],
        flasheval_version=data.get("flasheval_version", ""),
        created_utc=data.get("created_utc", ""),
        argv=tuple(data.get("argv", ())),
        path=p,
        settings=settings,
    )


def slug(text: str) -> str:
    """``text`` made safe as one path component (run folders and store folders are named by it).

    Examples
    --------
    >>> slug("meta/llama-3-70b")
    'meta-llama-3-70b'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")
