"""Aggregates over datasets and ranks (pure numpy).

Every function takes per-dataset mean scores shaped ``(..., n_models, n_datasets)``; leading
axes (bootstrap replicates) are carried through, so one call ranks all replicates at once.

Aggregates
----------
``mean``
    Mean over datasets of the per-dataset mean score: each dataset weighs the same, whatever
    its size. The default.
``centered``
    Mean over datasets of ``(score - baseline) / (1 - baseline)``: chance level maps to 0 and a
    perfect score to 1, so datasets with a high chance rate do not dominate (DCLM's
    "centered accuracy"). Needs a random baseline per dataset; higher-is-better scores only.
``win_rate``
    HELM's mean win rate: per dataset, the share of the *other* models this model beats
    (ties count one half), averaged over datasets. For HELM compatibility only: it depends on
    which other models are in the pool, so adding one weak model can reorder the top
    (Perlitz et al., 2024).

Ranks
-----
Rank 1 is the best. A pool is ranked with *competition* ranks (tied models share the best
rank of their group: 1, 2, 2, 4). A new model's rank among a pool is its *mid-rank*
``1 + n_better + n_tied / 2``; it can be a half-integer when it ties with pool models, and
is the expected rank under a random tie break.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import rankdata

__all__ = ["AGGREGATES", "aggregate", "competition_ranks", "rank_among", "check_aggregate", "check_random_baselines"]

AGGREGATES: tuple[str, ...] = ("mean", "centered", "win_rate")
"""Names of the supported aggregates, default first."""


def check_aggregate(kind: str) -> str:
    """Return ``kind`` if it names an aggregate, else raise :class:`~flasheval.errors.UnknownNameError`."""
    from flasheval.errors import UnknownNameError

    if kind not in AGGREGATES:
        raise UnknownNameError("aggregate", kind, AGGREGATES, field="--aggregate")
    return kind


def check_random_baselines(dataset_names: Sequence[str], random_baselines: Mapping[str, float] | None) -> np.ndarray:
    """The random baseline of each dataset, in order; refuses missing ones and values outside ``[0, 1)``."""
    from flasheval.errors import InputError

    if not random_baselines:
        raise InputError("the centered aggregate needs random baselines for every dataset", field="random_baselines")
    missing = [d for d in dataset_names if d not in random_baselines]
    if missing:
        raise InputError(f"no random baseline for datasets {missing}", field="random_baselines")
    values = np.array([float(random_baselines[d]) for d in dataset_names])
    if np.any(values >= 1.0) or np.any(values < 0.0):
        raise InputError("random baselines must lie in [0, 1)", field="random_baselines")
    return values


def aggregate(
    dataset_means: np.ndarray,
    *,
    kind: str = "mean",
    higher_is_better: bool = True,
    dataset_names: Sequence[str] = (),
    random_baselines: Mapping[str, float] | None = None,
) -> np.ndarray:
    """One number per model from per-dataset means.

    Parameters
    ----------
    dataset_means
        Array ``(..., n_models, n_datasets)`` of per-dataset mean scores.
    kind
        ``"mean"``, ``"centered"`` or ``"win_rate"`` (see the module docstring).
    higher_is_better
        Direction of the score; ``win_rate`` counts a lower score as a win when ``False``.
    dataset_names, random_baselines
        Needed by ``centered`` only: the baseline of each dataset, looked up by name.

    Returns
    -------
    numpy.ndarray
        Shape ``(..., n_models)``. For ``win_rate`` higher is always better.

    Examples
    --------
    >>> means = np.array([[0.9, 0.5], [0.7, 0.7], [0.1, 0.2]])
    >>> aggregate(means).round(3).tolist()
    [0.7, 0.7, 0.15]
    >>> aggregate(means, kind="win_rate").tolist()
    [0.75, 0.75, 0.0]
    >>> aggregate(means, kind="centered", dataset_names=["a", "b"],
    ...           random_baselines={"a": 0.5, "b": 0.0}).round(3).tolist()
    [0.65, 0.55, -0.3]
    """
    check_aggregate(kind)
    means = np.asarray(dataset_means, dtype=np.float64)
    if means.ndim < 2:
        raise ValueError(f"dataset_means must be (..., n_models, n_datasets), got shape {means.shape}")
    if kind == "mean":
        return means.mean(axis=-1)
    if kind == "centered":
        if not higher_is_better:
            from flasheval.errors import InputError

            raise InputError("the centered aggregate needs a higher-is-better score", field="aggregate")
        base = check_random_baselines(dataset_names, random_baselines)
        if len(base) != means.shape[-1]:
            raise ValueError("dataset_names must name every dataset column")
        return ((means - base) / (1.0 - base)).mean(axis=-1)
    n_models = means.shape[-2]
    if n_models < 2:
        raise ValueError("win_rate needs at least 2 models")
    oriented = means if higher_is_better else -means
    # average rank among models (1 = lowest) = n_lower + (tie group size + 1) / 2
    avg_rank = rankdata(oriented, method="average", axis=-2)
    return ((avg_rank - 1.0) / (n_models - 1)).mean(axis=-1)


def competition_ranks(values: np.ndarray, *, higher_is_better: bool = True) -> np.ndarray:
    """Competition ranks (1 = best; ties share the best rank of their group) along the last axis.

    Examples
    --------
    >>> competition_ranks(np.array([0.5, 0.9, 0.5, 0.1])).tolist()
    [2, 1, 2, 4]
    >>> competition_ranks(np.array([3.0, 1.0]), higher_is_better=False).tolist()
    [2, 1]
    """
    values = np.asarray(values, dtype=np.float64)
    oriented = -values if higher_is_better else values
    return rankdata(oriented, method="min", axis=-1).astype(np.int64)


def rank_among(new_value: np.ndarray | float, pool_values: np.ndarray, *, higher_is_better: bool = True) -> np.ndarray:
    """Mid-rank of a new model among a pool: ``1 + n_better + n_tied / 2``.

    Parameters
    ----------
    new_value
        Aggregate of the new model, shape ``(...)``.
    pool_values
        Aggregates of the pool, shape ``(..., n_models)``.
    higher_is_better
        Direction of the aggregate.

    Examples
    --------
    >>> rank_among(0.6, np.array([0.9, 0.6, 0.5])).item()
    2.5
    >>> rank_among(np.array([1.0, 0.0]), np.array([[0.5, 0.2], [0.5, 0.2]])).tolist()
    [1.0, 3.0]
    """
    new = np.asarray(new_value, dtype=np.float64)[..., None]
    pool = np.asarray(pool_values, dtype=np.float64)
    better = pool > new if higher_is_better else pool < new
    tied = pool == new
    return 1.0 + better.sum(axis=-1) + 0.5 * tied.sum(axis=-1)
