"""The contract between the placement controller and whatever produces per-example scores.

The controller asks for the scores of a look: a batch of example ids of each task, only ever ids it
has not asked for before, in the nested order of :func:`flasheval.stats.sampling.example_order`, all in
ONE :meth:`ExampleScorer.score_many` call (the one required method: a model runs a look's requests
batch-first, as a full run does). A replay scorer (:class:`flasheval.reference.scoring.replay.ReplayScorer`)
serves recorded scores; a live scorer (:class:`LiveScorer`, here) runs a model now. Both implement
:class:`ExampleScorer`; a :class:`~flasheval.sweeps.store.StoredScorer` puts a sweep checkpoint's results
store in front of either. :class:`OneTask` gives a scorer the one-task convenience ``score``, defined once
over ``score_many``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from flasheval.engine.base import Backend
from flasheval.evaluation.evaluate import (ExampleOutcome, build_example_requests, score_outcomes, score_requests,
                                           shared_context_tokens)
from flasheval.errors import InputError
from flasheval.tasks import LiveTask

__all__ = ["ScoredExamples", "ExampleScorer", "OneTask", "LiveScorer"]

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
    """Anything that scores examples of several tasks for one model: ``score_many`` is its one required method."""

    n_parameters: int | None
    """Model parameters, for the FLOPs estimate (``None`` when unknown)."""

    def score_many(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        """Scores of each ``(task_name, example_ids)`` of ``asks`` (one per ask, same order; ids in their order).

        One call is one look of one model: a scorer that runs a model sends every ask to it together.
        """
        ...


class OneTask:
    """Mixin: the one-task convenience ``score``, defined once in terms of ``score_many``."""

    __slots__ = ()

    def score(self, task_name: str, example_ids: Sequence[str]) -> ScoredExamples:
        """Scores of ``example_ids`` of ``task_name`` (same order): ``score_many`` with one ask."""
        return self.score_many([(task_name, example_ids)])[0]  # type: ignore[attr-defined,no-any-return]


class LiveScorer(OneTask):
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

    def score_many(self, asks: Sequence[tuple[str, Sequence[str]]]) -> list[ScoredExamples]:
        """Scores of several tasks' examples (``(task_name, example_ids)`` each), in the order asked.

        Every request of every task goes to the backend in ONE call, as a full run (``evaluate``) sends all of
        its own: a stage's few new examples per task fill the batches together (sorted by length across
        tasks) instead of one small call per task. The scores are the same (the engine's results do not depend
        on the batch a request is in).
        """
        for task_name, _ in asks:
            if task_name not in self._tasks:
                raise InputError(f"task {task_name!r} is not loaded", field="task_name", allowed=sorted(self._tasks))
        built = [(name, tuple(ids), build_example_requests(self._tasks[name], ids, seed=self.seed,
                                                           prefix_space=self.prefix_space)) for name, ids in asks]
        flat = [r for _, _, by_id in built for requests in by_id.values() for r in requests]
        results = score_requests(self._backend, flat)
        out, start = [], 0
        for name, ids, by_id in built:
            n = sum(len(requests) for requests in by_id.values())
            outcomes = score_outcomes(self._tasks[name], by_id, results[start:start + n])
            start += n
            self.requests.append((name, ids))
            self.outcomes.extend(outcomes)
            logger.info("scored %d examples of %s", len(outcomes), name)
            out.append(ScoredExamples(scores=np.array([o.score for o in outcomes], dtype=np.float64),
                                      n_tokens=np.array([o.n_tokens for o in outcomes], dtype=np.int64)))
        return out

    def shared_context_tokens(self, examples: Mapping[str, Sequence[str]], tokenizer: Any) -> int:
        """Tokens that a full run of ``examples`` (example ids per task) counts per example but does not run: the
        contexts its examples share (:func:`~flasheval.evaluation.evaluate.shared_context_tokens`)."""
        return shared_context_tokens(self._tasks, examples, tokenizer, seed=self.seed, prefix_space=self.prefix_space)

    def examples_json(self) -> list[dict[str, Any]]:
        """:attr:`outcomes` as run records store them (``examples``)."""
        return [o.to_json() for o in self.outcomes]

    def asked_json(self) -> list[dict[str, Any]]:
        """:attr:`requests` as run records store them (``asked``)."""
        return [{"task_name": t, "example_ids": list(ids)} for t, ids in self.requests]
