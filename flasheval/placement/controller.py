"""The placement core: one model's escalating stages, as a controller that a driver steps through.

A :class:`Controller` holds one model's placement on one pool (a small protocol, in the spirit of an
early-stopping protocol): :meth:`~Controller.next_stage` says what to score next (the example ids per
dataset of the next look, the prefix of ONE seeded permutation per dataset,
:func:`flasheval.stats.sampling.example_order`), :meth:`~Controller.projected` what that would cost,
:meth:`~Controller.take` takes the scores, compares the model with every reference model on the same
examples (paired, dataset-stratified bootstrap, :func:`stage_rank`) and applies the pure stop rule
(:func:`flasheval.placement.stop_rule.decide`); :attr:`~Controller.active` says whether it goes on and
:meth:`~Controller.result` what it found. The looks (stages, per-dataset targets under the plan's
allocation, levels under its correction) are fixed before any model is scored
(:func:`flasheval.placement.looks.look_plan`) and shared by every controller of a :class:`Course`.

This is the only stage loop. Its drivers: :func:`place` (one model under its own budget: a stage that
would exceed it is not started, status ``unresolved at budget``), the backtest (``place`` on every
held-out model) and the sweep (:func:`flasheval.sweeps.schedule.sweep`: a scheduler that gives
controllers of many checkpoints their next stage, round by round, under one total budget).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from flasheval.engine.throughput import forward_flops
from flasheval.hashing import derive_seed
from flasheval.placement.looks import LookPlan, for_budget, look_plan
from flasheval.placement.results import Budget, Compute, PlacementResult, StageRecord
from flasheval.reference.scoring.scorers import ExampleScorer, ScoredExamples
from flasheval.placement.stop_rule import decide
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.bootstrap import PoolExamples, RankDistribution, pool_examples, rank_distribution
from flasheval.stats.sampling import example_order

__all__ = ["Course", "StageRequest", "Controller", "course", "stage_asks", "by_dataset", "score_request", "place",
           "plan_looks", "stage_rank"]

logger = logging.getLogger(__name__)


def stage_rank(
    reference: ReferenceLeaderboard,
    new_scores: list[np.ndarray],
    columns: list[np.ndarray],
    *,
    aggregate: str | None,
    n_resamples: int,
    confidence_level: float,
    rng: int | np.random.Generator,
    estimator: str = "control-variate",
    pool: PoolExamples | None = None,
    full_means: np.ndarray | None = None,
) -> RankDistribution:
    """Rank distribution of a new model scored on ``columns`` of each dataset of ``reference``.

    ``new_scores[d]`` holds the new model's scores on the reference's examples
    ``columns[d]`` (indices into ``reference.example_ids[d]``); every reference model is taken
    on the same examples. ``pool`` (``pool_examples(reference.scores)``) and ``full_means``
    (``reference.dataset_means()``): the control-variate estimator's inputs on every example, when the
    caller keeps them for many looks (:class:`Course`); the same result, without a pass over the pool's
    scores at each look.
    """
    if estimator == "control-variate":
        scores: list[np.ndarray] | PoolExamples = (pool.at(columns) if pool is not None else
                                                   [s[:, c] for s, c in zip(reference.scores, columns)])
        full = reference.dataset_means() if full_means is None else full_means
    else:
        scores, full = [s[:, c] for s, c in zip(reference.scores, columns)], None
    return rank_distribution(
        new_scores, scores, population_sizes=[len(e) for e in reference.example_ids],
        n_resamples=n_resamples, confidence_level=confidence_level, rng=rng, estimator=estimator,
        pool_full_means=full, **reference.aggregate_options(aggregate),
    )


def _nested_orders(reference: ReferenceLeaderboard, seed: int) -> tuple[list[tuple[str, ...]], list[np.ndarray]]:
    """Per dataset, the seeded example order and the matrix column of each example in it."""
    orders, positions = [], []
    for name, ids in zip(reference.dataset_names, reference.example_ids):
        orders.append(example_order(ids, seed=seed, task_name=name))
        index = {e: i for i, e in enumerate(ids)}
        positions.append(np.fromiter((index[e] for e in orders[-1]), dtype=np.int64, count=len(ids)))
    return orders, positions


def plan_looks(reference: ReferenceLeaderboard, plan: TierPlan, *, budget: Budget | None = None,
               aggregate: str | None = None) -> LookPlan:
    """The looks :func:`place` takes on ``reference`` with ``plan`` under ``budget`` (its ``looks=`` argument).

    They depend neither on the seed nor on the model, so a caller may fix them first (and time them: with
    ``correction: calibrated`` this is the calibration of the look constant).
    """
    plan = plan.for_pool(reference.n_models + 1)
    if for_budget(plan, budget or Budget()) is not plan:
        logger.info("a budget cap may end the run before the rule stops it: the looks use Pocock's constant")
    return look_plan(reference, for_budget(plan, budget or Budget()), aggregate)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Course:
    """What every placement on one pool with one plan, seed and looks follows (build it with :func:`course`)."""

    reference: ReferenceLeaderboard
    """The pool (the models placed are not in it)."""
    plan: TierPlan
    """The tier plan, scaled to the pool (:meth:`TierPlan.for_pool`)."""
    looks: LookPlan
    """Every look's stage, per-dataset targets and level."""
    seed: int
    """Fixes each dataset's example order and the bootstrap streams."""
    aggregate: str | None
    """Aggregate over datasets (``None``: the reference's)."""
    low_rank: int | None
    """Racing (the sweep): a look whose interval lies at or below this rank stops as ``clearly low``."""
    orders: tuple[tuple[str, ...], ...]
    """Per dataset, the seeded example order."""
    positions: tuple[np.ndarray, ...]
    """Per dataset, the score matrix's column of each example of the order."""
    sizes: tuple[int, ...]
    """Examples per dataset."""
    pool: PoolExamples | None
    """The pool's mean, lowest and highest score on every example (control-variate plans; else ``None``)."""
    full_means: np.ndarray | None
    """The pool's full-data means, ``(n_models, n_datasets)`` (control-variate plans; else ``None``)."""


