"""Rank intervals of every model: against a brute-force computation, and their coverage by simulation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from flasheval.analysis.interval_simulation import simulate_interval_coverage
from flasheval.stats.rank_intervals import (
    _GRID,
    groups_from_intervals,
    linear_aggregate_replicates,
    max_statistic,
    naive_rank_intervals,
    rank_intervals_from_replicates,
)


def _pool(n_models: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.default_rng(seed)
    ability = gen.normal(0, 0.6, n_models)
    scores = []
    for n in (60, 90):
        p = 1 / (1 + np.exp(-(ability[:, None] - gen.normal(0, 1.5, n)[None, :])))
        scores.append((gen.random(p.shape) < p).astype(float))
    return linear_aggregate_replicates(scores, [0.5, 0.5], n_resamples=300, rng=seed)


def _brute(values, replicates, level, simultaneous):
    """Every pair in Python loops: the statistic per replicate, the quantiles, the significant pairs, the counts."""
    n = len(values)
    z = replicates - values
    s = replicates.std(axis=0)
    pairs = [(i, j) for i, j in itertools.permutations(range(n), 2)]
    t_all = np.array([max((zr[i] - zr[j]) / (s[i] + s[j]) for i, j in pairs) for zr in z])
    c_all = np.quantile(t_all, level, method="higher")
    if simultaneous:
        c = np.full(n, c_all)
    else:
        c = np.array([np.quantile([max(abs(zr[i] - zr[j]) / (s[i] + s[j]) for j in range(n) if j != i) for zr in z],
                                  level, method="higher") for i in range(n)])
    better = [sum(values[j] - values[i] > c[i] * (s[i] + s[j]) for j in range(n)) for i in range(n)]
    worse = [sum(values[i] - values[j] > c[i] * (s[i] + s[j]) for j in range(n)) for i in range(n)]
    return c, t_all, np.array([1 + b for b in better]), np.array([n - w for w in worse])


@pytest.mark.parametrize("seed", [0, 1])
def test_simultaneous_intervals_equal_a_brute_force_computation(seed):
    values, replicates = _pool(9, seed)
    c, t_all, lo, hi = _brute(values, replicates, 0.9, True)
    np.testing.assert_allclose(max_statistic(replicates - values, replicates.std(axis=0)), t_all, rtol=1e-12)
    found = rank_intervals_from_replicates(values, replicates, confidence_level=0.9)
    np.testing.assert_allclose(found.critical, c, rtol=1e-12)
    assert found.lo.tolist() == lo.tolist() and found.hi.tolist() == hi.tolist()
    assert np.all(found.lo <= found.ranks) and np.all(found.ranks <= found.hi)
    assert 0 < np.sum(found.hi - found.lo) < 9 * 8  # neither all exact nor all uninformative: the check bites


def test_the_bisection_equals_every_pair_on_a_larger_pool():
    gen = np.random.default_rng(5)
    z, s = gen.normal(size=(40, 60)), gen.uniform(0.2, 2.0, 60)
    s[3], z[:, 3] = 0.0, 0.0  # a constant model
    total = s[:, None] + s[None, :]
    direct = np.where(total > 0, (z[:, :, None] - z[:, None, :]) / np.where(total > 0, total, 1), 0).max(axis=(1, 2))
    np.testing.assert_allclose(max_statistic(z, s), direct, rtol=1e-8)  # 60 models > the direct path's 32


def test_per_model_constants_round_up_to_the_grid_and_count_like_brute_force():
    values, replicates = _pool(8, 3)
    c, _, _, _ = _brute(values, replicates, 0.9, False)
    found = rank_intervals_from_replicates(values, replicates, confidence_level=0.9, simultaneous=False)
    step = rank_intervals_from_replicates(values, replicates, confidence_level=0.9).critical[0] / _GRID
    assert np.all(found.critical >= c - 1e-12) and np.all(found.critical <= c + step + 1e-12)
    s = replicates.std(axis=0)
    n = len(values)
    lo = [1 + sum(values[j] - values[i] > found.critical[i] * (s[i] + s[j]) for j in range(n)) for i in range(n)]
    assert found.lo.tolist() == lo
    simultaneous = rank_intervals_from_replicates(values, replicates, confidence_level=0.9)
    assert np.all(found.lo >= simultaneous.lo) and np.all(found.hi <= simultaneous.hi)  # narrower, never wider


def test_lower_is_better_mirrors_the_ranks():
    values, replicates = _pool(7, 4)
    up = rank_intervals_from_replicates(values, replicates)
    down = rank_intervals_from_replicates(-values, -replicates, higher_is_better=False)
    assert up.lo.tolist() == down.lo.tolist() and up.hi.tolist() == down.hi.tolist() and up.groups == down.groups


def test_groups_cut_only_where_both_sides_are_settled():
    order = np.array([2, 0, 1, 3, 4])
    lo, hi = np.array([1, 2, 1, 4, 4]), np.array([2, 3, 2, 5, 5])  # by model: 2 and 0 overlap 1, 1 reaches 3
    assert groups_from_intervals(order, lo, hi) == ((2, 0, 1), (3, 4))
    assert groups_from_intervals(order, np.arange(1, 6)[np.argsort(order)], np.arange(1, 6)[np.argsort(order)]) \
        == ((2,), (0,), (1,), (3,), (4,))


def test_naive_intervals_are_percentiles_of_the_replicate_ranks():
    values = np.array([0.3, 0.2, 0.1])
    replicates = np.array([[0.3, 0.2, 0.1]] * 19 + [[0.1, 0.2, 0.3]])
    # reversed in 1 of 20 replicates (5%): within an 80% interval's 10% tails, not within a 95% one's 2.5%
    assert [x.tolist() for x in naive_rank_intervals(values, replicates, confidence_level=0.8)] == [[1, 2, 3], [1, 2, 3]]
    assert [x.tolist() for x in naive_rank_intervals(values, replicates, confidence_level=0.95)] == [[1, 2, 1], [3, 2, 3]]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="confidence_level"):
        rank_intervals_from_replicates(np.zeros(3), np.zeros((5, 3)), confidence_level=1.0)
    with pytest.raises(ValueError, match="replicates"):
        rank_intervals_from_replicates(np.zeros(3), np.zeros((5, 2)))


def test_coverage_by_simulation_and_the_naive_bootstrap_under_covers():
    # 200 pools of 20 models with known true means (abilities spread 0.5: intervals informative, neighbours close)
    with threadpool_limits(1):  # tiny matrix products: threads only cost here
        cov = simulate_interval_coverage(200, n_models=20, sizes=[100, 100], spread=0.5, n_resamples=1000,
                                         per_model=False, rng=np.random.default_rng(2))
    se = cov.standard_error(0.95)
    assert cov.simultaneous >= 0.95 - 3 * se, cov  # every model's true rank in its interval, at once
    # the event the intervals rest on (all pairwise differences within their bounds) holds at the nominal
    # level, no more: the bounds are calibrated, not merely wide
    assert abs(cov.differences - 0.95) <= 3 * se, cov
    assert cov.width_simultaneous < 18  # of 20 ranks: informative
    assert cov.naive < 0.8, cov  # centred on the observed order: misses some model's true rank in most pools
