"""The pool a sweep ranks its checkpoints against: which datasets, which reference models stay in it.

:func:`restrict` keeps the datasets a sweep needs, :func:`hold_out` takes the swept checkpoints that are
reference models out of the pool, :func:`spread_models` picks the models of ``sweep --backtest N``, and
:func:`check_token_budget` refuses a token or FLOPs budget on a reference without token counts.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from flasheval.errors import InputError, UnknownNameError
from flasheval.placement.results import Budget
from flasheval.reference.leaderboard import ReferenceLeaderboard

__all__ = ["spread_models", "restrict", "hold_out", "check_token_budget"]


def spread_models(reference: ReferenceLeaderboard, n: int) -> list[str]:
    """``n`` reference models spread evenly over the full-data ranking (best and worst included).

    Examples
    --------
    >>> from flasheval.reference import load_reference
    >>> spread_models(load_reference("helm_lite"), 2)[0]
    'anthropic/claude-3-5-sonnet-20240620'
    """
    if not 1 <= n <= reference.n_models - 2:
        raise InputError(f"--backtest needs 1 to {reference.n_models - 2} models (2 must stay in the pool), got {n}",
                         field="--backtest")
    ranking = [r.model_id for r in reference.ranking()]
    picks = np.unique(np.round(np.linspace(0, len(ranking) - 1, n)).astype(int))
    return [ranking[i] for i in picks]


def restrict(reference: ReferenceLeaderboard, datasets: list[str] | None) -> ReferenceLeaderboard:
    """``reference`` with only ``datasets`` (in that order; all when ``None``); an unknown name is refused."""
    if not datasets:
        return reference
    keep = []
    for name in datasets:
        if name not in reference.dataset_names:
            raise UnknownNameError(f"dataset in reference {reference.name!r}", name, reference.dataset_names,
                                   field="--datasets")
        keep.append(reference.dataset_names.index(name))
    return replace(reference, dataset_names=tuple(reference.dataset_names[i] for i in keep),
                   example_ids=tuple(reference.example_ids[i] for i in keep),
                   scores=tuple(reference.scores[i] for i in keep), n_tokens=tuple(reference.n_tokens[i] for i in keep))


def hold_out(full: ReferenceLeaderboard, model_ids: list[str]) -> tuple[ReferenceLeaderboard, list[str]]:
    """The pool without the swept checkpoints that are reference models, and those checkpoints.

    A sweep compares every checkpoint with the same pool, so a checkpoint that is also a
    reference model leaves it; at least 2 reference models must remain (one line otherwise).
    """
    held = [m for m in model_ids if m in full.model_ids]
    pool = full.without(*held) if held else full
    if pool.n_models < 2:
        raise InputError(f"holding out {len(held)} checkpoints leaves fewer than 2 reference models", field="--models")
    return pool, held


def check_token_budget(reference: ReferenceLeaderboard, budget: Budget) -> None:
    """Refuse a token or FLOPs budget on a reference without token counts."""
    if budget.max_tokens is not None or budget.max_flops is not None:
        if any(t is None for t in reference.n_tokens):
            raise InputError(f"reference {reference.name!r} records no token counts, so a token or FLOPs budget "
                             "cannot be checked; use --budget-examples",
                             field="--budget-tokens" if budget.max_tokens is not None else "--budget-flops")
