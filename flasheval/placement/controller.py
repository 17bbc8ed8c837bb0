"""The placement loop: escalate nested subsamples until the rank is resolved.

``place(...)`` is the thin loop around the pure stop rule (:func:`flasheval.placement.stop_rule.decide`
says stop or escalate, and why), over looks fixed before the new model is scored
(:func:`flasheval.placement.looks.look_plan`). Per dataset it takes the prefix of ONE seeded
permutation (:func:`flasheval.stats.sampling.example_order`) as the stage's subsample, asks the
scorer only for the example ids it has not scored yet, compares the new model with every reference
model on the same examples (paired, dataset-stratified bootstrap, :mod:`flasheval.stats.bootstrap`),
logs one line per stage and stops when the plan is satisfied, when every example is scored, or when
the next stage would exceed the budget (status ``unresolved at budget``, with the best interval so far).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from flasheval.hashing import derive_seed
from flasheval.placement.looks import LookPlan, for_budget, look_plan
from flasheval.placement.results import Budget, Compute, PlacementResult, StageRecord
from flasheval.placement.scorers import ExampleScorer
from flasheval.placement.stop_rule import decide
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.bootstrap import RankDistribution, rank_distribution
from flasheval.stats.sampling import example_order

__all__ = ["place", "plan_looks", "stage_rank"]

logger = logging.getLogger(__name__)


class _Scored:
    """Scores gathered so far for one dataset (prefix of the dataset's order)."""

    def __init__(self) -> None:
        self.scores: list[np.ndarray] = []
        self.tokens: list[np.ndarray] | None = []
        self.n = 0

    def add(self, scores: np.ndarray, tokens: np.ndarray | None) -> None:
        self.scores.append(scores)
        self.n += len(scores)
        if tokens is None:
            self.tokens = None
        elif self.tokens is not None:
            self.tokens.append(tokens)

    @property
    def n_tokens(self) -> int | None:
        return None if self.tokens is None else int(sum(t.sum() for t in self.tokens))


def _compute(gathered: list[_Scored], sizes: list[int], n_parameters: int | None) -> Compute:
    used = sum(g.n for g in gathered)
    tokens = [g.n_tokens for g in gathered]
    n_tokens = None if any(t is None for t in tokens) or used == 0 else int(sum(tokens))  # type: ignore[arg-type]
    full_tokens = None
    if n_tokens is not None and all(g.n for g in gathered):
        full_tokens = float(sum(t / g.n * size for t, g, size in zip(tokens, gathered, sizes)))  # type: ignore[operator]
    flops = None if n_tokens is None or n_parameters is None else 2.0 * n_parameters * n_tokens
    full_flops = None if full_tokens is None or n_parameters is None else 2.0 * n_parameters * full_tokens
    return Compute(n_examples=used, full_examples=int(sum(sizes)), n_tokens=n_tokens, full_tokens=full_tokens,
                   flops=flops, full_flops=full_flops)


def _project(gathered: list[_Scored], targets: list[int], n_parameters: int | None) -> tuple[int, float | None, float | None]:
    """Projected totals (examples, tokens, FLOPs) after scoring up to ``targets``."""
    examples = int(sum(targets))
    used = sum(g.n for g in gathered)
    tokens = [g.n_tokens for g in gathered]
    if used == 0 or any(t is None for t in tokens):
        return examples, None, None
    per_example = sum(tokens) / used  # type: ignore[arg-type]
    projected = float(per_example * examples)
    return examples, projected, None if n_parameters is None else 2.0 * n_parameters * projected


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
) -> RankDistribution:
    """Rank distribution of a new model scored on ``columns`` of each dataset of ``reference``.

    ``new_scores[d]`` holds the new model's scores on the reference's examples
    ``columns[d]`` (indices into ``reference.example_ids[d]``); every reference model is taken
    on the same examples.
    """
    pool = [s[:, c] for s, c in zip(reference.scores, columns)]
    return rank_distribution(
        new_scores, pool, population_sizes=[len(e) for e in reference.example_ids],
        n_resamples=n_resamples, confidence_level=confidence_level, rng=rng, estimator=estimator,
        pool_full_means=reference.dataset_means() if estimator == "control-variate" else None,
        **reference.aggregate_options(aggregate),
    )


