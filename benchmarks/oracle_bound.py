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

``--estimator greg-neighbours`` is the model-assisted trial of issue 11 item 5: a GREG
(regression) estimator with two covariates, the pool mean and the mean score of the
``--neighbours`` pool models whose full-data aggregates are nearest the held-out model's (the
oracle knows the full-data aggregate; a method would take its current estimate).

Then flasheval's backtest runs on the same reference (or ``--backtest-record FILE`` reads a
``flasheval backtest`` record) and the method's median and total savings are printed as
fractions of the oracle's.

Run: ``python benchmarks/oracle_bound.py REFERENCE [--draws 200] [--models N] [--tiers default]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.placement.backtest import backtest, full_data_ranks  # noqa: E402
from flasheval.placement.tiers import TierPlan, load_tier_plan  # noqa: E402
from flasheval.records import read_record  # noqa: E402
from flasheval.reference import ReferenceLeaderboard, load_reference  # noqa: E402
from flasheval.stats.ranking import aggregate, rank_among  # noqa: E402

ESTIMATORS = ("control-variate", "greg-neighbours")


def size_grid(max_size: int) -> np.ndarray:
    """Examples per dataset tried: 5..100 by 5, to 200 by 10, to 500 by 25, to 1000 by 50, then by 100, then all."""
    parts = [np.arange(5, 101, 5), np.arange(110, 201, 10), np.arange(225, 501, 25), np.arange(550, 1001, 50),
             np.arange(1100, max_size, 100)]
    grid = np.unique(np.concatenate(parts))
    return np.append(grid[grid < max_size], max_size)


