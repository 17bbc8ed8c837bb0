"""The API's arguments that name things: references, tier plans, budgets; checked at the entry.

Each takes either the value object or what names it (a reference name or folder, a plan name or
file) and refuses anything else in one line naming the argument, so the API and the command line
refuse the same values the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flasheval.api.options import EngineOptions
from flasheval.checks import check_positive
from flasheval.engine.throughput import forward_flops
from flasheval.errors import InputError
from flasheval.reference.scoring.live import LiveOptions
from flasheval.placement.looks import first_look
from flasheval.placement.results import Budget
from flasheval.placement.tiers import TierPlan, load_tier_plan
from flasheval.reference import ReferenceLeaderboard, load_reference

__all__ = ["resolve_reference", "resolve_plan", "resolve_budget", "refuse_time_budget", "check_n_parameters",
           "live_options", "refuse_live_options", "check_budget", "REPLAY"]


def resolve_reference(reference: Any, *, missing: str = "complete-models") -> ReferenceLeaderboard:
    """A loaded reference, or the one a name or folder names (loaded with the ``missing`` policy)."""
    if isinstance(reference, ReferenceLeaderboard):
        if missing != "complete-models" and missing != reference.missing_policy:
            raise InputError(f"the reference was loaded with policy {reference.missing_policy!r}; load it again "
                             "with the policy wanted", field="--missing")
        return reference
    if isinstance(reference, (str, Path)):
        return load_reference(reference, missing=missing)
    raise InputError(f"expected a reference name, folder or ReferenceLeaderboard, got {type(reference).__name__}",
                     field="--reference")


def resolve_plan(plan: Any) -> TierPlan:
    """A tier plan, or the one a name or file names."""
    if isinstance(plan, TierPlan):
        return plan
    if isinstance(plan, (str, Path)):
        return load_tier_plan(str(plan))
    raise InputError(f"expected a tier plan name, file or TierPlan, got {type(plan).__name__}", field="--tiers")


def resolve_budget(budget: Any) -> Budget:
    """``budget`` (a :class:`~flasheval.placement.results.Budget`), or no caps for ``None``."""
    if budget is None:
        return Budget()
    if not isinstance(budget, Budget):
        raise InputError(f"expected a Budget, got {type(budget).__name__}", field="budget")
    return budget


def check_n_parameters(value: Any) -> None:
    """Refuse a parameter count that is not a positive finite number (``None`` passes)."""
    check_positive(value, field="--n-parameters")



def live_options(*, seed: Any, task_dir: Any, include_path: Any, num_fewshot: Any,
                 engine: EngineOptions) -> LiveOptions:
    """The options of scoring live models on a reference (validated by
    :class:`~flasheval.reference.scoring.live.LiveOptions`; the device options by :class:`EngineOptions`)."""
    engine.refuse("evaluate and lm_eval only (a placement scores what the reference's models were scored on)",
                  "max_length")
    return LiveOptions(seed=seed, dtype=engine.dtype, task_dir=None if task_dir is None else str(task_dir),
                       include_path=None if include_path is None else str(Path(include_path).resolve()),
                       num_fewshot=num_fewshot, device=engine.device,
                       batch_size=engine.batch_size, device_map=engine.placement)


REPLAY = "live models only (replay: serves recorded scores)"
"""Where the device options apply, as a replayed model's refusal says it."""


def refuse_live_options(why: str, **options: Any) -> None:
    """Refuse, in one line naming it, the first live-only option given (not ``None``) to a replayed model."""
    for name, value in options.items():
        if value is not None:
            raise InputError(f"applies to live {why}", field="--" + name.replace("_", "-"))


def refuse_time_budget(budget: Budget) -> None:
    """Refuse a time budget for a replayed model, which scores nothing (its recorded scores are served)."""
    if budget.max_seconds is not None:
        raise InputError("a time budget caps the scoring of a live model; a replayed model scores nothing (its "
                         "recorded scores are served)", field="--max-seconds")


def check_budget(budget: Budget, pool: ReferenceLeaderboard, plan: TierPlan, *, aggregate: str | None,
                 first_tokens: int | None = None, replay: bool = False, n_parameters: float | None = None) -> None:
    """Refuse, before a placement runs, a budget that cannot bind or that no stage fits in.

    ``pool``: the reference the model is placed on (held out). A replayed model's tokens come from
    the reference: without token counts a token or FLOPs cap would never stop the run, and FLOPs
    also need ``n_parameters``. A cap below the plan's first look (examples; tokens and FLOPs when
    ``first_tokens``, the first look's tokens, is known) would end the run before its first look.
    """
    if not budget.capped:
        return
    if replay:
        refuse_time_budget(budget)
    if replay and (budget.max_tokens is not None or budget.max_flops is not None):
        option, kind = ("--max-tokens", "token") if budget.max_tokens is not None else ("--max-flops", "FLOPs")
        if any(t is None for t in pool.n_tokens):
            raise InputError(f"reference {pool.name!r} records no token counts, so a {kind} budget cannot bind "
                             "(every stage would run); cap the examples instead with --max-examples", field=option)
        if budget.max_flops is not None and n_parameters is None:
            raise InputError("a FLOPs budget needs the parameter count (FLOPs ~ 2 x parameters x tokens): give "
                             "--n-parameters", field="--max-flops")
    k, targets = first_look(pool, plan, aggregate)
    size = plan.stages[k]
    n_examples = int(sum(targets))
    split = (f"{size} per dataset x {len(targets)} datasets" if all(t == size for t in targets)
             else f"every example of {len(targets)} datasets" if size is None else f"over {len(targets)} datasets")
    what = f"the first stage of plan {plan.name} ({n_examples} examples: {split}"
    if budget.max_examples is not None and budget.max_examples < n_examples:
        raise InputError(f"{budget.max_examples} is below {what}); give at least {n_examples}", field="--max-examples")
    if first_tokens is None:
        return
    if budget.max_tokens is not None and budget.max_tokens < first_tokens:
        raise InputError(f"{budget.max_tokens} is below {what}, {first_tokens} tokens); give at least {first_tokens}",
                         field="--max-tokens")
    flops = forward_flops(n_parameters, first_tokens)
    if budget.max_flops is not None and flops is not None and budget.max_flops < flops:
        raise InputError(f"{budget.max_flops:.3g} is below {what}, ~{flops:.3g} FLOPs); give at least {flops:.3g}",
                         field="--max-flops")
