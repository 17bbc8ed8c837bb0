"""Crash-safe results store of a sweep: per-(checkpoint, dataset, example) scores, append-only JSONL.

Each batch of scores a scorer returns is appended as complete lines and ``fsync``-ed before
the sweep uses it, so a sweep killed at any moment keeps every batch that finished. A replay
sweep (whose scores cost nothing to recompute) sets :attr:`ResultsStore.sync_each` to ``False``:
batches are written and flushed to the operating system at once (a killed process loses none)
and ``fsync``-ed once per round by :meth:`ResultsStore.sync` (a power cut loses at most that round). On load,
a torn last line (the process died mid-write: no final newline, or not valid JSON) is cut off
and logged; a malformed line anywhere else is refused in one line naming the file and line.
:class:`StoredScorer` wraps any :class:`~flasheval.placement.scorers.ExampleScorer` so that a rerun is
served from the store and only asks the model for what is missing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from flasheval.engine.journal import append_lines, read_journal, truncate_journal
from flasheval.errors import InputError
from flasheval.placement.scorers import ExampleScorer, ScoredExamples

__all__ = ["ResultsStore", "StoredScorer"]

logger = logging.getLogger(__name__)

_FIELDS = ("model_id", "task_name", "example_id", "score", "n_tokens")


class ResultsStore:
    """Scores already computed, keyed by ``(model_id, task_name, example_id)``, backed by ``path``.

    Parameters
    ----------
    path
        The JSONL file (created on the first append).
    writer
        ``False`` for a copy held by a process that is not the main one of a launch: it never
        reads or writes ``path`` and starts from ``rows`` (the main process's :attr:`rows`).
    rows
        Starting contents of a copy (``writer=False`` only).
    """

    def __init__(self, path: str | os.PathLike[str], *, writer: bool = True,
                 rows: dict[tuple[str, str, str], tuple[float, int | None]] | None = None) -> None:
        if writer and rows is not None:
            raise ValueError("rows are for copies (writer=False); a writer reads its file")
        self.path = Path(path)
        self.writer = writer
        self.sync_each = True
        """``True``: every append is fsync-ed; ``False``: written and flushed, fsync-ed by :meth:`sync`."""
        self._unsynced = False
        self._rows: dict[tuple[str, str, str], tuple[float, int | None]] = dict(rows or {})
        if writer and self.path.exists():
            self._load()

    @property
    def rows(self) -> dict[tuple[str, str, str], tuple[float, int | None]]:
        """Every stored ``(model_id, task_name, example_id) -> (score, n_tokens)`` (a copy)."""
        return dict(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def _load(self) -> None:
        contents = read_journal(self.path)
        if contents.torn_tail:
            logger.warning("%s: dropped a torn last line (%d bytes) left by an interrupted write", self.path,
                           contents.torn_tail)
            truncate_journal(self.path, contents.size - contents.torn_tail)
        for number, line in enumerate(contents.lines, start=1):
            try:
                row = json.loads(line)
                key = (str(row["model_id"]), str(row["task_name"]), str(row["example_id"]))
                tokens = row.get("n_tokens")
                self._rows[key] = (float(row["score"]), None if tokens is None else int(tokens))
            except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
                raise InputError(f"corrupt results-store line ({exc.__class__.__name__}: {exc})", path=self.path,
                                 line=number) from None

    def sync(self) -> None:
        """``fsync`` what was appended since the last sync (``sync_each=False``); nothing to do otherwise."""
        if self._unsynced:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._unsynced = False

    def get(self, model_id: str, task_name: str, example_id: str) -> tuple[float, int | None] | None:
        """``(score, n_tokens)`` if stored."""
        return self._rows.get((model_id, task_name, example_id))

    def append(self, model_id: str, task_name: str, example_ids: Sequence[str], scored: ScoredExamples) -> None:
        """Append one batch durably (one write, flush, fsync; a copy only indexes it) and index it."""
        tokens = scored.n_tokens
        lines = []
        for i, example_id in enumerate(example_ids):
            n_tok = None if tokens is None else int(tokens[i])
            row = dict(zip(_FIELDS, (model_id, task_name, example_id, float(scored.scores[i]), n_tok)))
            lines.append(json.dumps(row, separators=(",", ":")))
        if self.writer and self.sync_each:
            append_lines(self.path, lines)
        elif self.writer:
            with open(self.path, "ab") as fh:  # closed, hence in the operating system's hands: a kill loses nothing
                fh.write(("\n".join(lines) + "\n").encode("utf-8"))
            self._unsynced = True
        for i, example_id in enumerate(example_ids):
            self._rows[(model_id, task_name, example_id)] = (
                float(scored.scores[i]), None if tokens is None else int(tokens[i]))


class StoredScorer:
    """An :class:`~flasheval.placement.scorers.ExampleScorer` that answers from a :class:`ResultsStore` first.

    Examples it has to compute are asked of ``inner`` in one call and appended to the store
    before they are returned. ``n_computed`` counts them (0 on a fully resumed run).
    """

    def __init__(self, inner: ExampleScorer, store: ResultsStore, model_id: str) -> None:
        self.inner = inner
        self.store = store
        self.model_id = model_id
        self.n_parameters = getattr(inner, "n_parameters", None)
        self.n_computed = 0

    def score(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        missing = [e for e in example_ids if self.store.get(self.model_id, task_name, e) is None]
        if missing:
            got = self.inner.score(task_name, missing)
            if got.scores.shape != (len(missing),):
                raise ValueError(f"scorer returned {got.scores.shape} scores for {len(missing)} examples of {task_name}")
            self.store.append(self.model_id, task_name, missing, got)
            self.n_computed += len(missing)
        rows = [self.store.get(self.model_id, task_name, e) for e in example_ids]
        scores = np.array([r[0] for r in rows], dtype=np.float64)  # type: ignore[index]
        has_tokens = all(r[1] is not None for r in rows)  # type: ignore[index]
        tokens = np.array([r[1] for r in rows], dtype=np.int64) if has_tokens and rows else None  # type: ignore[index]
        return ScoredExamples(scores=scores, n_tokens=tokens)
