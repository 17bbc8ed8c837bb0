"""Run the doctested examples of the placement modules (pytest does not collect doctests by default)."""

import doctest
import importlib

import pytest

MODULES = ["flasheval.stats.ranking", "flasheval.stats.bootstrap", "flasheval.tiers", "flasheval.controller",
           "flasheval.backtest", "flasheval.simulation"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
