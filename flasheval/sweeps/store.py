"""A sweep checkpoint's scores in the engine's results store, and the scorer that answers from them.

Every checkpoint of a sweep has its own shard of per-example scores in the run folder
(:class:`~flasheval.engine.store.results.ResultStore` under :func:`score_fingerprint`, records
:class:`~flasheval.engine.store.stored_score.StoredScore` under :func:`~flasheval.engine.store.stored_score.score_key`):
the same store, file format, checksums, recovery and corrupt-line policy (skipped, recomputed when
asked again) as every evaluation and live placement. :class:`StoredScorer` wraps any
:class:`~flasheval.reference.scoring.scorers.ExampleScorer` so that a rerun is served from the store and only
asks the model for what is missing. :func:`read_legacy_scores` reads the single ``scores.jsonl`` of a
run folder written before store format 2 (:mod:`flasheval.sweeps.folder` migrates it once).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from flasheval.engine.store.journal import read_journal
from flasheval.engine.store.results import ResultStore
from flasheval.engine.store.stored_score import StoredScore, score_key
from flasheval.reference.scoring.scorers import ExampleScorer, OneTask, ScoredExamples

__all__ = ["score_fingerprint", "StoredScorer", "read_legacy_scores"]

logger = logging.getLogger(__name__)


def score_fingerprint(model_id: str) -> str:
    """The store fingerprint of sweep checkpoint ``model_id``'s per-example scores.

    Examples
    --------
    >>> score_fingerprint("meta/llama-3-70b")
    'sweep-scores:meta/llama-3-70b'
    """
    return f"sweep-scores:{model_id}"


class StoredScorer(OneTask):
    """An :class:`~flasheval.reference.scoring.scorers.ExampleScorer` that answers from a checkpoint's store first.

    The examples of every ask that it has to compute are asked of ``inner`` in ONE ``score_many`` call (none
    when the store holds them all) and put in ``store`` (written before they are returned). ``n_computed``
    counts them (0 on a fully resumed run).
    """

    def __init__(self, inner: ExampleScorer, store: ResultStore) -> None:
        self.inner = inner
        self.store = store
        self.n_parameters = getattr(inner, "n_parameters", None)
        self.n_computed = 0

    def score_many(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        missing = self.missing(asks)
        return self.settle(asks, missing, self.inner.score_many(missing) if missing else [])

    def missing(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[tuple[str, list[str]]]:
        """What of ``asks`` the store lacks, per task (tasks with nothing missing left out): what ``inner`` computes.

        With :meth:`settle` it splits :meth:`score_many` in two, so that an executor can have the missing examples
        computed elsewhere (a Ray actor) and the store written here, by the one process that writes it."""
        missing = [(task_name, [e for e in ids if self.store.get(score_key(task_name, e)) is None])
                   for task_name, ids in asks]
        return [(task_name, ids) for task_name, ids in missing if ids]

    def settle(self, asks: Sequence[tuple[str, Sequence[str]]], missing: Sequence[tuple[str, Sequence[str]]],
               answers: Sequence[ScoredExamples]) -> list[ScoredExamples]:
        """Put ``answers`` (to ``missing``, from :meth:`missing`) in the store and answer ``asks`` from it."""
        if len(answers) != len(missing):
            raise ValueError(f"scorer returned {len(answers)} answers for {len(missing)} tasks asked")
        for (task_name, ids), got in zip(missing, answers):
            self._put(task_name, ids, got)
        return [self._stored([score_key(task_name, e) for e in ids]) for task_name, ids in asks]

    def _put(self, task_name: str, example_ids: Sequence[str], got: ScoredExamples) -> None:
        if got.scores.shape != (len(example_ids),):
            raise ValueError(f"scorer returned {got.scores.shape} scores for {len(example_ids)} examples of "
                             f"{task_name}")
        tokens = got.n_tokens
        self.store.put_many([(score_key(task_name, e), StoredScore(
            task_name=task_name, example_id=e, score=float(got.scores[i]),
            n_tokens=None if tokens is None else int(tokens[i]))) for i, e in enumerate(example_ids)])
        self.n_computed += len(example_ids)

    def _stored(self, keys: Sequence[str]) -> ScoredExamples:
        rows: list[StoredScore] = [self.store.get(key) for key in keys]  # type: ignore[misc]
        scores = np.array([r.score for r in rows], dtype=np.float64)
        has_tokens = bool(rows) and all(r.n_tokens is not None for r in rows)
        tokens_ = np.array([r.n_tokens for r in rows], dtype=np.int64) if has_tokens else None
        return ScoredExamples(scores=scores, n_tokens=tokens_)


def read_legacy_scores(path: Path) -> dict[str, dict[str, StoredScore]]:
    """``{model_id: {key: score}}`` of a ``scores.jsonl`` written before store format 2 (one file, every checkpoint).

    Its lines were ``{"model_id", "task_name", "example_id", "score", "n_tokens"}``. A torn last line
    (a process killed mid-write) is dropped with a warning; a complete line that does not read is
    skipped with a warning naming ``file:line`` (the store's one policy: its example is recomputed
    when asked again). A later line of the same example wins, as the old store read it.
    """
    contents = read_journal(path)
    if contents.torn_tail:
        logger.warning("%s: dropped a torn last line (%d bytes) left by an interrupted write", path,
                       contents.torn_tail)
    out: dict[str, dict[str, StoredScore]] = {}
    for number, line in enumerate(contents.lines, start=1):
        try:
            row = json.loads(line)
            tokens = row.get("n_tokens")
            score = StoredScore(task_name=str(row["task_name"]), example_id=str(row["example_id"]),
                                score=float(row["score"]), n_tokens=None if tokens is None else int(tokens))
            out.setdefault(str(row["model_id"]), {})[score_key(score.task_name, score.example_id)] = score
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, KeyError, TypeError, ValueError):
            logger.warning("%s:%d: corrupt record skipped; other records kept", path, number)
    return out
