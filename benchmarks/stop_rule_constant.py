"""How much would a constant calibrated to the stop rule save over Pocock's? A feasibility measurement.

Pocock's constant makes EVERY look's interval cover at once. A placement reports only the look where
the window rule stops it, so a smaller constant ``c`` may already give ``P(miss at the stopping look)
<= alpha`` for every true position of the new model. This script measures that, under the same normal
model of the nested looks as :mod:`flasheval.stats.sequential`: the estimate of the aggregate at look
``k`` is ``theta + se_k Z_k`` with ``Z`` standardized Brownian motion at the reference's own looks
(:func:`flasheval.placement.controller.look_plan`, the pool's spreads), the rank interval is that of
``[T_k - c se_k, T_k + c se_k]`` among the pool's full-data aggregates, the stop is the default plan's
window rule (a lookup table of :func:`flasheval.placement.controller.window_rank`), and the worst case
is taken over a grid of true positions ``theta`` (and just above and below every pool model).
Synthetic pools only (:data:`flasheval.placement.simulation.SYNTHETIC_POOLS`); nothing is tuned on it.

Run: ``python benchmarks/stop_rule_constant.py "70 models" [N_PATHS]`` from the repo root; prints the
worst-case miss rate for a few constants and Pocock's constant for the same looks.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.placement.controller import look_plan, window_rank  # noqa: E402
from flasheval.placement.simulation import SYNTHETIC_POOLS, synthetic_reference  # noqa: E402
from flasheval.placement.tiers import load_tier_plan  # noqa: E402


def worst_miss(c: float, values: np.ndarray, se: np.ndarray, z: np.ndarray, fits: np.ndarray,
               thetas: np.ndarray) -> tuple[float, float]:
    """Largest ``P(true rank outside the interval at the stopping look)`` over ``thetas``, and where."""
    desc = -np.sort(values)[::-1]  # ascending negatives: rank(x) = 1 + #(values > x)
    worst, where = 0.0, float("nan")
    rows = np.arange(z.shape[0])
    for theta in thetas:
        est = theta + se * z
        lo = 1 + np.searchsorted(desc, -(est + c * se), side="left")
        hi = 1 + np.searchsorted(desc, -(est - c * se), side="left")
        stop = fits[lo, hi]
        first = np.argmax(stop, axis=1)
        true = 1 + np.searchsorted(desc, -theta, side="left")
        miss = stop.any(axis=1) & ((true < lo[rows, first]) | (true > hi[rows, first]))
        if miss.mean() > worst:
            worst, where = float(miss.mean()), float(theta)
    return worst, where


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "70 models"
    n_paths = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    config = next(v for k, v in SYNTHETIC_POOLS.items() if k.startswith(name))
    ref = synthetic_reference(config["n_models"], config["sizes"], rng=5, ability_spread=config["ability_spread"],
                              dataset_spread=config["dataset_spread"])
    pool = ref.without(ref.model_ids[0])
    plan = load_tier_plan("default").for_pool(pool.n_models + 1)
    looks = look_plan(pool, plan)
    var = np.array([v for v in looks.variances if v > 0]) / len(pool.dataset_names) ** 2  # the mean over datasets
    se, info = np.sqrt(var), 1.0 / var
    values = pool.dataset_means().mean(axis=1)
    n = len(values) + 1
    fits = np.zeros((n + 2, n + 2), dtype=bool)
    for lo in range(1, n + 1):
        for hi in range(lo, n + 1):
            fits[lo, hi] = window_rank(plan, (lo, hi), (lo + hi) / 2) is not None
    gen = np.random.default_rng(0)
    z = np.cumsum(gen.standard_normal((n_paths, len(info))) * np.sqrt(np.diff(np.r_[0.0, info])), axis=1) / np.sqrt(info)
    thetas = np.unique(np.r_[np.linspace(values.min() - 0.02, values.max() + 0.02, 300), values - 1e-6, values + 1e-6])
    pocock = float(stats.norm.isf((1 - looks.levels[0]) / 2))
    print(f"{name}: {pool.n_models} pool models, {len(info)} looks that can err, {n_paths} paths, "
          f"{len(thetas)} true positions; Pocock's constant {pocock:.3f}")
    start = time.perf_counter()
    for c in (1.96, 2.2, 2.4, 2.5, 2.6, pocock):
        worst, where = worst_miss(c, values, se, z, fits, thetas)
        rank = 1 + int((values > where).sum())
        print(f"  c = {c:.3f}: worst miss rate at the stop {worst:.4f} (true rank {rank})", flush=True)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
