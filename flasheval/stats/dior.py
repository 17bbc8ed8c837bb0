"""Decision Impact on Reliability (DIoR, Perlitz et al., NAACL 2024), vectorized over instantiations.

A benchmark design decision (which examples, which datasets, which aggregate) is *reliable*
when the ranking it produces does not depend on the arbitrary part of the decision. DIoR
draws many instantiations of the decision, ranks the models under each, compares every
ranking with the full-data ranking by Kendall's tau-b and reports the **lower bound of the
central 95% interval** of tau over instantiations (the paper's headline number): "with this
decision, 97.5% of the benchmarks one could have built rank the models at least this close
to the full benchmark". For the *best-model* objective it also reports the rate at which
the full-data top two swap.

Decisions
---------
``examples``
    Keep ``S`` examples per dataset, a uniform random subset (without replacement; a dataset
    with at most ``S`` examples is kept whole). The subsets of one instantiation are nested
    across the sizes (prefixes of one random permutation), so the curve over ``S`` is smooth.
``datasets``
    Resample ``k`` datasets with replacement (a dataset bootstrap; ``k`` = all by default):
    the aggregate becomes the weighted mean of the per-dataset contributions.
``aggregate`` (:mod:`flasheval.stats.dior_pool`)
    Pool dependence of each aggregate: the instantiation is a random sub-pool (each model
    kept with probability one half, at least 3), ranked under the aggregate and compared with
    the full pool's ranking under the same aggregate restricted to the sub-pool. Mean and
    centered accuracy are pool-independent (tau = 1); HELM's mean win rate is not.

Every aggregate of :mod:`flasheval.stats.ranking` is a mean over datasets of a per-dataset
*contribution* (the mean score, the centered score, the per-dataset win rate), which is what
makes the dataset resampling a weighted mean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.stats.ranking import aggregate

__all__ = [
    "DECISIONS",
    "DiorSummary",
    "kendall_tau_b",
    "top_two_swap",
    "dataset_contributions",
    "subsample_means",
    "summarize",
    "dior_examples",
    "dior_datasets",
]

DECISIONS: tuple[str, ...] = ("examples", "datasets", "aggregate")
"""Design decisions DIoR can instantiate."""

_CHUNK = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class DiorSummary:
    """Reliability of one decision at one size."""

    decision: str
    """``examples``, ``datasets`` or ``aggregate``."""
    size: int
    """Examples per dataset (examples), datasets drawn (datasets), 0 for aggregate."""
    aggregate: str
    """The aggregate the rankings use."""
    n_instantiations: int
    tau_lower: float
    """Lower bound of the central ``confidence_level`` interval of Kendall tau-b."""
    tau_median: float
    tau_mean: float
    confidence_level: float
    top_two_swap_rate: float
    """Share of instantiations where the full-data second model beats the first (ties count half)."""

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"unknown decision {self.decision!r}")
        if self.n_instantiations < 1:
            raise ValueError("n_instantiations must be >= 1")


def kendall_tau_b(x: np.ndarray, y: np.ndarray, *, mask: np.ndarray | None = None) -> np.ndarray:
    """Kendall's tau-b between ``x`` and every row of ``y`` (scipy.stats.kendalltau semantics).

    Parameters
    ----------
    x
        Reference values, ``(n,)``.
    y
        Values to compare, ``(..., n)``.
    mask
        Optional boolean ``(..., n)``: only items where it is true enter the row's tau.

    Returns
    -------
    numpy.ndarray
        ``(...)``; NaN where one side is constant (as scipy).

    Examples
    --------
    >>> kendall_tau_b(np.array([1., 2., 3.]), np.array([[1., 2., 3.], [3., 2., 1.], [1., 1., 2.]])).round(3).tolist()
    [1.0, -1.0, 0.816]
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.shape[-1]
    i, j = np.triu_indices(n, k=1)
    sx = np.sign(x[i] - x[j])
    lead = y.shape[:-1]
    flat = y.reshape(-1, n)
    flat_mask = None if mask is None else np.broadcast_to(mask, y.shape).reshape(-1, n)
    out = np.empty(flat.shape[0])
    for start in range(0, flat.shape[0], _CHUNK):
        block = flat[start:start + _CHUNK]
        sy = np.sign(block[:, i] - block[:, j])
        sxx = np.broadcast_to(sx, sy.shape)
        if flat_mask is not None:
            both = flat_mask[start:start + _CHUNK][:, i] & flat_mask[start:start + _CHUNK][:, j]
            sy = sy * both
            sxx = sxx * both
        num = (sxx * sy).sum(axis=1)
        den = np.sqrt((sxx != 0).sum(axis=1) * (sy != 0).sum(axis=1).astype(np.float64))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + _CHUNK] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return out.reshape(lead)


