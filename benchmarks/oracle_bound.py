"""How far can placement go? An oracle bound on the saving, and the method's share of it.

For each model of a reference, held out in turn against the others (leave-one-out, as in
``flasheval backtest``), the oracle knows the model's full-data rank and gives it the SMALLEST
uniform number ``n`` of examples per dataset (capped by each dataset's size) with at least a
95% chance, over random subsamples, of placing it within its tier's resolution
(``|placed - full| <= k``, ``k`` of the placed rank's tier, as the backtest scores it). The
placement at a size is the control-variate estimate of the new model's per-dataset means
(the default estimator: ``ybar_S + b (cbar_full - cbar_S)``, covariate = the pool's mean score
per example) ranked among the pool's exact full-data aggregates.

Vectorised: per dataset, ``n_draws`` random permutations shared by all models; prefix sums of
the moments along each permutation give the estimate at every size of the grid at once.

Trials of issue 11 item 5 (``--estimator``): ``greg-neighbours``, a model-assisted GREG
(regression) estimator with two covariates, the pool mean and the mean score ``q_i`` of the
``--neighbours`` pool models whose full-data aggregates are nearest the held-out model's (the
oracle knows the full-data aggregate; a method would take its current estimate);
``unequal-neighbours``, the same covariates with unequal-probability sampling: Poisson
sampling with ``pi_i`` proportional to ``max(sqrt(q_i (1 - q_i)), --floor)`` (capped at 1; nested
across sizes through one uniform key per example: example i is in iff ``key_i < pi_i``) and
the Hajek-weighted GREG estimator. Its expected size is ``n``.

Then flasheval's backtest runs on the same reference (or ``--backtest-record FILE`` reads a
``flasheval backtest`` record) and the method's median and total savings are printed as
fractions of the oracle's.

Run: ``python benchmarks/oracle_bound.py REFERENCE [--draws 200] [--models N] [--tiers default]``;
``REFERENCE`` may be ``synthetic:MODELS:N1,N2,...`` (a synthetic 2PL pool, on which the trials' knobs
were chosen).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.analysis.backtest import backtest, full_data_ranks  # noqa: E402
from flasheval.analysis.simulation import synthetic_reference  # noqa: E402
from flasheval.placement.tiers import TierPlan, load_tier_plan  # noqa: E402
from flasheval.records.run_record import read_record  # noqa: E402
from flasheval.reference import ReferenceLeaderboard, load_reference  # noqa: E402
from flasheval.stats.ranking import aggregate, rank_among  # noqa: E402

ESTIMATORS = ("control-variate", "greg-neighbours", "unequal-neighbours")


def size_grid(max_size: int) -> np.ndarray:
    """Examples per dataset tried: 5..100 by 5, to 200 by 10, to 500 by 25, to 1000 by 50, then by 100, then all."""
    parts = [np.arange(5, 101, 5), np.arange(110, 201, 10), np.arange(225, 501, 25), np.arange(550, 1001, 50),
             np.arange(1100, max_size, 100)]
    grid = np.unique(np.concatenate(parts))
    return np.append(grid[grid < max_size], max_size)


def draw_keys(sizes: list[int], n_draws: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Per dataset, ``(n_draws, N_d)`` uniform keys: sorting them gives a random order (nested prefixes)."""
    return [rng.random((n_draws, n)) for n in sizes]


def draw_orders(keys: list[np.ndarray]) -> list[np.ndarray]:
    """Per dataset, the random permutations the keys define (int32)."""
    return [np.argsort(k, axis=1, kind="stable").astype(np.int32) for k in keys]


def _prefix_means(values: np.ndarray, order: np.ndarray, take: np.ndarray) -> np.ndarray:
    """``(..., n_draws, len(take))`` means of ``values[..., order[:, :n]]`` for each n in ``take``."""
    csum = np.cumsum(values[..., order], axis=-1)
    return csum[..., take - 1] / take


def _greg(ybar: np.ndarray, xbar: np.ndarray, xy: np.ndarray, xx: np.ndarray, x_full: np.ndarray) -> np.ndarray:
    """``ybar + b' (x_full - xbar)`` from (weighted) sample moments; ``b`` the least-squares slopes.

    ``ybar (...)``, ``xbar (q, ...)``, centred cross-moments ``xy (q, ...)`` and ``xx (q, q, ...)``;
    a singular fit (e.g. a constant covariate in a tiny subsample) falls back to ``b = 0``.
    """
    q = xbar.shape[0]
    sxx = np.moveaxis(xx, (0, 1), (-2, -1))
    sxy = np.moveaxis(xy, 0, -1)[..., None]
    diag = np.diagonal(sxx, axis1=-2, axis2=-1)
    ok = np.all(diag > 1e-12, axis=-1) & (np.linalg.det(sxx) > 1e-8 * np.prod(diag, axis=-1))
    slopes = np.zeros(sxy.shape)
    slopes[ok] = np.linalg.solve(sxx[ok], sxy[ok])
    gap = np.moveaxis(x_full.reshape((q,) + (1,) * ybar.ndim) - xbar, 0, -1)
    return ybar + np.sum(slopes[..., 0] * gap, axis=-1)


