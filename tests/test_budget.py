"""The suite's own time budget (tests/conftest.py): every test over the budget is named, and a strict
run fails on one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.conftest import over_budget

pytest_plugins = ["pytester"]


def _report(nodeid: str, when: str, duration: float) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, when=when, duration=duration)


def test_setup_call_and_teardown_add_up_and_the_slowest_comes_first():
    reports = [_report("a", "setup", 40.0), _report("a", "call", 25.0), _report("a", "teardown", 0.5),
               _report("b", "call", 59.9), _report("c", "setup", 0.1), _report("c", "call", 90.0)]
    assert over_budget(reports, 60.0) == [("c", 90.1), ("a", 65.5)]
    assert over_budget(reports, 100.0) == []


def test_a_strict_run_fails_on_a_test_over_the_budget(pytester):
    pytester.makeconftest(Path(__file__).with_name("conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_slow=(
        "import time\nimport pytest\n\n"
        "@pytest.fixture\ndef slow_setup():\n    time.sleep(0.15)\n\n"
        "def test_slow(slow_setup):\n    time.sleep(0.15)\n\n"  # neither phase alone is over the budget
        "def test_fast():\n    pass\n"))
    named = pytester.runpytest("--test-budget", "0.2")
    named.stdout.fnmatch_lines(["over the 0 s budget: 0.* s test_slow.py::test_slow"])
    assert named.ret == 0 and "test_fast" not in named.stdout.str().split("test budget")[-1]
    strict = pytester.runpytest("--test-budget", "0.2", "--test-budget-strict")
    assert strict.ret == 1
    assert pytester.runpytest("--test-budget-strict").ret == 0
