"""Fluid Benchmarking (Hofmann et al., 2025) as a baseline: IRT ability with adaptive item selection.

Per dataset, a 2PL model is fitted on the reference pool's per-example results
(:func:`flasheval.stats.irt.fit_2pl`). The new model is then tested adaptively: starting from
the prior ``theta ~ N(0, 1)``, each next example is the unused one with the largest Fisher
information ``a^2 p (1 - p)`` at the current ability estimate (EAP on a grid), and the
posterior is updated with the model's score on it. After ``n_d`` examples (the budget given,
in the backtest the same per-dataset counts flasheval's placement used: equal cost), the
dataset's full-data accuracy is estimated as the posterior mean of the 2PL accuracy
``mean_i sigmoid(a_i (theta - b_i))``, and the rank among the pool's exact full-data
aggregates follows. The interval is the percentile interval of the rank over posterior draws
of the abilities (independent across datasets): a Bayesian interval, so its backtest coverage
is reported like the bootstrap's.

Differences from the paper: a joint MAP fit instead of marginal maximum likelihood; EAP rather
than MAP for the running ability; one ability per dataset, mapped to accuracy so that the
datasets combine under flasheval's aggregate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import log_expit

from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.bootstrap import RankDistribution, rank_from_replicates
from flasheval.stats.irt import IRTFit, fit_2pl, probabilities

__all__ = ["ABILITY_GRID", "AdaptiveTest", "adaptive_test", "pool_fits", "fluid_rank"]

ABILITY_GRID = np.linspace(-6.0, 6.0, 241)
"""Abilities on which the posterior is kept (prior ``N(0, 1)``)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class AdaptiveTest:
    """Outcome of an adaptive test on one dataset."""

    items: np.ndarray
    """Examples administered, in order (column indices)."""
    posterior: np.ndarray
    """Posterior weights of the ability on :data:`ABILITY_GRID`."""
    accuracy_on_grid: np.ndarray
    """The 2PL full-data accuracy at each grid ability."""

    @property
    def accuracy(self) -> float:
        """Posterior mean of the full-data accuracy."""
        return float(self.posterior @ self.accuracy_on_grid)


def adaptive_test(scores: np.ndarray, fit: IRTFit, n_items: int, *, grid: np.ndarray = ABILITY_GRID) -> AdaptiveTest:
    """Administer ``n_items`` examples by maximum Fisher information at the running EAP ability.

    ``scores`` holds the new model's score on every example (the test reads only the ones it
    administers). Item orders by information are precomputed per grid ability, so each step is
    a pointer walk.

    Examples
    --------
    >>> fit = IRTFit(discrimination=np.array([1.0, 3.0, 1.0]), difficulty=np.array([3.0, 0.1, -3.0]),
    ...              ability=np.zeros(2), converged=True, n_iter=1)
    >>> adaptive_test(np.array([0.0, 1.0, 1.0]), fit, 1).items.tolist()  # most informative at theta = 0
    [1]
    """
    a, b = fit.discrimination, fit.difficulty
    n_items = min(n_items, len(a))
    p = probabilities(grid, a, b)
    order = np.argsort(-(a * a) * p * (1.0 - p), axis=1, kind="stable")
    z = a[None, :] * (grid[:, None] - b[None, :])
    log_p, log_q = log_expit(z), log_expit(-z)
    pointer = np.zeros(len(grid), dtype=np.int64)
    used = np.zeros(len(a), dtype=bool)
    log_post = -0.5 * grid**2
    weights = np.exp(log_post - log_post.max())
    weights /= weights.sum()
    items = np.empty(n_items, dtype=np.int64)
    for t in range(n_items):
        g = int(np.argmin(np.abs(grid - weights @ grid)))
        while used[order[g, pointer[g]]]:
            pointer[g] += 1
        i = int(order[g, pointer[g]])
        used[i], items[t] = True, i
        log_post = log_post + scores[i] * log_p[:, i] + (1.0 - scores[i]) * log_q[:, i]
        weights = np.exp(log_post - log_post.max())
        weights /= weights.sum()
    return AdaptiveTest(items=items, posterior=weights, accuracy_on_grid=p.mean(axis=1))


def pool_fits(reference: ReferenceLeaderboard, held_out: str | None = None,
              full_fits: Sequence[IRTFit] | None = None) -> list[IRTFit]:
    """Per dataset, the 2PL fit on the pool without ``held_out`` (warm-started from ``full_fits``)."""
    keep = np.array([m != held_out for m in reference.model_ids])
    out = []
    for d, s in enumerate(reference.scores):
        start = None if full_fits is None else replace(full_fits[d], ability=full_fits[d].ability[keep])
        out.append(fit_2pl(s[keep], tol=1e-3, start=start))
    return out


def fluid_rank(pool: ReferenceLeaderboard, new_scores: Sequence[np.ndarray], n_per_dataset: Sequence[int],
               fits: Sequence[IRTFit], *, aggregate: str | None = None, confidence_level: float = 0.95,
               n_resamples: int = 1000, rng: int | np.random.Generator | None = None) -> RankDistribution:
    """Rank of a new model among ``pool`` after an adaptive test of ``n_per_dataset[d]`` examples per dataset.

    ``new_scores[d]`` is the new model's score on every example of dataset ``d`` (replay);
    ``fits[d]`` the 2PL fit on the pool. Returns the rank distribution over posterior draws.
    """
    gen = np.random.default_rng(rng)
    tests = [adaptive_test(np.asarray(y, dtype=np.float64), f, n) for y, f, n in zip(new_scores, fits, n_per_dataset)]
    full = pool.dataset_means()
    observed = np.vstack([[t.accuracy for t in tests], full])
    draws = np.stack([t.accuracy_on_grid[gen.choice(len(t.posterior), size=n_resamples, p=t.posterior)]
                      for t in tests], axis=1)
    replicates = np.concatenate([draws[:, None, :], np.broadcast_to(full, (n_resamples, *full.shape))], axis=1)
    return rank_from_replicates(observed, replicates, confidence_level=confidence_level,
                                **pool.aggregate_options(aggregate))
