"""Repeated confidence intervals over nested looks: group-sequential boundaries for any look schedule.

A placement looks at its estimate after every stage and stops when the interval is narrow
enough, so the interval it reports belongs to a data-dependent look. Intervals
``estimate_k +- c_k * se_k`` whose boundaries satisfy

    P(|Z_1| < c_1, ..., |Z_K| < c_K) = 1 - alpha,   Z_k = (estimate_k - truth) / se_k,

cover the truth at EVERY look at once with probability ``1 - alpha``, hence at any stopping
look whatever the stop rule: Jennison & Turnbull's repeated confidence intervals (JRSS-B 51,
1989; *Group Sequential Methods with Applications to Clinical Trials*, 2000, ch. 9). The
union bound (``c_k`` at ``alpha / K`` each) is a valid but conservative choice: it ignores that
nested looks are strongly correlated.

The joint law of the looks. Each look's subsample contains the previous one (a prefix of one
random order per dataset, sampling without replacement). For a mean over such a nested sample,
``Cov(mean_j, mean_k) = Var(mean_k)`` for ``j < k`` (the later sample's variance), and it
adds over independent datasets; so with ``V_k`` the variance of look ``k``'s estimate and
information ``I_k = 1 / V_k``, ``Corr(Z_j, Z_k) = sqrt(I_j / I_k)``: the ``Z_k`` are
``W(I_k) / sqrt(I_k)`` for a standard Brownian motion ``W`` (independent increments; the
canonical joint distribution of Jennison & Turnbull, sec. 3.1, which also holds for
regression-adjusted means asymptotically). ``V_k`` comes from the look schedule: examples per
dataset at each look, dataset sizes (the finite-population factor ``1 - n/N``), per-example
spreads and aggregate weights; a look where every dataset is fully scored has ``V_k = 0``:
it cannot err and takes no share of ``alpha``.

The crossing probability is computed by recursive numerical integration over the looks
(Armitage, McPherson & Rowe, JRSS-A 132, 1969; Jennison & Turnbull, ch. 19): the density of
``S_k = W(I_k)`` on the continuation region ``|S_k| < c_k sqrt(I_k)`` is carried from look to
look by a Gaussian kernel on a grid, Simpson's rule, and the exact normal probability of
continuing from each grid point. The boundary is Pocock's (Biometrika 64, 1977): one constant
``c`` for every look, found by root finding. For K equally spaced looks it reproduces Pocock's
published constants (K = 5, alpha = 0.05: 2.413); the tests check that, and the integration
against scipy's multivariate normal and a Brownian-motion simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import optimize, stats

__all__ = ["continuation_probability", "pocock_constant", "pocock_level"]

_STEPS_PER_SD = 12  # grid points per standard deviation of the smallest increment (Simpson: error ~ h^4)
_MAX_POINTS = 4001


def _grid(half_width: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Simpson nodes and weights on ``[-half_width, half_width]`` with spacing at most ``step``."""
    m = int(min(_MAX_POINTS, max(101, 2 * math.ceil(half_width / step) + 1)))
    m += 1 - m % 2  # odd number of points
    x = np.linspace(-half_width, half_width, m)
    h = x[1] - x[0]
    w = np.full(m, 2.0)
    w[1::2] = 4.0
    w[0] = w[-1] = 1.0
    return x, w * h / 3.0


