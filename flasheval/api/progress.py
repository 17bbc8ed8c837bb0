"""Progress of a long call: the events a ``progress`` callback receives.

Every long API call (:func:`flasheval.place`, :func:`flasheval.sweep`, :func:`flasheval.evaluate`,
:func:`flasheval.backtest`, :func:`flasheval.build_reference`) takes ``progress=``, a callable
that receives one :class:`Progress` per step as the step finishes, on the main process only. The
command line prints their messages (one line per step, flushed); a notebook or a training loop can
log them, draw a bar, or stop.

Steps are the events; the per-batch bar inside one scoring call is the engine's
(:func:`flasheval.engine.progress_bar.progress_bar`). A call that has one takes the same one ``progress=``
(:func:`split_progress`): ``None`` shows it when stderr is a terminal or in a notebook, ``True`` always,
``False`` never (and no events), a callable gets the events and the bar shows as for ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flasheval.errors import InputError

__all__ = ["Progress", "ProgressCallback", "check_progress", "split_progress", "Reporter", "watch_load", "load_windows"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """One step of a long call."""

    step: str
    """What happened: ``start`` (set up, about to score), ``load`` (a model's weights loaded: only when a
    request is not in the results store), ``stage`` (a placement look), ``round`` (a sweep round), ``model``
    (a model scored by a build; a model held out by a backtest), ``seed`` (a backtest seed), ``checkpoint`` (a
    watched checkpoint found waiting, starting or placed), ``done``."""
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
    :class:`~flasheval.analysis.backtest.BacktestResult`, a held-out model's
    :class:`~flasheval.analysis.backtest.BacktestRow`."""
    elapsed: float | None = None
    """Wall seconds since the call started (every event of a :class:`Reporter` carries it)."""


ProgressCallback = Callable[[Progress], None]


def check_progress(progress: object) -> ProgressCallback | None:
    """``progress`` if it is ``None`` or callable; anything else is refused in one line."""
    if progress is not None and not callable(progress):
        raise InputError(f"must be a callable taking a Progress, got {type(progress).__name__}", field="progress")
    return progress  # type: ignore[return-value]


def split_progress(progress: object) -> tuple[ProgressCallback | None, bool | None]:
    """The one ``progress=`` of a call that has both events and a per-batch bar: ``(callback, bar)``.

    ``None``: no events, the bar when stderr is a terminal (``bar=None``); ``True`` / ``False``: the bar always /
    never, no events; a callable: the events, the bar as for ``None``. Anything else is refused in one line.
    """
    if progress is None or isinstance(progress, bool):
        return None, progress
    return check_progress(progress), None


class Reporter:
    """Hands :class:`Progress` events to a callback, on the main process only (nothing when there is none).

    Made when the call starts: every event's ``elapsed`` counts from then.
    """

    __slots__ = ("_callback", "is_main", "_start")

    def __init__(self, callback: ProgressCallback | None, *, is_main: bool = True) -> None:
        self._callback = check_progress(callback)
        self.is_main = is_main
        self._start = time.perf_counter()

    def __call__(self, step: str, message: str, *, done: int | None = None, total: int | None = None,
                 seconds: float | None = None, detail: Any = None) -> None:
        if self._callback is not None and self.is_main:
            self._callback(Progress(step=step, message=message, done=done, total=total, seconds=seconds,
                                    detail=detail, elapsed=time.perf_counter() - self._start))


def watch_load(report: Reporter, backend: Any, model_id: str) -> None:
    """Report a ``load`` step when ``backend``'s weights load (:meth:`~flasheval.engine.base.Backend.notify_load`:
    a spec's model opened without them loads on the first request not stored); a model already in memory loads
    nothing later and reports nothing."""
    backend.notify_load(lambda seconds: report("load", f"loaded the weights of {model_id} in {seconds:.1f} s",
                                               seconds=seconds))


def load_windows(backend: Any) -> list[tuple[float, float]]:
    """The ``(start, end)`` (``time.perf_counter``) of each weights load of ``backend``, filled in as they happen
    (:meth:`~flasheval.engine.base.Backend.notify_load`); a model already in memory loads nothing later: the list
    stays empty."""
    windows: list[tuple[float, float]] = []

    def on_load(seconds: float) -> None:
        end = time.perf_counter()
        windows.append((end - seconds, end))

    backend.notify_load(on_load)
    return windows
