"""The contract between the placement controller and whatever produces per-example scores.

The controller asks for the scores of a batch of example ids of one task, only ever ids it has
not asked for before, in the nested order of :func:`flasheval.sampling.example_order`. A replay
scorer (:class:`flasheval.backends.replay.ReplayScorer`) serves recorded scores; a live scorer
runs a model. Both implement :class:`ExampleScorer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["ScoredExamples", "ExampleScorer"]


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
