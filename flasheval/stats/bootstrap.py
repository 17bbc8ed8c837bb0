"""Paired, dataset-stratified bootstrap of a new model's rank among a reference pool.

The estimand is the new model's rank among the reference models on the FULL data. The new
model is scored on a nested subsample ``S_d`` of each dataset ``d``; every reference model is
taken on the SAME examples (paired). One bootstrap replicate resamples, within each dataset,
``n_d`` example indices with replacement from ``S_d``; the same indices are used for the new
model and for every reference model, so example difficulty cancels in every comparison.

Vectorized over replicates: the resampled indices of dataset ``d`` become a count matrix
``C`` of shape ``(n_resamples, n_d)`` (how often each example was drawn), and all replicate
means of all models are one matrix product ``C @ scores.T / n_d`` (float32 counts and scores are
exact for 0/1 scores and n_d < 2**24; the sum is accumulated in float32, which for the
fractional scores of other references gives ~1e-7 relative error, far below the bootstrap noise).

Two estimators
--------------
``paired`` (plain): every model's per-dataset mean is its mean on the subsample; the new model
is compared with each reference model through their difference on the same examples.
``control-variate`` (default): the reference models' scores are known on EVERY example, so
their full-data means are exact and only the new model's full-data mean is estimated, by the
regression estimator ``ybar_S + b * (cbar_full - cbar_S)`` with covariate ``c_i`` = the pool's
mean score on example ``i`` (its difficulty) and ``b`` the least-squares slope on the
subsample. Each replicate resamples the same example indices for ``y`` and ``c`` (paired) and
refits ``b``. On helm_lite the residual variance is ~0.13 against ~0.24 for the difference
with the nearest reference model, i.e. about half the examples for the same precision.

Small-sample floor: :mod:`flasheval.stats.resampling`.

Finite population
-----------------
Dataset ``d`` has only ``N_d`` examples, so once ``S_d`` is most of it the full-data mean is
nearly known. Each replicate deviation is shrunk by the finite-population factor
``sqrt(1 - n_d / N_d)``: replicate = observed + sqrt(1 - n/N) * (bootstrap - observed). Its
variance is the classical ``(1 - n/N) s^2 / n`` of a mean under sampling without replacement,
and when ``S_d`` is the whole dataset every replicate equals the full-data value, so at the
last stage the rank interval is degenerate and equals the full-data rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.stats.control_variate import control_variate_means
from flasheval.stats.ranking import aggregate, rank_among
from flasheval.stats.resampling import floor_variance, resample_counts, score_bounds

__all__ = [
    "RankDistribution",
    "PoolExamples",
    "pool_examples",
    "bootstrap_dataset_means",
    "percentile_interval",
    "rank_distribution",
    "rank_from_replicates",
    "ESTIMATORS",
]

ESTIMATORS: tuple[str, ...] = ("control-variate", "paired")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class RankDistribution:
    """Bootstrap distribution of a new model's rank among a pool (rank 1 = best)."""

    mid_rank: float
    """Mid-rank on the observed subsample (``1 + n_better + n_tied / 2``)."""
    replicates: np.ndarray
    """Mid-rank in each bootstrap replicate, ``(n_resamples,)``."""
    confidence_level: float
    """Two-sided level of :attr:`interval`."""
    interval: tuple[int, int]
    """Percentile interval of the rank, widened outward to whole ranks."""
    n_models: int
    """Pool size; ranks lie in ``1 .. n_models + 1``."""

    @property
    def rank(self) -> int:
        """Point rank as a whole number (a half-integer mid-rank rounds up, the cautious way)."""
        return int(math.floor(self.mid_rank + 0.5))

    @property
    def width(self) -> int:
        """Number of ranks the interval spans minus one (0 = a single rank)."""
        return self.interval[1] - self.interval[0]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PoolExamples:
    """All the control-variate estimator uses of a pool's per-example scores: per dataset and example, the
    pool's mean score (the covariate), lowest and highest score, over the models (:func:`pool_examples`).

    Computed once for a pool's every example, :meth:`at` gives a look's examples without gathering the
    ``(n_models, n_d)`` scores again; :func:`rank_distribution` takes either and returns the same numbers
    (a column's mean over the models is summed model by model in both, and a minimum is a minimum).
    """

    means: tuple[np.ndarray, ...]
    """Per dataset, ``(n_d,)``: the pool's mean score on each example."""
    low: tuple[np.ndarray, ...]
    """Per dataset, ``(n_d,)``: the pool's lowest score on each example."""
    high: tuple[np.ndarray, ...]
    """Per dataset, ``(n_d,)``: the pool's highest score on each example."""

    def at(self, columns: Sequence[np.ndarray]) -> PoolExamples:
        """The same summaries on the examples ``columns[d]`` (indices) of each dataset."""
        return PoolExamples(means=tuple(m[c] for m, c in zip(self.means, columns)),
                            low=tuple(x[c] for x, c in zip(self.low, columns)),
                            high=tuple(x[c] for x, c in zip(self.high, columns)))


