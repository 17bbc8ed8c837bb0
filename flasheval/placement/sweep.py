"""Budget-capped sweeps: place many checkpoints at once, spending where it changes a decision.

Every checkpoint is scored on the SAME nested subsamples (prefixes of one seeded order per
dataset, :func:`flasheval.stats.sampling.example_order`), so checkpoints are comparable with each
other (paired), not only with the reference pool. The sweep runs in rounds; in each round:

1. every checkpoint that is still *active* asks for its next stage of the tier plan;
2. the requests are served in priority order while the total budget lasts: first checkpoints
   with no look yet (everyone gets the first stage), then those whose rank interval still
   overlaps a tier boundary, the top tiers first (lowest possible rank first), then the rest;
   a stage that would exceed the budget is not started;
3. each served checkpoint is ranked against the pool (:func:`flasheval.placement.controller.stage_rank`,
   the same statistics as ``place``) and the plan's stop rule decides (``resolved``); a
   checkpoint whose whole interval lies at or below ``low_rank`` (default: the first rank of
   the plan's open-ended last tier) stops as ``clearly low`` (racing: its tier is settled and
   its precise rank changes no decision).

The sweep ends when no checkpoint is active or the budget cannot pay for any next stage
(those left are ``unresolved at budget``, with their last interval). The checkpoints' order
among themselves comes with its own bootstrap intervals (:func:`checkpoint_order`).

Resumable: scores go through a :class:`~flasheval.placement.sweep_store.ResultsStore`; decisions depend
only on the scores and the seed, so a rerun after a crash replays the finished work from the
store, spends nothing twice and ends with the same result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from flasheval.errors import InputError
from flasheval.hashing import derive_seed
from flasheval.placement.controller import stage_rank
from flasheval.placement.looks import for_budget, look_plan, stage_targets
from flasheval.placement.results import Budget
from flasheval.placement.scorers import ExampleScorer
from flasheval.placement.stop_rule import decide
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.bootstrap import control_variate_means, percentile_interval
from flasheval.stats.ranking import aggregate as aggregate_values
from flasheval.stats.ranking import competition_ranks
from flasheval.stats.sampling import example_order

__all__ = ["SweepStage", "CheckpointResult", "OrderEntry", "SweepResult", "sweep", "check_sweep_budget", "checkpoint_order",
           "STATUSES"]

logger = logging.getLogger(__name__)

STATUSES: tuple[str, ...] = ("resolved", "clearly low", "unresolved at budget")


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepStage:
    """One look at one checkpoint."""

    round: int
    stage_size: int | None
    n_examples: int
    """Examples scored so far for this checkpoint (all datasets)."""
    rank: int
    interval: tuple[int, int]
    confidence_level: float


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointResult:
    """Where one checkpoint landed and what it cost."""

    model_id: str
    status: str
    """One of :data:`STATUSES`."""
    reason: str
    rank: int | None
    interval: tuple[int, int]
    tier: str | None
    resolution: int | None
    n_examples: int
    n_tokens: int | None
    flops: float | None
    saving: float
    """Full-run examples of this checkpoint divided by the examples it got."""
    rounds: int
    """Rounds in which it was scored."""
    per_dataset: tuple[int, ...]
    """Examples scored per dataset (a prefix of the shared order)."""
    stages: tuple[SweepStage, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderEntry:
    """A checkpoint's rank among the checkpoints of the sweep."""

    model_id: str
    rank: int
    interval: tuple[int, int]
    value: float
    """Estimated full-data aggregate."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepResult:
    reference: str
    plan: str
    seed: int
    aggregate: str
    budget: dict[str, float | None]
    n_models: int
    """Reference models in the pool."""
    low_rank: int
    tier_boundaries: tuple[int, ...]
    """First rank of every tier but the first."""
    checkpoints: tuple[CheckpointResult, ...]
    order: tuple[OrderEntry, ...]
    n_rounds: int
    n_examples: int
    full_examples: int
    """Examples of full runs of every checkpoint."""
    n_computed: int = 0
    """Examples actually computed in this process (less than ``n_examples`` after a resume)."""
    truth: dict[str, int] = field(default_factory=dict)
    """Full-data rank among the pool of checkpoints replayed from the reference (backtest)."""

    @property
    def saving(self) -> float:
        """Total saving: examples of full runs of every checkpoint / examples spent (ratio of sums)."""
        return self.full_examples / max(self.n_examples, 1)

    @property
    def median_saving(self) -> float:
        """Median over checkpoints of each one's saving."""
        return float(np.median([c.saving for c in self.checkpoints])) if self.checkpoints else 1.0

    def to_json(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in ("reference", "plan", "seed", "aggregate", "budget", "n_models", "low_rank",
                                             "n_rounds", "n_computed", "truth")}
        out["tier_boundaries"] = list(self.tier_boundaries)
        out["checkpoints"] = [asdict(c) for c in self.checkpoints]
        out["order"] = [asdict(o) for o in self.order]
        out["compute"] = {"n_examples": self.n_examples, "full_examples": self.full_examples, "saving": self.saving,
                          "median_saving": self.median_saving}
        return out


