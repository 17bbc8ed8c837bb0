"""The looks' constant calibrated to the window rule: the interval at the STOP keeps its level.

Pocock's constant (:mod:`flasheval.stats.sequential`) makes every look's interval cover at once. A
placement reports only the look where the ``window`` rule stops it, so a smaller constant ``c`` can
already give ``P(the interval at the stopping look misses the full-data rank) <= alpha`` for every true
position of the new model. :func:`calibrated_constant` finds the smallest such ``c`` on a grid, under the
normal model of the nested looks that Pocock's constant also uses:

- the estimate of the aggregate at look ``k`` is ``theta + s se_k Z_k``, ``Z`` standardized Brownian
  motion at the looks' information times ``1 / se_k^2`` (nested prefixes: independent increments),
  ``se_k`` from the looks' variances with the pool's spreads, ``s`` the new model's spread relative to
  the pool's (unknown in advance: the worst case is taken over ``scales``, and the limit ``s -> 0``
  exactly, below);
- the look's rank interval is that of ``[T_k - c s se_k, T_k + c s se_k]`` among the pool's full-data
  aggregates; the rule stops on the first look whose interval fits (a lookup table of the plan's window
  rule); a look where every example is scored cannot err;
- the worst case is taken over true positions ``theta``: just above and just below every pool model
  (a miss needs the interval to pass a pool model) and a grid across the pool.

The limit ``s -> 0`` with the truth just below the best pool model is exact: while the interval holds
the best model's score it reaches rank 1 without being ``[1, 1]``, so the rule cannot stop; it stops
when ``|Z_k| >= c`` first, misses on the upper exits only, and so misses with half the two-sided
crossing probability. Any valid constant is therefore at least ``pocock_constant(looks, 2 alpha)``,
where the search starts. Pocock's own constant is valid whatever the stop rule, so the result is never
above it.

What holds is a guarantee under the normal model up to Monte Carlo error: ``n_paths`` common random
paths (seeded, so the constant is a deterministic function of the pool and the looks), standard error
about ``sqrt(alpha (1 - alpha) / n_paths)`` on each simulated rate (0.34 points at 4,000 paths and 5%).

Being deterministic, the result is memoised in the process by a SHA-256 of the inputs' bytes (the
pool's values, the looks' standard errors, the window table, the level and the simulation's settings):
a later call with the same inputs (the same pool placed again, at another seed, by another sweep
round) returns the stored :class:`Calibration` at once. The memo holds the last
:data:`MEMO_SIZE` results of this process and nothing else; it is never written to disk.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.stats.sequential import continuation_probability, pocock_constant

__all__ = ["Calibration", "brownian_paths", "stop_miss_rates", "rank_function", "top_limit_miss", "true_positions",
           "calibrated_constant", "MEMO_SIZE"]

MEMO_SIZE = 1024
"""How many calibrations one process keeps (each is four floats; least recently used go first)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """The calibrated constant of one pool's looks, and what decided it."""

    constant: float
    """The looks' constant: every look's interval is ``estimate +- constant x se``."""
    pocock: float
    """Pocock's constant for the same looks (the result is never above it)."""
    lower_bound: float
    """``pocock_constant(looks, 2 alpha)``: no valid constant is below it."""
    worst_miss: float
    """The worst miss rate at the stop found at ``constant`` (simulated, or the exact limit)."""


