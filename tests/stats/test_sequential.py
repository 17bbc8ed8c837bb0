"""Repeated confidence intervals: checked against published constants, scipy and simulation, never their own formula."""

import numpy as np
import pytest
from scipy import stats

from flasheval.stats.sequential import continuation_probability, pocock_constant, pocock_level


@pytest.mark.parametrize("k, published", [(2, 2.178), (3, 2.289), (4, 2.361), (5, 2.413), (10, 2.555)])
def test_pocock_constants_for_equally_spaced_looks_match_the_published_table(k, published):
    # Pocock (1977) / Jennison & Turnbull (2000), Table 2.1: two-sided alpha = 0.05, K equally spaced looks
    assert pocock_constant(list(range(1, k + 1)), 0.05) == pytest.approx(published, abs=1.5e-3)


def _corr(info):
    info = np.asarray(info, dtype=float)
    return np.sqrt(np.minimum.outer(info, info) / np.maximum.outer(info, info))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_continuation_probability_equals_scipys_multivariate_normal(seed):
    gen = np.random.default_rng(seed)
    k = 3 + seed
    info = np.cumsum(gen.uniform(0.05, 2.0, size=k))  # uneven spacing, small and large increments
    bounds = gen.uniform(1.6, 3.0, size=k)
    mvn = stats.multivariate_normal(mean=np.zeros(k), cov=_corr(info))
    expected = mvn.cdf(bounds, lower_limit=-bounds, rng=np.random.default_rng(0))
    assert continuation_probability(info, bounds) == pytest.approx(expected, abs=2e-5)


def test_pocock_constant_over_geometric_looks_matches_a_brownian_motion_simulation():
    looks = [20 * 1.26 ** j for j in range(18)]
    c = pocock_constant(looks, 0.05)
    gen = np.random.default_rng(7)
    steps = np.diff(np.r_[0.0, looks])
    paths = np.cumsum(gen.standard_normal((200_000, len(looks))) * np.sqrt(steps), axis=1)
    crossed = (np.abs(paths) / np.sqrt(looks) >= c).any(axis=1).mean()
    assert crossed == pytest.approx(0.05, abs=3 * np.sqrt(0.05 * 0.95 / 200_000))
    # more looks cost more, but far less than the union bound says
    assert stats.norm.isf(0.025) < c < stats.norm.isf(0.05 / 36)


def test_nested_samples_without_replacement_cover_at_every_look_at_the_pocock_level():
    """The whole claim on real sampling: three finite datasets of different sizes, nested prefixes of one
    random order each (sampling without replacement), the aggregate mean's normal interval at every look."""
    gen = np.random.default_rng(11)
    sizes = [300, 700, 1200]
    populations = [gen.gamma(2.0, 1.0 + d, size=n) for d, n in enumerate(sizes)]  # skewed, different spreads
    truth = np.mean([p.mean() for p in populations])
    stages = [20, 30, 45, 70, 100, 150, 220, 300, 450, 700]
    targets = [[min(s, n) for n in sizes] for s in stages]
    s2 = [p.var(ddof=1) for p in populations]
    # the textbook variance of a mean under simple random sampling without replacement, summed over datasets
    variances = [sum(v * (1 / n - 1 / big) for v, n, big in zip(s2, t, sizes)) / len(sizes) ** 2 for t in targets]
    level = pocock_level(variances, 0.90)
    z = stats.norm.isf((1 - level) / 2)
    reps, misses = 4000, 0
    for _ in range(reps):
        orders = [gen.permutation(p) for p in populations]
        sums = [np.cumsum(o) for o in orders]
        est = np.array([np.mean([cs[n - 1] / n for cs, n in zip(sums, t)]) for t in targets])
        misses += bool(np.any(np.abs(est - truth) > z * np.sqrt(variances)))
    rate = misses / reps
    assert rate == pytest.approx(0.10, abs=3 * np.sqrt(0.1 * 0.9 / reps) + 0.01)
    # the union bound over the same looks is far more conservative
    union = stats.norm.isf(0.10 / 2 / sum(v > 0 for v in variances))
    assert z < union - 0.15


def test_pocock_level_ignores_looks_that_cannot_err_or_repeat():
    base = pocock_level([4.0, 2.0, 1.0], 0.95)
    assert pocock_level([4.0, 2.0, 2.0, 1.0, 0.0, 0.0], 0.95) == pytest.approx(base)
    assert pocock_level([3.0, 0.0], 0.95) == 0.95  # one look that can err: the plain level
    assert pocock_level([0.0, 0.0], 0.95) == 0.95
    with pytest.raises(ValueError, match="non-increasing"):
        pocock_level([1.0, 2.0], 0.95)
    with pytest.raises(ValueError, match="strictly increasing"):
        continuation_probability([2.0, 1.0], [2.0, 2.0])


def test_only_ratios_of_information_matter():
    info = [1.0, 3.0, 4.0, 9.0]
    assert continuation_probability(info, [2.2] * 4) == pytest.approx(
        continuation_probability([1000 * x for x in info], [2.2] * 4), abs=1e-9)
