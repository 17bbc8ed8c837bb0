"""Rank intervals for every model of a leaderboard, from paired bootstrap replicates of their aggregates.

The estimand is each model's rank by its TRUE aggregate, the one an unlimited supply of examples from
each dataset's population would give; the leaderboard's examples are one draw of them. One bootstrap
replicate resamples, within each dataset, its examples with replacement, the SAME indices for every
model (paired: example difficulty cancels in every comparison), and recomputes every model's aggregate.

The method: simultaneous comparisons of all pairs, then ranks
-----------------------------------------------------------------
With ``v_i`` the observed aggregate of model ``i`` (oriented so that higher is better), ``Z_ri`` its
replicate ``r`` minus ``v_i`` and ``s_i`` its bootstrap standard deviation, the statistic of replicate
``r`` is

    T_r = max over ordered pairs i != j of (Z_ri - Z_rj) / (s_i + s_j)

and ``c`` is its ``confidence_level`` quantile. Model ``j`` is *significantly better* than ``i`` when
``v_j - v_i > c (s_i + s_j)``, i.e. when the *score intervals* ``v +- c s`` of the two do not overlap.
When every pairwise difference lies within ``c (s_i + s_j)`` of its truth (probability
``confidence_level``, to bootstrap accuracy), every significant difference has the right sign, so the
true rank of every model lies in

    [1 + #models significantly better,  n - #models significantly worse]

for ALL models at once: Tukey's all-pairs comparisons turned into rank intervals, the pairwise route
of Al Mohamad, van Zwet, Solari & Goeman ("Simultaneous confidence sets for ranks using the partitioning
principle", arXiv:1708.02729; Biometrics 2022), with the critical value from the paired bootstrap.
The denominator ``s_i + s_j`` (not the standard error of the difference) is what makes it fast: the event
``T_r > c`` is ``max_i (Z_ri - c s_i) > min_j (Z_rj + c s_j)``, checked in ``O(n)`` per replicate, so
``T_r`` is found by bisection, vectorised over replicates, in ``O(n_resamples x n_models)`` time and
memory; no ``n x n`` array is ever formed. Nothing is lost to pairing: ``c`` is calibrated on the joint
law of all the paired differences, so when models' scores are correlated (shared example difficulty)
``c`` shrinks in proportion. Only pairs whose correlation differs from the others' are tested with a
little more or less than their own standard error would give.

Per-model intervals (``simultaneous=False``): model ``i`` gets its own constant ``c_i``, the
``confidence_level`` quantile of ``max over j of |Z_ri - Z_rj| / (s_i + s_j)``, the pairs of ``i`` only;
its interval covers its own rank with probability ``confidence_level``, but not all at once. ``c_i`` is
found on a grid of ``_GRID`` values in ``[0, c]`` (rounded UP to the grid: conservative).

Groups
------
The point order (best first) is cut after position ``k`` when every model above has an interval
ending at or above rank ``k`` (``hi <= k``) and every model below one starting at ``k + 1`` or lower
(``lo >= k + 1``): then, at the stated confidence, the ``k`` models above are exactly the true top ``k``
as a set. The *groups* are the pieces between cuts: each is the smallest block of consecutive models
whose ranks can be told apart from the rest but not among themselves; a group of one is a model whose
rank is exact.

The naive bootstrap of ranks (:func:`naive_rank_intervals`: the percentile interval of each model's
rank over the replicates) is kept for comparison only: it is centred on the observed order, so it
under-covers where models are close (``benchmarks/rank_intervals.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.stats.bootstrap import percentile_interval
from flasheval.stats.ranking import competition_ranks
from flasheval.stats.resampling import resample_counts

__all__ = ["IntervalSet", "linear_aggregate_replicates", "rank_intervals_from_replicates", "groups_from_intervals",
           "naive_rank_intervals", "max_statistic"]

_BISECTIONS = 26  # halvings of [0, upper]: relative precision 1.5e-8 on each replicate's statistic
_GRID = 100       # grid points of the per-model constants in [0, c]
_DIRECT = 32       # up to this many models, the statistic is taken over every pair directly
_BLOCK = 2_000_000  # elements of a temporary array (16 MB of float64)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class IntervalSet:
    """Rank intervals of ``n`` models, arrays in the caller's model order (rank 1 = best)."""

    values: np.ndarray
    """Observed aggregate of each model, ``(n,)``."""
    ranks: np.ndarray
    """Competition rank of each model on the observed values."""
    lo: np.ndarray
    """First rank of each model's interval."""
    hi: np.ndarray
    """Last rank of each model's interval."""
    sd: np.ndarray
    """Bootstrap standard deviation of each aggregate."""
    critical: np.ndarray
    """The constant ``c`` of each model (all equal when simultaneous)."""
    order: np.ndarray
    """Model indices in point order (best first; ties by index)."""
    groups: tuple[tuple[int, ...], ...]
    """Model indices of each group, in point order."""
    n_separable_adjacent: int
    """Pairs of neighbours in the point order that are significantly different."""
    confidence_level: float
    simultaneous: bool


