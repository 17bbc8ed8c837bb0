"""The control-variate (regression) estimator of a model's full-data mean per dataset, with paired replicates.

The reference models' scores are known on every example, so the pool's mean score on an example (its
difficulty) is a covariate whose full-data mean is exact: ``ybar_S + b * (cbar_full - cbar_S)``, with
``b`` refitted on every replicate (module :mod:`flasheval.stats.bootstrap`, "Two estimators").
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from flasheval.stats.resampling import floor_variance, resample_counts

__all__ = ["control_variate_means"]


def control_variate_means(
    new_scores: Sequence[np.ndarray],
    covariates: Sequence[np.ndarray],
    covariate_full_means: Sequence[float],
    *,
    population_sizes: Sequence[int | None] | None = None,
    n_resamples: int = 1000,
    rng: int | np.random.Generator | None = None,
    score_bounds: Sequence[tuple[float, float]] | None = None,
    pseudo_count: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Regression (control-variate) estimates of a model's full-data mean per dataset, and replicates.

    Parameters
    ----------
    new_scores
        Per dataset, ``(n_d,)`` scores of the model on its subsample.
    covariates
        Per dataset, ``(n_d,)`` covariate on the same examples (e.g. the pool's mean score).
    covariate_full_means
        Per dataset, the covariate's mean over the whole dataset (known).
    population_sizes, n_resamples, rng
        As in :func:`bootstrap_dataset_means` (same child streams, so the same seed resamples
        the same indices).
    score_bounds
        Per dataset, the ends ``(lo, hi)`` of the score range (default ``(0, 1)``), for the
        small-sample floor (module docstring).
    pseudo_count
        Pseudo-examples of the floor (0 = no floor).

    Returns
    -------
    observed : numpy.ndarray
        ``(n_datasets,)`` estimates ``ybar + b (cbar_full - cbar)``.
    replicates : numpy.ndarray
        ``(n_resamples, n_datasets)``, finite-population corrected.

    Examples
    --------
    >>> y, c = np.array([1.0, 0.0, 1.0, 0.0]), np.array([0.9, 0.1, 0.7, 0.3])
    >>> obs, rep = control_variate_means([y], [c], [0.6], n_resamples=10, rng=0)
    >>> round(float(obs[0]), 3)  # ybar 0.5 corrected by slope 1.5 times (0.6 - 0.5)
    0.65
    """
    sizes = list(population_sizes) if population_sizes is not None else [None] * len(new_scores)
    streams = np.random.default_rng(rng).spawn(len(new_scores))
    observed = np.empty(len(new_scores))
    replicates = np.empty((n_resamples, len(new_scores)))
    for d, (y, c, cbar, size, stream) in enumerate(zip(new_scores, covariates, covariate_full_means, sizes, streams)):
        y, c = np.asarray(y, dtype=np.float64), np.asarray(c, dtype=np.float64)
        n = len(y)
        if c.shape != y.shape or n < 1:
            raise ValueError(f"dataset {d}: covariate and scores must have the same non-empty shape")
        design = np.stack([y, c, y * c, c * c]).astype(np.float32)  # moments for the slope
        obs_m = design.astype(np.float64).mean(axis=1)
        observed[d] = _cv_estimate(obs_m[None, :], cbar)[0]
        shrink = 1.0 if size is None else math.sqrt(max(0.0, 1.0 - n / size))
        if shrink == 0.0:
            replicates[:, d] = observed[d]
            continue
        counts = resample_counts(n, n_resamples, stream)
        moments = (counts @ design.T).astype(np.float64) / n
        var_c = c.var()
        residual = y.var() - (np.mean((y - y.mean()) * (c - c.mean())) ** 2 / var_c if var_c > 1e-9 else 0.0)
        bounds = (0.0, 1.0) if score_bounds is None else score_bounds[d]
        extra = floor_variance(max(residual, 0.0), float(y.mean()), n, bounds, pseudo_count=pseudo_count)
        jitter = math.sqrt(extra) * stream.standard_normal(n_resamples) if extra > 0 else 0.0
        replicates[:, d] = observed[d] + shrink * (_cv_estimate(moments, cbar) - observed[d] + jitter)
    return observed, replicates


def _cv_estimate(moments: np.ndarray, cbar_full: float) -> np.ndarray:
    """``ybar + b (cbar_full - cbar)`` from moment columns (ybar, cbar, mean yc, mean cc)."""
    ybar, cbar, yc, cc = moments.T
    var_c = cc - cbar * cbar
    cov = yc - ybar * cbar
    slope = np.divide(cov, var_c, out=np.zeros_like(cov), where=var_c > 1e-9)
    return ybar + slope * (cbar_full - cbar)