class _Checkpoint:
    """Mutable state of one checkpoint during the sweep."""

    def __init__(self, model_id: str, scorer: ExampleScorer, n_datasets: int) -> None:
        self.model_id = model_id
        self.scorer = scorer
        self.scores: list[list[np.ndarray]] = [[] for _ in range(n_datasets)]
        self.tokens: list[list[np.ndarray]] | None = [[] for _ in range(n_datasets)]
        self.n = [0] * n_datasets
        self.tokens_total = 0
        self._joined: list[np.ndarray] | None = None
        self.next_stage = 0
        self.status = "active"
        self.reason = ""
        self.looks: list[SweepStage] = []
        self.dist = None
        self.placed: int | None = None
        """Rank reported after the last look (the ``window`` rule may report a rank other than the point rank)."""

    def add(self, d: int, scores: np.ndarray, tokens: np.ndarray | None) -> None:
        self.scores[d].append(scores)
        self.n[d] += len(scores)
        self._joined = None
        if tokens is None:
            self.tokens = None
        elif self.tokens is not None:
            self.tokens[d].append(tokens)
            self.tokens_total += int(tokens.sum())

    def joined(self) -> list[np.ndarray]:
        """Every dataset's scores so far, one array each (joined once per look, then kept in one piece)."""
        if self._joined is None:
            self._joined = [np.concatenate(s) if s else np.empty(0) for s in self.scores]
            self.scores = [[j] if len(j) else [] for j in self._joined]
        return self._joined

    @property
    def n_tokens(self) -> int | None:
        return None if self.tokens is None else self.tokens_total


def _next_targets(c: _Checkpoint, plan: TierPlan, sizes: list[int]) -> tuple[int, list[int]] | None:
    """The next plan stage that adds examples to ``c``, with its per-dataset targets."""
    for k in range(c.next_stage, len(plan.stages)):
        targets = stage_targets(plan.stages[k], sizes)
        if targets != c.n:
            return k, targets
    return None


def _priority(c: _Checkpoint, plan: TierPlan) -> tuple[int, int, int]:
    """Sort key: no look yet first; then intervals overlapping a tier boundary, best possible rank first."""
    if c.dist is None:
        return (0, 0, 0)
    lo, hi = c.dist.interval
    crosses = plan.tier_for(lo) is not plan.tier_for(hi)
    return (1 if crosses else 2, lo, -(hi - lo))


def _spent(state: list[_Checkpoint]) -> tuple[int, float | None]:
    """Examples and tokens (``None`` unless every scored checkpoint reports tokens) spent so far."""
    examples = sum(sum(c.n) for c in state)
    scored = [c for c in state if sum(c.n)]
    if not scored or any(c.n_tokens is None for c in scored):
        return examples, None
    return examples, float(sum(c.n_tokens or 0 for c in scored))


class _Spent:
    """:func:`_spent`, kept up to date as stages are served: a round costs the same whatever rounds came before."""

    def __init__(self, state: list[_Checkpoint]) -> None:
        self.examples = 0
        self._tokens = 0
        self._scored = 0
        self._without_tokens = 0  # scored checkpoints that report no tokens: the total is then unknown
        for c in state:
            self.add((0, None), c)

    @property
    def tokens(self) -> float | None:
        return None if not self._scored or self._without_tokens else float(self._tokens)

    def add(self, before: tuple[int, int | None], c: _Checkpoint) -> None:
        """Account for ``c``'s stage just served; ``before``: its examples and tokens before it."""
        examples_before, tokens_before = before
        if examples_before:  # take out what it counted for before
            self._scored -= 1
            if tokens_before is None:
                self._without_tokens -= 1
            else:
                self._tokens -= tokens_before
        self.examples += sum(c.n) - examples_before
        if sum(c.n):
            self._scored += 1
            if c.n_tokens is None:
                self._without_tokens += 1
            else:
                self._tokens += c.n_tokens


