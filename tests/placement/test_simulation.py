from dataclasses import replace

import pytest

from flasheval.placement.simulation import simulate_coverage, synthetic_reference
from flasheval.placement.tiers import load_tier_plan


def test_synthetic_reference_is_valid_and_seeded():
    a = synthetic_reference(5, [10, 20], rng=3)
    b = synthetic_reference(5, [10, 20], rng=3)
    assert a.n_models == 5 and [len(e) for e in a.example_ids] == [10, 20]
    assert (a.scores[1] == b.scores[1]).all()


@pytest.mark.slow
def test_whole_procedure_coverage_is_at_least_nominal_minus_two_points():
    """Sequential looks: the interval reported at the stop must still cover the full-data rank."""
    plan = replace(load_tier_plan("default"), n_resamples=400)
    df = simulate_coverage(plan, n_repetitions=160, n_models=40, sizes=(300, 600, 300, 1000), ability_spread=0.5, rng=20)
    assert df["covered"].mean() >= plan.confidence_level - 0.02
    assert df["within"].mean() >= 0.95
    assert df["n_examples"].mean() < 0.6 * sum((300, 600, 300, 1000))  # it does stop early