def course(reference: ReferenceLeaderboard, plan: TierPlan, *, seed: int, looks: LookPlan, aggregate: str | None = None,
           low_rank: int | None = None) -> Course:
    """The :class:`Course` of placements on ``reference`` with ``plan`` (scaled here), ``seed`` and ``looks``."""
    orders, positions = _nested_orders(reference, seed)
    cv = plan.estimator == "control-variate"  # its inputs computed once, not at every look of every controller
    return Course(reference=reference, plan=plan.for_pool(reference.n_models + 1), looks=looks, seed=seed,
                  aggregate=aggregate, low_rank=low_rank, orders=tuple(orders), positions=tuple(positions),
                  sizes=tuple(len(ids) for ids in reference.example_ids),
                  pool=pool_examples(reference.scores) if cv else None,
                  full_means=reference.dataset_means() if cv else None)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class StageRequest:
    """What a controller asks to score next: its next look."""

    look: int
    """Index of the look (into :attr:`Course.looks`)."""
    stage: int
    """Index into the plan's stages."""
    stage_size: int | None
    """The plan's examples per dataset at that stage (``None`` = all)."""
    targets: tuple[int, ...]
    """Examples per dataset scored once the look is served."""
    example_ids: tuple[tuple[str, ...], ...]
    """Per dataset, the example ids still to score (the next slice of its order; may be empty)."""

    @property
    def n_new(self) -> int:
        """Examples the look adds."""
        return sum(len(ids) for ids in self.example_ids)


def stage_asks(names: Sequence[str], request: StageRequest) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The ``(task_name, example_ids)`` asks of ``request`` (datasets of ``names`` with ids to score, in order)."""
    return tuple((name, ids) for name, ids in zip(names, request.example_ids) if ids)


def by_dataset(names: Sequence[str], request: StageRequest,
               answers: Sequence[ScoredExamples]) -> list[ScoredExamples | None]:
    """``answers`` to :func:`stage_asks` per dataset of ``names`` (``None`` where none was asked), checked."""
    asked = stage_asks(names, request)
    if len(answers) != len(asked):
        raise ValueError(f"scorer returned {len(answers)} answers for {len(asked)} tasks asked")
    for (name, ids), got in zip(asked, answers):
        if got.scores.shape != (len(ids),):
            raise ValueError(f"scorer returned {got.scores.shape} scores for {len(ids)} examples of {name}")
    by_name = dict(zip((name for name, _ in asked), answers))
    return [by_name[name] if ids else None for name, ids in zip(names, request.example_ids)]


def score_request(scorer: ExampleScorer, names: Sequence[str], request: StageRequest) -> list[ScoredExamples | None]:
    """Ask ``scorer`` for the ids of ``request`` in ONE ``score_many`` call (none when the look adds no example): a
    model runs a stage's requests batch-first. Per dataset of ``names``; ``None`` where there are none."""
    asked = stage_asks(names, request)
    return by_dataset(names, request, scorer.score_many(asked) if asked else [])


