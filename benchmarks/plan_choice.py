"""How the default plan's knobs were chosen: candidate plans on the synthetic pools only.

Each candidate differs from ``tiers/default.yaml`` in one knob: the multiple-look correction
(Pocock's repeated confidence intervals, against the constant calibrated to the window rule
``calibrated`` and the union bound ``bonferroni``), the
look grid (x1.26 per look, 18 looks, against x1.5, 11 looks, and x1.12, 35 looks), the overall level
(95% against 90%), the pool scaling (tiers scaled to the pool against the paper's tiers as written).
Every row draws fresh synthetic pools (:data:`flasheval.analysis.simulation.SYNTHETIC_POOLS`) with the
same seed; no real reference is read. Peer in the same run: the candidate with the paper's unscaled
tiers, or the union bound.

Run: ``python benchmarks/plan_choice.py [N_REPETITIONS] [CANDIDATES] [POOL_SUBSTRING]`` from the repo
root, e.g. ``python benchmarks/plan_choice.py 60 pocock,bonferroni,pocock-x1.5,pocock-x1.12``.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.analysis.simulation import SYNTHETIC_POOLS, simulate_coverage  # noqa: E402
from flasheval.placement.tiers import load_tier_plan  # noqa: E402


def candidates() -> dict:
    base = load_tier_plan("default")
    return {
        "pocock": base,
        "calibrated": replace(base, correction="calibrated"),
        "bonferroni": replace(base, correction="bonferroni"),
        "pocock-x1.5": replace(base, stages=(20, 30, 45, 70, 100, 150, 225, 350, 500, 750, 1000, None)),
        "pocock-x1.12": replace(base, stages=tuple(sorted({round(20 * 1.122 ** j) for j in range(35)})) + (None,)),
        "x1.26-90%": replace(base, confidence_level=0.90),
        "unscaled": replace(base, pool_scale=None),
    }


def main() -> None:
    n_rep = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    plans = candidates()
    chosen = sys.argv[2].split(",") if len(sys.argv) > 2 else list(plans)
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else [""]  # substrings of the pools' names (to run in parallel)
    print(f"{n_rep} placements per row (fresh synthetic pools, seed 123)")
    print(f"{'candidate':<12} {'pool':<34} {'coverage':>8} {'within':>7} {'median':>7} {'total':>7} {'seconds':>7}")
    for label in chosen:
        for pool, config in SYNTHETIC_POOLS.items():
            if not any(part in pool for part in only):
                continue
            start = time.perf_counter()
            df = simulate_coverage(plans[label], n_repetitions=n_rep, rng=123, **config)
            total = sum(config["sizes"]) * len(df) / df.n_examples.sum()
            print(f"{label:<12} {pool:<34} {df.covered.mean():>8.1%} {df.within.mean():>7.1%} "
                  f"{df.saving.median():>6.1f}x {total:>6.1f}x {time.perf_counter() - start:>7.0f}", flush=True)


if __name__ == "__main__":
    main()
