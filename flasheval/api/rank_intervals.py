"""``flasheval.rank_intervals``: every reference model's rank interval and the groups the reference cannot tell apart.

The one path behind ``flasheval reference show NAME --intervals``: the values are checked here, the
reference is resolved, and :func:`flasheval.reference.intervals.reference_rank_intervals` computes (the
statistics: :mod:`flasheval.stats.rank_intervals`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flasheval.api.resolve import check_pool_options, resolve_reference
from flasheval.checks import check_confidence_level, check_flag, check_n_resamples, check_seed
from flasheval.reference import ReferenceLeaderboard
from flasheval.reference.intervals import RankIntervals, reference_rank_intervals

__all__ = ["rank_intervals", "RankIntervals"]


def _check(confidence_level: Any, n_resamples: Any, seed: Any, simultaneous: Any, aggregate: Any,
           missing: Any) -> tuple[float, int, Any]:
    """Every argument but the reference checked (one line naming the option), before the reference is read: the
    level, resamples (100 to :data:`~flasheval.checks.MAX_RESAMPLES`), seed or Generator, the aggregate and
    missing-data policy. Returns the level, resamples and seed."""
    level = check_confidence_level(confidence_level, field="--level")
    n_resamples = check_n_resamples(n_resamples, field="--n-resamples")
    seed = check_seed(seed, generator=True)
    check_flag(simultaneous, field="simultaneous")
    check_pool_options(aggregate, missing)
    return level, n_resamples, seed


def rank_intervals(
    reference: str | Path | ReferenceLeaderboard = "helm_lite",
    *,
    confidence_level: float = 0.95,
    simultaneous: bool = True,
    aggregate: str | None = None,
    missing: str = "complete-models",
    n_resamples: int = 1000,
    seed: int | np.random.Generator | None = 0,
) -> RankIntervals:
    """Rank interval of every model of ``reference`` under its aggregate, and the groups it cannot tell apart.

    Within each dataset the examples are resampled with replacement, the same examples for every model
    (paired); all pairwise differences of the aggregate get simultaneous bounds (one constant ``c`` on
    ``sd_i + sd_j``, calibrated on the bootstrap law of the largest such ratio), and a model's interval
    runs from 1 + the number of models significantly better to ``n`` - the number significantly worse.
    Method, guarantees and cost: ``docs/leaderboards.md``.

    Parameters
    ----------
    reference
        Name, folder or :class:`~flasheval.reference.ReferenceLeaderboard`.
    confidence_level
        In ``[0.5, 1)``: the probability that every interval (``simultaneous``) or each one holds.
    simultaneous
        ``True`` (default): all models' intervals at once. ``False``: each model's own, from its pairs only
        (narrower; about ``1 - confidence_level`` of them miss).
    aggregate
        ``mean`` or ``centered`` (default: the reference's); ``win_rate`` is refused (it depends on the pool).
    missing
        The missing-data policy the reference is loaded with.
    n_resamples, seed
        Bootstrap replicates (>= 100) and the seed or ``numpy.random.Generator`` (default 0: the same
        intervals on every call).

    Returns
    -------
    RankIntervals
        Every model in point order with its rank, interval, score interval and group; the groups; how many
        neighbours are separable; :attr:`~flasheval.reference.intervals.RankIntervals.widest`.

    Examples
    --------
    >>> import flasheval
    >>> res = flasheval.rank_intervals("helm_lite", n_resamples=200)
    >>> res.n_models, res.models[0].rank, res.models[0].interval[0]
    (69, 1, 1)
    """
    level, n_resamples, seed = _check(confidence_level, n_resamples, seed, simultaneous, aggregate, missing)
    ref = resolve_reference(reference, missing=missing)
    return reference_rank_intervals(ref, aggregate=aggregate, confidence_level=level,
                                    simultaneous=simultaneous, n_resamples=n_resamples, rng=seed)
