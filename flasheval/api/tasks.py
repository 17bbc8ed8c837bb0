"""``flasheval.check_tasks``: every known task's file in a folder found, read and counted.

The one path behind ``flasheval tasks check``; ``tasks list`` prints the task registry
(:mod:`flasheval.tasks`) and needs no API function.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.errors import FlashevalError, InputError
from flasheval.tasks import load_suite, load_task_file, resolve_task_file, task_names, task_spec

__all__ = ["TaskFileCheck", "check_tasks"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskFileCheck:
    """One task of :func:`check_tasks`: its file found, read and counted, or why not."""

    task_name: str
    source: Any
    """The file found (a :class:`~flasheval.tasks.TaskFile`: a path, or a member of an archive; ``None``: missing)."""
    n_examples: int | None = None
    n_categories: int = 0
    expected: int | None = None
    """Examples in the known copy (``None``: not recorded)."""
    error: str | None = None
    """Why the file could not be read (one line)."""
    dataset_uri: str = ""

    @property
    def status(self) -> str:
        return "missing" if self.source is None else "error" if self.error is not None else "ok"


def check_tasks(task_dir: str | Path, *, suite: str | None = None) -> tuple[TaskFileCheck, ...]:
    """Find, read and count every known task's file in ``task_dir`` (only ``suite``'s tasks when given).

    A file that cannot be read is reported (``status`` ``error``), not raised: every task is checked.
    """
    if not isinstance(task_dir, (str, Path)) or not str(task_dir).strip():
        raise InputError(f"expected a task folder, got {task_dir!r}", field="DIR")
    names = task_names() if suite is None else load_suite(suite).task_names
    folder = Path(task_dir)
    if not folder.is_dir():
        raise InputError("not a directory", path=folder)
    rows = []
    for name in names:
        spec = task_spec(name)
        source = resolve_task_file(spec, folder)
        if source is None:
            rows.append(TaskFileCheck(task_name=name, source=None, dataset_uri=spec.dataset_uri))
            continue
        try:
            examples = load_task_file(spec, source)
        except FlashevalError as exc:
            rows.append(TaskFileCheck(task_name=name, source=source, error=str(exc)))
            continue
        rows.append(TaskFileCheck(task_name=name, source=source, n_examples=len(examples),
                                  n_categories=len({e.category for e in examples}) if spec.has_categories else 0,
                                  expected=spec.n_examples_expected))
    return tuple(rows)
