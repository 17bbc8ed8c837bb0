"""The contract between the placement controller and whatever produces per-example scores.

The controller asks for the scores of a batch of example ids of one task, only ever ids it has
not asked for before, in the nested order of :func:`flasheval.stats.sampling.example_order`. A replay
scorer (:class:`flasheval.placement.replay.ReplayScorer`) serves recorded scores; a live scorer
(:class:`LiveScorer`, here) runs a model now. Both implement :class:`ExampleScorer`; a
:class:`~flasheval.placement.sweep_store.StoredScorer` puts a sweep checkpoint's results store in front of either.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from flasheval.engine.base import Backend
from flasheval.evaluation.evaluate import ExampleOutcome, score_examples
from flasheval.errors import InputError
from flasheval.tasks import LiveTask

__all__ = ["ScoredExamples", "ExampleScorer", "LiveScorer"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ScoredExamples:
    """Scores of a batch of examples, in the order they were asked for."""

    scores: np.ndarray
    """Float ``(n_examples,)`` per-example scores."""
    n_tokens: np.ndarray | None = None
    """Int ``(n_examples,)`` tokens the model processed per example, when known."""

    def __post_init__(self) -> None:
        if self.scores.ndim != 1:
            raise ValueError(f"scores must be 1-d, got shape {self.scores.shape}")
        if not np.all(np.isfinite(self.scores)):
            raise ValueError("scores must be finite")
        if self.n_tokens is not None and self.n_tokens.shape != self.scores.shape:
            raise ValueError("n_tokens must have the shape of scores")


@runtime_checkable
class ExampleScorer(Protocol):
    """Anything that scores examples of a task for one model."""

    n_parameters: int | None
    """Model parameters, for the FLOPs estimate (``None`` when unknown)."""

    def score(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        """Scores of ``example_ids`` of ``task_name`` (same order)."""
        ...


class LiveScorer:
    """The placement controller's scorer for a model that runs now.

    Parameters
    ----------
    backend
        The model (normally a :class:`~flasheval.engine.CachedBackend` over a results store).
    tasks
        The reference's tasks, loaded from the task directory.
    seed, prefix_space
        The reference's build settings: they fix the few-shot sets and the continuation spacing.
    n_parameters
        Parameter count, for the FLOPs estimate.

    Attributes
    ----------
    requests
        Every ``(task_name, example_ids)`` the controller asked for, in order.
    outcomes
        Every scored example, in the order scored.
    """

    __slots__ = ("_backend", "_tasks", "seed", "prefix_space", "n_parameters", "requests", "outcomes")

    def __init__(self, backend: Backend, tasks: Sequence[LiveTask], *, seed: int, prefix_space: bool,
                 n_parameters: int | None = None) -> None:
        self._backend = backend
        self._tasks = {t.name: t for t in tasks}
        self.seed = seed
        self.prefix_space = prefix_space
        self.n_parameters = n_parameters
        self.requests: list[tuple[str, tuple[str, ...]]] = []
        self.outcomes: list[ExampleOutcome] = []

    def score(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        """Scores and token counts of ``example_ids`` of ``task_name`` (same order)."""
        if task_name not in self._tasks:
            raise InputError(f"task {task_name!r} is not loaded", field="task_name", allowed=sorted(self._tasks))
        self.requests.append((task_name, tuple(example_ids)))
        outcomes = score_examples(self._backend, self._tasks[task_name], example_ids, seed=self.seed,
                                  prefix_space=self.prefix_space)
        self.outcomes.extend(outcomes)
        logger.info("scored %d examples of %s", len(outcomes), task_name)
        return ScoredExamples(scores=np.array([o.score for o in outcomes], dtype=np.float64),
                              n_tokens=np.array([o.n_tokens for o in outcomes], dtype=np.int64))

    def examples_json(self) -> list[dict[str, Any]]:
        """:attr:`outcomes` as run records store them (``examples``)."""
        return [o.to_json() for o in self.outcomes]

    def asked_json(self) -> list[dict[str, Any]]:
        """:attr:`requests` as run records store them (``asked``)."""
        return [{"task_name": t, "example_ids": list(ids)} for t, ids in self.requests]
