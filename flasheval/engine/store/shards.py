"""The results store's files: one append-only shard per model, and the migration of the old single file.

Layout of a store folder::

    <folder>/shards/<h>.jsonl          one model's results, h = stable_hash(fingerprint) (32 hex digits)
    <folder>/shards/<h>.lock           held (flock) by the one run writing that model
    <folder>/migration.lock            held while an old results.jsonl is split into shards
    <folder>/results.jsonl.migrated    the old single file, kept after migration (safe to delete)
    <folder>/folder.lock               held (flock) by a writer of the whole folder (a sweep's run folder)

Every line is one record, ``{"fp", "key", "kind", "result", "crc"}``, in the format the single-file
store wrote (:func:`encode_record`), so the old file's lines move into shards byte for byte. A
shard is named by a hash because fingerprints are long and may hold any character; the full
fingerprint stays in every record and is checked on read. Opening a model's results costs one
``stat`` for the old file plus reading that model's own shard: other models' shards are never
opened.

Recovery on open is the journal's (:mod:`flasheval.engine.store.journal`): a torn last line is cut off
by the writer with a warning, a corrupt line in the middle is skipped with a warning naming
``file:line``, and no other line is touched (the store's one policy for a corrupt line, and why:
:mod:`flasheval.engine.store.results`). Besides request results a shard may hold per-example scores
(:class:`~flasheval.engine.store.stored_score.StoredScore`, kind ``score``: a sweep checkpoint's).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from flasheval.atomic import fsync_dir  # the one directory fsync, re-exported for the store
from flasheval.engine.store.journal import JournalContents, append_lines, read_journal, truncate_journal
from flasheval.engine.store.stored_score import StoredScore
from flasheval.errors import BackendError
from flasheval.hashing import stable_hash
from flasheval.types import GenerationResult, LoglikelihoodResult, Result, RollingLoglikelihoodResult

__all__ = [
    "LEGACY_FILE",
    "MIGRATED_FILE",
    "SHARDS_DIR",
    "StoredRecord",
    "encode_record",
    "decode_record",
    "shard_path",
    "lock_shard",
    "load_shard",
    "load_legacy",
    "migrate_legacy",
    "iter_store",
    "fsync_dir",
    "lock_folder",
    "FOLDER_LOCK",
]

logger = logging.getLogger(__name__)

LEGACY_FILE = "results.jsonl"
"""The single file every model's results shared before shards (read, then migrated)."""
MIGRATED_FILE = LEGACY_FILE + ".migrated"
"""What the old file is renamed to once its records are in shards."""
SHARDS_DIR = "shards"
"""The folder, inside a store folder, holding one ``<hash>.jsonl`` per model."""
_LEGACY_LOCK = "results.lock"  # the lock file the single-file store's writer held
_MIGRATION_LOCK = "migration.lock"
FOLDER_LOCK = "folder.lock"
"""Held by a writer of a whole store folder (:func:`lock_folder`)."""


_KINDS: dict[str, type] = {
    "ll": LoglikelihoodResult,
    "gen": GenerationResult,
    "roll": RollingLoglikelihoodResult,
    "score": StoredScore,
}
_KIND_OF = {cls: kind for kind, cls in _KINDS.items()}
_SCALARS = (str, int, float, bool)
_FIELD_TYPES = {"str": {str}, "int": {int}, "float": {int, float}, "bool": {bool}, "int | None": {int, type(None)},
                "float | None": {int, float, type(None)}}  # exact types: a bool is no int here
_FIELDS_OF = {kind: ({f.name: _FIELD_TYPES.get(str(f.type)) for f in dataclasses.fields(cls)},
                     {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING})
              for kind, cls in _KINDS.items()}
"""Per kind, each result field's types (``None``: any) and the required fields: a record whose checksum matches
but whose result is not one of its kind (a score of ``null``, ``"x"`` or NaN, a negative count) is a corrupt line."""