class Controller:
    """One model's placement on the pool of ``course`` (module docstring): the only stage loop's state.

    Parameters
    ----------
    course
        The pool, plan, looks, seed and example orders.
    model_id
        The model placed (for the record).
    n_parameters
        Its parameters, for the FLOPs estimate (``None`` when unknown).
    """

    def __init__(self, course: Course, *, model_id: str, n_parameters: int | None = None) -> None:
        self.course = course
        self.model_id = model_id
        self.n_parameters = n_parameters
        n_datasets = len(course.sizes)
        self.n = [0] * n_datasets
        """Examples scored per dataset (a prefix of each order)."""
        self._scores: list[list[np.ndarray]] = [[] for _ in range(n_datasets)]
        self._tokens: list[int | None] = [0] * n_datasets
        self._joined: list[np.ndarray] | None = None
        self.records: list[StageRecord] = []
        """Every look taken."""
        self.dist: RankDistribution | None = None
        """The last look's rank distribution."""
        self.status = "active"
        """``active``, then ``resolved``, ``clearly low`` (racing) or ``unresolved at budget``."""
        self.reason = ""

    @property
    def active(self) -> bool:
        return self.status == "active"

    @property
    def n_examples(self) -> int:
        return sum(self.n)

    @property
    def n_tokens(self) -> int | None:
        """Tokens of every example scored (``None`` once a batch came without token counts)."""
        return None if any(t is None for t in self._tokens) else sum(self._tokens)  # type: ignore[misc]

    @property
    def placed(self) -> int | None:
        """The rank reported after the last look (the ``window`` rule may report another than the point rank)."""
        return self.records[-1].rank if self.records else None

    def next_stage(self) -> StageRequest | None:
        """The next look to serve (``None`` once stopped, or when no look is left)."""
        look = len(self.records)
        if not self.active or look >= len(self.course.looks.stages):
            return None
        k, targets = self.course.looks.stages[look], self.course.looks.targets[look]
        return StageRequest(look=look, stage=k, stage_size=self.course.plan.stages[k], targets=targets,
                            example_ids=tuple(o[n:t] for o, n, t in zip(self.course.orders, self.n, targets)))

    def projected(self, request: StageRequest) -> tuple[int, float | None, float | None]:
        """This model's examples, tokens and FLOPs once ``request`` is served (tokens at the rate seen so far)."""
        examples = int(sum(request.targets))
        used, tokens = self.n_examples, self._tokens
        if used == 0 or any(t is None for t in tokens):
            return examples, None, None
        projected = float(sum(tokens) / used * examples)  # type: ignore[arg-type]
        return examples, projected, forward_flops(self.n_parameters, projected)

    def take(self, request: StageRequest, scored: Sequence[ScoredExamples | None]) -> StageRecord:
        """Add the scores of ``request`` (per dataset, as :func:`score_request` returns them), look and decide."""
        for d, got in enumerate(scored):
            if got is not None and len(got.scores):
                self._add(d, got)
        c = self.course
        level = c.looks.levels[request.look]
        dist = stage_rank(c.reference, self.joined(), self.columns(), aggregate=c.aggregate,
                          n_resamples=c.plan.n_resamples, confidence_level=level,
                          rng=derive_seed(c.seed, "bootstrap", request.look), estimator=c.plan.estimator,
                          pool=c.pool, full_means=c.full_means)
        is_last = all(n == size for n, size in zip(self.n, c.sizes))
        decision = decide(plan=c.plan, stage_size=request.stage_size, rank=dist.rank, interval=dist.interval,
                          is_last=is_last, mid_rank=dist.mid_rank)
        rank = dist.rank if decision.rank is None else decision.rank
        tier = c.plan.tier_for(rank)
        self.dist = dist
        self.records.append(StageRecord(
            stage=request.stage, stage_size=request.stage_size, n_examples=tuple(self.n), rank=rank,
            mid_rank=dist.mid_rank, interval=dist.interval, confidence_level=level, tier=tier.label,
            resolution=tier.resolution, decision="stop" if decision.stop else "escalate", reason=decision.reason))
        if decision.stop:
            self.status, self.reason = "resolved", decision.reason
        elif c.low_rank is not None and dist.interval[0] >= c.low_rank:
            self.status = "clearly low"
            self.reason = f"interval [{dist.interval[0]}, {dist.interval[1]}] lies at or below rank {c.low_rank}"
        return self.records[-1]

    def _add(self, d: int, got: ScoredExamples) -> None:
        self._scores[d].append(got.scores.astype(np.float64))
        self.n[d] += len(got.scores)
        self._joined = None
        tokens = self._tokens[d]
        self._tokens[d] = None if got.n_tokens is None or tokens is None else tokens + int(got.n_tokens.sum())

    def halt(self, reason: str) -> None:
        """End the placement where it is: the budget cannot pay for its next stage."""
        self.status, self.reason = "unresolved at budget", reason

    def joined(self) -> list[np.ndarray]:
        """Every dataset's scores so far, one array each (joined once per look, then kept in one piece)."""
        if self._joined is None:
            self._joined = [np.concatenate(s) if s else np.empty(0) for s in self._scores]
            self._scores = [[j] if len(j) else [] for j in self._joined]
        return self._joined

    def columns(self) -> list[np.ndarray]:
        """Per dataset, the score matrix's columns of the examples scored so far."""
        return [p[:n] for p, n in zip(self.course.positions, self.n)]

    def compute(self) -> Compute:
        """Compute spent, and a full run's (tokens extrapolated per dataset from the tokens per example seen)."""
        used, tokens, sizes = self.n_examples, self._tokens, self.course.sizes
        n_tokens = None if any(t is None for t in tokens) or used == 0 else int(sum(tokens))  # type: ignore[arg-type]
        full_tokens = None
        if n_tokens is not None and all(self.n):
            full_tokens = float(sum(t / n * size for t, n, size in zip(tokens, self.n, sizes)))  # type: ignore[operator]
        p = self.n_parameters
        return Compute(n_examples=used, full_examples=int(sum(sizes)), n_tokens=n_tokens, full_tokens=full_tokens,
                       flops=forward_flops(p, n_tokens), full_flops=forward_flops(p, full_tokens))

    def result(self) -> PlacementResult:
        """The one result of a placement (``place`` returns it, a sweep's checkpoint holds it): the last look's rank,
        interval and tier (none before a look); the status the controller ended in (an active one: ``unresolved
        at budget``, as a driver halts one it stops stepping)."""
        c, last = self.course, (self.records[-1] if self.records else None)
        n_total = c.reference.n_models + 1
        return PlacementResult(
            model_id=self.model_id, reference=c.reference.name, plan=c.plan.name, seed=c.seed,
            status="unresolved at budget" if self.active else self.status, reason=self.reason,
            rank=None if last is None else last.rank, interval=(1, n_total) if last is None else last.interval,
            confidence_level=c.plan.confidence_level, tier=None if last is None else last.tier,
            resolution=None if last is None else last.resolution, n_models=c.reference.n_models,
            stages=tuple(self.records), compute=self.compute())


