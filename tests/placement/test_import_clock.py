"""The import clock: times a thread's first-time imports, once each, and leaves the import machinery as it was.

Modules written here sleep while they are imported, so the seconds are known; each test imports names no
other test uses (a module imported once is never timed again in the process).
"""

from __future__ import annotations

import importlib
import sys
import threading

import pytest

from flasheval.api.progress import load_windows
from flasheval.engine.hf.backend import HFBackend
from flasheval.engine.hf.deferred import DeferredBackend
from flasheval.placement.import_clock import ImportClock, current_clock, timing_imports

BOOTSTRAP = importlib.import_module("importlib._bootstrap")


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """Write ``name -> source`` modules to an importable folder; forget them from ``sys.modules`` afterwards."""
    written = []

    def write(**sources: str) -> None:
        for name, source in sources.items():
            (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
            written.append(name)
        importlib.invalidate_caches()

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    for name in written:
        sys.modules.pop(name, None)


def test_a_first_time_import_is_timed_once_and_an_imported_module_not_at_all(modules):
    modules(clock_outer="import time, clock_inner\ntime.sleep(0.2)\n", clock_inner="import time\ntime.sleep(0.2)\n")
    original = BOOTSTRAP._find_and_load
    with ImportClock() as clock:
        assert BOOTSTRAP._find_and_load is not original  # timed while active
        importlib.import_module("clock_outer")  # nested: clock_inner is timed inside clock_outer, not twice
        import clock_inner  # noqa: F401  # already imported: never reaches the import machinery
    assert BOOTSTRAP._find_and_load is original  # put back when the last clock stops
    assert len(clock.intervals) == 1
    assert 0.4 <= clock.seconds < 0.4 + 2.0  # both sleeps, once
    start, end = clock.intervals[0]
    assert clock.seconds_between(start, end) == pytest.approx(clock.seconds)
    assert clock.seconds_between(end, end + 10) == 0.0


def test_another_threads_imports_are_not_counted(modules):
    modules(clock_threaded="import time\ntime.sleep(0.2)\n")
    with ImportClock() as clock:
        worker = threading.Thread(target=importlib.import_module, args=("clock_threaded",))
        worker.start()
        worker.join()
    assert "clock_threaded" in sys.modules and clock.seconds == 0.0


def test_a_decorated_call_reads_its_own_clock_and_the_weights_load_windows_are_recorded(modules):
    modules(clock_decorated="import time\ntime.sleep(0.2)\n")

    @timing_imports
    def call() -> float:
        importlib.import_module("clock_decorated")
        return current_clock().seconds

    assert call() >= 0.2 and current_clock().seconds == 0.0  # outside any call: a clock reading 0
    reported = []

    backend = DeferredBackend.__new__(DeferredBackend)  # its callbacks, called with the load's seconds as it ends
    backend._on_load = []
    backend.notify_load(reported.append)
    windows = load_windows(backend)
    for callback in backend._on_load:  # what its load does as it ends
        callback(1.5)
    assert reported == [1.5] and len(windows) == 1 and windows[0][1] - windows[0][0] == pytest.approx(1.5)
    in_memory = HFBackend.__new__(HFBackend)
    assert load_windows(in_memory) == []  # a model in memory: nothing loads later


def test_the_module_examples_hold():
    import doctest

    from flasheval.placement import import_clock

    result = doctest.testmod(import_clock)
    assert result.attempted >= 3 and result.failed == 0
