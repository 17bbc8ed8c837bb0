"""The one atomic write: every file flasheval writes whole (records, manifests, folder configs, reports, figures,
per-example records, caches) goes through :func:`atomic_file`.

A file is written to a temporary file in its own folder, flushed and ``fsync``-ed, given mode ``0o644``, renamed
over the target (``os.replace``, atomic on one filesystem) and the folder is ``fsync``-ed where the platform allows,
so a reader sees the old file or the new one, never half of one, and a crash after the call returns loses neither.
A failure mid-write leaves the old file as it was and removes the temporary file. Appended files (the results
store, journals) are not written whole and keep their own writer (:mod:`flasheval.engine.store.journal`).

Examples
--------
>>> import os, stat, tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> atomic_write_text(folder / "a.json", '{"a": 1}\\n').read_text()
'{"a": 1}\\n'
>>> oct(stat.S_IMODE(os.stat(folder / "a.json").st_mode)), sorted(p.name for p in folder.iterdir())
('0o644', ['a.json'])
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["FILE_MODE", "atomic_file", "atomic_write_text", "atomic_write_bytes", "fsync_dir"]

FILE_MODE = 0o644
"""Mode of every file written: readable by all, writable by its owner, whatever the process's umask (a temporary
file is created ``0o600``, which a rename would otherwise keep)."""


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; on a clean exit it replaces ``path`` (see the module).

    The folder is created. Text is UTF-8. An exception inside the block removes the temporary file and leaves
    ``path`` untouched, then propagates.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_file`) and return the path."""
    with atomic_file(path) as fh:
        fh.write(text)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_file`) and return the path."""
    with atomic_file(path, binary=True) as fh:
        fh.write(data)
    return Path(path)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make new entries of directory ``path`` durable (a no-op where directories cannot be fsync-ed)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
