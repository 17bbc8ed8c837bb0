"""Leave-one-out backtest of the placement procedure on a reference.

Each reference model in turn is removed from the pool, placed by replay against the others,
and compared with its full-data rank among them. Three methods run on the same models, seed
and example orders:

``adaptive``
    The given tier plan (default: ``tiers/default.yaml``).
``flash_helm``
    The Flash-HELM fixed schedule (``tiers/flash_helm.yaml``, the paper's stop rule).
``uniform``
    A fixed uniform subsample of equal total cost: every model gets the same number of
    examples, equal to the adaptive method's mean, spread as evenly as the datasets allow
    (a prefix of the same nested order), ranked once with a bootstrap interval at the
    plan's confidence level.
``fluid`` (opt in: ``methods=ALL_METHODS`` or ``flasheval backtest --methods ...``)
    Fluid Benchmarking (:mod:`flasheval.placement.fluid`): a 2PL fit on the pool (without the
    held-out model), adaptive example selection by Fisher information, at equal cost: per
    dataset the same number of examples as the adaptive method used for that model.

A placement is *within resolution* when ``|placed - full| <= k``, ``k`` the resolution of the
tier holding the placed rank (what the user is told); an interval *covers* when it contains
the full-data rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from flasheval.errors import InputError, UnknownNameError
from flasheval.hashing import derive_seed
from flasheval.placement.controller import place, stage_rank
from flasheval.placement.fluid import fluid_rank, pool_fits
from flasheval.placement.looks import LookPlan, look_plan
from flasheval.placement.replay import ReplayScorer
from flasheval.placement.results import PlacementResult
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.ranking import rank_among
from flasheval.stats.sampling import example_order

__all__ = ["METHODS", "ALL_METHODS", "BacktestRow", "MethodSummary", "BacktestResult", "SeedSummary", "backtest",
           "full_data_ranks", "parse_seeds", "summarize_seeds", "uniform_allocation"]

METHODS: tuple[str, ...] = ("adaptive", "flash_helm", "uniform")
"""Methods a backtest runs by default."""
ALL_METHODS: tuple[str, ...] = METHODS + ("fluid",)
"""Every method a backtest can run (``adaptive`` always runs: it sets the others' cost)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BacktestRow:
    """One held-out model under one method."""

    model_id: str
    full_rank: int
    placed_rank: int
    interval: tuple[int, int]
    tier: str
    resolution: int
    within: bool
    """``|placed - full| <= resolution``."""
    covered: bool
    """The interval contains the full-data rank."""
    n_examples: int
    saving: float
    status: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MethodSummary:
    """Backtest figures of one method."""

    method: str
    n_models: int
    share_within: float
    coverage: float
    median_saving: float
    mean_saving: float
    total_saving: float
    """Examples of full runs of every model divided by the examples spent in total (ratio of sums)."""
    mean_examples: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SeedSummary:
    """One method's figures over several seeds: each seed's value, their mean and their minimum."""

    method: str
    seeds: tuple[int, ...]
    share_within: tuple[float, ...]
    coverage: tuple[float, ...]
    median_saving: tuple[float, ...]
    total_saving: tuple[float, ...]

    def mean(self, field: str) -> float:
        return float(np.mean(getattr(self, field)))

    def min(self, field: str) -> float:
        return float(np.min(getattr(self, field)))


@dataclass(frozen=True, slots=True, kw_only=True)
class BacktestResult:
    reference: str
    plan: str
    seed: int
    confidence_level: float
    rows: dict[str, tuple[BacktestRow, ...]]
    summaries: tuple[MethodSummary, ...]

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "plan": self.plan, "seed": self.seed,
                "confidence_level": self.confidence_level,
                "summaries": [asdict(s) for s in self.summaries],
                "rows": {m: [asdict(r) for r in rows] for m, rows in self.rows.items()}}


def full_data_ranks(reference: ReferenceLeaderboard, aggregate: str | None = None) -> dict[str, int]:
    """Each pool model's full-data rank among the OTHER pool models (mid-rank, rounded half up)."""
    values = reference.aggregate_values(aggregate)
    direction = reference.ranking_higher_is_better(aggregate)
    out = {}
    for i, m in enumerate(reference.model_ids):
        mid = float(rank_among(values[i], np.delete(values, i), higher_is_better=direction))
        out[m] = int(math.floor(mid + 0.5))
    return out


