"""A reference's ``manifest.json``: the :class:`ReferenceManifest` value and its one reader, field by field.

Validation policy: unknown or missing keys, a wrong ``format_version``, a field of the wrong type
(:data:`FIELD_TYPES`: ``files`` an object of file name -> sha256 string, ``example_counts`` of dataset ->
integer >= 1, ``random_baselines`` of dataset -> finite number, the texts strings, ``name`` a folder name),
an unknown aggregate, no datasets and malformed ``dropped_models`` entries are refused in one line naming
the file, the field, the value and what is allowed (:class:`~flasheval.errors.InputError`). The score
table that the manifest describes is read by :mod:`flasheval.reference.leaderboard`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.checks import check_name
from flasheval.errors import InputError
from flasheval.stats.ranking import check_aggregate

__all__ = ["FORMAT_VERSION", "MANIFEST_FILE", "FIELD_TYPES", "ReferenceManifest", "read_manifest"]

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
_MANIFEST_KEYS = {
    "format_version", "name", "source", "licence", "metric", "higher_is_better", "aggregate",
    "example_counts", "random_baselines", "files", "built_with", "build", "notes", "dropped_models",
}
_DROPPED_KEYS = {"model": str, "missing": int, "first_missing": str}
FIELD_TYPES = {
    "name": "a folder name", "source": "a string", "licence": "a string", "metric": "a string",
    "aggregate": "a string", "built_with": "a string", "notes": "a string", "format_version": "an integer",
    "files": "an object of file name -> sha256 (a string)",
    "example_counts": "an object of dataset -> example count (an integer >= 1)",
    "random_baselines": "null or an object of dataset -> chance-level score (a finite number)",
    "build": "null or an object",
}
"""What each manifest field must hold (``higher_is_better`` and ``dropped_models`` are checked on their own)."""
_MANIFEST_REQUIRED = {"format_version", "name", "source", "licence", "metric", "higher_is_better",
                      "aggregate", "example_counts", "files"}


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ReferenceManifest:
    """What ``manifest.json`` says about a reference."""

    name: str
    """Short name of the reference (the folder name)."""
    source: str
    """Where the numbers come from (repository, commit, paper)."""
    licence: str
    """Licence of the underlying data."""
    metric: str
    """What ``score`` measures, in words."""
    higher_is_better: bool
    """Direction of ``score``."""
    aggregate: str
    """Default aggregate over datasets (see :mod:`flasheval.stats.ranking`)."""
    example_counts: Mapping[str, int]
    """Number of distinct examples per dataset."""
    files: Mapping[str, str]
    """sha256 of each data file, by file name."""
    random_baselines: Mapping[str, float] | None = None
    """Chance-level score per dataset, for the centered aggregate."""
    built_with: str = ""
    """How the reference was built (command, conversion)."""
    build: Mapping[str, Any] | None = None
    """Build settings for references built from task suites (free-form)."""
    notes: str = ""
    """Caveats a user should read."""
    dropped_models: tuple[Mapping[str, Any], ...] | None = None
    """The models that lack scores other models have, so the default ``complete-models`` policy leaves them
    out: ``{"model", "missing" (cells), "first_missing" ("dataset/example_id")}`` each, by name; ``None``
    in manifests written before the field existed."""
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        check_aggregate(self.aggregate)
        if not self.example_counts:
            raise InputError("no datasets", field="example_counts")
        if self.dropped_models is not None:
            object.__setattr__(self, "dropped_models", _checked_dropped(self.dropped_models))

    def to_json(self) -> dict[str, Any]:
        """The manifest as a JSON-ready dict."""
        out = {k: (dict(v) if isinstance(v, Mapping) else v) for k in sorted(_MANIFEST_KEYS)
               if (v := getattr(self, k)) is not None}
        if self.dropped_models is not None:
            out["dropped_models"] = [dict(d) for d in self.dropped_models]
        return out


def _checked_dropped(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The manifest's ``dropped_models`` list, each entry checked for its three keys and their types."""
    if not isinstance(value, (list, tuple)):
        raise InputError(f"must be a list, got {type(value).__name__}", field="dropped_models")
    for i, entry in enumerate(value):
        ok = isinstance(entry, Mapping) and set(entry) == set(_DROPPED_KEYS) and all(
            isinstance(entry[k], t) and not isinstance(entry[k], bool) for k, t in _DROPPED_KEYS.items())
        if not ok:
            raise InputError(f"entry {i + 1} must be an object with {', '.join(_DROPPED_KEYS)} (a name, a count of "
                             f"missing cells, the first as dataset/example_id), got {entry!r}"[:300],
                             field="dropped_models")
    return tuple(dict(entry) for entry in value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _holds(key: str, value: Any) -> bool:
    """Whether manifest field ``key`` holds what :data:`FIELD_TYPES` says."""
    if key == "name":
        try:
            check_name(value)
        except InputError:
            return False
        return True
    if key == "format_version":
        return _is_int(value)
    if key in ("files", "example_counts", "random_baselines"):
        if value is None and key == "random_baselines":
            return True
        good = {"files": lambda v: isinstance(v, str) and v != "",
                "example_counts": lambda v: _is_int(v) and v >= 1, "random_baselines": _is_number}[key]
        return isinstance(value, dict) and all(isinstance(k, str) and k and good(v) for k, v in value.items())
    if key == "build":
        return value is None or isinstance(value, dict)
    return isinstance(value, str)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def read_manifest(path: Path) -> ReferenceManifest:
    """The manifest at ``path``, checked key by key (module docstring); one line naming the field otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("manifest not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", path=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if not isinstance(data, dict):
        raise InputError("manifest must be a JSON object", path=path)
    unknown = sorted(set(data) - _MANIFEST_KEYS)
    if unknown:
        raise InputError(f"unknown key {unknown[0]!r}", path=path, field=unknown[0], allowed=sorted(_MANIFEST_KEYS))
    missing = sorted(_MANIFEST_REQUIRED - set(data))
    if missing:
        raise InputError("missing key", path=path, field=missing[0])
    if data["format_version"] != FORMAT_VERSION:
        raise InputError(f"unsupported format_version {data['format_version']!r}", path=path,
                         field="format_version", allowed=[FORMAT_VERSION])
    if not isinstance(data["higher_is_better"], bool):
        raise InputError("must be true or false", path=path, field="higher_is_better")
    for key in sorted(set(FIELD_TYPES) & set(data)):
        if not _holds(key, data[key]):
            raise InputError(f"{_short(data[key])} is not {FIELD_TYPES[key]}", path=path, field=key)
    try:
        return ReferenceManifest(**data)
    except InputError as exc:
        field = "aggregate" if exc.field in (None, "--aggregate") else exc.field
        raise InputError(exc.reason, path=path, field=field) from None