def top_two_swap(reference_values: np.ndarray, values: np.ndarray, *, higher_is_better: bool = True) -> np.ndarray:
    """Per row of ``values``: 1 if the reference's second model beats its first, 0.5 on a tie, else 0.

    Examples
    --------
    >>> top_two_swap(np.array([0.9, 0.8, 0.1]), np.array([[0.9, 0.8, 0.0], [0.7, 0.8, 0.0], [0.5, 0.5, 0.5]])).tolist()
    [0.0, 1.0, 0.5]
    """
    ref = np.asarray(reference_values, dtype=np.float64)
    sign = 1.0 if higher_is_better else -1.0
    first, second = np.argsort(-sign * ref, kind="stable")[:2]
    v = sign * np.asarray(values, dtype=np.float64)
    return np.where(v[..., second] > v[..., first], 1.0, np.where(v[..., second] == v[..., first], 0.5, 0.0))


def dataset_contributions(
    dataset_means: np.ndarray,
    *,
    kind: str = "mean",
    higher_is_better: bool = True,
    dataset_names: Sequence[str] = (),
    random_baselines: Mapping[str, float] | None = None,
) -> np.ndarray:
    """Per-dataset contributions ``(..., n_models, n_datasets)`` whose mean over datasets is the aggregate.

    Examples
    --------
    >>> m = np.array([[0.9, 0.2], [0.5, 0.5], [0.1, 0.9]])
    >>> bool(np.allclose(dataset_contributions(m, kind="win_rate").mean(-1), aggregate(m, kind="win_rate")))
    True
    """
    means = np.asarray(dataset_means, dtype=np.float64)
    names = list(dataset_names) or [f"d{k}" for k in range(means.shape[-1])]
    cols = [aggregate(means[..., k:k + 1], kind=kind, higher_is_better=higher_is_better, dataset_names=[names[k]],
                      random_baselines=random_baselines) for k in range(means.shape[-1])]
    return np.stack(cols, axis=-1)


def subsample_means(
    scores: Sequence[np.ndarray], sizes: Sequence[int], *, n_instantiations: int, rng: int | np.random.Generator | None
) -> np.ndarray:
    """Per-dataset means of every model on random nested subsets of ``S`` examples per dataset.

    Parameters
    ----------
    scores
        Per dataset, ``(n_models, N_d)`` per-example scores.
    sizes
        Examples per dataset ``S`` (a dataset with ``N_d <= S`` is kept whole).
    n_instantiations
        Random subsets drawn (the same permutation serves every size: nested).
    rng
        Seed or generator; each dataset gets its own child stream.

    Returns
    -------
    numpy.ndarray
        ``(n_sizes, n_instantiations, n_models, n_datasets)``.

    Examples
    --------
    >>> s = [np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])]
    >>> out = subsample_means(s, [3], n_instantiations=4, rng=0)
    >>> out.shape, out[0, :, :, 0].tolist()[0]
    ((1, 4, 2, 1), [0.6666666666666666, 0.3333333333333333])
    """
    streams = np.random.default_rng(rng).spawn(len(scores))
    n_models = scores[0].shape[0]
    out = np.empty((len(sizes), n_instantiations, n_models, len(scores)))
    for d, (s, stream) in enumerate(zip(scores, streams)):
        s = np.asarray(s, dtype=np.float64)
        n = s.shape[1]
        # position of every example in a random permutation, one permutation per instantiation
        position = stream.permuted(np.tile(np.arange(n), (n_instantiations, 1)), axis=1)
        for k, size in enumerate(sizes):
            take = min(int(size), n)
            out[k, :, :, d] = ((position < take).astype(np.float64) @ s.T) / take
    return out


