"""What every training-framework callback shares: its options checked when it is made, the one placement call,
and the numbers a placement logs.

The Trainer callback (:mod:`~flasheval.integrations.transformers`) and the Lightning callback
(:mod:`~flasheval.integrations.lightning`) differ only in how they find the model, the step and the loggers, and
in the hooks that call them; each is a thin shell over :func:`place_step`, which is
:func:`flasheval.place_checkpoint` of the model at that step, timed, with the metrics it logs. Neither the
framework nor torch is imported here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flasheval.checks import check_count
from flasheval.engine.coordination.distributed import DISTRIBUTED
from flasheval.errors import InputError

__all__ = ["METRIC_PREFIX", "METRIC_NAMES", "placement_metrics", "check_options", "place_step", "note_waiting"]

logger = logging.getLogger(__name__)

METRIC_PREFIX = "flasheval/"
"""What every logged name starts with."""

METRIC_NAMES = ("rank", "rank_lo", "rank_hi", "tier", "examples", "tokens", "resolved", "seconds")
"""Every name a placement may log, after :data:`METRIC_PREFIX` (``tier`` and ``tokens`` only where known)."""


def placement_metrics(run: Any, *, seconds: float) -> dict[str, float]:
    """The numbers a placement logs: ``flasheval/rank``, ``rank_lo``, ``rank_hi``, ``tier``, ``examples``,
    ``tokens``, ``resolved`` and ``seconds``.

    Parameters
    ----------
    run
        The :class:`~flasheval.api.place.PlaceRun` of one checkpoint.
    seconds
        How long the placement held training up (wall seconds of the call).

    Returns
    -------
    dict
        Numbers only (trackers plot numbers): ``tier`` is the tier's best rank (tier ``"2-4"`` logs 2; the
        label is in the run record), ``resolved`` is 1 when the tier's resolution was met and 0 when the
        budget ran out first; ``tokens`` is left out when the scorer counts none.

    Examples
    --------
    >>> from types import SimpleNamespace as S
    >>> placement = S(rank=2, interval=(1, 3), tier="2-4", status="resolved", compute=S(n_examples=18, n_tokens=900))
    >>> placement_metrics(S(placement=placement), seconds=1.5)["flasheval/tier"]
    2
    """
    placement = run.placement
    values: dict[str, float] = {"rank": placement.rank, "rank_lo": placement.interval[0],
                                "rank_hi": placement.interval[1], "examples": placement.compute.n_examples,
                                "resolved": int(placement.status == "resolved"), "seconds": round(seconds, 3)}
    if placement.tier is not None:
        values["tier"] = int(placement.tier.split("-")[0].rstrip("+"))
    if placement.compute.n_tokens is not None:
        values["tokens"] = placement.compute.n_tokens
    return {METRIC_PREFIX + name: value for name, value in values.items()}


_DECIDED = ("model", "run", "step", "identity", "output", "store")
"""What the callback (or the run folder) sets for each placement: the model held, the step, ``NAME/step-N``."""


def check_options(*, run: Any, every: Any, on_save: Any, distributed: Any, place_kwargs: Mapping[str, Any],
                  own: tuple[str, ...], decided: str) -> None:
    """Refuse, in one line when a callback is made (before training starts, not at its first placement), a bad
    ``run``, ``every``, ``on_save`` or ``distributed``, neither ``every`` nor ``on_save``, and a keyword of
    ``place_kwargs`` that :func:`flasheval.place_checkpoint` does not take (``own``: the callback's own keywords,
    which never reach it) or that the callback sets itself (``decided`` says what it sets, for the message)."""
    if every is not None:
        check_count(every, field="every")
    if not isinstance(on_save, bool):
        raise InputError(f"must be True or False, got {on_save!r}", field="on_save")
    if every is None and not on_save:
        raise InputError("give every=N (place every N steps) or on_save=True (place every saved checkpoint)",
                         field="every")
    if distributed not in DISTRIBUTED:
        raise InputError(f"unknown value {distributed!r}", field="distributed", allowed=DISTRIBUTED)
    if not isinstance(run, (str, Path)):
        raise InputError(f"expected a folder, got {type(run).__name__}", field="run")
    _check_place_kwargs(place_kwargs, own, decided)
    if place_kwargs.get("max_seconds") is not None:  # checked before training starts, not at its first placement
        from flasheval.placement.results import Budget

        Budget(max_seconds=place_kwargs["max_seconds"])
        if getattr(place_kwargs.get("budget"), "max_seconds", None) is not None:
            raise InputError("given twice: as max_seconds and as budget.max_seconds; give it once",
                             field="max_seconds")


def _check_place_kwargs(place_kwargs: Mapping[str, Any], own: tuple[str, ...], decided: str) -> None:
    """Refuse a keyword that :func:`flasheval.place_checkpoint` does not take or that the callback sets itself."""
    import inspect

    from flasheval.api import place, place_checkpoint

    known = {*inspect.signature(place_checkpoint).parameters, *inspect.signature(place).parameters}
    allowed = sorted(known - {*_DECIDED, *own, "reference", "tokenizer", "distributed", "place_kwargs"})
    for name in place_kwargs:
        if name in _DECIDED:
            raise InputError(f"set by the callback for each placement ({decided})", field=name)
        if name not in allowed:
            raise InputError("not a keyword of flasheval.place_checkpoint", field=name, allowed=allowed)


def place_step(model: Any, *, run: Path, step: int, reference: Any, tokenizer: Any, distributed: str,
               place_kwargs: Mapping[str, Any]) -> tuple[Any, dict[str, float]]:
    """``flasheval.place_checkpoint`` of the model a framework trains, as checkpoint ``step`` of ``run``: the
    :class:`~flasheval.api.place.PlaceRun` and its :func:`placement_metrics` (``seconds``: the whole call).

    ``model`` is unwrapped as the engine unwraps every model (:func:`flasheval.engine.hf.in_memory.unwrap`: DDP and
    DeepSpeed's engine give their inner module, an FSDP1 wrapper stays the runner: it gathers the parameters).
    Collective under ``distributed="all"`` (every process calls it at the same step), not under ``"main"``.
    """
    from flasheval.api import place_checkpoint
    from flasheval.engine.hf.in_memory import unwrap

    runner, _ = unwrap(model)
    start = time.perf_counter()
    result = place_checkpoint(runner, run=run, step=step, reference=reference, tokenizer=tokenizer,
                              distributed=distributed, **place_kwargs)
    return result, placement_metrics(result, seconds=time.perf_counter() - start)


def note_waiting(callback: str) -> None:
    """Say once, as training begins, what a ``"main"`` placement costs the other processes of a job (none alone)."""
    from flasheval.engine.coordination.process_group import caller_group

    group = caller_group()
    if group is not None and group[0] > 1:
        timeout = "its timeout" if group[1] is None else f"its timeout, {group[1]:.0f} s"
        logger.warning("note: %s(distributed='main'): while process zero places, the other %d "
                       "process(es) wait in their next collective, and the process group ends the job after %s: give "
                       "max_seconds= below it to bound each placement, or distributed='all' to share the work",
                       callback, group[0] - 1, timeout)
