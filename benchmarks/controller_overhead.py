"""Cost of one controller decision step, against a naive per-replicate loop measured in the same run.

One step = the rank distribution of a new model among 400 reference models on 10 datasets of
1,000 examples each (2,000 bootstrap replicates, the default plan's; paired, dataset-stratified; the FPC is on,
as at an intermediate stage), then ``decide``. Target: under 2 s on 2 cores.

Peer: the textbook implementation, a Python loop over replicates that gathers the resampled
columns of the score matrix (``scores[:, idx].mean(axis=1)``) per dataset. It is timed on
100 replicates and scaled to 2,000 (it is linear in the replicate count).

Run: ``python benchmarks/controller_overhead.py`` from the repo root.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.analysis.simulation import synthetic_scores  # noqa: E402
from flasheval.placement.stop_rule import decide  # noqa: E402
from flasheval.placement.tiers import load_tier_plan  # noqa: E402
from flasheval.stats.bootstrap import rank_distribution  # noqa: E402
from flasheval.stats.ranking import aggregate, rank_among  # noqa: E402

N_MODELS, N_DATASETS, N_EXAMPLES = 400, 10, 1000
N_RESAMPLES = 2000  # the default plan's n_resamples
POPULATION = 5000  # full dataset size, so the finite-population correction is active


def _step(new, pool, full_means, plan, estimator):
    dist = rank_distribution(new, pool, population_sizes=[POPULATION] * N_DATASETS, n_resamples=N_RESAMPLES,
                             confidence_level=0.95, rng=0, estimator=estimator, pool_full_means=full_means)
    decide(plan=plan, stage_size=N_EXAMPLES, rank=dist.rank, interval=dist.interval, is_last=False)
    return dist


def _naive(new, pool, n_resamples, rng):
    gen = np.random.default_rng(rng)
    ranks = []
    for _ in range(n_resamples):
        means = []
        for n_d, p_d in zip(new, pool):
            idx = gen.integers(0, N_EXAMPLES, N_EXAMPLES)
            means.append(np.r_[n_d[idx].mean(), p_d[:, idx].mean(axis=1)])
        agg = aggregate(np.stack(means, axis=1))
        ranks.append(rank_among(agg[0], agg[1:]))
    return np.array(ranks)


def main() -> None:
    scores = synthetic_scores(N_MODELS + 1, [N_EXAMPLES] * N_DATASETS, rng=0)
    new = [s[0] for s in scores]
    pool = [s[1:] for s in scores]
    full_means = np.stack([p.mean(axis=1) for p in pool], axis=1)
    plan = load_tier_plan("default")
    _step(new, pool, full_means, plan, "paired")  # warm-up (imports, BLAS threads)
    timings = {}
    for estimator in ("paired", "control-variate"):
        start = time.perf_counter()
        _step(new, pool, full_means, plan, estimator)
        timings[estimator] = time.perf_counter() - start
    start = time.perf_counter()
    _naive(new, pool, 100, 0)
    naive = (time.perf_counter() - start) * N_RESAMPLES / 100
    print(f"one decision step: {N_MODELS} models x {N_DATASETS} datasets x {N_EXAMPLES} examples, {N_RESAMPLES} replicates")
    for estimator, seconds in timings.items():
        print(f"  flasheval ({estimator:>15}): {seconds:6.2f} s  ({'meets' if seconds < 2 else 'MISSES'} the 2 s target)")
    print(f"  naive per-replicate loop   : {naive:6.2f} s  (timed on 100 replicates, scaled)")
    print(f"  speed-up vs naive loop     : {naive / timings['paired']:6.1f}x (paired), "
          f"{naive / timings['control-variate']:.1f}x (control-variate)")


if __name__ == "__main__":
    main()