def brownian_paths(information: Sequence[float], n_paths: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_paths, looks)`` standardized Brownian motion ``W(I_k) / sqrt(I_k)`` at increasing ``information``.

    Examples
    --------
    >>> z = brownian_paths([1.0, 4.0], 200_000, np.random.default_rng(0))
    >>> round(float(np.corrcoef(z.T)[0, 1]), 2)  # sqrt(I_1 / I_2)
    0.5
    """
    info = np.asarray(information, dtype=np.float64)
    steps = rng.standard_normal((n_paths, len(info))) * np.sqrt(np.diff(np.r_[0.0, info]))
    return np.cumsum(steps, axis=1) / np.sqrt(info)


def stop_miss_rates(c: float, values: np.ndarray, se: np.ndarray, z: np.ndarray, fits: np.ndarray,
                    thetas: np.ndarray) -> np.ndarray:
    """Per true position, ``P(the rank interval at the stopping look misses the true rank)``.

    ``values``: the pool's full-data aggregates, higher is better; ``se``: each look's standard error;
    ``z``: ``(paths, looks)`` standardized paths; ``fits[lo, hi]``: whether the rule stops on ``[lo, hi]``
    (shape at least ``(n_pool + 2, n_pool + 2)``); ``thetas``: true aggregates. A path that never stops
    reaches the look where every example is scored, which cannot miss.
    """
    rank = rank_function(values)
    theta = np.asarray(thetas, dtype=np.float64)
    se = np.asarray(se, dtype=np.float64)
    n_paths = z.shape[0]
    true = rank(theta)
    misses = np.zeros(len(theta), dtype=np.int64)
    rows = np.repeat(np.arange(len(theta)), n_paths)  # the (position, path) pairs not stopped yet
    cols = np.tile(np.arange(n_paths), len(theta))
    for k in range(len(se)):
        if len(rows) == 0:
            break
        est = theta[rows] + se[k] * z[cols, k]
        lo, hi = rank(est + c * se[k]), rank(est - c * se[k])
        stop = fits[lo, hi]
        t = true[rows[stop]]
        misses += np.bincount(rows[stop][(t < lo[stop]) | (t > hi[stop])], minlength=len(theta))
        rows, cols = rows[~stop], cols[~stop]
    return misses / n_paths


def rank_function(values: Sequence[float], max_bins: int = 1 << 20) -> Callable[[np.ndarray], np.ndarray]:
    """``rank(x) = 1 + #(values > x)``, vectorised; a bin table when the values are well apart, else ``searchsorted``.

    The table splits ``[min - h, max + h]`` into bins of width ``h`` at most half the smallest gap
    between values, so a bin holds at most one value: ``rank(x) = 1 + above[b] + (value[b] > x)`` for
    ``x`` in bin ``b``, with ``above[b]`` the values in higher bins (exact, and several times faster
    than a binary search on these sizes). Bins outside the range hold no value, so clipping is exact.

    Examples
    --------
    >>> rank = rank_function([0.3, 0.9, 0.5])
    >>> rank(np.array([1.0, 0.9, 0.7, 0.5, 0.1, -5.0])).tolist()
    [1, 1, 2, 2, 4, 4]
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    desc = -v[::-1]  # ascending negatives: rank(x) = 1 + #(values > x) = 1 + searchsorted(desc, -x, "left")
    gaps = np.diff(v)
    span = float(v[-1] - v[0]) if len(v) else 0.0
    if len(v) < 2 or gaps.min() <= 0 or span / (gaps.min() / 2) + 3 > max_bins:
        return lambda x: 1 + np.searchsorted(desc, -np.asarray(x, dtype=np.float64), side="left")
    h = gaps.min() / 2
    x0 = v[0] - h
    n_bins = int(np.ceil((v[-1] + h - x0) / h)) + 1
    index = np.minimum(((v - x0) / h).astype(np.int64), n_bins - 1)
    value = np.full(n_bins, -np.inf)
    value[index] = v
    counts = np.bincount(index, minlength=n_bins)
    above = np.r_[np.cumsum(counts[::-1])[::-1][1:], 0]  # values in bins strictly above b

    def rank(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        b = np.clip(((x - x0) / h).astype(np.int64), 0, n_bins - 1)
        return 1 + above[b] + (value[b] > x)

    return rank


def top_limit_miss(c: float, information: Sequence[float]) -> float:
    """The exact miss rate of the limit (truth next to the best pool model, spread -> 0): half the crossing.

    Examples
    --------
    >>> round(top_limit_miss(1.959964, [1.0]), 4)  # one look: the upper normal tail
    0.025
    """
    return (1.0 - continuation_probability(tuple(information), (c,) * len(information))) / 2.0


def true_positions(values: np.ndarray, n_grid: int = 50) -> np.ndarray:
    """Just above and just below every pool model, and a grid across the pool; best first."""
    values = np.asarray(values, dtype=np.float64)
    spread = max(float(np.ptp(values)), 1e-12)
    eps = 1e-9 * spread
    grid = np.linspace(values.min() - 0.02 * spread, values.max() + 0.02 * spread, n_grid)
    return np.unique(np.r_[grid, values - eps, values + eps])[::-1]


def calibrated_constant(values: Sequence[float], se: Sequence[float], fits: np.ndarray, confidence_level: float, *,
                        n_paths: int = 4000, scales: Sequence[float] = (0.25, 0.5, 1.0, 2.0), step: float = 0.025,
                        seed: int = 0, chunk: int = 8) -> Calibration:
    """The smallest constant ``c`` (``lower_bound + j step``) whose worst miss rate at the stop is ``<= alpha``.

    Parameters
    ----------
    values
        The pool's full-data aggregates (higher is better).
    se
        Standard error of each look that can err (the pool's spreads), decreasing.
    fits
        ``fits[lo, hi]``: the plan's window rule stops on the rank interval ``[lo, hi]``.
    confidence_level
        ``1 - alpha``, the level the interval at the stop keeps.
    n_paths, scales, step, seed
        Monte Carlo paths, the new model's spreads relative to the pool's, the grid of constants,
        the paths' seed (fixed: the result depends only on the pool and the looks).
    chunk
        True positions per vectorised block (memory: ``chunk x n_paths x looks``).

    Examples
    --------
    >>> fits = np.ones((4, 4), dtype=bool)  # one pool model, every interval stops at once
    >>> cal = calibrated_constant([0.0], [1.0], fits, 0.95, n_paths=20_000)
    >>> round(cal.lower_bound, 3), cal.constant >= cal.lower_bound, cal.constant <= cal.pocock
    (1.645, True, True)
    >>> calibrated_constant([0.0], [1.0], fits, 0.95, n_paths=20_000) is cal  # memoised: the same inputs
    True
    """
    key = _memo_key(values, se, fits, confidence_level, n_paths, scales, step, seed)
    found = _MEMO.get(key)
    if found is not None:
        _MEMO.move_to_end(key)
        return found
    cal = _calibrate(values, se, fits, confidence_level, n_paths=n_paths, scales=scales, step=step, seed=seed, chunk=chunk)
    _MEMO[key] = cal
    while len(_MEMO) > MEMO_SIZE:
        _MEMO.popitem(last=False)
    return cal


_MEMO: OrderedDict[str, Calibration] = OrderedDict()


def _memo_key(values: Sequence[float], se: Sequence[float], fits: np.ndarray, confidence_level: float, n_paths: int,
              scales: Sequence[float], step: float, seed: int) -> str:
    """SHA-256 of everything the result depends on (``chunk`` only sets memory), as exact bytes."""
    digest = hashlib.sha256()
    for array in (np.asarray(values, dtype=np.float64), np.asarray(se, dtype=np.float64),
                  np.asarray(fits, dtype=bool), np.asarray(scales, dtype=np.float64),
                  np.array([confidence_level, step], dtype=np.float64), np.array([n_paths, seed], dtype=np.int64)):
        digest.update(repr(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _calibrate(values: Sequence[float], se: Sequence[float], fits: np.ndarray, confidence_level: float, *,
               n_paths: int, scales: Sequence[float], step: float, seed: int, chunk: int) -> Calibration:
    """:func:`calibrated_constant` without the memo."""
    alpha = 1.0 - confidence_level
    se_arr = np.asarray(se, dtype=np.float64)
    values_arr = np.asarray(values, dtype=np.float64)
    if len(se_arr) == 0:
        return Calibration(constant=0.0, pocock=0.0, lower_bound=0.0, worst_miss=0.0)
    information = 1.0 / se_arr ** 2
    pocock = pocock_constant(tuple(information), alpha)
    bound = pocock_constant(tuple(information), min(2.0 * alpha, 0.999))
    z = brownian_paths(information, n_paths, np.random.default_rng(seed))
    thetas = true_positions(values_arr)
    c = bound
    while c < pocock:
        worst = top_limit_miss(c, information)
        if worst <= alpha:
            for s in scales:  # fail fast: the worst case is usually next to the best pool model, first in order
                for start in range(0, len(thetas), chunk):
                    worst = max(worst, float(stop_miss_rates(c, values_arr, s * se_arr, z, fits,
                                                             thetas[start:start + chunk]).max()))
                    if worst > alpha:
                        break
                if worst > alpha:
                    break
        if worst <= alpha:
            return Calibration(constant=c, pocock=pocock, lower_bound=bound, worst_miss=worst)
        c = bound + step * (np.floor((c - bound) / step + 1e-9) + 1)
    return Calibration(constant=pocock, pocock=pocock, lower_bound=bound, worst_miss=float("nan"))