def draw_orders(sizes: list[int], n_draws: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Per dataset, ``(n_draws, N_d)`` random permutations (int32)."""
    return [rng.permuted(np.tile(np.arange(n, dtype=np.int32), (n_draws, 1)), axis=1) for n in sizes]


def _prefix_means(values: np.ndarray, order: np.ndarray, take: np.ndarray) -> np.ndarray:
    """``(..., n_draws, len(take))`` means of ``values[..., order[:, :n]]`` for each n in ``take``."""
    csum = np.cumsum(values[..., order], axis=-1)
    return csum[..., take - 1] / take


def regression_estimates(y: np.ndarray, covariates: np.ndarray, order: np.ndarray, take: np.ndarray) -> np.ndarray:
    """GREG (regression) estimates of ``mean(y)`` from the prefixes ``order[:, :n]``, ``(n_draws, len(take))``.

    ``ybar_S + b' (xbar_full - xbar_S)``, ``b`` the least-squares slopes of ``y`` on the ``q``
    covariates (rows of ``covariates``, ``(q, N)``) on the subsample; a singular fit (e.g. a
    constant covariate in a tiny subsample) falls back to ``b = 0``.
    """
    q = covariates.shape[0]
    ybar = _prefix_means(y, order, take)
    xbar = _prefix_means(covariates, order, take)                          # (q, R, G)
    xy = _prefix_means(covariates * y, order, take) - xbar * ybar           # (q, R, G)
    xx = np.empty((q, q) + ybar.shape)
    for i in range(q):
        for j in range(i, q):
            xx[i, j] = xx[j, i] = _prefix_means(covariates[i] * covariates[j], order, take) - xbar[i] * xbar[j]
    sxx = np.moveaxis(xx, (0, 1), (-2, -1))                                 # (R, G, q, q)
    sxy = np.moveaxis(xy, 0, -1)[..., None]                                 # (R, G, q, 1)
    ridge = 1e-9 * np.eye(q)
    ok = np.linalg.det(sxx + ridge) > 1e-12
    slopes = np.zeros(sxy.shape)
    slopes[ok] = np.linalg.solve(sxx[ok] + ridge, sxy[ok])
    full = covariates.mean(axis=1)
    return ybar + np.einsum("rgq,qrg->rg", slopes[..., 0], full[:, None, None] - xbar)


def _covariates(reference: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_id: str, d: int, estimator: str,
                n_neighbours: int, aggregate_kind: str | None) -> np.ndarray:
    cv = pool.scores[d].mean(axis=0)
    if estimator == "control-variate":
        return cv[None, :]
    values = pool.aggregate_values(aggregate_kind)
    own = reference.aggregate_values(aggregate_kind)[reference.index(model_id)]
    nearest = np.argsort(np.abs(values - own), kind="stable")[:n_neighbours]
    return np.stack([cv, pool.scores[d][nearest].mean(axis=0)])


def oracle_size(reference: ReferenceLeaderboard, model_id: str, full_rank: int, plan: TierPlan,
                orders: list[np.ndarray], grid: np.ndarray, *, estimator: str = "control-variate",
                n_neighbours: int = 5, aggregate_kind: str | None = None,
                level: float = 0.95) -> tuple[int, np.ndarray]:
    """Smallest grid size whose within-resolution chance is >= ``level``, and the chance at every size."""
    pool = reference.without(model_id)
    sizes = [len(e) for e in reference.example_ids]
    i = reference.index(model_id)
    estimates = np.empty((orders[0].shape[0], len(grid), len(sizes)))
    for d, n_d in enumerate(sizes):
        take = np.minimum(grid, n_d)
        x = _covariates(reference, pool, model_id, d, estimator, n_neighbours, aggregate_kind)
        estimates[:, :, d] = regression_estimates(reference.scores[d][i], x, orders[d], take)
    options = pool.aggregate_options(aggregate_kind)
    full = np.broadcast_to(pool.dataset_means(), estimates.shape[:2] + pool.dataset_means().shape)
    agg = aggregate(np.concatenate([estimates[:, :, None, :], full], axis=2), **options)
    mid = rank_among(agg[..., 0], agg[..., 1:], higher_is_better=pool.ranking_higher_is_better(aggregate_kind))
    placed = np.floor(mid + 0.5).astype(np.int64)
    resolution = np.array([0] + [plan.tier_for(r).resolution for r in range(1, pool.n_models + 2)])
    chance = (np.abs(placed - full_rank) <= resolution[placed]).mean(axis=0)
    reached = np.flatnonzero(chance >= level)
    return int(grid[reached[0]] if len(reached) else grid[-1]), chance


def oracle_bound(reference: ReferenceLeaderboard, plan: TierPlan, *, n_draws: int = 200, seed: int = 0,
                 models: list[str] | None = None, estimator: str = "control-variate", n_neighbours: int = 5,
                 aggregate_kind: str | None = None) -> dict[str, tuple[int, float]]:
    """Per model, the oracle's examples per dataset and its saving (full examples / examples used)."""
    sizes = [len(e) for e in reference.example_ids]
    orders = draw_orders(sizes, n_draws, np.random.default_rng(seed))
    grid = size_grid(max(sizes))
    ranks = full_data_ranks(reference, aggregate_kind)
    out = {}
    for m in models or list(reference.model_ids):
        n, _ = oracle_size(reference, m, ranks[m], plan, orders, grid, estimator=estimator,
                           n_neighbours=n_neighbours, aggregate_kind=aggregate_kind)
        out[m] = (n, sum(sizes) / sum(min(n, s) for s in sizes))
    return out


def _method_savings(args: argparse.Namespace, reference: ReferenceLeaderboard, plan: TierPlan,
                    models: list[str]) -> dict[str, tuple[int, float]]:
    """Examples and saving of flasheval's adaptive method per model, from a record or a fresh backtest."""
    if args.backtest_record:
        rows = read_record(args.backtest_record).payload["rows"]["adaptive"]
        return {r["model_id"]: (r["n_examples"], r["saving"]) for r in rows if r["model_id"] in models}
    result = backtest(reference, plan, load_tier_plan("flash_helm"), seed=args.seed, aggregate=args.aggregate)
    return {r.model_id: (r.n_examples, r.saving) for r in result.rows["adaptive"] if r.model_id in models}


def _savings_line(label: str, used: np.ndarray, savings: np.ndarray, full: int) -> str:
    return (f"{label:<32} median saving {np.median(savings):6.1f}x   total saving {full * len(used) / used.sum():6.1f}x"
            f"   mean examples {used.mean():8.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("--tiers", default="default")
    parser.add_argument("--draws", type=int, default=200, help="random subsamples per model and size")
    parser.add_argument("--models", type=int, default=None, help="only the first N models (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--aggregate", default=None)
    parser.add_argument("--estimator", choices=ESTIMATORS, default="control-variate")
    parser.add_argument("--neighbours", type=int, default=5)
    parser.add_argument("--backtest-record", help="read the method's savings from this backtest record")
    parser.add_argument("--no-backtest", action="store_true", help="print the oracle only")
    args = parser.parse_args(argv)
    reference, plan = load_reference(args.reference), load_tier_plan(args.tiers)
    models = list(reference.model_ids)[: args.models]
    full = sum(len(e) for e in reference.example_ids)
    start = time.perf_counter()
    oracle = oracle_bound(reference, plan, n_draws=args.draws, seed=args.seed, models=models,
                          estimator=args.estimator, n_neighbours=args.neighbours, aggregate_kind=args.aggregate)
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
    method = _method_savings(args, reference, plan, models)
    m_used = np.array([method[m][0] for m in models], dtype=np.float64)
    m_sav = np.array([method[m][1] for m in models])
    print(_savings_line(f"flasheval {plan.name} (backtest)", m_used, m_sav, full))
    print(f"method / oracle: median saving {np.median(m_sav) / np.median(o_sav):.0%}, "
          f"total saving {o_used.sum() / m_used.sum():.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
