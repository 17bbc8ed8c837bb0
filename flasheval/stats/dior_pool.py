"""DIoR's pool decision (``aggregate``) and leader changes: an aggregate's dependence on who else is in the pool.

Split from :mod:`flasheval.stats.dior` (examples and datasets decisions, Kendall tau-b, summaries): these
functions work on pairwise wins between models, which the mean win rate needs and the other aggregates do not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.stats.dior import DiorSummary, kendall_tau_b, summarize, top_two_swap
from flasheval.stats.ranking import aggregate

__all__ = ["LeaderChange", "pairwise_wins", "subpool_win_rates", "dior_pool", "find_leader_changes"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderChange:
    """A pool whose leader under an aggregate changes when one weak model is added."""

    pool: tuple[int, ...]
    """Model indices of the pool before the addition."""
    added: int
    """Index of the weak model added."""
    leader_before: int
    leader_after: int


def pairwise_wins(dataset_means: np.ndarray, *, higher_is_better: bool = True) -> np.ndarray:
    """``W[d, i, j]`` = 1 if model ``i`` beats ``j`` on dataset ``d``, 0.5 on a tie (0 on the diagonal).

    Examples
    --------
    >>> pairwise_wins(np.array([[0.9], [0.5], [0.5]]))[0].tolist()
    [[0.0, 1.0, 1.0], [0.0, 0.0, 0.5], [0.0, 0.5, 0.0]]
    """
    m = np.asarray(dataset_means, dtype=np.float64).T  # (n_datasets, n_models)
    if not higher_is_better:
        m = -m
    diff = m[:, :, None] - m[:, None, :]
    wins = np.where(diff > 0, 1.0, np.where(diff == 0, 0.5, 0.0))
    idx = np.arange(m.shape[1])
    wins[:, idx, idx] = 0.0
    return wins


def subpool_win_rates(wins: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Mean win rate of every model within each sub-pool (rows of boolean ``members``, ``(..., n_models)``).

    Entries of non-members are meaningless (they are computed as if the model joined the pool).

    Examples
    --------
    >>> w = pairwise_wins(np.array([[0.9, 0.2], [0.5, 0.5], [0.1, 0.9]]))
    >>> subpool_win_rates(w, np.array([True, True, True])).tolist()
    [0.5, 0.5, 0.5]
    """
    mem = np.asarray(members, dtype=np.float64)
    # beats[..., i] = sum over datasets d and members j of W[d, i, j]
    beats = np.einsum("...j,dij->...i", mem, wins)
    n_other = mem.sum(axis=-1, keepdims=True) - mem
    with np.errstate(invalid="ignore", divide="ignore"):
        return beats / (wins.shape[0] * n_other)


def _pool_values(kind: str, full_values: np.ndarray, wins: np.ndarray | None, members: np.ndarray) -> np.ndarray:
    if kind == "win_rate":
        return subpool_win_rates(wins, members)  # type: ignore[arg-type]
    return np.broadcast_to(full_values, members.shape)


def dior_pool(
    dataset_means: np.ndarray,
    *,
    aggregate_options: Mapping[str, object],
    n_instantiations: int = 1000,
    confidence_level: float = 0.95,
    rng: int | np.random.Generator | None = None,
) -> DiorSummary:
    """DIoR of an aggregate's pool dependence: random half sub-pools vs the full pool's ranking.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> m = rng.random((12, 4))
    >>> dior_pool(m, aggregate_options={"kind": "mean"}, n_instantiations=50, rng=0).tau_lower
    1.0
    """
    kind = str(aggregate_options.get("kind", "mean"))
    direction = True if kind == "win_rate" else bool(aggregate_options.get("higher_is_better", True))
    means = np.asarray(dataset_means, dtype=np.float64)
    n_models = means.shape[0]
    full = aggregate(means, **aggregate_options)
    wins = pairwise_wins(means, higher_is_better=bool(aggregate_options.get("higher_is_better", True))) \
        if kind == "win_rate" else None
    generator = np.random.default_rng(rng)
    members = generator.random((n_instantiations, n_models)) < 0.5
    small = members.sum(axis=1) < 3
    while small.any():  # redraw the few pools too small to rank
        members[small] = generator.random((int(small.sum()), n_models)) < 0.5
        small = members.sum(axis=1) < 3
    values = _pool_values(kind, full, wins, members)
    taus = kendall_tau_b(full, values, mask=members)
    first, second = np.argsort(-(full if direction else -full), kind="stable")[:2]
    both = members[:, first] & members[:, second]
    swaps = np.where(both, top_two_swap(full, values, higher_is_better=direction), np.nan)
    return summarize(taus, swaps, decision="aggregate", size=0, aggregate_kind=kind, confidence_level=confidence_level)


def _unique_leader(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Index of the strict best member per row, -1 when the best value is shared."""
    v = np.where(members, values, -np.inf)
    best = v.max(axis=-1, keepdims=True)
    at_best = v == best
    return np.where(at_best.sum(axis=-1) == 1, at_best.argmax(axis=-1), -1)


def find_leader_changes(
    dataset_means: np.ndarray,
    pools: np.ndarray,
    weak: Sequence[int],
    *,
    higher_is_better: bool = True,
) -> tuple[LeaderChange, ...]:
    """Pools whose mean-win-rate leader changes when one weak model is added.

    Only a change from one unique leader to another counts (a tie at the top is no leader).

    Parameters
    ----------
    dataset_means
        ``(n_models, n_datasets)``.
    pools
        Boolean ``(n_pools, n_models)``: the pools to try.
    weak
        Indices of the models that count as weak; each is added in turn to every pool that lacks it.

    Examples
    --------
    >>> m = np.array([[0.9, 0.3], [0.4, 0.6], [0.4, 0.5], [0.6, 0.0]])
    >>> pools = np.array([[True, True, True, False]])
    >>> [(c.added, c.leader_before, c.leader_after) for c in find_leader_changes(m, pools, [3])]
    [(3, 1, 0)]
    """
    wins = pairwise_wins(dataset_means, higher_is_better=higher_is_better)
    pools = np.asarray(pools, dtype=bool)
    found = []
    for w in weak:
        lacking = pools[~pools[:, w]]
        if not lacking.size:
            continue
        before = _unique_leader(subpool_win_rates(wins, lacking), lacking)
        grown = lacking.copy()
        grown[:, w] = True
        after = _unique_leader(subpool_win_rates(wins, grown), grown)
        for row in np.flatnonzero((before != after) & (before >= 0) & (after >= 0)):
            found.append(LeaderChange(pool=tuple(int(i) for i in np.flatnonzero(lacking[row])), added=int(w),
                                      leader_before=int(before[row]), leader_after=int(after[row])))
    return tuple(found)
