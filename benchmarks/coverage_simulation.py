"""Coverage of the whole stop-when-confident procedure, by simulation, for every shipped plan and pool.

Synthetic 2PL pools (:data:`flasheval.analysis.simulation.SYNTHETIC_POOLS`: 10 to 300 models, 2 to
30 datasets, heterogeneous difficulty) with known full-data ranks; each repetition draws a fresh
pool, holds one model out, places it with the plan and checks whether the interval reported at
the stop covers its full-data rank (target: at least the plan's level minus one point), whether
the placement is within its tier's resolution, and the saving. Peer measured in the same run:
the previous default rule (centred window, every look at 95%, no correction), whose coverage holds
per look only.

Run: ``python benchmarks/coverage_simulation.py [N_REPETITIONS] [POOLS] [PLANS]`` from the repo root
(``POOLS``: comma-separated substrings of the pools' names; ``PLANS``: comma-separated labels).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.analysis.simulation import SYNTHETIC_POOLS, simulate_coverage  # noqa: E402
from flasheval.placement.tiers import load_tier_plan  # noqa: E402


def main() -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        return
    if len(sys.argv) > 1 and not sys.argv[1].isdigit():
        sys.exit(f"coverage_simulation.py: error: N_REPETITIONS must be a whole number, got {sys.argv[1]!r} (see --help)")
    n_rep = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    only = sys.argv[2].split(",") if len(sys.argv) > 2 else [""]  # substrings of the pools' names
    default = load_tier_plan("default")
    plans = {"default": default, "lean": load_tier_plan("lean"), "flash_helm": load_tier_plan("flash_helm"),
             "peer: centred, uncorrected": replace(default, name="peer", stop_rule="interval", correction="none",
                                                   stages=(20, 50, 100, 150, 200, 500, 1000, None))}
    if len(sys.argv) > 3:  # only these plans (labels), e.g. to run pools and plans in parallel
        plans = {label: plan for label, plan in plans.items() if label in sys.argv[3].split(",")}
    print(f"{n_rep} placements per row, a fresh pool each; coverage target: nominal - 1 point")
    print(f"{'pool':<34} {'plan':<27} {'nominal':>7} {'coverage':>8} {'within':>7} {'median':>7} {'total':>7} "
          f"{'seconds':>7}")
    for pool, config in SYNTHETIC_POOLS.items():
        if not any(part in pool for part in only):
            continue
        for label, plan in plans.items():
            start = time.perf_counter()
            df = simulate_coverage(plan, n_repetitions=n_rep, rng=2024, **config)
            total = sum(config["sizes"]) * len(df) / df.n_examples.sum()
            flag = "" if df.covered.mean() >= plan.confidence_level - 0.01 else "  BELOW TARGET"
            print(f"{pool:<34} {label:<27} {plan.confidence_level:>7.0%} {df.covered.mean():>8.1%} "
                  f"{df.within.mean():>7.1%} {df.saving.median():>6.1f}x {total:>6.1f}x "
                  f"{time.perf_counter() - start:>7.0f}{flag}", flush=True)


if __name__ == "__main__":
    main()
