"""Stable content hashes (never Python's salted ``hash()``) and file checksums.

Used for request keys in the results store, model fingerprints, seeds derived from names and
the SHA-256 of task and reference files, so the same input gives the same digest on every
machine, process and run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

import numpy as np

__all__ = ["stable_hash", "derive_seed", "file_sha256"]


def _canonical(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__type__": type(obj).__name__, **{f.name: _canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        return {str(k): _canonical(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    if isinstance(obj, np.generic):  # a numpy scalar (a seed of np.int64(3)) is its Python value, digest and all
        return _canonical(obj.item())
    if isinstance(obj, float) and obj != obj:  # NaN has no canonical JSON form
        return "NaN"
    return obj


def stable_hash(obj: Any, *, n_chars: int = 32) -> str:
    """Hex SHA-256 of a canonical JSON encoding of ``obj``.

    Dataclasses, dicts (keys sorted), lists and tuples (same encoding), strings, numbers (numpy scalars as their
    Python values), booleans and ``None`` are supported.

    Examples
    --------
    >>> stable_hash({"b": 1, "a": (1, 2)}) == stable_hash({"a": [1, 2], "b": 1})
    True
    >>> len(stable_hash("x", n_chars=16))
    16
    """
    payload = json.dumps(_canonical(obj), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:n_chars]


def derive_seed(*parts: object) -> int:
    """A 64-bit seed derived from ``parts`` (e.g. ``(seed, task_name)``), stable across runs.

    Examples
    --------
    >>> derive_seed(1234, "arc_easy") == derive_seed(1234, "arc_easy")
    True
    >>> derive_seed(1234, "arc_easy") != derive_seed(1234, "piqa")
    True
    """
    return int(stable_hash(list(parts), n_chars=16), 16)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