def _result_fits(kind: str, result: object) -> bool:
    types, required = _FIELDS_OF[kind]
    if not isinstance(result, dict) or not required <= result.keys() <= types.keys():
        return False
    return all(types[name] is None or (type(value) in types[name] and not (type(value) is int and value < 0))
               for name, value in result.items()) and (kind != "score" or math.isfinite(result["score"]))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StoredRecord:
    """One record of a store folder, as :func:`iter_store` reads it."""

    fingerprint: str
    """The model the result belongs to."""
    key: str
    """The request key (a hash of the request's content)."""
    result: Result
    """The stored result."""
    path: Path
    """The file the record is in."""
    line: int
    """Its 1-based line number there."""


def _checksum(record: Mapping[str, Any]) -> str:
    """``stable_hash`` of the record without its ``crc``, the same digest by a faster route.

    A record decoded from JSON (or built by :func:`encode_record`) holds only string keys,
    strings, numbers, booleans, ``None``, lists and tuples, for which ``stable_hash``'s canonical
    form is plain sorted-key JSON; NaN and infinities (which it spells differently) take the
    general path.
    """
    body = {k: v for k, v in record.items() if k != "crc"}
    try:
        payload = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError):
        return stable_hash(body, n_chars=16)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def encode_record(fingerprint: str, key: str, result: Result) -> str:
    """One store line (no newline) for ``result`` of request ``key`` of model ``fingerprint``.

    Examples
    --------
    >>> from flasheval.types import RollingLoglikelihoodResult
    >>> line = encode_record("m", "k", RollingLoglikelihoodResult(task_name="t", example_id="0",
    ...                      logprob_sum=-1.5, n_tokens=2, n_bytes=7))
    >>> decode_record(line.encode())["result"]["n_bytes"]
    7
    """
    record = {"fp": fingerprint, "key": key, "kind": _KIND_OF[type(result)], "result": _fields(result)}
    record["crc"] = _checksum(record)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _fields(result: Result) -> dict[str, Any]:
    """``dataclasses.asdict(result)``, without its deep copy when every field is a plain scalar (all results today)."""
    values = {field.name: getattr(result, field.name) for field in dataclasses.fields(result)}
    if all(value is None or type(value) in _SCALARS for value in values.values()):
        return values
    return dataclasses.asdict(result)


def decode_record(line: bytes) -> dict[str, Any] | None:
    """The record on ``line``, or ``None`` when it is torn or corrupt (bad JSON, checksum or kind)."""
    try:
        record = json.loads(line)
        if not isinstance(record, dict) or record.get("crc") != _checksum(record) or record["kind"] not in _KINDS:
            return None
        if not isinstance(record["fp"], str) or not isinstance(record["key"], str):
            return None
        if not _result_fits(record["kind"], record.get("result")):
            return None
        return record
    except (ValueError, KeyError, TypeError):
        return None


def _result_of(record: Mapping[str, Any]) -> Result:
    return _KINDS[record["kind"]](**record["result"])


def shard_path(folder: str | os.PathLike[str], fingerprint: str) -> Path:
    """Where model ``fingerprint``'s results live in store ``folder`` (the file may not exist yet).

    Examples
    --------
    >>> shard_path("runs/store", "hf:org/name@abc|bf16").name
    '...jsonl'
    >>> shard_path("s", "a") == shard_path("s", "a") != shard_path("s", "b")
    True
    """
    return Path(folder) / SHARDS_DIR / f"{stable_hash(fingerprint)}.jsonl"


def _flock(path: Path, *, blocking: bool, folder: Path) -> int | None:
    """An exclusive ``flock`` on ``path`` (created if missing): its descriptor, or ``None`` when held elsewhere."""
    import fcntl

    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise BackendError(f"results store {str(folder)!r}: the filesystem refuses file locks ({exc.strerror}); "
                               "on Lustre mount with -o flock, on NFS run the lock daemon (or use a local folder)") from exc
        raise
    return fd


