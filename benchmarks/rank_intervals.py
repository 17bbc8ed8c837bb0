"""Rank intervals of every reference model: coverage by simulation, width against two peers, cost at 4,000 models.

1. Coverage (:func:`flasheval.analysis.interval_simulation.simulate_interval_coverage`): synthetic pools whose
   true means are known, dense (abilities spread 0.05) and sparse (spread 2.0), 10 to 1,000 models, 4 datasets
   of 150-400 examples; every seed's row. Columns: ``simult`` the share of pools where every model's true rank
   lies in its simultaneous interval (target: at least nominal minus one point); ``diffs`` the share where every
   pairwise difference lies within its bound (the event the intervals rest on: at the nominal level);
   ``own`` the share of models covered by their per-model interval; ``naive`` the share of pools (and, after
   the slash, of models) covered by the naive percentile bootstrap of ranks; widths in ranks (``hi - lo + 1``).
2. The fast denominator against the textbook one, on real references: ``c (s_i + s_j)`` (flasheval, O(R n))
   against ``c' se_ij``, the max-|t| over pairs with each pair's own bootstrap standard error (O(R n^2)):
   separable neighbours, groups and the widest interval of each.
3. Seconds and peak memory of ``flasheval.rank_intervals`` on a 4,000-model synthetic pool.

Run: ``python benchmarks/rank_intervals.py [N_POOLS] [SEEDS] [REFERENCE ...]`` from the repo root (``SEEDS``
comma-separated, default ``0,1``; references by name or folder, default ``helm_lite``).
"""

from __future__ import annotations

import itertools
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.api.rank_intervals import rank_intervals  # noqa: E402
from flasheval.analysis.interval_simulation import SPREADS, simulate_interval_coverage  # noqa: E402
from flasheval.analysis.simulation import synthetic_reference  # noqa: E402
from flasheval.reference import load_reference  # noqa: E402
from flasheval.reference.intervals import aggregate_weights  # noqa: E402
from flasheval.stats.rank_intervals import groups_from_intervals, linear_aggregate_replicates  # noqa: E402
from flasheval.stats.ranking import competition_ranks  # noqa: E402

SIZES = (150, 250, 300, 400)
MODELS = (10, 50, 200, 1000)


def coverage_table(n_pools: int, seeds: list[int]) -> None:
    print(f"1. coverage, {n_pools} pools per row (1,000 models: a tenth of them), 4 datasets {SIZES} examples, "
          "95% level, 1,000 resamples")
    print(f"{'pool':<7} {'models':>6} {'seed':>4} {'simult':>7} {'diffs':>6} {'own':>6} {'naive':>13} "
          f"{'width sim':>9} {'own':>6} {'naive':>6} {'groups':>6} {'seconds':>7}")
    for (kind, spread), n_models in itertools.product(SPREADS.items(), MODELS):
        for seed in seeds:
            start = time.perf_counter()
            pools = max(5, n_pools // 10) if n_models >= 1000 else n_pools
            c = simulate_interval_coverage(pools, n_models=n_models, sizes=SIZES, spread=spread, n_resamples=1000,
                                           rng=np.random.default_rng([seed, n_models, int(spread * 100)]))
            flag = "" if c.simultaneous >= 0.94 else "  BELOW TARGET"
            print(f"{kind:<7} {n_models:>6} {seed:>4} {c.simultaneous:>7.1%} {c.differences:>6.1%} {c.per_model:>6.1%} "
                  f"{c.naive:>6.1%}/{c.naive_per_model:>5.1%} {c.width_simultaneous:>9.1f} {c.width_per_model:>6.1f} "
                  f"{c.width_naive:>6.1f} {c.groups:>6.1f} {time.perf_counter() - start:>7.0f}{flag}", flush=True)


def _pairwise_se_intervals(values: np.ndarray, replicates: np.ndarray, level: float
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The textbook max-|t|: each pair's own bootstrap standard error, every pair and replicate (O(R n^2)).
    Returns ``lo``, ``hi`` and ``better[i, j]``: ``j`` significantly better than ``i``."""
    z = replicates - values
    n = values.size
    se = np.sqrt(np.maximum(np.var(replicates[:, :, None] - replicates[:, None, :], axis=0), 1e-30))
    stat = np.max(np.abs(z[:, :, None] - z[:, None, :]) / se, axis=(1, 2))
    c = float(np.quantile(stat, level, method="higher"))
    better = values[None, :] - values[:, None] > c * se  # [i, j]: v_j - v_i beyond the bound
    return 1 + better.sum(axis=1), n - better.sum(axis=0), better


def denominator_table(references: list[str]) -> None:
    print("\n2. the fast denominator c (s_i + s_j) against each pair's own standard error (simultaneous, 95%)")
    print(f"{'reference':<28} {'models':>6} {'method':<22} {'separable neighbours':>20} {'groups':>6} {'widest':>6}")
    for name in references:
        ref = load_reference(name)
        res = rank_intervals(ref)
        print(f"{ref.name:<28} {ref.n_models:>6} {'flasheval (s_i + s_j)':<22} "
              f"{res.n_separable_adjacent:>13} of {res.n_models - 1:<4} {res.n_groups:>6} {res.widest.width + 1:>6}")
        weights, offset = aggregate_weights(ref, ref.manifest.aggregate)
        values, reps = linear_aggregate_replicates(ref.scores, weights, offset=offset, n_resamples=1000, rng=0)
        sign = 1.0 if ref.ranking_higher_is_better() else -1.0
        lo, hi, better = _pairwise_se_intervals(sign * values, sign * reps, 0.95)
        order = np.lexsort((np.arange(values.size), competition_ranks(sign * values)))
        groups = groups_from_intervals(order, lo, hi)
        separable = int(sum(better[b, a] for a, b in zip(order[:-1], order[1:])))
        print(f"{'':<28} {'':>6} {'pairwise se_ij':<22} {separable:>13} of {ref.n_models - 1:<4} "
              f"{len(groups):>6} {int(np.max(hi - lo)) + 1:>6}")


def timing(n_models: int = 4000) -> None:
    print(f"\n3. cost on a synthetic pool of {n_models} models x 4 datasets (500-1000 examples), 1,000 resamples")
    ref = synthetic_reference(n_models, [500, 1000, 800, 700], rng=0)
    for simultaneous in (True, False):
        tracemalloc.start()
        start = time.perf_counter()
        res = rank_intervals(ref, simultaneous=simultaneous)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        print(f"  {'simultaneous' if simultaneous else 'per-model':<12}: {seconds:5.1f} s, peak {peak:6.0f} MiB of "
              f"arrays; {res.n_groups} groups, widest {res.widest.width + 1} ranks", flush=True)


def main() -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        return
    if len(sys.argv) > 1 and not sys.argv[1].isdigit():
        sys.exit(f"rank_intervals.py: error: N_POOLS must be a whole number, got {sys.argv[1]!r} (see --help)")
    n_pools = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    seeds = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0, 1]
    references = sys.argv[3:] or ["helm_lite"]
    coverage_table(n_pools, seeds)
    denominator_table(references)
    timing()


if __name__ == "__main__":
    main()
