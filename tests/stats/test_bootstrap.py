import numpy as np
import pytest
from scipy import stats

from flasheval.stats.bootstrap import bootstrap_dataset_means, percentile_interval, rank_distribution
from flasheval.stats.control_variate import control_variate_means
from flasheval.stats.resampling import resample_counts


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


def test_finite_population_variance_matches_brute_force_enumeration_of_every_subsample():
    """Sampling without replacement, enumerated: the exact variance of a subsample mean over all
    C(16, 8) subsamples is (1 - n/N) S^2 / n (S^2 with divisor N - 1). The bootstrap's variance,
    averaged over subsamples, must match it up to the bootstrap's known (n - 1) / n plug-in factor."""
    from itertools import combinations

    population = np.array([0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1], dtype=float)
    N, n = len(population), 8
    subsets = np.array(list(combinations(range(N), n)))
    exact = population[subsets].mean(axis=1).var()  # brute force, no formula
    gen = np.random.default_rng(0)
    boot_var = []
    for idx in subsets[gen.choice(len(subsets), 300, replace=False)]:
        _, rep = bootstrap_dataset_means([population[idx][None, :]], population_sizes=[N], n_resamples=4000, rng=gen)
        boot_var.append(rep[:, 0, 0].var())
    assert np.mean(boot_var) == pytest.approx(exact * (n - 1) / n, rel=0.06)
    _, full = bootstrap_dataset_means([population[None, :]], population_sizes=[N], n_resamples=200, rng=5)
    assert np.all(full == population.mean())  # nothing left unseen: no uncertainty


@pytest.mark.parametrize("k", [0, 20])
def test_small_sample_floor_gives_20_of_20_about_the_jeffreys_posterior_variance(k):
    y = np.full(20, float(k == 20))
    c = np.random.default_rng(1).random(20)
    _, rep = control_variate_means([y], [c], [0.5], n_resamples=20000, rng=3)
    jeffreys = stats.beta(k + 0.5, 20 - k + 0.5).var()
    assert rep[:, 0].var() == pytest.approx(jeffreys, rel=0.15)
    _, rep = control_variate_means([y], [c], [0.5], n_resamples=100, rng=3, pseudo_count=0)
    assert rep[:, 0].var() == 0  # what the floor repairs
    # the floor fades: at 1,000 balanced examples it changes the variance by under 1%
    big = (np.random.default_rng(2).random(1000) < 0.5).astype(float)
    cov = np.random.default_rng(3).random(1000)
    floored = control_variate_means([big], [cov], [0.5], n_resamples=4000, rng=4)[1][:, 0].var()
    plain = control_variate_means([big], [cov], [0.5], n_resamples=4000, rng=4, pseudo_count=0)[1][:, 0].var()
    assert floored == pytest.approx(plain, rel=0.01)


def test_control_variate_recovers_the_full_mean_when_the_covariate_is_the_score():
    gen = np.random.default_rng(2)
    population = (gen.random(500) < 0.3).astype(float)
    sample = population[:80]
    obs, rep = control_variate_means([sample], [sample], [population.mean()], population_sizes=[500],
                                     n_resamples=100, rng=0, pseudo_count=0)
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


@pytest.mark.parametrize("estimator", ["control-variate", "paired"])
@pytest.mark.parametrize("rank", [1, 3, 7, 15, 30])  # one rank in each of the paper's tiers
def test_a_perfect_and_a_null_dataset_do_not_make_the_rank_certain_at_any_tier(estimator, rank):
    """20/20 on one dataset and 0/20 on the other: zero spread on the subsample. Without the floor the
    interval would be the single rank; with it the rank keeps the uncertainty of 20 examples per dataset."""
    gen = np.random.default_rng(rank)
    values = 0.5 + 0.01 * (rank - 1.5 - np.arange(40))  # rank - 1 pool models above 0.5, the others below
    full = np.column_stack([values, values])
    pool = [(gen.random((40, 20)) < values[:, None]).astype(float) for _ in range(2)]
    new = [np.ones(20), np.zeros(20)]
    dist = rank_distribution(new, pool, population_sizes=[1000, 1000], n_resamples=2000, rng=0, estimator=estimator,
                             pool_full_means=full)
    lo, hi = dist.interval
    assert hi - lo >= 4
    if estimator == "control-variate":  # the pool's full-data means are exact: the point rank is the designed one
        assert dist.rank == rank and lo <= rank <= hi