def linear_aggregate_replicates(scores: Sequence[np.ndarray], weights: Sequence[float], *, offset: float = 0.0,
                                n_resamples: int = 1000, rng: int | np.random.Generator | None = None
                                ) -> tuple[np.ndarray, np.ndarray]:
    """Observed and paired bootstrap replicates of ``offset + sum_d weights[d] * (dataset d's mean score)``.

    Parameters
    ----------
    scores
        Per dataset, ``(n_models, n_d)`` per-example scores, the same rows in every dataset.
    weights
        One weight per dataset (``mean``: ``1 / n_datasets``; ``centered``: ``1 / (n_datasets (1 - baseline))``).
    offset
        Added to every value (``centered``: minus the weighted baselines); it cancels in every comparison.
    n_resamples, rng
        Replicates, and the seed or generator (each dataset gets its own child stream, as in
        :func:`flasheval.stats.bootstrap.bootstrap_dataset_means`).

    Returns
    -------
    observed : numpy.ndarray
        ``(n_models,)``.
    replicates : numpy.ndarray
        ``(n_resamples, n_models)``: memory ``8 n_resamples n_models`` bytes, never per dataset.

    Examples
    --------
    >>> s = [np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]]), np.array([[1.0, 0.0], [1.0, 1.0]])]
    >>> obs, rep = linear_aggregate_replicates(s, [0.5, 0.5], n_resamples=4, rng=0)
    >>> obs.round(4).tolist(), rep.shape
    ([0.5833, 0.6667], (4, 2))
    """
    if len(scores) != len(weights) or not scores:
        raise ValueError("scores and weights need one entry per dataset (at least one)")
    if n_resamples < 2:
        raise ValueError(f"n_resamples must be >= 2, got {n_resamples}")
    streams = np.random.default_rng(rng).spawn(len(scores))
    n_models = np.asarray(scores[0]).shape[0]
    observed = np.full(n_models, float(offset))
    replicates = np.full((n_resamples, n_models), float(offset))
    for d, (s, w, stream) in enumerate(zip(scores, weights, streams)):
        s = np.asarray(s)
        if s.ndim != 2 or s.shape[0] != n_models or s.shape[1] < 1:
            raise ValueError(f"dataset {d}: scores must be (n_models={n_models}, n_d >= 1), got {s.shape}")
        n = s.shape[1]
        observed += w * s.mean(axis=1)
        counts = resample_counts(n, n_resamples, stream)
        # float32 products: exact for 0/1 scores (n < 2**24), ~1e-7 relative otherwise (bootstrap.py)
        replicates += (w / n) * (counts @ s.T.astype(np.float32)).astype(np.float64)
    return observed, replicates


