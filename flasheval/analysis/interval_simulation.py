"""Coverage of the reference rank intervals by simulation: synthetic pools whose TRUE means are known.

Each dataset is a population of ``population`` items with 2PL response probabilities
``sigmoid(a_e (ability_m - b_e))`` (difficulty ``b_e`` and discrimination ``a_e`` shared by all models, as in
:mod:`flasheval.analysis.simulation`); a model's true dataset mean is its mean probability over the
population, its true aggregate the mean over datasets. A leaderboard draws ``n_examples`` items per dataset
(with replacement: i.i.d. from the population) and one 0/1 answer per model and item. The intervals claim to
cover the ranks of the TRUE aggregates; the simulation counts how often they do.

Pools: ``dense`` (abilities spread 0.05: most models within sampling noise of each other) and ``sparse``
(spread 2.0: most neighbours far apart), or any spread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.stats.rank_intervals import (
    linear_aggregate_replicates,
    naive_rank_intervals,
    rank_intervals_from_replicates,
)
from flasheval.stats.ranking import competition_ranks

__all__ = ["SPREADS", "IntervalCoverage", "known_truth_pool", "simulate_interval_coverage"]

SPREADS: dict[str, float] = {"dense": 0.05, "sparse": 2.0}
"""Ability spread (standard deviation) of the named pool kinds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IntervalCoverage:
    """Coverage and width of three kinds of rank interval over ``n_pools`` simulated pools."""

    n_pools: int
    n_models: int
    simultaneous: float
    """Share of pools where the simultaneous intervals cover EVERY model's true rank."""
    differences: float
    """Share of pools where EVERY pairwise difference of aggregates lies within ``c (s_i + s_j)`` of its true value:
    the event the rank intervals rest on, which holds at the nominal level (the rank intervals cover more often:
    a bound that misses by the wrong sign's side only breaks them)."""
    per_model: float
    """Share of (pool, model) where the per-model interval covers that model's true rank."""
    naive: float
    """Share of pools where the naive bootstrap's percentile intervals cover every true rank."""
    naive_per_model: float
    """Share of (pool, model) covered by the naive interval."""
    width_simultaneous: float
    """Mean number of ranks an interval spans (``hi - lo + 1``)."""
    width_per_model: float
    width_naive: float
    groups: float
    """Mean number of groups (simultaneous intervals)."""

    def standard_error(self, share: float) -> float:
        """Binomial standard error of a share over the pools."""
        return float(np.sqrt(max(share * (1 - share), 1e-12) / self.n_pools))


def known_truth_pool(n_models: int, sizes: Sequence[int], *, spread: float, rng: np.random.Generator,
                     population: int = 4000) -> tuple[list[np.ndarray], np.ndarray]:
    """Per dataset ``(n_models, n_d)`` 0/1 scores and the ``(n_models,)`` true mean-over-datasets aggregate.

    Examples
    --------
    >>> scores, truth = known_truth_pool(4, [30, 20], spread=1.0, rng=np.random.default_rng(0))
    >>> [s.shape for s in scores], truth.shape, bool(((truth > 0) & (truth < 1)).all())
    ([(4, 30), (4, 20)], (4,), True)
    """
    ability = rng.normal(0.0, spread, size=n_models)
    scores, truth = [], np.zeros(n_models)
    for n in sizes:
        difficulty = rng.normal(rng.normal(0.0, 0.5), 1.5, size=population)
        discrimination = rng.lognormal(0.0, 0.4, size=population)
        p = 1.0 / (1.0 + np.exp(-discrimination * (ability[:, None] - difficulty[None, :])))
        truth += p.mean(axis=1) / len(sizes)
        drawn = p[:, rng.integers(0, population, size=n)]
        scores.append((rng.random(drawn.shape) < drawn).astype(np.float64))
    return scores, truth


def simulate_interval_coverage(n_pools: int, *, n_models: int, sizes: Sequence[int], spread: float,
                               confidence_level: float = 0.95, n_resamples: int = 500, per_model: bool = True,
                               rng: int | np.random.Generator | None = None) -> IntervalCoverage:
    """Simulate ``n_pools`` pools (:func:`known_truth_pool`) and measure the three intervals' coverage and width.

    ``per_model=False`` skips the per-model intervals (their figures are then NaN).

    Examples
    --------
    >>> cov = simulate_interval_coverage(3, n_models=5, sizes=[200], spread=1.0, n_resamples=200, rng=0)
    >>> cov.n_pools, 0.0 <= cov.simultaneous <= 1.0, cov.width_per_model <= cov.width_simultaneous
    (3, True, True)
    """
    gen = np.random.default_rng(rng)
    weights = [1.0 / len(sizes)] * len(sizes)
    hits = {"sim": 0, "naive": 0, "diff": 0}
    own_hits = {"per": 0, "naive": 0}
    widths = {"sim": 0.0, "per": 0.0, "naive": 0.0}
    groups = 0
    for _ in range(n_pools):
        scores, truth = known_truth_pool(n_models, sizes, spread=spread, rng=gen)
        true_rank = competition_ranks(truth)
        observed, replicates = linear_aggregate_replicates(scores, weights, n_resamples=n_resamples, rng=gen)
        sim = rank_intervals_from_replicates(observed, replicates, confidence_level=confidence_level)
        own = rank_intervals_from_replicates(observed, replicates, confidence_level=confidence_level,
                                             simultaneous=False) if per_model else sim
        naive_lo, naive_hi = naive_rank_intervals(observed, replicates, confidence_level=confidence_level)
        hits["sim"] += bool(np.all((sim.lo <= true_rank) & (true_rank <= sim.hi)))
        error, bound = observed - truth, sim.critical * sim.sd  # all |e_i - e_j| <= c (s_i + s_j) at once, in O(n)
        hits["diff"] += bool(np.max(error - bound) <= np.min(error + bound))
        naive_in = (naive_lo <= true_rank) & (true_rank <= naive_hi)
        hits["naive"] += bool(np.all(naive_in))
        own_hits["per"] += int(np.sum((own.lo <= true_rank) & (true_rank <= own.hi)))
        own_hits["naive"] += int(np.sum(naive_in))
        widths["sim"] += float(np.mean(sim.hi - sim.lo + 1))
        widths["per"] += float(np.mean(own.hi - own.lo + 1))
        widths["naive"] += float(np.mean(naive_hi - naive_lo + 1))
        groups += len(sim.groups)
    cells = n_pools * n_models
    skipped = float("nan") if not per_model else 1.0
    return IntervalCoverage(n_pools=n_pools, n_models=n_models, simultaneous=hits["sim"] / n_pools,
                            differences=hits["diff"] / n_pools,
                            per_model=skipped * own_hits["per"] / cells, naive=hits["naive"] / n_pools,
                            naive_per_model=own_hits["naive"] / cells, width_simultaneous=widths["sim"] / n_pools,
                            width_per_model=skipped * widths["per"] / n_pools, width_naive=widths["naive"] / n_pools,
                            groups=groups / n_pools)
