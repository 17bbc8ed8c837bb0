"""The API's arguments that name things: references, tier plans, budgets; checked at the entry.

Each takes either the value object or what names it (a reference name or folder, a plan name or
file) and refuses anything else in one line naming the argument, so the API and the command line
refuse the same values the same way.

:func:`check_place` is :func:`flasheval.place`'s validator (the shape of scipy.stats.bootstrap's ``_bootstrap_iv``):
it checks every argument and returns the checked values, and :func:`flasheval.place`, :func:`flasheval.place_checkpoint`
and :func:`flasheval.watch` call it before they read, load or write anything, so a bad value (an unknown aggregate, a
negative seed, a budget that is not a :class:`~flasheval.placement.results.Budget`, a keyword ``place`` does not
take) is refused in one line with nothing written. What needs the reference (a budget below the plan's first look, a
seed other than a DCLM reference's build seed, a replayed model the reference lacks) is checked once it is read,
still before anything is written (:func:`flasheval.api.place.check_on_reference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flasheval.api.models import Model, ReplayModel, resolve_model
from flasheval.api.options import EngineOptions, engine_options
from flasheval.api.progress import check_progress
from flasheval.checks import check_flag, check_output, check_positive, check_seed
from flasheval.engine.coordination.distributed import check_distributed
from flasheval.engine.hf.in_memory import LoadedModel, check_sharded_placement
from flasheval.engine.throughput import forward_flops
from flasheval.errors import InputError
from flasheval.reference.scoring.live import LiveOptions
from flasheval.placement.looks import first_look
from flasheval.placement.results import Budget
from flasheval.placement.tiers import TierPlan, load_tier_plan
from flasheval.reference import ReferenceLeaderboard, load_reference
from flasheval.reference.leaderboard import check_missing_policy
from flasheval.stats.ranking import check_aggregate

__all__ = ["resolve_reference", "resolve_plan", "resolve_budget", "refuse_time_budget", "check_n_parameters",
           "check_pool_options", "check_reference_arg", "check_plan_arg", "PLACE_KEYWORDS", "PlaceArgs", "check_place",
           "check_place_options",
           "live_options", "refuse_live_options", "check_budget", "REPLAY"]


def resolve_reference(reference: Any, *, missing: str = "complete-models") -> ReferenceLeaderboard:
    """A loaded reference, or the one a name or folder names (loaded with the ``missing`` policy)."""
    if isinstance(reference, ReferenceLeaderboard):
        if missing != "complete-models" and missing != reference.missing_policy:
            raise InputError(f"the reference was loaded with policy {reference.missing_policy!r}; load it again "
                             "with the policy wanted", field="--missing")
        return reference
    check_reference_arg(reference)
    return load_reference(reference, missing=missing)


def check_reference_arg(reference: Any) -> None:
    """Refuse, before anything is read, a ``reference`` that is not a name, a folder or a loaded reference."""
    if not isinstance(reference, (ReferenceLeaderboard, str, Path)):
        raise InputError(f"expected a reference name, folder or ReferenceLeaderboard, got {type(reference).__name__}",
                         field="--reference")


def resolve_plan(plan: Any) -> TierPlan:
    """A tier plan, or the one a name or file names."""
    if isinstance(plan, TierPlan):
        return plan
    check_plan_arg(plan)
    return load_tier_plan(str(plan))


def check_plan_arg(plan: Any) -> None:
    """Refuse, before anything is read, a ``plan`` that is not a name, a file or a :class:`TierPlan`."""
    if not isinstance(plan, (TierPlan, str, Path)):
        raise InputError(f"expected a tier plan name, file or TierPlan, got {type(plan).__name__}", field="--tiers")


def resolve_budget(budget: Any) -> Budget:
    """``budget`` (a :class:`~flasheval.placement.results.Budget`), or no caps for ``None``."""
    if budget is None:
        return Budget()
    if not isinstance(budget, Budget):
        raise InputError(f"expected a Budget, got {type(budget).__name__}", field="budget")
    return budget


def check_pool_options(aggregate: Any, missing: Any) -> None:
    """The aggregate (``None``: the reference's) and the missing-data policy, checked before a reference is read,
    with the messages the reference gives them."""
    if aggregate is not None:
        check_aggregate(aggregate)
    check_missing_policy(missing)


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


# place's validator (the shape of scipy.stats.bootstrap's _bootstrap_iv): every argument of flasheval.place
# checked and the checked values returned; place, place_checkpoint and watch call it before any I/O.

PLACE_KEYWORDS: tuple[str, ...] = (
    "reference", "tokenizer", "identity", "plan", "budget", "seed", "aggregate", "missing", "n_parameters", "task_dir",
    "include_path", "num_fewshot", "engine", "output", "store", "progress", "force", "distributed")
"""The keywords of :func:`flasheval.place` (``tests/test_validation_first.py`` holds it to the signature)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaceArgs:
    """:func:`flasheval.place`'s arguments once checked (those the checks turn into other values)."""

    model: Model | None
    """The model resolved (``None``: the watcher's checkpoints, found later, all live)."""
    budget: Budget
    engine: EngineOptions
    live: LiveOptions | None
    """The live scoring options (``None`` for a replayed model)."""


def check_place(model: Any, *, tokenizer: Any = None, identity: str | None = None, **options: Any) -> PlaceArgs:
    """Every argument of :func:`flasheval.place` checked, in one line naming the first bad one; nothing is read.

    ``options``: :func:`flasheval.place`'s other keywords (an unknown one is a ``TypeError``, as it is for
    ``place``; :func:`flasheval.place_checkpoint` refuses it by name first). How the processes take part
    (``distributed``) is checked first, before the model's files are looked for, as at every entry.
    """
    check_distributed(options.get("distributed", "main"))
    resolved = resolve_model(model, tokenizer=tokenizer, identity=identity)
    return check_place_options(resolved, **options)


def check_place_options(
    model: Model | None,
    *,
    reference: Any = "helm_lite",
    plan: Any = "default",
    budget: Any = None,
    seed: Any = None,
    aggregate: Any = None,
    missing: Any = "complete-models",
    n_parameters: Any = None,
    task_dir: Any = None,
    include_path: Any = None,
    num_fewshot: Any = None,
    engine: Any = None,
    output: Any = None,
    store: Any = None,
    progress: Any = None,
    force: Any = False,
    distributed: Any = "main",
) -> PlaceArgs:
    """:func:`check_place` for a model already resolved (``None``: live checkpoints not found yet, the watcher's)."""
    check_distributed(distributed)
    check_progress(progress)
    check_n_parameters(n_parameters)
    check_output(output)
    check_output(store, field="--store")
    budget_ = resolve_budget(budget)
    engine_ = engine_options(engine)
    live = None
    if isinstance(model, ReplayModel):
        refuse_live_options("models only (replay: serves recorded scores)", task_dir=task_dir,
                            include_path=include_path, num_fewshot=num_fewshot, store=store)
        engine_.refuse(REPLAY, *engine_.given())
        check_seed(seed)
        refuse_time_budget(budget_)
    else:
        live = live_options(seed=seed, task_dir=task_dir, include_path=include_path, num_fewshot=num_fewshot,
                            engine=engine_)
        if model is not None:
            live.check_model(model)
        if isinstance(model, LoadedModel):  # a sharded model's forward is collective: "main" would hang
            check_sharded_placement(model.model, distributed)
    check_pool_options(aggregate, missing)
    check_reference_arg(reference)
    check_plan_arg(plan)
    check_flag(force, field="force")
    return PlaceArgs(model=model, budget=budget_, engine=engine_, live=live)