def uniform_allocation(total: float, sizes: list[int]) -> list[int]:
    """Examples per dataset summing to about ``total``, as equal as the dataset sizes allow.

    Examples
    --------
    >>> uniform_allocation(300, [50, 1000, 1000])
    [50, 125, 125]
    """
    target = min(int(round(total)), sum(sizes))
    lo, hi = 0, max(sizes)
    while lo < hi:  # smallest per-dataset cap n with sum(min(n, N_d)) >= target
        mid = (lo + hi) // 2
        if sum(min(mid, s) for s in sizes) >= target:
            hi = mid
        else:
            lo = mid + 1
    return [min(lo, s) for s in sizes]


def _row(model_id: str, full: int, placed: int, interval: tuple[int, int], plan: TierPlan, n_examples: int,
         saving: float, status: str) -> BacktestRow:
    tier = plan.tier_for(placed)
    return BacktestRow(model_id=model_id, full_rank=full, placed_rank=placed, interval=interval, tier=tier.label,
                       resolution=tier.resolution, within=abs(placed - full) <= tier.resolution,
                       covered=interval[0] <= full <= interval[1], n_examples=n_examples, saving=saving, status=status)


def _from_placement(model_id: str, full: int, result: PlacementResult, plan: TierPlan) -> BacktestRow:
    if result.rank is None:
        raise ValueError("backtest placements run without a budget and always have a rank")
    return _row(model_id, full, result.rank, result.interval, plan, result.compute.n_examples,
                result.compute.saving, result.status)


def _uniform(reference: ReferenceLeaderboard, model_id: str, full: int, per_dataset: list[int], plan: TierPlan,
             seed: int, aggregate: str | None) -> BacktestRow:
    pool = reference.without(model_id)
    columns, new_scores = [], []
    for d, (name, ids) in enumerate(zip(reference.dataset_names, reference.example_ids)):
        index = {e: i for i, e in enumerate(ids)}
        cols = np.array([index[e] for e in example_order(ids, seed=seed, task_name=name)[:per_dataset[d]]], dtype=np.int64)
        columns.append(cols)
        new_scores.append(reference.scores[d][reference.index(model_id), cols])
    dist = stage_rank(pool, new_scores, columns, aggregate=aggregate, n_resamples=plan.n_resamples,
                      confidence_level=plan.confidence_level, rng=derive_seed(seed, "uniform"),
                      estimator=plan.estimator)
    used = int(sum(per_dataset))
    full_examples = sum(len(e) for e in reference.example_ids)
    return _row(model_id, full, dist.rank, dist.interval, plan, used, full_examples / used, "fixed")


def _summary(method: str, rows: tuple[BacktestRow, ...], full_examples: int) -> MethodSummary:
    savings = np.array([r.saving for r in rows])
    used = np.array([r.n_examples for r in rows], dtype=np.float64)
    return MethodSummary(
        method=method, n_models=len(rows), share_within=float(np.mean([r.within for r in rows])),
        coverage=float(np.mean([r.covered for r in rows])), median_saving=float(np.median(savings)),
        mean_saving=float(savings.mean()), total_saving=float(full_examples * len(rows) / used.sum()),
        mean_examples=float(used.mean()))


