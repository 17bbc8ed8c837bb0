"""The placement controller: escalate nested subsamples until the rank is resolved.

``decide(...)`` is pure: from the rank distribution after a stage and the tier plan it says
stop or escalate, and why. ``place(...)`` is the thin loop around it: per dataset it takes
the prefix of ONE seeded permutation (:func:`flasheval.stats.sampling.example_order`) as the
stage's subsample, asks the scorer only for the example ids it has not scored yet, compares
the new model with every reference model on the same examples (paired, dataset-stratified
bootstrap, :mod:`flasheval.stats.bootstrap`), logs one line per stage and stops when the
plan is satisfied, when every example is scored, or when the next stage would exceed the
budget (status ``unresolved at budget``, with the best interval so far).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from flasheval.hashing import derive_seed
from flasheval.placement.allocation import allocation_variance, neyman_cost_allocation, residual_spreads
from flasheval.placement.calibration import calibrated_constant
from flasheval.placement.scorers import ExampleScorer
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard
from flasheval.stats.bootstrap import RankDistribution, rank_distribution
from flasheval.stats.sampling import example_order

__all__ = ["Budget", "Decision", "StageRecord", "Compute", "PlacementResult", "LookPlan", "decide", "window_rank",
           "window_fits", "look_plan", "for_budget",
           "place", "stage_rank", "stage_targets", "STATUSES"]

logger = logging.getLogger(__name__)

STATUSES: tuple[str, ...] = ("resolved", "unresolved at budget")


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Caps on one placement; ``None`` = no cap."""

    max_examples: int | None = None
    """Examples scored in total (all datasets)."""
    max_tokens: int | None = None
    """Tokens processed in total (needs a scorer that reports tokens)."""
    max_flops: float | None = None
    """Estimated FLOPs, ``2 x parameters x tokens`` (needs parameters and tokens)."""

    def __post_init__(self) -> None:
        for name in ("max_examples", "max_tokens", "max_flops"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")

    @property
    def capped(self) -> bool:
        """Whether any cap is set (a run may then end before the rule stops it)."""
        return any(v is not None for v in (self.max_examples, self.max_tokens, self.max_flops))

    def exceeded_by(self, *, examples: int, tokens: float | None, flops: float | None) -> str | None:
        """Which cap the projected totals would exceed, in words (``None`` when within budget)."""
        if self.max_examples is not None and examples > self.max_examples:
            return f"{examples} examples > budget {self.max_examples}"
        if self.max_tokens is not None and tokens is not None and tokens > self.max_tokens:
            return f"~{tokens:.3g} tokens > budget {self.max_tokens:.3g}"
        if self.max_flops is not None and flops is not None and flops > self.max_flops:
            return f"~{flops:.3g} FLOPs > budget {self.max_flops:.3g}"
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What to do after a stage."""

    stop: bool
    reason: str
    """Why, in words (printed in the stage's log line)."""
    rank: int | None = None
    """The placement to report when it differs from the point rank (``window`` rule: a rank
    consistent with the interval); ``None`` = the point rank."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageRecord:
    """One stage of a placement (one log line)."""

    stage: int
    """0-based index into the plan's stages."""
    stage_size: int | None
    """Examples per dataset asked for (``None`` = all)."""
    n_examples: tuple[int, ...]
    """Examples scored so far per dataset (capped at the dataset's size)."""
    rank: int
    """The placement: the point rank, or at a ``window`` stop the rank consistent with the interval."""
    mid_rank: float
    interval: tuple[int, int]
    confidence_level: float
    """Level of this look's interval (after the plan's multiple-look correction)."""
    tier: str
    resolution: int
    decision: str
    """``stop`` or ``escalate``."""
    reason: str

    def log_line(self, n_stages: int) -> str:
        size = "all" if self.stage_size is None else self.stage_size
        res = "maximal" if self.resolution == 0 else f"+-{self.resolution}"
        return (f"stage {self.stage + 1}/{n_stages} ({size}/dataset): {sum(self.n_examples)} examples, rank {self.rank} "
                f"[{self.interval[0]}, {self.interval[1]}] @{self.confidence_level:.2%}, tier {self.tier} ({res}), "
                f"{self.decision}: {self.reason}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Compute:
    """Compute actually spent and the saving versus scoring every example."""

    n_examples: int
    full_examples: int
    """Examples in the whole reference (all datasets)."""
    n_tokens: int | None
    """Tokens reported by the scorer (``None`` if it reports none)."""
    full_tokens: float | None
    """Tokens of a full run, extrapolated per dataset from the tokens per example seen."""
    flops: float | None
    """``2 x n_parameters x n_tokens``."""
    full_flops: float | None

    @property
    def saving(self) -> float:
        """Full-run examples (tokens, when known) divided by those spent."""
        return self.token_saving or self.example_saving

    @property
    def example_saving(self) -> float:
        """Full-run examples divided by the examples spent."""
        return self.full_examples / max(self.n_examples, 1)

    @property
    def token_saving(self) -> float | None:
        """Full-run tokens divided by the tokens spent (``None`` unless the scorer reports tokens)."""
        return self.full_tokens / self.n_tokens if self.n_tokens and self.full_tokens else None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementResult:
    """Outcome of :func:`place`."""

    model_id: str
    reference: str
    plan: str
    seed: int
    status: str
    """``resolved`` or ``unresolved at budget``."""
    reason: str
    rank: int | None
    """Placed rank among the ``n_models + 1`` (``None`` if the budget allowed no stage)."""
    interval: tuple[int, int]
    confidence_level: float
    """Overall level of the interval (the plan's), whatever the per-look level."""
    tier: str | None
    resolution: int | None
    n_models: int
    stages: tuple[StageRecord, ...]
    compute: Compute

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (the ``place`` record's payload)."""
        from dataclasses import asdict

        out = asdict(self)
        out["compute"]["saving"] = self.compute.saving
        out["compute"]["example_saving"] = self.compute.example_saving
        out["compute"]["token_saving"] = self.compute.token_saving
        return out


def window_rank(plan: TierPlan, interval: tuple[int, int], mid_rank: float) -> int | None:
    """A rank ``r`` whose tier's window ``[r - k_r, r + k_r]`` holds ``interval``, nearest ``mid_rank``.

    ``None`` when no rank of the interval has a window that wide (the ``window`` rule escalates),
    and when the interval reaches into a ``maximal`` tier without being a single rank (a first
    place is claimed only by the interval ``[1, 1]``). Ties in distance go to the better rank.

    Examples
    --------
    >>> from flasheval.placement.tiers import load_tier_plan
    >>> plan = load_tier_plan("flash_helm")  # tiers of the paper: 1 | 2-4 +-1 | 5-9 +-2 | 10-19 +-3 | 20+ +-4
    >>> window_rank(plan, (9, 14), 10.0)  # width 5 fits 11 +-3 (a centred rule would escalate)
    11
    >>> window_rank(plan, (3, 8), 4.0) is None  # width 5 fits no window of tiers 2-4 or 5-9
    True
    >>> window_rank(plan, (1, 2), 1.5) is None  # 2 +-1 would hold it, but it reaches the maximal tier
    True
    """
    lo, hi = interval
    if lo != hi and any(t.resolution == 0 and t.overlaps(lo, hi) for t in plan.tiers):
        return None
    best: int | None = None
    for r in range(lo, hi + 1):
        k = plan.tier_for(r).resolution
        if r - k <= lo and hi <= r + k and (best is None or abs(r - mid_rank) < abs(best - mid_rank)):
            best = r
    return best


def decide(*, plan: TierPlan, stage_size: int | None, rank: int, interval: tuple[int, int], is_last: bool,
           mid_rank: float | None = None) -> Decision:
    """Stop or escalate after a stage (pure).

    Parameters
    ----------
    plan
        The tier plan (stop rule, tiers), already scaled to the pool (:meth:`TierPlan.for_pool`).
    stage_size
        Examples per dataset of this stage (``None`` = all).
    rank, interval
        Point rank and the look's interval.
    is_last
        Whether every example of every dataset is now scored.
    mid_rank
        The point mid-rank (``window`` rule: the reported rank is the admissible one nearest it;
        default ``rank``).

    Examples
    --------
    >>> from flasheval.placement.tiers import load_tier_plan
    >>> plan = load_tier_plan("lean")
    >>> decide(plan=plan, stage_size=50, rank=30, interval=(27, 33), is_last=False).stop
    True
    >>> decide(plan=plan, stage_size=50, rank=6, interval=(3, 8), is_last=False).reason
    "interval [3, 8] fits no tier's window"
    >>> d = decide(plan=plan, stage_size=50, rank=10, interval=(9, 14), is_last=False)
    >>> d.stop, d.rank
    (True, 11)
    """
    if is_last:
        return Decision(stop=True, reason="every example scored: this is the full-data rank")
    tier = plan.tier_for(rank)
    if plan.stop_rule == "flash_helm":
        if tier.stop_stage is not None and stage_size is not None and stage_size >= tier.stop_stage:
            return Decision(stop=True, reason=f"tier {tier.label} stops at {tier.stop_stage}/dataset (Flash-HELM schedule)")
        target = "all" if tier.stop_stage is None else tier.stop_stage
        return Decision(stop=False, reason=f"tier {tier.label} needs {target}/dataset (Flash-HELM schedule)")
    lo, hi = interval
    if plan.stop_rule == "window":
        r = window_rank(plan, interval, rank if mid_rank is None else mid_rank)
        if r is None:
            return Decision(stop=False, reason=f"interval [{lo}, {hi}] fits no tier's window")
        chosen = plan.tier_for(r)
        if chosen.min_stage is not None and stage_size is not None and stage_size < chosen.min_stage:
            return Decision(stop=False, reason=f"tier {chosen.label} may stop from {chosen.min_stage}/dataset on (min_stage)")
        return Decision(stop=True, rank=r,
                        reason=f"interval [{lo}, {hi}] within {r}+-{chosen.resolution} (tier {chosen.label})")
    k = tier.resolution
    if tier.min_stage is not None and stage_size is not None and stage_size < tier.min_stage:
        return Decision(stop=False, reason=f"tier {tier.label} may stop from {tier.min_stage}/dataset on (min_stage)")
    if rank - k <= lo and hi <= rank + k:
        return Decision(stop=True, reason=f"interval [{lo}, {hi}] within {rank}+-{k} (tier {tier.label})")
    return Decision(stop=False, reason=f"interval [{lo}, {hi}] not within {rank}+-{k} (tier {tier.label})")


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


def stage_targets(stage_size: int | None, sizes: list[int], *, allocation: str = "uniform",
                  spreads: list[float] | None = None, costs: list[float] | None = None,
                  weights: list[float] | None = None, scored: list[int] | None = None,
                  minimum: int = 0) -> list[int]:
    """Examples per dataset at a stage.

    ``uniform``: ``stage_size`` capped by each dataset's size (all when ``None``).
    ``neyman-cost``: the uniform stage's cost ``sum_d costs[d] * min(stage_size, N_d)`` split by
    :func:`flasheval.placement.allocation.neyman_cost_allocation` with ``spreads``, ``costs``
    and ``weights``, never below what is already ``scored`` (nesting) nor below ``minimum``
    (``place`` passes half the plan's first stage, so the first look is not forced to be uniform).
    """
    uniform = [n if stage_size is None else min(stage_size, n) for n in sizes]
    if allocation == "uniform" or stage_size is None:
        return uniform
    if spreads is None:
        raise ValueError("the neyman-cost allocation needs spreads")
    c = [1.0] * len(sizes) if costs is None else list(costs)
    done = [0] * len(sizes) if scored is None else list(scored)
    lower = [max(s, min(minimum, stage_size)) for s in done]
    return neyman_cost_allocation(float(np.dot(c, uniform)), sizes, spreads=spreads, costs=c, weights=weights,
                                  lower=lower)


def _allocation_inputs(reference: ReferenceLeaderboard, aggregate: str | None) -> dict[str, Any]:
    """Spreads, per-example token costs (1 when unknown) and aggregate weights for ``neyman-cost``."""
    tokens = reference.n_tokens
    costs = None if any(t is None for t in tokens) else [max(float(t.mean()), 1e-9) for t in tokens]  # type: ignore[union-attr]
    options = reference.aggregate_options(aggregate)
    weights = None
    if options["kind"] == "centered":
        weights = [1.0 / (1.0 - float(options["random_baselines"][d])) for d in reference.dataset_names]
    return {"spreads": residual_spreads(reference.scores), "costs": costs, "weights": weights}


@dataclass(frozen=True, slots=True, kw_only=True)
class LookPlan:
    """The looks of one placement on one reference, fixed before the new model is scored."""

    stages: tuple[int, ...]
    """Index into the plan's stages of each look (stages that add no example are not looks)."""
    targets: tuple[tuple[int, ...], ...]
    """Examples per dataset scored at each look."""
    variances: tuple[float, ...]
    """Variance of each look's aggregate estimate, ``sum_d w_d^2 S_d^2 (1/n_d - 1/N_d)`` with the
    pool's residual spreads ``S_d`` (:func:`~flasheval.placement.allocation.allocation_variance`)."""
    levels: tuple[float, ...]
    """Two-sided level of each look's interval under the plan's correction."""


def look_plan(reference: ReferenceLeaderboard, plan: TierPlan, aggregate: str | None = None, *,
              low_rank: int | None = None) -> LookPlan:
    """Every look of a placement of a new model on ``reference`` with ``plan`` (already scaled), and its level.

    The looks depend only on the plan, the dataset sizes and, for ``neyman-cost``, the pool, so
    they are known before the new model is scored; so are the variances of their estimates up to
    the new model's own (unknown) spread, and the repeated-confidence levels built on them
    (``correction: pocock``, :mod:`flasheval.stats.sequential`), or the constant calibrated to the
    window rule (``correction: calibrated``, :mod:`flasheval.placement.calibration`). ``place`` and
    ``sweep`` both use it; ``low_rank``: the sweep also stops an interval at or below this rank
    (``clearly low``), and the calibration must know every way a run can stop.
    """
    sizes = [len(ids) for ids in reference.example_ids]
    inputs = _allocation_inputs(reference, aggregate)
    split = {} if plan.allocation == "uniform" else {"allocation": plan.allocation, "minimum": max(1, (plan.stages[0] or 2) // 2),
                                                      **inputs}
    stages, targets, scored = [], [], [0] * len(sizes)
    for k, stage_size in enumerate(plan.stages):
        t = stage_targets(stage_size, sizes, scored=scored, **split)
        if t == scored:
            continue  # this stage adds no example (datasets smaller than the stage)
        stages.append(k)
        targets.append(tuple(t))
        scored = t
    variances = tuple(allocation_variance(t, sizes, spreads=inputs["spreads"], weights=inputs["weights"]) for t in targets)
    levels = plan.look_levels(variances)
    if plan.correction == "calibrated" and reference.aggregate_options(aggregate)["kind"] != "win_rate":
        levels = _calibrated_levels(reference, plan, variances, aggregate, low_rank)
    return LookPlan(stages=tuple(stages), targets=tuple(targets), variances=variances, levels=levels)


def for_budget(plan: TierPlan, budget: Budget) -> TierPlan:
    """The plan whose looks a run under ``budget`` takes: with a cap, ``calibrated`` becomes ``pocock``.

    The calibrated constant assumes a run goes on until the rule stops it (or every example is
    scored); a cap may end it at a look where it has not stopped, and report that look's interval.
    Pocock's constant holds at any stop, so capped runs use it.
    """
    if plan.correction == "calibrated" and budget.capped:
        return replace(plan, correction="pocock")
    return plan


def window_fits(plan: TierPlan, n_ranks: int, low_rank: int | None = None) -> np.ndarray:
    """``fits[lo, hi]``: whether the ``window`` rule stops on the rank interval ``[lo, hi]`` (1-based).

    With ``low_rank``, an interval with ``lo >= low_rank`` stops too (the sweep's ``clearly low``).

    Examples
    --------
    >>> from flasheval.placement.tiers import load_tier_plan
    >>> fits = window_fits(load_tier_plan("flash_helm"), 20)
    >>> bool(fits[1, 1]), bool(fits[1, 2]), bool(fits[9, 14]), bool(fits[3, 8])
    (True, False, True, False)
    """
    fits = np.zeros((n_ranks + 2, n_ranks + 2), dtype=bool)
    for r in range(1, n_ranks + 1):  # the window of rank r holds every [lo, hi] with r - k <= lo <= r <= hi <= r + k
        k = plan.tier_for(r).resolution
        fits[max(1, r - k):r + 1, r:min(n_ranks, r + k) + 1] = True
    lo, hi = np.indices(fits.shape)
    for tier in plan.tiers:  # an interval reaching a maximal tier must be that single rank
        if tier.resolution == 0:
            reaches = (hi >= tier.first) & (lo <= (n_ranks if tier.last is None else tier.last))
            fits &= ~(reaches & (lo != hi))
    if low_rank is not None:
        fits |= (lo >= low_rank) & (lo <= hi) & (hi <= n_ranks)
    return fits


def _calibrated_levels(reference: ReferenceLeaderboard, plan: TierPlan, variances: tuple[float, ...],
                       aggregate: str | None, low_rank: int | None) -> tuple[float, ...]:
    """Every look's level from the constant calibrated to the window rule on this pool (``correction: calibrated``).

    The aggregate is a (weighted) mean over datasets, so a look's standard error is
    ``sqrt(V_k) / n_datasets``. Looks that cannot err (every example scored) get the same level,
    which does not matter for them.
    """
    se = np.sqrt([v for v in variances if v > 0]) / len(reference.dataset_names)
    sign = 1.0 if reference.ranking_higher_is_better(aggregate) else -1.0
    cal = calibrated_constant(sign * reference.aggregate_values(aggregate), se,
                              window_fits(plan, reference.n_models + 1, low_rank), plan.confidence_level)
    level = float(1.0 - 2.0 * stats.norm.sf(cal.constant)) if len(se) else plan.confidence_level
    return (level,) * len(variances)


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
        if for_budget(plan, budget) is not plan:
            logger.info("a budget cap may end the run before the rule stops it: the looks use Pocock's constant")
        looks = look_plan(reference, for_budget(plan, budget), aggregate)
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
