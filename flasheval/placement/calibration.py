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
  (a miss needs the interval to pass a pool model) and a grid across the pool. The two sides of one
  model share their paths and intervals (they differ only where an interval's end falls exactly on a
  pool value, an event of probability zero) and differ in the true rank, so one simulation scores
  both (:func:`limit_positions`).

The limit ``s -> 0`` with the truth just below the best pool model is exact: while the interval holds
the best model's score it reaches rank 1 without being ``[1, 1]``, so the rule cannot stop; it stops
when ``|Z_k| >= c`` first, misses on the upper exits only, and so misses with half the two-sided
crossing probability. Any valid constant is therefore at least ``pocock_constant(looks, 2 alpha)``,
where the search starts. Pocock's own constant is valid whatever the stop rule, so the result is never
above it.

What holds is a guarantee under the normal model up to Monte Carlo error: ``n_paths`` common random paths
(seeded, so the constant is a deterministic function of the pool and the looks), standard error about
``sqrt(alpha (1 - alpha) / n_paths)`` on each simulated rate (0.34 points at 4,000 paths and 5%).

Cost, linear in the pool (:mod:`flasheval.placement.miss_simulation`). A rank is a bin-table lookup, a few
gathers whatever the pool's size (:func:`rank_function`). Only the paths that can miss somewhere are walked,
each up to its last look that could miss (:func:`miss_looks`: at a look with ``|Z_k| < c`` every interval
covers every position, so a miss needs a crossing; about one path in ten at the constants found): the same
counts as walking every path. Every position is first simulated on the first ``screen_paths`` paths (a prefix of
the same paths); a position with fewer misses there than a rate of ``alpha`` gives with probability
``screen_tail`` (``1e-6``: ``Binomial(1000, 0.05) <= 21``) is not simulated further, the others are completed
on the remaining paths, so their rates are exactly those of all ``n_paths`` paths. On the pools measured
(synthetic pools of 200 to 4,000 models, ``benchmarks/scale.py``) the constants equal those of the full
simulation; a screened position could only matter if its rate over all paths exceeded ``alpha`` while its
first thousand paths showed at most 2.1%, which for a true rate of ``alpha`` has probability below ``1e-6``.

Being deterministic, the result is memoised in the process (the last :data:`MEMO_SIZE`) and kept on disk
(:mod:`flasheval.placement.calibration_cache`), both keyed by a SHA-256 of the inputs' bytes (the pool's
values, the looks' standard errors, the window table, the level, the simulation's settings and the algorithm's
version): the same pool placed again (another seed, sweep round, backtest or process) returns it at once.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.placement.calibration_cache import CALIBRATION_VERSION, read_cached, write_cached
from flasheval.placement.miss_simulation import miss_looks, rank_function, stop_miss_rates, stop_misses
from flasheval.stats.sequential import continuation_probability, pocock_constant

# the simulation's functions live in miss_simulation and are re-exported here, where they were first
__all__ = ["Calibration", "brownian_paths", "stop_miss_rates", "stop_misses", "miss_looks", "rank_function",
           "top_limit_miss", "true_positions", "limit_positions", "calibrated_constant", "MEMO_SIZE"]

MEMO_SIZE = 1024
"""How many calibrations one process keeps (each is four floats; least recently used go first)."""

HEAD = 256
"""True positions (best first) tried at every spread before the others: where a constant usually fails."""


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


