import numpy as np
import pytest
from scipy import stats

from flasheval.stats.bootstrap import (
    bootstrap_dataset_means,
    control_variate_means,
    percentile_interval,
    rank_distribution,
    resample_counts,
)


def test_paired_mean_difference_matches_scipy_percentile_bootstrap():
    gen = np.random.default_rng(7)
    x = gen.normal(0.0, 1.0, 300)
    y = 0.7 * x + gen.normal(0.2, 0.7, 300)  # correlated: pairing matters
    _, rep = bootstrap_dataset_means([np.vstack([x, y])], n_resamples=20000, rng=1)
    diffs = rep[:, 0, 0] - rep[:, 1, 0]
    ours = percentile_interval(diffs, 0.95)
    ref = stats.bootstrap((x, y), lambda a, b, axis=-1: (a - b).mean(axis=axis), paired=True, vectorized=True,
                          method="percentile", n_resamples=20000, confidence_level=0.95, rng=2)
    se = ref.standard_error
    assert ours[0] == pytest.approx(ref.confidence_interval.low, abs=0.05 * se)
    assert ours[1] == pytest.approx(ref.confidence_interval.high, abs=0.05 * se)
    assert np.std(diffs) == pytest.approx(se, rel=0.03)
    # an unpaired bootstrap would be much wider: the pairing is real
    assert np.std(diffs) < 0.8 * np.hypot(x.std(), y.std()) / np.sqrt(300)


def test_same_seed_same_output_and_streams_differ_by_seed():
    gen = np.random.default_rng(0)
    scores = [gen.random((5, 40)), gen.random((5, 60))]
    a = bootstrap_dataset_means(scores, population_sizes=[100, 100], n_resamples=50, rng=3)[1]
    b = bootstrap_dataset_means(scores, population_sizes=[100, 100], n_resamples=50, rng=3)[1]
    c = bootstrap_dataset_means(scores, population_sizes=[100, 100], n_resamples=50, rng=4)[1]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_counts_are_a_resample_with_replacement():
    counts = resample_counts(7, 2000, np.random.default_rng(0))
    assert counts.shape == (2000, 7) and np.all(counts.sum(axis=1) == 7)
    # each example is drawn Binomial(7, 1/7) times: mean 1, variance 6/7
    assert counts.mean() == pytest.approx(1.0, abs=0.02)
    assert counts.var() == pytest.approx(6 / 7, rel=0.05)


def test_finite_population_correction_scales_deviations_and_vanishes_at_full_data():
    gen = np.random.default_rng(1)
    scores = [(gen.random((3, 50)) < 0.6).astype(float)]
    obs, infinite = bootstrap_dataset_means(scores, population_sizes=None, n_resamples=200, rng=5)
    _, finite = bootstrap_dataset_means(scores, population_sizes=[200], n_resamples=200, rng=5)
    np.testing.assert_allclose(finite - obs, np.sqrt(1 - 50 / 200) * (infinite - obs), atol=1e-12)
    _, full = bootstrap_dataset_means(scores, population_sizes=[50], n_resamples=200, rng=5)
    assert np.all(full == obs)


def test_control_variate_recovers_the_full_mean_when_the_covariate_is_the_score():
    gen = np.random.default_rng(2)
    population = (gen.random(500) < 0.3).astype(float)
    sample = population[:80]
    obs, rep = control_variate_means([sample], [sample], [population.mean()], population_sizes=[500],
                                     n_resamples=100, rng=0)
    assert obs[0] == pytest.approx(population.mean())
    np.testing.assert_allclose(rep[:, 0], population.mean(), atol=1e-6)
    # a constant covariate carries no information: the plain sample mean
    obs, _ = control_variate_means([sample], [np.full(80, 0.5)], [0.5], n_resamples=10, rng=0)
    assert obs[0] == pytest.approx(sample.mean())


def test_control_variate_is_unbiased_and_tighter_than_the_sample_mean():
    gen = np.random.default_rng(3)
    difficulty = gen.normal(0, 1.5, 2000)
    c = 1 / (1 + np.exp(difficulty))  # pool's success rate per example
    y = (gen.random(2000) < 1 / (1 + np.exp(difficulty - 0.5))).astype(float)
    plain, cv = [], []
    for _ in range(300):
        idx = gen.choice(2000, 100, replace=False)
        plain.append(y[idx].mean())
        cv.append(control_variate_means([y[idx]], [c[idx]], [c.mean()], population_sizes=[2000], n_resamples=1,
                                        rng=0)[0][0])
    assert np.mean(cv) == pytest.approx(y.mean(), abs=0.01)
    assert np.var(cv) < 0.8 * np.var(plain)


@pytest.mark.parametrize("estimator", ["paired", "control-variate"])
def test_rank_at_full_data_is_the_full_data_rank_with_a_degenerate_interval(estimator):
    gen = np.random.default_rng(4)
    pool = [(gen.random((10, 30)) < np.linspace(0.2, 0.8, 10)[:, None]).astype(float) for _ in range(2)]
    new = [(gen.random(30) < 0.55).astype(float) for _ in range(2)]
    full = np.stack([p.mean(axis=1) for p in pool], axis=1)
    dist = rank_distribution(new, pool, population_sizes=[30, 30], n_resamples=100, rng=0, estimator=estimator,
                             pool_full_means=full)
    expected = 1 + np.sum(full.mean(axis=1) > np.mean([n.mean() for n in new])) + 0.5 * np.sum(
        full.mean(axis=1) == np.mean([n.mean() for n in new]))
    assert dist.mid_rank == expected and dist.width == 0 and np.all(dist.replicates == expected)


def test_rank_interval_contains_point_and_supports_win_rate():
    gen = np.random.default_rng(5)
    pool = [(gen.random((8, 40)) < np.linspace(0.1, 0.9, 8)[:, None]).astype(float) for _ in range(3)]
    new = [(gen.random(40) < 0.5).astype(float) for _ in range(3)]
    dist = rank_distribution(new, pool, kind="win_rate", n_resamples=300, rng=1)
    assert dist.interval[0] <= dist.rank <= dist.interval[1]
    assert 1 <= dist.interval[0] and dist.interval[1] <= 9
    assert dist.replicates.shape == (300,)
