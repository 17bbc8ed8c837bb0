"""Coverage over a training run: per-checkpoint and simultaneous coverage, with and without the level split.

A synthetic pool (:func:`flasheval.analysis.simulation.synthetic_run`: 2PL, ``--n-models`` models,
datasets of ``--sizes`` examples) and the 20 checkpoints of one training run, quality rising through the
pool (its 5% to 95% quantiles), held out of the pool. Each run draws one seed and places every checkpoint
with it by replay (the default plan, its own 95% per checkpoint) and, for K = 5, 10 and 20, the K
checkpoints of :func:`~flasheval.analysis.simulation.run_subset` with the level split
(:func:`flasheval.runs.coverage.split_level`, 1 - 0.05 / K each). Printed per pool seed and K:

- per-checkpoint coverage (share of placements whose interval covers the checkpoint's full-data rank);
- simultaneous coverage (share of runs where all K intervals cover), per checkpoint and split;
- the split's cost: examples scored by the split run over examples scored by the same run's K
  per-checkpoint placements (mean of the per-run ratios), and the ratio of the totals.

Standard errors: binomial for coverage, across runs for the mean ratio. ``--family coupled``: the
checkpoints answer with one uniform per example (strongly positively dependent errors); ``independent``
(default): they answer independently given their abilities.

Run: ``python benchmarks/run_coverage.py [--family coupled] [--n-resamples 1000] [--out FILE.csv]``
from the repo root (``--out``: every placement's row, for pooling several processes with ``--read``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flasheval.analysis.simulation import run_subset, simulate_run_coverage, synthetic_run  # noqa: E402
from flasheval.placement.tiers import load_tier_plan  # noqa: E402

SPLITS = (5, 10, 20)
N_CHECKPOINTS = 20
CHUNK = 5


def summary(df: pd.DataFrame, k: int) -> dict[str, float]:
    """One K's figures from the rows of :func:`simulate_run_coverage` (one pool or several, runs keyed by pool)."""
    chosen = set(run_subset(N_CHECKPOINTS, k))
    per = df[(df.split == 1) & df.checkpoint.isin(chosen)]
    split = df[df.split == k]
    keys = ["pool", "run"]
    all_per, all_split = per.groupby(keys).covered.all(), split.groupby(keys).covered.all()
    cost_per, cost_split = per.groupby(keys).n_examples.sum(), split.groupby(keys).n_examples.sum()
    ratio = (cost_split / cost_per).to_numpy()
    n_runs = len(all_per)

    def se(p: float, n: int) -> float:
        return float(np.sqrt(p * (1 - p) / n))

    return {"K": k, "runs": n_runs, "cover_per": per.covered.mean(), "se_cover_per": se(per.covered.mean(), len(per)),
            "cover_split": split.covered.mean(), "se_cover_split": se(split.covered.mean(), len(split)),
            "all_per": all_per.mean(), "se_all_per": se(all_per.mean(), n_runs),
            "all_split": all_split.mean(), "se_all_split": se(all_split.mean(), n_runs),
            "ratio": float(ratio.mean()), "se_ratio": float(ratio.std(ddof=1) / np.sqrt(n_runs)) if n_runs > 1 else 0.0,
            "total_ratio": float(cost_split.sum() / cost_per.sum()),
            "saving_per": float(per.full_examples.sum() / per.n_examples.sum()),
            "saving_split": float(split.full_examples.sum() / split.n_examples.sum())}


def print_table(df: pd.DataFrame, label: str) -> None:
    print(f"\n{label}")
    print(f"{'K':>3} {'runs':>5} {'per-ckpt cov (95%)':>19} {'per-ckpt cov (split)':>21} {'all K cover (95%)':>18} "
          f"{'all K cover (split)':>20} {'examples split/95%':>19} {'ratio of totals':>15} {'saving 95% / split':>19}")
    for k in SPLITS:
        s = summary(df, k)
        print(f"{k:>3} {s['runs']:>5} {s['cover_per']:>12.1%} ±{s['se_cover_per']:>5.1%} {s['cover_split']:>14.1%} "
              f"±{s['se_cover_split']:>5.1%} {s['all_per']:>11.1%} ±{s['se_all_per']:>5.1%} {s['all_split']:>13.1%} "
              f"±{s['se_all_split']:>5.1%} {s['ratio']:>13.2f} ±{s['se_ratio']:>4.2f} {s['total_ratio']:>15.2f} "
              f"{s['saving_per']:>9.1f}x / {s['saving_split']:.1f}x", flush=True)


