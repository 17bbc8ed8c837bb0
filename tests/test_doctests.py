"""Run every doctested example in the package (pytest does not collect doctests by default).

Only modules that hold examples are run: :data:`EXAMPLES` lists them with the number of examples each
had when it was listed. The list is checked both ways, so an example can neither vanish nor go unrun:

* a listed module must still hold at least its count (an example deleted or moved elsewhere fails);
* a module with examples that is not listed fails, telling the developer to add it with its count.

A module renamed or split: move its entry to where its examples went.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import flasheval

EXAMPLES: dict[str, int] = {
    "flasheval.api.options": 2,
    "flasheval.atomic": 4,
    "flasheval.cli._options": 1,
    "flasheval.cluster.executor": 2,
    "flasheval.api.rank_intervals": 3,
    "flasheval.checks": 15,
    "flasheval.data_paths": 1,
    "flasheval.engine.hf.backoff": 1,
    "flasheval.engine.base": 5,
    "flasheval.engine.batching": 17,
    "flasheval.engine.hf.device_map": 9,
    "flasheval.engine.hf.fingerprint": 7,
    "flasheval.engine.hf.forward": 3,
    "flasheval.engine.hf.generation": 2,
    "flasheval.engine.hf.loading": 1,
    "flasheval.engine.hf.in_memory": 10,
    "flasheval.engine.store.journal": 5,
    "flasheval.engine.hf.mixed_precision": 5,
    "flasheval.engine.planning": 6,
    "flasheval.engine.rows": 11,
    "flasheval.engine.specs": 3,
    "flasheval.engine.store.adoption": 7,
    "flasheval.engine.store.shards": 11,
    "flasheval.engine.store.stored_score": 1,
    "flasheval.engine.throughput": 2,
    "flasheval.engine.hf.weights_digest": 9,
    "flasheval.errors": 1,
    "flasheval.evaluation.dtype_comparison": 5,
    "flasheval.evaluation.evaluate": 7,
    "flasheval.hashing": 4,
    "flasheval.integrations.placing": 3,
    "flasheval.lmeval.conventions": 2,
    "flasheval.lmeval.settings": 3,
    "flasheval.placement.allocation": 5,
    "flasheval.analysis.backtest": 6,
    "flasheval.runs.checkpoint_scan": 1,
    "flasheval.placement.calibration": 10,
    "flasheval.placement.calibration_cache": 2,
    "flasheval.analysis.dior": 2,
    "flasheval.analysis.fluid": 2,
    "flasheval.placement.import_clock": 3,
    "flasheval.analysis.interval_simulation": 4,
    "flasheval.placement.miss_simulation": 4,
    "flasheval.placement.results": 2,
    "flasheval.analysis.simulation": 5,
    "flasheval.placement.stop_rule": 14,
    "flasheval.sweeps.pool": 2,
    "flasheval.sweeps.store": 1,
    "flasheval.placement.tiers": 8,
    "flasheval.runs.coverage": 7,
    "flasheval.records.run_record": 6,
    "flasheval.records.schemas": 2,
    "flasheval.reference.intervals": 8,
    "flasheval.report.figures": 1,
    "flasheval.report.html": 2,
    "flasheval.report.markdown": 2,
    "flasheval.report.rank_figure": 1,
    "flasheval.report.run_section": 12,
    "flasheval.stats.bootstrap": 12,
    "flasheval.stats.control_variate": 3,
    "flasheval.stats.dior": 16,
    "flasheval.stats.dior_pool": 9,
    "flasheval.stats.irt": 9,
    "flasheval.stats.rank_intervals": 11,
    "flasheval.stats.ranking": 8,
    "flasheval.stats.resampling": 4,
    "flasheval.stats.sampling": 5,
    "flasheval.stats.scaling": 10,
    "flasheval.stats.scaling_bootstrap": 12,
    "flasheval.stats.sequential": 5,
    "flasheval.tasks._prompts": 3,
    "flasheval.tasks._scoring": 14,
    "flasheval.tasks._suites": 3,
}
"""Module -> the doctest examples it held when listed (its minimum: raise it when you add examples)."""

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _n_examples(module: object) -> int:
    """How many doctest examples ``module`` holds (found, not run)."""
    return sum(len(test.examples) for test in doctest.DocTestFinder().find(module))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_doctests(name):
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError:
        pytest.fail(f"{name} is listed in tests/test_doctests.py EXAMPLES but no longer exists: move its entry "
                    "to the module its examples went to")
    found = _n_examples(module)
    assert found >= EXAMPLES[name], (f"{name} held {EXAMPLES[name]} doctest examples and now holds {found}: "
                                     "restore them (or, if they moved, move the count in EXAMPLES with them)")
    result = doctest.testmod(module, optionflags=FLAGS)
    assert result.failed == 0


def test_every_module_with_examples_is_listed():
    names = sorted(m.name for m in pkgutil.walk_packages(flasheval.__path__, prefix="flasheval.")
                   if m.name != "flasheval.__main__")
    unlisted = {}
    for name in names:
        if name not in EXAMPLES:
            found = _n_examples(importlib.import_module(name))
            if found:
                unlisted[name] = found
    assert not unlisted, (f"modules with doctest examples that tests/test_doctests.py does not run: {unlisted}; "
                          "add each to EXAMPLES with its count")
