"""Coverage over a run: what the intervals of many checkpoints promise together, and the split that makes it simultaneous.

One placement's interval covers the checkpoint's full-data rank with probability at least the plan's
``confidence_level`` ``L`` at the data-dependent stop (:mod:`flasheval.placement.tiers`,
:mod:`flasheval.placement.calibration`). A training run places ``N`` checkpoints, each at ``L``; with
``alpha = 1 - L``:

- the expected number of intervals that miss is at most ``N alpha`` (linearity of expectation, whatever
  the dependence between the placements);
- all ``N`` cover at once with probability at least ``1 - N alpha`` (the union bound), and no more can be
  promised without knowing how the placements' errors depend on each other: misses that never happen
  together reach the bound (two checkpoints next to the best pool model miss only by overshooting; with
  errors of opposite sign their misses are disjoint).

:func:`split_level` spends a run's ``alpha`` over its ``K`` planned checkpoints (Bonferroni): each is placed
at ``1 - alpha / K``, so all ``K`` intervals cover at once with probability at least ``1 - alpha``, whatever
the dependence (the checkpoints share the example orders of one seed, the pool and most of their weights).
:func:`simultaneous_level` is what the union bound still gives when ``N`` checkpoints have been placed at
some level, in particular more than the ``K`` planned: ``1 - N (1 - level)``.

Why not cheaper (``docs/placement.md``, "Coverage over a run"): Sidak's ``1 - (1 - alpha)^(1/K)`` is valid for
events that are positively dependent (e.g. symmetric convex sets of one Gaussian vector, by Royen's Gaussian
correlation inequality: Pocock's "every look covers"); the event "the interval at the STOP covers" of the
calibrated constant is neither, and the gain would be under 1% of the examples anyway. A constant calibrated
jointly over K checkpoints would need a model of how different checkpoints' errors depend on each other,
which does not exist before the checkpoints do; under the worst dependence Bonferroni is what it finds.
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Integral

from flasheval.checks import MAX_CHECKPOINTS
from flasheval.errors import InputError
from flasheval.placement.tiers import TierPlan

__all__ = ["check_n_checkpoints", "split_level", "simultaneous_level"]


def check_n_checkpoints(n_checkpoints: object, *, field: str = "simultaneous",
                        maximum: int | None = MAX_CHECKPOINTS) -> int:
    """``n_checkpoints`` as an ``int`` if it is a whole number >= 1 (not a bool) and at most ``maximum``
    (:data:`~flasheval.checks.MAX_CHECKPOINTS`; ``None``: no ceiling); else one line naming ``field``.

    Examples
    --------
    >>> check_n_checkpoints(10)
    10
    >>> check_n_checkpoints(0)
    Traceback (most recent call last):
    ...
    flasheval.errors.InputError: field 'simultaneous': the planned number of checkpoints must be a whole number >= 1, got 0
    """
    if isinstance(n_checkpoints, bool) or not isinstance(n_checkpoints, Integral) or n_checkpoints < 1:
        raise InputError(f"the planned number of checkpoints must be a whole number >= 1, got {n_checkpoints!r}",
                         field=field)
    if maximum is not None and n_checkpoints > maximum:
        raise InputError(f"the planned number of checkpoints must be at most {maximum:,} (each is placed at level "
                         f"1 - alpha/K: beyond that no bootstrap resolves it), got {n_checkpoints!r}", field=field)
    return int(n_checkpoints)


def split_level(plan: TierPlan, n_checkpoints: int) -> TierPlan:
    """``plan`` with its level split over ``n_checkpoints`` placements (Bonferroni): ``1 - (1 - L) / K``.

    Every other field (the correction included) is kept: with ``calibrated`` the looks' constant is
    calibrated at the split level, with ``pocock`` Pocock's constant is taken at it, so each placement
    keeps its level at its own stop, and the ``K`` placements cover at once with probability at least
    ``L`` by the union bound.

    Parameters
    ----------
    plan
        The run's plan; its ``confidence_level`` ``L`` is the level wanted for all ``K`` intervals at once.
    n_checkpoints
        ``K``, the number of checkpoints the run plans to place (a whole number >= 1; ``1`` returns
        ``plan`` itself). A bad value is refused in one line naming ``simultaneous``, the keyword of
        ``place_checkpoint`` that passes it.

    Examples
    --------
    >>> from flasheval.placement.tiers import load_tier_plan
    >>> plan = load_tier_plan("default")
    >>> round(split_level(plan, 10).confidence_level, 6), split_level(plan, 1) is plan
    (0.995, True)
    """
    k = check_n_checkpoints(n_checkpoints)
    if k == 1:
        return plan
    return replace(plan, confidence_level=1.0 - (1.0 - plan.confidence_level) / k)


def simultaneous_level(level: float, n_placed: int) -> float:
    """The level at which ``n_placed`` intervals, each at ``level``, cover at once: ``max(0, 1 - n (1 - level))``.

    The union bound, whatever the dependence. For a run planned for ``K`` checkpoints at
    ``split_level(plan, K)`` it is the plan's level for the first ``K`` and falls by ``alpha / K`` per
    checkpoint placed beyond them (``0``: no promise left).

    Examples
    --------
    >>> round(simultaneous_level(0.995, 10), 6), round(simultaneous_level(0.995, 12), 6)
    (0.95, 0.94)
    >>> simultaneous_level(0.95, 1), simultaneous_level(0.95, 40)
    (0.95, 0.0)
    """
    n = check_n_checkpoints(n_placed, field="n_placed", maximum=None)
    return max(0.0, 1.0 - n * (1.0 - level))
