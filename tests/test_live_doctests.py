"""Run the doctested examples of the live modules (pytest does not collect doctests by default)."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["flasheval.live", "flasheval.reference_build"])
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
