"""Seconds a call spends importing modules for the first time in its process: a one-time cost, timed apart.

The first live placement of a fresh process imports torch, transformers, the model's architecture (and
lm-eval): seconds no later placement of that process pays again. Measured on a tiny model placed from
``hf:`` folders three times in one process: 4.5 s of wall time the first time (4.4 s of it importing),
0.1 s the next two. Counted in a placement's wall seconds, that start-up made the first checkpoint of a
run look 50 times as costly as the others; :class:`ImportClock` times it so a placement records its own
work (:attr:`~flasheval.placement.results.Timing.wall_seconds`) and the imports on their own
(:attr:`~flasheval.placement.results.Timing.import_seconds`).

How: while a clock is active, CPython's ``importlib._bootstrap._find_and_load`` is wrapped. Every ``import``
statement and ``importlib.import_module`` call for a module not yet in ``sys.modules`` goes through it (the
step ``python -X importtime`` times); a module already imported never does. Only the outermost such call on
the clock's own thread is timed, so nested imports count once and other threads' imports not at all. The
wrapper is put back when the last clock stops. On a Python without that function the clock reads 0.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ImportClock", "timing_imports", "current_clock"]

_BOOTSTRAP = importlib.import_module("importlib._bootstrap")
_ORIGINAL: Callable[..., Any] | None = getattr(_BOOTSTRAP, "_find_and_load", None)
_LOCK = threading.Lock()
_LOCAL = threading.local()
_N_ACTIVE = 0
F = TypeVar("F", bound=Callable[..., Any])


def _clocks() -> list[ImportClock]:
    if not hasattr(_LOCAL, "clocks"):
        _LOCAL.clocks, _LOCAL.depth = [], 0
    return _LOCAL.clocks


def _timed_find_and_load(name: str, import_: Any) -> Any:
    """``_find_and_load`` timed for the clocks of this thread (a plain call on every other thread)."""
    original: Callable[..., Any] = _ORIGINAL  # type: ignore[assignment]  # installed only when it exists
    clocks = getattr(_LOCAL, "clocks", None)
    if not clocks:
        return original(name, import_)
    outermost = _LOCAL.depth == 0
    _LOCAL.depth += 1
    start = time.perf_counter()
    try:
        return original(name, import_)
    finally:
        _LOCAL.depth -= 1
        if outermost:
            end = time.perf_counter()
            for clock in clocks:
                clock.intervals.append((start, end))


class ImportClock:
    """A context manager timing this thread's first-time imports while it is active.

    Examples
    --------
    >>> import json
    >>> with ImportClock() as clock:
    ...     import json  # imported already: never timed again
    >>> clock.intervals, clock.seconds
    ([], 0.0)
    """

    def __init__(self) -> None:
        self.intervals: list[tuple[float, float]] = []
        """``(start, end)`` (``time.perf_counter``) of each outermost first-time import."""

    @property
    def seconds(self) -> float:
        """Every timed import's seconds."""
        return sum((end - start for start, end in self.intervals), 0.0)

    def seconds_between(self, start: float, end: float) -> float:
        """Seconds of the timed imports that fell between ``start`` and ``end`` (``time.perf_counter``)."""
        return sum((max(0.0, min(end, b) - max(start, a)) for a, b in self.intervals), 0.0)

    def __enter__(self) -> ImportClock:
        global _N_ACTIVE
        with _LOCK:
            if _ORIGINAL is not None and _N_ACTIVE == 0 and getattr(_BOOTSTRAP, "_find_and_load", None) is _ORIGINAL:
                _BOOTSTRAP._find_and_load = _timed_find_and_load
            _N_ACTIVE += 1
        _clocks().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        global _N_ACTIVE
        _clocks().remove(self)
        with _LOCK:
            _N_ACTIVE -= 1
            if _N_ACTIVE == 0 and getattr(_BOOTSTRAP, "_find_and_load", None) is _timed_find_and_load:
                _BOOTSTRAP._find_and_load = _ORIGINAL


def current_clock() -> ImportClock:
    """The innermost clock active on this thread (a fresh one reading 0 when none is)."""
    clocks = _clocks()
    return clocks[-1] if clocks else ImportClock()


def timing_imports(func: F) -> F:
    """Run every call of ``func`` under its own :class:`ImportClock` (read inside with :func:`current_clock`)."""

    @functools.wraps(func)
    def timed(*args: Any, **kwargs: Any) -> Any:
        with ImportClock():
            return func(*args, **kwargs)

    return timed  # type: ignore[return-value]