def summarize(
    taus: np.ndarray, swaps: np.ndarray, *, decision: str, size: int, aggregate_kind: str, confidence_level: float
) -> DiorSummary:
    """Reduce per-instantiation taus and top-two swaps to a :class:`DiorSummary` (NaN taus dropped).

    Examples
    --------
    >>> s = summarize(np.linspace(0.5, 1.0, 101), np.zeros(101), decision="examples", size=10,
    ...               aggregate_kind="mean", confidence_level=0.95)
    >>> round(s.tau_lower, 3), s.top_two_swap_rate
    (0.51, 0.0)
    """
    finite = taus[np.isfinite(taus)]
    alpha = 1.0 - confidence_level
    lower = float(np.quantile(finite, alpha / 2, method="lower")) if finite.size else float("nan")
    swap = swaps[np.isfinite(swaps)]
    return DiorSummary(
        decision=decision, size=int(size), aggregate=aggregate_kind, n_instantiations=int(taus.size), tau_lower=lower,
        tau_median=float(np.median(finite)) if finite.size else float("nan"),
        tau_mean=float(finite.mean()) if finite.size else float("nan"), confidence_level=confidence_level,
        top_two_swap_rate=float(swap.mean()) if swap.size else float("nan"),
    )


def dior_examples(
    scores: Sequence[np.ndarray],
    sizes: Sequence[int],
    *,
    aggregate_options: Mapping[str, object],
    n_instantiations: int = 1000,
    confidence_level: float = 0.95,
    rng: int | np.random.Generator | None = None,
) -> tuple[DiorSummary, ...]:
    """DIoR of the choice of examples: ``S`` random examples per dataset, for each ``S`` in ``sizes``.

    ``aggregate_options`` are the keyword arguments of :func:`flasheval.stats.ranking.aggregate`.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> s = [(rng.random((5, 300)) < np.linspace(0.3, 0.7, 5)[:, None]).astype(float) for _ in range(2)]
    >>> out = dior_examples(s, [10, 300], aggregate_options={}, n_instantiations=200, rng=0)
    >>> out[0].tau_lower < out[1].tau_lower == 1.0
    True
    """
    kind = str(aggregate_options.get("kind", "mean"))
    direction = True if kind == "win_rate" else bool(aggregate_options.get("higher_is_better", True))
    full = aggregate(np.stack([np.asarray(s, dtype=np.float64).mean(axis=1) for s in scores], axis=1), **aggregate_options)
    means = subsample_means(scores, sizes, n_instantiations=n_instantiations, rng=rng)
    out = []
    for k, size in enumerate(sizes):
        values = aggregate(means[k], **aggregate_options)
        out.append(summarize(kendall_tau_b(full, values), top_two_swap(full, values, higher_is_better=direction),
                             decision="examples", size=size, aggregate_kind=kind, confidence_level=confidence_level))
    return tuple(out)


def dior_datasets(
    dataset_means: np.ndarray,
    sizes: Sequence[int],
    *,
    aggregate_options: Mapping[str, object],
    n_instantiations: int = 1000,
    confidence_level: float = 0.95,
    rng: int | np.random.Generator | None = None,
) -> tuple[DiorSummary, ...]:
    """DIoR of the choice of datasets: ``k`` datasets drawn with replacement, for each ``k`` in ``sizes``.

    Examples
    --------
    >>> m = np.array([[0.9, 0.1, 0.5], [0.5, 0.5, 0.5], [0.1, 0.9, 0.4]])
    >>> out = dior_datasets(m, [3], aggregate_options={}, n_instantiations=300, rng=0)
    >>> out[0].tau_lower < 0.5 < out[0].top_two_swap_rate + 0.5
    True
    """
    kind = str(aggregate_options.get("kind", "mean"))
    direction = True if kind == "win_rate" else bool(aggregate_options.get("higher_is_better", True))
    contrib = dataset_contributions(dataset_means, **aggregate_options)  # (n_models, n_datasets)
    full = contrib.mean(axis=-1)
    n_datasets = contrib.shape[-1]
    generator = np.random.default_rng(rng)
    out = []
    for size in sizes:
        if size < 1:
            raise ValueError(f"sizes must be >= 1, got {size}")
        weights = generator.multinomial(int(size), np.full(n_datasets, 1.0 / n_datasets), size=n_instantiations)
        values = (weights @ contrib.T) / float(size)  # (n_instantiations, n_models)
        out.append(summarize(kendall_tau_b(full, values), top_two_swap(full, values, higher_is_better=direction),
                             decision="datasets", size=size, aggregate_kind=kind, confidence_level=confidence_level))
    return tuple(out)
