"""The window rule's misses at the stop, simulated on common Brownian paths (the calibration's inner loop).

:func:`stop_misses` walks every (true position, path) pair look by look until the rule stops it and counts
the stops whose rank interval misses the true rank; :func:`rank_function` ranks the estimates against the
pool's full-data aggregates in a few gathers whatever the pool's size. Most paths can never miss (their
every look covers every position, :func:`miss_looks`, a proof, not an estimate), so only the others are
walked, and each only up to its last look that could miss: the counts are exactly those of every path
walked to its stop, at a fraction of the cost (on a 4,000-model pool, about a tenth of the paths).
:mod:`flasheval.placement.calibration` searches the constant with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["stop_miss_rates", "stop_misses", "miss_looks", "rank_function"]


def stop_miss_rates(c: float, values: np.ndarray, se: np.ndarray, z: np.ndarray, fits: np.ndarray,
                    thetas: np.ndarray, *, rank: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Per true position, ``P(the rank interval at the stopping look misses the true rank)``.

    ``values``: the pool's full-data aggregates, higher is better; ``se``: each look's standard error;
    ``z``: ``(paths, looks)`` standardized paths; ``fits[lo, hi]``: whether the rule stops on ``[lo, hi]``
    (shape at least ``(n_pool + 2, n_pool + 2)``); ``thetas``: true aggregates. A path that never stops
    reaches the look where every example is scored, which cannot miss. ``rank``: ``rank_function(values)``,
    when the caller has it already.
    """
    return stop_misses(c, values, se, z, fits, thetas, rank=rank) / z.shape[0]


def stop_misses(c: float, values: np.ndarray, se: np.ndarray, z: np.ndarray, fits: np.ndarray,
                thetas: np.ndarray, *, rank: Callable[[np.ndarray], np.ndarray] | None = None,
                truths: np.ndarray | None = None, until: np.ndarray | None = None) -> np.ndarray:
    """:func:`stop_miss_rates` as counts of missing paths (``int64``, one per true position).

    ``truths``: ``(positions, k)`` true ranks to score each position's paths against (default: the
    rank of ``theta``, one column); the counts then have the same shape. Two true ranks at one
    position are the limits from above and below a pool model's value: the same paths, the same
    intervals, a true rank one apart.

    Only the paths that can miss are simulated, and each only up to the last look where it can
    (:func:`miss_looks`): the counts are exactly those of every path walked to its stop. ``until``:
    ``miss_looks`` of these paths for these positions (or for more positions), when the caller has it.
    """
    rank = rank_function(values) if rank is None else rank
    theta = np.asarray(thetas, dtype=np.float64)
    se = np.asarray(se, dtype=np.float64)
    by_look = np.ascontiguousarray(np.asarray(z, dtype=np.float64).T)  # one contiguous row of paths per look
    width = fits.shape[1]
    flat = np.ascontiguousarray(fits, dtype=bool).ravel()  # fits[lo, hi] == flat[lo * width + hi]
    true = rank(theta)[:, None] if truths is None else np.asarray(truths, dtype=np.int64)
    n_truths = true.shape[1]
    last = miss_looks(c, se, by_look, theta, rank, values, true) if until is None else np.asarray(until)
    kept = np.flatnonzero(last >= 0)
    # the (position, path) pairs not stopped yet that can still miss, and their position's value
    rows = np.repeat(np.arange(len(theta), dtype=np.intp), len(kept))
    cols = np.tile(kept, len(theta))
    at = theta[rows]
    misses = np.zeros((len(theta), n_truths), dtype=np.int64)
    for k in range(len(se)):
        if len(rows) == 0:
            break
        est = by_look[k][cols]  # the estimate theta + se_k z_k, computed in place (the same bits)
        est *= se[k]
        est += at
        half = c * se[k]
        lo = rank(est + half)
        est -= half
        hi = rank(est)
        cell = lo * width + hi
        stop = flat[cell]
        stopped = np.flatnonzero(stop)  # few pairs stop at one look: their misses are counted on them alone
        if len(stopped):
            where = rows[stopped]
            truth = true[where]
            missed = (truth < lo[stopped, None]) | (truth > hi[stopped, None])
            for j in range(n_truths):
                misses[:, j] += np.bincount(where[missed[:, j]], minlength=len(theta))
        going = np.flatnonzero(~stop & (last[cols] > k))  # past its last possible miss, a path adds nothing
        rows, cols, at = rows[going], cols[going], at[going]
    return misses[:, 0] if truths is None else misses


