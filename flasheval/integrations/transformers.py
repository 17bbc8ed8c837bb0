"""``PlacementCallback``: place the model a Hugging Face ``Trainer`` trains, every N steps or when it saves.

A ``transformers.TrainerCallback`` over :func:`flasheval.place_checkpoint`, the generic hook a hand-written
loop calls itself: at step ``N`` it places the model the Trainer holds (unwrapped as the engine unwraps it:
:func:`flasheval.engine.hf.in_memory.unwrap`), as checkpoint ``N`` of the run folder ``run``, and logs the
result through the Trainer's own ``log``, so the placement lands in ``state.log_history`` and reaches every
callback the Trainer reports to (``report_to``: W&B, TensorBoard, ...) as the Trainer is configured::

    trainer = Trainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    placement = attach(trainer, reference, run="runs/demo", every=50, plan="default")
    trainer.train()

The callback is made for its Trainer, as TRL's callbacks are (``PlacementCallback(reference, trainer=trainer,
...)`` then ``trainer.add_callback``; :func:`attach` does both): a callback is handed neither its Trainer nor
the others (the ``report_to`` integrations come first in the Trainer's list, so no ``on_log`` of a later
callback can add to what they receive), and the placement's metrics go through ``trainer.log``. A callback
without its Trainer is refused when it is made; one run by another Trainer than its own, when training begins.

Under the Trainer's data parallelism, ``distributed="main"`` (the default) places on the world's process
zero only, with no collective (the other processes carry on training and wait at the next all-reduce);
``"all"`` places on every process together, the examples split among them (a collective: each process's
callback calls it at the same step). A sharded model (FSDP, DeepSpeed ZeRO-3) computes every forward pass on
all processes together: with ``"main"`` it is refused in one line naming ``distributed="all"`` (when the
callback is made, and again as training begins, once the Trainer has wrapped the model). Importing this
module does not import transformers: the class is made on first use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flasheval.checks import check_count
from flasheval.engine.coordination.distributed import DISTRIBUTED, check_distributed
from flasheval.errors import InputError

__all__ = ["PlacementCallback", "attach", "placement_metrics", "METRIC_PREFIX"]

logger = logging.getLogger(__name__)

METRIC_PREFIX = "flasheval/"
"""What every logged name starts with."""


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


def _check_place_kwargs(place_kwargs: Mapping[str, Any]) -> None:
    """Refuse, when the callback is made rather than at the first placement, a keyword that
    :func:`flasheval.place_checkpoint` does not take or that the callback sets itself."""
    import inspect

    from flasheval.api import place, place_checkpoint

    known = {*inspect.signature(place_checkpoint).parameters, *inspect.signature(place).parameters}
    allowed = sorted(known - {*_DECIDED, "reference", "tokenizer", "distributed", "place_kwargs", "trainer"})
    for name in place_kwargs:
        if name in _DECIDED:
            raise InputError("set by the callback for each placement (the Trainer's model, its global_step, the "
                             "run's NAME/step-N)", field=name)
        if name not in allowed:
            raise InputError("not a keyword of flasheval.place_checkpoint", field=name, allowed=allowed)


class _PlacementHooks:
    """A ``transformers.TrainerCallback`` that places the model every ``every`` steps and/or when the Trainer saves.

    Parameters
    ----------
    reference
        The reference to place on (a name, a folder or a loaded reference), as :func:`flasheval.place` takes.
    trainer
        The ``transformers.Trainer`` (or a subclass: TRL's) that runs the callback: its model is placed and its
        ``log`` carries the metrics. Required (:func:`attach` makes the callback and adds it to the Trainer).
    run
        The run folder: every placement is one checkpoint of it, at the Trainer's ``global_step``
        (:func:`flasheval.read_run` reads it back, ``flasheval report RUN`` draws rank against step).
    every
        Place when ``global_step`` is a multiple of it (``on_step_end``).
    on_save
        Place when the Trainer saves a checkpoint (``on_save``), once per step whatever else asked.
    distributed
        ``"main"``: only the world's process zero places, no collective; ``"all"``: every process places
        together (collective; every process gets the same result). One process alone: the same result.
    tokenizer
        Default: the Trainer's ``processing_class``.
    **place_kwargs
        Every other keyword of :func:`flasheval.place_checkpoint` (``plan``, ``budget``, ``seed``,
        ``simultaneous``, ``task_dir``, ``progress``, ...), forwarded as is.

    Notes
    -----
    Add it to its Trainer (``trainer.add_callback``, or :func:`attach`); training refuses to start when another
    Trainer runs it. The model placed is the Trainer's ``model_wrapped`` (what the Trainer trains: DDP, FSDP,
    DeepSpeed's engine) unwrapped as the engine unwraps it, so an FSDP1 wrapper stays the runner (it gathers the
    parameters) and a sharded model is placed in lockstep under ``distributed="all"``; under ``"main"`` it is
    refused. :attr:`placements` holds what this process placed, by step.
    """

    def __init__(self, reference: Any, *, trainer: Any = None, run: str | Path, every: int | None = None,
                 on_save: bool = False, distributed: str = "main", tokenizer: Any = None,
                 **place_kwargs: Any) -> None:
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
        _check_place_kwargs(place_kwargs)
        if place_kwargs.get("max_seconds") is not None:  # checked before training starts, not at its first placement
            from flasheval.placement.results import Budget

            Budget(max_seconds=place_kwargs["max_seconds"])
            if getattr(place_kwargs.get("budget"), "max_seconds", None) is not None:
                raise InputError("given twice: as max_seconds and as budget.max_seconds; give it once",
                                 field="max_seconds")
        _check_trainer(trainer)
        if distributed == "main":
            _refuse_sharded(trainer)
        self.reference, self.run, self.every, self.on_save_checkpoint = reference, Path(run), every, on_save
        self.distributed, self.tokenizer, self.place_kwargs = distributed, tokenizer, dict(place_kwargs)
        self._trainer = trainer
        self._placements: dict[int, Any] = {}

    @property
    def trainer(self) -> Any:
        """The Trainer the callback was made for."""
        return self._trainer

    @property
    def placements(self) -> Mapping[int, Any]:
        """Every :class:`~flasheval.api.place.PlaceRun` this process got, by step (none on the other processes
        under ``distributed="main"``)."""
        return dict(self._placements)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Refuse, before the first step rather than at the first placement, to train under another Trainer than
        the callback's own (the placements would reach neither that Trainer's log history nor its trackers),
        with ``distributed="all"`` and no process group, or with ``"main"`` and a model the Trainer has sharded
        (on every process alike: the Trainer has wrapped the model by now)."""
        if not any(c is self for c in self._trainer.callback_handler.callbacks):
            raise InputError("the callback was made for another Trainer than the one that runs it: "
                             "attach(trainer, reference, run=...) makes it for a Trainer and adds it there",
                             field="trainer")
        check_distributed(self.distributed)
        if self.distributed == "main":
            _refuse_sharded(self._trainer)
        if self.distributed == "main" and state.is_world_process_zero and "max_seconds" not in self.place_kwargs:
            _note_waiting()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Place at every multiple of ``every``; with ``on_save``, also at a step the Trainer is about to save
        (its flow callback has set ``should_save``), before it writes the checkpoint, so that the checkpoint's
        ``trainer_state.json`` holds the placement (and ``resume_from_checkpoint`` keeps it in ``log_history``)."""
        if (self.every is not None and state.global_step % self.every == 0) or \
                (self.on_save_checkpoint and control.should_save):
            self._place(state, control, kwargs)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """With ``on_save``: place before an end-of-epoch save (``save_strategy="epoch"``), as at a step."""
        if self.on_save_checkpoint and control.should_save:
            self._place(state, control, kwargs)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """With ``on_save``: a save decided after the step's callbacks ran (``save_strategy="best"``) is placed
        now, and the placement written into the checkpoint's ``trainer_state.json`` as well."""
        if self.on_save_checkpoint and self._place(state, control, kwargs):
            _amend_saved_state(args, state)

    def _place(self, state: Any, control: Any, kwargs: dict[str, Any]) -> bool:
        """Place step ``global_step`` unless done already or another process places it; whether it placed."""
        step = state.global_step
        if step in self._placements or (self.distributed == "main" and not state.is_world_process_zero):
            return False
        from flasheval.api import place_checkpoint
        from flasheval.engine.hf.in_memory import unwrap

        if self.distributed == "main":
            _refuse_sharded(self._trainer)
        runner, _ = unwrap(self._trainer.model_wrapped)  # an FSDP1 wrapper stays: it gathers the parameters
        tokenizer = next((t for t in (self.tokenizer, kwargs.get("processing_class"), kwargs.get("tokenizer"))
                          if t is not None), None)
        if tokenizer is None:
            raise InputError("the Trainer has no processing_class: give the callback tokenizer=", field="tokenizer")
        start = time.perf_counter()
        result = place_checkpoint(runner, run=self.run, step=step, reference=self.reference,
                                  tokenizer=tokenizer, distributed=self.distributed, **self.place_kwargs)
        self._placements[step] = result
        _log_unsteered(self._trainer, control, placement_metrics(result, seconds=time.perf_counter() - start))
        return True


