"""Neyman allocation with costs, checked against a brute-force optimum over every integer allocation."""

from dataclasses import replace

import numpy as np
import pytest

from flasheval.placement.allocation import allocation_variance, neyman_cost_allocation, residual_spreads
from flasheval.placement.controller import place
from flasheval.placement.looks import stage_targets
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.analysis.simulation import synthetic_reference
from flasheval.placement.tiers import load_tier_plan, resolve_tier_plan
from flasheval.stats.sampling import example_order


def _brute_force(budget, sizes, spreads, costs, weights, lower):
    """Smallest variance over every integer allocation lower <= n <= N within the budget."""
    grids = np.meshgrid(*[np.arange(lo, n + 1) for lo, n in zip(lower, sizes)], indexing="ij")
    n = np.stack([g.ravel() for g in grids], axis=1).astype(np.float64)
    feasible = n @ np.asarray(costs) <= budget + 1e-9
    var = (((np.asarray(weights) * np.asarray(spreads)) ** 2) * (1 / n - 1 / np.asarray(sizes))).sum(axis=1)
    return float(var[feasible].min())


def _case(rng, unit_costs):
    d = int(rng.integers(2, 4))
    sizes = rng.integers(20, 60 if d == 3 else 250, size=d)
    costs = np.ones(d) if unit_costs else rng.uniform(0.5, 3.0, size=d)
    spreads, weights = rng.uniform(0.05, 1.0, size=d), rng.uniform(0.5, 2.0, size=d)
    lower = rng.integers(1, 10, size=d)
    budget = float(rng.uniform(costs @ lower, costs @ sizes))
    return budget, sizes, spreads, costs, weights, lower


@pytest.mark.parametrize("unit_costs", [True, False])
def test_allocation_matches_a_brute_force_optimum(unit_costs):
    rng = np.random.default_rng(11)
    for _ in range(25):
        budget, sizes, spreads, costs, weights, lower = _case(rng, unit_costs)
        n = neyman_cost_allocation(budget, sizes, spreads=spreads, costs=costs, weights=weights, lower=lower)
        assert np.all(np.asarray(n) >= lower) and np.all(np.asarray(n) <= sizes)
        assert float(np.dot(costs, n)) <= budget + 1e-9
        ours = allocation_variance(n, sizes, spreads=spreads, weights=weights)
        best = _brute_force(budget, sizes, spreads, costs, weights, lower)
        if unit_costs:  # equal costs: the separable convex problem's integer optimum is reached exactly
            assert ours == pytest.approx(best, rel=1e-12)
        else:  # unequal costs make it a knapsack: near-optimal
            assert best <= ours <= 1.03 * best


def test_continuous_rule_is_proportional_to_weight_times_spread_over_root_cost():
    # away from the bounds n_d = B a_d / sum_e c_e a_e with a_d = w_d S_d / sqrt(c_d) (Cochran 5.5)
    a, costs = np.array([0.4, 0.4, 0.1]), np.array([1.0, 1.0, 9.0])
    n = neyman_cost_allocation(9000, [10**6] * 3, spreads=[0.4, 0.2, 0.3], costs=costs, weights=[1, 2, 1])
    assert n == pytest.approx(9000 * a / (costs @ a), abs=5)  # integer rounding of the dear dataset


def test_allocations_stay_nested_across_looks_and_respect_the_minimum():
    sizes, spreads = [437, 2047, 1000, 500], [0.45, 0.2, 0.05, 0.3]
    previous = [0] * 4
    for stage in (20, 50, 100, 150, 200, 500, 1000):
        n = stage_targets(stage, sizes, allocation="neyman-cost", spreads=spreads, costs=[3.0, 1.0, 1.0, 0.5],
                          scored=previous, minimum=20)
        assert all(a >= b for a, b in zip(n, previous)) and min(n) >= 20
        assert np.dot([3.0, 1.0, 1.0, 0.5], n) <= np.dot([3.0, 1.0, 1.0, 0.5], [min(stage, s) for s in sizes]) + 1e-9
        previous = n
    assert stage_targets(None, sizes, allocation="neyman-cost", spreads=spreads, scored=previous) == sizes
    assert stage_targets(100, sizes) == [100, 100, 100, 100]


def test_residual_spreads_agree_with_numpy_least_squares():
    s = np.random.default_rng(0).integers(0, 2, size=(7, 40)).astype(float)
    cov = s.mean(axis=0)
    resid = [y - np.polyval(np.polyfit(cov, y, 1), cov) for y in s]
    assert residual_spreads([s]) == pytest.approx([np.sqrt(np.mean(np.square(resid)))])


def test_place_with_neyman_cost_allocation_scores_nested_prefixes_once(tmp_path):
    ref = synthetic_reference(12, [300, 200, 400], rng=3)
    tokens = tuple(np.full(s.shape, t, dtype=np.int64) for s, t in zip(ref.scores, (40, 10, 400)))
    ref = replace(ref, n_tokens=tokens)
    plan = replace(load_tier_plan("default"), n_resamples=200, allocation="neyman-cost")
    scorer = ReplayScorer(ref, "m004")
    result = place(ref.without("m004"), scorer, plan, seed=1)
    asked = {}
    for task, ids in scorer.requests:
        asked.setdefault(task, []).extend(ids)
    for task, ids in asked.items():  # each dataset: a prefix of its seeded order, never asked twice
        assert tuple(ids) == example_order(ref.example_ids[ref.dataset_names.index(task)], seed=1, task_name=task)[:len(ids)]
    # every look costs at most what the uniform look costs, but spends it unevenly (400-token examples are dear)
    for look in result.stages[:-1]:
        assert np.dot(look.n_examples, (40, 10, 400)) <= look.stage_size * 450
        assert min(look.n_examples) >= 10
    assert result.stages[1].n_examples[1] > result.stages[1].n_examples[2]


def test_unknown_allocation_in_a_plan_is_refused(tmp_path):
    from flasheval.errors import ConfigError

    text = resolve_tier_plan("default").read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "allocation: greedy\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="allocation"):
        load_tier_plan(bad)
    good = tmp_path / "good.yaml"
    good.write_text(text + "allocation: neyman-cost\n", encoding="utf-8")
    assert load_tier_plan(good).allocation == "neyman-cost"
    assert load_tier_plan("default").allocation == "uniform"
