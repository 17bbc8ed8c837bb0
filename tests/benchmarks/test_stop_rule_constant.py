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
