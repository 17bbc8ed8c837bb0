"""Scaling-law fits of Gadre et al. (2024): loss from compute and token multiplier, error from loss.

Two laws, fitted separately per training set and chained for prediction:

- Eq. (4), loss law: ``L(C, M) = E + (a * M**eta + b * M**-eta) * C**-eta`` with compute ``C = 6 N D``
  and token multiplier ``M = D / N``.
- Eq. (5), error law: ``Err(L) = epsilon - k * exp(-gamma * L)`` (average top-1 error from loss).

``method="gadre2024"`` is the authors' procedure as their code runs it (unweighted least squares,
SciPy's Levenberg-Marquardt, a grid of 128 starting points for Eq. (4) and SciPy's default start for
Eq. (5), best fit = smallest residual sum of squares). ``method="huber"`` is ours, not the paper's: the
same grid, then a Huber loss on log-residuals from the best least-squares optima, so one off-trend run
moves the fit less.

Intervals (the case bootstrap over the fitted runs, percentile intervals) live in
:mod:`flasheval.stats.scaling_bootstrap`. numpy/scipy only.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import OptimizeWarning, curve_fit, least_squares

from flasheval.errors import FlashevalError

__all__ = [
    "FitError",
    "LOSS_LAW_PARAMETERS",
    "ERROR_LAW_PARAMETERS",
    "LOSS_FIT_METHODS",
    "LossLawFit",
    "ErrorLawFit",
    "loss_law",
    "error_law",
    "fit_loss_law",
    "fit_error_law",
    "relative_error",
]

LOSS_LAW_PARAMETERS: tuple[str, ...] = ("E", "a", "b", "eta")
ERROR_LAW_PARAMETERS: tuple[str, ...] = ("epsilon", "k", "gamma")
LOSS_FIT_METHODS: tuple[str, ...] = ("gadre2024", "huber")

# The authors' starting grid for their raw parameters (p1, p2, q, E); 4 x 4 x 2 x 4 = 128 starts.
_GRID_P1 = (1e2, 3e2, 1e3, 3e3)
_GRID_P2 = (1e2, 3e2, 1e3, 3e3)
_GRID_Q = (-0.1, -0.3)
_GRID_E = (0.0, 1.0, 2.0, 10.0)
_MAXFEV = 10_000
_HUBER_DELTA = 1e-3  # on log-loss residuals; ours (the paper uses no Huber loss)
_HUBER_N_STARTS = 8

FloatArray = npt.NDArray[np.float64]


class FitError(FlashevalError):
    """A scaling-law fit that cannot be done or did not converge (too few runs, bad values, no optimum)."""


def loss_law(
    compute: npt.ArrayLike,
    multiplier: npt.ArrayLike,
    *,
    E: npt.ArrayLike,
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    eta: npt.ArrayLike,
) -> FloatArray:
    """Eq. (4) of Gadre et al.: ``E + (a M^eta + b M^-eta) C^-eta``.

    Parameters may be arrays (one entry per bootstrap replicate); they broadcast against the points
    along a new leading axis when given as 1-d arrays of replicates.

    Examples
    --------
    >>> float(loss_law(4.0, 1.0, E=1.0, a=1.0, b=1.0, eta=0.5))  # 1 + (1 + 1) / 2
    2.0
    """
    c = np.asarray(compute, dtype=float)
    m = np.asarray(multiplier, dtype=float)
    E, a, b, eta = (np.asarray(p, dtype=float) for p in (E, a, b, eta))
    if E.ndim == 1:  # replicates x points
        E, a, b, eta = (p.reshape((-1,) + (1,) * c.ndim) for p in (E, a, b, eta))
    return E + (a * m**eta + b * m ** (-eta)) * c ** (-eta)


def error_law(loss: npt.ArrayLike, *, epsilon: npt.ArrayLike, k: npt.ArrayLike, gamma: npt.ArrayLike) -> FloatArray:
    """Eq. (5) of Gadre et al.: ``epsilon - k exp(-gamma L)``; 1-d parameters broadcast as replicates.

    Examples
    --------
    >>> float(error_law(np.log(2.0), epsilon=1.0, k=0.5, gamma=1.0))  # 1 - 0.5 / 2
    0.75
    """
    loss_arr = np.asarray(loss, dtype=float)
    epsilon, k, gamma = (np.asarray(p, dtype=float) for p in (epsilon, k, gamma))
    if epsilon.ndim == 1 and loss_arr.ndim < 2:
        epsilon, k, gamma = (p.reshape((-1,) + (1,) * loss_arr.ndim) for p in (epsilon, k, gamma))
    return epsilon - k * np.exp(-gamma * loss_arr)


@dataclass(frozen=True, slots=True, kw_only=True)
class LossLawFit:
    """A fitted Eq. (4) loss law."""

    E: float
    """Irreducible loss."""
    a: float
    """Coefficient of the ``M^eta`` (parameter-limited) term."""
    b: float
    """Coefficient of the ``M^-eta`` (data-limited) term."""
    eta: float
    """Compute exponent (half the Chinchilla exponent alpha = beta)."""
    residuals: tuple[float, ...]
    """Fitted minus measured loss, per fitted run, in input order."""
    method: str
    """``gadre2024`` (the authors' procedure) or ``huber`` (ours)."""

    def __post_init__(self) -> None:
        values = (self.E, self.a, self.b, self.eta, *self.residuals)
        if not all(np.isfinite(values)):
            raise FitError(f"loss-law fit produced a non-finite value (parameters {self.parameters()})")
        if self.method not in LOSS_FIT_METHODS:
            raise ValueError(f"method must be one of {LOSS_FIT_METHODS}, got {self.method!r}")

    def parameters(self) -> dict[str, float]:
        """The parameters by name (``E``, ``a``, ``b``, ``eta``)."""
        return {"E": self.E, "a": self.a, "b": self.b, "eta": self.eta}

    def predict(self, compute: npt.ArrayLike, multiplier: npt.ArrayLike) -> FloatArray:
        """Predicted loss at the given compute (FLOPs) and token multiplier."""
        return loss_law(compute, multiplier, **self.parameters())


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorLawFit:
    """A fitted Eq. (5) error law."""

    epsilon: float
    """Error the law tends to at infinite loss (an upper asymptote, near chance)."""
    k: float
    """Scale of the exponential term."""
    gamma: float
    """Rate of the exponential in loss."""
    residuals: tuple[float, ...]
    """Fitted minus measured error, per fitted run, in input order."""

    def __post_init__(self) -> None:
        if not all(np.isfinite((self.epsilon, self.k, self.gamma, *self.residuals))):
            raise FitError(f"error-law fit produced a non-finite value (parameters {self.parameters()})")

    def parameters(self) -> dict[str, float]:
        """The parameters by name (``epsilon``, ``k``, ``gamma``)."""
        return {"epsilon": self.epsilon, "k": self.k, "gamma": self.gamma}

    def predict(self, loss: npt.ArrayLike) -> FloatArray:
        """Predicted average top-1 error at the given loss."""
        return error_law(loss, **self.parameters())


def _validated_points(n_parameters: int, **arrays: npt.ArrayLike) -> dict[str, FloatArray]:
    """The input arrays as 1-d floats, or a FitError naming what is wrong."""
    out = {name: np.atleast_1d(np.asarray(values, dtype=float)) for name, values in arrays.items()}
    lengths = {len(v) for v in out.values()}
    if len(lengths) != 1 or any(v.ndim != 1 for v in out.values()):
        raise FitError(f"{', '.join(out)} must be 1-d and of equal length")
    n_runs = lengths.pop()
    if n_runs < n_parameters + 1:
        raise FitError(f"too few runs to fit: {n_runs} given, a law with {n_parameters} parameters needs at least "
                       f"{n_parameters + 1}")
    for name, values in out.items():
        if not np.all(np.isfinite(values)):
            raise FitError(f"{name} has a missing or non-finite value")
    for name in ("compute", "multiplier"):
        if name in out and np.any(out[name] <= 0):
            raise FitError(f"{name} must be positive, got {out[name][out[name] <= 0][0]:g}")
    return out


def _raw_loss(n: FloatArray, md: FloatArray, p1: float, p2: float, q: float, e: float) -> FloatArray:
    """The authors' coding of Eq. (4): ``p1 N^q + p2 6^(q/2) (M N)^q + E`` (``M N = D``)."""
    return p1 * n**q + p2 * 6.0 ** (q / 2) * md**q + e


def _raw_to_named(raw: FloatArray) -> tuple[float, float, float, float]:
    """(p1, p2, q, E) to Eq. (4)'s (E, a, b, eta): eta = -q/2, a = p1 6^eta, b = p2."""
    p1, p2, q, e = (float(v) for v in raw)
    eta = -q / 2
    return e, p1 * 6.0**eta, p2, eta


def _named_to_raw(fit: LossLawFit) -> FloatArray:
    return np.array([fit.a / 6.0**fit.eta, fit.b, -2 * fit.eta, fit.E])


def _fit_raw_once(n: FloatArray, md: FloatArray, loss: FloatArray, start: FloatArray, method: str) -> FloatArray | None:
    """One local fit of the raw parameters from ``start``; ``None`` when it fails or is not finite."""

    def model(x: FloatArray, p1: float, p2: float, q: float, e: float) -> FloatArray:
        return _raw_loss(x[0], x[1], p1, p2, q, e)

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", OptimizeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            if method == "gadre2024":
                raw, _ = curve_fit(model, np.vstack([n, md]), loss, p0=start, maxfev=_MAXFEV)
            else:
                result = least_squares(
                    lambda p: np.log(model(np.vstack([n, md]), *p)) - np.log(loss),
                    start, loss="huber", f_scale=_HUBER_DELTA, max_nfev=_MAXFEV,
                )
                if not result.success:
                    return None
                raw = result.x
        except (RuntimeError, ValueError, FloatingPointError):
            return None
        finite = np.all(np.isfinite(raw)) and np.all(np.isfinite(_raw_loss(n, md, *raw)))
    return raw if finite else None


def _objective(residuals: FloatArray, loss: FloatArray, method: str) -> float:
    if method == "gadre2024":
        return float(np.sum(residuals**2))
    r = np.abs(np.log1p(residuals / loss))
    return float(np.sum(np.where(r <= _HUBER_DELTA, 0.5 * r**2, _HUBER_DELTA * (r - 0.5 * _HUBER_DELTA))))


def _local_fits(
    n: FloatArray, md: FloatArray, loss: FloatArray, starts: Iterable[Sequence[float]], method: str
) -> list[tuple[float, FloatArray]]:
    """(objective, raw parameters) of every start that converged, best first."""
    fits = []
    for start in starts:
        raw = _fit_raw_once(n, md, loss, np.asarray(start, dtype=float), method)
        if raw is not None:
            fits.append((_objective(_raw_loss(n, md, *raw) - loss, loss, method), raw))
    return sorted(fits, key=lambda fit: fit[0])


def _best_loss_fit(n: FloatArray, md: FloatArray, loss: FloatArray, method: str) -> LossLawFit | None:
    fits = _local_fits(n, md, loss, itertools.product(_GRID_P1, _GRID_P2, _GRID_Q, _GRID_E), "gadre2024")
    if method == "huber":
        # Huber from the distinct least-squares optima (cheap) rather than the whole grid (slow to fail).
        distinct = {tuple(np.round(raw, 6)): raw for _, raw in fits[:_HUBER_N_STARTS * 4]}
        fits = _local_fits(n, md, loss, list(distinct.values())[:_HUBER_N_STARTS], "huber")
    if not fits:
        return None
    best = fits[0][1]
    E, a, b, eta = _raw_to_named(best)
    residuals = _raw_loss(n, md, *best) - loss
    return LossLawFit(E=E, a=a, b=b, eta=eta, residuals=tuple(map(float, residuals)), method=method)


def fit_loss_law(
    compute: npt.ArrayLike, multiplier: npt.ArrayLike, loss: npt.ArrayLike, *, method: str = "gadre2024"
) -> LossLawFit:
    """Fit Eq. (4) to runs given by compute (FLOPs, ``6 N D``), token multiplier (``D / N``) and loss.

    ``method="gadre2024"`` runs the authors' procedure: SciPy ``curve_fit`` (Levenberg-Marquardt,
    unweighted least squares on raw loss, ``maxfev=10000``) from each of their 128 starting points, in
    their parameterisation ``p1 N^q + p2 6^(q/2) D^q + E``, keeping the smallest residual sum of squares.
    ``method="huber"`` (ours) minimises a Huber loss (delta 1e-3) of log-loss residuals, started from the
    best distinct least-squares optima of that grid.

    Raises
    ------
    FitError
        Fewer than 5 runs, a non-positive compute or multiplier, a non-finite value, or no start converged.

    Examples
    --------
    >>> c = np.array([1e17, 1e18, 1e19, 1e20, 4e18]); m = np.array([20.0, 20, 20, 20, 320])
    >>> truth = loss_law(c, m, E=1.8, a=200.0, b=350.0, eta=0.13)
    >>> fit = fit_loss_law(c, m, truth)
    >>> round(fit.E, 3), round(fit.eta, 3)
    (1.8, 0.13)
    """
    if method not in LOSS_FIT_METHODS:
        raise FitError(f"unknown fit method {method!r} (allowed: {', '.join(LOSS_FIT_METHODS)})")
    pts = _validated_points(len(LOSS_LAW_PARAMETERS), compute=compute, multiplier=multiplier, loss=loss)
    n = np.sqrt(pts["compute"] / (6.0 * pts["multiplier"]))
    md = n * pts["multiplier"]
    fit = _best_loss_fit(n, md, pts["loss"], method)
    if fit is None:
        raise FitError(f"loss-law fit did not converge from any of the {128} starting points")
    return fit


def _error_once(loss: FloatArray, error: FloatArray, start: FloatArray) -> FloatArray | None:
    def model(x: FloatArray, epsilon: float, k: float, gamma: float) -> FloatArray:
        return epsilon - k * np.exp(-gamma * x)

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", OptimizeWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            params, _ = curve_fit(model, loss, error, p0=start, maxfev=_MAXFEV)
        except (RuntimeError, ValueError, FloatingPointError):
            return None
        finite = np.all(np.isfinite(params)) and np.all(np.isfinite(model(loss, *params)))
    return params if finite else None


def fit_error_law(loss: npt.ArrayLike, error: npt.ArrayLike) -> ErrorLawFit:
    """Fit Eq. (5), ``error = epsilon - k exp(-gamma loss)``, as the authors do.

    SciPy ``curve_fit`` (Levenberg-Marquardt, unweighted) from SciPy's default start (all ones),
    ``maxfev=10000``, on measured (loss, average top-1 error) pairs.

    Raises
    ------
    FitError
        Fewer than 4 runs, a non-finite value, or the fit did not converge.

    Examples
    --------
    >>> loss = np.array([5.2, 4.3, 3.9, 3.4, 4.6, 2.9])
    >>> fit = fit_error_law(loss, error_law(loss, epsilon=0.85, k=2.1, gamma=0.75))
    >>> round(fit.epsilon, 3), round(fit.gamma, 3)
    (0.85, 0.75)
    """
    pts = _validated_points(len(ERROR_LAW_PARAMETERS), loss=loss, error=error)
    params = _error_once(pts["loss"], pts["error"], np.ones(3))
    if params is None:
        raise FitError("error-law fit did not converge (SciPy curve_fit from the default start, maxfev=10000)")
    epsilon, k, gamma = (float(v) for v in params)
    residuals = error_law(pts["loss"], epsilon=epsilon, k=k, gamma=gamma) - pts["error"]
    return ErrorLawFit(epsilon=epsilon, k=k, gamma=gamma, residuals=tuple(map(float, residuals)))


def relative_error(predicted: npt.ArrayLike, actual: npt.ArrayLike) -> FloatArray:
    """``|predicted - actual| / actual``, the paper's measure of a prediction (Sec. 3.4).

    Examples
    --------
    >>> float(relative_error(2.02, 2.0).round(6))
    0.01
    """
    actual_arr = np.asarray(actual, dtype=float)
    if np.any(actual_arr <= 0) or not np.all(np.isfinite(actual_arr)):
        raise FitError("relative error needs a positive, finite actual value")
    return np.abs(np.asarray(predicted, dtype=float) - actual_arr) / actual_arr
