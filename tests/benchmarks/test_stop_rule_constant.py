"""``benchmarks/stop_rule_constant.py``: grid caps against a brute-force overshoot, the share cap against simulation."""

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


def _mean_overshoot(looks: np.ndarray, n_grid: int = 200_000) -> float:
    """Brute force: needs spread evenly in ``log n`` on ``(looks[0], looks[-1]]``, each stopped at the next look."""
    log_need = np.log(looks[0]) + (np.arange(n_grid) + 0.5) / n_grid * np.log(looks[-1] / looks[0])
    need = np.exp(log_need)
    stop = looks[np.searchsorted(looks, need, side="left")]
    return float(np.mean(stop / need))


@pytest.mark.parametrize(("ratio", "n_looks"), [(2.0, 6), (3.0, 4), (100.0, 1)])
def test_grid_ceiling_share_cap_is_the_bound_over_the_brute_force_overshoot(ratio, n_looks):
    # looks 20, 20 r, ... up to 1000 (exact integers for these ratios); a need past the last look
    # stops at the next one of the grid, 20 r^k
    k, c, cap = src.grid_ceiling(ratio, 0.05, first=20, last=1000)
    assert k == n_looks
    looks = 20.0 * ratio ** np.arange(k + 1)
    # the midpoint grid's error on the mean of a smooth ratio is O(1/n_grid^2); 1e-6 is generous
    assert cap == pytest.approx((1.96 / c) ** 2 / _mean_overshoot(looks), rel=1e-6)
    if k == 1:  # one look: the bound at 2 alpha is the one-sided normal quantile
        assert c == pytest.approx(stats.norm.isf(0.05), abs=1e-4)


def _mean_variance(populations: list[np.ndarray], n: float, n_perm: int, rng: np.random.Generator) -> float:
    """Monte Carlo variance of the sum of per-dataset means of ``min(n, N_d)`` examples drawn WITHOUT replacement.

    A non-integer ``n`` interpolates linearly between the variances at its floor and ceiling.
    """
    total = 0.0
    for pop in populations:
        big_n = len(pop)
        perms = rng.permuted(np.tile(pop, (n_perm, 1)), axis=1)
        prefix = np.cumsum(perms, axis=1) / np.arange(1, big_n + 1)  # the mean of each prefix of a random order
        var = np.mean((prefix - pop.mean()) ** 2, axis=0)  # at 1, ..., N examples; the population mean is known
        m = min(n, big_n)
        lo, hi = int(np.floor(m)), int(np.ceil(m))
        total += float(np.interp(m, [lo, hi], [var[lo - 1], var[hi - 1]])) if hi > lo else float(var[lo - 1])
    return total


@pytest.mark.parametrize(("n_oracle", "sizes", "spreads"), [(60, [200], [0.4]), (50, [200, 60], [0.4, 0.2])])
def test_share_cap_matches_the_simulated_variance_of_a_finite_population_sample(n_oracle, sizes, spreads):
    # Fixed finite populations with per-example sd S_d (ddof 1), sampled without replacement: at the
    # method's examples implied by the returned share, the variance of the aggregate is (1.96 / c)^2
    # times the oracle's. In the second case the method exhausts the 60-example dataset.
    c, n_perm = 2.6, 40_000
    rng = np.random.default_rng(11)
    populations = []
    for big_n, spread in zip(sizes, spreads):
        x = rng.standard_normal(big_n)
        populations.append(spread * (x - x.mean()) / x.std(ddof=1))
    share = src.share_cap(c, n_oracle, sizes, spreads)

    def examples(n: float) -> float:
        return float(sum(min(n, big_n) for big_n in sizes))

    grid = np.linspace(n_oracle, max(sizes), 200_001)
    n_method = float(np.interp(examples(n_oracle) / share, [examples(n) for n in grid], grid))
    assert n_method > n_oracle
    ratio = _mean_variance(populations, n_method, n_perm, rng) / _mean_variance(populations, n_oracle, n_perm, rng)
    # each variance estimate has relative sd about sqrt(2 / n_perm) (near-normal means): 4 sd of the ratio
    assert ratio == pytest.approx((1.96 / c) ** 2, rel=4 * 2 / np.sqrt(n_perm))


def test_share_cap_degenerate_cases():
    # c = 1.96: the method needs the oracle's examples; N -> infinity: the plain (1.96 / c)^2
    assert src.share_cap(1.96, 60, [800, 300], [0.4, 0.2]) == pytest.approx(1.0)
    assert src.share_cap(2.8, 50, [10 ** 8, 10 ** 8], [1.0, 2.0]) == pytest.approx((1.96 / 2.8) ** 2, rel=1e-5)


def test_unknown_reference_is_one_line(capsys):
    with pytest.raises(SystemExit, match="unknown reference 'nosuch'"):
        src.main(["nosuch"])