def regression_estimates(y: np.ndarray, covariates: np.ndarray, order: np.ndarray, take: np.ndarray) -> np.ndarray:
    """GREG (regression) estimates of ``mean(y)`` from the prefixes ``order[:, :n]``, ``(n_draws, len(take))``.

    ``ybar_S + b' (xbar_full - xbar_S)``, ``b`` the least-squares slopes of ``y`` on the ``q``
    covariates (rows of ``covariates``, ``(q, N)``) on the subsample.
    """
    q = covariates.shape[0]
    ybar = _prefix_means(y, order, take)
    xbar = _prefix_means(covariates, order, take)                          # (q, R, G)
    xy = _prefix_means(covariates * y, order, take) - xbar * ybar           # (q, R, G)
    xx = np.empty((q, q) + ybar.shape)
    for i in range(q):
        for j in range(i, q):
            xx[i, j] = xx[j, i] = _prefix_means(covariates[i] * covariates[j], order, take) - xbar[i] * xbar[j]
    return _greg(ybar, xbar, xy, xx, covariates.mean(axis=1))


def inclusion_probabilities(size: np.ndarray, n: int) -> np.ndarray:
    """``pi_i = min(1, k size_i)`` with ``sum pi = n`` (probability proportional to size, capped at 1).

    Examples
    --------
    >>> inclusion_probabilities(np.array([1.0, 1.0, 8.0]), 2).round(6).tolist()
    [0.5, 0.5, 1.0]
    """
    if n >= len(size):
        return np.ones(len(size))
    lo, hi = 0.0, 1.0 / size.min()
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if np.minimum(1.0, mid * size).sum() < n else (lo, mid)
    return np.minimum(1.0, hi * size)


def weighted_regression_estimates(y: np.ndarray, covariates: np.ndarray, keys: np.ndarray, size: np.ndarray,
                                  take: np.ndarray) -> np.ndarray:
    """Poisson sampling with ``pi_i`` proportional to ``size`` (nested: example i is in iff ``key_i < pi_i``)
    and the Hajek-weighted GREG estimator (weights ``1 / pi_i``), ``(n_draws, len(take))``."""
    q = covariates.shape[0]
    cols = [np.ones_like(y), y, *covariates, *(covariates * y)]
    cols += [covariates[i] * covariates[j] for i in range(q) for j in range(i, q)]
    table = np.stack(cols, axis=1).astype(np.float32)                       # (N, k)
    out = np.empty((keys.shape[0], len(take)))
    for g, n in enumerate(take):
        if g and n == take[g - 1]:  # a dataset smaller than the size: the same (full) sample again
            out[:, g] = out[:, g - 1]
            continue
        pi = inclusion_probabilities(size, int(n))
        w = np.where(keys < pi, 1.0 / pi, 0.0).astype(np.float32)          # (R, N)
        m_n = (w @ table).astype(np.float64)
        m = m_n[:, 1:] / np.maximum(m_n[:, :1], 1e-12)                      # weighted means
        ybar, xbar = m[:, 0], m[:, 1:1 + q].T
        xy = m[:, 1 + q:1 + 2 * q].T - xbar * ybar
        xx = np.empty((q, q, len(ybar)))
        k = 1 + 2 * q
        for i in range(q):
            for j in range(i, q):
                xx[i, j] = xx[j, i] = m[:, k] - xbar[i] * xbar[j]
                k += 1
        out[:, g] = np.where(m_n[:, 0] > 0, _greg(ybar, xbar, xy, xx, covariates.mean(axis=1)),
                             covariates[0].mean())  # an empty sample: the first covariate's mean
    return out


def _neighbours(reference: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_id: str, n_neighbours: int,
                aggregate_kind: str | None) -> np.ndarray:
    """Rows of the pool models whose full-data aggregates are nearest the held-out model's (oracle knowledge)."""
    own = reference.aggregate_values(aggregate_kind)[reference.index(model_id)]
    return np.argsort(np.abs(pool.aggregate_values(aggregate_kind) - own), kind="stable")[:n_neighbours]


