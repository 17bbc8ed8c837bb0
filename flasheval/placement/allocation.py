"""How a look's examples are split across datasets: uniform, or Neyman allocation with costs.

``uniform`` (the default) gives every dataset the stage's size ``s`` (capped by its size ``N_d``).
``neyman-cost`` spends the SAME cost as the uniform look, ``B = sum_d c_d min(s, N_d)`` with
``c_d`` the mean tokens per example of dataset ``d`` (1 when the reference records no tokens),
where it buys the most variance reduction per token. The aggregate the rank is built on is
``sum_d w_d mean_d`` (``w_d`` = 1 for the plain mean over datasets, ``1 / (1 - baseline_d)``
for the centered one, up to a common factor), so its variance under sampling without
replacement is ``V(n) = sum_d w_d^2 S_d^2 (1/n_d - 1/N_d)``, ``S_d`` the per-example spread of
the estimator's residual. Minimising ``V`` subject to ``sum_d c_d n_d <= B`` gives
``n_d proportional to w_d S_d / sqrt(c_d)`` (Neyman 1934; Cochran, *Sampling Techniques*, 3rd ed.,
sec. 5.5), clipped to ``[L_d, N_d]``. The issue's ``N_d S_d / sqrt(c_d)`` is the same rule for an
example-weighted total (``w_d`` proportional to ``N_d``); flasheval's aggregates weigh datasets
equally, so ``N_d`` does not enter.

Nesting: each dataset's subsample stays a prefix of its seeded order because the lower bound
``L_d`` is what is already scored (and at least the plan's first stage), so allocations only
grow from look to look. Integer counts: the continuous optimum is floored, the
leftover budget goes one example at a time to the dataset with the largest variance reduction
per cost that still fits, then single examples are moved between datasets while that lowers
the variance (a local search: the integer problem is a knapsack, so this is near-optimal; the
tests compare it with a brute-force optimum).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ALLOCATIONS", "neyman_cost_allocation", "allocation_variance", "residual_spreads"]

ALLOCATIONS: tuple[str, ...] = ("uniform", "neyman-cost")


def allocation_variance(n: Sequence[float], sizes: Sequence[int], *, spreads: Sequence[float],
                        weights: Sequence[float] | None = None) -> float:
    """``sum_d w_d^2 S_d^2 (1/n_d - 1/N_d)``: variance of the weighted aggregate (see the module docstring).

    Examples
    --------
    >>> round(allocation_variance([10, 20], [100, 20], spreads=[1.0, 1.0]), 6)
    0.09
    """
    n_arr, big_n = np.asarray(n, dtype=np.float64), np.asarray(sizes, dtype=np.float64)
    w = np.ones_like(n_arr) if weights is None else np.asarray(weights, dtype=np.float64)
    s2 = (w * np.asarray(spreads, dtype=np.float64)) ** 2
    with np.errstate(divide="ignore"):
        per = np.where(s2 > 0, s2 * (1.0 / n_arr - 1.0 / big_n), 0.0)
    return float(per.sum())


def neyman_cost_allocation(budget: float, sizes: Sequence[int], *, spreads: Sequence[float],
                           costs: Sequence[float] | None = None, weights: Sequence[float] | None = None,
                           lower: Sequence[int] | None = None) -> list[int]:
    """Examples per dataset minimising the aggregate's variance for a cost ``budget``.

    Parameters
    ----------
    budget
        Total cost allowed, ``sum_d costs[d] * n_d <= budget``.
    sizes
        Examples in each dataset (``N_d``, upper bounds).
    spreads
        Per-example standard deviation ``S_d`` of each dataset's estimator residual (>= 0).
    costs
        Cost of one example of each dataset (> 0; default 1 = count examples).
    weights
        Weight ``w_d`` of each dataset in the aggregate (default 1).
    lower
        Least examples per dataset (e.g. those already scored); capped by ``sizes``. When the
        lower bounds alone exceed the budget they are returned as they are.

    Returns
    -------
    list of int
        ``n_d`` with ``lower_d <= n_d <= N_d``.

    Examples
    --------
    >>> neyman_cost_allocation(300, [1000, 1000], spreads=[0.5, 0.25], lower=[20, 20])
    [200, 100]
    >>> neyman_cost_allocation(300, [1000, 1000], spreads=[0.5, 0.5], costs=[1.0, 4.0], lower=[20, 20])
    [100, 50]
    """
    big_n = np.asarray(sizes, dtype=np.int64)
    n_d = len(big_n)
    c = np.ones(n_d) if costs is None else np.asarray(costs, dtype=np.float64)
    w = np.ones(n_d) if weights is None else np.asarray(weights, dtype=np.float64)
    s = np.asarray(spreads, dtype=np.float64)
    low = np.minimum(np.zeros(n_d, dtype=np.int64) if lower is None else np.asarray(lower, dtype=np.int64), big_n)
    if not (len(c) == len(w) == len(s) == len(low) == n_d):
        raise ValueError("sizes, spreads, costs, weights and lower need one entry per dataset")
    if np.any(c <= 0) or np.any(s < 0) or np.any(big_n < 1):
        raise ValueError("costs must be > 0, spreads >= 0 and sizes >= 1")
    if float(c @ big_n) <= budget:
        return big_n.tolist()
    if float(c @ low) >= budget:
        return low.tolist()
    a = w * s / np.sqrt(c)

    def spent(lam: float) -> float:
        return float(c @ np.clip(lam * a, low, big_n))

    lo_lam, hi_lam = 0.0, 1.0
    while spent(hi_lam) < budget and hi_lam < 1e300:
        hi_lam *= 2.0
    for _ in range(200):  # bisection: spent() is continuous and non-decreasing in lambda
        mid = 0.5 * (lo_lam + hi_lam)
        lo_lam, hi_lam = (mid, hi_lam) if spent(mid) < budget else (lo_lam, mid)
    n = np.clip(np.floor(np.clip(lo_lam * a, low, big_n) + 1e-9).astype(np.int64), low, big_n)
    ws2 = (w * s) ** 2
    n = _fill(n, big_n, c, ws2, budget - float(c @ n))
    return _exchange(n, low, big_n, c, ws2, budget).tolist()


def _fill(n: np.ndarray, big_n: np.ndarray, c: np.ndarray, ws2: np.ndarray, left: float) -> np.ndarray:
    """Spend the leftover budget one example at a time on the best variance reduction per cost."""
    n = n.copy()
    while True:
        fits = (n < big_n) & (c <= left + 1e-9)
        if not fits.any():
            return n
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.where(n > 0, ws2 * (1.0 / np.maximum(n, 1) - 1.0 / (n + 1)), np.inf) / c
        gain[~fits] = -1.0
        d = int(np.argmax(gain))
        n[d] += 1
        left -= c[d]


def _exchange(n: np.ndarray, low: np.ndarray, big_n: np.ndarray, c: np.ndarray, ws2: np.ndarray,
              budget: float) -> np.ndarray:
    """Move single examples between datasets (then refill) while that lowers the variance."""
    def term(k: np.ndarray) -> np.ndarray:  # ws2 / k, with 0 for a zero spread and a large value for k <= 0
        return np.where(ws2 > 0, ws2 / np.maximum(k, 1e-300), 0.0)

    for _ in range(10 * int(big_n.sum())):
        drop = term(n - 1) - term(n)  # variance added by removing one example of d
        drop[n - 1 < low] = np.inf
        add = term(n + 1) - term(n)  # variance change (<= 0) by adding one example of e
        add[n + 1 > big_n] = np.inf
        left = budget - float(c @ n)
        delta = drop[:, None] + add[None, :]
        delta[c[None, :] - c[:, None] > left + 1e-9] = np.inf
        np.fill_diagonal(delta, np.inf)
        d, e = np.unravel_index(int(np.argmin(delta)), delta.shape)
        if not delta[d, e] < -1e-15:
            return n
        n[d] -= 1
        n[e] += 1
        n = _fill(n, big_n, c, ws2, budget - float(c @ n))
    return n


def residual_spreads(scores: Sequence[np.ndarray]) -> list[float]:
    """Per dataset, the pool's typical per-example residual spread under the control variate.

    For each pool model, its scores on every example are regressed on the pool's mean score
    per example (the control variate's covariate); ``S_d`` is the root mean square of the
    residuals over models and examples. Known before the new model is scored, so the
    allocation is fixed in advance and nested across looks.

    Examples
    --------
    >>> s = np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 1.0]])
    >>> [round(x, 3) for x in residual_spreads([s])]
    [0.213]
    """
    out = []
    for s in scores:
        s = np.asarray(s, dtype=np.float64)
        cov = s.mean(axis=0)
        cc = cov - cov.mean()
        var_c = float(cc @ cc)
        resid = s - s.mean(axis=1, keepdims=True)  # centred rows, then made the residuals in place
        slope = (resid @ cc) / var_c if var_c > 1e-12 else np.zeros(s.shape[0])
        # the same operations as ``mean((yc - slope cc) ** 2)`` on the same contiguous array, so the same bits,
        # without three more temporaries of the matrix's size (a pool of thousands: hundreds of MB)
        buf = np.empty((max(1, min(32_768 // max(len(cc), 1), len(resid))), len(cc)))  # a block that stays in cache
        for i in range(0, len(resid), len(buf)):
            part = resid[i:i + len(buf)]
            np.multiply(slope[i:i + len(buf), None], cc[None, :], out=buf[:len(part)])
            np.subtract(part, buf[:len(part)], out=part)
            np.square(part, out=part)
        out.append(float(np.sqrt(np.mean(resid))))
    return out
