"""Backtest of the placement procedure on a reference: leave-one-out, or K models held out at once.

Leave-one-out (the default): each reference model in turn is removed from the pool, placed by
replay against the others, and compared with its full-data rank among them. On a large pool
(``held_out=K``): K models spread over the ranking (:func:`held_out_models`, seeded) leave the pool
together, and each is placed against the same remaining pool, as new checkpoints are placed
against one fixed reference; the pool's looks and their calibration are computed once. The
shares are then estimates from K models, given with their binomial standard errors
``sqrt(p (1 - p) / K)``. Three methods run on the same models, seed and example orders:

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
    Fluid Benchmarking (:mod:`flasheval.analysis.fluid`): a 2PL fit on the pool (without the
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
from flasheval.analysis.fluid import fluid_rank, pool_fits
from flasheval.placement.looks import LookPlan, look_plan
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.placement.results import PlacementResult
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.ranking import rank_among
from flasheval.stats.sampling import example_order

__all__ = ["METHODS", "ALL_METHODS", "BacktestRow", "MethodSummary", "BacktestResult", "SeedSummary", "backtest",
           "full_data_ranks", "held_out_models", "parse_seeds", "MAX_SEEDS", "summarize_seeds", "uniform_allocation"]

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
    share_within_se: float
    """Binomial standard error of ``share_within`` over the ``n_models`` placed, ``sqrt(p (1 - p) / n)``."""
    coverage_se: float
    """Binomial standard error of ``coverage``."""
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
    held_out: tuple[str, ...] = ()
    """The models held out together (``held_out=K``); empty for leave-one-out."""
    pool_size: int = 0
    """Models in the pool each placement ranks against."""

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "plan": self.plan, "seed": self.seed,
                "confidence_level": self.confidence_level, "design": "held-out" if self.held_out else "leave-one-out",
                "held_out": list(self.held_out), "pool_size": self.pool_size,
                "summaries": [asdict(s) for s in self.summaries],
                "rows": {m: [asdict(r) for r in rows] for m, rows in self.rows.items()}}


def full_data_ranks(reference: ReferenceLeaderboard, aggregate: str | None = None, *,
                    held_out: Sequence[str] = ()) -> dict[str, int]:
    """Each model's full-data rank (mid-rank, rounded half up): among the OTHER pool models, or, with
    ``held_out``, each held-out model's among the models not held out (its pool in the backtest)."""
    values = reference.aggregate_values(aggregate)
    direction = reference.ranking_higher_is_better(aggregate)
    out = {}
    if held_out:
        out_set = set(held_out)
        pool = values[[m not in out_set for m in reference.model_ids]]
        for m in held_out:
            out[m] = int(math.floor(float(rank_among(values[reference.index(m)], pool, higher_is_better=direction)) + 0.5))
        return out
    # each model among the others, counted in the sorted values (O(n log n), not a pass over the pool per model):
    # the same counts, and the same sum, as ``rank_among(values[i], np.delete(values, i))``
    ordered = np.sort(values)
    below = np.searchsorted(ordered, values, side="left")
    not_above = np.searchsorted(ordered, values, side="right")
    better = len(values) - not_above if direction else below
    tied = not_above - below - 1  # not itself
    for i, m in enumerate(reference.model_ids):
        out[m] = int(math.floor(float(1.0 + better[i] + 0.5 * tied[i]) + 0.5))
    return out


def held_out_models(reference: ReferenceLeaderboard, k: int, *, seed: int = 0,
                    aggregate: str | None = None) -> tuple[str, ...]:
    """``k`` models spread over the ranking: the models sorted by full-data aggregate (best first) are cut
    into ``k`` consecutive strata of near-equal size, and one model is drawn from each (seeded).

    Examples
    --------
    >>> from flasheval.analysis.simulation import synthetic_reference
    >>> ref = synthetic_reference(40, [50, 60], rng=0)
    >>> chosen = held_out_models(ref, 4, seed=1)
    >>> len(chosen), chosen == held_out_models(ref, 4, seed=1), chosen != held_out_models(ref, 4, seed=2)
    (4, True, True)
    """
    n = reference.n_models
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n - 2:
        raise InputError(f"must be a whole number from 1 to {n - 2} (the pool keeps at least 2 of its {n} models), "
                         f"got {k!r}", field="--held-out")
    values = reference.aggregate_values(aggregate)
    order = np.argsort(-values if reference.ranking_higher_is_better(aggregate) else values, kind="stable")
    gen = np.random.default_rng(derive_seed(seed, "held-out"))
    edges = np.linspace(0, n, int(k) + 1).round().astype(int)
    return tuple(reference.model_ids[int(order[gen.integers(lo, hi)])] for lo, hi in zip(edges[:-1], edges[1:]))


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