def attach(trainer: Any, reference: Any, *, run: str | Path, **options: Any) -> Any:
    """Make a :class:`PlacementCallback` for ``trainer``, add it to the Trainer's callbacks and return it.

    ``attach(trainer, reference, run=..., **options)`` is ``trainer.add_callback(PlacementCallback(reference,
    trainer=trainer, run=..., **options))``: ``options`` are the callback's (``every``, ``on_save``,
    ``distributed``, ``tokenizer``) and every other keyword of :func:`flasheval.place_checkpoint`, each refused in
    one line here, before training starts.

    Returns
    -------
    PlacementCallback
        The callback added: its :attr:`~PlacementCallback.placements` are what this process placed.
    """
    callback = _callback_class()(reference, trainer=trainer, run=run, **options)
    trainer.add_callback(callback)
    return callback


def _check_trainer(trainer: Any) -> None:
    """Refuse, in one line naming :func:`attach`, a callback made without the Trainer that runs it."""
    from transformers import Trainer

    if not isinstance(trainer, Trainer):
        got = "none" if trainer is None else type(trainer).__name__
        raise InputError(f"the callback needs the transformers.Trainer that runs it, got {got}: "
                         "attach(trainer, reference, run=...) makes it for the Trainer and adds it", field="trainer")


def _refuse_sharded(trainer: Any) -> None:
    """Refuse ``distributed="main"`` for a sharded model: its forward passes are collective (FSDP gathers the
    parameters from every process, as DeepSpeed ZeRO-3 does), so process zero alone would wait forever for the
    others. Sharded: the Trainer is set to wrap it in FSDP or ZeRO-3, or the model it holds is sharded already
    (:func:`~flasheval.engine.hf.in_memory.is_sharded` of it, unwrapped as the engine unwraps it)."""
    from flasheval.engine.hf.in_memory import check_sharded_placement, unwrap

    plugin = trainer.accelerator.state.deepspeed_plugin if trainer.is_deepspeed_enabled else None
    zero3 = plugin is not None and plugin.zero_stage == 3
    check_sharded_placement(unwrap(trainer.model_wrapped)[0], "main", sharded=trainer.is_fsdp_enabled or zero3)