def _estimates(reference: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_id: str, d: int, estimator: str,
               neighbours: np.ndarray, floor: float, order: np.ndarray, keys: np.ndarray | None,
               take: np.ndarray) -> np.ndarray:
    """``(n_draws, len(take))`` estimates of the held-out model's mean on dataset ``d``."""
    y = reference.scores[d][reference.index(model_id)]
    cv = pool.scores[d].mean(axis=0)
    if estimator == "control-variate":
        return regression_estimates(y, cv[None, :], order, take)
    near = pool.scores[d][neighbours].mean(axis=0)
    x = np.stack([cv, near])
    if estimator == "greg-neighbours":
        return regression_estimates(y, x, order, take)
    if keys is None:
        raise ValueError("unequal-probability sampling needs the uniform keys")
    size = np.maximum(np.sqrt(np.clip(near * (1.0 - near), 0.0, None)), floor)
    return weighted_regression_estimates(y, x, keys, size, take)


def oracle_size(reference: ReferenceLeaderboard, model_id: str, full_rank: int, plan: TierPlan,
                orders: list[np.ndarray], grid: np.ndarray, *, keys: list[np.ndarray] | None = None,
                estimator: str = "control-variate", n_neighbours: int = 5, floor: float = 0.1,
                aggregate_kind: str | None = None, level: float = 0.95, chunk: int = 10) -> tuple[int, np.ndarray]:
    """Smallest grid size whose within-resolution chance is >= ``level``, and the chance at the sizes tried.

    Sizes are tried ``chunk`` at a time from the smallest; the search stops in the chunk where the
    chance first reaches ``level`` (the returned chances cover the sizes tried).
    """
    pool = reference.without(model_id)
    sizes = [len(e) for e in reference.example_ids]
    near = _neighbours(reference, pool, model_id, n_neighbours, aggregate_kind)
    options = pool.aggregate_options(aggregate_kind)
    resolution = np.array([0] + [plan.tier_for(r).resolution for r in range(1, pool.n_models + 2)])
    chances = []
    for first in range(0, len(grid), chunk):
        part = grid[first:first + chunk]
        estimates = np.empty((orders[0].shape[0], len(part), len(sizes)))
        for d, n_d in enumerate(sizes):
            estimates[:, :, d] = _estimates(reference, pool, model_id, d, estimator, near, floor, orders[d],
                                            None if keys is None else keys[d], np.minimum(part, n_d))
        full = np.broadcast_to(pool.dataset_means(), estimates.shape[:2] + pool.dataset_means().shape)
        agg = aggregate(np.concatenate([estimates[:, :, None, :], full], axis=2), **options)
        mid = rank_among(agg[..., 0], agg[..., 1:], higher_is_better=pool.ranking_higher_is_better(aggregate_kind))
        placed = np.floor(mid + 0.5).astype(np.int64)
        chances.append((np.abs(placed - full_rank) <= resolution[placed]).mean(axis=0))
        reached = np.flatnonzero(chances[-1] >= level)
        if len(reached):
            return int(part[reached[0]]), np.concatenate(chances)
    return int(grid[-1]), np.concatenate(chances)


def oracle_bound(reference: ReferenceLeaderboard, plan: TierPlan, *, n_draws: int = 200, seed: int = 0,
                 models: list[str] | None = None, estimator: str = "control-variate", n_neighbours: int = 5,
                 floor: float = 0.1, aggregate_kind: str | None = None) -> dict[str, tuple[int, float]]:
    """Per model, the oracle's examples per dataset and its saving (full examples / examples used).

    The tiers are the plan's scaled to the pool (:meth:`TierPlan.for_pool`), as the backtest
    scores placements: the held-out model plus the ``n_models - 1`` others.
    """
    plan = plan.for_pool(reference.n_models)
    sizes = [len(e) for e in reference.example_ids]
    keys = draw_keys(sizes, n_draws, np.random.default_rng(seed))
    orders = draw_orders(keys)
    grid = size_grid(max(sizes))
    ranks = full_data_ranks(reference, aggregate_kind)
    out = {}
    for m in models or list(reference.model_ids):
        n, _ = oracle_size(reference, m, ranks[m], plan, orders, grid, keys=keys, estimator=estimator,
                           n_neighbours=n_neighbours, floor=floor, aggregate_kind=aggregate_kind)
        out[m] = (n, sum(sizes) / sum(min(n, s) for s in sizes))
    return out


def _reference(args: argparse.Namespace) -> ReferenceLeaderboard:
    """A reference by name or path, or ``synthetic:MODELS:N1,N2,...`` (a 2PL pool, for choosing knobs)."""
    if not args.reference.startswith("synthetic:"):
        return load_reference(args.reference)
    _, n_models, sizes = args.reference.split(":")
    return synthetic_reference(int(n_models), [int(s) for s in sizes.split(",")], rng=args.pool_seed,
                               ability_spread=args.ability_spread)


