"""How small can the looks' constant be for the window rule, and what does that cap? Bound, worst case, cap.

Pocock's constant makes EVERY look's interval cover at once. A placement reports only the look where
the window rule stops it, so a smaller constant ``c`` may already give ``P(miss at the stopping look)
<= alpha`` for every true position of the new model. This script measures how much smaller, under the
same normal model of the nested looks as :mod:`flasheval.stats.sequential`: the estimate of the
aggregate at look ``k`` is ``theta + s se_k Z_k`` with ``Z`` standardized Brownian motion at the
reference's own looks (:func:`flasheval.placement.looks.look_plan`, the pool's spreads; ``s`` the
new model's spread relative to the pool's, unknown in advance, so the worst case is taken over
``--scales``), the rank interval is that of ``[T_k - c s se_k, T_k + c s se_k]`` among the pool's
full-data aggregates, the stop is the plan's window rule (a lookup table of
:func:`flasheval.placement.stop_rule.window_rank`), and the worst case is taken over true positions
``theta`` (a grid, and just above and just below every pool model).

A lower bound that needs no simulation: let the truth sit just below the best pool model (true rank
2) and the new model's spread be small against the gaps between pool models. While the interval holds
the best model's score it reaches rank 1 without being ``[1, 1]``, so the rule cannot stop; it stops
the first time ``|Z_k| >= c``: above, it claims ``[1, 1]`` and misses; below, it claims rank 2 and
covers. By symmetry the miss rate is HALF the two-sided crossing probability,
``(1 - P(|Z_k| < c for all k)) / 2``, so any constant with a guaranteed ``alpha`` at the stop needs
``c >= pocock_constant(looks, 2 alpha)`` (computed exactly, :mod:`flasheval.stats.sequential`). The
simulation checks that limit and finds the worst case at moderate spreads, which is larger still.
The plans' ``correction: calibrated`` runs this simulation per placement
(:mod:`flasheval.placement.calibration`) and takes the smallest passing constant on a finer grid.

What it caps: to stop, the interval must fit a window of the tier's width, ``c sigma_n <= d`` with
``d`` the distance to the ``k``-th neighbour, where the oracle of ``benchmarks/oracle_bound.py`` needs
``1.96 sigma_n <= d`` for its point rank; with ``sigma_n^2`` about proportional to ``1/n``, a method
needs ``(c / 1.96)^2`` times the oracle's examples, before the look grid's overshoot (a need spread
evenly in ``log n`` between looks a factor ``r`` apart costs ``(r - 1) / ln r`` on average). So
``(1.96 / c)^2`` bounds the share of the oracle's median saving any such stop rule can reach.

Away from the top the worst case is milder: ``--min-rank R`` takes the worst case over true ranks ``>= R``
only (what a constant that is larger only for intervals near the top could use elsewhere; such a rule
would need its own calibration, and is not built).

Run: ``python benchmarks/stop_rule_constant.py REFERENCE [--paths 4000] [--min-rank R]`` from the repo root;
``REFERENCE`` is a reference name or folder, or the start of a name in
:data:`flasheval.analysis.simulation.SYNTHETIC_POOLS` (e.g. ``"70 models"``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.errors import FlashevalError  # noqa: E402
from flasheval.placement.allocation import allocation_variance, residual_spreads  # noqa: E402
from flasheval.placement.calibration import brownian_paths, stop_miss_rates, top_limit_miss  # noqa: E402
from flasheval.placement.looks import look_plan  # noqa: E402
from flasheval.analysis.simulation import SYNTHETIC_POOLS, synthetic_reference  # noqa: E402
from flasheval.placement.stop_rule import window_fits  # noqa: E402
from flasheval.placement.tiers import load_tier_plan  # noqa: E402
from flasheval.reference import ReferenceLeaderboard, load_reference  # noqa: E402
from flasheval.stats.sequential import pocock_constant  # noqa: E402


def worst_miss(c: float, values: np.ndarray, se: np.ndarray, z: np.ndarray, fits: np.ndarray,
               thetas: np.ndarray) -> tuple[float, float]:
    """Largest miss rate at the stop over ``thetas`` and where (:func:`~flasheval.placement.calibration.stop_miss_rates`)."""
    rates = np.concatenate([stop_miss_rates(c, values, se, z, fits, thetas[i:i + 16]) for i in range(0, len(thetas), 16)])
    return float(rates.max()), float(thetas[int(rates.argmax())])


def grid_ceiling(ratio: float, alpha: float, first: int = 20, last: int = 1000) -> tuple[int, float, float]:
    """For looks ``first, first r, ...`` up to ``last`` on a large dataset (information ``n``): looks, the bound, the share cap.

    The share cap is ``(1.96 / c)^2 ln r / (r - 1)``, ``c = pocock_constant(looks, 2 alpha)``.
    """
    sizes = np.unique(np.round(first * ratio ** np.arange(int(np.log(last / first) / np.log(ratio) + 1e-9) + 1)))
    c = pocock_constant(tuple(float(n) for n in sizes), 2 * alpha)
    return len(sizes), c, (1.96 / c) ** 2 * np.log(ratio) / (ratio - 1)


def share_cap(c: float, oracle_n: int, sizes: list[int], spreads: list[float]) -> float:
    """``oracle examples / method examples`` when the method needs ``(1.96 / c)^2`` times the oracle's variance.

    Uniform ``n`` per dataset (capped at each size), variance ``sum_d S_d^2 (1/n_d - 1/N_d)``: the
    finite-population factor, which favours the method where it needs much of a dataset, is included.
    """
    def examples(n: float) -> float:
        return float(np.minimum(n, sizes).sum())

    def variance(n: float) -> float:
        return allocation_variance(np.minimum(n, sizes), sizes, spreads=spreads)

    target = (1.96 / c) ** 2 * variance(oracle_n)
    lo, hi = float(oracle_n), float(max(sizes))
    if variance(hi) > target:
        return examples(oracle_n) / examples(hi)
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if variance(mid) > target else (lo, mid)
    return examples(oracle_n) / examples(hi)


def _pool(name: str) -> ReferenceLeaderboard:
    """A synthetic pool by the start of its name (its first model held out), or a reference minus its first model."""
    config = next((v for k, v in SYNTHETIC_POOLS.items() if k.startswith(name)), None)
    if config is not None:
        ref = synthetic_reference(config["n_models"], config["sizes"], rng=5, ability_spread=config["ability_spread"],
                                  dataset_spread=config["dataset_spread"])
    else:
        ref = load_reference(name)
    return ref.without(ref.model_ids[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", nargs="?", default="70 models")
    parser.add_argument("--tiers", default="default")
    parser.add_argument("--paths", type=int, default=4000)
    parser.add_argument("--scales", default="0.05,0.25,0.5,1,2", help="the new model's spread / the pool's")
    parser.add_argument("--constants", default="2.5,2.55,2.6,2.65,2.7,2.75")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--oracle-n", type=int, default=None,
                        help="the oracle's median examples per dataset (benchmarks/oracle_bound.py), for the cap with "
                             "the finite-population factor")
    parser.add_argument("--min-rank", type=int, default=1,
                        help="only true positions of this rank or worse (what a constant used away from the top could be)")
    args = parser.parse_args(argv)

    try:
        pool = _pool(args.reference)
        plan = load_tier_plan(args.tiers).for_pool(pool.n_models + 1)
    except FlashevalError as exc:
        raise SystemExit(f"stop_rule_constant: {exc}") from None
    if plan.stop_rule != "window":
        raise SystemExit(f"stop_rule_constant: plan {args.tiers!r} has stop_rule {plan.stop_rule!r}; this measures 'window'")
    options = pool.aggregate_options()
    if options["kind"] == "win_rate":
        raise SystemExit("stop_rule_constant: the win_rate aggregate is not a weighted mean; use mean or centered")
    looks = look_plan(pool, plan)
    n_datasets = len(pool.dataset_names)
    var = np.array([v for v in looks.variances if v > 0]) / n_datasets ** 2  # the aggregate is a mean over datasets
    se, info = np.sqrt(var), 1.0 / var
    values = pool.aggregate_values() * (1.0 if pool.ranking_higher_is_better() else -1.0)
    fits = window_fits(plan, len(values) + 1)
    z = brownian_paths(info, args.paths, np.random.default_rng(args.seed))
    spread = float(np.ptp(values))
    thetas = np.unique(np.r_[np.linspace(values.min() - 0.02 * spread, values.max() + 0.02 * spread, 100),
                             values - 1e-9 * spread, values + 1e-9 * spread])
    thetas = thetas[1 + np.searchsorted(np.sort(-values), -thetas, side="left") >= args.min_rank]
    scales = [float(s) for s in args.scales.split(",")]
    alpha = 1.0 - plan.confidence_level
    pocock = pocock_constant(tuple(info), alpha)
    bound = pocock_constant(tuple(info), 2 * alpha)
    ratios = np.array([t[0] for t in looks.targets[1:len(info)]]) / np.array([t[0] for t in looks.targets[:len(info) - 1]])
    r = float(np.exp(np.log(ratios).mean())) if len(ratios) else 1.0
    overshoot = (r - 1) / np.log(r) if r > 1 else 1.0
    print(f"{args.reference}: {pool.n_models} pool models x {n_datasets} datasets, {len(info)} looks that can err "
          f"(x{r:.2f} apart), alpha {alpha:g}, {args.paths} paths, {len(thetas)} true positions"
          f"{f' (true rank >= {args.min_rank})' if args.min_rank > 1 else ''}, spreads {scales}")
    print(f"  Pocock's constant (every look covers): {pocock:.3f}")
    print(f"  lower bound for a guaranteed level at the stop, Pocock's constant at 2 alpha: {bound:.3f}")
    start = time.perf_counter()
    passing = None
    for c in sorted({float(x) for x in args.constants.split(",")} | {bound, pocock}):
        per_scale = [worst_miss(c, values, s * se, z, fits, thetas) for s in scales]
        worst, where = max(per_scale)
        rank = 1 + int((values > where).sum())
        limit = top_limit_miss(c, info) if args.min_rank <= 2 else 0.0  # the limit's truth has rank 2
        mark = "ok" if max(worst, limit) <= alpha else "over alpha"  # the limit is part of the worst case
        print(f"  c = {c:.3f}: worst simulated miss at the stop {worst:.4f} (true rank {rank}, spread x"
              f"{scales[per_scale.index(max(per_scale))]:g}; {mark})"
              + (f"; the limit's exact rate {limit:.4f}" if args.min_rank <= 2 else ""), flush=True)
        if max(worst, limit) > alpha:
            passing = None  # the smallest constant from which every larger one tried holds alpha
        elif passing is None:
            passing = c
    needed = passing if passing is not None else pocock
    print(f"  smallest constant tried from which every larger one holds alpha at the stop: {needed:.3f} "
          f"(Pocock would need {(pocock / needed) ** 2:.2f}x its examples)")
    for label, c in (("the exact lower bound", bound), ("the simulated constant", needed), ("Pocock's", pocock)):
        print(f"  share of the oracle's median saving at most (1.96 / c)^2: {label} {(1.96 / c) ** 2:.2f}, "
              f"with the grid's overshoot {(1.96 / c) ** 2 / overshoot:.2f}")
    if args.oracle_n is not None:
        sizes, spreads = [len(ids) for ids in pool.example_ids], residual_spreads(pool.scores)
        caps = ", ".join(f"{label} {share_cap(c, args.oracle_n, sizes, spreads):.2f}"
                         for label, c in (("bound", bound), ("simulated", needed), ("Pocock", pocock)))
        print(f"  with the finite-population factor, oracle at {args.oracle_n}/dataset: share at most {caps} "
              f"(before the grid's overshoot)")
    print("  other geometric grids from 20 to 1000 per dataset (information proportional to n):")
    for ratio in (1.12, 1.26, 1.5, 2.0, 3.0):
        k, c, cap = grid_ceiling(ratio, alpha)
        print(f"    x{ratio:g}: {k} looks, lower bound {c:.3f}, share of the oracle at most {cap:.2f}")
    print(f"{time.perf_counter() - start:.0f} s; normal model, Monte Carlo sd of a 5% rate "
          f"{np.sqrt(0.05 * 0.95 / args.paths):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
