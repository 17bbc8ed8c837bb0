"""Synthetic reference pools with known full-data ranks, for coverage studies and benchmarks.

Scores follow a two-parameter logistic (IRT) model: model ``m`` answers example ``i``
correctly with probability ``sigmoid(discrimination_i * (ability_m - difficulty_i))``, so
examples have difficulties shared by all models (what pairing and the control variate
exploit) and models differ in ability. Everything is drawn from the ``rng`` passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from flasheval.reference import ReferenceLeaderboard, ReferenceManifest

__all__ = ["synthetic_scores", "synthetic_reference", "simulate_coverage", "SYNTHETIC_POOLS", "synthetic_run", "run_subset",
           "simulate_run_coverage"]


def synthetic_scores(n_models: int, sizes: Sequence[int], *, rng: int | np.random.Generator | None = None,
                     ability_spread: float = 1.0, dataset_spread: float = 0.5,
                     abilities: Sequence[float] | None = None, coupled: Sequence[int] = ()) -> list[np.ndarray]:
    """Per dataset, 0/1 scores ``(n_models, n_examples)`` from a 2PL model.

    ``dataset_spread`` is the standard deviation of the datasets' mean difficulty (heterogeneous
    datasets: some nearly solved, some nearly impossible, when it is large). ``abilities``: the
    models' abilities (``n_models`` of them) instead of draws from ``N(0, ability_spread^2)``.
    ``coupled``: rows that answer with the same uniform per example (correct iff ``u_i < p_mi``),
    so a stronger one of them gets right every example a weaker one gets right, as the
    checkpoints of one training run largely do; the other rows answer independently.

    Examples
    --------
    >>> s = synthetic_scores(3, [5, 4], rng=0)
    >>> [a.shape for a in s], bool(set(np.unique(s[0])) <= {0.0, 1.0})
    ([(3, 5), (3, 4)], True)
    """
    gen = np.random.default_rng(rng)
    if abilities is None:
        ability = gen.normal(0.0, ability_spread, size=n_models)
    else:
        ability = np.asarray(abilities, dtype=np.float64)
        if ability.shape != (n_models,):
            raise ValueError(f"abilities must hold n_models = {n_models} values, got shape {ability.shape}")
    rows = np.asarray(coupled, dtype=np.int64)
    out = []
    for n in sizes:
        shift = gen.normal(0.0, dataset_spread)  # datasets differ in overall difficulty
        difficulty = gen.normal(shift, 1.5, size=n)
        discrimination = gen.lognormal(0.0, 0.4, size=n)
        p = 1.0 / (1.0 + np.exp(-discrimination * (ability[:, None] - difficulty[None, :])))
        u = gen.random(p.shape)
        if len(rows):
            u[rows] = u[rows[0]]
        out.append((u < p).astype(np.float64))
    return out


def synthetic_reference(n_models: int, sizes: Sequence[int], *, rng: int | np.random.Generator | None = None,
                        ability_spread: float = 1.0, dataset_spread: float = 0.5,
                        name: str = "synthetic", abilities: Sequence[float] | None = None,
                        coupled: Sequence[int] = ()) -> ReferenceLeaderboard:
    """An in-memory :class:`ReferenceLeaderboard` of synthetic 0/1 scores (models ``m000``...; ``abilities``
    and ``coupled`` as in :func:`synthetic_scores`)."""
    scores = synthetic_scores(n_models, sizes, rng=rng, ability_spread=ability_spread, dataset_spread=dataset_spread,
                              abilities=abilities, coupled=coupled)
    names = tuple(f"d{d}" for d in range(len(sizes)))
    manifest = ReferenceManifest(name=name, source="synthetic 2PL", licence="n/a", metric="0/1", higher_is_better=True,
                                 aggregate="mean", example_counts={d: n for d, n in zip(names, sizes)}, files={})
    return ReferenceLeaderboard(
        name=name, manifest=manifest, model_ids=tuple(f"m{i:03d}" for i in range(n_models)), dataset_names=names,
        example_ids=tuple(tuple(f"{j:05d}" for j in range(n)) for n in sizes), scores=tuple(scores),
        n_tokens=tuple(None for _ in sizes),
    )


SYNTHETIC_POOLS: dict[str, dict] = {
    "10 models x 2 datasets": {"n_models": 10, "sizes": (400, 1000), "ability_spread": 1.0, "dataset_spread": 1.0},
    "40 models x 4 datasets": {"n_models": 40, "sizes": (300, 600, 300, 1000), "ability_spread": 0.5,
                               "dataset_spread": 0.5},
    "70 models x 6 datasets": {"n_models": 70, "sizes": (500, 1000, 800, 2000, 600, 700), "ability_spread": 1.0,
                               "dataset_spread": 1.0},
    "200 models x 4 datasets (dense)": {"n_models": 200, "sizes": (1000, 1000, 700, 663), "ability_spread": 0.5,
                                        "dataset_spread": 0.5},
    "300 models x 30 datasets": {"n_models": 300, "sizes": tuple(range(200, 801, 20))[:30], "ability_spread": 1.0,
                                 "dataset_spread": 1.5},
}
"""The synthetic pools the shipped plans' knobs were chosen on (and whose coverage is reported):
sizes 10 to 300 models, 2 to 30 datasets, heterogeneous dataset difficulty. The 200-model pool
is dense (abilities close together), as a large real pool of similar models is."""


def simulate_coverage(plan, *, n_repetitions: int, n_models: int = 30, sizes: Sequence[int] = (400, 600, 800, 1000),
                      ability_spread: float = 1.0, dataset_spread: float = 0.5,
                      rng: int | np.random.Generator | None = None) -> pd.DataFrame:
    """Coverage of the whole stop-when-confident procedure on fresh synthetic pools.

    Each repetition draws a pool of ``n_models`` (one held out as the new model, chosen at
    random), places it with ``plan`` by replay and records whether the reported interval
    contains its full-data rank, whether the point rank is within its tier's resolution, and
    the examples used.

    Returns
    -------
    pandas.DataFrame
        One row per repetition: ``full_rank``, ``rank``, ``lo``, ``hi``, ``covered``,
        ``within``, ``n_examples``, ``saving`` (full-run examples / examples used), ``stopped_at_all``.
    """
    from flasheval.analysis.backtest import full_data_ranks
    from flasheval.placement.controller import place
    from flasheval.reference.scoring.replay import ReplayScorer

    gen = np.random.default_rng(rng)
    rows = []
    for rep in range(n_repetitions):
        ref = synthetic_reference(n_models, sizes, rng=gen, ability_spread=ability_spread, dataset_spread=dataset_spread)
        held_out = ref.model_ids[int(gen.integers(n_models))]
        full = full_data_ranks(ref)[held_out]
        result = place(ref.without(held_out), ReplayScorer(ref, held_out), plan, model_id=held_out,
                       seed=int(gen.integers(2**31)))
        lo, hi = result.interval
        tier = plan.for_pool(n_models).tier_for(result.rank)
        rows.append({"full_rank": full, "rank": result.rank, "lo": lo, "hi": hi, "covered": lo <= full <= hi,
                     "within": abs(result.rank - full) <= tier.resolution, "n_examples": result.compute.n_examples,
                     "saving": result.compute.example_saving,
                     "stopped_at_all": result.stages[-1].stage_size is None})
    return pd.DataFrame(rows)


def synthetic_run(n_models: int, n_checkpoints: int, sizes: Sequence[int], *,
                  rng: int | np.random.Generator | None = None, ability_spread: float = 1.0,
                  dataset_spread: float = 0.5, coupled: bool = False,
                  span: tuple[float, float] = (0.05, 0.95)) -> tuple[ReferenceLeaderboard, tuple[str, ...]]:
    """A pool of ``n_models`` and the ``n_checkpoints`` checkpoints of one training run, as one reference.

    The pool's abilities are drawn from ``N(0, ability_spread^2)``; checkpoint ``k`` (of ``K``) has the
    pool's quantile at ``span[0] + (span[1] - span[0]) k / (K - 1)``: quality rising through the pool, as
    a run's checkpoints do. Every model answers the same examples (shared difficulties). ``coupled``:
    the checkpoints answer with one uniform per example (:func:`synthetic_scores`), so their errors on
    a subsample are strongly positively dependent; otherwise they answer independently given their
    abilities. Returns the reference (pool and checkpoints, models ``m000``...) and the checkpoints'
    ids, weakest first; ``reference.without(*ids)`` is the pool they are placed on.

    Examples
    --------
    >>> ref, ids = synthetic_run(10, 3, [50, 40], rng=0)
    >>> ref.n_models, ids
    (13, ('m010', 'm011', 'm012'))
    """
    gen = np.random.default_rng(rng)
    pool = gen.normal(0.0, ability_spread, size=n_models)
    steps = np.quantile(pool, np.linspace(span[0], span[1], n_checkpoints))
    rows = range(n_models, n_models + n_checkpoints) if coupled else ()
    ref = synthetic_reference(n_models + n_checkpoints, sizes, rng=gen, dataset_spread=dataset_spread,
                              abilities=np.r_[pool, steps], coupled=rows, name="synthetic run")
    return ref, ref.model_ids[n_models:]


def run_subset(n_checkpoints: int, k: int) -> tuple[int, ...]:
    """``k`` of ``n_checkpoints`` checkpoints spread over the run (indices, first and last included when ``k > 1``).

    Examples
    --------
    >>> run_subset(20, 5), run_subset(20, 1)
    ((0, 5, 10, 14, 19), (19,))
    """
    if k == 1:
        return (n_checkpoints - 1,)
    return tuple(int(i) for i in np.round(np.linspace(0, n_checkpoints - 1, k)))


def simulate_run_coverage(plan, reference: ReferenceLeaderboard, checkpoints: Sequence[str], *, n_runs: int,
                          splits: Sequence[int] = (), rng: int | np.random.Generator | None = None) -> pd.DataFrame:
    """Per-checkpoint placements of a run's checkpoints by replay, with and without the level split.

    ``reference`` holds the pool and the ``checkpoints`` (:func:`synthetic_run`); each is placed on the
    pool ``reference.without(*checkpoints)``. Each of ``n_runs`` runs draws one seed from ``rng`` and
    places every checkpoint with it (one run's placements share their example orders, as
    ``place_checkpoint`` with a fixed seed does), once with ``plan`` (``split`` 1) and, for every ``K`` in
    ``splits``, the :func:`run_subset` of ``K`` checkpoints with
    :func:`flasheval.runs.coverage.split_level` ``(plan, K)`` (``split`` K). The looks are
    calibrated once per level (they depend on the pool only).

    Returns
    -------
    pandas.DataFrame
        One row per placement: ``run``, ``seed``, ``split``, ``checkpoint`` (index, weakest first),
        ``full_rank``, ``lo``, ``hi``, ``covered``, ``n_examples``, ``full_examples``.
    """
    from flasheval.analysis.backtest import full_data_ranks
    from flasheval.placement.controller import place, plan_looks
    from flasheval.reference.scoring.replay import ReplayScorer
    from flasheval.runs.coverage import split_level

    gen = np.random.default_rng(rng)
    pool = reference.without(*checkpoints)
    full = full_data_ranks(reference, held_out=checkpoints)
    levels = {1: (plan, tuple(range(len(checkpoints))))}
    levels.update({k: (split_level(plan, k), run_subset(len(checkpoints), k)) for k in splits})
    looks = {k: plan_looks(pool, p) for k, (p, _) in levels.items()}
    scorers = [ReplayScorer(reference, c) for c in checkpoints]
    rows = []
    for run in range(n_runs):
        seed = int(gen.integers(2**31))
        for k, (p, which) in levels.items():
            for i in which:
                result = place(pool, scorers[i], p, model_id=checkpoints[i], seed=seed, looks=looks[k])
                lo, hi = result.interval
                rows.append({"run": run, "seed": seed, "split": k, "checkpoint": i, "full_rank": full[checkpoints[i]],
                             "lo": lo, "hi": hi, "covered": lo <= full[checkpoints[i]] <= hi,
                             "n_examples": result.compute.n_examples, "full_examples": result.compute.full_examples})
    return pd.DataFrame(rows)