def lock_folder(folder: str | os.PathLike[str]) -> int | None:
    """Hold ``<folder>/folder.lock`` (the folder is created if missing): its descriptor, or ``None`` when another
    process holds it. The one writer of a whole folder (a sweep's run folder) takes it instead of shard locks."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return _flock(folder / FOLDER_LOCK, blocking=False, folder=folder)


def lock_shard(folder: str | os.PathLike[str], fingerprint: str) -> int:
    """Hold the write lock of model ``fingerprint``'s shard; its descriptor (close it to release).

    Raises
    ------
    BackendError
        When another run (or store object) already writes that model into ``folder``.
    """
    path = shard_path(folder, fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _flock(path.with_suffix(".lock"), blocking=False, folder=Path(folder))
    if fd is None:
        raise BackendError(f"results store {str(folder)!r}: another flasheval run holds the shard of model "
                           f"{fingerprint!r} ({SHARDS_DIR}/{path.name}); wait for it to finish, or give this run "
                           "its own store folder")
    return fd


def _warn_torn(path: Path, number: int) -> None:
    logger.warning("%s:%d: torn last record (interrupted write) dropped; it will be recomputed", path, number)


def _valid_records(path: Path, contents: JournalContents, *, warn_torn: bool) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """``(line number, line, record)`` of every readable record; warns about the others."""
    n_lines = len(contents.lines)
    for number, line in enumerate(contents.lines, start=1):
        record = decode_record(line)
        if record is not None:
            yield number, line, record
        elif number == n_lines and not contents.torn_tail:
            if warn_torn:  # a complete last line that fails its checksum is a torn write too
                _warn_torn(path, number)
        else:
            logger.warning("%s:%d: corrupt record skipped; other records kept", path, number)
    if contents.torn_tail and warn_torn:
        _warn_torn(path, n_lines + 1)


def _good_end(contents: JournalContents) -> int:
    """The bytes to keep: all but a torn tail, or a complete last line that fails its checksum."""
    end = contents.size - contents.torn_tail
    if not contents.torn_tail and contents.lines and decode_record(contents.lines[-1]) is None:
        end -= len(contents.lines[-1]) + 1
    return end


def load_shard(path: Path, fingerprint: str, *, writer: bool) -> dict[str, Result]:
    """Model ``fingerprint``'s results in shard ``path`` (empty when it does not exist).

    ``writer``: the caller holds the shard's lock; a torn tail is then warned about and cut off
    (durably). A record of another model (a misplaced or copied file) is skipped with a warning.
    """
    contents = read_journal(path)
    results: dict[str, Result] = {}
    misplaced: list[tuple[int, str]] = []
    for number, _, record in _valid_records(path, contents, warn_torn=writer):
        if record["fp"] != fingerprint:
            misplaced.append((number, record["fp"]))
            continue
        results.setdefault(record["key"], _result_of(record))
    if misplaced:  # one warning per file: a misplaced copy would otherwise warn once per line
        logger.warning("%s:%d: %d record(s) of another model (%r) skipped; this file holds %r", path, misplaced[0][0],
                       len(misplaced), misplaced[0][1], fingerprint)
    if writer:
        end = _good_end(contents)
        if end < contents.size:
            truncate_journal(path, end)
    return results


def _read_legacy(folder: Path) -> tuple[Path, JournalContents]:
    path = folder / LEGACY_FILE
    try:
        return path, read_journal(path)
    except FileNotFoundError:  # migrated by another process between the stat and the read
        return path, JournalContents(lines=(), torn_tail=0, size=0)


def load_legacy(folder: str | os.PathLike[str], fingerprint: str) -> dict[str, Result]:
    """Model ``fingerprint``'s results in an unmigrated ``<folder>/results.jsonl`` (one ``stat`` when none).

    For readers (``writer=False`` stores): they never migrate, so until a writer opens the folder
    they find its results in the old file. Reads every line of every model, as the old store did.
    """
    path, contents = _read_legacy(Path(folder))
    return {record["key"]: _result_of(record)
            for _, _, record in _valid_records(path, contents, warn_torn=False) if record["fp"] == fingerprint}


def migrate_legacy(folder: str | os.PathLike[str]) -> None:
    """Split an old ``<folder>/results.jsonl`` into shards, once, under the folder's migration lock.

    Each model's records are appended (byte for byte, each key once) to its shard, skipping keys
    the shard already holds, so an interrupted migration simply runs again. Every shard is
    fsync-ed before the old file is renamed to ``results.jsonl.migrated``. One ``stat`` when
    there is no old file.

    Raises
    ------
    BackendError
        When a run of an earlier release is still writing the old file, or another run holds
        the shard of one of its models.
    """
    folder = Path(folder)
    if not (folder / LEGACY_FILE).exists():
        return
    lock = _flock(folder / _MIGRATION_LOCK, blocking=True, folder=folder)
    try:
        if (folder / LEGACY_FILE).exists():  # not migrated by another process while this one waited
            _split_legacy(folder)
    finally:
        if lock is not None:
            os.close(lock)


def _split_legacy(folder: Path) -> None:
    old_writer = _flock(folder / _LEGACY_LOCK, blocking=False, folder=folder)
    if old_writer is None:
        raise BackendError(f"results store {str(folder)!r}: a run of an earlier flasheval release is writing "
                           f"{LEGACY_FILE}; let it finish before opening the store with this release")
    try:
        path, contents = _read_legacy(folder)
        by_model: dict[str, dict[str, bytes]] = {}
        for _, line, record in _valid_records(path, contents, warn_torn=True):
            by_model.setdefault(record["fp"], {}).setdefault(record["key"], line)
        (folder / SHARDS_DIR).mkdir(exist_ok=True)
        for fingerprint, lines in by_model.items():
            _merge_into_shard(folder, fingerprint, lines)
        fsync_dir(folder / SHARDS_DIR)
        os.replace(path, folder / MIGRATED_FILE)
        fsync_dir(folder)
    finally:
        os.close(old_writer)
    n_results = sum(len(lines) for lines in by_model.values())
    logger.warning("%s: migrated %d results of %d models into %s/ (one file per model); the old file is kept as %s",
                   path, n_results, len(by_model), folder / SHARDS_DIR, MIGRATED_FILE)


def _merge_into_shard(folder: Path, fingerprint: str, lines: Mapping[str, bytes]) -> None:
    fd = lock_shard(folder, fingerprint)
    try:
        path = shard_path(folder, fingerprint)
        have = load_shard(path, fingerprint, writer=True) if path.exists() else {}
        append_lines(path, [line.decode("utf-8") for key, line in lines.items() if key not in have])
    finally:
        os.close(fd)


def iter_store(folder: str | os.PathLike[str]) -> Iterator[StoredRecord]:
    """Every readable record in store ``folder``: each shard's, then an unmigrated ``results.jsonl``'s.

    Read-only (nothing is repaired or migrated); duplicates, if any, are all yielded, so a caller
    can check that each result was written once. Corrupt lines are skipped with a warning.

    Examples
    --------
    >>> import tempfile
    >>> from flasheval.engine.store.results import ResultStore
    >>> from flasheval.types import RollingLoglikelihoodResult
    >>> folder = tempfile.mkdtemp()
    >>> with ResultStore(folder, fingerprint="m") as store:
    ...     store.put_many([("k", RollingLoglikelihoodResult(task_name="t", example_id="0", logprob_sum=-1.0,
    ...                                                       n_tokens=1, n_bytes=3))])
    >>> [(r.fingerprint, r.key, r.line) for r in iter_store(folder)]
    [('m', 'k', 1)]
    """
    folder = Path(folder)
    names: dict[str, str] = {}
    for path in sorted((folder / SHARDS_DIR).glob("*.jsonl")):
        for number, _, record in _valid_records(path, read_journal(path), warn_torn=False):
            fingerprint = record["fp"]
            if fingerprint not in names:
                names[fingerprint] = shard_path(folder, fingerprint).name
            if path.name != names[fingerprint]:
                logger.warning("%s:%d: record of another model (%r) skipped", path, number, fingerprint)
                continue
            yield StoredRecord(fingerprint=record["fp"], key=record["key"], result=_result_of(record), path=path,
                               line=number)
    path, contents = _read_legacy(folder)
    for number, _, record in _valid_records(path, contents, warn_torn=False):
        yield StoredRecord(fingerprint=record["fp"], key=record["key"], result=_result_of(record), path=path, line=number)