def _nested_orders(reference: ReferenceLeaderboard, seed: int) -> tuple[list[tuple[str, ...]], list[np.ndarray]]:
    """Per dataset, the seeded example order and the matrix column of each example in it."""
    orders, positions = [], []
    for name, ids in zip(reference.dataset_names, reference.example_ids):
        orders.append(example_order(ids, seed=seed, task_name=name))
        index = {e: i for i, e in enumerate(ids)}
        positions.append(np.fromiter((index[e] for e in orders[-1]), dtype=np.int64, count=len(ids)))
    return orders, positions


def _score_new(scorer: ExampleScorer, names: tuple[str, ...], orders: list[tuple[str, ...]], gathered: list[_Scored],
               targets: list[int]) -> None:
    """Ask the scorer for the examples between what is scored and ``targets`` (only new ids)."""
    for name, order, g, target in zip(names, orders, gathered, targets):
        new_ids = order[g.n:target]
        if new_ids:
            got = scorer.score(name, new_ids)
            if got.scores.shape != (len(new_ids),):
                raise ValueError(f"scorer returned {got.scores.shape} scores for {len(new_ids)} examples of {name}")
            g.add(got.scores.astype(np.float64), got.n_tokens)


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
) -> PlacementResult:
    """Place a model on ``reference`` by escalating nested subsamples (see the module docstring).

    Parameters
    ----------
    reference
        The pool to rank against (the model itself must not be in it).
    scorer
        Produces the new model's per-example scores; asked only for ids not yet scored.
    plan
        Stages, tiers, stop rule, confidence level and multiple-look correction.
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
    """
    budget = budget or Budget()
    plan = plan.for_pool(reference.n_models + 1)
    sizes = [len(ids) for ids in reference.example_ids]
    orders, positions = _nested_orders(reference, seed)
    gathered = [_Scored() for _ in sizes]
    n_parameters = getattr(scorer, "n_parameters", None)
    records: list[StageRecord] = []
    status, reason = "unresolved at budget", ""
    if looks is None:
        looks = plan_looks(reference, plan, budget=budget, aggregate=aggregate)
    for look, (k, targets, level) in enumerate(zip(looks.stages, looks.targets, looks.levels)):
        stage_size = plan.stages[k]
        over = budget.exceeded_by(**dict(zip(("examples", "tokens", "flops"), _project(gathered, list(targets), n_parameters))))
        if over is not None:
            reason = f"stage {k + 1} would need {over}"
            logger.info("stage %d/%d: not started, %s: unresolved at budget", k + 1, len(plan.stages), over)
            break
        _score_new(scorer, reference.dataset_names, orders, gathered, list(targets))
        dist = stage_rank(reference, [np.concatenate(g.scores) for g in gathered],
                          [positions[d][:g.n] for d, g in enumerate(gathered)], aggregate=aggregate,
                          n_resamples=plan.n_resamples, confidence_level=level,
                          rng=derive_seed(seed, "bootstrap", look), estimator=plan.estimator)
        is_last = all(g.n == n for g, n in zip(gathered, sizes))
        decision = decide(plan=plan, stage_size=stage_size, rank=dist.rank, interval=dist.interval, is_last=is_last,
                          mid_rank=dist.mid_rank)
        rank = dist.rank if decision.rank is None else decision.rank
        tier = plan.tier_for(rank)
        records.append(StageRecord(
            stage=k, stage_size=stage_size, n_examples=tuple(g.n for g in gathered), rank=rank,
            mid_rank=dist.mid_rank, interval=dist.interval, confidence_level=level, tier=tier.label,
            resolution=tier.resolution, decision="stop" if decision.stop else "escalate", reason=decision.reason))
        logger.info(records[-1].log_line(len(plan.stages)))
        if on_stage is not None:
            on_stage(records[-1], len(plan.stages))
        if decision.stop:
            status, reason = "resolved", decision.reason
            break
    n_total = reference.n_models + 1
    last = records[-1] if records else None
    return PlacementResult(
        model_id=model_id, reference=reference.name, plan=plan.name, seed=seed, status=status, reason=reason,
        rank=None if last is None else last.rank, interval=(1, n_total) if last is None else last.interval,
        confidence_level=plan.confidence_level, tier=None if last is None else last.tier,
        resolution=None if last is None else last.resolution, n_models=reference.n_models,
        stages=tuple(records), compute=_compute(gathered, sizes, n_parameters),
    )
