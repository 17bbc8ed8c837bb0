"""The stop rule: after a look, stop or escalate, and why (pure).

:func:`decide` applies a tier plan's rule (``interval``, ``window`` or the Flash-HELM schedule) to a
look's rank and interval. :func:`window_rank` is the ``window`` rule's rank for one interval, and
:func:`window_fits` the same rule as a table over every interval (what the calibration simulates,
:mod:`flasheval.placement.calibration`).
"""

from __future__ import annotations

import numpy as np

from flasheval.placement.results import Decision
from flasheval.placement.tiers import TierPlan

__all__ = ["decide", "window_rank", "window_fits"]


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
    for tier in plan.tiers:  # an interval reaching a maximal tier must be that single rank
        if tier.resolution == 0:
            # [lo, hi] reaches the tier when hi >= first and lo <= last: those rows and columns, off the diagonal
            last = n_ranks if tier.last is None else tier.last
            block = fits[:last + 1, tier.first:]
            keep = np.diagonal(block, offset=-tier.first).copy() if last >= tier.first else None
            block[:] = False
            if keep is not None:
                idx = np.arange(tier.first, tier.first + len(keep))
                fits[idx, idx] = keep
    if low_rank is not None:  # every [lo, hi] with low_rank <= lo <= hi <= n_ranks
        fits[low_rank:n_ranks + 1, :n_ranks + 1] |= np.triu(np.ones((n_ranks + 1 - low_rank, n_ranks + 1), dtype=bool),
                                                           k=low_rank)
    return fits


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