def backtest(
    reference: ReferenceLeaderboard,
    plan: TierPlan,
    flash_helm_plan: TierPlan | None = None,
    *,
    seed: int = 0,
    aggregate: str | None = None,
    methods: Sequence[str] = METHODS,
    looks: dict[tuple[str, TierPlan], LookPlan] | None = None,
    on_model: Callable[[BacktestRow, int, int], None] | None = None,
) -> BacktestResult:
    """Leave-one-out placement of every reference model under ``methods`` (see the module docstring).

    ``flash_helm_plan``: the fixed schedule of the ``flash_helm`` method (needed only when it runs).
    ``looks``: a dict the caller keeps across seeds; each pool's looks (and their calibrated
    constant, the costly part) are computed once per held-out model and plan and stored there.
    ``on_model``: called as each held-out model's placements finish, with its adaptive row, the
    models done and the number of models (progress).
    """
    for m in methods:
        if m not in ALL_METHODS:
            raise UnknownNameError("backtest method", m, ALL_METHODS, field="--methods")
    methods = ("adaptive",) + tuple(dict.fromkeys(m for m in methods if m != "adaptive"))
    if "flash_helm" in methods and flash_helm_plan is None:
        raise InputError("the flash_helm method needs the plan of its fixed schedule (flash_helm_plan)",
                         field="--flash-helm-tiers")
    full = full_data_ranks(reference, aggregate)
    plan = plan.for_pool(reference.n_models)  # each pool: the other n_models - 1, plus the held-out model
    rows: dict[str, list[BacktestRow]] = {m: [] for m in methods}
    counts: dict[str, tuple[int, ...]] = {}
    for model_id in reference.model_ids:
        pool = reference.without(model_id)
        for method, p in (("adaptive", plan), ("flash_helm", flash_helm_plan)):
            if method in methods:
                key = (model_id, p)
                plan_looks = None if looks is None else looks.get(key)
                if plan_looks is None:
                    plan_looks = look_plan(pool, p.for_pool(pool.n_models + 1), aggregate)
                    if looks is not None:
                        looks[key] = plan_looks
                result = place(pool, ReplayScorer(reference, model_id), p, model_id=model_id, seed=seed,
                               aggregate=aggregate, looks=plan_looks)
                rows[method].append(_from_placement(model_id, full[model_id], result, plan))
                counts.setdefault(model_id, result.stages[-1].n_examples)
        if on_model is not None:
            on_model(rows["adaptive"][-1], len(rows["adaptive"]), reference.n_models)
    sizes = [len(e) for e in reference.example_ids]
    if "uniform" in methods:
        per_dataset = uniform_allocation(float(np.mean([r.n_examples for r in rows["adaptive"]])), sizes)
        for model_id in reference.model_ids:
            rows["uniform"].append(_uniform(reference, model_id, full[model_id], per_dataset, plan, seed, aggregate))
    if "fluid" in methods:
        rows["fluid"] = _fluid_rows(reference, full, counts, plan, seed, aggregate)
    frozen = {m: tuple(r) for m, r in rows.items()}
    return BacktestResult(reference=reference.name, plan=plan.name, seed=seed, confidence_level=plan.confidence_level,
                          rows=frozen, summaries=tuple(_summary(m, frozen[m], sum(sizes)) for m in methods))


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-4"`` or ``"0,2,7"`` (or a mix, ``"0-2,9"``) as a tuple of distinct seeds in the given order.

    Examples
    --------
    >>> parse_seeds("0-4"), parse_seeds("3,1"), parse_seeds("0-1,5")
    ((0, 1, 2, 3, 4), (3, 1), (0, 1, 5))
    """
    seeds: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            span = range(int(first), int(last) + 1) if dash else range(int(first), int(first) + 1)
        except ValueError:
            raise InputError(f"bad seed list {text!r}: use e.g. 0-4 or 0,2,7", field="--seeds") from None
        if not span or span.start < 0:
            raise InputError(f"bad seed list {text!r}: seeds are integers >= 0, ranges increasing", field="--seeds")
        seeds.extend(s for s in span if s not in seeds)
    return tuple(seeds)


def summarize_seeds(results: list[BacktestResult]) -> tuple[SeedSummary, ...]:
    """Per method, every seed's within share, coverage, median and total saving (for mean and min)."""
    out = []
    for i, first in enumerate(results[0].summaries):
        method = first.method
        per = [r.summaries[i] for r in results]
        out.append(SeedSummary(method=method, seeds=tuple(r.seed for r in results),
                               share_within=tuple(s.share_within for s in per), coverage=tuple(s.coverage for s in per),
                               median_saving=tuple(s.median_saving for s in per),
                               total_saving=tuple(s.total_saving for s in per)))
    return tuple(out)


def _fluid_rows(reference: ReferenceLeaderboard, full: dict[str, int], counts: dict[str, tuple[int, ...]],
                plan: TierPlan, seed: int, aggregate: str | None) -> list[BacktestRow]:
    """Fluid Benchmarking at equal cost: each model gets the adaptive method's examples per dataset."""
    full_fits = pool_fits(reference)
    total = sum(len(e) for e in reference.example_ids)
    out = []
    for model_id in reference.model_ids:
        pool = reference.without(model_id)
        i = reference.index(model_id)
        dist = fluid_rank(pool, [s[i] for s in reference.scores], counts[model_id],
                          pool_fits(reference, model_id, full_fits), aggregate=aggregate,
                          confidence_level=plan.confidence_level, n_resamples=plan.n_resamples,
                          rng=derive_seed(seed, "fluid", model_id))
        used = int(sum(counts[model_id]))
        out.append(_row(model_id, full[model_id], dist.rank, dist.interval, plan, used, total / used, "fixed"))
    return out