def _projected(c: _Checkpoint, targets: list[int], spent: _Spent) -> tuple[int, float | None]:
    """Examples and tokens after moving ``c`` to ``targets`` (tokens at the rate seen so far)."""
    examples, tokens = spent.examples, spent.tokens
    extra = sum(t - n for t, n in zip(targets, c.n))
    if tokens is None:
        return examples + extra, None
    rate = c.n_tokens / sum(c.n) if sum(c.n) and c.n_tokens is not None else tokens / max(examples, 1)
    return examples + extra, tokens + rate * extra


def check_sweep_budget(budget: Budget, plan: TierPlan, reference: ReferenceLeaderboard, n_checkpoints: int) -> None:
    """Refuse a budget smaller than one first stage for every checkpoint (``reference``: the pool, held out);
    :func:`sweep` checks it too, callers check it before they write anything."""
    plan = plan.for_pool(reference.n_models + 1)
    first = sum(stage_targets(plan.stages[0], [len(ids) for ids in reference.example_ids]))
    if budget.max_examples is not None and budget.max_examples < first * n_checkpoints:
        raise InputError(f"budget of {budget.max_examples} examples is smaller than one stage for every checkpoint "
                         f"({n_checkpoints} x {first} = {first * n_checkpoints} examples for stage 1 of plan {plan.name})",
                         field="--budget-examples")


def _look(c: _Checkpoint, reference: ReferenceLeaderboard, plan: TierPlan, positions: list[np.ndarray], *,
          stage_size: int | None, round_: int, seed: int, aggregate: str | None, low_rank: int,
          levels: tuple[float, ...]) -> None:
    """Rank ``c`` on what it has, apply the stop rule and the racing rule."""
    look = len(c.looks)
    level = levels[look]
    dist = stage_rank(reference, c.joined(), [positions[d][:n] for d, n in enumerate(c.n)], aggregate=aggregate,
                      n_resamples=plan.n_resamples, confidence_level=level, rng=derive_seed(seed, "bootstrap", look),
                      estimator=plan.estimator)
    c.dist = dist
    c.looks.append(SweepStage(round=round_, stage_size=stage_size, n_examples=sum(c.n), rank=dist.rank,
                              interval=dist.interval, confidence_level=level))
    is_last = all(n == size for n, size in zip(c.n, (len(e) for e in reference.example_ids)))
    decision = decide(plan=plan, stage_size=stage_size, rank=dist.rank, interval=dist.interval, is_last=is_last,
                      mid_rank=dist.mid_rank)
    c.placed = dist.rank if decision.rank is None else decision.rank
    if decision.stop:
        c.status, c.reason = "resolved", decision.reason
    elif dist.interval[0] >= low_rank:
        c.status, c.reason = "clearly low", f"interval [{dist.interval[0]}, {dist.interval[1]}] lies at or below rank {low_rank}"
    logger.info("round %d: %s rank %d [%d, %d] after %d examples: %s", round_, c.model_id, dist.rank, *dist.interval,
                sum(c.n), c.status if c.status != "active" else decision.reason)


def _serve(c: _Checkpoint, reference: ReferenceLeaderboard, orders: list[tuple[str, ...]], targets: list[int]) -> None:
    for d, name in enumerate(reference.dataset_names):
        new_ids = orders[d][c.n[d]:targets[d]]
        if new_ids:
            got = c.scorer.score(name, new_ids)
            if got.scores.shape != (len(new_ids),):
                raise ValueError(f"scorer returned {got.scores.shape} scores for {len(new_ids)} examples of {name}")
            c.add(d, got.scores.astype(np.float64), got.n_tokens)