def _uniform(reference: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_id: str, full: int,
             per_dataset: list[int], plan: TierPlan, seed: int, aggregate: str | None) -> BacktestRow:
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
    within, covered = float(np.mean([r.within for r in rows])), float(np.mean([r.covered for r in rows]))
    return MethodSummary(
        method=method, n_models=len(rows), share_within=within, coverage=covered,
        share_within_se=math.sqrt(within * (1.0 - within) / len(rows)),
        coverage_se=math.sqrt(covered * (1.0 - covered) / len(rows)), median_saving=float(np.median(savings)),
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
    looks: dict[tuple[Any, TierPlan], LookPlan] | None = None,
    on_model: Callable[[BacktestRow, int, int], None] | None = None,
    held_out: int | None = None,
) -> BacktestResult:
    """Place every reference model, or ``held_out`` of them, against the others under ``methods`` (module docstring).

    ``flash_helm_plan``: the fixed schedule of the ``flash_helm`` method (needed only when it runs).
    ``looks``: a dict the caller keeps across seeds; each pool's looks (and their calibrated
    constant, the costly part) are computed once per pool and plan and stored there.
    ``on_model``: called as each held-out model's placements finish, with its adaptive row, the
    models done and the number of models (progress).
    ``held_out``: ``None`` leave-one-out; ``K``: the K models of :func:`held_out_models` (this seed's
    draw) leave the pool together and are each placed against the rest.
    """
    for m in methods:
        if m not in ALL_METHODS:
            raise UnknownNameError("backtest method", m, ALL_METHODS, field="--methods")
    methods = ("adaptive",) + tuple(dict.fromkeys(m for m in methods if m != "adaptive"))
    if "flash_helm" in methods and flash_helm_plan is None:
        raise InputError("the flash_helm method needs the plan of its fixed schedule (flash_helm_plan)",
                         field="--flash-helm-tiers")
    chosen = () if held_out is None else held_out_models(reference, held_out, seed=seed, aggregate=aggregate)
    placed = chosen or reference.model_ids
    full = full_data_ranks(reference, aggregate, held_out=chosen)
    shared = reference.without(*chosen) if chosen else None  # held out together: one pool for every placement
    pool_size = reference.n_models - (len(chosen) or 1)
    plan = plan.for_pool(pool_size + 1)  # each pool, plus the model placed
    rows: dict[str, list[BacktestRow]] = {m: [] for m in methods}
    counts: dict[str, tuple[int, ...]] = {}
    for model_id in placed:
        pool = shared if shared is not None else reference.without(model_id)
        for method, p in (("adaptive", plan), ("flash_helm", flash_helm_plan)):
            if method in methods:
                key = (("held out", chosen) if chosen else model_id, p)
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
            on_model(rows["adaptive"][-1], len(rows["adaptive"]), len(placed))
    sizes = [len(e) for e in reference.example_ids]
    if "uniform" in methods:
        per_dataset = uniform_allocation(float(np.mean([r.n_examples for r in rows["adaptive"]])), sizes)
        for model_id in placed:
            pool = shared if shared is not None else reference.without(model_id)
            rows["uniform"].append(_uniform(reference, pool, model_id, full[model_id], per_dataset, plan, seed,
                                            aggregate))
    if "fluid" in methods:
        rows["fluid"] = _fluid_rows(reference, placed, shared, full, counts, plan, seed, aggregate)
    frozen = {m: tuple(r) for m, r in rows.items()}
    return BacktestResult(reference=reference.name, plan=plan.name, seed=seed, confidence_level=plan.confidence_level,
                          rows=frozen, summaries=tuple(_summary(m, frozen[m], sum(sizes)) for m in methods),
                          held_out=chosen, pool_size=pool_size)


MAX_SEEDS = 10_000
"""Most seeds one ``--seeds`` list may name: each seed is a whole backtest (every model placed), seconds to
minutes each, so more is never a run anyone waits for; the bound is checked before a range is expanded."""


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-4"`` or ``"0,2,7"`` (or a mix, ``"0-2,9"``) as a tuple of distinct seeds in the given order.

    Linear in the number of seeds; at most :data:`MAX_SEEDS`, counted before a range is expanded (so
    ``0-99999999`` is refused at once); a seed named twice is refused.

    Examples
    --------
    >>> parse_seeds("0-4"), parse_seeds("3,1"), parse_seeds("0-1,5")
    ((0, 1, 2, 3, 4), (3, 1), (0, 1, 5))
    """
    if not isinstance(text, str):
        raise InputError(f"expected a seed list such as 0-4 or 0,2,7, got {text!r}", field="--seeds")
    spans = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            span = range(int(first), int(last) + 1) if dash else range(int(first), int(first) + 1)
        except ValueError:
            raise InputError(f"bad seed list {text!r}: use e.g. 0-4 or 0,2,7", field="--seeds") from None
        if not span or span.start < 0:
            raise InputError(f"bad seed list {text!r}: seeds are integers >= 0, ranges increasing", field="--seeds")
        spans.append(span)
    total = sum(len(span) for span in spans)
    if total > MAX_SEEDS:
        raise InputError(f"{total} seeds in {text[:40]!r}: at most {MAX_SEEDS} (each seed is a whole backtest)",
                         field="--seeds")
    seeds: dict[int, None] = {}
    for span in spans:
        for seed in span:
            if seed in seeds:
                raise InputError(f"seed {seed} listed twice in {text[:40]!r}", field="--seeds")
            seeds[seed] = None
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


def _fluid_rows(reference: ReferenceLeaderboard, placed: Sequence[str], shared: ReferenceLeaderboard | None,
                full: dict[str, int], counts: dict[str, tuple[int, ...]], plan: TierPlan, seed: int,
                aggregate: str | None) -> list[BacktestRow]:
    """Fluid Benchmarking at equal cost: each model gets the adaptive method's examples per dataset.
    ``shared``: the pool of every placement (models held out together; the 2PL is fitted on it once)."""
    full_fits = pool_fits(reference)
    shared_fits = None if shared is None else pool_fits(shared)
    total = sum(len(e) for e in reference.example_ids)
    out = []
    for model_id in placed:
        pool = shared if shared is not None else reference.without(model_id)
        fits = shared_fits if shared_fits is not None else pool_fits(reference, model_id, full_fits)
        i = reference.index(model_id)
        dist = fluid_rank(pool, [s[i] for s in reference.scores], counts[model_id], fits, aggregate=aggregate,
                          confidence_level=plan.confidence_level, n_resamples=plan.n_resamples,
                          rng=derive_seed(seed, "fluid", model_id))
        used = int(sum(counts[model_id]))
        out.append(_row(model_id, full[model_id], dist.rank, dist.interval, plan, used, total / used, "fixed"))
    return out
