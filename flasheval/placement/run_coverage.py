"""Coverage over a run: what the intervals of many checkpoints promise together.

A training run places K checkpoints. Each placement's interval covers its full-data rank with
probability ``confidence_level`` (under optional stopping, see :mod:`flasheval.placement.tiers`);
all K at once cover with probability at least ``1 - K (1 - confidence_level)`` by the union bound.
:func:`split_level` spends the run's error ``alpha`` over the K planned checkpoints (Bonferroni): each
is placed at level ``1 - alpha / K``, so the K intervals cover together with probability at least
``1 - alpha``, whatever the dependence between checkpoints (they share examples and weights).
"""

from __future__ import annotations

from dataclasses import replace

from flasheval.placement.tiers import TierPlan

__all__ = ["split_level"]


def split_level(plan: TierPlan, n_checkpoints: int) -> TierPlan:
    """``plan`` with its level split over ``n_checkpoints`` placements (Bonferroni).

    Examples
    --------
    >>> from flasheval.placement.tiers import load_tier_plan
    >>> plan = load_tier_plan("default")
    >>> round(split_level(plan, 10).confidence_level, 6), split_level(plan, 1) is plan
    (0.995, True)
    """
    if isinstance(n_checkpoints, bool) or not isinstance(n_checkpoints, int) or n_checkpoints < 1:
        raise ValueError(f"n_checkpoints must be an integer >= 1, got {n_checkpoints!r}")
    if n_checkpoints == 1:
        return plan
    return replace(plan, confidence_level=1.0 - (1.0 - plan.confidence_level) / n_checkpoints)
