"""Budget-capped sweeps: place many checkpoints at once, spending where it changes a decision.

A sweep is a scheduler of placement controllers (:class:`flasheval.placement.controller.Controller`,
the one stage loop that ``place`` and the backtest drive too), one per checkpoint, all on ONE
:class:`~flasheval.placement.controller.Course`: the same looks as ``place`` under the sweep's budget
(the plan's stages, allocation, correction and stop rule), and the SAME nested subsamples (prefixes of
one seeded order per dataset, :func:`flasheval.stats.sampling.example_order`), so checkpoints are
comparable with each other (paired), not only with the reference pool. The sweep runs in rounds; in
each round:

1. every controller that is still *active* says what its next look would score;
2. the round is planned before anything is scored (:func:`flasheval.sweeps.rounds.plan_round`, pure): the
   looks in priority order while the total budget lasts: first checkpoints
   with no look yet (everyone gets the first stage), then those whose rank interval still
   overlaps a tier boundary, the top tiers first (lowest possible rank first), then the rest;
   a look that would exceed the budget is not started; an executor
   (:class:`flasheval.sweeps.executor.Executor`, default in this process) serves the round, each
   checkpoint's look in one ``score_many`` call;
3. each served controller ranks its checkpoint against the pool (the same statistics as ``place``)
   and the plan's stop rule decides (``resolved``); a checkpoint whose whole interval lies at or
   below ``low_rank`` (default: the first rank of the plan's open-ended last tier) stops as
   ``clearly low`` (racing: its tier is settled and its precise rank changes no decision).

The sweep ends when no checkpoint is active or the budget cannot pay for any next look
(those left are ``unresolved at budget``, with their last interval). The checkpoints' order
among themselves comes with simultaneous rank intervals, the reference's machinery (:func:`checkpoint_order`). A one-checkpoint
sweep that does not race places its checkpoint exactly as ``place`` does under the same budget.

Resumable: scores go through the run folder's results store
(:mod:`flasheval.sweeps.store`); decisions depend only on the scores and the seed, so a
rerun after a crash replays the finished work from the store, spends nothing twice and ends with
the same result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from flasheval.errors import BackendError, InputError
from flasheval.hashing import derive_seed
from flasheval.placement.controller import Controller, by_dataset, course
from flasheval.placement.looks import first_look, for_budget, look_plan
from flasheval.placement.results import STATUSES, Budget, Placed, PlacementResult
from flasheval.reference.scoring.scorers import ExampleScorer
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.bootstrap import control_variate_means
from flasheval.stats.rank_intervals import rank_intervals_from_replicates
from flasheval.stats.ranking import aggregate as aggregate_values
from flasheval.stats.ranking import competition_ranks
from flasheval.sweeps.executor import Executor, InProcessExecutor
from flasheval.sweeps.rounds import Round, plan_round

__all__ = ["SweepStage", "CheckpointResult", "OrderEntry", "SweepResult", "sweep", "check_sweep_budget", "checkpoint_order",
           "STATUSES"]

logger = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True, kw_only=True)
class SweepStage:
    """One look at one checkpoint (made from the placement's :class:`~flasheval.placement.results.StageRecord`)."""

    round: int
    stage_size: int | None
    n_examples: int
    """Examples scored so far for this checkpoint (all datasets)."""
    rank: int
    """The look's placement (:attr:`StageRecord.rank <flasheval.placement.results.StageRecord.rank>`)."""
    interval: tuple[int, int]
    confidence_level: float


_CHECKPOINT_KEYS = ("model_id", "status", "reason", "rank", "interval", "tier", "resolution", "n_examples", "n_tokens",
                    "flops", "saving", "rounds", "per_dataset")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointResult(Placed):
    """Where one checkpoint landed and what it cost: its controller's placement and what only the sweep knows.

    The placement's own fields (``model_id``, ``status``, ``reason``, ``rank``, ``interval``, ``tier``,
    ``resolution``, ``n_examples``, ``n_tokens``, ``flops``) are read through
    :class:`~flasheval.placement.results.Placed`'s read-only properties.
    """

    placement: PlacementResult
    """The checkpoint's placement (:meth:`Controller.result <flasheval.placement.controller.Controller.result>`)."""
    look_rounds: tuple[int, ...]
    """The round of each of its looks (one per :attr:`PlacementResult.stages`)."""
    per_dataset: tuple[int, ...]
    """Examples scored per dataset (a prefix of the shared order)."""

    def __post_init__(self) -> None:
        if len(self.look_rounds) != len(self.placement.stages):
            raise ValueError(f"{len(self.look_rounds)} rounds for {len(self.placement.stages)} looks")

    @property
    def saving(self) -> float:
        """Full-run examples of this checkpoint divided by the examples it got (tokens not counted)."""
        return self.placement.compute.example_saving

    @property
    def rounds(self) -> int:
        """Rounds in which it was scored (one look per round)."""
        return len(self.look_rounds)

    @property
    def stages(self) -> tuple[SweepStage, ...]:
        """Each look, with its round."""
        return tuple(SweepStage(round=r, stage_size=s.stage_size, n_examples=sum(s.n_examples), rank=s.rank,
                                interval=s.interval, confidence_level=s.confidence_level)
                     for r, s in zip(self.look_rounds, self.placement.stages))

    def to_json(self) -> dict[str, Any]:
        """The sweep record's entry for this checkpoint."""
        out = {k: getattr(self, k) for k in _CHECKPOINT_KEYS}
        out["interval"], out["per_dataset"] = list(self.interval), list(self.per_dataset)
        out["stages"] = [{**asdict(s), "interval": list(s.interval)} for s in self.stages]
        return out


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
        out["checkpoints"] = [c.to_json() for c in self.checkpoints]
        out["order"] = [asdict(o) for o in self.order]
        out["compute"] = {"n_examples": self.n_examples, "full_examples": self.full_examples, "saving": self.saving,
                          "median_saving": self.median_saving}
        return out


def check_sweep_budget(budget: Budget, plan: TierPlan, reference: ReferenceLeaderboard, n_checkpoints: int, *,
                       aggregate: str | None = None) -> None:
    """Refuse a budget smaller than one first look for every checkpoint (``reference``: the pool, held out; the
    first look under the plan's allocation); :func:`sweep` checks it too, callers check it before they write."""
    plan = plan.for_pool(reference.n_models + 1)
    first = sum(first_look(reference, plan, aggregate)[1])
    if budget.max_examples is not None and budget.max_examples < first * n_checkpoints:
        raise InputError(f"budget of {budget.max_examples} examples is smaller than one stage for every checkpoint "
                         f"({n_checkpoints} x {first} = {first * n_checkpoints} examples for stage 1 of plan {plan.name})",
                         field="--budget-examples")


def _serve(state: list[Controller], planned: Round, scorers: dict[str, ExampleScorer], executor: Executor,
           looked: dict[str, list[int]]) -> None:
    """Have ``executor`` serve the round, then feed each planned controller its scores, in the round's order."""
    answers = executor.serve(planned, scorers)
    if len(answers) != len(planned.requests):
        raise BackendError(f"the executor returned {len(answers)} answers for the {len(planned.requests)} requests "
                           f"of round {planned.number}")
    by_id = {c.model_id: c for c in state}
    names = state[0].course.reference.dataset_names
    for request, answer in zip(planned.requests, answers):
        c = by_id[request.model_id]
        stage = c.next_stage()  # the look planned: the controller has not changed since
        c.take(stage, by_dataset(names, stage, answer))  # type: ignore[arg-type]
        looked[c.model_id].append(planned.number)
        logger.info("round %d: %s rank %d [%d, %d] after %d examples: %s", planned.number, c.model_id, c.dist.rank,
                    *c.dist.interval, c.n_examples, c.status if not c.active else c.records[-1].reason)


def checkpoint_order(
    reference: ReferenceLeaderboard,
    checkpoints: list[tuple[str, list[np.ndarray], list[np.ndarray]]],
    *,
    aggregate: str | None,
    n_resamples: int,
    confidence_level: float,
    seed: int,
) -> tuple[OrderEntry, ...]:
    """The checkpoints' order among themselves, with simultaneous intervals of their ranks.

    As the reference's (:func:`flasheval.stats.rank_intervals.rank_intervals_from_replicates`): all pairs compared
    at once on the replicates of the aggregates; an interval runs from 1 + the checkpoints significantly better to
    ``n`` - those significantly worse, all holding together at ``confidence_level``.

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
    if len(checkpoints) == 1:
        return (OrderEntry(model_id=checkpoints[0][0], rank=1, interval=(1, 1), value=float(obs_values[0])),)
    found = rank_intervals_from_replicates(obs_values, rep_values, confidence_level=confidence_level,
                                           higher_is_better=direction)
    out = [OrderEntry(model_id=model_id, rank=int(point[i]), interval=(int(found.lo[i]), int(found.hi[i])),
                      value=float(obs_values[i])) for i, (model_id, _, _) in enumerate(checkpoints)]
    return tuple(sorted(out, key=lambda o: (o.rank, o.model_id)))


def _result(c: Controller, rounds: list[int]) -> CheckpointResult:
    """``c``'s outcome; ``rounds``: the round of each of its looks."""
    return CheckpointResult(placement=c.result(), look_rounds=tuple(rounds), per_dataset=tuple(c.n))


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
    executor: Executor | None = None,
) -> SweepResult:
    """Place every checkpoint of ``scorers`` on ``reference`` within ``budget`` (module docstring).

    Parameters
    ----------
    reference
        The pool (none of the checkpoints may be in it).
    scorers
        ``{model_id: scorer}``; wrap them in :class:`~flasheval.sweeps.store.StoredScorer` to resume.
    plan
        Stages, tiers, stop rule, confidence levels and allocation (as ``place``).
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
    executor
        Serves each round (:class:`~flasheval.sweeps.executor.Executor`; default: in this process, in priority
        order, :class:`~flasheval.sweeps.executor.InProcessExecutor`). Every executor gives the same result.
    """
    if not scorers:
        raise InputError("no checkpoints to sweep", field="--models")
    check_sweep_budget(budget, plan, reference, len(scorers), aggregate=aggregate)
    plan = plan.for_pool(reference.n_models + 1)
    low = plan.tiers[-1].first if low_rank is None else low_rank
    # the same looks as `place` under this budget (allocation included); the racing stop is one more way to stop
    looks = look_plan(reference, for_budget(plan, budget), aggregate, low_rank=low)
    shared = course(reference, plan, seed=seed, looks=looks, aggregate=aggregate, low_rank=low)
    state = [Controller(shared, model_id=m, n_parameters=n_parameters) for m in sorted(scorers)]
    looked: dict[str, list[int]] = {c.model_id: [] for c in state}
    executor = InProcessExecutor() if executor is None else executor
    round_ = 0
    while any(c.active for c in state):
        planned = plan_round(state, budget, number=round_ + 1)
        if not planned.requests:
            break
        round_ = planned.number
        _serve(state, planned, scorers, executor, looked)
        served = frozenset(r.model_id for r in planned.requests)
        while not planned.complete:  # the rest of the round, planned at the rate its first part revealed
            planned = plan_round(state, budget, number=round_, served=served)
            if planned.requests:
                _serve(state, planned, scorers, executor, looked)
            served |= {r.model_id for r in planned.requests}
        if on_round is not None:
            on_round(round_, sum(c.active for c in state), sum(c.n_examples for c in state))
    for c in state:
        if c.active:
            c.halt("the budget cannot pay for its next stage")
    return _sweep_result(state, looked, scorers, budget, round_)


