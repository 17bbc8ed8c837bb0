"""The looks of a placement, fixed before the new model is scored: per-dataset targets, variances, levels.

:func:`stage_targets` splits a stage over the datasets (``uniform`` or ``neyman-cost``,
:mod:`flasheval.placement.allocation`); :func:`look_plan` lists the stages that add examples, the
variances of their estimates and each look's confidence level under the plan's multiple-look
correction (Pocock's constant, or the constant calibrated to the window rule,
:mod:`flasheval.placement.calibration`); :func:`for_budget` says which correction a capped run uses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from flasheval.placement.allocation import allocation_variance, neyman_cost_allocation, residual_spreads
from flasheval.placement.calibration import calibrated_constant
from flasheval.placement.results import Budget
from flasheval.placement.stop_rule import window_fits
from flasheval.placement.tiers import TierPlan
from flasheval.reference import ReferenceLeaderboard

__all__ = ["LookPlan", "look_plan", "for_budget", "stage_targets", "first_look"]


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
    stages, targets = _look_targets(sizes, plan, inputs)
    variances = tuple(allocation_variance(t, sizes, spreads=inputs["spreads"], weights=inputs["weights"]) for t in targets)
    levels = plan.look_levels(variances)
    if plan.correction == "calibrated" and reference.aggregate_options(aggregate)["kind"] != "win_rate":
        levels = _calibrated_levels(reference, plan, variances, aggregate, low_rank)
    return LookPlan(stages=tuple(stages), targets=tuple(targets), variances=variances, levels=levels)


def _look_targets(sizes: list[int], plan: TierPlan,
                  inputs: dict[str, Any] | None) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """The looks' stages (indices into ``plan.stages``) and examples per dataset; a stage that adds no
    example (datasets smaller than it) is not a look. ``inputs``: :func:`_allocation_inputs` (needed
    unless the allocation is uniform)."""
    split = {} if plan.allocation == "uniform" else {"allocation": plan.allocation, "minimum": max(1, (plan.stages[0] or 2) // 2),
                                                      **(inputs or {})}
    stages, targets, scored = [], [], [0] * len(sizes)
    for k, stage_size in enumerate(plan.stages):
        t = stage_targets(stage_size, sizes, scored=scored, **split)
        if t == scored:
            continue
        stages.append(k)
        targets.append(tuple(t))
        scored = t
    return tuple(stages), tuple(targets)


def first_look(reference: ReferenceLeaderboard, plan: TierPlan,
               aggregate: str | None = None) -> tuple[int, tuple[int, ...]]:
    """The stage (index into ``plan.stages``) and examples per dataset of the first look: what every run
    scores first (the first of :func:`look_plan`'s looks, without computing the levels)."""
    sizes = [len(ids) for ids in reference.example_ids]
    inputs = None if plan.allocation == "uniform" else _allocation_inputs(reference, aggregate)
    stages, targets = _look_targets(sizes, plan, inputs)
    return stages[0], targets[0]


def for_budget(plan: TierPlan, budget: Budget) -> TierPlan:
    """The plan whose looks a run under ``budget`` takes: with a cap, ``calibrated`` becomes ``pocock``.

    The calibrated constant assumes a run goes on until the rule stops it (or every example is
    scored); a cap may end it at a look where it has not stopped, and report that look's interval.
    Pocock's constant holds at any stop, so capped runs use it.
    """
    if plan.correction == "calibrated" and budget.capped:
        return replace(plan, correction="pocock")
    return plan


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