def constants() -> None:
    """The looks' constant at the split levels, with the calibration's 4,000 paths and with ten times as many."""
    from flasheval.placement.calibration import calibrated_constant
    from flasheval.placement.looks import look_plan
    from flasheval.runs.coverage import split_level
    from flasheval.analysis.simulation import SYNTHETIC_POOLS, synthetic_reference
    from flasheval.placement.stop_rule import window_fits

    config = dict(SYNTHETIC_POOLS["70 models x 6 datasets"])
    n = config.pop("n_models")
    ref = synthetic_reference(n, rng=5, **config)
    plan = load_tier_plan("default").for_pool(n + 1)
    print(f"{'K':>3} {'level':>8} {'paths':>6} {'constant':>8} {'Pocock':>7} {'bound':>7} {'worst miss':>10} {'seconds':>7}")
    for k in (1, 5, 10, 20):
        split = split_level(plan, k)
        variances = look_plan(ref, replace(split, correction="pocock")).variances
        se = np.sqrt([v for v in variances if v > 0]) / len(ref.dataset_names)
        for paths in (4000, 40000):
            start = time.perf_counter()
            cal = calibrated_constant(ref.aggregate_values(None), se, window_fits(split, n + 1),
                                      split.confidence_level, n_paths=paths)
            print(f"{k:>3} {split.confidence_level:>8.4f} {paths:>6} {cal.constant:>8.3f} {cal.pocock:>7.3f} "
                  f"{cal.lower_bound:>7.3f} {cal.worst_miss:>10.4f} {time.perf_counter() - start:>7.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pools", default="0,1,2", help="pool seeds, comma-separated")
    parser.add_argument("--runs", type=int, default=20, help="runs (seeds) per pool")
    parser.add_argument("--family", choices=("independent", "coupled"), default="independent")
    parser.add_argument("--n-models", type=int, default=40)
    parser.add_argument("--sizes", default="300,500,400,600", help="examples per dataset")
    parser.add_argument("--ability-spread", type=float, default=1.0)
    parser.add_argument("--dataset-spread", type=float, default=1.0)
    parser.add_argument("--n-resamples", type=int, default=None, help="bootstrap replicates (default: the plan's)")
    parser.add_argument("--out", help="write every placement's row to this CSV")
    parser.add_argument("--read", nargs="*", default=(), help="CSV files of earlier runs: print their tables, pooled")
    parser.add_argument("--constants", action="store_true",
                        help="print the calibrated constant at the split levels with 4,000 and 40,000 paths (the "
                             "'70 models x 6 datasets' synthetic pool, seed 5) and exit")
    args = parser.parse_args()
    if args.constants:
        constants()
        return
    if args.read:
        df = pd.concat([pd.read_csv(f) for f in args.read], ignore_index=True)
        for (family, pool), part in df.groupby(["family", "pool"]):
            print_table(part, f"{family}, pool seed {pool}: {part.run.nunique()} runs")
        for family, part in df.groupby("family"):
            print_table(part, f"{family}, pools {sorted(int(p) for p in part.pool.unique())} together")
        return
    plan = load_tier_plan("default")
    if args.n_resamples is not None:
        plan = replace(plan, n_resamples=args.n_resamples)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    frames = []
    for pool_seed in (int(p) for p in args.pools.split(",")):
        start = time.perf_counter()
        ref, ids = synthetic_run(args.n_models, N_CHECKPOINTS, sizes, rng=pool_seed, coupled=args.family == "coupled",
                                 ability_spread=args.ability_spread, dataset_spread=args.dataset_spread)
        done = []
        for chunk in range(0, args.runs, CHUNK):  # runs in chunks, each from its own rng seed, saved as they finish
            part = simulate_run_coverage(plan, ref, ids, n_runs=min(CHUNK, args.runs - chunk), splits=SPLITS,
                                         rng=10_000 + 100 * pool_seed + chunk // CHUNK)
            part["run"] += chunk
            part.insert(0, "pool", pool_seed)
            part.insert(0, "family", args.family)
            done.append(part)
            if args.out:
                pd.concat(frames + done, ignore_index=True).to_csv(args.out, index=False)
        df = pd.concat(done, ignore_index=True)
        frames.append(df)
        print_table(df, f"{args.family}, pool seed {pool_seed} ({args.n_models} models x {sizes}): {args.runs} runs "
                        f"(rng seeds {10_000 + 100 * pool_seed}..{10_000 + 100 * pool_seed + (args.runs - 1) // CHUNK}), "
                        f"{time.perf_counter() - start:.0f} s; full-data ranks of the 20 checkpoints: "
                        f"{sorted(set(df.full_rank), reverse=True)}")


if __name__ == "__main__":
    main()