def place(
    reference: ReferenceLeaderboard,
    scorer: ExampleScorer,
    plan: TierPlan,
    *,
    model_id: str = "new model",
    seed: int = 0,
    budget: Budget | None = None,
    aggregate: str | None = None,
    looks: LookPlan | None = None,
    on_stage: Callable[[StageRecord, int], None] | None = None,
    started: float | None = None,
) -> PlacementResult:
    """Place a model on ``reference`` by escalating nested subsamples: a :class:`Controller` stepped to its end.

    Parameters
    ----------
    reference
        The pool to rank against (the model itself must not be in it).
    scorer
        Produces the new model's per-example scores; asked only for ids not yet scored.
    plan
        Stages, tiers, stop rule, confidence level, multiple-look correction and allocation.
    model_id
        Name of the new model (for the record).
    seed
        The run's seed: fixes each dataset's example order and the bootstrap streams.
    budget
        Caps; a stage that would exceed one is not started.
    aggregate
        Aggregate over datasets (default: the reference's).
    looks
        ``look_plan(reference, for_budget(plan.for_pool(reference.n_models + 1), budget), aggregate)``,
        when the caller already has it (it depends on neither the seed nor the model: a backtest reuses
        it across seeds).
    on_stage
        Called with each stage's record and the plan's number of stages as the stage finishes (progress).
    started
        ``time.perf_counter()`` when the caller's placement began (default: now): ``budget.max_seconds`` counts
        from it.
    """
    budget = budget or Budget()
    started = time.perf_counter() if started is None else started
    rate: float | None = None  # wall seconds per new example of the latest stage: projects the next one
    if looks is None:
        looks = plan_looks(reference, plan, budget=budget, aggregate=aggregate)
    controller = Controller(course(reference, plan, seed=seed, looks=looks, aggregate=aggregate), model_id=model_id,
                            n_parameters=getattr(scorer, "n_parameters", None))
    n_stages = len(plan.stages)
    while (request := controller.next_stage()) is not None:
        examples, tokens, flops = controller.projected(request)
        done = controller.n_examples
        seconds = None if rate is None else time.perf_counter() - started + rate * (examples - done)
        over = budget.exceeded_by(examples=examples, tokens=tokens, flops=flops, seconds=seconds)
        if over is not None:
            controller.halt(f"stage {request.stage + 1} would need {over}")
            logger.info("stage %d/%d: not started, %s: unresolved at budget", request.stage + 1, n_stages, over)
            break
        stage_start = time.perf_counter()
        record = controller.take(request, score_request(scorer, reference.dataset_names, request))
        if controller.n_examples > done:
            rate = (time.perf_counter() - stage_start) / (controller.n_examples - done)
        logger.info(record.log_line(n_stages))
        if on_stage is not None:
            on_stage(record, n_stages)
    return controller.result()
