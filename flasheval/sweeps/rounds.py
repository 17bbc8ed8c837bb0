"""A sweep's round: which checkpoints get which look within the budget, planned before anything is scored.

:func:`plan_round` is the sweep's scheduling step as a pure function of the controllers' states and the
budget: it reads each active :class:`~flasheval.placement.controller.Controller`'s next look and returns a
:class:`Round`, a frozen list of :class:`RoundRequest` (checkpoint, look, the example ids per task), in
priority order. It scores nothing and changes no controller; an executor
(:mod:`flasheval.sweeps.executor`) serves the round and the scheduler (:func:`flasheval.sweeps.schedule.sweep`)
feeds each controller its scores.

Priority: checkpoints with no look yet first (everyone gets the first stage), then those whose rank interval
still overlaps a tier boundary, the top tiers first (lowest possible rank first), then the rest; ties by
model id. A look that would take the total past the budget is left out (a later, cheaper one may still fit).
The cost of a round's earlier requests counts in the check of the later ones: their examples exactly, their
tokens projected at each checkpoint's rate so far (else the sweep's), since they are not scored yet. Before
anything is scored the sweep has no rate: under a token or FLOPs cap the first round is then planned in two
parts, its first request alone (``complete=False``), and, once that is served, the rest (``served=`` the
checkpoints already served in the round), checked at the rate the first revealed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flasheval.engine.throughput import forward_flops
from flasheval.errors import InputError
from flasheval.placement.controller import Controller, stage_asks
from flasheval.placement.results import Budget
from flasheval.placement.tiers import TierPlan

__all__ = ["RoundRequest", "Round", "plan_round", "spent", "priority"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundRequest:
    """One checkpoint's next look, as a round asks it to be scored."""

    model_id: str
    """The checkpoint (its controller's and its scorer's key)."""
    look: int
    """Index of the look (into the course's looks)."""
    stage: int
    """Index into the plan's stages."""
    asks: tuple[tuple[str, tuple[str, ...]], ...]
    """``(task_name, example_ids)`` of every dataset with examples to score, in the reference's dataset order:
    what the checkpoint's scorer gets in one ``score_many`` call."""

    @property
    def n_new(self) -> int:
        """Examples the look adds."""
        return sum(len(ids) for _, ids in self.asks)


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    """The looks one round serves, in priority order; at most one per checkpoint."""

    number: int
    """1 for the sweep's first round."""
    requests: tuple[RoundRequest, ...]
    complete: bool = True
    """``False`` when the plan stops after its first request because the cost of the others cannot be projected
    yet (module docstring): the rest of the round is planned once it is served."""

    def __post_init__(self) -> None:
        ids = [r.model_id for r in self.requests]
        if len(set(ids)) != len(ids):
            raise InputError(f"a round serves one look per checkpoint, got {ids}", field="requests")

    @property
    def n_new(self) -> int:
        """Examples the round adds over all checkpoints."""
        return sum(r.n_new for r in self.requests)


def priority(c: Controller, plan: TierPlan) -> tuple[int, int, int]:
    """Sort key: no look yet first; then intervals overlapping a tier boundary, best possible rank first."""
    if c.dist is None:
        return (0, 0, 0)
    lo, hi = c.dist.interval
    crosses = plan.tier_for(lo) is not plan.tier_for(hi)
    return (1 if crosses else 2, lo, -(hi - lo))


def spent(controllers: Sequence[Controller]) -> tuple[int, float | None]:
    """Examples and tokens (``None`` unless every scored checkpoint reports tokens) spent so far."""
    examples = sum(c.n_examples for c in controllers)
    scored = [c for c in controllers if c.n_examples]
    if not scored or any(c.n_tokens is None for c in scored):
        return examples, None
    return examples, float(sum(c.n_tokens or 0 for c in scored))


def plan_round(controllers: Sequence[Controller], budget: Budget, *, number: int,
               served: frozenset[str] = frozenset()) -> Round:
    """Round ``number``: each active controller's next look, in priority order, as far as ``budget`` pays (module
    docstring); ``served``: checkpoints already served in this round (their controllers are left out). Pure: the
    same controllers' states, budget and arguments give the same round; nothing is scored."""
    if not controllers:
        return Round(number=number, requests=())
    plan, names = controllers[0].course.plan, controllers[0].course.reference.dataset_names
    examples, tokens = spent(controllers)
    blind = examples == 0 and (budget.max_tokens is not None or budget.max_flops is not None)  # no rate yet
    requests = []
    for c in sorted((c for c in controllers if c.active and c.model_id not in served),
                    key=lambda c: (priority(c, plan), c.model_id)):
        if blind and requests:
            return Round(number=number, requests=tuple(requests), complete=False)
        stage = c.next_stage()
        if stage is None:  # every example scored: the last look already resolved it
            continue
        extra, more = stage.n_new, None
        if tokens is not None:  # at the checkpoint's rate so far, else the sweep's
            own = c.n_tokens
            rate = own / c.n_examples if c.n_examples and own is not None else tokens / max(examples, 1)
            more = tokens + rate * extra
        flops = forward_flops(c.n_parameters, more)
        if budget.exceeded_by(examples=examples + extra, tokens=more, flops=flops) is not None:
            continue
        examples, tokens = examples + extra, more
        requests.append(RoundRequest(model_id=c.model_id, look=stage.look, stage=stage.stage,
                                     asks=stage_asks(names, stage)))
    return Round(number=number, requests=tuple(requests))
