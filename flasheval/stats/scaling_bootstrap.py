"""Case-bootstrap intervals for the scaling-law fits of :mod:`flasheval.stats.scaling`.

Each replicate refits a law (Eq. 4 by :func:`bootstrap_loss_law`, Eq. 5 by
:func:`bootstrap_error_law`) to the fitted runs drawn with replacement, starting from the full-data
fit; the replicate parameters are then evaluated at any point at once (vectorized, with
:func:`~flasheval.stats.scaling.loss_law` / :func:`~flasheval.stats.scaling.error_law`), so every
prediction gets a percentile interval (:func:`percentile_interval`). numpy/scipy only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from flasheval.stats.scaling import (
    ERROR_LAW_PARAMETERS,
    LOSS_LAW_PARAMETERS,
    ErrorLawFit,
    FitError,
    FloatArray,
    LossLawFit,
    _error_once,
    _fit_raw_once,
    _named_to_raw,
    _raw_to_named,
    _validated_points,
)

__all__ = [
    "BootstrapFits",
    "bootstrap_loss_law",
    "bootstrap_error_law",
    "percentile_interval",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class BootstrapFits:
    """Parameters refitted on bootstrap resamples of the fitted runs."""

    parameters: FloatArray
    """Shape ``(n_converged, n_parameters)``; columns in the law's parameter order."""
    names: tuple[str, ...]
    """Parameter names, one per column."""
    n_resamples: int
    """Resamples drawn (each with at least as many distinct runs as the law has parameters)."""
    n_failed: int
    """Resamples whose refit did not converge; left out of ``parameters``."""

    def __post_init__(self) -> None:
        if self.parameters.ndim != 2 or self.parameters.shape[1] != len(self.names):
            raise ValueError("parameters must be (n_converged, n_parameters)")

    def columns(self) -> dict[str, FloatArray]:
        """The replicate parameters by name (1-d arrays).

        Ready for :func:`~flasheval.stats.scaling.loss_law` / :func:`~flasheval.stats.scaling.error_law`.
        """
        return {name: self.parameters[:, i] for i, name in enumerate(self.names)}


def _resample_indices(
    n_runs: int, n_parameters: int, n_resamples: int, rng: np.random.Generator, groups: FloatArray | None = None
) -> npt.NDArray[np.int64]:
    """``n_resamples`` rows of run indices drawn with replacement that can still identify the law.

    A row is kept when it has at least ``n_parameters`` distinct runs and, if ``groups`` (per-run
    labels, e.g. token multipliers) has several values, at least two of them: with one multiplier
    Eq. (4) cannot separate ``a`` from ``b``. Other rows are drawn again, so the bootstrap is
    conditional on identifiability (see docs/scaling.md).
    """
    kept: list[npt.NDArray[np.int64]] = []
    n_kept = 0
    while n_kept < n_resamples:
        draw = rng.integers(0, n_runs, size=(max(2 * n_resamples, 64), n_runs))
        ordered = np.sort(draw, axis=1)
        ok = 1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1) >= n_parameters
        if groups is not None and np.ptp(groups) > 0:
            ok &= np.ptp(groups[draw], axis=1) > 0
        kept.append(draw[ok])
        n_kept += int(ok.sum())
    return np.concatenate(kept)[:n_resamples]


def _bootstrap(
    refit: Callable[[npt.NDArray[np.int64]], FloatArray | None],
    n_runs: int,
    names: tuple[str, ...],
    *,
    n_resamples: int,
    rng: np.random.Generator | int | None,
    groups: FloatArray | None = None,
) -> BootstrapFits:
    if n_resamples < 1:
        raise FitError(f"n_resamples must be at least 1, got {n_resamples}")
    generator = np.random.default_rng(rng)
    rows = []
    for index in _resample_indices(n_runs, len(names), n_resamples, generator, groups):
        params = refit(index)  # one small nonlinear fit per replicate: not vectorizable
        if params is not None:
            rows.append(params)
    if not rows:
        raise FitError(f"no bootstrap refit converged ({n_resamples} resamples)")
    return BootstrapFits(
        parameters=np.array(rows, dtype=float), names=names, n_resamples=n_resamples, n_failed=n_resamples - len(rows)
    )


