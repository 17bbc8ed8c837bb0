"""The API's arguments that name things: references, tier plans, budgets; checked at the entry.

Each takes either the value object or what names it (a reference name or folder, a plan name or
file) and refuses anything else in one line naming the argument, so the API and the command line
refuse the same values the same way.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from flasheval.errors import InputError
from flasheval.placement.live_scoring import LiveOptions
from flasheval.placement.results import Budget
from flasheval.placement.tiers import TierPlan, load_tier_plan
from flasheval.reference import ReferenceLeaderboard, load_reference

__all__ = ["resolve_reference", "resolve_plan", "resolve_budget", "check_n_parameters", "live_options",
           "refuse_live_options"]


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
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not (math.isfinite(value) and value > 0)):
        raise InputError(f"must be a positive number, got {value!r}", field="--n-parameters")



def live_options(*, seed: Any, dtype: Any, task_dir: Any, include_path: Any, num_fewshot: Any, device: Any,
                 batch_size: Any) -> LiveOptions:
    """The options of scoring live models (validated by :class:`~flasheval.placement.live_scoring.LiveOptions`)."""
    return LiveOptions(seed=seed, dtype=dtype, task_dir=None if task_dir is None else str(task_dir),
                       include_path=None if include_path is None else str(Path(include_path).resolve()),
                       num_fewshot=num_fewshot, device=device, batch_size=32 if batch_size is None else batch_size)


def refuse_live_options(why: str, **options: Any) -> None:
    """Refuse, in one line naming it, the first live-only option given (not ``None``) to a replayed model."""
    for name, value in options.items():
        if value is not None:
            raise InputError(f"applies to live {why}", field="--" + name.replace("_", "-"))
