"""Crash-safe results store and the caching wrapper that serves from it.

The store is one append-only JSON-lines file (``results.jsonl``). Each line is one finished
request: ``{"fp": model fingerprint, "key": request key, "kind": ..., "result": {...},
"crc": checksum}``. Lines are appended and ``fsync``-ed batch by batch by the single writer
(the main process; a lock file refuses a second writer), so after ``kill -9`` every batch
that finished is on disk. A crash mid-write can leave one torn last line: on open it fails
its checksum, is dropped with a warning and cut off the file, and no other line is touched.
A corrupt line in the middle (disk damage) is skipped with a warning, the rest kept.

The key is ``(model fingerprint, request key)``: the request key hashes the request's
content only, so it does not depend on the world size, batch size, order or example id;
two tasks asking the same question of the same model share one stored answer.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from flasheval.engine.base import Backend, OnResults
from flasheval.engine.journal import append_lines, read_journal, truncate_journal
from flasheval.errors import BackendError
from flasheval.hashing import stable_hash
from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    Request,
    Result,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["ResultStore", "CachedBackend", "STORE_FILE"]

logger = logging.getLogger(__name__)

STORE_FILE = "results.jsonl"
_KINDS: dict[str, type] = {
    "ll": LoglikelihoodResult,
    "gen": GenerationResult,
    "roll": RollingLoglikelihoodResult,
}
_KIND_OF = {cls: kind for kind, cls in _KINDS.items()}


def _checksum(record: dict[str, Any]) -> str:
    return stable_hash({k: v for k, v in record.items() if k != "crc"}, n_chars=16)


def _encode(fingerprint: str, key: str, result: Result) -> str:
    record = {"fp": fingerprint, "key": key, "kind": _KIND_OF[type(result)], "result": dataclasses.asdict(result)}
    record["crc"] = _checksum(record)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _decode(line: bytes) -> dict[str, Any] | None:
    """The record on ``line``, or ``None`` when it is torn or corrupt."""
    try:
        record = json.loads(line)
        if not isinstance(record, dict) or record.get("crc") != _checksum(record) or record["kind"] not in _KINDS:
            return None
        return record
    except (ValueError, KeyError, TypeError):
        return None


class ResultStore:
    """Append-only results for one model fingerprint, in ``<folder>/results.jsonl``.

    Parameters
    ----------
    folder
        Where the store lives (created if missing). Several models may share one store.
    fingerprint
        The model whose results are read and written; other models' lines are kept but ignored.
    writer
        ``True`` in the single process that appends (the main process); readers only load.
    """

    def __init__(self, folder: str | os.PathLike[str], *, fingerprint: str, writer: bool = True) -> None:
        self.path = Path(folder) / STORE_FILE
        self.fingerprint = fingerprint
        self.writer = writer
        self._results: dict[str, Result] = {}
        self._fh = None
        self._lock_fd: int | None = None
        if writer:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._acquire_lock()
        self._load()
        if writer:
            self._fh = self.path.open("ab")

    def _acquire_lock(self) -> None:
        import fcntl

        fd = os.open(self.path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise BackendError(f"results store {str(self.path)!r} is in use by another flasheval run") from exc
        self._lock_fd = fd

    def _load(self) -> None:
        contents = read_journal(self.path)
        good_end = contents.size - contents.torn_tail
        n_lines = len(contents.lines)
        for number, line in enumerate(contents.lines, start=1):
            record = _decode(line)
            if record is None:
                if number == n_lines and not contents.torn_tail:
                    # A complete last line that fails its checksum is a torn write too.
                    good_end -= len(line) + 1
                    self._warn_torn(number)
                else:
                    logger.warning("%s:%d: corrupt record skipped; other records kept", self.path, number)
                continue
            if record["fp"] == self.fingerprint:
                self._results[record["key"]] = _KINDS[record["kind"]](**record["result"])
        if contents.torn_tail:
            self._warn_torn(n_lines + 1)
        if self.writer and good_end < contents.size:
            truncate_journal(self.path, good_end)

    def _warn_torn(self, number: int) -> None:
        if self.writer:
            logger.warning("%s:%d: torn last record (interrupted write) dropped; it will be recomputed", self.path, number)

    def __len__(self) -> int:
        return len(self._results)

    def get(self, key: str) -> Result | None:
        """The stored result for request ``key``, or ``None``."""
        return self._results.get(key)

    def put_many(self, pairs: Sequence[tuple[str, Result]]) -> None:
        """Record finished results; the writer appends them durably (write, flush, fsync)."""
        fresh = [(key, result) for key, result in pairs if key not in self._results]
        for key, result in fresh:
            self._results[key] = result
        if self._fh is not None and fresh:
            append_lines(self._fh, [_encode(self.fingerprint, key, result) for key, result in fresh])

    def close(self) -> None:
        """Close the file and release the writer lock."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _restamp(result: Result, request: Request) -> Result:
    """A stored answer re-labelled with the ids of the request now asking (keys hash content only)."""
    ids = {"task_name": request.task_name, "example_id": request.example_id}
    if isinstance(request, LoglikelihoodRequest):
        ids["choice_index"] = request.choice_index
    return dataclasses.replace(result, **ids)