def continuation_probability(information: Sequence[float], bounds: Sequence[float]) -> float:
    """``P(|Z_k| < bounds[k] for every k)`` for ``Z_k = W(I_k) / sqrt(I_k)``.

    Parameters
    ----------
    information
        Strictly increasing, positive, finite ``I_k`` (only ratios matter).
    bounds
        Positive boundary ``c_k`` on the standardized scale, one per look.

    Examples
    --------
    >>> round(continuation_probability([1.0], [1.959964]), 5)  # one look: the normal interval
    0.95
    >>> round(1 - continuation_probability([1, 2, 3, 4, 5], [2.413] * 5), 4)  # Pocock, K = 5
    0.05
    """
    info = np.asarray(information, dtype=np.float64)
    c = np.asarray(bounds, dtype=np.float64)
    if info.ndim != 1 or info.size == 0 or info.shape != c.shape:
        raise ValueError("information and bounds must be non-empty and of the same length")
    if not np.all(np.isfinite(info)) or np.any(info <= 0) or np.any(np.diff(info) <= 0):
        raise ValueError(f"information must be positive, finite and strictly increasing, got {info.tolist()}")
    if np.any(c <= 0):
        raise ValueError("bounds must be positive")
    if info.size == 1:
        return float(1.0 - 2.0 * stats.norm.sf(c[0]))
    deltas = np.diff(info)
    b = c * np.sqrt(info)  # bounds on the S scale
    x, w = _grid(b[0], min(math.sqrt(info[0]), math.sqrt(deltas[0])) / _STEPS_PER_SD)
    f = stats.norm.pdf(x, scale=math.sqrt(info[0]))  # density of S_1, restricted below to |S_1| < b_1
    for k in range(1, info.size):
        sd = math.sqrt(deltas[k - 1])
        mass = w * f
        if k == info.size - 1:
            stay = stats.norm.cdf((b[k] - x) / sd) - stats.norm.cdf((-b[k] - x) / sd)
            return float(mass @ stay)
        nxt = min(sd, math.sqrt(deltas[k])) / _STEPS_PER_SD
        y, wy = _grid(b[k], nxt)
        f = stats.norm.pdf((y[:, None] - x[None, :]) / sd) @ mass / sd
        x, w = y, wy
    raise AssertionError("unreachable")


def pocock_constant(information: Sequence[float], alpha: float) -> float:
    """The constant ``c`` with ``P(max_k |Z_k| >= c) = alpha`` over looks at ``information``.

    Examples
    --------
    >>> round(pocock_constant([1, 2], 0.05), 3)  # Pocock (1977), two equally spaced looks
    2.178
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    single = float(stats.norm.isf(alpha / 2))
    if len(information) == 1:
        return single
    union = float(stats.norm.isf(alpha / (2 * len(information))))  # the union bound's, never exceeded
    return float(optimize.brentq(lambda c: 1.0 - continuation_probability(information, [c] * len(information)) - alpha,
                                 single, union + 1e-9, xtol=1e-6))


def pocock_level(variances: Sequence[float], confidence_level: float) -> float:
    """Per-look two-sided level of repeated confidence intervals with overall ``confidence_level``.

    ``variances[k]`` is the variance (any common scale) of look ``k``'s estimate; they must not
    increase (nested looks). Looks with variance 0 (everything scored) cannot err and looks with
    equal variance are one look (they add no example): neither takes a share of the error. The
    level is ``1 - 2 (1 - Phi(c))`` with ``c`` :func:`pocock_constant` of the looks' information.

    Examples
    --------
    >>> round(pocock_level([4.0, 2.0, 0.0], 0.95), 4)  # two looks that can err, then the full data
    0.9706
    >>> pocock_level([0.0], 0.95)  # nothing can err: the plain level
    0.95
    """
    v = np.asarray(variances, dtype=np.float64)
    if v.ndim != 1 or np.any(~np.isfinite(v)) or np.any(v < 0) or np.any(np.diff(v) > 1e-12 * float(v.max(initial=1.0))):
        raise ValueError(f"look variances must be finite, >= 0 and non-increasing, got {v.tolist()}")
    distinct = sorted({float(x) for x in v if x > 0}, reverse=True)
    if len(distinct) <= 1:
        return float(confidence_level)
    c = pocock_constant([1.0 / x for x in distinct], 1.0 - confidence_level)
    return 1.0 - 2.0 * float(stats.norm.sf(c))