def _sweep_result(state: list[Controller], looked: dict[str, list[int]],
                  scorers: dict[str, ExampleScorer], budget: Budget, n_rounds: int) -> SweepResult:
    shared = state[0].course
    reference, plan = shared.reference, shared.plan
    scored = [c for c in state if c.n_examples]
    order: tuple[OrderEntry, ...] = ()
    if len(scored) >= 2:
        order = checkpoint_order(reference, [(c.model_id, c.joined(), c.columns()) for c in scored],
                                 aggregate=shared.aggregate, n_resamples=plan.n_resamples,
                                 confidence_level=plan.confidence_level, seed=shared.seed)
    return SweepResult(
        reference=reference.name, plan=plan.name, seed=shared.seed,
        aggregate=shared.aggregate or reference.manifest.aggregate,
        budget={"examples": budget.max_examples, "tokens": budget.max_tokens, "flops": budget.max_flops},
        n_models=reference.n_models, low_rank=int(shared.low_rank or 0), tier_boundaries=tuple(t.first for t in plan.tiers[1:]),
        checkpoints=tuple(_result(c, looked[c.model_id]) for c in state), order=order,
        n_rounds=n_rounds, n_examples=sum(c.n_examples for c in state), full_examples=sum(shared.sizes) * len(state),
        n_computed=sum(getattr(scorers[c.model_id], "n_computed", c.n_examples) for c in state),
    )
