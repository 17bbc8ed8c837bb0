"""Two-parameter logistic (2PL) item response theory: fit, ability estimates, Fisher information.

Model: respondent (model) ``m`` answers item (example) ``i`` correctly with probability
``p_mi = sigmoid(a_i (theta_m - b_i))``, ``a_i > 0`` the discrimination, ``b_i`` the difficulty,
``theta_m`` the ability (Lord, 1980; the model behind tinyBenchmarks, metabench and Fluid
Benchmarking, Hofmann et al., 2025).

:func:`fit_2pl` estimates every parameter jointly by maximum a posteriori with weak priors
(``theta ~ N(0, 1)`` fixes the scale, ``log a ~ N(0, 0.5^2)``, ``b ~ N(0, 2^2)``) using
alternating Fisher-scoring steps (items, then abilities), vectorised; deterministic (fixed start
from the observed accuracies).
Fractional scores in ``[0, 1]`` enter as a Bernoulli quasi-likelihood. Fluid Benchmarking fits
by marginal maximum likelihood; the joint MAP fit is simpler and close for the item counts here.

:func:`ability_posterior` is the posterior of one new respondent's ability on a grid (EAP and
posterior SD, as adaptive testing uses), :func:`ability_mle` its maximum-likelihood (or MAP)
estimate by Newton's method, and :func:`fisher_information` the item information
``a_i^2 p_i (1 - p_i)`` that picks the next item.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_expit

__all__ = ["IRTFit", "fit_2pl", "probabilities", "fisher_information", "ability_posterior", "ability_mle"]

_PRIOR_LOG_A_SD = 0.5
_PRIOR_B_SD = 2.0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class IRTFit:
    """A fitted 2PL model."""

    discrimination: np.ndarray
    """``a_i > 0``, ``(n_items,)``."""
    difficulty: np.ndarray
    """``b_i``, ``(n_items,)``."""
    ability: np.ndarray
    """``theta_m`` of the respondents the model was fitted on, ``(n_respondents,)``."""
    converged: bool
    n_iter: int
    """Alternating sweeps run."""


def probabilities(ability: np.ndarray | float, discrimination: np.ndarray, difficulty: np.ndarray) -> np.ndarray:
    """``sigmoid(a (theta - b))``, broadcast as ``(..., n_items)`` for abilities of shape ``(...)``.

    Examples
    --------
    >>> probabilities(0.0, np.array([1.0, 2.0]), np.array([0.0, 1.0])).round(3).tolist()
    [0.5, 0.119]
    """
    theta = np.asarray(ability, dtype=np.float64)[..., None]
    return expit(discrimination * (theta - difficulty))


def fisher_information(ability: float, discrimination: np.ndarray, difficulty: np.ndarray) -> np.ndarray:
    """Item information at ``ability``: ``a^2 p (1 - p)``.

    Examples
    --------
    >>> fisher_information(0.0, np.array([1.0, 2.0]), np.array([0.0, 0.0])).tolist()
    [0.25, 1.0]
    """
    p = probabilities(ability, discrimination, difficulty)
    return discrimination**2 * p * (1.0 - p)


def _item_step(y: np.ndarray, theta: np.ndarray, log_a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One Fisher-scoring step for every item's ``(log a, b)`` at fixed abilities (2x2 solve per item)."""
    a = np.exp(log_a)
    z = a[None, :] * (theta[:, None] - b[None, :])
    p = expit(z)
    r, w = p - y, p * (1.0 - p)
    g_la = np.sum(r * z, axis=0) + log_a / _PRIOR_LOG_A_SD**2
    g_b = -a * r.sum(axis=0) + b / _PRIOR_B_SD**2
    h_aa = np.sum(w * z * z, axis=0) + 1.0 / _PRIOR_LOG_A_SD**2
    h_bb = a * a * w.sum(axis=0) + 1.0 / _PRIOR_B_SD**2
    h_ab = -a * np.sum(w * z, axis=0)
    det = h_aa * h_bb - h_ab * h_ab
    step_la = (h_bb * g_la - h_ab * g_b) / det
    step_b = (h_aa * g_b - h_ab * g_la) / det
    return np.clip(step_la, -0.5, 0.5), np.clip(step_b, -1.0, 1.0)