def _note_waiting() -> None:
    """Say once, as training begins, what a ``"main"`` placement costs the other processes of a job (none alone)."""
    from flasheval.engine.coordination.process_group import caller_group

    group = caller_group()
    if group is not None and group[0] > 1:
        timeout = "its timeout" if group[1] is None else f"its timeout, {group[1]:.0f} s"
        logger.warning("note: PlacementCallback(distributed='main'): while process zero places, the other %d "
                       "process(es) wait in their next collective, and the process group ends the job after %s: give "
                       "max_seconds= below it to bound each placement, or distributed='all' to share the work",
                       group[0] - 1, timeout)


def _log_unsteered(trainer: Any, control: Any, metrics: dict[str, float]) -> None:
    """``trainer.log(metrics)`` (``log_history`` and every ``report_to`` integration), with every flag of the
    Trainer's ``control`` as it was before the call.

    The Trainer's ``on_log`` handler clears ``should_log``, and other callbacks' ``on_log`` may set flags too; the
    Trainer acts on them on every process alike (a logging step gathers the loss from all processes). Under
    ``distributed="main"`` only process zero logs a placement: a flag changed there alone would make it skip the
    step's loss gather while the others enter it (a collective mismatch), and even in one process the step's
    loss log would be lost. So a placement's log steers nothing: the flags are put back as they were.
    """
    from dataclasses import fields

    before = {flag.name: getattr(control, flag.name) for flag in fields(control)}
    try:
        trainer.log(metrics)
    finally:
        for name, value in before.items():
            setattr(control, name, value)


def _amend_saved_state(args: Any, state: Any) -> None:
    """Write ``state`` (with the placement just logged) over the ``trainer_state.json`` of checkpoint
    ``global_step``, on the process that writes the Trainer's checkpoints, where that file exists."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    path = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}" / "trainer_state.json"
    if args.should_save and path.is_file():
        state.save_to_json(str(path))


def __getattr__(name: str) -> Any:
    # The class derives from transformers.TrainerCallback; it is made when first asked for, so importing
    # flasheval (or this module) does not import transformers.
    if name != "PlacementCallback":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _callback_class()


def _callback_class() -> Any:
    """``PlacementCallback``, made once (from :class:`_PlacementHooks` and ``transformers.TrainerCallback``)."""
    if "PlacementCallback" in globals():
        return globals()["PlacementCallback"]
    from transformers import TrainerCallback

    made = type("PlacementCallback", (_PlacementHooks, TrainerCallback),
                {"__module__": __name__, "__qualname__": "PlacementCallback", "__doc__": _PlacementHooks.__doc__})
    globals()["PlacementCallback"] = made
    return made
