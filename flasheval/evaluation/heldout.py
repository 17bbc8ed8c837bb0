"""Held-out text for validation loss: each ``--heldout`` file's name and its rolling log-likelihood requests.

Input I/O happens only in :func:`load_heldout`; the loss itself is
:func:`flasheval.tasks.validation_loss` of the answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flasheval.errors import InputError
from flasheval.tasks import heldout_requests
from flasheval.types import RollingLoglikelihoodRequest

__all__ = ["HeldoutFile", "load_heldout"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldoutFile:
    """A held-out text file and its rolling log-likelihood requests (validation loss)."""

    name: str
    """The file's stem (``c4_val`` for ``c4_val.jsonl``): its key in the record and the task name of its requests."""
    path: Path
    requests: tuple[RollingLoglikelihoodRequest, ...]
    """One per document (:func:`flasheval.tasks.heldout_requests`)."""


def load_heldout(paths: Sequence[str | Path]) -> tuple[HeldoutFile, ...]:
    """Read each held-out file (JSON lines with ``text``, or plain text); two files may not share a stem."""
    files: list[HeldoutFile] = []
    for path in paths:
        name = Path(path).name.split(".")[0] or Path(path).name
        if any(f.name == name for f in files):
            raise InputError(f"two held-out files named {name!r}; rename one", path=path, field="--heldout")
        files.append(HeldoutFile(name=name, path=Path(path),
                                 requests=heldout_requests(path, task_name=f"heldout/{name}")))
    return tuple(files)
