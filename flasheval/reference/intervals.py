"""Every reference model's rank interval, and the groups of models the reference cannot tell apart.

The statistics are :mod:`flasheval.stats.rank_intervals` (paired bootstrap of examples within each
dataset, simultaneous pairwise comparisons, then ranks); this module feeds it a reference's score
matrices under the reference's aggregate and names the results by model.

Aggregates: ``mean`` and ``centered`` are weighted sums of each model's OWN per-dataset means, so every
model's value is resampled on the same examples and compared pair by pair. ``win_rate`` is refused: a
model's win rate depends on every other model's scores, so a pairwise difference of win rates is not a
comparison of the two models alone (and ranking the pool by it is what the intervals would be about).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flasheval.errors import InputError
from flasheval.reference.leaderboard import ReferenceLeaderboard
from flasheval.stats.rank_intervals import linear_aggregate_replicates, rank_intervals_from_replicates
from flasheval.stats.ranking import check_aggregate, check_random_baselines

__all__ = ["ModelInterval", "RankIntervals", "reference_rank_intervals", "aggregate_weights", "interval_neighbours",
           "INTERVAL_AGGREGATES", "MIN_INTERVAL_EXAMPLES", "check_interval_examples"]

INTERVAL_AGGREGATES: tuple[str, ...] = ("mean", "centered")
"""Aggregates rank intervals are computed for (``win_rate`` is pool-dependent: refused)."""

MIN_INTERVAL_EXAMPLES = 10
"""Fewest examples a dataset needs for rank intervals. The bootstrap resamples each dataset's examples: with one
example it has no variance at all (every interval would be an exact rank), and with a handful its spread
underestimates the population's badly (the percentile bootstrap's coverage needs the data to stand in for the
population); below ten the intervals would claim a precision the data do not have."""


def check_interval_examples(reference: ReferenceLeaderboard, *, minimum: int = MIN_INTERVAL_EXAMPLES) -> None:
    """Refuse, in one line naming the dataset and its count, a reference with a dataset of fewer than ``minimum``
    examples (:data:`MIN_INTERVAL_EXAMPLES`)."""
    for name, ids in zip(reference.dataset_names, reference.example_ids):
        if len(ids) < minimum:
            raise InputError(f"dataset {name!r} has {len(ids)} example{'s' if len(ids) != 1 else ''}; rank "
                             f"intervals need at least {minimum} per dataset (a bootstrap of fewer has too little "
                             "variance: its intervals would be too narrow, one example gives exact ranks)",
                             path=reference.path, field="examples")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelInterval:
    """One model's row: its point rank, rank interval and aggregate."""

    model_id: str
    rank: int
    """Competition rank on the full data (1 = best)."""
    interval: tuple[int, int]
    """Ranks the model's true rank can take at the stated confidence."""
    value: float
    """The aggregate on the full data."""
    score_interval: tuple[float, float]
    """``value +- c * sd``: two models are told apart exactly when these do not overlap."""
    group: int
    """1-based index of the model's group (groups in point order)."""

    @property
    def width(self) -> int:
        """Ranks the interval spans minus one (0: the rank is exact)."""
        return self.interval[1] - self.interval[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class RankIntervals:
    """Rank intervals of every model of a reference (what :func:`flasheval.rank_intervals` returns)."""

    reference: str
    aggregate: str
    confidence_level: float
    simultaneous: bool
    """``True``: all intervals hold at once; ``False``: each model's at ``confidence_level`` on its own."""
    n_resamples: int
    seed: int | None
    """The bootstrap seed (``None`` when a generator was passed)."""
    models: tuple[ModelInterval, ...]
    """Every model, in point order (best first)."""
    groups: tuple[tuple[str, ...], ...]
    """Model ids of each group, in point order: the smallest blocks of consecutive models whose ranks lie
    inside their own block (:func:`flasheval.stats.rank_intervals.groups_from_intervals`)."""
    n_separable_adjacent: int
    """Neighbours in the point order that are significantly different (of ``n_models - 1`` pairs)."""

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    @property
    def widest(self) -> ModelInterval:
        """The model with the widest interval (the first in point order among equals)."""
        return max(self.models, key=lambda m: (m.width, -m.rank))

    def row(self, model_id: str) -> ModelInterval:
        """The row of ``model_id``; :class:`KeyError` when it is not one of the models."""
        for m in self.models:
            if m.model_id == model_id:
                return m
        raise KeyError(model_id)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (plain types)."""
        return {"reference": self.reference, "aggregate": self.aggregate, "confidence_level": self.confidence_level,
                "simultaneous": self.simultaneous, "n_resamples": self.n_resamples, "seed": self.seed,
                "n_separable_adjacent": self.n_separable_adjacent, "n_groups": self.n_groups,
                "models": [{"model_id": m.model_id, "rank": m.rank, "interval": list(m.interval), "value": m.value,
                            "score_interval": list(m.score_interval), "group": m.group} for m in self.models],
                "groups": [list(g) for g in self.groups]}


def aggregate_weights(reference: ReferenceLeaderboard, kind: str) -> tuple[np.ndarray, float]:
    """Weights per dataset and the offset of a linear aggregate: ``value = offset + sum_d w_d * mean_d``.

    ``win_rate`` is refused in one line (module docstring).
    """
    check_aggregate(kind)
    n = len(reference.dataset_names)
    if kind == "mean":
        return np.full(n, 1.0 / n), 0.0
    if kind == "centered":
        reference.aggregate_options(kind)  # a missing baseline: one line naming the manifest
        base = check_random_baselines(reference.dataset_names, reference.manifest.random_baselines)
        return 1.0 / (n * (1.0 - base)), float(-np.sum(base / (1.0 - base)) / n)
    raise InputError("rank intervals need an aggregate of each model's own scores (mean or centered); win_rate "
                     "depends on the whole pool, so pairs cannot be compared alone", field="--aggregate",
                     allowed=INTERVAL_AGGREGATES)


def reference_rank_intervals(reference: ReferenceLeaderboard, *, aggregate: str | None = None,
                             confidence_level: float = 0.95, simultaneous: bool = True, n_resamples: int = 1000,
                             rng: int | np.random.Generator | None = 0) -> RankIntervals:
    """Rank intervals of every model of ``reference`` (values checked by :func:`flasheval.rank_intervals`).

    Examples
    --------
    >>> from flasheval.analysis.simulation import synthetic_reference
    >>> ref = synthetic_reference(6, [300, 300], rng=0, ability_spread=2.0)
    >>> res = reference_rank_intervals(ref, n_resamples=400)
    >>> [m.interval for m in res.models][:2], res.n_groups
    ([(1, 1), (2, 3)], 4)
    """
    kind = aggregate or reference.manifest.aggregate
    weights, offset = aggregate_weights(reference, kind)
    check_interval_examples(reference)
    higher = reference.ranking_higher_is_better(kind)
    observed, replicates = linear_aggregate_replicates(reference.scores, weights, offset=offset,
                                                       n_resamples=n_resamples, rng=rng)
    found = rank_intervals_from_replicates(observed, replicates, confidence_level=confidence_level,
                                           simultaneous=simultaneous, higher_is_better=higher)
    ids = reference.model_ids
    group_of = {i: g for g, members in enumerate(found.groups, start=1) for i in members}
    half = found.critical * found.sd
    rows = tuple(ModelInterval(model_id=ids[i], rank=int(found.ranks[i]), interval=(int(found.lo[i]), int(found.hi[i])),
                               value=float(found.values[i]),
                               score_interval=(float(found.values[i] - half[i]), float(found.values[i] + half[i])),
                               group=group_of[int(i)]) for i in found.order)
    return RankIntervals(reference=reference.name, aggregate=kind, confidence_level=confidence_level,
                         simultaneous=simultaneous, n_resamples=n_resamples,
                         seed=rng if isinstance(rng, int) else None, models=rows,
                         groups=tuple(tuple(ids[i] for i in g) for g in found.groups),
                         n_separable_adjacent=found.n_separable_adjacent)


def interval_neighbours(reference: ReferenceLeaderboard, interval: tuple[int, int], *,
                        aggregate: str | None = None) -> tuple[str, ...]:
    """The pool models a new model placed in rank ``interval`` (among ``n_models + 1``) cannot be told from.

    A new model at rank ``r`` stands below the pool's first ``r - 1`` models; its interval ``[lo, hi]`` leaves
    its order against the pool models at positions ``lo .. hi - 1`` of the full-data ranking open, and
    settles it against every other (none when ``lo == hi``).

    Examples
    --------
    >>> from flasheval.analysis.simulation import synthetic_reference
    >>> ref = synthetic_reference(5, [50], rng=0)
    >>> names = [r.model_id for r in ref.ranking()]
    >>> interval_neighbours(ref, (2, 4)) == tuple(names[1:3]), interval_neighbours(ref, (3, 3))
    (True, ())
    """
    lo, hi = interval
    ranking = reference.ranking(aggregate)
    return tuple(r.model_id for r in ranking[max(lo, 1) - 1:max(hi - 1, 0)])
