"""Crash-safe results store and the caching wrapper that serves from it.

A store folder holds one append-only JSON-lines shard per model, ``<folder>/shards/<hash>.jsonl``
(files and their recovery: :mod:`flasheval.engine.store.shards`). Each line is one finished
request: ``{"fp": model fingerprint, "key": request key, "kind": ..., "result": {...},
"crc": checksum}``. Lines are appended and ``fsync``-ed batch by batch by the model's single
writer, so after ``kill -9`` every batch that finished is on disk. Each shard has its own lock:
runs of different models write into one folder at once, and a second run of the same model is
refused when it opens the store, before it computes anything. A crash mid-write can leave one
torn last line: on open it fails its checksum, is dropped with a warning and cut off the file,
and no other line is touched. A corrupt line in the middle (disk damage) is skipped with a
warning, the rest kept, and its request is recomputed when asked again: the one policy for a
corrupt line, for evaluations, placements and sweeps alike. Why skipped and not refused: every line
is a cache of a deterministic computation guarded by its checksum, so skipping one costs only that
line's work and never serves a damaged value, while refusing would stop a run, or a sweep of days,
on one bad sector until someone edits the file by hand.
A store written by an earlier release (one ``results.jsonl`` for every model) is read as it is
and split into shards by the first writer that opens it.

The writer of a whole folder (a sweep, whose run folder holds one shard of per-example scores per
checkpoint) holds the folder's lock (:func:`~flasheval.engine.store.shards.lock_folder`) instead of a
lock per shard, and its stores keep no file open between batches (a sweep may hold hundreds); such a
writer may also set :attr:`ResultStore.sync_each` to ``False`` (each batch written and flushed to the
operating system, so a killed process loses none, and ``fsync``-ed by :meth:`ResultStore.sync`).

The key is ``(model fingerprint, request key)``: the request key hashes the request's
content only, so it does not depend on the world size, batch size, order or example id;
two tasks asking the same question of the same model share one stored answer.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from flasheval.engine.base import Backend, OnResults, Wrapper
from flasheval.engine.store.journal import append_lines, fsync_file, write_lines
from flasheval.engine.store.shards import (
    encode_record,
    fsync_dir,
    iter_store,
    load_legacy,
    load_shard,
    lock_shard,
    migrate_legacy,
    shard_path,
)
from flasheval.errors import BackendError
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

__all__ = ["ResultStore", "CachedBackend", "iter_store", "shard_path"]

logger = logging.getLogger(__name__)


class ResultStore:
    """Append-only results for one model fingerprint, in ``<folder>/shards/<hash>.jsonl``.

    Opening reads that model's shard only (plus, until a writer has migrated it, an earlier
    release's ``results.jsonl``): its cost does not grow with other models' results.

    Parameters
    ----------
    folder
        Where the store lives (created if missing). Several models may share one store, and
        runs of different models may write into it at the same time.
    fingerprint
        The model whose results are read and written.
    writer
        ``True`` in the single process that appends (the main process); readers only load.
    folder_locked
        The caller holds ``folder``'s lock (:func:`~flasheval.engine.store.shards.lock_folder`): this writer
        takes no shard lock and keeps no file open between batches.
    contents
        Readers only: start from these results and never read ``folder`` (what the other processes of a
        launch hold of the main process's store when they share no filesystem with it).

    Raises
    ------
    BackendError
        For a writer, when another run already writes this model into ``folder``.

    Attributes
    ----------
    path
        The model's shard file.
    """

    def __init__(self, folder: str | os.PathLike[str], *, fingerprint: str, writer: bool = True,
                 folder_locked: bool = False, contents: Mapping[str, Result] | None = None) -> None:
        if writer and contents is not None:
            raise ValueError("contents are for readers (writer=False); a writer reads its shard")
        self.folder = Path(folder)
        self.path = shard_path(self.folder, fingerprint)
        self.fingerprint = fingerprint
        self.writer = writer
        self.sync_each = True
        """``True``: every batch is fsync-ed; ``False``: written and flushed, fsync-ed by :meth:`sync`."""
        self._unsynced = False
        self._folder_locked = folder_locked
        self._fh: BinaryIO | None = None
        self._lock_fd: int | None = None
        try:
            self._results = self._open() if writer else dict(contents) if contents is not None else self._read()
        except BaseException:
            self.close()
            raise

    def _open(self) -> dict[str, Result]:
        """Migrate an old single file, take this model's lock, repair and load its shard, open it for appends."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        migrate_legacy(self.folder)
        if not self._folder_locked:
            self._lock_fd = lock_shard(self.folder, self.fingerprint)
        results = load_shard(self.path, self.fingerprint, writer=True)
        created = not self.path.exists()
        self._fh = self.path.open("ab")
        if created:
            os.fsync(self._fh.fileno())
            fsync_dir(self.path.parent)
        if self._folder_locked:  # appends open the file by path
            self._fh.close()
            self._fh = None
        return results

    def _read(self) -> dict[str, Result]:
        # The old file first: if a writer migrates it meanwhile, the shard read after holds its records.
        results = load_legacy(self.folder, self.fingerprint)
        results.update(load_shard(self.path, self.fingerprint, writer=False))
        return results

    def __len__(self) -> int:
        return len(self._results)

    def get(self, key: str) -> Result | None:
        """The stored result for request ``key``, or ``None``."""
        return self._results.get(key)

    def put_many(self, pairs: Sequence[tuple[str, Result]]) -> None:
        """Record finished results; the writer appends them durably (write, flush, fsync; see :attr:`sync_each`)."""
        fresh = [(key, result) for key, result in pairs if key not in self._results]
        for key, result in fresh:
            self._results[key] = result
        if not self.writer or not fresh:
            return
        lines = [encode_record(self.fingerprint, key, result) for key, result in fresh]
        target = self.path if self._fh is None else self._fh
        if self.sync_each:
            append_lines(target, lines)
        else:
            write_lines(target, lines)
            self._unsynced = True

    def results(self) -> dict[str, Result]:
        """Every stored ``key -> result`` (a copy)."""
        return dict(self._results)

    def sync(self) -> None:
        """``fsync`` what was appended since the last sync (``sync_each=False``); nothing to do otherwise."""
        if self._unsynced:
            fsync_file(self.path)
            self._unsynced = False

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


class CachedBackend(Wrapper):
    """Serve stored results and send only missing requests to ``backend``.

    Under data parallelism (``backend`` a :class:`~flasheval.engine.coordination.distributed.DistributedBackend`,
    ``share`` its ``from_main``) what counts as stored is the main process's store, on every process.
    Every batch the backend finishes is written to ``store`` before the next one starts,
    so an interrupted run loses at most the batch in flight. Requests with the same key
    (identical content) are computed once.

    Parameters
    ----------
    backend, store
        The backend asked for what ``store`` does not hold (the same fingerprint).
    share
        How the process that plans sees the stored answers: the data-parallel runner's
        :meth:`~flasheval.engine.coordination.distributed.DistributedBackend.from_main` (every process plans from the
        main process's store); ``None``: this process's own store.

    Attributes
    ----------
    n_computed
        Requests sent to the wrapped backend so far (the rest came from the store).
    """

    def __init__(self, backend: Backend, store: ResultStore, *,
                 share: Callable[[dict[str, Result]], dict[str, Result]] | None = None) -> None:
        if store.fingerprint != backend.fingerprint:
            raise ValueError("store and backend fingerprints differ")
        super().__init__(backend)
        self._store = store
        self._share = share
        self.n_computed = 0

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

        Under data parallelism ``share`` hands every process the main process's answers, so processes
        whose own store folders differ (no shared filesystem) still agree on what is left to compute and
        deal out the same work.
        """
        found = {r.key: stored for r in requests if (stored := self._store.get(r.key)) is not None}
        return found if self._share is None else self._share(found)

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
