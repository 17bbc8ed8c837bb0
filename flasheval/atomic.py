"""The one atomic write: every file flasheval writes whole (records, manifests, folder configs, reports, figures,
per-example records, caches) goes through :func:`atomic_file`.

A file is written to a temporary file in its own folder created with mode ``0o644`` (the kernel takes the process's
umask off it, as for any new file: ``0o644`` under the usual ``022``, ``0o600`` under ``077``), flushed and ``fsync``-ed, renamed
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
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["FILE_MODE", "atomic_file", "atomic_write_text", "atomic_write_bytes", "fsync_dir", "with_path"]

FILE_MODE = 0o644
"""Mode every file is created with, less the process's umask: readable by all, writable by its owner, never more open
than the umask allows (``tempfile.mkstemp``'s ``0o600``, which a rename keeps, is not used)."""
_ATTEMPTS = 100


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; on a clean exit it replaces ``path`` (see the module).

    The folder is created. Text is UTF-8. An exception inside the block removes the temporary file and leaves
    ``path`` untouched, then propagates.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(target)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        named = with_path(exc, target)
        if named is exc:
            raise
        raise named from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def with_path(exc: OSError, path: str | os.PathLike[str] | None) -> OSError:
    """``exc`` naming ``path`` where it names no file: a failed ``write`` or ``fsync`` ("No space left on device",
    a quota, an I/O error) says which file it was writing (of the same class, for the same errno)."""
    if exc.filename is not None or path is None or exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), os.fspath(path))


def _create_temporary(target: Path) -> tuple[int, str]:
    """A new file beside ``target``, opened for writing, mode :data:`FILE_MODE` less the umask (``O_EXCL``)."""
    for _ in range(_ATTEMPTS):
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), FILE_MODE), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{target.parent}: no free temporary name for {target.name} in {_ATTEMPTS} attempts")


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
