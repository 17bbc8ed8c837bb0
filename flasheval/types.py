"""Value types that cross module boundaries: backend requests and results.

All are frozen, slotted, keyword-only dataclasses validated in ``__post_init__``.
The tasks layer builds requests (it owns every prompt and whitespace convention: the
strings here are exactly what the backend tokenizes), a backend answers them batch-first,
and the scoring layer turns results into per-example scores. Every request carries its
``task_name`` and ``example_id`` so results can be gathered across processes by id, and a
``key`` (a stable hash of its content) under which the results store keeps its answer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from flasheval.hashing import stable_hash

__all__ = [
    "LoglikelihoodRequest",
    "LoglikelihoodResult",
    "GenerationRequest",
    "GenerationResult",
    "RollingLoglikelihoodRequest",
    "RollingLoglikelihoodResult",
    "Request",
    "Result",
]


@functools.lru_cache(maxsize=8192)
def _content_key(*parts: object) -> str:
    """``stable_hash(parts)``, remembered for the last requests: one call asks a request's key several times
    (the store's lookup, its writes, the prompt digest), and a 10-shot context is kilobytes of JSON to hash."""
    return stable_hash(parts)


def _check_ids(task_name: str, example_id: str) -> None:
    if not isinstance(task_name, str) or not task_name:
        raise ValueError(f"task_name must be a non-empty string, got {task_name!r}")
    if not isinstance(example_id, str) or not example_id:
        raise ValueError(f"example_id must be a non-empty string, got {example_id!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoglikelihoodRequest:
    """Log-likelihood of ``continuation`` given ``context``.

    The backend tokenizes ``context`` and ``continuation`` separately (llm-foundry's
    convention; no special tokens on the continuation) and scores only continuation tokens.
    """

    task_name: str
    """Task (dataset) the example belongs to."""
    example_id: str
    """Id of the example within its task."""
    choice_index: int
    """Which choice (multiple choice / schema) this is; 0 for single-continuation tasks."""
    context: str
    """Text the model conditions on (few-shot prefix included)."""
    continuation: str
    """Text whose log-likelihood is measured."""
    fewshot_ids: tuple[str, ...] = ()
    """Example ids of the few-shot examples in ``context`` (provenance only; not part of ``key``)."""

    def __post_init__(self) -> None:
        _check_ids(self.task_name, self.example_id)
        if self.choice_index < 0:
            raise ValueError(f"choice_index must be >= 0, got {self.choice_index}")
        if not isinstance(self.fewshot_ids, tuple):
            raise TypeError("fewshot_ids must be a tuple")
        if not self.continuation:
            raise ValueError(f"empty continuation for {self.task_name}/{self.example_id}")

    @property
    def key(self) -> str:
        """Stable content hash; the results-store key together with the model fingerprint."""
        return _content_key("ll", self.context, self.continuation)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoglikelihoodResult:
    """Answer to a :class:`LoglikelihoodRequest`."""

    task_name: str
    example_id: str
    choice_index: int
    logprob_sum: float
    """Sum of natural-log probabilities of the continuation tokens."""
    n_tokens: int
    """Number of continuation tokens."""
    is_greedy: bool
    """Whether the greedy (argmax) token equals the continuation token at every position."""
    n_context_tokens: int = 0
    """Number of context tokens (for compute accounting)."""

    def __post_init__(self) -> None:
        _check_ids(self.task_name, self.example_id)
        if self.n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {self.n_tokens}")

    @property
    def mean_nll(self) -> float:
        """Mean per-token cross-entropy (nats) of the continuation; llm-foundry's MC criterion."""
        return -self.logprob_sum / self.n_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationRequest:
    """Greedy generation from ``context`` until a stop sequence or ``max_new_tokens``."""

    task_name: str
    example_id: str
    context: str
    stop_sequences: tuple[str, ...] = ()
    """Generation is cut at the first occurrence of any of these (the stop text excluded)."""
    max_new_tokens: int = 256
    fewshot_ids: tuple[str, ...] = ()
    """Example ids of the few-shot examples in ``context`` (provenance only; not part of ``key``)."""

    def __post_init__(self) -> None:
        _check_ids(self.task_name, self.example_id)
        if not isinstance(self.stop_sequences, tuple):
            raise TypeError("stop_sequences must be a tuple")
        if not isinstance(self.fewshot_ids, tuple):
            raise TypeError("fewshot_ids must be a tuple")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def key(self) -> str:
        """Stable content hash of the request."""
        return _content_key("gen", self.context, self.stop_sequences, self.max_new_tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationResult:
    """Answer to a :class:`GenerationRequest`."""

    task_name: str
    example_id: str
    text: str
    """Generated text, already cut at the first stop sequence."""
    n_context_tokens: int = 0
    n_generated_tokens: int = 0

    def __post_init__(self) -> None:
        _check_ids(self.task_name, self.example_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class RollingLoglikelihoodRequest:
    """Log-likelihood of a whole (possibly long) text, in windows; for validation loss."""

    task_name: str
    example_id: str
    text: str

    def __post_init__(self) -> None:
        _check_ids(self.task_name, self.example_id)
        if not self.text:
            raise ValueError(f"empty text for {self.task_name}/{self.example_id}")

    @property
    def key(self) -> str:
        """Stable content hash of the request."""
        return _content_key("roll", self.text)


@dataclass(frozen=True, slots=True, kw_only=True)
class RollingLoglikelihoodResult:
    """Answer to a :class:`RollingLoglikelihoodRequest`."""

    task_name: str
    example_id: str
    logprob_sum: float
    n_tokens: int
    n_bytes: int
    """UTF-8 bytes of the text, for bits per byte."""

    def __post_init__(self) -> None:
        _check_ids(self.task_name, self.example_id)


Request = LoglikelihoodRequest | GenerationRequest | RollingLoglikelihoodRequest
Result = LoglikelihoodResult | GenerationResult | RollingLoglikelihoodResult