def _method_savings(args: argparse.Namespace, reference: ReferenceLeaderboard, plan: TierPlan,
                    models: list[str]) -> list[tuple[int, dict[str, tuple[int, float]]]]:
    """Per seed, examples and saving of flasheval's adaptive method per model, from a record or a fresh backtest.

    A record of ``flasheval backtest --seeds ...`` gives every seed it holds; a fresh backtest runs ``--seed``.
    """
    if args.backtest_record:
        payload = read_record(args.backtest_record).payload
        runs = payload["seeds"] if "seeds" in payload else [payload]
        return [(run["seed"], {r["model_id"]: (r["n_examples"], r["saving"]) for r in run["rows"]["adaptive"]
                               if r["model_id"] in models}) for run in runs]
    result = backtest(reference, plan, load_tier_plan("flash_helm"), seed=args.seed, aggregate=args.aggregate)
    return [(args.seed, {r.model_id: (r.n_examples, r.saving) for r in result.rows["adaptive"] if r.model_id in models})]


def _savings_line(label: str, used: np.ndarray, savings: np.ndarray, full: int) -> str:
    return (f"{label:<32} median saving {np.median(savings):6.1f}x   total saving {full * len(used) / used.sum():6.1f}x"
            f"   mean examples {used.mean():8.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="name or path, or synthetic:MODELS:N1,N2,... (a synthetic 2PL pool)")
    parser.add_argument("--pool-seed", type=int, default=100, help="synthetic pools: the pool's seed")
    parser.add_argument("--ability-spread", type=float, default=0.5, help="synthetic pools: sd of the abilities")
    parser.add_argument("--tiers", default="default")
    parser.add_argument("--draws", type=int, default=200, help="random subsamples per model and size")
    parser.add_argument("--models", type=int, default=None, help="only the first N models (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--aggregate", default=None)
    parser.add_argument("--estimator", choices=ESTIMATORS, default="control-variate")
    parser.add_argument("--neighbours", type=int, default=5, help="pool models nearest the held-out one (trials)")
    parser.add_argument("--floor", type=float, default=0.1, help="unequal-neighbours: least sampling size measure")
    parser.add_argument("--backtest-record", help="read the method's savings from this backtest record")
    parser.add_argument("--no-backtest", action="store_true", help="print the oracle only")
    args = parser.parse_args(argv)
    reference, plan = _reference(args), load_tier_plan(args.tiers)
    models = list(reference.model_ids)[: args.models]
    full = sum(len(e) for e in reference.example_ids)
    start = time.perf_counter()
    oracle = oracle_bound(reference, plan, n_draws=args.draws, seed=args.seed, models=models,
                          estimator=args.estimator, n_neighbours=args.neighbours, floor=args.floor,
                          aggregate_kind=args.aggregate)
    sizes = [len(e) for e in reference.example_ids]
    o_used = np.array([sum(min(n, s) for s in sizes) for n, _ in oracle.values()], dtype=np.float64)
    o_sav = np.array([s for _, s in oracle.values()])
    per_dataset = np.array([n for n, _ in oracle.values()])
    print(f"oracle on {reference.name}: {len(models)} models held out in turn, {args.draws} draws per size, "
          f"estimator {args.estimator}, plan {plan.name}; {time.perf_counter() - start:.0f} s")
    print(f"oracle examples per dataset: median {np.median(per_dataset):.0f} "
          f"(quartiles {np.percentile(per_dataset, 25):.0f}-{np.percentile(per_dataset, 75):.0f})")
    print(_savings_line("oracle (uniform n per dataset)", o_used, o_sav, full))
    if args.no_backtest:
        return 0
    shares = []
    for seed, method in _method_savings(args, reference, plan, models):
        m_used = np.array([method[m][0] for m in models], dtype=np.float64)
        m_sav = np.array([method[m][1] for m in models])
        shares.append((np.median(m_sav) / np.median(o_sav), o_used.sum() / m_used.sum()))
        print(_savings_line(f"flasheval {plan.name}, seed {seed}", m_used, m_sav, full))
        print(f"method / oracle, seed {seed}: median saving {shares[-1][0]:.0%}, total saving {shares[-1][1]:.0%}")
    if len(shares) > 1:
        mean = np.mean(shares, axis=0)
        print(f"method / oracle, mean over {len(shares)} seeds: median saving {mean[0]:.0%}, total saving {mean[1]:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
