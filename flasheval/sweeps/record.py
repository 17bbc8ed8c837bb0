"""What a sweep record says beyond the sweep itself: a replay sweep's truth, and the record's payload.

Replay sweeps are backtests: :func:`truth_ranks` gives each held-out checkpoint's full-data rank among
the pool and :func:`separate_placements` the cost of placing them one by one with ``place``;
:func:`build_payload` is the payload of ``sweep.json`` (with, for a backtest, how the sweep did).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flasheval.placement.controller import place, plan_looks
from flasheval.reference.scoring.replay import ReplayScorer
from flasheval.sweeps.schedule import SweepResult
from flasheval.placement.tiers import TierPlan
from flasheval.reference.leaderboard import ReferenceLeaderboard
from flasheval.stats.dior import kendall_tau_b
from flasheval.stats.ranking import rank_among

__all__ = ["truth_ranks", "separate_placements", "build_payload"]


def truth_ranks(full: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_ids: list[str],
                aggregate: str | None) -> dict[str, int]:
    """Each held-out checkpoint's full-data rank among ``pool`` (the answer a replay sweep estimates)."""
    values, pool_values = full.aggregate_values(aggregate), pool.aggregate_values(aggregate)
    direction = full.ranking_higher_is_better(aggregate)
    return {m: int(math.floor(float(rank_among(values[full.index(m)], pool_values, higher_is_better=direction)) + 0.5))
            for m in model_ids}


def separate_placements(full: ReferenceLeaderboard, pool: ReferenceLeaderboard, model_ids: list[str], plan: TierPlan,
                        *, seed: int, aggregate: str | None) -> int:
    """Examples that independent ``place`` runs of the replayed checkpoints spend (no budget, no racing);
    they share one pool, so its looks are computed once."""
    looks = plan_looks(pool, plan, aggregate=aggregate)
    return sum(place(pool, ReplayScorer(full, m), plan, model_id=m, seed=seed, aggregate=aggregate, looks=looks)
               .compute.n_examples for m in model_ids)


def build_payload(result: SweepResult, full: ReferenceLeaderboard, pool: ReferenceLeaderboard, aggregate: str | None,
                  separate: int | None = None) -> dict[str, Any]:
    """The sweep record's payload: the result, the pool's leaderboard and, for a backtest, how it did."""
    payload = result.to_json()
    payload["leaderboard"] = [{"model_id": r.model_id, "value": r.value} for r in pool.ranking(aggregate)]
    truth = result.truth
    if truth:
        rows = [c for c in result.checkpoints if c.rank is not None]
        plan_ok = [abs(c.rank - truth[c.model_id]) <= (c.resolution or 0) for c in rows if c.status == "resolved"]
        payload["backtest"] = {
            "covered": float(np.mean([c.interval[0] <= truth[c.model_id] <= c.interval[1] for c in rows])),
            "resolved_within_resolution": float(np.mean(plan_ok)) if plan_ok else None,
            "n_resolved": len(plan_ok),
            "separate_placements_examples": separate,
        }
        if result.order:
            placed = np.array([-o.value for o in result.order])
            true = np.array([float(truth[o.model_id]) for o in result.order])
            payload["backtest"]["order_kendall_tau"] = float(kendall_tau_b(true, placed[None, :])[0])
    return payload
