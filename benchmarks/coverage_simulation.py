"""Coverage of the whole stop-when-confident procedure, by simulation.

Synthetic 2PL pools (:mod:`flasheval.placement.simulation`) with known full-data ranks; each repetition
holds one model out, places it with the plan and checks whether the interval reported at the
stop covers its full-data rank. Compares the multiple-look corrections and the estimators.

Run: ``python benchmarks/coverage_simulation.py [N_REPETITIONS]`` from the repo root.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.placement.simulation import simulate_coverage  # noqa: E402
from flasheval.placement.tiers import load_tier_plan  # noqa: E402

SIZES = (300, 600, 300, 1000)


def main() -> None:
    n_rep = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    base = replace(load_tier_plan("default"), n_resamples=400)
    print(f"{n_rep} repetitions per row; pools of 40 models (2PL, ability sd 0.5), datasets {SIZES}; nominal 95%")
    print(f"{'plan':<40} {'coverage':>8} {'within':>7} {'mean examples':>13} {'seconds':>7}")
    for correction, estimator in (("none", "control-variate"), ("bonferroni", "control-variate"), ("none", "paired")):
        plan = replace(base, correction=correction, estimator=estimator)
        start = time.perf_counter()
        df = simulate_coverage(plan, n_repetitions=n_rep, n_models=40, sizes=SIZES, ability_spread=0.5, rng=123)
        label = f"correction={correction}, {estimator}"
        print(f"{label:<40} {df.covered.mean():>8.1%} {df.within.mean():>7.1%} {df.n_examples.mean():>13.0f} "
              f"{time.perf_counter() - start:>7.0f}")


if __name__ == "__main__":
    main()
