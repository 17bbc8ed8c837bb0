"""The out-of-memory back-off that scoring and generation share: halve the batch, keep the smaller limits.

A forward pass (or a ``generate`` call) over a list of units runs under :class:`Limits`, the
most rows and padded tokens per pass. A list over the limits, or one that runs out of memory, is
cut in halves and each half retried; after an out-of-memory error the limits are halved for the
rest of the run. A single unit of several rows (a context group of many choices) is cut into
halves of its rows; a single sequence that does not fit is an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from flasheval.errors import BackendError

__all__ = ["is_oom", "Limits", "run_with_backoff"]

logger = logging.getLogger(__name__)

U = TypeVar("U")
R = TypeVar("R")


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an out-of-memory error (``torch.cuda.OutOfMemoryError``, a RuntimeError saying so, MemoryError).

    Examples
    --------
    >>> is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")), is_oom(RuntimeError("shape mismatch"))
    (True, False)
    """
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError)
    )


@dataclass(slots=True, kw_only=True)
class Limits:
    """The current most rows and padded tokens (rows x longest length) per forward pass; mutable, one per backend."""

    max_rows: int
    """Most sequences per pass."""
    max_tokens: int
    """Most rows x padded length per pass."""
    on_cuda: bool = False
    """Whether the model runs on a CUDA device (its cache is emptied after an out-of-memory error)."""

    def fits(self, rows: int, tokens: int) -> bool:
        """Whether a pass of ``rows`` sequences and ``tokens`` padded tokens is within both limits."""
        return rows <= self.max_rows and tokens <= self.max_tokens

    def back_off(self, rows: int, tokens: int, length: int) -> None:
        """After an out-of-memory error on ``rows`` sequences (``tokens`` padded): halve the limits, or give up.

        Raises
        ------
        BackendError
            ``rows`` is 1: a single sequence of ``length`` tokens does not fit.
        """
        if self.on_cuda:
            import torch

            torch.cuda.empty_cache()
        if rows == 1:
            raise BackendError(
                f"out of memory on a single sequence of {length} tokens; "
                "use a smaller --max-length or a device with more memory"
            )
        self.max_rows = min(self.max_rows, max(1, rows // 2))
        self.max_tokens = min(self.max_tokens, max(1, tokens // 2))
        logger.warning("out of memory with %d sequences (%d padded tokens) per batch; retrying with at most %d "
                       "sequences and %d tokens", rows, tokens, self.max_rows, self.max_tokens)


def run_with_backoff(
    units: Sequence[U],
    run: Callable[[Sequence[U]], list[R]],
    limits: Limits,
    *,
    shape: Callable[[Sequence[U]], tuple[int, int]],
    split: Callable[[U], tuple[U, U]] | None = None,
) -> list[R]:
    """``run(units)``, cut into halves while over ``limits`` and on out-of-memory errors.

    Parameters
    ----------
    units
        What one pass runs, longest first (context groups, or generation requests).
    run
        One pass over a list of units; returns their results in order.
    limits
        The backend's limits, halved here after an out-of-memory error.
    shape
        ``(rows, padded length)`` of a pass over some units; it costs rows x that length.
    split
        Cuts one unit of several rows in two (a context group into halves of its choices);
        needed only when units hold more than one row.

    Returns
    -------
    list
        The results of every unit, in order.

    Raises
    ------
    BackendError
        A single sequence runs out of memory.
    """

    def attempt(part: Sequence[U]) -> list[R]:
        rows, length = shape(part)
        tokens = rows * length
        if len(part) > 1 and not limits.fits(rows, tokens):
            return halves(part)
        try:
            return run(part)
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
        limits.back_off(rows, tokens, length)
        return halves(part)

    def halves(part: Sequence[U]) -> list[R]:
        if len(part) > 1:
            half = len(part) // 2
            return attempt(part[:half]) + attempt(part[half:])
        if split is None:
            raise ValueError("a unit of several rows needs split to be cut in halves")
        first, second = split(part[0])
        return attempt([first]) + attempt([second])

    return attempt(units)
