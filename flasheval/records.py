"""Versioned JSON run records: the one format every command (evaluate, place, sweep, backtest,
dior, scaling) writes and ``flasheval report`` reads, and the names of the folders runs write.

A record is ``{"schema": "flasheval.run", "schema_version": N, "kind": ..., "flasheval_version":
..., "created_utc": ..., "argv": [...], "payload": {...}}``. Writes are atomic (temp file +
rename), so a crash never leaves a half-written record. Reading checks the schema and version
and refuses, in one line, a record from an incompatible version.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from flasheval.version import __version__
from flasheval.errors import InputError

__all__ = ["SCHEMA", "SCHEMA_VERSION", "RunRecord", "write_record", "read_record", "atomic_write_text", "slug"]

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


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, fsync, rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_record(path: str | os.PathLike[str], *, kind: str, payload: dict[str, Any]) -> Path:
    """Write a run record atomically and return its path."""
    record = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "flasheval_version": __version__,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv),
        "payload": _json_safe(payload),
    }
    return atomic_write_text(path, json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def read_record(path: str | os.PathLike[str]) -> RunRecord:
    """Read and validate a run record; raises :class:`InputError` naming the file and field."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("run record not found", path=p) from None
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
    return RunRecord(
        kind=str(data["kind"]),
        payload=data["payload"],
        flasheval_version=str(data.get("flasheval_version", "")),
        created_utc=str(data.get("created_utc", "")),
        argv=tuple(data.get("argv", ())),
        path=p,
    )


def slug(text: str) -> str:
    """``text`` made safe as one path component (run folders and store folders are named by it).

    Examples
    --------
    >>> slug("meta/llama-3-70b")
    'meta-llama-3-70b'
    """
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")
