"""Durable append-only JSON-lines files: the one mechanism behind every crash-safe store.

The results store (:mod:`flasheval.engine.store.results`: a model's request results, a sweep checkpoint's
per-example scores) appends finished work as complete lines, one ``write`` + ``flush`` + ``fsync``
per batch (:func:`append_lines`), and on open cuts off a torn tail (bytes after the last newline,
left by a process killed mid-write) without touching any complete line. One writer fsyncs less
often: a replay sweep, whose scores cost nothing to recompute, writes and flushes each batch at once
(:func:`write_lines`: a killed process loses none) and fsyncs once per round (:func:`fsync_file`: a
power cut loses at most that round). What a *complete* but unreadable line means is the store's
policy (:mod:`flasheval.engine.store.shards`: skipped, and recomputed when asked again).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from flasheval.atomic import with_path

__all__ = ["JournalContents", "read_journal", "append_lines", "write_lines", "fsync_file", "truncate_journal"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalContents:
    """What :func:`read_journal` found."""

    lines: tuple[bytes, ...]
    """Every complete line (newline removed), in file order; line ``i`` is line number ``i + 1``."""
    torn_tail: int
    """Bytes after the last newline (0 when the last write completed)."""
    size: int
    """Size of the file read, in bytes."""


def read_journal(path: str | os.PathLike[str]) -> JournalContents:
    """Split ``path`` into complete lines and a torn tail (an absent file is empty).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "j.jsonl"
    >>> _ = p.write_bytes(b'{"a": 1}\\n{"a": 2}\\n{"a"')
    >>> c = read_journal(p)
    >>> len(c.lines), c.torn_tail
    (2, 4)
    """
    p = Path(path)
    if not p.exists():
        return JournalContents(lines=(), torn_tail=0, size=0)
    data = p.read_bytes()
    good_end = data.rfind(b"\n") + 1
    lines = tuple(data[:good_end].split(b"\n")[:-1]) if good_end else ()
    return JournalContents(lines=lines, torn_tail=len(data) - good_end, size=len(data))


def truncate_journal(path: str | os.PathLike[str], size: int) -> None:
    """Cut ``path`` to its first ``size`` bytes, durably (drops a torn or rejected tail)."""
    with open(path, "r+b") as fh:
        fh.truncate(size)
        os.fsync(fh.fileno())


def append_lines(target: str | os.PathLike[str] | BinaryIO, lines: Sequence[str]) -> None:
    """Append ``lines`` (without newlines) in one write, then flush and fsync.

    ``target`` is a path (opened and closed here) or a file already open in binary append mode.
    After this returns, every line is on disk; a crash during it leaves at most a torn tail.
    """
    _append(target, lines, sync=True)


def write_lines(target: str | os.PathLike[str] | BinaryIO, lines: Sequence[str]) -> None:
    """Append ``lines`` in one write and flush them to the operating system, without ``fsync``.

    A process killed afterwards loses none of them (the kernel holds them); a power cut may, until
    :func:`fsync_file`. For work that is cheap to redo (a replay sweep's scores).
    """
    _append(target, lines, sync=False)


def _append(target: str | os.PathLike[str] | BinaryIO, lines: Sequence[str], *, sync: bool) -> None:
    if not lines:
        return
    payload = ("\n".join(lines) + "\n").encode("utf-8")
    if isinstance(target, (str, os.PathLike)):
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        with open(target, "ab") as fh:
            _write(fh, payload, sync=sync)
    else:
        _write(target, payload, sync=sync)


def _write(fh: BinaryIO, payload: bytes, *, sync: bool) -> None:
    try:
        fh.write(payload)
        fh.flush()
        if sync:
            os.fsync(fh.fileno())
    except OSError as exc:  # a full disk names the file it was appending to
        named = with_path(exc, fh.name if isinstance(fh.name, str) else None)
        if named is exc:
            raise
        raise named from exc


def fsync_file(path: str | os.PathLike[str]) -> None:
    """``fsync`` the file at ``path`` (what :func:`write_lines` left to the operating system)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
