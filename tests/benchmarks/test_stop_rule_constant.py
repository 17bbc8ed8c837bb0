"""``benchmarks/stop_rule_constant.py``: the grid caps and the share cap against hand computations."""

import numpy as np
import pytest
from scipy import stats

from benchmarks import stop_rule_constant as src


def test_worst_miss_reports_the_largest_rate_and_where():
    # one pool model at 0, the truth just below it (rank 2): the interval misses exactly when T - c se >= 0
    n_paths = 200_000
    z = np.random.default_rng(3).standard_normal((n_paths, 1))
    fits = np.ones((4, 4), dtype=bool)  # every interval stops at the first look
    worst, where = src.worst_miss(2.0, np.array([0.0]), np.array([1.0]), z, fits, np.array([-5.0, -1e-9, 5.0]))
    assert where == -1e-9
    assert worst == pytest.approx(stats.norm.sf(2.0), abs=4 * np.sqrt(stats.norm.sf(2.0) / n_paths))


def test_lower_bounds_of_finer_grids_grow_and_no_grid_reaches_85_percent_of_the_oracle():
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


def test_unknown_reference_is_one_line(capsys):
    with pytest.raises(SystemExit, match="unknown reference 'nosuch'"):
        src.main(["nosuch"])
