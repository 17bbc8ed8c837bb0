"""The batch-first backend contract every model backend implements.

A backend answers a whole list of requests at once and returns results in request order,
each carrying its ``task_name`` / ``example_id`` / ``choice_index``, so results can be
matched by id after a distributed gather. Backends may call ``on_results`` with
``(request index, result)`` pairs as each internal batch finishes, so a caching wrapper can
store finished work durably before the whole call returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from flasheval.types import (
    GenerationRequest,
    GenerationResult,
    LoglikelihoodRequest,
    LoglikelihoodResult,
    Result,
    RollingLoglikelihoodRequest,
    RollingLoglikelihoodResult,
)

__all__ = ["Backend", "OnResults", "SCORING_VERSION"]

SCORING_VERSION = "3"
"""Version of the scoring conventions (tokenization, truncation, windows). Part of every model
fingerprint: bump it when a change alters any log-likelihood, so stored results are not reused.
2: left-padded shared contexts (sliding-window models were inexact under version 1).
3: padded widths rounded up to a multiple of 16 tokens (a request's sums no longer depend on its batch)."""

OnResults = Callable[[Sequence[tuple[int, Result]]], None]
"""Callback receiving ``(index into the request list, result)`` pairs as a batch finishes."""


@runtime_checkable
class Backend(Protocol):
    """A model that scores requests batch-first.

    Implementations return one result per request, in request order.
    """

    @property
    def fingerprint(self) -> str:
        """Stable digest of everything that determines the results (weights, config, tokenizer,
        revision, dtype, scoring version). Results of different fingerprints never mix."""
        ...

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[LoglikelihoodResult]:
        """Log-likelihood (sum, token count, greedy match) of each continuation given its context."""
        ...

    def generate(
        self, requests: Sequence[GenerationRequest], *, on_results: OnResults | None = None
    ) -> list[GenerationResult]:
        """Greedy generation until a stop sequence or ``max_new_tokens``."""
        ...

    def loglikelihood_rolling(
        self, requests: Sequence[RollingLoglikelihoodRequest], *, on_results: OnResults | None = None
    ) -> list[RollingLoglikelihoodResult]:
        """Log-likelihood of whole texts, scored in windows of the model's context length."""
        ...
