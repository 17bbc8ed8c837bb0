"""Replay scorer: serve a model's recorded per-example scores from a reference leaderboard.

``ReplayScorer(reference, model_id)`` answers :meth:`score` from the reference's score matrix
(and token counts, when the reference has them). Used to place a model that is held out of
the reference (``flasheval place`` by default, and every leave-one-out placement of the
backtest) without running it. It also records every request, so tests can check the
controller never asks twice for an example.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flasheval.errors import InputError, UnknownNameError
from flasheval.reference import ReferenceLeaderboard
from flasheval.scorer import ScoredExamples

__all__ = ["ReplayScorer"]


class ReplayScorer:
    """Per-example scores of ``model_id`` replayed from ``reference``.

    Parameters
    ----------
    reference
        A loaded reference that contains ``model_id`` in its pool.
    model_id
        The model to replay.
    n_parameters
        Parameter count for the FLOPs estimate, if known.
    """

    def __init__(self, reference: ReferenceLeaderboard, model_id: str, *, n_parameters: int | None = None) -> None:
        self.model_id = model_id
        self.n_parameters = n_parameters
        self._rows = dict(zip(reference.dataset_names, reference.model_rows(model_id)))
        self._positions = {d: {e: i for i, e in enumerate(ids)} for d, ids in zip(reference.dataset_names, reference.example_ids)}
        self.requests: list[tuple[str, tuple[str, ...]]] = []
        """Every ``(task_name, example_ids)`` asked for, in order."""

    def score(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        if task_name not in self._rows:
            raise UnknownNameError("task", task_name, self._rows)
        pos = self._positions[task_name]
        try:
            cols = np.fromiter((pos[e] for e in example_ids), dtype=np.int64, count=len(example_ids))
        except KeyError as exc:
            raise InputError(f"example {exc.args[0]!r} is not in task {task_name!r} of the reference") from None
        self.requests.append((task_name, tuple(example_ids)))
        scores, tokens = self._rows[task_name]
        return ScoredExamples(scores=scores[cols].copy(), n_tokens=None if tokens is None else tokens[cols].copy())