def _round(state: list[_Checkpoint], reference: ReferenceLeaderboard, plan: TierPlan, ctx: dict[str, Any],
           round_: int) -> bool:
    """One round: serve the active checkpoints' next stages in priority order within the budget."""
    budget: Budget = ctx["budget"]
    served = False
    for c in sorted((c for c in state if c.status == "active"), key=lambda c: (_priority(c, plan), c.model_id)):
        nxt = _next_targets(c, plan, ctx["sizes"])
        if nxt is None:  # every example scored: the last look already resolved it
            continue
        k, targets = nxt
        examples, tokens = _projected(c, targets, ctx["spent"])
        flops = None if tokens is None or ctx["n_parameters"] is None else 2.0 * ctx["n_parameters"] * tokens
        if budget.exceeded_by(examples=examples, tokens=tokens, flops=flops) is not None:
            continue
        before = (sum(c.n), c.n_tokens)
        _serve(c, reference, ctx["orders"], targets)
        ctx["spent"].add(before, c)
        c.next_stage = k + 1
        _look(c, reference, plan, ctx["positions"], stage_size=plan.stages[k], round_=round_, seed=ctx["seed"],
              aggregate=ctx["aggregate"], low_rank=ctx["low_rank"], levels=ctx["levels"])
        served = True
    return served


def checkpoint_order(
    reference: ReferenceLeaderboard,
    checkpoints: list[tuple[str, list[np.ndarray], list[np.ndarray]]],
    *,
    aggregate: str | None,
    n_resamples: int,
    confidence_level: float,
    seed: int,
) -> tuple[OrderEntry, ...]:
    """The checkpoints' order among themselves, with bootstrap intervals of their ranks.

    Each checkpoint's full-data per-dataset means are estimated by the control-variate
    estimator (:func:`flasheval.stats.bootstrap.control_variate_means`, covariate = the pool's
    mean score per example) from the examples it got. All checkpoints use the same seed, so
    checkpoints with the same number of examples of a dataset are resampled on the SAME
    indices (paired); checkpoints stopped at different stages are resampled independently,
    which can only widen the intervals.

    Parameters
    ----------
    checkpoints
        ``(model_id, scores per dataset, columns per dataset)``; columns index the
        reference's examples.
    """
    sizes = [len(e) for e in reference.example_ids]
    pool_means = reference.dataset_means().mean(axis=0)
    observed, replicates = [], []
    for _, scores, columns in checkpoints:
        covariates = [s[:, c].mean(axis=0) for s, c in zip(reference.scores, columns)]
        obs, rep = control_variate_means(scores, covariates, pool_means, population_sizes=sizes,
                                         n_resamples=n_resamples, rng=derive_seed(seed, "order"))
        observed.append(obs)
        replicates.append(rep)
    options = reference.aggregate_options(aggregate)
    direction = reference.ranking_higher_is_better(aggregate)
    obs_values = aggregate_values(np.array(observed), **options)
    rep_values = aggregate_values(np.stack(replicates, axis=1), **options)  # (n_resamples, n_checkpoints)
    point = competition_ranks(obs_values, higher_is_better=direction)
    reps = competition_ranks(rep_values, higher_is_better=direction)
    out = []
    for i, (model_id, _, _) in enumerate(checkpoints):
        lo, hi = percentile_interval(reps[:, i].astype(np.float64), confidence_level)
        out.append(OrderEntry(model_id=model_id, rank=int(point[i]), interval=(min(int(lo), int(point[i])),
                              max(int(hi), int(point[i]))), value=float(obs_values[i])))
    return tuple(sorted(out, key=lambda o: (o.rank, o.model_id)))


def _result(c: _Checkpoint, plan: TierPlan, sizes: list[int], n_parameters: int | None, n_total: int) -> CheckpointResult:
    dist = c.dist
    tier = None if c.placed is None else plan.tier_for(c.placed)
    used = sum(c.n)
    n_tokens = c.n_tokens if used else None
    return CheckpointResult(
        model_id=c.model_id, status=c.status, reason=c.reason, rank=c.placed,
        interval=(1, n_total) if dist is None else dist.interval, tier=None if tier is None else tier.label,
        resolution=None if tier is None else tier.resolution, n_examples=used, n_tokens=n_tokens,
        flops=None if n_tokens is None or n_parameters is None else 2.0 * n_parameters * n_tokens,
        saving=sum(sizes) / max(used, 1), rounds=len(c.looks), per_dataset=tuple(c.n), stages=tuple(c.looks))