def max_statistic(deviations: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``T_r = max over i != j of (Z_ri - Z_rj) / (s_i + s_j)`` for every replicate (bisection, ``O(R n)``).

    ``deviations`` is ``(R, n)`` (replicate minus observed), ``sd`` the ``(n,)`` standard deviations. A
    pair with ``s_i + s_j = 0`` counts as 0 (both models are constant over the replicates).

    Examples
    --------
    >>> z = np.array([[0.3, -0.1, 0.0]])
    >>> round(float(max_statistic(z, np.array([0.1, 0.1, 0.2]))[0]), 6)  # (0.3 - (-0.1)) / 0.2
    2.0
    """
    z = np.asarray(deviations, dtype=np.float64)
    s = np.asarray(sd, dtype=np.float64)
    if z.shape[1] <= _DIRECT:  # few models: every pair directly, R n^2 (cheaper than the bisection's passes)
        total = s[:, None] + s[None, :]
        gaps = z[:, :, None] - z[:, None, :]
        return np.where(total > 0, gaps / np.where(total > 0, total, 1.0), 0.0).max(axis=(1, 2))
    constant = s <= 0
    ratio = np.where(constant, 0.0, np.abs(z) / np.where(constant, 1.0, s))
    low = np.zeros(z.shape[0])
    high = ratio.max(axis=1)  # the mediant bound: no pair's ratio exceeds the larger single one
    for _ in range(_BISECTIONS):
        mid = 0.5 * (low + high)
        crossing = (z - mid[:, None] * s).max(axis=1) > (z + mid[:, None] * s).min(axis=1)
        low = np.where(crossing, mid, low)
        high = np.where(crossing, high, mid)
    return high


def _per_model_critical(z: np.ndarray, s: np.ndarray, upper: float, confidence_level: float) -> np.ndarray:
    """Each model's ``c_i``: the smallest grid value in ``[0, upper]`` at which at most ``1 - level`` of the
    replicates have ``|Z_ri - Z_rj| > c_i (s_i + s_j)`` for some ``j`` (monotone in ``c``: binary search)."""
    grid = np.linspace(0.0, upper, _GRID + 1)
    below = np.empty((z.shape[0], grid.size))  # [r, k]: min_j Z_rj + c_k s_j
    above = np.empty((z.shape[0], grid.size))  # [r, k]: max_j Z_rj - c_k s_j
    step = max(1, _BLOCK // z.size)
    for a in range(0, grid.size, step):
        shifted = grid[None, a:a + step, None] * s[None, None, :]  # (1, k, n)
        below[:, a:a + step] = (z[:, None, :] + shifted).min(axis=2)
        above[:, a:a + step] = (z[:, None, :] - shifted).max(axis=2)
    n_resamples = z.shape[0]  # as many exceedances as numpy's "higher" quantile leaves: the same rule as c's
    allowed = n_resamples - 1 - int(np.ceil(confidence_level * (n_resamples - 1)))
    lo_k = np.zeros(z.shape[1], dtype=np.int64)
    hi_k = np.full(z.shape[1], _GRID, dtype=np.int64)  # the grid's top is the simultaneous c: always enough
    rows = np.arange(z.shape[0])[:, None]
    while np.any(lo_k < hi_k):
        k = (lo_k + hi_k) // 2
        c = grid[k]
        exceed = (z - c * s > below[rows, k[None, :]]) | (z + c * s < above[rows, k[None, :]])
        ok = exceed.sum(axis=0) <= allowed
        hi_k = np.where(ok, k, hi_k)
        lo_k = np.where(ok, lo_k, k + 1)
    return grid[hi_k]


def rank_intervals_from_replicates(values: np.ndarray, replicates: np.ndarray, *, confidence_level: float = 0.95,
                                   simultaneous: bool = True, higher_is_better: bool = True) -> IntervalSet:
    """Rank interval of every model from its observed aggregate and paired replicates (see the module docstring).

    Parameters
    ----------
    values
        ``(n,)`` observed aggregates.
    replicates
        ``(R, n)`` bootstrap replicates, resampled on the same examples for every model.
    confidence_level
        Joint level over all models (``simultaneous``), else each model's own.
    higher_is_better
        Direction of the aggregate.

    Examples
    --------
    >>> obs, rep = linear_aggregate_replicates([np.array([[1.0] * 40 + [0.0] * 10, [1.0] * 20 + [0.0] * 30,
    ...                                                    [1.0] * 21 + [0.0] * 29])], [1.0], n_resamples=500, rng=0)
    >>> res = rank_intervals_from_replicates(obs, rep)
    >>> list(zip(res.lo.tolist(), res.hi.tolist())), res.groups
    ([(1, 1), (2, 3), (2, 3)], ((0,), (2, 1)))
    """
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level}")
    v = np.asarray(values, dtype=np.float64)
    reps = np.asarray(replicates, dtype=np.float64)
    if v.ndim != 1 or v.size < 2 or reps.ndim != 2 or reps.shape[1] != v.size or reps.shape[0] < 2:
        raise ValueError(f"values must be (n >= 2,) and replicates (R >= 2, n), got {v.shape} and {reps.shape}")
    sign = 1.0 if higher_is_better else -1.0
    v, reps = sign * v, sign * reps
    z = reps - v
    s = reps.std(axis=0)
    stat = max_statistic(z, s)
    c_all = float(np.quantile(stat, confidence_level, method="higher"))
    critical = np.full(v.size, c_all) if simultaneous else _per_model_critical(z, s, c_all, confidence_level)
    lower, upper = v - critical * s, v + critical * s
    n = v.size
    if simultaneous:  # score intervals that do not overlap: counted in sorted ends, O(n log n)
        n_better = n - np.searchsorted(np.sort(lower), upper, side="right")
        n_worse = np.searchsorted(np.sort(upper), lower, side="left")
    else:  # model i's own constant on every pair of i: n x n comparisons, in blocks of rows
        n_better, n_worse = _pair_counts(v, s, critical)
    ranks = competition_ranks(v)
    order = np.lexsort((np.arange(n), ranks))
    lo, hi = 1 + n_better, n - n_worse
    pair_c = np.maximum(critical[order[:-1]], critical[order[1:]])
    gaps = v[order[:-1]] - v[order[1:]]
    separable = int(np.sum(gaps > pair_c * (s[order[:-1]] + s[order[1:]])))
    return IntervalSet(values=sign * v, ranks=ranks, lo=lo.astype(np.int64), hi=hi.astype(np.int64), sd=s,
                       critical=critical, order=order, groups=groups_from_intervals(order, lo, hi),
                       n_separable_adjacent=separable, confidence_level=confidence_level, simultaneous=simultaneous)


def _pair_counts(v: np.ndarray, s: np.ndarray, critical: np.ndarray, block: int = 256
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per model ``i``, how many ``j`` have ``v_j - v_i > c_i (s_i + s_j)`` and how many ``v_i - v_j > c_i (s_i + s_j)``."""
    better, worse = np.empty(v.size, dtype=np.int64), np.empty(v.size, dtype=np.int64)
    for a in range(0, v.size, block):
        rows = slice(a, a + block)
        gap = v[None, :] - v[rows, None]  # [i, j] = v_j - v_i
        bound = critical[rows, None] * (s[rows, None] + s[None, :])
        better[rows], worse[rows] = (gap > bound).sum(axis=1), (-gap > bound).sum(axis=1)
    return better, worse


def groups_from_intervals(order: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Cut the point order after position ``k`` when every model above has ``hi <= k`` and every model below
    ``lo >= k + 1``; the pieces are the groups (module docstring).

    Examples
    --------
    >>> groups_from_intervals(np.array([0, 1, 2, 3]), np.array([1, 2, 2, 4]), np.array([1, 3, 3, 4]))
    ((0,), (1, 2), (3,))
    """
    order = np.asarray(order)
    lo_sorted, hi_sorted = np.asarray(lo)[order], np.asarray(hi)[order]
    k = np.arange(1, order.size)
    cut = (np.maximum.accumulate(hi_sorted)[:-1] <= k) & (np.minimum.accumulate(lo_sorted[::-1])[::-1][1:] >= k + 1)
    bounds = [0, *(k[cut].tolist()), order.size]
    return tuple(tuple(int(i) for i in order[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))


def naive_rank_intervals(values: np.ndarray, replicates: np.ndarray, *, confidence_level: float = 0.95,
                         higher_is_better: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The naive bootstrap of ranks, for comparison: each model's percentile interval of its competition rank
    over the replicates, widened to contain its observed rank. Returns ``(lo, hi)``.

    Examples
    --------
    >>> obs = np.array([0.9, 0.5, 0.1])
    >>> naive_rank_intervals(obs, np.broadcast_to(obs, (10, 3)))
    (array([1, 2, 3]), array([1, 2, 3]))
    """
    point = competition_ranks(np.asarray(values, dtype=np.float64), higher_is_better=higher_is_better)
    reps = competition_ranks(np.asarray(replicates, dtype=np.float64), higher_is_better=higher_is_better)
    ends = np.array([percentile_interval(reps[:, i].astype(np.float64), confidence_level)
                     for i in range(point.size)])
    return np.minimum(ends[:, 0].astype(np.int64), point), np.maximum(ends[:, 1].astype(np.int64), point)