def miss_looks(c: float, se: np.ndarray, by_look: np.ndarray, thetas: np.ndarray,
               rank: Callable[[np.ndarray], np.ndarray], values: np.ndarray, truths: np.ndarray) -> np.ndarray:
    """Per path, the last look at which it can miss at any of ``thetas`` (``-1``: at none), proved, not estimated.

    At look ``k`` the interval ``[rank(T + c se_k), rank(T - c se_k)]`` with ``T = theta + se_k z_k`` holds
    every true rank between ``rank(theta)`` and ``1 + #(values >= theta)`` (both limits of a pool
    value, or the one rank of a point between values) whenever ``T + c se_k >= theta > T - c se_k``:
    ``rank`` counts the values above its argument, so it is non-increasing. In exact arithmetic that is
    ``|z_k| < c``. The computed ends carry four roundings, each at most ``eps / 2`` of its magnitude, in
    all at most ``2 eps (|theta| + se_k (|z_k| + c))``; a path with ``|z_k| <= c - slack_k``,
    ``slack_k = 4 eps (max |theta| + se_k (max |z_k| + c)) / se_k``, therefore covers at look ``k`` in
    floating point too, whatever ``theta``, and whether or not the rule stops there. A miss is counted only at
    the stopping look, so a path whose every look covers never misses, and one stopping after its last
    uncovered look does not either. Where ``truths`` leave that range (or ``se_k`` is 0 or not finite) every path
    is kept to the end. ``by_look``: ``(looks, paths)``.

    Examples
    --------
    >>> values = np.array([0.0, 1.0])  # the true position 0.0 is a pool value: true ranks 2 (above) and 3 (below)
    >>> by_look = np.array([[0.5, 2.5, 0.1], [1.0, 0.3, -2.2]])  # two looks of three paths
    >>> miss_looks(2.0, np.array([1.0, 0.5]), by_look, values[:1], rank_function(values), values,
    ...            np.array([[2, 3]])).tolist()  # never crosses; crosses at the first look; at the second
    [-1, 0, 1]
    """
    n_looks, n_paths = by_look.shape
    everything = np.full(n_paths, n_looks - 1, dtype=np.int64)
    if n_looks == 0 or len(thetas) == 0:
        return everything
    sorted_values = np.sort(np.asarray(values, dtype=np.float64).ravel())
    upper = 1 + len(sorted_values) - np.searchsorted(sorted_values, thetas, side="left")  # 1 + #(values >= theta)
    if not ((truths >= rank(thetas)[:, None]).all() and (truths <= upper[:, None]).all()):
        return everything
    eps = float(np.finfo(np.float64).eps)
    size = np.abs(by_look).max(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        slack = 4.0 * eps * (float(np.abs(thetas).max()) + se * (size + abs(c))) / se
    slack = np.where(np.isfinite(slack) & (se > 0), slack, np.inf)
    can = ~(np.abs(by_look) <= (c - slack)[:, None])  # NaN never proves a cover
    last = n_looks - 1 - np.argmax(can[::-1], axis=0)
    return np.where(can.any(axis=0), last, -1).astype(np.int64)


def rank_function(values: Sequence[float], *, bins_per_value: int = 16,
                  max_occupancy: int = 6) -> Callable[[np.ndarray], np.ndarray]:
    """``rank(x) = 1 + #(values > x)``, vectorised and exact: a bin table, ``searchsorted`` for crowded values.

    The distinct values' range is split into ``bins_per_value`` bins per distinct value. A query's bin
    ``b = floor((x - x0) / h)`` is a non-decreasing function of ``x`` in floating point, so every value in a
    higher bin is above ``x`` and every value in a lower bin below it: ``rank(x) = 1 + above[b] +`` the
    values of bin ``b`` above ``x``, compared exactly (ties count with their multiplicity). It costs a
    few gathers per query, whatever the pool's size; a binary search costs ``log2(n)`` dependent,
    cache-missing steps. Where some bin holds more than ``max_occupancy`` distinct values (a tight
    cluster), ``searchsorted`` serves instead.

    Examples
    --------
    >>> rank = rank_function([0.3, 0.9, 0.5])
    >>> rank(np.array([1.0, 0.9, 0.7, 0.5, 0.1, -5.0])).tolist()
    [1, 1, 2, 2, 4, 4]
    >>> rank_function([0.2, 0.2, 0.7])(np.array([0.1, 0.2, 0.5])).tolist()  # ties count twice
    [4, 2, 2]
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    distinct, counts = np.unique(v, return_counts=True)
    desc = -v[np.argsort(-v, kind="stable")]  # ascending negatives: rank(x) = 1 + searchsorted(desc, -x, "left")

    def by_search(x: np.ndarray) -> np.ndarray:
        return 1 + np.searchsorted(desc, -np.asarray(x, dtype=np.float64), side="left")

    if len(distinct) < 2:
        return by_search
    h = float(distinct[-1] - distinct[0]) / (bins_per_value * len(distinct))
    x0 = float(distinct[0]) - h
    n_bins = int(np.ceil((distinct[-1] + h - x0) / h)) + 2
    bin_of = np.clip(((distinct - x0) / h).astype(np.int64), 0, n_bins - 1)
    occupancy = np.bincount(bin_of, minlength=n_bins)
    slots = int(occupancy.max())
    if slots > max_occupancy or not np.isfinite(h) or h <= 0:
        return by_search
    weight = np.bincount(bin_of, weights=counts, minlength=n_bins).astype(np.int64)
    above = (1 + np.r_[np.cumsum(weight[::-1])[::-1][1:], 0]).astype(np.int64)  # 1 + values in higher bins
    slot = np.arange(len(distinct)) - np.r_[0, np.cumsum(occupancy)][bin_of]  # position within its bin
    slot_value = np.full((slots, n_bins), -np.inf)  # -inf: an empty slot is never above x
    slot_value[slot, bin_of] = distinct
    slot_count = np.zeros((slots, n_bins), dtype=np.int64)
    slot_count[slot, bin_of] = counts
    tied = bool((counts > 1).any())

    def rank(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        b = ((x - x0) / h).astype(np.int64)
        np.clip(b, 0, n_bins - 1, out=b)
        r = above[b]
        for j in range(slots):
            higher = slot_value[j][b] > x
            r += slot_count[j][b] * higher if tied else higher
        return r

    return rank