def pool_examples(pool_scores: Sequence[np.ndarray]) -> PoolExamples:
    """:class:`PoolExamples` of per-dataset ``(n_models, n_d)`` pool scores.

    Examples
    --------
    >>> pool = pool_examples([np.array([[1.0, 0.0, 0.5], [0.0, 0.0, 1.0]])])
    >>> pool.means[0].tolist(), pool.at([np.array([2])]).high[0].tolist()
    ([0.5, 0.0, 0.75], [1.0])
    """
    scores = [np.asarray(p, dtype=np.float64) for p in pool_scores]
    return PoolExamples(means=tuple(p.mean(axis=0) for p in scores), low=tuple(p.min(axis=0) for p in scores),
                        high=tuple(p.max(axis=0) for p in scores))


def bootstrap_dataset_means(
    scores: Sequence[np.ndarray],
    *,
    population_sizes: Sequence[int | None] | None = None,
    n_resamples: int = 1000,
    rng: int | np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Observed and bootstrap per-dataset means of every model, paired and stratified by dataset.

    Parameters
    ----------
    scores
        One array per dataset, ``(n_models, n_d)``: per-example scores of every model on the
        SAME ``n_d`` examples (row order identical across datasets).
    population_sizes
        Examples in each full dataset (``N_d``; ``None`` = infinite, no correction).
    n_resamples
        Number of bootstrap replicates.
    rng
        Seed or generator; each dataset gets an independent child stream.

    Returns
    -------
    observed : numpy.ndarray
        ``(n_models, n_datasets)`` means on the given examples.
    replicates : numpy.ndarray
        ``(n_resamples, n_models, n_datasets)`` finite-population-corrected replicate means.

    Examples
    --------
    >>> s = [np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]])]
    >>> obs, rep = bootstrap_dataset_means(s, population_sizes=[4], n_resamples=5, rng=0)
    >>> obs.ravel().tolist(), bool(np.all(rep == obs))
    ([0.75, 0.5], True)
    """
    if n_resamples < 1:
        raise ValueError("n_resamples must be >= 1")
    sizes = list(population_sizes) if population_sizes is not None else [None] * len(scores)
    if len(sizes) != len(scores):
        raise ValueError("population_sizes must have one entry per dataset")
    streams = np.random.default_rng(rng).spawn(len(scores))
    n_models = scores[0].shape[0]
    observed = np.empty((n_models, len(scores)))
    replicates = np.empty((n_resamples, n_models, len(scores)))
    for d, (s, size, stream) in enumerate(zip(scores, sizes, streams)):
        s = np.asarray(s)
        n = s.shape[1]
        if s.shape[0] != n_models or n < 1:
            raise ValueError(f"dataset {d}: scores must be (n_models={n_models}, n_d >= 1), got {s.shape}")
        if size is not None and size < n:
            raise ValueError(f"dataset {d}: population size {size} < {n} scored examples")
        observed[:, d] = s.mean(axis=1)
        shrink = 1.0 if size is None else math.sqrt(1.0 - n / size)
        if shrink == 0.0:
            replicates[:, :, d] = observed[:, d]
            continue
        counts = resample_counts(n, n_resamples, stream)
        boot = (counts @ s.T.astype(np.float32)).astype(np.float64) / n
        replicates[:, :, d] = observed[:, d] + shrink * (boot - observed[:, d])
    return observed, replicates


def percentile_interval(values: np.ndarray, confidence_level: float) -> tuple[float, float]:
    """Two-sided percentile interval of bootstrap ``values``, using observed values only.

    The lower end is the largest replicate value with at most ``alpha/2`` of the replicates
    strictly below it (``method="lower"``), the upper end symmetric (``"higher"``), so the
    interval never interpolates between discrete ranks.

    Examples
    --------
    >>> percentile_interval(np.arange(1, 101, dtype=float), 0.9)
    (5.0, 96.0)
    """
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level}")
    alpha = 1.0 - confidence_level
    lo = float(np.quantile(values, alpha / 2, method="lower"))
    hi = float(np.quantile(values, 1 - alpha / 2, method="higher"))
    return lo, hi


def rank_distribution(
    new_scores: Sequence[np.ndarray],
    pool_scores: Sequence[np.ndarray] | PoolExamples,
    *,
    population_sizes: Sequence[int | None] | None = None,
    kind: str = "mean",
    higher_is_better: bool = True,
    dataset_names: Sequence[str] = (),
    random_baselines: Mapping[str, float] | None = None,
    n_resamples: int = 1000,
    confidence_level: float = 0.95,
    rng: int | np.random.Generator | None = None,
    estimator: str = "paired",
    pool_full_means: np.ndarray | None = None,
) -> RankDistribution:
    """Bootstrap distribution of a new model's rank among a pool.

    Parameters
    ----------
    new_scores
        Per dataset, ``(n_d,)`` scores of the new model on its subsample.
    pool_scores
        Per dataset, ``(n_models, n_d)`` scores of the pool on the same examples, same order; or, for the
        ``control-variate`` estimator, their :class:`PoolExamples` (the same result).
    population_sizes, n_resamples, rng
        As in :func:`bootstrap_dataset_means`.
    kind, higher_is_better, dataset_names, random_baselines
        The aggregate (see :func:`flasheval.stats.ranking.aggregate`).
    confidence_level
        Two-sided level of the percentile interval.
    estimator
        ``"paired"`` or ``"control-variate"`` (see the module docstring).
    pool_full_means
        ``(n_models, n_datasets)`` full-data means of the pool; required by
        ``control-variate``, which then compares the new model's estimate with these exact values.

    Examples
    --------
    >>> new = [np.ones(50)]
    >>> pool = [np.vstack([np.zeros(50), np.r_[np.ones(25), np.zeros(25)]])]
    >>> dist = rank_distribution(new, pool, n_resamples=200, rng=0)
    >>> dist.rank, dist.interval
    (1, (1, 1))
    """
    if len(new_scores) != len(pool_scores.means if isinstance(pool_scores, PoolExamples) else pool_scores):
        raise ValueError("new_scores and pool_scores need one entry per dataset")
    options = {"kind": kind, "higher_is_better": higher_is_better, "dataset_names": dataset_names,
               "random_baselines": random_baselines}
    direction = True if kind == "win_rate" else higher_is_better
    if isinstance(pool_scores, PoolExamples):
        if estimator != "control-variate":
            raise ValueError("PoolExamples serve the control-variate estimator only; pass the pool's scores")
        # a pool's lowest and highest score have the pool's minimum and maximum
        bounds = [score_bounds(n, np.array([float(np.min(lo)), float(np.max(hi))]))
                  for n, lo, hi in zip(new_scores, pool_scores.low, pool_scores.high)]
    else:
        bounds = [score_bounds(n, p) for n, p in zip(new_scores, pool_scores)]
    if estimator == "control-variate":
        if pool_full_means is None:
            raise ValueError("the control-variate estimator needs pool_full_means")
        full = np.asarray(pool_full_means, dtype=np.float64)
        covariates = (list(pool_scores.means) if isinstance(pool_scores, PoolExamples) else
                      [np.asarray(p, dtype=np.float64).mean(axis=0) for p in pool_scores])
        new_obs, new_rep = control_variate_means(new_scores, covariates, full.mean(axis=0),
                                                 population_sizes=population_sizes, n_resamples=n_resamples, rng=rng,
                                                 score_bounds=bounds)
        observed = np.vstack([new_obs[None, :], full])
        if kind != "win_rate":  # each model's aggregate is its own row's: the pool's is one fixed vector
            return _rank_summary_fixed_pool(observed, new_rep, options, direction, confidence_level)
        replicates = np.concatenate([new_rep[:, None, :], np.broadcast_to(full, (n_resamples, *full.shape))], axis=1)
        return _rank_summary(observed, replicates, options, direction, confidence_level)
    if estimator != "paired":
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    joint = [np.vstack([np.asarray(n, dtype=np.float64)[None, :], np.asarray(p, dtype=np.float64)])
             for n, p in zip(new_scores, pool_scores)]
    observed, replicates = bootstrap_dataset_means(joint, population_sizes=population_sizes,
                                                   n_resamples=n_resamples, rng=rng)
    sizes = list(population_sizes) if population_sizes is not None else [None] * len(joint)
    # the child after the datasets' resampling streams: independent of them (for a Generator, fresh children)
    noise = np.random.default_rng(rng).spawn(len(joint) + 1)[-1].standard_normal((n_resamples, len(joint)))
    for d, (y, size) in enumerate(zip(new_scores, sizes)):
        y = np.asarray(y, dtype=np.float64)
        extra = floor_variance(y.var(), float(y.mean()), len(y), bounds[d])
        shrink = 1.0 if size is None else math.sqrt(max(0.0, 1.0 - len(y) / size))
        replicates[:, 0, d] += shrink * math.sqrt(extra) * noise[:, d]
    return _rank_summary(observed, replicates, options, direction, confidence_level)


def rank_from_replicates(observed: np.ndarray, replicates: np.ndarray, *, confidence_level: float = 0.95,
                         kind: str = "mean", higher_is_better: bool = True, dataset_names: Sequence[str] = (),
                         random_baselines: Mapping[str, float] | None = None) -> RankDistribution:
    """Rank distribution of row 0 among the other rows from any replicates of per-dataset means.

    ``observed`` is ``(n_models + 1, n_datasets)`` (row 0 the new model), ``replicates``
    ``(n_resamples, n_models + 1, n_datasets)``, e.g. posterior draws of another estimator;
    the interval is built exactly as :func:`rank_distribution` builds it.

    Examples
    --------
    >>> obs = np.array([[0.5], [0.9], [0.1]])
    >>> rank_from_replicates(obs, np.broadcast_to(obs, (10, 3, 1))).interval
    (2, 2)
    """
    options = {"kind": kind, "higher_is_better": higher_is_better, "dataset_names": dataset_names,
               "random_baselines": random_baselines}
    direction = True if kind == "win_rate" else higher_is_better
    return _rank_summary(observed, replicates, options, direction, confidence_level)


def _rank_summary(observed: np.ndarray, replicates: np.ndarray, options: dict, direction: bool,
                  confidence_level: float) -> RankDistribution:
    """Mid-rank of row 0 among the other rows, observed and per replicate, with its interval."""
    obs_agg = aggregate(observed, **options)
    rep_agg = aggregate(replicates, **options)
    mid = float(rank_among(obs_agg[0], obs_agg[1:], higher_is_better=direction))
    reps = rank_among(rep_agg[:, 0], rep_agg[:, 1:], higher_is_better=direction)
    return _rank_result(mid, reps, confidence_level, observed.shape[0] - 1)


def _rank_summary_fixed_pool(observed: np.ndarray, new_replicates: np.ndarray, options: dict, direction: bool,
                             confidence_level: float) -> RankDistribution:
    """:func:`_rank_summary` when only row 0 varies over the replicates (``new_replicates``: ``(R, n_datasets)``)
    and each row's aggregate is its own (``mean``, ``centered``): the pool is aggregated once and each
    replicate's mid-rank counted in the sorted pool, ``O(R log n)`` instead of ``O(R n)``; the same numbers."""
    obs_agg = aggregate(observed, **options)
    rep_new = aggregate(new_replicates[:, None, :], **options)[:, 0]
    mid = float(rank_among(obs_agg[0], obs_agg[1:], higher_is_better=direction))
    pool = np.sort(obs_agg[1:])
    below, not_above = np.searchsorted(pool, rep_new, side="left"), np.searchsorted(pool, rep_new, side="right")
    better = len(pool) - not_above if direction else below
    reps = 1.0 + better + 0.5 * (not_above - below)
    return _rank_result(mid, reps, confidence_level, observed.shape[0] - 1)


def _rank_result(mid: float, reps: np.ndarray, confidence_level: float, n_models: int) -> RankDistribution:
    """The :class:`RankDistribution` of a point mid-rank and its replicates."""
    lo, hi = percentile_interval(reps, confidence_level)
    # widen half-integer mid-ranks outward to whole ranks; always contain the point rank
    point = int(math.floor(mid + 0.5))
    interval = (min(int(math.floor(lo)), point), max(int(math.ceil(hi)), point))
    return RankDistribution(mid_rank=mid, replicates=reps, confidence_level=confidence_level,
                            interval=interval, n_models=n_models)