def bootstrap_loss_law(
    compute: npt.ArrayLike,
    multiplier: npt.ArrayLike,
    loss: npt.ArrayLike,
    *,
    fit: LossLawFit,
    n_resamples: int = 1000,
    rng: np.random.Generator | int | None = None,
) -> BootstrapFits:
    """Refit Eq. (4) on resamples (with replacement) of the fitted runs.

    A resample must hold at least 4 distinct runs and two token multipliers when the fitted runs have
    several (otherwise ``a`` and ``b`` are not identified); others are drawn again.

    Each replicate starts from the full-data ``fit`` (one local fit, not the 128-start grid, so a
    thousand replicates take seconds) and uses the same method. Returns parameters in
    :data:`LOSS_LAW_PARAMETERS` order.

    Examples
    --------
    >>> from flasheval.stats.scaling import fit_loss_law, loss_law
    >>> c = np.array([1e17, 1e18, 1e19, 1e20, 4e18, 2e19]); m = np.array([20.0, 20, 20, 20, 320, 80])
    >>> y = loss_law(c, m, E=1.8, a=200.0, b=350.0, eta=0.13) * (1 + 0.002 * np.array([1, -1, 1, -1, 0, 1]))
    >>> boot = bootstrap_loss_law(c, m, y, fit=fit_loss_law(c, m, y), n_resamples=50, rng=0)
    >>> boot.parameters.shape[1], boot.n_resamples
    (4, 50)
    """
    pts = _validated_points(len(LOSS_LAW_PARAMETERS), compute=compute, multiplier=multiplier, loss=loss)
    n = np.sqrt(pts["compute"] / (6.0 * pts["multiplier"]))
    md = n * pts["multiplier"]
    start = _named_to_raw(fit)

    def refit(index: npt.NDArray[np.int64]) -> FloatArray | None:
        raw = _fit_raw_once(n[index], md[index], pts["loss"][index], start, fit.method)
        return None if raw is None else np.array(_raw_to_named(raw))

    return _bootstrap(refit, len(n), LOSS_LAW_PARAMETERS, n_resamples=n_resamples, rng=rng, groups=pts["multiplier"])


def bootstrap_error_law(
    loss: npt.ArrayLike,
    error: npt.ArrayLike,
    *,
    fit: ErrorLawFit,
    n_resamples: int = 1000,
    rng: np.random.Generator | int | None = None,
) -> BootstrapFits:
    """Refit Eq. (5) on resamples (with replacement) of the fitted runs, each from the full-data ``fit``.

    Examples
    --------
    >>> from flasheval.stats.scaling import error_law, fit_error_law
    >>> loss = np.array([5.2, 4.3, 3.9, 3.4, 4.6, 2.9])
    >>> err = error_law(loss, epsilon=0.85, k=2.1, gamma=0.75) + 0.003 * np.array([1, -1, 1, -1, 1, -1])
    >>> boot = bootstrap_error_law(loss, err, fit=fit_error_law(loss, err), n_resamples=50, rng=0)
    >>> boot.parameters.shape[1]
    3
    """
    pts = _validated_points(len(ERROR_LAW_PARAMETERS), loss=loss, error=error)
    start = np.array([fit.epsilon, fit.k, fit.gamma])

    def refit(index: npt.NDArray[np.int64]) -> FloatArray | None:
        return _error_once(pts["loss"][index], pts["error"][index], start)

    return _bootstrap(refit, len(pts["loss"]), ERROR_LAW_PARAMETERS, n_resamples=n_resamples, rng=rng)


def percentile_interval(replicates: npt.ArrayLike, *, confidence_level: float = 0.95) -> tuple[FloatArray, FloatArray]:
    """Percentile interval over the first axis (replicates), ignoring non-finite replicates.

    Examples
    --------
    >>> low, high = percentile_interval(np.arange(101.0), confidence_level=0.9)
    >>> round(float(low), 9), round(float(high), 9)
    (5.0, 95.0)
    """
    if not 0 < confidence_level < 1:
        raise FitError(f"confidence_level must be in (0, 1), got {confidence_level}")
    values = np.asarray(replicates, dtype=float)
    values = np.where(np.isfinite(values), values, np.nan)
    if np.any(np.all(np.isnan(values), axis=0)):
        raise FitError("every bootstrap replicate of a prediction is non-finite; no interval")
    alpha = (1 - confidence_level) / 2
    low, high = np.nanquantile(values, [alpha, 1 - alpha], axis=0)
    return low, high