def _item_objective(y: np.ndarray, theta: np.ndarray, log_a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per item: negative log posterior of ``(log a, b)`` at fixed abilities."""
    z = np.exp(log_a)[None, :] * (theta[:, None] - b[None, :])
    nll = -np.sum(y * log_expit(z) + (1.0 - y) * log_expit(-z), axis=0)
    return nll + 0.5 * (log_a / _PRIOR_LOG_A_SD) ** 2 + 0.5 * (b / _PRIOR_B_SD) ** 2


def _ability_step(y: np.ndarray, theta: np.ndarray, a: np.ndarray, b: np.ndarray, precision: float) -> np.ndarray:
    """One Newton step for every respondent's ability at fixed item parameters."""
    p = expit(a[None, :] * (theta[:, None] - b[None, :]))
    grad = (p - y) @ a + precision * theta
    hess = (p * (1.0 - p)) @ (a * a) + precision
    return np.clip(grad / hess, -1.0, 1.0)


def fit_2pl(responses: np.ndarray, *, max_iter: int = 1000, tol: float = 1e-4, start: IRTFit | None = None) -> IRTFit:
    """Joint MAP fit of a 2PL model to ``responses`` ``(n_respondents, n_items)`` in ``[0, 1]``.

    Alternates a Fisher-scoring step for all items (given the abilities) and a Newton step for
    all abilities (given the items), vectorised, until no parameter moves by more than ``tol``.

    Examples
    --------
    >>> y = (np.random.default_rng(0).random((30, 8)) < np.linspace(0.1, 0.9, 8)).astype(float)
    >>> fit = fit_2pl(y)
    >>> bool(fit.converged), bool(fit.difficulty[0] > fit.difficulty[-1])  # harder items have larger b
    (True, True)
    """
    y = np.asarray(responses, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 1:
        raise ValueError(f"responses must be (n_respondents >= 2, n_items >= 1), got {y.shape}")
    if not np.all(np.isfinite(y)) or np.any((y < 0) | (y > 1)):
        raise ValueError("responses must lie in [0, 1]")
    n_resp, n_items = y.shape
    acc = np.clip(y.mean(axis=1), 0.5 / n_items, 1 - 0.5 / n_items)
    logit_acc = np.log(acc / (1 - acc))
    theta = (logit_acc - logit_acc.mean()) / (logit_acc.std() or 1.0)
    item = np.clip(y.mean(axis=0), 0.5 / n_resp, 1 - 0.5 / n_resp)
    b = np.clip(-np.log(item / (1 - item)), -3 * _PRIOR_B_SD, 3 * _PRIOR_B_SD)
    log_a = np.zeros(n_items)
    if start is not None:
        if start.ability.shape != (n_resp,) or start.difficulty.shape != (n_items,):
            raise ValueError("start must be a fit with the same numbers of respondents and items")
        theta, b, log_a = start.ability.copy(), start.difficulty.copy(), np.log(start.discrimination)
    converged = False
    for n_iter in range(1, max_iter + 1):
        step_la, step_b = _item_step(y, theta, log_a, b)
        before = _item_objective(y, theta, log_a, b)
        for _ in range(20):  # halve the step of any item whose objective would rise (no 2-cycles)
            worse = _item_objective(y, theta, log_a - step_la, b - step_b) > before + 1e-12
            if not worse.any():
                break
            step_la, step_b = np.where(worse, step_la / 2, step_la), np.where(worse, step_b / 2, step_b)
        log_a, b = log_a - step_la, b - step_b
        step_t = _ability_step(y, theta, np.exp(log_a), b, 1.0)
        theta = theta - step_t
        if max(np.abs(step_la).max(), np.abs(step_b).max(), np.abs(step_t).max()) < tol:
            converged = True
            break
    return IRTFit(discrimination=np.exp(log_a), difficulty=b, ability=theta, converged=converged, n_iter=n_iter)


def ability_posterior(responses: np.ndarray, discrimination: np.ndarray, difficulty: np.ndarray, *,
                      grid: np.ndarray | None = None, prior_sd: float = 1.0) -> tuple[float, float, np.ndarray]:
    """Posterior of one respondent's ability on a grid (normal prior): EAP, posterior SD, weights.

    Examples
    --------
    >>> a, b = np.ones(4), np.zeros(4)
    >>> eap, sd, w = ability_posterior(np.array([1.0, 1.0, 0.0, 1.0]), a, b)
    >>> bool(eap > 0), bool(0 < sd < 1), round(float(w.sum()), 6)
    (True, True, 1.0)
    """
    g = np.linspace(-6.0, 6.0, 481) if grid is None else np.asarray(grid, dtype=np.float64)
    y = np.asarray(responses, dtype=np.float64)
    z = discrimination[None, :] * (g[:, None] - difficulty[None, :])
    log_post = (y * log_expit(z) + (1 - y) * log_expit(-z)).sum(axis=1) - 0.5 * (g / prior_sd) ** 2
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    eap = float(w @ g)
    return eap, float(np.sqrt(max(w @ (g - eap) ** 2, 0.0))), w


def ability_mle(responses: np.ndarray, discrimination: np.ndarray, difficulty: np.ndarray, *,
                prior_sd: float | None = None, max_iter: int = 100) -> float:
    """Maximum-likelihood ability (MAP with a ``N(0, prior_sd^2)`` prior when given), by Newton's method.

    The MLE is infinite when every response is 1 (or 0); use a prior then.

    Examples
    --------
    >>> round(ability_mle(np.array([1.0, 0.0]), np.ones(2), np.array([-1.0, 1.0])), 6)
    0.0
    """
    y = np.asarray(responses, dtype=np.float64)
    precision = 0.0 if prior_sd is None else 1.0 / prior_sd**2
    if precision == 0.0 and (np.all(y >= 1) or np.all(y <= 0)):
        raise ValueError("the MLE is infinite for all-correct or all-wrong responses; give prior_sd")
    theta = 0.0
    for _ in range(max_iter):
        p = probabilities(theta, discrimination, difficulty)
        grad = float(discrimination @ (y - p)) - precision * theta
        hess = float(discrimination**2 @ (p * (1 - p))) + precision
        step = float(np.clip(grad / hess, -1.0, 1.0))
        theta += step
        if abs(step) < 1e-10:
            break
    return theta