class CachedBackend:
    """Serve stored results and send only missing requests to ``backend``.

    Under data parallelism (``backend`` a :class:`~flasheval.engine.distributed.DistributedBackend`)
    what counts as stored is the main process's store, on every process.
    Every batch the backend finishes is written to ``store`` before the next one starts,
    so an interrupted run loses at most the batch in flight. Requests with the same key
    (identical content) are computed once.

    Attributes
    ----------
    n_computed
        Requests sent to the wrapped backend so far (the rest came from the store).
    """

    def __init__(self, backend: Backend, store: ResultStore) -> None:
        if store.fingerprint != backend.fingerprint:
            raise ValueError("store and backend fingerprints differ")
        self._backend = backend
        self._store = store
        self.n_computed = 0

    @property
    def fingerprint(self) -> str:
        """The wrapped backend's fingerprint."""
        return self._backend.fingerprint

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """See :meth:`flasheval.engine.base.Backend.loglikelihood`."""
        return self._serve(requests, self._backend.loglikelihood, on_results)  # type: ignore[arg-type]

    def generate(
        self, requests: Sequence[GenerationRequest], *, on_results: OnResults | None = None
    ) -> list[GenerationResult]:
        """See :meth:`flasheval.engine.base.Backend.generate`."""
        return self._serve(requests, self._backend.generate, on_results)  # type: ignore[arg-type]

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """See :meth:`flasheval.engine.base.Backend.loglikelihood_rolling`."""
        return self._serve(requests, self._backend.loglikelihood_rolling, on_results)  # type: ignore[arg-type]

    def _stored(self, requests: Sequence[Request]) -> dict[str, Result]:
        """The stored answers to ``requests``, as the process that plans sees them.

        A data-parallel backend (one with ``from_main``) hands every process the main process's
        answers, so processes whose own store folders differ (no shared filesystem) still agree
        on what is left to compute and deal out the same work.
        """
        found = {r.key: stored for r in requests if (stored := self._store.get(r.key)) is not None}
        share = getattr(self._backend, "from_main", None)
        return found if share is None else share(found)

    def _serve(self, requests: Sequence[Request], method: Callable[..., list[Any]], on_results: OnResults | None) -> list[Any]:
        results: list[Result | None] = [None] * len(requests)
        waiting: dict[str, list[int]] = {}
        found = self._stored(requests)
        for index, request in enumerate(requests):
            stored = found.get(request.key)
            if stored is not None:
                results[index] = _restamp(stored, request)
            else:
                waiting.setdefault(request.key, []).append(index)
        if on_results is not None and len(waiting) < len(requests):
            on_results([(i, r) for i, r in enumerate(results) if r is not None])
        todo = [requests[indices[0]] for indices in waiting.values()]

        def record(pairs: Sequence[tuple[int, Result]]) -> None:
            self._store.put_many([(todo[j].key, result) for j, result in pairs])
            done = []
            for j, result in pairs:
                for index in waiting[todo[j].key]:
                    results[index] = _restamp(result, requests[index])
                    done.append((index, results[index]))
            if on_results is not None:
                on_results(done)

        if todo:
            self.n_computed += len(todo)
            returned = method(todo, on_results=record)
            # A backend need not report batches as they finish; record whatever it did not report.
            unreported = [(j, result) for j, result in enumerate(returned) if results[waiting[todo[j].key][0]] is None]
            if unreported:
                record(unreported)
        missing = sum(r is None for r in results)
        if missing:
            raise BackendError(f"backend returned no result for {missing} request(s)")
        return results
