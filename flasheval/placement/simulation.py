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

__all__ = ["synthetic_scores", "synthetic_reference", "simulate_coverage", "SYNTHETIC_POOLS"]


def synthetic_scores(n_models: int, sizes: Sequence[int], *, rng: int | np.random.Generator | None = None,
                     ability_spread: float = 1.0, dataset_spread: float = 0.5) -> list[np.ndarray]:
    """Per dataset, 0/1 scores ``(n_models, n_examples)`` from a 2PL model.

    ``dataset_spread`` is the standard deviation of the datasets' mean difficulty (heterogeneous
    datasets: some nearly solved, some nearly impossible, when it is large).

    Examples
    --------
    >>> s = synthetic_scores(3, [5, 4], rng=0)
    >>> [a.shape for a in s], bool(set(np.unique(s[0])) <= {0.0, 1.0})
    ([(3, 5), (3, 4)], True)
    """
    gen = np.random.default_rng(rng)
    ability = gen.normal(0.0, ability_spread, size=n_models)
    out = []
    for n in sizes:
        shift = gen.normal(0.0, dataset_spread)  # datasets differ in overall difficulty
        difficulty = gen.normal(shift, 1.5, size=n)
        discrimination = gen.lognormal(0.0, 0.4, size=n)
        p = 1.0 / (1.0 + np.exp(-discrimination * (ability[:, None] - difficulty[None, :])))
        out.append((gen.random(p.shape) < p).astype(np.float64))
    return out


def synthetic_reference(n_models: int, sizes: Sequence[int], *, rng: int | np.random.Generator | None = None,
                        ability_spread: float = 1.0, dataset_spread: float = 0.5,
                        name: str = "synthetic") -> ReferenceLeaderboard:
    """An in-memory :class:`ReferenceLeaderboard` of synthetic 0/1 scores (models ``m000``...)."""
    scores = synthetic_scores(n_models, sizes, rng=rng, ability_spread=ability_spread, dataset_spread=dataset_spread)
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
    from flasheval.placement.backtest import full_data_ranks
    from flasheval.placement.controller import place
    from flasheval.placement.replay import ReplayScorer

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
