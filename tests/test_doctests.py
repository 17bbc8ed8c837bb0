"""Run every doctested example in the package (pytest does not collect doctests by default).

Walks all modules of ``flasheval`` so a new module's examples are checked without editing a list.
"""

import doctest
import importlib
import pkgutil

import pytest

import flasheval

MODULES = sorted(m.name for m in pkgutil.walk_packages(flasheval.__path__, prefix="flasheval.") if m.name != "flasheval.__main__")


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def n_examples(name: str) -> int:
    """How many doctest examples module ``name`` holds (found, not run: ``test_doctests`` runs them)."""
    module = importlib.import_module(name)
    return sum(len(test.examples) for test in doctest.DocTestFinder().find(module))


def test_the_statistics_modules_have_examples():
    # STYLE.md: every public statistics function carries a short doctested example.
    for name in ("flasheval.stats.ranking", "flasheval.stats.bootstrap", "flasheval.stats.resampling", "flasheval.stats.control_variate", "flasheval.stats.dior", "flasheval.stats.dior_pool", "flasheval.stats.sampling",
                 "flasheval.stats.irt", "flasheval.stats.sequential", "flasheval.stats.scaling",
                 "flasheval.stats.scaling_bootstrap"):
        assert n_examples(name) > 0, name
    assert n_examples("flasheval.stats.scaling") >= 8