def limit_positions(values: np.ndarray, n_grid: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """:func:`true_positions` as the simulation walks them: ``(thetas, truths)``, best first.

    Each distinct pool value is one position with two true ranks, the limits from just above it
    (``1 + #(values > v)``) and just below it (``1 + #(values >= v)``): the paths and their rank
    intervals are the same on both sides (they differ only where an interval's end falls on a pool
    value, an event of probability zero), so one simulation serves both. The grid's points (not
    on a value) have one true rank, repeated.

    Examples
    --------
    >>> thetas, truths = limit_positions(np.array([0.2, 0.7, 0.7]), n_grid=0)
    >>> thetas.tolist(), truths.tolist()
    ([0.7, 0.2], [[1, 3], [3, 4]])
    """
    values = np.asarray(values, dtype=np.float64)
    rank = rank_function(values)
    distinct = np.unique(values)
    spread = max(float(np.ptp(values)), 1e-12)
    grid = np.setdiff1d(np.linspace(values.min() - 0.02 * spread, values.max() + 0.02 * spread, n_grid), distinct)
    above, below = rank(distinct), 1 + len(values) - np.searchsorted(np.sort(values), distinct, side="left")
    thetas = np.r_[distinct, grid]
    truths = np.r_[np.c_[above, below], np.c_[rank(grid), rank(grid)]].astype(np.int64)
    order = np.argsort(-thetas, kind="stable")
    return thetas[order], truths[order]


def calibrated_constant(values: Sequence[float], se: Sequence[float], fits: np.ndarray, confidence_level: float, *,
                        n_paths: int = 4000, scales: Sequence[float] = (0.25, 0.5, 1.0, 2.0), step: float = 0.025,
                        seed: int = 0, chunk: int = 32, screen_paths: int = 1000,
                        screen_tail: float = 1e-6) -> Calibration:
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
        Memory of a vectorised block: ``chunk x n_paths`` (position, path) pairs, of the paths that can miss.
    screen_paths, screen_tail
        The screen (module docstring): paths every position is first simulated on, and the binomial
        tail below which a position is not simulated further (``screen_paths >= n_paths``: no screen).

    Examples
    --------
    >>> fits = np.ones((4, 4), dtype=bool)  # one pool model, every interval stops at once
    >>> cal = calibrated_constant([0.0], [1.0], fits, 0.95, n_paths=20_000)
    >>> round(cal.lower_bound, 3), cal.constant >= cal.lower_bound, cal.constant <= cal.pocock
    (1.645, True, True)
    >>> calibrated_constant([0.0], [1.0], fits, 0.95, n_paths=20_000) is cal  # memoised: the same inputs
    True
    >>> calibrated_constant([0.0], [1.0], fits, 0.95, n_paths=20_000, screen_paths=20_000).constant == cal.constant
    True
    """
    key = _memo_key(values, se, fits, confidence_level, n_paths, scales, step, seed, screen_paths, screen_tail)
    found = _MEMO.get(key)
    if found is not None:
        _MEMO.move_to_end(key)
        return found
    stored = read_cached(key, **_bounds(se, confidence_level), step=step)
    if stored is not None:
        cal = Calibration(**stored)
    else:
        cal = _calibrate(values, se, fits, confidence_level, n_paths=n_paths, scales=scales, step=step, seed=seed,
                         chunk=chunk, screen_paths=screen_paths, screen_tail=screen_tail)
        write_cached(key, {"constant": cal.constant, "pocock": cal.pocock, "lower_bound": cal.lower_bound,
                           "worst_miss": cal.worst_miss})
    _MEMO[key] = cal
    while len(_MEMO) > MEMO_SIZE:
        _MEMO.popitem(last=False)
    return cal


_MEMO: OrderedDict[str, Calibration] = OrderedDict()


def _bounds(se: Sequence[float], confidence_level: float) -> dict[str, float]:
    """Pocock's constant of the looks at ``alpha`` and at ``2 alpha`` (the lower bound): computed, never read."""
    if len(se) == 0:
        return {"pocock": 0.0, "lower_bound": 0.0}
    information, alpha = tuple(1.0 / np.asarray(se, dtype=np.float64) ** 2), 1.0 - confidence_level
    return {"pocock": pocock_constant(information, alpha),
            "lower_bound": pocock_constant(information, min(2.0 * alpha, 0.999))}


def _memo_key(values: Sequence[float], se: Sequence[float], fits: np.ndarray, confidence_level: float, n_paths: int,
              scales: Sequence[float], step: float, seed: int, screen_paths: int, screen_tail: float) -> str:
    """SHA-256 of everything the result depends on (``chunk`` only sets memory), as exact bytes."""
    digest = hashlib.sha256(f"flasheval calibration {CALIBRATION_VERSION}".encode())
    for array in (np.asarray(values, dtype=np.float64), np.asarray(se, dtype=np.float64),
                  np.asarray(fits, dtype=bool), np.asarray(scales, dtype=np.float64),
                  np.array([confidence_level, step, screen_tail], dtype=np.float64),
                  np.array([n_paths, seed, screen_paths], dtype=np.int64)):
        digest.update(repr(array.shape).encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _calibrate(values: Sequence[float], se: Sequence[float], fits: np.ndarray, confidence_level: float, *,
               n_paths: int, scales: Sequence[float], step: float, seed: int, chunk: int,
               screen_paths: int, screen_tail: float) -> Calibration:
    """:func:`calibrated_constant` without the memo."""
    alpha = 1.0 - confidence_level
    se_arr = np.asarray(se, dtype=np.float64)
    values_arr = np.asarray(values, dtype=np.float64)
    if len(se_arr) == 0:
        return Calibration(constant=0.0, pocock=0.0, lower_bound=0.0, worst_miss=0.0)
    information = 1.0 / se_arr ** 2
    bounds = _bounds(se_arr, confidence_level)
    pocock, bound = bounds["pocock"], bounds["lower_bound"]
    z = brownian_paths(information, n_paths, np.random.default_rng(seed))
    thetas, truths = limit_positions(values_arr)
    search = _Search(values=values_arr, se=se_arr, z=z, fits=fits, thetas=thetas, truths=truths,
                     rank=rank_function(values_arr), alpha=alpha, chunk=chunk,
                     screen=_screen_size(n_paths, screen_paths, alpha, screen_tail))
    c = bound
    # fail fast: the worst case is usually next to the best pool model, first in order, so every spread's
    # first positions are tried before any spread's others; each position is simulated once at each spread,
    # so the constant and its worst miss are those of any order
    head = slice(0, min(len(thetas), HEAD))
    parts = [(s, head) for s in scales] + [(s, slice(head.stop, None)) for s in scales]
    while c < pocock:
        worst = top_limit_miss(c, information)
        if worst <= alpha:
            for s, positions in parts:
                worst = max(worst, search.worst(c, s, positions))
                if worst > alpha:
                    break
        if worst <= alpha:
            return Calibration(constant=float(c), pocock=pocock, lower_bound=bound, worst_miss=worst)
        c = bound + step * (np.floor((c - bound) / step + 1e-9) + 1)
    return Calibration(constant=pocock, pocock=pocock, lower_bound=bound, worst_miss=float("nan"))


def _screen_size(n_paths: int, screen_paths: int, alpha: float, screen_tail: float) -> tuple[int, int]:
    """``(paths, least misses)`` of the screen: a position whose first ``paths`` paths miss fewer than
    ``least`` times is not simulated further; ``(n_paths, 0)`` (no screen) where a screen would prune nothing."""
    from scipy import stats

    n = min(screen_paths, n_paths)
    least = int(stats.binom.ppf(screen_tail, n, alpha))  # smallest m with P(Binomial(n, alpha) <= m) >= tail
    return (n, least) if 0 < n < n_paths and least > 0 else (n_paths, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Search:
    """What every constant tried shares: the pool, the looks, the paths, the true positions, the screen."""

    values: np.ndarray
    se: np.ndarray
    z: np.ndarray
    fits: np.ndarray
    thetas: np.ndarray
    truths: np.ndarray
    rank: Callable[[np.ndarray], np.ndarray]
    alpha: float
    chunk: int
    screen: tuple[int, int]

    def worst(self, c: float, scale: float, positions: slice = slice(None)) -> float:
        """The largest miss rate at the stop over the true ``positions`` at spread ``scale`` (all paths),
        returned as soon as one exceeds ``alpha``; positions the screen clears are left out.

        Only paths that can miss are simulated (:func:`miss_looks`, found once for every position), so a
        block holds as many positions as keep ``chunk x n_paths`` (position, path) pairs."""
        n_screen, least = self.screen
        n_paths = self.z.shape[0]
        se = scale * self.se
        until = miss_looks(c, se, np.ascontiguousarray(self.z.T), self.thetas, self.rank, self.values, self.truths)
        first, rest = until[:n_screen], until[n_screen:]
        block = max(self.chunk, self.chunk * n_paths // max(int((until >= 0).sum()), 1))
        first_position, end, _ = positions.indices(len(self.thetas))
        worst = 0.0
        for start in range(first_position, end, block):
            thetas, truths = self.thetas[start:min(start + block, end)], self.truths[start:min(start + block, end)]
            misses = stop_misses(c, self.values, se, self.z[:n_screen], self.fits, thetas, rank=self.rank,
                                 truths=truths, until=first)
            doubtful = (misses >= least).any(axis=1)
            if n_screen < n_paths and doubtful.any():
                misses = misses[doubtful] + stop_misses(c, self.values, se, self.z[n_screen:], self.fits,
                                                        thetas[doubtful], rank=self.rank, truths=truths[doubtful],
                                                        until=rest)
            if doubtful.any():
                worst = max(worst, float(misses.max()) / n_paths)
            if worst > self.alpha:
                break
        return worst