def sweep(
    reference: ReferenceLeaderboard,
    scorers: dict[str, ExampleScorer],
    plan: TierPlan,
    *,
    budget: Budget,
    seed: int = 0,
    aggregate: str | None = None,
    low_rank: int | None = None,
    n_parameters: int | None = None,
    on_round: Callable[[int, int, int], None] | None = None,
) -> SweepResult:
    """Place every checkpoint of ``scorers`` on ``reference`` within ``budget`` (module docstring).

    Parameters
    ----------
    reference
        The pool (none of the checkpoints may be in it).
    scorers
        ``{model_id: scorer}``; wrap them in :class:`~flasheval.placement.sweep_store.StoredScorer` to resume.
    plan
        Stages, tiers, stop rule and confidence levels (as ``place``).
    budget
        Caps on the TOTAL spent over all checkpoints.
    seed
        Fixes the shared example orders and the bootstrap streams.
    aggregate
        Aggregate over datasets (default: the reference's).
    low_rank
        Racing threshold: a checkpoint whose interval lies at or below this rank stops as
        ``clearly low`` (default: the first rank of the plan's last tier).
    n_parameters
        Parameters of the checkpoints, for the FLOPs estimate and ``budget.max_flops``.
    on_round
        Called after each round with the round number, the checkpoints still racing and the examples
        scored so far over all checkpoints (progress).
    """
    if not scorers:
        raise InputError("no checkpoints to sweep", field="--models")
    check_sweep_budget(budget, plan, reference, len(scorers))
    plan = plan.for_pool(reference.n_models + 1)
    sizes = [len(ids) for ids in reference.example_ids]
    orders, positions = [], []
    for name, ids in zip(reference.dataset_names, reference.example_ids):
        orders.append(example_order(ids, seed=seed, task_name=name))
        index = {e: i for i, e in enumerate(ids)}
        positions.append(np.fromiter((index[e] for e in orders[-1]), dtype=np.int64, count=len(ids)))
    low = plan.tiers[-1].first if low_rank is None else low_rank
    ctx = {"budget": budget, "sizes": sizes, "orders": orders, "positions": positions, "seed": seed,
           "aggregate": aggregate, "low_rank": low, "n_parameters": n_parameters,
           # every checkpoint takes the plan's uniform stages (_next_targets): the looks' levels follow from them
           "levels": look_plan(reference, replace(for_budget(plan, budget), allocation="uniform"), aggregate,
                               low_rank=low).levels}
    state = [_Checkpoint(m, s, len(sizes)) for m, s in sorted(scorers.items())]
    ctx["spent"] = _Spent(state)
    round_ = 0
    while any(c.status == "active" for c in state):
        round_ += 1
        if not _round(state, reference, plan, ctx, round_):
            round_ -= 1
            break
        if on_round is not None:
            on_round(round_, sum(c.status == "active" for c in state), ctx["spent"].examples)
    for c in state:
        if c.status == "active":
            c.status = "unresolved at budget"
            c.reason = "the budget cannot pay for its next stage"
    n_total = reference.n_models + 1
    scored = [c for c in state if sum(c.n)]
    order: tuple[OrderEntry, ...] = ()
    if len(scored) >= 2:
        order = checkpoint_order(
            reference, [(c.model_id, c.joined(), [positions[d][:n] for d, n in enumerate(c.n)]) for c in scored],
            aggregate=aggregate, n_resamples=plan.n_resamples, confidence_level=plan.confidence_level, seed=seed)
    return SweepResult(
        reference=reference.name, plan=plan.name, seed=seed, aggregate=aggregate or reference.manifest.aggregate,
        budget={"examples": budget.max_examples, "tokens": budget.max_tokens, "flops": budget.max_flops},
        n_models=reference.n_models, low_rank=low, tier_boundaries=tuple(t.first for t in plan.tiers[1:]),
        checkpoints=tuple(_result(c, plan, sizes, n_parameters, n_total) for c in state), order=order,
        n_rounds=round_, n_examples=sum(sum(c.n) for c in state), full_examples=sum(sizes) * len(state),
        n_computed=sum(getattr(c.scorer, "n_computed", sum(c.n)) for c in state),
    )
