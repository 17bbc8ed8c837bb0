"""Progress of a long call: the events a ``progress`` callback receives.

Every long API call (:func:`flasheval.place`, :func:`flasheval.sweep`, :func:`flasheval.evaluate`,
:func:`flasheval.backtest`, :func:`flasheval.build_reference`) takes ``progress=``, a callable
that receives one :class:`Progress` per step, on the main process only. The command line prints
their messages; a notebook or a training loop can log them, draw a bar, or stop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flasheval.errors import InputError

__all__ = ["Progress", "ProgressCallback", "check_progress", "Reporter"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """One step of a long call."""

    step: str
    """What happened: ``start`` (set up, about to score), ``stage`` (a placement look), ``round`` (a sweep
    round), ``model`` (a model scored by a build), ``seed`` (a backtest seed), ``done``."""
    message: str
    """One readable line (what the command line prints)."""
    done: int | None = None
    """Steps of this kind finished so far, when counted."""
    total: int | None = None
    """Steps of this kind in all, when known in advance."""
    seconds: float | None = None
    """Wall seconds the step took, when timed."""
    detail: Any = None
    """What the step produced, when there is one: a stage's
    :class:`~flasheval.placement.results.StageRecord`, a seed's
    :class:`~flasheval.placement.backtest.BacktestResult`."""


ProgressCallback = Callable[[Progress], None]


def check_progress(progress: object) -> ProgressCallback | None:
    """``progress`` if it is ``None`` or callable; anything else is refused in one line."""
    if progress is not None and not callable(progress):
        raise InputError(f"must be a callable taking a Progress, got {type(progress).__name__}", field="progress")
    return progress  # type: ignore[return-value]


class Reporter:
    """Hands :class:`Progress` events to a callback, on the main process only (nothing when there is none)."""

    __slots__ = ("_callback", "is_main")

    def __init__(self, callback: ProgressCallback | None, *, is_main: bool = True) -> None:
        self._callback = check_progress(callback)
        self.is_main = is_main

    def __call__(self, step: str, message: str, *, done: int | None = None, total: int | None = None,
                 seconds: float | None = None, detail: Any = None) -> None:
        if self._callback is not None and self.is_main:
            self._callback(Progress(step=step, message=message, done=done, total=total, seconds=seconds,
                                    detail=detail))
