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


def test_the_statistics_modules_have_examples():
    # STYLE.md: every public statistics function carries a short doctested example.
    for name in ("flasheval.stats.ranking", "flasheval.stats.bootstrap", "flasheval.stats.dior", "flasheval.stats.sampling",
                 "flasheval.stats.irt", "flasheval.stats.sequential"):
        assert doctest.testmod(importlib.import_module(name)).attempted > 0, name
