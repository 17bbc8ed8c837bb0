from dataclasses import replace

import pytest

from flasheval.analysis.simulation import SYNTHETIC_POOLS, simulate_coverage, synthetic_reference
from flasheval.placement.tiers import load_tier_plan


def test_synthetic_reference_is_valid_and_seeded():
    a = synthetic_reference(5, [10, 20], rng=3)
    b = synthetic_reference(5, [10, 20], rng=3)
    assert a.n_models == 5 and [len(e) for e in a.example_ids] == [10, 20]
    assert (a.scores[1] == b.scores[1]).all()


@pytest.mark.slow
@pytest.mark.parametrize("plan_name", ["default", "lean", "flash_helm"])
def test_whole_procedure_coverage_is_at_least_nominal_minus_one_point(plan_name):
    """Sequential looks: the interval reported at a data-dependent stop must still cover the full-data rank."""
    plan = replace(load_tier_plan(plan_name), n_resamples=1000)
    config = SYNTHETIC_POOLS["70 models x 6 datasets"]
    df = simulate_coverage(plan, n_repetitions=60, rng=20, **config)
    assert df["covered"].mean() >= plan.confidence_level - 0.01
    if plan_name == "default":
        assert df["within"].mean() >= 0.95
        assert df["n_examples"].mean() < 0.5 * sum(config["sizes"])  # it does stop early
