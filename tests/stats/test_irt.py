"""2PL IRT: recovery of known parameters from simulated data, ability estimates against scipy and a grid."""

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from flasheval.stats.irt import ability_mle, ability_posterior, fisher_information, fit_2pl, probabilities


def _simulate(n_resp, n_items, seed):
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1, n_resp)
    a = rng.lognormal(0, 0.3, n_items)
    b = rng.normal(0, 1, n_items)
    p = 1 / (1 + np.exp(-a * (theta[:, None] - b)))
    return (rng.random(p.shape) < p).astype(float), theta, a, b


def _log_posterior(params, y):
    """The MAP objective written out directly (independent of the module's Fisher-scoring code)."""
    m, n = y.shape
    theta, log_a, b = params[:m], params[m:m + n], params[m + n:]
    z = np.exp(log_a) * (theta[:, None] - b)
    loglik = np.sum(y * z - np.logaddexp(0, z))
    return loglik + stats.norm.logpdf(theta).sum() + stats.norm.logpdf(log_a, scale=0.5).sum() + \
        stats.norm.logpdf(b, scale=2.0).sum()


def test_fit_recovers_known_parameters_of_simulated_data():
    y, theta, a, b = _simulate(600, 40, seed=1)
    fit = fit_2pl(y)
    assert fit.converged
    assert np.corrcoef(fit.difficulty, b)[0, 1] > 0.97
    assert np.corrcoef(fit.discrimination, a)[0, 1] > 0.8
    assert np.corrcoef(fit.ability, theta)[0, 1] > 0.9
    # the joint MAP fit fixes the scale only through the priors, so compare what is scale-free: the
    # probabilities, and the difficulties after matching the abilities' location and scale
    p_true = 1 / (1 + np.exp(-a * (theta[:, None] - b)))
    p_fit = probabilities(fit.ability, fit.discrimination, fit.difficulty)
    assert np.mean(np.abs(p_fit - p_true)) < 0.06
    scale = np.std(theta) / np.std(fit.ability)
    shifted = (fit.difficulty - fit.ability.mean()) * scale + theta.mean()
    assert np.median(np.abs(shifted - b)) < 0.25


def test_fit_is_a_stationary_point_of_the_map_objective_and_deterministic():
    y, *_ = _simulate(40, 12, seed=2)
    fit = fit_2pl(y, tol=1e-8)
    x = np.concatenate([fit.ability, np.log(fit.discrimination), fit.difficulty])
    grad = optimize.approx_fprime(x, _log_posterior, 1e-6, y)
    assert np.abs(grad).max() < 1e-3
    again = fit_2pl(y, tol=1e-8)
    assert np.array_equal(again.difficulty, fit.difficulty) and np.array_equal(again.ability, fit.ability)


def test_ability_mle_agrees_with_scipy_and_a_brute_force_grid():
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(0, 0.3, 30), rng.normal(0, 1, 30)
    y = (rng.random(30) < probabilities(0.7, a, b)).astype(float)

    def nll(t, prior_sd=None):
        z = a * (t - b)
        out = -np.sum(y * z - np.logaddexp(0, z))
        return out if prior_sd is None else out + 0.5 * (t / prior_sd) ** 2

    ours = ability_mle(y, a, b)
    assert ours == pytest.approx(optimize.minimize_scalar(nll, bounds=(-6, 6), method="bounded",
                                                          options={"xatol": 1e-10}).x, abs=1e-6)
    grid = np.linspace(-6, 6, 120_001)
    assert ours == pytest.approx(grid[np.argmin([nll(t) for t in grid[::1]])], abs=2e-4)
    assert ability_mle(y, a, b, prior_sd=1.0) == pytest.approx(
        optimize.minimize_scalar(lambda t: nll(t, 1.0), bounds=(-6, 6), method="bounded",
                                 options={"xatol": 1e-10}).x, abs=1e-6)
    with pytest.raises(ValueError, match="infinite"):
        ability_mle(np.ones(30), a, b)


def test_ability_posterior_matches_numerical_integration():
    a, b = np.array([1.0, 2.0, 0.5, 1.5]), np.array([-1.0, 0.0, 0.5, 1.0])
    y = np.array([1.0, 1.0, 0.0, 0.0])

    def density(t):
        p = 1 / (1 + np.exp(-a * (t - b)))
        return np.prod(p**y * (1 - p) ** (1 - y)) * stats.norm.pdf(t)

    norm = integrate.quad(density, -10, 10)[0]
    mean = integrate.quad(lambda t: t * density(t), -10, 10)[0] / norm
    var = integrate.quad(lambda t: (t - mean) ** 2 * density(t), -10, 10)[0] / norm
    eap, sd, _ = ability_posterior(y, a, b)
    assert eap == pytest.approx(mean, abs=1e-4) and sd == pytest.approx(np.sqrt(var), abs=1e-4)


def test_fisher_information_is_the_negative_second_derivative_of_the_log_likelihood():
    a, b, t, h = np.array([0.7, 1.9]), np.array([0.3, -0.4]), 0.2, 1e-4

    def loglik(th, y):
        z = a * (th - b)
        return y * z - np.logaddexp(0, z)

    # expected information = E[-d2 loglik / dtheta2], the same for y = 0 and y = 1 in the 2PL
    second = (loglik(t + h, 1.0) - 2 * loglik(t, 1.0) + loglik(t - h, 1.0)) / h**2
    assert fisher_information(t, a, b) == pytest.approx(-second, rel=1e-5)
