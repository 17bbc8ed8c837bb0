"""``benchmarks/stop_rule_constant.py``: its worst-case miss rate against the normal tail it must reduce to."""

import numpy as np
import pytest
from scipy import stats

from benchmarks import stop_rule_constant as src


def test_one_look_that_always_stops_misses_at_the_normal_upper_tail():
    # one pool model at 0, the truth just below it (rank 2): the interval misses exactly when T - c se >= 0
    n_paths = 200_000
    z = np.random.default_rng(3).standard_normal((n_paths, 1))
    fits = np.ones((4, 4), dtype=bool)  # every interval stops at the first look
    worst, where = src.worst_miss(2.0, np.array([0.0]), np.array([1.0]), z, fits, np.array([-1e-9]))
    assert where == -1e-9
    assert worst == pytest.approx(stats.norm.sf(2.0), abs=4 * np.sqrt(stats.norm.sf(2.0) / n_paths))


def test_a_rule_that_never_stops_never_misses():
    z = np.random.default_rng(4).standard_normal((1000, 3))
    fits = np.zeros((5, 5), dtype=bool)
    worst, _ = src.worst_miss(1.0, np.array([0.3, -0.2]), np.array([1.0, 0.5, 0.2]), z, fits,
                              np.linspace(-1, 1, 21))
    assert worst == 0.0


def test_the_top_limit_matches_the_window_rule_simulated_far_from_the_pool():
    # Truth just below the best of widely spaced pool models, a spread far below the gaps: the rule
    # runs until |Z| >= c and misses on the upper exits only. Simulated with the real window rule,
    # against half the two-sided crossing probability by recursive integration (an independent method).
    from flasheval.placement.tiers import load_tier_plan

    plan = load_tier_plan("default").for_pool(11)
    values = -np.arange(10, dtype=float)  # gaps of 1
    info = np.array([20.0, 25, 32, 40, 50, 63, 80, 100])
    n_paths = 40_000
    z = src.brownian_paths(info, n_paths, np.random.default_rng(7))
    se = 1e-4 / np.sqrt(info)
    worst, where = src.worst_miss(2.4, values, se, z, src.fits_table(plan, 11), np.array([-1e-9]))
    expected = src.top_limit_miss(2.4, info)
    assert 0.03 < expected < 0.06
    assert worst == pytest.approx(expected, abs=4 * np.sqrt(expected / n_paths))


def test_the_lower_bound_is_pococks_constant_at_twice_alpha():
    from flasheval.stats.sequential import pocock_constant

    info = np.array([1.0, 2.0, 4.0, 8.0])
    c = pocock_constant(tuple(info), 0.10)
    assert src.top_limit_miss(c, info) == pytest.approx(0.05, abs=1e-6)
    # finer grids need a larger bound; the cap on the share of the oracle stays far below 85%
    looks = [src.grid_ceiling(r, 0.05) for r in (1.12, 1.26, 1.5, 2.0, 3.0)]
    assert [k for k, _, _ in looks] == sorted([k for k, _, _ in looks], reverse=True)
    assert all(b1 > b2 for (_, b1, _), (_, b2, _) in zip(looks, looks[1:]))
    assert max(cap for _, _, cap in looks) < 0.6


def test_grid_ceiling_for_one_look_is_the_one_sided_normal_quantile():
    k, c, cap = src.grid_ceiling(100.0, 0.05, first=20, last=1000)  # the next look would pass 1000
    assert k == 1
    assert c == pytest.approx(stats.norm.isf(0.05), abs=1e-4)
    assert cap == pytest.approx((1.96 / c) ** 2 * np.log(100.0) / 99.0)


def test_share_cap_solves_the_finite_population_variance_equation():
    # one dataset of N examples: 1/n_m - 1/N = r (1/n_o - 1/N) with r = (1.96 / c)^2, solved by hand
    big_n, n_o, c = 800, 60, 2.6
    r = (1.96 / c) ** 2
    n_m = 1.0 / (1.0 / big_n + r * (1.0 / n_o - 1.0 / big_n))
    assert src.share_cap(c, n_o, [big_n], [0.4]) == pytest.approx(n_o / n_m, rel=1e-6)
    assert src.share_cap(1.96, n_o, [big_n, 300], [0.4, 0.2]) == pytest.approx(1.0)
    assert src.share_cap(2.8, 50, [10 ** 8, 10 ** 8], [1.0, 2.0]) == pytest.approx((1.96 / 2.8) ** 2, rel=1e-5)
